/* registry.h - the process-wide list of OpenCL platforms and devices. */
#ifndef KILN_REGISTRY_H
#define KILN_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>

#include "kiln_cl.h"

#define KILN__DEVICE_MAGIC 0x6b646576u /* "kdev" */

struct kiln__pool;     /* memory.c */
struct kiln__programs; /* program.c */
struct kiln__staging;  /* staging.c */

/* One OpenCL platform; its usable, visible devices share one context. */
typedef struct kiln__platform {
    cl_platform_id id;
    int index;
    cl_context context; /* created on first use of any of its devices */
    cl_int context_error;
    bool context_tried;
} kiln__platform;

/* A queue a program made with kiln_queue_create (queue.c): a slot of its device, kept with its
 * cl_command_queue for the life of the device, so a handle is checked by address and a released
 * queue's OpenCL queue is reused by the next kiln_queue_create. */
#define KILN__MAX_QUEUES 32
struct kiln_queue {
    kiln_device *dev;
    cl_command_queue q; /* created with CL_QUEUE_PROFILING_ENABLE (events time it) */
    int index;          /* in dev->queues */
    bool open;          /* between kiln_queue_create and kiln_queue_release */
};

struct kiln_device {
    uint32_t magic;
    kiln_device_info info;
    kiln__platform *platform;
    cl_device_id id;
    int type_index;
    bool nvidia;
    /* Lazily created, under lock: the queue (and the platform's context), the memory pool,
     * the built-program cache and the staging buffers. */
    pthread_mutex_t lock;
    cl_command_queue queue;
    cl_command_queue private_queue; /* queue.c's second queue, made on first use */
    /* queue.c's queue with CL_QUEUE_PROFILING_ENABLE, which kiln__queue returns while the
     * profiler times the device (made on first use, kept for the next time); timed_gen is the
     * profiling session it was switched to (queue.c) */
    cl_command_queue timed_queue;
    atomic_uint timed_gen;
    /* queue.c's queues of kiln_queue_create (slots, under lock; nqueues slots made) */
    struct kiln_queue queues[KILN__MAX_QUEUES];
    int nqueues;
    /* queue.c's device error word (made on first use, under lock) and whether a kernel that may
     * write it was enqueued since the host last looked */
    cl_mem error_word;
    atomic_bool error_armed;
    struct kiln__pool *pool;
    struct kiln__programs *programs;
    /* Set once, when a kernel fault made the device unusable (kiln__device_mark_lost): every
     * later call on it fails at once with KILN_ERR_DEVICE_LOST and lost_reason, written before
     * the flag and never changed after. */
    atomic_bool lost;
    char lost_reason[512];
    /* ops/matmul_clblast.c's: which CLBlast routines have run here (their first call compiles,
     * with stdout captured), and whether CLBlast failed here, with why (written before the flag,
     * never changed after): the automatic matmul path is then the built-in kernel. */
    atomic_uint clblast_warm;
    atomic_bool clblast_failed;
    char clblast_reason[256];
    struct kiln__staging *staging; /* staging.c's pinned buffers (devices without unified memory) */
    /* memory.c's: whether the driver runs kiln's host-backed buffers in place (a map of one
     * returned the buffer's own host pointer): 0 not known yet, 1 yes, -1 no */
    atomic_int host_in_place;
    /* tensor.c's: tensor headers alive on the device, and the bytes of their storages (memory
     * shared by views counted once), for kiln_live_objects_get and the report at exit */
    atomic_int_fast64_t live_tensors, live_bytes;
};

/* Whether dev is a device handle kiln gave out (not NULL, not forged). */
bool kiln__device_valid(const kiln_device *dev);

/* Make sure the device's context and queue exist. On failure the message names op. */
kiln_status kiln__device_open(kiln_device *dev, const char *op);

/* The device's context and queue (kiln__device_open must have succeeded). */
static inline cl_context kiln__device_context(const kiln_device *dev)
{
    return dev->platform->context;
}

/* "cpu:0 (pthread-skylake...)": how messages name a device. */
const char *kiln__device_label(const kiln_device *dev);

/* Whether dev is Oclgrind, the simulator the tests use as a GPU: memory.c, tensor.c and the exit
 * handler work around its quirks, each explained where it is handled. */
bool kiln__device_is_oclgrind(const kiln_device *dev);

/* Check a device argument: KILN_ERR_INVALID_ARGUMENT naming op when NULL or forged. */
kiln_status kiln__check_device(const kiln_device *dev, const char *op);

/* Every device (visible and usable), in listing order; count in *n. Enumerates on first call. */
kiln_device **kiln__devices(int *n);

/* Test only: forget the enumeration so the next call enumerates again (after a test changed
 * the environment or the kiln__cl table). Releases device queues and platform contexts. Valid
 * only while no other thread uses kiln and no tensor or program exists: device handles given
 * out before become invalid. */
void kiln__registry_reset(void);

/* A list of hooks a layer keeps to tell the layers above of an event on a device (this one's
 * reset, program.c's kiln__programs_on_free): at most KILN__DEVICE_HOOKS, registered once each
 * (pthread_once) and never removed. Static lists start as KILN__DEVICE_HOOKS_INIT. */
#define KILN__DEVICE_HOOKS 8
typedef struct kiln__device_hooks {
    pthread_mutex_t lock;
    int n;
    void (*fn[KILN__DEVICE_HOOKS])(kiln_device *dev);
} kiln__device_hooks;
#define KILN__DEVICE_HOOKS_INIT                                                                    \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, 0,                                                              \
        {                                                                                          \
            0                                                                                      \
        }                                                                                          \
    }
void kiln__device_hooks_add(kiln__device_hooks *h, void (*fn)(kiln_device *dev));
/* Call every hook of h with dev, in the order registered or (last_first) the reverse. */
void kiln__device_hooks_call(kiln__device_hooks *h, kiln_device *dev, bool last_first);

/* A hook, for a layer above that attaches something to a device (its memory pool, staging
 * buffers, programs): kiln__registry_reset calls fn with each device before forgetting it, the
 * last registered first, so that it frees what it attached. Register (once) before attaching
 * the first. */
void kiln__registry_on_reset(void (*fn)(kiln_device *dev));

/* Mark dev lost: clfn failed with err in a way that leaves its context unusable (a kernel
 * fault). The first reason stays; logged at KILN_LOG=error. */
void kiln__device_mark_lost(kiln_device *dev, const char *clfn, cl_int err);

/* KILN_ERR_DEVICE_LOST, with op and the reason in the message, when dev was lost; else KILN_OK.
 * Every call that would use a device checks this first (kiln__device_open does), so that a lost
 * device never reaches the driver again. */
kiln_status kiln__device_check_lost(const kiln_device *dev, const char *op);

/* (Re-)register the exit handler that finishes every queue before the driver's statics go;
 * called when a queue is created and after each program build (see registry.c). */
void kiln__exit_hook(void);

/* A hook, for a layer above with something to write at exit while the driver still works (the
 * profiler's KILN_PROFILE trace, which reads event times): fn runs in the first exit handler of
 * the registry (after every queue is finished), once. At most KILN__DEVICE_HOOKS of them. */
void kiln__registry_on_exit(void (*fn)(void));

/* Whether dev's driver can still be called: false for Oclgrind once the process is exiting
 * (exit() destroys its per-thread API state before any atexit handler runs, so a call from an
 * exit handler writes into freed memory). */
bool kiln__driver_callable(const kiln_device *dev);

/* The devices when they have been enumerated already, else NULL (and *n 0): for code that must
 * not be the one to enumerate (the profiler, which may start before main). */
kiln_device **kiln__devices_if_enumerated(int *n);

/* Test only: forget that dev was lost (after a fault a test injected; the context is fine). */
void kiln__device_clear_lost(kiln_device *dev);

#endif
