/* logsumexp.c - kiln_logsumexp: an op written with other ops (issue 20's add-an-op trial, "an
 * op built from others"): max, subtract, exp, sum, log, add. Its gradient is autograd's through
 * those ops, softmax(x) as PyTorch's; the maximum is taken with grad mode off (a constant), as
 * PyTorch's implementation does, and the subtract and exp fold into the sum's kernel where
 * fusion is on. */
#include <math.h>
#include <stdlib.h>

#include "amp.h"
#include "common.h"
#include "dtype.h"
#include "status.h"
#include "tensor.h"

/* The maximum along axis (keepdim), with infinities and NaN replaced by 0 so that x - m never
 * gives inf - inf; 0 for an empty axis. Computed with grad mode off. */
static kiln_status safe_max(const kiln_tensor *x, int axis, bool empty, const int64_t *kshape,
                            int kdim, kiln_tensor **out)
{
    kiln_tensor *m = NULL, *a = NULL, *finite = NULL, *zero = NULL;
    kiln_status s = kiln_tensor_zeros(x->dev, x->dtype, kdim, kshape, &zero);
    if (s == KILN_OK && empty) {
        *out = zero;
        return KILN_OK;
    }
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_MAX, x, axis, true, &m);
    if (s == KILN_OK)
        s = kiln_unary(KILN_UNARY_ABS, m, &a);
    if (s == KILN_OK) /* |m| < inf: false for infinities and NaN */
        s = kiln_binary_scalar(KILN_BINARY_LT, a, INFINITY, &finite);
    if (s == KILN_OK)
        s = kiln_where(finite, m, zero, out);
    kiln_tensor_release(m);
    kiln_tensor_release(a);
    kiln_tensor_release(finite);
    kiln_tensor_release(zero);
    return s;
}

kiln_status kiln_logsumexp(const kiln_tensor *x, int axis, bool keepdim, kiln_tensor **out)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[1] = {x};
        kiln_tensor *tmp[1];
        kiln_status amp;
        if (kiln__amp_apply("kiln_logsumexp", KILN__AMP_F32, 1, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_logsumexp(in[0], axis, keepdim, out);
            else if (out)
                *out = NULL;
            kiln__amp_release(1, tmp);
            return amp;
        }
    }
    const char *op = "kiln_logsumexp";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_tensor(x, op, "x");
    if (s != KILN_OK)
        return s;
    if (!kiln__dtype_is_float(x->dtype))
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: x is %s; logsumexp needs a floating dtype (cast to f32 first)", op,
                           kiln_dtype_name(x->dtype));
    /* The reduced axis (every axis for KILN_ALL_AXES) and the keepdim shape. */
    int64_t kshape[KILN_MAX_DIMS];
    int kdim = x->ndim;
    bool empty = x->numel == 0;
    if (axis != KILN_ALL_AXES && x->ndim > 0) {
        if (axis < -x->ndim || axis >= x->ndim)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: axis %d is out of range for a %d-D tensor; use %d..%d or "
                               "KILN_ALL_AXES",
                               op, axis, x->ndim, -x->ndim, x->ndim - 1);
        int a = axis < 0 ? axis + x->ndim : axis;
        for (int d = 0; d < x->ndim; d++)
            kshape[d] = d == a ? 1 : x->shape[d];
        empty = x->shape[a] == 0;
    } else {
        for (int d = 0; d < x->ndim; d++)
            kshape[d] = 1;
    }
    kiln_tensor *m = NULL, *d = NULL, *e = NULL, *sum = NULL, *l = NULL, *mr = NULL;
    kiln__log_hold(); /* inner errors are rewrapped under this op's name */
    bool grad = kiln_set_grad_enabled(false);
    s = safe_max(x, axis, empty, kshape, kdim, &m);
    kiln_set_grad_enabled(grad);
    if (s == KILN_OK)
        s = kiln_sub(x, m, &d);
    if (s == KILN_OK)
        s = kiln_unary(KILN_UNARY_EXP, d, &e);
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_SUM, e, axis, keepdim, &sum);
    if (s == KILN_OK)
        s = kiln_unary(KILN_UNARY_LOG, sum, &l);
    if (s == KILN_OK) /* m in the result's shape (a reshape of the same elements) */
        s = kiln_tensor_reshape(m, kiln_tensor_ndim(sum), kiln_tensor_shape(sum), &mr);
    if (s == KILN_OK)
        s = kiln_add(l, mr, out);
    if (s != KILN_OK)
        s = kiln__inner_error(s, op);
    kiln__log_release();
    kiln_tensor_release(m);
    kiln_tensor_release(d);
    kiln_tensor_release(e);
    kiln_tensor_release(sum);
    kiln_tensor_release(l);
    kiln_tensor_release(mr);
    return s;
}
