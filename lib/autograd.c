/* autograd.c - autograd's records: grad mode, a node per op result (holding its inputs), its
 * release when the result dies, and the public flags. Below the ops, which record (the records
 * layer, lib/layers.txt); kiln_backward, above them, is backward.c, and the gradient formulas
 * autograd_grads.c. */
#include "autograd.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "autograd_node.h"
#include "dtype.h"
#include "status.h"
#include "tensor.h"

static _Thread_local bool grad_off; /* kiln_set_grad_enabled(false) on this thread */
static atomic_uint_fast64_t next_seq = 1;

/* A dead tensor's gradient and node go (tensor.c tells us: a hook, registered before the first
 * node or gradient is kept). */
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static void register_hooks(void)
{
    kiln__tensor_hooks_add(&(kiln__tensor_hooks){.dead = kiln__ag_tensor_dead});
}

bool kiln_set_grad_enabled(bool enabled)
{
    bool prev = !grad_off;
    grad_off = !enabled;
    return prev;
}

bool kiln_grad_enabled(void)
{
    return !grad_off;
}

/* Whether a matmul's input t is a cast of a leaf that only the op's caller still holds (autocast's
 * 16-bit copy of an f32 weight): the node then keeps the leaf and the backward casts it again
 * (cheap beside the matmul), so the copy goes when the forward op returns instead of living
 * until the backward: a model's worth of memory under autocast, where PyTorch keeps its cast
 * weights. */
static bool recastable(kiln__ag_kind kind, const kiln_tensor *t)
{
    if (kind != KILN__AG_MATMUL || !t || !t->node || t->node->kind != KILN__AG_CAST ||
        atomic_load(&t->refs) != 1)
        return false;
    const kiln_tensor *src = t->node->in[0].t;
    return src && !src->node && src->requires_grad && t->node->in[0].recast == 0;
}

kiln_status kiln__ag_record(kiln_status s, const char *op, kiln__ag_kind kind,
                            const kiln__ag_args *args, int n, const kiln_tensor *const *ins,
                            kiln_tensor **out)
{
    if (s != KILN_OK || !out || !*out || grad_off || !kiln__dtype_is_float((*out)->dtype))
        return s;
    bool any = false;
    for (int i = 0; i < n; i++)
        any = any || (ins[i] && ins[i]->requires_grad);
    if (!any)
        return s;
    kiln__ag_node *nd = kiln__calloc(1, sizeof *nd + (size_t)n * sizeof nd->in[0]);
    if (!nd) {
        kiln_tensor_release(*out);
        *out = NULL;
        return kiln__host_oom(op);
    }
    nd->kind = kind;
    nd->name = op;
    if (args)
        nd->a = *args;
    nd->seq = atomic_fetch_add(&next_seq, 1);
    nd->n = n;
    for (int i = 0; i < n; i++) {
        const kiln_tensor *t = ins[i];
        if (recastable(kind, t)) {
            nd->in[i].recast = 1 + (int)t->dtype;
            t = t->node->in[0].t;
        }
        nd->in[i].t = kiln_tensor_retain((kiln_tensor *)t);
        if (t)
            nd->in[i].version = atomic_load(&t->storage->version);
    }
    pthread_once(&hooks_once, register_hooks);
    (*out)->node = nd;
    (*out)->requires_grad = true;
    return s;
}

/* Nodes whose inputs are being released, drained by the outermost release on this thread. */
static _Thread_local kiln__ag_node *dying;
static _Thread_local bool draining;

void kiln__ag_tensor_dead(kiln_tensor *t)
{
    kiln_tensor *g = t->grad;
    t->grad = NULL;
    if (t->node) {
        t->node->next = dying;
        dying = t->node;
        t->node = NULL;
    }
    kiln_tensor_release(g);
    if (draining)
        return;
    draining = true;
    while (dying) {
        kiln__ag_node *nd = dying;
        dying = nd->next;
        for (int i = 0; i < nd->n; i++)
            kiln__tensor_drop(nd->in[i].t);
        free(nd);
    }
    draining = false;
}

/* ---- public flags ---------------------------------------------------------------------------- */

kiln_status kiln_tensor_set_requires_grad(kiln_tensor *t, bool requires_grad)
{
    const char *op = "kiln_tensor_set_requires_grad";
    kiln_status s = kiln__check_handle(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    if (requires_grad && !kiln__dtype_is_float(t->dtype))
        return kiln__error(
            KILN_ERR_DTYPE_MISMATCH,
            "%s: tensor is %s; only floating tensors (f32, f64, f16, bf16) can require "
            "gradients; cast it with kiln_cast() first",
            op, kiln_dtype_name(t->dtype));
    if (t->node && !requires_grad)
        return kiln__error(KILN_ERR_STATE,
                           "%s: tensor is the result of %s, recorded for autograd; only leaves "
                           "can stop requiring gradients (compute it with grad mode off, "
                           "kiln_set_grad_enabled(false), to get a tensor without history)",
                           op, t->node->name);
    t->requires_grad = requires_grad;
    return KILN_OK;
}

bool kiln_tensor_requires_grad(const kiln_tensor *t)
{
    return t && t->magic == KILN__TENSOR_MAGIC && t->requires_grad;
}

bool kiln_tensor_is_leaf(const kiln_tensor *t)
{
    return t && t->magic == KILN__TENSOR_MAGIC && !t->node;
}

kiln_tensor *kiln_tensor_grad(const kiln_tensor *t)
{
    return t && t->magic == KILN__TENSOR_MAGIC ? t->grad : NULL;
}

void kiln__ag_set_grad(kiln_tensor *t, kiln_tensor *g)
{
    pthread_once(&hooks_once, register_hooks);
    kiln_tensor *old = t->grad;
    t->grad = g;
    kiln_tensor_release(old);
}

kiln_status kiln_tensor_zero_grad(kiln_tensor *t)
{
    kiln_status s = kiln__check_handle(t, "kiln_tensor_zero_grad", "tensor");
    if (s != KILN_OK)
        return s;
    kiln_tensor *g = t->grad;
    t->grad = NULL;
    kiln_tensor_release(g);
    return KILN_OK;
}
