/* reduce.c - kiln-bench reduce: kiln_reduce sum over axis 0 (columns, the bias-gradient case)
 * and axis 1 (rows), and kiln_softmax over axis 1, of [4096, 1024] and [1024, 512] f32 (--quick:
 * the smaller one), beside a C loop over host memory doing the same (OpenMP-parallel when built
 * with OpenMP), in GB/s of input read; then PyTorch's torch.sum and torch.softmax at 1 and 2
 * threads on the same x, where python3 has torch (torch.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct rd {
    long rows, cols;
    float *hx, *hout, *hpart; /* hpart: a row of partial column sums per thread */
    float *hy;                /* the C loop's softmax */
    int threads;
    kiln_tensor *x, *out0, *out1, *y;
    kiln_device *dev;
} rd;

/* What a case measures: a sum over axis 0 or 1, or (SOFTMAX) a softmax over axis 1. */
#define SOFTMAX 2

/* Softmax of each row as a C programmer writes it: the max, exp and sum, then a scale. */
static void softmax_loop_once(rd *r)
{
    long rows = r->rows, cols = r->cols;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (long i = 0; i < rows; i++) {
        const float *restrict x = r->hx + i * cols;
        float *restrict y = r->hy + i * cols;
        float m = -INFINITY, s = 0.0f;
        for (long j = 0; j < cols; j++)
            m = x[j] > m ? x[j] : m;
        for (long j = 0; j < cols; j++) {
            y[j] = expf(x[j] - m);
            s += y[j];
        }
        float inv = 1.0f / s;
        for (long j = 0; j < cols; j++)
            y[j] *= inv;
    }
}

static void loop_once(rd *r, int axis)
{
    if (axis == SOFTMAX) {
        softmax_loop_once(r);
        return;
    }
    const float *restrict x = r->hx;
    float *restrict out = r->hout;
    long rows = r->rows, cols = r->cols;
    if (axis == 1) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (long i = 0; i < rows; i++) {
            float s = 0.0f;
#ifdef _OPENMP
#pragma omp simd reduction(+ : s)
#endif
            for (long j = 0; j < cols; j++)
                s += x[i * cols + j];
            out[i] = s;
        }
        return;
    }
    /* Column sums: each thread streams its own stretch of whole rows into a row of partial
     * sums (memory order throughout), then the partials are added up. */
    float *restrict part = r->hpart;
    for (size_t k = 0; k < (size_t)r->threads * (size_t)cols; k++)
        part[k] = 0.0f; /* also the rows of threads that did not start */
#ifdef _OPENMP
#pragma omp parallel num_threads(r->threads)
#endif
    {
#ifdef _OPENMP
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        int t = 0, nt = 1;
#endif
        float *restrict acc = part + (size_t)t * (size_t)cols;
        for (long i = rows * t / nt; i < rows * (t + 1) / nt; i++) {
#ifdef _OPENMP
#pragma omp simd
#endif
            for (long c = 0; c < cols; c++)
                acc[c] += x[i * cols + c];
        }
    }
    for (long c = 0; c < cols; c++) {
        float s = 0.0f;
        for (int t = 0; t < r->threads; t++)
            s += part[(size_t)t * (size_t)cols + (size_t)c];
        out[c] = s;
    }
}

/* kiln's samples of one case, kept for the PyTorch row; the best samples for the closing note
 * (on a shared machine the median moves with the load, the best far less). */
typedef struct rd_case {
    long rows, cols;
    int axis, samples; /* axis: 0, 1 or SOFTMAX */
    double k[64];
    double best_ratio;
} rd_case;

static void case_name(char *name, size_t size, const rd_case *c)
{
    if (c->axis == SOFTMAX)
        snprintf(name, size, "softmax axis 1 of [%ld, %ld] f32", c->rows, c->cols);
    else
        snprintf(name, size, "sum axis %d of [%ld, %ld] f32", c->axis, c->rows, c->cols);
}

static kiln_status kiln_once(rd *r, int axis)
{
    if (axis == SOFTMAX)
        return kiln_softmax_out(r->x, 1, r->y);
    return kiln_reduce_out(KILN_REDUCE_SUM, r->x, axis, false, axis == 0 ? r->out0 : r->out1);
}

static int measure(bench_ctx *ctx, rd *r, int axis, int iters, rd_case *rc)
{
    double k[64], base[64];
    int samples = ctx->repeats > 64 ? 64 : ctx->repeats;
    kiln_status s = kiln_once(r, axis); /* builds: untimed */
    if (s == KILN_OK)
        s = kiln_device_synchronize(r->dev);
    if (s != KILN_OK)
        return bench_fail("reduce", s);
    loop_once(r, axis);
    double bytes = (double)r->rows * (double)r->cols * sizeof(float) * iters;
    for (int i = 0; i < samples; i++) {
        double t0 = bench_now();
        for (int j = 0; j < iters && s == KILN_OK; j++)
            s = kiln_once(r, axis);
        if (s == KILN_OK)
            s = kiln_device_synchronize(r->dev);
        if (s != KILN_OK)
            return bench_fail("reduce", s);
        k[i] = bytes / (bench_now() - t0) * 1e-9;
        t0 = bench_now();
        for (int j = 0; j < iters; j++)
            loop_once(r, axis);
        base[i] = bytes / (bench_now() - t0) * 1e-9;
    }
    *rc = (rd_case){.rows = r->rows, .cols = r->cols, .axis = axis, .samples = samples};
    bench_result res;
    char name[96];
    case_name(name, sizeof name, rc);
#ifdef _OPENMP
    const char *baseline = "OpenMP C loop";
#else
    const char *baseline = "C loop (1 thread)";
#endif
    for (int i = 0; i < samples; i++)
        rc->k[i] = k[i];
    bench_result_set(&res, name, "GB/s", true, baseline, k, base, samples);
    bench_report(ctx, &res);
    rc->best_ratio = k[samples - 1] / base[samples - 1]; /* sorted by bench_result_set */
    return 0;
}

typedef struct torch_rows {
    bench_ctx *ctx;
    rd_case *cases;
    int ncases;
} torch_rows;

/* "reduce CASE THREADS 0 GB/s" */
static int torch_row(void *user, long a, long threads, long zero, double gbs, const char *version,
                     int default_threads)
{
    torch_rows *t = user;
    (void)default_threads;
    if (a < 0 || a >= t->ncases || zero != 0)
        return 1;
    rd_case *c = &t->cases[a];
    char baseline[64], name[96];
    snprintf(baseline, sizeof baseline, "PyTorch %s, %ld thr", version, threads);
    case_name(name, sizeof name, c);
    double base[64];
    for (int j = 0; j < c->samples; j++)
        base[j] = gbs;
    bench_result res;
    bench_result_set(&res, name, "GB/s", true, baseline, c->k, base, c->samples);
    bench_report(t->ctx, &res);
    return 0;
}

static int setup(rd *r, bench_ctx *ctx)
{
    size_t n = (size_t)r->rows * (size_t)r->cols;
    r->hx = malloc(n * sizeof(float));
    r->hout = calloc((size_t)(r->rows > r->cols ? r->rows : r->cols), sizeof(float));
#ifdef _OPENMP
    r->threads = omp_get_max_threads();
#else
    r->threads = 1;
#endif
    r->hpart = calloc((size_t)r->threads * (size_t)r->cols, sizeof(float));
    r->hy = malloc(n * sizeof(float));
    if (!r->hx || !r->hout || !r->hpart || !r->hy) {
        fprintf(stderr, "kiln-bench: out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        r->hx[i] = (float)(i % 1000) * 0.01f - 5.0f;
    int64_t shape[2] = {r->rows, r->cols};
    kiln_status s = kiln_tensor_from_host(ctx->dev, KILN_F32, 2, shape, r->hx, &r->x);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 1, &shape[1], &r->out0);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 1, &shape[0], &r->out1);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 2, shape, &r->y);
    return s == KILN_OK ? 0 : bench_fail("tensors", s);
}

static void teardown(rd *r)
{
    kiln_tensor_release(r->x);
    kiln_tensor_release(r->out0);
    kiln_tensor_release(r->out1);
    kiln_tensor_release(r->y);
    free(r->hx);
    free(r->hy);
    free(r->hout);
    free(r->hpart);
}

int bench_reduce(bench_ctx *ctx)
{
    static const long shapes[][2] = {{1024, 512}, {4096, 1024}};
    int nshapes = ctx->quick ? 1 : 2, rc = 0, ncases = 0;
    rd_case cases[6];
    for (int i = 0; i < nshapes && rc == 0; i++) {
        rd r = {.rows = shapes[i][0], .cols = shapes[i][1], .dev = ctx->dev};
        rc = setup(&r, ctx);
        bench_progress(ctx, "reduce on %s (%s), [%ld, %ld] f32", kiln_device_spec(ctx->dev),
                       kiln_device_name(ctx->dev), r.rows, r.cols);
        /* About 64 MiB read per sample, at least 4 reductions. */
        int iters = (int)(((long)16 << 20) / (r.rows * r.cols));
        iters = ctx->quick ? 2 : iters < 4 ? 4 : iters;
        for (int axis = 0; axis <= SOFTMAX && rc == 0; axis++)
            if ((rc = measure(ctx, &r, axis, iters, &cases[ncases])) == 0)
                ncases++;
        teardown(&r);
    }
#ifdef _OPENMP
    bench_note(ctx,
               "reduce: baseline is an OpenMP C loop over host memory (plain f32 sums; softmax: "
               "max, expf and sum, scale by 1/sum), %d threads",
               omp_get_max_threads());
#else
    bench_note(ctx, "reduce: baseline is a single-threaded C loop over host memory (built "
                    "without OpenMP)");
#endif
    char best[256];
    int len = snprintf(best, sizeof best, "reduce: ratio of best samples (kiln/baseline):");
    for (int i = 0; i < ncases && len < (int)sizeof best; i++)
        len += snprintf(best + len, sizeof best - (size_t)len, " %s %d [%ld, %ld] %.3g;",
                        cases[i].axis == SOFTMAX ? "softmax" : "axis",
                        cases[i].axis == SOFTMAX ? 1 : cases[i].axis, cases[i].rows, cases[i].cols,
                        cases[i].best_ratio);
    if (ncases > 0)
        bench_note(ctx, "%s", best);
    if (rc == 0 && ncases > 0) {
        char args[256];
        len = snprintf(args, sizeof args, "reduce %d", ctx->repeats);
        for (int i = 0; i < ncases; i++)
            len += snprintf(args + len, sizeof args - (size_t)len, " %ld %ld %d", cases[i].rows,
                            cases[i].cols, cases[i].axis);
        torch_rows t = {.ctx = ctx, .cases = cases, .ncases = ncases};
        bench_torch(ctx, "reduce", args, torch_row, &t);
    }
    return rc;
}
