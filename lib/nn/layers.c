/* layers.c - the functional forms of the layers (kiln_linear, kiln_layer_norm, kiln_dropout),
 * each checked up front, then composed of kiln's differentiable ops, so that autograd records
 * them without gradient code of their own. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "nn/layers.h"
#include "ops/amp.h"
#include "ops/common.h"
#include "ops/random.h"
#include "status.h"
#include "tensor.h"

/* Release ts[0..n-1] and return s. */
static kiln_status drop(kiln_status s, int n, kiln_tensor **ts)
{
    for (int i = 0; i < n; i++)
        kiln_tensor_release(ts[i]);
    return s;
}

/* x, the required y, and the optional tensors (NULL entries allowed) valid, on one device and
 * of x's floating dtype. */
static kiln_status check_args(const char *op, const kiln_tensor *x, int n,
                              const kiln_tensor *const *ts, const char *const *names, int required,
                              kiln_tensor **y)
{
    if (!y)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: y is NULL", op);
    *y = NULL;
    kiln_status s = kiln__check_tensors(op, n, required, ts, names, NULL);
    if (s != KILN_OK)
        return s;
    if (!kiln__dtype_is_float(x->dtype))
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: x is %s; it must be floating", op,
                           kiln_dtype_name(x->dtype));
    for (int i = 1; i < n; i++)
        if (ts[i] && ts[i]->dtype != x->dtype)
            return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: x is %s but %s is %s", op,
                               kiln_dtype_name(x->dtype), names[i], kiln_dtype_name(ts[i]->dtype));
    return kiln__check_dtype_on(x->dev, x->dtype, op);
}

/* A 1-D t of length len, or KILN_ERR_SHAPE_MISMATCH. */
static kiln_status check_vector(const char *op, const char *name, const kiln_tensor *t, int64_t len,
                                const char *what)
{
    if (!t || (t->ndim == 1 && t->shape[0] == len))
        return KILN_OK;
    char sh[160];
    return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                       "%s: %s has shape %s; it must be [%" PRId64 "] (%s)", op, name,
                       kiln__shape_str(sh, sizeof sh, t->ndim, t->shape), len, what);
}

kiln_status kiln_linear(const kiln_tensor *x, const kiln_tensor *weight, const kiln_tensor *bias,
                        kiln_tensor **y)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[3] = {x, weight, bias};
        kiln_tensor *tmp[3];
        kiln_status amp;
        if (kiln__amp_apply("kiln_linear", KILN__AMP_LOWER, 3, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_linear(in[0], in[1], in[2], y);
            else if (y)
                *y = NULL;
            kiln__amp_release(3, tmp);
            return amp;
        }
    }
    const char *op = "kiln_linear";
    kiln_status s = check_args(op, x, 3, (const kiln_tensor *[]){x, weight, bias},
                               (const char *const[]){"x", "weight", "bias"}, 2, y);
    if (s != KILN_OK)
        return s;
    if (weight->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != weight->shape[1])
        return kiln__shape_mismatch(op, "x", x->ndim, x->shape, "weight", weight->ndim,
                                    weight->shape, "; weight must be [out, in] and x [..., in]");
    s = check_vector(op, "bias", bias, weight->shape[0], "out, weight's first dimension");
    if (s != KILN_OK || x->ndim >= KILN_MAX_DIMS)
        return s != KILN_OK ? s
                            : kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: x has too many dims", op);
    int64_t rows = 1, flat[2], shape[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim - 1; d++) {
        rows *= x->shape[d];
        shape[d] = x->shape[d];
    }
    shape[x->ndim - 1] = weight->shape[0];
    flat[0] = rows;
    flat[1] = weight->shape[1];
    kiln_tensor *t[3] = {0};
    s = kiln_tensor_reshape(x, 2, flat, &t[0]);
    if (s == KILN_OK)
        s = kiln_matmul_trans(t[0], weight, KILN_MATMUL_TRANS_B, &t[1]);
    if (s == KILN_OK && bias)
        s = kiln_add(t[1], bias, &t[2]);
    if (s == KILN_OK)
        s = kiln_tensor_reshape(bias ? t[2] : t[1], x->ndim, shape, y);
    return drop(s, 3, t);
}

kiln_status kiln_layer_norm(const kiln_tensor *x, const kiln_tensor *weight,
                            const kiln_tensor *bias, double eps, kiln_tensor **y)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[3] = {x, weight, bias};
        kiln_tensor *tmp[3];
        kiln_status amp;
        if (kiln__amp_apply("kiln_layer_norm", KILN__AMP_F32, 3, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_layer_norm(in[0], in[1], in[2], eps, y);
            else if (y)
                *y = NULL;
            kiln__amp_release(3, tmp);
            return amp;
        }
    }
    const char *op = "kiln_layer_norm";
    kiln_status s = check_args(op, x, 3, (const kiln_tensor *[]){x, weight, bias},
                               (const char *const[]){"x", "weight", "bias"}, 1, y);
    if (s != KILN_OK)
        return s;
    if (x->ndim < 1 || x->shape[x->ndim - 1] < 1) {
        char sh[160];
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: x has shape %s; it needs a last axis of at least one element", op,
                           kiln__shape_str(sh, sizeof sh, x->ndim, x->shape));
    }
    int64_t dim = x->shape[x->ndim - 1];
    s = check_vector(op, "weight", weight, dim, "x's last dimension");
    if (s == KILN_OK)
        s = check_vector(op, "bias", bias, dim, "x's last dimension");
    if (s == KILN_OK && !(eps >= 0 && isfinite(eps)))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: eps is %g; it must be finite and >= 0", op,
                        eps);
    if (s != KILN_OK)
        return s;
    /* (x - mean) / sqrt(mean((x - mean)^2) + eps), then * weight + bias */
    kiln_tensor *t[8] = {0};
    s = kiln_reduce(KILN_REDUCE_MEAN, x, -1, true, &t[0]);
    if (s == KILN_OK)
        s = kiln_sub(x, t[0], &t[1]);
    if (s == KILN_OK)
        s = kiln_mul(t[1], t[1], &t[2]);
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_MEAN, t[2], -1, true, &t[3]);
    if (s == KILN_OK)
        s = kiln_binary_scalar(KILN_BINARY_ADD, t[3], eps, &t[4]);
    if (s == KILN_OK)
        s = kiln_unary(KILN_UNARY_RSQRT, t[4], &t[5]);
    if (s == KILN_OK)
        s = kiln_mul(t[1], t[5], weight || bias ? &t[6] : y);
    kiln_tensor *cur = t[6];
    if (s == KILN_OK && weight)
        s = kiln_mul(cur, weight, bias ? &t[7] : y);
    if (weight)
        cur = t[7];
    if (s == KILN_OK && bias)
        s = kiln_add(cur, bias, y);
    return drop(s, 8, t);
}

kiln_status kiln_batch_norm(const kiln_tensor *x, kiln_tensor *running_mean,
                            kiln_tensor *running_var, const kiln_tensor *weight,
                            const kiln_tensor *bias, bool training, double momentum, double eps,
                            kiln_tensor **y)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[3] = {x, weight, bias};
        kiln_tensor *tmp[3];
        kiln_status amp;
        if (kiln__amp_apply("kiln_batch_norm", KILN__AMP_F32, 3, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_batch_norm(in[0], running_mean, running_var, in[1], in[2], training,
                                      momentum, eps, y);
            else if (y)
                *y = NULL;
            kiln__amp_release(3, tmp);
            return amp;
        }
    }
    const char *op = "kiln_batch_norm";
    kiln_status s = check_args(
        op, x, 5, (const kiln_tensor *[]){x, running_mean, running_var, weight, bias},
        (const char *const[]){"x", "running_mean", "running_var", "weight", "bias"}, 1, y);
    if (s != KILN_OK)
        return s;
    char sh[160];
    if (x->ndim < 2 || x->shape[1] < 1)
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: x has shape %s; it needs [N, C, ...] with at least one channel", op,
                           kiln__shape_str(sh, sizeof sh, x->ndim, x->shape));
    int64_t c = x->shape[1], rest = x->numel / c / (x->shape[0] ? x->shape[0] : 1);
    int64_t count = x->shape[0] * rest; /* values per channel */
    const char *what = "one per channel, x's dimension 1";
    s = check_vector(op, "running_mean", running_mean, c, what);
    if (s == KILN_OK)
        s = check_vector(op, "running_var", running_var, c, what);
    if (s == KILN_OK)
        s = check_vector(op, "weight", weight, c, what);
    if (s == KILN_OK)
        s = check_vector(op, "bias", bias, c, what);
    if (s == KILN_OK && !(eps >= 0 && isfinite(eps)))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: eps is %g; it must be finite and >= 0", op,
                        eps);
    if (s == KILN_OK && !(momentum >= 0 && momentum <= 1))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: momentum is %g; it must be in [0, 1]", op,
                        momentum);
    if (s == KILN_OK && !training && (!running_mean || !running_var))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: evaluation mode normalises with running_mean and running_var; pass "
                        "both (or training = true)",
                        op);
    if (s == KILN_OK && training && count < 2)
        s = kiln__error(KILN_ERR_SHAPE_MISMATCH,
                        "%s: x has shape %s: %" PRId64 " value per channel; training needs more "
                        "than one (as PyTorch)",
                        op, kiln__shape_str(sh, sizeof sh, x->ndim, x->shape), count);
    if (s != KILN_OK)
        return s;
    /* x as [N, C, R]; per channel: mean and biased variance over N and R (training) or the
     * running values; (x - mean) rsqrt(var + eps) weight + bias */
    const int64_t flat[3] = {x->shape[0], c, rest}, col[3] = {1, c, 1};
    kiln_tensor *t[16] = {0};
    enum { XR, M1, MEAN, D, D2, V1, VAR, VE, R, N, NW, Y3, W3, B3, UPD, UPD2 };
    s = kiln_tensor_reshape(x, 3, flat, &t[XR]);
    if (training) {
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_MEAN, t[XR], 2, true, &t[M1]);
        if (s == KILN_OK) /* equal counts per sample: the mean of the means */
            s = kiln_reduce(KILN_REDUCE_MEAN, t[M1], 0, true, &t[MEAN]);
        if (s == KILN_OK)
            s = kiln_sub(t[XR], t[MEAN], &t[D]);
        if (s == KILN_OK)
            s = kiln_mul(t[D], t[D], &t[D2]);
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_MEAN, t[D2], 2, true, &t[V1]);
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_MEAN, t[V1], 0, true, &t[VAR]);
        /* running = (1 - momentum) running + momentum batch (the variance unbiased), no grad */
        bool grad = kiln_set_grad_enabled(false);
        kiln_tensor *ru[2] = {running_mean, running_var}, *bt[2] = {t[MEAN], t[VAR]};
        for (int i = 0; i < 2 && s == KILN_OK && running_mean; i++) {
            double scale = i ? momentum * (double)count / (double)(count - 1) : momentum;
            kiln_tensor *a = NULL, *b = NULL, *sum = NULL, *flat1 = NULL;
            s = kiln_binary_scalar(KILN_BINARY_MUL, ru[i], 1 - momentum, &a);
            if (s == KILN_OK)
                s = kiln_tensor_reshape(bt[i], 1, &c, &flat1);
            if (s == KILN_OK)
                s = kiln_binary_scalar(KILN_BINARY_MUL, flat1, scale, &b);
            if (s == KILN_OK)
                s = kiln_add(a, b, &sum);
            if (s == KILN_OK)
                s = kiln_tensor_copy(ru[i], sum);
            kiln_tensor_release(a);
            kiln_tensor_release(b);
            kiln_tensor_release(sum);
            kiln_tensor_release(flat1);
        }
        kiln_set_grad_enabled(grad);
    } else {
        if (s == KILN_OK)
            s = kiln_tensor_reshape(running_mean, 3, col, &t[MEAN]);
        if (s == KILN_OK)
            s = kiln_tensor_reshape(running_var, 3, col, &t[VAR]);
        if (s == KILN_OK)
            s = kiln_sub(t[XR], t[MEAN], &t[D]);
    }
    if (s == KILN_OK)
        s = kiln_binary_scalar(KILN_BINARY_ADD, t[VAR], eps, &t[VE]);
    if (s == KILN_OK)
        s = kiln_unary(KILN_UNARY_RSQRT, t[VE], &t[R]);
    if (s == KILN_OK)
        s = kiln_mul(t[D], t[R], &t[N]);
    kiln_tensor *cur = t[N];
    if (s == KILN_OK && weight)
        s = kiln_tensor_reshape(weight, 3, col, &t[W3]);
    if (s == KILN_OK && weight)
        s = kiln_mul(cur, t[W3], &t[NW]);
    if (weight)
        cur = t[NW];
    if (s == KILN_OK && bias)
        s = kiln_tensor_reshape(bias, 3, col, &t[B3]);
    if (s == KILN_OK && bias)
        s = kiln_add(cur, t[B3], &t[Y3]);
    if (bias)
        cur = t[Y3];
    if (s == KILN_OK)
        s = kiln_tensor_reshape(cur, x->ndim, x->shape, y);
    return drop(s, 16, t);
}

/* kiln_dropout's checks; then *y is NULL. */
static kiln_status check_dropout(const kiln_tensor *x, double p, kiln_tensor **y)
{
    const char *op = "kiln_dropout";
    kiln_status s =
        check_args(op, x, 1, (const kiln_tensor *[]){x}, (const char *const[]){"x"}, 1, y);
    if (s == KILN_OK && !(p >= 0 && p < 1))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: p is %g; it must be in [0, 1)", op, p);
    return s;
}

kiln_status kiln__dropout(const kiln_tensor *x, double p, uint64_t seed, kiln_tensor **y)
{
    kiln_status s = check_dropout(x, p, y);
    if (s != KILN_OK)
        return s;
    if (p == 0)
        return kiln_tensor_clone(x, y);
    /* element i survives when the i-th Philox uniform of seed is >= p */
    kiln_tensor *t[4] = {0};
    s = kiln__rand("kiln_dropout", true, x->dev, x->dtype, x->ndim, x->shape, seed, 0.0, 1.0,
                   &t[0]);
    if (s == KILN_OK)
        s = kiln_binary_scalar(KILN_BINARY_GE, t[0], p, &t[1]);
    if (s == KILN_OK)
        s = kiln_cast(t[1], x->dtype, &t[2]);
    if (s == KILN_OK)
        s = kiln_binary_scalar(KILN_BINARY_MUL, t[2], 1.0 / (1.0 - p), &t[3]);
    if (s == KILN_OK)
        s = kiln_mul(x, t[3], y);
    return drop(s, 4, t);
}

kiln_status kiln_dropout(const kiln_tensor *x, double p, uint64_t seed, kiln_tensor **y)
{
    kiln_status s = check_dropout(x, p, y);
    if (s != KILN_OK)
        return s;
    /* p = 0 uses no numbers, and draws none */
    return kiln__dropout(x, p, p == 0 ? seed : kiln__seed_resolve(seed), y);
}
