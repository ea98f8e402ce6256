/* creation.c - tensors made from a constant or a range: kiln_fill, kiln_full, kiln_ones,
 * kiln_arange. */
#include <math.h>

#include "clcall.h"
#include "common.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

static kiln_status check_value(const char *op, kiln_dtype dtype, double value)
{
    if (!kiln__dtype_scalar_fits(dtype, value))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: value %g does not fit dtype %s; use a floating dtype or a value "
                           "in range",
                           op, value, kiln_dtype_name(dtype));
    return KILN_OK;
}

/* f64 on a device without fp64 is storage only: no kernel can compute in it, so it is filled
 * with the driver's pattern fill. */
static kiln_status pattern_fill(kiln_tensor *t, double value, const char *op)
{
    cl_int err = kiln__cl.EnqueueFillBuffer(t->dev->queue, t->storage->mem, &value, sizeof value, 0,
                                            t->nbytes, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return kiln__cl_fail(err, op, "clEnqueueFillBuffer", t->dev->info.spec);
    return KILN_OK;
}

static kiln_status fill(kiln_tensor *t, double value, const char *op)
{
    kiln_status s = check_value(op, t->dtype, value);
    if (s != KILN_OK || t->numel == 0)
        return s;
    if ((s = kiln__device_open(t->dev, op)) != KILN_OK)
        return s;
    if (kiln__dtype_needs_fp64(t->dtype) && !t->dev->info.fp64)
        return pattern_fill(t, value, op);
    kiln_arg arg = kiln__arg_compute(t->dtype, value);
    return kiln__fill_kernel(t, "creation", "kiln_fill", op, 1, &arg);
}

kiln_status kiln_fill(kiln_tensor *t, double value)
{
    kiln_status s = kiln__check_tensor(t, "kiln_fill", "argument 1");
    if (s != KILN_OK)
        return s;
    return fill(t, value, "kiln_fill");
}

static kiln_status full(const char *op, kiln_device *dev, kiln_dtype dtype, int ndim,
                        const int64_t *shape, double value, kiln_tensor **out)
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
    return full("kiln_full", dev, dtype, ndim, shape, value, out);
}

kiln_status kiln_ones(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                      kiln_tensor **out)
{
    return full("kiln_ones", dev, dtype, ndim, shape, 1.0, out);
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
    if (!kiln__dtype_is_float(dtype) &&
        (start != floor(start) || step != floor(step) || !kiln__dtype_scalar_fits(dtype, start) ||
         !kiln__dtype_scalar_fits(dtype, last))) {
        kiln__error(KILN_ERR_INVALID_ARGUMENT,
                    "%s: an integer dtype (%s) needs integral start and step, and values within "
                    "its range, got start %g, end %g, step %g",
                    op, kiln_dtype_name(dtype), start, end, step);
        return -1;
    }
    return (int64_t)count;
}

kiln_status kiln_arange(kiln_device *dev, kiln_dtype dtype, double start, double end, double step,
                        kiln_tensor **out)
{
    const char *op = "kiln_arange";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_device(dev, op);
    if (s != KILN_OK)
        return s;
    if ((s = kiln__check_dtype_on(dev, dtype, op)) != KILN_OK)
        return s;
    int64_t n = arange_count(dtype, start, end, step);
    if (n < 0)
        return KILN_ERR_INVALID_ARGUMENT;
    kiln_tensor *t = NULL;
    s = kiln__tensor_new(dev, dtype, 1, &n, op, &t);
    if (s != KILN_OK)
        return s;
    kiln_arg args[2] = {kiln__arg_compute(dtype, start), kiln__arg_compute(dtype, step)};
    return kiln__finish(kiln__fill_kernel(t, "creation", "kiln_arange", op, 2, args), t, NULL, out);
}
