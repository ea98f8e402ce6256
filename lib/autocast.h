/* autocast.h - the calling thread's autocast regions (kiln_autocast_begin/_end, PyTorch's
 * torch.autocast): which dtype the lower-precision ops run in on a device, and a suspension for
 * kiln's own composite code (the backward, recurrent layers) that must run as written. The
 * casts themselves are ops/amp.c's. */
#ifndef KILN_AUTOCAST_H
#define KILN_AUTOCAST_H

#include "kiln.h"

/* The dtype autocast's lower-precision ops (matmul, linear, convolution) run in on dev now:
 * KILN_F16, or KILN_F32 when no region applies (or autocast is suspended). */
kiln_dtype kiln__autocast_lower(const kiln_device *dev);

/* Suspend autocast on this thread (nestable); returns the previous state for _resume. */
int kiln__autocast_suspend(void);
void kiln__autocast_resume(int prev);

#endif
