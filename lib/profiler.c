/* profiler.c - kiln_profiler_*: records of kernels, copies, builds and ranges; their table and
 * their Chrome trace. See profiler.h for how it sees the OpenCL calls. */
#include "profiler.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clcall.h"
#include "queue.h"
#include "registry.h"
#include "status.h"

atomic_bool kiln__profiler_on;

enum kind {
    K_KERNEL,
    K_NATIVE,
    K_HTOD,
    K_DTOH,
    K_DTOD,
    K_FILL,
    K_MAP,
    K_UNMAP,
    K_BUILD,
    K_LOAD,
    K_RANGE
};
static const char *const kind_names[] = {
    "kernel", "kernel", "memcpy HtoD",   "memcpy DtoH",           "memcpy DtoD", "memset",
    "map",    "unmap",  "program build", "program load (cached)", "range"};
static const char *const phase_names[] = {"", "forward", "backward", "optimizer"};

typedef struct rec {
    uint8_t kind, phase, queue;
    int16_t dev;         /* index in kiln__devices; -1: none (host only) */
    uint32_t tid;        /* the host thread, numbered from 0 in the order they first recorded */
    uint32_t depth;      /* ranges: how deep in this thread's stack */
    uint64_t h0, h1;     /* host: the op's start (a launch's entry) and the enqueue's return */
    uint64_t hc;         /* host: the enqueue call's start, for aligning the device clock */
    uint64_t dq, d0, d1; /* device clock: queued, start, end; d1 0 when not known */
    uint64_t bytes;
    cl_event ev; /* until resolved */
    char name[96];
    char detail[64]; /* the kernel's name, a build's kernels */
} rec;

#define MAX_RECORDS (1u << 20)
#define RESOLVE_EVERY 4096

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    rec *r;
    size_t n, cap, pending;
    size_t oldest;     /* records before it hold no event: where resolve_complete starts */
    size_t resolve_at; /* pending events that trigger the next resolve_complete */
    uint64_t dropped;
    unsigned flags;
    uint64_t t_start, t_stop;
    bool running, have;       /* a session runs; a session's records are there to show */
    struct kiln__cl_api real; /* the table as it was before start */
} P;
static atomic_uint next_tid;

typedef struct range_frame {
    char name[96];
    uint64_t t0;
} range_frame;
#define MAX_RANGE_DEPTH 64
static _Thread_local struct {
    kiln__prof_launch *launch;
    char label[96];
    int phase;
    int tid; /* 0: none yet, else tid + 1 */
    int nranges;
    range_frame ranges[MAX_RANGE_DEPTH];
    bool from_binary; /* the program being built was created from a cached binary */
} T;

static uint32_t this_tid(void)
{
    if (!T.tid)
        T.tid = (int)atomic_fetch_add(&next_tid, 1) + 1;
    return (uint32_t)T.tid - 1;
}

void kiln__profiler_launch_push(kiln__prof_launch *l, const char *op, const char *kernel)
{
    l->op = op;
    snprintf(l->kernel, sizeof l->kernel, "%s", kernel ? kernel : "");
    snprintf(l->label, sizeof l->label, "%s", T.label);
    l->t0 = kiln__now_ns();
    l->outer = T.launch;
    T.launch = l;
}

void kiln__profiler_launch_pop(kiln__prof_launch *l)
{
    T.launch = l->outer;
}

void kiln__profiler_label(const char *label)
{
    snprintf(T.label, sizeof T.label, "%s", label ? label : "");
}

int kiln__profiler_phase(int phase)
{
    int before = T.phase;
    T.phase = phase;
    return before;
}

/* ---- records ---- */

/* The device (index) and queue that q belongs to; -1 when it is none of kiln's. */
static int device_of(cl_command_queue q, uint8_t *queue)
{
    int n;
    kiln_device **devs = kiln__devices_if_enumerated(&n);
    for (int i = 0; i < n; i++) {
        bool mine = devs[i]->queue == q || devs[i]->timed_queue == q || devs[i]->private_queue == q;
        for (int k = 0; k < devs[i]->nqueues && !mine; k++)
            mine = devs[i]->queues[k].q == q;
        if (mine) {
            *queue = (uint8_t)kiln__queue_index(devs[i], q);
            return i;
        }
    }
    *queue = 0;
    return -1;
}

/* Read ev's device times into r and let it go. Lock held. */
static void resolve(rec *r)
{
    if (!r->ev)
        return;
    cl_ulong q = 0, a = 0, b = 0;
    if (P.real.GetEventProfilingInfo(r->ev, CL_PROFILING_COMMAND_QUEUED, sizeof q, &q, NULL) ==
            CL_SUCCESS &&
        P.real.GetEventProfilingInfo(r->ev, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL) ==
            CL_SUCCESS &&
        P.real.GetEventProfilingInfo(r->ev, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL) ==
            CL_SUCCESS &&
        b >= a) {
        r->dq = q;
        r->d0 = a;
        r->d1 = b;
    }
    P.real.ReleaseEvent(r->ev);
    r->ev = NULL;
    P.pending--;
}

/* Resolve the records whose commands are complete, so that a long session holds few events.
 * Lock held. */
static void resolve_complete(void)
{
    while (P.oldest < P.n && !P.r[P.oldest].ev)
        P.oldest++;
    for (size_t i = P.oldest; i < P.n && P.pending; i++) {
        cl_int st = CL_QUEUED;
        if (P.r[i].ev &&
            P.real.GetEventInfo(P.r[i].ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st,
                                NULL) == CL_SUCCESS &&
            st <= CL_COMPLETE)
            resolve(&P.r[i]);
    }
}

/* A new record, zeroed, with this thread's phase and id; NULL when the session is full. Lock
 * held. */
static rec *new_rec(int kind)
{
    if (P.n == P.cap) {
        size_t cap = P.cap ? P.cap * 2 : 4096;
        rec *r = P.n < MAX_RECORDS ? realloc(P.r, cap * sizeof *r) : NULL;
        if (!r) {
            P.dropped++;
            return NULL;
        }
        P.r = r;
        P.cap = cap;
    }
    rec *r = &P.r[P.n++];
    memset(r, 0, sizeof *r);
    r->kind = (uint8_t)kind;
    r->phase = (uint8_t)T.phase;
    r->tid = this_tid();
    r->dev = -1;
    return r;
}

/* Record an enqueue on q made between hc and h1 (ns), moving bytes; ev the command's event
 * (kiln's own reference, released when resolved), or NULL. */
static void record(int kind, cl_command_queue q, uint64_t hc, uint64_t h1, uint64_t bytes,
                   cl_event ev)
{
    kiln__prof_launch *l = T.launch;
    pthread_mutex_lock(&lock);
    rec *r = P.running ? new_rec(kind) : NULL;
    if (!r) {
        pthread_mutex_unlock(&lock);
        if (ev)
            P.real.ReleaseEvent(ev);
        return;
    }
    r->dev = (int16_t)device_of(q, &r->queue);
    r->hc = hc;
    r->h0 = kind == K_KERNEL && l ? l->t0 : hc;
    r->h1 = h1;
    r->bytes = bytes;
    r->ev = ev;
    if (ev)
        P.pending++;
    if (kind == K_KERNEL || kind == K_NATIVE) {
        /* A built-in kernel by the public op that launched it (a fused chain by its ops), a
         * user's by its own name. */
        const char *name = !l                                          ? "kernel"
                           : l->label[0]                               ? l->label
                           : strcmp(l->op, "kiln_program_launch") == 0 ? l->kernel
                                                                       : l->op;
        snprintf(r->name, sizeof r->name, "%s", name);
        snprintf(r->detail, sizeof r->detail, "%s", l ? l->kernel : "");
    } else {
        snprintf(r->name, sizeof r->name, "%s", kind_names[kind]);
        if (l)
            snprintf(r->detail, sizeof r->detail, "%s", l->op);
    }
    /* Every RESOLVE_EVERY more pending events (not at each record while the device lags). */
    if (P.pending >= P.resolve_at) {
        resolve_complete();
        P.resolve_at = P.pending + RESOLVE_EVERY;
    }
    pthread_mutex_unlock(&lock);
}

void kiln__profiler_enqueued(cl_command_queue q, cl_event ev, uint64_t t0, const char *op,
                             const char *kernel)
{
    kiln__prof_launch l;
    kiln__profiler_launch_push(&l, op, kernel);
    l.t0 = t0;
    cl_event mine = NULL;
    if (ev && (P.flags & KILN_PROFILE_DEVICE) && P.real.RetainEvent(ev) == CL_SUCCESS)
        mine = ev;
    record(K_KERNEL, q, t0, kiln__now_ns(), 0, mine);
    kiln__profiler_launch_pop(&l);
}

/* ---- the OpenCL calls, seen through the kiln__cl table ---- */

/* Where the command's event goes: the caller's, or one of the profiler's own when device times
 * are taken. */
#define EVENT_OUT(event, own) ((event) ? (event) : (P.flags & KILN_PROFILE_DEVICE) ? &(own) : NULL)

/* The profiler's reference to the command's event: its own, or the caller's retained. */
static cl_event keep_event(cl_int err, cl_event *event, cl_event own)
{
    if (err != CL_SUCCESS || !(P.flags & KILN_PROFILE_DEVICE))
        return NULL;
    if (event && *event) {
        P.real.RetainEvent(*event);
        return *event;
    }
    return own;
}

static cl_int CL_API_CALL ndrange(cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *off,
                                  const size_t *g, const size_t *l, cl_uint nw,
                                  const cl_event *wait, cl_event *event)
{
    cl_event own = NULL;
    uint64_t t = kiln__now_ns();
    cl_int err = P.real.EnqueueNDRangeKernel(q, k, dim, off, g, l, nw, wait, EVENT_OUT(event, own));
    if (err == CL_SUCCESS)
        record(K_KERNEL, q, t, kiln__now_ns(), 0, keep_event(err, event, own));
    return err;
}

static cl_int CL_API_CALL native(cl_command_queue q, void(CL_CALLBACK *fn)(void *), void *a,
                                 size_t n, cl_uint nm, const cl_mem *mems, const void **locs,
                                 cl_uint nw, const cl_event *wait, cl_event *event)
{
    cl_event own = NULL;
    uint64_t t = kiln__now_ns();
    cl_int err =
        P.real.EnqueueNativeKernel(q, fn, a, n, nm, mems, locs, nw, wait, EVENT_OUT(event, own));
    if (err == CL_SUCCESS)
        record(K_KERNEL, q, t, kiln__now_ns(), 0, keep_event(err, event, own));
    return err;
}

static cl_int CL_API_CALL read_buffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n,
                                      void *p, cl_uint nw, const cl_event *wait, cl_event *event)
{
    cl_event own = NULL;
    uint64_t t = kiln__now_ns();
    cl_int err = P.real.EnqueueReadBuffer(q, m, b, off, n, p, nw, wait, EVENT_OUT(event, own));
    if (err == CL_SUCCESS)
        record(K_DTOH, q, t, kiln__now_ns(), n, keep_event(err, event, own));
    return err;
}

static cl_int CL_API_CALL write_buffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off,
                                       size_t n, const void *p, cl_uint nw, const cl_event *wait,
                                       cl_event *event)
{
    cl_event own = NULL;
    uint64_t t = kiln__now_ns();
    cl_int err = P.real.EnqueueWriteBuffer(q, m, b, off, n, p, nw, wait, EVENT_OUT(event, own));
    if (err == CL_SUCCESS)
        record(K_HTOD, q, t, kiln__now_ns(), n, keep_event(err, event, own));
    return err;
}

static cl_int CL_API_CALL copy_buffer(cl_command_queue q, cl_mem a, cl_mem b, size_t oa, size_t ob,
                                      size_t n, cl_uint nw, const cl_event *wait, cl_event *event)
{
    cl_event own = NULL;
    uint64_t t = kiln__now_ns();
    cl_int err = P.real.EnqueueCopyBuffer(q, a, b, oa, ob, n, nw, wait, EVENT_OUT(event, own));
    if (err == CL_SUCCESS)
        record(K_DTOD, q, t, kiln__now_ns(), n, keep_event(err, event, own));
    return err;
}

static cl_int CL_API_CALL fill_buffer(cl_command_queue q, cl_mem m, const void *pat, size_t psz,
                                      size_t off, size_t n, cl_uint nw, const cl_event *wait,
                                      cl_event *event)
{
    cl_event own = NULL;
    uint64_t t = kiln__now_ns();
    cl_int err = P.real.EnqueueFillBuffer(q, m, pat, psz, off, n, nw, wait, EVENT_OUT(event, own));
    if (err == CL_SUCCESS)
        record(K_FILL, q, t, kiln__now_ns(), n, keep_event(err, event, own));
    return err;
}

static void *CL_API_CALL map_buffer(cl_command_queue q, cl_mem m, cl_bool b, cl_map_flags f,
                                    size_t off, size_t n, cl_uint nw, const cl_event *wait,
                                    cl_event *event, cl_int *errp)
{
    cl_event own = NULL;
    cl_int err = CL_SUCCESS;
    uint64_t t = kiln__now_ns();
    void *p = P.real.EnqueueMapBuffer(q, m, b, f, off, n, nw, wait, EVENT_OUT(event, own), &err);
    if (errp)
        *errp = err;
    if (err == CL_SUCCESS)
        record(K_MAP, q, t, kiln__now_ns(), n, keep_event(err, event, own));
    return p;
}

static cl_int CL_API_CALL unmap(cl_command_queue q, cl_mem m, void *p, cl_uint nw,
                                const cl_event *wait, cl_event *event)
{
    cl_event own = NULL;
    uint64_t t = kiln__now_ns();
    cl_int err = P.real.EnqueueUnmapMemObject(q, m, p, nw, wait, EVENT_OUT(event, own));
    if (err == CL_SUCCESS)
        record(K_UNMAP, q, t, kiln__now_ns(), 0, keep_event(err, event, own));
    return err;
}

static cl_program CL_API_CALL program_from_source(cl_context c, cl_uint n, const char **s,
                                                  const size_t *len, cl_int *err)
{
    T.from_binary = false;
    return P.real.CreateProgramWithSource(c, n, s, len, err);
}

static cl_program CL_API_CALL program_from_binary(cl_context c, cl_uint n, const cl_device_id *d,
                                                  const size_t *len, const unsigned char **b,
                                                  cl_int *st, cl_int *err)
{
    T.from_binary = true;
    return P.real.CreateProgramWithBinary(c, n, d, len, b, st, err);
}

static cl_int CL_API_CALL build(cl_program p, cl_uint n, const cl_device_id *d, const char *opt,
                                void(CL_CALLBACK *fn)(cl_program, void *), void *data)
{
    uint64_t t = kiln__now_ns();
    cl_int err = P.real.BuildProgram(p, n, d, opt, fn, data);
    uint64_t t1 = kiln__now_ns();
    char names[64] = "";
    size_t len = 0;
    if (err == CL_SUCCESS &&
        P.real.GetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &len) == CL_SUCCESS && len) {
        char *all = malloc(len);
        if (all && P.real.GetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, len, all, NULL) == CL_SUCCESS)
            snprintf(names, sizeof names, "%s", all);
        free(all);
    }
    pthread_mutex_lock(&lock);
    rec *r = P.running ? new_rec(T.from_binary ? K_LOAD : K_BUILD) : NULL;
    if (r) {
        r->h0 = r->hc = t;
        r->h1 = t1;
        snprintf(r->name, sizeof r->name, "%s", kind_names[r->kind]);
        snprintf(r->detail, sizeof r->detail, "%s", names);
        int nd;
        kiln_device **devs = kiln__devices_if_enumerated(&nd);
        for (int i = 0; n == 1 && i < nd; i++)
            if (devs[i]->id == d[0])
                r->dev = (int16_t)i;
    }
    pthread_mutex_unlock(&lock);
    return err;
}

static void swap_table(void)
{
    P.real = kiln__cl;
    kiln__cl.EnqueueNDRangeKernel = ndrange;
    kiln__cl.EnqueueNativeKernel = native;
    kiln__cl.EnqueueReadBuffer = read_buffer;
    kiln__cl.EnqueueWriteBuffer = write_buffer;
    kiln__cl.EnqueueCopyBuffer = copy_buffer;
    kiln__cl.EnqueueFillBuffer = fill_buffer;
    kiln__cl.EnqueueMapBuffer = map_buffer;
    kiln__cl.EnqueueUnmapMemObject = unmap;
    kiln__cl.CreateProgramWithSource = program_from_source;
    kiln__cl.CreateProgramWithBinary = program_from_binary;
    kiln__cl.BuildProgram = build;
}

/* Put back what start replaced; entries a test replaced meanwhile stay the test's. */
static void restore_table(void)
{
#define RESTORE(name, fn)                                                                          \
    if (kiln__cl.name == fn)                                                                       \
        kiln__cl.name = P.real.name;
    RESTORE(EnqueueNDRangeKernel, ndrange)
    RESTORE(EnqueueNativeKernel, native)
    RESTORE(EnqueueReadBuffer, read_buffer)
    RESTORE(EnqueueWriteBuffer, write_buffer)
    RESTORE(EnqueueCopyBuffer, copy_buffer)
    RESTORE(EnqueueFillBuffer, fill_buffer)
    RESTORE(EnqueueMapBuffer, map_buffer)
    RESTORE(EnqueueUnmapMemObject, unmap)
    RESTORE(CreateProgramWithSource, program_from_source)
    RESTORE(CreateProgramWithBinary, program_from_binary)
    RESTORE(BuildProgram, build)
#undef RESTORE
}

/* ---- the public calls ---- */

kiln_status kiln_profiler_start(unsigned flags)
{
    const char *op = "kiln_profiler_start";
    if (flags == 0 || (flags & ~(unsigned)KILN_PROFILE_ALL))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: flags is 0x%x; pass KILN_PROFILE_HOST, KILN_PROFILE_DEVICE or "
                           "both (KILN_PROFILE_ALL)",
                           op, flags);
    pthread_mutex_lock(&lock);
    if (P.running) {
        pthread_mutex_unlock(&lock);
        return kiln__error(KILN_ERR_STATE,
                           "%s: the profiler runs already; call kiln_profiler_stop first", op);
    }
    free(P.r);
    P.r = NULL;
    P.n = P.cap = P.pending = P.oldest = 0;
    P.resolve_at = RESOLVE_EVERY;
    P.dropped = 0;
    P.flags = flags;
    P.t_start = kiln__now_ns();
    P.running = true;
    P.have = true;
    swap_table();
    if (flags & KILN_PROFILE_DEVICE)
        kiln__queue_timing(true);
    atomic_store(&kiln__profiler_on, true);
    pthread_mutex_unlock(&lock);
    return KILN_OK;
}

kiln_status kiln_profiler_stop(void)
{
    pthread_mutex_lock(&lock);
    if (!P.running) {
        pthread_mutex_unlock(&lock);
        return kiln__error(KILN_ERR_STATE, "kiln_profiler_stop: the profiler is not running; call "
                                           "kiln_profiler_start first");
    }
    atomic_store(&kiln__profiler_on, false);
    P.running = false;
    pthread_mutex_unlock(&lock);
    /* Outside the lock: the timed queues finish, and what they ran completes. */
    if (P.flags & KILN_PROFILE_DEVICE)
        kiln__queue_timing(false);
    pthread_mutex_lock(&lock);
    /* Every command is complete now on the devices kiln times; a lost device's events are read
     * as they are (what failed has no times). At exit Oclgrind's are left alone (no times: its
     * API no longer works, kiln__driver_callable). */
    int nd;
    kiln_device **devs = kiln__devices_if_enumerated(&nd);
    for (size_t i = 0; i < P.n; i++) {
        rec *r = &P.r[i];
        if (r->ev && r->dev >= 0 && r->dev < nd && !kiln__driver_callable(devs[r->dev])) {
            r->ev = NULL; /* the process ends; its driver cannot take the release */
            P.pending--;
            continue;
        }
        resolve(r);
    }
    P.t_stop = kiln__now_ns();
    restore_table();
    pthread_mutex_unlock(&lock);
    return KILN_OK;
}

kiln_status kiln_profiler_range_push(const char *name)
{
    if (!name || !name[0])
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "kiln_profiler_range_push: name is %s; pass the range's name",
                           name ? "empty" : "NULL");
    if (T.nranges == MAX_RANGE_DEPTH)
        return kiln__error(KILN_ERR_STATE,
                           "kiln_profiler_range_push: %d ranges are open on this thread already "
                           "(the most there can be); pop one first",
                           MAX_RANGE_DEPTH);
    range_frame *f = &T.ranges[T.nranges++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->t0 = kiln__now_ns();
    return KILN_OK;
}

kiln_status kiln_profiler_range_pop(void)
{
    if (T.nranges == 0)
        return kiln__error(KILN_ERR_STATE, "kiln_profiler_range_pop: no range is open on this "
                                           "thread; call kiln_profiler_range_push first");
    range_frame *f = &T.ranges[--T.nranges];
    uint64_t t1 = kiln__now_ns();
    pthread_mutex_lock(&lock);
    /* A range that began before the session (or ends after it) is left out. */
    rec *r = P.running && f->t0 >= P.t_start ? new_rec(K_RANGE) : NULL;
    if (r) {
        r->h0 = r->hc = f->t0;
        r->h1 = t1;
        r->depth = (uint32_t)T.nranges;
        snprintf(r->name, sizeof r->name, "%s", f->name);
    }
    pthread_mutex_unlock(&lock);
    return KILN_OK;
}

/* ---- the table ---- */

typedef struct row {
    const rec *first;
    uint64_t count, dev_ns, host_ns, bytes, ntimed;
} row;

static int sort_by;
static int row_cmp(const void *pa, const void *pb)
{
    const row *a = pa, *b = pb;
    uint64_t x = 0, y = 0;
    switch (sort_by) {
    case KILN_PROFILER_SORT_DEVICE_TOTAL:
        x = a->dev_ns, y = b->dev_ns;
        break;
    case KILN_PROFILER_SORT_HOST_TOTAL:
        x = a->host_ns, y = b->host_ns;
        break;
    case KILN_PROFILER_SORT_COUNT:
        x = a->count, y = b->count;
        break;
    default:
        break;
    }
    if (x != y)
        return x < y ? 1 : -1;
    int c = strcmp(a->first->name, b->first->name);
    return c ? c : (int)a->first->phase - (int)b->first->phase;
}

static bool same_key(const rec *a, const rec *b)
{
    return (a->kind == K_RANGE) == (b->kind == K_RANGE) && a->phase == b->phase &&
           strcmp(a->name, b->name) == 0;
}

/* A session's records to show: KILN_OK, or the status (a message naming op) why not. Lock
 * held. */
static kiln_status can_show(const char *op)
{
    if (P.running)
        return kiln__error(KILN_ERR_STATE,
                           "%s: the profiler is running; call kiln_profiler_stop "
                           "first",
                           op);
    if (!P.have)
        return kiln__error(KILN_ERR_STATE,
                           "%s: nothing was profiled yet; call kiln_profiler_start and "
                           "kiln_profiler_stop around the work first",
                           op);
    return KILN_OK;
}

static void ms(char *buf, size_t n, uint64_t ns, bool known)
{
    if (!known)
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%.3f", (double)ns / 1e6);
}

kiln_status kiln_profiler_table(FILE *out, kiln_profiler_sort sort)
{
    const char *op = "kiln_profiler_table";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL; pass a stream (stdout)",
                           op);
    if ((int)sort < 0 || sort > KILN_PROFILER_SORT_NAME)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: sort is %d; pass a kiln_profiler_sort (KILN_PROFILER_SORT_*)", op,
                           (int)sort);
    pthread_mutex_lock(&lock);
    kiln_status s = can_show(op);
    row *rows = s == KILN_OK ? calloc(P.n ? P.n : 1, sizeof *rows) : NULL;
    if (s == KILN_OK && !rows)
        s = kiln__host_oom(op);
    if (s != KILN_OK) {
        pthread_mutex_unlock(&lock);
        return s;
    }
    size_t nrows = 0;
    uint64_t dev_total = 0;
    for (size_t i = 0; i < P.n; i++) {
        const rec *r = &P.r[i];
        size_t j = 0;
        while (j < nrows && !same_key(rows[j].first, r))
            j++;
        if (j == nrows)
            rows[nrows++].first = r;
        rows[j].count++;
        rows[j].host_ns += r->h1 - r->h0;
        rows[j].bytes += r->bytes;
        if (r->d1) {
            rows[j].dev_ns += r->d1 - r->d0;
            rows[j].ntimed++;
            dev_total += r->d1 - r->d0;
        }
    }
    sort_by = (int)sort;
    qsort(rows, nrows, sizeof *rows, row_cmp);
    int w = 24;
    for (size_t j = 0; j < nrows; j++) {
        int len = (int)strlen(rows[j].first->name);
        w = len > w ? (len < 60 ? len : 60) : w;
    }
    fprintf(out, "%-*s  %-9s  %7s  %12s  %12s  %8s  %12s  %12s  %12s\n", w, "Name", "Phase",
            "Calls", "Device (ms)", "Dev mean(us)", "Device %", "Host (ms)", "Host mean(us)",
            "Bytes");
    for (size_t j = 0; j < nrows; j++) {
        const row *x = &rows[j];
        char dt[32], dm[32], pct[32], hm[32], ht[32];
        ms(dt, sizeof dt, x->dev_ns, x->ntimed > 0);
        if (x->ntimed)
            snprintf(dm, sizeof dm, "%.1f", (double)x->dev_ns / 1e3 / (double)x->ntimed);
        else
            snprintf(dm, sizeof dm, "-");
        if (x->ntimed && dev_total)
            snprintf(pct, sizeof pct, "%.1f", 100.0 * (double)x->dev_ns / (double)dev_total);
        else
            snprintf(pct, sizeof pct, "-");
        ms(ht, sizeof ht, x->host_ns, true);
        snprintf(hm, sizeof hm, "%.1f", (double)x->host_ns / 1e3 / (double)x->count);
        fprintf(out, "%-*.*s  %-9s  %7llu  %12s  %12s  %8s  %12s  %12s  %12llu\n", w, w,
                x->first->name,
                x->first->kind == K_RANGE ? "(range)"
                : x->first->phase         ? phase_names[x->first->phase]
                                          : "-",
                (unsigned long long)x->count, dt, dm, pct, ht, hm, (unsigned long long)x->bytes);
    }
    fprintf(out, "Device time: %.3f ms in %zu records; profiled for %.3f ms",
            (double)dev_total / 1e6, P.n, (double)(P.t_stop - P.t_start) / 1e6);
    if (!(P.flags & KILN_PROFILE_DEVICE))
        fprintf(out, " (host only: KILN_PROFILE_DEVICE was not asked for)");
    if (P.dropped)
        fprintf(out, "; %llu records dropped (at most %u are kept)", (unsigned long long)P.dropped,
                MAX_RECORDS);
    fprintf(out, "\n");
    free(rows);
    pthread_mutex_unlock(&lock);
    return ferror(out) ? kiln__error(KILN_ERR_IO, "%s: writing the table failed", op) : KILN_OK;
}

/* ---- the Chrome trace ---- */

/* s as a JSON string's contents: quotes, backslashes and control characters escaped, bytes
 * that are not UTF-8 written as U+FFFD. */
static void json_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0;
        for (int i = 1; ok && i < len; i++)
            ok = (p[i] & 0xc0) == 0x80;
        if (!ok) {
            fputs("\\ufffd", f);
            p++;
        } else if (len > 1) {
            fwrite(p, 1, (size_t)len, f);
            p += len;
        } else {
            if (c == '"' || c == '\\')
                fprintf(f, "\\%c", c);
            else if (c < 0x20)
                fprintf(f, "\\u%04x", c);
            else
                fputc((int)c, f);
            p++;
        }
    }
}

/* Microseconds since the session began, as Chrome's trace wants them. */
static double us(uint64_t ns_since)
{
    return (double)ns_since / 1e3;
}

static void meta(FILE *f, bool *first, const char *what, int pid, int tid, const char *name)
{
    fprintf(f,
            "%s\n{\"ph\":\"M\",\"name\":\"%s\",\"ts\":0,\"dur\":0,\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"name\":\"",
            *first ? "" : ",", what, pid, tid);
    json_str(f, name);
    fputs("\"}}", f);
    *first = false;
}

static void event(FILE *f, bool *first, const rec *r, int pid, int tid, uint64_t ts, uint64_t dur,
                  const char *cat)
{
    fprintf(f, "%s\n{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"", *first ? "" : ",", cat);
    json_str(f, r->name);
    fprintf(f, "\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{", us(ts), us(dur), pid,
            tid);
    bool comma = false;
    if (r->detail[0]) {
        fputs(r->kind == K_BUILD || r->kind == K_LOAD ? "\"kernels\":\""
              : r->kind <= K_NATIVE                   ? "\"kernel\":\""
                                                      : "\"op\":\"",
              f);
        json_str(f, r->detail);
        fputc('"', f);
        comma = true;
    }
    if (r->phase) {
        fprintf(f, "%s\"phase\":\"%s\"", comma ? "," : "", phase_names[r->phase]);
        comma = true;
    }
    if (r->bytes)
        fprintf(f, "%s\"bytes\":%llu", comma ? "," : "", (unsigned long long)r->bytes);
    fputs("}}", f);
    *first = false;
}

/* Device records by queue, then start; the longer first where two start together. */
static int by_queue_start(const void *pa, const void *pb)
{
    const rec *a = *(const rec *const *)pa, *b = *(const rec *const *)pb;
    if (a->queue != b->queue)
        return a->queue < b->queue ? -1 : 1;
    if (a->d0 != b->d0)
        return a->d0 < b->d0 ? -1 : 1;
    uint64_t la = a->d1 - a->d0, lb = b->d1 - b->d0;
    return la > lb ? -1 : la < lb;
}

/* The host time (ns since the session began) at device time 0 of device d: the largest
 * (enqueue call's start - queued) over its records, so that no command is queued before kiln
 * called the driver. */
static int64_t device_offset(int d)
{
    bool any = false;
    int64_t off = 0;
    for (size_t i = 0; i < P.n; i++) {
        const rec *r = &P.r[i];
        if (r->dev != d || !r->d1)
            continue;
        int64_t o = (int64_t)(r->hc - P.t_start) - (int64_t)r->dq;
        if (!any || o > off)
            off = o;
        any = true;
    }
    return off;
}

kiln_status kiln_profiler_export_trace(const char *path)
{
    const char *op = "kiln_profiler_export_trace";
    if (!path || !path[0])
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: path is %s; pass a file name", op,
                           path ? "empty" : "NULL");
    pthread_mutex_lock(&lock);
    kiln_status s = can_show(op);
    if (s != KILN_OK) {
        pthread_mutex_unlock(&lock);
        return s;
    }
    const rec **order = kiln__malloc((P.n ? P.n : 1) * sizeof(const rec *)); /* device records */
    if (!order) {
        pthread_mutex_unlock(&lock);
        return kiln__host_oom(op);
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        int e = errno;
        free(order);
        pthread_mutex_unlock(&lock);
        return kiln__error(KILN_ERR_IO, "%s: cannot open %s for writing: %s", op, path,
                           strerror(e));
    }
    int nd;
    kiln_device **devs = kiln__devices_if_enumerated(&nd);
    bool first = true;
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    /* pid 0: the host, a track per thread; pid 1 + d: device d, a track per queue. */
    meta(f, &first, "process_name", 0, 0, "host");
    /* Names for the tracks that hold events only: the threads that recorded, the queues that
     * ran timed commands. */
    uint32_t ntid = 0;
    for (size_t i = 0; i < P.n; i++)
        ntid = P.r[i].tid + 1 > ntid ? P.r[i].tid + 1 : ntid;
    for (uint32_t t = 0; t < ntid; t++) {
        bool used = false;
        for (size_t i = 0; i < P.n && !used; i++)
            used = P.r[i].tid == t;
        char name[32];
        snprintf(name, sizeof name, "thread %u", t);
        if (used)
            meta(f, &first, "thread_name", 0, (int)t, name);
    }
    for (int d = 0; d < nd; d++) {
        bool queue_used[2 + KILN__MAX_QUEUES] = {false};
        bool any = false;
        for (size_t i = 0; i < P.n; i++)
            if (P.r[i].dev == d && P.r[i].d1 && P.r[i].queue < 2 + KILN__MAX_QUEUES)
                any = queue_used[P.r[i].queue] = true;
        if (!any)
            continue;
        char name[300];
        snprintf(name, sizeof name, "%s (%s)", devs[d]->info.spec, devs[d]->info.name);
        meta(f, &first, "process_name", 1 + d, 0, name);
        for (int q = 0; q < 2 + KILN__MAX_QUEUES; q++) {
            if (!queue_used[q])
                continue;
            snprintf(name, sizeof name, "queue %d (kiln_queue_create)", q - 2);
            meta(f, &first, "thread_name", 1 + d, q,
                 q == 0   ? "default queue"
                 : q == 1 ? "allocator queue"
                          : name);
        }
    }
    for (size_t i = 0; i < P.n; i++) {
        const rec *r = &P.r[i];
        const char *cat = r->kind == K_RANGE                        ? "range"
                          : r->kind == K_BUILD || r->kind == K_LOAD ? "build"
                          : r->kind <= K_NATIVE                     ? "launch"
                                                                    : "copy";
        event(f, &first, r, 0, (int)r->tid, r->h0 - P.t_start, r->h1 - r->h0, cat);
    }
    /* A queue runs one command at a time, in order; a driver may still report a command as
     * starting before the one before it ended (Oclgrind: two reads at one timestamp, the first
     * 0.8 us long), so each command starts no earlier than its queue's previous one ended. */
    for (int d = 0; d < nd; d++) {
        int64_t off = device_offset(d);
        size_t m = 0;
        for (size_t i = 0; i < P.n; i++)
            if (P.r[i].dev == d && P.r[i].d1)
                order[m++] = &P.r[i];
        qsort(order, m, sizeof(const rec *), by_queue_start);
        uint64_t last_end = 0;
        for (size_t i = 0; i < m; i++) {
            const rec *r = order[i];
            if (i == 0 || r->queue != order[i - 1]->queue)
                last_end = 0;
            uint64_t d0 = r->d0 > last_end ? r->d0 : last_end, d1 = r->d1 > d0 ? r->d1 : d0;
            last_end = d1;
            int64_t ts = (int64_t)d0 + off;
            event(f, &first, r, 1 + d, r->queue, ts > 0 ? (uint64_t)ts : 0, d1 - d0,
                  r->kind <= K_NATIVE ? "kernel" : "memcpy");
        }
    }
    fputs("\n]}\n", f);
    bool bad = ferror(f) != 0;
    free(order);
    bad = fclose(f) != 0 || bad;
    pthread_mutex_unlock(&lock);
    if (bad)
        return kiln__error(KILN_ERR_IO, "%s: writing %s failed", op, path);
    return KILN_OK;
}

/* ---- KILN_PROFILE=trace.json: the whole program, written at exit ---- */

static char env_path[4096];

static void write_at_exit(void)
{
    static atomic_bool done;
    if (!env_path[0] || atomic_exchange(&done, true))
        return;
    if (kiln_profiler_stop() != KILN_OK || kiln_profiler_export_trace(env_path) != KILN_OK)
        fprintf(stderr, "kiln: KILN_PROFILE: %s\n", kiln_last_error());
    else
        kiln__log(KILN_LOG_INFO, "KILN_PROFILE: the trace is in %s", env_path);
}

__attribute__((constructor)) static void profile_from_env(void)
{
    const char *path = getenv("KILN_PROFILE");
    if (!path || !path[0])
        return;
    snprintf(env_path, sizeof env_path, "%s", path);
    /* The registry's exit handler runs it while the driver still works (after every queue
     * finished); atexit here for a program that never opened a device. */
    kiln__registry_on_exit(write_at_exit);
    atexit(write_at_exit);
    if (kiln_profiler_start(KILN_PROFILE_ALL) != KILN_OK)
        fprintf(stderr, "kiln: KILN_PROFILE: %s\n", kiln_last_error());
}
