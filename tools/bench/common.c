/* common.c - kiln-bench timing, statistics and output. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define MAX_RESULTS 512
#define MAX_NOTES 32

static bench_result results[MAX_RESULTS];
static int nresults;
static char notes[MAX_NOTES][256];
static int nnotes;

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bench_blas_settle(void)
{
    struct timespec t = {0, 200 * 1000 * 1000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n, double *min, double *max)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    if (min)
        *min = v[0];
    if (max)
        *max = v[n - 1];
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bench_result_set(bench_result *r, const char *name, const char *unit, bool higher_is_better,
                      const char *baseline, double *kiln, double *base, int samples)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->unit = unit;
    r->higher_is_better = higher_is_better;
    snprintf(r->baseline, sizeof r->baseline, "%s", baseline ? baseline : "");
    r->samples = samples;
    r->kiln = bench_median(kiln, samples, &r->min, &r->max);
    r->baseline_value = base ? bench_median(base, samples, NULL, NULL) : 0;
}

static double ratio(const bench_result *r)
{
    if (r->baseline_value <= 0 || r->kiln <= 0)
        return 0;
    return r->higher_is_better ? r->kiln / r->baseline_value : r->baseline_value / r->kiln;
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

void bench_report(bench_ctx *ctx, const bench_result *r)
{
    if (nresults < MAX_RESULTS)
        results[nresults++] = *r;
    if (ctx->json)
        return;
    static bool header;
    if (!header) {
        printf("%-36s %12s %12s %8s  %-8s %s\n", "measurement", "kiln", "baseline", "ratio", "unit",
               "baseline is");
        header = true;
    }
    if (r->baseline_value > 0)
        printf("%-36s %12.4g %12.4g %8.3f  %-8s %s\n", r->name, r->kiln, r->baseline_value,
               ratio(r), r->unit, r->baseline);
    else
        printf("%-36s %12.4g %12s %8s  %-8s\n", r->name, r->kiln, "-", "-", r->unit);
    fflush(stdout);
}

void bench_progress(bench_ctx *ctx, const char *fmt, ...)
{
    if (ctx->json)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "... ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

void bench_note(bench_ctx *ctx, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (nnotes < MAX_NOTES)
        snprintf(notes[nnotes++], sizeof notes[0], "%s", buf);
    if (!ctx->json)
        printf("note: %s\n", buf);
}

int bench_fail(const char *what, kiln_status s)
{
    fprintf(stderr, "kiln-bench: %s failed: %s: %s\n", what, kiln_status_string(s),
            kiln_last_error());
    return 1;
}

/* The JSON document: {"device": {...}, "results": [...], "notes": [...]}. */
void bench_print_json(bench_ctx *ctx);
void bench_print_json(bench_ctx *ctx)
{
    kiln_device_info info;
    if (kiln_device_info_get(ctx->dev, &info) != KILN_OK)
        memset(&info, 0, sizeof info);
    printf("{\"kiln_version\": ");
    json_string(kiln_version());
    printf(", \"device\": {\"spec\": ");
    json_string(info.spec);
    printf(", \"name\": ");
    json_string(info.name);
    printf(", \"vendor\": ");
    json_string(info.vendor);
    printf(", \"platform\": ");
    json_string(info.platform);
    printf(", \"driver_version\": ");
    json_string(info.driver_version);
    printf(", \"compute_units\": %u, \"unified_memory\": %s},\n \"results\": [", info.compute_units,
           info.unified_memory ? "true" : "false");
    for (int i = 0; i < nresults; i++) {
        const bench_result *r = &results[i];
        printf("%s\n  {\"name\": ", i ? "," : "");
        json_string(r->name);
        printf(", \"unit\": ");
        json_string(r->unit);
        printf(", \"kiln\": %.6g, \"baseline\": ", r->kiln);
        if (r->baseline[0])
            json_string(r->baseline);
        else
            printf("null");
        printf(", \"baseline_value\": %.6g, \"ratio\": %.6g, \"higher_is_better\": %s, "
               "\"samples\": %d, \"min\": %.6g, \"max\": %.6g}",
               r->baseline_value, ratio(r), r->higher_is_better ? "true" : "false", r->samples,
               r->min, r->max);
    }
    printf("],\n \"notes\": [");
    for (int i = 0; i < nnotes; i++) {
        printf("%s", i ? ", " : "");
        json_string(notes[i]);
    }
    printf("]}\n");
}
