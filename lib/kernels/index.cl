/* index.cl - kernels that pick elements by index:
 *   kiln_index_select   out[o, j, i] = x[o, idx[j], i]  (x viewed as [outer, n, inner])
 *   kiln_gather         out[c] = x[c with c[axis] replaced by idx[c]], for the innermost three
 *                       dimensions of the index's shape (higher ones are host launches)
 *   kiln_one_hot        out[r, c] = (labels[r] == c), in the output dtype
 *   kiln_index_add      the scatter-add of the two gradients (slot T, floating)
 * Expects KILN_E (an unsigned integer type of the element's size: elements are copied bit for
 * bit, f16 too) and KILN_I (the index type, int or long); kiln_one_hot expects slot O instead of
 * KILN_E. An index outside [0, n) gives a zero element (a row of zeros for one_hot), never a read
 * outside x, and is reported in the device error word (kerr, kcode: prelude.cl's kiln_report;
 * KILN_CHECK=1 refuses it on the host before the launch). Coordinates come from the NDRange, not from div/rem of one id (see
 * shape.cl). */

#ifdef KILN_E
kernel void kiln_index_select(global const KILN_E *x, global const KILN_I *idx, global KILN_E *out,
                              long outer, long n, long inner, long m, global int *kerr, int kcode)
{
    KILN_FOR(o, 2, outer) {
        KILN_FOR(j, 1, m) {
            long k = (long)idx[j];
            if ((k < 0 || k >= n) && o == 0 && get_global_id(0) == 0)
                kiln_report(kerr, kcode, KILN_ERROR_INDEX, k, j, n);
            KILN_FOR(i, 0, inner) {
                KILN_E v = 0;
                if (k >= 0 && k < n)
                    v = x[(o * n + k) * inner + i];
                out[(o * m + j) * inner + i] = v;
            }
        }
    }
}

/* One 3-D block (c0, c1, c2) of the index's innermost dimensions d0 x d1 x d2 (launched over
 * [d2, d1, d0]). io: offset of the block in idx and out (both contiguous, of the index's
 * shape, strides os0..os2); xo: offset in x of the block's coordinates outside the axis,
 * xs0..xs2 x's strides; axis_slot: which of c0..c2 is the gather axis (3: a host-looped
 * dimension), whose x stride is xsa and length n. */
kernel void kiln_gather(global const KILN_E *x, global const KILN_I *idx, global KILN_E *out,
                        long io, long xo, long d0, long d1, long d2, long os0, long os1, long os2,
                        long xs0, long xs1, long xs2, int axis_slot, long xsa, long n,
                        global int *kerr, int kcode)
{
    KILN_FOR(c0, 2, d0) {
        KILN_FOR(c1, 1, d1) {
            KILN_FOR(c2, 0, d2) {
                long e = io + c0 * os0 + c1 * os1 + c2 * os2;
                long k = (long)idx[e];
                if (k < 0 || k >= n)
                    kiln_report(kerr, kcode, KILN_ERROR_INDEX, k, e, n);
                long off = xo + k * xsa;
                off += axis_slot == 0 ? 0 : c0 * xs0;
                off += axis_slot == 1 ? 0 : c1 * xs1;
                off += axis_slot == 2 ? 0 : c2 * xs2;
                KILN_E v = 0;
                if (k >= 0 && k < n)
                    v = x[off];
                out[e] = v;
            }
        }
    }
}
#endif

#ifdef KILN_O
kernel void kiln_one_hot(global const KILN_I *labels, global KILN_O *out, long rows, long classes,
                         global int *kerr, int kcode)
{
    KILN_FOR(r, 1, rows) {
        long label = (long)labels[r];
        if ((label < 0 || label >= classes) && get_global_id(0) == 0)
            kiln_report(kerr, kcode, KILN_ERROR_CLASS, label, r, classes);
        KILN_FOR(c, 0, classes) {
            STORE_O(out, r * classes + c, c == label ? (KILN_OC)1 : (KILN_OC)0);
        }
    }
}
#endif

#ifdef KILN_T
/* The gradients of index_select (per_element 0: idx[j]) and gather (per_element 1: idx shaped
 * like g, [outer, m, inner]): out[o, k, i] = sum of g[o, j, i] over the j whose index is k, out
 * viewed as [outer, n, inner]; an index outside [0, n) adds nothing. One work-item per (o, i)
 * column zeroes it, then adds in j order: no atomics (OpenCL 1.2 has no floating ones), no
 * races (columns are disjoint), and the same sums in the same order on every device. */
kernel void kiln_index_add(global const KILN_T *g, global const KILN_I *idx, global KILN_T *out,
                           long outer, long n, long inner, long m, int per_element)
{
    KILN_FOR(o, 1, outer) {
        KILN_FOR(i, 0, inner) {
            for (long k = 0; k < n; k++)
                STORE_T(out, (o * n + k) * inner + i, (KILN_TC)0);
            for (long j = 0; j < m; j++) {
                long e = (o * m + j) * inner + i;
                long k = (long)idx[per_element ? e : j];
                if (k >= 0 && k < n) {
                    long d = (o * n + k) * inner + i;
                    STORE_T(out, d, LOAD_T(out, d) + LOAD_T(g, e));
                }
            }
        }
    }
}
#endif
