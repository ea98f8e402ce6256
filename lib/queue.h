/* queue.h - the device's command queue: every enqueue goes through here; groundwork for events
 * and streams.
 *
 * Issue 8 asked for "a queue accessor in launch.c". tensor.c and the memory pool enqueue too and
 * sit below launch.c (launch.c includes tensor.h), so an accessor there would bring back the
 * tensor <-> launch cycle; the queue is its own small module, just above the registry, instead.
 * The registry creates the queue (kiln__device_open) and releases it (kiln__registry_reset);
 * everyone else reaches it through kiln__queue(). */
#ifndef KILN_QUEUE_H
#define KILN_QUEUE_H

#include "kiln_cl.h"

/* The queue that work on dev is enqueued on. kiln__device_open(dev) must have succeeded. */
cl_command_queue kiln__queue(const kiln_device *dev);

/* Report a failed enqueue (or finish, blocking read, map) on dev's queue: the status of err, with
 * a message naming op, the OpenCL function and the device. CL_OUT_OF_RESOURCES and
 * CL_MEM_OBJECT_ALLOCATION_FAILURE here are a kernel fault, not out of memory: dev is marked lost
 * (kiln__device_mark_lost) and KILN_ERR_DEVICE_LOST returned, as for any failure on a device
 * already lost. Allocation failures are memory.c's to report (they stay out of memory). */
kiln_status kiln__queue_fail(cl_int err, const char *op, const char *clfn, kiln_device *dev);

/* A second queue of dev, for work that must not wait for what is queued on the device queue
 * (nor hold it up): the memory pool makes new buffers real there. Created on first use, under
 * dev's lock, once kiln__device_open(dev) has succeeded; an OpenCL error code on failure. */
cl_int kiln__queue_private(kiln_device *dev, cl_command_queue *out);

/* Flush dev's queue: what is enqueued starts without the host waiting for it. */
void kiln__queue_flush(const kiln_device *dev);

#endif
