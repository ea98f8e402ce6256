/* common.c - dtype names for kernels and capability checks shared by the ops. */
#include "common.h"

#include <stdio.h>
#include <string.h>

#include "registry.h"
#include "status.h"

const char *kiln__cl_type(kiln_dtype dtype)
{
    static const char *const names[KILN_DTYPE_COUNT] = {"float", "double", "half",
                                                         "int",   "long",   "uchar"};
    return kiln__dtype_valid(dtype) ? names[dtype] : "?";
}

const char *kiln__cl_compute_type(kiln_dtype dtype)
{
    return dtype == KILN_F16 ? "float" : kiln__cl_type(dtype);
}

bool kiln__dtype_valid(kiln_dtype dtype)
{
    return (int)dtype >= 0 && (int)dtype < KILN_DTYPE_COUNT;
}

bool kiln__dtype_is_float(kiln_dtype dtype)
{
    return dtype == KILN_F32 || dtype == KILN_F64 || dtype == KILN_F16;
}

char *kiln__dtype_defines(char *buf, size_t size, const char *slot, kiln_dtype dtype)
{
    size_t used = strnlen(buf, size);
    snprintf(buf + used, size - used, "%s-DKILN_%s=%s -DKILN_%sC=%s%s%s%s", used ? " " : "", slot,
             kiln__cl_type(dtype), slot, kiln__cl_compute_type(dtype),
             dtype == KILN_F16 ? " -DKILN_" : "", dtype == KILN_F16 ? slot : "",
             dtype == KILN_F16 ? "_HALF=1" : "");
    return buf;
}

kiln_status kiln__check_dtype_on(kiln_device *dev, kiln_dtype dtype, const char *op)
{
    if (!kiln__dtype_valid(dtype))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", op, (int)dtype);
    if (dtype == KILN_F64 && !dev->info.fp64)
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: device %s (%s) has no fp64 support (cl_khr_fp64); use f32", op,
                           dev->info.spec, dev->info.name);
    return KILN_OK;
}
