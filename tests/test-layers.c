/* test-layers.c - layers (kiln_linear, kiln_layer_norm, kiln_dropout, embedding) and modules:
 * forward values against plain C loops, initial weights (bounds, mean and variance, bit-identical
 * on every device), gradients against central finite differences (f64, as in test-autograd.c),
 * sequential parameter names, training mode, and errors and failed allocations that leak
 * nothing. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static uint64_t live_bytes(void)
{
    kiln_memory_stats st;
    ASSERT_OK(kiln_device_memory_stats(dev, &st));
    return st.allocated_bytes;
}

/* |got - want| <= tol (1 + |want|) for every element. */
static void assert_close(const double *got, const double *want, int64_t n, double tol,
                         const char *what)
{
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])),
                      "%s [%lld]: got %.9g, want %.9g", what, (long long)i, got[i], want[i]);
}

static kiln_dtype float_dtypes[2] = {KILN_F32, KILN_F64};

static int n_float_dtypes(void)
{
    return has_fp64(dev) ? 2 : 1;
}

/* ---- forward values -------------------------------------------------------------------------- */

START_TEST(test_linear_forward)
{
    int64_t xs[3] = {2, 3, 4}, ws[2] = {5, 4}, bs = 5;
    double xv[24], wv[20], bv[5], want[30];
    for (int k = 0; k < n_float_dtypes(); k++) {
        kiln_dtype dt = float_dtypes[k];
        fill_values(dt, xv, 24);
        fill_values(dt, wv, 20);
        fill_values(dt, bv, 5);
        kiln_tensor *x = upload(dev, dt, 3, xs, xv), *w = upload(dev, dt, 2, ws, wv),
                    *b = upload(dev, dt, 1, &bs, bv), *y = NULL;
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            for (int r = 0; r < 6; r++)
                for (int o = 0; o < 5; o++) {
                    double acc = with_bias ? bv[o] : 0;
                    for (int i = 0; i < 4; i++)
                        acc += xv[r * 4 + i] * wv[o * 4 + i];
                    want[r * 5 + o] = acc;
                }
            ASSERT_OK(kiln_linear(x, w, with_bias ? b : NULL, &y));
            ck_assert_int_eq(kiln_tensor_ndim(y), 3);
            ck_assert_int_eq(kiln_tensor_shape(y)[2], 5);
            ck_assert_int_eq(kiln_tensor_shape(y)[1], 3);
            double *got = download(y);
            assert_close(got, want, 30, dt == KILN_F32 ? 1e-5 : 1e-12, "linear");
            free(got);
            kiln_tensor_release(y);
        }
        /* a 1-D x is one row */
        kiln_tensor *x1 = NULL;
        ASSERT_OK(kiln_tensor_reshape(x, 1, (int64_t[]){24}, &y));
        ASSERT_OK(kiln_slice(y, 0, 0, 4, &x1));
        kiln_tensor_release(y);
        ASSERT_OK(kiln_linear(x1, w, b, &y));
        ck_assert_int_eq(kiln_tensor_ndim(y), 1);
        ck_assert_int_eq(kiln_tensor_shape(y)[0], 5);
        double *got = download(y);
        assert_close(got, want, 5, dt == KILN_F32 ? 1e-5 : 1e-12, "linear 1-D");
        free(got);
        kiln_tensor *all[] = {x, w, b, y, x1};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            kiln_tensor_release(all[i]);
    }
}
END_TEST

/* |got - want| <= 2^-23 K mag + h (mag + |want|) + 2^-20 for f16 (h = 2^-11) or bf16 (h = 2^-8)
 * results of sums of K products accumulated in f32, mag = sum|terms| (+ |bias|): the f32 bound,
 * then two roundings to 16 bits (half an ulp each: h), of the product (|product| <= mag) and of
 * the sum with the bias, and a subnormal step. */
static void assert_close_narrow(kiln_dtype dt, const double *got, const double *want,
                                const double *mag, int64_t n, int k, const char *what)
{
    double h = dt == KILN_BF16 ? 0x1p-8 : 0x1p-11;
    for (int64_t i = 0; i < n; i++) {
        double tol = 0x1p-23 * k * mag[i] + h * (mag[i] + fabs(want[i])) + 0x1p-20;
        ck_assert_msg(fabs(got[i] - want[i]) <= tol, "%s [%lld]: got %.9g, want %.9g (tol %.3g)",
                      what, (long long)i, got[i], want[i], tol);
    }
}

/* kiln_batch_norm of an f16 (loop index 0) or bf16 (1) x [4, 3, 5] with f32 weight, bias and
 * running buffers (PyTorch's mixed batch norm, what autocast runs): y in x's dtype, against a C
 * loop over the values x holds (exact in 16 bits), within one 16-bit rounding; the running
 * buffers move in f32; gradients of x (16-bit) and weight (f32) flow; the dtype rules. */
START_TEST(test_batch_norm_mixed)
{
    const kiln_dtype dt = _i ? KILN_BF16 : KILN_F16;
    const int64_t xs[3] = {4, 3, 5}, c = 3;
    double xv[60], wv[3] = {0.5, -1.25, 2}, bv[3] = {0.1, 0, -0.3}, rm[3] = {0}, rv[3] = {1, 1, 1};
    double want[60], mean[3] = {0}, var[3] = {0};
    for (int i = 0; i < 60; i++)
        xv[i] = (double)((i * 7) % 23 - 11) / 8; /* exact in f16 and bf16 */
    kiln_tensor *x = upload(dev, dt, 3, xs, xv), *w = upload(dev, KILN_F32, 1, &c, wv);
    kiln_tensor *b = upload(dev, KILN_F32, 1, &c, bv), *trm = upload(dev, KILN_F32, 1, &c, rm);
    kiln_tensor *trv = upload(dev, KILN_F32, 1, &c, rv), *y = NULL;
    for (int i = 0; i < 60; i++)
        mean[(i / 5) % 3] += xv[i] / 20;
    for (int i = 0; i < 60; i++)
        var[(i / 5) % 3] += (xv[i] - mean[(i / 5) % 3]) * (xv[i] - mean[(i / 5) % 3]) / 20;
    for (int i = 0; i < 60; i++) {
        int ch = (i / 5) % 3;
        want[i] = (xv[i] - mean[ch]) / sqrt(var[ch] + 1e-5) * wv[ch] + bv[ch];
    }
    ASSERT_OK(kiln_tensor_set_requires_grad(x, true));
    ASSERT_OK(kiln_tensor_set_requires_grad(w, true));
    ASSERT_OK(kiln_batch_norm(x, trm, trv, w, b, true, 0.1, 1e-5, &y));
    ck_assert_int_eq(kiln_tensor_dtype(y), dt);
    double *got = download(y), h = dt == KILN_BF16 ? 0x1p-8 : 0x1p-11;
    for (int i = 0; i < 60; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= h * fabs(want[i]) + 1e-5, "y [%d]: %g, want %g", i,
                      got[i], want[i]);
    free(got);
    double *grm = download(trm);
    for (int ch = 0; ch < 3; ch++)
        ck_assert_msg(fabs(grm[ch] - 0.1 * mean[ch]) < 1e-6, "running_mean [%d] %g", ch, grm[ch]);
    free(grm);
    kiln_tensor *sum = NULL;
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, y, KILN_ALL_AXES, false, &sum));
    ASSERT_OK(kiln_backward(sum, NULL, 0));
    ck_assert_int_eq(kiln_tensor_dtype(kiln_tensor_grad(x)), dt);
    ck_assert_int_eq(kiln_tensor_dtype(kiln_tensor_grad(w)), KILN_F32);
    /* d sum(y) / d weight = sum of xhat over the channel: 0 up to rounding */
    double *gw = download(kiln_tensor_grad(w));
    for (int ch = 0; ch < 3; ch++)
        ck_assert_msg(fabs(gw[ch]) < 0.05, "weight's gradient [%d] %g", ch, gw[ch]);
    free(gw);
    kiln_tensor_release(sum);
    kiln_tensor_release(y);
    /* an f32 x takes f32 parameters only; a 16-bit x no f64 ones */
    kiln_tensor *x32 = upload(dev, KILN_F32, 3, xs, xv), *w16 = upload(dev, dt, 1, &c, wv);
    ASSERT_FAILS(kiln_batch_norm(x32, NULL, NULL, w16, NULL, true, 0.1, 1e-5, &y),
                 KILN_ERR_DTYPE_MISMATCH, "or f32 for an f16 or bf16 x");
    if (has_fp64(dev)) {
        kiln_tensor *w64 = upload(dev, KILN_F64, 1, &c, wv);
        ASSERT_FAILS(kiln_batch_norm(x, NULL, NULL, w64, NULL, true, 0.1, 1e-5, &y),
                     KILN_ERR_DTYPE_MISMATCH, "but weight is f64");
        kiln_tensor_release(w64);
    }
    kiln_tensor *arr[] = {x, w, b, trm, trv, x32, w16};
    for (int i = 0; i < 7; i++)
        kiln_tensor_release(arr[i]);
}
END_TEST

/* An f16 (loop index 0) or bf16 (1) linear layer (issue 25), made by kiln_linear_create, forward
 * and backward against C loops over the values its tensors hold: y = x W^T + b for x [6, 20],
 * W [7, 20]; with y's gradient g, dx = g W, dW = g^T x, db = the column sums of g. All in 16-bit
 * storage, f32 sums. */
START_TEST(test_linear_f16)
{
    const kiln_dtype dt = _i ? KILN_BF16 : KILN_F16;
    enum { R = 6, IN = 20, OUT = 7 };
    const int64_t xs[2] = {R, IN}, gs[2] = {R, OUT};
    kiln_module *m = NULL;
    ASSERT_OK(kiln_linear_create(dev, dt, IN, OUT, true, KILN_INIT_DEFAULT, 5, &m));
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(m, NULL, ps));
    ck_assert_int_eq(kiln_params_count(ps), 2);
    kiln_tensor *tw = kiln_params_tensor(ps, 0), *tb = kiln_params_tensor(ps, 1);
    ck_assert_int_eq(kiln_tensor_dtype(tw), dt);
    double xv[R * IN], gv[R * OUT], want[OUT * IN], mag[OUT * IN]; /* OUT > R: dW is the largest */
    fill_values(dt, xv, R * IN);
    fill_values(dt, gv, R * OUT);
    kiln_tensor *x = upload(dev, dt, 2, xs, xv), *g = upload(dev, dt, 2, gs, gv);
    ASSERT_OK(kiln_tensor_set_requires_grad(x, true));
    double *w = download(tw), *b = download(tb);
    kiln_tensor *y = NULL;
    ASSERT_OK(kiln_module_forward(m, x, &y));
    ck_assert_int_eq(kiln_tensor_dtype(y), dt);
    for (int r = 0; r < R; r++)
        for (int o = 0; o < OUT; o++) {
            double acc = 0, s = 0;
            for (int i = 0; i < IN; i++) {
                acc += xv[r * IN + i] * w[o * IN + i];
                s += fabs(xv[r * IN + i] * w[o * IN + i]);
            }
            want[r * OUT + o] = acc + b[o];
            mag[r * OUT + o] = s + fabs(b[o]);
        }
    double *got = download(y);
    assert_close_narrow(dt, got, want, mag, R * OUT, IN, "linear y");
    free(got);
    ASSERT_OK(kiln_backward(y, g, 0));
    const kiln_tensor *grads[3] = {kiln_tensor_grad(x), kiln_tensor_grad(tw), kiln_tensor_grad(tb)};
    const int rows[3] = {R, OUT, 1}, cols[3] = {IN, IN, OUT}, ks[3] = {OUT, R, R};
    const char *what[3] = {"linear dx", "linear dW", "linear db"};
    for (int t = 0; t < 3; t++) {
        ck_assert_ptr_nonnull(grads[t]);
        ck_assert_int_eq(kiln_tensor_dtype(grads[t]), dt);
        for (int i = 0; i < rows[t]; i++)
            for (int j = 0; j < cols[t]; j++) {
                double acc = 0, s = 0;
                for (int q = 0; q < ks[t]; q++) {
                    double term = t == 0   ? gv[i * OUT + q] * w[q * IN + j]
                                  : t == 1 ? gv[q * OUT + i] * xv[q * IN + j]
                                           : gv[q * OUT + j];
                    acc += term;
                    s += fabs(term);
                }
                want[i * cols[t] + j] = acc;
                mag[i * cols[t] + j] = s;
            }
        got = download(grads[t]);
        assert_close_narrow(dt, got, want, mag, rows[t] * cols[t], ks[t], what[t]);
        free(got);
    }
    free(w);
    free(b);
    kiln_tensor_release(x);
    kiln_tensor_release(g);
    kiln_tensor_release(y);
    kiln_params_free(ps);
    kiln_module_free(m);
}
END_TEST

/* kiln_batch_norm against C loops (issue 23): training (batch statistics, running buffers
 * updated with momentum, the variance unbiased), then evaluation with those running values, with
 * and without weight and bias, on x [4, 3, 2, 5] and [6, 3]; errors. */
START_TEST(test_batch_norm)
{
    for (int k = 0; k < n_float_dtypes(); k++) {
        kiln_dtype dt = float_dtypes[k];
        for (int shape_i = 0; shape_i < 2; shape_i++) {
            const int64_t x4[4] = {4, 3, 2, 5}, x2[2] = {6, 3}, c = 3;
            int nd = shape_i ? 2 : 4;
            const int64_t *xs = shape_i ? x2 : x4;
            int64_t n = shape_i ? 6 : 4, rest = shape_i ? 1 : 10, numel = n * c * rest;
            double xv[120], wv[3] = {0.5, -1.25, 2}, bv[3] = {0.1, 0, -0.3};
            double rm[3] = {0.2, -0.1, 0.0}, rv[3] = {1.0, 0.5, 2.0}, want[120];
            fill_values(dt, xv, numel);
            kiln_tensor *x = upload(dev, dt, nd, xs, xv), *w = upload(dev, dt, 1, &c, wv);
            kiln_tensor *b = upload(dev, dt, 1, &c, bv), *trm = upload(dev, dt, 1, &c, rm);
            kiln_tensor *trv = upload(dev, dt, 1, &c, rv), *y = NULL;
            double mean[3] = {0}, var[3] = {0};
            for (int64_t i = 0; i < n; i++)
                for (int ch = 0; ch < 3; ch++)
                    for (int64_t r = 0; r < rest; r++)
                        mean[ch] += xv[(i * c + ch) * rest + r] / (double)(n * rest);
            for (int64_t i = 0; i < n; i++)
                for (int ch = 0; ch < 3; ch++)
                    for (int64_t r = 0; r < rest; r++) {
                        double d = xv[(i * c + ch) * rest + r] - mean[ch];
                        var[ch] += d * d / (double)(n * rest);
                    }
            for (int affine = 0; affine < 2; affine++) {
                for (int64_t i = 0; i < n; i++)
                    for (int ch = 0; ch < 3; ch++)
                        for (int64_t r = 0; r < rest; r++) {
                            int64_t e = (i * c + ch) * rest + r;
                            double v = (xv[e] - mean[ch]) / sqrt(var[ch] + 1e-5);
                            want[e] = affine ? v * wv[ch] + bv[ch] : v;
                        }
                ASSERT_OK(kiln_batch_norm(x, affine ? trm : NULL, affine ? trv : NULL,
                                          affine ? w : NULL, affine ? b : NULL, true, 0.1, 1e-5,
                                          &y));
                double *got = download(y);
                assert_close(got, want, numel, dt == KILN_F32 ? 1e-5 : 1e-12, "batch_norm train");
                free(got);
                kiln_tensor_release(y);
            }
            /* the running buffers, updated once (the affine pass) */
            double *grm = download(trm), *grv = download(trv), want_m[3], want_v[3];
            double cnt = (double)(n * rest);
            for (int ch = 0; ch < 3; ch++) {
                want_m[ch] = 0.9 * rm[ch] + 0.1 * mean[ch];
                want_v[ch] = 0.9 * rv[ch] + 0.1 * var[ch] * cnt / (cnt - 1);
            }
            assert_close(grm, want_m, 3, dt == KILN_F32 ? 1e-6 : 1e-14, "running_mean");
            assert_close(grv, want_v, 3, dt == KILN_F32 ? 1e-6 : 1e-14, "running_var");
            /* evaluation with them */
            for (int64_t i = 0; i < n; i++)
                for (int ch = 0; ch < 3; ch++)
                    for (int64_t r = 0; r < rest; r++) {
                        int64_t e = (i * c + ch) * rest + r;
                        want[e] = (xv[e] - grm[ch]) / sqrt(grv[ch] + 1e-5) * wv[ch] + bv[ch];
                    }
            ASSERT_OK(kiln_batch_norm(x, trm, trv, w, b, false, 0.1, 1e-5, &y));
            double *got = download(y);
            assert_close(got, want, numel, dt == KILN_F32 ? 1e-5 : 1e-12, "batch_norm eval");
            free(got);
            free(grm);
            free(grv);
            kiln_tensor_release(y);
            /* errors, each naming kiln_batch_norm, *y NULL */
            y = (kiln_tensor *)1;
            ASSERT_FAILS(kiln_batch_norm(x, NULL, NULL, w, b, false, 0.1, 1e-5, &y),
                         KILN_ERR_INVALID_ARGUMENT, "kiln_batch_norm: evaluation mode");
            ck_assert_ptr_null(y);
            ASSERT_FAILS(kiln_batch_norm(x, trm, trv, w, b, true, 1.5, 1e-5, &y),
                         KILN_ERR_INVALID_ARGUMENT, "momentum is 1.5");
            ASSERT_FAILS(kiln_batch_norm(x, trm, trv, x, b, true, 0.1, 1e-5, &y),
                         KILN_ERR_SHAPE_MISMATCH, "kiln_batch_norm: weight has shape");
            ASSERT_FAILS(kiln_batch_norm(x, trm, trv, w, b, true, 0.1, 1e-5, NULL),
                         KILN_ERR_INVALID_ARGUMENT, "kiln_batch_norm: y is NULL");
            kiln_tensor *arr[] = {x, w, b, trm, trv};
            for (int i = 0; i < 5; i++)
                kiln_tensor_release(arr[i]);
        }
        const int64_t one[2] = {1, 3};
        kiln_tensor *x1 = NULL, *y = NULL;
        ASSERT_OK(kiln_tensor_zeros(dev, dt, 2, one, &x1));
        ASSERT_FAILS(kiln_batch_norm(x1, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, &y),
                     KILN_ERR_SHAPE_MISMATCH, "training needs more than one");
        kiln_tensor_release(x1);
    }
}
END_TEST

START_TEST(test_layer_norm_forward)
{
    int64_t xs[2] = {3, 6}, d = 6;
    double xv[18], wv[6], bv[6], want[18];
    for (int k = 0; k < n_float_dtypes(); k++) {
        kiln_dtype dt = float_dtypes[k];
        fill_values(dt, xv, 18);
        fill_values(dt, wv, 6);
        fill_values(dt, bv, 6);
        kiln_tensor *x = upload(dev, dt, 2, xs, xv), *w = upload(dev, dt, 1, &d, wv),
                    *b = upload(dev, dt, 1, &d, bv), *y = NULL;
        for (int affine = 0; affine < 2; affine++) {
            for (int r = 0; r < 3; r++) {
                double mean = 0, var = 0;
                for (int i = 0; i < 6; i++)
                    mean += xv[r * 6 + i] / 6;
                for (int i = 0; i < 6; i++)
                    var += (xv[r * 6 + i] - mean) * (xv[r * 6 + i] - mean) / 6;
                for (int i = 0; i < 6; i++) {
                    double n = (xv[r * 6 + i] - mean) / sqrt(var + 1e-5);
                    want[r * 6 + i] = affine ? n * wv[i] + bv[i] : n;
                }
            }
            ASSERT_OK(kiln_layer_norm(x, affine ? w : NULL, affine ? b : NULL, 1e-5, &y));
            double *got = download(y);
            assert_close(got, want, 18, dt == KILN_F32 ? 1e-5 : 1e-12, "layer_norm");
            free(got);
            kiln_tensor_release(y);
        }
        /* the module: weight 1, bias 0 */
        kiln_module *m = NULL;
        ASSERT_OK(kiln_layer_norm_create(dev, dt, 6, 1e-5, &m));
        ASSERT_OK(kiln_module_forward(m, x, &y));
        double *got = download(y);
        for (int r = 0; r < 3; r++) { /* want holds the affine values: undo them */
            for (int i = 0; i < 6; i++)
                want[r * 6 + i] = (want[r * 6 + i] - bv[i]) / wv[i];
        }
        assert_close(got, want, 18, dt == KILN_F32 ? 1e-4 : 1e-9, "layer_norm module");
        free(got);
        kiln_tensor_release(y);
        kiln_module_free(m);
        kiln_tensor_release(x);
        kiln_tensor_release(w);
        kiln_tensor_release(b);
    }
}
END_TEST

/* Dropout: the kept fraction within 5 standard deviations of 1 - p, survivors exactly x / (1 -
 * p), the mask exactly where kiln_rand_uniform(seed) >= p, the same for f32 and f64 and for the
 * same seed, another for another seed. */
START_TEST(test_dropout)
{
    int64_t n = simulated(dev) ? 512 : 20000;
    double p = 0.3;
    kiln_tensor *x = NULL, *y = NULL, *y2 = NULL, *u = NULL;
    ASSERT_OK(kiln_full(dev, KILN_F32, 1, &n, 2.0, &x));
    ASSERT_OK(kiln_dropout(x, p, 1234, &y));
    ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 1, &n, 1234, 0.0, 1.0, &u));
    double *yv = download(y), *uv = download(u);
    float scaled = (float)(2.0f * (float)(1.0 / (1.0 - p)));
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        bool keep = uv[i] >= p;
        kept += keep;
        ck_assert_msg(yv[i] == (keep ? (double)scaled : 0.0), "element %lld: %g (u %g)",
                      (long long)i, yv[i], uv[i]);
    }
    double sd = sqrt(n * p * (1 - p));
    ck_assert_msg(fabs((double)kept - n * (1 - p)) <= 5 * sd, "kept %lld of %lld", (long long)kept,
                  (long long)n);
    /* the same seed: bit-identical; another: a different mask */
    ASSERT_OK(kiln_dropout(x, p, 1234, &y2));
    double *y2v = download(y2);
    ck_assert(memcmp(yv, y2v, (size_t)n * sizeof *yv) == 0);
    free(y2v);
    kiln_tensor_release(y2);
    ASSERT_OK(kiln_dropout(x, p, 1235, &y2));
    y2v = download(y2);
    ck_assert(memcmp(yv, y2v, (size_t)n * sizeof *yv) != 0);
    free(y2v);
    kiln_tensor_release(y2);
    if (has_fp64(dev)) { /* the mask does not depend on the dtype */
        kiln_tensor *x64 = NULL;
        ASSERT_OK(kiln_full(dev, KILN_F64, 1, &n, 2.0, &x64));
        ASSERT_OK(kiln_dropout(x64, p, 1234, &y2));
        y2v = download(y2);
        for (int64_t i = 0; i < n; i++)
            ck_assert_msg((y2v[i] == 0) == (yv[i] == 0), "f64 mask differs at %lld", (long long)i);
        free(y2v);
        kiln_tensor_release(y2);
        kiln_tensor_release(x64);
    }
    /* p = 0: a copy */
    ASSERT_OK(kiln_dropout(x, 0.0, 1, &y2));
    y2v = download(y2);
    for (int64_t i = 0; i < n; i++)
        ck_assert(y2v[i] == 2.0);
    free(y2v);
    kiln_tensor_release(y2);
    free(yv);
    free(uv);
    kiln_tensor_release(y);
    kiln_tensor_release(u);
    kiln_tensor_release(x);
}
END_TEST

/* The module: seed + call counter while training (forward k is kiln_dropout(x, p, seed + k)),
 * x itself when not. */
START_TEST(test_dropout_module)
{
    int64_t n = 64;
    kiln_tensor *x = NULL, *y = NULL, *ref = NULL;
    ASSERT_OK(kiln_full(dev, KILN_F32, 1, &n, 1.0, &x));
    kiln_module *m = NULL;
    ASSERT_OK(kiln_dropout_create(0.5, 77, &m));
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(kiln_module_forward(m, x, &y));
        ASSERT_OK(kiln_dropout(x, 0.5, 77 + (uint64_t)k, &ref));
        double *a = download(y), *b = download(ref);
        ck_assert(memcmp(a, b, (size_t)n * sizeof *a) == 0);
        free(a);
        free(b);
        kiln_tensor_release(y);
        kiln_tensor_release(ref);
    }
    kiln_module_set_training(m, false);
    ASSERT_OK(kiln_module_forward(m, x, &y));
    /* The identity: a new handle on x's memory (so that a scope can release it). */
    ck_assert_ptr_ne(y, x);
    double *a = download(x), *b = download(y);
    ck_assert(memcmp(a, b, (size_t)n * sizeof *a) == 0);
    free(a);
    free(b);
    kiln_tensor_release(y);
    kiln_module_free(m);
    kiln_tensor_release(x);
}
END_TEST

START_TEST(test_embedding)
{
    kiln_module *m = NULL;
    ASSERT_OK(kiln_embedding_create(dev, KILN_F32, 10, 3, 5, &m));
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(m, NULL, ps));
    ck_assert_int_eq(kiln_params_count(ps), 1);
    ck_assert_str_eq(kiln_params_name(ps, 0), "weight");
    double *table = download(kiln_params_tensor(ps, 0));
    int64_t is[2] = {2, 3}, iv[6] = {9, 0, 4, 4, 1, 9};
    kiln_tensor *idx = NULL, *y = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 2, is, iv, &idx));
    ASSERT_OK(kiln_module_forward(m, idx, &y));
    ck_assert_int_eq(kiln_tensor_ndim(y), 3);
    ck_assert_int_eq(kiln_tensor_shape(y)[0], 2);
    ck_assert_int_eq(kiln_tensor_shape(y)[1], 3);
    ck_assert_int_eq(kiln_tensor_shape(y)[2], 3);
    double *got = download(y);
    for (int j = 0; j < 6; j++)
        for (int c = 0; c < 3; c++)
            ck_assert(got[j * 3 + c] == table[iv[j] * 3 + c]);
    /* the gradient: each row gets the upstream gradient of every lookup of it */
    kiln_tensor *l = NULL;
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, y, KILN_ALL_AXES, false, &l));
    ASSERT_OK(kiln_backward(l, NULL, 0));
    double *g = download(kiln_tensor_grad(kiln_params_tensor(ps, 0)));
    for (int r = 0; r < 10; r++) {
        int uses = 0;
        for (int j = 0; j < 6; j++)
            uses += iv[j] == r;
        for (int c = 0; c < 3; c++)
            ck_assert_msg(g[r * 3 + c] == uses, "row %d: %g, %d uses", r, g[r * 3 + c], uses);
    }
    /* a float index is a dtype error */
    kiln_tensor_release(l);
    l = NULL;
    ASSERT_FAILS(kiln_module_forward(m, y, &l), KILN_ERR_DTYPE_MISMATCH, "indices must be");
    ck_assert_ptr_null(l);
    free(g);
    free(got);
    free(table);
    kiln_tensor_release(y);
    kiln_tensor_release(idx);
    kiln_params_free(ps);
    kiln_module_free(m);
}
END_TEST

/* ---- initialisation ----------------------------------------------------------------------------
 */

static void moments(const double *v, int64_t n, double *mean, double *var)
{
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; i++)
        s += v[i];
    *mean = s / n;
    for (int64_t i = 0; i < n; i++)
        q += (v[i] - *mean) * (v[i] - *mean);
    *var = q / n;
}

/* weight (and bias) of a linear module as host arrays */
static void linear_values(kiln_module *m, double **w, double **b)
{
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(m, "", ps));
    *w = download(kiln_params_find(ps, "weight"));
    kiln_tensor *bt = kiln_params_find(ps, "bias");
    *b = bt ? download(bt) : NULL;
    ck_assert(kiln_tensor_requires_grad(kiln_params_find(ps, "weight")));
    ck_assert(kiln_tensor_is_leaf(kiln_params_find(ps, "weight")));
    kiln_params_free(ps);
}

/* mean within 5 sd of 0; variance within 5 sd of want (sd of the sample variance:
 * sqrt((m4 - var^2) / n) with m4 the fourth moment: b^4 / 5 uniform, 3 var^2 normal). */
static void check_moments(const double *v, int64_t n, double want_var, bool normal,
                          const char *what)
{
    double mean, var;
    moments(v, n, &mean, &var);
    double m4 = normal ? 3 * want_var * want_var : 9.0 / 5.0 * want_var * want_var;
    ck_assert_msg(fabs(mean) <= 5 * sqrt(want_var / n), "%s: mean %g", what, mean);
    ck_assert_msg(fabs(var - want_var) <= 5 * sqrt((m4 - want_var * want_var) / n),
                  "%s: variance %g, want %g", what, var, want_var);
}

START_TEST(test_init)
{
    const int64_t in = 64, out = 48, n = in * out;
    kiln_module *m = NULL;
    double *w, *b;
    /* default: U(+-1/sqrt(in)), bias too */
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, in, out, true, KILN_INIT_DEFAULT, 3, &m));
    linear_values(m, &w, &b);
    double bound = 1 / sqrt((double)in);
    for (int64_t i = 0; i < n; i++)
        ck_assert(fabs(w[i]) <= bound);
    for (int64_t i = 0; i < out; i++)
        ck_assert(fabs(b[i]) <= bound);
    check_moments(w, n, bound * bound / 3, false, "default weight");
    ck_assert(memcmp(w, b, (size_t)out * sizeof *b) != 0); /* another stream than the weight's */
    free(w);
    free(b);
    kiln_module_free(m);
    /* He: N(0, 2/in), bias 0 */
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, in, out, true, KILN_INIT_HE, 3, &m));
    linear_values(m, &w, &b);
    check_moments(w, n, 2.0 / in, true, "He weight");
    for (int64_t i = 0; i < out; i++)
        ck_assert(b[i] == 0);
    free(w);
    free(b);
    kiln_module_free(m);
    /* Xavier: U(+-sqrt(6/(in+out))), no bias asked */
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, in, out, false, KILN_INIT_XAVIER, 3, &m));
    linear_values(m, &w, &b);
    ck_assert_ptr_null(b);
    bound = sqrt(6.0 / (double)(in + out));
    for (int64_t i = 0; i < n; i++)
        ck_assert(fabs(w[i]) <= bound);
    check_moments(w, n, bound * bound / 3, false, "Xavier weight");
    free(w);
    kiln_module_free(m);
    /* embedding: N(0, 1) */
    ASSERT_OK(kiln_embedding_create(dev, KILN_F32, 100, 30, 9, &m));
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(m, "emb", ps));
    w = download(kiln_params_find(ps, "emb.weight"));
    check_moments(w, 3000, 1.0, true, "embedding");
    free(w);
    kiln_params_free(ps);
    kiln_module_free(m);
}
END_TEST

/* One seed, one model: the weights' bytes are equal on every device under test (cpu:0, cpu:1,
 * Oclgrind's gpu:0 in the two-device configurations). */
START_TEST(test_same_weights_everywhere)
{
    if (ndevs < 2)
        test_skip("one device: the weights are compared across devices in the -2dev and "
                  "-oclgrind configurations");
    void *ref[5] = {0};
    size_t bytes[5] = {0};
    for (int d = 0; d < ndevs; d++) {
        kiln_module *mods[3] = {0};
        ASSERT_OK(
            kiln_linear_create(devs[d], KILN_F32, 7, 5, true, KILN_INIT_DEFAULT, 42, &mods[0]));
        ASSERT_OK(kiln_linear_create(devs[d], KILN_F32, 5, 3, true, KILN_INIT_HE, 43, &mods[1]));
        ASSERT_OK(kiln_embedding_create(devs[d], KILN_F32, 6, 4, 44, &mods[2]));
        kiln_module *seq = NULL;
        ASSERT_OK(kiln_sequential_create(mods, 3, &seq));
        kiln_params *ps = NULL;
        ASSERT_OK(kiln_params_create(&ps));
        ASSERT_OK(kiln_module_params(seq, NULL, ps));
        ck_assert_int_eq(kiln_params_count(ps), 5);
        for (int i = 0; i < 5; i++) {
            void *h = read_host(kiln_params_tensor(ps, i));
            size_t nb = (size_t)kiln_tensor_numel(kiln_params_tensor(ps, i)) * 4;
            if (d == 0) {
                ref[i] = h;
                bytes[i] = nb;
                continue;
            }
            ck_assert_msg(nb == bytes[i] && memcmp(h, ref[i], nb) == 0,
                          "%s differs between %s and %s", kiln_params_name(ps, i),
                          kiln_device_spec(devs[0]), kiln_device_spec(devs[d]));
            free(h);
        }
        kiln_params_free(ps);
        kiln_module_free(seq);
    }
    for (int i = 0; i < 5; i++)
        free(ref[i]);
}
END_TEST

/* ---- gradients: central finite differences (f64, h 1e-6, bound 1e-6; see test-autograd.c) -- */

typedef kiln_status (*fn_t)(kiln_tensor *const *in, kiln_tensor **out, const void *ctx);

static kiln_tensor *random_tensor(int ndim, const int64_t *shape, double *v)
{
    for (int64_t i = 0; i < numel_of(ndim, shape); i++)
        v[i] = 2 * rnd() - 1;
    return upload(dev, KILN_F64, ndim, shape, v);
}

/* L = sum(f(in) * w) with w fixed, as a double. */
static double loss_at(fn_t f, const void *ctx, int n, const int *nd, int64_t (*shapes)[4],
                      double **vals, kiln_tensor *w, bool backward, kiln_tensor **in_out)
{
    kiln_tensor *in[4] = {0}, *y = NULL, *p = NULL, *l = NULL;
    for (int i = 0; i < n; i++) {
        in[i] = upload(dev, KILN_F64, nd[i], shapes[i], vals[i]);
        if (backward)
            ASSERT_OK(kiln_tensor_set_requires_grad(in[i], true));
    }
    ASSERT_OK(f(in, &y, ctx));
    ASSERT_OK(kiln_mul(y, w, &p));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, p, KILN_ALL_AXES, false, &l));
    if (backward)
        ASSERT_OK(kiln_backward(l, NULL, 0));
    double v;
    ASSERT_OK(kiln_tensor_item(l, &v));
    kiln_tensor *drop[] = {y, p, l};
    for (int i = 0; i < 3; i++)
        kiln_tensor_release(drop[i]);
    for (int i = 0; i < n; i++) {
        if (in_out)
            in_out[i] = in[i];
        else
            kiln_tensor_release(in[i]);
    }
    return v;
}

static void gradcheck(const char *what, fn_t f, const void *ctx, int n, const int *nd,
                      int64_t (*shapes)[4], const int64_t *out_shape, int out_nd)
{
    if (!has_fp64(dev)) {
        test_skip("%s: no fp64 on %s", what, kiln_device_spec(dev));
        return;
    }
    double *vals[4], wv[256];
    for (int i = 0; i < n; i++) {
        vals[i] = malloc((size_t)numel_of(nd[i], shapes[i]) * sizeof(double));
        kiln_tensor_release(random_tensor(nd[i], shapes[i], vals[i]));
    }
    for (int64_t i = 0; i < numel_of(out_nd, out_shape); i++)
        wv[i] = 0.5 + rnd();
    kiln_tensor *w = upload(dev, KILN_F64, out_nd, out_shape, wv), *in[4] = {0};
    loss_at(f, ctx, n, nd, shapes, vals, w, true, in);
    for (int i = 0; i < n; i++) {
        double *g = download(kiln_tensor_grad(in[i]));
        int64_t cnt = numel_of(nd[i], shapes[i]);
        int64_t step = simulated(dev) && cnt > 2 ? cnt - 1 : 1;
        for (int64_t j = 0; j < cnt; j += step) {
            double keep = vals[i][j], h = 1e-6;
            vals[i][j] = keep + h;
            double lp = loss_at(f, ctx, n, nd, shapes, vals, w, false, NULL);
            vals[i][j] = keep - h;
            double lm = loss_at(f, ctx, n, nd, shapes, vals, w, false, NULL);
            vals[i][j] = keep;
            double num = (lp - lm) / (2 * h);
            ck_assert_msg(fabs(g[j] - num) <= 1e-6 * fmax(1, fabs(num)),
                          "%s: d/d input %d [%lld]: autograd %.12g, finite differences %.12g", what,
                          i, (long long)j, g[j], num);
        }
        free(g);
    }
    for (int i = 0; i < n; i++) {
        kiln_tensor_release(in[i]);
        free(vals[i]);
    }
    kiln_tensor_release(w);
}

static kiln_status f_linear(kiln_tensor *const *in, kiln_tensor **out, const void *c)
{
    return kiln_linear(in[0], in[1], c ? in[2] : NULL, out);
}

static kiln_status f_layer_norm(kiln_tensor *const *in, kiln_tensor **out, const void *c)
{
    return kiln_layer_norm(in[0], c ? in[1] : NULL, c ? in[2] : NULL, 1e-5, out);
}

static kiln_status f_dropout(kiln_tensor *const *in, kiln_tensor **out, const void *c)
{
    (void)c;
    return kiln_dropout(in[0], 0.4, 99, out);
}

START_TEST(test_gradients)
{
    int one = 1;
    int nd3[3] = {3, 2, 1};
    int64_t sh[3][4] = {{2, 2, 3}, {4, 3}, {4}}, ys[3] = {2, 2, 4};
    gradcheck("linear", f_linear, &one, 3, nd3, sh, ys, 3);
    gradcheck("linear without bias", f_linear, NULL, 2, nd3, sh, ys, 3);
    int ndl[3] = {2, 1, 1};
    int64_t shl[3][4] = {{3, 5}, {5}, {5}}, yl[2] = {3, 5};
    gradcheck("layer_norm", f_layer_norm, &one, 3, ndl, shl, yl, 2);
    gradcheck("layer_norm without affine", f_layer_norm, NULL, 1, ndl, shl, yl, 2);
    gradcheck("dropout", f_dropout, NULL, 1, ndl, shl, yl, 2);
}
END_TEST

/* ---- sequential --------------------------------------------------------------------------------
 */

START_TEST(test_sequential)
{
    kiln_module *inner[2] = {0}, *mods[5] = {0}, *seq = NULL;
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 4, 8, true, KILN_INIT_HE, 1, &mods[0]));
    ASSERT_OK(kiln_activation_create(KILN_UNARY_RELU, &mods[1]));
    ASSERT_OK(kiln_dropout_create(0.5, 7, &mods[2]));
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 8, 3, false, KILN_INIT_XAVIER, 2, &inner[0]));
    ASSERT_OK(kiln_activation_create(KILN_UNARY_TANH, &inner[1]));
    ASSERT_OK(kiln_sequential_create(inner, 2, &mods[3]));
    ASSERT_OK(kiln_layer_norm_create(dev, KILN_F32, 3, 1e-5, &mods[4]));
    ASSERT_OK(kiln_sequential_create(mods, 5, &seq));
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(seq, "", ps));
    const char *names[] = {"0.weight", "0.bias", "3.0.weight", "4.weight", "4.bias"};
    ck_assert_int_eq(kiln_params_count(ps), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(kiln_params_name(ps, i), names[i]);
    ASSERT_OK(kiln_module_params(seq, "encoder", ps));
    ck_assert_int_eq(kiln_params_count(ps), 10);
    ck_assert_str_eq(kiln_params_name(ps, 5), "encoder.0.weight");
    ck_assert_str_eq(kiln_params_name(ps, 7), "encoder.3.0.weight");
    /* names taken: an error, and the list as it was */
    ASSERT_FAILS(kiln_module_params(seq, "encoder", ps), KILN_ERR_INVALID_ARGUMENT,
                 "encoder.0.weight");
    ck_assert_int_eq(kiln_params_count(ps), 10);

    /* forward in eval mode = the layers by hand */
    kiln_module_set_training(seq, false);
    int64_t xs[2] = {5, 4};
    double xv[20];
    fill_values(KILN_F32, xv, 20);
    kiln_tensor *x = upload(dev, KILN_F32, 2, xs, xv), *y = NULL, *t1 = NULL, *t2 = NULL,
                *t3 = NULL, *t4 = NULL, *want = NULL;
    ASSERT_OK(kiln_module_forward(seq, x, &y));
    ASSERT_OK(kiln_linear(x, kiln_params_tensor(ps, 0), kiln_params_tensor(ps, 1), &t1));
    ASSERT_OK(kiln_unary(KILN_UNARY_RELU, t1, &t2));
    ASSERT_OK(kiln_linear(t2, kiln_params_tensor(ps, 2), NULL, &t3));
    ASSERT_OK(kiln_unary(KILN_UNARY_TANH, t3, &t4));
    ASSERT_OK(
        kiln_layer_norm(t4, kiln_params_tensor(ps, 3), kiln_params_tensor(ps, 4), 1e-5, &want));
    double *a = download(y), *b = download(want);
    ck_assert(memcmp(a, b, 15 * sizeof *a) == 0);
    free(a);
    free(b);
    /* a backward reaches every parameter */
    kiln_tensor *l = NULL;
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, y, KILN_ALL_AXES, false, &l));
    ASSERT_OK(kiln_backward(l, NULL, 0));
    for (int i = 0; i < 5; i++)
        ck_assert_msg(kiln_tensor_grad(kiln_params_tensor(ps, i)) != NULL, "%s has no grad",
                      names[i]);
    kiln_tensor *all[] = {x, y, t1, t2, t3, t4, want, l};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
    kiln_params_free(ps);
    kiln_module_free(seq);
}
END_TEST

/* The CNN modules in a sequential, as PyTorch's nn.Sequential(Conv2d(3, 4, 3, padding=1),
 * BatchNorm2d(4), ReLU(), MaxPool2d(2), Flatten(), Linear(16, 5)): state names, the forward
 * against the functional forms with the same tensors, training and eval modes, the buffers,
 * num_batches_tracked, dtype conversion and a checkpoint round trip. */
static kiln_module *cnn_model(uint64_t seed)
{
    kiln_module *mods[6] = {0}, *seq = NULL;
    const kiln_conv2d_params cp = {.padding = {1, 1}};
    const kiln_pool2d_params pp = {.kernel = {2, 2}};
    ASSERT_OK(kiln_conv2d_create(dev, KILN_F32, 3, 4, 3, 3, &cp, true, seed, &mods[0]));
    ASSERT_OK(kiln_batch_norm2d_create(dev, KILN_F32, 4, 1e-5, 0.1, &mods[1]));
    ASSERT_OK(kiln_activation_create(KILN_UNARY_RELU, &mods[2]));
    ASSERT_OK(kiln_max_pool2d_create(&pp, &mods[3]));
    ASSERT_OK(kiln_flatten_create(1, -1, &mods[4]));
    ASSERT_OK(
        kiln_linear_create(dev, KILN_F32, 16, 5, true, KILN_INIT_DEFAULT, seed + 1, &mods[5]));
    ASSERT_OK(kiln_sequential_create(mods, 6, &seq));
    return seq;
}

/* The model by hand: conv, batch norm (with copies of the running buffers, which it updates
 * when training), relu, max pool, flatten, linear. */
static kiln_tensor *cnn_by_hand(const kiln_params *st, const kiln_tensor *x, bool training,
                                kiln_tensor *rm, kiln_tensor *rv)
{
    const kiln_conv2d_params cp = {.padding = {1, 1}};
    const kiln_pool2d_params pp = {.kernel = {2, 2}};
    kiln_tensor *t[6] = {0};
    ASSERT_OK(kiln_conv2d(x, kiln_params_find(st, "0.weight"), kiln_params_find(st, "0.bias"), &cp,
                          &t[0]));
    ASSERT_OK(kiln_batch_norm(t[0], rm, rv, kiln_params_find(st, "1.weight"),
                              kiln_params_find(st, "1.bias"), training, 0.1, 1e-5, &t[1]));
    ASSERT_OK(kiln_unary(KILN_UNARY_RELU, t[1], &t[2]));
    ASSERT_OK(kiln_max_pool2d(t[2], &pp, &t[3], NULL));
    ASSERT_OK(kiln_flatten(t[3], 1, -1, &t[4]));
    ASSERT_OK(
        kiln_linear(t[4], kiln_params_find(st, "5.weight"), kiln_params_find(st, "5.bias"), &t[5]));
    for (int i = 0; i < 5; i++)
        kiln_tensor_release(t[i]);
    return t[5];
}

static void assert_same_values(const kiln_tensor *a, const kiln_tensor *b, const char *what)
{
    ck_assert_int_eq(kiln_tensor_numel(a), kiln_tensor_numel(b));
    double *va = download(a), *vb = download(b);
    assert_close(va, vb, kiln_tensor_numel(a), 1e-6, what);
    free(va);
    free(vb);
}

static kiln_tensor *copy_of(const kiln_tensor *t)
{
    kiln_tensor *c = NULL;
    ASSERT_OK(kiln_tensor_clone(t, &c));
    return c;
}

static int64_t batches_tracked_named(const kiln_params *st, const char *name)
{
    kiln_tensor *t = kiln_params_find(st, name);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(kiln_tensor_dtype(t), KILN_I64);
    ck_assert_int_eq(kiln_tensor_ndim(t), 0);
    int64_t v = -1;
    ASSERT_OK(kiln_tensor_read(t, &v, sizeof v));
    return v;
}

static int64_t batches_tracked(const kiln_params *st)
{
    return batches_tracked_named(st, "1.num_batches_tracked");
}

START_TEST(test_cnn_modules)
{
    kiln_module *seq = cnn_model(11);
    kiln_params *ps = NULL, *st = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_params_create(&st));
    ASSERT_OK(kiln_module_params(seq, "", ps));
    ASSERT_OK(kiln_module_state(seq, "", st));
    const char *pnames[] = {"0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias"};
    const char *snames[] = {"0.weight",
                            "0.bias",
                            "1.weight",
                            "1.bias",
                            "1.running_mean",
                            "1.running_var",
                            "1.num_batches_tracked",
                            "5.weight",
                            "5.bias"};
    ck_assert_int_eq(kiln_params_count(ps), 6);
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(kiln_params_name(ps, i), pnames[i]);
    ck_assert_int_eq(kiln_params_count(st), 9);
    for (int i = 0; i < 9; i++)
        ck_assert_str_eq(kiln_params_name(st, i), snames[i]);
    /* PyTorch's layouts and initial values */
    kiln_tensor *w = kiln_params_find(st, "0.weight");
    const int64_t wshape[4] = {4, 3, 3, 3};
    ck_assert_int_eq(kiln_tensor_ndim(w), 4);
    ck_assert(memcmp(kiln_tensor_shape(w), wshape, sizeof wshape) == 0);
    double *wv = download(w), *bv = download(kiln_params_find(st, "0.bias"));
    double bound = 1 / sqrt(27.0), lo = 1, hi = -1;
    for (int i = 0; i < 108; i++) {
        ck_assert(fabs(wv[i]) <= bound);
        lo = fmin(lo, wv[i]);
        hi = fmax(hi, wv[i]);
    }
    ck_assert(lo < -bound / 2 && hi > bound / 2); /* spread over the range, not all zero */
    for (int i = 0; i < 4; i++)
        ck_assert(fabs(bv[i]) <= bound);
    free(wv);
    free(bv);
    double *rv0 = download(kiln_params_find(st, "1.running_var"));
    for (int i = 0; i < 4; i++)
        ck_assert(rv0[i] == 1.0);
    free(rv0);
    ck_assert_int_eq(batches_tracked(st), 0);

    /* training: two batches, each against the functional forms with buffers of its own */
    const int64_t xs[4] = {2, 3, 4, 4};
    double xv[96];
    kiln_tensor *rm = copy_of(kiln_params_find(st, "1.running_mean"));
    kiln_tensor *rv = copy_of(kiln_params_find(st, "1.running_var"));
    for (int step = 0; step < 2; step++) {
        fill_values(KILN_F32, xv, 96);
        kiln_tensor *x = upload(dev, KILN_F32, 4, xs, xv), *y = NULL;
        ASSERT_OK(kiln_module_forward(seq, x, &y));
        const int64_t ys[2] = {2, 5};
        ck_assert_int_eq(kiln_tensor_ndim(y), 2);
        ck_assert(memcmp(kiln_tensor_shape(y), ys, sizeof ys) == 0);
        kiln_tensor *want = cnn_by_hand(st, x, true, rm, rv);
        assert_same_values(y, want, "training forward");
        kiln_tensor_release(x);
        kiln_tensor_release(y);
        kiln_tensor_release(want);
    }
    assert_same_values(kiln_params_find(st, "1.running_mean"), rm, "running_mean");
    assert_same_values(kiln_params_find(st, "1.running_var"), rv, "running_var");
    ck_assert_int_eq(batches_tracked(st), 2);
    /* a backward reaches every parameter, not the buffers */
    kiln_tensor *x = upload(dev, KILN_F32, 4, xs, xv), *y = NULL, *l = NULL;
    ASSERT_OK(kiln_module_forward(seq, x, &y));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, y, KILN_ALL_AXES, false, &l));
    ASSERT_OK(kiln_backward(l, NULL, 0));
    for (int i = 0; i < 6; i++)
        ck_assert_msg(kiln_tensor_grad(kiln_params_tensor(ps, i)) != NULL, "%s has no grad",
                      pnames[i]);
    ck_assert_ptr_null(kiln_tensor_grad(kiln_params_find(st, "1.running_mean")));
    ck_assert_int_eq(batches_tracked(st), 3);
    kiln_tensor_release(y);
    kiln_tensor_release(l);

    /* eval: the running values, nothing updated */
    kiln_module_set_training(seq, false);
    ASSERT_OK(kiln_module_forward(seq, x, &y));
    kiln_tensor *rm_now = copy_of(kiln_params_find(st, "1.running_mean"));
    kiln_tensor *rv_now = copy_of(kiln_params_find(st, "1.running_var"));
    kiln_tensor *want = cnn_by_hand(st, x, false, rm_now, rv_now);
    assert_same_values(y, want, "eval forward");
    ck_assert_int_eq(batches_tracked(st), 3);
    kiln_tensor_release(y);
    kiln_tensor_release(want);

    /* a checkpoint of the state loads into a model made with another seed: the same outputs */
    char path[] = "/tmp/kiln-test-cnn-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ASSERT_OK(kiln_params_save(st, path));
    kiln_module *other = cnn_model(99);
    kiln_params *ost = NULL;
    ASSERT_OK(kiln_params_create(&ost));
    ASSERT_OK(kiln_module_state(other, "", ost));
    ASSERT_OK(kiln_params_load(ost, path));
    unlink(path);
    ck_assert_int_eq(batches_tracked(ost), 3);
    kiln_module_set_training(other, false);
    kiln_tensor *y2 = NULL;
    ASSERT_OK(kiln_module_forward(seq, x, &y));
    ASSERT_OK(kiln_module_forward(other, x, &y2));
    assert_same_values(y, y2, "reloaded model");
    kiln_tensor_release(y);
    kiln_tensor_release(y2);
    kiln_params_free(ost);
    kiln_module_free(other);

    /* to(f64): the floating parameters and buffers convert, num_batches_tracked stays i64 */
    if (has_fp64(dev)) {
        ASSERT_OK(kiln_module_to_dtype(seq, KILN_F64));
        kiln_params *st64 = NULL;
        ASSERT_OK(kiln_params_create(&st64));
        ASSERT_OK(kiln_module_state(seq, "", st64));
        for (int i = 0; i < 9; i++)
            ck_assert_int_eq(kiln_tensor_dtype(kiln_params_tensor(st64, i)),
                             i == 6 ? KILN_I64 : KILN_F64);
        ck_assert_int_eq(batches_tracked(st64), 3);
        ck_assert(!kiln_tensor_requires_grad(kiln_params_find(st64, "1.running_var")));
        ck_assert(kiln_tensor_requires_grad(kiln_params_find(st64, "1.weight")));
        kiln_params_free(st64);
    }
    kiln_tensor *all[] = {x, rm, rv, rm_now, rv_now};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
    kiln_params_free(ps);
    kiln_params_free(st);
    kiln_module_free(seq);
}
END_TEST

START_TEST(test_cnn_module_errors)
{
    uint64_t before = live_bytes();
    kiln_module *m = (kiln_module *)&before;
    const kiln_conv2d_params neg = {.stride = {1, -1}}, g3 = {.groups = 3};
    ASSERT_FAILS(kiln_conv2d_create(dev, KILN_I32, 3, 4, 3, 3, NULL, true, 1, &m),
                 KILN_ERR_DTYPE_MISMATCH, "kiln_conv2d_create");
    ASSERT_FAILS(kiln_conv2d_create(NULL, KILN_F32, 3, 4, 3, 3, NULL, true, 1, &m),
                 KILN_ERR_INVALID_ARGUMENT, "dev is NULL");
    ASSERT_FAILS(kiln_conv2d_create(dev, KILN_F32, 3, 4, 0, 3, NULL, true, 1, &m),
                 KILN_ERR_INVALID_ARGUMENT, "kh is 0");
    ASSERT_FAILS(kiln_conv2d_create(dev, KILN_F32, 3, 4, 3, 3, &neg, true, 1, &m),
                 KILN_ERR_INVALID_ARGUMENT, "params->stride[1] is -1");
    ASSERT_FAILS(kiln_conv2d_create(dev, KILN_F32, 3, 4, 3, 3, &g3, true, 1, &m),
                 KILN_ERR_INVALID_ARGUMENT, "divisible by groups 3");
    ASSERT_FAILS(kiln_conv2d_create(dev, KILN_F32, 3, 4, 3, 3, NULL, true, 1, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "m is NULL");
    const kiln_pool2d_params k0 = {.kernel = {0, 2}}, pad = {.kernel = {2, 2}, .padding = {2, 0}};
    ASSERT_FAILS(kiln_max_pool2d_create(NULL, &m), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_max_pool2d_create: params is NULL");
    ASSERT_FAILS(kiln_avg_pool2d_create(&k0, &m), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_avg_pool2d_create: params->kernel[0] is 0");
    ASSERT_FAILS(kiln_max_pool2d_create(&pad, &m), KILN_ERR_INVALID_ARGUMENT,
                 "params->padding[0] is 2");
    ASSERT_FAILS(kiln_adaptive_avg_pool2d_create(2, 2, &m), KILN_ERR_UNSUPPORTED,
                 "only the global average");
    ASSERT_FAILS(kiln_adaptive_avg_pool2d_create(0, 1, &m), KILN_ERR_INVALID_ARGUMENT, "oh is 0");
    ASSERT_FAILS(kiln_flatten_create(1, 99, &m), KILN_ERR_INVALID_ARGUMENT, "kiln_flatten_create");
    ASSERT_FAILS(kiln_batch_norm2d_create(dev, KILN_F32, 4, 1e-5, 1.5, &m),
                 KILN_ERR_INVALID_ARGUMENT, "kiln_batch_norm2d_create: momentum is 1.5");
    ASSERT_FAILS(kiln_batch_norm1d_create(dev, KILN_F32, 0, 1e-5, 0.1, &m),
                 KILN_ERR_INVALID_ARGUMENT, "features is 0");
    ASSERT_FAILS(kiln_batch_norm1d_create(dev, KILN_F32, 4, -1, 0.1, &m), KILN_ERR_INVALID_ARGUMENT,
                 "eps is -1");
    ASSERT_FAILS(kiln_module_state(NULL, "", NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_module_state: m is NULL");
    ck_assert_ptr_null(m);
    ck_assert_uint_eq(live_bytes(), before);

    /* a rank the module does not take, as PyTorch says it; nothing counted */
    kiln_module *bn2 = NULL, *bn1 = NULL, *flat = NULL;
    ASSERT_OK(kiln_batch_norm2d_create(dev, KILN_F32, 3, 1e-5, 0.1, &bn2));
    ASSERT_OK(kiln_batch_norm1d_create(dev, KILN_F32, 3, 1e-5, 0.1, &bn1));
    ASSERT_OK(kiln_flatten_create(0, -1, &flat));
    const int64_t s3[3] = {2, 3, 4}, s4[4] = {2, 3, 2, 2};
    double v[24];
    fill_values(KILN_F32, v, 24);
    kiln_tensor *x3 = upload(dev, KILN_F32, 3, s3, v), *x4 = upload(dev, KILN_F32, 4, s4, v);
    kiln_tensor *y = (kiln_tensor *)&before;
    ASSERT_FAILS(kiln_module_forward(bn2, x3, &y), KILN_ERR_SHAPE_MISMATCH,
                 "expected 4D input (got 3D input)");
    ck_assert_ptr_null(y);
    ASSERT_FAILS(kiln_module_forward(bn1, x4, &y), KILN_ERR_SHAPE_MISMATCH,
                 "expected 2D or 3D input (got 4D input)");
    /* BatchNorm1d on [N, C, L] and [N, C]; flatten(0, -1) gives every element in one axis */
    ASSERT_OK(kiln_module_forward(bn1, x3, &y));
    kiln_tensor_release(y);
    ASSERT_OK(kiln_module_forward(flat, x4, &y));
    ck_assert_int_eq(kiln_tensor_ndim(y), 1);
    ck_assert_int_eq(kiln_tensor_shape(y)[0], 24);
    kiln_tensor_release(y);
    kiln_params *st = NULL;
    ASSERT_OK(kiln_params_create(&st));
    ASSERT_OK(kiln_module_state(bn2, "bn", st));
    ck_assert_str_eq(kiln_params_name(st, 4), "bn.num_batches_tracked");
    ck_assert_int_eq(batches_tracked_named(st, "bn.num_batches_tracked"), 0);
    kiln_params_free(st);
    kiln_tensor_release(x3);
    kiln_tensor_release(x4);
    kiln_module_free(bn2);
    kiln_module_free(bn1);
    kiln_module_free(flat);
}
END_TEST

/* ---- errors and failed allocations ------------------------------------------------------------
 */

/* Sizes whose arithmetic overflows int64 (in + out, in * out) or an address: an error naming the
 * layer and its shape, never UB or a message about kiln_rand_uniform's bounds (issue 21). */
START_TEST(test_huge_sizes)
{
    const int64_t half = ((int64_t)1 << 62) + 1, big = INT64_MAX;
    static const kiln_init inits[] = {KILN_INIT_DEFAULT, KILN_INIT_HE, KILN_INIT_XAVIER};
    kiln_module *m = NULL;
    for (int i = 0; i < 3; i++) {
        m = (kiln_module *)&m;
        ASSERT_FAILS(kiln_linear_create(dev, KILN_F32, half, half, true, inits[i], 1, &m),
                     KILN_ERR_INVALID_ARGUMENT,
                     "kiln_linear_create: in 4611686018427387905, "
                     "out 4611686018427387905: the weight");
        ASSERT_ERROR_HAS("[4611686018427387905, 4611686018427387905]");
        ck_assert_ptr_null(m);
        ASSERT_FAILS(kiln_linear_create(dev, KILN_F32, big, 1, false, inits[i], 1, &m),
                     KILN_ERR_INVALID_ARGUMENT, "kiln_linear_create: in 9223372036854775807");
        ASSERT_ERROR_HAS("[1, 9223372036854775807] of f32");
        ck_assert_ptr_null(m);
        ASSERT_FAILS(kiln_linear_create(dev, KILN_F64, 1, big / 4 + 1, true, inits[i], 1, &m),
                     KILN_ERR_INVALID_ARGUMENT, "kiln_linear_create: in 1, out");
        ck_assert_ptr_null(m);
    }
    ASSERT_FAILS(kiln_embedding_create(dev, KILN_F32, big, 2, 1, &m), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_embedding_create: count 9223372036854775807, dim 2: the weight");
    ck_assert_ptr_null(m);
    ASSERT_FAILS(kiln_layer_norm_create(dev, KILN_F32, big, 1e-5, &m), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_layer_norm_create: dim 9223372036854775807: the weight");
    ck_assert_ptr_null(m);
}
END_TEST

/* ---- KILN_SEED_GLOBAL (issue 22) ------------------------------------------------------------ */

/* Draw k (from 1) after kiln_manual_seed(s), by kiln.h's documented rule (SplitMix64). */
static uint64_t draw_ref(uint64_t s, uint64_t k)
{
    uint64_t z = s + k * 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* The bytes of every parameter of m, concatenated (malloc'd), and their count. */
static unsigned char *param_bytes(const kiln_module *m, size_t *len)
{
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(m, "", ps));
    size_t n = 0;
    for (int i = 0; i < kiln_params_count(ps); i++)
        n += kiln_tensor_nbytes(kiln_params_tensor(ps, i));
    unsigned char *b = malloc(n), *at = b;
    for (int i = 0; i < kiln_params_count(ps); i++) {
        size_t k = kiln_tensor_nbytes(kiln_params_tensor(ps, i));
        ASSERT_OK(kiln_tensor_read(kiln_params_tensor(ps, i), at, k));
        at += k;
    }
    kiln_params_free(ps);
    *len = n;
    return b;
}

static bool same_params(const kiln_module *a, const kiln_module *b)
{
    size_t na, nb;
    unsigned char *x = param_bytes(a, &na), *y = param_bytes(b, &nb);
    bool same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

START_TEST(test_global_seed_layers)
{
    kiln_module *l1 = NULL, *l2 = NULL, *l3 = NULL, *e1 = NULL, *e2 = NULL, *d1 = NULL;
    kiln_manual_seed(31);
    ASSERT_OK(
        kiln_linear_create(dev, KILN_F32, 4, 3, true, KILN_INIT_DEFAULT, KILN_SEED_GLOBAL, &l1));
    ASSERT_OK(
        kiln_linear_create(dev, KILN_F32, 4, 3, true, KILN_INIT_DEFAULT, KILN_SEED_GLOBAL, &l2));
    ASSERT_OK(kiln_embedding_create(dev, KILN_F32, 5, 2, KILN_SEED_GLOBAL, &e1));
    ASSERT_OK(kiln_dropout_create(0.5, KILN_SEED_GLOBAL, &d1));
    /* consecutive layers differ */
    ck_assert(!same_params(l1, l2));
    /* each is the layer of the explicit seed the documented rule draws */
    ASSERT_OK(
        kiln_linear_create(dev, KILN_F32, 4, 3, true, KILN_INIT_DEFAULT, draw_ref(31, 2), &l3));
    ck_assert(same_params(l2, l3));
    kiln_module_free(l3);
    ASSERT_OK(kiln_embedding_create(dev, KILN_F32, 5, 2, draw_ref(31, 3), &e2));
    ck_assert(same_params(e1, e2));
    kiln_module_free(e2);
    /* the dropout module drew once at creation: call k is kiln_dropout(x, p, drawn + k) */
    int64_t n = 64;
    kiln_tensor *x = NULL, *y = NULL, *want = NULL;
    ASSERT_OK(kiln_full(dev, KILN_F32, 1, &n, 1.0, &x));
    for (uint64_t k = 0; k < 2; k++) {
        ASSERT_OK(kiln_module_forward(d1, x, &y));
        ASSERT_OK(kiln_dropout(x, 0.5, draw_ref(31, 4) + k, &want));
        void *hy = read_host(y), *hw = read_host(want);
        ck_assert(memcmp(hy, hw, (size_t)n * 4) == 0);
        free(hy);
        free(hw);
        kiln_tensor_release(y);
        kiln_tensor_release(want);
    }
    /* the functional dropout draws per call: the 5th draw */
    ASSERT_OK(kiln_dropout(x, 0.5, KILN_SEED_GLOBAL, &y));
    ASSERT_OK(kiln_dropout(x, 0.5, draw_ref(31, 5), &want));
    void *hy = read_host(y), *hw = read_host(want);
    ck_assert(memcmp(hy, hw, (size_t)n * 4) == 0);
    free(hy);
    free(hw);
    kiln_tensor_release(y);
    kiln_tensor_release(want);
    kiln_tensor_release(x);
    /* a refused creation draws nothing; the same manual seed again gives the same layers */
    kiln_manual_seed(31);
    ASSERT_FAILS(
        kiln_linear_create(dev, KILN_F32, 0, 3, true, KILN_INIT_DEFAULT, KILN_SEED_GLOBAL, &l3),
        KILN_ERR_INVALID_ARGUMENT, "in is 0");
    ASSERT_OK(
        kiln_linear_create(dev, KILN_F32, 4, 3, true, KILN_INIT_DEFAULT, KILN_SEED_GLOBAL, &l3));
    ck_assert(same_params(l1, l3));
    kiln_module_free(l1);
    kiln_module_free(l2);
    kiln_module_free(l3);
    kiln_module_free(e1);
    kiln_module_free(d1);
}
END_TEST

/* ---- kiln_module_to, kiln_module_to_dtype (issue 22, item 6) ----------------------------------
 */

/* The parameters of m: count, and each one's dtype, device and values (malloc'd doubles). */
typedef struct snap {
    int n;
    kiln_tensor *t[8];
    kiln_dtype dt[8];
    kiln_device *dev[8];
    double *v[8];
    int64_t numel[8];
} snap;

static snap snapshot(const kiln_module *m)
{
    snap sn = {0};
    kiln_params *ps = NULL;
    ASSERT_OK(kiln_params_create(&ps));
    ASSERT_OK(kiln_module_params(m, "", ps));
    sn.n = kiln_params_count(ps);
    ck_assert_int_le(sn.n, 8);
    for (int i = 0; i < sn.n; i++) {
        kiln_tensor *t = kiln_params_tensor(ps, i);
        sn.t[i] = t;
        sn.dt[i] = kiln_tensor_dtype(t);
        sn.dev[i] = kiln_tensor_device(t);
        sn.numel[i] = kiln_tensor_numel(t);
        sn.v[i] = download(t);
        ck_assert(kiln_tensor_is_leaf(t) && kiln_tensor_requires_grad(t));
    }
    kiln_params_free(ps);
    return sn;
}

static void snap_free(snap *sn)
{
    for (int i = 0; i < sn->n; i++)
        free(sn->v[i]);
}

/* Issue 22, item 2: a training loop (linear 2 -> 3, Adam, the loss read each step) whose third
 * batch has a class label 3: that step's kiln_tensor_item fails, naming kiln_cross_entropy and
 * the label; the steps before it succeed; without KILN_CHECK. */
START_TEST(test_bad_label_stops_training)
{
    kiln_module *lin = NULL;
    kiln_params *params = NULL;
    kiln_optimizer *opt = NULL;
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 2, 3, true, KILN_INIT_DEFAULT, 7, &lin));
    ASSERT_OK(kiln_params_create(&params));
    ASSERT_OK(kiln_module_params(lin, "", params));
    ASSERT_OK(kiln_adam_create(params, 0.01, 0.9, 0.999, 1e-8, 0.0, &opt));
    static const float x[8] = {0.5f, -1, 1, 2, -0.25f, 0.75f, 3, -2};
    static const int32_t batches[4][4] = {{0, 1, 2, 1}, {2, 2, 0, 1}, {1, 0, 3, 2}, {0, 0, 1, 2}};
    const int64_t xs[2] = {4, 2}, ys[1] = {4};
    int failed_at = -1;
    for (int b = 0; b < 4 && failed_at < 0; b++) {
        kiln_tensor *tx = NULL, *ty = NULL, *logits = NULL, *loss = NULL;
        ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, xs, x, &tx));
        ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, ys, batches[b], &ty));
        ASSERT_OK(kiln_module_forward(lin, tx, &logits));
        ASSERT_OK(kiln_cross_entropy(logits, ty, &loss, NULL));
        ASSERT_OK(kiln_optimizer_zero_grad(opt));
        ASSERT_OK(kiln_backward(loss, NULL, 0));
        ASSERT_OK(kiln_optimizer_step(opt)); /* not a synchronisation point */
        double l;
        kiln_status s = kiln_tensor_item(loss, &l);
        if (s != KILN_OK) {
            failed_at = b;
            ck_assert_int_eq(s, KILN_ERR_INVALID_ARGUMENT);
            ASSERT_ERROR_HAS("kiln_tensor_item: an earlier call failed");
            ASSERT_ERROR_HAS("kiln_cross_entropy: class label 3 at row 2 is outside [0, 3)");
        } else {
            ck_assert_msg(isfinite(l), "batch %d: loss %g", b, l);
        }
        kiln_tensor_release(tx);
        kiln_tensor_release(ty);
        kiln_tensor_release(logits);
        kiln_tensor_release(loss);
    }
    ck_assert_int_eq(failed_at, 2);
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_optimizer_free(opt);
    kiln_params_free(params);
    kiln_module_free(lin);
}
END_TEST

/* b holds a's values converted to dtype dt (a C cast, float_to_half for f16, testutil's
 * rounding for bf16), on dev. */
static void assert_converted(const snap *a, const snap *b, kiln_dtype dt, kiln_device *d)
{
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        ck_assert_int_eq(b->dt[i], dt);
        ck_assert_ptr_eq(b->dev[i], d);
        for (int64_t k = 0; k < a->numel[i]; k++) {
            double want = dt == KILN_F32   ? (double)(float)a->v[i][k]
                          : dt == KILN_F16 ? (double)half_to_float(float_to_half((float)a->v[i][k]))
                          : dt == KILN_BF16 ? bf16_to_double(double_to_bf16(a->v[i][k]))
                                            : a->v[i][k];
            ck_assert_msg(b->v[i][k] == want, "param %d [%lld]: %.9g, want %.9g", i, (long long)k,
                          b->v[i][k], want);
        }
    }
}

static kiln_module *small_model(void)
{
    kiln_module *mods[3] = {NULL, NULL, NULL}, *m = NULL;
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 4, 3, true, KILN_INIT_DEFAULT, 9, &mods[0]));
    ASSERT_OK(kiln_activation_create(KILN_UNARY_RELU, &mods[1]));
    ASSERT_OK(kiln_layer_norm_create(dev, KILN_F32, 3, 1e-5, &mods[2]));
    ASSERT_OK(kiln_sequential_create(mods, 3, &m));
    return m;
}

START_TEST(test_module_to)
{
    kiln_module *m = small_model();
    snap s0 = snapshot(m);
    ck_assert_int_eq(s0.n, 4);
    /* the same device and dtype: nothing changes, not even the handles */
    ASSERT_OK(kiln_module_to(m, dev));
    ASSERT_OK(kiln_module_to_dtype(m, KILN_F32));
    snap s1 = snapshot(m);
    for (int i = 0; i < 4; i++)
        ck_assert_ptr_eq(s1.t[i], s0.t[i]);
    snap_free(&s1);
    /* refused: nothing changes (recurrent layers do not compute in f16 yet) */
    kiln_module *lstm = NULL;
    ASSERT_OK(kiln_lstm_create(dev, KILN_F32, 3, 4, NULL, 1, &lstm));
    ASSERT_FAILS(kiln_module_to_dtype(lstm, KILN_F16), KILN_ERR_UNSUPPORTED,
                 "kiln_module_to_dtype: dtype is f16; half precision compute is not supported yet "
                 "for recurrent layers");
    ASSERT_FAILS(kiln_module_to_dtype(lstm, KILN_BF16), KILN_ERR_UNSUPPORTED, "dtype is bf16");
    kiln_module_free(lstm);
    /* a whole model to bf16: every parameter rounded once, and it runs forward in bf16 */
    kiln_module *mb = small_model();
    snap sb0 = snapshot(mb);
    ASSERT_OK(kiln_module_to_dtype(mb, KILN_BF16));
    snap sb1 = snapshot(mb);
    assert_converted(&sb0, &sb1, KILN_BF16, dev);
    kiln_tensor *xb = NULL, *yb = NULL;
    ASSERT_OK(kiln_full(dev, KILN_BF16, 2, (const int64_t[]){2, 4}, 0.5, &xb));
    ASSERT_OK(kiln_module_forward(mb, xb, &yb));
    ck_assert_int_eq(kiln_tensor_dtype(yb), KILN_BF16);
    kiln_tensor_release(xb);
    kiln_tensor_release(yb);
    snap_free(&sb0);
    snap_free(&sb1);
    kiln_module_free(mb);
    ASSERT_FAILS(kiln_module_to_dtype(m, KILN_I32), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_module_to_dtype: dtype is i32");
    ASSERT_FAILS(kiln_module_to_dtype(m, (kiln_dtype)77), KILN_ERR_INVALID_ARGUMENT,
                 "unknown dtype 77");
    ASSERT_FAILS(kiln_module_to_dtype(NULL, KILN_F64), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_module_to_dtype: m is NULL");
    ASSERT_FAILS(kiln_module_to(m, NULL), KILN_ERR_INVALID_ARGUMENT, "kiln_module_to");
    ASSERT_FAILS(kiln_module_to(NULL, dev), KILN_ERR_INVALID_ARGUMENT, "kiln_module_to: m is NULL");
    s1 = snapshot(m);
    assert_converted(&s0, &s1, KILN_F32, dev);
    for (int i = 0; i < 4; i++)
        ck_assert_ptr_eq(s1.t[i], s0.t[i]);
    snap_free(&s1);
    /* f64 and back: the values converted as C converts them, new leaves, a forward and backward
     * in the new dtype */
    if (has_fp64(dev)) {
        ASSERT_OK(kiln_module_to_dtype(m, KILN_F64));
        snap s2 = snapshot(m);
        assert_converted(&s0, &s2, KILN_F64, dev);
        int64_t xs[2] = {2, 4};
        double xv[8] = {1, -2, 3, -4, 0.5, 0.25, -1, 2};
        kiln_tensor *x = upload(dev, KILN_F64, 2, xs, xv), *y = NULL, *l = NULL;
        ASSERT_OK(kiln_module_forward(m, x, &y));
        ck_assert_int_eq(kiln_tensor_dtype(y), KILN_F64);
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, y, KILN_ALL_AXES, false, &l));
        ASSERT_OK(kiln_backward(l, NULL, 0));
        ck_assert_ptr_nonnull(kiln_tensor_grad(s2.t[0]));
        kiln_tensor_release(l);
        kiln_tensor_release(y);
        kiln_tensor_release(x);
        ASSERT_OK(kiln_module_to_dtype(m, KILN_F32));
        snap s3 = snapshot(m);
        assert_converted(&s0, &s3, KILN_F32, dev);
        ck_assert_ptr_null(kiln_tensor_grad(s3.t[0])); /* a new leaf, without a gradient */
        snap_free(&s2);
        snap_free(&s3);
    } else {
        ASSERT_FAILS(kiln_module_to_dtype(m, KILN_F64), KILN_ERR_UNSUPPORTED, "fp64");
    }
    /* a layer norm alone takes f16 */
    kiln_module *ln = NULL;
    ASSERT_OK(kiln_layer_norm_create(dev, KILN_F32, 3, 1e-5, &ln));
    snap a = snapshot(ln);
    ASSERT_OK(kiln_module_to_dtype(ln, KILN_F16));
    snap b = snapshot(ln);
    assert_converted(&a, &b, KILN_F16, dev);
    snap_free(&a);
    snap_free(&b);
    kiln_module_free(ln);
    /* another device: the same values there */
    kiln_device *other = test_other_device(dev, false);
    if (!other)
        other = test_other_device(dev, true);
    if (other) {
        ASSERT_OK(kiln_module_to(m, other));
        snap s4 = snapshot(m);
        assert_converted(&s0, &s4, KILN_F32, other);
        snap_free(&s4);
        ASSERT_OK(kiln_module_to(m, dev));
    } else {
        test_skip("kiln_module_to onto another device: one device here");
    }
    /* every host allocation failing in turn: a clear status, the model unchanged, no tensor left
     * (the model to f64 where the device has it, else a layer norm to f16) */
    kiln_module *subject = m;
    kiln_dtype to = KILN_F64;
    if (!has_fp64(dev)) {
        ASSERT_OK(kiln_layer_norm_create(dev, KILN_F32, 3, 1e-5, &ln));
        subject = ln;
        to = KILN_F16;
    }
    snap orig = snapshot(subject);
    int failures = 0;
    /* Oclgrind simulates every cast's kernel: there every 4th allocation */
    long stride = simulated(dev) ? 4 : 1;
    for (long n = 1;; n += stride) {
        kiln_live_objects before, after;
        ASSERT_OK(kiln_live_objects_get(&before));
        kiln__alloc_fail_at(n);
        kiln_status s = kiln_module_to_dtype(subject, to);
        long count = kiln__alloc_count();
        kiln__alloc_fail_at(-1);
        snap now = snapshot(subject);
        if (s == KILN_OK) {
            assert_converted(&orig, &now, to, dev);
            snap_free(&now);
            ASSERT_OK(kiln_module_to_dtype(subject, KILN_F32));
            if (count < n)
                break;
            continue; /* the failed allocation was not needed */
        }
        failures++;
        ck_assert_msg(s == KILN_ERR_OUT_OF_MEMORY, "allocation %ld: %s", n, kiln_last_error());
        assert_converted(&orig, &now, KILN_F32, dev);
        for (int i = 0; i < orig.n; i++)
            ck_assert_ptr_eq(now.t[i], orig.t[i]);
        snap_free(&now);
        ASSERT_OK(kiln_live_objects_get(&after));
        ck_assert_uint_eq(after.tensors, before.tensors);
    }
    ck_assert_int_gt(failures, 0);
    snap_free(&orig);
    if (subject != m)
        kiln_module_free(subject);
    snap_free(&s0);
    kiln_module_free(m);
}
END_TEST

START_TEST(test_errors)
{
    uint64_t before = live_bytes();
    int64_t s23[2] = {2, 3}, s43[2] = {4, 3}, s4 = 4, s5 = 5, s3 = 3;
    kiln_tensor *x = NULL, *w = NULL, *b = NULL, *b5 = NULL, *xi = NULL, *w64 = NULL, *y = NULL;
    ASSERT_OK(kiln_full(dev, KILN_F32, 2, s23, 1.0, &x));
    ASSERT_OK(kiln_full(dev, KILN_F32, 2, s43, 1.0, &w));
    ASSERT_OK(kiln_full(dev, KILN_F32, 1, &s4, 1.0, &b));
    ASSERT_OK(kiln_full(dev, KILN_F32, 1, &s5, 1.0, &b5));
    ASSERT_OK(kiln_full(dev, KILN_I32, 2, s23, 1.0, &xi));
    ASSERT_OK(kiln_full(dev, KILN_F16, 2, s43, 1.0, &w64));
    ASSERT_FAILS(kiln_linear(x, w, b, NULL), KILN_ERR_INVALID_ARGUMENT, "y is NULL");
    ASSERT_FAILS(kiln_linear(NULL, w, b, &y), KILN_ERR_INVALID_ARGUMENT, "x");
    ASSERT_FAILS(kiln_linear(x, NULL, b, &y), KILN_ERR_INVALID_ARGUMENT, "weight");
    ASSERT_FAILS(kiln_linear(b, w, NULL, &y), KILN_ERR_SHAPE_MISMATCH, "weight must be [out, in]");
    ASSERT_FAILS(kiln_linear(x, w, b5, &y), KILN_ERR_SHAPE_MISMATCH, "bias has shape [5]");
    ASSERT_FAILS(kiln_linear(xi, w, b, &y), KILN_ERR_DTYPE_MISMATCH, "must be floating");
    ASSERT_FAILS(kiln_linear(x, w64, b, &y), KILN_ERR_DTYPE_MISMATCH, "weight is f16");
    ASSERT_FAILS(kiln_layer_norm(x, b, NULL, 1e-5, &y), KILN_ERR_SHAPE_MISMATCH, "weight");
    ASSERT_FAILS(kiln_layer_norm(x, NULL, NULL, -1, &y), KILN_ERR_INVALID_ARGUMENT, "eps");
    ASSERT_FAILS(kiln_layer_norm(x, NULL, NULL, NAN, &y), KILN_ERR_INVALID_ARGUMENT, "eps");
    ASSERT_FAILS(kiln_dropout(x, 1.0, 1, &y), KILN_ERR_INVALID_ARGUMENT, "[0, 1)");
    ASSERT_FAILS(kiln_dropout(x, -0.1, 1, &y), KILN_ERR_INVALID_ARGUMENT, "[0, 1)");
    ASSERT_FAILS(kiln_dropout(x, NAN, 1, &y), KILN_ERR_INVALID_ARGUMENT, "[0, 1)");
    ASSERT_FAILS(kiln_dropout(xi, 0.5, 1, &y), KILN_ERR_DTYPE_MISMATCH, "floating");
    ck_assert_ptr_null(y);

    kiln_module *m = (kiln_module *)&s3; /* must be overwritten with NULL */
    ASSERT_FAILS(kiln_linear_create(dev, KILN_F32, 0, 3, true, KILN_INIT_HE, 1, &m),
                 KILN_ERR_INVALID_ARGUMENT, "in is 0");
    ck_assert_ptr_null(m);
    ASSERT_FAILS(kiln_linear_create(dev, KILN_I32, 2, 3, true, KILN_INIT_HE, 1, &m),
                 KILN_ERR_DTYPE_MISMATCH, "floating");
    /* layer norm and embedding run in f16 (computing in f32): creation and forward succeed */
    ASSERT_OK(kiln_layer_norm_create(dev, KILN_F16, 3, 1e-5, &m));
    ASSERT_OK(kiln_module_forward(m, w64, &y));
    ck_assert_int_eq(kiln_tensor_dtype(y), KILN_F16);
    kiln_tensor_release(y);
    y = NULL;
    kiln_module_free(m);
    ASSERT_OK(kiln_embedding_create(dev, KILN_F16, 4, 3, 1, &m));
    kiln_module_free(m);
    m = NULL;
    ASSERT_FAILS(kiln_linear_create(dev, KILN_F32, 2, 3, true, (kiln_init)7, 1, &m),
                 KILN_ERR_INVALID_ARGUMENT, "unknown init");
    ASSERT_FAILS(kiln_linear_create(NULL, KILN_F32, 2, 3, true, KILN_INIT_HE, 1, &m),
                 KILN_ERR_INVALID_ARGUMENT, "dev is NULL");
    ASSERT_FAILS(kiln_linear_create(dev, KILN_F32, 2, 3, true, KILN_INIT_HE, 1, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "m is NULL");
    ASSERT_FAILS(kiln_layer_norm_create(dev, KILN_F32, 0, 1e-5, &m), KILN_ERR_INVALID_ARGUMENT,
                 "dim is 0");
    ASSERT_FAILS(kiln_layer_norm_create(dev, KILN_F32, 3, -1, &m), KILN_ERR_INVALID_ARGUMENT,
                 "eps");
    ASSERT_FAILS(kiln_embedding_create(dev, KILN_U8, 3, 3, 1, &m), KILN_ERR_DTYPE_MISMATCH,
                 "floating");
    ASSERT_FAILS(kiln_embedding_create(dev, KILN_F32, 3, -1, 1, &m), KILN_ERR_INVALID_ARGUMENT,
                 "dim is -1");
    ASSERT_FAILS(kiln_dropout_create(1.5, 1, &m), KILN_ERR_INVALID_ARGUMENT, "[0, 1)");
    ASSERT_FAILS(kiln_activation_create((kiln_unary_op)99, &m), KILN_ERR_INVALID_ARGUMENT,
                 "unknown unary op 99");
    ASSERT_FAILS(kiln_module_forward(NULL, x, &y), KILN_ERR_INVALID_ARGUMENT, "m is NULL");
    ASSERT_FAILS(kiln_module_params(NULL, "", NULL), KILN_ERR_INVALID_ARGUMENT, "m is NULL");
    ck_assert_ptr_null(m);

    /* a forward with a bad x names kiln_linear; a sequential frees its modules on failure */
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 5, 2, true, KILN_INIT_DEFAULT, 1, &m));
    ASSERT_FAILS(kiln_module_forward(m, x, &y), KILN_ERR_SHAPE_MISMATCH, "kiln_linear");
    ASSERT_FAILS(kiln_module_params(m, "", NULL), KILN_ERR_INVALID_ARGUMENT, "list is NULL");
    kiln_module *mods[3] = {m, NULL, NULL}, *seq = NULL;
    ASSERT_OK(kiln_activation_create(KILN_UNARY_GELU, &mods[2]));
    ASSERT_FAILS(kiln_sequential_create(mods, 3, &seq), KILN_ERR_INVALID_ARGUMENT,
                 "mods[1] is NULL");
    ck_assert_ptr_null(seq);
    ASSERT_OK(kiln_activation_create(KILN_UNARY_GELU, &mods[0]));
    mods[1] = mods[0];
    ASSERT_FAILS(kiln_sequential_create(mods, 2, &seq), KILN_ERR_INVALID_ARGUMENT,
                 "mods[1] is mods[0]");
    ASSERT_FAILS(kiln_sequential_create(NULL, 2, &seq), KILN_ERR_INVALID_ARGUMENT, "mods is NULL");
    ASSERT_OK(kiln_activation_create(KILN_UNARY_GELU, &mods[0]));
    ASSERT_FAILS(kiln_sequential_create(mods, 0, &seq), KILN_ERR_INVALID_ARGUMENT, ">= 1");
    kiln_module_free(mods[0]); /* n = 0 owns nothing */

    kiln_tensor *all[] = {x, w, b, b5, xi, w64};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
    ck_assert_uint_eq(live_bytes(), before);
    kiln_module_free(NULL);
    kiln_module_set_training(NULL, true);
}
END_TEST

/* Every host allocation of each create fails in turn (then the device budget): a clear status,
 * *m NULL, no tensor left. ASan's leak check covers the host memory. */
static kiln_status create_nth(int which, kiln_module **m)
{
    switch (which) {
    case 0:
        return kiln_linear_create(dev, KILN_F32, 3, 2, true, KILN_INIT_DEFAULT, 1, m);
    case 1:
        return kiln_layer_norm_create(dev, KILN_F32, 3, 1e-5, m);
    case 2:
        return kiln_embedding_create(dev, KILN_F32, 4, 3, 1, m);
    case 3:
        return kiln_dropout_create(0.1, 1, m);
    case 4:
        return kiln_activation_create(KILN_UNARY_SIGMOID, m);
    case 5:
        return kiln_conv2d_create(dev, KILN_F32, 4, 2, 3, 3, NULL, true, 1, m);
    case 6:
        return kiln_batch_norm2d_create(dev, KILN_F32, 3, 1e-5, 0.1, m);
    default: {
        kiln_module *mods[2] = {0};
        *m = NULL;
        kiln_status s = kiln_linear_create(dev, KILN_F32, 3, 2, true, KILN_INIT_HE, 1, &mods[0]);
        if (s != KILN_OK)
            return s;
        s = kiln_activation_create(KILN_UNARY_RELU, &mods[1]);
        if (s != KILN_OK) {
            kiln_module_free(mods[0]);
            return s;
        }
        return kiln_sequential_create(mods, 2, m);
    }
    }
}

START_TEST(test_out_of_memory)
{
    /* Oclgrind simulates each creation's kernels: there the linear layer, conv, batch norm and the
     * sequential */
    for (int which = 0; which < 8; which += simulated(dev) && which == 0 ? 5 : 1) {
        kiln_module *m = NULL;
        ASSERT_OK(create_nth(which, &m)); /* the kernels built, so that only creation counts */
        kiln_module_free(m);
        uint64_t before = live_bytes();
        int failures = 0;
        for (long n = 1;; n++) {
            m = (kiln_module *)&failures;
            kiln__alloc_fail_at(n);
            kiln_status s = create_nth(which, &m);
            long count = kiln__alloc_count();
            kiln__alloc_fail_at(-1);
            if (s == KILN_OK) {
                kiln_module_free(m);
                if (count < n)
                    break;
                continue; /* the failed allocation was retried or not needed */
            }
            failures++;
            ck_assert_msg(s == KILN_ERR_OUT_OF_MEMORY, "create %d, allocation %ld: %s", which, n,
                          kiln_last_error());
            ck_assert_ptr_null(m);
            ck_assert_uint_eq(live_bytes(), before);
        }
        ck_assert_int_gt(failures, 0);
    }
    /* the device's budget: room for the weight, not for the bias */
    ASSERT_OK(kiln_device_synchronize(dev));
    ASSERT_OK(kiln_device_empty_cache(dev));
    uint64_t before = live_bytes();
    ASSERT_OK(kiln_device_set_memory_limit(dev, before + 64 * 64 * 4 + 16));
    kiln_module *m = NULL;
    ASSERT_FAILS(kiln_linear_create(dev, KILN_F32, 64, 64, true, KILN_INIT_DEFAULT, 1, &m),
                 KILN_ERR_OUT_OF_MEMORY, "");
    ck_assert_ptr_null(m);
    ck_assert_uint_eq(live_bytes(), before);
    ASSERT_OK(kiln_device_set_memory_limit(dev, 0));
}
END_TEST

Suite *layers_suite(void)
{
    Suite *s = suite_create("layers");
    TCase *tc = tcase_create("layers");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_linear_forward);
    tcase_add_loop_test(tc, test_linear_f16, 0, 2);
    tcase_add_test(tc, test_layer_norm_forward);
    tcase_add_test(tc, test_batch_norm);
    tcase_add_loop_test(tc, test_batch_norm_mixed, 0, 2);
    tcase_add_test(tc, test_dropout);
    tcase_add_test(tc, test_dropout_module);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_init);
    tcase_add_test(tc, test_same_weights_everywhere);
    tcase_add_test(tc, test_gradients);
    tcase_add_test(tc, test_sequential);
    tcase_add_test(tc, test_cnn_modules);
    tcase_add_test(tc, test_cnn_module_errors);
    tcase_add_test(tc, test_global_seed_layers);
    tcase_add_test(tc, test_bad_label_stops_training);
    tcase_add_test(tc, test_module_to);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_out_of_memory);
    suite_add_tcase(s, tc);
    TCase *th = tcase_create("sizes");
    tcase_add_unchecked_fixture(th, setup, teardown);
    tcase_add_test(th, test_huge_sizes);
    suite_add_tcase(s, th);
    return s;
}
