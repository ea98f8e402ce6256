/* classifier.h - the model and training step of examples/classify.c for kiln-bench:
 * Sequential(Linear(2, 64), ReLU, Linear(64, 3)), cross-entropy against i32 labels, Adam
 * (lr 0.01), a scope per step, the loss read each step; its data, 3000 points on three
 * interleaved spirals. Used by `train` (the classifier step) and `startup` (a first epoch). */
#ifndef KILN_BENCH_CLASSIFIER_H
#define KILN_BENCH_CLASSIFIER_H

#include <stdint.h>

#include "kiln.h"

#define CLASSIFIER_POINTS 3000
#define CLASSIFIER_BATCH 64

typedef struct classifier {
    kiln_device *dev;
    kiln_module *model;
    kiln_params *params;
    kiln_optimizer *opt;
    float x[2 * CLASSIFIER_POINTS];
    int32_t y[CLASSIFIER_POINTS];
} classifier;

/* The model on dev and the data; on failure everything made is freed. */
kiln_status classifier_init(classifier *c, kiln_device *dev);
void classifier_free(classifier *c);

/* One training step on batch b (points b * 64 ...; b modulo the batches of an epoch), uploaded
 * from the host as classify.c does; *loss the loss read back. */
kiln_status classifier_step(classifier *c, int b, double *loss);

/* classify.c's epoch: every batch once, then the accuracy over all points (argmax). */
kiln_status classifier_epoch(classifier *c, double *mean_loss, double *accuracy);

#endif
