/* devices.c - the PyTorch device walkthrough, in C with kiln.
 *
 *   torch.cuda.is_available()        kiln_is_available(KILN_DEVICE_GPU)
 *   torch.cuda.device_count()        kiln_device_count(KILN_DEVICE_GPU)
 *   torch.cuda.get_device_name(i)    kiln_device_name(dev)
 *   torch.device("cuda" if ok else "cpu")   kiln_device_get("auto", &dev)
 *   t.to(dev)                        kiln_tensor_to(t, dev, &out)
 *
 * Usage: devices [SPEC]   (default: auto) */
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"

static int fail(const char *what, kiln_status s)
{
    fprintf(stderr, "devices: %s: %s: %s\n", what, kiln_status_string(s), kiln_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    const char *spec = argc > 1 ? argv[1] : "auto";

    /* Is a GPU available, how many, what are they called? */
    bool gpu = kiln_is_available(KILN_DEVICE_GPU);
    printf("GPU available: %s\n", gpu ? "yes" : "no");
    if (!gpu)
        printf("  why not: %s\n", kiln_unavailable_reason(KILN_DEVICE_GPU));
    int ngpu = kiln_device_count(KILN_DEVICE_GPU);
    printf("GPUs: %d, CPUs: %d\n", ngpu, kiln_device_count(KILN_DEVICE_CPU));
    for (int i = 0; i < kiln_device_count(KILN_DEVICE_ALL); i++) {
        kiln_device *d = kiln_device_at(i);
        printf("  %-6s %s\n", kiln_device_spec(d), kiln_device_name(d));
    }

    /* Pick a device: the GPU if there is one, else the CPU. */
    kiln_device *dev;
    kiln_status s = kiln_device_get(spec, &dev);
    if (s != KILN_OK)
        return fail("kiln_device_get", s);
    printf("using %s (%s); auto means %s\n", kiln_device_spec(dev), kiln_device_name(dev),
           kiln_auto_reason());

    /* A tensor made from host data, moved to the device, computed on, read back. */
    kiln_device *cpu;
    s = kiln_device_get("cpu", &cpu);
    if (s != KILN_OK)
        return fail("kiln_device_get(cpu)", s);
    const float host[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape[2] = {2, 3};
    kiln_tensor *a_cpu = NULL, *a = NULL, *b = NULL, *sum = NULL, *mixed = NULL;
    int rc = 1;
    if ((s = kiln_tensor_from_host(cpu, KILN_F32, 2, shape, host, &a_cpu)) != KILN_OK ||
        (s = kiln_tensor_to(a_cpu, dev, &a)) != KILN_OK ||
        (s = kiln_ones(dev, KILN_F32, 2, shape, &b)) != KILN_OK ||
        (s = kiln_add(a, b, &sum)) != KILN_OK) {
        rc = fail("compute", s);
        goto done;
    }
    float out[6];
    if ((s = kiln_tensor_read(sum, out, sizeof out)) != KILN_OK) {
        rc = fail("kiln_tensor_read", s);
        goto done;
    }
    printf("a + 1 on %s = [", kiln_device_spec(kiln_tensor_device(sum)));
    for (int i = 0; i < 6; i++)
        printf("%s%g", i ? ", " : "", (double)out[i]);
    printf("]\n");

    /* Mixing devices is an error, never a silent copy. */
    if (dev != cpu) {
        s = kiln_add(a_cpu, b, &mixed);
        printf("kiln_add(cpu tensor, %s tensor) -> %s\n  %s\n", kiln_device_spec(dev),
               kiln_status_string(s), kiln_last_error());
        if (s != KILN_ERR_DEVICE_MISMATCH)
            goto done;
    } else {
        printf("(only one device in use: run with a second device, e.g. POCL_DEVICES=\"pthread "
               "pthread\" devices cpu:1, to see the mixed-device error)\n");
    }
    rc = 0;
done:
    kiln_tensor_release(mixed);
    kiln_tensor_release(sum);
    kiln_tensor_release(b);
    kiln_tensor_release(a);
    kiln_tensor_release(a_cpu);
    return rc;
}
