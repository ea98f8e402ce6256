/* custom_kernel.c - write your own kernel: saxpy (y = a*x + y) in OpenCL C, built with
 * kiln_program_build (cached on disk after the first run) and launched on kiln tensors with
 * kiln_program_launch. Checked against a plain C loop.
 *
 * Usage: custom_kernel [SPEC [N]]   (default: auto 100000) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"

/* The bounds check lets the same kernel run padded (kiln_program_pad_range); with local = NULL
 * the launch runs exactly n work-items, as in plain OpenCL. */
static const char *source = "__kernel void saxpy(__global float *y, __global const float *x,\n"
                            "                    float a, int n)\n"
                            "{\n"
                            "    int i = get_global_id(0);\n"
                            "    if (i < n)\n"
                            "        y[i] = a * x[i] + y[i];\n"
                            "}\n";

static int fail(const char *what, kiln_status s)
{
    fprintf(stderr, "custom_kernel: %s: %s: %s\n", what, kiln_status_string(s), kiln_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    const char *spec = argc > 1 ? argv[1] : "auto";
    int n = argc > 2 ? atoi(argv[2]) : 100000;
    if (n < 1 || n > (1 << 26)) {
        fprintf(stderr, "custom_kernel: N must be 1..%d\n", 1 << 26);
        return 2;
    }
    const float a = 2.5f;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    float *out = malloc(sizeof(float) * (size_t)n);
    if (!x || !y || !out)
        return fail("malloc", KILN_ERR_OUT_OF_MEMORY);
    for (int i = 0; i < n; i++) {
        x[i] = (float)i / (float)n;
        y[i] = 1.0f - (float)(i % 10);
    }

    kiln_device *dev;
    kiln_status s = kiln_device_get(spec, &dev);
    if (s != KILN_OK)
        return fail("kiln_device_get", s);

    /* Build once per device; the binary lands in the cache (see kiln_cache_dir()). */
    kiln_program *prog;
    s = kiln_program_build(dev, source, NULL, &prog);
    if (s != KILN_OK)
        return fail("kiln_program_build", s); /* the compiler's log is in the message */

    int64_t shape[1] = {n};
    kiln_tensor *tx = NULL, *ty = NULL;
    s = kiln_tensor_from_host(dev, KILN_F32, 1, shape, x, &tx);
    if (s == KILN_OK)
        s = kiln_tensor_from_host(dev, KILN_F32, 1, shape, y, &ty);
    if (s != KILN_OK)
        return fail("kiln_tensor_from_host", s);

    /* Arguments in the kernel's order, each checked against its parameter; local = NULL lets the
     * driver pick the work-group size. */
    kiln_arg args[] = {kiln_arg_tensor(ty), kiln_arg_tensor(tx), kiln_arg_f32(a), kiln_arg_i32(n)};
    size_t global = (size_t)n;
    s = kiln_program_launch(prog, "saxpy", 1, &global, NULL, 4, args);
    if (s != KILN_OK)
        return fail("kiln_program_launch", s);
    s = kiln_tensor_read(ty, out, sizeof(float) * (size_t)n); /* waits for the kernel */
    if (s != KILN_OK)
        return fail("kiln_tensor_read", s);

    double max_err = 0;
    for (int i = 0; i < n; i++) {
        double err = fabs((double)out[i] - ((double)a * x[i] + y[i]));
        max_err = err > max_err ? err : max_err;
    }
    kiln_cache_stats st;
    kiln_cache_stats_get(&st);
    printf("saxpy of %d floats on %s: max error vs C loop %.3g\n", n, kiln_device_spec(dev),
           max_err);
    printf("program cache: %s (hits %llu, builds %llu)\n",
           *kiln_cache_dir() ? kiln_cache_dir() : "off", (unsigned long long)st.hits,
           (unsigned long long)st.misses);

    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    kiln_program_release(prog);
    free(x);
    free(y);
    free(out);
    return max_err <= 1e-5 ? 0 : 1;
}
