/* diagnose.c - why no device of a type is available (platforms, KILN_VISIBLE_DEVICES, unusable
 * devices, platforms that failed, GPUs on the PCI bus without an OpenCL driver), and what "auto"
 * selects and why. */
#include "diagnose.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clcall.h"
#include "pci.h"
#include "status.h"

static const char install_hint[] =
    "install an OpenCL driver: pocl-opencl-icd for the CPU, the NVIDIA driver's OpenCL ICD "
    "(nvidia-opencl-icd) for NVIDIA GPUs; check /etc/OpenCL/vendors (or OCL_ICD_VENDORS) and "
    "try clinfo";
/* Where a GPU on the PCI bus has its own diagnosis: the CPU half of install_hint alone. */
static const char cpu_install_hint[] =
    "install an OpenCL driver for the CPU (pocl-opencl-icd), or see to the GPU";

static void append(char *buf, size_t size, const char *fmt, ...) KILN__PRINTF(3, 4);
static void append(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used && used + 2 < size) {
        memcpy(buf + used, "; ", sizeof "; ");
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* Visible (listed) devices of a type. */
static int count_type(const kiln__census *c, kiln_device_type mask)
{
    int n = 0;
    for (int i = 0; i < c->ndevices; i++)
        n += c->descs[i].rank >= 0 && (c->descs[i].type & mask) != 0;
    return n;
}

/* Whether an OpenCL platform shows a GPU of this PCI vendor. A vendor's CPU runtime (Intel's)
 * does not count. */
static bool gpu_shown(const kiln__census *c, uint32_t vendor)
{
    for (int i = 0; i < c->ndevices; i++)
        if (c->descs[i].vendor_id == vendor && c->descs[i].type == KILN_DEVICE_GPU)
            return true;
    return false;
}

/* What to install for a GPU of this vendor, bound to this kernel driver. */
static const char *missing_driver(uint32_t vendor, const char *driver)
{
    if (vendor == 0x10de)
        return strcmp(driver, "nouveau") == 0
                   ? "it is driven by Nouveau, which has no compute support: install NVIDIA's "
                     "driver and its OpenCL ICD (Debian: nvidia-driver, nvidia-opencl-icd)"
                   : "install NVIDIA's driver and its OpenCL ICD (Debian: nvidia-opencl-icd); "
                     "in a container, /etc/OpenCL/vendors/nvidia.icd is often missing (mount "
                     "it, or use the NVIDIA container toolkit with the compute capability)";
    if (vendor == 0x1002)
        return "install AMD's OpenCL driver (ROCm's rocm-opencl-icd, or mesa-opencl-icd)";
    return "install Intel's OpenCL driver (intel-opencl-icd)";
}

/* NVIDIA's OpenCL platform when it is there but lists no device; -1 otherwise. */
static int empty_nvidia_platform(const kiln__census *c)
{
    for (int p = 0; p < c->nplatforms; p++)
        if (c->platform_nvidia && c->platform_nvidia[p] && c->platform_ndevices[p] == 0)
            return p;
    return -1;
}

/* Whether the NVIDIA driver's OpenCL library loads (the library an ICD file must name); why not
 * in why. KILN_TEST_NVIDIA_OPENCL_LIB names another file to try (tests). */
static bool nvidia_opencl_loads(char *why, size_t size)
{
    const char *lib = getenv("KILN_TEST_NVIDIA_OPENCL_LIB");
    void *h = dlopen(lib && *lib ? lib : "libnvidia-opencl.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        snprintf(why, size, "%s", err ? err : "not found");
        return false;
    }
    dlclose(h);
    return true;
}

/* NVIDIA's platform is there but lists no device: the likely causes, with what this process
 * sees of each; after lead (the GPU on the bus, or ""). */
static void explain_empty_nvidia(const kiln__census *c, int p, const char *lead, char *buf,
                                 size_t size)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char cvd_state[160];
    if (cvd)
        snprintf(cvd_state, sizeof cvd_state, "it is '%.64s' here", cvd);
    else
        snprintf(cvd_state, sizeof cvd_state, "CUDA_VISIBLE_DEVICES is not set here");
    const char *uvm = access("/dev/nvidia-uvm", F_OK) != 0          ? "it is missing here"
                      : access("/dev/nvidia-uvm", R_OK | W_OK) != 0 ? "this user cannot open it"
                                                                    : "it looks fine here";
    append(buf, size,
           "%sNVIDIA's OpenCL platform (%s) lists no device: likely CUDA_VISIBLE_DEVICES is set to "
           "an empty or wrong list (%s; unset it or list the GPU), or /dev/nvidia-uvm is missing "
           "or unreadable (%s; create it with nvidia-modprobe -u -c=0 or modprobe nvidia-uvm, and "
           "pass it into a container); nvidia-smi -L shows whether the driver sees the GPU",
           lead, c->platform_names[p], cvd_state, uvm);
}

/* An NVIDIA GPU on the nvidia driver that no OpenCL platform shows: NVIDIA's platform without
 * devices, a missing ICD file (the library loads), or a missing OpenCL library. */
static void explain_nvidia(const kiln__census *c, const kiln__pci_gpu *g, char *buf, size_t size)
{
    char why[512];
    int p = empty_nvidia_platform(c);
    if (p >= 0) {
        snprintf(why, sizeof why, "an NVIDIA GPU is on the PCI bus (%.32s, driver nvidia) but ",
                 g->address);
        explain_empty_nvidia(c, p, why, buf, size);
    } else if (nvidia_opencl_loads(why, sizeof why)) {
        const char *vendors = getenv("OCL_ICD_VENDORS");
        char note[320] = "";
        if (vendors && *vendors)
            snprintf(note, sizeof note,
                     "; OCL_ICD_VENDORS='%.200s' is set here, so the loader reads that instead "
                     "of /etc/OpenCL/vendors",
                     vendors);
        append(buf, size,
               "an NVIDIA GPU is on the PCI bus (%s, driver nvidia) and the driver's OpenCL "
               "library libnvidia-opencl.so.1 loads, but no OpenCL platform shows it: the ICD "
               "file naming that library is missing; as root: echo libnvidia-opencl.so.1 > "
               "/etc/OpenCL/vendors/nvidia.icd (or write that line to a file in a folder that "
               "OCL_ICD_VENDORS names)%s",
               g->address, note);
    } else {
        append(buf, size,
               "an NVIDIA GPU is on the PCI bus (%s, driver nvidia) but no OpenCL platform shows "
               "it and the driver's OpenCL part is missing (libnvidia-opencl.so.1 does not load: "
               "%s): install the NVIDIA driver's OpenCL library (Debian: nvidia-opencl-icd, "
               "which also writes /etc/OpenCL/vendors/nvidia.icd); in a container, use the "
               "NVIDIA container toolkit with the compute capability",
               g->address, why);
    }
}

/* A GPU on the PCI bus that no OpenCL platform shows: say which driver/ICD is missing. NVIDIA's
 * platform without devices is explained even when no NVIDIA GPU is found on the bus. */
static void explain_pci(const kiln__census *c, char *buf, size_t size)
{
    kiln__pci_gpu gpus[16];
    int n = kiln__pci_scan(NULL, gpus, 16);
    bool nvidia_explained = false;
    for (int i = 0; i < n; i++) {
        const char *vname = kiln__pci_vendor_name(gpus[i].vendor);
        if (!vname || gpu_shown(c, gpus[i].vendor))
            continue;
        if (gpus[i].vendor == 0x10de && strcmp(gpus[i].driver, "nvidia") == 0) {
            explain_nvidia(c, &gpus[i], buf, size);
            nvidia_explained = true;
            continue;
        }
        append(buf, size,
               "an %s GPU is on the PCI bus (%s, driver %s) but no OpenCL platform shows it: %s",
               vname, gpus[i].address, gpus[i].driver[0] ? gpus[i].driver : "none",
               missing_driver(gpus[i].vendor, gpus[i].driver));
    }
    int p = empty_nvidia_platform(c);
    if (p >= 0 && !nvidia_explained)
        explain_empty_nvidia(c, p, "", buf, size);
}

/* "gpu", or "OpenCL" for a mask of several types. */
static const char *mask_name(kiln_device_type mask)
{
    bool one =
        mask == KILN_DEVICE_CPU || mask == KILN_DEVICE_GPU || mask == KILN_DEVICE_ACCELERATOR;
    return one ? kiln__type_name(mask) : "OpenCL";
}

/* Devices of a type that exist but are not listed: hidden by KILN_VISIBLE_DEVICES or unusable;
 * or none at all. */
static void explain_absent(const kiln__census *c, kiln_device_type mask, char *buf, size_t size)
{
    int hidden = 0, unusable = 0, present = 0;
    for (int i = 0; i < c->ndevices; i++) {
        if (!(c->descs[i].type & mask))
            continue;
        present++;
        if (!c->descs[i].usable)
            unusable++;
        else if (!c->descs[i].visible)
            hidden++;
    }
    const char *vis = getenv("KILN_VISIBLE_DEVICES");
    if (c->visible_status != KILN_OK)
        append(buf, size, "%s", c->visible_error);
    else if (hidden)
        append(buf, size, "%d %s device(s) hidden by KILN_VISIBLE_DEVICES='%.200s'", hidden,
               mask_name(mask), vis ? vis : "");
    if (unusable)
        append(buf, size, "%d %s device(s) unavailable or without a compiler", unusable,
               mask_name(mask));
    if (!present) {
        char plats[1024] = "";
        for (int p = 0; p < c->nplatforms; p++)
            append(plats, sizeof plats, "%s: %d device(s)", c->platform_names[p],
                   c->platform_ndevices[p]);
        append(buf, size, "no OpenCL platform has a%s %s device (platforms: %s)",
               mask == KILN_DEVICE_GPU || mask == KILN_DEVICE_CPU ? "" : "n", mask_name(mask),
               plats);
    }
}

/* Platforms and devices that failed to answer may hide devices of any type. */
static void explain_failures(const kiln__census *c, char *buf, size_t size)
{
    for (const char *line = c->failures; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        append(buf, size, "%.*s", (int)len, line);
        line += len + (end ? 1 : 0);
    }
}

/* Why no visible device matches mask: hidden, unusable, absent, or a platform that failed. */
static void explain_type(const kiln__census *c, kiln_device_type mask, char *buf, size_t size)
{
    buf[0] = '\0';
    if (count_type(c, mask) > 0)
        return;
    /* A GPU on the PCI bus gets its own diagnosis; with no platform at all, the generic advice
     * ("install nvidia-opencl-icd") is given only where that diagnosis has nothing to say: it
     * would contradict "the library loads, only the ICD file is missing". Where a CPU device
     * would do too (auto), the CPU's driver is still named. */
    char pci[KILN__DIAG_SIZE] = "";
    if (mask & KILN_DEVICE_GPU)
        explain_pci(c, pci, sizeof pci);
    if (c->no_platform) {
        const char *hint = !pci[0]                  ? install_hint
                           : mask & KILN_DEVICE_CPU ? cpu_install_hint
                                                    : NULL;
        append(buf, size, "no OpenCL platform found (%s (%d))%s%s",
               kiln__cl_error_name(c->platform_error), (int)c->platform_error, hint ? ": " : "",
               hint ? hint : "");
    } else {
        explain_absent(c, mask, buf, size);
        explain_failures(c, buf, size);
    }
    if (pci[0])
        append(buf, size, "%s", pci);
    if (!buf[0])
        append(buf, size, "no %s device", mask_name(mask));
}

/* What "auto" selects and why. */
static void explain_auto(const kiln__census *c, kiln__diagnosis *d)
{
    const char *env = getenv("KILN_DEVICE");
    char *buf = d->auto_reason;
    size_t size = sizeof d->auto_reason;
    int i;
    buf[0] = '\0';
    if (c->visible_status != KILN_OK ||
        kiln__spec_resolve("auto", c->descs, c->ndevices, env, &i) != KILN_OK)
        return;
    char spec[32];
    kiln__spec_format(&c->descs[i], spec, sizeof spec);
    kiln_device_type type = c->descs[i].type;
    if (env && *env && strcmp(env, "auto") != 0) {
        snprintf(buf, size, "%s (KILN_DEVICE=%.64s)", spec, env);
    } else if (type == KILN_DEVICE_GPU) {
        snprintf(buf, size, "%s (first GPU)", spec);
    } else {
        if (snprintf(buf, size, "%s (no GPU: %s fallback; %s)", spec,
                     type == KILN_DEVICE_CPU ? "CPU" : "accelerator",
                     d->unavailable[1]) >= (int)size)
            kiln__log(KILN_LOG_DEBUG, "auto reason truncated");
    }
}

void kiln__diagnose(const kiln__census *c, kiln__diagnosis *out)
{
    static const kiln_device_type masks[] = {KILN_DEVICE_CPU, KILN_DEVICE_GPU,
                                             KILN_DEVICE_ACCELERATOR, KILN_DEVICE_ALL};
    for (int t = 0; t < 4; t++)
        explain_type(c, masks[t], out->unavailable[t], sizeof out->unavailable[t]);
    explain_auto(c, out);
}

const char *kiln__diagnosis_reason(const kiln__diagnosis *d, kiln_device_type type)
{
    switch (type) {
    case KILN_DEVICE_CPU:
        return d->unavailable[0];
    case KILN_DEVICE_GPU:
        return d->unavailable[1];
    case KILN_DEVICE_ACCELERATOR:
        return d->unavailable[2];
    default:
        return d->unavailable[3];
    }
}
