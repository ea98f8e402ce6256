/* recurrent.c - recurrent cells and layer stacks (PyTorch's rnn_cell / lstm_cell / gru_cell and
 * nn.RNN / LSTM / GRU): each checked up front, then the input projection of every time step as
 * one matmul, the time loop as one recorded op (lib/ops/rnn.c), directions joined with kiln_cat
 * and layers stacked, so autograd differentiates the whole without gradient code here. Also the
 * sequence mask and the masked mean for the loss of a padded batch. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "autocast.h"
#include "nn/layers.h"
#include "nn/recurrent.h"
#include "ops/amp.h"
#include "ops/common.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

static const char *const mode_name[] = {"RNN", "RNN", "LSTM", "GRU"};

static void release_all(int n, kiln_tensor **ts)
{
    for (int i = 0; i < n; i++)
        kiln_tensor_release(ts[i]);
}

static kiln_status shape_is(const char *op, const char *name, const kiln_tensor *t, int ndim,
                            const int64_t *shape, const char *what)
{
    if (!t || kiln__same_shape(t, ndim, shape))
        return KILN_OK;
    char have[160], want[160];
    return kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: %s has shape %s; it must be %s (%s)", op, name,
                       kiln__shape_str(have, sizeof have, t->ndim, t->shape),
                       kiln__shape_str(want, sizeof want, ndim, shape), what);
}

/* Every non-NULL tensor of ts[0..n-1] of dtype (f32 or f64, computable on its device). */
static kiln_status check_dtypes(const char *op, int n, const kiln_tensor *const *ts,
                                const char *const *names)
{
    kiln_dtype dt = ts[0]->dtype;
    if (dt != KILN_F32 && dt != KILN_F64)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: %s is %s; recurrent layers compute in f32 or f64 (cast first)", op,
                           names[0], kiln_dtype_name(dt));
    for (int i = 1; i < n; i++)
        if (ts[i] && ts[i]->dtype != dt)
            return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: %s is %s but %s is %s; use one dtype",
                               op, names[0], kiln_dtype_name(dt), names[i],
                               kiln_dtype_name(ts[i]->dtype));
    return kiln__check_dtype_on(ts[0]->dev, dt, op);
}

/* The weights of one layer and direction against its input width `in` and hidden size H. */
static kiln_status check_weights(const char *op, kiln__rnn_mode mode, int64_t in, int64_t H,
                                 const kiln_tensor *w_ih, const kiln_tensor *w_hh,
                                 const kiln_tensor *b_ih, const kiln_tensor *b_hh)
{
    int64_t G = kiln__rnn_gates(mode);
    const int64_t wih[2] = {G * H, in}, whh[2] = {G * H, H}, b[1] = {G * H};
    char what[96];
    snprintf(what, sizeof what, "%s: %" PRId64 " gates x hidden size by input size",
             mode_name[mode], G);
    kiln_status s = shape_is(op, "w_ih", w_ih, 2, wih, what);
    snprintf(what, sizeof what, "%s: %" PRId64 " gates x hidden size by hidden size",
             mode_name[mode], G);
    if (s == KILN_OK)
        s = shape_is(op, "w_hh", w_hh, 2, whh, what);
    if (s == KILN_OK)
        s = shape_is(op, "b_ih", b_ih, 1, b, "gates x hidden size");
    if (s == KILN_OK)
        s = shape_is(op, "b_hh", b_hh, 1, b, "gates x hidden size");
    if (s == KILN_OK && (b_ih == NULL) != (b_hh == NULL))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: %s is NULL but %s is not; pass both biases or neither", op,
                        b_ih ? "b_hh" : "b_ih", b_ih ? "b_ih" : "b_hh");
    return s;
}

/* x [T, B, in] @ w_ih^T as [T, B, G H]. */
static kiln_status project(const kiln_tensor *x, const kiln_tensor *w_ih, kiln_tensor **xg)
{
    int64_t T = x->shape[0], B = x->shape[1];
    const int64_t flat[2] = {T * B, x->shape[2]}, back[3] = {T, B, w_ih->shape[0]};
    kiln_tensor *t[2] = {0};
    kiln_status s = kiln_tensor_reshape(x, 2, flat, &t[0]);
    if (s == KILN_OK)
        s = kiln_matmul_trans(t[0], w_ih, KILN_MATMUL_TRANS_B, &t[1]);
    if (s == KILN_OK)
        s = kiln_tensor_reshape(t[1], 3, back, xg);
    release_all(2, t);
    return s;
}

/* Row `row` of r ([rows, B, H]) as [B, H]. */
static kiln_status row_of(const kiln_tensor *r, int64_t row, kiln_tensor **out)
{
    kiln_tensor *sl = NULL;
    kiln_status s = kiln_slice(r, 0, row, row + 1, &sl);
    if (s == KILN_OK)
        s = kiln_tensor_reshape(sl, 2, r->shape + 1, out);
    kiln_tensor_release(sl);
    return s;
}

/* ---- cells ---------------------------------------------------------------------------------- */

static kiln_status cell_run(const char *op, kiln__rnn_mode mode, const kiln_tensor *x,
                            const kiln_tensor *h, const kiln_tensor *c, const kiln_tensor *w_ih,
                            const kiln_tensor *w_hh, const kiln_tensor *b_ih,
                            const kiln_tensor *b_hh, kiln_tensor **h_out, kiln_tensor **c_out)
{
    if (!h_out || (mode == KILN__RNN_LSTM && !c_out))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                           h_out ? "c_out" : "h_out");
    *h_out = NULL;
    if (c_out)
        *c_out = NULL;
    const kiln_tensor *ts[] = {x, w_ih, w_hh, h, c, b_ih, b_hh};
    const char *const names[] = {"x", "w_ih", "w_hh", "h", "c", "b_ih", "b_hh"};
    kiln_status s = kiln__check_tensors(op, 7, 3, ts, names, NULL);
    if (s == KILN_OK)
        s = check_dtypes(op, 7, ts, names);
    if (s != KILN_OK)
        return s;
    if (x->ndim != 2 || w_hh->ndim != 2 || x->shape[0] < 1) {
        char sh[160];
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: x has shape %s; it must be [batch, input size] with batch >= 1", op,
                           kiln__shape_str(sh, sizeof sh, x->ndim, x->shape));
    }
    int64_t B = x->shape[0], H = w_hh->shape[1];
    const int64_t bh[2] = {B, H};
    s = check_weights(op, mode, x->shape[1], H, w_ih, w_hh, b_ih, b_hh);
    if (s == KILN_OK)
        s = shape_is(op, "h", h, 2, bh, "batch by hidden size");
    if (s == KILN_OK)
        s = shape_is(op, "c", c, 2, bh, "batch by hidden size");
    if (s != KILN_OK)
        return s;
    /* one time step: x as [1, B, in] */
    kiln_tensor *t[3] = {0};
    const int64_t x3[3] = {1, B, x->shape[1]};
    s = kiln_tensor_reshape(x, 3, x3, &t[0]);
    if (s == KILN_OK)
        s = project(t[0], w_ih, &t[2]);
    if (s == KILN_OK)
        s = kiln__rnn_scan(op, mode, false, t[2], w_hh, b_ih, b_hh, h, c, NULL, &t[1]);
    if (s == KILN_OK)
        s = row_of(t[1], 1, h_out); /* h_n: the result's rows are out[0], h_n, c_n */
    if (s == KILN_OK && mode == KILN__RNN_LSTM && (s = row_of(t[1], 2, c_out)) != KILN_OK) {
        kiln_tensor_release(*h_out);
        *h_out = NULL;
    }
    release_all(3, t);
    return s;
}

/* Under autocast, recurrent layers compute in f32 (their gate kernels have no f16 form yet): x,
 * h and c are cast to f32 (ops/amp.h) and autocast is suspended for the inner products. */
static kiln_status cell(const char *op, kiln__rnn_mode mode, const kiln_tensor *x,
                        const kiln_tensor *h, const kiln_tensor *c, const kiln_tensor *w_ih,
                        const kiln_tensor *w_hh, const kiln_tensor *b_ih, const kiln_tensor *b_hh,
                        kiln_tensor **h_out, kiln_tensor **c_out)
{
    const kiln_tensor *in[3] = {x, h, c};
    kiln_tensor *tmp[3];
    kiln_status s;
    if (kiln__amp_apply(op, KILN__AMP_F32, 3, in, tmp, &s)) {
        if (s == KILN_OK)
            s = cell(op, mode, in[0], in[1], in[2], w_ih, w_hh, b_ih, b_hh, h_out, c_out);
        kiln__amp_release(3, tmp);
        if (s != KILN_OK && h_out)
            *h_out = NULL;
        if (s != KILN_OK && c_out)
            *c_out = NULL;
        return s;
    }
    int prev = kiln__autocast_suspend();
    s = cell_run(op, mode, x, h, c, w_ih, w_hh, b_ih, b_hh, h_out, c_out);
    kiln__autocast_resume(prev);
    return s;
}

kiln_status kiln_rnn_cell(const kiln_tensor *x, const kiln_tensor *h, const kiln_tensor *w_ih,
                          const kiln_tensor *w_hh, const kiln_tensor *b_ih, const kiln_tensor *b_hh,
                          kiln_unary_op nonlinearity, kiln_tensor **h_out)
{
    const char *op = "kiln_rnn_cell";
    if (nonlinearity != KILN_UNARY_TANH && nonlinearity != KILN_UNARY_RELU) {
        if (h_out)
            *h_out = NULL;
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: nonlinearity %d is neither KILN_UNARY_TANH nor KILN_UNARY_RELU", op,
                           (int)nonlinearity);
    }
    kiln__rnn_mode mode = nonlinearity == KILN_UNARY_RELU ? KILN__RNN_RELU : KILN__RNN_TANH;
    return cell(op, mode, x, h, NULL, w_ih, w_hh, b_ih, b_hh, h_out, NULL);
}

kiln_status kiln_lstm_cell(const kiln_tensor *x, const kiln_tensor *h, const kiln_tensor *c,
                           const kiln_tensor *w_ih, const kiln_tensor *w_hh,
                           const kiln_tensor *b_ih, const kiln_tensor *b_hh, kiln_tensor **h_out,
                           kiln_tensor **c_out)
{
    return cell("kiln_lstm_cell", KILN__RNN_LSTM, x, h, c, w_ih, w_hh, b_ih, b_hh, h_out, c_out);
}

kiln_status kiln_gru_cell(const kiln_tensor *x, const kiln_tensor *h, const kiln_tensor *w_ih,
                          const kiln_tensor *w_hh, const kiln_tensor *b_ih, const kiln_tensor *b_hh,
                          kiln_tensor **h_out)
{
    return cell("kiln_gru_cell", KILN__RNN_GRU, x, h, NULL, w_ih, w_hh, b_ih, b_hh, h_out, NULL);
}

/* ---- layer stacks --------------------------------------------------------------------------- */

/* lengths: each in 1..T; an i32 tensor of them on dev, or NULL when every row is T long. */
static kiln_status lengths_tensor(const char *op, kiln_device *dev, const int64_t *lengths,
                                  int64_t B, int64_t T, kiln_tensor **out)
{
    *out = NULL;
    if (!lengths)
        return KILN_OK;
    bool all = true;
    for (int64_t b = 0; b < B; b++) {
        if (lengths[b] < 1 || lengths[b] > T)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: lengths[%" PRId64 "] is %" PRId64
                               "; each must be in 1..%" PRId64 " (the sequence length)",
                               op, b, lengths[b], T);
        all = all && lengths[b] == T;
    }
    if (all)
        return KILN_OK;
    int32_t *l32 = kiln__calloc((size_t)B, sizeof *l32);
    if (!l32)
        return kiln__host_oom(op);
    for (int64_t b = 0; b < B; b++)
        l32[b] = (int32_t)lengths[b];
    kiln_status s = kiln_tensor_from_host(dev, KILN_I32, 1, &B, l32, out);
    free(l32);
    return s;
}

static kiln_status check_run(const char *op, const kiln__rnn_config *cfg,
                             kiln_tensor *const *weights, const kiln_tensor *x,
                             const kiln_tensor *h0, const kiln_tensor *c0, kiln_tensor **c_n)
{
    const kiln_tensor *ts[] = {x, weights[0], h0, c0};
    const char *const names[] = {
        "x", cfg->mode == KILN__RNN_LSTM ? "the LSTM's weights" : "the weights", "h0", "c0"};
    kiln_status s = kiln__check_tensors(op, 4, 1, ts, names, NULL);
    if (s == KILN_OK && cfg->mode != KILN__RNN_LSTM && (c0 || c_n))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: %s is for an LSTM's cell state; an %s has none (pass NULL)", op,
                        c0 ? "c0" : "c_n", mode_name[cfg->mode]);
    if (s == KILN_OK && x->dtype != weights[0]->dtype)
        s = kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: x is %s but the layer's weights are %s", op,
                        kiln_dtype_name(x->dtype), kiln_dtype_name(weights[0]->dtype));
    if (s == KILN_OK)
        s = check_dtypes(op, 4, ts, names);
    if (s != KILN_OK)
        return s;
    char sh[160];
    if (x->ndim != 3 || x->shape[2] != cfg->input_size || x->numel == 0)
        return kiln__error(
            KILN_ERR_SHAPE_MISMATCH,
            "%s: x has shape %s; it must be %s with input size %" PRId64 " and no empty dimension",
            op, kiln__shape_str(sh, sizeof sh, x->ndim, x->shape),
            cfg->batch_first ? "[batch, time, input size]" : "[time, batch, input size]",
            cfg->input_size);
    int64_t B = x->shape[cfg->batch_first ? 0 : 1];
    const int64_t st[3] = {(int64_t)cfg->layers * cfg->directions, B, cfg->hidden_size};
    s = shape_is(op, "h0", h0, 3, st, "layers x directions, batch, hidden size");
    if (s == KILN_OK)
        s = shape_is(op, "c0", c0, 3, st, "layers x directions, batch, hidden size");
    return s;
}

static kiln_status rnn_run(const char *op, const kiln__rnn_config *cfg, kiln_tensor *const *weights,
                           const kiln_tensor *x, const int64_t *lengths, const kiln_tensor *h0,
                           const kiln_tensor *c0, bool training, uint64_t seed, kiln_tensor **y,
                           kiln_tensor **h_n, kiln_tensor **c_n)
{
    if (!y)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: y is NULL", op);
    *y = NULL;
    if (h_n)
        *h_n = NULL;
    if (c_n)
        *c_n = NULL;
    kiln_status s = check_run(op, cfg, weights, x, h0, c0, c_n);
    if (s != KILN_OK)
        return s;
    bool lstm = cfg->mode == KILN__RNN_LSTM;
    int L = cfg->layers, D = cfg->directions;
    int64_t T = x->shape[cfg->batch_first ? 1 : 0], B = x->shape[cfg->batch_first ? 0 : 1];
    kiln_tensor *len = NULL, *cur = NULL;
    s = lengths_tensor(op, x->dev, lengths, B, T, &len);
    static const int tb[3] = {1, 0, 2};
    if (s == KILN_OK)
        s = cfg->batch_first ? kiln_permute(x, tb, &cur)
                             : kiln_tensor_reshape(x, 3, x->shape, &cur);
    /* the final states of each layer and direction, [1, B, H] each */
    kiln_tensor **fin = kiln__calloc((size_t)2 * (size_t)L * (size_t)D, sizeof(kiln_tensor *));
    if (s == KILN_OK && !fin)
        s = kiln__host_oom(op);
    for (int l = 0; s == KILN_OK && l < L; l++) {
        kiln_tensor *outs[2] = {0}, *next = NULL;
        for (int d = 0; s == KILN_OK && d < D; d++) {
            int i = l * D + d;
            kiln_tensor *const *w = weights + (ptrdiff_t)4 * i;
            kiln_tensor *t[5] = {0}; /* xg, h0 row, c0 row, result */
            s = check_weights(op, cfg->mode, cur->shape[2], cfg->hidden_size, w[0], w[1], w[2],
                              w[3]);
            if (s == KILN_OK)
                s = project(cur, w[0], &t[0]);
            if (s == KILN_OK && h0)
                s = row_of(h0, i, &t[1]);
            if (s == KILN_OK && c0)
                s = row_of(c0, i, &t[2]);
            if (s == KILN_OK)
                s = kiln__rnn_scan(op, cfg->mode, d == 1, t[0], w[1], w[2], w[3], t[1], t[2], len,
                                   &t[3]);
            if (s == KILN_OK)
                s = kiln_slice(t[3], 0, 0, T, &outs[d]);
            if (s == KILN_OK && h_n)
                s = kiln_slice(t[3], 0, T, T + 1, &fin[i]);
            if (s == KILN_OK && c_n)
                s = kiln_slice(t[3], 0, T + 1, T + 2, &fin[L * D + i]);
            release_all(5, t);
        }
        if (s == KILN_OK)
            s = D == 1 ? kiln_tensor_reshape(outs[0], 3, outs[0]->shape, &next)
                       : kiln_cat((const kiln_tensor *const *)outs, 2, 2, &next);
        release_all(2, outs);
        if (s == KILN_OK && training && cfg->dropout > 0 && l < L - 1) {
            kiln_tensor *dropped = NULL;
            s = kiln__dropout(next, cfg->dropout, seed + (uint64_t)l, &dropped);
            kiln_tensor_release(next);
            next = dropped;
        }
        kiln_tensor_release(cur);
        cur = next;
    }
    if (s == KILN_OK)
        s = cfg->batch_first ? kiln_permute(cur, tb, y)
                             : kiln_tensor_reshape(cur, 3, cur->shape, y);
    if (s == KILN_OK && h_n)
        s = kiln_cat((const kiln_tensor *const *)fin, L * D, 0, h_n);
    if (s == KILN_OK && c_n && lstm)
        s = kiln_cat((const kiln_tensor *const *)fin + (ptrdiff_t)L * D, L * D, 0, c_n);
    if (s != KILN_OK) {
        kiln_tensor_release(*y);
        *y = NULL;
        if (h_n) {
            kiln_tensor_release(*h_n);
            *h_n = NULL;
        }
    }
    if (fin)
        release_all(2 * L * D, fin);
    free(fin);
    kiln_tensor_release(cur);
    kiln_tensor_release(len);
    return s;
}

/* ---- padded batches ------------------------------------------------------------------------- */

kiln_status kiln_sequence_mask(kiln_device *dev, kiln_dtype dtype, const int64_t *lengths,
                               int64_t batch, int64_t max_len, bool batch_first, kiln_tensor **out)
{
    const char *op = "kiln_sequence_mask";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_device(dev, op);
    if (s != KILN_OK)
        return s;
    if (!lengths)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: lengths is NULL", op);
    if (!kiln__dtype_valid(dtype) || !kiln__dtype_is_float(dtype))
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: dtype %d is not floating (f32, f64, f16, bf16)", op, (int)dtype);
    if (batch < 1 || max_len < 1 || batch > (INT64_MAX / 8) / max_len)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: batch %" PRId64 " and max_len %" PRId64
                           " must each be >= 1 (and their product fit memory)",
                           op, batch, max_len);
    for (int64_t b = 0; b < batch; b++)
        if (lengths[b] < 0 || lengths[b] > max_len)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: lengths[%" PRId64 "] is %" PRId64 "; it must be in 0..%" PRId64,
                               op, b, lengths[b], max_len);
    double *m = kiln__calloc((size_t)(batch * max_len), sizeof *m);
    if (!m)
        return kiln__host_oom(op);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < lengths[b]; t++)
            m[batch_first ? b * max_len + t : t * batch + b] = 1.0;
    const int64_t shape[2] = {batch_first ? batch : max_len, batch_first ? max_len : batch};
    kiln_tensor *f64 = NULL;
    s = kiln_tensor_from_host(dev, KILN_F64, 2, shape, m, &f64);
    free(m);
    if (s == KILN_OK && dtype == KILN_F64) {
        *out = f64;
        return s;
    }
    if (s == KILN_OK)
        s = kiln_cast(f64, dtype, out);
    kiln_tensor_release(f64);
    return s;
}

kiln_status kiln_masked_mean(const kiln_tensor *x, const kiln_tensor *mask, kiln_tensor **out)
{
    const char *op = "kiln_masked_mean";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    const kiln_tensor *ts[] = {x, mask};
    kiln_status s = kiln__check_tensors(op, 2, 2, ts, (const char *const[]){"x", "mask"}, NULL);
    if (s != KILN_OK)
        return s;
    if (!kiln__dtype_is_float(x->dtype) || x->dtype != mask->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: x is %s and mask %s; both must be one floating dtype", op,
                           kiln_dtype_name(x->dtype), kiln_dtype_name(mask->dtype));
    /* mask broadcasts to x's shape (not the other way round) */
    bool fits = mask->ndim <= x->ndim;
    for (int d = 0; fits && d < mask->ndim; d++) {
        int64_t md = mask->shape[mask->ndim - 1 - d], xd = x->shape[x->ndim - 1 - d];
        fits = md == xd || md == 1;
    }
    if (!fits)
        return kiln__shape_mismatch(op, "mask", mask->ndim, mask->shape, "x", x->ndim, x->shape,
                                    "; mask must broadcast to x's shape");
    /* sum(x mask) / (sum(mask) times the copies broadcasting makes of each mask element) */
    double copies = mask->numel ? (double)x->numel / (double)mask->numel : 0.0;
    kiln_tensor *t[4] = {0};
    s = kiln_mul(x, mask, &t[0]);
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_SUM, t[0], KILN_ALL_AXES, false, &t[1]);
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_SUM, mask, KILN_ALL_AXES, false, &t[2]);
    if (s == KILN_OK)
        s = kiln_binary_scalar(KILN_BINARY_MUL, t[2], copies, &t[3]);
    if (s == KILN_OK)
        s = kiln_div(t[1], t[3], out);
    release_all(4, t);
    return s;
}

/* As cell(): f32 under autocast, autocast suspended inside. */
kiln_status kiln__rnn_run(const char *op, const kiln__rnn_config *cfg, kiln_tensor *const *weights,
                          const kiln_tensor *x, const int64_t *lengths, const kiln_tensor *h0,
                          const kiln_tensor *c0, bool training, uint64_t seed, kiln_tensor **y,
                          kiln_tensor **h_n, kiln_tensor **c_n)
{
    const kiln_tensor *in[3] = {x, h0, c0};
    kiln_tensor *tmp[3];
    kiln_status s;
    if (kiln__amp_apply(op, KILN__AMP_F32, 3, in, tmp, &s)) {
        if (s == KILN_OK)
            s = kiln__rnn_run(op, cfg, weights, in[0], lengths, in[1], in[2], training, seed, y,
                              h_n, c_n);
        kiln__amp_release(3, tmp);
        kiln_tensor **outs[3] = {y, h_n, c_n};
        for (int i = 0; s != KILN_OK && i < 3; i++)
            if (outs[i])
                *outs[i] = NULL;
        return s;
    }
    int prev = kiln__autocast_suspend();
    s = rnn_run(op, cfg, weights, x, lengths, h0, c0, training, seed, y, h_n, c_n);
    kiln__autocast_resume(prev);
    return s;
}
