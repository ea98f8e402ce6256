/* promote.h - dtype promotion for the binary ops (PyTorch's rules for kiln's dtypes): a thin
 * layer before the op that casts the operand of the narrower dtype. */
#ifndef KILN_PROMOTE_H
#define KILN_PROMOTE_H

#include "kiln.h"

/* The dtype a binary op computes in for operands of dtypes a and b: floating beats integer,
 * within a category the wider wins (u8 with i32 gives i32). */
kiln_dtype kiln__promote_types(kiln_dtype a, kiln_dtype b);

/* When *a and *b are valid tensors on one device with different dtypes: cast the one whose
 * dtype is not the promoted one (recorded for autograd like any kiln_cast), point *a or *b at
 * the cast, and give it in *tmp for the caller to release after the op (NULL when nothing was
 * cast). Anything else is left to the op's own checks. */
kiln_status kiln__promote_pair(const char *fn, const kiln_tensor **a, const kiln_tensor **b,
                               kiln_tensor **tmp);

/* The scalar forms: an integer tensor with a scalar that is not an integer (a fraction, NaN or
 * an infinity) computes in f32, as PyTorch's default dtype; *a is pointed at the cast. */
kiln_status kiln__promote_scalar(const char *fn, const kiln_tensor **a, double scalar,
                                 kiln_tensor **tmp);

#endif
