/* common.h - helpers shared by the ops: capability checks, scalar arguments, result tensors
 * (_out checks, handing over, filling with a kernel), shape messages and NumPy broadcasting.
 * Dtype facts are in lib/dtype.h, op tables in optables.h. */
#ifndef KILN_OPS_COMMON_H
#define KILN_OPS_COMMON_H

#include <stdint.h>

#include "dtype.h"
#include "kiln_cl.h"

/* KILN_ERR_UNSUPPORTED naming op when the device cannot compute in dtype (f64 without fp64). */
kiln_status kiln__check_dtype_on(kiln_device *dev, kiln_dtype dtype, const char *op);

/* A scalar kernel argument in dtype's compute type (float for f16; integers truncated toward
 * zero), converted from v. The caller checks the range (kiln__dtype_scalar_fits). */
kiln_arg kiln__arg_compute(kiln_dtype dtype, double v);

/* Check tensor arguments ts[0..required-1] one by one, so that a NULL or released one is
 * KILN_ERR_INVALID_ARGUMENT naming it (names[i], or "argument i+1" when names is NULL); then
 * that every non-NULL one of ts[0..n-1] is on one device (KILN_ERR_DEVICE_MISMATCH), written
 * to *dev when dev is not NULL. */
kiln_status kiln__check_tensors(const char *op, int n, int required, const kiln_tensor *const *ts,
                                const char *const *names, kiln_device **dev);

/* KILN_CHECK: "1" turns on the checks of data-dependent arguments that cost a synchronizing
 * read (class labels in range); unset, "" or "0" leaves them off. Any other value is
 * KILN_ERR_INVALID_ARGUMENT naming the variable, so that a typo does not silently mean off. */
kiln_status kiln__checked_mode(const char *op, bool *on);

/* With KILN_CHECK=1 (kiln__checked_mode): KILN_ERR_INVALID_ARGUMENT naming the first element
 * of the i32 or i64 tensor idx outside [0, n), as "<op>: <what>[i] is v, outside <range> (0 to
 * n-1)". Reads idx back, so it waits for the work that writes it. KILN_OK when off. */
kiln_status kiln__check_indices(const char *op, const kiln_tensor *idx, const char *what, int64_t n,
                                const char *range);

/* Whether t has exactly this shape. */
bool kiln__same_shape(const kiln_tensor *t, int ndim, const int64_t *shape);

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

/* kiln__dtype_scalar_fits / kiln__i64_fits and kiln__arg_compute / kiln__arg_compute_i64 by
 * kind. */
bool kiln__scalar_value_fits(kiln_dtype dtype, kiln__scalar v);
kiln_arg kiln__arg_scalar(kiln_dtype dtype, kiln__scalar v);

/* The scalar for messages ("%g" or "%lld") into buf (returns buf). */
char *kiln__scalar_str(char *buf, size_t size, kiln__scalar v);

/* KILN_ERR_SHAPE_MISMATCH: "<op>: <aname> has shape [..] but <bname> has shape [..]<hint>"
 * (hint "" or, say, "; they must be equal"). */
kiln_status kiln__shape_mismatch(const char *op, const char *aname, int andim,
                                 const int64_t *ashape, const char *bname, int bndim,
                                 const int64_t *bshape, const char *hint);

/* An _out tensor (already checked with kiln__check_tensor) against the result it is to receive: on
 * dev (KILN_ERR_DEVICE_MISMATCH), of dtype (KILN_ERR_DTYPE_MISMATCH) and of the result's shape
 * (KILN_ERR_SHAPE_MISMATCH), each message saying "out has ... but the result ...". */
kiln_status kiln__check_out(const char *op, const kiln_tensor *out, const kiln_device *dev,
                            kiln_dtype dtype, int ndim, const int64_t *shape);

/* The _out form of an op composed of others: the caller held the log (kiln__log_hold) and ran
 * the allocating form with grad mode off, giving s and r; r is checked against out
 * (kiln__check_out) and copied into it, any error rewrapped under op, the log released and r
 * released. out is not NULL. */
kiln_status kiln__out_from(const char *op, kiln_status s, kiln_tensor *r, kiln_tensor *out);

/* An op made of inner calls that failed with s: the last error again under op's name ("op: the
 * inner message"), unless the message names op already (it starts with op). Returns s. */
kiln_status kiln__inner_error(kiln_status s, const char *op);

/* For ops that read their inputs while writing out: KILN_ERR_INVALID_ARGUMENT when out shares
 * memory with one of ins[0..n-1] (NULL entries are skipped). */
kiln_status kiln__check_not_aliased(const char *op, const kiln_tensor *out, int n,
                                    const kiln_tensor *const *ins);

/* Hand a result over and return s: on success *out = t (when out is not NULL); on failure t
 * is released unless it is `given` (the caller's _out tensor). */
kiln_status kiln__finish(kiln_status s, kiln_tensor *t, const kiln_tensor *given,
                         kiln_tensor **out);

/* Write every element of t with the 1-D kernel `kernel` of lib/kernels/<source>.cl built for
 * t's dtype (slot T), called with (t, number of elements, extra[0..nextra-1]); nextra <= 8.
 * Nothing happens for an empty t. Asynchronous. */
kiln_status kiln__fill_kernel(kiln_tensor *t, const char *source, const char *kernel,
                              const char *op, int nextra, const kiln_arg *extra);

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
