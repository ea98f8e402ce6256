/* test-index.c - index_select, gather, one_hot, clamp, item and the text of a tensor, against C
 * loops and known strings. */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "testutil.h"

static void strides_of(int ndim, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
}

/* Elements move bit for bit: comparisons are exact. */
static void assert_values(const kiln_tensor *t, const double *ref, int64_t n, const char *what)
{
    ck_assert_int_eq(kiln_tensor_numel(t), n);
    double *got = download(t);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == ref[i] || (isnan(got[i]) && isnan(ref[i])),
                      "%s (%s on %s): element %" PRId64 " is %g, expected %g", what,
                      kiln_dtype_name(kiln_tensor_dtype(t)),
                      kiln_device_spec(kiln_tensor_device(t)), i, got[i], ref[i]);
    free(got);
}

static kiln_tensor *index_tensor(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *shape,
                                 const int64_t *v)
{
    int64_t n = numel_of(ndim, shape);
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    ck_assert_ptr_nonnull(d);
    for (int64_t i = 0; i < n; i++)
        d[i] = (double)v[i];
    kiln_tensor *t = upload(dev, dt, ndim, shape, d);
    free(d);
    return t;
}

/* After an op that met an index or label outside [0, end): the next call that waits for the
 * device fails once, naming itself, the op and the range; the data stays as documented (issue
 * 22, item 2: the device error word). */
static void expect_reported(kiln_device *dev, const char *op, int64_t end)
{
    char want[64];
    snprintf(want, sizeof want, "is outside [0, %lld)", (long long)end);
    ASSERT_FAILS(kiln_device_synchronize(dev), KILN_ERR_INVALID_ARGUMENT, want);
    const char *m = kiln_last_error();
    ck_assert_msg(strncmp(m, "kiln_device_synchronize: ", 25) == 0 && strstr(m, op), "%s", m);
    ASSERT_OK(kiln_device_synchronize(dev)); /* reported once */
}

/* index_select of a random x along every axis, with in-range, repeated and out-of-range
 * indices (zeros), against the C loop; the _out form gives the same. */
static void check_index_select(kiln_device *dev, kiln_dtype dt, kiln_dtype it, int ndim,
                               const int64_t *shape, int axis, int m)
{
    int64_t n = numel_of(ndim, shape), st[KILN_MAX_DIMS];
    double *x = malloc((size_t)(n ? n : 1) * sizeof(double));
    int64_t *idx = malloc((size_t)m * sizeof(int64_t));
    ck_assert(x && idx);
    fill_values(dt, x, n);
    int64_t len = shape[axis];
    for (int j = 0; j < m; j++) /* in range mostly; every 5th out of range on either side */
        idx[j] = j % 5 == 4 ? (j % 2 ? -1 : len + j) : (int64_t)(rnd() * (double)len);
    int64_t oshape[KILN_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        oshape[d] = d == axis ? m : shape[d];
    int64_t on = numel_of(ndim, oshape), ost[KILN_MAX_DIMS];
    strides_of(ndim, shape, st);
    strides_of(ndim, oshape, ost);
    double *ref = malloc((size_t)(on ? on : 1) * sizeof(double));
    ck_assert_ptr_nonnull(ref);
    for (int64_t e = 0; e < on; e++) {
        int64_t rem = e, off = 0;
        bool ok = true;
        for (int d = 0; d < ndim; d++) {
            int64_t c = rem / ost[d];
            rem %= ost[d];
            if (d == axis) {
                ok = idx[c] >= 0 && idx[c] < len;
                c = idx[c];
            }
            off += c * st[d];
        }
        ref[e] = ok ? x[off] : 0;
    }
    kiln_tensor *tx = upload(dev, dt, ndim, shape, x);
    const int64_t mshape[1] = {m};
    kiln_tensor *ti = index_tensor(dev, it, 1, mshape, idx), *y = NULL, *o = NULL;
    bool bad = false;
    for (int j = 0; j < m; j++)
        bad |= idx[j] < 0 || idx[j] >= len;
    bad &= on > 0;
    ASSERT_OK(kiln_index_select(tx, axis - ndim, ti, &y)); /* a negative axis counts from the end */
    if (bad)
        expect_reported(dev, "kiln_index_select", len);
    assert_values(y, ref, on, "index_select");
    ASSERT_OK(kiln_tensor_empty(dev, dt, ndim, oshape, &o));
    ASSERT_OK(kiln_index_select_out(tx, axis, ti, o));
    if (bad)
        expect_reported(dev, "kiln_index_select_out", len);
    assert_values(o, ref, on, "index_select_out");
    kiln_tensor_release(o);
    kiln_tensor_release(y);
    kiln_tensor_release(ti);
    kiln_tensor_release(tx);
    free(ref);
    free(idx);
    free(x);
}

START_TEST(test_index_select)
{
    kiln_device *dev = test_device();
    bool sim = simulated(dev);
    static const int64_t s2[2] = {7, 5}, s3[3] = {3, 4, 6}, s5[5] = {2, 3, 2, 3, 2};
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        kiln_dtype dt = all_dtypes[t];
        if (dt == KILN_F64 && !has_fp64(dev))
            continue;
        check_index_select(dev, dt, KILN_I64, 2, s2, 0, 9); /* an embedding lookup */
        check_index_select(dev, dt, KILN_I32, 3, s3, 1, 5);
        check_index_select(dev, dt, KILN_I32, 3, s3, 2, sim ? 4 : 11);
    }
    check_index_select(dev, KILN_F32, KILN_I64, 5, s5, 3, 6);
    const int64_t big[2] = {sim ? 40 : 3000, 17};
    check_index_select(dev, KILN_F32, KILN_I64, 2, big, 0, sim ? 30 : 2500);
}
END_TEST

/* gather against torch.gather's definition, with an index smaller than x outside the axis. */
static void check_gather(kiln_device *dev, kiln_dtype dt, kiln_dtype it, int ndim,
                         const int64_t *shape, const int64_t *ishape, int axis)
{
    int64_t n = numel_of(ndim, shape), in = numel_of(ndim, ishape);
    int64_t st[KILN_MAX_DIMS], ist[KILN_MAX_DIMS];
    strides_of(ndim, shape, st);
    strides_of(ndim, ishape, ist);
    double *x = malloc((size_t)(n ? n : 1) * sizeof(double));
    int64_t *idx = malloc((size_t)(in ? in : 1) * sizeof(int64_t));
    double *ref = malloc((size_t)(in ? in : 1) * sizeof(double));
    ck_assert(x && idx && ref);
    fill_values(dt, x, n);
    int64_t len = shape[axis];
    for (int64_t e = 0; e < in; e++)
        idx[e] = e % 7 == 6 ? len + 1 : (int64_t)(rnd() * (double)len);
    for (int64_t e = 0; e < in; e++) {
        int64_t rem = e, off = 0;
        for (int d = 0; d < ndim; d++) {
            int64_t c = rem / ist[d];
            rem %= ist[d];
            off += (d == axis ? idx[e] : c) * st[d];
        }
        ref[e] = idx[e] >= 0 && idx[e] < len ? x[off] : 0;
    }
    kiln_tensor *tx = upload(dev, dt, ndim, shape, x);
    kiln_tensor *ti = index_tensor(dev, it, ndim, ishape, idx), *y = NULL, *o = NULL;
    bool bad = in > 6; /* idx[6] is len + 1 */
    ASSERT_OK(kiln_gather(tx, axis, ti, &y));
    ck_assert_int_eq(kiln_tensor_ndim(y), ndim);
    for (int d = 0; d < ndim; d++)
        ck_assert_int_eq(kiln_tensor_shape(y)[d], ishape[d]);
    if (bad)
        expect_reported(dev, "kiln_gather", len);
    assert_values(y, ref, in, "gather");
    ASSERT_OK(kiln_tensor_empty(dev, dt, ndim, ishape, &o));
    ASSERT_OK(kiln_gather_out(tx, axis, ti, o));
    if (bad)
        expect_reported(dev, "kiln_gather_out", len);
    assert_values(o, ref, in, "gather_out");
    kiln_tensor_release(o);
    kiln_tensor_release(y);
    kiln_tensor_release(ti);
    kiln_tensor_release(tx);
    free(ref);
    free(idx);
    free(x);
}

START_TEST(test_gather)
{
    kiln_device *dev = test_device();
    static const int64_t x2[2] = {5, 6}, i2[2] = {4, 9};
    static const int64_t x3[3] = {4, 5, 6}, i3[3] = {3, 5, 2};
    static const int64_t x5[5] = {3, 2, 4, 3, 2}, i5[5] = {2, 2, 3, 3, 2};
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        kiln_dtype dt = all_dtypes[t];
        if (dt == KILN_F64 && !has_fp64(dev))
            continue;
        check_gather(dev, dt, KILN_I64, 2, x2, i2, 1); /* cross-entropy's pick of a row */
    }
    check_gather(dev, KILN_F32, KILN_I32, 2, x2, (const int64_t[]){8, 3}, 0);
    for (int axis = 0; axis < 3; axis++)
        check_gather(dev, KILN_I32, KILN_I64, 3, x3, (const int64_t[]){axis ? 3 : 7, 5, 2}, axis);
    check_gather(dev, KILN_F32, KILN_I64, 3, x3, i3, 1);
    for (int axis = 0; axis < 5; axis++) /* the axis among the host-looped dimensions too */
        check_gather(dev, KILN_F32, KILN_I32, 5, x5, i5, axis);
}
END_TEST

START_TEST(test_one_hot)
{
    kiln_device *dev = test_device();
    static const int64_t labels[7] = {0, 3, 2, 3, -1, 4, 9}, n = 7;
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        kiln_dtype dt = all_dtypes[t];
        if (dt == KILN_F64 && !has_fp64(dev))
            continue;
        for (int it = 0; it < 2; it++) {
            kiln_tensor *l = index_tensor(dev, it ? KILN_I64 : KILN_I32, 1, &n, labels), *y = NULL;
            ASSERT_OK(kiln_one_hot(l, 5, dt, &y));
            ck_assert_int_eq(kiln_tensor_dtype(y), dt);
            expect_reported(dev, "kiln_one_hot", 5); /* -1 and 9: rows of zeros */
            double ref[35];
            for (int r = 0; r < 7; r++)
                for (int c = 0; c < 5; c++)
                    ref[r * 5 + c] = labels[r] == c ? 1 : 0;
            assert_values(y, ref, 35, "one_hot");
            ASSERT_OK(kiln_fill(y, 7));
            ASSERT_OK(kiln_one_hot_out(l, 5, y));
            expect_reported(dev, "kiln_one_hot_out", 5);
            assert_values(y, ref, 35, "one_hot_out");
            kiln_tensor_release(y);
            kiln_tensor_release(l);
        }
    }
}
END_TEST

/* Bad input: every case an error naming the call, *out NULL, nothing leaked. */
START_TEST(test_index_errors)
{
    kiln_device *dev = test_device();
    static const int64_t s2[2] = {3, 4}, s1[1] = {2}, two[2] = {0, 2}, bad[2] = {0, 5};
    kiln_tensor *x = NULL, *i64 = index_tensor(dev, KILN_I64, 1, s1, two), *f = NULL;
    kiln_tensor *i2d = index_tensor(dev, KILN_I64, 2, (const int64_t[]){1, 2}, two);
    kiln_tensor *ibad = index_tensor(dev, KILN_I64, 1, s1, bad);
    /* uploaded, not kiln_tensor_zeros: Oclgrind 21.10's uninitialised-value checker does not
     * count a fill as initialising what a kernel then reads */
    static const double zero[12];
    x = upload(dev, KILN_F32, 2, s2, zero);
    f = upload(dev, KILN_F32, 1, s1, zero);
    kiln_tensor *o = (kiln_tensor *)1;
    ASSERT_FAILS(kiln_index_select(x, 0, f, &o), KILN_ERR_DTYPE_MISMATCH, "i32 or i64");
    ck_assert_ptr_null(o);
    ASSERT_FAILS(kiln_index_select(x, 2, i64, &o), KILN_ERR_INVALID_ARGUMENT, "axis 2");
    ASSERT_FAILS(kiln_index_select(x, -3, i64, &o), KILN_ERR_INVALID_ARGUMENT, "axis -3");
    ASSERT_FAILS(kiln_index_select(x, 0, i2d, &o), KILN_ERR_SHAPE_MISMATCH, "1-D");
    ASSERT_FAILS(kiln_index_select(NULL, 0, i64, &o), KILN_ERR_INVALID_ARGUMENT, "x is NULL");
    ASSERT_FAILS(kiln_index_select(x, 0, NULL, &o), KILN_ERR_INVALID_ARGUMENT, "index is NULL");
    ASSERT_FAILS(kiln_index_select(x, 0, i64, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_index_select_out(x, 0, i64, x), KILN_ERR_INVALID_ARGUMENT, "memory");
    ASSERT_FAILS(kiln_index_select_out(x, 1, i64, f), KILN_ERR_SHAPE_MISMATCH, "[3, 2]");
    ASSERT_FAILS(kiln_gather(x, 0, i64, &o), KILN_ERR_SHAPE_MISMATCH, "rank");
    kiln_tensor *wide =
        index_tensor(dev, KILN_I64, 2, (const int64_t[]){4, 1}, (const int64_t[]){0, 0, 0, 0});
    ASSERT_FAILS(kiln_gather(x, 1, wide, &o), KILN_ERR_SHAPE_MISMATCH, "[4, 1]");
    ASSERT_FAILS(kiln_one_hot(i64, 0, KILN_F32, &o), KILN_ERR_INVALID_ARGUMENT, "classes is 0");
    ASSERT_FAILS(kiln_one_hot(f, 3, KILN_F32, &o), KILN_ERR_DTYPE_MISMATCH, "labels");
    ASSERT_FAILS(kiln_one_hot(i64, 3, (kiln_dtype)99, &o), KILN_ERR_INVALID_ARGUMENT, "dtype");
    ASSERT_FAILS(kiln_one_hot_out(i64, 3, x), KILN_ERR_SHAPE_MISMATCH, "out");
    ASSERT_FAILS(kiln_one_hot_out(i64, 3, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ck_assert_ptr_null(o);
    /* KILN_CHECK=1 names the first bad index; setenv only while the device is idle */
    ASSERT_OK(kiln_device_synchronize(dev));
    ck_assert_int_eq(setenv("KILN_CHECK", "1", 1), 0);
    kiln_status s1s = kiln_index_select(x, 1, ibad, &o);
    char m1[512];
    snprintf(m1, sizeof m1, "%s", kiln_last_error());
    kiln_status s2s = kiln_one_hot(ibad, 5, KILN_F32, &o);
    char m2[512];
    snprintf(m2, sizeof m2, "%s", kiln_last_error());
    kiln_tensor *ok = NULL;
    kiln_status s3s = kiln_index_select(x, 1, i64, &ok);
    ASSERT_OK(kiln_device_synchronize(dev));
    unsetenv("KILN_CHECK");
    ck_assert_int_eq(s1s, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(m1, "index[1] is 5, outside the 4 entries of x along axis 1"), "%s", m1);
    ck_assert_int_eq(s2s, KILN_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(m2, "kiln_one_hot: labels[1] is 5, outside the 5 classes"), "%s", m2);
    ck_assert_ptr_null(o);
    ck_assert_int_eq(s3s, KILN_OK);
    kiln_tensor_release(ok);
    kiln_tensor_release(wide);
    kiln_tensor_release(ibad);
    kiln_tensor_release(i2d);
    kiln_tensor_release(i64);
    kiln_tensor_release(f);
    kiln_tensor_release(x);
}
END_TEST

START_TEST(test_clamp)
{
    kiln_device *dev = test_device();
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        kiln_dtype dt = all_dtypes[t];
        if (dt == KILN_F64 && !has_fp64(dev))
            continue;
        double x[64], ref[64];
        fill_values(dt, x, 64);
        bool fl = dt == KILN_F16 || dt == KILN_BF16 || dt == KILN_F32 || dt == KILN_F64;
        if (fl)
            x[5] = NAN;
        double lo = dt == KILN_U8 ? 10 : (fl ? -0.5 : -100),
               hi = dt == KILN_U8 ? 200 : (fl ? 0.25 : 300);
        for (int i = 0; i < 64; i++)
            ref[i] = isnan(x[i]) ? NAN : x[i] < lo ? lo : x[i] > hi ? hi : x[i];
        kiln_tensor *tx = upload(dev, dt, 1, (const int64_t[]){64}, x), *y = NULL;
        ASSERT_OK(kiln_clamp(tx, lo, hi, &y));
        assert_values(y, ref, 64, "clamp");
        ASSERT_OK(kiln_clamp_out(tx, lo, hi, tx)); /* in place */
        assert_values(tx, ref, 64, "clamp_out in place");
        kiln_tensor_release(y);
        kiln_tensor_release(tx);
    }
    kiln_tensor *x = NULL, *o = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, (const int64_t[]){4}, &x));
    ASSERT_FAILS(kiln_clamp(x, 1, 0, &o), KILN_ERR_INVALID_ARGUMENT, "lo <= hi");
    ck_assert_ptr_null(o);
    ASSERT_FAILS(kiln_clamp(x, NAN, 0, &o), KILN_ERR_INVALID_ARGUMENT, "NaN");
    ASSERT_FAILS(kiln_clamp(NULL, 0, 1, &o), KILN_ERR_INVALID_ARGUMENT, "kiln_clamp");
    kiln_tensor *u = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_U8, 1, (const int64_t[]){4}, &u));
    ASSERT_FAILS(kiln_clamp(u, -1, 3, &o), KILN_ERR_INVALID_ARGUMENT, "does not fit");
    kiln_tensor_release(u);
    kiln_tensor_release(x);
}
END_TEST

START_TEST(test_item)
{
    kiln_device *dev = test_device();
    kiln_tensor *t = NULL;
    double v = 1;
    int64_t iv = 1;
    const int64_t big = ((int64_t)1 << 53) + 1;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 2, (const int64_t[]){1, 1}, &big, &t));
    ASSERT_OK(kiln_tensor_item_i64(t, &iv));
    ck_assert_int_eq(iv, big);
    ASSERT_OK(kiln_tensor_item(t, &v));
    ck_assert_double_eq(v, (double)big);
    kiln_tensor_release(t);
    const int32_t neg = -7;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, (const int64_t[]){1}, &neg, &t));
    ASSERT_OK(kiln_tensor_item_i64(t, &iv));
    ck_assert_int_eq(iv, -7);
    kiln_tensor_release(t);
    const uint16_t half = 0xc100; /* -2.5 */
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F16, 1, (const int64_t[]){1}, &half, &t));
    ASSERT_OK(kiln_tensor_item(t, &v));
    ck_assert_double_eq(v, -2.5);
    ASSERT_FAILS(kiln_tensor_item_i64(t, &iv), KILN_ERR_DTYPE_MISMATCH, "kiln_tensor_item");
    ck_assert_int_eq(iv, 0);
    kiln_tensor_release(t);
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, (const int64_t[]){2}, &t));
    ASSERT_FAILS(kiln_tensor_item(t, &v), KILN_ERR_SHAPE_MISMATCH, "2 elements");
    ck_assert_double_eq(v, 0);
    ASSERT_FAILS(kiln_tensor_item(t, NULL), KILN_ERR_INVALID_ARGUMENT, "value is NULL");
    ASSERT_FAILS(kiln_tensor_item(NULL, &v), KILN_ERR_INVALID_ARGUMENT, "NULL");
    kiln_tensor_release(t);
}
END_TEST

static char *format(const kiln_tensor *t)
{
    size_t len = 0;
    ASSERT_OK(kiln_tensor_format(t, NULL, 0, &len));
    char *s = malloc(len + 1);
    ck_assert_ptr_nonnull(s);
    size_t len2 = 0;
    ASSERT_OK(kiln_tensor_format(t, s, len + 1, &len2));
    ck_assert_uint_eq(len2, len);
    ck_assert_uint_eq(strlen(s), len);
    return s;
}

START_TEST(test_format)
{
    kiln_device *dev = test_device();
    const char *spec = kiln_device_spec(dev);
    char want[512];
    static const float m[4] = {1, -2.5f, 3, 4.125f};
    kiln_tensor *t =
        upload(dev, KILN_F32, 2, (const int64_t[]){2, 2}, (const double[]){m[0], m[1], m[2], m[3]});
    char *s = format(t);
    snprintf(want, sizeof want,
             "tensor([[ 1.0000, -2.5000],\n"
             "        [ 3.0000,  4.1250]], shape=[2, 2], dtype=f32, device=%s)",
             spec);
    ck_assert_str_eq(s, want);
    /* truncated like snprintf */
    char small[10];
    size_t len = 0;
    ASSERT_OK(kiln_tensor_format(t, small, sizeof small, &len));
    ck_assert_str_eq(small, "tensor([[");
    ck_assert_uint_eq(len, strlen(want));
    free(s);
    kiln_tensor_release(t);
    t = upload(dev, KILN_I32, 1, (const int64_t[]){3}, (const double[]){-7, 12, 300});
    s = format(t);
    snprintf(want, sizeof want, "tensor([ -7,  12, 300], shape=[3], dtype=i32, device=%s)", spec);
    ck_assert_str_eq(s, want);
    free(s);
    kiln_tensor_release(t);
    t = upload(dev, KILN_F32, 1, (const int64_t[]){2}, (const double[]){1e-6, 2});
    s = format(t);
    snprintf(want, sizeof want, "tensor([1.0000e-06, 2.0000e+00], shape=[2], dtype=f32, device=%s)",
             spec);
    ck_assert_str_eq(s, want);
    free(s);
    kiln_tensor_release(t);
    /* 3-D: a blank line between blocks */
    t = upload(dev, KILN_U8, 3, (const int64_t[]){2, 1, 2}, (const double[]){1, 2, 3, 4});
    s = format(t);
    snprintf(want, sizeof want,
             "tensor([[[1, 2]],\n\n        [[3, 4]]], shape=[2, 1, 2], dtype=u8, device=%s)", spec);
    ck_assert_str_eq(s, want);
    free(s);
    kiln_tensor_release(t);
    /* more than 1000 elements: the first and last three */
    kiln_tensor *a = NULL;
    ASSERT_OK(kiln_arange_i64(dev, KILN_I64, 0, 2000, 1, &a));
    s = format(a);
    snprintf(want, sizeof want,
             "tensor([   0,    1,    2, ..., 1997, 1998, 1999], shape=[2000], dtype=i64, "
             "device=%s)",
             spec);
    ck_assert_str_eq(s, want);
    free(s);
    kiln_tensor_release(a);
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 2, (const int64_t[]){0, 3}, &t));
    s = format(t);
    snprintf(want, sizeof want, "tensor([], shape=[0, 3], dtype=f32, device=%s)", spec);
    ck_assert_str_eq(s, want);
    free(s);
    ASSERT_FAILS(kiln_tensor_format(t, NULL, 5, NULL), KILN_ERR_INVALID_ARGUMENT, "buf is NULL");
    ASSERT_FAILS(kiln_tensor_format(NULL, want, sizeof want, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_tensor_format");
    ck_assert_str_eq(want, "");
    ASSERT_OK(kiln_tensor_print(t));
    kiln_tensor_release(t);
}
END_TEST

Suite *index_suite(void)
{
    Suite *s = suite_create("index");
    TCase *tc = tcase_create("index");
    tcase_add_unchecked_fixture(tc, setup_devices, teardown_devices);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_index_select);
    tcase_add_test(tc, test_gather);
    tcase_add_test(tc, test_one_hot);
    tcase_add_test(tc, test_index_errors);
    tcase_add_test(tc, test_clamp);
    tcase_add_test(tc, test_item);
    tcase_add_test(tc, test_format);
    suite_add_tcase(s, tc);
    return s;
}
