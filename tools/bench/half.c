/* half.c - kiln-bench half: the same kiln ops on f16 (and bf16) and on f32 tensors, interleaved
 * in one run, as rates in elements (or FLOP) per second, the f32 run being the baseline:
 * elementwise add, mul and relu on 16 Mi elements (--quick: 1 Mi), where half the bytes should
 * move at up to twice the rate (issue 25's goal: >= 1.8x on memory-bound ops), n x n matmuls
 * (16-bit products accumulate in f32; on CPU devices they pay for converting to f32 around
 * OpenBLAS), and an MLP's training step under f16 autocast with the gradient scaler (and bf16
 * autocast without one) against the same step in f32 (ms), with each step's memory above its
 * start in a note. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

typedef enum half_op { H_ADD, H_MUL, H_RELU, H_MATMUL } half_op;

static const char *const op_names[] = {"add", "mul", "relu", "matmul"};

/* One dtype's operands and output. */
typedef struct operands {
    kiln_tensor *a, *b, *out;
} operands;

static kiln_status run_op(const operands *o, half_op op)
{
    switch (op) {
    case H_ADD:
        return kiln_binary_out(KILN_BINARY_ADD, o->a, o->b, o->out);
    case H_MUL:
        return kiln_binary_out(KILN_BINARY_MUL, o->a, o->b, o->out);
    case H_RELU:
        return kiln_unary_out(KILN_UNARY_RELU, o->a, o->out);
    case H_MATMUL:
        return kiln_matmul_out(o->a, o->b, o->out);
    }
    return KILN_ERR_INVALID_ARGUMENT;
}

/* Rate of `iters` ops queued back to back, then one synchronize: `work` units per op. */
static kiln_status timed(kiln_device *dev, const operands *o, half_op op, int iters, double work,
                         double *rate)
{
    double t0 = bench_now();
    kiln_status s = KILN_OK;
    for (int i = 0; i < iters && s == KILN_OK; i++)
        s = run_op(o, op);
    if (s == KILN_OK)
        s = kiln_device_synchronize(dev);
    *rate = work * iters / (bench_now() - t0) * 1e-9;
    return s;
}

/* a and b random in [-1, 1) (f32, then cast for f16: both dtypes hold the same values up to
 * rounding), out empty. */
static kiln_status make(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *shape,
                        const int64_t *out_shape, uint64_t seed, operands *o)
{
    kiln_tensor *fa = NULL, *fb = NULL;
    kiln_status s = kiln_rand_uniform(dev, KILN_F32, ndim, shape, seed, -1.0, 1.0, &fa);
    if (s == KILN_OK)
        s = kiln_rand_uniform(dev, KILN_F32, ndim, shape, seed + 1, -1.0, 1.0, &fb);
    if (s == KILN_OK)
        s = kiln_cast(fa, dt, &o->a);
    if (s == KILN_OK)
        s = kiln_cast(fb, dt, &o->b);
    /* materialised: otherwise every timed op would recompute the casts from f32 (fusion) */
    if (s == KILN_OK)
        s = kiln_tensor_eval(o->a);
    if (s == KILN_OK)
        s = kiln_tensor_eval(o->b);
    if (s == KILN_OK)
        s = kiln_tensor_empty(dev, dt, ndim, out_shape, &o->out);
    kiln_tensor_release(fa);
    kiln_tensor_release(fb);
    return s;
}

static void release(operands *o)
{
    kiln_tensor_release(o->a);
    kiln_tensor_release(o->b);
    kiln_tensor_release(o->out);
    memset(o, 0, sizeof *o);
}

/* f16 against f32, samples interleaved and taking turns at going first. */
static int measure(bench_ctx *ctx, const operands *h, const operands *f, half_op op,
                   const char *label, const char *unit, double work)
{
    double k[64], base[64];
    int samples = ctx->repeats > 64 ? 64 : ctx->repeats;
    /* about 0.2 s of f32 work per sample on a CPU: 64 MiB moved, or 2 GFLOP */
    int iters = op == H_MATMUL ? (work >= 2e9 ? 1 : (int)(2e9 / work)) : ctx->quick ? 4 : 8;
    kiln_status s = run_op(h, op); /* builds the kernels: not timed */
    if (s == KILN_OK)
        s = run_op(f, op);
    if (s == KILN_OK)
        s = kiln_device_synchronize(ctx->dev);
    for (int r = 0; r < samples && s == KILN_OK; r++) {
        if (r % 2) {
            s = timed(ctx->dev, f, op, iters, work, &base[r]);
            if (s == KILN_OK)
                s = timed(ctx->dev, h, op, iters, work, &k[r]);
        } else {
            s = timed(ctx->dev, h, op, iters, work, &k[r]);
            if (s == KILN_OK)
                s = timed(ctx->dev, f, op, iters, work, &base[r]);
        }
    }
    if (s != KILN_OK)
        return bench_fail(label, s);
    bench_result res;
    bench_result_set(&res, label, unit, true, "kiln f32", k, base, samples);
    bench_report(ctx, &res);
    return 0;
}

static int elementwise(bench_ctx *ctx, kiln_dtype lo)
{
    size_t mi = ctx->quick ? 1 : 16;
    int64_t n = (int64_t)mi << 20;
    operands h = {0}, f = {0};
    kiln_status s = make(ctx->dev, lo, 1, &n, &n, 1, &h);
    if (s == KILN_OK)
        s = make(ctx->dev, KILN_F32, 1, &n, &n, 1, &f);
    int rc = s == KILN_OK ? 0 : bench_fail("half: tensors", s);
    bench_progress(ctx, "half: elementwise %s on %s (%s), %zu Mi elements\n", kiln_dtype_name(lo),
                   kiln_device_spec(ctx->dev), kiln_device_name(ctx->dev), mi);
    for (int op = H_ADD; op <= H_RELU && rc == 0; op++) {
        char label[96];
        snprintf(label, sizeof label, "%s %s %zu Mi", op_names[op], kiln_dtype_name(lo), mi);
        rc = measure(ctx, &h, &f, (half_op)op, label, "Gelem/s", (double)n);
    }
    release(&h);
    release(&f);
    return rc;
}

static int matmuls(bench_ctx *ctx, kiln_dtype lo)
{
    static const int sizes[] = {256, 512, 1024};
    int nsizes = ctx->quick ? 1 : 3, rc = 0;
    for (int i = 0; i < nsizes && rc == 0; i++) {
        int64_t sh[2] = {sizes[i], sizes[i]};
        operands h = {0}, f = {0};
        kiln_status s = make(ctx->dev, lo, 2, sh, sh, 3, &h);
        if (s == KILN_OK)
            s = make(ctx->dev, KILN_F32, 2, sh, sh, 3, &f);
        rc = s == KILN_OK ? 0 : bench_fail("half: matmul tensors", s);
        char label[96];
        snprintf(label, sizeof label, "matmul %s n=%d (%s)", kiln_dtype_name(lo), sizes[i],
                 kiln_matmul_path(ctx->dev) ? kiln_matmul_path(ctx->dev) : "?");
        if (rc == 0)
            rc = measure(ctx, &h, &f, H_MATMUL, label, "GFLOP/s",
                         2.0 * sizes[i] * (double)sizes[i] * sizes[i]);
        release(&h);
        release(&f);
    }
    return rc;
}

/* One MLP, its optimizer and scaler, trained in f32 or under autocast. */
typedef struct mlp {
    kiln_module *model;
    kiln_params *params;
    kiln_optimizer *opt;
    kiln_grad_scaler *scaler;
    kiln_dtype lo; /* autocast's dtype; KILN_F32: no autocast */
    bool amp;
    uint64_t step_bytes; /* the most a step allocated above its start */
    uint64_t fwd_bytes;  /* held after the forward and the loss above the step's start: what
                            the backward keeps (activations, autocast's f16 copies) */
} mlp;

static kiln_status mlp_init(bench_ctx *ctx, mlp *m, kiln_dtype lo, const int *width, int layers)
{
    m->lo = lo;
    m->amp = lo != KILN_F32;
    kiln_module *mods[7] = {0};
    int n = 0;
    kiln_status s = KILN_OK;
    for (int i = 0; i + 1 < layers && s == KILN_OK; i++) {
        s = kiln_linear_create(ctx->dev, KILN_F32, width[i], width[i + 1], true, KILN_INIT_DEFAULT,
                               (uint64_t)(11 + i), &mods[n++]);
        if (s == KILN_OK && i + 2 < layers)
            s = kiln_activation_create(KILN_UNARY_RELU, &mods[n++]);
    }
    if (s == KILN_OK)
        s = kiln_sequential_create(mods, n, &m->model);
    else
        for (int i = 0; i < n; i++)
            kiln_module_free(mods[i]);
    if (s == KILN_OK)
        s = kiln_params_create(&m->params);
    if (s == KILN_OK)
        s = kiln_module_params(m->model, NULL, m->params);
    if (s == KILN_OK)
        s = kiln_adam_create(m->params, 1e-3, 0.9, 0.999, 1e-8, 0, &m->opt);
    if (s == KILN_OK)
        s = kiln_grad_scaler_create(&(kiln_grad_scaler_options){.disabled = lo != KILN_F16},
                                    &m->scaler); /* bf16 trains without one */
    return s;
}

static void mlp_free(mlp *m)
{
    kiln_grad_scaler_free(m->scaler);
    kiln_optimizer_free(m->opt);
    kiln_params_free(m->params);
    kiln_module_free(m->model);
}

/* `iters` training steps on (x, y), each in a scope, the device synchronized at the end. */
static kiln_status mlp_steps(bench_ctx *ctx, mlp *m, const kiln_tensor *x, const kiln_tensor *y,
                             kiln_device_type type, int iters, double *ms)
{
    double t0 = bench_now();
    kiln_status s = KILN_OK;
    for (int i = 0; i < iters && s == KILN_OK; i++) {
        kiln_scope *sc = NULL;
        kiln_memory_stats before, after;
        kiln_tensor *logits = NULL, *loss = NULL, *scaled = NULL;
        s = kiln_scope_begin(&sc);
        if (s == KILN_OK)
            s = kiln_optimizer_zero_grad(m->opt);
        if (s == KILN_OK)
            s = kiln_device_memory_stats(ctx->dev, &before);
        if (s == KILN_OK)
            s = kiln_device_reset_peak(ctx->dev);
        if (s == KILN_OK && m->amp)
            s = kiln_autocast_begin(type, m->lo);
        if (s == KILN_OK)
            s = kiln_module_forward(m->model, x, &logits);
        if (s == KILN_OK)
            s = kiln_cross_entropy(logits, y, &loss, NULL);
        if (m->amp)
            kiln_autocast_end();
        kiln_memory_stats mid;
        if (s == KILN_OK)
            s = kiln_device_memory_stats(ctx->dev, &mid);
        if (s == KILN_OK && mid.allocated_bytes - before.allocated_bytes > m->fwd_bytes)
            m->fwd_bytes = mid.allocated_bytes - before.allocated_bytes;
        if (s == KILN_OK)
            s = kiln_grad_scaler_scale(m->scaler, loss, &scaled);
        if (s == KILN_OK)
            s = kiln_backward(scaled, NULL, 0);
        if (s == KILN_OK)
            s = kiln_grad_scaler_step(m->scaler, m->opt, NULL);
        if (s == KILN_OK)
            s = kiln_grad_scaler_update(m->scaler);
        if (s == KILN_OK)
            s = kiln_device_memory_stats(ctx->dev, &after);
        if (s == KILN_OK && after.peak_allocated_bytes - before.allocated_bytes > m->step_bytes)
            m->step_bytes = after.peak_allocated_bytes - before.allocated_bytes;
        kiln_scope_end(sc);
    }
    if (s == KILN_OK)
        s = kiln_device_synchronize(ctx->dev);
    *ms = (bench_now() - t0) * 1e3 / iters;
    return s;
}

/* The MLP's step under autocast (f16: with the scaler) against f32, interleaved. */
static int mlp_rows(bench_ctx *ctx, kiln_dtype lo)
{
    static const int full[4] = {512, 1024, 1024, 10}, quick[3] = {64, 128, 10};
    const int *width = ctx->quick ? quick : full;
    int layers = ctx->quick ? 3 : 4, batch = ctx->quick ? 32 : 256;
    kiln_device_info info;
    kiln_device_info_get(ctx->dev, &info);
    mlp f = {0}, h = {0};
    kiln_tensor *x = NULL, *y = NULL, *yf = NULL;
    const int64_t xs[2] = {batch, width[0]}, ys = batch;
    kiln_status s = mlp_init(ctx, &f, KILN_F32, width, layers);
    if (s == KILN_OK)
        s = mlp_init(ctx, &h, lo, width, layers);
    if (s == KILN_OK)
        s = kiln_rand_uniform(ctx->dev, KILN_F32, 2, xs, 5, -1.0, 1.0, &x);
    if (s == KILN_OK) /* labels: uniform in [0, classes) truncated */
        s = kiln_rand_uniform(ctx->dev, KILN_F32, 1, &ys, 6, 0.0, width[layers - 1], &yf);
    if (s == KILN_OK)
        s = kiln_cast(yf, KILN_I64, &y);
    double k[64], base[64];
    int samples = ctx->repeats > 64 ? 64 : ctx->repeats, iters = ctx->quick ? 2 : 5;
    double ms;
    if (s == KILN_OK) /* warm-up: kernels built, optimizer state made */
        s = mlp_steps(ctx, &f, x, y, info.type, 1, &ms);
    if (s == KILN_OK)
        s = mlp_steps(ctx, &h, x, y, info.type, 1, &ms);
    for (int r = 0; r < samples && s == KILN_OK; r++) {
        mlp *first = r % 2 ? &f : &h, *second = r % 2 ? &h : &f;
        double t1, t2;
        s = mlp_steps(ctx, first, x, y, info.type, iters, &t1);
        if (s == KILN_OK)
            s = mlp_steps(ctx, second, x, y, info.type, iters, &t2);
        k[r] = r % 2 ? t2 : t1;
        base[r] = r % 2 ? t1 : t2;
    }
    int rc = s == KILN_OK ? 0 : bench_fail("half: MLP step", s);
    if (rc == 0) {
        char label[96];
        const char *ln = kiln_dtype_name(lo);
        if (layers == 4)
            snprintf(label, sizeof label, "MLP %d-%d-%d-%d step, autocast %s", width[0], width[1],
                     width[2], width[3], ln);
        else
            snprintf(label, sizeof label, "MLP %d-%d-%d step, autocast %s", width[0], width[1],
                     width[2], ln);
        bench_result res;
        bench_result_set(&res, label, "ms", false, "kiln f32 step", k, base, samples);
        bench_report(ctx, &res);
        bench_note(ctx,
                   "half: the MLP step (batch %d, Adam, cross-entropy; %s autocast%s against "
                   "f32): held after the forward %.1f KiB in f32, %.1f KiB under autocast "
                   "(%.2fx); at most %.1f KiB and %.1f KiB above the step's start (%.2fx)",
                   batch, ln, lo == KILN_F16 ? " + gradient scaler" : "",
                   (double)f.fwd_bytes / 1024, (double)h.fwd_bytes / 1024,
                   f.fwd_bytes ? (double)h.fwd_bytes / (double)f.fwd_bytes : 0.0,
                   (double)f.step_bytes / 1024, (double)h.step_bytes / 1024,
                   f.step_bytes ? (double)h.step_bytes / (double)f.step_bytes : 0.0);
    }
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_tensor_release(yf);
    mlp_free(&f);
    mlp_free(&h);
    return rc;
}

int bench_half(bench_ctx *ctx)
{
    static const kiln_dtype narrow[2] = {KILN_F16, KILN_BF16};
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = elementwise(ctx, narrow[i]);
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = matmuls(ctx, narrow[i]);
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = mlp_rows(ctx, narrow[i]);
    bench_note(ctx, "half: f16 and bf16 rows against the same kiln op on f32 in the same run "
                    "(ratio > 1: 16 bits faster); both are stored in 16 bits and computed in f32");
    return rc;
}
