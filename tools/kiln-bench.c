/* kiln-bench.c - measured figures, each side by side with a baseline from the same run. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

void bench_print_json(bench_ctx *ctx);

static const bench_section sections[] = {
    {"transfer", "host->device, device->host, device->device GB/s vs raw OpenCL", bench_transfer},
    {"startup", "time to first kernel result: empty vs warm program cache", bench_startup},
    {"launch", "per-launch overhead of a tiny kernel vs clEnqueueNDRangeKernel", bench_launch},
    {"elementwise", "add/mul/relu on 16 Mi f32 vs a C loop over host memory", bench_elementwise},
    {"reduce", "sum over axis 0 and 1 of [4096, 1024] and [1024, 512] f32 vs a C loop",
     bench_reduce},
    {"fusion",
     "a 20-op chain, relu(a*b+c), 100 dependent ops, sum(relu(a*b+c)); vs hand-fused/C loops",
     bench_fusion},
    {"matmul", "matmul n=256..2048 vs cblas_sgemm, and each matmul path", bench_matmul},
    {"train", "time per training step of the example MLP at a few sizes", bench_train},
    {"conv", "conv2d forward and forward+backward vs im2col + cblas_sgemm in C", bench_conv},
    {"rnn", "LSTM and GRU forward and forward+backward vs PyTorch", bench_rnn},
    {"half", "f16 vs f32: add/mul/relu on 16 Mi elements, matmul n=256..1024", bench_half},
    {"checkpoint", "kiln_save/kiln_load/kiln_load_mapped of 1 GiB vs write()+fsync/read()",
     bench_checkpoint},
    {"overlap", "a pinned upload on a copy queue beside matmuls (event times); loader pin_memory",
     bench_overlap},
#ifdef KILN_HAVE_MPI
    {"allreduce", "kiln_mpi_allreduce of 1..256 MiB vs MPI_Allreduce (under mpirun)",
     bench_allreduce},
#endif
};
#define NSECTIONS ((int)(sizeof sections / sizeof sections[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln-bench [-d SPEC] [--json] [--quick] [-r N] SECTION...\n"
               "       kiln-bench all\n\nsections:\n");
    for (int i = 0; i < NSECTIONS; i++)
        fprintf(f, "  %-12s %s\n", sections[i].name, sections[i].help);
    fprintf(f, "\noptions:\n"
               "  -d, --device SPEC  device to measure (default auto)\n"
               "  --json             one JSON document on stdout\n"
               "  --quick            fewer sizes and repetitions\n"
               "  -r, --repeats N    samples per measurement (median reported; default 7)\n"
               "  -h, --help         this text\n");
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    bench_ctx ctx = {.spec = "auto", .repeats = 7, .argv0 = argv[0]};
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'}, {"json", no_argument, NULL, 'j'},
        {"quick", no_argument, NULL, 'q'},        {"repeats", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            ctx.spec = optarg;
            break;
        case 'j':
            ctx.json = true;
            break;
        case 'q':
            ctx.quick = true;
            break;
        case 'r':
            ctx.repeats = atoi(optarg);
            if (ctx.repeats < 1 || ctx.repeats > 1000) {
                fprintf(stderr, "kiln-bench: --repeats must be 1..1000\n");
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    if (ctx.quick && ctx.repeats > 3)
        ctx.repeats = 3;
    bool run[NSECTIONS] = {false};
    for (int a = optind; a < argc; a++) {
        bool found = false;
        for (int i = 0; i < NSECTIONS; i++)
            if (strcmp(argv[a], "all") == 0 || strcmp(argv[a], sections[i].name) == 0)
                run[i] = found = true;
        if (!found) {
            fprintf(stderr, "kiln-bench: unknown section '%s'\n", argv[a]);
            usage(stderr);
            return 2;
        }
    }
    /* Under mpirun only rank 0 prints (kiln-bench allreduce). */
    const char *mpi_rank = getenv("OMPI_COMM_WORLD_RANK");
    if (mpi_rank && strcmp(mpi_rank, "0") != 0 && !freopen("/dev/null", "w", stdout))
        return 1;
    kiln_status s = kiln_device_get(ctx.spec, &ctx.dev);
    if (s != KILN_OK) {
        fprintf(stderr, "kiln-bench: %s\n", kiln_last_error());
        return s == KILN_ERR_INVALID_ARGUMENT ? 2 : 1;
    }
    if (!ctx.json)
        printf("kiln-bench %s on %s (%s)\n", kiln_version(), kiln_device_spec(ctx.dev),
               kiln_device_name(ctx.dev));
    int rc = 0;
    for (int i = 0; i < NSECTIONS; i++) {
        if (!run[i])
            continue;
        if (!ctx.json)
            printf("\n== %s ==\n", sections[i].name);
        if (sections[i].run(&ctx) != 0)
            rc = 1;
    }
    if (ctx.json)
        bench_print_json(&ctx);
    return rc;
}
