/* memory.c - the per-device caching allocator of device buffers, its stats and budget. */
#include "memory.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clcall.h"
#include "queue.h"
#include "registry.h"
#include "status.h"

#define KILN__MIB ((size_t)1 << 20)
#define KILN__SMALL_STEP 512 /* granularity of size classes up to 1 MiB */

/* A cached (free) buffer. */
typedef struct kiln__block {
    struct kiln__block *next;
    cl_mem mem;
    size_t capacity;
    /* The queue tag (kiln__queue_tag) of the queue that freed it: only that queue may take it
     * again, since its work on the buffer may still be pending there (PyTorch's per-stream
     * blocks). */
    cl_command_queue queue;
} kiln__block;

struct kiln__pool {
    pthread_mutex_t lock;
    kiln__block *cached_list;
    uint64_t allocated; /* capacity held by live tensors */
    uint64_t peak;
    uint64_t cached;
    uint64_t driver_allocations;
    uint64_t budget;
    /* KILN_MEMORY_LIMIT's value when it was malformed at the pool's creation (every allocation
     * fails until kiln_device_set_memory_limit sets a cap); "" when it was fine or unset. */
    char bad_limit[64];
    bool limit_malformed;
};

uint64_t kiln__parse_size(const char *s, bool *ok)
{
    char *end;
    *ok = false;
    if (!s || !isdigit((unsigned char)*s))
        return 0;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return 0;
    /* K, M, G, T: 1024 to the power of the letter's position. */
    static const char units[] = "KMGT";
    const char *unit = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    uint64_t mult = 1;
    if (unit) {
        mult = (uint64_t)1 << (10 * (unit - units + 1));
        end++;
    }
    if (mult > 1 && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || (v && UINT64_MAX / mult < v))
        return 0;
    *ok = true;
    return (uint64_t)v * mult;
}

/* The pool's initial budget from KILN_MEMORY_LIMIT (unset: none). A malformed value (empty
 * included) is kept in p->bad_limit and makes every allocation fail (check_limit). */
static void env_budget(struct kiln__pool *p)
{
    const char *v = getenv("KILN_MEMORY_LIMIT");
    bool ok = true;
    p->budget = v ? kiln__parse_size(v, &ok) : 0;
    p->limit_malformed = !ok;
    if (!ok)
        snprintf(p->bad_limit, sizeof p->bad_limit, "%.48s%s", v, strlen(v) > 48 ? "..." : "");
}

/* Allocations fail while KILN_MEMORY_LIMIT was malformed (and no limit was set since). */
static kiln_status check_limit(struct kiln__pool *p, const char *op)
{
    pthread_mutex_lock(&p->lock);
    bool bad = p->limit_malformed;
    char shown[sizeof p->bad_limit];
    memcpy(shown, p->bad_limit, sizeof shown);
    pthread_mutex_unlock(&p->lock);
    if (!bad)
        return KILN_OK;
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: KILN_MEMORY_LIMIT='%s' is not a size; give a whole number of bytes "
                       "with an optional K, M, G or T (powers of 1024, optionally followed by iB "
                       "or B): 1073741824, 512M, 2G, 64MiB; or unset it for no limit",
                       op, shown);
}

/* Pools go with their device (registry.c tells us: a hook). */
static pthread_once_t reset_once = PTHREAD_ONCE_INIT;

static void register_reset(void)
{
    kiln__registry_on_reset(kiln__mem_pool_free);
}

/* The device's pool, created on first use. NULL only when out of host memory. */
static struct kiln__pool *get_pool(kiln_device *dev)
{
    pthread_once(&reset_once, register_reset);
    pthread_mutex_lock(&dev->lock);
    if (!dev->pool) {
        struct kiln__pool *p = kiln__calloc(1, sizeof *p);
        if (p) {
            pthread_mutex_init(&p->lock, NULL);
            env_budget(p);
            dev->pool = p;
        }
    }
    struct kiln__pool *pool = dev->pool;
    pthread_mutex_unlock(&dev->lock);
    return pool;
}

static kiln_status pool_for(kiln_device *dev, const char *op, struct kiln__pool **out)
{
    kiln_status s = kiln__check_device(dev, op);
    if (s != KILN_OK)
        return s;
    *out = get_pool(dev);
    return *out ? KILN_OK : kiln__host_oom(op);
}

/* The size class of a request: 512-byte steps up to 1 MiB, then four classes per power of
 * two, so that buffers of similar sizes are shared without wasting more than 25%. */
static size_t size_class(size_t bytes, uint64_t max_alloc)
{
    size_t step = KILN__SMALL_STEP;
    if (bytes > KILN__MIB) {
        size_t p = KILN__MIB;
        while (p <= bytes / 2)
            p *= 2;
        step = p / 4;
    }
    size_t cls = bytes + (step - bytes % step) % step;
    if (cls < bytes || (max_alloc && cls > max_alloc))
        return bytes;
    return cls;
}

/* Oclgrind, kiln's kernel sanitizer in the tests, allocates eagerly, and its
 * uninitialised-value checker (21.10) sizes its record of a buffer by the last host write or
 * fill: after one of less than the whole buffer, kernel writes past that size are lost and
 * reads there are reported (reproduced with raw OpenCL). So on Oclgrind there is no touch and
 * no size-class rounding: every host write covers its whole buffer. The record also outlives
 * clReleaseMemObject and passes to the next buffer in the same slot, so releasing buffers on
 * Oclgrind (kiln_device_empty_cache) can bring such reports back; reuse from the cache does not.
 * The places below that check kiln__device_is_oclgrind(dev) follow from this. */

static void update_peak(struct kiln__pool *p)
{
    if (p->allocated > p->peak)
        p->peak = p->allocated;
}

/* Take a cached buffer of exactly `capacity` bytes that queue (a tag) freed, or NULL. Called
 * under p->lock. */
static cl_mem take_cached(struct kiln__pool *p, size_t capacity, cl_command_queue queue)
{
    for (kiln__block **b = &p->cached_list; *b; b = &(*b)->next) {
        if ((*b)->capacity != capacity || (*b)->queue != queue)
            continue;
        kiln__block *blk = *b;
        cl_mem mem = blk->mem;
        *b = blk->next;
        p->cached -= capacity;
        free(blk);
        return mem;
    }
    return NULL;
}

/* Detach the whole cache (under p->lock); free_blocks releases it outside the lock. */
static kiln__block *detach_cache(struct kiln__pool *p)
{
    kiln__block *list = p->cached_list;
    p->cached_list = NULL;
    p->cached = 0;
    return list;
}

static void free_blocks(kiln__block *list)
{
    while (list) {
        kiln__block *next = list->next;
        kiln__cl.ReleaseMemObject(list->mem);
        free(list);
        list = next;
    }
}

static void empty_cache(struct kiln__pool *p)
{
    pthread_mutex_lock(&p->lock);
    kiln__block *list = detach_cache(p);
    pthread_mutex_unlock(&p->lock);
    free_blocks(list);
}

static void CL_CALLBACK free_host_backing(cl_mem mem, void *host)
{
    (void)mem;
    free(host);
}

/* A buffer over host memory that kiln allocates and commits itself, for a CPU device. PoCL
 * allocates a buffer's memory only at its first use, and asserts (aborting the process) when
 * that fails; the operating system then commits each page only when it is first written. Here
 * the memory is allocated and written before the driver sees it, so running out of memory
 * (an address-space limit, a failing malloc) is an error at allocation. CL_MEM_USE_HOST_PTR on
 * a device that shares host memory uses the pointer in place; the driver calls back to free it
 * once the buffer is destroyed, after the work that used it. */
static cl_mem create_host_backed(kiln_device *dev, size_t capacity, cl_int *err, const char **clfn)
{
    void *host = NULL;
    *clfn = "posix_memalign";
    if (posix_memalign(&host, 4096, capacity ? capacity : 1) != 0) {
        *err = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    memset(host, 0, capacity);
    *clfn = "clCreateBuffer";
    cl_mem mem = kiln__cl.CreateBuffer(
        kiln__device_context(dev), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, capacity, host, err);
    if (*err == CL_SUCCESS && !mem)
        *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    if (*err == CL_SUCCESS) {
        *clfn = "clSetMemObjectDestructorCallback";
        *err = kiln__cl.SetMemObjectDestructorCallback(mem, free_host_backing, host);
        if (*err == CL_SUCCESS)
            return mem;
        kiln__cl.ReleaseMemObject(mem); /* never used: destroyed at once */
    }
    free(host);
    return NULL;
}

/* A new driver buffer, made real before it is handed out, so that a driver that allocates
 * lazily fails here rather than at first use. A CPU device gets host memory kiln commits
 * (create_host_backed). A discrete device (NVIDIA) backs the whole buffer at its first use, so
 * writing one byte is enough; a GPU that shares host memory gets the whole buffer filled, since
 * the operating system commits each page at its first write. The work goes to the device's
 * private queue: waiting on it does not wait for the device queue's work. */
bool kiln__mem_host_backed(const kiln_device *dev)
{
    return dev->info.unified_memory && dev->info.type == KILN_DEVICE_CPU &&
           !kiln__device_is_oclgrind(dev);
}

static void *host_ptr_of(cl_mem mem)
{
    void *host = NULL;
    if (kiln__cl.GetMemObjectInfo(mem, CL_MEM_HOST_PTR, sizeof host, &host, NULL) != CL_SUCCESS)
        return NULL;
    return host;
}

void kiln__mem_learn_in_place(kiln_device *dev, cl_mem mem, const void *mapped)
{
    if (atomic_load(&dev->host_in_place) != 0 || !kiln__mem_host_backed(dev))
        return;
    void *host = host_ptr_of(mem);
    if (!host)
        return;
    int unknown = 0;
    atomic_compare_exchange_strong(&dev->host_in_place, &unknown, host == mapped ? 1 : -1);
}

void *kiln__mem_in_place(kiln_device *dev, cl_mem mem)
{
    return atomic_load(&dev->host_in_place) == 1 ? host_ptr_of(mem) : NULL;
}

static cl_mem create_real(kiln_device *dev, size_t capacity, cl_int *err, const char **clfn)
{
    static const unsigned char zero = 0;
    if (kiln__mem_host_backed(dev))
        return create_host_backed(dev, capacity, err, clfn);
    cl_command_queue q;
    *clfn = "clCreateCommandQueue";
    *err = kiln__queue_private(dev, &q);
    if (*err != CL_SUCCESS)
        return NULL;
    *clfn = "clCreateBuffer";
    cl_mem mem =
        kiln__cl.CreateBuffer(kiln__device_context(dev), CL_MEM_READ_WRITE, capacity, NULL, err);
    if (*err != CL_SUCCESS || !mem) {
        if (*err == CL_SUCCESS)
            *err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
        return NULL;
    }
    if (kiln__device_is_oclgrind(dev))
        return mem;
    if (dev->info.unified_memory) {
        *clfn = "clEnqueueFillBuffer";
        *err = kiln__cl.EnqueueFillBuffer(q, mem, &zero, 1, 0, capacity, 0, NULL, NULL);
        if (*err == CL_SUCCESS) {
            *clfn = "clFinish";
            *err = kiln__cl.Finish(q);
        }
    } else {
        *clfn = "clEnqueueWriteBuffer";
        *err = kiln__cl.EnqueueWriteBuffer(q, mem, CL_TRUE, 0, 1, &zero, 0, NULL, NULL);
    }
    if (*err != CL_SUCCESS) {
        kiln__cl.ReleaseMemObject(mem);
        return NULL;
    }
    return mem;
}

static kiln_status driver_fail(kiln_device *dev, const char *op, size_t capacity, cl_int err,
                               const char *clfn)
{
    kiln_status s = kiln__cl_status(err);
    if (err == CL_INVALID_BUFFER_SIZE)
        s = KILN_ERR_OUT_OF_MEMORY;
    return kiln__error(s,
                       "%s: could not allocate %zu bytes on %s: %s failed with %s (%d); free "
                       "tensors, call kiln_device_empty_cache() or use a smaller size",
                       op, capacity, kiln__device_label(dev), clfn, kiln__cl_error_name(err),
                       (int)err);
}

static kiln_status over_budget(kiln_device *dev, const char *op, size_t capacity,
                               uint64_t allocated, uint64_t budget)
{
    return kiln__error(KILN_ERR_OUT_OF_MEMORY,
                       "%s: allocating %zu bytes on %s would exceed its memory limit of %" PRIu64
                       " bytes (%" PRIu64 " bytes held by live tensors); release tensors or "
                       "raise the limit (kiln_device_set_memory_limit, KILN_MEMORY_LIMIT)",
                       op, capacity, kiln__device_label(dev), budget, allocated);
}

static kiln_status over_device(kiln_device *dev, const char *op, size_t capacity,
                               uint64_t allocated)
{
    return kiln__error(KILN_ERR_OUT_OF_MEMORY,
                       "%s: allocating %zu bytes on %s would exceed its global memory of %" PRIu64
                       " bytes (CL_DEVICE_GLOBAL_MEM_SIZE; %" PRIu64 " bytes held by live "
                       "tensors); release tensors or use smaller ones",
                       op, capacity, kiln__device_label(dev), dev->info.global_mem_bytes,
                       allocated);
}

/* The most that live tensors and cached buffers together may hold on dev: the budget when one
 * is set, and never more than the global memory the device reports (drivers that allocate
 * lazily accept more and fail, or abort the process, at first use). 0: no limit known. */
static uint64_t hold_limit(const kiln_device *dev, const struct kiln__pool *p)
{
    uint64_t dev_mem = dev->info.global_mem_bytes;
    if (p->budget && (!dev_mem || p->budget < dev_mem))
        return p->budget;
    return dev_mem;
}

/* Reserve capacity in the stats, reusing a cached buffer when there is one (*mem). */
static kiln_status reserve(kiln_device *dev, struct kiln__pool *p, size_t capacity, const char *op,
                           cl_mem *mem)
{
    kiln__block *drop = NULL;
    pthread_mutex_lock(&p->lock);
    uint64_t limit = hold_limit(dev, p);
    if (limit && (capacity > limit || p->allocated > limit - capacity)) {
        uint64_t allocated = p->allocated, budget = p->budget;
        kiln__block *list = detach_cache(p);
        pthread_mutex_unlock(&p->lock);
        free_blocks(list);
        return budget == limit ? over_budget(dev, op, capacity, allocated, budget)
                               : over_device(dev, op, capacity, allocated);
    }
    *mem = take_cached(p, capacity, kiln__queue_tag(dev));
    /* Keep what the driver holds for this device within the limit too. */
    if (!*mem && limit && p->allocated + p->cached > limit - capacity)
        drop = detach_cache(p);
    p->allocated += capacity;
    if (*mem)
        update_peak(p);
    pthread_mutex_unlock(&p->lock);
    free_blocks(drop);
    return KILN_OK;
}

kiln_status kiln__mem_alloc(kiln_device *dev, size_t bytes, const char *op, cl_mem *out,
                            size_t *capacity)
{
    struct kiln__pool *p;
    *out = NULL;
    *capacity = 0;
    kiln_status s = pool_for(dev, op, &p);
    if (s == KILN_OK)
        s = check_limit(p, op);
    if (s == KILN_OK)
        s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    if (dev->info.max_alloc_bytes && bytes > dev->info.max_alloc_bytes)
        return kiln__error(KILN_ERR_OUT_OF_MEMORY,
                           "%s: %zu bytes exceed the largest single allocation %s allows (%" PRIu64
                           " bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE); split the tensor",
                           op, bytes, kiln__device_label(dev), dev->info.max_alloc_bytes);
    size_t cap =
        kiln__device_is_oclgrind(dev) ? bytes : size_class(bytes, dev->info.max_alloc_bytes);
    cl_mem mem = NULL; /* reserve() sets it only when it succeeds */
    s = reserve(dev, p, cap, op, &mem);
    if (s != KILN_OK || mem) {
        *out = mem;
        *capacity = mem ? cap : 0;
        return s;
    }
    cl_int err;
    const char *clfn;
    mem = create_real(dev, cap, &err, &clfn);
    if (!mem) {
        empty_cache(p);
        mem = create_real(dev, cap, &err, &clfn);
    }
    pthread_mutex_lock(&p->lock);
    if (mem) {
        p->driver_allocations++;
        update_peak(p);
    } else {
        p->allocated -= cap;
    }
    pthread_mutex_unlock(&p->lock);
    if (!mem)
        return driver_fail(dev, op, cap, err, clfn);
    *out = mem;
    *capacity = cap;
    return KILN_OK;
}

void kiln__mem_free(kiln_device *dev, cl_mem mem, size_t bytes, size_t capacity,
                    cl_command_queue queue)
{
    (void)bytes;
    if (!mem)
        return;
    struct kiln__pool *p = dev->pool;
    kiln__block *blk = kiln__malloc(sizeof *blk);
    pthread_mutex_lock(&p->lock);
    p->allocated -= capacity;
    if (blk) {
        blk->mem = mem;
        blk->capacity = capacity;
        blk->queue = queue;
        blk->next = p->cached_list;
        p->cached_list = blk;
        p->cached += capacity;
    }
    pthread_mutex_unlock(&p->lock);
    /* Without host memory for the cache entry the buffer goes back to the driver. The driver
     * defers the release until queued work using it has finished. */
    if (!blk)
        kiln__cl.ReleaseMemObject(mem);
}

kiln_status kiln_device_memory_stats(kiln_device *dev, kiln_memory_stats *stats)
{
    struct kiln__pool *p;
    kiln_status s = pool_for(dev, "kiln_device_memory_stats", &p);
    if (s != KILN_OK)
        return s;
    if (!stats)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_device_memory_stats: stats is NULL");
    memset(stats, 0, sizeof *stats);
    pthread_mutex_lock(&p->lock);
    stats->allocated_bytes = p->allocated;
    stats->peak_allocated_bytes = p->peak;
    stats->cached_bytes = p->cached;
    stats->driver_allocations = p->driver_allocations;
    stats->budget_bytes = p->budget;
    pthread_mutex_unlock(&p->lock);
    return KILN_OK;
}

static void reset_peak(struct kiln__pool *p, uint64_t unused)
{
    (void)unused;
    pthread_mutex_lock(&p->lock);
    p->peak = p->allocated;
    pthread_mutex_unlock(&p->lock);
}

static void empty_cache_of(struct kiln__pool *p, uint64_t unused)
{
    (void)unused;
    empty_cache(p);
}

static void set_budget(struct kiln__pool *p, uint64_t bytes)
{
    pthread_mutex_lock(&p->lock);
    p->budget = bytes;
    p->limit_malformed = false;
    pthread_mutex_unlock(&p->lock);
}

/* Run fn(pool, arg) on dev's pool: the body of the public calls that only change the pool. */
static kiln_status with_pool(kiln_device *dev, const char *op,
                             void (*fn)(struct kiln__pool *, uint64_t), uint64_t arg)
{
    struct kiln__pool *p;
    kiln_status s = pool_for(dev, op, &p);
    if (s == KILN_OK)
        fn(p, arg);
    return s;
}

kiln_status kiln_device_reset_peak(kiln_device *dev)
{
    return with_pool(dev, "kiln_device_reset_peak", reset_peak, 0);
}

kiln_status kiln_device_empty_cache(kiln_device *dev)
{
    return with_pool(dev, "kiln_device_empty_cache", empty_cache_of, 0);
}

kiln_status kiln_device_set_memory_limit(kiln_device *dev, uint64_t bytes)
{
    return with_pool(dev, "kiln_device_set_memory_limit", set_budget, bytes);
}

void kiln__mem_pool_free(kiln_device *dev)
{
    struct kiln__pool *p = dev->pool;
    if (!p)
        return;
    dev->pool = NULL;
    free_blocks(detach_cache(p));
    pthread_mutex_destroy(&p->lock);
    free(p);
}
