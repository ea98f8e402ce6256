/* bench.h - the kiln-bench framework: sections, timing, side-by-side results, text and JSON. */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln_cl.h"

typedef struct bench_ctx {
    kiln_device *dev;
    const char *spec;
    bool json;
    bool quick;        /* --quick: fewer sizes and repetitions (smoke runs in tests) */
    int repeats;       /* samples per measurement (median reported) */
    const char *argv0; /* path of kiln-bench itself, for sections that start fresh processes */
} bench_ctx;

/* One section: `kiln-bench <name>`. Returns 0 on success. */
typedef struct bench_section {
    const char *name;
    const char *help;
    int (*run)(bench_ctx *ctx);
} bench_section;

/* One measurement, side by side with its baseline from the same run.
 * higher_is_better: true for GB/s, GFLOP/s; false for times. ratio = kiln/baseline, inverted
 * for times, so that >= 1 always means kiln is at least as good. */
typedef struct bench_result {
    char name[96];    /* "h2d 64 MiB" */
    const char *unit; /* "GB/s", "us", "GFLOP/s", "ms" */
    bool higher_is_better;
    /* what the baseline is ("raw OpenCL", "cblas_sgemm", "PyTorch 1.13, 1 thr"), copied: a
     * caller's buffer may be reused or gone by the time --json prints every result; "" for none */
    char baseline[64];
    double kiln;           /* median */
    double baseline_value; /* median; 0 when there is no baseline */
    int samples;
    double min, max; /* of kiln's samples */
} bench_result;

/* Monotonic seconds. */
double bench_now(void);

/* Wait until the host BLAS's threads, busy after a baseline's multithreaded call, have gone to
 * sleep (OpenBLAS's spin for 2^28 TSC cycles after each call: about 0.1 s at 2.6 GHz), so that
 * kiln's next sample does not share the cores with them: kiln's own GEMM threads sleep between
 * products (lib/hostpool.c) and a program using kiln alone has no such spinning threads. */
void bench_blas_settle(void);

/* Median of n samples (sorts them in place); min and max optional. */
double bench_median(double *v, int n, double *min, double *max);

/* Fill r from kiln's and the baseline's samples (times or rates, as given). */
void bench_result_set(bench_result *r, const char *name, const char *unit, bool higher_is_better,
                      const char *baseline, double *kiln, double *base, int samples);

/* Record a result: printed at once as a table row (text mode) and kept for the JSON document. */
void bench_report(bench_ctx *ctx, const bench_result *r);

/* Progress for long runs: to stderr, text mode only. */
void bench_progress(bench_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A note printed under the table (text) or as "notes" (JSON), e.g. OpenBLAS's core name. */
void bench_note(bench_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Stop with a message on a failed kiln call: prints kiln_last_error() and returns 1. */
int bench_fail(const char *what, kiln_status s);

/* PyTorch rows (torch.c): runs tools/bench/torch_ref.py SECTION-ARGS; `row` gets each result
 * line "<what> a b c value" and returns 0 when it reported a row. Returns the number of rows;
 * where Python or torch is missing, a note says so and no row is made. */
typedef int (*bench_torch_row)(void *user, long a, long b, long c, double value,
                               const char *version, int threads);
int bench_torch(bench_ctx *ctx, const char *section, const char *args, bench_torch_row row,
                void *user);

/* A long-lived torch_ref.py ("serve"), for PyTorch and numpy samples taken between kiln's,
 * round by round, so that both see the same machine (issue 27). bench_worker_start returns NULL,
 * with a note saying why, where Python or torch is missing. bench_worker_ask sends one request
 * ("fusion 1 1024 100": what torch_ref.py takes after its command, at `threads` torch threads)
 * and gives `row` each line of the answer (threads as the version's thread count); it returns the
 * rows `row` accepted, or -1 when the worker failed (it is then stopped: later asks return -1). */
typedef struct bench_worker bench_worker;
bench_worker *bench_worker_start(bench_ctx *ctx, const char *section);
int bench_worker_ask(bench_worker *w, int threads, const char *request, bench_torch_row row,
                     void *user);
const char *bench_worker_version(const bench_worker *w);
void bench_worker_stop(bench_worker *w);

/* Sections, each in its own file. */
int bench_transfer(bench_ctx *ctx);
int bench_startup(bench_ctx *ctx);
int bench_launch(bench_ctx *ctx);
int bench_elementwise(bench_ctx *ctx);
int bench_reduce(bench_ctx *ctx);
int bench_fusion(bench_ctx *ctx);
int bench_matmul(bench_ctx *ctx);
int bench_train(bench_ctx *ctx);
int bench_conv(bench_ctx *ctx);
int bench_rnn(bench_ctx *ctx);
int bench_half(bench_ctx *ctx);
int bench_checkpoint(bench_ctx *ctx);
int bench_overlap(bench_ctx *ctx);
int bench_allreduce(bench_ctx *ctx); /* with libkiln-mpi only (KILN_HAVE_MPI) */

#endif
