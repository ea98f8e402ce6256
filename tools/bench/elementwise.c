/* elementwise.c - kiln-bench elementwise: kiln add/mul/relu on 16 Mi f32 (--quick: 1 Mi) beside
 * a C loop over host memory (OpenMP-parallel when built with OpenMP), in GB/s. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef enum ew_op { EW_ADD, EW_MUL, EW_RELU } ew_op;

static const char *const ew_names[] = {"add", "mul", "relu"};

typedef struct ew {
    size_t n;
    float *ha, *hb, *hout;
    kiln_tensor *a, *b, *out;
    kiln_device *dev;
} ew;

static kiln_status kiln_once(ew *e, ew_op op)
{
    switch (op) {
    case EW_ADD:
        return kiln_binary_out(KILN_BINARY_ADD, e->a, e->b, e->out);
    case EW_MUL:
        return kiln_binary_out(KILN_BINARY_MUL, e->a, e->b, e->out);
    case EW_RELU:
        return kiln_unary_out(KILN_UNARY_RELU, e->a, e->out);
    }
    return KILN_ERR_INVALID_ARGUMENT;
}

static void loop_once(ew *e, ew_op op)
{
    const float *restrict a = e->ha, *restrict b = e->hb;
    float *restrict out = e->hout;
    long n = (long)e->n;
    switch (op) {
    case EW_ADD:
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static)
#endif
        for (long i = 0; i < n; i++)
            out[i] = a[i] + b[i];
        break;
    case EW_MUL:
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static)
#endif
        for (long i = 0; i < n; i++)
            out[i] = a[i] * b[i];
        break;
    case EW_RELU:
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static)
#endif
        for (long i = 0; i < n; i++)
            out[i] = a[i] < 0.0f ? 0.0f : a[i];
        break;
    }
}

/* Bytes an op reads and writes: the figure both sides are measured in. */
static double op_bytes(const ew *e, ew_op op)
{
    return (double)e->n * sizeof(float) * (op == EW_RELU ? 2.0 : 3.0);
}

static int measure(bench_ctx *ctx, ew *e, ew_op op, int iters)
{
    double k[64], base[64];
    int samples = ctx->repeats > 64 ? 64 : ctx->repeats;
    kiln_status s = kiln_once(e, op); /* builds the kernel: not timed */
    if (s == KILN_OK)
        s = kiln_device_synchronize(e->dev);
    if (s != KILN_OK)
        return bench_fail(ew_names[op], s);
    loop_once(e, op);
    for (int r = 0; r < samples; r++) {
        double t0 = bench_now();
        for (int i = 0; i < iters && s == KILN_OK; i++)
            s = kiln_once(e, op);
        if (s == KILN_OK)
            s = kiln_device_synchronize(e->dev);
        if (s != KILN_OK)
            return bench_fail(ew_names[op], s);
        k[r] = op_bytes(e, op) * iters / (bench_now() - t0) * 1e-9;
        t0 = bench_now();
        for (int i = 0; i < iters; i++)
            loop_once(e, op);
        base[r] = op_bytes(e, op) * iters / (bench_now() - t0) * 1e-9;
    }
    bench_result res;
    char name[96];
    snprintf(name, sizeof name, "%s f32 %zu Mi", ew_names[op], e->n >> 20);
#ifdef _OPENMP
    const char *baseline = "OpenMP C loop";
#else
    const char *baseline = "C loop (1 thread)";
#endif
    bench_result_set(&res, name, "GB/s", true, baseline, k, base, samples);
    bench_report(ctx, &res);
    return 0;
}

static int setup(ew *e, bench_ctx *ctx)
{
    int64_t shape = (int64_t)e->n;
    e->ha = malloc(e->n * sizeof(float));
    e->hb = malloc(e->n * sizeof(float));
    e->hout = malloc(e->n * sizeof(float));
    if (!e->ha || !e->hb || !e->hout) {
        fprintf(stderr, "kiln-bench: out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < e->n; i++) {
        e->ha[i] = (float)(i % 1000) * 0.01f - 5.0f;
        e->hb[i] = (float)(i % 777) * 0.02f + 0.5f;
        e->hout[i] = 0.0f;
    }
    kiln_status s = kiln_tensor_from_host(ctx->dev, KILN_F32, 1, &shape, e->ha, &e->a);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 1, &shape, e->hb, &e->b);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 1, &shape, &e->out);
    return s == KILN_OK ? 0 : bench_fail("tensors", s);
}

static void teardown(ew *e)
{
    kiln_tensor_release(e->a);
    kiln_tensor_release(e->b);
    kiln_tensor_release(e->out);
    free(e->ha);
    free(e->hb);
    free(e->hout);
}

int bench_elementwise(bench_ctx *ctx)
{
    /* A GPU also runs 256 Mi (3 GiB per add), where its HBM bandwidth shows. */
    kiln_device_info info;
    kiln_device_info_get(ctx->dev, &info);
    size_t mis[2] = {ctx->quick ? 1 : 16, 256};
    int nsizes = !ctx->quick && info.type != KILN_DEVICE_CPU &&
                         info.max_alloc_bytes >= ((uint64_t)256 << 20) * sizeof(float)
                     ? 2
                     : 1;
    int iters = ctx->quick ? 4 : 8;
    int rc = 0;
    for (int i = 0; i < nsizes && rc == 0; i++) {
        ew e = {.n = mis[i] << 20, .dev = ctx->dev};
        rc = setup(&e, ctx);
        bench_progress(ctx, "elementwise on %s (%s), %zu Mi f32\n", kiln_device_spec(ctx->dev),
                       kiln_device_name(ctx->dev), e.n >> 20);
        for (int op = EW_ADD; op <= EW_RELU && rc == 0; op++)
            rc = measure(ctx, &e, (ew_op)op, iters);
        teardown(&e);
    }
#ifdef _OPENMP
    bench_note(ctx, "baseline: OpenMP C loop over host memory, %d threads", omp_get_max_threads());
#else
    bench_note(ctx, "baseline: single-threaded C loop over host memory (built without OpenMP)");
#endif
    return rc;
}
