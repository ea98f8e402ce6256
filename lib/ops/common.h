/* common.h - helpers shared by the ops: dtype names for kernels, capability checks, scalar
 * arguments and NumPy broadcasting. */
#ifndef KILN_OPS_COMMON_H
#define KILN_OPS_COMMON_H

#include <stdint.h>

#include "kiln_cl.h"

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

/* A scalar kernel argument in dtype's compute type (float for f16; integers truncated toward
 * zero), converted from v. The caller checks the range (kiln__scalar_fits). */
kiln_arg kiln__arg_compute(kiln_dtype dtype, double v);

/* Whether v is representable (after truncation toward zero) in an integer dtype; always true
 * for floating dtypes. NaN and infinities never fit an integer dtype. */
bool kiln__scalar_fits(kiln_dtype dtype, double v);

/* The same for an exact 64-bit integer: integer dtypes get v modulo 2^bits (two's complement,
 * so v itself when it fits), floating dtypes v rounded to nearest. */
kiln_arg kiln__arg_compute_i64(kiln_dtype dtype, int64_t v);

/* Whether v is representable in an integer dtype; always true for floating dtypes. */
bool kiln__i64_fits(kiln_dtype dtype, int64_t v);

/* A scalar operand as the public functions take it: a double, or with is_i64 an exact integer
 * (the _i64 entry points). */
typedef struct kiln__scalar {
    bool is_i64;
    double f;
    int64_t i;
} kiln__scalar;

/* kiln__scalar_fits / kiln__i64_fits and kiln__arg_compute / kiln__arg_compute_i64 by kind. */
bool kiln__scalar_value_fits(kiln_dtype dtype, kiln__scalar v);
kiln_arg kiln__arg_scalar(kiln_dtype dtype, kiln__scalar v);

/* The scalar for messages ("%g" or "%lld") into buf (returns buf). */
char *kiln__scalar_str(char *buf, size_t size, kiln__scalar v);

/* "[2, 3]" into buf (returns buf). */
char *kiln__shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/* NumPy broadcasting of up to 4 tensors: right-aligned dimensions, size-1 axes stretch. The
 * result shape is in ndim/shape; the dimensions collapsed for kernels (size-1 result dims
 * dropped, adjacent dims merged where every input is contiguous or broadcast across both) are
 * in nd/cshape, innermost last, with each input's element strides (0 where broadcast). */
typedef struct kiln__bcast {
    int n; /* inputs */
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    int64_t numel;
    int nd;
    int64_t cshape[KILN_MAX_DIMS];
    int64_t cstride[4][KILN_MAX_DIMS];
} kiln__bcast;

/* Broadcast the shapes of ts[0..n-1] (n <= 4, all non-NULL). KILN_ERR_SHAPE_MISMATCH naming op
 * and every shape when they cannot be broadcast. */
kiln_status kiln__broadcast(const char *op, int n, const kiln_tensor *const *ts, kiln__bcast *bc);

/* Whether the broadcast is a same-shape contiguous case (one flat index serves every input). */
bool kiln__bcast_flat(const kiln__bcast *bc);

/* Append the 8-slot kernel arguments of a broadcast to args: result shape (8 longs, outermost
 * first, padded with 1), then each input's strides (8 longs each, padded with 0). Returns the
 * number of arguments appended (8 * (n + 1)). */
int kiln__bcast_args(const kiln__bcast *bc, kiln_arg *args);

#endif
