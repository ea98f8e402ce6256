/* fusion.h - lazy elementwise fusion: elementwise ops return pending tensors whose value is an
 * expression over their inputs, evaluated as one generated kernel when the value is needed.
 * Internal: not part of the public API (kiln_tensor_eval is the public entry). */
#ifndef KILN_FUSION_H
#define KILN_FUSION_H

#include <stdbool.h>

#include "eager.h"
#include "kiln.h"
#include "ops/common.h"

/* Whether elementwise ops defer (KILN_FUSION, default on; kiln__fusion_set in tests). */
bool kiln__fusion_enabled(void);
/* Test only: turn fusion on or off for every thread; returns the previous setting. */
bool kiln__fusion_set(bool on);

/* The result of op as a pending tensor in *out (given NULL), or evaluated at once into given.
 * fn names the caller in messages. */
kiln_status kiln__fuse(const char *fn, kiln_device *dev, const kiln__fop *op, kiln_tensor *given,
                       kiln_tensor **out);

/* Before a use of t's storage by anything but a deferred elementwise op: evaluate t if it is
 * pending, and every pending tensor that reads t's storage (a write may follow). op names the
 * forcing call. KILN_OK at once when nothing is pending. */
kiln_status kiln__fusion_force(const kiln_tensor *t, const char *op);

/* While on, on this thread, tensor checks do not force (the elementwise ops' own checks). */
void kiln__fusion_defer(bool on);

/* The last reference to a pending tensor went (a hook of tensor.c's): drop its expression. */
void kiln__fusion_dead(kiln_tensor *t);

/* A pending tensor's chain folded into the loads of another kernel (a reduction's): the
 * program's source and the arguments that take the place of the tensor's one argument. */
#define KILN__FOLD_MAX_ARGS 64
typedef struct kiln__fold {
    char *text; /* the program: the chain's helpers and kiln_chain(i, ...), `defines` as #define
                 * lines, KILN_X_PARAMS (the parameters in place of `global const KILN_T *x`)
                 * and KILN_LOAD(p, i) (the value at flat index i), then the kernel source */
    int nargs;
    kiln_arg args[KILN__FOLD_MAX_ARGS];
} kiln__fold;

/* If x is pending, held by its caller only (refcount 1), and its chain fits a kernel with
 * `room` bytes of other arguments in KILN__FOLD_MAX_ARGS arguments: *out gets the program that
 * computes x's chain in the loads of built-in source `source` (built with -D options `defines`),
 * and this thread holds the fusion lock, with forcing checks deferred, until
 * kiln__fusion_fold_done. Otherwise *out is NULL (the caller forces x as usual). x stays
 * pending either way. */
kiln_status kiln__fusion_fold(const kiln_tensor *x, const char *source, const char *defines,
                              size_t room, const char *op, kiln__fold **out);
void kiln__fusion_fold_done(kiln__fold *f);

/* dev's programs are going: forget the generated kernels kept for it (program.c); NULL: for
 * every device. */
void kiln__fusion_forget(const kiln_device *dev);

/* Test only: since start, kernels generated (cache misses) and reused (hits), and chains of
 * one op run by their eager kernel. */
void kiln__fusion_counts(long *generated, long *reused, long *single);
/* Test only: reductions that folded a pending input into their loads since start. */
long kiln__fusion_folds(void);
/* Test only: read KILN_TEST_FUSION_INDEX32_LIMIT again (the limit of the generated kernels'
 * 32-bit index path) and forget every kernel generated with the previous one. */
void kiln__fusion_index32_reread(void);
/* Test only: fold on CPU devices too (by default they evaluate the chain first). */
void kiln__fusion_fold_on_cpu(bool on);

#endif
