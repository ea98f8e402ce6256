/* dtype.h - the facts of every dtype, generated from KILN_DTYPE_MAP in kiln.h: size, name,
 * OpenCL C types, float/signed, the -D options that select a dtype for a kernel, scalar
 * ranges. The lowest layer: it depends on nothing but kiln.h. */
#ifndef KILN_DTYPE_H
#define KILN_DTYPE_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln.h"

bool kiln__dtype_valid(kiln_dtype dtype);
size_t kiln__dtype_size(kiln_dtype dtype);      /* bytes; 0 for an unknown dtype */
const char *kiln__dtype_name(kiln_dtype dtype); /* "f32"; "?" for an unknown dtype */

/* Every dtype's enum name for messages: "KILN_F32, KILN_F64, ...". */
const char *kiln__dtype_list(void);

/* The OpenCL C storage type of a dtype ("float", "half", "uchar", ...; "?" if unknown). */
const char *kiln__dtype_cl_type(kiln_dtype dtype);

/* The OpenCL C compute type: as storage, but "float" for f16. */
const char *kiln__dtype_cl_compute_type(kiln_dtype dtype);

/* The dtype whose storage type is dtype's compute type (f16 -> f32; itself otherwise). */
kiln_dtype kiln__dtype_compute(kiln_dtype dtype);

bool kiln__dtype_is_float(kiln_dtype dtype);  /* the table's `floating` column */
bool kiln__dtype_is_signed(kiln_dtype dtype); /* the table's `signed` column */

/* Stored as OpenCL `half` (accessed with vload_half/vstore_half, computed in float). */
bool kiln__dtype_is_half(kiln_dtype dtype);

/* Stored as bfloat16 bits in an OpenCL ushort (converted with shifts, computed in float). */
bool kiln__dtype_is_bf16(kiln_dtype dtype);

/* A 16-bit float (f16 or bf16): stored narrower than it computes (f32). */
bool kiln__dtype_is_narrow(kiln_dtype dtype);

/* prelude.cl's macro family for a narrow dtype's storage ("HALF": KILN_HALF_LOAD, ...; "BF16":
 * KILN_BF16_LOAD, ...), NULL for the others. */
const char *kiln__dtype_narrow_macro(kiln_dtype dtype);

/* Computing in dtype needs cl_khr_fp64 (its compute type is double). */
bool kiln__dtype_needs_fp64(kiln_dtype dtype);

/* The unsigned OpenCL C integer type of an integer dtype's width ("uint" for i32, used for
 * wrapping arithmetic); NULL for floating or unknown dtypes. */
const char *kiln__dtype_cl_unsigned_type(kiln_dtype dtype);

/* The unsigned OpenCL C integer type of `bytes` width (1, 2, 4 or 8; "ulong" otherwise), for
 * copying elements of any dtype bit for bit. */
const char *kiln__dtype_cl_uint(size_t bytes);

/* Whether v, truncated toward zero, is representable in an integer dtype (the range follows
 * from the table's bytes and signed columns); always true for floating dtypes. NaN and
 * infinities never fit an integer dtype. */
bool kiln__dtype_scalar_fits(kiln_dtype dtype, double v);

/* Append to buf the -D options that select dtype for prelude.cl's slot `slot` ("T", "U" or
 * "O"): "-DKILN_T=float -DKILN_TC=float" (+ " -DKILN_T_HALF=1" for f16 storage, " -DKILN_T_BF16=1"
 * for bf16). Returns
 * buf. */
char *kiln__dtype_defines(char *buf, size_t size, const char *slot, kiln_dtype dtype);

/* Element i of a host array of dtype: its value as a double (f), and for integer dtypes also
 * exactly (i). Little-endian hosts, as OpenCL devices kiln supports. */
typedef struct kiln__host_value {
    bool floating;
    double f;
    int64_t i;
} kiln__host_value;
kiln__host_value kiln__dtype_load(kiln_dtype dtype, const void *buf, int64_t i);

/* Store v as element i of a host array of dtype, converted as kiln_cast converts: to a float
 * dtype rounded to nearest (f16: once, to nearest even; overflow gives infinity), float to
 * integer truncated toward zero and saturated (NaN gives 0), integer to integer wrapped. */
void kiln__dtype_store(kiln_dtype dtype, void *buf, int64_t i, kiln__host_value v);

#endif
