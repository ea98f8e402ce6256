/* creation.cl - kernels over slot T (prelude.cl: KILN_T, KILN_TC, STORE_T):
 *   kiln_fill(out, n, value)          out[i] = value
 *   kiln_arange(out, n, start, step)  out[i] = start + i * step, in the compute type
 * (the output and its length first, as kiln__fill_kernel in lib/ops/common.c passes them)
 * A kernel rather than clEnqueueFillBuffer: Oclgrind does not count a pattern fill as
 * initialising memory, so every later read of it would be reported.
 * No contraction to fma (NVIDIA's compiler and PoCL's LLVM fuse by default): arange is
 * start + i * step rounded twice, the same bits on every device (tests/test-creation.c). */
#pragma OPENCL FP_CONTRACT OFF

kernel void kiln_fill(global KILN_T *out, long n, KILN_TC value)
{
    KILN_FOR(i, 0, n) {
        STORE_T(out, i, value);
    }
}

kernel void kiln_arange(global KILN_T *out, long n, KILN_TC start, KILN_TC step)
{
    KILN_FOR(i, 0, n) {
        STORE_T(out, i, start + (KILN_TC)i * step);
    }
}
