/* launch.h - argument checks shared by every op and kernel launch. */
#ifndef KILN_LAUNCH_H
#define KILN_LAUNCH_H

#include "kiln_cl.h"

/* The same-device rule: all n tensors (NULL entries are skipped) must be valid and on one
 * device, checked before anything is enqueued. On a mismatch: KILN_ERR_DEVICE_MISMATCH with
 * "expected all tensors on the same device, got cpu:0 and cpu:1 (argument 2 of kiln_add); copy
 * with kiln_tensor_to()". *dev (optional) gets the common device. */
kiln_status kiln__same_device(const char *op, int n, const kiln_tensor *const *ts,
                              kiln_device **dev);

struct kiln__kernel;

/* The local size kiln picks for a launch with local = NULL: within the kernel's work-group
 * size (and at most 256), a multiple of its preferred multiple in 1-D, close to the global
 * size. local gets work_dim entries. */
void kiln__choose_local(const struct kiln__kernel *k, int work_dim, const size_t *global,
                        size_t *local);

#endif
