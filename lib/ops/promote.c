/* promote.c - dtype promotion for the binary ops: cast the narrower operand, then the op. */
#include "promote.h"

#include <math.h>
#include <stdio.h>

#include "dtype.h"
#include "status.h"
#include "tensor.h"

/* Rank within a category: wider is higher. */
static int rank(kiln_dtype d)
{
    switch (d) {
    case KILN_U8:
        return 0;
    case KILN_I32:
    case KILN_F16:
    case KILN_BF16:
        return 1;
    case KILN_I64:
    case KILN_F32:
        return 2;
    default: /* f64 */
        return 3;
    }
}

kiln_dtype kiln__promote_types(kiln_dtype a, kiln_dtype b)
{
    bool fa = kiln__dtype_is_float(a), fb = kiln__dtype_is_float(b);
    if (fa != fb)
        return fa ? a : b;
    if (a != b && kiln__dtype_is_narrow(a) && kiln__dtype_is_narrow(b))
        return KILN_F32; /* f16 with bf16: neither holds the other (PyTorch's f32) */
    return rank(a) >= rank(b) ? a : b;
}

static bool usable(const kiln_tensor *t)
{
    return kiln__check_tensor(t, "promote", "tensor") == KILN_OK && kiln__dtype_valid(t->dtype);
}

static kiln_status failed(kiln_status s, const char *fn, const kiln_tensor *t, kiln_dtype to)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kiln_last_error());
    return kiln__error(s, "%s: promoting %s to %s: %s", fn, kiln_dtype_name(t->dtype),
                       kiln_dtype_name(to), msg);
}

kiln_status kiln__promote_pair(const char *fn, const kiln_tensor **a, const kiln_tensor **b,
                               kiln_tensor *tmp[2])
{
    tmp[0] = tmp[1] = NULL;
    /* Bad handles, devices or dtypes: the op reports them (this check must not set the error). */
    if (!*a || !*b || (*a)->magic != KILN__TENSOR_MAGIC || (*b)->magic != KILN__TENSOR_MAGIC ||
        (*a)->dtype == (*b)->dtype || (*a)->dev != (*b)->dev || !kiln__dtype_valid((*a)->dtype) ||
        !kiln__dtype_valid((*b)->dtype))
        return KILN_OK;
    if (!usable(*a) || !usable(*b))
        return KILN_OK;
    kiln_dtype to = kiln__promote_types((*a)->dtype, (*b)->dtype);
    const kiln_tensor **operand[2] = {a, b}; /* f16 with bf16 casts both to f32 */
    for (int i = 0; i < 2; i++) {
        if ((*operand[i])->dtype == to)
            continue;
        kiln_status s = kiln_cast(*operand[i], to, &tmp[i]);
        if (s != KILN_OK) {
            s = failed(s, fn, *operand[i], to);
            kiln__promote_release(tmp);
            return s;
        }
        *operand[i] = tmp[i];
    }
    return KILN_OK;
}

void kiln__promote_release(kiln_tensor *tmp[2])
{
    kiln_tensor_release(tmp[0]);
    kiln_tensor_release(tmp[1]);
    tmp[0] = tmp[1] = NULL;
}

kiln_status kiln__promote_scalar(const char *fn, const kiln_tensor **a, double scalar,
                                 kiln_tensor **tmp)
{
    *tmp = NULL;
    if (!*a || (*a)->magic != KILN__TENSOR_MAGIC || !kiln__dtype_valid((*a)->dtype) ||
        kiln__dtype_is_float((*a)->dtype) || (isfinite(scalar) && scalar == trunc(scalar)))
        return KILN_OK;
    if (!usable(*a))
        return KILN_OK;
    kiln_status s = kiln_cast(*a, KILN_F32, tmp);
    if (s != KILN_OK)
        return failed(s, fn, *a, KILN_F32);
    *a = *tmp;
    return KILN_OK;
}
