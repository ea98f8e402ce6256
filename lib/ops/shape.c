/* shape.c - copies that move elements between layouts: permute, transpose, cat and slice. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "autograd.h"
#include "common.h"
#include "launch.h"
#include "ndrange.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

/* A copy of an up-to-8-D block: element c goes from in[ioff + c.istr] to out[ooff + c.ostr]. */
typedef struct copy_desc {
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    int64_t istr[KILN_MAX_DIMS];
    int64_t ostr[KILN_MAX_DIMS];
    int64_t ioff, ooff;
} copy_desc;

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d];
    }
}

/* Drop size-1 dimensions and merge neighbours that are contiguous on both sides, so the kernel
 * does as few divisions per element as the layout allows. */
static void simplify(copy_desc *c)
{
    int m = 0;
    for (int d = 0; d < c->ndim; d++) {
        if (c->dims[d] == 1)
            continue;
        if (m > 0 && c->istr[m - 1] == c->istr[d] * c->dims[d] &&
            c->ostr[m - 1] == c->ostr[d] * c->dims[d]) {
            c->dims[m - 1] *= c->dims[d];
            c->istr[m - 1] = c->istr[d];
            c->ostr[m - 1] = c->ostr[d];
            continue;
        }
        c->dims[m] = c->dims[d];
        c->istr[m] = c->istr[d];
        c->ostr[m] = c->ostr[d];
        m++;
    }
    c->ndim = m;
}

#define TILE 16 /* KILN_TILE in shape.cl */

/* Whether the innermost two dimensions swap contiguity (in along the first, out along the
 * second), the case kiln_transpose_tiles serves. */
static bool is_tile_transpose(const copy_desc *c, const kiln__kernel *k)
{
    int a = c->ndim - 2, b = c->ndim - 1;
    return c->ndim >= 2 && c->istr[a] == 1 && c->ostr[b] == 1 && k->wg_size >= (size_t)TILE * TILE;
}

static kiln_status launch_tiles(kiln__kernel *k, const kiln_tensor *in, kiln_tensor *out,
                                const copy_desc *c, int64_t ioff, int64_t ooff, const char *op)
{
    int a = c->ndim - 2, b = c->ndim - 1, o = c->ndim - 3;
    int64_t d0 = o >= 0 ? c->dims[o] : 1, is0 = o >= 0 ? c->istr[o] : 0;
    int64_t os0 = o >= 0 ? c->ostr[o] : 0;
    size_t global[3] = {(size_t)(c->dims[a] + TILE - 1) / TILE * TILE,
                        (size_t)(c->dims[b] + TILE - 1) / TILE * TILE, (size_t)d0};
    size_t local[3] = {TILE, TILE, 1};
    kiln_arg args[] = {kiln_arg_tensor(in),      kiln_arg_tensor(out),    kiln_arg_i64(ioff),
                       kiln_arg_i64(ooff),       kiln_arg_i64(d0),        kiln_arg_i64(c->dims[a]),
                       kiln_arg_i64(c->dims[b]), kiln_arg_i64(is0),       kiln_arg_i64(c->istr[b]),
                       kiln_arg_i64(os0),        kiln_arg_i64(c->ostr[a])};
    return kiln__kernel_launch(in->dev, k, op, 3, global, local, 11, args);
}

/* One launch over the innermost three dimensions at the given offsets. */
static kiln_status launch_block(kiln__kernel *k, const kiln_tensor *in, kiln_tensor *out,
                                const copy_desc *c, int64_t ioff, int64_t ooff, const char *op)
{
    int64_t d[3], is[3], os[3];
    for (int j = 0; j < 3; j++) {
        int src = c->ndim - 3 + j;
        d[j] = src >= 0 ? c->dims[src] : 1;
        is[j] = src >= 0 ? c->istr[src] : 0;
        os[j] = src >= 0 ? c->ostr[src] : 0;
    }
    size_t global[3] = {(size_t)d[2], (size_t)d[1], (size_t)d[0]}, local[3];
    kiln__fixed_ndrange(k->wg_size, 3, global, local);
    kiln_arg args[] = {kiln_arg_tensor(in), kiln_arg_tensor(out), kiln_arg_i64(ioff),
                       kiln_arg_i64(ooff),  kiln_arg_i64(d[0]),   kiln_arg_i64(d[1]),
                       kiln_arg_i64(d[2]),  kiln_arg_i64(is[0]),  kiln_arg_i64(is[1]),
                       kiln_arg_i64(is[2]), kiln_arg_i64(os[0]),  kiln_arg_i64(os[1]),
                       kiln_arg_i64(os[2])};
    return kiln__kernel_launch(in->dev, k, op, 3, global, local, 13, args);
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The innermost three dimensions in launches whose NDRange dimensions 1 and 2 stay within
 * KILN__MAX_GROUPS_YZ groups: dimension 1 is b (ndim - 1) for tiles, ndim - 2 otherwise;
 * dimension 2 is ndim - 3. */
static kiln_status launch_pieces(kiln__kernel *k, bool tiles, const kiln_tensor *in,
                                 kiln_tensor *out, const copy_desc *c, int64_t ioff, int64_t ooff,
                                 const char *op)
{
    int yd = tiles ? c->ndim - 1 : c->ndim - 2, zd = c->ndim - 3;
    int64_t ylim = tiles ? (int64_t)KILN__MAX_GROUPS_YZ * TILE : KILN__MAX_GROUPS_YZ;
    int64_t ny = yd >= 0 ? c->dims[yd] : 1, nz = zd >= 0 ? c->dims[zd] : 1;
    copy_desc piece = *c;
    kiln_status s = KILN_OK;
    for (int64_t z = 0; s == KILN_OK && z < nz; z += KILN__MAX_GROUPS_YZ) {
        for (int64_t y = 0; s == KILN_OK && y < ny; y += ylim) {
            int64_t io = ioff, oo = ooff;
            if (zd >= 0) {
                piece.dims[zd] = min64(KILN__MAX_GROUPS_YZ, nz - z);
                io += z * c->istr[zd];
                oo += z * c->ostr[zd];
            }
            if (yd >= 0) {
                piece.dims[yd] = min64(ylim, ny - y);
                io += y * c->istr[yd];
                oo += y * c->ostr[yd];
            }
            s = tiles ? launch_tiles(k, in, out, &piece, io, oo, op)
                      : launch_block(k, in, out, &piece, io, oo, op);
        }
    }
    return s;
}

static kiln_status strided_copy(const kiln_tensor *in, kiln_tensor *out, copy_desc *c,
                                const char *op)
{
    int64_t n = 1;
    for (int d = 0; d < c->ndim; d++)
        n *= c->dims[d];
    if (n == 0)
        return KILN_OK;
    simplify(c);
    char defs[64];
    snprintf(defs, sizeof defs, "-DKILN_E=%s", kiln__dtype_cl_uint(kiln_dtype_size(in->dtype)));
    kiln__kernel *k, *kt;
    kiln_status s = kiln__builtin_kernel(in->dev, "shape", defs, "kiln_strided_copy", op, &k);
    if (s == KILN_OK)
        s = kiln__builtin_kernel(in->dev, "shape", defs, "kiln_transpose_tiles", op, &kt);
    bool tiles = s == KILN_OK && is_tile_transpose(c, kt);
    /* Dimensions outside the innermost three are walked here, one launch per coordinate. */
    int outer = c->ndim > 3 ? c->ndim - 3 : 0;
    int64_t coord[KILN_MAX_DIMS] = {0};
    while (s == KILN_OK) {
        int64_t ioff = c->ioff, ooff = c->ooff;
        for (int d = 0; d < outer; d++) {
            ioff += coord[d] * c->istr[d];
            ooff += coord[d] * c->ostr[d];
        }
        s = launch_pieces(tiles ? kt : k, tiles, in, out, c, ioff, ooff, op);
        int d = outer - 1;
        while (d >= 0 && ++coord[d] == c->dims[d])
            coord[d--] = 0;
        if (d < 0)
            break;
    }
    return s;
}

/* The tensor a copy of xs[0..n-1] goes to: `given` after checking its dtype and shape and that
 * it shares no memory with an input (the copy reads them while writing it), else a new one. */
static kiln_status target(const kiln_tensor *const *xs, int n, int ndim, const int64_t *shape,
                          kiln_tensor *given, const char *op, kiln_tensor **y)
{
    const kiln_tensor *x = xs[0];
    if (!given)
        return kiln__tensor_new(x->dev, x->dtype, ndim, shape, op, y);
    kiln_status s = kiln__check_out(op, given, x->dev, x->dtype, ndim, shape);
    if (s == KILN_OK)
        s = kiln__check_not_aliased(op, given, n, xs);
    if (s == KILN_OK)
        *y = given;
    return s;
}

/* Copy x into `given` or a new tensor of the given shape (*out). */
static kiln_status copy_to(const kiln_tensor *x, int ndim, const int64_t *shape, copy_desc *c,
                           kiln_tensor *given, const char *op, kiln_tensor **out)
{
    kiln_tensor *y = NULL;
    kiln_status s = target(&x, 1, ndim, shape, given, op, &y);
    if (s != KILN_OK)
        return s;
    return kiln__finish(strided_copy(x, y, c, op), y, given, out);
}

/* The tensor checks of every form: x, and for the _out forms `given` on x's device (given_arg:
 * its argument number, for the message). */
static kiln_status start(const kiln_tensor *x, kiln_tensor *given, int given_arg, kiln_tensor **out,
                         const char *op)
{
    if (!given && !out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    if (out)
        *out = NULL;
    kiln_status s = kiln__check_tensor(x, op, "x");
    if (s != KILN_OK || !given)
        return s;
    if ((s = kiln__check_tensor(given, op, "out")) != KILN_OK)
        return s;
    const kiln_tensor *ts[5] = {x}; /* given_arg <= 5 */
    ts[given_arg - 1] = given;
    return kiln__same_device(op, given_arg, ts, NULL);
}

static kiln_status permute(const kiln_tensor *x, const int *perm, kiln_tensor *given, int given_arg,
                           kiln_tensor **out, const char *op)
{
    kiln_status s = start(x, given, given_arg, out, op);
    if (s != KILN_OK)
        return s;
    if (!perm)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: perm is NULL", op);
    bool seen[KILN_MAX_DIMS] = {false};
    copy_desc c = {.ndim = x->ndim};
    int64_t xstr[KILN_MAX_DIMS];
    contiguous_strides(x->ndim, x->shape, xstr);
    for (int k = 0; k < x->ndim; k++) {
        int a = perm[k] < 0 ? perm[k] + x->ndim : perm[k];
        if (a < 0 || a >= x->ndim || seen[a])
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: perm[%d] = %d is %s for a %d-D tensor; perm must list each "
                               "dimension 0..%d exactly once",
                               op, k, perm[k], a < 0 || a >= x->ndim ? "out of range" : "repeated",
                               x->ndim, x->ndim - 1);
        seen[a] = true;
        c.dims[k] = x->shape[a];
        c.istr[k] = xstr[a];
    }
    contiguous_strides(c.ndim, c.dims, c.ostr);
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, c.dims, sizeof shape);
    return copy_to(x, x->ndim, shape, &c, given, op, out);
}

/* The autograd hook of permute and transpose: perm with negative entries resolved. */
static kiln_status record_permute(kiln_status s, const char *op, const kiln_tensor *x,
                                  const int *perm, kiln_tensor **out)
{
    kiln__ag_args args = {0};
    for (int d = 0; s == KILN_OK && d < x->ndim; d++)
        args.perm[d] = perm[d] < 0 ? perm[d] + x->ndim : perm[d];
    return kiln__ag_record(s, op, KILN__AG_PERMUTE, &args, 1, &x, out);
}

kiln_status kiln_permute(const kiln_tensor *x, const int *perm, kiln_tensor **out)
{
    return record_permute(permute(x, perm, NULL, 0, out, "kiln_permute"), "kiln_permute", x, perm,
                          out);
}

kiln_status kiln_permute_out(const kiln_tensor *x, const int *perm, kiln_tensor *out)
{
    return permute(x, perm, out, 3, NULL, "kiln_permute_out");
}

static kiln_status transpose(const kiln_tensor *x, kiln_tensor *given, kiln_tensor **out,
                             const char *op)
{
    kiln_status s = start(x, given, 2, out, op);
    if (s != KILN_OK)
        return s;
    if (x->ndim < 2)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: a %d-D tensor has no last two dimensions to swap; reshape it to "
                           "2-D first",
                           op, x->ndim);
    int perm[KILN_MAX_DIMS] = {0};
    for (int d = 0; d < x->ndim; d++)
        perm[d] = d;
    perm[x->ndim - 2] = x->ndim - 1;
    perm[x->ndim - 1] = x->ndim - 2;
    s = permute(x, perm, given, 2, out, op);
    return given ? s : record_permute(s, op, x, perm, out);
}

kiln_status kiln_transpose(const kiln_tensor *x, kiln_tensor **out)
{
    return transpose(x, NULL, out, "kiln_transpose");
}

kiln_status kiln_transpose_out(const kiln_tensor *x, kiln_tensor *out)
{
    return transpose(x, out, NULL, "kiln_transpose_out");
}

static kiln_status normalize_axis(int axis, int ndim, const char *op, int *out)
{
    if (axis < -ndim || axis >= ndim)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: axis %d is out of range for a %d-D tensor; use %d..%d", op, axis,
                           ndim, -ndim, ndim - 1);
    *out = axis < 0 ? axis + ndim : axis;
    return KILN_OK;
}

/* Same dtype, same rank, same shape except along axis a, as xs[0]. */
static kiln_status check_cat_parts(const kiln_tensor *const *xs, int n, int a, const char *op)
{
    const kiln_tensor *x0 = xs[0];
    for (int i = 1; i < n; i++) {
        const kiln_tensor *x = xs[i];
        if (x->dtype != x0->dtype)
            return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                               "%s: tensor %d is %s but tensor 0 is %s; cast them to one "
                               "dtype first",
                               op, i, kiln_dtype_name(x->dtype), kiln_dtype_name(x0->dtype));
        bool fits = x->ndim == x0->ndim;
        for (int d = 0; fits && d < x->ndim; d++)
            fits = d == a || x->shape[d] == x0->shape[d];
        if (!fits) {
            char name[32], hint[64];
            snprintf(name, sizeof name, "tensor %d", i);
            snprintf(hint, sizeof hint, "; they must be equal outside axis %d", a);
            return kiln__shape_mismatch(op, "tensor 0", x0->ndim, x0->shape, name, x->ndim,
                                        x->shape, hint);
        }
    }
    return KILN_OK;
}

/* out (the _out form's `given`) must be on the tensors' device. */
static kiln_status check_cat_out(const kiln_tensor *x0, const kiln_tensor *given, const char *op)
{
    kiln_status s = kiln__check_tensor(given, op, "out");
    if (s == KILN_OK && given->dev != x0->dev)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                           "%s: expected out on the tensors' device, got %s for the tensors and "
                           "%s for out; copy with kiln_tensor_to()",
                           op, x0->dev->info.spec, given->dev->info.spec);
    return s;
}

static kiln_status check_cat(const kiln_tensor *const *xs, int n, int axis, kiln_tensor *given,
                             kiln_tensor **out, const char *op, int *a)
{
    if (!given && !out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    if (out)
        *out = NULL;
    if (!xs || n < 1)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: needs at least one tensor (xs %s, n = %d)", op,
                           xs ? "given" : "is NULL", n);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "tensor %d", i);
        kiln_status s = kiln__check_tensor(xs[i], op, name);
        if (s != KILN_OK)
            return s;
    }
    kiln_status s = kiln__same_device(op, n, xs, NULL);
    if (s == KILN_OK && given)
        s = check_cat_out(xs[0], given, op);
    if (s == KILN_OK)
        s = normalize_axis(axis, xs[0]->ndim, op, a);
    if (s == KILN_OK)
        s = check_cat_parts(xs, n, *a, op);
    return s;
}

/* The products of x's dimensions before and after axis a. Both fit in int64_t for a valid
 * tensor; checked all the same. */
static kiln_status split_at(const kiln_tensor *x, int a, const char *op, int64_t *outer,
                            int64_t *inner)
{
    *outer = *inner = 1;
    bool ok = true;
    for (int d = 0; ok && d < x->ndim; d++) {
        if (d != a)
            ok = kiln__dim_mul(d < a ? *outer : *inner, x->shape[d], d < a ? outer : inner);
    }
    if (!ok)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the dimensions around axis %d multiply past INT64_MAX (overflow)",
                           op, a);
    return KILN_OK;
}

/* The length of the result's axis a: the sum of the tensors' lengths there, checked. */
static kiln_status cat_length(const kiln_tensor *const *xs, int n, int a, const char *op,
                              int64_t *total)
{
    *total = 0;
    for (int i = 0; i < n; i++) {
        if (!kiln__dim_add(*total, xs[i]->shape[a], total))
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: the %d tensors' lengths along axis %d add up to more than "
                               "%" PRId64 " (overflow); split the concatenation",
                               op, n, a, INT64_MAX);
    }
    return KILN_OK;
}

static kiln_status cat(const kiln_tensor *const *xs, int n, int axis, kiln_tensor *given,
                       kiln_tensor **out, const char *op)
{
    int a = 0;
    const kiln_tensor *x0 = NULL;
    int64_t shape[KILN_MAX_DIMS], outer = 1, inner = 1, total = 0;
    kiln_status s = check_cat(xs, n, axis, given, out, op, &a);
    if (s == KILN_OK)
        s = split_at(x0 = xs[0], a, op, &outer, &inner);
    if (s == KILN_OK)
        s = cat_length(xs, n, a, op, &total);
    if (s != KILN_OK)
        return s;
    memcpy(shape, x0->shape, sizeof shape);
    shape[a] = total;
    kiln_tensor *y = NULL;
    s = target(xs, n, x0->ndim, shape, given, op, &y);
    if (s != KILN_OK)
        return s;
    int64_t off = 0;
    for (int i = 0; s == KILN_OK && i < n; i++) {
        int64_t len = xs[i]->shape[a];
        copy_desc c = {.ndim = 3,
                       .dims = {outer, len, inner},
                       .istr = {len * inner, inner, 1},
                       .ostr = {total * inner, inner, 1},
                       .ooff = off * inner};
        s = strided_copy(xs[i], y, &c, op);
        off += len;
    }
    return kiln__finish(s, y, given, out);
}

kiln_status kiln_cat(const kiln_tensor *const *xs, int n, int axis, kiln_tensor **out)
{
    kiln_status s = cat(xs, n, axis, NULL, out, "kiln_cat");
    kiln__ag_args args = {.axis = s == KILN_OK && axis < 0 ? axis + xs[0]->ndim : axis};
    return kiln__ag_record(s, "kiln_cat", KILN__AG_CAT, &args, n, xs, out);
}

kiln_status kiln_cat_out(const kiln_tensor *const *xs, int n, int axis, kiln_tensor *out)
{
    return cat(xs, n, axis, out, NULL, "kiln_cat_out");
}

static kiln_status slice(const kiln_tensor *x, int axis, int64_t start_, int64_t end,
                         kiln_tensor *given, kiln_tensor **out, const char *op)
{
    int a = 0;
    kiln_status s = start(x, given, 5, out, op);
    if (s == KILN_OK)
        s = normalize_axis(axis, x->ndim, op, &a);
    if (s != KILN_OK)
        return s;
    int64_t len = x->shape[a];
    int64_t b = start_ < 0 ? start_ + len : start_;
    int64_t e = end < 0 ? end + len : end;
    if (b < 0 || e > len || b > e)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: [%lld, %lld) is not a range within axis %d of length %lld; "
                           "need 0 <= start <= end <= %lld (negative values count from the end, "
                           "no clamping)",
                           op, (long long)start_, (long long)end, axis, (long long)len,
                           (long long)len);
    int64_t outer = 1, inner = 1, shape[KILN_MAX_DIMS];
    s = split_at(x, a, op, &outer, &inner);
    if (s != KILN_OK)
        return s;
    memcpy(shape, x->shape, sizeof shape);
    shape[a] = e - b;
    copy_desc c = {.ndim = 3,
                   .dims = {outer, e - b, inner},
                   .istr = {len * inner, inner, 1},
                   .ostr = {(e - b) * inner, inner, 1},
                   .ioff = b * inner};
    return copy_to(x, x->ndim, shape, &c, given, op, out);
}

kiln_status kiln_slice(const kiln_tensor *x, int axis, int64_t start_, int64_t end,
                       kiln_tensor **out)
{
    kiln_status s = slice(x, axis, start_, end, NULL, out, "kiln_slice");
    if (s != KILN_OK)
        return s;
    int64_t len = x->shape[axis < 0 ? axis + x->ndim : axis];
    kiln__ag_args args = {.axis = axis < 0 ? axis + x->ndim : axis,
                          .start = start_ < 0 ? start_ + len : start_,
                          .end = end < 0 ? end + len : end};
    return kiln__ag_record(s, "kiln_slice", KILN__AG_SLICE, &args, 1, &x, out);
}

kiln_status kiln_slice_out(const kiln_tensor *x, int axis, int64_t start_, int64_t end,
                           kiln_tensor *out)
{
    return slice(x, axis, start_, end, out, NULL, "kiln_slice_out");
}
