/* elementwise.cl - elementwise kernels over one element type T (one program per dtype).
 * Expects the prelude's slot T (KILN_T, KILN_TC, LOAD_T, STORE_T) and either KILN_IS_FLOAT or
 * KILN_IS_INT; integer programs also get KILN_UT (the unsigned type of T's width, for wrapping
 * arithmetic) and KILN_IS_SIGNED for i32/i64. Kernels (OP: add sub mul div pow minimum maximum
 * eq ne lt le gt ge; UOP: neg abs exp log sqrt rsqrt sin cos tanh sigmoid relu gelu):
 *   kiln_b_OP(a, b, out, n)                      same shape, contiguous
 *   kiln_bs_OP(a, scalar, out, n)                a OP scalar
 *   kiln_bb_OP(a, b, out, n, shape[8], sa[8], sb[8])   broadcast: 8 result dims (outermost
 *                                                first, padded with 1) and element strides
 *   kiln_b2_OP(a, b, out, rows, cols, sar, sac, sbr, sbc)  broadcast over 2 (collapsed)
 *                                                dims, a 2-D range without divisions
 *   kiln_where(c, a, b, out, n), kiln_where_bb(c, a, b, out, n, shape[8], sc[8], sa[8], sb[8])
 *   kiln_u_UOP(x, out, n), kiln_ub_UOP(x, grad, out, n)   unary and its backward
 *   kiln_cast_to_{f32,f64,f16,i32,i64,u8}(x, out, n)      float -> integer truncates toward zero
 *                                                and saturates (NaN -> 0); integers wrap
 * Every kernel bounds-checks its global id against n (global sizes are padded). */

/* ---- binary operators ------------------------------------------------------------------- */
#ifdef KILN_IS_FLOAT
#define OP_add(x, y) ((x) + (y))
#define OP_sub(x, y) ((x) - (y))
#define OP_mul(x, y) ((x) * (y))
#define OP_div(x, y) ((x) / (y))
#define OP_pow(x, y) pow((x), (y))
/* NaN propagates (as in NumPy/PyTorch), unlike fmin/fmax. */
#define OP_minimum(x, y) (isnan(x) || isnan(y) ? (x) + (y) : fmin((x), (y)))
#define OP_maximum(x, y) (isnan(x) || isnan(y) ? (x) + (y) : fmax((x), (y)))
#else
/* Through the unsigned type: overflow wraps instead of being undefined. */
#define OP_add(x, y) ((KILN_TC)((KILN_UT)(x) + (KILN_UT)(y)))
#define OP_sub(x, y) ((KILN_TC)((KILN_UT)(x) - (KILN_UT)(y)))
#define OP_mul(x, y) ((KILN_TC)((KILN_UT)(x) * (KILN_UT)(y)))
#define OP_div(x, y) kiln_idiv((x), (y))
#define OP_minimum(x, y) min((x), (y))
#define OP_maximum(x, y) max((x), (y))

/* Division by zero gives 0, and MIN / -1 wraps to MIN: CPUs trap on both. */
KILN_TC kiln_idiv(KILN_TC x, KILN_TC y)
{
    if (y == 0)
        return 0;
#ifdef KILN_IS_SIGNED
    if (y == (KILN_TC)-1)
        return (KILN_TC)((KILN_UT)0 - (KILN_UT)x);
#endif
    return x / y;
}
#endif

#define OP_eq(x, y) ((x) == (y))
#define OP_ne(x, y) ((x) != (y))
#define OP_lt(x, y) ((x) < (y))
#define OP_le(x, y) ((x) <= (y))
#define OP_gt(x, y) ((x) > (y))
#define OP_ge(x, y) ((x) >= (y))

#define STORE_U8(p, i, v) ((p)[(i)] = (uchar)((v) ? 1 : 0))

/* Broadcast index arithmetic: the result index i is split into 8 coordinates, innermost
 * (s7) first; once the rest is 0 every outer coordinate is 0 too. The remainder is written as
 * r - q * s, not %: LLVM turns a div/rem pair into a `freeze` that Oclgrind cannot run. */
#define BB_SHAPE long s0, long s1, long s2, long s3, long s4, long s5, long s6, long s7
#define BB_STRIDES(a) long a##0, long a##1, long a##2, long a##3, long a##4, long a##5, \
                      long a##6, long a##7
#define BB_STEP2(k)                                                                           \
    if (r) {                                                                                  \
        long q = r / s##k, c = r - q * s##k;                                                  \
        r = q;                                                                                \
        ia += c * sa##k;                                                                      \
        ib += c * sb##k;                                                                      \
    }
#define BB_INDEX2                                                                             \
    long r = i, ia = 0, ib = 0;                                                               \
    BB_STEP2(7) BB_STEP2(6) BB_STEP2(5) BB_STEP2(4) BB_STEP2(3) BB_STEP2(2) BB_STEP2(1)       \
    BB_STEP2(0)

#define DEF_BINARY(op, OUTT, STORE)                                                           \
    kernel void kiln_b_##op(global const KILN_T *a, global const KILN_T *b,                   \
                            global OUTT *out, long n)                                         \
    {                                                                                         \
        long i = get_global_id(0);                                                            \
        if (i >= n)                                                                           \
            return;                                                                           \
        KILN_TC x = LOAD_T(a, i), y = LOAD_T(b, i);                                           \
        STORE(out, i, OP_##op(x, y));                                                         \
    }                                                                                         \
    kernel void kiln_bs_##op(global const KILN_T *a, KILN_TC y, global OUTT *out, long n)     \
    {                                                                                         \
        long i = get_global_id(0);                                                            \
        if (i >= n)                                                                           \
            return;                                                                           \
        KILN_TC x = LOAD_T(a, i);                                                             \
        STORE(out, i, OP_##op(x, y));                                                         \
    }                                                                                         \
    kernel void kiln_bb_##op(global const KILN_T *a, global const KILN_T *b,                  \
                             global OUTT *out, long n, BB_SHAPE, BB_STRIDES(sa),              \
                             BB_STRIDES(sb))                                                  \
    {                                                                                         \
        long i = get_global_id(0);                                                            \
        if (i >= n)                                                                           \
            return;                                                                           \
        BB_INDEX2                                                                             \
        KILN_TC x = LOAD_T(a, ia), y = LOAD_T(b, ib);                                         \
        STORE(out, i, OP_##op(x, y));                                                         \
    }                                                                                         \
    kernel void kiln_b2_##op(global const KILN_T *a, global const KILN_T *b,                  \
                             global OUTT *out, long rows, long cols, long sar, long sac,      \
                             long sbr, long sbc)                                              \
    {                                                                                         \
        long c = get_global_id(0), r = get_global_id(1);                                      \
        if (c >= cols || r >= rows)                                                           \
            return;                                                                           \
        KILN_TC x = LOAD_T(a, r * sar + c * sac), y = LOAD_T(b, r * sbr + c * sbc);           \
        STORE(out, r * cols + c, OP_##op(x, y));                                              \
    }

DEF_BINARY(add, KILN_T, STORE_T)
DEF_BINARY(sub, KILN_T, STORE_T)
DEF_BINARY(mul, KILN_T, STORE_T)
DEF_BINARY(div, KILN_T, STORE_T)
#ifdef KILN_IS_FLOAT
DEF_BINARY(pow, KILN_T, STORE_T)
#endif
DEF_BINARY(minimum, KILN_T, STORE_T)
DEF_BINARY(maximum, KILN_T, STORE_T)
DEF_BINARY(eq, uchar, STORE_U8)
DEF_BINARY(ne, uchar, STORE_U8)
DEF_BINARY(lt, uchar, STORE_U8)
DEF_BINARY(le, uchar, STORE_U8)
DEF_BINARY(gt, uchar, STORE_U8)
DEF_BINARY(ge, uchar, STORE_U8)

/* ---- where ------------------------------------------------------------------------------ */
kernel void kiln_where(global const uchar *c, global const KILN_T *a, global const KILN_T *b,
                       global KILN_T *out, long n)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    STORE_T(out, i, c[i] ? LOAD_T(a, i) : LOAD_T(b, i));
}

#define BB_STEP3(k)                                                                           \
    if (r) {                                                                                  \
        long q = r / s##k, c = r - q * s##k;                                                  \
        r = q;                                                                                \
        ic += c * sc##k;                                                                      \
        ia += c * sa##k;                                                                      \
        ib += c * sb##k;                                                                      \
    }

kernel void kiln_where_bb(global const uchar *c, global const KILN_T *a, global const KILN_T *b,
                          global KILN_T *out, long n, BB_SHAPE, BB_STRIDES(sc), BB_STRIDES(sa),
                          BB_STRIDES(sb))
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    long r = i, ic = 0, ia = 0, ib = 0;
    BB_STEP3(7) BB_STEP3(6) BB_STEP3(5) BB_STEP3(4) BB_STEP3(3) BB_STEP3(2) BB_STEP3(1)
    BB_STEP3(0)
    STORE_T(out, i, c[ic] ? LOAD_T(a, ia) : LOAD_T(b, ib));
}

/* ---- unary operators and their derivatives ---------------------------------------------- */
#define ONE ((KILN_TC)1)
#define ZERO ((KILN_TC)0)
/* Fractional constants: a plain literal is a double, which a device without fp64 may warn
 * about or reject; there the f32 literal is exact enough. */
#ifdef KILN_HAS_FP64
#define KLIT(x) ((KILN_TC)(x))
#else
#define KLIT(x) ((KILN_TC)(x##f))
#endif
#define UB_relu(x, g) ((x) > ZERO ? (g) : ZERO)

#ifdef KILN_IS_FLOAT
/* NaN stays NaN (x < 0 is false for NaN). */
#define U_relu(x) ((x) < ZERO ? ZERO : (x))
#define U_neg(x) (-(x))
#define U_abs(x) fabs(x)
#define U_exp(x) exp(x)
#define U_log(x) log(x)
#define U_sqrt(x) sqrt(x)
#define U_rsqrt(x) rsqrt(x)
#define U_sin(x) sin(x)
#define U_cos(x) cos(x)
#define U_tanh(x) tanh(x)
#define U_sigmoid(x) kiln_sigmoid(x)
#define U_gelu(x) kiln_gelu(x)

#define UB_neg(x, g) ((void)(x), -(g))
#define UB_abs(x, g) ((x) > ZERO ? (g) : (x) < ZERO ? -(g) : ZERO)
#define UB_exp(x, g) ((g) * exp(x))
#define UB_log(x, g) ((g) / (x))
#define UB_sqrt(x, g) ((g) / ((KILN_TC)2 * sqrt(x)))
#define UB_rsqrt(x, g) (-KLIT(0.5) * (g) * rsqrt(x) / (x))
#define UB_sin(x, g) ((g) * cos(x))
#define UB_cos(x, g) (-(g) * sin(x))
#define UB_tanh(x, g) kiln_tanh_bw((x), (g))
#define UB_sigmoid(x, g) kiln_sigmoid_bw((x), (g))
#define UB_gelu(x, g) ((g) * kiln_gelu_d(x))

/* Never exponentiates a positive number, so it cannot overflow to inf/inf. */
KILN_TC kiln_sigmoid(KILN_TC x)
{
    KILN_TC e = exp(-fabs(x));
    return x >= ZERO ? ONE / (ONE + e) : e / (ONE + e);
}

KILN_TC kiln_sigmoid_bw(KILN_TC x, KILN_TC g)
{
    KILN_TC s = kiln_sigmoid(x);
    return g * s * (ONE - s);
}

KILN_TC kiln_tanh_bw(KILN_TC x, KILN_TC g)
{
    KILN_TC t = tanh(x);
    return g * (ONE - t * t);
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#define GELU_K KLIT(0.7978845608028654)
#define GELU_C KLIT(0.044715)
KILN_TC kiln_gelu(KILN_TC x)
{
    KILN_TC t = tanh(GELU_K * (x + GELU_C * x * x * x));
    return KLIT(0.5) * x * (ONE + t);
}

KILN_TC kiln_gelu_d(KILN_TC x)
{
    KILN_TC t = tanh(GELU_K * (x + GELU_C * x * x * x));
    KILN_TC du = GELU_K * (ONE + (KILN_TC)3 * GELU_C * x * x);
    return KLIT(0.5) * (ONE + t) + KLIT(0.5) * x * (ONE - t * t) * du;
}
#else
/* Builtins, not selects: LLVM folds those into llvm.abs/llvm.smax, which Oclgrind lacks.
 * abs() returns the unsigned type, so abs(MIN) wraps back to MIN. */
#define U_neg(x) ((KILN_TC)((KILN_UT)0 - (KILN_UT)(x)))
#define U_relu(x) max((x), ZERO)
#ifdef KILN_IS_SIGNED
#define U_abs(x) ((KILN_TC)abs(x))
#else
#define U_abs(x) (x)
#endif
#endif

#define DEF_UNARY(op)                                                                         \
    kernel void kiln_u_##op(global const KILN_T *x, global KILN_T *out, long n)               \
    {                                                                                         \
        long i = get_global_id(0);                                                            \
        if (i >= n)                                                                           \
            return;                                                                           \
        KILN_TC v = LOAD_T(x, i);                                                             \
        STORE_T(out, i, U_##op(v));                                                           \
    }
#define DEF_UNARY_BW(op)                                                                      \
    kernel void kiln_ub_##op(global const KILN_T *x, global const KILN_T *g,                  \
                             global KILN_T *out, long n)                                      \
    {                                                                                         \
        long i = get_global_id(0);                                                            \
        if (i >= n)                                                                           \
            return;                                                                           \
        KILN_TC v = LOAD_T(x, i), gv = LOAD_T(g, i);                                          \
        STORE_T(out, i, UB_##op(v, gv));                                                      \
    }

DEF_UNARY(neg)
DEF_UNARY(abs)
DEF_UNARY(relu)
#ifdef KILN_IS_FLOAT
DEF_UNARY(exp)
DEF_UNARY(log)
DEF_UNARY(sqrt)
DEF_UNARY(rsqrt)
DEF_UNARY(sin)
DEF_UNARY(cos)
DEF_UNARY(tanh)
DEF_UNARY(sigmoid)
DEF_UNARY(gelu)
DEF_UNARY_BW(neg)
DEF_UNARY_BW(abs)
DEF_UNARY_BW(relu)
DEF_UNARY_BW(exp)
DEF_UNARY_BW(log)
DEF_UNARY_BW(sqrt)
DEF_UNARY_BW(rsqrt)
DEF_UNARY_BW(sin)
DEF_UNARY_BW(cos)
DEF_UNARY_BW(tanh)
DEF_UNARY_BW(sigmoid)
DEF_UNARY_BW(gelu)
#endif

/* ---- casts ------------------------------------------------------------------------------ */
#ifdef KILN_IS_FLOAT
/* NaN -> 0 as the spec says for _sat (tested explicitly: Oclgrind gives MIN). */
#define TO_INT(ty, v) (isnan(v) ? (ty)0 : convert_##ty##_sat_rtz(v))
#define TO_HALF(v) (v)
#else
#define TO_INT(ty, v) ((ty)(v))
#define TO_HALF(v) ((float)(v))
#endif

#define DEF_CAST(name, OUTT, EXPR)                                                            \
    kernel void kiln_cast_to_##name(global const KILN_T *x, global OUTT *out, long n)         \
    {                                                                                         \
        long i = get_global_id(0);                                                            \
        if (i >= n)                                                                           \
            return;                                                                           \
        KILN_TC v = LOAD_T(x, i);                                                             \
        EXPR;                                                                                 \
    }

DEF_CAST(f32, float, out[i] = (float)v)
#ifdef KILN_HAS_FP64
DEF_CAST(f64, double, out[i] = (double)v)
#endif
DEF_CAST(f16, half, vstore_half(TO_HALF(v), i, out))
DEF_CAST(i32, int, out[i] = TO_INT(int, v))
DEF_CAST(i64, long, out[i] = TO_INT(long, v))
DEF_CAST(u8, uchar, out[i] = TO_INT(uchar, v))
