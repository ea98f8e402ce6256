/* pci.c - display-class PCI devices from sysfs. */
#include "pci.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_hex(const char *path, unsigned long *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fscanf(f, "%lx", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

const char *kiln__pci_vendor_name(uint32_t vendor)
{
    switch (vendor) {
    case 0x10de:
        return "NVIDIA";
    case 0x1002:
        return "AMD";
    case 0x8086:
        return "Intel";
    default:
        return NULL;
    }
}

int kiln__pci_scan(const char *root, kiln__pci_gpu *out, int max)
{
    if (!root || !*root)
        root = getenv("KILN_SYSFS_ROOT");
    if (!root || !*root)
        root = "/sys";
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/bus/pci/devices", root) >= (int)sizeof dir)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        unsigned long cls = 0, vendor = 0;
        if (snprintf(path, sizeof path, "%s/%s/class", dir, e->d_name) >= (int)sizeof path)
            continue;
        if (read_hex(path, &cls) != 0 || (cls >> 16) != 0x03)
            continue;
        if (snprintf(path, sizeof path, "%s/%s/vendor", dir, e->d_name) >= (int)sizeof path)
            continue;
        if (read_hex(path, &vendor) != 0)
            continue;
        kiln__pci_gpu *g = &out[n++];
        snprintf(g->address, sizeof g->address, "%.31s", e->d_name);
        g->vendor = (uint32_t)vendor;
        g->driver[0] = '\0';
        char link[PATH_MAX];
        ssize_t len = -1;
        if (snprintf(path, sizeof path, "%s/%s/driver", dir, e->d_name) < (int)sizeof path)
            len = readlink(path, link, sizeof link - 1);
        if (len > 0) {
            link[len] = '\0';
            const char *base = strrchr(link, '/');
            snprintf(g->driver, sizeof g->driver, "%.31s", base ? base + 1 : link);
        }
    }
    closedir(d);
    return n;
}
