/* recurrent.h - what module.c uses of the recurrent layers (lib/nn/recurrent.c). */
#ifndef KILN_NN_RECURRENT_H
#define KILN_NN_RECURRENT_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln.h"
#include "ops/rnn.h"

/* A recurrent layer stack as torch.nn.RNN / LSTM / GRU describe it. */
typedef struct kiln__rnn_config {
    kiln__rnn_mode mode;
    int64_t input_size, hidden_size;
    int layers, directions; /* >= 1; directions 1 or 2 */
    bool bias, batch_first;
    double dropout; /* on each layer's output but the last's, while training */
} kiln__rnn_config;

/* The stack's forward (kiln_rnn_forward's contract, op naming the caller): weights holds, for
 * layer l and direction d at index 4 (l D + d), w_ih, w_hh, b_ih and b_hh (NULL entries without
 * bias). Dropout between layers draws with seed + l when training. */
kiln_status kiln__rnn_run(const char *op, const kiln__rnn_config *cfg, kiln_tensor *const *weights,
                          const kiln_tensor *x, const int64_t *lengths, const kiln_tensor *h0,
                          const kiln_tensor *c0, bool training, uint64_t seed, kiln_tensor **y,
                          kiln_tensor **h_n, kiln_tensor **c_n);

#endif
