/* program.c - building OpenCL programs (built-in and user) through the disk cache, the
 * per-device cache of built-in programs and kernels, and the kiln_program object. */
#include "program.h"
#include "alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "argcheck.h"
#include "clcall.h"
#include "diskcache.h"
#include "live.h"
#include "registry.h"
#include "splits.h"
#include "status.h"

#define KILN__PROGRAM_MAGIC 0x6b70726fu /* "kpro" */
#define LOG_CAP 6000                    /* bytes of compiler log kept in a message */
#define FILE_CAP ((size_t)16 << 20)     /* largest .cl file kiln_program_build_file reads */

/* One kernel of a program, created on first use and kept with the program. */
typedef struct kernel_node {
    kiln__kernel k;
    struct kernel_node *next;
} kernel_node;

/* A built-in program of one device: (source, defines) -> cl_program. */
typedef struct builtin_entry {
    char *source;
    char *defines;
    cl_program program;
    bool building; /* one thread builds while the others wait on `built` */
    kernel_node *kernels;
    struct builtin_entry *next;
} builtin_entry;

struct kiln__programs {
    pthread_mutex_t lock;
    pthread_cond_t built;
    builtin_entry *entries;
};

struct kiln_program {
    uint32_t magic;
    atomic_int refs;
    kiln_device *dev;
    cl_program program;
    char *names;
    kiln__param_table params; /* from the disk cache entry, or saved into it (paramtable.h) */
    pthread_mutex_t lock;     /* guards kernels */
    kernel_node *kernels;
    bool counted; /* built and given out: counted by kiln__live_add until freed */
};

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = kiln__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* kiln's options, then the caller's: "-cl-std=CL1.2 -DKILN_HAS_FP64 <extra>". User programs
 * keep their argument info (-cl-kernel-arg-info), which launches check arguments against. */
static char *build_options(const kiln_device *dev, bool user, const char *extra)
{
    const char *arginfo = user ? " -cl-kernel-arg-info" : "";
    const char *fp64 = dev->info.fp64 ? " -DKILN_HAS_FP64=1" : "";
    const char *fp16 = dev->info.fp16 ? " -DKILN_HAS_FP16=1" : "";
    extra = extra ? extra : "";
    size_t n =
        strlen("-cl-std=CL1.2") + strlen(arginfo) + strlen(fp64) + strlen(fp16) + strlen(extra) + 2;
    char *o = kiln__malloc(n);
    if (o)
        snprintf(o, n, "-cl-std=CL1.2%s%s%s%s%s", arginfo, fp64, fp16, *extra ? " " : "", extra);
    return o;
}

/* The index of dev among the program's devices (programs are created in the platform's
 * context, which may hold several). */
static int program_device_index(cl_program p, cl_device_id dev)
{
    cl_uint n = 0;
    if (kiln__cl.GetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof n, &n, NULL) != CL_SUCCESS ||
        n == 0 || n > 64)
        return -1;
    cl_device_id ids[64];
    if (kiln__cl.GetProgramInfo(p, CL_PROGRAM_DEVICES, n * sizeof(cl_device_id), ids, NULL) !=
        CL_SUCCESS)
        return -1;
    for (cl_uint i = 0; i < n; i++)
        if (ids[i] == dev)
            return (int)i;
    return -1;
}

/* The binary of a program just built for dev alone, to save in the disk cache; NULL with why
 * when there is none. PoCL 3.1 puts the binary of a program built for one device of a shared
 * context in slot 0 whatever that device's index (CL_PROGRAM_BINARY_SIZES [47313, 0] for the
 * second device): when dev's own slot is empty, the only non-empty slot is dev's. */
static unsigned char *program_binary(cl_program p, cl_device_id dev, size_t *size, const char **why)
{
    int idx = program_device_index(p, dev);
    size_t sizes[64] = {0};
    cl_uint ndev = 0;
    *why = "clGetProgramInfo gave no binary sizes";
    if (idx < 0 ||
        kiln__cl.GetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof ndev, &ndev, NULL) !=
            CL_SUCCESS ||
        ndev > 64 || (cl_uint)idx >= ndev ||
        kiln__cl.GetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, ndev * sizeof(size_t), sizes, NULL) !=
            CL_SUCCESS)
        return NULL;
    int slot = sizes[idx] ? idx : -1, filled = 0;
    for (cl_uint i = 0; slot < 0 && i < ndev; i++)
        filled += sizes[i] != 0;
    for (cl_uint i = 0; slot < 0 && filled == 1 && i < ndev; i++)
        if (sizes[i])
            slot = (int)i;
    *why = filled > 1 ? "the driver gives binaries for other devices but none for this one"
                      : "the driver gives no binary for the device (CL_PROGRAM_BINARY_SIZES)";
    if (slot < 0)
        return NULL;
    unsigned char *bin = kiln__malloc(sizes[slot]);
    unsigned char *ptrs[64] = {NULL};
    *why = "no host memory for the binary";
    if (!bin)
        return NULL;
    ptrs[slot] = bin;
    if (kiln__cl.GetProgramInfo(p, CL_PROGRAM_BINARIES, ndev * sizeof(unsigned char *), ptrs,
                                NULL) != CL_SUCCESS) {
        *why = "clGetProgramInfo(CL_PROGRAM_BINARIES) failed";
        free(bin);
        return NULL;
    }
    *size = sizes[slot];
    return bin;
}

/* The kernel names of a built program ("a;b", malloc'd), or NULL. */
static char *program_names(cl_program p)
{
    size_t n = 0;
    if (kiln__cl.GetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &n) != CL_SUCCESS)
        return NULL;
    char *names = kiln__calloc(1, n + 1);
    if (names && n &&
        kiln__cl.GetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, n, names, NULL) != CL_SUCCESS) {
        free(names);
        return NULL;
    }
    return names;
}

static bool param_table_of(cl_program p, const char *names, kiln__param_table *out);

/* Save the binary of a program just built from source, or count why it cannot be saved. params
 * (a user program; NULL: a built-in one) receives the parameter table saved with it. */
static void save_binary(kiln_device *dev, cl_program p, const char *key, size_t keylen,
                        kiln__param_table *params)
{
    size_t size = 0;
    const char *why = NULL;
    unsigned char *bin = program_binary(p, dev->id, &size, &why);
    char *names = bin ? program_names(p) : NULL;
    if (bin && !names)
        why = "clGetProgramInfo(CL_PROGRAM_KERNEL_NAMES) failed";
    if (names && params && !param_table_of(p, names, params)) {
        why = "its kernels' argument info could not be read";
        free(names);
        names = NULL;
    }
    if (bin && names)
        kiln__diskcache_store(key, keylen, names, params, bin, size);
    else
        kiln__diskcache_count_unsaved(why);
    free(bin);
    free(names);
}

/* The build log of p on dev, malloc'd ("" when the driver gives none); NULL on OOM. */
static char *build_log(cl_program p, cl_device_id dev)
{
    size_t n = 0;
    if (kiln__cl.GetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) != CL_SUCCESS)
        n = 0;
    char *log = kiln__malloc(n + 1);
    if (!log)
        return NULL;
    if (n && kiln__cl.GetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS)
        n = 0;
    log[n] = '\0';
    return log;
}

void kiln__log_trim(const char *log, char *buf, size_t size)
{
    size_t len = strlen(log);
    if (size == 0)
        return;
    if (len < size) {
        memcpy(buf, log, len + 1);
        return;
    }
    /* Too long: start at the first error line, so the line that matters survives the cut. */
    const char *start = log;
    const char *err = strstr(log, "error");
    if (err && (size_t)(err - log) + 64 > size) {
        while (err > log && err[-1] != '\n')
            err--;
        start = err;
    }
    const char *more = "\n[log trimmed]";
    /* A buffer too small for the marker gets what fits of it. */
    size_t keep = size > strlen(more) ? size - strlen(more) - 1 : 0;
    size_t rest = strlen(start);
    if (rest < keep)
        keep = rest;
    memcpy(buf, start, keep);
    snprintf(buf + keep, size - keep, "%s", more);
}

const char *kiln__build_hint(const kiln_device_info *info, const char *source, const char *log)
{
    if (!info->fp64 && strstr(source, "double") && (strstr(log, "double") || strstr(log, "fp64")))
        return "\nhint: this device has no fp64 support (cl_khr_fp64), so `double` is not "
               "available; guard double code with #ifdef KILN_HAS_FP64";
    return "";
}

/* Whether the token log[0..n) names a driver's copy of the source: PoCL's
 * ".../kcache/tempfile_XXXXXX.cl", Oclgrind's "input.cl", NVIDIA's "<kernel>", clang's
 * "<source>" (also when the caller's name is "<source>": replaced by itself). */
static bool driver_source_name(const char *tok, size_t n)
{
    if ((n == 8 && !memcmp(tok, "<kernel>", 8)) || (n == 8 && !memcmp(tok, "<source>", 8)) ||
        (n == 8 && !memcmp(tok, "input.cl", 8)))
        return true;
    if (n < 3 || memcmp(tok + n - 3, ".cl", 3) != 0)
        return false;
    const char *base = tok;
    for (size_t i = 0; i < n; i++)
        if (tok[i] == '/')
            base = tok + i + 1;
    return (size_t)(tok + n - base) > 12 && !memcmp(base, "tempfile_", 9);
}

/* Copy log into out (NULL: only count), positions "<driver's file>:LINE" renamed to name;
 * returns the length. */
static size_t rename_pass(const char *log, const char *name, char *out)
{
    size_t len = 0, namelen = strlen(name);
    const char *p = log;
    while (*p) {
        bool start = p == log || strchr(" \t\n\r'\"(", p[-1]) != NULL;
        size_t n = start ? strcspn(p, " \t\n\r:'\"()") : 0;
        if (n > 0 && p[n] == ':' && p[n + 1] >= '0' && p[n + 1] <= '9' &&
            driver_source_name(p, n)) {
            if (out)
                memcpy(out + len, name, namelen);
            len += namelen;
            p += n;
            continue;
        }
        size_t m = n ? n : 1; /* a whole token, or one separator */
        if (out)
            memcpy(out + len, p, m);
        len += m;
        p += m;
    }
    if (out)
        out[len] = '\0';
    return len;
}

char *kiln__log_rename(const char *log, const char *name)
{
    name = name && *name ? name : "<source>";
    char *out = kiln__malloc(rename_pass(log, name, NULL) + 1);
    if (out)
        rename_pass(log, name, out);
    return out;
}

static kiln_status build_failed(kiln_device *dev, cl_program p, const char *source,
                                const char *name, const char *options, const char *op)
{
    char *raw = build_log(p, dev->id);
    char *log = raw ? kiln__log_rename(raw, name) : NULL;
    char *trimmed = log ? kiln__malloc(LOG_CAP) : NULL;
    free(raw);
    if (!trimmed) {
        free(log);
        return kiln__host_oom(op);
    }
    kiln__log_trim(log, trimmed, LOG_CAP);
    /* double on a device without fp64 is a capability the device lacks, not a typo. */
    const char *hint = kiln__build_hint(&dev->info, source, log);
    kiln_status s = kiln__error(*hint ? KILN_ERR_UNSUPPORTED : KILN_ERR_BUILD_FAILED,
                                "%s: the OpenCL C compiler rejected the program on %s "
                                "(options: %s); fix the source. Compiler log:\n%s%s",
                                op, kiln__device_label(dev), options, trimmed, hint);
    kiln__log_last_error(KILN_LOG_WARN); /* once, also when KILN_LOG=debug logged it */
    free(trimmed);
    free(log);
    return s;
}

/* PoCL's, Oclgrind's and NVIDIA's compilers (clang-based, in the process) print "1 error
 * generated." on stderr besides the build log (NVIDIA's: seen on an H200, driver 580.159);
 * kiln is silent by default, so fd 2 points at a temporary file during their builds and what
 * was printed goes to the log (debug). Other threads' stderr meanwhile goes there too. Other
 * drivers' builds are not captured (a crash report would be lost). */
static pthread_mutex_t stderr_lock = PTHREAD_MUTEX_INITIALIZER;

static bool prints_on_stderr(const kiln_device *dev)
{
    return strstr(dev->info.platform, "Portable Computing Language") != NULL ||
           strstr(dev->info.platform, "PoCL") != NULL ||
           strstr(dev->info.platform, "Oclgrind") != NULL ||
           strstr(dev->info.platform, "NVIDIA") != NULL;
}

static cl_int build_quietly(kiln_device *dev, cl_program p, const char *options)
{
    if (!prints_on_stderr(dev)) {
        cl_int err = kiln__cl.BuildProgram(p, 1, &dev->id, options, NULL, NULL);
        kiln__exit_hook(); /* after the compiler's statics (registry.c) */
        return err;
    }
    pthread_mutex_lock(&stderr_lock);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = tmp ? fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0) : -1;
    bool redirected = saved >= 0 && dup2(fileno(tmp), STDERR_FILENO) >= 0;
    cl_int err = kiln__cl.BuildProgram(p, 1, &dev->id, options, NULL, NULL);
    kiln__exit_hook(); /* after the compiler's statics (registry.c) */
    if (redirected) {
        fflush(stderr);
        dup2(saved, STDERR_FILENO);
    }
    if (saved >= 0)
        close(saved);
    pthread_mutex_unlock(&stderr_lock);
    if (tmp) {
        char line[512];
        rewind(tmp);
        while (fgets(line, sizeof line, tmp)) {
            line[strcspn(line, "\n")] = '\0';
            if (line[0])
                kiln__log(KILN_LOG_DEBUG, "%s: the OpenCL compiler printed: %s", dev->info.spec,
                          line);
        }
        fclose(tmp);
    }
    return err;
}

static kiln_status from_source(kiln_device *dev, const char *src, size_t len, const char *name,
                               const char *options, const char *op, cl_program *out)
{
    cl_int err = CL_SUCCESS;
    cl_program p = kiln__cl.CreateProgramWithSource(kiln__device_context(dev), 1, &src, &len, &err);
    if (err != CL_SUCCESS || !p)
        return kiln__cl_fail(err != CL_SUCCESS ? err : CL_INVALID_PROGRAM, op,
                             "clCreateProgramWithSource", dev->info.spec);
    err = build_quietly(dev, p, options);
    if (err == CL_SUCCESS) {
        *out = p;
        return KILN_OK;
    }
    kiln_status s;
    if (err == CL_BUILD_PROGRAM_FAILURE || err == CL_COMPILE_PROGRAM_FAILURE)
        s = build_failed(dev, p, src, name, options, op);
    else if (err == CL_INVALID_BUILD_OPTIONS)
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: the OpenCL compiler on %s rejected the build options \"%s\"; "
                        "check the options string",
                        op, dev->info.spec, options);
    else
        s = kiln__cl_fail(err, op, "clBuildProgram", dev->info.spec);
    kiln__cl.ReleaseProgram(p);
    return s;
}

/* A program from a cached entry; NULL when the driver refuses it, or the program lacks the
 * entry's kernels (why, of size n, then says so). */
static cl_program from_binary(kiln_device *dev, const kiln__cache_loan *loan, const char *options,
                              char *why, size_t n)
{
    cl_int err = CL_SUCCESS, bstatus = CL_SUCCESS;
    size_t size = loan->size;
    const unsigned char *bin = loan->binary;
    cl_program p = kiln__cl.CreateProgramWithBinary(kiln__device_context(dev), 1, &dev->id, &size,
                                                    &bin, &bstatus, &err);
    if (err != CL_SUCCESS || bstatus != CL_SUCCESS || !p) {
        snprintf(why, n, "was refused by %s (%s)", dev->info.spec,
                 kiln__cl_error_name(err != CL_SUCCESS ? err : bstatus));
        if (p)
            kiln__cl.ReleaseProgram(p);
        return NULL;
    }
    err = kiln__cl.BuildProgram(p, 1, &dev->id, options, NULL, NULL);
    kiln__exit_hook();
    char *names = err == CL_SUCCESS ? program_names(p) : NULL;
    if (err != CL_SUCCESS)
        snprintf(why, n, "could not be built by %s (%s)", dev->info.spec, kiln__cl_error_name(err));
    else if (!names)
        snprintf(why, n, "gave a program whose kernel names %s cannot tell", dev->info.spec);
    else if (!kiln__kernel_names_match(names, strlen(names), loan->names, loan->nameslen))
        snprintf(why, n,
                 "holds a program with kernels \"%.200s\", not the \"%.*s\" it was saved with",
                 names, (int)(loan->nameslen > 200 ? 200 : loan->nameslen), loan->names);
    else
        why[0] = '\0';
    free(names);
    if (why[0]) {
        kiln__cl.ReleaseProgram(p);
        return NULL;
    }
    return p;
}

/* The program of the disk cache entry for key, or *out NULL when there is no usable one (build
 * from source). A user program (params not NULL) needs the entry's parameter table, copied to
 * *params: the driver need give no argument info for a program created from a binary. */
static kiln_status from_cache(kiln_device *dev, const char *key, size_t keylen, const char *options,
                              kiln__param_table *params, const char *op, cl_program *out)
{
    *out = NULL;
    kiln__cache_loan loan;
    if (!kiln__diskcache_load(key, keylen, &loan))
        return KILN_OK;
    char why[512];
    cl_program p = from_binary(dev, &loan, options, why, sizeof why);
    if (p && params && loan.paramslen == 0 && loan.nameslen > 0) {
        snprintf(why, sizeof why, "has no parameter table for its kernels' argument checks");
        kiln__cl.ReleaseProgram(p);
        p = NULL;
    }
    kiln_status s = KILN_OK;
    if (p && params && loan.paramslen) {
        params->bytes = kiln__malloc(loan.paramslen);
        if (params->bytes) {
            memcpy(params->bytes, loan.params, loan.paramslen);
            params->len = loan.paramslen;
        } else {
            s = kiln__host_oom(op); /* the entry is fine: it stays */
            kiln__cl.ReleaseProgram(p);
            p = NULL;
        }
    }
    kiln__diskcache_return(&loan, p || s != KILN_OK ? NULL : why);
    *out = p;
    return s;
}

/* Progress while a process compiles (issue 22): once its builds have taken more than a second
 * in all, a line on stderr when stderr is a terminal (unless KILN_LOG=off), then one per further
 * 2 s of building, so that a first run never sits silent. Elsewhere KILN_LOG=info logs each
 * build. kiln_device_prewarm prints its own count instead (kiln__build_progress_hold). */
static pthread_mutex_t progress_lock = PTHREAD_MUTEX_INITIALIZER;
static double progress_seconds, progress_next = 1.0;
static int progress_builds;
static atomic_int progress_held;

void kiln__build_progress_hold(bool hold)
{
    atomic_fetch_add(&progress_held, hold ? 1 : -1);
}

static void build_progress(const kiln_device *dev, double seconds, bool cached)
{
    /* KILN_LOG=off (none, 0) silences it as it silences the log */
    if (atomic_load(&progress_held) > 0 || !kiln__log_enabled(KILN_LOG_ERROR) ||
        !isatty(STDERR_FILENO))
        return;
    pthread_mutex_lock(&progress_lock);
    progress_seconds += seconds;
    progress_builds++;
    if (progress_seconds >= progress_next) {
        progress_next = progress_seconds + 2.0;
        fprintf(stderr, "kiln: compiling kernels for %s: %d built so far (%.1f s)%s\n",
                dev->info.spec, progress_builds, progress_seconds,
                cached ? "; kept in the program cache for later runs (kiln-info --prewarm builds "
                         "them all ahead)"
                       : "");
    }
    pthread_mutex_unlock(&progress_lock);
}

kiln_status kiln__program_compile(kiln_device *dev, const char *src, size_t len, const char *name,
                                  const char *options, const char *op, cl_program *out,
                                  kiln__param_table *params)
{
    *out = NULL;
    size_t keylen = 0;
    bool cacheable = true;
    char *key = kiln__diskcache_key(&dev->info, src, len, options, &keylen, &cacheable);
    if (!key)
        return kiln__host_oom(op);
    cacheable = cacheable && kiln__diskcache_usable();
    kiln_status s = cacheable ? from_cache(dev, key, keylen, options, params, op, out) : KILN_OK;
    if (s != KILN_OK || *out) {
        free(key);
        return s;
    }
    double t0 = kiln__now();
    s = from_source(dev, src, len, name, options, op, out);
    if (s == KILN_OK) {
        kiln__diskcache_count_miss();
        kiln__log(KILN_LOG_INFO, "%s: built a program from source on %s in %.3f s", op,
                  dev->info.spec, kiln__now() - t0);
        if (cacheable)
            save_binary(dev, *out, key, keylen, params);
        build_progress(dev, kiln__now() - t0, cacheable);
    }
    free(key);
    return s;
}

/* Whether the program's kernels include name; writes the list "a;b" to kiln's message. */
static kiln_status kernel_not_found(cl_program p, const char *name, const char *op)
{
    char names[1024] = "";
    kiln__cl.GetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, sizeof names - 1, names, NULL);
    names[sizeof names - 1] = '\0';
    return kiln__error(KILN_ERR_NOT_FOUND,
                       "%s: the program has no kernel named \"%s\"; its kernels are: %s", op, name,
                       *names ? names : "(none)");
}

/* One text of a parameter's argument info into buf; NULL when the driver gives none or it does
 * not fit. */
static const char *arg_text(cl_kernel k, cl_uint i, cl_kernel_arg_info what, char *buf, size_t size)
{
    size_t n = 0;
    if (kiln__cl.GetKernelArgInfo(k, i, what, 0, NULL, &n) != CL_SUCCESS || n == 0 || n > size ||
        kiln__cl.GetKernelArgInfo(k, i, what, n, buf, NULL) != CL_SUCCESS)
        return NULL;
    buf[n - 1] = '\0';
    return buf;
}

static kiln__addr addr_of(cl_kernel_arg_address_qualifier q)
{
    switch (q) {
    case CL_KERNEL_ARG_ADDRESS_GLOBAL:
        return KILN__ADDR_GLOBAL;
    case CL_KERNEL_ARG_ADDRESS_CONSTANT:
        return KILN__ADDR_CONSTANT;
    case CL_KERNEL_ARG_ADDRESS_LOCAL:
        return KILN__ADDR_LOCAL;
    case CL_KERNEL_ARG_ADDRESS_PRIVATE:
        return KILN__ADDR_PRIVATE;
    default:
        return KILN__ADDR_UNKNOWN;
    }
}

/* The driver's argument info of kernel k's nargs parameters: texts[i] points into bufs[i]. The
 * error of the first query that failed (no argument info), or CL_SUCCESS. */
static cl_int arg_texts(cl_kernel k, cl_uint nargs, kiln__param_text *texts, char (*bufs)[2][256])
{
    for (cl_uint i = 0; i < nargs; i++) {
        cl_kernel_arg_address_qualifier q = 0;
        cl_int err =
            kiln__cl.GetKernelArgInfo(k, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof q, &q, NULL);
        if (err != CL_SUCCESS)
            return err;
        texts[i].addr = addr_of(q);
        texts[i].type = arg_text(k, i, CL_KERNEL_ARG_TYPE_NAME, bufs[i][0], 256);
        texts[i].name = arg_text(k, i, CL_KERNEL_ARG_NAME, bufs[i][1], 256);
    }
    return CL_SUCCESS;
}

/* The record of kernel `name` of program p for its parameter table, appended to *t (grown). */
static bool add_param_record(cl_program p, const char *name, kiln__param_table *t)
{
    cl_int err = CL_SUCCESS;
    cl_kernel k = kiln__cl.CreateKernel(p, name, &err);
    if (err != CL_SUCCESS || !k)
        return false;
    cl_uint nargs = 0;
    bool ok =
        kiln__cl.GetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL) == CL_SUCCESS &&
        nargs <= 0xffff;
    kiln__param_text *texts = ok ? kiln__calloc(nargs + 1, sizeof *texts) : NULL;
    char(*bufs)[2][256] = texts ? kiln__malloc((nargs + 1) * sizeof *bufs) : NULL;
    ok = bufs != NULL;
    err = ok ? arg_texts(k, nargs, texts, bufs) : CL_SUCCESS;
    bool info = err == CL_SUCCESS;
    /* Only the driver's "none" is saved as no argument info: another failure saves no entry. */
    size_t n = ok && (info || err == CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
                   ? kiln__param_record_encode(NULL, name, info, nargs, texts)
                   : 0;
    uint8_t *grown =
        n && t->len + n <= KILN__PARAM_TABLE_CAP ? kiln__realloc(t->bytes, t->len + n) : NULL;
    if (grown) {
        kiln__param_record_encode(grown + t->len, name, info, nargs, texts);
        t->bytes = grown;
        t->len += n;
    }
    free(bufs);
    free(texts);
    kiln__cl.ReleaseKernel(k);
    return grown != NULL;
}

/* The parameter table of program p, whose kernels are names ("a;b"): each kernel's argument
 * info as the driver gives it now, for the disk cache entry (paramtable.h). false (and an empty
 * *out) when a kernel cannot be created or described, or host memory runs out. */
static bool param_table_of(cl_program p, const char *names, kiln__param_table *out)
{
    kiln__param_table t = {NULL, 0};
    bool ok = true;
    for (const char *s = names; ok && *s;) {
        size_t n = strcspn(s, ";");
        char name[sizeof((kiln__kernel *)0)->name];
        if (n > 0 && n < sizeof name) {
            memcpy(name, s, n);
            name[n] = '\0';
            ok = add_param_record(p, name, &t);
        } else {
            ok = n == 0;
        }
        s += n + (s[n] == ';');
    }
    if (!ok) {
        free(t.bytes);
        t = (kiln__param_table){NULL, 0};
    }
    *out = t;
    return ok;
}

/* The parameters of a user kernel, described once per kernel (launches check every argument
 * against them, argcheck.c): from the program's parameter table when it has the kernel, else
 * from the driver's argument info. k->params stays NULL when neither gives argument info, and
 * launches are then checked by count only. */
static kiln_status query_params(kiln__kernel *k, const kiln__param_table *table, const char *op)
{
    if (k->nargs == 0)
        return KILN_OK;
    kiln__param *ps = kiln__calloc(k->nargs, sizeof *ps);
    kiln__param_text *texts = kiln__calloc(k->nargs, sizeof *texts);
    char(*bufs)[2][256] = kiln__malloc(k->nargs * sizeof *bufs);
    if (!ps || !texts || !bufs) {
        free(ps);
        free(texts);
        free(bufs);
        return kiln__host_oom(op);
    }
    kiln__params_found found =
        kiln__param_table_find(table->bytes, table->len, k->name, k->nargs, ps);
    cl_int err = CL_KERNEL_ARG_INFO_NOT_AVAILABLE;
    if (found == KILN__PARAMS_ABSENT)
        err = arg_texts(k->kernel, k->nargs, texts, bufs);
    if (found == KILN__PARAMS_ABSENT && err == CL_SUCCESS)
        for (cl_uint i = 0; i < k->nargs; i++)
            kiln__param_parse(texts[i].addr, texts[i].type, texts[i].name, &ps[i]);
    free(texts);
    free(bufs);
    if (found == KILN__PARAMS_FOUND || err == CL_SUCCESS) {
        k->params = ps;
        return KILN_OK;
    }
    kiln__log(KILN_LOG_DEBUG,
              "%s: no argument info for kernel %s (%s); its arguments are checked by count only",
              op, k->name, kiln__cl_error_name(err));
    free(ps);
    return KILN_OK;
}

/* A kernel of program p; params: a user kernel's program's parameter table (NULL: a built-in
 * kernel), whose parameters are described (query_params). */
static kiln_status make_kernel(kiln_device *dev, cl_program p, const char *name,
                               const kiln__param_table *params, const char *op, kernel_node **out)
{
    *out = NULL;
    if (strlen(name) >= sizeof((kiln__kernel *)0)->name)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: kernel name \"%.40s...\" is too long",
                           op, name);
    cl_int err = CL_SUCCESS;
    cl_kernel k = kiln__cl.CreateKernel(p, name, &err);
    if (err == CL_INVALID_KERNEL_NAME)
        return kernel_not_found(p, name, op);
    if (err != CL_SUCCESS || !k)
        return kiln__cl_fail(err != CL_SUCCESS ? err : CL_INVALID_KERNEL, op, "clCreateKernel",
                             dev->info.spec);
    kernel_node *n = kiln__calloc(1, sizeof *n);
    if (!n) {
        kiln__cl.ReleaseKernel(k);
        return kiln__host_oom(op);
    }
    n->k.kernel = k;
    memcpy(n->k.name, name, strlen(name) + 1); /* fits: checked above */
    err = kiln__cl.GetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof n->k.nargs, &n->k.nargs, NULL);
    if (err == CL_SUCCESS)
        err = kiln__cl.GetKernelWorkGroupInfo(k, dev->id, CL_KERNEL_WORK_GROUP_SIZE,
                                              sizeof n->k.wg_size, &n->k.wg_size, NULL);
    if (err == CL_SUCCESS)
        err = kiln__cl.GetKernelWorkGroupInfo(k, dev->id,
                                              CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                              sizeof n->k.wg_multiple, &n->k.wg_multiple, NULL);
    kiln_status s = err == CL_SUCCESS ? (params ? query_params(&n->k, params, op) : KILN_OK)
                                      : kiln__cl_fail(err, op, "clGetKernelInfo", dev->info.spec);
    if (s != KILN_OK) {
        kiln__cl.ReleaseKernel(k);
        free(n);
        return s;
    }
    /* Per-dimension local limits (NVIDIA: 1024 x 1024 x 64); the kernel's limit if unknown. */
    size_t items[16] = {n->k.wg_size, n->k.wg_size, n->k.wg_size};
    cl_uint dims = 3;
    kiln__cl.GetDeviceInfo(dev->id, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, sizeof dims, &dims, NULL);
    if (dims < 3 || dims > 16 ||
        kiln__cl.GetDeviceInfo(dev->id, CL_DEVICE_MAX_WORK_ITEM_SIZES, dims * sizeof *items, items,
                               NULL) != CL_SUCCESS)
        items[0] = items[1] = items[2] = n->k.wg_size;
    if (n->k.wg_size == 0)
        n->k.wg_size = 1;
    for (int d = 0; d < 3; d++)
        n->k.max_items[d] = items[d] ? items[d] : 1;
    if (n->k.wg_multiple == 0 || n->k.wg_multiple > n->k.wg_size)
        n->k.wg_multiple = 1;
    n->k.cpu = dev->info.type == KILN_DEVICE_CPU;
    pthread_mutex_init(&n->k.lock, NULL);
    *out = n;
    return KILN_OK;
}

/* Find or create the kernel `name` in a list guarded by the caller's lock (params: as for
 * make_kernel). */
static kiln_status list_kernel(kiln_device *dev, cl_program p, kernel_node **list, const char *name,
                               const kiln__param_table *params, const char *op, kiln__kernel **out)
{
    for (kernel_node *n = *list; n; n = n->next) {
        if (strcmp(n->k.name, name) == 0) {
            *out = &n->k;
            return KILN_OK;
        }
    }
    kernel_node *n;
    kiln_status s = make_kernel(dev, p, name, params, op, &n);
    if (s != KILN_OK)
        return s;
    n->next = *list;
    *list = n;
    *out = &n->k;
    return KILN_OK;
}

const kiln__kernel_source *kiln__kernel_source_find(const char *name)
{
    for (int i = 0; i < kiln__kernel_source_count; i++)
        if (strcmp(kiln__kernel_sources[i].name, name) == 0)
            return &kiln__kernel_sources[i];
    return NULL;
}

/* Programs go with their device (registry.c tells us: a hook). */
static pthread_once_t reset_once = PTHREAD_ONCE_INIT;

static void register_reset(void)
{
    kiln__registry_on_reset(kiln__programs_free);
}

static kiln_status programs_of(kiln_device *dev, const char *op, struct kiln__programs **out)
{
    pthread_once(&reset_once, register_reset);
    pthread_mutex_lock(&dev->lock);
    if (!dev->programs) {
        struct kiln__programs *ps = kiln__calloc(1, sizeof *ps);
        if (!ps) {
            pthread_mutex_unlock(&dev->lock);
            return kiln__host_oom(op);
        }
        pthread_mutex_init(&ps->lock, NULL);
        pthread_cond_init(&ps->built, NULL);
        dev->programs = ps;
    }
    *out = dev->programs;
    pthread_mutex_unlock(&dev->lock);
    return KILN_OK;
}

/* Build the built-in program of an entry that this thread marked as building. */
static kiln_status build_builtin(kiln_device *dev, const kiln__kernel_source *src,
                                 const char *defines, const char *op, cl_program *out)
{
    const kiln__kernel_source *prelude = kiln__kernel_source_find("prelude");
    size_t plen = prelude ? prelude->length : 0;
    size_t len = plen + 1 + src->length;
    char *text = kiln__malloc(len + 1);
    /* Devices whose built-in launches are not split get loop-free KILN_FOR; CPU devices get
     * KILN_CPU_DEVICE, their own f16 code (prelude.cl, elementwise.cl). */
    char nosplit[512];
    bool cpu = dev->info.type == KILN_DEVICE_CPU;
    if (!kiln__launch_splits(dev) || cpu) {
        snprintf(nosplit, sizeof nosplit, "%s%s%s", defines ? defines : "",
                 kiln__launch_splits(dev) ? "" : " -DKILN_NO_SPLIT=1",
                 cpu ? " -DKILN_CPU_DEVICE=1" : "");
        defines = nosplit;
    }
    char *options = build_options(dev, false, defines);
    kiln_status s = KILN_OK;
    if (!text || !options) {
        s = kiln__host_oom(op);
        goto done;
    }
    if (plen)
        memcpy(text, prelude->text, plen);
    text[plen] = '\n';
    memcpy(text + plen + 1, src->text, src->length + 1);
    kiln__log_hold(); /* the compiler's message is logged once, rewrapped */
    s = kiln__program_compile(dev, text, len, NULL, options, op, out, NULL);
    if (s == KILN_ERR_BUILD_FAILED) {
        char *msg = dup_string(kiln_last_error()); /* it holds the compiler's log */
        bool generated = src->name == src->text;   /* kiln__generated_kernel */
        s = kiln__error(KILN_ERR_BUILD_FAILED,
                        "%s: %s%s%s (%s) failed to build on %s; this is a "
                        "kiln bug, please report it with this message: %s",
                        op, generated ? "the generated fused kernel" : "built-in kernel source ",
                        generated ? "" : src->name, generated ? "" : ".cl", defines, dev->info.spec,
                        msg ? msg : "");
        free(msg);
    }
    kiln__log_release();
done:
    free(text);
    free(options);
    return s;
}

/* Find (or build, once across threads) the built-in program of (source, defines). Called and
 * returns with ps->lock held. */
static kiln_status builtin_entry_get(kiln_device *dev, struct kiln__programs *ps,
                                     const kiln__kernel_source *src, const char *defines,
                                     const char *op, builtin_entry **out)
{
    for (;;) {
        builtin_entry *e = ps->entries;
        while (e && (strcmp(e->source, src->name) != 0 || strcmp(e->defines, defines) != 0))
            e = e->next;
        if (e && e->building) {
            pthread_cond_wait(&ps->built, &ps->lock);
            continue;
        }
        if (e) {
            *out = e;
            return KILN_OK;
        }
        break;
    }
    builtin_entry *e = kiln__calloc(1, sizeof *e);
    if (e) {
        e->source = dup_string(src->name);
        e->defines = dup_string(defines);
    }
    if (!e || !e->source || !e->defines) {
        if (e) {
            free(e->source);
            free(e->defines);
        }
        free(e);
        return kiln__host_oom(op);
    }
    e->building = true;
    e->next = ps->entries;
    ps->entries = e;
    pthread_mutex_unlock(&ps->lock);
    cl_program p = NULL;
    kiln_status s = build_builtin(dev, src, defines, op, &p);
    pthread_mutex_lock(&ps->lock);
    e->building = false;
    if (s == KILN_OK) {
        e->program = p;
        *out = e;
    } else {
        /* Unlink it, so a later call tries again (and waiters build and report for themselves). */
        builtin_entry **pp = &ps->entries;
        while (*pp != e)
            pp = &(*pp)->next;
        *pp = e->next;
        free(e->source);
        free(e->defines);
        free(e);
    }
    pthread_cond_broadcast(&ps->built);
    return s;
}

/* defines followed by the options that build `kernel` alone from a source whose kernels sit in
 * KILN_ONLY guards (lib/kernels/embed.py), into buf. */
static kiln_status one_kernel_defines(char *buf, size_t size, const char *defines,
                                      const char *kernel, const char *op)
{
    int n = snprintf(buf, size, "%s -DKILN_ONLY -DKILN_WANT_%s", defines, kernel);
    if (n < 0 || (size_t)n >= size)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: kernel name \"%s\" too long (kiln bug)",
                           op, kernel);
    return KILN_OK;
}

kiln_status kiln__builtin_kernel(kiln_device *dev, const char *source, const char *defines,
                                 const char *kernel, const char *op, kiln__kernel **out)
{
    *out = NULL;
    kiln_status s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    const kiln__kernel_source *src = source ? kiln__kernel_source_find(source) : NULL;
    if (!src || !kernel)
        return kiln__error(KILN_ERR_NOT_FOUND, "%s: no built-in kernel source \"%s\" (kiln bug)",
                           op, source ? source : "(null)");
    /* One kernel per program where the source allows it: a driver that makes a binary (PoCL, for
     * the disk cache) compiles every kernel of the program, ~0.1 s each, used or not. Tests and
     * kiln-info --prewarm ask for the whole program with -DKILN_ALL_KERNELS. */
    char one[512];
    if (!defines)
        defines = "";
    if (src->one_kernel && !strstr(defines, "-DKILN_ALL_KERNELS")) {
        s = one_kernel_defines(one, sizeof one, defines, kernel, op);
        if (s != KILN_OK)
            return s;
        defines = one;
    }
    struct kiln__programs *ps = NULL;
    s = programs_of(dev, op, &ps);
    if (s != KILN_OK)
        return s;
    pthread_mutex_lock(&ps->lock);
    builtin_entry *e = NULL;
    s = builtin_entry_get(dev, ps, src, defines, op, &e);
    if (s == KILN_OK)
        s = list_kernel(dev, e->program, &e->kernels, kernel, NULL, op, out);
    pthread_mutex_unlock(&ps->lock);
    return s;
}

kiln_status kiln__generated_kernel(kiln_device *dev, const char *text, const char *kernel,
                                   bool one_kernel, const char *op, kiln__kernel **out, bool *hit)
{
    *out = NULL;
    *hit = false;
    /* As kiln__builtin_kernel's one kernel per program: PoCL, asked for the binary of a folded
     * reduction's whole text, generated code for its 8 kernels (2-10 s, measured). */
    char defines[128] = "";
    if (one_kernel) {
        kiln_status s = one_kernel_defines(defines, sizeof defines, "", kernel, op);
        if (s != KILN_OK)
            return s;
    }
    kiln_status s = kiln__device_open(dev, op);
    struct kiln__programs *ps = NULL;
    if (s == KILN_OK)
        s = programs_of(dev, op, &ps);
    if (s != KILN_OK)
        return s;
    /* The text is its own key: a source named by its text (build_builtin's messages know). */
    kiln__kernel_source src = {text, text, strlen(text), false};
    pthread_mutex_lock(&ps->lock);
    for (builtin_entry *e = ps->entries; e && !*hit; e = e->next)
        *hit = !e->building && strcmp(e->source, text) == 0 && strcmp(e->defines, defines) == 0;
    builtin_entry *e = NULL;
    s = builtin_entry_get(dev, ps, &src, defines, op, &e);
    if (s == KILN_OK)
        s = list_kernel(dev, e->program, &e->kernels, kernel, NULL, op, out);
    pthread_mutex_unlock(&ps->lock);
    return s;
}

static void kernels_free(kernel_node *n)
{
    while (n) {
        kernel_node *next = n->next;
        kiln__cl.ReleaseKernel(n->k.kernel);
        pthread_mutex_destroy(&n->k.lock);
        free(n);
        n = next;
    }
}

static kiln__device_hooks free_hooks = KILN__DEVICE_HOOKS_INIT;

void kiln__programs_on_free(void (*fn)(kiln_device *dev))
{
    kiln__device_hooks_add(&free_hooks, fn);
}

void kiln__programs_free(kiln_device *dev)
{
    struct kiln__programs *ps = dev->programs;
    if (!ps)
        return;
    kiln__device_hooks_call(&free_hooks, dev, false);
    dev->programs = NULL;
    builtin_entry *e = ps->entries;
    while (e) {
        builtin_entry *next = e->next;
        kernels_free(e->kernels);
        if (e->program)
            kiln__cl.ReleaseProgram(e->program);
        free(e->source);
        free(e->defines);
        free(e);
        e = next;
    }
    pthread_cond_destroy(&ps->built);
    pthread_mutex_destroy(&ps->lock);
    free(ps);
}

/* --- user programs ------------------------------------------------------------------------ */

static bool program_valid(const kiln_program *prog)
{
    return prog && prog->magic == KILN__PROGRAM_MAGIC;
}

/* Free a program and its kernels (the last reference is gone, or the build failed; the mutex
 * is initialised once magic is set). NULL is a no-op. */
static void program_free(kiln_program *prog)
{
    if (!prog)
        return;
    bool live = prog->magic == KILN__PROGRAM_MAGIC;
    prog->magic = 0;
    kernel_node *n = prog->kernels;
    while (n) {
        kernel_node *next = n->next;
        kiln__cl.ReleaseKernel(n->k.kernel);
        pthread_mutex_destroy(&n->k.lock);
        free(n->k.params);
        free(n);
        n = next;
    }
    if (prog->program)
        kiln__cl.ReleaseProgram(prog->program);
    if (live)
        pthread_mutex_destroy(&prog->lock);
    if (prog->counted)
        kiln__live_add(KILN__LIVE_PROGRAM, -1);
    free(prog->names);
    free(prog->params.bytes);
    free(prog);
}

kiln_status kiln__program_kernel(kiln_program *prog, const char *name, const char *op,
                                 kiln__kernel **out)
{
    *out = NULL;
    if (!program_valid(prog))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: prog is %s; build one with kiln_program_build()", op,
                           prog ? "not a live kiln_program (released?)" : "NULL");
    if (!name)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: kernel name is NULL; kernels: %s", op,
                           kiln_program_kernel_names(prog));
    pthread_mutex_lock(&prog->lock);
    kiln_status s =
        list_kernel(prog->dev, prog->program, &prog->kernels, name, &prog->params, op, out);
    pthread_mutex_unlock(&prog->lock);
    return s;
}

static kiln_status kernel_names(kiln_program *prog, const char *op)
{
    size_t n = 0;
    cl_int err = kiln__cl.GetProgramInfo(prog->program, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &n);
    if (err != CL_SUCCESS)
        return kiln__cl_fail(err, op, "clGetProgramInfo", prog->dev->info.spec);
    prog->names = kiln__calloc(1, n + 1);
    if (!prog->names)
        return kiln__host_oom(op);
    err = kiln__cl.GetProgramInfo(prog->program, CL_PROGRAM_KERNEL_NAMES, n, prog->names, NULL);
    if (err != CL_SUCCESS)
        return kiln__cl_fail(err, op, "clGetProgramInfo", prog->dev->info.spec);
    return KILN_OK;
}

kiln_status kiln__check_options(const char *options, const char *op)
{
    if (!options)
        return KILN_OK;
    if (strlen(options) > 4096)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: build options are %zu characters long; the limit is 4096", op,
                           strlen(options));
    for (const unsigned char *c = (const unsigned char *)options; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: build options contain a control character (0x%02x at offset "
                               "%d); separate options with spaces",
                               op, *c, (int)(c - (const unsigned char *)options));
    /* Every word is an option, or the value of a preceding -D, -U or -I. */
    const char *p = options, *prev = NULL;
    size_t prevlen = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, " ");
        bool value =
            prev && prevlen == 2 &&
            (!strncmp(prev, "-D", 2) || !strncmp(prev, "-U", 2) || !strncmp(prev, "-I", 2));
        if (*p != '-' && !value)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: build option \"%.*s\" does not start with '-' (options: "
                               "\"%s\"); write e.g. \"-DNAME=value\"",
                               op, (int)(n > 64 ? 64 : n), p, options);
        prev = value ? NULL : p;
        prevlen = n;
        p += n;
    }
    return KILN_OK;
}

static kiln_status program_build(kiln_device *dev, const char *source, size_t len, const char *name,
                                 const char *options, const char *op, kiln_program **out)
{
    kiln_status s = kiln__check_options(options, op);
    if (s != KILN_OK)
        return s;
    s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    kiln_program *prog = kiln__calloc(1, sizeof *prog);
    char *opts = build_options(dev, true, options);
    if (!prog || !opts) {
        s = kiln__host_oom(op);
        goto fail;
    }
    prog->magic = KILN__PROGRAM_MAGIC;
    atomic_init(&prog->refs, 1);
    prog->dev = dev;
    pthread_mutex_init(&prog->lock, NULL);
    s = kiln__program_compile(dev, source, len, name, opts, op, &prog->program, &prog->params);
    if (s == KILN_OK)
        s = kernel_names(prog, op);
    if (s != KILN_OK)
        goto fail;
    free(opts);
    prog->counted = true;
    kiln__live_add(KILN__LIVE_PROGRAM, 1);
    *out = prog;
    return KILN_OK;
fail:
    free(opts);
    program_free(prog);
    return s;
}

/* The first checks of both builds: out is set (*out = NULL), and arg (the source text or the
 * path, named argname) is given and not empty; hint follows the message. */
static kiln_status check_build(kiln_program **out, const char *arg, const char *argname,
                               const char *hint, const char *op)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!arg || !*arg)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is %s%s", op, argname,
                           arg ? "empty" : "NULL", hint);
    return KILN_OK;
}

kiln_status kiln_program_build(kiln_device *dev, const char *source, const char *options,
                               kiln_program **out)
{
    const char *op = "kiln_program_build";
    kiln_status s = check_build(out, source, "source", "; pass OpenCL C text", op);
    if (s != KILN_OK)
        return s;
    return program_build(dev, source, strlen(source), NULL, options, op, out);
}

/* Read a whole regular file of at most FILE_CAP bytes, NUL-terminated. */
static kiln_status read_source(const char *path, const char *op, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return kiln__error(KILN_ERR_IO, "%s: cannot open \"%s\": %s", op, path, strerror(errno));
    struct stat st;
    kiln_status s = KILN_OK;
    char *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        s = kiln__error(KILN_ERR_IO, "%s: \"%s\" is not a regular file; pass a .cl file", op, path);
        goto done;
    }
    if (st.st_size == 0 || (uintmax_t)st.st_size > FILE_CAP) {
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: \"%s\" is %s (%jd bytes; limit %zu)", op,
                        path, st.st_size ? "too large" : "empty", (intmax_t)st.st_size, FILE_CAP);
        goto done;
    }
    size_t n = (size_t)st.st_size;
    buf = kiln__malloc(n + 1);
    if (!buf) {
        s = kiln__host_oom(op);
        goto done;
    }
    if (!kiln__fd_transfer(fd, buf, n, false)) {
        s = kiln__error(KILN_ERR_IO, "%s: cannot read \"%s\": %s", op, path,
                        errno ? strerror(errno) : "file shrank while reading");
        goto done;
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n)) {
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: \"%s\" contains a NUL byte; it is not OpenCL C text", op, path);
        goto done;
    }
    *out = buf;
    *len = n;
    buf = NULL;
done:
    free(buf);
    close(fd);
    return s;
}

kiln_status kiln_program_build_file(kiln_device *dev, const char *path, const char *options,
                                    kiln_program **out)
{
    const char *op = "kiln_program_build_file";
    kiln_status s = check_build(out, path, "path", "", op);
    if (s == KILN_OK)
        s = kiln__check_device(dev, op);
    if (s != KILN_OK)
        return s;
    char *src = NULL;
    size_t len = 0;
    s = read_source(path, op, &src, &len);
    if (s == KILN_OK)
        s = program_build(dev, src, len, path, options, op, out);
    free(src);
    return s;
}

kiln_program *kiln_program_retain(kiln_program *prog)
{
    if (prog)
        atomic_fetch_add(&prog->refs, 1);
    return prog;
}

void kiln_program_release(kiln_program *prog)
{
    if (!program_valid(prog) || atomic_fetch_sub(&prog->refs, 1) > 1)
        return;
    program_free(prog);
}

const char *kiln_program_kernel_names(const kiln_program *prog)
{
    return program_valid(prog) && prog->names ? prog->names : "";
}

kiln_device *kiln_program_device(const kiln_program *prog)
{
    return program_valid(prog) ? prog->dev : NULL;
}
