/* tensor.h - the tensor object, shared with ops and launch. */
#ifndef KILN_TENSOR_H
#define KILN_TENSOR_H

#include <stdatomic.h>
#include <stdbool.h>

#include "kiln_cl.h"

#define KILN__TENSOR_MAGIC 0x6b74656eu /* "kten" */

/* Device memory shared by a tensor and its reshaped views. */
typedef struct kiln__storage {
    atomic_int refs;
    kiln_device *dev;
    cl_mem mem;        /* NULL for an empty (0-byte) tensor */
    size_t bytes;      /* what was asked for */
    size_t capacity;   /* the buffer's real size */
    bool pooled;       /* from the caching allocator (else adopted with kiln_tensor_from_cl_mem) */
    atomic_int mapped; /* a kiln_tensor_map is outstanding */
    void *map_ptr;
    atomic_uint version; /* bumped by every in-place write (autograd's saved-tensor check) */
    atomic_int readers;  /* pending expressions (lib/fusion.c) that read this storage */
    /* The cl_mem may be reached through another storage too: kiln_tensor_cl_mem handed it out
     * (a user may wrap it again), or it was adopted with kiln_tensor_from_cl_mem. Fusion then
     * matches pending readers by cl_mem, not by storage (kiln__fusion_force). */
    atomic_bool mem_shared;
    /* The tag (queue.h, kiln__queue_tag) of the queue that last used it: a use on another queue
     * waits for that one's work first (kiln__tensor_use). NULL: the device's default queue. */
    _Atomic(cl_command_queue) queue;
    /* A pinned host tensor's (kiln_tensor_empty_pinned): mem is a pinned buffer mapped for its
     * whole life at pinned, which only the host and the host side of copies use (staging.h);
     * NULL for device storage. pinned_busy: the last kiln_tensor_copy_async from or into it, which
     * host access waits for first (then NULL). The storage's user is one thread at a time. */
    void *pinned;
    cl_event pinned_busy;
} kiln__storage;

struct kiln__ag_node;

struct kiln_tensor {
    uint32_t magic;
    atomic_int refs;
    kiln_device *dev;
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    kiln__storage *storage;
    /* autograd (lib/autograd.c): the flag, the gradient accumulated into a leaf, the node that
     * made this tensor (NULL for a leaf) and, during a backward, the leaf's partial sum. */
    bool requires_grad;
    kiln_tensor *grad;
    struct kiln__ag_node *node;
    kiln_tensor *ag_acc;
    bool ag_listed;
    /* scopes (lib/scope.c): the scope holding the creation reference, under scope.c's lock */
    _Atomic(struct kiln__scope_rec *) scope;
    kiln_tensor *scope_prev, *scope_next;
    bool freed_by_scope; /* dead, and its last reference was dropped by kiln_scope_end */
    /* tensor.c's creation sites (KILN_LOG=debug): the function that made it, the live list */
    const char *made_by;
    bool on_sites;
    kiln_tensor *site_prev, *site_next;
    /* lib/fusion.c: the expression of a pending tensor, whose storage has no buffer yet; NULL
     * once it holds its value (or never was pending). */
    _Atomic(struct kiln__lazy *) lazy;
};

/* Record an in-place write into t's storage (every view of it sees the new version). */
static inline void kiln__tensor_bump(const kiln_tensor *t)
{
    atomic_fetch_add(&t->storage->version, 1u);
}

/* Check a tensor argument: KILN_ERR_INVALID_ARGUMENT naming op and the argument when NULL,
 * released or forged; KILN_ERR_DEVICE_LOST when its device was lost; KILN_ERR_STATE when its
 * storage is mapped (kiln_tensor_map), since the device must not use it then;
 * KILN_ERR_INVALID_ARGUMENT for a pinned host tensor (kiln_tensor_empty_pinned), which no kernel
 * uses. */
kiln_status kiln__check_tensor(const kiln_tensor *t, const char *op, const char *argname);
/* "argument <i+1>": a constant for small i, else formatted into buf. */
const char *kiln__argument_name(int i, char *buf, size_t size);

/* kiln__check_tensor without the pinned rule: for the calls a pinned host tensor is fit for (host
 * reads and writes, kiln_tensor_item and _format, kiln_tensor_copy_async). */
kiln_status kiln__check_unmapped(const kiln_tensor *t, const char *op, const char *argname);

/* Neither the mapped nor the pinned rule: for the calls that are fine on a mapped tensor (map,
 * unmap, reshape and views, which share the storage without using it). */
kiln_status kiln__check_handle(const kiln_tensor *t, const char *op, const char *argname);

#ifdef __clang_analyzer__
/* For the static analyzer (see status.h), which cannot see into tensor.c: NULL fails. */
#define kiln__check_tensor(t, op, argname)                                                         \
    ((t) ? kiln__check_tensor((t), (op), (argname)) : KILN_ERR_INVALID_ARGUMENT)
#define kiln__check_unmapped(t, op, argname)                                                       \
    ((t) ? kiln__check_unmapped((t), (op), (argname)) : KILN_ERR_INVALID_ARGUMENT)
#endif

/* The same-device rule: all n tensors (NULL entries are skipped) must be valid and on one
 * device, checked before anything is enqueued. On a mismatch: KILN_ERR_DEVICE_MISMATCH with
 * "expected all tensors on the same device, got cpu:0 and cpu:1 (argument 2 of kiln_add); copy
 * with kiln_tensor_to()". *dev (optional) gets the common device. */
kiln_status kiln__same_device(const char *op, int n, const kiln_tensor *const *ts,
                              kiln_device **dev);

/* Checked shape arithmetic: *r = a * b (a + b); false, with *r unspecified, when the exact
 * result does not fit in int64_t. Every product or sum of dimensions goes through these. */
static inline bool kiln__dim_mul(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}

static inline bool kiln__dim_add(int64_t a, int64_t b, int64_t *r)
{
    return !__builtin_add_overflow(a, b, r);
}

/* Check a shape: ndim in 1..KILN_MAX_DIMS, dims >= 0, the element count and byte count fit.
 * Writes numel and nbytes. */
kiln_status kiln__check_shape(int ndim, const int64_t *shape, kiln_dtype dtype, const char *op,
                              int64_t *numel, size_t *nbytes);

/* "[2, 3, 4]" into buf (truncated to size); returns buf. For messages. */
char *kiln__shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/* A pending tensor (lib/fusion.c): the header and a storage without a buffer. */
kiln_status kiln__tensor_new_pending(kiln_device *dev, kiln_dtype dtype, int ndim,
                                     const int64_t *shape, const char *op, kiln_tensor **out);

/* Test only: writes into kiln's own buffers on host-backed CPU devices go through
 * clEnqueueWriteBuffer as on other devices, not straight into the memory (tensor.c,
 * write_host_backed). */
extern bool kiln__tensor_write_enqueued;

/* A tensor over mem, a buffer in dev's context of at least the shape's bytes (what
 * kiln_tensor_from_cl_mem checks, with op in messages). It takes over the caller's reference to
 * mem on success; on failure the caller keeps it. */
kiln_status kiln__tensor_adopt(kiln_device *dev, cl_mem mem, kiln_dtype dtype, int ndim,
                               const int64_t *shape, const char *op, kiln_tensor **out);

/* kiln_tensor_copy_async's copy of nbytes (at most either's) from src into dst, checked by the
 * caller (one device; both ordered on this thread's queue by a check): enqueued on that queue,
 * the pinned side's pinned_busy its event. */
kiln_status kiln__tensor_copy_async(kiln_tensor *dst, const kiln_tensor *src, size_t nbytes,
                                    const char *op);

/* kiln_tensor_to of a pinned host tensor t (checked): a new tensor on dev, t's device (else
 * KILN_ERR_DEVICE_MISMATCH), filled by an asynchronous copy on this thread's queue. */
kiln_status kiln__tensor_upload(const kiln_tensor *t, kiln_device *dev, const char *op,
                                kiln_tensor **out);

/* A new tensor of the given shape on dev (like kiln_tensor_empty, with op in messages). */
kiln_status kiln__tensor_new(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                             const char *op, kiln_tensor **out);

/* Drop a reference kiln took with kiln_tensor_retain (a saved input, a parameter list's entry):
 * unlike kiln_tensor_release, which releases a scoped tensor's creation reference and so takes
 * it out of its scope, this leaves the scope's reference alone. Every reference kiln retains
 * must be dropped with this. */
void kiln__tensor_drop(kiln_tensor *t);

/* Log (debug level) the first max live tensors with the function that made each, and how many
 * more: the creation sites of the report at exit, recorded only when KILN_LOG was debug at the
 * first tensor's creation. */
void kiln__tensor_log_sites(int max);

/* The number of tensor headers alive in the process (created and not yet released). */
int64_t kiln__tensor_live(void);

/* Mark (on) or unmark the calling thread as releasing an ended scope's tensors, so that a tensor
 * freed meanwhile is named so when it is used afterwards (scope.c sets it); returns the previous
 * state, to restore. */
bool kiln__tensor_scope_ending(bool on);

/* The number of tensor headers alive in the process (created and not yet released). */
int64_t kiln__tensor_live(void);

/* The work of kiln_tensor_reshape, kiln_tensor_clone and kiln_tensor_to (lib/ops/copy.c, which
 * check out, set *out to NULL, and record for autograd), named op in messages: a view of t's
 * storage with shape (at most one -1), a copy of t on its device, and a copy of t on dev (not
 * t's). On success *out is the new tensor. */
kiln_status kiln__tensor_view(const kiln_tensor *t, int ndim, const int64_t *shape, const char *op,
                              kiln_tensor **out);
kiln_status kiln__tensor_clone(const kiln_tensor *t, const char *op, kiln_tensor **out);
kiln_status kiln__tensor_copy_to(const kiln_tensor *t, kiln_device *dev, const char *op,
                                 kiln_tensor **out);

/* Hooks, for the layers above that keep something per tensor (a scope's record, an autograd
 * node and gradient, a pending expression): tensor.c tells them of a tensor's events, each hook
 * that registered for it, in the order registered. A hook must not depend on another's having
 * run. Register (once, with pthread_once) before keeping the first such thing; at most 4. */
typedef struct kiln__tensor_hooks {
    void (*born)(kiln_tensor *t);     /* a new tensor header, before it is returned */
    void (*released)(kiln_tensor *t); /* kiln_tensor_release by t's owner, before the drop */
    void (*dead)(kiln_tensor *t);     /* t's last reference went, before its storage goes */
    /* t's storage is about to be used (read, written, shared) by op, from a check of t
     * (kiln__check_handle, kiln__check_tensor) or kiln_tensor_cl_mem: work deferred on it (a
     * pending value, pending readers of its storage: fusion.c) must be done first. A failure
     * is the check's. */
    kiln_status (*use)(const kiln_tensor *t, const char *op);
} kiln__tensor_hooks;
void kiln__tensor_hooks_add(const kiln__tensor_hooks *h);

/* Tell the hooks that op is about to use t's storage (kiln__tensor_hooks.use), as the tensor
 * checks do: for a use no check saw (launch.c's arguments). KILN_OK at once without hooks. */
kiln_status kiln__tensor_use(const kiln_tensor *t, const char *op);

/* kiln_tensor_read, a bad label or index an earlier kernel met (queue.h, the device error word)
 * reported under op's name (kiln_tensor_item's). */
kiln_status kiln__tensor_read_as(const kiln_tensor *t, void *dst, size_t nbytes, const char *op);

#endif
