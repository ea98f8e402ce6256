/* test-matmul.c - kiln_matmul on every device and every path (clblast, cblas, builtin) against a
 * plain C triple loop in double precision; batches, transposes, f64 and f16, empty sizes and bad
 * inputs. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/clcall.h"
#include "../lib/dtype.h"
#include "../lib/ops/matmul.h"
#include "../lib/registry.h"
#include "kiln.h"

#define ck_assert_str_contains(s, sub)                                                             \
    ck_assert_msg(strstr((s), (sub)) != NULL, "'%s' does not contain '%s'", (s), (sub))

static const char *const path_names[] = {"clblast", "cblas", "builtin"};

/* Devices under test: every CPU and GPU kiln sees (cpu:1 in -2dev, Oclgrind's gpu:0). */
static kiln_device *devs[8];
static int ndevs;

static void setup_devices(void)
{
    static const kiln_device_type types[] = {KILN_DEVICE_CPU, KILN_DEVICE_GPU};
    static const char *const prefix[] = {"cpu", "gpu"};
    ndevs = 0;
    for (int t = 0; t < 2; t++) {
        int n = kiln_device_count(types[t]);
        for (int i = 0; i < n && ndevs < 8; i++) {
            char spec[32];
            snprintf(spec, sizeof spec, "%s:%d", prefix[t], i);
            ck_assert_int_eq(kiln_device_get(spec, &devs[ndevs]), KILN_OK);
            ndevs++;
        }
    }
    ck_assert_int_gt(ndevs, 0);
}

static void teardown_devices(void)
{
    unsetenv("KILN_MATMUL");
    kiln__matmul_cblas_no_native = false;
    kiln__matmul_cblas_always_map = false;
    kiln__matmul_cblas_parts = 0;
    kiln__matmul_builtin_max_groups = 65535;
    kiln__matmul_clblast_any_device = false;
    kiln__clblast_gemm = kiln__clblast_gemm_real;
    kiln__cl_reset();
}

/* Oclgrind simulates every work-item (about 1 us each, with race checks): tiny sizes only. */
static bool simulated(kiln_device *dev)
{
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(dev, &info), KILN_OK);
    return strstr(info.platform, "Oclgrind") != NULL;
}

static bool has_fp64(kiln_device *dev)
{
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(dev, &info), KILN_OK);
    return info.fp64;
}

/* Whether the test runs `path` on dev: available, and not CLBlast under the simulator (its
 * kernels are far too large to simulate). */
static bool path_runs(kiln_device *dev, const char *path)
{
    const kiln__matmul_path *p;
    if (kiln__matmul_select(dev, path, "test", &p) != KILN_OK)
        return false;
    return !(simulated(dev) && strcmp(path, "builtin") != 0);
}

/* Deterministic inputs in [-1, 1), exactly representable in f32. */
static double next_value(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (double)(int32_t)(*state >> 8 & 0xffffff) / (double)(1 << 23) - 1.0;
}

static int64_t batch_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim - 2; i++)
        n *= shape[i];
    return n;
}

typedef struct operand {
    int ndim;
    int64_t shape[4];
} operand;

/* The expected result of op(A) x op(B) by the triple loop, in double. */
static double *reference(const double *a, const double *b, const operand *oa, const operand *ob,
                         unsigned flags, int64_t *batch_out, int64_t *m_out, int64_t *n_out)
{
    bool ta = flags & KILN_MATMUL_TRANS_A, tb = flags & KILN_MATMUL_TRANS_B;
    int64_t ar = oa->shape[oa->ndim - 2], ac = oa->shape[oa->ndim - 1];
    int64_t br = ob->shape[ob->ndim - 2], bc = ob->shape[ob->ndim - 1];
    int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
    int64_t na = batch_of(oa->ndim, oa->shape), nb = batch_of(ob->ndim, ob->shape);
    int64_t batch = na > nb ? na : nb;
    double *c = calloc((size_t)(batch * m * n) + 1, sizeof *c);
    ck_assert_ptr_nonnull(c);
    for (int64_t z = 0; z < batch; z++) {
        const double *az = a + (na == 1 ? 0 : z) * m * k, *bz = b + (nb == 1 ? 0 : z) * k * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double sum = 0;
                for (int64_t p = 0; p < k; p++)
                    sum +=
                        (ta ? az[p * m + i] : az[i * k + p]) * (tb ? bz[j * k + p] : bz[p * n + j]);
                c[(z * m + i) * n + j] = sum;
            }
    }
    *batch_out = batch;
    *m_out = m;
    *n_out = n;
    return c;
}

static kiln_tensor *upload(kiln_device *dev, kiln_dtype dt, const operand *o, const double *v,
                           int64_t count)
{
    void *host = malloc((size_t)count * 8 + 8);
    ck_assert_ptr_nonnull(host);
    for (int64_t i = 0; i < count; i++)
        kiln__dtype_store(dt, host, i, (kiln__host_value){.floating = true, .f = v[i]});
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_tensor_from_host(dev, dt, o->ndim, o->shape, host, &t), KILN_OK);
    free(host);
    return t;
}

static int64_t numel(const operand *o)
{
    int64_t n = 1;
    for (int i = 0; i < o->ndim; i++)
        n *= o->shape[i];
    return n;
}

/* Compute op(A) x op(B) on dev through `path` (NULL: the device's default) and compare with the
 * reference: |got - ref| <= K * eps * max|a| * max|b| + eps, eps = 1e-6 (f32; 16x the unit
 * roundoff bound K*u) or 1e-13 (f64). Inputs are in [-1, 1), so max|a| * max|b| <= 1. f16: the
 * inputs are rounded to f16 first (the reference multiplies those), the sum is accumulated in
 * f32 (the f32 bound) and rounded to f16 once: + |ref| * 2^-11 (half an f16 ulp) + 2^-25 (the
 * subnormal step's half). Accumulating in f16 would break the bound at these K. bf16 the same
 * with half a bf16 ulp: + |ref| * 2^-8 (bf16 has f32's exponent range: no subnormal term). */
static void check_product(kiln_device *dev, const char *path, kiln_dtype dt, operand oa, operand ob,
                          unsigned flags)
{
    if (path)
        setenv("KILN_MATMUL", path, 1);
    else
        unsetenv("KILN_MATMUL");
    uint32_t state = (uint32_t)(numel(&oa) * 31 + numel(&ob) * 7 + flags);
    int64_t ca = numel(&oa), cb = numel(&ob);
    double *a = malloc((size_t)ca * sizeof *a + 8), *b = malloc((size_t)cb * sizeof *b + 8);
    ck_assert(a && b);
    for (int64_t i = 0; i < ca; i++)
        a[i] = next_value(&state);
    for (int64_t i = 0; i < cb; i++)
        b[i] = next_value(&state);
    if (dt == KILN_F16 || dt == KILN_BF16) { /* the values the tensors will hold */
        for (int64_t i = 0; i < ca + cb; i++) {
            double *v = i < ca ? &a[i] : &b[i - ca];
            uint16_t h;
            kiln__dtype_store(dt, &h, 0, (kiln__host_value){.floating = true, .f = *v});
            *v = kiln__dtype_load(dt, &h, 0).f;
        }
    }
    int64_t batch, m, n,
        k = (flags & KILN_MATMUL_TRANS_A) ? oa.shape[oa.ndim - 2] : oa.shape[oa.ndim - 1];
    double *ref = reference(a, b, &oa, &ob, flags, &batch, &m, &n);
    kiln_tensor *ta = upload(dev, dt, &oa, a, ca), *tb = upload(dev, dt, &ob, b, cb), *tc = NULL;
    kiln_status s = kiln_matmul_trans(ta, tb, flags, &tc);
    ck_assert_msg(s == KILN_OK, "%s on %s: %s", path ? path : "default", kiln_device_spec(dev),
                  kiln_last_error());
    ck_assert_int_eq(kiln_tensor_numel(tc), batch * m * n);
    int nd = kiln_tensor_ndim(tc);
    ck_assert_int_eq(kiln_tensor_shape(tc)[nd - 2], m);
    ck_assert_int_eq(kiln_tensor_shape(tc)[nd - 1], n);
    size_t count = (size_t)(batch * m * n);
    void *got = malloc(count * 8 + 8);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(kiln_tensor_read(tc, got, count * kiln_dtype_size(dt)), KILN_OK);
    double eps = dt == KILN_F64 ? 1e-13 : 1e-6;
    for (size_t i = 0; i < count; i++) {
        double tol = (double)k * eps + eps;
        if (dt == KILN_F16)
            tol += fabs(ref[i]) * 0x1p-11 + 0x1p-25;
        if (dt == KILN_BF16)
            tol += fabs(ref[i]) * 0x1p-8;
        double g = kiln__dtype_load(dt, got, (int64_t)i).f;
        ck_assert_msg(fabs(g - ref[i]) <= tol,
                      "%s on %s, %s, m=%lld n=%lld k=%lld batch=%lld flags=%u: c[%zu] = %.9g, "
                      "expected %.9g (tolerance %.3g)",
                      path ? path : "default", kiln_device_spec(dev), kiln_dtype_name(dt),
                      (long long)m, (long long)n, (long long)k, (long long)batch, flags, i, g,
                      ref[i], tol);
    }
    free(got);
    free(ref);
    free(a);
    free(b);
    kiln_tensor_release(ta);
    kiln_tensor_release(tb);
    kiln_tensor_release(tc);
}

static operand mat(int64_t r, int64_t c)
{
    return (operand){2, {r, c}};
}

/* Square sizes 1, 7, 61, 93, 257 (up to 33 under Oclgrind) on every device and path. */
START_TEST(test_square_sizes)
{
    static const int64_t sizes[] = {1, 7, 61, 93, 257}, tiny[] = {1, 7, 33};
    for (int d = 0; d < ndevs; d++) {
        bool sim = simulated(devs[d]);
        const int64_t *sz = sim ? tiny : sizes;
        int nsz = sim ? 3 : 5;
        for (int p = 0; p < 3; p++) {
            if (!path_runs(devs[d], path_names[p]))
                continue;
            for (int i = 0; i < nsz; i++)
                check_product(devs[d], path_names[p], KILN_F32, mat(sz[i], sz[i]),
                              mat(sz[i], sz[i]), 0);
        }
    }
}
END_TEST

/* Every transpose flag on rectangular shapes, so a swapped stride cannot pass by symmetry. */
START_TEST(test_transposes)
{
    for (int d = 0; d < ndevs; d++) {
        bool sim = simulated(devs[d]);
        int64_t m = sim ? 5 : 61, n = sim ? 9 : 93, k = sim ? 13 : 70;
        for (int p = 0; p < 3; p++) {
            if (!path_runs(devs[d], path_names[p]))
                continue;
            for (unsigned f = 0; f < 4; f++) {
                operand a = (f & KILN_MATMUL_TRANS_A) ? mat(k, m) : mat(m, k);
                operand b = (f & KILN_MATMUL_TRANS_B) ? mat(n, k) : mat(k, n);
                check_product(devs[d], path_names[p], KILN_F32, a, b, f);
            }
        }
    }
}
END_TEST

/* Batches: equal batch shapes, a broadcast batch of 1 on either side, 2-D against 4-D. */
START_TEST(test_batches)
{
    for (int d = 0; d < ndevs; d++) {
        bool sim = simulated(devs[d]);
        int64_t m = sim ? 6 : 33, n = sim ? 5 : 17, k = sim ? 7 : 29;
        const operand cases[][2] = {
            {{3, {3, m, k}}, {3, {3, k, n}}}, {{3, {1, m, k}}, {3, {4, k, n}}},
            {{2, {m, k}}, {3, {3, k, n}}},    {{4, {2, 3, m, k}}, {2, {k, n}}},
            {{3, {2, m, k}}, {3, {1, k, n}}},
        };
        for (int p = 0; p < 3; p++) {
            if (!path_runs(devs[d], path_names[p]))
                continue;
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
                check_product(devs[d], path_names[p], KILN_F32, cases[c][0], cases[c][1], 0);
            /* A transposed batch against a shared B: no folding into one tall product. */
            check_product(devs[d], path_names[p], KILN_F32, (operand){3, {3, k, m}}, mat(n, k),
                          KILN_MATMUL_TRANS_A | KILN_MATMUL_TRANS_B);
        }
    }
}
END_TEST

START_TEST(test_f64)
{
    for (int d = 0; d < ndevs; d++) {
        if (!has_fp64(devs[d]))
            continue;
        bool sim = simulated(devs[d]);
        int64_t m = sim ? 9 : 93, n = sim ? 7 : 61, k = sim ? 11 : 257;
        for (int p = 0; p < 3; p++) {
            if (!path_runs(devs[d], path_names[p]))
                continue;
            check_product(devs[d], path_names[p], KILN_F64, mat(m, k), mat(k, n), 0);
            check_product(devs[d], path_names[p], KILN_F64, mat(k, m), mat(n, k),
                          KILN_MATMUL_TRANS_A | KILN_MATMUL_TRANS_B);
            check_product(devs[d], path_names[p], KILN_F64, (operand){3, {2, m, k}},
                          (operand){3, {2, k, n}}, 0);
        }
    }
}
END_TEST

/* f16 and bf16 storage, computed in f32: every path that takes them (cblas converts to f32 for
 * OpenBLAS, builtin reads through vload_half or a shift), plain, transposed and batched; CLBlast
 * forced on them is refused with the reason, and the automatic choice takes the built-in kernel
 * on GPUs. */
START_TEST(test_narrow)
{
    static const kiln_dtype narrow[2] = {KILN_F16, KILN_BF16};
    for (int t = 0; t < 2; t++)
        for (int d = 0; d < ndevs; d++) {
            kiln_dtype dt = narrow[t];
            bool sim = simulated(devs[d]);
            int64_t m = sim ? 9 : 93, n = sim ? 7 : 61, k = sim ? 11 : 257;
            for (int p = 1; p < 3; p++) {
                if (!path_runs(devs[d], path_names[p]))
                    continue;
                check_product(devs[d], path_names[p], dt, mat(m, k), mat(k, n), 0);
                check_product(devs[d], path_names[p], dt, mat(k, m), mat(n, k),
                              KILN_MATMUL_TRANS_A | KILN_MATMUL_TRANS_B);
                check_product(devs[d], path_names[p], dt, (operand){3, {2, m, k}},
                              (operand){3, {2, k, n}}, 0);
                check_product(devs[d], path_names[p], dt, (operand){3, {3, m, k}}, mat(k, n), 0);
            }
            check_product(devs[d], NULL, dt, mat(m, k), mat(k, n), 0);
            const kiln__matmul_path *cl;
            if (kiln__matmul_select(devs[d], "clblast", "t", &cl) == KILN_OK) {
                setenv("KILN_MATMUL", "clblast", 1);
                kiln_tensor *a = NULL, *c = NULL;
                ck_assert_int_eq(kiln_ones(devs[d], dt, 2, (int64_t[]){2, 2}, &a), KILN_OK);
                ck_assert_int_eq(kiln_matmul(a, a, &c), KILN_ERR_UNSUPPORTED);
                ck_assert_ptr_null(c);
                ck_assert_str_contains(kiln_last_error(), "kiln_matmul: KILN_MATMUL=clblast");
                ck_assert_str_contains(kiln_last_error(), kiln_dtype_name(dt));
                ck_assert_str_contains(kiln_last_error(), "accumulate in f32");
                unsetenv("KILN_MATMUL");
                kiln_tensor_release(a);
            }
        }
}
END_TEST

/* The cblas path's batches in parts on the host pool: runs of whole products, split evenly and
 * unevenly (9 products in 2, 3 and 7 parts; 4 in 7 parts is 4 parts of one), every transpose,
 * a shared B, f32, f64 and f16, native kernel and fallback; a single product with the knob set
 * runs as it would without. */
START_TEST(test_cblas_parts)
{
    for (int d = 0; d < ndevs; d++) {
        if (!path_runs(devs[d], "cblas"))
            continue;
        static const int parts[] = {2, 3, 7};
        for (size_t pi = 0; pi < sizeof parts / sizeof parts[0]; pi++) {
            kiln__matmul_cblas_parts = parts[pi];
            for (unsigned f = 0; f < 4; f++) {
                bool ta = f & KILN_MATMUL_TRANS_A, tb = f & KILN_MATMUL_TRANS_B;
                const int64_t mnk[][4] = {{37, 41, 23, 9}, {19, 70, 11, 4}, {13, 17, 9, 1}};
                for (int c = 0; c < 3; c++) {
                    int64_t m = mnk[c][0], n = mnk[c][1], k = mnk[c][2], bt = mnk[c][3];
                    operand a = {3, {bt, ta ? k : m, ta ? m : k}};
                    operand b = {3, {bt, tb ? n : k, tb ? k : n}};
                    check_product(devs[d], "cblas", KILN_F32, a, b, f);
                    if (f == 0 && c == 0) {
                        check_product(devs[d], "cblas", KILN_F16, a, b, f);
                        if (has_fp64(devs[d]))
                            check_product(devs[d], "cblas", KILN_F64, a, b, f);
                    }
                }
            }
            /* A transposed batch against a shared B (stride 0) */
            check_product(devs[d], "cblas", KILN_F32, (operand){3, {5, 12, 10}}, mat(14, 12),
                          KILN_MATMUL_TRANS_A | KILN_MATMUL_TRANS_B);
            kiln__matmul_cblas_no_native = true;
            check_product(devs[d], "cblas", KILN_F32, (operand){3, {6, 45, 66}},
                          (operand){3, {6, 66, 30}}, 0);
            kiln__matmul_cblas_no_native = false;
        }
        kiln__matmul_cblas_parts = 0;
        /* and as the size decides: a batch large enough for the pool, one product large enough
         * for OpenBLAS's threads */
        check_product(devs[d], "cblas", KILN_F32, (operand){3, {8, 64, 80}},
                      (operand){3, {8, 80, 128}}, 0);
        check_product(devs[d], "cblas", KILN_F32, mat(64, 300), mat(300, 257), 0);
    }
}
END_TEST

/* The device's default path, and the native-kernel-less fallback of the cblas path. */
START_TEST(test_default_and_fallback)
{
    for (int d = 0; d < ndevs; d++) {
        bool sim = simulated(devs[d]);
        int64_t s = sim ? 9 : 93;
        if (!sim)
            check_product(devs[d], NULL, KILN_F32, mat(s, s + 3), mat(s + 3, s - 2), 0);
        if (!path_runs(devs[d], "cblas"))
            continue;
        kiln__matmul_cblas_no_native = true;
        check_product(devs[d], "cblas", KILN_F32, mat(s, s + 3), mat(s + 3, s - 2), 0);
        check_product(devs[d], "cblas", KILN_F64, (operand){3, {2, s, 5}}, mat(5, 4), 0);
        check_product(devs[d], "cblas", KILN_F16, (operand){3, {2, s, 5}}, mat(5, 4), 0);
        check_product(devs[d], "cblas", KILN_BF16, (operand){3, {2, s, 5}}, mat(5, 4), 0);
        kiln__matmul_cblas_no_native = false;
    }
}
END_TEST

/* The built-in kernel split into several launches along rows and batch (NVIDIA's grid limit,
 * lowered here to 2 work-groups so small products exercise it). */
START_TEST(test_builtin_split_launches)
{
    kiln__matmul_builtin_max_groups = 2;
    for (int d = 0; d < ndevs; d++) {
        bool sim = simulated(devs[d]);
        check_product(devs[d], "builtin", KILN_F32, (operand){3, {5, sim ? 21 : 61, 9}},
                      (operand){3, {5, 9, 7}}, 0);
        check_product(devs[d], "builtin", KILN_F32, mat(sim ? 40 : 200, 3), mat(3, 17), 0);
    }
    kiln__matmul_builtin_max_groups = 65535;
}
END_TEST

/* kiln_matmul_path follows the documented choice and KILN_MATMUL. */
START_TEST(test_path_choice)
{
    for (int d = 0; d < ndevs; d++) {
        kiln_device_info info;
        ck_assert_int_eq(kiln_device_info_get(devs[d], &info), KILN_OK);
        unsetenv("KILN_MATMUL");
        const char *name = kiln_matmul_path(devs[d]);
        ck_assert_ptr_nonnull(name);
        const kiln__matmul_path *cl, *cb;
        bool has_clblast = kiln__matmul_select(devs[d], "clblast", "t", &cl) == KILN_OK;
        bool has_cblas = kiln__matmul_select(devs[d], "cblas", "t", &cb) == KILN_OK;
        const char *expect = info.type == KILN_DEVICE_GPU && has_clblast ? "clblast"
                             : has_cblas                                 ? "cblas"
                                                                         : "builtin";
        ck_assert_str_eq(name, expect);
        const char *why = kiln_matmul_path_reason(devs[d]);
        ck_assert_ptr_nonnull(why);
        if (strcmp(expect, "builtin") != 0)
            ck_assert_str_contains(why, strcmp(expect, "clblast") == 0 ? "CLBlast" : "CBLAS");
        setenv("KILN_MATMUL", "builtin", 1);
        ck_assert_str_eq(kiln_matmul_path_reason(devs[d]), "forced by KILN_MATMUL");
        ck_assert_str_eq(kiln_matmul_path(devs[d]), "builtin");
    }
    setenv("KILN_MATMUL", "fastest", 1);
    ck_assert_ptr_null(kiln_matmul_path(devs[0]));
    ck_assert_str_contains(kiln_last_error(), "unknown KILN_MATMUL value 'fastest'");
    ck_assert_ptr_null(kiln_matmul_path_reason(devs[0]));
    ck_assert_str_contains(kiln_last_error(), "unknown KILN_MATMUL value 'fastest'");
    unsetenv("KILN_MATMUL");
    ck_assert_ptr_null(kiln_matmul_path(NULL));
    ck_assert_ptr_null(kiln_matmul_path_reason(NULL));
    ck_assert_str_contains(kiln_last_error(), "kiln_matmul_path_reason");
}
END_TEST

/* Chained products read the previous result: each path keeps queue order. */
START_TEST(test_queue_order)
{
    for (int d = 0; d < ndevs; d++) {
        for (int p = 0; p < 3; p++) {
            if (!path_runs(devs[d], path_names[p]))
                continue;
            setenv("KILN_MATMUL", path_names[p], 1);
            /* x <- 2 * I x, ten times: every step depends on the one before. */
            enum { N = 8, STEPS = 10 };
            float eye2[N * N] = {0}, x0[N * 3];
            for (int i = 0; i < N; i++)
                eye2[i * N + i] = 2.0f;
            for (int i = 0; i < N * 3; i++)
                x0[i] = (float)(i % 7) - 3.0f;
            kiln_tensor *e, *x;
            ck_assert_int_eq(
                kiln_tensor_from_host(devs[d], KILN_F32, 2, (int64_t[]){N, N}, eye2, &e), KILN_OK);
            ck_assert_int_eq(kiln_tensor_from_host(devs[d], KILN_F32, 2, (int64_t[]){N, 3}, x0, &x),
                             KILN_OK);
            for (int s = 0; s < STEPS; s++) {
                kiln_tensor *y;
                ck_assert_int_eq(kiln_matmul(e, x, &y), KILN_OK);
                kiln_tensor_release(x);
                x = y;
            }
            float got[N * 3];
            ck_assert_int_eq(kiln_tensor_read(x, got, sizeof got), KILN_OK);
            for (int i = 0; i < N * 3; i++)
                ck_assert_float_eq(got[i], x0[i] * 1024.0f);
            kiln_tensor_release(e);
            kiln_tensor_release(x);
        }
    }
}
END_TEST

/* M or N of 0: an empty result; K of 0: zeros (also over old contents with _out). */
START_TEST(test_empty)
{
    for (int d = 0; d < ndevs; d++) {
        for (int p = 0; p < 3; p++) {
            if (!path_runs(devs[d], path_names[p]))
                continue;
            setenv("KILN_MATMUL", path_names[p], 1);
            kiln_tensor *a, *b, *c;
            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 2, (int64_t[]){0, 4}, &a), 0);
            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 2, (int64_t[]){4, 3}, &b), 0);
            ck_assert_int_eq(kiln_matmul(a, b, &c), KILN_OK);
            ck_assert_int_eq(kiln_tensor_ndim(c), 2);
            ck_assert_int_eq(kiln_tensor_shape(c)[0], 0);
            ck_assert_int_eq(kiln_tensor_shape(c)[1], 3);
            kiln_tensor_release(a);
            kiln_tensor_release(b);
            kiln_tensor_release(c);

            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 2, (int64_t[]){5, 0}, &a), 0);
            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 2, (int64_t[]){0, 3}, &b), 0);
            float junk[15];
            for (int i = 0; i < 15; i++)
                junk[i] = 7.0f;
            ck_assert_int_eq(
                kiln_tensor_from_host(devs[d], KILN_F32, 2, (int64_t[]){5, 3}, junk, &c), KILN_OK);
            ck_assert_int_eq(kiln_matmul_trans_out(a, b, 0, c), KILN_OK);
            float got[15];
            ck_assert_int_eq(kiln_tensor_read(c, got, sizeof got), KILN_OK);
            for (int i = 0; i < 15; i++)
                ck_assert_float_eq(got[i], 0.0f);
            kiln_tensor_release(c);
            ck_assert_int_eq(kiln_matmul(a, b, &c), KILN_OK);
            ck_assert_int_eq(kiln_tensor_read(c, got, sizeof got), KILN_OK);
            for (int i = 0; i < 15; i++)
                ck_assert_float_eq(got[i], 0.0f);
            kiln_tensor_release(a);
            kiln_tensor_release(b);
            kiln_tensor_release(c);
        }
        /* A batch of 0 against a 2-D operand on either side: [0, 2, 4]. */
        for (int side = 0; side < 2; side++) {
            kiln_tensor *a, *b, *c;
            const int64_t *sa = side ? (int64_t[]){2, 3} : (int64_t[]){0, 2, 3};
            const int64_t *sb = side ? (int64_t[]){0, 3, 4} : (int64_t[]){3, 4};
            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 3 - side, sa, &a), 0);
            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 2 + side, sb, &b), 0);
            ck_assert_int_eq(kiln_matmul(a, b, &c), KILN_OK);
            ck_assert_int_eq(kiln_tensor_ndim(c), 3);
            const int64_t *sc = kiln_tensor_shape(c);
            ck_assert(sc[0] == 0 && sc[1] == 2 && sc[2] == 4);
            kiln_tensor_release(a);
            kiln_tensor_release(b);
            kiln_tensor_release(c);
        }
    }
}
END_TEST

/* kiln_matmul_trans_out writes into an existing tensor, again and again. */
START_TEST(test_out)
{
    for (int d = 0; d < ndevs; d++) {
        for (int p = 0; p < 3; p++) {
            if (!path_runs(devs[d], path_names[p]))
                continue;
            setenv("KILN_MATMUL", path_names[p], 1);
            float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {1, 0, -1, 2, 0.5f, 3};
            /* a [2, 3] (row-major), b given as [2, 3] and used transposed: c = a b^T, [2, 2]. */
            const float expect[4] = {1 - 3, 2 + 1 + 9, 4 - 6, 8 + 2.5f + 18};
            kiln_tensor *a, *b, *c;
            ck_assert_int_eq(kiln_tensor_from_host(devs[d], KILN_F32, 2, (int64_t[]){2, 3}, av, &a),
                             KILN_OK);
            ck_assert_int_eq(kiln_tensor_from_host(devs[d], KILN_F32, 2, (int64_t[]){2, 3}, bv, &b),
                             KILN_OK);
            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 2, (int64_t[]){2, 2}, &c), 0);
            for (int rep = 0; rep < 3; rep++) {
                ck_assert_int_eq(kiln_matmul_trans_out(a, b, KILN_MATMUL_TRANS_B, c), KILN_OK);
                float got[4];
                ck_assert_int_eq(kiln_tensor_read(c, got, sizeof got), KILN_OK);
                for (int i = 0; i < 4; i++)
                    ck_assert_float_eq_tol(got[i], expect[i], 1e-6f);
            }
            kiln_tensor_release(a);
            kiln_tensor_release(b);
            kiln_tensor_release(c);
        }
    }
}
END_TEST

static kiln_tensor *empty(kiln_dtype dt, int ndim, const int64_t *shape)
{
    kiln_tensor *t = NULL;
    ck_assert_int_eq(kiln_tensor_empty(devs[0], dt, ndim, shape, &t), KILN_OK);
    return t;
}

static void expect_error(kiln_status got, kiln_status want, const char *sub1, const char *sub2)
{
    ck_assert_msg(got == want, "got %s, expected %s (%s)", kiln_status_string(got),
                  kiln_status_string(want), kiln_last_error());
    ck_assert_str_contains(kiln_last_error(), sub1);
    if (sub2)
        ck_assert_str_contains(kiln_last_error(), sub2);
}

START_TEST(test_bad_inputs)
{
    unsetenv("KILN_MATMUL");
    kiln_tensor *a = empty(KILN_F32, 2, (int64_t[]){2, 3});
    kiln_tensor *b = empty(KILN_F32, 2, (int64_t[]){4, 5});
    kiln_tensor *v = empty(KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *d = empty(KILN_F64, 2, (int64_t[]){3, 5});
    kiln_tensor *i32 = empty(KILN_I32, 2, (int64_t[]){3, 5});
    kiln_tensor *ia = empty(KILN_I32, 2, (int64_t[]){2, 3});
    kiln_tensor *h = empty(KILN_F16, 2, (int64_t[]){3, 5});
    kiln_tensor *ha = empty(KILN_F16, 2, (int64_t[]){2, 3});
    kiln_tensor *good = empty(KILN_F32, 2, (int64_t[]){3, 5});
    kiln_tensor *ba = empty(KILN_F32, 3, (int64_t[]){2, 2, 3});
    kiln_tensor *bb = empty(KILN_F32, 3, (int64_t[]){3, 3, 5});
    kiln_tensor *out = (kiln_tensor *)1, *c;

    expect_error(kiln_matmul(NULL, b, &out), KILN_ERR_INVALID_ARGUMENT, "kiln_matmul", "NULL");
    ck_assert_ptr_null(out);
    expect_error(kiln_matmul(a, NULL, &out), KILN_ERR_INVALID_ARGUMENT, "kiln_matmul", "NULL");
    expect_error(kiln_matmul(a, good, NULL), KILN_ERR_INVALID_ARGUMENT, "kiln_matmul", "out");
    out = (kiln_tensor *)1;
    expect_error(kiln_matmul(a, b, &out), KILN_ERR_SHAPE_MISMATCH, "[2, 3]", "[4, 5]");
    ck_assert_ptr_null(out);
    expect_error(kiln_matmul_trans(a, good, KILN_MATMUL_TRANS_A, &out), KILN_ERR_SHAPE_MISMATCH,
                 "[2, 3] (transposed)", "[3, 5]");
    expect_error(kiln_matmul(v, good, &out), KILN_ERR_SHAPE_MISMATCH, "[3]", "2 dimensions");
    expect_error(kiln_matmul(a, d, &out), KILN_ERR_DTYPE_MISMATCH, "f32", "f64");
    expect_error(kiln_matmul(ia, i32, &out), KILN_ERR_UNSUPPORTED, "i32", "f32, f64, f16 or bf16");
    expect_error(kiln_matmul(ha, d, &out), KILN_ERR_DTYPE_MISMATCH, "f16", "f64");
    expect_error(kiln_matmul(ba, bb, &out), KILN_ERR_SHAPE_MISMATCH, "[2, 2, 3]", "batch");
    expect_error(kiln_matmul_trans(a, good, 8u, &out), KILN_ERR_INVALID_ARGUMENT, "flags", NULL);
    ck_assert_ptr_null(out);

    setenv("KILN_MATMUL", "fastest", 1);
    expect_error(kiln_matmul(a, good, &out), KILN_ERR_INVALID_ARGUMENT, "KILN_MATMUL", "fastest");
    unsetenv("KILN_MATMUL");

    /* _out: wrong shape, wrong dtype, NULL, aliasing an input. */
    c = empty(KILN_F32, 2, (int64_t[]){5, 2});
    expect_error(kiln_matmul_trans_out(a, good, 0, c), KILN_ERR_SHAPE_MISMATCH, "[5, 2]", "[2, 5]");
    kiln_tensor_release(c);
    c = empty(KILN_F64, 2, (int64_t[]){2, 5});
    expect_error(kiln_matmul_trans_out(a, good, 0, c), KILN_ERR_DTYPE_MISMATCH, "f64", "f32");
    kiln_tensor_release(c);
    expect_error(kiln_matmul_trans_out(a, good, 0, NULL), KILN_ERR_INVALID_ARGUMENT, "out", NULL);
    kiln_tensor *sq = empty(KILN_F32, 2, (int64_t[]){3, 3});
    expect_error(kiln_matmul_trans_out(sq, sq, 0, sq), KILN_ERR_INVALID_ARGUMENT, "shares memory",
                 NULL);
    kiln_tensor_release(sq);

    kiln_tensor *ts[] = {a, b, v, d, i32, ia, h, ha, good, ba, bb};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        kiln_tensor_release(ts[i]);
}
END_TEST

/* Forcing a path the device cannot run is an error that names the path and the device. */
START_TEST(test_unavailable_path)
{
    for (int d = 0; d < ndevs; d++) {
        for (int p = 0; p < 3; p++) {
            const kiln__matmul_path *path;
            if (kiln__matmul_select(devs[d], path_names[p], "t", &path) == KILN_OK)
                continue;
            setenv("KILN_MATMUL", path_names[p], 1);
            kiln_tensor *a, *b, *c = (kiln_tensor *)1;
            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 2, (int64_t[]){2, 2}, &a), 0);
            ck_assert_int_eq(kiln_tensor_empty(devs[d], KILN_F32, 2, (int64_t[]){2, 2}, &b), 0);
            expect_error(kiln_matmul(a, b, &c), KILN_ERR_UNSUPPORTED, path_names[p],
                         kiln_device_spec(devs[d]));
            ck_assert_ptr_null(c);
            kiln_tensor_release(a);
            kiln_tensor_release(b);
        }
    }
    unsetenv("KILN_MATMUL");
}
END_TEST

/* OpenCL failures inside a path: a status naming the call, no result, nothing leaked, and
 * the next call works. */
static int map_calls, map_fail_at;
static void *(CL_API_CALL *real_map)(cl_command_queue, cl_mem, cl_bool, cl_map_flags, size_t,
                                     size_t, cl_uint, const cl_event *, cl_event *, cl_int *);

static void *CL_API_CALL failing_map(cl_command_queue q, cl_mem m, cl_bool b, cl_map_flags f,
                                     size_t off, size_t size, cl_uint n, const cl_event *w,
                                     cl_event *e, cl_int *err)
{
    if (++map_calls == map_fail_at) {
        *err = CL_OUT_OF_RESOURCES;
        return NULL;
    }
    return real_map(q, m, b, f, off, size, n, w, e, err);
}

static cl_int CL_API_CALL failing_native(cl_command_queue q, void(CL_CALLBACK *fn)(void *),
                                         void *args, size_t cb, cl_uint nm, const cl_mem *ml,
                                         const void **loc, cl_uint n, const cl_event *w,
                                         cl_event *e)
{
    (void)q, (void)fn, (void)args, (void)cb, (void)nm, (void)ml, (void)loc, (void)n, (void)w;
    (void)e;
    return CL_INVALID_OPERATION;
}

static void expect_fault(kiln_device *dev, kiln_status want, const char *clfn)
{
    kiln_memory_stats before, after;
    kiln_tensor *a, *b, *c = (kiln_tensor *)1;
    float v[4] = {1, 2, 3, 4};
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F32, 2, (int64_t[]){2, 2}, v, &a), 0);
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F32, 2, (int64_t[]){2, 2}, v, &b), 0);
    ck_assert_int_eq(kiln_device_memory_stats(dev, &before), KILN_OK);
    expect_error(kiln_matmul(a, b, &c), want, clfn, kiln_device_spec(dev));
    ck_assert_ptr_null(c);
    ck_assert_int_eq(kiln_device_memory_stats(dev, &after), KILN_OK);
    ck_assert_uint_eq(after.allocated_bytes, before.allocated_bytes);
    kiln__cl_reset();
    kiln__device_clear_lost(dev); /* a fault at a map loses the device; this one was injected */
    ck_assert_int_eq(kiln_matmul(a, b, &c), KILN_OK);
    float got[4];
    ck_assert_int_eq(kiln_tensor_read(c, got, sizeof got), KILN_OK);
    ck_assert_float_eq(got[0], 7.0f);
    ck_assert_float_eq(got[3], 22.0f);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
    kiln_tensor_release(c);
}

START_TEST(test_cblas_faults)
{
    for (int d = 0; d < ndevs; d++) {
        if (!path_runs(devs[d], "cblas"))
            continue;
        setenv("KILN_MATMUL", "cblas", 1);
        real_map = kiln__cl.EnqueueMapBuffer;
        kiln__matmul_cblas_always_map = true; /* else kiln's own buffers need no map */
        for (int at = 1; at <= 3; at++) {
            for (int native = 0; native < 2; native++) {
                kiln__matmul_cblas_no_native = !native;
                map_calls = 0;
                map_fail_at = at;
                kiln__cl.EnqueueMapBuffer = failing_map;
                expect_fault(devs[d], KILN_ERR_DEVICE_LOST, "clEnqueueMapBuffer");
            }
        }
        kiln__matmul_cblas_no_native = false;
        kiln__matmul_cblas_always_map = false;
        kiln__cl.EnqueueNativeKernel = failing_native;
        expect_fault(devs[d], KILN_ERR_OPENCL, "clEnqueueNativeKernel");
    }
    unsetenv("KILN_MATMUL");
}
END_TEST

static void *CL_API_CALL counting_map(cl_command_queue q, cl_mem m, cl_bool b, cl_map_flags f,
                                      size_t off, size_t size, cl_uint n, const cl_event *w,
                                      cl_event *e, cl_int *err)
{
    map_calls++;
    return real_map(q, m, b, f, off, size, n, w, e, err);
}

/* On a CPU device that runs kiln's host-backed buffers in place, a native cblas GEMM on them
 * needs no map (issue 27): with the product between two elementwise kernels, all enqueued
 * without waiting, the queue's order alone must give the right values; an operand over a
 * foreign buffer is still mapped. */
START_TEST(test_cblas_in_place)
{
    enum { M = 3, K = 4, N = 5 };
    float a[M * K], b[K * N], want[M * N], got[M * N];
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 5) * 0.5f - 1.0f;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (a[i * K + k] + 1.0) * b[k * N + j]; /* A + 1, exact in f32 */
            want[i * N + j] = (float)acc * 2.0f;
        }
    int tested = 0;
    for (int d = 0; d < ndevs; d++) {
        if (!path_runs(devs[d], "cblas")) /* CPU devices over host memory only */
            continue;
        setenv("KILN_MATMUL", "cblas", 1);
        kiln_tensor *ta, *tb, *a1, *c, *c2;
        ck_assert_int_eq(kiln_tensor_from_host(devs[d], KILN_F32, 2, (int64_t[]){M, K}, a, &ta), 0);
        ck_assert_int_eq(kiln_tensor_from_host(devs[d], KILN_F32, 2, (int64_t[]){K, N}, b, &tb), 0);
        real_map = kiln__cl.EnqueueMapBuffer;
        kiln__cl.EnqueueMapBuffer = counting_map;
        for (int round = 0; round < 3; round++) {
            map_calls = 0;
            ck_assert_int_eq(kiln_binary_scalar(KILN_BINARY_ADD, ta, 1.0, &a1), KILN_OK);
            ck_assert_int_eq(kiln_tensor_eval(a1), KILN_OK); /* a kernel writes A, not waited for */
            ck_assert_int_eq(kiln_matmul(a1, tb, &c), KILN_OK);
            ck_assert_int_eq(kiln_binary_scalar(KILN_BINARY_MUL, c, 2.0, &c2), KILN_OK);
            ck_assert_int_eq(kiln_tensor_eval(c2), KILN_OK);
            int maps = map_calls;
            ck_assert_int_eq(kiln_tensor_read(c2, got, sizeof got), KILN_OK);
            for (int i = 0; i < M * N; i++)
                ck_assert_msg(got[i] == want[i], "%s round %d [%d]: %g, expected %g",
                              kiln_device_spec(devs[d]), round, i, (double)got[i], (double)want[i]);
            /* the first product maps its operands and learns that the device runs them in
             * place (it does on PoCL's CPU devices); later ones map nothing */
            if (round > 0)
                ck_assert_msg(maps == 0, "%s round %d: %d maps", kiln_device_spec(devs[d]), round,
                              maps);
            kiln_tensor_release(a1);
            kiln_tensor_release(c);
            kiln_tensor_release(c2);
        }
        /* B over a buffer kiln did not allocate: that operand alone is mapped */
        cl_int err;
        cl_mem foreign = clCreateBuffer(kiln_device_cl_context(devs[d]), CL_MEM_READ_WRITE,
                                        sizeof b, NULL, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        kiln_tensor *fb;
        ck_assert_int_eq(
            kiln_tensor_from_cl_mem(devs[d], foreign, KILN_F32, 2, (int64_t[]){K, N}, &fb), 0);
        ck_assert_int_eq(kiln_tensor_write(fb, b, sizeof b), KILN_OK);
        map_calls = 0;
        ck_assert_int_eq(kiln_binary_scalar(KILN_BINARY_ADD, ta, 1.0, &a1), KILN_OK);
        ck_assert_int_eq(kiln_matmul(a1, fb, &c), KILN_OK);
        ck_assert_int_eq(kiln_tensor_read(c, got, sizeof got), KILN_OK);
        ck_assert_int_eq(map_calls, 1);
        for (int i = 0; i < M * N; i++)
            ck_assert_float_eq(got[i] * 2.0f, want[i]);
        kiln__cl_reset();
        kiln_tensor_release(a1);
        kiln_tensor_release(c);
        kiln_tensor_release(fb);
        clReleaseMemObject(foreign);
        kiln_tensor_release(ta);
        kiln_tensor_release(tb);
        tested++;
    }
    unsetenv("KILN_MATMUL");
    if (!tested)
        fprintf(stderr, "cblas_in_place: no CPU device runs the cblas path here\n");
}
END_TEST

/* CLBlast status codes become kiln statuses with the code in the message. */
START_TEST(test_clblast_status)
{
    kiln_device *dev = devs[0];
    ck_assert_int_eq(kiln__clblast_status(0, dev, "CLBlastSgemm"), KILN_OK);
    expect_error(kiln__clblast_status(-2044, dev, "CLBlastDgemm"), KILN_ERR_UNSUPPORTED,
                 "CLBlastDgemm failed with CLBlastNoDoublePrecision (-2044)", "double");
    expect_error(kiln__clblast_status(-2045, dev, "CLBlastSgemm"), KILN_ERR_UNSUPPORTED,
                 "CLBlastNoHalfPrecision (-2045)", "half");
    expect_error(kiln__clblast_status(-1017, dev, "CLBlastSgemm"), KILN_ERR_OPENCL,
                 "CLBlastInvalidDimension (-1017)", "kiln bug");
    expect_error(kiln__clblast_status(-2040, dev, "CLBlastSgemm"), KILN_ERR_OPENCL,
                 "CLBlastUnknownError (-2040)", kiln_device_spec(dev));
    expect_error(kiln__clblast_status(-11, dev, "CLBlastSgemm"), KILN_ERR_BUILD_FAILED,
                 "CLBlastOpenCLBuildProgramFailure (-11)", "KILN_MATMUL=builtin");
    /* On the queue, CL_OUT_OF_RESOURCES is a kernel fault: the device is lost. */
    expect_error(kiln__clblast_status(-5, dev, "CLBlastSgemm"), KILN_ERR_DEVICE_LOST,
                 "CL_OUT_OF_RESOURCES", "CLBlastSgemm");
    kiln__device_clear_lost(dev);
}
END_TEST

/* fd (1 or 2) into a temporary file until restore_fd; returns the saved descriptor. */
static int capture_fd(int fd, FILE **file)
{
    fflush(fd == 1 ? stdout : stderr);
    *file = tmpfile();
    ck_assert_ptr_nonnull(*file);
    int saved = dup(fd);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_ge(dup2(fileno(*file), fd), 0);
    return saved;
}

/* Put fd back and return what was written to it meanwhile (malloc'd, NUL-terminated). */
static char *restore_fd(int fd, int saved, FILE *file)
{
    fflush(fd == 1 ? stdout : stderr);
    ck_assert_int_ge(dup2(saved, fd), 0);
    close(saved);
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    ck_assert_int_ge(size, 0);
    char *text = calloc((size_t)size + 1, 1);
    ck_assert_ptr_nonnull(text);
    rewind(file);
    ck_assert_uint_eq(fread(text, 1, (size_t)size, file), (size_t)size);
    fclose(file);
    return text;
}

static int count_of(const char *text, const char *sub)
{
    int n = 0;
    for (const char *p = strstr(text, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

/* CLBlast prints a failed build's compiler log on stdout (1.5.3, compile.cpp): kiln keeps it
 * off stdout. CLBLAST_BUILD_OPTIONS breaks CLBlast's kernel source; this runs first in the
 * process, before any CLBlast routine has been compiled (and cached by CLBlast). Then a first
 * real call, which compiles for real, prints nothing either. */
START_TEST(test_clblast_quiet)
{
    setenv("KILN_MATMUL", "clblast", 1);
    /* All failed builds first: CLBlast keeps a built binary per platform and device name, and
     * the two devices of -2dev share one. */
    for (int d = 0; d < ndevs; d++) {
        const kiln__matmul_path *path;
        if (kiln__matmul_select(devs[d], "clblast", "t", &path) != KILN_OK)
            continue;
        kiln__clblast_reset(devs[d]);
        setenv("CLBLAST_BUILD_OPTIONS", "-Dvoid=kiln_test_broken_type", 1);
        float v[4] = {1, 2, 3, 4};
        kiln_tensor *a, *c = (kiln_tensor *)1;
        ck_assert_int_eq(kiln_tensor_from_host(devs[d], KILN_F32, 2, (int64_t[]){2, 2}, v, &a), 0);
        FILE *f;
        int saved = capture_fd(1, &f);
        kiln_status s = kiln_matmul(a, a, &c);
        char *out = restore_fd(1, saved, f);
        unsetenv("CLBLAST_BUILD_OPTIONS");
        kiln_tensor_release(a);
        expect_error(s, KILN_ERR_BUILD_FAILED, "CLBlastOpenCLBuildProgramFailure (-11)",
                     kiln_device_spec(devs[d]));
        ck_assert_ptr_null(c);
        ck_assert_msg(out[0] == '\0', "a failed CLBlast build printed on stdout: '%.300s'", out);
        free(out);
    }
    for (int d = 0; d < ndevs; d++) {
        /* CLBlast's kernels are too large to run under the simulator. */
        if (!path_runs(devs[d], "clblast"))
            continue;
        FILE *f;
        int saved = capture_fd(1, &f);
        check_product(devs[d], "clblast", KILN_F32, mat(9, 5), mat(5, 7), 0);
        char *out = restore_fd(1, saved, f);
        ck_assert_msg(out[0] == '\0', "a first CLBlast matmul printed on stdout: '%.300s'", out);
        free(out);
    }
    unsetenv("KILN_MATMUL");
}
END_TEST

static int gemm_calls, gemm_status;

static int failing_gemm(const kiln__matmul_problem *p, const char **fn)
{
    (void)p;
    *fn = "CLBlastSgemm";
    gemm_calls++;
    return gemm_status;
}

/* One automatic matmul on dev with CLBlast failing with `status`; the kiln status it gave. */
static kiln_status failing_matmul(kiln_device *dev, int status)
{
    float v[4] = {1, 2, 3, 4};
    kiln_tensor *a, *c = (kiln_tensor *)1;
    ck_assert_int_eq(kiln_tensor_from_host(dev, KILN_F32, 2, (int64_t[]){2, 2}, v, &a), 0);
    gemm_status = status;
    kiln__clblast_gemm = failing_gemm;
    kiln_status s = kiln_matmul(a, a, &c);
    kiln__clblast_gemm = kiln__clblast_gemm_real;
    if (s != KILN_OK)
        ck_assert_ptr_null(c);
    kiln_tensor_release(c == (kiln_tensor *)1 ? NULL : c);
    kiln_tensor_release(a);
    return s;
}

/* CLBlast failing (injected at kiln's call of it): the automatic path computes the product with
 * the built-in kernel, from then on uses it, says why and logs it once at KILN_LOG=info; a
 * forced KILN_MATMUL=clblast returns the error; nothing leaks. */
START_TEST(test_clblast_fallback)
{
    kiln__matmul_clblast_any_device = true; /* so PoCL's CPU devices take CLBlast too */
    for (int d = 0; d < ndevs; d++) {
        kiln_device *dev = devs[d];
        const kiln__matmul_path *path;
        if (kiln__matmul_select(dev, "clblast", "t", &path) != KILN_OK)
            continue;
        kiln__clblast_reset(dev);
        unsetenv("KILN_MATMUL");
        ck_assert_str_eq(kiln_matmul_path(dev), "clblast");
        ck_assert_str_eq(kiln_matmul_path_reason(dev), "the default on GPUs: CLBlast");
        kiln_memory_stats before, after;
        ck_assert_int_eq(kiln_device_memory_stats(dev, &before), KILN_OK);

        setenv("KILN_LOG", "info", 1);
        FILE *f;
        int saved = capture_fd(2, &f);
        gemm_calls = 0;
        gemm_status = -2040; /* CLBlastUnknownError */
        kiln__clblast_gemm = failing_gemm;
        int64_t s = simulated(dev) ? 9 : 61;
        check_product(dev, NULL, KILN_F32, mat(s, s + 2), mat(s + 2, s - 3), 0);
        check_product(dev, NULL, KILN_F32, (operand){3, {3, 5, 4}}, (operand){3, {3, 4, 6}}, 0);
        if (has_fp64(dev))
            check_product(dev, NULL, KILN_F64, mat(7, 3), mat(3, 5), 0);
        char *err = restore_fd(2, saved, f);
        unsetenv("KILN_LOG");
        ck_assert_int_eq(gemm_calls, 1);
        char want[256];
        snprintf(want, sizeof want,
                 "kiln: info: %s: CLBlast failed with CLBlastUnknownError (-2040); matmul uses "
                 "the built-in kernel from now on\n",
                 kiln_device_spec(dev));
        ck_assert_msg(count_of(err, want) == 1, "'%s' logged once in '%s'", want, err);
        free(err);
        ck_assert_str_eq(kiln_matmul_path(dev), "builtin");
        ck_assert_str_eq(kiln_matmul_path_reason(dev),
                         "CLBlast failed with CLBlastUnknownError (-2040) in CLBlastSgemm; matmul "
                         "uses the built-in kernel from now on");

        /* Forced: the error, no fallback, nothing allocated. */
        setenv("KILN_MATMUL", "clblast", 1);
        ck_assert_str_eq(kiln_matmul_path_reason(dev), "forced by KILN_MATMUL");
        expect_error(failing_matmul(dev, -2040), KILN_ERR_OPENCL,
                     "CLBlastSgemm failed with CLBlastUnknownError (-2040)", kiln_device_spec(dev));
        expect_error(failing_matmul(dev, -11), KILN_ERR_BUILD_FAILED,
                     "CLBlastOpenCLBuildProgramFailure (-11)", kiln_device_spec(dev));
        /* A kernel fault on the queue loses the device, forced or not. */
        expect_error(failing_matmul(dev, -5), KILN_ERR_DEVICE_LOST, "CL_OUT_OF_RESOURCES",
                     "CLBlastSgemm");
        kiln__device_clear_lost(dev);
        unsetenv("KILN_MATMUL");
        kiln__clblast_reset(dev);
        expect_error(failing_matmul(dev, -4), KILN_ERR_DEVICE_LOST,
                     "CL_MEM_OBJECT_ALLOCATION_FAILURE", "CLBlastSgemm");
        kiln__device_clear_lost(dev);
        /* An argument error is kiln's own bug: reported, not hidden by a fallback. */
        expect_error(failing_matmul(dev, -1017), KILN_ERR_OPENCL, "CLBlastInvalidDimension",
                     "kiln bug");
        ck_assert_str_eq(kiln_matmul_path(dev), "clblast");
        ck_assert_int_eq(kiln_device_synchronize(dev), KILN_OK);
        ck_assert_int_eq(kiln_device_memory_stats(dev, &after), KILN_OK);
        ck_assert_uint_eq(after.allocated_bytes, before.allocated_bytes);
        kiln__clblast_reset(dev);
    }
    kiln__matmul_clblast_any_device = false;
}
END_TEST

/* Tensors of two devices: KILN_ERR_DEVICE_MISMATCH naming both (needs two devices). */
START_TEST(test_device_mismatch)
{
    if (ndevs < 2)
        return;
    kiln_tensor *a, *b, *c = (kiln_tensor *)1;
    ck_assert_int_eq(kiln_tensor_empty(devs[0], KILN_F32, 2, (int64_t[]){2, 2}, &a), 0);
    ck_assert_int_eq(kiln_tensor_empty(devs[1], KILN_F32, 2, (int64_t[]){2, 2}, &b), 0);
    expect_error(kiln_matmul(a, b, &c), KILN_ERR_DEVICE_MISMATCH, kiln_device_spec(devs[0]),
                 kiln_device_spec(devs[1]));
    ck_assert_ptr_null(c);
    kiln_tensor *o;
    ck_assert_int_eq(kiln_tensor_empty(devs[1], KILN_F32, 2, (int64_t[]){2, 2}, &o), 0);
    expect_error(kiln_matmul_trans_out(a, a, 0, o), KILN_ERR_DEVICE_MISMATCH,
                 kiln_device_spec(devs[0]), kiln_device_spec(devs[1]));
    kiln_tensor_release(o);
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}
END_TEST

Suite *matmul_suite(void)
{
    Suite *s = suite_create("matmul");
    /* First: CLBlast's first calls in the process, which compile its kernels. */
    TCase *clblast = tcase_create("clblast");
    tcase_add_unchecked_fixture(clblast, setup_devices, teardown_devices);
    tcase_add_test(clblast, test_clblast_quiet);
    tcase_add_test(clblast, test_clblast_fallback);
    suite_add_tcase(s, clblast);
    TCase *paths = tcase_create("paths");
    tcase_add_unchecked_fixture(paths, setup_devices, teardown_devices);
    tcase_add_test(paths, test_square_sizes);
    tcase_add_test(paths, test_transposes);
    tcase_add_test(paths, test_batches);
    tcase_add_test(paths, test_f64);
    tcase_add_test(paths, test_narrow);
    tcase_add_test(paths, test_default_and_fallback);
    tcase_add_test(paths, test_cblas_parts);
    tcase_add_test(paths, test_queue_order);
    tcase_add_test(paths, test_empty);
    tcase_add_test(paths, test_out);
    tcase_add_test(paths, test_builtin_split_launches);
    suite_add_tcase(s, paths);

    TCase *choice = tcase_create("choice");
    tcase_add_unchecked_fixture(choice, setup_devices, teardown_devices);
    tcase_add_test(choice, test_path_choice);
    tcase_add_test(choice, test_unavailable_path);
    suite_add_tcase(s, choice);

    TCase *errors = tcase_create("errors");
    tcase_add_unchecked_fixture(errors, setup_devices, teardown_devices);
    tcase_add_test(errors, test_bad_inputs);
    tcase_add_test(errors, test_device_mismatch);
    tcase_add_test(errors, test_cblas_faults);
    tcase_add_test(errors, test_cblas_in_place);
    tcase_add_test(errors, test_clblast_status);
    suite_add_tcase(s, errors);
    return s;
}
