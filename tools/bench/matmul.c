/* matmul.c - kiln-bench matmul (not measured yet). */
#include <stdio.h>

#include "bench.h"

int bench_matmul(bench_ctx *ctx)
{
    (void)ctx;
    fprintf(stderr, "kiln-bench: section 'matmul' is not implemented yet\n");
    return 1;
}
