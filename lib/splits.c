/* splits.c - the caps on built-in launches and whether a device's built-in launches split
 * (moved out of launch.c so that program.c, below it, can ask). */
#include "splits.h"

#include <pthread.h>
#include <stdlib.h>

#include "registry.h"

static size_t max_items_dim0 = KILN__MAX_ITEMS_DIM0, max_groups_yz = KILN__MAX_GROUPS_YZ;
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;

/* A positive whole number below dflt from the environment variable name, else dflt. */
static size_t env_limit(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    return *end == '\0' && n > 0 && n < dflt ? (size_t)n : dflt;
}

/* TEST-ONLY knobs, read once here and nowhere else: KILN_TEST_MAX_GLOBAL lowers the work-items
 * per built-in launch in dimension 0 and KILN_TEST_MAX_GROUPS_Y the work-groups in dimensions
 * 1 and 2, so that the split paths (the kernels' grid-stride loops) run at small sizes
 * (tests/test-split.c). Not for users: they only make built-in ops slower. */
static void read_limits(void)
{
    max_items_dim0 = env_limit("KILN_TEST_MAX_GLOBAL", KILN__MAX_ITEMS_DIM0);
    max_groups_yz = env_limit("KILN_TEST_MAX_GROUPS_Y", KILN__MAX_GROUPS_YZ);
}

bool kiln__launch_splits(const kiln_device *dev)
{
    pthread_once(&limits_once, read_limits);
    return dev->info.type != KILN_DEVICE_CPU || max_items_dim0 != KILN__MAX_ITEMS_DIM0 ||
           max_groups_yz != KILN__MAX_GROUPS_YZ;
}

void kiln__launch_caps(size_t *items_dim0, size_t *groups_yz)
{
    pthread_once(&limits_once, read_limits);
    *items_dim0 = max_items_dim0;
    *groups_yz = max_groups_yz;
}
