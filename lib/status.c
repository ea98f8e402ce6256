/* status.c - status names and texts, the thread-local last-error message, logging. */
#include "status.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define KILN__ERRBUF 8192

static _Thread_local char last_error[KILN__ERRBUF];
static _Thread_local kiln_status last_status;
static _Thread_local bool last_logged; /* last_error has been printed by the log */
static _Thread_local int log_held;     /* kiln__log_hold depth: errors wait to be logged */
static _Thread_local int log_pending;  /* while held: the level the last error waits for, or 0 */

const char *kiln_version(void)
{
    return KILN_VERSION_STRING;
}

const char *kiln_status_string(kiln_status s)
{
    switch (s) {
#define KILN__STATUS_NAME(name, num, text)                                                         \
    case KILN_##name:                                                                              \
        return "KILN_" #name;
        KILN_STATUS_MAP(KILN__STATUS_NAME)
#undef KILN__STATUS_NAME
    }
    return "KILN_UNKNOWN_STATUS";
}

const char *kiln_status_text(kiln_status s)
{
    switch (s) {
#define KILN__STATUS_TEXT(name, num, text)                                                         \
    case KILN_##name:                                                                              \
        return text;
        KILN_STATUS_MAP(KILN__STATUS_TEXT)
#undef KILN__STATUS_TEXT
    }
    return "unknown status";
}

const char *kiln_last_error(void)
{
    return last_error;
}

kiln_status(kiln__error)(kiln_status s, const char *fmt, ...)
{
    char tmp[KILN__ERRBUF];
    va_list ap;
    va_start(ap, fmt);
    /* Format into a temporary: callers may pass kiln_last_error() itself as an argument. */
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(last_error, tmp, sizeof tmp);
    last_status = s;
    last_logged = s == KILN_OK; /* KILN_OK: a saved message put back, not an error */
    if (s != KILN_OK)
        kiln__log_last_error(KILN_LOG_DEBUG);
    return s;
}

kiln_status kiln_set_last_error(kiln_status s, const char *fmt, ...)
{
    char tmp[KILN__ERRBUF];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return kiln__error(s, "%s", tmp);
}

kiln_status(kiln__host_oom)(const char *op)
{
    snprintf(last_error, sizeof last_error, "%s: out of host memory", op);
    last_status = KILN_ERR_OUT_OF_MEMORY;
    last_logged = false;
    return KILN_ERR_OUT_OF_MEMORY;
}

void kiln__log_last_error(int level)
{
    if (log_held > 0) {
        /* Wait for kiln__log_release, at the most severe level asked for meanwhile. */
        if (!log_pending || level < log_pending)
            log_pending = level;
        return;
    }
    if (last_logged || !last_error[0] || !kiln__log_enabled(level))
        return;
    if (level == KILN_LOG_DEBUG) /* with the status, as every error is logged there */
        kiln__log(level, "%s: %s", kiln_status_string(last_status), last_error);
    else
        kiln__log(level, "%s", last_error);
    last_logged = true;
}

void kiln__log_hold(void)
{
    log_held++;
}

void kiln__log_release(void)
{
    if (log_held > 0 && --log_held == 0 && log_pending) {
        int level = log_pending;
        log_pending = 0;
        kiln__log_last_error(level);
    }
}

/* KILN_LOG: off (or none, 0) silences kiln; error, warn, info, debug; unset or anything else is
 * warn, the default. */
static int parse_log_level(const char *v)
{
    if (!v || !*v)
        return KILN_LOG_WARN;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(v, names[i]) == 0)
            return i + 1;
    if (strcasecmp(v, "off") == 0 || strcasecmp(v, "none") == 0 || strcmp(v, "0") == 0)
        return 0;
    return KILN_LOG_WARN;
}

int kiln__log_enabled(int level)
{
    /* Read on every call: cheap, and lets tests change KILN_LOG at run time. */
    return level <= parse_log_level(getenv("KILN_LOG"));
}

void kiln__log(int level, const char *fmt, ...)
{
    if (!kiln__log_enabled(level))
        return;
    static const char *const names[] = {"", "error", "warn", "info", "debug"};
    char line[KILN__ERRBUF];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "kiln: %s: %s\n", names[level], line);
}

uint64_t kiln__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double kiln__now(void)
{
    return (double)kiln__now_ns() * 1e-9;
}
