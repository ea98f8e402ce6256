/* dtype.c - the facts of every dtype, generated from KILN_DTYPE_MAP in kiln.h. Nothing else in
 * lib/ lists dtypes: adding one is a line in the table (see CONTRIBUTING.md). */
#include "dtype.h"
#include "halfconv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct dtype_info {
    const char *name, *cl, *clc;
    size_t size;
    bool floating, is_signed;
} dtype_info;

static const dtype_info dtypes[] = {
#define KILN__DTYPE_INFO(NAME, num, name, bytes, cl, clc, fl, sg)                                  \
    [num] = {#name, #cl, #clc, bytes, fl, sg},
    KILN_DTYPE_MAP(KILN__DTYPE_INFO)
#undef KILN__DTYPE_INFO
};

static const dtype_info *info(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) ? &dtypes[dtype] : NULL;
}

bool kiln__dtype_valid(kiln_dtype dtype)
{
    /* Values are explicit in the table: a gap would be a slot without a name. */
    return (unsigned)dtype < sizeof dtypes / sizeof dtypes[0] && dtypes[dtype].name;
}

size_t kiln__dtype_size(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) ? dtypes[dtype].size : 0;
}

const char *kiln__dtype_name(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) ? dtypes[dtype].name : "?";
}

size_t kiln_dtype_size(kiln_dtype dtype)
{
    return kiln__dtype_size(dtype);
}

const char *kiln_dtype_name(kiln_dtype dtype)
{
    return kiln__dtype_name(dtype);
}

const char *kiln__dtype_list(void)
{
#define KILN__DTYPE_LIST(NAME, num, name, bytes, cl, clc, fl, sg) ", KILN_" #NAME
    static const char list[] = KILN_DTYPE_MAP(KILN__DTYPE_LIST);
#undef KILN__DTYPE_LIST
    return list + 2; /* without the first ", " */
}

const char *kiln__dtype_cl_type(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) ? dtypes[dtype].cl : "?";
}

const char *kiln__dtype_cl_compute_type(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) ? dtypes[dtype].clc : "?";
}

kiln_dtype kiln__dtype_compute(kiln_dtype dtype)
{
    const dtype_info *d = info(dtype);
    for (int i = 0; d && i < (int)(sizeof dtypes / sizeof dtypes[0]); i++)
        if (dtypes[i].name && strcmp(dtypes[i].cl, d->clc) == 0)
            return (kiln_dtype)i;
    return dtype;
}

bool kiln__dtype_is_float(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) && dtypes[dtype].floating;
}

bool kiln__dtype_is_signed(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) && dtypes[dtype].is_signed;
}

bool kiln__dtype_is_half(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) && strcmp(dtypes[dtype].cl, "half") == 0;
}

bool kiln__dtype_is_bf16(kiln_dtype dtype)
{
    /* the one floating dtype that OpenCL C holds in an integer type */
    return kiln__dtype_valid(dtype) && dtypes[dtype].floating &&
           strcmp(dtypes[dtype].cl, "ushort") == 0;
}

bool kiln__dtype_is_narrow(kiln_dtype dtype)
{
    return kiln__dtype_is_half(dtype) || kiln__dtype_is_bf16(dtype);
}

const char *kiln__dtype_narrow_macro(kiln_dtype dtype)
{
    return kiln__dtype_is_half(dtype) ? "HALF" : kiln__dtype_is_bf16(dtype) ? "BF16" : NULL;
}

bool kiln__dtype_needs_fp64(kiln_dtype dtype)
{
    return kiln__dtype_valid(dtype) && strcmp(dtypes[dtype].clc, "double") == 0;
}

const char *kiln__dtype_cl_unsigned_type(kiln_dtype dtype)
{
    if (!kiln__dtype_valid(dtype) || dtypes[dtype].floating)
        return NULL;
    return kiln__dtype_cl_uint(dtypes[dtype].size);
}

const char *kiln__dtype_cl_uint(size_t bytes)
{
    switch (bytes) { /* OpenCL C's integer types have fixed widths */
    case 1:
        return "uchar";
    case 2:
        return "ushort";
    case 4:
        return "uint";
    default:
        return "ulong";
    }
}

bool kiln__dtype_scalar_fits(kiln_dtype dtype, double v)
{
    const dtype_info *d = info(dtype);
    if (!d || d->floating)
        return true;
    /* Bounds are exact powers of two, so every comparison is exact in double. */
    int bits = (int)(8 * d->size);
    double lo = d->is_signed ? -ldexp(1.0, bits - 1) : 0.0;
    double hi = ldexp(1.0, d->is_signed ? bits - 1 : bits);
    double t = trunc(v);
    return t >= lo && t < hi; /* false for NaN */
}

char *kiln__dtype_defines(char *buf, size_t size, const char *slot, kiln_dtype dtype)
{
    size_t used = strnlen(buf, size);
    const char *narrow = kiln__dtype_narrow_macro(dtype);
    snprintf(buf + used, size - used, "%s-DKILN_%s=%s -DKILN_%sC=%s%s%s%s%s%s", used ? " " : "",
             slot, kiln__dtype_cl_type(dtype), slot, kiln__dtype_cl_compute_type(dtype),
             narrow ? " -DKILN_" : "", narrow ? slot : "", narrow ? "_" : "", narrow ? narrow : "",
             narrow ? "=1" : "");
    return buf;
}

kiln__host_value kiln__dtype_load(kiln_dtype dtype, const void *buf, int64_t i)
{
    kiln__host_value r = {0};
    const dtype_info *d = info(dtype);
    if (!d)
        return r;
    const unsigned char *p = (const unsigned char *)buf + (size_t)i * d->size;
    r.floating = d->floating;
    if (d->floating) {
        if (d->size == 2) {
            uint16_t h;
            memcpy(&h, p, 2);
            r.f = kiln__dtype_is_bf16(dtype) ? kiln__bf16_to_f32(h) : kiln__f16_to_f32(h);
        } else if (d->size == 4) {
            float f;
            memcpy(&f, p, 4);
            r.f = f;
        } else {
            memcpy(&r.f, p, 8);
        }
        return r;
    }
    uint64_t u = 0;
    memcpy(&u, p, d->size); /* little-endian: the low bytes */
    if (d->is_signed && d->size < 8 && (u >> (8 * d->size - 1)) & 1)
        u |= ~(uint64_t)0 << (8 * d->size); /* sign-extend */
    r.i = (int64_t)u;
    r.f = (double)r.i;
    return r;
}

/* Float -> integer of `bytes` (signed or not): truncated toward zero, saturated, NaN 0. */
static uint64_t int_from_double(double d, size_t bytes, bool is_signed)
{
    if (isnan(d))
        return 0;
    double t = trunc(d);
    int bits = 8 * (int)bytes;
    if (!is_signed) {
        uint64_t max = bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
        return t <= 0 ? 0 : t >= ldexp(1.0, bits) ? max : (uint64_t)t;
    }
    double lim = ldexp(1.0, bits - 1); /* 2^(bits-1) */
    int64_t max = bits >= 64 ? INT64_MAX : ((int64_t)1 << (bits - 1)) - 1;
    int64_t min = -max - 1;
    return (uint64_t)(t >= lim ? max : t < -lim ? min : (int64_t)t);
}

void kiln__dtype_store(kiln_dtype dtype, void *buf, int64_t i, kiln__host_value v)
{
    const dtype_info *d = info(dtype);
    if (!d)
        return;
    unsigned char *p = (unsigned char *)buf + (size_t)i * d->size;
    if (d->floating) {
        if (d->size == 2 && kiln__dtype_is_bf16(dtype)) {
            /* a double in one rounding, an integer through f32: as kiln_cast's kernels */
            uint16_t h = v.floating ? kiln__f64_to_bf16(v.f) : kiln__f32_to_bf16((float)v.i);
            memcpy(p, &h, 2);
        } else if (d->size == 2) {
            /* through f32, as kiln_cast's kernels convert (f16 computes in f32) */
            uint16_t h = kiln__f32_to_f16(v.floating ? (float)v.f : (float)v.i);
            memcpy(p, &h, 2);
        } else if (d->size == 4) {
            float f = v.floating ? (float)v.f : (float)v.i;
            memcpy(p, &f, 4);
        } else {
            double f = v.floating ? v.f : (double)v.i;
            memcpy(p, &f, 8);
        }
        return;
    }
    /* integer -> integer wraps (the low bytes of two's complement); float saturates */
    uint64_t u = v.floating ? int_from_double(v.f, d->size, d->is_signed) : (uint64_t)v.i;
    memcpy(p, &u, d->size); /* little-endian: the low bytes */
}
