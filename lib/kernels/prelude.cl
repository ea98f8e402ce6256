/* prelude.cl - prepended to every built-in kernel source. At build time lib/kernels/embed.py
 * puts in front of it the X-macro tables of include/kiln.h (KILN_DTYPE_MAP, KILN_BINARY_OP_MAP,
 * KILN_UNARY_OP_MAP, KILN_REDUCE_OP_MAP) and, per dtype <name>, KILN_IF_<name>(x) and
 * KILN_STORE_AS_<name>(p, i, v), so kernels instantiate from the same lines as the C enums.
 * Defines the element-type slots that ops select with -D options (see lib/dtype.c,
 * kiln__dtype_defines):
 *   KILN_T / KILN_TC   storage and compute type of slot T (also U and O), with
 *   KILN_T_HALF        set when T is stored as f16 (computed in float via vload/vstore_half)
 *   KILN_T_BF16        set when T is stored as bf16 (ushort bits, computed in float)
 *   KILN_T_NARROW      set by this file when either is
 *   LOAD_T(p, i), STORE_T(p, i, v)   element access for the slot (LOAD_U/STORE_U, LOAD_O/...)
 * and KILN_HAS_FP64 / KILN_HAS_FP16 from the device's capabilities. OpenCL C 1.2 only. */
#ifdef KILN_HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* f16 storage, element by element (global memory):
 *   KILN_HALF_LOAD(i, p)       element i of p as a float
 *   KILN_HALF_STORE(v, i, p)   float v rounded to nearest even into element i of p
 *   KILN_HALF_ROUND(v)         float v rounded to f16 and back
 * GPUs convert in hardware through vload_half/vstore_half. On CPU devices (KILN_CPU_DEVICE, set
 * by lib/program.c) PoCL makes each scalar vload_half/vstore_half a call that it does not
 * vectorize across work-items: an f16 add ran at 0.5 G elements/s against 2.8 for f32 (issue 25).
 * There the conversions are integer arithmetic on the 16 bits (lib/halfconv.c's, tested against
 * the host's), which it vectorizes: 3.7 G elements/s. */
#ifdef KILN_CPU_DEVICE
float kiln_h2f(ushort h)
{
    uint sign = (uint)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint normal = (em << 13) + (112u << 23);         /* rebias the exponent (127 - 15) */
    uint sub = as_uint((float)em * 0x1p-24f);        /* zero and subnormals: exact */
    uint special = 0x7f800000u | ((em & 0x3ffu) << 13); /* infinity, NaN with its payload */
    return as_float(sign | (em >= 0x7c00u ? special : em >= 0x0400u ? normal : sub));
}
ushort kiln_f2h(float f)
{
    uint x = as_uint(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    /* normal: rebias, round the 13 dropped bits to nearest even (a carry is right) */
    uint normal = (ax + ((uint)(15 - 127) << 23) + 0xfffu + ((ax >> 13) & 1u)) >> 13;
    /* below 2^-14: adding 0.5 leaves the value's units of 2^-24 in the low bits, rounded by
     * the FPU to nearest even */
    uint sub = as_uint(as_float(ax) + 0.5f) - as_uint(0.5f);
    uint r = ax < 0x38800000u ? sub : normal;
    r = ax >= 0x477ff000u ? 0x7c00u : r;                      /* 65520 and above: infinity */
    r = ax > 0x7f800000u ? (0x7e00u | ((ax >> 13) & 0x3ffu)) : r; /* NaN: quiet */
    return (ushort)(sign | r);
}
#define KILN_HALF_LOAD(i, p) kiln_h2f(((const global ushort *)(p))[(i)])
#define KILN_HALF_STORE(v, i, p) (((global ushort *)(p))[(i)] = kiln_f2h(v))
#define KILN_HALF_ROUND(v) kiln_h2f(kiln_f2h(v))
#else
float kiln_half_round(float v)
{
    ushort h;
    vstore_half(v, 0, (private half *)&h);
    return vload_half(0, (private half *)&h);
}
#define KILN_HALF_LOAD(i, p) vload_half((i), (p))
#define KILN_HALF_STORE(v, i, p) vstore_half((v), (i), (p))
#define KILN_HALF_ROUND(v) kiln_half_round(v)
#endif

/* A float or (with fp64) double value rounded to f16 once, as vstore_half rounds either: a
 * double goes to float toward zero with a sticky last bit (round to odd), which then rounds to
 * f16 as the double would. */
#ifdef KILN_HAS_FP64
float kiln_f64_to_f32_odd(double x)
{
    float f = convert_float_rtz(x);
    return (double)f != x && !isnan(x) ? as_float(as_uint(f) | 1u) : f;
}
#define KILN_HALF_STORE_ANY(v, i, p)                                                              \
    KILN_HALF_STORE(sizeof(v) == 8 ? kiln_f64_to_f32_odd(v) : (float)(v), (i), (p))
#else
#define KILN_HALF_STORE_ANY(v, i, p) KILN_HALF_STORE((float)(v), (i), (p))
#endif

/* bf16 storage: the top 16 bits of an f32, held in a ushort (OpenCL C has no bfloat16 type).
 * Loads shift; stores round to nearest even with integer arithmetic (lib/halfconv.c's
 * kiln__f32_to_bf16, the same steps); NaN stays a quiet NaN. The same code on every device:
 * no extension, and PoCL vectorizes it. */
ushort kiln_f2bf(float f)
{
    uint x = as_uint(f);
    ushort r = (ushort)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    return (x & 0x7fffffffu) > 0x7f800000u ? (ushort)((x >> 16) | 0x40u) : r;
}
#define KILN_BF16_LOAD(i, p) as_float((uint)((const global ushort *)(p))[(i)] << 16)
#define KILN_BF16_STORE(v, i, p) (((global ushort *)(p))[(i)] = kiln_f2bf(v))
#define KILN_BF16_ROUND(v) as_float((uint)kiln_f2bf(v) << 16)
#ifdef KILN_HAS_FP64
#define KILN_BF16_STORE_ANY(v, i, p)                                                              \
    KILN_BF16_STORE(sizeof(v) == 8 ? kiln_f64_to_f32_odd(v) : (float)(v), (i), (p))
#else
#define KILN_BF16_STORE_ANY(v, i, p) KILN_BF16_STORE((float)(v), (i), (p))
#endif

#if defined(KILN_T_HALF) || defined(KILN_T_BF16)
#define KILN_T_NARROW 1
#endif
#if defined(KILN_U_HALF) || defined(KILN_U_BF16)
#define KILN_U_NARROW 1
#endif
#if defined(KILN_O_HALF) || defined(KILN_O_BF16)
#define KILN_O_NARROW 1
#endif

#ifdef KILN_T
#ifdef KILN_T_HALF
#define LOAD_T(p, i) KILN_HALF_LOAD((i), (p))
#define STORE_T(p, i, v) KILN_HALF_STORE((float)(v), (i), (p))
#elif defined(KILN_T_BF16)
#define LOAD_T(p, i) KILN_BF16_LOAD((i), (p))
#define STORE_T(p, i, v) KILN_BF16_STORE((float)(v), (i), (p))
#else
#define LOAD_T(p, i) ((KILN_TC)(p)[(i)])
#define STORE_T(p, i, v) ((p)[(i)] = (KILN_T)(v))
#endif
#endif

#ifdef KILN_U
#ifdef KILN_U_HALF
#define LOAD_U(p, i) KILN_HALF_LOAD((i), (p))
#define STORE_U(p, i, v) KILN_HALF_STORE((float)(v), (i), (p))
#elif defined(KILN_U_BF16)
#define LOAD_U(p, i) KILN_BF16_LOAD((i), (p))
#define STORE_U(p, i, v) KILN_BF16_STORE((float)(v), (i), (p))
#else
#define LOAD_U(p, i) ((KILN_UC)(p)[(i)])
#define STORE_U(p, i, v) ((p)[(i)] = (KILN_U)(v))
#endif
#endif

#ifdef KILN_O
#ifdef KILN_O_HALF
#define LOAD_O(p, i) KILN_HALF_LOAD((i), (p))
#define STORE_O(p, i, v) KILN_HALF_STORE((float)(v), (i), (p))
#elif defined(KILN_O_BF16)
#define LOAD_O(p, i) KILN_BF16_LOAD((i), (p))
#define STORE_O(p, i, v) KILN_BF16_STORE((float)(v), (i), (p))
#else
#define LOAD_O(p, i) ((KILN_OC)(p)[(i)])
#define STORE_O(p, i, v) ((p)[(i)] = (KILN_O)(v))
#endif
#endif

/* Grid-stride loops, which every built-in kernel uses for every NDRange dimension: the host
 * caps each built-in launch (lib/launch.c: at most 2^30 work-items in dimension 0, 65535
 * work-groups in dimensions 1 and 2, where NVIDIA's global ids and grid sizes stop), so a
 * work-item covers ids id, id + size, id + 2 size, ... below n.
 *   KILN_FOR(i, d, n)        long i over global ids of dimension d
 *   KILN_FOR_GROUP(g, d, n)  long g over work-group ids of dimension d (the same for every
 *                            work-item of a group, so barriers inside stay uniform)
 * With KILN_NO_SPLIT (CPU devices, whose launches are never capped: kiln__launch_splits) each
 * runs its body at most once, a loop the compiler deletes: PoCL vectorizes across work-items
 * only when the kernel has no loop of its own. */
#ifdef KILN_NO_SPLIT
#define KILN_FOR(i, d, n) for (long i = (long)get_global_id(d); i < (n); i = (n))
#define KILN_FOR_GROUP(g, d, n) for (long g = (long)get_group_id(d); g < (n); g = (n))
#else
#define KILN_FOR(i, d, n)                                                                     \
    for (long i = (long)get_global_id(d); i < (n); i += (long)get_global_size(d))
#define KILN_FOR_GROUP(g, d, n)                                                               \
    for (long g = (long)get_group_id(d); g < (n); g += (long)get_num_groups(d))
#endif

/* The device error word (lib/queue.h): the first kernel to meet bad data writes the op's code,
 * the kind (an index, a loss's class label, a one-hot class), the value, its position and the
 * end of the valid range; later reports, until the host has read and cleared it, change
 * nothing. */
#define KILN_ERROR_INDEX 1
#define KILN_ERROR_LABEL 2
#define KILN_ERROR_CLASS 3
void kiln_report(global int *kerr, int code, int kind, long value, long position, long end)
{
    if (atomic_cmpxchg((volatile global int *)kerr, 0, code) == 0) {
        kerr[1] = kind;
        global long *w = (global long *)(kerr + 2);
        w[0] = value;
        w[1] = position;
        w[2] = end;
    }
}
