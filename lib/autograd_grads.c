/* autograd_grads.c - the gradient of every recorded op, written with kiln's public ops (grad mode
 * is off while they run). A broadcast input's gradient is summed back to its shape. */
#include <string.h>

#include "backward.h"
#include "ops/conv.h"
#include "ops/index.h"
#include "ops/rnn.h"
#include "status.h"
#include "tensor.h"

/* Temporaries of one gradient computation, released together; s is the first failure. */
typedef struct scratch {
    kiln_tensor *t[32];
    int n;
    kiln_status s;
} scratch;

/* Run call (which writes var) unless something failed already; keep var for release. */
#define RUN(sc, var, call)                                                                         \
    do {                                                                                           \
        if ((sc)->s == KILN_OK) {                                                                  \
            (sc)->s = (call);                                                                      \
            keep((sc), (var));                                                                     \
        }                                                                                          \
    } while (0)

static void keep(scratch *sc, kiln_tensor *t)
{
    if (!t)
        return;
    if (sc->n < (int)(sizeof sc->t / sizeof sc->t[0]))
        sc->t[sc->n++] = t;
    else
        kiln_tensor_release(t); /* cannot happen: the formulas below use fewer */
}

static void scratch_free(scratch *sc)
{
    for (int i = 0; i < sc->n; i++)
        kiln_tensor_release(sc->t[i]);
}

/* A [1] tensor of dtype holding v. */
static kiln_status scalar_t(kiln_device *dev, kiln_dtype dtype, double v, kiln_tensor **out)
{
    int64_t one = 1;
    return kiln_full(dev, dtype, 1, &one, v, out);
}

/* A zero tensor, written by a kernel (kiln_full) rather than a fill: Oclgrind's
 * uninitialised-value checker, which the tests run, does not count a clEnqueueFillBuffer. */
static kiln_status zeros(kiln_device *dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                         kiln_tensor **out)
{
    return kiln_full(dev, dtype, ndim, shape, 0.0, out);
}

/* g broadcast to shape (a copy). */
static kiln_status expand(const kiln_tensor *g, int ndim, const int64_t *shape, kiln_tensor **out)
{
    kiln_tensor *z = NULL;
    kiln_status s = zeros(g->dev, g->dtype, ndim, shape, &z);
    if (s == KILN_OK)
        s = kiln_add_out(z, g, z);
    if (s != KILN_OK) {
        kiln_tensor_release(z);
        z = NULL;
    }
    *out = z;
    return s;
}

/* g summed over the axes along which an input of shape `shape` was broadcast to g's shape. */
static kiln_status sum_to(const kiln_tensor *g, int ndim, const int64_t *shape, kiln_tensor **out)
{
    if (g->ndim == ndim && !memcmp(g->shape, shape, (size_t)ndim * sizeof *shape)) {
        *out = kiln_tensor_retain((kiln_tensor *)g);
        return KILN_OK;
    }
    kiln_tensor *cur = kiln_tensor_retain((kiln_tensor *)g);
    int lead = g->ndim - ndim;
    kiln_status s = KILN_OK;
    for (int d = 0; s == KILN_OK && d < g->ndim; d++) {
        if (cur->shape[d] == 1 || (d >= lead && shape[d - lead] != 1))
            continue;
        kiln_tensor *r = NULL;
        s = kiln_reduce(KILN_REDUCE_SUM, cur, d, true, &r);
        kiln_tensor_release(cur);
        cur = r;
    }
    kiln_tensor *res = NULL;
    if (s == KILN_OK)
        s = kiln_tensor_reshape(cur, ndim, shape, &res);
    kiln_tensor_release(cur);
    *out = res;
    return s;
}

/* Hand t over as the gradient of input i, summed to that input's shape. */
static void give(scratch *sc, const kiln__ag_node *nd, int i, const kiln_tensor *t,
                 kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[i].t;
    if (sc->s != KILN_OK || !t || !x->requires_grad)
        return;
    sc->s = sum_to(t, x->ndim, x->shape, &grads[i]);
}

/* A u8 mask as a 0/1 tensor of dtype. */
static void as_float(scratch *sc, const kiln_tensor *mask, kiln_dtype dtype, kiln_tensor **out)
{
    RUN(sc, *out, kiln_cast(mask, dtype, out));
}

static void binary_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                         kiln_tensor **grads)
{
    const kiln_tensor *a = nd->in[0].t, *b = nd->in[1].t;
    kiln_tensor *ga = NULL, *gb = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    switch (nd->a.op) {
    case KILN_BINARY_ADD:
        ga = gb = (kiln_tensor *)g;
        break;
    case KILN_BINARY_SUB:
        ga = (kiln_tensor *)g;
        if (b->requires_grad)
            RUN(sc, gb, kiln_unary(KILN_UNARY_NEG, g, &gb));
        break;
    case KILN_BINARY_MUL:
        RUN(sc, ga, kiln_mul(g, b, &ga));
        RUN(sc, gb, kiln_mul(g, a, &gb));
        break;
    case KILN_BINARY_DIV: /* d/db (a / b) = -(a / b) / b */
        RUN(sc, ga, kiln_div(g, b, &ga));
        if (b->requires_grad) {
            RUN(sc, t1, kiln_mul(ga, a, &t1));
            RUN(sc, t2, kiln_div(t1, b, &t2));
            RUN(sc, gb, kiln_unary(KILN_UNARY_NEG, t2, &gb));
        }
        break;
    case KILN_BINARY_POW: /* a^b: b a^(b-1) and a^b ln a */
        RUN(sc, t1, kiln_binary_scalar(KILN_BINARY_SUB, b, 1.0, &t1));
        RUN(sc, t2, kiln_binary(KILN_BINARY_POW, a, t1, &t2));
        RUN(sc, t3, kiln_mul(g, b, &t3));
        RUN(sc, ga, kiln_mul(t3, t2, &ga));
        if (b->requires_grad) {
            RUN(sc, t4, kiln_binary(KILN_BINARY_POW, a, b, &t4));
            RUN(sc, t1, kiln_unary(KILN_UNARY_LOG, a, &t1));
            RUN(sc, t2, kiln_mul(g, t4, &t2));
            RUN(sc, gb, kiln_mul(t2, t1, &gb));
        }
        break;
    case KILN_BINARY_MINIMUM:
    case KILN_BINARY_MAXIMUM: { /* the chosen side gets g; a tie splits it evenly */
        kiln_binary_op cmp = nd->a.op == KILN_BINARY_MAXIMUM ? KILN_BINARY_GT : KILN_BINARY_LT;
        RUN(sc, t1, kiln_binary(cmp, a, b, &t1));
        RUN(sc, t2, kiln_binary(KILN_BINARY_EQ, a, b, &t2));
        as_float(sc, t1, a->dtype, &t3);
        as_float(sc, t2, a->dtype, &t4);
        kiln_tensor *half = NULL, *m = NULL;
        RUN(sc, half, kiln_binary_scalar(KILN_BINARY_MUL, t4, 0.5, &half));
        RUN(sc, m, kiln_add(t3, half, &m));
        RUN(sc, ga, kiln_mul(g, m, &ga));
        RUN(sc, gb, kiln_sub(g, ga, &gb));
        break;
    }
    case KILN_BINARY_ATAN2: { /* atan2(a, b): b / (a^2 + b^2) and -a / (a^2 + b^2) */
        kiln_tensor *den = NULL, *q = NULL;
        RUN(sc, t1, kiln_mul(a, a, &t1));
        RUN(sc, t2, kiln_mul(b, b, &t2));
        RUN(sc, den, kiln_add(t1, t2, &den));
        RUN(sc, q, kiln_div(g, den, &q));
        RUN(sc, ga, kiln_mul(q, b, &ga));
        if (b->requires_grad) {
            RUN(sc, t3, kiln_mul(q, a, &t3));
            RUN(sc, gb, kiln_unary(KILN_UNARY_NEG, t3, &gb));
        }
        break;
    }
    default:
        break;
    }
    give(sc, nd, 0, ga, grads);
    give(sc, nd, 1, gb, grads);
}

static void scalar_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                         kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[0].t;
    double v = nd->a.scalar;
    kiln_tensor *gx = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    switch (nd->a.op) {
    case KILN_BINARY_ADD:
    case KILN_BINARY_SUB:
        gx = (kiln_tensor *)g;
        break;
    case KILN_BINARY_MUL:
    case KILN_BINARY_DIV:
        RUN(sc, gx, kiln_binary_scalar(nd->a.op, g, v, &gx));
        break;
    case KILN_BINARY_POW:
        RUN(sc, t1, kiln_binary_scalar(KILN_BINARY_POW, x, v - 1.0, &t1));
        RUN(sc, t2, kiln_binary_scalar(KILN_BINARY_MUL, t1, v, &t2));
        RUN(sc, gx, kiln_mul(g, t2, &gx));
        break;
    case KILN_BINARY_MINIMUM:
    case KILN_BINARY_MAXIMUM: {
        kiln_binary_op cmp = nd->a.op == KILN_BINARY_MAXIMUM ? KILN_BINARY_GT : KILN_BINARY_LT;
        RUN(sc, t1, kiln_binary_scalar(cmp, x, v, &t1));
        RUN(sc, t2, kiln_binary_scalar(KILN_BINARY_EQ, x, v, &t2));
        as_float(sc, t1, x->dtype, &t3);
        as_float(sc, t2, x->dtype, &t4);
        kiln_tensor *half = NULL, *m = NULL;
        RUN(sc, half, kiln_binary_scalar(KILN_BINARY_MUL, t4, 0.5, &half));
        RUN(sc, m, kiln_add(t3, half, &m));
        RUN(sc, gx, kiln_mul(g, m, &gx));
        break;
    }
    case KILN_BINARY_ATAN2: /* d/dx atan2(x, v) = v / (x^2 + v^2) */
        RUN(sc, t1, kiln_mul(x, x, &t1));
        RUN(sc, t2, kiln_binary_scalar(KILN_BINARY_ADD, t1, v * v, &t2));
        RUN(sc, t3, kiln_div(g, t2, &t3));
        RUN(sc, gx, kiln_binary_scalar(KILN_BINARY_MUL, t3, v, &gx));
        break;
    default:
        break;
    }
    give(sc, nd, 0, gx, grads);
}

/* The shape of x reduced with keepdim (every axis for KILN_ALL_AXES) and the count reduced. */
static int64_t kept_shape(const kiln_tensor *x, int axis, int64_t *shape)
{
    memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
    if (axis == KILN_ALL_AXES) {
        for (int d = 0; d < x->ndim; d++)
            shape[d] = 1;
        return x->numel;
    }
    int a = axis < 0 ? axis + x->ndim : axis;
    shape[a] = 1;
    return x->shape[a];
}

static void reduce_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                         kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[0].t;
    int64_t ks[KILN_MAX_DIMS];
    int64_t count = kept_shape(x, nd->a.axis, ks);
    kiln_tensor *gk = NULL, *gx = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *t4 = NULL;
    RUN(sc, gk, kiln_tensor_reshape(g, x->ndim, ks, &gk));
    switch (nd->a.op) {
    case KILN_REDUCE_SUM:
        RUN(sc, gx, expand(gk, x->ndim, x->shape, &gx));
        break;
    case KILN_REDUCE_MEAN:
        RUN(sc, t1, kiln_binary_scalar(KILN_BINARY_DIV, gk, (double)count, &t1));
        RUN(sc, gx, expand(t1, x->ndim, x->shape, &gx));
        break;
    case KILN_REDUCE_MAX:
    case KILN_REDUCE_MIN: /* shared evenly among the elements equal to the extreme */
        RUN(sc, t1, kiln_reduce(nd->a.op, x, nd->a.axis, true, &t1));
        RUN(sc, t2, kiln_binary(KILN_BINARY_EQ, x, t1, &t2));
        as_float(sc, t2, x->dtype, &t3);
        RUN(sc, t4, kiln_reduce(KILN_REDUCE_SUM, t3, nd->a.axis, true, &t4));
        RUN(sc, t1, kiln_div(gk, t4, &t1));
        RUN(sc, gx, kiln_mul(t3, t1, &gx));
        break;
    default:
        break;
    }
    give(sc, nd, 0, gx, grads);
}

/* C = op(A) op(B): dA and dB as products of g with the other operand, each with the transposes
 * that give the operand's own layout; batch broadcasting is summed back by give(). */
static void matmul_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                         kiln_tensor **grads)
{
    const kiln_tensor *a = nd->in[0].t, *b = nd->in[1].t;
    bool ta = nd->a.flags & KILN_MATMUL_TRANS_A, tb = nd->a.flags & KILN_MATMUL_TRANS_B;
    kiln_tensor *ga = NULL, *gb = NULL;
    if (a->requires_grad) {
        if (!ta)
            RUN(sc, ga, kiln_matmul_trans(g, b, tb ? 0 : KILN_MATMUL_TRANS_B, &ga));
        else
            RUN(sc, ga,
                kiln_matmul_trans(b, g, (tb ? KILN_MATMUL_TRANS_A : 0) | KILN_MATMUL_TRANS_B, &ga));
    }
    if (b->requires_grad) {
        if (!tb)
            RUN(sc, gb, kiln_matmul_trans(a, g, ta ? 0 : KILN_MATMUL_TRANS_A, &gb));
        else
            RUN(sc, gb,
                kiln_matmul_trans(g, a, KILN_MATMUL_TRANS_A | (ta ? KILN_MATMUL_TRANS_B : 0), &gb));
    }
    give(sc, nd, 0, ga, grads);
    give(sc, nd, 1, gb, grads);
}

static void slice_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                        kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[0].t;
    int a = nd->a.axis;
    int64_t len = x->shape[a], shape[KILN_MAX_DIMS];
    memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
    const kiln_tensor *parts[3];
    int n = 0;
    kiln_tensor *before = NULL, *after = NULL, *gx = NULL;
    if (nd->a.start > 0) {
        shape[a] = nd->a.start;
        RUN(sc, before, zeros(x->dev, x->dtype, x->ndim, shape, &before));
        parts[n++] = before;
    }
    parts[n++] = g;
    if (nd->a.end < len) {
        shape[a] = len - nd->a.end;
        RUN(sc, after, zeros(x->dev, x->dtype, x->ndim, shape, &after));
        parts[n++] = after;
    }
    if (n == 1)
        gx = (kiln_tensor *)g;
    else
        RUN(sc, gx, kiln_cat(parts, n, a, &gx));
    give(sc, nd, 0, gx, grads);
}

static void cat_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                      kiln_tensor **grads)
{
    int64_t off = 0;
    for (int i = 0; i < nd->n && sc->s == KILN_OK; i++) {
        const kiln_tensor *x = nd->in[i].t;
        int64_t len = x->shape[nd->a.axis];
        if (x->requires_grad)
            sc->s = kiln_slice(g, nd->a.axis, off, off + len, &grads[i]);
        off += len;
    }
}

static void softmax_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                          kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[0].t;
    int axis = nd->a.axis;
    kiln_tensor *y = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *gx = NULL;
    RUN(sc, y, kiln_softmax(x, axis, &y));
    if (nd->kind == KILN__AG_SOFTMAX) { /* y (g - sum(g y)) */
        RUN(sc, t1, kiln_mul(g, y, &t1));
        RUN(sc, t2, kiln_reduce(KILN_REDUCE_SUM, t1, axis, true, &t2));
        RUN(sc, t3, kiln_sub(g, t2, &t3));
        RUN(sc, gx, kiln_mul(y, t3, &gx));
    } else { /* g - softmax sum(g) */
        RUN(sc, t1, kiln_reduce(KILN_REDUCE_SUM, g, axis, true, &t1));
        RUN(sc, t2, kiln_mul(y, t1, &t2));
        RUN(sc, gx, kiln_sub(g, t2, &gx));
    }
    give(sc, nd, 0, gx, grads);
}

static void loss_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                       kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[0].t, *y = nd->in[1].t;
    kiln_tensor *l = NULL, *d = NULL, *gx = NULL, *gy = NULL;
    if (nd->n == 3) { /* d loss / d x, saved by the forward (kiln_mse_loss, kiln_cross_entropy) */
        d = kiln_tensor_retain(nd->in[2].t);
        keep(sc, d);
    } else if (nd->kind == KILN__AG_CROSS_ENTROPY) {
        RUN(sc, l, kiln_cross_entropy(x, y, &l, &d));
        keep(sc, d);
    } else {
        RUN(sc, l, kiln_mse_loss(x, y, &l, &d));
        keep(sc, d);
    }
    /* The loss's own backward with the implicit gradient 1: d is the gradient (the graph, and
     * with it the node's reference to d, goes with this backward). */
    if (nd->n == 3 && kiln__ag_unit_seed(g)) {
        gx = kiln_tensor_retain(d);
        keep(sc, gx);
    } else {
        RUN(sc, gx, kiln_mul(d, g, &gx));
    }
    if (nd->kind == KILN__AG_MSE && y->requires_grad)
        RUN(sc, gy, kiln_unary(KILN_UNARY_NEG, gx, &gy));
    give(sc, nd, 0, gx, grads);
    give(sc, nd, 1, gy, grads);
}

static void where_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                        kiln_tensor **grads)
{
    const kiln_tensor *cond = nd->in[0].t;
    kiln_tensor *z = NULL, *ga = NULL, *gb = NULL;
    RUN(sc, z, scalar_t(g->dev, g->dtype, 0.0, &z));
    if (nd->in[1].t->requires_grad)
        RUN(sc, ga, kiln_where(cond, g, z, &ga));
    if (nd->in[2].t->requires_grad)
        RUN(sc, gb, kiln_where(cond, z, g, &gb));
    give(sc, nd, 1, ga, grads);
    give(sc, nd, 2, gb, grads);
}

static void clamp_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                        kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[0].t;
    kiln_tensor *z = NULL, *m1 = NULL, *m2 = NULL, *t = NULL, *gx = NULL;
    RUN(sc, z, scalar_t(g->dev, g->dtype, 0.0, &z));
    RUN(sc, m1, kiln_binary_scalar(KILN_BINARY_GE, x, nd->a.lo, &m1));
    RUN(sc, m2, kiln_binary_scalar(KILN_BINARY_LE, x, nd->a.hi, &m2));
    RUN(sc, t, kiln_where(m1, g, z, &t));
    RUN(sc, gx, kiln_where(m2, t, z, &gx));
    give(sc, nd, 0, gx, grads);
}

/* The scatter-add back through index_select or gather; gather's index may be shorter than x
 * outside the axis, so its scatter (of the index's extent) is padded with zeros to x's shape. */
static void index_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                        kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[0].t, *idx = nd->in[1].t;
    int a = nd->a.axis;
    bool gather = nd->kind == KILN__AG_GATHER;
    kiln_tensor *cur = NULL;
    RUN(sc, cur, kiln__index_add(g, a, idx, gather, x->shape[a], &cur));
    for (int d = 0; gather && d < x->ndim; d++) {
        if (sc->s != KILN_OK || cur->shape[d] == x->shape[d])
            continue;
        int64_t shape[KILN_MAX_DIMS];
        memcpy(shape, cur->shape, (size_t)cur->ndim * sizeof *shape);
        shape[d] = x->shape[d] - cur->shape[d];
        kiln_tensor *z = NULL, *padded = NULL;
        RUN(sc, z, zeros(x->dev, x->dtype, x->ndim, shape, &z));
        RUN(sc, padded, kiln_cat((const kiln_tensor *[]){cur, z}, 2, d, &padded));
        cur = padded;
    }
    give(sc, nd, 0, cur, grads);
}

/* The mean (or sum) of t [N, C, R] over N and R, kept as [1, C, 1]. */
static void reduce_nr(scratch *sc, kiln_reduce_op op, const kiln_tensor *t, kiln_tensor **out)
{
    kiln_tensor *part = NULL;
    RUN(sc, part, kiln_reduce(op, t, 2, true, &part));
    RUN(sc, *out, kiln_reduce(op, part, 0, true, out));
}

/* t in input i's shape and dtype (a cast where they differ); NULL after a failure. */
static const kiln_tensor *as_input(scratch *sc, const kiln__ag_node *nd, int i,
                                   const kiln_tensor *t)
{
    const kiln_tensor *like = nd->in[i].t;
    kiln_tensor *cast = NULL, *shaped = NULL;
    if (sc->s == KILN_OK && t->dtype != like->dtype)
        RUN(sc, cast, kiln_cast(t, like->dtype, &cast));
    RUN(sc, shaped, kiln_tensor_reshape(cast ? cast : t, like->ndim, like->shape, &shaped));
    return shaped;
}

/* KILN__AG_BATCH_NORM (PyTorch's batch-norm backward): x as [N, C, R], M = N R values per
 * channel, xhat = (x - mean) invstd recomputed from what the node kept; per channel the sums over
 * N and R S1 = sum(g) and S2 = sum(g xhat); dbias = S1, dweight = S2, and
 * dx = invstd weight (g - S1 / M - xhat S2 / M) in training (the batch statistics depend on x),
 * invstd weight g in evaluation (weight 1 when there is none). Two reductions of each sum (over
 * R, then N) serve all three. In f32 at least (a 16-bit x and g are widened), each gradient in
 * its input's dtype. */
static void batch_norm_grads(scratch *sc, const kiln__ag_node *nd, const kiln_tensor *g,
                             kiln_tensor **grads)
{
    const kiln_tensor *x = nd->in[0].t, *w = nd->in[1].t, *b = nd->in[2].t;
    const kiln_tensor *mean = nd->in[3].t, *invstd = nd->in[4].t;
    int64_t c = x->shape[1], rest = x->numel / c / (x->shape[0] ? x->shape[0] : 1);
    const int64_t flat[3] = {x->shape[0], c, rest}, col[3] = {1, c, 1};
    double m = (double)(x->shape[0] * rest);
    bool training = nd->a.flags, gx = x->requires_grad, gw = w && w->requires_grad;
    bool gb = b && b->requires_grad;
    kiln_tensor *xr = NULL, *gr = NULL, *gwide = NULL, *d = NULL, *xhat = NULL, *p = NULL;
    kiln_tensor *s1 = NULL, *s2 = NULL;
    RUN(sc, xr, kiln_tensor_reshape(x, 3, flat, &xr));
    RUN(sc, gr, kiln_tensor_reshape(g, 3, flat, &gr));
    if (g->dtype == KILN_F16 || g->dtype == KILN_BF16)
        RUN(sc, gwide, kiln_cast(gr, KILN_F32, &gwide));
    const kiln_tensor *gg = gwide ? gwide : gr;
    RUN(sc, d, kiln_sub(xr, mean, &d));
    RUN(sc, xhat, kiln_mul(d, invstd, &xhat));
    if (gb || (gx && training))
        reduce_nr(sc, KILN_REDUCE_SUM, gg, &s1);
    if (gw || (gx && training)) {
        RUN(sc, p, kiln_mul(gg, xhat, &p));
        reduce_nr(sc, KILN_REDUCE_SUM, p, &s2);
    }
    if (gx) {
        kiln_tensor *w3 = NULL, *k = NULL, *a = NULL, *q = NULL, *q2 = NULL, *r = NULL;
        kiln_tensor *centred = NULL, *dx = NULL;
        const kiln_tensor *scale = invstd, *inner = gg;
        if (w) { /* invstd weight, per channel */
            RUN(sc, w3, kiln_tensor_reshape(w, 3, col, &w3));
            RUN(sc, k, kiln_mul(invstd, w3, &k));
            scale = k;
        }
        if (training) { /* g - S1 / M - xhat S2 / M */
            RUN(sc, a, kiln_binary_scalar(KILN_BINARY_MUL, s1, 1.0 / m, &a));
            RUN(sc, q, kiln_binary_scalar(KILN_BINARY_MUL, s2, 1.0 / m, &q));
            RUN(sc, q2, kiln_mul(xhat, q, &q2));
            RUN(sc, r, kiln_sub(gg, a, &r));
            RUN(sc, centred, kiln_sub(r, q2, &centred));
            inner = centred;
        }
        RUN(sc, dx, kiln_mul(inner, scale, &dx));
        give(sc, nd, 0, as_input(sc, nd, 0, dx), grads);
    }
    if (gw)
        give(sc, nd, 1, as_input(sc, nd, 1, s2), grads);
    if (gb)
        give(sc, nd, 2, as_input(sc, nd, 2, s1), grads);
}

kiln_status kiln__ag_grads(const kiln__ag_node *nd, const kiln_tensor *g, kiln_tensor **grads)
{
    scratch sc = {.n = 0, .s = KILN_OK};
    const kiln_tensor *x = nd->in[0].t;
    kiln_tensor *gx = NULL;
    switch (nd->kind) {
    case KILN__AG_BINARY:
        binary_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_SCALAR:
        scalar_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_UNARY:
        RUN(&sc, gx, kiln_unary_backward(nd->a.op, x, g, &gx));
        give(&sc, nd, 0, gx, grads);
        break;
    case KILN__AG_WHERE:
        where_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_CLAMP:
        clamp_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_CAST:
        RUN(&sc, gx, kiln_cast(g, x->dtype, &gx));
        give(&sc, nd, 0, gx, grads);
        break;
    case KILN__AG_REDUCE:
        reduce_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_MATMUL:
        matmul_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_RESHAPE:
        RUN(&sc, gx, kiln_tensor_reshape(g, x->ndim, x->shape, &gx));
        give(&sc, nd, 0, gx, grads);
        break;
    case KILN__AG_PERMUTE: {
        int inv[KILN_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++)
            inv[nd->a.perm[d]] = d;
        RUN(&sc, gx, kiln_permute(g, inv, &gx));
        give(&sc, nd, 0, gx, grads);
        break;
    }
    case KILN__AG_SLICE:
        slice_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_CAT:
        cat_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_TO:
        RUN(&sc, gx, kiln_tensor_to(g, x->dev, &gx));
        give(&sc, nd, 0, gx, grads);
        break;
    case KILN__AG_SOFTMAX:
    case KILN__AG_LOG_SOFTMAX:
        softmax_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_CROSS_ENTROPY:
    case KILN__AG_MSE:
        loss_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_INDEX_SELECT:
    case KILN__AG_GATHER:
        index_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_IM2COL: /* its adjoint: col2im */
        RUN(&sc, gx, kiln__col2im(g, x, &nd->a, &gx));
        give(&sc, nd, 0, gx, grads);
        break;
    case KILN__AG_CONV_DW:
    case KILN__AG_CONV_GEMM: {
        const kiln_tensor *w = nd->in[1].t;
        kiln_tensor *gw = NULL;
        if (sc.s == KILN_OK) {
            sc.s = (nd->kind == KILN__AG_CONV_DW ? kiln__conv_dw_bw : kiln__conv_chunked_bw)(
                g, x, w, &nd->a, x->requires_grad ? &gx : NULL, w->requires_grad ? &gw : NULL);
            keep(&sc, gx);
            keep(&sc, gw);
        }
        give(&sc, nd, 0, gx, grads);
        give(&sc, nd, 1, gw, grads);
        break;
    }
    case KILN__AG_MAX_POOL:
        RUN(&sc, gx, kiln__max_pool2d_bw(g, x, &nd->a, &gx));
        give(&sc, nd, 0, gx, grads);
        break;
    case KILN__AG_AVG_POOL:
        RUN(&sc, gx, kiln__avg_pool2d_bw(g, x, &nd->a, &gx));
        give(&sc, nd, 0, gx, grads);
        break;
    case KILN__AG_BATCH_NORM:
        batch_norm_grads(&sc, nd, g, grads);
        break;
    case KILN__AG_RNN_SCAN: {
        const kiln_tensor *ins[KILN__RNN_NODE_INPUTS];
        for (int i = 0; i < KILN__RNN_NODE_INPUTS; i++)
            ins[i] = nd->in[i].t;
        sc.s = kiln__rnn_scan_bw(&nd->a, g, ins, grads);
        break;
    }
    default:
        sc.s = kiln__error(KILN_ERR_UNSUPPORTED, "kiln_backward: %s has no gradient", nd->name);
        break;
    }
    scratch_free(&sc);
    if (sc.s != KILN_OK)
        for (int i = 0; i < nd->n; i++) {
            kiln_tensor_release(grads[i]);
            grads[i] = NULL;
        }
    return sc.s;
}
