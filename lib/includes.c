/* includes.c - the text of the headers under a program's -I directories (see includes.h). */
#include "includes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "fdio.h"

/* A growing text buffer. */
typedef struct text {
    char *buf;
    size_t len, cap;
    bool oom;
} text;

static char *reserve(text *t, size_t n)
{
    if (t->oom)
        return NULL;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *b = kiln__realloc(t->buf, cap);
        if (!b) {
            t->oom = true;
            return NULL;
        }
        t->buf = b;
        t->cap = cap;
    }
    return t->buf + t->len;
}

static void put(text *t, const void *data, size_t n)
{
    char *p = reserve(t, n);
    if (p) {
        memcpy(p, data, n);
        t->len += n;
        t->buf[t->len] = '\0';
    }
}

/* "<tag> <len>:<s>" */
static void put_field(text *t, const char *tag, const char *s)
{
    char head[64];
    int n = snprintf(head, sizeof head, "%s %zu:", tag, strlen(s));
    put(t, head, (size_t)n);
    put(t, s, strlen(s));
}

/* One file found under a -I directory. */
typedef struct found {
    char *path; /* full path */
    size_t size;
} found;

typedef struct walk {
    found *files;
    size_t n, cap, bytes;
    const char *why; /* set when a cap is passed */
} walk;

static bool add_file(walk *w, const char *path, size_t size)
{
    if (w->n >= KILN__INCLUDES_MAX_FILES || size > KILN__INCLUDES_MAX_BYTES - w->bytes) {
        w->why = w->n >= KILN__INCLUDES_MAX_FILES ? "the -I directories hold more than 256 files"
                                                  : "the -I directories hold more than 16 MiB";
        return false;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        found *f = kiln__realloc(w->files, cap * sizeof *f);
        if (!f)
            goto oom;
        w->files = f;
        w->cap = cap;
    }
    w->files[w->n].path = kiln__strdup(path);
    if (!w->files[w->n].path)
        goto oom;
    w->files[w->n++].size = size;
    w->bytes += size;
    return true;
oom:
    w->why = "out of host memory";
    return false;
}

/* Every regular file under dir (depth levels of subfolders at most) into w; false when a cap is
 * passed. Unreadable entries are skipped (the compiler cannot read them either). */
static bool walk_dir(walk *w, const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return true;
    bool ok = true;
    for (struct dirent *e; ok && (e = readdir(d)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[4096];
        struct stat st;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path ||
            stat(path, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth < KILN__INCLUDES_MAX_DEPTH)
            ok = walk_dir(w, path, depth + 1);
        else if (S_ISREG(st.st_mode))
            ok = add_file(w, path, (size_t)st.st_size);
    }
    closedir(d);
    return ok;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const found *)a)->path, ((const found *)b)->path);
}

/* "file <len>:<path> <len>:<contents>\n" (contents as read now; "unreadable" if not). */
static void put_file(text *t, const found *f)
{
    put_field(t, "file", f->path);
    int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    char *p = fd >= 0 ? reserve(t, f->size + 32) : NULL;
    size_t n = f->size;
    if (p && kiln__fd_transfer(fd, p + 32, n, false)) {
        int h = snprintf(p, 32, " %zu:", n);
        memmove(p + h, p + 32, n);
        t->len += (size_t)h + n;
        put(t, "\n", 1);
    } else {
        put(t, " unreadable\n", 12);
    }
    if (fd >= 0)
        close(fd);
}

/* The next -I directory of options from *p on (advancing *p), into dir; false at the end. */
static bool next_dir(const char **p, char *dir, size_t size)
{
    const char *s = *p;
    while (*s) {
        while (*s == ' ')
            s++;
        size_t n = strcspn(s, " ");
        bool inc = n >= 2 && s[0] == '-' && s[1] == 'I';
        const char *v = s + 2;
        size_t vn = n - 2;
        s += n;
        if (inc && vn == 0) { /* "-I dir" */
            while (*s == ' ')
                s++;
            v = s;
            vn = strcspn(s, " ");
            s += vn;
        }
        if (inc && vn > 0 && vn < size) {
            memcpy(dir, v, vn);
            dir[vn] = '\0';
            *p = s;
            return true;
        }
    }
    *p = s;
    return false;
}

bool kiln__includes_text(const char *options, char **out, size_t *len, const char **why)
{
    text t = {0};
    walk w = {0};
    char dir[4096];
    *out = NULL;
    *len = 0;
    *why = NULL;
    put(&t, "", 0);
    for (const char *p = options ? options : ""; next_dir(&p, dir, sizeof dir);) {
        size_t first = w.n;
        put_field(&t, "dir", dir);
        put(&t, "\n", 1);
        if (!walk_dir(&w, dir, 0))
            break;
        if (w.n > first) /* qsort's base must not be NULL, even for 0 elements */
            qsort(w.files + first, w.n - first, sizeof *w.files, by_path);
        for (size_t i = first; i < w.n; i++)
            put_file(&t, &w.files[i]);
    }
    for (size_t i = 0; i < w.n; i++)
        free(w.files[i].path);
    free(w.files);
    *why = w.why ? w.why : t.oom ? "out of host memory" : NULL;
    if (*why) {
        free(t.buf);
        return false;
    }
    *out = t.buf;
    *len = t.len;
    return true;
}
