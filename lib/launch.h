/* launch.h - launching kernels: kiln_arg arguments, their checks, the local size and the
 * enqueue, shared by every op and kiln_program_launch. */
#ifndef KILN_LAUNCH_H
#define KILN_LAUNCH_H

#include <stdbool.h>

#include "kiln_cl.h"

struct kiln__kernel;

/* An argument only kiln's own kernels take: the device's error word (queue.h), as a
 * `global int *` parameter followed by the op's code, kiln_arg_i32(kiln__queue_error_code(op)).
 * A launch that passes it arms the device's next error check. */
#define KILN__ARG_ERROR_WORD ((kiln_arg_kind)100)
kiln_arg kiln__arg_error_word(void);

/* Launch a built-in kernel with kiln_arg arguments (tensors are checked to be on the kernel's
 * device by the caller, see kiln__same_device in tensor.h). global has work_dim entries; local
 * NULL lets kiln choose a valid size and pads global up to a multiple of it. The range is then
 * capped (at most 2^30 work-items in dimension 0, 65535 work-groups in dimensions 1 and 2;
 * lower with the test-only knobs of splits.c), so the kernel must cover the rest itself with
 * grid-stride loops (KILN_FOR, prelude.cl). A launch with a zero global size is a no-op. User
 * kernels go through kiln_program_launch, which runs the range as asked. */
kiln_status kiln__kernel_launch(kiln_device *dev, struct kiln__kernel *k, const char *op,
                                int work_dim, const size_t *global, const size_t *local, int nargs,
                                const kiln_arg *args);

/* The local size kiln picks for a launch with local = NULL: within the kernel's work-group
 * size (and at most 256), a multiple of its preferred multiple in 1-D, close to the global
 * size; in 2-D and 3-D square-ish on GPUs, long in dimension 0 (up to 64) on CPU devices.
 * local gets work_dim entries. */
void kiln__choose_local(const struct kiln__kernel *k, int work_dim, const size_t *global,
                        size_t *local);

#endif
