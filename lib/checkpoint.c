/* checkpoint.c - named tensors saved to and loaded from safetensors files: an 8-byte
 * little-endian header length, a JSON header (name -> dtype, shape, data_offsets), then the
 * tensors' bytes, little-endian, in order. The header is read and written with jansson. Files
 * are written atomically (a temporary file in the same folder, unnamed where the filesystem
 * allows, fsync, rename, fsync of the folder) and checked whole before any device allocation
 * when loaded. Built without jansson (meson -Djansson=disabled), the public functions refuse
 * with KILN_ERR_UNSUPPORTED (kiln__checkpoint_support). */
#include "checkpoint.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#ifdef KILN_HAVE_JANSSON
#include <jansson.h>
#endif
#include <libgen.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "clcall.h"
#include "dtype.h"
#include "registry.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

struct kiln_checkpoint {
    int n;
    char **names;
    kiln_tensor **tensors;
};

/* ---- the header --------------------------------------------------------------------------- */

kiln_status kiln__checkpoint_support(const char *op)
{
#ifdef KILN_HAVE_JANSSON
    (void)op;
    return KILN_OK;
#else
    return kiln__error(KILN_ERR_UNSUPPORTED,
                       "%s: kiln was built without jansson (meson option -Djansson; "
                       "libjansson-dev): safetensors checkpoints cannot be saved or loaded",
                       op);
#endif
}

void kiln__st_entries_free(kiln__st_entry *entries, int n)
{
    for (int i = 0; entries && i < n; i++)
        free(entries[i].name);
    free(entries);
}

/* The length (1 to 4) of the UTF-8 character at s and its code point in *cp; 0 where s does not
 * start a valid one (a stray or missing continuation byte, an overlong form, a surrogate, past
 * U+10FFFF), as jansson decides. */
static int utf8_char(const unsigned char *s, uint32_t *cp)
{
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000}; /* shorter forms: overlong */
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    int len = s[0] >= 0xf8 ? 0 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (len == 0)
        return 0;
    uint32_t c = s[0] & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) /* the terminating NUL too */
            return 0;
        c = c << 6 | (s[i] & 0x3fu);
    }
    if (c < least[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

#ifdef KILN_HAVE_JANSSON

/* kiln's dtype of a safetensors dtype name: the kiln name in capitals ("F32" is f32). */
static bool dtype_of(const char *name, kiln_dtype *out)
{
    for (int d = 0; d < KILN_DTYPE_COUNT; d++) {
        const char *k = kiln_dtype_name((kiln_dtype)d);
        size_t i = 0;
        while (k[i] && name[i] && toupper((unsigned char)k[i]) == name[i])
            i++;
        if (!k[i] && !name[i]) {
            *out = (kiln_dtype)d;
            return true;
        }
    }
    return false;
}

static void st_dtype_name(kiln_dtype dtype, char *buf, size_t size)
{
    snprintf(buf, size, "%s", kiln_dtype_name(dtype));
    for (char *p = buf; *p; p++)
        *p = (char)toupper((unsigned char)*p);
}

static int by_begin(const void *a, const void *b)
{
    const kiln__st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* C0 and C1 controls and DEL: what a terminal may act on (U+009B is CSI, ESC [ in one). */
static bool is_control(uint32_t c)
{
    return c < 0x20 || (c >= 0x7f && c <= 0x9f);
}

/* A name (or other text) from a file, shortened to fit out, with control characters and bytes
 * that are not UTF-8 as '?', for messages: a file must not put escape sequences on the user's
 * terminal. */
static const char *shown(const char *in, char *out, size_t size)
{
    const unsigned char *s = (const unsigned char *)in;
    size_t i = 0, o = 0;
    while (s[i]) {
        uint32_t c = 0;
        int len = utf8_char(s + i, &c);
        bool bad = len == 0 || is_control(c);
        size_t take = len ? (size_t)len : 1, put = bad ? 1 : take;
        if (o + put + 4 > size) /* room for "..." and the NUL */
            break;
        if (bad)
            out[o] = '?';
        else
            memcpy(out + o, s + i, take);
        o += put;
        i += take;
    }
    if (s[i]) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

/* One "name": {...} of the header into *e; what names the file in messages. */
static kiln_status parse_entry(const char *op, const char *key, json_t *v, const char *what,
                               kiln__st_entry *e)
{
    char name[72];
    shown(key, name, sizeof name);
    if (!json_is_object(v))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s: tensor \"%s\" is not an object", op,
                           what, name);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s: tensor \"%s\" needs \"dtype\" (a string), \"shape\" (an "
                           "array) and \"data_offsets\" (two integers)",
                           op, what, name);
    char dts[24];
    if (!dtype_of(json_string_value(dt), &e->dtype))
        return kiln__error(KILN_ERR_UNSUPPORTED,
                           "%s: %s: tensor \"%s\" has dtype %s, which kiln does not have "
                           "(F16, BF16, F32, F64, I32, I64 and U8 load)",
                           op, what, name, shown(json_string_value(dt), dts, sizeof dts));
    size_t nd = json_array_size(sh);
    if (nd > KILN_MAX_DIMS)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s: tensor \"%s\" has %zu dimensions; kiln takes at most %d", op,
                           what, name, nd, KILN_MAX_DIMS);
    e->ndim = (int)nd; /* shape [] is a 0-d tensor */
    e->shape[0] = 1;
    uint64_t numel = 1;
    for (size_t d = 0; d < nd; d++) {
        json_t *s = json_array_get(sh, d);
        json_int_t v2 = json_is_integer(s) ? json_integer_value(s) : -1;
        uint64_t next;
        if (v2 < 0 || __builtin_mul_overflow(numel, (uint64_t)v2, &next))
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: %s: tensor \"%s\": shape entry %zu is not a size", op, what,
                               name, d);
        numel = next;
        e->shape[d] = (int64_t)v2;
    }
    /* kiln's own rule for a tensor's shape (the product of the nonzero dims fits), checked here
     * for every entry before anything is allocated: [0, 2^62, 2^62] has 0 elements but is no
     * shape kiln can create. */
    int64_t count;
    size_t nbytes;
    char where[200];
    snprintf(where, sizeof where, "%s: %s: tensor \"%s\"", op, what, name);
    kiln_status s = kiln__check_shape(e->ndim, e->shape, e->dtype, where, &count, &nbytes);
    if (s != KILN_OK)
        return s;
    json_t *b = json_array_get(off, 0), *en = json_array_get(off, 1);
    json_int_t bv = json_is_integer(b) ? json_integer_value(b) : -1;
    json_int_t ev = json_is_integer(en) ? json_integer_value(en) : -1;
    uint64_t bytes;
    if (bv < 0 || ev < bv ||
        __builtin_mul_overflow(numel, (uint64_t)kiln_dtype_size(e->dtype), &bytes) ||
        bytes != (uint64_t)(ev - bv) || numel > (uint64_t)INT64_MAX)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s: tensor \"%s\": data_offsets [%lld, %lld] do not hold its "
                           "%" PRIu64 " elements of %s",
                           op, what, name, (long long)bv, (long long)ev, numel,
                           kiln_dtype_name(e->dtype));
    e->begin = (uint64_t)bv;
    e->end = (uint64_t)ev;
    return KILN_OK;
}

/* The ranges, sorted, must tile [0, data_len). */
static kiln_status check_tiling(const char *op, const kiln__st_entry *es, int n, uint64_t data_len,
                                const char *what)
{
    uint64_t at = 0;
    char name[72];
    for (int i = 0; i < n; i++) {
        if (es[i].begin != at)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: %s: tensor \"%s\" starts at byte %" PRIu64 " of the data, "
                               "but the one before ends at %" PRIu64 " (%s)",
                               op, what, shown(es[i].name, name, sizeof name), es[i].begin, at,
                               es[i].begin < at ? "overlap" : "gap");
        at = es[i].end;
    }
    if (at != data_len)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s: the tensors hold %" PRIu64 " bytes but the file has %" PRIu64
                           " bytes of data (%s)",
                           op, what, at, data_len, at < data_len ? "trailing bytes" : "truncated");
    return KILN_OK;
}

kiln_status kiln__st_parse_header(const char *op, const char *json, size_t len, uint64_t data_len,
                                  const char *what, kiln__st_entry **entries, int *n)
{
    *entries = NULL;
    *n = 0;
    /* Every entry is a JSON object: the count of '{' bounds the entries before jansson spends
     * memory on them. */
    size_t objects = 0;
    for (const char *c = memchr(json, '{', len); c;
         c = memchr(c + 1, '{', len - (size_t)(c + 1 - json)))
        objects++;
    if (objects > (size_t)KILN__ST_ENTRIES_MAX + 1)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s: the header may hold up to %zu tensors, more than kiln loads "
                           "from one file (%d)",
                           op, what, objects, KILN__ST_ENTRIES_MAX);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        /* jansson quotes the bytes near the error: keep control bytes of the file out of the
         * message (found by fuzz/fuzz-safetensors.c) */
        char text[sizeof jerr.text];
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s: the header is not valid JSON: %s (byte %d)", op, what,
                           shown(jerr.text, text, sizeof text), jerr.position);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s: the header is not a JSON object", op,
                           what);
    }
    size_t count = json_object_size(root);
    kiln__st_entry *es = kiln__calloc(count ? count : 1, sizeof *es);
    if (!es) {
        json_decref(root);
        return kiln__host_oom(op);
    }
    int k = 0;
    kiln_status s = KILN_OK;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        if (!*key)
            s = kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s: a tensor has an empty name", op,
                            what);
        if (s == KILN_OK)
            s = parse_entry(op, key, v, what, &es[k]);
        if (s == KILN_OK && !(es[k].name = kiln__strdup(key)))
            s = kiln__host_oom(op);
        if (s != KILN_OK)
            break;
        k++;
    }
    json_decref(root);
    if (s == KILN_OK) {
        qsort(es, (size_t)k, sizeof *es, by_begin);
        s = check_tiling(op, es, k, data_len, what);
    }
    if (s != KILN_OK) {
        kiln__st_entries_free(es, k); /* the one that failed holds no name yet */
        return s;
    }
    *entries = es;
    *n = k;
    return KILN_OK;
}

#else /* !KILN_HAVE_JANSSON */

kiln_status kiln__st_parse_header(const char *op, const char *json, size_t len, uint64_t data_len,
                                  const char *what, kiln__st_entry **entries, int *n)
{
    (void)op;
    (void)json;
    (void)len;
    (void)data_len;
    (void)what;
    *entries = NULL;
    *n = 0;
    return kiln__checkpoint_support(op);
}

#endif

/* ---- files -------------------------------------------------------------------------------- */

static kiln_status io_error(const char *op, const char *what, const char *path)
{
    return kiln__error(KILN_ERR_IO, "%s: %s %s: %s", op, what, path,
                       errno ? strerror(errno) : "the file ends early (truncated meanwhile?)");
}

static bool write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w == 0)
            errno = ENOSPC; /* nothing written, no error: the disk is full */
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *buf, size_t n, off_t at)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n, at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0; /* shorter than fstat said: truncated meanwhile (read_error) */
            return false;
        }
        p += r;
        n -= (size_t)r;
        at += r;
    }
    return true;
}

/* A name is a JSON string in the file: valid UTF-8, or the position of the first bad byte. */
static kiln_status check_name_utf8(const char *op, const char *name, int i)
{
    const unsigned char *s = (const unsigned char *)name;
    uint32_t c;
    for (size_t at = 0; s[at];) {
        int len = utf8_char(s + at, &c);
        if (len == 0)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: tensors[%d].name is not valid UTF-8: byte %zu (0x%02x) does "
                               "not %s a character; safetensors names are JSON strings",
                               op, i, at, s[at], s[at] >= 0x80 && s[at] < 0xc0 ? "start" : "make");
        at += (size_t)len;
    }
    return KILN_OK;
}

/* The checks of kiln_save's list: names present, UTF-8, unique, not "__metadata__"; tensors
 * valid. */
static kiln_status check_list(const char *op, const kiln_named_tensor *ts, int n)
{
    if (n < 0 || (n > 0 && !ts))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %d tensors at %p", op, n,
                           (const void *)ts);
    for (int i = 0; i < n; i++) {
        char arg[96];
        snprintf(arg, sizeof arg, "tensors[%d].tensor", i);
        if (!ts[i].name || !*ts[i].name || strcmp(ts[i].name, "__metadata__") == 0)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: tensors[%d].name is %s; give each tensor a non-empty name "
                               "other than __metadata__",
                               op, i, ts[i].name ? ts[i].name : "NULL");
        kiln_status s = kiln__check_tensor(ts[i].tensor, op, arg);
        if (s == KILN_OK)
            s = check_name_utf8(op, ts[i].name, i);
        if (s != KILN_OK)
            return s;
        for (int j = 0; j < i; j++)
            if (strcmp(ts[i].name, ts[j].name) == 0)
                return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                                   "%s: the name \"%.64s\" is given twice (tensors %d and %d)", op,
                                   ts[i].name, j, i);
    }
    return KILN_OK;
}

/* The JSON header of the list, padded with spaces to a multiple of 8 bytes (as safetensors
 * writes it); malloc'd, length to *len. NULL when out of host memory. */
static char *make_header(const kiln_named_tensor *ts, int n, size_t *len)
{
#ifndef KILN_HAVE_JANSSON
    (void)ts;
    (void)n;
    (void)len;
    return NULL; /* not reached: kiln_save refuses first */
#else
    json_t *root = json_object();
    uint64_t at = 0;
    bool ok = root != NULL;
    for (int i = 0; ok && i < n; i++) {
        const kiln_tensor *t = ts[i].tensor;
        char dt[16];
        st_dtype_name(t->dtype, dt, sizeof dt);
        json_t *shape = json_array();
        for (int d = 0; shape && d < t->ndim; d++)
            ok = ok && json_array_append_new(shape, json_integer(t->shape[d])) == 0;
        json_t *offs = json_pack("[II]", (json_int_t)at, (json_int_t)at + (json_int_t)t->nbytes);
        json_t *e = NULL;
        if (shape && offs) { /* json_pack takes both references, also when it fails */
            e = json_pack("{sssoso}", "dtype", dt, "shape", shape, "data_offsets", offs);
        } else {
            json_decref(shape);
            json_decref(offs);
        }
        ok = ok && e && json_object_set_new(root, ts[i].name, e) == 0;
        at += t->nbytes;
    }
    char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text)
        return NULL;
    /* spaces up to a multiple of 128 bytes from the file's start (the 8-byte length included;
     * safetensors asks for 8): the first tensor's bytes then sit where a CPU device can use
     * them in place (kiln_load_mapped; CL_DEVICE_MEM_BASE_ADDR_ALIGN is 1024 bits on PoCL) */
    size_t l = strlen(text), pad = (128 - (8 + l) % 128) % 128;
    char *out = kiln__realloc(text, l + pad + 1);
    if (!out) {
        free(text);
        return NULL;
    }
    memset(out + l, ' ', pad);
    out[l + pad] = '\0';
    *len = l + pad;
    return out;
#endif
}

/* The bytes of t to fd: through a read map (no copy on unified memory). */
static kiln_status write_tensor(int fd, kiln_tensor *t, const char *path)
{
    if (t->nbytes == 0)
        return KILN_OK;
    void *p;
    kiln_status s = kiln_tensor_map(t, KILN_MAP_READ, &p);
    if (s != KILN_OK)
        return s;
    bool ok = write_all(fd, p, t->nbytes);
    int saved = errno;
    kiln_status u = kiln_tensor_unmap(t);
    errno = saved;
    if (!ok)
        return io_error("kiln_save", "could not write", path);
    return u;
}

/* ---- kiln_save's temporary file ---------------------------------------------------------- */

bool kiln__st_no_tmpfile;
void (*kiln__st_test_after_header)(const char *path);

/* Temporaries are named TEMP_PREFIX "<pid>-<n>": short whatever the target's name (which may
 * have 255 bytes), and recognisable, so that a later save removes those a killed save left. */
#define TEMP_PREFIX ".kiln-tmp-"

typedef struct temp_file {
    int fd;
    char name[48]; /* its name in the folder; "" while it has none (O_TMPFILE) */
} temp_file;

static void temp_name(char *buf, size_t size)
{
    static atomic_uint counter;
    snprintf(buf, size, TEMP_PREFIX "%ld-%u", (long)getpid(), atomic_fetch_add(&counter, 1));
}

/* Whether name is TEMP_PREFIX, digits, '-', digits; the first digits (a pid) to *pid. */
static bool is_temp_name(const char *name, long *pid)
{
    size_t plen = strlen(TEMP_PREFIX);
    if (strncmp(name, TEMP_PREFIX, plen) != 0 || !isdigit((unsigned char)name[plen]))
        return false;
    char *end;
    errno = 0;
    *pid = strtol(name + plen, &end, 10);
    if (errno != 0 || *end != '-' || !isdigit((unsigned char)end[1]))
        return false;
    const char *p = end + 1;
    while (isdigit((unsigned char)*p))
        p++;
    return *p == '\0';
}

/* Whether name in the folder is still the file open as fd (a cleaner may have removed it). */
static bool still_named(int dfd, const char *name, int fd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Removes the temporary name when it is stale: a regular file no save holds locked, that is
 * one whose save was killed before its rename (a save holds its temporary locked from birth to
 * rename, and the lock dies with the process). Best effort: what fails stays. */
static void remove_if_stale(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        still_named(dfd, name, fd))
        unlinkat(dfd, name, 0);
    close(fd);
}

/* The stale temporaries of the folder. This process's own are skipped: where flock is emulated
 * with per-process locks (NFS), another thread's live save would look unlocked. */
static void remove_stale_temporaries(int dfd)
{
    int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0)
            close(lfd);
        return;
    }
    long pid;
    const struct dirent *e;
    while ((e = readdir(d)))
        if (is_temp_name(e->d_name, &pid) && pid != (long)getpid())
            remove_if_stale(dfd, e->d_name);
    closedir(d);
}

/* A temporary file in the folder, locked: unnamed (O_TMPFILE) where the filesystem has them, so
 * that a save killed while writing leaves nothing; else named. */
static kiln_status temp_create(const char *op, int dfd, const char *path, temp_file *t)
{
    t->name[0] = '\0';
    t->fd = -1;
    if (!kiln__st_no_tmpfile && access("/proc/self/fd", X_OK) == 0) /* temp_link needs it */
        t->fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (t->fd >= 0 && flock(t->fd, LOCK_EX | LOCK_NB) == 0)
        return KILN_OK;
    if (t->fd >= 0)
        close(t->fd);
    for (int tries = 0; tries < 100; tries++) {
        temp_name(t->name, sizeof t->name);
        t->fd = openat(dfd, t->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (t->fd < 0 && errno == EEXIST)
            continue;
        if (t->fd < 0)
            break;
        /* a cleaner that found it before the lock removes it: take another name */
        if (flock(t->fd, LOCK_EX | LOCK_NB) == 0 && still_named(dfd, t->name, t->fd))
            return KILN_OK;
        close(t->fd);
        t->fd = -1;
    }
    t->name[0] = '\0';
    return io_error(op, "could not create a temporary file beside", path);
}

/* An unnamed temporary gets its name, as late as possible: just before the rename. */
static bool temp_link(int dfd, temp_file *t)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", t->fd);
    for (int tries = 0; tries < 100; tries++) {
        temp_name(t->name, sizeof t->name);
        if (linkat(AT_FDCWD, proc, dfd, t->name, AT_SYMLINK_FOLLOW) == 0)
            return true;
        if (errno != EEXIST)
            break;
    }
    t->name[0] = '\0';
    return false;
}

/* The permission bits of the file path replaces, when there is one: a 0600 checkpoint stays
 * 0600. A new file has the umask's. */
static bool keep_mode(int fd, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return true;
    return fchmod(fd, st.st_mode & 0777) == 0;
}

/* The folder of path, open for the temporary file and the final fsync. */
static kiln_status open_folder(const char *op, const char *path, int *dfd)
{
    *dfd = -1;
    char *copy = kiln__strdup(path);
    if (!copy)
        return kiln__host_oom(op);
    *dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int saved = errno;
    free(copy);
    errno = saved;
    return *dfd >= 0 ? KILN_OK : io_error(op, "could not open the folder of", path);
}

/* The header's length, the header and the tensors' bytes to fd, synced. */
static kiln_status write_contents(int fd, const char *header, size_t hlen,
                                  const kiln_named_tensor *tensors, int n, const char *path)
{
    const char *op = "kiln_save";
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    kiln_status s = KILN_OK;
    if (!write_all(fd, len8, 8) || !write_all(fd, header, hlen))
        s = io_error(op, "could not write the temporary file of", path);
    for (int i = 0; s == KILN_OK && i < n; i++)
        s = write_tensor(fd, tensors[i].tensor, path);
    if (s == KILN_OK && fsync(fd) != 0)
        s = io_error(op, "could not sync the temporary file of", path);
    return s;
}

kiln_status kiln_save(const char *path, const kiln_named_tensor *tensors, int n)
{
    const char *op = "kiln_save";
    if (!path || !*path)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: path is %s", op,
                           path ? "empty" : "NULL");
    kiln_status s = check_list(op, tensors, n);
    if (s == KILN_OK)
        s = kiln__checkpoint_support(op);
    if (s != KILN_OK)
        return s;
    size_t hlen = 0;
    char *header = make_header(tensors, n, &hlen); /* the names are valid: NULL is no memory */
    if (!header)
        return kiln__host_oom(op);
    int dfd;
    s = open_folder(op, path, &dfd);
    if (s != KILN_OK) {
        free(header);
        return s;
    }
    remove_stale_temporaries(dfd);
    temp_file t;
    s = temp_create(op, dfd, path, &t);
    if (s == KILN_OK && !keep_mode(t.fd, path))
        s = io_error(op, "could not give the temporary file the mode of", path);
    if (s == KILN_OK)
        s = write_contents(t.fd, header, hlen, tensors, n, path);
    if (s == KILN_OK && !t.name[0] && !temp_link(dfd, &t))
        s = io_error(op, "could not name the temporary file of", path);
    /* renamed while still locked, so that no other save takes it for stale */
    if (s == KILN_OK && renameat(dfd, t.name, AT_FDCWD, path) != 0)
        s = io_error(op, "could not rename the temporary file to", path);
    if (s == KILN_OK)
        fsync(dfd); /* the rename is durable; a failure here loses nothing already written */
    else if (t.name[0])
        unlinkat(dfd, t.name, 0);
    if (t.fd >= 0 && close(t.fd) != 0 && s == KILN_OK)
        s = io_error(op, "could not close the file", path);
    close(dfd);
    free(header);
    return s;
}

static bool same_shape(const kiln_tensor *t, const kiln__st_entry *e)
{
    if (t->ndim != e->ndim)
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != e->shape[d])
            return false;
    return true;
}

/* An open, checked file: its entries and where its data starts. */
typedef struct st_file {
    int fd;
    uint64_t size, data_at;
    kiln__st_entry *es;
    int n;
} st_file;

static void st_close(st_file *f)
{
    kiln__st_entries_free(f->es, f->n);
    if (f->fd >= 0)
        close(f->fd);
}

static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode)    ? "a folder"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "not a file";
}

static kiln_status st_open(const char *op, const char *path, st_file *f)
{
    *f = (st_file){.fd = -1};
    if (!path || !*path)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: path is %s", op,
                           path ? "empty" : "NULL");
    kiln_status s = kiln__checkpoint_support(op);
    if (s != KILN_OK)
        return s;
    /* O_NONBLOCK: open() of a FIFO would wait for a writer, before the check below */
    f->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        s = io_error(op, "could not open", path);
        st_close(f);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        st_close(f);
        return kiln__error(KILN_ERR_IO, "%s: %s is not a regular file (%s)", op, path,
                           file_kind(st.st_mode));
    }
    int flags = fcntl(f->fd, F_GETFL);
    if (flags < 0 || fcntl(f->fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        s = io_error(op, "could not read", path);
        st_close(f);
        return s;
    }
    f->size = (uint64_t)st.st_size;
    unsigned char len8[8];
    if (f->size < 8 || !read_all(f->fd, len8, 8, 0)) {
        st_close(f);
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s: %" PRIu64 " bytes, too short for a safetensors file", op, path,
                           f->size);
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len8[i] << (8 * i);
    if (hlen > KILN__ST_HEADER_MAX || hlen > f->size - 8) {
        st_close(f);
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s: the header length %" PRIu64
                           " is past the end of the file (%" PRIu64
                           " bytes) or over safetensors' 100 MB limit: not a safetensors file, "
                           "or truncated",
                           op, path, hlen, f->size);
    }
    char *header = kiln__malloc(hlen ? hlen : 1);
    if (!header) {
        st_close(f);
        return kiln__host_oom(op);
    }
    if (!read_all(f->fd, header, hlen, 8))
        s = io_error(op, "could not read", path);
    f->data_at = 8 + hlen;
    if (s == KILN_OK)
        s = kiln__st_parse_header(op, header, hlen, f->size - f->data_at, path, &f->es, &f->n);
    free(header);
    if (s != KILN_OK)
        st_close(f);
    else if (kiln__st_test_after_header)
        kiln__st_test_after_header(path);
    return s;
}

/* Entry e's bytes from the file into t (of e's shape; e's dtype or, converted, another), through
 * a mapping of t: read with pread, not through a mapping of the file, so that a file truncated
 * meanwhile is an I/O error rather than SIGBUS (issue 21; both copy at about 9-10 GB/s on the
 * development machine). Converted entries go through a host buffer of at most 4 MiB. */
static kiln_status read_error(const char *op, const kiln__st_entry *e, const char *path)
{
    return kiln__error(KILN_ERR_IO, "%s: could not read \"%.64s\" from %s: %s", op, e->name, path,
                       errno ? strerror(errno) : "the file ends early (truncated meanwhile?)");
}

static kiln_status read_into(const char *op, const char *path, const st_file *f,
                             const kiln__st_entry *e, kiln_tensor *t)
{
    if (t->nbytes == 0)
        return KILN_OK;
    void *p = NULL;
    kiln_status s = kiln_tensor_map(t, KILN_MAP_WRITE, &p);
    if (s != KILN_OK)
        return s;
    off_t at = (off_t)(f->data_at + e->begin);
    if (e->dtype == t->dtype) {
        if (!read_all(f->fd, p, t->nbytes, at))
            s = read_error(op, e, path);
    } else {
        size_t from = kiln__dtype_size(e->dtype), chunk = ((size_t)4 << 20) / from;
        unsigned char *buf = kiln__malloc(chunk * from);
        if (!buf)
            s = kiln__host_oom(op);
        for (int64_t k = 0; s == KILN_OK && k < t->numel; k += (int64_t)chunk) {
            int64_t m = t->numel - k < (int64_t)chunk ? t->numel - k : (int64_t)chunk;
            if (!read_all(f->fd, buf, (size_t)m * from, at + (off_t)((size_t)k * from))) {
                s = read_error(op, e, path);
                break;
            }
            for (int64_t q = 0; q < m; q++)
                kiln__dtype_store(t->dtype, p, k + q, kiln__dtype_load(e->dtype, buf, q));
        }
        free(buf);
    }
    kiln_status u = kiln_tensor_unmap(t);
    return s != KILN_OK ? s : u;
}

void kiln_checkpoint_free(kiln_checkpoint *ck)
{
    if (!ck)
        return;
    for (int i = 0; ck->names && ck->tensors && i < ck->n; i++) {
        free(ck->names[i]);
        kiln__tensor_drop(ck->tensors[i]);
    }
    free(ck->names);
    free(ck->tensors);
    free(ck);
}

/* ---- kiln_load_mapped: tensors over the file's own pages --------------------------------- */

/* A private mapping of part of a checkpoint, unmapped by the driver once the buffer over it is
 * destroyed (after the last work that used it). */
typedef struct file_pages {
    void *base;
    size_t len;
} file_pages;

static void CL_CALLBACK unmap_file_pages(cl_mem mem, void *user)
{
    (void)mem;
    file_pages *fp = user;
    munmap(fp->base, fp->len);
    free(fp);
}

/* Whether dev runs buffers over host memory in place: memory.c's host-backed CPU devices. */
static bool maps_in_place(kiln_device *dev)
{
    return dev->info.type == KILN_DEVICE_CPU && dev->info.unified_memory &&
           !kiln__device_is_oclgrind(dev);
}

/* Entry e as a tensor over a private (copy-on-write) mapping of its bytes in the file: the pages
 * are read when first touched, and writes to the tensor never reach the file. *out stays NULL,
 * with KILN_OK, where that cannot be (the device does not run host memory in place, the bytes
 * are not at an address the device accepts, mmap failed, or the file is shorter than its header
 * says): the caller reads the entry instead. */
static kiln_status map_entry(const char *op, const st_file *f, const kiln__st_entry *e,
                             kiln_device *dev, kiln_tensor **out)
{
    *out = NULL;
    size_t nbytes = (size_t)(e->end - e->begin);
    cl_uint align_bits = 0;
    uint64_t at = f->data_at + e->begin;
    kiln_status s = kiln__device_open(dev, op);
    if (s != KILN_OK)
        return s;
    if (nbytes == 0 || !maps_in_place(dev) ||
        kiln__cl.GetDeviceInfo(dev->id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits,
                               &align_bits, NULL) != CL_SUCCESS ||
        align_bits < 8 || at % (align_bits / 8) != 0)
        return KILN_OK;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = at - at % page;
    file_pages *fp = kiln__malloc(sizeof *fp);
    if (!fp)
        return kiln__host_oom(op);
    fp->len = nbytes + (size_t)(at - start);
    fp->base = mmap(NULL, fp->len, PROT_READ | PROT_WRITE, MAP_PRIVATE, f->fd, (off_t)start);
    struct stat st;
    if (fp->base == MAP_FAILED || fstat(f->fd, &st) != 0 || (uint64_t)st.st_size < at + nbytes) {
        /* truncated since the header was read: reading says so (KILN_ERR_IO, the tensor named) */
        if (fp->base != MAP_FAILED)
            munmap(fp->base, fp->len);
        free(fp);
        return KILN_OK;
    }
    cl_int err = CL_SUCCESS;
    const char *clfn = "clCreateBuffer";
    cl_mem mem =
        kiln__cl.CreateBuffer(kiln__device_context(dev), CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR,
                              nbytes, (char *)fp->base + (at - start), &err);
    if (err == CL_SUCCESS && !mem)
        err = CL_MEM_OBJECT_ALLOCATION_FAILURE;
    if (err == CL_SUCCESS) {
        clfn = "clSetMemObjectDestructorCallback";
        err = kiln__cl.SetMemObjectDestructorCallback(mem, unmap_file_pages, fp);
        if (err != CL_SUCCESS)
            kiln__cl.ReleaseMemObject(mem); /* never used: destroyed at once */
    }
    if (err != CL_SUCCESS) {
        munmap(fp->base, fp->len);
        free(fp);
        return kiln__cl_fail(err, op, clfn, dev->info.spec);
    }
    s = kiln__tensor_adopt(dev, mem, e->dtype, e->ndim, e->shape, op, out);
    if (s != KILN_OK)
        kiln__cl.ReleaseMemObject(mem); /* unmapped by the callback */
    return s;
}

static kiln_status load(const char *op, const char *path, kiln_device *dev, bool mapped,
                        kiln_checkpoint **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    kiln_status s = kiln__check_device(dev, op);
    st_file f = {.fd = -1};
    if (s == KILN_OK)
        s = st_open(op, path, &f);
    if (s != KILN_OK)
        return s;
    kiln_checkpoint *ck = kiln__calloc(1, sizeof *ck);
    if (ck) {
        ck->names = kiln__calloc((size_t)(f.n ? f.n : 1), sizeof(char *));
        ck->tensors = kiln__calloc((size_t)(f.n ? f.n : 1), sizeof(kiln_tensor *));
    }
    if (!ck || !ck->names || !ck->tensors) {
        kiln_checkpoint_free(ck);
        st_close(&f);
        return kiln__host_oom(op);
    }
    for (int i = 0; s == KILN_OK && i < f.n; i++) {
        kiln__st_entry *e = &f.es[i];
        if (mapped)
            s = map_entry(op, &f, e, dev, &ck->tensors[i]);
        if (s == KILN_OK && !ck->tensors[i]) {
            s = kiln__tensor_new(dev, e->dtype, e->ndim, e->shape, op, &ck->tensors[i]);
            if (s == KILN_OK)
                s = read_into(op, path, &f, e, ck->tensors[i]);
        }
        if (s != KILN_OK && ck->tensors[i]) {
            kiln__tensor_drop(ck->tensors[i]);
            ck->tensors[i] = NULL;
        }
        if (s == KILN_OK) {
            kiln__scope_forget(ck->tensors[i]); /* the checkpoint owns it, not a scope */
            ck->names[i] = e->name;             /* taken over from the entry */
            e->name = NULL;
            ck->n = i + 1;
        }
    }
    st_close(&f);
    if (s != KILN_OK) {
        kiln_checkpoint_free(ck);
        return s;
    }
    *out = ck;
    return KILN_OK;
}

kiln_status kiln_load(const char *path, kiln_device *dev, kiln_checkpoint **out)
{
    return load("kiln_load", path, dev, false, out);
}

kiln_status kiln_load_mapped(const char *path, kiln_device *dev, kiln_checkpoint **out)
{
    return load("kiln_load_mapped", path, dev, true, out);
}

kiln_status kiln_load_into(const char *path, const kiln_named_tensor *tensors, int n)
{
    return kiln__load_into("kiln_load_into", path, tensors, n, 0);
}

/* Append `"name"` to a list of names in buf (at most size bytes), ", "-separated; once buf is
 * nearly full, count the rest in *more instead. */
static void list_name(char *buf, size_t size, const char *name, int *more)
{
    size_t len = strlen(buf);
    if (*more || len + strlen(name) + 64 > size) {
        (*more)++;
        return;
    }
    snprintf(buf + len, size - len, "%s\"%.64s\"", len ? ", " : "", name);
}

/* The strict check: every listed name in the file (unless ALLOW_MISSING), every name of the file
 * listed (with REJECT_UNEXPECTED), both lists in one message as PyTorch's load_state_dict words
 * them. match[i] is the file's entry for tensors[i], or -1. */
static kiln_status check_keys(const char *op, const char *path, const kiln_named_tensor *ts, int n,
                              const st_file *f, const int *match, unsigned mode)
{
    char missing[2048] = "", unexpected[2048] = "";
    int nmissing = 0, nunexpected = 0, more_missing = 0, more_unexpected = 0;
    for (int i = 0; i < n && !(mode & KILN__LOAD_ALLOW_MISSING); i++)
        if (match[i] < 0) {
            nmissing++;
            list_name(missing, sizeof missing, ts[i].name, &more_missing);
        }
    for (int j = 0; j < f->n && (mode & KILN__LOAD_REJECT_UNEXPECTED); j++) {
        bool listed = false;
        for (int i = 0; i < n && !listed; i++)
            listed = match[i] == j;
        if (!listed) {
            nunexpected++;
            list_name(unexpected, sizeof unexpected, f->es[j].name, &more_unexpected);
        }
    }
    if (!nmissing && !nunexpected)
        return KILN_OK;
    if (!(mode & KILN__LOAD_REJECT_UNEXPECTED)) /* kiln_load_into: missing names only */
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s has no tensor named %s%s", op, path,
                           missing, more_missing ? " (and more)" : "");
    char more_m[48] = "", more_u[48] = "";
    if (more_missing)
        snprintf(more_m, sizeof more_m, " and %d more", more_missing);
    if (more_unexpected)
        snprintf(more_u, sizeof more_u, " and %d more", more_unexpected);
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: the names of %s do not match the list's (%d missing, %d unexpected): "
                       "%s%s%s%s%s%s%s; nothing was loaded. Pass KILN_LOAD_NON_STRICT to "
                       "kiln_params_load_flags to load the names both hold and leave the others",
                       op, path, nmissing, nunexpected,
                       nmissing ? "Missing key(s) in the file: " : "", missing, more_m,
                       nmissing && nunexpected ? ". " : "",
                       nunexpected ? "Unexpected key(s) in the file: " : "", unexpected, more_u);
}

/* Each matched tensor's dtype (or, with CONVERT, convertible) and shape. */
static kiln_status check_entries(const char *op, const char *path, const kiln_named_tensor *ts,
                                 int n, const st_file *f, const int *match, unsigned mode)
{
    for (int i = 0; i < n; i++) {
        if (match[i] < 0)
            continue;
        const kiln_tensor *t = ts[i].tensor;
        const kiln__st_entry *e = &f->es[match[i]];
        char a[160], b[160];
        if (e->dtype != t->dtype && !(mode & KILN__LOAD_CONVERT))
            return kiln__error(
                KILN_ERR_DTYPE_MISMATCH, "%s: \"%.64s\" is %s in %s but the tensor is %s%s", op,
                ts[i].name, kiln_dtype_name(e->dtype), path, kiln_dtype_name(t->dtype),
                (mode & KILN__LOAD_REJECT_UNEXPECTED) ? " (KILN_LOAD_CONVERT_DTYPE converts it)"
                                                      : "");
        if (!same_shape(t, e))
            return kiln__error(KILN_ERR_SHAPE_MISMATCH,
                               "%s: \"%.64s\" has shape %s in %s but the tensor has shape %s", op,
                               ts[i].name, kiln__shape_str(a, sizeof a, e->ndim, e->shape), path,
                               kiln__shape_str(b, sizeof b, t->ndim, t->shape));
    }
    return KILN_OK;
}

kiln_status kiln__load_into(const char *op, const char *path, const kiln_named_tensor *tensors,
                            int n, unsigned mode)
{
    kiln_status s = check_list(op, tensors, n);
    st_file f = {.fd = -1};
    if (s == KILN_OK)
        s = st_open(op, path, &f);
    if (s != KILN_OK)
        return s;
    /* Every tensor matched and checked before anything is written; a read error while the data
     * is copied (the file truncated meanwhile) leaves the tensors before it written. */
    int *match = kiln__calloc((size_t)(n ? n : 1), sizeof *match);
    if (!match) {
        st_close(&f);
        return kiln__host_oom(op);
    }
    for (int i = 0; i < n; i++) {
        match[i] = -1;
        for (int j = 0; j < f.n && match[i] < 0; j++)
            if (strcmp(f.es[j].name, tensors[i].name) == 0)
                match[i] = j;
    }
    s = check_keys(op, path, tensors, n, &f, match, mode);
    if (s == KILN_OK)
        s = check_entries(op, path, tensors, n, &f, match, mode);
    for (int i = 0; s == KILN_OK && i < n; i++)
        if (match[i] >= 0)
            s = read_into(op, path, &f, &f.es[match[i]], tensors[i].tensor);
    free(match);
    st_close(&f);
    return s;
}

int kiln_checkpoint_count(const kiln_checkpoint *ck)
{
    return ck ? ck->n : 0;
}

const char *kiln_checkpoint_name(const kiln_checkpoint *ck, int i)
{
    return ck && i >= 0 && i < ck->n ? ck->names[i] : NULL;
}

kiln_tensor *kiln_checkpoint_tensor(const kiln_checkpoint *ck, int i)
{
    return ck && i >= 0 && i < ck->n ? ck->tensors[i] : NULL;
}

kiln_tensor *kiln_checkpoint_find(const kiln_checkpoint *ck, const char *name)
{
    for (int i = 0; ck && name && i < ck->n; i++)
        if (strcmp(ck->names[i], name) == 0)
            return ck->tensors[i];
    return NULL;
}
