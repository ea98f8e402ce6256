/* ndrange.h - the few fixed work-group shapes of the reduce, shape and nn kernels. */
#ifndef KILN_OPS_NDRANGE_H
#define KILN_OPS_NDRANGE_H

#include <stddef.h>

#include "registry.h"

/* Pick local (up to 64 work-items along the first dimension of global that is at least 16, or
 * the last one) and pad global up to a multiple of it; kernels bounds-check every id. Few
 * distinct shapes on purpose: PoCL compiles a kernel again for each new local size (~0.1 s),
 * and with ASan its LLVM has crashed in such compiles running beside a program build. */
static inline void kiln__fixed_ndrange(size_t wg_size, int dims, size_t *global, size_t *local)
{
    size_t l = 1;
    while (l * 2 <= wg_size && l * 2 <= 64)
        l *= 2;
    int along = dims - 1;
    for (int d = dims - 1; d >= 0; d--)
        if (global[d] >= 16)
            along = d;
    for (int d = 0; d < dims; d++) {
        local[d] = d == along ? l : 1;
        global[d] = (global[d] + local[d] - 1) / local[d] * local[d];
    }
}

/* CPU devices, for kernels that loop inside each work-item (PoCL then runs a group's work-items
 * one after another, without vectorizing across them): one-item work-groups, which spread over
 * the cores whatever the shape, unless the largest dimension has so many work-items that the
 * per-group cost shows; then groups of 64 along it (global padded; kernels bounds-check). */
static inline void kiln__cpu_loop_ndrange(const kiln_device *dev, size_t wg_size, int dims,
                                          size_t *global, size_t *local)
{
    size_t cus = dev->info.compute_units ? dev->info.compute_units : 1, l = 64;
    int big = 0;
    for (int d = 0; d < dims; d++) {
        local[d] = 1;
        if (global[d] > global[big])
            big = d;
    }
    while (l > wg_size)
        l /= 2;
    if (global[big] >= (size_t)64 * 8 * cus) {
        local[big] = l;
        global[big] = (global[big] + l - 1) / l * l;
    }
}

/* At most this many work-groups along NDRange dimensions 1 and 2: NVIDIA maps them onto a
 * CUDA grid, whose y and z sizes stop at 65535. Longer ranges are split into several launches
 * (a size in work-items of at most this value always fits, whatever the local size). */
#define KILN__MAX_GROUPS_YZ 65535

#endif
