/* header-alone.c - kiln.h compiles on its own, as pedantic C11 (built in every build). */
#include "kiln.h"
