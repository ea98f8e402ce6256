/* test-registry.c - the real device registry on the machine's OpenCL platforms, compared with
 * direct OpenCL queries; fault injection through the kiln__cl table; environment variables.
 * KILN_TEST_REGISTRY=no-platform|no-device selects the cases run under a special environment
 * (an empty OCL_ICD_VENDORS directory; POCL_DEVICES=bogus). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CL/cl_ext.h>

#include "lib/clcall.h"
#include "lib/registry.h"
#include "testutil.h"

#define ck_assert_has(str, sub)                                                                    \
    ck_assert_msg(strstr((str), (sub)) != NULL, "'%s' lacks '%s'", (str), (sub))

/* ---- the reference: OpenCL queried directly, not through kiln ---- */

#define MAXP 16
#define MAXD 64

typedef struct direct_dev {
    cl_device_id id;
    int p, d;
    kiln_device_type type;
    bool usable;
} direct_dev;

static direct_dev direct[MAXD];
static int ndirect;
static cl_platform_id direct_platforms[MAXP];
static cl_uint ndirect_platforms;

static void direct_enumerate(void)
{
    ndirect = 0;
    ndirect_platforms = 0;
    if (clGetPlatformIDs(MAXP, direct_platforms, &ndirect_platforms) != CL_SUCCESS)
        ndirect_platforms = 0;
    if (ndirect_platforms > MAXP)
        ndirect_platforms = MAXP;
    for (cl_uint p = 0; p < ndirect_platforms; p++) {
        cl_device_id ids[MAXD];
        cl_uint n = 0;
        if (clGetDeviceIDs(direct_platforms[p], CL_DEVICE_TYPE_ALL, MAXD, ids, &n) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < n && d < MAXD && ndirect < MAXD; d++) {
            cl_device_type t = 0;
            cl_bool avail = CL_FALSE, compiler = CL_FALSE;
            clGetDeviceInfo(ids[d], CL_DEVICE_TYPE, sizeof t, &t, NULL);
            clGetDeviceInfo(ids[d], CL_DEVICE_AVAILABLE, sizeof avail, &avail, NULL);
            clGetDeviceInfo(ids[d], CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler, NULL);
            direct_dev *x = &direct[ndirect++];
            x->id = ids[d];
            x->p = (int)p;
            x->d = (int)d;
            /* GPU bit first, then accelerator, then CPU. */
            x->type = (t & CL_DEVICE_TYPE_GPU)           ? KILN_DEVICE_GPU
                      : (t & CL_DEVICE_TYPE_ACCELERATOR) ? KILN_DEVICE_ACCELERATOR
                                                         : KILN_DEVICE_CPU;
            x->usable = avail && compiler;
        }
    }
}

static int direct_count(kiln_device_type mask)
{
    int n = 0;
    for (int i = 0; i < ndirect; i++)
        n += direct[i].usable && (direct[i].type & mask);
    return n;
}

static const direct_dev *direct_find(const char *opencl)
{
    int p, d;
    if (sscanf(opencl, "%d:%d", &p, &d) != 2)
        return NULL;
    for (int i = 0; i < ndirect; i++)
        if (direct[i].p == p && direct[i].d == d)
            return &direct[i];
    return NULL;
}

static bool env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}

/* The -oclgrind configuration: Oclgrind's GPU-type device beside PoCL (not -gpuonly, where
 * Oclgrind is alone). */
static bool oclgrind_config(void)
{
    const char *v = getenv("OCL_ICD_VENDORS");
    return v && strstr(v, "vendors-oclgrind") && !strstr(v, "-empty") && !strstr(v, "-gpuonly");
}

static void restore(void)
{
    unsetenv("KILN_VISIBLE_DEVICES");
    unsetenv("KILN_DEVICE");
    unsetenv("KILN_SYSFS_ROOT");
    unsetenv("KILN_TEST_NVIDIA_OPENCL_LIB");
    unsetenv("CUDA_VISIBLE_DEVICES");
    kiln__cl_reset();
    kiln__registry_reset();
}

/* The first visible device's type and spec ("gpu:0" on a GPU-only machine, else "cpu:0" here):
 * the cases below use it instead of assuming a CPU device. */
static kiln_device_type first_type(void)
{
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(kiln_device_at(0), &info), KILN_OK);
    return info.type;
}

static const char *first_spec(void)
{
    return kiln_device_spec(kiln_device_at(0));
}

/* Hide every GPU with KILN_VISIBLE_DEVICES (Oclgrind's in -oclgrind, a real one on a GPU
 * machine), so that "why is there no GPU" can be asked; false (the case is skipped) when every
 * device is a GPU. */
static bool hide_gpus(const char *test)
{
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < kiln_device_count(KILN_DEVICE_ALL); i++) {
        kiln_device_info info;
        ck_assert_int_eq(kiln_device_info_get(kiln_device_at(i), &info), KILN_OK);
        if (info.type != KILN_DEVICE_GPU)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "",
                                     info.spec);
    }
    if (!used) {
        test_skip("%s: every device here is a GPU; nothing is left when they are hidden", test);
        return false;
    }
    if (kiln_device_count(KILN_DEVICE_GPU) > 0)
        setenv("KILN_VISIBLE_DEVICES", list, 1);
    return true;
}

/* ---- the real registry ---- */

START_TEST(counts_match_opencl)
{
    ck_assert_int_gt(ndirect, 0);
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), direct_count(KILN_DEVICE_ALL));
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_GPU), direct_count(KILN_DEVICE_GPU));
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_CPU), direct_count(KILN_DEVICE_CPU));
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ACCELERATOR),
                     direct_count(KILN_DEVICE_ACCELERATOR));
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_GPU | KILN_DEVICE_CPU),
                     direct_count(KILN_DEVICE_GPU | KILN_DEVICE_CPU));
    ck_assert_int_eq(kiln_device_count((kiln_device_type)0), 0);
    ck_assert(kiln_is_available(KILN_DEVICE_CPU) == (direct_count(KILN_DEVICE_CPU) > 0));
    ck_assert(kiln_is_available(KILN_DEVICE_GPU) == (direct_count(KILN_DEVICE_GPU) > 0));
    ck_assert(kiln_is_available(KILN_DEVICE_ALL));
}
END_TEST

START_TEST(listing_order_and_specs)
{
    int n = kiln_device_count(KILN_DEVICE_ALL);
    int seen[8] = {0};
    int last_order = -1;
    for (int i = 0; i < n; i++) {
        kiln_device *dev = kiln_device_at(i);
        ck_assert_ptr_nonnull(dev);
        kiln_device_info in;
        memset(&in, 0xff, sizeof in); /* the fill zeroes what kiln does not set */
        ck_assert_int_eq(kiln_device_info_get(dev, &in), KILN_OK);
        for (size_t r = 0; r < sizeof in.reserved / sizeof in.reserved[0]; r++)
            ck_assert_uint_eq(in.reserved[r], 0);
        int order = in.type == KILN_DEVICE_GPU ? 0 : in.type == KILN_DEVICE_ACCELERATOR ? 1 : 2;
        ck_assert_int_ge(order, last_order); /* GPUs, then accelerators, then CPUs */
        last_order = order;
        char want[32];
        const char *tname = order == 0 ? "gpu" : order == 1 ? "accelerator" : "cpu";
        snprintf(want, sizeof want, "%s:%d", tname, seen[in.type]++);
        ck_assert_str_eq(kiln_device_spec(dev), want);
        ck_assert_str_eq(in.spec, want);
        kiln_device *again = NULL;
        ck_assert_int_eq(kiln_device_get(want, &again), KILN_OK);
        ck_assert_ptr_eq(again, dev);
        char addr[40];
        snprintf(addr, sizeof addr, "opencl:%s", in.opencl);
        ck_assert_int_eq(kiln_device_get(addr, &again), KILN_OK);
        ck_assert_ptr_eq(again, dev);
    }
    ck_assert_ptr_null(kiln_device_at(-1));
    ck_assert_ptr_null(kiln_device_at(n));
    ck_assert_ptr_null(kiln_device_at(1 << 30));
}
END_TEST

static void str_info(cl_device_id id, cl_device_info what, char *buf, size_t size)
{
    buf[0] = '\0';
    ck_assert_int_eq(clGetDeviceInfo(id, what, size, buf, NULL), CL_SUCCESS);
}

START_TEST(info_matches_opencl)
{
    int n = kiln_device_count(KILN_DEVICE_ALL);
    for (int i = 0; i < n; i++) {
        kiln_device *dev = kiln_device_at(i);
        kiln_device_info in;
        ck_assert_int_eq(kiln_device_info_get(dev, &in), KILN_OK);
        const direct_dev *x = direct_find(in.opencl);
        ck_assert_msg(x != NULL, "no direct device for opencl %s", in.opencl);
        ck_assert_ptr_eq(kiln_device_cl_device_id(dev), x->id);
        ck_assert_int_eq(in.type, x->type);
        char s[1024];
        str_info(x->id, CL_DEVICE_NAME, s, sizeof s);
        ck_assert_str_eq(in.name, s);
        ck_assert_str_eq(kiln_device_name(dev), s);
        str_info(x->id, CL_DEVICE_VENDOR, s, sizeof s);
        ck_assert_str_eq(in.vendor, s);
        str_info(x->id, CL_DRIVER_VERSION, s, sizeof s);
        ck_assert_str_eq(in.driver_version, s);
        str_info(x->id, CL_DEVICE_VERSION, s, sizeof s);
        ck_assert_str_eq(in.opencl_version, s);
        str_info(x->id, CL_DEVICE_OPENCL_C_VERSION, s, sizeof s);
        ck_assert_str_eq(in.opencl_c_version, s);
        ck_assert_int_eq(
            clGetPlatformInfo(direct_platforms[x->p], CL_PLATFORM_NAME, sizeof s, s, NULL),
            CL_SUCCESS);
        ck_assert_str_eq(in.platform, s);
        cl_uint u;
        cl_ulong ul;
        size_t sz;
        cl_bool b;
        clGetDeviceInfo(x->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u, &u, NULL);
        ck_assert_uint_eq(in.compute_units, u);
        clGetDeviceInfo(x->id, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof u, &u, NULL);
        ck_assert_uint_eq(in.max_clock_mhz, u);
        clGetDeviceInfo(x->id, CL_DEVICE_VENDOR_ID, sizeof u, &u, NULL);
        ck_assert_uint_eq(in.vendor_id, u);
        clGetDeviceInfo(x->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof ul, &ul, NULL);
        ck_assert_uint_eq(in.global_mem_bytes, ul);
        clGetDeviceInfo(x->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ul, &ul, NULL);
        ck_assert_uint_eq(in.max_alloc_bytes, ul);
        clGetDeviceInfo(x->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ul, &ul, NULL);
        ck_assert_uint_eq(in.local_mem_bytes, ul);
        clGetDeviceInfo(x->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof sz, &sz, NULL);
        ck_assert_uint_eq(in.max_work_group_size, sz);
        clGetDeviceInfo(x->id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof b, &b, NULL);
        ck_assert(in.unified_memory == (b != CL_FALSE));
        char ext[8192];
        str_info(x->id, CL_DEVICE_EXTENSIONS, ext, sizeof ext);
        ck_assert(in.fp16 == (strstr(ext, "cl_khr_fp16") != NULL));
        cl_device_fp_config fp64 = 0;
        clGetDeviceInfo(x->id, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL);
        ck_assert(in.fp64 == (fp64 != 0 || strstr(ext, "cl_khr_fp64") != NULL));
    }
}
END_TEST

START_TEST(two_pocl_devices)
{
    if (!env_is("POCL_DEVICES", "pthread pthread"))
        return; /* the -2dev configuration only */
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_CPU), 2);
    kiln_device *c0, *c1;
    ck_assert_int_eq(kiln_device_get("cpu:0", &c0), KILN_OK);
    ck_assert_int_eq(kiln_device_get("cpu:1", &c1), KILN_OK);
    ck_assert_ptr_ne(c0, c1);
    ck_assert_str_eq(kiln_device_spec(c0), "cpu:0");
    ck_assert_str_eq(kiln_device_spec(c1), "cpu:1");
    kiln_device_info i0, i1;
    kiln_device_info_get(c0, &i0);
    kiln_device_info_get(c1, &i1);
    ck_assert_str_eq(i0.opencl, "0:0");
    ck_assert_str_eq(i1.opencl, "0:1");
    /* Devices of one platform share one context. */
    cl_context ctx = kiln_device_cl_context(c0);
    ck_assert_ptr_nonnull(ctx);
    ck_assert_ptr_eq(kiln_device_cl_context(c1), ctx);
    ck_assert_ptr_ne(kiln_device_cl_queue(c0), kiln_device_cl_queue(c1));
    kiln_device *a;
    ck_assert_int_eq(kiln_device_get("auto", &a), KILN_OK);
    ck_assert_ptr_eq(a, c0);
}
END_TEST

START_TEST(oclgrind_is_gpu0)
{
    if (!oclgrind_config())
        return;
    kiln_device *gpu, *cpu, *a;
    ck_assert_int_eq(kiln_device_get("auto", &a), KILN_OK);
    ck_assert_int_eq(kiln_device_get("gpu:0", &gpu), KILN_OK);
    ck_assert_int_eq(kiln_device_get("cpu:0", &cpu), KILN_OK);
    ck_assert_ptr_eq(a, gpu);
    ck_assert_str_eq(kiln_device_spec(a), "gpu:0");
    kiln_device_info gi, ci;
    kiln_device_info_get(gpu, &gi);
    kiln_device_info_get(cpu, &ci);
    ck_assert_has(gi.platform, "Oclgrind");
    ck_assert_str_ne(gi.platform, ci.platform);
    ck_assert_int_ne(gi.opencl[0], ci.opencl[0]); /* different platform index P */
    ck_assert_has(kiln_auto_reason(), "gpu:0 (first GPU)");
    ck_assert(kiln_is_available(KILN_DEVICE_GPU));
    ck_assert_str_eq(kiln_unavailable_reason(KILN_DEVICE_GPU), "");
    /* Different platforms, different contexts. */
    ck_assert_ptr_ne(kiln_device_cl_context(gpu), kiln_device_cl_context(cpu));
    /* Oclgrind is no NVIDIA GPU. */
    kiln_device *c;
    ck_assert_int_eq(kiln_device_get("cuda:0", &c), KILN_ERR_NO_DEVICE);
    ck_assert_ptr_null(c);
    ASSERT_ERROR_HAS("NVIDIA");
}
END_TEST

START_TEST(gpu_unavailable_explained)
{
    if (kiln_is_available(KILN_DEVICE_GPU))
        return;
    const char *why = kiln_unavailable_reason(KILN_DEVICE_GPU);
    ck_assert_has(why, "no OpenCL platform has a gpu device");
    ck_assert_has(why, "Portable Computing Language");
    ck_assert_has(kiln_auto_reason(), "cpu:0 (no GPU: CPU fallback; ");
    ck_assert_has(kiln_auto_reason(), "no OpenCL platform has a gpu device");
    kiln_device *dev = (kiln_device *)1;
    ck_assert_int_eq(kiln_device_get("gpu:0", &dev), KILN_ERR_NO_DEVICE);
    ck_assert_ptr_null(dev);
    ASSERT_ERROR_HAS("no device 'gpu:0'; available: cpu:0");
    ASSERT_ERROR_HAS("no OpenCL platform has a gpu device");
    ck_assert_int_eq(kiln_device_get("cuda", &dev), KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("no NVIDIA GPU");
}
END_TEST

START_TEST(available_reasons_empty)
{
    ck_assert_str_eq(kiln_unavailable_reason(first_type()), "");
    ck_assert_str_eq(kiln_unavailable_reason(KILN_DEVICE_ALL), "");
    ck_assert_has(kiln_unavailable_reason((kiln_device_type)0), "not a device type");
    ck_assert_has(kiln_unavailable_reason((kiln_device_type)64), "not a device type");
    if (!kiln_is_available(KILN_DEVICE_ACCELERATOR))
        ck_assert_has(kiln_unavailable_reason(KILN_DEVICE_ACCELERATOR),
                      "no OpenCL platform has an accelerator device");
}
END_TEST

static unsigned char forged_storage[4096];

START_TEST(null_and_forged_arguments)
{
    kiln_device *forged = (kiln_device *)(void *)forged_storage;
    kiln_device *dev = (kiln_device *)1;
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_get(NULL, &dev), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(dev);
    ASSERT_ERROR_HAS("NULL");
    ck_assert_int_eq(kiln_device_get("auto", NULL), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("NULL");
    ck_assert_str_eq(kiln_device_name(NULL), "");
    ck_assert_str_eq(kiln_device_spec(NULL), "");
    ck_assert_str_eq(kiln_device_name(forged), "");
    ck_assert_str_eq(kiln_device_spec(forged), "");
    ck_assert_int_eq(kiln_device_info_get(NULL, &info), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("kiln_device_info_get: device is NULL");
    ck_assert_int_eq(kiln_device_info_get(forged, &info), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("not a device handle");
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_OK);
    ck_assert_int_eq(kiln_device_info_get(dev, NULL), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("info is NULL");
    ck_assert_int_eq(kiln_device_synchronize(NULL), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("kiln_device_synchronize");
    ck_assert_int_eq(kiln_device_synchronize(forged), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("not a device handle");
    ck_assert_ptr_null(kiln_device_cl_context(NULL));
    ck_assert_ptr_null(kiln_device_cl_queue(forged));
    ck_assert_ptr_null(kiln_device_cl_device_id(forged));
    ck_assert_ptr_null(kiln_device_cl_device_id(NULL));
    /* A pointer into the middle of a real device is forged too. */
    kiln_device *inside = (kiln_device *)(void *)((char *)dev + 8);
    ck_assert_int_eq(kiln_device_synchronize(inside), KILN_ERR_INVALID_ARGUMENT);
    /* Malformed specs fail the same way through the registry. */
    ck_assert_int_eq(kiln_device_get("gpu:1x", &dev), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(dev);
    ASSERT_ERROR_HAS("unexpected 'x'");
}
END_TEST

START_TEST(synchronize_and_raw_handles)
{
    int n = kiln_device_count(KILN_DEVICE_ALL);
    for (int i = 0; i < n; i++) {
        kiln_device *dev = kiln_device_at(i);
        ck_assert_int_eq(kiln_device_synchronize(dev), KILN_OK);
        ck_assert_int_eq(kiln_device_synchronize(dev), KILN_OK);
        cl_context ctx = kiln_device_cl_context(dev);
        cl_command_queue q = kiln_device_cl_queue(dev);
        cl_device_id id = kiln_device_cl_device_id(dev);
        ck_assert_ptr_nonnull(ctx);
        ck_assert_ptr_nonnull(q);
        ck_assert_ptr_nonnull(id);
        cl_device_id qdev = NULL;
        cl_context qctx = NULL;
        ck_assert_int_eq(clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL),
                         CL_SUCCESS);
        ck_assert_int_eq(clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL),
                         CL_SUCCESS);
        ck_assert_ptr_eq(qdev, id);
        ck_assert_ptr_eq(qctx, ctx);
        ck_assert_int_eq(clFinish(q), CL_SUCCESS);
    }
}
END_TEST

/* ---- first use from 8 threads at once ---- */

#define NTHREADS 8

typedef struct thread_result {
    kiln_device *dev;
    int count;
    kiln_status status;
} thread_result;

static pthread_barrier_t barrier;

static void *first_use(void *arg)
{
    thread_result *r = arg;
    pthread_barrier_wait(&barrier);
    r->status = kiln_device_get("auto", &r->dev);
    r->count = kiln_device_count(KILN_DEVICE_ALL);
    return NULL;
}

START_TEST(threads_first_use)
{
    kiln__registry_reset();
    pthread_t th[NTHREADS];
    thread_result r[NTHREADS];
    memset(r, 0, sizeof r);
    pthread_barrier_init(&barrier, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, first_use, &r[i]), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < NTHREADS; i++) {
        ck_assert_int_eq(r[i].status, KILN_OK);
        ck_assert_ptr_eq(r[i].dev, r[0].dev);
        ck_assert_int_eq(r[i].count, direct_count(KILN_DEVICE_ALL));
    }
    ck_assert_ptr_nonnull(r[0].dev);
    kiln_device *a;
    ck_assert_int_eq(kiln_device_get("auto", &a), KILN_OK);
    ck_assert_ptr_eq(a, r[0].dev);
}
END_TEST

/* ---- faults injected through the kiln__cl table, then enumeration again ---- */

static cl_int CL_API_CALL no_platforms(cl_uint n, cl_platform_id *ids, cl_uint *count)
{
    (void)n;
    (void)ids;
    if (count)
        *count = 0;
    return CL_PLATFORM_NOT_FOUND_KHR;
}

START_TEST(fault_no_platform)
{
    kiln__cl.GetPlatformIDs = no_platforms;
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), 0);
    ck_assert(!kiln_is_available(KILN_DEVICE_CPU));
    kiln_device *dev = (kiln_device *)1;
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_ERR_NO_PLATFORM);
    ck_assert_ptr_null(dev);
    ASSERT_ERROR_HAS("pocl-opencl-icd");
    ASSERT_ERROR_HAS("CL_PLATFORM_NOT_FOUND_KHR (-1001)");
    ck_assert_int_eq(kiln_device_get("cpu:x", &dev), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_has(kiln_unavailable_reason(KILN_DEVICE_GPU), "no OpenCL platform found");
    ck_assert_has(kiln_unavailable_reason(KILN_DEVICE_CPU), "pocl-opencl-icd");
    ck_assert_str_eq(kiln_auto_reason(), "");
    /* Transient: the next enumeration finds everything again. */
    restore();
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), direct_count(KILN_DEVICE_ALL));
}
END_TEST

static cl_int CL_API_CALL first_platform_fails(cl_platform_id p, cl_device_type t, cl_uint n,
                                               cl_device_id *ids, cl_uint *count)
{
    if (p == direct_platforms[0])
        return CL_OUT_OF_HOST_MEMORY;
    return clGetDeviceIDs(p, t, n, ids, count);
}

START_TEST(fault_platform_skipped)
{
    kiln__cl.GetDeviceIDs = first_platform_fails;
    kiln__registry_reset();
    int lost = 0;
    for (int i = 0; i < ndirect; i++)
        lost += direct[i].p == 0 && direct[i].usable;
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), direct_count(KILN_DEVICE_ALL) - lost);
    ck_assert_has(kiln_device_notes(), "platform 0");
    ck_assert_has(kiln_device_notes(), "failed to answer clGetDeviceIDs");
    ck_assert_has(kiln_device_notes(), "CL_OUT_OF_HOST_MEMORY (-6)");
    if (!kiln_is_available(KILN_DEVICE_CPU))
        ck_assert_has(kiln_unavailable_reason(KILN_DEVICE_CPU), "failed to answer");
    restore();
    ck_assert_str_eq(kiln_device_notes(), "");
}
END_TEST

static cl_int CL_API_CALL victim_info(cl_device_id d, cl_device_info what, size_t size, void *value,
                                      size_t *ret)
{
    if (d == direct[0].id && what == CL_DEVICE_MAX_CLOCK_FREQUENCY)
        return CL_INVALID_VALUE;
    return clGetDeviceInfo(d, what, size, value, ret);
}

START_TEST(fault_device_query_skipped)
{
    kiln__cl.GetDeviceInfo = victim_info;
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL),
                     direct_count(KILN_DEVICE_ALL) - (direct[0].usable ? 1 : 0));
    ck_assert_has(kiln_device_notes(), "device opencl:0:0");
    ck_assert_has(kiln_device_notes(), "CL_DEVICE_MAX_CLOCK_FREQUENCY");
    ck_assert_has(kiln_device_notes(), "CL_INVALID_VALUE (-30)");
    kiln_device *dev;
    ck_assert_int_eq(kiln_device_get("opencl:0:0", &dev), KILN_ERR_NO_DEVICE);
    restore();
}
END_TEST

static cl_int CL_API_CALL victim_unavailable(cl_device_id d, cl_device_info what, size_t size,
                                             void *value, size_t *ret)
{
    cl_int err = clGetDeviceInfo(d, what, size, value, ret);
    if (err == CL_SUCCESS && d == direct[0].id && what == CL_DEVICE_COMPILER_AVAILABLE)
        *(cl_bool *)value = CL_FALSE;
    return err;
}

START_TEST(fault_device_without_compiler)
{
    kiln__cl.GetDeviceInfo = victim_unavailable;
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL),
                     direct_count(KILN_DEVICE_ALL) - (direct[0].usable ? 1 : 0));
    ck_assert_has(kiln_device_notes(), "has no OpenCL C compiler; skipped");
    kiln_device_type t = direct[0].type;
    if (!kiln_is_available(t))
        ck_assert_has(kiln_unavailable_reason(t), "unavailable or without a compiler");
    restore();
}
END_TEST

static cl_context CL_API_CALL context_fails(
    const cl_context_properties *props, cl_uint n, const cl_device_id *ids,
    void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *user, cl_int *err)
{
    (void)props;
    (void)n;
    (void)ids;
    (void)notify;
    (void)user;
    *err = CL_OUT_OF_RESOURCES;
    return NULL;
}

START_TEST(fault_context_transient)
{
    kiln__registry_reset();
    kiln__cl.CreateContext = context_fails;
    kiln_device *dev;
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_OK);
    ck_assert_int_ne(kiln_device_synchronize(dev), KILN_OK);
    ASSERT_ERROR_HAS("clCreateContext");
    ASSERT_ERROR_HAS("CL_OUT_OF_RESOURCES");
    ck_assert_ptr_null(kiln_device_cl_context(dev));
    kiln__cl_reset();
    ck_assert_int_eq(kiln_device_synchronize(dev), KILN_OK);
    ck_assert_ptr_nonnull(kiln_device_cl_context(dev));
    restore();
}
END_TEST

/* Fail the fail_at-th GetDeviceInfo / GetPlatformInfo call of an enumeration (counting from 0;
 * -1 fails none and only counts). */
static int calls, fail_at = -1;

static cl_int CL_API_CALL nth_device_info(cl_device_id d, cl_device_info what, size_t size,
                                          void *value, size_t *ret)
{
    if (calls++ == fail_at)
        return CL_OUT_OF_RESOURCES;
    return clGetDeviceInfo(d, what, size, value, ret);
}

static cl_int CL_API_CALL nth_platform_info(cl_platform_id p, cl_platform_info what, size_t size,
                                            void *value, size_t *ret)
{
    if (calls++ == fail_at)
        return CL_OUT_OF_RESOURCES;
    return clGetPlatformInfo(p, what, size, value, ret);
}

/* Every single query failing in turn: enumeration never crashes, loses at most the device the
 * query was about, and says so. */
START_TEST(fault_each_query)
{
    int want = direct_count(KILN_DEVICE_ALL);
    for (int which = 0; which < 2; which++) {
        if (which == 0)
            kiln__cl.GetDeviceInfo = nth_device_info;
        else
            kiln__cl.GetPlatformInfo = nth_platform_info;
        calls = 0;
        fail_at = -1;
        kiln__registry_reset();
        ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), want);
        int total = calls;
        ck_assert_int_gt(total, 0);
        for (fail_at = 0; fail_at < total; fail_at++) {
            calls = 0;
            kiln__registry_reset();
            int n = kiln_device_count(KILN_DEVICE_ALL);
            ck_assert_int_ge(n, want - 1);
            ck_assert_int_le(n, want);
            if (n < want)
                ck_assert_has(kiln_device_notes(), "CL_OUT_OF_RESOURCES (-5); skipped");
            kiln_device *dev;
            ck_assert_int_eq(kiln_device_get("auto", &dev), n ? KILN_OK : KILN_ERR_NO_DEVICE);
        }
        fail_at = -1;
        kiln__cl_reset();
    }
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), want);
}
END_TEST

static cl_command_queue CL_API_CALL queue_fails(cl_context ctx, cl_device_id dev,
                                                cl_command_queue_properties props, cl_int *err)
{
    (void)ctx;
    (void)dev;
    (void)props;
    *err = CL_OUT_OF_HOST_MEMORY;
    return NULL;
}

START_TEST(fault_queue_transient)
{
    kiln__registry_reset();
    kiln__cl.CreateCommandQueue = queue_fails;
    kiln_device *dev;
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_OK);
    ck_assert_int_ne(kiln_device_synchronize(dev), KILN_OK);
    ASSERT_ERROR_HAS("clCreateCommandQueue");
    ASSERT_ERROR_HAS("CL_OUT_OF_HOST_MEMORY (-6)");
    ck_assert_ptr_null(kiln_device_cl_queue(dev));
    kiln__cl_reset();
    ck_assert_int_eq(kiln_device_synchronize(dev), KILN_OK);
    ck_assert_ptr_nonnull(kiln_device_cl_queue(dev));
    restore();
}
END_TEST

/* ---- environment variables, read at enumeration ---- */

START_TEST(env_visible_cpu1)
{
    if (!env_is("POCL_DEVICES", "pthread pthread"))
        return;
    setenv("KILN_VISIBLE_DEVICES", "cpu:1", 1);
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), 1);
    kiln_device *dev;
    ck_assert_int_eq(kiln_device_get("cpu:0", &dev), KILN_OK);
    kiln_device_info in;
    kiln_device_info_get(dev, &in);
    ck_assert_str_eq(in.spec, "cpu:0");
    ck_assert_str_eq(in.opencl, "0:1");
    ck_assert_ptr_eq(kiln_device_cl_device_id(dev), direct[1].id);
    ck_assert_int_eq(kiln_device_get("cpu:1", &dev), KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("available: cpu:0");
    ck_assert_int_eq(kiln_device_synchronize(kiln_device_at(0)), KILN_OK);
    restore();
}
END_TEST

START_TEST(env_visible_empty_and_bad)
{
    kiln_device_type type = first_type();
    setenv("KILN_VISIBLE_DEVICES", "", 1);
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), 0);
    ck_assert_has(kiln_unavailable_reason(type), "hidden by KILN_VISIBLE_DEVICES=''");
    kiln_device *dev;
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("available: none");
    ASSERT_ERROR_HAS("hidden by KILN_VISIBLE_DEVICES");

    setenv("KILN_VISIBLE_DEVICES", "cpu:zero", 1);
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), 0);
    ck_assert_int_eq(kiln_device_get("cpu:0", &dev), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(dev);
    ASSERT_ERROR_HAS("KILN_VISIBLE_DEVICES='cpu:zero'");
    ck_assert_has(kiln_unavailable_reason(type), "KILN_VISIBLE_DEVICES");

    setenv("KILN_VISIBLE_DEVICES", "cpu:7", 1);
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("no device 'cpu:7'");
    restore();
}
END_TEST

START_TEST(env_kiln_device)
{
    kiln_device *dev, *first;
    char spec[32], reason[96], bare[16];
    snprintf(spec, sizeof spec, "%s", first_spec());
    snprintf(reason, sizeof reason, "%s (KILN_DEVICE=%s)", spec, spec);
    snprintf(bare, sizeof bare, "%.*s", (int)strcspn(spec, ":"), spec); /* "cpu" */
    setenv("KILN_DEVICE", spec, 1);
    kiln__registry_reset();
    ck_assert_int_eq(kiln_device_get(spec, &first), KILN_OK);
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_OK);
    ck_assert_ptr_eq(dev, first);
    ck_assert_has(kiln_auto_reason(), reason);

    setenv("KILN_DEVICE", "cpu:9", 1);
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_ERR_NO_DEVICE);
    ck_assert_ptr_null(dev);
    ASSERT_ERROR_HAS("KILN_DEVICE='cpu:9'");
    ASSERT_ERROR_HAS("available:");

    setenv("KILN_DEVICE", "cpu 0", 1);
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("KILN_DEVICE='cpu 0'");
    /* Explicit specs do not read KILN_DEVICE. */
    ck_assert_int_eq(kiln_device_get(bare, &dev), KILN_OK);
    restore();
}
END_TEST

/* A fake sysfs tree: bus/pci/devices/<addr>/{class,vendor,driver -> .../drivers/<driver>}. */
static char sysfs[256];

static void fake_pci(const char *addr, const char *cls, const char *vendor, const char *driver)
{
    char path[512], target[512];
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s", sysfs, addr);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s/class", sysfs, addr);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n", cls);
    fclose(f);
    snprintf(path, sizeof path, "%s/bus/pci/devices/%s/vendor", sysfs, addr);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n", vendor);
    fclose(f);
    if (driver) {
        snprintf(path, sizeof path, "%s/bus/pci/devices/%s/driver", sysfs, addr);
        snprintf(target, sizeof target, "../../../bus/pci/drivers/%s", driver);
        ck_assert_int_eq(symlink(target, path), 0);
    }
}

static void remove_tree(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sysfs);
    ck_assert_int_eq(system(cmd), 0);
}

static void make_sysfs(void)
{
    snprintf(sysfs, sizeof sysfs, "/tmp/kiln-sysfs-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(sysfs));
    char path[512];
    snprintf(path, sizeof path, "%s/bus", sysfs);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/bus/pci", sysfs);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/bus/pci/devices", sysfs);
    ck_assert_int_eq(mkdir(path, 0700), 0);
}

START_TEST(pci_nvidia_nouveau)
{
    make_sysfs();
    fake_pci("0000:01:00.0", "0x030000", "0x10de", "nouveau");
    fake_pci("0000:02:00.0", "0x020000", "0x8086", "e1000e"); /* a network card: ignored */
    setenv("KILN_SYSFS_ROOT", sysfs, 1);
    if (!hide_gpus("pci_nvidia_nouveau")) {
        remove_tree();
        restore();
        return;
    }
    kiln__registry_reset();
    ck_assert(!kiln_is_available(KILN_DEVICE_GPU));
    const char *why = kiln_unavailable_reason(KILN_DEVICE_GPU);
    ck_assert_has(why, "an NVIDIA GPU is on the PCI bus (0000:01:00.0, driver nouveau)");
    ck_assert_has(why, "no OpenCL platform shows it");
    ck_assert_has(why, "Nouveau");
    ck_assert_has(why, "nvidia-opencl-icd");
    ck_assert_msg(strstr(why, "0000:02:00.0") == NULL, "network card listed: %s", why);
    ck_assert_has(kiln_auto_reason(), "Nouveau");
    kiln_device *dev;
    ck_assert_int_eq(kiln_device_get("cuda:0", &dev), KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("Nouveau");
    remove_tree();
    restore();
}
END_TEST

START_TEST(pci_nvidia_no_icd_and_amd)
{
    make_sysfs();
    fake_pci("0000:01:00.0", "0x030200", "0x10de", "nvidia"); /* 3D controller class */
    fake_pci("0000:03:00.0", "0x030000", "0x1002", NULL);
    setenv("KILN_SYSFS_ROOT", sysfs, 1);
    setenv("KILN_TEST_NVIDIA_OPENCL_LIB", "/nonexistent/libnvidia-opencl.so.1", 1);
    if (!hide_gpus("pci_nvidia_no_icd_and_amd")) {
        remove_tree();
        restore();
        return;
    }
    kiln__registry_reset();
    const char *why = kiln_unavailable_reason(KILN_DEVICE_GPU);
    ck_assert_has(why, "driver nvidia");
    ck_assert_has(why, "nvidia.icd");
    ck_assert_has(why, "an AMD GPU is on the PCI bus (0000:03:00.0, driver none)");
    ck_assert_has(why, "rocm-opencl-icd");
    remove_tree();
    restore();
}
END_TEST

/* An NVIDIA GPU bound to the nvidia driver, and no OpenCL platform (so that "why is there no
 * GPU" is asked in every configuration, -gpuonly and a real GPU machine included: a GPU hidden
 * by KILN_VISIBLE_DEVICES is reported as hidden, rightly, before any PCI diagnosis). lib: what
 * KILN_TEST_NVIDIA_OPENCL_LIB names, the library whose loading kiln tries; platforms: the
 * clGetPlatformIDs to use instead (NULL: no_platforms). */
typedef cl_int(CL_API_CALL *platform_ids_fn)(cl_uint, cl_platform_id *, cl_uint *);
static void nvidia_gpu_without_opencl(const char *lib, platform_ids_fn platforms)
{
    make_sysfs();
    fake_pci("0000:01:00.0", "0x030200", "0x10de", "nvidia");
    setenv("KILN_SYSFS_ROOT", sysfs, 1);
    setenv("KILN_TEST_NVIDIA_OPENCL_LIB", lib, 1);
    kiln__cl.GetPlatformIDs = platforms ? platforms : no_platforms;
    kiln__registry_reset();
    ck_assert(!kiln_is_available(KILN_DEVICE_GPU));
}

/* The fake libnvidia-opencl.so.1 that tests/meson.build builds. */
static const char *fake_nvidia_lib(void)
{
    static char path[1024];
    const char *build = getenv("KILN_TEST_BUILDDIR");
    ck_assert_ptr_nonnull(build);
    snprintf(path, sizeof path, "%s/tests/libfake-nvidia-opencl.so", build);
    ck_assert_msg(access(path, R_OK) == 0, "%s is not built", path);
    return path;
}

/* The driver and its OpenCL library are there, only the ICD file is missing: the one-line fix. */
START_TEST(pci_nvidia_icd_file_missing)
{
    nvidia_gpu_without_opencl(fake_nvidia_lib(), NULL);
    const char *why = kiln_unavailable_reason(KILN_DEVICE_GPU);
    ck_assert_has(why, "an NVIDIA GPU is on the PCI bus (0000:01:00.0, driver nvidia)");
    ck_assert_has(why, "libnvidia-opencl.so.1 loads");
    ck_assert_has(why, "no OpenCL platform shows it");
    ck_assert_has(why, "echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd");
    ck_assert_msg(strstr(why, "nvidia-opencl-icd") == NULL, "asks to install: %s", why);
    /* auto would take a CPU device too: its driver is named, NVIDIA's install advice is not
     * (seen on an H200 machine whose only driver is NVIDIA's, with no ICD file) */
    const char *any = kiln_unavailable_reason(KILN_DEVICE_ALL);
    ck_assert_has(any, "pocl-opencl-icd");
    ck_assert_has(any, "echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd");
    ck_assert_msg(strstr(any, "nvidia-opencl-icd") == NULL, "asks to install: %s", any);
    /* -oclgrind and -gpuonly set OCL_ICD_VENDORS: the loader then ignores /etc/OpenCL/vendors */
    const char *vendors = getenv("OCL_ICD_VENDORS");
    if (vendors && *vendors)
        ck_assert_has(why, "OCL_ICD_VENDORS='");
    else
        ck_assert_msg(strstr(why, "OCL_ICD_VENDORS='") == NULL, "%s", why);
    kiln_device *dev;
    ck_assert_int_eq(kiln_device_get("cuda:0", &dev), KILN_ERR_NO_PLATFORM);
    ASSERT_ERROR_HAS("echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd");
    remove_tree();
    restore();
}
END_TEST

/* The driver is there but its OpenCL library is not: install that. */
START_TEST(pci_nvidia_opencl_library_missing)
{
    nvidia_gpu_without_opencl("/nonexistent/libnvidia-opencl.so.1", NULL);
    const char *why = kiln_unavailable_reason(KILN_DEVICE_GPU);
    ck_assert_has(why, "an NVIDIA GPU is on the PCI bus (0000:01:00.0, driver nvidia)");
    ck_assert_has(why, "the driver's OpenCL part is missing");
    ck_assert_has(why, "libnvidia-opencl.so.1 does not load");
    ck_assert_has(why, "nvidia-opencl-icd");
    ck_assert_msg(strstr(why, "echo libnvidia-opencl.so.1") == NULL, "gives the ICD fix: %s", why);
    remove_tree();
    restore();
}
END_TEST

/* A fake "NVIDIA CUDA" platform, alone (the real ones hidden: on a GPU machine a real NVIDIA
 * platform would answer), whose clGetDeviceIDs finds no device. */
static char fake_nvidia_tag;
#define FAKE_NVIDIA ((cl_platform_id)&fake_nvidia_tag)

static cl_int CL_API_CALL only_fake_nvidia(cl_uint n, cl_platform_id *ids, cl_uint *count)
{
    if (ids && n > 0)
        ids[0] = FAKE_NVIDIA;
    if (count)
        *count = 1;
    return CL_SUCCESS;
}

static cl_int CL_API_CALL nvidia_platform_info(cl_platform_id p, cl_platform_info what, size_t size,
                                               void *value, size_t *ret)
{
    if (p != FAKE_NVIDIA)
        return clGetPlatformInfo(p, what, size, value, ret);
    const char *v = what == CL_PLATFORM_NAME      ? "NVIDIA CUDA"
                    : what == CL_PLATFORM_VENDOR  ? "NVIDIA Corporation"
                    : what == CL_PLATFORM_VERSION ? "OpenCL 3.0 CUDA 12.4.131"
                                                  : "";
    if (ret)
        *ret = strlen(v) + 1;
    if (value) {
        if (size < strlen(v) + 1)
            return CL_INVALID_VALUE;
        memcpy(value, v, strlen(v) + 1);
    }
    return CL_SUCCESS;
}

static cl_int CL_API_CALL nvidia_no_devices(cl_platform_id p, cl_device_type t, cl_uint n,
                                            cl_device_id *ids, cl_uint *count)
{
    if (p != FAKE_NVIDIA)
        return clGetDeviceIDs(p, t, n, ids, count);
    if (count)
        *count = 0;
    return CL_DEVICE_NOT_FOUND;
}

/* NVIDIA's platform is installed but lists no device: CUDA_VISIBLE_DEVICES or /dev/nvidia-uvm,
 * not a missing ICD. */
START_TEST(pci_nvidia_platform_without_devices)
{
    kiln__cl.GetPlatformInfo = nvidia_platform_info;
    kiln__cl.GetDeviceIDs = nvidia_no_devices;
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    nvidia_gpu_without_opencl(fake_nvidia_lib(), only_fake_nvidia);
    ck_assert_has(kiln_device_notes(), "(NVIDIA CUDA) has no devices");
    const char *why = kiln_unavailable_reason(KILN_DEVICE_GPU);
    ck_assert_has(why, "an NVIDIA GPU is on the PCI bus (0000:01:00.0, driver nvidia)");
    ck_assert_has(why, "NVIDIA's OpenCL platform (NVIDIA CUDA) lists no device");
    ck_assert_has(why, "CUDA_VISIBLE_DEVICES");
    ck_assert_has(why, "'' here");
    ck_assert_has(why, "/dev/nvidia-uvm");
    ck_assert_msg(strstr(why, "no OpenCL platform shows it") == NULL, "%s", why);
    ck_assert_msg(strstr(why, "echo libnvidia-opencl.so.1") == NULL, "gives the ICD fix: %s", why);
    /* unset, CUDA_VISIBLE_DEVICES is named as a cause that does not apply here */
    unsetenv("CUDA_VISIBLE_DEVICES");
    kiln__registry_reset();
    why = kiln_unavailable_reason(KILN_DEVICE_GPU);
    ck_assert_has(why, "lists no device");
    ck_assert_has(why, "CUDA_VISIBLE_DEVICES is not set here");
    /* no GPU found on the bus (no sysfs in a container, say): the platform is still explained */
    remove_tree();
    make_sysfs();
    setenv("KILN_SYSFS_ROOT", sysfs, 1);
    kiln__registry_reset();
    why = kiln_unavailable_reason(KILN_DEVICE_GPU);
    ck_assert_has(why, "NVIDIA's OpenCL platform (NVIDIA CUDA) lists no device");
    ck_assert_msg(strstr(why, "PCI bus") == NULL, "%s", why);
    remove_tree();
    restore();
}
END_TEST

/* ---- separate processes: KILN_TEST_REGISTRY=no-platform / no-device ---- */

START_TEST(no_platform_process)
{
    ck_assert_int_eq(ndirect_platforms, 0);
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), 0);
    ck_assert(!kiln_is_available(KILN_DEVICE_GPU));
    ck_assert(!kiln_is_available(KILN_DEVICE_CPU));
    ck_assert_ptr_null(kiln_device_at(0));
    kiln_device *dev = (kiln_device *)1;
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_ERR_NO_PLATFORM);
    ck_assert_ptr_null(dev);
    ASSERT_ERROR_HAS("no OpenCL platform found");
    ASSERT_ERROR_HAS("pocl-opencl-icd");
    ASSERT_ERROR_HAS("nvidia-opencl-icd");
    ck_assert_int_eq(kiln_device_get("gpu:0", &dev), KILN_ERR_NO_PLATFORM);
    ck_assert_int_eq(kiln_device_get("gpu:zero", &dev), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_has(kiln_unavailable_reason(KILN_DEVICE_GPU), "no OpenCL platform found");
    ck_assert_has(kiln_unavailable_reason(KILN_DEVICE_ALL), "pocl-opencl-icd");
    ck_assert_str_eq(kiln_auto_reason(), "");
    ck_assert_int_eq(kiln_device_synchronize(NULL), KILN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(no_device_process)
{
    ck_assert_int_ge(ndirect_platforms, 1);
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), direct_count(KILN_DEVICE_ALL));
    ck_assert_int_eq(kiln_device_count(KILN_DEVICE_ALL), 0);
    ck_assert_has(kiln_device_notes(), "has no devices");
    kiln_device *dev = (kiln_device *)1;
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_ERR_NO_DEVICE);
    ck_assert_ptr_null(dev);
    ASSERT_ERROR_HAS("available: none");
    ASSERT_ERROR_HAS("0 device(s)");
    ck_assert_has(kiln_unavailable_reason(KILN_DEVICE_CPU), "no OpenCL platform has a cpu device");
    ck_assert_str_eq(kiln_auto_reason(), "");
}
END_TEST

Suite *registry_suite(void)
{
    Suite *s = suite_create("registry");
    /* The expectations are for the machine as it is, whatever the caller's shell sets. */
    unsetenv("KILN_DEVICE");
    unsetenv("KILN_VISIBLE_DEVICES");
    unsetenv("KILN_SYSFS_ROOT");
    direct_enumerate();
    const char *only = getenv("KILN_TEST_REGISTRY");
    TCase *tc;
    if (only && strcmp(only, "no-platform") == 0) {
        tc = tcase_create("no-platform");
        tcase_add_test(tc, no_platform_process);
        suite_add_tcase(s, tc);
        return s;
    }
    if (only && strcmp(only, "no-device") == 0) {
        tc = tcase_create("no-device");
        tcase_add_test(tc, no_device_process);
        suite_add_tcase(s, tc);
        return s;
    }
    tc = tcase_create("first-use");
    tcase_add_test(tc, threads_first_use);
    suite_add_tcase(s, tc);

    tc = tcase_create("real");
    tcase_add_test(tc, counts_match_opencl);
    tcase_add_test(tc, listing_order_and_specs);
    tcase_add_test(tc, info_matches_opencl);
    tcase_add_test(tc, two_pocl_devices);
    tcase_add_test(tc, oclgrind_is_gpu0);
    tcase_add_test(tc, gpu_unavailable_explained);
    tcase_add_test(tc, available_reasons_empty);
    tcase_add_test(tc, null_and_forged_arguments);
    tcase_add_test(tc, synchronize_and_raw_handles);
    suite_add_tcase(s, tc);

    tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, NULL, restore);
    tcase_add_test(tc, fault_no_platform);
    tcase_add_test(tc, fault_platform_skipped);
    tcase_add_test(tc, fault_device_query_skipped);
    tcase_add_test(tc, fault_device_without_compiler);
    tcase_add_test(tc, fault_context_transient);
    tcase_add_test(tc, fault_queue_transient);
    tcase_add_test(tc, fault_each_query);
    suite_add_tcase(s, tc);

    tc = tcase_create("environment");
    tcase_add_checked_fixture(tc, NULL, restore);
    tcase_add_test(tc, env_visible_cpu1);
    tcase_add_test(tc, env_visible_empty_and_bad);
    tcase_add_test(tc, env_kiln_device);
    tcase_add_test(tc, pci_nvidia_nouveau);
    tcase_add_test(tc, pci_nvidia_no_icd_and_amd);
    tcase_add_test(tc, pci_nvidia_icd_file_missing);
    tcase_add_test(tc, pci_nvidia_opencl_library_missing);
    tcase_add_test(tc, pci_nvidia_platform_without_devices);
    suite_add_tcase(s, tc);
    return s;
}
