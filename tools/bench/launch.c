/* launch.c - kiln-bench launch: per-launch overhead of a tiny kernel through
 * kiln_program_launch beside clSetKernelArg + clEnqueueNDRangeKernel on the same queue. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char *tiny_source = "__kernel void tiny(__global float *x, int n)\n"
                                 "{\n"
                                 "    int i = get_global_id(0);\n"
                                 "    if (i < n)\n"
                                 "        x[i] += 1.0f;\n"
                                 "}\n";

typedef struct launcher {
    bench_ctx *ctx;
    int n; /* elements: tiny, so the launch itself dominates */
    kiln_program *prog;
    kiln_tensor *x;
    cl_command_queue q;
    cl_program rawprog;
    cl_kernel raw;
    cl_mem rawx;
    kiln_status status;
    cl_int err;
} launcher;

static void kiln_once(launcher *l)
{
    size_t global = (size_t)l->n;
    kiln_arg args[] = {kiln_arg_tensor(l->x), kiln_arg_i32(l->n)};
    kiln_status s = kiln_program_launch(l->prog, "tiny", 1, &global, NULL, 2, args);
    if (s != KILN_OK)
        l->status = s;
}

/* What a C program does per launch without kiln: set the arguments, enqueue. */
static void raw_once(launcher *l)
{
    size_t global = (size_t)l->n;
    cl_int n = l->n;
    cl_int err = clSetKernelArg(l->raw, 0, sizeof l->rawx, &l->rawx);
    if (err == CL_SUCCESS)
        err = clSetKernelArg(l->raw, 1, sizeof n, &n);
    if (err == CL_SUCCESS)
        err = clEnqueueNDRangeKernel(l->q, l->raw, 1, NULL, &global, NULL, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        l->err = err;
}

/* Microseconds per launch: `iters` launches then one clFinish (wait = false), or a clFinish
 * after every launch (wait = true). */
static double sample(launcher *l, bool kiln, bool wait, int iters)
{
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) {
        if (kiln)
            kiln_once(l);
        else
            raw_once(l);
        if (wait)
            clFinish(l->q);
    }
    clFinish(l->q);
    return (bench_now() - t0) / iters * 1e6;
}

static int measure(launcher *l, bool wait)
{
    bench_ctx *ctx = l->ctx;
    int iters = wait ? (ctx->quick ? 200 : 2000) : (ctx->quick ? 1000 : 20000);
    double *k = calloc((size_t)ctx->repeats, sizeof *k);
    double *r = calloc((size_t)ctx->repeats, sizeof *r);
    if (!k || !r) {
        free(k);
        free(r);
        return bench_fail("calloc", KILN_ERR_OUT_OF_MEMORY);
    }
    sample(l, true, wait, iters / 10 + 1); /* warm up both paths */
    sample(l, false, wait, iters / 10 + 1);
    for (int i = 0; i < ctx->repeats; i++) { /* interleaved, so drift hits both alike */
        k[i] = sample(l, true, wait, iters);
        r[i] = sample(l, false, wait, iters);
    }
    char name[96];
    snprintf(name, sizeof name, "%s, n=%d",
             wait ? "enqueue+wait per launch" : "enqueue-only per launch", l->n);
    bench_result res;
    bench_result_set(&res, name, "us", false, "raw OpenCL", k, r, ctx->repeats);
    free(k);
    free(r);
    if (l->status != KILN_OK)
        return bench_fail(name, l->status);
    if (l->err != CL_SUCCESS) {
        fprintf(stderr, "kiln-bench: %s: raw OpenCL call failed with %d\n", name, (int)l->err);
        return 1;
    }
    bench_report(ctx, &res);
    return 0;
}

static int setup_raw(launcher *l)
{
    cl_context c = kiln_device_cl_context(l->ctx->dev);
    cl_device_id id = kiln_device_cl_device_id(l->ctx->dev);
    cl_int err;
    l->rawprog = clCreateProgramWithSource(c, 1, &tiny_source, NULL, &err);
    if (err == CL_SUCCESS)
        err = clBuildProgram(l->rawprog, 1, &id, "-cl-std=CL1.2", NULL, NULL);
    if (err == CL_SUCCESS)
        l->raw = clCreateKernel(l->rawprog, "tiny", &err);
    if (err == CL_SUCCESS)
        l->rawx = clCreateBuffer(c, CL_MEM_READ_WRITE, sizeof(float) * (size_t)l->n, NULL, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "kiln-bench: building the raw OpenCL baseline failed with %d\n", (int)err);
        return 1;
    }
    return 0;
}

static void teardown(launcher *l)
{
    if (l->raw)
        clReleaseKernel(l->raw);
    if (l->rawprog)
        clReleaseProgram(l->rawprog);
    if (l->rawx)
        clReleaseMemObject(l->rawx);
    kiln_tensor_release(l->x);
    kiln_program_release(l->prog);
}

int bench_launch(bench_ctx *ctx)
{
    launcher l = {.ctx = ctx, .n = 64};
    int64_t shape[1] = {l.n};
    int rc = 1;
    l.q = kiln_device_cl_queue(ctx->dev);
    if (!l.q) {
        bench_fail("kiln_device_cl_queue", KILN_ERR_OPENCL);
        goto done;
    }
    kiln_status s = kiln_program_build(ctx->dev, tiny_source, NULL, &l.prog);
    if (s == KILN_OK)
        s = kiln_tensor_zeros(ctx->dev, KILN_F32, 1, shape, &l.x);
    if (s != KILN_OK) {
        bench_fail("kiln_program_build", s);
        goto done;
    }
    if (setup_raw(&l) != 0)
        goto done;
    rc = measure(&l, false);
    if (rc == 0)
        rc = measure(&l, true);
    bench_note(ctx,
               "launch: a %d-element kernel; the baseline sets its 2 arguments and calls "
               "clEnqueueNDRangeKernel on kiln's queue; goal: kiln adds < 20%%",
               l.n);
done:
    teardown(&l);
    return rc;
}
