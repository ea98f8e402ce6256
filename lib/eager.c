/* eager.c - the eager kernel runner of the elementwise ops (eager.h): one op's built-in kernel
 * into a materialised result. The execution layer (lib/layers.txt): the elementwise ops (lib/ops/
 * elementwise.c) run them when fusion is off, and fusion.c for a chain of one op. */
#include "eager.h"
#include "dtype.h"
#include "launch.h"
#include "ops/common.h"
#include "ops/optables.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

/* One program per dtype holds every elementwise kernel of that dtype. */
static kiln_status get_kernel(kiln_device *dev, kiln_dtype dtype, const char *name, const char *op,
                              kiln__kernel **k)
{
    char defines[192];
    kiln__elementwise_defines(defines, sizeof defines, dtype);
    return kiln__builtin_kernel(dev, "elementwise", defines, name, op, k);
}

/* Work-items of a same-shape kernel over n elements: those of f16 programs on CPU devices (and
 * the kiln_cast8_ kernels) take 8 elements each (elementwise.cl, H8_FOR). */
static size_t items(bool eight, int64_t n)
{
    return eight ? (size_t)((n + 7) / 8) : (size_t)n;
}

/* The kernel `name` of dtype's program over `global` work-items (1-D, args as given). */
static kiln_status launch_n(kiln_device *dev, kiln_dtype dtype, const char *name, const char *fn,
                            size_t global, int nargs, const kiln_arg *args)
{
    kiln__kernel *k;
    kiln_status s = get_kernel(dev, dtype, name, fn, &k);
    return s == KILN_OK ? kiln__kernel_launch(dev, k, fn, 1, &global, NULL, nargs, args) : s;
}

static kiln_status launch_1d(kiln_device *dev, kiln__kernel *k, const char *fn,
                             const kiln__bcast *bc, const kiln_tensor *a, const kiln_tensor *b,
                             kiln_tensor *res)
{
    kiln_arg args[4 + 3 * KILN_MAX_DIMS] = {kiln_arg_tensor(a), kiln_arg_tensor(b),
                                            kiln_arg_tensor(res), kiln_arg_i64(bc->numel)};
    bool flat = kiln__bcast_flat(bc);
    int nargs = 4 + (flat ? 0 : kiln__bcast_args(bc, args + 4));
    size_t global = items(flat && kiln__elementwise_by8(dev->info.type, a->dtype), bc->numel);
    return kiln__kernel_launch(dev, k, fn, 1, &global, NULL, nargs, args);
}

/* Collapsed dims [rows, cols] (rows 1 when there is one dim); dimension 0 of the range runs
 * along cols, so neighbouring work-items touch neighbouring elements. */
static kiln_status launch_2d(kiln_device *dev, kiln__kernel *k, const char *fn,
                             const kiln__bcast *bc, const kiln_tensor *a, const kiln_tensor *b,
                             kiln_tensor *res)
{
    int c = bc->nd - 1, r = bc->nd - 2;
    int64_t rows = r >= 0 ? bc->cshape[r] : 1;
    kiln_arg args[9] = {kiln_arg_tensor(a),
                        kiln_arg_tensor(b),
                        kiln_arg_tensor(res),
                        kiln_arg_i64(rows),
                        kiln_arg_i64(bc->cshape[c]),
                        kiln_arg_i64(r >= 0 ? bc->cstride[0][r] : 0),
                        kiln_arg_i64(bc->cstride[0][c]),
                        kiln_arg_i64(r >= 0 ? bc->cstride[1][r] : 0),
                        kiln_arg_i64(bc->cstride[1][c])};
    size_t global[2] = {(size_t)bc->cshape[c], (size_t)rows};
    return kiln__kernel_launch(dev, k, fn, 2, global, NULL, 9, args);
}

/* Three collapsed dims [d0, d1, d2]; dimension 0 of the range runs along d2. */
static kiln_status launch_3d(kiln_device *dev, kiln__kernel *k, const char *fn,
                             const kiln__bcast *bc, const kiln_tensor *a, const kiln_tensor *b,
                             kiln_tensor *res)
{
    kiln_arg args[12] = {kiln_arg_tensor(a), kiln_arg_tensor(b), kiln_arg_tensor(res)};
    int n = 3;
    for (int d = 0; d < 3; d++)
        args[n++] = kiln_arg_i64(bc->cshape[d]);
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < 3; d++)
            args[n++] = kiln_arg_i64(bc->cstride[i][d]);
    size_t global[3] = {(size_t)bc->cshape[2], (size_t)bc->cshape[1], (size_t)bc->cshape[0]};
    return kiln__kernel_launch(dev, k, fn, 3, global, NULL, n, args);
}

/* The eager kernel of op into res (materialised, as are op's inputs): the path when fusion is
 * off, and fusion.c's for a chain of one op (no kernel to generate). */
kiln_status kiln__elementwise_run(const char *fn, kiln_device *dev, const kiln__fop *fo,
                                  kiln_tensor *res)
{
    const kiln_tensor *a = fo->in[0], *b = fo->in[1];
    int64_t n = res->numel;
    char name[64];
    kiln_status s = KILN_OK;
    switch (fo->kind) {
    case KILN__F_BINARY: {
        kiln_binary_op op = (kiln_binary_op)fo->op;
        kiln__bcast bc;
        if ((s = kiln__broadcast(fn, 2, fo->in, &bc)) != KILN_OK)
            return s;
        /* Same shape: flat. Up to 2 collapsed dims (a bias row or column): a 2-D range; 3 (a
         * per-channel vector over [N, C, HW]): a 3-D range. Else the general kernel, which
         * divides to find each coordinate. */
        bool flat = kiln__bcast_flat(&bc), two = !flat && bc.nd <= 2, three = !flat && bc.nd == 3;
        kiln__binary_kernel(name, sizeof name,
                            flat    ? KILN__BINARY_FLAT
                            : two   ? KILN__BINARY_2D
                            : three ? KILN__BINARY_3D
                                    : KILN__BINARY_BCAST,
                            op);
        kiln__kernel *k;
        if ((s = get_kernel(dev, fo->in_dtype, name, fn, &k)) == KILN_OK)
            s = two     ? launch_2d(dev, k, fn, &bc, a, b, res)
                : three ? launch_3d(dev, k, fn, &bc, a, b, res)
                        : launch_1d(dev, k, fn, &bc, a, b, res);
        return s;
    }
    case KILN__F_SCALAR: {
        bool by8 = kiln__elementwise_by8(dev->info.type, fo->in_dtype);
        kiln_arg args[4] = {kiln_arg_tensor(a), kiln__arg_scalar(fo->in_dtype, fo->scalar),
                            kiln_arg_tensor(res), kiln_arg_i64(n)};
        kiln__binary_kernel(name, sizeof name, KILN__BINARY_SCALAR, (kiln_binary_op)fo->op);
        return launch_n(dev, fo->in_dtype, name, fn, items(by8, n), 4, args);
    }
    case KILN__F_WHERE: {
        kiln__bcast bc;
        if ((s = kiln__broadcast(fn, 3, fo->in, &bc)) != KILN_OK)
            return s;
        bool flat = kiln__bcast_flat(&bc);
        kiln_arg args[5 + 4 * KILN_MAX_DIMS] = {kiln_arg_tensor(a), kiln_arg_tensor(b),
                                                kiln_arg_tensor(fo->in[2]), kiln_arg_tensor(res),
                                                kiln_arg_i64(n)};
        int nargs = 5 + (flat ? 0 : kiln__bcast_args(&bc, args + 5));
        return launch_n(dev, fo->in_dtype, flat ? "kiln_where" : "kiln_where_bb", fn, (size_t)n,
                        nargs, args);
    }
    case KILN__F_UNARY: {
        bool by8 = kiln__elementwise_by8(dev->info.type, fo->in_dtype);
        kiln_arg args[3] = {kiln_arg_tensor(a), kiln_arg_tensor(res), kiln_arg_i64(n)};
        kiln__unary_kernel(name, sizeof name, false, (kiln_unary_op)fo->op);
        return launch_n(dev, fo->in_dtype, name, fn, items(by8, n), 3, args);
    }
    case KILN__F_UNARY_BW: {
        bool by8 = kiln__elementwise_by8(dev->info.type, fo->in_dtype);
        kiln_arg args[4] = {kiln_arg_tensor(a), kiln_arg_tensor(b), kiln_arg_tensor(res),
                            kiln_arg_i64(n)};
        kiln__unary_kernel(name, sizeof name, true, (kiln_unary_op)fo->op);
        return launch_n(dev, fo->in_dtype, name, fn, items(by8, n), 4, args);
    }
    case KILN__F_CAST: {
        kiln_arg args[3] = {kiln_arg_tensor(a), kiln_arg_tensor(res), kiln_arg_i64(n)};
        /* f32 <-> f16, mixed precision's casts: 8 elements per work-item */
        const char *eight = kiln__cast8_kernel(dev->info.type, fo->in_dtype, res->dtype);
        if (!eight)
            kiln__cast_kernel(name, sizeof name, res->dtype);
        return launch_n(dev, fo->in_dtype, eight ? eight : name, fn, items(eight != NULL, n), 3,
                        args);
    }
    }
    return kiln__error(KILN_ERR_STATE, "%s: unknown elementwise op kind %d", fn, (int)fo->kind);
}
