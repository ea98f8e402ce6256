/* transfer.c - kiln-bench transfer (not measured yet). */
#include <stdio.h>

#include "bench.h"

int bench_transfer(bench_ctx *ctx)
{
    (void)ctx;
    fprintf(stderr, "kiln-bench: section 'transfer' is not implemented yet\n");
    return 1;
}
