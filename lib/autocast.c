/* autocast.c - autocast regions per thread: a stack of (device types, dtype), the innermost
 * region naming a device's type deciding (see autocast.h). */
#include "autocast.h"

#include "dtype.h"
#include "registry.h"
#include "status.h"

enum { MAX_DEPTH = 32 };

typedef struct region {
    kiln_device_type types;
    kiln_dtype dtype; /* KILN_F32: autocast off inside */
} region;

static _Thread_local region stack[MAX_DEPTH];
static _Thread_local int depth;
static _Thread_local int suspended;

kiln_status kiln_autocast_begin(kiln_device_type type, kiln_dtype dtype)
{
    const char *op = "kiln_autocast_begin";
    if (type == 0 || (type & ~KILN_DEVICE_ALL))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: device type 0x%x; use KILN_DEVICE_GPU, KILN_DEVICE_CPU, "
                           "KILN_DEVICE_ACCELERATOR or a combination (KILN_DEVICE_ALL)",
                           op, (unsigned)type);
    if (dtype != KILN_F16 && dtype != KILN_BF16 && dtype != KILN_F32)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: dtype %s; autocast runs in KILN_F16 or KILN_BF16 (KILN_F32 turns "
                           "it off inside the region)",
                           op, kiln__dtype_valid(dtype) ? kiln_dtype_name(dtype) : "unknown");
    if (depth == MAX_DEPTH)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: autocast regions nested deeper than %d; end some first", op,
                           MAX_DEPTH);
    stack[depth++] = (region){type, dtype};
    return KILN_OK;
}

kiln_status kiln_autocast_end(void)
{
    if (depth == 0)
        return kiln__error(KILN_ERR_STATE,
                           "kiln_autocast_end: no autocast region is open on this thread");
    depth--;
    return KILN_OK;
}

kiln_dtype kiln_autocast_dtype(const kiln_device *dev)
{
    if (!dev || suspended)
        return KILN_F32;
    for (int i = depth - 1; i >= 0; i--)
        if (stack[i].types & dev->info.type)
            return stack[i].dtype;
    return KILN_F32;
}

kiln_dtype kiln__autocast_lower(const kiln_device *dev)
{
    return depth == 0 ? KILN_F32 : kiln_autocast_dtype(dev);
}

int kiln__autocast_suspend(void)
{
    return suspended++;
}

void kiln__autocast_resume(int prev)
{
    suspended = prev;
}
