/* classify.c - train a classifier the way the PyTorch tutorial does, in C: three interleaved
 * spirals in the plane, a 2 -> 64 -> 3 MLP (Linear, ReLU, Linear), cross-entropy and Adam. Each
 * step is forward, loss, zero_grad, backward, step, inside a scope that releases the step's
 * temporaries. Prints the loss and training accuracy per epoch and the held-out accuracy.
 *
 * Usage: classify [--device SPEC] [--epochs N] [--batch N] [--hidden N] [--samples N] [--lr X]
 *                 [--seed N] [--profile TRACE.json]
 * --profile runs kiln's profiler over the last epoch's steps (each a range named "step"), prints
 * its table after training and writes the Chrome trace to TRACE.json (open it in Perfetto).
 * The same seed gives the same data, the same initial model and the same loss curve on every
 * device (up to the devices' rounding). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"

#define NCLASS 3

typedef struct options {
    const char *device, *profile;
    int epochs, batch, hidden, samples;
    double lr;
    uint64_t seed;
} options;

typedef struct dataset {
    int n;
    float *x;   /* n x 2 */
    int32_t *y; /* n labels in [0, NCLASS) */
} dataset;

static int check(kiln_status s, const char *what)
{
    if (s == KILN_OK)
        return 0;
    fprintf(stderr, "classify: %s failed: %s: %s\n", what, kiln_status_string(s),
            kiln_last_error());
    return 1;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if (check((call), #call))                                                                  \
            goto fail;                                                                             \
    } while (0)

/* xorshift64* for the synthetic data (the model's weights come from kiln's Philox generator). */
static double rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}

/* Sample i of class i % NCLASS lies on that class's arm of the spiral, at a random radius. */
static int make_spirals(dataset *d, int n, uint64_t seed)
{
    d->n = n;
    d->x = malloc(sizeof(float) * 2 * (size_t)n);
    d->y = malloc(sizeof(int32_t) * (size_t)n);
    if (!d->x || !d->y)
        return 1;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n; i++) {
        int c = i % NCLASS;
        double r = rnd(&s), t = 2.0943951 * c + 4.0 * r + 0.25 * (rnd(&s) - 0.5);
        d->x[2 * i] = (float)(r * sin(t));
        d->x[2 * i + 1] = (float)(r * cos(t));
        d->y[i] = c;
    }
    return 0;
}

static int parse(int argc, char **argv, options *o)
{
    *o = (options){"auto", NULL, 30, 64, 64, 3000, 0.01, 42};
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'},  {"epochs", required_argument, NULL, 'e'},
        {"batch", required_argument, NULL, 'b'},   {"hidden", required_argument, NULL, 'H'},
        {"samples", required_argument, NULL, 'n'}, {"lr", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 's'},    {"profile", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:e:b:H:n:l:s:p:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            o->device = optarg;
            break;
        case 'e':
            o->epochs = atoi(optarg);
            break;
        case 'b':
            o->batch = atoi(optarg);
            break;
        case 'H':
            o->hidden = atoi(optarg);
            break;
        case 'n':
            o->samples = atoi(optarg);
            break;
        case 'l':
            o->lr = atof(optarg);
            break;
        case 's':
            o->seed = strtoull(optarg, NULL, 10);
            break;
        case 'p':
            o->profile = optarg;
            break;
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: classify [--device SPEC] [--epochs N] [--batch N] [--hidden N] "
                    "[--samples N] [--lr X] [--seed N] [--profile TRACE.json]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (o->epochs < 1 || o->batch < 1 || o->hidden < 1 || o->samples < 3 * NCLASS || !(o->lr > 0)) {
        fprintf(stderr, "classify: epochs, batch, hidden must be >= 1, samples >= %d, lr > 0\n",
                3 * NCLASS);
        return 2;
    }
    return -1;
}

/* The fraction of d the model labels right, with grad mode off (nothing is recorded). */
static kiln_status accuracy(kiln_module *model, kiln_device *dev, const dataset *d, double *acc)
{
    bool prev = kiln_set_grad_enabled(false);
    kiln_scope *scope;
    kiln_status s = kiln_scope_begin(&scope);
    if (s != KILN_OK) {
        kiln_set_grad_enabled(prev);
        return s;
    }
    int64_t xs[2] = {d->n, 2};
    int64_t *picked = malloc(sizeof(int64_t) * (size_t)d->n);
    kiln_tensor *x, *logits, *pred;
    s = picked ? kiln_tensor_from_host(dev, KILN_F32, 2, xs, d->x, &x) : KILN_ERR_OUT_OF_MEMORY;
    if (s == KILN_OK)
        s = kiln_module_forward(model, x, &logits);
    if (s == KILN_OK)
        s = kiln_reduce(KILN_REDUCE_ARGMAX, logits, 1, false, &pred);
    if (s == KILN_OK)
        s = kiln_tensor_read(pred, picked, sizeof(int64_t) * (size_t)d->n);
    if (s == KILN_OK) {
        int right = 0;
        for (int i = 0; i < d->n; i++)
            right += picked[i] == d->y[i];
        *acc = (double)right / d->n;
    }
    free(picked);
    kiln_scope_end(scope);
    kiln_set_grad_enabled(prev);
    return s;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    rc = 1;
    dataset train = {0}, test = {0};
    kiln_module *model = NULL;
    kiln_params *params = NULL;
    kiln_optimizer *opt = NULL;
    kiln_scope *step = NULL;
    kiln_device *dev;
    TRY(kiln_device_get(o.device, &dev));
    printf("device: %s (%s)\n", kiln_device_spec(dev), kiln_device_name(dev));
    if (make_spirals(&train, o.samples, o.seed) || make_spirals(&test, o.samples / 4, o.seed + 1)) {
        fprintf(stderr, "classify: out of host memory\n");
        goto fail;
    }
    if (o.batch > train.n)
        o.batch = train.n;
    printf("data: %d training and %d held-out points, %d classes; model 2-%d-%d, batch %d\n",
           train.n, test.n, NCLASS, o.hidden, NCLASS, o.batch);

    /* model = Sequential(Linear(2, hidden), ReLU(), Linear(hidden, 3)) */
    kiln_module *layers[3] = {NULL, NULL, NULL};
    kiln_status s =
        kiln_linear_create(dev, KILN_F32, 2, o.hidden, true, KILN_INIT_DEFAULT, o.seed, &layers[0]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &layers[1]);
    if (s == KILN_OK)
        s = kiln_linear_create(dev, KILN_F32, o.hidden, NCLASS, true, KILN_INIT_DEFAULT, o.seed + 1,
                               &layers[2]);
    if (s == KILN_OK)
        s = kiln_sequential_create(layers, 3, &model); /* owns the layers from here on */
    else
        for (int i = 0; i < 3; i++)
            kiln_module_free(layers[i]);
    TRY(s);
    TRY(kiln_params_create(&params));
    TRY(kiln_module_params(model, "", params));
    TRY(kiln_adam_create(params, o.lr, 0.9, 0.999, 1e-8, 0.0, &opt));

    int nbatch = train.n / o.batch;
    for (int epoch = 1; epoch <= o.epochs; epoch++) {
        double sum = 0;
        bool profiling = o.profile && epoch == o.epochs; /* the last epoch: kernels built */
        if (profiling)
            TRY(kiln_profiler_start(KILN_PROFILE_ALL));
        for (int b = 0; b < nbatch; b++) {
            int64_t xs[2] = {o.batch, 2}, ys[1] = {o.batch};
            size_t off = (size_t)b * (size_t)o.batch;
            kiln_tensor *x, *y, *logits, *loss;
            double l;
            if (profiling)
                TRY(kiln_profiler_range_push("step"));
            TRY(kiln_scope_begin(&step)); /* every tensor made until scope_end is released there */
            TRY(kiln_tensor_from_host(dev, KILN_F32, 2, xs, train.x + 2 * off, &x));
            TRY(kiln_tensor_from_host(dev, KILN_I32, 1, ys, train.y + off, &y));
            TRY(kiln_module_forward(model, x, &logits));
            TRY(kiln_cross_entropy(logits, y, &loss, NULL));
            TRY(kiln_optimizer_zero_grad(opt));
            TRY(kiln_backward(loss, NULL, 0));
            TRY(kiln_optimizer_step(opt));
            TRY(kiln_tensor_item(loss, &l));
            kiln_scope_end(step);
            step = NULL;
            if (profiling)
                TRY(kiln_profiler_range_pop());
            sum += l;
        }
        if (profiling)
            TRY(kiln_profiler_stop());
        double acc;
        TRY(accuracy(model, dev, &train, &acc));
        printf("epoch %3d  loss %.4f  accuracy %.1f%%\n", epoch, sum / nbatch, 100 * acc);
    }
    double held_out;
    TRY(accuracy(model, dev, &test, &held_out));
    printf("held-out accuracy: %.1f%% (chance %.1f%%)\n", 100 * held_out, 100.0 / NCLASS);
    if (o.profile) {
        printf("\nprofile of the last epoch's %d steps:\n", nbatch);
        TRY(kiln_profiler_table(stdout, KILN_PROFILER_SORT_DEVICE_TOTAL));
        TRY(kiln_profiler_export_trace(o.profile));
        printf("trace: %s\n", o.profile);
    }
    rc = 0;
fail:
    kiln_scope_end(step);
    kiln_optimizer_free(opt);
    kiln_params_free(params);
    kiln_module_free(model);
    free(train.x);
    free(train.y);
    free(test.x);
    free(test.y);
    return rc;
}
