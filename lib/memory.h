/* memory.h - the per-device caching allocator of device buffers. */
#ifndef KILN_MEMORY_H
#define KILN_MEMORY_H

#include "kiln_cl.h"

/* A device buffer of at least `bytes` (> 0) from dev's cache, or a new one from the driver,
 * made real before returning (touched once, so lazy drivers fail here, not at first use). On
 * OOM the cache is emptied and the allocation retried once; then KILN_ERR_OUT_OF_MEMORY with
 * the sizes in the message. *capacity gets the buffer's real size (its size class). */
kiln_status kiln__mem_alloc(kiln_device *dev, size_t bytes, const char *op, cl_mem *out,
                            size_t *capacity);

/* Return a buffer from kiln__mem_alloc to dev's cache. `bytes` is what was asked for; queue is
 * the tag (kiln__queue_tag) of the queue that last used it: a later kiln__mem_alloc takes it
 * only for that queue. (kiln__mem_alloc takes for the calling thread's current queue.) */
void kiln__mem_free(kiln_device *dev, cl_mem mem, size_t bytes, size_t capacity,
                    cl_command_queue queue);

/* Free dev's pool and its cached buffers (kiln__registry_reset, when no tensor exists); the
 * next allocation creates a new pool, reading KILN_MEMORY_LIMIT again. */
void kiln__mem_pool_free(kiln_device *dev);

/* Whether dev's buffers from kiln__mem_alloc are host memory kiln allocated
 * (CL_MEM_USE_HOST_PTR): CPU devices that share the host's memory, Oclgrind aside. */
bool kiln__mem_host_backed(const kiln_device *dev);

/* Learn, from a map of a kiln__mem_alloc buffer of a host-backed device that returned `mapped`,
 * whether the device runs such buffers in place (the map gave the buffer's own host memory).
 * Once it is known to, kiln__mem_in_place gives that memory, for copies and host GEMMs that
 * need no map: in queue order, the host and the device then see the same bytes. */
void kiln__mem_learn_in_place(kiln_device *dev, cl_mem mem, const void *mapped);

/* The host memory of a kiln__mem_alloc buffer where dev is known to run it in place; else NULL
 * (not known yet, not host-backed, or a query failed: map it instead). */
void *kiln__mem_in_place(kiln_device *dev, cl_mem mem);

/* Parse a size like "1048576", "64M", "2G", "512KiB" (K/M/G/T are powers of 1024) into bytes;
 * *ok is false (and 0 returned) for anything else, or on overflow. */
uint64_t kiln__parse_size(const char *s, bool *ok);

#endif
