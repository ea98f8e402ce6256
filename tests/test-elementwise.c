/* test-elementwise.c - binary ops with broadcasting and scalars, where, unary ops and their
 * derivatives, and casts, on every device and dtype, against plain-C double references. */
#include <check.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "testutil.h"

/* ---- host conversions --------------------------------------------------------------------- */

static bool is_float(kiln_dtype dt)
{
    return dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
}

/* The value v as the dtype stores it (what a host array of that dtype would hold). */
static double to_dtype(kiln_dtype dt, double v)
{
    switch (dt) {
    case KILN_F32:
        return (float)v;
    case KILN_F64:
        return v;
    case KILN_F16:
        return half_to_float(float_to_half((float)v));
    case KILN_BF16:
        return bf16_to_double(double_to_bf16(v));
    case KILN_I32:
        return (int32_t)(uint32_t)(int64_t)v;
    case KILN_I64:
        return (double)(int64_t)v;
    case KILN_U8:
        return (uint8_t)(int64_t)v;
    }
    return 0;
}

/* Deterministic inputs in [lo, hi], representable in dt (integers for integer dtypes). */
static double *values(kiln_dtype dt, int64_t n, double lo, double hi, uint32_t seed)
{
    double *v = malloc((size_t)n * sizeof(double) + 8);
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        double u = lo + (hi - lo) * (double)(seed >> 8) / 16777216.0;
        v[i] = to_dtype(dt, is_float(dt) ? u : floor(u));
    }
    return v;
}

/* Unit in the last place of x in the compute precision of dt (f16 and bf16 compute in f32). */
static double ulp_of(kiln_dtype dt, double x)
{
    int e;
    frexp(x == 0 ? DBL_MIN : x, &e);
    return ldexp(1.0, e - (dt == KILN_F64 ? 53 : 24));
}

/* |got - ref| <= ulps * ulp(ref) + abs_eps * eps * scale (+ half an f16 or bf16 ulp for the
 * final rounding of narrow storage). NaN matches NaN, infinities match exactly. */
static bool close_to(kiln_dtype dt, double got, double ref, double ulps, double abs_eps,
                     double scale)
{
    if (isnan(ref) || isnan(got))
        return isnan(ref) && isnan(got);
    if (isinf(ref) || isinf(got))
        return got == ref;
    double eps = dt == KILN_F64 ? DBL_EPSILON : FLT_EPSILON;
    double tol = ulps * ulp_of(dt, ref) + abs_eps * eps * scale;
    if (dt == KILN_F16)
        tol += ldexp(ulp_of(KILN_F32, ref), 13) * 0.5 + 3e-8;
    if (dt == KILN_BF16)
        tol += ldexp(ulp_of(KILN_F32, ref), 16) * 0.5;
    return fabs(got - ref) <= tol;
}

/* ---- fixtures ----------------------------------------------------------------------------- */

static kiln_device *dev; /* "auto": gpu:0 (Oclgrind) in the -oclgrind configuration */
static int64_t n_small;  /* element counts Oclgrind simulates quickly */
static kiln_dtype dtypes[KILN_DTYPE_COUNT];
static int ndtypes;

static void setup(void)
{
    setup_devices();
    ck_assert_int_eq(kiln_device_get("auto", &dev), KILN_OK);
    bool sim =
        kiln_device_count(KILN_DEVICE_GPU) > 0 && strstr(kiln_device_name(dev), "Oclgrind") != NULL;
    n_small = sim ? 67 : 1031;
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(dev, &info), KILN_OK);
    ndtypes = 0;
    for (int d = 0; d < KILN_DTYPE_COUNT; d++)
        if (d != KILN_F64 || info.fp64)
            dtypes[ndtypes++] = (kiln_dtype)d;
}

/* ---- references ---------------------------------------------------------------------------- */

static const char *const binary_names[] = {
#define BINARY_NAME(NAME, num, name, kind) [num] = #name,
    KILN_BINARY_OP_MAP(BINARY_NAME)
#undef BINARY_NAME
};

/* Integer results wrap like two's complement at the dtype's width. */
static double wrap(kiln_dtype dt, double v)
{
    if (dt == KILN_I32)
        return (int32_t)(uint32_t)(uint64_t)(int64_t)v;
    if (dt == KILN_U8)
        return (uint8_t)(uint64_t)(int64_t)v;
    return v;
}

static double ref_binary(kiln_binary_op op, kiln_dtype dt, double x, double y)
{
    bool fl = is_float(dt);
    switch (op) {
    case KILN_BINARY_ADD:
        return fl ? x + y : wrap(dt, x + y);
    case KILN_BINARY_SUB:
        return fl ? x - y : wrap(dt, x - y);
    case KILN_BINARY_MUL: {
        if (fl)
            return x * y;
        if (dt == KILN_I64) /* exact 64-bit wrap */
            return (double)(int64_t)((uint64_t)(int64_t)x * (uint64_t)(int64_t)y);
        return wrap(dt, x * y);
    }
    case KILN_BINARY_DIV:
        if (fl)
            return x / y;
        if (y == 0)
            return 0;
        if (y == -1)
            return wrap(dt, -x);
        return trunc(x / y);
    case KILN_BINARY_POW:
        return pow(x, y);
    case KILN_BINARY_MINIMUM:
        return isnan(x) || isnan(y) ? NAN : fmin(x, y);
    case KILN_BINARY_MAXIMUM:
        return isnan(x) || isnan(y) ? NAN : fmax(x, y);
    case KILN_BINARY_EQ:
        return x == y;
    case KILN_BINARY_NE:
        return x != y;
    case KILN_BINARY_LT:
        return x < y;
    case KILN_BINARY_LE:
        return x <= y;
    case KILN_BINARY_GT:
        return x > y;
    case KILN_BINARY_GE:
        return x >= y;
    case KILN_BINARY_ATAN2:
        return atan2(x, y);
    }
    return NAN;
}

/* ULP bounds of the OpenCL C spec (full profile): divide 2.5 in f32, pow 16; the rest are
 * correctly rounded (0.5 ulp) or exact. */
static double binary_ulps(kiln_binary_op op, kiln_dtype dt)
{
    if (op == KILN_BINARY_DIV)
        return dt == KILN_F64 ? 0.5 : 3;
    if (op == KILN_BINARY_POW)
        return 16;
    if (op == KILN_BINARY_ATAN2)
        return 6;
    return 0.5;
}

static bool is_cmp(kiln_binary_op op)
{
    return test_binary_is_compare(op);
}

/* Inputs per op: positive bases for pow, no zero divisors except where tested. */
static void binary_inputs(kiln_binary_op op, kiln_dtype dt, int64_t n, double **a, double **b)
{
    double lo = dt == KILN_U8 ? 0 : -40, hi = dt == KILN_U8 ? 250 : 40;
    if (is_float(dt))
        lo = -4, hi = 4;
    *a = values(dt, n, op == KILN_BINARY_POW ? 0.1 : lo, hi, 11u + (uint32_t)op);
    *b = values(dt, n, op == KILN_BINARY_POW ? -3 : lo, op == KILN_BINARY_POW ? 3 : hi, 97u);
    if (op == KILN_BINARY_DIV)
        for (int64_t i = 0; i < n; i++)
            if ((*b)[i] == 0)
                (*b)[i] = 3;
    for (int64_t i = 0; i < n; i += 5) /* ties for the comparisons */
        (*b)[i] = (*a)[i];
}

static void check_binary_result(kiln_binary_op op, kiln_dtype dt, const double *a, const double *b,
                                const double *got, int64_t i, int64_t ia, int64_t ib,
                                const char *where)
{
    double ref = ref_binary(op, dt, a[ia], b[ib]);
    bool ok = is_cmp(op) || !is_float(dt) ? got[i] == ref
                                          : close_to(dt, got[i], ref, binary_ulps(op, dt), 0, 0);
    ck_assert_msg(ok, "%s %s %s [%lld]: %.17g %s %.17g = %.17g, reference %.17g", where,
                  binary_names[op], kiln_dtype_name(dt), (long long)i, a[ia], binary_names[op],
                  b[ib], got[i], ref);
}

/* ---- binary ------------------------------------------------------------------------------ */

/* Every op on every dtype, same shape (the contiguous fast path), on every device. */
START_TEST(test_binary_all_ops)
{
    int64_t n = n_small;
    for (int di = 0; di < ndevs; di++) {
        kiln_device *d = devs[di];
        for (int k = 0; k < ndtypes; k++) {
            kiln_dtype dt = dtypes[k];
            if (dt == KILN_F64 && !has_fp64(d))
                continue;
            for (int op = KILN_BINARY_ADD; op < KILN_BINARY_OP_COUNT; op++) {
                if (test_binary_float_only(op) && !is_float(dt))
                    continue;
                double *a, *b;
                binary_inputs((kiln_binary_op)op, dt, n, &a, &b);
                kiln_tensor *ta = upload(d, dt, 1, &n, a), *tb = upload(d, dt, 1, &n, b), *r = NULL;
                ck_assert_int_eq(kiln_binary((kiln_binary_op)op, ta, tb, &r), KILN_OK);
                ck_assert_int_eq(kiln_tensor_dtype(r), is_cmp(op) ? KILN_U8 : dt);
                ck_assert_ptr_eq(kiln_tensor_device(r), d);
                double *got = download(r);
                for (int64_t i = 0; i < n; i++)
                    check_binary_result((kiln_binary_op)op, dt, a, b, got, i, i, i,
                                        kiln_device_spec(d));
                free(got);
                free(a);
                free(b);
                kiln_tensor_release(ta);
                kiln_tensor_release(tb);
                kiln_tensor_release(r);
            }
        }
    }
}
END_TEST

/* Reference broadcasting: the input offset of output index i, computed independently. */
static int64_t bcast_offset(int ondim, const int64_t *oshape, int64_t i, int ndim,
                            const int64_t *shape)
{
    int64_t off = 0, stride = 1;
    for (int d = ondim - 1; d >= 0; d--) {
        int64_t c = i % oshape[d];
        i /= oshape[d];
        int k = d - (ondim - ndim);
        if (k >= 0) {
            if (shape[k] != 1)
                off += c * stride;
            stride *= shape[k];
        }
    }
    return off;
}

typedef struct bcase {
    int na, nb, nr;
    int64_t a[8], b[8], r[8];
} bcase;

static const bcase bcases[] = {
    {2, 1, 2, {3, 1}, {4}, {3, 4}},
    {3, 2, 3, {2, 3, 4}, {3, 1}, {2, 3, 4}},
    {1, 1, 1, {1}, {5}, {5}},
    {1, 1, 1, {5}, {1}, {5}},
    {2, 3, 3, {3, 4}, {1, 3, 4}, {1, 3, 4}},
    {4, 4, 4, {2, 1, 3, 1}, {1, 4, 1, 5}, {2, 4, 3, 5}},
    {8, 8, 8, {2, 1, 2, 1, 2, 1, 2, 1}, {1, 2, 1, 2, 1, 2, 1, 2}, {2, 2, 2, 2, 2, 2, 2, 2}},
    {3, 1, 3, {4, 1, 3}, {3}, {4, 1, 3}},
    {2, 2, 2, {0, 3}, {1, 3}, {0, 3}},
    {2, 1, 2, {4, 0}, {1}, {4, 0}},
};

START_TEST(test_broadcast)
{
    static const kiln_binary_op ops[] = {KILN_BINARY_ADD, KILN_BINARY_SUB, KILN_BINARY_LT,
                                         KILN_BINARY_MAXIMUM};
    static const kiln_dtype dts[] = {KILN_F32, KILN_I32, KILN_F16, KILN_I64};
    for (size_t c = 0; c < sizeof bcases / sizeof bcases[0]; c++) {
        const bcase *bc = &bcases[c];
        int64_t na = numel_of(bc->na, bc->a), nb = numel_of(bc->nb, bc->b);
        int64_t nr = numel_of(bc->nr, bc->r);
        for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
            kiln_dtype dt = dts[k];
            double *a = values(dt, na, -9, 9, 3), *b = values(dt, nb, -9, 9, 4);
            kiln_tensor *ta = upload(dev, dt, bc->na, bc->a, a);
            kiln_tensor *tb = upload(dev, dt, bc->nb, bc->b, b);
            for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
                kiln_tensor *r = NULL;
                ck_assert_int_eq(kiln_binary(ops[o], ta, tb, &r), KILN_OK);
                ck_assert_int_eq(kiln_tensor_ndim(r), bc->nr);
                for (int d = 0; d < bc->nr; d++)
                    ck_assert_int_eq(kiln_tensor_shape(r)[d], bc->r[d]);
                double *got = download(r);
                for (int64_t i = 0; i < nr; i++)
                    check_binary_result(ops[o], dt, a, b, got, i,
                                        bcast_offset(bc->nr, bc->r, i, bc->na, bc->a),
                                        bcast_offset(bc->nr, bc->r, i, bc->nb, bc->b), "broadcast");
                free(got);
                kiln_tensor_release(r);
            }
            /* _out into a preallocated result, and the reverse operand order */
            kiln_tensor *o = NULL, *r2 = NULL;
            ck_assert_int_eq(kiln_tensor_empty(dev, dt, bc->nr, bc->r, &o), KILN_OK);
            ck_assert_int_eq(kiln_binary_out(KILN_BINARY_MUL, ta, tb, o), KILN_OK);
            ck_assert_int_eq(kiln_sub(tb, ta, &r2), KILN_OK);
            double *got = download(o), *got2 = download(r2);
            for (int64_t i = 0; i < nr; i++) {
                int64_t ia = bcast_offset(bc->nr, bc->r, i, bc->na, bc->a);
                int64_t ib = bcast_offset(bc->nr, bc->r, i, bc->nb, bc->b);
                check_binary_result(KILN_BINARY_MUL, dt, a, b, got, i, ia, ib, "binary_out");
                check_binary_result(KILN_BINARY_SUB, dt, b, a, got2, i, ib, ia, "reversed");
            }
            free(got);
            free(got2);
            kiln_tensor_release(o);
            kiln_tensor_release(r2);
            kiln_tensor_release(ta);
            kiln_tensor_release(tb);
            free(a);
            free(b);
        }
    }
}
END_TEST

/* tensor op scalar: every op on f32 and i32, a few on the other dtypes (each op and dtype is a
 * kernel to compile; the arithmetic is the same code as the tensor-tensor kernels). The
 * scalar converts to the tensor's dtype. */
START_TEST(test_scalar)
{
    int64_t n = n_small;
    for (int k = 0; k < ndtypes; k++) {
        kiln_dtype dt = dtypes[k];
        double *a = values(dt, n, dt == KILN_U8 ? 0 : -20, 20, 5);
        kiln_tensor *ta = upload(dev, dt, 1, &n, a);
        for (int op = KILN_BINARY_ADD; op < KILN_BINARY_OP_COUNT; op++) {
            if (test_binary_float_only(op) && !is_float(dt))
                continue;
            if (dt != KILN_F32 && dt != KILN_I32 && op != KILN_BINARY_MUL && op != KILN_BINARY_GE &&
                op != KILN_BINARY_SUB)
                continue;
            double s = op == KILN_BINARY_POW ? 2.0 : is_float(dt) ? 1.25 : 3.0;
            double *b = malloc((size_t)n * sizeof(double));
            for (int64_t i = 0; i < n; i++)
                b[i] = to_dtype(dt, s);
            kiln_tensor *r = NULL;
            ck_assert_int_eq(kiln_binary_scalar((kiln_binary_op)op, ta, s, &r), KILN_OK);
            double *got = download(r);
            for (int64_t i = 0; i < n; i++)
                check_binary_result((kiln_binary_op)op, dt, a, b, got, i, i, i, "scalar");
            free(got);
            free(b);
            kiln_tensor_release(r);
        }
        kiln_tensor_release(ta);
        free(a);
    }
}
END_TEST

/* Integer division truncates toward zero; x / 0 gives 0; MIN / -1 and overflow wrap. */
START_TEST(test_integer_semantics)
{
    int32_t a[6] = {7, -7, 7, 5, INT32_MIN, INT32_MAX}, b[6] = {2, 2, -2, 0, -1, 1};
    int32_t q_want[6] = {3, -3, -3, 0, INT32_MIN, INT32_MAX};
    int32_t s_want[6] = {9, -5, 5, 5, INT32_MAX, INT32_MIN};
    int64_t n = 6;
    kiln_tensor *ta = NULL, *tb = NULL, *q = NULL, *s = NULL;
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_I32, 1, &n, a, &ta), KILN_OK);
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_I32, 1, &n, b, &tb), KILN_OK);
    ck_assert_int_eq(kiln_div(ta, tb, &q), KILN_OK);
    ck_assert_int_eq(kiln_add(ta, tb, &s), KILN_OK);
    int32_t got[6];
    ck_assert_int_eq(kiln_tensor_read(q, got, sizeof got), KILN_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(got[i], q_want[i]);
    ck_assert_int_eq(kiln_tensor_read(s, got, sizeof got), KILN_OK);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(got[i], s_want[i]);
    kiln_tensor_release(ta);
    kiln_tensor_release(tb);
    kiln_tensor_release(q);
    kiln_tensor_release(s);
    uint8_t ua[3] = {200, 255, 10}, ub[3] = {255, 255, 0}, uq[3];
    n = 3;
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_U8, 1, &n, ua, &ta), KILN_OK);
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_U8, 1, &n, ub, &tb), KILN_OK);
    ck_assert_int_eq(kiln_div(ta, tb, &q), KILN_OK);
    ck_assert_int_eq(kiln_tensor_read(q, uq, sizeof uq), KILN_OK);
    ck_assert_int_eq(uq[0], 0);
    ck_assert_int_eq(uq[1], 1);
    ck_assert_int_eq(uq[2], 0);
    kiln_tensor_release(ta);
    kiln_tensor_release(tb);
    kiln_tensor_release(q);
}
END_TEST

/* ---- where ------------------------------------------------------------------------------- */

START_TEST(test_where)
{
    const bcase wc[] = {{1, 1, 1, {7}, {7}, {7}}, {2, 1, 2, {3, 1}, {4}, {3, 4}}};
    int64_t cshape[2][2] = {{7}, {3, 4}};
    int cnd[2] = {1, 2};
    for (int c = 0; c < 2; c++) {
        for (int k = 0; k < ndtypes; k++) {
            kiln_dtype dt = dtypes[k];
            const bcase *w = &wc[c];
            int64_t nc = numel_of(cnd[c], cshape[c]), na = numel_of(w->na, w->a);
            int64_t nb = numel_of(w->nb, w->b), nr = numel_of(w->nr, w->r);
            double *cv = values(KILN_U8, nc, 0, 2, 8), *a = values(dt, na, 0, 99, 1);
            double *b = values(dt, nb, 0, 99, 2);
            kiln_tensor *tc = upload(dev, KILN_U8, cnd[c], cshape[c], cv);
            kiln_tensor *ta = upload(dev, dt, w->na, w->a, a);
            kiln_tensor *tb = upload(dev, dt, w->nb, w->b, b);
            kiln_tensor *r = NULL;
            ck_assert_int_eq(kiln_where(tc, ta, tb, &r), KILN_OK);
            ck_assert_int_eq(kiln_tensor_dtype(r), dt);
            double *got = download(r);
            for (int64_t i = 0; i < nr; i++) {
                int64_t ic = bcast_offset(w->nr, w->r, i, cnd[c], cshape[c]);
                int64_t ia = bcast_offset(w->nr, w->r, i, w->na, w->a);
                int64_t ib = bcast_offset(w->nr, w->r, i, w->nb, w->b);
                ck_assert_msg(got[i] == (cv[ic] ? a[ia] : b[ib]), "where %s [%lld]",
                              kiln_dtype_name(dt), (long long)i);
            }
            free(got);
            free(cv);
            free(a);
            free(b);
            kiln_tensor_release(tc);
            kiln_tensor_release(ta);
            kiln_tensor_release(tb);
            kiln_tensor_release(r);
        }
    }
}
END_TEST

/* ---- unary ------------------------------------------------------------------------------- */

static const char *const unary_names[] = {
#define UNARY_NAME(NAME, num, name, kind) [num] = #name,
    KILN_UNARY_OP_MAP(UNARY_NAME)
#undef UNARY_NAME
};

static double sigmoid(double x)
{
    return 1 / (1 + exp(-x));
}

static const double GK = 0.7978845608028654, GC = 0.044715;

static double ref_unary(kiln_unary_op op, double x)
{
    switch (op) {
    case KILN_UNARY_NEG:
        return -x;
    case KILN_UNARY_ABS:
        return fabs(x);
    case KILN_UNARY_EXP:
        return exp(x);
    case KILN_UNARY_LOG:
        return log(x);
    case KILN_UNARY_SQRT:
        return sqrt(x);
    case KILN_UNARY_RSQRT:
        return 1 / sqrt(x);
    case KILN_UNARY_SIN:
        return sin(x);
    case KILN_UNARY_COS:
        return cos(x);
    case KILN_UNARY_TANH:
        return tanh(x);
    case KILN_UNARY_SIGMOID:
        return sigmoid(x);
    case KILN_UNARY_RELU:
        return x < 0 ? 0 : x;
    case KILN_UNARY_GELU:
        return 0.5 * x * (1 + tanh(GK * (x + GC * x * x * x)));
    case KILN_UNARY_SOFTPLUS: /* torch.nn.functional.softplus: beta 1, threshold 20 */
        return x > 20 ? x : log1p(exp(x));
    }
    return NAN;
}

static double ref_derivative(kiln_unary_op op, double x)
{
    double t;
    switch (op) {
    case KILN_UNARY_NEG:
        return -1;
    case KILN_UNARY_ABS:
        return x > 0 ? 1 : x < 0 ? -1 : 0;
    case KILN_UNARY_EXP:
        return exp(x);
    case KILN_UNARY_LOG:
        return 1 / x;
    case KILN_UNARY_SQRT:
        return 0.5 / sqrt(x);
    case KILN_UNARY_RSQRT:
        return -0.5 * pow(x, -1.5);
    case KILN_UNARY_SIN:
        return cos(x);
    case KILN_UNARY_COS:
        return -sin(x);
    case KILN_UNARY_TANH:
        return 1 - tanh(x) * tanh(x);
    case KILN_UNARY_SIGMOID:
        return sigmoid(x) * (1 - sigmoid(x));
    case KILN_UNARY_RELU:
        return x > 0 ? 1 : 0;
    case KILN_UNARY_GELU:
        t = tanh(GK * (x + GC * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GK * (1 + 3 * GC * x * x);
    case KILN_UNARY_SOFTPLUS:
        return x > 20 ? 1 : exp(x) / (exp(x) + 1);
    }
    return NAN;
}

/* Spec ULP bounds for f32 (exp 3, log 3, sqrt 3, rsqrt 2, sin/cos 4, tanh 5), composed ops
 * (sigmoid, gelu and derivatives) with an absolute part for their cancellations:
 * |got - ref| <= ulps ulp(ref) + abs_eps * eps * (1 + |x|)^2 (1 + |g|). */
static const double unary_ulps[KILN_UNARY_OP_COUNT] = {0.5, 0.5, 3, 3, 3, 2, 4, 4, 5, 8, 0.5, 8, 8};
static const double unary_abs[KILN_UNARY_OP_COUNT] = {0, 0, 0, 0, 0, 0, 2, 2, 4, 4, 0, 16, 4};

static double *unary_inputs(kiln_unary_op op, kiln_dtype dt, int64_t n)
{
    bool positive = op == KILN_UNARY_LOG || op == KILN_UNARY_SQRT || op == KILN_UNARY_RSQRT;
    if (!is_float(dt))
        return values(dt, n, dt == KILN_U8 ? 0 : -100, 100, 21);
    double *v = values(dt, n, positive ? 0.01 : -6, positive ? 20 : 6, 21u + (uint32_t)op);
    if (!positive && n > 3)
        v[0] = 0, v[1] = -0.0, v[2] = to_dtype(dt, op == KILN_UNARY_EXP ? 11 : -30);
    return v;
}

START_TEST(test_unary_and_backward)
{
    int64_t n = n_small;
    for (int di = 0; di < ndevs; di++) {
        kiln_device *d = devs[di];
        for (int k = 0; k < ndtypes; k++) {
            kiln_dtype dt = dtypes[k];
            if (dt == KILN_F64 && !has_fp64(d))
                continue;
            for (int op = KILN_UNARY_NEG; op < KILN_UNARY_OP_COUNT; op++) {
                bool int_ok = op == KILN_UNARY_NEG || op == KILN_UNARY_ABS || op == KILN_UNARY_RELU;
                if (!is_float(dt) && !int_ok)
                    continue;
                double *x = unary_inputs((kiln_unary_op)op, dt, n);
                kiln_tensor *tx = upload(d, dt, 1, &n, x), *r = NULL;
                ck_assert_int_eq(kiln_unary((kiln_unary_op)op, tx, &r), KILN_OK);
                double *got = download(r);
                for (int64_t i = 0; i < n; i++) {
                    double ref = ref_unary((kiln_unary_op)op, x[i]);
                    bool ok = is_float(dt) ? close_to(dt, got[i], ref, unary_ulps[op],
                                                      unary_abs[op], pow(1 + fabs(x[i]), 2))
                                           : got[i] == wrap(dt, ref);
                    ck_assert_msg(ok, "%s %s %s(%.17g) = %.17g, reference %.17g",
                                  kiln_device_spec(d), kiln_dtype_name(dt), unary_names[op], x[i],
                                  got[i], ref);
                }
                free(got);
                kiln_tensor_release(r);
                if (is_float(dt)) {
                    double *g = values(dt, n, -2, 2, 77);
                    kiln_tensor *tg = upload(d, dt, 1, &n, g);
                    ck_assert_int_eq(kiln_unary_backward((kiln_unary_op)op, tx, tg, &r), KILN_OK);
                    got = download(r);
                    for (int64_t i = 0; i < n; i++) {
                        double ref = g[i] * ref_derivative((kiln_unary_op)op, x[i]);
                        double scale = pow(1 + fabs(x[i]), 2) * (1 + fabs(g[i]));
                        ck_assert_msg(
                            close_to(dt, got[i], ref, unary_ulps[op] + 3, unary_abs[op] + 2, scale),
                            "%s %s d%s(%.17g) * %.17g = %.17g, reference %.17g",
                            kiln_device_spec(d), kiln_dtype_name(dt), unary_names[op], x[i], g[i],
                            got[i], ref);
                    }
                    free(got);
                    free(g);
                    kiln_tensor_release(tg);
                    kiln_tensor_release(r);
                }
                free(x);
                kiln_tensor_release(tx);
            }
        }
    }
}
END_TEST

/* Stable sigmoid: no NaN or inf at large |x|; relu keeps NaN; unary_out in place. */
START_TEST(test_unary_edges)
{
    float x[6] = {-100.0f, -30.0f, 0.0f, 30.0f, 100.0f, NAN}, got[6];
    int64_t n = 6;
    kiln_tensor *tx = NULL, *r = NULL;
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F32, 1, &n, x, &tx), KILN_OK);
    ck_assert_int_eq(kiln_unary(KILN_UNARY_SIGMOID, tx, &r), KILN_OK);
    ck_assert_int_eq(kiln_tensor_read(r, got, sizeof got), KILN_OK);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(fabs(got[i] - sigmoid(x[i])) <= 1e-7 + 4 * FLT_EPSILON * sigmoid(x[i]),
                      "sigmoid(%g) = %g", x[i], got[i]);
    ck_assert_float_eq(got[4], 1.0f);
    ck_assert(got[0] >= 0 && got[0] < 1e-30);
    kiln_tensor_release(r);
    ck_assert_int_eq(kiln_unary_out(KILN_UNARY_RELU, tx, tx), KILN_OK); /* in place */
    ck_assert_int_eq(kiln_tensor_read(tx, got, sizeof got), KILN_OK);
    ck_assert_float_eq(got[0], 0.0f);
    ck_assert_float_eq(got[3], 30.0f);
    ck_assert(isnan(got[5]));
    kiln_tensor_release(tx);
}
END_TEST

/* ---- cast -------------------------------------------------------------------------------- */

/* float -> integer: truncate toward zero, saturate, NaN -> 0; integer -> integer wraps;
 * anything -> float rounds to nearest (f16 to nearest even). */
static double ref_cast(kiln_dtype from, kiln_dtype to, double v)
{
    if (is_float(to))
        return to_dtype(to, v);
    if (is_float(from)) {
        if (isnan(v))
            return 0;
        double t = trunc(v);
        double lo = to == KILN_I32 ? INT32_MIN : to == KILN_I64 ? -9223372036854775808.0 : 0;
        double hi = to == KILN_I32 ? INT32_MAX : to == KILN_I64 ? 9223372036854775807.0 : 255;
        return t < lo ? lo : t > hi ? hi : t;
    }
    return to_dtype(to, v);
}

START_TEST(test_cast_all_pairs)
{
    static const double fvals[] = {0,    1.5,   -1.5,  2.75, -7.9,  100.4, 300.7, -300.7,
                                   1e10, -1e10, 65504, 0.1,  -0.49, 255.9, NAN,   1e20};
    static const double ivals[] = {0, 1, -1, 127, 128, 255, 256, -129, 70000, 2147483647, -5};
    for (int i = 0; i < ndtypes; i++) {
        kiln_dtype from = dtypes[i];
        const double *src = is_float(from) ? fvals : ivals;
        int64_t n = is_float(from) ? 16 : 11;
        double v[16];
        for (int k = 0; k < n; k++)
            v[k] = to_dtype(from, src[k]);
        if (from == KILN_F16)
            v[8] = v[9] = v[15] = 1000; /* f16 has no 1e10 */
        kiln_tensor *tx = upload(dev, from, 1, &n, v);
        for (int j = 0; j < ndtypes; j++) {
            kiln_dtype to = dtypes[j];
            kiln_tensor *r = NULL;
            ck_assert_int_eq(kiln_cast(tx, to, &r), KILN_OK);
            ck_assert_int_eq(kiln_tensor_dtype(r), to);
            double *got = download(r);
            for (int k = 0; k < n; k++) {
                double ref = ref_cast(from, to, v[k]);
                ck_assert_msg(got[k] == ref || (isnan(got[k]) && isnan(ref)),
                              "cast %s %.17g -> %s: %.17g, reference %.17g", kiln_dtype_name(from),
                              v[k], kiln_dtype_name(to), got[k], ref);
            }
            free(got);
            kiln_tensor_release(r);
        }
        kiln_tensor_release(tx);
    }
}
END_TEST

/* f32 -> f16 and f16 -> f32 on the device (the kiln_cast8_ kernels on CPU devices, 8 per
 * work-item, and a tail), then fused after an add of 0 (a generated kernel, rounding element by
 * element: the CPU devices' integer conversion) against testutil's binary-search rounding: the f32
 * values around every midpoint between neighbouring f16 values (ties to even; every 97th pair under
 * Oclgrind), the overflow edge, subnormals, infinities and NaN; and every f16 value (every 97th)
 * back to f32 exactly. An odd count, so the kernels' tail runs. */
START_TEST(test_cast_f16_rounding)
{
    int step = n_small < 1000 ? 97 : 1;
    int64_t cap = 2 * 5 * (0x7c00 / step + 1) + 16, n = 0;
    float *v = malloc((size_t)cap * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (uint32_t h = 0; h < 0x7c00; h += (uint32_t)step) {
        double mid = ((double)half_to_float((uint16_t)h) + half_to_float((uint16_t)(h + 1))) / 2;
        uint32_t bits;
        float m = (float)mid;
        memcpy(&bits, &m, sizeof bits);
        for (int d = -2; d <= 2; d++) {
            uint32_t b = bits + (uint32_t)d;
            float f;
            memcpy(&f, &b, sizeof f);
            v[n++] = f;
            v[n++] = -f;
        }
    }
    static const float edges[] = {65504.0f, 65519.99f,  65520.0f, 1e30f, 0x1p-24f,
                                  0x1p-25f, 0x1.8p-25f, 0x1p-26f, 0.0f,  -0.0f,
                                  INFINITY, -INFINITY,  NAN};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        v[n++] = edges[i];
    if (n % 2 == 0)
        v[n++] = 1.0f;
    kiln_tensor *x = NULL, *h = NULL, *back = NULL, *x0 = NULL;
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F32, 1, &n, v, &x), KILN_OK);
    uint16_t *got = malloc((size_t)n * sizeof *got);
    ck_assert_ptr_nonnull(got);
    for (int fused = 0; fused < 2; fused++) {
        if (fused)
            ck_assert_int_eq(kiln_binary_scalar(KILN_BINARY_ADD, x, 0.0, &x0), KILN_OK);
        ck_assert_int_eq(kiln_cast(fused ? x0 : x, KILN_F16, &h), KILN_OK);
        ck_assert_int_eq(kiln_tensor_read(h, got, (size_t)n * sizeof *got), KILN_OK);
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = float_to_half(fused ? v[i] + 0.0f : v[i]); /* -0 + 0 is +0 */
            ck_assert_msg(got[i] == want || (isnan(v[i]) && (got[i] & 0x7fff) > 0x7c00),
                          "f32 %a -> f16 0x%04x, expected 0x%04x%s", (double)v[i], got[i], want,
                          fused ? " (fused after + 0)" : "");
        }
        kiln_tensor_release(h);
        h = NULL;
    }
    kiln_tensor_release(x0);
    /* every f16 value (every step-th) to f32 */
    int64_t nh = 0;
    for (uint32_t b = 0; b <= 0xffff; b += (uint32_t)step)
        got[nh++] = (uint16_t)b;
    nh -= nh % 2 == 0; /* odd */
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F16, 1, &nh, got, &h), KILN_OK);
    ck_assert_int_eq(kiln_cast(h, KILN_F32, &back), KILN_OK);
    float *f = malloc((size_t)nh * sizeof *f);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(kiln_tensor_read(back, f, (size_t)nh * sizeof *f), KILN_OK);
    for (int64_t i = 0; i < nh; i++) {
        float want = half_to_float(got[i]);
        ck_assert_msg(memcmp(&f[i], &want, sizeof want) == 0 || (isnan(want) && isnan(f[i])),
                      "f16 0x%04x -> f32 %a, expected %a", got[i], (double)f[i], (double)want);
    }
    free(f);
    free(got);
    free(v);
    kiln_tensor_release(x);
    kiln_tensor_release(h);
    kiln_tensor_release(back);
}
END_TEST

/* f32 -> bf16 and bf16 -> f32 on the device, eager and fused after an add of 0, against
 * testutil's binary-search rounding: the f32 values around every midpoint between neighbouring
 * bf16 values (ties to even; every 97th under Oclgrind), the overflow edge, subnormals,
 * infinities and NaN; f64 -> bf16 in one rounding (values just off a midpoint, which a trip
 * through the nearest f32 would make a tie) where the device has fp64; every bf16 value (every
 * 97th) back to f32 exactly. */
START_TEST(test_cast_bf16_rounding)
{
    int step = n_small < 1000 ? 97 : 1;
    int64_t cap = 2 * 5 * (0x7f80 / step + 1) + 16, n = 0;
    float *v = malloc((size_t)cap * sizeof *v);
    ck_assert_ptr_nonnull(v);
    for (uint32_t h = 0; h < 0x7f80; h += (uint32_t)step) {
        float lo = (float)bf16_to_double((uint16_t)h);
        uint32_t bits;
        memcpy(&bits, &lo, sizeof bits);
        bits += 0x8000u; /* the midpoint to the next bf16, exact in f32 */
        for (int d = -2; d <= 2; d++) {
            uint32_t b = bits + (uint32_t)d;
            float f;
            memcpy(&f, &b, sizeof f);
            v[n++] = f;
            v[n++] = -f;
        }
    }
    static const float edges[] = {FLT_MAX,   0x1.fefffep127f, 0x1.ff0000p127f, 0x1p-133f,
                                  0x1p-134f, 0x1.8p-134f,     0x1p-149f,       0.0f,
                                  -0.0f,     INFINITY,        -INFINITY,       NAN};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        v[n++] = edges[i];
    if (n % 2 == 0)
        v[n++] = 1.0f;
    kiln_tensor *x = NULL, *h = NULL, *back = NULL, *x0 = NULL;
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F32, 1, &n, v, &x), KILN_OK);
    uint16_t *got = malloc((size_t)n * sizeof *got);
    ck_assert_ptr_nonnull(got);
    for (int fused = 0; fused < 2; fused++) {
        if (fused)
            ck_assert_int_eq(kiln_binary_scalar(KILN_BINARY_ADD, x, 0.0, &x0), KILN_OK);
        ck_assert_int_eq(kiln_cast(fused ? x0 : x, KILN_BF16, &h), KILN_OK);
        ck_assert_int_eq(kiln_tensor_read(h, got, (size_t)n * sizeof *got), KILN_OK);
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = double_to_bf16(fused ? v[i] + 0.0f : v[i]); /* -0 + 0 is +0 */
            ck_assert_msg(got[i] == want || (isnan(v[i]) && (got[i] & 0x7fff) > 0x7f80),
                          "f32 %a -> bf16 0x%04x, expected 0x%04x%s", (double)v[i], got[i], want,
                          fused ? " (fused after + 0)" : "");
        }
        kiln_tensor_release(h);
        h = NULL;
    }
    kiln_tensor_release(x0);
    x0 = NULL;
    if (has_fp64(dev)) {
        int64_t nd = 0;
        double *dv = malloc((size_t)(0x7f80 / step + 1) * 3 * sizeof *dv);
        ck_assert_ptr_nonnull(dv);
        for (uint32_t b = 0; b < 0x7f7f; b += (uint32_t)step) {
            double lo = bf16_to_double((uint16_t)b), hi = bf16_to_double((uint16_t)(b + 1));
            double mid = (lo + hi) / 2, off = (hi - lo) * 0x1p-30;
            dv[nd++] = mid + off;
            dv[nd++] = -(mid - off);
            dv[nd++] = mid;
        }
        kiln_tensor *xd = NULL;
        ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F64, 1, &nd, dv, &xd), KILN_OK);
        for (int fused = 0; fused < 2; fused++) {
            if (fused)
                ck_assert_int_eq(kiln_binary_scalar(KILN_BINARY_MUL, xd, 1.0, &x0), KILN_OK);
            ck_assert_int_eq(kiln_cast(fused ? x0 : xd, KILN_BF16, &h), KILN_OK);
            ck_assert_int_eq(kiln_tensor_read(h, got, (size_t)nd * sizeof *got), KILN_OK);
            for (int64_t i = 0; i < nd; i++)
                ck_assert_msg(got[i] == double_to_bf16(dv[i]),
                              "f64 %a -> bf16 0x%04x, expected 0x%04x%s", dv[i], got[i],
                              double_to_bf16(dv[i]), fused ? " (fused after * 1)" : "");
            kiln_tensor_release(h);
            kiln_tensor_release(x0);
            h = x0 = NULL;
        }
        kiln_tensor_release(xd);
        free(dv);
    }
    /* every bf16 value (every step-th) to f32 */
    int64_t nh = 0;
    for (uint32_t b = 0; b <= 0xffff; b += (uint32_t)step)
        got[nh++] = (uint16_t)b;
    nh -= nh % 2 == 0; /* odd */
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_BF16, 1, &nh, got, &h), KILN_OK);
    ck_assert_int_eq(kiln_cast(h, KILN_F32, &back), KILN_OK);
    float *f = malloc((size_t)nh * sizeof *f);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(kiln_tensor_read(back, f, (size_t)nh * sizeof *f), KILN_OK);
    for (int64_t i = 0; i < nh; i++) {
        double want = bf16_to_double(got[i]);
        ck_assert_msg((double)f[i] == want || (isnan(want) && isnan(f[i])),
                      "bf16 0x%04x -> f32 %a, expected %a", got[i], (double)f[i], want);
    }
    free(f);
    free(got);
    free(v);
    kiln_tensor_release(x);
    kiln_tensor_release(h);
    kiln_tensor_release(back);
}
END_TEST

/* ---- _out and _i64 forms ------------------------------------------------------------------ */

typedef kiln_status (*binary_out_fn)(const kiln_tensor *, const kiln_tensor *, kiln_tensor *);
static const binary_out_fn binary_outs[4] = {kiln_add_out, kiln_sub_out, kiln_mul_out,
                                             kiln_div_out};

/* add/sub/mul/div_out and binary_scalar_out into an existing tensor, every dtype, against the
 * C reference; a [3, 4] + [4] broadcast and an in-place add. */
START_TEST(test_binary_out_forms)
{
    int64_t n = n_small;
    for (int k = 0; k < ndtypes; k++) {
        kiln_dtype dt = dtypes[k];
        kiln_tensor *o = NULL;
        ASSERT_OK(kiln_tensor_empty(dev, dt, 1, &n, &o));
        for (int op = KILN_BINARY_ADD; op <= KILN_BINARY_DIV; op++) {
            double *a, *b;
            binary_inputs((kiln_binary_op)op, dt, n, &a, &b);
            kiln_tensor *ta = upload(dev, dt, 1, &n, a), *tb = upload(dev, dt, 1, &n, b);
            ASSERT_OK(binary_outs[op](ta, tb, o));
            double *got = download(o);
            for (int64_t i = 0; i < n; i++)
                check_binary_result((kiln_binary_op)op, dt, a, b, got, i, i, i, "_out");
            free(got);
            /* the scalar form: a op b[0] */
            ASSERT_OK(kiln_binary_scalar_out((kiln_binary_op)op, ta, b[0], o));
            got = download(o);
            for (int64_t i = 0; i < n; i++)
                check_binary_result((kiln_binary_op)op, dt, a, b, got, i, i, 0, "scalar_out");
            free(got);
            free(a);
            free(b);
            kiln_tensor_release(ta);
            kiln_tensor_release(tb);
        }
        kiln_tensor_release(o);
        /* broadcast [3, 4] op [4], then in place: a = a + b */
        int64_t s34[2] = {3, 4}, s4 = 4;
        double *a = values(dt, 12, 0, 50, 3), *b = values(dt, 4, 0, 50, 4);
        kiln_tensor *ta = upload(dev, dt, 2, s34, a), *tb = upload(dev, dt, 1, &s4, b);
        ASSERT_OK(kiln_tensor_empty(dev, dt, 2, s34, &o));
        ASSERT_OK(kiln_mul_out(ta, tb, o));
        double *got = download(o);
        for (int64_t i = 0; i < 12; i++)
            check_binary_result(KILN_BINARY_MUL, dt, a, b, got, i, i, i % 4, "mul_out bcast");
        free(got);
        ASSERT_OK(kiln_add_out(ta, tb, ta));
        got = download(ta);
        for (int64_t i = 0; i < 12; i++)
            check_binary_result(KILN_BINARY_ADD, dt, a, b, got, i, i, i % 4, "add_out in place");
        free(got);
        free(a);
        free(b);
        kiln_tensor_release(ta);
        kiln_tensor_release(tb);
        kiln_tensor_release(o);
    }
}
END_TEST

/* The _i64 scalar is passed exactly: values past 2^53 on i64 compare with C's int64_t
 * arithmetic (wrapping), floats get it rounded to nearest, i32 the exact ends of its range. */
START_TEST(test_binary_scalar_i64)
{
    const int64_t p53 = (1LL << 53) + 1;
    int64_t n = 6;
    int64_t a[6] = {INT64_MAX - 1, p53, -p53, 0, 5, INT64_MIN};
    kiln_tensor *ta = NULL, *r = NULL, *o = NULL, *m = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I64, 1, &n, a, &ta));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_I64, 1, &n, &o));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_U8, 1, &n, &m));
    const kiln_binary_op ops[] = {KILN_BINARY_ADD, KILN_BINARY_SUB, KILN_BINARY_MUL,
                                  KILN_BINARY_MAXIMUM};
    const int64_t scalars[] = {1, p53, INT64_MAX - 1, -p53, 3};
    for (size_t si = 0; si < sizeof scalars / sizeof scalars[0]; si++) {
        int64_t sc = scalars[si];
        for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
            ASSERT_OK(kiln_binary_scalar_i64(ops[oi], ta, sc, &r));
            ASSERT_OK(kiln_binary_scalar_i64_out(ops[oi], ta, sc, o));
            int64_t got[6], got_out[6];
            ASSERT_OK(kiln_tensor_read(r, got, sizeof got));
            ASSERT_OK(kiln_tensor_read(o, got_out, sizeof got_out));
            for (int i = 0; i < 6; i++) {
                uint64_t x = (uint64_t)a[i], y = (uint64_t)sc;
                int64_t want = ops[oi] == KILN_BINARY_ADD   ? (int64_t)(x + y)
                               : ops[oi] == KILN_BINARY_SUB ? (int64_t)(x - y)
                               : ops[oi] == KILN_BINARY_MUL ? (int64_t)(x * y)
                                                            : (a[i] > sc ? a[i] : sc);
                ck_assert_msg(got[i] == want && got_out[i] == want,
                              "%s %lld, %lld: %lld / %lld, want %lld", binary_names[ops[oi]],
                              (long long)a[i], (long long)sc, (long long)got[i],
                              (long long)got_out[i], (long long)want);
            }
            kiln_tensor_release(r);
        }
        /* a comparison tells 2^53 + 1 from 2^53 */
        ASSERT_OK(kiln_binary_scalar_i64_out(KILN_BINARY_EQ, ta, sc, m));
        uint8_t eq[6];
        ASSERT_OK(kiln_tensor_read(m, eq, sizeof eq));
        for (int i = 0; i < 6; i++)
            ck_assert_uint_eq(eq[i], a[i] == sc);
    }
    kiln_tensor_release(ta);
    kiln_tensor_release(o);
    kiln_tensor_release(m);
    /* i32: the ends of the range are exact */
    int32_t ai[3] = {0, -1, 1};
    n = 3;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 1, &n, ai, &ta));
    ASSERT_OK(kiln_binary_scalar_i64(KILN_BINARY_ADD, ta, INT32_MIN, &r));
    int32_t gi[3];
    ASSERT_OK(kiln_tensor_read(r, gi, sizeof gi));
    ck_assert_int_eq(gi[0], INT32_MIN);
    ck_assert_int_eq(gi[1], INT32_MAX); /* wraps */
    ck_assert_int_eq(gi[2], INT32_MIN + 1);
    kiln_tensor_release(r);
    kiln_tensor_release(ta);
    /* floats: rounded to nearest (2^24 + 1 -> 2^24 in f32, 2^53 + 1 -> 2^53 in f64) */
    float af[3] = {0, 1, -1};
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, &n, af, &ta));
    ASSERT_OK(kiln_binary_scalar_i64(KILN_BINARY_ADD, ta, (1LL << 24) + 1, &r));
    float gf[3];
    ASSERT_OK(kiln_tensor_read(r, gf, sizeof gf));
    ck_assert(gf[0] == 16777216.0f);
    kiln_tensor_release(r);
    kiln_tensor_release(ta);
    if (has_fp64(dev)) {
        double ad[3] = {0, 1, -1}, gd[3];
        ASSERT_OK(kiln_tensor_from_host(dev, KILN_F64, 1, &n, ad, &ta));
        ASSERT_OK(kiln_binary_scalar_i64(KILN_BINARY_ADD, ta, p53, &r));
        ASSERT_OK(kiln_tensor_read(r, gd, sizeof gd));
        ck_assert(gd[0] == 9007199254740992.0);
        kiln_tensor_release(r);
        kiln_tensor_release(ta);
    }
}
END_TEST

/* where_out, unary_backward_out and cast_out against C loops, and in place. */
START_TEST(test_other_out_forms)
{
    for (int k = 0; k < ndtypes; k++) {
        kiln_dtype dt = dtypes[k];
        int64_t s34[2] = {3, 4}, s4 = 4;
        double *cv = values(KILN_U8, 4, 0, 2, 8), *a = values(dt, 12, 0, 99, 1);
        double *b = values(dt, 12, 0, 99, 2);
        kiln_tensor *tc = upload(dev, KILN_U8, 1, &s4, cv), *ta = upload(dev, dt, 2, s34, a);
        kiln_tensor *tb = upload(dev, dt, 2, s34, b), *o = NULL;
        ASSERT_OK(kiln_tensor_empty(dev, dt, 2, s34, &o));
        ASSERT_OK(kiln_where_out(tc, ta, tb, o));
        double *got = download(o);
        for (int i = 0; i < 12; i++)
            ck_assert_msg(got[i] == (cv[i % 4] ? a[i] : b[i]), "where_out %s [%d]",
                          kiln_dtype_name(dt), i);
        free(got);
        ASSERT_OK(kiln_where_out(tc, ta, tb, tb)); /* in place */
        got = download(tb);
        for (int i = 0; i < 12; i++)
            ck_assert(got[i] == (cv[i % 4] ? a[i] : b[i]));
        free(got);
        /* cast_out into every other dtype */
        for (int j = 0; j < ndtypes; j++) {
            kiln_tensor *r = NULL;
            ASSERT_OK(kiln_tensor_empty(dev, dtypes[j], 2, s34, &r));
            ASSERT_OK(kiln_cast_out(ta, r));
            got = download(r);
            for (int i = 0; i < 12; i++)
                ck_assert_msg(got[i] == ref_cast(dt, dtypes[j], a[i]), "cast_out %s -> %s [%d]",
                              kiln_dtype_name(dt), kiln_dtype_name(dtypes[j]), i);
            free(got);
            kiln_tensor_release(r);
        }
        ASSERT_OK(kiln_cast_out(ta, ta)); /* in place: the same dtype, unchanged */
        got = download(ta);
        for (int i = 0; i < 12; i++)
            ck_assert(got[i] == a[i]);
        free(got);
        /* unary_backward_out: RELU' is exact (grad where x > 0, else 0), also in place */
        if (is_float(dt)) {
            double *x = values(dt, 12, -5, 5, 9);
            kiln_tensor *tx = upload(dev, dt, 2, s34, x);
            ASSERT_OK(kiln_unary_backward_out(KILN_UNARY_RELU, tx, ta, o));
            got = download(o);
            for (int i = 0; i < 12; i++)
                ck_assert(got[i] == (x[i] > 0 ? a[i] : 0));
            free(got);
            ASSERT_OK(kiln_unary_backward_out(KILN_UNARY_NEG, tx, ta, ta));
            got = download(ta);
            for (int i = 0; i < 12; i++)
                ck_assert(got[i] == -a[i]);
            free(got);
            free(x);
            kiln_tensor_release(tx);
        }
        free(cv);
        free(a);
        free(b);
        kiln_tensor_release(tc);
        kiln_tensor_release(ta);
        kiln_tensor_release(tb);
        kiln_tensor_release(o);
    }
}
END_TEST

/* Every _out form: wrong shape (both shapes named), wrong dtype, NULL out; out untouched. */
START_TEST(test_out_errors)
{
    int64_t s23[2] = {2, 3}, s4 = 4;
    static const float vals[6] = {1, 2, 3, 4, 5, 6};
    kiln_tensor *a = NULL, *ai = NULL, *c = NULL, *o4 = NULL, *oi = NULL, *ou = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, s23, vals, &a));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 2, s23, &ai));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_U8, 2, s23, &c));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, &s4, &o4));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I32, 2, s23, &oi));
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_U8, 2, s23, &ou));
    static const char *const names[4] = {"kiln_add_out", "kiln_sub_out", "kiln_mul_out",
                                         "kiln_div_out"};
    for (int op = 0; op < 4; op++) {
        ASSERT_FAILS(binary_outs[op](a, a, o4), KILN_ERR_SHAPE_MISMATCH, "[4]");
        ASSERT_ERROR_HAS("[2, 3]");
        ASSERT_ERROR_HAS(names[op]);
        ASSERT_FAILS(binary_outs[op](a, a, oi), KILN_ERR_DTYPE_MISMATCH, "i32");
        ASSERT_FAILS(binary_outs[op](a, a, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
        ASSERT_ERROR_HAS(names[op]);
    }
    ASSERT_FAILS(kiln_binary_scalar_out(KILN_BINARY_ADD, a, 1, o4), KILN_ERR_SHAPE_MISMATCH, "[4]");
    ASSERT_ERROR_HAS("[2, 3]");
    ASSERT_FAILS(kiln_binary_scalar_out(KILN_BINARY_GT, a, 1, oi), KILN_ERR_DTYPE_MISMATCH, "u8");
    ASSERT_FAILS(kiln_binary_scalar_out(KILN_BINARY_ADD, a, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_binary_scalar_out: out is NULL");
    ASSERT_FAILS(kiln_binary_scalar_out(KILN_BINARY_ADD, ai, 1e12, oi), KILN_ERR_INVALID_ARGUMENT,
                 "does not fit");
    ASSERT_FAILS(kiln_binary_scalar_i64_out(KILN_BINARY_ADD, a, 1, o4), KILN_ERR_SHAPE_MISMATCH,
                 "[2, 3]");
    ASSERT_FAILS(kiln_binary_scalar_i64_out(KILN_BINARY_ADD, a, 1, oi), KILN_ERR_DTYPE_MISMATCH,
                 "f32");
    ASSERT_FAILS(kiln_binary_scalar_i64_out(KILN_BINARY_ADD, a, 1, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_binary_scalar_i64_out: out is NULL");
    ASSERT_FAILS(kiln_binary_scalar_i64_out(KILN_BINARY_ADD, ai, (int64_t)INT32_MAX + 1, oi),
                 KILN_ERR_INVALID_ARGUMENT, "2147483648 does not fit");
    kiln_tensor *r = a;
    ASSERT_FAILS(kiln_binary_scalar_i64(KILN_BINARY_ADD, ai, (int64_t)INT32_MIN - 1, &r),
                 KILN_ERR_INVALID_ARGUMENT, "i32");
    ck_assert_ptr_null(r);
    ASSERT_FAILS(kiln_binary_scalar_i64(KILN_BINARY_ADD, ou, -1, &r), KILN_ERR_INVALID_ARGUMENT,
                 "u8");
    ASSERT_FAILS(kiln_binary_scalar_i64(KILN_BINARY_POW, ai, 2, &r), KILN_ERR_UNSUPPORTED, "pow");
    ASSERT_FAILS(kiln_binary_scalar_i64(KILN_BINARY_ADD, NULL, 2, &r), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_binary_scalar_i64");
    ASSERT_FAILS(kiln_binary_scalar_i64(KILN_BINARY_ADD, ai, 2, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "out is NULL");
    ASSERT_FAILS(kiln_where_out(c, a, a, o4), KILN_ERR_SHAPE_MISMATCH, "[4]");
    ASSERT_ERROR_HAS("[2, 3]");
    ASSERT_FAILS(kiln_where_out(c, a, a, oi), KILN_ERR_DTYPE_MISMATCH, "i32");
    ASSERT_FAILS(kiln_where_out(c, a, a, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_where_out: out is NULL");
    ASSERT_FAILS(kiln_unary_backward_out(KILN_UNARY_TANH, a, a, o4), KILN_ERR_SHAPE_MISMATCH,
                 "[4]");
    ASSERT_ERROR_HAS("[2, 3]");
    ASSERT_FAILS(kiln_unary_backward_out(KILN_UNARY_TANH, a, a, oi), KILN_ERR_DTYPE_MISMATCH,
                 "i32");
    ASSERT_FAILS(kiln_unary_backward_out(KILN_UNARY_TANH, a, a, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "grad_in is NULL");
    ASSERT_FAILS(kiln_cast_out(a, o4), KILN_ERR_SHAPE_MISMATCH, "[4]");
    ASSERT_ERROR_HAS("[2, 3]");
    ASSERT_FAILS(kiln_cast_out(a, NULL), KILN_ERR_INVALID_ARGUMENT, "kiln_cast_out: out is NULL");
    ASSERT_FAILS(kiln_cast_out(NULL, oi), KILN_ERR_INVALID_ARGUMENT, "kiln_cast_out");
    /* out untouched by every failure above */
    float f4[4];
    ASSERT_OK(kiln_tensor_read(o4, f4, sizeof f4));
    for (int i = 0; i < 4; i++)
        ck_assert(f4[i] == 0);
    int32_t i6[6];
    ASSERT_OK(kiln_tensor_read(oi, i6, sizeof i6));
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(i6[i], 0);
    kiln_tensor_release(a);
    kiln_tensor_release(ai);
    kiln_tensor_release(c);
    kiln_tensor_release(o4);
    kiln_tensor_release(oi);
    kiln_tensor_release(ou);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------ */

START_TEST(test_errors)
{
    int64_t s23[2] = {2, 3}, s4[1] = {4};
    kiln_tensor *a = NULL, *b = NULL, *ai = NULL, *c = NULL, *o = NULL;
    /* from host data: the comparison below reads a, and Oclgrind reports a kernel's read of
     * memory that another kernel (or a fill) wrote after kiln's allocator touched the buffer */
    static const float zeros[6] = {0};
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F32, 2, s23, zeros, &a), KILN_OK);
    ck_assert_int_eq(kiln_tensor_zeros(dev, KILN_F32, 1, s4, &b), KILN_OK);
    ck_assert_int_eq(kiln_tensor_zeros(dev, KILN_I32, 2, s23, &ai), KILN_OK);
    kiln_tensor *r = a;
    ASSERT_FAILS(kiln_add(a, b, &r), KILN_ERR_SHAPE_MISMATCH, "[2, 3] and [4]");
    ck_assert_ptr_null(r);
    ASSERT_FAILS(kiln_add(a, b, &r), KILN_ERR_SHAPE_MISMATCH, "kiln_add");
    ASSERT_OK(kiln_mul(a, ai, &r)); /* mixed dtypes promote (test-promote.c) */
    kiln_tensor_release(r);
    /* two valid empty tensors whose broadcast shape [2^40, 2^40, 0] multiplies past INT64_MAX */
    static const int64_t tall[3] = {INT64_C(1) << 40, 1, 0}, wide[3] = {1, INT64_C(1) << 40, 0};
    kiln_tensor *et = NULL, *ew = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 3, tall, &et));
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 3, wide, &ew));
    ASSERT_FAILS(kiln_add(et, ew, &r), KILN_ERR_INVALID_ARGUMENT, "overflow");
    ck_assert_ptr_null(r);
    kiln_tensor_release(et);
    kiln_tensor_release(ew);
    ASSERT_FAILS(kiln_sub(NULL, a, &r), KILN_ERR_INVALID_ARGUMENT, "argument 1");
    ASSERT_FAILS(kiln_div(a, NULL, &r), KILN_ERR_INVALID_ARGUMENT, "argument 2");
    ASSERT_FAILS(kiln_add(a, a, NULL), KILN_ERR_INVALID_ARGUMENT, "out is NULL");
    ASSERT_FAILS(kiln_binary((kiln_binary_op)99, a, a, &r), KILN_ERR_INVALID_ARGUMENT,
                 "unknown binary op");
    ASSERT_FAILS(kiln_binary(KILN_BINARY_POW, ai, ai, &r), KILN_ERR_UNSUPPORTED, "i32");
    ASSERT_FAILS(kiln_binary_scalar(KILN_BINARY_POW, ai, 2, &r), KILN_ERR_UNSUPPORTED, "pow");
    ASSERT_FAILS(kiln_binary_scalar(KILN_BINARY_ADD, ai, 1e12, &r), KILN_ERR_INVALID_ARGUMENT,
                 "does not fit");
    ASSERT_FAILS(kiln_binary_scalar(KILN_BINARY_ADD, NULL, 1, &r), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_binary_scalar");
    /* _out: wrong shape, wrong dtype (a comparison gives u8), NULL */
    ck_assert_int_eq(kiln_tensor_zeros(dev, KILN_F32, 1, s4, &o), KILN_OK);
    ASSERT_FAILS(kiln_binary_out(KILN_BINARY_ADD, a, a, o), KILN_ERR_SHAPE_MISMATCH, "[4]");
    ASSERT_FAILS(kiln_binary_out(KILN_BINARY_LT, b, b, o), KILN_ERR_DTYPE_MISMATCH, "u8");
    ASSERT_FAILS(kiln_binary_out(KILN_BINARY_ADD, b, b, NULL), KILN_ERR_INVALID_ARGUMENT,
                 "out is NULL");
    ASSERT_FAILS(kiln_unary_out(KILN_UNARY_EXP, a, o), KILN_ERR_SHAPE_MISMATCH, "[2, 3]");
    /* unary */
    ASSERT_FAILS(kiln_unary(KILN_UNARY_EXP, ai, &r), KILN_ERR_UNSUPPORTED, "exp");
    ASSERT_FAILS(kiln_unary((kiln_unary_op)-1, a, &r), KILN_ERR_INVALID_ARGUMENT,
                 "unknown unary op");
    ASSERT_FAILS(kiln_unary(KILN_UNARY_EXP, NULL, &r), KILN_ERR_INVALID_ARGUMENT, "kiln_unary");
    ASSERT_FAILS(kiln_unary_backward(KILN_UNARY_TANH, a, b, &r), KILN_ERR_SHAPE_MISMATCH, "[4]");
    ASSERT_FAILS(kiln_unary_backward(KILN_UNARY_RELU, ai, ai, &r), KILN_ERR_UNSUPPORTED, "relu");
    ASSERT_FAILS(kiln_unary_backward(KILN_UNARY_TANH, a, ai, &r), KILN_ERR_DTYPE_MISMATCH, "i32");
    /* where */
    ASSERT_FAILS(kiln_where(a, a, a, &r), KILN_ERR_DTYPE_MISMATCH, "u8");
    ck_assert_int_eq(kiln_binary(KILN_BINARY_GT, a, a, &c), KILN_OK);
    ASSERT_FAILS(kiln_where(c, a, ai, &r), KILN_ERR_DTYPE_MISMATCH, "f32 and i32");
    ASSERT_FAILS(kiln_where(c, b, b, &r), KILN_ERR_SHAPE_MISMATCH, "[2, 3], [4] and [4]");
    ASSERT_FAILS(kiln_where(NULL, b, b, &r), KILN_ERR_INVALID_ARGUMENT, "argument 1");
    /* cast */
    ASSERT_FAILS(kiln_cast(a, (kiln_dtype)42, &r), KILN_ERR_INVALID_ARGUMENT, "dtype");
    ASSERT_FAILS(kiln_cast(NULL, KILN_F32, &r), KILN_ERR_INVALID_ARGUMENT, "kiln_cast");
    ck_assert_ptr_null(r);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(ai);
    kiln_tensor_release(c);
    kiln_tensor_release(o);
}
END_TEST

/* Zero-size tensors are valid everywhere and need no kernel. */
START_TEST(test_zero_size)
{
    int64_t s0[2] = {0, 3}, s1[1] = {3};
    kiln_tensor *a = NULL, *b = NULL, *r = NULL;
    ck_assert_int_eq(kiln_tensor_empty(dev, KILN_F32, 2, s0, &a), KILN_OK);
    ck_assert_int_eq(kiln_tensor_zeros(dev, KILN_F32, 1, s1, &b), KILN_OK);
    ck_assert_int_eq(kiln_add(a, b, &r), KILN_OK);
    ck_assert_int_eq(kiln_tensor_numel(r), 0);
    ck_assert_int_eq(kiln_tensor_shape(r)[0], 0);
    ck_assert_int_eq(kiln_tensor_shape(r)[1], 3);
    kiln_tensor_release(r);
    ck_assert_int_eq(kiln_unary(KILN_UNARY_TANH, a, &r), KILN_OK);
    kiln_tensor_release(r);
    ck_assert_int_eq(kiln_cast(a, KILN_I64, &r), KILN_OK);
    ck_assert_int_eq(kiln_tensor_numel(r), 0);
    kiln_tensor_release(r);
    ck_assert_int_eq(kiln_binary_scalar(KILN_BINARY_MUL, a, 2, &r), KILN_OK);
    kiln_tensor_release(r);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

/* Two devices (-2dev: cpu:0 and cpu:1; -oclgrind: gpu:0 and cpu:0): mixing is an error that
 * names both, checked before anything runs. */
START_TEST(test_device_mismatch)
{
    if (ndevs < 2)
        return;
    int64_t n = 4;
    kiln_tensor *a = NULL, *b = NULL, *c = NULL, *r = NULL;
    ck_assert_int_eq(kiln_tensor_zeros(devs[0], KILN_F32, 1, &n, &a), KILN_OK);
    ck_assert_int_eq(kiln_tensor_zeros(devs[1], KILN_F32, 1, &n, &b), KILN_OK);
    ck_assert_int_eq(kiln_tensor_zeros(devs[1], KILN_U8, 1, &n, &c), KILN_OK);
    const char *s0 = kiln_device_spec(devs[0]), *s1 = kiln_device_spec(devs[1]);
    ASSERT_FAILS(kiln_add(a, b, &r), KILN_ERR_DEVICE_MISMATCH, s0);
    ck_assert_msg(strstr(kiln_last_error(), s1), "%s", kiln_last_error());
    ck_assert_ptr_null(r);
    ASSERT_FAILS(kiln_binary_out(KILN_BINARY_MUL, b, b, a), KILN_ERR_DEVICE_MISMATCH, s1);
    ck_assert_msg(strstr(kiln_last_error(), s0), "%s", kiln_last_error());
    ASSERT_FAILS(kiln_where(c, a, a, &r), KILN_ERR_DEVICE_MISMATCH, s0);
    ASSERT_FAILS(kiln_unary_out(KILN_UNARY_EXP, a, b), KILN_ERR_DEVICE_MISMATCH, s1);
    ASSERT_FAILS(kiln_unary_backward(KILN_UNARY_EXP, a, b, &r), KILN_ERR_DEVICE_MISMATCH, s1);
    /* the _out forms: out on the other device */
    kiln_tensor *c0 = NULL;
    ck_assert_int_eq(kiln_tensor_zeros(devs[0], KILN_U8, 1, &n, &c0), KILN_OK);
    const binary_out_fn outs[4] = {kiln_add_out, kiln_sub_out, kiln_mul_out, kiln_div_out};
    for (int op = 0; op < 4; op++) {
        ASSERT_FAILS(outs[op](a, a, b), KILN_ERR_DEVICE_MISMATCH, s1);
        ASSERT_ERROR_HAS(s0);
    }
    ASSERT_FAILS(kiln_binary_scalar_out(KILN_BINARY_ADD, a, 1, b), KILN_ERR_DEVICE_MISMATCH, s1);
    ASSERT_ERROR_HAS(s0);
    ASSERT_FAILS(kiln_binary_scalar_i64_out(KILN_BINARY_ADD, a, 1, b), KILN_ERR_DEVICE_MISMATCH,
                 s1);
    ASSERT_ERROR_HAS(s0);
    ASSERT_FAILS(kiln_where_out(c0, a, a, b), KILN_ERR_DEVICE_MISMATCH, s1);
    ASSERT_ERROR_HAS(s0);
    ASSERT_FAILS(kiln_unary_backward_out(KILN_UNARY_EXP, a, a, b), KILN_ERR_DEVICE_MISMATCH, s1);
    ASSERT_ERROR_HAS(s0);
    ASSERT_FAILS(kiln_cast_out(a, b), KILN_ERR_DEVICE_MISMATCH, s1);
    ASSERT_ERROR_HAS(s0);
    kiln_tensor_release(c0);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
}
END_TEST

Suite *elementwise_suite(void)
{
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("ops");
    tcase_add_unchecked_fixture(tc, setup, teardown_devices);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_binary_all_ops);
    tcase_add_test(tc, test_broadcast);
    tcase_add_test(tc, test_scalar);
    tcase_add_test(tc, test_integer_semantics);
    tcase_add_test(tc, test_where);
    tcase_add_test(tc, test_unary_and_backward);
    tcase_add_test(tc, test_unary_edges);
    tcase_add_test(tc, test_cast_all_pairs);
    tcase_add_test(tc, test_cast_f16_rounding);
    tcase_add_test(tc, test_cast_bf16_rounding);
    tcase_add_test(tc, test_binary_out_forms);
    tcase_add_test(tc, test_binary_scalar_i64);
    tcase_add_test(tc, test_other_out_forms);
    tcase_add_test(tc, test_out_errors);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_zero_size);
    tcase_add_test(tc, test_device_mismatch);
    suite_add_tcase(s, tc);
    return s;
}
