/* rnn.h - the time loop of a recurrent layer (one layer, one direction), whose node autograd
 * records as one op, and its backward through time (lib/autograd_grads.c). The layers and the
 * cells (lib/nn/recurrent.c) put the input projection, the directions and the layers around it. */
#ifndef KILN_OPS_RNN_H
#define KILN_OPS_RNN_H

#include <stdbool.h>

#include "autograd.h"
#include "kiln.h"

/* The cell of a scan; also the kernels' MODE (lib/kernels/rnn.cl). */
typedef enum kiln__rnn_mode {
    KILN__RNN_TANH = 0,
    KILN__RNN_RELU = 1,
    KILN__RNN_LSTM = 2,
    KILN__RNN_GRU = 3,
} kiln__rnn_mode;

/* Gates per hidden unit: 1 (RNN), 4 (LSTM: i, f, g, o), 3 (GRU: r, z, n), as PyTorch lays out
 * weight_ih / weight_hh ([gates H, in] and [gates H, H]). */
int kiln__rnn_gates(kiln__rnn_mode mode);

/* The scan over xg [T, B, G H] (the input projection x W_ih^T of every step, no bias) with
 * w_hh [G H, H], b_ih and b_hh [G H] (both or neither), h0 [B, H] and, for the LSTM, c0 [B, H]
 * (NULL: zeros), lengths an i32 [B] tensor of values in 1..T (NULL: every row T steps), reverse
 * for the backward direction. Per step one matmul (h W_hh^T) and one kernel. The result is
 * [T + 1, B, H], the LSTM's [T + 2, B, H]: the outputs by time (zeros past a row's length), then
 * h_n (the state after each row's last step), then c_n. All tensors are f32 or f64 of one dtype
 * on one device, with the shapes above (the caller checks, naming op). Recorded by autograd
 * (kind KILN__AG_RNN_SCAN) when one of the inputs requires grad. */
kiln_status kiln__rnn_scan(const char *op, kiln__rnn_mode mode, bool reverse, const kiln_tensor *xg,
                           const kiln_tensor *w_hh, const kiln_tensor *b_ih,
                           const kiln_tensor *b_hh, const kiln_tensor *h0, const kiln_tensor *c0,
                           const kiln_tensor *lengths, kiln_tensor **out);

/* The inputs of a KILN__AG_RNN_SCAN node: xg, w_hh, b_ih, b_hh, h0, c0, lengths, then what the
 * forward saved (the states before each step, the LSTM's cells before each step, the gate
 * activations). */
enum { KILN__RNN_NODE_INPUTS = 10 };

/* The backward of a scan node (mode in args->op, reverse in args->flags) for the gradient g of
 * its result: grads[i] for each of the first six inputs that requires grad. Per step one kernel
 * and one matmul; then one matmul for dW_hh and one sum per bias. */
kiln_status kiln__rnn_scan_bw(const kiln__ag_args *args, const kiln_tensor *g,
                              const kiln_tensor *const *in, kiln_tensor **grads);

#endif
