/* fuzz-cache-entry.c - the disk cache's entry reader (kiln__cache_entry_parse, with the
 * parameter table's check), the table's lookup and kernel-name comparison
 * (kiln__kernel_names_match), on arbitrary bytes.
 *
 * Input: a mode byte, then bytes. Mode even: the bytes are an entry file as read from disk.
 * Properties: no crash or sanitizer report; a rejection gives a printable reason; an accepted
 * entry's parts lie inside the input, its payload is non-empty, its names hold no NUL, and
 * encoding the parts gives the input back byte for byte (the format has no free bits: whatever
 * parses is what kiln writes). Mode odd: the bytes are split into a key, kernel names and a
 * payload, encoded as kiln writes them, then damaged as the next bytes say (truncate, flip a
 * bit): the intact entry must parse to the same parts, a truncated one must be rejected, and a
 * flipped one must be rejected or parse to parts that encode back to it. The names of every
 * accepted entry are compared with themselves and with the other part in both orders
 * (kiln__kernel_names_match is reflexive and symmetric), and looked up in its parameter table
 * (kiln__param_table_find, with up to 63 parameters). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/diskcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_reason(const char *why)
{
    if (!why || !*why || strlen(why) > 200)
        abort();
    for (const char *p = why; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
            abort();
}

static void check_names(const kiln__cache_entry *e, const char *other, size_t olen)
{
    if (!kiln__kernel_names_match(e->names, e->nameslen, e->names, e->nameslen))
        abort();
    if (kiln__kernel_names_match(e->names, e->nameslen, other, olen) !=
        kiln__kernel_names_match(other, olen, e->names, e->nameslen))
        abort();
}

/* Every kernel of an accepted entry looked up in its parameter table (the table was verified:
 * the lookup must read inside it), with its count and with another. */
static void check_lookups(const kiln__cache_entry *e)
{
    kiln__param ps[64];
    for (size_t i = 0; i < e->nameslen;) {
        const char *s = e->names + i, *end = memchr(s, ';', e->nameslen - i);
        size_t n = end ? (size_t)(end - s) : e->nameslen - i;
        char name[128];
        if (n < sizeof name) {
            memcpy(name, s, n);
            name[n] = '\0';
            for (unsigned nargs = 0; nargs < 64; nargs += 7)
                kiln__param_table_find(e->params, e->paramslen, name, nargs, ps);
        }
        i += n + 1;
    }
}

/* An accepted entry: parts inside buf, and it encodes back to buf exactly. */
static void check_accepted(const uint8_t *buf, size_t len, const kiln__cache_entry *e)
{
    const char *lo = (const char *)buf, *hi = lo + len;
    if (e->size == 0 || (const char *)e->payload < lo || (const char *)e->payload + e->size > hi ||
        e->key < lo || e->key + e->keylen > hi || e->names < lo || e->names + e->nameslen > hi ||
        memchr(e->names, '\0', e->nameslen) ||
        (e->paramslen &&
         ((const char *)e->params < lo || (const char *)e->params + e->paramslen > hi)))
        abort();
    check_lookups(e);
    size_t elen = 0;
    uint8_t *enc = kiln__cache_entry_encode(e, &elen);
    if (!enc || elen != len || memcmp(enc, buf, len) != 0)
        abort();
    free(enc);
    check_names(e, e->key, e->keylen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    /* a copy of exactly the input, so that ASan sees any read past its end */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    kiln__cache_entry e;
    if (mode % 2 == 0) {
        const char *why = kiln__cache_entry_parse(buf, size, &e);
        if (why)
            check_reason(why);
        else
            check_accepted(buf, size, &e);
        free(buf);
        return 0;
    }
    /* mode odd: key | names | payload, split by the first two bytes, then damage bytes */
    if (size < 4) {
        free(buf);
        return 0;
    }
    size_t rest = size - 4, klen = buf[0] % (rest + 1), nlen = buf[1] % (rest - klen + 1);
    size_t damage_at = buf[2], flip = buf[3];
    kiln__cache_entry in = {.key = (const char *)buf + 4,
                            .keylen = klen,
                            .names = (const char *)buf + 4 + klen,
                            .nameslen = nlen,
                            .payload = buf + 4 + klen + nlen,
                            .size = rest - klen - nlen};
    size_t elen = 0;
    uint8_t *enc = kiln__cache_entry_encode(&in, &elen);
    if (!enc) {
        free(buf);
        return 0;
    }
    bool valid = in.size > 0 && !memchr(in.names, '\0', in.nameslen);
    const char *why = kiln__cache_entry_parse(enc, elen, &e);
    if (valid != (why == NULL))
        abort();
    if (!why && (e.keylen != klen || memcmp(e.key, in.key, klen) != 0 || e.nameslen != nlen ||
                 memcmp(e.names, in.names, nlen) != 0 || e.size != in.size ||
                 memcmp(e.payload, in.payload, in.size) != 0))
        abort();
    if (!why)
        check_accepted(enc, elen, &e);
    /* truncated: always rejected */
    size_t cut = elen ? damage_at % elen : 0;
    uint8_t *part = malloc(cut ? cut : 1);
    if (part) {
        memcpy(part, enc, cut);
        why = kiln__cache_entry_parse(part, cut, &e);
        if (!why)
            abort();
        check_reason(why);
        free(part);
    }
    /* one bit flipped: rejected, or a consistent entry */
    if (elen) {
        enc[(damage_at * 131 + flip) % elen] ^= (uint8_t)(1u << (flip % 8));
        why = kiln__cache_entry_parse(enc, elen, &e);
        if (why)
            check_reason(why);
        else
            check_accepted(enc, elen, &e);
    }
    free(enc);
    free(buf);
    return 0;
}
