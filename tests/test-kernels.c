/* test-kernels.c - every built-in kernel an op can ask for exists, and no other: for every
 * device, every dtype it can compute in, every op of the tables in kiln.h and every kernel
 * variant, the name the ops build (lib/ops/optables.h) resolves through the built-in kernel
 * lookup in the program the ops build (the same -D options). Ops a dtype does not support, by
 * the kind column the ops read too, must be absent from the program: the kernel list of each
 * program is compared with the expected names both ways. Each program is built once (the
 * lookup caches per device) and nothing runs, so the suite is quick under Oclgrind. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "../lib/clcall.h"
#include "../lib/dtype.h"
#include "../lib/ops/optables.h"
#include "../lib/program.h"
#include "../lib/registry.h"
#include "kiln.h"
#include "testutil.h"

/* The ops, straight from the public tables. */
static const kiln_binary_op binary_ops[] = {
#define X(NAME, num, name, kind) KILN_BINARY_##NAME,
    KILN_BINARY_OP_MAP(X)
#undef X
};
static const kiln_unary_op unary_ops[] = {
#define X(NAME, num, name, kind) KILN_UNARY_##NAME,
    KILN_UNARY_OP_MAP(X)
#undef X
};
static const kiln_reduce_op reduce_ops[] = {
#define X(NAME, num, name) KILN_REDUCE_##NAME,
    KILN_REDUCE_OP_MAP(X)
#undef X
};
static const kiln_dtype dtypes[] = {
#define X(NAME, num, name, bytes, cl, clc, fl, sg) KILN_##NAME,
    KILN_DTYPE_MAP(X)
#undef X
};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Whole programs are built for every dtype in the full tier (CI); the default tier builds those
 * of f32, f16 and i32 (floating, half storage, integer: each code path of the sources), since
 * each whole program is a cold build of 10-30 s on PoCL (test-kernels took 111 s of a cold
 * README test command that went over its 10 minutes, 2026-12-07). */
static bool in_tier(kiln_dtype dt)
{
    return test_full() || dt == KILN_F32 || dt == KILN_F16 || dt == KILN_I32;
}

/* A set of kernel names. */
#define MAX_NAMES 256
typedef struct names {
    int n;
    char name[MAX_NAMES][64];
} names;

static void add_name(names *ns, const char *name)
{
    for (int i = 0; i < ns->n; i++)
        if (strcmp(ns->name[i], name) == 0)
            return;
    ck_assert_int_lt(ns->n, MAX_NAMES);
    snprintf(ns->name[ns->n++], sizeof ns->name[0], "%s", name);
}

static bool has_name(const names *ns, const char *name)
{
    for (int i = 0; i < ns->n; i++)
        if (strcmp(ns->name[i], name) == 0)
            return true;
    return false;
}

/* Whether dev can compute in dtype (f64 needs fp64), as kiln__check_dtype_on decides. */
static bool computes(kiln_device *dev, kiln_dtype dtype)
{
    return !kiln__dtype_needs_fp64(dtype) || has_fp64(dev);
}

/* The kernel names (';'-separated) of the program k comes from, into list. */
static void program_kernels(const kiln__kernel *k, char *list, size_t size)
{
    cl_program prog;
    ck_assert_int_eq(kiln__cl.GetKernelInfo(k->kernel, CL_KERNEL_PROGRAM, sizeof prog, &prog, NULL),
                     CL_SUCCESS);
    size_t len = 0;
    ck_assert_int_eq(kiln__cl.GetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, size, list, &len),
                     CL_SUCCESS);
}

static bool one_kernel_source(const char *source)
{
    const kiln__kernel_source *src = kiln__kernel_source_find(source);
    ck_assert_msg(src != NULL, "no source %s", source);
    return src->one_kernel;
}

/* Resolve every name of ns in the whole program of (source, defines) on dev, then compare the
 * program's own kernel list with ns: the same names, no more. A source built one kernel per
 * program (program.h: one_kernel) must give a program holding exactly the kernel asked for:
 * checked for every name in the full tier, for every 9th here (each costs a build). */
static void check_program(kiln_device *dev, const char *source, const char *defines,
                          const names *ns)
{
    ck_assert_int_gt(ns->n, 0);
    static char list[16384];
    kiln__kernel *k = NULL;
    if (one_kernel_source(source)) {
        for (int i = 0; i < ns->n; i += test_size(9, 1)) {
            kiln_status s = kiln__builtin_kernel(dev, source, defines, ns->name[i], "test", &k);
            ck_assert_msg(s == KILN_OK, "%s.cl (%s): kernel %s alone: %s", source, defines,
                          ns->name[i], kiln_last_error());
            program_kernels(k, list, sizeof list);
            ck_assert_msg(strcmp(list, ns->name[i]) == 0,
                          "%s.cl (%s): the program built for %s alone holds \"%s\": a kernel "
                          "outside a KILN_ONLY guard (lib/kernels/embed.py)",
                          source, defines, ns->name[i], list);
        }
    }
    char whole[512];
    snprintf(whole, sizeof whole, "%s -DKILN_ALL_KERNELS", defines);
    for (int i = 0; i < ns->n; i++) {
        kiln_status s = kiln__builtin_kernel(dev, source, whole, ns->name[i], "test", &k);
        ck_assert_msg(s == KILN_OK, "%s.cl (%s): kernel %s: %s", source, defines, ns->name[i],
                      kiln_last_error());
    }
    program_kernels(k, list, sizeof list);
    int count = 0;
    for (char *save = NULL, *name = strtok_r(list, ";", &save); name;
         name = strtok_r(NULL, ";", &save), count++)
        ck_assert_msg(has_name(ns, name),
                      "%s.cl (%s) has kernel %s, which no op asks for: its op's kind in kiln.h "
                      "and the kernel file disagree",
                      source, defines, name);
    ck_assert_int_eq(count, ns->n);
}

/* Every kernel of the elementwise program of one dtype: binary ops in four variants, unary ops
 * and derivatives, where, and casts to every dtype the device can hold. */
static void elementwise_names(kiln_device *dev, kiln_dtype dt, names *ns)
{
    char name[64];
    for (int o = 0; o < COUNT(binary_ops); o++) {
        if (!kiln__binary_supports(binary_ops[o], dt))
            continue;
        for (int v = 0; v < KILN__BINARY_VARIANTS; v++)
            add_name(
                ns, kiln__binary_kernel(name, sizeof name, (kiln__binary_variant)v, binary_ops[o]));
    }
    for (int o = 0; o < COUNT(unary_ops); o++)
        for (int bw = 0; bw < 2; bw++)
            if (kiln__unary_supports(unary_ops[o], dt, bw))
                add_name(ns, kiln__unary_kernel(name, sizeof name, bw, unary_ops[o]));
    add_name(ns, "kiln_where");
    add_name(ns, "kiln_where_bb");
    for (int t = 0; t < COUNT(dtypes); t++)
        if (computes(dev, dtypes[t]))
            add_name(ns, kiln__cast_kernel(name, sizeof name, dtypes[t]));
    for (int t = 0; t < COUNT(dtypes); t++)
        if (kiln__cast8_kernel(dev->info.type, dt, dtypes[t]))
            add_name(ns, kiln__cast8_kernel(dev->info.type, dt, dtypes[t]));
}

START_TEST(test_elementwise)
{
    for (int d = 0; d < ndevs; d++) {
        for (int t = 0; t < COUNT(dtypes); t++) {
            if (!computes(devs[d], dtypes[t]) || !in_tier(dtypes[t]))
                continue;
            static names ns;
            ns.n = 0;
            elementwise_names(devs[d], dtypes[t], &ns);
            char defines[256];
            kiln__elementwise_defines(defines, sizeof defines, dtypes[t]);
            check_program(devs[d], "elementwise", defines, &ns);
        }
    }
}
END_TEST

/* The reduce programs: one per (dtype, add or compare), holding the kernels of every op of
 * that family the dtype supports. */
START_TEST(test_reduce)
{
    static const char *const bases[] = {"kiln_reduce_rows", "kiln_reduce_cols", "kiln_reduce_vrows",
                                        "kiln_reduce_combine"};
    for (int d = 0; d < ndevs; d++) {
        for (int t = 0; t < COUNT(dtypes); t++) {
            kiln_dtype dt = dtypes[t];
            if (!computes(devs[d], dt) || !in_tier(dt))
                continue;
            for (int family = 0; family < 2; family++) { /* adds, compares */
                static names ns;
                ns.n = 0;
                char defines[256] = "", name[64];
                for (int o = 0; o < COUNT(reduce_ops); o++) {
                    kiln_reduce_op op = reduce_ops[o];
                    if (kiln__reduce_adds(op) != (family == 0) || !kiln__reduce_supports(op, dt))
                        continue;
                    kiln__reduce_defines(defines, sizeof defines, op, dt);
                    add_name(&ns, "kiln_reduce_wg");
                    for (int b = 0; b < COUNT(bases); b++) {
                        add_name(&ns, kiln__reduce_kernel(name, sizeof name, bases[b], op));
                        add_name(&ns, bases[b]); /* the program's plain results, always there */
                    }
                }
                if (ns.n > 0)
                    check_program(devs[d], "reduce", defines, &ns);
            }
        }
    }
}
END_TEST

/* A reduction with a folded chain (lib/fusion.c, kiln__fusion_fold) is a generated program made
 * of reduce.cl's whole text; kiln__generated_kernel with one_kernel builds it with the kernel
 * asked for alone (PoCL generated code for all eight for the cache entry, 2-10 s), without it
 * whole. The text here is reduce.cl after the sum's defines and loads, as the fold writes them. */
START_TEST(test_generated_one_kernel)
{
    const kiln__kernel_source *reduce = kiln__kernel_source_find("reduce");
    ck_assert_ptr_nonnull(reduce);
    const char *src = reduce->text;
    char defs[256], text[256] = "";
    kiln__reduce_defines(defs, sizeof defs, KILN_REDUCE_SUM, KILN_F32);
    for (char *save = NULL, *d = strtok_r(defs, " ", &save); d; d = strtok_r(NULL, " ", &save)) {
        ck_assert(strncmp(d, "-D", 2) == 0);
        char *eq = strchr(d, '=');
        if (eq)
            *eq = ' ';
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, "#define %s\n", d + 2);
    }
    /* the fold's own loads: here x itself, as a chain of no ops would read it */
    const char *loads = "#define KILN_X_PARAMS global const float *x\n"
                        "#define KILN_LOAD(p, i) ((p)[(i)])\n";
    size_t n = strlen(text) + strlen(loads) + strlen(src) + 1;
    char *whole = malloc(n);
    ck_assert_ptr_nonnull(whole);
    snprintf(whole, n, "%s%s%s", text, loads, src);
    static char list[16384];
    for (int d = 0; d < ndevs; d++) {
        kiln__kernel *k = NULL;
        bool hit;
        const char *names[] = {"kiln_reduce_cols", "kiln_reduce_vrows"};
        for (int i = 0; i < 2; i++) {
            ck_assert_msg(
                kiln__generated_kernel(devs[d], whole, names[i], true, "test", &k, &hit) == KILN_OK,
                "%s", kiln_last_error());
            program_kernels(k, list, sizeof list);
            ck_assert_msg(strcmp(list, names[i]) == 0,
                          "the generated program built for %s alone holds \"%s\"", names[i], list);
        }
        ck_assert_msg(kiln__generated_kernel(devs[d], whole, "kiln_reduce_cols", false, "test", &k,
                                             &hit) == KILN_OK,
                      "%s", kiln_last_error());
        program_kernels(k, list, sizeof list);
        ck_assert_msg(strstr(list, "kiln_reduce_vrows") && strstr(list, "kiln_reduce_combine"),
                      "the whole generated program holds \"%s\"", list);
    }
    free(whole);
}
END_TEST

/* The tables read as the ops read them: unknown values have no name and support nothing. */
START_TEST(test_tables)
{
    ck_assert_ptr_null(kiln__binary_name((kiln_binary_op)COUNT(binary_ops)));
    ck_assert_ptr_null(kiln__binary_name((kiln_binary_op)-1));
    ck_assert_ptr_null(kiln__unary_name((kiln_unary_op)COUNT(unary_ops)));
    ck_assert_ptr_null(kiln__reduce_name((kiln_reduce_op)COUNT(reduce_ops)));
    ck_assert(!kiln__binary_supports(KILN_BINARY_ADD, (kiln_dtype)KILN_DTYPE_COUNT));
    ck_assert(!kiln__unary_supports(KILN_UNARY_NEG, (kiln_dtype)-1, false));
    ck_assert(!kiln__dtype_valid((kiln_dtype)KILN_DTYPE_COUNT));
    ck_assert_str_eq(kiln_dtype_name((kiln_dtype)KILN_DTYPE_COUNT), "?");
    ck_assert_uint_eq(kiln_dtype_size((kiln_dtype)-1), 0);
    /* The names are the table's third column, as kiln.h spells them. */
#define X(NAME, num, name, kind) ck_assert_str_eq(kiln__binary_name(KILN_BINARY_##NAME), #name);
    KILN_BINARY_OP_MAP(X)
#undef X
#define X(NAME, num, name, kind) ck_assert_str_eq(kiln__unary_name(KILN_UNARY_##NAME), #name);
    KILN_UNARY_OP_MAP(X)
#undef X
#define X(NAME, num, name) ck_assert_str_eq(kiln__reduce_name(KILN_REDUCE_##NAME), #name);
    KILN_REDUCE_OP_MAP(X)
#undef X
#define X(NAME, num, name, bytes, cl, clc, fl, sg)                                                 \
    ck_assert_str_eq(kiln_dtype_name(KILN_##NAME), #name);                                         \
    ck_assert_uint_eq(kiln_dtype_size(KILN_##NAME), bytes);
    KILN_DTYPE_MAP(X)
#undef X
}
END_TEST

Suite *kernels_suite(void)
{
    Suite *s = suite_create("kernels");
    TCase *tt = tcase_create("tables");
    tcase_add_test(tt, test_tables);
    suite_add_tcase(s, tt);
    TCase *tc = tcase_create("resolve");
    tcase_add_unchecked_fixture(tc, setup_devices, teardown_devices);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_reduce);
    tcase_add_test(tc, test_generated_one_kernel);
    suite_add_tcase(s, tc);
    return s;
}
