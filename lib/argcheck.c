/* argcheck.c - user kernel parameters parsed from the driver's argument info, and kiln_args
 * checked against them. Pure: no OpenCL call, no global state. */
#include "argcheck.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"

#define TYPE_CAP 128 /* characters of a driver's type name read; longer ones count as unknown */

/* The OpenCL C scalar types by name, with their size; those kiln has a dtype for (matched through
 * the dtype table: its storage type, or the other signedness of an integer) map to it. */
static const struct {
    const char *name;
    unsigned char size;
} cl_scalars[] = {
    {"char", 1}, {"uchar", 1}, {"short", 2}, {"ushort", 2}, {"int", 4},    {"uint", 4},
    {"long", 8}, {"ulong", 8}, {"half", 2},  {"float", 4},  {"double", 8}, {"bool", 1},
};

/* By-value integer types whose size depends on the device. */
static const char *const sized_names[] = {"size_t", "ptrdiff_t", "intptr_t", "uintptr_t"};

static const char *const opaque_names[] = {"sampler_t",   "event_t",      "queue_t",
                                           "clk_event_t", "reserve_id_t", "pipe"};

/* Words that qualify a type without changing what it is. */
static const char *const qualifiers[] = {"const",        "volatile",   "restrict",    "__restrict",
                                         "global",       "__global",   "constant",    "__constant",
                                         "local",        "__local",    "private",     "__private",
                                         "__kernel",     "read_only",  "__read_only", "write_only",
                                         "__write_only", "read_write", "__read_write"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

enum base_class { BASE_UNKNOWN, BASE_SCALAR, BASE_SIZED, BASE_OPAQUE, BASE_VOID };

typedef struct base_type {
    enum base_class cls;
    signed char dtype;  /* BASE_SCALAR: kiln's dtype, -1 if kiln has none */
    unsigned char size; /* BASE_SCALAR: bytes of one element */
    int width;          /* vector width; 1 for a scalar */
} base_type;

static bool in_list(const char *word, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(word, list[i]) == 0)
            return true;
    return false;
}

/* The dtype whose OpenCL storage type is name, or whose integer type of the other signedness
 * is; -1 if none. bf16 is stored in a ushort, which stays a plain 2-byte element (f16 or bf16
 * tensors may be passed), so it names no dtype here. */
static signed char dtype_of_cl_name(const char *name)
{
    for (int d = 0; d < KILN_DTYPE_COUNT; d++) {
        if (kiln__dtype_is_bf16((kiln_dtype)d))
            continue;
        if (strcmp(name, kiln__dtype_cl_type((kiln_dtype)d)) == 0)
            return (signed char)d;
        const char *u = kiln__dtype_cl_unsigned_type((kiln_dtype)d); /* "uint" for i32 */
        if (u && (strcmp(name, u) == 0 || (u[0] == 'u' && strcmp(name, u + 1) == 0)))
            return (signed char)d;
    }
    return -1;
}

/* A scalar or vector name ("float", "uint4"): its element's dtype and size, and the width. */
static bool parse_scalar(const char *word, base_type *out)
{
    char name[TYPE_CAP + 1];
    size_t n = strlen(word);
    size_t digits = 0;
    while (digits < n && word[n - 1 - digits] >= '0' && word[n - 1 - digits] <= '9')
        digits++;
    int width = 1;
    if (digits > 0) {
        if (digits > 2 || digits == n)
            return false;
        width = 0;
        for (size_t i = n - digits; i < n; i++)
            width = width * 10 + (word[i] - '0');
        if (width != 2 && width != 3 && width != 4 && width != 8 && width != 16)
            return false;
    }
    memcpy(name, word, n - digits);
    name[n - digits] = '\0';
    for (size_t i = 0; i < COUNT(cl_scalars); i++) {
        if (strcmp(name, cl_scalars[i].name) == 0) {
            if (width > 1 && strcmp(name, "bool") == 0)
                return false;
            out->cls = BASE_SCALAR;
            out->dtype = -1;
            if (strcmp(name, "bool") != 0)
                out->dtype = dtype_of_cl_name(name);
            out->size = cl_scalars[i].size;
            out->width = width;
            return true;
        }
    }
    return false;
}

static bool is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Read a type name into its base type and pointer depth. */
static base_type parse_type(const char *type, int *stars)
{
    base_type b = {BASE_UNKNOWN, -1, 0, 1};
    *stars = 0;
    if (!type)
        return b;
    size_t n = strnlen(type, TYPE_CAP);
    if (n == TYPE_CAP)
        return b; /* too long to be a type kiln knows */
    char buf[TYPE_CAP + 1];
    memcpy(buf, type, n);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '*') {
            buf[i] = ' ';
            (*stars)++;
        }
    const char *base = NULL;
    int words = 0;
    bool is_unsigned = false, aggregate = false;
    char *p = buf;
    while (*p) {
        while (*p && is_space((unsigned char)*p))
            p++;
        if (!*p)
            break;
        char *word = p;
        while (*p && !is_space((unsigned char)*p))
            p++;
        if (*p)
            *p++ = '\0';
        if (in_list(word, qualifiers, COUNT(qualifiers)) || strcmp(word, "signed") == 0)
            continue;
        if (strcmp(word, "unsigned") == 0)
            is_unsigned = true;
        else if (strcmp(word, "struct") == 0 || strcmp(word, "union") == 0 ||
                 strcmp(word, "enum") == 0)
            aggregate = true;
        else {
            base = word;
            words++;
        }
    }
    if (aggregate || words > 1 || (!base && !is_unsigned))
        return b;
    char name[TYPE_CAP + 2];
    if (is_unsigned) {
        /* "unsigned int" is uint, "unsigned" alone too; "unsigned float" is nothing. */
        const char *w = base ? base : "int";
        if (strcmp(w, "char") != 0 && strcmp(w, "short") != 0 && strcmp(w, "int") != 0 &&
            strcmp(w, "long") != 0)
            return b;
        snprintf(name, sizeof name, "u%s", w);
        base = name;
    }
    if (strcmp(base, "void") == 0)
        b.cls = BASE_VOID;
    else if (in_list(base, sized_names, COUNT(sized_names)))
        b.cls = BASE_SIZED;
    else if (strncmp(base, "image", 5) == 0 || in_list(base, opaque_names, COUNT(opaque_names)))
        b.cls = BASE_OPAQUE;
    else
        parse_scalar(base, &b);
    return b;
}

/* Copy text (NULL: "") into dst of size bytes, cut to fit, non-printable bytes as '?'. */
static void copy_text(char *dst, size_t size, const char *text)
{
    size_t n = text ? strnlen(text, size - 1) : 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        dst[i] = '?';
        if (c >= 0x20 && c < 0x7f)
            dst[i] = text[i];
    }
    dst[n] = '\0';
}

void kiln__param_parse(kiln__addr addr, const char *type, const char *name, kiln__param *out)
{
    memset(out, 0, sizeof *out);
    out->kind = KILN__PARAM_UNKNOWN;
    out->addr = (unsigned char)addr;
    out->dtype = -1;
    copy_text(out->type, sizeof out->type, type);
    copy_text(out->name, sizeof out->name, name);
    int stars = 0;
    base_type b = parse_type(type, &stars);
    switch (addr) {
    case KILN__ADDR_GLOBAL:
    case KILN__ADDR_CONSTANT:
        if (b.cls == BASE_OPAQUE) {
            out->kind = KILN__PARAM_OPAQUE; /* images are __global */
            break;
        }
        out->kind = KILN__PARAM_BUFFER;
        if (stars == 1 && b.cls == BASE_SCALAR) {
            out->dtype = b.dtype;
            out->elem = b.size; /* a pointee kiln has no dtype for: tensors of its size */
        }
        break;
    case KILN__ADDR_LOCAL:
        out->kind = KILN__PARAM_LOCAL;
        break;
    case KILN__ADDR_PRIVATE:
        if (b.cls == BASE_OPAQUE)
            out->kind = KILN__PARAM_OPAQUE;
        else if (stars > 0 || b.cls == BASE_VOID)
            out->kind = KILN__PARAM_UNKNOWN; /* not a legal kernel parameter: the driver says */
        else if (b.cls == BASE_SCALAR && b.width > 1)
            out->kind = KILN__PARAM_VECTOR;
        else if (b.cls == BASE_SCALAR) {
            out->kind = KILN__PARAM_SCALAR;
            out->dtype = b.dtype;
        } else
            out->kind = KILN__PARAM_VALUE;
        break;
    default:
        break; /* no address qualifier: nothing can be checked */
    }
}

/* The constructor that makes a scalar of dtype, or a description when there is none. */
static const char *scalar_maker(int dtype, char *buf, size_t size)
{
    switch (dtype) {
    case KILN_F32:
    case KILN_F64:
    case KILN_I32:
    case KILN_I64:
    case KILN_U8:
        snprintf(buf, size, "kiln_arg_%s()", kiln__dtype_name((kiln_dtype)dtype));
        break;
    default:
        snprintf(buf, size, "a scalar of dtype %s", kiln__dtype_name((kiln_dtype)dtype));
        break;
    }
    return buf;
}

/* What argument a is, in words. */
static const char *given_text(const kiln_arg *a, kiln_dtype tensor_dtype, char *buf, size_t size)
{
    char maker[48];
    switch (a->kind) {
    case KILN_ARG_TENSOR:
        snprintf(buf, size, "a tensor of dtype %s", kiln__dtype_name(tensor_dtype));
        break;
    case KILN_ARG_LOCAL:
        snprintf(buf, size, "kiln_arg_local() (local memory)");
        break;
    case KILN_ARG_SCALAR:
        snprintf(buf, size, "%s (%s)", scalar_maker((int)a->dtype, maker, sizeof maker),
                 kiln__dtype_name(a->dtype));
        break;
    default:
        snprintf(buf, size, "an argument of unknown kind %d", (int)a->kind);
        break;
    }
    return buf;
}

/* What p needs, in words. */
static const char *wanted_text(const kiln__param *p, char *buf, size_t size)
{
    char maker[48];
    switch (p->kind) {
    case KILN__PARAM_BUFFER:
        if (p->dtype >= 0)
            snprintf(buf, size, "a tensor of dtype %s (kiln_arg_tensor())",
                     kiln__dtype_name((kiln_dtype)p->dtype));
        else if (p->elem)
            snprintf(buf, size, "a tensor of a %u-byte dtype (kiln_arg_tensor())", p->elem);
        else
            snprintf(buf, size, "a tensor (kiln_arg_tensor())");
        break;
    case KILN__PARAM_LOCAL:
        snprintf(buf, size, "kiln_arg_local(bytes)");
        break;
    case KILN__PARAM_SCALAR:
        if (p->dtype >= 0)
            snprintf(buf, size, "%s", scalar_maker(p->dtype, maker, sizeof maker));
        else
            snprintf(buf, size,
                     "a type kiln_arg has no constructor for; declare the parameter "
                     "int, long, float, double or uchar");
        break;
    case KILN__PARAM_VALUE:
        snprintf(buf, size, "a scalar (kiln_arg_i32() ...) of the parameter's size");
        break;
    case KILN__PARAM_VECTOR:
        snprintf(buf, size,
                 "nothing: kiln_arg carries no vectors by value; pass the "
                 "components as scalars, or a tensor");
        break;
    default: /* OPAQUE */
        snprintf(buf, size, "nothing: kiln_arg carries no images, samplers or pipes");
        break;
    }
    return buf;
}

static const char *addr_word(unsigned addr)
{
    switch (addr) {
    case KILN__ADDR_GLOBAL:
        return "__global ";
    case KILN__ADDR_CONSTANT:
        return "__constant ";
    case KILN__ADDR_LOCAL:
        return "__local ";
    default:
        return "";
    }
}

static bool accepts(const kiln__param *p, const kiln_arg *a, kiln_dtype tensor_dtype)
{
    switch (p->kind) {
    case KILN__PARAM_UNKNOWN:
        return true;
    case KILN__PARAM_BUFFER:
        if (a->kind != KILN_ARG_TENSOR)
            return false;
        if (p->dtype >= 0)
            return (int)tensor_dtype == p->dtype;
        return !p->elem || kiln__dtype_size(tensor_dtype) == p->elem;
    case KILN__PARAM_LOCAL:
        return a->kind == KILN_ARG_LOCAL;
    case KILN__PARAM_SCALAR:
        return a->kind == KILN_ARG_SCALAR && p->dtype >= 0 && (int)a->dtype == p->dtype;
    case KILN__PARAM_VALUE:
        return a->kind == KILN_ARG_SCALAR;
    default:
        return false; /* VECTOR, OPAQUE and anything else */
    }
}

kiln_status kiln__argcheck(const char *kernel, int index, const kiln__param *p, const kiln_arg *a,
                           kiln_dtype tensor_dtype, char *msg, size_t size)
{
    if (size > 0)
        msg[0] = '\0';
    if (accepts(p, a, tensor_dtype))
        return KILN_OK;
    if (size == 0)
        return KILN_ERR_INVALID_ARGUMENT;
    /* p's texts are read within their arrays: a hand-made p need not terminate them. */
    char given[96], wanted[192], name[64] = "";
    if (p->name[0])
        snprintf(name, sizeof name, " '%.*s'", (int)sizeof p->name, p->name);
    snprintf(msg, size, "kernel %.128s, parameter %d%s (%s%.*s): %s given; pass %s",
             kernel ? kernel : "?", index, name, addr_word(p->addr), (int)sizeof p->type,
             p->type[0] ? p->type : "type unknown",
             given_text(a, tensor_dtype, given, sizeof given),
             wanted_text(p, wanted, sizeof wanted));
    return KILN_ERR_INVALID_ARGUMENT;
}
