/* test-amp.c - autocast (issue 25): PyTorch's policy op by op, each result bit-identical to the
 * same op run on inputs cast by hand; gradients through autocast in the parameters' dtype;
 * regions per thread, nesting, other device types, the _out forms; misuse; and a small
 * classifier trained under autocast with the gradient scaler reaching the f32 run's accuracy. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "testutil.h"

static kiln_device *dev;
static kiln_device_type dev_type;

static void setup(void)
{
    setup_devices();
    dev = test_device();
    kiln_device_info info;
    ASSERT_OK(kiln_device_info_get(dev, &info));
    dev_type = info.type;
}

static void teardown(void)
{
    while (kiln_autocast_end() == KILN_OK) /* a failed test may leave regions open */
        ;
    teardown_devices();
}

static kiln_tensor *rand_t(kiln_dtype dt, int ndim, const int64_t *shape, uint64_t seed)
{
    kiln_tensor *f = NULL, *t = NULL;
    ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, ndim, shape, seed, -1.0, 1.0, &f));
    if (dt == KILN_F32)
        return f;
    ASSERT_OK(kiln_cast(f, dt, &t));
    kiln_tensor_release(f);
    return t;
}

static kiln_tensor *cast(const kiln_tensor *t, kiln_dtype dt)
{
    kiln_tensor *r = NULL;
    ASSERT_OK(kiln_cast(t, dt, &r));
    return r;
}

/* got and want: same dtype, shape and bytes. */
static void assert_same(const kiln_tensor *got, const kiln_tensor *want, const char *what)
{
    ck_assert_msg(kiln_tensor_dtype(got) == kiln_tensor_dtype(want), "%s: dtype %s, expected %s",
                  what, kiln_dtype_name(kiln_tensor_dtype(got)),
                  kiln_dtype_name(kiln_tensor_dtype(want)));
    ck_assert_int_eq(kiln_tensor_numel(got), kiln_tensor_numel(want));
    void *a = read_host(got), *b = read_host(want);
    size_t n = (size_t)kiln_tensor_numel(got) * kiln_dtype_size(kiln_tensor_dtype(got));
    ck_assert_msg(memcmp(a, b, n) == 0, "%s: values differ from the hand-cast reference", what);
    free(a);
    free(b);
}

/* Each op under autocast against the same op on inputs cast by hand, outside any region; with
 * lo and with KILN_BF16 (the loop's index). */
START_TEST(test_policy)
{
    const kiln_dtype lo = _i ? KILN_BF16 : KILN_F16;
    const int64_t s45[2] = {4, 5}, s53[2] = {5, 3}, s35[2] = {3, 5}, s3 = 3, sx[4] = {2, 3, 6, 6},
                  sw[4] = {4, 3, 3, 3}, s4 = 4;
    kiln_tensor *a = rand_t(KILN_F32, 2, s45, 1), *b = rand_t(KILN_F32, 2, s53, 2);
    kiln_tensor *w = rand_t(KILN_F32, 2, s35, 3), *bias = rand_t(KILN_F32, 1, &s3, 4);
    kiln_tensor *x = rand_t(KILN_F32, 4, sx, 5), *cw = rand_t(KILN_F32, 4, sw, 6);
    kiln_tensor *cb = rand_t(KILN_F32, 1, &s4, 7), *h = rand_t(lo, 2, s45, 8);
    kiln_tensor *hf = cast(h, KILN_F32);
    kiln_tensor *ha = cast(a, lo), *hb = cast(b, lo), *hw = cast(w, lo);
    kiln_tensor *hbias = cast(bias, lo), *hx = cast(x, lo), *hcw = cast(cw, lo);
    kiln_tensor *hcb = cast(cb, lo);
    int64_t lv[4] = {0, 2, 4, 1};
    kiln_tensor *labels = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 1, &s4, lv, &labels));
    enum { N = 20 };
    kiln_tensor *got[N] = {0}, *want[N] = {0};
    const char *names[N] = {"matmul",     "matmul_trans", "linear",      "conv2d",
                            "softmax",    "log_softmax",  "logsumexp",   "sum",
                            "max (f16)",  "mean (f16)",   "cross_ent.",  "mse",
                            "layer_norm", "exp",          "relu (f16)",  "pow",
                            "pow scalar", "add f16+f32",  "add f16+f16", "batch_norm"};
    kiln_tensor *grad = NULL;
    for (int pass = 0; pass < 2; pass++) {
        kiln_tensor **r = pass ? got : want;
        if (pass)
            ASSERT_OK(kiln_autocast_begin(dev_type, lo));
        ck_assert_int_eq(kiln_autocast_dtype(dev), pass ? lo : KILN_F32);
        ASSERT_OK(kiln_matmul(pass ? a : ha, pass ? b : hb, &r[0]));
        ASSERT_OK(kiln_matmul_trans(pass ? a : ha, pass ? w : hw, KILN_MATMUL_TRANS_B, &r[1]));
        ASSERT_OK(kiln_linear(pass ? a : ha, pass ? w : hw, pass ? bias : hbias, &r[2]));
        ASSERT_OK(kiln_conv2d(pass ? x : hx, pass ? cw : hcw, pass ? cb : hcb, NULL, &r[3]));
        ASSERT_OK(kiln_softmax(pass ? h : hf, 1, &r[4]));
        ASSERT_OK(kiln_log_softmax(pass ? h : hf, 1, &r[5]));
        ASSERT_OK(kiln_logsumexp(pass ? h : hf, 1, false, &r[6]));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, pass ? h : hf, 0, false, &r[7]));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_MAX, h, 0, false, &r[8]));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_MEAN, h, 0, false, &r[9]));
        ASSERT_OK(kiln_cross_entropy(pass ? h : hf, labels, &r[10], pass ? &grad : NULL));
        ASSERT_OK(kiln_mse_loss(pass ? h : hf, a, &r[11], NULL));
        ASSERT_OK(kiln_layer_norm(pass ? h : hf, NULL, NULL, 1e-5, &r[12]));
        ASSERT_OK(kiln_unary(KILN_UNARY_EXP, pass ? h : hf, &r[13]));
        ASSERT_OK(kiln_unary(KILN_UNARY_RELU, h, &r[14]));
        ASSERT_OK(kiln_binary(KILN_BINARY_POW, pass ? h : hf, a, &r[15]));
        ASSERT_OK(kiln_binary_scalar(KILN_BINARY_POW, pass ? h : hf, 2.0, &r[16]));
        ASSERT_OK(kiln_add(h, a, &r[17]));
        ASSERT_OK(kiln_add(h, h, &r[18]));
        /* batch norm computes in f32 and gives the 16-bit input's dtype back */
        kiln_tensor *hx32 = pass ? NULL : cast(hx, KILN_F32), *bn32 = NULL;
        ASSERT_OK(kiln_batch_norm(pass ? hx : hx32, NULL, NULL, bias, bias, true, 0.1, 1e-5,
                                  pass ? &r[19] : &bn32));
        if (!pass)
            r[19] = cast(bn32, lo);
        kiln_tensor_release(hx32);
        kiln_tensor_release(bn32);
        if (pass)
            ASSERT_OK(kiln_autocast_end());
    }
    const kiln_dtype expect[N] = {
        lo,       lo,       lo,       lo,       KILN_F32, KILN_F32, KILN_F32, KILN_F32, lo, lo,
        KILN_F32, KILN_F32, KILN_F32, KILN_F32, lo,       KILN_F32, KILN_F32, KILN_F32, lo, lo};
    for (int i = 0; i < N; i++) {
        ck_assert_msg(kiln_tensor_dtype(got[i]) == expect[i], "%s under autocast gave %s", names[i],
                      kiln_dtype_name(kiln_tensor_dtype(got[i])));
        assert_same(got[i], want[i], names[i]);
    }
    /* the cross-entropy's gradient (logits f16, computed in f32) is f32 too */
    ck_assert_int_eq(kiln_tensor_dtype(grad), KILN_F32);
    for (int i = 0; i < N; i++) {
        kiln_tensor_release(got[i]);
        kiln_tensor_release(want[i]);
    }
    kiln_tensor *all[] = {a,  b,  w,  bias,  x,  cw,  cb,  h,      hf,
                          ha, hb, hw, hbias, hx, hcw, hcb, labels, grad};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
}
END_TEST

/* f64 and the _out forms are left alone; another device type's region, or a nested KILN_F32
 * one, changes nothing; regions nest and end in order; misuse. */
START_TEST(test_regions)
{
    const int64_t s22[2] = {2, 2};
    kiln_tensor *a = rand_t(KILN_F32, 2, s22, 11), *c = NULL, *out = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 2, s22, &out));
    kiln_device_type other = dev_type == KILN_DEVICE_GPU ? KILN_DEVICE_CPU : KILN_DEVICE_GPU;
    ASSERT_OK(kiln_autocast_begin(other, KILN_F16));
    ck_assert_int_eq(kiln_autocast_dtype(dev), KILN_F32);
    ASSERT_OK(kiln_matmul(a, a, &c));
    ck_assert_int_eq(kiln_tensor_dtype(c), KILN_F32);
    kiln_tensor_release(c);
    ASSERT_OK(kiln_autocast_begin(KILN_DEVICE_ALL, KILN_F16));
    ck_assert_int_eq(kiln_autocast_dtype(dev), KILN_F16);
    ASSERT_OK(kiln_matmul_out(a, a, out));              /* _out: its out's dtype */
    ASSERT_OK(kiln_autocast_begin(dev_type, KILN_F32)); /* off inside */
    ck_assert_int_eq(kiln_autocast_dtype(dev), KILN_F32);
    ASSERT_OK(kiln_matmul(a, a, &c));
    ck_assert_int_eq(kiln_tensor_dtype(c), KILN_F32);
    kiln_tensor_release(c);
    ASSERT_OK(kiln_autocast_end());
    ck_assert_int_eq(kiln_autocast_dtype(dev), KILN_F16);
    if (has_fp64(dev)) {
        kiln_tensor *d = cast(a, KILN_F64);
        ASSERT_OK(kiln_matmul(d, d, &c));
        ck_assert_int_eq(kiln_tensor_dtype(c), KILN_F64); /* f64 is not eligible */
        kiln_tensor_release(c);
        kiln_tensor_release(d);
    }
    ASSERT_OK(kiln_autocast_end());
    ASSERT_OK(kiln_autocast_end());
    ck_assert_int_eq(kiln_autocast_dtype(dev), KILN_F32);
    ck_assert_int_eq(kiln_autocast_dtype(NULL), KILN_F32);
    ASSERT_FAILS(kiln_autocast_end(), KILN_ERR_STATE, "kiln_autocast_end: no autocast region");
    ASSERT_FAILS(kiln_autocast_begin(dev_type, KILN_F64), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_autocast_begin: dtype f64");
    ASSERT_FAILS(kiln_autocast_begin(dev_type, KILN_I32), KILN_ERR_INVALID_ARGUMENT, "dtype i32");
    ASSERT_FAILS(kiln_autocast_begin(dev_type, (kiln_dtype)99), KILN_ERR_INVALID_ARGUMENT,
                 "unknown");
    ASSERT_FAILS(kiln_autocast_begin((kiln_device_type)0, KILN_F16), KILN_ERR_INVALID_ARGUMENT,
                 "device type 0x0");
    ASSERT_FAILS(kiln_autocast_begin((kiln_device_type)64, KILN_F16), KILN_ERR_INVALID_ARGUMENT,
                 "device type 0x40");
    int opened = 0;
    while (kiln_autocast_begin(dev_type, KILN_F16) == KILN_OK)
        opened++;
    ck_assert_int_eq(opened, 32);
    ASSERT_ERROR_HAS("nested deeper than 32");
    while (opened--)
        ASSERT_OK(kiln_autocast_end());
    kiln_tensor_release(a);
    kiln_tensor_release(out);
}
END_TEST

static void *other_thread(void *arg)
{
    *(kiln_dtype *)arg = kiln_autocast_dtype(dev);
    return NULL;
}

/* A region is the calling thread's alone. */
START_TEST(test_per_thread)
{
    ASSERT_OK(kiln_autocast_begin(KILN_DEVICE_ALL, KILN_F16));
    kiln_dtype seen = KILN_F16;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, &seen), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(seen, KILN_F32);
    ck_assert_int_eq(kiln_autocast_dtype(dev), KILN_F16);
    ASSERT_OK(kiln_autocast_end());
}
END_TEST

/* A linear layer's f32 weight under autocast: the forward in f16, the loss in f32, the backward
 * (run inside the region: autocast is suspended there) gives f32 gradients equal to those of the
 * same computation written with explicit casts. */
START_TEST(test_gradients)
{
    const int64_t sx[2] = {6, 5}, sw[2] = {4, 5}, s4 = 4, s6 = 6;
    int64_t lv[6] = {0, 1, 2, 3, 1, 0};
    kiln_tensor *x = rand_t(KILN_F32, 2, sx, 21), *labels = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 1, &s6, lv, &labels));
    kiln_tensor *w[2], *b[2], *y[2] = {0}, *loss[2] = {0};
    for (int pass = 0; pass < 2; pass++) {
        w[pass] = rand_t(KILN_F32, 2, sw, 22);
        b[pass] = rand_t(KILN_F32, 1, &s4, 23);
        ASSERT_OK(kiln_tensor_set_requires_grad(w[pass], true));
        ASSERT_OK(kiln_tensor_set_requires_grad(b[pass], true));
        if (pass) {
            ASSERT_OK(kiln_autocast_begin(dev_type, KILN_F16));
            ASSERT_OK(kiln_linear(x, w[1], b[1], &y[1]));
            ASSERT_OK(kiln_cross_entropy(y[1], labels, &loss[1], NULL));
            ASSERT_OK(kiln_backward(loss[1], NULL, 0));
            ASSERT_OK(kiln_autocast_end());
        } else {
            kiln_tensor *hx = cast(x, KILN_F16), *hw = cast(w[0], KILN_F16),
                        *hb = cast(b[0], KILN_F16), *yh = NULL, *yf = NULL;
            ASSERT_OK(kiln_linear(hx, hw, hb, &yh));
            yf = cast(yh, KILN_F32);
            ASSERT_OK(kiln_cross_entropy(yf, labels, &loss[0], NULL));
            ASSERT_OK(kiln_backward(loss[0], NULL, 0));
            y[0] = yh;
            kiln_tensor_release(yf);
            kiln_tensor_release(hx);
            kiln_tensor_release(hw);
            kiln_tensor_release(hb);
        }
    }
    ck_assert_int_eq(kiln_tensor_dtype(y[1]), KILN_F16);
    ck_assert_int_eq(kiln_tensor_dtype(loss[1]), KILN_F32);
    assert_same(y[1], y[0], "linear forward");
    assert_same(loss[1], loss[0], "loss");
    for (int pass = 0; pass < 2; pass++) {
        ck_assert_int_eq(kiln_tensor_dtype(kiln_tensor_grad(w[pass])), KILN_F32);
        ck_assert_int_eq(kiln_tensor_dtype(kiln_tensor_grad(b[pass])), KILN_F32);
    }
    assert_same(kiln_tensor_grad(w[1]), kiln_tensor_grad(w[0]), "weight gradient");
    assert_same(kiln_tensor_grad(b[1]), kiln_tensor_grad(b[0]), "bias gradient");
    for (int pass = 0; pass < 2; pass++) {
        kiln_tensor_release(w[pass]);
        kiln_tensor_release(b[pass]);
        kiln_tensor_release(y[pass]);
        kiln_tensor_release(loss[pass]);
    }
    kiln_tensor_release(x);
    kiln_tensor_release(labels);
}
END_TEST

/* Autocast's 16-bit copy of an f32 weight is not kept for the backward (the backward casts the
 * weight again): after a linear forward under autocast the device holds far less than that copy
 * more, and the gradient is the one test_gradients checks against explicit casts. */
START_TEST(test_weight_copy_not_kept)
{
    /* small on a simulator (Oclgrind allocates exact sizes; CPU devices round to size classes) */
    const int64_t in = simulated(dev) ? 64 : 256, out = simulated(dev) ? 128 : 512;
    const int64_t sx[2] = {simulated(dev) ? 2 : 4, in}, sw[2] = {out, in};
    kiln_tensor *x = rand_t(KILN_F32, 2, sx, 31), *w = rand_t(KILN_F32, 2, sw, 32), *y = NULL;
    kiln_tensor *sum = NULL;
    ASSERT_OK(kiln_tensor_set_requires_grad(w, true));
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_memory_stats before, after;
    ASSERT_OK(kiln_device_memory_stats(dev, &before));
    ASSERT_OK(kiln_autocast_begin(dev_type, KILN_F16));
    ASSERT_OK(kiln_linear(x, w, NULL, &y));
    ASSERT_OK(kiln_autocast_end());
    ASSERT_OK(kiln_device_memory_stats(dev, &after));
    uint64_t held = after.allocated_bytes - before.allocated_bytes, copy = (uint64_t)(out * in * 2);
    ck_assert_msg(held < copy / 4, "%llu bytes held after the forward (the f16 weight: %llu)",
                  (unsigned long long)held, (unsigned long long)copy);
    /* twice through the kept graph (the weight cast again each time), then it is freed */
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, y, KILN_ALL_AXES, false, &sum));
    ASSERT_OK(kiln_backward(sum, NULL, KILN_BACKWARD_RETAIN_GRAPH));
    ck_assert_int_eq(kiln_tensor_dtype(kiln_tensor_grad(w)), KILN_F32);
    kiln_tensor *once = NULL, *twice = NULL;
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, kiln_tensor_grad(w), 2.0, &once));
    ASSERT_OK(kiln_backward(sum, NULL, 0));
    ASSERT_OK(kiln_tensor_clone(kiln_tensor_grad(w), &twice));
    assert_same(twice, once, "two backwards' gradient");
    ASSERT_FAILS(kiln_backward(sum, NULL, 0), KILN_ERR_STATE, "was already freed");
    kiln_tensor_release(once);
    kiln_tensor_release(twice);
    kiln_tensor_release(sum);
    kiln_tensor_release(y);
    kiln_tensor_release(x);
    kiln_tensor_release(w);
}
END_TEST

/* A 2-32-3 MLP on three separable blobs, trained with Adam for the same steps in f32, under f16
 * autocast with the gradient scaler and under bf16 autocast (f32 master weights): each
 * classifies >= 95% of the points, within 3 points of f32. lo: the autocast dtype, KILN_F32 off. */
static double train(kiln_dtype lo, int steps)
{
    bool amp = lo != KILN_F32;
    enum { B = 96 };
    double xv[B * 2];
    int64_t lv[B];
    for (int i = 0; i < B; i++) {
        int c = i % 3;
        double angle = 2.0943951 * c;
        xv[2 * i] = 2 * cos(angle) + 0.6 * (rnd() - 0.5);
        xv[2 * i + 1] = 2 * sin(angle) + 0.6 * (rnd() - 0.5);
        lv[i] = c;
    }
    const int64_t sx[2] = {B, 2}, sl = B;
    kiln_tensor *x = upload(dev, KILN_F32, 2, sx, xv), *labels = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 1, &sl, lv, &labels));
    kiln_module *mods[3] = {0}, *model = NULL;
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 2, 32, true, KILN_INIT_DEFAULT, 5, &mods[0]));
    ASSERT_OK(kiln_activation_create(KILN_UNARY_RELU, &mods[1]));
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 32, 3, true, KILN_INIT_DEFAULT, 6, &mods[2]));
    ASSERT_OK(kiln_sequential_create(mods, 3, &model));
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(model, NULL, ps));
    kiln_optimizer *opt = NULL;
    ASSERT_OK(kiln_adam_create(ps, 0.02, 0.9, 0.999, 1e-8, 0, &opt));
    kiln_grad_scaler *scaler = NULL;
    /* bf16 has f32's range: no scaling, as PyTorch's recipes (a disabled scaler passes through) */
    ASSERT_OK(
        kiln_grad_scaler_create(&(kiln_grad_scaler_options){.disabled = lo != KILN_F16}, &scaler));
    for (int step = 0; step < steps; step++) {
        kiln_tensor *logits = NULL, *loss = NULL, *scaled = NULL;
        if (amp)
            ASSERT_OK(kiln_autocast_begin(dev_type, lo));
        ASSERT_OK(kiln_module_forward(model, x, &logits));
        ck_assert_int_eq(kiln_tensor_dtype(logits), lo);
        ASSERT_OK(kiln_cross_entropy(logits, labels, &loss, NULL));
        ck_assert_int_eq(kiln_tensor_dtype(loss), KILN_F32);
        if (amp)
            ASSERT_OK(kiln_autocast_end());
        ASSERT_OK(kiln_grad_scaler_scale(scaler, loss, &scaled));
        ASSERT_OK(kiln_optimizer_zero_grad(opt));
        ASSERT_OK(kiln_backward(scaled, NULL, 0));
        ASSERT_OK(kiln_grad_scaler_step(scaler, opt, NULL));
        ASSERT_OK(kiln_grad_scaler_update(scaler));
        kiln_tensor_release(logits);
        kiln_tensor_release(loss);
        kiln_tensor_release(scaled);
    }
    for (int i = 0; i < kiln_params_count(ps); i++) /* master weights stay f32 */
        ck_assert_int_eq(kiln_tensor_dtype(kiln_params_tensor(ps, i)), KILN_F32);
    kiln_tensor *logits = NULL, *pred = NULL;
    bool prev = kiln_set_grad_enabled(false);
    ASSERT_OK(kiln_module_forward(model, x, &logits));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_ARGMAX, logits, 1, false, &pred));
    kiln_set_grad_enabled(prev);
    int64_t got[B];
    ASSERT_OK(kiln_tensor_read(pred, got, sizeof got));
    int right = 0;
    for (int i = 0; i < B; i++)
        right += got[i] == lv[i];
    kiln_tensor_release(logits);
    kiln_tensor_release(pred);
    kiln_grad_scaler_free(scaler);
    kiln_optimizer_free(opt);
    kiln_params_free(ps);
    kiln_module_free(model);
    kiln_tensor_release(x);
    kiln_tensor_release(labels);
    return (double)right / B;
}

START_TEST(test_training)
{
    if (simulated(dev)) { /* Oclgrind: every step is minutes under ASan; the cases above ran */
        test_skip("training under autocast on Oclgrind (too slow to learn there)");
        return;
    }
    int steps = 150;
    double f32 = train(KILN_F32, steps), amp = train(KILN_F16, steps), bf = train(KILN_BF16, steps);
    printf("amp: 2-32-3 MLP, %d Adam steps: accuracy %.3f in f32, %.3f under f16 autocast + "
           "scaler, %.3f under bf16 autocast\n",
           steps, f32, amp, bf);
    ck_assert_msg(f32 >= 0.95 && amp >= 0.95 && bf >= 0.95 && fabs(f32 - amp) <= 0.03 &&
                      fabs(f32 - bf) <= 0.03,
                  "accuracy %.3f (f32), %.3f (f16 autocast), %.3f (bf16 autocast)", f32, amp, bf);
}
END_TEST

Suite *amp_suite(void)
{
    Suite *s = suite_create("amp");
    TCase *tc = tcase_create("amp");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_policy, 0, 2);
    tcase_add_test(tc, test_regions);
    tcase_add_test(tc, test_per_thread);
    tcase_add_test(tc, test_gradients);
    tcase_add_test(tc, test_weight_copy_not_kept);
    tcase_add_test(tc, test_training);
    suite_add_tcase(s, tc);
    return s;
}
