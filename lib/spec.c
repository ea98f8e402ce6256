/* spec.c - device numbering, KILN_VISIBLE_DEVICES and spec-string parsing and resolution. */
#include "spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "status.h"

#define KILN__SPEC_MAX_LEN 64
#define KILN__SPEC_MAX_INDEX 1000000

kiln_device_type kiln__classify(cl_device_type t)
{
    if (t & CL_DEVICE_TYPE_GPU)
        return KILN_DEVICE_GPU;
    if (t & CL_DEVICE_TYPE_ACCELERATOR)
        return KILN_DEVICE_ACCELERATOR;
    return KILN_DEVICE_CPU;
}

const char *kiln__type_name(kiln_device_type t)
{
    switch (t) {
    case KILN_DEVICE_CPU:
        return "cpu";
    case KILN_DEVICE_GPU:
        return "gpu";
    case KILN_DEVICE_ACCELERATOR:
        return "accelerator";
    default:
        return "?";
    }
}

static int type_order(kiln_device_type t)
{
    return t == KILN_DEVICE_GPU ? 0 : t == KILN_DEVICE_ACCELERATOR ? 1 : 2;
}

static uint64_t speed(const kiln__devdesc *d)
{
    return (uint64_t)d->compute_units * d->clock_mhz;
}

/* Whether a comes before b in the listing: type, then (GPUs) speed, then enumeration order. */
static bool before(const kiln__devdesc *a, const kiln__devdesc *b)
{
    if (type_order(a->type) != type_order(b->type))
        return type_order(a->type) < type_order(b->type);
    if (a->type == KILN_DEVICE_GPU && speed(a) != speed(b))
        return speed(a) > speed(b);
    if (a->platform_index != b->platform_index)
        return a->platform_index < b->platform_index;
    return a->device_index < b->device_index;
}

void kiln__spec_number(kiln__devdesc *d, int n, bool keep_visible)
{
    for (int i = 0; i < n; i++) {
        if (!keep_visible)
            d[i].visible = d[i].usable;
        d[i].visible = d[i].visible && d[i].usable;
        d[i].type_index = -1;
        d[i].rank = -1;
    }
    /* n is small (devices in one machine): a quadratic count is the clearest sort. */
    for (int i = 0; i < n; i++) {
        if (!d[i].visible)
            continue;
        int rank = 0, tindex = 0;
        for (int j = 0; j < n; j++) {
            if (j == i || !d[j].visible || !before(&d[j], &d[i]))
                continue;
            rank++;
            if (d[j].type == d[i].type)
                tindex++;
        }
        d[i].rank = rank;
        d[i].type_index = tindex;
    }
}

void kiln__spec_format(const kiln__devdesc *d, char *buf, size_t size)
{
    snprintf(buf, size, "%s:%d", kiln__type_name(d->type), d->type_index);
}

void kiln__spec_list(const kiln__devdesc *d, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < n; i++) {
            if (d[i].rank != r)
                continue;
            char one[48];
            kiln__spec_format(&d[i], one, sizeof one);
            int w = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", one);
            if (w < 0 || (size_t)w >= size - used)
                return;
            used += (size_t)w;
        }
    }
    if (used == 0)
        snprintf(buf, size, "none");
}

/* Copy s into buf for a message: control and non-ASCII bytes as \xNN, cut after max input
 * bytes with "...", so a hostile spec never reaches a terminal or log raw. */
static const char *printable(const char *s, size_t max, char *buf, size_t size)
{
    size_t o = 0, i = 0;
    for (; s[i] && i < max && o + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\'')
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = '\0';
    if (s[i] && o + 4 < size)
        memcpy(buf + o, "...", 4);
    return buf;
}

typedef enum spec_kind { SPEC_AUTO, SPEC_TYPE, SPEC_CUDA, SPEC_OPENCL } spec_kind;

typedef struct parsed_spec {
    spec_kind kind;
    kiln_device_type type;
    int index;  /* SPEC_TYPE/SPEC_CUDA; P for SPEC_OPENCL */
    int device; /* D for SPEC_OPENCL */
} parsed_spec;

/* Parse a decimal index at *p; advances *p. Rejects signs, empty and over-large numbers. */
static kiln_status parse_index(const char *spec, const char **p, int *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "invalid device spec '%s': expected a device index (0, 1, ...) at "
                           "position %d",
                           spec, (int)(s - spec));
    long v = 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > KILN__SPEC_MAX_INDEX)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "invalid device spec '%s': device index too large", spec);
        s++;
    }
    *p = s;
    *out = (int)v;
    return KILN_OK;
}

static kiln_status parse_spec(const char *spec, parsed_spec *out)
{
    static const char usage[] =
        "use auto, cpu, cpu:N, gpu, gpu:N, cuda, cuda:N, accelerator:N or opencl:P:D";
    char shown[4 * KILN__SPEC_MAX_LEN + 8];
    size_t len = strnlen(spec, KILN__SPEC_MAX_LEN + 1);
    if (len == 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "empty device spec; %s", usage);
    if (len > KILN__SPEC_MAX_LEN)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "device spec '%s' too long (over %d characters); %s",
                           printable(spec, 24, shown, sizeof shown), KILN__SPEC_MAX_LEN, usage);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)spec[i];
        if (c <= ' ' || c >= 0x7f)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "invalid device spec '%s': unexpected %s 0x%02x at position %zu "
                               "(specs have no spaces); %s",
                               printable(spec, KILN__SPEC_MAX_LEN, shown, sizeof shown),
                               c == ' ' ? "space" : "character", c, i, usage);
    }
    if (strcmp(spec, "auto") == 0) {
        out->kind = SPEC_AUTO;
        return KILN_OK;
    }
    static const struct {
        const char *word;
        spec_kind kind;
        kiln_device_type type;
    } words[] = {
        {"cpu", SPEC_TYPE, KILN_DEVICE_CPU},
        {"gpu", SPEC_TYPE, KILN_DEVICE_GPU},
        {"accelerator", SPEC_TYPE, KILN_DEVICE_ACCELERATOR},
        {"cuda", SPEC_CUDA, KILN_DEVICE_GPU},
        {"opencl", SPEC_OPENCL, KILN_DEVICE_ALL},
    };
    const char *colon = strchr(spec, ':');
    size_t wlen = colon ? (size_t)(colon - spec) : len;
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        if (strlen(words[w].word) != wlen || strncmp(spec, words[w].word, wlen) != 0)
            continue;
        out->kind = words[w].kind;
        out->type = words[w].type;
        out->index = 0;
        out->device = 0;
        if (!colon) {
            if (out->kind == SPEC_OPENCL)
                return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                                   "invalid device spec '%s': expected opencl:P:D", spec);
            return KILN_OK;
        }
        const char *p = colon + 1;
        kiln_status s = parse_index(spec, &p, &out->index);
        if (s != KILN_OK)
            return s;
        if (out->kind == SPEC_OPENCL) {
            if (*p != ':')
                return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                                   "invalid device spec '%s': expected opencl:P:D", spec);
            p++;
            s = parse_index(spec, &p, &out->device);
            if (s != KILN_OK)
                return s;
        }
        if (*p != '\0')
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "invalid device spec '%s': unexpected '%s' at position %d; %s", spec,
                               p, (int)(p - spec), usage);
        return KILN_OK;
    }
    return kiln__error(KILN_ERR_INVALID_ARGUMENT, "unknown device spec '%s'%s; %s", spec,
                       strpbrk(spec, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") ? " (specs are lower-case)" : "",
                       usage);
}

/* Index of the visible device a parsed, non-auto spec names, or -1. */
static int find(const parsed_spec *ps, const kiln__devdesc *d, int n)
{
    if (ps->kind == SPEC_OPENCL) {
        for (int i = 0; i < n; i++)
            if (d[i].visible && d[i].platform_index == ps->index && d[i].device_index == ps->device)
                return i;
        return -1;
    }
    if (ps->kind == SPEC_CUDA) {
        /* cuda:N counts NVIDIA GPUs only, in GPU order. */
        int seen = 0;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < n; i++)
                if (d[i].visible && d[i].type == KILN_DEVICE_GPU && d[i].nvidia &&
                    d[i].type_index == t && seen++ == ps->index)
                    return i;
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (d[i].visible && d[i].type == ps->type && d[i].type_index == ps->index)
            return i;
    return -1;
}

static kiln_status no_such(const char *spec, const char *var, const kiln__devdesc *d, int n)
{
    char list[1024];
    kiln__spec_list(d, n, list, sizeof list);
    return kiln__error(KILN_ERR_NO_DEVICE, "%sno device '%s'; available: %s", var, spec, list);
}

static kiln_status resolve_one(const char *spec, const char *var, const kiln__devdesc *d, int n,
                               int *out)
{
    parsed_spec ps;
    kiln__log_hold(); /* the error is logged once, with var */
    kiln_status s = parse_spec(spec, &ps);
    if (s != KILN_OK && *var)
        kiln__error(s, "%s%s", var, kiln_last_error());
    kiln__log_release();
    if (s != KILN_OK)
        return s;
    if (ps.kind == SPEC_AUTO) {
        parsed_spec gpu = {SPEC_TYPE, KILN_DEVICE_GPU, 0, 0};
        parsed_spec cpu = {SPEC_TYPE, KILN_DEVICE_CPU, 0, 0};
        int i = find(&gpu, d, n);
        if (i < 0)
            i = find(&cpu, d, n);
        if (i < 0) {
            /* No GPU and no CPU: an accelerator is better than nothing. */
            parsed_spec acc = {SPEC_TYPE, KILN_DEVICE_ACCELERATOR, 0, 0};
            i = find(&acc, d, n);
        }
        if (i < 0)
            return no_such(spec, var, d, n);
        *out = i;
        return KILN_OK;
    }
    int i = find(&ps, d, n);
    if (i < 0) {
        if (ps.kind == SPEC_CUDA) {
            char list[1024];
            kiln__spec_list(d, n, list, sizeof list);
            return kiln__error(KILN_ERR_NO_DEVICE,
                               "%sno NVIDIA GPU for '%s' (cuda:N counts NVIDIA GPUs only; "
                               "use gpu:N for any GPU); available: %s",
                               var, spec, list);
        }
        return no_such(spec, var, d, n);
    }
    *out = i;
    return KILN_OK;
}

kiln_status kiln__spec_resolve(const char *spec, const kiln__devdesc *d, int n,
                               const char *env_device, int *out)
{
    if (!spec || !out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_device_get: spec and out must not be "
                                                      "NULL");
    if (strcmp(spec, "auto") == 0 && env_device && env_device[0] &&
        strcmp(env_device, "auto") != 0) {
        char var[5 * KILN__SPEC_MAX_LEN + 64], shown[4 * KILN__SPEC_MAX_LEN + 8];
        snprintf(var, sizeof var, "KILN_DEVICE='%s' (what auto means): ",
                 printable(env_device, KILN__SPEC_MAX_LEN, shown, sizeof shown));
        return resolve_one(env_device, var, d, n, out);
    }
    return resolve_one(spec, "", d, n, out);
}

kiln_status kiln__spec_apply_visible(const char *list, kiln__devdesc *d, int n)
{
    char shown[4 * 200 + 8];
    printable(list, 200, shown, sizeof shown);
    int *order = kiln__calloc((size_t)n + 1, sizeof *order);
    if (!order)
        return kiln__host_oom("KILN_VISIBLE_DEVICES");
    int count = 0;
    const char *p = list;
    kiln_status s = KILN_OK;
    while (*p) {
        /* Entries are specs separated by commas; spaces around an entry are allowed. */
        while (*p == ' ')
            p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && p[len - 1] == ' ')
            len--;
        char item[KILN__SPEC_MAX_LEN + 1];
        if (len == 0 || len > KILN__SPEC_MAX_LEN) {
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                            "KILN_VISIBLE_DEVICES='%s': empty or over-long entry at position %d; "
                            "use a comma-separated list such as gpu:1,cpu:0 (or unset it)",
                            shown, (int)(p - list));
            goto done;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        parsed_spec ps;
        kiln__log_hold(); /* the error is logged once, rewrapped */
        s = parse_spec(item, &ps);
        if (s == KILN_OK && ps.kind == SPEC_AUTO)
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "'auto' cannot be listed");
        if (s != KILN_OK)
            s = kiln__error(s, "KILN_VISIBLE_DEVICES='%s': %s", shown, kiln_last_error());
        kiln__log_release();
        if (s != KILN_OK)
            goto done;
        int i = find(&ps, d, n);
        if (i < 0) {
            char avail[1024];
            kiln__spec_list(d, n, avail, sizeof avail);
            s = kiln__error(KILN_ERR_NO_DEVICE,
                            "KILN_VISIBLE_DEVICES='%s': no device '%s'; "
                            "available: %s",
                            shown, item, avail);
            goto done;
        }
        bool dup = false;
        for (int k = 0; k < count; k++)
            dup = dup || order[k] == i;
        if (!dup)
            order[count++] = i;
        p = end ? end + 1 : p + strlen(p);
        if (end && *p == '\0') {
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                            "KILN_VISIBLE_DEVICES='%s': trailing comma; use a comma-separated "
                            "list such as gpu:1,cpu:0",
                            shown);
            goto done;
        }
    }
    /* Listed devices stay, renumbered per type in list order; rank follows type then list. */
    for (int i = 0; i < n; i++) {
        d[i].visible = false;
        d[i].type_index = -1;
        d[i].rank = -1;
    }
    int rank = 0;
    static const kiln_device_type types[] = {KILN_DEVICE_GPU, KILN_DEVICE_ACCELERATOR,
                                             KILN_DEVICE_CPU};
    for (int t = 0; t < 3; t++) {
        int tindex = 0;
        for (int k = 0; k < count; k++) {
            kiln__devdesc *dd = &d[order[k]];
            if (dd->type != types[t])
                continue;
            dd->visible = true;
            dd->type_index = tindex++;
            dd->rank = rank++;
        }
    }
done:
    free(order);
    return s;
}
