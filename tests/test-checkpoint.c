/* test-checkpoint.c - kiln_save / kiln_load / kiln_load_into: round trips of every dtype, files
 * written byte for byte as safetensors writes them, every malformed file an error (each prefix
 * of a valid file included), atomic replacement, and training resumed from a checkpoint
 * bit-identical to training that never stopped. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kiln.h"
#include "lib/checkpoint.h"
#include "lib/clcall.h"
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
 * the order given, compact JSON padded with spaces) but for the padding: to a multiple of 128
 * bytes from the file's start, the 8-byte length included (safetensors pads to 8; both are
 * valid), so that kiln_load_mapped can use the first tensor's bytes in place; and a file in
 * that form loads. */
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
    size_t h = strlen(header), pad = (128 - (8 + h) % 128) % 128;
    ck_assert_uint_eq((8 + h + pad) % 128, 0);
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

/* A zero-size dimension anywhere with a product of the others over INT64_MAX (issue 21, defect
 * 8): [0, 2^62, 2^62] has 0 elements, but is no shape kiln can create. Every order fails in the
 * header check, before any tensor is made, naming the public function, the file and the tensor
 * (the first order used to pass it and fail in kiln_tensor_from_host after "a" was loaded). */
START_TEST(test_zero_size_dims_anywhere)
{
    static const char *shapes[] = {"[0,4611686018427387904,4611686018427387904]",
                                   "[4611686018427387904,0,4611686018427387904]",
                                   "[4611686018427387904,4611686018427387904,0]"};
    const unsigned char z[8] = {0};
    for (int i = 0; i < 3; i++) {
        char header[256];
        snprintf(header, sizeof header,
                 "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[4,4]}}",
                 shapes[i]);
        expect_bad(header, z, 4, KILN_ERR_INVALID_ARGUMENT, "tensor \"b\"");
        ASSERT_ERROR_HAS("kiln_load: ");
        ASSERT_ERROR_HAS("bad.safetensors");
        ck_assert_msg(!strstr(kiln_last_error(), "kiln_tensor_from_host"), "%s: %s", shapes[i],
                      kiln_last_error());
        /* kiln_params_load names itself */
        kiln_tensor *t = NULL;
        ASSERT_OK(kiln_arange(test_device(), KILN_F32, 0, 1, 1, &t));
        kiln_params *p = NULL;
        ASSERT_OK(kiln_params_create(&p));
        ASSERT_OK(kiln_params_add(p, "a", t));
        ck_assert_int_eq(kiln_params_load(p, path_of("bad.safetensors")),
                         KILN_ERR_INVALID_ARGUMENT);
        ASSERT_ERROR_HAS("kiln_params_load: ");
        ASSERT_ERROR_HAS("tensor \"b\"");
        kiln_params_free(p);
        kiln_tensor_release(t);
    }
}
END_TEST

START_TEST(test_malformed)
{
    const unsigned char z[64] = {0};
    const kiln_status INV = KILN_ERR_INVALID_ARGUMENT;
    expect_bad("not json", z, 8, INV, "not valid JSON");
    expect_bad("[1,2]", z, 0, INV, "not a JSON object");
    expect_bad("{\"a\":1}", z, 0, INV, "not an object");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", z, 8, INV, "data_offsets");
    expect_bad("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", z, 2,
               KILN_ERR_UNSUPPORTED, "F8_E4M3");
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
    /* more entries than kiln loads from one file (KILN__ST_ENTRIES_MAX), refused before the
     * header is parsed: it once cost 2 GB and 32 s for 1.7 million (issue 21) */
    {
        enum { N = KILN__ST_ENTRIES_MAX + 1 };
        size_t cap = (size_t)N * 64 + 16, at = 0;
        char *big = malloc(cap);
        ck_assert_ptr_nonnull(big);
        big[at++] = '{';
        for (int i = 0; i < N; i++)
            at += (size_t)snprintf(
                big + at, cap - at,
                "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}", i ? "," : "",
                i);
        big[at++] = '}';
        big[at] = '\0';
        expect_bad(big, z, 0, INV, "more than kiln loads from one file (100000)");
        free(big);
    }
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
    ASSERT_OK(kiln__st_parse_header("kiln_load", h, strlen(h), 8, "test", &es, &n));
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(es[0].name, "a");
    ck_assert_int_eq(es[0].dtype, KILN_I64);
    ck_assert_str_eq(es[1].name, "b");
    ck_assert_int_eq(es[1].shape[0], 0);
    kiln__st_entries_free(es, n);
    ASSERT_OK(kiln__st_parse_header("kiln_load", "{}", 2, 0, "test", &es, &n));
    ck_assert_int_eq(n, 0);
    kiln__st_entries_free(es, n);
    ck_assert_int_eq(kiln__st_parse_header("kiln_load", "{}", 2, 1, "test", &es, &n),
                     KILN_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(es);
    ck_assert_int_eq(kiln__st_parse_header("kiln_load", "{\"a\"", 4, 0, "test", &es, &n),
                     KILN_ERR_INVALID_ARGUMENT);
}
END_TEST

/* Built without jansson (meson -Djansson=disabled; the test checkpoint-nojansson, run by .ci/run
 * carry): every checkpoint function checks its arguments as usual, then refuses with
 * KILN_ERR_UNSUPPORTED, names itself and says why, and touches no file. */
/* kiln_params_load is strict (issue 22): names missing from the file and names the list lacks
 * are refused, both listed in the message; another dtype is refused unless
 * KILN_LOAD_CONVERT_DTYPE; a refused load writes nothing. kiln_params_load_flags relaxes it. */
static kiln_params *list_of(kiln_device *dev, int n, const char *const *names, kiln_dtype dt,
                            double fill, kiln_tensor **ts)
{
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    for (int i = 0; i < n; i++) {
        ASSERT_OK(kiln_full(dev, dt, 1, (const int64_t[]){6}, fill, &ts[i]));
        ASSERT_OK(kiln_params_add(p, names[i], ts[i]));
        kiln_tensor_release(ts[i]); /* the list holds it */
    }
    return p;
}

static void assert_all(kiln_tensor *t, double want, const char *what)
{
    double *v = download(t);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(v[i] == want, "%s[%d] is %g, want %g", what, i, v[i], want);
    free(v);
}

START_TEST(test_params_load_strict)
{
    kiln_device *dev = test_device();
    const double wv[6] = {0.5, -1.25, 2.7, -2.7, 1e10, 3.0};
    kiln_tensor *w = upload(dev, KILN_F64, 1, (const int64_t[]){6}, wv), *b = NULL, *extra = NULL;
    ASSERT_OK(kiln_full(dev, KILN_F64, 1, (const int64_t[]){6}, 4.0, &b));
    ASSERT_OK(kiln_full(dev, KILN_F64, 1, (const int64_t[]){6}, 9.0, &extra));
    const char *file = path_of("strict.safetensors");
    ASSERT_OK(kiln_save(file, (kiln_named_tensor[]){{"w", w}, {"b", b}, {"extra", extra}}, 3));
    kiln_tensor *t[5];

    /* exact names: loads */
    kiln_params *p = list_of(dev, 3, (const char *[]){"b", "extra", "w"}, KILN_F64, 7, t);
    ASSERT_OK(kiln_params_load(p, file));
    assert_all(t[0], 4.0, "b");
    assert_all(t[1], 9.0, "extra");
    kiln_params_free(p);

    /* an unexpected name: refused, nothing written */
    p = list_of(dev, 2, (const char *[]){"w", "b"}, KILN_F64, 7, t);
    ASSERT_FAILS(kiln_params_load(p, file), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_params_load: the names of");
    ASSERT_ERROR_HAS("Unexpected key(s) in the file: \"extra\"");
    ASSERT_ERROR_HAS("KILN_LOAD_NON_STRICT");
    ck_assert_ptr_null(strstr(kiln_last_error(), "Missing"));
    assert_all(t[0], 7, "w");
    assert_all(t[1], 7, "b");
    kiln_params_free(p);

    /* a missing name and an unexpected one: both listed, nothing written */
    p = list_of(dev, 3, (const char *[]){"w", "b", "gone"}, KILN_F64, 7, t);
    ASSERT_FAILS(kiln_params_load(p, file), KILN_ERR_INVALID_ARGUMENT, "1 missing, 1 unexpected");
    ASSERT_ERROR_HAS("Missing key(s) in the file: \"gone\". Unexpected key(s) in the file: "
                     "\"extra\"");
    assert_all(t[0], 7, "w");
    assert_all(t[1], 7, "b");
    /* non-strict: the names both hold load, the others stay */
    ASSERT_OK(kiln_params_load_flags(p, file, KILN_LOAD_NON_STRICT));
    double *got = download(t[0]);
    for (int i = 0; i < 6; i++)
        ck_assert(got[i] == wv[i]);
    free(got);
    assert_all(t[1], 4.0, "b");
    assert_all(t[2], 7, "gone");
    ASSERT_FAILS(kiln_params_load_flags(p, file, (kiln_load_flags)8), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_params_load_flags: unknown flag bits 0x8");
    kiln_params_free(p);

    /* missing names only, several */
    p = list_of(dev, 5, (const char *[]){"w", "b", "extra", "gone", "gone2"}, KILN_F64, 7, t);
    ASSERT_FAILS(kiln_params_load(p, file), KILN_ERR_INVALID_ARGUMENT,
                 "Missing key(s) in the file: \"gone\", \"gone2\"");
    ck_assert_ptr_null(strstr(kiln_last_error(), "Unexpected"));
    assert_all(t[0], 7, "w");
    kiln_params_free(p);

    /* another dtype: refused unless converted; converted as a C cast would, checked per element */
    const kiln_dtype dts[4] = {KILN_F32, KILN_F16, KILN_I32, KILN_BF16};
    for (int k = 0; k < 4; k++) {
        p = list_of(dev, 3, (const char *[]){"w", "b", "extra"}, dts[k], 7, t);
        ASSERT_FAILS(kiln_params_load(p, file), KILN_ERR_DTYPE_MISMATCH, "is f64 in");
        ASSERT_ERROR_HAS("KILN_LOAD_CONVERT_DTYPE");
        assert_all(t[0], 7, "w");
        ASSERT_OK(kiln_params_load_flags(p, file, KILN_LOAD_CONVERT_DTYPE));
        void *h = read_host(t[0]);
        for (int i = 0; i < 6; i++) {
            if (dts[k] == KILN_F32)
                ck_assert(((float *)h)[i] == (float)wv[i]);
            else if (dts[k] == KILN_F16)
                ck_assert_uint_eq(((uint16_t *)h)[i], float_to_half((float)wv[i]));
            else if (dts[k] == KILN_BF16) /* one rounding from f64 */
                ck_assert_uint_eq(((uint16_t *)h)[i], double_to_bf16(wv[i]));
            else {
                double tr = trunc(wv[i]);
                int32_t want = tr > INT32_MAX ? INT32_MAX : (int32_t)tr;
                ck_assert_int_eq(((int32_t *)h)[i], want);
            }
        }
        free(h);
        assert_all(t[2], 9.0, "extra");
        kiln_params_free(p);
    }

    /* converting, with a shape that does not match: nothing written */
    p = list_of(dev, 2, (const char *[]){"w", "extra"}, KILN_F32, 7, t);
    kiln_tensor *b2 = NULL;
    ASSERT_OK(kiln_full(dev, KILN_F32, 2, (const int64_t[]){2, 3}, 7, &b2));
    ASSERT_OK(kiln_params_add(p, "b", b2));
    ASSERT_FAILS(kiln_params_load_flags(p, file, KILN_LOAD_CONVERT_DTYPE | KILN_LOAD_NON_STRICT),
                 KILN_ERR_SHAPE_MISMATCH, "\"b\" has shape [6]");
    assert_all(t[0], 7, "w");
    assert_all(t[1], 7, "extra");
    kiln_tensor_release(b2);
    kiln_params_free(p);

    /* kiln_load_into keeps its rules: names of the file not asked for are ignored */
    kiln_tensor *x = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F64, 1, (const int64_t[]){6}, &x));
    ASSERT_OK(kiln_load_into(file, (kiln_named_tensor[]){{"b", x}}, 1));
    assert_all(x, 4.0, "b");
    kiln_tensor_release(x);
    kiln_tensor_release(w);
    kiln_tensor_release(b);
    kiln_tensor_release(extra);
}
END_TEST

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
    ASSERT_FAILS(kiln_params_load_flags(p, file, KILN_LOAD_NON_STRICT), KILN_ERR_UNSUPPORTED,
                 "kiln_params_load_flags: ");
    kiln__st_entry *es = (kiln__st_entry *)1;
    int n = -1;
    ck_assert_int_eq(kiln__st_parse_header("kiln_load", "{}", 2, 0, "test", &es, &n),
                     KILN_ERR_UNSUPPORTED);
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

/* ---- files that are not what they seem, names and temporaries (issue 21) -------------------- */

/* Opens a FIFO for writing once `wait_ms` have passed without `done`: a reader blocked in open()
 * returns then, so that a load that blocks fails the test instead of hanging it. */
typedef struct fifo_watch {
    const char *path;
    atomic_int done;
    int unblocked;
} fifo_watch;

static void *unblock_fifo(void *arg)
{
    fifo_watch *w = arg;
    for (int waited = 0; !atomic_load(&w->done); waited += 10) {
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
        if (waited < 3000)
            continue;
        int fd = open(w->path, O_WRONLY | O_NONBLOCK); /* ENXIO until a reader has it open */
        if (fd >= 0) {
            w->unblocked = 1;
            close(fd);
        }
    }
    return NULL;
}

/* Every load function on path fails promptly with KILN_ERR_IO and "not a regular file (kind)". */
static void expect_not_regular(const char *path, const char *kind)
{
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_tensor_zeros(test_device(), KILN_F32, 1, (const int64_t[]){2}, &t));
    kiln_params *p = NULL;
    ASSERT_OK(kiln_params_create(&p));
    ASSERT_OK(kiln_params_add(p, "t", t));
    fifo_watch w = {.path = path};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, unblock_fifo, &w), 0);
    kiln_checkpoint *ck = (kiln_checkpoint *)1;
    ASSERT_FAILS(kiln_load(path, test_device(), &ck), KILN_ERR_IO, "not a regular file");
    ck_assert_ptr_null(ck);
    ASSERT_ERROR_HAS("kiln_load: ");
    ASSERT_ERROR_HAS(kind);
    ASSERT_FAILS(kiln_load_into(path, (kiln_named_tensor[]){{"t", t}}, 1), KILN_ERR_IO,
                 "not a regular file");
    ASSERT_ERROR_HAS("kiln_load_into: ");
    ASSERT_FAILS(kiln_params_load(p, path), KILN_ERR_IO, "not a regular file");
    atomic_store(&w.done, 1);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(!w.unblocked, "a load from %s blocked in open() until a writer came", path);
    kiln_params_free(p);
    kiln_tensor_release(t);
}

START_TEST(test_load_fifo_and_device)
{
    const char *fifo = path_of("fifo.safetensors");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    expect_not_regular(fifo, "(a FIFO)");
    expect_not_regular("/dev/zero", "(a character device)");
}
END_TEST

static cl_mem CL_API_CALL failing_create_buffer(cl_context c, cl_mem_flags f, size_t n, void *h,
                                                cl_int *err)
{
    (void)c, (void)f, (void)n, (void)h;
    *err = CL_OUT_OF_RESOURCES;
    return NULL;
}

/* How many of this process's memory mappings are of the file at path (/proc/self/maps). */
static int mappings_of(const char *path)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        size_t l = strlen(line), p = strlen(path);
        n += l >= p && strcmp(line + l - p, path) == 0;
    }
    fclose(f);
    return n;
}

static bool maps_in_place(kiln_device *dev)
{
    kiln_device_info info;
    ASSERT_OK(kiln_device_info_get(dev, &info));
    return info.type == KILN_DEVICE_CPU && info.unified_memory && !simulated(dev);
}

/* Truncates the file to half its size: called by the load between its header and its data. */
static void truncate_half(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size / 2), 0);
}

/* Issue 21, also: a file truncated while kiln_load or kiln_load_into reads its data is
 * KILN_ERR_IO naming the function, the tensor and the file, and nothing is leaked; the data is
 * read with pread, not through a mapping of the file, which killed the process with SIGBUS. */
START_TEST(test_load_truncated_meanwhile)
{
    kiln_device *dev = test_device();
    const int64_t shape[1] = {1 << 18}; /* 1 MiB each */
    kiln_tensor *a = NULL, *b = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &a));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, shape, &b));
    ASSERT_OK(kiln_fill(a, 1.5));
    ASSERT_OK(kiln_fill(b, 2.5));
    const kiln_named_tensor list[2] = {{"a", a}, {"b", b}};
    const char *path = path_of("truncated.safetensors");
    /* kiln_load, kiln_load_into, kiln_load_mapped (which reads where the file is too short to
     * map) */
    const char *fn[3] = {"kiln_load", "kiln_load_into", "kiln_load_mapped"};
    for (int how = 0; how < 3; how++) {
        ASSERT_OK(kiln_save(path, list, 2));
        kiln__st_test_after_header = truncate_half;
        kiln_checkpoint *ck = (kiln_checkpoint *)1;
        kiln_status s = how == 1   ? kiln_load_into(path, list, 2)
                        : how == 2 ? kiln_load_mapped(path, dev, &ck)
                                   : kiln_load(path, dev, &ck);
        kiln__st_test_after_header = NULL;
        ck_assert_msg(s == KILN_ERR_IO, "%s", kiln_last_error());
        char want[64];
        snprintf(want, sizeof want, "%s: could not read \"a\" from ", fn[how]);
        ASSERT_ERROR_HAS(want);
        ASSERT_ERROR_HAS(path);
        ASSERT_ERROR_HAS("the file ends early (truncated meanwhile?)");
        if (how != 1)
            ck_assert_ptr_null(ck);
        ck_assert_int_eq(mappings_of(path), 0);
    }
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

/* Issue 27, item 5: kiln_load_mapped gives the same tensors as kiln_load on every device; on a
 * CPU device over host memory the aligned ones are backed by the file's pages (a mapping of the
 * file exists while they live, and is gone once they are released), writes to them stay out of
 * the file, and the others (after a 12-byte tensor: not at a 128-byte boundary) are read. */
START_TEST(test_load_mapped)
{
    kiln_device *dev = test_device();
    const int64_t n0 = 4096, n1 = 3, n2 = 37;
    double v0[4096], v1[3], v2[37];
    fill_values(KILN_F32, v0, (int)n0);
    fill_values(KILN_F32, v1, (int)n1);
    fill_values(KILN_F64, v2, (int)n2);
    kiln_named_tensor ts[3] = {{"big", upload(dev, KILN_F32, 1, &n0, v0)},
                               {"odd", upload(dev, KILN_F32, 1, &n1, v1)},
                               {"after", upload(dev, KILN_F64, 1, &n2, v2)}};
    char p[320];
    snprintf(p, sizeof p, "%s", path_of("mapped.safetensors"));
    ASSERT_OK(kiln_save(p, ts, 3));
    size_t fsize;
    unsigned char *before = read_file(p, &fsize);
    for (int d = 0; d < ndevs; d++) {
        bool in_place = maps_in_place(devs[d]);
        kiln_checkpoint *ck = NULL;
        ASSERT_OK(kiln_load_mapped(p, devs[d], &ck));
        ck_assert_int_eq(kiln_checkpoint_count(ck), 3);
        for (int i = 0; i < 3; i++) {
            ck_assert_str_eq(kiln_checkpoint_name(ck, i), ts[i].name);
            assert_same_bytes(kiln_checkpoint_tensor(ck, i), ts[i].tensor);
        }
        /* "big" and "odd" sit at 128-byte boundaries (kiln_save pads the header for the first;
         * big's 16 KiB keep the second there), "after" 12 bytes past one */
        ck_assert_int_eq(mappings_of(p), in_place ? 2 : 0);
        /* a write changes the tensor, not the file */
        kiln_tensor *big = kiln_tensor_retain(kiln_checkpoint_tensor(ck, 0));
        ASSERT_OK(kiln_fill(big, 9.0));
        float *got = read_host(big);
        ck_assert_float_eq(got[0], 9.0f);
        ck_assert_float_eq(got[n0 - 1], 9.0f);
        free(got);
        size_t n2b;
        unsigned char *after = read_file(p, &n2b);
        ck_assert_uint_eq(n2b, fsize);
        ck_assert(memcmp(after, before, fsize) == 0);
        free(after);
        /* the retained tensor keeps its pages past the checkpoint; releasing it unmaps them */
        kiln_checkpoint_free(ck);
        ck_assert_int_eq(mappings_of(p), in_place ? 1 : 0);
        kiln_tensor_release(big);
        ASSERT_OK(kiln_device_synchronize(devs[d]));
        ck_assert_int_eq(mappings_of(p), 0);
    }
    free(before);
    /* errors: as kiln_load's, naming kiln_load_mapped */
    kiln_checkpoint *ck = (kiln_checkpoint *)1;
    ASSERT_FAILS(kiln_load_mapped(p, NULL, &ck), KILN_ERR_INVALID_ARGUMENT, "kiln_load_mapped");
    ASSERT_FAILS(kiln_load_mapped(path_of("missing.safetensors"), dev, &ck), KILN_ERR_IO,
                 "kiln_load_mapped: could not open");
    ck_assert_ptr_null(ck);
    ASSERT_FAILS(kiln_load_mapped(p, dev, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    /* the driver refusing the buffer: a clear status, no mapping and no tensor left */
    if (maps_in_place(dev)) {
        kiln_live_objects lo;
        ASSERT_OK(kiln_live_objects_get(&lo));
        uint64_t live = lo.tensors;
        kiln__cl.CreateBuffer = failing_create_buffer;
        ck = (kiln_checkpoint *)1;
        kiln_status s = kiln_load_mapped(p, dev, &ck);
        kiln__cl_reset();
        ck_assert_int_eq(s, KILN_ERR_OUT_OF_MEMORY);
        ASSERT_ERROR_HAS("kiln_load_mapped");
        ASSERT_ERROR_HAS("clCreateBuffer");
        ck_assert_ptr_null(ck);
        ck_assert_int_eq(mappings_of(p), 0);
        ASSERT_OK(kiln_live_objects_get(&lo));
        ck_assert_uint_eq(lo.tensors, live);
    }
    for (int i = 0; i < 3; i++)
        kiln_tensor_release(ts[i].tensor);
}
END_TEST

/* The entries of dir other than "." and "..", in one string ("a b c "). */
static char *listing(const char *folder)
{
    static char out[4096];
    out[0] = '\0';
    DIR *d = opendir(folder);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            strncat(out, e->d_name, sizeof out - strlen(out) - 2);
            strcat(out, " ");
        }
    closedir(d);
    return out;
}

/* A 250-byte name (255 is the limit) saves: the temporary file has a short name of its own,
 * or none (O_TMPFILE), and nothing else is left in the folder. */
START_TEST(test_save_long_name)
{
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_arange(test_device(), KILN_F32, 0, 8, 1, &t));
    char name[251];
    memset(name, 'n', 250);
    memcpy(name + 250 - 12, ".safetensors", 12);
    name[250] = '\0';
    for (int named = 0; named < 2; named++) { /* O_TMPFILE, then as without it */
        kiln__st_no_tmpfile = named;
        char folder[300];
        snprintf(folder, sizeof folder, "%s/long%d", dir, named);
        ck_assert_int_eq(mkdir(folder, 0700), 0);
        char p[600];
        snprintf(p, sizeof p, "%s/%s", folder, name);
        ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"t", t}}, 1)); /* a new file */
        ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"t", t}}, 1)); /* replaced */
        kiln_checkpoint *ck = NULL;
        ASSERT_OK(kiln_load(p, test_device(), &ck));
        assert_same_bytes(kiln_checkpoint_find(ck, "t"), t);
        kiln_checkpoint_free(ck);
        char want[300];
        snprintf(want, sizeof want, "%s ", name);
        ck_assert_str_eq(listing(folder), want); /* nothing else left */
    }
    kiln__st_no_tmpfile = false;
    kiln_tensor_release(t);
}
END_TEST

/* A temporary of kiln_save's pattern in folder, of n bytes; its fd, locked when asked (a live
 * save holds its temporary locked), else closed (-1): what a save killed by SIGKILL leaves. */
static int make_temporary(const char *folder, const char *name, size_t n, bool live)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", folder, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)n), 0);
    if (live) {
        ck_assert_int_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
        return fd;
    }
    close(fd);
    return -1;
}

/* A save killed by SIGKILL leaves nothing with O_TMPFILE, and at most a temporary of kiln_save's
 * pattern (.kiln-tmp-<pid>-<n>) without: the next save into the folder removes those no live
 * save holds locked, and nothing else. */
START_TEST(test_stale_temporaries)
{
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_arange(test_device(), KILN_F32, 0, 8, 1, &t));
    for (int named = 0; named < 2; named++) {
        kiln__st_no_tmpfile = named;
        char folder[300];
        snprintf(folder, sizeof folder, "%s/stale%d", dir, named);
        ck_assert_int_eq(mkdir(folder, 0700), 0);
        make_temporary(folder, ".kiln-tmp-999999-0", 1 << 20, false); /* killed mid-save */
        make_temporary(folder, ".kiln-tmp-2-17", 100, false);
        int live = make_temporary(folder, ".kiln-tmp-1-3", 100, true); /* a save in progress */
        make_temporary(folder, ".kiln-tmp-notes", 10, false);          /* not the pattern */
        make_temporary(folder, ".kiln-tmp-4-4x", 10, false);
        make_temporary(folder, "kiln-tmp-5-5", 10, false);
        char p[400];
        snprintf(p, sizeof p, "%s/model.safetensors", folder);
        ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"t", t}}, 1));
        const char *left = listing(folder);
        ck_assert_msg(!strstr(left, ".kiln-tmp-999999-0") && !strstr(left, ".kiln-tmp-2-17"),
                      "stale temporaries left: %s", left);
        ck_assert_msg(strstr(left, ".kiln-tmp-1-3 ") && strstr(left, ".kiln-tmp-notes ") &&
                          strstr(left, ".kiln-tmp-4-4x ") && strstr(left, "kiln-tmp-5-5 ") &&
                          strstr(left, "model.safetensors "),
                      "a file that is not a stale temporary was removed: %s", left);
        close(live);
    }
    kiln__st_no_tmpfile = false;
    kiln_tensor_release(t);
}
END_TEST

/* Whether process pid has its temporary in folder open: "#<inode> (deleted)" while unnamed
 * (O_TMPFILE), else ".kiln-tmp-<pid>-<n>". */
static bool has_temporary_open(pid_t pid, const char *folder, bool named)
{
    char fds[64];
    snprintf(fds, sizeof fds, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(fds);
    if (!d)
        return false;
    bool found = false;
    size_t fl = strlen(folder);
    const struct dirent *e;
    while (!found && (e = readdir(d))) {
        char link[600], target[600];
        snprintf(link, sizeof link, "%s/%s", fds, e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        found = strncmp(target, folder, fl) == 0 && target[fl] == '/' &&
                strncmp(target + fl + 1, named ? ".kiln-tmp-" : "#", named ? 10 : 1) == 0;
    }
    closedir(d);
    return found;
}

/* tests/checkpoint-helper loads in and saves its tensors to out; SIGKILL as soon as its
 * temporary file is open (while it writes or syncs). False where it finished first, 5 times. */
static bool save_killed_midway(const char *folder, const char *in, const char *out, bool named)
{
    char helper[1024];
    snprintf(helper, sizeof helper, "%s/tests/checkpoint-helper", getenv("KILN_TEST_BUILDDIR"));
    char *argv[] = {helper,
                    (char *)kiln_device_spec(test_device()),
                    (char *)in,
                    (char *)out,
                    named ? "named" : NULL,
                    NULL};
    for (int attempt = 0; attempt < 5; attempt++) {
        pid_t pid = fork(); /* then only async-signal-safe calls until exec */
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 1);
            execv(helper, argv);
            _exit(127);
        }
        int status;
        bool seen;
        while (!(seen = has_temporary_open(pid, folder, named)) &&
               waitpid(pid, &status, WNOHANG) == 0)
            nanosleep(&(struct timespec){.tv_nsec = 100 * 1000}, NULL);
        if (seen) {
            kill(pid, SIGKILL);
            ck_assert_int_eq(waitpid(pid, &status, 0), pid);
            ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
            return true;
        }
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status %#x)",
                      helper, status);
        unlink(out); /* it finished first: again */
    }
    return false;
}

/* A save killed while it writes leaves nothing with O_TMPFILE; without, its temporary, which
 * the next save into the folder removes. */
START_TEST(test_save_killed)
{
    kiln_tensor *big = NULL, *t = NULL;
    float *zeros = calloc(1 << 22, sizeof *zeros); /* from the host: no kernel (Oclgrind) */
    ck_assert_ptr_nonnull(zeros);
    ASSERT_OK(
        kiln_tensor_from_host(test_device(), KILN_F32, 1, (const int64_t[]){1 << 22}, zeros, &big));
    free(zeros);
    ASSERT_OK(kiln_arange(test_device(), KILN_F32, 0, 8, 1, &t));
    for (int named = 0; named < 2; named++) {
        kiln__st_no_tmpfile = false;
        char folder[300], in[400], out[400];
        snprintf(folder, sizeof folder, "%s/killed%d", dir, named);
        ck_assert_int_eq(mkdir(folder, 0700), 0);
        snprintf(in, sizeof in, "%s/in.safetensors", folder);
        snprintf(out, sizeof out, "%s/out.safetensors", folder);
        ASSERT_OK(kiln_save(in, (kiln_named_tensor[]){{"big", big}}, 1)); /* 16 MiB */
        ck_assert_msg(save_killed_midway(folder, in, out, named),
                      "the helper finished its save 5 times before it could be killed");
        const char *left = listing(folder);
        if (named)
            ck_assert_msg(strstr(left, ".kiln-tmp-"), "no temporary left: %s", left);
        else
            ck_assert_str_eq(left, "in.safetensors ");
        kiln__st_no_tmpfile = named;
        ASSERT_OK(kiln_save(out, (kiln_named_tensor[]){{"t", t}}, 1));
        left = listing(folder);
        ck_assert_msg(strcmp(left, "in.safetensors out.safetensors ") == 0 ||
                          strcmp(left, "out.safetensors in.safetensors ") == 0,
                      "after the next save: %s", left);
    }
    kiln__st_no_tmpfile = false;
    kiln_tensor_release(big);
    kiln_tensor_release(t);
}
END_TEST

/* The position of the first byte of name that is not valid UTF-8, in the message. */
static void expect_bad_name(const char *name, const char *where)
{
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_arange(test_device(), KILN_F32, 0, 4, 1, &t));
    const char *p = path_of("utf8.safetensors");
    ASSERT_FAILS(kiln_save(p, (kiln_named_tensor[]){{"ok", t}, {name, t}}, 2),
                 KILN_ERR_INVALID_ARGUMENT, "kiln_save: tensors[1].name");
    ASSERT_ERROR_HAS(where);
    ASSERT_ERROR_HAS("UTF-8");
    ck_assert_int_ne(access(p, F_OK), 0);
    kiln_tensor_release(t);
}

START_TEST(test_save_name_not_utf8)
{
    expect_bad_name("ab\377cd", "byte 2");
    expect_bad_name("\xc3", "byte 0");                        /* cut short */
    expect_bad_name("w.\xc0\xaf", "byte 2");                  /* overlong '/' */
    expect_bad_name("x\xed\xa0\x80", "byte 1");               /* a surrogate */
    expect_bad_name("caf\xc3\xa9\xf4\x90\x80\x80", "byte 5"); /* past U+10FFFF */
    /* valid UTF-8 saves and loads */
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_arange(test_device(), KILN_F32, 0, 4, 1, &t));
    const char *p = path_of("utf8.safetensors");
    ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"caf\xc3\xa9.\xf0\x9f\x94\xa5", t}}, 1));
    kiln_checkpoint *ck = NULL;
    ASSERT_OK(kiln_load(p, test_device(), &ck));
    ck_assert_str_eq(kiln_checkpoint_name(ck, 0), "caf\xc3\xa9.\xf0\x9f\x94\xa5");
    kiln_checkpoint_free(ck);
    kiln_tensor_release(t);
}
END_TEST

/* The last message is valid UTF-8 without C0 or C1 control characters. */
static void assert_no_controls(void)
{
    const unsigned char *m = (const unsigned char *)kiln_last_error();
    for (size_t i = 0; m[i];) {
        int len = m[i] < 0x80 ? 1 : m[i] >= 0xc2 && m[i] < 0xe0 ? 2 : m[i] < 0xf0 ? 3 : 4;
        uint32_t c = len == 1 ? m[i] : m[i] & (0x7f >> len);
        for (int k = 1; k < len; k++) {
            ck_assert_msg((m[i + k] & 0xc0) == 0x80, "not UTF-8 at byte %zu of '%s'", i, m);
            c = c << 6 | (m[i + k] & 0x3f);
        }
        ck_assert_msg(m[i] < 0x80 || m[i] >= 0xc2, "not UTF-8 at byte %zu of '%s'", i, m);
        ck_assert_msg(c >= 0x20 && (c < 0x7f || c > 0x9f), "control U+%04X in '%s'", c, m);
        i += (size_t)len;
    }
}

START_TEST(test_c1_controls_in_messages)
{
    const unsigned char z[8] = {0};
    /* U+009B is CSI: ESC [ in one character */
    expect_bad("{\"a\\u009b2Jb\":{\"dtype\":\"X\\u0085\",\"shape\":[1],\"data_offsets\":[0,4]}}", z,
               4, KILN_ERR_UNSUPPORTED, "tensor \"a?2Jb\" has dtype X?,");
    assert_no_controls();
    expect_bad("{\"a\302\2332J\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,4]}}", z, 4,
               KILN_ERR_UNSUPPORTED, "tensor \"a?2J\"");
    assert_no_controls();
    /* text that is not UTF-8 at all, quoted by jansson's message */
    expect_bad("{\"a\":\x9b[2J}", z, 0, KILN_ERR_INVALID_ARGUMENT, "not valid JSON");
    assert_no_controls();
    /* printable characters beyond ASCII stay */
    expect_bad("{\"caf\xc3\xa9\":{\"dtype\":\"X\",\"shape\":[1],\"data_offsets\":[0,4]}}", z, 4,
               KILN_ERR_UNSUPPORTED, "tensor \"caf\xc3\xa9\"");
}
END_TEST

START_TEST(test_replace_keeps_mode)
{
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_arange(test_device(), KILN_F32, 0, 4, 1, &t));
    mode_t old = umask(022);
    const char *p = path_of("private.safetensors");
    ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"t", t}}, 1));
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0644); /* a new file: the umask's */
    ck_assert_int_eq(chmod(p, 0600), 0);
    ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"t", t}}, 1));
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_msg((st.st_mode & 07777) == 0600, "mode %o after replacing a 0600 file",
                  st.st_mode & 07777);
    ck_assert_int_eq(chmod(p, 0640), 0);
    ASSERT_OK(kiln_save(p, (kiln_named_tensor[]){{"t", t}}, 1));
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0640);
    umask(old);
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
    tcase_add_test(tc, test_zero_size_dims_anywhere);
    tcase_add_test(tc, test_save_errors_and_atomicity);
    tcase_add_test(tc, test_resume_bit_identical);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("files");
    tcase_add_unchecked_fixture(tf, setup, teardown);
    tcase_set_timeout(tf, 120);
    tcase_add_test(tf, test_load_fifo_and_device);
    tcase_add_test(tf, test_load_truncated_meanwhile);
    tcase_add_test(tf, test_load_mapped);
    tcase_add_test(tf, test_save_long_name);
    tcase_add_test(tf, test_stale_temporaries);
    tcase_add_test(tf, test_save_killed);
    tcase_add_test(tf, test_save_name_not_utf8);
    tcase_add_test(tf, test_c1_controls_in_messages);
    tcase_add_test(tf, test_replace_keeps_mode);
    tcase_add_test(tf, test_params_load_strict);
    suite_add_tcase(s, tf);
    /* Only where the build has no jansson (tests/meson.build sets the variable there). */
    if (getenv("KILN_TEST_NO_JANSSON")) {
        TCase *nj = tcase_create("nojansson");
        tcase_add_unchecked_fixture(nj, setup, teardown);
        tcase_add_test(nj, test_without_jansson);
        suite_add_tcase(s, nj);
    }
    return s;
}
