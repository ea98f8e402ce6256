/* test-promote.c - dtype promotion of the binary ops: every pair of dtypes and every kind of op
 * against a C reference computed in the promoted dtype (the table is written out here, from
 * PyTorch's torch.result_type for these dtypes), the _out forms, broadcasting, the scalar forms
 * and gradients through the promotion. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"
#include "testutil.h"

static kiln_device *dev;

static void setup(void)
{
    setup_devices();
    dev = test_device();
}

static void teardown(void)
{
    teardown_devices();
}

/* torch.result_type(a, b) for kiln's dtypes (rows and columns in the order below). */
static kiln_dtype expected(kiln_dtype a, kiln_dtype b)
{
    static const kiln_dtype order[7] = {KILN_U8,   KILN_I32, KILN_I64, KILN_F16,
                                        KILN_BF16, KILN_F32, KILN_F64};
    static const int table[7][7] = {
        /*          u8 i32 i64 f16 bf16 f32 f64 */
        /* u8   */ {0, 1, 2, 3, 4, 5, 6},
        /* i32  */ {1, 1, 2, 3, 4, 5, 6},
        /* i64  */ {2, 2, 2, 3, 4, 5, 6},
        /* f16  */ {3, 3, 3, 3, 5, 5, 6},
        /* bf16 */ {4, 4, 4, 5, 4, 5, 6},
        /* f32  */ {5, 5, 5, 5, 5, 5, 6},
        /* f64  */ {6, 6, 6, 6, 6, 6, 6},
    };
    int ia = 0, ib = 0;
    for (int i = 0; i < 7; i++) {
        if (order[i] == a)
            ia = i;
        if (order[i] == b)
            ib = i;
    }
    return order[table[ia][ib]];
}

static bool is_float(kiln_dtype d)
{
    return d == KILN_F16 || d == KILN_BF16 || d == KILN_F32 || d == KILN_F64;
}

/* v rounded (floats) or wrapped (integers) into dtype d, as the device stores it. */
static double into(kiln_dtype d, double v)
{
    switch (d) {
    case KILN_F16:
        return half_to_float(float_to_half((float)v));
    case KILN_BF16:
        return bf16_to_double(double_to_bf16(v));
    case KILN_F32:
        return (float)v;
    case KILN_F64:
        return v;
    case KILN_I32:
        return (int32_t)(uint32_t)(int64_t)v;
    case KILN_I64:
        return (double)(int64_t)v;
    default:
        return (uint8_t)(int64_t)v;
    }
}

static const kiln_binary_op ops[] = {KILN_BINARY_ADD,    KILN_BINARY_SUB, KILN_BINARY_MUL,
                                     KILN_BINARY_DIV,    KILN_BINARY_LT,  KILN_BINARY_EQ,
                                     KILN_BINARY_MAXIMUM};

static double reference(kiln_binary_op op, kiln_dtype pd, double x, double y)
{
    switch (op) {
    case KILN_BINARY_ADD:
        return into(pd, x + y);
    case KILN_BINARY_SUB:
        return into(pd, x - y);
    case KILN_BINARY_MUL:
        return into(pd, x * y);
    case KILN_BINARY_DIV:
        return is_float(pd) ? into(pd, x / y) : trunc(x / y);
    case KILN_BINARY_LT:
        return x < y;
    case KILN_BINARY_EQ:
        return x == y;
    default:
        return fmax(x, y);
    }
}

enum { N = 12 };

/* Inputs exact in both dtypes: integers 1..15 (never 0: divisors), floats k/4 in [0.25, 6]
 * (fractions, so that an operand truncated to an integer shows). Every third pair is equal. */
static void inputs(kiln_dtype da, kiln_dtype db, double *a, double *b)
{
    for (int i = 0; i < N; i++) {
        a[i] = is_float(da) ? 0.25 * (1 + (i * 5) % 24) : 1 + (i * 7) % 15;
        b[i] = is_float(db) ? 0.25 * (1 + (i * 11) % 24) : 1 + (i * 4) % 15;
        if (i % 3 == 0 && (is_float(db) || !is_float(da)))
            b[i] = a[i];
    }
}

static bool close_enough(kiln_dtype d, double got, double ref)
{
    if (!is_float(d))
        return got == ref;
    double tol = d == KILN_F16 ? 2e-3 : d == KILN_BF16 ? 8e-3 : d == KILN_F32 ? 1e-6 : 1e-13;
    return fabs(got - ref) <= tol * fmax(1.0, fabs(ref));
}

/* Each (pair, op) is a generated kernel to compile (about 170 s cold on PoCL in all): the
 * default tier checks add, div and lt on every pair (the promoted dtype, integer against float
 * division, a u8 result) and every op on i32 x f32 in both orders; the full tier every op on
 * every pair, except bf16 with an integer or f64 (add, div and lt there too: bf16 is f16's code
 * with other load and store macros; its own pairs with f16, f32 and bf16 take every op). */
static bool in_tier(kiln_dtype da, kiln_dtype db, kiln_binary_op op)
{
    bool mixed = (da == KILN_I32 && db == KILN_F32) || (da == KILN_F32 && db == KILN_I32);
    bool bf16_other = (da == KILN_BF16) != (db == KILN_BF16) && da != KILN_F16 && db != KILN_F16 &&
                      da != KILN_F32 && db != KILN_F32;
    return (test_full() && !bf16_other) || mixed || op == KILN_BINARY_ADD ||
           op == KILN_BINARY_DIV || op == KILN_BINARY_LT;
}

START_TEST(test_every_pair)
{
    int checked = 0;
    for (int ia = 0; ia < KILN_DTYPE_COUNT; ia++) {
        for (int ib = 0; ib < KILN_DTYPE_COUNT; ib++) {
            kiln_dtype da = (kiln_dtype)ia, db = (kiln_dtype)ib;
            if ((da == KILN_F64 || db == KILN_F64) && !has_fp64(dev))
                continue;
            kiln_dtype pd = expected(da, db);
            double a[N], b[N];
            inputs(da, db, a, b);
            int64_t n = N;
            kiln_tensor *ta = upload(dev, da, 1, &n, a), *tb = upload(dev, db, 1, &n, b);
            for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
                kiln_binary_op op = ops[k];
                if (!in_tier(da, db, op))
                    continue;
                bool cmp = op == KILN_BINARY_LT || op == KILN_BINARY_EQ;
                kiln_dtype rd = cmp ? KILN_U8 : pd;
                kiln_tensor *r = NULL, *o = NULL;
                ASSERT_OK(kiln_binary(op, ta, tb, &r));
                ck_assert_msg(kiln_tensor_dtype(r) == rd, "%s op %d %s gave %s, expected %s",
                              kiln_dtype_name(da), (int)op, kiln_dtype_name(db),
                              kiln_dtype_name(kiln_tensor_dtype(r)), kiln_dtype_name(rd));
                /* The _out form into the promoted dtype; any other is refused. */
                ASSERT_OK(kiln_tensor_empty(dev, rd, 1, &n, &o));
                ASSERT_OK(kiln_binary_out(op, ta, tb, o));
                double *got = download(r), *got_out = download(o);
                for (int i = 0; i < N; i++) {
                    double ref = reference(op, pd, a[i], b[i]);
                    ck_assert_msg(close_enough(rd, got[i], ref) && got_out[i] == got[i],
                                  "%s %g op %d %s %g: got %.17g (out %.17g), reference %.17g",
                                  kiln_dtype_name(da), a[i], (int)op, kiln_dtype_name(db), b[i],
                                  got[i], got_out[i], ref);
                    checked++;
                }
                free(got);
                free(got_out);
                kiln_tensor_release(r);
                kiln_tensor_release(o);
                if (da != db && !cmp) {
                    kiln_dtype wrong = pd == da ? db : da;
                    ASSERT_OK(kiln_tensor_empty(dev, wrong, 1, &n, &o));
                    ASSERT_FAILS(kiln_binary_out(op, ta, tb, o), KILN_ERR_DTYPE_MISMATCH,
                                 kiln_dtype_name(pd));
                    kiln_tensor_release(o);
                }
            }
            /* The shorthands promote too. */
            kiln_tensor *r = NULL;
            ASSERT_OK(kiln_add(ta, tb, &r));
            ck_assert_int_eq(kiln_tensor_dtype(r), pd);
            kiln_tensor_release(r);
            ASSERT_OK(kiln_mul(tb, ta, &r));
            ck_assert_int_eq(kiln_tensor_dtype(r), pd);
            kiln_tensor_release(r);
            kiln_tensor_release(ta);
            kiln_tensor_release(tb);
        }
    }
    printf("promote: %d elements of mixed-dtype ops checked\n", checked);
}
END_TEST

/* [3, 1] i32 against [4] f32: broadcast and promoted. */
START_TEST(test_broadcast)
{
    double a[3] = {1, 2, 3}, b[4] = {0.5, 1.5, -2.25, 4};
    kiln_tensor *ta = upload(dev, KILN_I32, 2, (int64_t[]){3, 1}, a);
    kiln_tensor *tb = upload(dev, KILN_F32, 1, (int64_t[]){4}, b);
    kiln_tensor *r;
    ASSERT_OK(kiln_sub(ta, tb, &r));
    ck_assert_int_eq(kiln_tensor_dtype(r), KILN_F32);
    ck_assert_int_eq(kiln_tensor_ndim(r), 2);
    double *got = download(r);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            ck_assert_double_eq(got[i * 4 + j], a[i] - b[j]);
    free(got);
    kiln_tensor_release(r);
    kiln_tensor_release(ta);
    kiln_tensor_release(tb);
}
END_TEST

/* A tensor with a scalar keeps its dtype for a scalar of its category; an integer tensor with a
 * scalar that is not an integer computes in f32 (PyTorch: int tensor + 2.5 is f32). */
START_TEST(test_scalar)
{
    double v[4] = {1, 2, 3, 250};
    int64_t n = 4;
    kiln_tensor *ti = upload(dev, KILN_I32, 1, &n, v), *tu = upload(dev, KILN_U8, 1, &n, v);
    kiln_tensor *th = upload(dev, KILN_F16, 1, &n, v), *r = NULL, *o = NULL;
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, ti, 2.0, &r)); /* integral: stays i32 */
    ck_assert_int_eq(kiln_tensor_dtype(r), KILN_I32);
    double *got = download(r);
    ck_assert_double_eq(got[3], 500);
    free(got);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_ADD, ti, 2.5, &r)); /* fraction: f32 */
    ck_assert_int_eq(kiln_tensor_dtype(r), KILN_F32);
    got = download(r);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq(got[i], v[i] + 2.5);
    free(got);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_LT, tu, 2.5, &r)); /* compared in f32, u8 result */
    ck_assert_int_eq(kiln_tensor_dtype(r), KILN_U8);
    got = download(r);
    ck_assert(got[0] == 1 && got[1] == 1 && got[2] == 0 && got[3] == 0);
    free(got);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_ADD, tu, INFINITY, &r));
    ck_assert_int_eq(kiln_tensor_dtype(r), KILN_F32);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, th, 0.5, &r)); /* float tensor: keeps f16 */
    ck_assert_int_eq(kiln_tensor_dtype(r), KILN_F16);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_binary_scalar_i64(KILN_BINARY_ADD, th, 3, &r));
    ck_assert_int_eq(kiln_tensor_dtype(r), KILN_F16);
    kiln_tensor_release(r);
    /* The _out forms: out of the promoted dtype. */
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, &n, &o));
    ASSERT_OK(kiln_binary_scalar_out(KILN_BINARY_DIV, ti, 0.5, o));
    got = download(o);
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq(got[i], v[i] * 2);
    free(got);
    kiln_tensor_release(o);
    ASSERT_OK(kiln_tensor_empty(dev, KILN_I32, 1, &n, &o));
    ASSERT_FAILS(kiln_binary_scalar_out(KILN_BINARY_ADD, ti, 0.5, o), KILN_ERR_DTYPE_MISMATCH,
                 "f32");
    kiln_tensor_release(o);
    kiln_tensor_release(ti);
    kiln_tensor_release(tu);
    kiln_tensor_release(th);
}
END_TEST

/* Gradients flow through the promotion's cast back to the narrower input, in its dtype. */
START_TEST(test_autograd)
{
    double xv[3] = {0.5, -1.25, 2}, yv[3] = {3, 0.25, -1.5};
    int64_t n = 3;
    kiln_dtype wide = has_fp64(dev) ? KILN_F64 : KILN_F32;
    kiln_tensor *x = upload(dev, KILN_F16, 1, &n, xv), *y = upload(dev, wide, 1, &n, yv);
    kiln_tensor *k = upload(dev, KILN_I32, 1, &n, (double[]){1, 2, 3});
    ASSERT_OK(kiln_tensor_set_requires_grad(x, true));
    ASSERT_OK(kiln_tensor_set_requires_grad(y, true));
    kiln_tensor *xy, *xyk, *loss;
    ASSERT_OK(kiln_mul(x, y, &xy));   /* f16 * wide: wide */
    ASSERT_OK(kiln_mul(xy, k, &xyk)); /* wide * i32: wide */
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, xyk, KILN_ALL_AXES, false, &loss));
    ck_assert_int_eq(kiln_tensor_dtype(loss), wide);
    ASSERT_OK(kiln_backward(loss, NULL, 0));
    ck_assert_int_eq(kiln_tensor_dtype(kiln_tensor_grad(x)), KILN_F16);
    ck_assert_int_eq(kiln_tensor_dtype(kiln_tensor_grad(y)), wide);
    double *gx = download(kiln_tensor_grad(x)), *gy = download(kiln_tensor_grad(y));
    for (int i = 0; i < 3; i++) {
        ck_assert_double_eq(gx[i], into(KILN_F16, yv[i] * (i + 1)));
        ck_assert_double_eq(gy[i], xv[i] * (i + 1));
    }
    free(gx);
    free(gy);
    kiln_tensor_release(loss);
    kiln_tensor_release(xyk);
    kiln_tensor_release(xy);
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_tensor_release(k);
}
END_TEST

Suite *promote_suite(void)
{
    Suite *s = suite_create("promote");
    TCase *tc = tcase_create("promote");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_pair);
    tcase_add_test(tc, test_broadcast);
    tcase_add_test(tc, test_scalar);
    tcase_add_test(tc, test_autograd);
    suite_add_tcase(s, tc);
    return s;
}
