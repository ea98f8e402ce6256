/* hostpool.h - a few host threads that run the parts of one job beside the calling thread (a
 * batch of products of the host BLAS on CPU devices, one run of whole products per thread:
 * matmul_cblas.c), watching for the next job briefly and then sleeping on a condition variable.
 * OpenBLAS's own threads split each product of a batch, and spin for about 0.1 s after each
 * multithreaded call (2^28 cycles, fixed when the library loads): on a CPU device the OpenCL
 * kernels queued in that window ran at half speed beside them. Internal: not part of the
 * public API. */
#ifndef KILN_HOSTPOOL_H
#define KILN_HOSTPOOL_H

/* One part of a job: part in [0, parts). */
typedef void kiln__host_part_fn(void *ctx, int part, int parts);

/* Run fn(ctx, part, parts) for every part in [0, parts) and return when all have returned: the
 * caller runs parts itself while up to parts - 1 pool threads (started on first need, at most
 * KILN__HOST_POOL_MAX) run the others. Where a thread cannot be started the caller runs its
 * parts: every part runs exactly once either way. One job at a time (concurrent callers wait). */
void kiln__host_parallel(int parts, kiln__host_part_fn *fn, void *ctx);

#define KILN__HOST_POOL_MAX 64

/* Threads the pool holds now (not counting callers). */
int kiln__host_pool_threads(void);

/* Join the pool's threads (at exit, once no job can start; a later job starts them again). */
void kiln__host_pool_stop(void);

#endif
