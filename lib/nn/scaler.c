/* scaler.c - kiln_grad_scaler, PyTorch's GradScaler (torch.amp.GradScaler): the loss is
 * multiplied by a scale before the backward, so that small f16 gradients do not flush to zero;
 * before the optimizer's step the gradients are divided by it again (one kernel per gradient,
 * kiln_unscale_grad in optim.cl, which also raises a device flag on any inf or NaN), the flag is
 * read back once, and the step is skipped when it is set. update() then backs the scale off
 * (found inf) or grows it (growth_interval steps without). The state (scale, growth tracker) is
 * an i64 [2] tensor for checkpoints, read back when a load has written it (its version counter
 * says so), as the schedulers' is. */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "launch.h"
#include "nn/optim.h"
#include "ops/common.h"
#include "program.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

/* A device's found-inf flag (i32 [1]) for one optimizer's unscale. */
typedef struct flag {
    kiln_device *dev;
    kiln_tensor *t;
} flag;

/* What happened to one optimizer since the last update (PyTorch's per-optimizer state). */
typedef struct record {
    const kiln_optimizer *opt; /* compared, never used */
    flag *flags;
    int nflags;
    bool stepped;
    bool read, found; /* the flags read back, and whether any was set */
} record;

struct kiln_grad_scaler {
    bool enabled;
    double scale, growth, backoff;
    int64_t interval, tracker;
    record *recs;
    int nrecs;
    kiln_tensor *state; /* NULL until kiln_grad_scaler_state asks for it */
    unsigned seen;      /* state's version when it last held what the scaler holds */
};

/* The state tensor's words: the scale's bits, the growth tracker. */
enum { W_SCALE, W_TRACKER, N_WORDS };

static unsigned version_of(const kiln_tensor *t)
{
    return atomic_load(&t->storage->version);
}

static void drop_records(kiln_grad_scaler *s)
{
    for (int i = 0; i < s->nrecs; i++) {
        for (int f = 0; f < s->recs[i].nflags; f++)
            kiln_tensor_release(s->recs[i].flags[f].t);
        free(s->recs[i].flags);
    }
    free(s->recs);
    s->recs = NULL;
    s->nrecs = 0;
}

void kiln_grad_scaler_free(kiln_grad_scaler *s)
{
    if (!s)
        return;
    drop_records(s);
    kiln_tensor_release(s->state);
    free(s);
}

static kiln_status check_option(const char *op, const char *what, double v, double lo, double hi,
                                const char *range)
{
    if (isfinite(v) && v > lo && v < hi)
        return KILN_OK;
    return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is %g; it must be %s", op, what, v,
                       range);
}

kiln_status kiln_grad_scaler_create(const kiln_grad_scaler_options *options, kiln_grad_scaler **out)
{
    const char *op = "kiln_grad_scaler_create";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_grad_scaler_options o = options ? *options : (kiln_grad_scaler_options){0};
    double scale = o.init_scale != 0 ? o.init_scale : 65536.0;
    double growth = o.growth_factor != 0 ? o.growth_factor : 2.0;
    double backoff = o.backoff_factor != 0 ? o.backoff_factor : 0.5;
    int64_t interval = o.growth_interval != 0 ? o.growth_interval : 2000;
    kiln_status st = check_option(op, "init_scale", scale, 0, INFINITY, "finite and > 0");
    if (st == KILN_OK)
        st = check_option(op, "growth_factor", growth, 1, INFINITY, "finite and > 1");
    if (st == KILN_OK)
        st = check_option(op, "backoff_factor", backoff, 0, 1, "in (0, 1)");
    if (st == KILN_OK && interval < 1)
        st = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                         "%s: growth_interval is %" PRId64 "; it must be >= 1", op, interval);
    if (st != KILN_OK)
        return st;
    kiln_grad_scaler *s = kiln__calloc(1, sizeof *s);
    if (!s)
        return kiln__host_oom(op);
    s->enabled = !o.disabled;
    s->scale = scale;
    s->growth = growth;
    s->backoff = backoff;
    s->interval = interval;
    *out = s;
    return KILN_OK;
}

/* Write the state tensor (when there is one) from the scaler. */
static kiln_status save_state(kiln_grad_scaler *s, const char *op)
{
    if (!s->state)
        return KILN_OK;
    int64_t w[N_WORDS];
    memcpy(&w[W_SCALE], &s->scale, sizeof s->scale);
    w[W_TRACKER] = s->tracker;
    kiln__log_hold();
    kiln_status st = kiln_tensor_write(s->state, w, sizeof w);
    if (st != KILN_OK) {
        char *msg = kiln__strdup(kiln_last_error());
        st = kiln__error(st, "%s: writing the scaler's state: %s", op, msg ? msg : "");
        free(msg);
    }
    kiln__log_release();
    if (st == KILN_OK)
        s->seen = version_of(s->state);
    return st;
}

/* When a load wrote the state tensor since: read it back and take it over. */
static kiln_status sync_state(kiln_grad_scaler *s, const char *op)
{
    if (!s->state || version_of(s->state) == s->seen)
        return KILN_OK;
    int64_t w[N_WORDS];
    kiln_status st = kiln_tensor_read(s->state, w, sizeof w);
    if (st != KILN_OK)
        return st;
    double scale;
    memcpy(&scale, &w[W_SCALE], sizeof scale);
    if (!(scale > 0 && isfinite(scale)) || w[W_TRACKER] < 0 || w[W_TRACKER] >= s->interval)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the loaded grad_scaler.state is not a state of this scaler "
                           "(scale %g, growth tracker %" PRId64 ", growth_interval %" PRId64 ")",
                           op, scale, w[W_TRACKER], s->interval);
    s->scale = scale;
    s->tracker = w[W_TRACKER];
    s->seen = version_of(s->state);
    return KILN_OK;
}

/* The checks of every call on a scaler, and a loaded state taken over. */
static kiln_status check_scaler(kiln_grad_scaler *s, const char *op)
{
    if (!s)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the scaler is NULL", op);
    return sync_state(s, op);
}

kiln_status kiln_grad_scaler_scale(kiln_grad_scaler *s, const kiln_tensor *loss, kiln_tensor **out)
{
    const char *op = "kiln_grad_scaler_scale";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status st = check_scaler(s, op);
    if (st == KILN_OK)
        st = kiln__check_tensor(loss, op, "loss");
    if (st == KILN_OK && !kiln__dtype_is_float(loss->dtype))
        st = kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: loss is %s; it must be floating", op,
                         kiln_dtype_name(loss->dtype));
    if (st != KILN_OK)
        return st;
    kiln__log_hold();
    /* disabled: the loss itself, as PyTorch returns it, under a new handle (a view: what a
     * scope around the step owns and releases, as it does the scaled loss) */
    st = s->enabled ? kiln_binary_scalar(KILN_BINARY_MUL, loss, s->scale, out)
                    : kiln_tensor_reshape(loss, loss->ndim, loss->shape, out);
    if (st != KILN_OK) {
        char *msg = kiln__strdup(kiln_last_error());
        st = kiln__error(st, "%s: %s", op, msg ? msg : "");
        free(msg);
    }
    kiln__log_release();
    return st;
}

static record *find_record(kiln_grad_scaler *s, const kiln_optimizer *opt)
{
    for (int i = 0; i < s->nrecs; i++)
        if (s->recs[i].opt == opt)
            return &s->recs[i];
    return NULL;
}

/* The flag of dev in r, made (zeroed) when r has none yet. */
static kiln_status flag_of(record *r, kiln_device *dev, const char *op, kiln_tensor **out)
{
    for (int f = 0; f < r->nflags; f++)
        if (r->flags[f].dev == dev) {
            *out = r->flags[f].t;
            return KILN_OK;
        }
    flag *grown = kiln__realloc(r->flags, (size_t)(r->nflags + 1) * sizeof *grown);
    if (!grown)
        return kiln__host_oom(op);
    r->flags = grown;
    kiln_status st = kiln_tensor_zeros(dev, KILN_I32, 1, (const int64_t[]){1}, out);
    if (st == KILN_OK)
        r->flags[r->nflags++] = (flag){dev, *out};
    return st;
}

/* g *= 1 / scale in place, raising g's device's flag in r on a non-finite result. */
static kiln_status unscale_one(kiln_grad_scaler *s, record *r, kiln_tensor *g, const char *op)
{
    if (g->numel == 0)
        return KILN_OK;
    kiln_tensor *found;
    kiln_status st = flag_of(r, g->dev, op, &found);
    char defs[128] = "";
    kiln__dtype_defines(defs, sizeof defs, "T", g->dtype);
    kiln__kernel *k = NULL;
    if (st == KILN_OK)
        st = kiln__builtin_kernel(g->dev, "optim", defs, "kiln_unscale_grad", op, &k);
    if (st != KILN_OK)
        return st;
    kiln_arg args[] = {kiln_arg_tensor(g), kiln_arg_i64(g->numel),
                       kiln__arg_compute(g->dtype, 1.0 / s->scale), kiln_arg_tensor(found)};
    size_t global = (size_t)g->numel;
    st = kiln__kernel_launch(g->dev, k, op, 1, &global, NULL, 4, args);
    if (st == KILN_OK) {
        kiln__tensor_bump(g);
        kiln__tensor_bump(found);
    }
    return st;
}

/* Unscale opt's gradients into a new record (*out). */
static kiln_status unscale(kiln_grad_scaler *s, kiln_optimizer *opt, const char *op, record **out)
{
    record *r = find_record(s, opt);
    if (r)
        return kiln__error(KILN_ERR_STATE,
                           "%s: %s has already been called on this optimizer since the last "
                           "kiln_grad_scaler_update",
                           op, r->stepped ? "kiln_grad_scaler_step" : "kiln_grad_scaler_unscale");
    int n = kiln__optimizer_count(opt);
    kiln_status st = KILN_OK;
    for (int i = 0; st == KILN_OK && i < n; i++) { /* checked before anything is changed */
        const char *name;
        const kiln_tensor *g = kiln_tensor_grad(kiln__optimizer_param(opt, i, &name));
        if (g)
            st = kiln__check_tensor(g, op, name);
    }
    record *grown =
        st == KILN_OK ? kiln__realloc(s->recs, (size_t)(s->nrecs + 1) * sizeof *grown) : NULL;
    if (st == KILN_OK && !grown)
        st = kiln__host_oom(op);
    if (st != KILN_OK)
        return st;
    s->recs = grown;
    r = &s->recs[s->nrecs];
    *r = (record){.opt = opt};
    bool prev = kiln_set_grad_enabled(false);
    for (int i = 0; st == KILN_OK && i < n; i++) {
        const char *name;
        kiln_tensor *g = kiln_tensor_grad(kiln__optimizer_param(opt, i, &name));
        if (g)
            st = unscale_one(s, r, g, op);
    }
    kiln_set_grad_enabled(prev);
    if (st != KILN_OK) {
        for (int f = 0; f < r->nflags; f++)
            kiln_tensor_release(r->flags[f].t);
        free(r->flags);
        return st;
    }
    s->nrecs++;
    *out = r;
    return KILN_OK;
}

kiln_status kiln_grad_scaler_unscale(kiln_grad_scaler *s, kiln_optimizer *opt)
{
    const char *op = "kiln_grad_scaler_unscale";
    kiln_status st = check_scaler(s, op);
    if (st == KILN_OK && !opt)
        st = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: opt is NULL", op);
    if (st != KILN_OK || !s->enabled)
        return st;
    record *r;
    return unscale(s, opt, op, &r);
}

/* Read r's flags back (once): the step's one wait for the device. */
static kiln_status read_found(record *r)
{
    for (int f = 0; f < r->nflags && !r->read; f++) {
        int64_t v = 0;
        kiln_status st = kiln_tensor_item_i64(r->flags[f].t, &v);
        if (st != KILN_OK)
            return st;
        r->found = r->found || v != 0;
    }
    r->read = true;
    return KILN_OK;
}

kiln_status kiln_grad_scaler_step(kiln_grad_scaler *s, kiln_optimizer *opt, bool *skipped)
{
    const char *op = "kiln_grad_scaler_step";
    if (skipped)
        *skipped = false;
    kiln_status st = check_scaler(s, op);
    if (st == KILN_OK && !opt)
        st = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: opt is NULL", op);
    if (st != KILN_OK)
        return st;
    if (!s->enabled)
        return kiln_optimizer_step(opt);
    record *r = find_record(s, opt);
    if (r && r->stepped)
        return kiln__error(KILN_ERR_STATE,
                           "%s: kiln_grad_scaler_step has already been called on this optimizer "
                           "since the last kiln_grad_scaler_update",
                           op);
    if (!r && (st = unscale(s, opt, op, &r)) != KILN_OK)
        return st;
    if ((st = read_found(r)) != KILN_OK)
        return st;
    if (!r->found && (st = kiln_optimizer_step(opt)) != KILN_OK)
        return st;
    r->stepped = true;
    if (skipped)
        *skipped = r->found;
    return KILN_OK;
}

kiln_status kiln_grad_scaler_update(kiln_grad_scaler *s)
{
    const char *op = "kiln_grad_scaler_update";
    kiln_status st = check_scaler(s, op);
    if (st != KILN_OK || !s->enabled)
        return st;
    if (s->nrecs == 0)
        return kiln__error(KILN_ERR_STATE,
                           "%s: no inf checks were recorded before the update (call "
                           "kiln_grad_scaler_step, or kiln_grad_scaler_unscale, first)",
                           op);
    bool found = false;
    for (int i = 0; st == KILN_OK && i < s->nrecs; i++) {
        st = read_found(&s->recs[i]);
        found = found || s->recs[i].found;
    }
    if (st != KILN_OK)
        return st;
    /* PyTorch's _amp_update_scale_ */
    if (found) {
        s->scale *= s->backoff;
        s->tracker = 0;
    } else if (++s->tracker == s->interval) {
        s->scale *= s->growth;
        s->tracker = 0;
    }
    drop_records(s);
    return save_state(s, op);
}

double kiln_grad_scaler_get_scale(kiln_grad_scaler *s)
{
    if (!s || sync_state(s, "kiln_grad_scaler_get_scale") != KILN_OK)
        return NAN;
    return s->enabled ? s->scale : 1.0;
}

kiln_status kiln_grad_scaler_state(kiln_grad_scaler *s, kiln_device *dev, kiln_params *state)
{
    const char *op = "kiln_grad_scaler_state";
    kiln_status st = check_scaler(s, op);
    if (st == KILN_OK && !state)
        st = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: state is NULL", op);
    if (st == KILN_OK)
        st = kiln__check_device(dev, op);
    if (st != KILN_OK)
        return st;
    if (s->state && s->state->dev != dev)
        return kiln__error(KILN_ERR_DEVICE_MISMATCH,
                           "%s: the scaler keeps its state on %s already, not %s", op,
                           s->state->dev->info.spec, dev->info.spec);
    if (!s->state) {
        kiln_tensor *t = NULL;
        if ((st = kiln_tensor_zeros(dev, KILN_I64, 1, (const int64_t[]){N_WORDS}, &t)) != KILN_OK)
            return st;
        s->state = t;
        if ((st = save_state(s, op)) != KILN_OK) {
            s->state = NULL;
            kiln_tensor_release(t);
            return st;
        }
    }
    return kiln_params_add(state, "grad_scaler.state", s->state);
}
