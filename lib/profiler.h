/* profiler.h - kiln's profiler (kiln_profiler_*): a record of every kernel, copy, program build
 * and user range while it runs, with OpenCL event times from the devices; the table and the
 * Chrome trace made from them.
 *
 * It sees the OpenCL calls by putting its own functions into the kiln__cl table (clcall.h) while
 * it runs, so no enqueue site knows of it and profiling off costs nothing but the relaxed load of
 * kiln__profiling() where the layers above tell it what they do: launch.c the public op and the
 * kernel of a launch, fusion.c the chain it runs, backward.c and the optimizers the phase. */
#ifndef KILN_PROFILER_H
#define KILN_PROFILER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kiln_cl.h"

extern atomic_bool kiln__profiler_on;

/* Whether the profiler runs: the one check the code above makes before telling it anything. */
static inline bool kiln__profiling(void)
{
    return atomic_load_explicit(&kiln__profiler_on, memory_order_relaxed);
}

/* What this thread is launching, for the records of the enqueues it makes meanwhile: the public
 * op (static string), the kernel's name (copied), and when the launch began. Push before the
 * enqueue, pop after; they nest (a launch that evaluates a pending input launches first). */
typedef struct kiln__prof_launch {
    const char *op;
    char kernel[64];
    char label[96]; /* fusion.c's chain ("fused: mul(add(x0, x1), x2)"), else "" */
    uint64_t t0;
    struct kiln__prof_launch *outer;
} kiln__prof_launch;
void kiln__profiler_launch_push(kiln__prof_launch *l, const char *op, const char *kernel);
void kiln__profiler_launch_pop(kiln__prof_launch *l);

/* A kernel a library enqueued on q past the kiln__cl table (CLBlast), between t0 and now, ev
 * its event (the last kernel's: CLBlast's GEMM may run several), or NULL: recorded as the launch
 * of op running kernel. */
void kiln__profiler_enqueued(cl_command_queue q, cl_event ev, uint64_t t0, const char *op,
                             const char *kernel);

/* The name of the launches this thread makes until it is set again to NULL (fusion.c: the chain
 * it evaluates). label is copied. */
void kiln__profiler_label(const char *label);

/* The phase of the work this thread does: what the records say of the training step. Returns
 * the phase before, to be set back. */
enum { KILN__PHASE_NONE, KILN__PHASE_FORWARD, KILN__PHASE_BACKWARD, KILN__PHASE_OPTIMIZER };
int kiln__profiler_phase(int phase);

#endif
