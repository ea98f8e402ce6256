/* train.c - kiln-bench train: time per training step of the example MLP (examples/mlp.c) on a
 * kiln device, beside the same step written as plain C over host arrays (with cblas_sgemm for
 * the products where kiln was built with CBLAS, naive loops otherwise); and the same model
 * trained through autograd (Linear modules, kiln_backward, the Adam optimizer, a scope per step)
 * beside the hand-written kiln step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "classifier.h"
#include "mlp.h"

#ifdef KILN_HAVE_CBLAS
#include <cblas.h>
#endif

#define NFEAT 16

/* C = op(A) op(B) for row-major A, B; ta/tb transpose. */
static void gemm(bool ta, bool tb, int m, int n, int k, const float *a, const float *b, float *c)
{
#ifdef KILN_HAVE_CBLAS
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
#else
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int p = 0; p < k; p++)
                s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            c[i * n + j] = s;
        }
#endif
}

/* The same model and Adam step as examples/mlp.c, on host arrays. */
typedef struct host_mlp {
    int b, h;
    float *p[4], *m[4], *v[4], *g[4];
    int size[4];
    float *z1, *hid, *pred, *dpred, *dh;
} host_mlp;

static void host_init(host_mlp *n, int b, int h)
{
    int sizes[4] = {NFEAT * h, h, h, 1};
    n->b = b;
    n->h = h;
    for (int i = 0; i < 4; i++) {
        n->size[i] = sizes[i];
        n->p[i] = calloc((size_t)sizes[i], sizeof(float));
        n->m[i] = calloc((size_t)sizes[i], sizeof(float));
        n->v[i] = calloc((size_t)sizes[i], sizeof(float));
        n->g[i] = calloc((size_t)sizes[i], sizeof(float));
        for (int k = 0; k < sizes[i]; k++)
            n->p[i][k] = (float)((k * 37 % 101) - 50) * 0.002f;
    }
    n->z1 = calloc((size_t)b * h, sizeof(float));
    n->hid = calloc((size_t)b * h, sizeof(float));
    n->dh = calloc((size_t)b * h, sizeof(float));
    n->pred = calloc((size_t)b, sizeof(float));
    n->dpred = calloc((size_t)b, sizeof(float));
}

static void host_free(host_mlp *n)
{
    for (int i = 0; i < 4; i++) {
        free(n->p[i]);
        free(n->m[i]);
        free(n->v[i]);
        free(n->g[i]);
    }
    free(n->z1);
    free(n->hid);
    free(n->dh);
    free(n->pred);
    free(n->dpred);
}

static float host_step(host_mlp *n, const float *x, const float *y, int step)
{
    int b = n->b, h = n->h;
    gemm(false, false, b, h, NFEAT, x, n->p[0], n->z1);
    for (int i = 0; i < b * h; i++) {
        n->z1[i] += n->p[1][i % h];
        n->hid[i] = n->z1[i] > 0 ? n->z1[i] : 0;
    }
    gemm(false, false, b, 1, h, n->hid, n->p[2], n->pred);
    float loss = 0;
    for (int i = 0; i < b; i++) {
        float d = n->pred[i] + n->p[3][0] - y[i];
        loss += d * d / b;
        n->dpred[i] = 2 * d / b;
    }
    gemm(true, false, h, 1, b, n->hid, n->dpred, n->g[2]);
    n->g[3][0] = 0;
    for (int i = 0; i < b; i++)
        n->g[3][0] += n->dpred[i];
    gemm(false, true, b, h, 1, n->dpred, n->p[2], n->dh);
    for (int i = 0; i < b * h; i++)
        n->dh[i] = n->z1[i] > 0 ? n->dh[i] : 0;
    gemm(true, false, NFEAT, h, b, x, n->dh, n->g[0]);
    memset(n->g[1], 0, sizeof(float) * (size_t)h);
    for (int i = 0; i < b * h; i++)
        n->g[1][i % h] += n->dh[i];
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1 - powf(b1, (float)step), c2 = 1 - powf(b2, (float)step);
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < n->size[t]; i++) {
            float g = n->g[t][i];
            n->m[t][i] = b1 * n->m[t][i] + (1 - b1) * g;
            n->v[t][i] = b2 * n->v[t][i] + (1 - b2) * g * g;
            n->p[t][i] -= lr * (n->m[t][i] / c1) / (sqrtf(n->v[t][i] / c2) + eps);
        }
    return loss;
}

/* kiln's samples at one size, kept for the PyTorch row; the ratio of the best samples. */
typedef struct train_case {
    int batch, hidden, samples;
    double k[64];
    double best_ratio, autograd_ratio;
} train_case;

/* The example MLP through autograd: Sequential(Linear, ReLU, Linear), Adam over its params. */
typedef struct auto_mlp {
    kiln_module *model;
    kiln_params *params;
    kiln_optimizer *opt;
} auto_mlp;

static void auto_free(auto_mlp *a)
{
    kiln_optimizer_free(a->opt);
    kiln_params_free(a->params);
    kiln_module_free(a->model);
}

static kiln_status auto_init(auto_mlp *a, kiln_device *dev, int hidden)
{
    kiln_module *layers[3] = {NULL, NULL, NULL};
    kiln_status s =
        kiln_linear_create(dev, KILN_F32, NFEAT, hidden, true, KILN_INIT_HE, 1, &layers[0]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &layers[1]);
    if (s == KILN_OK)
        s = kiln_linear_create(dev, KILN_F32, hidden, 1, true, KILN_INIT_HE, 2, &layers[2]);
    if (s != KILN_OK) {
        for (int i = 0; i < 3; i++)
            kiln_module_free(layers[i]);
        return s;
    }
    if ((s = kiln_sequential_create(layers, 3, &a->model)) == KILN_OK &&
        (s = kiln_params_create(&a->params)) == KILN_OK &&
        (s = kiln_module_params(a->model, "", a->params)) == KILN_OK)
        s = kiln_adam_create(a->params, 1e-3, 0.9, 0.999, 1e-8, 0.0, &a->opt);
    return s;
}

/* forward, loss, zero_grad, backward, step: the step of examples/train.c. */
static kiln_status auto_step(auto_mlp *a, const kiln_tensor *x, const kiln_tensor *y)
{
    kiln_scope *scope;
    kiln_tensor *pred, *loss;
    kiln_status s = kiln_scope_begin(&scope);
    if (s != KILN_OK)
        return s;
    if ((s = kiln_module_forward(a->model, x, &pred)) == KILN_OK &&
        (s = kiln_mse_loss(pred, y, &loss, NULL)) == KILN_OK &&
        (s = kiln_optimizer_zero_grad(a->opt)) == KILN_OK &&
        (s = kiln_backward(loss, NULL, 0)) == KILN_OK)
        s = kiln_optimizer_step(a->opt);
    kiln_scope_end(scope);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench_one(bench_ctx *ctx, int batch, int hidden, train_case *tc)
{
    int steps = ctx->quick ? 5 : 20;
    size_t nx = (size_t)batch * NFEAT;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * (size_t)batch);
    for (size_t i = 0; i < nx; i++)
        x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (int i = 0; i < batch; i++)
        y[i] = x[(size_t)i * NFEAT] * 0.5f + 0.25f;

    mlp m = {0};
    auto_mlp am = {0};
    kiln_tensor *tx = NULL, *ty = NULL, *loss = NULL;
    int64_t xs[2] = {batch, NFEAT}, ys[2] = {batch, 1};
    int rc = 1;
    double *tk = calloc((size_t)ctx->repeats, sizeof(double));
    double *tb = calloc((size_t)ctx->repeats, sizeof(double));
    double *ta = calloc((size_t)ctx->repeats, sizeof(double));
    double *th = calloc((size_t)ctx->repeats, sizeof(double));
    kiln_status s = mlp_init(&m, ctx->dev, NFEAT, hidden, 1);
    if (s == KILN_OK)
        s = auto_init(&am, ctx->dev, hidden);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 2, xs, x, &tx);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 2, ys, y, &ty);
    /* Warm-up: builds (or loads) every kernel the step uses. */
    for (int i = 1; i <= 2 && s == KILN_OK; i++) {
        s = mlp_train_step(&m, tx, ty, i, 1e-3, &loss);
        kiln_tensor_release(loss);
        loss = NULL;
        if (s == KILN_OK)
            s = auto_step(&am, tx, ty);
    }
    if (s == KILN_OK)
        s = kiln_device_synchronize(ctx->dev);
    if (s != KILN_OK) {
        rc = bench_fail("train warm-up", s);
        goto done;
    }
    host_mlp hm;
    host_init(&hm, batch, hidden);
    int64_t step = 2;
    for (int r = 0; r < ctx->repeats && s == KILN_OK; r++) {
        double t0 = bench_now();
        for (int i = 0; i < steps && s == KILN_OK; i++) {
            s = mlp_train_step(&m, tx, ty, ++step, 1e-3, &loss);
            kiln_tensor_release(loss);
            loss = NULL;
        }
        if (s == KILN_OK)
            s = kiln_device_synchronize(ctx->dev);
        tk[r] = (bench_now() - t0) / steps * 1e3;
        t0 = bench_now();
        volatile float sink = 0;
        for (int i = 0; i < steps; i++)
            sink += host_step(&hm, x, y, i + 1);
        (void)sink; /* only there so the compiler keeps the host steps */
        tb[r] = (bench_now() - t0) / steps * 1e3;
#ifdef KILN_HAVE_CBLAS
        bench_blas_settle();
#endif
        /* The autograd step against the hand-written one, interleaved step by step (each
         * waited for; which goes first alternates) so that both see the same machine. */
        double hand = 0, autograd = 0;
        for (int i = 0; i < steps && s == KILN_OK; i++) {
            for (int j = 0; j < 2 && s == KILN_OK; j++) {
                bool auto_now = (i + j) % 2 == 1;
                t0 = bench_now();
                if (auto_now) {
                    s = auto_step(&am, tx, ty);
                } else {
                    s = mlp_train_step(&m, tx, ty, ++step, 1e-3, &loss);
                    kiln_tensor_release(loss);
                    loss = NULL;
                }
                if (s == KILN_OK)
                    s = kiln_device_synchronize(ctx->dev);
                *(auto_now ? &autograd : &hand) += bench_now() - t0;
            }
        }
        th[r] = hand / steps * 1e3;
        ta[r] = autograd / steps * 1e3;
    }
    host_free(&hm);
    if (s != KILN_OK) {
        rc = bench_fail("train step", s);
        goto done;
    }
    char name[96];
    snprintf(name, sizeof name, "step batch %d, %d-%d-1", batch, NFEAT, hidden);
    bench_result r;
    *tc = (train_case){.batch = batch, .hidden = hidden};
    tc->samples = ctx->repeats < 64 ? ctx->repeats : 64;
    for (int i = 0; i < tc->samples; i++)
        tc->k[i] = tk[i];
    bench_result_set(&r, name, "ms", false, "plain C step", tk, tb, ctx->repeats);
    bench_report(ctx, &r);
    tc->best_ratio = tb[0] / tk[0]; /* sorted by bench_result_set */
    /* The paired ratio (hand / autograd of one repeat, interleaved), median over repeats. */
    double *pr = calloc((size_t)ctx->repeats, sizeof(double));
    if (pr) {
        for (int i = 0; i < ctx->repeats; i++)
            pr[i] = th[i] / ta[i];
        qsort(pr, (size_t)ctx->repeats, sizeof *pr, cmp_double);
        tc->autograd_ratio = pr[ctx->repeats / 2];
        free(pr);
    }
    snprintf(name, sizeof name, "autograd step batch %d, %d-%d-1", batch, NFEAT, hidden);
    bench_result_set(&r, name, "ms", false, "hand-written kiln step", ta, th, ctx->repeats);
    bench_report(ctx, &r);
    rc = 0;
done:
    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    mlp_free(&m);
    auto_free(&am);
    free(tk);
    free(tb);
    free(ta);
    free(th);
    free(x);
    free(y);
    return rc;
}

static int classifier_sample(void *user, long a, long b, long c, double ms, const char *version,
                             int threads)
{
    (void)a, (void)b, (void)c, (void)version, (void)threads;
    *(double *)user = ms;
    return 0;
}

/* The step of examples/classify.c (classifier.c): 2-64-3, cross-entropy, Adam, batch 64, the
 * loss read each step (kiln_tensor_item: where a bad label is reported, issue 22 item 2); beside
 * PyTorch's same step (torch_ref.py's worker), sampled between kiln's repeats. */
static int bench_classify(bench_ctx *ctx)
{
    int steps = ctx->quick ? 10 : 50;
    classifier *c = calloc(1, sizeof *c);
    double *t = calloc((size_t)ctx->repeats, sizeof(double));
    double *pt = calloc((size_t)ctx->repeats, sizeof(double));
    kiln_status s = c && t && pt ? classifier_init(c, ctx->dev) : KILN_ERR_OUT_OF_MEMORY;
    double sum = 0, l = 0;
    int b = 0;
    for (int i = 0; i < 2 && s == KILN_OK; i++) /* warm-up: builds */
        s = classifier_step(c, b++, &l);
    bench_worker *w = s == KILN_OK ? bench_worker_start(ctx, "train (classifier step)") : NULL;
    bool peer = w != NULL;
    char request[64];
    snprintf(request, sizeof request, "classifier 1 %d", steps);
    for (int r = 0; r < ctx->repeats && s == KILN_OK; r++) {
        double t0 = bench_now();
        for (int i = 0; i < steps && s == KILN_OK; i++) {
            s = classifier_step(c, b++, &l);
            sum += l;
        }
        t[r] = (bench_now() - t0) / steps * 1e3;
        peer = peer && bench_worker_ask(w, 1, request, classifier_sample, &pt[r]) == 1;
    }
    char baseline[64];
    if (w)
        snprintf(baseline, sizeof baseline, "PyTorch %.40s, 1 thr", bench_worker_version(w));
    bench_worker_stop(w);
    int rc = 0;
    if (s != KILN_OK) {
        rc = bench_fail("classifier step", s);
    } else {
        bench_result res;
        if (peer)
            bench_result_set(&res, "classifier step batch 64, 2-64-3, CE", "ms", false, baseline, t,
                             pt, ctx->repeats);
        else
            bench_result_set(&res, "classifier step batch 64, 2-64-3, CE", "ms", false, NULL, t,
                             NULL, ctx->repeats);
        bench_report(ctx, &res);
        bench_note(ctx,
                   "train: the classifier step (examples/classify.c's, loss read each step; mean "
                   "loss %.3g); PyTorch runs the same model, optimizer and batch size on data "
                   "already in memory (kiln uploads each batch)",
                   sum / (double)(steps * ctx->repeats));
    }
    if (c)
        classifier_free(c);
    free(c);
    free(t);
    free(pt);
    return rc;
}

typedef struct torch_rows {
    bench_ctx *ctx;
    train_case *cases;
    int ncases;
} torch_rows;

static int torch_row(void *user, long batch, long hidden, long unused, double ms,
                     const char *version, int threads)
{
    torch_rows *t = user;
    static char baseline[64];
    (void)unused;
    snprintf(baseline, sizeof baseline, "PyTorch %s, %d thr", version, threads);
    for (int i = 0; i < t->ncases; i++) {
        train_case *c = &t->cases[i];
        if (c->batch != batch || c->hidden != hidden)
            continue;
        double base[64];
        for (int j = 0; j < c->samples; j++)
            base[j] = ms;
        bench_result r;
        char name[96];
        snprintf(name, sizeof name, "step batch %d, %d-%d-1", c->batch, NFEAT, c->hidden);
        bench_result_set(&r, name, "ms", false, baseline, c->k, base, c->samples);
        bench_report(t->ctx, &r);
        return 0;
    }
    return 1;
}

int bench_train(bench_ctx *ctx)
{
    static const int sizes[][2] = {{64, 32}, {256, 128}, {1024, 512}};
    int n = ctx->quick ? 2 : 3, rc = 0, ncases = 0;
    train_case cases[3];
    for (int i = 0; i < n; i++) {
        bench_progress(ctx, "train: batch %d, hidden %d", sizes[i][0], sizes[i][1]);
        int r = bench_one(ctx, sizes[i][0], sizes[i][1], &cases[ncases]);
        ncases += r == 0;
        rc |= r;
    }
    bench_progress(ctx, "train: classifier step");
    rc |= bench_classify(ctx);
    bench_note(ctx, "train: baseline is the same forward, backward and Adam step in plain C%s",
#ifdef KILN_HAVE_CBLAS
               " with cblas_sgemm for the products (kiln's next sample starts 0.2 s after the "
               "last, when OpenBLAS's threads have stopped spinning)"
#else
               " loops"
#endif
    );
    char note[256], args[128];
    int len = snprintf(note, sizeof note, "train: ratio of best samples (baseline/kiln time):");
    int alen = snprintf(args, sizeof args, "train %d %d", ctx->repeats, ctx->quick ? 5 : 20);
    for (int i = 0; i < ncases; i++) {
        if (len < (int)sizeof note)
            len += snprintf(note + len, sizeof note - (size_t)len, " %d/%d %.3g;", cases[i].batch,
                            cases[i].hidden, cases[i].best_ratio);
        if (alen < (int)sizeof args)
            alen += snprintf(args + alen, sizeof args - (size_t)alen, " %d %d", cases[i].batch,
                             cases[i].hidden);
    }
    if (ncases > 0) {
        bench_note(ctx, "%s", note);
        len = snprintf(note, sizeof note,
                       "train: autograd step vs hand-written kiln step (hand/autograd time, "
                       "interleaved step by step, median over repeats; goal >= 0.9):");
        for (int i = 0; i < ncases && len < (int)sizeof note; i++)
            len += snprintf(note + len, sizeof note - (size_t)len, " %d/%d %.3g;", cases[i].batch,
                            cases[i].hidden, cases[i].autograd_ratio);
        bench_note(ctx, "%s", note);
        torch_rows t = {.ctx = ctx, .cases = cases, .ncases = ncases};
        bench_torch(ctx, "train", args, torch_row, &t);
    }
    return rc;
}
