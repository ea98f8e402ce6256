/* diskcache.c - the on-disk cache of program binaries: where it lives, the key, entries that are
 * verified before a driver sees them, atomic writes, and the counters of kiln_cache_stats_get. */
#include "diskcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "includes.h"
#include "status.h"

#define ENTRY_MAGIC "KILNBIN\0"
#define ENTRY_VERSION 1u
#define HEADER_SIZE 40u
#define PAYLOAD_CAP ((uint64_t)1 << 30) /* no program binary is near 1 GiB */
#define STALE_TMP_SECONDS 600           /* older temp files are leftovers of dead writers */

/* Entry layout, little-endian:
 *   0  magic "KILNBIN\0"      16 key length (u64)   32 FNV-1a of key + payload (u64)
 *   8  format version (u32)   24 payload length (u64)
 *  12  header size (u32)      40 key text, then the payload (the driver's binary) */

static struct {
    pthread_mutex_t lock;
    bool resolved;
    bool enabled; /* KILN_CACHE is not 0 */
    bool usable;  /* the directory exists and is ours */
    char dir[4096];
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_bool warned_write;
static atomic_uint tmp_counter;
static _Atomic uint64_t n_hits, n_misses, n_saves, n_corrupt, n_rejected, n_write_errors;

uint64_t kiln__fnv1a(const void *data, size_t n, uint64_t h)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

char *kiln__diskcache_key(const kiln_device_info *info, const char *source, size_t srclen,
                          const char *options, size_t *keylen, bool *cacheable)
{
    /* Every field is length-prefixed, so no two different field lists give one text. */
    const char *fmt = "kiln program cache key v2\nkiln %zu:%s\ndevice %zu:%s\nvendor %zu:%s\n"
                      "driver %zu:%s\nplatform %zu:%s\noptions %zu:%s\nincludes %zu:";
    const char *ver = KILN_VERSION_STRING, *why = NULL;
    options = options ? options : "";
    char *inc = NULL;
    size_t inclen = 0;
    bool ok = kiln__includes_text(options, &inc, &inclen, &why);
    if (cacheable)
        *cacheable = ok;
    if (!ok)
        kiln__log(KILN_LOG_DEBUG, "program cache: not caching a build with options \"%s\": %s",
                  options, why);
#define KILN__KEY_ARGS                                                                             \
    strlen(ver), ver, strlen(info->name), info->name, strlen(info->vendor), info->vendor,          \
        strlen(info->driver_version), info->driver_version, strlen(info->platform_version),        \
        info->platform_version, strlen(options), options, inclen
    int head = snprintf(NULL, 0, fmt, KILN__KEY_ARGS);
    char tail[64];
    int tlen = snprintf(tail, sizeof tail, "\nsource %zu:", srclen);
    char *key = head < 0 ? NULL : kiln__malloc((size_t)head + inclen + (size_t)tlen + srclen + 1);
    if (key) {
        snprintf(key, (size_t)head + 1, fmt, KILN__KEY_ARGS);
        char *p = key + head;
        if (inclen)
            memcpy(p, inc, inclen);
        memcpy(p + inclen, tail, (size_t)tlen);
        memcpy(p + inclen + tlen, source, srclen);
        p[inclen + (size_t)tlen + srclen] = '\0';
        *keylen = (size_t)head + inclen + (size_t)tlen + srclen;
    }
#undef KILN__KEY_ARGS
    free(inc);
    return key;
}

/* mkdir -p with 0700 for what we create. */
static int make_dirs(const char *path)
{
    char buf[sizeof cache.dir];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Remove temp files that writers which died left behind (live writers' files are young). */
static void clean_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".tmp."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            now - st.st_mtime > STALE_TMP_SECONDS)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* Check the directory is a real directory of ours, not writable by others; tighten it when it
 * is ours. Returns NULL when usable, else why not. */
static const char *check_dir(const char *dir)
{
    if (make_dirs(dir) != 0)
        return strerror(errno);
    struct stat st;
    if (lstat(dir, &st) != 0)
        return strerror(errno);
    if (S_ISLNK(st.st_mode))
        return "it is a symbolic link";
    if (!S_ISDIR(st.st_mode))
        return "it is not a directory";
    if (st.st_uid != geteuid())
        return "it is owned by another user";
    if ((st.st_mode & 022) && chmod(dir, 0700) != 0)
        return "it is writable by others and could not be tightened";
    if (access(dir, W_OK | X_OK) != 0)
        return strerror(errno);
    return NULL;
}

static void resolve_dir(void)
{
    const char *off = getenv("KILN_CACHE");
    const char *env = getenv("KILN_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    cache.enabled = !(off && strcmp(off, "0") == 0);
    cache.usable = false;
    cache.dir[0] = '\0';
    if (!cache.enabled)
        return;
    int n;
    if (env && *env)
        n = snprintf(cache.dir, sizeof cache.dir, "%s", env);
    else if (xdg && xdg[0] == '/')
        n = snprintf(cache.dir, sizeof cache.dir, "%s/kiln", xdg);
    else if (home && *home)
        n = snprintf(cache.dir, sizeof cache.dir, "%s/.cache/kiln", home);
    else
        n = snprintf(cache.dir, sizeof cache.dir, "%s", "");
    const char *why = NULL;
    if (n <= 0 || (size_t)n >= sizeof cache.dir - 64)
        why = n <= 0 ? "no KILN_CACHE_DIR, XDG_CACHE_HOME or HOME is set" : "the path is too long";
    else
        why = check_dir(cache.dir);
    if (why) {
        atomic_fetch_add(&n_write_errors, 1);
        kiln__log(KILN_LOG_WARN,
                  "cache: cannot use the program cache directory \"%s\" (%s); programs will be "
                  "built from source every run (set KILN_CACHE_DIR to a writable directory, or "
                  "KILN_CACHE=0 to silence this)",
                  cache.dir, why);
        return;
    }
    cache.usable = true;
    clean_stale_temps(cache.dir);
}

/* Resolve the directory once per process (or after kiln__diskcache_reset). */
static bool cache_usable(void)
{
    pthread_mutex_lock(&cache.lock);
    if (!cache.resolved) {
        resolve_dir();
        cache.resolved = true;
    }
    bool usable = cache.usable;
    pthread_mutex_unlock(&cache.lock);
    return usable;
}

bool kiln__diskcache_entry_path(const char *key, size_t keylen, char *buf, size_t size)
{
    if (!cache_usable())
        return false;
    int n = snprintf(buf, size, "%s/%016llx.bin", cache.dir,
                     (unsigned long long)kiln__fnv1a(key, keylen, KILN__FNV_OFFSET));
    return n > 0 && (size_t)n < size;
}

static void corrupt(const char *path, const char *why)
{
    atomic_fetch_add(&n_corrupt, 1);
    kiln__log(KILN_LOG_WARN, "cache: entry %s is unusable (%s); removing it and rebuilding", path,
              why);
    if (unlink(path) != 0 && errno != ENOENT)
        kiln__log(KILN_LOG_WARN, "cache: cannot remove %s: %s", path, strerror(errno));
}

bool kiln__fd_transfer(int fd, void *buf, size_t n, bool writing)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t r = writing ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            errno = 0;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static bool read_all(int fd, void *buf, size_t n)
{
    return kiln__fd_transfer(fd, buf, n, false);
}

static bool write_all(int fd, const void *buf, size_t n)
{
    return kiln__fd_transfer(fd, (void *)buf, n, true);
}

/* What verify found: a usable entry, one to remove, or no host memory to check it with (the
 * entry may be fine: keep it). */
typedef enum verdict {
    ENTRY_OK,
    ENTRY_CORRUPT,
    ENTRY_NO_MEMORY,
} verdict;

/* Check an entry's header against the file and the key length: NULL, with the payload length and
 * checksum, or why the entry is unusable. Nothing is allocated. */
static const char *check_header(int fd, size_t keylen, uint64_t *plen, uint64_t *sum)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return "not a regular file";
    if (st.st_size == 0)
        return "empty file";
    unsigned char h[HEADER_SIZE];
    if ((uint64_t)st.st_size < HEADER_SIZE || !read_all(fd, h, HEADER_SIZE))
        return "truncated header";
    if (memcmp(h, ENTRY_MAGIC, 8) != 0)
        return "bad magic: not a kiln cache entry";
    if (get_u32(h + 8) != ENTRY_VERSION || get_u32(h + 12) != HEADER_SIZE)
        return "unknown format version";
    uint64_t klen = get_u64(h + 16), body = (uint64_t)st.st_size - HEADER_SIZE;
    *plen = get_u64(h + 24);
    *sum = get_u64(h + 32);
    if (klen != keylen)
        return "a different key (hash collision or foreign entry)";
    /* Lengths are checked against the file before anything is allocated. */
    if (*plen == 0 || *plen > PAYLOAD_CAP || klen > body || *plen != body - klen)
        return "length fields do not match the file size (truncated?)";
    return NULL;
}

/* Read the stored key into k and the payload into p, and check them: NULL or why not. */
static const char *check_body(int fd, const char *key, size_t keylen, char *k, unsigned char *p,
                              uint64_t plen, uint64_t sum)
{
    if (!read_all(fd, k, keylen) || !read_all(fd, p, (size_t)plen))
        return "short read";
    if (memcmp(k, key, keylen) != 0)
        return "a different key (hash collision or foreign entry)";
    if (kiln__fnv1a(p, (size_t)plen, kiln__fnv1a(k, keylen, KILN__FNV_OFFSET)) != sum)
        return "checksum mismatch";
    return NULL;
}

/* Check an open entry against key; on ENTRY_OK *payload (malloc'd) holds the binary, on
 * ENTRY_CORRUPT *why says what is wrong. */
static verdict verify(int fd, const char *key, size_t keylen, unsigned char **payload, size_t *size,
                      const char **why)
{
    uint64_t plen = 0, sum = 0;
    *why = check_header(fd, keylen, &plen, &sum);
    if (*why)
        return ENTRY_CORRUPT;
    char *k = kiln__malloc(keylen ? keylen : 1);
    unsigned char *p = kiln__malloc((size_t)plen);
    if (!k || !p) {
        free(k);
        free(p);
        return ENTRY_NO_MEMORY;
    }
    *why = check_body(fd, key, keylen, k, p, plen, sum);
    free(k);
    if (*why) {
        free(p);
        return ENTRY_CORRUPT;
    }
    *payload = p;
    *size = (size_t)plen;
    return ENTRY_OK;
}

bool kiln__diskcache_load(const char *key, size_t keylen, unsigned char **binary, size_t *size)
{
    char path[sizeof cache.dir + 32];
    *binary = NULL;
    *size = 0;
    if (!kiln__diskcache_entry_path(key, keylen, path, sizeof path))
        return false;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ELOOP)
            corrupt(path, "a symbolic link");
        else if (errno != ENOENT)
            kiln__log(KILN_LOG_WARN, "cache: cannot open %s: %s", path, strerror(errno));
        else
            kiln__log(KILN_LOG_INFO, "cache: miss %s", path);
        return false;
    }
    const char *why = NULL;
    verdict v = verify(fd, key, keylen, binary, size, &why);
    close(fd);
    if (v == ENTRY_CORRUPT)
        corrupt(path, why);
    if (v != ENTRY_OK)
        return false;
    atomic_fetch_add(&n_hits, 1);
    kiln__log(KILN_LOG_INFO, "cache: hit %s (%zu bytes)", path, *size);
    return true;
}

static void write_failed(const char *what, const char *path)
{
    atomic_fetch_add(&n_write_errors, 1);
    bool was = atomic_exchange(&warned_write, true);
    kiln__log(was ? KILN_LOG_DEBUG : KILN_LOG_WARN,
              "cache: cannot %s %s (%s); the program was built but not cached", what, path,
              strerror(errno));
}

void kiln__diskcache_store(const char *key, size_t keylen, const unsigned char *binary, size_t size)
{
    char path[sizeof cache.dir + 32], tmp[sizeof cache.dir + 96];
    if (size == 0 || !kiln__diskcache_entry_path(key, keylen, path, sizeof path))
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(),
             atomic_fetch_add(&tmp_counter, 1));
    unsigned char h[HEADER_SIZE] = {0};
    memcpy(h, ENTRY_MAGIC, sizeof ENTRY_MAGIC - 1); /* its 8 bytes, the last one NUL */
    put_u32(h + 8, ENTRY_VERSION);
    put_u32(h + 12, HEADER_SIZE);
    put_u64(h + 16, keylen);
    put_u64(h + 24, size);
    put_u64(h + 32, kiln__fnv1a(binary, size, kiln__fnv1a(key, keylen, KILN__FNV_OFFSET)));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        write_failed("create", tmp);
        return;
    }
    bool ok = write_all(fd, h, sizeof h) && write_all(fd, key, keylen) &&
              write_all(fd, binary, size) && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    /* rename() is atomic: readers see the old entry or the whole new one, never a torn one. */
    if (!ok || rename(tmp, path) != 0) {
        write_failed(ok ? "rename into" : "write", ok ? path : tmp);
        unlink(tmp);
        return;
    }
    atomic_fetch_add(&n_saves, 1);
    kiln__log(KILN_LOG_INFO, "cache: saved %s (%zu bytes)", path, size);
}

void kiln__diskcache_rejected(const char *key, size_t keylen)
{
    char path[sizeof cache.dir + 32];
    atomic_fetch_add(&n_rejected, 1);
    if (kiln__diskcache_entry_path(key, keylen, path, sizeof path)) {
        kiln__log(KILN_LOG_WARN, "cache: the driver refused %s; removing it and rebuilding", path);
        unlink(path);
    }
}

void kiln__diskcache_count_miss(void)
{
    atomic_fetch_add(&n_misses, 1);
}

void kiln__diskcache_reset(void)
{
    pthread_mutex_lock(&cache.lock);
    cache.resolved = false;
    pthread_mutex_unlock(&cache.lock);
    atomic_store(&warned_write, false);
    atomic_store(&n_hits, 0);
    atomic_store(&n_misses, 0);
    atomic_store(&n_saves, 0);
    atomic_store(&n_corrupt, 0);
    atomic_store(&n_rejected, 0);
    atomic_store(&n_write_errors, 0);
}

kiln_status kiln_cache_stats_get(kiln_cache_stats *stats)
{
    if (!stats)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_cache_stats_get: stats is NULL");
    memset(stats, 0, sizeof *stats);
    stats->hits = atomic_load(&n_hits);
    stats->misses = atomic_load(&n_misses);
    stats->saves = atomic_load(&n_saves);
    stats->corrupt = atomic_load(&n_corrupt);
    stats->rejected = atomic_load(&n_rejected);
    stats->write_errors = atomic_load(&n_write_errors);
    return KILN_OK;
}

const char *kiln_cache_dir(void)
{
    cache_usable();
    return cache.enabled ? cache.dir : "";
}
