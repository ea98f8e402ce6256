/* layers.h - what module.c uses of the layer functions (lib/nn/layers.c). */
#ifndef KILN_NN_LAYERS_H
#define KILN_NN_LAYERS_H

#include <stdint.h>

#include "kiln.h"

/* kiln_dropout with seed used as it is: a dropout module draws its seed once, at creation. */
kiln_status kiln__dropout(const kiln_tensor *x, double p, uint64_t seed, kiln_tensor **y);

#endif
