/* launch.c - launching kernels: the kiln_arg constructors, argument checks, the local size and
 * the enqueue shared by every op, and kiln_program_launch. */
#include "launch.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "argcheck.h"
#include "clcall.h"
#include "dtype.h"
#include "profiler.h"
#include "program.h"
#include "queue.h"
#include "registry.h"
#include "splits.h"
#include "status.h"
#include "tensor.h"

/* Bytes of a scalar argument of dtype; 0 for an unknown dtype. */
static size_t scalar_size(kiln_dtype dtype)
{
    return kiln__dtype_size(dtype);
}

/* Every member of the value union starts at its address; NULL for an unknown dtype. */
static const void *scalar_ptr(const kiln_arg *a)
{
    return kiln__dtype_valid(a->dtype) ? (const void *)&a->value : NULL;
}

/* A malformed argument, a dead tensor or one on another device (the slow path: the fast one
 * in check_args formats nothing). */
static kiln_status check_arg(kiln_device *dev, const kiln__kernel *k, const char *op, int i,
                             const kiln_arg *a)
{
    char argname[192];
    snprintf(argname, sizeof argname, "argument %d of kernel %s", i, k->name);
    if (a->kind == KILN_ARG_TENSOR) {
        kiln_status s = kiln__check_tensor(a->value.tensor, op, argname);
        if (s != KILN_OK)
            return s;
        if (a->value.tensor->dev != dev)
            return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                               "%s: %s is a tensor on %s, but the kernel runs on %s; copy it "
                               "with kiln_tensor_to()",
                               op, argname, a->value.tensor->dev->info.spec, dev->info.spec);
    } else if (a->kind == KILN_ARG_SCALAR) {
        if (!scalar_ptr(a))
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: %s has an unknown dtype %d; build it with kiln_arg_f32() "
                               "and friends",
                               op, argname, (int)a->dtype);
    } else if (a->kind == KILN_ARG_LOCAL) {
        if (a->size == 0 || a->size > dev->info.local_mem_bytes)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: %s asks for %zu bytes of local memory; %s has %llu", op,
                               argname, a->size, dev->info.spec,
                               (unsigned long long)dev->info.local_mem_bytes);
    } else {
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s has an unknown kind %d; build it with kiln_arg_tensor(), "
                           "kiln_arg_f32(), kiln_arg_local() ...",
                           op, argname, (int)a->kind);
    }
    return KILN_OK;
}

/* Every argument well-formed, every tensor live and on dev, and (user kernels whose driver
 * describes the parameters) each of the kind and type its parameter takes. */
static kiln_status check_args(kiln_device *dev, const kiln__kernel *k, const char *op, int nargs,
                              const kiln_arg *args, bool builtin)
{
    if (nargs < 0 || (nargs > 0 && !args) || (cl_uint)nargs != k->nargs)
        return kiln__error(
            KILN_ERR_INVALID_ARGUMENT, "%s: kernel %s takes %u arguments, %d given%s", op, k->name,
            (unsigned)k->nargs, nargs, nargs > 0 && !args ? " (but args is NULL)" : "");
    for (int i = 0; i < nargs; i++) {
        const kiln_arg *a = &args[i];
        /* The common case (all fine) formats nothing: this runs on every launch. */
        bool fine = (a->kind == KILN_ARG_TENSOR && a->value.tensor &&
                     a->value.tensor->magic == KILN__TENSOR_MAGIC && a->value.tensor->dev == dev &&
                     !atomic_load(&a->value.tensor->storage->mapped) &&
                     !a->value.tensor->storage->pinned) ||
                    (a->kind == KILN_ARG_SCALAR && scalar_ptr(a)) ||
                    (a->kind == KILN__ARG_ERROR_WORD && builtin);
        if (!fine) {
            kiln_status s = check_arg(dev, k, op, i, a);
            if (s != KILN_OK)
                return s;
        }
        if (k->params && a->kind != KILN__ARG_ERROR_WORD) {
            const kiln_tensor *t = a->kind == KILN_ARG_TENSOR ? a->value.tensor : NULL;
            kiln_dtype td = t ? t->dtype : KILN_F32; /* t is live: checked above */
            char msg[512];
            if (kiln__argcheck(k->name, i, &k->params[i], a, td, msg, sizeof msg) != KILN_OK)
                return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s", op, msg);
        }
    }
    return KILN_OK;
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 1;
    while (p < n && p < ((size_t)1 << 20))
        p <<= 1;
    return p;
}

/* A valid local size for the kernel when the caller gave none: within the kernel's work-group
 * size, a multiple of its preferred multiple in dimension 0 where that fits, not much larger
 * than the global size. */
void kiln__choose_local(const kiln__kernel *k, int work_dim, const size_t *global, size_t *local)
{
    size_t cap = k->wg_size < 256 ? k->wg_size : 256;
    if (work_dim == 1) {
        size_t m = k->wg_multiple ? k->wg_multiple : 1;
        if (k->max_items[0] && k->max_items[0] < cap)
            cap = k->max_items[0];
        size_t l = global[0] < cap ? global[0] : cap;
        l = (l + m - 1) / m * m; /* round up to the multiple ... */
        while (l > cap)
            l -= m; /* ... but stay within the cap */
        local[0] = l ? l : 1;
        return;
    }
    if (k->cpu) {
        /* A CPU driver runs a group as loops over its items, dimension 0 innermost and
         * vectorized: a group along dimension 0 reads whole runs of a row, where a 8x8x8 cube
         * reads 64 pieces of 8 elements far apart (PoCL: a [32, 64, 3136] + [1, 64, 1] bias add
         * took about 9 ms as cubes, 3 ms as 64 x 4 rows). Dimension 0 takes up to 64, the next
         * ones what the group has left. */
        size_t prod = 1;
        for (int d = 0; d < work_dim; d++) {
            size_t room = d == 0 ? (cap < 64 ? cap : 64) : cap / prod;
            size_t l = pow2_at_least(global[d]);
            while (l > room && l > 1)
                l /= 2; /* a power of two within the room */
            while (l > 1 && k->max_items[d] && l > k->max_items[d])
                l /= 2;
            local[d] = l ? l : 1;
            prod *= local[d];
        }
        return;
    }
    size_t per_dim = work_dim == 2 ? 16 : 8;
    for (int d = 0; d < work_dim; d++) {
        size_t l = pow2_at_least(global[d]);
        local[d] = l < per_dim ? l : per_dim;
        while (local[d] > 1 && k->max_items[d] && local[d] > k->max_items[d])
            local[d] /= 2;
    }
    for (;;) {
        size_t prod = 1;
        int big = 0;
        for (int d = 0; d < work_dim; d++) {
            prod *= local[d];
            if (local[d] > local[big])
                big = d;
        }
        if (prod <= k->wg_size || local[big] == 1)
            return;
        local[big] /= 2;
    }
}

/* Check or choose the local size, and pad global to a multiple of it. */
static kiln_status shape_ndrange(const kiln__kernel *k, const char *op, int work_dim,
                                 const size_t *global, const size_t *local, size_t *g, size_t *l)
{
    if (!local) {
        kiln__choose_local(k, work_dim, global, l);
        for (int d = 0; d < work_dim; d++) {
            size_t ld = l[d] ? l[d] : 1; /* never 0: kiln__choose_local gives at least 1 */
            l[d] = ld;
            size_t r = global[d] % ld;
            if (r && global[d] > SIZE_MAX - (ld - r))
                return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: global size %zu is too large",
                                   op, global[d]);
            g[d] = r ? global[d] + (ld - r) : global[d];
        }
        return KILN_OK;
    }
    size_t prod = 1;
    for (int d = 0; d < work_dim; d++) {
        if (local[d] == 0 || global[d] % local[d] != 0)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: global size %zu in dimension %d is not a multiple of the "
                               "local size %zu; round global up (and bounds-check in the "
                               "kernel) or pass local = NULL to let kiln choose",
                               op, global[d], d, local[d]);
        if (k->max_items[d] && local[d] > k->max_items[d])
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: local size %zu in dimension %d exceeds the device's limit of "
                               "%zu work-items in that dimension; use a smaller local size or "
                               "NULL",
                               op, local[d], d, k->max_items[d]);
        prod *= local[d];
        g[d] = global[d];
        l[d] = local[d];
    }
    if (prod > k->wg_size)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: local size of %zu work-items exceeds kernel %s's limit of %zu on "
                           "this device; use a smaller local size or NULL",
                           op, prod, k->name, k->wg_size);
    return KILN_OK;
}

/* Cap a built-in launch (already padded to multiples of l): at most max_items_dim0 work-items
 * (a multiple of l[0], at least one group) in dimension 0 and max_groups_yz work-groups in
 * dimensions 1 and 2. Every built-in kernel loops over the rest (KILN_FOR, prelude.cl). */
static void cap_builtin(int work_dim, size_t *g, const size_t *l)
{
    size_t max_items_dim0, max_groups_yz;
    kiln__launch_caps(&max_items_dim0, &max_groups_yz);
    size_t most = max_items_dim0 / l[0] * l[0];
    if (most == 0)
        most = l[0];
    if (g[0] > most)
        g[0] = most;
    for (int d = 1; d < work_dim; d++)
        if (g[d] / l[d] > max_groups_yz)
            g[d] = max_groups_yz * l[d];
}

/* User launches run exactly as asked, within the portable group limit of dimensions 1 and 2. */
static kiln_status check_user_groups(const char *op, int work_dim, const size_t *g, const size_t *l)
{
    for (int d = 1; d < work_dim; d++)
        if (g[d] / l[d] > KILN__MAX_GROUPS_YZ)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: %zu work-groups in dimension %d (global %zu / local %zu); at "
                               "most %zu are allowed in dimensions 1 and 2 on every device (the "
                               "portable limit: NVIDIA's CUDA grid stops there); launch in pieces "
                               "or loop in the kernel over a smaller range",
                               op, g[d] / l[d], d, g[d], l[d], KILN__MAX_GROUPS_YZ);
    return KILN_OK;
}

static kiln_status set_args(kiln_device *dev, kiln__kernel *k, const char *op, int nargs,
                            const kiln_arg *args)
{
    for (int i = 0; i < nargs; i++) {
        const kiln_arg *a = &args[i];
        cl_int err;
        if (a->kind == KILN_ARG_TENSOR) {
            const kiln_tensor *t = a->value.tensor;
            cl_mem m = t->storage ? t->storage->mem : NULL;
            err = kiln__cl.SetKernelArg(k->kernel, (cl_uint)i, sizeof(cl_mem), &m);
        } else if (a->kind == KILN__ARG_ERROR_WORD) {
            cl_mem m = NULL;
            err = kiln__queue_error_word(dev, &m);
            if (err != CL_SUCCESS)
                return kiln__queue_fail(err, op, "clCreateBuffer", dev);
            err = kiln__cl.SetKernelArg(k->kernel, (cl_uint)i, sizeof(cl_mem), &m);
        } else if (a->kind == KILN_ARG_SCALAR) {
            err =
                kiln__cl.SetKernelArg(k->kernel, (cl_uint)i, scalar_size(a->dtype), scalar_ptr(a));
        } else {
            err = kiln__cl.SetKernelArg(k->kernel, (cl_uint)i, a->size, NULL);
        }
        if (err == CL_INVALID_ARG_SIZE || err == CL_INVALID_ARG_VALUE ||
            err == CL_INVALID_MEM_OBJECT || err == CL_INVALID_SAMPLER)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: argument %d of kernel %s does not match its parameter "
                               "(%s given; %s from clSetKernelArg); pass the parameter's type",
                               op, i, k->name,
                               a->kind == KILN_ARG_TENSOR  ? "a tensor"
                               : a->kind == KILN_ARG_LOCAL ? "local memory"
                                                           : kiln_dtype_name(a->dtype),
                               kiln__cl_error_name(err));
        if (err != CL_SUCCESS)
            return kiln__cl_fail(err, op, "clSetKernelArg", dev->info.spec);
    }
    return KILN_OK;
}

/* builtin: one of kiln's own kernels, capped by cap_builtin; otherwise a user's, checked. */
static kiln_status launch_checked(kiln_device *dev, kiln__kernel *k, const char *op, int work_dim,
                                  const size_t *global, const size_t *local, int nargs,
                                  const kiln_arg *args, bool builtin)
{
    if (!k)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: no kernel given", op);
    if (work_dim < 1 || work_dim > 3 || !global)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: work_dim is %d and global is %s; pass work_dim 1 to 3 and a "
                           "global size per dimension",
                           op, work_dim, global ? "set" : "NULL");
    kiln_status s = kiln__device_check_lost(dev, op);
    if (s == KILN_OK)
        s = check_args(dev, k, op, nargs, args, builtin);
    /* Every tensor of a launch holds its value (fusion.c, told through the tensor hooks), also
     * where an internal caller passes one that no tensor check saw (a gradient inside backward);
     * before k's lock, since an evaluation launches kernels itself. */
    for (int i = 0; s == KILN_OK && i < nargs; i++)
        if (args[i].kind == KILN_ARG_TENSOR && args[i].value.tensor)
            s = kiln__tensor_use(args[i].value.tensor, op);
    if (s != KILN_OK)
        return s;
    for (int d = 0; d < work_dim; d++)
        if (global[d] == 0)
            return KILN_OK; /* nothing to run: no OpenCL call at all */
    size_t g[3] = {1, 1, 1}, l[3] = {1, 1, 1};
    /* A user launch without a local size runs exactly global, the driver choosing the local size
     * (padding would run work-items past the end of the user's data); kiln's own kernels are
     * padded, and bounds-check. */
    bool driver_local = !builtin && !local;
    if (driver_local) {
        for (int d = 0; d < work_dim; d++)
            g[d] = global[d];
    } else {
        s = shape_ndrange(k, op, work_dim, global, local, g, l);
        if (s == KILN_OK && !builtin)
            s = check_user_groups(op, work_dim, g, l);
        if (s != KILN_OK)
            return s;
    }
    if (builtin && kiln__launch_splits(dev))
        cap_builtin(work_dim, g, l);
    pthread_mutex_lock(&k->lock);
    s = set_args(dev, k, op, nargs, args);
    if (s == KILN_OK) {
        cl_int err = kiln__cl.EnqueueNDRangeKernel(kiln__queue(dev), k->kernel, (cl_uint)work_dim,
                                                   NULL, g, driver_local ? NULL : l, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            s = kiln__queue_fail(err, op, "clEnqueueNDRangeKernel", dev);
    }
    pthread_mutex_unlock(&k->lock);
    for (int i = 0; s == KILN_OK && builtin && i < nargs; i++)
        if (args[i].kind == KILN__ARG_ERROR_WORD)
            kiln__queue_error_armed(dev);
    return s;
}

static kiln_status launch(kiln_device *dev, kiln__kernel *k, const char *op, int work_dim,
                          const size_t *global, const size_t *local, int nargs,
                          const kiln_arg *args, bool builtin)
{
    if (!kiln__profiling() || !k)
        return launch_checked(dev, k, op, work_dim, global, local, nargs, args, builtin);
    /* The profiler names the kernels enqueued meanwhile by op (or k's name) */
    kiln__prof_launch l;
    kiln__profiler_launch_push(&l, op, k->name);
    kiln_status s = launch_checked(dev, k, op, work_dim, global, local, nargs, args, builtin);
    kiln__profiler_launch_pop(&l);
    return s;
}

kiln_status kiln__kernel_launch(kiln_device *dev, kiln__kernel *k, const char *op, int work_dim,
                                const size_t *global, const size_t *local, int nargs,
                                const kiln_arg *args)
{
    return launch(dev, k, op, work_dim, global, local, nargs, args, true);
}

kiln_status kiln_program_launch(kiln_program *prog, const char *name, int work_dim,
                                const size_t *global, const size_t *local, int nargs,
                                const kiln_arg *args)
{
    const char *op = "kiln_program_launch";
    kiln__kernel *k = NULL;
    kiln_status s = kiln__program_kernel(prog, name, op, &k);
    if (s != KILN_OK)
        return s;
    return launch(kiln_program_device(prog), k, op, work_dim, global, local, nargs, args, false);
}

kiln_status kiln_program_pad_range(kiln_program *prog, const char *name, int work_dim,
                                   const size_t *global, size_t *padded, size_t *local)
{
    const char *op = "kiln_program_pad_range";
    kiln__kernel *k = NULL;
    kiln_status s = kiln__program_kernel(prog, name, op, &k);
    if (s != KILN_OK)
        return s;
    if (work_dim < 1 || work_dim > 3 || !global || !padded || !local)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: work_dim is %d, global is %s, padded is %s and local is %s; pass "
                           "work_dim 1 to 3 and three arrays of work_dim entries",
                           op, work_dim, global ? "set" : "NULL", padded ? "set" : "NULL",
                           local ? "set" : "NULL");
    size_t g[3] = {1, 1, 1}, l[3] = {1, 1, 1};
    s = shape_ndrange(k, op, work_dim, global, NULL, g, l);
    if (s == KILN_OK)
        s = check_user_groups(op, work_dim, g, l);
    if (s != KILN_OK)
        return s;
    for (int d = 0; d < work_dim; d++) {
        padded[d] = g[d];
        local[d] = l[d];
    }
    return KILN_OK;
}

kiln_arg kiln_arg_tensor(const kiln_tensor *t)
{
    kiln_arg a = {.kind = KILN_ARG_TENSOR, .size = sizeof(cl_mem)};
    a.value.tensor = t;
    return a;
}

/* The scalar constructors, one line each: kiln_arg_<member>(ctype x) sets dtype and
 * value.<member>. */
#define KILN__SCALAR_ARGS(X)                                                                       \
    X(f32, float, KILN_F32)                                                                        \
    X(f64, double, KILN_F64)                                                                       \
    X(i32, int32_t, KILN_I32)                                                                      \
    X(i64, int64_t, KILN_I64)                                                                      \
    X(u8, uint8_t, KILN_U8)

#define KILN__SCALAR_ARG(member, ctype, dt)                                                        \
    kiln_arg kiln_arg_##member(ctype x)                                                            \
    {                                                                                              \
        kiln_arg a = {.kind = KILN_ARG_SCALAR, .dtype = dt, .size = sizeof x};                     \
        a.value.member = x;                                                                        \
        return a;                                                                                  \
    }
KILN__SCALAR_ARGS(KILN__SCALAR_ARG)
#undef KILN__SCALAR_ARG

kiln_arg kiln__arg_error_word(void)
{
    kiln_arg a = {.kind = KILN__ARG_ERROR_WORD, .size = sizeof(cl_mem)};
    return a;
}

kiln_arg kiln_arg_local(size_t bytes)
{
    kiln_arg a = {.kind = KILN_ARG_LOCAL, .size = bytes};
    return a;
}
