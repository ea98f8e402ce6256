/* live.h - counts of the objects a program holds (modules, optimizers, programs, scopes; tensor.c
 * counts tensors), read by kiln_live_objects_get and the one-line leak report at exit
 * (livereport.c). */
#ifndef KILN_LIVE_H
#define KILN_LIVE_H

#include <stdint.h>

#include "kiln.h"

typedef enum kiln__live_kind {
    KILN__LIVE_MODULE,
    KILN__LIVE_OPTIMIZER,
    KILN__LIVE_PROGRAM,
    KILN__LIVE_SCOPE,
    KILN__LIVE_KINDS,
} kiln__live_kind;

/* One more (delta 1) or one fewer (-1) object of kind alive. Lock-free. */
void kiln__live_add(kiln__live_kind kind, int delta);

/* How many objects of kind are alive (never negative). */
uint64_t kiln__live_count(kiln__live_kind kind);

#endif
