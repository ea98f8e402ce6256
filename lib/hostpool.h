/* hostpool.h - a few host threads that run the parts of one job beside the calling thread (the
 * host BLAS's GEMM on CPU devices, matmul_cblas.c), sleeping on a condition variable between
 * jobs. OpenBLAS's own threads spin for about 0.1 s after each multithreaded GEMM (2^28 cycles,
 * fixed when the library loads), and on a CPU device every OpenCL kernel queued in that window
 * ran at half speed beside them: kiln calls the BLAS on one thread per part instead.
 * Internal: not part of the public API. */
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
