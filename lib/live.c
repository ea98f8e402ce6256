/* live.c - counts of the objects a program holds (modules, optimizers, programs, scopes), kept
 * by the modules that make them; lib/livereport.c reads them (kiln_live_objects_get, the report
 * at exit). */
#include "live.h"

#include <stdatomic.h>

static atomic_int_fast64_t live[KILN__LIVE_KINDS];

void kiln__live_add(kiln__live_kind kind, int delta)
{
    atomic_fetch_add(&live[kind], delta);
}

uint64_t kiln__live_count(kiln__live_kind kind)
{
    int_fast64_t n = atomic_load(&live[kind]);
    return n > 0 ? (uint64_t)n : 0;
}
