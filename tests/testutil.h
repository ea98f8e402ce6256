/* testutil.h - helpers shared by the Check suites: status asserts, device fixture, test data. */
#ifndef KILN_TESTUTIL_H
#define KILN_TESTUTIL_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kiln_cl.h"

/* ---- status and message assertions ---------------------------------------------------------- */

/* expr (a kiln call) returns KILN_OK; on failure, the status and kiln_last_error() are shown. */
#define ASSERT_OK(expr)                                                                            \
    do {                                                                                           \
        kiln_status s_ = (expr);                                                                   \
        ck_assert_msg(s_ == KILN_OK, "%s failed: %s: %s", #expr, kiln_status_string(s_),           \
                      kiln_last_error());                                                          \
    } while (0)

/* kiln_last_error() contains the string text. */
#define ASSERT_ERROR_HAS(text)                                                                     \
    ck_assert_msg(strstr(kiln_last_error(), (text)) != NULL, "message \"%s\" lacks \"%s\"",        \
                  kiln_last_error(), (text))

/* expr returns status, and the message it leaves in kiln_last_error() contains text. */
#define ASSERT_FAILS(expr, status, text)                                                           \
    do {                                                                                           \
        kiln_status s_ = (expr);                                                                   \
        ck_assert_msg(s_ == (status), "%s gave %s, expected %s", #expr, kiln_status_string(s_),    \
                      kiln_status_string(status));                                                 \
        ASSERT_ERROR_HAS(text);                                                                    \
    } while (0)

/* ---- device fixture ------------------------------------------------------------------------- */

#define TEST_MAX_DEVICES 16

/* Devices under test (kiln_device_at order), filled by setup_devices(). */
extern kiln_device *devs[TEST_MAX_DEVICES];
extern int ndevs;

/* Fill devs with every device kiln sees (at least one, at most TEST_MAX_DEVICES). */
void setup_devices(void);

/* Synchronize every device in devs, asserting success: queued work (a launch whose result was
 * never read, the error tests' fills) must finish before exit, since Oclgrind leaks unfinished
 * commands and PoCL compiles kernels lazily on its worker thread. */
void teardown_devices(void);

/* The device a suite's single-device cases run on: the one KILN_DEVICE names when it is set
 * (scripts/gpu-check.sh runs every suite with KILN_DEVICE=gpu:0), else cpu:0 when there is one,
 * else whatever "auto" gives. Fails the test when there is no device at all. */
kiln_device *test_device(void);

/* A device other than dev, for cross-device cases: one sharing dev's OpenCL context when
 * same_context, else one in another context; NULL when there is none (the case then calls
 * test_skip and returns). */
kiln_device *test_other_device(kiln_device *dev, bool same_context);

/* Note that (part of) a case is skipped on this machine, and why: printed at once, and counted
 * in a summary line printed at exit ("N case(s) skipped"), so a GPU-only run shows what it did
 * not cover. */
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether dev is Oclgrind, which simulates every work-item: tests keep its sizes tiny. */
bool simulated(const kiln_device *dev);

/* Whether the full test tier runs (KILN_TEST_FULL=1, set by `meson test --setup full` and by CI):
 * slow cases then use their full sizes, depths and strides; the default tier uses smaller ones
 * that cover the same code paths (CONTRIBUTING.md, "Test tiers"). */
bool test_full(void);

/* quick in the default tier, full under KILN_TEST_FULL=1. */
long test_size(long quick, long full);

/* Whether dev supports f64. */
bool has_fp64(const kiln_device *dev);

/* ---- dtypes and host values ------------------------------------------------------------------ */

/* Every dtype, in enum order. */
extern const kiln_dtype all_dtypes[KILN_DTYPE_COUNT];

/* Product of the first ndim entries of shape (1 for ndim 0). */
int64_t numel_of(int ndim, const int64_t *shape);

/* IEEE binary16 bits -> float (exact). */
float half_to_float(uint16_t h);

/* float -> IEEE binary16 bits, rounded to nearest even; overflow gives infinity. */
uint16_t float_to_half(float f);

/* bfloat16 bits -> double (exact), from the fields. */
double bf16_to_double(uint16_t h);

/* double -> bfloat16 bits, rounded once to nearest even by search over the neighbours (a
 * reference independent of the library's bit tricks); overflow gives infinity, NaN 0x7fc0. */
uint16_t double_to_bf16(double a);

/* Store v as element i of a host array of dtype dt (floats round, integers truncate). */
void store_value(kiln_dtype dt, void *buf, int64_t i, double v);

/* Element i of a host array of dtype dt, as double. */
double load_value(kiln_dtype dt, const void *buf, int64_t i);

/* ---- tensors from and to double arrays ------------------------------------------------------- */

/* A tensor of dt and shape on dev holding v (numel_of(ndim, shape) values, stored by
 * store_value). */
kiln_tensor *upload(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *shape,
                    const double *v);

/* t's elements as a malloc'd array of doubles (free() it). */
double *download(const kiln_tensor *t);

/* A malloc'd host copy of t's bytes, in its dtype (free() it). */
void *read_host(const kiln_tensor *t);

/* ---- seeded random data ---------------------------------------------------------------------- */

/* Uniform in [0, 1): xorshift64* from a fixed seed, so every run sees the same data. */
double rnd(void);

/* n random values exactly representable in dt (a reference then sees what the device sees):
 * f32/f64 in [-1, 1), f16 and bf16 multiples of 1/16 in [-4, 4], u8 in [0, 255], other integers in
 * [-1000, 1000] (ties are likely). */
void fill_values(kiln_dtype dt, double *v, int64_t n);

/* A binary op's kind as KILN_BINARY_OP_MAP gives it: a comparison (u8 result), and an op on
 * floating dtypes only; so that adding an op to the table needs no edit here. */
static inline bool test_binary_is_compare(int op)
{
#define TEST_BINARY_CMP(NAME, num, name, kind) || (op == (num) && TEST_KIND_##kind == 2)
    enum { TEST_KIND_ARITH, TEST_KIND_FLOAT, TEST_KIND_COMPARE };
    return false KILN_BINARY_OP_MAP(TEST_BINARY_CMP);
#undef TEST_BINARY_CMP
}

static inline bool test_binary_float_only(int op)
{
#define TEST_BINARY_FLOAT(NAME, num, name, kind) || (op == (num) && TEST_KIND_##kind == 1)
    enum { TEST_KIND_ARITH, TEST_KIND_FLOAT, TEST_KIND_COMPARE };
    return false KILN_BINARY_OP_MAP(TEST_BINARY_FLOAT);
#undef TEST_BINARY_FLOAT
}

#endif
