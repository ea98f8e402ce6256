/* test-fusion.c - lazy elementwise fusion (lib/fusion.c): every op and dtype fused against the
 * eager kernels (bit for bit), chains of depth 1..64 with broadcasting and mixed dtypes, writes
 * after a pending read, release before evaluation, out of memory at evaluation, 8 threads, and
 * generated kernels kept in the disk cache across processes; pending chains folded into
 * reductions (every op and axis against the eager reduction, bit for bit), a launch fault
 * in the middle of a folded reduction; the 32-bit index path chosen for the whole range. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_cl.h"
#include "lib/clcall.h"
#include "testutil.h"

/* lib/fusion.h (internal, linked statically into the tests) */
bool kiln__fusion_set(bool on);
void kiln__registry_reset(void);
void kiln__fusion_counts(long *generated, long *reused, long *single);
long kiln__fusion_folds(void);
void kiln__fusion_fold_on_cpu(bool on);
void kiln__fusion_index32_reread(void);

extern char **environ;

static kiln_device *dev;

static void setup(void)
{
    setup_devices();
    dev = test_device();
}

static long fused_count(void)
{
    long g, r, e;
    kiln__fusion_counts(&g, &r, &e);
    return g + r + e;
}

static bool usable(kiln_dtype dt)
{
    return dt != KILN_F64 || has_fp64(dev);
}

static bool is_float(kiln_dtype dt)
{
    return dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
}

/* A case: builds its result from inputs (all pending-capable calls). */
typedef kiln_status (*build_fn)(kiln_tensor *const *in, int op, kiln_dtype dt, kiln_tensor **out);

/* Bytes equal, or both NaN for floating dtypes. */
static void assert_same(const kiln_tensor *f, const kiln_tensor *e, const char *what)
{
    ck_assert_int_eq(kiln_tensor_dtype(f), kiln_tensor_dtype(e));
    ck_assert_int_eq(kiln_tensor_numel(f), kiln_tensor_numel(e));
    kiln_dtype dt = kiln_tensor_dtype(f);
    void *a = read_host(f), *b = read_host(e);
    size_t sz = kiln_dtype_size(dt);
    for (int64_t i = 0; i < kiln_tensor_numel(f); i++) {
        if (memcmp((char *)a + i * sz, (char *)b + i * sz, sz) == 0)
            continue;
        double x = load_value(dt, a, i), y = load_value(dt, b, i);
        ck_assert_msg(is_float(dt) && isnan(x) && isnan(y),
                      "%s (%s) element %lld: fused %.17g, eager %.17g", what, kiln_dtype_name(dt),
                      (long long)i, x, y);
    }
    free(a);
    free(b);
}

/* Build with fusion on (the result must be pending: evaluated by the read) and off. */
static void fused_vs_eager(build_fn f, kiln_tensor *const *in, int op, kiln_dtype dt,
                           const char *what)
{
    kiln_tensor *fr = NULL, *er = NULL;
    kiln__fusion_set(true);
    long before = fused_count();
    kiln_status s = f(in, op, dt, &fr);
    kiln__fusion_set(false);
    ck_assert_msg(s == KILN_OK, "%s %d %s: %s", what, op, kiln_dtype_name(dt), kiln_last_error());
    ASSERT_OK(kiln_tensor_eval(fr));
    ck_assert_msg(fused_count() > before, "%s: nothing was fused", what);
    ASSERT_OK(f(in, op, dt, &er));
    char name[96];
    snprintf(name, sizeof name, "%s op %d", what, op);
    assert_same(fr, er, name);
    kiln_tensor_release(fr);
    kiln_tensor_release(er);
}

/* ---- every op and dtype ---------------------------------------------------------------- */

/* op(a, b) broadcast, then op(t, b) again (arith) or where(t, a, b) (compare); the scalar form
 * last. */
static kiln_status build_binary(kiln_tensor *const *in, int op, kiln_dtype dt, kiln_tensor **out)
{
    (void)dt;
    kiln_tensor *t = NULL, *u = NULL;
    kiln_status s = kiln_binary((kiln_binary_op)op, in[0], in[1], &t);
    if (s == KILN_OK && test_binary_is_compare(op))
        s = kiln_where(t, in[0], in[1], &u);
    else if (s == KILN_OK)
        s = kiln_binary((kiln_binary_op)op, t, in[1], &u);
    if (s == KILN_OK)
        s = kiln_binary_scalar((kiln_binary_op)op, u, 2, out);
    kiln_tensor_release(t);
    kiln_tensor_release(u);
    return s;
}

/* op(a + b), and its derivative at a with that as the gradient. */
static kiln_status build_unary(kiln_tensor *const *in, int op, kiln_dtype dt, kiln_tensor **out)
{
    kiln_tensor *t = NULL, *u = NULL;
    kiln_status s = kiln_add(in[0], in[2], &t);
    if (s == KILN_OK)
        s = kiln_unary((kiln_unary_op)op, t, &u);
    if (s == KILN_OK && is_float(dt))
        s = kiln_unary_backward((kiln_unary_op)op, in[0], u, out);
    else if (s == KILN_OK)
        *out = kiln_tensor_retain(u);
    kiln_tensor_release(t);
    kiln_tensor_release(u);
    return s;
}

/* cast(a * b) to dtype `op`, then added to itself; clamp on floats. */
static kiln_status build_cast(kiln_tensor *const *in, int op, kiln_dtype dt, kiln_tensor **out)
{
    kiln_tensor *t = NULL, *u = NULL;
    kiln_status s = kiln_mul(in[0], in[1], &t);
    if (s == KILN_OK)
        s = kiln_cast(t, (kiln_dtype)op, &u);
    if (s == KILN_OK && is_float(dt) && is_float((kiln_dtype)op))
        s = kiln_clamp(u, -3, 4, out);
    else if (s == KILN_OK)
        s = kiln_add(u, u, out);
    kiln_tensor_release(t);
    kiln_tensor_release(u);
    return s;
}

/* The default tier checks every op on f32, i32 and f16 (floating, integer, half storage: each
 * code path of the generated kernels) and casts to every dtype from those; the full tier on
 * every dtype, bf16 (the second 16-bit storage, f16's code paths with its own load and store
 * macros) on the CPU devices only: under ASan its every op on Oclgrind cost CI about 35 s, and
 * Oclgrind runs bf16 through the casts here and elementwise's cases. Each (op, dtype) is a
 * kernel to compile: about 400 s cold on PoCL in all. */
static bool in_tier(kiln_dtype dt)
{
    if (dt == KILN_BF16)
        return test_full() && !simulated(dev);
    return test_full() || dt == KILN_F32 || dt == KILN_I32 || dt == KILN_F16;
}

/* In the default tier f32 checks every op; i32 and f16 every third, each a different third
 * (each op's expression is elementwise.cl's, shared by every dtype; the dtype's own code is in
 * the loads, stores and casts, which every dtype checks): this case took 106 s of a cold README
 * test command that went over its 10 minutes (2026-12-07). The full tier checks every pair. */
static bool op_in_tier(kiln_dtype dt, int op)
{
    return test_full() || dt == KILN_F32 || op % 3 == (dt == KILN_I32 ? 1 : 2);
}

START_TEST(test_every_op_and_dtype)
{
    int64_t sa[2] = {5, 7}, sb[1] = {7};
    int64_t n = sa[0] * sa[1];
    for (int d = 0; d < KILN_DTYPE_COUNT; d++) {
        kiln_dtype dt = all_dtypes[d];
        if (!usable(dt) || !in_tier(dt))
            continue;
        double lo = dt == KILN_U8 ? 0 : -4, hi = dt == KILN_U8 ? 9 : 4;
        double *va = malloc((size_t)n * sizeof *va), *vb = malloc(7 * sizeof *vb);
        for (int64_t i = 0; i < n; i++)
            va[i] = is_float(dt) ? lo + (hi - lo) * rnd() : floor(lo + (hi - lo) * rnd());
        for (int i = 0; i < 7; i++)
            vb[i] = is_float(dt) ? 0.25 + 2 * rnd() : 1 + i;
        kiln_tensor *in[3] = {upload(dev, dt, 2, sa, va), upload(dev, dt, 1, sb, vb), NULL};
        in[2] = upload(dev, dt, 2, sa, va);
        for (int op = 0; op < KILN_BINARY_OP_COUNT; op++) {
            kiln_tensor *probe = NULL; /* FLOAT ops refuse integer dtypes */
            kiln_status s = kiln_binary((kiln_binary_op)op, in[0], in[0], &probe);
            kiln_tensor_release(probe);
            if (s == KILN_OK && op_in_tier(dt, op))
                fused_vs_eager(build_binary, in, op, dt, "binary");
        }
        for (int op = 0; op < 32; op++) {
            kiln_tensor *probe = NULL;
            kiln_status s = kiln_unary((kiln_unary_op)op, in[0], &probe);
            kiln_tensor_release(probe);
            if (s == KILN_OK && op_in_tier(dt, op))
                fused_vs_eager(build_unary, in, op, dt, "unary");
        }
        for (int to = 0; to < KILN_DTYPE_COUNT; to++)
            if (usable(all_dtypes[to]))
                fused_vs_eager(build_cast, in, (int)all_dtypes[to], dt, "cast");
        for (int i = 0; i < 3; i++)
            kiln_tensor_release(in[i]);
        free(va);
        free(vb);
    }
}
END_TEST

/* ---- chains of depth 1..64 ------------------------------------------------------------- */

/* Step k of a chain over x [3, 1, 4] with a row [4], a column [3, 1, 1] and i32 detours. */
static kiln_status step(kiln_tensor *t, int k, kiln_tensor *row, kiln_tensor *col,
                        kiln_tensor **out)
{
    kiln_tensor *u = NULL, *m = NULL, *ng = NULL;
    kiln_status s;
    switch (k % 6) {
    case 0:
        return kiln_add(t, row, out);
    case 1:
        return kiln_binary_scalar(KILN_BINARY_MUL, t, 0.75, out);
    case 2:
        s = kiln_cast(t, KILN_I32, &u);
        if (s == KILN_OK)
            s = kiln_cast(u, KILN_F32, &m);
        if (s == KILN_OK)
            s = kiln_add(m, t, out);
        break;
    case 3:
        return kiln_unary(KILN_UNARY_TANH, t, out);
    case 4:
        s = kiln_binary_scalar(KILN_BINARY_GT, t, 0, &m);
        if (s == KILN_OK)
            s = kiln_unary(KILN_UNARY_NEG, t, &ng);
        if (s == KILN_OK)
            s = kiln_where(m, t, ng, out);
        break;
    default:
        return kiln_sub(t, col, out);
    }
    kiln_tensor_release(u);
    kiln_tensor_release(m);
    kiln_tensor_release(ng);
    return s;
}

static kiln_tensor *chain(kiln_tensor *x, int depth, kiln_tensor *row, kiln_tensor *col)
{
    kiln_tensor *t = kiln_tensor_retain(x);
    for (int k = 0; k < depth; k++) {
        kiln_tensor *n = NULL;
        ASSERT_OK(step(t, k, row, col, &n));
        kiln_tensor_release(t);
        t = n;
    }
    return t;
}

START_TEST(test_chain_depths)
{
    int64_t sx[3] = {3, 1, 4}, sr[1] = {4}, sc[3] = {3, 1, 1};
    double vx[12], vr[4], vc[3];
    for (int i = 0; i < 12; i++)
        vx[i] = 4 * rnd() - 2;
    for (int i = 0; i < 4; i++)
        vr[i] = 2 * rnd() - 1;
    for (int i = 0; i < 3; i++)
        vc[i] = rnd();
    kiln_tensor *x = upload(dev, KILN_F32, 3, sx, vx), *row = upload(dev, KILN_F32, 1, sr, vr),
                *col = upload(dev, KILN_F32, 3, sc, vc);
    /* Every depth in the full tier; every 5th (1, 6, ..., 61: each step kind at every position
     * mod 6) in the default one, every 9th on Oclgrind. */
    int stepsize = simulated(dev) ? 9 : (int)test_size(5, 1);
    for (int depth = 1; depth <= 64; depth += stepsize) {
        kiln__fusion_set(true);
        kiln_tensor *f = chain(x, depth, row, col);
        kiln__fusion_set(false);
        kiln_tensor *e = chain(x, depth, row, col);
        char what[32];
        snprintf(what, sizeof what, "depth %d", depth);
        assert_same(f, e, what);
        kiln_tensor_release(f);
        kiln_tensor_release(e);
    }
    kiln_tensor_release(x);
    kiln_tensor_release(row);
    kiln_tensor_release(col);
}
END_TEST

/* Broadcast patterns that collapse to 1, 2 and 3 dims (a 2-D range without division, a 1-D
 * range with division): relu(a + b) * a - b against eager, bit for bit, and a C loop. */
/* (a + b) relu * a - b over a of na dims and b of nb, broadcast, fused against eager (bit for
 * bit) and against a C loop; what names the case in messages. */
static void broadcast_case(int na_dims, const int64_t *sa, int nb_dims, const int64_t *sb_,
                           const char *what)
{
    int64_t na = 1, nb = 1;
    for (int j = 0; j < na_dims; j++)
        na *= sa[j];
    for (int j = 0; j < nb_dims; j++)
        nb *= sb_[j];
    double *va = malloc(sizeof(double) * (size_t)na), *vb = malloc(sizeof(double) * (size_t)nb);
    ck_assert_ptr_nonnull(va);
    ck_assert_ptr_nonnull(vb);
    for (int64_t i = 0; i < na; i++)
        va[i] = 4 * rnd() - 2;
    for (int64_t i = 0; i < nb; i++)
        vb[i] = 2 * rnd() - 1;
    kiln_tensor *a = upload(dev, KILN_F32, na_dims, sa, va),
                *b = upload(dev, KILN_F32, nb_dims, sb_, vb), *r[2] = {NULL, NULL};
    for (int on = 0; on < 2; on++) {
        kiln__fusion_set(on == 1);
        kiln_tensor *t = NULL, *u = NULL, *v = NULL;
        ASSERT_OK(kiln_add(a, b, &t));
        ASSERT_OK(kiln_unary(KILN_UNARY_RELU, t, &u));
        ASSERT_OK(kiln_mul(u, a, &v));
        ASSERT_OK(kiln_sub(v, b, &r[on]));
        kiln_tensor_release(t);
        kiln_tensor_release(u);
        kiln_tensor_release(v);
    }
    /* the C loop first (it names the element that is wrong): NumPy broadcasting over the
     * result's shape */
    int nd = na_dims > nb_dims ? na_dims : nb_dims;
    int64_t rs[8];
    for (int j = 0; j < nd; j++) {
        int ja = j - (nd - na_dims), jb = j - (nd - nb_dims);
        int64_t da = ja >= 0 ? sa[ja] : 1, db = jb >= 0 ? sb_[jb] : 1;
        rs[j] = da > db ? da : db;
    }
    ck_assert_int_eq(kiln_tensor_ndim(r[1]), nd);
    double *got = download(r[1]);
    for (int64_t i = 0; i < kiln_tensor_numel(r[1]); i++) {
        int64_t rem = i, ia = 0, ib = 0, ma = 1, mb = 1;
        for (int j = nd - 1; j >= 0; j--) {
            int64_t cj = rem % rs[j];
            rem /= rs[j];
            int ja = j - (nd - na_dims), jb = j - (nd - nb_dims);
            if (ja >= 0) {
                ia += (sa[ja] == 1 ? 0 : cj) * ma;
                ma *= sa[ja];
            }
            if (jb >= 0) {
                ib += (sb_[jb] == 1 ? 0 : cj) * mb;
                mb *= sb_[jb];
            }
        }
        float x = (float)va[ia], y = (float)vb[ib], z = x + y;
        float want = (z > 0 ? z : 0) * x - y;
        ck_assert_msg((float)got[i] == want, "%s element %lld: %g, want %g", what, (long long)i,
                      got[i], (double)want);
    }
    assert_same(r[1], r[0], what);
    free(got);
    free(va);
    free(vb);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(r[0]);
    kiln_tensor_release(r[1]);
    kiln__fusion_set(false);
}

START_TEST(test_broadcast_patterns)
{
    static const struct {
        int na, nb;
        int64_t a[3], b[3];
    } cases[] = {
        {2, 1, {4, 5}, {5}},          /* bias row */
        {2, 2, {4, 5}, {4, 1}},       /* column */
        {3, 2, {2, 3, 4}, {3, 1}},    /* three collapsed dims */
        {1, 1, {6}, {1}},             /* one dim, b repeated */
        {3, 3, {2, 3, 4}, {1, 3, 4}}, /* [3,4] merges: [2,12] */
        {3, 1, {2, 1, 3}, {3}},       /* a size-1 dim dropped */
        {3, 3, {1, 3, 4}, {2, 1, 1}}, /* both broadcast: root [2,3,4] */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char what[32];
        snprintf(what, sizeof what, "case %zu", c);
        broadcast_case(cases[c].na, cases[c].a, cases[c].nb, cases[c].b, what);
    }
}
END_TEST

/* The fused kernels' 32-bit index path is chosen for the whole range, never per index (issue 19,
 * item 9: a collapsed dimension over 2^32 elements was cut to 32 bits for the indices below
 * 2^32). With the path's limit lowered to 31 (KILN_TEST_FUSION_INDEX32_LIMIT), [2, 3, 40] with
 * [2, 1, 40] (three collapsed dims, the last over the limit; n = 240) must take the 64-bit path
 * for every index, and [2, 3, 5] with [2, 1, 5] (n = 30) the 32-bit one; both against a C loop. */
START_TEST(test_index32_whole_range)
{
    setenv("KILN_TEST_FUSION_INDEX32_LIMIT", "31", 1);
    kiln__fusion_index32_reread();
    const int64_t big_a[3] = {2, 3, 40}, big_b[3] = {2, 1, 40};
    const int64_t small_a[3] = {2, 3, 5}, small_b[3] = {2, 1, 5};
    broadcast_case(3, big_a, 3, big_b, "[2,3,40] limit 31");
    broadcast_case(3, small_a, 3, small_b, "[2,3,5] limit 31");
    unsetenv("KILN_TEST_FUSION_INDEX32_LIMIT");
    kiln__fusion_index32_reread();
    broadcast_case(3, big_a, 3, big_b, "[2,3,40]");
}
END_TEST

/* f64 to f16 inside a chain rounds once, as the eager cast does: values just past a half-way
 * point between two halves, where rounding to f32 first would land on the tie. */
START_TEST(test_f64_to_f16_rounds_once)
{
    if (!has_fp64(dev))
        return;
    int64_t n = 6;
    double v[6] = {1 + 0x1p-11 + 0x1p-40,
                   1 + 0x1p-11 - 0x1p-40,
                   -(1 + 3 * 0x1p-11 + 0x1p-45),
                   65520.0 - 0x1p-30,
                   65520.0,
                   0x1p-25 + 0x1p-60};
    /* the nearest halves: 1 + 2^-10, 1, -(1 + 2^-9), 65504, inf, 2^-24 */
    double want[6] = {1 + 0x1p-10, 1, -(1 + 0x1p-9), 65504, INFINITY, 0x1p-24};
    kiln_tensor *x = upload(dev, KILN_F64, 1, &n, v), *r[2] = {NULL, NULL};
    for (int on = 0; on < 2; on++) {
        kiln__fusion_set(on == 1);
        kiln_tensor *t = NULL;
        ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, x, 1, &t));
        ASSERT_OK(kiln_cast(t, KILN_F16, &r[on]));
        kiln_tensor_release(t);
    }
    assert_same(r[1], r[0], "f64 -> f16");
    double *got = download(r[1]);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(got[i] == want[i], "element %d: %.17g, want %.17g", i, got[i], want[i]);
    free(got);
    kiln_tensor_release(x);
    kiln_tensor_release(r[0]);
    kiln_tensor_release(r[1]);
    kiln__fusion_set(false);
}
END_TEST

/* ---- semantics ------------------------------------------------------------------------- */

START_TEST(test_release_before_eval)
{
    kiln__fusion_set(true);
    int64_t n = 6;
    double va[6] = {1, 2, 3, 4, 5, 6}, vb[6] = {6, 5, 4, 3, 2, 1};
    kiln_tensor *a = upload(dev, KILN_F32, 1, &n, va), *b = upload(dev, KILN_F32, 1, &n, vb);
    kiln_tensor *c = NULL, *d = NULL;
    ASSERT_OK(kiln_mul(a, b, &c));
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_SUB, c, 1, &d));
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
    double *r = download(d);
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(r[i], va[i] * vb[i] - 1);
    free(r);
    kiln_tensor_release(d);
    kiln__fusion_set(false);
}
END_TEST

/* A chain of one op runs that op's eager kernel (nothing generated), into a new tensor or an
 * _out's; a chain of two generates one. */
START_TEST(test_single_op_runs_eager)
{
    kiln__fusion_set(true);
    int64_t n = 5;
    double va[5] = {-2, -0.5, 0, 1.5, 3}, vb[5] = {4, 3, 2, 1, 0.25};
    kiln_tensor *a = upload(dev, KILN_F32, 1, &n, va), *b = upload(dev, KILN_F32, 1, &n, vb);
    kiln_tensor *c = NULL, *d = NULL, *out = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 1, &n, &out));
    long g0, r0, e0, g1, r1, e1;
    kiln__fusion_counts(&g0, &r0, &e0);
    ASSERT_OK(kiln_mul(a, b, &c));
    ASSERT_OK(kiln_tensor_eval(c));
    ASSERT_OK(kiln_sub_out(a, b, out));
    kiln__fusion_counts(&g1, &r1, &e1);
    ck_assert_int_eq(e1 - e0, 2);
    ck_assert_int_eq(g1 + r1, g0 + r0);
    ASSERT_OK(kiln_unary(KILN_UNARY_RELU, c, &d)); /* c is materialised: one op again */
    ASSERT_OK(kiln_tensor_eval(d));
    kiln_tensor_release(d);
    ASSERT_OK(kiln_unary(KILN_UNARY_EXP, a, &d));
    kiln_tensor *e = NULL;
    ASSERT_OK(kiln_add(d, b, &e)); /* exp(a) + b: two ops, one generated kernel */
    ASSERT_OK(kiln_tensor_eval(e));
    kiln__fusion_counts(&g0, &r0, &e0);
    ck_assert_int_eq(e0 - e1, 1);
    ck_assert_int_eq(g0 + r0 - (g1 + r1), 1);
    double *rc = download(c), *ro = download(out), *re = download(e);
    for (int i = 0; i < 5; i++) {
        ck_assert_float_eq((float)rc[i], (float)va[i] * (float)vb[i]);
        ck_assert_float_eq((float)ro[i], (float)va[i] - (float)vb[i]);
        ck_assert_float_eq_tol((float)re[i], expf((float)va[i]) + (float)vb[i], 1e-5f * 25);
    }
    free(rc);
    free(ro);
    free(re);
    kiln_tensor *all[] = {a, b, c, d, e, out};
    for (int i = 0; i < 6; i++)
        kiln_tensor_release(all[i]);
    kiln__fusion_set(false);
}
END_TEST

/* A write into an input of a pending tensor evaluates it first: it keeps the old value. */
/* A write through another tensor wrapping the same cl_mem (kiln_tensor_from_cl_mem) evaluates
 * the pending chains that read the buffer first, both ways: into the wrap while a chain reads the
 * original, into the original while a chain reads the wrap (issue 21, defect 6: the chain saw the
 * new values, 15 where eager gives 3). */
START_TEST(test_write_through_another_wrap)
{
    kiln__fusion_set(true);
    int64_t n = 4;
    double va[4] = {1, 2, 3, 4};
    kiln_tensor *a = upload(dev, KILN_F32, 1, &n, va), *w = NULL, *t = NULL, *p = NULL, *q = NULL;
    cl_mem mem = kiln_tensor_cl_mem(a);
    ck_assert_ptr_nonnull(mem);
    ASSERT_OK(kiln_tensor_from_cl_mem(dev, mem, KILN_F32, 1, &n, &w));
    ASSERT_OK(kiln_add(a, a, &t)); /* pending, reads a */
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_ADD, t, 1, &p));
    ASSERT_OK(kiln_fill(w, 7));    /* a's buffer, through w */
    ASSERT_OK(kiln_mul(w, w, &q)); /* pending, reads w: 49 */
    ASSERT_OK(kiln_fill(a, 0));    /* w's buffer, through a */
    double *rp = download(p), *rq = download(q), *ra = download(a);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(rp[i] == 2 * va[i] + 1, "element %d: %g, eager %g", i, rp[i], 2 * va[i] + 1);
        ck_assert_msg(rq[i] == 49, "element %d: %g, eager 49", i, rq[i]);
        ck_assert_double_eq(ra[i], 0);
    }
    free(rp);
    free(rq);
    free(ra);
    kiln_tensor_release(t);
    kiln_tensor_release(p);
    kiln_tensor_release(q);
    kiln_tensor_release(w);
    kiln_tensor_release(a);
    kiln__fusion_set(false);
}
END_TEST

START_TEST(test_write_after_pending_read)
{
    kiln__fusion_set(true);
    int64_t n = 4;
    double va[4] = {1, 2, 3, 4}, vb[4] = {10, 20, 30, 40};
    kiln_tensor *a = upload(dev, KILN_F32, 1, &n, va), *b = upload(dev, KILN_F32, 1, &n, vb);
    kiln_tensor *c = NULL, *d = NULL;
    ASSERT_OK(kiln_add(a, b, &c));
    float w[4] = {100, 100, 100, 100};
    ASSERT_OK(kiln_tensor_write(a, w, sizeof w));
    ASSERT_OK(kiln_mul(a, b, &d));
    ASSERT_OK(kiln_add_out(b, b, b)); /* in place, into the other input */
    double *rc = download(c), *rd = download(d), *rb = download(b);
    for (int i = 0; i < 4; i++) {
        ck_assert_double_eq(rc[i], va[i] + vb[i]);
        ck_assert_double_eq(rd[i], 100 * vb[i]);
        ck_assert_double_eq(rb[i], 2 * vb[i]);
    }
    free(rc);
    free(rd);
    free(rb);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
    kiln_tensor_release(d);
    kiln__fusion_set(false);
}
END_TEST

START_TEST(test_oom_at_eval)
{
    kiln__fusion_set(true);
    int64_t n = 1 << 16;
    kiln_tensor *a = NULL, *b = NULL, *c = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &n, &a));
    ASSERT_OK(kiln_unary(KILN_UNARY_EXP, a, &b));
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, b, 3, &c));
    kiln_tensor_release(b);
    ASSERT_OK(kiln_device_empty_cache(dev));
    kiln_memory_stats st0, st1;
    ASSERT_OK(kiln_device_memory_stats(dev, &st0));
    ASSERT_OK(kiln_device_set_memory_limit(dev, st0.allocated_bytes + 1024));
    float r[4];
    kiln_tensor *head = NULL;
    int64_t four = 4;
    (void)four;
    ASSERT_FAILS(kiln_tensor_eval(c), KILN_ERR_OUT_OF_MEMORY, "mul(exp(f32[65536]), 3)");
    ASSERT_ERROR_HAS("evaluating the pending elementwise chain");
    ASSERT_OK(kiln_device_memory_stats(dev, &st1));
    ck_assert_uint_eq(st1.allocated_bytes, st0.allocated_bytes);
    ASSERT_OK(kiln_device_set_memory_limit(dev, 0));
    /* still pending, and fine once memory is there */
    float *all = malloc((size_t)n * sizeof *all);
    ASSERT_OK(kiln_tensor_read(c, all, (size_t)n * sizeof *all));
    memcpy(r, all, sizeof r);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(r[i], 3.0f);
    free(all);
    kiln_tensor_release(head);
    kiln_tensor_release(a);
    kiln_tensor_release(c);
    kiln__fusion_set(false);
}
END_TEST

/* ---- chains folded into reductions ------------------------------------------------------ */

/* in: a, b (shape), c (the last dimension, broadcast), ci (c as i32). A chain per kind. */
enum { CHAIN_RELU, CHAIN_F16, CHAIN_I32, CHAIN_F64, CHAIN_KINDS };

static kiln_status build_chain(kiln_tensor *const *in, int kind, kiln_tensor **out)
{
    kiln_tensor *t = NULL, *u = NULL, *v = NULL;
    kiln_status s;
    switch (kind) {
    case CHAIN_RELU: /* relu(a * b + c) */
        s = kiln_mul(in[0], in[1], &t);
        if (s == KILN_OK)
            s = kiln_add(t, in[2], &u);
        if (s == KILN_OK)
            s = kiln_unary(KILN_UNARY_RELU, u, out);
        break;
    case CHAIN_F16: /* f16(where(a > c, a * b, exp(a))) */
        s = kiln_binary(KILN_BINARY_GT, in[0], in[2], &t);
        if (s == KILN_OK)
            s = kiln_mul(in[0], in[1], &u);
        if (s == KILN_OK)
            s = kiln_unary(KILN_UNARY_EXP, in[0], &v);
        if (s == KILN_OK) {
            kiln_tensor *w = NULL;
            s = kiln_where(t, u, v, &w);
            if (s == KILN_OK)
                s = kiln_cast(w, KILN_F16, out);
            kiln_tensor_release(w);
        }
        break;
    case CHAIN_I32: /* i32(a * 1000) + ci */
        s = kiln_binary_scalar(KILN_BINARY_MUL, in[0], 1000, &t);
        if (s == KILN_OK)
            s = kiln_cast(t, KILN_I32, &u);
        if (s == KILN_OK)
            s = kiln_add(u, in[3], out);
        break;
    default: /* (f64(a) - 0.25)^2 */
        s = kiln_cast(in[0], KILN_F64, &t);
        if (s == KILN_OK)
            s = kiln_binary_scalar(KILN_BINARY_SUB, t, 0.25, &u);
        if (s == KILN_OK)
            s = kiln_mul(u, u, out);
        break;
    }
    kiln_tensor_release(t);
    kiln_tensor_release(u);
    kiln_tensor_release(v);
    return s;
}

static void chain_inputs(int ndim, const int64_t *shape, kiln_tensor **in)
{
    int64_t n = numel_of(ndim, shape), nc = shape[ndim - 1];
    double *v = malloc((size_t)n * sizeof *v);
    for (int k = 0; k < 2; k++) {
        fill_values(KILN_F32, v, n);
        in[k] = upload(dev, KILN_F32, ndim, shape, v);
    }
    fill_values(KILN_F32, v, nc);
    in[2] = upload(dev, KILN_F32, 1, &nc, v);
    fill_values(KILN_I32, v, nc);
    in[3] = upload(dev, KILN_I32, 1, &nc, v);
    free(v);
}

static const kiln_reduce_op fold_ops[] = {KILN_REDUCE_SUM, KILN_REDUCE_MEAN, KILN_REDUCE_MAX,
                                          KILN_REDUCE_MIN, KILN_REDUCE_ARGMAX};

/* Every chain kind and reduce op over `axis` of shape: folded (the chain's result never
 * computed on its own: no elementwise kernel runs) against the eager reduction of the eager
 * chain, bit for bit (the same kernels reduce the same values in the same order). */
/* all_ops: every reduction op for every chain kind; else one op per kind, a different one for
 * each kind (each fold is a kernel to compile: the default tier checks every op on one shape and
 * axis, and one op per kind on the others). */
static void check_folds(int ndim, const int64_t *shape, int axis, bool all_ops)
{
    kiln_tensor *in[4];
    chain_inputs(ndim, shape, in);
    const size_t nops = sizeof fold_ops / sizeof *fold_ops;
    for (int kind = 0; kind < CHAIN_KINDS; kind++) {
        if (kind == CHAIN_F64 && !has_fp64(dev))
            continue;
        for (size_t o = 0; o < nops; o++) {
            if (!all_ops && o != (size_t)(kind + ndim + axis + 1) % nops)
                continue;
            kiln_reduce_op op = fold_ops[o];
            kiln_tensor *x = NULL, *xe = NULL, *r = NULL, *re = NULL;
            kiln__fusion_set(false);
            kiln_status s = build_chain(in, kind, &xe);
            if (s == KILN_ERR_UNSUPPORTED && kind == CHAIN_F16)
                break; /* no fp16 on this device */
            ASSERT_OK(s);
            kiln_status se = kiln_reduce(op, xe, axis, false, &re);
            kiln__fusion_set(true);
            ASSERT_OK(build_chain(in, kind, &x));
            long folds = kiln__fusion_folds(), fused = fused_count();
            s = kiln_reduce(op, x, axis, false, &r);
            kiln__fusion_set(false);
            char what[128];
            snprintf(what, sizeof what, "chain %d, op %d, %d-D axis %d", kind, (int)op, ndim, axis);
            ck_assert_msg(s == se, "%s: folded %s, eager %s (%s)", what, kiln_status_string(s),
                          kiln_status_string(se), kiln_last_error());
            if (s == KILN_OK) {
                ck_assert_msg(fused_count() == fused, "%s: the chain was evaluated", what);
                ck_assert_msg(kiln__fusion_folds() == folds + 1, "%s: not folded", what);
                assert_same(r, re, what);
            }
            kiln_tensor_release(x);
            kiln_tensor_release(xe);
            kiln_tensor_release(r);
            kiln_tensor_release(re);
        }
    }
    for (int k = 0; k < 4; k++)
        kiln_tensor_release(in[k]);
}

START_TEST(test_reduce_folds)
{
    kiln__fusion_fold_on_cpu(true); /* the fold's code on every device */
    const int64_t s2[2] = {37, 45}, s3[3] = {6, 7, 9};
    bool full = test_full();
    check_folds(2, s2, 0, full); /* every op on every chain: 20 programs, ~30 s cold on PoCL */
    check_folds(2, s2, -1, full);
    check_folds(2, s2, KILN_ALL_AXES, full);
    check_folds(3, s3, 1, full);
    check_folds(3, s3, 0, full);
    check_folds(3, s3, KILN_ALL_AXES, full);
    if (!simulated(dev)) { /* rows split into chunks, then combined */
        const int64_t big[2] = {300, 260}, row[1] = {70001};
        check_folds(2, big, 0, full);
        check_folds(2, big, 1, full);
        check_folds(1, row, KILN_ALL_AXES, full);
    }
    kiln__fusion_fold_on_cpu(false);
}
END_TEST

/* Held by something else (here a second reference), a pending input is evaluated first, as
 * is one that kiln_reduce_out's out feeds; the rest fold into kiln_reduce_out too. */
START_TEST(test_reduce_fold_rules)
{
    kiln__fusion_fold_on_cpu(true); /* the fold's code on every device */
    const int64_t shape[2] = {16, 24};
    kiln_tensor *in[4], *x = NULL, *y = NULL, *out = NULL;
    chain_inputs(2, shape, in);
    kiln__fusion_set(true);
    ASSERT_OK(build_chain(in, CHAIN_RELU, &x));
    kiln_tensor_retain(x);
    long folds = kiln__fusion_folds(), fused = fused_count();
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, x, 0, false, &y));
    ck_assert_int_eq(kiln__fusion_folds(), folds);
    ck_assert_int_gt(fused_count(), fused);
    kiln_tensor_release(x);
    kiln_tensor_release(x);
    /* out's value feeds the chain: evaluated before out is written */
    int64_t nc = 24;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &nc, &out));
    ASSERT_OK(kiln_tensor_copy(out, y));
    ASSERT_OK(kiln_add(in[0], out, &x));
    folds = kiln__fusion_folds();
    ASSERT_OK(kiln_reduce_out(KILN_REDUCE_MAX, x, 0, false, out));
    ck_assert_int_eq(kiln__fusion_folds(), folds);
    double *got = download(out), *va = download(in[0]), *vy = download(y);
    for (int j = 0; j < 24; j++) {
        double best = -INFINITY;
        for (int i = 0; i < 16; i++)
            best = fmax(best, (double)((float)va[i * 24 + j] + (float)vy[j]));
        ck_assert_double_eq(got[j], best);
    }
    free(got);
    free(va);
    kiln_tensor_release(x);
    /* kiln_reduce_out folds otherwise */
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, in[0], 2, &x));
    folds = kiln__fusion_folds();
    ASSERT_OK(kiln_reduce_out(KILN_REDUCE_MIN, x, 0, false, out));
    ck_assert_int_eq(kiln__fusion_folds(), folds + 1);
    got = download(out);
    va = download(in[0]);
    for (int j = 0; j < 24; j++) {
        double best = INFINITY;
        for (int i = 0; i < 16; i++)
            best = fmin(best, 2 * va[i * 24 + j]);
        ck_assert_double_eq(got[j], best);
    }
    free(got);
    free(va);
    kiln_tensor_release(x);
    /* by default a CPU device evaluates the chain, then reduces (the same values) */
    kiln__fusion_fold_on_cpu(false);
    kiln_device_info info;
    ASSERT_OK(kiln_device_info_get(dev, &info));
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, in[0], 2, &x));
    folds = kiln__fusion_folds();
    ASSERT_OK(kiln_reduce_out(KILN_REDUCE_MIN, x, 0, false, out));
    ck_assert_int_eq(kiln__fusion_folds(), folds + (info.type == KILN_DEVICE_CPU ? 0 : 1));
    double *again = download(out);
    va = download(in[0]);
    for (int j = 0; j < 24; j++) {
        double best = INFINITY;
        for (int i = 0; i < 16; i++)
            best = fmin(best, 2 * va[i * 24 + j]);
        ck_assert_double_eq(again[j], best);
    }
    free(again);
    free(va);
    free(vy);
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    kiln_tensor_release(out);
    for (int k = 0; k < 4; k++)
        kiln_tensor_release(in[k]);
    kiln__fusion_set(false);
}
END_TEST

static struct kiln__cl_api real_cl;
static int launches_left;

static cl_int second_launch_fails(cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *off,
                                  const size_t *global, const size_t *local, cl_uint nev,
                                  const cl_event *ev, cl_event *e)
{
    if (launches_left-- == 0)
        return CL_INVALID_WORK_GROUP_SIZE; /* not a fault that loses the device */
    return real_cl.EnqueueNDRangeKernel(q, k, dim, off, global, local, nev, ev, e);
}

/* A folded reduction whose second launch (the combine, after the folded kernel ran) fails:
 * the error is reported, nothing leaks, and the input is still pending and reads right. */
START_TEST(test_reduce_fold_fault)
{
    kiln__fusion_fold_on_cpu(true); /* the fold's code on every device */
    int64_t n = simulated(dev) ? 4096 : 1 << 18;
    kiln_tensor *in[4], *x = NULL, *y = NULL;
    chain_inputs(1, &n, in);
    kiln__fusion_set(true);
    ASSERT_OK(build_chain(in, CHAIN_RELU, &x));
    float *want = malloc((size_t)n * sizeof *want);
    double *va = download(in[0]), *vb = download(in[1]), *vc = download(in[2]);
    for (int64_t i = 0; i < n; i++) {
        float v = (float)va[i] * (float)vb[i] + (float)vc[i];
        want[i] = v > 0 ? v : 0;
    }
    ASSERT_OK(kiln_device_synchronize(dev));
    kiln_memory_stats st0, st1;
    ASSERT_OK(kiln_device_memory_stats(dev, &st0));
    real_cl = kiln__cl;
    launches_left = 1;
    kiln__cl.EnqueueNDRangeKernel = second_launch_fails;
    long folds = kiln__fusion_folds(), fused = fused_count();
    ASSERT_FAILS(kiln_reduce(KILN_REDUCE_SUM, x, KILN_ALL_AXES, false, &y), KILN_ERR_OPENCL,
                 "clEnqueueNDRangeKernel");
    kiln__cl = real_cl;
    ck_assert_ptr_null(y);
    ck_assert_int_eq(kiln__fusion_folds(), folds + 1);
    ck_assert_int_eq(fused_count(), fused);
    ck_assert_int_eq(launches_left, -1); /* it did fail in the middle */
    ASSERT_OK(kiln_device_memory_stats(dev, &st1));
    ck_assert_uint_eq(st1.allocated_bytes, st0.allocated_bytes);
    float *got = malloc((size_t)n * sizeof *got);
    ASSERT_OK(kiln_tensor_read(x, got, (size_t)n * sizeof *got));
    ck_assert_int_gt(fused_count(), fused); /* evaluated now, by the read */
    ck_assert_int_eq(memcmp(got, want, (size_t)n * sizeof *got), 0);
    free(got);
    free(want);
    free(va);
    free(vb);
    free(vc);
    kiln_tensor_release(x);
    for (int k = 0; k < 4; k++)
        kiln_tensor_release(in[k]);
    kiln__fusion_set(false);
    kiln__fusion_fold_on_cpu(false);
}
END_TEST

/* ---- threads --------------------------------------------------------------------------- */

typedef struct job {
    kiln_tensor *x, *shared;
    int id;
    bool ok;
} job;

static void *worker(void *arg)
{
    job *j = arg;
    kiln_tensor *t = NULL, *u = NULL;
    float got[16];
    j->ok = kiln_binary_scalar(KILN_BINARY_MUL, j->x, j->id, &t) == KILN_OK &&
            kiln_binary_scalar(KILN_BINARY_ADD, t, 1, &u) == KILN_OK &&
            kiln_tensor_read(u, got, sizeof got) == KILN_OK;
    for (int i = 0; j->ok && i < 16; i++)
        j->ok = got[i] == (float)i * (float)j->id + 1;
    float s[16];
    j->ok = j->ok && kiln_tensor_read(j->shared, s, sizeof s) == KILN_OK;
    for (int i = 0; j->ok && i < 16; i++)
        j->ok = s[i] == (float)i - 2;
    kiln_tensor_release(t);
    kiln_tensor_release(u);
    return NULL;
}

START_TEST(test_threads)
{
    if (simulated(dev)) {
        /* as in test-threads.c: Oclgrind's queue crashes when threads flush it at once */
        test_skip("fusion threads: Oclgrind's command queue is not thread-safe");
        return;
    }
    kiln__fusion_set(true);
    int64_t n = 16;
    double v[16];
    for (int i = 0; i < 16; i++)
        v[i] = i;
    kiln_tensor *x = upload(dev, KILN_F32, 1, &n, v), *shared = NULL;
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_SUB, x, 2, &shared));
    long before = fused_count();
    job jobs[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        jobs[i] = (job){x, shared, i, false};
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(jobs[i].ok, "thread %d", i);
    }
    /* 8 chains and the shared tensor once */
    ck_assert_int_eq(fused_count() - before, 9);
    kiln_tensor_release(x);
    kiln_tensor_release(shared);
    kiln__fusion_set(false);
}
END_TEST

/* A chain's kernel is kept by the chain's structure per device; a registry reset frees the
 * devices' programs, so the next evaluation must find the kernel anew (a stale one is freed). */
static void reset_round(int round)
{
    kiln__registry_reset();
    dev = test_device();
    int64_t n = 3;
    double va[3] = {1, 2, 3};
    kiln_tensor *a = upload(dev, KILN_F32, 1, &n, va), *b = NULL, *c = NULL;
    long g0, r0, e0, g1, r1, e1;
    kiln__fusion_counts(&g0, &r0, &e0);
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, a, 3, &b));
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_ADD, b, round, &c));
    double *r = download(c);
    kiln__fusion_counts(&g1, &r1, &e1);
    ck_assert_msg(g1 - g0 == 1 && r1 == r0, "round %d: %ld generated, %ld reused", round, g1 - g0,
                  r1 - r0);
    for (int i = 0; i < 3; i++)
        ck_assert_double_eq(r[i], va[i] * 3 + round);
    free(r);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
}

START_TEST(test_registry_reset_forgets_kernels)
{
    kiln__fusion_set(true);
    reset_round(1);
    reset_round(2);
    kiln__fusion_set(false);
}
END_TEST

/* ---- the disk cache across processes --------------------------------------------------- */

/* In a child (KILN_TEST_FUSION_CHILD set): evaluate one chain, print the cache counters. */
START_TEST(test_cache_child)
{
    const char *outp = getenv("KILN_TEST_FUSION_CHILD");
    if (!outp)
        return;
    kiln__fusion_set(true);
    int64_t n = 8;
    double v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    kiln_tensor *x = upload(dev, KILN_F32, 1, &n, v), *a = NULL, *b = NULL;
    kiln_cache_stats c0, c1;
    ASSERT_OK(kiln_cache_stats_get(&c0));
    ASSERT_OK(kiln_unary(KILN_UNARY_SIN, x, &a));
    ASSERT_OK(kiln_unary(KILN_UNARY_COS, a, &b));
    ASSERT_OK(kiln_tensor_eval(b));
    ASSERT_OK(kiln_cache_stats_get(&c1));
    FILE *f = fopen(outp, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%llu %llu\n", (unsigned long long)(c1.hits - c0.hits),
            (unsigned long long)(c1.misses - c0.misses));
    fclose(f);
    kiln_tensor_release(x);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

static void run_child(const char *cachedir, const char *outp, unsigned long long *hits,
                      unsigned long long *misses)
{
    char e1[600], e2[600];
    snprintf(e1, sizeof e1, "KILN_CACHE_DIR=%s", cachedir);
    snprintf(e2, sizeof e2, "KILN_TEST_FUSION_CHILD=%s", outp);
    int ne = 0;
    while (environ[ne])
        ne++;
    char **env = calloc((size_t)ne + 5, sizeof *env);
    int k = 0;
    for (int i = 0; i < ne; i++)
        if (strncmp(environ[i], "KILN_CACHE", 10) && strncmp(environ[i], "CK_RUN_", 7))
            env[k++] = environ[i];
    env[k++] = "KILN_CACHE=1"; /* on, also in the default test tier (tests/meson.build) */
    env[k++] = e1;
    env[k++] = e2;
    env[k++] = "CK_RUN_CASE=cache child";
    char self[1024];
    ssize_t m = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_int_gt(m, 0);
    self[m] = '\0';
    char *argv[] = {self, NULL};
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, self, NULL, NULL, argv, env), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    free(env);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    FILE *f = fopen(outp, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%llu %llu", hits, misses), 2);
    fclose(f);
}

START_TEST(test_disk_cache_across_processes)
{
    char dir[] = "/tmp/kiln-fusion-cacheXXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char outp[600];
    snprintf(outp, sizeof outp, "%s/out.txt", dir);
    unsigned long long h1, m1, h2, m2;
    run_child(dir, outp, &h1, &m1);
    run_child(dir, outp, &h2, &m2);
    /* the first process builds the generated kernel (and maybe the upload's programs) */
    ck_assert_msg(m1 >= 1, "first process: %llu misses", m1);
    ck_assert_msg(m2 == 0 && h2 >= 1, "second process: %llu hits, %llu misses", h2, m2);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- random chains (issue 21, defect 7) ------------------------------------------------ */

static uint64_t rng_state;
static uint32_t chain_rnd(uint32_t n) /* xorshift64*, uniform enough for choosing ops */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 33) % n;
}

/* An input value: special values often (NaN, infinities, signed zeros, huge, tiny), else small
 * ones. */
static float random_value(bool integer)
{
    static const float special[] = {NAN,   -NAN,    INFINITY, -INFINITY, 0.0f,    -0.0f,
                                    3e38f, -1e-38f, 1e-45f,   88.7f,     -103.0f, 0.5f};
    if (!integer && chain_rnd(4) == 0)
        return special[chain_rnd(sizeof special / sizeof special[0])];
    return integer ? (float)((int)chain_rnd(41) - 20) : ((float)chain_rnd(2001) - 1000.0f) / 97.0f;
}

static const kiln_unary_op float_unary[] = {KILN_UNARY_NEG,     KILN_UNARY_ABS,  KILN_UNARY_EXP,
                                            KILN_UNARY_LOG,     KILN_UNARY_SQRT, KILN_UNARY_RSQRT,
                                            KILN_UNARY_SIN,     KILN_UNARY_COS,  KILN_UNARY_TANH,
                                            KILN_UNARY_SIGMOID, KILN_UNARY_RELU, KILN_UNARY_GELU};
static const kiln_unary_op int_unary[] = {KILN_UNARY_NEG, KILN_UNARY_ABS, KILN_UNARY_RELU};

/* One chain from the generator's current state: up to `depth` ops over the inputs and earlier
 * nodes (unary, unary backward, binary tensor-tensor and with a scalar, compare + where), all
 * of one dtype; the result is the last node. The same state gives the same chain. */
static kiln_status build_random(kiln_tensor *const *in, int nin, kiln_dtype dt, int depth,
                                kiln_tensor **out)
{
    enum { MAXN = 24 };
    kiln_tensor *nodes[MAXN];
    int n = 0;
    for (int i = 0; i < nin; i++)
        nodes[n++] = kiln_tensor_retain(in[i]);
    bool fl = is_float(dt);
    kiln_status s = KILN_OK;
    for (int d = 0; d < depth && s == KILN_OK && n < MAXN; d++) {
        kiln_tensor *a = nodes[chain_rnd(n)], *b = nodes[chain_rnd(n)], *r = NULL;
        switch (chain_rnd(fl ? 5 : 4)) {
        case 0:
            s = kiln_unary(fl ? float_unary[chain_rnd(12)] : int_unary[chain_rnd(3)], a, &r);
            break;
        case 1:
        case 2: {
            kiln_binary_op op = (kiln_binary_op)chain_rnd(KILN_BINARY_MAXIMUM + 1);
            if (op == KILN_BINARY_POW && !fl)
                op = KILN_BINARY_MUL;
            if (chain_rnd(2))
                s = kiln_binary(op, a, b, &r);
            else
                s = kiln_binary_scalar(op, a, (double)random_value(!fl), &r);
            break;
        }
        case 3: {
            kiln_tensor *c = NULL;
            s = kiln_binary((kiln_binary_op)(KILN_BINARY_EQ + chain_rnd(6)), a, b, &c);
            if (s == KILN_OK)
                s = kiln_where(c, a, b, &r);
            kiln_tensor_release(c);
            break;
        }
        default:
            s = kiln_unary_backward(float_unary[chain_rnd(12)], a, b, &r);
            break;
        }
        if (s == KILN_OK)
            nodes[n++] = r;
    }
    *out = s == KILN_OK ? kiln_tensor_retain(nodes[n - 1]) : NULL;
    for (int i = 0; i < n; i++)
        kiln_tensor_release(nodes[i]);
    return s;
}

/* Seeded random chains of elementwise ops with special values, fused against eager: the same
 * bits except a NaN's sign and payload (docs/fusion.md). 16 chains in the default tier, 150 in
 * the full tier (10 and 60 on Oclgrind, which simulates every work-item): every chain is a new
 * kernel, about 1.2 s of a cold compile each (200 took 250 s of a cold default tier; 400 were
 * most of the 678 s the suite took in CI's asan stage, its longest test). */
START_TEST(test_random_chains)
{
    static const kiln_dtype dts[] = {KILN_F32, KILN_F32, KILN_F16, KILN_I32, KILN_F64};
    long chains = simulated(dev) ? test_size(10, 60) : test_size(16, 150);
    int ran = 0;
    for (long c = 0; c < chains; c++) {
        rng_state = 0x9e3779b97f4a7c15ull * (uint64_t)(c + 1);
        kiln_dtype dt = dts[chain_rnd(5)];
        if (!usable(dt))
            dt = KILN_F32;
        int64_t shape[3] = {1 + chain_rnd(7), 1 + chain_rnd(9), 1 + chain_rnd(13)};
        int ndim = 1 + (int)chain_rnd(3);
        int64_t numel = 1;
        for (int d = 0; d < ndim; d++)
            numel *= shape[d];
        kiln_tensor *in[3] = {NULL, NULL, NULL};
        float *host = malloc(sizeof(float) * (size_t)numel);
        for (int i = 0; i < 3; i++) {
            for (int64_t k = 0; k < numel; k++)
                host[k] = random_value(!is_float(dt));
            kiln_tensor *t = NULL;
            ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, ndim, shape, host, &t));
            ASSERT_OK(kiln_cast(t, dt, &in[i]));
            ASSERT_OK(kiln_tensor_eval(in[i]));
            kiln_tensor_release(t);
        }
        free(host);
        int depth = 2 + (int)chain_rnd(11);
        uint64_t state = rng_state;
        kiln_tensor *fr = NULL, *er = NULL;
        kiln__fusion_set(true);
        kiln_status s = build_random(in, 3, dt, depth, &fr);
        kiln__fusion_set(false);
        ck_assert_msg(s == KILN_OK, "chain %ld: %s", c, kiln_last_error());
        ASSERT_OK(kiln_tensor_eval(fr));
        rng_state = state;
        ASSERT_OK(build_random(in, 3, dt, depth, &er));
        char what[64];
        snprintf(what, sizeof what, "random chain %ld (depth %d)", c, depth);
        assert_same(fr, er, what);
        kiln_tensor_release(fr);
        kiln_tensor_release(er);
        for (int i = 0; i < 3; i++)
            kiln_tensor_release(in[i]);
        ran++;
    }
    kiln__fusion_set(true);
    ck_assert_int_eq(ran, chains);
}
END_TEST

Suite *fusion_suite(void)
{
    Suite *s = suite_create("fusion");
    TCase *tc = tcase_create("fusion");
    tcase_add_unchecked_fixture(tc, setup, teardown_devices);
    tcase_set_timeout(tc, 1200);
    if (!getenv("KILN_TEST_FUSION_CHILD")) {
        TCase *ops = tcase_create("every op");
        tcase_add_unchecked_fixture(ops, setup, teardown_devices);
        tcase_set_timeout(ops, 1200);
        tcase_add_test(ops, test_every_op_and_dtype);
        suite_add_tcase(s, ops);
        tcase_add_test(tc, test_chain_depths);
        tcase_add_test(tc, test_random_chains);
        tcase_add_test(tc, test_broadcast_patterns);
        tcase_add_test(tc, test_f64_to_f16_rounds_once);
        tcase_add_test(tc, test_single_op_runs_eager);
        tcase_add_test(tc, test_release_before_eval);
        tcase_add_test(tc, test_write_after_pending_read);
        tcase_add_test(tc, test_write_through_another_wrap);
        tcase_add_test(tc, test_oom_at_eval);
        tcase_add_test(tc, test_disk_cache_across_processes);
        TCase *folds = tcase_create("reduce folds");
        tcase_add_unchecked_fixture(folds, setup, teardown_devices);
        tcase_set_timeout(folds, 1200);
        tcase_add_test(folds, test_reduce_folds);
        tcase_add_test(folds, test_reduce_fold_rules);
        tcase_add_test(folds, test_reduce_fold_fault);
        suite_add_tcase(s, folds);
    }
    suite_add_tcase(s, tc);
    if (!getenv("KILN_TEST_FUSION_CHILD")) {
        /* a case of its own: CI runs it under ThreadSanitizer (CK_RUN_CASE=threads) */
        TCase *threads = tcase_create("threads");
        tcase_add_unchecked_fixture(threads, setup, teardown_devices);
        tcase_set_timeout(threads, 1200);
        tcase_add_test(threads, test_threads);
        suite_add_tcase(s, threads);
        TCase *reset = tcase_create("registry reset"); /* its own devices: no fixture */
        tcase_add_test(reset, test_registry_reset_forgets_kernels);
        suite_add_tcase(s, reset);
        TCase *index32 = tcase_create("index32");
        tcase_add_unchecked_fixture(index32, setup, teardown_devices);
        tcase_set_timeout(index32, 600);
        tcase_add_test(index32, test_index32_whole_range);
        suite_add_tcase(s, index32);
    }
    TCase *child = tcase_create("cache child");
    tcase_add_unchecked_fixture(child, setup, teardown_devices);
    tcase_add_test(child, test_cache_child);
    suite_add_tcase(s, child);
    return s;
}
