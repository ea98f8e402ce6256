/* creation.cl - kiln_arange(out, start, step, n): out[i] = start + i * step, computed in the
 * compute type of slot T (prelude.cl: KILN_T, KILN_TC, STORE_T). Filling with a constant needs
 * no kernel (clEnqueueFillBuffer). */
kernel void kiln_arange(global KILN_T *out, KILN_TC start, KILN_TC step, long n)
{
    long i = get_global_id(0);
    if (i >= n)
        return;
    STORE_T(out, i, start + (KILN_TC)i * step);
}
