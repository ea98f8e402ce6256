/* matmul.cl - kiln_matmul_tiled: batched C = op(A) * op(B) with local-memory tiles.
 * Expects KILN_T/KILN_TC (prelude.cl slot T, f32 or f64), KILN_MM_TS (tile edge, a multiple of
 * KILN_MM_WPT) and KILN_MM_WPT (outputs per work-item along each axis). Launched with local size
 * (TS/WPT, TS/WPT, 1) and global (ceil(N/TS)*TS/WPT, ceil(M/TS)*TS/WPT, batch): every work-item
 * of a group takes part in every barrier, and loads and stores are bounds-checked instead.
 * Transposes are strides: A(i, p) = A[i*sar + p*sac], B(p, j) = B[p*sbr + j*sbc]. Large
 * products come in several launches (NVIDIA limits grid dimensions 1 and 2 to 65535 groups):
 * group0 and batch0 are the first row group and batch entry of this launch. */

#ifndef KILN_MM_TS
#define KILN_MM_TS 16
#endif
#ifndef KILN_MM_WPT
#define KILN_MM_WPT 1
#endif
#define KILN_MM_RTS (KILN_MM_TS / KILN_MM_WPT)

__kernel void kiln_matmul_tiled(__global const KILN_T *A, __global const KILN_T *B,
                                __global KILN_T *C, int M, int N, int K, long sar, long sac,
                                long sbr, long sbc, long bsa, long bsb, long bsc, int group0,
                                long batch0)
{
    /* The +1 column keeps work-items that read one column of a tile on different banks. */
    __local KILN_TC As[KILN_MM_TS][KILN_MM_TS + 1];
    __local KILN_TC Bs[KILN_MM_TS][KILN_MM_TS + 1];
    const int tc = (int)get_local_id(0), tr = (int)get_local_id(1);
    const int row0 = ((int)get_group_id(1) + group0) * KILN_MM_TS;
    const int col0 = (int)get_group_id(0) * KILN_MM_TS;
    const long bi = batch0 + (long)get_global_id(2);
    A += bi * bsa;
    B += bi * bsb;
    C += bi * bsc;

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
        /* The next iteration overwrites the tiles: wait until everyone has read them. */
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
