/* losses.c - the losses composed of ops (kiln_l1_loss, kiln_bce_loss,
 * kiln_bce_with_logits_loss), each checked up front under its own name and reduced as PyTorch's
 * reduction argument asks; autograd records the ops, so they need no gradient code. (MSE and
 * cross-entropy have kernels of their own: ops/nn.c.) */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "dtype.h"
#include "ops/amp.h"
#include "ops/common.h"
#include "status.h"
#include "tensor.h"

/* Release ts[0..n-1] and return s. */
static kiln_status drop(kiln_status s, int n, kiln_tensor **ts)
{
    for (int i = 0; i < n; i++)
        kiln_tensor_release(ts[i]);
    return s;
}

/* pred and target valid, on one device, of one floating dtype and one shape; reduction known. */
static kiln_status check_loss(const char *op, const char *pname, const kiln_tensor *pred,
                              const kiln_tensor *target, kiln_reduction reduction,
                              kiln_tensor **loss)
{
    if (!loss)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: loss is NULL", op);
    *loss = NULL;
    const char *names[2] = {pname, "target"};
    kiln_status s =
        kiln__check_tensors(op, 2, 2, (const kiln_tensor *const[]){pred, target}, names, NULL);
    if (s != KILN_OK)
        return s;
    if (!kiln__dtype_is_float(pred->dtype))
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: %s is %s; it must be floating", op, pname,
                           kiln_dtype_name(pred->dtype));
    if (target->dtype != pred->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: %s is %s but target is %s", op, pname,
                           kiln_dtype_name(pred->dtype), kiln_dtype_name(target->dtype));
    if (pred->ndim != target->ndim ||
        memcmp(pred->shape, target->shape, (size_t)pred->ndim * sizeof *pred->shape) != 0)
        return kiln__shape_mismatch(op, pname, pred->ndim, pred->shape, "target", target->ndim,
                                    target->shape, "; they must have one shape");
    if (reduction != KILN_REDUCTION_MEAN && reduction != KILN_REDUCTION_SUM &&
        reduction != KILN_REDUCTION_NONE)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: unknown reduction %d (KILN_REDUCTION_MEAN, _SUM or _NONE)", op,
                           (int)reduction);
    return kiln__check_dtype_on(pred->dev, pred->dtype, op);
}

/* *loss = the elementwise losses e reduced: their mean or sum ([1]), or e itself. */
static kiln_status reduce(kiln_tensor *e, kiln_reduction reduction, kiln_tensor **loss)
{
    if (reduction == KILN_REDUCTION_NONE) {
        *loss = e;
        return KILN_OK;
    }
    kiln_status s =
        kiln_reduce(reduction == KILN_REDUCTION_SUM ? KILN_REDUCE_SUM : KILN_REDUCE_MEAN, e,
                    KILN_ALL_AXES, false, loss);
    kiln_tensor_release(e);
    return s;
}

kiln_status kiln_l1_loss(const kiln_tensor *pred, const kiln_tensor *target,
                         kiln_reduction reduction, kiln_tensor **loss)
{
    const char *op = "kiln_l1_loss";
    kiln_status s = check_loss(op, "pred", pred, target, reduction, loss);
    if (s != KILN_OK)
        return s;
    /* |pred - target| */
    kiln_tensor *t[2] = {0};
    s = kiln_sub(pred, target, &t[0]);
    if (s == KILN_OK)
        s = kiln_unary(KILN_UNARY_ABS, t[0], &t[1]);
    if (s == KILN_OK) {
        s = reduce(t[1], reduction, loss);
        t[1] = NULL;
    }
    return drop(s, 2, t);
}

/* With KILN_CHECK=1, PyTorch's check that BCE's input holds probabilities (it reads pred back, so
 * it waits for the work that makes it); off, a value outside [0, 1] gives NaN there. */
static kiln_status check_probabilities(const char *op, const kiln_tensor *p)
{
    bool on;
    kiln_status s = kiln__checked_mode(op, &on);
    if (s != KILN_OK || !on || p->numel == 0)
        return s;
    kiln_tensor *f = NULL;
    if (kiln__dtype_is_narrow(p->dtype)) { /* read as f32 */
        bool grad = kiln_set_grad_enabled(false);
        s = kiln_cast(p, KILN_F32, &f);
        kiln_set_grad_enabled(grad);
    }
    const kiln_tensor *src = f ? f : p;
    void *buf = s == KILN_OK ? kiln__malloc(src->nbytes) : NULL;
    if (s == KILN_OK && !buf)
        s = kiln__host_oom(op);
    if (s == KILN_OK)
        s = kiln_tensor_read(src, buf, src->nbytes);
    for (int64_t i = 0; s == KILN_OK && i < src->numel; i++) {
        double v = src->dtype == KILN_F64 ? ((const double *)buf)[i] : ((const float *)buf)[i];
        if (!(v >= 0 && v <= 1))
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                            "%s: pred[%" PRId64 "] is %g, outside [0, 1]: BCE takes "
                            "probabilities (kiln_bce_with_logits_loss takes logits); found by "
                            "KILN_CHECK=1",
                            op, i, v);
    }
    free(buf);
    kiln_tensor_release(f);
    return s;
}

kiln_status kiln_bce_loss(const kiln_tensor *pred, const kiln_tensor *target,
                          kiln_reduction reduction, kiln_tensor **loss)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[2] = {pred, target};
        kiln_tensor *tmp[2];
        kiln_status amp;
        if (kiln__amp_apply("kiln_bce_loss", KILN__AMP_F32, 2, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_bce_loss(in[0], in[1], reduction, loss);
            else if (loss)
                *loss = NULL;
            kiln__amp_release(2, tmp);
            return amp;
        }
    }
    const char *op = "kiln_bce_loss";
    kiln_status s = check_loss(op, "pred", pred, target, reduction, loss);
    if (s == KILN_OK)
        s = check_probabilities(op, pred);
    if (s != KILN_OK)
        return s;
    /* -(t log p + (1 - t) log(1 - p)) = t (lq - lp) - lq with lp = log p and lq = log(1 - p),
     * each clamped to >= -100 as PyTorch's (so p = 0 or 1 gives 100, not inf) */
    kiln_tensor *t[9] = {0};
    enum { LP, LPC, NP, OM, LQ, LQC, DIFF, TD, E };
    s = kiln_unary(KILN_UNARY_LOG, pred, &t[LP]);
    if (s == KILN_OK)
        s = kiln_clamp(t[LP], -100, INFINITY, &t[LPC]);
    if (s == KILN_OK)
        s = kiln_binary_scalar(KILN_BINARY_MUL, pred, -1, &t[NP]);
    if (s == KILN_OK)
        s = kiln_binary_scalar(KILN_BINARY_ADD, t[NP], 1, &t[OM]);
    if (s == KILN_OK)
        s = kiln_unary(KILN_UNARY_LOG, t[OM], &t[LQ]);
    if (s == KILN_OK)
        s = kiln_clamp(t[LQ], -100, INFINITY, &t[LQC]);
    if (s == KILN_OK)
        s = kiln_sub(t[LQC], t[LPC], &t[DIFF]);
    if (s == KILN_OK)
        s = kiln_mul(target, t[DIFF], &t[TD]);
    if (s == KILN_OK)
        s = kiln_sub(t[TD], t[LQC], &t[E]);
    if (s == KILN_OK) {
        s = reduce(t[E], reduction, loss);
        t[E] = NULL;
    }
    return drop(s, 9, t);
}

kiln_status kiln_bce_with_logits_loss(const kiln_tensor *logits, const kiln_tensor *target,
                                      kiln_reduction reduction, kiln_tensor **loss)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[2] = {logits, target};
        kiln_tensor *tmp[2];
        kiln_status amp;
        if (kiln__amp_apply("kiln_bce_with_logits_loss", KILN__AMP_F32, 2, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_bce_with_logits_loss(in[0], in[1], reduction, loss);
            else if (loss)
                *loss = NULL;
            kiln__amp_release(2, tmp);
            return amp;
        }
    }
    const char *op = "kiln_bce_with_logits_loss";
    kiln_status s = check_loss(op, "logits", logits, target, reduction, loss);
    if (s != KILN_OK)
        return s;
    /* -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))) = softplus(x) - t x, stable: softplus is
     * log1p(exp(x)), x itself above 20; its gradient sigmoid(x) - t */
    kiln_tensor *t[3] = {0};
    s = kiln_unary(KILN_UNARY_SOFTPLUS, logits, &t[0]);
    if (s == KILN_OK)
        s = kiln_mul(target, logits, &t[1]);
    if (s == KILN_OK)
        s = kiln_sub(t[0], t[1], &t[2]);
    if (s == KILN_OK) {
        s = reduce(t[2], reduction, loss);
        t[2] = NULL;
    }
    return drop(s, 3, t);
}

/* The _out forms: the allocating form with grad mode off, copied into loss. */
typedef kiln_status (*loss_fn)(const kiln_tensor *, const kiln_tensor *, kiln_reduction,
                               kiln_tensor **);

static kiln_status loss_out(const char *op, loss_fn f, const kiln_tensor *a, const kiln_tensor *b,
                            kiln_reduction reduction, kiln_tensor *loss)
{
    if (!loss)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: loss is NULL", op);
    kiln__log_hold();
    bool grad = kiln_set_grad_enabled(false);
    kiln_tensor *r = NULL;
    kiln_status s = f(a, b, reduction, &r);
    kiln_set_grad_enabled(grad);
    return kiln__out_from(op, s, r, loss);
}

kiln_status kiln_l1_loss_out(const kiln_tensor *pred, const kiln_tensor *target,
                             kiln_reduction reduction, kiln_tensor *loss)
{
    return loss_out("kiln_l1_loss_out", kiln_l1_loss, pred, target, reduction, loss);
}

kiln_status kiln_bce_loss_out(const kiln_tensor *pred, const kiln_tensor *target,
                              kiln_reduction reduction, kiln_tensor *loss)
{
    return loss_out("kiln_bce_loss_out", kiln_bce_loss, pred, target, reduction, loss);
}

kiln_status kiln_bce_with_logits_loss_out(const kiln_tensor *logits, const kiln_tensor *target,
                                          kiln_reduction reduction, kiln_tensor *loss)
{
    return loss_out("kiln_bce_with_logits_loss_out", kiln_bce_with_logits_loss, logits, target,
                    reduction, loss);
}
