/* checkpoint.c - kiln-bench checkpoint: kiln_save and kiln_load of one tensor against write()
 * (with fsync, as kiln_save does) and read() of the same bytes between host memory and a file,
 * in the same run and folder ($TMPDIR, else /tmp); kiln_load_mapped with every page touched
 * against read() and against safetensors' load_file (torch_ref.py, where PyTorch's Python has
 * the package) touching every page too. Rates in GB/s of tensor data. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static bool raw_write(const char *path, const void *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) {
            close(fd);
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    bool ok = fsync(fd) == 0;
    return close(fd) == 0 && ok;
}

static bool raw_read(const char *path, void *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r <= 0) {
            close(fd);
            return false;
        }
        p += r;
        n -= (size_t)r;
    }
    return close(fd) == 0;
}

/* kiln_load_mapped, then one byte of every page of every tensor read on the host (what makes a
 * mapped load pay for its page faults), the checkpoint freed. */
static kiln_status load_mapped_touched(const char *path, kiln_device *dev)
{
    kiln_checkpoint *ck = NULL;
    kiln_status s = kiln_load_mapped(path, dev, &ck);
    volatile unsigned char sink = 0;
    for (int i = 0; s == KILN_OK && i < kiln_checkpoint_count(ck); i++) {
        kiln_tensor *t = kiln_checkpoint_tensor(ck, i);
        void *p = NULL;
        if (kiln_tensor_nbytes(t) == 0 || (s = kiln_tensor_map(t, KILN_MAP_READ, &p)) != KILN_OK)
            continue;
        const unsigned char *b = p;
        for (size_t k = 0; k < kiln_tensor_nbytes(t); k += 4096)
            sink ^= b[k];
        s = kiln_tensor_unmap(t);
    }
    (void)sink;
    kiln_checkpoint_free(ck);
    return s;
}

/* The safetensors row: load_file's median time from torch_ref.py beside kiln's mapped loads. */
typedef struct mapped_row {
    bench_ctx *ctx;
    double *kiln;
    int n;
    size_t bytes;
} mapped_row;

static int safetensors_row(void *user, long a, long b, long c, double seconds, const char *version,
                           int threads)
{
    (void)a, (void)b, (void)c, (void)version, (void)threads;
    mapped_row *m = user;
    double base[64];
    int n = m->n < 64 ? m->n : 64;
    for (int i = 0; i < n; i++)
        base[i] = (double)m->bytes / seconds / 1e9;
    char name[96];
    snprintf(name, sizeof name, "load mapped %zu MiB, touched", m->bytes >> 20);
    bench_result r;
    bench_result_set(&r, name, "GB/s", true, "safetensors load_file", m->kiln, base, n);
    bench_report(m->ctx, &r);
    return 0;
}

int bench_checkpoint(bench_ctx *ctx)
{
    size_t bytes = ctx->quick ? (size_t)64 << 20 : (size_t)1 << 30;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char kpath[512], rpath[512];
    snprintf(kpath, sizeof kpath, "%s/kiln-bench-%ld.safetensors", tmp, (long)getpid());
    snprintf(rpath, sizeof rpath, "%s/kiln-bench-%ld.raw", tmp, (long)getpid());
    const int64_t shape[1] = {(int64_t)(bytes / 4)};
    kiln_tensor *t = NULL;
    kiln_status s = kiln_rand_uniform(ctx->dev, KILN_F32, 1, shape, 1, -1, 1, &t);
    if (s != KILN_OK)
        return bench_fail("kiln_rand_uniform", s);
    char *host = malloc(bytes);
    if (!host || (s = kiln_tensor_read(t, host, bytes)) != KILN_OK) {
        kiln_tensor_release(t);
        free(host);
        return s != KILN_OK ? bench_fail("kiln_tensor_read", s) : 1;
    }
    int n = ctx->quick ? 3 : (ctx->repeats < 3 ? 3 : ctx->repeats);
    double *ks = calloc((size_t)n, sizeof *ks), *kl = calloc((size_t)n, sizeof *kl);
    double *rw = calloc((size_t)n, sizeof *rw), *rr = calloc((size_t)n, sizeof *rr);
    double *km = calloc((size_t)n, sizeof *km);
    int rc = ks && kl && rw && rr && km ? 0 : 1;
    char sz[32];
    snprintf(sz, sizeof sz, "%zu MiB", bytes >> 20);
    bench_progress(ctx, "checkpoint: %s", sz);
    for (int i = 0; i < n && rc == 0; i++) {
        /* interleaved, so that the machine's state is the same for both */
        double t0 = bench_now();
        s = kiln_save(kpath, (kiln_named_tensor[]){{"weights", t}}, 1);
        double t1 = bench_now();
        if (s != KILN_OK) {
            rc = bench_fail("kiln_save", s);
            break;
        }
        if (!raw_write(rpath, host, bytes)) {
            fprintf(stderr, "kiln-bench: writing %s: %s\n", rpath, strerror(errno));
            rc = 1;
            break;
        }
        double t2 = bench_now();
        if (!raw_read(rpath, host, bytes)) {
            fprintf(stderr, "kiln-bench: reading %s: %s\n", rpath, strerror(errno));
            rc = 1;
            break;
        }
        double t3 = bench_now();
        kiln_checkpoint *ck = NULL;
        s = kiln_load(kpath, ctx->dev, &ck);
        if (s == KILN_OK)
            s = kiln_device_synchronize(ctx->dev);
        double t4 = bench_now();
        kiln_checkpoint_free(ck);
        if (s != KILN_OK) {
            rc = bench_fail("kiln_load", s);
            break;
        }
        double t5 = bench_now();
        s = load_mapped_touched(kpath, ctx->dev);
        double t6 = bench_now();
        if (s != KILN_OK) {
            rc = bench_fail("kiln_load_mapped", s);
            break;
        }
        ks[i] = (double)bytes / (t1 - t0) / 1e9;
        rw[i] = (double)bytes / (t2 - t1) / 1e9;
        rr[i] = (double)bytes / (t3 - t2) / 1e9;
        kl[i] = (double)bytes / (t4 - t3) / 1e9;
        km[i] = (double)bytes / (t6 - t5) / 1e9;
    }
    if (rc == 0) {
        bench_result r;
        char name[96];
        snprintf(name, sizeof name, "save %s", sz);
        bench_result_set(&r, name, "GB/s", true, "write()+fsync", ks, rw, n);
        bench_report(ctx, &r);
        snprintf(name, sizeof name, "load %s", sz);
        bench_result_set(&r, name, "GB/s", true, "read()", kl, rr, n);
        bench_report(ctx, &r);
        snprintf(name, sizeof name, "load mapped %s, touched", sz);
        bench_result_set(&r, name, "GB/s", true, "read()", km, rr, n);
        bench_report(ctx, &r);
        /* safetensors' load_file on the same file, where PyTorch's Python has the package */
        mapped_row mr = {ctx, km, n, bytes};
        char args[600];
        if (snprintf(args, sizeof args, "safetensors %d '%s'", n, kpath) < (int)sizeof args &&
            !strchr(kpath, '\''))
            bench_torch(ctx, "checkpoint", args, safetensors_row, &mr);
        bench_note(ctx,
                   "checkpoint: files in %s; loads read from the page cache (the file was "
                   "just written), as a training job resuming on the same machine does",
                   tmp);
    }
    unlink(kpath);
    unlink(rpath);
    free(ks);
    free(kl);
    free(rw);
    free(rr);
    free(km);
    free(host);
    kiln_tensor_release(t);
    return rc;
}
