/* diagnose.h - why no device of a type is available, and what "auto" picks and why: the text of
 * kiln_unavailable_reason and kiln_auto_reason, written once from what enumeration found (a
 * kiln__census). GPUs on the PCI bus that no OpenCL platform shows are named with the driver
 * that is missing (pci.c scans the bus; for an NVIDIA GPU on the nvidia driver, whether the
 * driver's OpenCL library loads tells a missing ICD file from a missing library). Pure over its
 * input and the machine: registry.c calls it, it calls nothing of the registry's. */
#ifndef KILN_DIAGNOSE_H
#define KILN_DIAGNOSE_H

#include "spec.h"

#define KILN__DIAG_SIZE 4096

/* What enumeration found, as the diagnosis reads it. */
typedef struct kiln__census {
    bool no_platform;      /* clGetPlatformIDs found none or failed ... */
    cl_int platform_error; /* ... with this code */
    int nplatforms;
    const char (*platform_names)[128];
    const int *platform_ndevices; /* devices described per platform */
    const bool *platform_nvidia;  /* per platform: NVIDIA's own (vendor or name says NVIDIA) */
    int ndevices;
    const kiln__devdesc *descs; /* every device described, hidden and unusable ones included */
    kiln_status visible_status; /* KILN_OK, or a malformed KILN_VISIBLE_DEVICES ... */
    const char *visible_error;  /* ... and its message */
    const char *failures;       /* platforms and devices that failed to answer: one note per line */
} kiln__census;

typedef struct kiln__diagnosis {
    char unavailable[4][KILN__DIAG_SIZE]; /* per type: cpu, gpu, accelerator; any */
    char auto_reason[KILN__DIAG_SIZE];
} kiln__diagnosis;

/* Write every reason: for each type with no visible device, why (hidden, unusable, absent, a
 * platform that failed, a GPU without its driver); and which device "auto" (with KILN_DEVICE
 * from the environment) selects and why. */
void kiln__diagnose(const kiln__census *c, kiln__diagnosis *out);

/* The reason for one type: KILN_DEVICE_CPU, _GPU, _ACCELERATOR; any other mask is "any". "" when
 * devices of that type are visible. */
const char *kiln__diagnosis_reason(const kiln__diagnosis *d, kiln_device_type type);

#endif
