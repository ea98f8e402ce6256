/* autograd_node.h - the graph node autograd.c records and backward.c and autograd_grads.c
 * differentiate. */
#ifndef KILN_AUTOGRAD_NODE_H
#define KILN_AUTOGRAD_NODE_H

#include <stdint.h>

#include "autograd.h"

enum { KILN__AG_MAX_INPUTS_STACK = 4 };

/* One recorded op. The result tensor owns its node; the node owns its inputs (never its result,
 * so the graph has no cycles). */
typedef struct kiln__ag_node {
    kiln__ag_kind kind;
    const char *name; /* the public function, for messages */
    kiln__ag_args a;
    uint64_t seq;      /* creation order: a node's inputs were made by nodes of smaller seq */
    bool freed;        /* a backward without KILN_BACKWARD_RETAIN_GRAPH released the inputs */
    bool visited;      /* during a backward */
    kiln_tensor *gout; /* during a backward: the gradient of the result, summed so far */
    struct kiln__ag_node *next; /* the release list */
    int n;
    struct {
        kiln_tensor *t;
        unsigned version; /* t's storage version when recorded */
        /* 0, or 1 + a dtype: the op's input was t (a leaf, a parameter) cast to that dtype, and
         * the backward casts it again rather than the node keeping the copy (autograd.c,
         * recastable: autocast's 16-bit weights, the size of the model, are not kept) */
        int recast;
    } in[];
} kiln__ag_node;

#endif
