/* test-random.c - kiln_rand_uniform/normal against a plain-C Philox4x32-10 reference:
 * published known-answer vectors, bit-identical output on every device, and statistics. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "lib/ops/random.h"
#include "testutil.h"

#include <pthread.h>

/* ---- reference: Philox4x32-10 (Salmon et al., Random123) in plain C ---------------------- */

static void philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1, n3 = (uint32_t)p0;
        c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
    }
    memcpy(out, c, sizeof c);
}

static void philox_at(int64_t i, uint64_t seed, uint32_t out[4])
{
    uint32_t ctr[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    philox(ctr, key, out);
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The documented f32 algorithm of lib/kernels/random.cl, operation for operation (C11 with
 * FLT_EVAL_METHOD 0 and no contraction evaluates these exactly as IEEE single). */
static float ref_log(float x)
{
    uint32_t b = f2u(x);
    int e = (int)((b >> 23) & 0xffu) - 127;
    float m = u2f((b & 0x7fffffu) | 0x3f800000u);
    if (m > 1.41421356f) {
        m = m * 0.5f;
        e = e + 1;
    }
    float d = m + 1.0f;
    float r = 1.0f - 0.24264069f * d;
    r = r * (2.0f - d * r);
    r = r * (2.0f - d * r);
    r = r * (2.0f - d * r);
    float s = (m - 1.0f) * r;
    float s2 = s * s;
    float p = 0.09090909f;
    p = p * s2 + 0.11111111f;
    p = p * s2 + 0.14285715f;
    p = p * s2 + 0.2f;
    p = p * s2 + 0.33333334f;
    p = p * s2 + 1.0f;
    float fe = (float)e;
    return fe * 0.693145751953125f + (fe * 1.42860677e-06f + (s + s) * p);
}

static float ref_sqrt(float x)
{
    if (x <= 0.0f)
        return 0.0f;
    float y = u2f(0x5f3759dfu - (f2u(x) >> 1));
    y = y * (1.5f - 0.5f * x * y * y);
    y = y * (1.5f - 0.5f * x * y * y);
    y = y * (1.5f - 0.5f * x * y * y);
    return x * y;
}

static float ref_cos2pi(float u)
{
    float t = u * 4.0f;
    int q = (int)t;
    float th = (t - (float)q) * 1.57079633f;
    float t2 = th * th;
    float c = -1.14707456e-11f;
    c = c * t2 + 2.08767570e-09f;
    c = c * t2 - 2.75573192e-07f;
    c = c * t2 + 2.48015873e-05f;
    c = c * t2 - 1.38888889e-03f;
    c = c * t2 + 4.16666667e-02f;
    c = c * t2 - 0.5f;
    c = c * t2 + 1.0f;
    float s = 7.64716373e-13f;
    s = s * t2 - 1.60590438e-10f;
    s = s * t2 + 2.50521084e-08f;
    s = s * t2 - 2.75573192e-06f;
    s = s * t2 + 1.98412698e-04f;
    s = s * t2 - 8.33333333e-03f;
    s = s * t2 + 1.66666667e-01f;
    s = s * t2 - 1.0f;
    s = s * th;
    return q == 0 ? c : q == 1 ? s : q == 2 ? -c : -s;
}

static float ref_uniform(int64_t i, uint64_t seed, float low, float high)
{
    uint32_t x[4];
    philox_at(i, seed, x);
    float v = low + (high - low) * ((float)(x[0] >> 8) * 5.9604645e-08f);
    return v >= high ? nextafterf(high, low) : v;
}

static float ref_normal_parts(int64_t i, uint64_t seed, double *u1, double *u2)
{
    uint32_t x[4];
    philox_at(i, seed, x);
    float f1 = (float)((x[0] >> 8) + 1u) * 5.9604645e-08f;
    float f2 = (float)(x[1] >> 8) * 5.9604645e-08f;
    *u1 = f1;
    *u2 = f2;
    return ref_sqrt(-2.0f * ref_log(f1)) * ref_cos2pi(f2);
}

static float ref_normal(int64_t i, uint64_t seed, float mean, float stddev)
{
    double u1, u2;
    return mean + stddev * ref_normal_parts(i, seed, &u1, &u2);
}

/* ---- fixtures ----------------------------------------------------------------------------- */

static kiln_device *dev; /* "auto": Oclgrind's gpu:0 in the -oclgrind configuration */
static int64_t small_n;  /* sizes that Oclgrind simulates quickly */

static void setup(void)
{
    setup_devices();
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_OK);
    small_n = kiln_device_count(KILN_DEVICE_GPU) > 0 ? 300 : 4099;
}

/* ---- tests --------------------------------------------------------------------------------- */

/* Random123's kat_vectors for philox4x32_10; checks the C reference itself. */
START_TEST(test_philox_kat)
{
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        philox(kat[v], kat[v] + 4, out);
        for (int w = 0; w < 4; w++)
            ck_assert_msg(out[w] == kat[v][6 + w], "vector %d word %d: %08x, expected %08x", v, w,
                          out[w], kat[v][6 + w]);
    }
}
END_TEST

/* The reference's f32 log/sqrt/cos against libm: the algorithm is accurate, not just
 * reproducible. Bounds: 4e-7 relative for sqrt, 1e-6 absolute for log and cos. */
START_TEST(test_reference_math)
{
    double worst_log = 0, worst_sqrt = 0, worst_cos = 0;
    for (uint32_t k = 0; k < (1u << 24); k += 997) {
        float u = (float)(k + 1) * 5.9604645e-08f;
        worst_log = fmax(worst_log, fabs(ref_log(u) - log((double)u)));
        float x = -2.0f * ref_log(u);
        if (x > 0)
            worst_sqrt = fmax(worst_sqrt, fabs(ref_sqrt(x) - sqrt((double)x)) / sqrt((double)x));
        float c = (float)k * 5.9604645e-08f;
        worst_cos = fmax(worst_cos, fabs(ref_cos2pi(c) - cos(2 * M_PI * (double)c)));
    }
    ck_assert_msg(worst_log < 1e-6, "log error %g", worst_log);
    ck_assert_msg(worst_sqrt < 4e-7, "sqrt relative error %g", worst_sqrt);
    ck_assert_msg(worst_cos < 1e-6, "cos error %g", worst_cos);
}
END_TEST

static void check_uniform_on(kiln_device *d, int64_t n, uint64_t seed, float low, float high)
{
    kiln_tensor *t = NULL;
    int64_t shape[2] = {n / 3, 3};
    ck_assert_int_eq(kiln_rand_uniform(d, KILN_F32, 2, shape, seed, low, high, &t), KILN_OK);
    float *h = read_host(t);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) {
        float want = ref_uniform(i, seed, low, high);
        ck_assert_msg(f2u(h[i]) == f2u(want), "%s element %lld: %.9g, reference %.9g",
                      kiln_device_spec(d), (long long)i, h[i], want);
        ck_assert(h[i] >= low && h[i] < high);
    }
    free(h);
    kiln_tensor_release(t);
}

static void check_normal_on(kiln_device *d, int64_t n, uint64_t seed, float mean, float sd)
{
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_rand_normal(d, KILN_F32, 1, &n, seed, mean, sd, &t), KILN_OK);
    float *h = read_host(t);
    for (int64_t i = 0; i < n; i++) {
        float want = ref_normal(i, seed, mean, sd);
        ck_assert_msg(f2u(h[i]) == f2u(want), "%s element %lld: %.9g, reference %.9g",
                      kiln_device_spec(d), (long long)i, h[i], want);
    }
    free(h);
    kiln_tensor_release(t);
}

/* Bit-identical to the C reference on every device there is (cpu:0 and cpu:1 in -2dev, gpu:0
 * Oclgrind and cpu:0 in -oclgrind), so devices agree with each other bit for bit. */
START_TEST(test_bit_identical_every_device)
{
    int count = kiln_device_count(KILN_DEVICE_ALL);
    ck_assert_int_ge(count, 1);
    for (int i = 0; i < count; i++) {
        kiln_device *d = kiln_device_at(i);
        check_uniform_on(d, small_n, 42, -2.0f, 3.0f);
        check_uniform_on(d, small_n, 0xdeadbeefcafef00dull, 0.0f, 1.0f);
        check_normal_on(d, small_n, 7, 0.0f, 1.0f);
        check_normal_on(d, small_n, 0xffffffff00000001ull, 1.5f, 0.25f);
    }
}
END_TEST

/* Element i uses counter i: a prefix of a longer tensor, whatever the shape. */
START_TEST(test_counter_per_element)
{
    int64_t n = small_n, shape[3] = {2, 5, 7};
    kiln_tensor *a = NULL, *b = NULL;
    ck_assert_int_eq(kiln_rand_normal(dev, KILN_F32, 1, &n, 99, 0, 1, &a), KILN_OK);
    ck_assert_int_eq(kiln_rand_normal(dev, KILN_F32, 3, shape, 99, 0, 1, &b), KILN_OK);
    float *ha = read_host(a), *hb = read_host(b);
    ck_assert_int_eq(memcmp(ha, hb, 70 * sizeof(float)), 0);
    free(ha);
    free(hb);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    /* another seed gives other numbers */
    ck_assert_float_ne(ref_uniform(0, 1, 0, 1), ref_uniform(0, 2, 0, 1));
}
END_TEST

/* f64 and f16 tensors hold the f32 numbers converted (exactly for f64, rounded to nearest
 * even for f16). */
START_TEST(test_other_float_dtypes)
{
    int64_t n = 257;
    kiln_tensor *t = NULL;
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(dev, &info), KILN_OK);
    if (info.fp64) {
        ck_assert_int_eq(kiln_rand_normal(dev, KILN_F64, 1, &n, 5, 0, 1, &t), KILN_OK);
        double h[257];
        ck_assert_int_eq(kiln_tensor_read(t, h, sizeof h), KILN_OK);
        for (int i = 0; i < n; i++)
            ck_assert_double_eq(h[i], (double)ref_normal(i, 5, 0, 1));
        kiln_tensor_release(t);
    }
    ck_assert_int_eq(kiln_rand_uniform(dev, KILN_F16, 1, &n, 5, -1, 1, &t), KILN_OK);
    uint16_t hh[257];
    ck_assert_int_eq(kiln_tensor_read(t, hh, sizeof hh), KILN_OK);
    for (int i = 0; i < n; i++) {
        float want = ref_uniform(i, 5, -1, 1), got = half_to_float(hh[i]);
        /* f16 keeps 11 significant bits: within half an ulp of the f32 number */
        ck_assert_msg(fabsf(got - want) <= ldexpf(fabsf(want), -11) + 3e-8f, "%d: %g vs %g", i, got,
                      want);
    }
    kiln_tensor_release(t);
    /* bf16: the f32 number rounded once, to nearest even */
    ck_assert_int_eq(kiln_rand_uniform(dev, KILN_BF16, 1, &n, 5, -1, 1, &t), KILN_OK);
    ck_assert_int_eq(kiln_tensor_read(t, hh, sizeof hh), KILN_OK);
    for (int i = 0; i < n; i++)
        ck_assert_msg(hh[i] == double_to_bf16(ref_uniform(i, 5, -1, 1)), "%d: bf16 0x%04x for %a",
                      i, hh[i], (double)ref_uniform(i, 5, -1, 1));
    kiln_tensor_release(t);
}
END_TEST

/* Statistics over 1e5 samples (on a CPU device: Oclgrind would take minutes). Bounds are
 * 6 standard errors: mean 6/sqrt(n), variance 6*sqrt(2/n) for the normal; mean 6*sqrt(1/12n)
 * for the unit uniform, whose variance is 1/12. */
START_TEST(test_statistics)
{
    kiln_device *cpu = NULL;
    if (kiln_device_get("cpu:0", &cpu) != KILN_OK)
        cpu = dev; /* a machine without a CPU device: the statistics on the one there is */
    int64_t n = simulated(cpu) ? 10000 : 100000; /* the bounds below scale with n */
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_rand_normal(cpu, KILN_F32, 1, &n, 2024, 0, 1, &t), KILN_OK);
    float *h = read_host(t);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++)
        sum += h[i];
    double mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++)
        sq += (h[i] - mean) * (h[i] - mean);
    double var = sq / (double)(n - 1);
    ck_assert_msg(fabs(mean) < 6 / sqrt((double)n), "normal mean %g", mean);
    ck_assert_msg(fabs(var - 1) < 6 * sqrt(2.0 / (double)n), "normal variance %g", var);
    /* against the textbook Box-Muller of the same uniforms: the algorithm, not only the bits */
    for (int64_t i = 0; i < n; i += 7) {
        double u1, u2;
        float z = ref_normal_parts(i, 2024, &u1, &u2);
        double want = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        ck_assert_msg(fabs(h[i] - want) <= 2e-6 + 2e-6 * fabs(want), "%lld: %g vs %g", (long long)i,
                      h[i], want);
        ck_assert_float_eq(h[i], z);
    }
    free(h);
    kiln_tensor_release(t);
    ck_assert_int_eq(kiln_rand_uniform(cpu, KILN_F32, 1, &n, 2024, 0, 1, &t), KILN_OK);
    h = read_host(t);
    sum = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert(h[i] >= 0 && h[i] < 1);
        sum += h[i];
    }
    ck_assert_msg(fabs(sum / (double)n - 0.5) < 6 * sqrt(1.0 / (12.0 * (double)n)),
                  "uniform mean %g", sum / (double)n);
    free(h);
    kiln_tensor_release(t);
}
END_TEST

/* The _out forms refill an existing tensor with exactly the allocating forms' numbers (and the
 * C reference's for f32), on every device and floating dtype. */
static void check_out_same(kiln_device *d, kiln_dtype dt, bool uniform, uint64_t seed, double a,
                           double b)
{
    int64_t shape[3] = {2, 5, 7};
    kiln_tensor *want = NULL, *got = NULL;
    if (uniform)
        ASSERT_OK(kiln_rand_uniform(d, dt, 3, shape, seed, a, b, &want));
    else
        ASSERT_OK(kiln_rand_normal(d, dt, 3, shape, seed, a, b, &want));
    ASSERT_OK(kiln_full(d, dt, 3, shape, 0, &got));
    if (uniform)
        ASSERT_OK(kiln_rand_uniform_out(seed, a, b, got));
    else
        ASSERT_OK(kiln_rand_normal_out(seed, a, b, got));
    void *hw = read_host(want), *hg = read_host(got);
    ck_assert_msg(memcmp(hw, hg, kiln_tensor_nbytes(want)) == 0, "%s %s %s_out differs",
                  kiln_device_spec(d), kiln_dtype_name(dt), uniform ? "uniform" : "normal");
    for (int i = 0; dt == KILN_F32 && i < 70; i++) {
        float r = uniform ? ref_uniform(i, seed, (float)a, (float)b)
                          : ref_normal(i, seed, (float)a, (float)b);
        ck_assert(f2u(((float *)hg)[i]) == f2u(r));
    }
    free(hw);
    free(hg);
    kiln_tensor_release(want);
    kiln_tensor_release(got);
}

START_TEST(test_out_forms)
{
    for (int i = 0; i < kiln_device_count(KILN_DEVICE_ALL); i++) {
        kiln_device *d = kiln_device_at(i);
        check_out_same(d, KILN_F32, true, 42, -2.0, 3.0);
        check_out_same(d, KILN_F32, false, 0xffffffff00000001ull, 1.5, 0.25);
        check_out_same(d, KILN_F16, true, 5, -1, 1);
        check_out_same(d, KILN_F16, false, 5, 0, 1);
        check_out_same(d, KILN_BF16, true, 5, -1, 1);
        if (has_fp64(d)) {
            check_out_same(d, KILN_F64, true, 9, 0, 1);
            check_out_same(d, KILN_F64, false, 9, 0, 1);
        }
    }
}
END_TEST

/* The _out forms' errors leave out as it was. */
START_TEST(test_out_errors)
{
    int64_t n = 4;
    kiln_tensor *t = NULL, *i = NULL;
    ASSERT_OK(kiln_full(dev, KILN_F32, 1, &n, 7, &t));
    ASSERT_OK(kiln_full(dev, KILN_I32, 1, &n, 7, &i));
    ASSERT_FAILS(kiln_rand_uniform_out(1, 0, 1, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_rand_normal_out(1, 0, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_rand_normal_out: out is NULL");
    ASSERT_FAILS(kiln_rand_uniform_out(1, 0, 1, i), KILN_ERR_UNSUPPORTED, "i32");
    ASSERT_FAILS(kiln_rand_normal_out(1, 0, 1, i), KILN_ERR_UNSUPPORTED, "kiln_rand_normal_out");
    ASSERT_FAILS(kiln_rand_uniform_out(1, 1, 1, t), KILN_ERR_INVALID_ARGUMENT, "less than high");
    ASSERT_FAILS(kiln_rand_uniform_out(1, 0, NAN, t), KILN_ERR_INVALID_ARGUMENT, "finite");
    ASSERT_FAILS(kiln_rand_normal_out(1, 0, -1, t), KILN_ERR_INVALID_ARGUMENT, "negative");
    float h[4];
    ASSERT_OK(kiln_tensor_read(t, h, sizeof h));
    for (int k = 0; k < 4; k++)
        ck_assert(h[k] == 7.0f);
    kiln_tensor_release(t);
    kiln_tensor_release(i);
    /* a released tensor is refused by name */
    ASSERT_FAILS(kiln_rand_uniform_out(1, 0, 1, t), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_rand_uniform_out");
}
END_TEST

START_TEST(test_zero_size)
{
    int64_t shape[2] = {0, 4};
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_rand_uniform(dev, KILN_F32, 2, shape, 1, 0, 1, &t), KILN_OK);
    ck_assert_int_eq(kiln_tensor_numel(t), 0);
    kiln_tensor_release(t);
    ck_assert_int_eq(kiln_rand_normal(dev, KILN_F32, 2, shape, 1, 0, 1, &t), KILN_OK);
    ck_assert_int_eq(kiln_tensor_numel(t), 0);
    kiln_tensor_release(t);
}
END_TEST

START_TEST(test_errors)
{
    int64_t n = 4;
    kiln_tensor *t = (kiln_tensor *)&n;
    ASSERT_FAILS(kiln_rand_uniform(NULL, KILN_F32, 1, &n, 1, 0, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_rand_uniform");
    ck_assert_ptr_null(t);
    ASSERT_FAILS(kiln_rand_uniform(dev, KILN_F32, 1, &n, 1, 0, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "out is NULL");
    t = (kiln_tensor *)&n;
    ASSERT_FAILS(kiln_rand_uniform(dev, KILN_I32, 1, &n, 1, 0, 1, &t), KILN_ERR_UNSUPPORTED, "i32");
    ck_assert_ptr_null(t);
    ASSERT_FAILS(kiln_rand_normal(dev, KILN_U8, 1, &n, 1, 0, 1, &t), KILN_ERR_UNSUPPORTED, "u8");
    ASSERT_FAILS(kiln_rand_uniform(dev, KILN_F32, 1, &n, 1, 1, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "less than high");
    ASSERT_FAILS(kiln_rand_uniform(dev, KILN_F32, 1, &n, 1, 0, INFINITY, &t),
                 KILN_ERR_INVALID_ARGUMENT, "finite");
    ASSERT_FAILS(kiln_rand_normal(dev, KILN_F32, 1, &n, 1, 0, -1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "negative");
    ASSERT_FAILS(kiln_rand_normal(dev, KILN_F32, -1, &n, 1, 0, 1, &t), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_rand_normal");
    ck_assert_ptr_null(t);
}
END_TEST

/* ---- the global generator (issue 22): kiln_manual_seed and KILN_SEED_GLOBAL ---------------- */

/* Draw k (from 1) after kiln_manual_seed(s), by kiln.h's documented rule (SplitMix64). */
static uint64_t draw_ref(uint64_t s, uint64_t k)
{
    uint64_t z = s + k * 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* t holds the C reference's uniforms in [low, high) for seed. */
static void assert_uniform_ref(kiln_tensor *t, uint64_t seed, float low, float high)
{
    float *h = read_host(t);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++)
        ck_assert_msg(h[i] == ref_uniform(i, seed, low, high), "[%lld] seed %llx", (long long)i,
                      (unsigned long long)seed);
    free(h);
}

START_TEST(test_global_seed)
{
    /* SplitMix64's published first output for seed 0 (the generator's start before any
     * kiln_manual_seed): the reference itself is right */
    ck_assert_uint_eq(draw_ref(0, 1), 0xe220a8397b1dcdafu);
    int64_t n = 33;
    kiln_tensor *a = NULL, *b = NULL, *c = NULL, *o = NULL;
    kiln_manual_seed(123);
    ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 1, &n, KILN_SEED_GLOBAL, -1, 1, &a));
    ASSERT_OK(kiln_rand_normal(dev, KILN_F32, 1, &n, KILN_SEED_GLOBAL, 0, 1, &b));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, &n, &o));
    ASSERT_OK(kiln_rand_uniform_out(KILN_SEED_GLOBAL, 0, 1, o));
    /* each call drew the next seed of the documented sequence */
    assert_uniform_ref(a, draw_ref(123, 1), -1, 1);
    float *hb = read_host(b);
    for (int64_t i = 0; i < n; i++)
        ck_assert(hb[i] == ref_normal(i, draw_ref(123, 2), 0, 1));
    free(hb);
    assert_uniform_ref(o, draw_ref(123, 3), 0, 1);
    /* a call refused for its arguments draws nothing */
    ASSERT_FAILS(kiln_rand_uniform(dev, KILN_F32, 1, &n, KILN_SEED_GLOBAL, 1, 0, &c),
                 KILN_ERR_INVALID_ARGUMENT, "less than high");
    ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 1, &n, KILN_SEED_GLOBAL, 0, 1, &c));
    assert_uniform_ref(c, draw_ref(123, 4), 0, 1);
    kiln_tensor_release(c);
    /* the same manual seed again: the same bytes */
    kiln_manual_seed(123);
    ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 1, &n, KILN_SEED_GLOBAL, -1, 1, &c));
    void *ha = read_host(a), *hc = read_host(c);
    ck_assert(memcmp(ha, hc, (size_t)n * 4) == 0);
    free(ha);
    free(hc);
    kiln_tensor_release(c);
    /* every device gives the same bytes for the same global seed */
    for (int i = 0; i < kiln_device_count(KILN_DEVICE_ALL); i++) {
        kiln_manual_seed(77);
        ASSERT_OK(
            kiln_rand_uniform(kiln_device_at(i), KILN_F32, 1, &n, KILN_SEED_GLOBAL, 0, 1, &c));
        assert_uniform_ref(c, draw_ref(77, 1), 0, 1);
        kiln_tensor_release(c);
    }
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(o);
}
END_TEST

enum { DRAW_THREADS = 4, DRAWS = 2000 };
static uint64_t drawn[DRAW_THREADS * DRAWS];

static void *draw_many(void *arg)
{
    uint64_t *out = arg;
    for (int i = 0; i < DRAWS; i++)
        out[i] = kiln__seed_resolve(KILN_SEED_GLOBAL);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Threads drawing at once get the sequence's first N draws between them, each once. */
START_TEST(test_global_seed_threads)
{
    kiln_manual_seed(2026);
    pthread_t th[DRAW_THREADS];
    for (int t = 0; t < DRAW_THREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, draw_many, drawn + t * DRAWS), 0);
    for (int t = 0; t < DRAW_THREADS; t++)
        pthread_join(th[t], NULL);
    static uint64_t want[DRAW_THREADS * DRAWS];
    for (int k = 0; k < DRAW_THREADS * DRAWS; k++)
        want[k] = draw_ref(2026, (uint64_t)k + 1);
    qsort(drawn, DRAW_THREADS * DRAWS, sizeof *drawn, cmp_u64);
    qsort(want, DRAW_THREADS * DRAWS, sizeof *want, cmp_u64);
    ck_assert(memcmp(drawn, want, sizeof want) == 0);
    /* an explicit seed is used as it is */
    ck_assert_uint_eq(kiln__seed_resolve(42), 42);
}
END_TEST

Suite *random_suite(void)
{
    Suite *s = suite_create("random");
    TCase *ref = tcase_create("reference");
    tcase_add_test(ref, test_philox_kat);
    tcase_add_test(ref, test_reference_math);
    suite_add_tcase(s, ref);
    TCase *tc = tcase_create("device");
    tcase_add_unchecked_fixture(tc, setup, teardown_devices);
    tcase_add_test(tc, test_bit_identical_every_device);
    tcase_add_test(tc, test_counter_per_element);
    tcase_add_test(tc, test_other_float_dtypes);
    tcase_add_test(tc, test_statistics);
    tcase_add_test(tc, test_out_forms);
    tcase_add_test(tc, test_out_errors);
    tcase_add_test(tc, test_zero_size);
    tcase_add_test(tc, test_global_seed);
    tcase_add_test(tc, test_global_seed_threads);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return s;
}
