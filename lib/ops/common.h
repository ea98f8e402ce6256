/* common.h - helpers shared by the ops: dtype names for kernels, capability checks. */
#ifndef KILN_OPS_COMMON_H
#define KILN_OPS_COMMON_H

#include "kiln.h"

/* The OpenCL C storage type of a dtype: "float", "double", "half", "int", "long", "uchar". */
const char *kiln__cl_type(kiln_dtype dtype);

/* The OpenCL C compute type: as storage, but "float" for f16. */
const char *kiln__cl_compute_type(kiln_dtype dtype);

bool kiln__dtype_is_float(kiln_dtype dtype); /* f32, f64, f16 */
bool kiln__dtype_valid(kiln_dtype dtype);

/* Append to buf the -D options that select dtype for prelude.cl's slot `slot` ("T", "U" or
 * "O"): "-DKILN_T=float -DKILN_TC=float" (+ " -DKILN_T_HALF=1" for f16). Returns buf. */
char *kiln__dtype_defines(char *buf, size_t size, const char *slot, kiln_dtype dtype);

/* KILN_ERR_UNSUPPORTED naming op when the device cannot compute in dtype (f64 without fp64). */
kiln_status kiln__check_dtype_on(kiln_device *dev, kiln_dtype dtype, const char *op);

#endif
