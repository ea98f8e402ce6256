/* rnn.c - kiln-bench rnn: one-layer LSTM and GRU layers (kiln_lstm_create, kiln_gru_create;
 * input size = hidden size, [T, B, F] time-major, with biases) at batch 32 and 128, hidden 128
 * and 512, sequence 50, forward and forward + backward (the sum of y, backward to every
 * parameter), in ms per call; then PyTorch's nn.LSTM and nn.GRU at 1 and 2 threads on the same
 * inputs, where python3 has torch (torch.c). There is no C baseline: the goal is PyTorch's
 * speed (issue 24). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct rnn_shape {
    int gru; /* 0: LSTM, 1: GRU (torch_ref.py's KIND) */
    int t, b, h;
} rnn_shape;

static const char *const kind_name[2] = {"lstm", "gru"};

/* kiln's samples of one shape, kept for the PyTorch rows (ms; fwd, fwd+bwd). */
typedef struct rnn_case {
    const rnn_shape *s;
    double *fwd, *both;
} rnn_case;

static void case_name(char *buf, size_t size, const rnn_shape *s, int both)
{
    snprintf(buf, size, "%s %s B%d H%d T%d", kind_name[s->gru], both ? "fwd+bwd" : "fwd", s->b,
             s->h, s->t);
}

static int bench_one(bench_ctx *ctx, const rnn_shape *s, rnn_case *kept)
{
    long nx = (long)s->t * s->b * s->h;
    float *x = malloc(sizeof(float) * (size_t)nx);
    double *tf = calloc((size_t)ctx->repeats, sizeof(double));
    double *tb = calloc((size_t)ctx->repeats, sizeof(double));
    kiln_module *m = NULL;
    kiln_params *params = NULL;
    kiln_tensor *tx = NULL;
    kiln_status st = x && tf && tb ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    for (long i = 0; st == KILN_OK && i < nx; i++)
        x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f; /* as torch_ref.py's */
    const int64_t xs[3] = {s->t, s->b, s->h};
    kiln_rnn_options opt = {0}; /* one layer, biases, [T, B, F] */
    if (st == KILN_OK)
        st = s->gru ? kiln_gru_create(ctx->dev, KILN_F32, s->h, s->h, &opt, 1, &m)
                    : kiln_lstm_create(ctx->dev, KILN_F32, s->h, s->h, &opt, 1, &m);
    if (st == KILN_OK)
        st = kiln_params_create(&params);
    if (st == KILN_OK)
        st = kiln_module_params(m, "", params);
    if (st == KILN_OK)
        st = kiln_tensor_from_host(ctx->dev, KILN_F32, 3, xs, x, &tx);
    /* r = -1: warm-up (builds); forward and forward + backward interleaved */
    for (int r = -1; r < ctx->repeats && st == KILN_OK; r++) {
        kiln_tensor *y = NULL, *sum = NULL;
        bool prev = kiln_set_grad_enabled(false);
        double t0 = bench_now();
        st = kiln_module_forward(m, tx, &y);
        if (st == KILN_OK)
            st = kiln_tensor_eval(y);
        if (st == KILN_OK)
            st = kiln_device_synchronize(ctx->dev);
        double t1 = bench_now();
        kiln_set_grad_enabled(prev);
        kiln_tensor_release(y);
        y = NULL;
        double t2 = bench_now();
        if (st == KILN_OK)
            st = kiln_module_forward(m, tx, &y);
        if (st == KILN_OK)
            st = kiln_reduce(KILN_REDUCE_SUM, y, KILN_ALL_AXES, false, &sum);
        if (st == KILN_OK)
            st = kiln_backward(sum, NULL, 0);
        if (st == KILN_OK)
            st = kiln_device_synchronize(ctx->dev);
        double t3 = bench_now();
        kiln_tensor_release(y);
        kiln_tensor_release(sum);
        if (st == KILN_OK)
            st = kiln_params_zero_grad(params);
        if (r >= 0) {
            tf[r] = (t1 - t0) * 1e3;
            tb[r] = (t3 - t2) * 1e3;
        }
    }
    int rc = 0;
    if (st != KILN_OK) {
        rc = bench_fail("rnn", st);
    } else {
        char name[96];
        bench_result res;
        case_name(name, sizeof name, s, 0);
        bench_result_set(&res, name, "ms", false, NULL, tf, NULL, ctx->repeats);
        bench_report(ctx, &res);
        case_name(name, sizeof name, s, 1);
        bench_result_set(&res, name, "ms", false, NULL, tb, NULL, ctx->repeats);
        bench_report(ctx, &res);
        kept->s = s;
        kept->fwd = tf; /* sorted by bench_result_set: medians stay medians */
        kept->both = tb;
        tf = tb = NULL;
    }
    kiln_tensor_release(tx);
    kiln_params_free(params);
    kiln_module_free(m);
    free(x);
    free(tf);
    free(tb);
    return rc;
}

typedef struct torch_rows {
    bench_ctx *ctx;
    rnn_case *cases;
    int ncases;
} torch_rows;

/* "rnn CASE THREADS MODE ms" (MODE 0: forward, 1: forward + backward) */
static int torch_row(void *user, long a, long threads, long mode, double ms, const char *version,
                     int default_threads)
{
    torch_rows *t = user;
    char baseline[64];
    (void)default_threads;
    if (a < 0 || a >= t->ncases || mode < 0 || mode > 1)
        return 1;
    snprintf(baseline, sizeof baseline, "PyTorch %s, %ld thr", version, threads);
    rnn_case *c = &t->cases[a];
    char name[96];
    case_name(name, sizeof name, c->s, (int)mode);
    double base[64];
    int n = t->ctx->repeats < 64 ? t->ctx->repeats : 64;
    for (int j = 0; j < n; j++)
        base[j] = ms;
    bench_result res;
    bench_result_set(&res, name, "ms", false, baseline, mode ? c->both : c->fwd, base, n);
    bench_report(t->ctx, &res);
    return 0;
}

int bench_rnn(bench_ctx *ctx)
{
    enum { T = 50 };
    static const rnn_shape shapes[] = {
        {0, T, 32, 128}, {0, T, 32, 512}, {0, T, 128, 128}, {0, T, 128, 512},
        {1, T, 32, 128}, {1, T, 32, 512}, {1, T, 128, 128}, {1, T, 128, 512},
    };
    static const rnn_shape quick[] = {{0, 10, 8, 32}, {1, 10, 8, 32}};
    enum { NSHAPES = sizeof shapes / sizeof shapes[0], NQUICK = sizeof quick / sizeof quick[0] };
    const rnn_shape *list = ctx->quick ? quick : shapes;
    int n = ctx->quick ? NQUICK : NSHAPES, rc = 0, ncases = 0;
    rnn_case cases[NSHAPES] = {0};
    for (int i = 0; i < n && rc == 0; i++) {
        bench_progress(ctx, "rnn: %s B%d H%d T%d", kind_name[list[i].gru], list[i].b, list[i].h,
                       list[i].t);
        rc = bench_one(ctx, &list[i], &cases[ncases]);
        ncases += rc == 0;
    }
    if (rc == 0 && ncases > 0) {
        char args[512];
        int len = snprintf(args, sizeof args, "rnn %d", ctx->repeats);
        for (int i = 0; i < ncases && len < (int)sizeof args; i++) {
            const rnn_shape *s = cases[i].s;
            len += snprintf(args + len, sizeof args - (size_t)len, " %d %d %d %d", s->t, s->b, s->h,
                            s->gru);
        }
        torch_rows t = {ctx, cases, ncases};
        bench_progress(ctx, "rnn: PyTorch");
        bench_torch(ctx, "rnn", args, torch_row, &t);
    }
    for (int i = 0; i < ncases; i++) {
        free(cases[i].fwd);
        free(cases[i].both);
    }
    bench_note(ctx, "rnn: f32, one layer with biases, input size = hidden size H, x [T, B, H]; "
                    "fwd: kiln_module_forward under kiln_set_grad_enabled(false); fwd+bwd: "
                    "forward, sum of y, backward to every parameter");
    bench_note(ctx, "rnn: PyTorch rows (nn.LSTM, nn.GRU; fwd under torch.no_grad, fwd+bwd "
                    "y.sum().backward()) run after kiln's on the same x, at 1 and 2 threads; "
                    "launches per step: docs/benchmarks.md");
    return rc;
}
