/* startup.c - kiln-bench startup (not measured yet). */
#include <stdio.h>

#include "bench.h"

int bench_startup(bench_ctx *ctx)
{
    (void)ctx;
    fprintf(stderr, "kiln-bench: section 'startup' is not implemented yet\n");
    return 1;
}
