/* rm.h — the one result type of ringmaster, the error buffer, and the check macros.
 *
 * Every function that can fail returns int: RM_OK (0) or a negative RM_E* code. Details go into
 * an rm_err the caller owns (usually on its stack) so nothing is lost and nothing is allocated on
 * the error path. Codes are only ever appended. */
#ifndef RM_RM_H
#define RM_RM_H
#include <stddef.h>
#include <stdarg.h>

enum {
    RM_OK = 0,
    RM_ERR = -1,    /* unspecified failure */
    RM_EINVAL = -2, /* bad argument, bad input, failed validation */
    RM_ENOMEM = -3,
    RM_EIO = -4,       /* file or socket error */
    RM_ETIMEDOUT = -5, /* a bounded wait ran out */
    RM_EPROTO = -6,    /* peer spoke garbage */
    RM_EAUTH = -7,     /* wrong or missing token */
    RM_ENOTFOUND = -8,
    RM_ECONFLICT = -9, /* 409-like: stale version, already exists */
    RM_EEPOCH = -10,   /* the rendezvous epoch moved on: re-join */
    RM_ECLOSED = -11,  /* peer closed / shutting down */
    RM_ETOOBIG = -12,  /* a capped buffer would overflow */
    RM_EAGAIN = -13,   /* try again later (not ready yet) */
    RM_EUNSUPPORTED = -14,
    RM_ECANCELED = -15, /* the caller's cancel flag was raised (a signal) */
    RM_ENOSPC = -16,    /* a file system (a /dev/shm, a disk) cannot hold what it must */
};

/* Static string for a code; never NULL. */
const char *rm_strerror(int rc);

/* Error details. `field` is a dotted path when the error is about an input field
 * ("spec.minReplicas"); `msg` is the whole human message ("spec.minReplicas: must be <= spec.replicas").
 * Zero-initialise (rm_err e = {0};). */
typedef struct rm_err {
    int code;
    char field[128];
    char msg[512];
} rm_err;

#if defined(__GNUC__)
#define RM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RM_PRINTF(a, b)
#endif

/* Sets err (if non-NULL) and returns code, so callers can `return rm_errf(err, RM_EINVAL, ...)`. */
int rm_errf(rm_err *err, int code, const char *fmt, ...) RM_PRINTF(3, 4);
/* Same, and records the field path; msg becomes "<field>: <formatted>". */
int rm_err_field(rm_err *err, int code, const char *field, const char *fmt, ...) RM_PRINTF(4, 5);
/* snprintf that truncates silently, for messages bounded by design (fixed-size status and event
 * fields, paths): a function boundary keeps -Wformat-truncation from flagging every composed
 * message. buf is always NUL-terminated when cap > 0. */
void rm_sfmt(char *buf, size_t cap, const char *fmt, ...) RM_PRINTF(3, 4);
/* Rewrite buf (a NUL-terminated string in a buffer of cap bytes) so that no control character
 * (0x00-0x1f except none, 0x7f) reaches a terminal: each becomes \xNN, cut to fit cap. For
 * messages that quote user input (manifest values, file names). */
void rm_escape_ctrl(char *buf, size_t cap);

/* Check macros: log file:line on failure so an error reads like a backtrace. The first failing
 * hop of a trail (the innermost check that saw the error) logs at warn, the hops that pass it on
 * at debug — see rm_check_failed. */
#define RM_CHECK(call)                                                 \
    do {                                                               \
        int rm_rc_ = (call);                                           \
        if (rm_rc_ < 0)                                                \
            return rm_check_failed(__FILE__, __LINE__, #call, rm_rc_); \
    } while (0)
#define RM_CHECK_GOTO(call, rcvar, label)                        \
    do {                                                         \
        (rcvar) = (call);                                        \
        if ((rcvar) < 0) {                                       \
            rm_check_failed(__FILE__, __LINE__, #call, (rcvar)); \
            goto label;                                          \
        }                                                        \
    } while (0)
/* The check macros' failure hook: logs "check failed call=... rc=..." with file:line and returns
 * rc. A trail is recognised per thread: the first check failure after a new rm_errf /
 * rm_err_field (or with another code than the last one) starts one and logs at warn; the
 * following hops of the same error log at debug. */
int rm_check_failed(const char *file, int line, const char *call, int rc);

/* TRY(call): for a function with an `int rc` and an `out:` label that frees what it holds:
 * rc = call, and on any non-zero rc jump to out. Unlike RM_CHECK_GOTO it logs nothing: for
 * parsers, whose errors are the user's input and are reported once through rm_err. */
#define TRY(x)        \
    do {              \
        rc = (x);     \
        if (rc)       \
            goto out; \
    } while (0)

#define RM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Lookups in a NULL-terminated name table indexed by its enum (backend.h's, trainingjob.h's,
 * rdzv.h's): the one place a name is matched, so every layer spells each value the same way.
 * rm_enum_index: the value named s, -1 for NULL or an unknown name.
 * rm_enum_name: names[value], "unknown" for a value outside the table. Static strings. */
int rm_enum_index(const char *const *names, const char *s);
const char *rm_enum_name(const char *const *names, int value);

/* The largest world any module handles: spec.replicas/maxReplicas, rendezvous rounds, replica
 * indices the controllers track. One number so the modules cannot disagree. No array sized by it
 * lives on a stack (docs/scale.md, "What bounds the world"). */
#define RM_MAX_WORLD 16384

#include "common/log.h"
#endif
