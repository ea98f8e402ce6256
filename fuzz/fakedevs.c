/* fakedevs.c - the fake device list of a fuzz input (format in fakedevs.h). */
#include "fakedevs.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fuzz_fake_devices(const uint8_t *data, size_t size, kiln__devdesc *d, const uint8_t **rest,
                      size_t *rest_len)
{
    int n = 0, platform = 0, on_platform = 0;
    size_t i = 0;
    memset(d, 0, FUZZ_MAX_DEVS * sizeof *d);
    for (; i < size && data[i] != '\n'; i++) {
        uint8_t c = data[i];
        if (c == '|') {
            platform++;
            on_platform = 0;
            continue;
        }
        if (c >= '0' && c <= '9' && n > 0) {
            d[n - 1].compute_units = (uint32_t)(c - '0');
            continue;
        }
        const char *types = "gnacGNAC";
        const char *t = c ? strchr(types, c) : NULL;
        if (!t || n == FUZZ_MAX_DEVS)
            continue;
        int k = (int)(t - types);
        kiln__devdesc *x = &d[n++];
        memset(x, 0, sizeof *x);
        x->type = k % 4 < 2    ? KILN_DEVICE_GPU
                  : k % 4 == 2 ? KILN_DEVICE_ACCELERATOR
                               : KILN_DEVICE_CPU;
        x->nvidia = k % 4 == 1;
        x->vendor_id = x->nvidia ? 0x10de : 0;
        x->usable = k < 4;
        x->platform_index = platform;
        x->device_index = on_platform++;
        x->compute_units = 1;
        x->clock_mhz = 1000;
    }
    kiln__spec_number(d, n, false);
    *rest = i < size ? data + i + 1 : data + size;
    *rest_len = i < size ? size - i - 1 : 0;
    return n;
}

char *fuzz_strndup(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: property violated: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s)\n", cond);
    abort();
}

int fuzz_message_ok(const char *msg, size_t max)
{
    size_t n = strlen(msg);
    if (n == 0 || n >= max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)msg[i] < 0x20 || (unsigned char)msg[i] >= 0x7f)
            return 0;
    return 1;
}
