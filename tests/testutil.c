/* testutil.c - helpers shared by the Check suites (see testutil.h). */
#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

kiln_device *devs[TEST_MAX_DEVICES];
int ndevs;

void setup_devices(void)
{
    ndevs = kiln_device_count(KILN_DEVICE_ALL);
    ck_assert_int_gt(ndevs, 0);
    if (ndevs > TEST_MAX_DEVICES)
        ndevs = TEST_MAX_DEVICES;
    for (int i = 0; i < ndevs; i++)
        devs[i] = kiln_device_at(i);
}

void teardown_devices(void)
{
    for (int i = 0; i < ndevs; i++)
        ck_assert_int_eq(kiln_device_synchronize(devs[i]), KILN_OK);
}

kiln_device *test_device(void)
{
    kiln_device *dev = NULL;
    const char *env = getenv("KILN_DEVICE");
    kiln_status s = kiln_device_get(env && *env ? "auto" : "cpu:0", &dev);
    if (s == KILN_ERR_NO_DEVICE)
        s = kiln_device_get("auto", &dev);
    ck_assert_msg(s == KILN_OK, "no device to test on: %s", kiln_last_error());
    return dev;
}

kiln_device *test_other_device(kiln_device *dev, bool same_context)
{
    cl_context ctx = kiln_device_cl_context(dev);
    for (int i = 0; i < kiln_device_count(KILN_DEVICE_ALL); i++) {
        kiln_device *d = kiln_device_at(i);
        if (d != dev && (kiln_device_cl_context(d) == ctx) == same_context)
            return d;
    }
    return NULL;
}

static int skipped;

static void print_skipped(void)
{
    printf("%d case(s) skipped on this machine (see SKIP lines)\n", skipped);
}

void test_skip(const char *fmt, ...)
{
    if (skipped++ == 0)
        atexit(print_skipped);
    va_list ap;
    va_start(ap, fmt);
    printf("SKIP: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

bool test_full(void)
{
    const char *v = getenv("KILN_TEST_FULL");
    return v && strcmp(v, "1") == 0;
}

long test_size(long quick, long full)
{
    return test_full() ? full : quick;
}

bool simulated(const kiln_device *dev)
{
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(dev, &info), KILN_OK);
    return strstr(info.platform, "Oclgrind") || strstr(info.name, "Oclgrind");
}

bool has_fp64(const kiln_device *dev)
{
    kiln_device_info info;
    ck_assert_int_eq(kiln_device_info_get(dev, &info), KILN_OK);
    return info.fp64;
}

const kiln_dtype all_dtypes[KILN_DTYPE_COUNT] = {KILN_F32, KILN_F64, KILN_F16, KILN_I32,
                                                 KILN_I64, KILN_U8,  KILN_BF16};

int64_t numel_of(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0    ? ldexpf((float)m, -24)
              : e == 31 ? (m ? NAN : INFINITY)
                        : ldexpf((float)(m | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

/* bfloat16 from its fields (sign, 8 exponent bits, 7 fraction bits), not by a shift. */
double bf16_to_double(uint16_t h)
{
    int e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(m | 0x80, e - 134);
    return (h & 0x8000) ? -v : v;
}

/* The value of positive bf16 pattern p for rounding: the first pattern past the largest finite
 * one stands for 2^128, where the values would go on (so overflow rounds as IEEE says). */
static double bf16_step_value(uint16_t p)
{
    return p == 0x7f80 ? ldexp(1.0, 128) : bf16_to_double(p);
}

uint16_t double_to_bf16(double a)
{
    if (isnan(a))
        return signbit(a) ? 0xffc0 : 0x7fc0;
    uint16_t sign = signbit(a) ? 0x8000 : 0;
    a = fabs(a);
    if (a >= ldexp(1.0, 128) - ldexp(1.0, 128 - 9)) /* halfway from the largest finite up */
        return sign | 0x7f80;
    uint16_t lo = 0, hi = 0x7f80;
    while (hi - lo > 1) { /* largest bf16 <= a */
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (bf16_step_value(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - bf16_step_value(lo), dh = bf16_step_value((uint16_t)(lo + 1)) - a;
    uint16_t r = dl < dh || (dl == dh && !(lo & 1)) ? lo : (uint16_t)(lo + 1);
    return sign | r;
}

/* Round to nearest even by brute force over the representable neighbours. */
uint16_t float_to_half(float f)
{
    if (isnan(f))
        return 0x7e00;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    float a = fabsf(f);
    if (a >= 65520.0f)
        return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7c00;
    while (hi - lo > 1) { /* largest half <= a */
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (half_to_float(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - half_to_float(lo), dh = half_to_float((uint16_t)(lo + 1)) - a;
    uint16_t r = dl < dh || (dl == dh && !(lo & 1)) ? lo : (uint16_t)(lo + 1);
    return sign | r;
}

void store_value(kiln_dtype dt, void *buf, int64_t i, double v)
{
    switch (dt) {
    case KILN_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case KILN_F64:
        ((double *)buf)[i] = v;
        break;
    case KILN_F16:
        ((uint16_t *)buf)[i] = float_to_half((float)v);
        break;
    case KILN_BF16:
        ((uint16_t *)buf)[i] = double_to_bf16(v);
        break;
    case KILN_I32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case KILN_I64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case KILN_U8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    }
}

double load_value(kiln_dtype dt, const void *buf, int64_t i)
{
    switch (dt) {
    case KILN_F32:
        return ((const float *)buf)[i];
    case KILN_F64:
        return ((const double *)buf)[i];
    case KILN_F16:
        return half_to_float(((const uint16_t *)buf)[i]);
    case KILN_BF16:
        return bf16_to_double(((const uint16_t *)buf)[i]);
    case KILN_I32:
        return ((const int32_t *)buf)[i];
    case KILN_I64:
        return (double)((const int64_t *)buf)[i];
    case KILN_U8:
        return ((const uint8_t *)buf)[i];
    }
    return NAN;
}

kiln_tensor *upload(kiln_device *dev, kiln_dtype dt, int ndim, const int64_t *shape,
                    const double *v)
{
    int64_t n = numel_of(ndim, shape);
    void *buf = malloc((size_t)(n ? n : 1) * 8);
    ck_assert_ptr_nonnull(buf);
    for (int64_t i = 0; i < n; i++)
        store_value(dt, buf, i, v[i]);
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, dt, ndim, shape, buf, &t));
    free(buf);
    return t;
}

double *download(const kiln_tensor *t)
{
    int64_t n = kiln_tensor_numel(t);
    void *buf = read_host(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof(double));
    ck_assert_ptr_nonnull(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = load_value(kiln_tensor_dtype(t), buf, i);
    free(buf);
    return v;
}

void *read_host(const kiln_tensor *t)
{
    void *buf = malloc(kiln_tensor_nbytes(t) + 8);
    ck_assert_ptr_nonnull(buf);
    ASSERT_OK(kiln_tensor_read(t, buf, kiln_tensor_nbytes(t)));
    return buf;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

double rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

void fill_values(kiln_dtype dt, double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double u = rnd();
        switch (dt) {
        case KILN_F32:
            v[i] = (float)(2 * u - 1);
            break;
        case KILN_F64:
            v[i] = 2 * u - 1;
            break;
        case KILN_F16:
        case KILN_BF16:
            v[i] = floor(u * 129) / 16 - 4;
            break; /* k/16 in [-4, 4] */
        case KILN_U8:
            v[i] = floor(u * 256);
            break;
        default:
            v[i] = floor(u * 2001) - 1000;
            break;
        }
    }
}
