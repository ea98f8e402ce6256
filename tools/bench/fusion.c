/* fusion.c - kiln-bench fusion: lazy elementwise fusion (turned on for this section).
 *   chain20: a 20-op chain on 4 Mi f32 (--quick: 1 Mi), fused by kiln, against one hand-written
 *            kernel launched through raw OpenCL, and against one kernel per op (the _out forms,
 *            which is what KILN_FUSION=0 runs);
 *   relu(a*b+c) on 16 Mi f32 (--quick: 1 Mi) against an OpenMP C loop over host memory, GB/s;
 *   100 dependent ops on 1024 f32, per op, against a plain C loop doing the same arithmetic,
 *            PyTorch and numpy; and the host's cost of one deferred op (the first 50 alone);
 *   sum(relu(a*b+c)) over axis 0 of [4096, 1024] f32 (--quick: [512, 1024]; c a broadcast row):
 *            the chain pending at the reduction ("pending": folded into its loads on GPUs,
 *            evaluated first on CPU devices), evaluated then reduced ("eval"), and
 *            one kernel per op (the _out forms: what KILN_FUSION=0 runs), against an OpenMP C
 *            loop, ms. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* The chain: op k of 20 on y, with tensors a and b; scalars inline. */
typedef enum { T_MUL_A, T_ADD_B, T_SUB_B, T_RELU, T_NEG, T_ABS, T_MULS, T_ADDS } chain_op;
static const struct {
    chain_op op;
    float s;
} chain20[20] = {{T_MUL_A, 0},   {T_ADD_B, 0}, {T_RELU, 0},  {T_MULS, 0.9f}, {T_ADDS, 0.1f},
                 {T_MUL_A, 0},   {T_SUB_B, 0}, {T_RELU, 0},  {T_MULS, 1.1f}, {T_ADDS, -0.2f},
                 {T_MUL_A, 0},   {T_ADD_B, 0}, {T_NEG, 0},   {T_RELU, 0},    {T_MULS, 0.7f},
                 {T_ADDS, 0.3f}, {T_MUL_A, 0}, {T_SUB_B, 0}, {T_ABS, 0},     {T_MULS, 0.5f}};

static const char *hand_source =
    "kernel void chain(global const float *x, global const float *a, global const float *b,\n"
    "                  global float *out, long n)\n"
    "{\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= n) return;\n"
    "    float y = x[i], av = a[i], bv = b[i];\n"
    "    y = y * av; y = y + bv; y = y < 0.0f ? 0.0f : y; y = y * 0.9f; y = y + 0.1f;\n"
    "    y = y * av; y = y - bv; y = y < 0.0f ? 0.0f : y; y = y * 1.1f; y = y + -0.2f;\n"
    "    y = y * av; y = y + bv; y = -y; y = y < 0.0f ? 0.0f : y; y = y * 0.7f;\n"
    "    y = y + 0.3f; y = y * av; y = y - bv; y = fabs(y); y = y * 0.5f;\n"
    "    out[i] = y;\n"
    "}\n";

/* One op of the chain: a new (pending) tensor, or into out when out is set. */
static kiln_status chain_step(int k, kiln_tensor *y, kiln_tensor *a, kiln_tensor *b,
                              kiln_tensor *out, kiln_tensor **res)
{
    float s = chain20[k].s;
    switch (chain20[k].op) {
    case T_MUL_A:
        return out ? kiln_mul_out(y, a, out) : kiln_mul(y, a, res);
    case T_ADD_B:
        return out ? kiln_add_out(y, b, out) : kiln_add(y, b, res);
    case T_SUB_B:
        return out ? kiln_sub_out(y, b, out) : kiln_sub(y, b, res);
    case T_RELU:
        return out ? kiln_unary_out(KILN_UNARY_RELU, y, out) : kiln_unary(KILN_UNARY_RELU, y, res);
    case T_NEG:
        return out ? kiln_unary_out(KILN_UNARY_NEG, y, out) : kiln_unary(KILN_UNARY_NEG, y, res);
    case T_ABS:
        return out ? kiln_unary_out(KILN_UNARY_ABS, y, out) : kiln_unary(KILN_UNARY_ABS, y, res);
    case T_MULS:
        return out ? kiln_binary_scalar_out(KILN_BINARY_MUL, y, s, out)
                   : kiln_binary_scalar(KILN_BINARY_MUL, y, s, res);
    case T_ADDS:
        return out ? kiln_binary_scalar_out(KILN_BINARY_ADD, y, s, out)
                   : kiln_binary_scalar(KILN_BINARY_ADD, y, s, res);
    }
    return KILN_ERR_INVALID_ARGUMENT;
}

/* The fused chain, evaluated. */
static kiln_status chain_fused(kiln_tensor *x, kiln_tensor *a, kiln_tensor *b)
{
    kiln_tensor *y = kiln_tensor_retain(x);
    kiln_status s = KILN_OK;
    for (int k = 0; k < 20 && s == KILN_OK; k++) {
        kiln_tensor *n = NULL;
        s = chain_step(k, y, a, b, NULL, &n);
        kiln_tensor_release(y);
        y = n;
    }
    if (s == KILN_OK)
        s = kiln_tensor_eval(y);
    kiln_tensor_release(y);
    return s;
}

/* One kernel per op, ping-ponging between two tensors (what KILN_FUSION=0 launches). */
static kiln_status chain_eager(kiln_tensor *x, kiln_tensor *a, kiln_tensor *b, kiln_tensor *t0,
                               kiln_tensor *t1)
{
    kiln_status s = chain_step(0, x, a, b, t0, NULL);
    for (int k = 1; k < 20 && s == KILN_OK; k++)
        s = chain_step(k, k % 2 ? t0 : t1, a, b, k % 2 ? t1 : t0, NULL);
    return s;
}

typedef struct raw {
    cl_program prog;
    cl_kernel k;
} raw;

static int raw_setup(bench_ctx *ctx, raw *r)
{
    cl_context c = kiln_device_cl_context(ctx->dev);
    cl_device_id id = kiln_device_cl_device_id(ctx->dev);
    cl_int err;
    r->prog = clCreateProgramWithSource(c, 1, &hand_source, NULL, &err);
    if (err == CL_SUCCESS)
        err = clBuildProgram(r->prog, 1, &id, "-cl-std=CL1.2", NULL, NULL);
    if (err == CL_SUCCESS)
        r->k = clCreateKernel(r->prog, "chain", &err);
    if (err != CL_SUCCESS)
        fprintf(stderr, "kiln-bench: building the hand-fused kernel failed with %d\n", (int)err);
    return err == CL_SUCCESS ? 0 : 1;
}

static cl_int raw_run(bench_ctx *ctx, raw *r, kiln_tensor *x, kiln_tensor *a, kiln_tensor *b,
                      kiln_tensor *out, long n)
{
    cl_mem m[4] = {kiln_tensor_cl_mem(x), kiln_tensor_cl_mem(a), kiln_tensor_cl_mem(b),
                   kiln_tensor_cl_mem(out)};
    cl_int err = CL_SUCCESS;
    for (cl_uint i = 0; i < 4 && err == CL_SUCCESS; i++)
        err = clSetKernelArg(r->k, i, sizeof(cl_mem), &m[i]);
    if (err == CL_SUCCESS)
        err = clSetKernelArg(r->k, 4, sizeof n, &n);
    size_t local = 256, global = ((size_t)n + local - 1) / local * local;
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(kiln_device_cl_queue(ctx->dev), r->k, 1, NULL, &global, &local,
                                     0, NULL, NULL);
    return err == CL_SUCCESS ? clFinish(kiln_device_cl_queue(ctx->dev)) : err;
}

static kiln_tensor *filled(bench_ctx *ctx, size_t n, float scale, float off)
{
    float *h = malloc(n * sizeof *h);
    kiln_tensor *t = NULL;
    int64_t shape = (int64_t)n;
    if (h) {
        for (size_t i = 0; i < n; i++)
            h[i] = (float)(i % 1000) * scale + off;
        if (kiln_tensor_from_host(ctx->dev, KILN_F32, 1, &shape, h, &t) != KILN_OK)
            t = NULL;
    }
    free(h);
    return t;
}

static int bench_chain20(bench_ctx *ctx)
{
    size_t n = ctx->quick ? (size_t)1 << 20 : (size_t)4 << 20;
    int samples = ctx->repeats > 64 ? 64 : ctx->repeats;
    kiln_tensor *x = filled(ctx, n, 0.01f, -5.0f), *a = filled(ctx, n, 0.002f, 0.5f),
                *b = filled(ctx, n, 0.003f, -1.0f), *t0 = NULL, *t1 = NULL;
    int64_t shape = (int64_t)n;
    raw r = {0};
    int rc = 1;
    kiln_status s = x && a && b ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 1, &shape, &t0);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 1, &shape, &t1);
    if (s != KILN_OK) {
        rc = bench_fail("chain20 tensors", s);
        goto done;
    }
    if (raw_setup(ctx, &r) != 0)
        goto done;
    /* warm up: builds (or loads) every kernel */
    s = chain_fused(x, a, b);
    if (s == KILN_OK)
        s = chain_eager(x, a, b, t0, t1);
    if (s == KILN_OK)
        s = kiln_device_synchronize(ctx->dev);
    if (s != KILN_OK || raw_run(ctx, &r, x, a, b, t0, (long)n) != CL_SUCCESS) {
        rc = bench_fail("chain20 warm-up", s != KILN_OK ? s : KILN_ERR_UNSUPPORTED);
        goto done;
    }
    double kf[64], ke[64], kr[64];
    for (int i = 0; i < samples; i++) {
        double t = bench_now();
        s = chain_fused(x, a, b);
        if (s == KILN_OK)
            s = kiln_device_synchronize(ctx->dev);
        kf[i] = (bench_now() - t) * 1e3;
        t = bench_now();
        if (s == KILN_OK)
            s = chain_eager(x, a, b, t0, t1);
        if (s == KILN_OK)
            s = kiln_device_synchronize(ctx->dev);
        ke[i] = (bench_now() - t) * 1e3;
        t = bench_now();
        if (s != KILN_OK || raw_run(ctx, &r, x, a, b, t0, (long)n) != CL_SUCCESS) {
            rc = bench_fail("chain20", s != KILN_OK ? s : KILN_ERR_UNSUPPORTED);
            goto done;
        }
        kr[i] = (bench_now() - t) * 1e3;
    }
    double kf2[64];
    for (int i = 0; i < samples; i++)
        kf2[i] = kf[i];
    bench_result res;
    char name[96];
    snprintf(name, sizeof name, "20-op chain f32 %zu Mi", n >> 20);
    bench_result_set(&res, name, "ms", false, "hand-fused raw OpenCL", kf, kr, samples);
    bench_report(ctx, &res);
    snprintf(name, sizeof name, "20-op chain f32 %zu Mi", n >> 20);
    bench_result_set(&res, name, "ms", false, "one kernel per op", kf2, ke, samples);
    bench_report(ctx, &res);
    rc = 0;
done:
    if (r.k)
        clReleaseKernel(r.k);
    if (r.prog)
        clReleaseProgram(r.prog);
    kiln_tensor_release(x);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(t0);
    kiln_tensor_release(t1);
    return rc;
}

static kiln_status relu_fma(kiln_tensor *a, kiln_tensor *b, kiln_tensor *c, kiln_tensor *out)
{
    kiln_tensor *p = NULL, *q = NULL;
    kiln_status s = kiln_mul(a, b, &p);
    if (s == KILN_OK)
        s = kiln_add(p, c, &q);
    if (s == KILN_OK)
        s = kiln_unary_out(KILN_UNARY_RELU, q, out);
    kiln_tensor_release(p);
    kiln_tensor_release(q);
    return s;
}

static int bench_relu_fma(bench_ctx *ctx)
{
    size_t n = ctx->quick ? (size_t)1 << 20 : (size_t)16 << 20;
    int samples = ctx->repeats > 64 ? 64 : ctx->repeats;
    float *ha = malloc(n * 4), *hb = malloc(n * 4), *hc = malloc(n * 4), *ho = malloc(n * 4);
    kiln_tensor *a = filled(ctx, n, 0.01f, -5.0f), *b = filled(ctx, n, 0.002f, 0.5f),
                *c = filled(ctx, n, 0.003f, -1.0f), *out = NULL;
    int64_t shape = (int64_t)n;
    int rc = 1;
    kiln_status s = a && b && c && ha && hb && hc && ho ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 1, &shape, &out);
    if (s == KILN_OK)
        s = relu_fma(a, b, c, out);
    if (s == KILN_OK)
        s = kiln_device_synchronize(ctx->dev);
    if (s != KILN_OK) {
        rc = bench_fail("relu(a*b+c)", s);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        ha[i] = (float)(i % 1000) * 0.01f - 5.0f;
        hb[i] = (float)(i % 1000) * 0.002f + 0.5f;
        hc[i] = (float)(i % 1000) * 0.003f - 1.0f;
    }
    double k[64], base[64], bytes = (double)n * 16;
    for (int i = 0; i < samples && s == KILN_OK; i++) {
        double t = bench_now();
        s = relu_fma(a, b, c, out);
        if (s == KILN_OK)
            s = kiln_device_synchronize(ctx->dev);
        k[i] = bytes / (bench_now() - t) * 1e-9;
        t = bench_now();
        long nn = (long)n;
#ifdef _OPENMP
#pragma omp parallel for simd schedule(static)
#endif
        for (long j = 0; j < nn; j++) {
            float v = ha[j] * hb[j] + hc[j];
            ho[j] = v < 0.0f ? 0.0f : v;
        }
        base[i] = bytes / (bench_now() - t) * 1e-9;
    }
    if (s != KILN_OK) {
        rc = bench_fail("relu(a*b+c)", s);
        goto done;
    }
    bench_result res;
    char name[96];
    snprintf(name, sizeof name, "relu(a*b+c) f32 %zu Mi", n >> 20);
#ifdef _OPENMP
    bench_result_set(&res, name, "GB/s", true, "OpenMP C loop", k, base, samples);
#else
    bench_result_set(&res, name, "GB/s", true, "C loop (1 thread)", k, base, samples);
#endif
    bench_report(ctx, &res);
    rc = 0;
done:
    free(ha);
    free(hb);
    free(hc);
    free(ho);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
    kiln_tensor_release(out);
    return rc;
}

/* One round's PyTorch (at 1 or 2 threads) and numpy samples of the dependent ops, from the
 * worker. */
typedef struct dependent_round {
    double torch, numpy;
} dependent_round;

static int dependent_sample(void *user, long n, long ops, long numpy, double us,
                            const char *version, int threads)
{
    dependent_round *r = user;
    (void)n, (void)ops, (void)version, (void)threads;
    *(numpy ? &r->numpy : &r->torch) = us;
    return 0;
}

/* 100 dependent ops (alternately * 1.0001 and + 0.001) on 1024 f32, read back. The first
 * DEFERRED ops (fewer than fusion.c's MAX_DEPTH, so that nothing is launched yet) are also timed
 * alone: the host's cost of a deferred op (issue 27: goal <= 0.5 us). */
static int bench_dependent(bench_ctx *ctx)
{
    enum { N = 1024, OPS = 100, DEFERRED = 50 };
    int samples = ctx->repeats > 64 ? 64 : ctx->repeats;
    kiln_tensor *x = filled(ctx, N, 0.001f, 0.0f);
    float host[N] = {0}, got[N] = {0};
    double k[64], base[64], deferred[64], torch1[64], torch2[64], numpy[64];
    bool peers = true; /* every round has PyTorch's and numpy's samples */
    bench_worker *w = bench_worker_start(ctx, "fusion");
    char request[64];
    snprintf(request, sizeof request, "fusion 1 %d %d", N, OPS);
    kiln_status s = x ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int i = -1; i < samples && s == KILN_OK; i++) { /* i = -1: warm-up */
        /* twice, the first untimed: the worker ran just before (its requests warm up too) */
        double t = 0, t_deferred = 0;
        for (int pass = 0; pass < 2 && s == KILN_OK; pass++) {
            t = t_deferred = bench_now();
            kiln_tensor *y = kiln_tensor_retain(x);
            for (int op = 0; op < OPS && s == KILN_OK; op++) {
                kiln_tensor *n = NULL;
                s = op % 2 ? kiln_binary_scalar(KILN_BINARY_ADD, y, 0.001, &n)
                           : kiln_binary_scalar(KILN_BINARY_MUL, y, 1.0001, &n);
                kiln_tensor_release(y);
                y = n;
                if (op == DEFERRED - 1)
                    t_deferred = bench_now();
            }
            if (s == KILN_OK)
                s = kiln_tensor_read(y, got, sizeof got);
            kiln_tensor_release(y);
        }
        if (i >= 0) {
            k[i] = (bench_now() - t) * 1e6 / OPS;
            deferred[i] = (t_deferred - t) * 1e6 / DEFERRED;
        }
        t = bench_now();
        for (int j = 0; j < N; j++)
            host[j] = (float)(j % 1000) * 0.001f;
        for (int op = 0; op < OPS; op++)
            for (int j = 0; j < N; j++)
                host[j] = op % 2 ? host[j] + 0.001f : host[j] * 1.0001f;
        if (i >= 0)
            base[i] = (bench_now() - t) * 1e6 / OPS;
        /* PyTorch at 1 and 2 threads, and numpy, in the same round */
        dependent_round one = {0}, two = {0};
        peers = peers && w && bench_worker_ask(w, 1, request, dependent_sample, &one) == 2 &&
                bench_worker_ask(w, 2, request, dependent_sample, &two) == 2;
        if (i >= 0 && peers) {
            torch1[i] = one.torch;
            torch2[i] = two.torch;
            numpy[i] = one.numpy;
        }
    }
    kiln_tensor_release(x);
    const char *version = w ? bench_worker_version(w) : "";
    char torch_version[64];
    snprintf(torch_version, sizeof torch_version, "%s", version);
    bench_worker_stop(w);
    if (s != KILN_OK)
        return bench_fail("100 dependent ops", s);
    if (got[N - 1] != host[N - 1])
        bench_note(ctx, "100 dependent ops: kiln %.9g, C loop %.9g (the last element)",
                   (double)got[N - 1], (double)host[N - 1]);
    bench_result res;
    bench_result_set(&res, "100 dependent ops f32 1024, per op", "us", false, "plain C loop", k,
                     base, samples);
    bench_report(ctx, &res);
    bench_result_set(&res, "deferred op f32 1024 (host), per op", "us", false, NULL, deferred, NULL,
                     samples);
    bench_report(ctx, &res);
    if (w && peers) {
        char baseline[64];
        snprintf(baseline, sizeof baseline, "PyTorch %.40s, 1 thr", torch_version);
        bench_result_set(&res, "100 dependent ops f32 1024, per op", "us", false, baseline, k,
                         torch1, samples);
        bench_report(ctx, &res);
        snprintf(baseline, sizeof baseline, "PyTorch %.40s, 2 thr", torch_version);
        bench_result_set(&res, "100 dependent ops f32 1024, per op", "us", false, baseline, k,
                         torch2, samples);
        bench_report(ctx, &res);
        bench_result_set(&res, "100 dependent ops f32 1024, per op", "us", false,
                         "numpy (PyTorch's Python)", k, numpy, samples);
        bench_report(ctx, &res);
    } else if (w) {
        bench_note(ctx, "fusion: no PyTorch row (the worker stopped answering)");
    }
    return 0;
}

/* sum(relu(a*b+c), axis 0) into out: mode 0 folded (the chain pending at the reduction), 1 the
 * chain evaluated first, 2 one kernel per op into t. */
static kiln_status sum_relu_fma(int mode, kiln_tensor *a, kiln_tensor *b, kiln_tensor *c,
                                kiln_tensor *t, kiln_tensor *out)
{
    if (mode == 2) {
        kiln_status s = kiln_mul_out(a, b, t);
        if (s == KILN_OK)
            s = kiln_add_out(t, c, t);
        if (s == KILN_OK)
            s = kiln_unary_out(KILN_UNARY_RELU, t, t);
        return s == KILN_OK ? kiln_reduce_out(KILN_REDUCE_SUM, t, 0, false, out) : s;
    }
    kiln_tensor *p = NULL, *q = NULL, *r = NULL;
    kiln_status s = kiln_mul(a, b, &p);
    if (s == KILN_OK)
        s = kiln_add(p, c, &q);
    if (s == KILN_OK)
        s = kiln_unary(KILN_UNARY_RELU, q, &r);
    if (s == KILN_OK && mode == 1)
        s = kiln_tensor_eval(r);
    if (s == KILN_OK)
        s = kiln_reduce_out(KILN_REDUCE_SUM, r, 0, false, out);
    kiln_tensor_release(p);
    kiln_tensor_release(q);
    kiln_tensor_release(r);
    return s;
}

static int bench_sum_relu_fma(bench_ctx *ctx)
{
    enum { C = 1024 }; /* columns (got[] below) */
    const long R = ctx->quick ? 512 : 4096;
    int samples = ctx->repeats > 64 ? 64 : ctx->repeats;
    size_t n = (size_t)(R * C);
    float *ha = malloc(n * 4), *hb = malloc(n * 4), *hc = malloc((size_t)C * 4),
          *ho = malloc((size_t)C * 4);
    const int64_t shape[2] = {R, C};
    kiln_tensor *a = NULL, *b = NULL, *c = NULL, *t = NULL, *out = NULL;
    kiln_status s = ha && hb && hc && ho ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    int rc = 1;
    for (size_t i = 0; s == KILN_OK && i < n; i++) {
        ha[i] = (float)(i % 1000) * 0.01f - 5.0f;
        hb[i] = (float)(i % 997) * 0.002f + 0.5f;
    }
    for (long j = 0; s == KILN_OK && j < C; j++)
        hc[j] = (float)(j % 100) * 0.03f - 1.0f;
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 2, shape, ha, &a);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 2, shape, hb, &b);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 1, &shape[1], hc, &c);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 2, shape, &t);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 1, &shape[1], &out);
    static const char *what[3] = {"pending", "eval", "per op"};
    for (int mode = 0; mode < 3 && s == KILN_OK; mode++) {
        double k[64], base[64];
        s = sum_relu_fma(mode, a, b, c, t, out); /* warm-up: builds the kernels */
        if (s == KILN_OK)
            s = kiln_device_synchronize(ctx->dev);
        for (int i = 0; i < samples && s == KILN_OK; i++) {
            double t0 = bench_now();
            s = sum_relu_fma(mode, a, b, c, t, out);
            if (s == KILN_OK)
                s = kiln_device_synchronize(ctx->dev);
            k[i] = (bench_now() - t0) * 1e3;
            t0 = bench_now();
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
            for (long j0 = 0; j0 < C; j0 += 64) {
                float acc[64] = {0};
                for (long r = 0; r < R; r++)
                    for (long j = 0; j < 64; j++) {
                        float v = ha[r * C + j0 + j] * hb[r * C + j0 + j] + hc[j0 + j];
                        acc[j] += v < 0.0f ? 0.0f : v;
                    }
                for (long j = 0; j < 64; j++)
                    ho[j0 + j] = acc[j];
            }
            base[i] = (bench_now() - t0) * 1e3;
        }
        if (s != KILN_OK)
            break;
        bench_result res;
        char name[96];
        snprintf(name, sizeof name, "sum0 relu(a*b+c) %ldx%d %s", R, (int)C, what[mode]);
#ifdef _OPENMP
        bench_result_set(&res, name, "ms", false, "OpenMP C loop", k, base, samples);
#else
        bench_result_set(&res, name, "ms", false, "C loop (1 thread)", k, base, samples);
#endif
        bench_report(ctx, &res);
    }
    if (s != KILN_OK) {
        rc = bench_fail("sum(relu(a*b+c))", s);
    } else {
        float got[C];
        s = kiln_tensor_read(out, got, sizeof got); /* the last mode's: a check of the others */
        if (s == KILN_OK && fabsf(got[3] - ho[3]) > 1e-3f * fabsf(ho[3]) + 1e-3f)
            bench_note(ctx, "sum(relu(a*b+c)): kiln %.9g, C loop %.9g (column 3)", (double)got[3],
                       (double)ho[3]);
        rc = s == KILN_OK ? 0 : bench_fail("sum(relu(a*b+c))", s);
    }
    free(ha);
    free(hb);
    free(hc);
    free(ho);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
    kiln_tensor_release(t);
    kiln_tensor_release(out);
    return rc;
}

int bench_fusion(bench_ctx *ctx)
{
    int rc = bench_chain20(ctx);
    if (rc == 0)
        rc = bench_relu_fma(ctx);
    if (rc == 0)
        rc = bench_dependent(ctx);
    if (rc == 0)
        rc = bench_sum_relu_fma(ctx);
    bench_note(ctx,
               "fusion: KILN_FUSION=%s; the 'one kernel per op' row runs the same chain "
               "through the _out forms (what KILN_FUSION=0 launches)",
               getenv("KILN_FUSION") ? getenv("KILN_FUSION") : "unset (on)");
    return rc;
}
