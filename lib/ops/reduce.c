/* reduce.c - kiln_reduce: sum, mean, max, min and argmax over all elements or one axis. */
#include <stdio.h>
#include <string.h>

#include "amp.h"
#include "autograd.h"
#include "common.h"
#include "fusion.h"
#include "launch.h"
#include "ndrange.h"
#include "optables.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

#define OP "kiln_reduce"

/* GPUs: rows (inner == 1) at least this long are reduced by work-groups, neighbouring
 * work-items reading neighbouring elements; other reductions take a work-item per result, rows
 * split into chunks of at least GPU_MIN_CHUNK until there are GPU_MIN_ITEMS work-items. */
#define GPU_WG_MIN_N 128
#define GPU_MIN_ITEMS 65536
#define GPU_MIN_CHUNK 32
/* CPUs: rows split into chunks of at least CPU_MIN_CHUNK elements per work-item until there are
 * CPU_ITEMS_PER_CU work-items per compute unit, if the reduction reads CPU_MIN_SPLIT elements or
 * more (below that the combine step's launch costs more than it saves). Other axes: column
 * blocks narrowed down to CPU_MIN_WIDTH columns to give every compute unit one first, so that
 * rows are split (a second launch) only where there are too few columns for that. */
#define CPU_ITEMS_PER_CU 8
#define CPU_MIN_CHUNK 4096
#define CPU_MIN_SPLIT 65536
#define CPU_MIN_WIDTH 64
/* ... except from this many elements read on, where the combine's launch is small beside the
 * reduction and splitting rows lets every core stream its own stretch of whole pages. */
#define CPU_SPLIT_BIG ((int64_t)1 << 21)
/* Work-group reduction: elements per work-item per chunk, and at most this many groups. */
#define WG_ITEMS 32
#define WG_MAX_GROUPS 4096
#define WG_MAX_LOCAL 256
/* At most this many chunks per row (partials stay small). */
#define MAX_CHUNKS 4096
/* Columns per work-item of kiln_reduce_cols (KILN_COLS in reduce.cl). */
#define COLS 256

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
    if (x->ndim == 0 && (axis == KILN_ALL_AXES || axis == 0 || axis == -1)) {
        p->n = 1; /* a 0-d tensor reduces to a 0-d tensor (axis 0 or -1 allowed, as in PyTorch) */
        p->ndim = 0;
        p->outputs = 1;
        return KILN_OK;
    }
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

/* One program per (input dtype, add or compare); defines must be identical per program. With a
 * folded chain (fold), the kernels that read x come from its generated program. */
static kiln_status get_kernel(kiln_device *dev, kiln_reduce_op op, kiln_dtype dtype,
                              const kiln__fold *fold, const char *name, kiln__kernel **k)
{
    if (fold) {
        bool hit;
        return kiln__generated_kernel(dev, fold->text, name, true, OP, k, &hit);
    }
    char defs[256];
    kiln__reduce_defines(defs, sizeof defs, op, dtype);
    return kiln__builtin_kernel(dev, "reduce", defs, name, OP, k);
}

/* x's arguments into args: x, or the folded chain's (its leaves, shape, strides, scalars). */
static int x_args(kiln_arg *args, const kiln_tensor *x, const kiln__fold *fold)
{
    if (!fold) {
        args[0] = kiln_arg_tensor(x);
        return 1;
    }
    memcpy(args, fold->args, (size_t)fold->nargs * sizeof *args);
    return fold->nargs;
}

static size_t pow2_floor(size_t v)
{
    size_t p = 1;
    while (p * 2 <= v)
        p *= 2;
    return p;
}

/* Partial results of nchunks chunks per result: sums (or best values), their compensation
 * terms and the indices of the best values. */
typedef struct partials {
    int64_t nchunks, chunk;
    kiln_tensor *ps, *pc, *pi;
} partials;

static kiln_status partials_new(kiln_device *dev, kiln_dtype dtype, const reduce_plan *p,
                                partials *pt)
{
    /* No overflow: nchunks > 1 only with few results, or at most WG_MAX_GROUPS partials. */
    int64_t np = p->outputs * pt->nchunks;
    kiln_dtype ad = kiln__reduce_acc_dtype(dtype);
    kiln_status s = kiln__tensor_new(dev, ad, 1, &np, OP, &pt->ps);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, ad, 1, &np, OP, &pt->pc);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, KILN_I64, 1, &np, OP, &pt->pi);
    return s;
}

/* The queue is in order: buffers returned to the cache now are reused only by later work. */
static void partials_release(partials *pt)
{
    kiln_tensor_release(pt->ps);
    kiln_tensor_release(pt->pc);
    kiln_tensor_release(pt->pi);
}

/* Split rows of n into chunks (at least min_chunk long) until items * nchunks reaches
 * want_items, at most MAX_CHUNKS, if the reduction reads min_total elements or more; chunk *
 * nchunks covers n, every chunk non-empty (one empty chunk when n is 0). */
static void split_rows(const reduce_plan *p, int64_t items, int64_t want_items, int64_t min_chunk,
                       int64_t min_total, partials *pt)
{
    int64_t nc = 1;
    if (items < want_items && p->n * p->outputs >= min_total) {
        nc = (want_items + items - 1) / items;
        int64_t most = p->n / min_chunk;
        nc = nc < most ? nc : most;
        nc = nc < MAX_CHUNKS ? nc : MAX_CHUNKS;
        nc = nc > 1 ? nc : 1;
    }
    pt->chunk = p->n > 0 ? (p->n + nc - 1) / nc : 1;
    pt->nchunks = p->n > 0 ? (p->n + pt->chunk - 1) / pt->chunk : 1;
}

/* The partials of pt combined into y, one work-item per result. */
static kiln_status launch_combine(kiln_device *dev, kiln_reduce_op op, const kiln_tensor *x,
                                  kiln_tensor *y, const reduce_plan *p, const partials *pt)
{
    kiln__kernel *k;
    char name[64];
    kiln__reduce_kernel(name, sizeof name, "kiln_reduce_combine", op);
    kiln_status s = get_kernel(dev, op, x->dtype, NULL, name, &k);
    if (s != KILN_OK)
        return s;
    size_t global = (size_t)p->outputs, local;
    kiln_arg args[] = {kiln_arg_tensor(pt->ps),
                       kiln_arg_tensor(pt->pc),
                       kiln_arg_tensor(pt->pi),
                       kiln_arg_tensor(y),
                       kiln_arg_i64(p->outputs),
                       kiln_arg_i64(pt->nchunks),
                       kiln_arg_i64(p->n),
                       kiln_arg_i32(op == KILN_REDUCE_MIN),
                       kiln_arg_i32(op == KILN_REDUCE_MEAN)};
    kiln__fixed_ndrange(k->wg_size, 1, &global, &local);
    return kiln__kernel_launch(dev, k, OP, 1, &global, &local, 9, args);
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

/* GPUs, contiguous rows (inner == 1): chunks of each row reduced by work-groups into partials,
 * then combined per result. */
static kiln_status launch_wg(kiln_device *dev, kiln_reduce_op op, const kiln_tensor *x,
                             const kiln__fold *fold, kiln_tensor *y, const reduce_plan *p)
{
    kiln__kernel *kw;
    kiln_status s = get_kernel(dev, op, x->dtype, fold, "kiln_reduce_wg", &kw);
    if (s != KILN_OK)
        return s;
    size_t local = wg_local_size(dev, kw, x->dtype);
    int64_t max_chunks = WG_MAX_GROUPS / p->outputs > 0 ? WG_MAX_GROUPS / p->outputs : 1;
    partials pt = {0};
    pt.nchunks = (p->n + (int64_t)local * WG_ITEMS - 1) / ((int64_t)local * WG_ITEMS);
    pt.nchunks = pt.nchunks < max_chunks ? pt.nchunks : max_chunks;
    pt.chunk = (p->n + pt.nchunks - 1) / pt.nchunks;
    pt.nchunks = (p->n + pt.chunk - 1) / pt.chunk;
    size_t accsz = kiln_dtype_size(kiln__reduce_acc_dtype(x->dtype));
    s = partials_new(dev, x->dtype, p, &pt);
    if (s != KILN_OK)
        goto done;
    size_t global[3] = {(size_t)pt.nchunks * local, (size_t)p->inner, (size_t)p->outer};
    size_t local3[3] = {local, 1, 1};
    kiln_arg wargs[KILN__FOLD_MAX_ARGS + 12];
    int nw = x_args(wargs, x, fold);
    wargs[nw++] = kiln_arg_tensor(pt.ps);
    wargs[nw++] = kiln_arg_tensor(pt.pc);
    wargs[nw++] = kiln_arg_tensor(pt.pi);
    wargs[nw++] = kiln_arg_i64(p->outer);
    wargs[nw++] = kiln_arg_i64(p->n);
    wargs[nw++] = kiln_arg_i64(p->inner);
    wargs[nw++] = kiln_arg_i64(pt.chunk);
    wargs[nw++] = kiln_arg_i64(pt.nchunks);
    wargs[nw++] = kiln_arg_i32(op == KILN_REDUCE_MIN);
    wargs[nw++] = kiln_arg_local(local * accsz);
    wargs[nw++] = kiln_arg_local(local * accsz);
    wargs[nw++] = kiln_arg_local(local * sizeof(int64_t));
    s = kiln__kernel_launch(dev, kw, OP, 3, global, local3, nw, wargs);
    if (s == KILN_OK)
        s = launch_combine(dev, op, x, y, p, &pt);
done:
    partials_release(&pt);
    return s;
}

/* One work-item per result or per block of results (kernel base name `base`), each over a
 * chunk of its row: rows, cols (blocks of `width` columns; 0 for the others) or vrows
 * (reduce.cl), launched over `global`; with several chunks, then the combine step. */
static kiln_status launch_chunked(kiln_device *dev, kiln_reduce_op op, const kiln_tensor *x,
                                  const kiln__fold *fold, kiln_tensor *y, const reduce_plan *p,
                                  const char *base, int dims, size_t *global, int64_t width,
                                  partials *pt)
{
    kiln__kernel *k;
    char name[64];
    kiln__reduce_kernel(name, sizeof name, base, op);
    kiln_status s = get_kernel(dev, op, x->dtype, fold, name, &k);
    if (s == KILN_OK && pt->nchunks > 1)
        s = partials_new(dev, x->dtype, p, pt);
    if (s != KILN_OK)
        return s;
    /* With one chunk the kernels never touch the partials: pass y there. */
    const kiln_tensor *ps = pt->nchunks > 1 ? pt->ps : y, *pc = pt->nchunks > 1 ? pt->pc : y,
                      *pi = pt->nchunks > 1 ? pt->pi : y;
    kiln_arg args[KILN__FOLD_MAX_ARGS + 12];
    int nargs = x_args(args, x, fold);
    args[nargs++] = kiln_arg_tensor(y);
    args[nargs++] = kiln_arg_tensor(ps);
    args[nargs++] = kiln_arg_tensor(pc);
    args[nargs++] = kiln_arg_tensor(pi);
    args[nargs++] = kiln_arg_i64(p->outer);
    args[nargs++] = kiln_arg_i64(p->n);
    if (dims == 3) /* rows and cols take inner; vrows runs with inner == 1 */
        args[nargs++] = kiln_arg_i64(p->inner);
    if (width > 0)
        args[nargs++] = kiln_arg_i64(width);
    args[nargs++] = kiln_arg_i64(pt->chunk);
    args[nargs++] = kiln_arg_i64(pt->nchunks);
    args[nargs++] = kiln_arg_i32(op == KILN_REDUCE_MIN);
    args[nargs++] = kiln_arg_i32(op == KILN_REDUCE_MEAN);
    size_t local[3] = {1, 1, 1};
    if (dev->info.type != KILN_DEVICE_CPU)
        kiln__fixed_ndrange(k->wg_size, dims, global, local);
    else
        kiln__cpu_loop_ndrange(dev, k->wg_size, dims, global, local);
    s = kiln__kernel_launch(dev, k, OP, dims, global, local, nargs, args);
    if (s == KILN_OK && pt->nchunks > 1)
        s = launch_combine(dev, op, x, y, p, pt);
    return s;
}

/* CPUs, inner > 1: the number of column blocks, at least ceil(inner / COLS); more, down to
 * CPU_MIN_WIDTH columns, until there is a block per compute unit, rounded up to a multiple of
 * the compute units for a single row of blocks (blocks of one size finish together). */
static int64_t cpu_col_blocks(const reduce_plan *p, int64_t cus)
{
    int64_t blocks = (p->inner + COLS - 1) / COLS, most = p->inner / CPU_MIN_WIDTH;
    if (p->outer * blocks < cus) {
        int64_t want = (cus + p->outer - 1) / p->outer;
        blocks = want < most ? want : (most > blocks ? most : blocks);
    }
    if (p->outer == 1 && blocks % cus != 0 && (blocks / cus + 1) * cus <= most)
        blocks = (blocks / cus + 1) * cus;
    return blocks;
}

/* CPUs: contiguous rows in vectors along the row (vrows), other axes in vectors across blocks
 * of up to COLS neighbouring results (cols); rows split into chunks where there are too few
 * results (or column blocks) to give every compute unit work. */
static kiln_status launch_cpu(kiln_device *dev, kiln_reduce_op op, const kiln_tensor *x,
                              const kiln__fold *fold, kiln_tensor *y, const reduce_plan *p)
{
    partials pt = {0};
    int64_t cus = dev->info.compute_units ? (int64_t)dev->info.compute_units : 1;
    kiln_status s;
    if (p->inner == 1) {
        split_rows(p, p->outer, CPU_ITEMS_PER_CU * cus, CPU_MIN_CHUNK, CPU_MIN_SPLIT, &pt);
        size_t global[2] = {(size_t)pt.nchunks, (size_t)p->outer};
        s = launch_chunked(dev, op, x, fold, y, p, "kiln_reduce_vrows", 2, global, 0, &pt);
    } else {
        /* width: a multiple of 8 (whole vectors) unless the block is all of inner */
        int64_t blocks = cpu_col_blocks(p, cus);
        int64_t width = ((p->inner + blocks - 1) / blocks + 7) / 8 * 8;
        width = width < p->inner ? width : p->inner;
        blocks = (p->inner + width - 1) / width;
        if (p->outer * blocks < cus || p->n * p->outputs >= CPU_SPLIT_BIG)
            split_rows(p, p->outer * blocks, CPU_ITEMS_PER_CU * cus, CPU_MIN_CHUNK / width,
                       CPU_MIN_SPLIT, &pt);
        else
            split_rows(p, 1, 1, 1, 0, &pt); /* one chunk */
        size_t global[3] = {(size_t)blocks, (size_t)pt.nchunks, (size_t)p->outer};
        s = launch_chunked(dev, op, x, fold, y, p, "kiln_reduce_cols", 3, global, width, &pt);
    }
    partials_release(&pt);
    return s;
}

/* GPUs and other devices: long contiguous rows by work-groups (coalesced along the row); the
 * rest a work-item per result (coalesced across neighbouring results), rows split into chunks
 * where there are few results. */
static kiln_status launch_gpu(kiln_device *dev, kiln_reduce_op op, const kiln_tensor *x,
                              const kiln__fold *fold, kiln_tensor *y, const reduce_plan *p)
{
    if (p->inner == 1 && p->n >= GPU_WG_MIN_N)
        return launch_wg(dev, op, x, fold, y, p);
    partials pt = {0};
    split_rows(p, p->outputs, GPU_MIN_ITEMS, GPU_MIN_CHUNK, 0, &pt);
    size_t global[3] = {(size_t)p->inner, (size_t)pt.nchunks, (size_t)p->outer};
    kiln_status s = launch_chunked(dev, op, x, fold, y, p, "kiln_reduce_rows", 3, global, 0, &pt);
    partials_release(&pt);
    return s;
}

/* The checks shared by kiln_reduce and kiln_reduce_out, and the plan of the reduction. */
static kiln_status prepare(kiln_reduce_op op, const kiln_tensor *x, int axis, bool keepdim,
                           reduce_plan *p)
{
    /* x may stay pending: run() folds it into the loads or evaluates it */
    kiln__fusion_defer(true);
    kiln_status s = kiln__check_tensor(x, OP, "x");
    kiln__fusion_defer(false);
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

/* A pending x is folded into the reduction's loads where kiln__fusion_fold allows (its chain is
 * computed per element, its result never stored), else evaluated first. */
static kiln_status run(kiln_reduce_op op, const kiln_tensor *x, kiln_tensor *y,
                       const reduce_plan *p)
{
    if (p->outputs == 0)
        return KILN_OK;
    char defs[256];
    kiln__reduce_defines(defs, sizeof defs, op, x->dtype);
    kiln__fold *fold = NULL;
    /* room: the kernels' other arguments (at most 12, 8 bytes each) */
    kiln_status s = kiln__fusion_fold(x, "reduce", defs, (size_t)12 * 8, OP, &fold);
    if (s == KILN_OK && !fold)
        s = kiln__fusion_force(x, OP);
    if (s != KILN_OK)
        return s;
    if (x->dev->info.type == KILN_DEVICE_CPU)
        s = launch_cpu(x->dev, op, x, fold, y, p);
    else
        s = launch_gpu(x->dev, op, x, fold, y, p);
    kiln__fusion_fold_done(fold);
    return s;
}

kiln_status kiln_reduce(kiln_reduce_op op, const kiln_tensor *x, int axis, bool keepdim,
                        kiln_tensor **out)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[1] = {x};
        kiln_tensor *tmp[1];
        kiln_status amp;
        if (op == KILN_REDUCE_SUM &&
            kiln__amp_apply("kiln_reduce", KILN__AMP_F32, 1, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_reduce(op, in[0], axis, keepdim, out);
            else if (out)
                *out = NULL;
            kiln__amp_release(1, tmp);
            return amp;
        }
    }
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
    /* out is written, so what is pending on it is evaluated; x may stay pending */
    kiln__fusion_defer(true);
    kiln_status s = kiln__check_tensors(OP, 2, 2, (const kiln_tensor *[]){x, out},
                                        (const char *const[]){"x", "out"}, NULL);
    kiln__fusion_defer(false);
    if (s == KILN_OK)
        s = kiln__check_tensor(out, OP, "out");
    reduce_plan p;
    if (s == KILN_OK)
        s = prepare(op, x, axis, keepdim, &p);
    if (s == KILN_OK)
        s = kiln__check_out(OP, out, x->dev, p.out_dtype, p.ndim, p.shape);
    if (s == KILN_OK)
        s = kiln__check_not_aliased(OP, out, 1, &x);
    return s == KILN_OK ? run(op, x, out, &p) : s;
}
