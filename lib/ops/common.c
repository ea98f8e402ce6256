/* common.c - helpers shared by the ops: capability checks, scalar arguments, result tensors,
 * shape messages and NumPy broadcasting. */
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "launch.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

kiln_status kiln__check_dtype_on(kiln_device *dev, kiln_dtype dtype, const char *op)
{
    if (!kiln__dtype_valid(dtype))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d; use one of %s", op,
                           (int)dtype, kiln__dtype_list());
    if (kiln__dtype_needs_fp64(dtype) && !dev->info.fp64)
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: device %s (%s) has no fp64 support (cl_khr_fp64), which %s "
                           "needs; use f32",
                           op, dev->info.spec, dev->info.name, kiln__dtype_name(dtype));
    return KILN_OK;
}

/* An integer scalar's bits, written at the start of kiln_arg's union (where every member
 * starts) through the unsigned type of a.size's width: conversion to it is modulo 2^bits,
 * which gives the two's complement bits of a signed value too. */
static kiln_arg int_arg(kiln_arg a, uint64_t bits)
{
    uint8_t u8 = (uint8_t)bits;
    uint16_t u16 = (uint16_t)bits;
    uint32_t u32 = (uint32_t)bits;
    switch (a.size) {
    case 1:
        memcpy(&a.value, &u8, 1);
        break;
    case 2:
        memcpy(&a.value, &u16, 2);
        break;
    case 4:
        memcpy(&a.value, &u32, 4);
        break;
    default:
        memcpy(&a.value, &bits, sizeof bits);
    }
    return a;
}

kiln_arg kiln__arg_compute(kiln_dtype dtype, double v)
{
    /* From the table's size and float columns. Floating compute types are float or double;
     * integers go through int_arg. */
    kiln_dtype c = kiln__dtype_compute(dtype);
    kiln_arg a = {.kind = KILN_ARG_SCALAR, .dtype = c, .size = kiln__dtype_size(c)};
    if (kiln__dtype_is_float(c)) {
        if (a.size == sizeof(double))
            a.value.f64 = v;
        else
            a.value.f32 = (float)v;
        return a;
    }
    return int_arg(a, (uint64_t)(kiln__dtype_scalar_fits(c, v) ? (int64_t)v : 0));
}

kiln_status kiln__check_tensors(const char *op, int n, int required, const kiln_tensor *const *ts,
                                const char *const *names, kiln_device **dev)
{
    for (int i = 0; i < required; i++) {
        char buf[32];
        kiln_status s = kiln__check_tensor(
            ts[i], op, names ? names[i] : kiln__argument_name(i, buf, sizeof buf));
        if (s != KILN_OK)
            return s;
    }
    return kiln__same_device(op, n, ts, dev);
}

kiln_status kiln__checked_mode(const char *op, bool *on)
{
    const char *v = getenv("KILN_CHECK"); /* read on every call, like KILN_LOG */
    *on = v && strcmp(v, "1") == 0;
    if (!v || !*v || *on || strcmp(v, "0") == 0)
        return KILN_OK;
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: KILN_CHECK='%.48s' is not 0 or 1; set KILN_CHECK=1 to check class "
                       "labels and other data-dependent arguments, or unset it",
                       op, v);
}

kiln_status kiln__check_indices(const char *op, const kiln_tensor *idx, const char *what, int64_t n,
                                const char *range)
{
    bool on;
    kiln_status s = kiln__checked_mode(op, &on);
    if (s != KILN_OK || !on || idx->numel == 0)
        return s;
    void *buf = kiln__malloc(idx->nbytes);
    if (!buf)
        return kiln__host_oom(op);
    s = kiln_tensor_read(idx, buf, idx->nbytes);
    for (int64_t i = 0; s == KILN_OK && i < idx->numel; i++) {
        int64_t v = idx->dtype == KILN_I32 ? ((const int32_t *)buf)[i] : ((const int64_t *)buf)[i];
        if (v < 0 || v >= n)
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                            "%s: %s[%" PRId64 "] is %" PRId64 ", outside %s (0 to %" PRId64
                            "); found by KILN_CHECK=1",
                            op, what, i, v, range, n - 1);
    }
    free(buf);
    return s;
}

bool kiln__same_shape(const kiln_tensor *t, int ndim, const int64_t *shape)
{
    if (t->ndim != ndim)
        return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d])
            return false;
    return true;
}

kiln_arg kiln__arg_compute_i64(kiln_dtype dtype, int64_t v)
{
    kiln_dtype c = kiln__dtype_compute(dtype);
    kiln_arg a = {.kind = KILN_ARG_SCALAR, .dtype = c, .size = kiln__dtype_size(c)};
    if (!kiln__dtype_is_float(c))
        return int_arg(a, (uint64_t)v); /* modulo 2^bits: v itself when it fits */
    if (a.size == sizeof(double))
        a.value.f64 = (double)v;
    else
        a.value.f32 = (float)v; /* one rounding from int64_t, not two through double */
    return a;
}

bool kiln__i64_fits(kiln_dtype dtype, int64_t v)
{
    size_t bits = 8 * kiln__dtype_size(dtype);
    if (kiln__dtype_is_float(dtype) || bits >= 64)
        return true;
    if (kiln__dtype_is_signed(dtype))
        return v >= -((int64_t)1 << (bits - 1)) && v < ((int64_t)1 << (bits - 1));
    return v >= 0 && v < ((int64_t)1 << bits);
}

bool kiln__scalar_value_fits(kiln_dtype dtype, kiln__scalar v)
{
    return v.is_i64 ? kiln__i64_fits(dtype, v.i) : kiln__dtype_scalar_fits(dtype, v.f);
}

kiln_arg kiln__arg_scalar(kiln_dtype dtype, kiln__scalar v)
{
    return v.is_i64 ? kiln__arg_compute_i64(dtype, v.i) : kiln__arg_compute(dtype, v.f);
}

char *kiln__scalar_str(char *buf, size_t size, kiln__scalar v)
{
    if (v.is_i64)
        snprintf(buf, size, "%lld", (long long)v.i);
    else
        snprintf(buf, size, "%g", v.f);
    return buf;
}

kiln_status kiln__shape_mismatch(const char *op, const char *aname, int andim,
                                 const int64_t *ashape, const char *bname, int bndim,
                                 const int64_t *bshape, const char *hint)
{
    char sa[160], sb[160];
    kiln__shape_str(sa, sizeof sa, andim, ashape);
    kiln__shape_str(sb, sizeof sb, bndim, bshape);
    return kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: %s has shape %s but %s has shape %s%s", op,
                       aname, sa, bname, sb, hint ? hint : "");
}

kiln_status kiln__check_out(const char *op, const kiln_tensor *out, const kiln_device *dev,
                            kiln_dtype dtype, int ndim, const int64_t *shape)
{
    if (out->dev != dev)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                           "%s: out is on %s but the result is computed on %s; copy it with "
                           "kiln_tensor_to()",
                           op, out->dev->info.spec, dev->info.spec);
    if (out->dtype != dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: out has dtype %s but the result is %s", op,
                           kiln__dtype_name(out->dtype), kiln__dtype_name(dtype));
    if (!kiln__same_shape(out, ndim, shape))
        return kiln__shape_mismatch(op, "out", out->ndim, out->shape, "the result", ndim, shape,
                                    "");
    kiln__tensor_bump(out); /* an in-place write (autograd's version check) */
    return KILN_OK;
}

kiln_status kiln__inner_error(kiln_status s, const char *op)
{
    const char *inner = kiln_last_error();
    if (strncmp(inner, op, strlen(op)) == 0) /* named so already (the allocating form, say) */
        return s;
    char *msg = kiln__strdup(inner);
    s = kiln__error(s, "%s: %s", op, msg ? msg : "");
    free(msg);
    return s;
}

kiln_status kiln__out_from(const char *op, kiln_status s, kiln_tensor *r, kiln_tensor *out)
{
    if (s == KILN_OK)
        s = kiln__check_tensor(out, op, "out");
    if (s == KILN_OK)
        s = kiln__check_out(op, out, r->dev, r->dtype, r->ndim, r->shape);
    if (s == KILN_OK)
        s = kiln_tensor_copy(out, r);
    if (s != KILN_OK)
        s = kiln__inner_error(s, op);
    kiln__log_release();
    kiln_tensor_release(r);
    return s;
}

kiln_status kiln__check_not_aliased(const char *op, const kiln_tensor *out, int n,
                                    const kiln_tensor *const *ins)
{
    for (int i = 0; i < n; i++)
        if (ins[i] && out->storage == ins[i]->storage && out->numel > 0 && ins[i]->numel > 0)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: out shares memory with an input (argument %d); write to a "
                               "separate tensor",
                               op, i + 1);
    return KILN_OK;
}

kiln_status kiln__finish(kiln_status s, kiln_tensor *t, const kiln_tensor *given, kiln_tensor **out)
{
    if (s != KILN_OK) {
        if (t != given)
            kiln_tensor_release(t);
        return s;
    }
    if (out)
        *out = t;
    return KILN_OK;
}

kiln_status kiln__fill_kernel(kiln_tensor *t, const char *source, const char *kernel,
                              const char *op, int nextra, const kiln_arg *extra)
{
    kiln__tensor_bump(t);
    if (t->numel == 0)
        return KILN_OK;
    char defines[160] = "";
    kiln__dtype_defines(defines, sizeof defines, "T", t->dtype);
    kiln__kernel *k;
    kiln_status s = kiln__builtin_kernel(t->dev, source, defines, kernel, op, &k);
    if (s != KILN_OK)
        return s;
    kiln_arg args[2 + 8] = {kiln_arg_tensor(t), kiln_arg_i64(t->numel)};
    for (int i = 0; i < nextra && i < 8; i++)
        args[2 + i] = extra[i];
    size_t global = (size_t)t->numel;
    return kiln__kernel_launch(t->dev, k, op, 1, &global, NULL, 2 + nextra, args);
}

static kiln_status bcast_error(const char *op, int n, const kiln_tensor *const *ts)
{
    char shapes[4][160];
    for (int i = 0; i < n; i++)
        kiln__shape_str(shapes[i], sizeof shapes[i], ts[i]->ndim, ts[i]->shape);
    return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                       "%s: shapes %s%s%s%s%s%s%s cannot be broadcast (NumPy rules: dimensions "
                       "align from the right and must be equal or 1)",
                       op, shapes[0], n > 2 ? ", " : " and ", shapes[1],
                       n > 2 ? (n > 3 ? ", " : " and ") : "", n > 2 ? shapes[2] : "",
                       n > 3 ? " and " : "", n > 3 ? shapes[3] : "");
}

static kiln_status bcast_overflow(const char *op, const int64_t *shape, int d)
{
    char buf[160];
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: the broadcast shape %s... has more elements than INT64_MAX (overflow)",
                       op, kiln__shape_str(buf, sizeof buf, d + 1, shape));
}

/* Padded shape (right-aligned to nd dims) and contiguous strides of input t. */
static void bcast_input(const kiln_tensor *t, int nd, int64_t *shape, int64_t *stride)
{
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int k = d - (nd - t->ndim);
        shape[d] = k >= 0 ? t->shape[k] : 1;
        stride[d] = shape[d] == 1 ? 0 : acc;
        acc *= shape[d];
    }
}

kiln_status kiln__broadcast(const char *op, int n, const kiln_tensor *const *ts, kiln__bcast *bc)
{
    memset(bc, 0, sizeof *bc);
    bc->n = n;
    for (int i = 0; i < n; i++)
        bc->ndim = ts[i]->ndim > bc->ndim ? ts[i]->ndim : bc->ndim;
    int64_t shape[4][KILN_MAX_DIMS], stride[4][KILN_MAX_DIMS];
    for (int i = 0; i < n; i++)
        bcast_input(ts[i], bc->ndim, shape[i], stride[i]);
    int64_t nonzero = 1; /* the product of the nonzero sizes, checked as kiln__check_shape does */
    bool empty = false;
    for (int d = 0; d < bc->ndim; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            if (shape[i][d] == 1)
                continue;
            if (size != 1 && size != shape[i][d])
                return bcast_error(op, n, ts);
            size = shape[i][d];
        }
        bc->shape[d] = size;
        empty = empty || size == 0;
        if (size != 0 && !kiln__dim_mul(nonzero, size, &nonzero))
            return bcast_overflow(op, bc->shape, d);
    }
    bc->numel = empty ? 0 : nonzero;
    for (int d = 0; d < bc->ndim; d++) {
        if (bc->shape[d] == 1)
            continue; /* contributes nothing to any index */
        int c = bc->nd;
        bool merge = c > 0;
        for (int i = 0; i < n && merge; i++)
            merge = bc->cstride[i][c - 1] == stride[i][d] * bc->shape[d];
        if (merge) {
            bc->cshape[c - 1] *= bc->shape[d];
            for (int i = 0; i < n; i++)
                bc->cstride[i][c - 1] = stride[i][d];
            continue;
        }
        bc->cshape[c] = bc->shape[d];
        for (int i = 0; i < n; i++)
            bc->cstride[i][c] = stride[i][d];
        bc->nd = c + 1;
    }
    return KILN_OK;
}

bool kiln__bcast_flat(const kiln__bcast *bc)
{
    if (bc->nd > 1)
        return false;
    for (int i = 0; i < bc->n && bc->nd == 1; i++)
        if (bc->cstride[i][0] != 1)
            return false;
    return true;
}

int kiln__bcast_args(const kiln__bcast *bc, kiln_arg *args)
{
    int k = 0, pad = KILN_MAX_DIMS - bc->nd;
    for (int s = 0; s < KILN_MAX_DIMS; s++) {
        args[k++] = kiln_arg_i64(s < pad ? 1 : bc->cshape[s - pad]);
    }
    for (int i = 0; i < bc->n; i++) {
        for (int s = 0; s < KILN_MAX_DIMS; s++) {
            args[k++] = kiln_arg_i64(s < pad ? 0 : bc->cstride[i][s - pad]);
        }
    }
    return k;
}
