/* transfer.c - kiln-bench transfer: h2d, d2h and d2d GB/s, kiln beside raw OpenCL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* One direction measured both ways on the same buffers and sizes. */
typedef enum dir { H2D, D2H, D2D, MAP } dir;

typedef struct xfer {
    bench_ctx *ctx;
    size_t n;
    int iters; /* operations per sample, so that small sizes are not timer noise */
    void *host;
    kiln_tensor *a, *b; /* kiln's tensors */
    cl_mem ra, rb;      /* raw OpenCL buffers of the same size */
    cl_command_queue q;
    kiln_status status;
    cl_int err;
} xfer;

static void kiln_once(xfer *x, dir d)
{
    void *p;
    kiln_status s = KILN_OK;
    switch (d) {
    case H2D:
        s = kiln_tensor_write(x->a, x->host, x->n);
        break;
    case D2H:
        s = kiln_tensor_read(x->a, x->host, x->n);
        break;
    case D2D:
        s = kiln_tensor_copy(x->b, x->a);
        break;
    case MAP:
        s = kiln_tensor_map(x->a, KILN_MAP_READ, &p);
        if (s == KILN_OK) {
            /* touch one byte per page: the data is really reachable */
            volatile const unsigned char *c = p;
            for (size_t i = 0; i < x->n; i += 4096)
                (void)c[i];
            s = kiln_tensor_unmap(x->a);
        }
        break;
    }
    if (s != KILN_OK)
        x->status = s;
}

static void raw_once(xfer *x, dir d)
{
    cl_int err = CL_SUCCESS;
    switch (d) {
    case H2D:
        err = clEnqueueWriteBuffer(x->q, x->ra, CL_TRUE, 0, x->n, x->host, 0, NULL, NULL);
        break;
    case D2H:
    case MAP: /* the baseline of map is kiln's own read; see sample() */
        err = clEnqueueReadBuffer(x->q, x->ra, CL_TRUE, 0, x->n, x->host, 0, NULL, NULL);
        break;
    case D2D:
        err = clEnqueueCopyBuffer(x->q, x->ra, x->rb, 0, 0, x->n, 0, NULL, NULL);
        break;
    }
    if (err != CL_SUCCESS)
        x->err = err;
}

/* GB/s of `iters` operations, ending when the device is done. */
static double sample(xfer *x, dir d, bool kiln)
{
    double t0 = bench_now();
    for (int i = 0; i < x->iters; i++) {
        if (kiln && d == MAP)
            kiln_once(x, MAP);
        else if (d == MAP)
            kiln_once(x, D2H);
        else if (kiln)
            kiln_once(x, d);
        else
            raw_once(x, d);
    }
    if (kiln)
        kiln_device_synchronize(x->ctx->dev);
    else
        clFinish(x->q);
    double t = bench_now() - t0;
    return (double)x->n * x->iters / t / 1e9;
}

static void size_name(char *buf, size_t len, size_t n)
{
    if (n >= ((size_t)1 << 20))
        snprintf(buf, len, "%zu MiB", n >> 20);
    else
        snprintf(buf, len, "%zu KiB", n >> 10);
}

static int measure(xfer *x, dir d)
{
    static const char *const names[] = {"h2d", "d2h", "d2d", "map-read"};
    bench_ctx *ctx = x->ctx;
    double *k = calloc((size_t)ctx->repeats, sizeof *k);
    double *r = calloc((size_t)ctx->repeats, sizeof *r);
    if (!k || !r) {
        free(k);
        free(r);
        fprintf(stderr, "kiln-bench: out of host memory\n");
        return 1;
    }
    sample(x, d, true); /* warm up both paths */
    sample(x, d, false);
    for (int i = 0; i < ctx->repeats; i++) { /* interleaved, so drift hits both alike */
        k[i] = sample(x, d, true);
        r[i] = sample(x, d, false);
    }
    char sz[32], name[96];
    size_name(sz, sizeof sz, x->n);
    snprintf(name, sizeof name, "%s %s", names[d], sz);
    bench_result res;
    bench_result_set(&res, name, "GB/s", true, d == MAP ? "kiln_tensor_read" : "raw OpenCL", k, r,
                     ctx->repeats);
    free(k);
    free(r);
    if (x->status != KILN_OK)
        return bench_fail(name, x->status);
    if (x->err != CL_SUCCESS) {
        fprintf(stderr, "kiln-bench: %s: raw OpenCL call failed with %d\n", name, (int)x->err);
        return 1;
    }
    bench_report(ctx, &res);
    return 0;
}

static int setup(xfer *x, size_t n)
{
    int64_t shape[1] = {(int64_t)n};
    cl_context c = kiln_device_cl_context(x->ctx->dev);
    x->n = n;
    x->iters = n >= ((size_t)4 << 20) ? 1 : (int)(((size_t)4 << 20) / n);
    if (x->iters > 256)
        x->iters = 256;
    x->host = malloc(n);
    if (!x->host)
        return bench_fail("malloc", KILN_ERR_OUT_OF_MEMORY);
    memset(x->host, 0x5a, n);
    kiln_status s = kiln_tensor_from_host(x->ctx->dev, KILN_U8, 1, shape, x->host, &x->a);
    if (s == KILN_OK)
        s = kiln_tensor_zeros(x->ctx->dev, KILN_U8, 1, shape, &x->b);
    if (s != KILN_OK)
        return bench_fail("kiln_tensor_from_host", s);
    cl_int e1, e2;
    x->ra = clCreateBuffer(c, CL_MEM_READ_WRITE, n, NULL, &e1);
    x->rb = clCreateBuffer(c, CL_MEM_READ_WRITE, n, NULL, &e2);
    if (e1 != CL_SUCCESS || e2 != CL_SUCCESS) {
        fprintf(stderr, "kiln-bench: clCreateBuffer of %zu bytes failed (%d, %d)\n", n, (int)e1,
                (int)e2);
        return 1;
    }
    /* make the raw buffers resident, as kiln's are */
    clEnqueueWriteBuffer(x->q, x->ra, CL_TRUE, 0, n, x->host, 0, NULL, NULL);
    clEnqueueWriteBuffer(x->q, x->rb, CL_TRUE, 0, n, x->host, 0, NULL, NULL);
    return 0;
}

static void teardown(xfer *x)
{
    kiln_tensor_release(x->a);
    kiln_tensor_release(x->b);
    if (x->ra)
        clReleaseMemObject(x->ra);
    if (x->rb)
        clReleaseMemObject(x->rb);
    free(x->host);
    kiln_device_empty_cache(x->ctx->dev);
}

int bench_transfer(bench_ctx *ctx)
{
    static const size_t full[] = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20};
    static const size_t quick[] = {4 << 10, 64 << 10, 1 << 20};
    const size_t *sizes = ctx->quick ? quick : full;
    int nsizes = ctx->quick ? 3 : 5;
    kiln_device_info info;
    kiln_status s = kiln_device_info_get(ctx->dev, &info);
    if (s != KILN_OK)
        return bench_fail("kiln_device_info_get", s);
    cl_command_queue q = kiln_device_cl_queue(ctx->dev);
    if (!q)
        return bench_fail("kiln_device_cl_queue", KILN_ERR_OPENCL);
    int rc = 0;
    for (int i = 0; i < nsizes && rc == 0; i++) {
        if (sizes[i] > info.max_alloc_bytes) {
            bench_note(ctx, "sizes above %llu bytes skipped (CL_DEVICE_MAX_MEM_ALLOC_SIZE)",
                       (unsigned long long)info.max_alloc_bytes);
            break;
        }
        char sz[32];
        size_name(sz, sizeof sz, sizes[i]);
        bench_progress(ctx, "transfer: %s", sz);
        xfer x = {.ctx = ctx, .q = q};
        rc = setup(&x, sizes[i]);
        for (int d = H2D; d <= D2D && rc == 0; d++)
            rc = measure(&x, (dir)d);
        if (rc == 0 && info.unified_memory)
            rc = measure(&x, MAP);
        teardown(&x);
    }
    if (info.unified_memory)
        bench_note(ctx, "map-read: kiln_tensor_map + one read per page + unmap, against "
                        "kiln_tensor_read of the same tensor (unified memory: no copy)");
    else
        bench_note(ctx,
                   "h2d/d2h: kiln copies through pinned staging buffers (chunks of %s, two "
                   "in flight); the raw OpenCL baseline copies the same pageable buffer "
                   "directly: the ratio is staged / direct",
                   getenv("KILN_STAGING_CHUNK") ? getenv("KILN_STAGING_CHUNK") : "16 MiB");
    return rc;
}
