/* staging.h - host<->device copies: direct on devices with unified host memory, through pooled
 * pinned staging buffers on discrete devices (CL_DEVICE_HOST_UNIFIED_MEMORY false).
 *
 * A copy from pageable host memory on a discrete GPU makes the driver stage it itself, in
 * small pieces and without overlap. As CUDA runtimes do, kiln copies instead through pinned
 * buffers (CL_MEM_ALLOC_HOST_PTR, kept mapped: NVIDIA's OpenCL DMAs from and to such memory
 * directly), in chunks (16 MiB by default), two at a time, so that the host's memcpy of one
 * chunk overlaps the transfer of the other; a copy smaller than a chunk takes one buffer of the
 * power of two from 64 KiB that holds it. The buffers are pooled per device (at most
 * KILN__STAGING_KEEP kept idle, the largest) and are host memory, not counted in
 * kiln_memory_stats. When a pinned buffer cannot be made, the copy goes directly from the
 * caller's memory (logged at KILN_LOG=info). */
#ifndef KILN_STAGING_H
#define KILN_STAGING_H

#include "kiln_cl.h"

#define KILN__STAGING_KEEP 4                   /* idle pinned buffers kept per device */
#define KILN__STAGING_CHUNK ((size_t)16 << 20) /* the default chunk */
#define KILN__STAGING_MIN ((size_t)64 << 10)   /* the smallest stage */

struct kiln__staging; /* per device, in kiln_device.staging */

/* Whether copies between dev and host memory go through staging (dev has no unified memory). */
bool kiln__staging_used(const kiln_device *dev);

/* Blocking copy of n bytes from host src into mem at offset off, on dev's queue (after the
 * work queued there). src may be reused at once. On failure the message names op; a copy that
 * fails after its first chunk leaves part of mem written. */
kiln_status kiln__staging_write(kiln_device *dev, cl_mem mem, size_t off, size_t n, const void *src,
                                const char *op);

/* Blocking copy of n bytes of mem from offset off into host dst, on dev's queue. A copy that
 * fails after its first chunks leaves part of dst written. */
kiln_status kiln__staging_read(kiln_device *dev, cl_mem mem, size_t off, size_t n, void *dst,
                               const char *op);

/* Blocking copy of n bytes from smem on sdev to dmem on ddev, devices in different contexts,
 * through host memory: a map of smem where sdev has unified memory, else chunk by chunk
 * through sdev's pinned buffers. */
kiln_status kiln__staging_copy(kiln_device *sdev, cl_mem smem, kiln_device *ddev, cl_mem dmem,
                               size_t n, const char *op);

/* A pinned host buffer of size bytes in dev's context (CL_MEM_ALLOC_HOST_PTR), mapped for reading
 * and writing at *ptr for its whole life: kiln's staging buffers and kiln_tensor_empty_pinned's
 * memory. The buffer itself is never an argument of a command, only *ptr the host side of reads
 * and writes (NVIDIA's pinned-memory idiom; legal while mapped). On failure an OpenCL error code
 * and *clfn the call that failed, nothing left over. */
cl_int kiln__pinned_create(kiln_device *dev, size_t size, cl_mem *mem, void **ptr,
                           const char **clfn);

/* Unmap (when ptr is not NULL) and release such a buffer, on dev's private queue. */
void kiln__pinned_destroy(kiln_device *dev, cl_mem mem, void *ptr);

/* Release dev's idle staging buffers and its pool (kiln__registry_reset, before the device's
 * queues go: the buffers are unmapped on its private queue). No copy may be running. */
void kiln__staging_free(kiln_device *dev);

/* Test only: the chunk size (0: the default, or KILN_STAGING_CHUNK), so that several chunks
 * happen at small sizes. Idle buffers of another size are released as they are next used. */
void kiln__staging_set_chunk(size_t bytes);

/* Test only: how many pinned staging buffers exist (idle or in use), over all devices. */
int kiln__staging_count(void);

#endif
