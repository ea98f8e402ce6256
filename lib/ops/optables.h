/* optables.h - the op tables of kiln.h (KILN_BINARY_OP_MAP, KILN_UNARY_OP_MAP,
 * KILN_REDUCE_OP_MAP) read by their kind column, and how an op maps to its built-in kernels:
 * kernel names and the -D options of the program that holds them. The ops and
 * tests/test-kernels.c both ask here, so a kernel the ops use is a kernel the test resolves. */
#ifndef KILN_OPS_OPTABLES_H
#define KILN_OPS_OPTABLES_H

#include <stdbool.h>
#include <stddef.h>

#include "kiln.h"

/* ---- binary: elementwise.cl ---- */
const char *kiln__binary_name(kiln_binary_op op); /* "add"; NULL for an unknown op */
bool kiln__binary_is_compare(kiln_binary_op op);  /* kind COMPARE: the result is a u8 mask */
/* Whether op computes in dtype: kind FLOAT needs a floating dtype, ARITH and COMPARE take all. */
bool kiln__binary_supports(kiln_binary_op op, kiln_dtype dtype);

/* The kernels of one binary op: same shape, with a scalar, general broadcast, 2-D and 3-D
 * broadcast. */
typedef enum kiln__binary_variant {
    KILN__BINARY_FLAT,   /* kiln_b_<op> */
    KILN__BINARY_SCALAR, /* kiln_bs_<op> */
    KILN__BINARY_BCAST,  /* kiln_bb_<op> */
    KILN__BINARY_2D,     /* kiln_b2_<op> */
    KILN__BINARY_3D,     /* kiln_b3_<op> */
} kiln__binary_variant;
enum { KILN__BINARY_VARIANTS = 5 };

/* The kernel name of op's variant into buf ("kiln_bb_add"); returns buf. */
char *kiln__binary_kernel(char *buf, size_t size, kiln__binary_variant v, kiln_binary_op op);

/* ---- unary: elementwise.cl ---- */
const char *kiln__unary_name(kiln_unary_op op); /* "neg"; NULL for an unknown op */
/* Kind ANY takes every dtype, FLOAT floating dtypes only; derivatives are floating only. */
bool kiln__unary_supports(kiln_unary_op op, kiln_dtype dtype, bool backward);
/* "kiln_u_<op>", or "kiln_ub_<op>" for the derivative; returns buf. */
char *kiln__unary_kernel(char *buf, size_t size, bool backward, kiln_unary_op op);

/* ---- casts: elementwise.cl ---- */
char *kiln__cast_kernel(char *buf, size_t size, kiln_dtype to); /* "kiln_cast_to_f32" */
/* The cast kernel of `from`'s program that takes 8 elements per work-item
 * ("kiln_cast8_to_f16"): f32 <-> f16 on CPU devices only, mixed precision's casts; NULL for
 * other pairs and devices. */
const char *kiln__cast8_kernel(kiln_device_type type, kiln_dtype from, kiln_dtype to);

/* Whether a same-shape elementwise kernel of dtype's program (kiln_b_, kiln_bs_, kiln_u_,
 * kiln_ub_) takes 8 elements per work-item on a device of this type: f16 on CPU devices. */
bool kiln__elementwise_by8(kiln_device_type type, kiln_dtype dtype);

/* The -D options of the elementwise program of dtype (slot T, float or integer, the unsigned
 * type and signedness of integers); returns buf. */
char *kiln__elementwise_defines(char *buf, size_t size, kiln_dtype dtype);

/* ---- reductions: reduce.cl ---- */
const char *kiln__reduce_name(kiln_reduce_op op); /* "sum"; NULL for an unknown op */
bool kiln__reduce_adds(kiln_reduce_op op);        /* SUM and MEAN; the others compare */
bool kiln__reduce_gives_index(kiln_reduce_op op); /* ARGMAX: the *_idx kernels */
/* MEAN of integers is refused; everything else takes every dtype. */
bool kiln__reduce_supports(kiln_reduce_op op, kiln_dtype dtype);
/* The result dtype: i64 for indices and integer sums, else dtype. */
kiln_dtype kiln__reduce_out_dtype(kiln_reduce_op op, kiln_dtype dtype);
/* The accumulator dtype: i64 for integers, the compute dtype (f32 for f16) for floats. */
kiln_dtype kiln__reduce_acc_dtype(kiln_dtype dtype);
/* The -D options of the reduce program of (op's family, dtype); returns buf. */
char *kiln__reduce_defines(char *buf, size_t size, kiln_reduce_op op, kiln_dtype dtype);
/* base ("kiln_reduce_rows", "_cols", "_combine") plus "_idx" for ops giving an index;
 * returns buf. */
char *kiln__reduce_kernel(char *buf, size_t size, const char *base, kiln_reduce_op op);

#endif
