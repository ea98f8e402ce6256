/* splits.h - the caps on built-in launches, below both users of them: program.c builds a
 * device's built-in programs split or not (KILN_NO_SPLIT), launch.c caps their launches. */
#ifndef KILN_SPLITS_H
#define KILN_SPLITS_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln.h"

/* Limits of one launch. Dimension 0: NVIDIA's global ids wrap at 2^31 work-items. Dimensions 1
 * and 2: NVIDIA maps them onto a CUDA grid, whose y and z sizes stop at 65535 work-groups; kiln
 * holds every device to that, the portable limit. */
#define KILN__MAX_ITEMS_DIM0 ((size_t)1 << 30)
#define KILN__MAX_GROUPS_YZ ((size_t)65535)

/* Whether built-in launches on dev are capped and split (their kernels looping over the rest):
 * on every GPU and accelerator, and everywhere when a test knob lowers the caps (splits.c). CPU
 * devices (64-bit ids, no grid limits) run each launch whole, and their built-in programs are
 * built with -DKILN_NO_SPLIT=1, which makes KILN_FOR loop-free: a loop in a kernel stops PoCL
 * from vectorizing across work-items (LLVM vectorizes innermost loops only), 2-4x slower. */
bool kiln__launch_splits(const kiln_device *dev);

/* The caps of a built-in launch: the work-items in dimension 0 and the work-groups in
 * dimensions 1 and 2 (KILN__MAX_ITEMS_DIM0 and KILN__MAX_GROUPS_YZ, or lower: splits.c). */
void kiln__launch_caps(size_t *items_dim0, size_t *groups_yz);

#endif
