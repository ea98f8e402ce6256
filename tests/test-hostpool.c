/* test-hostpool.c - kiln's host thread pool (lib/hostpool.c), no device: every part of a job runs
 * exactly once, on the caller and on pool threads, for part counts from 1 to past the pool's
 * limit; jobs from several threads at once run one at a time; a job started after the pool
 * stopped starts it again; a part that takes long keeps its caller waiting (it returns only
 * when all are done). Under TSan (the tsan stage) this is also the pool's race check. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "lib/hostpool.h"
#include "testutil.h"

enum { MAX_PARTS = KILN__HOST_POOL_MAX + 9 };

typedef struct job {
    atomic_int runs[MAX_PARTS];
    atomic_int wrong_count; /* parts argument differing from the job's */
    atomic_int on_caller, off_caller;
    atomic_int busy; /* parts running now in this job */
    atomic_int most_busy;
    pthread_t caller;
    int parts;
    long sleep_ns; /* per part run off the caller (see part_fn) */
} job;

static void part_fn(void *ctx, int part, int parts)
{
    job *j = ctx;
    if (parts != j->parts || part < 0 || part >= parts) {
        atomic_fetch_add(&j->wrong_count, 1);
        return;
    }
    int now = atomic_fetch_add(&j->busy, 1) + 1;
    int most = atomic_load(&j->most_busy);
    while (now > most && !atomic_compare_exchange_weak(&j->most_busy, &most, now)) {
    }
    atomic_fetch_add(pthread_equal(pthread_self(), j->caller) ? &j->on_caller : &j->off_caller, 1);
    if (j->sleep_ns && pthread_equal(pthread_self(), j->caller)) {
        /* the caller's part waits (up to 2 s) until a pool thread has started one, then
         * returns at once: the caller must then wait for the others (past its watch, asleep) */
        struct timespec t = {0, 100 * 1000};
        for (int i = 0; i < 20000 && atomic_load(&j->off_caller) == 0; i++)
            nanosleep(&t, NULL);
    } else if (j->sleep_ns) {
        struct timespec t = {0, j->sleep_ns};
        nanosleep(&t, NULL);
    }
    atomic_fetch_add(&j->runs[part], 1);
    atomic_fetch_sub(&j->busy, 1);
}

/* Run a job of `parts` parts; NULL when every part ran exactly once, else what went wrong
 * (static text: callable from any thread; Check's asserts are not). */
static const char *try_job(job *j, int parts, long sleep_ns)
{
    memset(j, 0, sizeof *j);
    j->parts = parts;
    j->sleep_ns = sleep_ns;
    j->caller = pthread_self();
    kiln__host_parallel(parts, part_fn, j);
    /* every part has returned by now */
    if (atomic_load(&j->busy) != 0)
        return "a part was still running when kiln__host_parallel returned";
    if (atomic_load(&j->wrong_count) != 0)
        return "a part saw another job's part count, or a part number out of range";
    for (int i = 0; i < MAX_PARTS; i++)
        if (atomic_load(&j->runs[i]) != (i < parts ? 1 : 0))
            return "a part ran other than once (or a part past the count ran)";
    return NULL;
}

static void run_job(job *j, int parts, long sleep_ns)
{
    const char *why = try_job(j, parts, sleep_ns);
    ck_assert_msg(why == NULL, "%d parts: %s", parts, why);
}

START_TEST(every_part_once)
{
    static job j;
    static const int counts[] = {0, 1, 2, 3, 5, 8, 17, KILN__HOST_POOL_MAX + 1, MAX_PARTS};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        run_job(&j, counts[c], 0);
        if (counts[c] == 1) /* one part runs on the caller, without the pool */
            ck_assert_int_eq(atomic_load(&j.on_caller), 1);
    }
    ck_assert_int_le(kiln__host_pool_threads(), KILN__HOST_POOL_MAX);
    ck_assert_int_ge(kiln__host_pool_threads(), 1);
    kiln__host_pool_stop();
    ck_assert_int_eq(kiln__host_pool_threads(), 0);
}
END_TEST

/* Parts that sleep 20 ms each when a pool thread runs them: the pool's threads take some, several
 * run at once, and the caller returns only after them (its own parts end as soon as a pool
 * thread has started one). */
START_TEST(parts_run_beside_the_caller)
{
    static job j;
    run_job(&j, 4, 20 * 1000 * 1000);
    ck_assert_int_gt(atomic_load(&j.off_caller), 0);
    ck_assert_int_gt(atomic_load(&j.most_busy), 1);
    kiln__host_pool_stop();
    /* started again by the next job */
    run_job(&j, 3, 5 * 1000 * 1000);
    ck_assert_int_gt(kiln__host_pool_threads(), 0);
    kiln__host_pool_stop();
    kiln__host_pool_stop(); /* stopping a stopped pool does nothing */
    ck_assert_int_eq(kiln__host_pool_threads(), 0);
}
END_TEST

typedef struct caller_arg {
    job j;
    int parts;
    const char *why; /* the first failure */
} caller_arg;

static void *caller_thread(void *p)
{
    caller_arg *a = p;
    for (int r = 0; r < 50 && !a->why; r++)
        a->why = try_job(&a->j, a->parts, r % 10 == 0 ? 100 * 1000 : 0);
    return NULL;
}

/* Four threads start jobs at once (devices' worker threads each running a GEMM): each job's
 * parts all run once, and no job's parts mix with another's. */
START_TEST(concurrent_callers)
{
    enum { CALLERS = 4 };
    static caller_arg args[CALLERS];
    pthread_t t[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        args[i].parts = 2 + i * 3;
        ck_assert_int_eq(pthread_create(&t[i], NULL, caller_thread, &args[i]), 0);
    }
    for (int i = 0; i < CALLERS; i++)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < CALLERS; i++)
        ck_assert_msg(args[i].why == NULL, "caller %d (%d parts): %s", i, args[i].parts,
                      args[i].why);
    kiln__host_pool_stop();
}
END_TEST

Suite *hostpool_suite(void)
{
    Suite *s = suite_create("hostpool");
    TCase *tc = tcase_create("hostpool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_part_once);
    tcase_add_test(tc, parts_run_beside_the_caller);
    tcase_add_test(tc, concurrent_callers);
    suite_add_tcase(s, tc);
    return s;
}
