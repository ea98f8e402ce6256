/* prewarm.h - kiln-info --prewarm: a device's built-in kernels built by several processes side by
 * side (PoCL compiles one program at a time in a process). */
#ifndef KILN_INFO_PREWARM_H
#define KILN_INFO_PREWARM_H

#include <stddef.h>

#include "kiln.h"

/* The number of processes --prewarm uses by default: one per online core, at most 8. */
int prewarm_default_procs(void);

/* Build every built-in kernel of dev in procs processes (kiln-info itself, run with
 * --prewarm-part I/N -d SPEC), each building one part (kiln_device_prewarm_part); procs 1 builds
 * in this process, as do parts whose process cannot be started. On a terminal, one progress line
 * counts the kernels of all parts. Returns KILN_OK with *built the kernels ready and *used the
 * processes that built them, or a failure with its message in err. */
kiln_status prewarm_device(kiln_device *dev, int procs, int *built, int *used, char *err,
                           size_t errlen);

/* The child's side: build part "I/N" of dev and report to stdout, a line each: "progress D T"
 * as kernels are built, then "built N" or "error MESSAGE". Returns the exit code (0 or 1). */
int prewarm_part_child(kiln_device *dev, const char *part);

#endif
