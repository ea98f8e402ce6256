/* prelude.cl - prepended to every built-in kernel source. At build time lib/kernels/embed.py
 * puts in front of it the X-macro tables of include/kiln.h (KILN_DTYPE_MAP, KILN_BINARY_OP_MAP,
 * KILN_UNARY_OP_MAP, KILN_REDUCE_OP_MAP) and, per dtype <name>, KILN_IF_<name>(x) and
 * KILN_STORE_AS_<name>(p, i, v), so kernels instantiate from the same lines as the C enums.
 * Defines the element-type slots that ops select with -D options (see lib/dtype.c,
 * kiln__dtype_defines):
 *   KILN_T / KILN_TC   storage and compute type of slot T (also U and O), with
 *   KILN_T_HALF        set when T is stored as f16 (computed in float via vload/vstore_half)
 *   LOAD_T(p, i), STORE_T(p, i, v)   element access for the slot (LOAD_U/STORE_U, LOAD_O/...)
 * and KILN_HAS_FP64 / KILN_HAS_FP16 from the device's capabilities. OpenCL C 1.2 only. */
#ifdef KILN_HAS_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#ifdef KILN_T
#ifdef KILN_T_HALF
#define LOAD_T(p, i) vload_half((i), (p))
#define STORE_T(p, i, v) vstore_half((float)(v), (i), (p))
#else
#define LOAD_T(p, i) ((KILN_TC)(p)[(i)])
#define STORE_T(p, i, v) ((p)[(i)] = (KILN_T)(v))
#endif
#endif

#ifdef KILN_U
#ifdef KILN_U_HALF
#define LOAD_U(p, i) vload_half((i), (p))
#define STORE_U(p, i, v) vstore_half((float)(v), (i), (p))
#else
#define LOAD_U(p, i) ((KILN_UC)(p)[(i)])
#define STORE_U(p, i, v) ((p)[(i)] = (KILN_U)(v))
#endif
#endif

#ifdef KILN_O
#ifdef KILN_O_HALF
#define LOAD_O(p, i) vload_half((i), (p))
#define STORE_O(p, i, v) vstore_half((float)(v), (i), (p))
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
