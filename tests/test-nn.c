/* test-nn.c - softmax, log-softmax, cross-entropy, MSE, L1, BCE, SGD and Adam against C formulas.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "testutil.h"

/* Tolerances (references in double from the same inputs; eps = 2^-23 for f32, 2^-52 for f64,
 * 2^-10 for f16 storage):
 *   softmax, log-softmax   |got - ref| <= 16 eps (1 + |ref|) (f16: 1 eps, its rounding); rows of
 *                          softmax sum to 1 within 1e-6 (f32)
 *   cross-entropy, MSE     loss: |got - ref| <= 64 eps (1 + |ref|); grad: 16 eps (1 + |ref|)
 *   SGD, Adam              p, v, m after each step: 16 eps (1 + |ref|), over 3 steps
 */

static double eps_of(kiln_dtype dt)
{
    return dt == KILN_F64    ? ldexp(1, -52)
           : dt == KILN_F16  ? ldexp(1, -10)
           : dt == KILN_BF16 ? ldexp(1, -7)
                             : ldexp(1, -23);
}

static bool narrow(kiln_dtype dt)
{
    return dt == KILN_F16 || dt == KILN_BF16;
}

static void assert_close(const double *got, const double *ref, int64_t n, double tol,
                         const char *what, const kiln_device *dev, kiln_dtype dt)
{
    for (int64_t i = 0; i < n; i++) {
        double bound = tol * (1 + fabs(ref[i]));
        ck_assert_msg(fabs(got[i] - ref[i]) <= bound,
                      "%s %s on %s: element %lld is %.17g, reference %.17g (bound %.3g)", what,
                      kiln_dtype_name(dt), kiln_device_spec(dev), (long long)i, got[i], ref[i],
                      bound);
    }
}

static const kiln_dtype float_dtypes[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};

static bool usable(kiln_device *dev, kiln_dtype dt)
{
    return dt != KILN_F64 || has_fp64(dev);
}

/* Softmax of x viewed as [outer, n, inner] over n, in double. */
static void ref_softmax(const double *x, int64_t outer, int64_t n, int64_t inner, bool logmode,
                        double *out)
{
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const double *row = x + o * n * inner + i;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < n; j++)
                m = fmax(m, row[j * inner]);
            for (int64_t j = 0; j < n; j++)
                s += exp(row[j * inner] - m);
            for (int64_t j = 0; j < n; j++) {
                double d = row[j * inner] - m;
                out[o * n * inner + j * inner + i] = logmode ? d - log(s) : exp(d) / s;
            }
        }
    }
}

static void check_softmax(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *shape, int axis,
                          bool logmode, const double *values)
{
    int a = axis < 0 ? axis + ndim : axis;
    int64_t outer = 1, inner = 1, n = 1;
    for (int d = 0; d < ndim; d++) {
        n *= shape[d];
        outer *= d < a ? shape[d] : 1;
        inner *= d > a ? shape[d] : 1;
    }
    double *x = malloc((size_t)n * sizeof(double)), *ref = malloc((size_t)n * sizeof(double));
    ck_assert(x && ref);
    if (values) {
        memcpy(x, values, (size_t)n * sizeof(double));
    } else {
        fill_values(dt, x, n); /* [-1, 1), or [-4, 4] for f16/bf16: scaled to logits of +-4 */
        for (int64_t i = 0; i < n; i++)
            x[i] *= narrow(dt) ? 1 : 4;
    }
    ref_softmax(x, outer, shape[a], inner, logmode, ref);
    kiln_tensor *t = upload(dev, dt, ndim, shape, x), *y = NULL;
    ASSERT_OK(logmode ? kiln_log_softmax(t, axis, &y) : kiln_softmax(t, axis, &y));
    ck_assert_int_eq(kiln_tensor_dtype(y), dt);
    ck_assert_int_eq(kiln_tensor_ndim(y), ndim);
    double *got = download(y);
    double tol = narrow(dt) ? eps_of(dt) : 16 * eps_of(dt); /* f16/bf16: the storage rounding */
    assert_close(got, ref, n, tol, logmode ? "log_softmax" : "softmax", dev, dt);
    if (!logmode && dt == KILN_F32) {
        for (int64_t r = 0; r < outer * inner; r++) {
            double s = 0;
            for (int64_t j = 0; j < shape[a]; j++)
                s += got[(r / inner) * shape[a] * inner + j * inner + r % inner];
            ck_assert_msg(fabs(s - 1) <= 1e-6, "softmax row %lld sums to %.9g", (long long)r, s);
        }
    }
    free(got);
    /* the _out form writes the same into an existing tensor */
    kiln_tensor *o = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, dt, ndim, shape, &o));
    ASSERT_OK(logmode ? kiln_log_softmax_out(t, axis, o) : kiln_softmax_out(t, axis, o));
    got = download(o);
    assert_close(got, ref, n, tol, logmode ? "log_softmax_out" : "softmax_out", dev, dt);
    free(got);
    kiln_tensor_release(o);
    free(x);
    free(ref);
    kiln_tensor_release(t);
    kiln_tensor_release(y);
}

START_TEST(test_softmax)
{
    static const int64_t s2[] = {4, 10}, s3[] = {2, 3, 5}, s1[] = {7}, sw[] = {3, 1000};
    for (int i = 0; i < ndevs; i++) {
        for (size_t k = 0; k < sizeof float_dtypes / sizeof float_dtypes[0]; k++) {
            kiln_dtype dt = float_dtypes[k];
            if (!usable(devs[i], dt))
                continue;
            for (int logmode = 0; logmode < 2; logmode++) {
                check_softmax(devs[i], dt, 2, s2, 1, logmode, NULL);
                check_softmax(devs[i], dt, 2, s2, 0, logmode, NULL);
                check_softmax(devs[i], dt, 3, s3, 1, logmode, NULL);
                check_softmax(devs[i], dt, 3, s3, -1, logmode, NULL);
                check_softmax(devs[i], dt, 1, s1, 0, logmode, NULL);
            }
        }
        check_softmax(devs[i], KILN_F32, 2, sw, 1, false, NULL);
        /* Rows in vectors of 8 on CPUs: lengths 8, 37 and 1029 (tails of 0, 5 and 5). */
        static const int64_t v8[] = {2, 8}, v37[] = {3, 37}, v1029[] = {5, 1029};
        for (size_t k = 0; k < sizeof float_dtypes / sizeof float_dtypes[0]; k++) {
            kiln_dtype dt = float_dtypes[k];
            if (!usable(devs[i], dt))
                continue;
            for (int logmode = 0; logmode < 2; logmode++) {
                check_softmax(devs[i], dt, 2, v8, -1, logmode, NULL);
                check_softmax(devs[i], dt, 2, v37, 1, logmode, NULL);
                if (!simulated(devs[i]))
                    check_softmax(devs[i], dt, 2, v1029, 1, logmode, NULL);
            }
        }
        static const int64_t many[] = {70001, 3}; /* rows split over several launches */
        if (!simulated(devs[i]))
            check_softmax(devs[i], KILN_F32, 2, many, 1, true, NULL);
    }
}
END_TEST

/* Logits of +-1000 overflow exp() unless the row maximum is subtracted first. */
START_TEST(test_softmax_stability)
{
    static const int64_t shape[] = {2, 4};
    static const double x[] = {1000, -1000, 0, 999, -1000, -1000, -999, -1001};
    for (int i = 0; i < ndevs; i++) {
        check_softmax(devs[i], KILN_F32, 2, shape, 1, false, x);
        check_softmax(devs[i], KILN_F32, 2, shape, 1, true, x);
        if (has_fp64(devs[i]))
            check_softmax(devs[i], KILN_F64, 2, shape, -1, true, x);
    }
}
END_TEST

START_TEST(test_softmax_errors)
{
    static const int64_t shape[] = {2, 3};
    kiln_tensor *t = NULL, *ti = NULL, *y = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, shape, &t));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 2, shape, &ti));
    ASSERT_FAILS(kiln_softmax(ti, 1, &y), KILN_ERR_DTYPE_MISMATCH, "i32");
    ck_assert_ptr_null(y);
    ASSERT_FAILS(kiln_log_softmax(t, 2, &y), KILN_ERR_INVALID_ARGUMENT, "axis 2 is out of range");
    ASSERT_FAILS(kiln_softmax(t, -3, &y), KILN_ERR_INVALID_ARGUMENT, "axis -3");
    ASSERT_FAILS(kiln_softmax(NULL, 0, &y), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_softmax(t, 0, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    kiln_tensor_release(t);
    kiln_tensor_release(ti);
}
END_TEST

/* Mean cross-entropy and its gradient (softmax - onehot) / N, in double. */
static double ref_cross_entropy(const double *x, const int64_t *labels, int64_t rows,
                                int64_t classes, double *grad)
{
    double total = 0;
    for (int64_t r = 0; r < rows; r++) {
        const double *row = x + r * classes;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < classes; j++)
            m = fmax(m, row[j]);
        for (int64_t j = 0; j < classes; j++)
            s += exp(row[j] - m);
        total += m + log(s) - row[labels[r]];
        for (int64_t j = 0; j < classes; j++)
            grad[r * classes + j] = (exp(row[j] - m) / s - (j == labels[r])) / (double)rows;
    }
    return total / (double)rows;
}

static void check_cross_entropy(kiln_device *dev, kiln_dtype dt, kiln_dtype label_dt, int64_t rows,
                                int64_t classes, bool want_grad)
{
    int64_t n = rows * classes, shape[2] = {rows, classes};
    double *x = malloc((size_t)n * sizeof(double)), *g = malloc((size_t)n * sizeof(double));
    int64_t *labels = malloc((size_t)rows * sizeof(int64_t));
    double *lab = malloc((size_t)rows * sizeof(double));
    ck_assert(x && g && labels && lab);
    fill_values(dt, x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] *= 5;
    for (int64_t r = 0; r < rows; r++)
        labels[r] = (int64_t)(rnd() * (double)classes), lab[r] = (double)labels[r];
    double ref = ref_cross_entropy(x, labels, rows, classes, g);
    kiln_tensor *t = upload(dev, dt, 2, shape, x), *l = upload(dev, label_dt, 1, &rows, lab);
    kiln_tensor *loss = NULL, *grad = NULL;
    ASSERT_OK(kiln_cross_entropy(t, l, &loss, want_grad ? &grad : NULL));
    ck_assert_int_eq(kiln_tensor_numel(loss), 1);
    ck_assert_int_eq(kiln_tensor_dtype(loss), dt);
    double *got = download(loss);
    assert_close(got, &ref, 1, 64 * eps_of(dt), "cross_entropy loss", dev, dt);
    free(got);
    if (want_grad) {
        ck_assert_int_eq(kiln_tensor_ndim(grad), 2);
        got = download(grad);
        assert_close(got, g, n, 16 * eps_of(dt), "cross_entropy grad", dev, dt);
        free(got);
    }
    kiln_tensor_release(loss);
    kiln_tensor_release(grad);
    /* the _out form into existing tensors */
    int64_t one = 1;
    grad = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, dt, 1, &one, &loss));
    if (want_grad)
        ASSERT_OK(kiln_tensor_empty(dev, dt, 2, shape, &grad));
    ASSERT_OK(kiln_cross_entropy_out(t, l, loss, grad));
    got = download(loss);
    assert_close(got, &ref, 1, 64 * eps_of(dt), "cross_entropy_out loss", dev, dt);
    free(got);
    if (want_grad) {
        got = download(grad);
        assert_close(got, g, n, 16 * eps_of(dt), "cross_entropy_out grad", dev, dt);
        free(got);
    }
    kiln_tensor_release(loss);
    kiln_tensor_release(grad);
    kiln_tensor_release(t);
    kiln_tensor_release(l);
    free(x);
    free(g);
    free(labels);
    free(lab);
}

START_TEST(test_cross_entropy)
{
    for (int i = 0; i < ndevs; i++) {
        check_cross_entropy(devs[i], KILN_F32, KILN_I32, 7, 5, true);
        check_cross_entropy(devs[i], KILN_F32, KILN_I64, 7, 5, false);
        check_cross_entropy(devs[i], KILN_F32, KILN_I64, 1, 1, true);
        check_cross_entropy(devs[i], KILN_F32, KILN_I32, 61, 10, true);
        if (has_fp64(devs[i]))
            check_cross_entropy(devs[i], KILN_F64, KILN_I64, 7, 5, true);
        /* Rows in vectors of 8 on CPUs, with tails and without. */
        check_cross_entropy(devs[i], KILN_F32, KILN_I32, 5, 37, true);
        check_cross_entropy(devs[i], KILN_F32, KILN_I64, 6, 8, false);
        check_cross_entropy(devs[i], KILN_F32, KILN_I64, 6, 16, true);
        if (!simulated(devs[i]))
            check_cross_entropy(devs[i], KILN_F32, KILN_I32, 3, 1029, true);
        if (has_fp64(devs[i]))
            check_cross_entropy(devs[i], KILN_F64, KILN_I32, 4, 19, true);
    }
}
END_TEST

/* A label outside [0, C) (issue 22, item 2): checking it before the launch would need a blocking
 * read, so the call returns KILN_OK and the row's loss is NaN; the kernel records the label in
 * the device error word, and the first call that waits for the device (a read, an item, a map,
 * a synchronize) fails once, naming itself, kiln_cross_entropy, the label, its row and the
 * range. Later violations before that call are not reported; good labels report nothing. */
START_TEST(test_cross_entropy_bad_label)
{
    static const int64_t shape[] = {2, 3}, rows = 2;
    static const float x[] = {1, 2, 3, 4, 5, 6};
    static const int32_t labels[] = {1, 3}, later[] = {9, 0}, good[] = {2, 0};
    const char *want = "kiln_cross_entropy: class label 3 at row 1 is outside [0, 3)";
    for (int i = 0; i < ndevs; i++) {
        kiln_device *dev = devs[i];
        kiln_tensor *t = NULL, *l = NULL, *l2 = NULL, *lg = NULL, *loss = NULL, *grad = NULL;
        ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, shape, x, &t));
        ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, &rows, labels, &l));
        ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, &rows, later, &l2));
        ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, &rows, good, &lg));
        /* the call itself does not wait for the device: KILN_OK */
        ASSERT_OK(kiln_cross_entropy(t, l, &loss, &grad));
        float f, g[6];
        ASSERT_FAILS(kiln_tensor_read(loss, &f, sizeof f), KILN_ERR_INVALID_ARGUMENT, want);
        ck_assert_msg(strncmp(kiln_last_error(), "kiln_tensor_read: ", 18) == 0, "%s",
                      kiln_last_error());
        ASSERT_ERROR_HAS(kiln_device_spec(dev));
        /* reported once; the values as before: the row's loss and gradient NaN */
        ASSERT_OK(kiln_tensor_read(loss, &f, sizeof f));
        ck_assert_msg(isnan(f), "loss with label 3 of 3 classes is %g", f);
        ASSERT_OK(kiln_tensor_read(grad, g, sizeof g));
        ck_assert(!isnan(g[0]) && isnan(g[3]));
        kiln_tensor_release(loss);
        kiln_tensor_release(grad);
        /* the first violation is the one reported, at whichever call waits first */
        ASSERT_OK(kiln_cross_entropy(t, l, &loss, NULL));
        kiln_tensor_release(loss);
        ASSERT_OK(kiln_cross_entropy(t, l2, &loss, NULL));
        void *p = NULL;
        ASSERT_FAILS(kiln_tensor_map(loss, KILN_MAP_READ, &p), KILN_ERR_INVALID_ARGUMENT, want);
        ck_assert_ptr_null(p);
        ASSERT_OK(kiln_tensor_map(loss, KILN_MAP_READ, &p)); /* nothing was left mapped */
        ASSERT_OK(kiln_tensor_unmap(loss));
        kiln_tensor_release(loss);
        double d;
        ASSERT_OK(kiln_cross_entropy(t, l2, &loss, NULL));
        ASSERT_FAILS(kiln_tensor_item(loss, &d), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_tensor_item: an earlier call failed");
        ASSERT_ERROR_HAS("class label 9 at row 0 is outside [0, 3)");
        kiln_tensor_release(loss);
        ASSERT_OK(kiln_cross_entropy(t, l2, &loss, NULL));
        ASSERT_FAILS(kiln_device_synchronize(dev), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_device_synchronize: an earlier call failed");
        kiln_tensor_release(loss);
        /* good labels after it: nothing reported */
        ASSERT_OK(kiln_cross_entropy(t, lg, &loss, NULL));
        ASSERT_OK(kiln_tensor_item(loss, &d));
        ck_assert(isfinite(d));
        ASSERT_OK(kiln_device_synchronize(dev));
        kiln_tensor_release(loss);
        kiln_tensor_release(t);
        kiln_tensor_release(l);
        kiln_tensor_release(l2);
        kiln_tensor_release(lg);
    }
}
END_TEST

/* KILN_CHECK=1 (issue 10, item 5): the first label outside [0, C) is an error naming it, for
 * i32 and i64 labels and both forms; a malformed KILN_CHECK is an error naming the variable;
 * with every label in range the result is the unchecked one. */
START_TEST(test_cross_entropy_checked)
{
    static const int64_t shape[] = {4, 3}, rows = 4;
    static const float x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 0, 1};
    static const int32_t bad32[] = {0, 2, -1, 7};
    static const int64_t bad64[] = {0, 2, 1, (int64_t)1 << 40}, good64[] = {0, 2, 1, 1};
    kiln_device *dev = test_device();
    kiln_tensor *t = NULL, *l32 = NULL, *l64 = NULL, *good = NULL, *loss = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, shape, x, &t));
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, &rows, bad32, &l32));
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 1, &rows, bad64, &l64));
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 1, &rows, good64, &good));
    kiln_tensor *unchecked = NULL, *checked = NULL;
    ASSERT_OK(kiln_cross_entropy(t, good, &unchecked, NULL));
    /* setenv races with the driver's threads reading the environment: only while idle */
    ASSERT_OK(kiln_device_synchronize(dev));
    ck_assert_int_eq(setenv("KILN_CHECK", "1", 1), 0);
    kiln_status s32 = kiln_cross_entropy(t, l32, &loss, NULL);
    char msg32[512];
    snprintf(msg32, sizeof msg32, "%s", kiln_last_error());
    kiln_tensor *given = NULL;
    kiln_status s64 = kiln_tensor_empty(dev, KILN_F32, 1, (const int64_t[]){1}, &given);
    if (s64 == KILN_OK)
        s64 = kiln_cross_entropy_out(t, l64, given, NULL);
    char msg64[512];
    snprintf(msg64, sizeof msg64, "%s", kiln_last_error());
    kiln_status sgood = kiln_cross_entropy(t, good, &checked, NULL);
    ASSERT_OK(kiln_device_synchronize(dev));
    ck_assert_int_eq(setenv("KILN_CHECK", "yes", 1), 0);
    kiln_tensor *o = (kiln_tensor *)1;
    kiln_status smal = kiln_cross_entropy(t, good, &o, NULL);
    char msgmal[512];
    snprintf(msgmal, sizeof msgmal, "%s", kiln_last_error());
    ASSERT_OK(kiln_device_synchronize(dev));
    unsetenv("KILN_CHECK");
    ck_assert_int_eq(s32, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(loss);
    ck_assert_msg(strstr(msg32, "labels[2] is -1") && strstr(msg32, "3 classes"), "%s", msg32);
    ck_assert_int_eq(s64, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(msg64, "kiln_cross_entropy_out: labels[3] is 1099511627776"), "%s", msg64);
    ck_assert_int_eq(sgood, KILN_OK);
    float a, b;
    ASSERT_OK(kiln_tensor_read(unchecked, &a, sizeof a));
    ASSERT_OK(kiln_tensor_read(checked, &b, sizeof b));
    ck_assert_float_eq(a, b);
    ck_assert_msg(!isnan(a), "loss %g", a);
    ck_assert_int_eq(smal, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(o);
    ck_assert_msg(strstr(msgmal, "KILN_CHECK='yes'"), "%s", msgmal);
    kiln_tensor_release(unchecked);
    kiln_tensor_release(checked);
    kiln_tensor_release(given);
    kiln_tensor_release(good);
    kiln_tensor_release(l64);
    kiln_tensor_release(l32);
    kiln_tensor_release(t);
}
END_TEST

START_TEST(test_cross_entropy_errors)
{
    static const int64_t s23[] = {2, 3}, s2[] = {2}, s3[] = {3}, s6[] = {6};
    kiln_tensor *x = NULL, *x1 = NULL, *l = NULL, *lf = NULL, *l3 = NULL;
    kiln_tensor *loss = (kiln_tensor *)1, *grad = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s23, &x));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 1, s6, &x1));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 1, s2, &l));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 1, s2, &lf));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I64, 1, s3, &l3));
    ASSERT_FAILS(kiln_cross_entropy(x, lf, &loss, &grad), KILN_ERR_DTYPE_MISMATCH, "f32");
    ck_assert_ptr_null(loss);
    ck_assert_ptr_null(grad);
    ASSERT_FAILS(kiln_cross_entropy(l, l, &loss, NULL), KILN_ERR_DTYPE_MISMATCH, "logits is i32");
    ASSERT_FAILS(kiln_cross_entropy(x, l3, &loss, NULL), KILN_ERR_SHAPE_MISMATCH, "[2, 3]");
    ASSERT_FAILS(kiln_cross_entropy(x, l3, &loss, NULL), KILN_ERR_SHAPE_MISMATCH, "[3]");
    ASSERT_FAILS(kiln_cross_entropy(x1, l, &loss, NULL), KILN_ERR_SHAPE_MISMATCH, "[N, C]");
    ASSERT_FAILS(kiln_cross_entropy(NULL, l, &loss, NULL), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_cross_entropy(x, NULL, &loss, NULL), KILN_ERR_INVALID_ARGUMENT, "labels");
    ASSERT_FAILS(kiln_cross_entropy(x, l, NULL, NULL), KILN_ERR_INVALID_ARGUMENT, "loss is NULL");
    kiln_tensor_release(x);
    kiln_tensor_release(x1);
    kiln_tensor_release(l);
    kiln_tensor_release(lf);
    kiln_tensor_release(l3);
}
END_TEST

/* ---- conv2d (issue 23) ------------------------------------------------------------------ */

typedef struct conv_case {
    int64_t n, c, h, w, o, kh, kw;
    kiln_conv2d_params p;
    bool bias;
} conv_case;

/* torch.nn.functional.conv2d's definition, in double: out[n, o, i, j] = bias[o] + sum over the
 * group's channels c and kernel (a, b) of x[n, c, i s0 - p0 + a d0, j s1 - p1 + b d1] w[o, c', a,
 * b] (zero outside x). */
static void ref_conv(const conv_case *k, const double *x, const double *w, const double *b,
                     int64_t oh, int64_t ow, double *out, double *mag)
{
    int g = k->p.groups ? k->p.groups : 1;
    int s0 = k->p.stride[0] ? k->p.stride[0] : 1, s1 = k->p.stride[1] ? k->p.stride[1] : 1;
    int d0 = k->p.dilation[0] ? k->p.dilation[0] : 1, d1 = k->p.dilation[1] ? k->p.dilation[1] : 1;
    int64_t cg = k->c / g, og = k->o / g;
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t o = 0; o < k->o; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double acc = k->bias ? b[o] : 0, m = fabs(acc);
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t a = 0; a < k->kh; a++)
                            for (int64_t bb = 0; bb < k->kw; bb++) {
                                int64_t h = i * s0 - k->p.padding[0] + a * d0;
                                int64_t v = j * s1 - k->p.padding[1] + bb * d1;
                                if (h < 0 || h >= k->h || v < 0 || v >= k->w)
                                    continue;
                                double t =
                                    x[((n * k->c + (o / og) * cg + c) * k->h + h) * k->w + v] *
                                    w[((o * cg + c) * k->kh + a) * k->kw + bb];
                                acc += t;
                                m += fabs(t);
                            }
                    int64_t e = ((n * k->o + o) * oh + i) * ow + j;
                    out[e] = acc;
                    mag[e] = m;
                }
}

/* The output size of a convolution along dimension d (0: rows, 1: columns). */
static int64_t conv_out(int64_t in, int64_t k, const kiln_conv2d_params *p, int d)
{
    int64_t s = p->stride[d] ? p->stride[d] : 1, dl = p->dilation[d] ? p->dilation[d] : 1;
    return (in + 2 * p->padding[d] - dl * (k - 1) - 1) / s + 1;
}

/* Values against ref_conv for strides, paddings, dilations, groups (depthwise too), 1x1 and
 * rectangular kernels, with and without bias, f32 and f16 on every device and f64 where it
 * computes. f16: the reference takes the f16-rounded inputs; the sums are accumulated in f32
 * (the f32 bound) and rounded to f16 twice (the product, then with the bias): 2^-10 (|ref| + 1)
 * more (|b| < 1). */
START_TEST(test_conv2d)
{
    static const conv_case cases[] = {
        {2, 3, 7, 6, 4, 3, 3, {{0, 0}, {0, 0}, {0, 0}, 0}, true},
        {2, 3, 7, 6, 4, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 1}, false},
        {1, 4, 9, 8, 6, 2, 3, {{2, 1}, {0, 2}, {1, 1}, 2}, true},
        {2, 4, 8, 8, 4, 3, 3, {{1, 1}, {2, 2}, {2, 2}, 4}, true},  /* depthwise, dilated */
        {3, 5, 4, 4, 7, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 1}, true},  /* 1x1 */
        {1, 2, 5, 5, 3, 5, 5, {{1, 1}, {0, 0}, {1, 1}, 1}, false}, /* kernel = input: 1x1 out */
        {0, 2, 5, 5, 3, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},  /* an empty batch */
        {2, 3, 9, 7, 6, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 3}, true},  /* depthwise x2, strided */
        {1, 4, 6, 9, 4, 2, 3, {{1, 1}, {1, 0}, {1, 2}, 4}, false}, /* depthwise 2x3, dilated */
        {2, 2, 7, 7, 2, 5, 5, {{1, 1}, {2, 2}, {1, 1}, 2}, true},  /* depthwise 5x5 */
        {2, 1, 6, 6, 5, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},  /* one input channel */
        {3, 3, 6, 5, 4, 3, 2, {{1, 2}, {1, 0}, {1, 1}, 1}, true},  /* chunks of 2, then 1 */
    };
    for (int di = 0; di < ndevs; di++) {
        kiln_device *dev = devs[di];
        for (int dtk = 0; dtk < 4; dtk++) {
            kiln_dtype dt = float_dtypes[dtk];
            if (!usable(dev, dt))
                continue;
            for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
                const conv_case *k = &cases[ci];
                if (simulated(dev) && (ci + (size_t)dtk) % 2)
                    continue; /* Oclgrind: every other case */
                int g = k->p.groups ? k->p.groups : 1;
                const int64_t xs[4] = {k->n, k->c, k->h, k->w},
                              ws[4] = {k->o, k->c / g, k->kh, k->kw};
                int64_t nx = k->n * k->c * k->h * k->w, nw = k->o * (k->c / g) * k->kh * k->kw;
                double *x = malloc(sizeof(double) * (size_t)(nx ? nx : 1));
                double *w = malloc(sizeof(double) * (size_t)nw), b[8];
                for (int64_t i = 0; i < nx; i++)
                    x[i] = rnd() * 2 - 1;
                for (int64_t i = 0; i < nw; i++)
                    w[i] = rnd() * 2 - 1;
                for (int i = 0; i < 8; i++)
                    b[i] = rnd() - 0.5;
                kiln_tensor *tx = upload(dev, dt, 4, xs, x), *tw = upload(dev, dt, 4, ws, w);
                kiln_tensor *tb = k->bias ? upload(dev, dt, 1, &k->o, b) : NULL, *y = NULL;
                if (narrow(dt)) { /* the reference multiplies what the tensors hold */
                    double *held[3] = {download(tx), download(tw), tb ? download(tb) : NULL};
                    memcpy(x, held[0], sizeof(double) * (size_t)nx);
                    memcpy(w, held[1], sizeof(double) * (size_t)nw);
                    if (tb)
                        memcpy(b, held[2], sizeof(double) * (size_t)k->o);
                    for (int i = 0; i < 3; i++)
                        free(held[i]);
                }
                /* The paths: one input channel a group takes the direct kernels, then (path 1)
                 * im2col; one group beyond 1x1 (f32, f64) takes im2col whole, then (paths 1
                 * and 2) a sample and two samples at a time, as a large batch would */
                bool direct = g == k->c;
                bool pointwise = k->kh == 1 && k->kw == 1 && k->p.stride[0] == 1 &&
                                 k->p.stride[1] == 1 && k->p.padding[0] == 0 &&
                                 k->p.padding[1] == 0;
                bool chunked = g == 1 && !pointwise && !narrow(dt);
                int paths = direct ? 2 : chunked ? 3 : 1;
                if (simulated(dev) && dt != KILN_F32)
                    paths = 1; /* Oclgrind: the other paths in f32 alone (time) */
                for (int path = 0; path < paths; path++) {
                    char bytes[32];
                    if (path && direct)
                        setenv("KILN_CONV_DEPTHWISE", "0", 1);
                    if (path && chunked) { /* the columns of one sample, or of two */
                        int64_t oh = conv_out(k->h, k->kh, &k->p, 0),
                                ow = conv_out(k->w, k->kw, &k->p, 1);
                        snprintf(bytes, sizeof bytes, "%lld",
                                 (long long)(path * k->c * k->kh * k->kw * oh * ow *
                                             (dt == KILN_F64 ? 8 : 4)));
                        setenv("KILN_TEST_CONV_CHUNK_BYTES", bytes, 1);
                    }
                    ASSERT_OK(kiln_conv2d(tx, tw, tb, &k->p, &y));
                    unsetenv("KILN_CONV_DEPTHWISE");
                    unsetenv("KILN_TEST_CONV_CHUNK_BYTES");
                    ck_assert_int_eq(kiln_tensor_dtype(y), dt);
                    const int64_t *ys = kiln_tensor_shape(y);
                    ck_assert_int_eq(kiln_tensor_ndim(y), 4);
                    ck_assert(ys[0] == k->n && ys[1] == k->o);
                    int64_t ny = kiln_tensor_numel(y);
                    double *ref = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
                    double *mag = malloc(sizeof(double) * (size_t)(ny ? ny : 1));
                    ref_conv(k, x, w, b, ys[2], ys[3], ref, mag);
                    double *got = download(y);
                    double ebound = narrow(dt) ? eps_of(KILN_F32) : eps_of(dt);
                    for (int64_t i = 0; i < ny; i++)
                        ck_assert_msg(fabs(got[i] - ref[i]) <=
                                          8 * ebound * (mag[i] + 1) +
                                              (narrow(dt) ? eps_of(dt) * (fabs(ref[i]) + 1) : 0),
                                      "conv2d case %zu%s %s on %s: [%lld] %.9g, want %.9g", ci,
                                      !path      ? ""
                                      : direct   ? " (im2col)"
                                      : path < 2 ? " (chunks of one sample)"
                                                 : " (chunks of two)",
                                      kiln_dtype_name(dt), kiln_device_spec(dev), (long long)i,
                                      got[i], ref[i]);
                    free(got);
                    free(ref);
                    free(mag);
                    kiln_tensor_release(y);
                    y = NULL;
                }
                free(x);
                free(w);
                kiln_tensor_release(tx);
                kiln_tensor_release(tw);
                kiln_tensor_release(tb);
                kiln_tensor_release(y);
            }
        }
    }
}
END_TEST

/* Pooling against C loops: max (with its indices, and without) and average over windows with
 * strides and paddings, f32/f64/f16/bf16 on every device, and max pooling's gradient (g summed
 * into each window's maximum: overlapping windows, windows tiling x exactly, windows with gaps
 * and padding between them); NaN wins a max; the global average; errors. */
START_TEST(test_pool2d)
{
    static const kiln_pool2d_params cases[] = {{{2, 2}, {0, 0}, {0, 0}},
                                               {{3, 3}, {2, 2}, {1, 1}},
                                               {{3, 2}, {1, 2}, {1, 1}},
                                               {{1, 2}, {0, 0}, {0, 0}},
                                               {{2, 2}, {3, 3}, {1, 1}}};
    const size_t ncases = sizeof cases / sizeof *cases;
    const int64_t xs[4] = {2, 3, 7, 6};
    double x[252];
    for (int i = 0; i < 252; i++)
        x[i] = (double)((i * 37) % 251) / 25.0 - 5; /* distinct in every plane */
    for (int di = 0; di < ndevs; di++) {
        kiln_device *dev = devs[di];
        for (int t = 0; t < 4; t++) {
            kiln_dtype dt = float_dtypes[t];
            if (!usable(dev, dt))
                continue;
            kiln_tensor *tx = upload(dev, dt, 4, xs, x);
            double *xv = download(tx);
            for (size_t ci = 0; ci < ncases; ci++) {
                const kiln_pool2d_params *p = &cases[ci];
                int sh = p->stride[0] ? p->stride[0] : p->kernel[0];
                int sw = p->stride[1] ? p->stride[1] : p->kernel[1];
                int64_t oh = (7 + 2 * p->padding[0] - p->kernel[0]) / sh + 1;
                int64_t ow = (6 + 2 * p->padding[1] - p->kernel[1]) / sw + 1;
                kiln_tensor *mx = NULL, *idx = NULL, *av = NULL, *mv = NULL;
                ASSERT_OK(kiln_max_pool2d(tx, p, &mx, &idx));
                ASSERT_OK(kiln_avg_pool2d(tx, p, &av));
                ck_assert_int_eq(kiln_tensor_dtype(idx), KILN_I64);
                ck_assert(kiln_tensor_shape(mx)[2] == oh && kiln_tensor_shape(mx)[3] == ow);
                double *gm = download(mx), *ga = download(av), *gi = download(idx);
                /* without indices (another kernel): the same maxima */
                ASSERT_OK(kiln_max_pool2d(tx, p, &mv, NULL));
                double *gv = download(mv);
                ck_assert_mem_eq(gv, gm, (size_t)(6 * oh * ow) * sizeof *gv);
                free(gv);
                kiln_tensor_release(mv);
                /* the gradient of sum(y wg) for weights wg, on a leaf holding the same values:
                 * wg summed into each window's maximum (the C loop's indices, checked below) */
                int64_t ny = 6 * oh * ow, ys[4] = {2, 3, oh, ow};
                double *wg = malloc((size_t)ny * sizeof *wg), *dref = calloc(252, sizeof *dref);
                for (int64_t i = 0; i < ny; i++)
                    wg[i] = (double)((i * 13) % 17) / 8.0 - 1;
                kiln_tensor *leaf = upload(dev, dt, 4, xs, x), *tg = upload(dev, dt, 4, ys, wg);
                kiln_tensor *yg = NULL;
                ASSERT_OK(kiln_tensor_set_requires_grad(leaf, true));
                ASSERT_OK(kiln_max_pool2d(leaf, p, &yg, NULL));
                ASSERT_OK(kiln_backward(yg, tg, 0));
                double *dx = download(kiln_tensor_grad(leaf)), *wgr = download(tg);
                for (int64_t pl = 0; pl < 6; pl++)
                    for (int64_t i = 0; i < oh; i++)
                        for (int64_t j = 0; j < ow; j++) {
                            double best = -INFINITY, sum = 0;
                            int64_t at = -1;
                            for (int a = 0; a < p->kernel[0]; a++)
                                for (int b = 0; b < p->kernel[1]; b++) {
                                    int64_t h = i * sh - p->padding[0] + a;
                                    int64_t w = j * sw - p->padding[1] + b;
                                    if (h < 0 || h >= 7 || w < 0 || w >= 6)
                                        continue;
                                    double v = xv[(pl * 7 + h) * 6 + w];
                                    sum += v;
                                    if (v > best)
                                        best = v, at = h * 6 + w;
                                }
                            int64_t o = (pl * oh + i) * ow + j;
                            if (at >= 0)
                                dref[pl * 42 + at] += wgr[o];
                            double avg = sum / (p->kernel[0] * p->kernel[1]);
                            ck_assert_msg(gm[o] == best && gi[o] == (double)at,
                                          "max case %zu %s on %s [%lld]: %g at %g, want %g at %lld",
                                          ci, kiln_dtype_name(dt), kiln_device_spec(dev),
                                          (long long)o, gm[o], gi[o], best, (long long)at);
                            ck_assert_msg(fabs(ga[o] - avg) <= 4 * eps_of(dt) * (1 + fabs(sum)),
                                          "avg case %zu %s on %s [%lld]: %g, want %g", ci,
                                          kiln_dtype_name(dt), kiln_device_spec(dev), (long long)o,
                                          ga[o], avg);
                        }
                for (int e = 0; e < 252; e++)
                    ck_assert_msg(fabs(dx[e] - dref[e]) <= 4 * eps_of(dt) * (1 + fabs(dref[e])),
                                  "max pooling's gradient, case %zu %s on %s [%d]: %g, want %g", ci,
                                  kiln_dtype_name(dt), kiln_device_spec(dev), e, dx[e], dref[e]);
                free(dx);
                free(dref);
                free(wg);
                free(wgr);
                kiln_tensor_release(yg);
                kiln_tensor_release(tg);
                kiln_tensor_release(leaf);
                free(gm);
                free(ga);
                free(gi);
                kiln_tensor_release(mx);
                kiln_tensor_release(idx);
                kiln_tensor_release(av);
            }
            /* the global average */
            kiln_tensor *g = NULL;
            ASSERT_OK(kiln_adaptive_avg_pool2d(tx, 1, 1, &g));
            ck_assert_int_eq(kiln_tensor_ndim(g), 4);
            double *gv = download(g);
            for (int pl = 0; pl < 6; pl++) {
                double sum = 0;
                for (int e = 0; e < 42; e++)
                    sum += xv[pl * 42 + e];
                ck_assert_msg(fabs(gv[pl] - sum / 42) <= 8 * eps_of(dt) * (1 + fabs(sum)),
                              "global average %s plane %d: %g, want %g", kiln_dtype_name(dt), pl,
                              gv[pl], sum / 42);
            }
            free(gv);
            kiln_tensor_release(g);
            free(xv);
            kiln_tensor_release(tx);
        }
        /* NaN wins a max */
        const int64_t s1[4] = {1, 1, 2, 2};
        const double nanx[4] = {1, NAN, 3, 2};
        kiln_tensor *tn = upload(dev, KILN_F32, 4, s1, nanx), *y = NULL;
        ASSERT_OK(kiln_max_pool2d(tn, &(kiln_pool2d_params){{2, 2}, {0, 0}, {0, 0}}, &y, NULL));
        double *yv = download(y);
        ck_assert_msg(isnan(yv[0]), "max with NaN: %g", yv[0]);
        free(yv);
        kiln_tensor_release(y);
        kiln_tensor_release(tn);
    }
    /* errors, each naming the function, *out NULL */
    kiln_device *dev = test_device();
    kiln_tensor *tx = NULL, *ti = NULL, *o = (kiln_tensor *)1, *ix = (kiln_tensor *)1;
    const int64_t xs4[4] = {1, 1, 4, 4};
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 4, xs4, &tx));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 4, xs4, &ti));
    ASSERT_FAILS(kiln_max_pool2d(tx, NULL, &o, &ix), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_max_pool2d: params is NULL");
    ck_assert_ptr_null(o);
    ck_assert_ptr_null(ix);
    ASSERT_FAILS(kiln_avg_pool2d(tx, &(kiln_pool2d_params){{3, 3}, {1, 1}, {2, 2}}, &o),
                 KILN_ERR_INVALID_ARGUMENT, "the padding at most half the kernel");
    ASSERT_FAILS(kiln_avg_pool2d(tx, &(kiln_pool2d_params){{5, 5}, {0, 0}, {0, 0}}, &o),
                 KILN_ERR_SHAPE_MISMATCH, "kiln_avg_pool2d: a 5x5 window does not fit");
    ASSERT_FAILS(kiln_max_pool2d(ti, &(kiln_pool2d_params){{2, 2}, {0, 0}, {0, 0}}, &o, NULL),
                 KILN_ERR_UNSUPPORTED, "kiln_max_pool2d: x is i32");
    ASSERT_FAILS(kiln_adaptive_avg_pool2d(tx, 2, 2, &o), KILN_ERR_UNSUPPORTED,
                 "only the global 1x1 average");
    ASSERT_FAILS(kiln_adaptive_avg_pool2d(tx, 1, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_adaptive_avg_pool2d: out is NULL");
    ck_assert_ptr_null(o);
    kiln_tensor_release(tx);
    kiln_tensor_release(ti);
}
END_TEST

/* The chunked path (one group, a sample at a time: the test knob) out of memory at every point:
 * forward and backward fail with KILN_ERR_OUT_OF_MEMORY naming kiln_conv2d, leave *out NULL and
 * the device's live bytes as they were; with room enough, the results equal the whole path's. */
START_TEST(test_conv2d_chunked_out_of_memory)
{
    for (int di = 0; di < ndevs; di++) {
        kiln_device *dev = devs[di];
        /* Not on Oclgrind: after a backward that failed for memory (this path's or the whole
         * one's) its checker reports uninitialised values loaded by CLBlast's XgemmDirectTN
         * (CLBlast there; OpenBLAS on CPU devices) */
        if (simulated(dev))
            continue;
        const int64_t xs[4] = {3, 2, 6, 6}, ws[4] = {4, 2, 3, 3}, ys[4] = {3, 4, 6, 6};
        kiln_tensor *x = NULL, *w = NULL, *gy = NULL, *want = NULL, *gref[2] = {NULL, NULL};
        ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 4, xs, 7, -1, 1, &x));
        ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 4, ws, 8, -1, 1, &w));
        ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 4, ys, 9, -1, 1, &gy));
        ASSERT_OK(kiln_tensor_set_requires_grad(x, true));
        ASSERT_OK(kiln_tensor_set_requires_grad(w, true));
        kiln_tensor *leaves[2] = {x, w};
        const kiln_conv2d_params p = {.padding = {1, 1}};
        ASSERT_OK(kiln_conv2d(x, w, NULL, &p, &want)); /* whole: its columns fit 8 MiB */
        ASSERT_OK(kiln_backward(want, gy, 0));
        for (int l = 0; l < 2; l++) {
            ASSERT_OK(kiln_tensor_clone(kiln_tensor_grad(leaves[l]), &gref[l]));
            ASSERT_OK(kiln_tensor_zero_grad(leaves[l]));
        }
        setenv("KILN_TEST_CONV_CHUNK_BYTES", "1", 1);
        bool forward_done = false, backward_done = false;
        for (uint64_t room = 0; !backward_done; room += 256) {
            ck_assert_uint_lt(room, 1 << 20);
            ASSERT_OK(kiln_device_synchronize(dev));
            ASSERT_OK(kiln_device_empty_cache(dev));
            kiln_memory_stats m0, m1;
            ASSERT_OK(kiln_device_memory_stats(dev, &m0));
            ASSERT_OK(kiln_device_set_memory_limit(dev, m0.allocated_bytes + room));
            kiln_tensor *y = NULL;
            kiln_status st = kiln_conv2d(x, w, NULL, &p, &y);
            if (st == KILN_OK) {
                forward_done = true;
                st = kiln_backward(y, gy, 0);
                backward_done = st == KILN_OK;
            }
            ASSERT_OK(kiln_device_set_memory_limit(dev, 0));
            if (!backward_done) {
                ck_assert_int_eq(st, KILN_ERR_OUT_OF_MEMORY);
                ASSERT_ERROR_HAS(y ? "" : "kiln_conv2d");
                ck_assert_ptr_null(kiln_tensor_grad(x)); /* a failed backward changes none */
                kiln_tensor_release(y);
                ASSERT_OK(kiln_device_synchronize(dev));
                ASSERT_OK(kiln_device_memory_stats(dev, &m1));
                ck_assert_uint_eq(m1.allocated_bytes, m0.allocated_bytes);
                continue;
            }
            ck_assert(forward_done);
            double *got = download(y), *ref = download(want);
            for (int64_t i = 0; i < kiln_tensor_numel(want); i++)
                ck_assert_msg(fabs(got[i] - ref[i]) <= 1e-5 * (fabs(ref[i]) + 1),
                              "chunked [%lld] %.9g, whole %.9g", (long long)i, got[i], ref[i]);
            free(got);
            free(ref);
            for (int l = 0; l < 2; l++) {
                double *g = download(kiln_tensor_grad(leaves[l])), *gr = download(gref[l]);
                for (int64_t i = 0; i < kiln_tensor_numel(gref[l]); i++)
                    ck_assert_msg(fabs(g[i] - gr[i]) <= 1e-5 * (fabs(gr[i]) + 1),
                                  "chunked d%s [%lld] %.9g, whole %.9g", l ? "w" : "x",
                                  (long long)i, g[i], gr[i]);
                free(g);
                free(gr);
            }
            kiln_tensor_release(y);
        }
        unsetenv("KILN_TEST_CONV_CHUNK_BYTES");
        for (int l = 0; l < 2; l++) {
            kiln_tensor_release(leaves[l]);
            kiln_tensor_release(gref[l]);
        }
        kiln_tensor_release(gy);
        kiln_tensor_release(want);
    }
}
END_TEST

/* Bad input: each case KILN_ERR_* naming kiln_conv2d and what is wrong, *out NULL. */
START_TEST(test_conv2d_errors)
{
    kiln_device *dev = test_device();
    const int64_t xs[4] = {1, 4, 5, 5}, ws[4] = {2, 4, 3, 3}, wg[4] = {2, 2, 3, 3}, bs[1] = {2};
    kiln_tensor *x = NULL, *w = NULL, *w2 = NULL, *b = NULL, *h = NULL, *xd = NULL, *o = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 4, xs, &x));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 4, ws, &w));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 4, wg, &w2));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, bs, &b));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F16, 4, xs, &h));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 4, ws, &xd));
    o = (kiln_tensor *)1;
    ASSERT_FAILS(kiln_conv2d(x, w, b, NULL, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_conv2d: out is NULL");
    ASSERT_FAILS(kiln_conv2d(NULL, w, b, NULL, &o), KILN_ERR_INVALID_ARGUMENT, "kiln_conv2d");
    ck_assert_ptr_null(o);
    ASSERT_FAILS(kiln_conv2d(h, w, NULL, NULL, &o), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_conv2d: x is f16, weight f32");
    ASSERT_FAILS(kiln_conv2d(xd, xd, NULL, NULL, &o), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_conv2d: x is i32; convolution takes f32, f64, f16 or bf16");
    ASSERT_FAILS(kiln_conv2d(x, xd, NULL, NULL, &o), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_conv2d: x is f32, weight i32");
    ASSERT_FAILS(kiln_conv2d(x, b, NULL, NULL, &o), KILN_ERR_SHAPE_MISMATCH,
                 "x is [N, C, H, W] and weight [O, C/groups, KH, KW]");
    ASSERT_FAILS(kiln_conv2d(x, w2, NULL, NULL, &o), KILN_ERR_SHAPE_MISMATCH,
                 "kiln_conv2d: x has 4 channels and weight shape [2, 2, 3, 3] with groups 1");
    kiln_conv2d_params p = {.groups = 2};
    ASSERT_OK(kiln_conv2d(x, w2, b, &p, &o)); /* the same weight is right with 2 groups */
    kiln_tensor_release(o);
    p.groups = 3;
    ASSERT_FAILS(kiln_conv2d(x, w2, NULL, &p, &o), KILN_ERR_SHAPE_MISMATCH, "groups 3");
    ASSERT_FAILS(kiln_conv2d(x, w, w, NULL, &o), KILN_ERR_SHAPE_MISMATCH,
                 "kiln_conv2d: bias has shape [2, 4, 3, 3]; it needs [2]");
    p = (kiln_conv2d_params){.stride = {-1, 1}};
    ASSERT_FAILS(kiln_conv2d(x, w, NULL, &p, &o), KILN_ERR_INVALID_ARGUMENT,
                 "must not be negative");
    p = (kiln_conv2d_params){.dilation = {3, 1}};
    ASSERT_FAILS(kiln_conv2d(x, w, NULL, &p, &o), KILN_ERR_SHAPE_MISMATCH,
                 "kiln_conv2d: a 3x3 kernel (dilated 7x3) does not fit the 5x5 input");
    ck_assert_ptr_null(o);
    kiln_tensor *arr[] = {x, w, w2, b, h, xd};
    for (int i = 0; i < 6; i++)
        kiln_tensor_release(arr[i]);
}
END_TEST

static void check_mse(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    double *p = malloc((size_t)n * sizeof(double)), *t = malloc((size_t)n * sizeof(double));
    double *g = malloc((size_t)n * sizeof(double)), ref = 0;
    ck_assert(p && t && g);
    fill_values(dt, p, n);
    fill_values(dt, t, n);
    for (int64_t i = 0; i < n; i++) {
        ref += (p[i] - t[i]) * (p[i] - t[i]);
        g[i] = 2 * (p[i] - t[i]) / (double)n;
    }
    ref /= (double)n;
    kiln_tensor *tp = upload(dev, dt, ndim, shape, p), *tt = upload(dev, dt, ndim, shape, t);
    kiln_tensor *loss = NULL, *grad = NULL;
    ASSERT_OK(kiln_mse_loss(tp, tt, &loss, &grad));
    double *got = download(loss);
    assert_close(got, &ref, 1, 64 * eps_of(dt), "mse loss", dev, dt);
    free(got);
    got = download(grad);
    assert_close(got, g, n, 16 * eps_of(dt), "mse grad", dev, dt);
    free(got);
    kiln_tensor_release(loss);
    kiln_tensor_release(grad);
    ASSERT_OK(kiln_mse_loss(tp, tt, &loss, NULL));
    kiln_tensor_release(loss);
    /* the _out form into existing tensors, with and without grad */
    int64_t one = 1;
    ASSERT_OK(kiln_tensor_empty(dev, dt, 1, &one, &loss));
    ASSERT_OK(kiln_tensor_empty(dev, dt, ndim, shape, &grad));
    ASSERT_OK(kiln_mse_loss_out(tp, tt, loss, grad));
    got = download(loss);
    assert_close(got, &ref, 1, 64 * eps_of(dt), "mse_loss_out loss", dev, dt);
    free(got);
    got = download(grad);
    assert_close(got, g, n, 16 * eps_of(dt), "mse_loss_out grad", dev, dt);
    free(got);
    ASSERT_OK(kiln_mse_loss_out(tp, tt, loss, NULL));
    got = download(loss);
    assert_close(got, &ref, 1, 64 * eps_of(dt), "mse_loss_out loss", dev, dt);
    free(got);
    kiln_tensor_release(loss);
    kiln_tensor_release(grad);
    kiln_tensor_release(tp);
    kiln_tensor_release(tt);
    free(p);
    free(t);
    free(g);
}

START_TEST(test_mse)
{
    static const int64_t s2[] = {3, 7}, s1[] = {1}, s3[] = {2, 3, 61};
    for (int i = 0; i < ndevs; i++) {
        check_mse(devs[i], KILN_F32, 2, s2);
        check_mse(devs[i], KILN_F32, 1, s1);
        check_mse(devs[i], KILN_F32, 3, s3);
        if (has_fp64(devs[i]))
            check_mse(devs[i], KILN_F64, 2, s2);
    }
}
END_TEST

START_TEST(test_mse_errors)
{
    static const int64_t s23[] = {2, 3}, s32[] = {3, 2};
    kiln_tensor *a = NULL, *b = NULL, *c = NULL, *ai = NULL, *loss = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s23, &a));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s32, &b));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F16, 2, s23, &c));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 2, s23, &ai));
    ASSERT_FAILS(kiln_mse_loss(a, b, &loss, NULL), KILN_ERR_SHAPE_MISMATCH, "[3, 2]");
    ck_assert_ptr_null(loss);
    ASSERT_FAILS(kiln_mse_loss(a, c, &loss, NULL), KILN_ERR_DTYPE_MISMATCH, "f16");
    ASSERT_FAILS(kiln_mse_loss(ai, ai, &loss, NULL), KILN_ERR_DTYPE_MISMATCH, "i32");
    ASSERT_FAILS(kiln_mse_loss(a, NULL, &loss, NULL), KILN_ERR_INVALID_ARGUMENT, "target");
    ASSERT_FAILS(kiln_mse_loss(a, a, NULL, NULL), KILN_ERR_INVALID_ARGUMENT, "loss is NULL");
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
    kiln_tensor_release(ai);
}
END_TEST

/* kiln_l1_loss, kiln_bce_loss and kiln_bce_with_logits_loss against C formulas, for every
 * reduction: BCE at probabilities 0 and 1 (PyTorch's clamp gives 100, not inf) and with logits
 * far out (finite where the naive form overflows). */
static double ref_loss(int which, double p, double t)
{
    if (which == 0)
        return fabs(p - t);
    if (which == 1) {
        double lp = fmax(log(p), -100), lq = fmax(log(1 - p), -100);
        return -(t * lp + (1 - t) * lq);
    }
    /* max(x, 0) - x t + log(1 + exp(-|x|)), the textbook stable form */
    return fmax(p, 0) - p * t + log1p(exp(-fabs(p)));
}

static void check_loss(kiln_device *dev, kiln_dtype dt, int which, int64_t rows, int64_t cols)
{
    int64_t n = rows * cols, shape[2] = {rows, cols};
    double *p = malloc((size_t)n * sizeof(double)), *t = malloc((size_t)n * sizeof(double));
    double *e = malloc((size_t)n * sizeof(double));
    ck_assert(p && t && e);
    fill_values(dt, p, n);
    fill_values(dt, t, n);
    for (int64_t i = 0; i < n; i++) {
        if (which == 1) { /* probabilities, the ends included, and soft targets */
            p[i] = i % 7 == 0 ? 0 : i % 7 == 1 ? 1 : (fabs(p[i]) + 0.01) / (fabs(p[i]) + 1.02);
            t[i] = fabs(t[i]) / (1 + fabs(t[i]));
        } else if (which == 2) {
            p[i] = i % 5 == 0 ? (i % 2 ? 60 : -60) : p[i] * 8;
            t[i] = fabs(t[i]) / (1 + fabs(t[i]));
        }
    }
    kiln_tensor *tp = upload(dev, dt, 2, shape, p), *tt = upload(dev, dt, 2, shape, t);
    double *pv = download(tp), *tv = download(tt); /* the values as stored (f16 rounds) */
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        e[i] = ref_loss(which, pv[i], tv[i]);
        sum += e[i];
    }
    static const char *names[3] = {"l1_loss", "bce_loss", "bce_with_logits_loss"};
    for (int r = 0; r < 3; r++) {
        kiln_tensor *loss = NULL;
        kiln_status s = which == 0   ? kiln_l1_loss(tp, tt, (kiln_reduction)r, &loss)
                        : which == 1 ? kiln_bce_loss(tp, tt, (kiln_reduction)r, &loss)
                                     : kiln_bce_with_logits_loss(tp, tt, (kiln_reduction)r, &loss);
        ASSERT_OK(s);
        double *got = download(loss);
        double tol = 64 * eps_of(dt) * (which == 1 ? 4 : 1);
        if (r == KILN_REDUCTION_NONE) {
            ck_assert_int_eq(kiln_tensor_numel(loss), n);
            assert_close(got, e, n, tol, names[which], dev, dt);
        } else {
            ck_assert_int_eq(kiln_tensor_numel(loss), 1);
            double want = r == KILN_REDUCTION_SUM ? sum : sum / (double)n;
            assert_close(got, &want, 1, tol * (r == KILN_REDUCTION_SUM ? (double)n : 1),
                         names[which], dev, dt);
        }
        for (int64_t i = 0; i < kiln_tensor_numel(loss); i++)
            ck_assert_msg(isfinite(got[i]), "%s: element %lld is not finite", names[which],
                          (long long)i);
        free(got);
        kiln_tensor_release(loss);
    }
    kiln_tensor_release(tp);
    kiln_tensor_release(tt);
    free(pv);
    free(tv);
    free(p);
    free(t);
    free(e);
}

START_TEST(test_losses)
{
    for (int i = 0; i < ndevs; i++)
        for (int which = 0; which < 3; which++) {
            check_loss(devs[i], KILN_F32, which, 3, 7);
            check_loss(devs[i], KILN_F32, which, 1, 1);
            if (has_fp64(devs[i]))
                check_loss(devs[i], KILN_F64, which, 4, 5);
        }
}
END_TEST

START_TEST(test_loss_errors)
{
    static const int64_t s23[] = {2, 3}, s32[] = {3, 2};
    kiln_tensor *a = NULL, *b = NULL, *ai = NULL, *loss = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s23, &a));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s32, &b));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 2, s23, &ai));
    ASSERT_FAILS(kiln_l1_loss(a, b, KILN_REDUCTION_MEAN, &loss), KILN_ERR_SHAPE_MISMATCH,
                 "kiln_l1_loss: pred has shape [2, 3] but target has shape [3, 2]");
    ck_assert_ptr_null(loss);
    ASSERT_FAILS(kiln_bce_loss(ai, ai, KILN_REDUCTION_SUM, &loss), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_bce_loss: pred is i32");
    ASSERT_FAILS(kiln_bce_with_logits_loss(a, ai, KILN_REDUCTION_SUM, &loss),
                 KILN_ERR_DTYPE_MISMATCH, "kiln_bce_with_logits_loss: logits is f32 but target");
    ASSERT_FAILS(kiln_bce_with_logits_loss(NULL, a, KILN_REDUCTION_SUM, &loss),
                 KILN_ERR_INVALID_ARGUMENT, "logits");
    ASSERT_FAILS(kiln_l1_loss(a, a, (kiln_reduction)7, &loss), KILN_ERR_INVALID_ARGUMENT,
                 "unknown reduction 7");
    ASSERT_FAILS(kiln_l1_loss(a, a, KILN_REDUCTION_NONE, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_l1_loss: loss is NULL");
    if (ndevs > 1) {
        kiln_tensor *other = NULL;
        ASSERT_OK(kiln_tensor_zeros(devs[1], KILN_F32, 2, s23, &other));
        ASSERT_FAILS(kiln_bce_loss(a, other, KILN_REDUCTION_MEAN, &loss), KILN_ERR_DEVICE_MISMATCH,
                     "kiln_bce_loss");
        kiln_tensor_release(other);
    }
    ck_assert_ptr_null(loss);
    /* probabilities outside [0, 1]: NaN unchecked, PyTorch's error with KILN_CHECK=1 */
    const double pv[6] = {0.5, 0, 1, 1.5, 0.25, -0.5};
    for (int k = 0; k < 2; k++) {
        kiln_dtype dt = k ? KILN_F16 : KILN_F32;
        kiln_tensor *p = upload(devs[0], dt, 2, s23, pv), *t = NULL;
        ASSERT_OK(kiln_tensor_zeros(devs[0], dt, 2, s23, &t));
        ASSERT_OK(kiln_bce_loss(p, t, KILN_REDUCTION_NONE, &loss));
        double *got = download(loss);
        ck_assert(isnan(got[3]) && isnan(got[5]) && got[0] > 0.69 && got[0] < 0.7);
        free(got);
        kiln_tensor_release(loss);
        loss = (kiln_tensor *)1;
        ck_assert_int_eq(setenv("KILN_CHECK", "1", 1), 0);
        ASSERT_FAILS(kiln_bce_loss(p, t, KILN_REDUCTION_MEAN, &loss), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_bce_loss: pred[3] is 1.5, outside [0, 1]");
        ck_assert_ptr_null(loss);
        unsetenv("KILN_CHECK");
        kiln_tensor_release(p);
        kiln_tensor_release(t);
    }
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(ai);
}
END_TEST

/* The _out forms of the convolution, the poolings and the losses made of ops: the allocating
 * form's values in an existing tensor, errors under the _out form's name, nothing recorded. */
START_TEST(test_cnn_out_forms)
{
    kiln_device *dev = devs[0];
    const int64_t xs[4] = {2, 3, 6, 6}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 6, 6},
                  ps[4] = {2, 3, 3, 3}, gs[4] = {2, 3, 1, 1}, one = 1;
    double xv[216], wv[108];
    fill_values(KILN_F32, xv, 216);
    fill_values(KILN_F32, wv, 108);
    kiln_tensor *x = upload(dev, KILN_F32, 4, xs, xv), *w = upload(dev, KILN_F32, 4, ws, wv);
    ASSERT_OK(kiln_tensor_set_requires_grad(w, true));
    const kiln_conv2d_params cp = {.padding = {1, 1}};
    const kiln_pool2d_params pp = {.kernel = {2, 2}};
    kiln_tensor *want = NULL, *wi = NULL, *out = NULL, *oi = NULL;
    /* conv2d */
    ASSERT_OK(kiln_conv2d(x, w, NULL, &cp, &want));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 4, ys, &out));
    ASSERT_OK(kiln_conv2d_out(x, w, NULL, &cp, out));
    ck_assert(!kiln_tensor_requires_grad(out)); /* not recorded */
    double *a = download(out), *b = download(want);
    ck_assert(memcmp(a, b, 288 * sizeof *a) == 0);
    free(a);
    free(b);
    kiln_tensor_release(want);
    ASSERT_FAILS(kiln_conv2d_out(x, w, NULL, &cp, x), KILN_ERR_SHAPE_MISMATCH,
                 "kiln_conv2d_out: out has shape [2, 3, 6, 6] but the result has shape "
                 "[2, 4, 6, 6]");
    const kiln_conv2d_params bad = {.groups = 2};
    ASSERT_FAILS(kiln_conv2d_out(x, w, NULL, &bad, out), KILN_ERR_SHAPE_MISMATCH,
                 "kiln_conv2d_out: kiln_conv2d:");
    ASSERT_FAILS(kiln_conv2d_out(x, w, NULL, &cp, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_conv2d_out: out is NULL");
    kiln_tensor_release(out);
    /* max pool with indices, average, global average */
    ASSERT_OK(kiln_max_pool2d(x, &pp, &want, &wi));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 4, ps, &out));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_I64, 4, ps, &oi));
    ASSERT_OK(kiln_max_pool2d_out(x, &pp, out, oi));
    a = download(out), b = download(want);
    ck_assert(memcmp(a, b, 54 * sizeof *a) == 0);
    free(a);
    free(b);
    a = download(oi), b = download(wi);
    ck_assert(memcmp(a, b, 54 * sizeof *a) == 0);
    free(a);
    free(b);
    ASSERT_OK(kiln_max_pool2d_out(x, &pp, out, NULL));
    ASSERT_FAILS(kiln_max_pool2d_out(x, &pp, out, out), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_max_pool2d_out: out has dtype f32 but the result is i64");
    kiln_tensor_release(want);
    kiln_tensor_release(wi);
    ASSERT_OK(kiln_avg_pool2d(x, &pp, &want));
    ASSERT_OK(kiln_avg_pool2d_out(x, &pp, out));
    a = download(out), b = download(want);
    ck_assert(memcmp(a, b, 54 * sizeof *a) == 0);
    free(a);
    free(b);
    kiln_tensor_release(want);
    kiln_tensor_release(out);
    kiln_tensor_release(oi);
    ASSERT_OK(kiln_adaptive_avg_pool2d(x, 1, 1, &want));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 4, gs, &out));
    ASSERT_OK(kiln_adaptive_avg_pool2d_out(x, 1, 1, out));
    a = download(out), b = download(want);
    ck_assert(memcmp(a, b, 6 * sizeof *a) == 0);
    free(a);
    free(b);
    ASSERT_FAILS(kiln_adaptive_avg_pool2d_out(x, 2, 2, out), KILN_ERR_UNSUPPORTED,
                 "kiln_adaptive_avg_pool2d_out: kiln_adaptive_avg_pool2d");
    kiln_tensor_release(want);
    kiln_tensor_release(out);
    /* the losses, into a [1] tensor, and in place for the unreduced L1 */
    kiln_tensor *t = NULL, *loss = NULL, *x2 = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 4, xs, &t));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, &one, &loss));
    for (int which = 0; which < 3; which++) {
        kiln_tensor *p = x;
        if (which == 1)
            ASSERT_OK(kiln_unary(KILN_UNARY_SIGMOID, x, &p));
        kiln_status s = which == 0   ? kiln_l1_loss(p, t, KILN_REDUCTION_SUM, &want)
                        : which == 1 ? kiln_bce_loss(p, t, KILN_REDUCTION_SUM, &want)
                                     : kiln_bce_with_logits_loss(p, t, KILN_REDUCTION_SUM, &want);
        ASSERT_OK(s);
        s = which == 0   ? kiln_l1_loss_out(p, t, KILN_REDUCTION_SUM, loss)
            : which == 1 ? kiln_bce_loss_out(p, t, KILN_REDUCTION_SUM, loss)
                         : kiln_bce_with_logits_loss_out(p, t, KILN_REDUCTION_SUM, loss);
        ASSERT_OK(s);
        a = download(loss), b = download(want);
        ck_assert_msg(a[0] == b[0], "loss %d: %g, want %g", which, a[0], b[0]);
        free(a);
        free(b);
        kiln_tensor_release(want);
        if (p != x)
            kiln_tensor_release(p);
    }
    ASSERT_OK(kiln_tensor_clone(x, &x2));
    ASSERT_OK(kiln_l1_loss_out(x2, t, KILN_REDUCTION_NONE, x2)); /* |x - 0| in place */
    a = download(x2);
    for (int i = 0; i < 216; i++)
        ck_assert(a[i] == fabs((float)xv[i]));
    free(a);
    ASSERT_FAILS(kiln_bce_loss_out(x, t, KILN_REDUCTION_NONE, loss), KILN_ERR_SHAPE_MISMATCH,
                 "kiln_bce_loss_out: out has shape [1]");
    ASSERT_FAILS(kiln_l1_loss_out(x, t, KILN_REDUCTION_SUM, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_l1_loss_out: loss is NULL");
    kiln_tensor *all[] = {x, w, t, loss, x2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
}
END_TEST

/* Three SGD steps with momentum and weight decay, and one without velocity, against C. */
static void check_sgd(kiln_device *dev, kiln_dtype dt, bool with_velocity)
{
    enum { N = 61 };
    const int64_t n = N;
    const double lr = 0.1, mom = with_velocity ? 0.9 : 0, wd = 0.01;
    double p[N], v[N], g[N];
    fill_values(dt, p, n);
    for (int i = 0; i < N; i++)
        v[i] = 0;
    kiln_tensor *tp = upload(dev, dt, 1, &n, p);
    kiln_tensor *tv = with_velocity ? upload(dev, dt, 1, &n, v) : NULL;
    for (int step = 0; step < 3; step++) {
        fill_values(dt, g, n);
        kiln_tensor *tg = upload(dev, dt, 1, &n, g);
        ASSERT_OK(kiln_sgd_step(tp, tg, tv, lr, mom, wd));
        kiln_tensor_release(tg);
        for (int i = 0; i < N; i++) {
            double d = g[i] + wd * p[i];
            if (with_velocity)
                d = v[i] = mom * v[i] + d;
            p[i] -= lr * d;
        }
        double *got = download(tp);
        assert_close(got, p, n, 16 * eps_of(dt), "sgd param", dev, dt);
        free(got);
        if (tv) {
            got = download(tv);
            assert_close(got, v, n, 16 * eps_of(dt), "sgd velocity", dev, dt);
            free(got);
        }
        /* The next step starts from what the device holds, as a training loop does. */
        got = download(tp);
        memcpy(p, got, sizeof p);
        free(got);
        if (tv) {
            got = download(tv);
            memcpy(v, got, sizeof v);
            free(got);
        }
    }
    kiln_tensor_release(tp);
    kiln_tensor_release(tv);
}

START_TEST(test_sgd)
{
    for (int i = 0; i < ndevs; i++) {
        check_sgd(devs[i], KILN_F32, true);
        check_sgd(devs[i], KILN_F32, false);
        if (has_fp64(devs[i]))
            check_sgd(devs[i], KILN_F64, true);
    }
}
END_TEST

static void check_adam(kiln_device *dev, kiln_dtype dt)
{
    enum { N = 61 };
    const int64_t n = N;
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double p[N], m[N] = {0}, v[N] = {0}, g[N];
    fill_values(dt, p, n);
    kiln_tensor *tp = upload(dev, dt, 1, &n, p), *tm = upload(dev, dt, 1, &n, m),
                *tv = upload(dev, dt, 1, &n, v);
    for (int step = 1; step <= 3; step++) {
        fill_values(dt, g, n);
        kiln_tensor *tg = upload(dev, dt, 1, &n, g);
        ASSERT_OK(kiln_adam_step(tp, tg, tm, tv, step, lr, b1, b2, eps));
        kiln_tensor_release(tg);
        for (int i = 0; i < N; i++) {
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
            double mh = m[i] / (1 - pow(b1, step)), vh = v[i] / (1 - pow(b2, step));
            p[i] -= lr * mh / (sqrt(vh) + eps);
        }
        kiln_tensor *ts[] = {tp, tm, tv};
        double *refs[] = {p, m, v};
        const char *names[] = {"adam param", "adam m", "adam v"};
        for (int k = 0; k < 3; k++) {
            double *got = download(ts[k]);
            assert_close(got, refs[k], n, 16 * eps_of(dt), names[k], dev, dt);
            memcpy(refs[k], got, N * sizeof(double));
            free(got);
        }
    }
    kiln_tensor_release(tp);
    kiln_tensor_release(tm);
    kiln_tensor_release(tv);
}

START_TEST(test_adam)
{
    for (int i = 0; i < ndevs; i++) {
        check_adam(devs[i], KILN_F32);
        if (has_fp64(devs[i]))
            check_adam(devs[i], KILN_F64);
    }
}
END_TEST

START_TEST(test_optimizer_errors)
{
    static const int64_t s3[] = {3}, s4[] = {4};
    kiln_tensor *p = NULL, *g = NULL, *g4 = NULL, *gd = NULL, *pi = NULL;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 1, s3, &p));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 1, s3, &g));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 1, s4, &g4));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F16, 1, s3, &gd));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 1, s3, &pi));
    ASSERT_FAILS(kiln_sgd_step(p, g, NULL, 0.1, 0.9, 0), KILN_ERR_INVALID_ARGUMENT,
                 "velocity is NULL");
    ASSERT_FAILS(kiln_sgd_step(p, g4, NULL, 0.1, 0, 0), KILN_ERR_SHAPE_MISMATCH, "[4]");
    ASSERT_FAILS(kiln_sgd_step(p, gd, NULL, 0.1, 0, 0), KILN_ERR_DTYPE_MISMATCH, "f16");
    ASSERT_FAILS(kiln_sgd_step(pi, pi, NULL, 0.1, 0, 0), KILN_ERR_DTYPE_MISMATCH, "i32");
    ASSERT_FAILS(kiln_sgd_step(NULL, g, NULL, 0.1, 0, 0), KILN_ERR_INVALID_ARGUMENT, "param");
    ASSERT_FAILS(kiln_sgd_step(p, NULL, NULL, 0.1, 0, 0), KILN_ERR_INVALID_ARGUMENT, "grad");
    ASSERT_FAILS(kiln_adam_step(p, g, g, g, 0, 0.1, 0.9, 0.999, 1e-8), KILN_ERR_INVALID_ARGUMENT,
                 "step is 0");
    ASSERT_FAILS(kiln_adam_step(p, g, g, g, 1, 0.1, 1.0, 0.999, 1e-8), KILN_ERR_INVALID_ARGUMENT,
                 "beta1 = 1");
    ASSERT_FAILS(kiln_adam_step(p, g, NULL, g, 1, 0.1, 0.9, 0.999, 1e-8), KILN_ERR_INVALID_ARGUMENT,
                 "m");
    ASSERT_FAILS(kiln_adam_step(p, g, g, g4, 1, 0.1, 0.9, 0.999, 1e-8), KILN_ERR_SHAPE_MISMATCH,
                 "[4]");
    kiln_tensor_release(p);
    kiln_tensor_release(g);
    kiln_tensor_release(g4);
    kiln_tensor_release(gd);
    kiln_tensor_release(pi);
}
END_TEST

/* Two devices: every op refuses tensors of cpu:0 and cpu:1 together, naming both. */
/* The _out forms: wrong shape (both named), wrong dtype, NULL, shared memory; outs untouched. */
START_TEST(test_out_errors)
{
    static const int64_t s23[] = {2, 3}, s32[] = {3, 2}, s2[] = {2}, one[] = {1};
    static const float xv[6] = {1, 2, 3, 4, 5, 6};
    static const int32_t lv[2] = {0, 2};
    kiln_tensor *x = NULL, *l = NULL, *o32 = NULL, *o23 = NULL, *od = NULL, *loss = NULL;
    kiln_tensor *loss2 = NULL, *lossd = NULL, *view = NULL;
    ASSERT_OK(kiln_tensor_from_host(devs[0], KILN_F32, 2, s23, xv, &x));
    ASSERT_OK(kiln_tensor_from_host(devs[0], KILN_I32, 1, s2, lv, &l));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s32, &o32));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s23, &o23));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F64, 2, s23, &od));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 1, one, &loss));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 1, s2, &loss2));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F64, 1, one, &lossd));
    ASSERT_OK(kiln_tensor_reshape(x, 2, s32, &view));
    /* softmax and log_softmax */
    ASSERT_FAILS(kiln_softmax_out(x, 1, o32), KILN_ERR_SHAPE_MISMATCH, "[3, 2]");
    ASSERT_ERROR_HAS("[2, 3]");
    ASSERT_FAILS(kiln_log_softmax_out(x, 1, o32), KILN_ERR_SHAPE_MISMATCH, "kiln_log_softmax_out");
    ASSERT_FAILS(kiln_softmax_out(x, 1, od), KILN_ERR_DTYPE_MISMATCH, "f64");
    ASSERT_FAILS(kiln_log_softmax_out(x, 1, od), KILN_ERR_DTYPE_MISMATCH, "f32");
    ASSERT_FAILS(kiln_softmax_out(x, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_softmax_out: out is NULL");
    ASSERT_FAILS(kiln_log_softmax_out(x, 1, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_softmax_out(x, 1, x), KILN_ERR_INVALID_ARGUMENT, "shares memory");
    ASSERT_FAILS(kiln_log_softmax_out(x, 2, o23), KILN_ERR_INVALID_ARGUMENT, "axis 2");
    /* cross-entropy */
    ASSERT_FAILS(kiln_cross_entropy_out(x, l, loss2, NULL), KILN_ERR_SHAPE_MISMATCH, "[2]");
    ASSERT_ERROR_HAS("[1]");
    ASSERT_FAILS(kiln_cross_entropy_out(x, l, lossd, NULL), KILN_ERR_DTYPE_MISMATCH, "f64");
    ASSERT_FAILS(kiln_cross_entropy_out(x, l, loss, o32), KILN_ERR_SHAPE_MISMATCH, "[3, 2]");
    ASSERT_ERROR_HAS("grad");
    ASSERT_FAILS(kiln_cross_entropy_out(x, l, loss, od), KILN_ERR_DTYPE_MISMATCH, "grad");
    ASSERT_FAILS(kiln_cross_entropy_out(x, l, NULL, o23), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_cross_entropy_out: loss is NULL");
    ASSERT_FAILS(kiln_cross_entropy_out(x, l, loss, x), KILN_ERR_INVALID_ARGUMENT, "shares memory");
    ASSERT_FAILS(kiln_cross_entropy_out(x, l, loss, loss), KILN_ERR_INVALID_ARGUMENT,
                 "shares memory");
    /* mse */
    ASSERT_FAILS(kiln_mse_loss_out(x, x, loss2, NULL), KILN_ERR_SHAPE_MISMATCH, "[2]");
    ASSERT_ERROR_HAS("[1]");
    ASSERT_FAILS(kiln_mse_loss_out(x, x, lossd, NULL), KILN_ERR_DTYPE_MISMATCH, "f64");
    ASSERT_FAILS(kiln_mse_loss_out(x, x, loss, o32), KILN_ERR_SHAPE_MISMATCH, "[3, 2]");
    ASSERT_ERROR_HAS("[2, 3]");
    ASSERT_FAILS(kiln_mse_loss_out(x, x, loss, od), KILN_ERR_DTYPE_MISMATCH, "f64");
    ASSERT_FAILS(kiln_mse_loss_out(x, x, NULL, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_mse_loss_out: loss is NULL");
    ASSERT_FAILS(kiln_mse_loss_out(x, o23, loss, view), KILN_ERR_SHAPE_MISMATCH, "grad");
    ASSERT_FAILS(kiln_mse_loss_out(o23, o23, loss, o23), KILN_ERR_INVALID_ARGUMENT,
                 "shares memory");
    /* every failure left the outs as they were */
    float f[6];
    ASSERT_OK(kiln_tensor_read(o32, f, sizeof f));
    for (int i = 0; i < 6; i++)
        ck_assert(f[i] == 0);
    ASSERT_OK(kiln_tensor_read(o23, f, sizeof f));
    for (int i = 0; i < 6; i++)
        ck_assert(f[i] == 0);
    ASSERT_OK(kiln_tensor_read(loss, f, sizeof(float)));
    ck_assert(f[0] == 0);
    ASSERT_OK(kiln_tensor_read(x, f, sizeof f));
    for (int i = 0; i < 6; i++)
        ck_assert(f[i] == xv[i]);
    kiln_tensor_release(x);
    kiln_tensor_release(l);
    kiln_tensor_release(o32);
    kiln_tensor_release(o23);
    kiln_tensor_release(od);
    kiln_tensor_release(loss);
    kiln_tensor_release(loss2);
    kiln_tensor_release(lossd);
    kiln_tensor_release(view);
}
END_TEST

START_TEST(test_device_mismatch)
{
    kiln_device *d0 = NULL, *d1 = NULL;
    if (kiln_device_get("cpu:1", &d1) != KILN_OK)
        return; /* one device only: nothing to mix */
    ASSERT_OK(kiln_device_get("cpu:0", &d0));
    static const int64_t s23[] = {2, 3}, s2[] = {2};
    kiln_tensor *a = NULL, *b = NULL, *l = NULL, *loss = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(d0, KILN_F32, 2, s23, &a));
    ASSERT_OK(kiln_tensor_zeros(d1, KILN_F32, 2, s23, &b));
    ASSERT_OK(kiln_tensor_zeros(d1, KILN_I32, 1, s2, &l));
    ASSERT_FAILS(kiln_cross_entropy(a, l, &loss, NULL), KILN_ERR_DEVICE_MISMATCH, "cpu:0");
    ck_assert_ptr_null(loss);
    ASSERT_FAILS(kiln_cross_entropy(a, l, &loss, NULL), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_FAILS(kiln_mse_loss(a, b, &loss, NULL), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_FAILS(kiln_sgd_step(a, b, NULL, 0.1, 0, 0), KILN_ERR_DEVICE_MISMATCH, "cpu:0");
    ASSERT_FAILS(kiln_adam_step(a, a, a, b, 1, 0.1, 0.9, 0.999, 1e-8), KILN_ERR_DEVICE_MISMATCH,
                 "cpu:1");
    /* the _out forms: an out on the other device */
    static const int64_t one[] = {1};
    kiln_tensor *o1 = NULL, *a2 = NULL, *l0 = NULL;
    ASSERT_OK(kiln_tensor_zeros(d1, KILN_F32, 1, one, &o1));
    ASSERT_OK(kiln_tensor_zeros(d0, KILN_F32, 2, s23, &a2));
    ASSERT_OK(kiln_tensor_zeros(d0, KILN_I32, 1, s2, &l0));
    ASSERT_FAILS(kiln_softmax_out(a, 1, b), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    ASSERT_FAILS(kiln_log_softmax_out(a, 1, b), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    ASSERT_FAILS(kiln_cross_entropy_out(a, l0, o1, NULL), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    ASSERT_FAILS(kiln_mse_loss_out(a, a2, o1, NULL), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    kiln_tensor *o0 = NULL;
    ASSERT_OK(kiln_tensor_zeros(d0, KILN_F32, 1, one, &o0));
    ASSERT_FAILS(kiln_mse_loss_out(a, a2, o0, b), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    kiln_tensor_release(o0);
    kiln_tensor_release(o1);
    kiln_tensor_release(a2);
    kiln_tensor_release(l0);
    /* Each device alone works. */
    ASSERT_OK(kiln_mse_loss(b, b, &loss, NULL));
    float f;
    ASSERT_OK(kiln_tensor_read(loss, &f, sizeof f));
    ck_assert(f == 0);
    kiln_tensor_release(loss);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(l);
}
END_TEST

/* A training step (loss, gradient, reduction, update) allocates nothing from the driver after
 * the first step: results come from the device's cache. */
START_TEST(test_steady_state_allocations)
{
    static const int64_t shape[] = {8, 4}, rows = 8, s4[] = {4};
    double x[32], lab[8];
    fill_values(KILN_F32, x, 32);
    for (int r = 0; r < 8; r++)
        lab[r] = r % 4;
    for (int i = 0; i < ndevs; i++) {
        if (simulated(devs[i]))
            continue; /* about allocations, not kernels: Oclgrind adds nothing */
        kiln_tensor *w = upload(devs[i], KILN_F32, 2, shape, x);
        kiln_tensor *l = upload(devs[i], KILN_I32, 1, &rows, lab), *v = NULL, *col = NULL;
        ASSERT_OK(kiln_tensor_zeros(devs[i], KILN_F32, 2, shape, &v));
        ASSERT_OK(kiln_tensor_empty(devs[i], KILN_F32, 1, s4, &col));
        uint64_t after_first = 0;
        for (int step = 0; step < 4; step++) {
            kiln_tensor *loss = NULL, *grad = NULL, *sm = NULL;
            ASSERT_OK(kiln_cross_entropy(w, l, &loss, &grad));
            ASSERT_OK(kiln_softmax(w, 1, &sm));
            ASSERT_OK(kiln_reduce_out(KILN_REDUCE_SUM, grad, 0, false, col));
            ASSERT_OK(kiln_sgd_step(w, grad, v, 0.1, 0.9, 0));
            kiln_tensor_release(loss);
            kiln_tensor_release(grad);
            kiln_tensor_release(sm);
            kiln_memory_stats st;
            ASSERT_OK(kiln_device_memory_stats(devs[i], &st));
            if (step == 0)
                after_first = st.driver_allocations;
            ck_assert_msg(st.driver_allocations == after_first,
                          "step %d: %llu driver allocations, %llu after the first step", step,
                          (unsigned long long)st.driver_allocations,
                          (unsigned long long)after_first);
        }
        kiln_tensor_release(w);
        kiln_tensor_release(l);
        kiln_tensor_release(v);
        kiln_tensor_release(col);
    }
}
END_TEST

Suite *nn_suite(void)
{
    Suite *s = suite_create("nn");
    TCase *tc = tcase_create("values");
    tcase_add_unchecked_fixture(tc, setup_devices, teardown_devices);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_softmax);
    tcase_add_test(tc, test_softmax_stability);
    tcase_add_test(tc, test_cross_entropy);
    tcase_add_test(tc, test_cross_entropy_bad_label);
    tcase_add_test(tc, test_cross_entropy_checked);
    tcase_add_test(tc, test_mse);
    tcase_add_test(tc, test_losses);
    tcase_add_test(tc, test_conv2d);
    tcase_add_test(tc, test_pool2d);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_steady_state_allocations);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("errors");
    tcase_add_unchecked_fixture(te, setup_devices, teardown_devices);
    tcase_add_test(te, test_softmax_errors);
    tcase_add_test(te, test_cross_entropy_errors);
    tcase_add_test(te, test_mse_errors);
    tcase_add_test(te, test_loss_errors);
    tcase_add_test(te, test_cnn_out_forms);
    tcase_add_test(te, test_optimizer_errors);
    tcase_add_test(te, test_out_errors);
    tcase_add_test(te, test_device_mismatch);
    tcase_add_test(te, test_conv2d_errors);
    tcase_add_test(te, test_conv2d_chunked_out_of_memory);
    suite_add_tcase(s, te);
    return s;
}
