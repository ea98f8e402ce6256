/* train_ddp.c - data-parallel training over MPI: the salary regressor of train.c (an MLP,
 * 5-H-1, mean squared error) trained with autograd on N ranks, each rank on its own device and
 * on its own shard of every batch; gradients are averaged over the ranks after each backward
 * (kiln_mpi_average_grads), so that every rank takes the same SGD step as one process would on
 * the whole batch.
 *
 *   mpirun -np 2 build/examples/train_ddp            # two ranks on this machine
 *   build/examples/train_ddp                         # one process, the whole batch
 *
 * Usage: train_ddp [--device SPEC] [--epochs N] [--batch N] [--hidden N] [--samples N] [--lr X]
 *                  [--seed N] [--save PATH]
 * Each rank takes `gpu:<local rank>` when the machine has that many GPUs, else `cpu`; --device
 * names one for every rank. --batch is the global batch (a multiple of the number of ranks);
 * --save writes the final parameters (rank 0) as a safetensors checkpoint. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_mpi.h"

#define NFEAT 5

typedef struct options {
    const char *device, *save;
    int epochs, batch, hidden, samples;
    double lr;
    uint64_t seed;
} options;

static int rank, nranks;

/* On any failure: say which rank and why, and end the whole job (the other ranks would otherwise
 * wait in their next collective). */
static void check(kiln_status s, const char *what)
{
    if (s == KILN_OK)
        return;
    fprintf(stderr, "train_ddp: rank %d: %s failed: %s: %s\n", rank, what, kiln_status_string(s),
            kiln_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define TRY(call) check((call), #call)

static double rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}

/* Synthetic salaries (k$) from experience, age, education, languages and remote work, plus
 * noise, standardised; the same seed gives the same data on every rank. */
static void make_data(int n, uint64_t seed, float *x, float *y)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    double *raw = malloc(sizeof(double) * (size_t)n * (NFEAT + 1));
    double mean[NFEAT + 1] = {0}, sd[NFEAT + 1] = {0};
    if (!raw) {
        fprintf(stderr, "train_ddp: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
        return;
    }
    for (int i = 0; i < n; i++) {
        double *f = &raw[i * (NFEAT + 1)];
        f[0] = 30.0 * rnd(&s);
        f[1] = 22.0 + f[0] + 15.0 * rnd(&s);
        f[2] = floor(4.0 * rnd(&s));
        f[3] = 1.0 + floor(6.0 * rnd(&s));
        f[4] = rnd(&s) < 0.4 ? 1.0 : 0.0;
        double u = rnd(&s), v = rnd(&s);
        f[5] = 42.0 + 5.0 * f[0] - 0.09 * f[0] * f[0] + 8.0 * f[2] + 2.5 * f[3] + 7.0 * f[4] -
               0.15 * fmax(0.0, f[1] - 22.0 - f[0]) +
               5.0 * sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
        for (int k = 0; k <= NFEAT; k++)
            mean[k] += f[k] / n;
    }
    for (int i = 0; i < n * (NFEAT + 1); i++)
        sd[i % (NFEAT + 1)] += pow(raw[i] - mean[i % (NFEAT + 1)], 2) / n;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < NFEAT; k++)
            x[i * NFEAT + k] = (float)((raw[i * (NFEAT + 1) + k] - mean[k]) / sqrt(sd[k] + 1e-12));
        y[i] = (float)((raw[i * (NFEAT + 1) + NFEAT] - mean[NFEAT]) / sqrt(sd[NFEAT]));
    }
    free(raw);
}

static int parse(int argc, char **argv, options *o)
{
    *o = (options){NULL, NULL, 10, 60, 16, 1200, 0.05, 7};
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'},  {"epochs", required_argument, NULL, 'e'},
        {"batch", required_argument, NULL, 'b'},   {"hidden", required_argument, NULL, 'H'},
        {"samples", required_argument, NULL, 'n'}, {"lr", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 's'},    {"save", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:e:b:H:n:l:s:o:h", opts, NULL)) != -1) {
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
        case 'o':
            o->save = optarg;
            break;
        default:
            if (rank == 0)
                fprintf(c == 'h' ? stdout : stderr,
                        "usage: train_ddp [--device SPEC] [--epochs N] [--batch N] [--hidden N] "
                        "[--samples N] [--lr X] [--seed N] [--save PATH]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (o->epochs < 1 || o->hidden < 1 || o->batch < nranks || o->batch % nranks != 0 ||
        o->samples < o->batch || !(o->lr > 0)) {
        if (rank == 0)
            fprintf(stderr,
                    "train_ddp: epochs, hidden >= 1; batch a multiple of the number of "
                    "ranks (%d); samples >= batch; lr > 0\n",
                    nranks);
        return 2;
    }
    return -1;
}

/* This rank's device: --device, else gpu:<local rank> when there are enough GPUs, else cpu. */
static kiln_device *pick_device(const options *o)
{
    int local = 0;
    const char *env = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (env) {
        local = atoi(env);
    } else {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
    }
    char spec[32];
    if (o->device)
        snprintf(spec, sizeof spec, "%s", o->device);
    else if (kiln_device_count(KILN_DEVICE_GPU) > local)
        snprintf(spec, sizeof spec, "gpu:%d", local);
    else
        snprintf(spec, sizeof spec, "cpu");
    kiln_device *dev = NULL;
    TRY(kiln_device_get(spec, &dev));
    return dev;
}

/* The model: w1 [F,H], b1 [H], w2 [H,1], b2 [1], leaves that require grad, in a kiln_params. */
static kiln_params *make_model(kiln_device *dev, const options *o)
{
    kiln_params *p;
    kiln_tensor *t;
    int64_t s1[2] = {NFEAT, o->hidden}, sb1[1] = {o->hidden}, s2[2] = {o->hidden, 1}, sb2[1] = {1};
    TRY(kiln_params_create(&p));
    TRY(kiln_rand_normal(dev, KILN_F32, 2, s1, o->seed, 0.0, sqrt(2.0 / NFEAT), &t));
    TRY(kiln_params_add(p, "w1", t));
    kiln_tensor_release(t);
    TRY(kiln_tensor_zeros(dev, KILN_F32, 1, sb1, &t));
    TRY(kiln_params_add(p, "b1", t));
    kiln_tensor_release(t);
    TRY(kiln_rand_normal(dev, KILN_F32, 2, s2, o->seed + 1, 0.0, sqrt(1.0 / o->hidden), &t));
    TRY(kiln_params_add(p, "w2", t));
    kiln_tensor_release(t);
    TRY(kiln_tensor_zeros(dev, KILN_F32, 1, sb2, &t));
    TRY(kiln_params_add(p, "b2", t));
    kiln_tensor_release(t);
    for (int i = 0; i < kiln_params_count(p); i++)
        TRY(kiln_tensor_set_requires_grad(kiln_params_tensor(p, i), true));
    return p;
}

/* loss = mean((relu(x w1 + b1) w2 + b2 - y)^2), recorded for backward. */
static kiln_tensor *forward_loss(const kiln_params *p, const kiln_tensor *x, const kiln_tensor *y)
{
    kiln_tensor *xw, *z, *h, *hw, *pred, *loss;
    TRY(kiln_matmul(x, kiln_params_find(p, "w1"), &xw));
    TRY(kiln_add(xw, kiln_params_find(p, "b1"), &z));
    TRY(kiln_unary(KILN_UNARY_RELU, z, &h));
    TRY(kiln_matmul(h, kiln_params_find(p, "w2"), &hw));
    TRY(kiln_add(hw, kiln_params_find(p, "b2"), &pred));
    TRY(kiln_mse_loss(pred, y, &loss, NULL));
    kiln_tensor *tmp[] = {xw, z, h, hw, pred};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++)
        kiln_tensor_release(tmp[i]);
    return loss;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    options o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) {
        MPI_Finalize();
        return rc;
    }
    kiln_device *dev = pick_device(&o);
    printf("rank %d of %d: device %s (%s)\n", rank, nranks, kiln_device_spec(dev),
           kiln_device_name(dev));
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);

    float *x = malloc(sizeof(float) * (size_t)o.samples * NFEAT);
    float *y = malloc(sizeof(float) * (size_t)o.samples);
    if (!x || !y)
        check(KILN_ERR_OUT_OF_MEMORY, "malloc");
    make_data(o.samples, o.seed, x, y);

    /* Every rank starts from rank 0's weights (here they are equal anyway: one seed). */
    kiln_params *p = make_model(dev, &o);
    TRY(kiln_mpi_broadcast_params(MPI_COMM_WORLD, p, 0));

    int shard = o.batch / nranks, nbatch = o.samples / o.batch, np = kiln_params_count(p);
    int64_t xs[2] = {shard, NFEAT}, ys[2] = {shard, 1};
    kiln_tensor *xb, *yb, **vel = calloc((size_t)np, sizeof *vel);
    TRY(kiln_tensor_empty(dev, KILN_F32, 2, xs, &xb));
    TRY(kiln_tensor_empty(dev, KILN_F32, 2, ys, &yb));
    for (int i = 0; i < np; i++) {
        const kiln_tensor *t = kiln_params_tensor(p, i);
        TRY(kiln_tensor_zeros(dev, KILN_F32, kiln_tensor_ndim(t), kiln_tensor_shape(t), &vel[i]));
    }
    for (int epoch = 1; epoch <= o.epochs; epoch++) {
        double sum = 0;
        for (int b = 0; b < nbatch; b++) {
            size_t row = (size_t)b * o.batch + (size_t)rank * shard; /* this rank's shard */
            TRY(kiln_tensor_write(xb, x + row * NFEAT, sizeof(float) * shard * NFEAT));
            TRY(kiln_tensor_write(yb, y + row, sizeof(float) * shard));
            kiln_tensor *loss = forward_loss(p, xb, yb);
            TRY(kiln_backward(loss, NULL, 0));
            TRY(kiln_mpi_average_grads(MPI_COMM_WORLD, p));
            for (int i = 0; i < np; i++) {
                kiln_tensor *t = kiln_params_tensor(p, i);
                TRY(kiln_sgd_step(t, kiln_tensor_grad(t), vel[i], o.lr, 0.9, 0.0));
                TRY(kiln_tensor_zero_grad(t));
            }
            /* The loss of the whole batch: the mean of the shards' losses. */
            TRY(kiln_mpi_allreduce(MPI_COMM_WORLD, &loss, 1, KILN_MPI_MEAN));
            float l;
            TRY(kiln_tensor_read(loss, &l, sizeof l));
            kiln_tensor_release(loss);
            sum += l;
        }
        if (rank == 0)
            printf("epoch %3d  loss %.7f\n", epoch, sum / nbatch);
    }
    if (rank == 0) {
        double check_sum = 0;
        for (int i = 0; i < np; i++) {
            kiln_tensor *t = kiln_params_tensor(p, i);
            size_t n = (size_t)kiln_tensor_numel(t);
            float *v = malloc(sizeof(float) * n);
            if (!v)
                check(KILN_ERR_OUT_OF_MEMORY, "malloc");
            TRY(kiln_tensor_read(t, v, sizeof(float) * n));
            for (size_t k = 0; k < n; k++)
                check_sum += fabs((double)v[k]);
            free(v);
        }
        printf("final parameters: sum of |p| %.7f\n", check_sum);
        if (o.save) {
            TRY(kiln_params_save(p, o.save));
            printf("saved %s\n", o.save);
        }
    }
    for (int i = 0; i < np; i++)
        kiln_tensor_release(vel[i]);
    free(vel);
    kiln_tensor_release(xb);
    kiln_tensor_release(yb);
    kiln_params_free(p);
    free(x);
    free(y);
    MPI_Finalize();
    return 0;
}
