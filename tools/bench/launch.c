/* launch.c - kiln-bench launch (not measured yet). */
#include <stdio.h>

#include "bench.h"

int bench_launch(bench_ctx *ctx)
{
    (void)ctx;
    fprintf(stderr, "kiln-bench: section 'launch' is not implemented yet\n");
    return 1;
}
