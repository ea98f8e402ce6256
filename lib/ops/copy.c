/* copy.c - kiln_tensor_reshape, kiln_tensor_clone and kiln_tensor_to: the tensor core's views
 * and copies (tensor.c) as ops, which autograd records and scopes see; and the views and copies
 * a CNN reaches for: kiln_flatten, kiln_unsqueeze, kiln_squeeze, kiln_stack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "autograd.h"
#include "common.h"
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

/* A view of x with the given shape under op's name, recorded as a reshape (its gradient is
 * reshaped back). */
static kiln_status view_as(const kiln_tensor *x, int ndim, const int64_t *shape, const char *op,
                           kiln_tensor **out)
{
    kiln_status s = kiln__tensor_view(x, ndim, shape, op, out);
    return kiln__ag_record(s, op, KILN__AG_RESHAPE, NULL, 1, &x, out);
}

/* An axis of an ndim-D tensor (negative from the end) into *a, or an error naming op. */
static kiln_status axis_in(const char *op, const char *what, int axis, int ndim, int *a)
{
    if (axis < -ndim || axis >= ndim)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s %d is out of range for %d dimensions; use %d..%d", op, what,
                           axis, ndim, -ndim, ndim - 1);
    *a = axis < 0 ? axis + ndim : axis;
    return KILN_OK;
}

kiln_status kiln_flatten(const kiln_tensor *x, int start, int end, kiln_tensor **out)
{
    const char *op = "kiln_flatten";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_handle(x, op, "x");
    if (s != KILN_OK)
        return s;
    if (x->ndim == 0) { /* torch.flatten of a 0-d tensor: [1] */
        int a;
        if ((s = axis_in(op, "start", start, 1, &a)) != KILN_OK ||
            (s = axis_in(op, "end", end, 1, &a)) != KILN_OK)
            return s;
        const int64_t one = 1;
        return view_as(x, 1, &one, op, out);
    }
    int a = 0, b = 0;
    if ((s = axis_in(op, "start", start, x->ndim, &a)) != KILN_OK ||
        (s = axis_in(op, "end", end, x->ndim, &b)) != KILN_OK)
        return s;
    if (a > b)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: start %d comes after end %d (dimensions %d and %d)", op, start, end,
                           a, b);
    /* dimensions a..b become one; no overflow: the product is at most x's element count */
    int64_t shape[KILN_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < a; d++)
        shape[n++] = x->shape[d];
    int64_t merged = 1;
    for (int d = a; d <= b; d++)
        merged *= x->shape[d];
    shape[n++] = merged;
    for (int d = b + 1; d < x->ndim; d++)
        shape[n++] = x->shape[d];
    return view_as(x, n, shape, op, out);
}

kiln_status kiln_unsqueeze(const kiln_tensor *x, int axis, kiln_tensor **out)
{
    const char *op = "kiln_unsqueeze";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_handle(x, op, "x");
    if (s != KILN_OK)
        return s;
    if (x->ndim == KILN_MAX_DIMS)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: x already has %d dimensions, the most a tensor has", op,
                           KILN_MAX_DIMS);
    int a = 0;
    if ((s = axis_in(op, "axis", axis, x->ndim + 1, &a)) != KILN_OK)
        return s;
    int64_t shape[KILN_MAX_DIMS];
    for (int d = 0, k = 0; d <= x->ndim; d++)
        shape[d] = d == a ? 1 : x->shape[k++];
    return view_as(x, x->ndim + 1, shape, op, out);
}

kiln_status kiln_squeeze(const kiln_tensor *x, int axis, kiln_tensor **out)
{
    const char *op = "kiln_squeeze";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_handle(x, op, "x");
    if (s != KILN_OK)
        return s;
    int a = -1;
    if (axis != KILN_ALL_AXES && x->ndim > 0 &&
        (s = axis_in(op, "axis", axis, x->ndim, &a)) != KILN_OK)
        return s;
    if (axis != KILN_ALL_AXES && x->ndim == 0 && axis != 0 && axis != -1)
        return axis_in(op, "axis", axis, 1, &a);
    int64_t shape[KILN_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != 1 || (axis != KILN_ALL_AXES && d != a))
            shape[n++] = x->shape[d];
    return view_as(x, n, shape, op, out);
}

kiln_status kiln_stack(const kiln_tensor *const *xs, int n, int axis, kiln_tensor **out)
{
    const char *op = "kiln_stack";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!xs || n < 1)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s; pass at least one tensor", op,
                           !xs ? "xs is NULL" : "n is less than 1");
    kiln_status s = KILN_OK;
    for (int i = 0; i < n && s == KILN_OK; i++) {
        char name[32];
        snprintf(name, sizeof name, "xs[%d]", i);
        s = kiln__check_handle(xs[i], op, name);
        if (s == KILN_OK && !kiln__same_shape(xs[i], xs[0]->ndim, xs[0]->shape)) {
            char a[160], b[160];
            s = kiln__error(KILN_ERR_SHAPE_MISMATCH,
                            "%s: xs[%d] has shape %s but xs[0] has %s; stacked tensors need one "
                            "shape",
                            op, i, kiln__shape_str(a, sizeof a, xs[i]->ndim, xs[i]->shape),
                            kiln__shape_str(b, sizeof b, xs[0]->ndim, xs[0]->shape));
        }
    }
    if (s != KILN_OK)
        return s;
    kiln_tensor **views = kiln__calloc((size_t)n, sizeof(kiln_tensor *));
    if (!views)
        return kiln__host_oom(op);
    kiln__log_hold(); /* the inner calls' errors are rewrapped under kiln_stack's name */
    for (int i = 0; i < n && s == KILN_OK; i++)
        s = kiln_unsqueeze(xs[i], axis, &views[i]);
    if (s == KILN_OK)
        s = kiln_cat((const kiln_tensor *const *)views, n, axis, out);
    if (s != KILN_OK) {
        char *msg = kiln__strdup(kiln_last_error());
        const char *m = msg ? msg : "";
        if (strncmp(m, "kiln_unsqueeze: ", 16) == 0)
            m += 16;
        else if (strncmp(m, "kiln_cat: ", 10) == 0)
            m += 10;
        s = kiln__error(s, "%s: %s", op, m);
        free(msg);
    }
    kiln__log_release();
    for (int i = 0; i < n; i++)
        kiln_tensor_release(views[i]);
    free(views);
    return s;
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
    if (t->storage->pinned) /* host memory: onto its device, without waiting */
        return kiln__tensor_upload(t, dev, op, out);
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
