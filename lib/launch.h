/* launch.h - argument checks shared by every op and kernel launch. */
#ifndef KILN_LAUNCH_H
#define KILN_LAUNCH_H

#include "kiln.h"

/* The same-device rule: all n tensors (NULL entries are skipped) must be valid and on one
 * device, checked before anything is enqueued. On a mismatch: KILN_ERR_DEVICE_MISMATCH with
 * "expected all tensors on the same device, got cpu:0 and cpu:1 (argument 2 of kiln_add); copy
 * with kiln_tensor_to()". *dev (optional) gets the common device. */
kiln_status kiln__same_device(const char *op, int n, const kiln_tensor *const *ts,
                              kiln_device **dev);

#endif
