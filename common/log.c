/* log.c — structured, one-line-per-event logging to stderr (see log.h).
 *
 * Design: the caller's printf output ("message words k=v k=\"v w\"") is tokenised into a message
 * and key/value pairs, then rendered as logfmt text or as a JSON object into a stack buffer and
 * written with a single write(2), so lines from many threads never interleave and nothing is
 * allocated. A field that does not fit in the line is dropped whole (and "truncated=1" added)
 * rather than cut in half, so the output always parses. The logger is the one process-wide
 * facility (like stderr itself); its settings live in one static struct guarded by a mutex. */
#include "common/log.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define RM_LOG_MSG_CAP 4096
#define RM_LOG_LINE_CAP 8192
#define RM_LOG_MAX_KV 64

static struct {
    pthread_mutex_t mu;
    atomic_int min;
    atomic_int fmt;
    char comp[64];
    char fields[512];
} g_log = {PTHREAD_MUTEX_INITIALIZER, RM_LOG_INFO, RM_LOG_TEXT, "", ""};

static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;

int rm_log_parse_level(const char *s, rm_log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    if (!s)
        return RM_EINVAL;
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            *out = (rm_log_level)i;
            return RM_OK;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *out = RM_LOG_WARN;
        return RM_OK;
    }
    return RM_EINVAL;
}

int rm_log_parse_format(const char *s, rm_log_format *out)
{
    if (!s)
        return RM_EINVAL;
    if (strcasecmp(s, "text") == 0 || strcasecmp(s, "logfmt") == 0) {
        *out = RM_LOG_TEXT;
        return RM_OK;
    }
    if (strcasecmp(s, "json") == 0) {
        *out = RM_LOG_JSON;
        return RM_OK;
    }
    return RM_EINVAL;
}

static void log_env(void)
{
    rm_log_level l;
    rm_log_format f;
    if (rm_log_parse_level(getenv("RINGMASTER_LOG_LEVEL"), &l) == RM_OK)
        atomic_store(&g_log.min, (int)l);
    if (rm_log_parse_format(getenv("RINGMASTER_LOG_FORMAT"), &f) == RM_OK)
        atomic_store(&g_log.fmt, (int)f);
}

void rm_log_init(rm_log_level min, rm_log_format fmt, const char *component)
{
    pthread_once(&g_log_once, log_env);
    atomic_store(&g_log.min, (int)min);
    atomic_store(&g_log.fmt, (int)fmt);
    pthread_mutex_lock(&g_log.mu);
    snprintf(g_log.comp, sizeof g_log.comp, "%s", component ? component : "");
    pthread_mutex_unlock(&g_log.mu);
    log_env();
}

void rm_log_set_fields(const char *kv)
{
    pthread_mutex_lock(&g_log.mu);
    snprintf(g_log.fields, sizeof g_log.fields, "%s", kv ? kv : "");
    pthread_mutex_unlock(&g_log.mu);
}

int rm_log_enabled(rm_log_level lvl)
{
    pthread_once(&g_log_once, log_env);
    return (int)lvl >= atomic_load(&g_log.min);
}

/* ---- tokeniser ------------------------------------------------------------------------------ */

typedef struct {
    const char *k;
    size_t klen;
    const char *v;
    size_t vlen; /* raw text (inside quotes when quoted) */
    int quoted;  /* value had quotes: \" and \\ inside are escapes */
    int bare;    /* token without '=' */
} log_kv;

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* After a quote: end of text, or whitespace then a "key=" token. */
static int closes_value(const char *q)
{
    if (!*q)
        return 1;
    if (!is_ws(*q))
        return 0;
    while (is_ws(*q))
        q++;
    if (!*q)
        return 1;
    const char *k = q;
    while (*q && !is_ws(*q) && *q != '=' && *q != '"')
        q++;
    return q > k && *q == '=';
}

/* Splits s into message and pairs. Message = text before the first token containing '='.
 * *more is set when pairs were left over because kv[] was full. */
static size_t log_tokenise(const char *s, const char **msg, size_t *msglen, log_kv *kv, size_t maxkv,
                           int *more)
{
    const char *p = s;
    size_t n = 0;
    while (is_ws(*p))
        p++;
    *msg = p;
    *msglen = 0;
    /* message: tokens without '=' (a quoted token's '=' does not count) */
    const char *msg_end = p;
    while (*p) {
        const char *t = p;
        while (*p && !is_ws(*p) && *p != '=')
            p++;
        if (*p == '=') {
            p = t;
            break;
        }
        msg_end = p;
        while (is_ws(*p))
            p++;
    }
    *msglen = (size_t)(msg_end - *msg);
    while (*p && n < maxkv) {
        log_kv *e = &kv[n];
        memset(e, 0, sizeof *e);
        e->k = p;
        while (*p && !is_ws(*p) && *p != '=')
            p++;
        e->klen = (size_t)(p - e->k);
        if (*p != '=') {
            e->bare = 1;
        } else {
            p++;
            if (*p == '"') {
                p++;
                e->quoted = 1;
                e->v = p;
                /* a quote closes the value only when followed by the end or by another key=,
                 * so unescaped quotes inside (call="f("x")", err="a "b" c") survive */
                while (*p) {
                    if (*p == '"' && closes_value(p + 1))
                        break;
                    p++;
                }
                e->vlen = (size_t)(p - e->v);
                if (*p == '"')
                    p++;
            } else {
                e->v = p;
                while (*p && !is_ws(*p))
                    p++;
                e->vlen = (size_t)(p - e->v);
            }
        }
        if (e->klen > 0 || !e->bare)
            n++;
        while (is_ws(*p))
            p++;
    }
    *more = *p != 0;
    return n;
}

/* ---- rendering -------------------------------------------------------------------------------- */

typedef struct {
    char *b;
    size_t cap; /* usable capacity (reserve excluded) */
    size_t len;
    int over;
} log_buf;

static void lb_put(log_buf *w, const char *s, size_t n)
{
    if (w->over)
        return;
    if (w->len + n > w->cap) {
        w->over = 1;
        return;
    }
    memcpy(w->b + w->len, s, n);
    w->len += n;
}
static void lb_puts(log_buf *w, const char *s)
{
    lb_put(w, s, strlen(s));
}
static void lb_putc(log_buf *w, char c)
{
    lb_put(w, &c, 1);
}

/* A quoted string for either format: unescape a quoted value's \" and \\ on the fly, then escape
 * '"', '\\', \n, \r, \t and every other control character (\u00XX), so a value that came from
 * the network can neither break the line nor reach a terminal as an escape sequence. */
static void lb_quoted(log_buf *w, const char *s, size_t n, int unescape)
{
    lb_putc(w, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unescape && c == '\\' && i + 1 < n && (s[i + 1] == '"' || s[i + 1] == '\\'))
            c = (unsigned char)s[++i];
        switch (c) {
        case '"':
            lb_puts(w, "\\\"");
            break;
        case '\\':
            lb_puts(w, "\\\\");
            break;
        case '\n':
            lb_puts(w, "\\n");
            break;
        case '\r':
            lb_puts(w, "\\r");
            break;
        case '\t':
            lb_puts(w, "\\t");
            break;
        default:
            if (c < 0x20 || c == 0x7f) {
                char u[8];
                snprintf(u, sizeof u, "\\u%04x", c);
                lb_puts(w, u);
            } else {
                lb_putc(w, (char)c);
            }
        }
    }
    lb_putc(w, '"');
}

static int needs_quote(const char *s, size_t n)
{
    if (n == 0)
        return 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f)
            return 1;
    }
    return 0;
}

/* logfmt value: bare when it can be, else quoted like JSON. */
static void lb_text_val(log_buf *w, const char *s, size_t n, int unescape, int force_quote)
{
    if (!unescape && !force_quote && !needs_quote(s, n))
        lb_put(w, s, n);
    else
        lb_quoted(w, s, n, unescape);
}

/* One field, all or nothing. force_quote: text mode quotes the value even when it needs none. */
static void lb_field(log_buf *w, int json, const char *k, size_t klen, const char *v, size_t vlen,
                     int unescape, int bare, int force_quote, int *truncated)
{
    size_t save = w->len;
    if (json) {
        lb_putc(w, ',');
        lb_quoted(w, k, klen, 0);
        lb_putc(w, ':');
        lb_quoted(w, bare ? "" : v, bare ? 0 : vlen, unescape);
    } else {
        lb_putc(w, ' ');
        lb_put(w, k, klen);
        if (!bare) {
            lb_putc(w, '=');
            lb_text_val(w, v, vlen, unescape, force_quote);
        }
    }
    if (w->over) {
        w->len = save;
        w->over = 0;
        *truncated = 1;
        w->cap = save; /* no later field may slip in after a dropped one */
    }
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};

static size_t log_render(char *out, size_t outcap, rm_log_level lvl, const char *file, int line,
                         const char *text)
{
    char ts[40], comp[64], fields[512];
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    size_t tl = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + tl, sizeof ts - tl, ".%03ldZ", now.tv_nsec / 1000000L);

    pthread_mutex_lock(&g_log.mu);
    memcpy(comp, g_log.comp, sizeof comp);
    memcpy(fields, g_log.fields, sizeof fields);
    pthread_mutex_unlock(&g_log.mu);
    int json = atomic_load(&g_log.fmt) == RM_LOG_JSON;
    if ((unsigned)lvl > RM_LOG_ERROR)
        lvl = RM_LOG_ERROR;

    const char *msg;
    size_t msglen;
    log_kv kv[RM_LOG_MAX_KV], fkv[16];
    int more = 0, fmore = 0;
    size_t n = log_tokenise(text, &msg, &msglen, kv, RM_LOG_MAX_KV, &more);
    const char *fmsg;
    size_t fmsglen;
    size_t fn = log_tokenise(fields, &fmsg, &fmsglen, fkv, RM_ARRAY_LEN(fkv), &fmore);

    const size_t reserve = 24; /* room for the closing brace, truncated marker and newline */
    if (outcap < reserve + 64) {
        if (outcap)
            out[0] = 0; /* still a string for the caller */
        return 0;
    }
    log_buf w = {out, outcap - reserve, 0, 0};
    int truncated = more || fmore; /* pairs past kv[] were dropped */
    if (json) {
        lb_puts(&w, "{\"ts\":\"");
        lb_puts(&w, ts);
        lb_puts(&w, "\",\"level\":\"");
        lb_puts(&w, level_names[lvl]);
        lb_putc(&w, '"');
    } else {
        lb_puts(&w, "ts=");
        lb_puts(&w, ts);
        lb_puts(&w, " level=");
        lb_puts(&w, level_names[lvl]);
    }
    if (comp[0])
        lb_field(&w, json, "comp", 4, comp, strlen(comp), 0, 0, 0, &truncated);
    lb_field(&w, json, "msg", 3, msg, msglen, 0, 0, 1, &truncated);
    for (size_t i = 0; i < n; i++)
        lb_field(&w, json, kv[i].k, kv[i].klen, kv[i].v, kv[i].vlen, kv[i].quoted, kv[i].bare, 0, &truncated);
    for (size_t i = 0; i < fn; i++)
        lb_field(&w, json, fkv[i].k, fkv[i].klen, fkv[i].v, fkv[i].vlen, fkv[i].quoted, fkv[i].bare, 0,
                 &truncated);
    if (file && (lvl == RM_LOG_DEBUG || lvl >= RM_LOG_WARN)) {
        char src[128];
        const char *base = strrchr(file, '/');
        int sl = snprintf(src, sizeof src, "%s:%d", base ? base + 1 : file, line);
        if (sl > 0)
            lb_field(&w, json, "src", 3, src, strlen(src), 0, 0, 0, &truncated);
    }
    /* the reserve is ours from here on */
    w.cap = outcap - 1;
    w.over = 0;
    if (truncated)
        lb_puts(&w, json ? ",\"truncated\":\"1\"" : " truncated=1");
    if (json)
        lb_putc(&w, '}');
    out[w.len] = 0;
    return w.len;
}

size_t rm_log_format_line(char *buf, size_t cap, rm_log_level lvl, const char *fmt, ...)
{
    char text[RM_LOG_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return log_render(buf, cap, lvl, NULL, 0, text);
}

void rm_log_vwrite(rm_log_level lvl, const char *file, int line, const char *fmt, va_list ap)
{
    if (!rm_log_enabled(lvl))
        return;
    int saved_errno = errno;
    char text[RM_LOG_MSG_CAP];
    char out[RM_LOG_LINE_CAP + 1];
    vsnprintf(text, sizeof text, fmt, ap);
    size_t n = log_render(out, RM_LOG_LINE_CAP, lvl, file, line, text);
    out[n++] = '\n';
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(2, out + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    errno = saved_errno;
}

void rm_log_write(rm_log_level lvl, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rm_log_vwrite(lvl, file, line, fmt, ap);
    va_end(ap);
}
