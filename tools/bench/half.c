/* half.c - kiln-bench half: the same kiln ops on f16 and on f32 tensors, interleaved in one run,
 * as rates in elements (or FLOP) per second, the f32 run being the baseline: elementwise add, mul
 * and relu on 16 Mi elements (--quick: 1 Mi), where half the bytes should move at up to twice the
 * rate (issue 25's goal: >= 1.8x on memory-bound ops), and n x n matmuls (f16 accumulates in f32;
 * on CPU devices it pays for converting to f32 around OpenBLAS). */
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

static int elementwise(bench_ctx *ctx)
{
    size_t mi = ctx->quick ? 1 : 16;
    int64_t n = (int64_t)mi << 20;
    operands h = {0}, f = {0};
    kiln_status s = make(ctx->dev, KILN_F16, 1, &n, &n, 1, &h);
    if (s == KILN_OK)
        s = make(ctx->dev, KILN_F32, 1, &n, &n, 1, &f);
    int rc = s == KILN_OK ? 0 : bench_fail("half: tensors", s);
    bench_progress(ctx, "half: elementwise on %s (%s), %zu Mi elements\n",
                   kiln_device_spec(ctx->dev), kiln_device_name(ctx->dev), mi);
    for (int op = H_ADD; op <= H_RELU && rc == 0; op++) {
        char label[96];
        snprintf(label, sizeof label, "%s f16 %zu Mi", op_names[op], mi);
        rc = measure(ctx, &h, &f, (half_op)op, label, "Gelem/s", (double)n);
    }
    release(&h);
    release(&f);
    return rc;
}

static int matmuls(bench_ctx *ctx)
{
    static const int sizes[] = {256, 512, 1024};
    int nsizes = ctx->quick ? 1 : 3, rc = 0;
    for (int i = 0; i < nsizes && rc == 0; i++) {
        int64_t sh[2] = {sizes[i], sizes[i]};
        operands h = {0}, f = {0};
        kiln_status s = make(ctx->dev, KILN_F16, 2, sh, sh, 3, &h);
        if (s == KILN_OK)
            s = make(ctx->dev, KILN_F32, 2, sh, sh, 3, &f);
        rc = s == KILN_OK ? 0 : bench_fail("half: matmul tensors", s);
        char label[96];
        snprintf(label, sizeof label, "matmul f16 n=%d (%s)", sizes[i],
                 kiln_matmul_path(ctx->dev) ? kiln_matmul_path(ctx->dev) : "?");
        if (rc == 0)
            rc = measure(ctx, &h, &f, H_MATMUL, label, "GFLOP/s",
                         2.0 * sizes[i] * (double)sizes[i] * sizes[i]);
        release(&h);
        release(&f);
    }
    return rc;
}

int bench_half(bench_ctx *ctx)
{
    int rc = elementwise(ctx);
    if (rc == 0)
        rc = matmuls(ctx);
    bench_note(ctx, "half: f16 rows against the same kiln op on f32 in the same run (ratio > 1: "
                    "f16 faster); f16 is stored in 16 bits and computed in f32");
    return rc;
}
