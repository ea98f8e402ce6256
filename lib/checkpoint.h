/* checkpoint.h - tensors saved to and loaded from safetensors files (kiln_save, kiln_load):
 * the header's parser is pure, for the tests and the fuzz target. */
#ifndef KILN_CHECKPOINT_H
#define KILN_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

/* safetensors limits the JSON header to 100 MB; kiln's files have a few KiB. */
#define KILN__ST_HEADER_MAX ((uint64_t)100 * 1000 * 1000)
/* Tensors per file: the largest state_dicts have tens of thousands. A header is refused before
 * it is parsed when it could hold more (it has more '{' than this + 1): 1.7 million entries in
 * a 99 MB header cost jansson 2 GB and 32 s (issue 21). */
#define KILN__ST_ENTRIES_MAX 100000

/* One tensor of a header: name (NUL-terminated, malloc'd), dtype, shape (a scalar, shape [],
 * is loaded as [1]) and its bytes [begin, end) in the data that follows the header. */
typedef struct kiln__st_entry {
    char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    uint64_t begin, end;
} kiln__st_entry;

/* Parse and check a safetensors JSON header of len bytes (no NUL needed) describing data_len
 * bytes of data: an object of name -> {dtype, shape, data_offsets} (plus an optional
 * "__metadata__" object of strings, ignored), names unique and non-empty, dtypes kiln has,
 * shapes of at most KILN_MAX_DIMS non-negative sizes whose byte count is exactly the offsets'
 * range, and ranges that tile the data from 0 to data_len in order without gap or overlap.
 * On success *entries (malloc'd, in data order; free with kiln__st_entries_free) and *n; on
 * failure a status with the reason in kiln_last_error(), naming `what` (the file). Pure: no
 * device, no file; any bytes are safe (fuzzed). */
kiln_status kiln__st_parse_header(const char *op, const char *json, size_t len, uint64_t data_len,
                                  const char *what, kiln__st_entry **entries, int *n);

void kiln__st_entries_free(kiln__st_entry *entries, int n);

/* How kiln__load_into matches names and dtypes (0: kiln_load_into's rules: every listed name
 * must be in the file with the tensor's dtype, names of the file not listed are ignored). */
enum {
    KILN__LOAD_REJECT_UNEXPECTED = 1 << 0, /* a name of the file not listed is an error */
    KILN__LOAD_ALLOW_MISSING = 1 << 1,     /* a listed name not in the file is left as it is */
    KILN__LOAD_CONVERT = 1 << 2,           /* another dtype converts as kiln_cast does */
};

/* kiln_load_into, its messages naming op (the public function called: kiln_params_load), with
 * the rules of mode (KILN__LOAD_*). Everything is checked (and converted) before any tensor is
 * written. */
kiln_status kiln__load_into(const char *op, const char *path, const kiln_named_tensor *tensors,
                            int n, unsigned mode);

/* For tests: true makes kiln_save write a named temporary file, as it does on filesystems
 * without O_TMPFILE. */
extern bool kiln__st_no_tmpfile;

/* For tests: called with the path once a load has read and checked a file's header, before it
 * reads the data (a test truncates the file there). */
extern void (*kiln__st_test_after_header)(const char *path);

/* KILN_OK where kiln was built with jansson; else KILN_ERR_UNSUPPORTED, with a message naming op
 * (the public function) and saying that kiln was built without jansson. The checkpoint functions
 * (kiln_save, kiln_load, kiln_load_into, kiln_params_save, kiln_params_load) call it first. */
kiln_status kiln__checkpoint_support(const char *op);

#endif
