/* amp.h - autocast's casts of an op's inputs (PyTorch's autocast policy): the lower-precision
 * ops (matmul, linear, convolution) cast their f32 inputs to the region's dtype; the f32 ops
 * (softmax, log-softmax, logsumexp, sums and means, losses, norms, exp, log, pow, rsqrt,
 * softplus) cast f16 inputs to f32. The casts are kiln_cast's, recorded by autograd, so
 * gradients flow back in each input's own dtype. */
#ifndef KILN_OPS_AMP_H
#define KILN_OPS_AMP_H

#include <stdbool.h>

#include "kiln.h"

typedef enum kiln__amp_policy {
    KILN__AMP_LOWER, /* f32 -> the region's dtype */
    KILN__AMP_F32,   /* f16 -> f32 */
} kiln__amp_policy;

/* Under an autocast region for the device of in's first non-NULL tensor: each in[i] that the
 * policy casts is replaced by its cast, which tmp[i] holds (the caller releases tmp[0..n-1]; NULL
 * where nothing was cast). A failed cast's message names op. No region: nothing happens. */
kiln_status kiln__amp_cast(const char *op, kiln__amp_policy policy, int n, const kiln_tensor **in,
                           kiln_tensor **tmp);

/* Whether a unary op is on autocast's f32 list (exp, log, rsqrt, softplus). */
bool kiln__amp_f32_unary(kiln_unary_op op);

/* Release tmp[0..n-1]. */
void kiln__amp_release(int n, kiln_tensor **tmp);

/* The start of an op under autocast: false when the policy casts nothing (no region, or no
 * input it applies to): the op runs as it is. True when it cast (*s KILN_OK: the op calls itself
 * again on in[], then kiln__amp_release(n, tmp)) or a cast failed (*s says why, tmp released).
 * Written at the top of an allocating form:
 *     const kiln_tensor *in[2] = {a, b};
 *     kiln_tensor *tmp[2];
 *     kiln_status s;
 *     if (kiln__amp_apply(op, KILN__AMP_LOWER, 2, in, tmp, &s)) {
 *         if (s == KILN_OK)
 *             s = the_op(in[0], in[1], out);
 *         kiln__amp_release(2, tmp);
 *         return s;                      (out set NULL by the op, or here on a failed cast)
 *     } */
bool kiln__amp_apply(const char *op, kiln__amp_policy policy, int n, const kiln_tensor **in,
                     kiln_tensor **tmp, kiln_status *s);

#endif
