/* test-split.c - built-in launches split by the per-launch caps of lib/launch.c. This suite
 * lowers them with the test-only knobs before the first launch (KILN_TEST_MAX_GLOBAL = 32
 * work-items in dimension 0, KILN_TEST_MAX_GROUPS_Y = 3 work-groups in dimensions 1 and 2), so
 * every kind of built-in kernel runs over tensors several times larger than one launch covers,
 * and checks every element against plain C loops: a kernel that does not loop over the rest
 * (grid-stride, KILN_FOR in prelude.cl) leaves the tail unwritten. It also checks that user
 * launches over more than 65535 work-groups in dimension 1 are refused with the limit named. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "testutil.h"

/* The lowered caps. A launch always keeps one work-group, so kernels whose local size exceeds
 * CAP_ITEMS (1-D elementwise: up to 256 work-items) run BIG work-items per launch: 1-D cases use
 * several times BIG. */
#define CAP_ITEMS 32
#define BIG 256
#define CAP_GROUPS 3

static kiln_device *dev; /* the device the current case runs on: each of devs in turn */

/* got[i] == ref[i] within tol (1 + |ref|) for every i; tol 0: exactly (NaN equal to NaN). */
static void assert_close(const char *what, const double *got, const double *ref, int64_t n,
                         double tol)
{
    for (int64_t i = 0; i < n; i++) {
        bool ok = tol == 0 ? got[i] == ref[i] || (isnan(got[i]) && isnan(ref[i]))
                           : fabs(got[i] - ref[i]) <= tol * (1 + fabs(ref[i]));
        ck_assert_msg(ok, "%s on %s: element %lld of %lld is %.9g, reference %.9g", what,
                      kiln_device_spec(dev), (long long)i, (long long)n, got[i], ref[i]);
    }
}

/* t's values against ref, then t released. */
static void check_tensor(const char *what, kiln_tensor *t, const double *ref, int64_t n, double tol)
{
    ck_assert_int_eq(kiln_tensor_numel(t), n);
    double *got = download(t);
    assert_close(what, got, ref, n, tol);
    free(got);
    kiln_tensor_release(t);
}

/* f32-exact values. References of f32 arithmetic compute in float: (double)((float)x - (float)y)
 * is the rounded f32 result. The same as (double)(float)(x - y) in exact arithmetic, but GCC 12.2
 * at -O3 dropped that rounding for some elements of a vectorized loop (48 of 5460 in a
 * reproducer), which failed this suite in release builds only (issue 19, item 5). */
static double *values(int64_t n)
{
    double *v = malloc((size_t)n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    fill_values(KILN_F32, v, n);
    return v;
}

/* ---- elementwise -------------------------------------------------------------------------- */

static void binary_flat_scalar_unary_cast_on(void)
{
    const int64_t n = 5 * BIG + 37;
    double *a = values(n), *b = values(n), *ref = values(n);
    kiln_tensor *ta = upload(dev, KILN_F32, 1, &n, a), *tb = upload(dev, KILN_F32, 1, &n, b), *r;
    ASSERT_OK(kiln_add(ta, tb, &r)); /* kiln_b_add */
    for (int64_t i = 0; i < n; i++)
        ref[i] = (double)((float)a[i] + (float)b[i]);
    check_tensor("add flat", r, ref, n, 0);
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, ta, 2.0, &r)); /* kiln_bs_mul */
    for (int64_t i = 0; i < n; i++)
        ref[i] = a[i] * 2;
    check_tensor("mul scalar", r, ref, n, 0);
    ASSERT_OK(kiln_unary(KILN_UNARY_NEG, ta, &r)); /* kiln_u_neg */
    for (int64_t i = 0; i < n; i++)
        ref[i] = -a[i];
    check_tensor("neg", r, ref, n, 0);
    ASSERT_OK(kiln_unary_backward(KILN_UNARY_RELU, ta, tb, &r)); /* kiln_ub_relu */
    for (int64_t i = 0; i < n; i++)
        ref[i] = a[i] > 0 ? b[i] : 0;
    check_tensor("relu backward", r, ref, n, 0);
    ASSERT_OK(kiln_cast(ta, KILN_F64, &r)); /* kiln_cast_to_f64 or _f32 */
    check_tensor("cast", r, a, n, 0);
    kiln_tensor_release(ta);
    kiln_tensor_release(tb);
    free(a);
    free(b);
    free(ref);
}

/* [rows, 3] + [3]: kiln_b2_add, rows far beyond CAP_GROUPS work-groups in dimension 1. */
static void bias_add_2d_on(void)
{
    const int64_t rows = 40 * 16 + 5, shape[2] = {rows, 3}, three = 3;
    double *a = values(rows * 3), bias[3] = {0.5, -2, 8}, *ref = values(rows * 3);
    kiln_tensor *ta = upload(dev, KILN_F32, 2, shape, a),
                *tb = upload(dev, KILN_F32, 1, &three, bias);
    kiln_tensor *r;
    ASSERT_OK(kiln_add(ta, tb, &r));
    for (int64_t i = 0; i < rows * 3; i++)
        ref[i] = (double)((float)a[i] + (float)bias[i % 3]);
    check_tensor("bias add", r, ref, rows * 3, 0);
    kiln_tensor_release(ta);
    kiln_tensor_release(tb);
    free(a);
    free(ref);
}

/* [6, 1, 130] + [1, 7, 130] and where over the same broadcast: kiln_bb_sub, kiln_where_bb;
 * flat where: kiln_where. */
static void broadcast_and_where_on(void)
{
    const int64_t sa[3] = {6, 1, 130}, sb[3] = {1, 7, 130}, n = 6 * 7 * 130;
    double *a = values(6 * 130), *b = values(7 * 130), *c = values(n), *ref = values(n);
    for (int64_t i = 0; i < n; i++)
        c[i] = c[i] > 0;
    kiln_tensor *ta = upload(dev, KILN_F32, 3, sa, a), *tb = upload(dev, KILN_F32, 3, sb, b);
    const int64_t so[3] = {6, 7, 130};
    kiln_tensor *tc = upload(dev, KILN_U8, 3, so, c), *r;
    ASSERT_OK(kiln_sub(ta, tb, &r));
    for (int64_t i = 0; i < 6; i++)
        for (int64_t j = 0; j < 7; j++)
            for (int64_t k = 0; k < 130; k++)
                ref[(i * 7 + j) * 130 + k] =
                    (double)((float)a[i * 130 + k] - (float)b[j * 130 + k]);
    check_tensor("broadcast sub", r, ref, n, 0);
    ASSERT_OK(kiln_where(tc, ta, tb, &r));
    for (int64_t i = 0; i < 6; i++)
        for (int64_t j = 0; j < 7; j++)
            for (int64_t k = 0; k < 130; k++) {
                int64_t o = (i * 7 + j) * 130 + k;
                ref[o] = c[o] ? a[i * 130 + k] : b[j * 130 + k];
            }
    check_tensor("where broadcast", r, ref, n, 0);
    kiln_tensor *tx = upload(dev, KILN_F32, 3, so, ref), *ty = upload(dev, KILN_F32, 3, so, c);
    ASSERT_OK(kiln_where(tc, tx, ty, &r));
    double *ref2 = values(n);
    for (int64_t i = 0; i < n; i++)
        ref2[i] = c[i] ? ref[i] : c[i];
    check_tensor("where flat", r, ref2, n, 0);
    kiln_tensor_release(ta);
    kiln_tensor_release(tb);
    kiln_tensor_release(tc);
    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    free(a);
    free(b);
    free(c);
    free(ref);
    free(ref2);
}

/* ---- creation and random ------------------------------------------------------------------ */

/* Philox4x32-10 and the uniform and normal mappings of lib/kernels/random.cl, copied from
 * test-random.c (which checks them against published vectors). */
static void philox_at(int64_t i, uint64_t seed, uint32_t out[4])
{
    uint32_t c[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), 0, 0};
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
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

static float ref_uniform(int64_t i, uint64_t seed, float low, float high)
{
    uint32_t x[4];
    philox_at(i, seed, x);
    float v = low + (high - low) * ((float)(x[0] >> 8) * 5.9604645e-08f);
    return v >= high ? nextafterf(high, low) : v;
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The documented f32 algorithm of lib/kernels/random.cl, operation for operation (C11 with
 * FLT_EVAL_METHOD 0 and no contraction evaluates these exactly as IEEE single). */
static float ref_log(float x)
{
    uint32_t b = f2u(x);
    int e = (int)((b >> 23) & 0xffu) - 127;
    float m = u2f((b & 0x7fffffu) | 0x3f800000u);
    if (m > 1.41421356f) {
        m = m * 0.5f;
        e = e + 1;
    }
    float d = m + 1.0f;
    float r = 1.0f - 0.24264069f * d;
    r = r * (2.0f - d * r);
    r = r * (2.0f - d * r);
    r = r * (2.0f - d * r);
    float s = (m - 1.0f) * r;
    float s2 = s * s;
    float p = 0.09090909f;
    p = p * s2 + 0.11111111f;
    p = p * s2 + 0.14285715f;
    p = p * s2 + 0.2f;
    p = p * s2 + 0.33333334f;
    p = p * s2 + 1.0f;
    float fe = (float)e;
    return fe * 0.693145751953125f + (fe * 1.42860677e-06f + (s + s) * p);
}

static float ref_sqrt(float x)
{
    if (x <= 0.0f)
        return 0.0f;
    float y = u2f(0x5f3759dfu - (f2u(x) >> 1));
    y = y * (1.5f - 0.5f * x * y * y);
    y = y * (1.5f - 0.5f * x * y * y);
    y = y * (1.5f - 0.5f * x * y * y);
    return x * y;
}

static float ref_cos2pi(float u)
{
    float t = u * 4.0f;
    int q = (int)t;
    float th = (t - (float)q) * 1.57079633f;
    float t2 = th * th;
    float c = -1.14707456e-11f;
    c = c * t2 + 2.08767570e-09f;
    c = c * t2 - 2.75573192e-07f;
    c = c * t2 + 2.48015873e-05f;
    c = c * t2 - 1.38888889e-03f;
    c = c * t2 + 4.16666667e-02f;
    c = c * t2 - 0.5f;
    c = c * t2 + 1.0f;
    float s = 7.64716373e-13f;
    s = s * t2 - 1.60590438e-10f;
    s = s * t2 + 2.50521084e-08f;
    s = s * t2 - 2.75573192e-06f;
    s = s * t2 + 1.98412698e-04f;
    s = s * t2 - 8.33333333e-03f;
    s = s * t2 + 1.66666667e-01f;
    s = s * t2 - 1.0f;
    s = s * th;
    return q == 0 ? c : q == 1 ? s : q == 2 ? -c : -s;
}

static float ref_normal(int64_t i, uint64_t seed, float mean, float stddev)
{
    uint32_t x[4];
    philox_at(i, seed, x);
    float f1 = (float)((x[0] >> 8) + 1u) * 5.9604645e-08f;
    float f2 = (float)(x[1] >> 8) * 5.9604645e-08f;
    return mean + stddev * (ref_sqrt(-2.0f * ref_log(f1)) * ref_cos2pi(f2));
}

static void creation_and_random_on(void)
{
    const int64_t n = 6 * BIG + 11;
    double *ref = values(n);
    kiln_tensor *r;
    ASSERT_OK(kiln_full(dev, KILN_F32, 1, &n, 3.5, &r)); /* kiln_fill */
    for (int64_t i = 0; i < n; i++)
        ref[i] = 3.5;
    check_tensor("fill", r, ref, n, 0);
    ASSERT_OK(kiln_arange(dev, KILN_I32, 0, (double)n, 1, &r)); /* kiln_arange */
    for (int64_t i = 0; i < n; i++)
        ref[i] = (double)i;
    check_tensor("arange", r, ref, n, 0);
    ASSERT_OK(kiln_rand_uniform(dev, KILN_F32, 1, &n, 1234, -1, 1, &r));
    for (int64_t i = 0; i < n; i++)
        ref[i] = ref_uniform(i, 1234, -1, 1);
    check_tensor("rand uniform (bit-identical)", r, ref, n, 0);
    ASSERT_OK(kiln_rand_normal(dev, KILN_F32, 1, &n, 77, 0.5, 2, &r));
    for (int64_t i = 0; i < n; i++)
        ref[i] = ref_normal(i, 77, 0.5f, 2);
    check_tensor("rand normal (bit-identical)", r, ref, n, 0);
    free(ref);
}

/* ---- reductions --------------------------------------------------------------------------- */

static void sum_rows(const double *x, int64_t outer, int64_t n, int64_t inner, double *ref)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t j = 0; j < n; j++)
                s += x[(o * n + j) * inner + i];
            ref[o * inner + i] = s;
        }
}

static void reduce_on(void)
{
    /* All elements (kiln_reduce_wg over many chunks, then kiln_reduce_combine). */
    const int64_t n = 40 * BIG;
    double *x = values(n), ref[1];
    kiln_tensor *tx = upload(dev, KILN_F32, 1, &n, x), *r;
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, tx, KILN_ALL_AXES, false, &r));
    sum_rows(x, 1, n, 1, ref);
    check_tensor("sum all", r, ref, 1, 1e-4);
    kiln_tensor_release(tx);
    free(x);
    /* Along an axis with few long rows: kiln_reduce_wg over [chunks, 5 inner, 4 outer] (both
     * beyond CAP_GROUPS) and 20 results. */
    const int64_t s3[3] = {4, 1100, 5};
    x = values(4 * 1100 * 5);
    double *ref3 = values(4 * 5);
    tx = upload(dev, KILN_F32, 3, s3, x);
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, tx, 1, false, &r));
    sum_rows(x, 4, 1100, 5, ref3);
    check_tensor("sum axis 1 (work-groups)", r, ref3, 20, 1e-4);
    kiln_tensor_release(tx);
    free(x);
    free(ref3);
    /* Many long rows: 100 results in the combine step (local size at most 64, so beyond what
     * one capped launch covers). */
    const int64_t s2[2] = {100, 1024};
    x = values(100 * 1024);
    double *ref2 = values(100);
    tx = upload(dev, KILN_F32, 2, s2, x);
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, tx, 1, false, &r));
    sum_rows(x, 100, 1024, 1, ref2);
    check_tensor("sum axis 1 (combine)", r, ref2, 100, 1e-4);
    kiln_tensor_release(tx);
    free(x);
    free(ref2);
    /* Short rows, one work-item per result: kiln_reduce_rows over 1000 rows in dimension 1,
     * and along axis 0 over 1000 results in dimension 0 (rows or cols kernel). */
    const int64_t sr[2] = {1000, 7}, sc[2] = {7, 1000};
    x = values(7000);
    ref2 = values(1000);
    tx = upload(dev, KILN_F32, 2, sr, x);
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, tx, 1, false, &r));
    sum_rows(x, 1000, 7, 1, ref2);
    check_tensor("sum short rows", r, ref2, 1000, 1e-5);
    kiln_tensor_release(tx);
    tx = upload(dev, KILN_F32, 2, sc, x);
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, tx, 0, false, &r));
    sum_rows(x, 1, 7, 1000, ref2);
    check_tensor("sum axis 0", r, ref2, 1000, 1e-5);
    kiln_tensor_release(tx);
    free(x);
    free(ref2);
}

/* ---- nn ----------------------------------------------------------------------------------- */

static void softmax_and_losses_on(void)
{
    const int64_t rows = 1000, cols = 5, shape[2] = {rows, cols}, n = rows * cols;
    double *x = values(n), *ref = values(n);
    kiln_tensor *tx = upload(dev, KILN_F32, 2, shape, x), *r;
    ASSERT_OK(kiln_softmax(tx, 1, &r)); /* rows in dimension 1 */
    for (int64_t i = 0; i < rows; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < cols; j++)
            m = fmax(m, x[i * cols + j]);
        for (int64_t j = 0; j < cols; j++)
            s += exp(x[i * cols + j] - m);
        for (int64_t j = 0; j < cols; j++)
            ref[i * cols + j] = exp(x[i * cols + j] - m) / s;
    }
    check_tensor("softmax rows", r, ref, n, 1e-5);
    const int64_t tshape[2] = {cols, rows};
    kiln_tensor *tt = upload(dev, KILN_F32, 2, tshape, x);
    ASSERT_OK(kiln_log_softmax(tt, 0, &r)); /* 1000 columns in dimension 0 */
    for (int64_t i = 0; i < rows; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < cols; j++)
            m = fmax(m, x[j * rows + i]);
        for (int64_t j = 0; j < cols; j++)
            s += exp(x[j * rows + i] - m);
        for (int64_t j = 0; j < cols; j++)
            ref[j * rows + i] = x[j * rows + i] - m - log(s);
    }
    check_tensor("log-softmax columns", r, ref, n, 1e-5);
    kiln_tensor_release(tt);
    /* Cross-entropy: one work-item per row (1000 rows), mean loss and gradient. */
    double *labels = values(rows);
    for (int64_t i = 0; i < rows; i++)
        labels[i] = (double)(i * 7 % cols);
    kiln_tensor *tl = upload(dev, KILN_I64, 1, &rows, labels), *loss, *grad;
    ASSERT_OK(kiln_cross_entropy(tx, tl, &loss, &grad));
    double total = 0;
    for (int64_t i = 0; i < rows; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < cols; j++)
            m = fmax(m, x[i * cols + j]);
        for (int64_t j = 0; j < cols; j++)
            s += exp(x[i * cols + j] - m);
        int64_t l = (int64_t)labels[i];
        total += m + log(s) - x[i * cols + l];
        for (int64_t j = 0; j < cols; j++)
            ref[i * cols + j] = (exp(x[i * cols + j] - m) / s - (j == l)) / (double)rows;
    }
    double mean = total / (double)rows;
    check_tensor("cross-entropy loss", loss, &mean, 1, 1e-5);
    check_tensor("cross-entropy grad", grad, ref, n, 1e-5);
    /* MSE (kiln_mse, one work-item per element). */
    kiln_tensor *ty = upload(dev, KILN_F32, 2, shape, ref);
    ASSERT_OK(kiln_mse_loss(tx, ty, &loss, &grad));
    double sq = 0;
    double *g = values(n);
    for (int64_t i = 0; i < n; i++) {
        double d = (double)(float)x[i] - (double)(float)ref[i];
        sq += d * d;
        g[i] = 2 * d / (double)n;
    }
    double msq = sq / (double)n;
    check_tensor("mse loss", loss, &msq, 1, 1e-5);
    check_tensor("mse grad", grad, g, n, 1e-5);
    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    kiln_tensor_release(tl);
    free(x);
    free(ref);
    free(labels);
    free(g);
}

/* ---- shape copies ------------------------------------------------------------------------- */

static void shape_copies_on(void)
{
    /* Permute [9, 20, 30] by (2, 0, 1): kiln_strided_copy over all three dimensions. */
    const int64_t s3[3] = {9, 20, 30}, n = 9 * 20 * 30;
    double *x = values(n), *ref = values(2 * n);
    kiln_tensor *tx = upload(dev, KILN_F32, 3, s3, x), *r;
    int perm[3] = {2, 0, 1};
    ASSERT_OK(kiln_permute(tx, perm, &r));
    for (int64_t a = 0; a < 30; a++)
        for (int64_t b = 0; b < 9; b++)
            for (int64_t c = 0; c < 20; c++)
                ref[(a * 9 + b) * 20 + c] = x[(b * 20 + c) * 30 + a];
    check_tensor("permute", r, ref, n, 0);
    /* Transpose of [300, 70]: kiln_transpose_tiles over 19 x 5 tiles. */
    const int64_t s2[2] = {300, 70};
    double *x2 = values(300 * 70), *ref2 = values(300 * 70);
    kiln_tensor *t2 = upload(dev, KILN_F32, 2, s2, x2);
    ASSERT_OK(kiln_transpose(t2, &r));
    for (int64_t i = 0; i < 300; i++)
        for (int64_t j = 0; j < 70; j++)
            ref2[j * 300 + i] = x2[i * 70 + j];
    check_tensor("transpose", r, ref2, 300 * 70, 0);
    free(x2);
    free(ref2);
    /* Cat along axis 1 and a slice of the result. */
    const kiln_tensor *parts[2] = {tx, tx};
    ASSERT_OK(kiln_cat(parts, 2, 1, &r));
    double *cat = malloc(2 * (size_t)n * sizeof *cat);
    ck_assert_ptr_nonnull(cat);
    for (int64_t a = 0; a < 9; a++)
        for (int64_t b = 0; b < 40; b++)
            for (int64_t c = 0; c < 30; c++)
                cat[(a * 40 + b) * 30 + c] = x[(a * 20 + b % 20) * 30 + c];
    kiln_tensor *sl;
    ASSERT_OK(kiln_slice(r, 1, 5, 37, &sl));
    check_tensor("cat", r, cat, 2 * n, 0);
    for (int64_t a = 0; a < 9; a++)
        for (int64_t b = 0; b < 32; b++)
            for (int64_t c = 0; c < 30; c++)
                ref[(a * 32 + b) * 30 + c] = cat[(a * 40 + b + 5) * 30 + c];
    check_tensor("slice", sl, ref, 9 * 32 * 30, 0);
    kiln_tensor_release(tx);
    kiln_tensor_release(t2);
    free(x);
    free(ref);
    free(cat);
}

/* ---- matmul (built-in kernel) ------------------------------------------------------------- */

static void matmul_builtin_on(void)
{
    /* 255 x 255 picks 64 x 64 tiles (16 x 16 work-items): 4 tile rows (beyond CAP_GROUPS) and
     * 4 tile columns (64 work-items, beyond CAP_ITEMS); and a batch beyond CAP_GROUPS. */
    setenv("KILN_MATMUL", "builtin", 1);
    const int64_t batch = simulated(dev) ? 1 : 5, m = 255, k = 7, nn = 255;
    const int64_t sa[3] = {batch, m, k}, sb[3] = {batch, k, nn};
    double *a = values(batch * m * k), *b = values(batch * k * nn), *ref = values(batch * m * nn);
    kiln_tensor *ta = upload(dev, KILN_F32, 3, sa, a), *tb = upload(dev, KILN_F32, 3, sb, b), *r;
    ASSERT_OK(kiln_matmul(ta, tb, &r));
    for (int64_t q = 0; q < batch; q++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < nn; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++)
                    s += a[(q * m + i) * k + p] * b[(q * k + p) * nn + j];
                ref[(q * m + i) * nn + j] = s;
            }
    check_tensor("matmul builtin", r, ref, batch * m * nn, 1e-5);
    unsetenv("KILN_MATMUL");
    kiln_tensor_release(ta);
    kiln_tensor_release(tb);
    free(a);
    free(b);
    free(ref);
}

/* ---- user launches ------------------------------------------------------------------------ */

static void user_launch_group_limit_on(void)
{
    const char *src = "kernel void k(global int *p) { if (get_global_id(1) == 0) p[0] = 1; }";
    kiln_program *prog;
    ASSERT_OK(kiln_program_build(dev, src, NULL, &prog));
    const int64_t one = 1;
    kiln_tensor *t;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_I32, 1, &one, &t));
    kiln_arg args[1] = {kiln_arg_tensor(t)};
    size_t global[3] = {1, 65536, 1}, local[3] = {1, 1, 1};
    ASSERT_FAILS(kiln_program_launch(prog, "k", 2, global, local, 1, args),
                 KILN_ERR_INVALID_ARGUMENT, "65536 work-groups in dimension 1");
    ASSERT_ERROR_HAS("at most 65535");
    ASSERT_ERROR_HAS("on every device");
    global[1] = 1;
    global[2] = 65536 * 2;
    local[2] = 2;
    ASSERT_FAILS(kiln_program_launch(prog, "k", 3, global, local, 1, args),
                 KILN_ERR_INVALID_ARGUMENT, "65536 work-groups in dimension 2");
    /* At the limit, and beyond the lowered built-in caps (which user launches ignore): runs. */
    global[1] = 65535;
    global[2] = 1;
    local[2] = 1;
    ASSERT_OK(kiln_program_launch(prog, "k", 2, global, local, 1, args));
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_tensor_release(t);
    kiln_program_release(prog);
}

/* ---- cases: each of the above on every device ------------------------------------------- */

#define ON_EVERY_DEVICE(name, fn)                                                                  \
    START_TEST(name)                                                                               \
    {                                                                                              \
        for (int d_ = 0; d_ < ndevs; d_++) {                                                       \
            dev = devs[d_];                                                                        \
            fn();                                                                                  \
        }                                                                                          \
    }                                                                                              \
    END_TEST
ON_EVERY_DEVICE(test_binary_flat_scalar_unary_cast, binary_flat_scalar_unary_cast_on)
ON_EVERY_DEVICE(test_bias_add_2d, bias_add_2d_on)
ON_EVERY_DEVICE(test_broadcast_and_where, broadcast_and_where_on)
ON_EVERY_DEVICE(test_creation_and_random, creation_and_random_on)
ON_EVERY_DEVICE(test_reduce, reduce_on)
ON_EVERY_DEVICE(test_softmax_and_losses, softmax_and_losses_on)
ON_EVERY_DEVICE(test_shape_copies, shape_copies_on)
ON_EVERY_DEVICE(test_matmul_builtin, matmul_builtin_on)
ON_EVERY_DEVICE(test_user_launch_group_limit, user_launch_group_limit_on)

Suite *split_suite(void)
{
    /* Before the first launch: launch.c reads the knobs once. */
    setenv("KILN_TEST_MAX_GLOBAL", "32", 1);
    setenv("KILN_TEST_MAX_GROUPS_Y", "3", 1);
    Suite *s = suite_create("split");
    TCase *tc = tcase_create("split");
    tcase_add_unchecked_fixture(tc, setup_devices, teardown_devices);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_binary_flat_scalar_unary_cast);
    tcase_add_test(tc, test_bias_add_2d);
    tcase_add_test(tc, test_broadcast_and_where);
    tcase_add_test(tc, test_creation_and_random);
    tcase_add_test(tc, test_reduce);
    tcase_add_test(tc, test_softmax_and_losses);
    tcase_add_test(tc, test_shape_copies);
    tcase_add_test(tc, test_matmul_builtin);
    tcase_add_test(tc, test_user_launch_group_limit);
    suite_add_tcase(s, tc);
    return s;
}
