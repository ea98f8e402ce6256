/* matmul_clblast.c - the "clblast" matmul path: CLBlast's tuned GEMM on the device queue, the
 * choice for GPUs. */
#include <stdio.h>

#include "../clcall.h"
#include "../queue.h"
#include "../registry.h"
#include "../status.h"
#include "../tensor.h"
#include "matmul.h"

/* CLBlast's own codes for a device without fp64 / fp16 (clblast_c.h, CLBlastNo*Precision). */
#define CLBLAST_NO_DOUBLE (-2044)
#define CLBLAST_NO_HALF (-2045)

kiln_status kiln__clblast_status(int code, const kiln_device *dev, const char *fn)
{
    if (code == 0)
        return KILN_OK;
    /* CLBlast's own codes start at -1007 (the clBLAS range, -1007 .. -1024, then -2043 ..). */
    if (code > -1000)
        return kiln__cl_fail((cl_int)code, "kiln_matmul", fn, kiln__device_label(dev));
    if (code == CLBLAST_NO_DOUBLE || code == CLBLAST_NO_HALF)
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "kiln_matmul: %s failed with CLBlast status %d: %s (%s) lacks %s "
                           "precision; use f32",
                           fn, code, dev->info.spec, dev->info.name,
                           code == CLBLAST_NO_DOUBLE ? "double" : "half");
    return kiln__error(KILN_ERR_OPENCL,
                       "kiln_matmul: %s failed with CLBlast status %d on %s (%s); try "
                       "KILN_MATMUL=builtin",
                       fn, code, dev->info.spec, dev->info.name);
}

#ifdef KILN_HAVE_CLBLAST

#include <clblast_c.h>

_Static_assert(CLBlastNoDoublePrecision == CLBLAST_NO_DOUBLE &&
                   CLBlastNoHalfPrecision == CLBLAST_NO_HALF,
               "CLBlast's precision status codes changed");

static CLBlastTranspose trans(bool t)
{
    return t ? CLBlastTransposeYes : CLBlastTransposeNo;
}

static CLBlastStatusCode gemm(const kiln__matmul_problem *p, cl_command_queue *q, cl_event *ev,
                              const char **fn)
{
    size_t m = (size_t)p->m, n = (size_t)p->n, k = (size_t)p->k;
    size_t lda = p->trans_a ? m : k, ldb = p->trans_b ? k : n, ldc = n;
    cl_mem a = p->a->storage->mem, b = p->b->storage->mem, c = p->c->storage->mem;
    CLBlastTranspose ta = trans(p->trans_a), tb = trans(p->trans_b);
    if (p->batch == 1) {
        *fn = p->dtype == KILN_F32 ? "CLBlastSgemm" : "CLBlastDgemm";
        if (p->dtype == KILN_F32)
            return CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0f, a, 0, lda, b, 0, ldb,
                                0.0f, c, 0, ldc, q, ev);
        return CLBlastDgemm(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0, a, 0, lda, b, 0, ldb, 0.0,
                            c, 0, ldc, q, ev);
    }
    size_t sa = (size_t)p->stride_a, sb = (size_t)p->stride_b, sc = (size_t)p->stride_c;
    size_t batch = (size_t)p->batch;
    *fn = p->dtype == KILN_F32 ? "CLBlastSgemmStridedBatched" : "CLBlastDgemmStridedBatched";
    if (p->dtype == KILN_F32)
        return CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0f, a, 0, lda,
                                          sa, b, 0, ldb, sb, 0.0f, c, 0, ldc, sc, batch, q, ev);
    return CLBlastDgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, m, n, k, 1.0, a, 0, lda, sa, b,
                                      0, ldb, sb, 0.0, c, 0, ldc, sc, batch, q, ev);
}

static kiln_status clblast_run(const kiln__matmul_problem *p)
{
    cl_command_queue q = kiln__queue(p->dev);
    cl_event ev = NULL;
    const char *fn = "CLBlastSgemm";
    CLBlastStatusCode code = gemm(p, &q, &ev, &fn);
    if (ev)
        kiln__cl.ReleaseEvent(ev);
    return kiln__clblast_status((int)code, p->dev, fn);
}

static bool clblast_available(kiln_device *dev, char *why, size_t size)
{
    (void)dev;
    (void)why;
    (void)size;
    return true;
}

const kiln__matmul_path kiln__matmul_clblast = {"clblast", clblast_available, clblast_run, NULL};

#else

const kiln__matmul_path kiln__matmul_clblast = {
    "clblast", NULL, NULL,
    "kiln was built without CLBlast (install libclblast-dev and reconfigure)"};

#endif
