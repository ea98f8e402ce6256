/* kiln.h - the public API of kiln, a portable OpenCL compute runtime for C. */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* API conventions (kiln 1.0; the same for every function below):
 * - Names are kiln_<object>_<verb>; constants KILN_<ENUM>_<NAME>, each enum with its own prefix
 *   and explicit values (dtypes keep the short KILN_F32 ... names); flags are enums. The
 *   enumerations of dtypes and ops come from one X-macro table each (KILN_DTYPE_MAP,
 *   KILN_BINARY_OP_MAP, ...), which programs may expand too.
 * - Every call that can fail returns kiln_status and writes its handle last: on failure every
 *   out-parameter is NULL (or untouched where a function says so) and nothing leaks.
 * - Every op has an allocating form (kiln_x(..., kiln_tensor **out)) and an _out form
 *   (kiln_x_out(..., kiln_tensor *out)) writing into an existing tensor of the exact shape and
 *   dtype. Options beyond the operands are parameters, flags or a params struct; there are no
 *   _ex variants. Integer scalars have _i64 entry points where a double would round.
 * - Tensors and programs are reference counted (_retain / _release; release of NULL is a no-op);
 *   devices belong to kiln. Structs kiln fills in carry reserved fields so they can grow.
 * - kiln.h needs no OpenCL header; the raw OpenCL handles are in kiln_cl.h. */

#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

/* ------------------------------------------------------------------------------------------
 * Version
 * ---------------------------------------------------------------------------------------- */

/* The library's version string, e.g. "0.1.0" (may differ from KILN_VERSION_STRING, the
 * version of the header a program was compiled against). Never fails. */
KILN_API const char *kiln_version(void);

/* ------------------------------------------------------------------------------------------
 * Status
 *
 * Every call that can fail returns a kiln_status. On failure, out-parameters are set to NULL
 * (or left untouched where documented), nothing is leaked, and kiln_last_error() holds a
 * one-line message for this thread that says what was wrong and what to do.
 *
 * KILN_ERR_DEVICE_LOST: a kernel faulted on the device (NVIDIA reports an out-of-bounds access
 * in a kernel as CL_OUT_OF_RESOURCES at the next finish, blocking read or enqueue) and its
 * OpenCL context cannot be used again in this process. The device is marked lost: every later
 * call that would use it (tensors on it, ops, launches, builds, kiln_device_synchronize) fails
 * at once with KILN_ERR_DEVICE_LOST and a message saying when and why, without calling the
 * driver; releasing tensors and programs still works, and other devices are unaffected. Run the
 * kernel under Oclgrind (or with bounds checks) to find the access. CL_OUT_OF_RESOURCES at an
 * allocation is still KILN_ERR_OUT_OF_MEMORY.
 * ---------------------------------------------------------------------------------------- */

#define KILN_STATUS_MAP(X)                                                                         \
    X(OK, 0, "success")                                                                            \
    X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                                                \
    X(ERR_NO_DEVICE, -2, "no such device")                                                         \
    X(ERR_DEVICE_MISMATCH, -3, "tensors are on different devices")                                 \
    X(ERR_SHAPE_MISMATCH, -4, "shape mismatch")                                                    \
    X(ERR_DTYPE_MISMATCH, -5, "dtype mismatch")                                                    \
    X(ERR_OUT_OF_MEMORY, -6, "out of memory")                                                      \
    X(ERR_BUILD_FAILED, -7, "program build failed")                                                \
    X(ERR_UNSUPPORTED, -8, "not supported on this device")                                         \
    X(ERR_OPENCL, -9, "OpenCL error")                                                              \
    X(ERR_IO, -10, "input/output error")                                                           \
    X(ERR_NO_PLATFORM, -11, "no OpenCL platform")                                                  \
    X(ERR_NOT_FOUND, -12, "not found")                                                             \
    X(ERR_STATE, -13, "invalid state")                                                             \
    X(ERR_DEVICE_LOST, -14, "device lost: a kernel faulted and the device cannot be used again")

typedef enum kiln_status {
#define KILN__STATUS_ENUM(name, num, text) KILN_##name = num,
    KILN_STATUS_MAP(KILN__STATUS_ENUM)
#undef KILN__STATUS_ENUM
} kiln_status;

/* The name of a status ("KILN_ERR_NO_DEVICE"); "KILN_UNKNOWN_STATUS" for other values. */
KILN_API const char *kiln_status_string(kiln_status s);

/* A short default description of a status ("no such device"). */
KILN_API const char *kiln_status_text(kiln_status s);

/* This thread's message for its last failed kiln call; "" if none failed yet. The pointer stays
 * valid until this thread's next failing kiln call. Successful calls leave it unchanged. */
KILN_API const char *kiln_last_error(void);

/* Set this thread's kiln_last_error() message (printf-style) and return s: for libraries built
 * on kiln (libkiln-mpi) whose calls report through kiln's statuses and messages. */
#if defined(__GNUC__)
#define KILN__PRINTF_FORMAT(a, b) __attribute__((format(printf, a, b)))
#else
#define KILN__PRINTF_FORMAT(a, b)
#endif
KILN_API kiln_status kiln_set_last_error(kiln_status s, const char *fmt, ...)
    KILN__PRINTF_FORMAT(2, 3);

/* ------------------------------------------------------------------------------------------
 * Devices
 *
 * Devices are enumerated once, thread-safely, on first use of any function in this section.
 * They are numbered per type ("gpu:0", "cpu:1"); GPUs fastest first (compute units x clock),
 * ties in enumeration order. Device handles are owned by kiln and stay valid for the life of
 * the process; never free them. All functions here are thread-safe.
 * ---------------------------------------------------------------------------------------- */

typedef struct kiln_device kiln_device;

typedef enum kiln_device_type {
    KILN_DEVICE_CPU = 1 << 0,
    KILN_DEVICE_GPU = 1 << 1,
    KILN_DEVICE_ACCELERATOR = 1 << 2,
    KILN_DEVICE_ALL = KILN_DEVICE_CPU | KILN_DEVICE_GPU | KILN_DEVICE_ACCELERATOR,
} kiln_device_type;

/* Number of visible, usable devices of a type (KILN_DEVICE_ALL: all of them). 0 when there is
 * no OpenCL platform at all. Never fails. */
KILN_API int kiln_device_count(kiln_device_type type);

/* Whether at least one usable device of the type is visible, like torch.cuda.is_available().
 * When false, kiln_unavailable_reason(type) says why. */
KILN_API bool kiln_is_available(kiln_device_type type);

/* Why no device of `type` is available: no OpenCL platform, platforms without such a device,
 * devices hidden by KILN_VISIBLE_DEVICES, a platform that failed to answer, or a GPU present
 * on the PCI bus that no OpenCL platform shows (with what to install). "" when available;
 * a short complaint for a value that is no device type (0, unknown bits). Several type bits
 * (KILN_DEVICE_ALL) explain why there is no device at all. The string is owned by kiln and
 * valid for the life of the process. */
KILN_API const char *kiln_unavailable_reason(kiln_device_type type);

/* Find a device by spec: "auto" (KILN_DEVICE if set, else gpu:0, else cpu:0), "cpu", "cpu:N",
 * "gpu", "gpu:N", "cuda", "cuda:N" (NVIDIA GPUs only), "accelerator:N", "opencl:P:D".
 * *out is owned by kiln. Malformed specs give KILN_ERR_INVALID_ARGUMENT; a well-formed spec
 * with no such device gives KILN_ERR_NO_DEVICE, and the message lists the devices there are;
 * no OpenCL platform at all gives KILN_ERR_NO_PLATFORM. */
KILN_API kiln_status kiln_device_get(const char *spec, kiln_device **out);

/* The i-th visible device over all types, in the order kiln-info lists them (GPUs, then
 * accelerators, then CPUs). NULL when i is out of range. */
KILN_API kiln_device *kiln_device_at(int i);

/* The device's name as its driver reports it; "" for NULL. */
KILN_API const char *kiln_device_name(const kiln_device *dev);

/* The canonical spec of the device, e.g. "gpu:0"; "" for NULL. */
KILN_API const char *kiln_device_spec(const kiln_device *dev);

/* How "auto" resolves and why, e.g. "gpu:0 (first GPU)" or
 * "cpu:0 (no GPU: CPU fallback; <reason>)". Owned by kiln; "" when there is no device. */
KILN_API const char *kiln_auto_reason(void);

/* What enumeration skipped or could not use, one line per event ("platform 1 (X) failed to
 * answer clGetDeviceIDs: ..."; "device opencl:0:1 (Y) has no OpenCL C compiler; skipped");
 * "" when nothing was skipped. Owned by kiln, valid for the life of the process. */
KILN_API const char *kiln_device_notes(void);

typedef struct kiln_device_info {
    char spec[32];   /* "gpu:0" */
    char opencl[32]; /* "P:D", the ICD loader's platform and device index */
    char name[256];
    char vendor[256];
    char platform[256]; /* platform name */
    char platform_version[256];
    char driver_version[256];
    char opencl_version[128];   /* CL_DEVICE_VERSION */
    char opencl_c_version[128]; /* CL_DEVICE_OPENCL_C_VERSION */
    kiln_device_type type;
    uint32_t vendor_id;
    uint32_t compute_units;
    uint32_t max_clock_mhz;
    uint64_t global_mem_bytes;
    uint64_t max_alloc_bytes;
    uint64_t local_mem_bytes;
    uint64_t max_work_group_size;
    bool fp16;
    bool fp64;
    bool unified_memory;   /* CL_DEVICE_HOST_UNIFIED_MEMORY */
    uint64_t reserved[16]; /* zero: room for fields added later without changing the size */
} kiln_device_info;

/* Fill *info for the device. KILN_ERR_INVALID_ARGUMENT for NULL arguments. */
KILN_API kiln_status kiln_device_info_get(const kiln_device *dev, kiln_device_info *info);

/* Wait until all work queued on the device has finished, on every queue of it (the default queue
 * and those of kiln_queue_create: torch.cuda.synchronize). Blocks. KILN_ERR_DEVICE_LOST when a
 * kernel faulted (found now, or by an earlier call): the device cannot be used again. At
 * exit() kiln itself waits for every device's queue (lost devices and Oclgrind excepted), since
 * some drivers (PoCL) can crash in their own teardown while still compiling a kernel for a
 * queued launch; a process that calls _exit(), or exits while another thread is inside kiln,
 * gets no such wait: synchronize first.
 * Device-side errors, as CUDA's device asserts: a kernel that meets a class label or an index
 * outside its range (kiln_cross_entropy, kiln_index_select, kiln_gather, kiln_one_hot and the
 * layers built on them) records the first such value in a small per-device error word, and the
 * first call that waits for the device anyway - kiln_device_synchronize, kiln_tensor_read,
 * kiln_tensor_item, kiln_tensor_map (and so a checkpoint save) - returns
 * KILN_ERR_INVALID_ARGUMENT naming itself, the op, the value, its position and the range, once
 * (the word is cleared; violations after the first and before that call are not reported).
 * The op's call itself returned KILN_OK and its result holds a NaN loss or zeros there.
 * KILN_CHECK=1 has the op refuse at once instead (it reads the indices first, which blocks). */
KILN_API kiln_status kiln_device_synchronize(kiln_device *dev);

/* Build every built-in kernel the ops may ask for on dev (elementwise, reductions, softmax and
 * losses, in every dtype the device computes) into kiln's program cache, on one thread per core:
 * with the on-disk cache on (the default), later processes then start without compiling them.
 * `kiln-info --prewarm` calls it; run it after installing kiln or a driver update. A process
 * that has not prewarmed compiles each kernel the first time it is used, once per machine. On a
 * terminal, progress goes to stderr (unless KILN_LOG=off). *built (may be NULL) receives the
 * number of kernels ready. A kernel that fails to build gives KILN_ERR_BUILD_FAILED naming it,
 * after every other kernel was tried. */
KILN_API kiln_status kiln_device_prewarm(kiln_device *dev, int *built);

/* Progress of kiln_device_prewarm_part: `done` of the part's `total` kernels built so far; called
 * once with done = 0 before the first build and after each build (from kiln's build threads,
 * one call at a time). */
typedef void (*kiln_prewarm_progress_fn)(void *user, int done, int total);

/* kiln_device_prewarm's work split into `parts` shares, of which this call builds share `part`
 * (0 .. parts - 1): every parts-th program of the list (the kernels of one program stay in one
 * share), so that each share holds every kind and the shares together are exactly the whole.
 * Several processes, each building one part, prewarm a device side by side where its driver
 * compiles one program at a time per process (PoCL): `kiln-info --prewarm` runs one process per
 * core so. progress (may be NULL) replaces the terminal progress line with calls to progress(user,
 * done, total). *built (may be NULL) receives the number of the part's kernels ready. part 0 of 1
 * is kiln_device_prewarm. */
KILN_API kiln_status kiln_device_prewarm_part(kiln_device *dev, int part, int parts,
                                              kiln_prewarm_progress_fn progress, void *user,
                                              int *built);

typedef struct kiln_memory_stats {
    uint64_t allocated_bytes; /* bytes held by live tensors */
    uint64_t peak_allocated_bytes;
    uint64_t cached_bytes;       /* bytes freed by tensors, kept for reuse */
    uint64_t driver_allocations; /* clCreateBuffer calls so far */
    uint64_t budget_bytes;       /* KILN_MEMORY_LIMIT or kiln_device_set_memory_limit; 0: none */
    uint64_t reserved[8];        /* zero: room for fields added later */
} kiln_memory_stats;

/* The objects the program holds now, over every device (PyTorch has no such count; sanitizers'
 * leak reports are the model): tensor handles not released (views, a checkpoint's and an
 * optimizer's tensors and gradients included) and the device memory they hold (memory shared by
 * views counted once), modules, optimizers, programs from kiln_program_build*, and scopes not
 * ended. At exit, when KILN_LOG is warn or more (the default), kiln prints one line with these
 * counts (tensors per device, with bytes) if any is not zero; a program that releases
 * everything prints nothing. KILN_ERR_INVALID_ARGUMENT for NULL. */
typedef struct kiln_live_objects {
    uint64_t tensors;
    uint64_t tensor_bytes;
    uint64_t modules;
    uint64_t optimizers;
    uint64_t programs;
    uint64_t scopes;
    uint64_t reserved[8]; /* zero: room for fields added later */
} kiln_live_objects;
KILN_API kiln_status kiln_live_objects_get(kiln_live_objects *out);

/* Memory statistics of the device's caching allocator. The pinned staging buffers of a device
 * without unified memory (host memory, at most 4 idle buffers of up to KILN_STAGING_CHUNK each)
 * are not counted. */
KILN_API kiln_status kiln_device_memory_stats(kiln_device *dev, kiln_memory_stats *stats);

/* Reset the peak to the bytes allocated now. */
KILN_API kiln_status kiln_device_reset_peak(kiln_device *dev);

/* Release every cached (unused) buffer of the device back to the driver. */
KILN_API kiln_status kiln_device_empty_cache(kiln_device *dev);

/* Cap the bytes that live tensors may hold on the device (0: no cap beyond the driver's). An
 * allocation past the cap, after the cache was emptied once, fails with
 * KILN_ERR_OUT_OF_MEMORY. The environment variable KILN_MEMORY_LIMIT sets the initial cap of
 * every device, read when the device's allocator is created (its first allocation or memory
 * call): a whole number of bytes, optionally followed by K, M, G or T (powers of 1024, any case)
 * and then optionally iB or B ("1048576", "512M", "2G", "64MiB", "1tb"); nothing else (no
 * fractions, signs, spaces, hex or empty value). While it is malformed, every allocation on the
 * device fails with KILN_ERR_INVALID_ARGUMENT naming the variable and its value, until this
 * call sets a cap (0 included). */
KILN_API kiln_status kiln_device_set_memory_limit(kiln_device *dev, uint64_t bytes);

/* ------------------------------------------------------------------------------------------
 * Tensors
 *
 * A tensor is contiguous row-major memory on exactly one device, with a dtype and a shape of
 * 0 to KILN_MAX_DIMS dimensions (0-size dimensions are allowed and give empty tensors). A 0-d
 * tensor (ndim 0, shape [], one element; the shape pointer may be NULL and is not read) is a
 * scalar as in PyTorch: it reshapes to and from any one-element shape, broadcasts with any shape
 * as a size-1 tensor would, and every elementwise op takes it (the result is 0-d when every
 * input is); a reduction of it is 0-d too (axis KILN_ALL_AXES, 0 or -1). Existing results keep
 * their shapes: reductions of other tensors over all axes and the losses stay [1]. Tensors
 * are refcounted: every function that gives out a tensor gives one reference, released with
 * kiln_tensor_release. Work is asynchronous on the device's in-order queue; reads wait for it.
 * Tensor functions are thread-safe, but writing one tensor from two threads at once is a race
 * as in any language.
 * ---------------------------------------------------------------------------------------- */

#define KILN_MAX_DIMS 8

typedef struct kiln_tensor kiln_tensor;

/* The dtypes: X(NAME, value, name, bytes, OpenCL C storage type, OpenCL C compute type,
 * floating, signed). f16 (IEEE binary16) and bf16 (bfloat16: f32's exponent, 8 significant
 * bits) are storage only: ops load them as float and compute in f32. bf16 has no OpenCL C type;
 * kernels hold its 16 bits in a ushort and convert with shifts (round to nearest even on
 * store). Adding a dtype starts with a line here (see CONTRIBUTING.md). */
#define KILN_DTYPE_MAP(X)                                                                          \
    X(F32, 0, f32, 4, float, float, 1, 1)                                                          \
    X(F64, 1, f64, 8, double, double, 1, 1)                                                        \
    X(F16, 2, f16, 2, half, float, 1, 1)                                                           \
    X(I32, 3, i32, 4, int, int, 0, 1)                                                              \
    X(I64, 4, i64, 8, long, long, 0, 1)                                                            \
    X(U8, 5, u8, 1, uchar, uchar, 0, 0)                                                            \
    X(BF16, 6, bf16, 2, ushort, float, 1, 1)

typedef enum kiln_dtype {
#define KILN__DTYPE_ENUM(NAME, num, name, size, cl, clc, fl, sg) KILN_##NAME = num,
    KILN_DTYPE_MAP(KILN__DTYPE_ENUM)
#undef KILN__DTYPE_ENUM
} kiln_dtype;

enum {
#define KILN__DTYPE_COUNT(NAME, num, name, size, cl, clc, fl, sg) +1
    KILN_DTYPE_COUNT = 0 KILN_DTYPE_MAP(KILN__DTYPE_COUNT)
#undef KILN__DTYPE_COUNT
};

/* Bytes per element (0 for an unknown dtype) and the dtype's name ("f32"; "?" if unknown). */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);

/* A new tensor on dev with unspecified contents. The memory comes from the device's caching
 * allocator and is real when this returns: out of memory is reported here, not at first use
 * (KILN_ERR_OUT_OF_MEMORY, with the sizes), and so is an allocation that would make live tensors
 * hold more than the device's global memory. f64 on a device without fp64 and f16 are allowed
 * as storage. */
KILN_API kiln_status kiln_tensor_empty(kiln_device *dev, kiln_dtype dtype, int ndim,
                                       const int64_t *shape, kiln_tensor **out);

/* A new tensor filled with zeros. */
KILN_API kiln_status kiln_tensor_zeros(kiln_device *dev, kiln_dtype dtype, int ndim,
                                       const int64_t *shape, kiln_tensor **out);

/* A new tensor holding a copy of numel * dtype_size bytes at data (host -> device). The caller
 * may reuse data as soon as this returns. */
KILN_API kiln_status kiln_tensor_from_host(kiln_device *dev, kiln_dtype dtype, int ndim,
                                           const int64_t *shape, const void *data,
                                           kiln_tensor **out);

/* Copy the tensor's contents to dst (device -> host). nbytes must equal kiln_tensor_nbytes(t).
 * Blocks until the work the tensor depends on is done and the copy has landed. On a device
 * without unified memory host copies (read, write, from_host) go through pooled pinned staging
 * buffers in chunks (KILN_STAGING_CHUNK, default 16M); a copy that fails part-way may leave
 * part of its destination written. A bad label or index an earlier kernel on the device met is
 * reported here (KILN_ERR_INVALID_ARGUMENT, see kiln_device_synchronize), after the copy. */
KILN_API kiln_status kiln_tensor_read(const kiln_tensor *t, void *dst, size_t nbytes);

/* Overwrite the tensor's contents from src (host -> device). nbytes must equal
 * kiln_tensor_nbytes(t). src may be reused as soon as this returns. */
KILN_API kiln_status kiln_tensor_write(kiln_tensor *t, const void *src, size_t nbytes);

/* The value of a one-element tensor (any shape of one element), read to the host (blocks):
 * kiln_tensor_item as a double (integers beyond 2^53 round), kiln_tensor_item_i64 exactly for
 * integer dtypes (KILN_ERR_DTYPE_MISMATCH for floating ones). A tensor of another size is
 * KILN_ERR_SHAPE_MISMATCH. *value is 0 on failure. A bad label or index an earlier kernel met is
 * reported here (see kiln_device_synchronize). */
KILN_API kiln_status kiln_tensor_item(const kiln_tensor *t, double *value);
KILN_API kiln_status kiln_tensor_item_i64(const kiln_tensor *t, int64_t *value);

/* The tensor as text, as PyTorch prints it: nested brackets, integers exactly, floats with four
 * decimals (scientific when a value is below 1e-4 or from 1e8), tensors of more than 1000
 * elements summarised to their first and last three entries per dimension, then shape, dtype
 * and device: "tensor([[1.0000, 2.0000], [3.0000, 4.0000]], shape=[2, 2], dtype=f32,
 * device=cpu:0)" (rows on lines of their own); a 0-d tensor prints its value alone:
 * "tensor(3.5000, shape=[], dtype=f32, device=cpu:0)". Reads the tensor (blocks). Like snprintf, at
 * most size bytes including the terminating NUL go to buf, and *length (optional) is the whole
 * text's length: call with buf NULL and size 0 to learn it. kiln_tensor_print writes the text
 * and a newline to stdout. */
KILN_API kiln_status kiln_tensor_format(const kiln_tensor *t, char *buf, size_t size,
                                        size_t *length);
KILN_API kiln_status kiln_tensor_print(const kiln_tensor *t);

/* A copy of t on dev, like PyTorch's t.to(dev): device-to-device within one OpenCL context,
 * staged through host memory across contexts, ordered after pending work on t. If dev is t's
 * own device, *out is a new reference to t itself (no copy), as in PyTorch. */
KILN_API kiln_status kiln_tensor_to(const kiln_tensor *t, kiln_device *dev, kiln_tensor **out);

/* Evaluate t now if it is pending. Elementwise ops (binary, scalar, where, unary and its
 * backward, cast, clamp) return pending tensors whose value is computed later, by one fused
 * kernel per chain of such ops, when something needs it: a host read or map, any other op
 * (matmul, reductions, shape ops, ...), a user kernel launch, kiln_tensor_to, kiln_tensor_cl_mem,
 * a write into a tensor the chain reads, a chain too long for one kernel, or this call. An
 * error of the evaluation (KILN_ERR_OUT_OF_MEMORY included) is reported by the call that forced
 * it, naming the chain of ops; the tensor then stays pending. KILN_FUSION=0 in the environment
 * makes every op compute at once (see docs/fusion.md). A no-op for other tensors. */
KILN_API kiln_status kiln_tensor_eval(const kiln_tensor *t);

/* A deep copy of t on its own device. */
KILN_API kiln_status kiln_tensor_clone(const kiln_tensor *t, kiln_tensor **out);

/* Copy src's contents into dst (same device, dtype and element count). */
KILN_API kiln_status kiln_tensor_copy(kiln_tensor *dst, const kiln_tensor *src);

/* A tensor sharing t's storage with a new shape of the same element count. One dimension may
 * be -1, inferred. Writes through either are seen by both. */
KILN_API kiln_status kiln_tensor_reshape(const kiln_tensor *t, int ndim, const int64_t *shape,
                                         kiln_tensor **out);

/* Views as PyTorch's (sharing x's storage, differentiable; axes negative from the end):
 * kiln_flatten merges dimensions start..end into one (torch.flatten(x, start, end); a 0-d tensor
 * gives [1]; kiln_flatten(x, 1, -1) flattens each sample of a batch); kiln_unsqueeze inserts a
 * dimension of size 1 before axis (axis in -ndim-1..ndim); kiln_squeeze removes dimension axis
 * if it has size 1 (else the view has x's shape, as torch.squeeze(x, dim)), or every size-1
 * dimension with KILN_ALL_AXES. kiln_stack joins n tensors of one shape, dtype and device along
 * a new dimension axis (a copy; torch.stack). */
KILN_API kiln_status kiln_flatten(const kiln_tensor *x, int start, int end, kiln_tensor **out);
KILN_API kiln_status kiln_unsqueeze(const kiln_tensor *x, int axis, kiln_tensor **out);
KILN_API kiln_status kiln_squeeze(const kiln_tensor *x, int axis, kiln_tensor **out);
KILN_API kiln_status kiln_stack(const kiln_tensor *const *xs, int n, int axis, kiln_tensor **out);

/* Add a reference; returns t. NULL is a no-op returning NULL. */
KILN_API kiln_tensor *kiln_tensor_retain(kiln_tensor *t);

/* Drop a reference; the memory returns to the device cache at the last one. NULL is a no-op.
 * Releasing a tensor more times than it was retained is a bug. kiln keeps the headers of the
 * last 256 released tensors marked dead, so such a second release (or any later use) of a
 * recently released handle is recognised: the release is ignored and reported through
 * kiln_last_error() and KILN_LOG=error; other calls fail with KILN_ERR_INVALID_ARGUMENT.
 * Beyond that window it is undefined behaviour, as in free(). Inside a scope (see "Scopes for
 * temporaries") the release of a tensor the scope owns releases the scope's reference: the
 * tensor leaves the scope, which will not release it again. */
KILN_API void kiln_tensor_release(kiln_tensor *t);

/* Accessors. NULL tensors give NULL / -1 / 0. kiln_tensor_shape returns a pointer into t. */
KILN_API kiln_device *kiln_tensor_device(const kiln_tensor *t);
KILN_API kiln_dtype kiln_tensor_dtype(const kiln_tensor *t);
KILN_API int kiln_tensor_ndim(const kiln_tensor *t);
KILN_API const int64_t *kiln_tensor_shape(const kiln_tensor *t);
KILN_API int64_t kiln_tensor_numel(const kiln_tensor *t);
KILN_API size_t kiln_tensor_nbytes(const kiln_tensor *t);

typedef enum kiln_map_flags {
    KILN_MAP_READ = 1,
    KILN_MAP_WRITE = 2,
    KILN_MAP_READ_WRITE = 3,
} kiln_map_flags;

/* Map the tensor into host memory: *ptr points to nbytes of its contents. Zero-copy on devices
 * with unified host memory; on a discrete device (unified_memory false) a full copy each way:
 * the whole tensor to host memory at map, and back at unmap of a write map (use read/write
 * there). Blocks until pending work is done. Until kiln_tensor_unmap, the device must not use
 * the tensor: an op, copy, clone, to() another device or kernel launch given a mapped tensor (or
 * a view of its storage) is KILN_ERR_STATE, and so is mapping it again; reshape and to() its
 * own device are allowed. */
KILN_API kiln_status kiln_tensor_map(kiln_tensor *t, kiln_map_flags flags, void **ptr);
KILN_API kiln_status kiln_tensor_unmap(kiln_tensor *t);

/* ------------------------------------------------------------------------------------------
 * Checkpoints: named tensors in safetensors files
 * ---------------------------------------------------------------------------------------- */

/* A tensor and its name in a checkpoint. */
typedef struct kiln_named_tensor {
    const char *name;
    kiln_tensor *tensor;
} kiln_named_tensor;

/* Save n named tensors to path in the safetensors format (an 8-byte little-endian header
 * length, a JSON header of name -> dtype ("F32"), shape and data_offsets, then the bytes), which
 * PyTorch, numpy and the safetensors package read. Names are non-empty, unique and not
 * "__metadata__" (KILN_ERR_INVALID_ARGUMENT). The file is written atomically: a temporary file
 * beside it (created with the umask's permissions), fsync, rename, fsync of the folder, so path
 * holds the old file or the whole new one, never half of one. Waits for pending work on the
 * tensors. KILN_ERR_IO names the path and the system's reason (a full disk, a missing folder).
 * Checkpoints need jansson: where kiln was built without it (meson -Djansson=disabled, or the
 * default auto on a machine without libjansson-dev), kiln_save, kiln_load, kiln_load_into,
 * kiln_params_save and kiln_params_load check their arguments as usual, then return
 * KILN_ERR_UNSUPPORTED with a message that names the function and says that kiln was built
 * without jansson, and touch no file. */
KILN_API kiln_status kiln_save(const char *path, const kiln_named_tensor *tensors, int n);

/* A loaded checkpoint: its tensors, on one device, with their names. */
typedef struct kiln_checkpoint kiln_checkpoint;

/* Load every tensor of a safetensors file onto dev. The whole header is checked before any
 * device allocation: JSON, dtypes kiln has (F16, BF16, F32, F64, I32, I64, U8; others are
 * KILN_ERR_UNSUPPORTED), shapes of at most KILN_MAX_DIMS dimensions, offsets that hold exactly
 * each tensor's bytes and tile the data without gap or overlap; a file that fails gets
 * KILN_ERR_INVALID_ARGUMENT with the reason, a missing or unreadable one KILN_ERR_IO. A scalar
 * (shape []) loads as a 0-d tensor (before 1.0: as [1]), and a 0-d tensor saves as shape []. The
 * data is read (pread) straight into each tensor's mapped memory; a file truncated while this
 * runs is KILN_ERR_IO naming the tensor ("the file ends early"), nothing kept. */
KILN_API kiln_status kiln_load(const char *path, kiln_device *dev, kiln_checkpoint **out);
/* kiln_load without the copy where the device can use the file's pages in place (a CPU device
 * whose memory is the host's, and each tensor whose bytes sit at an address it accepts: kiln_save
 * puts the first tensor there, and every one whose predecessors' sizes are multiples of 128
 * bytes): the tensor is backed by a private copy-on-write mapping of the file, as numpy.memmap
 * and safetensors' load_file do, so loading costs page faults rather than a read, and a write
 * to the tensor never reaches the file. Other tensors are read as kiln_load reads them. The file
 * must not be truncated or rewritten in place while such tensors live: a page that is gone by
 * the time it is first touched kills the process (SIGBUS). kiln_save replaces a file by a
 * rename, which is safe; a program that overwrites the file in place (open with O_TRUNC) is
 * not. Such tensors are not counted in kiln_device_memory_stats, like kiln_tensor_from_cl_mem's;
 * their pages count as the process's file-backed memory. */
KILN_API kiln_status kiln_load_mapped(const char *path, kiln_device *dev, kiln_checkpoint **out);
/* The checkpoint's tensors, in file order, and their names. The tensors are owned by the
 * checkpoint: retain one (kiln_tensor_retain) to keep it past kiln_checkpoint_free. NULL for an
 * index out of range or a name the checkpoint does not hold. */
KILN_API int kiln_checkpoint_count(const kiln_checkpoint *ck);
KILN_API const char *kiln_checkpoint_name(const kiln_checkpoint *ck, int i);
KILN_API kiln_tensor *kiln_checkpoint_tensor(const kiln_checkpoint *ck, int i);
KILN_API kiln_tensor *kiln_checkpoint_find(const kiln_checkpoint *ck, const char *name);
KILN_API void kiln_checkpoint_free(kiln_checkpoint *ck);

/* Load into existing tensors (a model's parameters, an optimizer's moments): each named tensor
 * must be in the file with the same dtype and shape (KILN_ERR_INVALID_ARGUMENT,
 * KILN_ERR_DTYPE_MISMATCH, KILN_ERR_SHAPE_MISMATCH), all checked before any is written; tensors
 * of the file that are not named are ignored. An I/O error while the data is read (a file
 * truncated meanwhile) is KILN_ERR_IO naming the tensor; the tensors before it are then written. */
KILN_API kiln_status kiln_load_into(const char *path, const kiln_named_tensor *tensors, int n);

/* ------------------------------------------------------------------------------------------
 * Programs and launch
 * ---------------------------------------------------------------------------------------- */

typedef struct kiln_program kiln_program;

/* Build an OpenCL C program for dev. options are passed to the compiler after kiln's own
 * (-cl-std=CL1.2 and capability macros KILN_HAS_FP64 / KILN_HAS_FP16); NULL means none.
 * Binaries are cached on disk (see docs/kernels.md). A compile error gives
 * KILN_ERR_BUILD_FAILED with the compiler's log in kiln_last_error(). The caller owns one
 * reference to *out. */
KILN_API kiln_status kiln_program_build(kiln_device *dev, const char *source, const char *options,
                                        kiln_program **out);

/* As kiln_program_build, reading the source from a file. KILN_ERR_IO names the path; positions
 * in a compiler log name it too (kiln_program_build's say "<source>"). */
KILN_API kiln_status kiln_program_build_file(kiln_device *dev, const char *path,
                                             const char *options, kiln_program **out);

/* Programs are reference counted like tensors: retain adds a reference (returns prog; NULL is a
 * no-op returning NULL), release drops one and frees the program at the last (NULL is a no-op).
 * Launches already queued keep what they need alive. */
KILN_API kiln_program *kiln_program_retain(kiln_program *prog);
KILN_API void kiln_program_release(kiln_program *prog);

typedef enum kiln_arg_kind {
    KILN_ARG_TENSOR = 1,
    KILN_ARG_SCALAR = 2,
    KILN_ARG_LOCAL = 3,
} kiln_arg_kind;

/* One kernel argument; build them with the constructors below. */
typedef struct kiln_arg {
    kiln_arg_kind kind;
    kiln_dtype dtype; /* scalars */
    size_t size;      /* bytes: scalar size or local memory size */
    union {
        const kiln_tensor *tensor;
        float f32;
        double f64;
        int32_t i32;
        int64_t i64;
        uint8_t u8;
        uint16_t f16_bits;
    } value;
} kiln_arg;

KILN_API kiln_arg kiln_arg_tensor(const kiln_tensor *t);
KILN_API kiln_arg kiln_arg_f32(float x);
KILN_API kiln_arg kiln_arg_f64(double x);
KILN_API kiln_arg kiln_arg_i32(int32_t x);
KILN_API kiln_arg kiln_arg_i64(int64_t x);
KILN_API kiln_arg kiln_arg_u8(uint8_t x);
KILN_API kiln_arg kiln_arg_local(size_t bytes);

/* Launch the kernel `name` of prog over work_dim (1-3) dimensions of global size, exactly as
 * plain OpenCL would: the kernel runs global[0] x ... work-items, no more. local is the local
 * size (global must be a multiple of it), or NULL to let the driver choose one that divides
 * global. (For larger work-groups over ragged sizes, padding is opt-in: kiln_program_pad_range
 * below, with a kernel that bounds-checks get_global_id.) Tensors must be on the program's
 * device (KILN_ERR_DEVICE_MISMATCH). The argument count is checked against the kernel, and each
 * argument against its parameter as the driver describes it (kiln builds user programs with
 * -cl-kernel-arg-info): a tensor for a __global or __constant pointer, its dtype matching the
 * pointee (float* and float4* take f32; int* or uint* i32; long* or ulong* i64; char* or uchar* u8;
 * half* f16; void*, size_t* and typedef'd or struct pointees take any tensor, short* or ushort*
 * one of 2-byte elements); kiln_arg_local() for a __local pointer; for a scalar parameter the
 * constructor of its type (float: kiln_arg_f32, double: f64, int, uint: i32; long, ulong: i64;
 * char, uchar: u8; size_t, typedefs and structs: any scalar, the driver checks the size).
 * Vectors by value (float4), images and samplers cannot be passed. A mismatch is
 * KILN_ERR_INVALID_ARGUMENT naming the kernel, the parameter and both types. A driver without
 * argument info gets the count check and its own size checks only. With an explicit local
 * size, at most 65535 work-groups (global[d] / local[d]) are allowed in dimensions 1 and 2, on
 * every device, because that is the portable limit (NVIDIA's OpenCL maps them onto a CUDA grid,
 * which stops there); more is KILN_ERR_INVALID_ARGUMENT naming the limit. Launch larger ranges
 * in pieces or loop in the kernel. (NVIDIA's get_global_id also wraps at 2^31 work-items in
 * dimension 0.) Asynchronous: returns once the launch is queued. Safe to call from several
 * threads on one program. */
KILN_API kiln_status kiln_program_launch(kiln_program *prog, const char *name, int work_dim,
                                         const size_t *global, const size_t *local, int nargs,
                                         const kiln_arg *args);

/* Opt-in padding, for kernels that bounds-check: the local size kiln would choose for kernel
 * `name` over global (within the kernel's work-group limit, at most 256 work-items) into local,
 * and global rounded up to a multiple of it into padded (each work_dim entries). Pass padded
 * and local to kiln_program_launch; the kernel then runs padded work-items and must ignore
 * those past global. KILN_ERR_INVALID_ARGUMENT when the padded size overflows or needs more
 * than 65535 work-groups in dimension 1 or 2. */
KILN_API kiln_status kiln_program_pad_range(kiln_program *prog, const char *name, int work_dim,
                                            const size_t *global, size_t *padded, size_t *local);

/* The names of the program's kernels, separated by ';' (owned by prog). */
KILN_API const char *kiln_program_kernel_names(const kiln_program *prog);

/* The device a program was built for. */
KILN_API kiln_device *kiln_program_device(const kiln_program *prog);

typedef struct kiln_cache_stats {
    uint64_t hits;     /* programs loaded from the on-disk cache */
    uint64_t misses;   /* programs built from source */
    uint64_t saves;    /* entries written */
    uint64_t corrupt;  /* entries found corrupt or foreign, and replaced */
    uint64_t rejected; /* entries the driver refused */
    uint64_t write_errors;
    uint64_t reserved[8]; /* zero: room for fields added later */
} kiln_cache_stats;

/* Counters of this process's on-disk cache use. Never fails for non-NULL stats. */
KILN_API kiln_status kiln_cache_stats_get(kiln_cache_stats *stats);

/* The directory kiln caches binaries in ("" when caching is off: KILN_CACHE=0). */
KILN_API const char *kiln_cache_dir(void);

/* ------------------------------------------------------------------------------------------
 * Operations
 *
 * Every op checks that its tensors are on one device (KILN_ERR_DEVICE_MISMATCH, naming both)
 * and have fitting dtypes and shapes before any work is queued. Ops are asynchronous. An op
 * with a `**out` parameter allocates its result from the caching allocator; the `_out` forms
 * write into an existing tensor instead, which must be on the inputs' device
 * (KILN_ERR_DEVICE_MISMATCH) with exactly the result's dtype (KILN_ERR_DTYPE_MISMATCH) and shape
 * (KILN_ERR_SHAPE_MISMATCH, naming both shapes); a NULL out is KILN_ERR_INVALID_ARGUMENT. Every
 * check comes before anything is queued, so a failed call leaves out untouched.
 * ---------------------------------------------------------------------------------------- */

/* Creation. The value converts to the dtype as kiln_cast does: floats round to nearest (f16
 * and bf16 to nearest even), integers truncate toward zero; a value outside an integer dtype's
 * range (or NaN) is KILN_ERR_INVALID_ARGUMENT. kiln_fill overwrites t asynchronously. */
KILN_API kiln_status kiln_fill(kiln_tensor *t, double value);
KILN_API kiln_status kiln_full(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                               double value, kiln_tensor **out);
KILN_API kiln_status kiln_ones(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                               kiln_tensor **out);
/* The same with an exact 64-bit integer value (a double holds integers exactly only up to 2^53):
 * floating dtypes get the value rounded to nearest; a value outside an integer dtype's range is
 * KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_fill_i64(kiln_tensor *t, int64_t value);
KILN_API kiln_status kiln_full_i64(kiln_device *dev, kiln_dtype dtype, int ndim,
                                   const int64_t *shape, int64_t value, kiln_tensor **out);
/* 1-D tensor start, start+step, ... < end (> end for a negative step): ceil((end - start) /
 * step) elements, element i = start + i * step computed in the dtype's compute type. A step of
 * 0 or of the wrong sign is KILN_ERR_INVALID_ARGUMENT; integer dtypes need integral start and
 * step and every element within the dtype's range (u8 takes negative steps too). An empty range
 * gives a [0] tensor. */
KILN_API kiln_status kiln_arange(kiln_device *dev, kiln_dtype dtype, double start, double end,
                                 double step, kiln_tensor **out);
/* Exact integer form: element i = start + i * step over an integer (or floating: start and step
 * rounded to nearest) dtype, with the same rules, counted without rounding. kiln_arange_out
 * writes start + i * step into every element of an existing 1-D out, in out's dtype, with the
 * same rules (step 0 is KILN_ERR_INVALID_ARGUMENT; an out that is not 1-D is
 * KILN_ERR_SHAPE_MISMATCH). */
KILN_API kiln_status kiln_arange_i64(kiln_device *dev, kiln_dtype dtype, int64_t start, int64_t end,
                                     int64_t step, kiln_tensor **out);
KILN_API kiln_status kiln_arange_out(double start, double step, kiln_tensor *out);
/* Seeds. Every function that takes a seed (kiln_rand_uniform, kiln_rand_normal and their _out
 * forms, kiln_dropout, kiln_linear_create, kiln_embedding_create, kiln_dropout_create) takes
 * KILN_SEED_GLOBAL to mean "the next seed of the global generator", as PyTorch's functions use
 * its global generator: consecutive layers then differ, and kiln_manual_seed(s) before them
 * gives the same layers (the same bytes on every device) in every run. The global generator is
 * SplitMix64 seeded with s: draw k (1, 2, ...) after kiln_manual_seed(s) is
 * mix(s + k * 0x9e3779b97f4a7c15), where mix(z) is z ^= z >> 30, z *= 0xbf58476d1ce4e5b9,
 * z ^= z >> 27, z *= 0x94d049bb133111eb, z ^= z >> 31 (mod 2^64); an output equal to
 * KILN_SEED_GLOBAL is skipped. A call given KILN_SEED_GLOBAL draws one seed, after its argument
 * checks (a refused call draws nothing; kiln_dropout with p = 0 draws none); a layer draws once
 * at creation (a linear layer's bias uses the weight's seed mixed, a dropout module's call k
 * uses its drawn seed + k). Until the first kiln_manual_seed the generator is as
 * kiln_manual_seed(0) sets it. Thread-safe: threads drawing at once get distinct draws of the
 * one sequence (which thread gets which depends on timing). Any other seed value is used as it
 * is. */
#define KILN_SEED_GLOBAL UINT64_MAX
KILN_API void kiln_manual_seed(uint64_t seed);

/* Philox4x32-10: the same seed and shape give bit-identical numbers on every device. Element i
 * uses counter (i, 0) and key seed, so a tensor's numbers do not depend on the device's
 * work-group size. Numbers are made in f32 with exactly rounded operations only: uniform =
 * low + (high - low) * (bits >> 8) * 2^-24, kept below high; normal = Box-Muller on the first
 * two words, sqrt(-2 ln u1) cos(2 pi u2), with log/sqrt/cos computed by kiln (error < 1e-6).
 * f64, f16 and bf16 tensors hold these f32 numbers converted (f16 and bf16 may round up to high).
 * Floating dtypes only (else KILN_ERR_UNSUPPORTED). */
KILN_API kiln_status kiln_rand_uniform(kiln_device *dev, kiln_dtype dtype, int ndim,
                                       const int64_t *shape, uint64_t seed, double low, double high,
                                       kiln_tensor **out);
KILN_API kiln_status kiln_rand_normal(kiln_device *dev, kiln_dtype dtype, int ndim,
                                      const int64_t *shape, uint64_t seed, double mean,
                                      double stddev, kiln_tensor **out);
/* Refill an existing tensor with the numbers the allocating forms would give for its dtype and
 * shape (bit for bit), with the same checks. */
KILN_API kiln_status kiln_rand_uniform_out(uint64_t seed, double low, double high,
                                           kiln_tensor *out);
KILN_API kiln_status kiln_rand_normal_out(uint64_t seed, double mean, double stddev,
                                          kiln_tensor *out);

/* Elementwise binary ops, X(NAME, value, name, kind) in KILN_BINARY_OP_MAP: kind ARITH works on
 * every dtype, FLOAT needs a floating dtype (KILN_ERR_UNSUPPORTED on integers), COMPARE gives a
 * KILN_U8 mask. All broadcast as NumPy does (dimensions align from the right; size-1
 * axes stretch; else KILN_ERR_SHAPE_MISMATCH naming both shapes). Both inputs must have one
 * dtype (else KILN_ERR_DTYPE_MISMATCH; cast first); the result has it too, and comparisons
 * give KILN_U8 masks (0/1). f16 and bf16 compute in f32. Integers (i32, i64, u8) wrap on overflow;
 * integer division truncates toward zero, x / 0 gives 0 and MIN / -1 gives MIN. POW needs a
 * floating dtype (KILN_ERR_UNSUPPORTED on integers). MINIMUM/MAXIMUM propagate NaN. ATAN2 is
 * atan2(a, b), the angle of the point (b, a) in (-pi, pi] (torch.atan2). */
#define KILN_BINARY_OP_MAP(X)                                                                      \
    X(ADD, 0, add, ARITH)                                                                          \
    X(SUB, 1, sub, ARITH)                                                                          \
    X(MUL, 2, mul, ARITH)                                                                          \
    X(DIV, 3, div, ARITH)                                                                          \
    X(POW, 4, pow, FLOAT)                                                                          \
    X(MINIMUM, 5, minimum, ARITH)                                                                  \
    X(MAXIMUM, 6, maximum, ARITH)                                                                  \
    X(EQ, 7, eq, COMPARE)                                                                          \
    X(NE, 8, ne, COMPARE)                                                                          \
    X(LT, 9, lt, COMPARE)                                                                          \
    X(LE, 10, le, COMPARE)                                                                         \
    X(GT, 11, gt, COMPARE)                                                                         \
    X(GE, 12, ge, COMPARE)                                                                         \
    X(ATAN2, 13, atan2, FLOAT)

typedef enum kiln_binary_op {
#define KILN__BINARY_ENUM(NAME, num, name, kind) KILN_BINARY_##NAME = num,
    KILN_BINARY_OP_MAP(KILN__BINARY_ENUM)
#undef KILN__BINARY_ENUM
} kiln_binary_op;

/* The number of binary ops (their values are 0 ... KILN_BINARY_OP_COUNT - 1), for loops over
 * every op; likewise KILN_UNARY_OP_COUNT and KILN_REDUCE_OP_COUNT. */
enum {
#define KILN__BINARY_COUNT(NAME, num, name, kind) +1
    KILN_BINARY_OP_COUNT = 0 KILN_BINARY_OP_MAP(KILN__BINARY_COUNT)
#undef KILN__BINARY_COUNT
};

/* The _out forms of the elementwise ops (binary, scalar, add ... div, where, unary, unary
 * backward, cast) may write in place: out may be (a view of) an input of the result's shape,
 * since each element is read before it is written by the same work-item.
 *
 * dtype promotion (PyTorch's rules for kiln's dtypes): operands of different dtypes compute in
 * the promoted dtype, floating beating integer and, within a category, the wider winning; f16
 * with bf16 gives f32 (neither holds the other's values):
 *
 *           u8   i32  i64  f16  bf16 f32  f64
 *     u8    u8   i32  i64  f16  bf16 f32  f64
 *     i32   i32  i32  i64  f16  bf16 f32  f64
 *     i64   i64  i64  i64  f16  bf16 f32  f64
 *     f16   f16  f16  f16  f16  f32  f32  f64
 *     bf16  bf16 bf16 bf16 f32  bf16 f32  f64
 *     f32   f32  f32  f32  f32  f32  f32  f64
 *     f64   f64  f64  f64  f64  f64  f64  f64
 *
 * The result has the promoted dtype, except comparisons (EQ ... GE), which give u8; an _out
 * form's out must have that dtype (else KILN_ERR_DTYPE_MISMATCH). The other operand is cast
 * first (kiln_cast's conversion, so f16 + i64 rounds the integers to f16), and the gradient of a
 * floating operand flows back through the cast in its own dtype. The scalar forms keep the
 * tensor's dtype, as PyTorch does for a Python scalar of the tensor's category: a floating
 * tensor with any scalar, an integer tensor with an integer scalar (kiln_binary_scalar's double
 * holding an integer value, or the _i64 forms). An integer tensor with a double that is not an
 * integer (a fraction, NaN or an infinity) computes in f32, PyTorch's default dtype: i32 + 2.5
 * is an f32 tensor (before 1.0 the scalar was truncated to 2). */
KILN_API kiln_status kiln_binary(kiln_binary_op op, const kiln_tensor *a, const kiln_tensor *b,
                                 kiln_tensor **out);
KILN_API kiln_status kiln_binary_out(kiln_binary_op op, const kiln_tensor *a, const kiln_tensor *b,
                                     kiln_tensor *out);
/* a op scalar; the scalar converts to a's compute type (f32 for f16 and bf16; for an integer tensor
 * an integer-valued scalar that does not fit is KILN_ERR_INVALID_ARGUMENT, and any other makes the
 * op compute in f32, see above). The _i64 forms take an
 * exact 64-bit integer scalar (rounded to nearest for floating dtypes). */
KILN_API kiln_status kiln_binary_scalar(kiln_binary_op op, const kiln_tensor *a, double scalar,
                                        kiln_tensor **out);
KILN_API kiln_status kiln_binary_scalar_out(kiln_binary_op op, const kiln_tensor *a, double scalar,
                                            kiln_tensor *out);
KILN_API kiln_status kiln_binary_scalar_i64(kiln_binary_op op, const kiln_tensor *a, int64_t scalar,
                                            kiln_tensor **out);
KILN_API kiln_status kiln_binary_scalar_i64_out(kiln_binary_op op, const kiln_tensor *a,
                                                int64_t scalar, kiln_tensor *out);
/* Shorthands for kiln_binary and kiln_binary_out with ADD, SUB, MUL and DIV. */
KILN_API kiln_status kiln_add(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out);
KILN_API kiln_status kiln_add_out(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out);
KILN_API kiln_status kiln_sub(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out);
KILN_API kiln_status kiln_sub_out(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out);
KILN_API kiln_status kiln_mul(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out);
KILN_API kiln_status kiln_mul_out(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out);
KILN_API kiln_status kiln_div(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out);
KILN_API kiln_status kiln_div_out(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out);
/* cond (u8) ? a : b, broadcast over all three. */
KILN_API kiln_status kiln_where(const kiln_tensor *cond, const kiln_tensor *a, const kiln_tensor *b,
                                kiln_tensor **out);
KILN_API kiln_status kiln_where_out(const kiln_tensor *cond, const kiln_tensor *a,
                                    const kiln_tensor *b, kiln_tensor *out);

/* Elementwise unary ops (floating dtypes; NEG, ABS and RELU also on integers, wrapping; other
 * ops on integers are KILN_ERR_UNSUPPORTED). SIGMOID never overflows (exp of -|x| only);
 * RELU keeps NaN; GELU is the tanh approximation
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); SOFTPLUS is log(1 + exp(x)), x itself above
 * 20 (PyTorch's softplus, beta 1, threshold 20). kiln_unary_out may write in place. */
#define KILN_UNARY_OP_MAP(X)                                                                       \
    X(NEG, 0, neg, ANY)                                                                            \
    X(ABS, 1, abs, ANY)                                                                            \
    X(EXP, 2, exp, FLOAT)                                                                          \
    X(LOG, 3, log, FLOAT)                                                                          \
    X(SQRT, 4, sqrt, FLOAT)                                                                        \
    X(RSQRT, 5, rsqrt, FLOAT)                                                                      \
    X(SIN, 6, sin, FLOAT)                                                                          \
    X(COS, 7, cos, FLOAT)                                                                          \
    X(TANH, 8, tanh, FLOAT)                                                                        \
    X(SIGMOID, 9, sigmoid, FLOAT)                                                                  \
    X(RELU, 10, relu, ANY)                                                                         \
    X(GELU, 11, gelu, FLOAT)                                                                       \
    X(SOFTPLUS, 12, softplus, FLOAT)

typedef enum kiln_unary_op {
#define KILN__UNARY_ENUM(NAME, num, name, kind) KILN_UNARY_##NAME = num,
    KILN_UNARY_OP_MAP(KILN__UNARY_ENUM)
#undef KILN__UNARY_ENUM
} kiln_unary_op;

enum {
#define KILN__UNARY_COUNT(NAME, num, name, kind) +1
    KILN_UNARY_OP_COUNT = 0 KILN_UNARY_OP_MAP(KILN__UNARY_COUNT)
#undef KILN__UNARY_COUNT
};

KILN_API kiln_status kiln_unary(kiln_unary_op op, const kiln_tensor *x, kiln_tensor **out);
KILN_API kiln_status kiln_unary_out(kiln_unary_op op, const kiln_tensor *x, kiln_tensor *out);
/* grad_in = grad_out * op'(x), the backward pass of kiln_unary (same shapes and dtype;
 * floating dtypes only). ABS' and RELU' are 0 at 0. */
KILN_API kiln_status kiln_unary_backward(kiln_unary_op op, const kiln_tensor *x,
                                         const kiln_tensor *grad_out, kiln_tensor **grad_in);
KILN_API kiln_status kiln_unary_backward_out(kiln_unary_op op, const kiln_tensor *x,
                                             const kiln_tensor *grad_out, kiln_tensor *grad_in);

/* Reductions over all elements (axis = KILN_ALL_AXES, giving a 1-element tensor of shape [1])
 * or one axis (negative counts from the end); keepdim keeps the reduced axes as size 1. Float
 * sums are compensated (error <= 2 eps * sum|x| + eps * |sum|); integer sums give KILN_I64;
 * MEAN of integers is KILN_ERR_UNSUPPORTED. NaN propagates through SUM/MEAN/MAX/MIN. ARGMAX
 * gives KILN_I64 indices (the first maximum; a NaN counts as the maximum). MAX/MIN/ARGMAX of
 * an empty axis: KILN_ERR_INVALID_ARGUMENT; SUM of nothing is 0, MEAN NaN. */
/* The axis value that reduces over every element. */
enum { KILN_ALL_AXES = -2147483647 - 1 };
#define KILN_REDUCE_OP_MAP(X)                                                                      \
    X(SUM, 0, sum)                                                                                 \
    X(MEAN, 1, mean)                                                                               \
    X(MAX, 2, max)                                                                                 \
    X(MIN, 3, min)                                                                                 \
    X(ARGMAX, 4, argmax)

typedef enum kiln_reduce_op {
#define KILN__REDUCE_ENUM(NAME, num, name) KILN_REDUCE_##NAME = num,
    KILN_REDUCE_OP_MAP(KILN__REDUCE_ENUM)
#undef KILN__REDUCE_ENUM
} kiln_reduce_op;

enum {
#define KILN__REDUCE_COUNT(NAME, num, name) +1
    KILN_REDUCE_OP_COUNT = 0 KILN_REDUCE_OP_MAP(KILN__REDUCE_COUNT)
#undef KILN__REDUCE_COUNT
};

KILN_API kiln_status kiln_reduce(kiln_reduce_op op, const kiln_tensor *x, int axis, bool keepdim,
                                 kiln_tensor **out);
/* As kiln_reduce, writing into out, which must have the result's exact shape and dtype
 * (KILN_ERR_SHAPE_MISMATCH / KILN_ERR_DTYPE_MISMATCH), be on x's device and not share x's
 * memory (KILN_ERR_INVALID_ARGUMENT). Asynchronous; allocates nothing for short rows. */
KILN_API kiln_status kiln_reduce_out(kiln_reduce_op op, const kiln_tensor *x, int axis,
                                     bool keepdim, kiln_tensor *out);

/* log(sum(exp(x))) along axis (or KILN_ALL_AXES), stably: the maximum is subtracted first (and
 * an infinite or NaN maximum is not), as torch.logsumexp; an empty axis gives -inf. Floating
 * dtypes (integers: KILN_ERR_UNSUPPORTED); keepdim as kiln_reduce. Its gradient is softmax(x). */
KILN_API kiln_status kiln_logsumexp(const kiln_tensor *x, int axis, bool keepdim,
                                    kiln_tensor **out);

/* Matrix product of the last two dimensions, batched over the leading ones (a batch of 1
 * broadcasts). a: [..., M, K] (or [..., K, M] with KILN_MATMUL_TRANS_A), b: [..., K, N]
 * (or [..., N, K] with KILN_MATMUL_TRANS_B); out: [..., M, N]. f32, f64 (needs fp64 on the
 * device), f16 and bf16 (stored in 16 bits, accumulated in f32, the product rounded once);
 * integers are KILN_ERR_UNSUPPORTED (cast them). Operands need >= 2 dims; a
 * batch of 1 (or none) broadcasts, other batch shapes must be equal (KILN_ERR_SHAPE_MISMATCH
 * naming both shapes). M or N of 0 gives an empty result, K of 0 zeros. Everything is checked
 * before anything is queued; asynchronous. _out writes into out (exact shape and dtype, on
 * the same device, not sharing memory with a or b). kiln_matmul_trans takes transpose flags;
 * unknown flag bits are KILN_ERR_INVALID_ARGUMENT. The path (CLBlast, host CBLAS, built-in
 * kernel) is chosen per device; KILN_MATMUL=clblast|cblas|builtin forces one (read per call;
 * unknown: KILN_ERR_INVALID_ARGUMENT, unavailable on the device: KILN_ERR_UNSUPPORTED). */
typedef enum kiln_matmul_flags {
    KILN_MATMUL_TRANS_A = 1 << 0,
    KILN_MATMUL_TRANS_B = 1 << 1,
} kiln_matmul_flags;

KILN_API kiln_status kiln_matmul(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out);
KILN_API kiln_status kiln_matmul_out(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out);
KILN_API kiln_status kiln_matmul_trans(const kiln_tensor *a, const kiln_tensor *b,
                                       kiln_matmul_flags flags, kiln_tensor **out);
KILN_API kiln_status kiln_matmul_trans_out(const kiln_tensor *a, const kiln_tensor *b,
                                           kiln_matmul_flags flags, kiln_tensor *out);
/* The path kiln_matmul takes on dev now: "clblast", "cblas" or "builtin" (a static string).
 * NULL for an invalid device or a KILN_MATMUL value that cannot apply (kiln_last_error says
 * why). Where CLBlast fails on a GPU (any status but an argument or precision error, which kiln
 * checks first, or a kernel fault, which loses the device), kiln_matmul computes the product
 * with the built-in kernel instead and that device uses it from then on: this returns "builtin"
 * afterwards, and KILN_LOG=info logs the failure once. KILN_MATMUL=clblast never falls back: the
 * op fails with a message naming the CLBlast status. */
KILN_API const char *kiln_matmul_path(kiln_device *dev);
/* Why kiln_matmul_path(dev) is what it is, one clause: "forced by KILN_MATMUL", "the default on
 * GPUs: CLBlast", after a fallback "CLBlast failed with CLBlastOpenCLBuildProgramFailure (-11) in
 * CLBlastSgemm; matmul uses the built-in kernel from now on", ... Valid while kiln is
 * initialised; NULL where kiln_matmul_path is NULL (kiln_last_error says why). */
KILN_API const char *kiln_matmul_path_reason(kiln_device *dev);

/* Copies: permute dimensions (perm has ndim entries, each dimension once, negative counts from
 * the end), transpose the last two (ndim >= 2), cast, concatenate n >= 1 tensors of one dtype
 * and equal shapes outside axis, slice [start, end) along an axis (negative bounds count from
 * the end; no clamping: bounds outside the axis are KILN_ERR_INVALID_ARGUMENT). The _out forms
 * of permute, transpose, cat and slice need an out that shares no memory with an input
 * (KILN_ERR_INVALID_ARGUMENT): the copy reads the inputs while it writes out. */
KILN_API kiln_status kiln_permute(const kiln_tensor *x, const int *perm, kiln_tensor **out);
KILN_API kiln_status kiln_permute_out(const kiln_tensor *x, const int *perm, kiln_tensor *out);
KILN_API kiln_status kiln_transpose(const kiln_tensor *x, kiln_tensor **out);
KILN_API kiln_status kiln_transpose_out(const kiln_tensor *x, kiln_tensor *out);
/* kiln_cast: any dtype pair (f64 on both sides needs fp64). Float -> integer truncates toward
 * zero and saturates to the target range, NaN gives 0; integer -> integer wraps (two's
 * complement); anything -> float rounds to nearest (f16 and bf16: nearest even, from f64 in one
 * rounding). */
KILN_API kiln_status kiln_cast(const kiln_tensor *x, kiln_dtype dtype, kiln_tensor **out);
/* kiln_cast_out converts into out's dtype (out has x's shape). */
KILN_API kiln_status kiln_cast_out(const kiln_tensor *x, kiln_tensor *out);
KILN_API kiln_status kiln_cat(const kiln_tensor *const *xs, int n, int axis, kiln_tensor **out);
KILN_API kiln_status kiln_cat_out(const kiln_tensor *const *xs, int n, int axis, kiln_tensor *out);
KILN_API kiln_status kiln_slice(const kiln_tensor *x, int axis, int64_t start, int64_t end,
                                kiln_tensor **out);
KILN_API kiln_status kiln_slice_out(const kiln_tensor *x, int axis, int64_t start, int64_t end,
                                    kiln_tensor *out);

/* Clamp every element into [lo, hi] (any dtype; for integers lo and hi are truncated toward
 * zero and must fit the dtype). lo > hi or a NaN bound is KILN_ERR_INVALID_ARGUMENT. NaN
 * elements of floating tensors stay NaN. The _out form may write in place. */
KILN_API kiln_status kiln_clamp(const kiln_tensor *x, double lo, double hi, kiln_tensor **out);
KILN_API kiln_status kiln_clamp_out(const kiln_tensor *x, double lo, double hi, kiln_tensor *out);

/* Picking elements by index (every dtype; indices are i32 or i64 tensors on x's device). An
 * index outside [0, n) gives a zero element, never a read outside x, and is reported by the next
 * call that waits for the device (see kiln_device_synchronize); with KILN_CHECK=1 in the
 * environment the indices are read first and the first bad one is KILN_ERR_INVALID_ARGUMENT.
 * kiln_index_select: out has x's shape with dimension axis replaced by the length of the 1-D
 * index, out[..., j, ...] = x[..., index[j], ...] (an embedding lookup is axis 0 of a
 * [vocabulary, dim] table). kiln_gather (PyTorch's torch.gather): index has x's rank and no
 * dimension longer than x's except along axis; out has index's shape, and
 * out[i][j][k] = x[i][index[i][j][k]][k] for axis 1. kiln_one_hot: labels [N] give an [N,
 * classes] tensor of dtype with 1 at (r, labels[r]) and 0 elsewhere (a row of zeros for a label
 * outside [0, classes)); kiln_one_hot_out writes into out's dtype. The _out forms need an out
 * that shares no memory with an input (KILN_ERR_INVALID_ARGUMENT). */
KILN_API kiln_status kiln_index_select(const kiln_tensor *x, int axis, const kiln_tensor *index,
                                       kiln_tensor **out);
KILN_API kiln_status kiln_index_select_out(const kiln_tensor *x, int axis, const kiln_tensor *index,
                                           kiln_tensor *out);
KILN_API kiln_status kiln_gather(const kiln_tensor *x, int axis, const kiln_tensor *index,
                                 kiln_tensor **out);
KILN_API kiln_status kiln_gather_out(const kiln_tensor *x, int axis, const kiln_tensor *index,
                                     kiln_tensor *out);
KILN_API kiln_status kiln_one_hot(const kiln_tensor *labels, int64_t classes, kiln_dtype dtype,
                                  kiln_tensor **out);
KILN_API kiln_status kiln_one_hot_out(const kiln_tensor *labels, int64_t classes, kiln_tensor *out);

/* 2-D convolution as torch.nn.functional.conv2d: x [N, C, H, W], weight [O, C/groups, KH, KW]
 * (PyTorch's layout, so state_dicts load both ways), bias [O] or NULL; out [N, O, OH, OW] with
 * OH = (H + 2 padding[0] - dilation[0] (KH - 1) - 1) / stride[0] + 1 (OW likewise). params NULL,
 * or a member 0, means the default: stride 1, padding 0, dilation 1, groups 1. f32, f64, f16 and
 * bf16 (16-bit sums accumulate in f32, as kiln_matmul's). Computed as im2col and one matmul over
 * the groups (on CPU devices OpenBLAS); differentiable in x, weight and bias. Channels not
 * divisible by groups, a weight of the wrong shape or a kernel larger than the padded input:
 * KILN_ERR_SHAPE_MISMATCH. */
typedef struct kiln_conv2d_params {
    int stride[2];   /* (height, width); 0: 1 */
    int padding[2];  /* zeros added on each side; 0: none */
    int dilation[2]; /* 0: 1 */
    int groups;      /* 0: 1 */
} kiln_conv2d_params;
KILN_API kiln_status kiln_conv2d(const kiln_tensor *x, const kiln_tensor *weight,
                                 const kiln_tensor *bias, const kiln_conv2d_params *params,
                                 kiln_tensor **out);
/* The _out forms of the convolution and the poolings (and of the losses below): the result
 * computed as the allocating form does, then copied into out (the exact shape and dtype, on the
 * same device; out may be an input), not recorded by autograd. kiln_max_pool2d_out's indices is
 * an existing i64 tensor of out's shape, or NULL. */
KILN_API kiln_status kiln_conv2d_out(const kiln_tensor *x, const kiln_tensor *weight,
                                     const kiln_tensor *bias, const kiln_conv2d_params *params,
                                     kiln_tensor *out);

/* Pooling over x [N, C, H, W] (f32, f64, f16, bf16) as torch.nn.functional's: a window of kernel[0]
 * x kernel[1], moved by stride (0: the kernel size), padding at most half the kernel on each side;
 * out [N, C, OH, OW] with OH = (H + 2 padding[0] - kernel[0]) / stride[0] + 1 (floor).
 * kiln_max_pool2d: the window's maximum (NaN propagates), *indices (optional, NULL to skip; i64,
 * out's shape) the flat h W + w of each maximum in its plane, as return_indices=True gives.
 * kiln_avg_pool2d: the window's sum / (kernel[0] kernel[1]) (padding counted as zeros:
 * count_include_pad=True). kiln_adaptive_avg_pool2d: the global average, oh = ow = 1 only
 * (other sizes KILN_ERR_UNSUPPORTED for now). All differentiable in x. */
typedef struct kiln_pool2d_params {
    int kernel[2];
    int stride[2];  /* 0: the kernel size */
    int padding[2]; /* at most kernel / 2 */
} kiln_pool2d_params;
KILN_API kiln_status kiln_max_pool2d(const kiln_tensor *x, const kiln_pool2d_params *params,
                                     kiln_tensor **out, kiln_tensor **indices);
KILN_API kiln_status kiln_avg_pool2d(const kiln_tensor *x, const kiln_pool2d_params *params,
                                     kiln_tensor **out);
KILN_API kiln_status kiln_adaptive_avg_pool2d(const kiln_tensor *x, int64_t oh, int64_t ow,
                                              kiln_tensor **out);
KILN_API kiln_status kiln_max_pool2d_out(const kiln_tensor *x, const kiln_pool2d_params *params,
                                         kiln_tensor *out, kiln_tensor *indices);
KILN_API kiln_status kiln_avg_pool2d_out(const kiln_tensor *x, const kiln_pool2d_params *params,
                                         kiln_tensor *out);
KILN_API kiln_status kiln_adaptive_avg_pool2d_out(const kiln_tensor *x, int64_t oh, int64_t ow,
                                                  kiln_tensor *out);

/* Neural-network helpers (f32, f64; softmax also f16 and bf16). softmax/log_softmax are
 * max-subtracted (stable); their _out forms need an out of x's shape and dtype that shares no
 * memory with x (KILN_ERR_INVALID_ARGUMENT). */
KILN_API kiln_status kiln_softmax(const kiln_tensor *x, int axis, kiln_tensor **out);
KILN_API kiln_status kiln_softmax_out(const kiln_tensor *x, int axis, kiln_tensor *out);
KILN_API kiln_status kiln_log_softmax(const kiln_tensor *x, int axis, kiln_tensor **out);
KILN_API kiln_status kiln_log_softmax_out(const kiln_tensor *x, int axis, kiln_tensor *out);
/* Mean cross-entropy of logits [N, C] against class labels [N] (i32 or i64). *loss is a [1]
 * tensor; *grad (optional, may be NULL) is d loss / d logits = (softmax - onehot) / N. Labels
 * are not read back (that would block): a label outside [0, C) makes the loss NaN and is
 * reported by the next call that waits for the device (KILN_ERR_INVALID_ARGUMENT from a read,
 * an item, a map or kiln_device_synchronize: see there), unless the environment has
 * KILN_CHECK=1, which reads them first and reports the first bad one at once
 * (KILN_ERR_INVALID_ARGUMENT; a KILN_CHECK other than 0 or 1 is KILN_ERR_INVALID_ARGUMENT too). */
KILN_API kiln_status kiln_cross_entropy(const kiln_tensor *logits, const kiln_tensor *labels,
                                        kiln_tensor **loss, kiln_tensor **grad);
/* Mean squared error over all elements; *grad (optional) is d loss / d pred. */
KILN_API kiln_status kiln_mse_loss(const kiln_tensor *pred, const kiln_tensor *target,
                                   kiln_tensor **loss, kiln_tensor **grad);
/* The _out forms of the losses write the [1] loss into loss and, when grad is not NULL, the
 * gradient into grad (shaped like logits / pred), both of the input's dtype. loss is required;
 * neither may share memory with an input or with the other (KILN_ERR_INVALID_ARGUMENT). */
KILN_API kiln_status kiln_cross_entropy_out(const kiln_tensor *logits, const kiln_tensor *labels,
                                            kiln_tensor *loss, kiln_tensor *grad);
KILN_API kiln_status kiln_mse_loss_out(const kiln_tensor *pred, const kiln_tensor *target,
                                       kiln_tensor *loss, kiln_tensor *grad);

/* PyTorch's reduction argument of a loss: the mean or the sum of the elementwise losses (a [1]
 * tensor, as kiln_mse_loss's), or the elementwise losses themselves (the input's shape). */
typedef enum kiln_reduction {
    KILN_REDUCTION_MEAN = 0,
    KILN_REDUCTION_SUM = 1,
    KILN_REDUCTION_NONE = 2,
} kiln_reduction;
/* nn.L1Loss: |pred - target| (the gradient of |d| is 0 at d = 0, as PyTorch's). nn.BCELoss:
 * -(target log pred + (1 - target) log(1 - pred)), each log clamped to >= -100 as PyTorch's, so
 * that pred 0 or 1 gives a finite loss; pred must hold probabilities: a value outside [0, 1]
 * gives NaN there, as kiln does not read the values back, unless the environment has
 * KILN_CHECK=1: then it reads pred first and refuses the first such value as PyTorch does
 * (KILN_ERR_INVALID_ARGUMENT). nn.BCEWithLogitsLoss:
 * the same on sigmoid(logits), in the stable form softplus(logits) - target logits (no weight
 * or pos_weight). pred (logits) and target: one floating dtype, one shape, one device (else
 * KILN_ERR_DTYPE_MISMATCH, KILN_ERR_SHAPE_MISMATCH, KILN_ERR_DEVICE_MISMATCH). Differentiable
 * in both (recorded by autograd, as the ops they are made of). */
KILN_API kiln_status kiln_l1_loss(const kiln_tensor *pred, const kiln_tensor *target,
                                  kiln_reduction reduction, kiln_tensor **loss);
KILN_API kiln_status kiln_bce_loss(const kiln_tensor *pred, const kiln_tensor *target,
                                   kiln_reduction reduction, kiln_tensor **loss);
KILN_API kiln_status kiln_bce_with_logits_loss(const kiln_tensor *logits, const kiln_tensor *target,
                                               kiln_reduction reduction, kiln_tensor **loss);
/* The _out forms: the loss into loss (its shape and dtype: [1], or the input's shape for
 * KILN_REDUCTION_NONE), not recorded by autograd. */
KILN_API kiln_status kiln_l1_loss_out(const kiln_tensor *pred, const kiln_tensor *target,
                                      kiln_reduction reduction, kiln_tensor *loss);
KILN_API kiln_status kiln_bce_loss_out(const kiln_tensor *pred, const kiln_tensor *target,
                                       kiln_reduction reduction, kiln_tensor *loss);
KILN_API kiln_status kiln_bce_with_logits_loss_out(const kiln_tensor *logits,
                                                   const kiln_tensor *target,
                                                   kiln_reduction reduction, kiln_tensor *loss);

/* In-place optimizer steps. SGD: v = momentum * v + (grad + wd * p); p -= lr * v (velocity
 * may be NULL when momentum is 0). Adam (step counts from 1): the usual bias-corrected update. */
KILN_API kiln_status kiln_sgd_step(kiln_tensor *param, const kiln_tensor *grad,
                                   kiln_tensor *velocity, double lr, double momentum,
                                   double weight_decay);
KILN_API kiln_status kiln_adam_step(kiln_tensor *param, const kiln_tensor *grad, kiln_tensor *m,
                                    kiln_tensor *v, int64_t step, double lr, double beta1,
                                    double beta2, double eps);

/* ------------------------------------------------------------------------------------------
 * Autograd
 *
 * Reverse-mode automatic differentiation, PyTorch-like. A floating tensor can require
 * gradients (a leaf: a parameter is just such a tensor). While grad mode is on (the default; a
 * per-thread flag), the allocating form of every differentiable op given an input that requires
 * grad records a node on its result, which then requires grad too: the result holds its node,
 * the node holds (a reference to) the op's inputs, never its result, so there are no cycles and
 * releasing the last tensor of a graph frees the graph. Differentiable: binary ops and their
 * scalar forms (ADD, SUB, MUL, DIV, POW, MINIMUM, MAXIMUM; a broadcast input's gradient is
 * summed back to its shape; MINIMUM/MAXIMUM split a tie evenly), where (not cond), unary ops,
 * clamp (gradient 1 on [lo, hi]), cast between floating dtypes, reduce SUM, MEAN, MAX and MIN
 * (a tie shares the gradient evenly), matmul and matmul_trans (batched, broadcast batches
 * summed), kiln_tensor_reshape, kiln_tensor_clone, kiln_tensor_to, permute, transpose, slice,
 * cat, softmax, log_softmax, cross_entropy (logits), mse_loss (pred and target), index_select
 * and gather (x: a scatter-add, one work-item per column adding in index order, so the same
 * sums on every device; an out-of-range index adds nothing), and the layers (kiln_linear ...).
 * Results that are not floating (comparisons, argmax, casts to integers) never require grad.
 * Not recorded: the _out forms
 * (their result is a tensor without history, as if computed with grad mode off), creation and
 * random ops, optimizer steps, kiln_unary_backward, kernel launches.
 *
 * In-place writes (every _out form's out, kiln_tensor_write, kiln_tensor_copy's dst, a write
 * map, kiln_fill, kiln_arange_out, kiln_rand_*_out, the optimizer steps' param and state) bump
 * a version counter shared by a tensor and its reshaped views. An op whose backward needs an
 * input's values remembers its version; a backward that finds it changed fails with
 * KILN_ERR_STATE naming the op and the input, before any work. Kernel launches
 * (kiln_program_launch) do not bump versions: do not write a tensor a graph still needs there.
 *
 * Threads: grad mode is per thread. A graph (the tensors of one forward pass) must be used by
 * one thread at a time: two kiln_backward calls that reach the same node or leaf must not run
 * at once, and a leaf's gradient must not be read while a backward may replace it. Separate
 * graphs may be built and differentiated on separate threads, also from shared leaves that
 * neither thread's backward reaches concurrently.
 * ---------------------------------------------------------------------------------------- */

/* Whether t takes part in autograd. Only floating tensors can require grad
 * (KILN_ERR_DTYPE_MISMATCH for others); only leaves can stop requiring it (KILN_ERR_STATE for a
 * recorded result). */
KILN_API kiln_status kiln_tensor_set_requires_grad(kiln_tensor *t, bool requires_grad);
/* Whether t requires grad (a leaf with the flag, or a recorded result); false for NULL. */
KILN_API bool kiln_tensor_requires_grad(const kiln_tensor *t);
/* Whether t was made by the user rather than recorded by an op (true for every tensor without
 * history); false for NULL. */
KILN_API bool kiln_tensor_is_leaf(const kiln_tensor *t);
/* The gradient accumulated into the leaf t by kiln_backward, a tensor of t's shape, dtype and
 * device; NULL when none yet (or after kiln_tensor_zero_grad). A borrowed reference, valid until
 * the next kiln_backward that reaches t (which replaces it with a new tensor holding the sum),
 * kiln_tensor_zero_grad(t) or t's release: retain it to keep it longer. Pass it to
 * kiln_sgd_step / kiln_adam_step. Only leaves get gradients. */
KILN_API kiln_tensor *kiln_tensor_grad(const kiln_tensor *t);
/* Drop t's gradient (the next backward starts from zero), like PyTorch's zero_grad with
 * set_to_none. */
KILN_API kiln_status kiln_tensor_zero_grad(kiln_tensor *t);

/* Turn grad mode on or off for the calling thread; returns the previous setting, so that
 * `bool prev = kiln_set_grad_enabled(false); ... kiln_set_grad_enabled(prev);` nests (PyTorch's
 * no_grad). With it off nothing is recorded: use it for evaluation and for updates to
 * parameters. kiln_grad_enabled tells the current setting. */
KILN_API bool kiln_set_grad_enabled(bool enabled);
KILN_API bool kiln_grad_enabled(void);

/* Autocast (PyTorch's torch.autocast), for the calling thread: between kiln_autocast_begin(type,
 * KILN_F16 or KILN_BF16) and kiln_autocast_end(), ops on tensors of devices of `type`
 * (KILN_DEVICE_GPU, _CPU, _ACCELERATOR or a combination) follow PyTorch's policy (written here
 * for f16; bf16 the same):
 *   in f16 (f32 inputs cast, f64 and integers left alone): kiln_matmul, kiln_matmul_trans,
 *     kiln_linear, kiln_conv2d;
 *   in f32 (f16 inputs cast): kiln_softmax, kiln_log_softmax, kiln_logsumexp, kiln_reduce SUM,
 *     kiln_cross_entropy, kiln_mse_loss, kiln_bce_loss, kiln_bce_with_logits_loss,
 *     kiln_layer_norm, kiln_unary EXP / LOG / RSQRT / SOFTPLUS, kiln_binary and
 *     kiln_binary_scalar POW; recurrent layers too (kiln's have no f16 form yet; PyTorch's run in
 *     f16);
 *   kiln_batch_norm on an f16 x with f32 parameters: f32 statistics, y in f16 (as PyTorch's);
 *   everything else in its inputs' dtype, mixed inputs promoting as usual (f16 + f32: f32).
 * The casts are kiln_cast's, recorded by autograd: the gradients of f32 parameters (master
 * weights) come back in f32. A matmul's 16-bit copy of a parameter is not kept for the backward,
 * which casts the parameter again (PyTorch keeps its copies: a model's worth of 16-bit memory
 * until the backward). kiln_backward runs with autocast suspended (the gradients follow
 * the forward's dtypes), and the _out forms write their out's dtype as always. Regions nest
 * (at most 32 deep); the innermost naming a device's type decides, and KILN_F32 turns autocast
 * off inside a region. Other dtypes or types: KILN_ERR_INVALID_ARGUMENT; _end without a
 * region: KILN_ERR_STATE. kiln_autocast_dtype: the dtype the f16 ops run in on dev now (KILN_F16,
 * KILN_BF16, or KILN_F32 when no region applies; KILN_F32 for NULL). Pair f16 with
 * kiln_grad_scaler; bf16 has f32's exponent range and trains without one (as in PyTorch). */
KILN_API kiln_status kiln_autocast_begin(kiln_device_type type, kiln_dtype dtype);
KILN_API kiln_status kiln_autocast_end(void);
KILN_API kiln_dtype kiln_autocast_dtype(const kiln_device *dev);

typedef enum kiln_backward_flags {
    /* Keep the graph for another kiln_backward through it (PyTorch's retain_graph=True). */
    KILN_BACKWARD_RETAIN_GRAPH = 1 << 0,
} kiln_backward_flags;

/* Backpropagate from loss: d loss / d leaf is added to the gradient (kiln_tensor_grad) of every
 * leaf requiring grad that loss was computed from. grad NULL needs a one-element loss (the
 * gradient 1; other shapes are KILN_ERR_INVALID_ARGUMENT); else grad (loss's shape, dtype and
 * device) is the gradient of something downstream with respect to loss. A loss that does not
 * require grad is KILN_ERR_STATE. Everything is checked before any work: a graph already freed
 * (KILN_ERR_STATE), a saved input modified in place (KILN_ERR_STATE, see above), an op without a
 * gradient (KILN_ERR_UNSUPPORTED). The gradients are computed with kiln's own ops, with grad
 * mode off (no graph of the backward itself: no higher-order gradients), and go to the leaves
 * only when every step succeeded: a backward that fails (out of memory, a driver error) changes
 * no gradient and keeps the graph. Without KILN_BACKWARD_RETAIN_GRAPH a successful backward
 * frees the graph: every node it went through drops its inputs, and a later backward reaching
 * such a node is KILN_ERR_STATE; the tensors themselves (loss included) stay valid. Unknown
 * flag bits are KILN_ERR_INVALID_ARGUMENT. Asynchronous like the ops it runs. */
KILN_API kiln_status kiln_backward(kiln_tensor *loss, const kiln_tensor *grad,
                                   kiln_backward_flags flags);

/* ------------------------------------------------------------------------------------------
 * Parameters: a named list of tensors
 *
 * What PyTorch calls named_parameters() and a state_dict: layers add their weights to a list
 * (kiln_linear_params ...), optimizers step the tensors of a list, and a list saves to and
 * loads from a safetensors checkpoint under its names.
 * ---------------------------------------------------------------------------------------- */

typedef struct kiln_params kiln_params;

/* An empty list; free it with kiln_params_free (which releases its tensors). */
KILN_API kiln_status kiln_params_create(kiln_params **out);
/* Append t under name; the list retains t. A NULL or empty name, or one the list already holds,
 * is KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_params_add(kiln_params *p, const char *name, kiln_tensor *t);
/* The number of tensors (0 for NULL), and the i-th name and tensor in the order they were
 * added (borrowed: valid while the list lives; NULL for i out of range or a name not held). */
KILN_API int kiln_params_count(const kiln_params *p);
KILN_API const char *kiln_params_name(const kiln_params *p, int i);
KILN_API kiln_tensor *kiln_params_tensor(const kiln_params *p, int i);
KILN_API kiln_tensor *kiln_params_find(const kiln_params *p, const char *name);
KILN_API void kiln_params_free(kiln_params *p);
/* kiln_save of the list's tensors under their names. An empty list is
 * KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_params_save(const kiln_params *p, const char *path);

typedef enum kiln_load_flags {
    /* Load the names the list and the file both hold; a listed name missing from the file is
     * left as it is, a name of the file the list lacks is ignored (PyTorch's strict=False). */
    KILN_LOAD_NON_STRICT = 1 << 0,
    /* A tensor stored in another dtype converts to the list tensor's dtype, as kiln_cast
     * converts (floats round to nearest, float -> integer truncates and saturates). */
    KILN_LOAD_CONVERT_DTYPE = 1 << 1,
} kiln_load_flags;

/* Load a checkpoint into the list's tensors, strictly (PyTorch's load_state_dict): the file must
 * hold exactly the list's names (else KILN_ERR_INVALID_ARGUMENT, the message listing the
 * "Missing key(s)" and "Unexpected key(s)"), each with the tensor's dtype
 * (KILN_ERR_DTYPE_MISMATCH) and shape (KILN_ERR_SHAPE_MISMATCH). Everything is checked before
 * any tensor is written: a refused load changes nothing (an I/O error while the data is read, a
 * file truncated meanwhile, leaves the tensors before it written). An empty list is
 * KILN_ERR_INVALID_ARGUMENT. kiln_params_load_flags relaxes the rules with flags (0 is
 * kiln_params_load; unknown bits are KILN_ERR_INVALID_ARGUMENT); shapes must always match. */
KILN_API kiln_status kiln_params_load(const kiln_params *p, const char *path);
KILN_API kiln_status kiln_params_load_flags(const kiln_params *p, const char *path,
                                            kiln_load_flags flags);

/* ------------------------------------------------------------------------------------------
 * Optimizers
 *
 * PyTorch's torch.optim over a parameter list. An optimizer copies the list's tensors when it
 * is created (it retains them: the kiln_params may be freed afterwards) and keeps its state
 * (momentum buffers, Adam's moments and step counts) on each parameter's own device, allocated
 * at a parameter's first step; parameters may live on different devices. Every parameter must be
 * an f32 or f64 leaf, listed once (two entries sharing memory are KILN_ERR_INVALID_ARGUMENT);
 * one that does not require grad is allowed and, like every parameter without a gradient at a
 * step, skipped (PyTorch's frozen parameters). Hyperparameters must be finite: lr,
 * momentum and weight_decay >= 0, 0 <= beta1, beta2 < 1, eps > 0 (else
 * KILN_ERR_INVALID_ARGUMENT naming the value). An optimizer is used by one thread at a time.
 * ---------------------------------------------------------------------------------------- */

typedef struct kiln_optimizer kiln_optimizer;

/* SGD (torch.optim.SGD without dampening or Nesterov): d = grad + weight_decay * p;
 * buf = momentum * buf + d (buf starts at d; none when momentum is 0); p -= lr * buf. */
KILN_API kiln_status kiln_sgd_create(const kiln_params *params, double lr, double momentum,
                                     double weight_decay, kiln_optimizer **out);
/* Adam (torch.optim.Adam; weight decay is L2: grad += weight_decay * p before the moments):
 * m = beta1 m + (1 - beta1) grad, v = beta2 v + (1 - beta2) grad^2, step t counted per
 * parameter from 1, p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps). */
KILN_API kiln_status kiln_adam_create(const kiln_params *params, double lr, double beta1,
                                      double beta2, double eps, double weight_decay,
                                      kiln_optimizer **out);
/* AdamW (torch.optim.AdamW): Adam with decoupled weight decay, p *= 1 - lr * weight_decay
 * before the update, the gradient left alone. */
KILN_API kiln_status kiln_adamw_create(const kiln_params *params, double lr, double beta1,
                                       double beta2, double eps, double weight_decay,
                                       kiln_optimizer **out);
/* One update of every parameter that has a gradient (kiln_tensor_grad), in place, with grad
 * mode off; parameters without one are skipped (their Adam step count does not advance).
 * Asynchronous: nothing is read back, except once after kiln_optimizer_state's step tensors
 * were written (a load), to learn the step counts. State is allocated for every parameter
 * before any is updated, so out of memory there changes nothing; a driver error in the middle
 * leaves the parameters before it updated. Bumps the version counters of the parameters and
 * state (a graph that still needs a parameter's old value fails its backward). */
KILN_API kiln_status kiln_optimizer_step(kiln_optimizer *opt);
/* Drop the gradient of every parameter (kiln_tensor_zero_grad: PyTorch's set_to_none). */
KILN_API kiln_status kiln_optimizer_zero_grad(kiln_optimizer *opt);
/* The learning rate (NaN for NULL), and a new one for the next steps (a schedule). */
KILN_API double kiln_optimizer_lr(const kiln_optimizer *opt);
KILN_API kiln_status kiln_optimizer_set_lr(kiln_optimizer *opt, double lr);
/* Release the optimizer, its references to the parameters and its state (tensors a
 * kiln_params list holds stay valid). NULL is a no-op. */
KILN_API void kiln_optimizer_free(kiln_optimizer *opt);
/* The optimizer's state, for checkpoints (PyTorch's optimizer.state_dict()): adds to the list
 * `state` the live state tensors of every parameter, named after the parameter's name in the
 * list the optimizer was created from: SGD with momentum "<name>.momentum_buffer"; Adam and
 * AdamW "<name>.exp_avg", "<name>.exp_avg_sq" and "<name>.step" (i64 [1], the parameter's step
 * count); SGD without momentum has no state and adds nothing. State not allocated yet is
 * allocated now (zeros, step 0: the same as a fresh start). kiln_params_save(state) then writes
 * the state as it is at that moment, and kiln_params_load(state) restores it: the next
 * kiln_optimizer_step reads the loaded step counts back (once) and continues exactly as the
 * optimizer that saved it would have. state may be the model's checkpoint list (one file for
 * both), but not a list an optimizer is created from. A name the list already holds is
 * KILN_ERR_INVALID_ARGUMENT, and a failure adds nothing. The learning rate and other
 * hyperparameters are not state: create the optimizer with the same ones. */
KILN_API kiln_status kiln_optimizer_state(kiln_optimizer *opt, kiln_params *state);

/* Learning-rate schedules (torch.optim.lr_scheduler): a scheduler sets its optimizer's learning
 * rate from the base rate (the optimizer's at creation), at creation for epoch 0 (as PyTorch's
 * constructors do) and at each kiln_scheduler_step (epoch + 1; call it once per epoch, after the
 * epoch's optimizer steps), in PyTorch's closed forms, e = the epoch count:
 *   StepLR          base gamma^floor(e / step_size)
 *   MultiStepLR     base gamma^(number of milestones <= e)  (milestones non-decreasing)
 *   ExponentialLR   base gamma^e
 *   CosineAnnealing eta_min + (base - eta_min) (1 + cos(pi e / t_max)) / 2
 *   LinearLR        base (start + (end - start) min(e, total_iters) / total_iters): a linear
 *                   warmup with start_factor < end_factor = 1 (PyTorch's default start 1/3)
 * ReduceLROnPlateau steps on a metric (kiln_scheduler_step_metric, e.g. the validation loss):
 * the metric is better when below best (1 - threshold) (maximize: above best (1 + threshold)),
 * PyTorch's 'rel' mode; after more than patience epochs without a better one the rate becomes
 * max(rate factor, min_lr) (a change below 1e-8 is skipped) and cooldown epochs follow in which
 * bad epochs are not counted. PyTorch's defaults: factor 0.1, patience 10, threshold 1e-4,
 * cooldown 0, min_lr 0. One scheduler per optimizer (a second is KILN_ERR_INVALID_ARGUMENT);
 * free the scheduler before its optimizer, or after it (then every call but free fails).
 * kiln_scheduler_state adds the scheduler's state (epoch, rate, ReduceLROnPlateau's progress) to
 * a checkpoint list as "lr_scheduler.state" (an i64 [6] tensor on the optimizer's first
 * parameter's device, kept up to date at each step): kiln_params_load into a list holding it
 * restores the scheduler and the optimizer's rate before the optimizer's next step (or the
 * scheduler's next call), so training resumes where it was saved. */
typedef struct kiln_scheduler kiln_scheduler;
KILN_API kiln_status kiln_step_lr_create(kiln_optimizer *opt, int64_t step_size, double gamma,
                                         kiln_scheduler **out);
KILN_API kiln_status kiln_multistep_lr_create(kiln_optimizer *opt, const int64_t *milestones, int n,
                                              double gamma, kiln_scheduler **out);
KILN_API kiln_status kiln_exponential_lr_create(kiln_optimizer *opt, double gamma,
                                                kiln_scheduler **out);
KILN_API kiln_status kiln_cosine_annealing_lr_create(kiln_optimizer *opt, int64_t t_max,
                                                     double eta_min, kiln_scheduler **out);
KILN_API kiln_status kiln_linear_lr_create(kiln_optimizer *opt, double start_factor,
                                           double end_factor, int64_t total_iters,
                                           kiln_scheduler **out);
KILN_API kiln_status kiln_reduce_lr_on_plateau_create(kiln_optimizer *opt, bool maximize,
                                                      double factor, int64_t patience,
                                                      double threshold, int64_t cooldown,
                                                      double min_lr, kiln_scheduler **out);
KILN_API kiln_status kiln_scheduler_step(kiln_scheduler *s);
KILN_API kiln_status kiln_scheduler_step_metric(kiln_scheduler *s, double metric);
/* The epoch count (PyTorch's last_epoch; -1 for NULL). */
KILN_API int64_t kiln_scheduler_epoch(const kiln_scheduler *s);
KILN_API kiln_status kiln_scheduler_state(kiln_scheduler *s, kiln_params *state);
/* NULL is ignored. */
KILN_API void kiln_scheduler_free(kiln_scheduler *s);

/* Loss scaling for f16 training (PyTorch's torch.amp.GradScaler): small gradients of an f16
 * model would flush to zero, so the loss is multiplied by a large scale before the backward and
 * the gradients are divided by it before the optimizer's step, which is skipped when any of
 * them is inf or NaN; the scale then backs off (backoff_factor) on such a step and grows
 * (growth_factor) after growth_interval steps in a row without one. A training step:
 *   kiln_grad_scaler_scale(s, loss, &scaled); kiln_backward(scaled, NULL, 0);
 *   kiln_grad_scaler_unscale(s, opt);          (optional: before kiln_clip_grad_norm)
 *   kiln_grad_scaler_step(s, opt, &skipped);   kiln_grad_scaler_update(s);
 * Options zeroed (or NULL) are PyTorch's defaults: init_scale 65536, growth_factor 2,
 * backoff_factor 0.5, growth_interval 2000; bad values are KILN_ERR_INVALID_ARGUMENT naming
 * them. With `disabled` every call passes through (scale returns the loss itself as a new handle,
 * a view to release like the scaled loss; step is kiln_optimizer_step; get_scale is 1), so one
 * code path serves f32 and f16 runs.
 * unscale divides every gradient of the optimizer's parameters in place (one kernel launch per
 * gradient, each raising a device flag on a non-finite value); step unscales first if unscale
 * was not called, reads the flags back (its one wait for the device) and steps the optimizer
 * unless one was set (*skipped, optional, says so). A second unscale or step for the same
 * optimizer before the update, or an update with no step or unscale since the last one, is
 * KILN_ERR_STATE. Several optimizers may share a scaler (each unscaled and stepped once per
 * update). get_scale: the current scale (NaN for NULL). kiln_grad_scaler_state adds the
 * scaler's state (scale and growth tracker) to a checkpoint list as "grad_scaler.state", an i64
 * [2] tensor on dev kept up to date at each update; kiln_params_load into a list holding it
 * restores the scaler before its next call. A scaler is used by one thread at a time. */
typedef struct kiln_grad_scaler kiln_grad_scaler;
typedef struct kiln_grad_scaler_options {
    double init_scale;       /* 0: 65536 (2^16) */
    double growth_factor;    /* 0: 2; must be > 1 */
    double backoff_factor;   /* 0: 0.5; must be in (0, 1) */
    int64_t growth_interval; /* 0: 2000; must be >= 1 */
    bool disabled;           /* PyTorch's enabled=False */
} kiln_grad_scaler_options;
KILN_API kiln_status kiln_grad_scaler_create(const kiln_grad_scaler_options *options,
                                             kiln_grad_scaler **out);
KILN_API kiln_status kiln_grad_scaler_scale(kiln_grad_scaler *s, const kiln_tensor *loss,
                                            kiln_tensor **out);
KILN_API kiln_status kiln_grad_scaler_unscale(kiln_grad_scaler *s, kiln_optimizer *opt);
KILN_API kiln_status kiln_grad_scaler_step(kiln_grad_scaler *s, kiln_optimizer *opt, bool *skipped);
KILN_API kiln_status kiln_grad_scaler_update(kiln_grad_scaler *s);
KILN_API double kiln_grad_scaler_get_scale(kiln_grad_scaler *s);
KILN_API kiln_status kiln_grad_scaler_state(kiln_grad_scaler *s, kiln_device *dev,
                                            kiln_params *state);
/* NULL is ignored. */
KILN_API void kiln_grad_scaler_free(kiln_grad_scaler *s);

/* kiln_tensor_zero_grad of every tensor of the list. */
KILN_API kiln_status kiln_params_zero_grad(const kiln_params *p);
/* PyTorch's clip_grad_norm_: the L2 norm of all the list's gradients together (tensors without
 * a gradient count as zero); when it is above max_norm (finite, >= 0), every gradient is
 * multiplied in place by max_norm / (norm + 1e-6). A NaN or infinite norm multiplies them by
 * NaN or 0, as PyTorch does (check *total_norm). *total_norm (optional, may be NULL) is the norm
 * before clipping. Reads the per-tensor norms back: blocks until the gradients are computed. */
KILN_API kiln_status kiln_clip_grad_norm(const kiln_params *p, double max_norm, double *total_norm);

/* ------------------------------------------------------------------------------------------
 * Layers
 * ---------------------------------------------------------------------------------------- */

/* Functional layers, recorded by autograd (composed of the differentiable ops above).
 * kiln_linear: y = x @ weight^T + bias, weight [out, in], x [..., in], bias [out] or NULL; f32
 * and f64. kiln_layer_norm: over the last axis, (x - mean) / sqrt(var + eps) (biased variance)
 * * weight + bias, weight and bias [dim] or NULL, eps finite and >= 0. kiln_dropout: element i
 * is zeroed when the i-th Philox uniform of seed (kiln_rand_uniform's numbers, the same on every
 * device and for every dtype) is below p, the survivors are scaled by 1 / (1 - p); p in [0, 1)
 * (else KILN_ERR_INVALID_ARGUMENT), p = 0 gives a copy. Every tensor must be on x's device with
 * x's floating dtype (KILN_ERR_DTYPE_MISMATCH); bad shapes are KILN_ERR_SHAPE_MISMATCH. An
 * embedding is kiln_index_select(table, 0, indices), whose gradient scatters back into the
 * table's rows. */
KILN_API kiln_status kiln_linear(const kiln_tensor *x, const kiln_tensor *weight,
                                 const kiln_tensor *bias, kiln_tensor **y);
/* Batch normalisation as torch.nn.functional.batch_norm, per channel (dimension 1) of x [N, C,
 * ...]: training uses the batch's mean and biased variance over N and the trailing dimensions
 * (more than one value per channel), and, when running_mean and running_var are given, updates
 * them in place to (1 - momentum) running + momentum batch (the variance unbiased, n / (n - 1));
 * evaluation uses the running values (both required). Then * weight + bias (each optional, [C]).
 * Differentiable in x, weight and bias (in training through the batch statistics); autograd
 * keeps x and the per-channel mean and 1/sqrt(var + eps), as PyTorch's does. Momentum in [0, 1]
 * (PyTorch's default 0.1), eps >= 0 (1e-5). num_batches_tracked is the module's. The other
 * tensors have x's dtype, or f32 for an f16 or bf16 x (PyTorch's mixed batch norm, what autocast
 * runs): the statistics and arithmetic are f32 at least, y has x's dtype. */
KILN_API kiln_status kiln_batch_norm(const kiln_tensor *x, kiln_tensor *running_mean,
                                     kiln_tensor *running_var, const kiln_tensor *weight,
                                     const kiln_tensor *bias, bool training, double momentum,
                                     double eps, kiln_tensor **y);
KILN_API kiln_status kiln_layer_norm(const kiln_tensor *x, const kiln_tensor *weight,
                                     const kiln_tensor *bias, double eps, kiln_tensor **y);
KILN_API kiln_status kiln_dropout(const kiln_tensor *x, double p, uint64_t seed, kiln_tensor **y);

/* Recurrent cells, one time step of a batch (PyTorch's nn.RNNCell / LSTMCell / GRUCell as
 * functions): x [B, in]; h, c [B, hidden] (NULL: zeros); w_ih [G hidden, in], w_hh [G hidden,
 * hidden], b_ih and b_hh [G hidden] (both, or both NULL), with G = 1 for the RNN, 4 for the LSTM
 * (gates i, f, g, o) and 3 for the GRU (r, z, n; b_hn inside the reset product), PyTorch's
 * layouts and formulas, so its weights work as they are. kiln_rnn_cell's nonlinearity is
 * KILN_UNARY_TANH or KILN_UNARY_RELU. f32 or f64. One matmul for x, one for h and one kernel for
 * the gate arithmetic; differentiable in every tensor. Shapes that disagree are
 * KILN_ERR_SHAPE_MISMATCH naming the tensor and the shape it needs. */
KILN_API kiln_status kiln_rnn_cell(const kiln_tensor *x, const kiln_tensor *h,
                                   const kiln_tensor *w_ih, const kiln_tensor *w_hh,
                                   const kiln_tensor *b_ih, const kiln_tensor *b_hh,
                                   kiln_unary_op nonlinearity, kiln_tensor **h_out);
KILN_API kiln_status kiln_lstm_cell(const kiln_tensor *x, const kiln_tensor *h,
                                    const kiln_tensor *c, const kiln_tensor *w_ih,
                                    const kiln_tensor *w_hh, const kiln_tensor *b_ih,
                                    const kiln_tensor *b_hh, kiln_tensor **h_out,
                                    kiln_tensor **c_out);
KILN_API kiln_status kiln_gru_cell(const kiln_tensor *x, const kiln_tensor *h,
                                   const kiln_tensor *w_ih, const kiln_tensor *w_hh,
                                   const kiln_tensor *b_ih, const kiln_tensor *b_hh,
                                   kiln_tensor **h_out);
/* A padded batch's mask: [max_len, batch] ([batch, max_len] with batch_first) of dtype, 1 where
 * time t < lengths[b], else 0 (lengths[0..batch-1] each in 0..max_len). kiln_masked_mean: the mean
 * of x over the elements where mask (broadcast to x's shape, one floating dtype) is 1, i.e.
 * sum(x mask) / sum(mask broadcast): the loss of a padded batch without its padding. */
KILN_API kiln_status kiln_sequence_mask(kiln_device *dev, kiln_dtype dtype, const int64_t *lengths,
                                        int64_t batch, int64_t max_len, bool batch_first,
                                        kiln_tensor **out);
KILN_API kiln_status kiln_masked_mean(const kiln_tensor *x, const kiln_tensor *mask,
                                      kiln_tensor **out);

/* Modules (PyTorch's torch.nn): a layer with its parameters, run by kiln_module_forward.
 * Parameters are leaves requiring grad, made with Philox so that one seed gives bit-identical
 * weights on every device; the dtype must be floating (KILN_ERR_DTYPE_MISMATCH), sizes >= 1
 * (KILN_ERR_INVALID_ARGUMENT). A failed create leaves *m NULL and leaks nothing. */
typedef struct kiln_module kiln_module;

/* Linear weight initialisation (fan_in = in, fan_out = out). A bias, when asked for, is drawn
 * with seed mixed by splitmix64 (DEFAULT) or zero (HE, XAVIER). */
typedef enum kiln_init {
    KILN_INIT_DEFAULT = 0, /* PyTorch nn.Linear's: U(-1/sqrt(in), 1/sqrt(in)), bias too */
    KILN_INIT_HE = 1,      /* N(0, 2/in) (Kaiming normal, for ReLU), bias 0 */
    KILN_INIT_XAVIER = 2,  /* U(-sqrt(6/(in+out)), sqrt(6/(in+out))) (Glorot uniform), bias 0 */
} kiln_init;

/* weight [out, in] (seed), bias [out] when bias is true; forward is kiln_linear. f32, f64, f16
 * or bf16 (stored in 16 bits, the product accumulated in f32 as kiln_matmul's, the bias added
 * after it is rounded to 16 bits: two roundings, where PyTorch's CPU bf16 linear rounds once).
 * Layer norm and embedding take f16 and bf16 too. */
KILN_API kiln_status kiln_linear_create(kiln_device *dev, kiln_dtype dtype, int64_t in, int64_t out,
                                        bool bias, kiln_init init, uint64_t seed, kiln_module **m);
/* weight ones [dim], bias zeros [dim]; forward is kiln_layer_norm over the last axis. */
KILN_API kiln_status kiln_layer_norm_create(kiln_device *dev, kiln_dtype dtype, int64_t dim,
                                            double eps, kiln_module **m);
/* weight [count, dim] drawn N(0, 1) (seed); forward takes i32/i64 indices of any shape S and
 * gives S + [dim] (rows of weight; an index outside [0, count) gives a row of zeros). */
KILN_API kiln_status kiln_embedding_create(kiln_device *dev, kiln_dtype dtype, int64_t count,
                                           int64_t dim, uint64_t seed, kiln_module **m);
/* While training (the default), forward call k (from 0) is kiln_dropout(x, p, seed + k): a new
 * mask each call. When not training, forward gives x's values: a new handle on x's memory (a view,
 * like kiln_tensor_reshape to x's shape). */
KILN_API kiln_status kiln_dropout_create(double p, uint64_t seed, kiln_module **m);
/* forward is kiln_unary(op, x): KILN_UNARY_RELU, GELU, TANH, SIGMOID, or any other unary op. */
KILN_API kiln_status kiln_activation_create(kiln_unary_op op, kiln_module **m);
/* nn.Conv2d(in, out, (kh, kw), stride, padding, dilation, groups, bias): weight [out, in/groups,
 * kh, kw] and bias [out] drawn U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups kh kw, as
 * PyTorch's defaults (the bias with seed mixed); forward is kiln_conv2d with params (NULL: stride
 * 1, no padding, dilation 1, groups 1; negative members, or in or out not divisible by groups,
 * are KILN_ERR_INVALID_ARGUMENT). f32, f64, f16 or bf16 (as kiln_conv2d). */
KILN_API kiln_status kiln_conv2d_create(kiln_device *dev, kiln_dtype dtype, int64_t in, int64_t out,
                                        int kh, int kw, const kiln_conv2d_params *params, bool bias,
                                        uint64_t seed, kiln_module **m);
/* nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d((1, 1)) and nn.Flatten(start, end)
 * (PyTorch's default nn.Flatten() is start 1, end -1): no parameters; forward is
 * kiln_max_pool2d (without indices), kiln_avg_pool2d, kiln_adaptive_avg_pool2d, kiln_flatten. The
 * pooling params are required (a kernel of at least 1; the rest as kiln_pool2d_params says). */
KILN_API kiln_status kiln_max_pool2d_create(const kiln_pool2d_params *params, kiln_module **m);
KILN_API kiln_status kiln_avg_pool2d_create(const kiln_pool2d_params *params, kiln_module **m);
KILN_API kiln_status kiln_adaptive_avg_pool2d_create(int64_t oh, int64_t ow, kiln_module **m);
KILN_API kiln_status kiln_flatten_create(int start, int end, kiln_module **m);
/* nn.BatchNorm2d(features, eps, momentum) (x [N, C, H, W]) and nn.BatchNorm1d (x [N, C] or
 * [N, C, L]; another rank is KILN_ERR_SHAPE_MISMATCH, "expected 4D input (got 3D input)"):
 * parameters weight (ones) and bias (zeros) [features]; buffers running_mean (zeros),
 * running_var (ones) [features] and num_batches_tracked (a 0-d i64 tensor, 0), PyTorch's names,
 * listed by kiln_module_state. Forward is kiln_batch_norm: in training mode (the default) with the
 * batch's statistics, updating the running buffers and counting the batch; after
 * kiln_module_set_training(m, false), with the running values. PyTorch's defaults are eps 1e-5,
 * momentum 0.1. */
KILN_API kiln_status kiln_batch_norm1d_create(kiln_device *dev, kiln_dtype dtype, int64_t features,
                                              double eps, double momentum, kiln_module **m);
KILN_API kiln_status kiln_batch_norm2d_create(kiln_device *dev, kiln_dtype dtype, int64_t features,
                                              double eps, double momentum, kiln_module **m);
/* Recurrent layers as nn.RNN, nn.LSTM and nn.GRU: opt NULL (or zeroed) gives PyTorch's defaults
 * (one layer, with biases, [time, batch, features], no dropout, one direction, tanh). Parameters
 * per layer k and direction: weight_ih_l<k> [G hidden, in], weight_hh_l<k> [G hidden, hidden],
 * bias_ih_l<k>, bias_hh_l<k> [G hidden] (the backward direction's with "_reverse"), PyTorch's
 * names, order and gate layout (G as for the cells), drawn U(-1/sqrt(hidden), 1/sqrt(hidden))
 * (seed), so a state_dict loads both ways; layer k > 0 takes the previous layer's output (2
 * hidden wide when bidirectional). f32 or f64. Run with kiln_rnn_forward, or kiln_module_forward
 * for the output alone. */
typedef struct kiln_rnn_options {
    int num_layers;     /* 0: 1 */
    bool no_bias;       /* PyTorch's bias=False */
    bool batch_first;   /* x and y are [batch, time, features] */
    double dropout;     /* on every layer's output but the last's while training, in [0, 1) */
    bool bidirectional; /* a second direction, reading each sequence from its end */
    bool relu;          /* kiln_rnn_create: ReLU instead of tanh */
} kiln_rnn_options;
KILN_API kiln_status kiln_rnn_create(kiln_device *dev, kiln_dtype dtype, int64_t input_size,
                                     int64_t hidden_size, const kiln_rnn_options *opt,
                                     uint64_t seed, kiln_module **m);
KILN_API kiln_status kiln_lstm_create(kiln_device *dev, kiln_dtype dtype, int64_t input_size,
                                      int64_t hidden_size, const kiln_rnn_options *opt,
                                      uint64_t seed, kiln_module **m);
KILN_API kiln_status kiln_gru_create(kiln_device *dev, kiln_dtype dtype, int64_t input_size,
                                     int64_t hidden_size, const kiln_rnn_options *opt,
                                     uint64_t seed, kiln_module **m);
/* A recurrent layer over x [T, B, input_size] ([B, T, input_size] with batch_first): y [T, B, D
 * hidden] (D = 2 when bidirectional: the forward direction's outputs, then the backward's);
 * h_n, and the LSTM's c_n, [layers D, B, hidden] (NULL: not wanted; c_n must be NULL for an RNN
 * or GRU). h0, c0 of h_n's shape, or NULL for zeros. lengths: NULL, or B values in 1..T, the
 * rows' real lengths (PyTorch's pack_padded_sequence, in any order): y is zero past a row's end,
 * h_n holds the state after its last real step, and the backward direction starts at that
 * step. Per layer and direction, one matmul projects every time step's input, then each step is
 * one matmul and one kernel, with nothing read back; the backward through time reuses the saved
 * gate activations (one kernel and one matmul per step). Differentiable in x, h0, c0 and every
 * parameter. */
KILN_API kiln_status kiln_rnn_forward(kiln_module *m, const kiln_tensor *x, const int64_t *lengths,
                                      const kiln_tensor *h0, const kiln_tensor *c0, kiln_tensor **y,
                                      kiln_tensor **h_n, kiln_tensor **c_n);
/* mods[0..n-1] applied in order (n >= 1). Takes ownership of every module in mods, also on
 * failure (they are freed then): a NULL entry, one listed twice or one another sequential
 * holds is KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_sequential_create(kiln_module *const *mods, int n, kiln_module **m);
/* y = the module applied to x (a new tensor; recorded by autograd when a parameter or x
 * requires grad). Errors are those of the functional form. */
KILN_API kiln_status kiln_module_forward(kiln_module *m, const kiln_tensor *x, kiln_tensor **y);
/* Append the parameters to list under PyTorch's state_dict names: "weight", "bias" for a
 * layer, "<i>.weight" ... for the i-th module of a sequential (modules without parameters add
 * nothing), each prefixed by "prefix." when prefix is neither NULL nor "". The list retains the
 * tensors; a name the list already holds is KILN_ERR_INVALID_ARGUMENT, and on any failure the
 * list is left as it was. */
KILN_API kiln_status kiln_module_params(const kiln_module *m, const char *prefix,
                                        kiln_params *list);
/* model.state_dict(): the parameters and the buffers (batch norm's running_mean, running_var,
 * num_batches_tracked), each module's in PyTorch's order, named as kiln_module_params names them.
 * Save and load this list (kiln_save, kiln_params_load) to checkpoint a model with batch norm;
 * give the optimizer kiln_module_params' list (buffers are not trained). */
KILN_API kiln_status kiln_module_state(const kiln_module *m, const char *prefix, kiln_params *list);
/* PyTorch's model.to(device) and model.to(dtype): every parameter (and buffer; to_dtype leaves
 * integer buffers as they are) of m and of the modules inside it becomes a copy on dev
 * (kiln_tensor_to), or converted to dtype (kiln_cast: floating dtypes only, else
 * KILN_ERR_DTYPE_MISMATCH; f16 or bf16 for a model holding a recurrent layer is
 * KILN_ERR_UNSUPPORTED: its gate kernels compute f32 and f64 only), a new leaf requiring grad
 * without a gradient. Parameters already there (or of that dtype) stay as they are. All copies are
 * made before any is swapped in: a failure (out of memory, no fp64 on the device) leaves m
 * unchanged. The old tensors are released by m: a kiln_params list or an optimizer made before
 * still holds them, so call kiln_module_params and create the optimizer after moving the model (as
 * PyTorch advises). */
KILN_API kiln_status kiln_module_to(kiln_module *m, kiln_device *dev);
KILN_API kiln_status kiln_module_to_dtype(kiln_module *m, kiln_dtype dtype);
/* model.train() / model.eval(): training mode for m and every module inside it (dropout and batch
 * norm use it). NULL is ignored. */
KILN_API void kiln_module_set_training(kiln_module *m, bool training);
/* Free m, the modules it holds and its references to its parameters. NULL is ignored. */
KILN_API void kiln_module_free(kiln_module *m);

/* ------------------------------------------------------------------------------------------
 * Data loading (PyTorch's torch.utils.data)
 *
 * kiln_randperm: torch.randperm(n) as an i64 tensor [n] on dev, the same on every device and
 * machine for one seed (KILN_SEED_GLOBAL: the global generator's next): Fisher-Yates from the
 * end, position i (n-1 down to 1) swapped with (w0 + 2^32 w1) mod (i + 1), w0 and w1 the first
 * two words of Philox4x32-10 at counter (i, 0) under key seed (kiln_rand_uniform's generator).
 *
 * A dataset (TensorDataset) holds samples copied from host arrays: features [samples, ...] and
 * targets [samples, ...] (any dtypes; targets may be NULL), dimension 0 counting the samples in
 * both (else KILN_ERR_SHAPE_MISMATCH). kiln_random_split divides a dataset into n datasets by
 * fractions (each in [0, 1], summing to 1): part k gets floor(fractions[k] size) samples, the
 * rest go one each to parts 0, 1, ... (PyTorch's rule), drawn in the order of the permutation
 * kiln_randperm(size, seed) gives; the parts share the samples (free each, in any order).
 *
 * A loader (DataLoader) yields batches of a dataset as new tensors on dev: *x [b, ...] and *y
 * [b, ...] (NULL where the dataset has no targets, or pass y NULL), b = batch_size except for a
 * shorter last batch (dropped with drop_last). kiln_loader_next returns KILN_OK with *x NULL once
 * an epoch's batches are given; the call after starts the next epoch. With shuffle, epoch e
 * (from 0) visits the samples in the order of kiln_randperm(size, seed + e) (seed drawn once
 * when KILN_SEED_GLOBAL), else in order. The batches join the calling thread's scope, as any new
 * tensor. A dataset, its parts and loaders are used by one thread at a time.
 *
 *     kiln_loader *train;
 *     kiln_loader_create(parts[0], dev, 64, true, false, 42, &train);
 *     for (int epoch = 0; epoch < 10; epoch++)
 *         for (kiln_tensor *x, *y; kiln_loader_next(train, &x, &y) == KILN_OK && x;) {
 *             ... a training step on x, y; release them (or end the step's scope) ...
 *         }
 */
KILN_API kiln_status kiln_randperm(kiln_device *dev, int64_t n, uint64_t seed, kiln_tensor **out);
typedef struct kiln_dataset kiln_dataset;
KILN_API kiln_status kiln_dataset_create(const void *features, kiln_dtype features_dtype,
                                         int features_ndim, const int64_t *features_shape,
                                         const void *targets, kiln_dtype targets_dtype,
                                         int targets_ndim, const int64_t *targets_shape,
                                         kiln_dataset **out);
/* The number of samples (0 for NULL). */
KILN_API int64_t kiln_dataset_size(const kiln_dataset *d);
/* parts: room for n datasets, all NULL on failure. */
KILN_API kiln_status kiln_random_split(const kiln_dataset *d, int n, const double *fractions,
                                       uint64_t seed, kiln_dataset **parts);
/* NULL is ignored. */
KILN_API void kiln_dataset_free(kiln_dataset *d);
typedef struct kiln_loader kiln_loader;
/* The loader keeps what it needs of d (d may be freed after). batch_size >= 1. */
KILN_API kiln_status kiln_loader_create(const kiln_dataset *d, kiln_device *dev, int64_t batch_size,
                                        bool shuffle, bool drop_last, uint64_t seed,
                                        kiln_loader **out);
/* Batches per epoch: len(loader) (0 for NULL). */
KILN_API int64_t kiln_loader_batches(const kiln_loader *l);
KILN_API kiln_status kiln_loader_next(kiln_loader *l, kiln_tensor **x, kiln_tensor **y);
/* DataLoader(pin_memory=True) with a batch of prefetch, off by default: on, the loader gathers
 * each batch into pinned host memory (kiln_tensor_empty_pinned) and uploads it on a copy queue of
 * its own (kiln_queue_create) one batch ahead, so that the next batch's copy overlaps the step
 * the program computes on this one (on a discrete GPU; on a CPU device both are memcpy's). The
 * batches are the same ones, in the same order; kiln_loader_next orders each onto the calling
 * thread's queue before it returns it. Costs a queue of the device and two pinned buffers per
 * part of a batch's size; off releases them. NULL is KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_loader_pin_memory(kiln_loader *l, bool on);
/* NULL is ignored. */
KILN_API void kiln_loader_free(kiln_loader *l);

/* ------------------------------------------------------------------------------------------
 * Scopes for temporaries
 *
 * A scope owns every tensor the calling thread creates while it is the thread's innermost scope:
 * the results of every allocating op, creation, kiln_tensor_to (onto the tensor's own device it
 * then returns a new handle sharing the memory rather than t retained), clone, reshape and other
 * views, kiln_load's... kiln_scope_end releases the creation reference of each one that was not
 * kept or released, so a training step needs no per-temporary release:
 *
 *     kiln_scope *sc;
 *     kiln_scope_begin(&sc);
 *     kiln_matmul(x, w, &h); ... kiln_cross_entropy(logits, labels, &loss, NULL);
 *     kiln_backward(loss, NULL, 0);
 *     kiln_sgd_step(w, kiln_tensor_grad(w), NULL, lr, 0, 0);
 *     kiln_scope_keep(sc, loss);   (keep one: the caller now owns it)
 *     kiln_scope_end(sc);          (h, logits and every other temporary released)
 *
 * Only creation references are owned: a tensor retained by someone else (kiln_tensor_retain, a
 * kiln_params list, the graph of a tensor that lives on) survives the scope end and is freed at
 * its last release. What kiln keeps itself is never owned by a scope: a leaf's gradient (made
 * by kiln_backward), a kiln_checkpoint's tensors, an optimizer's state, a layer's weights.
 * Tensors may be released inside the scope as usual (on any thread): kiln_tensor_release of an
 * owned tensor releases the scope's reference and takes it out of the scope. If you retained
 * an owned tensor and then release it once, the reference left is yours.
 *
 * Scopes nest per thread; a scope is ended on the thread that began it. kiln_scope_end of a
 * scope that is not the innermost logs a KILN_ERR_STATE error and ends the scopes begun inside
 * it first (innermost first), then this one; of a scope open on another thread, it logs a
 * KILN_ERR_STATE error and does nothing; of a handle whose scope has ended (ended twice, or
 * ended by the end of a scope around it) or that kiln_scope_begin never returned, it logs a
 * KILN_ERR_INVALID_ARGUMENT error and does nothing. NULL is a no-op. A handle is a serial number,
 * never reused: a stale one can never name a later scope.
 * ---------------------------------------------------------------------------------------- */

typedef struct kiln_scope kiln_scope;

/* Push a new scope on the calling thread's stack. */
KILN_API kiln_status kiln_scope_begin(kiln_scope **out);

/* Take t out of scope: into the enclosing scope of the thread if there is one, else the caller
 * owns its creation reference (releases it). KILN_ERR_INVALID_ARGUMENT when scope is not open
 * (NULL, ended, or not from kiln_scope_begin) or t does not belong to it (created outside it or
 * in an inner scope, or already kept or released). */
KILN_API kiln_status kiln_scope_keep(kiln_scope *scope, kiln_tensor *t);

/* Release every tensor scope still owns and pop it (see above for a non-innermost scope). */
KILN_API void kiln_scope_end(kiln_scope *scope);

/* ------------------------------------------------------------------------------------------
 * Queues and events (CUDA streams and events)
 *
 * Every device has a default queue, in order: what one thread enqueues runs in the order it was
 * enqueued. kiln_queue_create makes another queue of the device (torch.cuda.Stream): work on
 * two queues may overlap (a copy on one while a kernel runs on the other, where the device can).
 * kiln_queue_set_current(dev, q) makes q where this thread's work on dev goes, as
 * torch.cuda.set_stream (NULL: the default queue again); kiln_queue_current gives it (NULL for
 * the default queue). Correctness never depends on the program's ordering: every tensor's memory
 * remembers the queue that last used it, and a use on another queue first waits for the work
 * enqueued there until then (PyTorch's stream semantics with record_stream done for you); the
 * caching allocator gives a freed buffer back only to the queue that freed it. What this costs
 * (a marker and a barrier when a tensor changes queues) is paid only once a program has made a
 * queue. kiln_device_synchronize waits for every queue of the device; kiln_queue_synchronize
 * for one. kiln_queue_release waits for its work, then frees it (the current queue of the
 * calling thread cannot be released: KILN_ERR_STATE); NULL is ignored. At most 32 queues per
 * device are open at once (KILN_ERR_OUT_OF_MEMORY past that). A device-side error (see
 * kiln_device_synchronize) of a kernel on a queue is reported at a wait on that queue or at
 * kiln_device_synchronize.
 *
 * An event (torch.cuda.Event) marks a point in a queue: kiln_event_record(dev, q, &ev) records
 * it after what is enqueued on q (NULL: this thread's current queue on dev); kiln_event_wait
 * blocks the host until it is reached, kiln_event_query says whether it is (done);
 * kiln_queue_wait_event(q, ev) makes later work on q (NULL: the current queue of ev's device)
 * wait for it on the device, without the host waiting (q may be of another device of ev's
 * platform: KILN_ERR_DEVICE_MISMATCH otherwise); kiln_event_elapsed_ms gives the device time
 * from start to end (both reached: KILN_ERR_STATE otherwise; same device). Events are timed by
 * OpenCL event profiling: queues of kiln_queue_create have it on; on the default queue an event
 * also enqueues a marker on the device's timed queue, waiting for it.
 *
 *     kiln_queue *copy;
 *     kiln_event *start, *end;
 *     kiln_queue_create(dev, &copy);
 *     kiln_event_record(dev, NULL, &start);
 *     ... work on the default queue ...
 *     kiln_event_record(dev, NULL, &end);
 *     kiln_event_wait(end);
 *     double ms;
 *     kiln_event_elapsed_ms(start, end, &ms);
 */
typedef struct kiln_queue kiln_queue;
typedef struct kiln_event kiln_event;
KILN_API kiln_status kiln_queue_create(kiln_device *dev, kiln_queue **out);
KILN_API kiln_status kiln_queue_release(kiln_queue *q);
KILN_API kiln_status kiln_queue_set_current(kiln_device *dev, kiln_queue *q);
KILN_API kiln_queue *kiln_queue_current(kiln_device *dev);
/* The queue's device; NULL for NULL or a handle kiln did not give out. */
KILN_API kiln_device *kiln_queue_device(const kiln_queue *q);
KILN_API kiln_status kiln_queue_synchronize(kiln_queue *q);
KILN_API kiln_status kiln_queue_wait_event(kiln_queue *q, const kiln_event *ev);
KILN_API kiln_status kiln_event_record(kiln_device *dev, kiln_queue *q, kiln_event **out);
KILN_API kiln_status kiln_event_wait(const kiln_event *ev);
KILN_API kiln_status kiln_event_query(const kiln_event *ev, bool *done);
KILN_API kiln_status kiln_event_elapsed_ms(const kiln_event *start, const kiln_event *end,
                                           double *ms);
/* NULL is ignored. */
KILN_API void kiln_event_release(kiln_event *ev);

/* ------------------------------------------------------------------------------------------
 * Pinned host memory and asynchronous copies (pin_memory() and non_blocking=True)
 *
 * kiln_tensor_empty_pinned makes a pinned host tensor for dev: page-locked host memory (a
 * CL_MEM_ALLOC_HOST_PTR buffer of dev's context, mapped for its whole life) that a discrete
 * GPU's copy engine reads and writes directly, with no staging copy. It is host memory, counted
 * in no kiln_memory_stats: kiln_tensor_map gives its pointer (no copy), kiln_tensor_read and
 * kiln_tensor_write copy from and into it, and ops and kernels refuse it
 * (KILN_ERR_INVALID_ARGUMENT; kiln_tensor_cl_mem gives NULL). Too large: KILN_ERR_OUT_OF_MEMORY.
 *
 * kiln_tensor_copy_async(dst, src) copies src into dst on the calling thread's current queue of
 * their device and returns at once (dst.copy_(src, non_blocking=True)): host to device from a
 * pinned tensor, device to host into one, or device to device. The two are on one device (a
 * pinned tensor's is the device it was made for: KILN_ERR_DEVICE_MISMATCH), of one dtype and
 * element count. kiln_tensor_to(pinned, dev) is the same upload into a new tensor on dev
 * (x.to(dev, non_blocking=True)), which must be the pinned tensor's device. The device side
 * follows the queue rules above: a later use on another queue waits for the copy. The pinned
 * side's host access (kiln_tensor_map, _read, _write, its release) first waits for the copies
 * that use it. On a second queue an upload overlaps what the default queue computes after it
 * is enqueued (it waits for what was enqueued there before, which may still use the memory of
 * dst); kiln_loader_pin_memory does this for a loader's batches.
 *
 *     kiln_tensor *host, *x;
 *     kiln_tensor_empty_pinned(dev, KILN_F32, 2, shape, &host);    // once, reused
 *     kiln_tensor_write(host, data, nbytes);                        // or fill it mapped
 *     kiln_queue_set_current(dev, copy);
 *     kiln_tensor_to(host, dev, &x);                                // returns at once
 *     kiln_queue_set_current(dev, NULL);
 *     ... ops on x on the default queue wait for the copy ...
 */
KILN_API kiln_status kiln_tensor_empty_pinned(kiln_device *dev, kiln_dtype dtype, int ndim,
                                              const int64_t *shape, kiln_tensor **out);
KILN_API kiln_status kiln_tensor_copy_async(kiln_tensor *dst, const kiln_tensor *src);

/* ------------------------------------------------------------------------------------------
 * Profiler (torch.profiler)
 *
 * Between kiln_profiler_start and kiln_profiler_stop kiln records every kernel it enqueues (named
 * by the public op that launched it - kiln_matmul, kiln_conv2d -, a deferred elementwise op by
 * its name - add, relu -, a fused chain by its ops - "fused: mul+add+relu" -, a user kernel by
 * its own name), every copy, fill and map (with the
 * bytes moved), every program build or load from the disk cache, and the ranges the program
 * marks with kiln_profiler_range_push/pop, each with its device, queue, host thread, host time
 * (a launch: from kiln's entry to the enqueue's return) and the phase of the training step
 * (forward in kiln_module_forward, backward in kiln_backward, optimizer in kiln_optimizer_step).
 * KILN_PROFILE_DEVICE adds device start and end times from OpenCL event profiling: while the
 * profiler runs, each device's work goes to a queue with CL_QUEUE_PROFILING_ENABLE (what was
 * queued before finishes first), so a program that does not profile pays nothing;
 * kiln_device_cl_queue returns that queue meanwhile (ask again after stop). kiln_profiler_stop
 * finishes the timed queues and reads the times. Start and stop are not to be called while other
 * threads run kiln calls; records from any thread in between are kept (at most 2^20; later ones
 * are counted as dropped). A CLBlast GEMM is one record, timed by the event CLBlast returns (its
 * last kernel, when it runs several).
 *
 * After stop, kiln_profiler_table prints PyTorch's key_averages() table: a row per name and
 * phase - calls, device total, mean and share of all device time, host total and mean, bytes -
 * sorted by sort; kiln_profiler_export_trace writes a Chrome trace-event JSON file (open it in
 * https://ui.perfetto.dev or chrome://tracing): the host as process 0 with a track per thread,
 * each device as a process of its own with a track per queue, times in microseconds from the
 * start. Both return KILN_ERR_STATE while the profiler runs or before any session; a new start
 * forgets the last session's records.
 *
 * KILN_PROFILE=trace.json in the environment profiles a whole program without changing it: the
 * profiler starts when libkiln loads and the trace is written at exit.
 *
 *     kiln_profiler_start(KILN_PROFILE_ALL);
 *     for (int step = 0; step < 5; step++) { ... a training step ... }
 *     kiln_profiler_stop();
 *     kiln_profiler_table(stdout, KILN_PROFILER_SORT_DEVICE_TOTAL);
 *     kiln_profiler_export_trace("step.json");
 */
typedef enum kiln_profiler_flags {
    KILN_PROFILE_HOST = 1,   /* host-side records only: no event profiling, no queue change */
    KILN_PROFILE_DEVICE = 2, /* host records with device times (torch's ProfilerActivity.CUDA) */
    KILN_PROFILE_ALL = 3,
} kiln_profiler_flags;
typedef enum kiln_profiler_sort {
    KILN_PROFILER_SORT_DEVICE_TOTAL, /* torch's sort_by="cuda_time_total" */
    KILN_PROFILER_SORT_HOST_TOTAL,   /* sort_by="cpu_time_total" */
    KILN_PROFILER_SORT_COUNT,        /* sort_by="count" */
    KILN_PROFILER_SORT_NAME,
} kiln_profiler_sort;
/* KILN_ERR_STATE when it runs already; KILN_ERR_INVALID_ARGUMENT for flags 0 or unknown bits. */
KILN_API kiln_status kiln_profiler_start(unsigned flags);
/* KILN_ERR_STATE when it does not run. */
KILN_API kiln_status kiln_profiler_stop(void);
KILN_API kiln_status kiln_profiler_table(FILE *out, kiln_profiler_sort sort);
/* KILN_ERR_IO when path cannot be written. */
KILN_API kiln_status kiln_profiler_export_trace(const char *path);
/* torch.profiler.record_function: a named range on the calling thread's host track, nested in
 * the ranges open there (at most 64). Costs a clock read when the profiler does not run (nothing
 * is recorded then, nor for a range that began before the session). Pop without a push:
 * KILN_ERR_STATE. */
KILN_API kiln_status kiln_profiler_range_push(const char *name);
KILN_API kiln_status kiln_profiler_range_pop(void);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
