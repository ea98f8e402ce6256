/* amp.c - autocast's casts of an op's inputs (see amp.h). */
#include "amp.h"

#include <stdlib.h>

#include "../alloc.h"
#include "../autocast.h"
#include "../dtype.h"
#include "../status.h"
#include "../tensor.h"

kiln_status kiln__amp_cast(const char *op, kiln__amp_policy policy, int n, const kiln_tensor **in,
                           kiln_tensor **tmp)
{
    const kiln_device *dev = NULL;
    for (int i = 0; i < n; i++) {
        tmp[i] = NULL;
        if (!dev && in[i])
            dev = in[i]->dev;
    }
    kiln_dtype lower = kiln__autocast_lower(dev);
    if (lower == KILN_F32)
        return KILN_OK;
    for (int i = 0; i < n; i++) {
        if (!in[i])
            continue;
        kiln_dtype from = in[i]->dtype, to;
        if (policy == KILN__AMP_LOWER && from == KILN_F32)
            to = lower;
        else if (policy == KILN__AMP_F32 && kiln__dtype_is_narrow(from))
            to = KILN_F32;
        else
            continue; /* f64, integers and the target dtype stay (PyTorch's eligibility) */
        kiln__log_hold();
        kiln_status s = kiln_cast(in[i], to, &tmp[i]);
        if (s != KILN_OK) {
            char *msg = kiln__strdup(kiln_last_error());
            s = kiln__error(s, "%s: autocast's cast of an input to %s: %s", op, kiln_dtype_name(to),
                            msg ? msg : "");
            free(msg);
            kiln__log_release();
            kiln__amp_release(n, tmp);
            return s;
        }
        kiln__log_release();
        in[i] = tmp[i];
    }
    return KILN_OK;
}

bool kiln__amp_apply(const char *op, kiln__amp_policy policy, int n, const kiln_tensor **in,
                     kiln_tensor **tmp, kiln_status *s)
{
    *s = kiln__amp_cast(op, policy, n, in, tmp);
    if (*s != KILN_OK)
        return true;
    for (int i = 0; i < n; i++)
        if (tmp[i])
            return true;
    return false;
}

bool kiln__amp_f32_unary(kiln_unary_op op)
{
    return op == KILN_UNARY_EXP || op == KILN_UNARY_LOG || op == KILN_UNARY_RSQRT ||
           op == KILN_UNARY_SOFTPLUS;
}

void kiln__amp_release(int n, kiln_tensor **tmp)
{
    for (int i = 0; i < n; i++) {
        kiln_tensor_release(tmp[i]);
        tmp[i] = NULL;
    }
}
