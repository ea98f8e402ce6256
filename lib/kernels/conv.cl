/* conv.cl - the two data movements of kiln_conv2d (lib/ops/conv.c), whose products are matmuls:
 *   kiln_im2col   cols[g, k, n L + l] = x[n, g Cg + c, oh SH - PH + ki DH, ow SW - PW + kj DW]
 *                 (0 outside x), k = (c KH + ki) KW + kj, l = oh OW + ow, L = OH OW
 *   kiln_col2im   its adjoint: dx[n, c, h, w] = the sum of the cols entries that im2col read
 *                 from (n, c, h, w), gathered by the input element (no atomics, one order)
 * x is [N, C, H, W] in slot T (half storage through LOAD_T/STORE_T), cols [G, Cg KH KW, N L],
 * or with SM (sample-major, groups 1 only) [N, C KH KW, L], whose product with the weight is
 * NCHW already.
 * Dimension 0 of im2col's range runs over the N OH output rows of the image, dimension 1 over
 * the G Cg KH KW rows of cols; each work-item writes its OW columns in a loop, so the index
 * arithmetic (divisions) is paid once per OW elements: on CPU devices the kernel was half of a
 * convolution's time with one work-item per element. (A GPU wants neighbouring work-items on
 * neighbouring columns instead: issue 19's GPU-shaped kernels.) Remainders are written as a - (a / b) b,
 * never with % beside the same division: LLVM then pairs them with a `freeze`, which Oclgrind's
 * uninitialised-value checker cannot run. */

#pragma OPENCL FP_CONTRACT OFF

#ifdef KILN_T
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_im2col)
kernel void kiln_im2col(global const KILN_T *x, global KILN_T *cols, long N, long C, long H,
                        long W, long G, long KH, long KW, long SH, long SW, long PH, long PW,
                        long DH, long DW, long OH, long OW, int SM)
{
    long Cg = C / G, K = Cg * KH * KW, L = OH * OW, NL = N * L;
    KILN_FOR(row, 1, G * K) {
        long gi = row / K, k = row - gi * K, cg = k / (KH * KW), r = k - cg * (KH * KW);
        long ki = r / KW, kj = r - ki * KW, c = gi * Cg + cg;
        KILN_FOR(no, 0, N * OH) {
            long n = no / OH, oh = no - n * OH, h = oh * SH - PH + ki * DH;
            bool hin = h >= 0 && h < H;
            long in0 = ((n * C + c) * H + h) * W;
            long out0 = SM ? (n * K + row) * L + oh * OW : row * NL + n * L + oh * OW;
            for (long ow = 0; ow < OW; ow++) {
                long w = ow * SW - PW + kj * DW;
                STORE_T(cols, out0 + ow,
                        hin && w >= 0 && w < W ? LOAD_T(x, in0 + w) : (KILN_TC)0);
            }
        }
    }
}
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_col2im)
kernel void kiln_col2im(global const KILN_T *cols, global KILN_T *dx, long N, long C, long H,
                        long W, long G, long KH, long KW, long SH, long SW, long PH, long PW,
                        long DH, long DW, long OH, long OW, int SM)
{
    long Cg = C / G, K = Cg * KH * KW, L = OH * OW, NL = N * L;
    KILN_FOR(i, 0, N * C * H * W) {
        long t = i / W, w = i - t * W, t2 = t / H, h = t - t2 * H;
        long n = t2 / C, c = t2 - n * C, gi = c / Cg, cg = c - gi * Cg;
        KILN_TC acc = (KILN_TC)0;
        for (long ki = 0; ki < KH; ki++) {
            long hh = h + PH - ki * DH, oh = hh / SH;
            if (hh < 0 || oh * SH != hh || oh >= OH)
                continue;
            for (long kj = 0; kj < KW; kj++) {
                long ww = w + PW - kj * DW, ow = ww / SW;
                if (ww < 0 || ow * SW != ww || ow >= OW)
                    continue;
                long row = gi * K + (cg * KH + ki) * KW + kj;
                long l = oh * OW + ow;
                acc += LOAD_T(cols, SM ? (n * K + row) * L + l : row * NL + n * L + l);
            }
        }
        STORE_T(dx, i, acc);
    }
}
#endif
#endif
