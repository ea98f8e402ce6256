/* cache-helper.c - a separate process for the disk-cache tests: builds a small program N times
 * (different options each) on a device, runs each build once, checks the result and prints the
 * cache counters.
 * Usage: kiln-cache-helper SPEC N; prints "hits misses saves corrupt rejected write_errors
 * binary_calls", the last the number of clCreateProgramWithBinary calls (counted through the
 * kiln__cl table). KILN_TEST_HELPER_CRASH=1: the process kills itself (SIGKILL) inside
 * clCreateProgramWithBinary, as a driver that crashes on a cached binary would. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "lib/clcall.h"

static const char *source = "__kernel void scale(__global float *x, float a, int n)\n"
                            "{\n"
                            "    int i = get_global_id(0);\n"
                            "    if (i < n)\n"
                            "        x[i] *= a;\n"
                            "}\n";

static atomic_int binary_calls;
static bool crash;
static cl_program(CL_API_CALL *real_binary)(cl_context, cl_uint, const cl_device_id *,
                                            const size_t *, const unsigned char **, cl_int *,
                                            cl_int *);

static cl_program CL_API_CALL counted_binary(cl_context ctx, cl_uint n, const cl_device_id *devs,
                                             const size_t *lens, const unsigned char **bins,
                                             cl_int *bstatus, cl_int *err)
{
    atomic_fetch_add(&binary_calls, 1);
    if (crash)
        raise(SIGKILL);
    return real_binary(ctx, n, devs, lens, bins, bstatus, err);
}

/* Build program i, run it once on 5 elements and compare with x * (i + 2). */
static int build_and_run(kiln_device *dev, int i)
{
    char options[64];
    snprintf(options, sizeof options, "-DKILN_HELPER_BUILD=%d", i);
    kiln_program *prog = NULL;
    kiln_tensor *t = NULL;
    float x[5] = {1, -2, 3.5f, 0, 1e3f}, y[5];
    const int64_t shape[1] = {5};
    kiln_arg args[3];
    size_t global = 5;
    int rc = 1;
    if (kiln_program_build(dev, source, options, &prog) != KILN_OK ||
        kiln_tensor_from_host(dev, KILN_F32, 1, shape, x, &t) != KILN_OK)
        goto done;
    args[0] = kiln_arg_tensor(t);
    args[1] = kiln_arg_f32((float)(i + 2));
    args[2] = kiln_arg_i32(5);
    if (kiln_program_launch(prog, "scale", 1, &global, NULL, 3, args) != KILN_OK ||
        kiln_tensor_read(t, y, sizeof y) != KILN_OK)
        goto done;
    rc = 0;
    for (int j = 0; j < 5; j++)
        if (y[j] != x[j] * (float)(i + 2)) {
            fprintf(stderr, "build %d: element %d is %g, not %g\n", i, j, y[j],
                    x[j] * (float)(i + 2));
            rc = 3;
        }
done:
    if (rc == 1)
        fprintf(stderr, "%s\n", kiln_last_error());
    kiln_tensor_release(t);
    kiln_program_release(prog);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SPEC N\n", argv[0]);
        return 2;
    }
    const char *c = getenv("KILN_TEST_HELPER_CRASH");
    crash = c && strcmp(c, "1") == 0;
    real_binary = kiln__cl.CreateProgramWithBinary;
    kiln__cl.CreateProgramWithBinary = counted_binary;
    kiln_device *dev;
    if (kiln_device_get(argv[1], &dev) != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        int rc = build_and_run(dev, i);
        if (rc)
            return rc;
    }
    kiln_cache_stats st;
    kiln_cache_stats_get(&st);
    printf("%llu %llu %llu %llu %llu %llu %d\n", (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.saves,
           (unsigned long long)st.corrupt, (unsigned long long)st.rejected,
           (unsigned long long)st.write_errors, atomic_load(&binary_calls));
    return 0;
}
