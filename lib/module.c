/* module.c - layers as objects (PyTorch's torch.nn modules): each holds its parameters (leaves
 * requiring grad, made with Philox so a seed gives the same model on every device) and runs the
 * functional form (lib/nn/layers.c) in kiln_module_forward. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/recurrent.h"
#include "ops/random.h"

#include "alloc.h"
#include "dtype.h"
#include "live.h"
#include "ops/optables.h"
#include "params.h"
#include "profiler.h"
#include "registry.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

typedef enum kind {
    LINEAR,
    LAYER_NORM,
    EMBEDDING,
    DROPOUT,
    ACTIVATION,
    SEQUENTIAL,
    CONV2D,
    MAX_POOL2D,
    AVG_POOL2D,
    ADAPTIVE_AVG_POOL2D,
    BATCH_NORM,
    FLATTEN,
    RECURRENT,
} kind;

struct kiln_module {
    kind kind;
    bool owned; /* a sequential holds it */
    bool training;
    kiln_tensor *weight, *bias; /* NULL where the layer has none */
    /* buffers (state, not parameters): batch norm's, NULL elsewhere */
    kiln_tensor *running_mean, *running_var, *num_batches_tracked;
    double eps, p, momentum;
    uint64_t seed, calls;
    kiln_unary_op op;
    kiln_conv2d_params conv;
    kiln_pool2d_params pool;
    int64_t out_h, out_w; /* adaptive pooling's output size */
    int start, end;       /* flatten's dimensions */
    int bn_dims;          /* batch norm: 1 (BatchNorm1d: [N, C] or [N, C, L]) or 2 ([N, C, H, W]) */
    int n;
    kiln_module **mods;
    /* recurrent layers: the stack, and per layer and direction w_ih, w_hh, b_ih, b_hh (NULL
     * without bias) in rw[4 (l D + d) ...] */
    kiln__rnn_config rnn;
    kiln_tensor **rw;
    int nrw;
};

void kiln_module_free(kiln_module *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n; i++)
        kiln_module_free(m->mods[i]);
    free(m->mods);
    for (int i = 0; i < m->nrw; i++)
        kiln_tensor_release(m->rw[i]);
    free(m->rw);
    kiln_tensor_release(m->weight);
    kiln_tensor_release(m->bias);
    kiln_tensor_release(m->running_mean);
    kiln_tensor_release(m->running_var);
    kiln_tensor_release(m->num_batches_tracked);
    free(m);
    kiln__live_add(KILN__LIVE_MODULE, -1);
}

static kiln_status new_module(kind k, const char *op, kiln_module **out)
{
    kiln_module *m = kiln__calloc(1, sizeof *m);
    if (!m)
        return kiln__host_oom(op);
    kiln__live_add(KILN__LIVE_MODULE, 1);
    m->kind = k;
    m->training = true;
    *out = m;
    return KILN_OK;
}

/* The checks every layer with parameters shares. */
static kiln_status check_create(const char *op, kiln_device *dev, kiln_dtype dtype, kiln_module **m)
{
    if (!m)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: m is NULL", op);
    *m = NULL;
    if (!dev)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: dev is NULL", op);
    if (!kiln__dtype_valid(dtype))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", op, (int)dtype);
    if (!kiln__dtype_is_float(dtype))
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: dtype is %s; parameters must be floating (f32, f64, f16, bf16)", op,
                           kiln_dtype_name(dtype));
    return KILN_OK;
}

static kiln_status check_dims(const char *op, const char *a, int64_t va, const char *b, int64_t vb)
{
    if (va >= 1 && vb >= 1)
        return KILN_OK;
    return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is %" PRId64 "; it must be >= 1", op,
                       va < 1 ? a : b, va < 1 ? va : vb);
}

/* A layer's weight of shape fits: its element count in int64 and its bytes in size_t (the bias
 * and layer norm's are no larger). sizes names the layer's arguments for the message. */
static kiln_status check_weight(const char *op, const char *sizes, kiln_dtype dtype, int ndim,
                                const int64_t *shape)
{
    int64_t n = 1;
    bool fits = true;
    for (int d = 0; fits && d < ndim; d++)
        fits = kiln__dim_mul(n, shape[d], &n);
    if (fits && (uint64_t)n <= SIZE_MAX / kiln_dtype_size(dtype))
        return KILN_OK;
    char buf[128];
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: %s: the weight %s of %s has more bytes than an address can count; "
                       "the layer is too large",
                       op, sizes, kiln__shape_str(buf, sizeof buf, ndim, shape),
                       kiln_dtype_name(dtype));
}

/* A parameter: made by make (status s), then a leaf requiring grad, owned by the module and
 * kept out of the caller's scope. */
static kiln_status param(kiln_status s, kiln_tensor **t)
{
    if (s == KILN_OK)
        s = kiln_tensor_set_requires_grad(*t, true);
    if (s == KILN_OK)
        kiln__scope_forget(*t);
    return s;
}

/* The bias's Philox key: the weight's seed mixed (splitmix64), so that layers seeded 1, 2, ...
 * do not share streams. */
static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

kiln_status kiln_linear_create(kiln_device *dev, kiln_dtype dtype, int64_t in, int64_t out,
                               bool bias, kiln_init init, uint64_t seed, kiln_module **m)
{
    const char *op = "kiln_linear_create";
    kiln_status s = check_create(op, dev, dtype, m);
    if (s == KILN_OK)
        s = check_dims(op, "in", in, "out", out);
    if (s == KILN_OK && (init < KILN_INIT_DEFAULT || init > KILN_INIT_XAVIER))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown init %d", op, (int)init);
    int64_t ws[2] = {out, in};
    char sizes[64];
    snprintf(sizes, sizeof sizes, "in %" PRId64 ", out %" PRId64, in, out);
    if (s == KILN_OK)
        s = check_weight(op, sizes, dtype, 2, ws);
    kiln_module *l = NULL;
    if (s == KILN_OK)
        s = new_module(LINEAR, op, &l);
    if (s != KILN_OK)
        return s;
    seed = kiln__seed_resolve(seed);
    /* fan_in + fan_out in double: the sum of two int64 may not fit */
    double bound =
        init == KILN_INIT_XAVIER ? sqrt(6.0 / ((double)in + (double)out)) : 1.0 / sqrt((double)in);
    if (init == KILN_INIT_HE)
        s = kiln__rand(op, false, dev, dtype, 2, ws, seed, 0.0, sqrt(2.0 / (double)in), &l->weight);
    else
        s = kiln__rand(op, true, dev, dtype, 2, ws, seed, -bound, bound, &l->weight);
    s = param(s, &l->weight);
    if (s == KILN_OK && bias) {
        if (init == KILN_INIT_DEFAULT)
            s = kiln__rand(op, true, dev, dtype, 1, &out, mix(seed), -bound, bound, &l->bias);
        else
            s = kiln_full(dev, dtype, 1, &out, 0.0, &l->bias);
        s = param(s, &l->bias);
    }
    if (s != KILN_OK) {
        kiln_module_free(l);
        return s;
    }
    *m = l;
    return KILN_OK;
}

kiln_status kiln_layer_norm_create(kiln_device *dev, kiln_dtype dtype, int64_t dim, double eps,
                                   kiln_module **m)
{
    const char *op = "kiln_layer_norm_create";
    kiln_status s = check_create(op, dev, dtype, m);
    if (s == KILN_OK)
        s = check_dims(op, "dim", dim, "dim", dim);
    if (s == KILN_OK && !(eps >= 0 && isfinite(eps)))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: eps is %g; it must be finite and >= 0", op,
                        eps);
    char sizes[32];
    snprintf(sizes, sizeof sizes, "dim %" PRId64, dim);
    if (s == KILN_OK)
        s = check_weight(op, sizes, dtype, 1, &dim);
    kiln_module *l = NULL;
    if (s == KILN_OK)
        s = new_module(LAYER_NORM, op, &l);
    if (s != KILN_OK)
        return s;
    l->eps = eps;
    s = param(kiln_full(dev, dtype, 1, &dim, 1.0, &l->weight), &l->weight);
    if (s == KILN_OK)
        s = param(kiln_full(dev, dtype, 1, &dim, 0.0, &l->bias), &l->bias);
    if (s != KILN_OK) {
        kiln_module_free(l);
        return s;
    }
    *m = l;
    return KILN_OK;
}

kiln_status kiln_embedding_create(kiln_device *dev, kiln_dtype dtype, int64_t count, int64_t dim,
                                  uint64_t seed, kiln_module **m)
{
    const char *op = "kiln_embedding_create";
    kiln_status s = check_create(op, dev, dtype, m);
    if (s == KILN_OK)
        s = check_dims(op, "count", count, "dim", dim);
    int64_t shape[2] = {count, dim};
    char sizes[64];
    snprintf(sizes, sizeof sizes, "count %" PRId64 ", dim %" PRId64, count, dim);
    if (s == KILN_OK)
        s = check_weight(op, sizes, dtype, 2, shape);
    kiln_module *l = NULL;
    if (s == KILN_OK)
        s = new_module(EMBEDDING, op, &l);
    if (s != KILN_OK)
        return s;
    s = param(
        kiln__rand(op, false, dev, dtype, 2, shape, kiln__seed_resolve(seed), 0.0, 1.0, &l->weight),
        &l->weight);
    if (s != KILN_OK) {
        kiln_module_free(l);
        return s;
    }
    *m = l;
    return KILN_OK;
}

kiln_status kiln_dropout_create(double p, uint64_t seed, kiln_module **m)
{
    const char *op = "kiln_dropout_create";
    if (!m)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: m is NULL", op);
    *m = NULL;
    if (!(p >= 0 && p < 1))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: p is %g; it must be in [0, 1)", op, p);
    kiln_status s = new_module(DROPOUT, op, m);
    if (s == KILN_OK) {
        (*m)->p = p;
        (*m)->seed = kiln__seed_resolve(seed); /* drawn once: call k uses seed + k */
    }
    return s;
}

kiln_status kiln_activation_create(kiln_unary_op op_, kiln_module **m)
{
    const char *op = "kiln_activation_create";
    if (!m)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: m is NULL", op);
    *m = NULL;
    if (!kiln__unary_name(op_))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown unary op %d", op, (int)op_);
    kiln_status s = new_module(ACTIVATION, op, m);
    if (s == KILN_OK)
        (*m)->op = op_;
    return s;
}

/* A buffer: module state that is not a parameter (no grad), kept out of the caller's scope. */
static kiln_status buffer(kiln_status s, kiln_tensor **t)
{
    if (s == KILN_OK)
        kiln__scope_forget(*t);
    return s;
}

/* Each of the n ints at v (named name[0..n-1]) is >= lo; 0 means the default where lo is 0. */
static kiln_status check_ints(const char *op, const char *what, const int *v, int n, int lo)
{
    for (int i = 0; i < n; i++)
        if (v[i] < lo)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s[%d] is %d; it must be >= %d%s",
                               op, what, i, v[i], lo, lo == 0 ? " (0: the default)" : "");
    return KILN_OK;
}

kiln_status kiln_conv2d_create(kiln_device *dev, kiln_dtype dtype, int64_t in, int64_t out, int kh,
                               int kw, const kiln_conv2d_params *params, bool bias, uint64_t seed,
                               kiln_module **m)
{
    const char *op = "kiln_conv2d_create";
    kiln_status s = check_create(op, dev, dtype, m);
    if (s == KILN_OK)
        s = check_dims(op, "in", in, "out", out);
    if (s == KILN_OK)
        s = check_dims(op, "kh", kh, "kw", kw);
    kiln_conv2d_params p = params ? *params : (kiln_conv2d_params){0};
    if (s == KILN_OK)
        s = check_ints(op, "params->stride", p.stride, 2, 0);
    if (s == KILN_OK)
        s = check_ints(op, "params->padding", p.padding, 2, 0);
    if (s == KILN_OK)
        s = check_ints(op, "params->dilation", p.dilation, 2, 0);
    if (s == KILN_OK)
        s = check_ints(op, "params->groups", &p.groups, 1, 0);
    int64_t groups = p.groups ? p.groups : 1;
    if (s == KILN_OK && (in % groups || out % groups))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: in %" PRId64 " and out %" PRId64 " must both be divisible by "
                        "groups %" PRId64,
                        op, in, out, groups);
    int64_t ws[4] = {out, in / groups, kh, kw};
    char sizes[96];
    snprintf(sizes, sizeof sizes, "in %" PRId64 ", out %" PRId64 ", kernel %dx%d", in, out, kh, kw);
    if (s == KILN_OK)
        s = check_weight(op, sizes, dtype, 4, ws);
    kiln_module *l = NULL;
    if (s == KILN_OK)
        s = new_module(CONV2D, op, &l);
    if (s != KILN_OK)
        return s;
    l->conv = p;
    seed = kiln__seed_resolve(seed);
    /* PyTorch's Conv2d: kaiming_uniform(a = sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
     * fan_in = in / groups * kh * kw, and the bias from the same range */
    double bound = 1.0 / sqrt((double)ws[1] * (double)kh * (double)kw);
    s = param(kiln__rand(op, true, dev, dtype, 4, ws, seed, -bound, bound, &l->weight), &l->weight);
    if (s == KILN_OK && bias)
        s = param(kiln__rand(op, true, dev, dtype, 1, &out, mix(seed), -bound, bound, &l->bias),
                  &l->bias);
    if (s != KILN_OK) {
        kiln_module_free(l);
        return s;
    }
    *m = l;
    return KILN_OK;
}

static kiln_status pool_create(const char *op, kind k, const kiln_pool2d_params *params,
                               kiln_module **m)
{
    if (!m)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: m is NULL", op);
    *m = NULL;
    if (!params)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: params is NULL (the kernel size is "
                           "required)",
                           op);
    kiln_status s = check_ints(op, "params->kernel", params->kernel, 2, 1);
    if (s == KILN_OK)
        s = check_ints(op, "params->stride", params->stride, 2, 0);
    if (s == KILN_OK)
        s = check_ints(op, "params->padding", params->padding, 2, 0);
    for (int i = 0; s == KILN_OK && i < 2; i++)
        if (params->padding[i] > params->kernel[i] / 2)
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                            "%s: params->padding[%d] is %d; it must be at most half the kernel "
                            "(%d)",
                            op, i, params->padding[i], params->kernel[i] / 2);
    if (s == KILN_OK)
        s = new_module(k, op, m);
    if (s == KILN_OK)
        (*m)->pool = *params;
    return s;
}

kiln_status kiln_max_pool2d_create(const kiln_pool2d_params *params, kiln_module **m)
{
    return pool_create("kiln_max_pool2d_create", MAX_POOL2D, params, m);
}

kiln_status kiln_avg_pool2d_create(const kiln_pool2d_params *params, kiln_module **m)
{
    return pool_create("kiln_avg_pool2d_create", AVG_POOL2D, params, m);
}

kiln_status kiln_adaptive_avg_pool2d_create(int64_t oh, int64_t ow, kiln_module **m)
{
    const char *op = "kiln_adaptive_avg_pool2d_create";
    if (!m)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: m is NULL", op);
    *m = NULL;
    kiln_status s = check_dims(op, "oh", oh, "ow", ow);
    if (s == KILN_OK && (oh != 1 || ow != 1))
        s = kiln__error(KILN_ERR_UNSUPPORTED,
                        "%s: output %" PRId64 "x%" PRId64 "; only the global average (1x1) is "
                        "supported for now",
                        op, oh, ow);
    if (s == KILN_OK)
        s = new_module(ADAPTIVE_AVG_POOL2D, op, m);
    if (s == KILN_OK) {
        (*m)->out_h = oh;
        (*m)->out_w = ow;
    }
    return s;
}

static kiln_status batch_norm_create(const char *op, int dims, kiln_device *dev, kiln_dtype dtype,
                                     int64_t features, double eps, double momentum, kiln_module **m)
{
    kiln_status s = check_create(op, dev, dtype, m);
    if (s == KILN_OK)
        s = check_dims(op, "features", features, "features", features);
    if (s == KILN_OK && !(eps >= 0 && isfinite(eps)))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: eps is %g; it must be finite and >= 0", op,
                        eps);
    if (s == KILN_OK && !(momentum >= 0 && momentum <= 1))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: momentum is %g; it must be in [0, 1]", op,
                        momentum);
    char sizes[48];
    snprintf(sizes, sizeof sizes, "features %" PRId64, features);
    if (s == KILN_OK)
        s = check_weight(op, sizes, dtype, 1, &features);
    kiln_module *l = NULL;
    if (s == KILN_OK)
        s = new_module(BATCH_NORM, op, &l);
    if (s != KILN_OK)
        return s;
    l->bn_dims = dims;
    l->eps = eps;
    l->momentum = momentum;
    /* PyTorch's: weight ones, bias zeros, running_mean zeros, running_var ones,
     * num_batches_tracked a 0-d i64 zero */
    s = param(kiln_full(dev, dtype, 1, &features, 1.0, &l->weight), &l->weight);
    if (s == KILN_OK)
        s = param(kiln_full(dev, dtype, 1, &features, 0.0, &l->bias), &l->bias);
    if (s == KILN_OK)
        s = buffer(kiln_full(dev, dtype, 1, &features, 0.0, &l->running_mean), &l->running_mean);
    if (s == KILN_OK)
        s = buffer(kiln_full(dev, dtype, 1, &features, 1.0, &l->running_var), &l->running_var);
    if (s == KILN_OK)
        s = buffer(kiln_full(dev, KILN_I64, 0, NULL, 0.0, &l->num_batches_tracked),
                   &l->num_batches_tracked);
    if (s != KILN_OK) {
        kiln_module_free(l);
        return s;
    }
    *m = l;
    return KILN_OK;
}

kiln_status kiln_batch_norm1d_create(kiln_device *dev, kiln_dtype dtype, int64_t features,
                                     double eps, double momentum, kiln_module **m)
{
    return batch_norm_create("kiln_batch_norm1d_create", 1, dev, dtype, features, eps, momentum, m);
}

kiln_status kiln_batch_norm2d_create(kiln_device *dev, kiln_dtype dtype, int64_t features,
                                     double eps, double momentum, kiln_module **m)
{
    return batch_norm_create("kiln_batch_norm2d_create", 2, dev, dtype, features, eps, momentum, m);
}

kiln_status kiln_flatten_create(int start, int end, kiln_module **m)
{
    const char *op = "kiln_flatten_create";
    if (!m)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: m is NULL", op);
    *m = NULL;
    /* the dimensions are checked against x's rank in forward (kiln_flatten's messages) */
    if (start < -KILN_MAX_DIMS || start >= KILN_MAX_DIMS || end < -KILN_MAX_DIMS ||
        end >= KILN_MAX_DIMS)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: start %d, end %d; a tensor has at most %d dimensions", op, start,
                           end, KILN_MAX_DIMS);
    kiln_status s = new_module(FLATTEN, op, m);
    if (s == KILN_OK) {
        (*m)->start = start;
        (*m)->end = end;
    }
    return s;
}

/* ---- recurrent layers ---- */

static kiln_status recurrent_create(const char *op, kiln__rnn_mode mode, kiln_device *dev,
                                    kiln_dtype dtype, int64_t input_size, int64_t hidden_size,
                                    const kiln_rnn_options *opt, uint64_t seed, kiln_module **m)
{
    kiln_status s = check_create(op, dev, dtype, m);
    if (s == KILN_OK)
        s = check_dims(op, "input_size", input_size, "hidden_size", hidden_size);
    kiln_rnn_options o = opt ? *opt : (kiln_rnn_options){0};
    if (s == KILN_OK && o.num_layers < 0)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: num_layers is %d; it must be >= 1 (0: 1)",
                        op, o.num_layers);
    if (s == KILN_OK && !(o.dropout >= 0 && o.dropout < 1))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: dropout is %g; it must be in [0, 1)", op,
                        o.dropout);
    if (s == KILN_OK && o.relu && mode != KILN__RNN_TANH)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: relu is an option of kiln_rnn_create (the plain RNN) only", op);
    if (s == KILN_OK && dtype != KILN_F32 && dtype != KILN_F64)
        s = kiln__error(KILN_ERR_UNSUPPORTED,
                        "%s: dtype is %s; recurrent layers compute in f32 or f64 (their matmuls "
                        "run in f32 and f64 only): create the layer in f32",
                        op, kiln_dtype_name(dtype));
    int L = o.num_layers ? o.num_layers : 1, D = o.bidirectional ? 2 : 1;
    int64_t G = kiln__rnn_gates(mode), wide = hidden_size * D;
    int64_t ws[2] = {G * hidden_size, input_size > wide ? input_size : wide};
    char sizes[96];
    snprintf(sizes, sizeof sizes, "input_size %" PRId64 ", hidden_size %" PRId64, input_size,
             hidden_size);
    if (s == KILN_OK && (hidden_size > INT64_MAX / 8 || L > 4096))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s, num_layers %d: the layer is too large",
                        op, sizes, L);
    if (s == KILN_OK)
        s = check_weight(op, sizes, dtype, 2, ws);
    kiln_module *l = NULL;
    if (s == KILN_OK)
        s = new_module(RECURRENT, op, &l);
    if (s != KILN_OK)
        return s;
    l->rnn = (kiln__rnn_config){
        .mode = o.relu ? KILN__RNN_RELU : mode,
        .input_size = input_size,
        .hidden_size = hidden_size,
        .layers = L,
        .directions = D,
        .bias = !o.no_bias,
        .batch_first = o.batch_first,
        .dropout = o.dropout,
    };
    l->p = o.dropout;
    l->seed = kiln__seed_resolve(seed);
    l->nrw = 4 * L * D;
    if (!(l->rw = kiln__calloc((size_t)l->nrw, sizeof(kiln_tensor *)))) {
        l->nrw = 0;
        kiln_module_free(l);
        return kiln__host_oom(op);
    }
    /* PyTorch's init: every weight and bias U(-1/sqrt(hidden), 1/sqrt(hidden)); each tensor its
     * own Philox key */
    double bound = 1.0 / sqrt((double)hidden_size);
    uint64_t key = l->seed;
    for (int i = 0; s == KILN_OK && i < l->nrw; i++) {
        int layer = i / (4 * D), which = i % 4;
        int64_t in = layer == 0 ? input_size : wide, gh = G * hidden_size;
        int64_t shape[2] = {gh, which == 0 ? in : hidden_size};
        key = mix(key);
        if (which >= 2 && o.no_bias)
            continue;
        s = param(kiln__rand(op, true, dev, dtype, which >= 2 ? 1 : 2, shape, key, -bound, bound,
                             &l->rw[i]),
                  &l->rw[i]);
    }
    if (s != KILN_OK) {
        kiln_module_free(l);
        return s;
    }
    *m = l;
    return KILN_OK;
}

kiln_status kiln_rnn_create(kiln_device *dev, kiln_dtype dtype, int64_t input_size,
                            int64_t hidden_size, const kiln_rnn_options *opt, uint64_t seed,
                            kiln_module **m)
{
    return recurrent_create("kiln_rnn_create", KILN__RNN_TANH, dev, dtype, input_size, hidden_size,
                            opt, seed, m);
}

kiln_status kiln_lstm_create(kiln_device *dev, kiln_dtype dtype, int64_t input_size,
                             int64_t hidden_size, const kiln_rnn_options *opt, uint64_t seed,
                             kiln_module **m)
{
    return recurrent_create("kiln_lstm_create", KILN__RNN_LSTM, dev, dtype, input_size, hidden_size,
                            opt, seed, m);
}

kiln_status kiln_gru_create(kiln_device *dev, kiln_dtype dtype, int64_t input_size,
                            int64_t hidden_size, const kiln_rnn_options *opt, uint64_t seed,
                            kiln_module **m)
{
    return recurrent_create("kiln_gru_create", KILN__RNN_GRU, dev, dtype, input_size, hidden_size,
                            opt, seed, m);
}

/* Free every module of mods that no sequential owns, each once (the list may repeat one). */
static void free_unowned(kiln_module *const *mods, int n)
{
    for (int i = 0; mods && i < n; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = mods[j] == mods[i];
        if (!seen && mods[i] && !mods[i]->owned)
            kiln_module_free(mods[i]);
    }
}

kiln_status kiln_sequential_create(kiln_module *const *mods, int n, kiln_module **m)
{
    const char *op = "kiln_sequential_create";
    kiln_status s = KILN_OK;
    if (!m)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: m is NULL", op);
    else
        *m = NULL;
    if (s == KILN_OK && (n < 1 || !mods))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s", op,
                        !mods ? "mods is NULL" : "n must be >= 1");
    for (int i = 0; s == KILN_OK && i < n; i++) {
        if (!mods[i])
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: mods[%d] is NULL", op, i);
        for (int j = 0; s == KILN_OK && j < i; j++)
            if (mods[j] == mods[i])
                s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: mods[%d] is mods[%d] again", op, i,
                                j);
        if (s == KILN_OK && mods[i]->owned)
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                            "%s: mods[%d] already belongs to another sequential", op, i);
    }
    kiln_module *q = NULL;
    if (s == KILN_OK)
        s = new_module(SEQUENTIAL, op, &q);
    if (s == KILN_OK && !(q->mods = kiln__calloc((size_t)n, sizeof(kiln_module *)))) {
        s = kiln__host_oom(op);
        free(q);
        kiln__live_add(KILN__LIVE_MODULE, -1);
    }
    if (s != KILN_OK) {
        free_unowned(mods, n);
        return s;
    }
    for (int i = 0; i < n; i++) {
        q->mods[i] = mods[i];
        mods[i]->owned = true;
    }
    q->n = n;
    *m = q;
    return KILN_OK;
}

static kiln_status check_module(const kiln_module *m, const char *op)
{
    return m ? KILN_OK : kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: m is NULL", op);
}

/* Embedding: indices of any shape -> [..., dim], through index_select (reshaped to 1-D). */
static kiln_status embed(const kiln_module *m, const kiln_tensor *idx, kiln_tensor **y)
{
    const char *op = "kiln_module_forward (embedding)";
    kiln_status s = kiln__check_tensor(idx, op, "x");
    if (s == KILN_OK && idx->dtype != KILN_I32 && idx->dtype != KILN_I64)
        s = kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: x is %s; indices must be i32 or i64", op,
                        kiln_dtype_name(idx->dtype));
    if (s == KILN_OK && idx->ndim >= KILN_MAX_DIMS)
        s = kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: x has %d dims; at most %d", op, idx->ndim,
                        KILN_MAX_DIMS - 1);
    if (s != KILN_OK)
        return s;
    int64_t flat = idx->numel, shape[KILN_MAX_DIMS];
    memcpy(shape, idx->shape, (size_t)idx->ndim * sizeof *shape);
    shape[idx->ndim] = m->weight->shape[1];
    kiln_tensor *i1 = NULL, *rows = NULL;
    s = kiln_tensor_reshape(idx, 1, &flat, &i1);
    if (s == KILN_OK)
        s = kiln_index_select(m->weight, 0, i1, &rows);
    if (s == KILN_OK)
        s = kiln_tensor_reshape(rows, idx->ndim + 1, shape, y);
    kiln_tensor_release(i1);
    kiln_tensor_release(rows);
    return s;
}

/* Batch norm: x's rank as the module's kind asks (PyTorch's message), then kiln_batch_norm with
 * the running buffers; a training forward counts the batch in num_batches_tracked (on the device,
 * no wait). */
static kiln_status batch_norm_forward(kiln_module *m, const kiln_tensor *x, kiln_tensor **y)
{
    const char *op = "kiln_module_forward (batch norm)";
    kiln_status s = kiln__check_tensor(x, op, "x");
    if (s != KILN_OK)
        return s;
    bool ok = m->bn_dims == 2 ? x->ndim == 4 : x->ndim == 2 || x->ndim == 3;
    if (!ok)
        return kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: expected %s input (got %dD input)", op,
                           m->bn_dims == 2 ? "4D" : "2D or 3D", x->ndim);
    s = kiln_batch_norm(x, m->running_mean, m->running_var, m->weight, m->bias, m->training,
                        m->momentum, m->eps, y);
    if (s == KILN_OK && m->training) {
        bool grad = kiln_set_grad_enabled(false);
        s = kiln_binary_scalar_i64_out(KILN_BINARY_ADD, m->num_batches_tracked, 1,
                                       m->num_batches_tracked);
        kiln_set_grad_enabled(grad);
        if (s != KILN_OK) {
            kiln_tensor_release(*y);
            *y = NULL;
        }
    }
    return s;
}

/* A recurrent layer's forward; training call k (from 0) draws its dropout with seed + k L. */
static kiln_status recurrent_forward(const char *op, kiln_module *m, const kiln_tensor *x,
                                     const int64_t *lengths, const kiln_tensor *h0,
                                     const kiln_tensor *c0, kiln_tensor **y, kiln_tensor **h_n,
                                     kiln_tensor **c_n)
{
    bool drop = m->training && m->rnn.dropout > 0 && m->rnn.layers > 1;
    uint64_t seed = m->seed + m->calls * (uint64_t)m->rnn.layers;
    kiln_status s = kiln__rnn_run(op, &m->rnn, m->rw, x, lengths, h0, c0, drop, seed, y, h_n, c_n);
    m->calls += s == KILN_OK && drop;
    return s;
}

kiln_status kiln_rnn_forward(kiln_module *m, const kiln_tensor *x, const int64_t *lengths,
                             const kiln_tensor *h0, const kiln_tensor *c0, kiln_tensor **y,
                             kiln_tensor **h_n, kiln_tensor **c_n)
{
    const char *op = "kiln_rnn_forward";
    if (y)
        *y = NULL;
    if (h_n)
        *h_n = NULL;
    if (c_n)
        *c_n = NULL;
    kiln_status s = check_module(m, op);
    if (s == KILN_OK && m->kind != RECURRENT)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: m is not a recurrent layer (kiln_rnn_create, kiln_lstm_create, "
                        "kiln_gru_create); run it with kiln_module_forward",
                        op);
    return s == KILN_OK ? recurrent_forward(op, m, x, lengths, h0, c0, y, h_n, c_n) : s;
}

static kiln_status module_forward(kiln_module *m, const kiln_tensor *x, kiln_tensor **y);

kiln_status kiln_module_forward(kiln_module *m, const kiln_tensor *x, kiln_tensor **y)
{
    int phase = kiln__profiler_phase(KILN__PHASE_FORWARD); /* what the profiler's records say */
    kiln_status s = module_forward(m, x, y);
    kiln__profiler_phase(phase);
    return s;
}

static kiln_status module_forward(kiln_module *m, const kiln_tensor *x, kiln_tensor **y)
{
    const char *op = "kiln_module_forward";
    if (!y)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: y is NULL", op);
    *y = NULL;
    kiln_status s = check_module(m, op);
    if (s != KILN_OK)
        return s;
    switch (m->kind) {
    case LINEAR:
        return kiln_linear(x, m->weight, m->bias, y);
    case LAYER_NORM:
        return kiln_layer_norm(x, m->weight, m->bias, m->eps, y);
    case EMBEDDING:
        return embed(m, x, y);
    case DROPOUT:
        if (!m->training) {
            s = kiln__check_handle(x, op, "x");
            /* A new handle on x's memory (a retained x would be released twice by a scope). */
            if (s == KILN_OK)
                s = kiln_tensor_reshape(x, kiln_tensor_ndim(x), kiln_tensor_shape(x), y);
            return s;
        }
        s = kiln__dropout(x, m->p, m->seed + m->calls, y);
        m->calls += s == KILN_OK;
        return s;
    case ACTIVATION:
        return kiln_unary(m->op, x, y);
    case CONV2D:
        return kiln_conv2d(x, m->weight, m->bias, &m->conv, y);
    case MAX_POOL2D:
        return kiln_max_pool2d(x, &m->pool, y, NULL);
    case AVG_POOL2D:
        return kiln_avg_pool2d(x, &m->pool, y);
    case ADAPTIVE_AVG_POOL2D:
        return kiln_adaptive_avg_pool2d(x, m->out_h, m->out_w, y);
    case BATCH_NORM:
        return batch_norm_forward(m, x, y);
    case FLATTEN:
        return kiln_flatten(x, m->start, m->end, y);
    case RECURRENT:
        return recurrent_forward("kiln_module_forward (recurrent layer)", m, x, NULL, NULL, NULL, y,
                                 NULL, NULL);
    case SEQUENTIAL: {
        if ((s = kiln__check_handle(x, op, "x")) != KILN_OK)
            return s;
        kiln_tensor *cur = (kiln_tensor *)x; /* borrowed; the layers' results are ours */
        for (int i = 0; s == KILN_OK && i < m->n; i++) {
            kiln_tensor *next = NULL;
            s = kiln_module_forward(m->mods[i], cur, &next);
            if (cur != x)
                kiln_tensor_release(cur);
            cur = next;
        }
        if (s == KILN_OK)
            *y = cur;
        return s;
    }
    }
    return KILN_ERR_INVALID_ARGUMENT;
}

/* A module's own tensors in PyTorch's state_dict order: parameters, then buffers. */
enum { N_PARAMS = 2, N_STATE = 5 };
static const char *const state_names[N_STATE] = {"weight", "bias", "running_mean", "running_var",
                                                 "num_batches_tracked"};

/* Add m's parameters (and its buffers when state is true) under prefix, then its modules'. */
static kiln_status add_params(const kiln_module *m, const char *prefix, bool state,
                              kiln_params *list)
{
    kiln_tensor *const ts[N_STATE] = {m->weight, m->bias, m->running_mean, m->running_var,
                                      m->num_batches_tracked};
    size_t plen = strlen(prefix);
    for (int i = 0; i < (state ? N_STATE : N_PARAMS); i++) {
        if (!ts[i])
            continue;
        char name[512];
        if (plen + 24 >= sizeof name)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "kiln_module_params: the prefix is too long (%zu bytes)", plen);
        snprintf(name, sizeof name, "%s%s%s", prefix, plen ? "." : "", state_names[i]);
        kiln_status s = kiln_params_add(list, name, ts[i]);
        if (s != KILN_OK)
            return s;
    }
    for (int i = 0; i < m->nrw; i++) { /* PyTorch's names: weight_ih_l0, bias_hh_l1_reverse */
        static const char *const rnames[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
        if (!m->rw[i])
            continue;
        int D = m->rnn.directions, layer = i / (4 * D), dir = (i / 4) % D;
        char name[512];
        if (plen + 40 >= sizeof name)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "kiln_module_params: the prefix is too long (%zu bytes)", plen);
        snprintf(name, sizeof name, "%s%s%s_l%d%s", prefix, plen ? "." : "", rnames[i % 4], layer,
                 dir ? "_reverse" : "");
        kiln_status s = kiln_params_add(list, name, m->rw[i]);
        if (s != KILN_OK)
            return s;
    }
    for (int i = 0; i < m->n; i++) {
        char sub[512];
        if (plen + 16 >= sizeof sub)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "kiln_module_params: the prefix is too long (%zu bytes)", plen);
        snprintf(sub, sizeof sub, "%s%s%d", prefix, plen ? "." : "", i);
        kiln_status s = add_params(m->mods[i], sub, state, list);
        if (s != KILN_OK)
            return s;
    }
    return KILN_OK;
}

static kiln_status list_tensors(const char *op, const kiln_module *m, const char *prefix,
                                bool state, kiln_params *list)
{
    kiln_status s = check_module(m, op);
    if (s == KILN_OK && !list)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: list is NULL", op);
    if (s != KILN_OK)
        return s;
    int before = kiln_params_count(list);
    s = add_params(m, prefix ? prefix : "", state, list);
    if (s != KILN_OK)
        kiln__params_truncate(list, before);
    return s;
}

kiln_status kiln_module_params(const kiln_module *m, const char *prefix, kiln_params *list)
{
    return list_tensors("kiln_module_params", m, prefix, false, list);
}

kiln_status kiln_module_state(const kiln_module *m, const char *prefix, kiln_params *list)
{
    return list_tensors("kiln_module_state", m, prefix, true, list);
}

/* A tensor slot (a module's weight, bias or buffer), the kind of module holding it and whether
 * it is a parameter (a leaf requiring grad) or a buffer. */
typedef struct slot {
    kiln_tensor **t;
    kind k;
    bool is_param;
} slot;

/* The tensor slots of m and the modules inside it (NULL ones skipped), in kiln_module_state's
 * order. Returns the count; fills at most cap of slots (may be NULL). */
static int param_slots(kiln_module *m, slot *slots, int at, int cap)
{
    kiln_tensor **own[N_STATE] = {&m->weight, &m->bias, &m->running_mean, &m->running_var,
                                  &m->num_batches_tracked};
    for (int i = 0; i < N_STATE; i++)
        if (*own[i]) {
            if (slots && at < cap)
                slots[at] = (slot){own[i], m->kind, i < N_PARAMS};
            at++;
        }
    for (int i = 0; i < m->nrw; i++)
        if (m->rw[i]) {
            if (slots && at < cap)
                slots[at] = (slot){&m->rw[i], m->kind, true};
            at++;
        }
    for (int i = 0; i < m->n; i++)
        at = param_slots(m->mods[i], slots, at, cap);
    return at;
}

/* Replace every parameter of m by convert(parameter): all made first (grad mode off, so each is
 * a new leaf), then swapped in, so that a failure changes nothing. A parameter convert gives back
 * as it is (same handle) stays. */
static kiln_status convert_params(kiln_module *m, const char *op,
                                  kiln_status (*convert)(kiln_tensor *, const void *, kind,
                                                         const char *, kiln_tensor **),
                                  const void *arg)
{
    int n = param_slots(m, NULL, 0, 0);
    slot *slots = kiln__calloc((size_t)(n ? n : 1), sizeof *slots);
    kiln_tensor **fresh = kiln__calloc((size_t)(n ? n : 1), sizeof(kiln_tensor *));
    if (!slots || !fresh) {
        free(slots);
        free(fresh);
        return kiln__host_oom(op);
    }
    param_slots(m, slots, 0, n);
    kiln_status s = KILN_OK;
    bool prev = kiln_set_grad_enabled(false);
    for (int i = 0; s == KILN_OK && i < n; i++) {
        s = convert(*slots[i].t, arg, slots[i].k, op, &fresh[i]);
        if (s == KILN_OK && fresh[i] != *slots[i].t)
            s = slots[i].is_param ? param(s, &fresh[i]) : buffer(s, &fresh[i]);
    }
    kiln_set_grad_enabled(prev);
    for (int i = 0; i < n; i++) {
        if (!fresh[i] || fresh[i] == *slots[i].t)
            continue;
        if (s == KILN_OK) {
            kiln_tensor_release(*slots[i].t);
            *slots[i].t = fresh[i];
        } else {
            kiln_tensor_release(fresh[i]);
        }
    }
    free(slots);
    free(fresh);
    return s;
}

static kiln_status to_device(kiln_tensor *t, const void *arg, kind k, const char *op,
                             kiln_tensor **out)
{
    (void)k;
    (void)op;
    kiln_device *dev = (kiln_device *)arg;
    if (kiln_tensor_device(t) == dev) {
        *out = t;
        return KILN_OK;
    }
    return kiln_tensor_to(t, dev, out);
}

static kiln_status to_dtype(kiln_tensor *t, const void *arg, kind k, const char *op,
                            kiln_tensor **out)
{
    kiln_dtype dtype = *(const kiln_dtype *)arg;
    /* as PyTorch's module.to(dtype): integer buffers (num_batches_tracked) keep theirs */
    if (kiln_tensor_dtype(t) == dtype || !kiln__dtype_is_float(kiln_tensor_dtype(t))) {
        *out = t;
        return KILN_OK;
    }
    if (k == RECURRENT && dtype != KILN_F32 && dtype != KILN_F64)
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: dtype is %s; half precision compute is not supported yet for "
                           "recurrent layers (their gate kernels run in f32 and f64 only): keep "
                           "the model in f32",
                           op, kiln_dtype_name(dtype));
    kiln_status s = kiln_cast(t, dtype, out);
    if (s == KILN_OK && (s = kiln_tensor_eval(*out)) != KILN_OK) { /* fail here, not later */
        kiln_tensor_release(*out);
        *out = NULL;
    }
    return s;
}

kiln_status kiln_module_to(kiln_module *m, kiln_device *dev)
{
    const char *op = "kiln_module_to";
    kiln_status s = check_module(m, op);
    if (s == KILN_OK)
        s = kiln__check_device(dev, op);
    return s == KILN_OK ? convert_params(m, op, to_device, dev) : s;
}

kiln_status kiln_module_to_dtype(kiln_module *m, kiln_dtype dtype)
{
    const char *op = "kiln_module_to_dtype";
    kiln_status s = check_module(m, op);
    if (s == KILN_OK && !kiln__dtype_valid(dtype))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", op, (int)dtype);
    if (s == KILN_OK && !kiln__dtype_is_float(dtype))
        s = kiln__error(KILN_ERR_DTYPE_MISMATCH,
                        "%s: dtype is %s; parameters must be floating (f32, f64, f16, bf16)", op,
                        kiln_dtype_name(dtype));
    return s == KILN_OK ? convert_params(m, op, to_dtype, &dtype) : s;
}

void kiln_module_set_training(kiln_module *m, bool training)
{
    if (!m)
        return;
    m->training = training;
    for (int i = 0; i < m->n; i++)
        kiln_module_set_training(m->mods[i], training);
}
