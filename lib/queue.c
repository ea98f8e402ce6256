/* queue.c - the device's command queue: the one accessor every enqueue goes through, and the
 * public calls on the queue itself (kiln_device_synchronize, kiln_device_cl_queue). */
#include "queue.h"

#include "clcall.h"
#include "registry.h"
#include "status.h"

cl_command_queue kiln__queue(const kiln_device *dev)
{
    return dev->queue;
}

kiln_status kiln__queue_fail(cl_int err, const char *op, const char *clfn, const kiln_device *dev)
{
    return kiln__cl_fail(err, op, clfn, dev->info.spec);
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
