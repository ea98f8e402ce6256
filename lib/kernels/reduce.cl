/* reduce.cl - reductions of x viewed as [outer, n, inner] over n, one result per (outer, inner):
 *   kiln_reduce_wg       one work-group per chunk of one row: per-work-item accumulation, then a
 *                        tree in local memory; writes per-chunk partials (ps, pc, pi)
 *   kiln_reduce_combine  one work-item per result over its partials, writes out (slot O)
 *   kiln_reduce_rows     one work-item per result, serial over the row, writes out (slot O)
 *   kiln_reduce_cols     the same for 16 neighbouring results per work-item (CPUs)
 *   kiln_reduce_combine_idx / _rows_idx / _cols_idx   as above, writing the index (long)
 * Macros: KILN_T (input, slot T), KILN_O (output, slot O), KILN_ACC (accumulator type),
 * KILN_ACC_FLOAT when KILN_ACC is float or double, and KILN_RED_ADD (sum; run-time flag `mean`
 * divides by `count`) or KILN_RED_CMP (max, min via run-time flag `is_min`, argmax).
 * Float sums carry a compensation term (TwoSum) through every step after blocks of four
 * plain adds, so the error of a sum stays within 2 eps * sum |x| + eps * |sum| (+ n eps^2 terms).
 * NaN: sums and max/min propagate NaN; argmax/argmin take the first NaN as the extreme. */

#pragma OPENCL FP_CONTRACT OFF

#ifdef KILN_ACC_FLOAT
#define KILN_ISNAN(a) isnan(a)
#define KILN_HIGH ((KILN_ACC)INFINITY)
#define KILN_LOW ((KILN_ACC)-INFINITY)
#else
#define KILN_ISNAN(a) 0
#define KILN_HIGH ((KILN_ACC)LONG_MAX)
#define KILN_LOW ((KILN_ACC)LONG_MIN)
#endif

#define KILN_NOIDX LONG_MAX

/* (s, c) += (s2, c2), carrying the rounding error of s + s2 into c. */
#ifdef KILN_ACC_FLOAT
#define KILN_ADD(s, c, s2, c2)                                                                  \
    do {                                                                                        \
        KILN_ACC t_ = (s) + (s2);                                                               \
        KILN_ACC bb_ = t_ - (s);                                                                \
        KILN_ACC e_ = ((s) - (t_ - bb_)) + ((s2) - bb_);                                        \
        (c) = (c) + (c2) + e_;                                                                  \
        (s) = t_;                                                                               \
    } while (0)
#define KILN_SUM_RESULT(s, c) ((isinf(s) || isnan(s)) ? (s) : (s) + (c))
#else
#define KILN_ADD(s, c, s2, c2) ((s) += (s2))
#define KILN_SUM_RESULT(s, c) (s)
#endif

/* Whether a beats b (strictly): larger (smaller with is_min), NaN beating numbers. */
#define KILN_BEATS(a, b, is_min)                                                                \
    ((is_min ? (a) < (b) : (a) > (b)) || (KILN_ISNAN(a) && !KILN_ISNAN(b)))
#define KILN_SAME(a, b) ((a) == (b) || (KILN_ISNAN(a) && KILN_ISNAN(b)))

/* (s, i) = the better of (s, i) and (s2, i2); ties go to the lower index (the first one). */
#define KILN_PICK(s, i, s2, i2, is_min)                                                         \
    do {                                                                                        \
        if (KILN_BEATS(s2, s, is_min) || (KILN_SAME(s2, s) && (i2) < (i))) {                    \
            (s) = (s2);                                                                         \
            (i) = (i2);                                                                         \
        }                                                                                       \
    } while (0)

#ifdef KILN_RED_ADD
#define KILN_INIT(s, c, i, is_min) ((s) = 0, (c) = 0, (i) = 0)
#define KILN_MERGE(s, c, i, s2, c2, i2, is_min) KILN_ADD(s, c, s2, c2)
#else
#define KILN_INIT(s, c, i, is_min) ((s) = (is_min) ? KILN_HIGH : KILN_LOW, (c) = 0, \
                                    (i) = KILN_NOIDX)
#define KILN_MERGE(s, c, i, s2, c2, i2, is_min) KILN_PICK(s, i, s2, i2, is_min)
#endif

/* Fold elements j = start, start + step, ... < end of the row at x + base (element stride
 * inner) into (s, c, idx). Sums add blocks of four with plain adds (two roundings each) before
 * the compensated step, so the dependent chain per element is a quarter as long: the error
 * stays within 2 eps * sum |x| + eps * |sum| (eps the unit roundoff of KILN_ACC). */
#ifdef KILN_RED_ADD
#define KILN_ACCUMULATE(x, base, inner, start, end, step, s, c, idx, is_min)                    \
    do {                                                                                        \
        long j_ = (start);                                                                      \
        for (; j_ + 3 * (step) < (end); j_ += 4 * (step)) {                                     \
            KILN_ACC b_ = ((KILN_ACC)LOAD_T(x, (base) + j_ * (inner)) +                         \
                           (KILN_ACC)LOAD_T(x, (base) + (j_ + (step)) * (inner))) +             \
                          ((KILN_ACC)LOAD_T(x, (base) + (j_ + 2 * (step)) * (inner)) +          \
                           (KILN_ACC)LOAD_T(x, (base) + (j_ + 3 * (step)) * (inner)));          \
            KILN_ADD(s, c, b_, (KILN_ACC)0);                                                    \
        }                                                                                       \
        for (; j_ < (end); j_ += (step))                                                        \
            KILN_ADD(s, c, (KILN_ACC)LOAD_T(x, (base) + j_ * (inner)), (KILN_ACC)0);            \
    } while (0)
#else
#define KILN_ACCUMULATE(x, base, inner, start, end, step, s, c, idx, is_min)                    \
    do {                                                                                        \
        for (long j_ = (start); j_ < (end); j_ += (step)) {                                     \
            KILN_ACC v_ = (KILN_ACC)LOAD_T(x, (base) + j_ * (inner));                           \
            KILN_PICK(s, idx, v_, j_, is_min);                                                  \
        }                                                                                       \
    } while (0)
#endif

/* Partials: one (ps, pc, pi) per chunk g of result r = o * inner + i at r * nchunks + g.
 * Launched over [nchunks * L, inner, outer] with local [L, 1, 1], L a power of two (capped:
 * each work-group loops over chunks, results and rows with KILN_FOR_GROUP / KILN_FOR, the same
 * for all its work-items, so every barrier is reached by all). Rows are indexed by NDRange
 * dimensions rather than by div/rem of one id: LLVM turns a div/rem pair into a `freeze`, which
 * Oclgrind's uninitialised-value checker cannot run. */
kernel void kiln_reduce_wg(global const KILN_T *x, global KILN_ACC *ps, global KILN_ACC *pc,
                           global long *pi, long outer, long n, long inner, long chunk,
                           long nchunks, int is_min, int contig, local KILN_ACC *ls,
                           local KILN_ACC *lc, local long *li)
{
    uint lid = get_local_id(0), L = get_local_size(0);
    KILN_FOR(o, 2, outer) {
        KILN_FOR(i, 1, inner) {
            KILN_FOR_GROUP(g, 0, nchunks) {
                long out = (o * inner + i) * nchunks + g;
                long base = o * n * inner + i;
                long j0 = g * chunk, j1 = min(n, j0 + chunk);
                KILN_ACC s, c;
                long idx;
                KILN_INIT(s, c, idx, is_min);
                if (contig) { /* CPUs: each work-item streams its own contiguous stretch */
                    long per = (j1 - j0 + L - 1) / L;
                    long start = min(j1, j0 + lid * per);
                    KILN_ACCUMULATE(x, base, inner, start, min(j1, start + per), 1, s, c, idx,
                                    is_min);
                } else { /* GPUs: neighbouring work-items read neighbouring elements */
                    KILN_ACCUMULATE(x, base, inner, j0 + lid, j1, (long)L, s, c, idx, is_min);
                }
                ls[lid] = s;
                lc[lid] = c;
                li[lid] = idx;
                barrier(CLK_LOCAL_MEM_FENCE);
                for (uint off = L / 2; off > 0; off /= 2) {
                    if (lid < off) {
                        KILN_MERGE(s, c, idx, ls[lid + off], lc[lid + off], li[lid + off],
                                   is_min);
                        ls[lid] = s;
                        lc[lid] = c;
                        li[lid] = idx;
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
                if (lid == 0) {
                    ps[out] = s;
                    pc[out] = c;
                    pi[out] = idx;
                }
            }
        }
    }
}

#ifdef KILN_RED_ADD
#define KILN_RESULT(s, c, idx, count, mean) ((mean) ? KILN_SUM_RESULT(s, c) / (count) \
                                                     : KILN_SUM_RESULT(s, c))
#else
#define KILN_RESULT(s, c, idx, count, mean) (s)
#endif
#define KILN_RESULT_IDX(s, c, idx, count, mean) (idx)

/* Launched over [inner, outer] (capped: KILN_FOR loops; padded: bounds-checked). */
#define KILN_ROWS_KERNEL(name, OUT_T, RESULT)                                                   \
    kernel void name(global const KILN_T *x, global OUT_T *out, long outer, long n, long inner, \
                     int is_min, int mean)                                                      \
    {                                                                                           \
        KILN_FOR(o, 1, outer) {                                                                 \
            KILN_FOR(i, 0, inner) {                                                             \
                long base = o * n * inner + i;                                                  \
                KILN_ACC s, c;                                                                  \
                long idx;                                                                       \
                KILN_INIT(s, c, idx, is_min);                                                   \
                KILN_ACCUMULATE(x, base, inner, 0, n, 1, s, c, idx, is_min);                    \
                (void)mean;                                                                     \
                OUT_STORE(out, o * inner + i, RESULT(s, c, idx, n, mean));                      \
            }                                                                                   \
        } \
    }

/* Launched over [outputs] (padded: bounds-checked). */
#define KILN_COMBINE_KERNEL(name, OUT_T, RESULT)                                                \
    kernel void name(global const KILN_ACC *ps, global const KILN_ACC *pc,                      \
                     global const long *pi, global OUT_T *out, long outputs, long nchunks,      \
                     long count, int is_min, int mean)                                          \
    {                                                                                           \
        KILN_FOR(r, 0, outputs) {                                                               \
            KILN_ACC s, c;                                                                      \
            long idx;                                                                           \
            KILN_INIT(s, c, idx, is_min);                                                       \
            for (long g = r * nchunks; g < (r + 1) * nchunks; g++)                              \
                KILN_MERGE(s, c, idx, ps[g], pc[g], pi[g], is_min);                             \
            (void)count;                                                                        \
            (void)mean;                                                                         \
            OUT_STORE(out, r, RESULT(s, c, idx, count, mean));                                  \
        }                                                                                       \
    }

/* CPUs with inner >= KILN_COLS: one work-item per KILN_COLS neighbouring results, streaming the
 * rows in memory order (a work-item per result would walk a column, a cache line per element).
 * Launched over [ceil(inner / KILN_COLS), outer] (capped: KILN_FOR loops; padded). */
#define KILN_COLS 16
#define KILN_COLS_KERNEL(name, OUT_T, RESULT)                                                   \
    kernel void name(global const KILN_T *x, global OUT_T *out, long outer, long n, long inner, \
                     int is_min, int mean)                                                      \
    {                                                                                           \
        KILN_FOR(o, 1, outer) {                                                                 \
            KILN_FOR(q, 0, (inner + KILN_COLS - 1) / KILN_COLS) {                               \
                long i0 = q * KILN_COLS;                                                        \
                int m = (int)min((long)KILN_COLS, inner - i0);                                  \
                KILN_ACC s[KILN_COLS], c[KILN_COLS];                                            \
                long idx[KILN_COLS];                                                            \
                for (int k = 0; k < KILN_COLS; k++)                                             \
                    KILN_INIT(s[k], c[k], idx[k], is_min);                                      \
                long base = o * n * inner + i0;                                                 \
                for (long j = 0; j < n; j++) {                                                  \
                    for (int k = 0; k < m; k++) {                                               \
                        KILN_ACC v = (KILN_ACC)LOAD_T(x, base + j * inner + k);                 \
                        KILN_MERGE(s[k], c[k], idx[k], v, (KILN_ACC)0, j, is_min);              \
                    }                                                                           \
                }                                                                               \
                (void)mean;                                                                     \
                for (int k = 0; k < m; k++)                                                     \
                    OUT_STORE(out, o * inner + i0 + k, RESULT(s[k], c[k], idx[k], n, mean));    \
            }                                                                                   \
        }                                                                                       \
    }

#define OUT_STORE(p, k, v) STORE_O(p, k, v)
KILN_COLS_KERNEL(kiln_reduce_cols, KILN_O, KILN_RESULT)
KILN_ROWS_KERNEL(kiln_reduce_rows, KILN_O, KILN_RESULT)
KILN_COMBINE_KERNEL(kiln_reduce_combine, KILN_O, KILN_RESULT)
#undef OUT_STORE

#ifdef KILN_RED_CMP
#define OUT_STORE(p, k, v) ((p)[(k)] = (v))
KILN_COLS_KERNEL(kiln_reduce_cols_idx, long, KILN_RESULT_IDX)
KILN_ROWS_KERNEL(kiln_reduce_rows_idx, long, KILN_RESULT_IDX)
KILN_COMBINE_KERNEL(kiln_reduce_combine_idx, long, KILN_RESULT_IDX)
#undef OUT_STORE
#endif
