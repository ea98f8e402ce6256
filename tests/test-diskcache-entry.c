/* test-diskcache-entry.c - the cache entry reader/verifier as a pure function on bytes (no file,
 * no device): a hand-assembled entry, every truncation, every bit flip, length fields that would
 * wrap, random bytes, an entry of the previous format, hostile parameter tables; the parameter
 * table's lookup; and the kernel-name list comparison. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/diskcache.h"
#include "lib/paramtable.h"

/* The format, written out here independently of diskcache.c (little-endian):
 *   0 "KILNBIN\0", 8 version 3 (u32), 12 header size 56 (u32), 16 key length, 24 names length,
 *   32 parameter table length, 40 payload length, 48 FNV-1a 64 of bytes 0-47 then everything
 *   from 56 on (u64s); 56 key, names, parameter table, payload.
 * The parameter table: per kernel of the names, in their order, u8 name length, name, u8 argument
 * info flag, u16 parameter count, then per parameter u8 address qualifier (kiln__addr), u8 type
 * length, type, u8 name length, name. */
#define HDR 56
#define SUM 48

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
    le64(b + SUM, fnv(b + HDR, len - HDR, fnv(b, SUM, 0xcbf29ce484222325ull)));
}

static const char key[] = "kiln program cache key v2\nsource 3:abc";
static const char names[] = "twice;half";
/* twice(__global float* x, int n) with argument info; half's one parameter without. */
static const uint8_t table[] = {5,   't', 'w', 'i', 'c', 'e', 1,   2, 0, 1,   6,   'f',
                                'l', 'o', 'a', 't', '*', 1,   'x', 4, 3, 'i', 'n', 't',
                                1,   'n', 4,   'h', 'a', 'l', 'f', 0, 1, 0};
static const uint8_t payload[] = {0x7f, 'E', 'L', 'F', 0, 1, 2, 3, 0xff, 0xfe, 9};
#define TABLE_AT (HDR + sizeof key - 1 + sizeof names - 1) /* where the table starts */

/* An entry for key, names, the parameter table t (n bytes) and payload, assembled byte by byte
 * and sealed; its length goes to *len. */
static uint8_t *entry_with_table(const uint8_t *t, size_t n, size_t *len)
{
    size_t kl = strlen(key), nl = strlen(names), pl = sizeof payload;
    *len = HDR + kl + nl + n + pl;
    uint8_t *b = calloc(1, *len);
    ck_assert_ptr_nonnull(b);
    memcpy(b, "KILNBIN", 8);
    b[8] = 3;
    b[12] = HDR;
    le64(b + 16, kl);
    le64(b + 24, nl);
    le64(b + 32, n);
    le64(b + 40, pl);
    memcpy(b + HDR, key, kl);
    memcpy(b + HDR + kl, names, nl);
    if (n)
        memcpy(b + HDR + kl + nl, t, n);
    memcpy(b + HDR + kl + nl + n, payload, pl);
    reseal(b, *len);
    return b;
}

/* The entry for key, names, table and payload; its length goes to *len. */
static uint8_t *hand_entry(size_t *len)
{
    return entry_with_table(table, sizeof table, len);
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
    ck_assert_uint_eq(e.paramslen, sizeof table);
    ck_assert_ptr_eq(e.params, b + TABLE_AT);
    kiln__cache_entry in = {key,     strlen(key),    names, strlen(names),
                            payload, sizeof payload, table, sizeof table};
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
    kiln__cache_entry in = {key, strlen(key), NULL, 0, payload, sizeof payload, NULL, 0}, out;
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
    kiln__cache_entry no_payload = {key, strlen(key), names, strlen(names), payload, 0, NULL, 0};
    ck_assert_ptr_null(kiln__cache_entry_encode(&no_payload, &len));
    ck_assert_uint_eq(len, 0);
    kiln__cache_entry no_key = {key, 0, names, strlen(names), payload, sizeof payload, NULL, 0};
    ck_assert_ptr_null(kiln__cache_entry_encode(&no_key, &len));
    kiln__cache_entry huge = {key,     strlen(key),           names, strlen(names),
                              payload, ((size_t)1 << 30) + 1, NULL,  0};
    ck_assert_ptr_null(kiln__cache_entry_encode(&huge, &len)); /* over the cap: no read */
    kiln__cache_entry huge_table = {key,     strlen(key),    names, strlen(names),
                                    payload, sizeof payload, table, ((size_t)1 << 22) + 1};
    ck_assert_ptr_null(kiln__cache_entry_encode(&huge_table, &len));
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
    ck_assert_str_eq(parse_copy(b, HDR - 1), "truncated header");
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
    const uint64_t kl = strlen(key), nl = strlen(names), tl = sizeof table, pl = sizeof payload;
    const uint64_t max = UINT64_MAX;
    const uint64_t cases[][4] = {
        {max, nl, tl, pl},
        {kl, max, tl, pl},
        {kl, nl, max, pl},
        {kl, nl, tl, max},
        {max, max, tl, pl + kl + nl + 2},                         /* k + n wraps to fit */
        {(uint64_t)1 << 63, (uint64_t)1 << 63, tl, kl + nl + pl}, /* k + n wraps to 0 */
        {kl, nl, max, pl + tl + 1},                               /* t + p wraps to fit */
        {kl + nl + tl + pl, 0, 0, 0},                             /* no payload */
        {0, nl, tl, kl + pl},                                     /* no key */
        {kl, nl, tl + pl, 0},
        {kl, nl, tl, pl + 1},
        /* Shifted, still summing to the size: the names or the table no longer match. */
        {kl + 1, nl, tl, pl - 1},
        {kl, nl - 1, tl + 1, pl},
        {kl, nl, tl - 1, pl + 1},
        {kl, nl, tl + 1, pl - 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        le64(b + 16, cases[i][0]);
        le64(b + 24, cases[i][1]);
        le64(b + 32, cases[i][2]);
        le64(b + 40, cases[i][3]);
        reseal(b, len);
        ck_assert_msg(parse_copy(b, len) != NULL, "case %zu accepted", i);
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
    b[8] = 2; /* the previous format */
    reseal(b, len);
    ck_assert_str_eq(parse_copy(b, len), "unknown format version");
    b[8] = 3;
    b[12] = 48;
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

/* An entry as the previous format (version 2: no parameter table, a 48-byte header) wrote it:
 * refused, so that its program is rebuilt from source with its parameters described rather than
 * loaded without argument checks (issue 19, item 6). */
START_TEST(previous_format_is_refused)
{
    size_t kl = strlen(key), nl = strlen(names), pl = sizeof payload, len = 48 + kl + nl + pl;
    uint8_t *b = calloc(1, len);
    ck_assert_ptr_nonnull(b);
    memcpy(b, "KILNBIN", 8);
    b[8] = 2;
    b[12] = 48;
    le64(b + 16, kl);
    le64(b + 24, nl);
    le64(b + 32, pl);
    memcpy(b + 48, key, kl);
    memcpy(b + 48 + kl, names, nl);
    memcpy(b + 48 + kl + nl, payload, pl);
    le64(b + 40, fnv(b + 48, len - 48, fnv(b, 40, 0xcbf29ce484222325ull)));
    ck_assert_str_eq(parse_copy(b, len), "unknown format version");
    free(b);
}
END_TEST

/* The hand entry with its table's byte at `at` (from the table's start) set to v, resealed. */
static const char *parse_with_table_byte(size_t at, uint8_t v)
{
    size_t len;
    uint8_t *b = hand_entry(&len);
    b[TABLE_AT + at] = v;
    reseal(b, len);
    const char *why = parse_copy(b, len);
    free(b);
    return why;
}

/* The hand entry with another table (n bytes) in place of its own, resealed. */
static const char *parse_with_table(const uint8_t *t, size_t n)
{
    size_t len;
    uint8_t *b = entry_with_table(t, n, &len);
    const char *why = parse_copy(b, len);
    free(b);
    return why;
}

/* Parameter tables a well-formed (checksummed) entry may hold that kiln never writes: each is
 * refused with what is wrong, never read past. */
START_TEST(hostile_parameter_tables_are_rejected)
{
    ck_assert_str_eq(parse_with_table_byte(0, 0),
                     "a kernel name length in the parameter table is out of range");
    ck_assert_str_eq(parse_with_table_byte(0, 200),
                     "a kernel name length in the parameter table is out of range");
    ck_assert_str_eq(parse_with_table_byte(0, 31), "the parameter table is truncated");
    ck_assert_str_eq(parse_with_table_byte(5, 'f'),
                     "the parameter table's kernels are not the entry's kernel names");
    ck_assert_str_eq(parse_with_table_byte(6, 2),
                     "a parameter table record has a bad argument info flag");
    ck_assert_str_eq(parse_with_table_byte(9, 5),
                     "a parameter table record has an unknown address qualifier");
    ck_assert_str_eq(parse_with_table_byte(10, 250),
                     "a parameter table text is truncated or holds a NUL byte");
    ck_assert_str_eq(parse_with_table_byte(12, 0),
                     "a parameter table text is truncated or holds a NUL byte");
    ck_assert_str_eq(parse_with_table_byte(7, 3), /* 3 parameters: "half" read as the third */
                     "a parameter table text is truncated or holds a NUL byte");
    ck_assert_ptr_nonnull(parse_with_table_byte(7, 200));
    /* A record missing, one too many, the records swapped, a table cut short. */
    ck_assert_str_eq(parse_with_table(table, 26),
                     "the parameter table lacks a kernel of the entry");
    uint8_t more[sizeof table + 8];
    memcpy(more, table, sizeof table);
    memcpy(more + sizeof table, "\x04half\x00\x01\x00", 8);
    ck_assert_str_eq(parse_with_table(more, sizeof more),
                     "the parameter table's kernels are not the entry's kernel names");
    uint8_t swapped[sizeof table];
    memcpy(swapped, table + 26, sizeof table - 26);
    memcpy(swapped + sizeof table - 26, table, 26);
    ck_assert_str_eq(parse_with_table(swapped, sizeof swapped),
                     "the parameter table's kernels are not the entry's kernel names");
    for (size_t n = 1; n < sizeof table; n++)
        ck_assert_msg(parse_with_table(table, n) != NULL, "a table cut to %zu bytes accepted", n);
    /* No table at all parses (built-in programs have none); the loader of a user program asks
     * for one (program.c). */
    ck_assert_ptr_null(parse_with_table(NULL, 0));
}
END_TEST

START_TEST(parameter_table_lookup)
{
    kiln__param p[3];
    ck_assert_int_eq(kiln__param_table_find(table, sizeof table, "twice", 2, p),
                     KILN__PARAMS_FOUND);
    ck_assert_int_eq(p[0].kind, KILN__PARAM_BUFFER);
    ck_assert_int_eq(p[0].dtype, KILN_F32);
    ck_assert_str_eq(p[0].name, "x");
    ck_assert_int_eq(p[1].kind, KILN__PARAM_SCALAR);
    ck_assert_int_eq(p[1].dtype, KILN_I32);
    ck_assert_str_eq(p[1].type, "int");
    ck_assert_int_eq(kiln__param_table_find(table, sizeof table, "half", 1, p),
                     KILN__PARAMS_NO_INFO);
    ck_assert_int_eq(kiln__param_table_find(table, sizeof table, "half", 2, p),
                     KILN__PARAMS_ABSENT); /* another count: not this table's kernel */
    ck_assert_int_eq(kiln__param_table_find(table, sizeof table, "twic", 2, p),
                     KILN__PARAMS_ABSENT);
    ck_assert_int_eq(kiln__param_table_find(NULL, 0, "twice", 2, p), KILN__PARAMS_ABSENT);
    /* The encoder writes the hand table's records byte for byte. */
    kiln__param_text twice[2] = {{KILN__ADDR_GLOBAL, "float*", "x"},
                                 {KILN__ADDR_PRIVATE, "int", "n"}};
    uint8_t enc[sizeof table];
    size_t n = kiln__param_record_encode(NULL, "twice", true, 2, twice);
    ck_assert_uint_eq(n, 26);
    ck_assert_uint_eq(kiln__param_record_encode(enc, "twice", true, 2, twice), n);
    ck_assert_uint_eq(kiln__param_record_encode(enc + n, "half", false, 1, NULL), 8);
    ck_assert_int_eq(memcmp(enc, table, sizeof table), 0);
    ck_assert_uint_eq(kiln__param_record_encode(NULL, "", false, 0, NULL), 0);
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
    tcase_add_test(tc, previous_format_is_refused);
    tcase_add_test(tc, hostile_parameter_tables_are_rejected);
    tcase_add_test(tc, parameter_table_lookup);
    tcase_add_test(tc, kernel_name_lists);
    suite_add_tcase(s, tc);
    return s;
}
