/* matmul_builtin.c - the "builtin" matmul path: kiln's tiled OpenCL C kernel (kernels/matmul.cl),
 * for devices with neither CLBlast nor a host BLAS. */
#include <stdio.h>
#include <string.h>

#include "../dtype.h"
#include "../launch.h"
#include "../program.h"
#include "../registry.h"
#include "../status.h"
#include "../tensor.h"
#include "common.h"
#include "matmul.h"

/* Tile edge and outputs per work-item, best first; a work-group is (TS/WPT)^2 work-items. */
static const struct {
    int ts, wpt;
} tiles[] = {{128, 8}, {64, 4}, {32, 2}, {16, 1}, {8, 1}, {4, 1}, {1, 1}};
#define NTILES ((int)(sizeof tiles / sizeof tiles[0]))

/* Whether a tile fits the device before building it: work-group size and the two tiles in
 * local memory (1 KiB left for the compiler's own use). */
static bool tile_fits_device(const kiln_device *dev, int i, size_t esize)
{
    size_t rts = (size_t)(tiles[i].ts / tiles[i].wpt);
    size_t local = 2 * (size_t)tiles[i].ts * (size_t)(tiles[i].ts + 1) * esize;
    return rts * rts <= dev->info.max_work_group_size && local + 1024 <= dev->info.local_mem_bytes;
}

/* The kernel with the largest tile the device takes that is not too large for the product
 * (at least two tiles along its longer side, so small products do not pay for a big tile's
 * idle work-items); *ti is the tile's index. */
static kiln_status tiled_kernel(kiln_device *dev, kiln_dtype dtype, int64_t longer,
                                kiln__kernel **k, int *ti)
{
    kiln_status s = KILN_OK;
    for (int i = 0; i < NTILES; i++) {
        if (tiles[i].ts > 8 && 2 * (int64_t)tiles[i].ts > longer)
            continue;
        /* the tiles hold the compute type (f32 for f16) */
        if (!tile_fits_device(dev, i, kiln_dtype_size(kiln__dtype_compute(dtype))))
            continue;
        char defs[256] = "";
        kiln__dtype_defines(defs, sizeof defs, "T", dtype);
        size_t used = strnlen(defs, sizeof defs);
        snprintf(defs + used, sizeof defs - used, " -DKILN_MM_TS=%d -DKILN_MM_WPT=%d", tiles[i].ts,
                 tiles[i].wpt);
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

/* Most work-groups per launch along dimensions 1 and 2 (CUDA's grid limit under NVIDIA's
 * OpenCL); larger products take several launches. A variable so that tests can lower it. */
int64_t kiln__matmul_builtin_max_groups = 65535;

static kiln_status builtin_run(const kiln__matmul_problem *p)
{
    kiln__kernel *k;
    int ti = 0;
    kiln_status s = tiled_kernel(p->dev, p->dtype, p->m > p->n ? p->m : p->n, &k, &ti);
    if (s != KILN_OK)
        return s;
    int ts = tiles[ti].ts;
    size_t rts = (size_t)(ts / tiles[ti].wpt), row_groups = round_up(p->m, ts);
    size_t local[3] = {rts, rts, 1};
    /* Element strides of op(A)(i, p) and op(B)(p, j) in row-major storage. */
    int64_t sar = p->trans_a ? 1 : p->k, sac = p->trans_a ? p->m : 1;
    int64_t sbr = p->trans_b ? 1 : p->n, sbc = p->trans_b ? p->k : 1;
    kiln_arg args[] = {
        kiln_arg_tensor(p->a),
        kiln_arg_tensor(p->b),
        kiln_arg_tensor(p->c),
        kiln_arg_i32((int32_t)p->m),
        kiln_arg_i32((int32_t)p->n),
        kiln_arg_i32((int32_t)p->k),
        kiln_arg_i64(sar),
        kiln_arg_i64(sac),
        kiln_arg_i64(sbr),
        kiln_arg_i64(sbc),
        kiln_arg_i64(p->stride_a),
        kiln_arg_i64(p->stride_b),
        kiln_arg_i64(p->stride_c),
        kiln_arg_i32(0),
        kiln_arg_i32(0),
        kiln_arg_i64(0),
        kiln_arg_i64(0),
    };
    const int64_t most = kiln__matmul_builtin_max_groups;
    for (int64_t b0 = 0; b0 < p->batch && s == KILN_OK; b0 += most) {
        for (size_t g0 = 0; g0 < row_groups && s == KILN_OK; g0 += (size_t)most) {
            size_t rows = row_groups - g0 < (size_t)most ? row_groups - g0 : (size_t)most;
            int64_t batch = p->batch - b0 < most ? p->batch - b0 : most;
            size_t global[3] = {round_up(p->n, ts) * rts, rows * rts, (size_t)batch};
            args[13] = kiln_arg_i32((int32_t)g0);
            args[14] = kiln_arg_i32((int32_t)rows);
            args[15] = kiln_arg_i64(b0);
            args[16] = kiln_arg_i64(batch);
            s = kiln__kernel_launch(p->dev, k, "kiln_matmul", 3, global, local,
                                    (int)(sizeof args / sizeof args[0]), args);
        }
    }
    return s;
}

const kiln__matmul_path kiln__matmul_builtin = {"builtin", builtin_available, builtin_run, NULL};
