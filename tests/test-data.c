/* test-data.c - kiln_randperm, datasets, kiln_random_split and loaders: permutations against a
 * C Fisher-Yates over a C Philox (the rule kiln.h states), split sizes by PyTorch's rule, every
 * batch's contents against the samples it must hold, epochs, drop_last, errors and failed
 * allocations that leak nothing. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "lib/alloc.h"
#include "testutil.h"

static kiln_device *dev;

static void setup(void)
{
    setup_devices();
    dev = test_device();
}

static void teardown(void)
{
    kiln__alloc_fail_at(-1);
    teardown_devices();
}

/* Philox4x32-10 (as test-random.c's reference) and the permutation rule of kiln_randperm. */
static void philox_at(uint64_t i, uint64_t seed, uint32_t out[4])
{
    uint32_t c[4] = {(uint32_t)i, (uint32_t)(i >> 32), 0, 0}, k0 = (uint32_t)seed,
             k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1, n3 = (uint32_t)p0;
        c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
    }
    memcpy(out, c, sizeof c);
}

static int64_t *ref_perm(int64_t n, uint64_t seed)
{
    int64_t *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t w[4];
        philox_at((uint64_t)i, seed, w);
        int64_t j = (int64_t)(((uint64_t)w[0] | (uint64_t)w[1] << 32) % (uint64_t)(i + 1));
        int64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

static int64_t *read_i64(const kiln_tensor *t)
{
    int64_t n = kiln_tensor_numel(t);
    int64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    ck_assert_ptr_nonnull(v);
    ASSERT_OK(kiln_tensor_read(t, v, (size_t)n * sizeof *v));
    return v;
}

START_TEST(test_randperm)
{
    const int64_t sizes[] = {0, 1, 2, 10, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int64_t n = sizes[k];
        kiln_tensor *t = NULL;
        ASSERT_OK(kiln_randperm(dev, n, 1234, &t));
        ck_assert_int_eq(kiln_tensor_dtype(t), KILN_I64);
        ck_assert_int_eq(kiln_tensor_ndim(t), 1);
        ck_assert_int_eq(kiln_tensor_shape(t)[0], n);
        int64_t *got = read_i64(t), *want = ref_perm(n, 1234);
        char *seen = calloc((size_t)n + 1, 1);
        for (int64_t i = 0; i < n; i++) {
            ck_assert_int_eq(got[i], want[i]);
            ck_assert(got[i] >= 0 && got[i] < n && !seen[got[i]]);
            seen[got[i]] = 1;
        }
        if (n == 1000) { /* shuffled, not the identity; another seed gives another order */
            int fixed = 0;
            for (int64_t i = 0; i < n; i++)
                fixed += got[i] == i;
            ck_assert_int_lt(fixed, 20);
            kiln_tensor *u = NULL;
            ASSERT_OK(kiln_randperm(dev, n, 1235, &u));
            int64_t *other = read_i64(u);
            ck_assert(memcmp(other, got, (size_t)n * sizeof *got) != 0);
            free(other);
            kiln_tensor_release(u);
        }
        free(seen);
        free(got);
        free(want);
        kiln_tensor_release(t);
    }
    /* KILN_SEED_GLOBAL follows kiln_manual_seed */
    kiln_tensor *a = NULL, *b = NULL;
    kiln_manual_seed(7);
    ASSERT_OK(kiln_randperm(dev, 50, KILN_SEED_GLOBAL, &a));
    kiln_manual_seed(7);
    ASSERT_OK(kiln_randperm(dev, 50, KILN_SEED_GLOBAL, &b));
    int64_t *va = read_i64(a), *vb = read_i64(b);
    ck_assert(memcmp(va, vb, 50 * sizeof *va) == 0);
    free(va);
    free(vb);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    ASSERT_FAILS(kiln_randperm(dev, -1, 1, &a), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_randperm: n is -1");
    ck_assert_ptr_null(a);
    ASSERT_FAILS(kiln_randperm(NULL, 3, 1, &a), KILN_ERR_INVALID_ARGUMENT, "dev is NULL");
    ASSERT_FAILS(kiln_randperm(dev, 3, 1, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
}
END_TEST

/* A dataset of n samples: features f32 [n, 2, 3] with sample i's values 100 i + j, targets i64
 * [n] = i. */
static kiln_dataset *numbered(int64_t n)
{
    float *f = malloc((size_t)n * 6 * sizeof *f);
    int64_t *t = malloc((size_t)n * sizeof *t);
    ck_assert(f && t);
    for (int64_t i = 0; i < n; i++) {
        t[i] = i;
        for (int j = 0; j < 6; j++)
            f[i * 6 + j] = (float)(100 * i + j);
    }
    const int64_t fs[3] = {n, 2, 3}, ts[1] = {n};
    kiln_dataset *d = NULL;
    ASSERT_OK(kiln_dataset_create(f, KILN_F32, 3, fs, t, KILN_I64, 1, ts, &d));
    free(f); /* the dataset holds a copy */
    free(t);
    return d;
}

/* The batch (x, y) holds the samples ids[0..rows-1] of numbered(). */
static void check_batch(const kiln_tensor *x, const kiln_tensor *y, const int64_t *ids,
                        int64_t rows)
{
    ck_assert_int_eq(kiln_tensor_ndim(x), 3);
    ck_assert_int_eq(kiln_tensor_shape(x)[0], rows);
    ck_assert_int_eq(kiln_tensor_shape(x)[1], 2);
    ck_assert_int_eq(kiln_tensor_shape(x)[2], 3);
    ck_assert_int_eq(kiln_tensor_dtype(x), KILN_F32);
    float *f = malloc((size_t)rows * 6 * sizeof *f);
    ASSERT_OK(kiln_tensor_read(x, f, (size_t)rows * 6 * sizeof *f));
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < 6; j++)
            ck_assert_msg(f[r * 6 + j] == (float)(100 * ids[r] + j), "row %lld: %g, want %g",
                          (long long)r, f[r * 6 + j], (double)(100 * ids[r] + j));
    free(f);
    if (y) {
        ck_assert_int_eq(kiln_tensor_ndim(y), 1);
        int64_t *t = read_i64(y);
        for (int64_t r = 0; r < rows; r++)
            ck_assert_int_eq(t[r], ids[r]);
        free(t);
    }
}

START_TEST(test_random_split)
{
    kiln_dataset *d = numbered(10), *parts[3] = {0};
    ck_assert_int_eq(kiln_dataset_size(d), 10);
    ASSERT_OK(kiln_random_split(d, 3, (const double[]){0.7, 0.2, 0.1}, 5, parts));
    ck_assert_int_eq(kiln_dataset_size(parts[0]), 7);
    ck_assert_int_eq(kiln_dataset_size(parts[1]), 2);
    ck_assert_int_eq(kiln_dataset_size(parts[2]), 1);
    /* each part, read in order through a loader, is the next stretch of randperm(10, 5) */
    int64_t *perm = ref_perm(10, 5), at = 0;
    kiln_dataset_free(d); /* the parts hold the samples */
    for (int k = 0; k < 3; k++) {
        kiln_loader *l = NULL;
        ASSERT_OK(kiln_loader_create(parts[k], dev, 100, false, false, 0, &l));
        kiln_tensor *x = NULL, *y = NULL;
        ASSERT_OK(kiln_loader_next(l, &x, &y));
        check_batch(x, y, perm + at, kiln_dataset_size(parts[k]));
        at += kiln_dataset_size(parts[k]);
        kiln_tensor_release(x);
        kiln_tensor_release(y);
        kiln_loader_free(l);
        kiln_dataset_free(parts[k]);
    }
    /* the rest of floor(f n) goes one each to the first parts: 9 by halves is 5 and 4; a split
     * of a part maps through it */
    kiln_dataset *halves[2] = {0}, *quarters[2] = {0};
    d = numbered(9);
    ASSERT_OK(kiln_random_split(d, 2, (const double[]){0.5, 0.5}, 1, halves));
    ck_assert_int_eq(kiln_dataset_size(halves[0]), 5);
    ck_assert_int_eq(kiln_dataset_size(halves[1]), 4);
    ASSERT_OK(kiln_random_split(halves[0], 2, (const double[]){0.6, 0.4}, 2, quarters));
    int64_t *p9 = ref_perm(9, 1), *p5 = ref_perm(5, 2), want[3];
    for (int i = 0; i < 3; i++)
        want[i] = p9[p5[i]];
    kiln_loader *l = NULL;
    ASSERT_OK(kiln_loader_create(quarters[0], dev, 3, false, false, 0, &l));
    kiln_tensor *x = NULL, *y = NULL;
    ASSERT_OK(kiln_loader_next(l, &x, &y));
    check_batch(x, y, want, 3);
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_loader_free(l);
    free(p9);
    free(p5);
    for (int k = 0; k < 2; k++) {
        kiln_dataset_free(halves[k]);
        kiln_dataset_free(quarters[k]);
    }
    /* errors: every part NULL */
    kiln_dataset *bad[2] = {(kiln_dataset *)d, (kiln_dataset *)d};
    ASSERT_FAILS(kiln_random_split(d, 2, (const double[]){0.5, 0.4}, 1, bad),
                 KILN_ERR_INVALID_ARGUMENT, "kiln_random_split: the fractions sum to 0.9");
    ck_assert(bad[0] == NULL && bad[1] == NULL);
    ASSERT_FAILS(kiln_random_split(d, 2, (const double[]){1.5, -0.5}, 1, bad),
                 KILN_ERR_INVALID_ARGUMENT, "fractions[0] is 1.5");
    ASSERT_FAILS(kiln_random_split(d, 2, (const double[]){NAN, 1}, 1, bad),
                 KILN_ERR_INVALID_ARGUMENT, "fractions[0] is nan");
    ASSERT_FAILS(kiln_random_split(d, 0, (const double[]){1}, 1, bad), KILN_ERR_INVALID_ARGUMENT,
                 "n is 0");
    ASSERT_FAILS(kiln_random_split(NULL, 1, (const double[]){1}, 1, bad), KILN_ERR_INVALID_ARGUMENT,
                 "d is NULL");
    ASSERT_FAILS(kiln_random_split(d, 1, NULL, 1, bad), KILN_ERR_INVALID_ARGUMENT,
                 "fractions is NULL");
    kiln_dataset_free(d);
    free(perm);
}
END_TEST

/* kiln_loader_create, then pin_memory(pin): the batches must be the same either way. */
static kiln_loader *loader(const kiln_dataset *d, int64_t batch, bool shuffle, bool drop,
                           uint64_t seed, bool pin)
{
    kiln_loader *l = NULL;
    ASSERT_OK(kiln_loader_create(d, dev, batch, shuffle, drop, seed, &l));
    ASSERT_OK(kiln_loader_pin_memory(l, pin));
    return l;
}

static void loader_cases(bool pin)
{
    kiln_dataset *d = numbered(10);
    int64_t in_order[10];
    for (int i = 0; i < 10; i++)
        in_order[i] = i;
    for (int drop = 0; drop < 2; drop++) {
        kiln_loader *l = loader(d, 4, false, drop, 0, pin);
        ck_assert_int_eq(kiln_loader_batches(l), drop ? 2 : 3);
        for (int epoch = 0; epoch < 2; epoch++) {
            for (int b = 0; b < (drop ? 2 : 3); b++) {
                kiln_tensor *x = NULL, *y = NULL;
                ASSERT_OK(kiln_loader_next(l, &x, &y));
                ck_assert_ptr_nonnull(x);
                check_batch(x, y, in_order + 4 * b, b == 2 ? 2 : 4);
                kiln_tensor_release(x);
                kiln_tensor_release(y);
            }
            kiln_tensor *x = (kiln_tensor *)d, *y = (kiln_tensor *)d;
            ASSERT_OK(kiln_loader_next(l, &x, &y)); /* the end of the epoch */
            ck_assert(x == NULL && y == NULL);
        }
        kiln_loader_free(l);
    }
    /* shuffled: epoch e in the order of randperm(10, seed + e); the loader outlives d */
    kiln_loader *l = loader(d, 3, true, false, 77, pin);
    kiln_dataset_free(d);
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
        int64_t *perm = ref_perm(10, 77 + epoch);
        for (int b = 0; b < 4; b++) {
            kiln_tensor *x = NULL;
            ASSERT_OK(kiln_loader_next(l, &x, NULL)); /* features only */
            check_batch(x, NULL, perm + 3 * b, b == 3 ? 1 : 3);
            kiln_tensor_release(x);
        }
        kiln_tensor *x = NULL;
        ASSERT_OK(kiln_loader_next(l, &x, NULL));
        ck_assert_ptr_null(x);
        free(perm);
    }
    kiln_loader_free(l);
    /* no targets; a batch larger than the dataset; an empty dataset has no batches */
    const double v[4] = {1, 2, 3, 4};
    const int64_t s[2] = {2, 2}, s0[2] = {0, 2};
    kiln_dataset *nt = NULL, *empty = NULL;
    ASSERT_OK(kiln_dataset_create(v, KILN_F64, 2, s, NULL, KILN_F32, 0, NULL, &nt));
    l = loader(nt, 1000, true, false, 1, pin);
    ck_assert_int_eq(kiln_loader_batches(l), 1);
    kiln_tensor *x = NULL, *y = (kiln_tensor *)nt;
    ASSERT_OK(kiln_loader_next(l, &x, &y));
    ck_assert_ptr_null(y);
    ck_assert_int_eq(kiln_tensor_shape(x)[0], 2);
    kiln_tensor_release(x);
    kiln_loader_free(l);
    ASSERT_OK(kiln_dataset_create(v, KILN_F64, 2, s0, NULL, KILN_F32, 0, NULL, &empty));
    l = loader(empty, 4, true, false, 1, pin);
    ck_assert_int_eq(kiln_loader_batches(l), 0);
    ASSERT_OK(kiln_loader_next(l, &x, NULL));
    ck_assert_ptr_null(x);
    kiln_loader_free(l);
    kiln_dataset_free(empty);
    kiln_dataset_free(nt);
}

START_TEST(test_loader)
{
    loader_cases(false);
    loader_cases(true);
    kiln_loader *l = NULL;
    kiln_tensor *x = NULL;
    const double v[4] = {1, 2, 3, 4};
    const int64_t s[2] = {2, 2};
    kiln_dataset *nt = NULL;
    ASSERT_OK(kiln_dataset_create(v, KILN_F64, 2, s, NULL, KILN_F32, 0, NULL, &nt));
    /* errors */
    const int64_t s3[1] = {3};
    const int64_t t3[1] = {3};
    kiln_dataset *bad = (kiln_dataset *)nt;
    ASSERT_FAILS(kiln_dataset_create(v, KILN_F64, 2, s, v, KILN_F64, 1, s3, &bad),
                 KILN_ERR_SHAPE_MISMATCH, "features hold 2 samples but targets 3");
    ck_assert_ptr_null(bad);
    ASSERT_FAILS(kiln_dataset_create(NULL, KILN_F64, 2, s, NULL, KILN_F64, 0, NULL, &bad),
                 KILN_ERR_INVALID_ARGUMENT, "kiln_dataset_create: features is NULL");
    ASSERT_FAILS(kiln_dataset_create(v, KILN_F64, 0, s, NULL, KILN_F64, 0, NULL, &bad),
                 KILN_ERR_INVALID_ARGUMENT, "features has 0 dims");
    ASSERT_FAILS(kiln_dataset_create(v, (kiln_dtype)99, 2, s, NULL, KILN_F64, 0, NULL, &bad),
                 KILN_ERR_INVALID_ARGUMENT, "unknown dtype 99");
    const int64_t neg[2] = {2, -1}, huge[2] = {INT64_MAX / 4, INT64_MAX / 4};
    ASSERT_FAILS(kiln_dataset_create(v, KILN_F64, 2, neg, NULL, KILN_F64, 0, NULL, &bad),
                 KILN_ERR_INVALID_ARGUMENT, "dimension 1 is -1");
    ASSERT_FAILS(kiln_dataset_create(v, KILN_F64, 2, huge, NULL, KILN_F64, 0, NULL, &bad),
                 KILN_ERR_INVALID_ARGUMENT, "more bytes than an address can count");
    ASSERT_FAILS(kiln_dataset_create(v, KILN_F64, 1, t3, v, KILN_F64, 1, t3, NULL),
                 KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_loader_create(nt, dev, 0, true, false, 1, &l), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_loader_create: batch_size is 0");
    ck_assert_ptr_null(l);
    ASSERT_FAILS(kiln_loader_create(NULL, dev, 1, true, false, 1, &l), KILN_ERR_INVALID_ARGUMENT,
                 "d is NULL");
    ASSERT_FAILS(kiln_loader_create(nt, NULL, 1, true, false, 1, &l), KILN_ERR_INVALID_ARGUMENT,
                 "dev is NULL");
    ASSERT_FAILS(kiln_loader_next(NULL, &x, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_loader_next: l is NULL");
    ASSERT_FAILS(kiln_loader_next(NULL, NULL, NULL), KILN_ERR_INVALID_ARGUMENT, "x is NULL");
    ASSERT_FAILS(kiln_loader_pin_memory(NULL, true), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_loader_pin_memory: l is NULL");
    ck_assert_int_eq(kiln_dataset_size(NULL), 0);
    ck_assert_int_eq(kiln_loader_batches(NULL), 0);
    kiln_dataset_free(NULL);
    kiln_loader_free(NULL);
    kiln_dataset_free(nt);
}
END_TEST

/* A pinned loader in a training loop's shape: a scope per step (the batch uploading ahead is in
 * none, so a step's scope end never frees it), pinning turned off and on between batches, the
 * loader freed with a batch still uploading; the batches are those of an unpinned loader. */
START_TEST(test_loader_pinned)
{
    kiln_dataset *d = numbered(10);
    kiln_loader *l = loader(d, 3, true, false, 5, true);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        int64_t *perm = ref_perm(10, 5 + epoch);
        for (int b = 0; b < 4; b++) {
            if (epoch == 1 && b == 1)
                ASSERT_OK(kiln_loader_pin_memory(l, false));
            if (epoch == 1 && b == 2)
                ASSERT_OK(kiln_loader_pin_memory(l, true));
            kiln_scope *scope;
            ASSERT_OK(kiln_scope_begin(&scope));
            kiln_tensor *x = NULL, *y = NULL, *z = NULL;
            ASSERT_OK(kiln_loader_next(l, &x, &y));
            ASSERT_OK(kiln_unary(KILN_UNARY_NEG, x, &z)); /* a step's work on the batch */
            check_batch(x, y, perm + 3 * b, b == 3 ? 1 : 3);
            kiln_scope_end(scope); /* x, y and z go; the batch ahead stays */
        }
        kiln_tensor *x = NULL;
        ASSERT_OK(kiln_loader_next(l, &x, NULL));
        ck_assert_ptr_null(x);
        free(perm);
    }
    kiln_tensor *x = NULL, *y = NULL;
    ASSERT_OK(kiln_loader_next(l, &x, &y)); /* the next batch is uploading as it is freed */
    kiln_loader_free(l);
    int64_t *perm = ref_perm(10, 7);
    check_batch(x, y, perm, 3); /* the batch outlives its loader */
    free(perm);
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_dataset_free(d);
}
END_TEST

/* Every host allocation of dataset_create, random_split and loader_create fails in turn: a clear
 * status, the outputs NULL; ASan's leak check covers the rest. */
START_TEST(test_out_of_memory)
{
    for (int which = 0; which < 3; which++) {
        int failures = 0;
        for (long n = 1;; n++) {
            kiln_dataset *d = numbered(6), *parts[2] = {0};
            kiln_loader *l = NULL;
            kiln__alloc_fail_at(n);
            kiln_status s = KILN_OK;
            kiln_dataset *made = NULL;
            if (which == 0) {
                const float f[2] = {1, 2};
                const int64_t sh[1] = {2};
                s = kiln_dataset_create(f, KILN_F32, 1, sh, f, KILN_F32, 1, sh, &made);
            } else if (which == 1) {
                s = kiln_random_split(d, 2, (const double[]){0.5, 0.5}, 1, parts);
            } else {
                s = kiln_loader_create(d, dev, 4, true, false, 1, &l);
            }
            long count = kiln__alloc_count();
            kiln__alloc_fail_at(-1);
            if (s != KILN_OK) {
                failures++;
                ck_assert_msg(s == KILN_ERR_OUT_OF_MEMORY, "case %d, allocation %ld: %s", which, n,
                              kiln_last_error());
                ck_assert(made == NULL && parts[0] == NULL && parts[1] == NULL && l == NULL);
            }
            kiln_dataset_free(made);
            kiln_dataset_free(parts[0]);
            kiln_dataset_free(parts[1]);
            kiln_loader_free(l);
            kiln_dataset_free(d);
            if (s == KILN_OK && count < n)
                break;
        }
        ck_assert_int_gt(failures, 0);
    }
}
END_TEST

Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_randperm);
    tcase_add_test(tc, test_random_split);
    tcase_add_test(tc, test_loader);
    tcase_add_test(tc, test_loader_pinned);
    tcase_add_test(tc, test_out_of_memory);
    suite_add_tcase(s, tc);
    return s;
}
