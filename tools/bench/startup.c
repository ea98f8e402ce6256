/* startup.c - kiln-bench startup: a fresh process's time to its first kernel result with an
 * empty vs a warm kiln program cache, and (PoCL, NVIDIA) an empty vs a warm driver cache; and
 * the first epoch of examples/classify.c (classifier.c) in a fresh process: cold, after
 * kiln_device_prewarm (kiln-info --prewarm; not with --quick: it builds every kernel), and warm
 * (issue 22, item 1).
 *
 * The driver's own cache of compiled kernels would make a "cold" start warm: PoCL's
 * (POCL_CACHE_DIR) and NVIDIA's JIT cache (CUDA_CACHE_PATH, ~/.nv/ComputeCache by default) are
 * both pointed at a fresh temporary folder, emptied for the cold samples and kept for the warm
 * ones, and removed afterwards. KILN_BENCH_STARTUP_LOG=FILE (tests) logs, for every child, the
 * cache folders it is given and whether the driver's is empty as it starts. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "classifier.h"

extern char **environ;

#define CHILD_VAR "KILN_BENCH_STARTUP_CHILD"

/* A few kernels, so the build is as long as a small real program's. */
static const char *child_source =
    "__kernel void axpy(__global float *y, __global const float *x, float a, int n)\n"
    "{ int i = get_global_id(0); if (i < n) y[i] = a * x[i] + y[i]; }\n"
    "__kernel void smooth(__global float *y, __global const float *x, int n)\n"
    "{\n"
    "    int i = get_global_id(0);\n"
    "    if (i <= 0 || i >= n - 1) return;\n"
    "    float acc = 0.0f;\n"
    "    for (int k = -1; k <= 1; k++) acc += x[i + k] * (k == 0 ? 0.5f : 0.25f);\n"
    "    y[i] = tanh(acc) + exp(-acc * acc) + log1p(fabs(acc));\n"
    "}\n";

static int files_seen;

static int count_file(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path, (void)st, (void)ftw;
    files_seen += flag == FTW_F;
    return 0;
}

/* Whether dir holds no files (folders a driver makes at start-up do not count). */
static bool dir_empty(const char *dir)
{
    files_seen = 0;
    if (dir)
        nftw(dir, count_file, 16, FTW_PHYS);
    return files_seen == 0;
}

/* The value of NAME in a child's environment env, or "". */
static const char *env_value(char **env, const char *name)
{
    size_t n = strlen(name);
    for (; *env; env++)
        if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
            return *env + n + 1;
    return "";
}

/* KILN_BENCH_STARTUP_LOG: one line per child, as it is spawned, from the environment it gets:
 * "cuda=DIR pocl=DIR kiln=DIR driver_empty=0|1". */
static void child_log(char **env)
{
    const char *path = getenv("KILN_BENCH_STARTUP_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f)
        return;
    const char *cuda = env_value(env, "CUDA_CACHE_PATH");
    fprintf(f, "cuda=%s pocl=%s kiln=%s driver_empty=%d\n", cuda, env_value(env, "POCL_CACHE_DIR"),
            env_value(env, "KILN_CACHE_DIR"), dir_empty(cuda));
    fclose(f);
}

/* In the child process: device, program (through the cache), one launch, read the result. */
static int child(bench_ctx *ctx)
{
    enum { N = 256 };
    float x[N], y[N];
    for (int i = 0; i < N; i++)
        x[i] = y[i] = (float)i;
    int64_t shape[1] = {N};
    kiln_program *prog = NULL;
    kiln_tensor *tx = NULL, *ty = NULL;
    kiln_status s = kiln_program_build(ctx->dev, child_source, NULL, &prog);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 1, shape, x, &tx);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(ctx->dev, KILN_F32, 1, shape, y, &ty);
    kiln_arg args[] = {kiln_arg_tensor(ty), kiln_arg_tensor(tx), kiln_arg_f32(2.0f),
                       kiln_arg_i32(N)};
    size_t global = N;
    if (s == KILN_OK)
        s = kiln_program_launch(prog, "axpy", 1, &global, NULL, 4, args);
    if (s == KILN_OK)
        s = kiln_tensor_read(ty, y, sizeof y);
    int rc = s == KILN_OK && y[N - 1] == 3.0f * (N - 1) ? 0 : 1;
    if (s != KILN_OK)
        fprintf(stderr, "kiln-bench startup child: %s\n", kiln_last_error());
    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    kiln_program_release(prog);
    return rc;
}

/* In the child process: classify.c's first epoch, from creating the model to the accuracy. */
static int child_epoch(bench_ctx *ctx)
{
    classifier *c = calloc(1, sizeof *c);
    double loss = 0, acc = 0;
    kiln_status s = c ? classifier_init(c, ctx->dev) : KILN_ERR_OUT_OF_MEMORY;
    if (s == KILN_OK)
        s = classifier_epoch(c, &loss, &acc);
    if (s != KILN_OK)
        fprintf(stderr, "kiln-bench startup child: %s\n", kiln_last_error());
    else
        printf("first epoch: loss %.4f, accuracy %.1f%%\n", loss, 100 * acc);
    if (c)
        classifier_free(c);
    free(c);
    return s == KILN_OK && isfinite(loss) ? 0 : 1;
}

/* In the child process: every built-in kernel into the cache (kiln-info --prewarm). */
static int child_prewarm(bench_ctx *ctx)
{
    int built = 0;
    kiln_status s = kiln_device_prewarm(ctx->dev, &built);
    if (s != KILN_OK)
        fprintf(stderr, "kiln-bench startup child: %s\n", kiln_last_error());
    return s == KILN_OK ? 0 : 1;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* Empty a directory (and recreate it). */
static void empty_dir(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(dir, 0700);
}

typedef struct startup {
    bench_ctx *ctx;
    const char *kind; /* what the children do: "kernel" (the first result), "epoch" */
    const char *warm; /* what the child that warms the kept caches does: the same or "prewarm" */
    char root[64];
    char kiln_dir[128], driver_dir[128]; /* driver: POCL_CACHE_DIR and CUDA_CACHE_PATH */
    const char *driver;                  /* "PoCL", "NVIDIA"; NULL: no driver cache varied */
} startup;

/* Seconds from posix_spawn to the exit of a child that did `kind`. */
static double run_child(startup *st, const char *kind, bool *ok)
{
    int n = 0;
    while (environ[n])
        n++;
    char **env = calloc((size_t)n + 5, sizeof *env);
    if (!env) {
        *ok = false;
        return 0;
    }
    char kvar[160], pvar[160], cvar[160], child[64];
    snprintf(child, sizeof child, CHILD_VAR "=%s", kind);
    snprintf(kvar, sizeof kvar, "KILN_CACHE_DIR=%s", st->kiln_dir);
    snprintf(pvar, sizeof pvar, "POCL_CACHE_DIR=%s", st->driver_dir);
    snprintf(cvar, sizeof cvar, "CUDA_CACHE_PATH=%s", st->driver_dir);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(environ[i], "KILN_CACHE", 10) != 0 &&
            strncmp(environ[i], "POCL_CACHE_DIR=", 15) != 0 &&
            strncmp(environ[i], "POCL_KERNEL_CACHE=", 18) != 0 &&
            strncmp(environ[i], "CUDA_CACHE_", 11) != 0) /* _PATH, _DISABLE, _MAXSIZE */
            env[m++] = environ[i];
    env[m++] = kvar;
    env[m++] = pvar;
    env[m++] = cvar;
    env[m++] = child;
    env[m] = NULL;
    char *argv[] = {(char *)st->ctx->argv0, "-d", (char *)kiln_device_spec(st->ctx->dev), "startup",
                    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    child_log(env);
    double t0 = bench_now();
    int rc = posix_spawnp(&pid, st->ctx->argv0, &fa, NULL, argv, env);
    int status = 0;
    if (rc == 0)
        waitpid(pid, &status, 0);
    double t = bench_now() - t0;
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "kiln-bench: startup child %s failed (%s)\n", st->ctx->argv0,
                rc ? strerror(rc) : "non-zero exit");
        *ok = false;
    }
    return t;
}

/* A cold start costs seconds: --quick takes one sample per configuration. */
static int samples(const startup *st)
{
    return st->ctx->quick ? 1 : st->ctx->repeats;
}

/* Median milliseconds of fresh processes; `empty_kiln` / `empty_driver` empty that cache before
 * each one, else it is warmed once first. */
static bool timed(startup *st, bool empty_kiln, bool empty_driver, double *ms)
{
    bool ok = true;
    empty_dir(st->kiln_dir);
    empty_dir(st->driver_dir);
    run_child(st, st->warm, &ok); /* warms whichever cache is kept */
    for (int i = 0; i < samples(st) && ok; i++) {
        if (empty_kiln)
            empty_dir(st->kiln_dir);
        if (empty_driver)
            empty_dir(st->driver_dir);
        ms[i] = run_child(st, st->kind, &ok) * 1e3;
    }
    return ok;
}

static int row(startup *st, const char *name, const char *baseline, bool k_empty, bool p_empty,
               bool base_k_empty, bool base_p_empty)
{
    int r = samples(st);
    double *a = calloc((size_t)r, sizeof *a), *b = calloc((size_t)r, sizeof *b);
    bool ok = a && b;
    bench_progress(st->ctx, "startup: %s", name);
    const char *warm = st->warm;
    ok = ok && timed(st, k_empty, p_empty, a);
    st->warm = st->kind; /* the baseline's warm-up (if it keeps a cache) runs what it measures */
    ok = ok && timed(st, base_k_empty, base_p_empty, b);
    st->warm = warm;
    if (ok) {
        bench_result res;
        bench_result_set(&res, name, "ms", false, baseline, a, b, r);
        bench_report(st->ctx, &res);
    }
    free(a);
    free(b);
    return ok ? 0 : 1;
}

int bench_startup(bench_ctx *ctx)
{
    const char *kind = getenv(CHILD_VAR);
    if (kind)
        return strcmp(kind, "epoch") == 0     ? child_epoch(ctx)
               : strcmp(kind, "prewarm") == 0 ? child_prewarm(ctx)
                                              : child(ctx);
    kiln_device_info info;
    kiln_status s = kiln_device_info_get(ctx->dev, &info);
    if (s != KILN_OK)
        return bench_fail("kiln_device_info_get", s);
    startup st = {.ctx = ctx, .kind = "kernel", .warm = "kernel"};
    snprintf(st.root, sizeof st.root, "/tmp/kiln-bench-startup-XXXXXX");
    if (!mkdtemp(st.root)) {
        fprintf(stderr, "kiln-bench: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    snprintf(st.kiln_dir, sizeof st.kiln_dir, "%s/kiln", st.root);
    snprintf(st.driver_dir, sizeof st.driver_dir, "%s/driver", st.root);
    if (strstr(info.platform, "Portable Computing Language"))
        st.driver = "PoCL";
    else if (strstr(info.platform, "NVIDIA"))
        st.driver = "NVIDIA";
    int rc;
    if (st.driver) {
        /* The ratio column is cold / warm: how much faster a warm start is. */
        char name[3][96];
        snprintf(name[0], sizeof name[0], "warm kiln cache, empty %s cache", st.driver);
        snprintf(name[1], sizeof name[1], "empty kiln cache, warm %s cache", st.driver);
        snprintf(name[2], sizeof name[2], "warm kiln + warm %s cache", st.driver);
        rc = row(&st, name[0], "both empty", false, true, true, true);
        if (rc == 0)
            rc = row(&st, name[1], "both empty", true, false, true, true);
        if (rc == 0)
            rc = row(&st, name[2], "both empty", false, false, true, true);
        /* classify.c's first epoch: warm, and after a prewarm with the driver's cache empty (a
         * machine where kiln-info --prewarm ran after installing), each against a cold one */
        st.kind = st.warm = "epoch";
        snprintf(name[0], sizeof name[0], "classify epoch 1, warm kiln + %s", st.driver);
        snprintf(name[1], sizeof name[1], "classify epoch 1, prewarm, empty %s", st.driver);
        if (rc == 0)
            rc = row(&st, name[0], "both empty", false, false, true, true);
        st.warm = "prewarm";
        if (rc == 0 && !ctx->quick)
            rc = row(&st, name[1], "both empty", false, true, true, true);
    } else {
        rc = row(&st, "warm kiln cache", "empty kiln cache", false, true, true, true);
        st.kind = st.warm = "epoch";
        if (rc == 0)
            rc = row(&st, "classify epoch 1, warm kiln cache", "empty kiln cache", false, true,
                     true, true);
        st.warm = "prewarm";
        if (rc == 0 && !ctx->quick)
            rc = row(&st, "classify epoch 1, prewarmed kiln cache", "empty kiln cache", false, true,
                     true, true);
        bench_note(ctx,
                   "startup: %s has no driver cache kiln knows of; only kiln's cache is varied",
                   info.platform);
    }
    bench_note(ctx, "startup: the driver's cache (POCL_CACHE_DIR, CUDA_CACHE_PATH) is a fresh "
                    "temporary folder, emptied for \"empty\" samples");
    bench_note(ctx,
               "startup: classify epoch 1: examples/classify.c's model, data and first "
               "epoch (46 steps of batch 64, then the accuracy) in a fresh process; "
               "\"prewarmed\": kiln_device_prewarm filled the kiln cache first%s",
               ctx->quick ? " (not with --quick)" : "");
    bench_note(ctx, "startup: each sample is a fresh process (kiln-bench itself) from spawn to "
                    "exit after reading its first kernel result; ratio = baseline / kiln");
    empty_dir(st.root);
    rmdir(st.root);
    return rc;
}
