/* allreduce.c - kiln-bench allreduce (built with libkiln-mpi; run under `mpirun -np N`): a sum
 * all-reduce of one f32 tensor of 1..256 MiB on each rank's device (kiln_mpi_allreduce) against
 * MPI_Allreduce of a host buffer of the same size, in the same run. Each sample is the slowest
 * rank's time, after a barrier; the rate is the tensor's bytes over that time (GB/s). Only rank
 * 0 prints (kiln-bench.c quiets the others). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "kiln_mpi.h"

/* One timed sample on every rank: the slowest rank's seconds. */
static double timed(kiln_tensor *t, float *host, size_t count, kiln_status *s)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    if (t)
        *s = kiln_mpi_allreduce(MPI_COMM_WORLD, &t, 1, KILN_MPI_SUM);
    else if (MPI_Allreduce(MPI_IN_PLACE, host, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
             MPI_SUCCESS)
        *s = KILN_ERR_IO;
    double dt = bench_now() - t0, slowest = dt;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

int bench_allreduce(bench_ctx *ctx)
{
    int init = 0, rank = 0, size = 1;
    MPI_Initialized(&init);
    if (!init)
        MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    kiln_device_info info;
    kiln_device_info_get(ctx->dev, &info);
    if (size < 2)
        bench_note(ctx, "one rank: run it as `mpirun -np 2 kiln-bench allreduce`");
    bench_note(ctx, "%d ranks, each on %s (%s memory)", size, kiln_device_spec(ctx->dev),
               info.unified_memory ? "unified" : "discrete");
    const int mib_full[] = {1, 4, 16, 64, 256}, mib_quick[] = {1, 4};
    const int *mibs = ctx->quick ? mib_quick : mib_full;
    int nsizes = ctx->quick ? 2 : 5, rc = 0;
    for (int si = 0; si < nsizes && rc == 0; si++) {
        size_t bytes = (size_t)mibs[si] << 20, count = bytes / sizeof(float);
        int64_t shape[1] = {(int64_t)count};
        kiln_tensor *t = NULL;
        float *host = calloc(count, sizeof *host);
        double *k = calloc((size_t)ctx->repeats, sizeof *k);
        double *b = calloc((size_t)ctx->repeats, sizeof *b);
        kiln_status s = host && k && b ? kiln_tensor_zeros(ctx->dev, KILN_F32, 1, shape, &t)
                                       : KILN_ERR_OUT_OF_MEMORY;
        /* A warm-up of each (page faults, MPI's shared-memory segments), then the samples. */
        for (int r = -1; r < ctx->repeats && s == KILN_OK; r++) {
            double tk = timed(t, host, count, &s), tb = timed(NULL, host, count, &s);
            if (r >= 0) {
                k[r] = (double)bytes / tk * 1e-9;
                b[r] = (double)bytes / tb * 1e-9;
            }
        }
        if (s == KILN_OK) {
            char name[64];
            bench_result res;
            snprintf(name, sizeof name, "allreduce %d MiB", mibs[si]);
            bench_result_set(&res, name, "GB/s", true, "MPI_Allreduce (host)", k, b, ctx->repeats);
            if (rank == 0)
                bench_report(ctx, &res);
        } else {
            rc = bench_fail("kiln_mpi_allreduce", s);
        }
        kiln_tensor_release(t);
        free(host);
        free(k);
        free(b);
    }
    if (!init)
        MPI_Finalize();
    return rc;
}
