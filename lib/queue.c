/* queue.c - the device's command queue: the one accessor every enqueue goes through, and the
 * public calls on the queue itself (kiln_device_synchronize, kiln_device_cl_queue). */
#include "queue.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "clcall.h"
#include "registry.h"
#include "status.h"

/* The profiling session whose device times are taken (kiln__queue_timing): 0 when none. */
static atomic_uint timing_gen;
static unsigned timing_last;
static pthread_mutex_t timing_lock = PTHREAD_MUTEX_INITIALIZER;

/* dev's timed queue, made on first use (dev's lock held); NULL if the driver refuses. */
static cl_command_queue make_timed(kiln_device *dev)
{
    if (!dev->timed_queue) {
        cl_int err = CL_SUCCESS;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        dev->timed_queue = kiln__cl.CreateCommandQueue(kiln__device_context(dev), dev->id,
                                                       CL_QUEUE_PROFILING_ENABLE, &err);
#pragma GCC diagnostic pop
        if (err != CL_SUCCESS)
            dev->timed_queue = NULL;
    }
    return dev->timed_queue;
}

/* dev's timed queue for profiling session gen: on the first use in a session, what is queued on
 * the plain queue finishes first (the two are not ordered with each other otherwise). NULL when
 * it cannot be made: the plain queue then serves, untimed. */
static cl_command_queue timed_queue(kiln_device *dev, unsigned gen)
{
    pthread_mutex_lock(&dev->lock);
    if (atomic_load_explicit(&dev->timed_gen, memory_order_relaxed) != gen) {
        if (make_timed(dev))
            kiln__cl.Finish(dev->queue);
        atomic_store_explicit(&dev->timed_gen, gen, memory_order_release);
    }
    cl_command_queue q = dev->timed_queue;
    pthread_mutex_unlock(&dev->lock);
    return q;
}

/* ---- queues of kiln_queue_create, and each thread's current one ---- */

/* Set once the first kiln_queue_create: until then no thread has a current queue, and tensors'
 * queues need no ordering (the fast path of kiln__queue and kiln__queue_order). */
static atomic_bool queues_made;

enum { MAX_CURRENT = 16 };
static _Thread_local struct {
    int n;
    kiln_device *dev[MAX_CURRENT];
    kiln_queue *q[MAX_CURRENT];
} current;

static kiln_queue *current_of(const kiln_device *dev)
{
    for (int i = 0; i < current.n; i++)
        if (current.dev[i] == dev)
            return current.q[i];
    return NULL;
}

/* The queue of the default tag: the device queue, timed while the profiler times it. */
static cl_command_queue default_queue(const kiln_device *dev);

cl_command_queue kiln__queue(const kiln_device *dev)
{
    if (atomic_load_explicit(&queues_made, memory_order_relaxed)) {
        kiln_queue *q = current_of(dev);
        if (q)
            return q->q;
    }
    return default_queue(dev);
}

cl_command_queue kiln__queue_tag(const kiln_device *dev)
{
    if (!atomic_load_explicit(&queues_made, memory_order_relaxed))
        return NULL;
    kiln_queue *q = current_of(dev);
    return q ? q->q : NULL;
}

kiln_status kiln__queue_order(kiln_device *dev, _Atomic(cl_command_queue) *last, const char *op)
{
    if (!atomic_load_explicit(&queues_made, memory_order_relaxed))
        return KILN_OK;
    cl_command_queue cur = kiln__queue_tag(dev);
    cl_command_queue was = atomic_exchange(last, cur);
    if (was == cur)
        return KILN_OK;
    /* The work enqueued on the tensor's last queue until now comes first on this one. */
    cl_command_queue from = was ? was : default_queue(dev), to = cur ? cur : default_queue(dev);
    cl_event ev = NULL;
    cl_int err = kiln__cl.EnqueueMarkerWithWaitList(from, 0, NULL, &ev);
    if (err != CL_SUCCESS) {
        atomic_store(last, was);
        return kiln__queue_fail(err, op, "clEnqueueMarkerWithWaitList", dev);
    }
    kiln__cl.Flush(from); /* another queue waits for its event: OpenCL asks for a flush first */
    err = kiln__cl.EnqueueBarrierWithWaitList(to, 1, &ev, NULL);
    kiln__cl.ReleaseEvent(ev);
    if (err != CL_SUCCESS) {
        atomic_store(last, was);
        return kiln__queue_fail(err, op, "clEnqueueBarrierWithWaitList", dev);
    }
    return KILN_OK;
}

static bool queue_valid(const kiln_queue *q)
{
    if (!q)
        return false;
    int n;
    kiln_device **devs = kiln__devices_if_enumerated(&n);
    for (int i = 0; i < n; i++)
        if (q >= devs[i]->queues && q < devs[i]->queues + KILN__MAX_QUEUES)
            return q == &devs[i]->queues[q - devs[i]->queues];
    return false;
}

kiln_status kiln__check_queue(const kiln_queue *q, const char *op)
{
    if (!q)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the queue is NULL", op);
    if (!queue_valid(q))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the queue (%p) is not one from kiln_queue_create", op,
                           (const void *)q);
    pthread_mutex_lock(&q->dev->lock);
    bool open = q->open;
    pthread_mutex_unlock(&q->dev->lock);
    if (!open)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the queue was released (kiln_queue_release); create another", op);
    return kiln__device_check_lost(q->dev, op);
}

kiln_status kiln_queue_create(kiln_device *dev, kiln_queue **out)
{
    const char *op = "kiln_queue_create";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    pthread_mutex_lock(&dev->lock);
    int slot = -1;
    for (int i = 0; i < dev->nqueues && slot < 0; i++)
        if (!dev->queues[i].open)
            slot = i; /* a released queue's OpenCL queue, its work finished, serves again */
    if (slot < 0 && dev->nqueues == KILN__MAX_QUEUES) {
        pthread_mutex_unlock(&dev->lock);
        return kiln__error(KILN_ERR_OUT_OF_MEMORY,
                           "%s: %s has %d queues already, the most kiln makes per device; release "
                           "one (kiln_queue_release)",
                           op, dev->info.spec, KILN__MAX_QUEUES);
    }
    if (slot < 0) {
        cl_int err = CL_SUCCESS;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        cl_command_queue q = kiln__cl.CreateCommandQueue(kiln__device_context(dev), dev->id,
                                                         CL_QUEUE_PROFILING_ENABLE, &err);
#pragma GCC diagnostic pop
        if (err != CL_SUCCESS || !q) {
            pthread_mutex_unlock(&dev->lock);
            return kiln__cl_fail(err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, op,
                                 "clCreateCommandQueue", dev->info.spec);
        }
        slot = dev->nqueues++;
        dev->queues[slot] = (struct kiln_queue){.dev = dev, .q = q, .index = slot};
    }
    dev->queues[slot].open = true;
    pthread_mutex_unlock(&dev->lock);
    atomic_store(&queues_made, true);
    *out = &dev->queues[slot];
    return KILN_OK;
}

kiln_status kiln_queue_release(kiln_queue *q)
{
    const char *op = "kiln_queue_release";
    if (!q)
        return KILN_OK;
    kiln_status s = kiln__check_queue(q, op);
    if (s != KILN_OK)
        return s;
    for (int i = 0; i < current.n; i++)
        if (current.q[i] == q)
            return kiln__error(KILN_ERR_STATE,
                               "%s: the queue is this thread's current queue on %s; set another "
                               "first (kiln_queue_set_current(dev, NULL): the default queue)",
                               op, q->dev->info.spec);
    /* Its work finishes first: tensors last used on it need nothing more of it. */
    cl_int err = kiln__cl.Finish(q->q);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clFinish", q->dev);
    pthread_mutex_lock(&q->dev->lock);
    q->open = false;
    pthread_mutex_unlock(&q->dev->lock);
    return KILN_OK;
}

kiln_status kiln_queue_set_current(kiln_device *dev, kiln_queue *q)
{
    const char *op = "kiln_queue_set_current";
    kiln_status s = kiln__check_device(dev, op);
    if (s == KILN_OK && q)
        s = kiln__check_queue(q, op);
    if (s != KILN_OK)
        return s;
    if (q && q->dev != dev)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                           "%s: the queue is on %s, not on %s; pass a queue of that device", op,
                           q->dev->info.spec, dev->info.spec);
    int i = 0;
    while (i < current.n && current.dev[i] != dev)
        i++;
    if (i == current.n) {
        if (!q)
            return KILN_OK;
        if (current.n == MAX_CURRENT)
            return kiln__error(KILN_ERR_STATE,
                               "%s: this thread has current queues on %d devices, the most kiln "
                               "keeps; set the default queue on one first",
                               op, MAX_CURRENT);
        current.dev[current.n++] = dev;
    }
    current.q[i] = q;
    if (!q) { /* the default queue again: the entry goes */
        current.n--;
        current.dev[i] = current.dev[current.n];
        current.q[i] = current.q[current.n];
    }
    return KILN_OK;
}

kiln_queue *kiln_queue_current(kiln_device *dev)
{
    return kiln__device_valid(dev) ? current_of(dev) : NULL;
}

kiln_device *kiln_queue_device(const kiln_queue *q)
{
    return queue_valid(q) ? q->dev : NULL;
}

kiln_status kiln_queue_synchronize(kiln_queue *q)
{
    const char *op = "kiln_queue_synchronize";
    kiln_status s = kiln__check_queue(q, op);
    if (s != KILN_OK)
        return s;
    cl_int err = kiln__cl.Finish(q->q);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clFinish", q->dev);
    return kiln__queue_error_check(q->dev, op);
}

static cl_command_queue default_queue(const kiln_device *dev)
{
    /* One relaxed load (a plain load on x86) is all the untimed path costs. */
    unsigned gen = atomic_load_explicit(&timing_gen, memory_order_relaxed);
    if (gen == 0)
        return dev->queue;
    kiln_device *d = (kiln_device *)dev; /* the timed queue is made under the device's lock */
    if (atomic_load_explicit(&d->timed_gen, memory_order_acquire) == gen && d->timed_queue)
        return d->timed_queue;
    cl_command_queue q = timed_queue(d, gen);
    return q ? q : dev->queue;
}

void kiln__queue_timing(bool on)
{
    pthread_mutex_lock(&timing_lock);
    if (on) {
        timing_last = timing_last == UINT32_MAX ? 1 : timing_last + 1;
        atomic_store(&timing_gen, timing_last);
    } else if (atomic_exchange(&timing_gen, 0) != 0) {
        /* What the timed queues hold finishes before the plain queues take over. */
        int n;
        kiln_device **devs = kiln__devices_if_enumerated(&n);
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&devs[i]->lock);
            cl_command_queue q = devs[i]->timed_queue;
            pthread_mutex_unlock(&devs[i]->lock);
            if (q && !atomic_load(&devs[i]->lost) && kiln__driver_callable(devs[i]))
                kiln__cl.Finish(q);
        }
    }
    pthread_mutex_unlock(&timing_lock);
}

int kiln__queue_index(const kiln_device *dev, cl_command_queue q)
{
    if (q == dev->private_queue)
        return 1;
    for (int i = 0; i < dev->nqueues; i++)
        if (q == dev->queues[i].q)
            return 2 + i;
    return 0;
}

cl_command_queue kiln__queue_timer(kiln_device *dev)
{
    pthread_mutex_lock(&dev->lock);
    cl_command_queue q = make_timed(dev);
    pthread_mutex_unlock(&dev->lock);
    return q;
}

/* Whether err, from a command on a queue (not an allocation), means a kernel faulted. NVIDIA
 * reports an illegal memory access in a kernel as CL_OUT_OF_RESOURCES (sometimes
 * CL_MEM_OBJECT_ALLOCATION_FAILURE) at the next finish, blocking read or enqueue, and the
 * context is unusable from then on. At an allocation the same codes mean out of memory: memory.c
 * reports those itself. */
static bool is_kernel_fault(cl_int err)
{
    return err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE;
}

kiln_status kiln__queue_fail(cl_int err, const char *op, const char *clfn, kiln_device *dev)
{
    if (is_kernel_fault(err))
        kiln__device_mark_lost(dev, clfn, err);
    /* Once lost, any failure on the device (another thread's, say) is reported as the loss. */
    kiln_status s = kiln__device_check_lost(dev, op);
    if (s != KILN_OK)
        return s;
    return kiln__cl_fail(err, op, clfn, dev->info.spec);
}

cl_int kiln__queue_private(kiln_device *dev, cl_command_queue *out)
{
    cl_int err = CL_SUCCESS;
    pthread_mutex_lock(&dev->lock);
    if (!dev->private_queue) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        dev->private_queue =
            kiln__cl.CreateCommandQueue(kiln__device_context(dev), dev->id, 0, &err);
#pragma GCC diagnostic pop
        if (err == CL_SUCCESS && !dev->private_queue)
            err = CL_OUT_OF_RESOURCES;
        if (err != CL_SUCCESS)
            dev->private_queue = NULL;
    }
    *out = dev->private_queue;
    pthread_mutex_unlock(&dev->lock);
    return err;
}

void kiln__queue_flush(const kiln_device *dev)
{
    kiln__cl.Flush(kiln__queue(dev));
}

cl_int kiln__queue_error_word(kiln_device *dev, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    pthread_mutex_lock(&dev->lock);
    if (!dev->error_word) {
        int32_t zeros[KILN__ERROR_WORD_BYTES / 4] = {0};
        dev->error_word = kiln__cl.CreateBuffer(kiln__device_context(dev),
                                                CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                                sizeof zeros, zeros, &err);
        if (err == CL_SUCCESS && !dev->error_word)
            err = CL_OUT_OF_RESOURCES;
        if (err != CL_SUCCESS)
            dev->error_word = NULL;
    }
    *out = dev->error_word;
    pthread_mutex_unlock(&dev->lock);
    return err;
}

/* The names of the ops whose kernels report into error words, by code - 1. */
enum { MAX_REPORTING_OPS = 64 };
static const char *reporting_ops[MAX_REPORTING_OPS];
static int nreporting;
static pthread_mutex_t reporting_lock = PTHREAD_MUTEX_INITIALIZER;

int kiln__queue_error_code(const char *op)
{
    pthread_mutex_lock(&reporting_lock);
    int code = 0;
    for (int i = 0; i < nreporting && !code; i++)
        if (reporting_ops[i] == op || strcmp(reporting_ops[i], op) == 0)
            code = i + 1;
    if (!code && nreporting < MAX_REPORTING_OPS) {
        reporting_ops[nreporting++] = op;
        code = nreporting;
    }
    pthread_mutex_unlock(&reporting_lock);
    return code ? code : 1;
}

static const char *reporting_op(int code)
{
    pthread_mutex_lock(&reporting_lock);
    const char *op = code >= 1 && code <= nreporting ? reporting_ops[code - 1] : "a kernel";
    pthread_mutex_unlock(&reporting_lock);
    return op;
}

void kiln__queue_error_armed(kiln_device *dev)
{
    /* Set after the enqueue: a check that clears the flag before this store reads the word
     * after the kernel, and one that clears it after sees the flag set again. */
    atomic_store(&dev->error_armed, true);
}

/* Whether a reporting kernel ran since the last check (and the flag now cleared). */
static bool take_armed(kiln_device *dev)
{
    return atomic_load_explicit(&dev->error_armed, memory_order_relaxed) &&
           atomic_exchange(&dev->error_armed, false);
}

/* The error word as read: KILN_OK when clear, else the error (and the word cleared). */
static kiln_status report(kiln_device *dev, const int32_t *word, const char *op);

kiln_status kiln__queue_error_check(kiln_device *dev, const char *op)
{
    if (!take_armed(dev))
        return KILN_OK;
    int32_t word[KILN__ERROR_WORD_BYTES / 4];
    cl_int err = kiln__cl.EnqueueReadBuffer(kiln__queue(dev), dev->error_word, CL_TRUE, 0,
                                            sizeof word, word, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clEnqueueReadBuffer", dev);
    return report(dev, word, op);
}

void kiln__queue_error_probe(kiln_device *dev, kiln__error_probe *probe)
{
    probe->read = NULL;
    if (!take_armed(dev))
        return;
    cl_int err = kiln__cl.EnqueueReadBuffer(kiln__queue(dev), dev->error_word, CL_FALSE, 0,
                                            sizeof probe->word, probe->word, 0, NULL, &probe->read);
    if (err != CL_SUCCESS) {
        probe->read = NULL;
        atomic_store(&dev->error_armed, true); /* the next check reads it the plain way */
    }
}

kiln_status kiln__queue_error_report(kiln_device *dev, kiln__error_probe *probe, const char *op)
{
    if (!probe->read)
        return KILN_OK;
    /* Complete already (the caller's blocking command came after it on the queue): a status
     * check rather than a wait in practice. */
    cl_int err = kiln__cl.WaitForEvents(1, &probe->read);
    kiln__cl.ReleaseEvent(probe->read);
    probe->read = NULL;
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clWaitForEvents", dev);
    return report(dev, probe->word, op);
}

static kiln_status report(kiln_device *dev, const int32_t *word, const char *op)
{
    if (word[0] == 0)
        return KILN_OK;
    int64_t value, position, end;
    memcpy(&value, &word[2], sizeof value);
    memcpy(&position, &word[4], sizeof position);
    memcpy(&end, &word[6], sizeof end);
    int32_t zeros[KILN__ERROR_WORD_BYTES / 4] = {0};
    cl_int err = kiln__cl.EnqueueWriteBuffer(kiln__queue(dev), dev->error_word, CL_TRUE, 0,
                                             sizeof zeros, zeros, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clEnqueueWriteBuffer", dev);
    bool index = word[1] != 2 && word[1] != 3; /* prelude.cl's KILN_ERROR_LABEL, _CLASS */
    static const char *const holds[] = {"a zero", "a zero", "a NaN loss", "a row of zeros"};
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: an earlier call failed on %s: %s: %s %lld at %s %lld is outside [0, "
                       "%lld); its result holds %s there. Reported at the first call that waits "
                       "for the device; set KILN_CHECK=1 to have %s refuse it at once",
                       op, dev->info.spec, reporting_op(word[0]), index ? "index" : "class label",
                       (long long)value, index ? "position" : "row", (long long)position,
                       (long long)end, holds[word[1] >= 1 && word[1] <= 3 ? word[1] : 0],
                       reporting_op(word[0]));
}

kiln_status kiln_device_synchronize(kiln_device *dev)
{
    const char *op = "kiln_device_synchronize";
    kiln_status s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    /* torch.cuda.synchronize(): every queue of the device. */
    cl_int err = CL_SUCCESS;
    pthread_mutex_lock(&dev->lock);
    int nq = dev->nqueues;
    cl_command_queue qs[KILN__MAX_QUEUES];
    for (int i = 0; i < nq; i++)
        qs[i] = dev->queues[i].q;
    pthread_mutex_unlock(&dev->lock);
    for (int i = 0; i < nq && err == CL_SUCCESS; i++)
        err = kiln__cl.Finish(qs[i]);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clFinish", dev);
    if (nq > 0) { /* the error word's kernels may have run on any queue: read it after all */
        err = kiln__cl.Finish(default_queue(dev));
        if (err != CL_SUCCESS)
            return kiln__queue_fail(err, op, "clFinish", dev);
        return kiln__queue_error_check(dev, op);
    }
    kiln__error_probe probe;
    kiln__queue_error_probe(dev, &probe);
    err = kiln__cl.Finish(default_queue(dev));
    kiln_status r = kiln__queue_error_report(dev, &probe, op);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clFinish", dev);
    return r;
}

cl_command_queue kiln_device_cl_queue(kiln_device *dev)
{
    return kiln__device_open(dev, "kiln_device_cl_queue") == KILN_OK ? kiln__queue(dev) : NULL;
}
