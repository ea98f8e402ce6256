/* fuzz-argcheck.c - kernel argument checking (kiln__param_parse, kiln__argcheck) against
 * arbitrary kernel signatures, as drivers describe them through clGetKernelArgInfo.
 *
 * Input: an address-qualifier byte, an argument byte (which constructor: tensor, f32, f64, i32,
 * i64, u8, local), a tensor-dtype byte, then the type name and the parameter name separated by a
 * NUL (neither needs to be terminated: the parser reads at most 128 bytes of each). With the top
 * bit of the first byte set, the parameter description itself is taken from the input's bytes
 * (kiln__argcheck must take any bytes there). Properties: no crash or sanitizer report; the
 * description's strings are terminated within their arrays and its kinds are known; the
 * verdict is KILN_OK or KILN_ERR_INVALID_ARGUMENT, the same on a second call, with a
 * terminated message that names the kernel on failure; a pointer parameter never takes a
 * scalar, a scalar parameter never takes a tensor, a __local parameter takes only
 * kiln_arg_local; and the parse of a description's own type name (when kept whole and
 * printable) gives the same kind. */
#include <stdlib.h>
#include <string.h>

#include "../lib/argcheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kiln_arg make_arg(uint8_t which)
{
    switch (which % 7) {
    case 0:
        return kiln_arg_tensor((const kiln_tensor *)(uintptr_t)0x1000); /* never read */
    case 1:
        return kiln_arg_f32(1.5f);
    case 2:
        return kiln_arg_f64(2.5);
    case 3:
        return kiln_arg_i32(-3);
    case 4:
        return kiln_arg_i64(1LL << 40);
    case 5:
        return kiln_arg_u8(7);
    default:
        return kiln_arg_local((size_t)which * 16);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    kiln_arg a = make_arg(data[1]);
    kiln_dtype td = (kiln_dtype)(data[2] % KILN_DTYPE_COUNT);
    kiln__param p;
    bool raw = data[0] & 0x80;
    if (raw) {
        if (size < 3 + sizeof p)
            return 0;
        memcpy(&p, data + 3, sizeof p); /* any bytes, strings unterminated */
    } else {
        /* copies of exactly the input's strings: ASan sees a read past them */
        size_t rest = size - 3;
        const uint8_t *nul = memchr(data + 3, 0, rest);
        size_t tlen = nul ? (size_t)(nul - (data + 3)) : rest;
        char *type = malloc(tlen + 1), *name = malloc(rest - tlen + 1);
        if (!type || !name) {
            free(type);
            free(name);
            return 0;
        }
        memcpy(type, data + 3, tlen);
        type[tlen] = '\0';
        size_t nlen = nul ? rest - tlen - 1 : 0;
        memcpy(name, nul ? (const char *)nul + 1 : "", nlen);
        name[nlen] = '\0';
        kiln__param_parse((kiln__addr)(data[0] % 5), (data[0] & 0x40) ? NULL : type,
                          (data[0] & 0x20) ? NULL : name, &p);
        free(type);
        free(name);
        if (!memchr(p.type, 0, sizeof p.type) || !memchr(p.name, 0, sizeof p.name) ||
            p.kind > KILN__PARAM_OPAQUE || p.addr > KILN__ADDR_PRIVATE)
            abort();
        /* the parse of its own type name, when that was kept whole (not cut, no byte shown as
         * '?'), agrees */
        if (strlen(p.type) + 1 < sizeof p.type && p.type[0] && !strchr(p.type, '?')) {
            kiln__param q;
            kiln__param_parse((kiln__addr)p.addr, p.type, p.name, &q);
            if (q.kind != p.kind || q.dtype != p.dtype)
                abort();
        }
    }
    char msg[256], msg2[256];
    memset(msg, 'x', sizeof msg);
    kiln_status s = kiln__argcheck("kern", 2, &p, &a, td, msg, sizeof msg);
    kiln_status s2 = kiln__argcheck("kern", 2, &p, &a, td, msg2, sizeof msg2);
    if ((s != KILN_OK && s != KILN_ERR_INVALID_ARGUMENT) || s != s2 || !memchr(msg, 0, sizeof msg))
        abort();
    if (s != KILN_OK && !strstr(msg, "kern"))
        abort();
    if (!raw) {
        bool tensor = a.kind == KILN_ARG_TENSOR, local = a.kind == KILN_ARG_LOCAL;
        if (s == KILN_OK && ((p.kind == KILN__PARAM_BUFFER && !tensor) ||
                             (p.kind == KILN__PARAM_SCALAR && (tensor || local)) ||
                             (p.kind == KILN__PARAM_LOCAL && !local)))
            abort();
    }
    kiln__argcheck(NULL, -1, &p, &a, td, msg, 0); /* size 0: nothing written */
    return 0;
}
