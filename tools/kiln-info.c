/* kiln-info.c - clinfo-style listing of the devices kiln sees (placeholder listing). */
#include <stdio.h>

#include "kiln.h"

int main(void)
{
    int n = kiln_device_count(KILN_DEVICE_ALL);
    for (int i = 0; i < n; i++) {
        kiln_device *d = kiln_device_at(i);
        printf("%s  %s\n", kiln_device_spec(d), kiln_device_name(d));
    }
    printf("auto: %s\ngpu: %s\n", kiln_auto_reason(), kiln_unavailable_reason(KILN_DEVICE_GPU));
    return n ? 0 : 1;
}
