/* train.c - train a small MLP regressor with kiln on any device: predict a programmer's salary
 * from years of experience, age, education level, languages known and remote work, generated
 * from a known formula plus noise. The step is the PyTorch tutorial's: forward, loss,
 * zero_grad, backward, optimizer step (autograd, a Sequential of Linear layers and Adam), inside
 * a scope that releases the step's temporaries. (examples/mlp.c is the same model with its
 * backward pass written by hand, for kiln-bench train.)
 *
 * Usage: train [--device SPEC] [--epochs N] [--batch N] [--hidden N] [--samples N] [--lr X]
 *              [--seed N]
 * The same seed gives the same data and the same initial weights on every device. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"

#define NFEAT 5

typedef struct options {
    const char *device;
    int epochs, batch, hidden, samples;
    double lr;
    uint64_t seed;
} options;

/* Host-side data: features standardised, target in standard units. */
typedef struct dataset {
    int n;
    float *x; /* n x NFEAT */
    float *y; /* n */
} dataset;

static int check(kiln_status s, const char *what)
{
    if (s == KILN_OK)
        return 0;
    fprintf(stderr, "train: %s failed: %s: %s\n", what, kiln_status_string(s), kiln_last_error());
    return 1;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if (check((call), #call))                                                                  \
            goto fail;                                                                             \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64* for the synthetic data (the weights come from kiln's Philox generator). */
static double rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}

static double gauss(uint64_t *s)
{
    double u = rnd(s), v = rnd(s);
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* The "true" salary in k$: concave in experience, with education, languages, remote. */
static double salary(const double *f)
{
    double years = f[0], age = f[1], edu = f[2], langs = f[3], remote = f[4];
    return 42.0 + 5.0 * years - 0.09 * years * years + 8.0 * edu + 2.5 * langs + 7.0 * remote -
           0.15 * fmax(0.0, age - 22.0 - years);
}

static double ymean, ystd;

static void make_data(dataset *train, dataset *test, int n, uint64_t seed)
{
    int ntest = n / 5, ntrain = n - ntest;
    double *raw = malloc(sizeof(double) * (size_t)n * NFEAT), *y = malloc(sizeof(double) * n);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < n; i++) {
        double *f = &raw[i * NFEAT];
        f[0] = 30.0 * rnd(&s);
        f[1] = 22.0 + f[0] + 15.0 * rnd(&s);
        f[2] = floor(4.0 * rnd(&s));
        f[3] = 1.0 + floor(6.0 * rnd(&s));
        f[4] = rnd(&s) < 0.4 ? 1.0 : 0.0;
        y[i] = salary(f) + 5.0 * gauss(&s);
    }
    /* Standardise with the training split's statistics. */
    double mean[NFEAT] = {0}, sd[NFEAT] = {0};
    ymean = ystd = 0;
    for (int i = 0; i < ntrain; i++) {
        for (int k = 0; k < NFEAT; k++)
            mean[k] += raw[i * NFEAT + k] / ntrain;
        ymean += y[i] / ntrain;
    }
    for (int i = 0; i < ntrain; i++) {
        for (int k = 0; k < NFEAT; k++)
            sd[k] += pow(raw[i * NFEAT + k] - mean[k], 2) / ntrain;
        ystd += pow(y[i] - ymean, 2) / ntrain;
    }
    ystd = sqrt(ystd);
    dataset *sets[2] = {train, test};
    int counts[2] = {ntrain, ntest}, start[2] = {0, ntrain};
    for (int d = 0; d < 2; d++) {
        sets[d]->n = counts[d];
        sets[d]->x = malloc(sizeof(float) * (size_t)counts[d] * NFEAT);
        sets[d]->y = malloc(sizeof(float) * (size_t)counts[d]);
        for (int i = 0; i < counts[d]; i++) {
            int src = start[d] + i;
            for (int k = 0; k < NFEAT; k++)
                sets[d]->x[i * NFEAT + k] =
                    (float)((raw[src * NFEAT + k] - mean[k]) / sqrt(sd[k] + 1e-12));
            sets[d]->y[i] = (float)((y[src] - ymean) / ystd);
        }
    }
    free(raw);
    free(y);
}

static int parse(int argc, char **argv, options *o)
{
    *o = (options){"auto", 20, 64, 32, 4096, 0.01, 42};
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'},
        {"epochs", required_argument, NULL, 'e'},
        {"batch", required_argument, NULL, 'b'},
        {"hidden", required_argument, NULL, 'H'},
        {"samples", required_argument, NULL, 'n'},
        {"lr", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:e:b:H:n:l:s:h", opts, NULL)) != -1) {
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
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: train [--device SPEC] [--epochs N] [--batch N] [--hidden N] "
                    "[--samples N] [--lr X] [--seed N]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (o->epochs < 1 || o->batch < 1 || o->hidden < 1 || o->samples < 10 || !(o->lr > 0)) {
        fprintf(stderr, "train: epochs, batch, hidden must be >= 1, samples >= 10, lr > 0\n");
        return 2;
    }
    return -1;
}

/* Root-mean-square error in k$ on a dataset, evaluated in one batch with grad mode off. */
static kiln_status evaluate(kiln_module *model, kiln_device *dev, const dataset *d, double *rmse)
{
    bool prev = kiln_set_grad_enabled(false);
    kiln_scope *scope;
    kiln_status s = kiln_scope_begin(&scope);
    int64_t xs[2] = {d->n, NFEAT};
    float *out = malloc(sizeof(float) * (size_t)d->n);
    kiln_tensor *x, *pred;
    if (s == KILN_OK)
        s = out ? kiln_tensor_from_host(dev, KILN_F32, 2, xs, d->x, &x) : KILN_ERR_OUT_OF_MEMORY;
    if (s == KILN_OK)
        s = kiln_module_forward(model, x, &pred);
    if (s == KILN_OK)
        s = kiln_tensor_read(pred, out, sizeof(float) * (size_t)d->n);
    if (s == KILN_OK) {
        double se = 0;
        for (int i = 0; i < d->n; i++)
            se += pow((double)(out[i] - d->y[i]) * ystd, 2);
        *rmse = sqrt(se / d->n);
    }
    free(out);
    kiln_scope_end(scope);
    kiln_set_grad_enabled(prev);
    return s;
}

/* A fingerprint of the initial weights: equal on every device for one seed. */
static kiln_status print_fingerprint(const kiln_tensor *w1, options o)
{
    size_t n = (size_t)NFEAT * (size_t)o.hidden;
    float *w = malloc(sizeof(float) * n);
    if (!w)
        return KILN_ERR_OUT_OF_MEMORY;
    kiln_status s = kiln_tensor_read(w1, w, sizeof(float) * n);
    if (s == KILN_OK) {
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += w[i] * (double)(i % 7 + 1);
        printf("initial weights fingerprint: %.9g (seed %llu)\n", sum, (unsigned long long)o.seed);
    }
    free(w);
    return s;
}

/* model = Sequential(Linear(5, hidden), ReLU(), Linear(hidden, 1)), He-initialised. */
static kiln_status make_model(kiln_device *dev, options o, kiln_module **model)
{
    kiln_module *layers[3] = {NULL, NULL, NULL};
    kiln_status s =
        kiln_linear_create(dev, KILN_F32, NFEAT, o.hidden, true, KILN_INIT_HE, o.seed, &layers[0]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &layers[1]);
    if (s == KILN_OK)
        s = kiln_linear_create(dev, KILN_F32, o.hidden, 1, true, KILN_INIT_HE, o.seed + 1,
                               &layers[2]);
    if (s == KILN_OK)
        return kiln_sequential_create(layers, 3, model); /* owns the layers, also on failure */
    for (int i = 0; i < 3; i++)
        kiln_module_free(layers[i]);
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

    make_data(&train, &test, o.samples, o.seed);
    if (o.batch > train.n)
        o.batch = train.n;
    printf("data: %d training and %d held-out samples, %d features; model %d-%d-1, batch %d\n",
           train.n, test.n, NFEAT, NFEAT, o.hidden, o.batch);

    TRY(make_model(dev, o, &model));
    TRY(kiln_params_create(&params));
    TRY(kiln_module_params(model, "", params));
    TRY(print_fingerprint(kiln_params_find(params, "0.weight"), o));
    TRY(kiln_adam_create(params, o.lr, 0.9, 0.999, 1e-8, 0.0, &opt));

    double base = 0;
    for (int i = 0; i < test.n; i++)
        base += pow(test.y[i] * ystd, 2);
    printf("baseline (predict the mean): held-out RMSE %.2f k$\n", sqrt(base / test.n));

    int nbatch = train.n / o.batch;
    double total_time = 0, first_epoch = 0;
    for (int epoch = 1; epoch <= o.epochs; epoch++) {
        double t0 = now(), sum = 0;
        for (int b = 0; b < nbatch; b++) {
            int64_t xs[2] = {o.batch, NFEAT}, ys[2] = {o.batch, 1};
            size_t off = (size_t)b * (size_t)o.batch;
            kiln_tensor *x, *y, *pred, *loss;
            double l;
            TRY(kiln_scope_begin(&step)); /* the step's tensors are released at scope_end */
            TRY(kiln_tensor_from_host(dev, KILN_F32, 2, xs, train.x + off * NFEAT, &x));
            TRY(kiln_tensor_from_host(dev, KILN_F32, 2, ys, train.y + off, &y));
            TRY(kiln_module_forward(model, x, &pred));
            TRY(kiln_mse_loss(pred, y, &loss, NULL));
            TRY(kiln_optimizer_zero_grad(opt));
            TRY(kiln_backward(loss, NULL, 0));
            TRY(kiln_optimizer_step(opt));
            TRY(kiln_tensor_item(loss, &l));
            kiln_scope_end(step);
            step = NULL;
            sum += l;
        }
        TRY(kiln_device_synchronize(dev));
        double dt = now() - t0;
        if (epoch == 1)
            first_epoch = dt; /* includes building the kernels (or loading them from cache) */
        else
            total_time += dt;
        printf("epoch %3d  loss %.6f  (%.1f ms)\n", epoch, sum / nbatch, dt * 1e3);
    }
    double rmse = 0;
    TRY(evaluate(model, dev, &test, &rmse));
    printf("held-out RMSE: %.2f k$ (noise level 5.00 k$)\n", rmse);
    if (o.epochs > 1)
        printf("time per epoch: %.1f ms (%.3f ms per step); first epoch %.1f ms, with kernel "
               "builds\n",
               total_time / (o.epochs - 1) * 1e3, total_time / ((o.epochs - 1) * nbatch) * 1e3,
               first_epoch * 1e3);
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
