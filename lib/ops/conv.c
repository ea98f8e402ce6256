/* conv.c - kiln_conv2d (PyTorch's weight layout [O, C/groups, KH, KW], NCHW) in one of four
 * ways: a 1x1 kernel at stride 1 is the matmul on x itself; a depthwise convolution (groups = C)
 * runs the direct kernels of conv.cl with a gradient node of their own (KILN__AG_CONV_DW); one
 * group with many columns runs im2col and the matmul a chunk of samples at a time, also under a
 * node of its own (KILN__AG_CONV_GEMM); the rest is im2col (conv.cl, its gradient col2im, its
 * adjoint) and one batched matmul, whose reshape of the weight, matmul over the groups and
 * permute back to NCHW autograd records as the ops they are. The bias add is an elementwise op
 * after any of them. On CPU devices the matmul is OpenBLAS's (matmul.c picks the path,
 * KILN_LOG=debug says which, and which of the four this file took). Also the 2-D poolings (max,
 * average, global average), whose kernels live in conv.cl too. */
#include "ops/conv.h"
#include "amp.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "autograd.h"
#include "common.h"
#include "dtype.h"
#include "launch.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

/* The geometry of one convolution, every member checked. */
typedef struct geom {
    int64_t n, c, h, w, o, kh, kw, oh, ow;
    int sh, sw, ph, pw, dh, dw, groups;
} geom;

static kiln_status conv_kernel(kiln_device *dev, kiln_dtype dtype, const char *name, const char *op,
                               kiln__kernel **k)
{
    char defs[128] = "";
    kiln__dtype_defines(defs, sizeof defs, "T", dtype);
    return kiln__builtin_kernel(dev, "conv", defs, name, op, k);
}

/* Launch im2col or col2im with the geometry's arguments after the two tensors: g->n samples
 * from sample n0 of x (im2col) or of dx (col2im). */
static kiln_status run(const char *name, const char *op, const kiln_tensor *in, kiln_tensor *out,
                       const geom *g, int64_t n0, int dims, const size_t *global)
{
    kiln__kernel *k;
    kiln_status s = conv_kernel(in->dev, in->dtype, name, op, &k);
    if (s != KILN_OK)
        return s;
    kiln_arg args[] = {kiln_arg_tensor(in),     kiln_arg_tensor(out), kiln_arg_i64(g->n),
                       kiln_arg_i64(g->c),      kiln_arg_i64(g->h),   kiln_arg_i64(g->w),
                       kiln_arg_i64(g->groups), kiln_arg_i64(g->kh),  kiln_arg_i64(g->kw),
                       kiln_arg_i64(g->sh),     kiln_arg_i64(g->sw),  kiln_arg_i64(g->ph),
                       kiln_arg_i64(g->pw),     kiln_arg_i64(g->dh),  kiln_arg_i64(g->dw),
                       kiln_arg_i64(g->oh),     kiln_arg_i64(g->ow),  kiln_arg_i32(g->groups == 1),
                       kiln_arg_i64(n0)};
    return kiln__kernel_launch(in->dev, k, op, dims, global, NULL, 19, args);
}

/* Whether kiln_conv2d runs the direct depthwise kernels: one input channel a group (groups = C,
 * O a multiple of C). KILN_CONV_DEPTHWISE=0 sends these through im2col as well, which the tests
 * use to hold the two paths against each other. */
static bool depthwise(const geom *g)
{
    if (g->groups != g->c || g->o % g->c)
        return false;
    const char *env = getenv("KILN_CONV_DEPTHWISE");
    return !(env && strcmp(env, "0") == 0);
}

/* Launch one of the depthwise kernels (conv.cl: kiln_conv_dw...) over `dims` dimensions: tensors a,
 * b and out, then the geometry. 3x3 and 5x5 windows get a program whose window loops have
 * constant bounds (KILN_DW_K), stride 1 along rows one that knows it (KILN_DW_SW1). */
static kiln_status run_dw(const char *name, const char *op, const kiln_tensor *a,
                          const kiln_tensor *b, kiln_tensor *out, const geom *g, int dims,
                          const size_t *global)
{
    char defs[160] = "";
    kiln__dtype_defines(defs, sizeof defs, "T", a->dtype);
    size_t used = strnlen(defs, sizeof defs);
    if (g->kh == g->kw && (g->kh == 3 || g->kh == 5))
        used += (size_t)snprintf(defs + used, sizeof defs - used, " -DKILN_DW_K=%d", (int)g->kh);
    if (g->sw == 1 && used < sizeof defs)
        snprintf(defs + used, sizeof defs - used, " -DKILN_DW_SW1=1");
    kiln__kernel *k;
    kiln_status s = kiln__builtin_kernel(a->dev, "conv", defs, name, op, &k);
    if (s != KILN_OK)
        return s;
    kiln_arg args[] = {kiln_arg_tensor(a),  kiln_arg_tensor(b),        kiln_arg_tensor(out),
                       kiln_arg_i64(g->n),  kiln_arg_i64(g->c),        kiln_arg_i64(g->h),
                       kiln_arg_i64(g->w),  kiln_arg_i64(g->o / g->c), kiln_arg_i64(g->kh),
                       kiln_arg_i64(g->kw), kiln_arg_i64(g->sh),       kiln_arg_i64(g->sw),
                       kiln_arg_i64(g->ph), kiln_arg_i64(g->pw),       kiln_arg_i64(g->dh),
                       kiln_arg_i64(g->dw), kiln_arg_i64(g->oh),       kiln_arg_i64(g->ow)};
    return kiln__kernel_launch(a->dev, k, op, dims, global, NULL, 18, args);
}

/* col2im of cols (g->n samples) into samples n0 .. n0 + g->n - 1 of dx: on CPU devices at stride
 * 1 along rows a row of dx per work-item (kiln_col2im_rows; f32 and f64), else an element. */
static kiln_status col2im_into(const kiln_tensor *cols, kiln_tensor *dx, const geom *g, int64_t n0,
                               const char *op)
{
    size_t count = (size_t)(g->n * g->c * g->h * g->w);
    if (count == 0)
        return KILN_OK;
    if (dx->dev->info.type == KILN_DEVICE_CPU && g->sw == 1 && !kiln__dtype_is_narrow(dx->dtype)) {
        size_t global[2] = {(size_t)g->h, (size_t)(g->n * g->c)};
        return run("kiln_col2im_rows", op, cols, dx, g, n0, 2, global);
    }
    return run("kiln_col2im", op, cols, dx, g, n0, 1, &count);
}

static void geom_to_args(const geom *g, kiln__ag_args *a)
{
    *a =
        (kiln__ag_args){.op = g->groups,
                        .perm = {(int)g->kh, (int)g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw}};
}

static geom geom_from(const kiln_tensor *x, const kiln__ag_args *a, int64_t oh, int64_t ow)
{
    return (geom){.n = x->shape[0],
                  .c = x->shape[1],
                  .h = x->shape[2],
                  .w = x->shape[3],
                  .kh = a->perm[0],
                  .kw = a->perm[1],
                  .sh = a->perm[2],
                  .sw = a->perm[3],
                  .ph = a->perm[4],
                  .pw = a->perm[5],
                  .dh = a->perm[6],
                  .dw = a->perm[7],
                  .groups = a->op,
                  .oh = oh,
                  .ow = ow};
}

/* x [N, C, H, W] -> cols [G, C/G KH KW, N OH OW], or [N, C KH KW, OH OW] for one group (whose
 * product with the weight needs no permute), recorded with its own gradient. */
static kiln_status im2col(const kiln_tensor *x, const geom *g, const char *op, kiln_tensor **cols)
{
    int64_t k = g->c / g->groups * g->kh * g->kw, l = g->oh * g->ow;
    int64_t shape[3] = {g->groups, k, g->n * l};
    if (g->groups == 1)
        shape[0] = g->n, shape[2] = l;
    kiln_status s = kiln__tensor_new(x->dev, x->dtype, 3, shape, op, cols);
    if (s == KILN_OK && k * g->n * l > 0) {
        size_t global[2] = {(size_t)(g->n * g->oh), (size_t)(g->groups * k)};
        s = run("kiln_im2col", op, x, *cols, g, 0, 2, global);
        if (s != KILN_OK) {
            kiln_tensor_release(*cols);
            *cols = NULL;
        }
    }
    kiln__ag_args a;
    geom_to_args(g, &a);
    return kiln__ag_record(s, op, KILN__AG_IM2COL, &a, 1, &x, cols);
}

kiln_status kiln__col2im(const kiln_tensor *gc, const kiln_tensor *x, const kiln__ag_args *a,
                         kiln_tensor **dx)
{
    const char *op = "kiln_conv2d (backward)";
    /* OH and OW from the columns: N OH OW of them, and OW from the geometry */
    int64_t kh = a->perm[0], kw = a->perm[1];
    int64_t ow =
        (x->shape[3] + 2 * (int64_t)a->perm[5] - a->perm[7] * (kw - 1) - 1) / a->perm[3] + 1;
    int64_t oh =
        (x->shape[2] + 2 * (int64_t)a->perm[4] - a->perm[6] * (kh - 1) - 1) / a->perm[2] + 1;
    geom g = geom_from(x, a, oh, ow);
    kiln_status s = kiln__tensor_new(gc->dev, gc->dtype, 4, x->shape, op, dx);
    if (s == KILN_OK) {
        s = col2im_into(gc, *dx, &g, 0, op);
        if (s != KILN_OK) {
            kiln_tensor_release(*dx);
            *dx = NULL;
        }
    }
    return s;
}

/* The end of a gradient function: on failure *dx and *dw (those asked for) released and NULL. */
static kiln_status grads_or_none(kiln_status s, kiln_tensor **dx, kiln_tensor **dw)
{
    kiln_tensor **both[2] = {dx, dw};
    for (int i = 0; i < 2 && s != KILN_OK; i++)
        if (both[i]) {
            kiln_tensor_release(*both[i]);
            *both[i] = NULL;
        }
    return s;
}

/* ---- one group, a few samples at a time ------------------------------------------------ */

/* A large batch's columns (N32 64->64 56x56 3x3: 231 MB) are made and multiplied a chunk of
 * samples at a time, at most this many bytes of columns each (8 MiB; KILN_TEST_CONV_CHUNK_BYTES
 * lowers it for the tests): each chunk's columns are still in cache when the matmul reads them
 * (the forward of that convolution about 100 -> 70 ms on PoCL), and the backward makes them again
 * instead of autograd keeping them all. */
static int64_t chunk_bytes(void)
{
    const char *env = getenv("KILN_TEST_CONV_CHUNK_BYTES");
    long long v = env ? atoll(env) : 0;
    return v > 0 ? (int64_t)v : (int64_t)8 << 20;
}

/* Samples per chunk for the convolution g of dtype dt, or 0 where it runs whole: its columns fit
 * one chunk, or it has groups, or 16-bit weight gradients would round once per chunk. */
static int64_t chunk_samples(const geom *g, kiln_dtype dt)
{
    int64_t per = g->c * g->kh * g->kw * g->oh * g->ow * (int64_t)kiln__dtype_size(dt);
    if (g->groups != 1 || kiln__dtype_is_narrow(dt) || per == 0 || per * g->n <= chunk_bytes())
        return 0;
    int64_t n = chunk_bytes() / per;
    return n < 1 ? 1 : n;
}

/* The columns [ns, C KH KW, OH OW] of samples n0 .. n0 + ns - 1 of x (one group), unrecorded. */
static kiln_status cols_of(const kiln_tensor *x, const geom *g, int64_t n0, int64_t ns,
                           const char *op, kiln_tensor **cols)
{
    int64_t k = g->c * g->kh * g->kw;
    kiln_status s =
        kiln__tensor_new(x->dev, x->dtype, 3, (const int64_t[]){ns, k, g->oh * g->ow}, op, cols);
    if (s == KILN_OK) {
        geom part = *g;
        part.n = ns;
        size_t global[2] = {(size_t)(ns * g->oh), (size_t)k};
        s = run("kiln_im2col", op, x, *cols, &part, n0, 2, global);
    }
    if (s != KILN_OK) {
        kiln_tensor_release(*cols);
        *cols = NULL;
    }
    return s;
}

/* y [N, O, OH, OW] = the convolution of x with w [O, C, KH, KW] (one group, no bias), `per`
 * samples at a time, recorded as one node (KILN__AG_CONV_GEMM, axis = per). */
static kiln_status conv_chunked(const kiln_tensor *x, const kiln_tensor *w, const geom *g,
                                int64_t per, const char *op, kiln_tensor **y)
{
    int64_t k = g->c * g->kh * g->kw, l = g->oh * g->ow, nch = (g->n + per - 1) / per;
    kiln_tensor **ys = kiln__calloc((size_t)nch, sizeof(kiln_tensor *)), *wv = NULL, *y3 = NULL;
    kiln_status s =
        ys ? kiln__tensor_view(w, 2, (const int64_t[]){g->o, k}, op, &wv) : kiln__host_oom(op);
    for (int64_t c = 0; c < nch && s == KILN_OK; c++) {
        int64_t n0 = c * per, ns = g->n - n0 < per ? g->n - n0 : per;
        kiln_tensor *cols = NULL;
        s = cols_of(x, g, n0, ns, op, &cols);
        if (s == KILN_OK)
            s = kiln__tensor_new(x->dev, x->dtype, 3, (const int64_t[]){ns, g->o, l}, op, &ys[c]);
        if (s == KILN_OK) /* [O, K] x [ns, K, L] = [ns, O, L] */
            s = kiln_matmul_out(wv, cols, ys[c]);
        kiln_tensor_release(cols);
    }
    if (s == KILN_OK)
        s = kiln__tensor_new(x->dev, x->dtype, 3, (const int64_t[]){g->n, g->o, l}, op, &y3);
    if (s == KILN_OK)
        s = kiln_cat_out((const kiln_tensor *const *)ys, (int)nch, 0, y3);
    if (s == KILN_OK)
        s = kiln__tensor_view(y3, 4, (const int64_t[]){g->n, g->o, g->oh, g->ow}, op, y);
    for (int64_t c = 0; ys && c < nch; c++)
        kiln_tensor_release(ys[c]);
    free(ys);
    kiln_tensor_release(wv);
    kiln_tensor_release(y3);
    kiln__ag_args a;
    geom_to_args(g, &a);
    a.axis = (int)per;
    const kiln_tensor *ins[2] = {x, w};
    return kiln__ag_record(s, op, KILN__AG_CONV_GEMM, &a, 2, ins, y);
}

kiln_status kiln__conv_chunked_bw(const kiln_tensor *g, const kiln_tensor *x, const kiln_tensor *w,
                                  const kiln__ag_args *a, kiln_tensor **dx, kiln_tensor **dw)
{
    const char *op = "kiln_conv2d (backward)";
    geom ge = geom_from(x, a, g->shape[2], g->shape[3]);
    ge.o = w->shape[0];
    int64_t k = ge.c * ge.kh * ge.kw, l = ge.oh * ge.ow, per = a->axis > 0 ? a->axis : 1;
    int64_t nch = (ge.n + per - 1) / per;
    kiln_tensor *g3 = NULL, *wv = NULL, *acc = NULL;
    if (dx)
        *dx = NULL;
    if (dw)
        *dw = NULL;
    kiln_status s = kiln__tensor_view(g, 3, (const int64_t[]){ge.n, ge.o, l}, op, &g3);
    if (s == KILN_OK)
        s = kiln__tensor_view(w, 2, (const int64_t[]){ge.o, k}, op, &wv);
    if (s == KILN_OK && dx)
        s = kiln__tensor_new(g->dev, g->dtype, 4, x->shape, op, dx);
    for (int64_t c = 0; c < nch && s == KILN_OK; c++) {
        int64_t n0 = c * per, ns = ge.n - n0 < per ? ge.n - n0 : per;
        kiln_tensor *gc = NULL, *dcols = NULL, *cols = NULL, *part = NULL, *sum = NULL;
        s = kiln__tensor_new(g->dev, g->dtype, 3, (const int64_t[]){ns, ge.o, l}, op, &gc);
        if (s == KILN_OK)
            s = kiln_slice_out(g3, 0, n0, n0 + ns, gc);
        if (s == KILN_OK && dx) { /* dx of the chunk = col2im(w^T g) */
            s = kiln__tensor_new(g->dev, g->dtype, 3, (const int64_t[]){ns, k, l}, op, &dcols);
            if (s == KILN_OK)
                s = kiln_matmul_trans_out(wv, gc, KILN_MATMUL_TRANS_A, dcols);
            geom part = ge;
            part.n = ns;
            if (s == KILN_OK)
                s = col2im_into(dcols, *dx, &part, n0, op);
        }
        if (s == KILN_OK && dw) { /* dw += the sum over the chunk's samples of g cols^T */
            s = cols_of(x, &ge, n0, ns, op, &cols);
            if (s == KILN_OK)
                s = kiln__tensor_new(g->dev, g->dtype, 3, (const int64_t[]){ns, ge.o, k}, op,
                                     &part);
            if (s == KILN_OK)
                s = kiln_matmul_trans_out(gc, cols, KILN_MATMUL_TRANS_B, part);
            if (s == KILN_OK)
                s = kiln_reduce(KILN_REDUCE_SUM, part, 0, false, &sum);
            if (s == KILN_OK && acc) {
                kiln_tensor *t = NULL;
                s = kiln_add(acc, sum, &t);
                kiln_tensor_release(acc);
                acc = t;
            } else if (s == KILN_OK) {
                acc = sum;
                sum = NULL;
            }
        }
        kiln_tensor_release(gc);
        kiln_tensor_release(dcols);
        kiln_tensor_release(cols);
        kiln_tensor_release(part);
        kiln_tensor_release(sum);
    }
    if (s == KILN_OK && dw)
        s = kiln_tensor_reshape(acc, 4, w->shape, dw);
    kiln_tensor_release(acc);
    kiln_tensor_release(g3);
    kiln_tensor_release(wv);
    return grads_or_none(s, dx, dw);
}

/* y [N, O, OH, OW] = the depthwise convolution of x with w [O, 1, KH, KW] (no bias), recorded
 * with its own gradient. */
static kiln_status conv_dw(const kiln_tensor *x, const kiln_tensor *w, const geom *g,
                           const char *op, kiln_tensor **y)
{
    kiln_status s =
        kiln__tensor_new(x->dev, x->dtype, 4, (const int64_t[]){g->n, g->o, g->oh, g->ow}, op, y);
    if (s == KILN_OK && (*y)->numel > 0) {
        /* CPU devices: a row per work-item (conv.cl says why) */
        bool rows = x->dev->info.type == KILN_DEVICE_CPU;
        size_t global[3] = {(size_t)g->ow, (size_t)g->oh, (size_t)(g->n * g->o)};
        s = rows ? run_dw("kiln_conv_dw_rows", op, x, w, *y, g, 2, global + 1)
                 : run_dw("kiln_conv_dw", op, x, w, *y, g, 3, global);
        if (s != KILN_OK) {
            kiln_tensor_release(*y);
            *y = NULL;
        }
    }
    kiln__ag_args a;
    geom_to_args(g, &a);
    a.axis = (int)(g->o / g->c); /* the channel multiplier M */
    const kiln_tensor *ins[2] = {x, w};
    return kiln__ag_record(s, op, KILN__AG_CONV_DW, &a, 2, ins, y);
}

kiln_status kiln__conv_dw_bw(const kiln_tensor *g, const kiln_tensor *x, const kiln_tensor *w,
                             const kiln__ag_args *a, kiln_tensor **dx, kiln_tensor **dw)
{
    const char *op = "kiln_conv2d (backward)";
    geom ge = geom_from(x, a, g->shape[2], g->shape[3]);
    ge.o = w->shape[0];
    kiln_status s = KILN_OK;
    if (dx)
        *dx = NULL;
    if (dw)
        *dw = NULL;
    if (dx) {
        s = kiln__tensor_new(g->dev, g->dtype, 4, x->shape, op, dx);
        if (s == KILN_OK && x->numel > 0) {
            bool rows = x->dev->info.type == KILN_DEVICE_CPU && ge.sw == 1;
            size_t global[3] = {(size_t)ge.w, (size_t)ge.h, (size_t)(ge.n * ge.c)};
            s = rows ? run_dw("kiln_conv_dw_bw_x_rows", op, g, w, *dx, &ge, 2, global + 1)
                     : run_dw("kiln_conv_dw_bw_x", op, g, w, *dx, &ge, 3, global);
        }
    }
    if (dw && s == KILN_OK) {
        /* per sample and tap in the compute type, then summed over the samples */
        int64_t taps = ge.kh * ge.kw, pshape[2] = {ge.n, ge.o * taps};
        kiln_tensor *part = NULL, *sum = NULL, *sum4 = NULL;
        s = kiln__tensor_new(g->dev, kiln__dtype_compute(g->dtype), 2, pshape, op, &part);
        if (s == KILN_OK && part->numel > 0) {
            size_t global[2] = {(size_t)taps, (size_t)(ge.n * ge.o)};
            s = run_dw("kiln_conv_dw_bw_w", op, g, x, part, &ge, 2, global);
        }
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_SUM, part, 0, false, &sum);
        if (s == KILN_OK)
            s = kiln_tensor_reshape(sum, 4, w->shape, &sum4);
        if (s == KILN_OK && sum4->dtype == w->dtype) {
            *dw = sum4;
            sum4 = NULL;
        } else if (s == KILN_OK) {
            s = kiln_cast(sum4, w->dtype, dw);
        }
        kiln_tensor_release(part);
        kiln_tensor_release(sum);
        kiln_tensor_release(sum4);
    }
    return grads_or_none(s, dx, dw);
}

/* The checks of kiln_conv2d: shapes, dtypes, devices and parameters, into *g. */
static kiln_status check(const char *op, const kiln_tensor *x, const kiln_tensor *w,
                         const kiln_tensor *bias, const kiln_conv2d_params *p, geom *g)
{
    const kiln_tensor *ts[3] = {x, w, bias};
    static const char *const names[3] = {"x", "weight", "bias"};
    kiln_status s = kiln__check_tensors(op, 3, 2, ts, names, NULL);
    if (s == KILN_OK && bias)
        s = kiln__check_tensor(bias, op, "bias");
    if (s != KILN_OK)
        return s;
    char a[160], b[160];
    if (!kiln__dtype_is_float(x->dtype))
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: x is %s; convolution takes f32, f64, f16 or bf16", op,
                           kiln_dtype_name(x->dtype));
    if (w->dtype != x->dtype || (bias && bias->dtype != x->dtype))
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: x is %s, weight %s%s%s; all must have one dtype", op,
                           kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype),
                           bias ? ", bias " : "", bias ? kiln_dtype_name(bias->dtype) : "");
    if (x->ndim != 4 || w->ndim != 4)
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: x has shape %s and weight %s; x is [N, C, H, W] and weight [O, "
                           "C/groups, KH, KW]",
                           op, kiln__shape_str(a, sizeof a, x->ndim, x->shape),
                           kiln__shape_str(b, sizeof b, w->ndim, w->shape));
    kiln_conv2d_params d = p ? *p : (kiln_conv2d_params){0};
    for (int i = 0; i < 2; i++)
        if (d.stride[i] < 0 || d.padding[i] < 0 || d.dilation[i] < 0)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: stride %d, padding %d and dilation %d (dimension %d) must not "
                               "be negative (0 means the default: stride and dilation 1)",
                               op, d.stride[i], d.padding[i], d.dilation[i], i);
    if (d.groups < 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: groups is %d", op, d.groups);
    *g = (geom){.n = x->shape[0],
                .c = x->shape[1],
                .h = x->shape[2],
                .w = x->shape[3],
                .o = w->shape[0],
                .kh = w->shape[2],
                .kw = w->shape[3],
                .sh = d.stride[0] ? d.stride[0] : 1,
                .sw = d.stride[1] ? d.stride[1] : 1,
                .ph = d.padding[0],
                .pw = d.padding[1],
                .dh = d.dilation[0] ? d.dilation[0] : 1,
                .dw = d.dilation[1] ? d.dilation[1] : 1,
                .groups = d.groups ? d.groups : 1};
    if (g->c % g->groups || g->o % g->groups || w->shape[1] != g->c / g->groups)
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: x has %" PRId64 " channels and weight shape %s with groups %d; "
                           "both channel counts must divide by groups and weight be [O, C/groups "
                           "(%" PRId64 "), KH, KW]",
                           op, g->c, kiln__shape_str(b, sizeof b, w->ndim, w->shape), g->groups,
                           g->c % g->groups ? (int64_t)0 : g->c / g->groups);
    if (bias && (bias->ndim != 1 || bias->shape[0] != g->o))
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: bias has shape %s; it needs [%" PRId64 "], one per output channel",
                           op, kiln__shape_str(a, sizeof a, bias->ndim, bias->shape), g->o);
    /* sizes: each term within int64 (dimensions are below 2^62, parameters below 2^31) */
    int64_t eh = (int64_t)g->dh * (g->kh - 1) + 1, ew = (int64_t)g->dw * (g->kw - 1) + 1;
    int64_t ph = g->h + 2 * (int64_t)g->ph, pw = g->w + 2 * (int64_t)g->pw;
    if (g->kh < 1 || g->kw < 1 || ph < eh || pw < ew)
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: a %" PRId64 "x%" PRId64 " kernel (dilated %" PRId64 "x%" PRId64
                           ") does not fit the %" PRId64 "x%" PRId64 " input padded to %" PRId64
                           "x%" PRId64,
                           op, g->kh, g->kw, eh, ew, g->h, g->w, ph, pw);
    g->oh = (ph - eh) / g->sh + 1;
    g->ow = (pw - ew) / g->sw + 1;
    int64_t k = 0, cols = 0, t;
    if (!kiln__dim_mul(g->c / g->groups, g->kh * g->kw, &k) || !kiln__dim_mul(k, g->groups, &t) ||
        !kiln__dim_mul(g->n, g->oh, &cols) || !kiln__dim_mul(cols, g->ow, &cols) ||
        !kiln__dim_mul(t, cols, &t))
        return kiln__error(KILN_ERR_OUT_OF_MEMORY,
                           "%s: the unfolded input (%" PRId64 " x %" PRId64 " x %" PRId64
                           ") is too large",
                           op, g->c, g->kh * g->kw, g->n * g->oh * g->ow);
    return KILN_OK;
}

kiln_status kiln_conv2d(const kiln_tensor *x, const kiln_tensor *weight, const kiln_tensor *bias,
                        const kiln_conv2d_params *params, kiln_tensor **out)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[3] = {x, weight, bias};
        kiln_tensor *tmp[3];
        kiln_status amp;
        if (kiln__amp_apply("kiln_conv2d", KILN__AMP_LOWER, 3, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_conv2d(in[0], in[1], in[2], params, out);
            else if (out)
                *out = NULL;
            kiln__amp_release(3, tmp);
            return amp;
        }
    }
    const char *op = "kiln_conv2d";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    geom g;
    kiln_status s = check(op, x, weight, bias, params, &g);
    if (s != KILN_OK)
        return s;
    int64_t G = g.groups, og = g.o / G, k = g.c / G * g.kh * g.kw, l = g.oh * g.ow;
    kiln_tensor *cols = NULL, *wg = NULL, *y = NULL, *y4 = NULL, *p = NULL, *r = NULL, *b4 = NULL;
    kiln__log_hold();
    /* A 1x1 kernel at stride 1 without padding or groups: x as [N, C, H W] is its own im2col
     * (a view), so the convolution is the matmul alone (a third of the time of the im2col path
     * at N32 64->128 28x28 on the CPU) */
    bool pointwise =
        G == 1 && g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
    bool direct = !pointwise && depthwise(&g);
    int64_t per = pointwise || direct ? 0 : chunk_samples(&g, x->dtype);
    if (kiln__log_enabled(KILN_LOG_DEBUG))
        kiln__log(KILN_LOG_DEBUG, "%s: %s", op,
                  pointwise ? "1x1 stride 1: matmul on x itself (no im2col)"
                  : direct  ? "depthwise: the direct kernel (no im2col, no matmul)"
                  : per     ? "im2col, then matmul, a chunk of samples at a time"
                            : "im2col, then matmul");
    if (direct)
        s = conv_dw(x, weight, &g, op, &y);
    else if (per)
        s = conv_chunked(x, weight, &g, per, op, &y);
    else if (pointwise)
        s = kiln_tensor_reshape(x, 3, (const int64_t[]){g.n, g.c, l}, &cols);
    else
        s = im2col(x, &g, op, &cols);
    if (direct || per) {
        /* y is [N, O, OH, OW] already */
    } else if (G == 1) { /* [O, K] x [N, K, L] = [N, O, L]: NCHW as it comes */
        if (s == KILN_OK)
            s = kiln_tensor_reshape(weight, 2, (const int64_t[]){g.o, k}, &wg);
        if (s == KILN_OK)
            s = kiln_matmul(wg, cols, &y);
    } else {
        if (s == KILN_OK) /* weight [O, C/G, KH, KW] as [G, O/G, K]; [G, O/G, N L] */
            s = kiln_tensor_reshape(weight, 3, (const int64_t[]){G, og, k}, &wg);
        if (s == KILN_OK)
            s = kiln_matmul(wg, cols, &y4);
        if (s == KILN_OK)
            s = kiln_tensor_reshape(y4, 4, (const int64_t[]){G, og, g.n, l}, &p);
        if (s == KILN_OK) /* [N, G, O/G, L] = [N, O, OH, OW] */
            s = kiln_permute(p, (const int[]){2, 0, 1, 3}, &y);
    }
    if (s == KILN_OK)
        s = kiln_tensor_reshape(y, 4, (const int64_t[]){g.n, g.o, g.oh, g.ow}, bias ? &r : out);
    if (s == KILN_OK && bias)
        s = kiln_tensor_reshape(bias, 4, (const int64_t[]){1, g.o, 1, 1}, &b4);
    if (s == KILN_OK && bias)
        s = kiln_add(r, b4, out);
    if (s != KILN_OK) /* an inner op's error (out of memory, the device), under this name */
        s = kiln__inner_error(s, op);
    kiln__log_release();
    kiln_tensor_release(cols);
    kiln_tensor_release(wg);
    kiln_tensor_release(y);
    kiln_tensor_release(y4);
    kiln_tensor_release(p);
    kiln_tensor_release(r);
    kiln_tensor_release(b4);
    return s;
}

/* ---- pooling ------------------------------------------------------------------------------ */

/* The checked window of a pooling of x into *w (KH, KW, SH, SW, PH, PW) and the output size. */
static kiln_status pool_check(const char *op, const kiln_tensor *x, const kiln_pool2d_params *p,
                              int64_t w[6], int64_t *oh, int64_t *ow)
{
    kiln_status s = kiln__check_tensor(x, op, "x");
    if (s != KILN_OK)
        return s;
    if (!p)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: params is NULL; give the kernel size",
                           op);
    if (!kiln__dtype_is_float(x->dtype))
        return kiln__error(KILN_ERR_UNSUPPORTED, "%s: x is %s; pooling takes f32, f64, f16 or bf16",
                           op, kiln_dtype_name(x->dtype));
    char a[160];
    if (x->ndim != 4)
        return kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: x has shape %s; it needs [N, C, H, W]", op,
                           kiln__shape_str(a, sizeof a, x->ndim, x->shape));
    for (int i = 0; i < 2; i++) {
        int k = p->kernel[i], st = p->stride[i] ? p->stride[i] : k, pad = p->padding[i];
        if (k < 1 || st < 1 || pad < 0 || pad > k / 2)
            return kiln__error(
                KILN_ERR_INVALID_ARGUMENT,
                "%s: kernel %d, stride %d and padding %d in dimension %d; the kernel "
                "must be at least 1, the stride at least 1 (0: the kernel size) and "
                "the padding at most half the kernel (as PyTorch)",
                op, p->kernel[i], p->stride[i], pad, i);
        w[i] = k;
        w[2 + i] = st;
        w[4 + i] = pad;
    }
    int64_t ph = x->shape[2] + 2 * w[4], pw = x->shape[3] + 2 * w[5];
    if (ph < w[0] || pw < w[1])
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: a %" PRId64 "x%" PRId64 " window does not fit x of shape %s padded "
                           "to %" PRId64 "x%" PRId64,
                           op, w[0], w[1], kiln__shape_str(a, sizeof a, x->ndim, x->shape), ph, pw);
    *oh = (ph - w[0]) / w[2] + 1;
    *ow = (pw - w[1]) / w[3] + 1;
    return KILN_OK;
}

static void pool_args(const int64_t w[6], kiln__ag_args *a)
{
    *a =
        (kiln__ag_args){.perm = {(int)w[0], (int)w[1], (int)w[2], (int)w[3], (int)w[4], (int)w[5]}};
}

/* Launch a pooling kernel for the pooling of x (its N C, H and W) over [cols, rows, planes] with
 * (tensors..., NC, H, W, OH, OW, window), ts[0]'s dtype selecting the program. */
static kiln_status pool_run(const char *name, const char *op, const kiln_tensor *x, int ntensors,
                            const kiln_tensor *const *ts, const int64_t w[6], int64_t oh,
                            int64_t ow, const size_t *global)
{
    kiln__kernel *k;
    kiln_status s = conv_kernel(ts[0]->dev, ts[0]->dtype, name, op, &k);
    if (s != KILN_OK)
        return s;
    kiln_arg args[14];
    int n = 0;
    for (int i = 0; i < ntensors; i++)
        args[n++] = kiln_arg_tensor(ts[i]);
    const int64_t v[] = {x->shape[0] * x->shape[1],
                         x->shape[2],
                         x->shape[3],
                         oh,
                         ow,
                         w[0],
                         w[1],
                         w[2],
                         w[3],
                         w[4],
                         w[5]};
    for (int i = 0; i < 11; i++)
        args[n++] = kiln_arg_i64(v[i]);
    return kiln__kernel_launch(ts[0]->dev, k, op, 3, global, NULL, n, args);
}

kiln_status kiln_max_pool2d(const kiln_tensor *x, const kiln_pool2d_params *params,
                            kiln_tensor **out, kiln_tensor **indices)
{
    const char *op = "kiln_max_pool2d";
    if (indices)
        *indices = NULL;
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    int64_t w[6], oh, ow;
    kiln_status s = pool_check(op, x, params, w, &oh, &ow);
    if (s != KILN_OK)
        return s;
    const int64_t shape[4] = {x->shape[0], x->shape[1], oh, ow};
    kiln_tensor *y = NULL, *idx = NULL;
    s = kiln__tensor_new(x->dev, x->dtype, 4, shape, op, &y);
    if (s == KILN_OK && indices)
        s = kiln__tensor_new(x->dev, KILN_I64, 4, shape, op, &idx);
    if (s == KILN_OK && y->numel > 0) {
        size_t global[3] = {(size_t)ow, (size_t)oh, (size_t)(x->shape[0] * x->shape[1])};
        if (idx)
            s = pool_run("kiln_max_pool2d", op, x, 3, (const kiln_tensor *[]){x, y, idx}, w, oh, ow,
                         global);
        else
            s = pool_run("kiln_max_pool2d_values", op, x, 2, (const kiln_tensor *[]){x, y}, w, oh,
                         ow, global);
    }
    if (s != KILN_OK) {
        kiln_tensor_release(y);
        kiln_tensor_release(idx);
        return s;
    }
    *out = y;
    kiln__ag_args a;
    pool_args(w, &a);
    s = kiln__ag_record(s, op, KILN__AG_MAX_POOL, &a, 1, &x, out); /* the backward needs x alone */
    if (s == KILN_OK && indices)
        *indices = idx;
    else
        kiln_tensor_release(idx);
    return s;
}

kiln_status kiln_avg_pool2d(const kiln_tensor *x, const kiln_pool2d_params *params,
                            kiln_tensor **out)
{
    const char *op = "kiln_avg_pool2d";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    int64_t w[6], oh, ow;
    kiln_status s = pool_check(op, x, params, w, &oh, &ow);
    if (s != KILN_OK)
        return s;
    const int64_t shape[4] = {x->shape[0], x->shape[1], oh, ow};
    s = kiln__tensor_new(x->dev, x->dtype, 4, shape, op, out);
    if (s == KILN_OK && (*out)->numel > 0) {
        size_t global[3] = {(size_t)ow, (size_t)oh, (size_t)(x->shape[0] * x->shape[1])};
        s = pool_run("kiln_avg_pool2d", op, x, 2, (const kiln_tensor *[]){x, *out}, w, oh, ow,
                     global);
        if (s != KILN_OK) {
            kiln_tensor_release(*out);
            *out = NULL;
        }
    }
    kiln__ag_args a;
    pool_args(w, &a);
    return kiln__ag_record(s, op, KILN__AG_AVG_POOL, &a, 1, &x, out);
}

/* The gradients: dx over [W, H, NC] (a gather per input element), or with over_windows over
 * [OW, OH, NC] (a scatter per window, after zeros when zero_first: some element is in no
 * window); max pooling reads x (`values`) too. */
static kiln_status pool_bw(const char *name, const kiln_tensor *g, const kiln_tensor *x,
                           const kiln_tensor *values, const kiln__ag_args *a, bool over_windows,
                           bool zero_first, kiln_tensor **dx)
{
    const char *op = "kiln_backward (pooling)";
    int64_t w[6];
    for (int i = 0; i < 6; i++)
        w[i] = a->perm[i];
    kiln_status s = kiln__tensor_new(g->dev, g->dtype, 4, x->shape, op, dx);
    if (s == KILN_OK && zero_first)
        s = kiln_fill(*dx, 0.0);
    if (s == KILN_OK && x->numel > 0 && g->numel > 0) {
        const int64_t *o = over_windows ? g->shape : x->shape;
        size_t global[3] = {(size_t)o[3], (size_t)o[2], (size_t)(x->shape[0] * x->shape[1])};
        const kiln_tensor *ts[3] = {g, values, *dx};
        s = pool_run(name, op, x, values ? 3 : 2, values ? ts : (const kiln_tensor *[]){g, *dx}, w,
                     g->shape[2], g->shape[3], global);
    }
    if (s != KILN_OK) {
        kiln_tensor_release(*dx);
        *dx = NULL;
    }
    return s;
}

/* Where windows do not overlap (stride >= kernel in both dimensions: the usual 2x2 pooling) each
 * window's maximum is found once and g scattered (kiln_max_pool2d_bw_windows), after zeros where
 * some element is in no window; else the gather, which searches each window once per element. */
kiln_status kiln__max_pool2d_bw(const kiln_tensor *g, const kiln_tensor *x, const kiln__ag_args *a,
                                kiln_tensor **dx)
{
    const int *w = a->perm; /* KH, KW, SH, SW, PH, PW */
    if (w[2] < w[0] || w[3] < w[1])
        return pool_bw("kiln_max_pool2d_bw", g, x, x, a, false, false, dx);
    bool covered = w[2] == w[0] && w[3] == w[1] && w[4] == 0 && w[5] == 0 &&
                   g->shape[2] * w[0] == x->shape[2] && g->shape[3] * w[1] == x->shape[3];
    return pool_bw("kiln_max_pool2d_bw_windows", g, x, x, a, true, !covered, dx);
}

kiln_status kiln__avg_pool2d_bw(const kiln_tensor *g, const kiln_tensor *x, const kiln__ag_args *a,
                                kiln_tensor **dx)
{
    return pool_bw("kiln_avg_pool2d_bw", g, x, NULL, a, false, false, dx);
}

kiln_status kiln_adaptive_avg_pool2d(const kiln_tensor *x, int64_t oh, int64_t ow,
                                     kiln_tensor **out)
{
    const char *op = "kiln_adaptive_avg_pool2d";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_tensor(x, op, "x");
    if (s != KILN_OK)
        return s;
    char a[160];
    if (x->ndim != 4 || !kiln__dtype_is_float(x->dtype))
        return kiln__error(x->ndim != 4 ? KILN_ERR_SHAPE_MISMATCH : KILN_ERR_UNSUPPORTED,
                           "%s: x is %s of shape %s; it needs a floating [N, C, H, W]", op,
                           kiln_dtype_name(x->dtype),
                           kiln__shape_str(a, sizeof a, x->ndim, x->shape));
    if (oh != 1 || ow != 1)
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: an output of %" PRId64 "x%" PRId64 "; only the global 1x1 average "
                           "is supported yet (or use kiln_avg_pool2d where H and W divide evenly)",
                           op, oh, ow);
    /* the mean over each plane: [N, C, H W] -> mean over axis 2 -> [N, C, 1, 1] */
    kiln_tensor *flat = NULL, *m = NULL;
    kiln__log_hold();
    s = kiln_tensor_reshape(x, 3, (const int64_t[]){x->shape[0], x->shape[1], -1}, &flat);
    if (s == KILN_OK && x->shape[2] * x->shape[3] == 0)
        s = kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: x has empty planes", op);
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_MEAN, flat, 2, true, &m);
    if (s == KILN_OK)
        s = kiln_tensor_reshape(m, 4, (const int64_t[]){x->shape[0], x->shape[1], 1, 1}, out);
    if (s != KILN_OK)
        s = kiln__inner_error(s, op);
    kiln__log_release();
    kiln_tensor_release(flat);
    kiln_tensor_release(m);
    return s;
}

/* ---- the _out forms: the allocating form with grad mode off, copied into out -------------- */

kiln_status kiln_conv2d_out(const kiln_tensor *x, const kiln_tensor *weight,
                            const kiln_tensor *bias, const kiln_conv2d_params *params,
                            kiln_tensor *out)
{
    const char *op = "kiln_conv2d_out";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    kiln__log_hold();
    bool grad = kiln_set_grad_enabled(false);
    kiln_tensor *r = NULL;
    kiln_status s = kiln_conv2d(x, weight, bias, params, &r);
    kiln_set_grad_enabled(grad);
    return kiln__out_from(op, s, r, out);
}

kiln_status kiln_max_pool2d_out(const kiln_tensor *x, const kiln_pool2d_params *params,
                                kiln_tensor *out, kiln_tensor *indices)
{
    const char *op = "kiln_max_pool2d_out";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    kiln__log_hold();
    bool grad = kiln_set_grad_enabled(false);
    kiln_tensor *r = NULL, *ri = NULL;
    kiln_status s = kiln_max_pool2d(x, params, &r, indices ? &ri : NULL);
    kiln_set_grad_enabled(grad);
    if (indices) {
        kiln__log_hold(); /* released by the first kiln__out_from */
        s = kiln__out_from(op, s, ri, indices);
    }
    return kiln__out_from(op, s, r, out);
}

kiln_status kiln_avg_pool2d_out(const kiln_tensor *x, const kiln_pool2d_params *params,
                                kiln_tensor *out)
{
    const char *op = "kiln_avg_pool2d_out";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    kiln__log_hold();
    bool grad = kiln_set_grad_enabled(false);
    kiln_tensor *r = NULL;
    kiln_status s = kiln_avg_pool2d(x, params, &r);
    kiln_set_grad_enabled(grad);
    return kiln__out_from(op, s, r, out);
}

kiln_status kiln_adaptive_avg_pool2d_out(const kiln_tensor *x, int64_t oh, int64_t ow,
                                         kiln_tensor *out)
{
    const char *op = "kiln_adaptive_avg_pool2d_out";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    kiln__log_hold();
    bool grad = kiln_set_grad_enabled(false);
    kiln_tensor *r = NULL;
    kiln_status s = kiln_adaptive_avg_pool2d(x, oh, ow, &r);
    kiln_set_grad_enabled(grad);
    return kiln__out_from(op, s, r, out);
}
