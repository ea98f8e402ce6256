/* matmul.cl - kiln_matmul_tiled: batched C = op(A) * op(B) with local-memory tiles.
 * Expects KILN_T/KILN_TC (prelude.cl slot T: f32, f64, or f16 storage computed in f32), KILN_MM_TS (tile edge, a multiple of
 * KILN_MM_WPT) and KILN_MM_WPT (outputs per work-item along each axis). Launched with local size
 * (TS/WPT, TS/WPT, 1) and global (ceil(N/TS)*TS/WPT, ceil(M/TS)*TS/WPT, batch): every work-item
 * of a group takes part in every barrier, and loads and stores are bounds-checked instead.
 * Transposes are strides: A(i, p) = A[i*sar + p*sac], B(p, j) = B[p*sbr + j*sbc]. Large
 * products come in several launches (NVIDIA limits grid dimensions 1 and 2 to 65535 groups):
 * group0 and batch0 are the first row group and batch entry of this launch, groups and batch
 * its counts; within a launch (capped by the host) work-groups loop over tiles. */

#ifndef KILN_MM_TS
#define KILN_MM_TS 16
#endif
#ifndef KILN_MM_WPT
#define KILN_MM_WPT 1
#endif
#define KILN_MM_RTS (KILN_MM_TS / KILN_MM_WPT)

/* One TS x TS tile of C at (row0, col0). */
void kiln_matmul_tile(__global const KILN_T *A, __global const KILN_T *B, __global KILN_T *C,
                      int M, int N, int K, long sar, long sac, long sbr, long sbc, int row0,
                      int col0, int tr, int tc, __local KILN_TC (*As)[KILN_MM_TS + 1],
                      __local KILN_TC (*Bs)[KILN_MM_TS + 1])
{
    KILN_TC acc[KILN_MM_WPT][KILN_MM_WPT];
    for (int wi = 0; wi < KILN_MM_WPT; wi++)
        for (int wj = 0; wj < KILN_MM_WPT; wj++)
            acc[wi][wj] = (KILN_TC)0;

    for (int t = 0; t < K; t += KILN_MM_TS) {
        for (int wi = 0; wi < KILN_MM_WPT; wi++) {
            for (int wj = 0; wj < KILN_MM_WPT; wj++) {
                const int lr = tr + wi * KILN_MM_RTS, lc = tc + wj * KILN_MM_RTS;
                const int ai = row0 + lr, ap = t + lc;
                As[lr][lc] = (ai < M && ap < K) ? LOAD_T(A, ai * sar + ap * sac) : (KILN_TC)0;
                const int bp = t + lr, bj = col0 + lc;
                Bs[lr][lc] = (bp < K && bj < N) ? LOAD_T(B, bp * sbr + bj * sbc) : (KILN_TC)0;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int p = 0; p < KILN_MM_TS; p++) {
            KILN_TC breg[KILN_MM_WPT];
            for (int wj = 0; wj < KILN_MM_WPT; wj++)
                breg[wj] = Bs[p][tc + wj * KILN_MM_RTS];
            for (int wi = 0; wi < KILN_MM_WPT; wi++) {
                const KILN_TC av = As[tr + wi * KILN_MM_RTS][p];
                for (int wj = 0; wj < KILN_MM_WPT; wj++)
                    acc[wi][wj] += av * breg[wj];
            }
        }
        /* The next iteration (or tile) overwrites the tiles: wait until everyone has read them. */
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int wi = 0; wi < KILN_MM_WPT; wi++) {
        const int i = row0 + tr + wi * KILN_MM_RTS;
        for (int wj = 0; wj < KILN_MM_WPT; wj++) {
            const int j = col0 + tc + wj * KILN_MM_RTS;
            if (i < M && j < N)
                STORE_T(C, (long)i * N + j, acc[wi][wj]);
        }
    }
}

__kernel void kiln_matmul_tiled(__global const KILN_T *A, __global const KILN_T *B,
                                __global KILN_T *C, int M, int N, int K, long sar, long sac,
                                long sbr, long sbc, long bsa, long bsb, long bsc, int group0,
                                int groups, long batch0, long batch)
{
    /* The +1 column keeps work-items that read one column of a tile on different banks. */
    __local KILN_TC As[KILN_MM_TS][KILN_MM_TS + 1];
    __local KILN_TC Bs[KILN_MM_TS][KILN_MM_TS + 1];
    const int tc = (int)get_local_id(0), tr = (int)get_local_id(1);
    /* Capped launches: each work-group loops over batch entries, row and column tiles (the
     * same for all its work-items, so every barrier is reached by all). */
    KILN_FOR(bl, 2, batch) {
        const long bi = batch0 + bl;
        KILN_FOR_GROUP(rg, 1, groups) {
            KILN_FOR_GROUP(cg, 0, (N + KILN_MM_TS - 1) / KILN_MM_TS) {
                kiln_matmul_tile(A + bi * bsa, B + bi * bsb, C + bi * bsc, M, N, K, sar, sac, sbr,
                                 sbc, ((int)rg + group0) * KILN_MM_TS, (int)cg * KILN_MM_TS, tr,
                                 tc, As, Bs);
            }
        }
    }
}
