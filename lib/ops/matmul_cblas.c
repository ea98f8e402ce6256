/* matmul_cblas.c - the "cblas" matmul path: a host BLAS (OpenBLAS) on the tensors' own memory,
 * for CPU devices whose memory is the host's, kept in order with the device queue. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../alloc.h"
#include "../clcall.h"
#include "../halfconv.h"
#include "../hostpool.h"
#include "../memory.h"
#include "../profiler.h"
#include "../queue.h"
#include "../registry.h"
#include "../status.h"
#include "../tensor.h"
#include "matmul.h"

bool kiln__matmul_cblas_no_native = false;
bool kiln__matmul_cblas_always_map = false;
int kiln__matmul_cblas_parts = 0;

#ifdef KILN_HAVE_CBLAS

#include <cblas.h>
#include <pthread.h>

/* What the GEMM needs: host pointers to the mapped buffers, dims and batch strides. For f16 and
 * bf16, scratch holds f32 copies of A, B and C (na, nb and nc elements, allocated by the
 * enqueuing thread so that running out of memory is an error there; freed by gemm). */
typedef struct cblas_job {
    void *a, *b, *c;
    float *scratch;
    size_t na, nb, nc;
    kiln_dtype dtype;
    bool trans_a, trans_b;
    int m, n, k;
    int64_t batch, stride_a, stride_b, stride_c;
} cblas_job;

/* One GEMM at a time: several devices' worker threads (or the map fallback on the host
 * thread) may call at once, and kiln does not rely on the BLAS build being reentrant. */
static pthread_mutex_t gemm_lock = PTHREAD_MUTEX_INITIALIZER;
static bool pool_stop_registered; /* under gemm_lock: kiln__host_pool_stop joins at exit */

/* OpenBLAS's NT kernels are up to 2x slower than NN on small B (a Linear layer's x @ W^T with
 * W [out, in]: measured 25 vs 13 us for 256x128x16): below this many elements of B, B^T is
 * copied out and the product runs as NN. */
enum { SMALL_B_ELEMS = 1 << 16 };

/* B^T of one [n, k] row-major matrix into out ([k, n]); NULL when not worth it or no memory. */
static void *transposed_b(const cblas_job *j)
{
    if (!j->trans_b || j->batch != 1 || (int64_t)j->n * j->k > SMALL_B_ELEMS)
        return NULL;
    size_t es = j->dtype == KILN_F32 ? sizeof(float) : sizeof(double);
    unsigned char *out = kiln__malloc((size_t)j->n * (size_t)j->k * es);
    if (!out)
        return NULL; /* the NT product still works */
    const unsigned char *b = j->b;
    for (int r = 0; r < j->n; r++)
        for (int c = 0; c < j->k; c++)
            memcpy(out + ((size_t)c * (size_t)j->n + (size_t)r) * es,
                   b + ((size_t)r * (size_t)j->k + (size_t)c) * es, es);
    return out;
}

static void gemm_f32_or_f64(const cblas_job *j);

/* f16 and bf16: OpenBLAS (as Debian builds it) has no 16-bit GEMM, so A and B are converted to
 * f32, multiplied with f32 accumulation, and the product rounded once (as the built-in kernel
 * computes). */
static void gemm_half(const cblas_job *j)
{
    float *a = j->scratch, *b = a + j->na, *c = b + j->nb;
    bool bf16 = j->dtype == KILN_BF16;
    (bf16 ? kiln__bf16_to_f32_n : kiln__f16_to_f32_n)(j->a, a, j->na);
    (bf16 ? kiln__bf16_to_f32_n : kiln__f16_to_f32_n)(j->b, b, j->nb);
    cblas_job f = *j;
    f.a = a;
    f.b = b;
    f.c = c;
    f.dtype = KILN_F32;
    gemm_f32_or_f64(&f);
    (bf16 ? kiln__f32_to_bf16_n : kiln__f32_to_f16_n)(c, j->c, j->nc);
    free(j->scratch);
}

static void gemm(const cblas_job *j)
{
    if (j->dtype == KILN_F16 || j->dtype == KILN_BF16)
        gemm_half(j);
    else
        gemm_f32_or_f64(j);
}

/* Product i of the batch. */
static void gemm_one(const cblas_job *j, const void *b, bool trans_b, int64_t i)
{
    enum CBLAS_TRANSPOSE ta = j->trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    int lda = j->trans_a ? j->m : j->k, ldb = trans_b ? j->k : j->n, ldc = j->n;
    if (j->dtype == KILN_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, j->m, j->n, j->k, 1.0f,
                    (const float *)j->a + i * j->stride_a, lda, (const float *)b + i * j->stride_b,
                    ldb, 0.0f, (float *)j->c + i * j->stride_c, ldc);
    else
        cblas_dgemm(CblasRowMajor, ta, tb, j->m, j->n, j->k, 1.0,
                    (const double *)j->a + i * j->stride_a, lda,
                    (const double *)b + i * j->stride_b, ldb, 0.0, (double *)j->c + i * j->stride_c,
                    ldc);
}

typedef struct gemm_parts {
    const cblas_job *j;
    const void *b;
    bool trans_b;
} gemm_parts;

/* Part `part` of `parts`: a run of whole products of the batch. */
static void gemm_part(void *ctx, int part, int parts)
{
    const gemm_parts *g = ctx;
    int64_t batch = g->j->batch;
    for (int64_t i = batch * part / parts; i < batch * (part + 1) / parts; i++)
        gemm_one(g->j, g->b, g->trans_b, i);
}

/* Products of fewer multiply-adds than this run on one OpenBLAS thread: waking its threads
 * costs more than they save there, and they compete with the device's own worker threads
 * (measured: a 50-step LSTM forward at batch 32, hidden 128, whose per-step products are
 * 32 x 512 x 128, went from about 20 to 13 ms with OPENBLAS_NUM_THREADS=1; issue 27). */
enum { SMALL_GEMM_MACS = 1 << 22 };

/* How a product of the batch is run: SMALL ones on one OpenBLAS thread; a batch that splits
 * evenly enough into one run of whole products per thread (BATCH_PARTS: each part within a
 * quarter of an equal share) on kiln's host pool, each part on one OpenBLAS thread; anything
 * else on OpenBLAS's own threads, product by product.
 * Why the pool for batches: a 1x1 convolution's 32 products of [128, 64] x [64, 784] took
 * 3.4-4.8 ms with OpenBLAS splitting each one and 2.0-2.8 ms as two runs of 16, and OpenBLAS's
 * threads spin for about 0.1 s after each multithreaded call (2^28 cycles, fixed when the
 * library loads): the bias add after that product ran at half speed beside them (2.8-3.7 ms
 * against 1.4-2.5 after the pool, whose threads sleep after 1 ms). Why not the pool for one
 * large product, split in bands of columns: measured slower than OpenBLAS's own threads, which
 * share their packed panels (square products 2-15%, a 3x3 convolution's chunked forward and a
 * small LSTM's backward 10-20%). */
typedef enum gemm_plan { SMALL, BATCH_PARTS, BLAS_THREADS } gemm_plan;

static gemm_plan plan_for(const cblas_job *j, int threads, int *parts)
{
    int64_t macs = (int64_t)j->m * j->n * j->k * j->batch;
    int64_t p = threads < KILN__HOST_POOL_MAX + 1 ? threads : KILN__HOST_POOL_MAX + 1;
    if (kiln__matmul_cblas_parts > 0) /* a test's count, whatever the size */
        p = kiln__matmul_cblas_parts;
    else if (macs < SMALL_GEMM_MACS || threads <= 1)
        return SMALL;
    if (p > j->batch)
        p = j->batch;
    int64_t most = (j->batch + p - 1) / p; /* products of the largest part */
    if (p > 1 && (kiln__matmul_cblas_parts > 0 || most * p * 4 <= j->batch * 5)) {
        *parts = (int)p;
        return BATCH_PARTS;
    }
    return kiln__matmul_cblas_parts > 0 ? SMALL : BLAS_THREADS;
}

static void gemm_f32_or_f64(const cblas_job *j)
{
    void *bt = transposed_b(j);
    gemm_parts g = {.j = j, .b = bt ? bt : j->b, .trans_b = j->trans_b && !bt};
    pthread_mutex_lock(&gemm_lock);
    /* OpenBLAS's thread count (OPENBLAS_NUM_THREADS, or what the program set) is the number of
     * parts; it is given back after a SMALL or BATCH_PARTS product ran on one thread */
    int threads = openblas_get_num_threads(), parts = 1;
    gemm_plan plan = plan_for(j, threads, &parts);
    if (plan != BLAS_THREADS && threads > 1)
        openblas_set_num_threads(1);
    if (plan == BATCH_PARTS && !pool_stop_registered) {
        pool_stop_registered = true;
        kiln__registry_on_exit(kiln__host_pool_stop);
    }
    kiln__host_parallel(parts, gemm_part, &g);
    if (plan != BLAS_THREADS && threads > 1)
        openblas_set_num_threads(threads);
    pthread_mutex_unlock(&gemm_lock);
    free(bt);
}

/* f32 copies of A, B and C for an f16 or bf16 product (see cblas_job); sets na, nb, nc. */
static kiln_status half_scratch(const kiln__matmul_problem *p, cblas_job *job)
{
    job->na = p->a->nbytes / 2;
    job->nb = p->b->nbytes / 2;
    job->nc = p->c->nbytes / 2;
    job->scratch = kiln__malloc((job->na + job->nb + job->nc) * sizeof(float));
    if (!job->scratch)
        return kiln__error(KILN_ERR_OUT_OF_MEMORY,
                           "kiln_matmul: out of host memory for the f32 copies of an %s product "
                           "(%zu elements)",
                           kiln_dtype_name(p->dtype), job->na + job->nb + job->nc);
    return KILN_OK;
}

static void CL_CALLBACK native_gemm(void *args)
{
    gemm(args);
}

static bool has_native_kernels(kiln_device *dev)
{
    cl_device_exec_capabilities caps = 0;
    cl_int err =
        kiln__cl.GetDeviceInfo(dev->id, CL_DEVICE_EXECUTION_CAPABILITIES, sizeof caps, &caps, NULL);
    return err == CL_SUCCESS && (caps & CL_EXEC_NATIVE_KERNEL);
}

/* Map one tensor; *ptr stays NULL on failure. */
static kiln_status map(const kiln__matmul_problem *p, const kiln_tensor *t, cl_bool blocking,
                       cl_map_flags flags, void **ptr)
{
    cl_int err = CL_SUCCESS;
    *ptr = kiln__cl.EnqueueMapBuffer(kiln__queue(p->dev), t->storage->mem, blocking, flags, 0,
                                     t->nbytes, 0, NULL, NULL, &err);
    if (!*ptr || err != CL_SUCCESS) {
        *ptr = NULL;
        return kiln__queue_fail(err != CL_SUCCESS ? err : CL_INVALID_VALUE, "kiln_matmul",
                                "clEnqueueMapBuffer", p->dev);
    }
    return KILN_OK;
}

/* The host memory behind t's buffer when kiln allocated it (memory.c's host-backed buffers on
 * CPU devices: CL_MEM_USE_HOST_PTR) and the device is known to run such buffers in place; else
 * NULL (the operand is mapped). */
static void *in_place_ptr(const kiln__matmul_problem *p, const kiln_tensor *t)
{
    if (kiln__matmul_cblas_always_map || !t->storage->pooled)
        return NULL;
    return kiln__mem_in_place(p->dev, t->storage->mem);
}

/* The GEMM on host pointers: kiln's own buffers where the device runs them in place (queue order
 * alone keeps the GEMM after the work that writes them and before the work that reads C; issue
 * 27: their maps and unmaps were 30 of the 51 OpenCL commands of a small training step), others
 * mapped (a map of kiln's own teaches memory.c whether the device runs them in place). With a
 * native kernel everything is enqueued (maps, GEMM, unmaps) and the host does not wait. The buffers
 * are not passed as the native kernel's memory objects because PoCL does not keep mem_list in order
 * (it sorts the buffers), so the host pointers could land in the wrong slots. Without native
 * kernels: blocking maps, the GEMM on this thread, unmaps. */
static kiln_status cblas_run(const kiln__matmul_problem *p)
{
    bool native = !kiln__matmul_cblas_no_native && has_native_kernels(p->dev);
    const kiln_tensor *ts[3] = {p->a, p->b, p->c};
    const cl_map_flags flags[3] = {CL_MAP_READ, CL_MAP_READ, CL_MAP_WRITE};
    void *ptrs[3] = {NULL, NULL, NULL};
    bool mapped[3] = {false, false, false};
    kiln_status s = KILN_OK;
    for (int i = 0; i < 3 && s == KILN_OK; i++) {
        if (native && (ptrs[i] = in_place_ptr(p, ts[i])) != NULL)
            continue;
        s = map(p, ts[i], native ? CL_FALSE : CL_TRUE, flags[i], &ptrs[i]);
        if (s == KILN_OK) {
            mapped[i] = true;
            if (ts[i]->storage->pooled)
                kiln__mem_learn_in_place(p->dev, ts[i]->storage->mem, ptrs[i]);
        }
    }
    if (s == KILN_OK) {
        cblas_job job = {
            .a = ptrs[0],
            .b = ptrs[1],
            .c = ptrs[2],
            .dtype = p->dtype,
            .trans_a = p->trans_a,
            .trans_b = p->trans_b,
            .m = (int)p->m,
            .n = (int)p->n,
            .k = (int)p->k,
            .batch = p->batch,
            .stride_a = p->stride_a,
            .stride_b = p->stride_b,
            .stride_c = p->stride_c,
        };
        if (p->dtype == KILN_F16 || p->dtype == KILN_BF16)
            s = half_scratch(p, &job);
        if (s != KILN_OK) {
            /* nothing enqueued past the maps */
        } else if (native) {
            kiln__prof_launch l;
            bool prof = kiln__profiling();
            if (prof)
                kiln__profiler_launch_push(&l, "kiln_matmul", "cblas_sgemm");
            cl_int err = kiln__cl.EnqueueNativeKernel(kiln__queue(p->dev), native_gemm, &job,
                                                      sizeof job, 0, NULL, NULL, 0, NULL, NULL);
            if (prof)
                kiln__profiler_launch_pop(&l);
            if (err != CL_SUCCESS) {
                free(job.scratch);
                s = kiln__queue_fail(err, "kiln_matmul", "clEnqueueNativeKernel", p->dev);
            }
        } else {
            gemm(&job);
        }
    }
    for (int i = 0; i < 3; i++) {
        if (!mapped[i])
            continue;
        cl_int err = kiln__cl.EnqueueUnmapMemObject(kiln__queue(p->dev), ts[i]->storage->mem,
                                                    ptrs[i], 0, NULL, NULL);
        if (err != CL_SUCCESS && s == KILN_OK)
            s = kiln__queue_fail(err, "kiln_matmul", "clEnqueueUnmapMemObject", p->dev);
    }
    return s;
}

static bool cblas_available(kiln_device *dev, char *why, size_t size)
{
    if (dev->info.type != KILN_DEVICE_CPU || !dev->info.unified_memory) {
        snprintf(why, size, "the host BLAS needs a CPU device whose memory is the host's");
        return false;
    }
    return true;
}

const kiln__matmul_path kiln__matmul_cblas = {"cblas", cblas_available, cblas_run, NULL};

#else

const kiln__matmul_path kiln__matmul_cblas = {
    "cblas", NULL, NULL, "kiln was built without CBLAS (install libopenblas-dev and reconfigure)"};

#endif
