/* reduce.c - kiln_reduce: sum, mean, max, min and argmax over all elements or one axis. */
#include <stdio.h>
#include <string.h>

#include "autograd.h"
#include "common.h"
#include "launch.h"
#include "ndrange.h"
#include "optables.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

#define OP "kiln_reduce"

/* Rows shorter than this, or this many results and more, take one work-item per result. */
#define ROWS_MAX_N 1024
#define ROWS_MIN_OUTPUTS 1024
/* Work-group reduction: elements per work-item per chunk, and at most this many groups. */
#define WG_ITEMS 32
#define WG_MAX_GROUPS 4096
#define WG_MAX_LOCAL 256
/* Results per work-item of kiln_reduce_cols (KILN_COLS in reduce.cl). */
#define COLS 16

/* x viewed as [outer, n, inner], reduced over n into `outputs` = outer * inner results. */
typedef struct reduce_plan {
    int64_t outer, n, inner, outputs;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    kiln_dtype out_dtype;
} reduce_plan;

/* Sums of integers are i64 (no overflow at i32 range); mean of integers is refused. */
static kiln_status out_dtype(kiln_reduce_op op, kiln_dtype dtype, kiln_dtype *out)
{
    if (!kiln__reduce_supports(op, dtype))
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: %s of %s is not supported; cast to f32 or f64 first "
                           "(kiln_cast), or use KILN_REDUCE_SUM (gives i64)",
                           OP, kiln__reduce_name(op), kiln_dtype_name(dtype));
    *out = kiln__reduce_out_dtype(op, dtype);
    return KILN_OK;
}

static kiln_status make_plan(const kiln_tensor *x, int axis, bool keepdim, reduce_plan *p)
{
    p->outer = 1;
    p->inner = 1;
    if (axis == KILN_ALL_AXES) {
        p->n = x->numel;
        p->ndim = keepdim ? x->ndim : 1;
        for (int d = 0; d < p->ndim; d++)
            p->shape[d] = 1;
        p->outputs = 1;
        return KILN_OK;
    }
    if (axis < -x->ndim || axis >= x->ndim) {
        char s[160];
        kiln__shape_str(s, sizeof s, x->ndim, x->shape);
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: axis %d is out of range for a %d-D tensor of shape %s; use %d..%d "
                           "or KILN_ALL_AXES",
                           OP, axis, x->ndim, s, -x->ndim, x->ndim - 1);
    }
    int a = axis < 0 ? axis + x->ndim : axis;
    p->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d < a)
            p->outer *= x->shape[d];
        else if (d > a)
            p->inner *= x->shape[d];
        if (d != a)
            p->shape[p->ndim++] = x->shape[d];
        else if (keepdim)
            p->shape[p->ndim++] = 1;
    }
    if (p->ndim == 0) /* a 1-D tensor reduced without keepdim: kiln tensors have ndim >= 1 */
        p->shape[p->ndim++] = 1;
    p->n = x->shape[a];
    p->outputs = p->outer * p->inner;
    return KILN_OK;
}

/* One program per (input dtype, add or compare); defines must be identical per program. */
static kiln_status get_kernel(kiln_device *dev, kiln_reduce_op op, kiln_dtype dtype,
                              const char *name, kiln__kernel **k)
{
    char defs[256];
    kiln__reduce_defines(defs, sizeof defs, op, dtype);
    return kiln__builtin_kernel(dev, "reduce", defs, name, OP, k);
}

static size_t pow2_floor(size_t v)
{
    size_t p = 1;
    while (p * 2 <= v)
        p *= 2;
    return p;
}

/* One work-item per result, serial over the row; on CPUs one per COLS neighbouring results,
 * so rows are read in memory order. */
static kiln_status launch_rows(kiln_device *dev, kiln_reduce_op op, const kiln_tensor *x,
                               kiln_tensor *y, const reduce_plan *p)
{
    kiln__kernel *k;
    bool cols = dev->info.type == KILN_DEVICE_CPU && p->inner >= COLS;
    char name[64];
    kiln__reduce_kernel(name, sizeof name, cols ? "kiln_reduce_cols" : "kiln_reduce_rows", op);
    kiln_status s = get_kernel(dev, op, x->dtype, name, &k);
    if (s != KILN_OK)
        return s;
    size_t items = cols ? (size_t)((p->inner + COLS - 1) / COLS) : (size_t)p->inner;
    /* One launch: kiln__kernel_launch caps dimension 1 and the kernel loops over rows. */
    size_t global[2] = {items, (size_t)p->outer}, local[2];
    kiln_arg args[] = {kiln_arg_tensor(x),
                       kiln_arg_tensor(y),
                       kiln_arg_i64(p->outer),
                       kiln_arg_i64(p->n),
                       kiln_arg_i64(p->inner),
                       kiln_arg_i32(op == KILN_REDUCE_MIN),
                       kiln_arg_i32(op == KILN_REDUCE_MEAN)};
    kiln__fixed_ndrange(k->wg_size, 2, global, local);
    return kiln__kernel_launch(dev, k, OP, 2, global, local, 7, args);
    return s;
}

/* Work-group size for kiln_reduce_wg: a power of two within the kernel's limit and the device's
 * local memory (two accumulators and an index per work-item). */
static size_t wg_local_size(const kiln_device *dev, const kiln__kernel *k, kiln_dtype dtype)
{
    size_t per_item = 2 * kiln_dtype_size(kiln__reduce_acc_dtype(dtype)) + sizeof(int64_t);
    size_t l = k->wg_size < WG_MAX_LOCAL ? k->wg_size : WG_MAX_LOCAL;
    if (dev->info.local_mem_bytes / per_item < l)
        l = (size_t)(dev->info.local_mem_bytes / per_item);
    return pow2_floor(l ? l : 1);
}

/* Chunks of each row reduced by work-groups into partials, then combined per result. */
static kiln_status launch_wg(kiln_device *dev, kiln_reduce_op op, const kiln_tensor *x,
                             kiln_tensor *y, const reduce_plan *p)
{
    kiln__kernel *kw, *kc;
    char combine[64];
    kiln__reduce_kernel(combine, sizeof combine, "kiln_reduce_combine", op);
    kiln_status s = get_kernel(dev, op, x->dtype, "kiln_reduce_wg", &kw);
    if (s == KILN_OK)
        s = get_kernel(dev, op, x->dtype, combine, &kc);
    if (s != KILN_OK)
        return s;
    size_t local = wg_local_size(dev, kw, x->dtype);
    int64_t max_chunks = WG_MAX_GROUPS / p->outputs > 0 ? WG_MAX_GROUPS / p->outputs : 1;
    int64_t nchunks = (p->n + (int64_t)local * WG_ITEMS - 1) / ((int64_t)local * WG_ITEMS);
    nchunks = nchunks < max_chunks ? nchunks : max_chunks;
    int64_t chunk = (p->n + nchunks - 1) / nchunks;
    nchunks = (p->n + chunk - 1) / chunk;

    kiln_tensor *ps = NULL, *pc = NULL, *pi = NULL;
    int64_t np = p->outputs * nchunks;
    kiln_dtype ad = kiln__reduce_acc_dtype(x->dtype);
    size_t accsz = kiln_dtype_size(ad);
    s = kiln__tensor_new(dev, ad, 1, &np, OP, &ps);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, ad, 1, &np, OP, &pc);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, KILN_I64, 1, &np, OP, &pi);
    if (s != KILN_OK)
        goto done;
    size_t global[3] = {(size_t)nchunks * local, (size_t)p->inner, (size_t)p->outer};
    size_t local3[3] = {local, 1, 1};
    kiln_arg wargs[] = {kiln_arg_tensor(x),
                        kiln_arg_tensor(ps),
                        kiln_arg_tensor(pc),
                        kiln_arg_tensor(pi),
                        kiln_arg_i64(p->outer),
                        kiln_arg_i64(p->n),
                        kiln_arg_i64(p->inner),
                        kiln_arg_i64(chunk),
                        kiln_arg_i64(nchunks),
                        kiln_arg_i32(op == KILN_REDUCE_MIN),
                        kiln_arg_i32(dev->info.type == KILN_DEVICE_CPU),
                        kiln_arg_local(local * accsz),
                        kiln_arg_local(local * accsz),
                        kiln_arg_local(local * sizeof(int64_t))};
    s = kiln__kernel_launch(dev, kw, OP, 3, global, local3, 14, wargs);
    if (s != KILN_OK)
        goto done;
    size_t cglobal = (size_t)p->outputs;
    kiln_arg cargs[] = {kiln_arg_tensor(ps),
                        kiln_arg_tensor(pc),
                        kiln_arg_tensor(pi),
                        kiln_arg_tensor(y),
                        kiln_arg_i64(p->outputs),
                        kiln_arg_i64(nchunks),
                        kiln_arg_i64(p->n),
                        kiln_arg_i32(op == KILN_REDUCE_MIN),
                        kiln_arg_i32(op == KILN_REDUCE_MEAN)};
    size_t clocal;
    kiln__fixed_ndrange(kc->wg_size, 1, &cglobal, &clocal);
    s = kiln__kernel_launch(dev, kc, OP, 1, &cglobal, &clocal, 9, cargs);
done:
    /* The queue is in order: buffers returned to the cache now are reused only by later work. */
    kiln_tensor_release(ps);
    kiln_tensor_release(pc);
    kiln_tensor_release(pi);
    return s;
}

/* The checks shared by kiln_reduce and kiln_reduce_out, and the plan of the reduction. */
static kiln_status prepare(kiln_reduce_op op, const kiln_tensor *x, int axis, bool keepdim,
                           reduce_plan *p)
{
    kiln_status s = kiln__check_tensor(x, OP, "x");
    if (s != KILN_OK)
        return s;
    if (!kiln__reduce_name(op))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: unknown op %d; use a KILN_REDUCE_* value", OP, (int)op);
    s = kiln__check_dtype_on(x->dev, x->dtype, OP);
    if (s == KILN_OK)
        s = out_dtype(op, x->dtype, &p->out_dtype);
    if (s == KILN_OK)
        s = make_plan(x, axis, keepdim, p);
    if (s != KILN_OK)
        return s;
    if (p->n == 0 && p->outputs > 0 && !kiln__reduce_adds(op)) {
        char sh[160];
        kiln__shape_str(sh, sizeof sh, x->ndim, x->shape);
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s of an empty tensor (shape %s, reducing %lld elements) is "
                           "undefined; check the size first",
                           OP, kiln__reduce_name(op), sh, (long long)p->n);
    }
    return KILN_OK;
}

static kiln_status run(kiln_reduce_op op, const kiln_tensor *x, kiln_tensor *y,
                       const reduce_plan *p)
{
    if (p->outputs == 0)
        return KILN_OK;
    if (p->n < ROWS_MAX_N || p->outputs >= ROWS_MIN_OUTPUTS)
        return launch_rows(x->dev, op, x, y, p);
    return launch_wg(x->dev, op, x, y, p);
}

kiln_status kiln_reduce(kiln_reduce_op op, const kiln_tensor *x, int axis, bool keepdim,
                        kiln_tensor **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", OP);
    *out = NULL;
    reduce_plan p;
    kiln_status s = prepare(op, x, axis, keepdim, &p);
    if (s != KILN_OK)
        return s;
    kiln_tensor *y;
    s = kiln__tensor_new(x->dev, p.out_dtype, p.ndim, p.shape, OP, &y);
    if (s != KILN_OK)
        return s;
    return kiln__ag_record(kiln__finish(run(op, x, y, &p), y, NULL, out), OP, KILN__AG_REDUCE,
                           &(kiln__ag_args){.op = (int)op, .axis = axis}, 1, &x, out);
}

kiln_status kiln_reduce_out(kiln_reduce_op op, const kiln_tensor *x, int axis, bool keepdim,
                            kiln_tensor *out)
{
    kiln_status s = kiln__check_tensors(OP, 2, 2, (const kiln_tensor *[]){x, out},
                                        (const char *const[]){"x", "out"}, NULL);
    reduce_plan p;
    if (s == KILN_OK)
        s = prepare(op, x, axis, keepdim, &p);
    if (s == KILN_OK)
        s = kiln__check_out(OP, out, x->dev, p.out_dtype, p.ndim, p.shape);
    if (s == KILN_OK)
        s = kiln__check_not_aliased(OP, out, 1, &x);
    return s == KILN_OK ? run(op, x, out, &p) : s;
}
