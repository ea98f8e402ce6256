/* argcheck.h - user kernel arguments against the kernel's parameters: a parameter described from
 * the driver's argument info (clGetKernelArgInfo) and a kiln_arg checked against it. Pure
 * functions: no device, no global state, any input text is safe (tests/test-argcheck.c). */
#ifndef KILN_ARGCHECK_H
#define KILN_ARGCHECK_H

#include <stddef.h>

#include "kiln.h"

/* CL_KERNEL_ARG_ADDRESS_QUALIFIER, in kiln's words. */
typedef enum kiln__addr {
    KILN__ADDR_UNKNOWN = 0,
    KILN__ADDR_GLOBAL,
    KILN__ADDR_CONSTANT,
    KILN__ADDR_LOCAL,
    KILN__ADDR_PRIVATE, /* by value */
} kiln__addr;

/* What a parameter accepts. */
typedef enum kiln__param_kind {
    KILN__PARAM_UNKNOWN = 0, /* no argument info: anything (the driver checks the size) */
    KILN__PARAM_BUFFER,      /* __global / __constant pointer: a tensor */
    KILN__PARAM_LOCAL,       /* __local pointer: kiln_arg_local() */
    KILN__PARAM_SCALAR,      /* a scalar type: a scalar of dtype (none when dtype is -1) */
    KILN__PARAM_VALUE,       /* by value, of a type kiln cannot see into (typedef, struct,
                                size_t): any scalar, the driver checks the size */
    KILN__PARAM_VECTOR,      /* a vector by value (float4): kiln_arg cannot carry one */
    KILN__PARAM_OPAQUE,      /* image, sampler, pipe ...: kiln_arg cannot carry one */
} kiln__param_kind;

typedef struct kiln__param {
    unsigned char kind; /* kiln__param_kind */
    unsigned char addr; /* kiln__addr */
    signed char dtype;  /* SCALAR: the dtype required; BUFFER: the tensor dtype the pointee
                           matches; -1: none (SCALAR) or any (BUFFER) */
    unsigned char elem; /* BUFFER with dtype -1: bytes of the pointee scalar kiln has no dtype
                           for (short*: 2, tensors of that size match); 0: any tensor */
    char type[48];      /* the driver's type name, cut to fit ("" when unknown) */
    char name[48];      /* the parameter's name, cut to fit ("" when unknown) */
} kiln__param;

/* Describe a parameter from its address qualifier and the driver's type name and parameter
 * name (either may be NULL: unknown). Type names as drivers write them are understood: "float*",
 * "const float*", "__global float4 *", "unsigned int", "uint", "size_t", "image2d_t" ...; at most
 * the first 128 bytes of each are read (a longer type name is not understood: no check). */
void kiln__param_parse(kiln__addr addr, const char *type, const char *name, kiln__param *out);

/* Check argument a (number index of kernel `kernel`) against p. tensor_dtype is the dtype of a
 * tensor argument (a's tensor handle is never read). KILN_OK, or KILN_ERR_INVALID_ARGUMENT with
 * a message in msg (size bytes, always terminated when size > 0) naming the kernel, the
 * parameter and both types. kernel may be NULL (else NUL-terminated); p may hold any bytes. */
kiln_status kiln__argcheck(const char *kernel, int index, const kiln__param *p, const kiln_arg *a,
                           kiln_dtype tensor_dtype, char *msg, size_t size);

#endif
