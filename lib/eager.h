/* eager.h - one elementwise op, described, and its eager kernel runner (eager.c): what the
 * elementwise ops (lib/ops/elementwise.c) and fusion.c, which defers such ops, share. */
#ifndef KILN_EAGER_H
#define KILN_EAGER_H

#include "kiln.h"
#include "ops/common.h"

typedef enum kiln__fkind {
    KILN__F_BINARY,   /* in[0] op in[1] */
    KILN__F_SCALAR,   /* in[0] op scalar */
    KILN__F_UNARY,    /* op(in[0]) */
    KILN__F_UNARY_BW, /* op'(in[0]) * in[1] */
    KILN__F_WHERE,    /* in[0] ? in[1] : in[2] */
    KILN__F_CAST,     /* in[0] converted to the result dtype */
} kiln__fkind;

/* One elementwise op, checked by its caller: the result's dtype and shape, the inputs. */
typedef struct kiln__fop {
    kiln__fkind kind;
    int op;              /* kiln_binary_op or kiln_unary_op */
    kiln_dtype in_dtype; /* the dtype it computes in (a where's a and b; a cast's source) */
    kiln_dtype dtype;    /* the result's */
    int ndim;
    const int64_t *shape;
    int nin;
    const kiln_tensor *in[3];
    kiln__scalar scalar;
} kiln__fop;

/* The eager kernel of op into res: op's inputs and res materialised (eager.c). */
kiln_status kiln__elementwise_run(const char *fn, kiln_device *dev, const kiln__fop *op,
                                  kiln_tensor *res);

#endif
