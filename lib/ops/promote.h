/* promote.h - dtype promotion for the binary ops (PyTorch's rules for kiln's dtypes): a thin
 * layer before the op that casts the operand of the narrower dtype. */
#ifndef KILN_PROMOTE_H
#define KILN_PROMOTE_H

#include "kiln.h"

/* The dtype a binary op computes in for operands of dtypes a and b: floating beats integer,
 * within a category the wider wins (u8 with i32 gives i32); f16 with bf16 gives f32. */
kiln_dtype kiln__promote_types(kiln_dtype a, kiln_dtype b);

/* When *a and *b are valid tensors on one device with different dtypes: cast each whose dtype
 * is not the promoted one (recorded for autograd like any kiln_cast; both for f16 with bf16),
 * point *a or *b at the cast, and give the casts in tmp[0] and tmp[1] for the caller to release
 * with kiln__promote_release after the op (NULL where nothing was cast). Anything else is left
 * to the op's own checks. */
kiln_status kiln__promote_pair(const char *fn, const kiln_tensor **a, const kiln_tensor **b,
                               kiln_tensor *tmp[2]);

/* Release what kiln__promote_pair cast. */
void kiln__promote_release(kiln_tensor *tmp[2]);

/* The scalar forms: an integer tensor with a scalar that is not an integer (a fraction, NaN or
 * an infinity) computes in f32, as PyTorch's default dtype; *a is pointed at the cast. */
kiln_status kiln__promote_scalar(const char *fn, const kiln_tensor **a, double scalar,
                                 kiln_tensor **tmp);

#endif
