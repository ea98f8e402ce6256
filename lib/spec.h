/* spec.h - device numbering, KILN_VISIBLE_DEVICES and spec strings, as pure functions over a
 * list of device descriptions (testable on fake lists). */
#ifndef KILN_SPEC_H
#define KILN_SPEC_H

#include "kiln_cl.h"

/* What selection needs to know of one device. */
typedef struct kiln__devdesc {
    kiln_device_type type; /* one bit, from kiln__classify */
    int platform_index;    /* P and D of "opencl:P:D" */
    int device_index;
    bool nvidia;
    uint32_t vendor_id; /* CL_DEVICE_VENDOR_ID: the PCI vendor for GPUs */
    uint32_t compute_units;
    uint32_t clock_mhz;
    bool usable;    /* available, with a compiler */
    bool visible;   /* set by kiln__spec_number / kiln__spec_apply_visible */
    int type_index; /* "gpu:<type_index>"; -1 when hidden or unusable */
    int rank;       /* position in the listing over all types; -1 when hidden or unusable */
} kiln__devdesc;

/* A device reporting several type bits is a GPU first, then an accelerator, then a CPU. */
kiln_device_type kiln__classify(cl_device_type t);

/* "cpu", "gpu", "accelerator" ("?" otherwise). */
const char *kiln__type_name(kiln_device_type t);

/* Number the usable, visible devices: per type, GPUs fastest first (compute units x clock) with
 * ties in enumeration order; then set rank (GPUs, accelerators, CPUs). Marks every usable device
 * visible first unless keep_visible is true. */
void kiln__spec_number(kiln__devdesc *d, int n, bool keep_visible);

/* Apply a KILN_VISIBLE_DEVICES value: a comma-separated list of specs over the full numbering
 * ("gpu:1,cpu:0", "opencl:0:1"); "" hides every device. The listed devices stay visible and are
 * renumbered per type in the order listed. On a malformed list nothing is changed and
 * KILN_ERR_INVALID_ARGUMENT is returned with a message naming the variable. */
kiln_status kiln__spec_apply_visible(const char *list, kiln__devdesc *d, int n);

/* Resolve a spec to an index into d. env_device is KILN_DEVICE (NULL if unset), used by "auto".
 * KILN_ERR_INVALID_ARGUMENT for a malformed spec, KILN_ERR_NO_DEVICE (listing what exists) for
 * a well-formed one that names no visible device. */
kiln_status kiln__spec_resolve(const char *spec, const kiln__devdesc *d, int n,
                               const char *env_device, int *out);

/* Write the canonical spec ("gpu:0") of a numbered device. */
void kiln__spec_format(const kiln__devdesc *d, char *buf, size_t size);

/* Write "cpu:0, cpu:1" (or "none") listing the visible devices in rank order. */
void kiln__spec_list(const kiln__devdesc *d, int n, char *buf, size_t size);

#endif
