/* optim.c - optimizers over a parameter list (SGD, Adam, AdamW), their state as named tensors
 * for checkpoints, and zero_grad and gradient clipping over a kiln_params list. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "autograd_node.h"
#include "launch.h"
#include "live.h"
#include "nn/optim.h"
#include "ops/common.h"
#include "ops/ndrange.h"
#include "params.h"
#include "profiler.h"
#include "program.h"
#include "registry.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

typedef enum opt_kind { OPT_SGD, OPT_ADAM, OPT_ADAMW } opt_kind;

typedef struct opt_param {
    kiln_tensor *p;
    char *name;        /* its name in the list the optimizer was created from */
    kiln_tensor *buf;  /* SGD's momentum buffer, Adam's exp_avg (NULL until the first step) */
    kiln_tensor *sq;   /* Adam's exp_avg_sq */
    kiln_tensor *step; /* Adam's step count, i64 [1], written by the update kernel */
    int64_t t;         /* the step count as the host knows it */
    unsigned seen;     /* step's storage version when t was last equal to its contents */
} opt_param;

struct kiln_optimizer {
    opt_kind kind;
    double lr, momentum, beta1, beta2, eps, wd;
    int n;
    opt_param *ps;
    kiln__opt_hook hook; /* a scheduler's (schedule.c), or all NULL */
};

bool kiln__optimizer_attach(kiln_optimizer *opt, const kiln__opt_hook *hook)
{
    if (hook && opt->hook.sync)
        return false;
    opt->hook = hook ? *hook : (kiln__opt_hook){0};
    return true;
}

kiln_device *kiln__optimizer_device(const kiln_optimizer *opt)
{
    return opt->ps[0].p->dev;
}

int kiln__optimizer_count(const kiln_optimizer *opt)
{
    return opt->n;
}

kiln_tensor *kiln__optimizer_param(const kiln_optimizer *opt, int i, const char **name)
{
    *name = opt->ps[i].name;
    return opt->ps[i].p;
}

static unsigned version_of(const kiln_tensor *t)
{
    return atomic_load(&t->storage->version);
}

/* s, with the message of a failed inner call prefixed by "op: parameter 'name': ". Call
 * kiln__log_hold() before the inner call; this releases it. */
static kiln_status rewrap(kiln_status s, const char *op, const char *name)
{
    if (s != KILN_OK) {
        char *msg = kiln__strdup(kiln_last_error());
        s = kiln__error(s, "%s: parameter '%s': %s", op, name, msg ? msg : "");
        free(msg);
    }
    kiln__log_release();
    return s;
}

/* ---- creation -------------------------------------------------------------------------------- */

/* v finite and >= 0 (> 0 when positive). */
static kiln_status check_nonneg(const char *op, const char *what, double v, bool positive)
{
    if (isfinite(v) && (positive ? v > 0 : v >= 0))
        return KILN_OK;
    return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is %g; it must be finite and %s 0", op,
                       what, v, positive ? ">" : ">=");
}

static kiln_status check_beta(const char *op, const char *what, double v)
{
    if (v >= 0 && v < 1)
        return KILN_OK;
    return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is %g; it must be in [0, 1)", op, what,
                       v);
}

/* The i-th tensor of the list: an f32/f64 leaf computable on its device, sharing memory with
 * no earlier one. */
static kiln_status check_param(const char *op, const kiln_params *params, int i)
{
    const char *name = kiln_params_name(params, i);
    const kiln_tensor *t = kiln_params_tensor(params, i);
    kiln_status s = kiln__check_handle(t, op, name);
    if (s != KILN_OK)
        return s;
    if (t->dtype != KILN_F32 && t->dtype != KILN_F64)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: parameter '%s' is %s; optimizers update f32 or f64 tensors (for "
                           "f16/bf16 training keep the model in f32 and run its forward under "
                           "kiln_autocast_begin, with a kiln_grad_scaler)",
                           op, name, kiln_dtype_name(t->dtype));
    s = kiln__check_dtype_on(t->dev, t->dtype, op);
    if (s != KILN_OK)
        return s;
    if (t->node)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: parameter '%s' is not a leaf but the result of %s (recorded for "
                           "autograd); optimize the leaves it was computed from",
                           op, name, t->node->name);
    for (int j = 0; j < i; j++)
        if (kiln_params_tensor(params, j)->storage == t->storage)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: parameters '%s' and '%s' share memory (one tensor, or views "
                               "of one); list each parameter once",
                               op, kiln_params_name(params, j), name);
    return KILN_OK;
}

static kiln_status check_args(const char *op, opt_kind kind, const kiln_params *params, double lr,
                              double momentum, double b1, double b2, double eps, double wd)
{
    if (!params)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: params is NULL", op);
    int n = kiln_params_count(params);
    if (n == 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the parameter list is empty; add the model's tensors to it "
                           "(kiln_params_add) first",
                           op);
    kiln_status s = check_nonneg(op, "lr", lr, false);
    if (s == KILN_OK && kind == OPT_SGD)
        s = check_nonneg(op, "momentum", momentum, false);
    if (s == KILN_OK && kind != OPT_SGD)
        s = check_beta(op, "beta1", b1);
    if (s == KILN_OK && kind != OPT_SGD)
        s = check_beta(op, "beta2", b2);
    if (s == KILN_OK && kind != OPT_SGD)
        s = check_nonneg(op, "eps", eps, true);
    if (s == KILN_OK)
        s = check_nonneg(op, "weight_decay", wd, false);
    for (int i = 0; s == KILN_OK && i < n; i++)
        s = check_param(op, params, i);
    return s;
}

static kiln_status create(const char *op, opt_kind kind, const kiln_params *params, double lr,
                          double momentum, double b1, double b2, double eps, double wd,
                          kiln_optimizer **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = check_args(op, kind, params, lr, momentum, b1, b2, eps, wd);
    if (s != KILN_OK)
        return s;
    int n = kiln_params_count(params);
    kiln_optimizer *o = kiln__calloc(1, sizeof *o);
    opt_param *ps = kiln__calloc((size_t)n, sizeof *ps);
    if (!o || !ps) {
        free(o);
        free(ps);
        return kiln__host_oom(op);
    }
    kiln__live_add(KILN__LIVE_OPTIMIZER, 1); /* kiln_optimizer_free takes it back */
    *o = (kiln_optimizer){.kind = kind,
                          .lr = lr,
                          .momentum = momentum,
                          .beta1 = b1,
                          .beta2 = b2,
                          .eps = eps,
                          .wd = wd,
                          .ps = ps};
    for (; o->n < n; o->n++) {
        char *name = kiln__strdup(kiln_params_name(params, o->n));
        if (!name) {
            kiln_optimizer_free(o);
            return kiln__host_oom(op);
        }
        ps[o->n] =
            (opt_param){.p = kiln_tensor_retain(kiln_params_tensor(params, o->n)), .name = name};
    }
    *out = o;
    return KILN_OK;
}

kiln_status kiln_sgd_create(const kiln_params *params, double lr, double momentum,
                            double weight_decay, kiln_optimizer **out)
{
    return create("kiln_sgd_create", OPT_SGD, params, lr, momentum, 0, 0, 0, weight_decay, out);
}

kiln_status kiln_adam_create(const kiln_params *params, double lr, double beta1, double beta2,
                             double eps, double weight_decay, kiln_optimizer **out)
{
    return create("kiln_adam_create", OPT_ADAM, params, lr, 0, beta1, beta2, eps, weight_decay,
                  out);
}

kiln_status kiln_adamw_create(const kiln_params *params, double lr, double beta1, double beta2,
                              double eps, double weight_decay, kiln_optimizer **out)
{
    return create("kiln_adamw_create", OPT_ADAMW, params, lr, 0, beta1, beta2, eps, weight_decay,
                  out);
}

static void drop_state(opt_param *q)
{
    kiln_tensor_release(q->buf);
    kiln_tensor_release(q->sq);
    kiln_tensor_release(q->step);
    q->buf = q->sq = q->step = NULL;
    q->t = 0;
}

void kiln_optimizer_free(kiln_optimizer *opt)
{
    if (!opt)
        return;
    if (opt->hook.detach)
        opt->hook.detach(opt->hook.ctx);
    for (int i = 0; i < opt->n; i++) {
        drop_state(&opt->ps[i]);
        kiln__tensor_drop(opt->ps[i].p); /* retained at creation */
        free(opt->ps[i].name);
    }
    free(opt->ps);
    free(opt);
    kiln__live_add(KILN__LIVE_OPTIMIZER, -1);
}

double kiln_optimizer_lr(const kiln_optimizer *opt)
{
    return opt ? opt->lr : NAN;
}

kiln_status kiln_optimizer_set_lr(kiln_optimizer *opt, double lr)
{
    const char *op = "kiln_optimizer_set_lr";
    if (!opt)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the optimizer is NULL", op);
    kiln_status s = check_nonneg(op, "lr", lr, false);
    if (s == KILN_OK)
        opt->lr = lr;
    return s;
}

/* ---- state ----------------------------------------------------------------------------------- */

static bool has_state(const kiln_optimizer *o)
{
    return o->kind != OPT_SGD || o->momentum != 0;
}

/* A zero-filled tensor the optimizer keeps (out of any scope). */
static kiln_status state_tensor(const kiln_tensor *p, kiln_dtype dtype, int ndim,
                                const int64_t *shape, kiln_tensor **out)
{
    kiln_status s = kiln_tensor_zeros(p->dev, dtype, ndim, shape, out);
    if (s == KILN_OK)
        kiln__scope_forget(*out);
    return s;
}

/* q's state, allocated unless it exists (all of it or none); *created tells. */
static kiln_status ensure_state(const kiln_optimizer *o, opt_param *q, const char *op,
                                bool *created)
{
    *created = false;
    if (!has_state(o) || q->buf)
        return KILN_OK;
    const kiln_tensor *p = q->p;
    int64_t one = 1;
    kiln__log_hold();
    kiln_status s = state_tensor(p, p->dtype, p->ndim, p->shape, &q->buf);
    if (s == KILN_OK && o->kind != OPT_SGD)
        s = state_tensor(p, p->dtype, p->ndim, p->shape, &q->sq);
    if (s == KILN_OK && o->kind != OPT_SGD)
        s = state_tensor(p, KILN_I64, 1, &one, &q->step);
    if (s != KILN_OK)
        drop_state(q);
    else if (q->step)
        q->seen = version_of(q->step);
    *created = s == KILN_OK;
    return rewrap(s, op, q->name);
}

/* Adam steps from counts below 2^53 - 1: t + 1 cannot overflow int64 and beta^t is computed with
 * t exact in double. No training run comes near (2^53 steps at a million a second: 285 years). */
#define STEP_LIMIT (((int64_t)1 << 53) - 1)

/* The host's step count from q's step tensor when something (a load) wrote it since, checked
 * for the step to come. */
static kiln_status sync_step(opt_param *q, const char *op)
{
    unsigned v = version_of(q->step);
    int64_t t = q->t;
    if (v != q->seen) {
        kiln__log_hold();
        kiln_status s = rewrap(kiln_tensor_item_i64(q->step, &t), op, q->name);
        if (s != KILN_OK)
            return s;
    }
    if (t < 0 || t >= STEP_LIMIT)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: parameter '%s': its step count (%s.step) is %lld; Adam steps from "
                           "counts in [0, 2^53 - 1) (a checkpoint from elsewhere, or damaged?)",
                           op, q->name, q->name, (long long)t);
    q->t = t;
    q->seen = v;
    return KILN_OK;
}

kiln_status kiln_optimizer_state(kiln_optimizer *opt, kiln_params *state)
{
    static const char op[] = "kiln_optimizer_state";
    static const char *const sgd_suffix[] = {".momentum_buffer"};
    static const char *const adam_suffix[] = {".exp_avg", ".exp_avg_sq", ".step"};
    if (!opt || !state)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                           !opt ? "the optimizer" : "state");
    if (!has_state(opt))
        return KILN_OK;
    int nsuf = opt->kind == OPT_SGD ? 1 : 3;
    const char *const *suffix = opt->kind == OPT_SGD ? sgd_suffix : adam_suffix;
    size_t longest = 0;
    for (int i = 0; i < opt->n; i++)
        longest = strlen(opt->ps[i].name) > longest ? strlen(opt->ps[i].name) : longest;
    size_t size = longest + sizeof ".momentum_buffer"; /* the longest suffix */
    char *name = kiln__malloc(size);
    if (!name)
        return kiln__host_oom(op);
    kiln_status s = KILN_OK;
    for (int i = 0; s == KILN_OK && i < opt->n; i++)
        for (int j = 0; s == KILN_OK && j < nsuf; j++) {
            snprintf(name, size, "%s%s", opt->ps[i].name, suffix[j]);
            if (kiln_params_find(state, name))
                s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                                "%s: the list already holds a tensor named '%s'", op, name);
        }
    bool created;
    for (int i = 0; s == KILN_OK && i < opt->n; i++)
        s = ensure_state(opt, &opt->ps[i], op, &created);
    int before = kiln_params_count(state);
    for (int i = 0; s == KILN_OK && i < opt->n; i++) {
        opt_param *q = &opt->ps[i];
        kiln_tensor *ts[] = {q->buf, q->sq, q->step};
        for (int j = 0; s == KILN_OK && j < nsuf; j++) {
            snprintf(name, size, "%s%s", q->name, suffix[j]);
            s = kiln_params_add(state, name, ts[j]);
        }
    }
    if (s != KILN_OK)
        kiln__params_truncate(state, before);
    free(name);
    return s;
}

/* ---- step ------------------------------------------------------------------------------------ */

static kiln_status adam_update(const kiln_optimizer *o, opt_param *q, const kiln_tensor *g,
                               const char *op)
{
    kiln_tensor *p = q->p;
    if (!q->buf || !q->sq || !q->step) /* ensure_state made them */
        return kiln__error(KILN_ERR_STATE, "%s: no Adam state (kiln bug)", op);
    kiln_dtype dt = p->dtype;
    int64_t t = q->t + 1;
    bool decoupled = o->kind == OPT_ADAMW;
    double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    kiln_status s;
    if (p->numel == 0) {
        s = kiln_fill_i64(q->step, t);
    } else {
        char defs[128] = "";
        kiln__dtype_defines(defs, sizeof defs, "T", dt);
        kiln__kernel *k;
        s = kiln__builtin_kernel(p->dev, "optim", defs, "kiln_adam_update", op, &k);
        kiln_arg args[] = {kiln_arg_tensor(p),
                           kiln_arg_tensor(g),
                           kiln_arg_tensor(q->buf),
                           kiln_arg_tensor(q->sq),
                           kiln_arg_tensor(q->step),
                           kiln_arg_i64(p->numel),
                           kiln_arg_i64(t),
                           kiln_arg_i32(decoupled),
                           kiln__arg_compute(dt, decoupled ? 1.0 - o->lr * o->wd : o->wd),
                           kiln__arg_compute(dt, o->beta1),
                           kiln__arg_compute(dt, o->beta2),
                           kiln__arg_compute(dt, 1.0 - o->beta1),
                           kiln__arg_compute(dt, 1.0 - o->beta2),
                           kiln__arg_compute(dt, o->eps),
                           kiln__arg_compute(dt, o->lr / bc1),
                           kiln__arg_compute(dt, sqrt(bc2))};
        size_t global = (size_t)p->numel, local;
        if (s == KILN_OK) {
            kiln__fixed_ndrange(k->wg_size, 1, &global, &local);
            s = kiln__kernel_launch(p->dev, k, op, 1, &global, &local,
                                    (int)(sizeof args / sizeof args[0]), args);
        }
        if (s == KILN_OK) {
            kiln__tensor_bump(p);
            kiln__tensor_bump(q->buf);
            kiln__tensor_bump(q->sq);
            kiln__tensor_bump(q->step);
        }
    }
    if (s == KILN_OK) {
        q->t = t;
        q->seen = version_of(q->step);
    }
    return s;
}

static kiln_status optimizer_step(kiln_optimizer *opt);

kiln_status kiln_optimizer_step(kiln_optimizer *opt)
{
    int phase = kiln__profiler_phase(KILN__PHASE_OPTIMIZER); /* what the profiler's records say */
    kiln_status s = optimizer_step(opt);
    kiln__profiler_phase(phase);
    return s;
}

static kiln_status optimizer_step(kiln_optimizer *opt)
{
    static const char op[] = "kiln_optimizer_step";
    if (!opt)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the optimizer is NULL", op);
    if (opt->hook.sync) { /* a scheduler's loaded state sets the learning rate first */
        kiln_status s = opt->hook.sync(opt->hook.ctx, op);
        if (s != KILN_OK)
            return s;
    }
    bool *created = kiln__calloc((size_t)opt->n, sizeof *created);
    if (!created)
        return kiln__host_oom(op);
    bool prev = kiln_set_grad_enabled(false);
    kiln_status s = KILN_OK;
    /* Everything that can fail without a driver error first, so that it changes nothing. */
    for (int i = 0; s == KILN_OK && i < opt->n; i++) {
        opt_param *q = &opt->ps[i];
        const kiln_tensor *g = q->p->grad;
        if (!g)
            continue;
        s = kiln__check_tensor(q->p, op, q->name);
        if (s == KILN_OK)
            s = kiln__check_tensor(g, op, "a gradient");
        if (s == KILN_OK)
            s = ensure_state(opt, q, op, &created[i]);
        if (s == KILN_OK && q->step)
            s = sync_step(q, op);
    }
    if (s != KILN_OK)
        for (int i = 0; i < opt->n; i++)
            if (created[i])
                drop_state(&opt->ps[i]);
    for (int i = 0; s == KILN_OK && i < opt->n; i++) {
        opt_param *q = &opt->ps[i];
        const kiln_tensor *g = q->p->grad;
        if (!g)
            continue;
        kiln__log_hold();
        if (opt->kind == OPT_SGD)
            s = kiln_sgd_step(q->p, g, q->buf, opt->lr, opt->momentum, opt->wd);
        else
            s = adam_update(opt, q, g, op);
        s = rewrap(s, op, q->name);
    }
    kiln_set_grad_enabled(prev);
    free(created);
    return s;
}

kiln_status kiln_optimizer_zero_grad(kiln_optimizer *opt)
{
    if (!opt)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_optimizer_zero_grad: the optimizer "
                                                      "is NULL");
    for (int i = 0; i < opt->n; i++)
        (void)kiln_tensor_zero_grad(opt->ps[i].p);
    return KILN_OK;
}

/* ---- over a parameter list ------------------------------------------------------------------- */

kiln_status kiln_params_zero_grad(const kiln_params *p)
{
    const char *op = "kiln_params_zero_grad";
    if (!p)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the list is NULL", op);
    kiln_status s = KILN_OK;
    for (int i = 0; s == KILN_OK && i < kiln_params_count(p); i++)
        s = kiln__check_handle(kiln_params_tensor(p, i), op, kiln_params_name(p, i));
    for (int i = 0; s == KILN_OK && i < kiln_params_count(p); i++)
        (void)kiln_tensor_zero_grad(kiln_params_tensor(p, i));
    return s;
}

/* sums[i] = the sum of squares of tensor i's gradient (NULL without one); the caller reads and
 * releases them. */
static kiln_status squared_sums(const kiln_params *p, const char *op, kiln_tensor **sums)
{
    kiln_status s = KILN_OK;
    for (int i = 0; s == KILN_OK && i < kiln_params_count(p); i++) {
        const kiln_tensor *g = kiln_tensor_grad(kiln_params_tensor(p, i));
        if (!g || g->numel == 0)
            continue;
        kiln_tensor *sq = NULL;
        kiln__log_hold();
        s = kiln__check_tensor(g, op, "a gradient");
        if (s == KILN_OK)
            s = kiln_mul(g, g, &sq);
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_SUM, sq, KILN_ALL_AXES, false, &sums[i]);
        kiln_tensor_release(sq);
        s = rewrap(s, op, kiln_params_name(p, i));
    }
    return s;
}

kiln_status kiln_clip_grad_norm(const kiln_params *p, double max_norm, double *total_norm)
{
    static const char op[] = "kiln_clip_grad_norm";
    if (total_norm)
        *total_norm = 0;
    if (!p)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the list is NULL", op);
    kiln_status s = check_nonneg(op, "max_norm", max_norm, false);
    int n = kiln_params_count(p);
    kiln_tensor **sums = NULL;
    if (s == KILN_OK && n > 0) {
        sums = kiln__calloc((size_t)n, sizeof(kiln_tensor *));
        s = sums ? KILN_OK : kiln__host_oom(op);
    }
    if (s != KILN_OK)
        return s;
    bool prev = kiln_set_grad_enabled(false);
    s = squared_sums(p, op, sums);
    double total = 0;
    for (int i = 0; s == KILN_OK && i < n; i++) {
        double v = 0;
        if (sums[i]) {
            kiln__log_hold();
            s = rewrap(kiln_tensor_item(sums[i], &v), op, kiln_params_name(p, i));
        }
        total += v;
    }
    total = sqrt(total);
    double coef = max_norm / (total + 1e-6);
    /* PyTorch multiplies by min(coef, 1): by NaN when the norm is NaN. */
    for (int i = 0; s == KILN_OK && !(coef >= 1) && i < n; i++) {
        kiln_tensor *g = kiln_tensor_grad(kiln_params_tensor(p, i));
        if (!g)
            continue;
        kiln__log_hold();
        s = rewrap(kiln_binary_scalar_out(KILN_BINARY_MUL, g, coef, g), op, kiln_params_name(p, i));
    }
    for (int i = 0; i < n; i++)
        kiln_tensor_release(sums[i]);
    free(sums);
    kiln_set_grad_enabled(prev);
    if (s == KILN_OK && total_norm)
        *total_norm = total;
    return s;
}
