/* optables.c - the op tables of kiln.h read by kind, and the built-in kernels of each op. Adding
 * an op is a table line in kiln.h and a kernel line in lib/kernels (see CONTRIBUTING.md);
 * nothing here lists ops. */
#include "optables.h"

#include <stdio.h>
#include <string.h>

#include "dtype.h"

typedef enum op_kind { KIND_ARITH, KIND_FLOAT, KIND_COMPARE, KIND_ANY } op_kind;

typedef struct op_info {
    const char *name;
    op_kind kind;
} op_info;

static const op_info binary_ops[] = {
#define KILN__BINARY_INFO(NAME, num, name, kind) [num] = {#name, KIND_##kind},
    KILN_BINARY_OP_MAP(KILN__BINARY_INFO)
#undef KILN__BINARY_INFO
};

static const op_info unary_ops[] = {
#define KILN__UNARY_INFO(NAME, num, name, kind) [num] = {#name, KIND_##kind},
    KILN_UNARY_OP_MAP(KILN__UNARY_INFO)
#undef KILN__UNARY_INFO
};

static const char *const reduce_names[] = {
#define KILN__REDUCE_NAME(NAME, num, name) [num] = #name,
    KILN_REDUCE_OP_MAP(KILN__REDUCE_NAME)
#undef KILN__REDUCE_NAME
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const op_info *binary_info(kiln_binary_op op)
{
    return (unsigned)op < COUNT(binary_ops) && binary_ops[op].name ? &binary_ops[op] : NULL;
}

static const op_info *unary_info(kiln_unary_op op)
{
    return (unsigned)op < COUNT(unary_ops) && unary_ops[op].name ? &unary_ops[op] : NULL;
}

const char *kiln__binary_name(kiln_binary_op op)
{
    const op_info *o = binary_info(op);
    return o ? o->name : NULL;
}

bool kiln__binary_is_compare(kiln_binary_op op)
{
    const op_info *o = binary_info(op);
    return o && o->kind == KIND_COMPARE;
}

bool kiln__binary_supports(kiln_binary_op op, kiln_dtype dtype)
{
    const op_info *o = binary_info(op);
    return o && kiln__dtype_valid(dtype) && (o->kind != KIND_FLOAT || kiln__dtype_is_float(dtype));
}

char *kiln__binary_kernel(char *buf, size_t size, kiln__binary_variant v, kiln_binary_op op)
{
    static const char *const prefix[KILN__BINARY_VARIANTS] = {"kiln_b_", "kiln_bs_", "kiln_bb_",
                                                              "kiln_b2_", "kiln_b3_"};
    const char *name = kiln__binary_name(op);
    snprintf(buf, size, "%s%s", (unsigned)v < KILN__BINARY_VARIANTS ? prefix[v] : "?",
             name ? name : "?");
    return buf;
}

const char *kiln__unary_name(kiln_unary_op op)
{
    const op_info *o = unary_info(op);
    return o ? o->name : NULL;
}

bool kiln__unary_supports(kiln_unary_op op, kiln_dtype dtype, bool backward)
{
    const op_info *o = unary_info(op);
    if (!o || !kiln__dtype_valid(dtype))
        return false;
    return kiln__dtype_is_float(dtype) || (o->kind == KIND_ANY && !backward);
}

char *kiln__unary_kernel(char *buf, size_t size, bool backward, kiln_unary_op op)
{
    const char *name = kiln__unary_name(op);
    snprintf(buf, size, "%s%s", backward ? "kiln_ub_" : "kiln_u_", name ? name : "?");
    return buf;
}

char *kiln__cast_kernel(char *buf, size_t size, kiln_dtype to)
{
    snprintf(buf, size, "kiln_cast_to_%s", kiln__dtype_name(to));
    return buf;
}

bool kiln__elementwise_by8(kiln_device_type type, kiln_dtype dtype)
{
    return type == KILN_DEVICE_CPU && kiln__dtype_is_half(dtype);
}

const char *kiln__cast8_kernel(kiln_device_type type, kiln_dtype from, kiln_dtype to)
{
    if (type != KILN_DEVICE_CPU)
        return NULL;
    if (from == KILN_F32 && to == KILN_F16)
        return "kiln_cast8_to_f16";
    if (from == KILN_F16 && to == KILN_F32)
        return "kiln_cast8_to_f32";
    return NULL;
}

char *kiln__elementwise_defines(char *buf, size_t size, kiln_dtype dtype)
{
    if (size)
        buf[0] = '\0';
    kiln__dtype_defines(buf, size, "T", dtype);
    size_t used = strnlen(buf, size);
    if (kiln__dtype_is_float(dtype))
        snprintf(buf + used, size - used, " -DKILN_IS_FLOAT=1%s",
                 dtype == KILN_F32 ? " -DKILN_IS_F32=1" : "");
    else
        snprintf(buf + used, size - used, " -DKILN_IS_INT=1 -DKILN_UT=%s%s",
                 kiln__dtype_cl_unsigned_type(dtype),
                 kiln__dtype_is_signed(dtype) ? " -DKILN_IS_SIGNED=1" : "");
    return buf;
}

const char *kiln__reduce_name(kiln_reduce_op op)
{
    return (unsigned)op < COUNT(reduce_names) ? reduce_names[op] : NULL;
}

bool kiln__reduce_adds(kiln_reduce_op op)
{
    return op == KILN_REDUCE_SUM || op == KILN_REDUCE_MEAN;
}

bool kiln__reduce_gives_index(kiln_reduce_op op)
{
    return op == KILN_REDUCE_ARGMAX;
}

bool kiln__reduce_supports(kiln_reduce_op op, kiln_dtype dtype)
{
    return kiln__reduce_name(op) && kiln__dtype_valid(dtype) &&
           (op != KILN_REDUCE_MEAN || kiln__dtype_is_float(dtype));
}

kiln_dtype kiln__reduce_out_dtype(kiln_reduce_op op, kiln_dtype dtype)
{
    if (kiln__reduce_gives_index(op) || (kiln__reduce_adds(op) && !kiln__dtype_is_float(dtype)))
        return KILN_I64;
    return dtype;
}

kiln_dtype kiln__reduce_acc_dtype(kiln_dtype dtype)
{
    return kiln__dtype_is_float(dtype) ? kiln__dtype_compute(dtype) : KILN_I64;
}

char *kiln__reduce_defines(char *buf, size_t size, kiln_reduce_op op, kiln_dtype dtype)
{
    /* One program per (input dtype, add or compare): the output slot O is the program's, so
     * argmax (whose *_idx kernels write long) shares the compare program of max and min. */
    bool add = kiln__reduce_adds(op);
    kiln_dtype acc = kiln__reduce_acc_dtype(dtype);
    if (size)
        buf[0] = '\0';
    kiln__dtype_defines(buf, size, "T", dtype);
    kiln__dtype_defines(buf, size, "O", add ? kiln__reduce_out_dtype(op, dtype) : dtype);
    size_t used = strnlen(buf, size);
    snprintf(buf + used, size - used, " -DKILN_ACC=%s%s -DKILN_RED_%s", kiln__dtype_cl_type(acc),
             kiln__dtype_is_float(dtype) ? " -DKILN_ACC_FLOAT=1" : "", add ? "ADD" : "CMP");
    return buf;
}

char *kiln__reduce_kernel(char *buf, size_t size, const char *base, kiln_reduce_op op)
{
    snprintf(buf, size, "%s%s", base, kiln__reduce_gives_index(op) ? "_idx" : "");
    return buf;
}
