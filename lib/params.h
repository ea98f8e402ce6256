/* params.h - internal helpers of the parameter list (the public API is kiln.h "Parameters"). */
#ifndef KILN_PARAMS_H
#define KILN_PARAMS_H

#include "kiln.h"

/* Drop the entries added after the first n (a failed kiln_module_params leaves the list as it
 * was). */
void kiln__params_truncate(kiln_params *p, int n);

#endif
