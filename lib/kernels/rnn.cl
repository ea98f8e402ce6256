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
 * Modes (KILN_RNN_MODE, a -D of the build): 0 RNN tanh, 1 RNN relu, 2 LSTM (gates i, f, g, o;
 * W = 5: the gates and tanh(c')), 3 GRU (gates r, z, n; W = 4: r, z, n and the hidden n term
 * hg_n + b_hn). G is 1, 1, 4, 3 and W 1, 1, 5, 4.
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

/* The cell is a compile-time constant (KILN_RNN_MODE), and the kernels have no loops and no
 * private arrays beyond the range's: PoCL then vectorises them across work-items (with the mode
 * an argument and the gates in a loop it ran them one value at a time: a third of a forward's
 * time). */
#ifndef KILN_RNN_MODE
#define KILN_RNN_MODE 2
#endif
/* KILN_RNN_SAVE: the forward keeps what the backward reads (a program of its own without: with
 * the choice an argument, PoCL's code for a forward that saved nothing ran 2.5x slower than the
 * one that saved) */
#ifndef KILN_RNN_SAVE
#define KILN_RNN_SAVE 1
#endif
#if KILN_RNN_MODE == 2
#define KILN_RNN_G 4
#define KILN_RNN_W 5
#elif KILN_RNN_MODE == 3
#define KILN_RNN_G 3
#define KILN_RNN_W 4
#else
#define KILN_RNN_G 1
#define KILN_RNN_W 1
#endif

/* Gate g's input and hidden parts of row b (biases included when has_bias). */
#define KILN_RNN_XI(g) (xg[xi + (g) * H] + (has_bias ? bih[(g) * H + j] : (KILN_TC)0))
#define KILN_RNN_HI(g) (hg[gi + (g) * H] + (has_bias ? bhh[(g) * H + j] : (KILN_TC)0))

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_rnn_step)
kernel void kiln_rnn_step(long s, long T, long B, long H, int rev, global const int *len,
                          int has_len, global const KILN_T *xg, global const KILN_T *hg,
                          global const KILN_T *bih, global const KILN_T *bhh, int has_bias,
                          global KILN_T *h, global KILN_T *c, global KILN_T *hprev,
                          global KILN_T *cprev, global KILN_T *ws, global KILN_T *out)
{
    const long W = KILN_RNN_W;
    KILN_FOR(b, 1, B) {
        KILN_FOR(j, 0, H) {
            long t = kiln_rnn_time(len, has_len, s, b, rev, T);
            long hi = b * H + j, wi = (s * B + b) * W * H + j;
            long xi = ((t >= 0 ? t : 0) * B + b) * KILN_RNN_G * H + j, gi = b * KILN_RNN_G * H + j;
            KILN_TC hp = h[hi], hn = hp;
#if KILN_RNN_MODE == 2
            KILN_TC cp = c[hi], cn = cp;
#endif
            if (KILN_RNN_SAVE) {
                hprev[s * B * H + hi] = hp;
#if KILN_RNN_MODE == 2
                cprev[s * B * H + hi] = cp;
#endif
            }
            if (t >= 0) {
#if KILN_RNN_MODE == 0
                hn = tanh(KILN_RNN_XI(0) + KILN_RNN_HI(0));
                if (KILN_RNN_SAVE)
                    ws[wi] = hn;
#elif KILN_RNN_MODE == 1
                hn = fmax(KILN_RNN_XI(0) + KILN_RNN_HI(0), (KILN_TC)0);
                if (KILN_RNN_SAVE)
                    ws[wi] = hn;
#elif KILN_RNN_MODE == 2
                KILN_TC ig = kiln_rnn_sigmoid(KILN_RNN_XI(0) + KILN_RNN_HI(0));
                KILN_TC fg = kiln_rnn_sigmoid(KILN_RNN_XI(1) + KILN_RNN_HI(1));
                KILN_TC gg = tanh(KILN_RNN_XI(2) + KILN_RNN_HI(2));
                KILN_TC og = kiln_rnn_sigmoid(KILN_RNN_XI(3) + KILN_RNN_HI(3));
                cn = fg * cp + ig * gg;
                KILN_TC tc = tanh(cn);
                hn = og * tc;
                if (KILN_RNN_SAVE) {
                    ws[wi] = ig;
                    ws[wi + H] = fg;
                    ws[wi + 2 * H] = gg;
                    ws[wi + 3 * H] = og;
                    ws[wi + 4 * H] = tc;
                }
#else /* GRU: n = tanh(x_n + b_in + r (h_n + b_hn)) */
                KILN_TC r = kiln_rnn_sigmoid(KILN_RNN_XI(0) + KILN_RNN_HI(0));
                KILN_TC z = kiln_rnn_sigmoid(KILN_RNN_XI(1) + KILN_RNN_HI(1));
                KILN_TC hnn = KILN_RNN_HI(2);
                KILN_TC n = tanh(KILN_RNN_XI(2) + r * hnn);
                hn = ((KILN_TC)1 - z) * n + z * hp;
                if (KILN_RNN_SAVE) {
                    ws[wi] = r;
                    ws[wi + H] = z;
                    ws[wi + 2 * H] = n;
                    ws[wi + 3 * H] = hnn;
                }
#endif
                out[(t * B + b) * H + j] = hn;
            } else {
                out[(s * B + b) * H + j] = (KILN_TC)0; /* a time past the row's end */
                if (KILN_RNN_SAVE) {
                    ws[wi] = (KILN_TC)0;
#if KILN_RNN_W > 1
                    ws[wi + H] = (KILN_TC)0;
                    ws[wi + 2 * H] = (KILN_TC)0;
                    ws[wi + 3 * H] = (KILN_TC)0;
#endif
#if KILN_RNN_W > 4
                    ws[wi + 4 * H] = (KILN_TC)0;
#endif
                }
            }
            h[hi] = hn;
#if KILN_RNN_MODE == 2
            c[hi] = cn;
#endif
            if (s == T - 1) {
                out[(T * B + b) * H + j] = hn;
#if KILN_RNN_MODE == 2
                out[((T + 1) * B + b) * H + j] = cn;
#endif
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
kernel void kiln_rnn_step_bw(long s, long T, long B, long H, int rev, global const int *len,
                             int has_len, global const KILN_T *dout, global const KILN_T *ws,
                             global const KILN_T *hprev, global const KILN_T *cprev,
                             global const KILN_T *m, int first, global KILN_T *dh,
                             global KILN_T *dc, global KILN_T *dxg, global KILN_T *dgh,
                             global KILN_T *dghs)
{
    const long W = KILN_RNN_W, G = KILN_RNN_G;
    KILN_FOR(b, 1, B) {
        KILN_FOR(j, 0, H) {
            long t = kiln_rnn_time(len, has_len, s, b, rev, T);
            long hi = b * H + j, wi = (s * B + b) * W * H + j, gi = (s * B + b) * G * H + j;
            long xi = ((t >= 0 ? t : s) * B + b) * G * H + j, si = b * G * H + j;
            KILN_TC gh = first ? dout[T * B * H + hi] : dh[hi] + m[hi];
            KILN_TC carry_h = gh, d0 = 0;
#if KILN_RNN_MODE == 2
            KILN_TC gc = first ? dout[(T + 1) * B * H + hi] : dc[hi], carry_c = gc;
            KILN_TC d1 = 0, d2 = 0, d3 = 0;
#elif KILN_RNN_MODE == 3
            KILN_TC d1 = 0, d2 = 0, dn = 0;
#endif
            if (t >= 0) {
                gh += dout[(t * B + b) * H + j];
                carry_h = 0;
#if KILN_RNN_MODE == 0
                KILN_TC y = ws[wi];
                d0 = gh * ((KILN_TC)1 - y * y);
#elif KILN_RNN_MODE == 1
                d0 = ws[wi] > (KILN_TC)0 ? gh : (KILN_TC)0;
#elif KILN_RNN_MODE == 2
                KILN_TC ig = ws[wi], fg = ws[wi + H], gg = ws[wi + 2 * H];
                KILN_TC og = ws[wi + 3 * H], tc = ws[wi + 4 * H];
                KILN_TC cp = cprev[s * B * H + hi];
                KILN_TC dct = gc + gh * og * ((KILN_TC)1 - tc * tc);
                d0 = dct * gg * ig * ((KILN_TC)1 - ig);
                d1 = dct * cp * fg * ((KILN_TC)1 - fg);
                d2 = dct * ig * ((KILN_TC)1 - gg * gg);
                d3 = gh * tc * og * ((KILN_TC)1 - og);
                carry_c = dct * fg;
#else
                KILN_TC r = ws[wi], z = ws[wi + H], n = ws[wi + 2 * H], hnn = ws[wi + 3 * H];
                KILN_TC hp = hprev[s * B * H + hi];
                KILN_TC dpn = gh * ((KILN_TC)1 - z) * ((KILN_TC)1 - n * n);
                d0 = dpn * hnn * r * ((KILN_TC)1 - r);
                d1 = gh * (hp - n) * z * ((KILN_TC)1 - z);
                d2 = dpn;
                dn = dpn * r;
                carry_h = gh * z;
#endif
            }
            dxg[xi] = d0;
            dgh[gi] = d0;
            dghs[si] = d0;
#if KILN_RNN_MODE >= 2
            dxg[xi + H] = d1;
            dgh[gi + H] = d1;
            dghs[si + H] = d1;
            dxg[xi + 2 * H] = d2;
#if KILN_RNN_MODE == 2
            dgh[gi + 2 * H] = d2;
            dghs[si + 2 * H] = d2;
            dxg[xi + 3 * H] = d3;
            dgh[gi + 3 * H] = d3;
            dghs[si + 3 * H] = d3;
            dc[hi] = carry_c;
#else
            dgh[gi + 2 * H] = dn;
            dghs[si + 2 * H] = dn;
#endif
#endif
            dh[hi] = carry_h;
        }
    }
}
#endif

#endif
