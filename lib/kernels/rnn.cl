/* rnn.cl - the gate arithmetic of one time step of a recurrent layer (lib/ops/rnn.c), forward
 * and backward, one work-item per (batch row b, hidden unit j), launched over [H, B]:
 *   kiln_rnn_step     reads the step's input projection xg[t] (x W_ih^T, [T, B, G H]), the
 *                     hidden projection hg (h W_hh^T, [B, G H]) and the biases; updates the
 *                     running state h (and c) in place; writes the output out[t], the state
 *                     before the step (hprev[s], cprev[s]) and the activations the backward
 *                     reuses (ws[s], W values per unit)
 *   kiln_rnn_step_bw  the step's adjoint: from the output gradient, the carried state gradients
 *                     and the hidden projection's (m = dgh[s + 1] W_hh, the next step's), the
 *                     gate gradients dxg[t] (of the input projection), dgh[s] and dghs (one
 *                     step's, the operand of the next matmul)
 * Modes (MODE): 0 RNN tanh, 1 RNN relu, 2 LSTM (gates i, f, g, o; W = 5: the gates and
 * tanh(c')), 3 GRU (gates r, z, n; W = 4: r, z, n and the hidden n term hg_n + b_hn). G is 1,
 * 1, 4, 3 and W 1, 1, 5, 4.
 * Step s of the scan runs time t = s, or len[b] - 1 - s with REV (PyTorch's packed sequences: a
 * reversed direction starts at each sequence's own last step). A row whose sequence has ended
 * (s >= len[b]) keeps its state, and writes zeros to out[s] and dxg[s] (the times past its end
 * are exactly those). The result out is [T + 1 (+ 1 for the LSTM), B, H]: the outputs by time,
 * then h_n (and c_n), written at the last step. f32 and f64 (slot T). */

#pragma OPENCL FP_CONTRACT OFF

#ifdef KILN_T

KILN_TC kiln_rnn_sigmoid(KILN_TC x)
{
    KILN_TC e = exp(-fabs(x));
    return x >= (KILN_TC)0 ? (KILN_TC)1 / ((KILN_TC)1 + e) : e / ((KILN_TC)1 + e);
}

/* The time step s of row b runs (-1 when the row's sequence has ended). */
long kiln_rnn_time(global const int *len, int has_len, long s, long b, int rev, long T)
{
    long n = has_len ? (long)len[b] : T;
    if (s >= n)
        return -1;
    return rev ? n - 1 - s : s;
}

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_rnn_step)
kernel void kiln_rnn_step(int mode, long s, long T, long B, long H, int rev, global const int *len,
                          int has_len, global const KILN_T *xg, global const KILN_T *hg,
                          global const KILN_T *bih, global const KILN_T *bhh, int has_bias,
                          global KILN_T *h, global KILN_T *c, global KILN_T *hprev,
                          global KILN_T *cprev, global KILN_T *ws, global KILN_T *out, int save)
{
    long G = mode == 2 ? 4 : mode == 3 ? 3 : 1, W = mode == 2 ? 5 : mode == 3 ? 4 : 1;
    KILN_FOR(b, 1, B) {
        KILN_FOR(j, 0, H) {
            long t = kiln_rnn_time(len, has_len, s, b, rev, T);
            long hi = b * H + j, wi = (s * B + b) * W * H + j;
            KILN_TC hp = h[hi], cp = mode == 2 ? c[hi] : (KILN_TC)0, hn = hp, cn = cp;
            if (save) {
                hprev[s * B * H + hi] = hp;
                if (mode == 2)
                    cprev[s * B * H + hi] = cp;
            }
            if (t >= 0) {
                long xi = (t * B + b) * G * H + j, gi = b * G * H + j;
                KILN_TC a[4];
                for (long g = 0; g < G; g++) {
                    KILN_TC bi = has_bias ? bih[g * H + j] : (KILN_TC)0;
                    KILN_TC bh = has_bias ? bhh[g * H + j] : (KILN_TC)0;
                    if (mode == 3 && g == 2) { /* GRU: n = tanh(x_n + b_in + r (h_n + b_hn)) */
                        a[3] = hg[gi + g * H] + bh;
                        a[2] = xg[xi + g * H] + bi;
                    } else {
                        a[g] = xg[xi + g * H] + bi + (hg[gi + g * H] + bh);
                    }
                }
                if (mode == 0) {
                    hn = tanh(a[0]);
                } else if (mode == 1) {
                    hn = fmax(a[0], (KILN_TC)0);
                } else if (mode == 2) {
                    KILN_TC ig = kiln_rnn_sigmoid(a[0]), fg = kiln_rnn_sigmoid(a[1]);
                    KILN_TC gg = tanh(a[2]), og = kiln_rnn_sigmoid(a[3]);
                    cn = fg * cp + ig * gg;
                    KILN_TC tc = tanh(cn);
                    hn = og * tc;
                    if (save) {
                        ws[wi] = ig;
                        ws[wi + H] = fg;
                        ws[wi + 2 * H] = gg;
                        ws[wi + 3 * H] = og;
                        ws[wi + 4 * H] = tc;
                    }
                } else {
                    KILN_TC r = kiln_rnn_sigmoid(a[0]), z = kiln_rnn_sigmoid(a[1]);
                    KILN_TC n = tanh(a[2] + r * a[3]);
                    hn = ((KILN_TC)1 - z) * n + z * hp;
                    if (save) {
                        ws[wi] = r;
                        ws[wi + H] = z;
                        ws[wi + 2 * H] = n;
                        ws[wi + 3 * H] = a[3];
                    }
                }
                if (save && mode < 2)
                    ws[wi] = hn;
                out[(t * B + b) * H + j] = hn;
            } else {
                out[(s * B + b) * H + j] = (KILN_TC)0; /* a time past the row's end */
                if (save)
                    for (long w = 0; w < W; w++)
                        ws[wi + w * H] = (KILN_TC)0;
            }
            h[hi] = hn;
            if (mode == 2)
                c[hi] = cn;
            if (s == T - 1) {
                out[(T * B + b) * H + j] = hn;
                if (mode == 2)
                    out[((T + 1) * B + b) * H + j] = cn;
            }
        }
    }
}
#endif

/* dout: the gradient of the result ([T + 1 (+ 1), B, H]); dh, dc: the carried gradients of the
 * running state ([B, H], read from dout's h_n and c_n rows at the first step, first = 1); m:
 * the gradient reaching h through the next step's hidden projection (not read at the first
 * step). */
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_rnn_step_bw)
kernel void kiln_rnn_step_bw(int mode, long s, long T, long B, long H, int rev,
                             global const int *len, int has_len, global const KILN_T *dout,
                             global const KILN_T *ws, global const KILN_T *hprev,
                             global const KILN_T *cprev, global const KILN_T *m, int first,
                             global KILN_T *dh, global KILN_T *dc, global KILN_T *dxg,
                             global KILN_T *dgh, global KILN_T *dghs)
{
    long G = mode == 2 ? 4 : mode == 3 ? 3 : 1, W = mode == 2 ? 5 : mode == 3 ? 4 : 1;
    KILN_FOR(b, 1, B) {
        KILN_FOR(j, 0, H) {
            long t = kiln_rnn_time(len, has_len, s, b, rev, T);
            long hi = b * H + j, wi = (s * B + b) * W * H + j, gi = (s * B + b) * G * H + j;
            KILN_TC gh = first ? dout[T * B * H + hi] : dh[hi] + m[hi];
            KILN_TC gc = mode == 2 ? (first ? dout[(T + 1) * B * H + hi] : dc[hi]) : (KILN_TC)0;
            KILN_TC d[4] = {0, 0, 0, 0}, dn = 0;
            KILN_TC carry_h = gh, carry_c = gc;
            if (t >= 0) {
                gh += dout[(t * B + b) * H + j];
                if (mode == 0) {
                    KILN_TC y = ws[wi];
                    d[0] = gh * ((KILN_TC)1 - y * y);
                    carry_h = 0;
                } else if (mode == 1) {
                    d[0] = ws[wi] > (KILN_TC)0 ? gh : (KILN_TC)0;
                    carry_h = 0;
                } else if (mode == 2) {
                    KILN_TC ig = ws[wi], fg = ws[wi + H], gg = ws[wi + 2 * H];
                    KILN_TC og = ws[wi + 3 * H], tc = ws[wi + 4 * H];
                    KILN_TC cp = cprev[s * B * H + hi];
                    KILN_TC dct = gc + gh * og * ((KILN_TC)1 - tc * tc);
                    d[0] = dct * gg * ig * ((KILN_TC)1 - ig);
                    d[1] = dct * cp * fg * ((KILN_TC)1 - fg);
                    d[2] = dct * ig * ((KILN_TC)1 - gg * gg);
                    d[3] = gh * tc * og * ((KILN_TC)1 - og);
                    carry_h = 0;
                    carry_c = dct * fg;
                } else {
                    KILN_TC r = ws[wi], z = ws[wi + H], n = ws[wi + 2 * H], hn = ws[wi + 3 * H];
                    KILN_TC hp = hprev[s * B * H + hi];
                    KILN_TC dpn = gh * ((KILN_TC)1 - z) * ((KILN_TC)1 - n * n);
                    d[0] = dpn * hn * r * ((KILN_TC)1 - r);
                    d[1] = gh * (hp - n) * z * ((KILN_TC)1 - z);
                    d[2] = dpn;
                    dn = dpn * r;
                    carry_h = gh * z;
                }
            }
            long xi = ((t >= 0 ? t : s) * B + b) * G * H + j, si = b * G * H + j;
            for (long g = 0; g < G; g++) {
                KILN_TC dg = mode == 3 && g == 2 ? dn : d[g];
                dxg[xi + g * H] = d[g];
                dgh[gi + g * H] = dg;
                dghs[si + g * H] = dg;
            }
            dh[hi] = carry_h;
            if (mode == 2)
                dc[hi] = carry_c;
        }
    }
}
#endif

#endif
