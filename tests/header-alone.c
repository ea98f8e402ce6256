/* header-alone.c - kiln.h on its own. tests/check-headers.py compiles it as pedantic C11 with only
 * include/ and the build's include/ on the include path, in front of a CL/cl.h that stops the
 * build if anything includes it; tests/header-alone.cpp is the same check for C++. Also built
 * in every build (tests/meson.build). */
#include "kiln.h"

int kiln_header_alone(void);

int kiln_header_alone(void)
{
    const char *(*version)(void) = kiln_version;
    kiln_device *dev = NULL;
    kiln_tensor *t = NULL;
    kiln_status s = KILN_OK;
    return (int)s + (version == NULL) + (dev != NULL) + (t != NULL) + KILN_VERSION_MAJOR * 0;
}
