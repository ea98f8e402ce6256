/* ref.h - an independent reference for device specs (grammar and resolution), written from
 * docs/devices.md's spec table rather than from lib/spec.c, for the fuzz targets to compare
 * against. */
#ifndef KILN_FUZZ_REF_H
#define KILN_FUZZ_REF_H

#include "lib/spec.h"

typedef enum ref_kind { REF_INVALID, REF_AUTO, REF_TYPE, REF_CUDA, REF_OPENCL } ref_kind;

typedef struct ref_spec {
    ref_kind kind;
    kiln_device_type type; /* REF_TYPE */
    long a, b;             /* index (REF_TYPE, REF_CUDA); platform and device (REF_OPENCL) */
} ref_spec;

/* Parse: 1..64 printable, space-free ASCII bytes; auto, cpu|gpu|accelerator|cuda[:N],
 * opencl:P:D; N, P, D decimal (leading zeros allowed), at most 1000000. */
ref_spec ref_parse(const char *s);

/* The index of the visible device a valid spec names over numbered devices, or -1. */
int ref_find(const ref_spec *r, const kiln__devdesc *d, int n);

/* Whether s is a canonical spec: cpu|gpu|accelerator ':' N without leading zeros. */
int ref_canonical(const char *s);

#endif
