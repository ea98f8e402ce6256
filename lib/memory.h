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

/* Return a buffer from kiln__mem_alloc to dev's cache. `bytes` is what was asked for. */
void kiln__mem_free(kiln_device *dev, cl_mem mem, size_t bytes, size_t capacity);

/* Free dev's pool and its cached buffers (kiln__registry_reset, when no tensor exists); the
 * next allocation creates a new pool, reading KILN_MEMORY_LIMIT again. */
void kiln__mem_pool_free(kiln_device *dev);

/* Parse a size like "1048576", "64M", "2G", "512KiB" (K/M/G/T are powers of 1024) into bytes;
 * *ok is false (and 0 returned) for anything else, or on overflow. */
uint64_t kiln__parse_size(const char *s, bool *ok);

#endif
