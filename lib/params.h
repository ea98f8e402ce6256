/* params.h - internals of kiln_params (lib/params.c). Not part of the public API. */
#ifndef KILN_PARAMS_H
#define KILN_PARAMS_H

#include "kiln.h"

/* Drop the entries from index n on (releasing their tensors): undoes kiln_params_add calls
 * made after the list had n entries. */
void kiln__params_truncate(kiln_params *p, int n);

#endif
