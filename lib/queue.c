/* queue.c - the device's command queue: the one accessor every enqueue goes through, and the
 * public calls on the queue itself (kiln_device_synchronize, kiln_device_cl_queue). */
#include "queue.h"

#include <pthread.h>

#include "clcall.h"
#include "registry.h"
#include "status.h"

cl_command_queue kiln__queue(const kiln_device *dev)
{
    return dev->queue;
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

kiln_status kiln_device_synchronize(kiln_device *dev)
{
    const char *op = "kiln_device_synchronize";
    kiln_status s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    cl_int err = kiln__cl.Finish(kiln__queue(dev));
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clFinish", dev);
    return KILN_OK;
}

cl_command_queue kiln_device_cl_queue(kiln_device *dev)
{
    return kiln__device_open(dev, "kiln_device_cl_queue") == KILN_OK ? kiln__queue(dev) : NULL;
}
