/* optim.h - what schedule.c uses of the optimizers (lib/nn/optim.c): a hook by which a learning
 * rate scheduler restores a loaded state before the optimizer's next step, and is told when the
 * optimizer goes. */
#ifndef KILN_NN_OPTIM_H
#define KILN_NN_OPTIM_H

#include <stdbool.h>

#include "kiln.h"

typedef struct kiln__opt_hook {
    kiln_status (*sync)(void *ctx, const char *op); /* before each kiln_optimizer_step */
    void (*detach)(void *ctx);                      /* kiln_optimizer_free */
    void *ctx;
} kiln__opt_hook;

/* Attach hook to opt (false when another is attached); NULL detaches. */
bool kiln__optimizer_attach(kiln_optimizer *opt, const kiln__opt_hook *hook);

/* The device of opt's first parameter (where a scheduler keeps its state tensor). */
kiln_device *kiln__optimizer_device(const kiln_optimizer *opt);

/* The number of opt's parameters, and the i-th parameter and its name (borrowed), for the
 * gradient scaler (scaler.c). */
int kiln__optimizer_count(const kiln_optimizer *opt);
kiln_tensor *kiln__optimizer_param(const kiln_optimizer *opt, int i, const char **name);

#endif
