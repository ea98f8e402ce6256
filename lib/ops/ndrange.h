/* ndrange.h - the few fixed work-group shapes of the reduce, shape and nn kernels. */
#ifndef KILN_OPS_NDRANGE_H
#define KILN_OPS_NDRANGE_H

#include <stddef.h>

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

/* At most this many work-groups along NDRange dimensions 1 and 2: NVIDIA maps them onto a
 * CUDA grid, whose y and z sizes stop at 65535. Longer ranges are split into several launches
 * (a size in work-items of at most this value always fits, whatever the local size). */
#define KILN__MAX_GROUPS_YZ 65535

#endif
