/* halfconv.h - 16-bit floats on the host, in bulk: IEEE binary16 (f16) to and from f32, for the
 * paths that hand half tensors to f32 host code (the CBLAS matmul converts its operands and its
 * product). Bit manipulation only: no F16C, no _Float16, the same result on every compiler.
 * dtype.c's element-wise load/store (through double) is the slow reference the tests use. */
#ifndef KILN_HALFCONV_H
#define KILN_HALFCONV_H

#include <stddef.h>
#include <stdint.h>

/* binary16 bits -> f32, exact (subnormals, infinities and NaN payloads kept). */
float kiln__f16_to_f32(uint16_t h);

/* f32 -> binary16 bits, rounded to nearest even as vstore_half does: above the largest half
 * (65504) by half an ulp or more gives infinity, tiny values round into the subnormals, NaN stays
 * a quiet NaN with the payload's top bits. Needs the default rounding mode. */
uint16_t kiln__f32_to_f16(float f);

void kiln__f16_to_f32_n(const uint16_t *in, float *out, size_t n);
void kiln__f32_to_f16_n(const float *in, uint16_t *out, size_t n);

/* bfloat16 bits -> f32: exact (the bits are f32's top half). */
float kiln__bf16_to_f32(uint16_t h);

/* f32 -> bfloat16 bits, rounded to nearest even (a carry into the exponent is right: the
 * largest finite values round up to infinity); NaN stays a quiet NaN with its sign and the
 * payload's top bits. The same integer arithmetic as prelude.cl's kiln_f2bf. */
uint16_t kiln__f32_to_bf16(float f);

/* f64 -> bfloat16 in one rounding (to float toward zero with a sticky last bit, then to
 * nearest even), as the kernels store a double into bf16. */
uint16_t kiln__f64_to_bf16(double d);

void kiln__bf16_to_f32_n(const uint16_t *in, float *out, size_t n);
void kiln__f32_to_bf16_n(const float *in, uint16_t *out, size_t n);

#endif
