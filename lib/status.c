/* status.c - status names and texts, the thread-local last-error message, logging. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define KILN__ERRBUF 8192

static _Thread_local char last_error[KILN__ERRBUF];

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
    kiln__log(KILN_LOG_DEBUG, "%s: %s", kiln_status_string(s), last_error);
    return s;
}

kiln_status(kiln__host_oom)(const char *op)
{
    snprintf(last_error, sizeof last_error, "%s: out of host memory", op);
    return KILN_ERR_OUT_OF_MEMORY;
}

static int parse_log_level(const char *v)
{
    if (!v || !*v)
        return 0;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcasecmp(v, names[i]) == 0)
            return i + 1;
    if (strcasecmp(v, "warning") == 0)
        return KILN_LOG_WARN;
    return 0;
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

double kiln__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
