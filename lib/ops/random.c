/* random.c - kiln_rand_uniform and kiln_rand_normal: Philox4x32-10 numbers that are
 * bit-identical on every device for a given seed and shape (lib/kernels/random.cl). */
#include <math.h>
#include <stdatomic.h>

#include "random.h"

#include "common.h"
#include "launch.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

static kiln_status check_params(const char *op, kiln_dtype dtype, double a, double b, bool uniform)
{
    if (kiln__dtype_valid(dtype) && !kiln__dtype_is_float(dtype))
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: dtype %s is not supported; random numbers come in f32, f64, "
                           "f16 or bf16 (cast the result with kiln_cast)",
                           op, kiln_dtype_name(dtype));
    if (!isfinite(a) || !isfinite(b) || fabs(a) > 3.0e38 || fabs(b) > 3.0e38)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s %g and %s %g must be finite f32 values", op,
                           uniform ? "low" : "mean", a, uniform ? "high" : "stddev", b);
    if (uniform && !((float)a < (float)b))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: low %g must be less than high %g (as f32)", op, a, b);
    if (!uniform && b < 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: stddev %g is negative", op, b);
    return KILN_OK;
}

/* The global generator: SplitMix64 (Steele, Lea and Flood 2014), its state a Weyl sequence
 * advanced atomically, so that threads drawing at once each get a different output of the one
 * sequence. The state starts as kiln_manual_seed(0) would set it. */
#define GOLDEN 0x9e3779b97f4a7c15u
static _Atomic uint64_t seed_state;

void kiln_manual_seed(uint64_t seed)
{
    atomic_store(&seed_state, seed);
}

static uint64_t splitmix64_next(void)
{
    uint64_t z = atomic_fetch_add(&seed_state, GOLDEN) + GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

uint64_t kiln__seed_resolve(uint64_t seed)
{
    if (seed != KILN_SEED_GLOBAL)
        return seed;
    uint64_t z;
    do /* one output in 2^64 is KILN_SEED_GLOBAL itself: skipped */
        z = splitmix64_next();
    while (z == KILN_SEED_GLOBAL);
    return z;
}

/* Fill `given`, or a new tensor of dtype and shape on dev into *out. */
static kiln_status generate(const char *op, bool uniform, kiln_device *dev, kiln_dtype dtype,
                            int ndim, const int64_t *shape, uint64_t seed, double a, double b,
                            kiln_tensor *given, kiln_tensor **out)
{
    kiln_status s = KILN_OK;
    if (given) {
        dev = given->dev;
        dtype = given->dtype;
    } else {
        if (!out)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
        *out = NULL;
        s = kiln__check_device(dev, op);
    }
    if (s == KILN_OK)
        s = check_params(op, dtype, a, b, uniform);
    if (s == KILN_OK)
        s = kiln__check_dtype_on(dev, dtype, op);
    if (s != KILN_OK)
        return s;
    kiln_tensor *t = given;
    if (!given && (s = kiln__tensor_new(dev, dtype, ndim, shape, op, &t)) != KILN_OK)
        return s;
    /* The kernel of the allocating form: the _out form makes the same numbers. The key words
     * travel as i32 bit patterns: kiln_arg has no unsigned kind. */
    const char *name = uniform ? "kiln_rand_uniform" : "kiln_rand_normal";
    kiln_arg args[4] = {kiln_arg_i32((int32_t)(uint32_t)(seed & 0xffffffffu)),
                        kiln_arg_i32((int32_t)(uint32_t)(seed >> 32)), kiln_arg_f32((float)a),
                        kiln_arg_f32((float)b)};
    return kiln__finish(kiln__fill_kernel(t, "random", name, op, 4, args), t, given, out);
}

kiln_status kiln__rand(const char *op, bool uniform, kiln_device *dev, kiln_dtype dtype, int ndim,
                       const int64_t *shape, uint64_t seed, double a, double b, kiln_tensor **out)
{
    return generate(op, uniform, dev, dtype, ndim, shape, seed, a, b, NULL, out);
}

/* The public forms draw a seed for KILN_SEED_GLOBAL once the device, dtype and numbers are
 * checked: a call refused for them draws nothing. */
static kiln_status generate_new(bool uniform, kiln_device *dev, kiln_dtype dtype, int ndim,
                                const int64_t *shape, uint64_t seed, double a, double b,
                                kiln_tensor **out)
{
    const char *op = uniform ? "kiln_rand_uniform" : "kiln_rand_normal";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_device(dev, op);
    if (s == KILN_OK)
        s = check_params(op, dtype, a, b, uniform);
    if (s == KILN_OK)
        s = kiln__check_dtype_on(dev, dtype, op);
    if (s != KILN_OK)
        return s;
    return generate(op, uniform, dev, dtype, ndim, shape, kiln__seed_resolve(seed), a, b, NULL,
                    out);
}

kiln_status kiln_rand_uniform(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                              uint64_t seed, double low, double high, kiln_tensor **out)
{
    return generate_new(true, dev, dtype, ndim, shape, seed, low, high, out);
}

kiln_status kiln_rand_normal(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                             uint64_t seed, double mean, double stddev, kiln_tensor **out)
{
    return generate_new(false, dev, dtype, ndim, shape, seed, mean, stddev, out);
}

/* The _out forms: out's own device, dtype and shape. */
static kiln_status generate_out(const char *op, bool uniform, uint64_t seed, double a, double b,
                                kiln_tensor *out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    kiln_status s = kiln__check_tensor(out, op, "out");
    if (s == KILN_OK)
        s = check_params(op, out->dtype, a, b, uniform);
    if (s == KILN_OK)
        s = kiln__check_dtype_on(out->dev, out->dtype, op);
    if (s != KILN_OK)
        return s;
    return generate(op, uniform, out->dev, out->dtype, out->ndim, out->shape,
                    kiln__seed_resolve(seed), a, b, out, NULL);
}

kiln_status kiln_rand_uniform_out(uint64_t seed, double low, double high, kiln_tensor *out)
{
    return generate_out("kiln_rand_uniform_out", true, seed, low, high, out);
}

kiln_status kiln_rand_normal_out(uint64_t seed, double mean, double stddev, kiln_tensor *out)
{
    return generate_out("kiln_rand_normal_out", false, seed, mean, stddev, out);
}
