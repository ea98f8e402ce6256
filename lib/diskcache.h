/* diskcache.h - the on-disk cache of compiled program binaries (DESIGN.md "Kernels",
 * RELIABILITY.md B5): location, key, verified entries, atomic writes, counters. */
#ifndef KILN_DISKCACHE_H
#define KILN_DISKCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fdio.h" /* kiln__fd_transfer, for program.c too */
#include "kiln_cl.h"
#include "paramtable.h"

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

/* An entry's parts (pointers into the bytes it was parsed from, or to encode from). The kernel
 * names are CL_PROGRAM_KERNEL_NAMES ("a;b"), without a NUL; the parameter table (paramtable.h)
 * is empty for a built-in program. */
typedef struct kiln__cache_entry {
    const char *key;
    size_t keylen;
    const char *names;
    size_t nameslen;
    const unsigned char *payload;
    size_t size;
    const uint8_t *params;
    size_t paramslen;
} kiln__cache_entry;

/* Parse and verify a whole entry held in buf[0, len): header, lengths against len, checksum, a
 * non-empty payload, names without NUL, the parameter table (kiln__param_table_check). NULL with
 * *out pointing into buf, or a static text saying what is wrong. Pure: no file, no device, no
 * allocation; any bytes are safe (fuzzed). */
const char *kiln__cache_entry_parse(const uint8_t *buf, size_t len, kiln__cache_entry *out);

/* The bytes of an entry (malloc'd, caller frees; length to *len); NULL when out of host memory
 * or a part is over its cap (then nothing can parse it back). */
uint8_t *kiln__cache_entry_encode(const kiln__cache_entry *e, size_t *len);

/* Whether two ';'-separated kernel name lists hold the same names, in any order. */
bool kiln__kernel_names_match(const char *a, size_t alen, const char *b, size_t blen);

#define KILN__CACHE_PATH_MAX (4096 + 96)

/* A verified entry on loan to the driver. While the driver tries it, the entry file is moved
 * aside (renamed to `aside`), so that a crash inside the driver leaves no entry to crash the
 * next run; kiln__diskcache_return puts it back or drops it. */
typedef struct kiln__cache_loan {
    const unsigned char *binary; /* the payload, for clCreateProgramWithBinary */
    size_t size;
    const char *names; /* the kernels the program must have (nameslen bytes, no NUL) */
    size_t nameslen;
    const uint8_t *params; /* the parameter table (paramslen bytes; 0: none) */
    size_t paramslen;
    uint8_t *file; /* the entry's bytes, which the pointers above point into */
    char path[KILN__CACHE_PATH_MAX];
    char aside[KILN__CACHE_PATH_MAX + 64]; /* "" when another process had moved it first */
} kiln__cache_loan;

/* Look the key up. true: *loan holds the verified entry whose stored key equals key, moved
 * aside; the caller must pass it to kiln__diskcache_return. false: no usable entry (caching off,
 * missing, or corrupt: a corrupt entry is logged, counted and unlinked here); *loan is empty. */
bool kiln__diskcache_load(const char *key, size_t keylen, kiln__cache_loan *loan);

/* End a loan: put the entry back (why NULL: the driver built it and the program has the
 * entry's kernels) or drop it, counted as rejected and logged with why. Frees the loan. */
void kiln__diskcache_return(kiln__cache_loan *loan, const char *why);

/* Save a binary, the kernel names of its program and its parameter table (NULL: none, a
 * built-in program) under key: temp file (O_EXCL, 0600) then rename. Failures are counted and
 * warned about once per process; never an error. */
void kiln__diskcache_store(const char *key, size_t keylen, const char *names,
                           const kiln__param_table *params, const unsigned char *binary,
                           size_t size);

/* Count a built program whose binary could not be saved (why: logged at KILN_LOG=debug). */
void kiln__diskcache_count_unsaved(const char *why);

/* For tests: called, when set, with the entry's path once the open file was checked (a regular
 * file of ours, of a plausible size) and before it is read. */
extern void (*kiln__diskcache_before_read)(const char *path);

/* Count a program built from source. */
void kiln__diskcache_count_miss(void);

/* Whether the cache directory is usable (resolved once; false when caching is off). */
bool kiln__diskcache_usable(void);

/* The entry file for a key, written to buf: false when caching is off or buf is too small. */
bool kiln__diskcache_entry_path(const char *key, size_t keylen, char *buf, size_t size);

/* For tests: forget the resolved directory and warnings (the environment is read again on
 * next use) and zero the counters. Not thread-safe against concurrent cache use. */
void kiln__diskcache_reset(void);

#endif
