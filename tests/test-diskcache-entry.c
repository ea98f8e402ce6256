/* test-diskcache-entry.c - the cache entry reader/verifier as a pure function on bytes (no file,
 * no device): a hand-assembled entry, every truncation, every bit flip, length fields that would
 * wrap, random bytes; and the kernel-name list comparison. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/diskcache.h"

/* The format, written out here independently of diskcache.c (little-endian):
 *   0 "KILNBIN\0", 8 version 2 (u32), 12 header size 48 (u32), 16 key length, 24 names length,
 *   32 payload length, 40 FNV-1a 64 of bytes 0-39 then everything from 48 on (u64s);
 *   48 key, names, payload. */
#define HDR 48

static uint64_t fnv(const uint8_t *p, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute the checksum of an entry of len bytes (len >= HDR). */
static void reseal(uint8_t *b, size_t len)
{
    le64(b + 40, fnv(b + HDR, len - HDR, fnv(b, 40, 0xcbf29ce484222325ull)));
}

static const char key[] = "kiln program cache key v2\nsource 3:abc";
static const char names[] = "twice;half";
static const uint8_t payload[] = {0x7f, 'E', 'L', 'F', 0, 1, 2, 3, 0xff, 0xfe, 9};

/* The entry for key, names and payload, assembled byte by byte; its length goes to *len. */
static uint8_t *hand_entry(size_t *len)
{
    size_t kl = strlen(key), nl = strlen(names), pl = sizeof payload;
    *len = HDR + kl + nl + pl;
    uint8_t *b = calloc(1, *len);
    ck_assert_ptr_nonnull(b);
    memcpy(b, "KILNBIN", 8);
    b[8] = 2;
    b[12] = HDR;
    le64(b + 16, kl);
    le64(b + 24, nl);
    le64(b + 32, pl);
    memcpy(b + HDR, key, kl);
    memcpy(b + HDR + kl, names, nl);
    memcpy(b + HDR + kl + nl, payload, pl);
    reseal(b, *len);
    return b;
}

/* Parse a private copy of exactly n bytes, so that ASan sees any read past them. */
static const char *parse_copy(const uint8_t *b, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(copy);
    if (n)
        memcpy(copy, b, n);
    kiln__cache_entry e;
    const char *why = kiln__cache_entry_parse(copy, n, &e);
    if (why)
        ck_assert_ptr_null(e.payload); /* nothing is handed out on failure */
    free(copy);
    return why;
}

START_TEST(hand_entry_parses_and_encodes_alike)
{
    size_t len;
    uint8_t *b = hand_entry(&len);
    kiln__cache_entry e;
    const char *why = kiln__cache_entry_parse(b, len, &e);
    ck_assert_msg(why == NULL, "rejected: %s", why);
    ck_assert_uint_eq(e.keylen, strlen(key));
    ck_assert_int_eq(memcmp(e.key, key, e.keylen), 0);
    ck_assert_uint_eq(e.nameslen, strlen(names));
    ck_assert_int_eq(memcmp(e.names, names, e.nameslen), 0);
    ck_assert_uint_eq(e.size, sizeof payload);
    ck_assert_int_eq(memcmp(e.payload, payload, e.size), 0);
    ck_assert_ptr_eq(e.payload, b + len - sizeof payload); /* points into the buffer */
    kiln__cache_entry in = {key, strlen(key), names, strlen(names), payload, sizeof payload};
    size_t elen = 0;
    uint8_t *enc = kiln__cache_entry_encode(&in, &elen);
    ck_assert_ptr_nonnull(enc);
    ck_assert_uint_eq(elen, len);
    ck_assert_int_eq(memcmp(enc, b, len), 0);
    free(enc);
    free(b);
}
END_TEST

START_TEST(empty_names_are_allowed)
{
    kiln__cache_entry in = {key, strlen(key), NULL, 0, payload, sizeof payload}, out;
    size_t len = 0;
    uint8_t *enc = kiln__cache_entry_encode(&in, &len);
    ck_assert_ptr_nonnull(enc);
    ck_assert_ptr_null(kiln__cache_entry_parse(enc, len, &out));
    ck_assert_uint_eq(out.nameslen, 0);
    free(enc);
}
END_TEST

START_TEST(encode_refuses_what_cannot_parse)
{
    size_t len = 1;
    kiln__cache_entry no_payload = {key, strlen(key), names, strlen(names), payload, 0};
    ck_assert_ptr_null(kiln__cache_entry_encode(&no_payload, &len));
    ck_assert_uint_eq(len, 0);
    kiln__cache_entry no_key = {key, 0, names, strlen(names), payload, sizeof payload};
    ck_assert_ptr_null(kiln__cache_entry_encode(&no_key, &len));
    kiln__cache_entry huge = {key,           strlen(key), names,
                              strlen(names), payload,     ((size_t)1 << 30) + 1};
    ck_assert_ptr_null(kiln__cache_entry_encode(&huge, &len)); /* over the cap: no read */
}
END_TEST

START_TEST(every_truncation_and_extension_is_rejected)
{
    size_t len;
    uint8_t *b = hand_entry(&len);
    for (size_t n = 0; n < len; n++)
        ck_assert_msg(parse_copy(b, n) != NULL, "accepted the first %zu of %zu bytes", n, len);
    uint8_t *longer = calloc(1, len + 1);
    ck_assert_ptr_nonnull(longer);
    memcpy(longer, b, len);
    ck_assert_str_eq(parse_copy(longer, len + 1),
                     "length fields do not match the file size (truncated?)");
    free(longer);
    ck_assert_str_eq(parse_copy(b, 0), "empty file");
    ck_assert_str_eq(parse_copy(b, 47), "truncated header");
    free(b);
}
END_TEST

START_TEST(every_bit_flip_is_rejected)
{
    size_t len;
    uint8_t *b = hand_entry(&len);
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (uint8_t)(1u << bit);
            ck_assert_msg(parse_copy(b, len) != NULL, "byte %zu bit %d flipped was accepted", i,
                          bit);
            b[i] ^= (uint8_t)(1u << bit);
        }
    ck_assert_ptr_null(parse_copy(b, len));
    free(b);
}
END_TEST

/* Length fields rewritten (and the checksum recomputed, so that only the length checks stand
 * between them and a read past the buffer). */
START_TEST(length_fields_that_would_wrap)
{
    size_t len;
    uint8_t *b = hand_entry(&len);
    const uint64_t kl = strlen(key), nl = strlen(names), pl = sizeof payload;
    const uint64_t max = UINT64_MAX;
    const uint64_t cases[][3] = {
        {max, nl, pl},
        {kl, max, pl},
        {kl, nl, max},
        {max, max, pl + kl + nl + 2},                         /* k + n wraps to fit */
        {(uint64_t)1 << 63, (uint64_t)1 << 63, kl + nl + pl}, /* k + n wraps to 0 */
        {kl + nl + pl, 0, 0},                                 /* no payload */
        {0, nl, kl + pl},                                     /* no key */
        {kl + 1, nl, pl - 1},                                 /* shifted: still sums to the size */
        {kl, nl + pl, 0},
        {kl, nl, pl + 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        le64(b + 16, cases[i][0]);
        le64(b + 24, cases[i][1]);
        le64(b + 32, cases[i][2]);
        reseal(b, len);
        const char *why = parse_copy(b, len);
        /* Case 7 moves a byte from the key to the names and one from the names to the payload,
         * and recomputes the sum: a well-formed entry of another key, which the loader's key
         * comparison refuses. Every other case is malformed. */
        if (i == 7)
            ck_assert_msg(why == NULL, "case 7: %s", why);
        else
            ck_assert_msg(why != NULL, "case %zu accepted", i);
    }
    free(b);
}
END_TEST

START_TEST(names_with_nul_are_rejected)
{
    size_t len;
    uint8_t *b = hand_entry(&len);
    b[HDR + strlen(key) + 2] = '\0';
    reseal(b, len);
    ck_assert_str_eq(parse_copy(b, len), "the kernel names hold a NUL byte");
    free(b);
}
END_TEST

START_TEST(version_and_header_size)
{
    size_t len;
    uint8_t *b = hand_entry(&len);
    b[8] = 1; /* the previous format */
    reseal(b, len);
    ck_assert_str_eq(parse_copy(b, len), "unknown format version");
    b[8] = 2;
    b[12] = 40;
    reseal(b, len);
    ck_assert_str_eq(parse_copy(b, len), "unknown format version");
    b[12] = HDR;
    b[7] = 'X';
    reseal(b, len);
    ck_assert_str_eq(parse_copy(b, len), "bad magic: not a kiln cache entry");
    free(b);
}
END_TEST

/* Random bytes, and random bytes behind a valid header prefix, never parse and never read past
 * the buffer (ASan). xorshift64: the same bytes every run. */
START_TEST(random_bytes_are_rejected)
{
    size_t len;
    uint8_t *good = hand_entry(&len);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    uint8_t buf[512];
    for (int round = 0; round < 100000; round++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = (size_t)(x % sizeof buf);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = (uint8_t)x;
        }
        size_t keep = round % 3 == 0 ? 16 : round % 3 == 1 ? 40 : 0; /* a valid prefix */
        if (keep && n >= keep)
            memcpy(buf, good, keep);
        ck_assert_msg(parse_copy(buf, n) != NULL, "round %d: %zu random bytes accepted", round, n);
    }
    free(good);
}
END_TEST

static bool match(const char *a, const char *b)
{
    return kiln__kernel_names_match(a, strlen(a), b, strlen(b));
}

START_TEST(kernel_name_lists)
{
    ck_assert(match("twice", "twice"));
    ck_assert(match("a;b", "b;a"));
    ck_assert(match("", ""));
    ck_assert(match("a;b;", "b;a"));
    ck_assert(!match("a", "a;b"));
    ck_assert(!match("a;b", "a"));
    ck_assert(!match("ab", "a;b"));
    ck_assert(!match("twice", "twic"));
    ck_assert(!match("twice", ""));
    ck_assert(!match("", "twice"));
    ck_assert(!match("kiln_check", "twice"));
}
END_TEST

Suite *diskcache_entry_suite(void)
{
    Suite *s = suite_create("diskcache-entry");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, hand_entry_parses_and_encodes_alike);
    tcase_add_test(tc, empty_names_are_allowed);
    tcase_add_test(tc, encode_refuses_what_cannot_parse);
    tcase_add_test(tc, every_truncation_and_extension_is_rejected);
    tcase_add_test(tc, every_bit_flip_is_rejected);
    tcase_add_test(tc, length_fields_that_would_wrap);
    tcase_add_test(tc, names_with_nul_are_rejected);
    tcase_add_test(tc, version_and_header_size);
    tcase_add_test(tc, random_bytes_are_rejected);
    tcase_add_test(tc, kernel_name_lists);
    suite_add_tcase(s, tc);
    return s;
}
