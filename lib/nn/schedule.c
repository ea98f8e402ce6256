/* schedule.c - learning-rate schedules as torch.optim.lr_scheduler's: StepLR, MultiStepLR,
 * ExponentialLR, CosineAnnealingLR, LinearLR (warmup) in their closed forms of the epoch count,
 * and ReduceLROnPlateau; each sets its optimizer's learning rate. Its state is a small i64
 * tensor for checkpoints, read back when a load has written it (seen by its version counter),
 * before the optimizer's next step or the scheduler's next call. */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "nn/optim.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

typedef enum sched_kind { STEP, MULTISTEP, EXPONENTIAL, COSINE, LINEAR, PLATEAU } sched_kind;

static const char *const kind_names[] = {
    "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR", "ReduceLROnPlateau"};

/* The state tensor's words: i64, doubles as their bits. */
enum { W_KIND, W_EPOCH, W_LR, W_BEST, W_BAD, W_COOLDOWN, N_WORDS };

struct kiln_scheduler {
    sched_kind kind;
    kiln_optimizer *opt; /* NULL once the optimizer is freed */
    double base_lr;
    int64_t epoch; /* PyTorch's last_epoch */
    /* the schedule's arguments */
    int64_t step_size, t_max, total_iters, patience, cooldown;
    double gamma, eta_min, start_factor, end_factor, factor, threshold, min_lr;
    bool maximize;
    int64_t *milestones;
    int n_milestones;
    /* ReduceLROnPlateau's progress */
    double best;
    int64_t bad_epochs, cooldown_counter;
    /* the checkpoint state (kiln_scheduler_state), NULL until asked for */
    kiln_tensor *state;
    unsigned seen; /* state's version when it last held what this scheduler holds */
};

static unsigned version_of(const kiln_tensor *t)
{
    return atomic_load(&t->storage->version);
}

/* The closed-form learning rate at s->epoch (not for ReduceLROnPlateau). */
static double closed_form(const kiln_scheduler *s)
{
    double e = (double)s->epoch;
    switch (s->kind) {
    case STEP: {
        int64_t steps = s->epoch / s->step_size; /* floor: epochs are >= 0 */
        return s->base_lr * pow(s->gamma, (double)steps);
    }
    case MULTISTEP: {
        int passed = 0;
        for (int i = 0; i < s->n_milestones; i++)
            passed += s->milestones[i] <= s->epoch;
        return s->base_lr * pow(s->gamma, passed);
    }
    case EXPONENTIAL:
        return s->base_lr * pow(s->gamma, e);
    case COSINE:
        return s->eta_min + (s->base_lr - s->eta_min) * (1 + cos(M_PI * e / (double)s->t_max)) / 2;
    case LINEAR: {
        double done = s->epoch < s->total_iters ? e : (double)s->total_iters;
        return s->base_lr * (s->start_factor +
                             (s->end_factor - s->start_factor) * done / (double)s->total_iters);
    }
    case PLATEAU:
        break;
    }
    return kiln_optimizer_lr(s->opt);
}

/* Write the state tensor (when there is one) from the scheduler. */
static kiln_status save_state(kiln_scheduler *s, const char *op)
{
    if (!s->state)
        return KILN_OK;
    int64_t w[N_WORDS] = {s->kind, s->epoch, 0, 0, s->bad_epochs, s->cooldown_counter};
    double lr = kiln_optimizer_lr(s->opt);
    memcpy(&w[W_LR], &lr, sizeof lr);
    memcpy(&w[W_BEST], &s->best, sizeof s->best);
    kiln__log_hold();
    kiln_status st = kiln_tensor_write(s->state, w, sizeof w);
    if (st != KILN_OK) {
        char *msg = kiln__strdup(kiln_last_error());
        st = kiln__error(st, "%s: writing the scheduler's state: %s", op, msg ? msg : "");
        free(msg);
    }
    kiln__log_release();
    if (st == KILN_OK)
        s->seen = version_of(s->state);
    return st;
}

/* When a load wrote the state tensor since: read it back and take it over (the optimizer's
 * learning rate included). */
static kiln_status sync_state(void *ctx, const char *op)
{
    kiln_scheduler *s = ctx;
    if (!s->state || version_of(s->state) == s->seen)
        return KILN_OK;
    int64_t w[N_WORDS];
    kiln_status st = kiln_tensor_read(s->state, w, sizeof w);
    if (st != KILN_OK)
        return st;
    double lr, best;
    memcpy(&lr, &w[W_LR], sizeof lr);
    memcpy(&best, &w[W_BEST], sizeof best);
    if (w[W_KIND] != (int64_t)s->kind || w[W_EPOCH] < 0 || w[W_BAD] < 0 || w[W_COOLDOWN] < 0 ||
        !(lr >= 0 && isfinite(lr)))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the loaded lr_scheduler.state is not a state of this %s "
                           "scheduler (kind %" PRId64 ", epoch %" PRId64 ", lr %g)",
                           op, kind_names[s->kind], w[W_KIND], w[W_EPOCH], lr);
    s->epoch = w[W_EPOCH];
    s->best = best;
    s->bad_epochs = w[W_BAD];
    s->cooldown_counter = w[W_COOLDOWN];
    st = kiln_optimizer_set_lr(s->opt, lr);
    if (st == KILN_OK)
        s->seen = version_of(s->state);
    return st;
}

static void detach(void *ctx)
{
    ((kiln_scheduler *)ctx)->opt = NULL;
}

void kiln_scheduler_free(kiln_scheduler *s)
{
    if (!s)
        return;
    if (s->opt)
        kiln__optimizer_attach(s->opt, NULL);
    kiln_tensor_release(s->state);
    free(s->milestones);
    free(s);
}

/* A new scheduler of kind on opt (checked), its arguments filled by the caller afterwards. */
static kiln_status new_scheduler(const char *op, sched_kind kind, kiln_optimizer *opt,
                                 kiln_scheduler **out, kiln_scheduler **s)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!opt)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: opt is NULL", op);
    *s = kiln__calloc(1, sizeof **s);
    if (!*s)
        return kiln__host_oom(op);
    (*s)->kind = kind;
    (*s)->opt = opt;
    (*s)->base_lr = kiln_optimizer_lr(opt);
    return KILN_OK;
}

/* Attach s to its optimizer and set the epoch-0 learning rate (PyTorch's constructor does). */
static kiln_status start(const char *op, kiln_scheduler *s, kiln_status checks,
                         kiln_scheduler **out)
{
    if (checks == KILN_OK) {
        kiln__opt_hook hook = {sync_state, detach, s};
        if (!kiln__optimizer_attach(s->opt, &hook))
            checks = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                                 "%s: the optimizer has a scheduler already (free it first)", op);
    }
    if (checks == KILN_OK && s->kind != PLATEAU) {
        checks = kiln_optimizer_set_lr(s->opt, closed_form(s));
        if (checks != KILN_OK)
            kiln__optimizer_attach(s->opt, NULL);
    }
    if (checks != KILN_OK) {
        free(s->milestones);
        free(s);
        return checks;
    }
    *out = s;
    return KILN_OK;
}

static kiln_status positive_count(const char *op, const char *what, int64_t v)
{
    return v >= 1 ? KILN_OK
                  : kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is %" PRId64 "; it must be >= 1",
                                op, what, v);
}

/* A finite v in the interval from lo to hi ("(" / ")": open ends, "[" / "]": closed; hi may be
 * INFINITY), else KILN_ERR_INVALID_ARGUMENT naming it and the interval. */
static kiln_status check_range(const char *op, const char *what, double v, char open, double lo,
                               double hi, char close)
{
    bool ok = isfinite(v) && (open == '(' ? v > lo : v >= lo) && (close == ')' ? v < hi : v <= hi);
    return ok ? KILN_OK
              : kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is %g; it must be in %c%g, %g%c", op,
                            what, v, open, lo, hi, close);
}

static kiln_status check_gamma(const char *op, const char *what, double g)
{
    return check_range(op, what, g, '(', 0, INFINITY, ')');
}

kiln_status kiln_step_lr_create(kiln_optimizer *opt, int64_t step_size, double gamma,
                                kiln_scheduler **out)
{
    const char *op = "kiln_step_lr_create";
    kiln_scheduler *s = NULL;
    kiln_status st = new_scheduler(op, STEP, opt, out, &s);
    if (st != KILN_OK)
        return st;
    s->step_size = step_size;
    s->gamma = gamma;
    st = positive_count(op, "step_size", step_size);
    if (st == KILN_OK)
        st = check_gamma(op, "gamma", gamma);
    return start(op, s, st, out);
}

kiln_status kiln_multistep_lr_create(kiln_optimizer *opt, const int64_t *milestones, int n,
                                     double gamma, kiln_scheduler **out)
{
    const char *op = "kiln_multistep_lr_create";
    kiln_scheduler *s = NULL;
    kiln_status st = new_scheduler(op, MULTISTEP, opt, out, &s);
    if (st != KILN_OK)
        return st;
    s->gamma = gamma;
    st = check_gamma(op, "gamma", gamma);
    if (st == KILN_OK && (n < 0 || (n > 0 && !milestones)))
        st = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s", op,
                         n < 0 ? "n is negative" : "milestones is NULL");
    for (int i = 0; st == KILN_OK && i < n; i++)
        if (milestones[i] < 0 || (i > 0 && milestones[i] < milestones[i - 1]))
            st = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                             "%s: milestones[%d] is %" PRId64 "; they must be >= 0 and in "
                             "increasing order",
                             op, i, milestones[i]);
    if (st == KILN_OK && n > 0) {
        s->milestones = kiln__malloc((size_t)n * sizeof *milestones);
        if (!s->milestones)
            st = kiln__host_oom(op);
        else
            memcpy(s->milestones, milestones, (size_t)n * sizeof *milestones);
        s->n_milestones = n;
    }
    return start(op, s, st, out);
}

kiln_status kiln_exponential_lr_create(kiln_optimizer *opt, double gamma, kiln_scheduler **out)
{
    const char *op = "kiln_exponential_lr_create";
    kiln_scheduler *s = NULL;
    kiln_status st = new_scheduler(op, EXPONENTIAL, opt, out, &s);
    if (st != KILN_OK)
        return st;
    s->gamma = gamma;
    return start(op, s, check_gamma(op, "gamma", gamma), out);
}

kiln_status kiln_cosine_annealing_lr_create(kiln_optimizer *opt, int64_t t_max, double eta_min,
                                            kiln_scheduler **out)
{
    const char *op = "kiln_cosine_annealing_lr_create";
    kiln_scheduler *s = NULL;
    kiln_status st = new_scheduler(op, COSINE, opt, out, &s);
    if (st != KILN_OK)
        return st;
    s->t_max = t_max;
    s->eta_min = eta_min;
    st = positive_count(op, "t_max", t_max);
    if (st == KILN_OK)
        st = check_range(op, "eta_min", eta_min, '[', 0, INFINITY, ')');
    return start(op, s, st, out);
}

kiln_status kiln_linear_lr_create(kiln_optimizer *opt, double start_factor, double end_factor,
                                  int64_t total_iters, kiln_scheduler **out)
{
    const char *op = "kiln_linear_lr_create";
    kiln_scheduler *s = NULL;
    kiln_status st = new_scheduler(op, LINEAR, opt, out, &s);
    if (st != KILN_OK)
        return st;
    s->start_factor = start_factor;
    s->end_factor = end_factor;
    s->total_iters = total_iters;
    /* PyTorch's bounds */
    st = check_range(op, "start_factor", start_factor, '(', 0, 1, ']');
    if (st == KILN_OK)
        st = check_range(op, "end_factor", end_factor, '[', 0, 1, ']');
    if (st == KILN_OK)
        st = positive_count(op, "total_iters", total_iters);
    return start(op, s, st, out);
}

kiln_status kiln_reduce_lr_on_plateau_create(kiln_optimizer *opt, bool maximize, double factor,
                                             int64_t patience, double threshold, int64_t cooldown,
                                             double min_lr, kiln_scheduler **out)
{
    const char *op = "kiln_reduce_lr_on_plateau_create";
    kiln_scheduler *s = NULL;
    kiln_status st = new_scheduler(op, PLATEAU, opt, out, &s);
    if (st != KILN_OK)
        return st;
    s->maximize = maximize;
    s->factor = factor;
    s->patience = patience;
    s->threshold = threshold;
    s->cooldown = cooldown;
    s->min_lr = min_lr;
    s->best = maximize ? -INFINITY : INFINITY;
    st = check_range(op, "factor", factor, '[', 0, 1, ')');
    if (st == KILN_OK && (patience < 0 || cooldown < 0))
        st =
            kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is %" PRId64 "; it must be >= 0", op,
                        patience < 0 ? "patience" : "cooldown", patience < 0 ? patience : cooldown);
    if (st == KILN_OK)
        st = check_range(op, "threshold", threshold, '[', 0, INFINITY, ')');
    if (st == KILN_OK)
        st = check_range(op, "min_lr", min_lr, '[', 0, INFINITY, ')');
    return start(op, s, st, out);
}

/* The checks of every call on a scheduler, and a loaded state taken over. */
static kiln_status ready(kiln_scheduler *s, const char *op)
{
    if (!s)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the scheduler is NULL", op);
    if (!s->opt)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the scheduler's optimizer was freed (free the scheduler first)",
                           op);
    return sync_state(s, op);
}

kiln_status kiln_scheduler_step(kiln_scheduler *s)
{
    const char *op = "kiln_scheduler_step";
    kiln_status st = ready(s, op);
    if (st == KILN_OK && s->kind == PLATEAU)
        st = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                         "%s: ReduceLROnPlateau steps on a metric: call "
                         "kiln_scheduler_step_metric(s, validation_loss)",
                         op);
    if (st != KILN_OK)
        return st;
    s->epoch++;
    st = kiln_optimizer_set_lr(s->opt, closed_form(s));
    return st == KILN_OK ? save_state(s, op) : st;
}

kiln_status kiln_scheduler_step_metric(kiln_scheduler *s, double metric)
{
    const char *op = "kiln_scheduler_step_metric";
    kiln_status st = ready(s, op);
    if (st == KILN_OK && s->kind != PLATEAU)
        st = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                         "%s: a %s scheduler takes no metric: call kiln_scheduler_step(s)", op,
                         kind_names[s->kind]);
    if (st != KILN_OK)
        return st;
    /* PyTorch's ReduceLROnPlateau.step, threshold_mode 'rel' (a NaN metric is never better) */
    s->epoch++;
    bool better =
        s->maximize ? metric > s->best * (1 + s->threshold) : metric < s->best * (1 - s->threshold);
    if (better) {
        s->best = metric;
        s->bad_epochs = 0;
    } else {
        s->bad_epochs++;
    }
    if (s->cooldown_counter > 0) {
        s->cooldown_counter--;
        s->bad_epochs = 0;
    }
    if (s->bad_epochs > s->patience) {
        double old = kiln_optimizer_lr(s->opt), lr = fmax(old * s->factor, s->min_lr);
        if (old - lr > 1e-8 && (st = kiln_optimizer_set_lr(s->opt, lr)) != KILN_OK)
            return st;
        s->cooldown_counter = s->cooldown;
        s->bad_epochs = 0;
    }
    return save_state(s, op);
}

int64_t kiln_scheduler_epoch(const kiln_scheduler *s)
{
    return s ? s->epoch : -1;
}

kiln_status kiln_scheduler_state(kiln_scheduler *s, kiln_params *state)
{
    const char *op = "kiln_scheduler_state";
    kiln_status st = ready(s, op);
    if (st == KILN_OK && !state)
        st = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: state is NULL", op);
    if (st != KILN_OK)
        return st;
    if (!s->state) {
        const int64_t n = N_WORDS;
        kiln_tensor *t = NULL;
        bool grad = kiln_set_grad_enabled(false);
        st = kiln_tensor_empty(kiln__optimizer_device(s->opt), KILN_I64, 1, &n, &t);
        kiln_set_grad_enabled(grad);
        if (st != KILN_OK)
            return st;
        kiln__scope_forget(t); /* the scheduler's, not the caller's scope's */
        s->state = t;
        if ((st = save_state(s, op)) != KILN_OK) {
            s->state = NULL;
            kiln_tensor_release(t);
            return st;
        }
    }
    return kiln_params_add(state, "lr_scheduler.state", s->state);
}
