/* ref.c - the reference spec grammar and resolution (see ref.h). */
#include "ref.h"

#include <string.h>

#define REF_MAX_LEN 64
#define REF_MAX_INDEX 1000000L

/* Read 1+ digits at *p (value capped above REF_MAX_INDEX); -1 if none or too large. */
static long digits(const char **p)
{
    const char *s = *p;
    long v = 0;
    if (!(*s >= '0' && *s <= '9'))
        return -1;
    for (; *s >= '0' && *s <= '9'; s++)
        if (v <= REF_MAX_INDEX)
            v = v * 10 + (*s - '0');
    *p = s;
    return v > REF_MAX_INDEX ? -1 : v;
}

ref_spec ref_parse(const char *s)
{
    ref_spec r = {REF_INVALID, KILN_DEVICE_ALL, 0, 0};
    size_t len = strlen(s);
    if (len == 0 || len > REF_MAX_LEN)
        return r;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
            return r;
    if (strcmp(s, "auto") == 0) {
        r.kind = REF_AUTO;
        return r;
    }
    static const struct {
        const char *prefix; /* the word and its colon */
        ref_kind kind;
        kiln_device_type type;
    } words[] = {{"cpu", REF_TYPE, KILN_DEVICE_CPU},
                 {"gpu", REF_TYPE, KILN_DEVICE_GPU},
                 {"accelerator", REF_TYPE, KILN_DEVICE_ACCELERATOR},
                 {"cuda", REF_CUDA, KILN_DEVICE_GPU}};
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        size_t wl = strlen(words[w].prefix);
        if (strncmp(s, words[w].prefix, wl) != 0 || (s[wl] != '\0' && s[wl] != ':'))
            continue;
        ref_spec ok = {words[w].kind, words[w].type, 0, 0};
        if (s[wl] == '\0')
            return ok;
        const char *p = s + wl + 1;
        ok.a = digits(&p);
        return ok.a >= 0 && *p == '\0' ? ok : r;
    }
    if (strncmp(s, "opencl:", 7) == 0) {
        const char *p = s + 7;
        long a = digits(&p);
        if (a < 0 || *p++ != ':')
            return r;
        long b = digits(&p);
        if (b < 0 || *p != '\0')
            return r;
        r.kind = REF_OPENCL;
        r.a = a;
        r.b = b;
    }
    return r;
}

int ref_find(const ref_spec *r, const kiln__devdesc *d, int n)
{
    switch (r->kind) {
    case REF_AUTO: {
        static const kiln_device_type order[] = {KILN_DEVICE_GPU, KILN_DEVICE_CPU,
                                                 KILN_DEVICE_ACCELERATOR};
        for (int t = 0; t < 3; t++) {
            ref_spec first = {REF_TYPE, order[t], 0, 0};
            int i = ref_find(&first, d, n);
            if (i >= 0)
                return i;
        }
        return -1;
    }
    case REF_TYPE:
        for (int i = 0; i < n; i++)
            if (d[i].visible && d[i].type == r->type && d[i].type_index == r->a)
                return i;
        return -1;
    case REF_CUDA: {
        /* The NVIDIA GPUs among the visible GPUs, in gpu:N order; take the a-th. */
        int best = -1;
        long k = 0;
        for (int idx = 0; idx < n; idx++) {
            for (int i = 0; i < n; i++) {
                if (d[i].visible && d[i].type == KILN_DEVICE_GPU && d[i].type_index == idx &&
                    d[i].nvidia) {
                    if (k++ == r->a)
                        best = i;
                }
            }
        }
        return best;
    }
    case REF_OPENCL:
        for (int i = 0; i < n; i++)
            if (d[i].visible && d[i].platform_index == r->a && d[i].device_index == r->b)
                return i;
        return -1;
    default:
        return -1;
    }
}

int ref_canonical(const char *s)
{
    static const char *const types[] = {"cpu:", "gpu:", "accelerator:"};
    for (int t = 0; t < 3; t++) {
        size_t tl = strlen(types[t]);
        if (strncmp(s, types[t], tl) != 0)
            continue;
        const char *p = s + tl;
        if (*p == '0')
            return p[1] == '\0';
        if (!(*p >= '1' && *p <= '9'))
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
        return *p == '\0' && strlen(s + tl) <= 7;
    }
    return 0;
}
