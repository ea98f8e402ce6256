/* test-faults.c - a kernel fault reported by the driver: CL_OUT_OF_RESOURCES (or
 * CL_MEM_OBJECT_ALLOCATION_FAILURE) at a finish, read or enqueue is how NVIDIA reports an illegal
 * memory access in a kernel, after which the device's context is unusable. kiln reports
 * KILN_ERR_DEVICE_LOST, marks the device lost and fails every later call on it at once, without
 * calling the driver; the other devices keep working. The same codes at allocation stay out of
 * memory (with the cache emptied and the allocation retried). Faults are injected through the
 * kiln__cl table; kiln__device_clear_lost() undoes the mark after each case. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "lib/clcall.h"
#include "lib/registry.h"
#include "testutil.h"

static kiln_device *dev;
static struct kiln__cl_api real;

static void setup(void)
{
    dev = test_device();
    real = kiln__cl;
}

static void teardown(void)
{
    kiln__cl_reset();
    kiln__device_clear_lost(dev);
}

/* The message of a device lost after clfn failed with err (name and number). */
static void expected_lost(char *buf, size_t size, const char *clfn, const char *err)
{
    snprintf(buf, size,
             "%s was lost after %s failed with %s: a kernel probably accessed memory out of "
             "bounds; the device's context cannot be used again in this process",
             kiln_device_spec(dev), clfn, err);
}

/* ---- driver calls, counted: a lost device must not reach the driver ---- */

static int driver_calls;

#define COUNTED(ret, name, params, args)                                                           \
    static ret CL_API_CALL counted_##name params                                                   \
    {                                                                                              \
        driver_calls++;                                                                            \
        return real.name args;                                                                     \
    }

COUNTED(cl_int, Finish, (cl_command_queue q), (q))
COUNTED(cl_int, Flush, (cl_command_queue q), (q))
COUNTED(cl_mem, CreateBuffer, (cl_context c, cl_mem_flags f, size_t n, void *p, cl_int *e),
        (c, f, n, p, e))
COUNTED(cl_int, EnqueueReadBuffer,
        (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, void *p, cl_uint ne,
         const cl_event *w, cl_event *ev),
        (q, m, b, o, n, p, ne, w, ev))
COUNTED(cl_int, EnqueueWriteBuffer,
        (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n, const void *p, cl_uint ne,
         const cl_event *w, cl_event *ev),
        (q, m, b, o, n, p, ne, w, ev))
COUNTED(cl_int, EnqueueCopyBuffer,
        (cl_command_queue q, cl_mem s, cl_mem d, size_t so, size_t dof, size_t n, cl_uint ne,
         const cl_event *w, cl_event *ev),
        (q, s, d, so, dof, n, ne, w, ev))
COUNTED(cl_int, EnqueueFillBuffer,
        (cl_command_queue q, cl_mem m, const void *p, size_t ps, size_t o, size_t n, cl_uint ne,
         const cl_event *w, cl_event *ev),
        (q, m, p, ps, o, n, ne, w, ev))
COUNTED(void *, EnqueueMapBuffer,
        (cl_command_queue q, cl_mem m, cl_bool b, cl_map_flags f, size_t o, size_t n, cl_uint ne,
         const cl_event *w, cl_event *ev, cl_int *e),
        (q, m, b, f, o, n, ne, w, ev, e))
COUNTED(cl_int, EnqueueNDRangeKernel,
        (cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o, const size_t *g,
         const size_t *l, cl_uint ne, const cl_event *w, cl_event *ev),
        (q, k, d, o, g, l, ne, w, ev))
COUNTED(cl_program, CreateProgramWithSource,
        (cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *e), (c, n, s, l, e))
COUNTED(cl_int, EnqueueMarkerWithWaitList,
        (cl_command_queue q, cl_uint ne, const cl_event *w, cl_event *ev), (q, ne, w, ev))

static void count_driver_calls(void)
{
    driver_calls = 0;
    kiln__cl.Finish = counted_Finish;
    kiln__cl.Flush = counted_Flush;
    kiln__cl.CreateBuffer = counted_CreateBuffer;
    kiln__cl.EnqueueReadBuffer = counted_EnqueueReadBuffer;
    kiln__cl.EnqueueWriteBuffer = counted_EnqueueWriteBuffer;
    kiln__cl.EnqueueCopyBuffer = counted_EnqueueCopyBuffer;
    kiln__cl.EnqueueFillBuffer = counted_EnqueueFillBuffer;
    kiln__cl.EnqueueMapBuffer = counted_EnqueueMapBuffer;
    kiln__cl.EnqueueNDRangeKernel = counted_EnqueueNDRangeKernel;
    kiln__cl.CreateProgramWithSource = counted_CreateProgramWithSource;
    kiln__cl.EnqueueMarkerWithWaitList = counted_EnqueueMarkerWithWaitList;
}

/* ---- faults ---- */

static cl_int CL_API_CALL finish_faults(cl_command_queue q)
{
    (void)q;
    return CL_OUT_OF_RESOURCES;
}

static cl_int CL_API_CALL finish_alloc_fails(cl_command_queue q)
{
    (void)q;
    return CL_MEM_OBJECT_ALLOCATION_FAILURE;
}

static cl_int CL_API_CALL read_faults(cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n,
                                      void *p, cl_uint ne, const cl_event *w, cl_event *ev)
{
    (void)q, (void)m, (void)b, (void)o, (void)n, (void)p, (void)ne, (void)w, (void)ev;
    return CL_OUT_OF_RESOURCES;
}

static cl_int CL_API_CALL launch_faults(cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o,
                                        const size_t *g, const size_t *l, cl_uint ne,
                                        const cl_event *w, cl_event *ev)
{
    (void)q, (void)k, (void)d, (void)o, (void)g, (void)l, (void)ne, (void)w, (void)ev;
    return CL_OUT_OF_RESOURCES;
}

static int create_calls;

static cl_mem CL_API_CALL create_fails(cl_context c, cl_mem_flags f, size_t n, void *p, cl_int *e)
{
    (void)c, (void)f, (void)n, (void)p;
    create_calls++;
    *e = CL_OUT_OF_RESOURCES;
    return NULL;
}

static int touch_calls;

static cl_int CL_API_CALL touch_fails(cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t n,
                                      const void *p, cl_uint ne, const cl_event *w, cl_event *ev)
{
    (void)q, (void)m, (void)b, (void)o, (void)n, (void)p, (void)ne, (void)w, (void)ev;
    touch_calls++;
    return CL_OUT_OF_RESOURCES;
}

static const char source[] = "__kernel void twice(__global float *x)\n"
                             "{\n"
                             "    x[get_global_id(0)] *= 2.0f;\n"
                             "}\n";

/* Every later call on the lost device fails at once with KILN_ERR_DEVICE_LOST and msg, and no
 * driver call is made. t is a tensor on it. */
static void assert_fails_fast(kiln_tensor *t, const char *msg)
{
    const int64_t shape[1] = {64};
    float host[64] = {0};
    kiln_tensor *u = (kiln_tensor *)1;
    kiln_program *prog = (kiln_program *)1;
    void *ptr = (void *)1;
    count_driver_calls();
    ASSERT_FAILS(kiln_device_synchronize(dev), KILN_ERR_DEVICE_LOST, msg);
    ASSERT_ERROR_HAS("kiln_device_synchronize: ");
    ASSERT_FAILS(kiln_tensor_read(t, host, sizeof host), KILN_ERR_DEVICE_LOST, msg);
    ASSERT_ERROR_HAS("kiln_tensor_read: ");
    ASSERT_FAILS(kiln_tensor_write(t, host, sizeof host), KILN_ERR_DEVICE_LOST, msg);
    ASSERT_FAILS(kiln_tensor_empty(dev, KILN_F32, 1, shape, &u), KILN_ERR_DEVICE_LOST, msg);
    ck_assert_ptr_null(u);
    u = (kiln_tensor *)1;
    ASSERT_FAILS(kiln_tensor_from_host(dev, KILN_F32, 1, shape, host, &u), KILN_ERR_DEVICE_LOST,
                 msg);
    ck_assert_ptr_null(u);
    u = (kiln_tensor *)1;
    ASSERT_FAILS(kiln_tensor_clone(t, &u), KILN_ERR_DEVICE_LOST, msg);
    ck_assert_ptr_null(u);
    u = (kiln_tensor *)1;
    ASSERT_FAILS(kiln_add(t, t, &u), KILN_ERR_DEVICE_LOST, msg);
    ck_assert_ptr_null(u);
    ASSERT_FAILS(kiln_fill(t, 1.0), KILN_ERR_DEVICE_LOST, msg);
    ASSERT_FAILS(kiln_tensor_map(t, KILN_MAP_READ, &ptr), KILN_ERR_DEVICE_LOST, msg);
    ck_assert_ptr_null(ptr);
    ASSERT_FAILS(kiln_program_build(dev, source, NULL, &prog), KILN_ERR_DEVICE_LOST, msg);
    ck_assert_ptr_null(prog);
    ck_assert_ptr_null(kiln_device_cl_queue(dev));
    ck_assert_int_eq(driver_calls, 0);
    /* still lost: a lost device stays lost */
    ASSERT_FAILS(kiln_device_synchronize(dev), KILN_ERR_DEVICE_LOST, msg);
    kiln__cl_reset();
}

START_TEST(lost_at_finish)
{
    const int64_t shape[1] = {64};
    kiln_tensor *t;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &t));
    kiln__cl.Finish = finish_faults;
    char msg[512];
    expected_lost(msg, sizeof msg, "clFinish", "CL_OUT_OF_RESOURCES (-5)");
    ASSERT_FAILS(kiln_device_synchronize(dev), KILN_ERR_DEVICE_LOST, msg);
    ASSERT_ERROR_HAS("kiln_device_synchronize: ");
    ck_assert_str_eq(kiln_status_string(KILN_ERR_DEVICE_LOST), "KILN_ERR_DEVICE_LOST");
    kiln__cl_reset();
    assert_fails_fast(t, msg);
    kiln_tensor_release(t); /* releasing still works, and leaks nothing */
}
END_TEST

START_TEST(lost_at_read)
{
    const int64_t shape[1] = {64};
    float host[64];
    kiln_tensor *t;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &t));
    kiln__cl.EnqueueReadBuffer = read_faults;
    char msg[512];
    expected_lost(msg, sizeof msg, "clEnqueueReadBuffer", "CL_OUT_OF_RESOURCES (-5)");
    ASSERT_FAILS(kiln_tensor_read(t, host, sizeof host), KILN_ERR_DEVICE_LOST, msg);
    kiln__cl_reset();
    assert_fails_fast(t, msg);
    kiln_tensor_release(t);
}
END_TEST

START_TEST(lost_at_launch)
{
    const int64_t shape[1] = {64};
    kiln_tensor *t;
    kiln_program *prog;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &t));
    ASSERT_OK(kiln_program_build(dev, source, NULL, &prog));
    kiln__cl.EnqueueNDRangeKernel = launch_faults;
    char msg[512];
    expected_lost(msg, sizeof msg, "clEnqueueNDRangeKernel", "CL_OUT_OF_RESOURCES (-5)");
    kiln_arg arg = kiln_arg_tensor(t);
    size_t global[1] = {64};
    ASSERT_FAILS(kiln_program_launch(prog, "twice", 1, global, NULL, 1, &arg), KILN_ERR_DEVICE_LOST,
                 msg);
    kiln__cl_reset();
    count_driver_calls();
    ASSERT_FAILS(kiln_program_launch(prog, "twice", 1, global, NULL, 1, &arg), KILN_ERR_DEVICE_LOST,
                 msg);
    ck_assert_int_eq(driver_calls, 0);
    kiln__cl_reset();
    assert_fails_fast(t, msg);
    kiln_program_release(prog);
    kiln_tensor_release(t);
}
END_TEST

/* CL_MEM_OBJECT_ALLOCATION_FAILURE away from an allocation is a fault too. */
START_TEST(lost_at_finish_alloc_failure)
{
    kiln__cl.Finish = finish_alloc_fails;
    char msg[512];
    expected_lost(msg, sizeof msg, "clFinish", "CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)");
    ASSERT_FAILS(kiln_device_synchronize(dev), KILN_ERR_DEVICE_LOST, msg);
    kiln__cl_reset();
    ASSERT_FAILS(kiln_device_synchronize(dev), KILN_ERR_DEVICE_LOST, msg);
}
END_TEST

/* The other device (cpu:1 in -2dev, in the same context) keeps working. */
START_TEST(other_device_keeps_working)
{
    kiln_device *other = test_other_device(dev, true);
    if (!other)
        other = test_other_device(dev, false);
    if (!other) {
        test_skip("other_device_keeps_working: needs a second device");
        return;
    }
    const int64_t shape[1] = {1000};
    float x[1000], y[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = (float)i * 0.5f;
    kiln__cl.Finish = finish_faults;
    ck_assert_int_eq(kiln_device_synchronize(dev), KILN_ERR_DEVICE_LOST);
    kiln__cl_reset();
    kiln_tensor *a, *b;
    ASSERT_OK(kiln_tensor_from_host(other, KILN_F32, 1, shape, x, &a));
    ASSERT_OK(kiln_add(a, a, &b));
    ASSERT_OK(kiln_tensor_read(b, y, sizeof y));
    for (int i = 0; i < 1000; i++)
        ck_assert_float_eq(y[i], x[i] + x[i]);
    ASSERT_OK(kiln_device_synchronize(other));
    kiln_tensor *c = (kiln_tensor *)1;
    ck_assert_int_eq(kiln_tensor_to(a, dev, &c), KILN_ERR_DEVICE_LOST);
    ck_assert_ptr_null(c);
    ASSERT_ERROR_HAS("was lost after clFinish failed");
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

/* -5 at clCreateBuffer is still out of memory: the cache is emptied and the allocation retried
 * once, and the device stays usable. */
START_TEST(alloc_out_of_resources_is_oom)
{
    const int64_t shape[1] = {12345};
    kiln_tensor *t;
    /* a cached buffer of another size class, which the retry must have released */
    const int64_t small[1] = {100};
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, small, &t));
    kiln_tensor_release(t);
    kiln_memory_stats st;
    ASSERT_OK(kiln_device_memory_stats(dev, &st));
    ck_assert_uint_gt(st.cached_bytes, 0);
    create_calls = 0;
    kiln__cl.CreateBuffer = create_fails;
    t = (kiln_tensor *)1;
    ASSERT_FAILS(kiln_tensor_empty(dev, KILN_F32, 1, shape, &t), KILN_ERR_OUT_OF_MEMORY,
                 "clCreateBuffer failed with CL_OUT_OF_RESOURCES (-5)");
    ck_assert_ptr_null(t);
    ck_assert_int_eq(create_calls, 2);
    ASSERT_OK(kiln_device_memory_stats(dev, &st));
    ck_assert_uint_eq(st.cached_bytes, 0);
    kiln__cl_reset();
    ASSERT_OK(kiln_device_synchronize(dev));
    /* the first touch of a new buffer on a discrete GPU (lazy drivers allocate there) is
     * allocation too: the device's report says discrete GPU while it runs (CPU devices get
     * host memory kiln commits itself, see memory.c) */
    if (simulated(dev)) {
        test_skip("alloc_out_of_resources_is_oom: first touch (none on Oclgrind)");
    } else {
        kiln_device_info saved = dev->info;
        dev->info.type = KILN_DEVICE_GPU;
        dev->info.unified_memory = false;
        touch_calls = 0;
        kiln__cl.EnqueueWriteBuffer = touch_fails;
        kiln_status s = kiln_tensor_empty(dev, KILN_F32, 1, shape, &t);
        kiln__cl_reset();
        dev->info = saved;
        ck_assert_int_eq(s, KILN_ERR_OUT_OF_MEMORY);
        ASSERT_ERROR_HAS("clEnqueueWriteBuffer failed with CL_OUT_OF_RESOURCES (-5)");
        ck_assert_int_eq(touch_calls, 2);
    }
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &t));
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_tensor_release(t);
}
END_TEST

/* Other codes at a finish are plain OpenCL errors: the device is not marked lost. */
static cl_int CL_API_CALL finish_invalid(cl_command_queue q)
{
    (void)q;
    return CL_INVALID_COMMAND_QUEUE;
}

START_TEST(other_errors_do_not_lose_the_device)
{
    kiln__cl.Finish = finish_invalid;
    ASSERT_FAILS(kiln_device_synchronize(dev), KILN_ERR_OPENCL, "CL_INVALID_COMMAND_QUEUE (-36)");
    kiln__cl_reset();
    ASSERT_OK(kiln_device_synchronize(dev));
}
END_TEST

Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("device-lost");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, lost_at_finish);
    tcase_add_test(tc, lost_at_read);
    tcase_add_test(tc, lost_at_launch);
    tcase_add_test(tc, lost_at_finish_alloc_failure);
    tcase_add_test(tc, other_device_keeps_working);
    tcase_add_test(tc, alloc_out_of_resources_is_oom);
    tcase_add_test(tc, other_errors_do_not_lose_the_device);
    suite_add_tcase(s, tc);
    return s;
}
