/* test-diskcache.c - the on-disk program cache: key, hits across processes, corrupt and foreign
 * entries, unusable directories, KILN_CACHE=0, processes racing on one entry, and the fault
 * matrix of issue 10. Each fault case checks a warn line (KILN_LOG=warn), a correct program and,
 * where the payload is bad, that the driver never saw it (clCreateProgramWithBinary calls
 * counted through the kiln__cl table):
 *   entry is a symlink, FIFO, directory     damaged_entries_rebuild,
 * unwritable_entry_leaves_no_temp entry owned by another user (root) foreign_owned_entry_is_refused
 *   entry truncated / damaged anywhere      truncated_entries_rebuild, damaged_entries_rebuild
 *   entry deleted / shrunk while read       entry_deleted_while_read, entry_shrunk_while_read
 *   entry of another program, same key      entry_with_other_kernels_is_dropped
 *   driver crashes on an entry              driver_crash_does_not_loop, half_binary_does_not_loop
 *   driver refuses an entry                 driver_rejects_binary
 *   directory world-writable, group-wr.     world_writable_dir_is_refused, group_writable_dir_...
 *   directory another user's, a symlink     foreign_owned_dir_is_refused, symlinked_dir_is_refused
 *   directory read-only, disk full          read_only_dir_is_not_used, disk_full_builds_anyway
 *   8 processes, empty cache, one program   eight_processes_race
 *   binary of the second device (2 dev.)    second_device_entry_is_saved
 *   driver gives no binary                  unsaved_binary_is_a_write_error
 *   no argument info for binaries (NVIDIA)  warm_run_keeps_argument_checks */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln.h"
#include "lib/clcall.h"
#include "lib/diskcache.h"
#include "testutil.h"

extern char **environ;

static const char *source = "__kernel void twice(__global float *x, int n)\n"
                            "{\n"
                            "    int i = get_global_id(0);\n"
                            "    if (i < n)\n"
                            "        x[i] *= 2.0f;\n"
                            "}\n";

static kiln_device *dev;
static char root[256]; /* this run's scratch directory */

static void setup(void)
{
    dev = test_device();
    snprintf(root, sizeof root, "/tmp/kiln-test-diskcache-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
}

static void rm_rf(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
}

/* Write text to path (replacing it). */
static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

static char mounted[600]; /* a tmpfs a case mounted ("" if none) */

static void teardown(void)
{
    if (mounted[0]) {
        umount2(mounted, MNT_DETACH);
        mounted[0] = '\0';
    }
    kiln__diskcache_before_read = NULL;
    unsetenv("KILN_LOG");
    rm_rf(root);
    unsetenv("KILN_CACHE");
    kiln__diskcache_reset();
    kiln__cl_reset();
}

/* Point the cache at a fresh directory root/name and reset the counters. */
static void use_dir(const char *name, char *dir, size_t size)
{
    snprintf(dir, size, "%s/%s", root, name);
    setenv("KILN_CACHE_DIR", dir, 1);
    unsetenv("KILN_CACHE");
    kiln__diskcache_reset();
}

/* The counters; the fill leaves the reserved fields zero, whatever was there. */
static kiln_cache_stats stats(void)
{
    kiln_cache_stats st;
    memset(&st, 0xff, sizeof st);
    ck_assert_int_eq(kiln_cache_stats_get(&st), KILN_OK);
    for (size_t i = 0; i < sizeof st.reserved / sizeof st.reserved[0]; i++)
        ck_assert_uint_eq(st.reserved[i], 0);
    return st;
}

/* Build `source` (with options) on d, run it and check what it computed. */
static void build_ok_on(kiln_device *d, const char *options)
{
    kiln_program *prog = NULL;
    kiln_status s = kiln_program_build(d, source, options, &prog);
    ck_assert_msg(s == KILN_OK, "build failed: %s", kiln_last_error());
    ck_assert_str_eq(kiln_program_kernel_names(prog), "twice");
    const float x[3] = {1.5f, -2.0f, 0.25f};
    const int64_t shape[1] = {3};
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_tensor_from_host(d, KILN_F32, 1, shape, x, &t));
    kiln_arg args[2] = {kiln_arg_tensor(t), kiln_arg_i32(3)};
    size_t global = 3;
    ASSERT_OK(kiln_program_launch(prog, "twice", 1, &global, NULL, 2, args));
    float y[3];
    ASSERT_OK(kiln_tensor_read(t, y, sizeof y));
    for (int i = 0; i < 3; i++)
        ck_assert_msg(y[i] == 2 * x[i], "element %d: %g, not %g", i, y[i], 2 * x[i]);
    kiln_tensor_release(t);
    kiln_program_release(prog);
}

static void build_ok(const char *options)
{
    build_ok_on(dev, options);
}

/* clCreateProgramWithBinary calls, counted through the kiln__cl table. */
static int binary_calls;
static cl_program(CL_API_CALL *real_binary)(cl_context, cl_uint, const cl_device_id *,
                                            const size_t *, const unsigned char **, cl_int *,
                                            cl_int *);

static cl_program CL_API_CALL counted_binary(cl_context ctx, cl_uint n, const cl_device_id *devs,
                                             const size_t *lens, const unsigned char **bins,
                                             cl_int *bstatus, cl_int *err)
{
    binary_calls++;
    return real_binary(ctx, n, devs, lens, bins, bstatus, err);
}

static void count_binary_calls(void)
{
    binary_calls = 0;
    if (kiln__cl.CreateProgramWithBinary != counted_binary) {
        real_binary = kiln__cl.CreateProgramWithBinary;
        kiln__cl.CreateProgramWithBinary = counted_binary;
    }
}

/* kiln's log at `level` goes to a file while a case runs a step: stderr is redirected. */
typedef struct captured {
    int saved;
    char path[600];
} captured;

static void capture_log(captured *c, const char *level)
{
    static int n;
    snprintf(c->path, sizeof c->path, "%s/log-%d.txt", root, n++);
    fflush(stderr);
    int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    c->saved = dup(2);
    ck_assert_int_ge(c->saved, 0);
    ck_assert_int_ge(dup2(fd, 2), 0);
    close(fd);
    setenv("KILN_LOG", level, 1);
}

static void end_capture(captured *c)
{
    unsetenv("KILN_LOG");
    fflush(stderr);
    ck_assert_int_ge(dup2(c->saved, 2), 0);
    close(c->saved);
}

/* Count files in dir whose names contain `part` (".bin": entries, the names that end so); the
 * last one's path goes to found. */
static int count_files(const char *dir, const char *part, char *found, size_t size)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || !strstr(e->d_name, part) ||
            (strcmp(part, ".bin") == 0 && strcmp(e->d_name + len - 4, ".bin") != 0))
            continue;
        n++;
        if (found)
            snprintf(found, size, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    return n;
}

static size_t file_size(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return (size_t)st.st_size;
}

static int count_lines_with(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, text) != NULL;
    fclose(f);
    return n;
}

/* The log file holds a "kiln: <level>:" line containing text (shown whole if not). */
static void assert_logged(const captured *c, const char *level, const char *text)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "kiln: %s:", level);
    FILE *f = fopen(c->path, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096], all[8192] = "";
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        found = found || (strstr(line, prefix) && strstr(line, text));
        strncat(all, line, sizeof all - strlen(all) - 1);
    }
    fclose(f);
    ck_assert_msg(found, "no %s line with \"%s\" in the log:\n%s", level, text, all);
}

static void assert_warned(const captured *c, const char *text)
{
    assert_logged(c, "warn", text);
}

/* ---- key ------------------------------------------------------------------------------ */

static uint64_t key_hash(const kiln_device_info *info, const char *src, const char *options,
                         char **text, size_t *len)
{
    *text = kiln__diskcache_key(info, src, strlen(src), options, len, NULL);
    ck_assert_ptr_nonnull(*text);
    return kiln__fnv1a(*text, *len, KILN__FNV_OFFSET);
}

START_TEST(key_covers_every_field)
{
    kiln_device_info info;
    memset(&info, 0, sizeof info);
    strcpy(info.name, "dev");
    strcpy(info.vendor, "vendor");
    strcpy(info.driver_version, "1.0");
    strcpy(info.platform_version, "OpenCL 1.2 x");
    char *base, *other;
    size_t blen, olen;
    uint64_t h = key_hash(&info, "kernel void k(){}", "-DA", &base, &blen);
    /* The same inputs give the same key. */
    ck_assert_uint_eq(key_hash(&info, "kernel void k(){}", "-DA", &other, &olen), h);
    ck_assert_int_eq(olen == blen && memcmp(base, other, blen) == 0, 1);
    free(other);
    ck_assert_ptr_nonnull(strstr(base, "kernel void k(){}"));
    ck_assert_ptr_nonnull(strstr(base, KILN_VERSION_STRING));
    /* Each field changes it: options, source, driver, device, vendor, platform. */
    ck_assert_uint_ne(key_hash(&info, "kernel void k(){}", "-DB", &other, &olen), h);
    free(other);
    ck_assert_uint_ne(key_hash(&info, "kernel void k(){ }", "-DA", &other, &olen), h);
    free(other);
    kiln_device_info changed = info;
    strcpy(changed.driver_version, "1.1");
    ck_assert_uint_ne(key_hash(&changed, "kernel void k(){}", "-DA", &other, &olen), h);
    free(other);
    changed = info;
    strcpy(changed.name, "dev2");
    ck_assert_uint_ne(key_hash(&changed, "kernel void k(){}", "-DA", &other, &olen), h);
    free(other);
    changed = info;
    strcpy(changed.vendor, "vendor2");
    ck_assert_uint_ne(key_hash(&changed, "kernel void k(){}", "-DA", &other, &olen), h);
    free(other);
    changed = info;
    strcpy(changed.platform_version, "OpenCL 3.0 x");
    ck_assert_uint_ne(key_hash(&changed, "kernel void k(){}", "-DA", &other, &olen), h);
    free(other);
    /* Field boundaries are unambiguous: moving a character between fields changes the key. */
    changed = info;
    strcpy(changed.name, "devv");
    strcpy(changed.vendor, "endor");
    ck_assert_uint_ne(key_hash(&changed, "kernel void k(){}", "-DA", &other, &olen), h);
    free(other);
    free(base);
}
END_TEST

/* -I directories: the names and contents of their files (subfolders too) are in the key; a
 * directory too large to read for every build makes the build uncacheable. */
START_TEST(key_covers_include_files)
{
    char dir[256], sub[300], path[400], opt[300];
    snprintf(dir, sizeof dir, "/tmp/kiln-test-inc-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(sub, sizeof sub, "%s/sub", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(path, sizeof path, "%s/g.h", sub);
    write_text(path, "#define G 1\n");
    kiln_device_info info;
    memset(&info, 0, sizeof info);
    strcpy(info.name, "dev");
    char *base, *other;
    size_t blen, olen;
    bool cacheable = false;
    for (int form = 0; form < 2; form++) { /* "-I dir" and "-Idir" */
        snprintf(opt, sizeof opt, form ? "-DA -I%s" : "-DA -I %s -DB", dir);
        base = kiln__diskcache_key(&info, "k", 1, opt, &blen, &cacheable);
        ck_assert(cacheable);
        ck_assert_ptr_nonnull(strstr(base, "#define G 1"));
        write_text(path, "#define G 2\n");
        other = kiln__diskcache_key(&info, "k", 1, opt, &olen, &cacheable);
        ck_assert(cacheable);
        ck_assert_msg(olen != blen || memcmp(base, other, blen) != 0,
                      "a header change kept the key");
        free(base);
        free(other);
        write_text(path, "#define G 1\n");
    }
    /* more files than are read for every build: not cached */
    for (int i = 0; i < 300; i++) {
        snprintf(path, sizeof path, "%s/f%d.h", sub, i);
        write_text(path, "x");
    }
    snprintf(opt, sizeof opt, "-I %s", dir);
    base = kiln__diskcache_key(&info, "k", 1, opt, &blen, &cacheable);
    ck_assert_ptr_nonnull(base);
    ck_assert(!cacheable);
    free(base);
    rm_rf(dir);
}
END_TEST

START_TEST(fnv1a_known_values)
{
    /* Published FNV-1a 64 test vectors. */
    ck_assert_uint_eq(kiln__fnv1a("", 0, KILN__FNV_OFFSET), 0xcbf29ce484222325ull);
    ck_assert_uint_eq(kiln__fnv1a("a", 1, KILN__FNV_OFFSET), 0xaf63dc4c8601ec8cull);
    ck_assert_uint_eq(kiln__fnv1a("foobar", 6, KILN__FNV_OFFSET), 0x85944171f73967e8ull);
}
END_TEST

/* ---- one process ------------------------------------------------------------------------- */

/* A program that #includes a header from a -I directory is rebuilt when the header changes
 * (no stale cache hit), and hits the cache while it does not. */
START_TEST(include_change_rebuilds)
{
    char dir[600], inc[600], path[700], opt[700];
    use_dir("cache", dir, sizeof dir);
    snprintf(inc, sizeof inc, "%s/inc", root);
    ck_assert_int_eq(mkdir(inc, 0700), 0);
    snprintf(path, sizeof path, "%s/h.h", inc);
    snprintf(opt, sizeof opt, "-I %s", inc);
    const char *src = "#include \"h.h\"\n"
                      "__kernel void k(__global float *x) { x[get_global_id(0)] = KILN_TEST_K; }\n";
    const float want[3] = {1.0f, 2.0f, 2.0f};
    for (int step = 0; step < 3; step++) {
        if (step < 2)
            write_text(path,
                       step == 0 ? "#define KILN_TEST_K 1.0f\n" : "#define KILN_TEST_K 2.0f\n");
        kiln_cache_stats s0 = stats();
        kiln_program *prog = NULL;
        ASSERT_OK(kiln_program_build(dev, src, opt, &prog));
        kiln_cache_stats s1 = stats();
        /* a new header is a miss; the same one again a hit */
        ck_assert_uint_eq(s1.hits - s0.hits, (step == 2 ? 1 : 0));
        ck_assert_uint_eq(s1.misses - s0.misses, (step == 2 ? 0 : 1));
        kiln_tensor *t = NULL;
        const int64_t shape[1] = {4};
        ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, shape, &t));
        kiln_arg arg = kiln_arg_tensor(t);
        size_t global = 4;
        ASSERT_OK(kiln_program_launch(prog, "k", 1, &global, NULL, 1, &arg));
        float got[4];
        ASSERT_OK(kiln_tensor_read(t, got, sizeof got));
        ck_assert_msg(got[3] == want[step], "step %d: the kernel wrote %g, the header says %g",
                      step, got[3], want[step]);
        kiln_tensor_release(t);
        kiln_program_release(prog);
    }
}
END_TEST

START_TEST(hit_after_save_and_permissions)
{
    char dir[512], entry[768];
    use_dir("a/b", dir, sizeof dir);
    ck_assert_str_eq(kiln_cache_dir(), dir);
    build_ok(NULL);
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.saves, 1);
    ck_assert_uint_eq(st.hits, 0);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    ck_assert_int_eq(count_files(dir, ".tmp.", NULL, 0), 0);
    struct stat sd, se;
    ck_assert_int_eq(stat(dir, &sd), 0);
    ck_assert_int_eq(stat(entry, &se), 0);
    ck_assert_int_eq(sd.st_mode & 0777, 0700);
    ck_assert_int_eq(se.st_mode & 0777, 0600);
    build_ok(NULL);
    st = stats();
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.misses, 1);
    /* Different options: a different entry, no stale hit. */
    build_ok("-DSOMETHING=1");
    st = stats();
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 2);
}
END_TEST

START_TEST(group_writable_dir_is_tightened)
{
    char dir[512];
    use_dir("loose", dir, sizeof dir);
    ck_assert_int_eq(mkdir(dir, 0770), 0);
    ck_assert_int_eq(chmod(dir, 0770), 0);
    captured log;
    capture_log(&log, "warn");
    build_ok(NULL);
    end_capture(&log);
    assert_warned(&log, "was writable by its group; made it 0700");
    struct stat sd;
    ck_assert_int_eq(stat(dir, &sd), 0);
    ck_assert_int_eq(sd.st_mode & 0777, 0700);
    ck_assert_uint_eq(stats().saves, 1);
}
END_TEST

/* A directory every user may write to (say KILN_CACHE_DIR=/tmp) is neither read, written nor
 * chmod-ed: anyone could have planted an entry in it. */
START_TEST(world_writable_dir_is_refused)
{
    char dir[512], entry[768];
    use_dir("open", dir, sizeof dir);
    build_ok(NULL); /* an entry, there before the directory was opened up */
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    ck_assert_int_eq(chmod(dir, 01777), 0);
    kiln__diskcache_reset();
    captured log;
    capture_log(&log, "warn");
    count_binary_calls();
    build_ok(NULL);
    build_ok("-DOTHER=1");
    end_capture(&log);
    assert_warned(&log, "it is writable by every user");
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.hits + st.saves, 0);
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.write_errors, 1);
    ck_assert_int_eq(binary_calls, 0);
    struct stat sd;
    ck_assert_int_eq(stat(dir, &sd), 0);
    ck_assert_int_eq(sd.st_mode & 07777, 01777); /* left as it was */
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 1);
}
END_TEST

START_TEST(symlinked_dir_is_refused)
{
    char dir[512], real[512];
    snprintf(real, sizeof real, "%s/real", root);
    ck_assert_int_eq(mkdir(real, 0700), 0);
    use_dir("link", dir, sizeof dir);
    ck_assert_int_eq(symlink(real, dir), 0);
    build_ok(NULL);
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.saves, 0);
    ck_assert_uint_eq(st.write_errors, 1);
    ck_assert_int_eq(count_files(real, ".bin", NULL, 0), 0);
}
END_TEST

START_TEST(foreign_owned_dir_is_refused)
{
    if (geteuid() != 0) {
        test_skip("foreign_owned_dir_is_refused: only root can give a directory to another user");
        return;
    }
    char dir[512];
    use_dir("theirs", dir, sizeof dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    ck_assert_int_eq(chown(dir, 65534, 65534), 0);
    captured log;
    capture_log(&log, "warn");
    build_ok(NULL);
    end_capture(&log);
    assert_warned(&log, "it is owned by another user");
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.saves, 0);
    ck_assert_uint_eq(st.write_errors, 1);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 0);
}
END_TEST

/* Mount a tmpfs of `size` at dir (root only): false, after test_skip, where that is not
 * possible. */
static bool mount_tmpfs(const char *dir, const char *size, const char *why)
{
    if (geteuid() != 0) {
        test_skip("%s: mounting a tmpfs needs root", why);
        return false;
    }
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    char opts[64];
    snprintf(opts, sizeof opts, "size=%s,mode=0700", size);
    if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0) {
        test_skip("%s: cannot mount a tmpfs (%s)", why, strerror(errno));
        return false;
    }
    snprintf(mounted, sizeof mounted, "%s", dir);
    return true;
}

/* A read-only directory is not used at all: an entry could not be moved aside while the driver
 * tries it (so a crash there could recur every run), nor saved. Root ignores permissions, so as
 * root the directory is a tmpfs remounted read-only; otherwise it is chmod 0500. */
START_TEST(read_only_dir_is_not_used)
{
    char dir[512];
    use_dir("ro", dir, sizeof dir);
    bool as_root = geteuid() == 0;
    if (as_root && !mount_tmpfs(dir, "4m", "read_only_dir_is_not_used"))
        return;
    build_ok(NULL);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 1);
    if (as_root)
        ck_assert_int_eq(mount("tmpfs", dir, "tmpfs", MS_REMOUNT | MS_RDONLY, "mode=0700"), 0);
    else
        ck_assert_int_eq(chmod(dir, 0500), 0);
    kiln__diskcache_reset();
    captured log;
    capture_log(&log, "warn");
    count_binary_calls();
    build_ok(NULL);
    end_capture(&log);
    assert_warned(&log, "cannot use the program cache directory");
    assert_warned(&log, as_root ? "Read-only file system" : "Permission denied");
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.hits + st.saves + st.corrupt, 0);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.write_errors, 1);
    ck_assert_int_eq(binary_calls, 0);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 1); /* left alone */
    if (!as_root)
        ck_assert_int_eq(chmod(dir, 0700), 0);
}
END_TEST

/* A full disk (a 64 KiB tmpfs, filled up): the builds succeed, each failed save is counted, one
 * warning names the error, and no temp file is left. */
START_TEST(disk_full_builds_anyway)
{
    char dir[512], filler[600];
    use_dir("full", dir, sizeof dir);
    if (!mount_tmpfs(dir, "64k", "disk_full_builds_anyway"))
        return;
    snprintf(filler, sizeof filler, "%s/filler", dir);
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    char block[4096];
    memset(block, 'x', sizeof block);
    int blocks = 0;
    while (write(fd, block, sizeof block) > 0 && blocks < 1024)
        blocks++;
    ck_assert_int_eq(errno, ENOSPC);
    close(fd);
    captured log;
    capture_log(&log, "warn");
    build_ok(NULL);
    build_ok("-DOTHER=1");
    end_capture(&log);
    assert_warned(&log, "No space left on device");
    ck_assert_int_eq(count_lines_with(log.path, "kiln: warn:"), 1);
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.saves, 0);
    ck_assert_uint_eq(st.write_errors, 2);
    ck_assert_int_eq(count_files(dir, ".tmp.", NULL, 0), 0);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 0);
}
END_TEST

START_TEST(cache_off)
{
    char dir[512];
    use_dir("off", dir, sizeof dir);
    setenv("KILN_CACHE", "0", 1);
    kiln__diskcache_reset();
    ck_assert_str_eq(kiln_cache_dir(), "");
    build_ok(NULL);
    build_ok(NULL);
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.saves + st.hits + st.write_errors, 0);
    struct stat sd;
    ck_assert_int_eq(stat(dir, &sd), -1); /* not even created */
}
END_TEST

START_TEST(uncreatable_dir_builds_anyway)
{
    char file[512], dir[512];
    snprintf(file, sizeof file, "%s/plainfile", root);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    /* Running as root, chmod cannot make a directory unwritable; a path under a regular file
     * can never be created. */
    use_dir("plainfile/sub", dir, sizeof dir);
    build_ok(NULL);
    build_ok("-DX=2");
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.saves, 0);
    ck_assert_uint_eq(st.write_errors, 1); /* reported once, not per build */
}
END_TEST

/* ---- damaged entries --------------------------------------------------------------------- */

/* Build once to make the entry; damage it; the next build must detect it, rebuild and replace
 * it, and the one after that must hit. */
typedef void (*damage_fn)(const char *path, size_t arg);

static void check_rebuilt(damage_fn damage, size_t arg, const char *what)
{
    char dir[512], entry[768];
    use_dir("d", dir, sizeof dir);
    build_ok(NULL);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    size_t good = file_size(entry);
    damage(entry, arg);
    captured log;
    capture_log(&log, "warn");
    count_binary_calls();
    build_ok(NULL);
    end_capture(&log);
    ck_assert_msg(binary_calls == 0, "%s (arg %zu): the driver was handed the entry", what, arg);
    assert_warned(&log, "is unusable");
    kiln_cache_stats st = stats();
    ck_assert_msg(st.corrupt == 1 && st.hits == 0 && st.misses == 2 && st.saves == 2,
                  "%s (arg %zu): corrupt %llu hits %llu misses %llu saves %llu", what, arg,
                  (unsigned long long)st.corrupt, (unsigned long long)st.hits,
                  (unsigned long long)st.misses, (unsigned long long)st.saves);
    ck_assert_uint_eq(file_size(entry), good);
    build_ok(NULL);
    ck_assert_uint_eq(stats().hits, 1);
    rm_rf(dir);
}

static void truncate_to(const char *path, size_t n)
{
    ck_assert_int_eq(truncate(path, (off_t)n), 0);
}

static void flip_byte(const char *path, size_t offset)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char c;
    ck_assert_int_eq(pread(fd, &c, 1, (off_t)offset), 1);
    c ^= 0x20;
    ck_assert_int_eq(pwrite(fd, &c, 1, (off_t)offset), 1);
    close(fd);
}

static void set_u64(const char *path, size_t offset)
{
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char v[8] = {0, 0, 0, 0, 0, 0, 0, 0x40}; /* 2^62, little-endian */
    ck_assert_int_eq(pwrite(fd, v, 8, (off_t)offset), 8);
    close(fd);
}

static void append_byte(const char *path, size_t unused)
{
    (void)unused;
    FILE *f = fopen(path, "ab");
    ck_assert_ptr_nonnull(f);
    fputc('x', f);
    fclose(f);
}

static void replace_with_fifo(const char *path, size_t unused)
{
    (void)unused;
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
}

static void replace_with_symlink(const char *path, size_t unused)
{
    (void)unused;
    char target[800];
    snprintf(target, sizeof target, "%s.target", path);
    ck_assert_int_eq(rename(path, target), 0);
    ck_assert_int_eq(symlink(target, path), 0);
}

START_TEST(truncated_entries_rebuild)
{
    char dir[512], entry[768];
    use_dir("probe", dir, sizeof dir);
    build_ok(NULL);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    size_t n = file_size(entry);
    /* Zero length, inside the header, at its end, inside the key, inside the payload, and one
     * byte short. */
    size_t cuts[] = {0, 1, 7, 39, 40, 41, 200, n / 2, n - 100, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++)
        check_rebuilt(truncate_to, cuts[i], "truncated");
}
END_TEST

START_TEST(damaged_entries_rebuild)
{
    char dir[512], entry[768];
    use_dir("probe", dir, sizeof dir);
    build_ok(NULL);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    size_t n = file_size(entry);
    check_rebuilt(flip_byte, 0, "foreign magic");
    check_rebuilt(flip_byte, 8, "format version");
    check_rebuilt(flip_byte, 16, "key length");
    check_rebuilt(set_u64, 24, "huge payload length");
    check_rebuilt(flip_byte, 33, "checksum");
    check_rebuilt(flip_byte, 60, "key byte");
    check_rebuilt(flip_byte, n - 1, "last payload byte");
    check_rebuilt(flip_byte, n / 2 + 300 < n ? n / 2 + 300 : n - 2, "payload byte");
    check_rebuilt(append_byte, 0, "trailing garbage");
    check_rebuilt(replace_with_fifo, 0, "fifo");
    check_rebuilt(replace_with_symlink, 0, "symlink");
}
END_TEST

static cl_program CL_API_CALL refuse_binary(cl_context ctx, cl_uint n, const cl_device_id *devs,
                                            const size_t *lens, const unsigned char **bins,
                                            cl_int *bstatus, cl_int *err)
{
    (void)ctx, (void)devs, (void)lens, (void)bins;
    for (cl_uint i = 0; i < n; i++)
        if (bstatus)
            bstatus[i] = CL_INVALID_BINARY;
    *err = CL_INVALID_BINARY;
    return NULL;
}

START_TEST(unwritable_entry_leaves_no_temp)
{
    /* The entry's name is taken by a directory: the load reports it, and the write (rename)
     * fails; the build still succeeds and the temp file is removed. */
    char dir[512], entry[768];
    use_dir("blocked", dir, sizeof dir);
    build_ok(NULL);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    ck_assert_int_eq(unlink(entry), 0);
    ck_assert_int_eq(mkdir(entry, 0700), 0);
    captured log;
    capture_log(&log, "warn");
    count_binary_calls();
    build_ok(NULL);
    end_capture(&log);
    assert_warned(&log, "is unusable (not a regular file)");
    assert_warned(&log, "cannot rename into");
    ck_assert_int_eq(binary_calls, 0);
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.corrupt, 1);
    ck_assert_uint_eq(st.write_errors, 1);
    ck_assert_uint_eq(st.saves, 1);
    ck_assert_int_eq(count_files(dir, ".tmp.", NULL, 0), 0);
}
END_TEST

START_TEST(driver_rejects_binary)
{
    char dir[512];
    use_dir("rej", dir, sizeof dir);
    build_ok(NULL);
    kiln__cl.CreateProgramWithBinary = refuse_binary;
    captured log;
    capture_log(&log, "warn");
    build_ok(NULL);
    end_capture(&log);
    assert_warned(&log, "was refused by");
    ck_assert_int_eq(count_lines_with(log.path, "kiln: warn:"), 1); /* one line, not two */
    kiln__cl_reset();
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.rejected, 1);
    ck_assert_uint_eq(st.hits, 1); /* the entry itself was intact */
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.saves, 2); /* and was replaced */
    build_ok(NULL);
    ck_assert_uint_eq(stats().hits, 2);
    ck_assert_int_eq(count_files(dir, ".aside.", NULL, 0), 0);
}
END_TEST

/* An entry file of another user (possible where the directory was group-writable before kiln
 * tightened it) is not read. */
START_TEST(foreign_owned_entry_is_refused)
{
    if (geteuid() != 0) {
        test_skip("foreign_owned_entry_is_refused: only root can give a file to another user");
        return;
    }
    char dir[512], entry[768];
    use_dir("theirs", dir, sizeof dir);
    build_ok(NULL);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    ck_assert_int_eq(chown(entry, 65534, 65534), 0);
    captured log;
    capture_log(&log, "warn");
    count_binary_calls();
    build_ok(NULL);
    end_capture(&log);
    assert_warned(&log, "is unusable (owned by another user)");
    ck_assert_int_eq(binary_calls, 0);
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.corrupt, 1);
    ck_assert_uint_eq(st.saves, 2);
    struct stat se;
    ck_assert_int_eq(stat(entry, &se), 0);
    ck_assert_uint_eq(se.st_uid, geteuid()); /* replaced by one of ours */
}
END_TEST

static void unlink_it(const char *path)
{
    ck_assert_int_eq(unlink(path), 0);
}

static void halve_it(const char *path)
{
    truncate_to(path, file_size(path) / 2);
}

/* Another process removes the entry after it was opened: what was read is whole and verified,
 * so it is used; the entry is gone, so the next build saves it again. */
START_TEST(entry_deleted_while_read)
{
    char dir[512];
    use_dir("del", dir, sizeof dir);
    build_ok(NULL);
    kiln__diskcache_before_read = unlink_it;
    captured log;
    capture_log(&log, "info");
    count_binary_calls();
    build_ok(NULL);
    end_capture(&log);
    kiln__diskcache_before_read = NULL;
    assert_logged(&log, "info", "was moved or removed by another process while being read");
    ck_assert_int_eq(binary_calls, 1);
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.corrupt + st.rejected, 0);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 0);
    ck_assert_int_eq(count_files(dir, ".aside.", NULL, 0), 0);
    build_ok(NULL);
    st = stats();
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.saves, 2);
}
END_TEST

/* The entry shrinks between the size check and the read: a short read, no driver call. */
START_TEST(entry_shrunk_while_read)
{
    char dir[512];
    use_dir("shrink", dir, sizeof dir);
    build_ok(NULL);
    kiln__diskcache_before_read = halve_it;
    captured log;
    capture_log(&log, "warn");
    count_binary_calls();
    build_ok(NULL);
    end_capture(&log);
    kiln__diskcache_before_read = NULL;
    assert_warned(&log, "is unusable (short read");
    ck_assert_int_eq(binary_calls, 0);
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.corrupt, 1);
    ck_assert_uint_eq(st.saves, 2);
    build_ok(NULL);
    ck_assert_uint_eq(stats().hits, 1);
}
END_TEST

static uint8_t *read_whole(const char *path, size_t *len)
{
    *len = file_size(path);
    uint8_t *b = malloc(*len);
    ck_assert_ptr_nonnull(b);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, b, *len), (ssize_t)*len);
    close(fd);
    return b;
}

/* A valid binary of another program under this program's key, header and checksum correct
 * (issue 10, item 7: "the program has no kernel named ..." on every run): the driver builds it,
 * its kernels are not the entry's, so it is dropped and rebuilt. */
START_TEST(entry_with_other_kernels_is_dropped)
{
    const char *other = "__kernel void other(__global float *x, int n)\n"
                        "{\n"
                        "    int i = get_global_id(0);\n"
                        "    if (i < n)\n"
                        "        x[i] = 7.0f;\n"
                        "}\n";
    char dir[512], entry[768];
    use_dir("b", dir, sizeof dir);
    kiln_program *prog = NULL;
    ASSERT_OK(kiln_program_build(dev, other, NULL, &prog));
    kiln_program_release(prog);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    size_t blen, alen, len;
    uint8_t *b = read_whole(entry, &blen);
    use_dir("a", dir, sizeof dir);
    build_ok(NULL);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    uint8_t *a = read_whole(entry, &alen);
    kiln__cache_entry ea, eb;
    ck_assert_ptr_null(kiln__cache_entry_parse(a, alen, &ea));
    ck_assert_ptr_null(kiln__cache_entry_parse(b, blen, &eb));
    kiln__cache_entry forged = ea;
    forged.payload = eb.payload;
    forged.size = eb.size;
    uint8_t *bytes = kiln__cache_entry_encode(&forged, &len);
    ck_assert_ptr_nonnull(bytes);
    FILE *f = fopen(entry, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    free(bytes);
    free(a);
    free(b);
    kiln__diskcache_reset();
    captured log;
    capture_log(&log, "warn");
    build_ok(NULL); /* asserts the kernel is "twice" and computes 2x */
    end_capture(&log);
    assert_warned(&log, "holds a program with kernels \"other\", not the \"twice\"");
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.rejected, 1);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.saves, 1);
    count_binary_calls();
    build_ok(NULL); /* the rebuilt entry is the right one */
    ck_assert_int_eq(binary_calls, 1);
    ck_assert_uint_eq(stats().hits, 2);
    ck_assert_uint_eq(stats().rejected, 1);
}
END_TEST

static cl_int(CL_API_CALL *real_program_info)(cl_program, cl_program_info, size_t, void *,
                                              size_t *);

static cl_int CL_API_CALL no_binary_sizes(cl_program p, cl_program_info what, size_t n, void *v,
                                          size_t *ret)
{
    if (what != CL_PROGRAM_BINARY_SIZES)
        return real_program_info(p, what, n, v, ret);
    memset(v, 0, n);
    if (ret)
        *ret = n;
    return CL_SUCCESS;
}

/* The driver gives no binary for the device: the build succeeds, and the lost save is counted as
 * a write error with a debug line (issue 10, item 4: it was silent). */
START_TEST(unsaved_binary_is_a_write_error)
{
    char dir[512];
    use_dir("nobin", dir, sizeof dir);
    real_program_info = kiln__cl.GetProgramInfo;
    kiln__cl.GetProgramInfo = no_binary_sizes;
    captured log;
    capture_log(&log, "debug");
    build_ok(NULL);
    end_capture(&log);
    kiln__cl_reset();
    assert_logged(&log, "debug", "built but not cached: the driver gives no binary");
    kiln_cache_stats st = stats();
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.saves, 0);
    ck_assert_uint_eq(st.write_errors, 1);
}
END_TEST

/* A program built for the second device of a shared context is saved, and hits (issue 10,
 * item 4: PoCL 3.1 reports its binary in slot 0, and nothing was ever saved). */
START_TEST(second_device_entry_is_saved)
{
    kiln_device *other = test_other_device(dev, true);
    if (!other) {
        test_skip("second_device_entry_is_saved: no second device in the context of %s",
                  kiln_device_spec(dev));
        return;
    }
    char dir[512];
    use_dir("second", dir, sizeof dir);
    build_ok_on(other, NULL);
    kiln_cache_stats st = stats();
    ck_assert_msg(st.misses == 1 && st.saves == 1 && st.write_errors == 0,
                  "%s: misses %llu saves %llu write_errors %llu", kiln_device_spec(other),
                  (unsigned long long)st.misses, (unsigned long long)st.saves,
                  (unsigned long long)st.write_errors);
    count_binary_calls();
    build_ok_on(other, NULL);
    ck_assert_int_eq(binary_calls, 1);
    ck_assert_uint_eq(stats().hits, 1);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 1);
}
END_TEST

/* ---- several processes ------------------------------------------------------------------- */

/* Start the helper with the cache in dir (extra "NAME=value" variables may follow). */
static pid_t spawn_helper(const char *dir, const char *nbuilds, const char *errfile,
                          const char *extra)
{
    char helper[1024];
    snprintf(helper, sizeof helper, "%s/tests/kiln-cache-helper", getenv("KILN_TEST_BUILDDIR"));
    char outfile[600];
    snprintf(outfile, sizeof outfile, "%s.out", errfile);
    int n = 0;
    while (environ[n])
        n++;
    char **env = calloc((size_t)n + 4, sizeof *env);
    ck_assert_ptr_nonnull(env);
    char cachevar[600];
    snprintf(cachevar, sizeof cachevar, "KILN_CACHE_DIR=%s", dir);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(environ[i], "KILN_CACHE_DIR=", 15) != 0 &&
            strncmp(environ[i], "KILN_LOG=", 9) != 0)
            env[m++] = environ[i];
    env[m++] = cachevar;
    env[m++] = "KILN_LOG=warn";
    if (extra)
        env[m++] = (char *)extra;
    env[m] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, outfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = {helper, (char *)kiln_device_spec(dev), (char *)nbuilds, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, helper, &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    ck_assert_msg(rc == 0, "posix_spawn %s: %s", helper, strerror(rc));
    return pid;
}

/* The helper's counters: hits misses saves corrupt rejected write_errors binary_calls. */
#define NC 7

/* Wait for the helper: its wait status. */
static int wait_status(pid_t pid)
{
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

/* The counters the helper printed to errfile.out. */
static void read_counters(const char *errfile, unsigned long long *c)
{
    char outfile[600], line[256] = "";
    snprintf(outfile, sizeof outfile, "%s.out", errfile);
    FILE *f = fopen(outfile, "r");
    ck_assert_ptr_nonnull(f);
    if (!fgets(line, sizeof line, f))
        line[0] = '\0';
    fclose(f);
    ck_assert_msg(sscanf(line, "%llu %llu %llu %llu %llu %llu %llu", &c[0], &c[1], &c[2], &c[3],
                         &c[4], &c[5], &c[6]) == NC,
                  "helper printed \"%s\", see %s", line, errfile);
}

/* Wait for the helper, which must succeed; its counters go to c[NC]. */
static void wait_helper(pid_t pid, const char *errfile, unsigned long long *c)
{
    int status = wait_status(pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "helper failed (status %d), see %s", status, errfile);
    read_counters(errfile, c);
}

/* While the driver loads an entry (moved aside), another process starts on the same cache. */
static const char *start_process_dir;

static cl_program CL_API_CALL binary_while_process_starts(cl_context ctx, cl_uint n,
                                                          const cl_device_id *devs,
                                                          const size_t *lens,
                                                          const unsigned char **bins,
                                                          cl_int *bstatus, cl_int *err)
{
    if (start_process_dir) {
        char errfile[600];
        snprintf(errfile, sizeof errfile, "%s/starting.err", root);
        unsigned long long c[7];
        wait_helper(spawn_helper(start_process_dir, "1", errfile, NULL), errfile, c);
    }
    return real_binary(ctx, n, devs, lens, bins, bstatus, err);
}

/* An entry written long ago and moved aside while the driver loads it outlives a process that
 * starts meanwhile: that process removes aside files older than 10 minutes (leftovers of
 * crashed loaders), and the move must count as the file's age, not the entry's. Seen with
 * kiln-info --prewarm's processes: "cache: cannot put ... back (No such file or directory)". */
START_TEST(old_entry_outlives_a_process_starting_while_loaded)
{
    char dir[512], entry[600];
    use_dir("oldaside", dir, sizeof dir);
    build_ok(NULL);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    struct timespec old[2] = {{.tv_sec = 1000000}, {.tv_sec = 1000000}};
    ck_assert_int_eq(utimensat(AT_FDCWD, entry, old, 0), 0);
    kiln__diskcache_reset(); /* the next build loads the entry from disk */
    real_binary = kiln__cl.CreateProgramWithBinary;
    kiln__cl.CreateProgramWithBinary = binary_while_process_starts;
    start_process_dir = dir;
    captured log;
    capture_log(&log, "warn");
    build_ok(NULL);
    end_capture(&log);
    start_process_dir = NULL;
    kiln__cl.CreateProgramWithBinary = real_binary;
    ck_assert_int_eq(count_lines_with(log.path, "kiln:"), 0);
    ck_assert_int_eq(access(entry, F_OK), 0); /* put back */
    ck_assert_int_eq(count_files(dir, ".aside.", NULL, 0), 0);
    ck_assert_uint_eq(stats().hits, 1);
}
END_TEST

START_TEST(hit_in_new_process)
{
    char dir[512], err[512];
    snprintf(dir, sizeof dir, "%s/proc", root);
    snprintf(err, sizeof err, "%s/helper1.err", root);
    unsigned long long c[NC];
    wait_helper(spawn_helper(dir, "1", err, NULL), err, c);
    ck_assert_uint_eq(c[0], 0); /* hits */
    ck_assert_uint_eq(c[1], 1); /* misses */
    ck_assert_uint_eq(c[2], 1); /* saves */
    wait_helper(spawn_helper(dir, "1", err, NULL), err, c);
    ck_assert_uint_eq(c[0], 1);
    ck_assert_uint_eq(c[1], 0);
    ck_assert_uint_eq(c[2], 0);
    ck_assert_int_eq(count_lines_with(err, "kiln:"), 0); /* nothing at warn level */
}
END_TEST

START_TEST(one_warning_for_unusable_dir)
{
    char file[512], dir[600], err[512];
    snprintf(file, sizeof file, "%s/plain", root);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file);
    snprintf(err, sizeof err, "%s/helper2.err", root);
    unsigned long long c[NC];
    wait_helper(spawn_helper(dir, "3", err, NULL), err, c);
    ck_assert_uint_eq(c[1], 3);
    ck_assert_uint_eq(c[2], 0);
    ck_assert_int_eq(count_lines_with(err, "warn"), 1);
    ck_assert_int_eq(count_lines_with(err, "cannot use the program cache directory"), 1);
}
END_TEST

START_TEST(two_processes_race)
{
    char dir[512], e1[512], e2[512];
    snprintf(dir, sizeof dir, "%s/race", root);
    snprintf(e1, sizeof e1, "%s/race1.err", root);
    snprintf(e2, sizeof e2, "%s/race2.err", root);
    unsigned long long c1[NC], c2[NC];
    pid_t p1 = spawn_helper(dir, "2", e1, NULL);
    pid_t p2 = spawn_helper(dir, "2", e2, NULL);
    wait_helper(p1, e1, c1);
    wait_helper(p2, e2, c2);
    ck_assert_uint_eq(c1[3] + c2[3], 0); /* no torn file was ever read */
    ck_assert_uint_eq(c1[5] + c2[5], 0);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 2);
    ck_assert_int_eq(count_files(dir, ".tmp.", NULL, 0), 0);
    /* A third process finds both entries intact. */
    wait_helper(spawn_helper(dir, "2", e1, NULL), e1, c1);
    ck_assert_uint_eq(c1[0], 2);
    ck_assert_uint_eq(c1[3], 0);
}
END_TEST

/* Eight processes build the same program into an empty cache at once: all succeed with the
 * right result, nothing is torn, corrupt or refused, one entry remains, no temp or aside file. */
START_TEST(eight_processes_race)
{
    char dir[512], err[8][512];
    snprintf(dir, sizeof dir, "%s/race8", root);
    pid_t pid[8];
    for (int i = 0; i < 8; i++) {
        snprintf(err[i], sizeof err[i], "%s/race8-%d.err", root, i);
        pid[i] = spawn_helper(dir, "1", err[i], NULL);
    }
    unsigned long long sum[NC] = {0}, c[NC];
    for (int i = 0; i < 8; i++) {
        wait_helper(pid[i], err[i], c);
        for (int k = 0; k < NC; k++)
            sum[k] += c[k];
        ck_assert_int_eq(count_lines_with(err[i], "kiln: warn"), 0);
    }
    ck_assert_uint_eq(sum[0] + sum[1], 8);          /* each built or loaded it once */
    ck_assert_uint_eq(sum[2], sum[1]);              /* every build saved */
    ck_assert_uint_eq(sum[3] + sum[4] + sum[5], 0); /* nothing corrupt, refused, unsaved */
    ck_assert_uint_eq(sum[6], sum[0]);              /* the driver saw only hits */
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 1);
    ck_assert_int_eq(count_files(dir, ".tmp.", NULL, 0), 0);
    ck_assert_int_eq(count_files(dir, ".aside.", NULL, 0), 0);
    wait_helper(spawn_helper(dir, "1", err[0], NULL), err[0], c);
    ck_assert_uint_eq(c[0], 1);
    ck_assert_uint_eq(c[3] + c[4], 0);
}
END_TEST

/* A driver that crashes on a cached binary (the helper kills itself inside
 * clCreateProgramWithBinary) must not crash every later run: the entry was moved aside before
 * the driver saw it, so the next run, crashing too if handed a binary, builds from source. */
START_TEST(driver_crash_does_not_loop)
{
    char dir[512], err[512];
    snprintf(dir, sizeof dir, "%s/crash", root);
    snprintf(err, sizeof err, "%s/crash.err", root);
    unsigned long long c[NC];
    wait_helper(spawn_helper(dir, "1", err, NULL), err, c);
    ck_assert_uint_eq(c[2], 1);
    int status = wait_status(spawn_helper(dir, "1", err, "KILN_TEST_HELPER_CRASH=1"));
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "the helper was to die in the driver (status %d)", status);
    ck_assert_int_eq(count_files(dir, ".bin", NULL, 0), 0);
    ck_assert_int_eq(count_files(dir, ".aside.", NULL, 0), 1); /* cleaned once stale */
    wait_helper(spawn_helper(dir, "1", err, "KILN_TEST_HELPER_CRASH=1"), err, c);
    ck_assert_uint_eq(c[0], 0); /* hits */
    ck_assert_uint_eq(c[1], 1); /* misses */
    ck_assert_uint_eq(c[2], 1); /* saves */
    ck_assert_uint_eq(c[6], 0); /* no binary reached the driver */
    wait_helper(spawn_helper(dir, "1", err, NULL), err, c);
    ck_assert_uint_eq(c[0], 1);
    ck_assert_uint_eq(c[6], 1);
}
END_TEST

/* Issue 10, item 7 with the real driver: half of a valid binary under a correct header and
 * checksum made PoCL read past it (ASan heap-buffer-overflow, else exit 139) on every run.
 * Whatever the first run does with it (crash or refuse), the second must build and succeed. */
START_TEST(half_binary_does_not_loop)
{
    char dir[512], err[512], entry[768];
    snprintf(dir, sizeof dir, "%s/half", root);
    snprintf(err, sizeof err, "%s/half.err", root);
    unsigned long long c[NC];
    wait_helper(spawn_helper(dir, "1", err, NULL), err, c);
    ck_assert_int_eq(count_files(dir, ".bin", entry, sizeof entry), 1);
    size_t len, blen;
    uint8_t *bytes = read_whole(entry, &len);
    kiln__cache_entry e;
    ck_assert_ptr_null(kiln__cache_entry_parse(bytes, len, &e));
    e.size /= 2;
    uint8_t *half = kiln__cache_entry_encode(&e, &blen);
    ck_assert_ptr_nonnull(half);
    FILE *f = fopen(entry, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(half, 1, blen, f), blen);
    ck_assert_int_eq(fclose(f), 0);
    free(half);
    free(bytes);
    int status = wait_status(spawn_helper(dir, "1", err, NULL));
    bool crashed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!crashed) {
        read_counters(err, c);
        ck_assert_uint_eq(c[4], 1); /* then the driver refused it */
    }
    for (int run = 0; run < 2; run++) {
        wait_helper(spawn_helper(dir, "1", err, NULL), err, c);
        ck_assert_uint_eq(c[3] + c[4], 0);
        if (run == 0 && crashed)
            ck_assert_msg(c[1] == 1 && c[6] == 0, "after the crash: misses %llu binaries %llu",
                          c[1], c[6]);
        else
            ck_assert_uint_eq(c[0], 1); /* the rebuilt entry */
    }
}
END_TEST

/* ---- argument checks of programs from binaries (issue 19, item 6) ------------------------ */

/* Programs created from binaries, and kernels whose argument info is asked for: a driver that,
 * like NVIDIA's for PTX (OpenCL-CTS #1244), gives no argument info for them. */
static cl_program from_binaries[64];
static int n_from_binaries;
static cl_int(CL_API_CALL *real_arg_info)(cl_kernel, cl_uint, cl_kernel_arg_info, size_t, void *,
                                          size_t *);

static cl_program CL_API_CALL recorded_binary(cl_context ctx, cl_uint n, const cl_device_id *devs,
                                              const size_t *lens, const unsigned char **bins,
                                              cl_int *bstatus, cl_int *err)
{
    cl_program p = clCreateProgramWithBinary(ctx, n, devs, lens, bins, bstatus, err);
    if (p && n_from_binaries < 64)
        from_binaries[n_from_binaries++] = p;
    return p;
}

static cl_int CL_API_CALL no_info_from_binaries(cl_kernel k, cl_uint i, cl_kernel_arg_info what,
                                                size_t n, void *v, size_t *ret)
{
    cl_program p = NULL;
    if (clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof p, &p, NULL) == CL_SUCCESS)
        for (int j = 0; j < n_from_binaries; j++)
            if (from_binaries[j] == p)
                return CL_KERNEL_ARG_INFO_NOT_AVAILABLE;
    return real_arg_info(k, i, what, n, v, ret);
}

static const char *scale_source = "__kernel void scale(__global float *x, float a, int n)\n"
                                  "{\n"
                                  "    int i = get_global_id(0);\n"
                                  "    if (i < n)\n"
                                  "        x[i] *= a;\n"
                                  "}\n";

/* Build scale_source on dev; a launch with kiln_arg_i32 for the float `a` must be refused, one
 * with kiln_arg_f32 must scale. */
static void scale_checked(void)
{
    kiln_program *prog = NULL;
    ASSERT_OK(kiln_program_build(dev, scale_source, NULL, &prog));
    const int64_t shape[1] = {4};
    const float x[4] = {1, 2, 3, 4};
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, shape, x, &t));
    size_t global = 4;
    kiln_arg args[3] = {kiln_arg_tensor(t), kiln_arg_i32(3), kiln_arg_i32(4)};
    kiln_status s = kiln_program_launch(prog, "scale", 1, &global, NULL, 3, args);
    ck_assert_msg(s == KILN_ERR_INVALID_ARGUMENT,
                  "kiln_arg_i32 for the float parameter was accepted (status %s): the argument "
                  "checks were lost",
                  kiln_status_string(s));
    ASSERT_ERROR_HAS("parameter 1 'a' (float)");
    args[1] = kiln_arg_f32(3);
    ASSERT_OK(kiln_program_launch(prog, "scale", 1, &global, NULL, 3, args));
    float y[4];
    ASSERT_OK(kiln_tensor_read(t, y, sizeof y));
    for (int i = 0; i < 4; i++)
        ck_assert_msg(y[i] == 3 * x[i], "element %d: %g, not %g", i, y[i], 3 * x[i]);
    kiln_tensor_release(t);
    kiln_program_release(prog);
}

/* A warm run checks arguments as the cold run did, even where the driver gives no argument info
 * for programs loaded from binaries: the cache entry holds the parameter table. */
START_TEST(warm_run_keeps_argument_checks)
{
    char dir[512];
    use_dir("arginfo", dir, sizeof dir);
    n_from_binaries = 0;
    kiln__cl.CreateProgramWithBinary = recorded_binary;
    real_arg_info = kiln__cl.GetKernelArgInfo;
    kiln__cl.GetKernelArgInfo = no_info_from_binaries;
    scale_checked(); /* cold: built from source */
    ck_assert_uint_eq(stats().saves, 1);
    ck_assert_int_eq(n_from_binaries, 0);
    scale_checked(); /* warm: from the entry's binary */
    ck_assert_uint_eq(stats().hits, 1);
    ck_assert_int_eq(n_from_binaries, 1);
}
END_TEST

START_TEST(stale_temp_files_are_cleaned)
{
    char dir[512], tmp[600], fresh[600], aside[600];
    use_dir("stale", dir, sizeof dir);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(tmp, sizeof tmp, "%s/0123456789abcdef.bin.tmp.1.0", dir);
    snprintf(fresh, sizeof fresh, "%s/0123456789abcdef.bin.tmp.2.0", dir);
    snprintf(aside, sizeof aside, "%s/0123456789abcdef.bin.aside.3.0", dir);
    const char *files[] = {tmp, fresh, aside};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(files[i], "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
    }
    struct timespec old[2] = {{.tv_sec = 1000000}, {.tv_sec = 1000000}};
    ck_assert_int_eq(utimensat(AT_FDCWD, tmp, old, 0), 0);
    ck_assert_int_eq(utimensat(AT_FDCWD, aside, old, 0), 0);
    build_ok(NULL);
    ck_assert_int_eq(access(tmp, F_OK), -1);   /* an old leftover is removed */
    ck_assert_int_eq(access(aside, F_OK), -1); /* and an entry a crashed process held */
    ck_assert_int_eq(access(fresh, F_OK), 0);  /* a live writer's file is left alone */
}
END_TEST

START_TEST(stats_null)
{
    ck_assert_int_eq(kiln_cache_stats_get(NULL), KILN_ERR_INVALID_ARGUMENT);
    ASSERT_ERROR_HAS("stats is NULL");
    (void)stats(); /* and a fill zeroes the reserved fields */
}
END_TEST

Suite *diskcache_suite(void)
{
    Suite *s = suite_create("diskcache");
    TCase *tc = tcase_create("key");
    tcase_add_test(tc, key_covers_every_field);
    tcase_add_test(tc, fnv1a_known_values);
    tcase_add_test(tc, key_covers_include_files);
    tcase_add_test(tc, stats_null);
    suite_add_tcase(s, tc);

    tc = tcase_create("process");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, hit_after_save_and_permissions);
    tcase_add_test(tc, include_change_rebuilds);
    tcase_add_test(tc, group_writable_dir_is_tightened);
    tcase_add_test(tc, world_writable_dir_is_refused);
    tcase_add_test(tc, symlinked_dir_is_refused);
    tcase_add_test(tc, foreign_owned_dir_is_refused);
    tcase_add_test(tc, cache_off);
    tcase_add_test(tc, uncreatable_dir_builds_anyway);
    tcase_add_test(tc, stale_temp_files_are_cleaned);
    tcase_add_test(tc, driver_rejects_binary);
    tcase_add_test(tc, unwritable_entry_leaves_no_temp);
    tcase_add_test(tc, read_only_dir_is_not_used);
    tcase_add_test(tc, disk_full_builds_anyway);
    tcase_add_test(tc, unsaved_binary_is_a_write_error);
    tcase_add_test(tc, second_device_entry_is_saved);
    tcase_add_test(tc, warm_run_keeps_argument_checks);
    suite_add_tcase(s, tc);

    tc = tcase_create("damaged");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, truncated_entries_rebuild);
    tcase_add_test(tc, damaged_entries_rebuild);
    tcase_add_test(tc, foreign_owned_entry_is_refused);
    tcase_add_test(tc, entry_deleted_while_read);
    tcase_add_test(tc, entry_shrunk_while_read);
    tcase_add_test(tc, entry_with_other_kernels_is_dropped);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);

    tc = tcase_create("processes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, hit_in_new_process);
    tcase_add_test(tc, one_warning_for_unusable_dir);
    tcase_add_test(tc, two_processes_race);
    tcase_add_test(tc, old_entry_outlives_a_process_starting_while_loaded);
    tcase_add_test(tc, eight_processes_race);
    tcase_add_test(tc, driver_crash_does_not_loop);
    tcase_add_test(tc, half_binary_does_not_loop);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    return s;
}
