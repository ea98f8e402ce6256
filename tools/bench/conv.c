/* conv.c - kiln-bench conv: kiln_conv2d forward, and forward + backward, at LeNet-like, ResNet-
 * block-like, 1x1 and depthwise shapes, beside im2col + cblas_sgemm written directly in C over
 * host arrays (the forward the CPU path can reach at best), in ms per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef KILN_HAVE_CBLAS
#include <cblas.h>
#endif

typedef struct conv_shape {
    const char *name;
    int n, c, h, w, o, k, stride, pad, groups;
} conv_shape;

/* The C reference: per group, cols [C/G K K, N OH OW] then one sgemm, as kiln does. */
static void host_conv(const conv_shape *s, const float *x, const float *w, float *cols, float *y,
                      int oh, int ow)
{
    int g = s->groups, cg = s->c / g, og = s->o / g, kk = cg * s->k * s->k, l = oh * ow;
    long nl = (long)s->n * l;
    for (int gi = 0; gi < g; gi++) {
        for (int r = 0; r < kk; r++) {
            int c = gi * cg + r / (s->k * s->k), ki = r / s->k % s->k, kj = r % s->k;
            float *row = cols + (long)r * nl;
            for (int n = 0; n < s->n; n++)
                for (int i = 0; i < oh; i++)
                    for (int j = 0; j < ow; j++) {
                        int hh = i * s->stride - s->pad + ki, ww = j * s->stride - s->pad + kj;
                        row[(long)n * l + i * ow + j] =
                            hh < 0 || hh >= s->h || ww < 0 || ww >= s->w
                                ? 0.0f
                                : x[(((long)n * s->c + c) * s->h + hh) * s->w + ww];
                    }
        }
#ifdef KILN_HAVE_CBLAS
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, og, (int)nl, kk, 1.0f,
                    w + (long)gi * og * kk, kk, cols, (int)nl, 0.0f, y + (long)gi * og * nl,
                    (int)nl);
#else
        (void)w, (void)y, (void)og;
#endif
    }
}

static int bench_one(bench_ctx *ctx, const conv_shape *s)
{
    int oh = (s->h + 2 * s->pad - s->k) / s->stride + 1,
        ow = (s->w + 2 * s->pad - s->k) / s->stride + 1;
    long nx = (long)s->n * s->c * s->h * s->w, nw = (long)s->o * (s->c / s->groups) * s->k * s->k;
    long ncols = (long)(s->c / s->groups) * s->k * s->k * s->n * oh * ow;
    float *x = malloc(sizeof(float) * nx), *w = malloc(sizeof(float) * nw);
    float *cols = malloc(sizeof(float) * ncols), *y = malloc(sizeof(float) * s->n * s->o * oh * ow);
    double *tk = calloc((size_t)ctx->repeats, sizeof(double));
    double *tb = calloc((size_t)ctx->repeats, sizeof(double));
    double *tc = calloc((size_t)ctx->repeats, sizeof(double));
    kiln_tensor *tx = NULL, *tw = NULL, *tb_ = NULL;
    kiln_status st = x && w && cols && y && tk && tb && tc ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (long i = 0; st == KILN_OK && i < nx; i++)
        x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (long i = 0; st == KILN_OK && i < nw; i++)
        w[i] = (float)((i * 104729) % 1000) / 5000.0f - 0.1f;
    const int64_t xs[4] = {s->n, s->c, s->h, s->w}, ws[4] = {s->o, s->c / s->groups, s->k, s->k},
                  bs[1] = {s->o};
    if (st == KILN_OK)
        st = kiln_tensor_from_host(ctx->dev, KILN_F32, 4, xs, x, &tx);
    if (st == KILN_OK)
        st = kiln_tensor_from_host(ctx->dev, KILN_F32, 4, ws, w, &tw);
    if (st == KILN_OK)
        st = kiln_tensor_zeros(ctx->dev, KILN_F32, 1, bs, &tb_);
    if (st == KILN_OK)
        st = kiln_tensor_set_requires_grad(tw, true);
    kiln_conv2d_params p = {{s->stride, s->stride}, {s->pad, s->pad}, {1, 1}, s->groups};
    /* r = -1: warm-up (builds); forward, C reference and forward + backward interleaved */
    for (int r = -1; r < ctx->repeats && st == KILN_OK; r++) {
        kiln_tensor *out = NULL, *sum = NULL;
        bool prev = kiln_set_grad_enabled(false);
        double t0 = bench_now();
        st = kiln_conv2d(tx, tw, tb_, &p, &out);
        if (st == KILN_OK)
            st = kiln_tensor_eval(out);
        if (st == KILN_OK)
            st = kiln_device_synchronize(ctx->dev);
        double t1 = bench_now();
        kiln_set_grad_enabled(prev);
        kiln_tensor_release(out);
        out = NULL;
        host_conv(s, x, w, cols, y, oh, ow);
        double t2 = bench_now();
        if (st == KILN_OK)
            st = kiln_conv2d(tx, tw, tb_, &p, &out);
        if (st == KILN_OK)
            st = kiln_reduce(KILN_REDUCE_SUM, out, KILN_ALL_AXES, false, &sum);
        if (st == KILN_OK)
            st = kiln_backward(sum, NULL, 0);
        if (st == KILN_OK)
            st = kiln_device_synchronize(ctx->dev);
        double t3 = bench_now();
        kiln_tensor_release(out);
        kiln_tensor_release(sum);
        kiln_tensor_zero_grad(tw);
        if (r >= 0) {
            tk[r] = (t1 - t0) * 1e3;
            tb[r] = (t2 - t1) * 1e3;
            tc[r] = (t3 - t2) * 1e3;
        }
    }
    int rc = 0;
    if (st != KILN_OK) {
        rc = bench_fail("conv", st);
    } else {
        char name[96];
        bench_result res;
        snprintf(name, sizeof name, "conv2d fwd %s", s->name);
#ifdef KILN_HAVE_CBLAS
        bench_result_set(&res, name, "ms", false, "im2col + cblas_sgemm in C", tk, tb,
                         ctx->repeats);
#else
        bench_result_set(&res, name, "ms", false, NULL, tk, NULL, ctx->repeats);
#endif
        bench_report(ctx, &res);
        snprintf(name, sizeof name, "conv2d fwd+bwd %s", s->name);
        bench_result_set(&res, name, "ms", false, NULL, tc, NULL, ctx->repeats);
        bench_report(ctx, &res);
    }
    kiln_tensor_release(tx);
    kiln_tensor_release(tw);
    kiln_tensor_release(tb_);
    free(x);
    free(w);
    free(cols);
    free(y);
    free(tk);
    free(tb);
    free(tc);
    return rc;
}

int bench_conv(bench_ctx *ctx)
{
    static const conv_shape shapes[] = {
        {"N64 3->32 32x32 3x3", 64, 3, 32, 32, 32, 3, 1, 1, 1},
        {"N32 64->64 56x56 3x3", 32, 64, 56, 56, 64, 3, 1, 1, 1},
        {"N32 64->128 28x28 1x1", 32, 64, 28, 28, 128, 1, 1, 0, 1},
        {"N32 64 dw 56x56 3x3", 32, 64, 56, 56, 64, 3, 1, 1, 64},
    };
    static const conv_shape quick[] = {
        {"N8 3->16 16x16 3x3", 8, 3, 16, 16, 16, 3, 1, 1, 1},
        {"N4 8 dw 16x16 3x3", 4, 8, 16, 16, 8, 3, 1, 1, 8},
    };
    const conv_shape *list = ctx->quick ? quick : shapes;
    int n = ctx->quick ? 2 : 4, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        bench_progress(ctx, "conv: %s", list[i].name);
        rc = bench_one(ctx, &list[i]);
    }
    bench_note(ctx,
               "conv: f32, stride 1; fwd: kiln_conv2d (im2col + matmul) against the same "
               "algorithm in C (im2col loops + cblas_sgemm on host arrays); fwd+bwd: forward, "
               "sum, backward to the weight (and through im2col), no baseline yet (PyTorch not "
               "installed here)");
    return rc;
}
