/* kiln-info.c - list the devices kiln sees (text, one line each, or JSON) and smoke-check them. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "info/prewarm.h"
#include "kiln.h"

/* Exit codes (documented in usage() and kiln-info(1); scripts tell the failures apart by them). */
enum {
    EXIT_OK = 0,
    EXIT_FAIL = 1,        /* a --check failed (or output could not be written) */
    EXIT_USAGE = 2,       /* bad option or malformed spec */
    EXIT_NO_PLATFORM = 3, /* no OpenCL platform at all */
    EXIT_NO_DEVICE = 4,   /* platforms, but no usable (visible) device */
    EXIT_NO_SUCH = 5,     /* -d SPEC names no device, while others exist */
};

enum mode { MODE_DETAIL, MODE_LIST, MODE_JSON, MODE_CHECK, MODE_PREWARM, MODE_PREWARM_PART };

/* What parse_args found. */
typedef struct args {
    enum mode mode;
    const char *spec;
    const char *part; /* --prewarm-part I/N */
    int jobs;         /* --prewarm's processes (-j); 0: one per core */
} args;

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln-info [-l | --json | --check | --prewarm [-j N]] [-d SPEC]\n"
               "List the OpenCL devices kiln sees and what 'auto' selects.\n"
               "\n"
               "  (no option)        every device in detail, then the 'auto' choice and why\n"
               "  -l, --list         one line per device\n"
               "      --json         one JSON document (schema in kiln-info(1))\n"
               "  -d, --device SPEC  only this device: auto, cpu, cpu:N, gpu, gpu:N, cuda:N,\n"
               "                     accelerator:N, opencl:P:D\n"
               "      --check        build and run a small kernel on each device, verify the\n"
               "                     result, print OK/FAIL with build and run times (LOST:\n"
               "                     a kernel fault made the device unusable); where matmul\n"
               "                     uses CLBlast, also run a small f32 (and f64) matmul so\n"
               "                     CLBlast compiles its kernels now, and print the time\n"
               "      --prewarm      build every built-in kernel for each device (or -d SPEC)\n"
               "                     into kiln's program cache, so that programs start\n"
               "                     without compiling; run after installing kiln or a driver\n"
               "                     update (exit 1 if a kernel failed to build)\n"
               "  -j, --jobs N       --prewarm in N processes side by side (default: one per\n"
               "                     core, at most 8; PoCL compiles one program at a time in\n"
               "                     a process)\n"
               "  -h, --help         this text\n"
               "  -V, --version      kiln's version\n"
               "\n"
               "Environment: KILN_DEVICE (what auto means), KILN_VISIBLE_DEVICES (hide and\n"
               "renumber devices), KILN_LOG=info|debug.\n"
               "Exit status: 0 ok; 1 a check failed; 2 usage error (bad option or malformed\n"
               "spec); 3 no OpenCL platform; 4 no usable device; 5 no such device (-d SPEC\n"
               "names none of the devices there are).\n");
}

/* "5.8 GiB": sizes in binary units, as drivers count them. */
static const char *human(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
    return buf;
}

static const char *type_name(kiln_device_type t)
{
    return t == KILN_DEVICE_GPU ? "gpu" : t == KILN_DEVICE_ACCELERATOR ? "accelerator" : "cpu";
}

static const char *yes_no(bool b)
{
    return b ? "yes" : "no";
}

/* The devices to show: the one -d names, or all visible ones. */
typedef struct selection {
    kiln_device *devs[256];
    int n;
} selection;

static int select_devices(const char *spec, selection *sel)
{
    sel->n = 0;
    if (spec) {
        kiln_device *dev;
        kiln_status s = kiln_device_get(spec, &dev);
        if (s != KILN_OK) {
            fprintf(stderr, "kiln-info: %s\n", kiln_last_error());
            if (s == KILN_ERR_INVALID_ARGUMENT)
                return EXIT_USAGE;
            if (s == KILN_ERR_NO_PLATFORM)
                return EXIT_NO_PLATFORM;
            return kiln_device_count(KILN_DEVICE_ALL) > 0 ? EXIT_NO_SUCH : EXIT_NO_DEVICE;
        }
        sel->devs[sel->n++] = dev;
        return EXIT_OK;
    }
    int n = kiln_device_count(KILN_DEVICE_ALL);
    for (int i = 0; i < n && sel->n < 256; i++)
        sel->devs[sel->n++] = kiln_device_at(i);
    return EXIT_OK;
}

/* Say on stderr why there is no device at all (with what to install); EXIT_NO_PLATFORM or
 * EXIT_NO_DEVICE. */
static int no_device(void)
{
    kiln_device *dev;
    int code = EXIT_NO_DEVICE;
    /* The reason names the missing platform and the packages that provide one. */
    if (kiln_device_get("auto", &dev) == KILN_ERR_NO_PLATFORM) {
        fprintf(stderr, "kiln-info: %s\n", kiln_unavailable_reason(KILN_DEVICE_ALL));
        code = EXIT_NO_PLATFORM;
    } else {
        fprintf(stderr, "kiln-info: no usable OpenCL device: %s\n",
                kiln_unavailable_reason(KILN_DEVICE_ALL));
    }
    const char *notes = kiln_device_notes();
    if (*notes)
        fprintf(stderr, "kiln-info: notes:\n%s", notes);
    return code;
}

static void print_detail(kiln_device *dev)
{
    kiln_device_info in;
    char a[32], b[32], c[32];
    if (kiln_device_info_get(dev, &in) != KILN_OK) {
        printf("?  <error: %s>\n", kiln_last_error());
        return;
    }
    printf("%s  %s\n", in.spec, in.name);
    printf("  %-16s opencl:%s\n", "address", in.opencl);
    printf("  %-16s %s\n", "type", type_name(in.type));
    printf("  %-16s %s (0x%04x)\n", "vendor", in.vendor, (unsigned)in.vendor_id);
    printf("  %-16s %s (%s)\n", "platform", in.platform, in.platform_version);
    printf("  %-16s %s\n", "driver", in.driver_version);
    printf("  %-16s %s; %s\n", "OpenCL", in.opencl_version, in.opencl_c_version);
    printf("  %-16s %u\n", "compute units", (unsigned)in.compute_units);
    printf("  %-16s %u MHz\n", "max clock", (unsigned)in.max_clock_mhz);
    printf("  %-16s %s (max allocation %s)\n", "global memory",
           human(in.global_mem_bytes, a, sizeof a), human(in.max_alloc_bytes, b, sizeof b));
    printf("  %-16s %s\n", "local memory", human(in.local_mem_bytes, c, sizeof c));
    printf("  %-16s %llu\n", "max work-group", (unsigned long long)in.max_work_group_size);
    printf("  %-16s fp16 %s, fp64 %s\n", "floating point", yes_no(in.fp16), yes_no(in.fp64));
    printf("  %-16s %s\n", "unified memory", yes_no(in.unified_memory));
}

/* The "auto" line and, without a GPU, why. */
static void print_auto(void)
{
    kiln_device *dev;
    if (kiln_device_get("auto", &dev) == KILN_OK)
        printf("auto: %s\n", kiln_auto_reason());
    else
        printf("auto: none (%s)\n", kiln_last_error());
    if (!kiln_is_available(KILN_DEVICE_GPU))
        printf("gpu: unavailable: %s\n", kiln_unavailable_reason(KILN_DEVICE_GPU));
    const char *notes = kiln_device_notes();
    if (*notes)
        printf("notes:\n%s", notes);
}

static void print_list_line(kiln_device *dev)
{
    kiln_device_info in;
    char a[32];
    if (kiln_device_info_get(dev, &in) != KILN_OK) {
        printf("?  <error: %s>\n", kiln_last_error());
        return;
    }
    printf("%-8s opencl:%-5s %4u CU %5u MHz %10s  %s (%s)\n", in.spec, in.opencl,
           (unsigned)in.compute_units, (unsigned)in.max_clock_mhz,
           human(in.global_mem_bytes, a, sizeof a), in.name, in.platform);
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (s[0] >= 0xf5)
        n = 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* A JSON string (or null for NULL): quotes, backslashes and control bytes escaped; bytes that
 * are not valid UTF-8 become U+FFFD so that the document always parses. */
static void json_str(const char *s)
{
    if (!s) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p++);
        } else if (*p < 0x20 || *p == 0x7f) {
            printf("\\u%04x", *p++);
        } else if (*p < 0x80) {
            putchar(*p++);
        } else {
            int n = utf8_len(p);
            if (n == 0) {
                fputs("\\ufffd", stdout);
                p++;
            } else {
                fwrite(p, 1, (size_t)n, stdout);
                p += n;
            }
        }
    }
    putchar('"');
}

static void json_device(kiln_device *dev, bool last)
{
    kiln_device_info in;
    if (kiln_device_info_get(dev, &in) != KILN_OK)
        memset(&in, 0, sizeof in);
    printf("    {\"spec\": ");
    json_str(in.spec);
    printf(", \"opencl\": ");
    json_str(in.opencl);
    printf(",\n     \"name\": ");
    json_str(in.name);
    printf(", \"vendor\": ");
    json_str(in.vendor);
    printf(", \"platform\": ");
    json_str(in.platform);
    printf(", \"type\": ");
    json_str(type_name(in.type));
    printf(",\n     \"driver_version\": ");
    json_str(in.driver_version);
    printf(", \"opencl_version\": ");
    json_str(in.opencl_version);
    printf(", \"opencl_c_version\": ");
    json_str(in.opencl_c_version);
    printf(",\n     \"compute_units\": %u, \"max_clock_mhz\": %u, \"global_mem_bytes\": %llu,"
           " \"max_alloc_bytes\": %llu, \"local_mem_bytes\": %llu,"
           " \"max_work_group_size\": %llu,\n",
           (unsigned)in.compute_units, (unsigned)in.max_clock_mhz,
           (unsigned long long)in.global_mem_bytes, (unsigned long long)in.max_alloc_bytes,
           (unsigned long long)in.local_mem_bytes, (unsigned long long)in.max_work_group_size);
    printf("     \"fp16\": %s, \"fp64\": %s, \"unified_memory\": %s}%s\n",
           in.fp16 ? "true" : "false", in.fp64 ? "true" : "false",
           in.unified_memory ? "true" : "false", last ? "" : ",");
}

/* The reason inside "gpu:0 (first GPU)". */
static void json_auto(void)
{
    kiln_device *dev;
    printf("  \"auto\": {\"spec\": ");
    if (kiln_device_get("auto", &dev) == KILN_OK) {
        const char *spec = kiln_device_spec(dev);
        const char *why = kiln_auto_reason();
        size_t sl = strlen(spec), wl = strlen(why);
        char buf[4096];
        if (strncmp(why, spec, sl) == 0 && why[sl] == ' ' && why[sl + 1] == '(' && wl > sl + 2)
            snprintf(buf, sizeof buf, "%.*s", (int)(wl - sl - 3), why + sl + 2);
        else
            snprintf(buf, sizeof buf, "%s", why);
        json_str(spec);
        printf(", \"reason\": ");
        json_str(buf);
    } else {
        printf("null, \"reason\": ");
        json_str(kiln_last_error());
    }
    printf("},\n");
}

static void json_unavailable(void)
{
    static const struct {
        const char *key;
        kiln_device_type type;
    } types[] = {{"gpu", KILN_DEVICE_GPU},
                 {"cpu", KILN_DEVICE_CPU},
                 {"accelerator", KILN_DEVICE_ACCELERATOR}};
    printf("  \"unavailable\": {");
    for (int t = 0; t < 3; t++) {
        printf("%s\"%s\": ", t ? ", " : "", types[t].key);
        json_str(kiln_is_available(types[t].type) ? NULL : kiln_unavailable_reason(types[t].type));
    }
    printf("},\n");
}

static void json_notes(void)
{
    const char *p = kiln_device_notes();
    printf("  \"notes\": [");
    for (bool first = true; *p; first = false) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        printf("%s", first ? "" : ", ");
        json_str(line);
        p += len + (end ? 1 : 0);
    }
    printf("]\n");
}

static void print_json(const selection *sel)
{
    printf("{\n  \"kiln_version\": ");
    json_str(kiln_version());
    printf(",\n  \"devices\": [\n");
    for (int i = 0; i < sel->n; i++)
        json_device(sel->devs[i], i + 1 == sel->n);
    printf("  ],\n");
    json_auto();
    json_unavailable();
    json_notes();
    printf("}\n");
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* --check: y[i] = a * x[i] + i over an odd size, so a padded launch must bounds-check. */
static const char check_source[] =
    "__kernel void kiln_check(__global const float *x, __global float *y, const float a,\n"
    "                         const int n)\n"
    "{\n"
    "    int i = (int)get_global_id(0);\n"
    "    if (i < n)\n"
    "        y[i] = a * x[i] + (float)i;\n"
    "}\n";

#define CHECK_N 4099
#define WARM_N 64

/* One WARM_N^3 product of ones on dev (each result is WARM_N); false with why set on failure. */
static bool warm_matmul(kiln_device *dev, kiln_dtype dt, double *ms, char *why, size_t size)
{
    static double ones[WARM_N * WARM_N], got[WARM_N * WARM_N];
    static float onesf[WARM_N * WARM_N];
    const int64_t shape[2] = {WARM_N, WARM_N};
    kiln_tensor *a = NULL, *c = NULL;
    for (int i = 0; i < WARM_N * WARM_N; i++) {
        ones[i] = 1.0;
        onesf[i] = 1.0f;
    }
    bool ok = kiln_tensor_from_host(dev, dt, 2, shape, dt == KILN_F32 ? (void *)onesf : ones, &a) ==
                  KILN_OK &&
              kiln_device_synchronize(dev) == KILN_OK;
    double t0 = now_ms();
    ok = ok && kiln_matmul(a, a, &c) == KILN_OK &&
         kiln_tensor_read(c, got, WARM_N * WARM_N * kiln_dtype_size(dt)) == KILN_OK;
    *ms = now_ms() - t0;
    if (!ok)
        snprintf(why, size, "matmul: %s", kiln_last_error());
    for (int i = 0; ok && i < WARM_N * WARM_N; i++) {
        double v = dt == KILN_F32 ? ((float *)got)[i] : got[i];
        if (v != WARM_N) {
            snprintf(why, size, "matmul: c[%d] = %g, expected %d", i, v, WARM_N);
            ok = false;
        }
    }
    kiln_tensor_release(a);
    kiln_tensor_release(c);
    return ok;
}

/* Where matmul takes CLBlast: one small product per dtype, so CLBlast compiles its kernels now
 * (seconds; NVIDIA's driver then keeps them in its disk cache), described in text (empty
 * otherwise). False with why set when a product failed. */
static bool warm_clblast(kiln_device *dev, char *text, size_t size, char *why, size_t why_size)
{
    text[0] = '\0';
    const char *path = kiln_matmul_path(dev);
    if (!path || strcmp(path, "clblast") != 0)
        return true;
    kiln_device_info info;
    if (kiln_device_info_get(dev, &info) != KILN_OK) {
        snprintf(why, why_size, "%s", kiln_last_error());
        return false;
    }
    double f32_ms = 0, f64_ms = 0;
    if (!warm_matmul(dev, KILN_F32, &f32_ms, why, why_size) ||
        (info.fp64 && !warm_matmul(dev, KILN_F64, &f64_ms, why, why_size)))
        return false;
    int n = snprintf(text, size, "  matmul %s f32 %.1f ms", kiln_matmul_path(dev), f32_ms);
    if (info.fp64 && n > 0 && (size_t)n < size)
        n += snprintf(text + n, size - (size_t)n, " f64 %.1f ms", f64_ms);
    /* CLBlast failed on the way: the built-in kernel took over; say why. */
    if (strcmp(kiln_matmul_path(dev), "clblast") != 0 && n > 0 && (size_t)n < size)
        snprintf(text + n, size - (size_t)n, " (%s)", kiln_matmul_path_reason(dev));
    return true;
}

/* Build, run and verify on one device; prints one line; true when it passed. */
static bool check_device(kiln_device *dev)
{
    static float x[CHECK_N], y[CHECK_N];
    const float a = 1.5f;
    const int64_t shape[1] = {CHECK_N};
    kiln_program *prog = NULL;
    kiln_tensor *tx = NULL, *ty = NULL;
    char why[512] = "";
    double t0 = now_ms(), build_ms = 0, run_ms = 0;
    int bad = 0;
    bool lost = false;

    for (int i = 0; i < CHECK_N; i++) {
        x[i] = (float)(i % 17) * 0.25f - 2.0f;
        y[i] = -1.0f;
    }
    if (kiln_program_build(dev, check_source, NULL, &prog) != KILN_OK)
        goto fail;
    build_ms = now_ms() - t0;
    t0 = now_ms();
    if (kiln_tensor_from_host(dev, KILN_F32, 1, shape, x, &tx) != KILN_OK ||
        kiln_tensor_from_host(dev, KILN_F32, 1, shape, y, &ty) != KILN_OK)
        goto fail;
    kiln_arg args[4] = {kiln_arg_tensor(tx), kiln_arg_tensor(ty), kiln_arg_f32(a),
                        kiln_arg_i32(CHECK_N)};
    size_t global[1] = {CHECK_N};
    if (kiln_program_launch(prog, "kiln_check", 1, global, NULL, 4, args) != KILN_OK ||
        kiln_tensor_read(ty, y, sizeof y) != KILN_OK)
        goto fail;
    run_ms = now_ms() - t0;
    for (int i = 0; i < CHECK_N; i++) {
        float want = a * x[i] + (float)i;
        float tol = 1e-6f * (want < 0 ? -want : want) + 1e-6f;
        float diff = y[i] - want;
        if (diff > tol || diff < -tol) {
            if (!bad++)
                snprintf(why, sizeof why, "y[%d] = %g, expected %g", i, (double)y[i], (double)want);
        }
    }
    if (bad)
        goto report;
    char warm[256];
    if (!warm_clblast(dev, warm, sizeof warm, why, sizeof why)) {
        lost = kiln_device_synchronize(dev) == KILN_ERR_DEVICE_LOST;
        goto report;
    }
    printf("%-8s OK    build %8.1f ms  run %7.1f ms%s  %s\n", kiln_device_spec(dev), build_ms,
           run_ms, warm, kiln_device_name(dev));
    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    kiln_program_release(prog);
    return true;
fail:
    snprintf(why, sizeof why, "%s", kiln_last_error());
    /* A kernel fault loses the device for good: say LOST, not FAIL. */
    lost = kiln_device_synchronize(dev) == KILN_ERR_DEVICE_LOST;
report:
    printf("%-8s %s  %s%s  %s\n", kiln_device_spec(dev), lost ? "LOST" : "FAIL", why,
           bad > 1 ? " (and more wrong values)" : "", kiln_device_name(dev));
    kiln_tensor_release(tx);
    kiln_tensor_release(ty);
    kiln_program_release(prog);
    return false;
}

static int run_checks(const selection *sel)
{
    int failed = 0;
    for (int i = 0; i < sel->n; i++)
        failed += !check_device(sel->devs[i]);
    if (failed)
        printf("%d of %d device(s) failed the check\n", failed, sel->n);
    return failed ? EXIT_FAIL : EXIT_OK;
}

/* --prewarm: every built-in kernel of each selected device into the program cache, in `jobs`
 * processes (info/prewarm.c). */
static int prewarm(const selection *sel, int jobs)
{
    int failed = 0, procs = jobs > 0 ? jobs : prewarm_default_procs();
    for (int i = 0; i < sel->n; i++) {
        kiln_device *dev = sel->devs[i];
        double t0 = now_ms();
        int built = 0, used = 1;
        char err[1024];
        kiln_status s = prewarm_device(dev, procs, &built, &used, err, sizeof err);
        if (s == KILN_OK)
            printf("%s: %d built-in kernels ready in %.1f s, %d process%s (program cache: %s)\n",
                   kiln_device_spec(dev), built, (now_ms() - t0) / 1000.0, used,
                   used == 1 ? "" : "es",
                   *kiln_cache_dir() ? kiln_cache_dir() : "off, so nothing is kept");
        else {
            printf("%s: FAIL %s\n", kiln_device_spec(dev), err);
            failed++;
        }
    }
    return failed ? EXIT_FAIL : EXIT_OK;
}

/* Parse options into *a; EXIT_OK, or the code to exit with (-1: exit 0 now). */
static int parse_args(int argc, char **argv, args *a)
{
    enum { OPT_JSON = 256, OPT_PREWARM_PART };
    static const struct option longopts[] = {
        {"list", no_argument, NULL, 'l'},
        {"json", no_argument, NULL, OPT_JSON},
        {"device", required_argument, NULL, 'd'},
        {"check", no_argument, NULL, 'c'},
        {"prewarm", no_argument, NULL, 'p'},
        {"jobs", required_argument, NULL, 'j'},
        /* internal: one part of --prewarm, run by kiln-info itself (info/prewarm.c) */
        {"prewarm-part", required_argument, NULL, OPT_PREWARM_PART},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c, modes = 0;
    char *end = NULL;
    long jobs;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ld:j:hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'l':
            a->mode = MODE_LIST;
            modes++;
            break;
        case OPT_JSON:
            a->mode = MODE_JSON;
            modes++;
            break;
        case 'c':
            a->mode = MODE_CHECK;
            modes++;
            break;
        case 'p':
            a->mode = MODE_PREWARM;
            modes++;
            break;
        case OPT_PREWARM_PART:
            a->mode = MODE_PREWARM_PART;
            a->part = optarg;
            modes++;
            break;
        case 'j':
            errno = 0;
            jobs = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || jobs < 1 || jobs > 64) {
                fprintf(stderr,
                        "kiln-info: -j takes a number of processes from 1 to 64, not "
                        "'%s'\n",
                        optarg);
                return EXIT_USAGE;
            }
            a->jobs = (int)jobs;
            break;
        case 'd':
            a->spec = optarg;
            break;
        case 'h':
            usage(stdout);
            return -1;
        case 'V':
            printf("kiln-info %s (library %s)\n", KILN_VERSION_STRING, kiln_version());
            return -1;
        case ':':
            fprintf(stderr, "kiln-info: option '%s' needs an argument\n", argv[optind - 1]);
            fprintf(stderr, "Try 'kiln-info --help'.\n");
            return EXIT_USAGE;
        default:
            fprintf(stderr, "kiln-info: unknown option '%s'\n", argv[optind - 1]);
            fprintf(stderr, "Try 'kiln-info --help'.\n");
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kiln-info: unexpected argument '%s'\n", argv[optind]);
        fprintf(stderr, "Try 'kiln-info --help'.\n");
        return EXIT_USAGE;
    }
    if (modes > 1) {
        fprintf(stderr, "kiln-info: use at most one of -l, --json, --check and --prewarm\n");
        return EXIT_USAGE;
    }
    if (a->jobs && a->mode != MODE_PREWARM) {
        fprintf(stderr, "kiln-info: -j goes with --prewarm\n");
        return EXIT_USAGE;
    }
    if (a->mode == MODE_PREWARM_PART && !a->spec) {
        fprintf(stderr, "kiln-info: --prewarm-part needs -d SPEC\n");
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

/* Exit code after flushing stdout: a closed pipe (kiln-info | head -1) is a quiet exit. */
static int finish(int code)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (errno == EPIPE)
            return code;
        fprintf(stderr, "kiln-info: writing output failed: %s\n", strerror(errno));
        return EXIT_FAIL;
    }
    return code;
}

int main(int argc, char **argv)
{
    /* Writes to a closed pipe then fail with EPIPE instead of killing the process. */
    signal(SIGPIPE, SIG_IGN);
    args a = {.mode = MODE_DETAIL};
    int code = parse_args(argc, argv, &a);
    if (code != EXIT_OK)
        return code < 0 ? EXIT_OK : code;
    enum mode mode = a.mode;

    selection sel;
    code = select_devices(a.spec, &sel);
    if (code != EXIT_OK) {
        if (mode == MODE_JSON && code != EXIT_USAGE)
            print_json(&sel);
        return finish(code);
    }
    if (sel.n == 0) {
        if (mode == MODE_JSON)
            print_json(&sel);
        code = no_device();
        return finish(code);
    }
    switch (mode) {
    case MODE_DETAIL:
        for (int i = 0; i < sel.n; i++) {
            print_detail(sel.devs[i]);
            putchar('\n');
        }
        print_auto();
        break;
    case MODE_LIST:
        for (int i = 0; i < sel.n; i++)
            print_list_line(sel.devs[i]);
        break;
    case MODE_JSON:
        print_json(&sel);
        break;
    case MODE_CHECK:
        code = run_checks(&sel);
        break;
    case MODE_PREWARM:
        code = prewarm(&sel, a.jobs);
        break;
    case MODE_PREWARM_PART:
        code = prewarm_part_child(sel.devs[0], a.part) ? EXIT_FAIL : EXIT_OK;
        break;
    }
    return finish(code);
}
