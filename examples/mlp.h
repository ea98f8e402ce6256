/* mlp.h - a two-layer MLP regressor on kiln tensors: pred = relu(x w1 + b1) w2 + b2, trained
 * with mean squared error and Adam. Shared by examples/train.c and kiln-bench train. */
#ifndef KILN_EXAMPLE_MLP_H
#define KILN_EXAMPLE_MLP_H

#include "kiln.h"

typedef struct mlp {
    kiln_tensor *p[4];        /* w1 [F,H], b1 [H], w2 [H,1], b2 [1] */
    kiln_tensor *m[4], *v[4]; /* Adam moments */
} mlp;

/* Weights from kiln's Philox generator: the same seed gives the same weights on every device. */
kiln_status mlp_init(mlp *m, kiln_device *dev, int nfeat, int hidden, uint64_t seed);

/* Forward pass over x [B,F]; *z1 (pre-activation) and *h (hidden) are kept for backward. */
kiln_status mlp_forward(mlp *m, const kiln_tensor *x, kiln_tensor **z1, kiln_tensor **h,
                        kiln_tensor **pred);

/* One Adam step on a batch x [B,F], y [B,1]; *loss gets the batch loss ([1]). */
kiln_status mlp_train_step(mlp *m, const kiln_tensor *x, const kiln_tensor *y, int64_t step,
                           double lr, kiln_tensor **loss);

/* Release the tensors; a zeroed mlp is fine. */
void mlp_free(mlp *m);

#endif
