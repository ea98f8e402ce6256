/* elementwise.c - kiln-bench elementwise (not measured yet). */
#include <stdio.h>

#include "bench.h"

int bench_elementwise(bench_ctx *ctx)
{
    (void)ctx;
    fprintf(stderr, "kiln-bench: section 'elementwise' is not implemented yet\n");
    return 1;
}
