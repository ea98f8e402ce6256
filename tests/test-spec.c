/* test-spec.c - device numbering, spec parsing, KILN_DEVICE and KILN_VISIBLE_DEVICES on fake
 * device lists (no OpenCL needed). */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "lib/spec.h"
#include "testutil.h"

static kiln__devdesc fake(kiln_device_type type, int p, int d, bool nvidia, uint32_t cu,
                          uint32_t mhz)
{
    kiln__devdesc x;
    memset(&x, 0, sizeof x);
    x.type = type;
    x.platform_index = p;
    x.device_index = d;
    x.nvidia = nvidia;
    x.compute_units = cu;
    x.clock_mhz = mhz;
    x.usable = true;
    return x;
}

/* An integrated Intel GPU enumerated first (platform 0), a faster NVIDIA GPU second
 * (platform 1), a PoCL CPU third (platform 2). */
static kiln__devdesc mixed[3];

static void setup_mixed(void)
{
    mixed[0] = fake(KILN_DEVICE_GPU, 0, 0, false, 24, 1150);
    mixed[1] = fake(KILN_DEVICE_GPU, 1, 0, true, 132, 1980);
    mixed[2] = fake(KILN_DEVICE_CPU, 2, 0, false, 16, 3000);
    kiln__spec_number(mixed, 3, false);
}

/* Resolve spec over d and return the index (the status must be KILN_OK). */
static int resolve_ok(const char *spec, const kiln__devdesc *d, int n, const char *env)
{
    int i = -7;
    kiln_status s = kiln__spec_resolve(spec, d, n, env, &i);
    ck_assert_msg(s == KILN_OK, "'%s' gave %s: %s", spec, kiln_status_string(s), kiln_last_error());
    ck_assert_int_ge(i, 0);
    ck_assert_int_lt(i, n);
    return i;
}

/* Resolve spec over d; the status must be want, and out must stay untouched. */
static void resolve_fails(const char *spec, const kiln__devdesc *d, int n, const char *env,
                          kiln_status want)
{
    int i = -7;
    kiln_status s = kiln__spec_resolve(spec, d, n, env, &i);
    ck_assert_msg(s == want, "'%s' gave %s, expected %s (%s)", spec, kiln_status_string(s),
                  kiln_status_string(want), kiln_last_error());
    ck_assert_int_eq(i, -7);
    ck_assert_str_ne(kiln_last_error(), "");
}

static const char *spec_of(const kiln__devdesc *d)
{
    static char buf[64];
    kiln__spec_format(d, buf, sizeof buf);
    return buf;
}

START_TEST(classify_several_type_bits)
{
    ck_assert_int_eq(kiln__classify(CL_DEVICE_TYPE_GPU), KILN_DEVICE_GPU);
    ck_assert_int_eq(kiln__classify(CL_DEVICE_TYPE_CPU), KILN_DEVICE_CPU);
    ck_assert_int_eq(kiln__classify(CL_DEVICE_TYPE_ACCELERATOR), KILN_DEVICE_ACCELERATOR);
    ck_assert_int_eq(kiln__classify(CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_CPU), KILN_DEVICE_GPU);
    ck_assert_int_eq(kiln__classify(CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR),
                     KILN_DEVICE_GPU);
    ck_assert_int_eq(kiln__classify(CL_DEVICE_TYPE_ACCELERATOR | CL_DEVICE_TYPE_CPU),
                     KILN_DEVICE_ACCELERATOR);
    ck_assert_int_eq(kiln__classify(CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_DEFAULT), KILN_DEVICE_GPU);
    ck_assert_int_eq(kiln__classify(CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_DEFAULT), KILN_DEVICE_CPU);
    ck_assert_str_eq(kiln__type_name(KILN_DEVICE_GPU), "gpu");
    ck_assert_str_eq(kiln__type_name(KILN_DEVICE_CPU), "cpu");
    ck_assert_str_eq(kiln__type_name(KILN_DEVICE_ACCELERATOR), "accelerator");
}
END_TEST

START_TEST(mixed_numbering)
{
    /* The NVIDIA GPU (132 x 1980) is faster than the iGPU (24 x 1150) though listed second. */
    ck_assert_str_eq(spec_of(&mixed[1]), "gpu:0");
    ck_assert_str_eq(spec_of(&mixed[0]), "gpu:1");
    ck_assert_str_eq(spec_of(&mixed[2]), "cpu:0");
    ck_assert_int_eq(mixed[1].rank, 0);
    ck_assert_int_eq(mixed[0].rank, 1);
    ck_assert_int_eq(mixed[2].rank, 2);
    char list[128];
    kiln__spec_list(mixed, 3, list, sizeof list);
    ck_assert_str_eq(list, "gpu:0, gpu:1, cpu:0");
}
END_TEST

START_TEST(mixed_resolve)
{
    ck_assert_int_eq(resolve_ok("auto", mixed, 3, NULL), 1);
    ck_assert_int_eq(resolve_ok("gpu", mixed, 3, NULL), 1);
    ck_assert_int_eq(resolve_ok("gpu:0", mixed, 3, NULL), 1);
    ck_assert_int_eq(resolve_ok("gpu:1", mixed, 3, NULL), 0);
    ck_assert_int_eq(resolve_ok("cpu", mixed, 3, NULL), 2);
    ck_assert_int_eq(resolve_ok("cpu:0", mixed, 3, NULL), 2);
    ck_assert_int_eq(resolve_ok("cuda", mixed, 3, NULL), 1);
    ck_assert_int_eq(resolve_ok("cuda:0", mixed, 3, NULL), 1);
    ck_assert_int_eq(resolve_ok("opencl:0:0", mixed, 3, NULL), 0);
    ck_assert_int_eq(resolve_ok("opencl:1:0", mixed, 3, NULL), 1);
    ck_assert_int_eq(resolve_ok("opencl:2:0", mixed, 3, NULL), 2);
    ck_assert_int_eq(resolve_ok("gpu:00", mixed, 3, NULL), 1);
}
END_TEST

START_TEST(mixed_no_such_device)
{
    resolve_fails("gpu:2", mixed, 3, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("no device 'gpu:2'");
    ASSERT_ERROR_HAS("available: gpu:0, gpu:1, cpu:0");
    resolve_fails("cpu:1", mixed, 3, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("cpu:1");
    /* cuda:N counts NVIDIA GPUs only: the iGPU is gpu:1 but not cuda:1. */
    resolve_fails("cuda:1", mixed, 3, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("NVIDIA");
    resolve_fails("accelerator:0", mixed, 3, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("available: gpu:0, gpu:1, cpu:0");
    resolve_fails("accelerator", mixed, 3, NULL, KILN_ERR_NO_DEVICE);
    resolve_fails("opencl:0:1", mixed, 3, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("opencl:0:1");
    resolve_fails("opencl:3:0", mixed, 3, NULL, KILN_ERR_NO_DEVICE);
    resolve_fails("gpu:999999", mixed, 3, NULL, KILN_ERR_NO_DEVICE);
}
END_TEST

START_TEST(identical_gpus_stable)
{
    kiln__devdesc d[3] = {
        fake(KILN_DEVICE_GPU, 0, 0, true, 80, 1400),
        fake(KILN_DEVICE_GPU, 0, 1, true, 80, 1400),
        fake(KILN_DEVICE_GPU, 1, 0, false, 80, 1400),
    };
    for (int round = 0; round < 3; round++) {
        kiln__spec_number(d, 3, false);
        ck_assert_str_eq(spec_of(&d[0]), "gpu:0");
        ck_assert_str_eq(spec_of(&d[1]), "gpu:1");
        ck_assert_str_eq(spec_of(&d[2]), "gpu:2");
    }
    ck_assert_int_eq(resolve_ok("cuda:1", d, 3, NULL), 1);
    resolve_fails("cuda:2", d, 3, NULL, KILN_ERR_NO_DEVICE);
    /* Same speed from different products still ties: 40 x 2800 == 80 x 1400. */
    d[1].compute_units = 40;
    d[1].clock_mhz = 2800;
    kiln__spec_number(d, 3, false);
    ck_assert_str_eq(spec_of(&d[1]), "gpu:1");
    /* The faster one moves first; the others keep their order. */
    d[2].clock_mhz = 1401;
    kiln__spec_number(d, 3, false);
    ck_assert_str_eq(spec_of(&d[2]), "gpu:0");
    ck_assert_str_eq(spec_of(&d[0]), "gpu:1");
    ck_assert_str_eq(spec_of(&d[1]), "gpu:2");
}
END_TEST

START_TEST(cpus_in_enumeration_order)
{
    /* CPUs are not sorted by speed: PoCL's "pthread pthread" devices keep their order. */
    kiln__devdesc d[3] = {
        fake(KILN_DEVICE_CPU, 0, 0, false, 2, 1000),
        fake(KILN_DEVICE_CPU, 0, 1, false, 64, 3000),
        fake(KILN_DEVICE_ACCELERATOR, 1, 0, false, 1, 100),
    };
    kiln__spec_number(d, 3, false);
    ck_assert_str_eq(spec_of(&d[0]), "cpu:0");
    ck_assert_str_eq(spec_of(&d[1]), "cpu:1");
    ck_assert_str_eq(spec_of(&d[2]), "accelerator:0");
    ck_assert_int_eq(d[2].rank, 0); /* accelerators list before CPUs */
    ck_assert_int_eq(d[0].rank, 1);
    /* auto prefers the CPU over an accelerator (gpu:0, else cpu:0). */
    ck_assert_int_eq(resolve_ok("auto", d, 3, NULL), 0);
    ck_assert_int_eq(resolve_ok("accelerator:0", d, 3, NULL), 2);
    ck_assert_int_eq(resolve_ok("cpu:1", d, 3, NULL), 1);
}
END_TEST

START_TEST(no_gpu)
{
    kiln__devdesc d[1] = {fake(KILN_DEVICE_CPU, 0, 0, false, 4, 2000)};
    kiln__spec_number(d, 1, false);
    ck_assert_int_eq(resolve_ok("auto", d, 1, NULL), 0);
    resolve_fails("gpu", d, 1, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("available: cpu:0");
    resolve_fails("gpu:0", d, 1, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("no device 'gpu:0'; available: cpu:0");
    resolve_fails("cuda:0", d, 1, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("no NVIDIA GPU");
    ASSERT_ERROR_HAS("gpu:N");
    resolve_fails("cuda", d, 1, NULL, KILN_ERR_NO_DEVICE);
}
END_TEST

START_TEST(only_accelerator)
{
    kiln__devdesc d[1] = {fake(KILN_DEVICE_ACCELERATOR, 0, 0, false, 4, 500)};
    kiln__spec_number(d, 1, false);
    ck_assert_int_eq(resolve_ok("auto", d, 1, NULL), 0);
    resolve_fails("cpu", d, 1, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("available: accelerator:0");
}
END_TEST

START_TEST(no_devices)
{
    kiln__devdesc d[1];
    kiln__spec_number(d, 0, false);
    resolve_fails("auto", d, 0, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("available: none");
    resolve_fails("cpu:0", d, 0, NULL, KILN_ERR_NO_DEVICE);
    resolve_fails("opencl:0:0", d, 0, NULL, KILN_ERR_NO_DEVICE);
    /* Malformed is still malformed without devices. */
    resolve_fails("cpu:x", d, 0, NULL, KILN_ERR_INVALID_ARGUMENT);
    char list[16];
    kiln__spec_list(d, 0, list, sizeof list);
    ck_assert_str_eq(list, "none");
}
END_TEST

START_TEST(unusable_not_numbered)
{
    kiln__devdesc d[3] = {
        fake(KILN_DEVICE_GPU, 0, 0, false, 100, 2000),
        fake(KILN_DEVICE_GPU, 0, 1, false, 10, 1000),
        fake(KILN_DEVICE_CPU, 1, 0, false, 4, 2000),
    };
    d[0].usable = false; /* e.g. CL_DEVICE_AVAILABLE false or no compiler */
    kiln__spec_number(d, 3, false);
    ck_assert_int_eq(d[0].type_index, -1);
    ck_assert_int_eq(d[0].rank, -1);
    ck_assert(!d[0].visible);
    ck_assert_str_eq(spec_of(&d[1]), "gpu:0");
    ck_assert_int_eq(resolve_ok("auto", d, 3, NULL), 1);
    resolve_fails("gpu:1", d, 3, NULL, KILN_ERR_NO_DEVICE);
    resolve_fails("opencl:0:0", d, 3, NULL, KILN_ERR_NO_DEVICE);
}
END_TEST

/* Every malformed spec: KILN_ERR_INVALID_ARGUMENT and a message saying what is wrong. */
static const struct {
    const char *spec;
    const char *msg;
} malformed[] = {
    {"", "empty device spec"},
    {"gpu:", "expected a device index"},
    {"gpu:-1", "expected a device index"},
    {"gpu:+1", "expected a device index"},
    {"gpu:1x", "unexpected 'x'"},
    {"gpu:0x1", "unexpected 'x1'"},
    {"gpu:1e3", "unexpected 'e3'"},
    {"gpu:123456789012345678901234567890", "too large"},
    {"gpu:99999999999999999999", "too large"},
    {"gpu:4294967296", "too large"},
    {"gpu:1000001", "too large"},
    {" gpu:0", "unexpected space 0x20 at position 0"},
    {"gpu:0 ", "position 5"},
    {"gpu :0", "position 3"},
    {"GPU", "lower-case"},
    {"Cpu:0", "lower-case"},
    {"gpu0", "unknown device spec 'gpu0'"},
    {"tpu:0", "unknown device spec 'tpu:0'"},
    {"nvidia", "unknown device spec"},
    {"auto:0", "unknown device spec"},
    {":0", "unknown device spec"},
    {"gpu::0", "expected a device index"},
    {"cpu:0:1", "unexpected ':1'"},
    {"opencl", "expected opencl:P:D"},
    {"opencl:0", "expected opencl:P:D"},
    {"opencl:0:", "expected a device index"},
    {"opencl:0:0:0", "unexpected ':0'"},
    {"opencl:-1:0", "expected a device index"},
    {"gpu:0,cpu:0", "unexpected ',cpu:0'"},
    {"gpu\x01", "\\x01"},
    {"gpu:0\n", "0x0a"},
    {"gpu:0\t", "position 5"},
    {"gpu\x7f", "0x7f"},
    {"g\xc3\xa9pu", "\\xc3"},
    {"\xff", "0xff"},
    {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
     "too long"},
};

START_TEST(malformed_specs)
{
    const char *spec = malformed[_i].spec;
    resolve_fails(spec, mixed, 3, NULL, KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS(malformed[_i].msg);
    /* Messages never carry raw control bytes. */
    for (const char *p = kiln_last_error(); *p; p++)
        ck_assert_msg((unsigned char)*p >= 0x20, "control byte in message for spec %d", _i);
}
END_TEST

START_TEST(malformed_hints_usage)
{
    resolve_fails("gpu:1x", mixed, 3, NULL, KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("gpu:1x");
    ASSERT_ERROR_HAS("use auto, cpu, cpu:N, gpu, gpu:N");
    resolve_fails("bogus", mixed, 3, NULL, KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("opencl:P:D");
}
END_TEST

START_TEST(null_arguments)
{
    int i = -7;
    ck_assert_int_eq(kiln__spec_resolve(NULL, mixed, 3, NULL, &i), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("NULL");
    ck_assert_int_eq(i, -7);
    ck_assert_int_eq(kiln__spec_resolve("auto", mixed, 3, NULL, NULL), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("NULL");
}
END_TEST

START_TEST(kiln_device_env)
{
    /* KILN_DEVICE is what auto means; explicit specs ignore it. */
    ck_assert_int_eq(resolve_ok("auto", mixed, 3, "cpu:0"), 2);
    ck_assert_int_eq(resolve_ok("auto", mixed, 3, "gpu:1"), 0);
    ck_assert_int_eq(resolve_ok("auto", mixed, 3, "opencl:1:0"), 1);
    ck_assert_int_eq(resolve_ok("auto", mixed, 3, "auto"), 1);
    ck_assert_int_eq(resolve_ok("auto", mixed, 3, ""), 1);
    ck_assert_int_eq(resolve_ok("gpu:1", mixed, 3, "cpu:0"), 0);
    ck_assert_int_eq(resolve_ok("cpu", mixed, 3, "gpu:x"), 2);
}
END_TEST

START_TEST(kiln_device_env_bad)
{
    resolve_fails("auto", mixed, 3, "gpu:x", KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("KILN_DEVICE='gpu:x'");
    ASSERT_ERROR_HAS("expected a device index");
    resolve_fails("auto", mixed, 3, "GPU", KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("KILN_DEVICE");
    resolve_fails("auto", mixed, 3, "gpu:7", KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("KILN_DEVICE='gpu:7'");
    ASSERT_ERROR_HAS("available: gpu:0, gpu:1, cpu:0");
    resolve_fails("auto", mixed, 3, "cuda:3", KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("KILN_DEVICE");
    resolve_fails("auto", mixed, 3, "gpu:0\x1b[31m", KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("KILN_DEVICE='gpu:0\\x1b[31m'");
    resolve_fails("auto", mixed, 3, " ", KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("KILN_DEVICE");
}
END_TEST

/* Apply a KILN_VISIBLE_DEVICES value to a freshly numbered copy of mixed. */
static kiln_status visible(const char *list, kiln__devdesc *d)
{
    memcpy(d, mixed, sizeof mixed);
    kiln__spec_number(d, 3, false);
    return kiln__spec_apply_visible(list, d, 3);
}

START_TEST(visible_hide)
{
    kiln__devdesc d[3];
    ck_assert_int_eq(visible("cpu:0", d), KILN_OK);
    ck_assert(!d[0].visible);
    ck_assert(!d[1].visible);
    ck_assert(d[2].visible);
    ck_assert_int_eq(resolve_ok("auto", d, 3, NULL), 2);
    resolve_fails("gpu:0", d, 3, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("available: cpu:0");
    resolve_fails("opencl:1:0", d, 3, NULL, KILN_ERR_NO_DEVICE);
}
END_TEST

START_TEST(visible_renumber)
{
    kiln__devdesc d[3];
    /* gpu:1 (the iGPU) alone becomes gpu:0. */
    ck_assert_int_eq(visible("gpu:1", d), KILN_OK);
    ck_assert_str_eq(spec_of(&d[0]), "gpu:0");
    ck_assert_int_eq(d[0].rank, 0);
    ck_assert_int_eq(resolve_ok("auto", d, 3, NULL), 0);
    ck_assert_int_eq(resolve_ok("opencl:0:0", d, 3, NULL), 0);
    resolve_fails("cuda:0", d, 3, NULL, KILN_ERR_NO_DEVICE);
    resolve_fails("cpu:0", d, 3, NULL, KILN_ERR_NO_DEVICE);
    /* The numbering of the entries is the full one, by opencl address too. */
    ck_assert_int_eq(visible("opencl:2:0", d), KILN_OK);
    ck_assert_int_eq(resolve_ok("auto", d, 3, NULL), 2);
}
END_TEST

START_TEST(visible_reorder)
{
    kiln__devdesc d[3];
    ck_assert_int_eq(visible("cpu:0,gpu:1,gpu:0", d), KILN_OK);
    ck_assert_str_eq(spec_of(&d[0]), "gpu:0"); /* iGPU listed first */
    ck_assert_str_eq(spec_of(&d[1]), "gpu:1");
    ck_assert_str_eq(spec_of(&d[2]), "cpu:0");
    ck_assert_int_eq(d[0].rank, 0);
    ck_assert_int_eq(d[1].rank, 1);
    ck_assert_int_eq(d[2].rank, 2); /* ranks stay GPUs first */
    ck_assert_int_eq(resolve_ok("auto", d, 3, NULL), 0);
    ck_assert_int_eq(resolve_ok("cuda:0", d, 3, NULL), 1);
    char list[128];
    kiln__spec_list(d, 3, list, sizeof list);
    ck_assert_str_eq(list, "gpu:0, gpu:1, cpu:0");
    /* Spaces around entries and duplicates are tolerated. */
    ck_assert_int_eq(visible(" gpu:1 , cpu:0,gpu:1", d), KILN_OK);
    ck_assert_str_eq(spec_of(&d[0]), "gpu:0");
    ck_assert_str_eq(spec_of(&d[2]), "cpu:0");
    ck_assert(!d[1].visible);
}
END_TEST

START_TEST(visible_empty_hides_all)
{
    kiln__devdesc d[3];
    ck_assert_int_eq(visible("", d), KILN_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(!d[i].visible);
    resolve_fails("auto", d, 3, NULL, KILN_ERR_NO_DEVICE);
    ASSERT_ERROR_HAS("available: none");
}
END_TEST

static const struct {
    const char *list;
    kiln_status status;
    const char *msg;
} bad_visible[] = {
    {"gpu:x", KILN_ERR_INVALID_ARGUMENT, "expected a device index"},
    {"gpu:0,,cpu:0", KILN_ERR_INVALID_ARGUMENT, "empty or over-long entry at position 6"},
    {"gpu:0,", KILN_ERR_INVALID_ARGUMENT, "trailing comma"},
    {",gpu:0", KILN_ERR_INVALID_ARGUMENT, "empty"},
    {" ", KILN_ERR_INVALID_ARGUMENT, "empty"},
    {"auto", KILN_ERR_INVALID_ARGUMENT, "'auto' cannot be listed"},
    {"GPU:0", KILN_ERR_INVALID_ARGUMENT, "lower-case"},
    {"gpu:0;cpu:0", KILN_ERR_INVALID_ARGUMENT, "unexpected ';cpu:0'"},
    {"gpu:5", KILN_ERR_NO_DEVICE, "no device 'gpu:5'; available: gpu:0, gpu:1, cpu:0"},
    {"cpu:0,cuda:1", KILN_ERR_NO_DEVICE, "cuda:1"},
    {"gpu:99999999999999999999999", KILN_ERR_INVALID_ARGUMENT, "too large"},
    {"cpu:0\x01", KILN_ERR_INVALID_ARGUMENT, "\\x01"},
};

START_TEST(visible_malformed)
{
    kiln__devdesc d[3];
    kiln_status s = visible(bad_visible[_i].list, d);
    ck_assert_msg(s == bad_visible[_i].status, "'%s' gave %s", bad_visible[_i].list,
                  kiln_status_string(s));
    ASSERT_ERROR_HAS("KILN_VISIBLE_DEVICES");
    ASSERT_ERROR_HAS(bad_visible[_i].msg);
    /* Nothing changed: the full numbering stands. */
    for (int i = 0; i < 3; i++) {
        ck_assert(d[i].visible);
        ck_assert_int_eq(d[i].type_index, mixed[i].type_index);
    }
}
END_TEST

Suite *spec_suite(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("numbering");
    tcase_add_checked_fixture(tc, setup_mixed, NULL);
    tcase_add_test(tc, classify_several_type_bits);
    tcase_add_test(tc, mixed_numbering);
    tcase_add_test(tc, identical_gpus_stable);
    tcase_add_test(tc, cpus_in_enumeration_order);
    tcase_add_test(tc, unusable_not_numbered);
    suite_add_tcase(s, tc);

    tc = tcase_create("resolve");
    tcase_add_checked_fixture(tc, setup_mixed, NULL);
    tcase_add_test(tc, mixed_resolve);
    tcase_add_test(tc, mixed_no_such_device);
    tcase_add_test(tc, no_gpu);
    tcase_add_test(tc, only_accelerator);
    tcase_add_test(tc, no_devices);
    tcase_add_test(tc, null_arguments);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_add_checked_fixture(tc, setup_mixed, NULL);
    tcase_add_loop_test(tc, malformed_specs, 0, (int)(sizeof malformed / sizeof malformed[0]));
    tcase_add_test(tc, malformed_hints_usage);
    suite_add_tcase(s, tc);

    tc = tcase_create("environment");
    tcase_add_checked_fixture(tc, setup_mixed, NULL);
    tcase_add_test(tc, kiln_device_env);
    tcase_add_test(tc, kiln_device_env_bad);
    tcase_add_test(tc, visible_hide);
    tcase_add_test(tc, visible_renumber);
    tcase_add_test(tc, visible_reorder);
    tcase_add_test(tc, visible_empty_hides_all);
    tcase_add_loop_test(tc, visible_malformed, 0,
                        (int)(sizeof bad_visible / sizeof bad_visible[0]));
    suite_add_tcase(s, tc);
    return s;
}
