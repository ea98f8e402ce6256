/* leak-helper.c - a program that holds tensors (on every device, a view among them), a module,
 * an optimizer, a program and an open scope, checks kiln_live_objects_get against what it made,
 * then exits holding them ("leak") or after releasing everything ("clean"). tests/test-leaks.py
 * runs it and reads kiln's report at exit on stderr (at KILN_LOG=debug with the tensors' creation
 * sites). Usage: kiln-leak-helper leak|clean; exit
 * status 0 unless a kiln call or a count is wrong (the reason on stdout). */
#include <stdio.h>
#include <string.h>

#include "kiln.h"

static int failed(const char *what)
{
    printf("FAIL: %s: %s\n", what, kiln_last_error());
    return 1;
}

/* The live counts are exactly these. */
static int expect(const char *when, uint64_t tensors, uint64_t bytes, uint64_t others)
{
    kiln_live_objects o;
    if (kiln_live_objects_get(&o) != KILN_OK)
        return failed("kiln_live_objects_get");
    if (o.tensors != tensors || o.tensor_bytes != bytes || o.modules != others ||
        o.optimizers != others || o.programs != others || o.scopes != others) {
        printf("FAIL: %s: %llu tensors (%llu bytes), %llu modules, %llu optimizers, %llu programs, "
               "%llu scopes; expected %llu (%llu bytes) and %llu of each other kind\n",
               when, (unsigned long long)o.tensors, (unsigned long long)o.tensor_bytes,
               (unsigned long long)o.modules, (unsigned long long)o.optimizers,
               (unsigned long long)o.programs, (unsigned long long)o.scopes,
               (unsigned long long)tensors, (unsigned long long)bytes, (unsigned long long)others);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "leak") != 0 && strcmp(argv[1], "clean") != 0)) {
        fprintf(stderr, "usage: kiln-leak-helper leak|clean\n");
        return 2;
    }
    if (kiln_live_objects_get(NULL) != KILN_ERR_INVALID_ARGUMENT ||
        !strstr(kiln_last_error(), "kiln_live_objects_get"))
        return failed("kiln_live_objects_get(NULL)");
    if (expect("at start", 0, 0, 0))
        return 1;
    /* on every device: a [256] f32 tensor (1024 bytes) and a view of it (no bytes of its own) */
    int ndev = kiln_device_count(KILN_DEVICE_ALL);
    kiln_tensor *x[8] = {0}, *v[8] = {0};
    const int64_t n = 256;
    for (int i = 0; i < ndev && i < 8; i++)
        if (kiln_full(kiln_device_at(i), KILN_F32, 1, &n, 1.0, &x[i]) != KILN_OK ||
            kiln_tensor_reshape(x[i], 1, &n, &v[i]) != KILN_OK)
            return failed("a tensor");
    int made = ndev < 8 ? ndev : 8;
    /* a module with one [2, 4] f32 weight (32 bytes), an optimizer over it, a program, a scope */
    kiln_device *dev = kiln_device_at(0);
    kiln_module *m = NULL;
    kiln_params *ps = NULL;
    kiln_optimizer *opt = NULL;
    kiln_program *prog = NULL;
    kiln_scope *sc = NULL;
    if (kiln_linear_create(dev, KILN_F32, 4, 2, false, KILN_INIT_DEFAULT, 1, &m) != KILN_OK ||
        kiln_params_create(&ps) != KILN_OK || kiln_module_params(m, "", ps) != KILN_OK ||
        kiln_sgd_create(ps, 0.1, 0, 0, &opt) != KILN_OK)
        return failed("a module and its optimizer");
    kiln_params_free(ps); /* the optimizer and the module hold the weight */
    if (kiln_program_build(dev, "__kernel void k(__global float *x) { x[0] = 1; }", NULL, &prog) !=
            KILN_OK ||
        kiln_scope_begin(&sc) != KILN_OK)
        return failed("a program and a scope");
    if (expect("holding them", 2 * (uint64_t)made + 1, 1024 * (uint64_t)made + 32, 1))
        return 1;
    printf("made %d tensors on %d devices\n", 2 * made + 1, made);
    if (strcmp(argv[1], "leak") == 0)
        return 0;
    kiln_scope_end(sc);
    kiln_program_release(prog);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    for (int i = 0; i < made; i++) {
        kiln_tensor_release(v[i]);
        kiln_tensor_release(x[i]);
    }
    if (kiln_device_synchronize(dev) != KILN_OK)
        return failed("kiln_device_synchronize");
    return expect("after releasing everything", 0, 0, 0);
}
