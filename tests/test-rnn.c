/* test-rnn.c - recurrent cells and layers (RNN tanh/relu, LSTM, GRU): every cell against a plain
 * C step in double, whole stacks (layers, directions, batch_first, ragged lengths, initial states)
 * against a C reference of PyTorch's packed-sequence semantics, gradients of everything against
 * finite differences in f64, PyTorch's parameter names and shapes, a model that learns, the mask
 * and the masked mean, and every bad argument (status and message, nothing leaked). The match
 * with PyTorch's own outputs is tests/test-torch.py's (where python3-torch is installed). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "lib/alloc.h"
#include "testutil.h"

static kiln_device *dev;

static void setup(void)
{
    setup_devices();
    dev = test_device();
}

static void teardown(void)
{
    kiln__alloc_fail_at(-1);
    teardown_devices();
}

enum { RNN_TANH, RNN_RELU, LSTM, GRU };
static const char *const mode_names[] = {"rnn-tanh", "rnn-relu", "lstm", "gru"};

static int gates(int mode)
{
    return mode == LSTM ? 4 : mode == GRU ? 3 : 1;
}

static double sigm(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* One step of one row, PyTorch's formulas: x [in], h, c [H] -> hn, cn; w_ih [G H, in], w_hh
 * [G H, H], biases [G H] or NULL. */
static void ref_step(int mode, int64_t in, int64_t H, const double *x, const double *h,
                     const double *c, const double *w_ih, const double *w_hh, const double *b_ih,
                     const double *b_hh, double *hn, double *cn)
{
    int64_t G = gates(mode);
    double *gi = calloc((size_t)(G * H), sizeof *gi), *gh = calloc((size_t)(G * H), sizeof *gh);
    ck_assert_ptr_nonnull(gi);
    ck_assert_ptr_nonnull(gh);
    for (int64_t r = 0; r < G * H; r++) {
        gi[r] = b_ih ? b_ih[r] : 0;
        gh[r] = b_hh ? b_hh[r] : 0;
        for (int64_t k = 0; k < in; k++)
            gi[r] += w_ih[r * in + k] * x[k];
        for (int64_t k = 0; k < H; k++)
            gh[r] += w_hh[r * H + k] * h[k];
    }
    for (int64_t j = 0; j < H; j++) {
        if (mode == RNN_TANH) {
            hn[j] = tanh(gi[j] + gh[j]);
        } else if (mode == RNN_RELU) {
            hn[j] = fmax(gi[j] + gh[j], 0.0);
        } else if (mode == LSTM) {
            double i = sigm(gi[j] + gh[j]), f = sigm(gi[H + j] + gh[H + j]);
            double g = tanh(gi[2 * H + j] + gh[2 * H + j]), o = sigm(gi[3 * H + j] + gh[3 * H + j]);
            cn[j] = f * c[j] + i * g;
            hn[j] = o * tanh(cn[j]);
        } else {
            double r = sigm(gi[j] + gh[j]), z = sigm(gi[H + j] + gh[H + j]);
            double n = tanh(gi[2 * H + j] + r * gh[2 * H + j]);
            hn[j] = (1 - z) * n + z * h[j];
        }
    }
    free(gi);
    free(gh);
}

/* A stack's configuration and host copies of its parameters (per layer and direction w_ih,
 * w_hh, b_ih, b_hh). */
typedef struct stack {
    int mode, L, D;
    int64_t in, H;
    bool bias, batch_first;
    double *w[64][4];
} stack;

static int64_t layer_in(const stack *st, int l)
{
    return l == 0 ? st->in : st->D * st->H;
}

/* The reference forward: x as [T, B, in] (time-major here), lengths (NULL: T), h0/c0
 * [L D, B, H] or NULL; y [T, B, D H], hn, cn [L D, B, H]. */
static void ref_stack(const stack *st, int64_t T, int64_t B, const double *x, const int64_t *len,
                      const double *h0, const double *c0, double *y, double *hn, double *cn)
{
    int64_t H = st->H, D = st->D;
    double *cur = malloc((size_t)(T * B * st->in) * sizeof *cur);
    ck_assert_ptr_nonnull(cur);
    memcpy(cur, x, (size_t)(T * B * st->in) * sizeof *cur);
    for (int l = 0; l < st->L; l++) {
        int64_t in = layer_in(st, l);
        double *out = calloc((size_t)(T * B * D * H), sizeof *out);
        ck_assert_ptr_nonnull(out);
        for (int d = 0; d < D; d++) {
            int i = l * st->D + d;
            double *const *w = st->w[i];
            for (int64_t b = 0; b < B; b++) {
                double h[64], c[64], h2[64], c2[64];
                for (int64_t j = 0; j < H; j++) {
                    h[j] = h0 ? h0[(i * B + b) * H + j] : 0;
                    c[j] = c0 ? c0[(i * B + b) * H + j] : 0;
                }
                int64_t n = len ? len[b] : T;
                for (int64_t s = 0; s < n; s++) {
                    int64_t t = d ? n - 1 - s : s;
                    ref_step(st->mode, in, H, cur + (t * B + b) * in, h, c, w[0], w[1], w[2], w[3],
                             h2, c2);
                    memcpy(h, h2, sizeof h);
                    if (st->mode == LSTM)
                        memcpy(c, c2, sizeof c);
                    for (int64_t j = 0; j < H; j++)
                        out[(t * B + b) * D * H + d * H + j] = h[j];
                }
                for (int64_t j = 0; j < H; j++) {
                    hn[(i * B + b) * H + j] = h[j];
                    if (cn)
                        cn[(i * B + b) * H + j] = c[j];
                }
            }
        }
        free(cur);
        cur = out;
    }
    memcpy(y, cur, (size_t)(T * B * D * H) * sizeof *y);
    free(cur);
}

typedef kiln_status (*create_fn)(kiln_device *, kiln_dtype, int64_t, int64_t,
                                 const kiln_rnn_options *, uint64_t, kiln_module **);

static kiln_module *make_module(kiln_device *d, kiln_dtype dt, stack *st, uint64_t seed)
{
    kiln_rnn_options o = {.num_layers = st->L,
                          .no_bias = !st->bias,
                          .batch_first = st->batch_first,
                          .bidirectional = st->D == 2,
                          .relu = st->mode == RNN_RELU};
    create_fn f = st->mode == LSTM  ? kiln_lstm_create
                  : st->mode == GRU ? kiln_gru_create
                                    : kiln_rnn_create;
    kiln_module *m = NULL;
    ASSERT_OK(f(d, dt, st->in, st->H, &o, seed, &m));
    /* the parameters in PyTorch's order, copied to the host for the reference */
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_module_params(m, NULL, p));
    int k = 0;
    for (int i = 0; i < st->L * st->D; i++)
        for (int w = 0; w < 4; w++) {
            st->w[i][w] = NULL;
            if (w >= 2 && !st->bias)
                continue;
            ck_assert_int_lt(k, kiln_params_count(p));
            st->w[i][w] = download(kiln_params_tensor(p, k++));
        }
    ck_assert_int_eq(k, kiln_params_count(p));
    kiln_params_free(p);
    return m;
}

static void free_stack(stack *st)
{
    for (int i = 0; i < st->L * st->D; i++)
        for (int w = 0; w < 4; w++)
            free(st->w[i][w]);
}

static double max_rel_err(const double *a, const double *b, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

/* [T, B, F] <-> [B, T, F] on the host. */
static void swap01(const double *src, double *dst, int64_t n0, int64_t n1, int64_t f)
{
    for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            memcpy(dst + (b * n0 + a) * f, src + (a * n1 + b) * f, (size_t)f * sizeof *dst);
}

/* One stack forward on kiln against the reference. */
static void check_stack(kiln_device *d, kiln_dtype dt, stack st, int64_t T, int64_t B, bool ragged,
                        bool states)
{
    double tol = dt == KILN_F64 ? 1e-12 : 2e-5;
    kiln_module *m = make_module(d, dt, &st, 77);
    int64_t LD = st.L * st.D, H = st.H, nx = T * B * st.in, ny = T * B * st.D * H;
    double *x = malloc((size_t)nx * sizeof *x), *xbf = malloc((size_t)nx * sizeof *x);
    double *h0 = malloc((size_t)(LD * B * H) * sizeof *h0);
    double *c0 = malloc((size_t)(LD * B * H) * sizeof *c0);
    double *y = malloc((size_t)ny * sizeof *y), *hn = malloc((size_t)(LD * B * H) * sizeof *hn);
    double *cn = malloc((size_t)(LD * B * H) * sizeof *cn);
    fill_values(KILN_F64, x, nx);
    fill_values(KILN_F64, h0, LD * B * H);
    fill_values(KILN_F64, c0, LD * B * H);
    int64_t len[16];
    for (int64_t b = 0; b < B; b++)
        len[b] = ragged ? 1 + (b * 5 + 2) % T : T;
    if (ragged)
        len[0] = T; /* the longest need not come first; one row uses every step */
    ref_stack(&st, T, B, x, ragged ? len : NULL, states ? h0 : NULL,
              states && st.mode == LSTM ? c0 : NULL, y, hn, st.mode == LSTM ? cn : NULL);
    int64_t xs[3] = {T, B, st.in}, ss[3] = {LD, B, H};
    if (st.batch_first) {
        swap01(x, xbf, T, B, st.in);
        xs[0] = B;
        xs[1] = T;
    }
    kiln_tensor *tx = upload(d, dt, 3, xs, st.batch_first ? xbf : x);
    kiln_tensor *th0 = states ? upload(d, dt, 3, ss, h0) : NULL;
    kiln_tensor *tc0 = states && st.mode == LSTM ? upload(d, dt, 3, ss, c0) : NULL;
    kiln_tensor *ty = NULL, *thn = NULL, *tcn = NULL;
    ASSERT_OK(kiln_rnn_forward(m, tx, ragged ? len : NULL, th0, tc0, &ty, &thn,
                               st.mode == LSTM ? &tcn : NULL));
    const int64_t *ys = kiln_tensor_shape(ty);
    ck_assert_int_eq(ys[0], st.batch_first ? B : T);
    ck_assert_int_eq(ys[1], st.batch_first ? T : B);
    ck_assert_int_eq(ys[2], st.D * H);
    double *ky = download(ty), *khn = download(thn);
    if (st.batch_first) {
        double *tmp = malloc((size_t)ny * sizeof *tmp);
        swap01(ky, tmp, B, T, st.D * H);
        free(ky);
        ky = tmp;
    }
    double ey = max_rel_err(ky, y, ny), eh = max_rel_err(khn, hn, LD * B * H);
    ck_assert_msg(ey <= tol && eh <= tol, "%s %s L%d D%d T%ld B%ld%s%s%s: y off by %g, h_n by %g",
                  mode_names[st.mode], kiln_dtype_name(dt), st.L, st.D, (long)T, (long)B,
                  ragged ? " ragged" : "", states ? " h0" : "",
                  st.batch_first ? " batch_first" : "", ey, eh);
    if (tcn) {
        double *kcn = download(tcn);
        double ec = max_rel_err(kcn, cn, LD * B * H);
        ck_assert_msg(ec <= tol, "%s: c_n off by %g", mode_names[st.mode], ec);
        free(kcn);
    }
    /* the output alone through kiln_module_forward (no lengths, no states) */
    if (!ragged && !states) {
        kiln_tensor *y2 = NULL;
        ASSERT_OK(kiln_module_forward(m, tx, &y2));
        double *k2 = download(y2);
        double *ref2 = malloc((size_t)ny * sizeof *ref2);
        if (st.batch_first)
            swap01(k2, ref2, B, T, st.D * H);
        else
            memcpy(ref2, k2, (size_t)ny * sizeof *ref2);
        ck_assert_double_le(max_rel_err(ref2, y, ny), tol);
        free(k2);
        free(ref2);
        kiln_tensor_release(y2);
    }
    free(ky);
    free(khn);
    kiln_tensor_release(tx);
    kiln_tensor_release(th0);
    kiln_tensor_release(tc0);
    kiln_tensor_release(ty);
    kiln_tensor_release(thn);
    kiln_tensor_release(tcn);
    kiln_module_free(m);
    free_stack(&st);
    free(x);
    free(xbf);
    free(h0);
    free(c0);
    free(y);
    free(hn);
    free(cn);
}

START_TEST(test_layers_against_reference)
{
    bool sim = simulated(dev);
    kiln_dtype dts[2] = {KILN_F32, KILN_F64};
    for (int k = 0; k < (has_fp64(dev) ? 2 : 1); k++)
        for (int mode = 0; mode < 4; mode++) {
            stack st = {.mode = mode, .L = 1, .D = 1, .in = 3, .H = 4, .bias = true};
            check_stack(dev, dts[k], st, 5, 3, false, false);
            if (sim && k == 1)
                continue; /* Oclgrind: f32 covers the kernels' paths */
            if (sim && mode % 2 == 1)
                continue; /* and the bigger stacks of two modes (LSTM: c; RNN: no gates) */
            /* two layers, both directions, ragged rows, initial states, batch_first */
            stack st2 = {
                .mode = mode, .L = 2, .D = 2, .in = 3, .H = 4, .bias = true, .batch_first = true};
            check_stack(dev, dts[k], st2, 6, 4, true, true);
            stack st3 = {.mode = mode, .L = 2, .D = 1, .in = 2, .H = 5, .bias = false};
            check_stack(dev, dts[k], st3, 4, 2, true, false);
            if (!sim) { /* a larger one: several work-groups per step */
                stack st4 = {.mode = mode, .L = 1, .D = 2, .in = 16, .H = 40, .bias = true};
                check_stack(dev, dts[k], st4, 7, 9, true, true);
            }
        }
}
END_TEST

/* The cells against ref_step: with and without biases and states. */
START_TEST(test_cells_against_reference)
{
    int64_t B = 3, in = 5, H = 4;
    kiln_dtype dt = KILN_F32;
    for (int mode = 0; mode < 4; mode++)
        for (int variant = 0; variant < 3; variant++) { /* 0 all, 1 no bias, 2 no states */
            int64_t G = gates(mode);
            int64_t xs[2] = {B, in}, hs[2] = {B, H}, wis[2] = {G * H, in}, whs[2] = {G * H, H};
            int64_t bs[1] = {G * H};
            double x[15], h[12], c[12], wi[16 * 5], wh[16 * 4], bi[16], bh[16];
            fill_values(KILN_F64, x, B * in);
            fill_values(KILN_F64, h, B * H);
            fill_values(KILN_F64, c, B * H);
            fill_values(KILN_F64, wi, G * H * in);
            fill_values(KILN_F64, wh, G * H * H);
            fill_values(KILN_F64, bi, G * H);
            fill_values(KILN_F64, bh, G * H);
            if (variant == 2) {
                memset(h, 0, sizeof h);
                memset(c, 0, sizeof c);
            }
            kiln_tensor *tx = upload(dev, dt, 2, xs, x), *th = upload(dev, dt, 2, hs, h);
            kiln_tensor *tc = upload(dev, dt, 2, hs, c), *twi = upload(dev, dt, 2, wis, wi);
            kiln_tensor *twh = upload(dev, dt, 2, whs, wh), *tbi = upload(dev, dt, 1, bs, bi);
            kiln_tensor *tbh = upload(dev, dt, 1, bs, bh);
            const kiln_tensor *hb = variant == 2 ? NULL : th, *cb = variant == 2 ? NULL : tc;
            const kiln_tensor *b1 = variant == 1 ? NULL : tbi, *b2 = variant == 1 ? NULL : tbh;
            kiln_tensor *ho = NULL, *co = NULL;
            if (mode == LSTM)
                ASSERT_OK(kiln_lstm_cell(tx, hb, cb, twi, twh, b1, b2, &ho, &co));
            else if (mode == GRU)
                ASSERT_OK(kiln_gru_cell(tx, hb, twi, twh, b1, b2, &ho));
            else
                ASSERT_OK(kiln_rnn_cell(tx, hb, twi, twh, b1, b2,
                                        mode == RNN_RELU ? KILN_UNARY_RELU : KILN_UNARY_TANH, &ho));
            double *kh = download(ho), *kc = co ? download(co) : NULL;
            for (int64_t b = 0; b < B; b++) {
                double rh[4], rc[4];
                ref_step(mode, in, H, x + b * in, h + b * H, c + b * H, wi, wh,
                         variant == 1 ? NULL : bi, variant == 1 ? NULL : bh, rh, rc);
                ck_assert_double_le(max_rel_err(kh + b * H, rh, H), 2e-6);
                if (kc)
                    ck_assert_double_le(max_rel_err(kc + b * H, rc, H), 2e-6);
            }
            ck_assert_int_eq(kiln_tensor_shape(ho)[0], B);
            ck_assert_int_eq(kiln_tensor_shape(ho)[1], H);
            free(kh);
            free(kc);
            kiln_tensor *all[] = {tx, th, tc, twi, twh, tbi, tbh, ho, co};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++)
                kiln_tensor_release(all[i]);
        }
}
END_TEST

/* ---- gradients against finite differences (f64) ---------------------------------------------- */

/* loss = sum(y ry) + sum(h_n rh) (+ sum(c_n rc)) for the module and inputs. */
static double stack_loss(kiln_module *m, int mode, kiln_tensor *x, const int64_t *len,
                         kiln_tensor *h0, kiln_tensor *c0, kiln_tensor *ry, kiln_tensor *rh,
                         kiln_tensor *rc, kiln_tensor **loss_out)
{
    kiln_tensor *y = NULL, *hn = NULL, *cn = NULL, *t[8] = {0};
    ASSERT_OK(kiln_rnn_forward(m, x, len, h0, c0, &y, &hn, mode == LSTM ? &cn : NULL));
    ASSERT_OK(kiln_mul(y, ry, &t[0]));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, t[0], KILN_ALL_AXES, false, &t[1]));
    ASSERT_OK(kiln_mul(hn, rh, &t[2]));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, t[2], KILN_ALL_AXES, false, &t[3]));
    ASSERT_OK(kiln_add(t[1], t[3], &t[4]));
    kiln_tensor *loss = t[4];
    if (cn) {
        ASSERT_OK(kiln_mul(cn, rc, &t[5]));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, t[5], KILN_ALL_AXES, false, &t[6]));
        ASSERT_OK(kiln_add(t[4], t[6], &t[7]));
        loss = t[7];
    }
    double v = 0;
    ASSERT_OK(kiln_tensor_read(loss, &v, sizeof v));
    if (loss_out)
        *loss_out = kiln_tensor_retain(loss);
    for (int i = 0; i < 8; i++)
        kiln_tensor_release(t[i]);
    kiln_tensor_release(y);
    kiln_tensor_release(hn);
    kiln_tensor_release(cn);
    return v;
}

/* Every element on a real device; on Oclgrind, where a forward under its checkers costs a
 * second, the first element alone (the kernels' bounds, races and uninitialised reads are what
 * it adds; the values are checked element by element on PoCL). */
static int64_t probe_stride(int64_t n)
{
    return simulated(dev) ? n : 1;
}

/* The analytic gradient of each element of t against central differences of stack_loss. */
static void check_grad(const char *what, kiln_tensor *t, kiln_module *m, int mode, kiln_tensor *x,
                       const int64_t *len, kiln_tensor *h0, kiln_tensor *c0, kiln_tensor *ry,
                       kiln_tensor *rh, kiln_tensor *rc)
{
    kiln_tensor *g = kiln_tensor_grad(t);
    ck_assert_msg(g != NULL, "%s: %s has no gradient", mode_names[mode], what);
    double *ga = download(g), *v = download(t);
    int64_t n = kiln_tensor_numel(t);
    bool prev = kiln_set_grad_enabled(false);
    for (int64_t i = 0; i < n; i += probe_stride(n)) {
        const double eps = 1e-6, keep = v[i];
        v[i] = keep + eps;
        ASSERT_OK(kiln_tensor_write(t, v, (size_t)n * sizeof *v));
        double up = stack_loss(m, mode, x, len, h0, c0, ry, rh, rc, NULL);
        v[i] = keep - eps;
        ASSERT_OK(kiln_tensor_write(t, v, (size_t)n * sizeof *v));
        double down = stack_loss(m, mode, x, len, h0, c0, ry, rh, rc, NULL);
        v[i] = keep;
        double num = (up - down) / (2 * eps);
        ck_assert_msg(fabs(num - ga[i]) <= 1e-6 * fmax(1.0, fabs(num)),
                      "%s: d loss / d %s[%ld]: backward %.12g, finite differences %.12g",
                      mode_names[mode], what, (long)i, ga[i], num);
    }
    ASSERT_OK(kiln_tensor_write(t, v, (size_t)n * sizeof *v));
    kiln_set_grad_enabled(prev);
    free(ga);
    free(v);
}

static void gradcheck_stack(int mode, int L, int D, bool bias, bool ragged, bool batch_first)
{
    kiln_dtype dt = KILN_F64;
    int64_t T = 4, B = 3, in = 2, H = 3, LD = (int64_t)L * D;
    stack st = {
        .mode = mode, .L = L, .D = D, .in = in, .H = H, .bias = bias, .batch_first = batch_first};
    kiln_module *m = make_module(dev, dt, &st, 5);
    free_stack(&st);
    int64_t xs[3] = {batch_first ? B : T, batch_first ? T : B, in}, ss[3] = {LD, B, H};
    int64_t ys[3] = {xs[0], xs[1], D * H};
    double buf[256];
    fill_values(dt, buf, T * B * in);
    kiln_tensor *x = upload(dev, dt, 3, xs, buf);
    fill_values(dt, buf, LD * B * H);
    kiln_tensor *h0 = upload(dev, dt, 3, ss, buf);
    fill_values(dt, buf, LD * B * H);
    kiln_tensor *c0 = mode == LSTM ? upload(dev, dt, 3, ss, buf) : NULL;
    fill_values(dt, buf, T * B * D * H);
    kiln_tensor *ry = upload(dev, dt, 3, ys, buf);
    fill_values(dt, buf, LD * B * H);
    kiln_tensor *rh = upload(dev, dt, 3, ss, buf);
    fill_values(dt, buf, LD * B * H);
    kiln_tensor *rc = upload(dev, dt, 3, ss, buf);
    const int64_t lens[3] = {2, 4, 1};
    const int64_t *len = ragged ? lens : NULL;
    ASSERT_OK(kiln_tensor_set_requires_grad(x, true));
    ASSERT_OK(kiln_tensor_set_requires_grad(h0, true));
    if (c0)
        ASSERT_OK(kiln_tensor_set_requires_grad(c0, true));
    kiln_tensor *loss = NULL;
    stack_loss(m, mode, x, len, h0, c0, ry, rh, rc, &loss);
    ASSERT_OK(kiln_backward(loss, NULL, 0));
    kiln_tensor_release(loss);
    check_grad("x", x, m, mode, x, len, h0, c0, ry, rh, rc);
    check_grad("h0", h0, m, mode, x, len, h0, c0, ry, rh, rc);
    if (c0)
        check_grad("c0", c0, m, mode, x, len, h0, c0, ry, rh, rc);
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_module_params(m, NULL, p));
    for (int i = 0; i < kiln_params_count(p); i++)
        check_grad(kiln_params_name(p, i), kiln_params_tensor(p, i), m, mode, x, len, h0, c0, ry,
                   rh, rc);
    kiln_params_free(p);
    kiln_tensor *all[] = {x, h0, c0, ry, rh, rc};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
    kiln_module_free(m);
}

START_TEST(test_gradients)
{
    if (!has_fp64(dev)) {
        test_skip("rnn gradients: %s has no f64", kiln_device_spec(dev));
        return;
    }
    for (int mode = 0; mode < 4; mode++) {
        gradcheck_stack(mode, 1, 1, true, false, false);
        if (simulated(dev))
            continue;
        gradcheck_stack(mode, 2, 2, true, true, mode % 2 == 0);
        if (test_full() || mode == LSTM)
            gradcheck_stack(mode, 1, 2, false, true, true);
    }
}
END_TEST

/* The cells' gradients: two steps of a user's own loop, loss = sum(h2 h2) (+ sum(c2)). */
static double cell_loss(int mode, kiln_tensor *const *ts, bool backward)
{
    kiln_tensor *h1 = NULL, *c1 = NULL, *h2 = NULL, *c2 = NULL, *sq = NULL, *s2 = NULL, *sum = NULL;
    kiln_tensor *c = mode == LSTM ? ts[2] : NULL;
    for (int step = 0; step < 2; step++) {
        kiln_tensor *hin = step ? h1 : ts[1], *cin = step ? c1 : c;
        kiln_tensor **ho = step ? &h2 : &h1, **co = step ? &c2 : &c1;
        if (mode == LSTM)
            ASSERT_OK(kiln_lstm_cell(ts[0], hin, cin, ts[3], ts[4], ts[5], ts[6], ho, co));
        else if (mode == GRU)
            ASSERT_OK(kiln_gru_cell(ts[0], hin, ts[3], ts[4], ts[5], ts[6], ho));
        else
            ASSERT_OK(kiln_rnn_cell(ts[0], hin, ts[3], ts[4], ts[5], ts[6],
                                    mode == RNN_RELU ? KILN_UNARY_RELU : KILN_UNARY_TANH, ho));
    }
    ASSERT_OK(kiln_mul(h2, h2, &sq));
    if (c2)
        ASSERT_OK(kiln_add(sq, c2, &s2));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, c2 ? s2 : sq, KILN_ALL_AXES, false, &sum));
    double v = 0;
    ASSERT_OK(kiln_tensor_read(sum, &v, sizeof v));
    if (backward)
        ASSERT_OK(kiln_backward(sum, NULL, 0));
    kiln_tensor *rel[] = {h1, c1, h2, c2, sq, s2, sum};
    for (size_t k = 0; k < sizeof rel / sizeof *rel; k++)
        kiln_tensor_release(rel[k]);
    return v;
}

START_TEST(test_cell_gradients)
{
    if (!has_fp64(dev)) {
        test_skip("cell gradients: %s has no f64", kiln_device_spec(dev));
        return;
    }
    kiln_dtype dt = KILN_F64;
    int64_t B = 2, in = 3, H = 2;
    const char *names[7] = {"x", "h", "c", "w_ih", "w_hh", "b_ih", "b_hh"};
    for (int mode = simulated(dev) ? LSTM : 0; mode < 4; mode++) {
        int64_t G = gates(mode), xs[2] = {B, in}, hs[2] = {B, H};
        int64_t wis[2] = {G * H, in}, whs[2] = {G * H, H}, bs[1] = {G * H};
        const int64_t *shapes[7] = {xs, hs, hs, wis, whs, bs, bs};
        const int nd[7] = {2, 2, 2, 2, 2, 1, 1};
        kiln_tensor *ts[7];
        double v[32];
        for (int i = 0; i < 7; i++) {
            fill_values(dt, v, numel_of(nd[i], shapes[i]));
            ts[i] = upload(dev, dt, nd[i], shapes[i], v);
            ASSERT_OK(kiln_tensor_set_requires_grad(ts[i], true));
        }
        cell_loss(mode, ts, true);
        bool prev = kiln_set_grad_enabled(false);
        for (int i = 0; i < 7; i++) {
            if (i == 2 && mode != LSTM)
                continue;
            int64_t n = kiln_tensor_numel(ts[i]);
            double *g = download(kiln_tensor_grad(ts[i])), *val = download(ts[i]);
            for (int64_t e = 0; e < n; e += probe_stride(n)) {
                double keep = val[e], diff[2];
                for (int k = 0; k < 2; k++) {
                    val[e] = keep + (k ? -1e-6 : 1e-6);
                    ASSERT_OK(kiln_tensor_write(ts[i], val, (size_t)n * sizeof *val));
                    diff[k] = cell_loss(mode, ts, false);
                }
                val[e] = keep;
                ASSERT_OK(kiln_tensor_write(ts[i], val, (size_t)n * sizeof *val));
                double num = (diff[0] - diff[1]) / 2e-6;
                ck_assert_msg(fabs(num - g[e]) <= 1e-6 * fmax(1.0, fabs(num)),
                              "%s cell: d loss / d %s[%ld]: backward %.12g, differences %.12g",
                              mode_names[mode], names[i], (long)e, g[e], num);
            }
            free(g);
            free(val);
        }
        kiln_set_grad_enabled(prev);
        for (int i = 0; i < 7; i++)
            kiln_tensor_release(ts[i]);
    }
}
END_TEST

/* ---- modules ----------------------------------------------------------------------------------
 */

START_TEST(test_parameter_names)
{
    kiln_rnn_options o = {.num_layers = 2, .bidirectional = true};
    kiln_module *m = NULL;
    ASSERT_OK(kiln_lstm_create(dev, KILN_F32, 10, 20, &o, 1, &m));
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_module_state(m, "lstm", p));
    const char *names[] = {
        "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",         "bias_hh_l0",
        "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
        "weight_ih_l1",         "weight_hh_l1",         "bias_ih_l1",         "bias_hh_l1",
        "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
    const int64_t rows[] = {80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80, 80};
    const int64_t cols[] = {10, 20, 0, 0, 10, 20, 0, 0, 40, 20, 0, 0, 40, 20, 0, 0};
    ck_assert_int_eq(kiln_params_count(p), 16);
    for (int i = 0; i < 16; i++) {
        char want[64];
        snprintf(want, sizeof want, "lstm.%s", names[i]);
        ck_assert_str_eq(kiln_params_name(p, i), want);
        const kiln_tensor *t = kiln_params_tensor(p, i);
        ck_assert_int_eq(kiln_tensor_ndim(t), cols[i] ? 2 : 1);
        ck_assert_int_eq(kiln_tensor_shape(t)[0], rows[i]);
        if (cols[i])
            ck_assert_int_eq(kiln_tensor_shape(t)[1], cols[i]);
        ck_assert(kiln_tensor_requires_grad(t));
        /* U(-1/sqrt(20), 1/sqrt(20)) */
        double *v = download(t), lo = 1, hi = -1;
        for (int64_t k = 0; k < kiln_tensor_numel(t); k++) {
            lo = fmin(lo, v[k]);
            hi = fmax(hi, v[k]);
        }
        ck_assert_double_ge(lo, -1 / sqrt(20.0));
        ck_assert_double_le(hi, 1 / sqrt(20.0));
        ck_assert_double_gt(hi - lo, 0.2); /* spread over the range, not constant */
        free(v);
    }
    kiln_params_free(p);
    kiln_module_free(m);
    /* GRU without bias: weights only, 3 gates */
    o = (kiln_rnn_options){.no_bias = true};
    ASSERT_OK(kiln_gru_create(dev, KILN_F32, 4, 6, &o, 1, &m));
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_module_params(m, NULL, p));
    ck_assert_int_eq(kiln_params_count(p), 2);
    ck_assert_str_eq(kiln_params_name(p, 1), "weight_hh_l0");
    ck_assert_int_eq(kiln_tensor_shape(kiln_params_tensor(p, 1))[0], 18);
    kiln_params_free(p);
    /* the same seed gives the same weights; to() and to_dtype keep working */
    kiln_module *m2 = NULL;
    ASSERT_OK(kiln_gru_create(dev, KILN_F32, 4, 6, &o, 1, &m2));
    kiln_params *p1 = NULL, *p2 = NULL;
    ASSERT_OK(kiln_params_create(&p1));
    ASSERT_OK(kiln_params_create(&p2));
    ASSERT_OK(kiln_module_params(m, NULL, p1));
    ASSERT_OK(kiln_module_params(m2, NULL, p2));
    double *a = download(kiln_params_tensor(p1, 0)), *b = download(kiln_params_tensor(p2, 0));
    ck_assert_mem_eq(a, b, 18 * 4 * sizeof *a); /* weight_ih_l0 [3 * 6, 4] */
    free(a);
    free(b);
    kiln_params_free(p1);
    kiln_params_free(p2);
    if (has_fp64(dev))
        ASSERT_OK(kiln_module_to_dtype(m2, KILN_F64));
    ASSERT_FAILS(kiln_module_to_dtype(m2, KILN_F16), KILN_ERR_UNSUPPORTED, "recurrent");
    kiln_module_free(m);
    kiln_module_free(m2);
}
END_TEST

/* A GRU + linear head learns to output the running mean of its input (a task needing memory):
 * the loss falls by 10x with Adam. */
START_TEST(test_learns)
{
    bool sim = simulated(dev);
    int64_t T = sim ? 4 : 8, B = sim ? 4 : 16, H = 16;
    kiln_module *rnn = NULL, *head = NULL;
    kiln_rnn_options o = {.batch_first = true};
    ASSERT_OK(kiln_gru_create(dev, KILN_F32, 1, H, &o, 3, &rnn));
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, H, 1, true, KILN_INIT_DEFAULT, 4, &head));
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_module_params(rnn, "rnn", p));
    ASSERT_OK(kiln_module_params(head, "head", p));
    kiln_optimizer *opt = NULL;
    ASSERT_OK(kiln_adam_create(p, 0.01, 0.9, 0.999, 1e-8, 0.0, &opt));
    double x[8 * 16], target[8 * 16], first = 0, last = 0;
    int steps = sim ? 6 : 150;
    for (int step = 0; step < steps; step++) {
        for (int64_t b = 0; b < B && (step == 0 || !sim); b++) { /* Oclgrind: one batch */
            double sum = 0;
            for (int64_t t = 0; t < T; t++) {
                x[b * T + t] = rnd() * 2 - 1;
                sum += x[b * T + t];
                target[b * T + t] = sum / (double)(t + 1);
            }
        }
        kiln_scope *sc = NULL;
        ASSERT_OK(kiln_scope_begin(&sc));
        int64_t xs[3] = {B, T, 1};
        kiln_tensor *tx = upload(dev, KILN_F32, 3, xs, x),
                    *tt = upload(dev, KILN_F32, 3, xs, target);
        kiln_tensor *y = NULL, *out = NULL, *loss = NULL;
        ASSERT_OK(kiln_module_forward(rnn, tx, &y));
        ASSERT_OK(kiln_module_forward(head, y, &out));
        ASSERT_OK(kiln_mse_loss(out, tt, &loss, NULL));
        ASSERT_OK(kiln_params_zero_grad(p));
        ASSERT_OK(kiln_backward(loss, NULL, 0));
        ASSERT_OK(kiln_optimizer_step(opt));
        float l = 0;
        ASSERT_OK(kiln_tensor_read(loss, &l, sizeof l));
        if (step == 0)
            first = l;
        last = l;
        kiln_scope_end(sc);
    }
    ck_assert_msg(last < first / (sim ? 1.5 : 10), "loss %g -> %g", first, last);
    kiln_optimizer_free(opt);
    kiln_params_free(p);
    kiln_module_free(rnn);
    kiln_module_free(head);
}
END_TEST

/* Dropout between layers: a new mask each training call, none in evaluation. */
START_TEST(test_dropout_between_layers)
{
    kiln_rnn_options o = {.num_layers = 2, .dropout = 0.5};
    kiln_module *m = NULL;
    ASSERT_OK(kiln_rnn_create(dev, KILN_F32, 3, 8, &o, 9, &m));
    int64_t xs[3] = {4, 2, 3};
    double v[24];
    fill_values(KILN_F64, v, 24);
    kiln_tensor *x = upload(dev, KILN_F32, 3, xs, v), *y[4] = {0};
    for (int i = 0; i < 4; i++) {
        kiln_module_set_training(m, i < 2);
        ASSERT_OK(kiln_module_forward(m, x, &y[i]));
    }
    double *a = download(y[0]), *b = download(y[1]), *c = download(y[2]), *d = download(y[3]);
    ck_assert(memcmp(a, b, 64 * sizeof *a) != 0); /* two training calls: two masks */
    ck_assert_mem_eq(c, d, 64 * sizeof *c);       /* evaluation: deterministic */
    ck_assert(memcmp(a, c, 64 * sizeof *a) != 0); /* and different from training */
    free(a);
    free(b);
    free(c);
    free(d);
    for (int i = 0; i < 4; i++)
        kiln_tensor_release(y[i]);
    kiln_tensor_release(x);
    kiln_module_free(m);
}
END_TEST

START_TEST(test_mask_and_masked_mean)
{
    const int64_t len[3] = {2, 0, 3};
    kiln_tensor *m = NULL, *mb = NULL;
    ASSERT_OK(kiln_sequence_mask(dev, KILN_F32, len, 3, 3, false, &m));
    ASSERT_OK(kiln_sequence_mask(dev, KILN_F32, len, 3, 3, true, &mb));
    double *v = download(m), *vb = download(mb);
    for (int t = 0; t < 3; t++)
        for (int b = 0; b < 3; b++) {
            ck_assert_double_eq(v[t * 3 + b], t < len[b] ? 1 : 0);
            ck_assert_double_eq(vb[b * 3 + t], t < len[b] ? 1 : 0);
        }
    free(v);
    free(vb);
    /* x [T=3, B=3, 2]; mask [3, 3, 1] broadcast: mean of the 2 (2 + 0 + 3) = 10 kept values */
    double x[18], want = 0;
    fill_values(KILN_F64, x, 18);
    for (int t = 0; t < 3; t++)
        for (int b = 0; b < 3; b++)
            for (int k = 0; k < 2; k++)
                want += t < len[b] ? x[(t * 3 + b) * 2 + k] / 10 : 0;
    int64_t xs[3] = {3, 3, 2}, ms[3] = {3, 3, 1};
    kiln_tensor *tx = upload(dev, KILN_F32, 3, xs, x), *m3 = NULL, *mean = NULL;
    ASSERT_OK(kiln_tensor_reshape(m, 3, ms, &m3));
    ASSERT_OK(kiln_tensor_set_requires_grad(tx, true));
    ASSERT_OK(kiln_masked_mean(tx, m3, &mean));
    float got = 0;
    ASSERT_OK(kiln_tensor_read(mean, &got, sizeof got));
    ck_assert_double_le(fabs(got - want), 1e-6);
    ASSERT_OK(kiln_backward(mean, NULL, 0));
    double *g = download(kiln_tensor_grad(tx));
    for (int t = 0; t < 3; t++)
        for (int b = 0; b < 3; b++)
            ck_assert_double_eq_tol(g[(t * 3 + b) * 2], t < len[b] ? 0.1 : 0, 1e-7);
    free(g);
    /* errors */
    kiln_tensor *bad = NULL;
    ASSERT_FAILS(kiln_masked_mean(m3, tx, &bad), KILN_ERR_SHAPE_MISMATCH, "kiln_masked_mean");
    const int64_t long_len[1] = {4};
    ASSERT_FAILS(kiln_sequence_mask(dev, KILN_F32, long_len, 1, 3, false, &bad),
                 KILN_ERR_INVALID_ARGUMENT, "lengths[0] is 4");
    ASSERT_FAILS(kiln_sequence_mask(dev, KILN_I32, len, 3, 3, false, &bad), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_sequence_mask");
    ASSERT_FAILS(kiln_sequence_mask(dev, KILN_F32, NULL, 3, 3, false, &bad),
                 KILN_ERR_INVALID_ARGUMENT, "lengths is NULL");
    ck_assert_ptr_null(bad);
    kiln_tensor *all[] = {m, mb, tx, m3, mean};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
}
END_TEST

/* ---- bad arguments ----------------------------------------------------------------------------
 */

START_TEST(test_errors)
{
    kiln_module *m = NULL, *lin = NULL;
    ASSERT_FAILS(kiln_lstm_create(NULL, KILN_F32, 2, 3, NULL, 0, &m), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_lstm_create: dev is NULL");
    ASSERT_FAILS(kiln_gru_create(dev, KILN_F32, 0, 3, NULL, 0, &m), KILN_ERR_INVALID_ARGUMENT,
                 "input_size is 0");
    ASSERT_FAILS(kiln_rnn_create(dev, KILN_I32, 2, 3, NULL, 0, &m), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_rnn_create");
    ASSERT_FAILS(kiln_rnn_create(dev, KILN_F16, 2, 3, NULL, 0, &m), KILN_ERR_UNSUPPORTED,
                 "f32 or f64");
    kiln_rnn_options o = {.dropout = 1.0};
    ASSERT_FAILS(kiln_lstm_create(dev, KILN_F32, 2, 3, &o, 0, &m), KILN_ERR_INVALID_ARGUMENT,
                 "dropout is 1");
    o = (kiln_rnn_options){.relu = true};
    ASSERT_FAILS(kiln_gru_create(dev, KILN_F32, 2, 3, &o, 0, &m), KILN_ERR_INVALID_ARGUMENT,
                 "relu");
    o = (kiln_rnn_options){.num_layers = -1};
    ASSERT_FAILS(kiln_gru_create(dev, KILN_F32, 2, 3, &o, 0, &m), KILN_ERR_INVALID_ARGUMENT,
                 "num_layers is -1");
    ck_assert_ptr_null(m);
    ASSERT_OK(kiln_lstm_create(dev, KILN_F32, 2, 3, NULL, 0, &m));
    int64_t xs[3] = {4, 2, 2}, bad_in[3] = {4, 2, 5}, st[3] = {1, 2, 3}, bad_st[3] = {2, 2, 3};
    double v[64] = {0};
    kiln_tensor *x = upload(dev, KILN_F32, 3, xs, v), *xw = upload(dev, KILN_F32, 3, bad_in, v);
    kiln_tensor *h0 = upload(dev, KILN_F32, 3, st, v), *hb = upload(dev, KILN_F32, 3, bad_st, v);
    kiln_tensor *x64 = has_fp64(dev) ? upload(dev, KILN_F64, 3, xs, v) : NULL;
    kiln_tensor *y = NULL, *hn = NULL, *cn = NULL;
    ASSERT_FAILS(kiln_rnn_forward(m, x, NULL, NULL, NULL, NULL, NULL, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "y is NULL");
    ASSERT_FAILS(kiln_rnn_forward(NULL, x, NULL, NULL, NULL, &y, NULL, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "m is NULL");
    ASSERT_FAILS(kiln_rnn_forward(m, NULL, NULL, NULL, NULL, &y, NULL, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "x");
    ASSERT_FAILS(kiln_rnn_forward(m, xw, NULL, NULL, NULL, &y, NULL, NULL), KILN_ERR_SHAPE_MISMATCH,
                 "input size 2");
    ASSERT_FAILS(kiln_rnn_forward(m, x, NULL, hb, NULL, &y, NULL, NULL), KILN_ERR_SHAPE_MISMATCH,
                 "h0 has shape [2, 2, 3]");
    const int64_t zero_len[2] = {0, 4}, long_len[2] = {5, 1};
    ASSERT_FAILS(kiln_rnn_forward(m, x, zero_len, NULL, NULL, &y, NULL, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "lengths[0] is 0");
    ASSERT_FAILS(kiln_rnn_forward(m, x, long_len, NULL, NULL, &y, NULL, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "lengths[0] is 5; each must be in 1..4");
    if (x64)
        ASSERT_FAILS(kiln_rnn_forward(m, x64, NULL, NULL, NULL, &y, NULL, NULL),
                     KILN_ERR_DTYPE_MISMATCH, "x is f64 but the layer's weights are f32");
    ck_assert_ptr_null(y);
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 2, 2, true, KILN_INIT_DEFAULT, 0, &lin));
    ASSERT_FAILS(kiln_rnn_forward(lin, x, NULL, NULL, NULL, &y, NULL, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "not a recurrent layer");
    kiln_module *g = NULL;
    ASSERT_OK(kiln_gru_create(dev, KILN_F32, 2, 3, NULL, 0, &g));
    ASSERT_FAILS(kiln_rnn_forward(g, x, NULL, h0, h0, &y, &hn, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "c0 is for an LSTM's cell state");
    ASSERT_FAILS(kiln_rnn_forward(g, x, NULL, h0, NULL, &y, &hn, &cn), KILN_ERR_INVALID_ARGUMENT,
                 "c_n is for an LSTM's cell state");
    ck_assert_ptr_null(hn);
    /* another device */
    kiln_device *other = test_other_device(dev, false);
    if (other) {
        kiln_tensor *xo = NULL;
        ASSERT_OK(kiln_tensor_to(x, other, &xo));
        ASSERT_FAILS(kiln_rnn_forward(m, xo, NULL, NULL, NULL, &y, NULL, NULL),
                     KILN_ERR_DEVICE_MISMATCH, "kiln_rnn_forward");
        kiln_tensor_release(xo);
    }
    /* cells */
    int64_t cx[2] = {2, 2}, wi[2] = {12, 2}, wh[2] = {12, 3}, wbad[2] = {12, 4}, bb[1] = {12};
    kiln_tensor *tx = upload(dev, KILN_F32, 2, cx, v), *twi = upload(dev, KILN_F32, 2, wi, v);
    kiln_tensor *twh = upload(dev, KILN_F32, 2, wh, v), *twb = upload(dev, KILN_F32, 2, wbad, v);
    kiln_tensor *tb = upload(dev, KILN_F32, 1, bb, v), *ho = NULL, *co = NULL;
    ASSERT_FAILS(kiln_lstm_cell(tx, NULL, NULL, twi, twh, tb, NULL, &ho, &co),
                 KILN_ERR_INVALID_ARGUMENT, "b_hh is NULL but b_ih is not");
    ASSERT_FAILS(kiln_lstm_cell(tx, NULL, NULL, twi, twb, NULL, NULL, &ho, &co),
                 KILN_ERR_SHAPE_MISMATCH, "w_ih has shape [12, 2]");
    ASSERT_FAILS(kiln_gru_cell(tx, NULL, twi, twh, NULL, NULL, &ho), KILN_ERR_SHAPE_MISMATCH,
                 "3 gates");
    ASSERT_FAILS(kiln_lstm_cell(tx, NULL, NULL, twi, twh, NULL, NULL, &ho, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "c_out is NULL");
    ASSERT_FAILS(kiln_rnn_cell(tx, NULL, twi, twh, NULL, NULL, KILN_UNARY_EXP, &ho),
                 KILN_ERR_INVALID_ARGUMENT, "nonlinearity");
    ASSERT_FAILS(kiln_lstm_cell(tx, NULL, NULL, NULL, twh, NULL, NULL, &ho, &co),
                 KILN_ERR_INVALID_ARGUMENT, "w_ih");
    ck_assert_ptr_null(ho);
    ck_assert_ptr_null(co);
    kiln_tensor *all[] = {x, xw, h0, hb, x64, tx, twi, twh, twb, tb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
    kiln_module_free(m);
    kiln_module_free(g);
    kiln_module_free(lin);
}
END_TEST

/* Every host allocation of a forward and backward failing in turn: a clean failure, nothing
 * leaked (the live counts come back), and the same call then works. */
START_TEST(test_failed_allocations)
{
    kiln_rnn_options o = {.num_layers = 2, .bidirectional = true};
    kiln_module *m = NULL;
    ASSERT_OK(kiln_lstm_create(dev, KILN_F32, 2, 3, &o, 1, &m));
    int64_t xs[3] = {3, 2, 2};
    double v[12];
    fill_values(KILN_F64, v, 12);
    kiln_tensor *x = upload(dev, KILN_F32, 3, xs, v);
    const int64_t len[2] = {3, 2};
    kiln_live_objects before, now;
    ASSERT_OK(kiln_live_objects_get(&before));
    int failures = 0;
    for (long n = 1; n < 400; n++) {
        kiln_tensor *y = NULL, *hn = NULL, *cn = NULL, *s = NULL;
        kiln__alloc_fail_at(n);
        kiln_status st = kiln_rnn_forward(m, x, len, NULL, NULL, &y, &hn, &cn);
        if (st == KILN_OK)
            st = kiln_reduce(KILN_REDUCE_SUM, y, KILN_ALL_AXES, false, &s);
        if (st == KILN_OK)
            st = kiln_backward(s, NULL, 0);
        kiln__alloc_fail_at(-1);
        kiln_tensor_release(y);
        kiln_tensor_release(hn);
        kiln_tensor_release(cn);
        kiln_tensor_release(s);
        if (st == KILN_OK)
            break;
        ck_assert_int_eq(st, KILN_ERR_OUT_OF_MEMORY);
        failures++;
        ASSERT_OK(kiln_live_objects_get(&now));
        ck_assert_int_eq(now.tensors, before.tensors);
    }
    ck_assert_int_ge(failures, 3); /* the failures reached the recurrent code's allocations */
    kiln_tensor_release(x);
    kiln_module_free(m);
}
END_TEST

Suite *KILN_TEST_SUITE(void)
{
    Suite *s = suite_create("rnn");
    /* one case each, so that CK_RUN_CASE can pick one */
    const struct {
        const char *name;
        const TTest *test;
    } cases[] = {
        {"cells", test_cells_against_reference},
        {"layers", test_layers_against_reference},
        {"gradients", test_gradients},
        {"cell-gradients", test_cell_gradients},
        {"parameter-names", test_parameter_names},
        {"learns", test_learns},
        {"dropout", test_dropout_between_layers},
        {"mask", test_mask_and_masked_mean},
        {"errors", test_errors},
        {"failed-allocations", test_failed_allocations},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return s;
}
