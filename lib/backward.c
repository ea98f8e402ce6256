/* backward.c - kiln_backward: reverse-mode autograd over the nodes autograd.c records
 * (topological order by creation, gradients computed with kiln's own public ops with grad mode
 * off, committed to the leaves only when every step succeeded) and graph release. The gradient
 * formulas are in autograd_grads.c. Above the ops (the autograd layer, lib/layers.txt). */
#include "backward.h"
#include "autocast.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "autograd_node.h"
#include "dtype.h"
#include "fusion.h"
#include "profiler.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

static _Thread_local const kiln_tensor *unit_seed; /* see kiln__ag_unit_seed */

bool kiln__ag_unit_seed(const kiln_tensor *g)
{
    return g && g == unit_seed;
}

/* Whether the op kind needs the value (not only the shape) of input i in its backward: those
 * inputs are version-checked at backward. */
static bool needs_value(const kiln__ag_node *nd, int i)
{
    switch (nd->kind) {
    case KILN__AG_BINARY:
    case KILN__AG_SCALAR:
        return nd->a.op != KILN_BINARY_ADD && nd->a.op != KILN_BINARY_SUB;
    case KILN__AG_REDUCE:
        return nd->a.op == KILN_REDUCE_MAX || nd->a.op == KILN_REDUCE_MIN;
    case KILN__AG_WHERE:
    case KILN__AG_INDEX_SELECT:
    case KILN__AG_GATHER:
        return i == (nd->kind == KILN__AG_WHERE ? 0 : 1);
    case KILN__AG_UNARY:
    case KILN__AG_CLAMP:
    case KILN__AG_MATMUL:
    case KILN__AG_SOFTMAX:
    case KILN__AG_LOG_SOFTMAX:
    case KILN__AG_CROSS_ENTROPY:
    case KILN__AG_MSE:
    case KILN__AG_RNN_SCAN:
    case KILN__AG_BATCH_NORM:
    case KILN__AG_MAX_POOL:
        return true;
    default:
        return false;
    }
}

/* ---- backward -------------------------------------------------------------------------------- */

typedef struct plan {
    kiln__ag_node **nodes;
    size_t nnodes, cap;
    kiln_tensor **leaves;
    size_t nleaves, lcap;
} plan;

static bool push(void ***arr, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        void **a = kiln__realloc(*arr, c * sizeof *a);
        if (!a)
            return false;
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = p;
    return true;
}

static kiln_status saved_modified(const kiln__ag_node *nd, int i)
{
    char buf[160];
    const kiln_tensor *t = nd->in[i].t;
    return kiln__error(KILN_ERR_STATE,
                       "kiln_backward: input %d of %s (shape %s) was modified in place after "
                       "%s used it (version %u, saved at version %u), but its backward needs "
                       "the old values; modify a copy (kiln_tensor_clone) instead, or do the "
                       "write before the op",
                       i + 1, nd->name, kiln__shape_str(buf, sizeof buf, t->ndim, t->shape),
                       nd->name, atomic_load(&t->storage->version), nd->in[i].version);
}

/* Check one node before any work: not freed, saved inputs unchanged, differentiable. */
static kiln_status check_node(const kiln__ag_node *nd)
{
    if (nd->freed)
        return kiln__error(KILN_ERR_STATE,
                           "kiln_backward: the graph through %s was already freed by an earlier "
                           "kiln_backward; pass KILN_BACKWARD_RETAIN_GRAPH to that call to "
                           "backward through the graph again",
                           nd->name);
    for (int i = 0; i < nd->n; i++) {
        const kiln_tensor *t = nd->in[i].t;
        if (!t)
            continue;
        if (needs_value(nd, i) && atomic_load(&t->storage->version) != nd->in[i].version)
            return saved_modified(nd, i);
        if (nd->kind == KILN__AG_UNSUPPORTED && t->requires_grad)
            return kiln__error(KILN_ERR_UNSUPPORTED,
                               "kiln_backward: %s has no gradient in kiln (input %d requires "
                               "grad); compute it with grad mode off or on a tensor that "
                               "does not require grad",
                               nd->name, i + 1);
    }
    return KILN_OK;
}

/* Every node reachable from root and every leaf requiring grad, each checked, each once. */
static kiln_status collect(kiln_tensor *root, plan *p)
{
    void ***nodes = (void ***)&p->nodes, ***leaves = (void ***)&p->leaves;
    if (!root->node) {
        root->ag_listed = true;
        return push(leaves, &p->nleaves, &p->lcap, root) ? KILN_OK
                                                         : kiln__host_oom("kiln_backward");
    }
    root->node->visited = true;
    if (!push(nodes, &p->nnodes, &p->cap, root->node))
        return kiln__host_oom("kiln_backward");
    for (size_t k = 0; k < p->nnodes; k++) { /* breadth first over the growing list */
        kiln__ag_node *nd = p->nodes[k];
        kiln_status s = check_node(nd);
        if (s != KILN_OK)
            return s;
        for (int i = 0; i < nd->n; i++) {
            kiln_tensor *t = nd->in[i].t;
            if (!t || !t->requires_grad)
                continue;
            bool ok = true;
            if (t->node && !t->node->visited) {
                t->node->visited = true;
                ok = push(nodes, &p->nnodes, &p->cap, t->node);
            } else if (!t->node && !t->ag_listed) {
                t->ag_listed = true;
                ok = push(leaves, &p->nleaves, &p->lcap, t);
            }
            if (!ok)
                return kiln__host_oom("kiln_backward");
        }
    }
    return KILN_OK;
}

static int by_seq_desc(const void *x, const void *y)
{
    const kiln__ag_node *a = *(kiln__ag_node *const *)x, *b = *(kiln__ag_node *const *)y;
    return a->seq < b->seq ? 1 : a->seq > b->seq ? -1 : 0;
}

/* Add g (taken over) to *slot. */
static kiln_status accumulate(kiln_tensor **slot, kiln_tensor *g)
{
    if (!*slot) {
        *slot = g;
        return KILN_OK;
    }
    kiln_tensor *sum = NULL;
    kiln_status s = kiln_add(*slot, g, &sum);
    kiln_tensor_release(g);
    if (s == KILN_OK) {
        kiln_tensor_release(*slot);
        *slot = sum;
    }
    return s;
}

/* Wrap a failure of a gradient op with the node it belongs to. */
static kiln_status in_node(kiln_status s, const kiln__ag_node *nd)
{
    if (s == KILN_OK || strncmp(kiln_last_error(), "kiln_backward", 13) == 0)
        return s;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kiln_last_error());
    return kiln__error(s, "kiln_backward: computing the gradient of %s: %s", nd->name, msg);
}

/* Name kiln_backward in a failure of one of the ops it ran. */
static kiln_status in_backward(kiln_status s)
{
    if (s == KILN_OK || strncmp(kiln_last_error(), "kiln_backward", 13) == 0)
        return s;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kiln_last_error());
    return kiln__error(s, "kiln_backward: %s", msg);
}

/* Around a node's gradient: on, each input recorded as a cast of a leaf (autograd.c, recastable)
 * is replaced by that cast made again, standing for the op's input (requiring grad as the leaf
 * does), the leaf kept in leaf[i]; off, the leaves are put back and the casts released. Only
 * matmul nodes (two inputs) have such inputs. */
static kiln_status recast(kiln__ag_node *nd, kiln_tensor **leaf, bool on)
{
    kiln_status s = KILN_OK;
    for (int i = 0; i < nd->n && i < KILN__AG_MAX_INPUTS_STACK; i++) {
        if (!nd->in[i].recast)
            continue;
        if (!on) {
            if (leaf[i]) {
                kiln_tensor_release(nd->in[i].t);
                nd->in[i].t = leaf[i];
                leaf[i] = NULL;
            }
            continue;
        }
        kiln_tensor *c = NULL;
        if (s == KILN_OK)
            s = in_backward(kiln_cast(nd->in[i].t, (kiln_dtype)(nd->in[i].recast - 1), &c));
        if (s != KILN_OK)
            continue;
        c->requires_grad = nd->in[i].t->requires_grad;
        leaf[i] = nd->in[i].t;
        nd->in[i].t = c;
    }
    return s;
}

/* The gradient of a recast input, made in the cast's dtype, in the leaf's (what the cast's own
 * node would have given it). */
static kiln_status recast_grad(kiln_tensor **g, kiln_dtype dtype)
{
    kiln_tensor *c = NULL;
    kiln_status s = in_backward(kiln_cast(*g, dtype, &c));
    kiln_tensor_release(*g);
    *g = c;
    return s;
}

static kiln_status run_nodes(plan *p, kiln_tensor *seed, kiln_tensor *root)
{
    if (!root->node)
        return accumulate(&root->ag_acc, kiln_tensor_retain(seed));
    root->node->gout = kiln_tensor_retain(seed);
    for (size_t k = 0; k < p->nnodes; k++) {
        kiln__ag_node *nd = p->nodes[k];
        if (!nd->gout)
            continue;
        kiln_tensor *gi[KILN__AG_MAX_INPUTS_STACK];
        kiln_tensor **grads = nd->n <= KILN__AG_MAX_INPUTS_STACK
                                  ? gi
                                  : kiln__calloc((size_t)nd->n, sizeof(kiln_tensor *));
        if (!grads)
            return kiln__host_oom("kiln_backward");
        memset(grads, 0, (size_t)nd->n * sizeof(kiln_tensor *));
        kiln_tensor *leaf[KILN__AG_MAX_INPUTS_STACK] = {0};
        kiln_status s = recast(nd, leaf, true);
        if (s == KILN_OK)
            s = in_node(kiln__ag_grads(nd, nd->gout, grads), nd);
        recast(nd, leaf, false);
        kiln_tensor_release(nd->gout);
        nd->gout = NULL;
        for (int i = 0; i < nd->n; i++) {
            kiln_tensor *t = nd->in[i].t;
            if (s == KILN_OK && grads[i] && nd->in[i].recast && grads[i]->dtype != t->dtype)
                s = recast_grad(&grads[i], t->dtype);
            if (s == KILN_OK && grads[i])
                s = accumulate(t->node ? &t->node->gout : &t->ag_acc, grads[i]);
            else
                kiln_tensor_release(grads[i]);
        }
        if (grads != gi)
            free(grads);
        if (s != KILN_OK)
            return s;
    }
    return KILN_OK;
}

/* Take over acc as the leaf's new gradient when nobody else can reach its memory. */
static kiln_status new_grad(kiln_tensor *leaf, kiln_tensor **out)
{
    kiln_tensor *acc = leaf->ag_acc;
    if (leaf->grad)
        return kiln_add(leaf->grad, acc, out);
    if (atomic_load(&acc->refs) == 1 && atomic_load(&acc->storage->refs) == 1) {
        *out = kiln_tensor_retain(acc);
        return KILN_OK;
    }
    return kiln_tensor_clone(acc, out);
}

/* Make every leaf's new gradient, then swap them all in: either every leaf is updated or none. */
static kiln_status commit(plan *p)
{
    kiln_tensor **fresh = kiln__calloc(p->nleaves ? p->nleaves : 1, sizeof(kiln_tensor *));
    if (!fresh)
        return kiln__host_oom("kiln_backward");
    kiln_status s = KILN_OK;
    /* Gradients are materialised here, not left pending (fusion.c): an out-of-memory then
     * fails this backward, with every leaf unchanged, and a pending gradient would keep the
     * backward's intermediates alive until it is read. */
    for (size_t i = 0; s == KILN_OK && i < p->nleaves; i++)
        if (p->leaves[i]->ag_acc && (s = new_grad(p->leaves[i], &fresh[i])) == KILN_OK)
            s = kiln__fusion_force(fresh[i], "kiln_backward");
    for (size_t i = 0; i < p->nleaves; i++) {
        if (s == KILN_OK && fresh[i]) {
            kiln__scope_forget(fresh[i]); /* the leaf keeps it past the user's scope */
            kiln__ag_set_grad(p->leaves[i], fresh[i]);
        } else {
            kiln_tensor_release(fresh[i]);
        }
    }
    free(fresh);
    return s;
}

/* Free the graph after a backward: every node's inputs released (collected first, since
 * releasing them can free nodes of the list) and the node marked freed. */
static void leaves_clear(plan *p)
{
    for (size_t i = 0; i < p->nleaves; i++) {
        p->leaves[i]->ag_listed = false;
        kiln_tensor_release(p->leaves[i]->ag_acc);
        p->leaves[i]->ag_acc = NULL;
    }
    p->nleaves = 0;
}

static void free_graph(plan *p, kiln_tensor **drop)
{
    leaves_clear(p); /* a leaf may be held only by the graph */
    size_t n = 0;
    for (size_t k = 0; k < p->nnodes; k++) {
        kiln__ag_node *nd = p->nodes[k];
        nd->freed = true;
        nd->visited = false;
        for (int i = 0; i < nd->n; i++) {
            drop[n++] = nd->in[i].t;
            nd->in[i].t = NULL;
        }
    }
    p->nnodes = 0;
    for (size_t i = 0; i < n; i++)
        kiln__tensor_drop(drop[i]);
}

/* Room for every input of the plan's nodes, allocated before any work so that freeing the
 * graph after a successful backward cannot fail. */
static kiln_status drop_list(const plan *p, kiln_tensor ***drop)
{
    size_t n = 0;
    for (size_t k = 0; k < p->nnodes; k++)
        n += (size_t)p->nodes[k]->n;
    *drop = kiln__calloc(n ? n : 1, sizeof(kiln_tensor *));
    return *drop ? KILN_OK : kiln__host_oom("kiln_backward");
}

static void plan_clear(plan *p)
{
    for (size_t k = 0; k < p->nnodes; k++) {
        p->nodes[k]->visited = false;
        kiln_tensor_release(p->nodes[k]->gout);
        p->nodes[k]->gout = NULL;
    }
    leaves_clear(p);
    free(p->nodes);
    free(p->leaves);
}

static kiln_status check_backward_args(kiln_tensor *loss, const kiln_tensor *grad,
                                       kiln_backward_flags flags)
{
    const char *op = "kiln_backward";
    kiln_status s = kiln__check_tensor(loss, op, "loss");
    if (s == KILN_OK && grad)
        s = kiln__same_device(op, 2, (const kiln_tensor *[]){loss, grad}, NULL);
    if (s != KILN_OK)
        return s;
    if (flags & ~KILN_BACKWARD_RETAIN_GRAPH)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown flag bits 0x%x", op,
                           (unsigned)(flags & ~KILN_BACKWARD_RETAIN_GRAPH));
    if (!loss->requires_grad)
        return kiln__error(KILN_ERR_STATE,
                           "%s: loss does not require grad: no tensor it was computed from has "
                           "kiln_tensor_set_requires_grad(t, true), or it was computed with grad "
                           "mode off",
                           op);
    char a[160], b[160];
    if (!grad && loss->numel != 1)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: loss has shape %s; a gradient can only be implied for a "
                           "one-element loss: pass grad, shaped like the loss (d out / d loss)",
                           op, kiln__shape_str(a, sizeof a, loss->ndim, loss->shape));
    if (grad && grad->dtype != loss->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: loss is %s but grad is %s", op,
                           kiln_dtype_name(loss->dtype), kiln_dtype_name(grad->dtype));
    if (grad && (grad->ndim != loss->ndim ||
                 memcmp(grad->shape, loss->shape, (size_t)loss->ndim * sizeof *loss->shape) != 0))
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: loss has shape %s but grad has shape %s; they must be equal", op,
                           kiln__shape_str(a, sizeof a, loss->ndim, loss->shape),
                           kiln__shape_str(b, sizeof b, grad->ndim, grad->shape));
    return KILN_OK;
}

/* Whether loss is a loss op's result whose node hands out the gradient it saved without reading
 * the seed (see loss_grads): then the seed's value is never read, and needs no fill. */
static bool unit_loss(const kiln_tensor *loss, kiln_backward_flags flags)
{
    const kiln__ag_node *nd = loss->node;
    return !(flags & KILN_BACKWARD_RETAIN_GRAPH) && nd && nd->n == 3 &&
           (nd->kind == KILN__AG_MSE || nd->kind == KILN__AG_CROSS_ENTROPY);
}

static kiln_status backward(kiln_tensor *loss, const kiln_tensor *grad, kiln_backward_flags flags);

kiln_status kiln_backward(kiln_tensor *loss, const kiln_tensor *grad, kiln_backward_flags flags)
{
    int phase = kiln__profiler_phase(KILN__PHASE_BACKWARD); /* what the profiler's records say */
    kiln_status s = backward(loss, grad, flags);
    kiln__profiler_phase(phase);
    return s;
}

static kiln_status backward(kiln_tensor *loss, const kiln_tensor *grad, kiln_backward_flags flags)
{
    kiln_status s = check_backward_args(loss, grad, flags);
    if (s != KILN_OK)
        return s;
    plan p = {0};
    /* Scopes suspended: what backward creates is its own (the gradients are kept by the leaves),
     * and its releases of the user's tensors (the graph's saved inputs) only drop references. */
    bool prev_scope = kiln__scope_suspend();
    bool prev = kiln_set_grad_enabled(false);
    /* The gradients run in the dtypes the forward ran in, whatever autocast region is open. */
    int prev_autocast = kiln__autocast_suspend();
    kiln_tensor *seed = NULL, **drop = NULL;
    kiln_tensor_retain(loss); /* freeing the graph must not free the root under us */
    s = collect(loss, &p);
    if (s == KILN_OK) {
        if (p.nnodes > 1)
            qsort(p.nodes, p.nnodes, sizeof(kiln__ag_node *), by_seq_desc);
        if (!(flags & KILN_BACKWARD_RETAIN_GRAPH))
            s = drop_list(&p, &drop);
    }
    if (s == KILN_OK) {
        if (grad)
            seed = kiln_tensor_retain((kiln_tensor *)grad);
        else if (unit_loss(loss, flags))
            s = kiln_tensor_empty(loss->dev, loss->dtype, loss->ndim, loss->shape, &seed);
        else
            s = kiln_ones(loss->dev, loss->dtype, loss->ndim, loss->shape, &seed);
    }
    if (s == KILN_OK) {
        unit_seed = !grad && !(flags & KILN_BACKWARD_RETAIN_GRAPH) ? seed : NULL;
        s = run_nodes(&p, seed, loss);
        unit_seed = NULL;
    }
    if (s == KILN_OK)
        s = commit(&p);
    kiln_tensor_release(seed);
    if (s == KILN_OK && drop)
        free_graph(&p, drop);
    free(drop);
    plan_clear(&p);
    kiln_tensor_release(loss);
    kiln__autocast_resume(prev_autocast);
    kiln_set_grad_enabled(prev);
    kiln__scope_resume(prev_scope);
    return in_backward(s);
}
