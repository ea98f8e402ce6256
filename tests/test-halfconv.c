/* test-halfconv.c - the host's f16 and bf16 <-> f32 conversions (lib/halfconv.c, which dtype.c's
 * element loads and stores use too) against testutil's (exact decoding from the fields, and
 * rounding by a binary search over the 16-bit values: another algorithm): every f16 and bf16
 * value to f32; to f16 and bf16, every value, the f32 neighbours of every rounding boundary
 * (midpoints, where ties go to even), the overflow and subnormal edges, a stride through all 2^32
 * f32 bit patterns and random ones; f64 to bf16 in one rounding (not two). No device. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lib/halfconv.h"
#include "testutil.h"

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* testutil's f16 rounding of f. */
static uint16_t reference_f16(float f)
{
    return float_to_half(f);
}

static void check_to_f16(float f)
{
    uint16_t got = kiln__f32_to_f16(f), want = reference_f16(f);
    if (isnan(f)) {
        ck_assert_msg((got & 0x7c00) == 0x7c00 && (got & 0x3ff) && (got & 0x200),
                      "NaN 0x%08x gave 0x%04x, not a quiet NaN", bits_of(f), got);
        ck_assert_uint_eq(got & 0x8000u, (bits_of(f) >> 16) & 0x8000u);
        return;
    }
    ck_assert_msg(got == want, "%a (0x%08x): got 0x%04x, expected 0x%04x", (double)f, bits_of(f),
                  got, want);
}

START_TEST(every_f16_to_f32)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        uint16_t v = (uint16_t)h;
        float got = kiln__f16_to_f32(v);
        double want = half_to_float(v);
        if (isnan(want)) {
            ck_assert_msg(isnan(got), "0x%04x", h);
            /* the payload moves up unchanged, so a round trip keeps it */
            ck_assert_uint_eq(kiln__f32_to_f16(got), v | 0x200u);
        } else {
            ck_assert_msg((double)got == want && !signbit(got) == !signbit(want),
                          "0x%04x: got %a, expected %a", h, (double)got, want);
            ck_assert_uint_eq(kiln__f32_to_f16(got), v); /* exact round trip */
        }
    }
}
END_TEST

START_TEST(rounding_boundaries)
{
    /* every pair of neighbouring finite f16 values of one sign: their midpoint (a tie, exact in
     * f32) and the f32 values 1 and 2 ulps to either side */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (int sign = 0; sign < 2; sign++) {
            uint16_t lo = (uint16_t)(h | (uint32_t)sign << 15), hi = (uint16_t)(lo + 1);
            float a = kiln__f16_to_f32(lo), b = kiln__f16_to_f32(hi);
            float mid = (float)(((double)a + (double)b) / 2);
            ck_assert((double)mid == ((double)a + (double)b) / 2);
            uint32_t m = bits_of(mid);
            for (int32_t d = -2; d <= 2; d++)
                check_to_f16(float_of((uint32_t)((int32_t)m + d)));
        }
    }
    /* around the largest half (65504), the overflow threshold 65520 and infinity */
    const float edges[] = {65504.0f,        65519.996f,   65520.0f, 65536.0f, 1e30f,
                           INFINITY,        -INFINITY,    0x1p-14f, 0x1p-24f, 0x1p-25f,
                           0x1.000002p-25f, 0x1p-26f,     0.0f,     -0.0f,    0x1p-149f,
                           0x1.ffcp-15f,    0x1.ffep-15f, NAN,      -NAN};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        check_to_f16(edges[i]);
        check_to_f16(-edges[i]);
    }
}
END_TEST

START_TEST(f32_patterns)
{
    /* a stride through all 2^32 bit patterns (4093 is prime: every exponent and low bits) */
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4093)
        check_to_f16(float_of((uint32_t)u));
    uint32_t state = 12345;
    for (int i = 0; i < 1 << 20; i++) {
        state = state * 1664525u + 1013904223u;
        check_to_f16(float_of(state));
    }
}
END_TEST

START_TEST(bulk_forms)
{
    enum { N = 1000 };
    uint16_t h[N], back[N];
    float f[N];
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)(i * 65 + 7);
    kiln__f16_to_f32_n(h, f, N);
    kiln__f32_to_f16_n(f, back, N);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(bits_of(f[i]), bits_of(kiln__f16_to_f32(h[i])));
        ck_assert_uint_eq(back[i], kiln__f32_to_f16(f[i]));
    }
    kiln__f16_to_f32_n(NULL, NULL, 0); /* n = 0 touches nothing */
    kiln__f32_to_f16_n(NULL, NULL, 0);
}
END_TEST

static void check_to_bf16(float f)
{
    uint16_t got = kiln__f32_to_bf16(f);
    if (isnan(f)) {
        ck_assert_msg((got & 0x7f80) == 0x7f80 && (got & 0x40), "NaN 0x%08x gave 0x%04x",
                      bits_of(f), got);
        ck_assert_uint_eq(got & 0x8000u, (bits_of(f) >> 16) & 0x8000u);
        return;
    }
    uint16_t want = double_to_bf16(f);
    ck_assert_msg(got == want, "%a (0x%08x): got bf16 0x%04x, expected 0x%04x", (double)f,
                  bits_of(f), got, want);
}

START_TEST(every_bf16_to_f32)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        uint16_t v = (uint16_t)h;
        float got = kiln__bf16_to_f32(v);
        double want = bf16_to_double(v);
        if (isnan(want)) {
            ck_assert_msg(isnan(got), "bf16 0x%04x", h);
            ck_assert_uint_eq(kiln__f32_to_bf16(got), v | 0x40u); /* quiet, payload kept */
        } else {
            ck_assert_msg((double)got == want && !signbit(got) == !signbit(want),
                          "bf16 0x%04x: got %a, expected %a", h, (double)got, want);
            ck_assert_uint_eq(kiln__f32_to_bf16(got), v);
            ck_assert_uint_eq(kiln__f64_to_bf16(want), v);
        }
    }
}
END_TEST

START_TEST(bf16_rounding)
{
    /* the midpoint of every pair of neighbouring finite bf16 values (exact in f32) and 1 and 2
     * f32 ulps to either side, both signs; from the largest finite value up, the overflow */
    for (uint32_t h = 0; h < 0x7f80; h++) {
        for (int sign = 0; sign < 2; sign++) {
            uint32_t lo = bits_of(kiln__bf16_to_f32((uint16_t)(h | (uint32_t)sign << 15)));
            uint32_t mid = lo + 0x8000u;
            for (int32_t d = -2; d <= 2; d++)
                check_to_bf16(float_of((uint32_t)((int32_t)mid + d)));
        }
    }
    const float edges[] = {FLT_MAX,   0x1.fefffep127f, 0x1.ff0000p127f, INFINITY,  0x1p-126f,
                           0x1p-133f, 0x1p-134f,       0x1.8p-134f,     0x1p-149f, 0.0f,
                           NAN};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        check_to_bf16(edges[i]);
        check_to_bf16(-edges[i]);
    }
    for (uint64_t u = 0; u <= 0xffffffffu; u += 4093)
        check_to_bf16(float_of((uint32_t)u));
}
END_TEST

/* f64 to bf16 rounds once: values just off a bf16 midpoint (by far less than an f32 ulp), which
 * a conversion through the nearest float would turn into a tie and round to even. */
START_TEST(f64_to_bf16_single_rounding)
{
    uint32_t state = 777;
    for (int i = 0; i < 200000; i++) {
        state = state * 1664525u + 1013904223u;
        uint16_t h = (uint16_t)(state >> 16) & 0x7f7f; /* finite, not the largest exponent */
        double lo = bf16_to_double(h), hi = bf16_to_double((uint16_t)(h + 1));
        double mid = (lo + hi) / 2, off = (hi - lo) * 0x1p-30;
        const double vals[] = {mid, mid + off, mid - off, -(mid + off), lo + off, hi - off};
        for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
            uint16_t got = kiln__f64_to_bf16(vals[k]), want = double_to_bf16(vals[k]);
            ck_assert_msg(got == want, "f64 %a: got bf16 0x%04x, expected 0x%04x", vals[k], got,
                          want);
        }
    }
    const double edges[] = {1e300,   -1e300,   0x1.ff7fffffffffp127, 0x1.ff8p127, 1e-300,
                            -1e-300, 0x1p-134, 0x1.0000000001p-134,  INFINITY,    -INFINITY,
                            0.0,     -0.0};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        uint16_t got = kiln__f64_to_bf16(edges[i]), want = double_to_bf16(edges[i]);
        ck_assert_msg(got == want, "f64 %a: got bf16 0x%04x, expected 0x%04x", edges[i], got, want);
    }
    ck_assert_uint_eq(kiln__f64_to_bf16(NAN) & 0x7fc0u, 0x7fc0u);
}
END_TEST

START_TEST(bf16_bulk_forms)
{
    enum { N = 1000 };
    uint16_t h[N], back[N];
    float f[N];
    for (int i = 0; i < N; i++)
        h[i] = (uint16_t)(i * 65 + 7);
    kiln__bf16_to_f32_n(h, f, N);
    for (int i = 0; i < N; i++)
        f[i] *= 1.001f; /* off the grid, so the way back rounds */
    kiln__f32_to_bf16_n(f, back, N);
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(back[i], kiln__f32_to_bf16(f[i]));
    kiln__bf16_to_f32_n(NULL, NULL, 0);
    kiln__f32_to_bf16_n(NULL, NULL, 0);
}
END_TEST

Suite *halfconv_suite(void)
{
    Suite *s = suite_create("halfconv");
    TCase *tc = tcase_create("halfconv");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_f16_to_f32);
    tcase_add_test(tc, rounding_boundaries);
    tcase_add_test(tc, f32_patterns);
    tcase_add_test(tc, bulk_forms);
    tcase_add_test(tc, every_bf16_to_f32);
    tcase_add_test(tc, bf16_rounding);
    tcase_add_test(tc, f64_to_bf16_single_rounding);
    tcase_add_test(tc, bf16_bulk_forms);
    suite_add_tcase(s, tc);
    return s;
}
