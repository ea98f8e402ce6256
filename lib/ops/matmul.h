/* matmul.h - the matmul path table: one validated problem, three ways to compute it. */
#ifndef KILN_OPS_MATMUL_H
#define KILN_OPS_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln_cl.h"

/* One batched product C[i] = op(A[i]) * op(B[i]), validated on the host: every dim >= 1 and
 * fits an int, all tensors non-empty on dev, C not aliasing A or B. Strides are in elements;
 * a batch stride of 0 broadcasts that operand. A is [M, K] ([K, M] when trans_a), B is [K, N]
 * ([N, K] when trans_b), C is [M, N], all row-major. */
typedef struct kiln__matmul_problem {
    kiln_device *dev;
    kiln_dtype dtype; /* KILN_F32, KILN_F64, KILN_F16 or KILN_BF16 (16-bit: never clblast) */
    const kiln_tensor *a, *b;
    kiln_tensor *c;
    bool trans_a, trans_b;
    int64_t m, n, k, batch;
    int64_t stride_a, stride_b, stride_c;
    bool forced; /* KILN_MATMUL named the path: report its failures, never fall back */
} kiln__matmul_problem;

typedef struct kiln__matmul_path {
    const char *name;
    /* Whether the path can run on dev; if not, why (one short clause) goes to why. */
    bool (*available)(kiln_device *dev, char *why, size_t size);
    /* Enqueue the product on the device queue (asynchronous where the path allows). */
    kiln_status (*run)(const kiln__matmul_problem *p);
    /* Set when kiln was built without the path's library: why, and what to install. Such a path
     * is never available (available and run are NULL); see kiln__matmul_path_available. */
    const char *missing;
} kiln__matmul_path;

extern const kiln__matmul_path kiln__matmul_builtin;
extern const kiln__matmul_path kiln__matmul_cblas;
extern const kiln__matmul_path kiln__matmul_clblast;

/* Whether path can run on dev; if not, why (one short clause) goes to why. */
bool kiln__matmul_path_available(const kiln__matmul_path *path, kiln_device *dev, char *why,
                                 size_t size);

/* The path for dev: `force` ("clblast", "cblas", "builtin"; NULL or "" for automatic, as
 * KILN_MATMUL gives it). An unknown or unavailable forced path is KILN_ERR_UNSUPPORTED or
 * KILN_ERR_INVALID_ARGUMENT with a message naming op. */
kiln_status kiln__matmul_select(kiln_device *dev, const char *force, const char *op,
                                const kiln__matmul_path **out);

/* A CLBlast status code as a kiln status, with the message naming fn, the code's CLBlast name
 * (CLBlastOpenCLBuildProgramFailure), the code and the device: -5/-4 (a kernel fault on the
 * queue) go through kiln__queue_fail and lose the device, other OpenCL codes keep their kiln
 * mapping, -2044/-2045 (no fp64/fp16) are KILN_ERR_UNSUPPORTED, CLBlast's argument checks (kiln
 * validates first, so those are kiln bugs) and its other codes KILN_ERR_OPENCL. */
kiln_status kiln__clblast_status(int code, kiln_device *dev, const char *fn);

/* The name of a CLBlast status code in clblast_c.h ("CLBlastInvalidDimension"), or
 * "CLBlastUnknownStatus". */
const char *kiln__clblast_status_name(int code);

/* Why the automatic choice on dev left CLBlast for the built-in kernel (CLBlast failed there
 * once; set for good, logged once at KILN_LOG=info), or NULL if it has not. */
const char *kiln__clblast_fallback_reason(kiln_device *dev);

/* Test hook: the CLBlast call (CLBlast reaches OpenCL through the ICD loader, not kiln__cl, so
 * tests inject its failures here). Returns the CLBlast status and names the routine in *fn.
 * NULL when kiln was built without CLBlast. */
extern int (*kiln__clblast_gemm)(const kiln__matmul_problem *p, const char **fn);

/* Test hook: the real CLBlast call, to restore kiln__clblast_gemm (NULL without CLBlast). */
extern int (*const kiln__clblast_gemm_real)(const kiln__matmul_problem *p, const char **fn);

/* Test only: forget that CLBlast failed on dev and which of its routines ran there. */
void kiln__clblast_reset(kiln_device *dev);

/* Test hook: the automatic choice takes CLBlast on every device type, not only GPUs (so the
 * fallback runs on PoCL's CPU devices). */
extern bool kiln__matmul_clblast_any_device;

/* Test hook: make the cblas path use its wait-map-compute-unmap fallback instead of a native
 * kernel. */
extern bool kiln__matmul_cblas_no_native;
/* Test only: the cblas path maps every operand, even where the device runs kiln's buffers in
 * place (matmul_cblas.c, in_place_ptr). */
extern bool kiln__matmul_cblas_always_map;
/* Test only: run every cblas batch of at least this many products in this many parts on the
 * host pool, whatever its size (0: as matmul_cblas.c's plan_for decides). */
extern int kiln__matmul_cblas_parts;

/* Test hook: the most work-groups one launch of the built-in kernel has along its row and batch
 * dimensions (65535; larger products are split into several launches). */
extern int64_t kiln__matmul_builtin_max_groups;

#endif
