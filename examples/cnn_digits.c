/* cnn_digits.c - the CNN chapter of the PyTorch tutorial series, in C: a small convolutional
 * network on real images, scikit-learn's 8x8 handwritten digits (1797 of them; examples/data/
 * says where they come from). The training tricks of the series are all here: a seeded
 * train/validation/test split, batches shuffled each epoch, Adam with a cosine learning-rate
 * schedule, the best model by validation accuracy kept in a checkpoint, early stopping, and the
 * best model reloaded for the test accuracy. Loss and accuracy curves go to a CSV file, and with
 * --plot to a PNG drawn by gnuplot (when it is installed). --amp trains with mixed precision, as
 * the series' last chapter does on a GPU: the forward under autocast (convolutions and the linear
 * layer in f16, the loss in f32), the loss scaled by a gradient scaler, f32 master weights. Each
 * run prints the memory one training step takes above what is held between steps.
 *
 * model = Sequential(Conv2d(1, 16, 3, padding=1), BatchNorm2d(16), ReLU(), MaxPool2d(2),
 *                    Conv2d(16, 32, 3, padding=1), BatchNorm2d(32), ReLU(), MaxPool2d(2),
 *                    Flatten(), Linear(32 * 2 * 2, 10))
 *
 * Usage: cnn_digits [--device SPEC] [--data FILE] [--epochs N] [--batch N] [--lr X] [--seed N]
 *                   [--patience N] [--samples N] [--csv FILE] [--checkpoint FILE]
 *                   [--plot FILE.png] [--amp] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

#ifndef KILN_DIGITS_DATA
#define KILN_DIGITS_DATA "examples/data/digits.bin"
#endif

typedef struct options {
    const char *device, *data, *csv, *checkpoint, *plot;
    int epochs, batch, patience, samples;
    double lr;
    uint64_t seed;
    bool amp;
} options;

static int check(kiln_status s, const char *what)
{
    if (s == KILN_OK)
        return 0;
    fprintf(stderr, "cnn_digits: %s failed: %s: %s\n", what, kiln_status_string(s),
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
    *o = (options){"auto",
                   KILN_DIGITS_DATA,
                   "cnn_digits.csv",
                   "cnn_digits_best.safetensors",
                   NULL,
                   30,
                   32,
                   8,
                   0,
                   0.01,
                   42,
                   false};
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'},   {"data", required_argument, NULL, 'D'},
        {"epochs", required_argument, NULL, 'e'},   {"batch", required_argument, NULL, 'b'},
        {"lr", required_argument, NULL, 'l'},       {"seed", required_argument, NULL, 's'},
        {"patience", required_argument, NULL, 'p'}, {"samples", required_argument, NULL, 'n'},
        {"csv", required_argument, NULL, 'c'},      {"checkpoint", required_argument, NULL, 'k'},
        {"plot", required_argument, NULL, 'P'},     {"amp", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:D:e:b:l:s:p:n:c:k:P:ah", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            o->device = optarg;
            break;
        case 'D':
            o->data = optarg;
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
        case 'n':
            o->samples = atoi(optarg);
            break;
        case 'c':
            o->csv = optarg;
            break;
        case 'k':
            o->checkpoint = optarg;
            break;
        case 'P':
            o->plot = optarg;
            break;
        case 'a':
            o->amp = true;
            break;
        default:
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: cnn_digits [--device SPEC] [--data FILE] [--epochs N] [--batch N] "
                    "[--lr X] [--seed N] [--patience N] [--samples N] [--csv FILE] "
                    "[--checkpoint FILE] [--plot FILE.png] [--amp]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (o->epochs < 1 || o->batch < 1 || o->patience < 1 || o->samples < 0 || !(o->lr > 0)) {
        fprintf(stderr, "cnn_digits: epochs, batch and patience must be >= 1, samples >= 0 (0: "
                        "all), lr > 0\n");
        return 2;
    }
    return -1;
}

/* digits.bin (scripts/convert-digits.py): "KILNDIG1", u32 count, rows, cols, the pixels, the
 * labels. Images become f32 [count, 1, 8, 8] scaled to [0, 1], labels i64. */
static int read_digits(const char *path, int limit, float **images, int64_t **labels, int *count)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cnn_digits: cannot open %s (pass --data FILE)\n", path);
        return 1;
    }
    unsigned char head[20];
    int rc = 1;
    unsigned char *raw = NULL;
    if (fread(head, 1, sizeof head, f) != sizeof head || memcmp(head, "KILNDIG1", 8) != 0) {
        fprintf(stderr, "cnn_digits: %s is not a digits file (no KILNDIG1 header)\n", path);
        goto done;
    }
    uint32_t n = head[8] | head[9] << 8 | head[10] << 16 | (uint32_t)head[11] << 24;
    if (n == 0 || n > 100000 || head[12] != 8 || head[16] != 8) {
        fprintf(stderr, "cnn_digits: %s: unexpected sizes (%u images)\n", path, n);
        goto done;
    }
    raw = malloc((size_t)n * 65);
    *images = malloc(sizeof(float) * 64 * n);
    *labels = malloc(sizeof(int64_t) * n);
    if (!raw || !*images || !*labels || fread(raw, 1, (size_t)n * 65, f) != (size_t)n * 65) {
        fprintf(stderr, "cnn_digits: %s: %s\n", path, raw ? "the file ends early" : "no memory");
        goto done;
    }
    *count = limit > 0 && (uint32_t)limit < n ? limit : (int)n;
    for (size_t i = 0; i < (size_t)n * 64; i++)
        (*images)[i] = raw[i] / 16.0f;
    for (uint32_t i = 0; i < n; i++)
        (*labels)[i] = raw[(size_t)n * 64 + i] % 10;
    rc = 0;
done:
    free(raw);
    fclose(f);
    return rc;
}

/* Mean cross-entropy and accuracy of the model (in evaluation mode, grad mode off) over the
 * batches of a loader. */
static kiln_status evaluate(kiln_module *model, kiln_loader *l, double *loss, double *acc)
{
    kiln_module_set_training(model, false);
    bool prev = kiln_set_grad_enabled(false);
    kiln_status s = KILN_OK;
    double sum = 0;
    int64_t right = 0, seen = 0;
    for (;;) {
        kiln_scope *sc;
        if ((s = kiln_scope_begin(&sc)) != KILN_OK)
            break;
        kiln_tensor *x, *y, *logits, *l1, *pred;
        double lv;
        s = kiln_loader_next(l, &x, &y);
        if (s != KILN_OK || !x) {
            kiln_scope_end(sc);
            break;
        }
        int64_t n = kiln_tensor_shape(x)[0], picked[512], truth[512];
        s = kiln_module_forward(model, x, &logits);
        if (s == KILN_OK)
            s = kiln_cross_entropy(logits, y, &l1, NULL);
        if (s == KILN_OK)
            s = kiln_reduce(KILN_REDUCE_ARGMAX, logits, 1, false, &pred);
        if (s == KILN_OK)
            s = kiln_tensor_read(pred, picked, sizeof(int64_t) * (size_t)n);
        if (s == KILN_OK)
            s = kiln_tensor_read(y, truth, sizeof(int64_t) * (size_t)n);
        if (s == KILN_OK)
            s = kiln_tensor_item(l1, &lv);
        kiln_scope_end(sc);
        if (s != KILN_OK)
            break;
        sum += lv * (double)n;
        for (int64_t i = 0; i < n; i++)
            right += picked[i] == truth[i];
        seen += n;
    }
    kiln_set_grad_enabled(prev);
    kiln_module_set_training(model, true);
    *loss = seen ? sum / (double)seen : 0;
    *acc = seen ? (double)right / (double)seen : 0;
    return s;
}

static kiln_status build_model(kiln_device *dev, uint64_t seed, kiln_module **model)
{
    const kiln_conv2d_params same = {.padding = {1, 1}};
    const kiln_pool2d_params halve = {.kernel = {2, 2}};
    kiln_module *m[10] = {0};
    kiln_status s = kiln_conv2d_create(dev, KILN_F32, 1, 16, 3, 3, &same, true, seed, &m[0]);
    if (s == KILN_OK)
        s = kiln_batch_norm2d_create(dev, KILN_F32, 16, 1e-5, 0.1, &m[1]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &m[2]);
    if (s == KILN_OK)
        s = kiln_max_pool2d_create(&halve, &m[3]);
    if (s == KILN_OK)
        s = kiln_conv2d_create(dev, KILN_F32, 16, 32, 3, 3, &same, true, seed + 1, &m[4]);
    if (s == KILN_OK)
        s = kiln_batch_norm2d_create(dev, KILN_F32, 32, 1e-5, 0.1, &m[5]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &m[6]);
    if (s == KILN_OK)
        s = kiln_max_pool2d_create(&halve, &m[7]);
    if (s == KILN_OK)
        s = kiln_flatten_create(1, -1, &m[8]);
    if (s == KILN_OK)
        s = kiln_linear_create(dev, KILN_F32, 32 * 2 * 2, 10, true, KILN_INIT_DEFAULT, seed + 2,
                               &m[9]);
    if (s == KILN_OK)
        return kiln_sequential_create(m, 10, model); /* owns the modules from here on */
    for (int i = 0; i < 10; i++)
        kiln_module_free(m[i]);
    return s;
}

/* The curves as a PNG, by gnuplot reading the CSV; a missing gnuplot is said, not fatal. */
static void plot(const char *csv, const char *png)
{
    const char *unsafe = "'\"\\`$"; /* the paths go into a shell command line */
    if (strpbrk(csv, unsafe) || strpbrk(png, unsafe)) {
        fprintf(stderr,
                "cnn_digits: --plot: paths with quotes, backslashes, ` or $ are not "
                "passed to gnuplot; the curves are in %s\n",
                csv);
        return;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "gnuplot -e \"set terminal png noenhanced size 900,400; set output '%s'; set datafile "
             "separator ','; set key autotitle columnhead; set multiplot layout 1,2; set xlabel "
             "'epoch'; plot '%s' using 1:2 with lines, '' using 1:3 with lines; set yrange "
             "[0:100]; plot '%s' using 1:4 with lines; unset multiplot\" 2>/dev/null",
             png, csv, csv);
    if (system(cmd) != 0)
        fprintf(stderr,
                "cnn_digits: --plot: gnuplot failed or is not installed (apt-get install "
                "gnuplot-nox); the curves are in %s\n",
                csv);
    else
        printf("plot: %s\n", png);
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    rc = 1;
    float *images = NULL;
    int64_t *labels = NULL;
    int count = 0;
    kiln_dataset *all = NULL, *parts[3] = {0};
    kiln_loader *train = NULL, *val = NULL, *test = NULL;
    kiln_module *model = NULL;
    kiln_params *params = NULL, *state = NULL;
    kiln_optimizer *opt = NULL;
    kiln_scheduler *sched = NULL;
    kiln_grad_scaler *scaler = NULL;
    kiln_scope *step = NULL;
    FILE *csv = NULL;
    kiln_device *dev;
    if (read_digits(o.data, o.samples, &images, &labels, &count))
        return 1;
    TRY(kiln_device_get(o.device, &dev));
    printf("device: %s (%s)\n", kiln_device_spec(dev), kiln_device_name(dev));
    kiln_manual_seed(o.seed);

    /* data: 70% train, 15% validation, 15% test; training batches shuffled each epoch */
    const int64_t fs[4] = {count, 1, 8, 8}, ls[1] = {count};
    TRY(kiln_dataset_create(images, KILN_F32, 4, fs, labels, KILN_I64, 1, ls, &all));
    TRY(kiln_random_split(all, 3, (const double[]){0.7, 0.15, 0.15}, o.seed, parts));
    TRY(kiln_loader_create(parts[0], dev, o.batch, true, false, o.seed, &train));
    /* DataLoader(pin_memory=True): the next batch uploads on a copy queue while a step runs */
    TRY(kiln_loader_pin_memory(train, true));
    TRY(kiln_loader_create(parts[1], dev, 512, false, false, 0, &val));
    TRY(kiln_loader_create(parts[2], dev, 512, false, false, 0, &test));
    printf("data: %s, %d images: %lld train, %lld validation, %lld test; batch %d\n", o.data, count,
           (long long)kiln_dataset_size(parts[0]), (long long)kiln_dataset_size(parts[1]),
           (long long)kiln_dataset_size(parts[2]), o.batch);

    TRY(build_model(dev, KILN_SEED_GLOBAL, &model));
    TRY(kiln_params_create(&params));
    TRY(kiln_module_params(model, "", params)); /* trained by the optimizer */
    TRY(kiln_params_create(&state));
    TRY(kiln_module_state(model, "", state)); /* checkpointed: parameters and buffers */
    TRY(kiln_adam_create(params, o.lr, 0.9, 0.999, 1e-8, 0.0, &opt));
    TRY(kiln_cosine_annealing_lr_create(opt, o.epochs, 0.0, &sched));
    /* mixed precision: autocast on this device's type, and loss scaling (disabled: a plain step) */
    kiln_device_info info;
    TRY(kiln_device_info_get(dev, &info));
    TRY(kiln_grad_scaler_create(&(kiln_grad_scaler_options){.disabled = !o.amp}, &scaler));
    if (o.amp)
        printf("mixed precision: f16 autocast on %s, loss scaling from %g\n", kiln_device_spec(dev),
               kiln_grad_scaler_get_scale(scaler));
    uint64_t step_bytes = 0; /* the most one training step allocated above its start */
    if (!(csv = fopen(o.csv, "w"))) {
        fprintf(stderr, "cnn_digits: cannot write %s\n", o.csv);
        goto fail;
    }
    fprintf(csv, "epoch,train_loss,val_loss,val_accuracy,lr\n");

    double best = -1;
    int best_epoch = 0;
    for (int epoch = 1; epoch <= o.epochs; epoch++) {
        double lr = kiln_optimizer_lr(opt), sum = 0;
        int64_t seen = 0;
        for (;;) {
            kiln_tensor *x, *y, *logits, *loss;
            double l;
            TRY(kiln_scope_begin(&step)); /* the batch and the step's temporaries go at its end */
            TRY(kiln_loader_next(train, &x, &y));
            if (!x)
                break;
            kiln_memory_stats before, after;
            TRY(kiln_optimizer_zero_grad(opt));
            TRY(kiln_device_memory_stats(dev, &before));
            TRY(kiln_device_reset_peak(dev));
            if (o.amp)
                TRY(kiln_autocast_begin(info.type, KILN_F16));
            kiln_status fs = kiln_module_forward(model, x, &logits);
            if (fs == KILN_OK)
                fs = kiln_cross_entropy(logits, y, &loss, NULL);
            if (o.amp)
                kiln_autocast_end();
            TRY(fs);
            kiln_tensor *scaled;
            TRY(kiln_grad_scaler_scale(scaler, loss, &scaled));
            TRY(kiln_backward(scaled, NULL, 0));
            TRY(kiln_grad_scaler_step(scaler, opt, NULL));
            TRY(kiln_grad_scaler_update(scaler));
            TRY(kiln_tensor_item(loss, &l));
            TRY(kiln_device_memory_stats(dev, &after));
            if (after.peak_allocated_bytes - before.allocated_bytes > step_bytes)
                step_bytes = after.peak_allocated_bytes - before.allocated_bytes;
            int64_t n = kiln_tensor_shape(x)[0];
            kiln_scope_end(step);
            step = NULL;
            sum += l * (double)n;
            seen += n;
        }
        kiln_scope_end(step);
        step = NULL;
        TRY(kiln_scheduler_step(sched));
        double val_loss, val_acc;
        TRY(evaluate(model, val, &val_loss, &val_acc));
        bool better = val_acc > best;
        if (better) { /* keep the best model: its parameters and batch-norm buffers */
            best = val_acc;
            best_epoch = epoch;
            TRY(kiln_params_save(state, o.checkpoint));
        }
        printf("epoch %3d  loss %.4f  val_loss %.4f  val_accuracy %5.1f%%  lr %.5f%s\n", epoch,
               sum / (double)(seen ? seen : 1), val_loss, 100 * val_acc, lr,
               better ? "  (best, saved)" : "");
        fprintf(csv, "%d,%.6f,%.6f,%.3f,%.6g\n", epoch, sum / (double)(seen ? seen : 1), val_loss,
                100 * val_acc, lr);
        fflush(stdout);
        if (epoch - best_epoch >= o.patience) {
            printf("early stop: no better validation accuracy for %d epochs\n", o.patience);
            break;
        }
    }
    fclose(csv);
    csv = NULL;

    /* the best model back from its checkpoint, then the test set it has never seen */
    TRY(kiln_params_load(state, o.checkpoint));
    double test_loss, test_acc;
    TRY(evaluate(model, test, &test_loss, &test_acc));
    printf("best epoch %d (validation accuracy %.1f%%), reloaded from %s\n", best_epoch, 100 * best,
           o.checkpoint);
    printf("test accuracy: %.1f%% (%lld images, loss %.4f)\n", 100 * test_acc,
           (long long)kiln_dataset_size(parts[2]), test_loss);
    printf("step memory: %.1f KiB at most above the step's start (activations, gradients)%s\n",
           (double)step_bytes / 1024, o.amp ? ", under autocast" : "");
    if (o.amp)
        printf("loss scale at the end: %g\n", kiln_grad_scaler_get_scale(scaler));
    printf("curves: %s\n", o.csv);
    if (o.plot)
        plot(o.csv, o.plot);
    rc = 0;
fail:
    if (csv)
        fclose(csv);
    kiln_scope_end(step);
    kiln_scheduler_free(sched);
    kiln_grad_scaler_free(scaler);
    kiln_optimizer_free(opt);
    kiln_params_free(params);
    kiln_params_free(state);
    kiln_module_free(model);
    kiln_loader_free(train);
    kiln_loader_free(val);
    kiln_loader_free(test);
    for (int i = 0; i < 3; i++)
        kiln_dataset_free(parts[i]);
    kiln_dataset_free(all);
    free(images);
    free(labels);
    return rc;
}
