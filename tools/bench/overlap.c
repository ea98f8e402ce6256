/* overlap.c - kiln-bench overlap: an upload from pinned memory on a copy queue beside compute on
 * the default queue (issue 26), each part's device time taken with events, and a loader's epoch
 * with and without kiln_loader_pin_memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct overlap {
    bench_ctx *ctx;
    kiln_queue *copy;
    kiln_tensor *pinned, *dst; /* the upload: pinned host memory -> a device tensor */
    kiln_tensor *a, *b, *c;    /* the compute: chain matmuls c = a b */
    int chain;
    kiln_status status;
} overlap;

static void keep(overlap *o, kiln_status s)
{
    if (s != KILN_OK && o->status == KILN_OK)
        o->status = s;
}

static void upload(overlap *o, kiln_queue *q)
{
    keep(o, kiln_queue_set_current(o->ctx->dev, q));
    keep(o, kiln_tensor_copy_async(o->dst, o->pinned));
    keep(o, kiln_queue_set_current(o->ctx->dev, NULL));
}

static void compute(overlap *o)
{
    for (int i = 0; i < o->chain; i++)
        keep(o, kiln_matmul_out(o->a, o->b, o->c));
}

/* Device milliseconds of what `part` enqueues on queue q (NULL: the default queue), from events
 * recorded around it; *wall the host's milliseconds until it is done. */
static double device_ms(overlap *o, kiln_queue *q, void (*part)(overlap *, kiln_queue *),
                        double *wall)
{
    kiln_event *start = NULL, *end = NULL;
    double ms = 0, t0 = bench_now();
    keep(o, kiln_event_record(o->ctx->dev, q, &start));
    part(o, q);
    keep(o, kiln_event_record(o->ctx->dev, q, &end));
    keep(o, kiln_event_wait(end));
    *wall = (bench_now() - t0) * 1e3;
    if (start && end)
        keep(o, kiln_event_elapsed_ms(start, end, &ms));
    kiln_event_release(start);
    kiln_event_release(end);
    return ms;
}

static void compute_part(overlap *o, kiln_queue *q)
{
    (void)q;
    compute(o);
}

/* Wall milliseconds of the upload and the compute: on one queue, or the upload on the copy
 * queue beside the compute. */
static double both_ms(overlap *o, bool overlapped)
{
    double t0 = bench_now();
    upload(o, overlapped ? o->copy : NULL);
    compute(o);
    keep(o, kiln_device_synchronize(o->ctx->dev));
    return (bench_now() - t0) * 1e3;
}

static void report(bench_ctx *ctx, const char *name, const char *baseline, double *k, double *b)
{
    bench_result r;
    bench_result_set(&r, name, "ms", false, baseline, k, b, ctx->repeats);
    bench_report(ctx, &r);
}

static int measure_overlap(bench_ctx *ctx, size_t up_bytes, int64_t n, int chain)
{
    overlap o = {.ctx = ctx, .chain = chain};
    int64_t up[1] = {(int64_t)(up_bytes / sizeof(float))}, sq[2] = {n, n};
    kiln_status s = kiln_queue_create(ctx->dev, &o.copy);
    if (s == KILN_OK)
        s = kiln_tensor_empty_pinned(ctx->dev, KILN_F32, 1, up, &o.pinned);
    if (s == KILN_OK)
        s = kiln_tensor_zeros(ctx->dev, KILN_F32, 1, up, &o.dst);
    if (s == KILN_OK)
        s = kiln_rand_uniform(ctx->dev, KILN_F32, 2, sq, 1, -1, 1, &o.a);
    if (s == KILN_OK)
        s = kiln_rand_uniform(ctx->dev, KILN_F32, 2, sq, 2, -1, 1, &o.b);
    if (s == KILN_OK)
        s = kiln_tensor_empty(ctx->dev, KILN_F32, 2, sq, &o.c);
    void *host = NULL;
    if (s == KILN_OK)
        s = kiln_tensor_map(o.pinned, KILN_MAP_WRITE, &host);
    if (s == KILN_OK) {
        memset(host, 0x3c, up_bytes);
        s = kiln_tensor_unmap(o.pinned);
    }
    int rc = s == KILN_OK ? 0 : bench_fail("overlap setup", s);
    int r = ctx->repeats;
    double *v = calloc((size_t)r * 6, sizeof *v);
    if (!rc && !v)
        rc = bench_fail("calloc", KILN_ERR_OUT_OF_MEMORY);
    if (!rc) {
        double *up_dev = v, *up_wall = v + r, *mm_dev = v + 2 * r, *mm_wall = v + 3 * r;
        double *serial = v + 4 * r, *over = v + 5 * r;
        both_ms(&o, false); /* warm up: kernels built, buffers touched */
        both_ms(&o, true);
        for (int i = 0; i < r; i++) { /* interleaved */
            up_dev[i] = device_ms(&o, o.copy, upload, &up_wall[i]);
            mm_dev[i] = device_ms(&o, NULL, compute_part, &mm_wall[i]);
            serial[i] = both_ms(&o, false);
            over[i] = both_ms(&o, true);
        }
        if (o.status != KILN_OK) {
            rc = bench_fail("overlap", o.status);
        } else {
            char name[96];
            snprintf(name, sizeof name, "upload %zu MiB, device time", up_bytes >> 20);
            report(ctx, name, "wall clock", up_dev, up_wall);
            snprintf(name, sizeof name, "%d matmuls n=%lld, device time", chain, (long long)n);
            report(ctx, name, "wall clock", mm_dev, mm_wall);
            report(ctx, "upload + matmuls, copy queue", "one queue", over, serial);
            double u = bench_median(up_dev, r, NULL, NULL), m = bench_median(mm_dev, r, NULL, NULL);
            bench_note(ctx,
                       "device times from kiln_event_elapsed_ms; upload + matmuls on two queues "
                       "can at best take max(upload, matmuls): %.2fx of one queue's time",
                       (u + m) / (u > m ? u : m));
        }
    }
    free(v);
    kiln_tensor_release(o.pinned);
    kiln_tensor_release(o.dst);
    kiln_tensor_release(o.a);
    kiln_tensor_release(o.b);
    kiln_tensor_release(o.c);
    kiln_queue_release(o.copy);
    return rc;
}

/* One epoch of a loader over [samples, features] f32, each step c = x w, relu, sum, item. */
static double epoch_ms(kiln_loader *l, kiln_tensor *w, kiln_status *status)
{
    double t0 = bench_now();
    for (kiln_tensor *x; *status == KILN_OK;) {
        x = NULL;
        kiln_scope *scope = NULL;
        kiln_status s = kiln_scope_begin(&scope);
        if (s == KILN_OK)
            s = kiln_loader_next(l, &x, NULL);
        if (s == KILN_OK && x) {
            kiln_tensor *h = NULL, *r = NULL, *sum = NULL;
            double v;
            s = kiln_matmul(x, w, &h);
            if (s == KILN_OK)
                s = kiln_unary(KILN_UNARY_RELU, h, &r);
            if (s == KILN_OK)
                s = kiln_reduce(KILN_REDUCE_SUM, r, KILN_ALL_AXES, false, &sum);
            if (s == KILN_OK)
                s = kiln_tensor_item(sum, &v);
        }
        kiln_scope_end(scope);
        *status = s;
        if (!x)
            break;
    }
    return (bench_now() - t0) * 1e3;
}

static int measure_loader(bench_ctx *ctx, int64_t samples, int64_t features, int64_t batch,
                          int64_t hidden)
{
    float *data = malloc((size_t)(samples * features) * sizeof *data);
    if (!data)
        return bench_fail("malloc", KILN_ERR_OUT_OF_MEMORY);
    for (int64_t i = 0; i < samples * features; i++)
        data[i] = (float)(i % 97) / 97.0f;
    int64_t shape[2] = {samples, features}, ws[2] = {features, hidden};
    kiln_dataset *d = NULL;
    kiln_loader *plain = NULL, *pinned = NULL;
    kiln_tensor *w = NULL;
    kiln_status s = kiln_dataset_create(data, KILN_F32, 2, shape, NULL, KILN_F32, 0, NULL, &d);
    free(data);
    if (s == KILN_OK)
        s = kiln_loader_create(d, ctx->dev, batch, true, false, 1, &plain);
    if (s == KILN_OK)
        s = kiln_loader_create(d, ctx->dev, batch, true, false, 1, &pinned);
    if (s == KILN_OK)
        s = kiln_loader_pin_memory(pinned, true);
    if (s == KILN_OK)
        s = kiln_rand_uniform(ctx->dev, KILN_F32, 2, ws, 3, -0.1, 0.1, &w);
    int r = ctx->repeats, rc = 0;
    double *k = calloc((size_t)r * 2, sizeof *k);
    if (s == KILN_OK && k) {
        epoch_ms(plain, w, &s); /* warm up */
        epoch_ms(pinned, w, &s);
        for (int i = 0; i < r && s == KILN_OK; i++) {
            k[i] = epoch_ms(pinned, w, &s);
            k[r + i] = epoch_ms(plain, w, &s);
        }
    }
    if (s != KILN_OK || !k) {
        rc = bench_fail("loader epoch", s != KILN_OK ? s : KILN_ERR_OUT_OF_MEMORY);
    } else {
        char name[96];
        snprintf(name, sizeof name, "loader epoch %lldx%lld, batch %lld, pinned",
                 (long long)samples, (long long)features, (long long)batch);
        report(ctx, name, "without pin_memory", k, k + r);
    }
    free(k);
    kiln_tensor_release(w);
    kiln_loader_free(plain);
    kiln_loader_free(pinned);
    kiln_dataset_free(d);
    return rc;
}

int bench_overlap(bench_ctx *ctx)
{
    if (ctx->quick)
        return measure_overlap(ctx, (size_t)8 << 20, 256, 4) ||
               measure_loader(ctx, 1024, 256, 128, 128);
    return measure_overlap(ctx, (size_t)64 << 20, 512, 8) ||
           measure_loader(ctx, 8192, 1024, 512, 512);
}
