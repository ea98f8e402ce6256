/* conv.c - kiln-bench conv: kiln_conv2d forward, and forward + backward, at LeNet-like, ResNet-
 * block-like, 1x1 and depthwise shapes, beside im2col + cblas_sgemm written directly in C over
 * host arrays (the forward the CPU path can reach at best), in ms per call; then PyTorch's
 * conv2d at 1 and 2 threads on the same inputs, and a training step of examples/cnn_digits's
 * CNN against PyTorch's, where python3 has torch (torch.c). */
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

/* kiln's samples of one shape, kept for the PyTorch rows (ms; fwd, fwd+bwd). */
typedef struct conv_case {
    const conv_shape *s;
    double *fwd, *both;
} conv_case;

static int bench_one(bench_ctx *ctx, const conv_shape *s, conv_case *kept)
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
#ifdef KILN_HAVE_CBLAS
        bench_blas_settle();
#endif
        double t2k = bench_now();
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
            tc[r] = (t3 - t2k) * 1e3;
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
        kept->s = s;
        kept->fwd = tk; /* sorted by bench_result_set: medians stay medians */
        kept->both = tc;
        tk = tc = NULL;
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

/* examples/cnn_digits's model and Adam step on a fixed batch of 8x8 images; ms per step. */
static int bench_cnn_step(bench_ctx *ctx, int batch, int steps, double *ms)
{
    const kiln_conv2d_params same = {.padding = {1, 1}};
    const kiln_pool2d_params halve = {.kernel = {2, 2}};
    kiln_module *m[10] = {0}, *model = NULL;
    kiln_params *params = NULL;
    kiln_optimizer *opt = NULL;
    kiln_tensor *x = NULL, *y = NULL;
    float *hx = malloc(sizeof(float) * 64 * (size_t)batch);
    int64_t *hy = malloc(sizeof(int64_t) * (size_t)batch);
    kiln_status s = hx && hy ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; s == KILN_OK && i < 64 * batch; i++)
        hx[i] = (float)((i * 7919L) % 17) / 16.0f; /* as torch_ref.py's */
    for (int i = 0; s == KILN_OK && i < batch; i++)
        hy[i] = i % 10;
    kiln_device *dev = ctx->dev;
    if (s == KILN_OK)
        s = kiln_conv2d_create(dev, KILN_F32, 1, 16, 3, 3, &same, true, 1, &m[0]);
    if (s == KILN_OK)
        s = kiln_batch_norm2d_create(dev, KILN_F32, 16, 1e-5, 0.1, &m[1]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &m[2]);
    if (s == KILN_OK)
        s = kiln_max_pool2d_create(&halve, &m[3]);
    if (s == KILN_OK)
        s = kiln_conv2d_create(dev, KILN_F32, 16, 32, 3, 3, &same, true, 2, &m[4]);
    if (s == KILN_OK)
        s = kiln_batch_norm2d_create(dev, KILN_F32, 32, 1e-5, 0.1, &m[5]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &m[6]);
    if (s == KILN_OK)
        s = kiln_max_pool2d_create(&halve, &m[7]);
    if (s == KILN_OK)
        s = kiln_flatten_create(1, -1, &m[8]);
    if (s == KILN_OK)
        s = kiln_linear_create(dev, KILN_F32, 128, 10, true, KILN_INIT_DEFAULT, 3, &m[9]);
    if (s == KILN_OK)
        s = kiln_sequential_create(m, 10, &model);
    else
        for (int i = 0; i < 10; i++)
            kiln_module_free(m[i]);
    const int64_t xs[4] = {batch, 1, 8, 8}, ys[1] = {batch};
    if (s == KILN_OK)
        s = kiln_params_create(&params);
    if (s == KILN_OK)
        s = kiln_module_params(model, "", params);
    if (s == KILN_OK)
        s = kiln_adam_create(params, 1e-3, 0.9, 0.999, 1e-8, 0, &opt);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(dev, KILN_F32, 4, xs, hx, &x);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(dev, KILN_I64, 1, ys, hy, &y);
    /* r = -1: warm-up (builds); a step as the example's: forward, loss, zero_grad, backward,
     * step, the loss read, in a scope */
    for (int r = -1; r < ctx->repeats && s == KILN_OK; r++) {
        double t0 = bench_now();
        for (int k = 0; k < steps && s == KILN_OK; k++) {
            kiln_scope *sc = NULL;
            kiln_tensor *logits, *loss;
            double l;
            s = kiln_scope_begin(&sc);
            if (s == KILN_OK)
                s = kiln_module_forward(model, x, &logits);
            if (s == KILN_OK)
                s = kiln_cross_entropy(logits, y, &loss, NULL);
            if (s == KILN_OK)
                s = kiln_optimizer_zero_grad(opt);
            if (s == KILN_OK)
                s = kiln_backward(loss, NULL, 0);
            if (s == KILN_OK)
                s = kiln_optimizer_step(opt);
            if (s == KILN_OK)
                s = kiln_tensor_item(loss, &l);
            kiln_scope_end(sc);
        }
        if (r >= 0)
            ms[r] = (bench_now() - t0) * 1e3 / steps;
    }
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_optimizer_free(opt);
    kiln_params_free(params);
    kiln_module_free(model);
    free(hx);
    free(hy);
    return s == KILN_OK ? 0 : bench_fail("conv: cnn step", s);
}

typedef struct torch_rows {
    bench_ctx *ctx;
    conv_case *cases;
    int ncases;
    double *step; /* kiln's CNN step samples */
    int batch;
} torch_rows;

/* "conv CASE THREADS MODE ms" and "cnnstep BATCH THREADS 2 ms" */
static int torch_row(void *user, long a, long threads, long mode, double ms, const char *version,
                     int default_threads)
{
    torch_rows *t = user;
    static char baseline[64];
    (void)default_threads;
    snprintf(baseline, sizeof baseline, "PyTorch %s, %ld thr", version, threads);
    double base[64], *kiln;
    char name[128];
    if (mode == 2) { /* the CNN step (torch_ref.py prints it with mode 2) */
        if (!t->step || a != t->batch)
            return 1;
        kiln = t->step;
        snprintf(name, sizeof name, "cnn_digits train step batch %ld", a);
    } else {
        if (a < 0 || a >= t->ncases || mode < 0 || mode > 1)
            return 1;
        conv_case *c = &t->cases[a];
        kiln = mode ? c->both : c->fwd;
        snprintf(name, sizeof name, "conv2d %s %s", mode ? "fwd+bwd" : "fwd", c->s->name);
    }
    int n = t->ctx->repeats < 64 ? t->ctx->repeats : 64;
    for (int j = 0; j < n; j++)
        base[j] = ms;
    bench_result res;
    bench_result_set(&res, name, "ms", false, baseline, kiln, base, n);
    bench_report(t->ctx, &res);
    return 0;
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
    int n = ctx->quick ? 2 : 4, rc = 0, ncases = 0;
    conv_case cases[4] = {0};
    for (int i = 0; i < n && rc == 0; i++) {
        bench_progress(ctx, "conv: %s", list[i].name);
        rc = bench_one(ctx, &list[i], &cases[ncases]);
        ncases += rc == 0;
    }
    enum { BATCH = 32 };
    int steps = ctx->quick ? 2 : 10;
    double *step = calloc((size_t)ctx->repeats, sizeof(double));
    if (rc == 0 && step) {
        bench_progress(ctx, "conv: cnn_digits step");
        rc = bench_cnn_step(ctx, BATCH, steps, step);
        if (rc == 0) {
            bench_result res;
            char name[64];
            snprintf(name, sizeof name, "cnn_digits train step batch %d", BATCH);
            bench_result_set(&res, name, "ms", false, NULL, step, NULL, ctx->repeats);
            bench_report(ctx, &res);
        }
    }
    if (rc == 0 && ncases > 0) {
        char args[512];
        int len = snprintf(args, sizeof args, "conv %d", ctx->repeats);
        for (int i = 0; i < ncases && len < (int)sizeof args; i++) {
            const conv_shape *s = cases[i].s;
            len += snprintf(args + len, sizeof args - (size_t)len, " %d %d %d %d %d %d %d %d %d",
                            s->n, s->c, s->h, s->w, s->o, s->k, s->stride, s->pad, s->groups);
        }
        torch_rows t = {ctx, cases, ncases, step, BATCH};
        bench_torch(ctx, "conv", args, torch_row, &t);
        snprintf(args, sizeof args, "cnnstep %d %d %d", ctx->repeats, steps, BATCH);
        bench_torch(ctx, "conv (cnn step)", args, torch_row, &t);
    }
    for (int i = 0; i < ncases; i++) {
        free(cases[i].fwd);
        free(cases[i].both);
    }
    free(step);
    bench_note(ctx,
               "conv: f32, stride 1; fwd: kiln_conv2d (im2col + matmul; 1x1: the matmul alone; "
               "depthwise: the direct kernels) against im2col in C (im2col loops + cblas_sgemm "
               "on host arrays; kiln's next sample starts 0.2 s after it, when OpenBLAS's "
               "threads have stopped spinning); fwd+bwd: forward, sum, backward to the weight "
               "alone (x "
               "needs no gradient, as a first layer's); PyTorch rows run after kiln's, "
               "on the same inputs, at 1 and 2 threads; cnn_digits step: forward, "
               "cross-entropy, zero_grad, backward, Adam, loss read, in a scope");
    return rc;
}
