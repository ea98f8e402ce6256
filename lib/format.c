/* format.c - a tensor's values on the host: kiln_tensor_item (one scalar) and PyTorch-like text
 * (kiln_tensor_format, kiln_tensor_print). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "dtype.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

/* More elements than this are summarised: the first and last EDGE along each dimension. */
#define SUMMARY_OVER 1000
#define EDGE 3

static kiln_status item(const kiln_tensor *t, const char *op, kiln__host_value *v)
{
    kiln_status s = kiln__check_unmapped(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    if (t->numel != 1) {
        char sh[160];
        kiln__shape_str(sh, sizeof sh, t->ndim, t->shape);
        return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                           "%s: the tensor has shape %s (%" PRId64 " elements); an item needs "
                           "exactly one",
                           op, sh, t->numel);
    }
    unsigned char buf[16];
    /* a bad label or index a kernel met is reported under this call's name */
    s = kiln__tensor_read_as(t, buf, t->nbytes, op);
    if (s == KILN_OK)
        *v = kiln__dtype_load(t->dtype, buf, 0);
    return s;
}

kiln_status kiln_tensor_item(const kiln_tensor *t, double *value)
{
    const char *op = "kiln_tensor_item";
    if (!value)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: value is NULL", op);
    *value = 0;
    kiln__host_value v;
    kiln_status s = item(t, op, &v);
    if (s == KILN_OK)
        *value = v.f;
    return s;
}

kiln_status kiln_tensor_item_i64(const kiln_tensor *t, int64_t *value)
{
    const char *op = "kiln_tensor_item_i64";
    if (!value)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: value is NULL", op);
    *value = 0;
    kiln__host_value v;
    kiln_status s = item(t, op, &v);
    if (s == KILN_OK && v.floating)
        return kiln__error(KILN_ERR_DTYPE_MISMATCH,
                           "%s: the tensor is %s; use kiln_tensor_item for floating dtypes", op,
                           kiln_dtype_name(t->dtype));
    if (s == KILN_OK)
        *value = v.i;
    return s;
}

/* Text built into a caller's buffer, counting what did not fit (snprintf's rule). */
typedef struct text {
    char *buf;
    size_t size, len;
} text;

static void put(text *o, const char *fmt, ...) KILN__PRINTF(2, 3);
static void put(text *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->size ? o->size - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

/* How the elements are written: integers exactly, floats fixed ("%.4f") when every finite
 * value is moderate, else scientific; all right-aligned to one width. */
typedef struct style {
    bool floating, sci;
    int width;
} style;

static int element_text(char *s, size_t n, const style *st, kiln__host_value v)
{
    if (!st->floating)
        return snprintf(s, n, "%" PRId64, v.i);
    if (isnan(v.f))
        return snprintf(s, n, "nan");
    if (isinf(v.f))
        return snprintf(s, n, v.f > 0 ? "inf" : "-inf");
    return snprintf(s, n, st->sci ? "%.4e" : "%.4f", v.f);
}

typedef struct walk {
    const kiln_tensor *t;
    const void *host;
    style st;
    bool summarise;
    int64_t strides[KILN_MAX_DIMS];
} walk;

static void put_element(text *o, const walk *w, int64_t i)
{
    char s[64];
    element_text(s, sizeof s, &w->st, kiln__dtype_load(w->t->dtype, w->host, i));
    put(o, "%*s", w->st.width, s);
}

/* Dimension d of the block at element offset base, indented by `indent` columns. */
static void put_dim(text *o, const walk *w, int d, int64_t base, int indent)
{
    const kiln_tensor *t = w->t;
    int64_t n = t->shape[d];
    put(o, "[");
    for (int64_t j = 0; j < n; j++) {
        if (w->summarise && n > 2 * (int64_t)EDGE && j == EDGE) {
            if (d == t->ndim - 1)
                put(o, "..., ");
            else
                put(o, "...,\n%*s", indent + 1, "");
            j = n - EDGE - 1;
            continue;
        }
        if (d == t->ndim - 1)
            put_element(o, w, base + j);
        else
            put_dim(o, w, d + 1, base + j * w->strides[d], indent + 1);
        if (j + 1 < n) {
            if (d == t->ndim - 1)
                put(o, ", ");
            else /* a blank line between blocks of 3-D and higher, as PyTorch prints */
                put(o, ",%s\n%*s", d < t->ndim - 2 ? "\n" : "", indent + 1, "");
        }
    }
    put(o, "]");
}

/* Pick the style from every element (summarised or not, all are looked at: simple and rare). */
static style pick_style(const kiln_tensor *t, const void *host)
{
    style st = {kiln__dtype_is_float(t->dtype), false, 1};
    for (int64_t i = 0; st.floating && i < t->numel; i++) {
        double a = fabs(kiln__dtype_load(t->dtype, host, i).f);
        if (isfinite(a) && a != 0 && (a >= 1e8 || a < 1e-4))
            st.sci = true;
    }
    for (int64_t i = 0; i < t->numel; i++) {
        char s[64];
        int n = element_text(s, sizeof s, &st, kiln__dtype_load(t->dtype, host, i));
        if (n > st.width)
            st.width = n;
    }
    return st;
}

kiln_status kiln_tensor_format(const kiln_tensor *t, char *buf, size_t size, size_t *length)
{
    const char *op = "kiln_tensor_format";
    if (length)
        *length = 0;
    if (!buf && size > 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: buf is NULL but size is %zu", op, size);
    if (size > 0)
        buf[0] = '\0';
    kiln_status s = kiln__check_unmapped(t, op, "tensor"); /* a pinned host tensor prints too */
    if (s != KILN_OK)
        return s;
    void *host = kiln__malloc(t->nbytes ? t->nbytes : 1);
    if (!host)
        return kiln__host_oom(op);
    s = kiln_tensor_read(t, host, t->nbytes);
    if (s != KILN_OK) {
        free(host);
        return s;
    }
    walk w = {.t = t, .host = host, .summarise = t->numel > SUMMARY_OVER};
    w.st = pick_style(t, host);
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        w.strides[d] = stride;
        stride *= t->shape[d];
    }
    text o = {buf, size, 0};
    put(&o, "tensor(");
    if (t->numel == 0)
        put(&o, "[]");
    else if (t->ndim == 0) /* a 0-d tensor: the value alone, as PyTorch prints it */
        put_element(&o, &w, 0);
    else
        put_dim(&o, &w, 0, 0, (int)strlen("tensor("));
    char sh[160];
    kiln__shape_str(sh, sizeof sh, t->ndim, t->shape);
    put(&o, ", shape=%s, dtype=%s, device=%s)", sh, kiln_dtype_name(t->dtype), t->dev->info.spec);
    free(host);
    if (length)
        *length = o.len;
    return KILN_OK;
}

kiln_status kiln_tensor_print(const kiln_tensor *t)
{
    size_t len;
    kiln_status s = kiln_tensor_format(t, NULL, 0, &len);
    if (s != KILN_OK)
        return s;
    char *text_buf = kiln__malloc(len + 1);
    if (!text_buf)
        return kiln__host_oom("kiln_tensor_print");
    s = kiln_tensor_format(t, text_buf, len + 1, NULL);
    if (s == KILN_OK)
        printf("%s\n", text_buf);
    free(text_buf);
    return s;
}
