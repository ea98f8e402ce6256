/* cache-helper.c - a separate process for the disk-cache tests: builds a small program N times
 * (different options each) on a device and prints the cache counters.
 * Usage: kiln-cache-helper SPEC N; prints "hits misses saves corrupt rejected write_errors". */
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"

static const char *source = "__kernel void scale(__global float *x, float a, int n)\n"
                            "{\n"
                            "    int i = get_global_id(0);\n"
                            "    if (i < n)\n"
                            "        x[i] *= a;\n"
                            "}\n";

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SPEC N\n", argv[0]);
        return 2;
    }
    kiln_device *dev;
    if (kiln_device_get(argv[1], &dev) != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        char options[64];
        snprintf(options, sizeof options, "-DKILN_HELPER_BUILD=%d", i);
        kiln_program *prog;
        if (kiln_program_build(dev, source, options, &prog) != KILN_OK) {
            fprintf(stderr, "%s\n", kiln_last_error());
            return 1;
        }
        kiln_program_release(prog);
    }
    kiln_cache_stats st;
    kiln_cache_stats_get(&st);
    printf("%llu %llu %llu %llu %llu %llu\n", (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.saves,
           (unsigned long long)st.corrupt, (unsigned long long)st.rejected,
           (unsigned long long)st.write_errors);
    return 0;
}
