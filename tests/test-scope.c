/* test-scope.c - scopes for temporaries: a whole autograd training step in a scope (the same
 * parameters as the step written with explicit releases, and no tensor left behind), nesting,
 * keep, release inside a scope and on another thread, the end of a scope that is not the
 * innermost, what kiln keeps itself (gradients, checkpoints, parameter lists). The count of live
 * tensor headers (kiln__tensor_live) is the leak check; LSan and valgrind check the rest. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "lib/scope.h"
#include "lib/tensor.h"
#include "testutil.h"

static kiln_device *dev;

static void setup(void)
{
    setup_devices();
    dev = test_device();
}

static void teardown(void)
{
    teardown_devices();
}

static kiln_tensor *from_host_f32(int ndim, const int64_t *shape, const float *v)
{
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, ndim, shape, v, &t));
    return t;
}

/* ---- the training step ------------------------------------------------------------------------
 */

enum { N = 16, D = 2, H = 8, C = 3, STEPS = 50 };

typedef struct model {
    kiln_tensor *w1, *b1, *w2;
} model;

static void model_init(model *m)
{
    float w1[D * H], b1[H], w2[H * C];
    for (int i = 0; i < D * H; i++)
        w1[i] = (float)((i * 7 % 11) - 5) / 10.0f;
    for (int i = 0; i < H; i++)
        b1[i] = (float)(i % 3) / 10.0f;
    for (int i = 0; i < H * C; i++)
        w2[i] = (float)((i * 5 % 13) - 6) / 10.0f;
    m->w1 = from_host_f32(2, (int64_t[]){D, H}, w1);
    m->b1 = from_host_f32(1, (int64_t[]){H}, b1);
    m->w2 = from_host_f32(2, (int64_t[]){H, C}, w2);
    ASSERT_OK(kiln_tensor_set_requires_grad(m->w1, true));
    ASSERT_OK(kiln_tensor_set_requires_grad(m->b1, true));
    ASSERT_OK(kiln_tensor_set_requires_grad(m->w2, true));
}

static void model_free(model *m)
{
    kiln_tensor_release(m->w1);
    kiln_tensor_release(m->b1);
    kiln_tensor_release(m->w2);
}

/* A batch made on the host each step (as a data loader would), labels by the sign pattern. */
static void batch(int step, kiln_tensor **x, kiln_tensor **y)
{
    float xv[N * D];
    int32_t yv[N];
    for (int i = 0; i < N; i++) {
        xv[i * D] = (float)(((i + step) * 37 % 17) - 8) / 8.0f;
        xv[i * D + 1] = (float)(((i * 3 + step) * 29 % 19) - 9) / 9.0f;
        yv[i] = xv[i * D] > 0 ? (xv[i * D + 1] > 0 ? 0 : 1) : 2;
    }
    *x = from_host_f32(2, (int64_t[]){N, D}, xv);
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, (int64_t[]){N}, yv, y));
}

/* One step, every temporary left to the scope: forward, loss, backward, one kiln_sgd_step per
 * parameter. Returns the loss. */
static double step_scoped(model *m, int step)
{
    kiln_tensor *x, *y, *h, *hb, *a, *logits, *loss;
    batch(step, &x, &y);
    ASSERT_OK(kiln_matmul(x, m->w1, &h));
    ASSERT_OK(kiln_add(h, m->b1, &hb));
    ASSERT_OK(kiln_unary(KILN_UNARY_RELU, hb, &a));
    ASSERT_OK(kiln_matmul(a, m->w2, &logits));
    ASSERT_OK(kiln_cross_entropy(logits, y, &loss, NULL));
    ASSERT_OK(kiln_backward(loss, NULL, 0));
    kiln_tensor *ps[3] = {m->w1, m->b1, m->w2};
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(kiln_sgd_step(ps[i], kiln_tensor_grad(ps[i]), NULL, 0.5, 0, 0));
        ASSERT_OK(kiln_tensor_zero_grad(ps[i]));
    }
    double l;
    ASSERT_OK(kiln_tensor_item(loss, &l));
    return l;
}

/* The same step with every release written out: the reference. */
static double step_released(model *m, int step)
{
    kiln_tensor *x, *y, *h, *hb, *a, *logits, *loss;
    batch(step, &x, &y);
    ASSERT_OK(kiln_matmul(x, m->w1, &h));
    ASSERT_OK(kiln_add(h, m->b1, &hb));
    ASSERT_OK(kiln_unary(KILN_UNARY_RELU, hb, &a));
    ASSERT_OK(kiln_matmul(a, m->w2, &logits));
    ASSERT_OK(kiln_cross_entropy(logits, y, &loss, NULL));
    ASSERT_OK(kiln_backward(loss, NULL, 0));
    kiln_tensor *ps[3] = {m->w1, m->b1, m->w2};
    for (int i = 0; i < 3; i++) {
        ASSERT_OK(kiln_sgd_step(ps[i], kiln_tensor_grad(ps[i]), NULL, 0.5, 0, 0));
        ASSERT_OK(kiln_tensor_zero_grad(ps[i]));
    }
    double l;
    ASSERT_OK(kiln_tensor_item(loss, &l));
    kiln_tensor *tmp[] = {x, y, h, hb, a, logits, loss};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++)
        kiln_tensor_release(tmp[i]);
    return l;
}

static void read_all(const model *m, float *out)
{
    ASSERT_OK(kiln_tensor_read(m->w1, out, D * H * sizeof(float)));
    ASSERT_OK(kiln_tensor_read(m->b1, out + D * H, H * sizeof(float)));
    ASSERT_OK(kiln_tensor_read(m->w2, out + D * H + H, H * C * sizeof(float)));
}

START_TEST(test_training_step)
{
    model ref, m;
    model_init(&ref);
    model_init(&m);
    double ref_loss[STEPS], loss[STEPS];
    for (int i = 0; i < STEPS; i++)
        ref_loss[i] = step_released(&ref, i);
    int64_t live0 = kiln__tensor_live();
    for (int i = 0; i < STEPS; i++) {
        kiln_scope *sc;
        ASSERT_OK(kiln_scope_begin(&sc));
        loss[i] = step_scoped(&m, i);
        kiln_scope_end(sc);
        ck_assert_int_eq(kiln__tensor_live(), live0); /* nothing left behind, every step */
    }
    for (int i = 0; i < STEPS; i++)
        ck_assert_msg(loss[i] == ref_loss[i], "step %d: loss %.9g in a scope, %.9g without", i,
                      loss[i], ref_loss[i]);
    ck_assert_msg(loss[STEPS - 1] < 0.5 * loss[0], "the model did not learn: %g -> %g", loss[0],
                  loss[STEPS - 1]);
    float a[D * H + H + H * C], b[D * H + H + H * C];
    read_all(&ref, a);
    read_all(&m, b);
    ck_assert_msg(memcmp(a, b, sizeof a) == 0, "parameters differ from the released run");

    /* The gradients survive the scope (kiln keeps them); the graph is gone with it. */
    kiln_scope *sc;
    ASSERT_OK(kiln_scope_begin(&sc));
    kiln_tensor *x, *y, *h, *loss_t;
    batch(0, &x, &y);
    ASSERT_OK(kiln_matmul(x, m.w1, &h));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, h, KILN_ALL_AXES, false, &loss_t));
    ASSERT_OK(kiln_backward(loss_t, NULL, 0));
    kiln_scope_end(sc);
    kiln_tensor *g = kiln_tensor_grad(m.w1);
    ck_assert_ptr_nonnull(g);
    float gv[D * H];
    ASSERT_OK(kiln_tensor_read(g, gv, sizeof gv)); /* alive: dw1[k][j] = sum_i x[i][k] */
    float xs[D] = {0};
    for (int i = 0; i < N; i++)
        for (int k = 0; k < D; k++)
            xs[k] += (float)((k == 0 ? (i * 37 % 17) - 8 : ((i * 3) * 29 % 19) - 9)) /
                     (k == 0 ? 8.0f : 9.0f);
    for (int k = 0; k < D; k++)
        for (int j = 0; j < H; j++)
            ck_assert_float_eq_tol(gv[k * H + j], xs[k], 1e-4);
    ck_assert_int_eq(kiln__tensor_live(), live0 + 1); /* the gradient */
    model_free(&ref);
    model_free(&m);
}
END_TEST

/* ---- nesting, keep, release -------------------------------------------------------------------
 */

static kiln_tensor *ones(int64_t n)
{
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_ones(dev, KILN_F32, 1, (int64_t[]){n}, &t));
    return t;
}

static float first(const kiln_tensor *t)
{
    float v[4];
    ck_assert_int_le(kiln_tensor_numel(t), 4);
    ASSERT_OK(kiln_tensor_read(t, v, kiln_tensor_nbytes(t)));
    return v[0];
}

START_TEST(test_nested_keep)
{
    int64_t live0 = kiln__tensor_live();
    kiln_scope *outer, *inner;
    ASSERT_OK(kiln_scope_begin(&outer));
    kiln_tensor *a = ones(4), *b, *c, *d, *kept;
    ASSERT_OK(kiln_scope_begin(&inner));
    ASSERT_OK(kiln_add(a, a, &b));       /* inner's */
    ASSERT_OK(kiln_mul(b, b, &c));       /* inner's, kept into outer */
    ASSERT_OK(kiln_tensor_clone(c, &d)); /* inner's */
    ASSERT_OK(kiln_scope_keep(inner, c));
    ASSERT_FAILS(kiln_scope_keep(inner, c), KILN_ERR_INVALID_ARGUMENT, "does not belong");
    ASSERT_FAILS(kiln_scope_keep(inner, a), KILN_ERR_INVALID_ARGUMENT, "does not belong");
    ck_assert_int_eq(kiln__tensor_live(), live0 + 4);
    kiln_scope_end(inner); /* b and d go */
    ck_assert_int_eq(kiln__tensor_live(), live0 + 2);
    ck_assert_float_eq(first(c), 4.0f);
    /* Kept out of the outermost scope: the caller owns it. */
    ASSERT_OK(kiln_add(c, a, &kept));
    ASSERT_OK(kiln_scope_keep(outer, kept));
    kiln_scope_end(outer); /* a and c go */
    ck_assert_int_eq(kiln__tensor_live(), live0 + 1);
    ck_assert_float_eq(first(kept), 5.0f);
    kiln_tensor_release(kept);
    ck_assert_int_eq(kiln__tensor_live(), live0);

    /* Bad arguments. */
    ASSERT_FAILS(kiln_scope_begin(NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    kiln_tensor *free_t = ones(1);
    ASSERT_FAILS(kiln_scope_keep(NULL, free_t), KILN_ERR_INVALID_ARGUMENT, "scope is NULL");
    ASSERT_OK(kiln_scope_begin(&outer));
    ASSERT_FAILS(kiln_scope_keep(outer, NULL), KILN_ERR_INVALID_ARGUMENT, "tensor is NULL");
    ASSERT_FAILS(kiln_scope_keep(outer, free_t), KILN_ERR_INVALID_ARGUMENT, "does not belong");
    kiln_scope_end(outer);
    kiln_scope_end(NULL);
    kiln_tensor_release(free_t);
    ck_assert_int_eq(kiln__tensor_live(), live0);
}
END_TEST

START_TEST(test_release_inside)
{
    int64_t live0 = kiln__tensor_live();
    kiln_scope *sc;
    ASSERT_OK(kiln_scope_begin(&sc));
    kiln_tensor *a = ones(4), *b = ones(4), *v, *r, *same;
    kiln_tensor_release(a); /* released by hand: the scope must not release it again */
    ck_assert_int_eq(kiln__tensor_live(), live0 + 1);
    /* Retained, then released once: the reference left is the caller's, past the scope. */
    kiln_tensor_retain(b);
    kiln_tensor_release(b);
    /* Views and to() onto the same device are new handles the scope owns. */
    ASSERT_OK(kiln_tensor_reshape(b, 2, (int64_t[]){2, 2}, &v));
    ASSERT_OK(kiln_tensor_to(b, dev, &same));
    ck_assert_ptr_ne(same, b);
    kiln_tensor *rr = ones(2);
    r = kiln_tensor_retain(rr); /* an extra reference survives the scope */
    kiln_scope_end(sc);
    ck_assert_int_eq(kiln__tensor_live(), live0 + 2); /* b and rr */
    ck_assert_float_eq(first(b), 1.0f);
    ck_assert_float_eq(first(r), 1.0f);
    kiln_tensor_release(b);
    kiln_tensor_release(r);
    ck_assert_int_eq(kiln__tensor_live(), live0);
    /* Releasing a graph by hand drops its references to the inputs, which stay the scope's. */
    ASSERT_OK(kiln_scope_begin(&sc));
    kiln_tensor *x = ones(3), *y;
    ASSERT_OK(kiln_tensor_set_requires_grad(x, true));
    ASSERT_OK(kiln_mul(x, x, &y)); /* the node holds x twice */
    kiln_tensor_release(y);
    ck_assert_int_eq(kiln__tensor_live(), live0 + 1);
    ck_assert_float_eq(first(x), 1.0f);
    kiln_scope_end(sc);
    ck_assert_int_eq(kiln__tensor_live(), live0);
    /* A read after the scope released it names the fix, kiln_scope_keep (issue 22); a tensor
     * the caller released names kiln_tensor_retain. */
    ASSERT_OK(kiln_scope_begin(&sc));
    kiln_tensor *c = ones(1), *d = ones(1);
    kiln_tensor_release(d);
    kiln_scope_end(sc);
    float val;
    ASSERT_FAILS(kiln_tensor_read(c, &val, sizeof val), KILN_ERR_INVALID_ARGUMENT,
                 "was released when the scope it was made in ended (kiln_scope_end); to use it "
                 "after the scope, call kiln_scope_keep(scope, tensor) before kiln_scope_end");
    ck_assert_ptr_null(strstr(kiln_last_error(), "kiln_tensor_retain"));
    ASSERT_FAILS(kiln_tensor_read(d, &val, sizeof val), KILN_ERR_INVALID_ARGUMENT,
                 "was already released; keep a reference with kiln_tensor_retain()");
    /* A double release after the scope released it is reported, not a crash. */
    kiln_tensor_release(c);
    ASSERT_ERROR_HAS("already released");
    ck_assert_int_eq(kiln__tensor_live(), live0);
}
END_TEST

typedef struct rel_arg {
    kiln_tensor **ts;
    int n;
} rel_arg;

static void *release_all(void *p)
{
    rel_arg *a = p;
    for (int i = 0; i < a->n; i++)
        kiln_tensor_release(a->ts[i]);
    return NULL;
}

/* Tensors a thread creates while another holds a scope are not the other's. */
static void *create_one(void *p)
{
    *(kiln_tensor **)p = NULL;
    kiln_ones(dev, KILN_F32, 1, (int64_t[]){1}, (kiln_tensor **)p);
    return NULL;
}

START_TEST(test_threads)
{
    int64_t live0 = kiln__tensor_live();
    enum { M = 64 };
    kiln_tensor *ts[M];
    kiln_scope *sc;
    ASSERT_OK(kiln_scope_begin(&sc));
    for (int i = 0; i < M; i++)
        ts[i] = ones(1);
    kiln_tensor *keep_alive = ones(1);
    /* Half released on another thread while this one keeps creating in the scope. */
    rel_arg a = {ts, M / 2};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, release_all, &a), 0);
    for (int i = 0; i < M; i++) {
        kiln_tensor *t;
        ASSERT_OK(kiln_add(keep_alive, keep_alive, &t));
    }
    kiln_tensor *other;
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(pthread_create(&th, NULL, create_one, &other), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_ptr_nonnull(other);
    ck_assert_int_eq(kiln__tensor_live(), live0 + M / 2 + 1 + M + 1);
    ASSERT_FAILS(kiln_scope_keep(sc, other), KILN_ERR_INVALID_ARGUMENT, "does not belong");
    kiln_scope_end(sc);
    ck_assert_int_eq(kiln__tensor_live(), live0 + 1); /* the other thread's tensor */
    kiln_tensor_release(other);
    ck_assert_int_eq(kiln__tensor_live(), live0);
}
END_TEST

typedef struct end_arg {
    kiln_scope *sc;
    kiln_status st;
} end_arg;

static void *end_foreign(void *p)
{
    end_arg *a = p;
    kiln_scope_end(a->sc); /* not this thread's scope: reported, nothing done */
    return NULL;
}

START_TEST(test_end_not_innermost)
{
    int64_t live0 = kiln__tensor_live();
    kiln_scope *s1, *s2, *s3;
    ASSERT_OK(kiln_scope_begin(&s1));
    kiln_tensor *a = ones(1);
    ASSERT_OK(kiln_scope_begin(&s2));
    kiln_tensor *b = ones(1);
    ASSERT_OK(kiln_scope_begin(&s3));
    kiln_tensor *c = ones(1);
    (void)a;
    (void)b;
    (void)c;
    end_arg ea = {s3, KILN_OK};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, end_foreign, &ea), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(kiln__tensor_live(), live0 + 3);
    kiln_scope_end(s2); /* ends s3 first, logs an error */
    ASSERT_ERROR_HAS("not the innermost scope");
    ck_assert_int_eq(kiln__tensor_live(), live0 + 1);
    /* s1 is the innermost again: new tensors are its own. */
    kiln_tensor *d = ones(1);
    (void)d;
    ck_assert_int_eq(kiln__tensor_live(), live0 + 2);
    kiln_scope_end(s1);
    ck_assert_int_eq(kiln__tensor_live(), live0);
    /* No scope open now: a tensor is the caller's. */
    kiln_tensor *e = ones(1);
    ck_assert_int_eq(kiln__tensor_live(), live0 + 1);
    kiln_tensor_release(e);
}
END_TEST

/* A handle used after its scope ended (issue 21, defect 2): a stale handle while a new scope is
 * open (which, when a scope's handle was its memory, could be the very same address: the stale
 * handle ended the new scope), ended twice, and ended by its outer scope's end. Each is refused
 * with a message and changes nothing; under ASan the old code read freed memory. */
START_TEST(test_stale_handles)
{
    int64_t live0 = kiln__tensor_live();
    kiln_tensor *a;
    for (int round = 0; round < 8; round++) {
        kiln_scope *old, *now;
        ASSERT_OK(kiln_scope_begin(&old));
        kiln_scope_end(old);
        ASSERT_OK(kiln_scope_begin(&now)); /* malloc may hand it old's memory */
        a = ones(1);
        kiln_scope_end(old); /* stale: must not end `now` */
        ck_assert_int_eq(kiln__tensor_live(), live0 + 1);
        ASSERT_ERROR_HAS("is not open");
        ck_assert_ptr_ne(now, old);
        ck_assert_int_eq(kiln_scope_keep(old, a), KILN_ERR_INVALID_ARGUMENT);
        ASSERT_ERROR_HAS("kiln_scope_keep: scope");
        ck_assert_int_eq(kiln__tensor_live(), live0 + 1);
        ASSERT_OK(kiln_scope_keep(now, a)); /* still now's */
        kiln_scope_end(now);
        ck_assert_int_eq(kiln__tensor_live(), live0 + 1);
        kiln_tensor_release(a);
        ck_assert_int_eq(kiln__tensor_live(), live0);
    }

    kiln_scope *outer, *inner;
    ASSERT_OK(kiln_scope_begin(&outer));
    ASSERT_OK(kiln_scope_begin(&inner));
    (void)ones(1);         /* inner's */
    kiln_scope_end(outer); /* ends inner first, logs an error */
    ASSERT_ERROR_HAS("not the innermost scope");
    ck_assert_int_eq(kiln__tensor_live(), live0);
    kiln_scope_end(inner); /* ended by outer's end */
    ASSERT_ERROR_HAS("is not open: it has ended");
    kiln_scope_end(outer); /* ended twice */
    ASSERT_ERROR_HAS("is not open: it has ended");

    /* A forged handle and NULL. */
    a = ones(1);
    ck_assert_int_eq(kiln_scope_keep((kiln_scope *)&live0, a), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("not a handle from kiln_scope_begin");
    ck_assert_int_eq(kiln_scope_keep(NULL, a), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("kiln_scope_keep: scope is NULL");
    kiln_scope_end((kiln_scope *)&live0);
    ASSERT_ERROR_HAS("is not open");
    kiln_tensor_release(a);
    ck_assert_int_eq(kiln__tensor_live(), live0);
}
END_TEST

/* ---- what kiln keeps itself -------------------------------------------------------------------
 */

START_TEST(test_kiln_keeps)
{
    int64_t live0 = kiln__tensor_live();
    char path[] = "/tmp/kiln-scope-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    kiln_tensor *w = ones(4);
    ASSERT_OK(kiln_save(path, (kiln_named_tensor[]){{"w", w}}, 1));
    kiln_checkpoint *ck;
    kiln_params *ps;
    ASSERT_OK(kiln_params_create(&ps));
    kiln_scope *sc;
    ASSERT_OK(kiln_scope_begin(&sc));
    ASSERT_OK(kiln_load(path, dev, &ck));
    kiln_tensor *p = ones(2);
    ASSERT_OK(kiln_params_add(ps, "p", p)); /* the list's own reference survives the scope */
    kiln_tensor *q = ones(2);
    ASSERT_OK(kiln_params_add(ps, "q", q));
    kiln_tensor_release(q); /* the scope's reference: the list's is the last */
    kiln_scope_end(sc);
    ck_assert_float_eq(first(kiln_checkpoint_find(ck, "w")), 1.0f);
    ck_assert_float_eq(first(kiln_params_find(ps, "p")), 1.0f);
    ck_assert_float_eq(first(kiln_params_find(ps, "q")), 1.0f);
    ck_assert_int_eq(kiln__tensor_live(), live0 + 4);
    /* Freeing the list inside a scope does not take its tensors out of it. */
    ASSERT_OK(kiln_scope_begin(&sc));
    kiln_tensor *r = ones(2);
    ASSERT_OK(kiln_params_add(ps, "r", r));
    kiln_params_free(ps); /* p and q go; r is still the scope's */
    ck_assert_int_eq(kiln__tensor_live(), live0 + 3);
    kiln_scope_end(sc);
    ck_assert_int_eq(kiln__tensor_live(), live0 + 2);
    kiln_checkpoint_free(ck);
    kiln_tensor_release(w);
    ck_assert_int_eq(kiln__tensor_live(), live0);
    unlink(path);
}
END_TEST

/* Modules and an optimizer in scopes: a step through a Sequential (with a dropout in eval mode,
 * which returns a new handle on its input) leaves nothing behind but the leaves' gradients, and a
 * model and optimizer made inside a scope outlive it. */
START_TEST(test_modules_optimizer)
{
    int64_t live0 = kiln__tensor_live();
    kiln_scope *sc;
    ASSERT_OK(kiln_scope_begin(&sc));
    kiln_module *layers[4] = {NULL, NULL, NULL, NULL}, *model;
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, D, H, true, KILN_INIT_HE, 7, &layers[0]));
    ASSERT_OK(kiln_dropout_create(0.5, 1, &layers[1]));
    ASSERT_OK(kiln_activation_create(KILN_UNARY_RELU, &layers[2]));
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, H, C, true, KILN_INIT_HE, 8, &layers[3]));
    ASSERT_OK(kiln_sequential_create(layers, 4, &model));
    kiln_module_set_training(model, false);
    kiln_params *ps;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(model, "", ps));
    kiln_optimizer *opt;
    ASSERT_OK(kiln_adam_create(ps, 1e-2, 0.9, 0.999, 1e-8, 0.0, &opt));
    kiln_scope_end(sc); /* the model, the list and the optimizer are not the scope's */
    int64_t live1 = kiln__tensor_live();
    ck_assert_int_eq(live1, live0 + 4); /* two weights, two biases */
    double first_loss = 0, loss_v = 0;
    for (int step = 0; step < 20; step++) {
        ASSERT_OK(kiln_scope_begin(&sc));
        kiln_tensor *x, *y, *logits, *loss;
        batch(step % 4, &x, &y);
        ASSERT_OK(kiln_module_forward(model, x, &logits));
        ASSERT_OK(kiln_cross_entropy(logits, y, &loss, NULL));
        ASSERT_OK(kiln_optimizer_zero_grad(opt));
        ASSERT_OK(kiln_backward(loss, NULL, 0));
        ASSERT_OK(kiln_optimizer_step(opt));
        ASSERT_OK(kiln_tensor_item(loss, &loss_v));
        kiln_scope_end(sc);
        if (step == 0)
            first_loss = loss_v;
        /* The gradients (4) and Adam's state (2 moments and a step count per parameter, made at
         * the first step) are all that stays. */
        if (step == 0)
            live1 = kiln__tensor_live();
        ck_assert_int_eq(kiln__tensor_live(), live1);
    }
    ck_assert_double_lt(loss_v, first_loss);
    kiln_optimizer_free(opt);
    kiln_params_free(ps);
    kiln_module_free(model);
    ck_assert_int_eq(kiln__tensor_live(), live0);
}
END_TEST

Suite *scope_suite(void)
{
    Suite *s = suite_create("scope");
    TCase *tc = tcase_create("scope");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_training_step);
    tcase_add_test(tc, test_nested_keep);
    tcase_add_test(tc, test_release_inside);
    tcase_add_test(tc, test_threads);
    tcase_add_test(tc, test_end_not_innermost);
    tcase_add_test(tc, test_stale_handles);
    tcase_add_test(tc, test_kiln_keeps);
    tcase_add_test(tc, test_modules_optimizer);
    suite_add_tcase(s, tc);
    return s;
}
