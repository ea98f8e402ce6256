/* elementwise.c - elementwise ops: binary with NumPy broadcasting (and with a scalar), where,
 * unary ops and their derivatives, and dtype casts (kernels in lib/kernels/elementwise.cl). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp.h"
#include "autograd.h"
#include "common.h"
#include "fusion.h"
#include "launch.h"
#include "optables.h"
#include "program.h"
#include "promote.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

/* The tensor a result goes to: `given` after checking its dtype and shape, else a new one. */
static kiln_status result(const char *op, kiln_device *dev, kiln_dtype dtype, int ndim,
                          const int64_t *shape, kiln_tensor *given, kiln_tensor **res)
{
    if (!given)
        return kiln__tensor_new(dev, dtype, ndim, shape, op, res);
    kiln_status s = kiln__check_out(op, given, dev, dtype, ndim, shape);
    if (s == KILN_OK)
        *res = given;
    return s;
}

/* Check tensor arguments one by one (so a NULL names its argument), then the same-device
 * rule over all of them. NULL entries past `required` are optional and skipped. */
static kiln_status check_args(const char *op, int n, int required, const kiln_tensor *const *ts,
                              kiln_device **dev)
{
    /* Inputs may stay pending (fusion.c); out is written, so what is pending on it is not. */
    const kiln_tensor *given = required == n ? ts[n - 1] : NULL;
    kiln__fusion_defer(true);
    kiln_status s = kiln__check_tensors(op, n, required, ts, NULL, dev);
    kiln__fusion_defer(false);
    return s == KILN_OK && given ? kiln__check_tensor(given, op, "out") : s;
}

/* With fusion on, the op as a pending result (or evaluated into given): true, s set. */
static bool fused(const char *fn, kiln_device *dev, const kiln__fop *op, kiln_tensor *given,
                  kiln_tensor **out, kiln_status *s)
{
    int64_t numel = 1;
    for (int i = 0; i < op->ndim; i++)
        numel *= op->shape[i];
    if (!kiln__fusion_enabled() || numel == 0)
        return false;
    if (given && (*s = kiln__check_out(fn, given, dev, op->dtype, op->ndim, op->shape)) != KILN_OK)
        return true;
    *s = kiln__fuse(fn, dev, op, given, given ? NULL : out);
    return true;
}

static kiln_status check_out_ptr(const char *op, kiln_tensor **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    return KILN_OK;
}

static kiln_status check_binary_op(const char *fn, kiln_binary_op op, kiln_dtype dtype)
{
    if (!kiln__binary_name(op))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown binary op %d", fn, (int)op);
    if (!kiln__binary_supports(op, dtype))
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: %s needs a floating dtype, got %s; cast first with kiln_cast()", fn,
                           kiln__binary_name(op), kiln_dtype_name(dtype));
    return KILN_OK;
}

static kiln_status binary(const char *fn, kiln_binary_op op, const kiln_tensor *a,
                          const kiln_tensor *b, kiln_tensor *given, kiln_tensor **out)
{
    kiln_device *dev;
    kiln_status s = check_args(fn, 3, given ? 3 : 2, (const kiln_tensor *[]){a, b, given}, &dev);
    if (s != KILN_OK)
        return s;
    if (a->dtype != b->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: dtypes %s and %s differ; cast one with kiln_cast()", fn,
                           kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    if ((s = kiln__check_dtype_on(dev, a->dtype, fn)) != KILN_OK ||
        (s = check_binary_op(fn, op, a->dtype)) != KILN_OK)
        return s;
    kiln__bcast bc;
    if ((s = kiln__broadcast(fn, 2, (const kiln_tensor *[]){a, b}, &bc)) != KILN_OK)
        return s;
    kiln_dtype rt = kiln__binary_is_compare(op) ? KILN_U8 : a->dtype;
    kiln__fop fo = {KILN__F_BINARY, (int)op, a->dtype, rt, bc.ndim, bc.shape, 2, {a, b}, {0}};
    if (fused(fn, dev, &fo, given, out, &s))
        return s;
    kiln_tensor *res = NULL;
    s = result(fn, dev, rt, bc.ndim, bc.shape, given, &res);
    if (s == KILN_OK && bc.numel > 0)
        s = kiln__elementwise_run(fn, dev, &fo, res);
    return kiln__finish(s, res, given, out);
}

kiln_status kiln_binary(kiln_binary_op op, const kiln_tensor *a, const kiln_tensor *b,
                        kiln_tensor **out)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[2] = {a, b};
        kiln_tensor *tmp[2];
        kiln_status amp;
        if (op == KILN_BINARY_POW &&
            kiln__amp_apply("kiln_binary", KILN__AMP_F32, 2, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_binary(op, in[0], in[1], out);
            else if (out)
                *out = NULL;
            kiln__amp_release(2, tmp);
            return amp;
        }
    }
    kiln_tensor *tmp[2] = {NULL, NULL}; /* promoted operands (promote.c) */
    kiln_status s = check_out_ptr("kiln_binary", out);
    s = s != KILN_OK ? s : kiln__promote_pair("kiln_binary", &a, &b, tmp);
    s = s != KILN_OK ? s : binary("kiln_binary", op, a, b, NULL, out);
    s = kiln__ag_record(s, "kiln_binary", KILN__AG_BINARY, &(kiln__ag_args){.op = (int)op}, 2,
                        (const kiln_tensor *[]){a, b}, out);
    kiln__promote_release(tmp);
    return s;
}

kiln_status kiln_binary_out(kiln_binary_op op, const kiln_tensor *a, const kiln_tensor *b,
                            kiln_tensor *out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_binary_out: out is NULL");
    kiln_tensor *tmp[2];
    kiln_status s = kiln__promote_pair("kiln_binary_out", &a, &b, tmp);
    s = s != KILN_OK ? s : binary("kiln_binary_out", op, a, b, out, NULL);
    kiln__promote_release(tmp);
    return s;
}

static kiln_status check_given(const char *fn, const kiln_tensor *given)
{
    if (!given)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    return KILN_OK;
}

#define KILN__BINARY_WRAPPER(fn, OP)                                                               \
    kiln_status fn(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out)                  \
    {                                                                                              \
        kiln_tensor *tmp[2] = {NULL, NULL};                                                        \
        kiln_status s = check_out_ptr(#fn, out);                                                   \
        s = s != KILN_OK ? s : kiln__promote_pair(#fn, &a, &b, tmp);                               \
        s = s != KILN_OK ? s : binary(#fn, OP, a, b, NULL, out);                                   \
        s = kiln__ag_record(s, #fn, KILN__AG_BINARY, &(kiln__ag_args){.op = OP}, 2,                \
                            (const kiln_tensor *[]){a, b}, out);                                   \
        kiln__promote_release(tmp);                                                                \
        return s;                                                                                  \
    }                                                                                              \
    kiln_status fn##_out(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out)             \
    {                                                                                              \
        kiln_tensor *tmp[2] = {NULL, NULL};                                                        \
        kiln_status s = check_given(#fn "_out", out);                                              \
        s = s != KILN_OK ? s : kiln__promote_pair(#fn "_out", &a, &b, tmp);                        \
        s = s != KILN_OK ? s : binary(#fn "_out", OP, a, b, out, NULL);                            \
        kiln__promote_release(tmp);                                                                \
        return s;                                                                                  \
    }
KILN__BINARY_WRAPPER(kiln_add, KILN_BINARY_ADD)
KILN__BINARY_WRAPPER(kiln_sub, KILN_BINARY_SUB)
KILN__BINARY_WRAPPER(kiln_mul, KILN_BINARY_MUL)
KILN__BINARY_WRAPPER(kiln_div, KILN_BINARY_DIV)

static kiln_status binary_scalar(const char *fn, kiln_binary_op op, const kiln_tensor *a,
                                 kiln__scalar scalar, kiln_tensor *given, kiln_tensor **out)
{
    kiln_device *dev;
    kiln_status s = check_args(fn, 2, given ? 2 : 1, (const kiln_tensor *[]){a, given}, &dev);
    if (s != KILN_OK)
        return s;
    if ((s = kiln__check_dtype_on(dev, a->dtype, fn)) != KILN_OK ||
        (s = check_binary_op(fn, op, a->dtype)) != KILN_OK)
        return s;
    if (!kiln__scalar_value_fits(a->dtype, scalar)) {
        char v[48];
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: scalar %s does not fit the tensor's dtype %s; cast the tensor "
                           "with kiln_cast()",
                           fn, kiln__scalar_str(v, sizeof v, scalar), kiln_dtype_name(a->dtype));
    }
    kiln_dtype rt = kiln__binary_is_compare(op) ? KILN_U8 : a->dtype;
    kiln__fop fo = {KILN__F_SCALAR, (int)op, a->dtype, rt, a->ndim, a->shape, 1, {a}, scalar};
    if (fused(fn, dev, &fo, given, out, &s))
        return s;
    kiln_tensor *res = NULL;
    s = result(fn, dev, rt, a->ndim, a->shape, given, &res);
    if (s == KILN_OK && a->numel > 0)
        s = kiln__elementwise_run(fn, dev, &fo, res);
    return kiln__finish(s, res, given, out);
}

kiln_status kiln_binary_scalar(kiln_binary_op op, const kiln_tensor *a, double scalar,
                               kiln_tensor **out)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[1] = {a};
        kiln_tensor *tmp[1];
        kiln_status amp;
        if (op == KILN_BINARY_POW &&
            kiln__amp_apply("kiln_binary_scalar", KILN__AMP_F32, 1, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_binary_scalar(op, in[0], scalar, out);
            else if (out)
                *out = NULL;
            kiln__amp_release(1, tmp);
            return amp;
        }
    }
    const char *fn = "kiln_binary_scalar";
    kiln_tensor *tmp = NULL;
    kiln_status s = check_out_ptr(fn, out);
    s = s != KILN_OK ? s : kiln__promote_scalar(fn, &a, scalar, &tmp);
    s = s != KILN_OK ? s : binary_scalar(fn, op, a, (kiln__scalar){.f = scalar}, NULL, out);
    s = kiln__ag_record(s, fn, KILN__AG_SCALAR, &(kiln__ag_args){.op = (int)op, .scalar = scalar},
                        1, &a, out);
    kiln_tensor_release(tmp);
    return s;
}

kiln_status kiln_binary_scalar_out(kiln_binary_op op, const kiln_tensor *a, double scalar,
                                   kiln_tensor *out)
{
    const char *fn = "kiln_binary_scalar_out";
    kiln_tensor *tmp = NULL;
    kiln_status s = check_given(fn, out);
    s = s != KILN_OK ? s : kiln__promote_scalar(fn, &a, scalar, &tmp);
    s = s != KILN_OK ? s : binary_scalar(fn, op, a, (kiln__scalar){.f = scalar}, out, NULL);
    kiln_tensor_release(tmp);
    return s;
}

kiln_status kiln_binary_scalar_i64(kiln_binary_op op, const kiln_tensor *a, int64_t scalar,
                                   kiln_tensor **out)
{
    const char *fn = "kiln_binary_scalar_i64";
    kiln_status s = check_out_ptr(fn, out);
    kiln__scalar v = {.is_i64 = true, .i = scalar};
    s = s != KILN_OK ? s : binary_scalar(fn, op, a, v, NULL, out);
    return kiln__ag_record(s, fn, KILN__AG_SCALAR,
                           &(kiln__ag_args){.op = (int)op, .scalar = (double)scalar}, 1, &a, out);
}

kiln_status kiln_binary_scalar_i64_out(kiln_binary_op op, const kiln_tensor *a, int64_t scalar,
                                       kiln_tensor *out)
{
    const char *fn = "kiln_binary_scalar_i64_out";
    kiln_status s = check_given(fn, out);
    kiln__scalar v = {.is_i64 = true, .i = scalar};
    return s != KILN_OK ? s : binary_scalar(fn, op, a, v, out, NULL);
}

static kiln_status where(const char *fn, const kiln_tensor *cond, const kiln_tensor *a,
                         const kiln_tensor *b, kiln_tensor *given, kiln_tensor **out)
{
    kiln_device *dev;
    const kiln_tensor *ts[4] = {cond, a, b, given};
    kiln_status s = check_args(fn, 4, given ? 4 : 3, ts, &dev);
    if (s != KILN_OK)
        return s;
    if (cond->dtype != KILN_U8)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: cond must be a u8 mask, got %s; make one with a comparison "
                           "(kiln_binary with KILN_BINARY_GT ...) or kiln_cast()",
                           fn, kiln_dtype_name(cond->dtype));
    if (a->dtype != b->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: dtypes %s and %s of a and b differ; cast one with kiln_cast()", fn,
                           kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    if ((s = kiln__check_dtype_on(dev, a->dtype, fn)) != KILN_OK)
        return s;
    kiln__bcast bc;
    if ((s = kiln__broadcast(fn, 3, ts, &bc)) != KILN_OK)
        return s;
    kiln__fop fo = {KILN__F_WHERE, 0, a->dtype, a->dtype, bc.ndim, bc.shape, 3, {cond, a, b}, {0}};
    if (fused(fn, dev, &fo, given, out, &s))
        return s;
    kiln_tensor *res = NULL;
    s = result(fn, dev, a->dtype, bc.ndim, bc.shape, given, &res);
    if (s == KILN_OK && bc.numel > 0)
        s = kiln__elementwise_run(fn, dev, &fo, res);
    return kiln__finish(s, res, given, out);
}

kiln_status kiln_where(const kiln_tensor *cond, const kiln_tensor *a, const kiln_tensor *b,
                       kiln_tensor **out)
{
    kiln_status s = check_out_ptr("kiln_where", out);
    s = s != KILN_OK ? s : where("kiln_where", cond, a, b, NULL, out);
    return kiln__ag_record(s, "kiln_where", KILN__AG_WHERE, NULL, 3,
                           (const kiln_tensor *[]){cond, a, b}, out);
}

kiln_status kiln_where_out(const kiln_tensor *cond, const kiln_tensor *a, const kiln_tensor *b,
                           kiln_tensor *out)
{
    kiln_status s = check_given("kiln_where_out", out);
    return s != KILN_OK ? s : where("kiln_where_out", cond, a, b, out, NULL);
}

static kiln_status check_unary_op(const char *fn, kiln_unary_op op, kiln_dtype dtype, bool backward)
{
    if (!kiln__unary_name(op))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown unary op %d", fn, (int)op);
    if (!kiln__unary_supports(op, dtype, backward))
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: %s%s needs a floating dtype, got %s; cast first with kiln_cast()",
                           fn, kiln__unary_name(op), backward ? "'" : "", kiln_dtype_name(dtype));
    return KILN_OK;
}

static kiln_status unary(const char *fn, kiln_unary_op op, const kiln_tensor *x, kiln_tensor *given,
                         kiln_tensor **out)
{
    kiln_device *dev;
    kiln_status s = check_args(fn, 2, given ? 2 : 1, (const kiln_tensor *[]){x, given}, &dev);
    if (s != KILN_OK)
        return s;
    if ((s = kiln__check_dtype_on(dev, x->dtype, fn)) != KILN_OK ||
        (s = check_unary_op(fn, op, x->dtype, false)) != KILN_OK)
        return s;
    kiln__fop fo = {KILN__F_UNARY, (int)op, x->dtype, x->dtype, x->ndim, x->shape, 1, {x}, {0}};
    if (fused(fn, dev, &fo, given, out, &s))
        return s;
    kiln_tensor *res = NULL;
    s = result(fn, dev, x->dtype, x->ndim, x->shape, given, &res);
    if (s == KILN_OK && x->numel > 0)
        s = kiln__elementwise_run(fn, dev, &fo, res);
    return kiln__finish(s, res, given, out);
}

kiln_status kiln_unary(kiln_unary_op op, const kiln_tensor *x, kiln_tensor **out)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[1] = {x};
        kiln_tensor *tmp[1];
        kiln_status amp;
        if (kiln__amp_f32_unary(op) &&
            kiln__amp_apply("kiln_unary", KILN__AMP_F32, 1, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_unary(op, in[0], out);
            else if (out)
                *out = NULL;
            kiln__amp_release(1, tmp);
            return amp;
        }
    }
    kiln_status s = check_out_ptr("kiln_unary", out);
    s = s != KILN_OK ? s : unary("kiln_unary", op, x, NULL, out);
    return kiln__ag_record(s, "kiln_unary", KILN__AG_UNARY, &(kiln__ag_args){.op = (int)op}, 1, &x,
                           out);
}

kiln_status kiln_unary_out(kiln_unary_op op, const kiln_tensor *x, kiln_tensor *out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_unary_out: out is NULL");
    return unary("kiln_unary_out", op, x, out, NULL);
}

static kiln_status unary_backward(const char *fn, kiln_unary_op op, const kiln_tensor *x,
                                  const kiln_tensor *grad_out, kiln_tensor *given,
                                  kiln_tensor **grad_in)
{
    kiln_device *dev;
    kiln_status s =
        check_args(fn, 3, given ? 3 : 2, (const kiln_tensor *[]){x, grad_out, given}, &dev);
    if (s != KILN_OK)
        return s;
    if (x->dtype != grad_out->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: x is %s but grad_out is %s", fn,
                           kiln_dtype_name(x->dtype), kiln_dtype_name(grad_out->dtype));
    if ((s = kiln__check_dtype_on(dev, x->dtype, fn)) != KILN_OK ||
        (s = check_unary_op(fn, op, x->dtype, true)) != KILN_OK)
        return s;
    if (!kiln__same_shape(grad_out, x->ndim, x->shape))
        return kiln__shape_mismatch(fn, "x", x->ndim, x->shape, "grad_out", grad_out->ndim,
                                    grad_out->shape, "; they must be equal");
    kiln__fop fo = {KILN__F_UNARY_BW, (int)op, x->dtype,      x->dtype, x->ndim,
                    x->shape,         2,       {x, grad_out}, {0}};
    if (fused(fn, dev, &fo, given, grad_in, &s))
        return s;
    kiln_tensor *res = NULL;
    s = result(fn, dev, x->dtype, x->ndim, x->shape, given, &res);
    if (s == KILN_OK && x->numel > 0)
        s = kiln__elementwise_run(fn, dev, &fo, res);
    return kiln__finish(s, res, given, grad_in);
}

kiln_status kiln_unary_backward(kiln_unary_op op, const kiln_tensor *x, const kiln_tensor *grad_out,
                                kiln_tensor **grad_in)
{
    const char *fn = "kiln_unary_backward";
    kiln_status s = check_out_ptr(fn, grad_in);
    return s != KILN_OK ? s : unary_backward(fn, op, x, grad_out, NULL, grad_in);
}

kiln_status kiln_unary_backward_out(kiln_unary_op op, const kiln_tensor *x,
                                    const kiln_tensor *grad_out, kiln_tensor *grad_in)
{
    const char *fn = "kiln_unary_backward_out";
    if (!grad_in)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: grad_in is NULL", fn);
    return unary_backward(fn, op, x, grad_out, grad_in, NULL);
}

static kiln_status cast(const char *fn, const kiln_tensor *x, kiln_dtype dtype, kiln_tensor *given,
                        kiln_tensor **out)
{
    kiln_device *dev;
    kiln_status s = check_args(fn, 2, given ? 2 : 1, (const kiln_tensor *[]){x, given}, &dev);
    if (s != KILN_OK)
        return s;
    if (given)
        dtype = given->dtype;
    if ((s = kiln__check_dtype_on(dev, x->dtype, fn)) != KILN_OK ||
        (s = kiln__check_dtype_on(dev, dtype, fn)) != KILN_OK)
        return s;
    kiln__fop fo = {KILN__F_CAST, 0, x->dtype, dtype, x->ndim, x->shape, 1, {x}, {0}};
    if (fused(fn, dev, &fo, given, out, &s))
        return s;
    kiln_tensor *res = NULL;
    s = result(fn, dev, dtype, x->ndim, x->shape, given, &res);
    if (s == KILN_OK && x->numel > 0)
        s = kiln__elementwise_run(fn, dev, &fo, res);
    return kiln__finish(s, res, given, out);
}

kiln_status kiln_cast(const kiln_tensor *x, kiln_dtype dtype, kiln_tensor **out)
{
    kiln_status s = check_out_ptr("kiln_cast", out);
    s = s != KILN_OK ? s : cast("kiln_cast", x, dtype, NULL, out);
    /* a cast from an integer has no gradient: such an x never requires grad */
    return kiln__ag_record(s, "kiln_cast", KILN__AG_CAST, NULL, 1, &x, out);
}

kiln_status kiln_cast_out(const kiln_tensor *x, kiln_tensor *out)
{
    kiln_status s = check_given("kiln_cast_out", out);
    /* out's dtype, read once out is checked */
    return s != KILN_OK ? s : cast("kiln_cast_out", x, KILN_F32, out, NULL);
}

/* clamp = minimum(maximum(x, lo), hi), the second step in place on the result. */
static kiln_status clamp(const char *fn, const kiln_tensor *x, double lo, double hi,
                         kiln_tensor *given, kiln_tensor **out)
{
    if (isnan(lo) || isnan(hi) || lo > hi)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the bounds [%g, %g] are not an interval; need lo <= hi, neither "
                           "NaN",
                           fn, lo, hi);
    if (kiln__fusion_enabled()) {
        /* Both steps pending (the first is never materialised), the second into given. */
        kiln_tensor *t = NULL, *r = NULL;
        kiln_status s =
            binary_scalar(fn, KILN_BINARY_MAXIMUM, x, (kiln__scalar){.f = lo}, NULL, &t);
        if (s == KILN_OK)
            s = binary_scalar(fn, KILN_BINARY_MINIMUM, t, (kiln__scalar){.f = hi}, given,
                              given ? NULL : &r);
        kiln_tensor_release(t);
        return kiln__finish(s, given ? given : r, given, out);
    }
    kiln_tensor *t = given;
    kiln_status s = binary_scalar(fn, KILN_BINARY_MAXIMUM, x, (kiln__scalar){.f = lo}, given,
                                  given ? NULL : &t);
    if (s == KILN_OK && t)
        s = binary_scalar(fn, KILN_BINARY_MINIMUM, t, (kiln__scalar){.f = hi}, t, NULL);
    return kiln__finish(s, t, given, out);
}

kiln_status kiln_clamp(const kiln_tensor *x, double lo, double hi, kiln_tensor **out)
{
    const char *fn = "kiln_clamp";
    kiln_status s = check_out_ptr(fn, out);
    s = s != KILN_OK ? s : clamp(fn, x, lo, hi, NULL, out);
    return kiln__ag_record(s, fn, KILN__AG_CLAMP, &(kiln__ag_args){.lo = lo, .hi = hi}, 1, &x, out);
}

kiln_status kiln_clamp_out(const kiln_tensor *x, double lo, double hi, kiln_tensor *out)
{
    const char *fn = "kiln_clamp_out";
    kiln_status s = check_given(fn, out);
    return s != KILN_OK ? s : clamp(fn, x, lo, hi, out, NULL);
}
