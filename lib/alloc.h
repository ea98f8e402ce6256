/* alloc.h - every host allocation in lib/ goes through these, so that a test can make one fail
 * (kiln__alloc_fail_at). Internal: not part of the public API. */
#ifndef KILN_ALLOC_H
#define KILN_ALLOC_H

#include <stddef.h>

void *kiln__malloc(size_t size);
void *kiln__calloc(size_t n, size_t size);
void *kiln__realloc(void *p, size_t size);
char *kiln__strdup(const char *s);

/* Test only: count the allocations from now on (kiln__alloc_count) and make the n-th fail
 * (1-based; 0 fails none). kiln__alloc_fail_at(-1) stops counting. */
void kiln__alloc_fail_at(long n);

/* Test only: allocations since kiln__alloc_fail_at. */
long kiln__alloc_count(void);

#endif
