/* exit-helper.c - a program that returns from main with work still queued, as a PyTorch user's
 * would: a user kernel (and with "builtin", a built-in op) launched, the results never read, no
 * kiln_device_synchronize (unless "sync"). Exiting must be clean (issue 10, item 3): kiln finishes
 * every queue at exit, before the driver's (PoCL's LLVM) static destructors run. Usage:
 * kiln-exit-helper [SPEC [builtin,sync]]; exit status 0 unless a kiln call fails. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"

static const char *source = "__kernel void scale(__global float *x, float a)\n"
                            "{\n"
                            "    x[get_global_id(0)] *= a;\n"
                            "}\n";

static int fail(void)
{
    fprintf(stderr, "%s\n", kiln_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    kiln_device *dev;
    if (kiln_device_get(argc > 1 ? argv[1] : "auto", &dev) != KILN_OK)
        return fail();
    const int64_t shape[1] = {1 << 16};
    kiln_tensor *x, *y = NULL;
    static float host[1 << 16];
    if (kiln_tensor_from_host(dev, KILN_F32, 1, shape, host, &x) != KILN_OK)
        return fail();
    kiln_program *prog;
    if (kiln_program_build(dev, source, NULL, &prog) != KILN_OK)
        return fail();
    size_t global = (size_t)shape[0];
    kiln_arg args[2] = {kiln_arg_tensor(x), kiln_arg_f32(3.0f)};
    if (kiln_program_launch(prog, "scale", 1, &global, NULL, 2, args) != KILN_OK)
        return fail();
    bool builtin = argc > 2 && strstr(argv[2], "builtin");
    if (builtin && kiln_add(x, x, &y) != KILN_OK)
        return fail();
    if (argc > 2 && strstr(argv[2], "sync") && kiln_device_synchronize(dev) != KILN_OK)
        return fail();
    /* released, but never waited for */
    kiln_program_release(prog);
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    return 0;
}
