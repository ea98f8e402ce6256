/* conv.cl - the two data movements of kiln_conv2d (lib/ops/conv.c), whose products are matmuls
 * (and, further down, the 2-D poolings):
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
        /* no division in the window at stride 1 (64-bit divisions were most of this kernel's
         * time on CPU devices) */
        for (long ki = 0; ki < KH; ki++) {
            long hh = h + PH - ki * DH, oh = SH == 1 ? hh : hh / SH;
            if (hh < 0 || oh * SH != hh || oh >= OH)
                continue;
            for (long kj = 0; kj < KW; kj++) {
                long ww = w + PW - kj * DW, ow = SW == 1 ? ww : ww / SW;
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

/* Pooling over x [NC, H, W] (N C planes), out [NC, OH, OW], launched over [OW, OH, NC] (no
 * divisions): a window of KH x KW from (oh SH - PH, ow SW - PW), padding outside x.
 *   kiln_max_pool2d      the maximum (NaN wins, the first of equals) and its index h W + w in
 *                        the plane (PyTorch's return_indices)
 *   kiln_max_pool2d_values  the maximum alone (no indices asked for: 8 bytes an output less)
 *   kiln_max_pool2d_bw   dx[nc, h, w] = the sum of g over the windows whose maximum is at (h, w),
 *                        found again in x by the forward's own search (kiln_pool_argmax), so
 *                        that autograd keeps x alone, not the indices (8 bytes an output)
 *   kiln_max_pool2d_bw_windows  the same where windows do not overlap (stride >= kernel, as in
 *                        the usual 2x2 pooling), over [OW, OH, NC]: each window's maximum found
 *                        once (the gather above searches each window once per element of it), g
 *                        written there and 0 to the window's other elements; elements in no
 *                        window are left to the caller (zeroed first)
 *   kiln_avg_pool2d      the sum over the window's elements inside x / (KH KW) (PyTorch's
 *                        count_include_pad)
 *   kiln_avg_pool2d_bw   dx[nc, h, w] = the sum of g / (KH KW) over the windows holding (h, w)
 * The backward kernels run over [W, H, NC] and gather (no atomics, one order). */
#ifdef KILN_T
/* The windows o0..o1 (o1 < o0: none) of a pooling that hold position p: o S - P <= p and
 * p <= o S - P + K - 1, within 0..O-1. */
void kiln_pool_windows(long p, long P, long K, long S, long O, long *o0, long *o1)
{
    long a = p + P - K + 1;
    *o0 = a <= 0 ? 0 : (a + S - 1) / S;
    *o1 = (p + P) / S;
    if (*o1 > O - 1)
        *o1 = O - 1;
}

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_max_pool2d) ||                                 \
    defined(KILN_WANT_kiln_max_pool2d_values) || defined(KILN_WANT_kiln_max_pool2d_bw) ||          \
    defined(KILN_WANT_kiln_max_pool2d_bw_windows)
/* The maximum of window (oh, ow) of plane nc into *best and its index h W + w in the plane (-1
 * for a window wholly in the padding): NaN wins, the first of equals in row-major order. */
long kiln_pool_argmax(global const KILN_T *x, long nc, long oh, long ow, long H, long W, long KH,
                      long KW, long SH, long SW, long PH, long PW, KILN_TC *best)
{
    long at = -1;
    *best = (KILN_TC)0;
    for (long i = 0; i < KH; i++) {
        long h = oh * SH - PH + i;
        if (h < 0 || h >= H)
            continue;
        for (long j = 0; j < KW; j++) {
            long w = ow * SW - PW + j;
            if (w < 0 || w >= W)
                continue;
            KILN_TC v = LOAD_T(x, (nc * H + h) * W + w);
            if (at < 0 || (!isnan(*best) && (v > *best || isnan(v)))) {
                *best = v;
                at = h * W + w;
            }
        }
    }
    return at;
}
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_max_pool2d)
kernel void kiln_max_pool2d(global const KILN_T *x, global KILN_T *out, global long *idx, long NC,
                            long H, long W, long OH, long OW, long KH, long KW, long SH, long SW,
                            long PH, long PW)
{
    KILN_FOR(nc, 2, NC) {
        KILN_FOR(oh, 1, OH) {
            KILN_FOR(ow, 0, OW) {
                KILN_TC best;
                long at = kiln_pool_argmax(x, nc, oh, ow, H, W, KH, KW, SH, SW, PH, PW, &best);
                long o = (nc * OH + oh) * OW + ow;
                STORE_T(out, o, best);
                idx[o] = at;
            }
        }
    }
}
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_max_pool2d_values)
kernel void kiln_max_pool2d_values(global const KILN_T *x, global KILN_T *out, long NC, long H,
                                   long W, long OH, long OW, long KH, long KW, long SH, long SW,
                                   long PH, long PW)
{
    KILN_FOR(nc, 2, NC) {
        KILN_FOR(oh, 1, OH) {
            KILN_FOR(ow, 0, OW) {
                KILN_TC best;
                (void)kiln_pool_argmax(x, nc, oh, ow, H, W, KH, KW, SH, SW, PH, PW, &best);
                STORE_T(out, (nc * OH + oh) * OW + ow, best);
            }
        }
    }
}
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_max_pool2d_bw_windows)
kernel void kiln_max_pool2d_bw_windows(global const KILN_T *g, global const KILN_T *x,
                                       global KILN_T *dx, long NC, long H, long W, long OH,
                                       long OW, long KH, long KW, long SH, long SW, long PH,
                                       long PW)
{
    KILN_FOR(nc, 2, NC) {
        KILN_FOR(oh, 1, OH) {
            KILN_FOR(ow, 0, OW) {
                KILN_TC best;
                long at = kiln_pool_argmax(x, nc, oh, ow, H, W, KH, KW, SH, SW, PH, PW, &best);
                KILN_TC gv = LOAD_T(g, (nc * OH + oh) * OW + ow);
                for (long i = 0; i < KH; i++) {
                    long h = oh * SH - PH + i;
                    for (long j = 0; h >= 0 && h < H && j < KW; j++) {
                        long w = ow * SW - PW + j;
                        if (w >= 0 && w < W)
                            STORE_T(dx, (nc * H + h) * W + w, h * W + w == at ? gv : (KILN_TC)0);
                    }
                }
            }
        }
    }
}
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_max_pool2d_bw)
kernel void kiln_max_pool2d_bw(global const KILN_T *g, global const KILN_T *x, global KILN_T *dx,
                               long NC, long H, long W, long OH, long OW, long KH, long KW,
                               long SH, long SW, long PH, long PW)
{
    KILN_FOR(nc, 2, NC) {
        KILN_FOR(h, 1, H) {
            KILN_FOR(w, 0, W) {
                KILN_TC acc = (KILN_TC)0, best;
                long oh0, oh1, ow0, ow1;
                kiln_pool_windows(h, PH, KH, SH, OH, &oh0, &oh1);
                kiln_pool_windows(w, PW, KW, SW, OW, &ow0, &ow1);
                for (long oh = oh0; oh <= oh1; oh++)
                    for (long ow = ow0; ow <= ow1; ow++)
                        if (kiln_pool_argmax(x, nc, oh, ow, H, W, KH, KW, SH, SW, PH, PW, &best) ==
                            h * W + w)
                            acc += LOAD_T(g, (nc * OH + oh) * OW + ow);
                STORE_T(dx, (nc * H + h) * W + w, acc);
            }
        }
    }
}
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_avg_pool2d)
kernel void kiln_avg_pool2d(global const KILN_T *x, global KILN_T *out, long NC, long H, long W,
                            long OH, long OW, long KH, long KW, long SH, long SW, long PH, long PW)
{
    KILN_FOR(nc, 2, NC) {
        KILN_FOR(oh, 1, OH) {
            KILN_FOR(ow, 0, OW) {
                KILN_TC acc = (KILN_TC)0;
                for (long i = 0; i < KH; i++) {
                    long h = oh * SH - PH + i;
                    for (long j = 0; h >= 0 && h < H && j < KW; j++) {
                        long w = ow * SW - PW + j;
                        if (w >= 0 && w < W)
                            acc += LOAD_T(x, (nc * H + h) * W + w);
                    }
                }
                STORE_T(out, (nc * OH + oh) * OW + ow, acc / (KILN_TC)(KH * KW));
            }
        }
    }
}
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_avg_pool2d_bw)
kernel void kiln_avg_pool2d_bw(global const KILN_T *g, global KILN_T *dx, long NC, long H, long W,
                               long OH, long OW, long KH, long KW, long SH, long SW, long PH,
                               long PW)
{
    KILN_FOR(nc, 2, NC) {
        KILN_FOR(h, 1, H) {
            KILN_FOR(w, 0, W) {
                KILN_TC acc = (KILN_TC)0;
                long oh0, oh1, ow0, ow1;
                kiln_pool_windows(h, PH, KH, SH, OH, &oh0, &oh1);
                kiln_pool_windows(w, PW, KW, SW, OW, &ow0, &ow1);
                for (long oh = oh0; oh <= oh1; oh++)
                    for (long ow = ow0; ow <= ow1; ow++)
                        acc += LOAD_T(g, (nc * OH + oh) * OW + ow);
                STORE_T(dx, (nc * H + h) * W + w, acc / (KILN_TC)(KH * KW));
            }
        }
    }
}
#endif
#endif
