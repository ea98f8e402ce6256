/* backward.h - kiln_backward's parts (backward.c) and the gradient formulas (autograd_grads.c):
 * the autograd layer, above the ops (lib/layers.txt). */
#ifndef KILN_BACKWARD_H
#define KILN_BACKWARD_H

#include <stdbool.h>

#include "autograd_node.h"

/* The gradients of nd's inputs given g, the gradient of its result: grads[i] (a new reference)
 * for each input that requires grad, NULL for the others. Grad mode is off. On failure every
 * grads[i] is NULL. */
kiln_status kiln__ag_grads(const kiln__ag_node *nd, const kiln_tensor *g, kiln_tensor **grads);

/* During a kiln_backward on this thread: whether g is the implicit gradient 1 of a loss (the
 * backward was given no gradient) and the backward frees the graph, so that a loss node may
 * hand out the gradient it saved at the forward without a multiply. */
bool kiln__ag_unit_seed(const kiln_tensor *g);

#endif
