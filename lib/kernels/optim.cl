/* optim.cl - the update of kiln_adam_create / kiln_adamw_create optimizers (lib/ops/optim.c),
 * PyTorch's formulas in its order of operations. Slot T: f32 or f64.
 *   decoupled AdamW: p *= wd (wd = 1 - lr * weight_decay) before the update
 *             Adam: grad += wd * p (wd = weight_decay)
 *   omb1/omb2 1 - beta1, 1 - beta2; step_size = lr / (1 - beta1^t); bc2_sqrt = sqrt(1 - beta2^t)
 * (scalars computed on the host in double). The element-0 work-item also stores the new step
 * count t into step[0], so the optimizer's step tensor stays current without a host write. */
kernel void kiln_adam_update(global KILN_T *p, global const KILN_T *g, global KILN_T *m,
                             global KILN_T *v, global long *step, long n, long t, int decoupled,
                             KILN_TC wd, KILN_TC b1, KILN_TC b2, KILN_TC omb1, KILN_TC omb2,
                             KILN_TC eps, KILN_TC step_size, KILN_TC bc2_sqrt)
{
    KILN_FOR(i, 0, n) {
        KILN_TC pi = LOAD_T(p, i), gi = LOAD_T(g, i);
        if (decoupled)
            pi *= wd;
        else
            gi += wd * pi;
        KILN_TC mi = b1 * LOAD_T(m, i) + omb1 * gi;
        KILN_TC vi = b2 * LOAD_T(v, i) + omb2 * gi * gi;
        STORE_T(m, i, mi);
        STORE_T(v, i, vi);
        STORE_T(p, i, pi - step_size * mi / (sqrt(vi) / bc2_sqrt + eps));
        if (i == 0)
            step[0] = t;
    }
}

/* kiln_grad_scaler's unscale (lib/nn/scaler.c): g *= inv_scale in place, and found[0] set to 1
 * when any result is infinite or NaN (an atomic: many work-items may find one; rare, so its cost
 * does not matter). PyTorch's _amp_foreach_non_finite_check_and_unscale_, one tensor at a time. */
kernel void kiln_unscale_grad(global KILN_T *g, long n, KILN_TC inv_scale, global int *found)
{
    KILN_FOR(i, 0, n) {
        KILN_TC v = LOAD_T(g, i) * inv_scale;
        if (!isfinite(v))
            atomic_or(found, 1);
        STORE_T(g, i, v);
    }
}
