/* matmul.c - kiln_matmul and friends: host-side validation, batch broadcasting and the choice
 * between the CLBlast, host CBLAS and built-in kernel paths. */
#include "matmul.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../autograd.h"
#include "../clcall.h"
#include "../dtype.h"
#include "../queue.h"
#include "../registry.h"
#include "../status.h"
#include "../tensor.h"
#include "amp.h"
#include "common.h"

static const kiln__matmul_path *const paths[] = {
    &kiln__matmul_clblast,
    &kiln__matmul_cblas,
    &kiln__matmul_builtin,
};
#define NPATHS ((int)(sizeof paths / sizeof paths[0]))

/* (device, path) pairs already logged, so the choice is logged once per device. */
#define LOGGED_MAX 64
static struct {
    const kiln_device *dev;
    const kiln__matmul_path *path;
} logged[LOGGED_MAX];
static int nlogged;
static pthread_mutex_t logged_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_choice(kiln_device *dev, const kiln__matmul_path *path, bool forced)
{
    if (!kiln__log_enabled(KILN_LOG_INFO))
        return;
    bool seen = false;
    pthread_mutex_lock(&logged_lock);
    for (int i = 0; i < nlogged && !seen; i++)
        seen = logged[i].dev == dev && logged[i].path == path;
    if (!seen && nlogged < LOGGED_MAX) {
        logged[nlogged].dev = dev;
        logged[nlogged++].path = path;
    }
    pthread_mutex_unlock(&logged_lock);
    if (!seen)
        kiln__log(KILN_LOG_INFO, "matmul on %s (%s) uses the %s path%s", dev->info.spec,
                  dev->info.name, path->name, forced ? " (forced by KILN_MATMUL)" : "");
}

bool kiln__matmul_path_available(const kiln__matmul_path *path, kiln_device *dev, char *why,
                                 size_t size)
{
    if (path->missing) {
        snprintf(why, size, "%s", path->missing);
        return false;
    }
    return path->available(dev, why, size);
}

static kiln_status select_forced(kiln_device *dev, const char *force, const char *op,
                                 const kiln__matmul_path **out)
{
    for (int i = 0; i < NPATHS; i++) {
        if (strcmp(force, paths[i]->name) != 0)
            continue;
        char why[160] = "";
        if (!kiln__matmul_path_available(paths[i], dev, why, sizeof why))
            return kiln__error(KILN_ERR_UNSUPPORTED,
                               "%s: KILN_MATMUL=%s is not available on %s (%s): %s; unset "
                               "KILN_MATMUL to let kiln choose",
                               op, force, dev->info.spec, dev->info.name, why);
        *out = paths[i];
        return KILN_OK;
    }
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: unknown KILN_MATMUL value '%s'; use clblast, cblas or builtin", op,
                       force);
}

kiln_status kiln__matmul_select(kiln_device *dev, const char *force, const char *op,
                                const kiln__matmul_path **out)
{
    *out = NULL;
    if (force && *force)
        return select_forced(dev, force, op, out);
    char why[160];
    /* GPUs: CLBlast, or the built-in kernel once CLBlast failed there; CPUs with host memory:
     * CBLAS; the built-in kernel always works. */
    if ((dev->info.type == KILN_DEVICE_GPU || kiln__matmul_clblast_any_device) &&
        kiln__matmul_path_available(&kiln__matmul_clblast, dev, why, sizeof why))
        *out = kiln__clblast_fallback_reason(dev) ? &kiln__matmul_builtin : &kiln__matmul_clblast;
    else if (kiln__matmul_path_available(&kiln__matmul_cblas, dev, why, sizeof why))
        *out = &kiln__matmul_cblas;
    else
        *out = &kiln__matmul_builtin;
    return KILN_OK;
}

const char *kiln_matmul_path(kiln_device *dev)
{
    if (kiln__check_device(dev, "kiln_matmul_path") != KILN_OK)
        return NULL;
    const kiln__matmul_path *p;
    if (kiln__matmul_select(dev, getenv("KILN_MATMUL"), "kiln_matmul_path", &p) != KILN_OK)
        return NULL;
    return p->name;
}

const char *kiln_matmul_path_reason(kiln_device *dev)
{
    static const char *const op = "kiln_matmul_path_reason";
    if (kiln__check_device(dev, op) != KILN_OK)
        return NULL;
    const kiln__matmul_path *p;
    const char *force = getenv("KILN_MATMUL");
    if (kiln__matmul_select(dev, force, op, &p) != KILN_OK)
        return NULL;
    if (force && *force)
        return "forced by KILN_MATMUL";
    if (p == &kiln__matmul_clblast)
        return "the default on GPUs: CLBlast";
    if (p == &kiln__matmul_cblas)
        return "the default on CPU devices with unified memory: host CBLAS";
    const char *why = kiln__clblast_fallback_reason(dev);
    if (why)
        return why;
    bool gpu = dev->info.type == KILN_DEVICE_GPU;
    if (gpu && kiln__matmul_clblast.missing)
        return kiln__matmul_clblast.missing;
    if (!gpu && kiln__matmul_cblas.missing)
        return kiln__matmul_cblas.missing;
    return "neither CLBlast (GPUs) nor host CBLAS (CPU devices with unified memory) applies to "
           "this device";
}

static kiln_status shape_error(const char *op, const kiln_tensor *a, const kiln_tensor *b,
                               unsigned flags, const char *what)
{
    char sa[160], sb[160];
    return kiln__error(KILN_ERR_SHAPE_MISMATCH, "%s: shapes %s%s and %s%s %s", op,
                       kiln__shape_str(sa, sizeof sa, a->ndim, a->shape),
                       (flags & KILN_MATMUL_TRANS_A) ? " (transposed)" : "",
                       kiln__shape_str(sb, sizeof sb, b->ndim, b->shape),
                       (flags & KILN_MATMUL_TRANS_B) ? " (transposed)" : "", what);
}

static int64_t batch_numel(const kiln_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim - 2; i++)
        n *= t->shape[i];
    return n;
}

static bool same_batch_shape(const kiln_tensor *a, const kiln_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim - 2; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

/* The result shape of a valid product: the batch dims of the operand that is not a batch of
 * 1 (else of the longer one), then [M, N]. */
typedef struct plan {
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
} plan;

static kiln_status check_operands(const char *op, const kiln_tensor *a, const kiln_tensor *b,
                                  unsigned flags)
{
    if (flags & ~(KILN_MATMUL_TRANS_A | KILN_MATMUL_TRANS_B))
        return kiln__error(
            KILN_ERR_INVALID_ARGUMENT,
            "%s: unknown flags 0x%x; use KILN_MATMUL_TRANS_A and KILN_MATMUL_TRANS_B", op, flags);
    if (a->ndim < 2 || b->ndim < 2)
        return shape_error(op, a, b, flags,
                           "need at least 2 dimensions each (use a [1, K] or [K, 1] matrix "
                           "for a vector)");
    if (a->dtype != b->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: dtypes %s and %s differ; cast one with kiln_cast()", op,
                           kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    if (!kiln__dtype_is_float(a->dtype))
        return kiln__error(
            KILN_ERR_UNSUPPORTED,
            "%s: dtype %s is not supported; matmul takes f32, f64, f16 or bf16 (cast "
            "integers with kiln_cast())",
            op, kiln_dtype_name(a->dtype));
    return kiln__check_dtype_on(a->dev, a->dtype, op);
}

static kiln_status make_plan(const char *op, const kiln_tensor *a, const kiln_tensor *b,
                             unsigned flags, kiln__matmul_problem *p, plan *pl)
{
    kiln_status s = check_operands(op, a, b, flags);
    if (s != KILN_OK)
        return s;
    p->trans_a = flags & KILN_MATMUL_TRANS_A;
    p->trans_b = flags & KILN_MATMUL_TRANS_B;
    const int64_t *as = a->shape + a->ndim - 2, *bs = b->shape + b->ndim - 2;
    p->m = p->trans_a ? as[1] : as[0];
    p->k = p->trans_a ? as[0] : as[1];
    int64_t kb = p->trans_b ? bs[1] : bs[0];
    p->n = p->trans_b ? bs[0] : bs[1];
    if (p->k != kb)
        return shape_error(op, a, b, flags, "do not match: inner dimensions differ");
    int64_t na = batch_numel(a), nb = batch_numel(b);
    /* A batch of 1 broadcasts; otherwise the batch shapes must be equal. */
    const kiln_tensor *outer = na != 1 ? a : nb != 1 ? b : a->ndim >= b->ndim ? a : b;
    if (na != 1 && nb != 1 && !same_batch_shape(a, b))
        return shape_error(op, a, b, flags,
                           "have different batch dimensions (a batch of 1 broadcasts, "
                           "others must be equal)");
    if (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX)
        return shape_error(op, a, b, flags,
                           "have a matrix dimension over 2^31 - 1, which no matmul path "
                           "supports");
    p->dtype = a->dtype;
    p->batch = outer == a ? na : nb;
    p->stride_a = na == 1 ? 0 : p->m * p->k;
    p->stride_b = nb == 1 ? 0 : p->k * p->n;
    p->stride_c = p->m * p->n;
    pl->ndim = outer->ndim;
    memcpy(pl->shape, outer->shape, sizeof pl->shape);
    pl->shape[pl->ndim - 2] = p->m;
    pl->shape[pl->ndim - 1] = p->n;
    return KILN_OK;
}

/* The product into c, which has the planned shape; no CL call for an empty result. */
static kiln_status compute(const char *op, kiln__matmul_problem *p)
{
    if (p->m == 0 || p->n == 0 || p->batch == 0)
        return KILN_OK;
    kiln_device *dev = p->dev;
    kiln_status s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    if (p->k == 0) {
        /* An empty sum: zeros, as every BLAS gives with beta = 0. */
        static const double zero = 0.0;
        cl_int err =
            kiln__cl.EnqueueFillBuffer(kiln__queue(dev), p->c->storage->mem, &zero,
                                       kiln_dtype_size(p->dtype), 0, p->c->nbytes, 0, NULL, NULL);
        return err == CL_SUCCESS ? KILN_OK : kiln__queue_fail(err, op, "clEnqueueFillBuffer", dev);
    }
    /* A shared B under a batch of plain A is one taller product: [batch*M, K] x [K, N]. */
    if (p->batch > 1 && p->stride_b == 0 && !p->trans_a && p->stride_a == p->m * p->k &&
        p->batch * p->m <= INT_MAX) {
        p->m *= p->batch;
        p->stride_a = p->stride_c = 0;
        p->batch = 1;
    }
    const kiln__matmul_path *path;
    const char *force = getenv("KILN_MATMUL");
    s = kiln__matmul_select(dev, force, op, &path);
    if (s != KILN_OK)
        return s;
    p->forced = force && *force;
    if (kiln__dtype_is_narrow(p->dtype) && path == &kiln__matmul_clblast) {
        /* CLBlast's HGEMM needs cl_khr_fp16 and accumulates in half, and CLBlast has no bf16;
         * kiln's 16-bit products accumulate in f32, which its own kernel does on every device. */
        if (p->forced)
            return kiln__error(
                KILN_ERR_UNSUPPORTED,
                "%s: KILN_MATMUL=clblast cannot multiply %s on %s (%s): CLBlast has "
                "no bf16 GEMM, its HGEMM accumulates in half precision, and kiln's "
                "16-bit products accumulate in f32; unset KILN_MATMUL or use builtin",
                op, kiln_dtype_name(p->dtype), dev->info.spec, dev->info.name);
        path = &kiln__matmul_builtin;
    }
    log_choice(dev, path, p->forced);
    return path->run(p);
}

/* a, b and out in messages (out is the last argument of the _out forms, after the flags). */
static const char *const operand_names[] = {"argument 1 (a)", "argument 2 (b)", "argument 4 (out)"};

static kiln_status matmul_new(const char *op, const kiln_tensor *a, const kiln_tensor *b,
                              unsigned flags, kiln_tensor **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln__matmul_problem p = {0};
    kiln_status s =
        kiln__check_tensors(op, 2, 2, (const kiln_tensor *[]){a, b}, operand_names, &p.dev);
    if (s != KILN_OK)
        return s;
    const kiln_tensor *in[2] = {a, b}; /* autocast: f32 operands in the region's dtype */
    kiln_tensor *tmp[2];
    if (kiln__amp_apply(op, KILN__AMP_LOWER, 2, in, tmp, &s)) {
        if (s == KILN_OK)
            s = matmul_new(op, in[0], in[1], flags, out);
        kiln__amp_release(2, tmp);
        return s;
    }
    plan pl = {0};
    s = make_plan(op, a, b, flags, &p, &pl);
    if (s != KILN_OK)
        return s;
    kiln_tensor *c;
    s = kiln__tensor_new(p.dev, p.dtype, pl.ndim, pl.shape, op, &c);
    if (s != KILN_OK)
        return s;
    p.a = a;
    p.b = b;
    p.c = c;
    s = kiln__finish(compute(op, &p), c, NULL, out);
    return kiln__ag_record(s, op, KILN__AG_MATMUL, &(kiln__ag_args){.flags = (int)flags}, 2,
                           (const kiln_tensor *[]){a, b}, out);
}

kiln_status kiln_matmul(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor **out)
{
    return matmul_new("kiln_matmul", a, b, 0, out);
}

kiln_status kiln_matmul_trans(const kiln_tensor *a, const kiln_tensor *b, kiln_matmul_flags flags,
                              kiln_tensor **out)
{
    return matmul_new("kiln_matmul_trans", a, b, (unsigned)flags, out);
}

/* out must have the product's exact dtype and shape; every path writes C while it still reads
 * A and B, so out must not share their memory. */
static kiln_status check_out(const char *op, const kiln_tensor *a, const kiln_tensor *b,
                             const kiln_tensor *c, const kiln__matmul_problem *p, const plan *pl)
{
    kiln_status s = kiln__check_out(op, c, p->dev, p->dtype, pl->ndim, pl->shape);
    return s == KILN_OK ? kiln__check_not_aliased(op, c, 2, (const kiln_tensor *[]){a, b}) : s;
}

static kiln_status matmul_into(const char *op, const kiln_tensor *a, const kiln_tensor *b,
                               unsigned flags, kiln_tensor *out)
{
    kiln__matmul_problem p = {0};
    kiln_status s =
        kiln__check_tensors(op, 3, 3, (const kiln_tensor *[]){a, b, out}, operand_names, &p.dev);
    if (s != KILN_OK)
        return s;
    plan pl = {0};
    s = make_plan(op, a, b, flags, &p, &pl);
    if (s == KILN_OK)
        s = check_out(op, a, b, out, &p, &pl);
    if (s != KILN_OK)
        return s;
    p.a = a;
    p.b = b;
    p.c = out;
    return compute(op, &p);
}

kiln_status kiln_matmul_out(const kiln_tensor *a, const kiln_tensor *b, kiln_tensor *out)
{
    return matmul_into("kiln_matmul_out", a, b, 0, out);
}

kiln_status kiln_matmul_trans_out(const kiln_tensor *a, const kiln_tensor *b,
                                  kiln_matmul_flags flags, kiln_tensor *out)
{
    return matmul_into("kiln_matmul_trans_out", a, b, (unsigned)flags, out);
}
