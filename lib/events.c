/* events.c - kiln_event_*: points in a queue (torch.cuda.Event): record, wait, query, a queue
 * waiting for one, the device time between two. */
#include <stdlib.h>

#include "alloc.h"
#include "clcall.h"
#include "queue.h"
#include "registry.h"
#include "status.h"

#define EVENT_MAGIC 0x6b657674u /* "kevt" */

struct kiln_event {
    uint32_t magic;
    kiln_device *dev;
    cl_event ev;    /* the marker on the queue it was recorded on */
    cl_event timed; /* on the default queue: a marker of the timed queue after ev (its time) */
};

static kiln_status check_event(const kiln_event *ev, const char *op, const char *name)
{
    if (!ev)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
    if (ev->magic != EVENT_MAGIC)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s (%p) is not an event from kiln_event_record (or was released)",
                           op, name, (const void *)ev);
    return kiln__device_check_lost(ev->dev, op);
}

/* The queue q names on dev: q's own, or (NULL) this thread's current queue on dev. */
static kiln_status queue_of(kiln_device *dev, kiln_queue *q, const char *op, cl_command_queue *out)
{
    kiln_status s = q ? kiln__check_queue(q, op) : kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    if (q && kiln_queue_device(q) != dev)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH, "%s: the queue is on %s, not on %s", op,
                           kiln_device_spec(kiln_queue_device(q)), dev->info.spec);
    *out = q ? q->q : kiln__queue(dev);
    return KILN_OK;
}

kiln_status kiln_event_record(kiln_device *dev, kiln_queue *q, kiln_event **out)
{
    const char *op = "kiln_event_record";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_device(dev, op);
    cl_command_queue cq = NULL;
    if (s == KILN_OK)
        s = queue_of(dev, q, op, &cq);
    if (s != KILN_OK)
        return s;
    kiln_event *ev = kiln__calloc(1, sizeof *ev);
    if (!ev)
        return kiln__host_oom(op);
    ev->magic = EVENT_MAGIC;
    ev->dev = dev;
    cl_int err = kiln__cl.EnqueueMarkerWithWaitList(cq, 0, NULL, &ev->ev);
    if (err == CL_SUCCESS) {
        /* A queue without event profiling (the plain default queue) is timed by a marker of the
         * timed queue that waits for this one. */
        cl_command_queue_properties props = 0;
        cl_int perr =
            kiln__cl.GetCommandQueueInfo(cq, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
        if (perr == CL_SUCCESS && !(props & CL_QUEUE_PROFILING_ENABLE)) {
            cl_command_queue timer = kiln__queue_timer(dev);
            err = timer ? kiln__cl.EnqueueMarkerWithWaitList(timer, 1, &ev->ev, &ev->timed)
                        : CL_SUCCESS;
            if (err == CL_SUCCESS && timer)
                err = kiln__cl.Flush(timer);
        }
    }
    if (err != CL_SUCCESS) {
        kiln_event_release(ev);
        return kiln__queue_fail(err, op, "clEnqueueMarkerWithWaitList", dev);
    }
    *out = ev;
    return KILN_OK;
}

kiln_status kiln_event_wait(const kiln_event *ev)
{
    const char *op = "kiln_event_wait";
    kiln_status s = check_event(ev, op, "ev");
    if (s != KILN_OK)
        return s;
    cl_event both[2] = {ev->ev, ev->timed};
    cl_int err = kiln__cl.WaitForEvents(ev->timed ? 2 : 1, both);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clWaitForEvents", ev->dev);
    return KILN_OK;
}

/* Whether e is complete: KILN_OK and *done, or the failure. */
static kiln_status complete(cl_event e, kiln_device *dev, const char *op, bool *done)
{
    cl_int st = CL_QUEUED;
    cl_int err = kiln__cl.GetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
    if (err == CL_SUCCESS && st < 0) /* the command failed: a fault of the queue's earlier work */
        err = st;
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clGetEventInfo", dev);
    *done = st == CL_COMPLETE;
    return KILN_OK;
}

kiln_status kiln_event_query(const kiln_event *ev, bool *done)
{
    const char *op = "kiln_event_query";
    if (!done)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: done is NULL", op);
    *done = false;
    kiln_status s = check_event(ev, op, "ev");
    bool a = false, b = true;
    if (s == KILN_OK)
        s = complete(ev->ev, ev->dev, op, &a);
    if (s == KILN_OK && a && ev->timed)
        s = complete(ev->timed, ev->dev, op, &b);
    if (s == KILN_OK)
        *done = a && b;
    return s;
}

kiln_status kiln_queue_wait_event(kiln_queue *q, const kiln_event *ev)
{
    const char *op = "kiln_queue_wait_event";
    kiln_status s = check_event(ev, op, "ev");
    if (s != KILN_OK)
        return s;
    kiln_device *dev = q ? kiln_queue_device(q) : ev->dev;
    if (q && (s = kiln__check_queue(q, op)) != KILN_OK)
        return s;
    if (dev->platform != ev->dev->platform)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                           "%s: the event was recorded on %s, whose OpenCL context is not %s's; "
                           "wait for it on the host (kiln_event_wait)",
                           op, ev->dev->info.spec, dev->info.spec);
    cl_command_queue cq = q ? q->q : kiln__queue(dev);
    cl_int err = kiln__cl.EnqueueBarrierWithWaitList(cq, 1, &ev->ev, NULL);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clEnqueueBarrierWithWaitList", dev);
    return KILN_OK;
}

/* The device time of e's end, in ns of its device's clock. */
static kiln_status end_time(const kiln_event *e, const char *op, cl_ulong *t)
{
    cl_int err = kiln__cl.GetEventProfilingInfo(e->timed ? e->timed : e->ev,
                                                CL_PROFILING_COMMAND_END, sizeof *t, t, NULL);
    if (err == CL_PROFILING_INFO_NOT_AVAILABLE)
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: %s gave no time for the event (its driver times no markers)", op,
                           e->dev->info.spec);
    if (err != CL_SUCCESS)
        return kiln__queue_fail(err, op, "clGetEventProfilingInfo", e->dev);
    return KILN_OK;
}

kiln_status kiln_event_elapsed_ms(const kiln_event *start, const kiln_event *end, double *ms)
{
    const char *op = "kiln_event_elapsed_ms";
    if (!ms)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: ms is NULL", op);
    *ms = 0;
    kiln_status s = check_event(start, op, "start");
    if (s == KILN_OK)
        s = check_event(end, op, "end");
    if (s != KILN_OK)
        return s;
    if (start->dev != end->dev)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                           "%s: start was recorded on %s and end on %s; time events of one device",
                           op, start->dev->info.spec, end->dev->info.spec);
    bool a = false, b = false;
    s = kiln_event_query(start, &a);
    if (s == KILN_OK)
        s = kiln_event_query(end, &b);
    if (s != KILN_OK)
        return s;
    if (!a || !b)
        return kiln__error(KILN_ERR_STATE,
                           "%s: %s not reached yet; wait for it first (kiln_event_wait)", op,
                           !a && !b ? "start and end are"
                           : !a     ? "start is"
                                    : "end is");
    cl_ulong t0 = 0, t1 = 0;
    s = end_time(start, op, &t0);
    if (s == KILN_OK)
        s = end_time(end, op, &t1);
    if (s == KILN_OK)
        *ms = ((double)t1 - (double)t0) / 1e6;
    return s;
}

void kiln_event_release(kiln_event *ev)
{
    if (!ev || ev->magic != EVENT_MAGIC)
        return;
    if (ev->ev)
        kiln__cl.ReleaseEvent(ev->ev);
    if (ev->timed)
        kiln__cl.ReleaseEvent(ev->timed);
    ev->magic = 0;
    free(ev);
}
