/* registry.c - enumerate OpenCL platforms and devices once, order them and describe them; open a
 * device's context and queue. Why a device type is unavailable is diagnose.c's. */
#include "registry.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CL/cl_ext.h>

#include "alloc.h"
#include "clcall.h"
#include "diagnose.h"
#include "spec.h"
#include "status.h"

#define KILN__MAX_PLATFORMS 32
#define KILN__MAX_DEVICES 128
#define KILN__NOTES_SIZE 4096

/* Everything enumerated, including devices that are hidden or unusable. */
typedef struct registry {
    bool no_platform;
    cl_int platform_error; /* clGetPlatformIDs failure, CL_SUCCESS otherwise */
    int nplatforms;
    kiln__platform platforms[KILN__MAX_PLATFORMS];
    char platform_names[KILN__MAX_PLATFORMS][128];
    bool platform_nvidia[KILN__MAX_PLATFORMS]; /* NVIDIA's own platform ("NVIDIA CUDA") */
    int platform_ndevices[KILN__MAX_PLATFORMS];
    int nall;
    kiln__devdesc descs[KILN__MAX_DEVICES];
    kiln_device all[KILN__MAX_DEVICES];
    int nvisible;
    kiln_device *visible[KILN__MAX_DEVICES]; /* in listing order */
    kiln_status visible_status;              /* a malformed KILN_VISIBLE_DEVICES */
    char visible_error[512];
    char notes[KILN__NOTES_SIZE];    /* platforms that failed, devices skipped: one per line */
    char failures[KILN__NOTES_SIZE]; /* the notes of platforms and devices that failed */
    kiln__diagnosis diag;            /* why a type is unavailable; what auto picks */
} registry;

static registry reg;
/* Enumeration runs once under reg_lock; reg_ready makes later calls lock-free. A mutex and a
 * flag rather than pthread_once so that kiln__registry_reset can enumerate again in tests. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool reg_ready;

typedef enum note_kind {
    NOTE_SKIPPED, /* a device or platform left out on purpose (unavailable, no compiler) */
    NOTE_FAILED,  /* a platform or device that failed to answer: it may hide devices */
} note_kind;

static void add_line(char *buf, size_t size, const char *line)
{
    size_t used = strlen(buf);
    snprintf(buf + used, size - used, "%s\n", line);
}

static void note(note_kind kind, const char *fmt, ...) KILN__PRINTF(2, 3);
static void note(note_kind kind, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    kiln__log(KILN_LOG_WARN, "%s", line);
    add_line(reg.notes, sizeof reg.notes, line);
    if (kind == NOTE_FAILED)
        add_line(reg.failures, sizeof reg.failures, line);
}

/* Visible devices of a type (after enumeration). */
static int count_type(kiln_device_type type)
{
    int n = 0;
    for (int i = 0; i < reg.nvisible; i++)
        n += (reg.visible[i]->info.type & type) != 0;
    return n;
}

/* clGetPlatformInfo and clGetDeviceInfo over one signature, for query_str. */
typedef cl_int (*info_fn)(void *obj, cl_uint what, size_t size, void *value, size_t *size_ret);

static cl_int platform_info(void *obj, cl_uint what, size_t size, void *value, size_t *size_ret)
{
    return kiln__cl.GetPlatformInfo((cl_platform_id)obj, what, size, value, size_ret);
}

static cl_int device_info(void *obj, cl_uint what, size_t size, void *value, size_t *size_ret)
{
    return kiln__cl.GetDeviceInfo((cl_device_id)obj, what, size, value, size_ret);
}

/* Copy a string query of a platform or device into buf (truncated). */
static cl_int query_str(info_fn get, void *obj, cl_uint what, char *buf, size_t size)
{
    size_t len = 0;
    cl_int err = get(obj, what, 0, NULL, &len);
    if (err != CL_SUCCESS)
        return err;
    char *tmp = kiln__malloc(len + 1);
    if (!tmp)
        return CL_OUT_OF_HOST_MEMORY;
    err = get(obj, what, len, tmp, NULL);
    if (err == CL_SUCCESS) {
        tmp[len] = '\0';
        snprintf(buf, size, "%s", tmp);
    }
    free(tmp);
    return err;
}

static cl_int platform_str(cl_platform_id p, cl_platform_info what, char *buf, size_t size)
{
    return query_str(platform_info, p, what, buf, size);
}

static cl_int device_str(cl_device_id d, cl_device_info what, char *buf, size_t size)
{
    return query_str(device_info, d, what, buf, size);
}

#define QUERY(dev, what, var)                                                                      \
    do {                                                                                           \
        err = kiln__cl.GetDeviceInfo(dev, what, sizeof(var), &(var), NULL);                        \
        if (err != CL_SUCCESS) {                                                                   \
            failed = #what;                                                                        \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#define QUERY_STR(dev, what, buf)                                                                  \
    do {                                                                                           \
        err = device_str(dev, what, buf, sizeof(buf));                                             \
        if (err != CL_SUCCESS) {                                                                   \
            failed = #what;                                                                        \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Describe one device; false (with a note) if a query failed. */
static bool describe(kiln_device *kd, kiln__devdesc *desc, kiln__platform *plat, int pi, int di,
                     cl_device_id id)
{
    kiln_device_info *in = &kd->info;
    cl_int err = CL_SUCCESS;
    const char *failed = NULL;
    cl_device_type type;
    cl_uint cu, clock, vendor_id;
    cl_ulong gmem, maxalloc, lmem;
    size_t wg;
    cl_bool unified, available, compiler;
    cl_device_fp_config fp64 = 0;
    char ext[8192] = "";

    memset(kd, 0, sizeof *kd);
    QUERY_STR(id, CL_DEVICE_NAME, in->name);
    QUERY(id, CL_DEVICE_TYPE, type);
    QUERY_STR(id, CL_DEVICE_VENDOR, in->vendor);
    QUERY_STR(id, CL_DRIVER_VERSION, in->driver_version);
    QUERY_STR(id, CL_DEVICE_VERSION, in->opencl_version);
    QUERY_STR(id, CL_DEVICE_OPENCL_C_VERSION, in->opencl_c_version);
    QUERY(id, CL_DEVICE_VENDOR_ID, vendor_id);
    QUERY(id, CL_DEVICE_MAX_COMPUTE_UNITS, cu);
    QUERY(id, CL_DEVICE_MAX_CLOCK_FREQUENCY, clock);
    QUERY(id, CL_DEVICE_GLOBAL_MEM_SIZE, gmem);
    QUERY(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, maxalloc);
    QUERY(id, CL_DEVICE_LOCAL_MEM_SIZE, lmem);
    QUERY(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, wg);
    QUERY(id, CL_DEVICE_HOST_UNIFIED_MEMORY, unified);
    QUERY(id, CL_DEVICE_AVAILABLE, available);
    QUERY(id, CL_DEVICE_COMPILER_AVAILABLE, compiler);
    /* Extensions may be long; a failure to read them only loses fp16/fp64. */
    if (device_str(id, CL_DEVICE_EXTENSIONS, ext, sizeof ext) != CL_SUCCESS)
        ext[0] = '\0';
    if (kiln__cl.GetDeviceInfo(id, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL) !=
        CL_SUCCESS)
        fp64 = 0;

    kd->magic = KILN__DEVICE_MAGIC;
    kd->platform = plat;
    kd->id = id;
    in->type = kiln__classify(type);
    in->vendor_id = vendor_id;
    in->compute_units = cu;
    in->max_clock_mhz = clock;
    in->global_mem_bytes = gmem;
    in->max_alloc_bytes = maxalloc;
    in->local_mem_bytes = lmem;
    in->max_work_group_size = wg;
    in->unified_memory = unified;
    in->fp64 = fp64 != 0 || strstr(ext, "cl_khr_fp64") != NULL;
    in->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
    snprintf(in->opencl, sizeof in->opencl, "%d:%d", pi, di);
    snprintf(in->platform, sizeof in->platform, "%s", reg.platform_names[pi]);
    platform_str(plat->id, CL_PLATFORM_VERSION, in->platform_version, sizeof in->platform_version);
    kd->nvidia = vendor_id == 0x10de || strstr(in->vendor, "NVIDIA") != NULL;

    desc->type = in->type;
    desc->platform_index = pi;
    desc->device_index = di;
    desc->nvidia = kd->nvidia;
    desc->vendor_id = vendor_id;
    desc->compute_units = cu;
    desc->clock_mhz = clock;
    desc->usable = available && compiler;
    if (!available)
        note(NOTE_SKIPPED, "device opencl:%d:%d (%s) reports itself unavailable; skipped", pi, di,
             in->name);
    else if (!compiler)
        note(NOTE_SKIPPED, "device opencl:%d:%d (%s) has no OpenCL C compiler; skipped", pi, di,
             in->name);
    return true;
fail:
    note(NOTE_FAILED, "device opencl:%d:%d of platform '%s' failed to answer %s: %s (%d); skipped",
         pi, di, reg.platform_names[pi], failed, kiln__cl_error_name(err), (int)err);
    return false;
}

static void enumerate_platform(int pi)
{
    kiln__platform *plat = &reg.platforms[pi];
    cl_uint n = 0;
    cl_int err = kiln__cl.GetDeviceIDs(plat->id, CL_DEVICE_TYPE_ALL, 0, NULL, &n);
    if (err == CL_DEVICE_NOT_FOUND || (err == CL_SUCCESS && n == 0)) {
        note(NOTE_SKIPPED, "platform %d (%s) has no devices", pi, reg.platform_names[pi]);
        return;
    }
    if (err != CL_SUCCESS) {
        note(NOTE_FAILED,
             "platform %d (%s) failed to answer clGetDeviceIDs: %s (%d); skipped (is its driver "
             "loaded, and may this user open its /dev nodes?)",
             pi, reg.platform_names[pi], kiln__cl_error_name(err), (int)err);
        return;
    }
    cl_device_id ids[KILN__MAX_DEVICES];
    if (n > KILN__MAX_DEVICES)
        n = KILN__MAX_DEVICES;
    err = kiln__cl.GetDeviceIDs(plat->id, CL_DEVICE_TYPE_ALL, n, ids, NULL);
    if (err != CL_SUCCESS) {
        note(NOTE_FAILED, "platform %d (%s) failed to list its devices: %s (%d); skipped", pi,
             reg.platform_names[pi], kiln__cl_error_name(err), (int)err);
        return;
    }
    for (cl_uint di = 0; di < n && reg.nall < KILN__MAX_DEVICES; di++) {
        if (describe(&reg.all[reg.nall], &reg.descs[reg.nall], plat, pi, (int)di, ids[di])) {
            reg.platform_ndevices[pi]++;
            reg.nall++;
        }
    }
}

/* Write the reasons of kiln_unavailable_reason and kiln_auto_reason. */
static void explain(void)
{
    kiln__census c = {
        .no_platform = reg.no_platform,
        .platform_error = reg.platform_error,
        .nplatforms = reg.nplatforms,
        .platform_names = (const char(*)[128])reg.platform_names,
        .platform_ndevices = reg.platform_ndevices,
        .platform_nvidia = reg.platform_nvidia,
        .ndevices = reg.nall,
        .descs = reg.descs,
        .visible_status = reg.visible_status,
        .visible_error = reg.visible_error,
        .failures = reg.failures,
    };
    kiln__diagnose(&c, &reg.diag);
}

static void enumerate(void)
{
    /* Enumeration is not a failing call of the caller's: keep its last-error message. */
    static _Thread_local char saved[1024];
    snprintf(saved, sizeof saved, "%s", kiln_last_error());
    cl_platform_id ids[KILN__MAX_PLATFORMS];
    cl_uint n = 0;
    cl_int err = kiln__cl.GetPlatformIDs(KILN__MAX_PLATFORMS, ids, &n);
    if (err != CL_SUCCESS || n == 0) {
        reg.no_platform = true;
        reg.platform_error = err != CL_SUCCESS ? err : CL_PLATFORM_NOT_FOUND_KHR;
        kiln__log(KILN_LOG_WARN, "no OpenCL platform found (%s (%d))",
                  kiln__cl_error_name(reg.platform_error), (int)reg.platform_error);
    }
    if (n > KILN__MAX_PLATFORMS)
        n = KILN__MAX_PLATFORMS;
    for (cl_uint p = 0; !reg.no_platform && p < n; p++) {
        kiln__platform *plat = &reg.platforms[reg.nplatforms];
        plat->id = ids[p];
        plat->index = (int)p;
        if (platform_str(ids[p], CL_PLATFORM_NAME, reg.platform_names[p],
                         sizeof reg.platform_names[p]) != CL_SUCCESS)
            snprintf(reg.platform_names[p], sizeof reg.platform_names[p], "platform %u", p);
        char vendor[128] = "";
        platform_str(ids[p], CL_PLATFORM_VENDOR, vendor, sizeof vendor);
        reg.platform_nvidia[p] =
            strstr(vendor, "NVIDIA") != NULL || strstr(reg.platform_names[p], "NVIDIA") != NULL;
        reg.nplatforms++;
        enumerate_platform((int)p);
    }
    kiln__spec_number(reg.descs, reg.nall, false);
    const char *vis = getenv("KILN_VISIBLE_DEVICES");
    if (vis) {
        reg.visible_status = kiln__spec_apply_visible(vis, reg.descs, reg.nall);
        if (reg.visible_status != KILN_OK) {
            snprintf(reg.visible_error, sizeof reg.visible_error, "%s", kiln_last_error());
            kiln__log_last_error(KILN_LOG_ERROR); /* it is reg.visible_error */
            for (int i = 0; i < reg.nall; i++)
                reg.descs[i].visible = false;
            kiln__spec_number(reg.descs, reg.nall, true);
        }
    }
    for (int r = 0; r < reg.nall; r++)
        for (int i = 0; i < reg.nall; i++)
            if (reg.descs[i].rank == r) {
                kiln_device *dev = &reg.all[i];
                dev->type_index = reg.descs[i].type_index;
                kiln__spec_format(&reg.descs[i], dev->info.spec, sizeof dev->info.spec);
                pthread_mutex_init(&dev->lock, NULL);
                reg.visible[reg.nvisible++] = dev;
            }
    explain();
    kiln__error(KILN_OK, "%s", saved);
}

static void ensure(void)
{
    if (atomic_load_explicit(&reg_ready, memory_order_acquire))
        return;
    pthread_mutex_lock(&reg_lock);
    if (!atomic_load_explicit(&reg_ready, memory_order_relaxed)) {
        enumerate();
        atomic_store_explicit(&reg_ready, true, memory_order_release);
    }
    pthread_mutex_unlock(&reg_lock);
}

void kiln__device_hooks_add(kiln__device_hooks *h, void (*fn)(kiln_device *dev))
{
    pthread_mutex_lock(&h->lock);
    if (h->n == KILN__DEVICE_HOOKS)
        abort(); /* a programming error: raise KILN__DEVICE_HOOKS */
    h->fn[h->n++] = fn;
    pthread_mutex_unlock(&h->lock);
}

void kiln__device_hooks_call(kiln__device_hooks *h, kiln_device *dev, bool last_first)
{
    pthread_mutex_lock(&h->lock);
    for (int i = 0; i < h->n; i++)
        h->fn[last_first ? h->n - 1 - i : i](dev);
    pthread_mutex_unlock(&h->lock);
}

static kiln__device_hooks reset_hooks = KILN__DEVICE_HOOKS_INIT;

void kiln__registry_on_reset(void (*fn)(kiln_device *dev))
{
    kiln__device_hooks_add(&reset_hooks, fn);
}

void kiln__registry_reset(void)
{
    pthread_mutex_lock(&reg_lock);
    if (atomic_load_explicit(&reg_ready, memory_order_relaxed)) {
        for (int i = 0; i < reg.nvisible; i++) {
            kiln_device *dev = reg.visible[i];
            kiln__device_hooks_call(&reset_hooks, dev, true);
            if (dev->queue)
                kiln__cl.ReleaseCommandQueue(dev->queue);
            if (dev->private_queue)
                kiln__cl.ReleaseCommandQueue(dev->private_queue);
            if (dev->timed_queue)
                kiln__cl.ReleaseCommandQueue(dev->timed_queue);
            for (int q = 0; q < dev->nqueues; q++)
                kiln__cl.ReleaseCommandQueue(dev->queues[q].q);
            if (dev->error_word)
                kiln__cl.ReleaseMemObject(dev->error_word);
            pthread_mutex_destroy(&dev->lock);
        }
        for (int p = 0; p < reg.nplatforms; p++)
            if (reg.platforms[p].context)
                kiln__cl.ReleaseContext(reg.platforms[p].context);
        memset(&reg, 0, sizeof reg);
        atomic_store_explicit(&reg_ready, false, memory_order_release);
    }
    pthread_mutex_unlock(&reg_lock);
}

kiln_device **kiln__devices(int *n)
{
    ensure();
    *n = reg.nvisible;
    return reg.visible;
}

bool kiln__device_valid(const kiln_device *dev)
{
    if (!dev)
        return false;
    ensure();
    /* Compare addresses before reading: a forged pointer is never dereferenced. */
    for (int i = 0; i < reg.nvisible; i++)
        if (reg.visible[i] == dev)
            return dev->magic == KILN__DEVICE_MAGIC;
    return false;
}

kiln_status kiln__check_device(const kiln_device *dev, const char *op)
{
    if (!dev)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: device is NULL; get one with "
                           "kiln_device_get()",
                           op);
    if (!kiln__device_valid(dev))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %p is not a device handle from kiln_device_get()", op,
                           (const void *)dev);
    return KILN_OK;
}

bool kiln__device_is_oclgrind(const kiln_device *dev)
{
    return strncmp(dev->info.platform, "Oclgrind", 8) == 0;
}

const char *kiln__device_label(const kiln_device *dev)
{
    return dev ? dev->info.spec : "?";
}

int kiln_device_count(kiln_device_type type)
{
    ensure();
    return count_type(type);
}

bool kiln_is_available(kiln_device_type type)
{
    return kiln_device_count(type) > 0;
}

const char *kiln_unavailable_reason(kiln_device_type type)
{
    ensure();
    if ((type & ~KILN_DEVICE_ALL) || type == 0)
        return "not a device type (use KILN_DEVICE_CPU, _GPU, _ACCELERATOR or _ALL)";
    if (count_type(type) > 0)
        return "";
    return kiln__diagnosis_reason(&reg.diag, type);
}

const char *kiln_auto_reason(void)
{
    ensure();
    return reg.diag.auto_reason;
}

const char *kiln_device_notes(void)
{
    ensure();
    return reg.notes;
}

kiln_status kiln_device_get(const char *spec, kiln_device **out)
{
    if (out)
        *out = NULL;
    if (!spec || !out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "kiln_device_get: spec and out must not be NULL");
    ensure();
    if (reg.no_platform) {
        /* Still reject malformed specs first: that is the more useful message. */
        int dummy;
        kiln_status s = kiln__spec_resolve(spec, reg.descs, 0, getenv("KILN_DEVICE"), &dummy);
        if (s == KILN_ERR_INVALID_ARGUMENT)
            return s;
        return kiln__error(KILN_ERR_NO_PLATFORM, "kiln_device_get('%s'): %s", spec,
                           kiln__diagnosis_reason(&reg.diag, KILN_DEVICE_ALL));
    }
    if (reg.visible_status != KILN_OK)
        return kiln__error(reg.visible_status, "kiln_device_get: %s", reg.visible_error);
    int i;
    kiln__log_hold(); /* the error is logged once, with its reason */
    kiln_status s = kiln__spec_resolve(spec, reg.descs, reg.nall, getenv("KILN_DEVICE"), &i);
    if (s == KILN_ERR_NO_DEVICE) {
        /* Say why, when a whole type is missing: that is what the user needs to fix. */
        const char *why = NULL;
        if (count_type(KILN_DEVICE_ALL) == 0)
            why = kiln__diagnosis_reason(&reg.diag, KILN_DEVICE_ALL);
        else if ((strncmp(spec, "gpu", 3) == 0 || strncmp(spec, "cuda", 4) == 0) &&
                 count_type(KILN_DEVICE_GPU) == 0)
            why = kiln__diagnosis_reason(&reg.diag, KILN_DEVICE_GPU);
        else if (strncmp(spec, "accelerator", 11) == 0 && count_type(KILN_DEVICE_ACCELERATOR) == 0)
            why = kiln__diagnosis_reason(&reg.diag, KILN_DEVICE_ACCELERATOR);
        if (why && *why)
            kiln__error(s, "%s (%s)", kiln_last_error(), why);
    }
    kiln__log_release();
    if (s != KILN_OK)
        return s;
    *out = &reg.all[i];
    return KILN_OK;
}

kiln_device *kiln_device_at(int i)
{
    ensure();
    return i >= 0 && i < reg.nvisible ? reg.visible[i] : NULL;
}

const char *kiln_device_name(const kiln_device *dev)
{
    return kiln__device_valid(dev) ? dev->info.name : "";
}

const char *kiln_device_spec(const kiln_device *dev)
{
    return kiln__device_valid(dev) ? dev->info.spec : "";
}

kiln_status kiln_device_info_get(const kiln_device *dev, kiln_device_info *info)
{
    kiln_status s = kiln__check_device(dev, "kiln_device_info_get");
    if (s != KILN_OK)
        return s;
    if (!info)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_device_info_get: info is NULL");
    memset(info, 0, sizeof *info);
    *info = dev->info; /* described from a zeroed struct: reserved stays zero */
    return KILN_OK;
}

static void CL_CALLBACK context_notify(const char *msg, const void *info, size_t cb, void *user)
{
    (void)info;
    (void)cb;
    (void)user;
    kiln__log(KILN_LOG_WARN, "OpenCL context: %s", msg);
}

/* Create the platform's context over its visible devices. Called with every device lock of
 * the platform free; platform contexts are created under one global lock. */
static pthread_mutex_t context_lock = PTHREAD_MUTEX_INITIALIZER;

static cl_int open_context(kiln__platform *plat)
{
    pthread_mutex_lock(&context_lock);
    if (!plat->context_tried) {
        cl_device_id ids[KILN__MAX_DEVICES];
        cl_uint n = 0;
        for (int i = 0; i < reg.nvisible; i++)
            if (reg.visible[i]->platform == plat)
                ids[n++] = reg.visible[i]->id;
        cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat->id, 0};
        cl_int err = CL_SUCCESS;
        plat->context = kiln__cl.CreateContext(props, n, ids, context_notify, NULL, &err);
        if (err != CL_SUCCESS || !plat->context) {
            plat->context = NULL;
            plat->context_error = err != CL_SUCCESS ? err : CL_INVALID_CONTEXT;
        } else {
            plat->context_tried = true;
        }
    }
    cl_int err = plat->context ? CL_SUCCESS : plat->context_error;
    pthread_mutex_unlock(&context_lock);
    return err;
}

/* At exit, finish every queue before the driver's static destructors run: PoCL compiles a
 * kernel on its own threads at its first launch, and a process that returns from main with
 * work queued (no kiln_device_synchronize) otherwise crashes in LLVM as exit() tears down
 * statics under that compilation. Lost devices are left alone; the queues are read without
 * their locks, since a thread holding one at exit would never release it. */
static pthread_mutex_t exit_fns_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*exit_fns[KILN__DEVICE_HOOKS])(void);
static int nexit_fns;

static atomic_bool exiting;

bool kiln__driver_callable(const kiln_device *dev)
{
    return !(atomic_load(&exiting) && kiln__device_is_oclgrind(dev));
}

static void finish_at_exit(void)
{
    atomic_store(&exiting, true);
    if (!atomic_load_explicit(&reg_ready, memory_order_acquire))
        return;
    for (int i = 0; i < reg.nvisible; i++) {
        kiln_device *dev = reg.visible[i];
        if (atomic_load_explicit(&dev->lost, memory_order_acquire))
            continue;
        /* Oclgrind runs its commands at enqueue and frees its state in its own exit handlers:
         * a clFinish after those corrupted the heap (release build, gpu-check --standin). */
        if (!kiln__driver_callable(dev))
            continue;
        if (dev->queue)
            kiln__cl.Finish(dev->queue);
        if (dev->private_queue)
            kiln__cl.Finish(dev->private_queue);
        if (dev->timed_queue)
            kiln__cl.Finish(dev->timed_queue);
        for (int q = 0; q < dev->nqueues; q++)
            kiln__cl.Finish(dev->queues[q].q);
    }
    static atomic_bool exit_hooks_ran;
    if (atomic_exchange(&exit_hooks_ran, true))
        return;
    pthread_mutex_lock(&exit_fns_lock);
    int n = nexit_fns;
    pthread_mutex_unlock(&exit_fns_lock);
    for (int i = 0; i < n; i++)
        exit_fns[i]();
}

void kiln__registry_on_exit(void (*fn)(void))
{
    pthread_mutex_lock(&exit_fns_lock);
    bool known = false;
    for (int i = 0; i < nexit_fns; i++)
        known = known || exit_fns[i] == fn;
    if (!known && nexit_fns < KILN__DEVICE_HOOKS)
        exit_fns[nexit_fns++] = fn;
    pthread_mutex_unlock(&exit_fns_lock);
}

kiln_device **kiln__devices_if_enumerated(int *n)
{
    if (!atomic_load_explicit(&reg_ready, memory_order_acquire)) {
        *n = 0;
        return NULL;
    }
    return kiln__devices(n);
}

/* exit() runs atexit handlers and C++ static destructors in reverse order of registration, and
 * LLVM constructs many of its statics lazily, during the driver's compiles: finish_at_exit must
 * be registered after them, so it is registered again after each build (a bounded number of
 * times: later builds meet the statics already made). Running it twice costs two clFinish. */
#define EXIT_HOOKS_MAX 64
static atomic_int exit_hooks;

void kiln__exit_hook(void)
{
    if (atomic_fetch_add(&exit_hooks, 1) < EXIT_HOOKS_MAX)
        atexit(finish_at_exit);
}

kiln_status kiln__device_open(kiln_device *dev, const char *op)
{
    kiln_status s = kiln__check_device(dev, op);
    if (s == KILN_OK)
        s = kiln__device_check_lost(dev, op);
    if (s != KILN_OK)
        return s;
    pthread_mutex_lock(&dev->lock);
    if (dev->queue) {
        pthread_mutex_unlock(&dev->lock);
        return KILN_OK;
    }
    cl_int err = open_context(dev->platform);
    if (err != CL_SUCCESS) {
        pthread_mutex_unlock(&dev->lock);
        return kiln__cl_fail(err, op, "clCreateContext", dev->info.spec);
    }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    dev->queue = kiln__cl.CreateCommandQueue(dev->platform->context, dev->id, 0, &err);
#pragma GCC diagnostic pop
    if (err != CL_SUCCESS || !dev->queue) {
        dev->queue = NULL;
        pthread_mutex_unlock(&dev->lock);
        return kiln__cl_fail(err != CL_SUCCESS ? err : CL_INVALID_COMMAND_QUEUE, op,
                             "clCreateCommandQueue", dev->info.spec);
    }
    pthread_mutex_unlock(&dev->lock);
    kiln__exit_hook();
    return KILN_OK;
}

cl_context kiln_device_cl_context(kiln_device *dev)
{
    return kiln__device_open(dev, "kiln_device_cl_context") == KILN_OK ? dev->platform->context
                                                                       : NULL;
}

cl_device_id kiln_device_cl_device_id(kiln_device *dev)
{
    return kiln__device_valid(dev) ? dev->id : NULL;
}

void kiln__device_mark_lost(kiln_device *dev, const char *clfn, cl_int err)
{
    pthread_mutex_lock(&dev->lock);
    if (!atomic_load_explicit(&dev->lost, memory_order_relaxed)) {
        snprintf(dev->lost_reason, sizeof dev->lost_reason,
                 "%s was lost after %s failed with %s (%d): a kernel probably accessed memory out "
                 "of bounds; the device's context cannot be used again in this process",
                 dev->info.spec, clfn, kiln__cl_error_name(err), (int)err);
        atomic_store_explicit(&dev->lost, true, memory_order_release);
        kiln__log(KILN_LOG_ERROR, "%s", dev->lost_reason);
    }
    pthread_mutex_unlock(&dev->lock);
}

kiln_status kiln__device_check_lost(const kiln_device *dev, const char *op)
{
    if (!atomic_load_explicit(&dev->lost, memory_order_acquire))
        return KILN_OK;
    return kiln__error(KILN_ERR_DEVICE_LOST, "%s: %s", op, dev->lost_reason);
}

void kiln__device_clear_lost(kiln_device *dev)
{
    pthread_mutex_lock(&dev->lock);
    atomic_store(&dev->lost, false);
    dev->lost_reason[0] = '\0';
    pthread_mutex_unlock(&dev->lock);
}
