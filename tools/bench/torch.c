/* torch.c - PyTorch rows for kiln-bench: runs tools/bench/torch_ref.py under $KILN_BENCH_PYTHON
 * (default python3) where that Python has torch; a note says why the rows are missing otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#ifndef KILN_BENCH_TORCH_SCRIPT
#define KILN_BENCH_TORCH_SCRIPT "torch_ref.py"
#endif

int bench_torch(bench_ctx *ctx, const char *section, const char *args, bench_torch_row row,
                void *user)
{
    const char *py = getenv("KILN_BENCH_PYTHON");
    py = py && *py ? py : "python3";
    if (access(KILN_BENCH_TORCH_SCRIPT, R_OK) != 0) {
        bench_note(ctx, "%s: no PyTorch row (%s is not there: run from a build tree)", section,
                   KILN_BENCH_TORCH_SCRIPT);
        return 0;
    }
    char cmd[1024];
    /* The paths come from the build and the environment: quoted, and refused if they hold a
     * quote themselves. */
    if (strchr(py, '\'') || strchr(KILN_BENCH_TORCH_SCRIPT, '\'') ||
        snprintf(cmd, sizeof cmd, "'%s' '%s' %s 2>/dev/null", py, KILN_BENCH_TORCH_SCRIPT, args) >=
            (int)sizeof cmd) {
        bench_note(ctx, "%s: no PyTorch row (unusable KILN_BENCH_PYTHON)", section);
        return 0;
    }
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    if (!f) {
        bench_note(ctx, "%s: no PyTorch row (could not start %s)", section, py);
        return 0;
    }
    char line[256], version[64] = "";
    int threads = 0, rows = 0;
    if (fgets(line, sizeof line, f) && sscanf(line, "torch %63s %d", version, &threads) == 2) {
        char what[32];
        long a, b, c;
        double v;
        while (fgets(line, sizeof line, f)) {
            int n = sscanf(line, "%31s %ld %ld %ld %lf", what, &a, &b, &c, &v);
            if (n == 5 && row(user, a, b, c, v, version, threads) == 0)
                rows++;
        }
    }
    int st = pclose(f);
    if (version[0] == '\0') {
        if (WIFEXITED(st) && WEXITSTATUS(st) == 3)
            bench_note(ctx, "%s: no PyTorch row (%s has no torch module)", section, py);
        else
            bench_note(ctx, "%s: no PyTorch row (%s %s failed)", section, py,
                       KILN_BENCH_TORCH_SCRIPT);
        return 0;
    }
    bench_note(ctx, "%s: PyTorch %s rows (%d threads, same run, %s)", section, version, threads,
               py);
    return rows;
}
