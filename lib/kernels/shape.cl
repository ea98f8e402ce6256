/* shape.cl - the copy kernels behind permute, transpose, cat and slice: kiln_strided_copy and,
 * for transposed innermost dimensions, kiln_transpose_tiles (below). kiln_strided_copy:
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
    KILN_FOR(c0, 2, d0) {
        KILN_FOR(c1, 1, d1) {
            KILN_FOR(c2, 0, d2) {
                out[oo + c0 * os0 + c1 * os1 + c2 * os2] = in[io + c0 * is0 + c1 * is1 + c2 * is2];
            }
        }
    }
}

/* kiln_transpose_tiles: the same copy for blocks whose innermost two dimensions swap their
 * contiguity (in is contiguous along a, out along b), as in a transpose: a tile of
 * KILN_TILE x KILN_TILE elements is read along a and written along b through local memory, so
 * both sides are accessed in order. Launched over [ceil(A), ceil(B), d0] with local
 * [KILN_TILE, KILN_TILE, 1] (capped: loops over tiles); c0 < d0 is an optional outer dimension. */
#define KILN_TILE 16
kernel void kiln_transpose_tiles(global const KILN_E *in, global KILN_E *out, long io, long oo,
                                 long d0, long na, long nb, long is0, long isb, long os0,
                                 long osa)
{
    local KILN_E tile[KILN_TILE][KILN_TILE + 1]; /* +1: no bank conflicts on the way out */
    long lx = get_local_id(0), ly = get_local_id(1);
    /* Capped launches: every work-group loops over tiles (the same for all its work-items). */
    KILN_FOR(c0, 2, d0) {
        KILN_FOR_GROUP(tb, 1, (nb + KILN_TILE - 1) / KILN_TILE) {
            KILN_FOR_GROUP(ta, 0, (na + KILN_TILE - 1) / KILN_TILE) {
                long a0 = ta * KILN_TILE, b0 = tb * KILN_TILE;
                long a = a0 + lx, b = b0 + ly;
                if (a < na && b < nb)
                    tile[ly][lx] = in[io + c0 * is0 + a + b * isb];
                barrier(CLK_LOCAL_MEM_FENCE);
                a = a0 + ly;
                b = b0 + lx;
                if (a < na && b < nb)
                    out[oo + c0 * os0 + a * osa + b] = tile[lx][ly];
                barrier(CLK_LOCAL_MEM_FENCE); /* before the next tile overwrites this one */
            }
        }
    }
}
