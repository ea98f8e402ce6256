/* test-sweep.c - fault-injection sweep (issue 10). A workload runs once to count its OpenCL calls
 * (every entry of the kiln__cl table, wrapped) and its host allocations (lib/alloc.h), then once
 * per index N with call N failing. Every such run must fail with a status and a message, or
 * succeed with correct results where kiln tolerates that failure on purpose (an optional device
 * query); leave no OpenCL object alive (counted by the wrappers: creates and retains against
 * releases) and no host memory (LeakSanitizer at exit); and a clean run must follow on the same
 * devices.
 *
 * The injected OpenCL error is CL_OUT_OF_HOST_MEMORY: it never means a lost device, so every
 * run keeps its devices. CL_OUT_OF_RESOURCES at a queue operation loses the device by design
 * (issue 9); the `lost` case injects it at every call of the main workload and checks that the
 * result is out of memory (an allocation) or device lost, sticky until the test clears the mark.
 * A failing release (clRelease*) still drops its reference: kiln cannot retry it.
 *
 * Workloads: `enumerate` (registry reset, enumeration, first queue, a tiny tensor) and `main`
 * (allocate, write, read, to() across devices, a user program built cold and warm, launches,
 * elementwise, matmul on each available path). Built-in programs are released after each run,
 * so that each run loads them again through the disk cache. SWEEP_STRIDE=k injects at every
 * k-th index only; without it, the full tier (KILN_TEST_FULL=1) injects at every index and the
 * default tier at every 3rd. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "lib/alloc.h"
#include "lib/clcall.h"
#include "lib/program.h"
#include "lib/registry.h"
#include "lib/status.h"
#include "testutil.h"

/* ---- the wrapped table ------------------------------------------------------------------- */

static struct kiln__cl_api real;
static atomic_long calls;         /* OpenCL calls since counting started */
static long fail_at;              /* 1-based index of the call that fails; 0: none */
static cl_int inject_err;         /* what it returns */
static const char *names[100000]; /* the name of each call, while recording */
static bool recording;
static const char *injected_name; /* the call that failed */

enum { LIVE_CTX, LIVE_QUEUE, LIVE_MEM, LIVE_EVENT, LIVE_PROGRAM, LIVE_KERNEL, LIVE_KINDS };
static const char *const live_names[LIVE_KINDS] = {"context", "queue",   "buffer",
                                                   "event",   "program", "kernel"};
static atomic_long live[LIVE_KINDS];

static bool inject(const char *name)
{
    long n = atomic_fetch_add(&calls, 1) + 1;
    if (recording && n <= (long)(sizeof names / sizeof names[0]))
        names[n - 1] = name;
    if (n != fail_at)
        return false;
    injected_name = name;
    return true;
}

static void track(int kind, const void *obj, long delta)
{
    if (obj)
        atomic_fetch_add(&live[kind], delta);
}

/* Events are counted by identity: CLBlast creates events outside the table that kiln then
 * releases through it, and those must not count. */
#define MAX_EVENTS 4096
static struct {
    cl_event ev;
    long refs;
} events[MAX_EVENTS];
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;

static void event_ref(cl_event ev, long delta, bool create)
{
    if (!ev)
        return;
    pthread_mutex_lock(&events_lock);
    int i = 0, free_slot = -1;
    while (i < MAX_EVENTS && events[i].ev != ev) {
        if (free_slot < 0 && !events[i].ev)
            free_slot = i;
        i++;
    }
    if (i == MAX_EVENTS && (create || delta > 0) && free_slot >= 0) {
        i = free_slot;
        events[i].ev = ev;
        events[i].refs = 0;
        atomic_fetch_add(&live[LIVE_EVENT], 1);
    }
    if (i < MAX_EVENTS && (events[i].refs += delta) <= 0) {
        events[i].ev = NULL;
        atomic_fetch_sub(&live[LIVE_EVENT], 1);
    }
    pthread_mutex_unlock(&events_lock);
}

static void track_event(const cl_event *ev, cl_int err)
{
    if (ev && err == CL_SUCCESS)
        event_ref(*ev, 1, true);
}

/* A call returning cl_int. */
#define W_INT(name, params, args)                                                                  \
    static cl_int CL_API_CALL w_##name params                                                      \
    {                                                                                              \
        if (inject(#name))                                                                         \
            return inject_err;                                                                     \
        return real.name args;                                                                     \
    }

/* An enqueue that may return an event (its last argument, ev). */
#define W_ENQ(name, params, args)                                                                  \
    static cl_int CL_API_CALL w_##name params                                                      \
    {                                                                                              \
        if (inject(#name))                                                                         \
            return inject_err;                                                                     \
        cl_int err = real.name args;                                                               \
        track_event(ev, err);                                                                      \
        return err;                                                                                \
    }

/* A create returning an object, with the error in e. */
#define W_CREATE(type, name, kind, params, args)                                                   \
    static type CL_API_CALL w_##name params                                                        \
    {                                                                                              \
        if (inject(#name)) {                                                                       \
            if (e)                                                                                 \
                *e = inject_err;                                                                   \
            return NULL;                                                                           \
        }                                                                                          \
        type r = real.name args;                                                                   \
        track(kind, r, 1);                                                                         \
        return r;                                                                                  \
    }

/* A retain or release: an injected failure still does the real call. */
#define W_REF(type, name, kind, delta)                                                             \
    static cl_int CL_API_CALL w_##name(type o)                                                     \
    {                                                                                              \
        bool fail = inject(#name);                                                                 \
        cl_int err = real.name(o);                                                                 \
        if (err == CL_SUCCESS)                                                                     \
            track(kind, o, delta);                                                                 \
        return fail ? inject_err : err;                                                            \
    }

W_INT(GetPlatformIDs, (cl_uint n, cl_platform_id *p, cl_uint *np), (n, p, np))
W_INT(GetPlatformInfo, (cl_platform_id p, cl_platform_info w, size_t n, void *v, size_t *r),
      (p, w, n, v, r))
W_INT(GetDeviceIDs, (cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *d, cl_uint *r),
      (p, t, n, d, r))
W_INT(GetDeviceInfo, (cl_device_id d, cl_device_info w, size_t n, void *v, size_t *r),
      (d, w, n, v, r))
W_CREATE(cl_context, CreateContext, LIVE_CTX,
         (const cl_context_properties *p, cl_uint n, const cl_device_id *d,
          void(CL_CALLBACK *cb)(const char *, const void *, size_t, void *), void *u, cl_int *e),
         (p, n, d, cb, u, e))
W_REF(cl_context, ReleaseContext, LIVE_CTX, -1)
W_CREATE(cl_command_queue, CreateCommandQueue, LIVE_QUEUE,
         (cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *e), (c, d, p, e))
W_REF(cl_command_queue, ReleaseCommandQueue, LIVE_QUEUE, -1)
W_CREATE(cl_mem, CreateBuffer, LIVE_MEM,
         (cl_context c, cl_mem_flags f, size_t n, void *p, cl_int *e), (c, f, n, p, e))
W_REF(cl_mem, RetainMemObject, LIVE_MEM, 1)
W_REF(cl_mem, ReleaseMemObject, LIVE_MEM, -1)
W_INT(GetMemObjectInfo, (cl_mem m, cl_mem_info w, size_t n, void *v, size_t *r), (m, w, n, v, r))
W_INT(SetMemObjectDestructorCallback, (cl_mem m, void(CL_CALLBACK *cb)(cl_mem, void *), void *u),
      (m, cb, u))
W_ENQ(EnqueueReadBuffer,
      (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, void *p, cl_uint ne,
       const cl_event *w, cl_event *ev),
      (q, m, b, o, n, p, ne, w, ev))
W_ENQ(EnqueueWriteBuffer,
      (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, const void *p, cl_uint ne,
       const cl_event *w, cl_event *ev),
      (q, m, b, o, n, p, ne, w, ev))
W_ENQ(EnqueueCopyBuffer,
      (cl_command_queue q, cl_mem s, cl_mem d, size_t so, size_t dof, size_t n, cl_uint ne,
       const cl_event *w, cl_event *ev),
      (q, s, d, so, dof, n, ne, w, ev))
W_ENQ(EnqueueFillBuffer,
      (cl_command_queue q, cl_mem m, const void *p, size_t ps, size_t o, size_t n, cl_uint ne,
       const cl_event *w, cl_event *ev),
      (q, m, p, ps, o, n, ne, w, ev))

static void *CL_API_CALL w_EnqueueMapBuffer(cl_command_queue q, cl_mem m, cl_bool b, cl_map_flags f,
                                            size_t o, size_t n, cl_uint ne, const cl_event *w,
                                            cl_event *ev, cl_int *e)
{
    if (inject("EnqueueMapBuffer")) {
        if (e)
            *e = inject_err;
        return NULL;
    }
    cl_int err = CL_SUCCESS;
    void *r = real.EnqueueMapBuffer(q, m, b, f, o, n, ne, w, ev, &err);
    track_event(ev, err);
    if (e)
        *e = err;
    return r;
}

W_ENQ(EnqueueUnmapMemObject,
      (cl_command_queue q, cl_mem m, void *p, cl_uint ne, const cl_event *w, cl_event *ev),
      (q, m, p, ne, w, ev))
W_ENQ(EnqueueMarkerWithWaitList, (cl_command_queue q, cl_uint ne, const cl_event *w, cl_event *ev),
      (q, ne, w, ev))
W_ENQ(EnqueueBarrierWithWaitList, (cl_command_queue q, cl_uint ne, const cl_event *w, cl_event *ev),
      (q, ne, w, ev))
W_INT(Finish, (cl_command_queue q), (q))
W_INT(Flush, (cl_command_queue q), (q))
W_INT(WaitForEvents, (cl_uint n, const cl_event *e), (n, e))
static cl_int CL_API_CALL w_RetainEvent(cl_event o)
{
    bool fail = inject("RetainEvent");
    cl_int err = real.RetainEvent(o);
    if (err == CL_SUCCESS)
        event_ref(o, 1, false);
    return fail ? inject_err : err;
}

static cl_int CL_API_CALL w_ReleaseEvent(cl_event o)
{
    bool fail = inject("ReleaseEvent");
    cl_int err = real.ReleaseEvent(o);
    if (err == CL_SUCCESS)
        event_ref(o, -1, false);
    return fail ? inject_err : err;
}
W_INT(GetEventInfo, (cl_event e, cl_event_info w, size_t n, void *v, size_t *r), (e, w, n, v, r))
W_INT(GetCommandQueueInfo,
      (cl_command_queue q, cl_command_queue_info w, size_t n, void *v, size_t *r), (q, w, n, v, r))
W_INT(GetEventProfilingInfo, (cl_event e, cl_profiling_info w, size_t n, void *v, size_t *r),
      (e, w, n, v, r))
W_INT(SetEventCallback,
      (cl_event e, cl_int t, void(CL_CALLBACK *cb)(cl_event, cl_int, void *), void *u),
      (e, t, cb, u))
static cl_event CL_API_CALL w_CreateUserEvent(cl_context c, cl_int *e)
{
    if (inject("CreateUserEvent")) {
        if (e)
            *e = inject_err;
        return NULL;
    }
    cl_event r = real.CreateUserEvent(c, e);
    event_ref(r, 1, true);
    return r;
}
W_INT(SetUserEventStatus, (cl_event e, cl_int s), (e, s))
W_CREATE(cl_program, CreateProgramWithSource, LIVE_PROGRAM,
         (cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *e), (c, n, s, l, e))
W_CREATE(cl_program, CreateProgramWithBinary, LIVE_PROGRAM,
         (cl_context c, cl_uint n, const cl_device_id *d, const size_t *l, const unsigned char **b,
          cl_int *bs, cl_int *e),
         (c, n, d, l, b, bs, e))
W_INT(BuildProgram,
      (cl_program p, cl_uint n, const cl_device_id *d, const char *o,
       void(CL_CALLBACK *cb)(cl_program, void *), void *u),
      (p, n, d, o, cb, u))
W_INT(GetProgramInfo, (cl_program p, cl_program_info w, size_t n, void *v, size_t *r),
      (p, w, n, v, r))
W_INT(GetProgramBuildInfo,
      (cl_program p, cl_device_id d, cl_program_build_info w, size_t n, void *v, size_t *r),
      (p, d, w, n, v, r))
W_REF(cl_program, ReleaseProgram, LIVE_PROGRAM, -1)
W_CREATE(cl_kernel, CreateKernel, LIVE_KERNEL, (cl_program p, const char *n, cl_int *e), (p, n, e))
W_INT(GetKernelInfo, (cl_kernel k, cl_kernel_info w, size_t n, void *v, size_t *r), (k, w, n, v, r))
W_INT(GetKernelArgInfo,
      (cl_kernel k, cl_uint i, cl_kernel_arg_info w, size_t n, void *v, size_t *r),
      (k, i, w, n, v, r))
W_INT(GetKernelWorkGroupInfo,
      (cl_kernel k, cl_device_id d, cl_kernel_work_group_info w, size_t n, void *v, size_t *r),
      (k, d, w, n, v, r))
W_INT(SetKernelArg, (cl_kernel k, cl_uint i, size_t n, const void *v), (k, i, n, v))
W_REF(cl_kernel, ReleaseKernel, LIVE_KERNEL, -1)
W_ENQ(EnqueueNDRangeKernel,
      (cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o, const size_t *g,
       const size_t *l, cl_uint ne, const cl_event *w, cl_event *ev),
      (q, k, d, o, g, l, ne, w, ev))
W_ENQ(EnqueueNativeKernel,
      (cl_command_queue q, void(CL_CALLBACK *fn)(void *), void *a, size_t n, cl_uint nm,
       const cl_mem *m, const void **ml, cl_uint ne, const cl_event *w, cl_event *ev),
      (q, fn, a, n, nm, m, ml, ne, w, ev))

/* Every entry of the table, wrapped (an entry added to clcall.h without a wrapper here does not
 * compile). */
static const struct kiln__cl_api wrapped = {
#define W_ENTRY(ret, name, args) .name = w_##name,
    KILN__CL_FUNCS(W_ENTRY)
#undef W_ENTRY
};

static void wrap(void)
{
    real = kiln__cl;
    kiln__cl = wrapped;
}

static long live_total(void)
{
    long n = 0;
    for (int i = 0; i < LIVE_KINDS; i++)
        n += atomic_load(&live[i]);
    return n;
}

static void live_describe(char *buf, size_t size)
{
    buf[0] = '\0';
    for (int i = 0; i < LIVE_KINDS; i++) {
        long n = atomic_load(&live[i]);
        if (n) {
            size_t used = strlen(buf);
            snprintf(buf + used, size - used, " %s %+ld", live_names[i], n);
        }
    }
}

/* ---- workloads --------------------------------------------------------------------------------
 */

#define N 4 /* tensors are N x N f32 */

static int run_id; /* with the pid, makes each run's cold program a new source */

/* The first failure of a workload: its status. The message stays in kiln_last_error(). */
#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if (s == KILN_OK)                                                                          \
            s = (expr);                                                                            \
    } while (0)

/* Results checked against the host: a successful run must also be a correct one. */
static bool close_to(const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++) {
        float d = got[i] - want[i];
        if (d > 1e-4f || d < -1e-4f)
            return false;
    }
    return true;
}

static bool wrong_result;

#define CHECK_RESULT(got, want)                                                                    \
    do {                                                                                           \
        if (s == KILN_OK && !close_to((got), (want), N * N)) {                                     \
            wrong_result = true;                                                                   \
            if (getenv("SWEEP_VERBOSE"))                                                           \
                printf("wrong result at line %d\n", __LINE__);                                     \
        }                                                                                          \
    } while (0)

static int expected_devices; /* what enumeration finds when nothing fails */

static kiln_status workload_enumerate(void)
{
    kiln_device *dev = NULL;
    kiln_tensor *t = NULL;
    float host[N] = {1, 1, 1, 1}, want[N] = {0};
    const int64_t shape[1] = {N};
    kiln_status s = kiln_device_get("auto", &dev);
    /* a device left out after a failed query must be explained in the notes */
    if (s == KILN_OK && kiln_device_count(KILN_DEVICE_ALL) < expected_devices &&
        !*kiln_device_notes())
        wrong_result = true;
    TRY(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &t));
    TRY(kiln_tensor_read(t, host, sizeof host));
    if (s == KILN_OK && !close_to(host, want, N))
        wrong_result = true;
    kiln_tensor_release(t);
    if (dev && s == KILN_OK)
        s = kiln_device_synchronize(dev);
    return s;
}

static const char warm_source[] = "__kernel void axpy(__global float *y, __global const float *x,"
                                  " float a)\n"
                                  "{\n"
                                  "    size_t i = get_global_id(0);\n"
                                  "    y[i] += a * x[i];\n"
                                  "}\n";

static const char *const matmul_paths[] = {"clblast", "cblas", "builtin"};

static kiln_status workload_main(void)
{
    kiln_device *dev = devs[0], *dev2 = ndevs > 1 ? devs[1] : devs[0];
    kiln_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *m = NULL;
    kiln_program *cold = NULL, *warm = NULL;
    const int64_t shape[2] = {N, N};
    float x[N * N], y[N * N], got[N * N], want[N * N];
    for (int i = 0; i < N * N; i++) {
        x[i] = (float)(i % 7) - 3.0f;
        y[i] = (float)(i % 5) * 0.5f;
    }
    char cold_source[256];
    snprintf(cold_source, sizeof cold_source,
             "/* process %ld, run %d */ __kernel void twice(__global float *x)\n"
             "{\n"
             "    x[get_global_id(0)] *= 2.0f;\n"
             "}\n",
             (long)getpid(), run_id++);
    kiln_status s = KILN_OK;
    TRY(kiln_tensor_from_host(dev, KILN_F32, 2, shape, x, &a));
    TRY(kiln_tensor_empty(dev, KILN_F32, 2, shape, &b));
    TRY(kiln_tensor_write(b, y, sizeof y));
    TRY(kiln_tensor_read(a, got, sizeof got));
    CHECK_RESULT(got, x);
    /* mapped */
    void *ptr = NULL;
    TRY(kiln_tensor_map(a, KILN_MAP_READ, &ptr));
    if (s == KILN_OK) {
        memcpy(got, ptr, sizeof got);
        s = kiln_tensor_unmap(a);
        CHECK_RESULT(got, x);
    }
    /* across devices and back (to() on the same device may give the same storage: a stays) */
    TRY(kiln_tensor_clone(a, &e));
    TRY(kiln_tensor_to(e, dev2, &c));
    TRY(kiln_tensor_to(c, dev, &d));
    TRY(kiln_tensor_read(d, got, sizeof got));
    CHECK_RESULT(got, x);
    /* user programs: cold (a new source) and warm (in the disk cache since the first run) */
    TRY(kiln_program_build(dev, cold_source, NULL, &cold));
    TRY(kiln_program_build(dev, warm_source, NULL, &warm));
    size_t global = N * N;
    kiln_arg twice_args[1] = {kiln_arg_tensor(d)};
    TRY(kiln_program_launch(cold, "twice", 1, &global, NULL, 1, twice_args));
    kiln_arg axpy_args[3] = {kiln_arg_tensor(d), kiln_arg_tensor(b), kiln_arg_f32(3.0f)};
    TRY(kiln_program_launch(warm, "axpy", 1, &global, NULL, 3, axpy_args));
    TRY(kiln_tensor_read(d, got, sizeof got));
    for (int i = 0; i < N * N; i++)
        want[i] = 2.0f * x[i] + 3.0f * y[i];
    CHECK_RESULT(got, want);
    /* a built-in op */
    kiln_tensor_release(c);
    c = NULL;
    TRY(kiln_add(a, b, &c));
    TRY(kiln_tensor_read(c, got, sizeof got));
    for (int i = 0; i < N * N; i++)
        want[i] = x[i] + y[i];
    CHECK_RESULT(got, want);
    /* matmul on every path this build and device have */
    for (int i = 0; i < N * N; i++) {
        want[i] = 0;
        for (int k = 0; k < N; k++)
            want[i] += x[i / N * N + k] * y[k * N + i % N];
    }
    for (int p = 0; p < 3 && s == KILN_OK; p++) {
        setenv("KILN_MATMUL", matmul_paths[p], 1);
        const char *path = kiln_matmul_path(dev);
        if (!path)
            continue; /* not available here */
        TRY(kiln_matmul(a, b, &m));
        TRY(kiln_tensor_read(m, got, sizeof got));
        CHECK_RESULT(got, want);
        kiln_tensor_release(m);
        m = NULL;
    }
    unsetenv("KILN_MATMUL");
    /* whatever failed, the queues must drain before the objects go */
    for (int i = 0; i < ndevs; i++) {
        kiln_status s2 = kiln_device_synchronize(devs[i]);
        if (s == KILN_OK)
            s = s2;
    }
    kiln_program_release(cold);
    kiln_program_release(warm);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
    kiln_tensor_release(d);
    kiln_tensor_release(e);
    kiln_tensor_release(m);
    return s;
}

/* f16 and mixed precision (issue 25): f16 matmuls on the paths that take them (cblas makes f32
 * copies on the host), and a training step through the gradient scaler. */
static kiln_status workload_half(void)
{
    kiln_device *dev = devs[0];
    const int64_t shape[2] = {N, N};
    float x[N * N], y[N * N], got[N * N], want[N * N];
    for (int i = 0; i < N * N; i++) {
        x[i] = (float)(i % 7) - 3.0f;
        y[i] = (float)(i % 5) * 0.5f;
    }
    kiln_status s = KILN_OK;
    kiln_tensor *a = NULL, *b = NULL, *ha = NULL, *hb = NULL;
    TRY(kiln_tensor_from_host(dev, KILN_F32, 2, shape, x, &a));
    TRY(kiln_tensor_from_host(dev, KILN_F32, 2, shape, y, &b));
    TRY(kiln_cast(a, KILN_F16, &ha));
    TRY(kiln_cast(b, KILN_F16, &hb));
    for (int i = 0; i < N * N; i++) {
        want[i] = 0;
        for (int k = 0; k < N; k++)
            want[i] += x[i / N * N + k] * y[k * N + i % N];
    }
    /* exact in f16 here: small integers and halves; CLBlast forced refuses f16 */
    for (int p = 1; p < 3 && s == KILN_OK; p++) {
        setenv("KILN_MATMUL", matmul_paths[p], 1);
        if (!kiln_matmul_path(dev))
            continue; /* not available here */
        kiln_tensor *hm = NULL, *fm = NULL;
        TRY(kiln_matmul(ha, hb, &hm));
        TRY(kiln_cast(hm, KILN_F32, &fm));
        TRY(kiln_tensor_read(fm, got, sizeof got));
        CHECK_RESULT(got, want);
        kiln_tensor_release(hm);
        kiln_tensor_release(fm);
    }
    unsetenv("KILN_MATMUL");
    /* p -= 0.5 * x through the scaler (2^10, unscaled exactly) */
    kiln_tensor *p = NULL, *px = NULL, *loss = NULL, *scaled = NULL;
    kiln_params *ps = NULL;
    kiln_optimizer *opt = NULL;
    kiln_grad_scaler *gs = NULL;
    TRY(kiln_tensor_from_host(dev, KILN_F32, 2, shape, y, &p));
    TRY(kiln_tensor_set_requires_grad(p, true));
    TRY(kiln_params_create(&ps));
    TRY(kiln_params_add(ps, "p", p));
    TRY(kiln_sgd_create(ps, 0.5, 0, 0, &opt));
    TRY(kiln_grad_scaler_create(&(kiln_grad_scaler_options){.init_scale = 1024}, &gs));
    TRY(kiln_mul(p, a, &px));
    TRY(kiln_reduce(KILN_REDUCE_SUM, px, KILN_ALL_AXES, false, &loss));
    TRY(kiln_grad_scaler_scale(gs, loss, &scaled));
    TRY(kiln_backward(scaled, NULL, 0));
    TRY(kiln_grad_scaler_step(gs, opt, NULL));
    TRY(kiln_grad_scaler_update(gs));
    TRY(kiln_tensor_read(p, got, sizeof got));
    for (int i = 0; i < N * N; i++)
        want[i] = y[i] - 0.5f * x[i];
    CHECK_RESULT(got, want);
    kiln_status s2 = kiln_device_synchronize(dev);
    if (s == KILN_OK)
        s = s2;
    kiln_grad_scaler_free(gs);
    kiln_optimizer_free(opt);
    kiln_params_free(ps);
    kiln_tensor *ts[] = {a, b, ha, hb, p, px, loss, scaled};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        kiln_tensor_release(ts[i]);
    return s;
}

/* ---- the sweep ----------------------------------------------------------------------------------
 */

typedef kiln_status (*workload_fn)(void);

typedef enum { CL_SWEEP, MALLOC_SWEEP } sweep_kind;

static bool enumerate_mode;

/* Drop what a run leaves cached (built-in programs, the pool; for the enumerate workload, the
 * whole registry), so that every run makes the same calls and the live count can be read. */
static void drop_caches(void)
{
    if (enumerate_mode) {
        kiln__registry_reset();
        return;
    }
    for (int i = 0; i < ndevs; i++) {
        kiln__device_clear_lost(devs[i]);
        ck_assert_int_eq(kiln_device_synchronize(devs[i]), KILN_OK);
        kiln__programs_free(devs[i]);
        ck_assert_int_eq(kiln_device_empty_cache(devs[i]), KILN_OK);
    }
}

/* After the last run: drop the device-held objects too, for the live count. */
static void after_runs(void)
{
    kiln__registry_reset();
    setup_devices();
}

/* Run the workload with nothing injected; it must succeed with correct results. */
static void clean_run(workload_fn work, const char *after)
{
    drop_caches();
    wrong_result = false;
    kiln_status s = work();
    ck_assert_msg(s == KILN_OK, "a clean run after %s failed: %s: %s", after, kiln_status_string(s),
                  kiln_last_error());
    ck_assert_msg(!wrong_result, "a clean run after %s gave wrong results", after);
}

static long allocs; /* host allocations of the last run */

/* One run with injection point n (0: none), counting from the start of the workload. */
static kiln_status run_at(workload_fn work, sweep_kind kind, long n)
{
    drop_caches();
    wrong_result = false;
    injected_name = NULL;
    kiln__error(KILN_OK, "%s", ""); /* the run's message is its own */
    if (kind == CL_SWEEP) {
        atomic_store(&calls, 0);
        fail_at = n;
    } else {
        kiln__alloc_fail_at(n);
    }
    kiln_status s = work();
    fail_at = 0;
    allocs = kiln__alloc_count();
    kiln__alloc_fail_at(-1);
    return s;
}

typedef struct sweep_result {
    long points;    /* injection points: every call index of the workload */
    long failed;    /* runs that failed with a status and a message */
    long tolerated; /* runs that succeeded, correctly, despite the failure */
    long lost;      /* (CL_OUT_OF_RESOURCES sweep) runs that lost a device */
} sweep_result;

/* SWEEP_STRIDE, else every index in the full tier (CI) and every `quick`-th in the default one. */
static long stride(long quick)
{
    const char *e = getenv("SWEEP_STRIDE");
    long k = e ? strtol(e, NULL, 10) : test_size(quick, 1);
    return k > 0 ? k : 1;
}

/* The default tier's stride of the next sweep (3; the half workload's 9). */
static long quick_stride = 3;

static sweep_result sweep(const char *label, workload_fn work, sweep_kind kind, cl_int err)
{
    sweep_result r = {0};
    inject_err = err;
    clean_run(work, "warm-up"); /* fills the disk cache (the warm program, the built-ins) */
    drop_caches();
    long base = live_total();
    /* count */
    recording = true;
    kiln_status s = run_at(work, kind, 0);
    recording = false;
    ck_assert_msg(s == KILN_OK, "%s: the counting run failed: %s", label, kiln_last_error());
    long total = kind == CL_SWEEP ? atomic_load(&calls) : allocs;
    ck_assert_int_gt(total, 0);
    char tolerated_calls[2048] = "";
    for (long n = 1; n <= total; n += stride(quick_stride)) {
        s = run_at(work, kind, n);
        const char *what = kind == CL_SWEEP ? (injected_name ? injected_name : "?") : "malloc";
        char where[160];
        snprintf(where, sizeof where, "%s: %s #%ld of %ld (%s)", label, what, n, total,
                 kind == CL_SWEEP && n <= (long)(sizeof names / sizeof names[0]) ? names[n - 1]
                                                                                 : "");
        if (kind == CL_SWEEP)
            ck_assert_msg(injected_name, "%s: the run made fewer calls than the counting run",
                          where);
        r.points++;
        if (s == KILN_OK) {
            ck_assert_msg(!wrong_result, "%s: succeeded with wrong results", where);
            r.tolerated++;
            if (kind == CL_SWEEP && !strstr(tolerated_calls, what) &&
                strlen(tolerated_calls) + strlen(what) + 2 < sizeof tolerated_calls) {
                strcat(tolerated_calls, " ");
                strcat(tolerated_calls, what);
            }
        } else {
            const char *msg = kiln_last_error();
            ck_assert_msg(msg && *msg, "%s: %s without a message", where, kiln_status_string(s));
            if (err == CL_OUT_OF_RESOURCES && s == KILN_ERR_DEVICE_LOST) {
                /* sticky: the device stays lost until the test clears the mark */
                bool sticky = false;
                for (int i = 0; i < ndevs; i++)
                    sticky |= kiln_device_synchronize(devs[i]) == KILN_ERR_DEVICE_LOST;
                ck_assert_msg(sticky, "%s: device lost, but no device says so afterwards", where);
                r.lost++;
            } else if (err == CL_OUT_OF_RESOURCES) {
                ck_assert_msg(s == KILN_ERR_OUT_OF_MEMORY,
                              "%s: %s (%s), expected out of memory "
                              "or device lost",
                              where, kiln_status_string(s), msg);
            }
            r.failed++;
        }
        if (getenv("SWEEP_VERBOSE"))
            printf("%s: %s: %s\n", where, kiln_status_string(s), kiln_last_error());
        /* nothing left alive by the run, once the caches are dropped */
        drop_caches();
        long left = live_total() - base;
        char objs[256];
        live_describe(objs, sizeof objs);
        ck_assert_msg(left == 0, "%s: %ld OpenCL object(s) left:%s", where, left, objs);
        clean_run(work, where);
    }
    after_runs();
    printf("sweep %s: %ld injection points (%ld calls), %ld failed with a status and message, "
           "%ld tolerated (%s), %ld lost a device\n",
           label, r.points, total, r.failed, r.tolerated,
           *tolerated_calls ? tolerated_calls + 1 : "-", r.lost);
    fflush(stdout);
    return r;
}

/* ---- cases ---------------------------------------------------------------------------------- */

static void setup(void)
{
    setup_devices();
    wrap();
}

static void teardown(void)
{
    kiln__cl_reset();
    enumerate_mode = false;
    quick_stride = 3;
}

START_TEST(enumerate_cl)
{
    enumerate_mode = true;
    expected_devices = ndevs;
    sweep_result r = sweep("enumerate/opencl", workload_enumerate, CL_SWEEP, CL_OUT_OF_HOST_MEMORY);
    ck_assert_int_gt(r.failed, 0);
}
END_TEST

START_TEST(enumerate_malloc)
{
    enumerate_mode = true;
    expected_devices = ndevs;
    sweep_result r = sweep("enumerate/malloc", workload_enumerate, MALLOC_SWEEP, CL_SUCCESS);
    ck_assert_int_gt(r.failed, 0);
}
END_TEST

START_TEST(main_cl)
{
    sweep_result r = sweep("main/opencl", workload_main, CL_SWEEP, CL_OUT_OF_HOST_MEMORY);
    ck_assert_int_gt(r.failed, 0);
}
END_TEST

START_TEST(half_cl)
{
    quick_stride = 9;
    sweep_result r = sweep("half/opencl", workload_half, CL_SWEEP, CL_OUT_OF_HOST_MEMORY);
    ck_assert_int_gt(r.failed, 0);
}
END_TEST

START_TEST(half_malloc)
{
    quick_stride = 9;
    sweep_result r = sweep("half/malloc", workload_half, MALLOC_SWEEP, CL_SUCCESS);
    ck_assert_int_gt(r.failed, 0);
}
END_TEST

START_TEST(main_malloc)
{
    sweep_result r = sweep("main/malloc", workload_main, MALLOC_SWEEP, CL_SUCCESS);
    ck_assert_int_gt(r.failed, 0);
}
END_TEST

START_TEST(main_lost)
{
    sweep_result r = sweep("main/out-of-resources", workload_main, CL_SWEEP, CL_OUT_OF_RESOURCES);
    ck_assert_int_gt(r.lost, 0);
}
END_TEST

/* One case each, so that CK_RUN_CASE can pick one. */
static void add_case(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 0);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

Suite *sweep_suite(void)
{
    Suite *s = suite_create("sweep");
    add_case(s, "enumerate_cl", enumerate_cl);
    add_case(s, "enumerate_malloc", enumerate_malloc);
    add_case(s, "main_cl", main_cl);
    add_case(s, "main_malloc", main_malloc);
    add_case(s, "main_lost", main_lost);
    add_case(s, "half_cl", half_cl);
    add_case(s, "half_malloc", half_malloc);
    return s;
}
