/* shape.cl - kiln_strided_copy, the one copy kernel behind permute, transpose, cat and slice:
 * for every coordinate (c0, c1, c2) of a 3-D copy block d0 x d1 x d2 (launched over
 * [d2, d1, d0], padded, so c2 is the innermost),
 *   out[oo + c0 * os0 + c1 * os1 + c2 * os2] = in[io + c0 * is0 + c1 * is1 + c2 * is2].
 * Higher ranks are split into several launches by the host. Coordinates come from the NDRange
 * rather than from div/rem of one id (a div/rem pair becomes an LLVM `freeze`, which Oclgrind's
 * uninitialised-value checker cannot run).
 * Expects KILN_E: an unsigned integer type of the element's size, so every dtype (f16 too) is
 * copied bit for bit. */

kernel void kiln_strided_copy(global const KILN_E *in, global KILN_E *out, long io, long oo,
                              long d0, long d1, long d2, long is0, long is1, long is2, long os0,
                              long os1, long os2)
{
    long c2 = get_global_id(0), c1 = get_global_id(1), c0 = get_global_id(2);
    if (c2 >= d2 || c1 >= d1 || c0 >= d0)
        return;
    out[oo + c0 * os0 + c1 * os1 + c2 * os2] = in[io + c0 * is0 + c1 * is1 + c2 * is2];
}
