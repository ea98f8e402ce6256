/* autograd.h - reverse-mode autograd: the hook ops call to record themselves, and the release
 * of a tensor's graph state. The public API is in kiln.h ("Autograd"). */
#ifndef KILN_AUTOGRAD_H
#define KILN_AUTOGRAD_H

#include <stdbool.h>

#include "kiln.h"

typedef enum kiln__ag_kind {
    KILN__AG_BINARY,  /* op */
    KILN__AG_SCALAR,  /* op, scalar */
    KILN__AG_UNARY,   /* op */
    KILN__AG_WHERE,   /* inputs cond, a, b */
    KILN__AG_CLAMP,   /* lo, hi */
    KILN__AG_CAST,    /* float -> float only */
    KILN__AG_REDUCE,  /* op, axis, keepdim */
    KILN__AG_MATMUL,  /* flags */
    KILN__AG_RESHAPE, /* also clone (same shape) */
    KILN__AG_PERMUTE, /* perm */
    KILN__AG_SLICE,   /* axis, start, end */
    KILN__AG_CAT,     /* axis; n inputs */
    KILN__AG_TO,      /* a copy to another device */
    KILN__AG_SOFTMAX, /* axis */
    KILN__AG_LOG_SOFTMAX,
    KILN__AG_CROSS_ENTROPY, /* inputs logits, labels */
    KILN__AG_MSE,           /* inputs pred, target */
    KILN__AG_INDEX_SELECT,  /* axis (resolved); inputs x, index */
    KILN__AG_GATHER,        /* axis (resolved); inputs x, index */
    KILN__AG_IM2COL,        /* kiln_conv2d's unfolding: the geometry (ops/conv.h); input x */
    KILN__AG_CONV_DW,       /* kiln_conv2d's depthwise kernel: the geometry (ops/conv.h); x, w */
    KILN__AG_CONV_GEMM,     /* kiln_conv2d in chunks of samples: the geometry (ops/conv.h); x, w */
    KILN__AG_MAX_POOL,      /* the window (ops/conv.h); input x (the backward finds the maxima) */
    KILN__AG_AVG_POOL,      /* the window (ops/conv.h); input x */
    KILN__AG_RNN_SCAN,      /* a recurrent layer's time loop (ops/rnn.h): op mode, flags reverse */
    KILN__AG_BATCH_NORM,    /* flags training; inputs x, weight, bias, mean, invstd ([1, C, 1]) */
    KILN__AG_UNSUPPORTED,   /* an op without a gradient: backward through it fails */
} kiln__ag_kind;

/* What a node keeps beside its inputs. */
typedef struct kiln__ag_args {
    int op;
    int axis;
    bool keepdim;
    int flags;
    double scalar, lo, hi;
    int64_t start, end;
    int perm[KILN_MAX_DIMS];
} kiln__ag_args;

/* The one-line hook at the end of an op's allocating form: when s is KILN_OK, grad mode is on,
 * the result *out is floating and one of ins[0..n-1] (NULL entries skipped) requires grad,
 * attach a node of this kind to *out (retaining the inputs). Returns s, or
 * KILN_ERR_OUT_OF_MEMORY (with *out released and NULL) when the node cannot be allocated. */
kiln_status kiln__ag_record(kiln_status s, const char *op, kiln__ag_kind kind,
                            const kiln__ag_args *args, int n, const kiln_tensor *const *ins,
                            kiln_tensor **out);

/* At a tensor's last reference (a hook of tensor.c's): drops its gradient and its node (whose
 * inputs are released iteratively, so long chains do not recurse). */
void kiln__ag_tensor_dead(kiln_tensor *t);

/* Make g (its reference taken) t's gradient, releasing the one before (kiln_backward's commit). */
void kiln__ag_set_grad(kiln_tensor *t, kiln_tensor *g);

#endif
