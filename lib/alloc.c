/* alloc.c - host allocations, with a failure a test can inject (see alloc.h). */
#include "alloc.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static atomic_bool counting;
static atomic_long count;
static atomic_long fail_at;

/* Whether this allocation is the one a test asked to fail; one relaxed load when not testing. */
static bool fails(void)
{
    if (!atomic_load_explicit(&counting, memory_order_relaxed))
        return false;
    long n = atomic_fetch_add(&count, 1) + 1;
    return n == atomic_load(&fail_at);
}

void *kiln__malloc(size_t size)
{
    return fails() ? NULL : malloc(size);
}

void *kiln__calloc(size_t n, size_t size)
{
    return fails() ? NULL : calloc(n, size);
}

void *kiln__realloc(void *p, size_t size)
{
    return fails() ? NULL : realloc(p, size);
}

char *kiln__strdup(const char *s)
{
    return fails() ? NULL : strdup(s);
}

void kiln__alloc_fail_at(long n)
{
    atomic_store(&counting, false);
    atomic_store(&count, 0);
    atomic_store(&fail_at, n < 0 ? 0 : n);
    atomic_store(&counting, n >= 0);
}

long kiln__alloc_count(void)
{
    return atomic_load(&count);
}
