/* fusion.c - lazy elementwise fusion. An elementwise op, checked by its caller, returns a
 * pending tensor: a header and a storage without a buffer, whose `lazy` holds the op and its
 * (retained) inputs. When the value is needed (kiln__fusion_force, from every tensor check but
 * the elementwise ops' own) the pending tensors it reaches are generated into one OpenCL C
 * kernel, which reads the materialised leaves and writes only the result.
 *
 * The per-op expressions are elementwise.cl's own: the text between its @fusion-begin and
 * @fusion-end markers is copied once per dtype into the generated source (with that dtype's
 * defines, its helper functions renamed and every macro undefined after), and each op becomes a
 * small function over it, so fused and eager kernels compute each op with the same code. Every
 * value is rounded to its dtype's storage (f16, bf16) between ops, as the eager kernels store it.
 * The chain becomes one function, kiln_chain(i, leaves...), the value at flat index i: the
 * fused kernel stores it, and a reduction given a pending input calls it in its loads instead
 * (kiln__fusion_fold: reduce.cl's text after the chain, its KILN_LOAD defined as the call).
 *
 * One recursive lock serialises building, evaluating and dropping expressions; a kernel's text
 * is its key (kiln__generated_kernel keeps it per device, through the disk cache). Storage
 * `readers` counts the expressions that read a storage, so that a write into it (any forcing
 * check of a tensor on it) evaluates them first. */
#include "fusion.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clcall.h"
#include "dtype.h"
#include "launch.h"
#include "memory.h"
#include "ops/optables.h"
#include "profiler.h"
#include "program.h"
#include "queue.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

#define MAX_DEPTH 64  /* ops on the longest path of one kernel */
#define MAX_NODES 128 /* ops in one kernel (a tree count, so shared subtrees count twice) */

struct kiln__lazy {
    kiln__fkind kind;
    int op;
    kiln_dtype in_dtype;
    kiln__scalar scalar;
    int nin;
    kiln_tensor *in[3];
    int depth, nodes;
    kiln_tensor *self;
    struct kiln__lazy *prev, *next; /* every pending expression (flush_readers) */
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock;
static struct kiln__lazy *pending;
static atomic_int enabled = -1;
static atomic_long generated, reused, eager, folds;
static _Thread_local int deferred;
static atomic_int fold_on_cpu; /* test only: CPU devices evaluate first unless set */
static _Atomic int64_t index32_limit_read = -1; /* index32_limit's value; -1: not read yet */

static void init_lock(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&lock, &a);
    pthread_mutexattr_destroy(&a);
}

static void lock_all(void)
{
    pthread_once(&once, init_lock);
    pthread_mutex_lock(&lock);
}

bool kiln__fusion_enabled(void)
{
    int on = atomic_load(&enabled);
    if (on < 0) {
        const char *env = getenv("KILN_FUSION");
        on = !env || strcmp(env, "0") != 0; /* on unless KILN_FUSION=0 */
        atomic_store(&enabled, on);
    }
    return on != 0;
}

bool kiln__fusion_set(bool on)
{
    bool was = kiln__fusion_enabled();
    atomic_store(&enabled, on ? 1 : 0);
    return was;
}

void kiln__fusion_defer(bool on)
{
    deferred += on ? 1 : -1;
}

void kiln__fusion_counts(long *gen, long *hit, long *single)
{
    *gen = atomic_load(&generated);
    *hit = atomic_load(&reused);
    *single = atomic_load(&eager);
}

void kiln__fusion_index32_reread(void)
{
    atomic_store(&index32_limit_read, -1);
    kiln__fusion_forget(NULL); /* the kernels generated with the previous limit */
}

void kiln__fusion_fold_on_cpu(bool on)
{
    atomic_store(&fold_on_cpu, on ? 1 : 0);
}

long kiln__fusion_folds(void)
{
    return atomic_load(&folds);
}

static struct kiln__lazy *lazy_of(const kiln_tensor *t)
{
    return atomic_load(&((kiln_tensor *)t)->lazy);
}

/* ---- dropping an expression ----------------------------------------------------------- */

/* Unlink and free t's expression, releasing its inputs. Lock held. */
static void drop(kiln_tensor *t)
{
    struct kiln__lazy *z = lazy_of(t);
    if (!z)
        return;
    atomic_store(&t->lazy, NULL);
    if (z->prev)
        z->prev->next = z->next;
    else
        pending = z->next;
    if (z->next)
        z->next->prev = z->prev;
    for (int i = 0; i < z->nin; i++) {
        atomic_fetch_sub(&z->in[i]->storage->readers, 1);
        kiln__tensor_drop(z->in[i]); /* a reference fusion took: the scope's stays */
    }
    free(z);
}

void kiln__fusion_dead(kiln_tensor *t)
{
    if (!lazy_of(t))
        return;
    lock_all();
    drop(t);
    pthread_mutex_unlock(&lock);
}

/* tensor.c tells us (hooks, registered before the first pending tensor): a dead tensor's
 * expression goes; a tensor about to be used is evaluated, and its storage's pending readers. */
static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static void register_hooks(void)
{
    kiln__tensor_hooks_add(
        &(kiln__tensor_hooks){.dead = kiln__fusion_dead, .use = kiln__fusion_force});
}

/* ---- a string builder ------------------------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) KILN__PRINTF(2, 3);
static void sb_add(sbuf *b, const char *fmt, ...)
{
    for (int pass = 0; b && pass < 2 && !b->oom; pass++) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (m < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->n + (size_t)m < b->cap) {
            b->n += (size_t)m;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)m;
        char *p = kiln__realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void sb_addn(sbuf *b, const char *s, size_t n)
{
    sb_add(b, "%.*s", (int)n, s);
}

/* ---- the graph of one evaluation ------------------------------------------------------- */

enum { MAX_LEAVES = 3 * MAX_NODES };

typedef struct graph {
    kiln_tensor *root;
    int nn, nl;
    kiln_tensor *node[MAX_NODES];  /* pending tensors, inputs before users */
    kiln_tensor *leaf[MAX_LEAVES]; /* materialised inputs, each once */
    bool bcast[MAX_LEAVES];        /* leaf indexed by strides (numel differs from root's) */
    bool any_bcast;
    /* With any_bcast: the root's shape collapsed (size-1 dims dropped, neighbours merged where
     * every broadcast leaf steps through both as one), and each broadcast leaf's strides. */
    int cnd;
    int64_t cshape[KILN_MAX_DIMS];
    int64_t cstride[MAX_LEAVES][KILN_MAX_DIMS];
} graph;

static int index_of(kiln_tensor *const *v, int n, const kiln_tensor *t)
{
    for (int i = 0; i < n; i++)
        if (v[i] == t)
            return i;
    return -1;
}

static bool visit(graph *g, kiln_tensor *t)
{
    struct kiln__lazy *z = lazy_of(t);
    if (!z) {
        if (index_of(g->leaf, g->nl, t) >= 0)
            return true;
        if (g->nl == MAX_LEAVES)
            return false;
        g->bcast[g->nl] = t->numel != g->root->numel;
        g->any_bcast = g->any_bcast || g->bcast[g->nl];
        g->leaf[g->nl++] = t;
        return true;
    }
    if (index_of(g->node, g->nn, t) >= 0)
        return true;
    for (int i = 0; i < z->nin; i++)
        if (!visit(g, z->in[i]))
            return false;
    if (g->nn == MAX_NODES)
        return false;
    g->node[g->nn++] = t;
    return true;
}

/* g's collapsed broadcast shape (see graph). */
static void collapse(graph *g)
{
    const kiln_tensor *root = g->root;
    int R = root->ndim;
    int64_t st[MAX_LEAVES][KILN_MAX_DIMS];
    for (int k = 0; k < g->nl; k++) {
        const kiln_tensor *l = g->leaf[k];
        int64_t s = 1;
        for (int j = R - 1; j >= 0; j--) {
            int lj = j - (R - l->ndim);
            st[k][j] = lj < 0 || l->shape[lj] == 1 ? 0 : s;
            if (lj >= 0)
                s *= l->shape[lj];
        }
    }
    /* From the innermost dim out; collapsed dims are built innermost first, then reversed. */
    int c = 0;
    for (int j = R - 1; j >= 0; j--) {
        if (root->shape[j] == 1)
            continue;
        bool merge = c > 0;
        for (int k = 0; merge && k < g->nl; k++)
            merge = !g->bcast[k] || st[k][j] == g->cstride[k][c - 1] * g->cshape[c - 1];
        if (merge) {
            g->cshape[c - 1] *= root->shape[j];
            continue;
        }
        g->cshape[c] = root->shape[j];
        for (int k = 0; k < g->nl; k++)
            g->cstride[k][c] = st[k][j];
        c++;
    }
    for (int a = 0, b = c - 1; a < b; a++, b--) {
        int64_t t = g->cshape[a];
        g->cshape[a] = g->cshape[b];
        g->cshape[b] = t;
        for (int k = 0; k < g->nl; k++) {
            t = g->cstride[k][a];
            g->cstride[k][a] = g->cstride[k][b];
            g->cstride[k][b] = t;
        }
    }
    g->cnd = c;
}

/* The op's name in chains ("add", "relu'", "cast_i32"). */
static const char *op_name(const struct kiln__lazy *z, const kiln_tensor *t, char *buf, size_t n)
{
    switch (z->kind) {
    case KILN__F_BINARY:
    case KILN__F_SCALAR:
        return kiln__binary_name((kiln_binary_op)z->op);
    case KILN__F_UNARY:
        return kiln__unary_name((kiln_unary_op)z->op);
    case KILN__F_UNARY_BW:
        snprintf(buf, n, "%s'", kiln__unary_name((kiln_unary_op)z->op));
        return buf;
    case KILN__F_WHERE:
        return "where";
    case KILN__F_CAST:
        snprintf(buf, n, "cast_%s", kiln__dtype_name(t->dtype));
        return buf;
    }
    return "?";
}

/* The chain as an expression over its leaves, for logs and messages. */
static void chain_text(sbuf *b, const kiln_tensor *t, int depth)
{
    if (b->n > 300 || depth > 24) {
        sb_add(b, "...");
        return;
    }
    struct kiln__lazy *z = lazy_of(t);
    if (!z) {
        char shape[96];
        sb_add(b, "%s%s", kiln__dtype_name(t->dtype),
               kiln__shape_str(shape, sizeof shape, t->ndim, t->shape));
        return;
    }
    char name[32];
    sb_add(b, "%s(", op_name(z, t, name, sizeof name));
    for (int i = 0; i < z->nin; i++) {
        if (i)
            sb_add(b, ", ");
        chain_text(b, z->in[i], depth + 1);
    }
    if (z->kind == KILN__F_SCALAR) {
        char v[48];
        sb_add(b, ", %s", kiln__scalar_str(v, sizeof v, z->scalar));
    }
    sb_add(b, ")");
}

/* The chain's ops in the order they run ("add+mul+relu"): the profiler's name for it, the same
 * for every shape and dtype, as PyTorch's table groups. */
static void chain_ops(sbuf *b, const kiln_tensor *t, int depth)
{
    struct kiln__lazy *z = lazy_of(t);
    if (!z || b->n > 120 || depth > 24)
        return;
    for (int i = 0; i < z->nin; i++)
        chain_ops(b, z->in[i], depth + 1);
    char name[32];
    sb_add(b, "%s%s", b->n ? "+" : "", op_name(z, t, name, sizeof name));
}

/* ---- code generation ------------------------------------------------------------------- */

/* The marked regions of elementwise.cl (the op expressions), concatenated. */
static const char *op_text(size_t *len)
{
    static char *text;
    static size_t n;
    if (text) {
        *len = n;
        return text;
    }
    const kiln__kernel_source *ks = kiln__kernel_source_find("elementwise");
    const char *src = ks ? ks->text : NULL;
    sbuf b = {0};
    const char *begin = "/* @fusion-begin", *end = "/* @fusion-end */";
    for (const char *p = src ? strstr(src, begin) : NULL; p; p = strstr(p, begin)) {
        const char *e = strstr(p, end);
        if (!e)
            break;
        sb_addn(&b, p, (size_t)(e - p));
        p = e;
    }
    if (b.oom || !b.p) {
        free(b.p);
        return NULL;
    }
    text = b.p; /* kept for the process (lock held by every caller) */
    n = b.n;
    *len = n;
    return text;
}

/* For every "KILN_TC name(" function (functions) or every "#define NAME" of the op text:
 * rename ("#define name name_<suffix>", suffix set) or undefine it (suffix NULL). */
static void each_name(const char *text, size_t len, sbuf *b, bool functions, const char *suffix)
{
    const char *want = functions ? "\nKILN_TC " : "\n#define ";
    size_t wl = strlen(want);
    for (const char *p = text; (p = strstr(p, want)) && p < text + len; p += wl) {
        const char *q = p + wl;
        size_t m = strspn(q, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (m == 0 || (functions && q[m] != '('))
            continue;
        if (suffix)
            sb_add(b, "#define %.*s %.*s_%s\n", (int)m, q, (int)m, q, suffix);
        else
            sb_add(b, "#undef %.*s\n", (int)m, q);
    }
}

typedef struct wants {
    uint32_t binary, unary, unary_bw, cast;
} wants;

/* The -D options in defs ("-DNAME=value -DFLAG=1") as #define lines into b and, where undef is
 * given, the matching #undef lines into it. */
static void defines_text(sbuf *b, const char *defs, sbuf *undef)
{
    for (const char *tok = defs; *tok;) {
        size_t m = strcspn(tok, " ");
        if (m > 2 && strncmp(tok, "-D", 2) == 0) {
            size_t eq = strcspn(tok, "= ");
            sb_add(b, "#define %.*s", (int)(eq - 2), tok + 2);
            if (eq < m)
                sb_add(b, " %.*s", (int)(m - eq - 1), tok + eq + 1);
            sb_add(b, "\n");
            if (undef)
                sb_add(undef, "#undef %.*s\n", (int)(eq - 2), tok + 2);
        }
        tok += m;
        tok += strspn(tok, " ");
    }
}

static void dtype_block(sbuf *b, kiln_dtype d, const wants *w)
{
    size_t len;
    const char *text = op_text(&len);
    if (!text) {
        b->oom = true;
        return;
    }
    const char *dn = kiln__dtype_name(d);
    char defs[256] = "";
    kiln__elementwise_defines(defs, sizeof defs, d);
    sbuf undef = {0};
    sb_add(b, "/* ---- %s */\n", dn);
    defines_text(b, defs, &undef);
    each_name(text, len, b, true, dn);
    each_name(text, len, &undef, true, NULL);
    each_name(text, len, &undef, false, NULL);
    sb_addn(b, text, len);
    bool narrow = kiln__dtype_is_narrow(d);
    const char *open = kiln__dtype_is_half(d) ? "kiln_rh((float)("
                       : narrow               ? "kiln_rb((float)("
                                              : "(",
               *close = narrow ? "))" : ")";
    for (int op = 0; op < 32; op++) {
        const char *name = kiln__binary_name((kiln_binary_op)op);
        if (!(w->binary >> op & 1u) || !name)
            continue;
        if (kiln__binary_is_compare((kiln_binary_op)op))
            sb_add(b,
                   "uchar kf_%s_b_%s(KILN_TC x, KILN_TC y) { return (uchar)((OP_%s(x, y)) ? 1 : "
                   "0); }\n",
                   dn, name, name);
        else
            sb_add(b, "KILN_TC kf_%s_b_%s(KILN_TC x, KILN_TC y) { return %sOP_%s(x, y)%s; }\n", dn,
                   name, open, name, close);
    }
    for (int op = 0; op < 32; op++) {
        const char *name = kiln__unary_name((kiln_unary_op)op);
        if (name && (w->unary >> op & 1u))
            sb_add(b, "KILN_TC kf_%s_u_%s(KILN_TC x) { return %sU_%s(x)%s; }\n", dn, name, open,
                   name, close);
        if (name && (w->unary_bw >> op & 1u))
            sb_add(b, "KILN_TC kf_%s_ub_%s(KILN_TC x, KILN_TC g) { return %sUB_%s(x, g)%s; }\n", dn,
                   name, open, name, close);
    }
    for (int to = 0; to < KILN_DTYPE_COUNT; to++) {
        if (!(w->cast >> to & 1u))
            continue;
        kiln_dtype e = (kiln_dtype)to;
        const char *en = kiln__dtype_name(e), *cl = kiln__dtype_cl_type(e),
                   *clc = kiln__dtype_cl_compute_type(e);
        int fl = kiln__dtype_is_float(e) ? 1 : 0;
        const char *round = kiln__dtype_is_half(e) ? "kiln_rh" : "kiln_rb";
        if (kiln__dtype_is_narrow(e) && d == KILN_F64)
            /* f64 to f16 or bf16 in one rounding without vstore_half(double) into private
             * memory (Oclgrind loses track of it): round to float toward zero with a sticky
             * last bit (round to odd), then to 16 bits to nearest; as the eager kernel rounds. */
            sb_add(b,
                   "float kf_%s_c_%s(KILN_TC x) { float f = convert_float_rtz(x); if ((double)f "
                   "!= x && !isnan(x)) f = as_float(as_uint(f) | 1u); return %s(f); }\n",
                   dn, en, round);
        else if (kiln__dtype_is_narrow(e)) /* the value is a float here: one rounding */
            sb_add(b, "float kf_%s_c_%s(KILN_TC x) { return %s(CAST_VALUE_%d(%s, %s, x)); }\n", dn,
                   en, round, fl, cl, clc);
        else
            sb_add(b, "%s kf_%s_c_%s(KILN_TC x) { return CAST_VALUE_%d(%s, %s, x); }\n", clc, dn,
                   en, fl, cl, clc);
    }
    if (undef.p)
        sb_add(b, "%s", undef.p);
    b->oom = b->oom || undef.oom;
    free(undef.p);
}

/* The helpers of g's ops: kiln_rh, kiln_rb (a float rounded to f16, bf16) and a block of op
 * functions per dtype computed in. */
static void gen_helpers(const graph *g, sbuf *b)
{
    /* As in elementwise.cl: no a * b + c contracted to fma (NVIDIA's compiler does it by
     * default), so that a fused chain rounds as the eager kernels do, bit for bit. */
    sb_add(b, "#pragma OPENCL FP_CONTRACT OFF\n");
    wants w[KILN_DTYPE_COUNT] = {{0}};
    for (int m = 0; m < g->nn; m++) {
        struct kiln__lazy *z = lazy_of(g->node[m]);
        wants *x = &w[z->in_dtype];
        if (z->kind == KILN__F_BINARY || z->kind == KILN__F_SCALAR)
            x->binary |= 1u << z->op;
        else if (z->kind == KILN__F_UNARY)
            x->unary |= 1u << z->op;
        else if (z->kind == KILN__F_UNARY_BW)
            x->unary_bw |= 1u << z->op;
        else if (z->kind == KILN__F_CAST)
            x->cast |= 1u << g->node[m]->dtype;
    }
    sb_add(b, "/* generated by lib/fusion.c */\n"
              "float kiln_rh(float v)\n{\n    return KILN_HALF_ROUND(v);\n}\n"
              "float kiln_rb(float v)\n{\n    return KILN_BF16_ROUND(v);\n}\n");
    for (int d = 0; d < KILN_DTYPE_COUNT; d++)
        if (w[d].binary | w[d].unary | w[d].unary_bw | w[d].cast)
            dtype_block(b, (kiln_dtype)d, &w[d]);
}

/* g's parameters: the leaves, then (when a leaf broadcasts) the root's collapsed shape and each
 * broadcast leaf's strides in it, then the scalars: their declarations ("global const float *l0,
 * long d0, ...") into params, their names ("l0, d0, ...") into names, their values into args.
 * Returns the number of arguments. */
static int chain_params(const graph *g, sbuf *params, sbuf *names, kiln_arg *args)
{
    int na = 0;
    for (int k = 0; k < g->nl; k++) {
        sb_add(params, "%sglobal const %s *l%d", na ? ", " : "",
               kiln__dtype_cl_type(g->leaf[k]->dtype), k);
        sb_add(names, "%sl%d", na ? ", " : "", k);
        args[na++] = kiln_arg_tensor(g->leaf[k]);
    }
    int C = g->any_bcast ? g->cnd : 0;
    for (int j = 0; j < C; j++) {
        sb_add(params, ", long d%d", j);
        sb_add(names, ", d%d", j);
        args[na++] = kiln_arg_i64(g->cshape[j]);
    }
    for (int k = 0; k < g->nl; k++)
        for (int j = 0; g->bcast[k] && j < C; j++) {
            sb_add(params, ", long s%d_%d", k, j);
            sb_add(names, ", s%d_%d", k, j);
            args[na++] = kiln_arg_i64(g->cstride[k][j]);
        }
    for (int m = 0; m < g->nn; m++) {
        struct kiln__lazy *z = lazy_of(g->node[m]);
        if (z->kind != KILN__F_SCALAR)
            continue;
        sb_add(params, ", %s k%d", kiln__dtype_cl_compute_type(z->in_dtype), m);
        sb_add(names, ", k%d", m);
        args[na++] = kiln__arg_scalar(z->in_dtype, z->scalar);
    }
    return na;
}

/* The number of arguments chain_params gives. */
static int chain_nargs(const graph *g)
{
    int n = g->nl;
    int C = g->any_bcast ? g->cnd : 0;
    n += C;
    for (int k = 0; k < g->nl; k++)
        n += g->bcast[k] ? C : 0;
    for (int m = 0; m < g->nn; m++)
        n += lazy_of(g->node[m])->kind == KILN__F_SCALAR ? 1 : 0;
    return n;
}

/* The type of a node's value in the generated code (compares give uchar). */
static const char *value_type(kiln_dtype d)
{
    return d == KILN_U8 ? "uchar" : kiln__dtype_cl_compute_type(d);
}

/* kiln_chain_at(i, c0.., params): the value of g's root at its flat (row-major) index i, whose
 * coordinates in the collapsed shape are c0.. (none without broadcasting), computed from the
 * leaves; kiln_chain(i, params) finds the coordinates by division. The one place that emits the
 * ops' expressions: the elementwise kernel stores it, a folded reduction (kiln__fusion_fold)
 * loads it. */
static void chain_function(const graph *g, sbuf *b, const char *params)
{
    const kiln_tensor *root = g->root;
    int C = g->any_bcast ? g->cnd : 0;
    const char *vt = value_type(root->dtype);
    sb_add(b, "%s kiln_chain_at(long i, ", vt);
    for (int j = 0; j < C; j++)
        sb_add(b, "long c%d, ", j);
    sb_add(b, "%s)\n{\n", params);
    for (int k = 0; b && k < g->nl; k++) {
        const kiln_tensor *l = g->leaf[k];
        sb_add(b, "    %s a%d = ", kiln__dtype_cl_compute_type(l->dtype), k);
        sbuf idx = {0};
        if (!g->bcast[k])
            sb_add(&idx, "i");
        else
            for (int j = 0; j < C; j++)
                sb_add(&idx, "%sc%d * s%d_%d", j ? " + " : "", j, k, j);
        if (idx.oom || !idx.p)
            b->oom = true;
        else if (kiln__dtype_is_narrow(l->dtype))
            sb_add(b, "KILN_%s_LOAD(%s, l%d);\n", kiln__dtype_narrow_macro(l->dtype), idx.p, k);
        else
            sb_add(b, "l%d[%s];\n", k, idx.p);
        free(idx.p);
    }
    for (int m = 0; b && m < g->nn; m++) {
        const kiln_tensor *t = g->node[m];
        struct kiln__lazy *z = lazy_of(t);
        char v[3][16];
        for (int i = 0; i < z->nin; i++) {
            int k = index_of(g->node, g->nn, z->in[i]);
            if (k >= 0)
                snprintf(v[i], sizeof v[i], "v%d", k);
            else
                snprintf(v[i], sizeof v[i], "a%d", index_of(g->leaf, g->nl, z->in[i]));
        }
        const char *dn = kiln__dtype_name(z->in_dtype);
        sb_add(b, "    %s v%d = ", value_type(t->dtype), m);
        switch (z->kind) {
        case KILN__F_BINARY:
            sb_add(b, "kf_%s_b_%s(%s, %s);\n", dn, kiln__binary_name((kiln_binary_op)z->op), v[0],
                   v[1]);
            break;
        case KILN__F_SCALAR:
            sb_add(b, "kf_%s_b_%s(%s, k%d);\n", dn, kiln__binary_name((kiln_binary_op)z->op), v[0],
                   m);
            break;
        case KILN__F_UNARY:
            sb_add(b, "kf_%s_u_%s(%s);\n", dn, kiln__unary_name((kiln_unary_op)z->op), v[0]);
            break;
        case KILN__F_UNARY_BW:
            sb_add(b, "kf_%s_ub_%s(%s, %s);\n", dn, kiln__unary_name((kiln_unary_op)z->op), v[0],
                   v[1]);
            break;
        case KILN__F_WHERE:
            sb_add(b, "%s ? %s : %s;\n", v[0], v[1], v[2]);
            break;
        case KILN__F_CAST:
            sb_add(b, "kf_%s_c_%s(%s);\n", dn, kiln__dtype_name(t->dtype), v[0]);
            break;
        }
    }
    sb_add(b, "    return v%d;\n}\n", g->nn - 1);
}

/* The largest index the generated kernels' 32-bit index path is for: 2^32 - 1, or the test-only
 * KILN_TEST_FUSION_INDEX32_LIMIT rounded down to 2^k - 1 (1 <= k <= 32), read once. */
static int64_t index32_limit(void)
{
    int64_t lim = atomic_load(&index32_limit_read);
    if (lim >= 0)
        return lim;
    lim = 0xffffffff;
    const char *env = getenv("KILN_TEST_FUSION_INDEX32_LIMIT");
    char *end = NULL;
    unsigned long long v = env && *env ? strtoull(env, &end, 0) : 0;
    if (env && *env && *end == '\0' && v >= 1 && v < 0xffffffffull) {
        lim = 1;
        while (lim * 2 + 1 <= (int64_t)v)
            lim = lim * 2 + 1;
    }
    atomic_store(&index32_limit_read, lim);
    return lim;
}

/* x as a uint in the 32-bit index path: with a lowered limit (a test's), x is cut to the limit's
 * bits, so that a value over the limit goes as wrong there as one over 2^32 - 1 does for real. */
static const char *narrow(char *buf, size_t size, const char *x)
{
    int64_t lim = index32_limit();
    if (lim == 0xffffffff)
        snprintf(buf, size, "(uint)%s", x);
    else
        snprintf(buf, size, "(uint)(%s & 0x%" PRIx64 "L)", x, lim);
    return buf;
}

/* kiln_chain(i, params): kiln_chain_at with the coordinates of i; names: the parameters' names. */
static void chain_by_index(const graph *g, sbuf *b, const char *params, const char *names)
{
    int C = g->any_bcast ? g->cnd : 0;
    sb_add(b, "%s kiln_chain(long i, %s)\n{\n", value_type(g->root->dtype), params);
    if (C > 1) {
        /* 32-bit division where the whole range fits (64-bit is several times slower, and the
         * index arithmetic dominates a short chain). The choice is the range's, the same for
         * every index (a uniform branch): the product of the collapsed dimensions is n, so when
         * it fits so do every index, coordinate and dimension (the strides multiply the
         * coordinates as long). Chosen per index, a dimension over the limit would be cut to 32
         * bits for the indices under the limit. */
        char r[64], d[64];
        for (int j = 0; j < C; j++)
            sb_add(b, "    long c%d;\n", j);
        sb_add(b, "    if (d0");
        for (int j = 1; j < C; j++)
            sb_add(b, " * d%d", j);
        sb_add(b, " <= 0x%" PRIx64 "L) {\n        uint r = %s, q;\n", index32_limit(),
               narrow(r, sizeof r, "i"));
        for (int j = C - 1; j > 0; j--) {
            char dj[16];
            snprintf(dj, sizeof dj, "d%d", j);
            narrow(d, sizeof d, dj);
            sb_add(b, "        q = r / %s;\n        c%d = r - q * %s;\n        r = q;\n", d, j, d);
        }
        sb_add(b, "        c0 = r;\n    } else {\n        long r = i, q;\n");
        for (int j = C - 1; j > 0; j--)
            sb_add(b, "        q = r / d%d;\n        c%d = r - q * d%d;\n        r = q;\n", j, j,
                   j);
        sb_add(b, "        c0 = r;\n    }\n");
    }
    sb_add(b, "    return kiln_chain_at(i, ");
    if (C == 1)
        sb_add(b, "i, ");
    for (int j = 0; C > 1 && j < C; j++)
        sb_add(b, "c%d, ", j);
    sb_add(b, "%s);\n}\n", names);
}

/* The elementwise kernel's source for g (b NULL: none, the kernel is known), and its argument
 * list (args: room for the output, n and chain_nargs(g)). Returns the number of arguments. */
static int generate(const graph *g, sbuf *b, kiln_arg *args, kiln_tensor *dest)
{
    const kiln_tensor *root = g->root;
    sbuf params = {0}, names = {0};
    int na = 0;
    args[na++] = kiln_arg_tensor(dest);
    args[na++] = kiln_arg_i64(root->numel);
    na += chain_params(g, b ? &params : NULL, b ? &names : NULL, args + na);
    if (!b)
        return na;
    if (params.oom || names.oom || !params.p || !names.p) {
        b->oom = true;
    } else {
        gen_helpers(g, b);
        chain_function(g, b, params.p);
        chain_by_index(g, b, params.p, names.p);
        /* Two collapsed dims (a bias row or column): a 2-D range, no division; three (a
         * per-channel vector over [N, C, HW]): a 3-D range. */
        bool two = g->any_bcast && g->cnd == 2, three = g->any_bcast && g->cnd == 3;
        sb_add(b, "kernel void kiln_fused(global %s *out, long n, %s)\n{\n",
               kiln__dtype_cl_type(root->dtype), params.p);
        if (two)
            sb_add(b,
                   "    KILN_FOR(c0, 1, d0) {\n    KILN_FOR(c1, 0, d1) {\n"
                   "        long i = c0 * d1 + c1;\n"
                   "        %s v = kiln_chain_at(i, c0, c1, %s);\n",
                   value_type(root->dtype), names.p);
        else if (three)
            sb_add(b,
                   "    KILN_FOR(c0, 2, d0) {\n    KILN_FOR(c1, 1, d1) {\n"
                   "    KILN_FOR(c2, 0, d2) {\n"
                   "        long i = (c0 * d1 + c1) * d2 + c2;\n"
                   "        %s v = kiln_chain_at(i, c0, c1, c2, %s);\n",
                   value_type(root->dtype), names.p);
        else
            sb_add(b, "    KILN_FOR(i, 0, n) {\n        %s v = kiln_chain(i, %s);\n",
                   value_type(root->dtype), names.p);
        if (kiln__dtype_is_narrow(root->dtype))
            sb_add(b, "        KILN_%s_STORE(v, i, out);\n", kiln__dtype_narrow_macro(root->dtype));
        else
            sb_add(b, "        out[i] = v;\n");
        sb_add(b, three ? "    }\n    }\n    }\n}\n" : two ? "    }\n    }\n}\n" : "    }\n}\n");
    }
    free(params.p);
    free(names.p);
    return na;
}

/* CL_DEVICE_MAX_PARAMETER_SIZE of dev (1024, the spec's least, when the query fails). */
static size_t param_limit(kiln_device *dev)
{
    size_t v = 0;
    if (kiln__cl.GetDeviceInfo(dev->id, CL_DEVICE_MAX_PARAMETER_SIZE, sizeof v, &v, NULL) !=
            CL_SUCCESS ||
        v < 1024)
        v = 1024;
    return v;
}

/* The bytes of g's kernel arguments. */
static size_t arg_bytes(const graph *g)
{
    size_t n = 8 + 8 + (size_t)g->nl * 8;
    if (g->any_bcast)
        n += 8 * (size_t)g->root->ndim;
    for (int k = 0; k < g->nl; k++)
        n += g->bcast[k] ? 8 * (size_t)g->root->ndim : 0;
    for (int m = 0; m < g->nn; m++)
        n += lazy_of(g->node[m])->kind == KILN__F_SCALAR ? 8 : 0;
    return n;
}

static kiln_status eval_locked(kiln_tensor *t, kiln_tensor *dest, const char *op);

/* Wrap the error of an evaluation with the chain that failed. */
static kiln_status chain_error(kiln_status s, const kiln_tensor *t, const char *op)
{
    sbuf c = {0};
    chain_text(&c, t, 0);
    char *msg = kiln__strdup(kiln_last_error());
    s = kiln__error(s, "%s: evaluating the pending elementwise chain %s failed: %s", op,
                    c.p && !c.oom ? c.p : "(?)", msg ? msg : "");
    free(msg);
    free(c.p);
    return s;
}

/* ---- kernels by structure -------------------------------------------------------------- */

/* The generated kernels, by device and a compact key of the graph's structure (what generate()
 * writes depends on nothing else), so that a chain seen before costs neither generating its
 * source nor finding it among the device's programs by text. kiln__fusion_forget drops a
 * device's entries when its programs go. A lock of its own, never held while calling out. */
typedef struct memo_entry {
    kiln_device *dev;
    size_t len;
    uint64_t hash;
    kiln__kernel *k;
    struct memo_entry *next;
    unsigned char key[];
} memo_entry;

enum { MEMO_BUCKETS = 256, KEY_MAX = 2 + MAX_LEAVES + 10 * MAX_NODES };

static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;
static memo_entry *memo[MEMO_BUCKETS];

/* g's structure: the root's rank when anything broadcasts, each leaf's dtype and whether it
 * broadcasts, each node's kind, op, dtypes and inputs (n = node, l = leaf, by index). */
static size_t structure_key(const graph *g, unsigned char *key)
{
    size_t n = 0;
    key[n++] = (unsigned char)(g->any_bcast ? g->cnd + 1 : 0);
    key[n++] = (unsigned char)g->nl;
    for (int k = 0; k < g->nl; k++)
        key[n++] = (unsigned char)(g->leaf[k]->dtype << 1 | (g->bcast[k] ? 1 : 0));
    for (int m = 0; m < g->nn; m++) {
        struct kiln__lazy *z = lazy_of(g->node[m]);
        key[n++] = (unsigned char)z->kind;
        key[n++] = (unsigned char)z->op;
        key[n++] = (unsigned char)(z->in_dtype << 4 | g->node[m]->dtype);
        key[n++] = (unsigned char)z->nin;
        for (int i = 0; i < z->nin; i++) {
            int k = index_of(g->node, g->nn, z->in[i]);
            unsigned v =
                k >= 0 ? (unsigned)k : 0x200u | (unsigned)index_of(g->leaf, g->nl, z->in[i]);
            key[n++] = (unsigned char)(v >> 8);
            key[n++] = (unsigned char)v;
        }
    }
    return n;
}

static uint64_t key_hash(const kiln_device *dev, const unsigned char *key, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)dev;
    for (size_t i = 0; i < len; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return h;
}

static kiln__kernel *memo_find(const kiln_device *dev, const unsigned char *key, size_t len,
                               uint64_t h)
{
    kiln__kernel *k = NULL;
    pthread_mutex_lock(&memo_lock);
    for (memo_entry *e = memo[h % MEMO_BUCKETS]; e && !k; e = e->next)
        if (e->dev == dev && e->hash == h && e->len == len && memcmp(e->key, key, len) == 0)
            k = e->k;
    pthread_mutex_unlock(&memo_lock);
    return k;
}

/* The memo's entries go with their device's programs (program.c tells us: a hook). */
static pthread_once_t forget_once = PTHREAD_ONCE_INIT;

static void forget_device(kiln_device *dev)
{
    kiln__fusion_forget(dev);
}

static void register_forget(void)
{
    kiln__programs_on_free(forget_device);
}

/* Remember k (a failed allocation only loses the shortcut). */
static void memo_add(kiln_device *dev, const unsigned char *key, size_t len, uint64_t h,
                     kiln__kernel *k)
{
    pthread_once(&forget_once, register_forget);
    memo_entry *e = kiln__malloc(sizeof *e + len);
    if (!e)
        return;
    *e = (memo_entry){dev, len, h, k, NULL};
    memcpy(e->key, key, len);
    pthread_mutex_lock(&memo_lock);
    e->next = memo[h % MEMO_BUCKETS];
    memo[h % MEMO_BUCKETS] = e;
    pthread_mutex_unlock(&memo_lock);
}

void kiln__fusion_forget(const kiln_device *dev)
{
    pthread_mutex_lock(&memo_lock);
    for (int b = 0; b < MEMO_BUCKETS; b++)
        for (memo_entry **p = &memo[b]; *p;) {
            memo_entry *e = *p;
            if (dev && e->dev != dev) {
                p = &e->next;
                continue;
            }
            *p = e->next;
            free(e);
        }
    pthread_mutex_unlock(&memo_lock);
}

/* A chain of one op runs its eager kernel: nothing to generate or compile. */
static kiln_status run_one(graph *g, kiln_tensor *dest, const char *op)
{
    kiln_tensor *t = g->root;
    struct kiln__lazy *z = lazy_of(t);
    kiln__fop fo = {z->kind,  z->op,  z->in_dtype, t->dtype, t->ndim,
                    t->shape, z->nin, {NULL},      z->scalar};
    for (int i = 0; i < z->nin; i++)
        fo.in[i] = z->in[i];
    atomic_fetch_add(&eager, 1);
    if (!kiln__profiling())
        return kiln__elementwise_run(op, t->dev, &fo, dest ? dest : t);
    /* Profiled as the op that made the pending value ("add", "relu'": its gradient), not the
     * call that needed it. */
    char buf[32];
    kiln__profiler_label(op_name(z, t, buf, sizeof buf));
    kiln_status s = kiln__elementwise_run(op, t->dev, &fo, dest ? dest : t);
    kiln__profiler_label(NULL);
    return s;
}

static kiln_status run(graph *g, kiln_tensor *dest, const char *op)
{
    kiln_tensor *t = g->root;
    kiln_device *dev = t->dev;
    if (g->nn == 1)
        return run_one(g, dest, op);
    kiln_arg *args = kiln__calloc((size_t)chain_nargs(g) + 2, sizeof *args);
    sbuf src = {0};
    kiln_status s = KILN_OK;
    if (!args) {
        s = kiln__host_oom(op);
        goto done;
    }
    unsigned char key[KEY_MAX];
    size_t klen = structure_key(g, key);
    uint64_t h = key_hash(dev, key, klen);
    kiln__kernel *k = memo_find(dev, key, klen, h);
    bool hit = k != NULL;
    int na = generate(g, k ? NULL : &src, args, dest ? dest : t);
    if (!k && (src.oom || !src.p)) {
        s = kiln__host_oom(op);
        goto done;
    }
    if (!k) {
        kiln__log_hold();
        s = kiln__generated_kernel(dev, src.p, "kiln_fused", false, op, &k, &hit);
        kiln__log_release();
        if (s != KILN_OK)
            goto done;
        memo_add(dev, key, klen, h, k);
    }
    atomic_fetch_add(hit ? &reused : &generated, 1);
    if (kiln__log_enabled(KILN_LOG_DEBUG)) {
        sbuf c = {0};
        chain_text(&c, t, 0);
        kiln__log(KILN_LOG_DEBUG, "fusion: %s kernel (%d ops, %d inputs) for %s",
                  hit ? "cached" : "generated", g->nn, g->nl, c.p ? c.p : "?");
        free(c.p);
    }
    int dims = g->any_bcast && (g->cnd == 2 || g->cnd == 3) ? g->cnd : 1;
    size_t global[3] = {(size_t)t->numel, 1, 1};
    for (int d = 0; dims > 1 && d < dims; d++) /* dimension 0 along the innermost */
        global[d] = (size_t)g->cshape[dims - 1 - d];
    if (kiln__profiling()) {
        sbuf c = {0};
        chain_ops(&c, t, 0);
        char label[96];
        snprintf(label, sizeof label, "fused: %s", c.p ? c.p : "?");
        free(c.p);
        kiln__profiler_label(label);
    }
    s = kiln__kernel_launch(dev, k, op, dims, global, NULL, na, args);
    kiln__profiler_label(NULL);
done:
    free(src.p);
    free(args);
    return s;
}

/* Evaluate pending t into dest (NULL: its own new buffer, then t holds its value). Lock held. */
static kiln_status eval_locked(kiln_tensor *t, kiln_tensor *dest, const char *op)
{
    if (!lazy_of(t))
        return KILN_OK;
    size_t limit = param_limit(t->dev);
    graph *g = kiln__calloc(1, sizeof *g);
    if (!g)
        return kiln__host_oom(op);
    kiln_status s = KILN_OK;
    for (;;) {
        memset(g, 0, sizeof *g);
        g->root = t;
        bool fits = visit(g, t) && arg_bytes(g) <= limit;
        if (fits) {
            if (g->any_bcast)
                collapse(g);
            break;
        }
        /* Too many arguments for one kernel: evaluate the biggest pending input first. */
        struct kiln__lazy *z = lazy_of(t);
        kiln_tensor *big = NULL;
        for (int i = 0; i < z->nin; i++) {
            struct kiln__lazy *zi = lazy_of(z->in[i]);
            if (zi && (!big || zi->nodes > lazy_of(big)->nodes))
                big = z->in[i];
        }
        if (!big)
            break; /* cannot happen with at most 3 inputs; launch and let the driver say */
        if ((s = eval_locked(big, NULL, op)) != KILN_OK) {
            free(g);
            return s;
        }
    }
    kiln__log_hold();
    kiln__fusion_defer(true); /* the launch's tensors are g's leaves and t: nothing to force */
    cl_mem mem = NULL;
    size_t capacity = 0;
    if (!dest && (s = kiln__mem_alloc(t->dev, t->nbytes, op, &mem, &capacity)) == KILN_OK) {
        t->storage->mem = mem; /* t's own buffer, given back if the kernel cannot run */
        t->storage->capacity = capacity;
    }
    if (s == KILN_OK)
        s = run(g, dest, op);
    if (s != KILN_OK && mem) {
        t->storage->mem = NULL;
        t->storage->capacity = 0;
        kiln__mem_free(t->dev, mem, t->nbytes, capacity, kiln__queue_tag(t->dev));
    }
    kiln__fusion_defer(false);
    if (s != KILN_OK)
        s = chain_error(s, t, op);
    kiln__log_release();
    free(g);
    if (s == KILN_OK && !dest)
        drop(t);
    return s;
}

/* ---- entry points ---------------------------------------------------------------------- */

kiln_status kiln__fusion_force(const kiln_tensor *ct, const char *op)
{
    kiln_tensor *t = (kiln_tensor *)ct;
    kiln__storage *st = t->storage;
    bool shared = atomic_load(&st->mem_shared);
    if (deferred || (!lazy_of(t) && atomic_load(&st->readers) == 0 && !shared))
        return KILN_OK;
    lock_all();
    kiln_status s = eval_locked(t, NULL, op);
    /* A write into t's storage may follow: evaluate what reads it, also through another tensor
     * wrapping the same cl_mem (kiln_tensor_from_cl_mem). */
    for (struct kiln__lazy *z = pending; s == KILN_OK && z;) {
        bool reads = false;
        for (int i = 0; i < z->nin; i++) {
            const kiln__storage *in = z->in[i]->storage;
            reads = reads || in == st || (shared && st->mem && in->mem == st->mem);
        }
        if (!reads) {
            z = z->next;
            continue;
        }
        s = eval_locked(z->self, NULL, op);
        z = pending; /* the list changed */
    }
    pthread_mutex_unlock(&lock);
    return s;
}

kiln_status kiln__fuse(const char *fn, kiln_device *dev, const kiln__fop *op, kiln_tensor *given,
                       kiln_tensor **out)
{
    lock_all();
    kiln_status s = KILN_OK;
    int depth = 0, nodes = 1;
    for (;;) {
        depth = 0;
        nodes = 1;
        kiln_tensor *big = NULL;
        for (int i = 0; i < op->nin; i++) {
            struct kiln__lazy *z = lazy_of(op->in[i]);
            if (!z)
                continue;
            depth = depth > z->depth ? depth : z->depth;
            nodes += z->nodes;
            if (!big || z->nodes > lazy_of(big)->nodes)
                big = (kiln_tensor *)op->in[i];
        }
        depth++;
        if (!big || (depth <= MAX_DEPTH && nodes <= MAX_NODES))
            break;
        if ((s = eval_locked(big, NULL, fn)) != KILN_OK)
            goto done;
    }
    kiln_tensor *t = NULL;
    struct kiln__lazy *z = kiln__calloc(1, sizeof *z);
    if (!z) {
        s = kiln__host_oom(fn);
        goto done;
    }
    pthread_once(&hooks_once, register_hooks);
    if ((s = kiln__tensor_new_pending(dev, op->dtype, op->ndim, op->shape, fn, &t)) != KILN_OK) {
        free(z);
        goto done;
    }
    z->kind = op->kind;
    z->op = op->op;
    z->in_dtype = op->in_dtype;
    z->scalar = op->scalar;
    z->nin = op->nin;
    z->depth = depth;
    z->nodes = nodes;
    z->self = t;
    for (int i = 0; i < op->nin; i++) {
        z->in[i] = kiln_tensor_retain((kiln_tensor *)op->in[i]);
        atomic_fetch_add(&z->in[i]->storage->readers, 1);
    }
    z->next = pending;
    if (pending)
        pending->prev = z;
    pending = z;
    atomic_store(&t->lazy, z);
    if (given) {
        s = eval_locked(t, given, fn);
        kiln_tensor_release(t);
        t = NULL;
    }
    if (out)
        *out = t;
done:
    pthread_mutex_unlock(&lock);
    return s;
}

/* Folding is limited to a pending tensor that only its caller holds: anything else holding it
 * (an autograd node, another pending expression, a second reference) will likely read it again,
 * and the fold leaves it pending, so it would be computed twice. */
kiln_status kiln__fusion_fold(const kiln_tensor *ct, const char *source, const char *defines,
                              size_t room, const char *op, kiln__fold **out)
{
    kiln_tensor *t = (kiln_tensor *)ct;
    *out = NULL;
    if (!lazy_of(t) || atomic_load(&t->refs) != 1)
        return KILN_OK;
    /* CPU devices evaluate the chain first: their reductions load vectors of 8, which a folded
     * chain (one element per call) loses, and that costs more than the pass it saves there
     * (kiln-bench fusion, sum0 rows: fold 0.6-1.0x of evaluate-then-reduce on PoCL). */
    if (t->dev->info.type == KILN_DEVICE_CPU && !atomic_load(&fold_on_cpu))
        return KILN_OK;
    lock_all();
    graph *g = NULL;
    kiln__fold *f = NULL;
    sbuf params = {0}, names = {0}, b = {0};
    kiln_status s = KILN_OK;
    const kiln__kernel_source *ks = kiln__kernel_source_find(source);
    const char *src = ks ? ks->text : NULL;
    if (!src || !lazy_of(t) || atomic_load(&t->refs) != 1)
        goto done; /* evaluated by another thread meanwhile: read it as usual */
    g = kiln__calloc(1, sizeof *g);
    f = kiln__calloc(1, sizeof *f);
    if (!g || !f) {
        s = kiln__host_oom(op);
        goto done;
    }
    g->root = t;
    /* arg_bytes counts the elementwise kernel's out and n (16 bytes) */
    if (!visit(g, t))
        goto done;
    if (g->any_bcast)
        collapse(g);
    if (chain_nargs(g) > KILN__FOLD_MAX_ARGS || arg_bytes(g) - 16 + room > param_limit(t->dev))
        goto done;
    f->nargs = chain_params(g, &params, &names, f->args);
    if (params.oom || names.oom || !params.p || !names.p) {
        s = kiln__host_oom(op);
        goto done;
    }
    gen_helpers(g, &b);
    chain_function(g, &b, params.p);
    chain_by_index(g, &b, params.p, names.p);
    sb_add(&b, "/* ---- folded into %s.cl */\n", source);
    defines_text(&b, defines, NULL);
    sb_add(&b, "#define KILN_X_PARAMS %s\n#define KILN_LOAD(p, i) kiln_chain((i), %s)\n%s",
           params.p, names.p, src);
    if (b.oom || !b.p) {
        s = kiln__host_oom(op);
        goto done;
    }
    f->text = b.p;
    b.p = NULL;
    if (kiln__log_enabled(KILN_LOG_DEBUG)) {
        sbuf c = {0};
        chain_text(&c, t, 0);
        kiln__log(KILN_LOG_DEBUG, "fusion: %s folded into %s's loads (%d ops, %d inputs)",
                  c.p ? c.p : "?", op, g->nn, g->nl);
        free(c.p);
    }
    atomic_fetch_add(&folds, 1);
    kiln__fusion_defer(true); /* the launches' checks of the leaves must not evaluate t */
    *out = f;
    f = NULL;
done:
    free(g);
    free(f);
    free(params.p);
    free(names.p);
    free(b.p);
    if (!*out)
        pthread_mutex_unlock(&lock);
    return s;
}

void kiln__fusion_fold_done(kiln__fold *f)
{
    if (!f)
        return;
    kiln__fusion_defer(false);
    free(f->text);
    free(f);
    pthread_mutex_unlock(&lock);
}

kiln_status kiln_tensor_eval(const kiln_tensor *t)
{
    kiln_status s = kiln__check_handle(t, "kiln_tensor_eval", "tensor");
    return s;
}
