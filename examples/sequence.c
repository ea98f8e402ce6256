/* sequence.c - the recurrent chapter of the PyTorch tutorial series, in C: predict the next value
 * of a noisy periodic signal from the 30 values before it with an LSTM (or a GRU, --cell gru).
 *
 * The signal is sin(2 pi t / 25) + 0.5 sin(2 pi t / 7) + N(0, 0.1^2) noise, 3000 steps (seeded);
 * windows of 30 values and the value after them. The split is by time, as it must be for a
 * series: the first 70% of the windows train, the next 15% validate, the last 15% test.
 * Training batches are shuffled each epoch; Adam, gradients clipped to norm 1, the best model by
 * validation loss kept in a checkpoint, early stopping, and the best model reloaded for the test
 * error, which is printed beside the naive forecast's ("the next value is the last one").
 *
 * model: x [B, 30, 1] -> LSTM(1, hidden, batch_first) -> h_n [1, B, hidden] -> Linear(hidden, 1)
 *
 * Usage: sequence [--device SPEC] [--cell lstm|gru] [--hidden N] [--epochs N] [--batch N]
 *                 [--lr X] [--seed N] [--patience N] [--checkpoint FILE] */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

enum { WINDOW = 30, SERIES = 3000 };

typedef struct options {
    const char *device, *cell, *checkpoint;
    int hidden, epochs, batch, patience;
    double lr;
    uint64_t seed;
} options;

static int check(kiln_status s, const char *what)
{
    if (s == KILN_OK)
        return 0;
    fprintf(stderr, "sequence: %s failed: %s: %s\n", what, kiln_status_string(s),
            kiln_last_error());
    return 1;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if (check((call), #call))                                                                  \
            goto fail;                                                                             \
    } while (0)

static int parse(int argc, char **argv, options *o)
{
    *o = (options){"auto", "lstm", "sequence_best.safetensors", 32, 40, 32, 6, 0.01, 7};
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'},
        {"cell", required_argument, NULL, 'C'},
        {"hidden", required_argument, NULL, 'H'},
        {"epochs", required_argument, NULL, 'e'},
        {"batch", required_argument, NULL, 'b'},
        {"lr", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 's'},
        {"patience", required_argument, NULL, 'p'},
        {"checkpoint", required_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:C:H:e:b:l:s:p:k:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            o->device = optarg;
            break;
        case 'C':
            o->cell = optarg;
            break;
        case 'H':
            o->hidden = atoi(optarg);
            break;
        case 'e':
            o->epochs = atoi(optarg);
            break;
        case 'b':
            o->batch = atoi(optarg);
            break;
        case 'l':
            o->lr = atof(optarg);
            break;
        case 's':
            o->seed = strtoull(optarg, NULL, 10);
            break;
        case 'p':
            o->patience = atoi(optarg);
            break;
        case 'k':
            o->checkpoint = optarg;
            break;
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: sequence [--device SPEC] [--cell lstm|gru] [--hidden N] [--epochs N] "
                    "[--batch N] [--lr X] [--seed N] [--patience N] [--checkpoint FILE]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (o->epochs < 1 || o->batch < 1 || o->patience < 1 || o->hidden < 1 || !(o->lr > 0) ||
        (strcmp(o->cell, "lstm") != 0 && strcmp(o->cell, "gru") != 0)) {
        fprintf(stderr, "sequence: epochs, batch, patience and hidden must be >= 1, lr > 0, cell "
                        "lstm or gru\n");
        return 2;
    }
    return -1;
}

/* The signal, from a seeded xorshift64* and Box-Muller, so every run sees the same series. */
static void make_series(uint64_t seed, float *v)
{
    uint64_t st = seed * 2654435761u + 1;
    for (int t = 0; t < SERIES; t++) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            st ^= st >> 12;
            st ^= st << 25;
            st ^= st >> 27;
            u[k] = (double)((st * 2685821657736338717u) >> 11) / 9007199254740992.0;
        }
        double noise = sqrt(-2 * log(u[0] + 1e-300)) * cos(2 * M_PI * u[1]);
        v[t] = (float)(sin(2 * M_PI * t / 25.0) + 0.5 * sin(2 * M_PI * t / 7.0) + 0.1 * noise);
    }
}

typedef struct model {
    kiln_module *rnn, *head;
    bool lstm;
} model;

/* pred [B, 1] from x [B, WINDOW, 1]: the head on the last hidden state. */
static kiln_status forward(const model *m, const kiln_tensor *x, kiln_tensor **pred)
{
    kiln_tensor *y = NULL, *hn = NULL, *cn = NULL, *last = NULL;
    kiln_status s = kiln_rnn_forward(m->rnn, x, NULL, NULL, NULL, &y, &hn, m->lstm ? &cn : NULL);
    if (s == KILN_OK)
        s = kiln_squeeze(hn, 0, &last); /* [1, B, H] -> [B, H] */
    if (s == KILN_OK)
        s = kiln_module_forward(m->head, last, pred);
    kiln_tensor_release(y);
    kiln_tensor_release(hn);
    kiln_tensor_release(cn);
    kiln_tensor_release(last);
    return s;
}

/* The mean squared error of the model over a loader's batches. */
static kiln_status evaluate(const model *m, kiln_loader *l, double *mse)
{
    bool prev = kiln_set_grad_enabled(false);
    kiln_status s = KILN_OK;
    double sum = 0;
    int64_t seen = 0;
    for (;;) {
        kiln_scope *sc;
        if ((s = kiln_scope_begin(&sc)) != KILN_OK)
            break;
        kiln_tensor *x, *y, *pred, *loss;
        double lv = 0;
        s = kiln_loader_next(l, &x, &y);
        if (s != KILN_OK || !x) {
            kiln_scope_end(sc);
            break;
        }
        int64_t n = kiln_tensor_shape(x)[0];
        s = forward(m, x, &pred);
        if (s == KILN_OK)
            s = kiln_mse_loss(pred, y, &loss, NULL);
        if (s == KILN_OK)
            s = kiln_tensor_item(loss, &lv);
        kiln_scope_end(sc);
        if (s != KILN_OK)
            break;
        sum += lv * (double)n;
        seen += n;
    }
    kiln_set_grad_enabled(prev);
    *mse = sum / (double)(seen ? seen : 1);
    return s;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    rc = 1;
    int64_t count = SERIES - WINDOW;
    float *series = malloc(SERIES * sizeof *series);
    float *windows = malloc((size_t)count * WINDOW * sizeof *windows);
    float *next = malloc((size_t)count * sizeof *next);
    kiln_device *dev = NULL;
    kiln_dataset *parts[3] = {0};
    kiln_loader *train = NULL, *val = NULL, *test = NULL;
    model m = {NULL, NULL, strcmp(o.cell, "lstm") == 0};
    kiln_params *params = NULL, *state = NULL;
    kiln_optimizer *opt = NULL;
    if (!series || !windows || !next) {
        fprintf(stderr, "sequence: out of memory\n");
        goto fail;
    }
    make_series(o.seed, series);
    for (int64_t i = 0; i < count; i++) {
        memcpy(windows + i * WINDOW, series + i, WINDOW * sizeof *windows);
        next[i] = series[i + WINDOW];
    }
    TRY(kiln_device_get(o.device, &dev));
    printf("device: %s\n", kiln_device_spec(dev));

    /* split by time: 70% train (shuffled each epoch), 15% validation, 15% test */
    int64_t n_train = count * 70 / 100, n_val = count * 15 / 100, n_test = count - n_train - n_val;
    int64_t starts[3] = {0, n_train, n_train + n_val}, sizes[3] = {n_train, n_val, n_test};
    for (int k = 0; k < 3; k++) {
        int64_t fs[3] = {sizes[k], WINDOW, 1}, ts[2] = {sizes[k], 1};
        TRY(kiln_dataset_create(windows + starts[k] * WINDOW, KILN_F32, 3, fs, next + starts[k],
                                KILN_F32, 2, ts, &parts[k]));
    }
    TRY(kiln_loader_create(parts[0], dev, o.batch, true, false, o.seed, &train));
    TRY(kiln_loader_create(parts[1], dev, 256, false, false, 0, &val));
    TRY(kiln_loader_create(parts[2], dev, 256, false, false, 0, &test));
    printf("data: %d steps of a noisy periodic signal, windows of %d: %lld train, %lld validation, "
           "%lld test; batch %d\n",
           SERIES, WINDOW, (long long)n_train, (long long)n_val, (long long)n_test, o.batch);

    kiln_rnn_options ro = {.batch_first = true};
    if (m.lstm)
        TRY(kiln_lstm_create(dev, KILN_F32, 1, o.hidden, &ro, o.seed + 1, &m.rnn));
    else
        TRY(kiln_gru_create(dev, KILN_F32, 1, o.hidden, &ro, o.seed + 1, &m.rnn));
    TRY(kiln_linear_create(dev, KILN_F32, o.hidden, 1, true, KILN_INIT_DEFAULT, o.seed + 2,
                           &m.head));
    printf("model: %s(1, %d, batch_first) -> Linear(%d, 1) on the last hidden state\n",
           m.lstm ? "LSTM" : "GRU", o.hidden, o.hidden);
    TRY(kiln_params_create(&params));
    TRY(kiln_module_params(m.rnn, "rnn", params));
    TRY(kiln_module_params(m.head, "head", params));
    TRY(kiln_params_create(&state));
    TRY(kiln_module_state(m.rnn, "rnn", state));
    TRY(kiln_module_state(m.head, "head", state));
    TRY(kiln_adam_create(params, o.lr, 0.9, 0.999, 1e-8, 0.0, &opt));

    double best = INFINITY;
    int best_epoch = 0;
    for (int epoch = 1; epoch <= o.epochs; epoch++) {
        double sum = 0;
        int64_t seen = 0;
        for (;;) {
            kiln_scope *step;
            kiln_tensor *x, *y, *pred, *loss;
            double l;
            TRY(kiln_scope_begin(&step)); /* the batch and the step's temporaries end with it */
            TRY(kiln_loader_next(train, &x, &y));
            if (!x) {
                kiln_scope_end(step);
                break;
            }
            TRY(forward(&m, x, &pred));
            TRY(kiln_mse_loss(pred, y, &loss, NULL));
            TRY(kiln_optimizer_zero_grad(opt));
            TRY(kiln_backward(loss, NULL, 0));
            TRY(kiln_clip_grad_norm(params, 1.0, NULL));
            TRY(kiln_optimizer_step(opt));
            TRY(kiln_tensor_item(loss, &l));
            int64_t n = kiln_tensor_shape(x)[0];
            sum += l * (double)n;
            seen += n;
            kiln_scope_end(step);
        }
        double val_mse;
        TRY(evaluate(&m, val, &val_mse));
        bool better = val_mse < best;
        if (better) {
            best = val_mse;
            best_epoch = epoch;
            TRY(kiln_params_save(state, o.checkpoint));
        }
        printf("epoch %3d  loss %.5f  val_mse %.5f%s\n", epoch, sum / (double)(seen ? seen : 1),
               val_mse, better ? "  (best, saved)" : "");
        if (epoch - best_epoch >= o.patience) {
            printf("early stop: no better validation loss for %d epochs\n", o.patience);
            break;
        }
    }
    TRY(kiln_params_load(state, o.checkpoint));
    double test_mse, naive = 0;
    TRY(evaluate(&m, test, &test_mse));
    for (int64_t i = starts[2]; i < count; i++) {
        double d = (double)next[i] - (double)windows[i * WINDOW + WINDOW - 1];
        naive += d * d / (double)n_test;
    }
    printf("best epoch %d (validation MSE %.5f), reloaded from %s\n", best_epoch, best,
           o.checkpoint);
    printf("test MSE: %.5f (last-value baseline: %.5f, %.1fx worse; the noise alone: 0.01000)\n",
           test_mse, naive, naive / test_mse);
    rc = 0;
fail:
    kiln_optimizer_free(opt);
    kiln_params_free(params);
    kiln_params_free(state);
    kiln_module_free(m.rnn);
    kiln_module_free(m.head);
    kiln_loader_free(train);
    kiln_loader_free(val);
    kiln_loader_free(test);
    for (int k = 0; k < 3; k++)
        kiln_dataset_free(parts[k]);
    free(series);
    free(windows);
    free(next);
    return rc;
}
