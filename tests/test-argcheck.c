/* test-argcheck.c - kernel parameters parsed from drivers' type names and kiln_args checked
 * against them (lib/argcheck.c), with no device: every accepted and refused pairing, the
 * messages, and malformed or hostile type names. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/argcheck.h"
#include "testutil.h"

static kiln__param parsed(kiln__addr addr, const char *type)
{
    kiln__param p;
    kiln__param_parse(addr, type, "x", &p);
    return p;
}

/* The status of checking a against a parameter of (addr, type); the message into msg. */
static char msg[1024];
static kiln_status check(kiln__addr addr, const char *type, kiln_arg a, kiln_dtype tensor_dtype)
{
    kiln__param p = parsed(addr, type);
    return kiln__argcheck("k", 3, &p, &a, tensor_dtype, msg, sizeof msg);
}

#define ACCEPTS(addr, type, a, td) ck_assert_msg(check(addr, type, a, td) == KILN_OK, "%s", msg)
#define REFUSES(addr, type, a, td)                                                                 \
    ck_assert_msg(check(addr, type, a, td) == KILN_ERR_INVALID_ARGUMENT, "%s accepted %s (%d)",    \
                  type, #a, (int)(td))

#define G KILN__ADDR_GLOBAL
#define P KILN__ADDR_PRIVATE

static const kiln_tensor *const fake_tensor = (const kiln_tensor *)0x10; /* never read */

START_TEST(parse_kinds)
{
    kiln__param p = parsed(G, "float*");
    ck_assert_int_eq(p.kind, KILN__PARAM_BUFFER);
    ck_assert_int_eq(p.dtype, KILN_F32);
    p = parsed(KILN__ADDR_CONSTANT, "const float4 *");
    ck_assert_int_eq(p.kind, KILN__PARAM_BUFFER);
    ck_assert_int_eq(p.dtype, KILN_F32);
    p = parsed(G, "__global unsigned int*");
    ck_assert_int_eq(p.dtype, KILN_I32);
    p = parsed(G, "ulong16*");
    ck_assert_int_eq(p.dtype, KILN_I64);
    p = parsed(G, "char*");
    ck_assert_int_eq(p.dtype, KILN_U8);
    p = parsed(G, "half*");
    ck_assert_int_eq(p.dtype, KILN_F16);
    p = parsed(G, "ushort*"); /* no dtype: tensors of 2-byte elements */
    ck_assert_int_eq(p.dtype, -1);
    ck_assert_int_eq(p.elem, 2);
    p = parsed(G, "void*");
    ck_assert_int_eq(p.kind, KILN__PARAM_BUFFER);
    ck_assert_int_eq(p.dtype, -1);
    ck_assert_int_eq(p.elem, 0);
    p = parsed(G, "struct particle*");
    ck_assert_int_eq(p.dtype, -1);
    ck_assert_int_eq(p.elem, 0);
    p = parsed(G, "image2d_t");
    ck_assert_int_eq(p.kind, KILN__PARAM_OPAQUE);
    p = parsed(KILN__ADDR_LOCAL, "float*");
    ck_assert_int_eq(p.kind, KILN__PARAM_LOCAL);
    p = parsed(P, "float");
    ck_assert_int_eq(p.kind, KILN__PARAM_SCALAR);
    ck_assert_int_eq(p.dtype, KILN_F32);
    p = parsed(P, "unsigned");
    ck_assert_int_eq(p.dtype, KILN_I32);
    p = parsed(P, "const uchar");
    ck_assert_int_eq(p.dtype, KILN_U8);
    p = parsed(P, "short"); /* a scalar no kiln_arg carries */
    ck_assert_int_eq(p.kind, KILN__PARAM_SCALAR);
    ck_assert_int_eq(p.dtype, -1);
    ck_assert_int_eq(parsed(P, "float4").kind, KILN__PARAM_VECTOR);
    ck_assert_int_eq(parsed(P, "size_t").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "my_real").kind, KILN__PARAM_VALUE); /* a typedef */
    ck_assert_int_eq(parsed(P, "struct params").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "sampler_t").kind, KILN__PARAM_OPAQUE);
    ck_assert_int_eq(parsed(KILN__ADDR_UNKNOWN, "float*").kind, KILN__PARAM_UNKNOWN);
    /* Names that only look like types. */
    ck_assert_int_eq(parsed(P, "float5").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "float016").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "4").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "unsigned float").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "bool4").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(G, "float**").dtype, -1);
}
END_TEST

START_TEST(tensors_against_pointers)
{
    kiln_arg t = kiln_arg_tensor(fake_tensor);
    ACCEPTS(G, "float*", t, KILN_F32);
    ACCEPTS(G, "float4*", t, KILN_F32);
    ACCEPTS(KILN__ADDR_CONSTANT, "float*", t, KILN_F32);
    REFUSES(G, "float*", t, KILN_F64);
    REFUSES(G, "double*", t, KILN_F32);
    ACCEPTS(G, "int*", t, KILN_I32);
    ACCEPTS(G, "uint*", t, KILN_I32);
    REFUSES(G, "int*", t, KILN_F32); /* same size, other type */
    REFUSES(G, "int*", t, KILN_I64);
    ACCEPTS(G, "long*", t, KILN_I64);
    ACCEPTS(G, "uchar*", t, KILN_U8);
    ACCEPTS(G, "half*", t, KILN_F16);
    ACCEPTS(G, "ushort*", t, KILN_F16);
    REFUSES(G, "ushort*", t, KILN_F32);
    for (int d = 0; d < KILN_DTYPE_COUNT; d++) {
        ACCEPTS(G, "void*", t, (kiln_dtype)d);
        ACCEPTS(G, "struct s*", t, (kiln_dtype)d);
        ACCEPTS(G, "size_t*", t, (kiln_dtype)d);
        ACCEPTS(G, NULL, t, (kiln_dtype)d); /* no type name: any tensor */
    }
    /* Anything but a tensor for a buffer. */
    REFUSES(G, "float*", kiln_arg_f64(4), KILN_F32); /* crashed PoCL: 8 bytes taken as a cl_mem */
    REFUSES(G, "void*", kiln_arg_i64(4), KILN_F32);
    REFUSES(G, "float*", kiln_arg_local(64), KILN_F32);
    REFUSES(G, "image2d_t", t, KILN_F32);
    /* __local pointers take local memory only. */
    ACCEPTS(KILN__ADDR_LOCAL, "float*", kiln_arg_local(64), KILN_F32);
    REFUSES(KILN__ADDR_LOCAL, "float*", t, KILN_F32);
    REFUSES(KILN__ADDR_LOCAL, "float*", kiln_arg_f32(1), KILN_F32);
}
END_TEST

START_TEST(scalars_against_values)
{
    ACCEPTS(P, "float", kiln_arg_f32(1), KILN_F32);
    REFUSES(P, "float", kiln_arg_i32(7), KILN_F32); /* computed garbage */
    REFUSES(P, "float", kiln_arg_f64(1), KILN_F32);
    ACCEPTS(P, "int", kiln_arg_i32(3), KILN_F32);
    ACCEPTS(P, "uint", kiln_arg_i32(3), KILN_F32);
    REFUSES(P, "int", kiln_arg_f32(3), KILN_F32); /* computed garbage */
    REFUSES(P, "int", kiln_arg_i64(3), KILN_F32);
    ACCEPTS(P, "long", kiln_arg_i64(3), KILN_F32);
    ACCEPTS(P, "ulong", kiln_arg_i64(3), KILN_F32);
    REFUSES(P, "long", kiln_arg_tensor(fake_tensor), KILN_I64); /* was accepted */
    ACCEPTS(P, "double", kiln_arg_f64(1), KILN_F32);
    ACCEPTS(P, "uchar", kiln_arg_u8(1), KILN_F32);
    ACCEPTS(P, "char", kiln_arg_u8(1), KILN_F32);
    kiln_arg h = {.kind = KILN_ARG_SCALAR, .dtype = KILN_F16, .size = 2};
    ACCEPTS(P, "half", h, KILN_F32);
    REFUSES(P, "short", kiln_arg_i32(1), KILN_F32);
    REFUSES(P, "short", h, KILN_F32);
    /* Types kiln cannot see into: any scalar (the driver checks the size), never a tensor. */
    ACCEPTS(P, "size_t", kiln_arg_i64(1), KILN_F32);
    ACCEPTS(P, "my_real", kiln_arg_f32(1), KILN_F32);
    REFUSES(P, "struct params", kiln_arg_tensor(fake_tensor), KILN_F32);
    REFUSES(P, "size_t", kiln_arg_local(8), KILN_F32);
    /* Nothing carries vectors or samplers. */
    REFUSES(P, "float4", kiln_arg_f32(1), KILN_F32);
    REFUSES(P, "float4", kiln_arg_tensor(fake_tensor), KILN_F32);
    REFUSES(P, "sampler_t", kiln_arg_i32(0), KILN_F32);
    /* No argument info: anything goes (the driver checks sizes). */
    ACCEPTS(KILN__ADDR_UNKNOWN, NULL, kiln_arg_f64(1), KILN_F32);
    ACCEPTS(KILN__ADDR_UNKNOWN, "float*", kiln_arg_f64(1), KILN_F32);
}
END_TEST

START_TEST(messages_name_everything)
{
    kiln__param p;
    kiln__param_parse(P, "float", "alpha", &p);
    kiln_arg a = kiln_arg_i32(7);
    ck_assert_int_eq(kiln__argcheck("saxpy", 2, &p, &a, KILN_F32, msg, sizeof msg),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(msg, "kernel saxpy, parameter 2 'alpha' (float): kiln_arg_i32() (i32) "
                          "given; pass kiln_arg_f32()");
    kiln__param_parse(G, "float*", "y", &p);
    a = kiln_arg_tensor(fake_tensor);
    ck_assert_int_eq(kiln__argcheck("saxpy", 0, &p, &a, KILN_F64, msg, sizeof msg),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(msg, "kernel saxpy, parameter 0 'y' (__global float*): a tensor of dtype f64 "
                          "given; pass a tensor of dtype f32 (kiln_arg_tensor())");
    a = kiln_arg_f64(4);
    kiln__argcheck("saxpy", 0, &p, &a, KILN_F32, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "kiln_arg_f64() (f64) given"));
    kiln__param_parse(KILN__ADDR_LOCAL, "float*", "scratch", &p);
    a = kiln_arg_f32(1);
    kiln__argcheck("k", 1, &p, &a, KILN_F32, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "(__local float*)"));
    ck_assert_ptr_nonnull(strstr(msg, "pass kiln_arg_local(bytes)"));
    kiln__param_parse(P, "float4", NULL, &p); /* no name: none shown */
    kiln__argcheck(NULL, 1, &p, &a, KILN_F32, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "kernel ?, parameter 1 (float4)"));
    ck_assert_ptr_nonnull(strstr(msg, "no vectors by value"));
    kiln__param_parse(P, "short", "s", &p);
    kiln__argcheck("k", 1, &p, &a, KILN_F32, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "no constructor"));
    /* An accepted argument leaves an empty message; small and zero-sized buffers are safe. */
    kiln__param_parse(P, "float", "a", &p);
    ck_assert_int_eq(kiln__argcheck("k", 0, &p, &a, KILN_F32, msg, sizeof msg), KILN_OK);
    ck_assert_str_eq(msg, "");
    a = kiln_arg_i32(1);
    char tiny[8];
    ck_assert_int_eq(kiln__argcheck("k", 0, &p, &a, KILN_F32, tiny, sizeof tiny),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
    ck_assert_int_eq(kiln__argcheck("k", 0, &p, &a, KILN_F32, NULL, 0), KILN_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(hostile_input)
{
    /* Long names are cut (type names past 127 characters are not understood at all), control
     * characters shown as '?', and nothing is read past a terminator. */
    char big[4096];
    memset(big, 'f', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    kiln__param p;
    kiln__param_parse(P, big, big, &p);
    ck_assert_int_eq(p.kind, KILN__PARAM_VALUE);
    ck_assert_uint_eq(strlen(p.type), sizeof p.type - 1);
    ck_assert_uint_eq(strlen(p.name), sizeof p.name - 1);
    memcpy(big, "float*", 6);
    memset(big + 6, ' ', sizeof big - 7);
    kiln__param_parse(G, big, "x", &p); /* "float*" and then 4000 spaces: too long, unknown */
    ck_assert_int_eq(p.kind, KILN__PARAM_BUFFER);
    ck_assert_int_eq(p.dtype, -1);
    kiln__param_parse(P, "fl\noat\x01\xff", "n\tame", &p);
    ck_assert_str_eq(p.type, "fl?oat??");
    ck_assert_str_eq(p.name, "n?ame");
    /* Every byte value at every position of a short name, and odd addresses and kinds. */
    char t[8];
    for (int c = 1; c < 256; c++)
        for (int pos = 0; pos < 7; pos++) {
            memcpy(t, "uint4**", 8);
            t[pos] = (char)c;
            for (int addr = 0; addr < 6; addr++) {
                kiln__param_parse((kiln__addr)addr, t, t, &p);
                kiln_arg a = kiln_arg_i32(1);
                kiln__argcheck("k", 0, &p, &a, KILN_I32, msg, sizeof msg);
            }
        }
    ck_assert_int_eq(parsed(P, "").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "   ").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "const").kind, KILN__PARAM_VALUE);
    ck_assert_int_eq(parsed(P, "***").kind, KILN__PARAM_UNKNOWN);
    p.kind = 200;
    p.addr = 99;
    p.dtype = 100;
    kiln_arg a = {.kind = (kiln_arg_kind)77, .dtype = (kiln_dtype)-5};
    ck_assert_int_eq(kiln__argcheck("k", 0, &p, &a, (kiln_dtype)1000, msg, sizeof msg),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "unknown kind 77"));
    /* A hand-made parameter whose texts are not terminated: read within their arrays. */
    memset(&p, 'A', sizeof p);
    ck_assert_int_eq(kiln__argcheck("k", 0, &p, &a, KILN_F32, msg, sizeof msg),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(strstr(msg, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")); /* 49 */
}
END_TEST

Suite *argcheck_suite(void)
{
    Suite *s = suite_create("argcheck");
    TCase *tc = tcase_create("argcheck");
    tcase_add_test(tc, parse_kinds);
    tcase_add_test(tc, tensors_against_pointers);
    tcase_add_test(tc, scalars_against_values);
    tcase_add_test(tc, messages_name_everything);
    tcase_add_test(tc, hostile_input);
    suite_add_tcase(s, tc);
    return s;
}
