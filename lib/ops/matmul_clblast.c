/* matmul_clblast.c - the "clblast" matmul path: CLBlast's tuned GEMM on the device queue, the
 * choice for GPUs. Where CLBlast fails, the device falls back to the built-in kernel for good
 * (unless KILN_MATMUL forced CLBlast); the first call of each CLBlast routine on a device, which
 * compiles its kernels, runs with stdout captured into the kiln log.
 *
 * What CLBlast 1.5.3 prints: on stdout, the compiler's build log whenever a kernel fails to
 * build ("OpenCL compiler error/warning:", src/utilities/compile.cpp), its pre-processor's
 * complaints (ARM GPUs only) and, in VERBOSE builds, "[DEBUG]" lines around each compile and
 * launch; on stderr, one "CLBlast: <error>" line for any error. Only the first call of a routine
 * (per context, device and precision) compiles, so only that call is captured. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../clcall.h"
#include "../profiler.h"
#include "../queue.h"
#include "../registry.h"
#include "../status.h"
#include "../tensor.h"
#include "matmul.h"

/* CLBlast's own codes for a device without fp64 / fp16 (clblast_c.h, CLBlastNo*Precision). */
#define CLBLAST_NO_DOUBLE (-2044)
#define CLBLAST_NO_HALF (-2045)

bool kiln__matmul_clblast_any_device;

/* clblast_c.h's CLBlastStatusCode, 1.5.3. */
static const struct {
    int code;
    const char *name;
} status_names[] = {
    {-3, "CLBlastOpenCLCompilerNotAvailable"},
    {-4, "CLBlastTempBufferAllocFailure"},
    {-5, "CLBlastOpenCLOutOfResources"},
    {-6, "CLBlastOpenCLOutOfHostMemory"},
    {-11, "CLBlastOpenCLBuildProgramFailure"},
    {-30, "CLBlastInvalidValue"},
    {-36, "CLBlastInvalidCommandQueue"},
    {-38, "CLBlastInvalidMemObject"},
    {-42, "CLBlastInvalidBinary"},
    {-43, "CLBlastInvalidBuildOptions"},
    {-44, "CLBlastInvalidProgram"},
    {-45, "CLBlastInvalidProgramExecutable"},
    {-46, "CLBlastInvalidKernelName"},
    {-47, "CLBlastInvalidKernelDefinition"},
    {-48, "CLBlastInvalidKernel"},
    {-49, "CLBlastInvalidArgIndex"},
    {-50, "CLBlastInvalidArgValue"},
    {-51, "CLBlastInvalidArgSize"},
    {-52, "CLBlastInvalidKernelArgs"},
    {-53, "CLBlastInvalidLocalNumDimensions"},
    {-54, "CLBlastInvalidLocalThreadsTotal"},
    {-55, "CLBlastInvalidLocalThreadsDim"},
    {-56, "CLBlastInvalidGlobalOffset"},
    {-57, "CLBlastInvalidEventWaitList"},
    {-58, "CLBlastInvalidEvent"},
    {-59, "CLBlastInvalidOperation"},
    {-61, "CLBlastInvalidBufferSize"},
    {-63, "CLBlastInvalidGlobalWorkSize"},
    {-1024, "CLBlastNotImplemented"},
    {-1022, "CLBlastInvalidMatrixA"},
    {-1021, "CLBlastInvalidMatrixB"},
    {-1020, "CLBlastInvalidMatrixC"},
    {-1019, "CLBlastInvalidVectorX"},
    {-1018, "CLBlastInvalidVectorY"},
    {-1017, "CLBlastInvalidDimension"},
    {-1016, "CLBlastInvalidLeadDimA"},
    {-1015, "CLBlastInvalidLeadDimB"},
    {-1014, "CLBlastInvalidLeadDimC"},
    {-1013, "CLBlastInvalidIncrementX"},
    {-1012, "CLBlastInvalidIncrementY"},
    {-1011, "CLBlastInsufficientMemoryA"},
    {-1010, "CLBlastInsufficientMemoryB"},
    {-1009, "CLBlastInsufficientMemoryC"},
    {-1008, "CLBlastInsufficientMemoryX"},
    {-1007, "CLBlastInsufficientMemoryY"},
    {-2050, "CLBlastInsufficientMemoryTemp"},
    {-2049, "CLBlastInvalidBatchCount"},
    {-2048, "CLBlastInvalidOverrideKernel"},
    {-2047, "CLBlastMissingOverrideParameter"},
    {-2046, "CLBlastInvalidLocalMemUsage"},
    {-2045, "CLBlastNoHalfPrecision"},
    {-2044, "CLBlastNoDoublePrecision"},
    {-2043, "CLBlastInvalidVectorScalar"},
    {-2042, "CLBlastInsufficientMemoryScalar"},
    {-2041, "CLBlastDatabaseError"},
    {-2040, "CLBlastUnknownError"},
    {-2039, "CLBlastUnexpectedError"},
};

const char *kiln__clblast_status_name(int code)
{
    for (size_t i = 0; i < sizeof status_names / sizeof status_names[0]; i++)
        if (status_names[i].code == code)
            return status_names[i].name;
    return "CLBlastUnknownStatus";
}

/* CL_MEM_OBJECT_ALLOCATION_FAILURE / CL_OUT_OF_RESOURCES from CLBlast's enqueues: a kernel
 * fault, as anywhere on the queue. */
static bool is_kernel_fault(int code)
{
    return code == CL_OUT_OF_RESOURCES || code == CL_MEM_OBJECT_ALLOCATION_FAILURE;
}

/* CLBlast's checks of its arguments (sizes, leading dimensions, buffer sizes, batch count) and
 * of the precision: kiln checks all of these before calling CLBlast (RELIABILITY.md B6), so
 * CLBlast reporting one is a kiln bug, which a fallback must not hide. */
static bool is_argument_error(int code)
{
    return (code <= -1007 && code >= -1022) || code == -2050 || code == -2049 || code == -2043 ||
           code == -2042 || code == CLBLAST_NO_DOUBLE || code == CLBLAST_NO_HALF;
}

kiln_status kiln__clblast_status(int code, kiln_device *dev, const char *fn)
{
    if (code == 0)
        return KILN_OK;
    if (is_kernel_fault(code))
        return kiln__queue_fail((cl_int)code, "kiln_matmul", fn, dev);
    const char *name = kiln__clblast_status_name(code);
    if (code == CLBLAST_NO_DOUBLE || code == CLBLAST_NO_HALF)
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "kiln_matmul: %s failed with %s (%d): %s lacks %s precision; use f32",
                           fn, name, code, kiln__device_label(dev),
                           code == CLBLAST_NO_DOUBLE ? "double" : "half");
    if (is_argument_error(code))
        return kiln__error(KILN_ERR_OPENCL,
                           "kiln_matmul: %s failed with %s (%d) on %s: CLBlast rejected "
                           "arguments kiln had checked (a kiln bug: please report it); "
                           "KILN_MATMUL=builtin avoids CLBlast",
                           fn, name, code, kiln__device_label(dev));
    return kiln__error(code > -1000 ? kiln__cl_status((cl_int)code) : KILN_ERR_OPENCL,
                       "kiln_matmul: %s failed with %s (%d) on %s; unset KILN_MATMUL to let "
                       "kiln fall back to the built-in kernel, or set KILN_MATMUL=builtin",
                       fn, name, code, kiln__device_label(dev));
}

const char *kiln__clblast_fallback_reason(kiln_device *dev)
{
    return atomic_load(&dev->clblast_failed) ? dev->clblast_reason : NULL;
}

void kiln__clblast_reset(kiln_device *dev)
{
    atomic_store(&dev->clblast_failed, false);
    atomic_store(&dev->clblast_warm, 0u);
}

#ifdef KILN_HAVE_CLBLAST

#include <clblast_c.h>

_Static_assert(CLBlastNoDoublePrecision == CLBLAST_NO_DOUBLE &&
                   CLBlastNoHalfPrecision == CLBLAST_NO_HALF,
               "CLBlast's precision status codes changed");

/* Serialises fallbacks (one log line per device) and captured first calls (fd 1 is the
 * process's). */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;

/* Leave CLBlast on dev for good: record why and log it once. */
static void fall_back(kiln_device *dev, int code, const char *fn)
{
    pthread_mutex_lock(&clblast_lock);
    bool first = !atomic_load(&dev->clblast_failed);
    if (first) {
        snprintf(dev->clblast_reason, sizeof dev->clblast_reason,
                 "CLBlast failed with %s (%d) in %s; matmul uses the built-in kernel from now on",
                 kiln__clblast_status_name(code), code, fn);
        atomic_store(&dev->clblast_failed, true);
    }
    pthread_mutex_unlock(&clblast_lock);
    if (first)
        kiln__log(KILN_LOG_INFO,
                  "%s: CLBlast failed with %s (%d); matmul uses the built-in kernel "
                  "from now on",
                  dev->info.spec, kiln__clblast_status_name(code), code);
}

static CLBlastTranspose trans(bool t)
{
    return t ? CLBlastTransposeYes : CLBlastTransposeNo;
}

static CLBlastStatusCode gemm(const kiln__matmul_problem *p, cl_command_queue *q, cl_event *ev,
                              const char **fn)
{
    size_t m = (size_t)p->m, n = (size_t)p->n, k = (size_t)p->k;
    size_t lda = p->trans_a ? m : k, ldb = p->trans_b ? k : n, ldc = n;
    cl_mem a = p->a->storage->mem, b = p->b->storage->mem, c = p->c->storage->mem;
    CLBlastTranspose ta = trans(p->trans_a), tb = trans(p->trans_b);
    if (p->batch == 1) {
        *fn = p->dtype == KILN_F32 ? "CLBlastSgemm" : "CLBlastDgemm";
        if (p->dtype == KILN_F32)
            return CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0f, a, 0, lda, b, 0, ldb,
                                0.0f, c, 0, ldc, q, ev);
        return CLBlastDgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0, a, 0, lda, b, 0, ldb, 0.0,
                            c, 0, ldc, q, ev);
    }
    size_t sa = (size_t)p->stride_a, sb = (size_t)p->stride_b, sc = (size_t)p->stride_c;
    size_t batch = (size_t)p->batch;
    *fn = p->dtype == KILN_F32 ? "CLBlastSgemmStridedBatched" : "CLBlastDgemmStridedBatched";
    if (p->dtype == KILN_F32)
        return CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0f, a, 0, lda,
                                          sa, b, 0, ldb, sb, 0.0f, c, 0, ldc, sc, batch, q, ev);
    return CLBlastDgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0, a, 0, lda, sa, b,
                                      0, ldb, sb, 0.0, c, 0, ldc, sc, batch, q, ev);
}

static int gemm_on_queue(const kiln__matmul_problem *p, const char **fn)
{
    cl_command_queue q = kiln__queue(p->dev);
    cl_event ev = NULL;
    uint64_t t0 = kiln__profiling() ? kiln__now_ns() : 0;
    CLBlastStatusCode code = gemm(p, &q, &ev, fn);
    if (t0 && code == CLBlastSuccess) /* CLBlast enqueues past kiln's table */
        kiln__profiler_enqueued(q, ev, t0, "kiln_matmul", *fn);
    if (ev)
        kiln__cl.ReleaseEvent(ev);
    return (int)code;
}

int (*kiln__clblast_gemm)(const kiln__matmul_problem *p, const char **fn) = gemm_on_queue;
int (*const kiln__clblast_gemm_real)(const kiln__matmul_problem *p,
                                     const char **fn) = gemm_on_queue;

/* The routine's bit in dev->clblast_warm: CLBlast compiles per precision and per routine
 * (GEMM and GEMMSTRIDEDBATCHED). */
static unsigned routine_bit(const kiln__matmul_problem *p)
{
    return 1u << ((p->dtype == KILN_F64 ? 2 : 0) + (p->batch > 1 ? 1 : 0));
}

/* Log what CLBlast printed (info when the call failed, else debug): the first lines, then how
 * many more (a failed build's log runs to thousands). */
static void log_captured(FILE *f, const kiln_device *dev, int code)
{
    enum { MAX_LINES = 20 };
    int level = code ? KILN_LOG_INFO : KILN_LOG_DEBUG, lines = 0;
    char line[512];
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] && ++lines <= MAX_LINES)
            kiln__log(level, "%s: CLBlast printed: %s", dev->info.spec, line);
    }
    if (lines > MAX_LINES)
        kiln__log(level, "%s: CLBlast printed %d more lines", dev->info.spec, lines - MAX_LINES);
}

/* The CLBlast call with fd 1 pointing at a temporary file (or /dev/null); caller holds
 * clblast_lock. Another thread's stdout in the meantime goes to the log too. */
static int gemm_captured(const kiln__matmul_problem *p, const char **fn)
{
    fflush(stdout);
    FILE *tmp = tmpfile();
    int target = tmp ? fileno(tmp) : open("/dev/null", O_WRONLY | O_CLOEXEC);
    int saved = target >= 0 ? fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0) : -1;
    bool redirected = saved >= 0 && dup2(target, STDOUT_FILENO) >= 0;
    int code = kiln__clblast_gemm(p, fn);
    if (redirected) {
        fflush(stdout);
        dup2(saved, STDOUT_FILENO);
    }
    if (saved >= 0)
        close(saved);
    if (tmp) {
        log_captured(tmp, p->dev, code);
        fclose(tmp);
    } else if (target >= 0) {
        close(target);
    }
    return code;
}

/* The CLBlast call; a routine's first call on the device (until one succeeds) is captured. */
static int gemm_quietly(const kiln__matmul_problem *p, const char **fn)
{
    kiln_device *dev = p->dev;
    unsigned bit = routine_bit(p);
    if (atomic_load(&dev->clblast_warm) & bit)
        return kiln__clblast_gemm(p, fn);
    pthread_mutex_lock(&clblast_lock);
    int code;
    if (atomic_load(&dev->clblast_warm) & bit) {
        code = kiln__clblast_gemm(p, fn);
    } else {
        code = gemm_captured(p, fn);
        if (code == 0)
            atomic_fetch_or(&dev->clblast_warm, bit);
    }
    pthread_mutex_unlock(&clblast_lock);
    return code;
}

static kiln_status clblast_run(const kiln__matmul_problem *p)
{
    const char *fn = "CLBlastSgemm";
    int code = gemm_quietly(p, &fn);
    if (code == 0)
        return KILN_OK;
    if (p->forced || is_kernel_fault(code) || is_argument_error(code))
        return kiln__clblast_status(code, p->dev, fn);
    fall_back(p->dev, code, fn);
    return kiln__matmul_builtin.run(p);
}

static bool clblast_available(kiln_device *dev, char *why, size_t size)
{
    (void)dev;
    (void)why;
    (void)size;
    return true;
}

const kiln__matmul_path kiln__matmul_clblast = {"clblast", clblast_available, clblast_run, NULL};

#else

int (*kiln__clblast_gemm)(const kiln__matmul_problem *p, const char **fn) = NULL;
int (*const kiln__clblast_gemm_real)(const kiln__matmul_problem *p, const char **fn) = NULL;

const kiln__matmul_path kiln__matmul_clblast = {
    "clblast", NULL, NULL,
    "kiln was built without CLBlast (install libclblast-dev and reconfigure)"};

#endif
