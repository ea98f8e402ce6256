/* reduce.cl - reductions of x viewed as [outer, n, inner] over n, one result per (outer, inner),
 * built one kernel per program (every kernel in a KILN_ONLY guard, lib/kernels/embed.py):
 *   kiln_reduce_wg       one work-group per chunk of one row: per-work-item accumulation, then a
 *                        tree in local memory; writes per-chunk partials (ps, pc, pi)
 *   kiln_reduce_combine  one work-item per result over its partials, writes out (slot O)
 *   kiln_reduce_rows     one work-item per result and chunk of its row (GPUs: neighbouring
 *                        work-items read neighbouring columns)
 *   kiln_reduce_cols     one work-item per block of up to 256 neighbouring results and chunk of
 *                        rows, in vectors of 8 (CPUs, inner > 1)
 *   kiln_reduce_vrows    one work-item per chunk of a contiguous row, in vectors of 8 (CPUs,
 *                        inner == 1)
 *   The last three write out (slot O) when nchunks == 1, else partials for the combine step.
 *   kiln_reduce_combine_idx / _rows_idx / _cols_idx / _vrows_idx   as above, writing the index
 *                        (long)
 * Macros: KILN_T (input, slot T), KILN_O (output, slot O), KILN_ACC (accumulator type),
 * KILN_ACC_FLOAT when KILN_ACC is float or double, and KILN_RED_ADD (sum; run-time flag `mean`
 * divides by `count`) or KILN_RED_CMP (max, min via run-time flag `is_min`, argmax).
 * Float sums carry a compensation term (TwoSum) through every step after blocks of plain adds
 * (four elements in the GPU kernels, two roundings; eight vectors in the CPU kernels, three), so
 * the error of a sum stays within 3 eps * sum |x| + eps * |sum| (+ n eps^2 terms).
 * NaN: sums and max/min propagate NaN; argmax/argmin take the first NaN as the extreme.
 * The input is read through KILN_X_PARAMS (the kernels' first parameters) and KILN_LOAD(x, i)
 * (element i, flat): by default x and LOAD_T. A pending elementwise chain folded into the
 * reduction (lib/fusion.c, kiln__fusion_fold) defines them as the chain's leaves and a call of
 * the function that computes the chain at i, so its result is never stored. */

#pragma OPENCL FP_CONTRACT OFF

#ifndef KILN_X_PARAMS
#define KILN_X_PARAMS global const KILN_T *x
#define KILN_LOAD(p, i) LOAD_T(p, i)
#define KILN_X_DIRECT 1
#else
/* A generated program: prelude.cl came before this program's defines, so the output slot's
 * store is defined here. */
#ifdef KILN_O_HALF
#define STORE_O(p, i, v) KILN_HALF_STORE((float)(v), (i), (p))
#elif defined(KILN_O_BF16)
#define STORE_O(p, i, v) KILN_BF16_STORE((float)(v), (i), (p))
#else
#define STORE_O(p, i, v) ((p)[(i)] = (KILN_O)(v))
#endif
#endif

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
            KILN_ACC b_ = ((KILN_ACC)KILN_LOAD(x, (base) + j_ * (inner)) +                         \
                           (KILN_ACC)KILN_LOAD(x, (base) + (j_ + (step)) * (inner))) +             \
                          ((KILN_ACC)KILN_LOAD(x, (base) + (j_ + 2 * (step)) * (inner)) +          \
                           (KILN_ACC)KILN_LOAD(x, (base) + (j_ + 3 * (step)) * (inner)));          \
            KILN_ADD(s, c, b_, (KILN_ACC)0);                                                    \
        }                                                                                       \
        for (; j_ < (end); j_ += (step))                                                        \
            KILN_ADD(s, c, (KILN_ACC)KILN_LOAD(x, (base) + j_ * (inner)), (KILN_ACC)0);            \
    } while (0)
#else
#define KILN_ACCUMULATE(x, base, inner, start, end, step, s, c, idx, is_min)                    \
    do {                                                                                        \
        for (long j_ = (start); j_ < (end); j_ += (step)) {                                     \
            KILN_ACC v_ = (KILN_ACC)KILN_LOAD(x, (base) + j_ * (inner));                           \
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
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_wg)
kernel void kiln_reduce_wg(KILN_X_PARAMS, global KILN_ACC *ps, global KILN_ACC *pc,
                           global long *pi, long outer, long n, long inner, long chunk,
                           long nchunks, int is_min, local KILN_ACC *ls,
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
                /* neighbouring work-items read neighbouring elements */
                KILN_ACCUMULATE(x, base, inner, j0 + lid, j1, (long)L, s, c, idx, is_min);
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
#endif

#ifdef KILN_RED_ADD
#define KILN_RESULT(s, c, idx, count, mean) ((mean) ? KILN_SUM_RESULT(s, c) / (count) \
                                                     : KILN_SUM_RESULT(s, c))
#else
#define KILN_RESULT(s, c, idx, count, mean) (s)
#endif
#define KILN_RESULT_IDX(s, c, idx, count, mean) (idx)

/* Where a work-item's result goes: with one chunk per row the result itself into out[r] (at
 * instantiation, OUT_STORE), otherwise the partial (s, c, idx) of chunk g for the combine step. */
#define KILN_STORE_RESULT(out, ps, pc, pi, r, g, nchunks, value, s, c, idx)                    \
    do {                                                                                        \
        if ((nchunks) == 1) {                                                                   \
            OUT_STORE(out, r, value);                                                           \
        } else {                                                                                \
            long p_ = (r) * (nchunks) + (g);                                                    \
            ps[p_] = (s);                                                                       \
            pc[p_] = (c);                                                                       \
            pi[p_] = (idx);                                                                     \
        }                                                                                       \
    } while (0)

/* Launched over [inner, nchunks, outer] (capped: KILN_FOR loops; padded: bounds-checked); each
 * work-item folds rows j0 .. j1 of chunk g of its column. Neighbouring work-items read
 * neighbouring elements (GPUs). With nchunks > 1, ps/pc/pi get partials; else out the result. */
#define KILN_ROWS_KERNEL(name, OUT_T, RESULT)                                                   \
    kernel void name(KILN_X_PARAMS, global OUT_T *out, global KILN_ACC *ps,            \
                     global KILN_ACC *pc, global long *pi, long outer, long n, long inner,      \
                     long chunk, long nchunks, int is_min, int mean)                            \
    {                                                                                           \
        KILN_FOR(o, 2, outer) {                                                                 \
            KILN_FOR(g, 1, nchunks) {                                                           \
                KILN_FOR(i, 0, inner) {                                                         \
                    long base = o * n * inner + i;                                              \
                    long j0 = g * chunk, j1 = min(n, j0 + chunk);                               \
                    KILN_ACC s, c;                                                              \
                    long idx;                                                                   \
                    KILN_INIT(s, c, idx, is_min);                                               \
                    KILN_ACCUMULATE(x, base, inner, j0, j1, 1, s, c, idx, is_min);              \
                    (void)mean;                                                                 \
                    KILN_STORE_RESULT(out, ps, pc, pi, o * inner + i, g, nchunks,               \
                                      RESULT(s, c, idx, n, mean), s, c, idx);                   \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
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

/* ---- CPU kernels: vectors of 8 accumulators (KILN_ACCV), lane-wise the same steps as the
 * scalar ones, merged lane by lane at the end. PoCL does not vectorize across work-items in a
 * kernel with loops of its own, so these vectorize by hand. */
#define KILN_PASTE_(a, b) a##b
#define KILN_PASTE(a, b) KILN_PASTE_(a, b)
#define KILN_ACCV KILN_PASTE(KILN_ACC, 8)
#ifndef KILN_X_DIRECT /* a folded chain: eight values computed one by one */
#define KILN_LOADV(p, i)                                                                        \
    ((KILN_ACCV)((KILN_ACC)KILN_LOAD(p, (i)), (KILN_ACC)KILN_LOAD(p, (i) + 1),                  \
                 (KILN_ACC)KILN_LOAD(p, (i) + 2), (KILN_ACC)KILN_LOAD(p, (i) + 3),              \
                 (KILN_ACC)KILN_LOAD(p, (i) + 4), (KILN_ACC)KILN_LOAD(p, (i) + 5),              \
                 (KILN_ACC)KILN_LOAD(p, (i) + 6), (KILN_ACC)KILN_LOAD(p, (i) + 7)))
#elif defined(KILN_T_HALF)
#define KILN_LOADV(p, i)                                                                        \
    ((float8)(KILN_HALF_LOAD((i), (p)), KILN_HALF_LOAD((i) + 1, (p)),                          \
              KILN_HALF_LOAD((i) + 2, (p)), KILN_HALF_LOAD((i) + 3, (p)),                       \
              KILN_HALF_LOAD((i) + 4, (p)), KILN_HALF_LOAD((i) + 5, (p)),                       \
              KILN_HALF_LOAD((i) + 6, (p)), KILN_HALF_LOAD((i) + 7, (p))))
#elif defined(KILN_T_BF16) /* the eight bit patterns shifted into the top halves at once */
#define KILN_LOADV(p, i) as_float8(convert_uint8(vload8(0, (p) + (i))) << 16)
#else
#define KILN_LOADV(p, i) KILN_PASTE(convert_, KILN_ACCV)(vload8(0, (p) + (i)))
#endif
#ifdef KILN_ACC_FLOAT
#define KILN_ISNANV(a) isnan(a)
#else
#define KILN_ISNANV(a) ((a) != (a))
#endif
/* Lane-wise KILN_BEATS: a mask of the comparison's integer vector type. */
#define KILN_BEATSV(a, b, is_min)                                                               \
    (((is_min) ? (a) < (b) : (a) > (b)) | (KILN_ISNANV(a) & ~KILN_ISNANV(b)))

/* Fold vector v (elements at indices jv) into lanes (s, c, iv). Compares keep the earlier
 * element on ties: the lanes start from their first elements, so strictly
 * better is enough. */
#ifdef KILN_RED_ADD
#define KILN_FOLDV(s, c, iv, v, jv, is_min)                                                     \
    do {                                                                                        \
        KILN_ACCV v_ = (v);                                                                     \
        KILN_ACCV t_ = (s) + v_;                                                                \
        KILN_ACCV bb_ = t_ - (s);                                                               \
        (c) = (c) + (((s) - (t_ - bb_)) + (v_ - bb_));                                          \
        (s) = t_;                                                                               \
    } while (0)
#ifndef KILN_ACC_FLOAT
#undef KILN_FOLDV
#define KILN_FOLDV(s, c, iv, v, jv, is_min) ((s) += (v))
#endif
#else
#define KILN_FOLDV(s, c, iv, v, jv, is_min)                                                     \
    do {                                                                                        \
        KILN_ACCV v_ = (v);                                                                     \
        (iv) = select((iv), (jv), convert_long8(KILN_BEATSV(v_, s, is_min)));                   \
        (s) = select((s), v_, KILN_BEATSV(v_, s, is_min));                                      \
    } while (0)
#endif

/* Fold lanes (sv, cv, iv) into the scalar (s, c, idx). Sums: halves added by TwoSum in
 * vectors of 4, then 2 (eight scalar steps through private arrays cost a 512-element row a
 * fifth of its time on PoCL). */
#ifdef KILN_RED_ADD
#define KILN_MERGE_LANES(s, c, idx, sv, cv, iv, is_min)                                         \
    do {                                                                                        \
        KILN_PASTE(KILN_ACC, 4) s4_ = (sv).lo, c4_ = (cv).lo + (cv).hi;                         \
        KILN_PASTE(KILN_ACC, 4) t4_ = s4_ + (sv).hi, b4_ = t4_ - s4_;                           \
        c4_ += (s4_ - (t4_ - b4_)) + ((sv).hi - b4_);                                           \
        KILN_PASTE(KILN_ACC, 2) s2_ = t4_.lo, c2_ = c4_.lo + c4_.hi;                            \
        KILN_PASTE(KILN_ACC, 2) t2_ = s2_ + t4_.hi, b2_ = t2_ - s2_;                            \
        c2_ += (s2_ - (t2_ - b2_)) + (t4_.hi - b2_);                                            \
        KILN_MERGE(s, c, idx, t2_.x, c2_.x, 0, is_min);                                         \
        KILN_MERGE(s, c, idx, t2_.y, c2_.y, 0, is_min);                                         \
    } while (0)
#else
#define KILN_MERGE_LANES(s, c, idx, sv, cv, iv, is_min)                                         \
    do {                                                                                        \
        KILN_ACC as_[8], ac_[8];                                                                \
        long ai_[8];                                                                            \
        vstore8((sv), 0, as_);                                                                  \
        vstore8((cv), 0, ac_);                                                                  \
        vstore8((iv), 0, ai_);                                                                  \
        for (int k_ = 0; k_ < 8; k_++)                                                          \
            KILN_MERGE(s, c, idx, as_[k_], ac_[k_], ai_[k_], is_min);                           \
    } while (0)
#endif

/* Launched over [nchunks, outer] (capped: KILN_FOR loops; padded): the work-item folds elements
 * j0 .. j1 of contiguous row o (inner == 1), 64 at a time for sums (eight vectors added
 * plainly, then one compensated step: KILN_VROW_BLOCKS), then 8 at a time (compares: 8 at a
 * time throughout); chunks shorter than 32 and the last elements one at a time. */
#define KILN_VROWS_KERNEL(name, OUT_T, RESULT)                                                  \
    kernel void name(KILN_X_PARAMS, global OUT_T *out, global KILN_ACC *ps,            \
                     global KILN_ACC *pc, global long *pi, long outer, long n, long chunk,      \
                     long nchunks, int is_min, int mean)                                        \
    {                                                                                           \
        KILN_FOR(o, 1, outer) {                                                                 \
            KILN_FOR(g, 0, nchunks) {                                                           \
                long base = o * n, j0 = g * chunk, j1 = min(n, j0 + chunk), j = j0;             \
                KILN_ACC s, c;                                                                  \
                long idx;                                                                       \
                KILN_INIT(s, c, idx, is_min);                                                   \
                if (j1 - j0 >= 32) { /* shorter: merging the lanes costs more than it saves */  \
                    long8 lane = (long8)(0, 1, 2, 3, 4, 5, 6, 7);                               \
                    KILN_ACCV sv = KILN_VROW_FIRST(x, base + j), cv = 0;                        \
                    long8 iv = lane + j;                                                        \
                    j += KILN_VROW_START;                                                       \
                    KILN_VROW_BLOCKS(x, base, j, j1, sv, cv, iv, is_min);                       \
                    for (; j + 8 <= j1; j += 8)                                                 \
                        KILN_FOLDV(sv, cv, iv, KILN_LOADV(x, base + j), lane + j, is_min);      \
                    KILN_MERGE_LANES(s, c, idx, sv, cv, iv, is_min);                            \
                }                                                                               \
                KILN_ACCUMULATE(x, base, 1, j, j1, 1, s, c, idx, is_min);                       \
                (void)mean;                                                                     \
                KILN_STORE_RESULT(out, ps, pc, pi, o, g, nchunks, RESULT(s, c, idx, n, mean),   \
                                  s, c, idx);                                                   \
            }                                                                                   \
        }                                                                                       \
    }

/* Compare lanes start from the first elements, sum lanes of rows from zero (column blocks
 * from their first row). Sums then add blocks of eight vectors (64 elements of a row, eight
 * rows of a column block) plainly, as four independent pairs and a tree (three roundings),
 * before one compensated step;
 * compares go one vector at a time. A compensated step every four vectors held the row kernel
 * to half an OpenMP loop's speed (measured with a raw OpenCL harness on PoCL: blocks of eight
 * ran 1.7-2x faster, level with plain sums). The row's block is a loop over two steps, not
 * straight code: PoCL's LLVM split the straight form's vectors into 2-wide pieces (vmovsd
 * loads, xmm adds), again half the speed. */
#ifdef KILN_RED_ADD
/* Sums start from zero, so whole blocks run from the chunk's first element. */
#define KILN_VROW_FIRST(x, i) ((KILN_ACCV)0)
#define KILN_VROW_START 0
#define KILN_VROW_BLOCKS(x, base, j, j1, sv, cv, iv, is_min)                                    \
    for (; (j) + 64 <= (j1); (j) += 64) {                                                       \
        KILN_ACCV a0_ = 0, a1_ = 0, a2_ = 0, a3_ = 0;                                           \
        for (int b_ = 0; b_ < 64; b_ += 32) {                                                   \
            a0_ += KILN_LOADV(x, (base) + (j) + b_);                                            \
            a1_ += KILN_LOADV(x, (base) + (j) + b_ + 8);                                        \
            a2_ += KILN_LOADV(x, (base) + (j) + b_ + 16);                                       \
            a3_ += KILN_LOADV(x, (base) + (j) + b_ + 24);                                       \
        }                                                                                       \
        KILN_FOLDV(sv, cv, iv, (a0_ + a1_) + (a2_ + a3_), iv, is_min);                          \
    }
#define KILN_COL_BLOCKS(x, p, inner, j, j1, m, mv, s, c, idx, is_min)                         \
    for (; (j) + 8 <= (j1); (j) += 8) {                                                         \
        long q_ = (p) + (j) * (inner);                                                          \
        for (int k = 0; k < (mv); k += 8) {                                                     \
            KILN_ACCV sv = vload8(0, (s) + k), cv = vload8(0, (c) + k);                         \
            KILN_ACCV a0_ = 0, a1_ = 0, a2_ = 0, a3_ = 0;                                       \
            for (int b_ = 0; b_ < 8; b_ += 4) { /* a loop: see KILN_VROW_BLOCKS */              \
                long r_ = q_ + b_ * (inner) + k;                                                \
                a0_ += KILN_LOADV(x, r_);                                                       \
                a1_ += KILN_LOADV(x, r_ + (inner));                                             \
                a2_ += KILN_LOADV(x, r_ + 2 * (inner));                                         \
                a3_ += KILN_LOADV(x, r_ + 3 * (inner));                                         \
            }                                                                                   \
            KILN_FOLDV(sv, cv, sv, (a0_ + a1_) + (a2_ + a3_), sv, is_min);                      \
            vstore8(sv, 0, (s) + k);                                                            \
            vstore8(cv, 0, (c) + k);                                                            \
        }                                                                                       \
        for (int k = (mv); k < (m); k++) {                                                      \
            KILN_ACC b_ = (((KILN_ACC)KILN_LOAD(x, q_ + k) +                                    \
                            (KILN_ACC)KILN_LOAD(x, q_ + 4 * (inner) + k)) +                     \
                           ((KILN_ACC)KILN_LOAD(x, q_ + (inner) + k) +                          \
                            (KILN_ACC)KILN_LOAD(x, q_ + 5 * (inner) + k))) +                    \
                          (((KILN_ACC)KILN_LOAD(x, q_ + 2 * (inner) + k) +                      \
                            (KILN_ACC)KILN_LOAD(x, q_ + 6 * (inner) + k)) +                     \
                           ((KILN_ACC)KILN_LOAD(x, q_ + 3 * (inner) + k) +                      \
                            (KILN_ACC)KILN_LOAD(x, q_ + 7 * (inner) + k)));                     \
            KILN_ADD((s)[k], (c)[k], b_, (KILN_ACC)0);                                          \
        }                                                                                       \
    }                                                                                           \
    for (; (j) + 4 <= (j1); (j) += 4) {                                                         \
        long q_ = (p) + (j) * (inner);                                                          \
        for (int k = 0; k < (mv); k += 8) {                                                     \
            KILN_ACCV sv = vload8(0, (s) + k), cv = vload8(0, (c) + k);                         \
            KILN_FOLDV(sv, cv, sv,                                                              \
                       (KILN_LOADV(x, q_ + k) + KILN_LOADV(x, q_ + (inner) + k)) +              \
                           (KILN_LOADV(x, q_ + 2 * (inner) + k) +                               \
                            KILN_LOADV(x, q_ + 3 * (inner) + k)),                               \
                       sv, is_min);                                                             \
            vstore8(sv, 0, (s) + k);                                                            \
            vstore8(cv, 0, (c) + k);                                                            \
        }                                                                                       \
        for (int k = (mv); k < (m); k++) {                                                      \
            KILN_ACC b_ = ((KILN_ACC)KILN_LOAD(x, q_ + k) + (KILN_ACC)KILN_LOAD(x, q_ + (inner) + k)) + \
                          ((KILN_ACC)KILN_LOAD(x, q_ + 2 * (inner) + k) +                          \
                           (KILN_ACC)KILN_LOAD(x, q_ + 3 * (inner) + k));                          \
            KILN_ADD((s)[k], (c)[k], b_, (KILN_ACC)0);                                          \
        }                                                                                       \
    }
#else
#define KILN_VROW_FIRST(x, i) KILN_LOADV(x, i)
#define KILN_VROW_START 8
#define KILN_VROW_BLOCKS(x, base, j, j1, sv, cv, iv, is_min) ((void)0)
#define KILN_COL_BLOCKS(x, p, inner, j, j1, m, mv, s, c, idx, is_min) ((void)0)
#endif

/* Launched over [ceil(inner / width), nchunks, outer] (capped: KILN_FOR loops; padded),
 * inner > 1, width <= KILN_COLS (a multiple of 8 unless it is inner): the work-item folds rows
 * j0 .. j1 of `width` neighbouring columns, streaming
 * each row's stretch in memory order (a work-item per result would walk a column, a cache line
 * per element; a narrow block strides a page per row) into accumulators in private memory,
 * vectors of 8 where the block has them, the last columns (m not a multiple of 8) one by one.
 * Every lane starts from its first row, so compares keep the earlier row on ties. */
#define KILN_COLS 256
#define KILN_COLS_KERNEL(name, OUT_T, RESULT)                                                   \
    kernel void name(KILN_X_PARAMS, global OUT_T *out, global KILN_ACC *ps,            \
                     global KILN_ACC *pc, global long *pi, long outer, long n, long inner,      \
                     long width, long chunk, long nchunks, int is_min, int mean)                \
    {                                                                                           \
        KILN_FOR(o, 2, outer) {                                                                 \
            KILN_FOR(g, 1, nchunks) {                                                           \
                KILN_FOR(q, 0, (inner + width - 1) / width) {                                   \
                    long i0 = q * width, j0 = g * chunk, j1 = min(n, j0 + chunk);               \
                    int m = (int)min(width, inner - i0), mv = m / 8 * 8;                        \
                    long p = o * n * inner + i0;                                                \
                    KILN_ACC s[KILN_COLS], c[KILN_COLS];                                        \
                    long idx[KILN_COLS];                                                        \
                    for (int k = 0; k < m; k++) {                                               \
                        KILN_INIT(s[k], c[k], idx[k], is_min);                                  \
                        if (j1 > j0) {                                                          \
                            s[k] = (KILN_ACC)KILN_LOAD(x, p + j0 * inner + k);                     \
                            idx[k] = j0;                                                        \
                        }                                                                       \
                    }                                                                           \
                    long j = j0 + 1;                                                            \
                    KILN_COL_BLOCKS(x, p, inner, j, j1, m, mv, s, c, idx, is_min);                 \
                    for (; j < j1; j++) {                                                       \
                        for (int k = 0; k < mv; k += 8) {                                       \
                            KILN_ACCV sv = vload8(0, s + k), cv = vload8(0, c + k);             \
                            long8 iv = vload8(0, idx + k);                                      \
                            KILN_FOLDV(sv, cv, iv, KILN_LOADV(x, p + j * inner + k), (long8)j,  \
                                       is_min);                                                 \
                            vstore8(sv, 0, s + k);                                              \
                            vstore8(cv, 0, c + k);                                              \
                            vstore8(iv, 0, idx + k);                                            \
                        }                                                                       \
                        for (int k = mv; k < m; k++) {                                          \
                            KILN_ACC v = (KILN_ACC)KILN_LOAD(x, p + j * inner + k);                \
                            KILN_MERGE(s[k], c[k], idx[k], v, (KILN_ACC)0, j, is_min);          \
                        }                                                                       \
                    }                                                                           \
                    (void)mean;                                                                 \
                    for (int k = 0; k < m; k++)                                                 \
                        KILN_STORE_RESULT(out, ps, pc, pi, o * inner + i0 + k, g, nchunks,      \
                                          RESULT(s[k], c[k], idx[k], n, mean), s[k], c[k],      \
                                          idx[k]);                                              \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    }

#define OUT_STORE(p, k, v) STORE_O(p, k, v)
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_cols)
KILN_COLS_KERNEL(kiln_reduce_cols, KILN_O, KILN_RESULT)
#endif
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_vrows)
KILN_VROWS_KERNEL(kiln_reduce_vrows, KILN_O, KILN_RESULT)
#endif
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_rows)
KILN_ROWS_KERNEL(kiln_reduce_rows, KILN_O, KILN_RESULT)
#endif
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_combine)
KILN_COMBINE_KERNEL(kiln_reduce_combine, KILN_O, KILN_RESULT)
#endif
#undef OUT_STORE

#ifdef KILN_RED_CMP
#define OUT_STORE(p, k, v) ((p)[(k)] = (v))
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_cols_idx)
KILN_COLS_KERNEL(kiln_reduce_cols_idx, long, KILN_RESULT_IDX)
#endif
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_vrows_idx)
KILN_VROWS_KERNEL(kiln_reduce_vrows_idx, long, KILN_RESULT_IDX)
#endif
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_rows_idx)
KILN_ROWS_KERNEL(kiln_reduce_rows_idx, long, KILN_RESULT_IDX)
#endif
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_reduce_combine_idx)
KILN_COMBINE_KERNEL(kiln_reduce_combine_idx, long, KILN_RESULT_IDX)
#endif
#undef OUT_STORE
#endif
