/* classifier.c - examples/classify.c's model, step and epoch for kiln-bench (classifier.h). */
#include "classifier.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { HIDDEN = 64, CLASSES = 3 };

/* Three interleaved spirals, as classify.c's make_spirals (a fixed seed). */
static void spirals(classifier *c)
{
    uint64_t s = 42 * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < CLASSIFIER_POINTS; i++) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
            u[k] = (double)((s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
        }
        int cls = i % CLASSES;
        double t = 2.0943951 * cls + 4.0 * u[0] + 0.25 * (u[1] - 0.5);
        c->x[2 * i] = (float)(u[0] * sin(t));
        c->x[2 * i + 1] = (float)(u[0] * cos(t));
        c->y[i] = cls;
    }
}

void classifier_free(classifier *c)
{
    kiln_optimizer_free(c->opt);
    kiln_params_free(c->params);
    kiln_module_free(c->model);
    c->opt = NULL;
    c->params = NULL;
    c->model = NULL;
}

kiln_status classifier_init(classifier *c, kiln_device *dev)
{
    memset(c, 0, sizeof *c);
    c->dev = dev;
    spirals(c);
    kiln_module *layers[3] = {NULL, NULL, NULL};
    kiln_status s =
        kiln_linear_create(dev, KILN_F32, 2, HIDDEN, true, KILN_INIT_DEFAULT, 42, &layers[0]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &layers[1]);
    if (s == KILN_OK)
        s = kiln_linear_create(dev, KILN_F32, HIDDEN, CLASSES, true, KILN_INIT_DEFAULT, 43,
                               &layers[2]);
    if (s == KILN_OK)
        s = kiln_sequential_create(layers, 3, &c->model);
    else
        for (int i = 0; i < 3; i++)
            kiln_module_free(layers[i]);
    if (s == KILN_OK)
        s = kiln_params_create(&c->params);
    if (s == KILN_OK)
        s = kiln_module_params(c->model, "", c->params);
    if (s == KILN_OK)
        s = kiln_adam_create(c->params, 0.01, 0.9, 0.999, 1e-8, 0.0, &c->opt);
    if (s != KILN_OK)
        classifier_free(c);
    return s;
}

kiln_status classifier_step(classifier *c, int b, double *loss)
{
    b %= CLASSIFIER_POINTS / CLASSIFIER_BATCH;
    const int64_t xs[2] = {CLASSIFIER_BATCH, 2}, ys[1] = {CLASSIFIER_BATCH};
    size_t off = (size_t)b * CLASSIFIER_BATCH;
    kiln_scope *scope;
    kiln_tensor *x, *y, *logits, *l;
    kiln_status s = kiln_scope_begin(&scope);
    if (s != KILN_OK)
        return s;
    if ((s = kiln_tensor_from_host(c->dev, KILN_F32, 2, xs, c->x + 2 * off, &x)) == KILN_OK &&
        (s = kiln_tensor_from_host(c->dev, KILN_I32, 1, ys, c->y + off, &y)) == KILN_OK &&
        (s = kiln_module_forward(c->model, x, &logits)) == KILN_OK &&
        (s = kiln_cross_entropy(logits, y, &l, NULL)) == KILN_OK &&
        (s = kiln_optimizer_zero_grad(c->opt)) == KILN_OK &&
        (s = kiln_backward(l, NULL, 0)) == KILN_OK && (s = kiln_optimizer_step(c->opt)) == KILN_OK)
        s = kiln_tensor_item(l, loss);
    kiln_scope_end(scope);
    return s;
}

kiln_status classifier_epoch(classifier *c, double *mean_loss, double *accuracy)
{
    int nbatch = CLASSIFIER_POINTS / CLASSIFIER_BATCH;
    double sum = 0, l = 0;
    kiln_status s = KILN_OK;
    for (int b = 0; b < nbatch && s == KILN_OK; b++) {
        s = classifier_step(c, b, &l);
        sum += l;
    }
    *mean_loss = sum / nbatch;
    if (s != KILN_OK)
        return s;
    bool prev = kiln_set_grad_enabled(false);
    kiln_scope *scope;
    s = kiln_scope_begin(&scope);
    if (s != KILN_OK) {
        kiln_set_grad_enabled(prev);
        return s;
    }
    const int64_t xs[2] = {CLASSIFIER_POINTS, 2};
    int64_t *picked = malloc(sizeof(int64_t) * CLASSIFIER_POINTS);
    kiln_tensor *x, *logits, *pred;
    s = picked ? kiln_tensor_from_host(c->dev, KILN_F32, 2, xs, c->x, &x) : KILN_ERR_OUT_OF_MEMORY;
    if (s == KILN_OK)
        s = kiln_module_forward(c->model, x, &logits);
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_ARGMAX, logits, 1, false, &pred);
    if (s == KILN_OK)
        s = kiln_tensor_read(pred, picked, sizeof(int64_t) * CLASSIFIER_POINTS);
    if (s == KILN_OK) {
        int right = 0;
        for (int i = 0; i < CLASSIFIER_POINTS; i++)
            right += picked[i] == c->y[i];
        *accuracy = (double)right / CLASSIFIER_POINTS;
    }
    free(picked);
    kiln_scope_end(scope);
    kiln_set_grad_enabled(prev);
    return s;
}
