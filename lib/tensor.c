/* tensor.c - placeholder until implemented. */
#include "status.h"
#include "tensor.h"

kiln_status kiln__check_tensor(const kiln_tensor *t, const char *op, const char *argname)
{
    if (!t)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, argname);
    return KILN_OK;
}
