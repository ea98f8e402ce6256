/* test-optim.c - parameter lists (kiln_params) and the optimizers over them: SGD (momentum,
 * weight decay), Adam (L2 decay) and AdamW (decoupled decay) against a plain-C reference of
 * PyTorch's update formulas in double, parameters on two devices, parameters without a gradient
 * skipped, zero_grad, gradient clipping, a training loop, checkpoint and resume bit for bit,
 * errors, and out of memory at creation and at the first step's state allocation; the
 * learning-rate schedules against PyTorch's formulas, and their state through a checkpoint. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "lib/alloc.h"
#include "lib/clcall.h"
#include "testutil.h"

static kiln_device *dev;

static void setup(void)
{
    setup_devices();
    dev = test_device();
}

static void teardown(void)
{
    kiln__cl_reset();
    kiln__alloc_fail_at(-1);
    teardown_devices();
}

static uint64_t live_bytes(kiln_device *d)
{
    kiln_memory_stats st;
    ASSERT_OK(kiln_device_memory_stats(d, &st));
    return st.allocated_bytes;
}

static char *tmp_path(const char *what)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/kiln-optim-test.%ld.%s.safetensors", (long)getpid(), what);
    return path;
}

/* A leaf of dtype dt holding v, requiring grad when asked. */
static kiln_tensor *leaf(kiln_device *d, kiln_dtype dt, int ndim, const int64_t *shape,
                         const double *v, bool grad)
{
    kiln_tensor *t = upload(d, dt, ndim, shape, v);
    if (grad)
        ASSERT_OK(kiln_tensor_set_requires_grad(t, true));
    return t;
}

/* Give the leaf p the gradient w exactly: the backward of p * 1 with upstream gradient w (no
 * reduction: those are slow on Oclgrind). */
static void give_grad(kiln_tensor *p, const double *w)
{
    kiln_tensor *wt = upload(kiln_tensor_device(p), kiln_tensor_dtype(p), kiln_tensor_ndim(p),
                             kiln_tensor_shape(p), w);
    kiln_tensor *y = NULL;
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, p, 1, &y));
    ASSERT_OK(kiln_backward(y, wt, 0));
    kiln_tensor_release(y);
    kiln_tensor_release(wt);
}

/* ---- the parameter list ---------------------------------------------------------------------- */

START_TEST(test_params_list)
{
    int64_t n3 = 3, n2[2] = {2, 2};
    double va[3] = {1, 2, 3}, vb[4] = {-1, 0.5, 0.25, 8};
    kiln_tensor *a = upload(dev, KILN_F32, 1, &n3, va), *b = upload(dev, KILN_F64, 2, n2, vb);
    kiln_params *p = NULL;
    ASSERT_FAILS(kiln_params_create(NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_OK(kiln_params_create(&p));
    ck_assert_int_eq(kiln_params_count(p), 0);
    ck_assert_int_eq(kiln_params_count(NULL), 0);
    ASSERT_FAILS(kiln_params_save(p, tmp_path("empty")), KILN_ERR_INVALID_ARGUMENT, "empty");
    ASSERT_FAILS(kiln_params_load(p, tmp_path("empty")), KILN_ERR_INVALID_ARGUMENT, "empty");
    ASSERT_FAILS(kiln_params_save(NULL, tmp_path("empty")), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_params_add(NULL, "a", a), KILN_ERR_INVALID_ARGUMENT, "the list is NULL");
    ASSERT_FAILS(kiln_params_add(p, NULL, a), KILN_ERR_INVALID_ARGUMENT, "name is NULL");
    ASSERT_FAILS(kiln_params_add(p, "", a), KILN_ERR_INVALID_ARGUMENT, "empty");
    ASSERT_FAILS(kiln_params_add(p, "a", NULL), KILN_ERR_INVALID_ARGUMENT, "kiln_params_add");
    ck_assert_int_eq(kiln_params_count(p), 0);
    ASSERT_OK(kiln_params_add(p, "layer.a", a));
    ASSERT_OK(kiln_params_add(p, "layer.b", b));
    ASSERT_FAILS(kiln_params_add(p, "layer.a", b), KILN_ERR_INVALID_ARGUMENT,
                 "already holds a tensor named 'layer.a'");
    ck_assert_int_eq(kiln_params_count(p), 2);
    ck_assert_str_eq(kiln_params_name(p, 0), "layer.a");
    ck_assert_str_eq(kiln_params_name(p, 1), "layer.b");
    ck_assert_ptr_eq(kiln_params_tensor(p, 1), b);
    ck_assert_ptr_eq(kiln_params_find(p, "layer.a"), a);
    ck_assert_ptr_null(kiln_params_find(p, "layer"));
    ck_assert_ptr_null(kiln_params_find(p, NULL));
    ck_assert_ptr_null(kiln_params_find(NULL, "layer.a"));
    ck_assert_ptr_null(kiln_params_name(p, 2));
    ck_assert_ptr_null(kiln_params_name(p, -1));
    ck_assert_ptr_null(kiln_params_tensor(p, 2));
    ck_assert_ptr_null(kiln_params_tensor(NULL, 0));

    /* The list holds its own references: the caller's can go. */
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    a = kiln_params_tensor(p, 0);
    b = kiln_params_tensor(p, 1);

    /* Save, then load into a second list of zero tensors under the same names. */
    char *path = tmp_path("list");
    ASSERT_OK(kiln_params_save(p, path));
    kiln_params *q = NULL;
    kiln_tensor *za = NULL, *zb = NULL;
    ASSERT_OK(kiln_params_create(&q));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F64, 2, n2, &zb));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &n3, &za));
    ASSERT_OK(kiln_params_add(q, "layer.b", zb)); /* another order than the file's */
    ASSERT_OK(kiln_params_add(q, "layer.a", za));
    ASSERT_OK(kiln_params_load(q, path));
    void *ha = read_host(a), *hza = read_host(za), *hb = read_host(b), *hzb = read_host(zb);
    ck_assert(memcmp(ha, hza, kiln_tensor_nbytes(a)) == 0);
    ck_assert(memcmp(hb, hzb, kiln_tensor_nbytes(b)) == 0);
    free(ha);
    free(hza);
    free(hb);
    free(hzb);
    /* a name the file lacks: nothing is written */
    kiln_tensor *zc = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &n3, &zc));
    ASSERT_OK(kiln_params_add(q, "layer.c", zc));
    ASSERT_OK(kiln_fill(za, 7));
    ck_assert_int_ne(kiln_params_load(q, path), KILN_OK);
    ASSERT_ERROR_HAS("layer.c");
    double *got = download(za);
    ck_assert(got[0] == 7 && got[2] == 7);
    free(got);
    kiln_tensor_release(za);
    kiln_tensor_release(zb);
    kiln_tensor_release(zc);
    kiln_params_free(q);
    remove(path);

    /* Out of host memory at every allocation of an add (the name, the arrays' growth): the
     * status says so, the list is unchanged, nothing leaks (LeakSanitizer at exit). */
    kiln_params *r = NULL;
    ASSERT_OK(kiln_params_create(&r));
    int failures = 0;
    for (int i = 0; i < 20; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        for (long at = 1;; at++) {
            kiln__alloc_fail_at(at);
            kiln_status s = kiln_params_add(r, name, a);
            long count = kiln__alloc_count();
            kiln__alloc_fail_at(-1);
            if (s == KILN_OK) {
                ck_assert_int_lt(count, at);
                break;
            }
            failures++;
            ck_assert_int_eq(s, KILN_ERR_OUT_OF_MEMORY);
            ASSERT_ERROR_HAS("kiln_params_add");
            ck_assert_int_eq(kiln_params_count(r), i);
            ck_assert_ptr_null(kiln_params_find(r, name));
        }
        ck_assert_int_eq(kiln_params_count(r), i + 1);
        ck_assert_ptr_eq(kiln_params_tensor(r, i), a);
    }
    ck_assert_int_ge(failures, 20 + 2); /* every name, and the growths at 8 and 16 */
    kiln__alloc_fail_at(1);
    ck_assert_int_eq(kiln_params_create(&q), KILN_ERR_OUT_OF_MEMORY);
    kiln__alloc_fail_at(-1);
    ck_assert_ptr_null(q);
    kiln_params_free(r);
    kiln_params_free(p);
    kiln_params_free(NULL);
}
END_TEST

/* ---- the reference: PyTorch's update formulas in double ------------------------------------- */

typedef enum kind { K_SGD, K_ADAM, K_ADAMW } kind;

typedef struct config {
    kind k;
    double lr, momentum, b1, b2, eps, wd;
    int twin; /* a config differing in one feature, which must give other numbers; -1: none */
    const char *what;
} config;

static const config configs[] = {
    {K_SGD, 0.1, 0, 0, 0, 0, 0, 1, "SGD"},
    {K_SGD, 0.1, 0.9, 0, 0, 0, 0, 0, "SGD momentum"},
    {K_SGD, 0.1, 0.9, 0, 0, 0, 0.05, 1, "SGD momentum + weight decay"},
    {K_ADAM, 0.05, 0, 0.9, 0.999, 1e-8, 0, -1, "Adam"},
    {K_ADAM, 0.05, 0, 0.8, 0.99, 1e-3, 0.2, 3, "Adam + L2 decay"},
    {K_ADAMW, 0.05, 0, 0.8, 0.99, 1e-3, 0.2, 4, "AdamW"},
};

typedef struct ref_param {
    int64_t n;
    double p[8], buf[8], sq[8];
    int64_t t;
} ref_param;

static void ref_step(const config *c, ref_param *r, const double *g)
{
    r->t++;
    for (int64_t i = 0; i < r->n; i++) {
        double p = r->p[i], gi = g[i];
        if (c->k == K_SGD) {
            double d = gi + c->wd * p;
            if (c->momentum != 0) {
                r->buf[i] = r->t == 1 ? d : c->momentum * r->buf[i] + d;
                d = r->buf[i];
            }
            r->p[i] = p - c->lr * d;
            continue;
        }
        if (c->k == K_ADAMW)
            p *= 1 - c->lr * c->wd;
        else
            gi += c->wd * p;
        r->buf[i] = c->b1 * r->buf[i] + (1 - c->b1) * gi;
        r->sq[i] = c->b2 * r->sq[i] + (1 - c->b2) * gi * gi;
        double bc1 = 1 - pow(c->b1, (double)r->t), bc2 = 1 - pow(c->b2, (double)r->t);
        r->p[i] = p - c->lr / bc1 * r->buf[i] / (sqrt(r->sq[i]) / sqrt(bc2) + c->eps);
    }
}

static kiln_status create(const config *c, const kiln_params *p, kiln_optimizer **out)
{
    switch (c->k) {
    case K_SGD:
        return kiln_sgd_create(p, c->lr, c->momentum, c->wd, out);
    case K_ADAM:
        return kiln_adam_create(p, c->lr, c->b1, c->b2, c->eps, c->wd, out);
    default:
        return kiln_adamw_create(p, c->lr, c->b1, c->b2, c->eps, c->wd, out);
    }
}

enum { NSTEPS = 5, NP = 4 };

/* The gradient of parameter j at step s, or NULL when it gets none then: B skips step 1,
 * C never gets one (it requires grad), D does not require grad. */
static const double *grad_at(double g[NSTEPS][NP][8], int s, int j)
{
    if (j >= 2 || (j == 1 && s == 1))
        return NULL;
    return g[s][j];
}

/* Run config c over NSTEPS steps of four parameters (A on dev, B on other, C and D) and compare
 * with the reference; returns the largest difference between c's reference and its twin's. */
static double run_config(const config *c, kiln_dtype dt, kiln_device *other, double tol)
{
    static const int64_t sizes[NP] = {5, 6, 4, 3};
    static const char *const names[NP] = {"A", "B", "C", "D"};
    double g[NSTEPS][NP][8];
    ref_param ref[NP] = {{0}}, twin[NP] = {{0}};
    kiln_tensor *t[NP];
    kiln_params *list = NULL;
    ASSERT_OK(kiln_params_create(&list));
    for (int j = 0; j < NP; j++) {
        ref[j].n = sizes[j];
        fill_values(KILN_F32, ref[j].p, sizes[j]);
        twin[j] = ref[j];
        int64_t shape[2] = {2, 3};
        bool two_d = j == 1;
        t[j] = leaf(j == 1 ? other : dev, dt, two_d ? 2 : 1, two_d ? shape : &sizes[j], ref[j].p,
                    j < 3);
        ASSERT_OK(kiln_params_add(list, names[j], t[j]));
        for (int s = 0; s < NSTEPS; s++)
            fill_values(KILN_F32, g[s][j], sizes[j]);
    }
    kiln_optimizer *opt = NULL;
    ASSERT_OK(create(c, list, &opt));
    kiln_params_free(list); /* the optimizer keeps its own references */
    for (int s = 0; s < NSTEPS; s++) {
        ASSERT_OK(kiln_optimizer_zero_grad(opt));
        for (int j = 0; j < NP; j++) {
            const double *gj = grad_at(g, s, j);
            if (!gj)
                continue;
            give_grad(t[j], gj);
            ref_step(c, &ref[j], gj);
            if (c->twin >= 0)
                ref_step(&configs[c->twin], &twin[j], gj);
        }
        ASSERT_OK(kiln_optimizer_step(opt));
    }
    double spread = 0;
    for (int j = 0; j < NP; j++) {
        double *got = download(t[j]);
        for (int64_t i = 0; i < sizes[j]; i++) {
            ck_assert_msg(fabs(got[i] - ref[j].p[i]) <= tol * fmax(1, fabs(ref[j].p[i])),
                          "%s %s: %s[%lld] is %.9g, expected %.9g", c->what, kiln_dtype_name(dt),
                          names[j], (long long)i, got[i], ref[j].p[i]);
            spread = fmax(spread, fabs(ref[j].p[i] - twin[j].p[i]));
        }
        free(got);
    }
    /* The state, by name: Adam's moments and per-parameter step counts (C and D: step 0). */
    kiln_params *state = NULL;
    ASSERT_OK(kiln_params_create(&state));
    ASSERT_OK(kiln_optimizer_state(opt, state));
    if (c->k == K_SGD && c->momentum == 0) {
        ck_assert_int_eq(kiln_params_count(state), 0);
    } else if (c->k == K_SGD) {
        ck_assert_int_eq(kiln_params_count(state), NP);
        ck_assert_str_eq(kiln_params_name(state, 0), "A.momentum_buffer");
        double *buf = download(kiln_params_find(state, "B.momentum_buffer"));
        for (int64_t i = 0; i < sizes[1]; i++)
            ck_assert(fabs(buf[i] - ref[1].buf[i]) <= tol * fmax(1, fabs(ref[1].buf[i])));
        free(buf);
    } else {
        ck_assert_int_eq(kiln_params_count(state), 3 * NP);
        static const int64_t steps[NP] = {NSTEPS, NSTEPS - 1, 0, 0};
        for (int j = 0; j < NP; j++) {
            char name[32];
            snprintf(name, sizeof name, "%s.step", names[j]);
            int64_t step = -1;
            ASSERT_OK(kiln_tensor_item_i64(kiln_params_find(state, name), &step));
            ck_assert_int_eq(step, steps[j]);
            ck_assert_int_eq(kiln_tensor_dtype(kiln_params_find(state, name)), KILN_I64);
        }
        double *m = download(kiln_params_find(state, "A.exp_avg"));
        double *v = download(kiln_params_find(state, "A.exp_avg_sq"));
        for (int64_t i = 0; i < sizes[0]; i++) {
            ck_assert(fabs(m[i] - ref[0].buf[i]) <= tol);
            ck_assert(fabs(v[i] - ref[0].sq[i]) <= tol);
        }
        free(m);
        free(v);
        ck_assert_ptr_eq(kiln_tensor_device(kiln_params_find(state, "B.exp_avg")), other);
    }
    kiln_params_free(state);
    kiln_optimizer_free(opt);
    for (int j = 0; j < NP; j++)
        kiln_tensor_release(t[j]);
    return spread;
}

static kiln_device *second_device(void)
{
    kiln_device *other = test_other_device(dev, true);
    if (!other)
        other = test_other_device(dev, false);
    if (!other) {
        test_skip("optim: one device only, every parameter on %s", kiln_device_spec(dev));
        other = dev;
    }
    return other;
}

START_TEST(test_reference)
{
    kiln_device *other = second_device();
    int nconfigs = (int)(sizeof configs / sizeof configs[0]);
    for (int i = 0; i < nconfigs; i++) {
        double tol = 2e-5, spread = run_config(&configs[i], KILN_F32, other, tol);
        /* momentum, weight decay and AdamW's decoupling each change the numbers */
        if (configs[i].twin >= 0 && configs[i].twin != i)
            ck_assert_msg(spread > 100 * tol, "%s vs %s: only %g apart", configs[i].what,
                          configs[configs[i].twin].what, spread);
        if (has_fp64(dev) && has_fp64(other))
            run_config(&configs[i], KILN_F64, other, 1e-12);
    }
    if (!has_fp64(dev) || !has_fp64(other))
        test_skip("optim: no fp64 on %s or %s: f32 only", kiln_device_spec(dev),
                  kiln_device_spec(other));
}
END_TEST

/* ---- zero_grad, clipping ------------------------------------------------------------------- */

START_TEST(test_zero_grad)
{
    int64_t n = 4;
    double v[4] = {1, 2, 3, 4}, w[4] = {0.5, -1, 2, 0.25};
    kiln_tensor *a = leaf(dev, KILN_F32, 1, &n, v, true), *b = leaf(dev, KILN_F32, 1, &n, v, true);
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_params_add(p, "a", a));
    ASSERT_OK(kiln_params_add(p, "b", b));
    kiln_optimizer *opt = NULL;
    ASSERT_OK(kiln_sgd_create(p, 0.5, 0, 0, &opt));
    give_grad(a, w);
    give_grad(b, w);
    ck_assert_ptr_nonnull(kiln_tensor_grad(a));
    ASSERT_OK(kiln_optimizer_zero_grad(opt));
    ck_assert_ptr_null(kiln_tensor_grad(a));
    ck_assert_ptr_null(kiln_tensor_grad(b));
    /* a step without gradients changes nothing */
    ASSERT_OK(kiln_optimizer_step(opt));
    double *got = download(a);
    ck_assert(memcmp(got, v, sizeof v) == 0);
    free(got);
    /* gradients accumulate until zeroed: two backwards, one step */
    give_grad(a, w);
    give_grad(a, w);
    ASSERT_OK(kiln_optimizer_step(opt));
    got = download(a);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq(got[i], v[i] - 0.5 * 2 * w[i]);
    free(got);
    give_grad(b, w);
    ASSERT_OK(kiln_params_zero_grad(p));
    ck_assert_ptr_null(kiln_tensor_grad(a));
    ck_assert_ptr_null(kiln_tensor_grad(b));
    kiln_optimizer_free(opt);
    kiln_params_free(p);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

START_TEST(test_clip_grad_norm)
{
    kiln_device *other = second_device();
    int64_t na = 5, nb = 3, nc = 2;
    double va[5], vb[3], vc[2], wa[5], wb[3];
    fill_values(KILN_F32, va, 5);
    fill_values(KILN_F32, vb, 3);
    fill_values(KILN_F32, vc, 2);
    kiln_tensor *a = leaf(dev, KILN_F32, 1, &na, va, true);
    kiln_tensor *b = leaf(other, KILN_F32, 1, &nb, vb, true);
    kiln_tensor *c = leaf(dev, KILN_F32, 1, &nc, vc, true); /* no gradient: counts as zero */
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_params_add(p, "a", a));
    ASSERT_OK(kiln_params_add(p, "b", b));
    ASSERT_OK(kiln_params_add(p, "c", c));
    for (int round = 0; round < 3; round++) {
        fill_values(KILN_F32, wa, 5);
        fill_values(KILN_F32, wb, 3);
        ASSERT_OK(kiln_params_zero_grad(p));
        give_grad(a, wa);
        give_grad(b, wb);
        double ref = 0;
        for (int i = 0; i < 5; i++)
            ref += wa[i] * wa[i];
        for (int i = 0; i < 3; i++)
            ref += wb[i] * wb[i];
        ref = sqrt(ref);
        /* round 0: above the norm (unchanged); 1: half of it; 2: NULL total_norm, a quarter */
        double max_norm = round == 0 ? 2 * ref : round == 1 ? ref / 2 : ref / 4, total = -1;
        ASSERT_OK(kiln_clip_grad_norm(p, max_norm, round == 2 ? NULL : &total));
        if (round < 2)
            ck_assert_msg(fabs(total - ref) <= 1e-6 * ref, "norm %.9g, expected %.9g", total, ref);
        double coef = round == 0 ? 1 : max_norm / (ref + 1e-6);
        double *ga = download(kiln_tensor_grad(a)), *gb = download(kiln_tensor_grad(b));
        for (int i = 0; i < 5; i++)
            ck_assert_msg(fabs(ga[i] - wa[i] * coef) <= 1e-6, "round %d: a[%d] %.9g vs %.9g", round,
                          i, ga[i], wa[i] * coef);
        for (int i = 0; i < 3; i++)
            ck_assert(fabs(gb[i] - wb[i] * coef) <= 1e-6);
        if (round == 0)
            ck_assert(ga[0] == wa[0] && gb[2] == wb[2]); /* not touched */
        free(ga);
        free(gb);
        ck_assert_ptr_null(kiln_tensor_grad(c));
    }
    /* a list without gradients: norm 0; NaN gradients give a NaN norm */
    double total = -1;
    ASSERT_OK(kiln_params_zero_grad(p));
    ASSERT_OK(kiln_clip_grad_norm(p, 1, &total));
    ck_assert(total == 0);
    double nanw[2] = {NAN, 1};
    give_grad(c, nanw);
    ASSERT_OK(kiln_clip_grad_norm(p, 1, &total));
    ck_assert(isnan(total));
    ASSERT_FAILS(kiln_clip_grad_norm(NULL, 1, &total), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_clip_grad_norm(p, -1, &total), KILN_ERR_INVALID_ARGUMENT, "max_norm");
    ASSERT_FAILS(kiln_clip_grad_norm(p, NAN, &total), KILN_ERR_INVALID_ARGUMENT, "max_norm");
    ASSERT_FAILS(kiln_params_zero_grad(NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
    kiln_params_free(p);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
}
END_TEST

/* ---- training ------------------------------------------------------------------------------ */

enum { NROWS = 32, NFEAT = 3 };

typedef struct regression {
    kiln_tensor *x, *y, *w, *b;
    kiln_params *params;
} regression;

/* y = x @ [1.5, -2, 0.5] + 0.25 (plus nothing: the model can fit it exactly). */
static regression make_regression(kiln_device *d, uint64_t seed)
{
    regression r;
    int64_t xs[2] = {NROWS, NFEAT}, ys[2] = {NROWS, 1}, ws[2] = {NFEAT, 1}, bs = 1;
    ASSERT_OK(kiln_rand_uniform(d, KILN_F32, 2, xs, seed, -1, 1, &r.x));
    double *xv = download(r.x), yv[NROWS], zero[NFEAT] = {0};
    static const double wtrue[NFEAT] = {1.5, -2, 0.5};
    for (int i = 0; i < NROWS; i++) {
        yv[i] = 0.25;
        for (int j = 0; j < NFEAT; j++)
            yv[i] += xv[i * NFEAT + j] * wtrue[j];
    }
    free(xv);
    r.y = upload(d, KILN_F32, 2, ys, yv);
    r.w = leaf(d, KILN_F32, 2, ws, zero, true);
    r.b = leaf(d, KILN_F32, 1, &bs, zero, true);
    ASSERT_OK(kiln_params_create(&r.params));
    ASSERT_OK(kiln_params_add(r.params, "linear.weight", r.w));
    ASSERT_OK(kiln_params_add(r.params, "linear.bias", r.b));
    return r;
}

static void free_regression(regression *r)
{
    kiln_params_free(r->params);
    kiln_tensor_release(r->x);
    kiln_tensor_release(r->y);
    kiln_tensor_release(r->w);
    kiln_tensor_release(r->b);
}

/* One step: zero_grad, forward, loss, backward, step. Returns the loss. */
static double train_step(regression *r, kiln_optimizer *opt)
{
    kiln_tensor *h = NULL, *pred = NULL, *loss = NULL;
    ASSERT_OK(kiln_optimizer_zero_grad(opt));
    ASSERT_OK(kiln_matmul(r->x, r->w, &h));
    ASSERT_OK(kiln_add(h, r->b, &pred));
    ASSERT_OK(kiln_mse_loss(pred, r->y, &loss, NULL));
    ASSERT_OK(kiln_backward(loss, NULL, 0));
    ASSERT_OK(kiln_optimizer_step(opt));
    double l = 0;
    ASSERT_OK(kiln_tensor_item(loss, &l));
    kiln_tensor_release(h);
    kiln_tensor_release(pred);
    kiln_tensor_release(loss);
    return l;
}

START_TEST(test_training_loop)
{
    static const config train[] = {
        {K_SGD, 0.1, 0.9, 0, 0, 0, 0, -1, "SGD momentum"},
        {K_ADAM, 0.05, 0, 0.9, 0.999, 1e-8, 0, -1, "Adam"},
        {K_ADAMW, 0.05, 0, 0.9, 0.999, 1e-8, 1e-4, -1, "AdamW"},
    };
    /* Oclgrind simulates every work-item (and the reductions' local memory): SGD alone, fewer
     * steps, a loss a quarter of the first */
    int steps = simulated(dev) ? 40 : 300, nconfigs = simulated(dev) ? 1 : 3;
    double bound = simulated(dev) ? 0.25 : 1e-3;
    for (int c = 0; c < nconfigs; c++) {
        regression r = make_regression(dev, 7);
        kiln_optimizer *opt = NULL;
        ASSERT_OK(create(&train[c], r.params, &opt));
        double first = train_step(&r, opt), last = first;
        for (int s = 1; s < steps; s++)
            last = train_step(&r, opt);
        printf("optim: %s, linear regression on %s: mse %.3g -> %.3g in %d steps\n", train[c].what,
               kiln_device_spec(dev), first, last, steps);
        ck_assert_msg(first > 1, "%s: first loss %g", train[c].what, first);
        ck_assert_msg(last < bound * (simulated(dev) ? first : 1), "%s: loss %g after %d steps",
                      train[c].what, last, steps);
        kiln_optimizer_free(opt);
        free_regression(&r);
    }
}
END_TEST

/* ---- checkpoints ---------------------------------------------------------------------------- */

START_TEST(test_checkpoint_resume)
{
    static const config ck[] = {
        {K_ADAM, 0.05, 0, 0.9, 0.999, 1e-8, 0.01, -1, "Adam"},
        {K_SGD, 0.05, 0.9, 0, 0, 0, 0.01, -1, "SGD momentum"},
    };
    enum { N = 4, M = 3 };
    char *path = tmp_path("resume");
    for (int c = 0; c < 2; c++) {
        /* N steps, save the model and optimizer in one file, M more steps */
        regression r = make_regression(dev, 11);
        kiln_optimizer *opt = NULL;
        ASSERT_OK(create(&ck[c], r.params, &opt));
        for (int s = 0; s < N; s++)
            train_step(&r, opt);
        kiln_params *saved = NULL;
        ASSERT_OK(kiln_params_create(&saved));
        ASSERT_OK(kiln_params_add(saved, "linear.weight", r.w));
        ASSERT_OK(kiln_params_add(saved, "linear.bias", r.b));
        ASSERT_OK(kiln_optimizer_state(opt, saved));
        ck_assert_int_eq(kiln_params_count(saved), ck[c].k == K_SGD ? 4 : 8);
        ASSERT_OK(kiln_params_save(saved, path));
        for (int s = 0; s < M; s++)
            train_step(&r, opt);
        if (ck[c].k != K_SGD) { /* the live step tensor followed */
            int64_t step = 0;
            ASSERT_OK(kiln_tensor_item_i64(kiln_params_find(saved, "linear.bias.step"), &step));
            ck_assert_int_eq(step, N + M);
        }

        /* a fresh model (other initial values) and optimizer, loaded, M steps */
        regression r2 = make_regression(dev, 11);
        ASSERT_OK(kiln_fill(r2.w, 3));
        kiln_optimizer *opt2 = NULL;
        ASSERT_OK(create(&ck[c], r2.params, &opt2));
        kiln_params *loaded = NULL;
        ASSERT_OK(kiln_params_create(&loaded));
        ASSERT_OK(kiln_params_add(loaded, "linear.weight", r2.w));
        ASSERT_OK(kiln_params_add(loaded, "linear.bias", r2.b));
        ASSERT_OK(kiln_optimizer_state(opt2, loaded));
        ASSERT_OK(kiln_params_load(loaded, path));
        for (int s = 0; s < M; s++)
            train_step(&r2, opt2);
        kiln_tensor *a[2] = {r.w, r.b}, *b[2] = {r2.w, r2.b};
        for (int i = 0; i < 2; i++) {
            void *ha = read_host(a[i]), *hb = read_host(b[i]);
            ck_assert_msg(memcmp(ha, hb, kiln_tensor_nbytes(a[i])) == 0,
                          "%s: parameter %d differs after resuming", ck[c].what, i);
            free(ha);
            free(hb);
        }
        if (ck[c].k != K_SGD) {
            int64_t step = 0;
            ASSERT_OK(kiln_tensor_item_i64(kiln_params_find(loaded, "linear.weight.step"), &step));
            ck_assert_int_eq(step, N + M);
            /* a negative step count in a checkpoint is refused at the next step */
            int64_t bad = -3;
            ASSERT_OK(kiln_tensor_write(kiln_params_find(loaded, "linear.weight.step"), &bad,
                                        sizeof bad));
            ASSERT_FAILS(kiln_optimizer_step(opt2), KILN_ERR_INVALID_ARGUMENT, "step count");
        }
        /* the state of both optimizers again: a name already in the list */
        ASSERT_FAILS(kiln_optimizer_state(opt2, loaded), KILN_ERR_INVALID_ARGUMENT,
                     "already holds");
        ck_assert_int_eq(kiln_params_count(loaded), ck[c].k == K_SGD ? 4 : 8);
        kiln_params_free(saved);
        kiln_params_free(loaded);
        kiln_optimizer_free(opt);
        kiln_optimizer_free(opt2);
        free_regression(&r);
        free_regression(&r2);
    }
    remove(path);
}
END_TEST

/* A step count from a checkpoint is checked for what it is used for: t + 1 in int64 and
 * beta^t in double. INT64_MAX once overflowed there (UB), returned KILN_OK and made every weight
 * NaN (issue 21). */
START_TEST(test_step_count_range)
{
    char *path = tmp_path("steps");
    const int64_t shape[1] = {4};
    const double v[4] = {1, -2, 3, -4}, g[4] = {0.5, 0.5, -0.5, -0.5};
    const int64_t limit = ((int64_t)1 << 53) - 1; /* t + 1 exact in double and int64 */
    const int64_t counts[] = {INT64_MAX, INT64_MAX - 1, limit + 1, limit, limit - 1};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        kiln_tensor *w = leaf(dev, KILN_F32, 1, shape, v, true);
        kiln_params *params = NULL, *state = NULL;
        ASSERT_OK(kiln_params_create(&params));
        ASSERT_OK(kiln_params_add(params, "w", w));
        kiln_optimizer *opt = NULL;
        ASSERT_OK(kiln_adam_create(params, 0.1, 0.9, 0.999, 1e-8, 0, &opt));
        ASSERT_OK(kiln_params_create(&state));
        ASSERT_OK(kiln_params_add(state, "w", w));
        ASSERT_OK(kiln_optimizer_state(opt, state));
        /* the count, through a file */
        ASSERT_OK(kiln_tensor_write(kiln_params_find(state, "w.step"), &counts[c], 8));
        ASSERT_OK(kiln_params_save(state, path));
        ASSERT_OK(kiln_fill_i64(kiln_params_find(state, "w.step"), 0));
        ASSERT_OK(kiln_params_load(state, path));
        give_grad(w, g);
        float before[4], after[4];
        ASSERT_OK(kiln_tensor_read(w, before, sizeof before));
        kiln_status s = kiln_optimizer_step(opt);
        ASSERT_OK(kiln_tensor_read(w, after, sizeof after));
        if (counts[c] < limit) {
            ck_assert_msg(s == KILN_OK, "step count %" PRId64 ": %s", counts[c], kiln_last_error());
            for (int i = 0; i < 4; i++)
                ck_assert_msg(isfinite(after[i]) && after[i] != before[i],
                              "step count %" PRId64 ": w[%d] %g -> %g", counts[c], i,
                              (double)before[i], (double)after[i]);
        } else {
            ck_assert_msg(s == KILN_ERR_INVALID_ARGUMENT, "step count %" PRId64 ": %s (%s)",
                          counts[c], kiln_status_string(s), kiln_last_error());
            ASSERT_ERROR_HAS("kiln_optimizer_step: parameter 'w': its step count (w.step)");
            ck_assert_msg(memcmp(before, after, sizeof before) == 0,
                          "step count %" PRId64 ": the weights changed", counts[c]);
        }
        kiln_optimizer_free(opt);
        kiln_params_free(state);
        kiln_params_free(params);
        kiln_tensor_release(w);
    }
    remove(path);
}
END_TEST

/* ---- errors -------------------------------------------------------------------------------- */

START_TEST(test_errors)
{
    int64_t n = 3;
    double v[3] = {1, 2, 3};
    kiln_tensor *a = leaf(dev, KILN_F32, 1, &n, v, true), *i32 = upload(dev, KILN_I32, 1, &n, v);
    kiln_tensor *f16 = upload(dev, KILN_F16, 1, &n, v), *sum = NULL, *view = NULL;
    ASSERT_OK(kiln_add(a, a, &sum)); /* not a leaf */
    bool prev = kiln_set_grad_enabled(false);
    ASSERT_OK(kiln_tensor_reshape(a, 1, &n, &view)); /* a leaf sharing a's memory */
    kiln_set_grad_enabled(prev);
    kiln_params *p = NULL, *empty = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_params_create(&empty));
    ASSERT_OK(kiln_params_add(p, "a", a));
    kiln_optimizer *opt = (kiln_optimizer *)&opt;

    ASSERT_FAILS(kiln_sgd_create(NULL, 0.1, 0, 0, &opt), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_sgd_create: params is NULL");
    ck_assert_ptr_null(opt);
    ASSERT_FAILS(kiln_sgd_create(p, 0.1, 0, 0, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_adam_create(empty, 0.1, 0.9, 0.999, 1e-8, 0, &opt), KILN_ERR_INVALID_ARGUMENT,
                 "empty");
    ASSERT_FAILS(kiln_sgd_create(p, -0.1, 0, 0, &opt), KILN_ERR_INVALID_ARGUMENT, "lr is -0.1");
    ASSERT_FAILS(kiln_sgd_create(p, NAN, 0, 0, &opt), KILN_ERR_INVALID_ARGUMENT, "lr is nan");
    ASSERT_FAILS(kiln_sgd_create(p, 0.1, -0.5, 0, &opt), KILN_ERR_INVALID_ARGUMENT, "momentum");
    ASSERT_FAILS(kiln_sgd_create(p, 0.1, 0, INFINITY, &opt), KILN_ERR_INVALID_ARGUMENT,
                 "weight_decay is inf");
    ASSERT_FAILS(kiln_adam_create(p, 0.1, 1, 0.999, 1e-8, 0, &opt), KILN_ERR_INVALID_ARGUMENT,
                 "beta1 is 1; it must be in [0, 1)");
    ASSERT_FAILS(kiln_adamw_create(p, 0.1, 0.9, -0.1, 1e-8, 0, &opt), KILN_ERR_INVALID_ARGUMENT,
                 "beta2");
    ASSERT_FAILS(kiln_adam_create(p, 0.1, 0.9, NAN, 1e-8, 0, &opt), KILN_ERR_INVALID_ARGUMENT,
                 "beta2 is nan");
    ASSERT_FAILS(kiln_adam_create(p, 0.1, 0.9, 0.999, 0, 0, &opt), KILN_ERR_INVALID_ARGUMENT,
                 "eps is 0; it must be finite and > 0");
    ASSERT_FAILS(kiln_adamw_create(p, 0.1, 0.9, 0.999, 1e-8, -1, &opt), KILN_ERR_INVALID_ARGUMENT,
                 "weight_decay");
    ck_assert_ptr_null(opt);

    struct {
        const char *name;
        kiln_tensor *t;
        kiln_status s;
        const char *text;
    } bad[] = {
        {"ints", i32, KILN_ERR_DTYPE_MISMATCH, "parameter 'ints' is i32"},
        {"halves", f16, KILN_ERR_DTYPE_MISMATCH, "parameter 'halves' is f16"},
        {"sum", sum, KILN_ERR_INVALID_ARGUMENT, "'sum' is not a leaf but the result of kiln_add"},
        {"view", view, KILN_ERR_INVALID_ARGUMENT, "parameters 'a' and 'view' share memory"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_params *q = NULL;
        ASSERT_OK(kiln_params_create(&q));
        ASSERT_OK(kiln_params_add(q, "a", a));
        ASSERT_OK(kiln_params_add(q, bad[i].name, bad[i].t));
        ASSERT_FAILS(kiln_adam_create(q, 0.1, 0.9, 0.999, 1e-8, 0, &opt), bad[i].s, bad[i].text);
        ck_assert_ptr_null(opt);
        kiln_params_free(q);
    }

    /* NULL optimizers, the learning rate */
    ASSERT_FAILS(kiln_optimizer_step(NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_optimizer_zero_grad(NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_optimizer_set_lr(NULL, 1), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_optimizer_state(NULL, p), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ck_assert(isnan(kiln_optimizer_lr(NULL)));
    kiln_optimizer_free(NULL);
    ASSERT_OK(kiln_adam_create(p, 0.1, 0.9, 0.999, 1e-8, 0, &opt));
    ASSERT_FAILS(kiln_optimizer_state(opt, NULL), KILN_ERR_INVALID_ARGUMENT, "state is NULL");
    ck_assert_double_eq(kiln_optimizer_lr(opt), 0.1);
    ASSERT_FAILS(kiln_optimizer_set_lr(opt, -1), KILN_ERR_INVALID_ARGUMENT, "lr is -1");
    ck_assert_double_eq(kiln_optimizer_lr(opt), 0.1);
    ASSERT_OK(kiln_optimizer_set_lr(opt, 0.01));
    ck_assert_double_eq(kiln_optimizer_lr(opt), 0.01);

    /* The step bumps the parameter's version: a graph that saved it cannot go backward. */
    kiln_tensor *sq = NULL, *l = NULL;
    ASSERT_OK(kiln_mul(a, a, &sq));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, sq, KILN_ALL_AXES, false, &l));
    ASSERT_OK(kiln_backward(l, NULL, KILN_BACKWARD_RETAIN_GRAPH));
    ASSERT_OK(kiln_optimizer_step(opt));
    ASSERT_FAILS(kiln_backward(l, NULL, 0), KILN_ERR_STATE, "modified");
    /* a parameter mapped at step time */
    void *ptr;
    ASSERT_OK(kiln_tensor_map(a, KILN_MAP_READ, &ptr));
    ASSERT_FAILS(kiln_optimizer_step(opt), KILN_ERR_STATE, "kiln_optimizer_step");
    ASSERT_OK(kiln_tensor_unmap(a));
    ASSERT_OK(kiln_optimizer_step(opt));
    kiln_tensor_release(sq);
    kiln_tensor_release(l);
    kiln_optimizer_free(opt);
    kiln_params_free(p);
    kiln_params_free(empty);
    kiln_tensor_release(a);
    kiln_tensor_release(i32);
    kiln_tensor_release(f16);
    kiln_tensor_release(sum);
    kiln_tensor_release(view);
}
END_TEST

/* ---- out of memory ------------------------------------------------------------------------- */

/* Every host allocation of a creation fails in turn: out of memory, *out NULL, nothing leaked
 * (LeakSanitizer at exit, the device's bytes here). */
START_TEST(test_create_oom)
{
    int64_t n = 4;
    double v[4] = {1, 2, 3, 4};
    kiln_tensor *a = leaf(dev, KILN_F32, 1, &n, v, true), *b = leaf(dev, KILN_F32, 1, &n, v, true);
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_params_add(p, "a", a));
    ASSERT_OK(kiln_params_add(p, "b", b));
    uint64_t before = live_bytes(dev);
    for (int c = 0; c < 3; c++) {
        long at = 1;
        for (;; at++) {
            kiln_optimizer *opt = (kiln_optimizer *)&opt;
            kiln__alloc_fail_at(at);
            kiln_status s = create(&configs[c == 0 ? 1 : c + 3], p, &opt);
            long count = kiln__alloc_count();
            kiln__alloc_fail_at(-1);
            if (s == KILN_OK) {
                ck_assert_int_lt(count, at);
                kiln_optimizer_free(opt);
                break;
            }
            ck_assert_int_eq(s, KILN_ERR_OUT_OF_MEMORY);
            ck_assert_ptr_null(opt);
            ck_assert_int_eq(live_bytes(dev), before);
        }
        ck_assert_int_ge(at, 4); /* the optimizer, its array, two names */
    }
    kiln_params_free(p);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

/* Out of memory while the first step allocates the state (the device's memory limit; every host
 * allocation in turn; every OpenCL buffer creation, fill and launch in turn): the step fails,
 * the parameters keep their values, no state is left behind, and the next step gives exactly
 * the one-step result. */
static struct kiln__cl_api real;
static int cl_calls, cl_fail_at;

static bool inject(void)
{
    return cl_calls++ == cl_fail_at;
}

static cl_mem CL_API_CALL f_create(cl_context c, cl_mem_flags f, size_t n, void *p, cl_int *e)
{
    if (inject()) {
        if (e)
            *e = CL_MEM_OBJECT_ALLOCATION_FAILURE;
        return NULL;
    }
    return real.CreateBuffer(c, f, n, p, e);
}

static cl_int CL_API_CALL f_fill(cl_command_queue q, cl_mem m, const void *p, size_t ps, size_t o,
                                 size_t n, cl_uint ne, const cl_event *w, cl_event *ev)
{
    return inject() ? CL_OUT_OF_HOST_MEMORY : real.EnqueueFillBuffer(q, m, p, ps, o, n, ne, w, ev);
}

static cl_int CL_API_CALL f_ndrange(cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o,
                                    const size_t *g, const size_t *l, cl_uint ne, const cl_event *w,
                                    cl_event *ev)
{
    return inject() ? CL_OUT_OF_HOST_MEMORY
                    : real.EnqueueNDRangeKernel(q, k, d, o, g, l, ne, w, ev);
}

static cl_int CL_API_CALL f_setarg(cl_kernel k, cl_uint i, size_t n, const void *v)
{
    return inject() ? CL_OUT_OF_HOST_MEMORY : real.SetKernelArg(k, i, n, v);
}

enum { NBIG = 1024 };

typedef struct oom_case {
    kiln_tensor *small, *big;
    kiln_params *list;
    double vs[4], vb[NBIG], gs[4], gb[NBIG];
} oom_case;

static void oom_setup(oom_case *o)
{
    int64_t ns = 4, nb = NBIG;
    fill_values(KILN_F32, o->vs, 4);
    fill_values(KILN_F32, o->vb, NBIG);
    fill_values(KILN_F32, o->gs, 4);
    fill_values(KILN_F32, o->gb, NBIG);
    o->small = leaf(dev, KILN_F32, 1, &ns, o->vs, true);
    o->big = leaf(dev, KILN_F32, 1, &nb, o->vb, true);
    ASSERT_OK(kiln_params_create(&o->list));
    ASSERT_OK(kiln_params_add(o->list, "small", o->small));
    ASSERT_OK(kiln_params_add(o->list, "big", o->big));
    give_grad(o->small, o->gs);
    give_grad(o->big, o->gb);
}

static void oom_teardown(oom_case *o)
{
    kiln_params_free(o->list);
    kiln_tensor_release(o->small);
    kiln_tensor_release(o->big);
}

/* Whether the parameter holds v (stepped false) or the one-step result of c with gradient g. */
static bool holds(const kiln_tensor *t, const config *c, const double *v, const double *g,
                  bool stepped)
{
    double *got = download(t);
    bool ok = true;
    for (int64_t i = 0; ok && i < kiln_tensor_numel(t); i++) {
        ref_param r = {.n = 1, .p = {v[i]}};
        if (stepped)
            ref_step(c, &r, &g[i]);
        ok = fabs(got[i] - r.p[0]) <= 2e-5;
    }
    free(got);
    return ok;
}

static void oom_check(const oom_case *o, const config *c, bool stepped, const char *when)
{
    ck_assert_msg(holds(o->small, c, o->vs, o->gs, stepped), "%s, %s: small is %s", c->what, when,
                  stepped ? "not stepped" : "changed");
    ck_assert_msg(holds(o->big, c, o->vb, o->gb, stepped), "%s, %s: big is %s", c->what, when,
                  stepped ? "not stepped" : "changed");
}

START_TEST(test_state_oom)
{
    if (simulated(dev)) {
        /* TODO: Oclgrind's uninitialised-value checker reports kiln_sgd reading the 1024-element
         * parameter or gradient past element 4 (or 64) here, apparently after uploads of other
         * sizes (staging?); not understood yet. PoCL runs the case. */
        test_skip("optim: the out-of-memory steps on %s", kiln_device_spec(dev));
        return;
    }
    const config *cs[2] = {&configs[2], &configs[5]}; /* SGD momentum, AdamW */
    for (int c = 0; c < 2; c++) {
        /* 1. the device's memory limit: small's state fits, big's does not */
        oom_case o;
        oom_setup(&o);
        kiln_optimizer *opt = NULL;
        ASSERT_OK(create(cs[c], o.list, &opt));
        ASSERT_OK(kiln_device_synchronize(dev));
        uint64_t before = live_bytes(dev);
        /* small's state (at most three 512-byte size classes) fits, big's 4 KiB does not */
        ASSERT_OK(kiln_device_set_memory_limit(dev, before + 3 * 512 + 1000));
        ASSERT_FAILS(kiln_optimizer_step(opt), KILN_ERR_OUT_OF_MEMORY,
                     "kiln_optimizer_step: parameter 'big'");
        ASSERT_OK(kiln_device_set_memory_limit(dev, 0));
        ck_assert_int_eq(live_bytes(dev), before);
        oom_check(&o, cs[c], false, "memory limit");
        ASSERT_OK(kiln_optimizer_step(opt));
        oom_check(&o, cs[c], true, "after the memory limit");
        kiln_optimizer_free(opt);
        oom_teardown(&o);

        /* 2. every host allocation of the first step in turn */
        int failures = 0;
        for (long at = 1;; at++) {
            oom_setup(&o);
            ASSERT_OK(create(cs[c], o.list, &opt));
            before = live_bytes(dev);
            kiln__alloc_fail_at(at);
            kiln_status s = kiln_optimizer_step(opt);
            long count = kiln__alloc_count();
            kiln__alloc_fail_at(-1);
            bool done = s == KILN_OK && count < at;
            if (!done) {
                failures++;
                ck_assert_msg(s == KILN_ERR_OUT_OF_MEMORY, "allocation %ld: %s: %s", at,
                              kiln_status_string(s), kiln_last_error());
                ASSERT_ERROR_HAS("kiln_optimizer_step");
                ck_assert_int_eq(live_bytes(dev), before);
                oom_check(&o, cs[c], false, "host allocation");
                ASSERT_OK(kiln_optimizer_step(opt));
            }
            oom_check(&o, cs[c], true, "after a host allocation failed");
            kiln_optimizer_free(opt);
            oom_teardown(&o);
            if (done)
                break;
        }
        ck_assert_int_ge(failures, 1);

        /* 3. every OpenCL buffer creation, fill, argument and launch of the first step: a
         * failure before the updates changes nothing, one in the middle leaves the parameters
         * before it stepped; a retry of the failed parameters' step then completes it. */
        real = kiln__cl;
        int reported = 0;
        for (cl_fail_at = 0;; cl_fail_at++) {
            ASSERT_OK(kiln_device_synchronize(dev));
            if (!simulated(dev))
                ASSERT_OK(kiln_device_empty_cache(dev));
            uint64_t base = live_bytes(dev);
            oom_setup(&o);
            ASSERT_OK(create(cs[c], o.list, &opt));
            cl_calls = 0;
            kiln__cl.CreateBuffer = f_create;
            kiln__cl.EnqueueFillBuffer = f_fill;
            kiln__cl.EnqueueNDRangeKernel = f_ndrange;
            kiln__cl.SetKernelArg = f_setarg;
            kiln_status s = kiln_optimizer_step(opt);
            kiln__cl_reset();
            bool done = s == KILN_OK && cl_calls <= cl_fail_at;
            if (s != KILN_OK) {
                reported++;
                ck_assert_msg(s != KILN_ERR_DEVICE_LOST, "call %d: %s", cl_fail_at,
                              kiln_last_error());
                ASSERT_ERROR_HAS("kiln_optimizer_step");
                bool small = holds(o.small, cs[c], o.vs, o.gs, true);
                ck_assert_msg(small || holds(o.small, cs[c], o.vs, o.gs, false),
                              "call %d: small is neither stepped nor unchanged", cl_fail_at);
                ck_assert_msg(holds(o.big, cs[c], o.vb, o.gb, false),
                              "call %d: big changed by a failed step", cl_fail_at);
                if (small) /* step big alone */
                    ASSERT_OK(kiln_tensor_zero_grad(o.small));
                ASSERT_OK(kiln_optimizer_step(opt));
            }
            oom_check(&o, cs[c], true, "after an OpenCL call failed");
            kiln_optimizer_free(opt);
            oom_teardown(&o);
            ASSERT_OK(kiln_device_synchronize(dev));
            ck_assert_msg(live_bytes(dev) == base, "call %d: %llu bytes left of %llu", cl_fail_at,
                          (unsigned long long)live_bytes(dev), (unsigned long long)base);
            if (done)
                break;
        }
        ck_assert_int_ge(reported, 2);
        printf("optim: %s: %d OpenCL calls of a first step failed in turn (%d reported)\n",
               cs[c]->what, cl_fail_at, reported);
    }
}
END_TEST

/* ---- learning-rate schedules ------------------------------------------------------------------
 */

/* An SGD optimizer at lr 0.5 over one parameter, the parameter list for the caller to free. */
static kiln_optimizer *sched_opt(kiln_params **ps)
{
    const int64_t two = 2;
    const double v[2] = {1, 2};
    kiln_tensor *w = leaf(dev, KILN_F32, 1, &two, v, true);
    ASSERT_OK(kiln_params_create(ps));
    ASSERT_OK(kiln_params_add(*ps, "w", w));
    kiln_tensor_release(w);
    kiln_optimizer *opt = NULL;
    ASSERT_OK(kiln_sgd_create(*ps, 0.5, 0, 0, &opt));
    return opt;
}

/* PyTorch's closed forms, written out for the reference. */
static double ref_schedule(int kind, int64_t e)
{
    const double base = 0.5;
    switch (kind) {
    case 0: /* StepLR(step_size 3, gamma 0.5) */
        return base * pow(0.5, (double)(e / 3));
    case 1: { /* MultiStepLR([2, 5, 5, 9], gamma 0.1): a repeated milestone counts twice */
        const int64_t m[4] = {2, 5, 5, 9};
        int k = 0;
        for (int i = 0; i < 4; i++)
            k += m[i] <= e;
        return base * pow(0.1, k);
    }
    case 2: /* ExponentialLR(0.9) */
        return base * pow(0.9, (double)e);
    case 3: /* CosineAnnealingLR(T_max 10, eta_min 0.01) */
        return 0.01 + (base - 0.01) * (1 + cos(M_PI * (double)e / 10)) / 2;
    default: /* LinearLR(start 0.1, end 1, total_iters 4) */
        return base * (0.1 + 0.9 * (double)(e < 4 ? e : 4) / 4);
    }
}

static kiln_status make_schedule(int kind, kiln_optimizer *opt, kiln_scheduler **s)
{
    const int64_t m[4] = {2, 5, 5, 9};
    switch (kind) {
    case 0:
        return kiln_step_lr_create(opt, 3, 0.5, s);
    case 1:
        return kiln_multistep_lr_create(opt, m, 4, 0.1, s);
    case 2:
        return kiln_exponential_lr_create(opt, 0.9, s);
    case 3:
        return kiln_cosine_annealing_lr_create(opt, 10, 0.01, s);
    default:
        return kiln_linear_lr_create(opt, 0.1, 1, 4, s);
    }
}

START_TEST(test_schedules)
{
    for (int kind = 0; kind < 5; kind++) {
        kiln_params *ps = NULL;
        kiln_optimizer *opt = sched_opt(&ps);
        kiln_scheduler *s = NULL;
        ASSERT_OK(make_schedule(kind, opt, &s));
        for (int64_t e = 0; e <= 25; e++) {
            ck_assert_int_eq(kiln_scheduler_epoch(s), e);
            double want = ref_schedule(kind, e), got = kiln_optimizer_lr(opt);
            ck_assert_msg(fabs(got - want) <= 1e-15 * fabs(want) + 1e-300,
                          "schedule %d, epoch %lld: lr %.17g, want %.17g", kind, (long long)e, got,
                          want);
            ASSERT_OK(kiln_scheduler_step(s));
        }
        kiln_scheduler_free(s);
        kiln_optimizer_free(opt);
        kiln_params_free(ps);
    }
}
END_TEST

/* ReduceLROnPlateau against PyTorch's rules, a metric sequence at a time (patience 2, factor 0.5,
 * threshold 0.1, cooldown 1, min_lr 0.1). */
START_TEST(test_plateau)
{
    const double metrics[] = {1.0, 0.95, 0.93, 0.99, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, NAN};
    const int n = (int)(sizeof metrics / sizeof *metrics);
    for (int maximize = 0; maximize < 2; maximize++) {
        kiln_params *ps = NULL;
        kiln_optimizer *opt = sched_opt(&ps);
        kiln_scheduler *s = NULL;
        ASSERT_OK(kiln_reduce_lr_on_plateau_create(opt, maximize, 0.5, 2, 0.1, 1, 0.1, &s));
        double best = maximize ? -INFINITY : INFINITY, lr = 0.5;
        int64_t bad = 0, cool = 0;
        for (int i = 0; i < n; i++) {
            double m = maximize ? 2 - metrics[i] : metrics[i]; /* rising when maximizing */
            bool better = maximize ? m > best * 1.1 : m < best * 0.9;
            if (better) {
                best = m;
                bad = 0;
            } else {
                bad++;
            }
            if (cool > 0) {
                cool--;
                bad = 0;
            }
            if (bad > 2) {
                double nl = fmax(lr * 0.5, 0.1);
                if (lr - nl > 1e-8)
                    lr = nl;
                cool = 1;
                bad = 0;
            }
            ASSERT_OK(kiln_scheduler_step_metric(s, m));
            ck_assert_msg(kiln_optimizer_lr(opt) == lr, "maximize %d, step %d: lr %g, want %g",
                          maximize, i, kiln_optimizer_lr(opt), lr);
        }
        ck_assert(lr < 0.5); /* the sequence reduced the rate at least once */
        ck_assert_int_eq(kiln_scheduler_epoch(s), n);
        kiln_scheduler_free(s);
        kiln_optimizer_free(opt);
        kiln_params_free(ps);
    }
}
END_TEST

/* A checkpoint with the scheduler's state: a fresh optimizer and scheduler loaded from it take up
 * the epoch and the rate, before the optimizer's first step, and go on as the saved ones do. */
START_TEST(test_scheduler_resume)
{
    char *path = tmp_path("sched");
    for (int kind = 0; kind < 2; kind++) { /* CosineAnnealing, ReduceLROnPlateau */
        kiln_params *ps = NULL, *st = NULL;
        kiln_optimizer *opt = sched_opt(&ps);
        kiln_scheduler *s = NULL;
        if (kind == 0)
            ASSERT_OK(kiln_cosine_annealing_lr_create(opt, 10, 0.01, &s));
        else
            ASSERT_OK(kiln_reduce_lr_on_plateau_create(opt, false, 0.5, 0, 0, 0, 0, &s));
        ASSERT_OK(kiln_params_create(&st));
        ASSERT_OK(kiln_scheduler_state(s, st));
        ck_assert_str_eq(kiln_params_name(st, 0), "lr_scheduler.state");
        for (int e = 0; e < 4; e++)
            ASSERT_OK(kind ? kiln_scheduler_step_metric(s, 1.0) : kiln_scheduler_step(s));
        ASSERT_OK(kiln_params_save(st, path));
        double saved_lr = kiln_optimizer_lr(opt);

        kiln_params *ps2 = NULL, *st2 = NULL;
        kiln_optimizer *opt2 = sched_opt(&ps2);
        kiln_scheduler *s2 = NULL;
        if (kind == 0)
            ASSERT_OK(kiln_cosine_annealing_lr_create(opt2, 10, 0.01, &s2));
        else
            ASSERT_OK(kiln_reduce_lr_on_plateau_create(opt2, false, 0.5, 0, 0, 0, 0, &s2));
        ASSERT_OK(kiln_params_create(&st2));
        ASSERT_OK(kiln_scheduler_state(s2, st2));
        ASSERT_OK(kiln_params_load(st2, path));
        ck_assert(kiln_optimizer_lr(opt2) != saved_lr); /* not yet: at the next step */
        const double g[2] = {1, 1};
        give_grad(kiln_params_tensor(ps2, 0), g);
        ASSERT_OK(kiln_optimizer_step(opt2));
        ck_assert(kiln_optimizer_lr(opt2) == saved_lr);
        ck_assert_int_eq(kiln_scheduler_epoch(s2), 4);
        for (int e = 0; e < 3; e++) {
            ASSERT_OK(kind ? kiln_scheduler_step_metric(s, 1.0) : kiln_scheduler_step(s));
            ASSERT_OK(kind ? kiln_scheduler_step_metric(s2, 1.0) : kiln_scheduler_step(s2));
            ck_assert(kiln_optimizer_lr(opt2) == kiln_optimizer_lr(opt));
        }
        /* a state of another kind of scheduler is refused, naming it */
        if (kind == 1) {
            kiln_params *ps3 = NULL, *st3 = NULL;
            kiln_optimizer *opt3 = sched_opt(&ps3);
            kiln_scheduler *s3 = NULL;
            ASSERT_OK(kiln_step_lr_create(opt3, 3, 0.5, &s3));
            ASSERT_OK(kiln_params_create(&st3));
            ASSERT_OK(kiln_scheduler_state(s3, st3));
            ASSERT_OK(kiln_params_load(st3, path));
            ASSERT_FAILS(kiln_scheduler_step(s3), KILN_ERR_INVALID_ARGUMENT,
                         "kiln_scheduler_step: the loaded lr_scheduler.state is not a state of "
                         "this StepLR scheduler");
            kiln_scheduler_free(s3);
            kiln_optimizer_free(opt3);
            kiln_params_free(st3);
            kiln_params_free(ps3);
        }
        kiln_scheduler_free(s);
        kiln_scheduler_free(s2);
        kiln_optimizer_free(opt);
        kiln_optimizer_free(opt2);
        kiln_params_free(st);
        kiln_params_free(st2);
        kiln_params_free(ps);
        kiln_params_free(ps2);
    }
    unlink(path);
}
END_TEST

/* ---- the gradient scaler (issue 25) -----------------------------------------------------------
 */

/* PyTorch's rules in C: the scale after an update, from whether inf was found. */
static void ref_update(double *scale, int64_t *tracker, bool found, double growth, double backoff,
                       int64_t interval)
{
    if (found) {
        *scale *= backoff;
        *tracker = 0;
    } else if (++*tracker == interval) {
        *scale *= growth;
        *tracker = 0;
    }
}

/* A sequence of 12 steps of SGD (lr 0.25) on p [4] through a scaler (init 8, growth 4, backoff
 * 0.25, interval 3), the loss sum(p * x) so that p's gradient is x: x holds an inf at steps 2, 7
 * and 8, a NaN at step 10. Every step: the scaled loss is the loss times the reference scale, the
 * step is skipped exactly when x is not finite, p follows the C reference (powers of two: exact),
 * the scale follows ref_update. Gradients are unscaled before the step: by _unscale (then
 * kiln_clip_grad_norm sees the true norm) on even steps, by _step itself on odd ones. */
START_TEST(test_grad_scaler_sequence)
{
    const int64_t n = 4;
    double pv[4] = {1, -2, 0.5, 3}, ref[4];
    memcpy(ref, pv, sizeof ref);
    kiln_tensor *p = leaf(dev, KILN_F32, 1, &n, pv, true);
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_params_add(ps, "p", p));
    kiln_optimizer *opt = NULL;
    ASSERT_OK(kiln_sgd_create(ps, 0.25, 0, 0, &opt));
    kiln_grad_scaler *s = NULL;
    const kiln_grad_scaler_options o = {
        .init_scale = 8, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 3};
    ASSERT_OK(kiln_grad_scaler_create(&o, &s));
    double scale = 8;
    int64_t tracker = 0;
    for (int step = 0; step < 12; step++) {
        double xv[4] = {0.5, -1, 2, 0.25 * (step + 1)};
        bool bad = step == 2 || step == 7 || step == 8 || step == 10;
        if (bad)
            xv[step % 4] = step == 10 ? NAN : (step == 7 ? -INFINITY : INFINITY);
        kiln_tensor *x = upload(dev, KILN_F32, 1, &n, xv), *px = NULL, *loss = NULL, *sl = NULL;
        ASSERT_OK(kiln_mul(p, x, &px));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, px, KILN_ALL_AXES, false, &loss));
        ck_assert(kiln_grad_scaler_get_scale(s) == scale);
        ASSERT_OK(kiln_grad_scaler_scale(s, loss, &sl));
        double lv = 0, slv = 0;
        ASSERT_OK(kiln_tensor_item(loss, &lv));
        ASSERT_OK(kiln_tensor_item(sl, &slv));
        ck_assert(isnan(lv) ? isnan(slv) : slv == lv * scale);
        ASSERT_OK(kiln_optimizer_zero_grad(opt));
        ASSERT_OK(kiln_backward(sl, NULL, 0));
        if (step % 2 == 0) {
            ASSERT_OK(kiln_grad_scaler_unscale(s, opt));
            double *g = download(kiln_tensor_grad(p));
            for (int i = 0; i < 4; i++)
                ck_assert_msg(g[i] == xv[i] || (isnan(g[i]) && isnan(xv[i])),
                              "step %d: unscaled gradient [%d] %g, expected %g", step, i, g[i],
                              xv[i]);
            free(g);
            double norm = 0;
            ASSERT_OK(kiln_clip_grad_norm(ps, 1e30, &norm));
            if (!bad)
                ck_assert(fabs(norm - sqrt(0.25 + 1 + 4 + xv[3] * xv[3])) < 1e-5);
        }
        bool skipped = !bad;
        ASSERT_OK(kiln_grad_scaler_step(s, opt, &skipped));
        ck_assert_msg(skipped == bad, "step %d: skipped %d", step, skipped);
        if (!bad)
            for (int i = 0; i < 4; i++)
                ref[i] -= 0.25 * xv[i];
        double *got = download(p);
        for (int i = 0; i < 4; i++)
            ck_assert_msg(got[i] == ref[i], "step %d: p[%d] = %g, expected %g", step, i, got[i],
                          ref[i]);
        free(got);
        ASSERT_OK(kiln_grad_scaler_update(s));
        ref_update(&scale, &tracker, bad, 4, 0.25, 3);
        ck_assert_msg(kiln_grad_scaler_get_scale(s) == scale, "step %d: scale %g, expected %g",
                      step, kiln_grad_scaler_get_scale(s), scale);
        kiln_tensor_release(x);
        kiln_tensor_release(px);
        kiln_tensor_release(loss);
        kiln_tensor_release(sl);
    }
    /* 8 -> 2 (inf at 2) -> 8 (3 good: 3, 4, 5) -> 2 (7) -> 0.5 (8) -> 0.125 (10): the reference
     * says so, and the loop above checked every step against it */
    ck_assert(scale == 0.125);
    kiln_grad_scaler_free(s);
    kiln_optimizer_free(opt);
    kiln_params_free(ps);
    kiln_tensor_release(p);
}
END_TEST

/* Defaults, disabled pass-through, the state through a checkpoint, and every misuse. */
START_TEST(test_grad_scaler_api)
{
    uint64_t before = live_bytes(dev);
    const int64_t n = 2;
    const double pv[2] = {1, 2}, one[2] = {1, 1};
    kiln_tensor *p = leaf(dev, KILN_F32, 1, &n, pv, true);
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_params_add(ps, "p", p));
    kiln_optimizer *opt = NULL;
    ASSERT_OK(kiln_sgd_create(ps, 0.5, 0, 0, &opt));
    kiln_grad_scaler *s = NULL, *bad = (kiln_grad_scaler *)&before;
    ASSERT_OK(kiln_grad_scaler_create(NULL, &s));
    ck_assert(kiln_grad_scaler_get_scale(s) == 65536.0);
    /* misuse */
    ASSERT_FAILS(kiln_grad_scaler_update(s), KILN_ERR_STATE,
                 "kiln_grad_scaler_update: no inf checks were recorded");
    give_grad(p, one);
    ASSERT_OK(kiln_grad_scaler_unscale(s, opt));
    ASSERT_FAILS(kiln_grad_scaler_unscale(s, opt), KILN_ERR_STATE,
                 "kiln_grad_scaler_unscale: kiln_grad_scaler_unscale has already been called");
    ASSERT_OK(kiln_grad_scaler_step(s, opt, NULL));
    ASSERT_FAILS(kiln_grad_scaler_step(s, opt, NULL), KILN_ERR_STATE,
                 "kiln_grad_scaler_step: kiln_grad_scaler_step has already been called");
    ASSERT_FAILS(kiln_grad_scaler_unscale(s, opt), KILN_ERR_STATE,
                 "kiln_grad_scaler_step has already been called on this optimizer");
    ASSERT_OK(kiln_grad_scaler_update(s));
    ck_assert(kiln_grad_scaler_get_scale(s) == 65536.0); /* 1 of 2000 good steps */
    kiln_tensor *out = (kiln_tensor *)&before, *xi = NULL;
    ASSERT_FAILS(kiln_grad_scaler_scale(NULL, p, &out), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_grad_scaler_scale: the scaler is NULL");
    ck_assert_ptr_null(out);
    ASSERT_FAILS(kiln_grad_scaler_scale(s, NULL, &out), KILN_ERR_INVALID_ARGUMENT, "loss");
    ASSERT_FAILS(kiln_grad_scaler_scale(s, p, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 1, &n, &xi));
    ASSERT_FAILS(kiln_grad_scaler_scale(s, xi, &out), KILN_ERR_DTYPE_MISMATCH,
                 "loss is i32; it must be floating");
    kiln_tensor_release(xi);
    ASSERT_FAILS(kiln_grad_scaler_step(s, NULL, NULL), KILN_ERR_INVALID_ARGUMENT, "opt is NULL");
    ASSERT_FAILS(kiln_grad_scaler_unscale(NULL, opt), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_grad_scaler_unscale: the scaler is NULL");
    ASSERT_FAILS(kiln_grad_scaler_update(NULL), KILN_ERR_INVALID_ARGUMENT, "the scaler is NULL");
    ck_assert(isnan(kiln_grad_scaler_get_scale(NULL)));
    ASSERT_FAILS(kiln_grad_scaler_create(NULL, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    const kiln_grad_scaler_options bads[] = {{.init_scale = -1},       {.init_scale = INFINITY},
                                             {.growth_factor = 1},     {.backoff_factor = 1},
                                             {.backoff_factor = -0.5}, {.growth_interval = -3}};
    const char *const why[] = {"init_scale is -1",       "init_scale is inf",
                               "growth_factor is 1",     "backoff_factor is 1",
                               "backoff_factor is -0.5", "growth_interval is -3"};
    for (int i = 0; i < 6; i++) {
        ASSERT_FAILS(kiln_grad_scaler_create(&bads[i], &bad), KILN_ERR_INVALID_ARGUMENT, why[i]);
        ck_assert_ptr_null(bad);
    }
    kiln_grad_scaler_free(NULL);
    /* disabled: everything passes through */
    kiln_grad_scaler *off = NULL;
    ASSERT_OK(kiln_grad_scaler_create(&(kiln_grad_scaler_options){.disabled = true}, &off));
    ck_assert(kiln_grad_scaler_get_scale(off) == 1.0);
    ASSERT_OK(kiln_grad_scaler_scale(off, p, &out));
    ck_assert_ptr_ne(out, p); /* a new handle on the same values */
    double *same = download(out), *pv_now = download(p);
    ck_assert(same[0] == pv_now[0] && same[1] == pv_now[1]);
    free(same);
    free(pv_now);
    kiln_tensor_release(out);
    ASSERT_OK(kiln_optimizer_zero_grad(opt));
    give_grad(p, one);
    ASSERT_OK(kiln_grad_scaler_unscale(off, opt)); /* nothing */
    ASSERT_OK(kiln_grad_scaler_step(off, opt, NULL));
    ASSERT_OK(kiln_grad_scaler_update(off));
    double *got = download(p);
    /* lr 0.5: the scaled step's gradient was 1 / 65536 (1 given as the scaled gradient), the
     * disabled one's 1 */
    ck_assert(got[0] == 0.5 - 0x1p-17 && got[1] == 1.5 - 0x1p-17);
    free(got);
    kiln_grad_scaler_free(off);
    /* the state through a checkpoint: a backoff and one good step, saved, loaded into a new
     * scaler, which takes them over at its next call */
    char *path = tmp_path("scaler");
    kiln_params *st = NULL, *st2 = NULL;
    ASSERT_OK(kiln_params_create(&st));
    ASSERT_OK(kiln_grad_scaler_state(s, dev, st));
    ck_assert_str_eq(kiln_params_name(st, 0), "grad_scaler.state");
    ASSERT_FAILS(kiln_grad_scaler_state(s, NULL, st), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_grad_scaler_state");
    ASSERT_OK(kiln_optimizer_zero_grad(opt));
    const double inf2[2] = {INFINITY, 1};
    give_grad(p, inf2);
    bool skipped = false;
    ASSERT_OK(kiln_grad_scaler_step(s, opt, &skipped));
    ck_assert(skipped);
    ASSERT_OK(kiln_grad_scaler_update(s));
    ck_assert(kiln_grad_scaler_get_scale(s) == 32768.0);
    ASSERT_OK(kiln_params_save(st, path));
    kiln_grad_scaler *s2 = NULL;
    ASSERT_OK(kiln_grad_scaler_create(NULL, &s2));
    ASSERT_OK(kiln_params_create(&st2));
    ASSERT_OK(kiln_grad_scaler_state(s2, dev, st2));
    ASSERT_OK(kiln_params_load(st2, path));
    ck_assert(kiln_grad_scaler_get_scale(s2) == 32768.0);
    /* a state that is not a scaler's is refused, naming what it holds */
    kiln_grad_scaler *s3 = NULL;
    ASSERT_OK(kiln_grad_scaler_create(&(kiln_grad_scaler_options){.growth_interval = 1}, &s3));
    kiln_params *st3 = NULL;
    ASSERT_OK(kiln_params_create(&st3));
    ASSERT_OK(kiln_grad_scaler_state(s3, dev, st3));
    const int64_t words[2] = {-1, 0};
    ASSERT_OK(kiln_tensor_write(kiln_params_tensor(st3, 0), words, sizeof words));
    ASSERT_FAILS(kiln_grad_scaler_update(s3), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_grad_scaler_update: the loaded grad_scaler.state is not a state");
    unlink(path);
    kiln_grad_scaler_free(s3);
    kiln_grad_scaler_free(s2);
    kiln_grad_scaler_free(s);
    kiln_params_free(st3);
    kiln_params_free(st2);
    kiln_params_free(st);
    kiln_optimizer_free(opt);
    kiln_params_free(ps);
    kiln_tensor_release(p);
    ck_assert_uint_eq(live_bytes(dev), before);
}
END_TEST

START_TEST(test_scheduler_errors)
{
    kiln_params *ps = NULL;
    kiln_optimizer *opt = sched_opt(&ps);
    kiln_scheduler *s = (kiln_scheduler *)ps;
    const int64_t down[2] = {5, 2};
    ASSERT_FAILS(kiln_step_lr_create(opt, 0, 0.5, &s), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_step_lr_create: step_size is 0");
    ck_assert_ptr_null(s);
    ASSERT_FAILS(kiln_step_lr_create(opt, 2, -1, &s), KILN_ERR_INVALID_ARGUMENT, "gamma is -1");
    ASSERT_FAILS(kiln_step_lr_create(NULL, 2, 0.5, &s), KILN_ERR_INVALID_ARGUMENT, "opt is NULL");
    ASSERT_FAILS(kiln_step_lr_create(opt, 2, 0.5, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_multistep_lr_create(opt, down, 2, 0.1, &s), KILN_ERR_INVALID_ARGUMENT,
                 "milestones[1] is 2");
    ASSERT_FAILS(kiln_multistep_lr_create(opt, NULL, 2, 0.1, &s), KILN_ERR_INVALID_ARGUMENT,
                 "milestones is NULL");
    ASSERT_FAILS(kiln_exponential_lr_create(opt, NAN, &s), KILN_ERR_INVALID_ARGUMENT,
                 "gamma is nan");
    ASSERT_FAILS(kiln_cosine_annealing_lr_create(opt, 0, 0, &s), KILN_ERR_INVALID_ARGUMENT,
                 "t_max is 0");
    ASSERT_FAILS(kiln_linear_lr_create(opt, 0, 1, 5, &s), KILN_ERR_INVALID_ARGUMENT,
                 "start_factor is 0");
    ASSERT_FAILS(kiln_reduce_lr_on_plateau_create(opt, false, 1, 10, 1e-4, 0, 0, &s),
                 KILN_ERR_INVALID_ARGUMENT, "factor is 1");
    ASSERT_FAILS(kiln_reduce_lr_on_plateau_create(opt, false, 0.1, -1, 1e-4, 0, 0, &s),
                 KILN_ERR_INVALID_ARGUMENT, "patience is -1");
    ck_assert_ptr_null(s);
    ck_assert(kiln_optimizer_lr(opt) == 0.5); /* refused: the rate untouched */
    /* one scheduler per optimizer; the wrong step; NULLs */
    ASSERT_OK(kiln_linear_lr_create(opt, 0.5, 1, 2, &s));
    ck_assert(kiln_optimizer_lr(opt) == 0.25);
    kiln_scheduler *s2 = NULL;
    ASSERT_FAILS(kiln_exponential_lr_create(opt, 0.9, &s2), KILN_ERR_INVALID_ARGUMENT,
                 "the optimizer has a scheduler already");
    ASSERT_FAILS(kiln_scheduler_step_metric(s, 1), KILN_ERR_INVALID_ARGUMENT,
                 "a LinearLR scheduler takes no metric");
    ASSERT_FAILS(kiln_scheduler_step(NULL), KILN_ERR_INVALID_ARGUMENT, "the scheduler is NULL");
    ASSERT_FAILS(kiln_scheduler_state(s, NULL), KILN_ERR_INVALID_ARGUMENT, "state is NULL");
    ck_assert_int_eq(kiln_scheduler_epoch(NULL), -1);
    kiln_scheduler_free(s);
    ASSERT_OK(kiln_reduce_lr_on_plateau_create(opt, true, 0.1, 10, 1e-4, 0, 0, &s));
    ASSERT_FAILS(kiln_scheduler_step(s), KILN_ERR_INVALID_ARGUMENT,
                 "ReduceLROnPlateau steps on a metric");
    /* the optimizer freed first: the scheduler says so, and frees cleanly */
    kiln_optimizer_free(opt);
    ASSERT_FAILS(kiln_scheduler_step_metric(s, 1), KILN_ERR_INVALID_ARGUMENT,
                 "the scheduler's optimizer was freed");
    kiln_scheduler_free(s);
    kiln_scheduler_free(NULL);
    kiln_params_free(ps);
}
END_TEST

Suite *optim_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tl = tcase_create("params");
    tcase_add_unchecked_fixture(tl, setup, teardown);
    tcase_add_test(tl, test_params_list);
    suite_add_tcase(s, tl);
    TCase *tc = tcase_create("optimizers");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_reference);
    tcase_add_test(tc, test_zero_grad);
    tcase_add_test(tc, test_clip_grad_norm);
    tcase_add_test(tc, test_training_loop);
    tcase_add_test(tc, test_checkpoint_resume);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_create_oom);
    tcase_add_test(tc, test_state_oom);
    suite_add_tcase(s, tc);
    TCase *tsch = tcase_create("schedules");
    tcase_add_unchecked_fixture(tsch, setup, teardown);
    tcase_add_test(tsch, test_schedules);
    tcase_add_test(tsch, test_plateau);
    tcase_add_test(tsch, test_scheduler_resume);
    tcase_add_test(tsch, test_scheduler_errors);
    suite_add_tcase(s, tsch);
    TCase *tsc = tcase_create("scaler");
    tcase_add_unchecked_fixture(tsc, setup, teardown);
    tcase_add_test(tsc, test_grad_scaler_sequence);
    tcase_add_test(tsc, test_grad_scaler_api);
    suite_add_tcase(s, tsc);
    TCase *ts = tcase_create("step-range");
    tcase_add_unchecked_fixture(ts, setup, teardown);
    tcase_add_test(ts, test_step_count_range);
    suite_add_tcase(s, ts);
    return s;
}
