/* nn.c - softmax and log-softmax, cross-entropy and MSE losses, SGD and Adam steps. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "amp.h"
#include "autograd.h"
#include "common.h"
#include "launch.h"
#include "ndrange.h"
#include "program.h"
#include "queue.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

/* One nn program per floating dtype. */
static kiln_status nn_kernel(kiln_device *dev, kiln_dtype dtype, const char *name, const char *op,
                             kiln__kernel **k)
{
    char defs[128] = "";
    kiln__dtype_defines(defs, sizeof defs, "T", dtype);
    return kiln__builtin_kernel(dev, "nn", defs, name, op, k);
}

/* Launch with one of the fixed work-group shapes (ndrange.h). */
static kiln_status launch1(kiln_device *dev, kiln__kernel *k, const char *op, size_t n, int nargs,
                           const kiln_arg *args)
{
    size_t global = n, local;
    kiln__fixed_ndrange(k->wg_size, 1, &global, &local);
    return kiln__kernel_launch(dev, k, op, 1, &global, &local, nargs, args);
}

static kiln_status launch2(kiln_device *dev, kiln__kernel *k, const char *op, size_t *global,
                           int nargs, const kiln_arg *args)
{
    size_t local[2];
    kiln__fixed_ndrange(k->wg_size, 2, global, local);
    return kiln__kernel_launch(dev, k, op, 2, global, local, nargs, args);
}

/* f32 or f64 (and f16, bf16 when allowed), computable on the tensor's device. */
static kiln_status check_float(const kiln_tensor *t, const char *op, const char *arg,
                               bool allow_f16)
{
    if (!kiln__dtype_is_float(t->dtype) || (!allow_f16 && kiln__dtype_is_narrow(t->dtype)))
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: %s is %s; %s takes f32%s or f64", op, arg,
                           kiln_dtype_name(t->dtype), op, allow_f16 ? ", f16, bf16" : "");
    return kiln__check_dtype_on(t->dev, t->dtype, op);
}

static kiln_status check_same_dtype(const kiln_tensor *a, const kiln_tensor *b, const char *op,
                                    const char *aname, const char *bname)
{
    if (a->dtype != b->dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: %s is %s but %s is %s; use one dtype", op,
                           aname, kiln_dtype_name(a->dtype), bname, kiln_dtype_name(b->dtype));
    return KILN_OK;
}

static kiln_status check_same_shape(const kiln_tensor *a, const kiln_tensor *b, const char *op,
                                    const char *aname, const char *bname)
{
    if (kiln__same_shape(b, a->ndim, a->shape))
        return KILN_OK;
    return kiln__shape_mismatch(op, aname, a->ndim, a->shape, bname, b->ndim, b->shape,
                                "; they must be equal");
}

/* An _out form's result tensor `given` (named name): exactly dtype and shape, sharing no memory
 * with the n inputs (the kernels read them while writing it). Its device is checked with the
 * inputs'. */
static kiln_status check_given(const char *op, const char *name, const kiln_tensor *given,
                               kiln_dtype dtype, int ndim, const int64_t *shape,
                               const kiln_tensor *const *inputs, int n)
{
    if (given->dtype != dtype)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH, "%s: %s has dtype %s but the result is %s", op,
                           name, kiln_dtype_name(given->dtype), kiln_dtype_name(dtype));
    if (!kiln__same_shape(given, ndim, shape))
        return kiln__shape_mismatch(op, name, given->ndim, given->shape, "the result", ndim, shape,
                                    "");
    kiln_status s = kiln__check_not_aliased(op, given, n, inputs);
    if (s == KILN_OK)
        kiln__tensor_bump(given); /* an in-place write (autograd's version check) */
    return s;
}

/* CPUs take the row kernels in vectors of 8 for contiguous rows (inner == 1) of f32 and f64,
 * launched with kiln__cpu_loop_ndrange. */
static bool rows8(const kiln_device *dev, kiln_dtype dtype, int64_t inner)
{
    return dev->info.type == KILN_DEVICE_CPU && inner == 1 && !kiln__dtype_is_narrow(dtype);
}

static kiln_status softmax(const kiln_tensor *x, int axis, kiln_tensor *given, kiln_tensor **out,
                           int logmode, const char *op)
{
    if (!given && !out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    if (out)
        *out = NULL;
    kiln_status s = kiln__check_tensor(x, op, "x");
    if (s == KILN_OK && given)
        s = kiln__same_device(op, 3, (const kiln_tensor *[]){x, NULL, given}, NULL);
    if (s == KILN_OK)
        s = check_float(x, op, "x", true);
    if (s == KILN_OK && given)
        s = check_given(op, "out", given, x->dtype, x->ndim, x->shape, &x, 1);
    if (s != KILN_OK)
        return s;
    if (axis < -x->ndim || axis >= x->ndim)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: axis %d is out of range for a %d-D tensor; use %d..%d", op, axis,
                           x->ndim, -x->ndim, x->ndim - 1);
    int a = axis < 0 ? axis + x->ndim : axis;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        outer *= d < a ? x->shape[d] : 1;
        inner *= d > a ? x->shape[d] : 1;
    }
    kiln_tensor *y = given;
    if (!given && (s = kiln__tensor_new(x->dev, x->dtype, x->ndim, x->shape, op, &y)) != KILN_OK)
        return s;
    kiln__kernel *k;
    if (x->numel > 0 && rows8(x->dev, x->dtype, inner)) {
        s = nn_kernel(x->dev, x->dtype, "kiln_softmax_rows8", op, &k);
        size_t global = (size_t)outer, local = 1;
        kiln_arg args[] = {kiln_arg_tensor(x), kiln_arg_tensor(y), kiln_arg_i64(outer),
                           kiln_arg_i64(x->shape[a]), kiln_arg_i32(logmode)};
        if (s == KILN_OK)
            kiln__cpu_loop_ndrange(x->dev, k->wg_size, 1, &global, &local);
        if (s == KILN_OK)
            s = kiln__kernel_launch(x->dev, k, op, 1, &global, &local, 5, args);
    } else if (x->numel > 0) {
        s = nn_kernel(x->dev, x->dtype, "kiln_softmax", op, &k);
        /* One launch: kiln__kernel_launch caps dimension 1 and the kernel loops over rows. */
        size_t global[2] = {(size_t)inner, (size_t)outer};
        kiln_arg args[] = {kiln_arg_tensor(x),        kiln_arg_tensor(y),  kiln_arg_i64(outer),
                           kiln_arg_i64(x->shape[a]), kiln_arg_i64(inner), kiln_arg_i32(logmode)};
        if (s == KILN_OK)
            s = launch2(x->dev, k, op, global, 6, args);
    }
    return kiln__finish(s, y, given, out);
}

kiln_status kiln_softmax(const kiln_tensor *x, int axis, kiln_tensor **out)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[1] = {x};
        kiln_tensor *tmp[1];
        kiln_status amp;
        if (kiln__amp_apply("kiln_softmax", KILN__AMP_F32, 1, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_softmax(in[0], axis, out);
            else if (out)
                *out = NULL;
            kiln__amp_release(1, tmp);
            return amp;
        }
    }
    return kiln__ag_record(softmax(x, axis, NULL, out, 0, "kiln_softmax"), "kiln_softmax",
                           KILN__AG_SOFTMAX, &(kiln__ag_args){.axis = axis}, 1, &x, out);
}

kiln_status kiln_softmax_out(const kiln_tensor *x, int axis, kiln_tensor *out)
{
    return softmax(x, axis, out, NULL, 0, "kiln_softmax_out");
}

kiln_status kiln_log_softmax(const kiln_tensor *x, int axis, kiln_tensor **out)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[1] = {x};
        kiln_tensor *tmp[1];
        kiln_status amp;
        if (kiln__amp_apply("kiln_log_softmax", KILN__AMP_F32, 1, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_log_softmax(in[0], axis, out);
            else if (out)
                *out = NULL;
            kiln__amp_release(1, tmp);
            return amp;
        }
    }
    return kiln__ag_record(softmax(x, axis, NULL, out, 1, "kiln_log_softmax"), "kiln_log_softmax",
                           KILN__AG_LOG_SOFTMAX, &(kiln__ag_args){.axis = axis}, 1, &x, out);
}

kiln_status kiln_log_softmax_out(const kiln_tensor *x, int axis, kiln_tensor *out)
{
    return softmax(x, axis, out, NULL, 1, "kiln_log_softmax_out");
}

/* loss = mean of the per-element tensor `terms`, which is released. */
static kiln_status finish_loss(kiln_tensor *terms, kiln_status s, kiln_tensor *loss)
{
    if (s == KILN_OK)
        s = kiln_reduce_out(KILN_REDUCE_MEAN, terms, KILN_ALL_AXES, false, loss);
    kiln_tensor_release(terms);
    return s;
}

/* The result tensors of a loss of inputs x and y: present, on the inputs' device (arguments 3
 * and 4), loss [1] and grad (optional) shaped like x, both of x's dtype and sharing no memory
 * with the inputs or each other. */
static kiln_status check_loss_out(const char *op, const kiln_tensor *x, const kiln_tensor *y,
                                  const kiln_tensor *loss, const kiln_tensor *grad)
{
    kiln_status s = kiln__check_tensor(loss, op, "loss");
    if (s == KILN_OK && grad)
        s = kiln__check_tensor(grad, op, "grad");
    if (s == KILN_OK)
        s = kiln__same_device(op, 4, (const kiln_tensor *[]){x, y, loss, grad}, NULL);
    int64_t one = 1;
    if (s == KILN_OK)
        s = check_given(op, "loss", loss, x->dtype, 1, &one, (const kiln_tensor *[]){x, y, grad},
                        3);
    if (s == KILN_OK && grad)
        s = check_given(op, "grad", grad, x->dtype, x->ndim, x->shape,
                        (const kiln_tensor *[]){x, y}, 2);
    return s;
}

typedef kiln_status (*loss_fn)(const char *op, const kiln_tensor *x, const kiln_tensor *y,
                               kiln_tensor *loss, kiln_tensor *grad);

/* The allocating forms, once x and y are checked: new loss [1] and (when asked for) grad tensors
 * that fn fills, handed over on success. */
static kiln_status loss_new(const char *op, loss_fn fn, const kiln_tensor *x, const kiln_tensor *y,
                            kiln_tensor **loss, kiln_tensor **grad)
{
    kiln_tensor *l = NULL, *g = NULL;
    int64_t one = 1;
    kiln_status s = kiln__tensor_new(x->dev, x->dtype, 1, &one, op, &l);
    if (s == KILN_OK && grad)
        s = kiln__tensor_new(x->dev, x->dtype, x->ndim, x->shape, op, &g);
    if (s == KILN_OK)
        s = fn(op, x, y, l, g);
    if (s != KILN_OK) {
        kiln_tensor_release(l);
        kiln_tensor_release(g);
        return s;
    }
    *loss = l;
    if (grad)
        *grad = g;
    return KILN_OK;
}

/* The allocating forms' output pointers: *grad (optional) and *loss NULL, loss required. */
static kiln_status start_loss(const char *op, kiln_tensor **loss, kiln_tensor **grad)
{
    if (grad)
        *grad = NULL;
    if (!loss)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: loss is NULL", op);
    *loss = NULL;
    return KILN_OK;
}

/* The two inputs of a loss: present, on one device, the first f32 or f64. */
static kiln_status check_inputs(const char *op, const kiln_tensor *x, const char *xname,
                                const kiln_tensor *y, const char *yname)
{
    kiln_status s = kiln__check_tensors(op, 2, 2, (const kiln_tensor *[]){x, y},
                                        (const char *const[]){xname, yname}, NULL);
    if (s == KILN_OK)
        s = check_float(x, op, xname, false);
    return s;
}

static kiln_status check_ce(const kiln_tensor *logits, const kiln_tensor *labels, const char *op)
{
    kiln_status s = check_inputs(op, logits, "logits", labels, "labels");
    if (s != KILN_OK)
        return s;
    if (labels->dtype != KILN_I32 && labels->dtype != KILN_I64)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: labels are %s; class labels must be i32 or i64", op,
                           kiln_dtype_name(labels->dtype));
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0]) {
        char sa[160], sb[160];
        kiln__shape_str(sa, sizeof sa, logits->ndim, logits->shape);
        kiln__shape_str(sb, sizeof sb, labels->ndim, labels->shape);
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: logits %s and labels %s do not fit; need logits [N, C] and "
                           "labels [N]",
                           op, sa, sb);
    }
    return KILN_OK;
}

/* Cross-entropy into loss and grad (NULL: none), every tensor checked here. */
static kiln_status cross_entropy(const char *op, const kiln_tensor *logits,
                                 const kiln_tensor *labels, kiln_tensor *loss, kiln_tensor *g)
{
    kiln_status s = check_ce(logits, labels, op);
    if (s == KILN_OK)
        s = check_loss_out(op, logits, labels, loss, g);
    if (s == KILN_OK) {
        char range[64];
        snprintf(range, sizeof range, "the %" PRId64 " classes of logits", logits->shape[1]);
        s = kiln__check_indices(op, labels, "labels", logits->shape[1], range);
    }
    if (s != KILN_OK)
        return s;
    int64_t rows = logits->shape[0], classes = logits->shape[1];
    kiln_tensor *terms = NULL;
    kiln__kernel *k;
    s = kiln__tensor_new(logits->dev, logits->dtype, 1, &rows, op, &terms);
    if (s == KILN_OK && rows > 0) {
        bool vec = rows8(logits->dev, logits->dtype, 1);
        const char *name = labels->dtype == KILN_I32
                               ? (vec ? "kiln_cross_entropy8_i32" : "kiln_cross_entropy_i32")
                               : (vec ? "kiln_cross_entropy8_i64" : "kiln_cross_entropy_i64");
        s = nn_kernel(logits->dev, logits->dtype, name, op, &k);
        size_t global = (size_t)rows, local = 1;
        /* Without a gradient the kernel never touches its grad argument: pass terms there. */
        kiln_arg args[] = {
            kiln_arg_tensor(logits), kiln_arg_tensor(labels),
            kiln_arg_tensor(terms),  kiln_arg_tensor(g ? g : terms),
            kiln_arg_i64(rows),      kiln_arg_i64(classes),
            kiln_arg_i32(g != NULL), kiln__arg_compute(logits->dtype, 1.0 / (double)rows),
            kiln__arg_error_word(),  kiln_arg_i32(kiln__queue_error_code(op))};
        if (s == KILN_OK && vec) {
            kiln__cpu_loop_ndrange(logits->dev, k->wg_size, 1, &global, &local);
            s = kiln__kernel_launch(logits->dev, k, op, 1, &global, &local, 10, args);
        } else if (s == KILN_OK) {
            s = launch1(logits->dev, k, op, global, 10, args);
        }
    }
    return finish_loss(terms, s, loss);
}

/* The allocating forms of the losses: when the loss will be recorded by autograd and the caller
 * did not ask for the gradient, the kernel writes it anyway (it costs a store per element) and
 * the node keeps it, so that the backward needs no second pass over the inputs. */
static kiln_status loss_recorded(const char *op, loss_fn fn, kiln__ag_kind kind,
                                 const kiln_tensor *x, const kiln_tensor *y, kiln_tensor **loss,
                                 kiln_tensor **grad)
{
    bool save = !grad && kiln_grad_enabled() &&
                (kiln_tensor_requires_grad(x) || kiln_tensor_requires_grad(y));
    kiln_tensor *d = NULL;
    kiln_status s = loss_new(op, fn, x, y, loss, save ? &d : grad);
    kiln_status r =
        kiln__ag_record(s, op, kind, NULL, save ? 3 : 2, (const kiln_tensor *[]){x, y, d}, loss);
    kiln_tensor_release(d); /* the node's reference is the last */
    return r;
}

kiln_status kiln_cross_entropy(const kiln_tensor *logits, const kiln_tensor *labels,
                               kiln_tensor **loss, kiln_tensor **grad)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[1] = {logits};
        kiln_tensor *tmp[1];
        kiln_status amp;
        if (kiln__amp_apply("kiln_cross_entropy", KILN__AMP_F32, 1, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_cross_entropy(in[0], labels, loss, grad);
            else if (loss)
                *loss = NULL;
            else if (grad)
                *grad = NULL;
            kiln__amp_release(1, tmp);
            return amp;
        }
    }
    const char *op = "kiln_cross_entropy";
    kiln_status s = start_loss(op, loss, grad);
    if (s == KILN_OK)
        s = check_ce(logits, labels, op);
    return s != KILN_OK ? s
                        : loss_recorded(op, cross_entropy, KILN__AG_CROSS_ENTROPY, logits, labels,
                                        loss, grad);
}

kiln_status kiln_cross_entropy_out(const kiln_tensor *logits, const kiln_tensor *labels,
                                   kiln_tensor *loss, kiln_tensor *grad)
{
    const char *op = "kiln_cross_entropy_out";
    if (!loss)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: loss is NULL", op);
    return cross_entropy(op, logits, labels, loss, grad);
}

static kiln_status check_mse(const kiln_tensor *pred, const kiln_tensor *target, const char *op)
{
    kiln_status s = check_inputs(op, pred, "pred", target, "target");
    if (s == KILN_OK)
        s = check_same_dtype(pred, target, op, "pred", "target");
    if (s == KILN_OK)
        s = check_same_shape(pred, target, op, "pred", "target");
    return s;
}

/* MSE into loss and grad (NULL: none), every tensor checked here. */
static kiln_status mse_loss(const char *op, const kiln_tensor *pred, const kiln_tensor *target,
                            kiln_tensor *loss, kiln_tensor *g)
{
    kiln_status s = check_mse(pred, target, op);
    if (s == KILN_OK)
        s = check_loss_out(op, pred, target, loss, g);
    if (s != KILN_OK)
        return s;
    kiln_tensor *terms = NULL;
    kiln__kernel *k;
    s = kiln__tensor_new(pred->dev, pred->dtype, pred->ndim, pred->shape, op, &terms);
    if (s == KILN_OK && pred->numel > 0) {
        s = nn_kernel(pred->dev, pred->dtype, "kiln_mse", op, &k);
        size_t global = (size_t)pred->numel;
        kiln_arg args[] = {kiln_arg_tensor(pred),
                           kiln_arg_tensor(target),
                           kiln_arg_tensor(terms),
                           kiln_arg_tensor(g ? g : terms),
                           kiln_arg_i64(pred->numel),
                           kiln_arg_i32(g != NULL),
                           kiln__arg_compute(pred->dtype, 2.0 / (double)pred->numel)};
        if (s == KILN_OK)
            s = launch1(pred->dev, k, op, global, 7, args);
    }
    return finish_loss(terms, s, loss);
}

kiln_status kiln_mse_loss(const kiln_tensor *pred, const kiln_tensor *target, kiln_tensor **loss,
                          kiln_tensor **grad)
{
    { /* autocast (ops/amp.h) */
        const kiln_tensor *in[2] = {pred, target};
        kiln_tensor *tmp[2];
        kiln_status amp;
        if (kiln__amp_apply("kiln_mse_loss", KILN__AMP_F32, 2, in, tmp, &amp)) {
            if (amp == KILN_OK)
                amp = kiln_mse_loss(in[0], in[1], loss, grad);
            else if (loss)
                *loss = NULL;
            else if (grad)
                *grad = NULL;
            kiln__amp_release(2, tmp);
            return amp;
        }
    }
    const char *op = "kiln_mse_loss";
    kiln_status s = start_loss(op, loss, grad);
    if (s == KILN_OK)
        s = check_mse(pred, target, op);
    return s != KILN_OK ? s : loss_recorded(op, mse_loss, KILN__AG_MSE, pred, target, loss, grad);
}

kiln_status kiln_mse_loss_out(const kiln_tensor *pred, const kiln_tensor *target, kiln_tensor *loss,
                              kiln_tensor *grad)
{
    const char *op = "kiln_mse_loss_out";
    if (!loss)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: loss is NULL", op);
    return mse_loss(op, pred, target, loss, grad);
}

/* Every tensor of an optimizer step: present, one device, param's dtype (f32/f64) and shape. */
static kiln_status check_step(const char *op, int n, const kiln_tensor *const *ts,
                              const char *const *names)
{
    kiln_status s = kiln__check_tensors(op, n, n, ts, names, NULL);
    if (s == KILN_OK)
        s = check_float(ts[0], op, names[0], false);
    for (int i = 1; s == KILN_OK && i < n; i++) {
        s = check_same_dtype(ts[0], ts[i], op, names[0], names[i]);
        if (s == KILN_OK)
            s = check_same_shape(ts[0], ts[i], op, names[0], names[i]);
    }
    return s;
}

/* The optimizer kernel `name` over every element of param. */
static kiln_status run_step(const char *op, const char *name, const kiln_tensor *param, int nargs,
                            const kiln_arg *args)
{
    kiln__kernel *k;
    kiln_status s = nn_kernel(param->dev, param->dtype, name, op, &k);
    return s == KILN_OK ? launch1(param->dev, k, op, (size_t)param->numel, nargs, args) : s;
}

kiln_status kiln_sgd_step(kiln_tensor *param, const kiln_tensor *grad, kiln_tensor *velocity,
                          double lr, double momentum, double weight_decay)
{
    const char *op = "kiln_sgd_step";
    if (!velocity && momentum != 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: velocity is NULL but momentum is %g; pass a zero-filled tensor "
                           "shaped like param, kept across steps",
                           op, momentum);
    const kiln_tensor *ts[] = {param, grad, velocity};
    const char *const names[] = {"param", "grad", "velocity"};
    kiln_status s = check_step(op, velocity ? 3 : 2, ts, names);
    if (s != KILN_OK || param->numel == 0)
        return s;
    kiln__tensor_bump(param);
    if (velocity)
        kiln__tensor_bump(velocity);
    kiln_dtype dt = param->dtype;
    /* Without velocity the kernel never touches its v argument: pass param there. */
    kiln_arg args[] = {kiln_arg_tensor(param),
                       kiln_arg_tensor(grad),
                       kiln_arg_tensor(velocity ? velocity : param),
                       kiln_arg_i64(param->numel),
                       kiln__arg_compute(dt, lr),
                       kiln__arg_compute(dt, momentum),
                       kiln__arg_compute(dt, weight_decay),
                       kiln_arg_i32(velocity != NULL)};
    return run_step(op, "kiln_sgd", param, 8, args);
}

static kiln_status check_adam_scalars(int64_t step, double beta1, double beta2, double eps,
                                      const char *op)
{
    if (step < 1)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: step is %lld; steps count from 1 (the bias correction divides by "
                           "1 - beta^step)",
                           op, (long long)step);
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps >= 0))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: beta1 = %g, beta2 = %g, eps = %g; need 0 <= beta < 1 and "
                           "eps >= 0",
                           op, beta1, beta2, eps);
    return KILN_OK;
}

kiln_status kiln_adam_step(kiln_tensor *param, const kiln_tensor *grad, kiln_tensor *m,
                           kiln_tensor *v, int64_t step, double lr, double beta1, double beta2,
                           double eps)
{
    const char *op = "kiln_adam_step";
    const kiln_tensor *ts[] = {param, grad, m, v};
    const char *const names[] = {"param", "grad", "m", "v"};
    kiln_status s = check_step(op, 4, ts, names);
    if (s == KILN_OK)
        s = check_adam_scalars(step, beta1, beta2, eps, op);
    if (s != KILN_OK || param->numel == 0)
        return s;
    kiln__tensor_bump(param);
    kiln__tensor_bump(m);
    kiln__tensor_bump(v);
    kiln_dtype dt = param->dtype;
    double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    kiln_arg args[] = {
        kiln_arg_tensor(param),       kiln_arg_tensor(grad),        kiln_arg_tensor(m),
        kiln_arg_tensor(v),           kiln_arg_i64(param->numel),   kiln__arg_compute(dt, lr),
        kiln__arg_compute(dt, beta1), kiln__arg_compute(dt, beta2), kiln__arg_compute(dt, eps),
        kiln__arg_compute(dt, bc1),   kiln__arg_compute(dt, bc2)};
    return run_step(op, "kiln_adam", param, 11, args);
}
