/* test-program.c - user programs and launches (kiln_program_*), built-in kernels
 * (kiln__builtin_kernel, kiln__kernel_launch): results against plain C loops, and every bad
 * input with its status and message. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln.h"
#include "lib/clcall.h"
#include "lib/diskcache.h"
#include "lib/launch.h"
#include "lib/program.h"
#include "lib/registry.h"
#include "lib/status.h"
#include "testutil.h"

static const char *saxpy_source =
    "__kernel void saxpy(__global float *y, __global const float *x, float a, int n)\n"
    "{\n"
    "    int i = get_global_id(0);\n"
    "    if (i < n)\n"
    "        y[i] = a * x[i] + y[i];\n"
    "}\n"
    "__kernel void reverse_blocks(__global float *out, __global const float *in,\n"
    "                             __local float *scratch, int n)\n"
    "{\n"
    "    int g = get_global_id(0), l = get_local_id(0), m = get_local_size(0);\n"
    "    scratch[l] = g < n ? in[g] : 0.0f;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    if (g < n)\n"
    "        out[g] = scratch[m - 1 - l];\n"
    "}\n"
    "__kernel void scalars(__global long *out, float f, int i, long l, uchar u)\n"
    "{\n"
    "    if (get_global_id(0) == 0) {\n"
    "        out[0] = as_int(f);\n"
    "        out[1] = i;\n"
    "        out[2] = l;\n"
    "        out[3] = u;\n"
    "    }\n"
    "}\n"
    "#ifdef KILN_HAS_FP64\n"
    "__kernel void scalar_f64(__global long *out, double d)\n"
    "{\n"
    "    if (get_global_id(0) == 0)\n"
    "        out[0] = as_long(d);\n"
    "}\n"
    "#endif\n"
    "__kernel void grid2d(__global int *out, int w, int h)\n"
    "{\n"
    "    int x = get_global_id(0), y = get_global_id(1);\n"
    "    if (x < w && y < h)\n"
    "        out[y * w + x] = y * 1000 + x;\n"
    "}\n";

static kiln_device *dev;
static kiln_program *prog;
static int small; /* element counts: tiny under Oclgrind (1 us per work-item) */

static void setup(void)
{
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_OK);
    kiln_status s = kiln_program_build(dev, saxpy_source, NULL, &prog);
    ck_assert_msg(s == KILN_OK, "%s", kiln_last_error());
    small = kiln_device_name(dev)[0] && strstr(kiln_device_name(dev), "Oclgrind") ? 1 : 0;
}

static void teardown(void)
{
    kiln_program_release(prog);
    prog = NULL;
    kiln__cl_reset();
}

static kiln_tensor *vec(kiln_device *d, const float *data, int64_t n)
{
    kiln_tensor *t = NULL;
    kiln_status s = kiln_tensor_from_host(d, KILN_F32, 1, &n, data, &t);
    ck_assert_msg(s == KILN_OK, "%s", kiln_last_error());
    return t;
}

/* Run saxpy on (device, program) and compare with a C loop (a*x+y may be fused: 1e-6). */
static void check_saxpy(kiln_device *d, kiln_program *p, int n, const size_t *local)
{
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    float *got = malloc(sizeof(float) * (size_t)n);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_nonnull(got);
    for (int i = 0; i < n; i++) {
        x[i] = (float)i * 0.5f - 3.0f;
        y[i] = (float)(i % 7) - 1.25f;
    }
    kiln_tensor *tx = vec(d, x, n), *ty = vec(d, y, n);
    kiln_arg args[] = {kiln_arg_tensor(ty), kiln_arg_tensor(tx), kiln_arg_f32(2.5f),
                       kiln_arg_i32(n)};
    size_t global = local ? ((size_t)n + local[0] - 1) / local[0] * local[0] : (size_t)n;
    kiln_status s = kiln_program_launch(p, "saxpy", 1, &global, local, 4, args);
    ck_assert_msg(s == KILN_OK, "%s", kiln_last_error());
    ck_assert_int_eq(kiln_tensor_read(ty, got, sizeof(float) * (size_t)n), KILN_OK);
    for (int i = 0; i < n; i++) {
        float want = 2.5f * x[i] + y[i];
        ck_assert_msg(fabsf(got[i] - want) <= 1e-6f * (1.0f + fabsf(want)), "y[%d] = %g, want %g",
                      i, (double)got[i], (double)want);
    }
    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    free(x);
    free(y);
    free(got);
}

START_TEST(saxpy_matches_c_loop)
{
    check_saxpy(dev, prog, small ? 37 : 1000, NULL); /* not a multiple of any local size */
    check_saxpy(dev, prog, 1, NULL);
    size_t local = 16;
    check_saxpy(dev, prog, small ? 40 : 1000, &local);
}
END_TEST

START_TEST(saxpy_on_every_device)
{
    /* One and (config -2dev) two PoCL devices, each with its own program. */
    int n = kiln_device_count(KILN_DEVICE_ALL);
    for (int i = 0; i < n; i++) {
        kiln_device *d = kiln_device_at(i);
        kiln_program *p = NULL;
        ck_assert_int_eq(kiln_program_build(d, saxpy_source, NULL, &p), KILN_OK);
        ck_assert_ptr_eq(kiln_program_device(p), d);
        check_saxpy(d, p, strstr(kiln_device_name(d), "Oclgrind") ? 20 : 500, NULL);
        kiln_program_release(p);
    }
}
END_TEST

START_TEST(local_memory_argument)
{
    int n = small ? 40 : 100;
    float in[100], out[100];
    for (int i = 0; i < n; i++)
        in[i] = (float)i;
    kiln_tensor *tin = vec(dev, in, n), *tout = vec(dev, in, n);
    size_t local = 8, global = ((size_t)n + 7) / 8 * 8;
    kiln_arg args[] = {kiln_arg_tensor(tout), kiln_arg_tensor(tin),
                       kiln_arg_local(local * sizeof(float)), kiln_arg_i32(n)};
    ck_assert_int_eq(kiln_program_launch(prog, "reverse_blocks", 1, &global, &local, 4, args),
                     KILN_OK);
    ck_assert_int_eq(kiln_tensor_read(tout, out, sizeof(float) * (size_t)n), KILN_OK);
    for (int i = 0; i < n; i++) {
        int block = i / 8 * 8, want = block + 7 - (i - block);
        float expect = want < n ? (float)want : 0.0f;
        ck_assert_msg(out[i] == expect, "out[%d] = %g, want %g", i, (double)out[i], (double)expect);
    }
    /* Local memory of 0 bytes or more than the device has. */
    args[2] = kiln_arg_local(0);
    ck_assert_int_eq(kiln_program_launch(prog, "reverse_blocks", 1, &global, &local, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("local memory");
    args[2] = kiln_arg_local((size_t)1 << 40);
    ck_assert_int_eq(kiln_program_launch(prog, "reverse_blocks", 1, &global, &local, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("local memory");
    kiln_tensor_release(tin);
    kiln_tensor_release(tout);
}
END_TEST

START_TEST(scalars_of_each_dtype_arrive)
{
    int64_t n = 4, got[4];
    kiln_tensor *out = NULL;
    ck_assert_int_eq(kiln_tensor_zeros(dev, KILN_I64, 1, &n, &out), KILN_OK);
    kiln_arg args[] = {kiln_arg_tensor(out), kiln_arg_f32(-1.5f), kiln_arg_i32(-123456789),
                       kiln_arg_i64(-1234567890123456789LL), kiln_arg_u8(250)};
    size_t one = 1;
    ck_assert_int_eq(kiln_program_launch(prog, "scalars", 1, &one, NULL, 5, args), KILN_OK);
    ck_assert_int_eq(kiln_tensor_read(out, got, sizeof got), KILN_OK);
    float f = -1.5f;
    int32_t fbits;
    memcpy(&fbits, &f, sizeof fbits);
    ck_assert_int_eq(got[0], fbits);
    ck_assert_int_eq(got[1], -123456789);
    ck_assert_int_eq(got[2], -1234567890123456789LL);
    ck_assert_int_eq(got[3], 250);
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(dev, &info), KILN_OK);
    if (info.fp64) {
        double d = -0.1;
        int64_t dbits;
        memcpy(&dbits, &d, sizeof dbits);
        kiln_arg a64[] = {kiln_arg_tensor(out), kiln_arg_f64(d)};
        ck_assert_int_eq(kiln_program_launch(prog, "scalar_f64", 1, &one, NULL, 2, a64), KILN_OK);
        ck_assert_int_eq(kiln_tensor_read(out, got, sizeof got), KILN_OK);
        ck_assert_int_eq(got[0], dbits);
    } else {
        ck_assert_ptr_null(strstr(kiln_program_kernel_names(prog), "scalar_f64"));
    }
    /* A scalar of the wrong size for its parameter (f64 for a float). */
    args[1] = kiln_arg_f64(1.0);
    ck_assert_int_eq(kiln_program_launch(prog, "scalars", 1, &one, NULL, 5, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("kernel scalars, parameter 1");
    /* A hand-made argument with a bad kind or dtype. */
    args[1] = kiln_arg_f32(1.0f);
    args[1].dtype = (kiln_dtype)99;
    ck_assert_int_eq(kiln_program_launch(prog, "scalars", 1, &one, NULL, 5, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("unknown dtype");
    args[1].kind = (kiln_arg_kind)42;
    ck_assert_int_eq(kiln_program_launch(prog, "scalars", 1, &one, NULL, 5, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("unknown kind");
    kiln_tensor_release(out);
}
END_TEST

START_TEST(two_dimensional_launch)
{
    int w = small ? 5 : 37, h = small ? 3 : 11;
    int64_t n = (int64_t)w * h;
    int32_t got[37 * 11];
    kiln_tensor *out = NULL;
    ck_assert_int_eq(kiln_tensor_zeros(dev, KILN_I32, 1, &n, &out), KILN_OK);
    kiln_arg args[] = {kiln_arg_tensor(out), kiln_arg_i32(w), kiln_arg_i32(h)};
    size_t global[2] = {(size_t)w, (size_t)h};
    ck_assert_int_eq(kiln_program_launch(prog, "grid2d", 2, global, NULL, 3, args), KILN_OK);
    ck_assert_int_eq(kiln_tensor_read(out, got, sizeof(int32_t) * (size_t)n), KILN_OK);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            ck_assert_int_eq(got[y * w + x], y * 1000 + x);
    kiln_tensor_release(out);
}
END_TEST

struct launcher {
    int id;
    int bad; /* results that differed from the C loop */
    kiln_status s;
};

/* Each thread runs saxpy on its own tensors many times through the one shared program. */
static void *launch_thread(void *arg)
{
    struct launcher *t = arg;
    enum { N = 33, ROUNDS = 20 };
    float x[N], y[N], got[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i + t->id);
        y[i] = 0.0f;
    }
    int64_t n = N;
    kiln_tensor *tx = NULL, *ty = NULL;
    t->s = kiln_tensor_from_host(dev, KILN_F32, 1, &n, x, &tx);
    if (t->s == KILN_OK)
        t->s = kiln_tensor_from_host(dev, KILN_F32, 1, &n, y, &ty);
    kiln_arg args[] = {kiln_arg_tensor(ty), kiln_arg_tensor(tx), kiln_arg_f32(1.0f),
                       kiln_arg_i32(N)};
    size_t g = N;
    for (int r = 0; r < ROUNDS && t->s == KILN_OK; r++)
        t->s = kiln_program_launch(prog, "saxpy", 1, &g, NULL, 4, args);
    if (t->s == KILN_OK)
        t->s = kiln_tensor_read(ty, got, sizeof got);
    for (int i = 0; i < N && t->s == KILN_OK; i++)
        t->bad += got[i] != (float)ROUNDS * x[i]; /* exact: small integers */
    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    return NULL;
}

START_TEST(launch_from_several_threads)
{
    if (small)
        return; /* Oclgrind's queue is not thread-safe (it crashes in Queue::execute) */
    struct launcher t[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};
    pthread_t th[4];
    int n = 4;
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, launch_thread, &t[i]), 0);
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(t[i].s, KILN_OK);
        ck_assert_int_eq(t[i].bad, 0);
    }
}
END_TEST

START_TEST(wrong_argument_count)
{
    kiln_tensor *t = vec(dev, (const float[]){1, 2}, 2);
    kiln_arg args[] = {kiln_arg_tensor(t), kiln_arg_tensor(t), kiln_arg_f32(1)};
    size_t g = 2;
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, &g, NULL, 3, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("saxpy takes 4 arguments, 3 given");
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, &g, NULL, 4, NULL),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("args is NULL");
    kiln_tensor_release(t);
}
END_TEST

START_TEST(bad_sizes)
{
    float x[64] = {0};
    kiln_tensor *t = vec(dev, x, 64);
    kiln_arg args[] = {kiln_arg_tensor(t), kiln_arg_tensor(t), kiln_arg_f32(1), kiln_arg_i32(64)};
    size_t g = 60, l = 16;
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, &g, &l, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("global size 60 in dimension 0 is not a multiple of the local size 16");
    size_t big = (size_t)1 << 20;
    g = big;
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, &g, &big, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("exceeds the device's limit");
    size_t g2[2] = {64, 128}, l2[2] = {64, 128}; /* each fits, the product does not */
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 2, g2, l2, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("exceeds kernel saxpy's limit");
    l = 0;
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, &g, &l, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 0, &g, NULL, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("work_dim is 0");
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 4, &g, NULL, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, NULL, NULL, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("global is NULL");
    /* Padding (opt-in) that would overflow. */
    g = (size_t)-1;
    size_t padded, local;
    ck_assert_int_eq(kiln_program_pad_range(prog, "saxpy", 1, &g, &padded, &local),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("too large");
    kiln_tensor_release(t);
}
END_TEST

static cl_int CL_API_CALL enqueue_fails(cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o,
                                        const size_t *g, const size_t *l, cl_uint n,
                                        const cl_event *w, cl_event *e)
{
    (void)q, (void)k, (void)d, (void)o, (void)g, (void)l, (void)n, (void)w, (void)e;
    return CL_OUT_OF_RESOURCES;
}

START_TEST(zero_global_is_noop_and_enqueue_errors)
{
    float x[4] = {1, 2, 3, 4}, got[4];
    kiln_tensor *t = vec(dev, x, 4);
    kiln_arg args[] = {kiln_arg_tensor(t), kiln_arg_tensor(t), kiln_arg_f32(1), kiln_arg_i32(4)};
    kiln__cl.EnqueueNDRangeKernel = enqueue_fails;
    size_t g[2] = {0, 4};
    /* A zero size makes no OpenCL call at all: the failing enqueue is never reached. */
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, g, NULL, 4, args), KILN_OK);
    size_t g2[2] = {4, 0};
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 2, g2, NULL, 4, args), KILN_OK);
    g[0] = 4;
    /* CL_OUT_OF_RESOURCES at an enqueue is a kernel fault: the device is lost (test-faults.c);
     * forget that afterwards, the fault was only injected */
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, g, NULL, 4, args), KILN_ERR_DEVICE_LOST);
    ASSERT_ERROR_HAS("clEnqueueNDRangeKernel");
    ASSERT_ERROR_HAS("CL_OUT_OF_RESOURCES");
    kiln__cl_reset();
    kiln__device_clear_lost(dev);
    ck_assert_int_eq(kiln_tensor_read(t, got, sizeof got), KILN_OK);
    ck_assert_int_eq(memcmp(got, x, sizeof x), 0);
    kiln_tensor_release(t);
}
END_TEST

START_TEST(empty_tensor_argument)
{
    int64_t zero = 0;
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_tensor_empty(dev, KILN_F32, 1, &zero, &t), KILN_OK);
    kiln_arg args[] = {kiln_arg_tensor(t), kiln_arg_tensor(t), kiln_arg_f32(1), kiln_arg_i32(0)};
    size_t g = 1; /* one work-item that touches nothing: a NULL buffer is legal */
    kiln_status s = kiln_program_launch(prog, "saxpy", 1, &g, NULL, 4, args);
    ck_assert_msg(s == KILN_OK, "%s", kiln_last_error());
    ck_assert_int_eq(kiln_device_synchronize(dev), KILN_OK);
    kiln_tensor_release(t);
}
END_TEST

START_TEST(unknown_kernel_lists_kernels)
{
    size_t g = 1;
    ck_assert_int_eq(kiln_program_launch(prog, "saxpyy", 1, &g, NULL, 0, NULL), KILN_ERR_NOT_FOUND);
    ASSERT_ERROR_HAS("no kernel named \"saxpyy\"");
    ASSERT_ERROR_HAS("saxpy");
    ASSERT_ERROR_HAS("reverse_blocks");
    ck_assert_int_eq(kiln_program_launch(prog, NULL, 1, &g, NULL, 0, NULL),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("kernel name is NULL");
    ck_assert_ptr_nonnull(strstr(kiln_program_kernel_names(prog), "grid2d"));
}
END_TEST

START_TEST(tensor_from_another_device)
{
    if (kiln_device_count(KILN_DEVICE_ALL) < 2)
        return; /* configs -2dev and -oclgrind */
    kiln_device *d0 = kiln_device_at(0), *d1 = kiln_device_at(1);
    kiln_program *p = NULL;
    ck_assert_int_eq(kiln_program_build(d0, saxpy_source, NULL, &p), KILN_OK);
    kiln_tensor *a = vec(d0, (const float[]){1, 2}, 2), *b = vec(d1, (const float[]){1, 2}, 2);
    kiln_arg args[] = {kiln_arg_tensor(a), kiln_arg_tensor(b), kiln_arg_f32(1), kiln_arg_i32(2)};
    size_t g = 2;
    ck_assert_int_eq(kiln_program_launch(p, "saxpy", 1, &g, NULL, 4, args),
                     KILN_ERR_DEVICE_MISMATCH);
    ASSERT_ERROR_HAS(kiln_device_spec(d0));
    ASSERT_ERROR_HAS(kiln_device_spec(d1));
    ASSERT_ERROR_HAS("kiln_tensor_to()");
    ASSERT_ERROR_HAS("argument 1 of kernel saxpy");
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_program_release(p);
}
END_TEST

START_TEST(bad_handles)
{
    size_t g = 1;
    ck_assert_int_eq(kiln_program_launch(NULL, "saxpy", 1, &g, NULL, 0, NULL),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("prog is NULL");
    kiln_arg args[] = {kiln_arg_tensor(NULL), kiln_arg_tensor(NULL), kiln_arg_f32(1),
                       kiln_arg_i32(2)};
    ck_assert_int_eq(kiln_program_launch(prog, "saxpy", 1, &g, NULL, 4, args),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("argument 0 of kernel saxpy");
    ck_assert_str_eq(kiln_program_kernel_names(NULL), "");
    ck_assert_ptr_null(kiln_program_device(NULL));
    kiln_program_release(NULL);
}
END_TEST

START_TEST(retain_and_release_count)
{
    kiln_program *p = NULL;
    ck_assert_int_eq(kiln_program_build(dev, saxpy_source, NULL, &p), KILN_OK);
    ck_assert_ptr_eq(kiln_program_retain(p), p);
    ck_assert_ptr_eq(kiln_program_retain(p), p);
    /* Three references: the program works until the last one goes (ASan sees a use after free
     * or a leak). */
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_eq(kiln_program_device(p), dev);
        ck_assert_ptr_nonnull(strstr(kiln_program_kernel_names(p), "saxpy"));
        check_saxpy(dev, p, small ? 20 : 300, NULL);
        kiln_program_release(p);
    }
    ck_assert_ptr_null(kiln_program_retain(NULL));
    kiln_program_release(NULL);
}
END_TEST

/* ---- exact ranges (issue 10) --------------------------------------------------------------- */

static const char *unchecked_source =
    "__kernel void fill(__global float *x) /* no bounds check, as in plain OpenCL */\n"
    "{\n"
    "    int i = get_global_id(0);\n"
    "    x[i] = (float)i * 2.0f + 1.0f;\n"
    "}\n"
    "__kernel void fill2d(__global float *x, int w)\n"
    "{\n"
    "    int i = get_global_id(1) * w + get_global_id(0);\n"
    "    x[i] = (float)(get_global_id(0) * 1000 + get_global_id(1));\n"
    "}\n";

/* A tensor over the first n floats of a buffer of total floats, all set to -7: the memory right
 * after the tensor can be read back. */
static kiln_tensor *tensor_in_larger_buffer(int64_t n, size_t total, cl_mem *parent)
{
    float *init = malloc(total * sizeof(float));
    ck_assert_ptr_nonnull(init);
    for (size_t i = 0; i < total; i++)
        init[i] = -7.0f;
    cl_int err = CL_SUCCESS;
    *parent = clCreateBuffer(kiln_device_cl_context(dev), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                             total * sizeof(float), init, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    free(init);
    cl_buffer_region r = {0, (size_t)n * sizeof(float)};
    cl_mem sub =
        clCreateSubBuffer(*parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_tensor_from_cl_mem(dev, sub, KILN_F32, 1, &n, &t));
    clReleaseMemObject(sub); /* the tensor holds its own reference */
    return t;
}

static void read_buffer(cl_mem m, float *dst, size_t total)
{
    ASSERT_OK(kiln_device_synchronize(dev));
    ck_assert_int_eq(clEnqueueReadBuffer(kiln_device_cl_queue(dev), m, CL_TRUE, 0,
                                         total * sizeof(float), dst, 0, NULL, NULL),
                     CL_SUCCESS);
}

START_TEST(launch_runs_exactly_global)
{
    /* local = NULL once padded 384 work-items (1,536 bytes of floats) up to 512: a kernel
     * without a bounds check wrote 512 bytes past the tensor (heap corruption, crashes). */
    kiln_program *p = NULL;
    ASSERT_OK(kiln_program_build(dev, unchecked_source, NULL, &p));
    enum { N = 384, TOTAL = 1024, W = 24, H = 16 };
    float got[TOTAL];
    cl_mem parent;
    kiln_tensor *t = tensor_in_larger_buffer(N, TOTAL, &parent);
    kiln_arg args[2] = {kiln_arg_tensor(t), kiln_arg_i32(W)};
    size_t g = N;
    ASSERT_OK(kiln_program_launch(p, "fill", 1, &g, NULL, 1, args));
    read_buffer(parent, got, TOTAL);
    for (int i = 0; i < TOTAL; i++)
        ck_assert_msg(got[i] == (i < N ? (float)i * 2.0f + 1.0f : -7.0f), "x[%d] = %g%s", i,
                      (double)got[i], i < N ? "" : ", past the tensor's end");
    /* Two dimensions, 24 x 16: padding to 32 columns also wrote wrong values into later rows. */
    size_t g2[2] = {W, H};
    ASSERT_OK(kiln_program_launch(p, "fill2d", 2, g2, NULL, 2, args));
    read_buffer(parent, got, TOTAL);
    for (int i = 0; i < TOTAL; i++)
        ck_assert_msg(got[i] == (i < N ? (float)((i % W) * 1000 + i / W) : -7.0f), "x[%d] = %g", i,
                      (double)got[i]);
    kiln_tensor_release(t);
    clReleaseMemObject(parent);
    kiln_program_release(p);
}
END_TEST

START_TEST(padding_is_opt_in)
{
    /* kiln_program_pad_range: kiln's local size and the global size rounded up to it, for a
     * kernel that bounds-checks (saxpy). */
    int n = small ? 37 : 1000;
    size_t g = (size_t)n, padded = 0, local = 0;
    ASSERT_OK(kiln_program_pad_range(prog, "saxpy", 1, &g, &padded, &local));
    ck_assert_uint_ge(local, 1);
    ck_assert_uint_eq(padded % local, 0);
    ck_assert_uint_ge(padded, g);
    ck_assert_uint_lt(padded - g, local);
    size_t g2[2] = {5, 3}, p2[2], l2[2];
    ASSERT_OK(kiln_program_pad_range(prog, "grid2d", 2, g2, p2, l2));
    for (int d = 0; d < 2; d++) {
        ck_assert_uint_eq(p2[d] % l2[d], 0);
        ck_assert_uint_ge(p2[d], g2[d]);
    }
    /* The padded launch gives the same results as the exact one. */
    check_saxpy(dev, prog, n, &local);
    ASSERT_FAILS(kiln_program_pad_range(prog, "saxpy", 1, &g, NULL, &local),
                 KILN_ERR_INVALID_ARGUMENT, "padded is NULL");
    ASSERT_FAILS(kiln_program_pad_range(prog, "saxpy", 0, &g, &padded, &local),
                 KILN_ERR_INVALID_ARGUMENT, "work_dim is 0");
    ASSERT_FAILS(kiln_program_pad_range(prog, "nope", 1, &g, &padded, &local), KILN_ERR_NOT_FOUND,
                 "nope");
    ASSERT_FAILS(kiln_program_pad_range(NULL, "saxpy", 1, &g, &padded, &local),
                 KILN_ERR_INVALID_ARGUMENT, "prog is NULL");
}
END_TEST

/* ---- argument kinds (issue 10) ----------------------------------------------------------- */

static const char *kinds_source =
    "__kernel void kinds(__global float *x, float a, int n, long l, __local float *s)\n"
    "{\n"
    "    int i = get_global_id(0);\n"
    "    s[get_local_id(0)] = a;\n"
    "    if (i < n)\n"
    "        x[i] = s[get_local_id(0)] + (float)l;\n"
    "}\n"
    "__kernel void wide(__global float4 *x, __global uint *u, __constant uchar *c, float4 v)\n"
    "{\n"
    "    x[0] = v + (float)u[0] + (float)c[0];\n"
    "}\n"
    "__kernel void loose(__global void *p, __global ushort *h, uint n)\n"
    "{\n"
    "    if (n == 5u)\n"
    "        h[0] = (ushort)7;\n"
    "}\n";

/* kernel `name` of p with args gives KILN_ERR_INVALID_ARGUMENT whose message has each of the
 * texts. */
#define ASSERT_ARG_REFUSED(p, name, nargs, args, ...)                                              \
    do {                                                                                           \
        size_t one_ = 1;                                                                           \
        ASSERT_FAILS(kiln_program_launch(p, name, 1, &one_, NULL, nargs, args),                    \
                     KILN_ERR_INVALID_ARGUMENT, "kernel " name ", parameter");                     \
        const char *texts_[] = {__VA_ARGS__};                                                      \
        for (size_t i_ = 0; i_ < sizeof texts_ / sizeof *texts_; i_++)                             \
            ASSERT_ERROR_HAS(texts_[i_]);                                                          \
    } while (0)

static void check_kinds(kiln_program *p)
{
    enum { N = 8 };
    int64_t n = N;
    kiln_tensor *x = NULL, *xi = NULL, *xd = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &n, &x));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 1, &n, &xi));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I64, 1, &n, &xd));
    kiln_arg good[5] = {kiln_arg_tensor(x), kiln_arg_f32(1.5f), kiln_arg_i32(N), kiln_arg_i64(2),
                        kiln_arg_local(8 * sizeof(float))};
    size_t g = N, l = 8;
    ASSERT_OK(kiln_program_launch(p, "kinds", 1, &g, &l, 5, good));
    float got[N];
    ASSERT_OK(kiln_tensor_read(x, got, sizeof got));
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(got[i], 3.5f);

    kiln_arg a[5];
    memcpy(a, good, sizeof a);
    a[0] = kiln_arg_f64(4); /* crashed inside PoCL: 8 bytes taken for a cl_mem */
    ASSERT_ARG_REFUSED(p, "kinds", 5, a, "parameter 0 'x' (__global float*)", "kiln_arg_f64()");
    a[0] = kiln_arg_tensor(xi); /* a tensor of another dtype */
    ASSERT_ARG_REFUSED(p, "kinds", 5, a, "parameter 0 'x'", "tensor of dtype i32",
                       "tensor of dtype f32");
    memcpy(a, good, sizeof a);
    a[1] = kiln_arg_i32(7); /* was KILN_OK and garbage */
    ASSERT_ARG_REFUSED(p, "kinds", 5, a, "parameter 1 'a' (float)", "kiln_arg_i32() (i32) given",
                       "pass kiln_arg_f32()");
    memcpy(a, good, sizeof a);
    a[2] = kiln_arg_f32(3); /* was KILN_OK and garbage */
    ASSERT_ARG_REFUSED(p, "kinds", 5, a, "parameter 2 'n' (int)", "kiln_arg_f32() (f32) given",
                       "pass kiln_arg_i32()");
    memcpy(a, good, sizeof a);
    a[3] = kiln_arg_tensor(xd); /* a tensor for a long: was accepted */
    ASSERT_ARG_REFUSED(p, "kinds", 5, a, "parameter 3 'l' (long)", "tensor of dtype i64 given",
                       "kiln_arg_i64()");
    memcpy(a, good, sizeof a);
    a[4] = kiln_arg_f32(1);
    ASSERT_ARG_REFUSED(p, "kinds", 5, a, "parameter 4 's' (__local float*)", "kiln_arg_local");
    a[4] = good[4];
    a[0] = kiln_arg_local(64);
    ASSERT_ARG_REFUSED(p, "kinds", 5, a, "parameter 0 'x'", "kiln_arg_local() (local memory)");

    /* float4* and uint* take f32 and i32 tensors, __constant uchar* u8; a vector by value cannot
     * be passed at all. */
    kiln_tensor *c = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_U8, 1, &n, &c));
    kiln_arg w[4] = {kiln_arg_tensor(x), kiln_arg_tensor(xi), kiln_arg_tensor(c), kiln_arg_f32(1)};
    ASSERT_ARG_REFUSED(p, "wide", 4, w, "parameter 3 'v' (float4)", "no vectors by value");
    w[2] = kiln_arg_tensor(x);
    ASSERT_ARG_REFUSED(p, "wide", 4, w, "parameter 2 'c' (__constant uchar*)",
                       "tensor of dtype u8");
    /* void* takes any tensor, ushort* 2-byte ones, uint an i32 scalar. */
    kiln_tensor *h = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F16, 1, &n, &h));
    kiln_arg lo[3] = {kiln_arg_tensor(xd), kiln_arg_tensor(h), kiln_arg_i32(5)};
    size_t one = 1;
    ASSERT_OK(kiln_program_launch(p, "loose", 1, &one, NULL, 3, lo));
    uint16_t bits[N];
    ASSERT_OK(kiln_tensor_read(h, bits, sizeof bits));
    ck_assert_uint_eq(bits[0], 7);
    lo[1] = kiln_arg_tensor(x);
    ASSERT_ARG_REFUSED(p, "loose", 3, lo, "parameter 1 'h' (__global ushort*)", "2-byte dtype");
    kiln_tensor_release(h);
    kiln_tensor_release(c);
    kiln_tensor_release(x);
    kiln_tensor_release(xi);
    kiln_tensor_release(xd);
}

START_TEST(argument_kinds_checked)
{
    kiln_program *p = NULL;
    ASSERT_OK(kiln_program_build(dev, kinds_source, NULL, &p));
    check_kinds(p);
    kiln_program_release(p);
    /* Built again: from the disk cache where the driver's binaries are cached; the argument
     * info must survive that. */
    kiln_cache_stats before, after;
    ASSERT_OK(kiln_cache_stats_get(&before));
    ASSERT_OK(kiln_program_build(dev, kinds_source, NULL, &p));
    ASSERT_OK(kiln_cache_stats_get(&after));
    if (!simulated(dev))
        ck_assert_uint_eq(after.hits, before.hits + 1);
    check_kinds(p);
    kiln_program_release(p);
}
END_TEST

/* ---- building ---------------------------------------------------------------------------- */

START_TEST(syntax_error_gives_log)
{
    kiln_program *p = (kiln_program *)1;
    const char *bad = "__kernel void broken(__global float *x)\n"
                      "{\n"
                      "    x[0] = undeclared_thing_xyz;\n"
                      "}\n";
    ck_assert_int_eq(kiln_program_build(dev, bad, NULL, &p), KILN_ERR_BUILD_FAILED);
    ck_assert_ptr_null(p);
    ASSERT_ERROR_HAS("kiln_program_build");
    ASSERT_ERROR_HAS("undeclared_thing_xyz"); /* the compiler's own words */
    ASSERT_ERROR_HAS("error");
}
END_TEST

START_TEST(bad_build_arguments)
{
    kiln_program *p = (kiln_program *)1;
    ck_assert_int_eq(kiln_program_build(NULL, saxpy_source, NULL, &p), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(kiln_program_build(dev, NULL, NULL, &p), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("source is NULL");
    ck_assert_int_eq(kiln_program_build(dev, "", NULL, &p), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("source is empty");
    ck_assert_int_eq(kiln_program_build(dev, saxpy_source, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("out is NULL");
    /* Malformed options are refused before the driver sees them. */
    ck_assert_int_eq(kiln_program_build(dev, saxpy_source, "-DA=1\n-DB=2", &p),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("control character");
    ck_assert_int_eq(kiln_program_build(dev, saxpy_source, "-DA=1 B=2", &p),
                     KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("\"B=2\" does not start with '-'");
    ck_assert_int_eq(kiln__check_options("-D A=1  -I /tmp -U B -cl-fast-relaxed-math", "t"),
                     KILN_OK);
    ck_assert_int_eq(kiln__check_options("-D A=1 B", "t"), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kiln__check_options(NULL, "t"), KILN_OK);
    kiln_status s = kiln_program_build(dev, saxpy_source, "-no-such-option-xyz", &p);
    ck_assert_msg(s == KILN_ERR_INVALID_ARGUMENT || s == KILN_ERR_BUILD_FAILED, "%s",
                  kiln_last_error());
    ASSERT_ERROR_HAS("-no-such-option-xyz");
    ck_assert_ptr_null(p);
}
END_TEST

START_TEST(options_and_capability_macros)
{
    /* User options come after kiln's; the capability macro matches the device. */
    const char *src =
        "#ifndef USER_N\n#error USER_N missing\n#endif\n"
        "#if !defined(KILN_HAS_FP64) && WANT_FP64\n#error KILN_HAS_FP64 missing\n#endif\n"
        "#if defined(KILN_HAS_FP64) && !WANT_FP64\n#error KILN_HAS_FP64 set\n#endif\n"
        "__kernel void k(__global int *o) { o[0] = USER_N; }\n";
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(dev, &info), KILN_OK);
    char opts[64];
    snprintf(opts, sizeof opts, "-DUSER_N=7 -DWANT_FP64=%d", info.fp64 ? 1 : 0);
    kiln_program *p = NULL;
    kiln_status s = kiln_program_build(dev, src, opts, &p);
    ck_assert_msg(s == KILN_OK, "%s", kiln_last_error());
    kiln_program_release(p);
    ck_assert_int_eq(kiln_program_build(dev, src, NULL, &p), KILN_ERR_BUILD_FAILED);
    ASSERT_ERROR_HAS("USER_N missing");
}
END_TEST

START_TEST(double_without_fp64_hint)
{
    /* PoCL and Oclgrind both have fp64, so the no-fp64 path is tested on a fake info: the hint
     * kiln adds to the compiler's error when a source uses double on such a device. */
    kiln_device_info info;
    memset(&info, 0, sizeof info);
    const char *src = "__kernel void k(__global double *x) { x[0] = 1.0; }";
    /* A log as clang words it when cl_khr_fp64 is off. */
    const char *log = "<source>:1:26: error: use of type 'double' requires cl_khr_fp64 support";
    ck_assert_ptr_nonnull(strstr(kiln__build_hint(&info, src, log), "no fp64"));
    ck_assert_ptr_nonnull(strstr(kiln__build_hint(&info, src, log), "KILN_HAS_FP64"));
    ck_assert_str_eq(kiln__build_hint(&info, "__kernel void k(__global float *x) {}", log), "");
    ck_assert_str_eq(kiln__build_hint(&info, src, "error: expected ';'"), ""); /* a typo */
    info.fp64 = true;
    ck_assert_str_eq(kiln__build_hint(&info, src, log), "");
}
END_TEST

START_TEST(log_trimming)
{
    char buf[64];
    kiln__log_trim("short log", buf, sizeof buf);
    ck_assert_str_eq(buf, "short log");
    /* A long log whose first error comes late: the error line is kept. */
    char log[4096];
    memset(log, 'w', sizeof log);
    memcpy(log + 1000, "\nline 9: error: the real problem\n", 33);
    log[sizeof log - 1] = '\0';
    kiln__log_trim(log, buf, sizeof buf);
    ck_assert_ptr_nonnull(strstr(buf, "line 9: error"));
    ck_assert_ptr_nonnull(strstr(buf, "[log trimmed]"));
    ck_assert_uint_lt(strlen(buf), sizeof buf);
    /* No error line at all: the start is kept. */
    memset(log, 'x', sizeof log - 1);
    kiln__log_trim(log, buf, sizeof buf);
    ck_assert_int_eq(buf[0], 'x');
    ck_assert_uint_lt(strlen(buf), sizeof buf);
    /* Buffers smaller than the "[log trimmed]" marker get what fits (they once overflowed). */
    char small[8], one[1];
    kiln__log_trim(log, small, sizeof small);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    kiln__log_trim(log, one, sizeof one);
    ck_assert_str_eq(one, "");
}
END_TEST

static char tmpdir[128];

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

START_TEST(build_file_cases)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-test-program-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    char path[256];
    kiln_program *p = (kiln_program *)1;

    snprintf(path, sizeof path, "%s/missing.cl", tmpdir);
    ck_assert_int_eq(kiln_program_build_file(dev, path, NULL, &p), KILN_ERR_IO);
    ck_assert_ptr_null(p);
    ASSERT_ERROR_HAS(path);
    ASSERT_ERROR_HAS("No such file");

    ck_assert_int_eq(kiln_program_build_file(dev, tmpdir, NULL, &p), KILN_ERR_IO);
    ASSERT_ERROR_HAS("not a regular file");

    snprintf(path, sizeof path, "%s/empty.cl", tmpdir);
    write_file(path, "", 0);
    ck_assert_int_eq(kiln_program_build_file(dev, path, NULL, &p), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("empty");
    ASSERT_ERROR_HAS(path);

    snprintf(path, sizeof path, "%s/nul.cl", tmpdir);
    write_file(path, "__kernel void k() {}\0junk", 25);
    ck_assert_int_eq(kiln_program_build_file(dev, path, NULL, &p), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("NUL byte");

    snprintf(path, sizeof path, "%s/huge.cl", tmpdir);
    write_file(path, "//", 2);
    ck_assert_int_eq(truncate(path, (off_t)17 << 20), 0); /* sparse: no real 17 MiB written */
    ck_assert_int_eq(kiln_program_build_file(dev, path, NULL, &p), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("too large");

    snprintf(path, sizeof path, "%s/saxpy.cl", tmpdir);
    write_file(path, saxpy_source, strlen(saxpy_source));
    ck_assert_int_eq(kiln_program_build_file(dev, path, NULL, &p), KILN_OK);
    ck_assert_ptr_nonnull(strstr(kiln_program_kernel_names(p), "saxpy"));
    check_saxpy(dev, p, 10, NULL);
    kiln_program_release(p);

    ck_assert_int_eq(kiln_program_build_file(dev, NULL, NULL, &p), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("path is NULL");
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static cl_int CL_API_CALL no_arg_info(cl_kernel k, cl_uint i, cl_kernel_arg_info what, size_t n,
                                      void *v, size_t *ret)
{
    (void)k, (void)i, (void)what, (void)n, (void)v, (void)ret;
    return CL_KERNEL_ARG_INFO_NOT_AVAILABLE;
}

/* The address qualifiers but no type names (what some drivers give). */
static cl_int CL_API_CALL qualifiers_only(cl_kernel k, cl_uint i, cl_kernel_arg_info what, size_t n,
                                          void *v, size_t *ret)
{
    if (what != CL_KERNEL_ARG_ADDRESS_QUALIFIER)
        return CL_KERNEL_ARG_INFO_NOT_AVAILABLE;
    return clGetKernelArgInfo(k, i, what, n, v, ret);
}

START_TEST(without_argument_info)
{
    /* No argument info: the count and the driver's size checks only (documented). A driver
     * without argument info never wrote a cache entry with it: these builds are from source. */
    setenv("KILN_CACHE", "0", 1);
    kiln__diskcache_reset();
    kiln__cl.GetKernelArgInfo = no_arg_info;
    kiln_program *p = NULL;
    ASSERT_OK(kiln_program_build(dev, kinds_source, NULL, &p));
    int64_t n = 8;
    kiln_tensor *x = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &n, &x));
    kiln_arg a[5] = {kiln_arg_tensor(x), kiln_arg_f32(1.5f), kiln_arg_f32(3), kiln_arg_i64(2),
                     kiln_arg_local(8 * sizeof(float))};
    size_t g = 8, l = 8;
    ASSERT_OK(kiln_program_launch(p, "kinds", 1, &g, &l, 5, a)); /* f32 for the int: unseen */
    ASSERT_FAILS(kiln_program_launch(p, "kinds", 1, &g, &l, 4, a), KILN_ERR_INVALID_ARGUMENT,
                 "takes 5 arguments, 4 given");
    kiln_program_release(p);
    /* Qualifiers without type names: pointer against scalar is still checked. */
    kiln__cl.GetKernelArgInfo = qualifiers_only;
    ASSERT_OK(kiln_program_build(dev, kinds_source, NULL, &p));
    a[0] = kiln_arg_f64(4);
    ASSERT_FAILS(kiln_program_launch(p, "kinds", 1, &g, &l, 5, a), KILN_ERR_INVALID_ARGUMENT,
                 "kernel kinds, parameter 0 (__global type unknown): kiln_arg_f64() (f64) given");
    a[0] = kiln_arg_tensor(x);
    a[3] = kiln_arg_tensor(x);
    ASSERT_FAILS(kiln_program_launch(p, "kinds", 1, &g, &l, 5, a), KILN_ERR_INVALID_ARGUMENT,
                 "parameter 3");
    a[3] = kiln_arg_i64(2);
    ASSERT_OK(kiln_program_launch(p, "kinds", 1, &g, &l, 5, a));
    kiln__cl_reset();
    unsetenv("KILN_CACHE");
    kiln__diskcache_reset();
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_program_release(p);
    kiln_tensor_release(x);
}
END_TEST

/* ---- log hygiene (issue 10) --------------------------------------------------------------- */

/* stderr into a temporary file until restore_stderr; returns the saved descriptor. */
static int capture_stderr(FILE **file)
{
    fflush(stderr);
    *file = tmpfile();
    ck_assert_ptr_nonnull(*file);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fileno(*file), 2), 0);
    return saved;
}

/* Put stderr back and return what was written to it meanwhile (malloc'd). */
static char *restore_stderr(int saved, FILE *file)
{
    fflush(stderr);
    ck_assert_int_ge(dup2(saved, 2), 0);
    close(saved);
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    ck_assert_int_ge(size, 0);
    char *text = calloc((size_t)size + 1, 1);
    ck_assert_ptr_nonnull(text);
    rewind(file);
    ck_assert_uint_eq(fread(text, 1, (size_t)size, file), (size_t)size);
    fclose(file);
    return text;
}

static int count_of(const char *text, const char *sub)
{
    int n = 0;
    for (const char *p = strstr(text, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

static const char *broken_source = "__kernel void broken(__global float *x)\n"
                                   "{\n"
                                   "    x[0] = undeclared_thing_xyz;\n"
                                   "}\n";

START_TEST(silent_by_default)
{
    /* No KILN_LOG is warn (issue 22): a failed build prints kiln's one warning and nothing of the
     * driver's (PoCL's compiler printed "1 error generated."); KILN_LOG=off prints nothing. */
    unsetenv("KILN_LOG");
    FILE *f;
    int saved = capture_stderr(&f);
    kiln_program *p = NULL;
    kiln_status s = kiln_program_build(dev, broken_source, NULL, &p);
    char *text = restore_stderr(saved, f);
    ck_assert_int_eq(s, KILN_ERR_BUILD_FAILED);
    ck_assert_msg(
        count_of(text, "kiln: warn: kiln_program_build: the OpenCL C compiler rejected") == 1,
        "stderr got \"%s\"", text);
    ck_assert_msg(count_of(text, "\nkiln: ") == 0 && !strstr(text, "error generated"),
                  "stderr got more than the one warning: \"%s\"", text);
    free(text);
    setenv("KILN_LOG", "off", 1);
    saved = capture_stderr(&f);
    s = kiln_program_build(dev, broken_source, NULL, &p);
    text = restore_stderr(saved, f);
    unsetenv("KILN_LOG");
    ck_assert_int_eq(s, KILN_ERR_BUILD_FAILED);
    ck_assert_msg(text[0] == '\0', "KILN_LOG=off: stderr got \"%s\"", text);
    free(text);
}
END_TEST

START_TEST(each_error_logged_once)
{
    setenv("KILN_LOG", "debug", 1);
    FILE *f;
    int saved = capture_stderr(&f);
    /* A saved message put back (registry.c does) is not an error: "kiln: debug: KILN_OK:". */
    kiln__error(KILN_OK, "%s", "a restored message");
    kiln_program *p = NULL;
    kiln_status s = kiln_program_build(dev, broken_source, NULL, &p);
    /* The compiler's log once: in the message (it was also logged whole at warn level). */
    int mentions = count_of(kiln_last_error(), "undeclared_thing_xyz");
    /* A second release: once at debug, not again at error level. */
    kiln_tensor *t = vec(dev, (const float[]){1}, 1);
    kiln_tensor_release(t);
    kiln_tensor_release(t);
    char *text = restore_stderr(saved, f);
    unsetenv("KILN_LOG");
    ck_assert_int_eq(s, KILN_ERR_BUILD_FAILED);
    ck_assert_msg(!strstr(text, "KILN_OK"), "stderr: %s", text);
    ck_assert_msg(count_of(text, "rejected the program") == 1, "stderr: %s", text);
    ck_assert_msg(mentions >= 1 && count_of(text, "undeclared_thing_xyz") == mentions, "stderr: %s",
                  text);
    ck_assert_msg(count_of(text, "was already released") == 1, "stderr: %s", text);
    free(text);
    /* At warn level the build failure shows once too, and a rewrapped error once at the end. */
    setenv("KILN_LOG", "warn", 1);
    saved = capture_stderr(&f);
    s = kiln_program_build(dev, broken_source, NULL, &p);
    kiln__log_hold();
    kiln__error(KILN_ERR_NOT_FOUND, "inner");
    kiln__log_last_error(KILN_LOG_WARN);
    kiln__error(KILN_ERR_NOT_FOUND, "outer: %s", kiln_last_error());
    kiln__log_release();
    text = restore_stderr(saved, f);
    unsetenv("KILN_LOG");
    ck_assert_msg(count_of(text, "rejected the program") == 1, "stderr: %s", text);
    ck_assert_msg(count_of(text, "inner") == 1 && strstr(text, "kiln: warn: outer: inner"),
                  "stderr: %s", text);
    free(text);
}
END_TEST

START_TEST(positions_name_the_source)
{
    /* The driver's temporary file (PoCL: ~/.cache/pocl/kcache/tempfile_XXXXXX.cl:3:12) is
     * renamed to what the user built from. */
    kiln_program *p = NULL;
    ck_assert_int_eq(kiln_program_build(dev, broken_source, NULL, &p), KILN_ERR_BUILD_FAILED);
    ck_assert_msg(!strstr(kiln_last_error(), "tempfile"), "%s", kiln_last_error());
    if (!strstr(kiln_last_error(), ":3:"))
        test_skip("%s gives no positions in its build log", kiln_device_spec(dev));
    else
        ASSERT_ERROR_HAS("<source>:3:");
    char dir[] = "/tmp/kiln-test-positions-XXXXXX", path[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/broken.cl", dir);
    write_file(path, broken_source, strlen(broken_source));
    ck_assert_int_eq(kiln_program_build_file(dev, path, NULL, &p), KILN_ERR_BUILD_FAILED);
    ck_assert_msg(!strstr(kiln_last_error(), "tempfile"), "%s", kiln_last_error());
    char want[160];
    snprintf(want, sizeof want, "%s:3:", path);
    if (strstr(kiln_last_error(), ":3:"))
        ASSERT_ERROR_HAS(want);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(log_rename_cases)
{
    static const struct {
        const char *log, *name, *want;
    } cases[] = {
        {"error: /root/.cache/pocl/kcache/tempfile_GVKDZd.cl:3:12: use of undeclared identifier",
         "k.cl", "error: k.cl:3:12: use of undeclared identifier"},
        {"tempfile_a.cl:1:2: x\ntempfile_b.cl:10:1: y", NULL, "<source>:1:2: x\n<source>:10:1: y"},
        {"<kernel>:4:5: error: expected ';'", "/src/a b.cl",
         "/src/a b.cl:4:5: error: expected ';'"},
        {"<source>:1:1: warning", "mine.cl", "mine.cl:1:1: warning"},
        /* Left alone: real files (an #include), names not followed by a line, mid-word. */
        {"In file included from /inc/tempdefs.cl:2:\n/inc/x.cl:1:1: error", "k.cl",
         "In file included from /inc/tempdefs.cl:2:\n/inc/x.cl:1:1: error"},
        {"see tempfile_x.cl for details; tempfile_y.cl:abc", "k.cl",
         "see tempfile_x.cl for details; tempfile_y.cl:abc"},
        {"mytempfile_x.cl:1:1 a/tempfile.cl:2:2", "k.cl", "mytempfile_x.cl:1:1 a/tempfile.cl:2:2"},
        {"", "k.cl", ""},
        {"tempfile_x.cl:", "k.cl", "tempfile_x.cl:"},
        {"(tempfile_q.cl:7:1)", "", "(<source>:7:1)"},
        {"input.cl:3:12: error: x\n    y;\n    ^", "k.cl", "k.cl:3:12: error: x\n    y;\n    ^"},
        {"/inc/input.cl:3:12: error", "k.cl", "/inc/input.cl:3:12: error"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *got = kiln__log_rename(cases[i].log, cases[i].name);
        ck_assert_ptr_nonnull(got);
        ck_assert_msg(strcmp(got, cases[i].want) == 0, "case %zu: \"%s\", want \"%s\"", i, got,
                      cases[i].want);
        free(got);
    }
}
END_TEST

/* ---- built-in kernels -------------------------------------------------------------------- */

#define ARANGE_DEFINES "-DKILN_T=float -DKILN_TC=float"

START_TEST(builtin_kernel_runs)
{
    kiln__kernel *k = NULL, *again = NULL;
    kiln_status s =
        kiln__builtin_kernel(dev, "creation", ARANGE_DEFINES, "kiln_arange", "test", &k);
    ck_assert_msg(s == KILN_OK, "%s", kiln_last_error());
    ck_assert_int_eq(
        kiln__builtin_kernel(dev, "creation", ARANGE_DEFINES, "kiln_arange", "test", &again),
        KILN_OK);
    ck_assert_ptr_eq(k, again); /* kept for the device's lifetime */
    ck_assert_uint_ge(k->wg_size, 1);
    int64_t n = small ? 29 : 300;
    kiln_tensor *out = NULL;
    ck_assert_int_eq(kiln_tensor_empty(dev, KILN_F32, 1, &n, &out), KILN_OK);
    kiln_arg args[] = {kiln_arg_tensor(out), kiln_arg_i64(n), kiln_arg_f32(1.5f),
                       kiln_arg_f32(0.25f)};
    size_t g = (size_t)n;
    ck_assert_int_eq(kiln__kernel_launch(dev, k, "test", 1, &g, NULL, 4, args), KILN_OK);
    float got[300];
    ck_assert_int_eq(kiln_tensor_read(out, got, sizeof(float) * (size_t)n), KILN_OK);
    for (int64_t i = 0; i < n; i++)
        ck_assert_float_eq_tol(got[i], 1.5f + (float)i * 0.25f, 1e-5f);
    kiln_tensor_release(out);
}
END_TEST

START_TEST(builtin_errors)
{
    kiln__kernel *k = (kiln__kernel *)1;
    ck_assert_int_eq(kiln__builtin_kernel(dev, "no_such_source", "", "x", "test", &k),
                     KILN_ERR_NOT_FOUND);
    ck_assert_ptr_null(k);
    ASSERT_ERROR_HAS("no_such_source");
    ck_assert_int_eq(kiln__builtin_kernel(dev, "creation", ARANGE_DEFINES, "nope", "test", &k),
                     KILN_ERR_NOT_FOUND);
    ASSERT_ERROR_HAS("kiln_arange");
    /* A built-in source that does not build (its macros missing) is reported as a kiln bug. */
    ck_assert_int_eq(kiln__builtin_kernel(dev, "creation", "", "kiln_arange", "test", &k),
                     KILN_ERR_BUILD_FAILED);
    ASSERT_ERROR_HAS("creation.cl");
    ASSERT_ERROR_HAS("kiln bug");
    ck_assert_int_eq(kiln__builtin_kernel(NULL, "creation", "", "kiln_arange", "test", &k),
                     KILN_ERR_INVALID_ARGUMENT);
}
END_TEST

/* kiln_device_prewarm_part's progress calls, as a test sees them. */
typedef struct progress_log {
    int calls, first_done, first_total, last_done, last_total, backwards;
} progress_log;

static void log_progress(void *user, int done, int total)
{
    progress_log *log = user;
    if (log->calls++ == 0)
        log->first_done = done, log->first_total = total;
    else if (done < log->last_done)
        log->backwards++;
    log->last_done = done, log->last_total = total;
}

START_TEST(prewarm_part_checks_and_shares)
{
    int built = 7;
    ck_assert_int_eq(kiln_device_prewarm_part(NULL, 0, 1, NULL, NULL, &built),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(built, 0);
    ASSERT_ERROR_HAS("kiln_device_prewarm_part: dev is NULL");
    ck_assert_int_eq(kiln_device_prewarm(NULL, &built), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("kiln_device_prewarm: dev is NULL");
    static const int bad[][2] = {{0, 0}, {-1, 2}, {2, 2}, {0, -3}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        built = 7;
        ck_assert_int_eq(kiln_device_prewarm_part(dev, bad[i][0], bad[i][1], NULL, NULL, &built),
                         KILN_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(built, 0);
        ASSERT_ERROR_HAS("kiln_device_prewarm_part: part");
    }
    /* The shares are every parts-th program: among 2^20 parts the first holds the list's first
     * (one elementwise kernel) and the last none (the list is under a thousand long). progress
     * hears of each kernel. */
    progress_log log = {0};
    ck_assert_int_eq(kiln_device_prewarm_part(dev, 0, 1 << 20, log_progress, &log, &built),
                     KILN_OK);
    ck_assert_int_eq(built, 1);
    ck_assert_int_eq(log.calls, 2);
    ck_assert_int_eq(log.first_done, 0);
    ck_assert_int_eq(log.first_total, 1);
    ck_assert_int_eq(log.last_done, 1);
    ck_assert_int_eq(log.last_total, 1);
    log = (progress_log){0};
    ck_assert_int_eq(
        kiln_device_prewarm_part(dev, (1 << 20) - 1, 1 << 20, log_progress, &log, &built), KILN_OK);
    ck_assert_int_eq(built, 0);
    ck_assert_int_eq(log.calls, 1);
    ck_assert_int_eq(log.first_total, 0);
    ck_assert_int_eq(kiln_device_prewarm_part(dev, 5, 1 << 20, NULL, NULL, NULL), KILN_OK);
    /* A share of several kernels, built by kiln's threads: the count only goes up, one call per
     * kernel, and ends at the total (kiln-info's sum of its processes' last counts read 799 of
     * 800 when a thread's count reached the callback after a later one). */
    log = (progress_log){0};
    ck_assert_int_eq(kiln_device_prewarm_part(dev, 3, 100, log_progress, &log, &built), KILN_OK);
    ck_assert_int_gt(built, 1);
    ck_assert_int_eq(log.calls, built + 1);
    ck_assert_int_eq(log.backwards, 0);
    ck_assert_int_eq(log.last_done, built);
    ck_assert_int_eq(log.last_total, built);
}
END_TEST

struct race {
    const char *defines;
    kiln__kernel *k;
    kiln_status s;
};

static void *race_thread(void *arg)
{
    struct race *r = arg;
    r->s = kiln__builtin_kernel(dev, "creation", r->defines, "kiln_arange", "test", &r->k);
    return NULL;
}

START_TEST(builtin_built_once_across_threads)
{
    /* Unique defines, so neither the device's memory nor the disk holds this program yet. */
    char defines[128];
    snprintf(defines, sizeof defines, ARANGE_DEFINES " -DKILN_TEST_RACE=%ld", (long)getpid());
    setenv("KILN_CACHE", "0", 1); /* keep these one-off programs out of the disk cache */
    kiln__diskcache_reset();
    kiln_cache_stats before, after;
    ck_assert_int_eq(kiln_cache_stats_get(&before), KILN_OK);
    struct race r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i].defines = defines;
        ck_assert_int_eq(pthread_create(&th[i], NULL, race_thread, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(r[i].s, KILN_OK);
        ck_assert_ptr_eq(r[i].k, r[0].k);
    }
    ck_assert_int_eq(kiln_cache_stats_get(&after), KILN_OK);
    unsetenv("KILN_CACHE");
    kiln__diskcache_reset();
    ck_assert_uint_eq(after.misses - before.misses, 1);
    ck_assert_uint_eq(after.hits, before.hits);
}
END_TEST

START_TEST(choose_local_is_valid)
{
    kiln__kernel k = {.wg_size = 64, .wg_multiple = 8};
    size_t g[3], l[3];
    g[0] = 1000;
    kiln__choose_local(&k, 1, g, l);
    ck_assert_uint_eq(l[0], 64);
    g[0] = 5;
    kiln__choose_local(&k, 1, g, l);
    ck_assert_uint_eq(l[0], 8);
    k.wg_multiple = 48; /* a multiple that does not divide the limit */
    g[0] = 1000;
    kiln__choose_local(&k, 1, g, l);
    ck_assert_uint_eq(l[0], 48);
    k.wg_size = 1;
    k.wg_multiple = 1;
    kiln__choose_local(&k, 1, g, l);
    ck_assert_uint_eq(l[0], 1);
    k.wg_size = 100;
    g[0] = 1000, g[1] = 1000;
    kiln__choose_local(&k, 2, g, l);
    ck_assert_uint_le(l[0] * l[1], 100);
    ck_assert_uint_ge(l[0] * l[1], 32);
    /* Per-dimension device limits are respected too. */
    kiln__kernel lim = {.wg_size = 256, .wg_multiple = 1, .max_items = {4, 4, 2}};
    g[0] = 1000;
    kiln__choose_local(&lim, 1, g, l);
    ck_assert_uint_eq(l[0], 4);
    g[0] = 1000, g[1] = 1000, g[2] = 1000;
    kiln__choose_local(&lim, 3, g, l);
    ck_assert_uint_le(l[0], 4);
    ck_assert_uint_le(l[1], 4);
    ck_assert_uint_le(l[2], 2);
    g[0] = 1, g[1] = 3, g[2] = 1000;
    k.wg_size = 256;
    kiln__choose_local(&k, 3, g, l);
    ck_assert_uint_eq(l[0], 1);
    ck_assert_uint_eq(l[1], 4);
    ck_assert_uint_le(l[0] * l[1] * l[2], 256);
    /* CPU devices: groups long in dimension 0 (up to 64), the other dimensions fill the rest */
    kiln__kernel cpu = {
        .wg_size = 4096, .wg_multiple = 8, .max_items = {4096, 4096, 4096}, .cpu = true};
    g[0] = 3136, g[1] = 64, g[2] = 32; /* a [32, 64, 56 x 56] per-channel broadcast */
    kiln__choose_local(&cpu, 3, g, l);
    ck_assert_uint_eq(l[0], 64);
    ck_assert_uint_eq(l[1], 4);
    ck_assert_uint_eq(l[2], 1);
    g[0] = 5, g[1] = 1000;
    kiln__choose_local(&cpu, 2, g, l);
    ck_assert_uint_eq(l[0], 8);
    ck_assert_uint_eq(l[1], 32);
    g[0] = 1, g[1] = 2, g[2] = 1000;
    kiln__choose_local(&cpu, 3, g, l);
    ck_assert_uint_eq(l[0], 1);
    ck_assert_uint_eq(l[1], 2);
    ck_assert_uint_eq(l[2], 128);
    cpu.wg_size = 100; /* a kernel limit below 256 that is no power of two */
    cpu.max_items[0] = 16;
    g[0] = 3136, g[1] = 64, g[2] = 32;
    kiln__choose_local(&cpu, 3, g, l);
    ck_assert_uint_eq(l[0], 16);
    ck_assert_uint_le(l[0] * l[1] * l[2], 100);
    ck_assert_uint_ge(l[0] * l[1] * l[2], 64);
}
END_TEST

Suite *program_suite(void)
{
    Suite *s = suite_create("program");
    TCase *tc = tcase_create("launch");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, saxpy_matches_c_loop);
    tcase_add_test(tc, saxpy_on_every_device);
    tcase_add_test(tc, local_memory_argument);
    tcase_add_test(tc, scalars_of_each_dtype_arrive);
    tcase_add_test(tc, two_dimensional_launch);
    tcase_add_test(tc, launch_from_several_threads);
    tcase_add_test(tc, wrong_argument_count);
    tcase_add_test(tc, bad_sizes);
    tcase_add_test(tc, zero_global_is_noop_and_enqueue_errors);
    tcase_add_test(tc, empty_tensor_argument);
    tcase_add_test(tc, unknown_kernel_lists_kernels);
    tcase_add_test(tc, tensor_from_another_device);
    tcase_add_test(tc, bad_handles);
    tcase_add_test(tc, retain_and_release_count);
    tcase_add_test(tc, launch_runs_exactly_global);
    tcase_add_test(tc, padding_is_opt_in);
    tcase_add_test(tc, argument_kinds_checked);
    tcase_add_test(tc, without_argument_info);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("build");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, syntax_error_gives_log);
    tcase_add_test(tc, bad_build_arguments);
    tcase_add_test(tc, options_and_capability_macros);
    tcase_add_test(tc, double_without_fp64_hint);
    tcase_add_test(tc, log_trimming);
    tcase_add_test(tc, build_file_cases);
    tcase_add_test(tc, silent_by_default);
    tcase_add_test(tc, each_error_logged_once);
    tcase_add_test(tc, positions_name_the_source);
    tcase_add_test(tc, log_rename_cases);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("builtin");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, builtin_kernel_runs);
    tcase_add_test(tc, builtin_errors);
    tcase_add_test(tc, builtin_built_once_across_threads);
    tcase_add_test(tc, choose_local_is_valid);
    tcase_add_test(tc, prewarm_part_checks_and_shares);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}
