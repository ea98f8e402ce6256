/* status.h - internal error reporting and logging. */
#ifndef KILN_STATUS_H
#define KILN_STATUS_H

#include "kiln_cl.h"

#define KILN__PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Set this thread's last-error message and return s. The message should name the operation,
 * say what was wrong and what to do. */
kiln_status kiln__error(kiln_status s, const char *fmt, ...) KILN__PRINTF(2, 3);

/* KILN_ERR_OUT_OF_MEMORY for a failed host allocation, with a static message (no allocation). */
kiln_status kiln__host_oom(const char *op);

#ifdef __clang_analyzer__
/* The static analyzer (clang-tidy, scan-build) reads one file at a time and cannot see into
 * status.c: tell it that these return their failure status, so that it does not follow paths on
 * which a check "failed with KILN_OK" and its caller reads outputs that were never written.
 * (The definitions spell the names in parentheses, which keeps these macros out of them.) */
#define kiln__error(s, ...) ((void)kiln__error((s), __VA_ARGS__), (s))
#define kiln__host_oom(op) ((void)kiln__host_oom(op), KILN_ERR_OUT_OF_MEMORY)
#endif

enum kiln__log_level {
    KILN_LOG_ERROR = 1,
    KILN_LOG_WARN = 2,
    KILN_LOG_INFO = 3,
    KILN_LOG_DEBUG = 4,
};

/* Whether KILN_LOG asks for messages of this level (read once). */
int kiln__log_enabled(int level);

/* Print one line "kiln: <level>: <text>" to stderr if KILN_LOG asks for it. */
void kiln__log(int level, const char *fmt, ...) KILN__PRINTF(2, 3);

/* Print this thread's last-error message at level (KILN_LOG permitting), unless the log has
 * printed it already: kiln__error logs every error once at debug level, so an error that should
 * also show at error or warn level goes through here rather than a second kiln__log. */
void kiln__log_last_error(int level);

/* Between hold and release, errors are not logged when set: a caller that may rewrap an error
 * (kiln__error(s, "...: %s", kiln_last_error())) holds the log around the inner call and the
 * rewrap, and release logs the final message once, at the most severe level asked for
 * meanwhile (debug if none). Nestable. */
void kiln__log_hold(void);
void kiln__log_release(void);

/* Monotonic clock in seconds. */
double kiln__now(void);
/* The same clock in nanoseconds (the profiler's timestamps). */
uint64_t kiln__now_ns(void);

#endif
