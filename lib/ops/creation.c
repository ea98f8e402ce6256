/* creation.c - tensors made from a constant or a range: kiln_fill, kiln_full, kiln_ones,
 * kiln_arange, with their exact _i64 forms and kiln_arange_out. */
#include <math.h>
#include <stdio.h>

#include "clcall.h"
#include "common.h"
#include "launch.h"
#include "program.h"
#include "queue.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

static kiln_status check_value(const char *op, kiln_dtype dtype, kiln__scalar value)
{
    if (!kiln__scalar_value_fits(dtype, value)) {
        char v[48];
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: value %s does not fit dtype %s; use a floating dtype or a value "
                           "in range",
                           op, kiln__scalar_str(v, sizeof v, value), kiln_dtype_name(dtype));
    }
    return KILN_OK;
}

/* f64 on a device without fp64 is storage only: no kernel can compute in it, so it is filled
 * with the driver's pattern fill. */
static kiln_status pattern_fill(kiln_tensor *t, kiln__scalar value, const char *op)
{
    double v = value.is_i64 ? (double)value.i : value.f;
    cl_int err = kiln__cl.EnqueueFillBuffer(kiln__queue(t->dev), t->storage->mem, &v, sizeof v, 0,
                                            t->nbytes, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clEnqueueFillBuffer", t->dev);
    return KILN_OK;
}

static kiln_status fill(kiln_tensor *t, kiln__scalar value, const char *op)
{
    kiln_status s = check_value(op, t->dtype, value);
    if (s != KILN_OK || t->numel == 0)
        return s;
    kiln__tensor_bump(t);
    if ((s = kiln__device_open(t->dev, op)) != KILN_OK)
        return s;
    if (kiln__dtype_needs_fp64(t->dtype) && !t->dev->info.fp64)
        return pattern_fill(t, value, op);
    kiln_arg arg = kiln__arg_scalar(t->dtype, value);
    return kiln__fill_kernel(t, "creation", "kiln_fill", op, 1, &arg);
}

kiln_status kiln_fill(kiln_tensor *t, double value)
{
    kiln_status s = kiln__check_tensor(t, "kiln_fill", "argument 1");
    if (s != KILN_OK)
        return s;
    return fill(t, (kiln__scalar){.f = value}, "kiln_fill");
}

kiln_status kiln_fill_i64(kiln_tensor *t, int64_t value)
{
    kiln_status s = kiln__check_tensor(t, "kiln_fill_i64", "argument 1");
    if (s != KILN_OK)
        return s;
    return fill(t, (kiln__scalar){.is_i64 = true, .i = value}, "kiln_fill_i64");
}

static kiln_status full(const char *op, kiln_device *dev, kiln_dtype dtype, int ndim,
                        const int64_t *shape, kiln__scalar value, kiln_tensor **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = check_value(op, dtype, value);
    if (s != KILN_OK)
        return s;
    kiln_tensor *t = NULL;
    s = kiln__tensor_new(dev, dtype, ndim, shape, op, &t);
    if (s != KILN_OK)
        return s;
    return kiln__finish(fill(t, value, op), t, NULL, out);
}

kiln_status kiln_full(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                      double value, kiln_tensor **out)
{
    return full("kiln_full", dev, dtype, ndim, shape, (kiln__scalar){.f = value}, out);
}

kiln_status kiln_full_i64(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                          int64_t value, kiln_tensor **out)
{
    return full("kiln_full_i64", dev, dtype, ndim, shape,
                (kiln__scalar){.is_i64 = true, .i = value}, out);
}

kiln_status kiln_ones(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                      kiln_tensor **out)
{
    return full("kiln_ones", dev, dtype, ndim, shape, (kiln__scalar){.f = 1.0}, out);
}

/* Integer dtypes: integral start and step, start and the last element within range (and a step
 * that matters within i64: the kernel adds it modulo 2^bits). */
static kiln_status check_int_range(const char *op, kiln_dtype dtype, double start, double step,
                                   double last, const char *range)
{
    if (kiln__dtype_is_float(dtype) ||
        (start == floor(start) && step == floor(step) && kiln__dtype_scalar_fits(dtype, start) &&
         kiln__dtype_scalar_fits(dtype, last) &&
         (last == start || kiln__dtype_scalar_fits(KILN_I64, step))))
        return KILN_OK;
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: an integer dtype (%s) needs integral start and step, and values "
                       "within its range, got %s",
                       op, kiln_dtype_name(dtype), range);
}

/* Element count of arange, or -1 with the message set. */
static int64_t arange_count(kiln_dtype dtype, double start, double end, double step)
{
    const char *op = "kiln_arange";
    if (!isfinite(start) || !isfinite(end) || !isfinite(step)) {
        kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: start %g, end %g and step %g must be finite",
                    op, start, end, step);
        return -1;
    }
    if (step == 0 || (end - start) * step < 0) {
        kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: step %g %s; the range [%g, %g) needs a %s step",
                    op, step, step == 0 ? "is zero" : "has the wrong sign", start, end,
                    end >= start ? "positive" : "negative");
        return -1;
    }
    double count = ceil((end - start) / step);
    if (count > 9.0e15) {
        kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the range has %g elements, too many", op,
                    count);
        return -1;
    }
    double last = count > 0 ? start + (count - 1) * step : start;
    char range[128];
    snprintf(range, sizeof range, "start %g, end %g, step %g", start, end, step);
    if (check_int_range(op, dtype, start, step, last, range) != KILN_OK)
        return -1;
    return (int64_t)count;
}

/* The same in exact integer arithmetic: the distance and the count in uint64_t. */
static int64_t arange_count_i64(kiln_dtype dtype, int64_t start, int64_t end, int64_t step)
{
    const char *op = "kiln_arange_i64";
    if (step == 0 || (step > 0 && end < start) || (step < 0 && end > start)) {
        kiln__error(KILN_ERR_INVALID_ARGUMENT,
                    "%s: step %lld %s; the range [%lld, %lld) needs a %s step", op, (long long)step,
                    step == 0 ? "is zero" : "has the wrong sign", (long long)start, (long long)end,
                    end >= start ? "positive" : "negative");
        return -1;
    }
    uint64_t dist = step > 0 ? (uint64_t)end - (uint64_t)start : (uint64_t)start - (uint64_t)end;
    uint64_t ustep = step > 0 ? (uint64_t)step : 0 - (uint64_t)step;
    uint64_t count = dist / ustep + (dist % ustep != 0);
    if (count > (uint64_t)INT64_MAX / 8) {
        kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the range has %llu elements, too many", op,
                    (unsigned long long)count);
        return -1;
    }
    /* Between start and end, so it fits int64_t. */
    int64_t last = count > 0 ? (int64_t)((uint64_t)start + (count - 1) * (uint64_t)step) : start;
    if (!kiln__i64_fits(dtype, start) || !kiln__i64_fits(dtype, last)) {
        kiln__error(KILN_ERR_INVALID_ARGUMENT,
                    "%s: the values %lld .. %lld do not fit dtype %s; use a wider dtype", op,
                    (long long)start, (long long)last, kiln_dtype_name(dtype));
        return -1;
    }
    return (int64_t)count;
}

/* An integer dtype's arange scalars as exact integers (checked integral and within i64). */
static kiln__scalar arange_scalar(kiln_dtype dtype, double v)
{
    if (kiln__dtype_is_float(dtype))
        return (kiln__scalar){.f = v};
    return (kiln__scalar){.is_i64 = true,
                          .i = kiln__dtype_scalar_fits(KILN_I64, v) ? (int64_t)v : 0};
}

/* Write start + i * step into the 1-D t (integer dtypes wrap modulo 2^bits on the way, so a
 * negative step works for u8 too). */
static kiln_status arange_fill(kiln_tensor *t, kiln__scalar start, kiln__scalar step,
                               const char *op)
{
    kiln_arg args[2] = {kiln__arg_scalar(t->dtype, start), kiln__arg_scalar(t->dtype, step)};
    return kiln__fill_kernel(t, "creation", "kiln_arange", op, 2, args);
}

/* Both allocating forms: the count by the double rules or, for exact integers, the integer
 * ones. */
static kiln_status arange(const char *op, kiln_device *dev, kiln_dtype dtype, kiln__scalar start,
                          kiln__scalar end, kiln__scalar step, kiln_tensor **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_device(dev, op);
    if (s == KILN_OK)
        s = kiln__check_dtype_on(dev, dtype, op);
    if (s != KILN_OK)
        return s;
    int64_t n = start.is_i64 ? arange_count_i64(dtype, start.i, end.i, step.i)
                             : arange_count(dtype, start.f, end.f, step.f);
    if (n < 0)
        return KILN_ERR_INVALID_ARGUMENT;
    if (!start.is_i64) {
        start = arange_scalar(dtype, start.f);
        step = arange_scalar(dtype, step.f);
    }
    kiln_tensor *t = NULL;
    if ((s = kiln__tensor_new(dev, dtype, 1, &n, op, &t)) != KILN_OK)
        return s;
    return kiln__finish(arange_fill(t, start, step, op), t, NULL, out);
}

kiln_status kiln_arange(kiln_device *dev, kiln_dtype dtype, double start, double end, double step,
                        kiln_tensor **out)
{
    return arange("kiln_arange", dev, dtype, (kiln__scalar){.f = start}, (kiln__scalar){.f = end},
                  (kiln__scalar){.f = step}, out);
}

kiln_status kiln_arange_i64(kiln_device *dev, kiln_dtype dtype, int64_t start, int64_t end,
                            int64_t step, kiln_tensor **out)
{
    return arange("kiln_arange_i64", dev, dtype, (kiln__scalar){.is_i64 = true, .i = start},
                  (kiln__scalar){.is_i64 = true, .i = end},
                  (kiln__scalar){.is_i64 = true, .i = step}, out);
}

kiln_status kiln_arange_out(double start, double step, kiln_tensor *out)
{
    const char *op = "kiln_arange_out";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    kiln_status s = kiln__check_tensor(out, op, "out");
    if (s == KILN_OK)
        s = kiln__check_dtype_on(out->dev, out->dtype, op);
    if (s != KILN_OK)
        return s;
    if (out->ndim != 1) {
        char sh[160];
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: out has shape %s; arange writes a 1-D tensor (reshape it)", op,
                           kiln__shape_str(sh, sizeof sh, out->ndim, out->shape));
    }
    if (!isfinite(start) || !isfinite(step) || step == 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: start %g and step %g must be finite, and step nonzero", op, start,
                           step);
    int64_t n = out->shape[0];
    double last = n > 0 ? start + (double)(n - 1) * step : start;
    char range[128];
    snprintf(range, sizeof range, "start %g, step %g over %lld elements", start, step,
             (long long)n);
    if ((s = check_int_range(op, out->dtype, start, step, last, range)) != KILN_OK)
        return s;
    return arange_fill(out, arange_scalar(out->dtype, start), arange_scalar(out->dtype, step), op);
}
