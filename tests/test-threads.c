/* test-threads.c - tensors, the caching allocator, launches and program builds under concurrent
 * use: KILN_TEST_THREADS threads (8 when unset), on one device or two. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define DEFAULT_THREADS 8
#define MAX_THREADS 256
#define NOPS 1000
#define NSLOTS 4
#define MAXN 2048

static kiln_device *tdevs[2];
static int ntdevs;
static kiln_tensor *shared; /* read and copied by every thread at once */
static int32_t shared_host[MAXN];

/* The value element i of a tensor written with `seed` holds; a plain formula as reference. */
static int32_t value(uint32_t seed, int64_t i)
{
    return (int32_t)(seed * 2654435761u + (uint32_t)i * 40503u);
}

typedef struct slot {
    kiln_tensor *t;
    uint32_t seed;
} slot;

typedef struct worker {
    int id;
    uint32_t rng;
    int errors;
    int reads;    /* tensors read back and compared */
    int launches; /* built-in ops and user kernels launched and verified */
    int builds;   /* kiln_program_build calls that succeeded */
    char first_error[512];
    int32_t buf[MAXN];
} worker;

static uint32_t next(worker *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 17;
    w->rng ^= w->rng << 5;
    return w->rng;
}

static void report(worker *w, const char *what)
{
    if (w->errors++ == 0)
        snprintf(w->first_error, sizeof w->first_error, "thread %d: %s: %s", w->id, what,
                 kiln_last_error());
}

static void fill(worker *w, int64_t n, uint32_t seed)
{
    for (int64_t i = 0; i < n; i++)
        w->buf[i] = value(seed, i);
}

/* Read t and compare with the values of seed times mult (zeros for ZEROS), wrapping as int32
 * arithmetic on the device does. */
#define ZEROS 0xFFFFFFFFu
static void verify_times(worker *w, const kiln_tensor *t, uint32_t seed, uint32_t mult)
{
    int64_t n = kiln_tensor_numel(t);
    w->reads++;
    if (kiln_tensor_read(t, w->buf, (size_t)n * sizeof(int32_t)) != KILN_OK) {
        report(w, "read");
        return;
    }
    for (int64_t i = 0; i < n; i++)
        if (w->buf[i] != (seed == ZEROS ? 0 : (int32_t)((uint32_t)value(seed, i) * mult))) {
            report(w, "data differs");
            return;
        }
}

static void verify(worker *w, const kiln_tensor *t, uint32_t seed)
{
    verify_times(w, t, seed, 1);
}

/* A user kernel; each thread builds it with one of a few -DK=... options, so that builds of the
 * same program and of different ones race on the program cache. */
static const char scale_source[] =
    "__kernel void scale(__global const int *x, __global int *y, const int n)\n"
    "{\n"
    "    int i = (int)get_global_id(0);\n"
    "    if (i < n)\n"
    "        y[i] = x[i] * K;\n"
    "}\n";

/* Build the scale kernel with a random K, run it on t (on t's device), verify y = t * K. */
static void build_and_launch(worker *w, const slot *s)
{
    kiln_device *dev = kiln_tensor_device(s->t);
    int k = 2 + (int)(next(w) % 4);
    char options[32];
    snprintf(options, sizeof options, "-DK=%d", k);
    kiln_program *prog;
    if (kiln_program_build(dev, scale_source, options, &prog) != KILN_OK) {
        report(w, "program_build");
        return;
    }
    w->builds++;
    kiln_tensor *y;
    int64_t n = kiln_tensor_numel(s->t);
    if (kiln_tensor_empty(dev, KILN_I32, 1, &n, &y) != KILN_OK) {
        report(w, "empty");
        kiln_program_release(prog);
        return;
    }
    kiln_arg args[3] = {kiln_arg_tensor(s->t), kiln_arg_tensor(y), kiln_arg_i32((int32_t)n)};
    size_t global[1] = {(size_t)n};
    if (kiln_program_launch(prog, "scale", 1, global, NULL, 3, args) != KILN_OK) {
        report(w, "program_launch");
    } else {
        w->launches++;
        verify_times(w, y, s->seed, (uint32_t)k);
    }
    kiln_program_release(prog);
    kiln_tensor_release(y);
}

static void replace(slot *s, kiln_tensor *t, uint32_t seed)
{
    kiln_tensor_release(s->t);
    s->t = t;
    s->seed = seed;
}

static void one_op(worker *w, slot *slots)
{
    slot *s = &slots[next(w) % NSLOTS];
    kiln_device *dev = tdevs[next(w) % (uint32_t)ntdevs];
    kiln_tensor *t;
    uint32_t seed = next(w) % ZEROS;
    switch (next(w) % 10) {
    case 0: { /* create */
        int64_t shape[2] = {1 + next(w) % 32, 1 + next(w) % 64};
        fill(w, shape[0] * shape[1], seed);
        if (kiln_tensor_from_host(dev, KILN_I32, 2, shape, w->buf, &t) != KILN_OK) {
            report(w, "from_host");
            return;
        }
        replace(s, t, seed);
        return;
    }
    case 1: /* write */
        if (!s->t)
            return;
        fill(w, kiln_tensor_numel(s->t), seed);
        if (kiln_tensor_write(s->t, w->buf, kiln_tensor_nbytes(s->t)) != KILN_OK) {
            report(w, "write");
            return;
        }
        s->seed = seed;
        return;
    case 2: /* read */
        if (s->t)
            verify(w, s->t, s->seed);
        return;
    case 3: /* to() the other device */
        if (!s->t)
            return;
        if (kiln_tensor_to(s->t, dev, &t) != KILN_OK) {
            report(w, "to");
            return;
        }
        replace(s, t, s->seed);
        return;
    case 4: /* clone */
        if (!s->t)
            return;
        if (kiln_tensor_clone(s->t, &t) != KILN_OK) {
            report(w, "clone");
            return;
        }
        replace(s, t, s->seed);
        return;
    case 5: /* release */
        replace(s, NULL, 0);
        return;
    case 6: { /* a copy of the shared tensor, on either device */
        if (kiln_tensor_to(shared, dev, &t) != KILN_OK) {
            report(w, "to(shared)");
            return;
        }
        verify(w, t, 12345);
        kiln_tensor_release(t);
        return;
    }
    case 8: /* a built-in op: t + t */
        if (!s->t)
            return;
        if (kiln_add(s->t, s->t, &t) != KILN_OK) {
            report(w, "add");
            return;
        }
        w->launches++;
        verify_times(w, t, s->seed, 2);
        kiln_tensor_release(t);
        return;
    case 9: /* build a program (cached after the first) and launch it */
        if (s->t)
            build_and_launch(w, s);
        return;
    default: { /* zeros, then a reshaped view of it */
        int64_t shape[1] = {1 + next(w) % MAXN}, flat[2] = {1, -1};
        kiln_tensor *v;
        if (kiln_tensor_zeros(dev, KILN_I32, 1, shape, &t) != KILN_OK) {
            report(w, "zeros");
            return;
        }
        if (kiln_tensor_reshape(t, 2, flat, &v) != KILN_OK) {
            report(w, "reshape");
            return;
        }
        kiln_tensor_release(t);
        verify(w, v, ZEROS);
        kiln_tensor_release(v);
        return;
    }
    }
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    slot slots[NSLOTS] = {{0}};
    for (int i = 0; i < NOPS; i++)
        one_op(w, slots);
    for (int i = 0; i < NSLOTS; i++) {
        if (slots[i].t)
            verify(w, slots[i].t, slots[i].seed);
        kiln_tensor_release(slots[i].t);
    }
    return NULL;
}

/* KILN_TEST_THREADS (1..MAX_THREADS), or DEFAULT_THREADS when unset (half as many in the
 * default tier: each thread builds its own programs, cold compiles on 2 cores; CI's tsan stage
 * sets 8 and 32). */
static int thread_count(void)
{
    const char *v = getenv("KILN_TEST_THREADS");
    if (!v || !*v)
        return (int)test_size(DEFAULT_THREADS / 2, DEFAULT_THREADS);
    char *end;
    long n = strtol(v, &end, 10);
    ck_assert_msg(*end == '\0' && n >= 1 && n <= MAX_THREADS,
                  "KILN_TEST_THREADS='%s': expected 1..%d", v, MAX_THREADS);
    return (int)n;
}

START_TEST(test_threads)
{
    const int nthreads = thread_count();
    tdevs[0] = test_device();
    if (simulated(tdevs[0])) {
        /* Oclgrind's queue crashes when several threads enqueue at once (OpenCL 1.2 makes every
         * call but clSetKernelArg thread-safe; real drivers are). */
        test_skip("threads: Oclgrind's command queue is not thread-safe");
        return;
    }
    tdevs[1] = test_other_device(tdevs[0], true);
    ntdevs = tdevs[1] ? 2 : 1;
    if (ntdevs == 1)
        test_skip("threads: one device only; the threads share %s", kiln_device_spec(tdevs[0]));
    int64_t n[1] = {MAXN};
    for (int i = 0; i < MAXN; i++)
        shared_host[i] = value(12345, i);
    ck_assert_int_eq(kiln_tensor_from_host(tdevs[0], KILN_I32, 1, n, shared_host, &shared),
                     KILN_OK);
    worker *ws = calloc((size_t)nthreads, sizeof *ws);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    ck_assert_ptr_nonnull(ws);
    ck_assert_ptr_nonnull(th);
    for (int i = 0; i < nthreads; i++) {
        ws[i].id = i;
        ws[i].rng = 0x9E3779B9u * (uint32_t)(i + 1);
        ck_assert_int_eq(pthread_create(&th[i], NULL, run_worker, &ws[i]), 0);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    kiln_tensor_release(shared);
    int reads = 0, launches = 0, builds = 0;
    for (int i = 0; i < nthreads; i++) {
        reads += ws[i].reads;
        launches += ws[i].launches;
        builds += ws[i].builds;
    }
    printf("%d threads x %d ops on %d device(s): %d tensors read back and compared, %d launches, "
           "%d program builds\n",
           nthreads, NOPS, ntdevs, reads, launches, builds);
    ck_assert_int_gt(reads, nthreads * NOPS / 8);
    ck_assert_int_gt(launches, nthreads * NOPS / 40);
    ck_assert_int_gt(builds, nthreads * NOPS / 80);
    for (int i = 0; i < nthreads; i++)
        ck_assert_msg(ws[i].errors == 0, "%d errors; first: %s", ws[i].errors, ws[i].first_error);
    free(ws);
    free(th);
    for (int d = 0; d < ntdevs; d++) {
        kiln_memory_stats st;
        ck_assert_int_eq(kiln_device_synchronize(tdevs[d]), KILN_OK);
        ck_assert_int_eq(kiln_device_memory_stats(tdevs[d], &st), KILN_OK);
        ck_assert_uint_eq(st.allocated_bytes, 0);
        ck_assert_uint_gt(st.peak_allocated_bytes, 0);
        ck_assert_uint_gt(st.cached_bytes, 0);
    }
}
END_TEST

Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("stress");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return s;
}
