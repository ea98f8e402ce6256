/* test-shape.c - permute, transpose, cat and slice copies against C index loops (exact). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "testutil.h"

/* Copies move elements bit for bit: every comparison is exact. */

/* The _out form's result: a new empty tensor shaped like y, filled by the _out call in the
 * caller, compared with the same reference. */
static kiln_tensor *empty_like(const kiln_tensor *y)
{
    kiln_tensor *o = NULL;
    ASSERT_OK(kiln_tensor_empty(kiln_tensor_device(y), kiln_tensor_dtype(y), kiln_tensor_ndim(y),
                                kiln_tensor_shape(y), &o));
    return o;
}

static void strides_of(int ndim, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
}

static void assert_shape(const kiln_tensor *t, int ndim, const int64_t *shape)
{
    ck_assert_int_eq(kiln_tensor_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        ck_assert_int_eq(kiln_tensor_shape(t)[d], shape[d]);
}

static void assert_values(const kiln_tensor *t, const double *ref, int64_t n, const char *what)
{
    ck_assert_int_eq(kiln_tensor_numel(t), n);
    double *got = download(t);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == ref[i], "%s (%s on %s): element %lld is %g, expected %g", what,
                      kiln_dtype_name(kiln_tensor_dtype(t)),
                      kiln_device_spec(kiln_tensor_device(t)), (long long)i, got[i], ref[i]);
    free(got);
}

/* Permute a random tensor and compare with the C index loop out[c] = x[c permuted back]. */
static void check_permute(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *shape,
                          const int *perm)
{
    int64_t n = numel_of(ndim, shape), xst[KILN_MAX_DIMS], oshape[KILN_MAX_DIMS];
    double *x = malloc((size_t)(n ? n : 1) * sizeof(double));
    double *ref = malloc((size_t)(n ? n : 1) * sizeof(double));
    ck_assert(x && ref);
    fill_values(dt, x, n);
    strides_of(ndim, shape, xst);
    for (int d = 0; d < ndim; d++)
        oshape[d] = shape[perm[d] < 0 ? perm[d] + ndim : perm[d]];
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i, off = 0;
        for (int d = ndim - 1; d >= 0; d--) {
            int a = perm[d] < 0 ? perm[d] + ndim : perm[d];
            off += (r % oshape[d]) * xst[a];
            r /= oshape[d];
        }
        ref[i] = x[off];
    }
    kiln_tensor *t = upload(dev, dt, ndim, shape, x), *y = NULL;
    ASSERT_OK(kiln_permute(t, perm, &y));
    assert_shape(y, ndim, oshape);
    ck_assert_int_eq(kiln_tensor_dtype(y), dt);
    assert_values(y, ref, n, "permute");
    kiln_tensor *o = empty_like(y);
    ASSERT_OK(kiln_permute_out(t, perm, o));
    assert_values(o, ref, n, "permute_out");
    kiln_tensor_release(o);
    kiln_tensor_release(t);
    kiln_tensor_release(y);
    free(x);
    free(ref);
}

START_TEST(test_permute_3d_all)
{
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                    {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    static const int64_t shape[] = {2, 3, 5};
    for (int i = 0; i < ndevs; i++)
        for (int p = 0; p < 6; p++)
            check_permute(devs[i], KILN_F32, 3, shape, perms[p]);
}
END_TEST

START_TEST(test_permute_4d_and_more)
{
    static const int64_t s4[] = {2, 3, 4, 5}, s5[] = {2, 3, 2, 3, 2},
                         s8[] = {2, 1, 3, 2, 1, 2, 3, 2};
    static const int p4[][4] = {{3, 2, 1, 0}, {0, 2, 3, 1}, {1, 0, 3, 2}, {-1, 0, -2, 1}};
    static const int p5[] = {4, 2, 0, 3, 1}, p8[] = {7, 0, 5, 2, 3, 6, 1, 4};
    for (int i = 0; i < ndevs; i++) {
        for (int p = 0; p < 4; p++)
            check_permute(devs[i], KILN_F32, 4, s4, p4[p]);
        check_permute(devs[i], KILN_F32, 5, s5, p5);
        check_permute(devs[i], KILN_F32, 8, s8, p8);
    }
}
END_TEST

START_TEST(test_permute_dtypes)
{
    static const int64_t shape[] = {3, 4, 5};
    static const int perm[] = {2, 0, 1};
    for (int i = 0; i < ndevs; i++)
        for (int k = 0; k < KILN_DTYPE_COUNT; k++)
            check_permute(devs[i], all_dtypes[k], 3, shape, perm);
}
END_TEST

/* A bigger copy through the work-group shapes the device picks (skipped on Oclgrind). */
START_TEST(test_permute_large)
{
    static const int64_t shape[] = {64, 3, 61, 67};
    static const int perm[] = {0, 2, 3, 1};
    for (int i = 0; i < ndevs; i++)
        if (!simulated(devs[i]))
            check_permute(devs[i], KILN_F32, 4, shape, perm);
}
END_TEST

/* More than 65535 rows along NDRange dimensions 1 and 2: split into several launches. */
START_TEST(test_permute_many_rows)
{
    static const int64_t shape[] = {70001, 2, 3};
    static const int tiles[] = {0, 2, 1}, block[] = {1, 0, 2};
    for (int i = 0; i < ndevs; i++) {
        if (simulated(devs[i]))
            continue;
        check_permute(devs[i], KILN_F32, 3, shape, tiles);
        check_permute(devs[i], KILN_I64, 3, shape, block);
    }
}
END_TEST

START_TEST(test_transpose)
{
    static const int64_t s2[] = {7, 61}, s3[] = {2, 3, 4}, s1[] = {5};
    static const int p3[] = {0, 2, 1};
    for (int i = 0; i < ndevs; i++) {
        for (int k = 0; k < KILN_DTYPE_COUNT; k++) {
            /* kiln_transpose must equal the permute reference with the last two swapped. */
            kiln_dtype dt = all_dtypes[k];
            int64_t n = numel_of(2, s2);
            double x[7 * 61], ref[7 * 61];
            fill_values(dt, x, n);
            for (int r = 0; r < 61; r++)
                for (int c = 0; c < 7; c++)
                    ref[r * 7 + c] = x[c * 61 + r];
            kiln_tensor *t = upload(devs[i], dt, 2, s2, x), *y = NULL;
            ASSERT_OK(kiln_transpose(t, &y));
            static const int64_t want[] = {61, 7};
            assert_shape(y, 2, want);
            assert_values(y, ref, n, "transpose");
            kiln_tensor *o = empty_like(y);
            ASSERT_OK(kiln_transpose_out(t, o));
            assert_values(o, ref, n, "transpose_out");
            kiln_tensor_release(o);
            kiln_tensor_release(y);
            kiln_tensor_release(t);
        }
        check_permute(devs[i], KILN_F32, 3, s3, p3);
        kiln_tensor *t = NULL, *y = (kiln_tensor *)1;
        ASSERT_OK(kiln_tensor_zeros(devs[i], KILN_F32, 1, s1, &t));
        ASSERT_FAILS(kiln_transpose(t, &y), KILN_ERR_INVALID_ARGUMENT, "1-D");
        ck_assert_ptr_null(y);
        kiln_tensor_release(t);
    }
}
END_TEST

START_TEST(test_permute_errors)
{
    static const int64_t shape[] = {2, 3, 4};
    static const int dup[] = {0, 1, 1}, range[] = {0, 3, 1}, neg[] = {-4, 0, 1};
    kiln_tensor *t = NULL, *y = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 3, shape, &t));
    ASSERT_FAILS(kiln_permute(t, dup, &y), KILN_ERR_INVALID_ARGUMENT, "repeated");
    ck_assert_ptr_null(y);
    ASSERT_FAILS(kiln_permute(t, range, &y), KILN_ERR_INVALID_ARGUMENT,
                 "perm[1] = 3 is out of range");
    ASSERT_FAILS(kiln_permute(t, neg, &y), KILN_ERR_INVALID_ARGUMENT, "out of range");
    ASSERT_FAILS(kiln_permute(t, NULL, &y), KILN_ERR_INVALID_ARGUMENT, "perm is NULL");
    ASSERT_FAILS(kiln_permute(NULL, dup, &y), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_permute(t, dup, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_transpose(NULL, &y), KILN_ERR_INVALID_ARGUMENT, "NULL");
    kiln_tensor_release(t);
}
END_TEST

/* Concatenate n random pieces along axis and compare with the C loop. */
static void check_cat(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *base, int axis,
                      int n, const int64_t *lens)
{
    int a = axis < 0 ? axis + ndim : axis;
    int64_t outer = 1, inner = 1, total = 0, oshape[KILN_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        outer *= d < a ? base[d] : 1;
        inner *= d > a ? base[d] : 1;
        oshape[d] = base[d];
    }
    for (int i = 0; i < n; i++)
        total += lens[i];
    oshape[a] = total;
    double *ref = malloc((size_t)(outer * total * inner + 1) * sizeof(double));
    kiln_tensor *parts[8];
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t shape[KILN_MAX_DIMS];
        memcpy(shape, base, sizeof(int64_t) * (size_t)ndim);
        shape[a] = lens[i];
        int64_t m = outer * lens[i] * inner;
        double *x = malloc((size_t)(m + 1) * sizeof(double));
        fill_values(dt, x, m);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < lens[i]; j++)
                for (int64_t k = 0; k < inner; k++)
                    ref[(o * total + off + j) * inner + k] = x[(o * lens[i] + j) * inner + k];
        parts[i] = upload(dev, dt, ndim, shape, x);
        off += lens[i];
        free(x);
    }
    kiln_tensor *y = NULL;
    ASSERT_OK(kiln_cat((const kiln_tensor *const *)parts, n, axis, &y));
    assert_shape(y, ndim, oshape);
    assert_values(y, ref, outer * total * inner, "cat");
    kiln_tensor *o = empty_like(y);
    ASSERT_OK(kiln_cat_out((const kiln_tensor *const *)parts, n, axis, o));
    assert_values(o, ref, outer * total * inner, "cat_out");
    kiln_tensor_release(o);
    kiln_tensor_release(y);
    for (int i = 0; i < n; i++)
        kiln_tensor_release(parts[i]);
    free(ref);
}

START_TEST(test_cat)
{
    static const int64_t b2[] = {3, 4}, b3[] = {2, 3, 5}, l3[] = {2, 0, 5}, l1[] = {7},
                         l4[] = {1, 1, 2, 61};
    for (int i = 0; i < ndevs; i++) {
        check_cat(devs[i], KILN_F32, 2, b2, 0, 3, l3);
        check_cat(devs[i], KILN_F32, 2, b2, 1, 3, l3);
        check_cat(devs[i], KILN_F32, 2, b2, -1, 1, l1);
        check_cat(devs[i], KILN_F32, 3, b3, 1, 4, l4);
        check_cat(devs[i], KILN_F32, 3, b3, -1, 3, l3);
        for (int k = 0; k < KILN_DTYPE_COUNT; k++)
            check_cat(devs[i], all_dtypes[k], 3, b3, 0, 3, l3);
    }
}
END_TEST

/* kiln_flatten, kiln_unsqueeze, kiln_squeeze (views: torch's shapes, x's storage) and
 * kiln_stack (against a C loop), with autograd through them; errors name each function. */
START_TEST(test_views_and_stack)
{
    static const int64_t s4[4] = {2, 3, 1, 4};
    for (int i = 0; i < ndevs; i++) {
        kiln_device *dev = devs[i];
        double x[24];
        for (int k = 0; k < 24; k++)
            x[k] = k - 7.5;
        kiln_tensor *t = upload(dev, KILN_F32, 4, s4, x), *y = NULL;
        /* flatten: every (start, end), negative too */
        ASSERT_OK(kiln_flatten(t, 1, -1, &y));
        assert_shape(y, 2, (const int64_t[]){2, 12});
        assert_values(y, x, 24, "flatten(1, -1)");
        kiln_tensor_release(y);
        ASSERT_OK(kiln_flatten(t, 0, 1, &y));
        assert_shape(y, 3, (const int64_t[]){6, 1, 4});
        kiln_tensor_release(y);
        ASSERT_OK(kiln_flatten(t, 2, 2, &y));
        assert_shape(y, 4, s4);
        kiln_tensor_release(y);
        ASSERT_OK(kiln_flatten(t, 0, -1, &y));
        assert_shape(y, 1, (const int64_t[]){24});
        kiln_tensor_release(y);
        /* unsqueeze at each position, squeeze back */
        for (int a = -5; a <= 4; a++) {
            ASSERT_OK(kiln_unsqueeze(t, a, &y));
            int at = a < 0 ? a + 5 : a;
            int64_t want[5];
            for (int d = 0, k = 0; d < 5; d++)
                want[d] = d == at ? 1 : s4[k++];
            assert_shape(y, 5, want);
            kiln_tensor *z = NULL;
            ASSERT_OK(kiln_squeeze(y, a, &z));
            assert_shape(z, 4, s4);
            kiln_tensor_release(z);
            kiln_tensor_release(y);
        }
        ASSERT_OK(kiln_squeeze(t, KILN_ALL_AXES, &y));
        assert_shape(y, 3, (const int64_t[]){2, 3, 4});
        kiln_tensor_release(y);
        ASSERT_OK(kiln_squeeze(t, 1, &y)); /* size 3: unchanged, as torch.squeeze(x, 1) */
        assert_shape(y, 4, s4);
        /* a view: a write through it is seen by x */
        ASSERT_OK(kiln_fill(y, 2.0));
        double *back = download(t);
        ck_assert(back[0] == 2.0 && back[23] == 2.0);
        free(back);
        kiln_tensor_release(y);
        kiln_tensor_release(t);
        /* stack along every axis of three [2, 3] tensors, against out[.., k, ..] = xs[k][..] */
        static const int64_t s2[2] = {2, 3};
        double v[3][6];
        kiln_tensor *xs[3];
        for (int k = 0; k < 3; k++) {
            for (int e = 0; e < 6; e++)
                v[k][e] = 10 * k + e;
            xs[k] = upload(dev, KILN_F32, 2, s2, v[k]);
        }
        for (int a = 0; a < 3; a++) {
            ASSERT_OK(kiln_stack((const kiln_tensor *const *)xs, 3, a - (a == 2 ? 3 : 0), &y));
            double ref[18];
            for (int k = 0; k < 3; k++)
                for (int r = 0; r < 2; r++)
                    for (int c = 0; c < 3; c++) {
                        int64_t idx = a == 0   ? (k * 2 + r) * 3 + c
                                      : a == 1 ? (r * 3 + k) * 3 + c
                                               : (r * 3 + c) * 3 + k;
                        ref[idx] = v[k][r * 3 + c];
                    }
            static const int64_t shapes[3][3] = {{3, 2, 3}, {2, 3, 3}, {2, 3, 3}};
            assert_shape(y, 3, shapes[a]);
            assert_values(y, ref, 18, "stack");
            kiln_tensor_release(y);
        }
        /* autograd: d/dx sum(stack(x, 2x) * w) */
        kiln_tensor *two = NULL, *st = NULL, *p = NULL, *l = NULL;
        ASSERT_OK(kiln_tensor_set_requires_grad(xs[0], true));
        ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, xs[0], 2.0, &two));
        const kiln_tensor *pair[2] = {xs[0], two};
        ASSERT_OK(kiln_stack(pair, 2, 0, &st));
        ASSERT_OK(kiln_flatten(st, 0, -1, &p));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, p, KILN_ALL_AXES, false, &l));
        ASSERT_OK(kiln_backward(l, NULL, 0));
        double *g = download(kiln_tensor_grad(xs[0]));
        for (int e = 0; e < 6; e++)
            ck_assert_msg(g[e] == 3.0, "grad[%d] = %g, want 3", e, g[e]);
        free(g);
        kiln_tensor_release(two);
        kiln_tensor_release(st);
        kiln_tensor_release(p);
        kiln_tensor_release(l);
        /* errors: each names its function, *out NULL */
        kiln_tensor *o = (kiln_tensor *)1;
        ASSERT_FAILS(kiln_flatten(xs[1], 1, 0, &o), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_flatten: start 1 comes after end 0");
        ck_assert_ptr_null(o);
        ASSERT_FAILS(kiln_flatten(xs[1], 0, 2, &o), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_flatten: end 2 is out of range for 2 dimensions");
        ASSERT_FAILS(kiln_unsqueeze(xs[1], 3, &o), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_unsqueeze: axis 3 is out of range for 3 dimensions");
        ASSERT_FAILS(kiln_squeeze(xs[1], -3, &o), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_squeeze: axis -3 is out of range");
        ASSERT_FAILS(kiln_squeeze(NULL, 0, &o), KILN_ERR_INVALID_ARGUMENT, "kiln_squeeze");
        ASSERT_FAILS(kiln_stack(NULL, 2, 0, &o), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_stack: xs is NULL");
        ASSERT_FAILS(kiln_stack((const kiln_tensor *const *)xs, 0, 0, &o),
                     KILN_ERR_INVALID_ARGUMENT, "kiln_stack: n is less than 1");
        ASSERT_FAILS(kiln_stack((const kiln_tensor *const *)xs, 3, 3, &o),
                     KILN_ERR_INVALID_ARGUMENT, "kiln_stack: axis 3 is out of range");
        kiln_tensor *odd = NULL;
        ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &s2[1], &odd));
        const kiln_tensor *mixed[2] = {xs[1], odd};
        ASSERT_FAILS(kiln_stack(mixed, 2, 0, &o), KILN_ERR_SHAPE_MISMATCH,
                     "kiln_stack: xs[1] has shape [3] but xs[0] has [2, 3]");
        kiln_tensor *i32 = NULL;
        ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 2, s2, &i32));
        const kiln_tensor *dts[2] = {xs[1], i32};
        ASSERT_FAILS(kiln_stack(dts, 2, 0, &o), KILN_ERR_DTYPE_MISMATCH, "kiln_stack: ");
        ck_assert_ptr_null(o);
        kiln_tensor_release(odd);
        kiln_tensor_release(i32);
        for (int k = 0; k < 3; k++)
            kiln_tensor_release(xs[k]);
    }
}
END_TEST

START_TEST(test_cat_errors)
{
    static const int64_t s23[] = {2, 3}, s24[] = {2, 4}, s33[] = {3, 3}, s3[] = {3};
    kiln_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *y = (kiln_tensor *)1;
    /* Uploaded, not kiln_tensor_zeros: Oclgrind's uninitialised-value checker loses track of
     * device-side fills in cached buffers, and the successful cat below reads a and b. */
    static const double vals[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    a = upload(devs[0], KILN_F32, 2, s23, vals);
    b = upload(devs[0], KILN_F32, 2, s24, vals);
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 2, s33, &c));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 1, s3, &d));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s33, &e));
    const kiln_tensor *ab[] = {a, b}, *ac[] = {e, c}, *ad[] = {a, d}, *an[] = {a, NULL};
    ASSERT_FAILS(kiln_cat(ab, 2, 0, &y), KILN_ERR_SHAPE_MISMATCH, "[2, 3]");
    ck_assert_ptr_null(y);
    ASSERT_FAILS(kiln_cat(ab, 2, 0, &y), KILN_ERR_SHAPE_MISMATCH, "[2, 4]");
    ASSERT_OK(kiln_cat(ab, 2, 1, &y)); /* shapes agree outside axis 1 */
    kiln_tensor_release(y);
    ASSERT_FAILS(kiln_cat(ac, 2, 0, &y), KILN_ERR_DTYPE_MISMATCH, "i32");
    ASSERT_FAILS(kiln_cat(ac, 2, 0, &y), KILN_ERR_DTYPE_MISMATCH, "f32");
    ASSERT_FAILS(kiln_cat(ad, 2, 0, &y), KILN_ERR_SHAPE_MISMATCH, "[3]");
    ASSERT_FAILS(kiln_cat(an, 2, 0, &y), KILN_ERR_INVALID_ARGUMENT, "tensor 1");
    ASSERT_FAILS(kiln_cat(ab, 0, 0, &y), KILN_ERR_INVALID_ARGUMENT, "at least one");
    ASSERT_FAILS(kiln_cat(NULL, 1, 0, &y), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_cat(ab, 2, 2, &y), KILN_ERR_INVALID_ARGUMENT, "axis 2 is out of range");
    ASSERT_FAILS(kiln_cat(ab, 2, 1, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ck_assert_ptr_null(y);
    /* [0, INT64_MAX] is a valid (empty) tensor, but two of them along axis 1 have more than
     * INT64_MAX columns */
    static const int64_t widest[] = {0, INT64_MAX};
    kiln_tensor *w = NULL;
    ASSERT_OK(kiln_tensor_empty(devs[0], KILN_U8, 2, widest, &w));
    const kiln_tensor *ww[] = {w, w};
    y = (kiln_tensor *)1;
    ASSERT_FAILS(kiln_cat(ww, 2, 1, &y), KILN_ERR_INVALID_ARGUMENT, "overflow");
    ASSERT_ERROR_HAS("axis 1");
    ck_assert_ptr_null(y);
    ASSERT_OK(kiln_cat(ww, 1, 1, &y)); /* one of them still fits */
    kiln_tensor_release(y);
    y = NULL;
    ASSERT_OK(kiln_cat(ww, 2, 0, &y)); /* [0, INT64_MAX] again */
    assert_shape(y, 2, widest);
    kiln_tensor_release(y);
    kiln_tensor_release(w);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
    kiln_tensor_release(d);
    kiln_tensor_release(e);
}
END_TEST

static void check_slice(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *shape, int axis,
                        int64_t start, int64_t end)
{
    int a = axis < 0 ? axis + ndim : axis;
    int64_t len = shape[a], b = start < 0 ? start + len : start, e = end < 0 ? end + len : end;
    int64_t outer = 1, inner = 1, n = numel_of(ndim, shape), oshape[KILN_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        outer *= d < a ? shape[d] : 1;
        inner *= d > a ? shape[d] : 1;
        oshape[d] = shape[d];
    }
    oshape[a] = e - b;
    double *x = malloc((size_t)(n + 1) * sizeof(double));
    double *ref = malloc((size_t)(n + 1) * sizeof(double));
    fill_values(dt, x, n);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = b; j < e; j++)
            for (int64_t i = 0; i < inner; i++)
                ref[k++] = x[(o * len + j) * inner + i];
    kiln_tensor *t = upload(dev, dt, ndim, shape, x), *y = NULL;
    ASSERT_OK(kiln_slice(t, axis, start, end, &y));
    assert_shape(y, ndim, oshape);
    assert_values(y, ref, k, "slice");
    kiln_tensor *o = empty_like(y);
    ASSERT_OK(kiln_slice_out(t, axis, start, end, o));
    assert_values(o, ref, k, "slice_out");
    kiln_tensor_release(o);
    kiln_tensor_release(t);
    kiln_tensor_release(y);
    free(x);
    free(ref);
}

START_TEST(test_slice)
{
    static const int64_t s1[] = {61}, s3[] = {3, 7, 5};
    for (int i = 0; i < ndevs; i++) {
        check_slice(devs[i], KILN_F32, 1, s1, 0, 0, 61);
        check_slice(devs[i], KILN_F32, 1, s1, 0, 5, 6);
        check_slice(devs[i], KILN_F32, 1, s1, 0, -10, -1);
        check_slice(devs[i], KILN_F32, 1, s1, -1, 7, 7); /* empty */
        check_slice(devs[i], KILN_F32, 3, s3, 1, 2, 5);
        check_slice(devs[i], KILN_F32, 3, s3, 0, 1, 3);
        check_slice(devs[i], KILN_F32, 3, s3, -1, -3, 5);
        for (int k = 0; k < KILN_DTYPE_COUNT; k++)
            check_slice(devs[i], all_dtypes[k], 3, s3, 2, 1, 4);
    }
}
END_TEST

START_TEST(test_slice_errors)
{
    static const int64_t shape[] = {4, 5};
    kiln_tensor *t = NULL, *y = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, shape, &t));
    ASSERT_FAILS(kiln_slice(t, 0, 0, 5, &y), KILN_ERR_INVALID_ARGUMENT, "length 4");
    ck_assert_ptr_null(y);
    ASSERT_FAILS(kiln_slice(t, 1, 3, 2, &y), KILN_ERR_INVALID_ARGUMENT, "[3, 2)");
    ASSERT_FAILS(kiln_slice(t, 1, -6, 2, &y), KILN_ERR_INVALID_ARGUMENT, "no clamping");
    ASSERT_FAILS(kiln_slice(t, 2, 0, 1, &y), KILN_ERR_INVALID_ARGUMENT, "axis 2 is out of range");
    ASSERT_FAILS(kiln_slice(t, -3, 0, 1, &y), KILN_ERR_INVALID_ARGUMENT, "axis -3");
    ASSERT_FAILS(kiln_slice(NULL, 0, 0, 1, &y), KILN_ERR_INVALID_ARGUMENT, "NULL");
    ASSERT_FAILS(kiln_slice(t, 0, 0, 1, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    kiln_tensor_release(t);
}
END_TEST

/* The _out forms: wrong shape (both named), wrong dtype, NULL out, out sharing memory with an
 * input (a reshaped view); out untouched by all of them. */
START_TEST(test_out_errors)
{
    static const int64_t s23[] = {2, 3}, s32[] = {3, 2}, s43[] = {4, 3};
    static const double vals[6] = {1, 2, 3, 4, 5, 6};
    static const int p10[] = {1, 0};
    kiln_tensor *a = upload(devs[0], KILN_F32, 2, s23, vals), *o = NULL, *oi = NULL, *v = NULL;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s23, &o));  /* wrong shape for most */
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 2, s32, &oi)); /* wrong dtype */
    ASSERT_OK(kiln_tensor_reshape(a, 2, s32, &v));                /* a's memory as [3, 2] */
    ASSERT_FAILS(kiln_permute_out(a, p10, o), KILN_ERR_SHAPE_MISMATCH, "[2, 3]");
    ASSERT_ERROR_HAS("[3, 2]");
    ASSERT_ERROR_HAS("kiln_permute_out");
    ASSERT_FAILS(kiln_permute_out(a, p10, oi), KILN_ERR_DTYPE_MISMATCH, "i32");
    ASSERT_FAILS(kiln_permute_out(a, p10, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_permute_out(a, p10, v), KILN_ERR_INVALID_ARGUMENT, "shares memory");
    ASSERT_FAILS(kiln_permute_out(a, NULL, oi), KILN_ERR_INVALID_ARGUMENT, "perm is NULL");
    ASSERT_FAILS(kiln_transpose_out(a, o), KILN_ERR_SHAPE_MISMATCH, "[2, 3]");
    ASSERT_ERROR_HAS("[3, 2]");
    ASSERT_FAILS(kiln_transpose_out(a, oi), KILN_ERR_DTYPE_MISMATCH, "f32");
    ASSERT_FAILS(kiln_transpose_out(a, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_transpose_out: out is NULL");
    ASSERT_FAILS(kiln_transpose_out(a, v), KILN_ERR_INVALID_ARGUMENT, "shares memory");
    ASSERT_FAILS(kiln_transpose_out(NULL, o), KILN_ERR_INVALID_ARGUMENT, "kiln_transpose_out");
    const kiln_tensor *aa[] = {a, a};
    kiln_tensor *o43 = NULL, *big = NULL, *bigv = NULL;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, s43, &big));
    ASSERT_OK(kiln_tensor_reshape(big, 1, (const int64_t[]){12}, &bigv));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 2, s43, &o43));
    ASSERT_FAILS(kiln_cat_out(aa, 2, 0, o), KILN_ERR_SHAPE_MISMATCH, "[4, 3]");
    ASSERT_ERROR_HAS("[2, 3]");
    ASSERT_FAILS(kiln_cat_out(aa, 2, 0, o43), KILN_ERR_DTYPE_MISMATCH, "i32");
    ASSERT_FAILS(kiln_cat_out(aa, 2, 0, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_cat_out: out is NULL");
    const kiln_tensor *ab[] = {a, bigv};
    ASSERT_FAILS(kiln_cat_out(ab, 2, 0, big), KILN_ERR_SHAPE_MISMATCH, "kiln_cat_out");
    const kiln_tensor *sb[] = {bigv};
    ASSERT_FAILS(kiln_cat_out(sb, 1, 0, bigv), KILN_ERR_INVALID_ARGUMENT, "shares memory");
    const kiln_tensor *sc[] = {big};
    ASSERT_FAILS(kiln_cat_out(sc, 1, 0, big), KILN_ERR_INVALID_ARGUMENT, "shares memory");
    ASSERT_FAILS(kiln_slice_out(a, 1, 0, 2, o), KILN_ERR_SHAPE_MISMATCH, "[2, 2]");
    ASSERT_ERROR_HAS("[2, 3]");
    ASSERT_FAILS(kiln_slice_out(a, 0, 0, 2, oi), KILN_ERR_DTYPE_MISMATCH, "i32");
    ASSERT_FAILS(kiln_slice_out(a, 0, 0, 2, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_slice_out: out is NULL");
    ASSERT_FAILS(kiln_slice_out(a, 0, 0, 2, a), KILN_ERR_INVALID_ARGUMENT, "shares memory");
    ASSERT_FAILS(kiln_slice_out(a, 0, 0, 5, o), KILN_ERR_INVALID_ARGUMENT, "no clamping");
    /* every failure left the outs as they were */
    float f[6];
    ASSERT_OK(kiln_tensor_read(o, f, sizeof f));
    for (int i = 0; i < 6; i++)
        ck_assert(f[i] == 0);
    int32_t iv[6];
    ASSERT_OK(kiln_tensor_read(oi, iv, sizeof iv));
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(iv[i], 0);
    ASSERT_OK(kiln_tensor_read(a, f, sizeof f));
    for (int i = 0; i < 6; i++)
        ck_assert(f[i] == vals[i]);
    kiln_tensor_release(a);
    kiln_tensor_release(o);
    kiln_tensor_release(oi);
    kiln_tensor_release(v);
    kiln_tensor_release(o43);
    kiln_tensor_release(big);
    kiln_tensor_release(bigv);
}
END_TEST

/* Two devices: mixing cpu:0 and cpu:1 tensors is refused, naming both; each works alone. */
START_TEST(test_device_mismatch)
{
    kiln_device *d0 = NULL, *d1 = NULL;
    if (kiln_device_get("cpu:1", &d1) != KILN_OK)
        return; /* one device only: nothing to mix */
    ASSERT_OK(kiln_device_get("cpu:0", &d0));
    static const int64_t shape[] = {2, 3};
    kiln_tensor *a = NULL, *b = NULL, *y = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(d0, KILN_F32, 2, shape, &a));
    ASSERT_OK(kiln_tensor_zeros(d1, KILN_F32, 2, shape, &b));
    const kiln_tensor *ab[] = {a, b};
    ASSERT_FAILS(kiln_cat(ab, 2, 0, &y), KILN_ERR_DEVICE_MISMATCH, "cpu:0");
    ASSERT_FAILS(kiln_cat(ab, 2, 0, &y), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ck_assert_ptr_null(y);
    /* the _out forms: out on the other device */
    static const int64_t s32[] = {3, 2}, s43[] = {4, 3};
    static const int p10[] = {1, 0};
    kiln_tensor *o32 = NULL, *o43 = NULL, *o23 = NULL;
    ASSERT_OK(kiln_tensor_zeros(d1, KILN_F32, 2, s32, &o32));
    ASSERT_OK(kiln_tensor_zeros(d1, KILN_F32, 2, s43, &o43));
    ASSERT_OK(kiln_tensor_zeros(d1, KILN_F32, 2, shape, &o23));
    ASSERT_FAILS(kiln_permute_out(a, p10, o32), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    ASSERT_FAILS(kiln_transpose_out(a, o32), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    const kiln_tensor *aa[] = {a, a};
    ASSERT_FAILS(kiln_cat_out(aa, 2, 0, o43), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    ASSERT_FAILS(kiln_slice_out(a, 0, 0, 2, o23), KILN_ERR_DEVICE_MISMATCH, "cpu:1");
    ASSERT_ERROR_HAS("cpu:0");
    kiln_tensor_release(o32);
    kiln_tensor_release(o43);
    kiln_tensor_release(o23);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

Suite *shape_suite(void)
{
    Suite *s = suite_create("shape");
    TCase *tc = tcase_create("copies");
    tcase_add_unchecked_fixture(tc, setup_devices, teardown_devices);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_permute_3d_all);
    tcase_add_test(tc, test_permute_4d_and_more);
    tcase_add_test(tc, test_permute_dtypes);
    tcase_add_test(tc, test_permute_large);
    tcase_add_test(tc, test_permute_many_rows);
    tcase_add_test(tc, test_transpose);
    tcase_add_test(tc, test_cat);
    tcase_add_test(tc, test_slice);
    tcase_add_test(tc, test_views_and_stack);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("errors");
    tcase_add_unchecked_fixture(te, setup_devices, teardown_devices);
    tcase_add_test(te, test_permute_errors);
    tcase_add_test(te, test_cat_errors);
    tcase_add_test(te, test_slice_errors);
    tcase_add_test(te, test_out_errors);
    tcase_add_test(te, test_device_mismatch);
    suite_add_tcase(s, te);
    return s;
}
