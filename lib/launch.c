/* launch.c - the same-device rule and kernel-argument checks shared by every op and launch. */
#include "launch.h"

#include <stdio.h>

#include "registry.h"
#include "status.h"
#include "tensor.h"

kiln_status kiln__same_device(const char *op, int n, const kiln_tensor *const *ts,
                              kiln_device **dev)
{
    const kiln_tensor *first = NULL;
    int first_arg = 0;
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            continue;
        char argname[32];
        snprintf(argname, sizeof argname, "argument %d", i + 1);
        kiln_status s = kiln__check_tensor(ts[i], op, argname);
        if (s != KILN_OK)
            return s;
        if (!first) {
            first = ts[i];
            first_arg = i + 1;
        } else if (ts[i]->dev != first->dev) {
            return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                               "%s: expected all tensors on the same device, got %s and %s "
                               "(arguments %d and %d of %s); copy with kiln_tensor_to()",
                               op, first->dev->info.spec, ts[i]->dev->info.spec, first_arg, i + 1,
                               op);
        }
    }
    if (dev)
        *dev = first ? first->dev : NULL;
    return KILN_OK;
}
