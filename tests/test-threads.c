/* test-threads.c - tensors and the caching allocator under concurrent use from 8 threads. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define NTHREADS 8
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
    int reads; /* tensors read back and compared */
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

/* Read t and compare with the values of seed (zeros for ZEROS). */
#define ZEROS 0xFFFFFFFFu
static void verify(worker *w, const kiln_tensor *t, uint32_t seed)
{
    int64_t n = kiln_tensor_numel(t);
    w->reads++;
    if (kiln_tensor_read(t, w->buf, (size_t)n * sizeof(int32_t)) != KILN_OK) {
        report(w, "read");
        return;
    }
    for (int64_t i = 0; i < n; i++)
        if (w->buf[i] != (seed == ZEROS ? 0 : value(seed, i))) {
            report(w, "data differs");
            return;
        }
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
    switch (next(w) % 8) {
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

START_TEST(test_eight_threads)
{
    tdevs[0] = test_device();
    if (simulated(tdevs[0])) {
        /* Oclgrind's queue crashes when several threads enqueue at once (OpenCL 1.2 makes every
         * call but clSetKernelArg thread-safe; real drivers are). */
        test_skip("eight_threads: Oclgrind's command queue is not thread-safe");
        return;
    }
    tdevs[1] = test_other_device(tdevs[0], true);
    ntdevs = tdevs[1] ? 2 : 1;
    if (ntdevs == 1)
        test_skip("eight_threads: one device only; the threads share %s",
                  kiln_device_spec(tdevs[0]));
    int64_t n[1] = {MAXN};
    for (int i = 0; i < MAXN; i++)
        shared_host[i] = value(12345, i);
    ck_assert_int_eq(kiln_tensor_from_host(tdevs[0], KILN_I32, 1, n, shared_host, &shared),
                     KILN_OK);
    static worker ws[NTHREADS];
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        ws[i].id = i;
        ws[i].rng = 0x9E3779B9u * (uint32_t)(i + 1);
        ck_assert_int_eq(pthread_create(&th[i], NULL, run_worker, &ws[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    kiln_tensor_release(shared);
    int reads = 0;
    for (int i = 0; i < NTHREADS; i++)
        reads += ws[i].reads;
    printf("%d threads x %d ops on %d device(s): %d tensors read back and compared\n", NTHREADS,
           NOPS, ntdevs, reads);
    ck_assert_int_gt(reads, NTHREADS * NOPS / 8);
    for (int i = 0; i < NTHREADS; i++)
        ck_assert_msg(ws[i].errors == 0, "%d errors; first: %s", ws[i].errors, ws[i].first_error);
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
    tcase_add_test(tc, test_eight_threads);
    suite_add_tcase(s, tc);
    return s;
}
