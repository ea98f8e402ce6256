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

/* dev's timed queue for profiling session gen: on the first use in a session, what is queued on
 * the plain queue finishes first (the two are not ordered with each other otherwise). NULL when
 * it cannot be made: the plain queue then serves, untimed. */
static cl_command_queue timed_queue(kiln_device *dev, unsigned gen)
{
    pthread_mutex_lock(&dev->lock);
    if (atomic_load_explicit(&dev->timed_gen, memory_order_relaxed) != gen) {
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
        if (dev->timed_queue)
            kiln__cl.Finish(dev->queue);
        atomic_store_explicit(&dev->timed_gen, gen, memory_order_release);
    }
    cl_command_queue q = dev->timed_queue;
    pthread_mutex_unlock(&dev->lock);
    return q;
}

cl_command_queue kiln__queue(const kiln_device *dev)
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
            if (q && !atomic_load(&devs[i]->lost))
                kiln__cl.Finish(q);
        }
    }
    pthread_mutex_unlock(&timing_lock);
}

int kiln__queue_index(const kiln_device *dev, cl_command_queue q)
{
    if (q == dev->private_queue)
        return 1;
    return 0;
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
    kiln__error_probe probe;
    kiln__queue_error_probe(dev, &probe);
    cl_int err = kiln__cl.Finish(kiln__queue(dev));
    kiln_status r = kiln__queue_error_report(dev, &probe, op);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clFinish", dev);
    return r;
}

cl_command_queue kiln_device_cl_queue(kiln_device *dev)
{
    return kiln__device_open(dev, "kiln_device_cl_queue") == KILN_OK ? kiln__queue(dev) : NULL;
}
