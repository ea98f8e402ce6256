/* mlp.c - a two-layer MLP regressor (ReLU hidden layer) trained with Adam on kiln tensors;
 * shared by examples/train.c and kiln-bench train. */
#include "mlp.h"

#include <math.h>

/* pred = relu(x w1 + b1) w2 + b2; keeps the intermediates the backward pass needs. */
kiln_status mlp_forward(mlp *m, const kiln_tensor *x, kiln_tensor **z1, kiln_tensor **h,
                        kiln_tensor **pred)
{
    kiln_tensor *xw = NULL, *hw = NULL;
    kiln_status s;
    *z1 = *h = *pred = NULL;
    if ((s = kiln_matmul(x, m->p[0], &xw)) == KILN_OK &&
        (s = kiln_add(xw, m->p[1], z1)) == KILN_OK &&
        (s = kiln_unary(KILN_UNARY_RELU, *z1, h)) == KILN_OK &&
        (s = kiln_matmul(*h, m->p[2], &hw)) == KILN_OK)
        s = kiln_add(hw, m->p[3], pred);
    kiln_tensor_release(xw);
    kiln_tensor_release(hw);
    return s;
}

/* One Adam step on a batch; *loss_out gets the batch loss ([1]). */
kiln_status mlp_train_step(mlp *m, const kiln_tensor *x, const kiln_tensor *y, int64_t step,
                           double lr, kiln_tensor **loss)
{
    kiln_tensor *z1 = NULL, *h = NULL, *pred = NULL, *dpred = NULL, *dh = NULL, *dz1 = NULL;
    kiln_tensor *g[4] = {NULL, NULL, NULL, NULL};
    kiln_status s = mlp_forward(m, x, &z1, &h, &pred);
    if (s == KILN_OK)
        s = kiln_mse_loss(pred, y, loss, &dpred);
    if (s == KILN_OK)
        s = kiln_matmul_trans(h, dpred, KILN_MATMUL_TRANS_A, &g[2]); /* dw2 = h^T dpred */
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_SUM, dpred, 0, false, &g[3]); /* db2 */
    if (s == KILN_OK)
        s = kiln_matmul_trans(dpred, m->p[2], KILN_MATMUL_TRANS_B, &dh); /* dh = dpred w2^T */
    if (s == KILN_OK)
        s = kiln_unary_backward(KILN_UNARY_RELU, z1, dh, &dz1);
    if (s == KILN_OK)
        s = kiln_matmul_trans(x, dz1, KILN_MATMUL_TRANS_A, &g[0]); /* dw1 = x^T dz1 */
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_SUM, dz1, 0, false, &g[1]); /* db1 */
    for (int i = 0; i < 4 && s == KILN_OK; i++)
        s = kiln_adam_step(m->p[i], g[i], m->m[i], m->v[i], step, lr, 0.9, 0.999, 1e-8);
    kiln_tensor *all[] = {z1, h, pred, dpred, dh, dz1, g[0], g[1], g[2], g[3]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        kiln_tensor_release(all[i]);
    return s;
}

kiln_status mlp_init(mlp *m, kiln_device *dev, int nfeat, int hidden, uint64_t seed)
{
    int64_t shapes[4][2] = {{nfeat, hidden}, {hidden, 0}, {hidden, 1}, {1, 0}};
    int ndims[4] = {2, 1, 2, 1};
    kiln_status s = KILN_OK;
    /* He initialisation for the ReLU layer, Xavier-like for the output. */
    s = kiln_rand_normal(dev, KILN_F32, 2, shapes[0], seed, 0.0, sqrt(2.0 / nfeat), &m->p[0]);
    if (s == KILN_OK)
        s = kiln_tensor_zeros(dev, KILN_F32, 1, shapes[1], &m->p[1]);
    if (s == KILN_OK)
        s = kiln_rand_normal(dev, KILN_F32, 2, shapes[2], seed + 1, 0.0, sqrt(1.0 / hidden),
                             &m->p[2]);
    if (s == KILN_OK)
        s = kiln_tensor_zeros(dev, KILN_F32, 1, shapes[3], &m->p[3]);
    for (int i = 0; i < 4 && s == KILN_OK; i++) {
        s = kiln_tensor_zeros(dev, KILN_F32, ndims[i], shapes[i], &m->m[i]);
        if (s == KILN_OK)
            s = kiln_tensor_zeros(dev, KILN_F32, ndims[i], shapes[i], &m->v[i]);
    }
    return s;
}

void mlp_free(mlp *m)
{
    for (int i = 0; i < 4; i++) {
        kiln_tensor_release(m->p[i]);
        kiln_tensor_release(m->m[i]);
        kiln_tensor_release(m->v[i]);
    }
}
