/* rnn.c - the time loop of a recurrent layer and its backward through time (rnn.h): per step
 * one matmul for the hidden projection and one kernel (lib/kernels/rnn.cl) for all the gate
 * arithmetic, forward and backward, with nothing read back inside the loop. */
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "launch.h"
#include "ops/rnn.h"
#include "program.h"
#include "status.h"
#include "tensor.h"

int kiln__rnn_gates(kiln__rnn_mode mode)
{
    return mode == KILN__RNN_LSTM ? 4 : mode == KILN__RNN_GRU ? 3 : 1;
}

/* Values the forward saves per hidden unit and step for the backward. */
static int saved_per_unit(kiln__rnn_mode mode)
{
    return mode == KILN__RNN_LSTM ? 5 : mode == KILN__RNN_GRU ? 4 : 1;
}

/* The kernels of one cell (mode) and dtype: one program each. */
static kiln_status rnn_kernel(kiln_device *dev, kiln_dtype dtype, kiln__rnn_mode mode, bool save,
                              const char *name, const char *op, kiln__kernel **k)
{
    char defs[192] = "";
    kiln__dtype_defines(defs, sizeof defs, "T", dtype);
    size_t used = strlen(defs);
    snprintf(defs + used, sizeof defs - used, " -DKILN_RNN_MODE=%d -DKILN_RNN_SAVE=%d", (int)mode,
             save);
    return kiln__builtin_kernel(dev, "rnn", defs, name, op, k);
}

static void release_all(int n, kiln_tensor **ts)
{
    for (int i = 0; i < n; i++)
        kiln_tensor_release(ts[i]);
}

/* A [B, H] state: a copy of init, or zeros. */
static kiln_status initial_state(const kiln_tensor *init, kiln_device *dev, kiln_dtype dtype,
                                 const int64_t *shape, kiln_tensor **out)
{
    return init ? kiln_tensor_clone(init, out) : kiln_full(dev, dtype, 2, shape, 0.0, out);
}

kiln_status kiln__rnn_scan(const char *op, kiln__rnn_mode mode, bool reverse, const kiln_tensor *xg,
                           const kiln_tensor *w_hh, const kiln_tensor *b_ih,
                           const kiln_tensor *b_hh, const kiln_tensor *h0, const kiln_tensor *c0,
                           const kiln_tensor *lengths, kiln_tensor **out)
{
    *out = NULL;
    kiln_device *dev = xg->dev;
    kiln_dtype dtype = xg->dtype;
    bool lstm = mode == KILN__RNN_LSTM;
    int64_t T = xg->shape[0], B = xg->shape[1], H = w_hh->shape[1];
    int64_t G = kiln__rnn_gates(mode), W = saved_per_unit(mode);
    const kiln_tensor *ins[KILN__RNN_NODE_INPUTS] = {xg, w_hh, b_ih, b_hh, h0, c0, lengths};
    bool save = false;
    for (int i = 0; i < 6 && kiln_grad_enabled(); i++)
        save = save || (ins[i] && ins[i]->requires_grad);
    enum { H_, C_, HG, HPREV, CPREV, WS, R, WT, DUMMY, N_ };
    kiln_tensor *t[N_] = {0};
    const int64_t bh[2] = {B, H}, bgh[2] = {B, G * H}, tbh[3] = {T, B, H}, tbw[3] = {T, B, W * H};
    const int64_t rshape[3] = {T + (lstm ? 2 : 1), B, H};
    kiln_status s = initial_state(h0, dev, dtype, bh, &t[H_]);
    if (s == KILN_OK && lstm)
        s = initial_state(c0, dev, dtype, bh, &t[C_]);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, dtype, 2, bgh, op, &t[HG]);
    if (s == KILN_OK && save)
        s = kiln__tensor_new(dev, dtype, 3, tbh, op, &t[HPREV]);
    if (s == KILN_OK && save && lstm)
        s = kiln__tensor_new(dev, dtype, 3, tbh, op, &t[CPREV]);
    if (s == KILN_OK && save)
        s = kiln__tensor_new(dev, dtype, 3, tbw, op, &t[WS]);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, dtype, 3, rshape, op, &t[R]);
    /* Buffers a step does not use get a one-element tensor of their own, never read or written
     * (rather than one of the launch's real buffers, aliased). */
    const int64_t one = 1;
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, dtype, 1, &one, op, &t[DUMMY]);
    kiln__kernel *k = NULL;
    if (s == KILN_OK)
        s = rnn_kernel(dev, dtype, mode, save, "kiln_rnn_step", op, &k);
    const kiln_tensor *any = t[DUMMY];
    bool grad = kiln_set_grad_enabled(false);
    /* W_hh^T [H, G H], once: each step's h W_hh^T is then a plain product (a transposed operand
     * would be transposed again at every step by the host BLAS path) */
    static const int swap[2] = {1, 0};
    if (s == KILN_OK)
        s = kiln_permute(w_hh, swap, &t[WT]);
    for (int64_t step = 0; s == KILN_OK && step < T; step++) {
        s = kiln_matmul_out(t[H_], t[WT], t[HG]);
        kiln_arg args[] = {
            kiln_arg_i64(step),
            kiln_arg_i64(T),
            kiln_arg_i64(B),
            kiln_arg_i64(H),
            kiln_arg_i32(reverse),
            kiln_arg_tensor(lengths ? lengths : any),
            kiln_arg_i32(lengths != NULL),
            kiln_arg_tensor(xg),
            kiln_arg_tensor(t[HG]),
            kiln_arg_tensor(b_ih ? b_ih : any),
            kiln_arg_tensor(b_hh ? b_hh : any),
            kiln_arg_i32(b_ih != NULL),
            kiln_arg_tensor(t[H_]),
            kiln_arg_tensor(lstm ? t[C_] : any),
            kiln_arg_tensor(save ? t[HPREV] : any),
            kiln_arg_tensor(save && lstm ? t[CPREV] : any),
            kiln_arg_tensor(save ? t[WS] : any),
            kiln_arg_tensor(t[R]),
        };
        size_t global[2] = {(size_t)H, (size_t)B};
        if (s == KILN_OK)
            s = kiln__kernel_launch(dev, k, op, 2, global, NULL, (int)(sizeof args / sizeof *args),
                                    args);
    }
    kiln_set_grad_enabled(grad);
    if (s == KILN_OK && save) {
        ins[7] = t[HPREV];
        ins[8] = t[CPREV];
        ins[9] = t[WS];
        kiln__ag_args a = {.op = (int)mode, .flags = reverse};
        s = kiln__ag_record(s, op, KILN__AG_RNN_SCAN, &a, KILN__RNN_NODE_INPUTS, ins, &t[R]);
    }
    if (s == KILN_OK) {
        *out = t[R];
        t[R] = NULL;
    }
    release_all(N_, t);
    return s;
}

/* A 2-D view [rows, cols] of t. */
static kiln_status flat2(const kiln_tensor *t, int64_t rows, int64_t cols, kiln_tensor **out)
{
    const int64_t shape[2] = {rows, cols};
    return kiln_tensor_reshape(t, 2, shape, out);
}

kiln_status kiln__rnn_scan_bw(const kiln__ag_args *args, const kiln_tensor *g,
                              const kiln_tensor *const *in, kiln_tensor **grads)
{
    const char *op = "kiln_backward (recurrent layer)";
    kiln__rnn_mode mode = (kiln__rnn_mode)args->op;
    bool lstm = mode == KILN__RNN_LSTM, reverse = args->flags != 0;
    const kiln_tensor *xg = in[0], *w_hh = in[1], *b_ih = in[2], *b_hh = in[3], *h0 = in[4];
    const kiln_tensor *lengths = in[6], *hprev = in[7], *cprev = in[8], *ws = in[9];
    kiln_device *dev = xg->dev;
    kiln_dtype dtype = xg->dtype;
    int64_t T = xg->shape[0], B = xg->shape[1], H = w_hh->shape[1], G = kiln__rnn_gates(mode);
    enum { DH, DC, M, DXG, DGH, DGHS, DGH2, HP2, DXG2, N_ };
    kiln_tensor *t[N_] = {0};
    const int64_t bh[2] = {B, H}, bgh[2] = {B, G * H}, tbg[3] = {T, B, G * H};
    kiln_status s = kiln__tensor_new(dev, dtype, 2, bh, op, &t[DH]);
    if (s == KILN_OK && lstm)
        s = kiln__tensor_new(dev, dtype, 2, bh, op, &t[DC]);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, dtype, 2, bh, op, &t[M]);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, dtype, 3, tbg, op, &t[DXG]);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, dtype, 3, tbg, op, &t[DGH]);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, dtype, 2, bgh, op, &t[DGHS]);
    kiln__kernel *k = NULL;
    if (s == KILN_OK)
        s = rnn_kernel(dev, dtype, mode, true, "kiln_rnn_step_bw", op, &k);
    const kiln_tensor *any = g;
    bool dh0 = h0 && h0->requires_grad;
    for (int64_t step = T - 1; s == KILN_OK && step >= 0; step--) {
        kiln_arg a[] = {
            kiln_arg_i64(step),
            kiln_arg_i64(T),
            kiln_arg_i64(B),
            kiln_arg_i64(H),
            kiln_arg_i32(reverse),
            kiln_arg_tensor(lengths ? lengths : any),
            kiln_arg_i32(lengths != NULL),
            kiln_arg_tensor(g),
            kiln_arg_tensor(ws),
            kiln_arg_tensor(hprev),
            kiln_arg_tensor(lstm ? cprev : any),
            kiln_arg_tensor(t[M]),
            kiln_arg_i32(step == T - 1),
            kiln_arg_tensor(t[DH]),
            kiln_arg_tensor(lstm ? t[DC] : any),
            kiln_arg_tensor(t[DXG]),
            kiln_arg_tensor(t[DGH]),
            kiln_arg_tensor(t[DGHS]),
        };
        size_t global[2] = {(size_t)H, (size_t)B};
        s = kiln__kernel_launch(dev, k, op, 2, global, NULL, (int)(sizeof a / sizeof *a), a);
        /* the gradient reaching the state before this step through its hidden projection */
        if (s == KILN_OK && (step > 0 || dh0))
            s = kiln_matmul_out(t[DGHS], w_hh, t[M]);
    }
    if (s == KILN_OK && xg->requires_grad)
        grads[0] = kiln_tensor_retain(t[DXG]);
    if (s == KILN_OK && (w_hh->requires_grad || (b_hh && b_hh->requires_grad)))
        s = flat2(t[DGH], T * B, G * H, &t[DGH2]);
    if (s == KILN_OK && w_hh->requires_grad)
        s = flat2(hprev, T * B, H, &t[HP2]);
    if (s == KILN_OK && w_hh->requires_grad) /* sum over steps of dgh[s]^T hprev[s] */
        s = kiln_matmul_trans(t[DGH2], t[HP2], KILN_MATMUL_TRANS_A, &grads[1]);
    if (s == KILN_OK && b_ih && b_ih->requires_grad)
        s = flat2(t[DXG], T * B, G * H, &t[DXG2]);
    if (s == KILN_OK && b_ih && b_ih->requires_grad)
        s = kiln_reduce(KILN_REDUCE_SUM, t[DXG2], 0, false, &grads[2]);
    if (s == KILN_OK && b_hh && b_hh->requires_grad)
        s = kiln_reduce(KILN_REDUCE_SUM, t[DGH2], 0, false, &grads[3]);
    if (s == KILN_OK && dh0)
        s = kiln_add(t[DH], t[M], &grads[4]);
    if (s == KILN_OK && in[5] && in[5]->requires_grad)
        grads[5] = kiln_tensor_retain(t[DC]);
    release_all(N_, t);
    return s;
}
