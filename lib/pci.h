/* pci.h - find display-class PCI devices in sysfs, to explain GPUs that OpenCL does not show. */
#ifndef KILN_PCI_H
#define KILN_PCI_H

#include <stdint.h>

typedef struct kiln__pci_gpu {
    char address[32]; /* "0000:01:00.0" */
    uint32_t vendor;  /* PCI vendor id: 0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel */
    char driver[32];  /* bound kernel driver ("nvidia", "nouveau"), "" if none */
} kiln__pci_gpu;

/* Scan <root>/bus/pci/devices for display controllers (class 0x03xxxx). root NULL or "" means
 * KILN_SYSFS_ROOT if set, else "/sys". Returns how many were found (at most max). */
int kiln__pci_scan(const char *root, kiln__pci_gpu *out, int max);

/* "NVIDIA", "AMD", "Intel", or NULL for other vendors. */
const char *kiln__pci_vendor_name(uint32_t vendor);

#endif
