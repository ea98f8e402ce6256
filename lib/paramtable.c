/* paramtable.c - the parameter table of a user program kept in its disk cache entry: records
 * written, verified against the program's kernel names, and looked up. Pure: no OpenCL call, no
 * allocation, no global state. */
#include "paramtable.h"

#include <string.h>

#define NAME_MAX_LEN 127 /* kiln__kernel's name holds 127 characters */
#define TEXT_MAX_LEN 255

/* One record's parts, pointing into the table. */
typedef struct record {
    const char *kernel;
    size_t kernellen;
    bool info;
    unsigned nargs;
    const uint8_t *params; /* the parameters' bytes, paramslen long */
    size_t paramslen;
} record;

static size_t put_text(uint8_t *dst, const char *text)
{
    size_t n = text ? strnlen(text, TEXT_MAX_LEN) : 0;
    if (dst) {
        dst[0] = (uint8_t)n;
        if (n)
            memcpy(dst + 1, text, n);
    }
    return 1 + n;
}

size_t kiln__param_record_encode(uint8_t *dst, const char *kernel, bool info, unsigned nargs,
                                 const kiln__param_text *texts)
{
    size_t klen = strnlen(kernel, NAME_MAX_LEN + 1);
    if (klen == 0 || klen > NAME_MAX_LEN || nargs > 0xffff)
        return 0;
    size_t n = 1 + klen + 3;
    if (dst) {
        dst[0] = (uint8_t)klen;
        memcpy(dst + 1, kernel, klen);
        dst[1 + klen] = info;
        dst[2 + klen] = (uint8_t)nargs;
        dst[3 + klen] = (uint8_t)(nargs >> 8);
    }
    for (unsigned i = 0; info && i < nargs; i++) {
        if (dst)
            dst[n] = (uint8_t)texts[i].addr;
        n++;
        n += put_text(dst ? dst + n : NULL, texts[i].type);
        n += put_text(dst ? dst + n : NULL, texts[i].name);
    }
    return n;
}

/* Step over one length-prefixed text at t[*pos, len); false when it runs past the end or holds a
 * NUL byte. */
static bool skip_text(const uint8_t *t, size_t len, size_t *pos)
{
    if (*pos >= len)
        return false;
    size_t n = t[*pos];
    if (n > len - *pos - 1 || memchr(t + *pos + 1, '\0', n))
        return false;
    *pos += 1 + n;
    return true;
}

/* The record at t[*pos, len), or why not; *pos moves past it. */
static const char *next_record(const uint8_t *t, size_t len, size_t *pos, record *r)
{
    size_t p = *pos;
    r->kernellen = t[p++];
    if (r->kernellen == 0 || r->kernellen > NAME_MAX_LEN)
        return "a kernel name length in the parameter table is out of range";
    if (r->kernellen + 3 > len - p)
        return "the parameter table is truncated";
    r->kernel = (const char *)t + p;
    p += r->kernellen;
    if (t[p] > 1)
        return "a parameter table record has a bad argument info flag";
    r->info = t[p] == 1;
    r->nargs = (unsigned)t[p + 1] | (unsigned)t[p + 2] << 8;
    p += 3;
    r->params = t + p;
    for (unsigned i = 0; r->info && i < r->nargs; i++) {
        if (p >= len)
            return "the parameter table is truncated";
        if (t[p++] > KILN__ADDR_PRIVATE)
            return "a parameter table record has an unknown address qualifier";
        if (!skip_text(t, len, &p) || !skip_text(t, len, &p))
            return "a parameter table text is truncated or holds a NUL byte";
    }
    r->paramslen = (size_t)(t + p - r->params);
    *pos = p;
    return NULL;
}

/* The next non-empty name of the list names[*pos, nameslen) (empty names are skipped: "a;b;"),
 * its length to *n; NULL at the end. */
static const char *next_name(const char *names, size_t nameslen, size_t *pos, size_t *n)
{
    while (*pos < nameslen) {
        const char *s = names + *pos;
        const char *end = memchr(s, ';', nameslen - *pos);
        *n = end ? (size_t)(end - s) : nameslen - *pos;
        *pos += *n + 1;
        if (*n)
            return s;
    }
    return NULL;
}

const char *kiln__param_table_check(const uint8_t *t, size_t len, const char *names,
                                    size_t nameslen)
{
    if (len == 0)
        return NULL;
    if (len > KILN__PARAM_TABLE_CAP)
        return "the parameter table is over its cap";
    size_t pos = 0, npos = 0, n = 0;
    while (pos < len) {
        record r;
        const char *why = next_record(t, len, &pos, &r);
        if (why)
            return why;
        const char *name = next_name(names, nameslen, &npos, &n);
        if (!name || n != r.kernellen || memcmp(name, r.kernel, n) != 0)
            return "the parameter table's kernels are not the entry's kernel names";
    }
    if (next_name(names, nameslen, &npos, &n))
        return "the parameter table lacks a kernel of the entry";
    return NULL;
}

/* Copy a length-prefixed text at t[*pos] into buf (TEXT_MAX_LEN + 1 bytes); NULL when empty. */
static const char *take_text(const uint8_t *t, size_t *pos, char *buf)
{
    size_t n = t[*pos];
    memcpy(buf, t + *pos + 1, n);
    buf[n] = '\0';
    *pos += 1 + n;
    return n ? buf : NULL;
}

kiln__params_found kiln__param_table_find(const uint8_t *t, size_t len, const char *kernel,
                                          unsigned nargs, kiln__param *out)
{
    size_t pos = 0, klen = strlen(kernel);
    record r;
    while (pos < len && !next_record(t, len, &pos, &r)) {
        if (r.kernellen != klen || memcmp(r.kernel, kernel, klen) != 0)
            continue;
        if (r.nargs != nargs)
            return KILN__PARAMS_ABSENT;
        if (!r.info)
            return KILN__PARAMS_NO_INFO;
        size_t p = 0;
        for (unsigned i = 0; i < nargs; i++) {
            char type[TEXT_MAX_LEN + 1], name[TEXT_MAX_LEN + 1];
            kiln__addr addr = (kiln__addr)r.params[p++];
            const char *ty = take_text(r.params, &p, type);
            kiln__param_parse(addr, ty, take_text(r.params, &p, name), &out[i]);
        }
        return KILN__PARAMS_FOUND;
    }
    return KILN__PARAMS_ABSENT;
}
