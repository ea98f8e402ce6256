/* matmul.c - kiln-bench matmul: f32 n x n products through kiln (the device's default path, then
 * each path forced) beside cblas_sgemm called directly on host arrays, in GFLOP/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef KILN_HAVE_CBLAS
#include <cblas.h>
#endif

typedef struct mm {
    int n;
    float *ha, *hb, *hc;
    kiln_tensor *a, *b, *c;
    kiln_device *dev;
} mm;

static double flops(int n)
{
    return 2.0 * n * (double)n * n;
}

static void host_sgemm(mm *m)
{
#ifdef KILN_HAVE_CBLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m->n, m->n, m->n, 1.0f, m->ha, m->n,
                m->hb, m->n, 0.0f, m->hc, m->n);
#else
    (void)m;
#endif
}

static bool have_baseline(void)
{
#ifdef KILN_HAVE_CBLAS
    return true;
#else
    return false;
#endif
}

/* GFLOP/s of `iters` host BLAS products. */
static double time_host(mm *m, int iters)
{
    double t0 = bench_now();
    for (int i = 0; i < iters; i++)
        host_sgemm(m);
    return flops(m->n) * iters / (bench_now() - t0) * 1e-9;
}

/* GFLOP/s of `iters` kiln products, queued back to back, then one synchronize. */
static kiln_status time_kiln(mm *m, int iters, double *rate)
{
    double t0 = bench_now();
    kiln_status s = KILN_OK;
    for (int i = 0; i < iters && s == KILN_OK; i++)
        s = kiln_matmul_trans_out(m->a, m->b, 0, m->c);
    if (s == KILN_OK)
        s = kiln_device_synchronize(m->dev);
    *rate = flops(m->n) * iters / (bench_now() - t0) * 1e-9;
    return s;
}

/* Median GFLOP/s over samples of about 2 GFLOP each, kiln and the host BLAS interleaved (and
 * taking turns at going first) so that both see the same machine load. */
static int measure(bench_ctx *ctx, mm *m, const char *label, int samples)
{
    double k[64], base[64];
    int iters = flops(m->n) >= 2e9 ? 1 : (int)(2e9 / flops(m->n));
    kiln_status s = kiln_matmul_trans_out(m->a, m->b, 0, m->c); /* builds kernels: not timed */
    if (s == KILN_OK)
        s = kiln_device_synchronize(m->dev);
    if (s != KILN_OK)
        return bench_fail(label, s);
    host_sgemm(m);
    for (int r = 0; r < samples && s == KILN_OK; r++) {
        if (r % 2)
            base[r] = time_host(m, iters);
        if (have_baseline())
            bench_blas_settle();
        s = time_kiln(m, iters, &k[r]);
        if (r % 2 == 0)
            base[r] = time_host(m, iters);
    }
    if (s != KILN_OK)
        return bench_fail(label, s);
    bench_result res;
    char name[96];
    snprintf(name, sizeof name, "sgemm %d %s", m->n, label);
    bench_result_set(&res, name, "GFLOP/s", true, have_baseline() ? "cblas_sgemm" : NULL, k,
                     have_baseline() ? base : NULL, samples);
    bench_report(ctx, &res);
    return 0;
}

static int setup(mm *m, bench_ctx *ctx)
{
    size_t count = (size_t)m->n * (size_t)m->n;
    int64_t shape[2] = {m->n, m->n};
    m->ha = malloc(count * sizeof(float));
    m->hb = malloc(count * sizeof(float));
    m->hc = malloc(count * sizeof(float));
    if (!m->ha || !m->hb || !m->hc) {
        fprintf(stderr, "kiln-bench: out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < count; i++) {
        m->ha[i] = (float)(i % 1013) * 0.001f - 0.5f;
        m->hb[i] = (float)(i % 997) * 0.002f - 1.0f;
    }
    kiln_status s = kiln_tensor_from_host(ctx->dev, KILN_F32, 2, shape, m->ha, &m->a);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 2, shape, m->hb, &m->b);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 2, shape, &m->c);
    return s == KILN_OK ? 0 : bench_fail("tensors", s);
}

static void teardown(mm *m)
{
    kiln_tensor_release(m->a);
    kiln_tensor_release(m->b);
    kiln_tensor_release(m->c);
    free(m->ha);
    free(m->hb);
    free(m->hc);
}

/* Forced paths other than the default: skipped where unavailable, and on CPU devices above
 * n = 1024 for the OpenCL kernels (CLBlast and the built-in kernel reach a few percent of a
 * host BLAS there, so 2048 would take minutes). */
static int forced_rows(bench_ctx *ctx, mm *m, const char *deflt, bool cpu)
{
    static const char *const paths[] = {"cblas", "clblast", "builtin"};
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        if (strcmp(paths[i], deflt) == 0 || (cpu && m->n > 1024 && strcmp(paths[i], "cblas")))
            continue;
        setenv("KILN_MATMUL", paths[i], 1);
        if (!kiln_matmul_path(m->dev))
            continue;
        char label[32];
        snprintf(label, sizeof label, "(%s)", paths[i]);
        int samples = ctx->repeats < 3 ? ctx->repeats : 3;
        bench_progress(ctx, "matmul n=%d, %s path\n", m->n, paths[i]);
        rc = measure(ctx, m, label, samples);
    }
    return rc;
}

static void notes(bench_ctx *ctx, const char *deflt, const char *user_choice)
{
#ifdef KILN_HAVE_CBLAS
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    bench_note(ctx, "OpenBLAS core: %s (OPENBLAS_CORETYPE=%s), %d threads", openblas_get_corename(),
               coretype ? coretype : "unset", openblas_get_num_threads());
    bench_note(ctx, "kiln's samples start 0.2 s after the baseline's last cblas_sgemm, when "
                    "OpenBLAS's threads have stopped spinning");
#else
    bench_note(ctx, "kiln-bench was built without CBLAS: no cblas_sgemm baseline");
#endif
    bench_note(ctx, "default path on %s: %s%s; rows '(path)' force one with KILN_MATMUL",
               kiln_device_spec(ctx->dev), deflt,
               user_choice ? " (set by KILN_MATMUL in the environment)" : "");
}

int bench_matmul(bench_ctx *ctx)
{
    const char *env = getenv("KILN_MATMUL");
    char *user_choice = env ? strdup(env) : NULL;
    const char *deflt = kiln_matmul_path(ctx->dev);
    if (!deflt) {
        free(user_choice);
        return bench_fail("kiln_matmul_path", KILN_ERR_INVALID_ARGUMENT);
    }
    kiln_device_info info;
    kiln_device_info_get(ctx->dev, &info);
    bool cpu = info.type == KILN_DEVICE_CPU;
    /* GPUs: the sizes where they reach their peak (PyTorch is measured at the same ones). */
    static const int cpu_sizes[] = {256, 512, 1024, 2048}, gpu_sizes[] = {1024, 2048, 4096, 8192};
    const int *sizes = cpu || ctx->quick ? cpu_sizes : gpu_sizes;
    int nsizes = ctx->quick ? 2 : 4;
    int rc = 0;
    for (int i = 0; i < nsizes && rc == 0; i++) {
        mm m = {.n = sizes[i], .dev = ctx->dev};
        rc = setup(&m, ctx);
        if (rc == 0) {
            bench_progress(ctx, "matmul n=%d, default path (%s)\n", m.n, deflt);
            rc = measure(ctx, &m, "kiln", ctx->repeats > 64 ? 64 : ctx->repeats);
        }
        if (rc == 0)
            rc = forced_rows(ctx, &m, deflt, cpu);
        if (user_choice)
            setenv("KILN_MATMUL", user_choice, 1);
        else
            unsetenv("KILN_MATMUL");
        teardown(&m);
    }
    notes(ctx, deflt, user_choice);
    free(user_choice);
    return rc;
}
