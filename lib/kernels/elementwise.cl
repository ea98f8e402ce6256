/* elementwise.cl - elementwise kernels over one element type T (a program per dtype and kernel).
 * Expects the prelude's slot T (KILN_T, KILN_TC, LOAD_T, STORE_T) and either KILN_IS_FLOAT or
 * KILN_IS_INT; integer programs also get KILN_UT (the unsigned type of T's width, for wrapping
 * arithmetic) and KILN_IS_SIGNED for signed ones. Kernels, instantiated from the tables of
 * kiln.h (OP: every name of KILN_BINARY_OP_MAP; UOP: every name of KILN_UNARY_OP_MAP):
 *   kiln_b_OP(a, b, out, n)                      same shape, contiguous
 *   kiln_bs_OP(a, scalar, out, n)                a OP scalar
 *   kiln_bb_OP(a, b, out, n, shape[8], sa[8], sb[8])   broadcast: 8 result dims (outermost
 *                                                first, padded with 1) and element strides
 *   kiln_b2_OP(a, b, out, rows, cols, sar, sac, sbr, sbc)  broadcast over 2 (collapsed)
 *                                                dims, a 2-D range without divisions
 *   kiln_b3_OP(a, b, out, d0, d1, d2, sa0.., sb0..)  over 3 collapsed dims, a 3-D range
 *   kiln_where(c, a, b, out, n), kiln_where_bb(c, a, b, out, n, shape[8], sc[8], sa[8], sb[8])
 *   kiln_u_UOP(x, out, n), kiln_ub_UOP(x, grad, out, n)   unary and its backward
 *   kiln_cast_to_NAME(x, out, n)                 NAME: every dtype of KILN_DTYPE_MAP; float ->
 *                                                integer truncates toward zero and saturates
 *                                                (NaN -> 0); integers wrap
 * Every kernel loops over its ids with KILN_FOR (prelude.cl: grid-stride, the host caps each
 * launch) and bounds-checks them against n (global sizes are padded). */

/* No a * b + c contracted to fma (NVIDIA's compiler does it by default; PoCL does not): eager
 * ops and fused chains (lib/fusion.c emits the same pragma) then round alike, bit for bit. */
#pragma OPENCL FP_CONTRACT OFF

/* ---- binary operators ------------------------------------------------------------------- */
/* An op's kernel line: OP_<name>(x, y) in the compute type KILN_TC. Kind ARITH needs one for
 * floating programs and one for integer programs (wrapping through KILN_UT), FLOAT one for
 * floating programs, COMPARE one for all (a truth value, stored as a u8 0/1). */
/* @fusion-begin: lib/fusion.c copies the text up to @fusion-end into generated kernels. */
#ifdef KILN_IS_FLOAT
#define OP_add(x, y) ((x) + (y))
#define OP_sub(x, y) ((x) - (y))
#define OP_mul(x, y) ((x) * (y))
#define OP_div(x, y) ((x) / (y))
#define OP_pow(x, y) pow((x), (y))
#define OP_atan2(x, y) atan2((x), (y))
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
/* @fusion-end */

/* Broadcast index arithmetic: the result index i is split into 8 coordinates, innermost
 * (s7) first; once the rest is 0 every outer coordinate is 0 too. The remainder is written as
 * r - q * s, not %: LLVM turns a div/rem pair into a `freeze` that Oclgrind cannot run. */
#define BB_SHAPE long s0, long s1, long s2, long s3, long s4, long s5, long s6, long s7
#define BB_STRIDES(a) long a##0, long a##1, long a##2, long a##3, long a##4, long a##5,       \
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

/* f16 storage on CPU devices (KILN_CPU_DEVICE), same-shape kernels (kiln_b_, kiln_bs_, kiln_u_,
 * kiln_ub_ of an f16 program, and the casts kiln_cast8_*): 8 elements per work-item through
 * vload_half8/vstore_half8, which PoCL compiles to vector conversions (an f16 add on 16 Mi
 * elements: 3 G elements/s with scalar conversions, about f32's rate, 6 with these; issue 25).
 * bf16 keeps one element per work-item: its loads and stores are shifts that PoCL vectorizes
 * across work-items, and an 8-wide form (vload8 of the ushorts, a vector kiln_f2bf) measured
 * slower: a bf16 add on 16 Mi elements 3.4-3.9 G elements/s against 6.3 one by one.
 * GPUs keep one element per work-item (their conversions are instructions, and Oclgrind, the GPU
 * stand-in, runs these kernels wrong). The host launches ceil(n / 8) work-items (lib/eager.c);
 * the last takes the tail one element at a time:
 *   H8_FOR(n) { 8 elements at j } H8_TAIL(n) { element i }
 * H8_APPLY*(VT, CONV, F, ...) is the vector literal VT(CONV(F(components))), made whole (set
 * component by component, an uninitialised vector crashes Oclgrind's uninitialised-value
 * check). By the store of the output: STORE##_H8TYPE the vector type, STORE##_H8 its store,
 * STORE##_H8V the conversion of a value. */
#define H8_FOR(n) KILN_FOR(j, 0, ((n) + 7) >> 3) if ((j << 3) + 8 <= (n))
#define H8_TAIL(n) else for (long i = j << 3; i < (n); i++)
#define H8_APPLY1(VT, C, F, x)                                                                \
    ((VT)(C(F(x.s0)), C(F(x.s1)), C(F(x.s2)), C(F(x.s3)), C(F(x.s4)), C(F(x.s5)), C(F(x.s6)),  \
          C(F(x.s7))))
#define H8_APPLY2(VT, C, F, x, y)                                                             \
    ((VT)(C(F(x.s0, y.s0)), C(F(x.s1, y.s1)), C(F(x.s2, y.s2)), C(F(x.s3, y.s3)),             \
          C(F(x.s4, y.s4)), C(F(x.s5, y.s5)), C(F(x.s6, y.s6)), C(F(x.s7, y.s7))))
#define H8_APPLY2S(VT, C, F, x, y)                                                            \
    ((VT)(C(F(x.s0, y)), C(F(x.s1, y)), C(F(x.s2, y)), C(F(x.s3, y)), C(F(x.s4, y)),          \
          C(F(x.s5, y)), C(F(x.s6, y)), C(F(x.s7, y))))
#define STORE_T_H8TYPE float8
#define STORE_T_H8(p, j, r) vstore_half8((r), (j), (p))
#define STORE_T_H8V(v) (v)
#define STORE_U8_H8TYPE uchar8
#define STORE_U8_H8(p, j, r) vstore8((r), (j), (p))
#define STORE_U8_H8V(v) ((uchar)((v) ? 1 : 0))

/* The four variants of a binary op, each its own macro: an op's variants are separate kernels,
 * and a program built for one kernel (KILN_ONLY, see below) instantiates that one alone. */
#if defined(KILN_T_HALF) && defined(KILN_CPU_DEVICE)
#define DEF_B(OPF, KB, OUTT, STORE)                                                           \
    kernel void KB(global const KILN_T *a, global const KILN_T *b, global OUTT *out, long n)  \
    {                                                                                         \
        H8_FOR(n) {                                                                           \
            float8 x = vload_half8(j, a), y = vload_half8(j, b);                              \
            STORE##_H8(out, j, H8_APPLY2(STORE##_H8TYPE, STORE##_H8V, OPF, x, y));            \
        }                                                                                     \
        H8_TAIL(n) {                                                                          \
            KILN_TC x = LOAD_T(a, i), y = LOAD_T(b, i);                                       \
            STORE(out, i, OPF(x, y));                                                         \
        }                                                                                     \
    }
#define DEF_BS(OPF, KBS, OUTT, STORE)                                                         \
    kernel void KBS(global const KILN_T *a, KILN_TC y, global OUTT *out, long n)              \
    {                                                                                         \
        H8_FOR(n) {                                                                           \
            float8 x = vload_half8(j, a);                                                     \
            STORE##_H8(out, j, H8_APPLY2S(STORE##_H8TYPE, STORE##_H8V, OPF, x, y));           \
        }                                                                                     \
        H8_TAIL(n) {                                                                          \
            KILN_TC x = LOAD_T(a, i);                                                         \
            STORE(out, i, OPF(x, y));                                                         \
        }                                                                                     \
    }
#else
#define DEF_B(OPF, KB, OUTT, STORE)                                                           \
    kernel void KB(global const KILN_T *a, global const KILN_T *b, global OUTT *out, long n)  \
    {                                                                                         \
        KILN_FOR(i, 0, n) {                                                                   \
            KILN_TC x = LOAD_T(a, i), y = LOAD_T(b, i);                                       \
            STORE(out, i, OPF(x, y));                                                         \
        }                                                                                     \
    }
#define DEF_BS(OPF, KBS, OUTT, STORE)                                                         \
    kernel void KBS(global const KILN_T *a, KILN_TC y, global OUTT *out, long n)              \
    {                                                                                         \
        KILN_FOR(i, 0, n) {                                                                   \
            KILN_TC x = LOAD_T(a, i);                                                         \
            STORE(out, i, OPF(x, y));                                                         \
        }                                                                                     \
    }
#endif
#define DEF_BB(OPF, KBB, OUTT, STORE)                                                         \
    kernel void KBB(global const KILN_T *a, global const KILN_T *b, global OUTT *out, long n, \
                    BB_SHAPE, BB_STRIDES(sa), BB_STRIDES(sb))                                 \
    {                                                                                         \
        KILN_FOR(i, 0, n) {                                                                   \
            BB_INDEX2                                                                         \
            KILN_TC x = LOAD_T(a, ia), y = LOAD_T(b, ib);                                     \
            STORE(out, i, OPF(x, y));                                                         \
        }                                                                                     \
    }
#define DEF_B2(OPF, KB2, OUTT, STORE)                                                         \
    kernel void KB2(global const KILN_T *a, global const KILN_T *b, global OUTT *out,         \
                    long rows, long cols, long sar, long sac, long sbr, long sbc)             \
    {                                                                                         \
        KILN_FOR(r, 1, rows) {                                                                \
            KILN_FOR(c, 0, cols) {                                                            \
                KILN_TC x = LOAD_T(a, r * sar + c * sac), y = LOAD_T(b, r * sbr + c * sbc);   \
                STORE(out, r * cols + c, OPF(x, y));                                          \
            }                                                                                 \
        }                                                                                     \
    }
/* Three collapsed dims (a per-channel [1, C, 1] against [N, C, HW]: batch norm, a convolution's
 * bias): a 3-D range, no division (the general kernel's divisions cost 5-10x the add). */
#define DEF_B3(OPF, KB3, OUTT, STORE)                                                         \
    kernel void KB3(global const KILN_T *a, global const KILN_T *b, global OUTT *out, long d0, \
                    long d1, long d2, long sa0, long sa1, long sa2, long sb0, long sb1,       \
                    long sb2)                                                                 \
    {                                                                                         \
        KILN_FOR(c0, 2, d0) {                                                                 \
            KILN_FOR(c1, 1, d1) {                                                             \
                KILN_FOR(c2, 0, d2) {                                                         \
                    KILN_TC x = LOAD_T(a, c0 * sa0 + c1 * sa1 + c2 * sa2);                    \
                    KILN_TC y = LOAD_T(b, c0 * sb0 + c1 * sb1 + c2 * sb2);                    \
                    STORE(out, (c0 * d1 + c1) * d2 + c2, OPF(x, y));                          \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    }

/* One kernel per variant and line of KILN_BINARY_OP_MAP (kiln.h, copied in front of the
 * prelude), by the op's kind: ARITH on every dtype, FLOAT on floating dtypes only, COMPARE on
 * every dtype giving a u8 mask. An op's only line here is its OP_<name>. */
/* Fixed arity: NVIDIA's OpenCL C compiler rejects variadic macros (tests/check-kernels.py). */
#define DEF_BIN_ARITH(DEF, OPF, K) DEF(OPF, K, KILN_T, STORE_T)
#define DEF_BIN_COMPARE(DEF, OPF, K) DEF(OPF, K, uchar, STORE_U8)
#ifdef KILN_IS_FLOAT
#define DEF_BIN_FLOAT(DEF, OPF, K) DEF(OPF, K, KILN_T, STORE_T)
#else
#define DEF_BIN_FLOAT(DEF, OPF, K)
#endif
/* Every name is pasted here, at the first level: a bare `pow` or `abs` would be expanded by
 * OpenCL implementations that define builtins as macros (PoCL: #define pow _cl_pow). */
#define DEF_B_X(NAME, num, name, kind) DEF_BIN_##kind(DEF_B, OP_##name, kiln_b_##name)
#define DEF_BS_X(NAME, num, name, kind) DEF_BIN_##kind(DEF_BS, OP_##name, kiln_bs_##name)
#define DEF_BB_X(NAME, num, name, kind) DEF_BIN_##kind(DEF_BB, OP_##name, kiln_bb_##name)
#define DEF_B2_X(NAME, num, name, kind) DEF_BIN_##kind(DEF_B2, OP_##name, kiln_b2_##name)
#define DEF_B3_X(NAME, num, name, kind) DEF_BIN_##kind(DEF_B3, OP_##name, kiln_b3_##name)
/* A line `TABLE(DEF) // @kernels PREFIX` is expanded by lib/kernels/embed.py into one guarded
 * line per entry of TABLE: the kernel PREFIX<name> is defined when the program is built whole,
 * or built for it alone (KILN_ONLY and KILN_WANT_<kernel>: lib/program.c, "one kernel"). */
KILN_BINARY_OP_MAP(DEF_B_X) // @kernels kiln_b_
KILN_BINARY_OP_MAP(DEF_BS_X) // @kernels kiln_bs_
KILN_BINARY_OP_MAP(DEF_BB_X) // @kernels kiln_bb_
KILN_BINARY_OP_MAP(DEF_B2_X) // @kernels kiln_b2_
KILN_BINARY_OP_MAP(DEF_B3_X) // @kernels kiln_b3_

/* ---- where ------------------------------------------------------------------------------ */
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_where)
kernel void kiln_where(global const uchar *c, global const KILN_T *a, global const KILN_T *b,
                       global KILN_T *out, long n)
{
    KILN_FOR(i, 0, n) {
        STORE_T(out, i, c[i] ? LOAD_T(a, i) : LOAD_T(b, i));
    }
}
#endif

#define BB_STEP3(k)                                                                           \
    if (r) {                                                                                  \
        long q = r / s##k, c = r - q * s##k;                                                  \
        r = q;                                                                                \
        ic += c * sc##k;                                                                      \
        ia += c * sa##k;                                                                      \
        ib += c * sb##k;                                                                      \
    }

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_where_bb)
kernel void kiln_where_bb(global const uchar *c, global const KILN_T *a, global const KILN_T *b,
                          global KILN_T *out, long n, BB_SHAPE, BB_STRIDES(sc), BB_STRIDES(sa),
                          BB_STRIDES(sb))
{
    KILN_FOR(i, 0, n) {
        long r = i, ic = 0, ia = 0, ib = 0;
        BB_STEP3(7) BB_STEP3(6) BB_STEP3(5) BB_STEP3(4) BB_STEP3(3) BB_STEP3(2) BB_STEP3(1)
        BB_STEP3(0)
        STORE_T(out, i, c[ic] ? LOAD_T(a, ia) : LOAD_T(b, ib));
    }
}
#endif

/* ---- unary operators and their derivatives ---------------------------------------------- */
/* An op's kernel lines: U_<name>(x) and its derivative UB_<name>(x, g) = g * op'(x) for
 * floating programs; kind ANY also U_<name>(x) for integer programs (wrapping, no derivative). */
/* @fusion-begin: lib/fusion.c copies the text up to @fusion-end into generated kernels. */
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
#define U_softplus(x) ((x) > (KILN_TC)20 ? (x) : log1p(exp(x)))

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
#define UB_softplus(x, g) ((x) > (KILN_TC)20 ? (g) : (g) * exp(x) / (exp(x) + ONE))

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
/* @fusion-end */

#if defined(KILN_T_HALF) && defined(KILN_CPU_DEVICE) /* 8 per work-item: see H8_FOR */
#define DEF_UNARY(UF, KU)                                                                     \
    kernel void KU(global const KILN_T *x, global KILN_T *out, long n)                        \
    {                                                                                         \
        H8_FOR(n) {                                                                           \
            float8 v = vload_half8(j, x);                                                     \
            vstore_half8(H8_APPLY1(float8, STORE_T_H8V, UF, v), j, out);                      \
        }                                                                                     \
        H8_TAIL(n) {                                                                          \
            KILN_TC v = LOAD_T(x, i);                                                         \
            STORE_T(out, i, UF(v));                                                           \
        }                                                                                     \
    }
#define DEF_UNARY_BW(UBF, KUB)                                                                \
    kernel void KUB(global const KILN_T *x, global const KILN_T *g, global KILN_T *out, long n) \
    {                                                                                         \
        H8_FOR(n) {                                                                           \
            float8 v = vload_half8(j, x), gv = vload_half8(j, g);                             \
            vstore_half8(H8_APPLY2(float8, STORE_T_H8V, UBF, v, gv), j, out);                 \
        }                                                                                     \
        H8_TAIL(n) {                                                                          \
            KILN_TC v = LOAD_T(x, i), gv = LOAD_T(g, i);                                      \
            STORE_T(out, i, UBF(v, gv));                                                      \
        }                                                                                     \
    }
#else
#define DEF_UNARY(UF, KU)                                                                     \
    kernel void KU(global const KILN_T *x, global KILN_T *out, long n)                        \
    {                                                                                         \
        KILN_FOR(i, 0, n) {                                                                   \
            KILN_TC v = LOAD_T(x, i);                                                         \
            STORE_T(out, i, UF(v));                                                           \
        }                                                                                     \
    }
#define DEF_UNARY_BW(UBF, KUB)                                                                \
    kernel void KUB(global const KILN_T *x, global const KILN_T *g, global KILN_T *out, long n) \
    {                                                                                         \
        KILN_FOR(i, 0, n) {                                                                   \
            KILN_TC v = LOAD_T(x, i), gv = LOAD_T(g, i);                                      \
            STORE_T(out, i, UBF(v, gv));                                                      \
        }                                                                                     \
    }
#endif

/* One kernel (and on floating dtypes its derivative) per line of KILN_UNARY_OP_MAP, by its
 * kind: ANY on every dtype (U_<name> for floating and integer dtypes), FLOAT on floating dtypes
 * only. Derivatives (UB_<name>) exist for floating dtypes only. */
#define DEF_UNARY_ANY(UF, KU) DEF_UNARY(UF, KU)
#ifdef KILN_IS_FLOAT
#define DEF_UNARY_FLOAT(UF, KU) DEF_UNARY(UF, KU)
#define DEF_UNARY_BW_ANY(UBF, KUB) DEF_UNARY_BW(UBF, KUB)
#define DEF_UNARY_BW_FLOAT(UBF, KUB) DEF_UNARY_BW(UBF, KUB)
#else
#define DEF_UNARY_FLOAT(UF, KU)
#define DEF_UNARY_BW_ANY(UBF, KUB)
#define DEF_UNARY_BW_FLOAT(UBF, KUB)
#endif
#define DEF_U_X(NAME, num, name, kind) DEF_UNARY_##kind(U_##name, kiln_u_##name)
#define DEF_UB_X(NAME, num, name, kind) DEF_UNARY_BW_##kind(UB_##name, kiln_ub_##name)
KILN_UNARY_OP_MAP(DEF_U_X) // @kernels kiln_u_
KILN_UNARY_OP_MAP(DEF_UB_X) // @kernels kiln_ub_

/* ---- casts ------------------------------------------------------------------------------ */
/* One kiln_cast_to_<name> per line of KILN_DTYPE_MAP that the device can hold (KILN_IF_<name>
 * and KILN_STORE_AS_<name> come with the tables, see lib/kernels/embed.py). To an integer:
 * from floating, truncate toward zero and saturate, NaN -> 0 as the spec says for _sat
 * (tested explicitly: Oclgrind gives MIN); from integers, wrap. To floating: convert in the
 * target's compute type (a floating source goes to vstore_half as it is: one rounding). */
/* @fusion-begin: lib/fusion.c copies the text up to @fusion-end into generated kernels. */
#ifdef KILN_IS_FLOAT
#define TO_INT(ty, v) (isnan(v) ? (ty)0 : convert_##ty##_sat_rtz(v))
#define TO_FLOAT(ty, v) (v)
#else
#define TO_INT(ty, v) ((ty)(v))
#define TO_FLOAT(ty, v) ((ty)(v))
#endif
#define CAST_VALUE_1(cl, clc, v) TO_FLOAT(clc, v)
#define CAST_VALUE_0(cl, clc, v) TO_INT(cl, v)
/* @fusion-end */

#define DEF_CAST(KC, STORE, OUTT, VALUE)                                                      \
    kernel void KC(global const KILN_T *x, global OUTT *out, long n)                          \
    {                                                                                         \
        KILN_FOR(i, 0, n) {                                                                   \
            KILN_TC v = LOAD_T(x, i);                                                         \
            STORE(out, i, VALUE);                                                             \
        }                                                                                     \
    }
#define DEF_CAST_X(NAME, num, name, bytes, cl, clc, fl, sg)                                   \
    KILN_IF_##name(                                                                           \
        DEF_CAST(kiln_cast_to_##name, KILN_STORE_AS_##name, cl, CAST_VALUE_##fl(cl, clc, v)))
KILN_DTYPE_MAP(DEF_CAST_X) // @kernels kiln_cast_to_

/* The casts mixed precision runs every step (f32 weights to f16, f16 results to f32), 8 elements
 * per work-item on CPU devices (see H8_FOR); the host uses them for those two pairs there. */
#if defined(KILN_T_HALF) && defined(KILN_CPU_DEVICE)
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_cast8_to_f32)
kernel void kiln_cast8_to_f32(global const KILN_T *x, global float *out, long n)
{
    H8_FOR(n) {
        vstore8(vload_half8(j, x), j, out);
    }
    H8_TAIL(n) {
        out[i] = LOAD_T(x, i);
    }
}
#endif
#endif
#if defined(KILN_IS_F32) && defined(KILN_CPU_DEVICE)
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_cast8_to_f16)
kernel void kiln_cast8_to_f16(global const float *x, global half *out, long n)
{
    H8_FOR(n) {
        vstore_half8(vload8(j, x), j, out);
    }
    H8_TAIL(n) {
        KILN_HALF_STORE(x[i], i, out);
    }
}
#endif
#endif
