/* copy.c - kiln_tensor_reshape, kiln_tensor_clone and kiln_tensor_to: the tensor core's views
 * and copies (tensor.c) as ops, which autograd records and scopes see. */
#include "autograd.h"
#include "registry.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

kiln_status kiln_tensor_reshape(const kiln_tensor *t, int ndim, const int64_t *shape,
                                kiln_tensor **out)
{
    const char *op = "kiln_tensor_reshape";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__tensor_view(t, ndim, shape, op, out);
    return kiln__ag_record(s, op, KILN__AG_RESHAPE, NULL, 1, &t, out);
}

kiln_status kiln_tensor_clone(const kiln_tensor *t, kiln_tensor **out)
{
    const char *op = "kiln_tensor_clone";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__tensor_clone(t, op, out);
    return kiln__ag_record(s, op, KILN__AG_RESHAPE, NULL, 1, &t, out);
}

kiln_status kiln_tensor_to(const kiln_tensor *t, kiln_device *dev, kiln_tensor **out)
{
    const char *op = "kiln_tensor_to";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_handle(t, op, "tensor");
    if (s == KILN_OK)
        s = kiln__check_device(dev, op);
    if (s != KILN_OK)
        return s;
    if (dev == t->dev && kiln__scope_active()) /* a new handle, for the scope to release */
        return kiln_tensor_reshape(t, t->ndim, t->shape, out);
    if (dev == t->dev) {
        *out = kiln_tensor_retain((kiln_tensor *)t);
        return KILN_OK;
    }
    s = kiln__tensor_copy_to(t, dev, op, out);
    if (s != KILN_OK || t->nbytes == 0) /* an empty copy is not recorded */
        return s;
    return kiln__ag_record(KILN_OK, op, KILN__AG_TO, NULL, 1, &t, out);
}
