/* common.c - helpers shared by the ops: dtype names for kernels, capability checks, scalar
 * arguments and NumPy broadcasting. */
#include "common.h"

#include <stdio.h>
#include <string.h>

#include "registry.h"
#include "status.h"
#include "tensor.h"

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

/* Scalar args are built here rather than with kiln_arg_f32() and friends so that the ops'
 * argument lists stay plain data. */
static kiln_arg scalar_arg(kiln_dtype dtype, size_t size)
{
    kiln_arg a;
    memset(&a, 0, sizeof a);
    a.kind = KILN_ARG_SCALAR;
    a.dtype = dtype;
    a.size = size;
    return a;
}

kiln_arg kiln__arg_compute(kiln_dtype dtype, double v)
{
    kiln_arg a;
    switch (dtype) {
    case KILN_F64:
        a = scalar_arg(KILN_F64, sizeof(double));
        a.value.f64 = v;
        return a;
    case KILN_I32:
        a = scalar_arg(KILN_I32, sizeof(int32_t));
        a.value.i32 = kiln__scalar_fits(dtype, v) ? (int32_t)v : 0;
        return a;
    case KILN_I64:
        a = scalar_arg(KILN_I64, sizeof(int64_t));
        a.value.i64 = kiln__scalar_fits(dtype, v) ? (int64_t)v : 0;
        return a;
    case KILN_U8:
        a = scalar_arg(KILN_U8, sizeof(uint8_t));
        a.value.u8 = kiln__scalar_fits(dtype, v) ? (uint8_t)v : 0;
        return a;
    default: /* f32, and f16 which computes in f32 */
        a = scalar_arg(KILN_F32, sizeof(float));
        a.value.f32 = (float)v;
        return a;
    }
}

bool kiln__scalar_fits(kiln_dtype dtype, double v)
{
    /* Bounds are exact powers of two, so the comparisons are exact in double. */
    switch (dtype) {
    case KILN_I32:
        return v > -2147483649.0 && v < 2147483648.0;
    case KILN_I64:
        return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
    case KILN_U8:
        return v > -1.0 && v < 256.0;
    default:
        return true;
    }
}

kiln_arg kiln__arg_compute_i64(kiln_dtype dtype, int64_t v)
{
    kiln_arg a;
    switch (dtype) {
    case KILN_F64:
        a = scalar_arg(KILN_F64, sizeof(double));
        a.value.f64 = (double)v;
        return a;
    case KILN_I32:
        a = scalar_arg(KILN_I32, sizeof(int32_t));
        a.value.i32 = (int32_t)(uint32_t)(uint64_t)v;
        return a;
    case KILN_I64:
        a = scalar_arg(KILN_I64, sizeof(int64_t));
        a.value.i64 = v;
        return a;
    case KILN_U8:
        a = scalar_arg(KILN_U8, sizeof(uint8_t));
        a.value.u8 = (uint8_t)(uint64_t)v;
        return a;
    default: /* f32 (one rounding from int64), and f16 which computes in f32 */
        a = scalar_arg(KILN_F32, sizeof(float));
        a.value.f32 = (float)v;
        return a;
    }
}

bool kiln__i64_fits(kiln_dtype dtype, int64_t v)
{
    switch (dtype) {
    case KILN_I32:
        return v >= INT32_MIN && v <= INT32_MAX;
    case KILN_U8:
        return v >= 0 && v <= UINT8_MAX;
    default:
        return true;
    }
}

bool kiln__scalar_value_fits(kiln_dtype dtype, kiln__scalar v)
{
    return v.is_i64 ? kiln__i64_fits(dtype, v.i) : kiln__scalar_fits(dtype, v.f);
}

kiln_arg kiln__arg_scalar(kiln_dtype dtype, kiln__scalar v)
{
    return v.is_i64 ? kiln__arg_compute_i64(dtype, v.i) : kiln__arg_compute(dtype, v.f);
}

char *kiln__scalar_str(char *buf, size_t size, kiln__scalar v)
{
    if (v.is_i64)
        snprintf(buf, size, "%lld", (long long)v.i);
    else
        snprintf(buf, size, "%g", v.f);
    return buf;
}

char *kiln__shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used +=
            (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

static kiln_status bcast_error(const char *op, int n, const kiln_tensor *const *ts)
{
    char shapes[4][160];
    for (int i = 0; i < n; i++)
        kiln__shape_str(shapes[i], sizeof shapes[i], ts[i]->ndim, ts[i]->shape);
    return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                       "%s: shapes %s%s%s%s%s%s%s cannot be broadcast (NumPy rules: dimensions "
                       "align from the right and must be equal or 1)",
                       op, shapes[0], n > 2 ? ", " : " and ", shapes[1],
                       n > 2 ? (n > 3 ? ", " : " and ") : "", n > 2 ? shapes[2] : "",
                       n > 3 ? " and " : "", n > 3 ? shapes[3] : "");
}

/* Padded shape (right-aligned to nd dims) and contiguous strides of input t. */
static void bcast_input(const kiln_tensor *t, int nd, int64_t *shape, int64_t *stride)
{
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int k = d - (nd - t->ndim);
        shape[d] = k >= 0 ? t->shape[k] : 1;
        stride[d] = shape[d] == 1 ? 0 : acc;
        acc *= shape[d];
    }
}

kiln_status kiln__broadcast(const char *op, int n, const kiln_tensor *const *ts, kiln__bcast *bc)
{
    memset(bc, 0, sizeof *bc);
    bc->n = n;
    for (int i = 0; i < n; i++)
        bc->ndim = ts[i]->ndim > bc->ndim ? ts[i]->ndim : bc->ndim;
    int64_t shape[4][KILN_MAX_DIMS], stride[4][KILN_MAX_DIMS];
    for (int i = 0; i < n; i++)
        bcast_input(ts[i], bc->ndim, shape[i], stride[i]);
    bc->numel = 1;
    for (int d = 0; d < bc->ndim; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            if (shape[i][d] == 1)
                continue;
            if (size != 1 && size != shape[i][d])
                return bcast_error(op, n, ts);
            size = shape[i][d];
        }
        bc->shape[d] = size;
        bc->numel *= size;
    }
    for (int d = 0; d < bc->ndim; d++) {
        if (bc->shape[d] == 1)
            continue; /* contributes nothing to any index */
        int c = bc->nd;
        bool merge = c > 0;
        for (int i = 0; i < n && merge; i++)
            merge = bc->cstride[i][c - 1] == stride[i][d] * bc->shape[d];
        if (merge) {
            bc->cshape[c - 1] *= bc->shape[d];
            for (int i = 0; i < n; i++)
                bc->cstride[i][c - 1] = stride[i][d];
            continue;
        }
        bc->cshape[c] = bc->shape[d];
        for (int i = 0; i < n; i++)
            bc->cstride[i][c] = stride[i][d];
        bc->nd = c + 1;
    }
    return KILN_OK;
}

bool kiln__bcast_flat(const kiln__bcast *bc)
{
    if (bc->nd > 1)
        return false;
    for (int i = 0; i < bc->n && bc->nd == 1; i++)
        if (bc->cstride[i][0] != 1)
            return false;
    return true;
}

int kiln__bcast_args(const kiln__bcast *bc, kiln_arg *args)
{
    int k = 0, pad = KILN_MAX_DIMS - bc->nd;
    for (int s = 0; s < KILN_MAX_DIMS; s++) {
        args[k] = scalar_arg(KILN_I64, sizeof(int64_t));
        args[k++].value.i64 = s < pad ? 1 : bc->cshape[s - pad];
    }
    for (int i = 0; i < bc->n; i++) {
        for (int s = 0; s < KILN_MAX_DIMS; s++) {
            args[k] = scalar_arg(KILN_I64, sizeof(int64_t));
            args[k++].value.i64 = s < pad ? 0 : bc->cstride[i][s - pad];
        }
    }
    return k;
}
