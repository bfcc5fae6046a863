/* rm.c — the result codes' names and the error-buffer setters (see rm.h).
 * Design: errors are written into a caller-owned fixed buffer, so the error path never allocates
 * and can never fail itself; messages are truncated rather than lost. */
#include "common/rm.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rm_strerror(int rc)
{
    switch (rc) {
    case RM_OK:
        return "ok";
    case RM_ERR:
        return "error";
    case RM_EINVAL:
        return "invalid argument";
    case RM_ENOMEM:
        return "out of memory";
    case RM_EIO:
        return "i/o error";
    case RM_ETIMEDOUT:
        return "timed out";
    case RM_EPROTO:
        return "protocol error";
    case RM_EAUTH:
        return "unauthorized";
    case RM_ENOTFOUND:
        return "not found";
    case RM_ECONFLICT:
        return "conflict";
    case RM_EEPOCH:
        return "epoch changed";
    case RM_ECLOSED:
        return "closed";
    case RM_ETOOBIG:
        return "too big";
    case RM_EAGAIN:
        return "try again";
    case RM_EUNSUPPORTED:
        return "unsupported";
    case RM_ECANCELED:
        return "canceled";
    case RM_ENOSPC:
        return "no space";
    default:
        return "unknown error";
    }
}

/* Per thread: a counter of errors made (rm_errf/rm_err_field) and the error the last check
 * failure belonged to, so a trail logs its first hop at warn and the rest at debug. */
static _Thread_local unsigned long g_err_gen;
static _Thread_local unsigned long g_trail_gen = ~0ul;
static _Thread_local int g_trail_rc;

int rm_check_failed(const char *file, int line, const char *call, int rc)
{
    bool first = g_trail_gen != g_err_gen || g_trail_rc != rc;
    g_trail_gen = g_err_gen;
    g_trail_rc = rc;
    rm_log_write(first ? RM_LOG_WARN : RM_LOG_DEBUG, file, line, "check failed call=\"%s\" rc=%s", call,
                 rm_strerror(rc));
    return rc;
}

int rm_errf(rm_err *err, int code, const char *fmt, ...)
{
    g_err_gen++;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        err->field[0] = 0;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int rm_err_field(rm_err *err, int code, const char *field, const char *fmt, ...)
{
    g_err_gen++;
    if (err) {
        size_t off = 0;
        err->code = code;
        err->field[0] = 0;
        if (field && *field) {
            size_t fl = strlen(field);
            if (fl >= sizeof err->field)
                fl = sizeof err->field - 1;
            memcpy(err->field, field, fl);
            err->field[fl] = 0;
            memcpy(err->msg, err->field, fl);
            memcpy(err->msg + fl, ": ", 3);
            off = fl + 2;
        }
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg + off, sizeof err->msg - off, fmt, ap);
        va_end(ap);
    }
    return code;
}

void rm_sfmt(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

void rm_escape_ctrl(char *buf, size_t cap)
{
    size_t n = strlen(buf), bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (unsigned char)buf[i] < 0x20 || buf[i] == 0x7f;
    if (!bad || cap == 0)
        return;
    char *src = strdup(buf);
    if (!src) { /* no memory: blank them in place rather than print them */
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
                buf[i] = '?';
        return;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c < 0x20 || c == 0x7f) {
            if (o + 5 > cap)
                break;
            snprintf(buf + o, cap - o, "\\x%02x", c);
            o += 4;
        } else {
            if (o + 2 > cap)
                break;
            buf[o++] = (char)c;
        }
    }
    buf[o] = 0;
    free(src);
}

int rm_enum_index(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

const char *rm_enum_name(const char *const *names, int value)
{
    for (int i = 0; value >= 0 && names[i]; i++)
        if (i == value)
            return names[i];
    return "unknown";
}
