/* test-queues.c - queues and events (issue 26): tensors used across queues see each other's
 * writes without the program ordering anything, the caching allocator keeps a freed buffer for
 * the queue that freed it, events (record, wait, query, elapsed time, a queue waiting for one),
 * per-thread current queues, kiln_device_synchronize waiting for every queue, the profiler's
 * track per queue, and every bad call. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln_cl.h"
#include "testutil.h"

static kiln_device *dev;
static kiln_program *prog;

/* slow_fill: x[i] = v after a dependent loop of `iters` steps per work-item, so that a queue
 * holding it is still busy when the host enqueues the next command elsewhere. */
static const char *const src =
    "__kernel void slow_fill(__global float *x, int n, float v, int iters)\n"
    "{\n"
    "    int i = get_global_id(0);\n"
    "    if (i >= n) return;\n"
    "    float acc = (float)i;\n"
    "    for (int k = 0; k < iters; k++) acc = acc * 0.999999f + 1.0f;\n"
    "    x[i] = v + (acc < 0.0f ? 1.0f : 0.0f);\n"
    "}\n"
    "__kernel void add_one(__global float *x, int n)\n"
    "{ int i = get_global_id(0); if (i < n) x[i] += 1.0f; }\n";

static void setup(void)
{
    setup_devices();
    dev = test_device();
    ASSERT_OK(kiln_program_build(dev, src, "", &prog));
}

static void teardown(void)
{
    kiln_program_release(prog);
    teardown_devices();
}

static int iters(void)
{
    return simulated(dev) ? 20 : 4000;
}

static long elements(void)
{
    return simulated(dev) ? 256 : 1 << 14;
}

static void slow_fill(kiln_tensor *x, float v)
{
    int32_t n = (int32_t)kiln_tensor_numel(x);
    size_t g = (size_t)n;
    kiln_arg args[4] = {kiln_arg_tensor(x), kiln_arg_i32(n), kiln_arg_f32(v),
                        kiln_arg_i32(iters())};
    ASSERT_OK(kiln_program_launch(prog, "slow_fill", 1, &g, NULL, 4, args));
}

static void add_one(kiln_tensor *x)
{
    int32_t n = (int32_t)kiln_tensor_numel(x);
    size_t g = (size_t)n;
    kiln_arg args[2] = {kiln_arg_tensor(x), kiln_arg_i32(n)};
    ASSERT_OK(kiln_program_launch(prog, "add_one", 1, &g, NULL, 2, args));
}

/* Element i of x is start + step i. */
static void expect_values(kiln_tensor *x, float start, float step)
{
    long n = kiln_tensor_numel(x);
    float *h = malloc(sizeof(float) * (size_t)n);
    ck_assert_ptr_nonnull(h);
    ASSERT_OK(kiln_tensor_read(x, h, sizeof(float) * (size_t)n));
    for (long i = 0; i < n; i++)
        ck_assert_msg(h[i] == start + step * (float)i, "element %ld is %g, expected %g", i, h[i],
                      start + step * (float)i);
    free(h);
}

static void expect_all(kiln_tensor *x, float v)
{
    expect_values(x, v, 0.0f);
}

/* Written on one queue, then read, changed and copied on others with no ordering by the test:
 * every step sees the one before. */
START_TEST(test_tensor_follows_queues)
{
    kiln_queue *a, *b;
    ASSERT_OK(kiln_queue_create(dev, &a));
    ASSERT_OK(kiln_queue_create(dev, &b));
    ck_assert_ptr_eq(kiln_queue_device(a), dev);
    int64_t shape[1] = {elements()};
    for (int round = 0; round < 3; round++) {
        kiln_tensor *x, *y;
        ASSERT_OK(kiln_queue_set_current(dev, a));
        ck_assert_ptr_eq(kiln_queue_current(dev), a);
        ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &x));
        slow_fill(x, 3.0f + (float)round); /* busy on a */
        ASSERT_OK(kiln_queue_set_current(dev, b));
        add_one(x); /* on b: after a's fill */
        ASSERT_OK(kiln_queue_set_current(dev, NULL));
        ck_assert_ptr_null(kiln_queue_current(dev));
        ASSERT_OK(kiln_unary(KILN_UNARY_NEG, x, &y)); /* the default queue, after b */
        expect_all(y, -(4.0f + (float)round));
        ASSERT_OK(kiln_queue_set_current(dev, a));
        slow_fill(x, 10.0f); /* a writes again while the default queue may still read */
        ASSERT_OK(kiln_queue_set_current(dev, NULL));
        expect_all(x, 10.0f);
        kiln_tensor_release(x);
        kiln_tensor_release(y);
    }
    ASSERT_OK(kiln_queue_release(a));
    ASSERT_OK(kiln_queue_release(b));
}
END_TEST

/* A buffer freed by a queue goes back to that queue only. */
START_TEST(test_pool_per_queue)
{
    kiln_queue *a;
    ASSERT_OK(kiln_queue_create(dev, &a));
    int64_t shape[1] = {4099}; /* a size class no other case uses */
    kiln_tensor *x, *y, *z;
    ASSERT_OK(kiln_queue_set_current(dev, a));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &x));
    slow_fill(x, 1.0f);
    cl_mem m = kiln_tensor_cl_mem(x);
    kiln_tensor_release(x); /* freed by a, maybe still being written there */
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &y));
    ck_assert_ptr_ne(kiln_tensor_cl_mem(y), m); /* the default queue gets another buffer */
    ASSERT_OK(kiln_queue_set_current(dev, a));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &z));
    ck_assert_ptr_eq(kiln_tensor_cl_mem(z), m); /* a gets its own back */
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    kiln_tensor_release(y);
    kiln_tensor_release(z);
    ASSERT_OK(kiln_queue_release(a));
}
END_TEST

START_TEST(test_events)
{
    int64_t shape[1] = {elements()};
    kiln_tensor *x;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &x));
    kiln_queue *a;
    ASSERT_OK(kiln_queue_create(dev, &a));
    for (int on_a = 0; on_a < 2; on_a++) {
        kiln_queue *q = on_a ? a : NULL;
        ASSERT_OK(kiln_queue_set_current(dev, q));
        kiln_event *start, *end;
        ASSERT_OK(kiln_event_record(dev, q, &start));
        slow_fill(x, 2.0f);
        slow_fill(x, 5.0f);
        ASSERT_OK(kiln_event_record(dev, NULL, &end)); /* NULL: the current queue, q */
        bool done = true;
        ASSERT_OK(kiln_event_query(end, &done));
        double ms = 0;
        if (!done)
            ASSERT_FAILS(kiln_event_elapsed_ms(start, end, &ms), KILN_ERR_STATE,
                         "not reached yet; wait for it first");
        ASSERT_OK(kiln_event_wait(end));
        ASSERT_OK(kiln_event_query(end, &done));
        ck_assert(done);
        ASSERT_OK(kiln_event_query(start, &done)); /* in order: before end */
        ck_assert(done);
        ASSERT_OK(kiln_event_elapsed_ms(start, end, &ms));
        ck_assert_msg(ms > 0 && ms < 60000, "elapsed %g ms", ms);
        double back;
        ASSERT_OK(kiln_event_elapsed_ms(end, start, &back));
        ck_assert_double_eq_tol(back, -ms, 1e-9);
        expect_all(x, 5.0f);
        kiln_event_release(start);
        kiln_event_release(end);
    }
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    kiln_event_release(NULL);
    kiln_tensor_release(x);
    ASSERT_OK(kiln_queue_release(a));
}
END_TEST

/* b waits on the device for a's event: once b's own event is reached, a's is. */
START_TEST(test_queue_waits_for_event)
{
    int64_t shape[1] = {elements()};
    kiln_tensor *x;
    kiln_queue *a, *b;
    ASSERT_OK(kiln_queue_create(dev, &a));
    ASSERT_OK(kiln_queue_create(dev, &b));
    ASSERT_OK(kiln_queue_set_current(dev, a));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &x));
    slow_fill(x, 1.0f);
    kiln_event *on_a, *on_b;
    ASSERT_OK(kiln_event_record(dev, a, &on_a));
    ASSERT_OK(kiln_queue_wait_event(b, on_a));
    ASSERT_OK(kiln_event_record(dev, b, &on_b));
    ASSERT_OK(kiln_event_wait(on_b));
    bool done = false;
    ASSERT_OK(kiln_event_query(on_a, &done));
    ck_assert(done);
    /* NULL: the current queue of the event's device (a here) */
    ASSERT_OK(kiln_queue_wait_event(NULL, on_b));
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    kiln_event_release(on_a);
    kiln_event_release(on_b);
    kiln_tensor_release(x);
    ASSERT_OK(kiln_queue_release(a));
    ASSERT_OK(kiln_queue_release(b));
}
END_TEST

/* kiln_device_synchronize waits for every queue; kiln_queue_synchronize for its own. */
START_TEST(test_synchronize)
{
    int64_t shape[1] = {elements()};
    kiln_tensor *x;
    kiln_queue *a;
    ASSERT_OK(kiln_queue_create(dev, &a));
    ASSERT_OK(kiln_queue_set_current(dev, a));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &x));
    for (int k = 0; k < 2; k++) {
        slow_fill(x, 7.0f);
        kiln_event *ev;
        ASSERT_OK(kiln_event_record(dev, a, &ev));
        if (k == 0)
            ASSERT_OK(kiln_device_synchronize(dev));
        else
            ASSERT_OK(kiln_queue_synchronize(a));
        bool done = false;
        ASSERT_OK(kiln_event_query(ev, &done));
        ck_assert(done);
        kiln_event_release(ev);
    }
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    kiln_tensor_release(x);
    ASSERT_OK(kiln_queue_release(a));
}
END_TEST

typedef struct thread_arg {
    kiln_queue *q;
    kiln_queue *seen;
    float v;
    kiln_tensor *x;
} thread_arg;

static void *on_queue(void *p)
{
    thread_arg *t = p;
    ck_assert_ptr_null(kiln_queue_current(dev)); /* a new thread starts on the default queue */
    ASSERT_OK(kiln_queue_set_current(dev, t->q));
    t->seen = kiln_queue_current(dev);
    slow_fill(t->x, t->v);
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    return NULL;
}

/* The current queue is the thread's own. */
START_TEST(test_current_per_thread)
{
    if (simulated(dev)) { /* Oclgrind crashes when other threads enqueue (test-threads.c) */
        test_skip("current queue per thread: Oclgrind's queues are not thread-safe");
        return;
    }
    kiln_queue *a, *b;
    ASSERT_OK(kiln_queue_create(dev, &a));
    ASSERT_OK(kiln_queue_create(dev, &b));
    ASSERT_OK(kiln_queue_set_current(dev, a));
    int64_t shape[1] = {elements()};
    thread_arg t = {b, NULL, 6.0f, NULL};
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &t.x));
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, on_queue, &t), 0);
    pthread_join(th, NULL);
    ck_assert_ptr_eq(t.seen, b);
    ck_assert_ptr_eq(kiln_queue_current(dev), a); /* this thread's is unchanged */
    add_one(t.x);                                 /* on a, after b's fill */
    expect_all(t.x, 7.0f);
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    kiln_tensor_release(t.x);
    ASSERT_OK(kiln_queue_release(a));
    ASSERT_OK(kiln_queue_release(b));
}
END_TEST

/* The profiler's trace has a track for a queue of kiln_queue_create, with its kernels. */
START_TEST(test_profiler_track)
{
    kiln_queue *a;
    ASSERT_OK(kiln_queue_create(dev, &a));
    int64_t shape[1] = {elements()};
    kiln_tensor *x;
    ASSERT_OK(kiln_queue_set_current(dev, a));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &x));
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_ALL));
    slow_fill(x, 1.0f);
    ASSERT_OK(kiln_device_synchronize(dev));
    ASSERT_OK(kiln_profiler_stop());
    char path[] = "/tmp/kiln-queues-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ASSERT_OK(kiln_profiler_export_trace(path));
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(path);
    ck_assert_msg(strstr(buf, "(kiln_queue_create)\"") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "\"cat\":\"kernel\",\"name\":\"slow_fill\"") != NULL, "%s", buf);
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    kiln_tensor_release(x);
    ASSERT_OK(kiln_queue_release(a));
}
END_TEST

/* A pinned host tensor filled with start, start + 1, ... through its mapped pointer. */
static kiln_tensor *pinned_counting(long n, float start)
{
    kiln_tensor *h;
    int64_t shape[1] = {n};
    ASSERT_OK(kiln_tensor_empty_pinned(dev, KILN_F32, 1, shape, &h));
    float *p;
    ASSERT_OK(kiln_tensor_map(h, KILN_MAP_WRITE, (void **)&p));
    for (long i = 0; i < n; i++)
        p[i] = start + (float)i;
    ASSERT_OK(kiln_tensor_unmap(h));
    return h;
}

static void expect_counting(kiln_tensor *x, float start)
{
    expect_values(x, start, 1.0f);
}

/* Uploads and downloads through pinned host tensors, on a copy queue and on the default one:
 * each comes after the work that wrote or read its device side, later work waits for it, and host
 * access to the pinned side waits for the copies using it. */
START_TEST(test_pinned_copies)
{
    long n = elements();
    int64_t shape[1] = {n};
    kiln_queue *copy;
    ASSERT_OK(kiln_queue_create(dev, &copy));
    kiln_tensor *h = pinned_counting(n, 0.0f), *back, *x, *y;
    ASSERT_OK(kiln_tensor_empty_pinned(dev, KILN_F32, 1, shape, &back));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &x));
    for (int round = 0; round < 3; round++) {
        slow_fill(x, 5.0f); /* the default queue is busy writing x */
        ASSERT_OK(kiln_queue_set_current(dev, copy));
        ASSERT_OK(kiln_tensor_copy_async(x, h)); /* after the fill: x = h */
        ASSERT_OK(kiln_queue_set_current(dev, NULL));
        add_one(x);                                 /* after the upload */
        ASSERT_OK(kiln_tensor_copy_async(back, x)); /* download on the default queue */
        expect_counting(back, 1.0f + (float)round); /* waits for the download */
        /* The host rewrites h at once: the write waits for an upload from it still pending. */
        slow_fill(x, 7.0f);
        ASSERT_OK(kiln_queue_set_current(dev, copy));
        ASSERT_OK(kiln_tensor_to(h, dev, &y)); /* y = h, after nothing on the copy queue */
        ASSERT_OK(kiln_tensor_copy_async(x, h));
        ASSERT_OK(kiln_queue_set_current(dev, NULL));
        float *p = malloc(sizeof(float) * (size_t)n);
        ck_assert_ptr_nonnull(p);
        for (long i = 0; i < n; i++)
            p[i] = (float)i + (float)round + 1.0f;
        ASSERT_OK(kiln_tensor_write(h, p, sizeof(float) * (size_t)n));
        free(p);
        expect_counting(x, (float)round);
        expect_counting(y, (float)round);
        expect_counting(h, (float)round + 1.0f);
        kiln_tensor_release(y);
    }
    /* device to device, and a pinned tensor released while its upload runs */
    kiln_tensor *h2 = pinned_counting(n, 3.0f), *z;
    slow_fill(x, 1.0f);
    ASSERT_OK(kiln_tensor_copy_async(x, h2));
    kiln_tensor_release(h2);
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &z));
    ASSERT_OK(kiln_tensor_copy_async(z, x));
    expect_counting(z, 3.0f);
    /* pinned to pinned, 0-d, empty */
    ASSERT_OK(kiln_tensor_copy_async(back, h));
    expect_counting(back, 3.0f);
    kiln_tensor *e, *ed;
    int64_t none[1] = {0};
    ASSERT_OK(kiln_tensor_empty_pinned(dev, KILN_F32, 1, none, &e));
    void *ep = NULL;
    ASSERT_OK(kiln_tensor_map(e, KILN_MAP_READ, &ep));
    ck_assert_ptr_nonnull(ep);
    ASSERT_OK(kiln_tensor_unmap(e));
    ASSERT_OK(kiln_tensor_to(e, dev, &ed));
    ck_assert_int_eq(kiln_tensor_numel(ed), 0);
    kiln_tensor *one;
    ASSERT_OK(kiln_tensor_empty_pinned(dev, KILN_F32, 0, NULL, &one));
    ASSERT_OK(kiln_tensor_write(one, &(float){2.5f}, sizeof(float)));
    double v = 0;
    ASSERT_OK(kiln_tensor_item(one, &v));
    ck_assert(v == 2.5);
    kiln_tensor_release(one);
    kiln_tensor_release(e);
    kiln_tensor_release(ed);
    kiln_tensor_release(z);
    kiln_tensor_release(x);
    kiln_tensor_release(back);
    kiln_tensor_release(h);
    ASSERT_OK(kiln_queue_release(copy));
}
END_TEST

START_TEST(test_pinned_bad_calls)
{
    int64_t shape[1] = {4}, five[1] = {5};
    kiln_tensor *h = (kiln_tensor *)&h, *x, *y = NULL;
    ASSERT_FAILS(kiln_tensor_empty_pinned(NULL, KILN_F32, 1, shape, &h), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_tensor_empty_pinned");
    ck_assert_ptr_null(h);
    ASSERT_FAILS(kiln_tensor_empty_pinned(dev, KILN_F32, 1, shape, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_tensor_empty_pinned: out is NULL");
    int64_t neg[1] = {-1}, huge[1] = {(int64_t)1 << 48};
    ASSERT_FAILS(kiln_tensor_empty_pinned(dev, KILN_F32, 1, neg, &h), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_tensor_empty_pinned");
    ASSERT_FAILS(kiln_tensor_empty_pinned(dev, KILN_F32, 1, huge, &h), KILN_ERR_OUT_OF_MEMORY,
                 "kiln_tensor_empty_pinned: no pinned host memory of 1125899906842624 bytes");
    ck_assert_ptr_null(h);
    ASSERT_OK(kiln_tensor_empty_pinned(dev, KILN_F32, 1, shape, &h));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &x));
    /* ops and kernels refuse host memory */
    ASSERT_FAILS(kiln_unary(KILN_UNARY_NEG, h, &y), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_unary: argument 1 is a pinned host tensor");
    ck_assert_ptr_null(y);
    ASSERT_FAILS(kiln_add(x, h, &y), KILN_ERR_INVALID_ARGUMENT, "is a pinned host tensor");
    ck_assert_ptr_null(kiln_tensor_cl_mem(h));
    kiln_arg args[2] = {kiln_arg_tensor(h), kiln_arg_i32(4)};
    size_t g = 4;
    ASSERT_FAILS(kiln_program_launch(prog, "add_one", 1, &g, NULL, 2, args),
                 KILN_ERR_INVALID_ARGUMENT, "is a pinned host tensor");
    /* copy_async's rules */
    ASSERT_FAILS(kiln_tensor_copy_async(NULL, h), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_tensor_copy_async: dst is NULL");
    ASSERT_FAILS(kiln_tensor_copy_async(x, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_tensor_copy_async: src is NULL");
    kiln_tensor *i32, *h5;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_I32, 1, shape, &i32));
    ASSERT_FAILS(kiln_tensor_copy_async(i32, h), KILN_ERR_DTYPE_MISMATCH,
                 "kiln_tensor_copy_async: dst is i32 but src is f32");
    ASSERT_OK(kiln_tensor_empty_pinned(dev, KILN_F32, 1, five, &h5));
    ASSERT_FAILS(kiln_tensor_copy_async(x, h5), KILN_ERR_SHAPE_MISMATCH,
                 "dst has 4 elements but src has 5");
    void *p;
    ASSERT_OK(kiln_tensor_map(h, KILN_MAP_READ, &p));
    ASSERT_FAILS(kiln_tensor_copy_async(x, h), KILN_ERR_STATE, "src is mapped");
    ASSERT_FAILS(kiln_tensor_map(h, KILN_MAP_READ, &p), KILN_ERR_STATE, "already mapped");
    ASSERT_OK(kiln_tensor_unmap(h));
    ASSERT_FAILS(kiln_tensor_unmap(h), KILN_ERR_STATE, "not mapped");
    kiln_tensor_release(h5);
    ASSERT_FAILS(kiln_tensor_copy_async(x, h5), KILN_ERR_INVALID_ARGUMENT, "already released");
    kiln_device *other = test_other_device(dev, false);
    if (!other)
        other = test_other_device(dev, true);
    if (other) {
        kiln_tensor *ox;
        ASSERT_OK(kiln_tensor_empty(other, KILN_F32, 1, shape, &ox));
        ASSERT_FAILS(kiln_tensor_copy_async(ox, h), KILN_ERR_DEVICE_MISMATCH,
                     "both must be on one device");
        y = (kiln_tensor *)&y;
        ASSERT_FAILS(kiln_tensor_to(h, other, &y), KILN_ERR_DEVICE_MISMATCH,
                     "kiln_tensor_to: the pinned host tensor belongs to");
        ck_assert_ptr_null(y);
        kiln_tensor_release(ox);
    } else {
        test_skip("pinned tensors of two devices: one device");
    }
    kiln_tensor_release(i32);
    kiln_tensor_release(x);
    kiln_tensor_release(h);
}
END_TEST

START_TEST(test_bad_calls)
{
    kiln_queue *q = (kiln_queue *)&q;
    ASSERT_FAILS(kiln_queue_create(NULL, &q), KILN_ERR_INVALID_ARGUMENT, "kiln_queue_create");
    ck_assert_ptr_null(q);
    ASSERT_FAILS(kiln_queue_create(dev, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_queue_create: out is NULL");
    kiln_queue *forged = (kiln_queue *)&forged;
    ASSERT_FAILS(kiln_queue_set_current(dev, forged), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_queue_set_current: the queue");
    ASSERT_FAILS(kiln_queue_synchronize(NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_queue_synchronize: the queue is NULL");
    ASSERT_FAILS(kiln_queue_synchronize(forged), KILN_ERR_INVALID_ARGUMENT,
                 "is not one from kiln_queue_create");
    ck_assert_ptr_null(kiln_queue_device(forged));
    ck_assert_ptr_null(kiln_queue_current(NULL));
    ck_assert_int_eq(kiln_queue_release(NULL), KILN_OK);
    ASSERT_OK(kiln_queue_create(dev, &q));
    ASSERT_OK(kiln_queue_set_current(dev, q));
    ASSERT_FAILS(kiln_queue_release(q), KILN_ERR_STATE, "is this thread's current queue");
    ASSERT_OK(kiln_queue_set_current(dev, NULL));
    ASSERT_OK(kiln_queue_release(q));
    ASSERT_FAILS(kiln_queue_set_current(dev, q), KILN_ERR_INVALID_ARGUMENT, "was released");
    ASSERT_FAILS(kiln_queue_release(q), KILN_ERR_INVALID_ARGUMENT, "was released");
    kiln_event *ev = (kiln_event *)&ev;
    ASSERT_FAILS(kiln_event_record(dev, q, &ev), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_event_record: the queue was released");
    ck_assert_ptr_null(ev);
    ASSERT_FAILS(kiln_event_record(NULL, NULL, &ev), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_event_record");
    ASSERT_FAILS(kiln_event_record(dev, NULL, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_event_record: out is NULL");
    ASSERT_FAILS(kiln_event_wait(NULL), KILN_ERR_INVALID_ARGUMENT, "kiln_event_wait: ev is NULL");
    kiln_event *bogus = (kiln_event *)&bogus;
    ASSERT_FAILS(kiln_event_wait(bogus), KILN_ERR_INVALID_ARGUMENT,
                 "is not an event from kiln_event_record");
    ASSERT_OK(kiln_event_record(dev, NULL, &ev));
    ASSERT_FAILS(kiln_event_query(ev, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_event_query: done is NULL");
    ASSERT_FAILS(kiln_event_elapsed_ms(ev, ev, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_event_elapsed_ms: ms is NULL");
    double ms;
    ASSERT_FAILS(kiln_event_elapsed_ms(NULL, ev, &ms), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_event_elapsed_ms: start is NULL");
    ASSERT_FAILS(kiln_queue_wait_event(forged, ev), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_queue_wait_event: the queue");
    ASSERT_FAILS(kiln_queue_wait_event(NULL, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_queue_wait_event: ev is NULL");
    /* another device: set_current with its queue, elapsed between devices */
    kiln_device *other = test_other_device(dev, false);
    if (!other)
        other = test_other_device(dev, true);
    if (other) {
        kiln_queue *oq;
        ASSERT_OK(kiln_queue_create(other, &oq));
        ASSERT_FAILS(kiln_queue_set_current(dev, oq), KILN_ERR_DEVICE_MISMATCH,
                     "kiln_queue_set_current: the queue is on");
        kiln_event *none;
        ASSERT_FAILS(kiln_event_record(dev, oq, &none), KILN_ERR_DEVICE_MISMATCH,
                     "kiln_event_record: the queue is on");
        ck_assert_ptr_null(none);
        kiln_event *oev;
        ASSERT_OK(kiln_event_record(other, NULL, &oev));
        ASSERT_OK(kiln_event_wait(oev));
        ASSERT_OK(kiln_event_wait(ev));
        ASSERT_FAILS(kiln_event_elapsed_ms(ev, oev, &ms), KILN_ERR_DEVICE_MISMATCH,
                     "time events of one device");
        kiln_event_release(oev);
        ASSERT_OK(kiln_queue_release(oq));
    } else {
        test_skip("queues of two devices: one device");
    }
    ASSERT_OK(kiln_event_wait(ev));
    kiln_event_release(ev);
    /* At most 32 open queues on a device; a released one's slot serves again. */
    kiln_queue *qs[33];
    int made = 0;
    kiln_status s = KILN_OK;
    while (made < 33 && (s = kiln_queue_create(dev, &qs[made])) == KILN_OK)
        made++;
    ck_assert_int_eq(s, KILN_ERR_OUT_OF_MEMORY);
    ASSERT_ERROR_HAS("queues already");
    ck_assert_int_eq(made, 32);
    ASSERT_OK(kiln_queue_release(qs[5]));
    kiln_queue *again;
    ASSERT_OK(kiln_queue_create(dev, &again));
    ck_assert_ptr_eq(again, qs[5]);
    for (int i = 0; i < made; i++)
        ASSERT_OK(kiln_queue_release(qs[i]));
}
END_TEST

Suite *queues_suite(void)
{
    Suite *s = suite_create("queues");
    TCase *tc = tcase_create("queues");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_tensor_follows_queues);
    tcase_add_test(tc, test_pool_per_queue);
    tcase_add_test(tc, test_pinned_copies);
    tcase_add_test(tc, test_pinned_bad_calls);
    tcase_add_test(tc, test_events);
    tcase_add_test(tc, test_queue_waits_for_event);
    tcase_add_test(tc, test_synchronize);
    tcase_add_test(tc, test_current_per_thread);
    tcase_add_test(tc, test_profiler_track);
    tcase_add_test(tc, test_bad_calls);
    suite_add_tcase(s, tc);
    return s;
}
