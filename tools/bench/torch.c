/* torch.c - PyTorch rows for kiln-bench: runs tools/bench/torch_ref.py under $KILN_BENCH_PYTHON
 * (default python3) where that Python has torch, once per section (bench_torch) or as a worker
 * asked for one sample between kiln's (bench_worker_*); a note says why the rows are missing
 * otherwise. */
#include <fcntl.h>
#include <signal.h>
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

struct bench_worker {
    pid_t pid;
    FILE *to, *from;
    char version[64];
};

bench_worker *bench_worker_start(bench_ctx *ctx, const char *section)
{
    const char *py = getenv("KILN_BENCH_PYTHON");
    py = py && *py ? py : "python3";
    if (access(KILN_BENCH_TORCH_SCRIPT, R_OK) != 0) {
        bench_note(ctx, "%s: no PyTorch row (%s is not there: run from a build tree)", section,
                   KILN_BENCH_TORCH_SCRIPT);
        return NULL;
    }
    bench_worker *w = calloc(1, sizeof *w);
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (!w || pipe(in) != 0 || pipe(out) != 0) {
        bench_note(ctx, "%s: no PyTorch row (no pipe for %s)", section, py);
        goto fail;
    }
    fflush(stdout);
    fflush(stderr);
    w->pid = fork();
    if (w->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execlp(py, py, KILN_BENCH_TORCH_SCRIPT, "serve", (char *)NULL);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    in[0] = out[1] = -1;
    /* kiln-bench's own ends stay out of later children (torch rows run with popen), whose copy
     * of the worker's input would keep it from ever seeing its end */
    fcntl(in[1], F_SETFD, FD_CLOEXEC);
    fcntl(out[0], F_SETFD, FD_CLOEXEC);
    if (w->pid > 0 && (w->to = fdopen(in[1], "w")) != NULL)
        in[1] = -1;
    if (w->to && (w->from = fdopen(out[0], "r")) != NULL)
        out[0] = -1;
    if (!w->to || !w->from) {
        bench_note(ctx, "%s: no PyTorch row (could not start %s)", section, py);
        goto fail;
    }
    signal(SIGPIPE, SIG_IGN); /* a worker that died is a failed ask, not the end of kiln-bench */
    char line[256];
    int threads;
    if (!fgets(line, sizeof line, w->from) ||
        sscanf(line, "torch %63s %d", w->version, &threads) != 2) {
        bench_worker_stop(w);
        bench_note(ctx, "%s: no PyTorch row (%s has no torch module, or %s failed)", section, py,
                   KILN_BENCH_TORCH_SCRIPT);
        return NULL;
    }
    bench_note(ctx, "%s: PyTorch %s rows from one %s process, sampled between kiln's", section,
               w->version, py);
    return w;
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    if (w && w->pid > 0) {
        kill(w->pid, SIGTERM);
        waitpid(w->pid, NULL, 0);
    }
    if (w && w->to)
        fclose(w->to);
    if (w && w->from)
        fclose(w->from);
    free(w);
    return NULL;
}

const char *bench_worker_version(const bench_worker *w)
{
    return w->version;
}

int bench_worker_ask(bench_worker *w, int threads, const char *request, bench_torch_row row,
                     void *user)
{
    if (!w || !w->to)
        return -1;
    if (fprintf(w->to, "%d %s\n", threads, request) < 0 || fflush(w->to) != 0)
        return -1;
    char line[256], what[32];
    int rows = 0;
    while (fgets(line, sizeof line, w->from)) {
        if (strncmp(line, "end", 3) == 0)
            return rows;
        long a, b, c;
        double v;
        if (sscanf(line, "%31s %ld %ld %ld %lf", what, &a, &b, &c, &v) == 5 &&
            row(user, a, b, c, v, w->version, threads) == 0)
            rows++;
    }
    fclose(w->to); /* the worker died: later asks fail at once */
    w->to = NULL;
    return -1;
}

void bench_worker_stop(bench_worker *w)
{
    if (!w)
        return;
    if (w->to)
        fclose(w->to); /* end of its input: the worker exits */
    if (w->from)
        fclose(w->from);
    if (w->pid > 0)
        waitpid(w->pid, NULL, 0);
    free(w);
}
