/* program.h - building OpenCL programs (user and built-in), per-device program cache, and the
 * built-in kernel sources embedded at build time. Launching is launch.h's. */
#ifndef KILN_PROGRAM_H
#define KILN_PROGRAM_H

#include <pthread.h>
#include <stdbool.h>

#include "kiln_cl.h"
#include "paramtable.h"

/* One embedded lib/kernels/<name>.cl (generated table, see lib/kernels/embed.py). */
typedef struct kiln__kernel_source {
    const char *name; /* file name without .cl: "elementwise" */
    const char *text; /* NUL-terminated */
    size_t length;
    /* Built one kernel per program (the source says KILN_ONLY; lib/kernels/embed.py): a program
     * of it holds the kernel asked for, so a process compiles only the kernels it uses. */
    bool one_kernel;
} kiln__kernel_source;

/* Hold (true) or resume (false) the progress lines a long first compile prints on a terminal;
 * calls nest. kiln_device_prewarm holds them while it prints its own count. */
void kiln__build_progress_hold(bool hold);

extern const kiln__kernel_source kiln__kernel_sources[];
extern const int kiln__kernel_source_count;

/* The embedded source lib/kernels/<name>.cl, or NULL. */
const kiln__kernel_source *kiln__kernel_source_find(const char *name);

struct kiln__param; /* argcheck.h */

/* A kernel of a built program, safe to launch from several threads: the lock is held across
 * clSetKernelArg and the enqueue. */
typedef struct kiln__kernel {
    cl_kernel kernel;
    char name[128];
    cl_uint nargs;
    struct kiln__param *params; /* user kernels: nargs parameters from the driver's argument
                                   info, queried once; NULL for built-ins or without info */
    size_t wg_size;             /* CL_KERNEL_WORK_GROUP_SIZE on the device */
    size_t wg_multiple;         /* CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE */
    size_t max_items[3];        /* CL_DEVICE_MAX_WORK_ITEM_SIZES: local size limit per dimension */
    bool cpu;                   /* on a CPU device (kiln__choose_local shapes groups for it) */
    pthread_mutex_t lock;
} kiln__kernel;

/* A built-in kernel for dev: builds lib/kernels/<source>.cl with `defines` (e.g.
 * "-DKILN_T=float"; kiln adds -cl-std=CL1.2 and capability macros) on first use, through the
 * on-disk cache, and keeps it for the life of the device. Thread-safe: two threads asking at
 * once build once. The kernel is owned by the device; op names the caller in messages. */
kiln_status kiln__builtin_kernel(kiln_device *dev, const char *source, const char *defines,
                                 const char *kernel, const char *op, kiln__kernel **out);

/* A kernel of a program generated at run time (lib/fusion.c): text (NUL-terminated) is built
 * after the prelude like a built-in source, through the on-disk cache, once per device, and kept
 * for the life of the device like a built-in program; *hit says whether it was built before.
 * one_kernel: the text holds several kernels in KILN_ONLY guards (a reduction with a folded
 * chain) and the program is built with that one alone (-DKILN_ONLY -DKILN_WANT_<kernel>). */
kiln_status kiln__generated_kernel(kiln_device *dev, const char *text, const char *kernel,
                                   bool one_kernel, const char *op, kiln__kernel **out, bool *hit);

/* Release dev's built-in programs and kernels (kiln__registry_reset; tests). Valid only while no
 * other thread uses dev. */
void kiln__programs_free(kiln_device *dev);

/* A hook, for a layer above that keeps something made from a device's programs (fusion.c keeps
 * the kernels it generated): kiln__programs_free calls fn with dev before dev's programs go, so
 * that it forgets them. Register (once) before keeping the first such thing. */
void kiln__programs_on_free(void (*fn)(kiln_device *dev));

/* The kernel `name` of a user program, created on first use and kept with the program (launch
 * it with kiln_program_launch, launch.c). KILN_ERR_INVALID_ARGUMENT naming op for a program that
 * is not live or a NULL name; KILN_ERR_NOT_FOUND listing the program's kernels. */
kiln_status kiln__program_kernel(kiln_program *prog, const char *name, const char *op,
                                 kiln__kernel **out);

/* Build source (len bytes) for dev with the full options string, loading or saving the binary
 * in the on-disk cache. A compile error is KILN_ERR_BUILD_FAILED with the trimmed log, its
 * positions naming the source `name` (a file's path; NULL: "<source>"); op names the caller.
 * *out is owned by the caller. params (a user program; NULL: a built-in one) receives the
 * parameter table of the entry loaded or saved (malloc'd, the caller frees its bytes), empty
 * when there is none: the kernels' argument info then comes from the driver. */
kiln_status kiln__program_compile(kiln_device *dev, const char *src, size_t len, const char *name,
                                  const char *options, const char *op, cl_program *out,
                                  kiln__param_table *params);

/* A compiler log with positions in the driver's temporary copy of the source (PoCL's
 * ".../tempfile_XXXXXX.cl:1:64", NVIDIA's "<kernel>:1:64") renamed to name ("<source>" when
 * NULL or empty); malloc'd, NULL when out of memory. */
char *kiln__log_rename(const char *log, const char *name);

/* Copy a compiler log into buf (size bytes), trimmed to fit: when it is too long the text
 * starts at the first line mentioning "error" so that line survives. */
void kiln__log_trim(const char *log, char *buf, size_t size);

/* A hint appended to build errors: "" or, when the source uses `double`, the device has no
 * fp64 and the log complains about it, why (the build then fails with KILN_ERR_UNSUPPORTED). */
const char *kiln__build_hint(const kiln_device_info *info, const char *source, const char *log);

/* User build options, checked before the driver sees them: printable, at most 4096
 * characters, every word an option ("-...") or the value of a "-D", "-U" or "-I" before it.
 * NULL is fine. KILN_ERR_INVALID_ARGUMENT naming op. */
kiln_status kiln__check_options(const char *options, const char *op);

#endif
