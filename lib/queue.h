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

#include <stdbool.h>
#include <stdint.h>

#include <stdatomic.h>

#include "kiln_cl.h"
#include "status.h"

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

/* Device timing for the profiler: on, kiln__queue returns each device's timed queue (one with
 * CL_QUEUE_PROFILING_ENABLE, made on first use; what the plain queue held finishes first); off,
 * the plain queue again (what the timed queues hold finishes first). Not while other threads
 * enqueue (kiln_profiler_start and _stop say so). */
void kiln__queue_timing(bool on);

/* Which of dev's queues q is, for the profiler's tracks: 0 the device queue (plain or timed),
 * 1 the allocator's private queue, 2 + i the queue in slot i of kiln_queue_create. */
int kiln__queue_index(const kiln_device *dev, cl_command_queue q);

/* The tag of the queue this thread enqueues on for dev: the OpenCL queue of its current
 * kiln_queue, or NULL for the device's default queue (plain or timed). Tensors' storages keep the
 * tag of the queue that last used them (tensor.c), the memory pool that of the queue that freed a
 * buffer (memory.c). */
cl_command_queue kiln__queue_tag(const kiln_device *dev);

/* Before a tensor's storage is used on this thread's queue: when *last (its tag) names another
 * queue, what was enqueued there until now comes first here (a marker there, a barrier here),
 * and *last becomes this queue's tag. Costs one relaxed load until a program creates a queue.
 * KILN_OK, or the failure naming op. */
kiln_status kiln__queue_order(kiln_device *dev, _Atomic(cl_command_queue) *last, const char *op);

/* KILN_ERR_INVALID_ARGUMENT naming op unless q is an open queue from kiln_queue_create (NULL,
 * forged, released); the device's loss if it was lost. */
kiln_status kiln__check_queue(const kiln_queue *q, const char *op);

/* dev's timed queue (CL_QUEUE_PROFILING_ENABLE), made on first use: events recorded on the
 * plain device queue are timed by a marker there. NULL if it cannot be made. */
cl_command_queue kiln__queue_timer(kiln_device *dev);

/* Flush dev's queue: what is enqueued starts without the host waiting for it. */
void kiln__queue_flush(const kiln_device *dev);

/* The device error word: kernels that can meet bad data (a class label, an index outside its
 * range) record the first violation there, as CUDA's device-side asserts do, and the host looks
 * at it where it synchronises anyway (kiln_device_synchronize, kiln_tensor_read and so
 * kiln_tensor_item, kiln_tensor_map and so checkpoint saves), never adding a synchronisation.
 * Layout, KILN__ERROR_WORD_BYTES bytes: int 0 the op's code (0: no error; see
 * kiln__queue_error_code), int 1 the kind (prelude.cl's KILN_ERROR_INDEX: an index, its element
 * zero; KILN_ERROR_LABEL: a class label, its row's loss NaN; KILN_ERROR_CLASS: a class label,
 * its one-hot row zeros), then longs at byte 8: the value, its position, the end of the valid
 * range. prelude.cl's kiln_report writes it. */
#define KILN__ERROR_WORD_BYTES 32

/* The error word of dev in *out, created (zeroed) on first use; an OpenCL error code on
 * failure. kiln__device_open(dev) must have succeeded. */
cl_int kiln__queue_error_word(kiln_device *dev, cl_mem *out);

/* The code kernels launched for the public function op write into the error word: op's name
 * interned (a static string; at most 64 names, later ones share code 1, named by their kernel
 * only). */
int kiln__queue_error_code(const char *op);

/* A kernel that may write dev's error word has been enqueued: the next check reads it. */
void kiln__queue_error_armed(kiln_device *dev);

/* At a synchronisation point of op on dev: when a kernel reported bad data since the last check,
 * KILN_ERR_INVALID_ARGUMENT with a message naming op, the op that launched the kernel, the value
 * and its position, and the error word cleared; else KILN_OK. Costs nothing when no reporting
 * kernel ran since the last check, one small blocking read otherwise (which waits for
 * everything enqueued before it). */
kiln_status kiln__queue_error_check(kiln_device *dev, const char *op);

/* The same check folded into a blocking command the caller makes anyway, saving the round trip
 * of a second blocking read (about 15 us on PoCL): kiln__queue_error_probe before the command
 * enqueues, when armed, a non-blocking read of the word into probe; kiln__queue_error_report
 * after it (whether it succeeded or not) looks at what was read. The caller's command must be
 * on dev's queue (in order) and blocking. */
typedef struct kiln__error_probe {
    cl_event read;
    int32_t word[KILN__ERROR_WORD_BYTES / 4];
} kiln__error_probe;
void kiln__queue_error_probe(kiln_device *dev, kiln__error_probe *probe);
kiln_status kiln__queue_error_report(kiln_device *dev, kiln__error_probe *probe, const char *op);

#endif
