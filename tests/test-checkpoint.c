/* test-checkpoint.c - kiln_save / kiln_load / kiln_load_into: round trips of every dtype, files
 * written byte for byte as safetensors writes them, every malformed file an error (each prefix
 * of a valid file included), atomic replacement, and training resumed from a checkpoint
 * bit-identical to training that never stopped. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln.h"
#include "lib/checkpoint.h"
#include "testutil.h"

static char dir[256];

static void setup(void)
{
    setup_devices();
    snprintf(dir, sizeof dir, "/tmp/kiln-ckpt-test.%ld", (long)getpid());
    mkdir(dir, 0700);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    teardown_devices();
}

static char *path_of(const char *name)
{
    static char p[2][320];
    static int k;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* A safetensors file from a header and data, as the format defines it. */
static void write_st(const char *path, const char *header, const void *data, size_t n)
{
    size_t h = strlen(header), total = 8 + h + n;
    unsigned char *b = malloc(total);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    if (n)
        memcpy(b + 8 + h, data, n);
    write_file(path, b, total);
    free(b);
}

static void assert_same_bytes(const kiln_tensor *a, const kiln_tensor *b)
{
    ck_assert_int_eq(kiln_tensor_dtype(a), kiln_tensor_dtype(b));
    ck_assert_int_eq(kiln_tensor_ndim(a), kiln_tensor_ndim(b));
    for (int d = 0; d < kiln_tensor_ndim(a); d++)
        ck_assert_int_eq(kiln_tensor_shape(a)[d], kiln_tensor_shape(b)[d]);
    void *x = read_host(a), *y = read_host(b);
    ck_assert(memcmp(x, y, kiln_tensor_nbytes(a)) == 0);
    free(x);
    free(y);
}

START_TEST(test_round_trip)
{
    kiln_device *dev = test_device();
    kiln_named_tensor ts[KILN_DTYPE_COUNT + 2];
    char names[KILN_DTYPE_COUNT][16];
    int n = 0;
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        kiln_dtype dt = all_dtypes[t];
        const int64_t shape[3] = {2, 3, t + 1};
        double v[64];
        fill_values(dt, v, 6 * (t + 1));
        snprintf(names[t], sizeof names[t], "layer.%d.%s", t, kiln_dtype_name(dt));
        ts[n++] = (kiln_named_tensor){names[t], upload(dev, dt, 3, shape, v)};
    }
    kiln_tensor *empty = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 2, (const int64_t[]){0, 4}, &empty));
    ts[n++] = (kiln_named_tensor){"empty", empty};
    const char *p = path_of("all.safetensors");
    ASSERT_OK(kiln_save(p, ts, n));
    /* onto every device: the same bytes, names in file order */
    for (int d = 0; d < ndevs; d++) {
        kiln_checkpoint *ck = NULL;
        ASSERT_OK(kiln_load(p, devs[d], &ck));
        ck_assert_int_eq(kiln_checkpoint_count(ck), n);
        for (int i = 0; i < n; i++) {
            ck_assert_str_eq(kiln_checkpoint_name(ck, i), ts[i].name);
            kiln_tensor *t = kiln_checkpoint_find(ck, ts[i].name);
            ck_assert_ptr_eq(t, kiln_checkpoint_tensor(ck, i));
            ck_assert_ptr_eq(kiln_tensor_device(t), devs[d]);
            assert_same_bytes(t, ts[i].tensor);
        }
        ck_assert_ptr_null(kiln_checkpoint_find(ck, "missing"));
        ck_assert_ptr_null(kiln_checkpoint_tensor(ck, n));
        ck_assert_ptr_null(kiln_checkpoint_name(ck, -1));
        /* a tensor retained outlives the checkpoint */
        kiln_tensor *kept = kiln_tensor_retain(kiln_checkpoint_tensor(ck, 0));
        kiln_checkpoint_free(ck);
        assert_same_bytes(kept, ts[0].tensor);
        kiln_tensor_release(kept);
    }
    /* load_into: overwrites the named tensors only */
    int fi = -1, li = -1;
    for (int i = 0; i < KILN_DTYPE_COUNT; i++) {
        if (kiln_tensor_dtype(ts[i].tensor) == KILN_F32)
            fi = i;
        if (kiln_tensor_dtype(ts[i].tensor) == KILN_I64)
            li = i;
    }
    ck_assert(fi >= 0 && li >= 0);
    kiln_tensor *a = NULL, *b = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 3, kiln_tensor_shape(ts[fi].tensor), &a));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I64, 3, kiln_tensor_shape(ts[li].tensor), &b));
    kiln_named_tensor into[2] = {{ts[li].name, b}, {ts[fi].name, a}};
    ASSERT_OK(kiln_load_into(p, into, 2));
    assert_same_bytes(a, ts[fi].tensor);
    assert_same_bytes(b, ts[li].tensor);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    for (int i = 0; i < n; i++)
        kiln_tensor_release(ts[i].tensor);
}
END_TEST

/* What kiln writes is what the safetensors package writes for the same tensors (header keys in
 * the order given, compact JSON padded with spaces to 8 bytes), and a file in that form loads. */
START_TEST(test_known_bytes)
{
    kiln_device *dev = test_device();
    const float w[3] = {1.5f, -2.0f, 0.25f};
    const int32_t idx[2] = {7, -1};
    kiln_tensor *tw = NULL, *ti = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, (const int64_t[]){1, 3}, w, &tw));
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, (const int64_t[]){2}, idx, &ti));
    const char *p = path_of("known.safetensors");
    kiln_named_tensor ts[2] = {{"w", tw}, {"idx", ti}};
    ASSERT_OK(kiln_save(p, ts, 2));
    size_t n;
    unsigned char *got = read_file(p, &n);
    const char header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
                          "\"idx\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[12,20]}}";
    size_t h = strlen(header), pad = (8 - h % 8) % 8;
    ck_assert_uint_eq(n, 8 + h + pad + 20);
    ck_assert_uint_eq(got[0] | got[1] << 8, h + pad);
    ck_assert(memcmp(got + 8, header, h) == 0);
    for (size_t i = 0; i < pad; i++)
        ck_assert_int_eq(got[8 + h + i], ' ');
    ck_assert(memcmp(got + 8 + h + pad, w, 12) == 0);
    ck_assert(memcmp(got + 8 + h + pad + 12, idx, 8) == 0);
    free(got);
    /* a file as Python writes it, with metadata, a scalar and an f16 */
    const uint16_t half[2] = {0x3c00, 0xc000}; /* 1, -2 */
    const double scalar = 3.25;
    unsigned char data[4 + 8];
    memcpy(data, half, 4);
    memcpy(data + 4, &scalar, 8);
    write_st(p,
             "{\"__metadata__\":{\"format\":\"pt\"},\"s\":{\"dtype\":\"F64\",\"shape\":[],"
             "\"data_offsets\":[4,12]},\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":"
             "[0,4]}}  ",
             data, sizeof data);
    kiln_checkpoint *ck = NULL;
    { /* f64 storage needs no fp64 support */
        ASSERT_OK(kiln_load(p, dev, &ck));
        ck_assert_int_eq(kiln_checkpoint_count(ck), 2);
        ck_assert_str_eq(kiln_checkpoint_name(ck, 0), "h"); /* file (data) order */
        kiln_tensor *s = kiln_checkpoint_find(ck, "s");
        ck_assert_int_eq(kiln_tensor_ndim(s), 0); /* shape [] is a 0-d tensor */
        ck_assert_int_eq(kiln_tensor_numel(s), 1);
        double v = 0;
        ASSERT_OK(kiln_tensor_read(s, &v, 8));
        ck_assert_double_eq(v, 3.25);
        uint16_t hb[2];
        ASSERT_OK(kiln_tensor_read(kiln_checkpoint_find(ck, "h"), hb, 4));
        ck_assert(hb[0] == 0x3c00 && hb[1] == 0xc000);
        kiln_checkpoint_free(ck);
    }
    kiln_tensor_release(tw);
    kiln_tensor_release(ti);
}
END_TEST

static void expect_bad(const char *header, const void *data, size_t n, kiln_status want,
                       const char *text)
{
    const char *p = path_of("bad.safetensors");
    write_st(p, header, data, n);
    kiln_checkpoint *ck = (kiln_checkpoint *)1;
    kiln_status s = kiln_load(p, test_device(), &ck);
    ck_assert_msg(s == want, "header %s: %s, expected %s (%s)", header, kiln_status_string(s),
                  kiln_status_string(want), kiln_last_error());
    ck_assert_ptr_null(ck);
    ck_assert_msg(strstr(kiln_last_error(), text), "header %s: '%s' lacks '%s'", header,
                  kiln_last_error(), text);
}

START_TEST(test_malformed)
{
    const unsigned char z[64] = {0};
    const kiln_status INV = KILN_ERR_INVALID_ARGUMENT;
    expect_bad("not json", z, 8, INV, "not valid JSON");
    expect_bad("[1,2]", z, 0, INV, "not a JSON object");
    expect_bad("{\"a\":1}", z, 0, INV, "not an object");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", z, 8, INV, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", z, 4,
               KILN_ERR_UNSUPPORTED, "BF16");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", z, 8, INV,
               "not a size");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
               z, 4, INV, "9 dimensions");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", z, 8, INV,
               "do not hold");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":"
               "[0,8]}}",
               z, 8, INV, "not a size");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               z, 12, INV, "overlap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
               z, 20, INV, "gap");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", z, 12, INV,
               "trailing bytes");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", z, 4, INV,
               "truncated");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               z, 8, INV, "duplicate");
    /* control bytes of a file never reach a message (found by fuzz/fuzz-safetensors.c) */
    expect_bad("{\"a\\tb\\u001b[2J\":{\"dtype\":\"X\\u0007\",\"shape\":[1],"
               "\"data_offsets\":[0,4]}}",
               z, 4, KILN_ERR_UNSUPPORTED, "tensor \"a?b?[2J\" has dtype X?,");
    expect_bad("{\"a\":\001}", z, 0, INV, "not valid JSON");
    ck_assert_ptr_null(strchr(kiln_last_error(), 1));
    expect_bad("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", z, 4, INV,
               "empty name");
    /* a header length past the end, and every prefix of a valid file */
    const char *p = path_of("len.safetensors");
    unsigned char hdr[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    write_file(p, hdr, 10);
    kiln_checkpoint *ck = (kiln_checkpoint *)1;
    ASSERT_FAILS(kiln_load(p, test_device(), &ck), INV, "header length 4294967295");
    ck_assert_ptr_null(ck);
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_arange(test_device(), KILN_F32, 0, 10, 1, &t));
    const char *good = path_of("good.safetensors");
    ASSERT_OK(kiln_save(good, (kiln_named_tensor[]){{"x", t}}, 1));
    size_t n;
    unsigned char *whole = read_file(good, &n);
    for (size_t cut = 0; cut < n; cut++) {
        write_file(p, whole, cut);
        ck = (kiln_checkpoint *)1;
        kiln_status s = kiln_load(p, test_device(), &ck);
        ck_assert_msg(s == INV, "a file cut at %zu of %zu bytes: %s", cut, n,
                      kiln_status_string(s));
        ck_assert_ptr_null(ck);
    }
    free(whole);
    /* not a file, no file */
    ASSERT_FAILS(kiln_load(dir, test_device(), &ck), KILN_ERR_IO, "not a regular file");
    ASSERT_FAILS(kiln_load(path_of("none"), test_device(), &ck), KILN_ERR_IO,
                 "No such file or directory");
    ASSERT_FAILS(kiln_load(NULL, test_device(), &ck), INV, "path is NULL");
    ASSERT_FAILS(kiln_load(good, NULL, &ck), INV, "kiln_load");
    ASSERT_FAILS(kiln_load(good, test_device(), NULL), INV, "out is NULL");
    kiln_tensor_release(t);
}
END_TEST

START_TEST(test_save_errors_and_atomicity)
{
    kiln_device *dev = test_device();
    kiln_tensor *a = NULL, *b = NULL;
    ASSERT_OK(kiln_arange(dev, KILN_F32, 0, 16, 1, &a));
    ASSERT_OK(kiln_arange(dev, KILN_F32, 100, 116, 1, &b));
    const char *p = path_of("model.safetensors");
    ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"a", a}}, 1));
    size_t n0;
    unsigned char *before = read_file(p, &n0);
    kiln_named_tensor dup[2] = {{"a", a}, {"a", b}};
    ASSERT_FAILS(kiln_save(p, dup, 2), KILN_ERR_INVALID_ARGUMENT, "given twice");
    ASSERT_FAILS(kiln_save(p, (kiln_named_tensor[]){{"__metadata__", a}}, 1),
                 KILN_ERR_INVALID_ARGUMENT, "__metadata__");
    ASSERT_FAILS(kiln_save(p, (kiln_named_tensor[]){{NULL, a}}, 1), KILN_ERR_INVALID_ARGUMENT,
                 "NULL");
    ASSERT_FAILS(kiln_save(p, (kiln_named_tensor[]){{"x", NULL}}, 1), KILN_ERR_INVALID_ARGUMENT,
                 "tensors[0].tensor is NULL");
    ASSERT_FAILS(kiln_save(p, NULL, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_save");
    ASSERT_FAILS(kiln_save(NULL, dup, 1), KILN_ERR_INVALID_ARGUMENT, "path is NULL");
    ASSERT_FAILS(kiln_save(path_of("no/such/folder/x"), dup, 1), KILN_ERR_IO, "no/such/folder");
    /* a mapped tensor fails in the middle of writing: the old file stays, no temporary left */
    void *m;
    ASSERT_OK(kiln_tensor_map(b, KILN_MAP_READ, &m));
    ASSERT_FAILS(kiln_save(p, (kiln_named_tensor[]){{"a", a}, {"b", b}}, 2), KILN_ERR_STATE,
                 "mapped");
    ASSERT_OK(kiln_tensor_unmap(b));
    size_t n1;
    unsigned char *after = read_file(p, &n1);
    ck_assert_uint_eq(n1, n0);
    ck_assert(memcmp(before, after, n0) == 0);
    free(after);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "! ls %s | grep -q '\\.tmp\\.'", dir); /* no temporary left */
    ck_assert_int_eq(system(cmd), 0);
    /* replaced whole */
    ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"a", b}, {"b", a}}, 2));
    kiln_checkpoint *ck = NULL;
    ASSERT_OK(kiln_load(p, dev, &ck));
    assert_same_bytes(kiln_checkpoint_find(ck, "a"), b);
    assert_same_bytes(kiln_checkpoint_find(ck, "b"), a);
    kiln_checkpoint_free(ck);
    /* load_into: checks every tensor before writing any */
    kiln_tensor *x = NULL, *wrong = NULL, *i32 = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, (const int64_t[]){16}, &x));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 2, (const int64_t[]){4, 4}, &wrong));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 1, (const int64_t[]){16}, &i32));
    ASSERT_FAILS(kiln_load_into(p, (kiln_named_tensor[]){{"a", x}, {"b", wrong}}, 2),
                 KILN_ERR_SHAPE_MISMATCH, "[4, 4]");
    ASSERT_FAILS(kiln_load_into(p, (kiln_named_tensor[]){{"a", x}, {"b", i32}}, 2),
                 KILN_ERR_DTYPE_MISMATCH, "i32");
    ASSERT_FAILS(kiln_load_into(p, (kiln_named_tensor[]){{"a", x}, {"c", x}}, 2),
                 KILN_ERR_INVALID_ARGUMENT, "no tensor named \"c\"");
    float xs[16];
    ASSERT_OK(kiln_tensor_read(x, xs, sizeof xs));
    for (int i = 0; i < 16; i++)
        ck_assert_float_eq(xs[i], 0); /* untouched */
    kiln_tensor_release(x);
    kiln_tensor_release(wrong);
    kiln_tensor_release(i32);
    free(before);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

/* Adam on a quadratic: p -= Adam(grad = p - target), the step count saved as an i64 tensor. */
static void adam_steps(kiln_tensor *p, kiln_tensor *m, kiln_tensor *v, const kiln_tensor *target,
                       int64_t *step, int count)
{
    for (int i = 0; i < count; i++) {
        kiln_tensor *g = NULL;
        ASSERT_OK(kiln_sub(p, target, &g));
        ++*step;
        ASSERT_OK(kiln_adam_step(p, g, m, v, *step, 0.05, 0.9, 0.999, 1e-8));
        kiln_tensor_release(g);
    }
}

START_TEST(test_resume_bit_identical)
{
    kiln_device *dev = test_device();
    const int64_t shape[1] = {64};
    kiln_tensor *target = NULL, *p = NULL, *m = NULL, *v = NULL;
    ASSERT_OK(kiln_rand_normal(dev, KILN_F32, 1, shape, 7, 0, 1, &target));
    ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 1, shape, 8, -1, 1, &p));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &m));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &v));
    kiln_tensor *p2 = NULL;
    ASSERT_OK(kiln_tensor_clone(p, &p2));
    int64_t step = 0;
    adam_steps(p, m, v, target, &step, 20); /* never stopped */
    /* stopped after 8 steps, saved, loaded into fresh tensors, 12 more */
    kiln_tensor *m2 = NULL, *v2 = NULL, *st = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &m2));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &v2));
    int64_t step2 = 0;
    adam_steps(p2, m2, v2, target, &step2, 8);
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 1, (const int64_t[]){1}, &step2, &st));
    const char *path = path_of("resume.safetensors");
    ASSERT_OK(kiln_save(
        path,
        (kiln_named_tensor[]){{"param", p2}, {"adam.m", m2}, {"adam.v", v2}, {"adam.step", st}},
        4));
    kiln_tensor_release(p2);
    kiln_tensor_release(m2);
    kiln_tensor_release(v2);
    kiln_tensor_release(st);
    kiln_tensor *p3 = NULL, *m3 = NULL, *v3 = NULL, *st3 = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &p3));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &m3));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &v3));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_I64, 1, (const int64_t[]){1}, &st3));
    ASSERT_OK(kiln_load_into(
        path,
        (kiln_named_tensor[]){{"adam.step", st3}, {"param", p3}, {"adam.m", m3}, {"adam.v", v3}},
        4));
    int64_t step3 = 0;
    ASSERT_OK(kiln_tensor_item_i64(st3, &step3));
    ck_assert_int_eq(step3, 8);
    adam_steps(p3, m3, v3, target, &step3, 12);
    assert_same_bytes(p3, p);
    assert_same_bytes(m3, m);
    assert_same_bytes(v3, v);
    kiln_tensor *r[] = {target, p, m, v, p3, m3, v3, st3};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        kiln_tensor_release(r[i]);
}
END_TEST

/* The pure header parser: results tile the data. */
START_TEST(test_parse_header)
{
    kiln__st_entry *es = NULL;
    int n = -1;
    const char h[] = "{\"b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,8]},"
                     "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
    ASSERT_OK(kiln__st_parse_header(h, strlen(h), 8, "test", &es, &n));
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(es[0].name, "a");
    ck_assert_int_eq(es[0].dtype, KILN_I64);
    ck_assert_str_eq(es[1].name, "b");
    ck_assert_int_eq(es[1].shape[0], 0);
    kiln__st_entries_free(es, n);
    ASSERT_OK(kiln__st_parse_header("{}", 2, 0, "test", &es, &n));
    ck_assert_int_eq(n, 0);
    kiln__st_entries_free(es, n);
    ck_assert_int_eq(kiln__st_parse_header("{}", 2, 1, "test", &es, &n), KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(es);
    ck_assert_int_eq(kiln__st_parse_header("{\"a\"", 4, 0, "test", &es, &n),
                     KILN_ERR_INVALID_ARGUMENT);
}
END_TEST

/* Built without jansson (meson -Djansson=disabled; the test checkpoint-nojansson, run by .ci/run
 * carry): every checkpoint function checks its arguments as usual, then refuses with
 * KILN_ERR_UNSUPPORTED, names itself and says why, and touches no file. */
START_TEST(test_without_jansson)
{
    kiln_device *dev = test_device();
    kiln_tensor *t;
    ASSERT_OK(kiln_arange(dev, KILN_F32, 0, 4, 1, &t));
    kiln_named_tensor named[] = {{"w", t}};
    const char *file = path_of("w.safetensors");
    ASSERT_FAILS(kiln_save(file, named, 1), KILN_ERR_UNSUPPORTED, "kiln_save: ");
    ASSERT_ERROR_HAS("built without jansson");
    ck_assert_int_ne(access(file, F_OK), 0);
    ASSERT_FAILS(kiln_save(NULL, named, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_save: path");
    /* A valid file, written by hand: {"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} */
    static const char header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    unsigned char bytes[8 + sizeof header - 1 + 4] = {sizeof header - 1};
    memcpy(bytes + 8, header, sizeof header - 1);
    write_file(file, bytes, sizeof bytes);
    kiln_checkpoint *ck = (kiln_checkpoint *)1;
    ASSERT_FAILS(kiln_load(file, dev, &ck), KILN_ERR_UNSUPPORTED, "kiln_load: ");
    ASSERT_ERROR_HAS("built without jansson");
    ck_assert_ptr_null(ck);
    ASSERT_FAILS(kiln_load_into(file, named, 1), KILN_ERR_UNSUPPORTED, "kiln_load_into: ");
    ASSERT_ERROR_HAS("built without jansson");
    kiln_params *p;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_params_add(p, "w", t));
    ASSERT_FAILS(kiln_params_save(p, path_of("p.safetensors")), KILN_ERR_UNSUPPORTED,
                 "kiln_params_save: ");
    ASSERT_ERROR_HAS("built without jansson");
    ck_assert_int_ne(access(path_of("p.safetensors"), F_OK), 0);
    ASSERT_FAILS(kiln_params_load(p, file), KILN_ERR_UNSUPPORTED, "kiln_params_load: ");
    ASSERT_ERROR_HAS("built without jansson");
    kiln__st_entry *es = (kiln__st_entry *)1;
    int n = -1;
    ck_assert_int_eq(kiln__st_parse_header("{}", 2, 0, "test", &es, &n), KILN_ERR_UNSUPPORTED);
    ck_assert_ptr_null(es);
    ck_assert_int_eq(n, 0);
    /* The tensor is untouched: 0, 1, 2, 3. */
    float back[4];
    ASSERT_OK(kiln_tensor_read(t, back, sizeof back));
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(back[i], (float)i);
    kiln_params_free(p);
    kiln_tensor_release(t);
}
END_TEST

Suite *checkpoint_suite(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_parse_header);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_known_bytes);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_save_errors_and_atomicity);
    tcase_add_test(tc, test_resume_bit_identical);
    suite_add_tcase(s, tc);
    /* Only where the build has no jansson (tests/meson.build sets the variable there). */
    if (getenv("KILN_TEST_NO_JANSSON")) {
        TCase *nj = tcase_create("nojansson");
        tcase_add_unchecked_fixture(nj, setup, teardown);
        tcase_add_test(nj, test_without_jansson);
        suite_add_tcase(s, nj);
    }
    return s;
}
