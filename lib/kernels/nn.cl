/* nn.cl - neural-network kernels, one work-item per row or element:
 *   kiln_softmax            softmax / log-softmax (flag `logmode`) of x viewed as [outer, n, inner]
 *   kiln_cross_entropy_i32 / kiln_cross_entropy_i64   per-row loss and optional gradient of
 *                           logits [N, C] against labels (int / long)
 *   kiln_softmax_rows8 / kiln_cross_entropy8_i32 / kiln_cross_entropy8_i64   the same for
 *                           contiguous rows in vectors of 8 (CPUs; not for f16)
 *   kiln_mse                squared differences and optional gradient
 *   kiln_sgd, kiln_adam     in-place optimizer updates
 * Macros: KILN_T / KILN_TC (slot T, from prelude.cl) for every floating tensor. Rows are
 * max-subtracted and their sums of exponentials carry a compensation term. Built one kernel
 * per program: every kernel sits in a KILN_ONLY guard (lib/kernels/embed.py). */

/* m = max of the row, s = sum exp(x - m) (compensated). A NaN anywhere makes s NaN. A plain
 * function: OpenCL C 1.2 `inline` without `static` is a C99 inline definition, with no external
 * definition for a call the compiler does not inline (NVIDIA's compiler may fail to link it). */
void kiln_row_stats(global const KILN_T *x, long base, long n, long stride, KILN_TC *m, KILN_TC *s)
{
    KILN_TC mx = -INFINITY, sum = 0, comp = 0;
    for (long j = 0; j < n; j++)
        mx = fmax(mx, LOAD_T(x, base + j * stride));
    for (long j = 0; j < n; j++) {
        KILN_TC e = exp(LOAD_T(x, base + j * stride) - mx);
        KILN_TC t = sum + e, bb = t - sum;
        comp += (sum - (t - bb)) + (e - bb); /* the rounding error of sum + e (TwoSum) */
        sum = t;
    }
    *m = mx;
    *s = sum + comp;
}

/* Launched over [inner, outer] (capped: KILN_FOR loops). Rows come from the NDRange, not from
 * div/rem of one id (a div/rem pair becomes an LLVM `freeze`, which Oclgrind's checker cannot
 * run). */
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_softmax)
kernel void kiln_softmax(global const KILN_T *x, global KILN_T *y, long outer, long n, long inner,
                         int logmode)
{
    KILN_FOR(o, 1, outer) {
        KILN_FOR(i, 0, inner) {
            long base = o * n * inner + i;
            KILN_TC m, s;
            kiln_row_stats(x, base, n, inner, &m, &s);
            KILN_TC lse = log(s);
            for (long j = 0; j < n; j++) {
                long k = base + j * inner;
                KILN_TC d = LOAD_T(x, k) - m;
                STORE_T(y, k, logmode ? d - lse : exp(d) / s);
            }
        }
    }
}
#endif

/* loss[i] = logsumexp(row) - row[label]; grad row = (softmax - onehot) * scale. A label outside
 * [0, C) gives NaN for the row's loss and gradient, so the mean loss is NaN, and is reported in
 * the device error word (kerr, kcode: prelude.cl's kiln_report). */
#define KILN_CE_KERNEL(name, LABEL_T)                                                           \
    kernel void name(global const KILN_T *logits, global const LABEL_T *labels,                 \
                     global KILN_T *loss, global KILN_T *grad, long rows, long classes,         \
                     int want_grad, KILN_TC scale, global int *kerr, int kcode)                 \
    {                                                                                           \
        KILN_FOR(r, 0, rows) {                                                                  \
            long base = r * classes;                                                            \
            long label = (long)labels[r];                                                       \
            bool ok = label >= 0 && label < classes;                                            \
            if (!ok)                                                                            \
                kiln_report(kerr, kcode, KILN_ERROR_LABEL, label, r, classes);                  \
            KILN_TC m, s;                                                                       \
            kiln_row_stats(logits, base, classes, 1, &m, &s);                                   \
            KILN_TC lse = m + log(s);                                                           \
            STORE_T(loss, r, ok ? lse - LOAD_T(logits, base + label) : (KILN_TC)NAN);           \
            for (long j = 0; want_grad && j < classes; j++) {                                   \
                KILN_TC p = exp(LOAD_T(logits, base + j) - m) / s;                              \
                KILN_TC g = (p - (j == label ? (KILN_TC)1 : (KILN_TC)0)) * scale;               \
                STORE_T(grad, base + j, ok ? g : (KILN_TC)NAN);                                 \
            }                                                                                   \
        }                                                                                       \
    }

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_cross_entropy_i32)
KILN_CE_KERNEL(kiln_cross_entropy_i32, int)
#endif
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_cross_entropy_i64)
KILN_CE_KERNEL(kiln_cross_entropy_i64, long)
#endif

#ifndef KILN_T_NARROW
/* ---- CPUs, contiguous rows: the same steps in vectors of 8, lanes merged at the end (PoCL
 * vectorizes exp across work-items only in a kernel without loops; a row loop needs vectors). */
#define KILN_NN_PASTE_(a, b) a##b
#define KILN_NN_PASTE(a, b) KILN_NN_PASTE_(a, b)
#define KILN_TCV KILN_NN_PASTE(KILN_TC, 8)

/* kiln_row_stats of the contiguous row x[base .. base + n), storing each exp(x - m) into
 * e[base ..] when `keep` (softmax and the cross-entropy gradient then scale them by 1 / s: one
 * exp per element, where computing it again for the output cost as much as the sum itself). e
 * may be x's own buffer: each element is read before it is written. Both passes go 32 elements
 * at a time in four independent vectors (one vector's chain of dependent max or TwoSum steps
 * held the loop to their latency: 70% of a [4096, 1024] softmax, measured with perf); the four
 * exponentials are added plainly (two roundings, all terms positive) before one compensated
 * step, so the sum stays within about 3 eps of the exact one. */
void kiln_row_stats8(global const KILN_T *x, global KILN_T *e, int keep, long base, long n,
                     KILN_TC *m, KILN_TC *s)
{
    KILN_TC mx = -INFINITY, sum = 0, comp = 0, a[8], b[8];
    long j = 0;
    if (n >= 8) {
        KILN_TCV m0 = vload8(0, x + base), m1 = m0, m2 = m0, m3 = m0;
        for (j = 8; j + 32 <= n; j += 32) {
            m0 = fmax(m0, vload8(0, x + base + j));
            m1 = fmax(m1, vload8(1, x + base + j));
            m2 = fmax(m2, vload8(2, x + base + j));
            m3 = fmax(m3, vload8(3, x + base + j));
        }
        for (; j + 8 <= n; j += 8)
            m0 = fmax(m0, vload8(0, x + base + j));
        vstore8(fmax(fmax(m0, m1), fmax(m2, m3)), 0, a);
        for (int k = 0; k < 8; k++)
            mx = fmax(mx, a[k]);
    }
    for (; j < n; j++)
        mx = fmax(mx, x[base + j]);
    KILN_TCV sv = 0, cv = 0;
    for (j = 0; j + 32 <= n; j += 32) {
        KILN_TCV e0 = exp(vload8(0, x + base + j) - mx), e1 = exp(vload8(1, x + base + j) - mx);
        KILN_TCV e2 = exp(vload8(2, x + base + j) - mx), e3 = exp(vload8(3, x + base + j) - mx);
        if (keep) {
            vstore8(e0, 0, e + base + j);
            vstore8(e1, 1, e + base + j);
            vstore8(e2, 2, e + base + j);
            vstore8(e3, 3, e + base + j);
        }
        KILN_TCV ev = (e0 + e1) + (e2 + e3);
        KILN_TCV t = sv + ev, bb = t - sv;
        cv += (sv - (t - bb)) + (ev - bb); /* TwoSum, lane by lane */
        sv = t;
    }
    for (; j + 8 <= n; j += 8) {
        KILN_TCV ev = exp(vload8(0, x + base + j) - mx);
        if (keep)
            vstore8(ev, 0, e + base + j);
        KILN_TCV t = sv + ev, bb = t - sv;
        cv += (sv - (t - bb)) + (ev - bb); /* TwoSum, lane by lane */
        sv = t;
    }
    vstore8(sv, 0, a);
    vstore8(cv, 0, b);
    for (int k = 0; k < 8; k++) {
        KILN_TC t = sum + a[k], bb = t - sum;
        comp += ((sum - (t - bb)) + (a[k] - bb)) + b[k];
        sum = t;
    }
    for (; j < n; j++) {
        KILN_TC ej = exp(x[base + j] - mx);
        if (keep)
            e[base + j] = ej;
        KILN_TC t = sum + ej, bb = t - sum;
        comp += (sum - (t - bb)) + (ej - bb);
        sum = t;
    }
    *m = mx;
    *s = sum + comp;
}

/* kiln_softmax with inner == 1, launched over [outer] (capped: KILN_FOR loops). Softmax: the
 * exponentials go into y as they are summed, then y is scaled by 1 / s (the row is in cache);
 * log-softmax: x - m - log(s). */
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_softmax_rows8)
kernel void kiln_softmax_rows8(global const KILN_T *x, global KILN_T *y, long outer, long n,
                               int logmode)
{
    KILN_FOR(o, 0, outer) {
        long base = o * n, j = 0;
        KILN_TC m, s;
        kiln_row_stats8(x, y, !logmode, base, n, &m, &s);
        KILN_TC lse = log(s), inv = 1 / s;
        if (logmode) {
            for (; j + 8 <= n; j += 8)
                vstore8(vload8(0, x + base + j) - m - lse, 0, y + base + j);
            for (; j < n; j++)
                y[base + j] = x[base + j] - m - lse;
        } else {
            for (; j + 8 <= n; j += 8)
                vstore8(vload8(0, y + base + j) * inv, 0, y + base + j);
            for (; j < n; j++)
                y[base + j] *= inv;
        }
    }
}
#endif

/* The cross-entropy kernels in vectors: the row's exponentials go into grad as they are summed
 * (when the gradient is wanted), every gradient element becomes p * scale with p = e / s, then
 * the label's (p - 1) * scale from its exponential kept aside. */
#define KILN_CE8_KERNEL(name, LABEL_T)                                                          \
    kernel void name(global const KILN_T *logits, global const LABEL_T *labels,                 \
                     global KILN_T *loss, global KILN_T *grad, long rows, long classes,         \
                     int want_grad, KILN_TC scale, global int *kerr, int kcode)                 \
    {                                                                                           \
        KILN_FOR(r, 0, rows) {                                                                  \
            long base = r * classes, j = 0;                                                     \
            long label = (long)labels[r];                                                       \
            bool ok = label >= 0 && label < classes;                                            \
            if (!ok)                                                                            \
                kiln_report(kerr, kcode, KILN_ERROR_LABEL, label, r, classes);                  \
            KILN_TC m, s;                                                                       \
            kiln_row_stats8(logits, grad, want_grad, base, classes, &m, &s);                    \
            KILN_TC lse = m + log(s), inv = 1 / s;                                              \
            loss[r] = ok ? lse - logits[base + label] : (KILN_TC)NAN;                           \
            if (!want_grad)                                                                     \
                continue;                                                                       \
            KILN_TC el = ok ? grad[base + label] : (KILN_TC)0;                                  \
            for (; j + 8 <= classes; j += 8) {                                                  \
                KILN_TCV p = vload8(0, grad + base + j) * inv;                                  \
                vstore8(ok ? p * scale : (KILN_TCV)NAN, 0, grad + base + j);                    \
            }                                                                                   \
            for (; j < classes; j++)                                                            \
                grad[base + j] = ok ? grad[base + j] * inv * scale : (KILN_TC)NAN;              \
            if (ok)                                                                             \
                grad[base + label] = (el * inv - (KILN_TC)1) * scale;                           \
        }                                                                                       \
    }

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_cross_entropy8_i32)
KILN_CE8_KERNEL(kiln_cross_entropy8_i32, int)
#endif
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_cross_entropy8_i64)
KILN_CE8_KERNEL(kiln_cross_entropy8_i64, long)
#endif
#endif

#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_mse)
kernel void kiln_mse(global const KILN_T *pred, global const KILN_T *target, global KILN_T *sq,
                     global KILN_T *grad, long n, int want_grad, KILN_TC gscale)
{
    KILN_FOR(i, 0, n) {
        KILN_TC d = LOAD_T(pred, i) - LOAD_T(target, i);
        STORE_T(sq, i, d * d);
        if (want_grad)
            STORE_T(grad, i, gscale * d);
    }
}
#endif

/* d = g + wd * p; with momentum: v = momentum * v + d, d = v; p -= lr * d. */
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_sgd)
kernel void kiln_sgd(global KILN_T *p, global const KILN_T *g, global KILN_T *v, long n,
                     KILN_TC lr, KILN_TC momentum, KILN_TC wd, int has_v)
{
    KILN_FOR(i, 0, n) {
        KILN_TC pi = LOAD_T(p, i);
        KILN_TC d = LOAD_T(g, i) + wd * pi;
        if (has_v) {
            d = momentum * LOAD_T(v, i) + d;
            STORE_T(v, i, d);
        }
        STORE_T(p, i, pi - lr * d);
    }
}
#endif

/* m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr (m / bc1) / (sqrt(v / bc2) + eps),
 * with bc1 = 1 - b1^step, bc2 = 1 - b2^step computed on the host in double. */
#if !defined(KILN_ONLY) || defined(KILN_WANT_kiln_adam)
kernel void kiln_adam(global KILN_T *p, global const KILN_T *g, global KILN_T *m, global KILN_T *v,
                      long n, KILN_TC lr, KILN_TC b1, KILN_TC b2, KILN_TC eps, KILN_TC bc1,
                      KILN_TC bc2)
{
    KILN_FOR(i, 0, n) {
        KILN_TC gi = LOAD_T(g, i);
        KILN_TC mi = b1 * LOAD_T(m, i) + (1 - b1) * gi;
        KILN_TC vi = b2 * LOAD_T(v, i) + (1 - b2) * gi * gi;
        STORE_T(m, i, mi);
        STORE_T(v, i, vi);
        STORE_T(p, i, LOAD_T(p, i) - lr * (mi / bc1) / (sqrt(vi / bc2) + eps));
    }
}
#endif
