/* prewarm.c - kiln-info --prewarm in several processes. PoCL compiles one program at a time in a
 * process (its compiler lock), so kiln_device_prewarm's threads hardly overlap there; processes
 * do. The parent starts kiln-info --prewarm-part I/N -d SPEC once per part, reads each child's
 * progress from a pipe, draws one progress line for all of them and sums their counts. The kiln
 * and PoCL caches are safe to fill from several processes at once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2 */
#endif
#include "prewarm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_PROCS 64 /* kiln-info's -j limit */
#define DEFAULT_PROCS 8

int prewarm_default_procs(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores < 1 ? 1 : cores > DEFAULT_PROCS ? DEFAULT_PROCS : (int)cores;
}

/* ---- the child ------------------------------------------------------------------------------ */

static void report_progress(void *user, int done, int total)
{
    (void)user;
    printf("progress %d %d\n", done, total);
    fflush(stdout);
}

int prewarm_part_child(kiln_device *dev, const char *part)
{
    /* Tests of the parent's side: every part fails with a message ("1") or exits silently with
     * status 3 ("exit"), before building anything. */
    const char *fail = getenv("KILN_TEST_PREWARM_FAIL");
    if (fail && strcmp(fail, "exit") == 0)
        _exit(3);
    if (fail && *fail) {
        printf("error kiln-info: part %s failed on purpose (KILN_TEST_PREWARM_FAIL)\n", part);
        return 1;
    }
    int i = -1, n = 0, end = 0;
    if (sscanf(part, "%d/%d%n", &i, &n, &end) != 2 || part[end] != '\0') {
        printf("error kiln-info: --prewarm-part takes I/N, not '%s'\n", part);
        return 1;
    }
    int built = 0;
    kiln_status s = kiln_device_prewarm_part(dev, i, n, report_progress, NULL, &built);
    if (s != KILN_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        for (char *c = msg; *c; c++) /* one line */
            if (*c == '\n')
                *c = ' ';
        printf("error %s\n", msg);
        return 1;
    }
    printf("built %d\n", built);
    return 0;
}

/* ---- the parent ----------------------------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    int fd;          /* the read end of its stdout; -1 at EOF */
    int done, total; /* its last progress line */
    int built;       /* from "built N"; -1 until then */
    char line[1100]; /* the line being read */
    size_t len;
    char error[1024]; /* from "error MESSAGE" */
} child;

static void child_line(child *c)
{
    c->line[c->len] = '\0';
    if (strncmp(c->line, "error ", 6) == 0) {
        size_t n = strnlen(c->line + 6, sizeof c->error - 1);
        memcpy(c->error, c->line + 6, n);
        c->error[n] = '\0';
    } else if (sscanf(c->line, "progress %d %d", &c->done, &c->total) == 2)
        ;
    else
        sscanf(c->line, "built %d", &c->built);
    c->len = 0;
}

/* Read what the child wrote; false at its EOF. */
static bool child_read(child *c)
{
    char buf[512];
    ssize_t got = read(c->fd, buf, sizeof buf);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (got <= 0)
        return false;
    for (ssize_t k = 0; k < got; k++) {
        if (buf[k] == '\n')
            child_line(c);
        else if (c->len < sizeof c->line - 1)
            c->line[c->len++] = buf[k];
    }
    return true;
}

/* Start kiln-info --prewarm-part PART/N -d SPEC with its stdout into a pipe. */
static bool child_start(child *c, const char *self, const char *spec, int part, int n, char *err,
                        size_t errlen)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return false;
    }
    char arg[32];
    snprintf(arg, sizeof arg, "%d/%d", part, n);
    char *argv[] = {"kiln-info", "--prewarm-part", arg, "-d", (char *)spec, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    int rc = posix_spawn(&c->pid, self, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        snprintf(err, errlen, "starting %s: %s", self, strerror(rc));
        return false;
    }
    c->fd = fds[0];
    c->built = -1;
    return true;
}

static bool show_progress(void)
{
    const char *log = getenv("KILN_LOG");
    return isatty(STDERR_FILENO) && !(log && strcmp(log, "off") == 0);
}

kiln_status prewarm_device(kiln_device *dev, int procs, int *built, int *used, char *err,
                           size_t errlen)
{
    *built = 0;
    *used = 1;
    err[0] = '\0';
    char self[4096];
    ssize_t len = procs > 1 ? readlink("/proc/self/exe", self, sizeof self - 1) : -1;
    if (len <= 0) { /* one process, or no way to start ourselves again: build here */
        kiln_status s = kiln_device_prewarm(dev, built);
        if (s != KILN_OK)
            snprintf(err, errlen, "%s", kiln_last_error());
        return s;
    }
    self[len] = '\0';
    if (procs > MAX_PROCS)
        procs = MAX_PROCS;
    const char *spec = kiln_device_spec(dev);
    child *kids = calloc(MAX_PROCS, sizeof *kids);
    if (!kids) {
        snprintf(err, errlen, "kiln-info: out of host memory");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    int started = 0;
    for (; started < procs; started++)
        if (!child_start(&kids[started], self, spec, started, procs, err, errlen))
            break;
    *used = started + (started < procs);
    bool tty = show_progress(), drawn = false;
    int open = started, shown = -1;
    while (open > 0) {
        struct pollfd pf[MAX_PROCS];
        int map[MAX_PROCS], np = 0;
        for (int i = 0; i < started; i++)
            if (kids[i].fd >= 0) {
                pf[np] = (struct pollfd){.fd = kids[i].fd, .events = POLLIN};
                map[np++] = i;
            }
        if (poll(pf, (nfds_t)np, 500) < 0 && errno != EINTR)
            break;
        for (int k = 0; k < np; k++)
            if ((pf[k].revents & (POLLIN | POLLHUP | POLLERR)) && !child_read(&kids[map[k]])) {
                close(kids[map[k]].fd);
                kids[map[k]].fd = -1;
                open--;
            }
        int done = 0, total = 0;
        for (int i = 0; i < started; i++)
            done += kids[i].done, total += kids[i].total;
        if (tty && done != shown) {
            fprintf(stderr, "\rkiln: prewarming %s: %d of %d kernels (%d processes)", spec, done,
                    total, started);
            shown = done;
            drawn = true;
        }
    }
    if (drawn)
        fputc('\n', stderr);
    kiln_status s = KILN_OK;
    for (int i = 0; i < started; i++) {
        if (kids[i].fd >= 0)
            close(kids[i].fd);
        int status = 0;
        while (waitpid(kids[i].pid, &status, 0) < 0 && errno == EINTR)
            ;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && kids[i].built >= 0;
        if (ok) {
            *built += kids[i].built;
            continue;
        }
        if (s == KILN_OK) { /* the first failure's message */
            if (kids[i].error[0])
                snprintf(err, errlen, "%s", kids[i].error);
            else if (WIFSIGNALED(status))
                snprintf(err, errlen, "the process for part %d of %d was killed by signal %d", i,
                         procs, WTERMSIG(status));
            else
                snprintf(err, errlen, "the process for part %d of %d exited with status %d", i,
                         procs, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
        s = KILN_ERR_BUILD_FAILED;
    }
    free(kids);
    /* Parts whose process did not start (err says why) are built here. */
    for (int i = started; i < procs && s == KILN_OK; i++) {
        fprintf(stderr, "kiln-info: %s; building part %d of %d in this process\n", err, i, procs);
        int part = 0;
        s = kiln_device_prewarm_part(dev, i, procs, NULL, NULL, &part);
        *built += part;
        if (s != KILN_OK)
            snprintf(err, errlen, "%s", kiln_last_error());
    }
    return s;
}
