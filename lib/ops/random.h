/* random.h - the global seed generator (kiln_manual_seed, KILN_SEED_GLOBAL) and the random
 * fills and dropout with a seed taken as given, for layers and modules that draw theirs once. */
#ifndef KILN_OPS_RANDOM_H
#define KILN_OPS_RANDOM_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln.h"

/* seed itself, or for KILN_SEED_GLOBAL the global generator's next seed (SplitMix64 from
 * kiln_manual_seed's seed; never KILN_SEED_GLOBAL). Thread-safe, lock-free. */
uint64_t kiln__seed_resolve(uint64_t seed);

/* kiln_rand_uniform / kiln_rand_normal with seed used as it is (even KILN_SEED_GLOBAL is a key
 * here, so that a seed derived from a drawn one never draws again); messages name op, the public
 * function called (kiln_linear_create ...). */
kiln_status kiln__rand(const char *op, bool uniform, kiln_device *dev, kiln_dtype dtype, int ndim,
                       const int64_t *shape, uint64_t seed, double a, double b, kiln_tensor **out);

#endif
