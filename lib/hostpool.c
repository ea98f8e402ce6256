/* hostpool.c - host threads for the parts of one job (hostpool.h). Between jobs a thread watches
 * for the next one a short while (yielding its core) and then sleeps on a condition variable:
 * the point of the pool is to leave the cores to the device's own worker threads between jobs,
 * where OpenBLAS's threads kept spinning for a tenth of a second. */
#include "hostpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* How long a thread watches for the next job, or a caller for its job's last part, before it
 * sleeps; and how long a thread tries for the lock before it blocks on it. Waking a thread that
 * sleeps (on the condition variable or in the mutex) took 50-120 us on the development
 * machine (a VM): as long as a whole 256^3 GEMM on two threads. A training step's products come
 * one after another with short kernels between them. */
enum { WATCH_NS = 1000 * 1000 };

static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;     /* everything below but atomics */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;       /* a job or stop for the threads */
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;       /* the job's last part finished */
static pthread_t threads[KILN__HOST_POOL_MAX];
static pid_t threads_pid; /* the process that started them: a fork's child has none of them */
static int nthreads, sleepers;
static bool stopping, caller_sleeps;
static atomic_uint jobs;    /* jobs started: a watching thread sees a new one without the lock */
static atomic_int finished; /* parts of the current job finished (written under the lock) */

static struct {
    kiln__host_part_fn *fn;
    void *ctx;
    int parts, next;
} job;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Take the lock, trying without blocking (and yielding) for up to WATCH_NS first. */
static void lock_soon(void)
{
    int64_t end = now_ns() + WATCH_NS;
    while (pthread_mutex_trylock(&lock) != 0) {
        if (now_ns() > end) {
            pthread_mutex_lock(&lock);
            return;
        }
        sched_yield();
    }
}

/* Claim and run the current job's parts until none is left; with the lock held. */
static void run_parts(void)
{
    while (job.fn && job.next < job.parts) {
        int part = job.next++, parts = job.parts;
        kiln__host_part_fn *fn = job.fn;
        void *ctx = job.ctx;
        pthread_mutex_unlock(&lock);
        fn(ctx, part, parts);
        lock_soon();
        if (atomic_fetch_add(&finished, 1) + 1 == parts && caller_sleeps)
            pthread_cond_signal(&done);
    }
}

/* Whether a job after the seen-th one starts within WATCH_NS (yielding the core meanwhile). */
static bool watch_jobs(unsigned seen)
{
    int64_t end = now_ns() + WATCH_NS;
    while (atomic_load(&jobs) == seen) {
        if (now_ns() > end)
            return false;
        sched_yield();
    }
    return true;
}

static void *worker(void *arg)
{
    (void)arg;
    lock_soon();
    while (!stopping) {
        run_parts();
        if (stopping)
            break;
        unsigned seen = atomic_load(&jobs);
        pthread_mutex_unlock(&lock);
        bool next = watch_jobs(seen);
        lock_soon();
        /* no job started since (checked under the lock, so a start cannot slip between): sleep */
        if (!next && !stopping && atomic_load(&jobs) == seen) {
            sleepers++;
            pthread_cond_wait(&wake, &lock);
            sleepers--;
        }
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* Start threads until the pool holds want (or a start fails); with run_lock held. */
static void grow(int want)
{
    if (want > KILN__HOST_POOL_MAX)
        want = KILN__HOST_POOL_MAX;
    pthread_mutex_lock(&lock);
    if (threads_pid != getpid()) {
        threads_pid = getpid();
        nthreads = sleepers = 0;
    }
    while (nthreads < want && pthread_create(&threads[nthreads], NULL, worker, NULL) == 0)
        nthreads++;
    pthread_mutex_unlock(&lock);
}

void kiln__host_parallel(int parts, kiln__host_part_fn *fn, void *ctx)
{
    if (parts <= 1) {
        if (parts == 1)
            fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&run_lock);
    grow(parts - 1);
    lock_soon();
    job.fn = fn;
    job.ctx = ctx;
    job.parts = parts;
    job.next = 0;
    atomic_store(&finished, 0);
    atomic_fetch_add(&jobs, 1);
    if (sleepers > 0)
        pthread_cond_broadcast(&wake);
    run_parts();
    pthread_mutex_unlock(&lock);
    /* the other parts are running: watch for the last, then sleep */
    int64_t end = now_ns() + WATCH_NS;
    while (atomic_load(&finished) < parts && now_ns() <= end)
        sched_yield();
    lock_soon();
    while (atomic_load(&finished) < parts) {
        caller_sleeps = true;
        pthread_cond_wait(&done, &lock);
        caller_sleeps = false;
    }
    job.fn = NULL;
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&run_lock);
}

int kiln__host_pool_threads(void)
{
    pthread_mutex_lock(&lock);
    int n = nthreads;
    pthread_mutex_unlock(&lock);
    return n;
}

void kiln__host_pool_stop(void)
{
    pthread_mutex_lock(&run_lock);
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_broadcast(&wake);
    int n = threads_pid == getpid() ? nthreads : 0;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_lock(&lock);
    nthreads = 0;
    stopping = false;
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&run_lock);
}
