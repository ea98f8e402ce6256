/* test-reduce.c - kiln_reduce (sum, mean, max, min, argmax) against double-precision C loops. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "testutil.h"

/* Tolerances (stated bounds, |got - ref| with ref summed in double):
 *   sum   f32: 2^-20 * sum|x|   f64: 2^-44 * sum|x|   f16 (result stored as f16): 2^-10 * sum|x|
 *         bf16 (result stored as bf16): 2^-8 * sum|x|
 *   mean  the same divided by n; integer sums, max, min, argmax: exact.
 *   2^24 f32 values in [0, 1): relative error <= 1e-6 (the compensated sum keeps it near 1e-7).
 */

/* Reference: reduce x viewed as [outer, n, inner] over n, in double. */
static void ref_reduce(kiln_reduce_op op, const double *x, int64_t outer, int64_t n, int64_t inner,
                       double *out, double *abs_sum)
{
    for (int64_t r = 0; r < outer * inner; r++) {
        const double *row = x + (r / inner) * n * inner + r % inner;
        double acc = op == KILN_REDUCE_MIN ? INFINITY : op <= KILN_REDUCE_MEAN ? 0 : -INFINITY;
        double abs = 0;
        int64_t best = 0;
        for (int64_t j = 0; j < n; j++) {
            double v = row[j * inner];
            abs += fabs(v);
            if (op <= KILN_REDUCE_MEAN)
                acc += v;
            else if (op == KILN_REDUCE_MIN ? v < acc : v > acc)
                acc = v, best = j;
        }
        if (op == KILN_REDUCE_MEAN)
            acc /= (double)n, abs /= (double)n;
        out[r] = op == KILN_REDUCE_ARGMAX ? (double)best : acc;
        abs_sum[r] = abs;
    }
}

static double sum_tolerance(kiln_dtype dt)
{
    switch (dt) {
    case KILN_F32:
        return ldexp(1, -20);
    case KILN_F64:
        return ldexp(1, -44);
    case KILN_F16:
        return ldexp(1, -10);
    case KILN_BF16:
        return ldexp(1, -8);
    default:
        return 0;
    }
}

static kiln_dtype expected_dtype(kiln_reduce_op op, kiln_dtype dt)
{
    if (op == KILN_REDUCE_ARGMAX)
        return KILN_I64;
    if (op == KILN_REDUCE_SUM && (dt == KILN_I32 || dt == KILN_I64 || dt == KILN_U8))
        return KILN_I64;
    return dt;
}

static const char *op_name(kiln_reduce_op op)
{
    static const char *const names[] = {"sum", "mean", "max", "min", "argmax"};
    return names[op];
}

/* Reduce a random tensor on dev and compare with ref_reduce, shape and dtype included. */
static void check_case(kiln_device *dev, kiln_reduce_op op, kiln_dtype dt, int ndim,
                       const int64_t *shape, int axis, bool keepdim)
{
    int64_t numel = 1, outer = 1, inner = 1, n;
    for (int d = 0; d < ndim; d++)
        numel *= shape[d];
    int a = axis == KILN_ALL_AXES ? -1 : (axis < 0 ? axis + ndim : axis);
    for (int d = 0; d < ndim && a >= 0; d++) {
        outer *= d < a ? shape[d] : 1;
        inner *= d > a ? shape[d] : 1;
    }
    n = a >= 0 ? shape[a] : numel;
    double *x = malloc((size_t)(numel ? numel : 1) * sizeof(double));
    double *ref = malloc((size_t)(outer * inner) * sizeof(double));
    double *abs = malloc((size_t)(outer * inner) * sizeof(double));
    ck_assert(x && ref && abs);
    fill_values(dt, x, numel);
    ref_reduce(op, x, outer, n, inner, ref, abs);

    kiln_tensor *t = upload(dev, dt, ndim, shape, x), *y = NULL;
    ASSERT_OK(kiln_reduce(op, t, axis, keepdim, &y));
    ck_assert_int_eq(kiln_tensor_dtype(y), expected_dtype(op, dt));
    ck_assert_int_eq(kiln_tensor_numel(y), outer * inner);
    int want_ndim = a < 0 ? (keepdim ? ndim : 1) : (keepdim || ndim == 1 ? ndim : ndim - 1);
    ck_assert_int_eq(kiln_tensor_ndim(y), want_ndim);
    for (int d = 0, k = 0; a >= 0 && d < ndim; d++) {
        if (d == a && !keepdim)
            continue;
        if (ndim > 1 || keepdim)
            ck_assert_int_eq(kiln_tensor_shape(y)[k], d == a ? 1 : shape[d]);
        k++;
    }
    double *got = download(y);
    double tol = sum_tolerance(dt);
    for (int64_t r = 0; r < outer * inner; r++) {
        double bound = op <= KILN_REDUCE_MEAN ? tol * abs[r] : 0;
        ck_assert_msg(fabs(got[r] - ref[r]) <= bound,
                      "%s %s on %s, ndim %d numel %lld axis %d: result %lld = %.17g, reference "
                      "%.17g (bound %.3g)",
                      op_name(op), kiln_dtype_name(dt), kiln_device_spec(dev), ndim,
                      (long long)numel, axis, (long long)r, got[r], ref[r], bound);
    }
    free(got);
    free(x);
    free(ref);
    free(abs);
    kiln_tensor_release(t);
    kiln_tensor_release(y);
}

/* Every axis, keepdim or not, and the all-axes reduction of one shape. */
static void check_shape(kiln_device *dev, kiln_reduce_op op, kiln_dtype dt, int ndim,
                        const int64_t *shape)
{
    check_case(dev, op, dt, ndim, shape, KILN_ALL_AXES, false);
    check_case(dev, op, dt, ndim, shape, KILN_ALL_AXES, true);
    for (int a = 0; a < ndim; a++)
        check_case(dev, op, dt, ndim, shape, a, a % 2 == 1);
    check_case(dev, op, dt, ndim, shape, -1, true);
}

static bool dtype_ok(kiln_device *dev, kiln_reduce_op op, kiln_dtype dt)
{
    if (dt == KILN_F64 && !has_fp64(dev))
        return false;
    return !(op == KILN_REDUCE_MEAN && (dt == KILN_I32 || dt == KILN_I64 || dt == KILN_U8));
}

/* f32 gets every shape; other dtypes a 2-D and a 4-D shape. */
START_TEST(test_ops_dtypes_axes)
{
    kiln_reduce_op op = (kiln_reduce_op)_i;
    static const int64_t s1[] = {7}, s2[] = {7, 61}, s3[] = {3, 5, 7}, s4[] = {2, 3, 4, 5},
                         s5[] = {1}, s6[] = {257}, s7[] = {1, 61, 1};
    for (int i = 0; i < ndevs; i++) {
        kiln_device *dev = devs[i];
        for (size_t k = 0; k < sizeof all_dtypes / sizeof all_dtypes[0]; k++) {
            kiln_dtype dt = all_dtypes[k];
            if (!dtype_ok(dev, op, dt))
                continue;
            check_shape(dev, op, dt, 2, s2);
            check_shape(dev, op, dt, 4, s4);
            if (dt != KILN_F32)
                continue;
            check_shape(dev, op, dt, 1, s1);
            check_shape(dev, op, dt, 3, s3);
            check_shape(dev, op, dt, 1, s5);
            check_shape(dev, op, dt, 1, s6);
            check_shape(dev, op, dt, 3, s7);
        }
    }
}
END_TEST

/* Rows long enough for the work-group path (one and several chunks per row, inner > 1). */
START_TEST(test_workgroup_path)
{
    kiln_reduce_op op = (kiln_reduce_op)_i;
    static const int64_t a[] = {3001}, b[] = {2, 1500, 3}, c[] = {20011}, d[] = {3, 2049};
    for (int i = 0; i < ndevs; i++) {
        kiln_device *dev = devs[i];
        for (size_t k = 0; k < sizeof all_dtypes / sizeof all_dtypes[0]; k++) {
            kiln_dtype dt = all_dtypes[k];
            if (!dtype_ok(dev, op, dt) || (simulated(dev) && dt != KILN_F32 && dt != KILN_I32))
                continue;
            check_case(dev, op, dt, 1, a, KILN_ALL_AXES, false);
            check_case(dev, op, dt, 3, b, 1, false);
            check_case(dev, op, dt, 1, c, 0, true);
            if (!simulated(dev))
                check_case(dev, op, dt, 2, d, -1, false);
        }
    }
}
END_TEST

/* The vectorised CPU kernels and the chunked paths: rows and column blocks whose lengths do not
 * divide the vector width (8), the block of 4, the column block (256) or the chunk, split into
 * several chunks (few results, long rows, 2^16 elements and more) or not; every dtype. Simulated
 * devices (GPU-type: chunked work-item-per-result and work-group paths) get smaller shapes, f32 and
 * i32. */
START_TEST(test_vector_and_chunked_paths)
{
    kiln_reduce_op op = (kiln_reduce_op)_i;
    static const int64_t cols[] = {37, 263}, cols3[] = {2, 1000, 19}, rows[] = {5, 1237},
                         all[] = {70001}, tall[] = {8209, 9}, wide[] = {3, 16411},
                         blocks[] = {131, 512};
    /* Column blocks narrowed to give each compute unit one (CPU_MIN_WIDTH 64, widths rounded
     * up to 8): two blocks of 104 and 96, of 72 and 58 (a scalar tail), too few columns to
     * narrow (100, one block: rows split if long enough), three blocks made four (of 176 and
     * 172) for two compute units, several rows of one block. */
    static const int64_t narrow[] = {77, 200}, narrow_tail[] = {33, 130}, one_block[] = {5, 100},
                         split_block[] = {700, 100}, three_blocks[] = {40, 700},
                         rows_of_block[] = {3, 600, 70};
    static const int64_t small_cols[] = {1029, 35}, small_rows[] = {5, 300}, small3[] = {2, 77, 9};
    for (int i = 0; i < ndevs; i++) {
        kiln_device *dev = devs[i];
        for (size_t k = 0; k < sizeof all_dtypes / sizeof all_dtypes[0]; k++) {
            kiln_dtype dt = all_dtypes[k];
            if (!dtype_ok(dev, op, dt))
                continue;
            if (simulated(dev)) {
                if (dt != KILN_F32 && dt != KILN_I32)
                    continue;
                check_case(dev, op, dt, 2, small_cols, 0, false);
                check_case(dev, op, dt, 2, small_rows, 1, true);
                check_case(dev, op, dt, 3, small3, 1, false);
                continue;
            }
            check_case(dev, op, dt, 2, cols, 0, false);
            check_case(dev, op, dt, 3, cols3, 1, false);
            check_case(dev, op, dt, 2, rows, -1, false);
            check_case(dev, op, dt, 1, all, KILN_ALL_AXES, false);
            check_case(dev, op, dt, 2, tall, 0, true);
            check_case(dev, op, dt, 2, wide, 1, false);
            check_case(dev, op, dt, 2, blocks, 0, false);
            check_case(dev, op, dt, 2, narrow, 0, false);
            check_case(dev, op, dt, 2, narrow_tail, 0, true);
            check_case(dev, op, dt, 2, one_block, 0, false);
            check_case(dev, op, dt, 2, split_block, 0, false);
            check_case(dev, op, dt, 2, three_blocks, 0, false);
            check_case(dev, op, dt, 3, rows_of_block, 1, false);
        }
    }
}
END_TEST

/* Ties, NaN and -inf across vector lanes, column blocks and chunks: argmax gives the first
 * index of the extreme (the first NaN), max/min propagate NaN, whichever lane or chunk holds
 * it. Rows of 4101 along axis 1 and columns of 4101 along axis 0, 40 results each. */
START_TEST(test_lanes_ties_nan)
{
    const int64_t n = 4101, m = 40, sr[] = {m, n}, sc[] = {n, m};
    float *xr = malloc((size_t)(n * m) * sizeof(float)),
          *xc = malloc((size_t)(n * m) * sizeof(float));
    ck_assert(xr && xc);
    /* result r: all equal (r % 4 == 0), all -inf (1), NaN at 2 places (2), max at 3 places (3) */
    int64_t want_idx[40];
    for (int64_t r = 0; r < m; r++) {
        int64_t a = (r * 977) % n, b = (r * 977 + 1234) % n;
        if (a > b) {
            int64_t t = a;
            a = b;
            b = t;
        }
        for (int64_t j = 0; j < n; j++) {
            float v = (float)((j * 31 + r) % 101) - 50;
            switch (r % 4) {
            case 0:
                v = 2.5f;
                break;
            case 1:
                v = -INFINITY;
                break;
            case 2:
                v = j == a || j == b ? NAN : v;
                break;
            default:
                v = j == a || j == b || j == n - 1 ? 100 : v;
                break;
            }
            xr[r * n + j] = v;
            xc[j * m + r] = v;
        }
        want_idx[r] = r % 4 <= 1 ? 0 : a;
    }
    for (int i = 0; i < ndevs; i++) {
        if (simulated(devs[i]))
            continue;
        for (int axis = 0; axis <= 1; axis++) {
            kiln_tensor *t = NULL, *y = NULL;
            ASSERT_OK(
                kiln_tensor_from_host(devs[i], KILN_F32, 2, axis ? sr : sc, axis ? xr : xc, &t));
            int64_t idx[40];
            float v[40];
            ASSERT_OK(kiln_reduce(KILN_REDUCE_ARGMAX, t, axis, false, &y));
            ASSERT_OK(kiln_tensor_read(y, idx, sizeof idx));
            kiln_tensor_release(y);
            for (int64_t r = 0; r < m; r++)
                ck_assert_msg(idx[r] == want_idx[r], "axis %d result %lld: argmax %lld, want %lld",
                              axis, (long long)r, (long long)idx[r], (long long)want_idx[r]);
            for (int op = KILN_REDUCE_MAX; op <= KILN_REDUCE_MIN; op++) {
                ASSERT_OK(kiln_reduce((kiln_reduce_op)op, t, axis, false, &y));
                ASSERT_OK(kiln_tensor_read(y, v, sizeof v));
                kiln_tensor_release(y);
                for (int64_t r = 0; r < m; r++) {
                    bool ok = r % 4 == 0              ? v[r] == 2.5f
                              : r % 4 == 1            ? isinf(v[r]) && v[r] < 0
                              : r % 4 == 2            ? isnan(v[r])
                              : op == KILN_REDUCE_MAX ? v[r] == 100
                                                      : v[r] == -50;
                    ck_assert_msg(ok, "axis %d %s result %lld: %g", axis,
                                  op_name((kiln_reduce_op)op), (long long)r, (double)v[r]);
                }
            }
            kiln_tensor_release(t);
        }
    }
    free(xr);
    free(xc);
}
END_TEST

/* 1000003 elements, all-reduced, on the real (not simulated) devices. */
START_TEST(test_large_all_reduce)
{
    static const int64_t shape[] = {1000003};
    for (int i = 0; i < ndevs; i++) {
        if (simulated(devs[i]))
            continue;
        for (int op = KILN_REDUCE_SUM; op < KILN_REDUCE_OP_COUNT; op++)
            check_case(devs[i], (kiln_reduce_op)op, KILN_F32, 1, shape, KILN_ALL_AXES, false);
    }
}
END_TEST

/* More than 65535 rows (NDRange dimension 1 is split into several launches). */
START_TEST(test_many_rows)
{
    static const int64_t shape[] = {70001, 3};
    for (int i = 0; i < ndevs; i++) {
        if (simulated(devs[i]))
            continue;
        check_case(devs[i], KILN_REDUCE_SUM, KILN_F32, 2, shape, 1, false);
        check_case(devs[i], KILN_REDUCE_ARGMAX, KILN_I32, 2, shape, -1, true);
    }
}
END_TEST

/* The stated bound: 2^24 f32 values in [0, 1) sum within 1e-6 relative of a double sum. */
START_TEST(test_big_sum_accuracy)
{
    const int64_t n = (int64_t)1 << 24;
    float *x = malloc((size_t)n * sizeof(float));
    ck_assert_ptr_nonnull(x);
    double ref = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)rnd();
        ref += x[i];
    }
    for (int i = 0; i < ndevs; i++) {
        if (simulated(devs[i]))
            continue;
        kiln_tensor *t = NULL, *y = NULL;
        ASSERT_OK(kiln_tensor_from_host(devs[i], KILN_F32, 1, &n, x, &t));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, t, KILN_ALL_AXES, false, &y));
        float got;
        ASSERT_OK(kiln_tensor_read(y, &got, sizeof got));
        double rel = fabs(got - ref) / ref;
        ck_assert_msg(rel <= 1e-6, "sum of 2^24 on %s: %.9g vs %.9g (relative error %.3g)",
                      kiln_device_spec(devs[i]), (double)got, ref, rel);
        kiln_tensor_release(y);
        ASSERT_OK(kiln_reduce(KILN_REDUCE_MEAN, t, KILN_ALL_AXES, false, &y));
        ASSERT_OK(kiln_tensor_read(y, &got, sizeof got));
        ck_assert_msg(fabs(got - ref / (double)n) <= 1e-6 * ref / (double)n, "mean %.9g vs %.9g",
                      (double)got, ref / (double)n);
        kiln_tensor_release(y);
        kiln_tensor_release(t);
    }
    free(x);
}
END_TEST

static void read_f32(const kiln_tensor *t, float *dst, size_t n)
{
    ck_assert_int_eq(kiln_tensor_numel(t), (int64_t)n);
    ASSERT_OK(kiln_tensor_read(t, dst, n * sizeof(float)));
}

/* NaN propagates through sum/max/min; argmax takes the first NaN; ties give the first index;
 * infinities are summed as infinities. */
START_TEST(test_special_values)
{
    for (int i = 0; i < ndevs; i++) {
        kiln_device *dev = devs[i];
        const int64_t n4 = 4;
        const float withnan[] = {1, NAN, 3, NAN}, ties[] = {3, 1, 3, 2},
                    infs[] = {INFINITY, 1, 2, 3},
                    neg[] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        kiln_tensor *t = NULL, *y = NULL;
        float f;
        int64_t idx;
        ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, &n4, withnan, &t));
        for (int op = KILN_REDUCE_SUM; op <= KILN_REDUCE_MIN; op++) {
            ASSERT_OK(kiln_reduce((kiln_reduce_op)op, t, 0, false, &y));
            read_f32(y, &f, 1);
            ck_assert_msg(isnan(f), "%s with NaN gave %g", op_name((kiln_reduce_op)op), f);
            kiln_tensor_release(y);
        }
        ASSERT_OK(kiln_reduce(KILN_REDUCE_ARGMAX, t, KILN_ALL_AXES, false, &y));
        ASSERT_OK(kiln_tensor_read(y, &idx, sizeof idx));
        ck_assert_int_eq(idx, 1);
        kiln_tensor_release(y);
        kiln_tensor_release(t);

        ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, &n4, ties, &t));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_ARGMAX, t, 0, false, &y));
        ASSERT_OK(kiln_tensor_read(y, &idx, sizeof idx));
        ck_assert_int_eq(idx, 0);
        kiln_tensor_release(y);
        kiln_tensor_release(t);

        ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, &n4, infs, &t));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, t, 0, false, &y));
        read_f32(y, &f, 1);
        ck_assert_msg(isinf(f) && f > 0, "sum with +inf gave %g", f);
        kiln_tensor_release(y);
        kiln_tensor_release(t);

        ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, &n4, neg, &t));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_MAX, t, 0, false, &y));
        read_f32(y, &f, 1);
        ck_assert_msg(isinf(f) && f < 0, "max of -inf gave %g", f);
        kiln_tensor_release(y);
        ASSERT_OK(kiln_reduce(KILN_REDUCE_ARGMAX, t, 0, false, &y));
        ASSERT_OK(kiln_tensor_read(y, &idx, sizeof idx));
        ck_assert_int_eq(idx, 0);
        kiln_tensor_release(y);
        kiln_tensor_release(t);
    }
}
END_TEST

/* kiln_logsumexp against a long double loop: every axis of [3, 4, 5] with and without keepdim
 * and all axes, f32, f64, f16 and bf16, rows with huge values (exp overflows without the shift);
 * then rows of -inf (-inf), with +inf (+inf) and with NaN (NaN), an empty axis (-inf), and its
 * errors (issue 20's add-an-op trial). */
START_TEST(test_logsumexp)
{
    static const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    const int64_t shape[3] = {3, 4, 5};
    double x[60];
    for (int i = 0; i < 60; i++)
        x[i] = (i % 7) * 0.75 - 2 + (i % 13 == 0 ? 80 : 0); /* a few exp(80+) */
    const int axes[] = {0, 1, 2, -1, KILN_ALL_AXES};
    for (int di = 0; di < ndevs; di++) {
        kiln_device *dev = devs[di];
        for (size_t k = 0; k < sizeof dts / sizeof *dts; k++) {
            kiln_dtype dt = dts[k];
            if (dt == KILN_F64 && !has_fp64(dev))
                continue;
            kiln_tensor *t = upload(dev, dt, 3, shape, x);
            double *xv = download(t); /* the values as the dtype holds them */
            for (size_t ai = 0; ai < 5; ai++)
                for (int keep = 0; keep < 2; keep++) {
                    int axis = axes[ai], a = axis == -1 ? 2 : axis;
                    kiln_tensor *y = NULL;
                    ASSERT_OK(kiln_logsumexp(t, axis, keep, &y));
                    int64_t outer = 1, n = 60, inner = 1;
                    if (axis != KILN_ALL_AXES) {
                        n = shape[a];
                        for (int d = 0; d < a; d++)
                            outer *= shape[d];
                        for (int d = a + 1; d < 3; d++)
                            inner *= shape[d];
                        ck_assert_int_eq(kiln_tensor_ndim(y), keep ? 3 : 2);
                    }
                    ck_assert_int_eq(kiln_tensor_numel(y), outer * inner);
                    double *got = download(y);
                    for (int64_t r = 0; r < outer * inner; r++) {
                        const double *row = xv + (r / inner) * n * inner + r % inner;
                        long double m = -INFINITY, s = 0;
                        for (int64_t j = 0; j < n; j++)
                            m = row[j * inner] > m ? row[j * inner] : m;
                        for (int64_t j = 0; j < n; j++)
                            s += expl(row[j * inner] - m);
                        double ref = (double)(m + logl(s));
                        double tol = (dt == KILN_F16    ? 2e-3
                                      : dt == KILN_BF16 ? 8e-3
                                      : dt == KILN_F32  ? 4e-6
                                                        : 1e-12) *
                                     (1 + fabs(ref));
                        ck_assert_msg(fabs(got[r] - ref) <= tol,
                                      "%s %s axis %d keep %d [%lld]: %.9g, want %.9g",
                                      kiln_device_spec(dev), kiln_dtype_name(dt), axis, keep,
                                      (long long)r, got[r], ref);
                    }
                    free(got);
                    kiln_tensor_release(y);
                }
            free(xv);
            kiln_tensor_release(t);
        }
        /* special rows: all -inf, one +inf, one NaN, ordinary */
        const int64_t s2[2] = {4, 3};
        const double sp[12] = {-INFINITY, -INFINITY, -INFINITY, 1, INFINITY, 2, 1, NAN, 3, 0, 0, 0};
        kiln_tensor *t = upload(dev, KILN_F32, 2, s2, sp), *y = NULL;
        ASSERT_OK(kiln_logsumexp(t, 1, false, &y));
        double *got = download(y);
        ck_assert_msg(isinf(got[0]) && got[0] < 0, "all -inf: %g", got[0]);
        ck_assert_msg(isinf(got[1]) && got[1] > 0, "with +inf: %g", got[1]);
        ck_assert_msg(isnan(got[2]), "with NaN: %g", got[2]);
        ck_assert_msg(fabs(got[3] - log(3.0)) < 1e-6, "zeros: %g", got[3]);
        free(got);
        kiln_tensor_release(y);
        kiln_tensor_release(t);
        /* an empty axis: -inf, as torch.logsumexp */
        const int64_t s0[2] = {2, 0};
        ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 2, s0, &t));
        ASSERT_OK(kiln_logsumexp(t, 1, false, &y));
        ck_assert_int_eq(kiln_tensor_numel(y), 2);
        got = download(y);
        ck_assert_msg(isinf(got[0]) && got[0] < 0 && isinf(got[1]), "empty: %g", got[0]);
        free(got);
        kiln_tensor_release(y);
        kiln_tensor_release(t);
        /* errors, each naming kiln_logsumexp, *out NULL */
        const int64_t n3 = 3;
        kiln_tensor *ti = NULL, *o = (kiln_tensor *)1;
        ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 1, &n3, &ti));
        ASSERT_FAILS(kiln_logsumexp(ti, 0, false, &o), KILN_ERR_UNSUPPORTED,
                     "kiln_logsumexp: x is i32");
        ck_assert_ptr_null(o);
        ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &n3, &t));
        ASSERT_FAILS(kiln_logsumexp(t, 1, false, &o), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_logsumexp: axis 1 is out of range");
        ASSERT_FAILS(kiln_logsumexp(t, 0, false, NULL), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_logsumexp: out is NULL");
        ASSERT_FAILS(kiln_logsumexp(NULL, 0, false, &o), KILN_ERR_INVALID_ARGUMENT,
                     "kiln_logsumexp");
        kiln_tensor_release(ti);
        kiln_tensor_release(t);
    }
}
END_TEST

/* Extremes of the integer ranges survive max/min; an i32 sum past 2^31 is exact in i64. */
START_TEST(test_integer_extremes)
{
    for (int i = 0; i < ndevs; i++) {
        const int64_t n = 3;
        const int64_t v64[] = {INT64_MIN, INT64_MIN, INT64_MIN};
        const int32_t v32[] = {INT32_MAX, INT32_MAX, INT32_MAX};
        kiln_tensor *t = NULL, *y = NULL;
        int64_t got;
        ASSERT_OK(kiln_tensor_from_host(devs[i], KILN_I64, 1, &n, v64, &t));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_MAX, t, 0, false, &y));
        ASSERT_OK(kiln_tensor_read(y, &got, sizeof got));
        ck_assert(got == INT64_MIN);
        kiln_tensor_release(y);
        kiln_tensor_release(t);
        ASSERT_OK(kiln_tensor_from_host(devs[i], KILN_I32, 1, &n, v32, &t));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, t, 0, false, &y));
        ck_assert_int_eq(kiln_tensor_dtype(y), KILN_I64);
        ASSERT_OK(kiln_tensor_read(y, &got, sizeof got));
        ck_assert(got == 3 * (int64_t)INT32_MAX);
        kiln_tensor_release(y);
        kiln_tensor_release(t);
    }
}
END_TEST

/* Zero-size input: sum gives 0, mean NaN, max/min/argmax of an empty axis are refused, and
 * reducing a non-empty axis of an empty tensor gives an empty result. */
START_TEST(test_empty)
{
    for (int i = 0; i < ndevs; i++) {
        const int64_t s0[] = {0}, s30[] = {3, 0};
        kiln_tensor *t = NULL, *y = NULL;
        float f[3];
        ASSERT_OK(kiln_tensor_empty(devs[i], KILN_F32, 1, s0, &t));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, t, KILN_ALL_AXES, false, &y));
        read_f32(y, f, 1);
        ck_assert(f[0] == 0);
        kiln_tensor_release(y);
        ASSERT_OK(kiln_reduce(KILN_REDUCE_MEAN, t, KILN_ALL_AXES, false, &y));
        read_f32(y, f, 1);
        ck_assert(isnan(f[0]));
        kiln_tensor_release(y);
        for (int op = KILN_REDUCE_MAX; op < KILN_REDUCE_OP_COUNT; op++) {
            y = (kiln_tensor *)1;
            ASSERT_FAILS(kiln_reduce((kiln_reduce_op)op, t, 0, false, &y),
                         KILN_ERR_INVALID_ARGUMENT, "empty");
            ck_assert_ptr_null(y);
        }
        kiln_tensor_release(t);

        ASSERT_OK(kiln_tensor_empty(devs[i], KILN_F32, 2, s30, &t));
        ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, t, 1, false, &y));
        read_f32(y, f, 3);
        ck_assert(f[0] == 0 && f[1] == 0 && f[2] == 0);
        kiln_tensor_release(y);
        ASSERT_OK(kiln_reduce(KILN_REDUCE_MAX, t, 0, true, &y));
        ck_assert_int_eq(kiln_tensor_numel(y), 0);
        ck_assert_int_eq(kiln_tensor_shape(y)[0], 1);
        ck_assert_int_eq(kiln_tensor_shape(y)[1], 0);
        kiln_tensor_release(y);
        ASSERT_FAILS(kiln_reduce(KILN_REDUCE_MIN, t, 1, false, &y), KILN_ERR_INVALID_ARGUMENT,
                     "[3, 0]");
        kiln_tensor_release(t);

        /* An empty axis under many results: 0 rows of 300 columns (column blocks), 300 rows of
         * length 0 (contiguous rows). */
        const int64_t s0c[] = {0, 300}, sr0[] = {300, 0};
        float *g = malloc(300 * sizeof(float));
        ck_assert_ptr_nonnull(g);
        for (int k = 0; k < 2; k++) {
            ASSERT_OK(kiln_tensor_empty(devs[i], KILN_F32, 2, k ? sr0 : s0c, &t));
            for (int op = KILN_REDUCE_SUM; op <= KILN_REDUCE_MEAN; op++) {
                ASSERT_OK(kiln_reduce((kiln_reduce_op)op, t, k, false, &y));
                read_f32(y, g, 300);
                for (int r = 0; r < 300; r++)
                    ck_assert_msg(op == KILN_REDUCE_SUM ? g[r] == 0 : isnan(g[r]),
                                  "%s of an empty axis %d: result %d is %g",
                                  op_name((kiln_reduce_op)op), k, r, (double)g[r]);
                kiln_tensor_release(y);
            }
            ASSERT_FAILS(kiln_reduce(KILN_REDUCE_ARGMAX, t, k, false, &y),
                         KILN_ERR_INVALID_ARGUMENT, "empty");
            kiln_tensor_release(t);
        }
        free(g);
    }
}
END_TEST

START_TEST(test_errors)
{
    const int64_t shape[] = {2, 3};
    kiln_tensor *t = NULL, *ti = NULL, *tu = NULL, *y = (kiln_tensor *)1;
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_F32, 2, shape, &t));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_I32, 2, shape, &ti));
    ASSERT_OK(kiln_tensor_zeros(devs[0], KILN_U8, 2, shape, &tu));
    ASSERT_FAILS(kiln_reduce(KILN_REDUCE_SUM, NULL, 0, false, &y), KILN_ERR_INVALID_ARGUMENT,
                 "NULL");
    ck_assert_ptr_null(y);
    ASSERT_FAILS(kiln_reduce(KILN_REDUCE_SUM, t, 0, false, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "out is NULL");
    ASSERT_FAILS(kiln_reduce(KILN_REDUCE_SUM, t, 2, false, &y), KILN_ERR_INVALID_ARGUMENT,
                 "axis 2 is out of range");
    ASSERT_FAILS(kiln_reduce(KILN_REDUCE_SUM, t, -3, false, &y), KILN_ERR_INVALID_ARGUMENT,
                 "[2, 3]");
    ASSERT_FAILS(kiln_reduce((kiln_reduce_op)99, t, 0, false, &y), KILN_ERR_INVALID_ARGUMENT,
                 "unknown op 99");
    ASSERT_FAILS(kiln_reduce(KILN_REDUCE_MEAN, ti, 0, false, &y), KILN_ERR_UNSUPPORTED,
                 "mean of i32");
    ASSERT_FAILS(kiln_reduce(KILN_REDUCE_MEAN, tu, 0, false, &y), KILN_ERR_UNSUPPORTED,
                 "mean of u8");
    ck_assert_ptr_null(y);
    kiln_tensor_release(t);
    kiln_tensor_release(ti);
    kiln_tensor_release(tu);
}
END_TEST

/* kiln_reduce_out writes into an existing tensor of the result's shape and dtype. */
START_TEST(test_reduce_out)
{
    static const int64_t shape[] = {7, 61}, s7[] = {7}, s6[] = {6}, s1[] = {1};
    for (int i = 0; i < ndevs; i++) {
        double x[7 * 61], ref[7], abs[7];
        fill_values(KILN_F32, x, 7 * 61);
        ref_reduce(KILN_REDUCE_SUM, x, 7, 61, 1, ref, abs);
        kiln_tensor *t = upload(devs[i], KILN_F32, 2, shape, x), *y = NULL, *bad = NULL;
        ASSERT_OK(kiln_tensor_empty(devs[i], KILN_F32, 1, s7, &y));
        ASSERT_OK(kiln_reduce_out(KILN_REDUCE_SUM, t, -1, false, y));
        double *got = download(y);
        for (int r = 0; r < 7; r++)
            ck_assert_msg(fabs(got[r] - ref[r]) <= ldexp(1, -20) * abs[r], "row %d: %g vs %g", r,
                          got[r], ref[r]);
        free(got);
        ASSERT_FAILS(kiln_reduce_out(KILN_REDUCE_ARGMAX, t, 1, false, y), KILN_ERR_DTYPE_MISMATCH,
                     "i64");
        ASSERT_OK(kiln_tensor_empty(devs[i], KILN_F32, 1, s6, &bad));
        ASSERT_FAILS(kiln_reduce_out(KILN_REDUCE_SUM, t, 1, false, bad), KILN_ERR_SHAPE_MISMATCH,
                     "[6]");
        ASSERT_FAILS(kiln_reduce_out(KILN_REDUCE_SUM, t, 1, true, y), KILN_ERR_SHAPE_MISMATCH,
                     "[7, 1]");
        ASSERT_FAILS(kiln_reduce_out(KILN_REDUCE_SUM, t, 1, false, NULL), KILN_ERR_INVALID_ARGUMENT,
                     "out");
        kiln_tensor_release(bad);
        ASSERT_OK(kiln_tensor_empty(devs[i], KILN_F32, 1, s1, &bad));
        ASSERT_FAILS(kiln_reduce_out(KILN_REDUCE_SUM, bad, 0, false, bad),
                     KILN_ERR_INVALID_ARGUMENT, "shares memory");
        kiln_tensor_release(bad);
        kiln_tensor_release(y);
        kiln_tensor_release(t);
    }
    kiln_device *d1 = NULL, *d0 = NULL;
    if (kiln_device_get("cpu:1", &d1) == KILN_OK && kiln_device_get("cpu:0", &d0) == KILN_OK) {
        kiln_tensor *a = NULL, *b = NULL;
        ASSERT_OK(kiln_tensor_zeros(d0, KILN_F32, 2, shape, &a));
        ASSERT_OK(kiln_tensor_empty(d1, KILN_F32, 1, s7, &b));
        ASSERT_FAILS(kiln_reduce_out(KILN_REDUCE_SUM, a, 1, false, b), KILN_ERR_DEVICE_MISMATCH,
                     "cpu:1");
        kiln_tensor_release(a);
        kiln_tensor_release(b);
    }
}
END_TEST

Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *tc = tcase_create("values");
    tcase_add_unchecked_fixture(tc, setup_devices, teardown_devices);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_ops_dtypes_axes, KILN_REDUCE_SUM, KILN_REDUCE_ARGMAX + 1);
    tcase_add_loop_test(tc, test_workgroup_path, KILN_REDUCE_SUM, KILN_REDUCE_ARGMAX + 1);
    tcase_add_loop_test(tc, test_vector_and_chunked_paths, KILN_REDUCE_SUM, KILN_REDUCE_ARGMAX + 1);
    tcase_add_test(tc, test_lanes_ties_nan);
    tcase_add_test(tc, test_large_all_reduce);
    tcase_add_test(tc, test_many_rows);
    tcase_add_test(tc, test_big_sum_accuracy);
    tcase_add_test(tc, test_special_values);
    tcase_add_test(tc, test_logsumexp);
    tcase_add_test(tc, test_integer_extremes);
    tcase_add_test(tc, test_empty);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("errors");
    tcase_add_unchecked_fixture(te, setup_devices, teardown_devices);
    tcase_add_test(te, test_errors);
    tcase_add_test(te, test_reduce_out);
    suite_add_tcase(s, te);
    return s;
}
