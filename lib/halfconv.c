/* halfconv.c - host conversions between the 16-bit floats (binary16, bfloat16) and f32 (see
 * halfconv.h). The rounding trick
 * is the well-known one (as in Fabian Giesen's float_to_half_fast3_rtne): normals by integer
 * arithmetic on the bits with the round-to-even carry, subnormals by one float addition that
 * lets the FPU round. */
#include "halfconv.h"

#include <math.h>
#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float kiln__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    if (em >= 0x7c00u) /* infinity or NaN: all-ones exponent, the payload shifted up */
        return float_of(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
    if (em >= 0x0400u) /* normal: rebias the exponent (127 - 15) */
        return float_of(sign | ((em << 13) + (112u << 23)));
    /* zero or subnormal: em units of 2^-24, exact in f32 */
    return float_of(sign | bits_of((float)em * 0x1p-24f));
}

uint16_t kiln__f32_to_f16(float f)
{
    uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, keep the payload's top bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* 65520 (halfway from 65504 to 2^16) and above, infinity too */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        /* below 2^-14, the smallest normal half: adding 0.5 puts the value's units of 2^-24 in
         * the low mantissa bits, rounded to nearest even by the FPU */
        uint32_t r = bits_of(float_of(ax) + 0.5f) - bits_of(0.5f);
        return (uint16_t)(sign | r);
    }
    /* normal: rebias, then round the 13 dropped bits to nearest even (the odd bit breaks ties);
     * a carry out of the mantissa raises the exponent, which is the right answer */
    uint32_t odd = (ax >> 13) & 1u;
    ax += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
    return (uint16_t)(sign | (ax >> 13));
}

void kiln__f16_to_f32_n(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = kiln__f16_to_f32(in[i]);
}

void kiln__f32_to_f16_n(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = kiln__f32_to_f16(in[i]);
}

float kiln__bf16_to_f32(uint16_t h)
{
    return float_of((uint32_t)h << 16);
}

uint16_t kiln__f32_to_bf16(float f)
{
    uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign and the payload's top bits kept */
        return (uint16_t)((x >> 16) | 0x40u);
    /* round the 16 dropped bits to nearest even: add just under half, plus the odd bit */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

uint16_t kiln__f64_to_bf16(double d)
{
    if (isnan(d))
        return kiln__f32_to_bf16((float)d);
    /* float toward zero, the last bit set when anything was dropped (round to odd): f32 keeps
     * 16 more bits than bf16, so rounding that to nearest even rounds as the double would */
    float f = (float)d;
    if (fabs((double)f) > fabs(d)) /* (float) rounded away from zero: step back toward it */
        f = nextafterf(f, 0.0f);
    if ((double)f != d)
        f = float_of(bits_of(f) | 1u);
    return kiln__f32_to_bf16(f);
}

void kiln__bf16_to_f32_n(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = kiln__bf16_to_f32(in[i]);
}

void kiln__f32_to_bf16_n(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = kiln__f32_to_bf16(in[i]);
}
