/* index.c - ops that pick elements by index: index_select (embedding lookups), gather and
 * one_hot. Kernels in lib/kernels/index.cl. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "autograd.h"
#include "common.h"
#include "index.h"
#include "launch.h"
#include "ndrange.h"
#include "program.h"
#include "queue.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

/* The program of index.cl for elements of dtype (bit copies) and indices of idx_dtype. */
static kiln_status index_kernel(kiln_device *dev, kiln_dtype dtype, kiln_dtype idx_dtype,
                                const char *name, const char *op, kiln__kernel **k)
{
    char defs[128];
    snprintf(defs, sizeof defs, "-DKILN_E=%s -DKILN_I=%s",
             kiln__dtype_cl_uint(kiln_dtype_size(dtype)), idx_dtype == KILN_I32 ? "int" : "long");
    return kiln__builtin_kernel(dev, "index", defs, name, op, k);
}

static kiln_status check_index_dtype(const kiln_tensor *idx, const char *op, const char *name)
{
    if (idx->dtype == KILN_I32 || idx->dtype == KILN_I64)
        return KILN_OK;
    return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: %s is %s; indices must be i32 or i64", op,
                       name, kiln_dtype_name(idx->dtype));
}

/* axis in [-ndim, ndim) as a dimension of x; KILN_ERR_INVALID_ARGUMENT otherwise. */
static kiln_status resolve_axis(const kiln_tensor *x, int axis, const char *op, int *out)
{
    if (axis < -x->ndim || axis >= x->ndim) {
        char s[160];
        kiln__shape_str(s, sizeof s, x->ndim, x->shape);
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: axis %d is out of range for x of shape %s (%d to %d)", op, axis, s,
                           -x->ndim, x->ndim - 1);
    }
    *out = axis < 0 ? axis + x->ndim : axis;
    return KILN_OK;
}

/* The checks every form shares: x and idx valid, on one device, idx of an index dtype, the
 * axis resolved; for the _out forms, `given` (on that device, of x's dtype, not x or idx). */
static kiln_status start(const char *op, const kiln_tensor *x, const kiln_tensor *idx,
                         const char *idx_name, int axis, kiln_tensor *given, kiln_tensor **out,
                         int *a)
{
    if (!given && !out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    if (out)
        *out = NULL;
    kiln_status s =
        kiln__check_tensors(op, 3, given ? 3 : 2, (const kiln_tensor *[]){x, idx, given},
                            (const char *const[]){"x", idx_name, "out"}, NULL);
    if (s == KILN_OK)
        s = check_index_dtype(idx, op, idx_name);
    if (s == KILN_OK)
        s = resolve_axis(x, axis, op, a);
    if (s == KILN_OK && given)
        s = kiln__check_not_aliased(op, given, 2, (const kiln_tensor *[]){x, idx});
    return s;
}

/* The result tensor: `given` checked against (x's dtype, shape), or a new one. */
static kiln_status result(const char *op, const kiln_tensor *x, kiln_dtype dtype, int ndim,
                          const int64_t *shape, kiln_tensor *given, kiln_tensor **t)
{
    if (given) {
        *t = given;
        return kiln__check_out(op, given, x->dev, dtype, ndim, shape);
    }
    return kiln__tensor_new(x->dev, dtype, ndim, shape, op, t);
}

static kiln_status index_select(const kiln_tensor *x, int axis, const kiln_tensor *idx,
                                kiln_tensor *given, kiln_tensor **out, const char *op)
{
    int a = 0;
    kiln_status s = start(op, x, idx, "index", axis, given, out, &a);
    if (s == KILN_OK && idx->ndim != 1) {
        char sh[160];
        kiln__shape_str(sh, sizeof sh, idx->ndim, idx->shape);
        s = kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: index has shape %s; it must be 1-D", op, sh);
    }
    if (s != KILN_OK)
        return s;
    int64_t shape[KILN_MAX_DIMS], outer = 1, inner = 1, n = x->shape[a], m = idx->shape[0];
    for (int d = 0; d < x->ndim; d++) {
        shape[d] = d == a ? m : x->shape[d];
        if (d < a)
            outer *= x->shape[d];
        else if (d > a)
            inner *= x->shape[d];
    }
    char range[96];
    snprintf(range, sizeof range, "the %" PRId64 " entries of x along axis %d", n, a);
    s = kiln__check_indices(op, idx, "index", n, range);
    kiln_tensor *t = NULL;
    if (s == KILN_OK)
        s = result(op, x, x->dtype, x->ndim, shape, given, &t);
    if (s == KILN_OK && t->numel > 0) {
        kiln__kernel *k = NULL;
        s = index_kernel(x->dev, x->dtype, idx->dtype, "kiln_index_select", op, &k);
        size_t global[3] = {(size_t)inner, (size_t)m, (size_t)outer}, local[3];
        kiln__fixed_ndrange(k ? k->wg_size : 1, 3, global, local);
        kiln_arg args[] = {
            kiln_arg_tensor(x),  kiln_arg_tensor(idx),   kiln_arg_tensor(t),
            kiln_arg_i64(outer), kiln_arg_i64(n),        kiln_arg_i64(inner),
            kiln_arg_i64(m),     kiln__arg_error_word(), kiln_arg_i32(kiln__queue_error_code(op))};
        if (s == KILN_OK)
            s = kiln__kernel_launch(x->dev, k, op, 3, global, local, 9, args);
    }
    return kiln__finish(s, t, given, out);
}

kiln_status kiln_index_select(const kiln_tensor *x, int axis, const kiln_tensor *index,
                              kiln_tensor **out)
{
    const char *op = "kiln_index_select";
    kiln_status s = index_select(x, axis, index, NULL, out, op);
    kiln__ag_args args = {.axis = s == KILN_OK && axis < 0 ? axis + x->ndim : axis};
    return kiln__ag_record(s, op, KILN__AG_INDEX_SELECT, &args, 2,
                           (const kiln_tensor *[]){x, index}, out);
}

kiln_status kiln_index_select_out(const kiln_tensor *x, int axis, const kiln_tensor *index,
                                  kiln_tensor *out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_index_select_out: out is NULL");
    return index_select(x, axis, index, out, NULL, "kiln_index_select_out");
}

/* PyTorch's rule: idx has x's rank and no dimension longer than x's, except along the axis. */
static kiln_status check_gather_shape(const char *op, const kiln_tensor *x, const kiln_tensor *idx,
                                      int a)
{
    bool ok = idx->ndim == x->ndim;
    for (int d = 0; ok && d < x->ndim; d++)
        ok = d == a || idx->shape[d] <= x->shape[d];
    if (ok)
        return KILN_OK;
    return kiln__shape_mismatch(op, "x", x->ndim, x->shape, "index", idx->ndim, idx->shape,
                                "; index needs x's rank and no dimension longer than x's except "
                                "along the axis");
}

/* The gather's launches: the index's innermost three dimensions in one launch, higher ones
 * (and NDRange dimensions 1 and 2 beyond KILN__MAX_GROUPS_YZ work-items) looped here. */
static kiln_status launch_gather(kiln__kernel *k, const kiln_tensor *x, const kiln_tensor *idx,
                                 kiln_tensor *t, int a, const char *op)
{
    int nd = idx->ndim, first = nd > 3 ? nd - 3 : 0;
    int64_t xs[KILN_MAX_DIMS] = {0}, os[KILN_MAX_DIMS] = {0}, sx = 1, so = 1;
    for (int d = nd - 1; d >= 0; d--) {
        xs[d] = sx;
        os[d] = so;
        sx *= x->shape[d];
        so *= idx->shape[d];
    }
    int64_t outer_count = 1;
    for (int d = 0; d < first; d++)
        outer_count *= idx->shape[d];
    int64_t d3[3], os3[3], xs3[3];
    for (int j = 0; j < 3; j++) {
        int src = nd - 3 + j;
        d3[j] = src >= 0 ? idx->shape[src] : 1;
        os3[j] = src >= 0 ? os[src] : 0;
        xs3[j] = src >= 0 ? xs[src] : 0;
    }
    int slot = a >= first ? a - (nd - 3) : 3;
    kiln_status s = KILN_OK;
    for (int64_t o = 0; s == KILN_OK && o < outer_count; o++) {
        int64_t io = 0, xo = 0, rem = o;
        for (int d = first - 1; d >= 0; d--) {
            int64_t c = rem % idx->shape[d];
            rem /= idx->shape[d];
            io += c * os[d];
            xo += d == a ? 0 : c * xs[d];
        }
        for (int64_t z = 0; s == KILN_OK && z < d3[0]; z += KILN__MAX_GROUPS_YZ) {
            for (int64_t y = 0; s == KILN_OK && y < d3[1]; y += KILN__MAX_GROUPS_YZ) {
                int64_t dz = d3[0] - z < KILN__MAX_GROUPS_YZ ? d3[0] - z : KILN__MAX_GROUPS_YZ;
                int64_t dy = d3[1] - y < KILN__MAX_GROUPS_YZ ? d3[1] - y : KILN__MAX_GROUPS_YZ;
                int64_t bio = io + z * os3[0] + y * os3[1];
                int64_t bxo = xo + (slot == 0 ? 0 : z * xs3[0]) + (slot == 1 ? 0 : y * xs3[1]);
                size_t global[3] = {(size_t)d3[2], (size_t)dy, (size_t)dz}, local[3];
                kiln__fixed_ndrange(k->wg_size, 3, global, local);
                kiln_arg args[] = {kiln_arg_tensor(x),
                                   kiln_arg_tensor(idx),
                                   kiln_arg_tensor(t),
                                   kiln_arg_i64(bio),
                                   kiln_arg_i64(bxo),
                                   kiln_arg_i64(dz),
                                   kiln_arg_i64(dy),
                                   kiln_arg_i64(d3[2]),
                                   kiln_arg_i64(os3[0]),
                                   kiln_arg_i64(os3[1]),
                                   kiln_arg_i64(os3[2]),
                                   kiln_arg_i64(xs3[0]),
                                   kiln_arg_i64(xs3[1]),
                                   kiln_arg_i64(xs3[2]),
                                   kiln_arg_i32(slot),
                                   kiln_arg_i64(xs[a]),
                                   kiln_arg_i64(x->shape[a]),
                                   kiln__arg_error_word(),
                                   kiln_arg_i32(kiln__queue_error_code(op))};
                s = kiln__kernel_launch(x->dev, k, op, 3, global, local, 19, args);
            }
        }
    }
    return s;
}

static kiln_status gather(const kiln_tensor *x, int axis, const kiln_tensor *idx,
                          kiln_tensor *given, kiln_tensor **out, const char *op)
{
    int a = 0;
    kiln_status s = start(op, x, idx, "index", axis, given, out, &a);
    if (s == KILN_OK)
        s = check_gather_shape(op, x, idx, a);
    if (s != KILN_OK)
        return s;
    char range[96];
    snprintf(range, sizeof range, "the %" PRId64 " entries of x along axis %d", x->shape[a], a);
    s = kiln__check_indices(op, idx, "index", x->shape[a], range);
    kiln_tensor *t = NULL;
    if (s == KILN_OK)
        s = result(op, x, x->dtype, idx->ndim, idx->shape, given, &t);
    if (s == KILN_OK && t->numel > 0) {
        kiln__kernel *k;
        s = index_kernel(x->dev, x->dtype, idx->dtype, "kiln_gather", op, &k);
        if (s == KILN_OK)
            s = launch_gather(k, x, idx, t, a, op);
    }
    return kiln__finish(s, t, given, out);
}

kiln_status kiln_gather(const kiln_tensor *x, int axis, const kiln_tensor *index, kiln_tensor **out)
{
    const char *op = "kiln_gather";
    kiln_status s = gather(x, axis, index, NULL, out, op);
    kiln__ag_args args = {.axis = s == KILN_OK && axis < 0 ? axis + x->ndim : axis};
    return kiln__ag_record(s, op, KILN__AG_GATHER, &args, 2, (const kiln_tensor *[]){x, index},
                           out);
}

kiln_status kiln_gather_out(const kiln_tensor *x, int axis, const kiln_tensor *index,
                            kiln_tensor *out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_gather_out: out is NULL");
    return gather(x, axis, index, out, NULL, "kiln_gather_out");
}

kiln_status kiln__index_add(const kiln_tensor *g, int axis, const kiln_tensor *idx,
                            bool per_element, int64_t n, kiln_tensor **out)
{
    const char *op = "kiln_backward (index_add)";
    int64_t shape[KILN_MAX_DIMS], outer = 1, inner = 1, m = g->shape[axis];
    for (int d = 0; d < g->ndim; d++) {
        shape[d] = d == axis ? n : g->shape[d];
        outer *= d < axis ? g->shape[d] : 1;
        inner *= d > axis ? g->shape[d] : 1;
    }
    kiln_tensor *t = NULL;
    kiln_status s = kiln__tensor_new(g->dev, g->dtype, g->ndim, shape, op, &t);
    if (s == KILN_OK && t->numel > 0) {
        char defs[128] = "";
        size_t len = strlen(kiln__dtype_defines(defs, sizeof defs, "T", g->dtype));
        snprintf(defs + len, sizeof defs - len, " -DKILN_I=%s",
                 idx->dtype == KILN_I32 ? "int" : "long");
        kiln__kernel *k = NULL;
        s = kiln__builtin_kernel(g->dev, "index", defs, "kiln_index_add", op, &k);
        size_t global[2] = {(size_t)inner, (size_t)outer}, local[2];
        kiln__fixed_ndrange(k ? k->wg_size : 1, 2, global, local);
        kiln_arg args[] = {kiln_arg_tensor(g), kiln_arg_tensor(idx),
                           kiln_arg_tensor(t), kiln_arg_i64(outer),
                           kiln_arg_i64(n),    kiln_arg_i64(inner),
                           kiln_arg_i64(m),    kiln_arg_i32(per_element ? 1 : 0)};
        if (s == KILN_OK)
            s = kiln__kernel_launch(g->dev, k, op, 2, global, local, 8, args);
    }
    return kiln__finish(s, t, NULL, out);
}

static kiln_status one_hot(const kiln_tensor *labels, int64_t classes, kiln_dtype dtype,
                           kiln_tensor *given, kiln_tensor **out, const char *op)
{
    if (!given && !out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    if (out)
        *out = NULL;
    kiln_status s =
        kiln__check_tensors(op, 2, given ? 2 : 1, (const kiln_tensor *[]){labels, given},
                            (const char *const[]){"labels", "out"}, NULL);
    if (s == KILN_OK)
        s = check_index_dtype(labels, op, "labels");
    if (s == KILN_OK && labels->ndim != 1) {
        char sh[160];
        kiln__shape_str(sh, sizeof sh, labels->ndim, labels->shape);
        s = kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: labels have shape %s; they must be 1-D", op,
                        sh);
    }
    if (s == KILN_OK && classes < 1)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: classes is %" PRId64 "; it must be >= 1",
                        op, classes);
    if (s == KILN_OK && !kiln__dtype_valid(dtype))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", op, (int)dtype);
    if (s == KILN_OK)
        s = kiln__check_dtype_on(labels->dev, dtype, op);
    if (s == KILN_OK && given)
        s = kiln__check_not_aliased(op, given, 1, (const kiln_tensor *[]){labels});
    if (s != KILN_OK)
        return s;
    char range[64];
    snprintf(range, sizeof range, "the %" PRId64 " classes", classes);
    s = kiln__check_indices(op, labels, "labels", classes, range);
    int64_t rows = labels->shape[0], shape[2] = {rows, classes};
    kiln_tensor *t = NULL;
    if (s == KILN_OK)
        s = result(op, labels, dtype, 2, shape, given, &t);
    if (s == KILN_OK && t->numel > 0) {
        char defs[128] = "";
        size_t len = strlen(kiln__dtype_defines(defs, sizeof defs, "O", dtype));
        snprintf(defs + len, sizeof defs - len, " -DKILN_I=%s",
                 labels->dtype == KILN_I32 ? "int" : "long");
        kiln__kernel *k = NULL;
        s = kiln__builtin_kernel(labels->dev, "index", defs, "kiln_one_hot", op, &k);
        size_t global[2] = {(size_t)classes, (size_t)rows}, local[2];
        kiln__fixed_ndrange(k ? k->wg_size : 1, 2, global, local);
        kiln_arg args[] = {kiln_arg_tensor(labels), kiln_arg_tensor(t),
                           kiln_arg_i64(rows),      kiln_arg_i64(classes),
                           kiln__arg_error_word(),  kiln_arg_i32(kiln__queue_error_code(op))};
        if (s == KILN_OK)
            s = kiln__kernel_launch(labels->dev, k, op, 2, global, local, 6, args);
    }
    return kiln__finish(s, t, given, out);
}

kiln_status kiln_one_hot(const kiln_tensor *labels, int64_t classes, kiln_dtype dtype,
                         kiln_tensor **out)
{
    return one_hot(labels, classes, dtype, NULL, out, "kiln_one_hot");
}

kiln_status kiln_one_hot_out(const kiln_tensor *labels, int64_t classes, kiln_tensor *out)
{
    const char *op = "kiln_one_hot_out";
    kiln_status s = kiln__check_tensor(out, op, "out"); /* the result's dtype is out's */
    return s != KILN_OK ? s : one_hot(labels, classes, out->dtype, out, NULL, op);
}
