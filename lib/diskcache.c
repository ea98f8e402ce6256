/* diskcache.c - the on-disk cache of program binaries: where it lives, the key, entries that are
 * verified before a driver sees them, atomic writes, and the counters of kiln_cache_stats_get. */
#include "diskcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "fdio.h"
#include "includes.h"
#include "paramtable.h"
#include "status.h"

#define ENTRY_MAGIC "KILNBIN\0"
#define ENTRY_VERSION 3u /* 3: the parameter table (issue 19); a version-2 entry is rebuilt */
#define HEADER_SIZE 56u
#define SUM_OFFSET 48u
#define PAYLOAD_CAP ((uint64_t)1 << 30) /* no program binary is near 1 GiB */
#define KEY_CAP ((uint64_t)1 << 30)
#define NAMES_CAP ((uint64_t)1 << 20)
#define STALE_TMP_SECONDS 600 /* older temp and aside files are leftovers of dead processes */

/* Entry layout, little-endian:
 *   0  magic "KILNBIN\0"      16 key length (u64)     32 parameter table length (u64)
 *   8  format version (u32)   24 names length (u64)   40 payload length (u64)
 *  12  header size (u32)      48 FNV-1a of bytes 0-47, key, names, parameter table, payload
 *  56  key text, kernel names ("a;b"), parameter table (paramtable.h), payload (the driver's
 *      binary) */

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

/* Remove temp files of writers, and entries moved aside by loaders, that died (live ones' files
 * are young). */
static void clean_stale_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".tmp.") && !strstr(e->d_name, ".aside."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            now - st.st_mtime > STALE_TMP_SECONDS)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* Check the directory is a real directory of ours that no other user may write to; tighten it
 * when only its group may. Returns NULL when usable, else why not. A directory every user may
 * write to (say /tmp) is refused, not tightened: others may have planted entries there, and it
 * is rarely ours to change. */
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
    if (st.st_mode & S_IWOTH)
        return "it is writable by every user";
    if (st.st_mode & S_IWGRP) {
        if (chmod(dir, 0700) != 0)
            return "it is writable by its group and could not be tightened";
        kiln__log(KILN_LOG_WARN, "cache: %s was writable by its group; made it 0700", dir);
    }
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

bool kiln__diskcache_usable(void)
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
    if (!kiln__diskcache_usable())
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

static bool read_all(int fd, void *buf, size_t n)
{
    return kiln__fd_transfer(fd, buf, n, false);
}

static bool write_all(int fd, const void *buf, size_t n)
{
    return kiln__fd_transfer(fd, (void *)buf, n, true);
}

const char *kiln__cache_entry_parse(const uint8_t *buf, size_t len, kiln__cache_entry *out)
{
    memset(out, 0, sizeof *out);
    if (len == 0)
        return "empty file";
    if (len < HEADER_SIZE)
        return "truncated header";
    if (memcmp(buf, ENTRY_MAGIC, 8) != 0)
        return "bad magic: not a kiln cache entry";
    if (get_u32(buf + 8) != ENTRY_VERSION || get_u32(buf + 12) != HEADER_SIZE)
        return "unknown format version";
    uint64_t klen = get_u64(buf + 16), nlen = get_u64(buf + 24), tlen = get_u64(buf + 32);
    uint64_t plen = get_u64(buf + 40), body = (uint64_t)len - HEADER_SIZE;
    /* Each length is checked against what is left, so no sum can wrap. */
    if (klen > body || nlen > body - klen || tlen > body - klen - nlen ||
        plen != body - klen - nlen - tlen)
        return "length fields do not match the file size (truncated?)";
    if (klen == 0 || klen > KEY_CAP || nlen > NAMES_CAP || tlen > KILN__PARAM_TABLE_CAP ||
        plen == 0 || plen > PAYLOAD_CAP)
        return "a length field is out of range";
    const char *key = (const char *)buf + HEADER_SIZE;
    if (memchr(key + klen, '\0', (size_t)nlen))
        return "the kernel names hold a NUL byte";
    uint64_t sum = kiln__fnv1a(buf, SUM_OFFSET, KILN__FNV_OFFSET);
    if (kiln__fnv1a(buf + HEADER_SIZE, (size_t)body, sum) != get_u64(buf + SUM_OFFSET))
        return "checksum mismatch";
    const uint8_t *table = buf + HEADER_SIZE + klen + nlen;
    const char *why = kiln__param_table_check(table, (size_t)tlen, key + klen, (size_t)nlen);
    if (why)
        return why;
    out->key = key;
    out->keylen = (size_t)klen;
    out->names = key + klen;
    out->nameslen = (size_t)nlen;
    out->payload = table + tlen;
    out->size = (size_t)plen;
    out->params = table;
    out->paramslen = (size_t)tlen;
    return NULL;
}

uint8_t *kiln__cache_entry_encode(const kiln__cache_entry *e, size_t *len)
{
    *len = 0;
    if (e->keylen == 0 || e->keylen > KEY_CAP || e->nameslen > NAMES_CAP || e->size == 0 ||
        e->size > PAYLOAD_CAP || e->paramslen > KILN__PARAM_TABLE_CAP)
        return NULL;
    size_t n = HEADER_SIZE + e->keylen + e->nameslen + e->paramslen + e->size;
    uint8_t *b = kiln__malloc(n);
    if (!b)
        return NULL;
    memset(b, 0, HEADER_SIZE);
    memcpy(b, ENTRY_MAGIC, sizeof ENTRY_MAGIC - 1); /* its 8 bytes, the last one NUL */
    put_u32(b + 8, ENTRY_VERSION);
    put_u32(b + 12, HEADER_SIZE);
    put_u64(b + 16, e->keylen);
    put_u64(b + 24, e->nameslen);
    put_u64(b + 32, e->paramslen);
    put_u64(b + 40, e->size);
    uint8_t *p = b + HEADER_SIZE;
    memcpy(p, e->key, e->keylen);
    p += e->keylen;
    if (e->nameslen)
        memcpy(p, e->names, e->nameslen);
    p += e->nameslen;
    if (e->paramslen)
        memcpy(p, e->params, e->paramslen);
    memcpy(p + e->paramslen, e->payload, e->size);
    uint64_t sum = kiln__fnv1a(b, SUM_OFFSET, KILN__FNV_OFFSET);
    put_u64(b + SUM_OFFSET, kiln__fnv1a(b + HEADER_SIZE, n - HEADER_SIZE, sum));
    *len = n;
    return b;
}

/* Whether every non-empty name of list a[0, alen) is in list b[0, blen). */
static bool names_within(const char *a, size_t alen, const char *b, size_t blen)
{
    for (size_t i = 0; i < alen;) {
        const char *end = memchr(a + i, ';', alen - i);
        size_t n = end ? (size_t)(end - (a + i)) : alen - i;
        bool found = n == 0;
        for (size_t j = 0; j < blen && !found;) {
            const char *bend = memchr(b + j, ';', blen - j);
            size_t m = bend ? (size_t)(bend - (b + j)) : blen - j;
            found = m == n && memcmp(a + i, b + j, n) == 0;
            j += m + 1;
        }
        if (!found)
            return false;
        i += n + 1;
    }
    return true;
}

bool kiln__kernel_names_match(const char *a, size_t alen, const char *b, size_t blen)
{
    return names_within(a, alen, b, blen) && names_within(b, blen, a, alen);
}

void (*kiln__diskcache_before_read)(const char *path);

/* What reading an entry found: its bytes, a file to remove, or no host memory to check it with
 * (the entry may be fine: keep it). */
typedef enum verdict {
    ENTRY_OK,
    ENTRY_CORRUPT,
    ENTRY_NO_MEMORY,
} verdict;

/* Read the whole entry file open on fd: its bytes (malloc'd) and length, or why not. The file's
 * kind, owner and size are checked before anything is allocated. */
static verdict read_entry(int fd, const char *path, size_t keylen, uint8_t **buf, size_t *len,
                          const char **why)
{
    struct stat st;
    *why = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        *why = "not a regular file";
    else if (st.st_uid != geteuid())
        *why = "owned by another user";
    else if (st.st_size == 0)
        *why = "empty file";
    else if ((uint64_t)st.st_size >
             HEADER_SIZE + keylen + NAMES_CAP + KILN__PARAM_TABLE_CAP + PAYLOAD_CAP)
        *why = "larger than any entry for its key";
    if (*why)
        return ENTRY_CORRUPT;
    if (kiln__diskcache_before_read)
        kiln__diskcache_before_read(path);
    uint8_t *b = kiln__malloc((size_t)st.st_size);
    if (!b)
        return ENTRY_NO_MEMORY;
    if (!read_all(fd, b, (size_t)st.st_size)) {
        free(b);
        *why = "short read (the file shrank)";
        return ENTRY_CORRUPT;
    }
    *buf = b;
    *len = (size_t)st.st_size;
    return ENTRY_OK;
}

/* Move the entry at loan->path aside for the driver: false (logged) when it cannot be. */
static bool move_aside(kiln__cache_loan *loan)
{
    snprintf(loan->aside, sizeof loan->aside, "%s.aside.%ld.%u", loan->path, (long)getpid(),
             atomic_fetch_add(&tmp_counter, 1));
    /* A process that starts meanwhile removes aside files older than STALE_TMP_SECONDS as a
     * crashed loader's: the age must count from now, not from when the entry was written (an
     * old entry's aside file was removed under the loader, which then could not put it back).
     * Touched before the rename, so no aside file ever has the old time; a failure is the
     * rename's to report (ENOENT: another process moved it first). */
    utimensat(AT_FDCWD, loan->path, NULL, AT_SYMLINK_NOFOLLOW);
    if (rename(loan->path, loan->aside) == 0)
        return true;
    if (errno == ENOENT) {
        /* Another process moved it aside (or removed it) after we opened it: it is not there to
         * crash a later run either way, and what we read is a verified whole entry. */
        kiln__log(KILN_LOG_INFO,
                  "cache: %s was moved or removed by another process while being read; using "
                  "the verified copy",
                  loan->path);
        loan->aside[0] = '\0';
        return true;
    }
    kiln__log(KILN_LOG_WARN,
              "cache: cannot move %s aside while the driver loads it (%s); building from source",
              loan->path, strerror(errno));
    return false;
}

bool kiln__diskcache_load(const char *key, size_t keylen, kiln__cache_loan *loan)
{
    memset(loan, 0, offsetof(kiln__cache_loan, path));
    loan->path[0] = loan->aside[0] = '\0';
    if (!kiln__diskcache_entry_path(key, keylen, loan->path, sizeof loan->path))
        return false;
    const char *path = loan->path;
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
    uint8_t *buf = NULL;
    size_t len = 0;
    const char *why = NULL;
    verdict v = read_entry(fd, path, keylen, &buf, &len, &why);
    close(fd);
    kiln__cache_entry e;
    if (v == ENTRY_OK) {
        why = kiln__cache_entry_parse(buf, len, &e);
        if (!why && (e.keylen != keylen || memcmp(e.key, key, keylen) != 0))
            why = "a different key (hash collision or foreign entry)";
        v = why ? ENTRY_CORRUPT : ENTRY_OK;
    }
    if (v == ENTRY_CORRUPT)
        corrupt(path, why);
    if (v != ENTRY_OK || !move_aside(loan)) {
        free(buf);
        return false;
    }
    loan->file = buf;
    loan->binary = e.payload;
    loan->size = e.size;
    loan->names = e.names;
    loan->nameslen = e.nameslen;
    loan->params = e.params;
    loan->paramslen = e.paramslen;
    atomic_fetch_add(&n_hits, 1);
    return true;
}

void kiln__diskcache_return(kiln__cache_loan *loan, const char *why)
{
    if (!why) {
        if (loan->aside[0] && rename(loan->aside, loan->path) != 0) {
            kiln__log(KILN_LOG_WARN, "cache: cannot put %s back (%s); it is rebuilt next run",
                      loan->path, strerror(errno));
            unlink(loan->aside);
        }
        kiln__log(KILN_LOG_INFO, "cache: hit %s (%zu bytes)", loan->path, loan->size);
    } else {
        atomic_fetch_add(&n_rejected, 1);
        kiln__log(KILN_LOG_WARN, "cache: entry %s %s; removing it and rebuilding", loan->path, why);
        if (loan->aside[0])
            unlink(loan->aside);
    }
    free(loan->file);
    memset(loan, 0, offsetof(kiln__cache_loan, path));
    loan->aside[0] = '\0';
}

static void write_failed(const char *what, const char *path)
{
    atomic_fetch_add(&n_write_errors, 1);
    bool was = atomic_exchange(&warned_write, true);
    kiln__log(was ? KILN_LOG_DEBUG : KILN_LOG_WARN,
              "cache: cannot %s %s (%s); the program was built but not cached", what, path,
              strerror(errno));
}

void kiln__diskcache_store(const char *key, size_t keylen, const char *names,
                           const kiln__param_table *params, const unsigned char *binary,
                           size_t size)
{
    char path[KILN__CACHE_PATH_MAX], tmp[KILN__CACHE_PATH_MAX + 64];
    if (!kiln__diskcache_entry_path(key, keylen, path, sizeof path))
        return;
    kiln__cache_entry e = {key, keylen, names, strlen(names), binary, size, NULL, 0};
    if (params) {
        e.params = params->bytes;
        e.paramslen = params->len;
    }
    size_t len = 0;
    uint8_t *bytes = kiln__cache_entry_encode(&e, &len);
    if (!bytes) {
        kiln__diskcache_count_unsaved("no host memory for the entry, or a part over its cap");
        return;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(),
             atomic_fetch_add(&tmp_counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        write_failed("create", tmp);
        free(bytes);
        return;
    }
    bool ok = write_all(fd, bytes, len) && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    /* rename() is atomic: readers see the old entry or the whole new one, never a torn one. */
    if (!ok || rename(tmp, path) != 0) {
        write_failed(ok ? "rename into" : "write", ok ? path : tmp);
        unlink(tmp);
        free(bytes);
        return;
    }
    free(bytes);
    atomic_fetch_add(&n_saves, 1);
    kiln__log(KILN_LOG_INFO, "cache: saved %s (%zu bytes)", path, size);
}

void kiln__diskcache_count_unsaved(const char *why)
{
    atomic_fetch_add(&n_write_errors, 1);
    kiln__log(KILN_LOG_DEBUG, "cache: the program was built but not cached: %s", why);
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
    kiln__diskcache_usable();
    return cache.enabled ? cache.dir : "";
}
