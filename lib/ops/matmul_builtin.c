/* matmul_builtin.c - the "builtin" matmul path: kiln's tiled OpenCL C kernel (kernels/matmul.cl),
 * for devices with neither CLBlast nor a host BLAS. */
#include <stdio.h>
#include <string.h>

#include "../program.h"
#include "../registry.h"
#include "../status.h"
#include "../tensor.h"
#include "common.h"
#include "matmul.h"

/* Tile edge and outputs per work-item, best first; a work-group is (TS/WPT)^2 work-items. */
static const struct {
    int ts, wpt;
} tiles[] = {{64, 4}, {32, 2}, {16, 1}, {8, 1}, {4, 1}, {1, 1}};
#define NTILES ((int)(sizeof tiles / sizeof tiles[0]))

/* Whether a tile fits the device before building it: work-group size and the two tiles in
 * local memory (1 KiB left for the compiler's own use). */
static bool tile_fits_device(const kiln_device *dev, int i, size_t esize)
{
    size_t rts = (size_t)(tiles[i].ts / tiles[i].wpt);
    size_t local = 2 * (size_t)tiles[i].ts * (size_t)(tiles[i].ts + 1) * esize;
    return rts * rts <= dev->info.max_work_group_size && local + 1024 <= dev->info.local_mem_bytes;
}

/* The kernel with the largest tile the device takes; *ti is the tile's index. */
static kiln_status tiled_kernel(kiln_device *dev, kiln_dtype dtype, kiln__kernel **k, int *ti)
{
    kiln_status s = KILN_OK;
    for (int i = 0; i < NTILES; i++) {
        if (!tile_fits_device(dev, i, kiln_dtype_size(dtype)))
            continue;
        char defs[256] = "";
        kiln__dtype_defines(defs, sizeof defs, "T", dtype);
        size_t used = strnlen(defs, sizeof defs);
        snprintf(defs + used, sizeof defs - used, " -DKILN_MM_TS=%d -DKILN_MM_WPT=%d",
                 tiles[i].ts, tiles[i].wpt);
        s = kiln__builtin_kernel(dev, "matmul", defs, "kiln_matmul_tiled", "kiln_matmul", k);
        if (s != KILN_OK)
            return s;
        /* Register pressure can lower the kernel's limit below the device's. */
        size_t rts = (size_t)(tiles[i].ts / tiles[i].wpt);
        if (rts * rts <= (*k)->wg_size) {
            *ti = i;
            return KILN_OK;
        }
    }
    *k = NULL;
    return kiln__error(KILN_ERR_UNSUPPORTED,
                       "kiln_matmul: no tile size of the built-in kernel fits %s (%s): "
                       "%llu bytes of local memory, work-groups of %llu",
                       dev->info.spec, dev->info.name,
                       (unsigned long long)dev->info.local_mem_bytes,
                       (unsigned long long)dev->info.max_work_group_size);
}

static bool builtin_available(kiln_device *dev, char *why, size_t size)
{
    (void)dev;
    (void)why;
    (void)size;
    return true;
}

static size_t round_up(int64_t n, int ts)
{
    return (size_t)((n + ts - 1) / ts);
}

static kiln_status builtin_run(const kiln__matmul_problem *p)
{
    kiln__kernel *k;
    int ti = 0;
    kiln_status s = tiled_kernel(p->dev, p->dtype, &k, &ti);
    if (s != KILN_OK)
        return s;
    int ts = tiles[ti].ts;
    size_t rts = (size_t)(ts / tiles[ti].wpt);
    size_t local[3] = {rts, rts, 1};
    size_t global[3] = {round_up(p->n, ts) * rts, round_up(p->m, ts) * rts, (size_t)p->batch};
    /* Element strides of op(A)(i, p) and op(B)(p, j) in row-major storage. */
    int64_t sar = p->trans_a ? 1 : p->k, sac = p->trans_a ? p->m : 1;
    int64_t sbr = p->trans_b ? 1 : p->n, sbc = p->trans_b ? p->k : 1;
    kiln_arg args[] = {
        kiln_arg_tensor(p->a),        kiln_arg_tensor(p->b),        kiln_arg_tensor(p->c),
        kiln_arg_i32((int32_t)p->m),  kiln_arg_i32((int32_t)p->n),  kiln_arg_i32((int32_t)p->k),
        kiln_arg_i64(sar),            kiln_arg_i64(sac),            kiln_arg_i64(sbr),
        kiln_arg_i64(sbc),            kiln_arg_i64(p->stride_a),    kiln_arg_i64(p->stride_b),
        kiln_arg_i64(p->stride_c),
    };
    return kiln__kernel_launch(p->dev, k, "kiln_matmul", 3, global, local,
                               (int)(sizeof args / sizeof args[0]), args);
}

const kiln__matmul_path kiln__matmul_builtin = {"builtin", builtin_available, builtin_run};
