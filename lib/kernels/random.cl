/* random.cl - kiln_rand_uniform and kiln_rand_normal: counter-based Philox4x32-10 numbers,
 * element i from counter (i lo, i hi, 0, 0) and key (seed lo, seed hi). Output in slot T
 * (prelude.cl: KILN_T, STORE_T). The numbers are computed in f32 with only +, -, * and integer
 * operations, which IEEE 754 rounds exactly, and no contraction to fma, so every device gives
 * the same bits (OpenCL's log/cos/sqrt/divide are not correctly rounded and differ between
 * devices; this file must not use them). tests/test-random.c holds the C reference. */
#pragma OPENCL FP_CONTRACT OFF

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

uint4 kiln_philox(uint4 c, uint2 k)
{
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k.x += PHILOX_W0;
            k.y += PHILOX_W1;
        }
        uint hi0 = mul_hi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
        uint hi1 = mul_hi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

uint4 kiln_philox_at(long i, int seed_lo, int seed_hi)
{
    ulong u = (ulong)i;
    return kiln_philox((uint4)((uint)u, (uint)(u >> 32), 0u, 0u),
                       (uint2)((uint)seed_lo, (uint)seed_hi));
}

/* Natural log of x in [2^-24, 1]: x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
 * ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, the reciprocal by Newton steps. */
float kiln_rng_log(float x)
{
    uint b = as_uint(x);
    int e = (int)((b >> 23) & 0xffu) - 127;
    float m = as_float((b & 0x7fffffu) | 0x3f800000u);
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

/* sqrt(x) for x >= 0 by Newton steps on 1/sqrt(x). */
float kiln_rng_sqrt(float x)
{
    if (x <= 0.0f)
        return 0.0f;
    float y = as_float(0x5f3759dfu - (as_uint(x) >> 1));
    y = y * (1.5f - 0.5f * x * y * y);
    y = y * (1.5f - 0.5f * x * y * y);
    y = y * (1.5f - 0.5f * x * y * y);
    return x * y;
}

/* cos(2 pi u) for u in [0, 1): quadrant from 4u (exact), Taylor series on [0, pi/2). */
float kiln_rng_cos2pi(float u)
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
    s = s * t2 - 1.0f; /* -1 + t2/6 - ...: s * th is -sin */
    s = s * th;
    return q == 0 ? c : q == 1 ? s : q == 2 ? -c : -s;
}

/* [0, 1) with 24 random bits. */
#define KILN_U01(x) ((float)((x) >> 8) * 5.9604645e-08f)

kernel void kiln_rand_uniform(global KILN_T *out, long n, int seed_lo, int seed_hi, float low,
                              float high)
{
    KILN_FOR(i, 0, n) {
        uint4 x = kiln_philox_at(i, seed_lo, seed_hi);
        float v = low + (high - low) * KILN_U01(x.x);
        if (v >= high) /* rounding can reach high; keep the interval half-open */
            v = nextafter(high, low);
        STORE_T(out, i, v);
    }
}

/* Box-Muller on the pair (x.x, x.y): sqrt(-2 ln u1) cos(2 pi u2), u1 in (0, 1]. */
kernel void kiln_rand_normal(global KILN_T *out, long n, int seed_lo, int seed_hi, float mean,
                             float stddev)
{
    KILN_FOR(i, 0, n) {
        uint4 x = kiln_philox_at(i, seed_lo, seed_hi);
        float u1 = (float)((x.x >> 8) + 1u) * 5.9604645e-08f;
        float u2 = KILN_U01(x.y);
        float z = kiln_rng_sqrt(-2.0f * kiln_rng_log(u1)) * kiln_rng_cos2pi(u2);
        STORE_T(out, i, mean + stddev * z);
    }
}
