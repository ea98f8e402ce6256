/* conv.cl - the two data movements of kiln_conv2d (lib/ops/conv.c), whose products are matmuls
 * (and, further down, the 2-D poolings):
 *   kiln_im2col   cols[g, k, n L + l] = x[n, g Cg + c, oh SH - PH + ki DH, ow SW - PW + kj DW]
 *                 (0 outside x), k = (c KH + ki) KW + kj, l = oh OW + ow, L = OH OW
 *   kiln_col2im   its adjoint: dx[n, c, h, w] = the sum of the cols entries that im2col read
 *                 from (n, c, h, w), gathered by the input element (no atomics, one order)
 * x is [N, C, H, W] in slot T (half storage through LOAD_T/STORE_T), cols [G, Cg KH KW, N L],
 * or with SM (sample-major, groups 1 only) [N, C KH KW, L], whose product with the weight is
 * NCHW already. N0: the columns are those of samples N0 .. N0 + N - 1 of x (and of dx), so that
 * a large batch can be taken a few samples at a time (conv.c: chunks).
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
                        long DH, long DW, long OH, long OW, int SM, long N0)
{
    long Cg = C / G, K = Cg * KH * KW, L = OH * OW, NL = N * L;
    KILN_FOR(row, 1, G * K) {
        long gi = row / K, k = row - gi * K, cg = k / (KH * KW), r = k - cg * (KH * KW);
        long ki = r / KW, kj = r - ki * KW, c = gi * Cg + cg;
        KILN_FOR(no, 0, N * OH) {
            long n = no / OH, oh = no - n * OH, h = oh * SH - PH + ki * DH;
            bool hin = h >= 0 && h < H;
            long out0 = SM ? (n * K + row) * L + oh * OW : row * NL + n * L + oh * OW;
            /* [lo, hi): the columns whose w = ow SW - PW + kj DW is inside the row, copied
             * without a check per element, zeros around (on PoCL 33.5 ms instead of 35 for the
             * columns of a N32 64->64 56x56 convolution: the copy is bound by memory) */
            long lo = 0, hi = 0;
            if (hin) {
                long a = PW - kj * DW, last = W - 1 + PW - kj * DW;
                lo = a <= 0 ? 0 : min(SW == 1 ? a : (a + SW - 1) / SW, OW);
                hi = last < 0 ? lo : clamp((SW == 1 ? last : last / SW) + 1, lo, OW);
            }
            long in0 = (((N0 + n) * C + c) * H + (hin ? h : 0)) * W - PW + kj * DW;
            for (long ow = 0; ow < lo; ow++)
                STORE_T(cols, out0 + ow, (KILN_TC)0);
            if (SW == 1)
                for (long ow = lo; ow < hi; ow++)
                    STORE_T(cols, out0 + ow, LOAD_T(x, in0 + ow));
            else
                for (long ow = lo; ow < hi; ow++)
                    STORE_T(cols, out0 + ow, LOAD_T(x, in0 + ow * SW));
            for (long ow = hi; ow < OW; ow++)
                STORE_T(cols, out0 + ow, (KILN_TC)0);
        }
    }
}
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_col2im)
kernel void kiln_col2im(global const KILN_T *cols, global KILN_T *dx, long N, long C, long H,
                        long W, long G, long KH, long KW, long SH, long SW, long PH, long PW,
                        long DH, long DW, long OH, long OW, int SM, long N0)
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
        STORE_T(dx, N0 * C * H * W + i, acc);
    }
}
#endif

#if defined(KILN_CPU_DEVICE) && !defined(KILN_T_NARROW)
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_col2im_rows)
/* col2im for CPU devices at stride 1 along rows, one row of dx per work-item, over [H, N C]: the
 * row is zeroed, then each tap whose output row exists adds its shifted row of cols, a plain
 * loop over the columns it covers. Per element the same additions in the same order as
 * kiln_col2im's (the partial sums held in dx: exact where KILN_T is the compute type, so not for
 * 16-bit types); a third of the gathering kernel's time or less. */
kernel void kiln_col2im_rows(global const KILN_T *cols, global KILN_T *dx, long N, long C, long H,
                             long W, long G, long KH, long KW, long SH, long SW, long PH, long PW,
                             long DH, long DW, long OH, long OW, int SM, long N0)
{
    long Cg = C / G, K = Cg * KH * KW, L = OH * OW, NL = N * L;
    KILN_FOR(nc, 1, N * C) {
        long n = nc / C, c = nc - n * C, gi = c / Cg, cg = c - gi * Cg;
        KILN_FOR(h, 0, H) {
            long d0 = (N0 * C + nc) * H * W + h * W;
            for (long w = 0; w < W; w++)
                STORE_T(dx, d0 + w, (KILN_TC)0);
            for (long ki = 0; ki < KH; ki++) {
                long hh = h + PH - ki * DH, oh = SH == 1 ? hh : hh / SH;
                if (hh < 0 || oh * SH != hh || oh >= OH)
                    continue;
                for (long kj = 0; kj < KW; kj++) {
                    long row = gi * K + (cg * KH + ki) * KW + kj, shift = PW - kj * DW;
                    /* column w reads cols at c0 + w (ow = w + shift), for 0 <= ow < OW */
                    long c0 = (SM ? (n * K + row) * L : row * NL + n * L) + oh * OW + shift;
                    long lo = clamp(-shift, 0L, W), hi = clamp(OW - shift, lo, W);
                    for (long w = lo; w < hi; w++)
                        STORE_T(dx, d0 + w, LOAD_T(dx, d0 + w) + LOAD_T(cols, c0 + w));
                }
            }
        }
    }
}
#endif
#endif
#endif

/* Depthwise convolution (groups = C, O = M C: output channel o reads input channel o / M), direct:
 * im2col would copy x KH KW times and multiply [1, KH KW] rows (9 MACs an output for a 3x3).
 * w is [O, 1, KH, KW]; accumulation in the compute type, taps in (ki, kj) order, a tap outside x
 * adding 0 w (the forward, as zero padding would) or nothing (the input gradient).
 *   kiln_conv_dw       y[n, o, oh, ow] = the sum over the window of x[n, o / M, h, w] w[o, ki, kj],
 *                      h = oh SH - PH + ki DH, w = ow SW - PW + kj DW (0 outside x); over
 *                      [OW, OH, N O] (GPUs)
 *   kiln_conv_dw_rows  the same, one output row per work-item, over [OH, N O] (CPU devices)
 *   kiln_conv_dw_bw_x  dx[n, c, h, w] = the sum of g[n, c M + m, oh, ow] w[c M + m, ki, kj] over
 *                      the outputs whose window read (n, c, h, w) (gathered, no atomics); over
 *                      [W, H, N C]
 *   kiln_conv_dw_bw_x_rows  the same, one row of dx per work-item, over [H, N C] (CPU devices,
 *                      stride 1 along rows)
 *   kiln_conv_dw_bw_w  part[n, o, ki KW + kj] = the sum over (oh, ow) of g[n, o, oh, ow] times
 *                      the x element that tap read, in the compute type (the host sums over n);
 *                      over [KH KW, N O]
 * With KILN_DW_K (KH = KW = KILN_DW_K, set by the host for 3x3 and 5x5 kernels) the window
 * loops have constant bounds and unroll; with KILN_DW_SW1 (stride 1 along rows) the compiler
 * knows that neighbouring columns are neighbouring elements.
 * CPU devices: PoCL vectorizes across work-items only a kernel without loops of its own, and the
 * window's bounds checks made the 3-D forward gather every load (36 vgatherqps). The row kernels
 * split each row into borders (every check, element by element) and an interior where every tap
 * is inside x, a loop of plain loads that the compiler vectorizes; the weight gradient sums 8
 * columns at a time in a vector (its single sum had been one chain of dependent adds). */
#ifdef KILN_T
#ifdef KILN_DW_K
#define DW_KH KILN_DW_K
#define DW_KW KILN_DW_K
#define DW_UNROLL _Pragma("unroll")
#else
#define DW_KH KH
#define DW_KW KW
#define DW_UNROLL
#endif
#ifdef KILN_DW_SW1
#define DW_SW 1
#else
#define DW_SW SW
#endif
#define DW_PASTE_(a, b) a##b
#define DW_PASTE(a, b) DW_PASTE_(a, b)
#define DW_TCV DW_PASTE(KILN_TC, 8)
#if defined(KILN_DW_K) && !defined(KILN_T_NARROW)
#define DW_SUMS_IN_T 1 /* dx's rows can hold partial sums exactly (see kiln_conv_dw_bw_x_rows) */
#elif defined(KILN_DW_K)
#define DW_SUMS_IN_T (M == 1)
#else
#define DW_SUMS_IN_T 0
#endif

/* One output of the forward: the window of (oh, ow) over the plane at x0, every tap checked. */
KILN_TC kiln_dw_point(global const KILN_T *x, global const KILN_T *wt, long x0, long w0, long oh,
                      long ow, long H, long W, long KH, long KW, long SH, long SW, long PH,
                      long PW, long DH, long DW)
{
    KILN_TC acc = (KILN_TC)0;
    DW_UNROLL for (long ki = 0; ki < DW_KH; ki++)
    {
        long h = oh * SH - PH + ki * DH;
        DW_UNROLL for (long kj = 0; kj < DW_KW; kj++)
        {
            long w = ow * DW_SW - PW + kj * DW;
            KILN_TC v =
                h >= 0 && h < H && w >= 0 && w < W ? LOAD_T(x, x0 + h * W + w) : (KILN_TC)0;
            acc += v * LOAD_T(wt, w0 + ki * DW_KW + kj);
        }
    }
    return acc;
}

/* One element of dx: the outputs of the M channels at o0 (g planes at g0, weights at w0) whose
 * window read (h, w), every tap checked; acc is what the sum starts from. */
KILN_TC kiln_dw_bw_point(global const KILN_T *g, global const KILN_T *wt, KILN_TC acc, long g0,
                         long w0, long M, long h, long w, long KH, long KW, long SH, long SW,
                         long PH, long PW, long DH, long DW, long OH, long OW)
{
    for (long m = 0; m < M; m++) {
        long gm = g0 + m * OH * OW, wm = w0 + m * DW_KH * DW_KW;
        DW_UNROLL for (long ki = 0; ki < DW_KH; ki++)
        {
            long hh = h + PH - ki * DH, oh = hh / SH;
            if (hh < 0 || oh * SH != hh || oh >= OH)
                continue;
            DW_UNROLL for (long kj = 0; kj < DW_KW; kj++)
            {
                long ww = w + PW - kj * DW, ow = ww / DW_SW;
                if (ww < 0 || ow * DW_SW != ww || ow >= OW)
                    continue;
                acc += LOAD_T(g, gm + oh * OW + ow) * LOAD_T(wt, wm + ki * DW_KW + kj);
            }
        }
    }
    return acc;
}

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_conv_dw)
kernel void kiln_conv_dw(global const KILN_T *x, global const KILN_T *wt, global KILN_T *y, long N,
                         long C, long H, long W, long M, long KH, long KW, long SH, long SW,
                         long PH, long PW, long DH, long DW, long OH, long OW)
{
    long O = C * M;
    KILN_FOR(no, 2, N * O) {
        long n = no / O, o = no - n * O;
        long x0 = (n * C + (M == 1 ? o : o / M)) * H * W, w0 = o * DW_KH * DW_KW;
        KILN_FOR(oh, 1, OH) {
            KILN_FOR(ow, 0, OW) {
                STORE_T(y, (no * OH + oh) * OW + ow,
                        kiln_dw_point(x, wt, x0, w0, oh, ow, H, W, KH, KW, SH, SW, PH, PW, DH, DW));
            }
        }
    }
}
#endif

#ifdef KILN_CPU_DEVICE
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_conv_dw_rows)
kernel void kiln_conv_dw_rows(global const KILN_T *x, global const KILN_T *wt, global KILN_T *y,
                              long N, long C, long H, long W, long M, long KH, long KW, long SH,
                              long SW, long PH, long PW, long DH, long DW, long OH, long OW)
{
    long O = C * M;
    KILN_FOR(no, 1, N * O) {
        long n = no / O, o = no - n * O;
        long x0 = (n * C + (M == 1 ? o : o / M)) * H * W, w0 = o * DW_KH * DW_KW;
        KILN_FOR(oh, 0, OH) {
            long y0 = (no * OH + oh) * OW;
            /* [lo, hi): the columns whose every tap is inside the row (none when x is empty) */
            long lo = min((PW + DW_SW - 1) / DW_SW, OW);
            long last = W - 1 + PW - (DW_KW - 1) * DW;
            long hi = H == 0 || W == 0 || last < 0 ? lo : clamp(last / DW_SW + 1, lo, OW);
            for (long ow = 0; ow < lo; ow++)
                STORE_T(y, y0 + ow,
                        kiln_dw_point(x, wt, x0, w0, oh, ow, H, W, KH, KW, SH, SW, PH, PW, DH, DW));
#ifdef KILN_DW_K
            /* rows outside x read row 0 and add 0 w instead: every load unconditional */
            long hr[DW_KH];
            bool hin[DW_KH];
            KILN_TC wv[DW_KH * DW_KW];
            DW_UNROLL for (long ki = 0; ki < DW_KH; ki++)
            {
                long h = oh * SH - PH + ki * DH;
                hin[ki] = h >= 0 && h < H;
                hr[ki] = x0 + (hin[ki] ? h : 0) * W - PW;
            }
            DW_UNROLL for (long t = 0; t < DW_KH * DW_KW; t++) wv[t] = LOAD_T(wt, w0 + t);
            for (long ow = lo; ow < hi; ow++) {
                KILN_TC acc = (KILN_TC)0;
                DW_UNROLL for (long ki = 0; ki < DW_KH; ki++)
                {
                    DW_UNROLL for (long kj = 0; kj < DW_KW; kj++)
                    {
                        KILN_TC v = LOAD_T(x, hr[ki] + ow * DW_SW + kj * DW);
                        acc += (hin[ki] ? v : (KILN_TC)0) * wv[ki * DW_KW + kj];
                    }
                }
                STORE_T(y, y0 + ow, acc);
            }
#else
            for (long ow = lo; ow < hi; ow++)
                STORE_T(y, y0 + ow,
                        kiln_dw_point(x, wt, x0, w0, oh, ow, H, W, KH, KW, SH, SW, PH, PW, DH, DW));
#endif
            for (long ow = hi; ow < OW; ow++)
                STORE_T(y, y0 + ow,
                        kiln_dw_point(x, wt, x0, w0, oh, ow, H, W, KH, KW, SH, SW, PH, PW, DH, DW));
        }
    }
}
#endif
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_conv_dw_bw_x)
kernel void kiln_conv_dw_bw_x(global const KILN_T *g, global const KILN_T *wt, global KILN_T *dx,
                              long N, long C, long H, long W, long M, long KH, long KW, long SH,
                              long SW, long PH, long PW, long DH, long DW, long OH, long OW)
{
    long O = C * M;
    KILN_FOR(nc, 2, N * C) {
        long n = nc / C, c = nc - n * C, g0 = (n * O + c * M) * OH * OW, w0 = c * M * DW_KH * DW_KW;
        KILN_FOR(h, 1, H) {
            KILN_FOR(w, 0, W) {
                STORE_T(dx, (nc * H + h) * W + w,
                        kiln_dw_bw_point(g, wt, (KILN_TC)0, g0, w0, M, h, w, KH, KW, SH, SW, PH,
                                         PW, DH, DW, OH, OW));
            }
        }
    }
}
#endif

#if defined(KILN_CPU_DEVICE) && defined(KILN_DW_SW1) /* rows of dx at stride 1 */
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_conv_dw_bw_x_rows)
kernel void kiln_conv_dw_bw_x_rows(global const KILN_T *g, global const KILN_T *wt,
                                   global KILN_T *dx, long N, long C, long H, long W, long M,
                                   long KH, long KW, long SH, long SW, long PH, long PW, long DH,
                                   long DW, long OH, long OW)
{
    long O = C * M;
    KILN_FOR(nc, 1, N * C) {
        long n = nc / C, c = nc - n * C, g0 = (n * O + c * M) * OH * OW, w0 = c * M * DW_KH * DW_KW;
        KILN_FOR(h, 0, H) {
            long d0 = (nc * H + h) * W;
            /* [lo, hi): the columns that every tap's output column holds (stride 1) */
            long lo = min(max((DW_KW - 1) * DW - PW, 0L), W), hi = clamp(OW - PW, lo, W);
            for (long w = 0; w < lo; w++)
                STORE_T(dx, d0 + w,
                        kiln_dw_bw_point(g, wt, (KILN_TC)0, g0, w0, M, h, w, KH, KW, SH, SW, PH,
                                         PW, DH, DW, OH, OW));
#ifdef KILN_DW_K
            /* channel by channel, the row of dx holding the sum so far: the same additions in the
             * same order as kiln_dw_bw_point's (16-bit dx would round the sums between channels:
             * there only one channel takes this way) */
            for (long m = 0; m < (DW_SUMS_IN_T ? M : 0); m++) {
                long gm = g0 + m * OH * OW, wm = w0 + m * DW_KH * DW_KW, gr[DW_KH];
                bool oin[DW_KH];
                KILN_TC wv[DW_KH * DW_KW];
                DW_UNROLL for (long ki = 0; ki < DW_KH; ki++)
                {
                    long hh = h + PH - ki * DH, oh = hh / SH;
                    oin[ki] = hh >= 0 && oh * SH == hh && oh < OH;
                    gr[ki] = gm + (oin[ki] ? oh : 0) * OW + PW;
                }
                DW_UNROLL for (long t = 0; t < DW_KH * DW_KW; t++) wv[t] = LOAD_T(wt, wm + t);
                for (long w = lo; w < hi; w++) {
                    KILN_TC acc = m ? LOAD_T(dx, d0 + w) : (KILN_TC)0;
                    DW_UNROLL for (long ki = 0; ki < DW_KH; ki++)
                    {
                        DW_UNROLL for (long kj = 0; kj < DW_KW; kj++)
                        {
                            KILN_TC p = LOAD_T(g, gr[ki] + w - kj * DW) * wv[ki * DW_KW + kj];
                            acc += oin[ki] ? p : (KILN_TC)0;
                        }
                    }
                    STORE_T(dx, d0 + w, acc);
                }
            }
#endif
            for (long w = lo; w < (DW_SUMS_IN_T ? lo : hi); w++)
                STORE_T(dx, d0 + w,
                        kiln_dw_bw_point(g, wt, (KILN_TC)0, g0, w0, M, h, w, KH, KW, SH, SW, PH,
                                         PW, DH, DW, OH, OW));
            for (long w = hi; w < W; w++)
                STORE_T(dx, d0 + w,
                        kiln_dw_bw_point(g, wt, (KILN_TC)0, g0, w0, M, h, w, KH, KW, SH, SW, PH,
                                         PW, DH, DW, OH, OW));
        }
    }
}
#endif
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_conv_dw_bw_w)
kernel void kiln_conv_dw_bw_w(global const KILN_T *g, global const KILN_T *x, global KILN_TC *part,
                              long N, long C, long H, long W, long M, long KH, long KW, long SH,
                              long SW, long PH, long PW, long DH, long DW, long OH, long OW)
{
    long O = C * M;
    KILN_FOR(no, 1, N * O) {
        long n = no / O, o = no - n * O;
        long x0 = (n * C + (M == 1 ? o : o / M)) * H * W, g0 = no * OH * OW;
        KILN_FOR(tap, 0, DW_KH * DW_KW) {
            long ki = tap / DW_KW, kj = tap - ki * DW_KW;
            /* [lo, hi): the output columns whose tap kj is inside x */
            long lo = min(max((PW - kj * DW + DW_SW - 1) / DW_SW, 0L), OW);
            long last = W - 1 + PW - kj * DW;
            long hi = last < 0 ? lo : clamp(last / DW_SW + 1, lo, OW);
            KILN_TC acc = (KILN_TC)0;
#ifdef KILN_CPU_DEVICE
            DW_TCV accv = (DW_TCV)0;
#endif
            for (long oh = 0; oh < OH; oh++) {
                long h = oh * SH - PH + ki * DH;
                if (h < 0 || h >= H)
                    continue;
                long gr = g0 + oh * OW, xr = x0 + h * W - PW + kj * DW, ow = lo;
#ifdef KILN_CPU_DEVICE
                for (; ow + 8 <= hi; ow += 8) {
                    long xo = xr + ow * DW_SW;
                    DW_TCV gv = (DW_TCV)(LOAD_T(g, gr + ow), LOAD_T(g, gr + ow + 1),
                                         LOAD_T(g, gr + ow + 2), LOAD_T(g, gr + ow + 3),
                                         LOAD_T(g, gr + ow + 4), LOAD_T(g, gr + ow + 5),
                                         LOAD_T(g, gr + ow + 6), LOAD_T(g, gr + ow + 7));
                    DW_TCV xv = (DW_TCV)(LOAD_T(x, xo), LOAD_T(x, xo + DW_SW),
                                         LOAD_T(x, xo + 2 * DW_SW), LOAD_T(x, xo + 3 * DW_SW),
                                         LOAD_T(x, xo + 4 * DW_SW), LOAD_T(x, xo + 5 * DW_SW),
                                         LOAD_T(x, xo + 6 * DW_SW), LOAD_T(x, xo + 7 * DW_SW));
                    accv += gv * xv;
                }
#endif
                for (; ow < hi; ow++)
                    acc += LOAD_T(g, gr + ow) * LOAD_T(x, xr + ow * DW_SW);
            }
#ifdef KILN_CPU_DEVICE
            acc += ((accv.s0 + accv.s1) + (accv.s2 + accv.s3)) +
                   ((accv.s4 + accv.s5) + (accv.s6 + accv.s7));
#endif
            part[no * DW_KH * DW_KW + tap] = acc;
        }
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
