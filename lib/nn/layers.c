/* layers.c - the functional forms of the layers (kiln_linear, kiln_layer_norm, kiln_dropout),
 * each checked up front, then composed of kiln's differentiable ops, so that autograd records
 * them without gradient code of their own. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "autograd.h"
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

/* f16 and bf16: stored in 16 bits, computed in f32. */
static bool is_16bit(kiln_dtype dt)
{
    return dt == KILN_F16 || dt == KILN_BF16;
}

/* kiln_batch_norm's arguments; then *y is NULL. The parameters and running buffers are x's
 * dtype, or f32 for a 16-bit x (PyTorch's mixed batch norm, what autocast runs). */
static kiln_status check_batch_norm(const char *op, const kiln_tensor *const *ts,
                                    const char *const *names, bool training, double momentum,
                                    double eps, kiln_tensor **y)
{
    if (!y)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: y is NULL", op);
    *y = NULL;
    kiln_status s = kiln__check_tensors(op, 5, 1, ts, names, NULL);
    if (s != KILN_OK)
        return s;
    const kiln_tensor *x = ts[0];
    if (!kiln__dtype_is_float(x->dtype))
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: x is %s; it must be floating", op,
                           kiln_dtype_name(x->dtype));
    for (int i = 1; i < 5; i++)
        if (ts[i] && ts[i]->dtype != x->dtype && !(is_16bit(x->dtype) && ts[i]->dtype == KILN_F32))
            return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                               "%s: x is %s but %s is %s; the parameters and running buffers are "
                               "x's dtype (or f32 for an f16 or bf16 x)",
                               op, kiln_dtype_name(x->dtype), names[i],
                               kiln_dtype_name(ts[i]->dtype));
    s = kiln__check_dtype_on(x->dev, x->dtype, op);
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
    for (int i = 1; i < 5 && s == KILN_OK; i++)
        s = check_vector(op, names[i], ts[i], c, what);
    if (s == KILN_OK && !(eps >= 0 && isfinite(eps)))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: eps is %g; it must be finite and >= 0", op,
                        eps);
    if (s == KILN_OK && !(momentum >= 0 && momentum <= 1))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: momentum is %g; it must be in [0, 1]", op,
                        momentum);
    if (s == KILN_OK && !training && (!ts[1] || !ts[2]))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: evaluation mode normalises with running_mean and running_var; pass "
                        "both (or training = true)",
                        op);
    if (s == KILN_OK && training && count < 2)
        s = kiln__error(KILN_ERR_SHAPE_MISMATCH,
                        "%s: x has shape %s: %" PRId64 " value per channel; training needs more "
                        "than one (as PyTorch)",
                        op, kiln__shape_str(sh, sizeof sh, x->ndim, x->shape), count);
    return s;
}

/* running = (1 - momentum) running + momentum batch, in running's dtype (no grad). */
static kiln_status update_running(kiln_tensor *running, const kiln_tensor *batch, int64_t c,
                                  double scale, double momentum)
{
    kiln_tensor *t[5] = {0};
    kiln_status s = kiln_binary_scalar(KILN_BINARY_MUL, running, 1 - momentum, &t[0]);
    if (s == KILN_OK)
        s = kiln_tensor_reshape(batch, 1, &c, &t[1]);
    if (s == KILN_OK)
        s = kiln_binary_scalar(KILN_BINARY_MUL, t[1], scale, &t[2]);
    if (s == KILN_OK)
        s = kiln_add(t[0], t[2], &t[3]);
    if (s == KILN_OK && t[3]->dtype != running->dtype)
        s = kiln_cast(t[3], running->dtype, &t[4]);
    if (s == KILN_OK)
        s = kiln_tensor_copy(running, t[4] ? t[4] : t[3]);
    return drop(s, 5, t);
}

kiln_status kiln_batch_norm(const kiln_tensor *x, kiln_tensor *running_mean,
                            kiln_tensor *running_var, const kiln_tensor *weight,
                            const kiln_tensor *bias, bool training, double momentum, double eps,
                            kiln_tensor **y)
{
    const char *op = "kiln_batch_norm";
    const kiln_tensor *ts[5] = {x, running_mean, running_var, weight, bias};
    const char *const names[5] = {"x", "running_mean", "running_var", "weight", "bias"};
    kiln_status s = check_batch_norm(op, ts, names, training, momentum, eps, y);
    if (s != KILN_OK)
        return s;
    /* One autograd node (KILN__AG_BATCH_NORM) keeps x, the per-channel mean and 1/std: the
     * backward recomputes the normalised x from them (PyTorch's saved mean and invstd), rather
     * than keeping the composed ops' full-size intermediates. x as [N, C, R]; per channel the
     * mean and biased variance over N and R (training) or the running values, in f32 at least
     * (a 16-bit x is widened); y = (x - mean) rsqrt(var + eps) weight + bias, in x's dtype. */
    int64_t c = x->shape[1], rest = x->numel / c / (x->shape[0] ? x->shape[0] : 1);
    int64_t count = x->shape[0] * rest;
    const int64_t flat[3] = {x->shape[0], c, rest}, col[3] = {1, c, 1};
    kiln_tensor *t[16] = {0};
    enum { XR, XW, M1, MEAN, D, D2, V1, VAR, VE, R, N, NW, Y3, W3, B3, YW };
    bool grad = kiln_set_grad_enabled(false);
    s = kiln_tensor_reshape(x, 3, flat, &t[XR]);
    if (s == KILN_OK && is_16bit(x->dtype))
        s = kiln_cast(t[XR], KILN_F32, &t[XW]);
    const kiln_tensor *xw = t[XW] ? t[XW] : t[XR];
    if (training) {
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_MEAN, xw, 2, true, &t[M1]);
        if (s == KILN_OK) /* equal counts per sample: the mean of the means */
            s = kiln_reduce(KILN_REDUCE_MEAN, t[M1], 0, true, &t[MEAN]);
        if (s == KILN_OK)
            s = kiln_sub(xw, t[MEAN], &t[D]);
        if (s == KILN_OK)
            s = kiln_mul(t[D], t[D], &t[D2]);
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_MEAN, t[D2], 2, true, &t[V1]);
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_MEAN, t[V1], 0, true, &t[VAR]);
        /* the running values move toward the batch's (the variance unbiased) */
        if (s == KILN_OK && running_mean)
            s = update_running(running_mean, t[MEAN], c, momentum, momentum);
        if (s == KILN_OK && running_var)
            s = update_running(running_var, t[VAR], c,
                               momentum * (double)count / (double)(count - 1), momentum);
    } else {
        kiln_tensor *view = NULL;
        if (s == KILN_OK) /* a copy: the node keeps it, and the running buffer may change */
            s = kiln_tensor_reshape(running_mean, 3, col, &view);
        if (s == KILN_OK)
            s = kiln_tensor_clone(view, &t[MEAN]);
        kiln_tensor_release(view);
        if (s == KILN_OK)
            s = kiln_tensor_reshape(running_var, 3, col, &t[VAR]);
        if (s == KILN_OK)
            s = kiln_sub(xw, t[MEAN], &t[D]);
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
    if (s == KILN_OK && cur->dtype != x->dtype)
        s = kiln_cast(cur, x->dtype, &t[YW]);
    if (t[YW])
        cur = t[YW];
    if (s == KILN_OK)
        s = kiln_tensor_reshape(cur, x->ndim, x->shape, y);
    kiln_set_grad_enabled(grad);
    if (s == KILN_OK) {
        const kiln_tensor *ins[5] = {x, weight, bias, t[MEAN], t[R]};
        kiln__ag_args a = {.flags = training};
        s = kiln__ag_record(s, op, KILN__AG_BATCH_NORM, &a, 5, ins, y);
    }
    if (s != KILN_OK) {
        kiln_tensor_release(*y);
        *y = NULL;
    }
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
