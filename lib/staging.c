/* staging.c - host<->device copies through pooled pinned staging buffers on discrete devices
 * (see staging.h). */
#include "staging.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clcall.h"
#include "memory.h"
#include "queue.h"
#include "registry.h"
#include "status.h"

/* A pinned buffer, mapped for its whole life at ptr. */
typedef struct kiln__stage {
    struct kiln__stage *next;
    cl_mem mem;
    void *ptr;
    size_t size;
} kiln__stage;

struct kiln__staging {
    pthread_mutex_t lock;
    kiln__stage *idle;
    int nidle;
};

static atomic_size_t chunk_override; /* kiln__staging_set_chunk; 0: none */
static atomic_int live_stages;       /* kiln__staging_count */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static size_t env_chunk_size;

void kiln__staging_set_chunk(size_t bytes)
{
    atomic_store(&chunk_override, bytes);
}

int kiln__staging_count(void)
{
    return atomic_load(&live_stages);
}

static void read_env_chunk(void)
{
    const char *v = getenv("KILN_STAGING_CHUNK");
    bool ok = false;
    uint64_t b = v && *v ? kiln__parse_size(v, &ok) : 0;
    if (v && *v && (!ok || b == 0 || b > ((uint64_t)1 << 30)))
        kiln__log(KILN_LOG_WARN,
                  "KILN_STAGING_CHUNK='%s' is not a size from 1 byte to 1G like 4M; using 16M", v);
    else
        env_chunk_size = (size_t)b;
}

/* The chunk size for dev: the test override, else KILN_STAGING_CHUNK, else the default;
 * never more than the device's largest allocation. */
static size_t chunk_size(const kiln_device *dev)
{
    pthread_once(&env_once, read_env_chunk);
    size_t c = atomic_load(&chunk_override);
    if (!c)
        c = env_chunk_size ? env_chunk_size : KILN__STAGING_CHUNK;
    if (dev->info.max_alloc_bytes && c > dev->info.max_alloc_bytes)
        c = (size_t)dev->info.max_alloc_bytes;
    return c;
}

bool kiln__staging_used(const kiln_device *dev)
{
    return !dev->info.unified_memory;
}

/* Staging buffers go with their device (registry.c tells us: a hook). */
static pthread_once_t reset_once = PTHREAD_ONCE_INIT;

static void register_reset(void)
{
    kiln__registry_on_reset(kiln__staging_free);
}

/* The device's pool, created on first use. NULL only when out of host memory. */
static struct kiln__staging *get_staging(kiln_device *dev)
{
    pthread_once(&reset_once, register_reset);
    pthread_mutex_lock(&dev->lock);
    if (!dev->staging) {
        struct kiln__staging *p = kiln__calloc(1, sizeof *p);
        if (p) {
            pthread_mutex_init(&p->lock, NULL);
            dev->staging = p;
        }
    }
    struct kiln__staging *p = dev->staging;
    pthread_mutex_unlock(&dev->lock);
    return p;
}

void kiln__pinned_destroy(kiln_device *dev, cl_mem mem, void *ptr)
{
    cl_command_queue q;
    if (ptr && kiln__queue_private(dev, &q) == CL_SUCCESS) {
        kiln__cl.EnqueueUnmapMemObject(q, mem, ptr, 0, NULL, NULL);
        kiln__cl.Finish(q);
    }
    kiln__cl.ReleaseMemObject(mem);
}

cl_int kiln__pinned_create(kiln_device *dev, size_t size, cl_mem *mem, void **ptr,
                           const char **clfn)
{
    cl_command_queue q;
    *mem = NULL;
    *ptr = NULL;
    *clfn = "clCreateCommandQueue";
    cl_int err = kiln__queue_private(dev, &q);
    if (err != CL_SUCCESS)
        return err;
    *clfn = "clCreateBuffer";
    *mem = kiln__cl.CreateBuffer(kiln__device_context(dev),
                                 CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, size, NULL, &err);
    if (!*mem || err != CL_SUCCESS) {
        *mem = NULL;
        return err != CL_SUCCESS ? err : CL_MEM_OBJECT_ALLOCATION_FAILURE;
    }
    *clfn = "clEnqueueMapBuffer";
    *ptr = kiln__cl.EnqueueMapBuffer(q, *mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, size, 0, NULL,
                                     NULL, &err);
    if (!*ptr || err != CL_SUCCESS) {
        *ptr = NULL;
        kiln__pinned_destroy(dev, *mem, NULL);
        *mem = NULL;
        return err != CL_SUCCESS ? err : CL_MAP_FAILURE;
    }
    return CL_SUCCESS;
}

/* Unmap and release a stage (on dev's private queue: nothing queued on the device waits). */
static void stage_destroy(kiln_device *dev, kiln__stage *st)
{
    kiln__pinned_destroy(dev, st->mem, st->ptr);
    atomic_fetch_sub(&live_stages, 1);
    free(st);
}

static kiln__stage *stage_fail(kiln_device *dev, size_t size, const char *clfn, cl_int err)
{
    kiln__log(KILN_LOG_INFO,
              "%s: no pinned staging buffer of %zu bytes (%s failed with %s); copying from and "
              "to host memory directly",
              kiln__device_label(dev), size, clfn, kiln__cl_error_name(err));
    return NULL;
}

/* A new pinned buffer of size bytes, mapped; NULL (logged) when the driver refuses it. */
static kiln__stage *stage_create(kiln_device *dev, size_t size)
{
    kiln__stage *st = kiln__calloc(1, sizeof *st);
    if (!st)
        return stage_fail(dev, size, "calloc", CL_OUT_OF_HOST_MEMORY);
    st->size = size;
    const char *clfn;
    cl_int err = kiln__pinned_create(dev, size, &st->mem, &st->ptr, &clfn);
    if (err != CL_SUCCESS) {
        free(st);
        return stage_fail(dev, size, clfn, err);
    }
    atomic_fetch_add(&live_stages, 1);
    return st;
}

static void destroy_list(kiln_device *dev, kiln__stage *list)
{
    while (list) {
        kiln__stage *next = list->next;
        stage_destroy(dev, list);
        list = next;
    }
}

/* The stage size for a copy of n bytes: a whole chunk for a copy of a chunk or more, else the
 * power of two from KILN__STAGING_MIN that holds n (as CUDA's caching host allocators round), so
 * that reading one element does not pin a chunk. */
static size_t stage_size(size_t n, size_t chunk)
{
    size_t s = KILN__STAGING_MIN;
    while (s < n && s < chunk)
        s <<= 1;
    return s < chunk ? s : chunk;
}

/* Up to want (1 or 2) stages of at least size bytes (and at most chunk) for one copy into st[]:
 * idle ones, else new ones of size. Returns how many; 0: copy directly. */
static int stages_take(kiln_device *dev, size_t size, size_t chunk, int want, kiln__stage **st)
{
    struct kiln__staging *p = get_staging(dev);
    kiln__stage *drop = NULL;
    int got = 0;
    if (!p)
        return 0;
    pthread_mutex_lock(&p->lock);
    for (kiln__stage **at = &p->idle; *at && got < want;) {
        kiln__stage *s = *at;
        if (s->size < size) { /* too small for this copy: stays idle */
            at = &s->next;
            continue;
        }
        *at = s->next;
        p->nidle--;
        if (s->size <= chunk) {
            st[got++] = s;
        } else { /* the chunk size shrank (tests) */
            s->next = drop;
            drop = s;
        }
    }
    pthread_mutex_unlock(&p->lock);
    destroy_list(dev, drop);
    while (got < want && (st[got] = stage_create(dev, size)) != NULL)
        got++;
    return got;
}

/* Give n stages back to dev's pool, keeping at most KILN__STAGING_KEEP idle, the largest (none
 * larger than the current chunk). */
static void stages_give(kiln_device *dev, kiln__stage **st, int n)
{
    struct kiln__staging *p = dev->staging;
    size_t chunk = chunk_size(dev);
    kiln__stage *drop = NULL;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < n; i++) {
        kiln__stage *s = st[i];
        if (s->size <= chunk) {
            s->next = p->idle;
            p->idle = s;
            p->nidle++;
        } else {
            s->next = drop;
            drop = s;
        }
    }
    while (p->nidle > KILN__STAGING_KEEP && p->idle) { /* drop the smallest */
        kiln__stage **min = &p->idle;
        for (kiln__stage **at = &p->idle; *at; at = &(*at)->next)
            if ((*at)->size < (*min)->size)
                min = at;
        kiln__stage *s = *min;
        *min = s->next;
        p->nidle--;
        s->next = drop;
        drop = s;
    }
    pthread_mutex_unlock(&p->lock);
    destroy_list(dev, drop);
}

/* Wait for *ev, release it, clear it; CL_SUCCESS for none. */
static cl_int wait_release(cl_event *ev)
{
    if (!*ev)
        return CL_SUCCESS;
    cl_int err = kiln__cl.WaitForEvents(1, ev);
    kiln__cl.ReleaseEvent(*ev);
    *ev = NULL;
    return err;
}

/* Wait for every event of ev[2] (the copies still in flight must land before their stages are
 * reused); the first error when err is CL_SUCCESS. */
static cl_int wait_all(cl_event *ev, cl_int err, const char **clfn)
{
    for (int i = 0; i < 2; i++) {
        cl_int e = wait_release(&ev[i]);
        if (err == CL_SUCCESS && e != CL_SUCCESS) {
            err = e;
            *clfn = "clWaitForEvents";
        }
    }
    return err;
}

typedef struct copy_plan {
    cl_command_queue q;
    cl_mem mem;
    size_t off, n, chunk;
    kiln__stage **st;
    int nst;
    const char *clfn; /* the call that failed */
} copy_plan;

/* Host -> device: memcpy a chunk into a stage, enqueue its write, and fill the other stage
 * while it runs. */
static cl_int staged_write(copy_plan *c, const unsigned char *src)
{
    cl_event ev[2] = {NULL, NULL};
    cl_int err = CL_SUCCESS;
    int i = 0;
    for (size_t done = 0, len; done < c->n && err == CL_SUCCESS;
         done += len, i = (i + 1) % c->nst) {
        len = c->n - done < c->chunk ? c->n - done : c->chunk;
        c->clfn = "clWaitForEvents";
        err = wait_release(&ev[i]);
        if (err != CL_SUCCESS)
            break;
        memcpy(c->st[i]->ptr, src + done, len);
        c->clfn = "clEnqueueWriteBuffer";
        err = kiln__cl.EnqueueWriteBuffer(c->q, c->mem, CL_FALSE, c->off + done, len, c->st[i]->ptr,
                                          0, NULL, &ev[i]);
        if (err == CL_SUCCESS)
            kiln__cl.Flush(c->q);
        else
            ev[i] = NULL;
    }
    return wait_all(ev, err, &c->clfn);
}

/* Enqueue the read of the next chunk (from *next) into stage i. */
static cl_int read_chunk(copy_plan *c, int i, size_t *next, size_t *at, size_t *len, cl_event *ev)
{
    at[i] = *next;
    len[i] = c->n - *next < c->chunk ? c->n - *next : c->chunk;
    *next += len[i];
    c->clfn = "clEnqueueReadBuffer";
    cl_int err = kiln__cl.EnqueueReadBuffer(c->q, c->mem, CL_FALSE, c->off + at[i], len[i],
                                            c->st[i]->ptr, 0, NULL, &ev[i]);
    if (err == CL_SUCCESS)
        kiln__cl.Flush(c->q);
    else
        ev[i] = NULL;
    return err;
}

/* Device -> host: two chunks in flight; as one lands it is copied out and its stage reused. */
static cl_int staged_read(copy_plan *c, unsigned char *dst)
{
    cl_event ev[2] = {NULL, NULL};
    size_t at[2] = {0, 0}, len[2] = {0, 0}, next = 0;
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < c->nst && next < c->n && err == CL_SUCCESS; i++)
        err = read_chunk(c, i, &next, at, len, ev);
    for (int i = 0; err == CL_SUCCESS && ev[i]; i = (i + 1) % c->nst) {
        c->clfn = "clWaitForEvents";
        err = wait_release(&ev[i]);
        if (err != CL_SUCCESS)
            break;
        memcpy(dst + at[i], c->st[i]->ptr, len[i]);
        if (next < c->n)
            err = read_chunk(c, i, &next, at, len, ev);
    }
    return wait_all(ev, err, &c->clfn);
}

/* A plan for n bytes of mem on dev: up to max stages taken (two when there is more than a
 * chunk to double-buffer) when dev has no unified memory; nst 0: copy directly. */
static copy_plan plan_for(kiln_device *dev, cl_mem mem, size_t off, size_t n, kiln__stage **st,
                          int max)
{
    copy_plan c = {.q = kiln__queue(dev), .mem = mem, .off = off, .n = n, .st = st};
    c.chunk = chunk_size(dev);
    if (n > 0 && kiln__staging_used(dev))
        c.nst = stages_take(dev, stage_size(n, c.chunk), c.chunk, n > c.chunk ? max : 1, st);
    return c;
}

kiln_status kiln__staging_write(kiln_device *dev, cl_mem mem, size_t off, size_t n, const void *src,
                                const char *op)
{
    kiln__stage *st[2];
    copy_plan c = plan_for(dev, mem, off, n, st, 2);
    cl_int err;
    if (c.nst) {
        err = staged_write(&c, src);
        stages_give(dev, st, c.nst);
    } else {
        c.clfn = "clEnqueueWriteBuffer";
        err = kiln__cl.EnqueueWriteBuffer(c.q, mem, CL_TRUE, off, n, src, 0, NULL, NULL);
    }
    return err == CL_SUCCESS ? KILN_OK : kiln__queue_fail(err, op, c.clfn, dev);
}

kiln_status kiln__staging_read(kiln_device *dev, cl_mem mem, size_t off, size_t n, void *dst,
                               const char *op)
{
    kiln__stage *st[2];
    copy_plan c = plan_for(dev, mem, off, n, st, 2);
    cl_int err;
    if (c.nst) {
        err = staged_read(&c, dst);
        stages_give(dev, st, c.nst);
    } else {
        c.clfn = "clEnqueueReadBuffer";
        err = kiln__cl.EnqueueReadBuffer(c.q, mem, CL_TRUE, off, n, dst, 0, NULL, NULL);
    }
    return err == CL_SUCCESS ? KILN_OK : kiln__queue_fail(err, op, c.clfn, dev);
}

/* smem mapped (a unified-memory source: no copy), then written to dmem. *mapped false when the
 * map failed (the caller then copies in chunks). */
static kiln_status copy_mapped(kiln_device *sdev, cl_mem smem, kiln_device *ddev, cl_mem dmem,
                               size_t n, const char *op, bool *mapped)
{
    cl_command_queue sq = kiln__queue(sdev);
    cl_int err;
    void *p = kiln__cl.EnqueueMapBuffer(sq, smem, CL_TRUE, CL_MAP_READ, 0, n, 0, NULL, NULL, &err);
    *mapped = p && err == CL_SUCCESS;
    if (!*mapped)
        return KILN_OK;
    kiln_status s = kiln__staging_write(ddev, dmem, 0, n, p, op);
    kiln__cl.EnqueueUnmapMemObject(sq, smem, p, 0, NULL, NULL);
    return s;
}

/* Chunk by chunk: a blocking read from smem into a buffer (sdev's pinned stage, or malloc'd),
 * then a blocking write from it into dmem. */
static kiln_status copy_chunked(kiln_device *sdev, cl_mem smem, kiln_device *ddev, cl_mem dmem,
                                size_t n, const char *op)
{
    kiln__stage *st[1];
    copy_plan c = plan_for(sdev, smem, 0, n, st, 1);
    void *buf = c.nst ? st[0]->ptr : kiln__malloc(n < c.chunk ? n : c.chunk);
    if (!buf)
        return kiln__host_oom(op);
    cl_int err = CL_SUCCESS;
    kiln_device *failed = sdev;
    for (size_t off = 0, len; off < n && err == CL_SUCCESS; off += len) {
        len = n - off < c.chunk ? n - off : c.chunk;
        c.clfn = "clEnqueueReadBuffer";
        failed = sdev;
        err = kiln__cl.EnqueueReadBuffer(c.q, smem, CL_TRUE, off, len, buf, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            break;
        c.clfn = "clEnqueueWriteBuffer";
        failed = ddev;
        err = kiln__cl.EnqueueWriteBuffer(kiln__queue(ddev), dmem, CL_TRUE, off, len, buf, 0, NULL,
                                          NULL);
    }
    if (c.nst)
        stages_give(sdev, st, c.nst);
    else
        free(buf);
    return err == CL_SUCCESS ? KILN_OK : kiln__queue_fail(err, op, c.clfn, failed);
}

kiln_status kiln__staging_copy(kiln_device *sdev, cl_mem smem, kiln_device *ddev, cl_mem dmem,
                               size_t n, const char *op)
{
    bool mapped = false;
    kiln_status s = KILN_OK;
    if (sdev->info.unified_memory)
        s = copy_mapped(sdev, smem, ddev, dmem, n, op, &mapped);
    return mapped ? s : copy_chunked(sdev, smem, ddev, dmem, n, op);
}

void kiln__staging_free(kiln_device *dev)
{
    struct kiln__staging *p = dev->staging;
    if (!p)
        return;
    destroy_list(dev, p->idle);
    pthread_mutex_destroy(&p->lock);
    free(p);
    dev->staging = NULL;
}
