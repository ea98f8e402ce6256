/* test-creation.c - kiln_fill, kiln_full, kiln_ones and kiln_arange (with the _i64 forms and
 * kiln_arange_out) on every device and dtype, against known values and plain-C loops. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "testutil.h"

static kiln_device *dev; /* "auto": gpu:0 (Oclgrind) in the -oclgrind configuration */

static void setup(void)
{
    setup_devices();
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_OK);
}

/* Value, and what each dtype stores for it (f16 bits checked separately below). */
typedef struct fcase {
    double value;
    double want[KILN_DTYPE_COUNT]; /* f32 f64 f16 i32 i64 u8 bf16 */
} fcase;

static const fcase fcases[] = {
    {1.0, {1, 1, 1, 1, 1, 1, 1}},
    {-2.5, {-2.5, -2.5, -2.5, -2, -2, -1, -2.5}}, /* u8 case skipped: out of range */
    {3.9, {3.9f, 3.9, 3.900390625, 3, 3, 3, 3.90625}},
    {0.1, {0.1f, 0.1, 0.0999755859375, 0, 0, 0, 0.10009765625}},
    {200.0, {200, 200, 200, 200, 200, 200, 200}},
};

/* full/fill on every device and dtype: floats convert to nearest, integers truncate toward
 * zero (documented). */
START_TEST(test_full_every_dtype)
{
    int64_t shape[3] = {3, 5, 7};
    for (int di = 0; di < kiln_device_count(KILN_DEVICE_ALL); di++) {
        kiln_device *d = kiln_device_at(di);
        for (int dt = 0; dt < KILN_DTYPE_COUNT; dt++) {
            for (size_t c = 0; c < sizeof fcases / sizeof fcases[0]; c++) {
                if (dt == KILN_U8 && fcases[c].value < 0)
                    continue;
                kiln_tensor *t = NULL;
                ck_assert_int_eq(kiln_full(d, (kiln_dtype)dt, 3, shape, fcases[c].value, &t),
                                 KILN_OK);
                void *h = read_host(t);
                for (int64_t i = 0; i < 105; i++)
                    ck_assert_msg(load_value((kiln_dtype)dt, h, i) == fcases[c].want[dt],
                                  "%s %s full(%g)[%lld] = %.17g", kiln_device_spec(d),
                                  kiln_dtype_name((kiln_dtype)dt), fcases[c].value, (long long)i,
                                  load_value((kiln_dtype)dt, h, i));
                free(h);
                kiln_tensor_release(t);
            }
        }
    }
}
END_TEST

START_TEST(test_ones_and_fill)
{
    int64_t n = 1000;
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_ones(dev, KILN_F16, 1, &n, &t), KILN_OK);
    uint16_t *h = read_host(t);
    for (int i = 0; i < n; i++)
        ck_assert_uint_eq(h[i], 0x3c00); /* 1.0 in binary16 */
    free(h);
    /* fill overwrites an existing tensor; 65520 rounds to f16 infinity, NaN stays NaN */
    ck_assert_int_eq(kiln_fill(t, 65520.0), KILN_OK);
    h = read_host(t);
    ck_assert_uint_eq(h[0], 0x7c00);
    ck_assert_uint_eq(h[999], 0x7c00);
    free(h);
    ck_assert_int_eq(kiln_fill(t, -0.0), KILN_OK);
    h = read_host(t);
    ck_assert_uint_eq(h[7], 0x8000);
    free(h);
    kiln_tensor_release(t);
    ck_assert_int_eq(kiln_ones(dev, KILN_I64, 1, &n, &t), KILN_OK);
    ck_assert_int_eq(kiln_fill(t, -9007199254740992.0), KILN_OK); /* -2^53, exact */
    int64_t *l = read_host(t);
    ck_assert_int_eq(l[500], -9007199254740992LL);
    free(l);
    kiln_tensor_release(t);
    ck_assert_int_eq(kiln_full(dev, KILN_F32, 1, &n, NAN, &t), KILN_OK);
    float *f = read_host(t);
    ck_assert(isnan(f[3]));
    free(f);
    kiln_tensor_release(t);
}
END_TEST

/* full_i64/fill_i64: exact integers past 2^53 on i64, to nearest on floats, the range of
 * i32/u8 checked (values computed here in C). */
START_TEST(test_full_i64)
{
    const int64_t big[] = {INT64_MAX - 1, INT64_MIN, (1LL << 53) + 1, -(1LL << 53) - 1, 0};
    int64_t shape[2] = {3, 7};
    for (int di = 0; di < kiln_device_count(KILN_DEVICE_ALL); di++) {
        kiln_device *d = kiln_device_at(di);
        for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
            kiln_tensor *t = NULL;
            ASSERT_OK(kiln_full_i64(d, KILN_I64, 2, shape, big[c], &t));
            int64_t *h = read_host(t);
            for (int i = 0; i < 21; i++)
                ck_assert_msg(h[i] == big[c], "%s full_i64(%lld)[%d] = %lld", kiln_device_spec(d),
                              (long long)big[c], i, (long long)h[i]);
            free(h);
            ASSERT_OK(kiln_fill_i64(t, big[(c + 1) % 5]));
            h = read_host(t);
            ck_assert_int_eq(h[20], big[(c + 1) % 5]);
            free(h);
            kiln_tensor_release(t);
        }
        /* floating dtypes: rounded to nearest (2^53 + 1 -> 2^53 in f64, 2^24 + 1 -> 2^24 in
         * f32, 2049 -> 2048 in f16: ties to even) */
        kiln_tensor *t = NULL;
        if (has_fp64(d)) {
            ASSERT_OK(kiln_full_i64(d, KILN_F64, 2, shape, (1LL << 53) + 1, &t));
            double *h = read_host(t);
            ck_assert(h[5] == (double)((1LL << 53) + 1) && h[5] == 9007199254740992.0);
            free(h);
            kiln_tensor_release(t);
        }
        ASSERT_OK(kiln_full_i64(d, KILN_F32, 2, shape, INT64_MAX, &t));
        float *f = read_host(t);
        ck_assert(f[0] == (float)INT64_MAX && f[20] == 9223372036854775808.0f);
        free(f);
        ASSERT_OK(kiln_fill_i64(t, (1LL << 24) + 1));
        f = read_host(t);
        ck_assert(f[3] == 16777216.0f);
        free(f);
        kiln_tensor_release(t);
        ASSERT_OK(kiln_full_i64(d, KILN_F16, 2, shape, 2049, &t));
        uint16_t *hh = read_host(t);
        ck_assert_uint_eq(hh[4], 0x6800); /* 2048 */
        free(hh);
        kiln_tensor_release(t);
        /* the ends of i32 and u8 */
        ASSERT_OK(kiln_full_i64(d, KILN_I32, 2, shape, INT32_MIN, &t));
        int32_t *i32 = read_host(t);
        ck_assert_int_eq(i32[6], INT32_MIN);
        free(i32);
        ASSERT_OK(kiln_fill_i64(t, INT32_MAX));
        i32 = read_host(t);
        ck_assert_int_eq(i32[6], INT32_MAX);
        free(i32);
        kiln_tensor_release(t);
        ASSERT_OK(kiln_full_i64(d, KILN_U8, 2, shape, 255, &t));
        uint8_t *u8 = read_host(t);
        ck_assert_uint_eq(u8[9], 255);
        free(u8);
        kiln_tensor_release(t);
    }
}
END_TEST

START_TEST(test_full_i64_errors)
{
    int64_t n = 4;
    kiln_tensor *t = (kiln_tensor *)&n;
    ASSERT_FAILS(kiln_full_i64(dev, KILN_I32, 1, &n, (int64_t)INT32_MAX + 1, &t),
                 KILN_ERR_INVALID_ARGUMENT, "2147483648 does not fit dtype i32");
    ck_assert_ptr_null(t);
    ASSERT_FAILS(kiln_full_i64(dev, KILN_I32, 1, &n, (int64_t)INT32_MIN - 1, &t),
                 KILN_ERR_INVALID_ARGUMENT, "i32");
    ASSERT_FAILS(kiln_full_i64(dev, KILN_U8, 1, &n, 256, &t), KILN_ERR_INVALID_ARGUMENT, "u8");
    ASSERT_FAILS(kiln_full_i64(dev, KILN_U8, 1, &n, -1, &t), KILN_ERR_INVALID_ARGUMENT, "u8");
    ASSERT_FAILS(kiln_full_i64(NULL, KILN_I64, 1, &n, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_full_i64");
    ASSERT_FAILS(kiln_full_i64(dev, KILN_I64, 1, &n, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "out is NULL");
    ASSERT_FAILS(kiln_fill_i64(NULL, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_fill_i64");
    /* a failed fill leaves the tensor as it was */
    ASSERT_OK(kiln_full_i64(dev, KILN_U8, 1, &n, 7, &t));
    ASSERT_FAILS(kiln_fill_i64(t, 300), KILN_ERR_INVALID_ARGUMENT, "300 does not fit dtype u8");
    uint8_t *h = read_host(t);
    for (int i = 0; i < n; i++)
        ck_assert_uint_eq(h[i], 7);
    free(h);
    kiln_tensor_release(t);
}
END_TEST

/* arange vs a C loop: count ceil((end - start) / step); integers exact; floats computed as
 * start + i * step in the compute type: within 1 ulp (f32/f64) or half an f16 ulp plus 1 f32
 * ulp of |start| + |i * step|. */
static void check_arange(kiln_device *d, kiln_dtype dt, double start, double end, double step)
{
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_arange(d, dt, start, end, step, &t), KILN_OK);
    int64_t n = (int64_t)ceil((end - start) / step);
    ck_assert_int_eq(kiln_tensor_ndim(t), 1);
    ck_assert_int_eq(kiln_tensor_numel(t), n);
    if (n == 0) {
        kiln_tensor_release(t);
        return;
    }
    void *h = read_host(t);
    double eps = dt == KILN_F64 ? DBL_EPSILON : FLT_EPSILON;
    for (int64_t i = 0; i < n; i++) {
        double ref = start + (double)i * step, got = load_value(dt, h, i);
        double tol = dt == KILN_I32 || dt == KILN_I64 || dt == KILN_U8
                         ? 0
                         : 2 * eps * (fabs(start) + fabs((double)i * step));
        if (dt == KILN_F16)
            tol += ldexp(fabs(ref), -11);
        ck_assert_msg(fabs(got - ref) <= tol, "%s arange(%g, %g, %g)[%lld] = %.17g, want %.17g",
                      kiln_dtype_name(dt), start, end, step, (long long)i, got, ref);
    }
    free(h);
    kiln_tensor_release(t);
}

START_TEST(test_arange)
{
    bool sim = strstr(kiln_device_name(dev), "Oclgrind") != NULL;
    for (int di = 0; di < kiln_device_count(KILN_DEVICE_ALL); di++) {
        kiln_device *d = kiln_device_at(di);
        check_arange(d, KILN_F32, 0, sim ? 300 : 100000, 1);
        check_arange(d, KILN_F32, 1, 0, -0.25);
        check_arange(d, KILN_F32, 0, 1, 0.1);
        check_arange(d, KILN_F32, -3.5, 7.25, 0.3);
        check_arange(d, KILN_I32, 0, 10, 3);
        check_arange(d, KILN_I64, 5, -5, -2);
        check_arange(d, KILN_U8, 0, 256, 1);
        check_arange(d, KILN_U8, 10, 0, -3); /* u8 with a negative step */
        check_arange(d, KILN_F16, 0, 2048, 1);
        check_arange(d, KILN_F32, 0, 0, 1); /* empty */
        if (has_fp64(d))
            check_arange(d, KILN_F64, -1, 1, 1.0 / 1024);
    }
}
END_TEST

/* The C loop of arange_i64: start, start + step, ... while short of end, stopping before an
 * int64_t overflow. */
static int64_t ref_arange_i64(int64_t start, int64_t end, int64_t step, int64_t *v, int64_t max)
{
    int64_t n = 0;
    for (int64_t x = start; (step > 0 ? x < end : x > end) && n < max;) {
        v[n++] = x;
        if (step > 0 ? x > INT64_MAX - step : x < INT64_MIN - step)
            break;
        x += step;
    }
    return n;
}

/* arange_i64 on an integer dtype: element for element equal to the C loop. */
static void check_arange_i64(kiln_device *d, kiln_dtype dt, int64_t start, int64_t end,
                             int64_t step)
{
    int64_t want[64];
    int64_t n = ref_arange_i64(start, end, step, want, 64);
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_arange_i64(d, dt, start, end, step, &t));
    ck_assert_int_eq(kiln_tensor_numel(t), n);
    void *h = read_host(t);
    for (int64_t i = 0; i < n; i++) {
        int64_t got = dt == KILN_I64   ? ((int64_t *)h)[i]
                      : dt == KILN_I32 ? ((int32_t *)h)[i]
                                       : ((uint8_t *)h)[i];
        ck_assert_msg(got == want[i], "%s arange_i64(%lld, %lld, %lld)[%lld] = %lld, want %lld",
                      kiln_dtype_name(dt), (long long)start, (long long)end, (long long)step,
                      (long long)i, (long long)got, (long long)want[i]);
    }
    free(h);
    kiln_tensor_release(t);
}

START_TEST(test_arange_i64)
{
    for (int di = 0; di < kiln_device_count(KILN_DEVICE_ALL); di++) {
        kiln_device *d = kiln_device_at(di);
        check_arange_i64(d, KILN_I64, INT64_MAX - 10, INT64_MAX, 3);
        check_arange_i64(d, KILN_I64, INT64_MIN + 10, INT64_MIN, -4);
        check_arange_i64(d, KILN_I64, (1LL << 53) + 1, (1LL << 53) + 20, 2);
        check_arange_i64(d, KILN_I64, INT64_MIN, INT64_MAX, INT64_MAX); /* 3 elements */
        check_arange_i64(d, KILN_I64, 5, 5, 1);                         /* empty */
        check_arange_i64(d, KILN_I32, INT32_MIN, INT32_MAX, 1LL << 31); /* step beyond i32 */
        check_arange_i64(d, KILN_I32, INT32_MAX - 5, INT32_MAX, 2);
        check_arange_i64(d, KILN_U8, 250, 256, 1);
        check_arange_i64(d, KILN_U8, 10, -1, -3); /* a negative step on u8 */
        /* floating dtypes: start and step rounded to nearest, exact here */
        kiln_tensor *t = NULL;
        ASSERT_OK(kiln_arange_i64(d, KILN_F32, -5, 5, 2, &t));
        float *f = read_host(t);
        ck_assert_int_eq(kiln_tensor_numel(t), 5);
        for (int i = 0; i < 5; i++)
            ck_assert(f[i] == (float)(-5 + 2 * i));
        free(f);
        kiln_tensor_release(t);
        if (has_fp64(d)) {
            ASSERT_OK(kiln_arange_i64(d, KILN_F64, 1LL << 53, (1LL << 53) + 8, 2, &t));
            double *g = read_host(t);
            ck_assert_int_eq(kiln_tensor_numel(t), 4);
            for (int i = 0; i < 4; i++)
                ck_assert(g[i] == (double)((1LL << 53) + 2 * i));
            free(g);
            kiln_tensor_release(t);
        }
    }
}
END_TEST

/* arange_out: start + i * step into every element of an existing 1-D tensor, in its dtype. */
START_TEST(test_arange_out)
{
    for (int di = 0; di < kiln_device_count(KILN_DEVICE_ALL); di++) {
        kiln_device *d = kiln_device_at(di);
        int64_t n = 9;
        kiln_tensor *t = NULL;
        ASSERT_OK(kiln_tensor_empty(d, KILN_F32, 1, &n, &t));
        ASSERT_OK(kiln_arange_out(1.5, -0.25, t));
        float *f = read_host(t);
        for (int i = 0; i < n; i++)
            ck_assert(f[i] == 1.5f - 0.25f * (float)i);
        free(f);
        kiln_tensor_release(t);
        ASSERT_OK(kiln_tensor_empty(d, KILN_I64, 1, &n, &t));
        ASSERT_OK(kiln_arange_out(9007199254740992.0, 2.0, t)); /* 2^53 + 2i, exact */
        int64_t *l = read_host(t);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(l[i], (1LL << 53) + 2 * i);
        free(l);
        kiln_tensor_release(t);
        ASSERT_OK(kiln_tensor_empty(d, KILN_U8, 1, &n, &t));
        ASSERT_OK(kiln_arange_out(16, -2, t));
        uint8_t *u = read_host(t);
        for (int i = 0; i < n; i++)
            ck_assert_uint_eq(u[i], 16 - 2 * i);
        free(u);
        kiln_tensor_release(t);
    }
}
END_TEST

/* arange f32 is start + i * step with two roundings, bit for bit: the kernel must not contract
 * it to an fma (#pragma OPENCL FP_CONTRACT OFF in creation.cl). NVIDIA's compiler fuses by
 * default; so does PoCL's LLVM on a CPU with FMA, which this test then catches. */
START_TEST(test_arange_not_fused)
{
    const float start = 0.1f, step = 0.3f;
    enum { N = 1000 };
    int fused_differs = 0;
    for (int i = 0; i < N; i++) {
        volatile float prod = (float)i * step;
        fused_differs += fmaf((float)i, step, start) != start + prod;
    }
    ck_assert_int_gt(fused_differs, 0); /* the sizes below can tell the two apart */
    for (int di = 0; di < kiln_device_count(KILN_DEVICE_ALL); di++) {
        kiln_device *d = kiln_device_at(di);
        kiln_tensor *t = NULL;
        ASSERT_OK(kiln_arange(d, KILN_F32, start, start + N * (double)step - step / 2, step, &t));
        ck_assert_int_eq(kiln_tensor_numel(t), N);
        float got[N];
        ASSERT_OK(kiln_tensor_read(t, got, sizeof got));
        for (int i = 0; i < N; i++) {
            volatile float prod = (float)i * step;
            float want = start + prod;
            ck_assert_msg(memcmp(&got[i], &want, sizeof want) == 0,
                          "%s: arange[%d] = %.9g, want %.9g (start + i * step, not fused)",
                          kiln_device_spec(d), i, got[i], want);
        }
        kiln_tensor_release(t);
    }
}
END_TEST

START_TEST(test_arange_i64_errors)
{
    kiln_tensor *t = (kiln_tensor *)&dev;
    ASSERT_FAILS(kiln_arange_i64(dev, KILN_I64, 0, 10, 0, &t), KILN_ERR_INVALID_ARGUMENT, "zero");
    ck_assert_ptr_null(t);
    ASSERT_FAILS(kiln_arange_i64(dev, KILN_I64, 0, 10, -1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "wrong sign");
    ASSERT_FAILS(kiln_arange_i64(dev, KILN_I32, INT32_MAX - 1, (int64_t)INT32_MAX + 5, 1, &t),
                 KILN_ERR_INVALID_ARGUMENT, "do not fit dtype i32");
    ASSERT_FAILS(kiln_arange_i64(dev, KILN_U8, 0, 300, 1, &t), KILN_ERR_INVALID_ARGUMENT, "u8");
    ASSERT_FAILS(kiln_arange_i64(dev, KILN_U8, 5, -3, -1, &t), KILN_ERR_INVALID_ARGUMENT, "u8");
    ASSERT_FAILS(kiln_arange_i64(dev, KILN_I64, INT64_MIN, INT64_MAX, 1, &t),
                 KILN_ERR_INVALID_ARGUMENT, "too many");
    ASSERT_FAILS(kiln_arange_i64(NULL, KILN_I64, 0, 1, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_arange_i64");
    ASSERT_FAILS(kiln_arange_i64(dev, KILN_I64, 0, 1, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "out is NULL");
    ASSERT_FAILS(kiln_arange_i64(dev, (kiln_dtype)9, 0, 1, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "dtype");
    ck_assert_ptr_null(t);

    /* arange_out: every failure leaves out as it was */
    int64_t shape[2] = {2, 3}, n = 6;
    kiln_tensor *m = NULL;
    ASSERT_OK(kiln_full(dev, KILN_U8, 1, &n, 7, &t));
    ASSERT_OK(kiln_full(dev, KILN_F32, 2, shape, 7, &m));
    ASSERT_FAILS(kiln_arange_out(0, 1, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_arange_out(0, 1, m), KILN_ERR_SHAPE_MISMATCH, "[2, 3]");
    ASSERT_FAILS(kiln_arange_out(0, 0, t), KILN_ERR_INVALID_ARGUMENT, "nonzero");
    ASSERT_FAILS(kiln_arange_out(0, NAN, t), KILN_ERR_INVALID_ARGUMENT, "finite");
    ASSERT_FAILS(kiln_arange_out(0, 0.5, t), KILN_ERR_INVALID_ARGUMENT, "integral");
    ASSERT_FAILS(kiln_arange_out(3, -1, t), KILN_ERR_INVALID_ARGUMENT, "u8");  /* 3 .. -2 */
    ASSERT_FAILS(kiln_arange_out(251, 1, t), KILN_ERR_INVALID_ARGUMENT, "u8"); /* .. 256 */
    uint8_t *h = read_host(t);
    for (int i = 0; i < n; i++)
        ck_assert_uint_eq(h[i], 7);
    free(h);
    kiln_tensor_release(t);
    kiln_tensor_release(m);
}
END_TEST

START_TEST(test_zero_size)
{
    int64_t shape[2] = {4, 0};
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_full(dev, KILN_F32, 2, shape, 3.0, &t), KILN_OK);
    ck_assert_int_eq(kiln_tensor_numel(t), 0);
    ck_assert_int_eq(kiln_fill(t, 1.0), KILN_OK);
    kiln_tensor_release(t);
    ck_assert_int_eq(kiln_ones(dev, KILN_U8, 2, shape, &t), KILN_OK);
    kiln_tensor_release(t);
}
END_TEST

START_TEST(test_errors)
{
    int64_t n = 4;
    kiln_tensor *t = (kiln_tensor *)&n;
    ASSERT_FAILS(kiln_full(NULL, KILN_F32, 1, &n, 1, &t), KILN_ERR_INVALID_ARGUMENT, "kiln_full");
    ck_assert_ptr_null(t);
    ASSERT_FAILS(kiln_full(dev, KILN_F32, 1, &n, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "out is NULL");
    ASSERT_FAILS(kiln_full(dev, KILN_U8, 1, &n, 256, &t), KILN_ERR_INVALID_ARGUMENT,
                 "does not fit");
    ASSERT_FAILS(kiln_full(dev, KILN_I32, 1, &n, NAN, &t), KILN_ERR_INVALID_ARGUMENT, "i32");
    ASSERT_FAILS(kiln_ones(dev, (kiln_dtype)9, 1, &n, &t), KILN_ERR_INVALID_ARGUMENT, "kiln_ones");
    ASSERT_FAILS(kiln_ones(dev, KILN_F32, -1, &n, &t), KILN_ERR_INVALID_ARGUMENT, "kiln_ones");
    ASSERT_FAILS(kiln_fill(NULL, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_fill");
    ASSERT_FAILS(kiln_arange(dev, KILN_F32, 0, 10, 0, &t), KILN_ERR_INVALID_ARGUMENT, "zero");
    ASSERT_FAILS(kiln_arange(dev, KILN_F32, 0, 10, -1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "wrong sign");
    ASSERT_FAILS(kiln_arange(dev, KILN_F32, 10, 0, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "negative step");
    ASSERT_FAILS(kiln_arange(dev, KILN_I32, 0, 1, 0.1, &t), KILN_ERR_INVALID_ARGUMENT, "integral");
    ASSERT_FAILS(kiln_arange(dev, KILN_F32, 0, INFINITY, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "finite");
    ASSERT_FAILS(kiln_arange(NULL, KILN_F32, 0, 1, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_arange");
    ASSERT_FAILS(kiln_arange(dev, KILN_F32, 0, 1, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "out is NULL");
    if (!has_fp64(dev))
        ASSERT_FAILS(kiln_arange(dev, KILN_F64, 0, 1, 0.5, &t), KILN_ERR_UNSUPPORTED, "fp64");
    ck_assert_ptr_null(t);
}
END_TEST

Suite *creation_suite(void)
{
    Suite *s = suite_create("creation");
    TCase *tc = tcase_create("creation");
    tcase_add_unchecked_fixture(tc, setup, teardown_devices);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_full_every_dtype);
    tcase_add_test(tc, test_ones_and_fill);
    tcase_add_test(tc, test_arange);
    tcase_add_test(tc, test_full_i64);
    tcase_add_test(tc, test_full_i64_errors);
    tcase_add_test(tc, test_arange_i64);
    tcase_add_test(tc, test_arange_out);
    tcase_add_test(tc, test_arange_i64_errors);
    tcase_add_test(tc, test_arange_not_fused);
    tcase_add_test(tc, test_zero_size);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return s;
}
