/* prewarm.c - kiln_device_prewarm: build the built-in kernels the ops use into the program
 * caches ahead of time (kiln-info --prewarm), so that a program's first run compiles nothing.
 * The kernel lists come from optables (the names and -D options the ops themselves ask for),
 * as tests/test-kernels.c's do. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "dtype.h"
#include "optables.h"
#include "program.h"
#include "registry.h"
#include "status.h"

#define OP "kiln_device_prewarm"

/* One built-in kernel: its source, the program's -D options and its name. */
typedef struct job {
    const char *source;
    char defines[256];
    char name[64];
} job;

typedef struct jobs {
    job *v;
    int n, cap;
    bool oom;
} jobs;

static void add(jobs *js, const char *source, const char *defines, const char *name)
{
    if (js->oom)
        return;
    if (js->n == js->cap) {
        int cap = js->cap ? 2 * js->cap : 256;
        job *v = realloc(js->v, (size_t)cap * sizeof *v);
        if (!v) {
            js->oom = true;
            return;
        }
        js->v = v;
        js->cap = cap;
    }
    job *j = &js->v[js->n++];
    j->source = source;
    snprintf(j->defines, sizeof j->defines, "%s", defines);
    snprintf(j->name, sizeof j->name, "%s", name);
}

static const kiln_dtype all_dtypes[] = {
#define X(NAME, num, name, bytes, cl, clc, fl, sg) KILN_##NAME,
    KILN_DTYPE_MAP(X)
#undef X
};
static const kiln_binary_op binary_ops[] = {
#define X(NAME, num, name, kind) KILN_BINARY_##NAME,
    KILN_BINARY_OP_MAP(X)
#undef X
};
static const kiln_unary_op unary_ops[] = {
#define X(NAME, num, name, kind) KILN_UNARY_##NAME,
    KILN_UNARY_OP_MAP(X)
#undef X
};
static const kiln_reduce_op reduce_ops[] = {
#define X(NAME, num, name) KILN_REDUCE_##NAME,
    KILN_REDUCE_OP_MAP(X)
#undef X
};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static bool computes(const kiln_device *dev, kiln_dtype dtype)
{
    return !kiln__dtype_needs_fp64(dtype) || dev->info.fp64;
}

/* Every kernel the elementwise, reduction, nn, creation, random, optimizer and copy ops can
 * ask for on dev (index ops and matmul's built-in GEMM are built when first used). */
static void list_jobs(const kiln_device *dev, jobs *js)
{
    char defs[256], name[64];
    for (int t = 0; t < COUNT(all_dtypes); t++) {
        kiln_dtype dt = all_dtypes[t];
        if (!computes(dev, dt))
            continue;
        kiln__elementwise_defines(defs, sizeof defs, dt);
        for (int o = 0; o < COUNT(binary_ops); o++)
            if (kiln__binary_supports(binary_ops[o], dt))
                for (int v = 0; v < KILN__BINARY_VARIANTS; v++)
                    add(js, "elementwise", defs,
                        kiln__binary_kernel(name, sizeof name, (kiln__binary_variant)v,
                                            binary_ops[o]));
        for (int o = 0; o < COUNT(unary_ops); o++)
            for (int bw = 0; bw < 2; bw++)
                if (kiln__unary_supports(unary_ops[o], dt, bw))
                    add(js, "elementwise", defs,
                        kiln__unary_kernel(name, sizeof name, bw, unary_ops[o]));
        add(js, "elementwise", defs, "kiln_where");
        add(js, "elementwise", defs, "kiln_where_bb");
        for (int u = 0; u < COUNT(all_dtypes); u++)
            if (computes(dev, all_dtypes[u]))
                add(js, "elementwise", defs, kiln__cast_kernel(name, sizeof name, all_dtypes[u]));
        for (int u = 0; u < COUNT(all_dtypes); u++)
            if (kiln__cast8_kernel(dev->info.type, dt, all_dtypes[u]))
                add(js, "elementwise", defs, kiln__cast8_kernel(dev->info.type, dt, all_dtypes[u]));

        static const char *const bases[] = {"kiln_reduce_rows", "kiln_reduce_cols",
                                            "kiln_reduce_vrows", "kiln_reduce_combine"};
        for (int o = 0; o < COUNT(reduce_ops); o++) {
            kiln_reduce_op op = reduce_ops[o];
            if (!kiln__reduce_supports(op, dt))
                continue;
            kiln__reduce_defines(defs, sizeof defs, op, dt);
            add(js, "reduce", defs, "kiln_reduce_wg");
            for (int b = 0; b < COUNT(bases); b++)
                add(js, "reduce", defs, kiln__reduce_kernel(name, sizeof name, bases[b], op));
        }

        defs[0] = '\0';
        kiln__dtype_defines(defs, sizeof defs, "T", dt);
        add(js, "creation", defs, "kiln_fill");
        add(js, "creation", defs, "kiln_arange");
        if (!kiln__dtype_is_float(dt))
            continue;
        add(js, "random", defs, "kiln_rand_uniform");
        add(js, "random", defs, "kiln_rand_normal");
        add(js, "optim", defs, "kiln_adam_update");
        static const char *const nn[] = {"kiln_softmax",
                                         "kiln_cross_entropy_i32",
                                         "kiln_cross_entropy_i64",
                                         "kiln_mse",
                                         "kiln_sgd",
                                         "kiln_adam"};
        static const char *const nn8[] = {"kiln_softmax_rows8", "kiln_cross_entropy8_i32",
                                          "kiln_cross_entropy8_i64"};
        for (int i = 0; i < COUNT(nn); i++)
            add(js, "nn", defs, nn[i]);
        if (!kiln__dtype_is_narrow(dt)) /* the vector kernels are not built for f16/bf16 */
            for (int i = 0; i < COUNT(nn8); i++)
                add(js, "nn", defs, nn8[i]);
    }
    /* Copies of strided views (kiln_tensor_contiguous, reshape of a view): one program per
     * element size. */
    for (int bytes = 1; bytes <= 8; bytes *= 2) {
        snprintf(defs, sizeof defs, "-DKILN_E=%s", kiln__dtype_cl_uint(bytes));
        add(js, "shape", defs, "kiln_strided_copy");
        add(js, "shape", defs, "kiln_transpose_tiles");
    }
    /* Repeats (the same reduce program for several ops) are dropped by select_part. */
}

/* Drop the jobs an earlier one repeats (the same program and kernel), and keep share `part` of
 * `parts` of the rest: every parts-th program from the part-th, so that each share holds all
 * kinds. The kernels of one program (a source built whole: creation, random, shape) stay in one
 * share: two processes would build the program twice. */
static void select_part(jobs *js, int part, int parts)
{
    if (js->oom)
        return;
    int kept = 0, programs = 0;
    int *program = malloc((size_t)(js->n ? js->n : 1) * sizeof *program); /* -1: a repeat */
    if (!program) {
        js->oom = true;
        return;
    }
    for (int i = 0; i < js->n; i++) {
        const job *j = &js->v[i];
        const kiln__kernel_source *src = kiln__kernel_source_find(j->source);
        bool whole = src && !src->one_kernel, repeat = false;
        int same = -1; /* the program of an earlier kernel of the same program */
        for (int e = 0; e < i && !repeat; e++) /* ~900 jobs: ~1 ms */
            if (program[e] >= 0 && strcmp(js->v[e].source, j->source) == 0 &&
                strcmp(js->v[e].defines, j->defines) == 0) {
                repeat = strcmp(js->v[e].name, j->name) == 0;
                if (whole && same < 0)
                    same = program[e];
            }
        program[i] = repeat ? -1 : same >= 0 ? same : programs++;
    }
    for (int i = 0; i < js->n; i++) /* then the share, in the list's order */
        if (program[i] >= 0 && program[i] % parts == part)
            js->v[kept++] = js->v[i];
    free(program);
    js->n = kept;
}

typedef struct pool {
    kiln_device *dev;
    jobs *js;
    atomic_int next, failed;
    int done; /* under lock */
    kiln_status first;
    char first_msg[512]; /* kiln_last_error is per thread: the failing worker's, copied */
    pthread_mutex_t lock;
    bool tty;
    kiln_prewarm_progress_fn progress;
    void *user;
    const char *op; /* the public function, for messages */
} pool;

static void *worker(void *arg)
{
    pool *p = arg;
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->js->n;) {
        job *j = &p->js->v[i];
        kiln__kernel *k = NULL;
        kiln_status s = kiln__builtin_kernel(p->dev, j->source, j->defines, j->name, p->op, &k);
        pthread_mutex_lock(&p->lock);
        /* counted under the lock, so that progress and the terminal line only ever go up (an
         * atomic count taken before it reached the callback out of order: 800 then 799) */
        int done = ++p->done;
        if (s != KILN_OK && atomic_fetch_add(&p->failed, 1) == 0) {
            p->first = s;
            snprintf(p->first_msg, sizeof p->first_msg, "%s", kiln_last_error());
        }
        if (p->progress)
            p->progress(p->user, done, p->js->n);
        else if (p->tty && (done % 16 == 0 || done == p->js->n))
            fprintf(stderr, "\rkiln: prewarming %s: %d of %d kernels", p->dev->info.spec, done,
                    p->js->n);
        pthread_mutex_unlock(&p->lock);
    }
    return NULL;
}

static kiln_status prewarm(kiln_device *dev, int part, int parts, kiln_prewarm_progress_fn progress,
                           void *user, int *built, const char *op)
{
    if (built)
        *built = 0;
    if (!dev)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: dev is NULL", op);
    if (parts < 1 || part < 0 || part >= parts)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: part %d of %d; parts must be at least 1 and part in [0, parts)", op,
                           part, parts);
    kiln_status s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    jobs js = {0};
    list_jobs(dev, &js);
    select_part(&js, part, parts);
    if (js.oom) {
        free(js.v);
        return kiln__host_oom(op);
    }
    const char *log = getenv("KILN_LOG");
    pool p = {.dev = dev,
              .js = &js,
              .first = KILN_OK,
              .tty = !progress && isatty(STDERR_FILENO) && !(log && strcmp(log, "off") == 0),
              .progress = progress,
              .user = user,
              .op = op};
    pthread_mutex_init(&p.lock, NULL);
    if (progress)
        progress(user, 0, js.n);
    kiln__build_progress_hold(true);
    /* One build per core overlaps them where the driver compiles programs side by side; PoCL
     * compiles one at a time in a process, so kiln-info --prewarm runs parts in processes. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
    pthread_t threads[8];
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&threads[started], NULL, worker, &p) != 0)
            break;
    if (started == 0)
        worker(&p);
    for (int i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    kiln__build_progress_hold(false);
    if (p.tty)
        fputc('\n', stderr);
    pthread_mutex_destroy(&p.lock);
    int failed = atomic_load(&p.failed), n = js.n;
    free(js.v);
    if (built)
        *built = n - failed;
    if (failed)
        return kiln__error(p.first,
                           "%s: %d of %d built-in kernels failed to build on %s; the first: %s", op,
                           failed, n, dev->info.spec, p.first_msg);
    kiln__log(KILN_LOG_INFO, "%s: %d built-in kernels ready on %s", op, n, dev->info.spec);
    return KILN_OK;
}

kiln_status kiln_device_prewarm(kiln_device *dev, int *built)
{
    return prewarm(dev, 0, 1, NULL, NULL, built, OP);
}

kiln_status kiln_device_prewarm_part(kiln_device *dev, int part, int parts,
                                     kiln_prewarm_progress_fn progress, void *user, int *built)
{
    return prewarm(dev, part, parts, progress, user, built, "kiln_device_prewarm_part");
}
