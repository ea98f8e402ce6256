/* diskcache.h - the on-disk cache of compiled program binaries (DESIGN.md "Kernels",
 * RELIABILITY.md B5): location, key, verified entries, atomic writes, counters. */
#ifndef KILN_DISKCACHE_H
#define KILN_DISKCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln_cl.h"

#define KILN__FNV_OFFSET 0xcbf29ce484222325ull

/* 64-bit FNV-1a of n bytes, continuing from h (start with KILN__FNV_OFFSET). */
uint64_t kiln__fnv1a(const void *data, size_t n, uint64_t h);

/* The full key text of a program: device name, vendor, driver and platform versions, kiln's
 * version, the options, the names and contents of the files under the options' -I directories
 * (includes.c) and the whole source. Malloc'd (caller frees); NULL when out of host memory. Its
 * length goes to *keylen. *cacheable (optional) is false when the -I directories are too large
 * to read for every build (logged at KILN_LOG=debug): such a build must not be cached. */
char *kiln__diskcache_key(const kiln_device_info *info, const char *source, size_t srclen,
                          const char *options, size_t *keylen, bool *cacheable);

/* Look the key up. true: *binary (malloc'd, caller frees) holds the verified payload of an
 * entry whose stored key equals key. false: no usable entry (caching off, missing, or corrupt:
 * a corrupt entry is logged, counted and unlinked here). */
bool kiln__diskcache_load(const char *key, size_t keylen, unsigned char **binary, size_t *size);

/* Save a binary under key: temp file (O_EXCL, 0600) then rename. Failures are counted and
 * warned about once per process; never an error. */
void kiln__diskcache_store(const char *key, size_t keylen, const unsigned char *binary,
                           size_t size);

/* The driver refused the entry's binary: unlink it and count it as rejected. */
void kiln__diskcache_rejected(const char *key, size_t keylen);

/* Count a program built from source. */
void kiln__diskcache_count_miss(void);

/* The entry file for a key, written to buf: false when caching is off or buf is too small. */
bool kiln__diskcache_entry_path(const char *key, size_t keylen, char *buf, size_t size);

/* Read (writing false) or write all n bytes of buf from or to fd, retrying on EINTR. false on an
 * error (errno says which) or at end of file (errno 0). Shared with program.c's source reader. */
bool kiln__fd_transfer(int fd, void *buf, size_t n, bool writing);

/* For tests: forget the resolved directory and warnings (the environment is read again on
 * next use) and zero the counters. Not thread-safe against concurrent cache use. */
void kiln__diskcache_reset(void);

#endif
