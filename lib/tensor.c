/* tensor.c - refcounted tensors: creation, host<->device copies, to(), views, maps, interop. */
#include "tensor.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clcall.h"
#include "dtype.h"
#include "memory.h"
#include "queue.h"
#include "registry.h"
#include "staging.h"
#include "status.h"

#define KILN__TENSOR_DEAD 0x64656164u /* "dead": a released header */
#define KILN__GRAVEYARD 256           /* released headers kept recognisable */

char *kiln__shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

static atomic_int_fast64_t live_headers; /* kiln__tensor_live */

/* The hooks of kiln__tensor_hooks_add: a slot is written once, under hooks_lock, before nhooks
 * counts it, so that readers need no lock. */
#define TENSOR_HOOKS 4
static kiln__tensor_hooks hooks[TENSOR_HOOKS];
static atomic_int nhooks;
static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;

void kiln__tensor_hooks_add(const kiln__tensor_hooks *h)
{
    pthread_mutex_lock(&hooks_lock);
    int n = atomic_load_explicit(&nhooks, memory_order_relaxed);
    if (n == TENSOR_HOOKS)
        abort(); /* a programming error: raise TENSOR_HOOKS */
    hooks[n] = *h;
    atomic_store_explicit(&nhooks, n + 1, memory_order_release);
    pthread_mutex_unlock(&hooks_lock);
}

static int hooks_count(void)
{
    return atomic_load_explicit(&nhooks, memory_order_acquire);
}

kiln_status kiln__tensor_use(const kiln_tensor *t, const char *op)
{
    /* Used on this thread's queue: what another queue did with it comes first. */
    kiln_status s = kiln__queue_order(t->dev, &t->storage->queue, op);
    for (int i = 0, n = hooks_count(); s == KILN_OK && i < n; i++)
        if (hooks[i].use)
            s = hooks[i].use(t, op);
    return s;
}

int64_t kiln__tensor_live(void)
{
    return (int64_t)atomic_load(&live_headers);
}

/* Creation sites, for the report at exit (lib/live.c): when KILN_LOG is debug at the first
 * tensor's creation, every live header is on this list with the function that made it. Off
 * otherwise: no lock, no list. */
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int track_sites = -1; /* -1 undecided, 0 off, 1 on */
static kiln_tensor *sites;          /* under sites_lock */

static void site_add(kiln_tensor *t, const char *op)
{
    int track = atomic_load(&track_sites);
    if (track < 0) {
        int want = kiln__log_enabled(KILN_LOG_DEBUG) ? 1 : 0;
        atomic_compare_exchange_strong(&track_sites, &track, want);
        track = atomic_load(&track_sites);
    }
    if (!track)
        return;
    t->made_by = op;
    pthread_mutex_lock(&sites_lock);
    t->site_prev = NULL;
    t->site_next = sites;
    if (sites)
        sites->site_prev = t;
    sites = t;
    t->on_sites = true;
    pthread_mutex_unlock(&sites_lock);
}

static void site_remove(kiln_tensor *t)
{
    if (!t->on_sites)
        return;
    pthread_mutex_lock(&sites_lock);
    if (t->site_prev)
        t->site_prev->site_next = t->site_next;
    else
        sites = t->site_next;
    if (t->site_next)
        t->site_next->site_prev = t->site_prev;
    t->on_sites = false;
    pthread_mutex_unlock(&sites_lock);
}

void kiln__tensor_log_sites(int max)
{
    /* at exit: a thread that died holding the lock must not hang the process */
    if (atomic_load(&track_sites) != 1 || pthread_mutex_trylock(&sites_lock) != 0)
        return;
    int n = 0;
    for (const kiln_tensor *t = sites; t; t = t->site_next, n++) {
        if (n == max) {
            int rest = 0;
            for (; t; t = t->site_next)
                rest++;
            kiln__log(KILN_LOG_DEBUG, "at exit, still alive: %d more tensor(s)", rest);
            break;
        }
        char sh[160];
        kiln__log(KILN_LOG_DEBUG, "at exit, still alive: tensor %s %s on %s, made by %s",
                  kiln__shape_str(sh, sizeof sh, t->ndim, t->shape), kiln_dtype_name(t->dtype),
                  t->dev->info.spec, t->made_by ? t->made_by : "kiln");
    }
    pthread_mutex_unlock(&sites_lock);
}

/* Released headers are not freed at once but kept, marked dead, among the last
 * KILN__GRAVEYARD ones: a second release or a use of a just-released handle then reads memory
 * kiln still owns and is reported instead of corrupting the heap. */
static pthread_mutex_t graveyard_lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_tensor *graveyard[KILN__GRAVEYARD];
static size_t graveyard_next;

static void bury(kiln_tensor *t)
{
    pthread_mutex_lock(&graveyard_lock);
    kiln_tensor *old = graveyard[graveyard_next];
    graveyard[graveyard_next] = t;
    graveyard_next = (graveyard_next + 1) % KILN__GRAVEYARD;
    pthread_mutex_unlock(&graveyard_lock);
    free(old);
}

kiln_status kiln__check_handle(const kiln_tensor *t, const char *op, const char *argname)
{
    if (!t)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, argname);
    if (t->magic == KILN__TENSOR_DEAD && t->freed_by_scope)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s (%p) was released when the scope it was made in ended "
                           "(kiln_scope_end); to use it after the scope, call "
                           "kiln_scope_keep(scope, tensor) before kiln_scope_end",
                           op, argname, (const void *)t);
    if (t->magic == KILN__TENSOR_DEAD)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s (%p) was already released; keep a reference with "
                           "kiln_tensor_retain() while you use it",
                           op, argname, (const void *)t);
    if (t->magic != KILN__TENSOR_MAGIC)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s (%p) is not a tensor handle from kiln (forged or corrupted)", op,
                           argname, (const void *)t);
    kiln_status s = kiln__device_check_lost(t->dev, op); /* a lost device is never used again */
    if (s == KILN_OK && t->storage->pinned)
        return KILN_OK; /* host memory: no queue uses it (copies wait for pinned_busy) */
    return s == KILN_OK ? kiln__tensor_use(t, op) : s;
}

kiln_status(kiln__check_unmapped)(const kiln_tensor *t, const char *op, const char *argname)
{
    kiln_status s = kiln__check_handle(t, op, argname);
    if (s == KILN_OK && atomic_load(&t->storage->mapped))
        return kiln__error(KILN_ERR_STATE, "%s: %s is mapped; call kiln_tensor_unmap() first", op,
                           argname);
    return s;
}

kiln_status(kiln__check_tensor)(const kiln_tensor *t, const char *op, const char *argname)
{
    kiln_status s = kiln__check_unmapped(t, op, argname);
    if (s == KILN_OK && t->storage->pinned)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s is a pinned host tensor (kiln_tensor_empty_pinned), which "
                           "kernels do not use; copy it to its device with kiln_tensor_to() or "
                           "kiln_tensor_copy_async() first",
                           op, argname);
    return s;
}

/* Wait for the last asynchronous copy from or into a pinned storage (host access comes after). */
static kiln_status pinned_wait(kiln__storage *st, const char *op)
{
    if (!st->pinned_busy)
        return KILN_OK;
    cl_int err = kiln__cl.WaitForEvents(1, &st->pinned_busy);
    kiln__cl.ReleaseEvent(st->pinned_busy);
    st->pinned_busy = NULL;
    return err == CL_SUCCESS ? KILN_OK : kiln__queue_fail(err, op, "clWaitForEvents", st->dev);
}

static bool tensor_valid(const kiln_tensor *t)
{
    return t && t->magic == KILN__TENSOR_MAGIC;
}

/* "argument N" for messages, without formatting on every call (issue 27: snprintf was ~8% of a
 * small op's host time). */
const char *kiln__argument_name(int i, char *buf, size_t size)
{
    static const char *const names[] = {"argument 1", "argument 2", "argument 3", "argument 4",
                                        "argument 5", "argument 6", "argument 7", "argument 8"};
    if (i >= 0 && i < (int)(sizeof names / sizeof names[0]))
        return names[i];
    snprintf(buf, size, "argument %d", i + 1);
    return buf;
}

kiln_status kiln__same_device(const char *op, int n, const kiln_tensor *const *ts,
                              kiln_device **dev)
{
    const kiln_tensor *first = NULL;
    int first_arg = 0;
    for (int i = 0; i < n; i++) {
        if (!ts[i])
            continue;
        char buf[32];
        kiln_status s = kiln__check_tensor(ts[i], op, kiln__argument_name(i, buf, sizeof buf));
        if (s != KILN_OK)
            return s;
        if (!first) {
            first = ts[i];
            first_arg = i + 1;
        } else if (ts[i]->dev != first->dev) {
            return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                               "%s: expected all tensors on the same device, got %s and %s "
                               "(arguments %d and %d of %s); copy with kiln_tensor_to()",
                               op, first->dev->info.spec, ts[i]->dev->info.spec, first_arg, i + 1,
                               op);
        }
    }
    if (dev)
        *dev = first ? first->dev : NULL;
    return KILN_OK;
}

kiln_status kiln__check_shape(int ndim, const int64_t *shape, kiln_dtype dtype, const char *op,
                              int64_t *numel, size_t *nbytes)
{
    size_t size = kiln_dtype_size(dtype);
    if (!size)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d; use one of %s", op,
                           (int)dtype, kiln__dtype_list());
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: ndim is %d; tensors have 0 to %d dimensions", op, ndim,
                           KILN_MAX_DIMS);
    if (!shape && ndim > 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: shape is NULL", op);
    char buf[256];
    int64_t n = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: dimension %d of shape %s is negative; dimensions must be >= 0",
                               op, i, kiln__shape_str(buf, sizeof buf, ndim, shape));
        if (shape[i] == 0)
            empty = true;
        else if (!kiln__dim_mul(n, shape[i], &n))
            goto overflow;
    }
    if ((uint64_t)n > SIZE_MAX / size)
        goto overflow;
    *numel = empty ? 0 : n;
    *nbytes = (size_t)*numel * size;
    return KILN_OK;
overflow:
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: shape %s of %s has more bytes than an address can count (overflow)", op,
                       kiln__shape_str(buf, sizeof buf, ndim, shape), kiln_dtype_name(dtype));
}

static kiln__storage *storage_new(kiln_device *dev, cl_mem mem, size_t bytes, size_t capacity,
                                  bool pooled)
{
    kiln__storage *st = kiln__calloc(1, sizeof *st);
    if (!st)
        return NULL;
    atomic_init(&st->refs, 1);
    atomic_init(&st->mapped, 0);
    atomic_init(&st->version, 0u);
    atomic_init(&st->readers, 0);
    atomic_init(&st->mem_shared, !pooled);
    st->dev = dev;
    st->mem = mem;
    st->bytes = bytes;
    atomic_fetch_add(&dev->live_bytes, (int_fast64_t)bytes);
    st->capacity = capacity;
    st->pooled = pooled;
    atomic_init(&st->queue, kiln__queue_tag(dev)); /* the queue its buffer was taken for */
    return st;
}

static void storage_release(kiln__storage *st)
{
    if (atomic_fetch_sub(&st->refs, 1) > 1)
        return;
    atomic_fetch_sub(&st->dev->live_bytes, (int_fast64_t)st->bytes);
    if (st->pinned) { /* host memory, of no pool: after the copies that use it */
        pinned_wait(st, "kiln_tensor_release");
        if (st->mem)
            kiln__pinned_destroy(st->dev, st->mem, st->pinned);
        free(st);
        return;
    }
    /* A tensor released while mapped: unmap so the buffer is clean when reused. */
    if (atomic_load(&st->mapped) && st->mem && st->map_ptr)
        kiln__cl.EnqueueUnmapMemObject(kiln__queue(st->dev), st->mem, st->map_ptr, 0, NULL, NULL);
    if (st->mem && st->pooled)
        kiln__mem_free(st->dev, st->mem, st->bytes, st->capacity, atomic_load(&st->queue));
    else if (st->mem)
        kiln__cl.ReleaseMemObject(st->mem);
    free(st);
}

/* A header over st (taking over the caller's storage reference). */
static kiln_tensor *header_new(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                               int64_t numel, size_t nbytes, kiln__storage *st, const char *op)
{
    kiln_tensor *t = kiln__calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->magic = KILN__TENSOR_MAGIC;
    atomic_init(&t->refs, 1);
    t->dev = dev;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim > 0) /* a 0-d tensor's shape may be NULL */
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = numel;
    t->nbytes = nbytes;
    t->storage = st;
    atomic_init(&t->scope, NULL);
    atomic_fetch_add(&live_headers, 1);
    atomic_fetch_add(&dev->live_tensors, 1);
    site_add(t, op);
    for (int i = 0, n = hooks_count(); i < n; i++)
        if (hooks[i].born)
            hooks[i].born(t);
    return t;
}

kiln_status kiln__tensor_new(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                             const char *op, kiln_tensor **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    int64_t numel;
    size_t nbytes, capacity = 0;
    cl_mem mem = NULL;
    kiln_status s = kiln__check_device(dev, op);
    if (s == KILN_OK)
        s = kiln__check_shape(ndim, shape, dtype, op, &numel, &nbytes);
    if (s == KILN_OK)
        s = kiln__device_open(dev, op);
    if (s == KILN_OK && nbytes > 0)
        s = kiln__mem_alloc(dev, nbytes, op, &mem, &capacity);
    if (s != KILN_OK)
        return s;
    kiln__storage *st = storage_new(dev, mem, nbytes, capacity, true);
    kiln_tensor *t = st ? header_new(dev, dtype, ndim, shape, numel, nbytes, st, op) : NULL;
    if (!t) {
        if (st)
            storage_release(st);
        else
            kiln__mem_free(dev, mem, nbytes, capacity, kiln__queue_tag(dev));
        return kiln__host_oom(op);
    }
    *out = t;
    return KILN_OK;
}

kiln_status kiln__tensor_new_pending(kiln_device *dev, kiln_dtype dtype, int ndim,
                                     const int64_t *shape, const char *op, kiln_tensor **out)
{
    *out = NULL;
    int64_t numel;
    size_t nbytes;
    kiln_status s = kiln__check_shape(ndim, shape, dtype, op, &numel, &nbytes);
    if (s != KILN_OK)
        return s;
    kiln__storage *st = storage_new(dev, NULL, nbytes, 0, true);
    kiln_tensor *t = st ? header_new(dev, dtype, ndim, shape, numel, nbytes, st, op) : NULL;
    if (!t) {
        if (st)
            atomic_fetch_sub(&dev->live_bytes, (int_fast64_t)st->bytes);
        free(st);
        return kiln__host_oom(op);
    }
    *out = t;
    return KILN_OK;
}

kiln_status kiln_tensor_empty(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                              kiln_tensor **out)
{
    return kiln__tensor_new(dev, dtype, ndim, shape, "kiln_tensor_empty", out);
}

/* The largest fill pattern (<= 16 bytes) that divides nbytes: fewer, wider stores. */
static size_t zero_pattern_size(size_t nbytes)
{
    size_t p = 16;
    while (nbytes % p)
        p /= 2;
    return p;
}

kiln_status kiln_tensor_zeros(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                              kiln_tensor **out)
{
    static const unsigned char zeros[16];
    kiln_tensor *t;
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_tensor_zeros: out is NULL");
    *out = NULL;
    kiln_status s = kiln__tensor_new(dev, dtype, ndim, shape, "kiln_tensor_zeros", &t);
    if (s != KILN_OK || (*out = t)->nbytes == 0)
        return s;
    size_t p = zero_pattern_size(t->nbytes);
    cl_int err;
    if (kiln__device_is_oclgrind(dev)) {
        /* Oclgrind's uninitialised-value checker (21.10) does not count a fill as writing the
         * buffer, and reports every kernel that reads it: write zeros from the host there. */
        void *z = kiln__calloc(1, t->nbytes);
        err = z ? kiln__cl.EnqueueWriteBuffer(kiln__queue(dev), t->storage->mem, CL_TRUE, 0,
                                              t->nbytes, z, 0, NULL, NULL)
                : CL_OUT_OF_HOST_MEMORY;
        free(z);
    } else {
        err = kiln__cl.EnqueueFillBuffer(kiln__queue(dev), t->storage->mem, zeros, p, 0, t->nbytes,
                                         0, NULL, NULL);
    }
    if (err != CL_SUCCESS) {
        *out = NULL;
        kiln_tensor_release(t);
        return kiln__queue_fail(err, "kiln_tensor_zeros", "clEnqueueFillBuffer", dev);
    }
    return KILN_OK;
}

/* The byte-count rule of read and write. */
static kiln_status check_io(const kiln_tensor *t, const void *ptr, size_t nbytes, const char *op,
                            const char *ptrname)
{
    kiln_status s = kiln__check_unmapped(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    char buf[256];
    if (nbytes != t->nbytes)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: nbytes is %zu but the tensor holds %zu bytes (%s of %s); pass "
                           "kiln_tensor_nbytes(t)",
                           op, nbytes, t->nbytes,
                           kiln__shape_str(buf, sizeof buf, t->ndim, t->shape),
                           kiln_dtype_name(t->dtype));
    if (!ptr && nbytes > 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, ptrname);
    return KILN_OK;
}

bool kiln__tensor_write_enqueued = false;

/* A write into one of kiln's own buffers on a host-backed CPU device. Where the device runs them
 * in place (memory.c learns it from a map), the queue's work is waited for and the bytes copied
 * straight into the buffer's memory: a blocking clEnqueueWriteBuffer waits for the same work,
 * and then costs a command a driver thread must wake for (issue 27: the two batch uploads were a
 * tenth of a small training step). Otherwise a blocking map, a copy and an unmap, which teaches
 * memory.c what the device does. */
static kiln_status write_host_backed(const kiln_tensor *t, const void *src, size_t nbytes,
                                     const char *op)
{
    kiln_device *dev = t->dev;
    cl_mem mem = t->storage->mem;
    cl_command_queue q = kiln__queue(dev);
    void *host = kiln__mem_in_place(dev, mem);
    if (host) {
        cl_int err = kiln__cl.Finish(q);
        if (err != CL_SUCCESS)
            return kiln__queue_fail(err, op, "clFinish", dev);
        memcpy(host, src, nbytes);
        return KILN_OK;
    }
    cl_int err = CL_SUCCESS;
    void *p = kiln__cl.EnqueueMapBuffer(q, mem, CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, 0, nbytes,
                                        0, NULL, NULL, &err);
    if (!p || err != CL_SUCCESS)
        return kiln__queue_fail(err != CL_SUCCESS ? err : CL_INVALID_VALUE, op,
                                "clEnqueueMapBuffer", dev);
    memcpy(p, src, nbytes);
    kiln__mem_learn_in_place(dev, mem, p);
    err = kiln__cl.EnqueueUnmapMemObject(q, mem, p, 0, NULL, NULL);
    return err == CL_SUCCESS ? KILN_OK : kiln__queue_fail(err, op, "clEnqueueUnmapMemObject", dev);
}

/* A blocking copy of nbytes from host src into t, after the work queued before it (src may be
 * reused at once). */
static kiln_status write_from(const kiln_tensor *t, const void *src, size_t nbytes, const char *op)
{
    if (t->storage->pooled && !kiln__tensor_write_enqueued && kiln__mem_host_backed(t->dev))
        return write_host_backed(t, src, nbytes, op);
    return kiln__staging_write(t->dev, t->storage->mem, 0, nbytes, src, op);
}

/* A blocking copy between the tensor and host memory (ptr, nbytes): read into ptr, or write from
 * it (src may be reused at once). Through pinned staging buffers on a device without unified
 * memory (staging.c). A read also reports, under report_op's name, a bad label or index a kernel
 * before it met (queue.h, the device error word), folded into the read's wait. */
static kiln_status host_copy(const kiln_tensor *t, void *ptr, size_t nbytes, bool write,
                             const char *report_op)
{
    const char *op = write ? "kiln_tensor_write" : "kiln_tensor_read";
    kiln_status s = check_io(t, ptr, nbytes, op, write ? "src" : "dst");
    if (s != KILN_OK || nbytes == 0)
        return s;
    kiln__storage *st = t->storage;
    if (st->pinned) { /* host memory: a memcpy once the copies that use it are done */
        s = pinned_wait(st, op);
        if (s == KILN_OK)
            memcpy(write ? st->pinned : ptr, write ? ptr : st->pinned, nbytes);
        return s;
    }
    cl_mem mem = st->mem;
    if (write)
        return write_from(t, ptr, nbytes, op);
    kiln__error_probe probe;
    kiln__queue_error_probe(t->dev, &probe);
    s = kiln__staging_read(t->dev, mem, 0, nbytes, ptr, op);
    kiln_status r = kiln__queue_error_report(t->dev, &probe, report_op);
    return s != KILN_OK ? s : r;
}

kiln_status kiln__tensor_read_as(const kiln_tensor *t, void *dst, size_t nbytes, const char *op)
{
    return host_copy(t, dst, nbytes, false, op);
}

kiln_status kiln_tensor_read(const kiln_tensor *t, void *dst, size_t nbytes)
{
    return host_copy(t, dst, nbytes, false, "kiln_tensor_read");
}

kiln_status kiln_tensor_write(kiln_tensor *t, const void *src, size_t nbytes)
{
    kiln_status s = host_copy(t, (void *)src, nbytes, true, NULL);
    if (s == KILN_OK)
        kiln__tensor_bump(t);
    return s;
}

kiln_status kiln_tensor_from_host(kiln_device *dev, kiln_dtype dtype, int ndim,
                                  const int64_t *shape, const void *data, kiln_tensor **out)
{
    const char *op = "kiln_tensor_from_host";
    kiln_tensor *t;
    int64_t numel;
    size_t nbytes;
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    /* Refuse a NULL source before anything is allocated. */
    kiln_status s = kiln__check_shape(ndim, shape, dtype, op, &numel, &nbytes);
    if (s == KILN_OK && !data && nbytes > 0)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: data is NULL", op);
    if (s == KILN_OK)
        s = kiln__tensor_new(dev, dtype, ndim, shape, op, &t);
    if (s != KILN_OK || nbytes == 0) {
        *out = s == KILN_OK ? t : NULL;
        return s;
    }
    s = write_from(t, data, nbytes, op);
    if (s != KILN_OK) {
        kiln_tensor_release(t);
        return s;
    }
    *out = t;
    return KILN_OK;
}

/* Device to device in one context: the copy runs on dst's queue after a marker of src's queue
 * (src's pending work), and src's queue gets a barrier on the copy, so later writes to the
 * source (or reuse of its buffer) wait for it. Nothing blocks the host. */
static kiln_status copy_same_context(const kiln_tensor *src, kiln_tensor *dst)
{
    const char *op = "kiln_tensor_to", *clfn = "clEnqueueMarkerWithWaitList";
    cl_command_queue sq = kiln__queue(src->dev), dq = kiln__queue(dst->dev);
    cl_event ready = NULL, done = NULL;
    cl_int err = kiln__cl.EnqueueMarkerWithWaitList(sq, 0, NULL, &ready);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, clfn, src->dev);
    /* Flush both queues: each waits on an event of the other. */
    kiln__queue_flush(src->dev);
    err = kiln__cl.EnqueueCopyBuffer(dq, src->storage->mem, dst->storage->mem, 0, 0, src->nbytes, 1,
                                     &ready, &done);
    kiln__cl.ReleaseEvent(ready);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clEnqueueCopyBuffer", dst->dev);
    kiln__queue_flush(dst->dev);
    err = kiln__cl.EnqueueBarrierWithWaitList(sq, 1, &done, NULL);
    if (err != CL_SUCCESS)
        kiln__cl.WaitForEvents(1, &done); /* the source must not be reused before the copy */
    kiln__cl.ReleaseEvent(done);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clEnqueueBarrierWithWaitList", src->dev);
    kiln__queue_flush(src->dev);
    return KILN_OK;
}

/* Across contexts, through host memory (staging.c): a blocking map of the source where its
 * memory is the host's (no extra copy), else chunk by chunk through pinned buffers; each read
 * waits for src's pending work, each write is blocking on dst's queue. */
static kiln_status copy_staged(const kiln_tensor *src, kiln_tensor *dst)
{
    return kiln__staging_copy(src->dev, src->storage->mem, dst->dev, dst->storage->mem, src->nbytes,
                              "kiln_tensor_to");
}

kiln_status kiln__tensor_copy_to(const kiln_tensor *t, kiln_device *dev, const char *op,
                                 kiln_tensor **out)
{
    kiln_status s = kiln__check_tensor(t, op, "tensor"); /* a copy to another device reads it */
    if (s != KILN_OK)
        return s;
    kiln_tensor *d;
    s = kiln__tensor_new(dev, t->dtype, t->ndim, t->shape, op, &d);
    if (s != KILN_OK || t->nbytes == 0) {
        *out = d;
        return s;
    }
    if (kiln__device_context(dev) == kiln__device_context(t->dev))
        s = copy_same_context(t, d);
    else
        s = copy_staged(t, d);
    if (s != KILN_OK) {
        kiln_tensor_release(d);
        return s;
    }
    *out = d;
    return KILN_OK;
}

/* Enqueue a copy of src's bytes into dst on their (common) device's queue. */
static kiln_status enqueue_copy(kiln_tensor *dst, const kiln_tensor *src, const char *op)
{
    if (src->nbytes == 0 || dst->storage == src->storage)
        return KILN_OK;
    cl_int err = kiln__cl.EnqueueCopyBuffer(kiln__queue(src->dev), src->storage->mem,
                                            dst->storage->mem, 0, 0, src->nbytes, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clEnqueueCopyBuffer", src->dev);
    return KILN_OK;
}

kiln_status kiln__tensor_clone(const kiln_tensor *t, const char *op, kiln_tensor **out)
{
    kiln_status s = kiln__check_tensor(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    kiln_tensor *c;
    s = kiln__tensor_new(t->dev, t->dtype, t->ndim, t->shape, op, &c);
    if (s == KILN_OK)
        s = enqueue_copy(c, t, op);
    if (s != KILN_OK) {
        kiln_tensor_release(c);
        return s;
    }
    *out = c;
    return KILN_OK;
}

/* The rule of kiln_tensor_copy and kiln_tensor_copy_async: one dtype, one element count. */
static kiln_status check_copy_pair(const char *op, const kiln_tensor *dst, const kiln_tensor *src)
{
    if (dst->dtype != src->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: dst is %s but src is %s; convert with "
                           "kiln_cast()",
                           op, kiln_dtype_name(dst->dtype), kiln_dtype_name(src->dtype));
    if (dst->numel != src->numel)
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: dst has %" PRId64 " elements but src has %" PRId64, op, dst->numel,
                           src->numel);
    return KILN_OK;
}

kiln_status kiln_tensor_copy(kiln_tensor *dst, const kiln_tensor *src)
{
    const char *op = "kiln_tensor_copy";
    const kiln_tensor *ts[2] = {dst, src};
    if (!dst || !src)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, dst ? "src" : "dst");
    kiln_status s = kiln__same_device(op, 2, ts, NULL);
    if (s == KILN_OK)
        s = check_copy_pair(op, dst, src);
    if (s != KILN_OK)
        return s;
    kiln__tensor_bump(dst);
    return enqueue_copy(dst, src, op);
}

/* ---- pinned host tensors and asynchronous copies ---- */

kiln_status kiln_tensor_empty_pinned(kiln_device *dev, kiln_dtype dtype, int ndim,
                                     const int64_t *shape, kiln_tensor **out)
{
    static unsigned char empty_pinned; /* the memory of an empty one */
    const char *op = "kiln_tensor_empty_pinned";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    int64_t numel;
    size_t nbytes;
    kiln_status s = kiln__check_device(dev, op);
    if (s == KILN_OK)
        s = kiln__check_shape(ndim, shape, dtype, op, &numel, &nbytes);
    if (s == KILN_OK)
        s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    cl_mem mem = NULL;
    void *host = &empty_pinned;
    const char *clfn = NULL;
    cl_int err = nbytes ? kiln__pinned_create(dev, nbytes, &mem, &host, &clfn) : CL_SUCCESS;
    if (err != CL_SUCCESS)
        return kiln__error(KILN_ERR_OUT_OF_MEMORY,
                           "%s: no pinned host memory of %zu bytes for %s (%s failed with %s)", op,
                           nbytes, kiln__device_label(dev), clfn, kiln__cl_error_name(err));
    /* Host memory: no bytes of the device's count (live_bytes), no pool. */
    kiln__storage *st = storage_new(dev, mem, 0, nbytes, false);
    if (st)
        st->pinned = host;
    kiln_tensor *t = st ? header_new(dev, dtype, ndim, shape, numel, nbytes, st, op) : NULL;
    if (!t) {
        if (st)
            storage_release(st);
        else if (mem)
            kiln__pinned_destroy(dev, mem, host);
        return kiln__host_oom(op);
    }
    *out = t;
    return KILN_OK;
}

kiln_status kiln__tensor_copy_async(kiln_tensor *dst, const kiln_tensor *src, size_t nbytes,
                                    const char *op)
{
    kiln__storage *ds = dst->storage, *ss = src->storage;
    kiln__tensor_bump(dst);
    if (nbytes == 0 || ds == ss)
        return KILN_OK;
    kiln_device *dev = dst->dev;
    if (ds->pinned && ss->pinned) { /* host to host */
        kiln_status s = pinned_wait(ds, op);
        if (s == KILN_OK)
            s = pinned_wait(ss, op);
        if (s == KILN_OK)
            memcpy(ds->pinned, ss->pinned, nbytes);
        return s;
    }
    cl_command_queue q = kiln__queue(dev);
    kiln__storage *pin = ds->pinned ? ds : ss->pinned ? ss : NULL;
    if (!pin) {
        cl_int err = kiln__cl.EnqueueCopyBuffer(q, ss->mem, ds->mem, 0, 0, nbytes, 0, NULL, NULL);
        return err == CL_SUCCESS ? KILN_OK : kiln__queue_fail(err, op, "clEnqueueCopyBuffer", dev);
    }
    /* The host side is the pinned memory (a DMA on a discrete GPU); after the last copy that used
     * it, whatever queue that was on (each such queue is flushed below). */
    cl_uint nwait = pin->pinned_busy ? 1 : 0;
    cl_event done = NULL;
    cl_int err = pin == ds
                     ? kiln__cl.EnqueueReadBuffer(q, ss->mem, CL_FALSE, 0, nbytes, ds->pinned,
                                                  nwait, nwait ? &pin->pinned_busy : NULL, &done)
                     : kiln__cl.EnqueueWriteBuffer(q, ds->mem, CL_FALSE, 0, nbytes, ss->pinned,
                                                   nwait, nwait ? &pin->pinned_busy : NULL, &done);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, pin == ds ? "clEnqueueReadBuffer" : "clEnqueueWriteBuffer",
                                dev);
    if (pin->pinned_busy)
        kiln__cl.ReleaseEvent(pin->pinned_busy);
    pin->pinned_busy = done;
    kiln__cl.Flush(q); /* it starts now, and other queues may wait for it */
    return KILN_OK;
}

kiln_status kiln_tensor_copy_async(kiln_tensor *dst, const kiln_tensor *src)
{
    const char *op = "kiln_tensor_copy_async";
    if (!dst || !src)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, dst ? "src" : "dst");
    kiln_status s = kiln__check_unmapped(dst, op, "dst");
    if (s == KILN_OK)
        s = kiln__check_unmapped(src, op, "src");
    if (s != KILN_OK)
        return s;
    if (dst->dev != src->dev)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                           "%s: dst is on %s but src is on %s; both must be on one device (a "
                           "pinned host tensor belongs to the device it was made for)",
                           op, kiln__device_label(dst->dev), kiln__device_label(src->dev));
    s = check_copy_pair(op, dst, src);
    return s != KILN_OK ? s : kiln__tensor_copy_async(dst, src, src->nbytes, op);
}

kiln_status kiln__tensor_upload(const kiln_tensor *t, kiln_device *dev, const char *op,
                                kiln_tensor **out)
{
    if (dev != t->dev)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                           "%s: the pinned host tensor belongs to %s; it copies to that device "
                           "only, not to %s",
                           op, kiln__device_label(t->dev), kiln__device_label(dev));
    kiln_tensor *d;
    kiln_status s = kiln__tensor_new(dev, t->dtype, t->ndim, t->shape, op, &d);
    if (s == KILN_OK) /* d's buffer was taken for this thread's queue: no ordering needed */
        s = kiln__tensor_copy_async(d, t, t->nbytes, op);
    if (s != KILN_OK) {
        kiln_tensor_release(d);
        return s;
    }
    *out = d;
    return KILN_OK;
}

/* Resolve a reshape target with at most one -1 into out_shape. */
static kiln_status infer_shape(const kiln_tensor *t, int ndim, const int64_t *shape,
                               int64_t *out_shape, const char *op)
{
    int infer = -1;
    int64_t known = 1;
    char buf[256], buf2[256];
    for (int i = 0; i < ndim; i++) {
        out_shape[i] = shape[i];
        if (shape[i] == -1 && infer < 0)
            infer = i;
        else if (shape[i] == -1)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: only one dimension may be -1", op);
        else if (shape[i] < 0)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: dimension %d is %" PRId64 "; dimensions must be >= 0 (or -1)",
                               op, i, shape[i]);
        else if (!kiln__dim_mul(known, shape[i], &known))
            goto mismatch;
    }
    if (infer >= 0) {
        if (known == 0 || t->numel % known)
            goto mismatch;
        out_shape[infer] = t->numel / known;
    }
    return KILN_OK;
mismatch:
    return kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: cannot view %s (%" PRId64 " elements) as %s",
                       op, kiln__shape_str(buf, sizeof buf, t->ndim, t->shape), t->numel,
                       kiln__shape_str(buf2, sizeof buf2, ndim, shape));
}

kiln_status kiln__tensor_view(const kiln_tensor *t, int ndim, const int64_t *shape, const char *op,
                              kiln_tensor **out)
{
    kiln_status s = kiln__check_handle(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    if (ndim < 0 || ndim > KILN_MAX_DIMS || (!shape && ndim > 0))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: ndim is %d and shape %s; give 0 to %d dimensions", op, ndim,
                           shape ? "is set" : "is NULL", KILN_MAX_DIMS);
    int64_t resolved[KILN_MAX_DIMS], numel;
    size_t nbytes;
    s = infer_shape(t, ndim, shape, resolved, op);
    if (s == KILN_OK)
        s = kiln__check_shape(ndim, resolved, t->dtype, op, &numel, &nbytes);
    if (s == KILN_OK && numel != t->numel) {
        char buf[256], buf2[256];
        s = kiln__error(KILN_ERR_SHAPE_MISMATCH,
                        "%s: cannot view %s (%" PRId64 " elements) as %s (%" PRId64 " elements)",
                        op, kiln__shape_str(buf, sizeof buf, t->ndim, t->shape), t->numel,
                        kiln__shape_str(buf2, sizeof buf2, ndim, resolved), numel);
    }
    if (s != KILN_OK)
        return s;
    atomic_fetch_add(&t->storage->refs, 1);
    kiln_tensor *v = header_new(t->dev, t->dtype, ndim, resolved, numel, nbytes, t->storage, op);
    if (!v) {
        storage_release(t->storage);
        return kiln__host_oom(op);
    }
    *out = v;
    return KILN_OK;
}

kiln_tensor *kiln_tensor_retain(kiln_tensor *t)
{
    if (t)
        atomic_fetch_add(&t->refs, 1);
    return t;
}

/* Whether t is a live handle; reports (and the caller ignores) anything else. */
static bool release_ok(kiln_tensor *t, const char *op)
{
    if (t->magic == KILN__TENSOR_MAGIC)
        return true;
    /* A bug in the caller; report it rather than corrupt the heap. */
    kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %p %s; ignored", op, (void *)t,
                t->magic == KILN__TENSOR_DEAD ? "was already released" : "is not a tensor handle");
    kiln__log_last_error(KILN_LOG_ERROR);
    return false;
}

static _Thread_local bool scope_ending; /* kiln__tensor_scope_ending */

bool kiln__tensor_scope_ending(bool on)
{
    bool was = scope_ending;
    scope_ending = on;
    return was;
}

static void unref(kiln_tensor *t)
{
    if (atomic_fetch_sub(&t->refs, 1) > 1)
        return;
    atomic_fetch_sub(&live_headers, 1);
    atomic_fetch_sub(&t->dev->live_tensors, 1);
    site_remove(t);
    for (int i = 0, n = hooks_count(); i < n; i++)
        if (hooks[i].dead)
            hooks[i].dead(t);
    t->freed_by_scope = scope_ending;
    t->magic = KILN__TENSOR_DEAD;
    storage_release(t->storage);
    t->storage = NULL;
    bury(t);
}

void kiln_tensor_release(kiln_tensor *t)
{
    if (!t || !release_ok(t, "kiln_tensor_release"))
        return;
    for (int i = 0, n = hooks_count(); i < n; i++)
        if (hooks[i].released)
            hooks[i].released(t);
    unref(t);
}

void kiln__tensor_drop(kiln_tensor *t)
{
    if (t && release_ok(t, "kiln_tensor_release"))
        unref(t);
}

kiln_device *kiln_tensor_device(const kiln_tensor *t)
{
    return tensor_valid(t) ? t->dev : NULL;
}

kiln_dtype kiln_tensor_dtype(const kiln_tensor *t)
{
    return tensor_valid(t) ? t->dtype : (kiln_dtype)-1;
}

int kiln_tensor_ndim(const kiln_tensor *t)
{
    return tensor_valid(t) ? t->ndim : -1;
}

const int64_t *kiln_tensor_shape(const kiln_tensor *t)
{
    return tensor_valid(t) ? t->shape : NULL;
}

int64_t kiln_tensor_numel(const kiln_tensor *t)
{
    return tensor_valid(t) ? t->numel : -1;
}

size_t kiln_tensor_nbytes(const kiln_tensor *t)
{
    return tensor_valid(t) ? t->nbytes : 0;
}

kiln_status kiln_tensor_map(kiln_tensor *t, kiln_map_flags flags, void **ptr)
{
    static unsigned char empty_map; /* what an empty tensor maps to */
    const char *op = "kiln_tensor_map";
    if (ptr)
        *ptr = NULL;
    kiln_status s = kiln__check_handle(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    if (!ptr)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: ptr is NULL", op);
    if (flags < KILN_MAP_READ || flags > KILN_MAP_READ_WRITE)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: flags is %d; use KILN_MAP_READ, KILN_MAP_WRITE or "
                           "KILN_MAP_READ_WRITE",
                           op, (int)flags);
    /* A bad label or index a kernel before the map met is reported here, nothing mapped (the
     * check's read waits for what the map would wait for). */
    kiln__storage *st = t->storage;
    s = st->pinned ? KILN_OK : kiln__queue_error_check(t->dev, op);
    if (s != KILN_OK)
        return s;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&st->mapped, &expected, 1))
        return kiln__error(KILN_ERR_STATE,
                           "%s: the tensor (or a view of its storage) is already "
                           "mapped; call kiln_tensor_unmap() first",
                           op);
    if (st->pinned) { /* host memory: its pointer, once the copies that use it are done */
        s = pinned_wait(st, op);
        if (s != KILN_OK) {
            atomic_store(&st->mapped, 0);
            return s;
        }
        *ptr = st->pinned;
        if (flags & KILN_MAP_WRITE)
            kiln__tensor_bump(t);
        return KILN_OK;
    }
    if (!st->mem) {
        st->map_ptr = &empty_map;
        *ptr = st->map_ptr;
        return KILN_OK;
    }
    cl_map_flags f =
        ((flags & KILN_MAP_READ) ? CL_MAP_READ : 0) | ((flags & KILN_MAP_WRITE) ? CL_MAP_WRITE : 0);
    cl_int err;
    void *p = kiln__cl.EnqueueMapBuffer(kiln__queue(t->dev), st->mem, CL_TRUE, f, 0, t->nbytes, 0,
                                        NULL, NULL, &err);
    if (err != CL_SUCCESS || !p) {
        atomic_store(&st->mapped, 0);
        return kiln__queue_fail(err != CL_SUCCESS ? err : CL_MAP_FAILURE, op, "clEnqueueMapBuffer",
                                t->dev);
    }
    st->map_ptr = p;
    *ptr = p;
    if (flags & KILN_MAP_WRITE)
        kiln__tensor_bump(t);
    return KILN_OK;
}

kiln_status kiln_tensor_unmap(kiln_tensor *t)
{
    const char *op = "kiln_tensor_unmap";
    kiln_status s = kiln__check_handle(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    kiln__storage *st = t->storage;
    if (!atomic_load(&st->mapped))
        return kiln__error(KILN_ERR_STATE, "%s: the tensor is not mapped", op);
    if (st->mem && !st->pinned) {
        cl_int err = kiln__cl.EnqueueUnmapMemObject(kiln__queue(t->dev), st->mem, st->map_ptr, 0,
                                                    NULL, NULL);
        if (err != CL_SUCCESS)
            return kiln__queue_fail(err, op, "clEnqueueUnmapMemObject", t->dev);
    }
    st->map_ptr = NULL;
    atomic_store(&st->mapped, 0);
    return KILN_OK;
}

cl_mem kiln_tensor_cl_mem(const kiln_tensor *t)
{
    if (!tensor_valid(t) || t->storage->pinned)
        return NULL;
    atomic_store(&t->storage->mem_shared, true); /* it may come back wrapped in another tensor */
    if (kiln__tensor_use(t, "kiln_tensor_cl_mem") != KILN_OK)
        return NULL; /* the caller may write the buffer: pending readers are evaluated first */
    return t->storage->mem;
}

size_t kiln_tensor_cl_offset(const kiln_tensor *t)
{
    (void)t; /* tensors always start at the beginning of their buffer */
    return 0;
}

/* The context and size of a foreign buffer must fit dev and the shape. */
static kiln_status check_foreign(kiln_device *dev, cl_mem mem, size_t nbytes, size_t *size,
                                 const char *op)
{
    cl_context ctx = NULL;
    cl_int err = kiln__cl.GetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof(cl_context), &ctx, NULL);
    if (err == CL_SUCCESS)
        err = kiln__cl.GetMemObjectInfo(mem, CL_MEM_SIZE, sizeof *size, size, NULL);
    if (err != CL_SUCCESS)
        return kiln__cl_fail(err, op, "clGetMemObjectInfo", dev->info.spec);
    if (ctx != kiln__device_context(dev))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the buffer was created in another OpenCL context than %s's; create "
                           "it in kiln_device_cl_context(dev)",
                           op, dev->info.spec);
    if (*size < nbytes)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the buffer holds %zu bytes but the shape needs %zu", op, *size,
                           nbytes);
    return KILN_OK;
}

kiln_status kiln_tensor_from_cl_mem(kiln_device *dev, cl_mem mem, kiln_dtype dtype, int ndim,
                                    const int64_t *shape, kiln_tensor **out)
{
    const char *op = "kiln_tensor_from_cl_mem";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    kiln_status s = kiln__tensor_adopt(dev, mem, dtype, ndim, shape, op, out);
    if (s == KILN_OK)
        kiln__cl.RetainMemObject(mem); /* the tensor's own; the caller keeps theirs */
    return s;
}

kiln_status kiln__tensor_adopt(kiln_device *dev, cl_mem mem, kiln_dtype dtype, int ndim,
                               const int64_t *shape, const char *op, kiln_tensor **out)
{
    *out = NULL;
    int64_t numel;
    size_t nbytes, size = 0;
    kiln_status s = kiln__check_device(dev, op);
    if (s == KILN_OK && !mem)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: mem is NULL", op);
    if (s == KILN_OK)
        s = kiln__check_shape(ndim, shape, dtype, op, &numel, &nbytes);
    if (s == KILN_OK)
        s = kiln__device_open(dev, op);
    if (s == KILN_OK)
        s = check_foreign(dev, mem, nbytes, &size, op);
    if (s != KILN_OK)
        return s;
    kiln__storage *st = storage_new(dev, mem, nbytes, size, false);
    kiln_tensor *t = st ? header_new(dev, dtype, ndim, shape, numel, nbytes, st, op) : NULL;
    if (!t) {
        if (st)
            atomic_fetch_sub(&dev->live_bytes, (int_fast64_t)st->bytes);
        free(st);
        return kiln__host_oom(op);
    }
    *out = t;
    return KILN_OK;
}
