/* train.c - kiln-bench train (not measured yet). */
#include <stdio.h>

#include "bench.h"

int bench_train(bench_ctx *ctx)
{
    (void)ctx;
    fprintf(stderr, "kiln-bench: section 'train' is not implemented yet\n");
    return 1;
}
