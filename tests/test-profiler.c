/* test-profiler.c - kiln's profiler (issue 26): the table's rows for a known workload (names of
 * built-in ops, fused chains and user kernels, calls, bytes, phases, device times), host-only
 * sessions, ranges on two threads, the trace file, a session forgetting the last one, every bad
 * call, and that a program which does not profile (or stopped) makes no OpenCL call more than
 * one that never did (the kiln__cl table, counted). The trace's schema and nesting are checked
 * with a JSON parser by tests/test-profiler.py. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "lib/clcall.h"
#include "testutil.h"

static kiln_device *dev;

static void setup(void)
{
    setup_devices();
    dev = test_device();
}

static void teardown(void)
{
    teardown_devices();
}

enum { N = 1000 };

static const char *const scale_src =
    "__kernel void scale2(__global float *x, int n)\n"
    "{ int i = get_global_id(0); if (i < n) x[i] = 2.0f * x[i]; }\n";

/* The workload the cases profile: an add, a fused mul+add+relu chain, a matmul, three launches
 * of a user kernel and a read of N floats. */
static void workload(kiln_program *prog, float *out)
{
    float h[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 7) - 3.0f;
    int64_t shape[1] = {N}, sq[2] = {8, 8};
    kiln_tensor *a, *b, *c, *m, *d, *e, *x, *y;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, shape, h, &a));
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, shape, h, &b));
    ASSERT_OK(kiln_add(a, b, &c));
    ASSERT_OK(kiln_tensor_read(c, out, sizeof(float) * N)); /* the add runs alone */
    ASSERT_OK(kiln_mul(a, b, &m));
    ASSERT_OK(kiln_add(m, c, &d));
    ASSERT_OK(kiln_unary(KILN_UNARY_RELU, d, &e));
    ASSERT_OK(kiln_tensor_read(e, out, sizeof(float) * N)); /* mul+add+relu as one kernel */
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, sq, h, &x));
    ASSERT_OK(kiln_matmul(x, x, &y));
    size_t g = N;
    for (int i = 0; i < 3; i++) {
        kiln_arg args[2] = {kiln_arg_tensor(a), kiln_arg_i32(N)};
        ASSERT_OK(kiln_program_launch(prog, "scale2", 1, &g, NULL, 2, args));
    }
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_tensor *all[] = {a, b, c, m, d, e, x, y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        kiln_tensor_release(all[i]);
}

/* The table as text. */
static char *table_text(kiln_profiler_sort sort)
{
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    ASSERT_OK(kiln_profiler_table(f, sort));
    long n = ftell(f);
    rewind(f);
    char *s = calloc(1, (size_t)n + 1);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), n);
    fclose(f);
    return s;
}

typedef struct row {
    char name[128], phase[32], dev_ms[32], dev_mean[32], pct[32], host_ms[32], host_mean[32];
    long long calls, bytes;
} row;

/* The row of the table that starts at text, up to its newline: columns are parted by two
 * spaces or more (names hold single spaces). False for a line that is no row. */
static bool parse_row(const char *text, row *r)
{
    char line[512];
    size_t len = strcspn(text, "\n");
    snprintf(line, sizeof line, "%.*s", (int)len, text);
    char *col[16];
    int nc = 0;
    for (char *q = line; *q && nc < 16;) {
        while (*q == ' ')
            q++;
        if (!*q)
            break;
        col[nc++] = q;
        char *end = strstr(q, "  ");
        if (!end)
            break;
        *end = '\0';
        q = end + 2;
    }
    if (nc != 9 || strcmp(col[0], "Name") == 0)
        return false;
    {
        snprintf(r->name, sizeof r->name, "%s", col[0]);
        snprintf(r->phase, sizeof r->phase, "%s", col[1]);
        r->calls = atoll(col[2]);
        snprintf(r->dev_ms, sizeof r->dev_ms, "%s", col[3]);
        snprintf(r->dev_mean, sizeof r->dev_mean, "%s", col[4]);
        snprintf(r->pct, sizeof r->pct, "%s", col[5]);
        snprintf(r->host_ms, sizeof r->host_ms, "%s", col[6]);
        snprintf(r->host_mean, sizeof r->host_mean, "%s", col[7]);
        r->bytes = atoll(col[8]);
        return true;
    }
}

/* The table's row for name and phase ("-" for none, "(range)" for a range). */
static bool find_row(const char *table, const char *name, const char *phase, row *r)
{
    for (const char *p = table; *p; p += strcspn(p, "\n"), p += *p == '\n')
        if (parse_row(p, r) && strcmp(r->name, name) == 0 && strcmp(r->phase, phase) == 0)
            return true;
    return false;
}

#define ASSERT_ROW(table, name, phase, r)                                                          \
    ck_assert_msg(find_row((table), (name), (phase), (r)), "no row %s / %s in:\n%s", (name),       \
                  (phase), (table))

static kiln_program *build_scale(void)
{
    kiln_program *prog = NULL;
    ASSERT_OK(kiln_program_build(dev, scale_src, "", &prog));
    return prog;
}

START_TEST(test_table_rows)
{
    kiln_program *prog = build_scale();
    float out[N];
    workload(prog, out); /* every kernel built: the session sees launches only */
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_ALL));
    workload(prog, out);
    ASSERT_OK(kiln_profiler_stop());
    for (int i = 0; i < N; i++) { /* and the results are right while profiled */
        float v = (float)(i % 7) - 3.0f, want = v * v + 2 * v;
        ck_assert_float_eq(out[i], want > 0 ? want : 0);
    }
    char *t = table_text(KILN_PROFILER_SORT_DEVICE_TOTAL);
    row r;
    ASSERT_ROW(t, "add", "-", &r); /* the add alone: named by its op, not by the read */
    ck_assert_int_eq(r.calls, 1);
    ASSERT_ROW(t, "fused: mul+add+relu", "-", &r);
    ck_assert_int_eq(r.calls, 1);
    ASSERT_ROW(t, "scale2", "-", &r); /* a user kernel by its name */
    ck_assert_int_eq(r.calls, 3);
    /* Device times: a number for kernels of the timed queue, with a share of the total. */
    ck_assert_msg(strcmp(r.dev_ms, "-") != 0 && atof(r.dev_mean) >= 0 && strcmp(r.pct, "-") != 0,
                  "%s", t);
    ASSERT_ROW(t, "kiln_matmul", "-", &r);
    ck_assert_int_ge(r.calls, 1);
    /* The reads: 2 N floats to the host, by a copy or (unified memory) a map. */
    row rd = {0}, mp = {0};
    bool have_read = find_row(t, "memcpy DtoH", "-", &rd), have_map = find_row(t, "map", "-", &mp);
    ck_assert_msg(have_read || have_map, "%s", t);
    ck_assert_int_ge(rd.bytes + mp.bytes, 2 * (long long)sizeof(float) * N);
    ck_assert_ptr_nonnull(strstr(t, "Device time: "));
    ck_assert_ptr_null(strstr(t, "host only"));
    /* Sorted by device time: no row below has more than the one above (ties by name). */
    double last = 1e300;
    int rows = 0;
    for (const char *p = t; *p; p += strcspn(p, "\n"), p += *p == '\n') {
        row x;
        if (!parse_row(p, &x))
            continue;
        double v = strcmp(x.dev_ms, "-") == 0 ? 0 : atof(x.dev_ms);
        ck_assert_msg(v <= last, "%s", t);
        last = v;
        rows++;
    }
    ck_assert_int_ge(rows, 5);
    free(t);
    kiln_program_release(prog);
}
END_TEST

START_TEST(test_host_only)
{
    kiln_program *prog = build_scale();
    float out[N];
    workload(prog, out);
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_HOST));
    workload(prog, out);
    ASSERT_OK(kiln_profiler_stop());
    char *t = table_text(KILN_PROFILER_SORT_HOST_TOTAL);
    row r;
    ASSERT_ROW(t, "scale2", "-", &r);
    ck_assert_int_eq(r.calls, 3);
    ck_assert_str_eq(r.dev_ms, "-");
    ck_assert(atof(r.host_ms) > 0);
    ck_assert_ptr_nonnull(strstr(t, "host only"));
    free(t);
    kiln_program_release(prog);
}
END_TEST

/* A training step: forward, loss, backward, optimizer, each row under its phase. */
START_TEST(test_phases)
{
    kiln_module *lin;
    ASSERT_OK(kiln_linear_create(dev, KILN_F32, 4, 3, true, KILN_INIT_DEFAULT, 1, &lin));
    kiln_params *params;
    ASSERT_OK(kiln_params_create(&params));
    ASSERT_OK(kiln_module_params(lin, "", params));
    kiln_optimizer *opt;
    ASSERT_OK(kiln_sgd_create(params, 0.1, 0.0, 0.0, &opt));
    float xh[8] = {1, 2, 3, 4, 5, 6, 7, 8}, th[6] = {1, 0, 1, 0, 1, 0};
    int64_t xs[2] = {2, 4}, ts[2] = {2, 3};
    kiln_tensor *x, *target;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, xs, xh, &x));
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, ts, th, &target));
    for (int step = 0; step < 2; step++) {
        if (step == 1)
            ASSERT_OK(kiln_profiler_start(KILN_PROFILE_ALL));
        kiln_tensor *y, *loss;
        ASSERT_OK(kiln_module_forward(lin, x, &y));
        ASSERT_OK(kiln_mse_loss(y, target, &loss, NULL));
        ASSERT_OK(kiln_optimizer_zero_grad(opt));
        ASSERT_OK(kiln_backward(loss, NULL, 0));
        ASSERT_OK(kiln_optimizer_step(opt));
        ASSERT_OK(kiln_device_synchronize(dev));
        kiln_tensor_release(y);
        kiln_tensor_release(loss);
    }
    ASSERT_OK(kiln_profiler_stop());
    char *t = table_text(KILN_PROFILER_SORT_NAME);
    row r;
    ASSERT_ROW(t, "kiln_matmul", "forward", &r);
    ASSERT_ROW(t, "kiln_matmul", "backward", &r);
    ASSERT_ROW(t, "kiln_sgd_step", "optimizer", &r); /* the optimizer's kernel, by its op */
    free(t);
    kiln_tensor_release(x);
    kiln_tensor_release(target);
    kiln_optimizer_free(opt);
    kiln_params_free(params);
    kiln_module_free(lin);
}
END_TEST

typedef struct thread_arg {
    kiln_program *prog;
    int launches;
} thread_arg;

static void *ranged(void *p)
{
    thread_arg *a = p;
    kiln_tensor *x;
    int64_t shape[1] = {N};
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &x));
    ASSERT_OK(kiln_profiler_range_push("outer"));
    for (int i = 0; i < a->launches; i++) {
        ASSERT_OK(kiln_profiler_range_push("inner"));
        size_t g = N;
        kiln_arg args[2] = {kiln_arg_tensor(x), kiln_arg_i32(N)};
        ASSERT_OK(kiln_program_launch(a->prog, "scale2", 1, &g, NULL, 2, args));
        ASSERT_OK(kiln_profiler_range_pop());
    }
    ASSERT_OK(kiln_profiler_range_pop());
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_tensor_release(x);
    return NULL;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = calloc(1, (size_t)n + 1);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), n);
    fclose(f);
    return s;
}

/* The last session's trace as text, through a temporary file. */
static char *exported_trace(void)
{
    char path[] = "/tmp/kiln-profiler-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ASSERT_OK(kiln_profiler_export_trace(path));
    char *j = read_file(path);
    unlink(path);
    return j;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* Ranges on two threads at once, nested, each on its thread's track; the trace holds them. */
START_TEST(test_ranges_threads)
{
    kiln_program *prog = build_scale();
    thread_arg a = {prog, 2}, b = {prog, 3};
    ranged(&a); /* built; zeros' kernel too */
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_ALL));
    /* On two threads at once; on this one, one after the other, on Oclgrind, which crashes when
     * other threads enqueue (test-threads.c skips there too) */
    bool threads = !simulated(dev);
    if (threads) {
        pthread_t t1, t2;
        ck_assert_int_eq(pthread_create(&t1, NULL, ranged, &a), 0);
        ck_assert_int_eq(pthread_create(&t2, NULL, ranged, &b), 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
    } else {
        ranged(&a);
        ranged(&b);
    }
    ASSERT_OK(kiln_profiler_stop());
    char *t = table_text(KILN_PROFILER_SORT_COUNT);
    row r;
    ASSERT_ROW(t, "outer", "(range)", &r);
    ck_assert_int_eq(r.calls, 2);
    ASSERT_ROW(t, "inner", "(range)", &r);
    ck_assert_int_eq(r.calls, 5);
    ASSERT_ROW(t, "scale2", "-", &r);
    ck_assert_int_eq(r.calls, 5);
    free(t);
    char *j = exported_trace();
    ck_assert_ptr_nonnull(strstr(j, "\"traceEvents\""));
    ck_assert_int_eq(count(j, "\"name\":\"outer\""), 2);
    ck_assert_int_eq(count(j, "\"name\":\"inner\""), 5);
    /* each launch on the host track and (timed) on the device's */
    ck_assert_int_eq(count(j, "\"name\":\"scale2\""), 10);
    /* a track per thread that recorded, one for the device's queue */
    ck_assert_int_eq(count(j, "\"name\":\"thread_name\""), (threads ? 2 : 1) + 1);
    free(j);
    kiln_program_release(prog);
}
END_TEST

/* A second session forgets the first; a range open across the start is not recorded. */
START_TEST(test_second_session)
{
    kiln_program *prog = build_scale();
    float out[N];
    workload(prog, out);
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_ALL));
    workload(prog, out);
    ASSERT_OK(kiln_profiler_stop());
    ASSERT_OK(kiln_profiler_range_push("across"));
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_DEVICE));
    size_t g = N;
    kiln_tensor *x;
    int64_t shape[1] = {N};
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &x));
    kiln_arg args[2] = {kiln_arg_tensor(x), kiln_arg_i32(N)};
    ASSERT_OK(kiln_program_launch(prog, "scale2", 1, &g, NULL, 2, args));
    ASSERT_OK(kiln_profiler_range_pop());
    ASSERT_OK(kiln_profiler_stop());
    char *t = table_text(KILN_PROFILER_SORT_NAME);
    row r;
    ASSERT_ROW(t, "scale2", "-", &r);
    ck_assert_int_eq(r.calls, 1);
    ck_assert(!find_row(t, "add", "-", &r));
    ck_assert(!find_row(t, "across", "(range)", &r));
    free(t);
    /* The queue is the plain one again: work after stop runs and finishes. */
    ASSERT_OK(kiln_program_launch(prog, "scale2", 1, &g, NULL, 2, args));
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_tensor_release(x);
    kiln_program_release(prog);
}
END_TEST

/* More records than the profiler keeps events for at once (4096): the complete ones are read on
 * the way, and every launch still has its device time. */
START_TEST(test_many_records)
{
    if (simulated(dev)) { /* host-side logic; 5000 launches take minutes on Oclgrind */
        test_skip("many records: Oclgrind runs 5000 launches too slowly");
        return;
    }
    kiln_program *prog = build_scale();
    kiln_tensor *x;
    int64_t shape[1] = {64};
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &x));
    size_t g = 64;
    kiln_arg args[2] = {kiln_arg_tensor(x), kiln_arg_i32(64)};
    ASSERT_OK(kiln_program_launch(prog, "scale2", 1, &g, NULL, 2, args));
    enum { LAUNCHES = 5000 };
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_ALL));
    for (int i = 0; i < LAUNCHES; i++) {
        ASSERT_OK(kiln_program_launch(prog, "scale2", 1, &g, NULL, 2, args));
        if (i % 1000 == 999)
            ASSERT_OK(kiln_device_synchronize(dev));
    }
    ASSERT_OK(kiln_profiler_stop());
    char *t = table_text(KILN_PROFILER_SORT_COUNT);
    row r;
    ASSERT_ROW(t, "scale2", "-", &r);
    ck_assert_int_eq(r.calls, LAUNCHES);
    ck_assert_str_ne(r.dev_ms, "-");
    ck_assert_ptr_null(strstr(t, "dropped"));
    free(t);
    /* every launch on the device track of the trace */
    char *j = exported_trace();
    ck_assert_int_eq(count(j, "\"cat\":\"kernel\""), LAUNCHES);
    free(j);
    kiln_tensor_release(x);
    kiln_program_release(prog);
}
END_TEST

START_TEST(test_bad_calls)
{
    /* Before any session: nothing to show. */
    static bool first = true;
    if (first) {
        ASSERT_FAILS(kiln_profiler_table(stdout, KILN_PROFILER_SORT_NAME), KILN_ERR_STATE,
                     "kiln_profiler_table: nothing was profiled yet");
        ASSERT_FAILS(kiln_profiler_export_trace("/tmp/x.json"), KILN_ERR_STATE,
                     "kiln_profiler_export_trace");
        first = false;
    }
    ASSERT_FAILS(kiln_profiler_start(0), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_profiler_start: flags is 0x0");
    ASSERT_FAILS(kiln_profiler_start(8), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_profiler_start: flags is 0x8");
    ASSERT_FAILS(kiln_profiler_stop(), KILN_ERR_STATE, "kiln_profiler_stop: the profiler is not");
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_ALL));
    ASSERT_FAILS(kiln_profiler_start(KILN_PROFILE_ALL), KILN_ERR_STATE,
                 "kiln_profiler_start: the profiler runs already");
    ASSERT_FAILS(kiln_profiler_table(stdout, KILN_PROFILER_SORT_NAME), KILN_ERR_STATE,
                 "kiln_profiler_table: the profiler is running");
    ASSERT_FAILS(kiln_profiler_export_trace("/tmp/x.json"), KILN_ERR_STATE,
                 "kiln_profiler_export_trace: the profiler is running");
    ASSERT_OK(kiln_profiler_stop());
    ASSERT_FAILS(kiln_profiler_table(NULL, KILN_PROFILER_SORT_NAME), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_profiler_table: out is NULL");
    ASSERT_FAILS(kiln_profiler_table(stdout, (kiln_profiler_sort)9), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_profiler_table: sort is 9");
    ASSERT_FAILS(kiln_profiler_export_trace(NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_profiler_export_trace: path is NULL");
    ASSERT_FAILS(kiln_profiler_export_trace(""), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_profiler_export_trace: path is empty");
    ASSERT_FAILS(kiln_profiler_export_trace("/nonexistent-kiln-dir/t.json"), KILN_ERR_IO,
                 "/nonexistent-kiln-dir/t.json");
    ASSERT_FAILS(kiln_profiler_range_push(NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_profiler_range_push: name is NULL");
    ASSERT_FAILS(kiln_profiler_range_push(""), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_profiler_range_push: name is empty");
    ASSERT_FAILS(kiln_profiler_range_pop(), KILN_ERR_STATE,
                 "kiln_profiler_range_pop: no range is open");
    for (int i = 0; i < 64; i++)
        ASSERT_OK(kiln_profiler_range_push("deep"));
    ASSERT_FAILS(kiln_profiler_range_push("one too many"), KILN_ERR_STATE, "64 ranges are open");
    for (int i = 0; i < 64; i++)
        ASSERT_OK(kiln_profiler_range_pop());
}
END_TEST

/* ---- profiling off adds no OpenCL call ---- */

static long calls;
static struct kiln__cl_api saved;
#define COUNTED(ret, name, params, args)                                                           \
    static ret CL_API_CALL counted_##name params                                                   \
    {                                                                                              \
        calls++;                                                                                   \
        return saved.name args;                                                                    \
    }
COUNTED(cl_int, EnqueueNDRangeKernel,
        (cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o, const size_t *g,
         const size_t *l, cl_uint n, const cl_event *w, cl_event *e),
        (q, k, d, o, g, l, n, w, e))
COUNTED(cl_int, EnqueueReadBuffer,
        (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, void *p, cl_uint nw,
         const cl_event *w, cl_event *e),
        (q, m, b, o, n, p, nw, w, e))
COUNTED(cl_int, EnqueueWriteBuffer,
        (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, const void *p, cl_uint nw,
         const cl_event *w, cl_event *e),
        (q, m, b, o, n, p, nw, w, e))
COUNTED(void *, EnqueueMapBuffer,
        (cl_command_queue q, cl_mem m, cl_bool b, cl_map_flags f, size_t o, size_t n, cl_uint nw,
         const cl_event *w, cl_event *e, cl_int *err),
        (q, m, b, f, o, n, nw, w, e, err))
COUNTED(cl_int, EnqueueUnmapMemObject,
        (cl_command_queue q, cl_mem m, void *p, cl_uint nw, const cl_event *w, cl_event *e),
        (q, m, p, nw, w, e))
COUNTED(cl_int, Finish, (cl_command_queue q), (q))
COUNTED(cl_int, RetainEvent, (cl_event e), (e))
COUNTED(cl_int, ReleaseEvent, (cl_event e), (e))
COUNTED(cl_int, GetEventInfo, (cl_event e, cl_event_info i, size_t n, void *v, size_t *r),
        (e, i, n, v, r))
COUNTED(cl_int, GetEventProfilingInfo,
        (cl_event e, cl_profiling_info i, size_t n, void *v, size_t *r), (e, i, n, v, r))
COUNTED(cl_command_queue, CreateCommandQueue,
        (cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *err), (c, d, p, err))
COUNTED(cl_int, SetKernelArg, (cl_kernel k, cl_uint i, size_t n, const void *v), (k, i, n, v))

static void count_calls(void)
{
    saved = kiln__cl;
    kiln__cl.EnqueueNDRangeKernel = counted_EnqueueNDRangeKernel;
    kiln__cl.EnqueueReadBuffer = counted_EnqueueReadBuffer;
    kiln__cl.EnqueueWriteBuffer = counted_EnqueueWriteBuffer;
    kiln__cl.EnqueueMapBuffer = counted_EnqueueMapBuffer;
    kiln__cl.EnqueueUnmapMemObject = counted_EnqueueUnmapMemObject;
    kiln__cl.Finish = counted_Finish;
    kiln__cl.RetainEvent = counted_RetainEvent;
    kiln__cl.ReleaseEvent = counted_ReleaseEvent;
    kiln__cl.GetEventInfo = counted_GetEventInfo;
    kiln__cl.GetEventProfilingInfo = counted_GetEventProfilingInfo;
    kiln__cl.CreateCommandQueue = counted_CreateCommandQueue;
    kiln__cl.SetKernelArg = counted_SetKernelArg;
}

START_TEST(test_off_adds_no_calls)
{
    kiln_program *prog = build_scale();
    float out[N];
    workload(prog, out);
    workload(prog, out); /* steady: pools, staging, kernels */
    count_calls();
    calls = 0;
    workload(prog, out);
    long never = calls;
    kiln__cl_reset();
    ASSERT_OK(kiln_profiler_start(KILN_PROFILE_ALL));
    count_calls(); /* under the profiler's functions: what it adds is counted */
    calls = 0;
    workload(prog, out);
    long on = calls;
    kiln__cl = saved;
    ASSERT_OK(kiln_profiler_stop());
    kiln__cl_reset();
    workload(prog, out);
    count_calls();
    calls = 0;
    workload(prog, out);
    long after = calls;
    kiln__cl_reset();
    ck_assert_int_gt(never, 0);
    ck_assert_int_eq(after, never);
    /* While on, the profiler's own calls are there (events retained, the timed queue's first
     * use): the counters see them. */
    ck_assert_int_ge(on, never);
    kiln_program_release(prog);
}
END_TEST

Suite *profiler_suite(void)
{
    Suite *s = suite_create("profiler");
    TCase *tc = tcase_create("profiler");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_bad_calls);
    tcase_add_test(tc, test_table_rows);
    tcase_add_test(tc, test_host_only);
    tcase_add_test(tc, test_phases);
    tcase_add_test(tc, test_ranges_threads);
    tcase_add_test(tc, test_second_session);
    tcase_add_test(tc, test_off_adds_no_calls);
    tcase_add_test(tc, test_many_records);
    suite_add_tcase(s, tc);
    return s;
}
