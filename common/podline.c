/* podline.c — the swarm runtime's line protocol (podline.h): parse, render, and split a byte
 * stream into capped lines. Strict on purpose: one space between words, known fields once each,
 * every value capped, so a writer's bug shows up as a named error rather than a worker that
 * joins the wrong job (docs/scale.md, "The swarm as a kubelet runtime"). */
#include "common/podline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const VERBS[] = {NULL, "start", "stop", "kill", "hang", "exit"};

/* Printable ASCII without a space: what a value (and a key) may hold. */
static bool word_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
            return false;
    return n > 0;
}

/* Copy a value of n bytes into dst[cap]; RM_EINVAL naming field when empty, too long or not a word. */
static int put(char *dst, size_t cap, const char *field, const char *v, size_t n, rm_err *err)
{
    if (n == 0)
        return rm_err_field(err, RM_EINVAL, field, "is empty");
    if (n >= cap)
        return rm_err_field(err, RM_EINVAL, field, "is %zu bytes, over the cap of %zu", n, cap - 1);
    if (!word_ok(v, n))
        return rm_err_field(err, RM_EINVAL, field, "holds a control byte or a non-ASCII byte");
    memcpy(dst, v, n);
    dst[n] = 0;
    return RM_OK;
}

/* A decimal integer of n bytes in lo..hi. */
static int put_int(long long *out, const char *field, const char *v, size_t n, long long lo, long long hi,
                   rm_err *err)
{
    char tmp[24];
    if (n == 0 || n >= sizeof tmp)
        return rm_err_field(err, RM_EINVAL, field, "\"%.*s\" is not a number", (int)(n < 40 ? n : 40), v);
    memcpy(tmp, v, n);
    tmp[n] = 0;
    char *end;
    errno = 0;
    long long x = strtoll(tmp, &end, 10);
    if (errno || *end || end == tmp || tmp[0] == '+' || tmp[0] == ' ')
        return rm_err_field(err, RM_EINVAL, field, "\"%s\" is not a number", tmp);
    if (x < lo || x > hi)
        return rm_err_field(err, RM_EINVAL, field, "%lld is not in %lld..%lld", x, lo, hi);
    *out = x;
    return RM_OK;
}

static int check_url(const char *url, rm_err *err)
{
    unsigned a, b, c, d, port;
    char tail;
    if (strncmp(url, "http://", 7) != 0 ||
        sscanf(url + 7, "%u.%u.%u.%u:%u%c", &a, &b, &c, &d, &port, &tail) != 5 || a > 255 || b > 255 ||
        c > 255 || d > 255 || port < 1 || port > 65535)
        return rm_err_field(err, RM_EINVAL, "url", "\"%.100s\" must be http://A.B.C.D:PORT", url);
    return RM_OK;
}

static int check_ip(const char *ip, rm_err *err)
{
    unsigned a, b, c, d;
    char tail;
    if (sscanf(ip, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 || b > 255 || c > 255 || d > 255)
        return rm_err_field(err, RM_EINVAL, "ip", "\"%s\" must be A.B.C.D", ip);
    return RM_OK;
}

int rm_podline_parse(const char *line, size_t len, rm_podline *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    if (len > 0 && line[len - 1] == '\n')
        len--;
    if (len + 1 > RM_PODLINE_MAX)
        return rm_err_field(err, RM_EINVAL, "line", "is %zu bytes, over the cap of %d", len + 1,
                            RM_PODLINE_MAX);
    const char *p = line, *end = line + len;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    size_t vl = (size_t)((sp ? sp : end) - p);
    for (int v = RM_PODLINE_START; v <= RM_PODLINE_EXIT; v++)
        if (strlen(VERBS[v]) == vl && memcmp(VERBS[v], p, vl) == 0)
            out->verb = (rm_podline_verb)v;
    if (!out->verb)
        return rm_err_field(err, RM_EINVAL, "verb", "\"%.*s\" is not start, stop, kill, hang or exit",
                            (int)(vl < 40 ? vl : 40), p);
    if (!sp)
        return rm_err_field(err, RM_EINVAL, "key", "is missing");
    p = sp + 1;
    sp = memchr(p, ' ', (size_t)(end - p));
    int rc = put(out->key, sizeof out->key, "key", p, (size_t)((sp ? sp : end) - p), err);
    if (rc)
        return rc;
    enum { F_URL = 1, F_JOB = 2, F_TOKEN = 4, F_ID = 8, F_IP = 16, F_STEPS = 32, F_CODE = 64 };
    unsigned seen = 0;
    while (sp) {
        p = sp + 1;
        sp = memchr(p, ' ', (size_t)(end - p));
        const char *we = sp ? sp : end;
        const char *eq = memchr(p, '=', (size_t)(we - p));
        if (p == we)
            return rm_err_field(err, RM_EINVAL, "line", "has two spaces in a row or a trailing space");
        if (!eq)
            return rm_err_field(err, RM_EINVAL, "line", "\"%.*s\" is not NAME=VALUE",
                                (int)(we - p < 40 ? we - p : 40), p);
        size_t nl = (size_t)(eq - p), n = (size_t)(we - eq - 1);
        const char *v = eq + 1;
        char name[16];
        snprintf(name, sizeof name, "%.*s", (int)(nl < 15 ? nl : 15), p);
        unsigned bit = 0;
        bool start = out->verb == RM_PODLINE_START;
        bool coded = out->verb == RM_PODLINE_KILL || out->verb == RM_PODLINE_EXIT;
        long long x = 0;
        if (start && nl == 3 && !memcmp(p, "url", 3)) {
            bit = F_URL;
            rc = put(out->url, sizeof out->url, "url", v, n, err);
            if (!rc)
                rc = check_url(out->url, err);
        } else if (start && nl == 3 && !memcmp(p, "job", 3)) {
            bit = F_JOB;
            rc = put(out->job, sizeof out->job, "job", v, n, err);
            const char *slash = rc ? NULL : strchr(out->job, '/');
            if (!rc && (!slash || slash == out->job || !slash[1] || strchr(slash + 1, '/')))
                rc = rm_err_field(err, RM_EINVAL, "job", "\"%s\" must be namespace/name", out->job);
        } else if (start && nl == 5 && !memcmp(p, "token", 5)) {
            bit = F_TOKEN;
            rc = put(out->token, sizeof out->token, "token", v, n, err);
        } else if (start && nl == 2 && !memcmp(p, "id", 2)) {
            bit = F_ID;
            rc = put_int(&x, "id", v, n, 0, RM_PODLINE_ID_MAX, err);
            out->id = (int)x;
        } else if (start && nl == 2 && !memcmp(p, "ip", 2)) {
            bit = F_IP;
            rc = put(out->ip, sizeof out->ip, "ip", v, n, err);
            if (!rc)
                rc = check_ip(out->ip, err);
        } else if (start && nl == 5 && !memcmp(p, "steps", 5)) {
            bit = F_STEPS;
            rc = put_int(&out->steps, "steps", v, n, 1, RM_PODLINE_STEPS_MAX, err);
        } else if (coded && nl == 4 && !memcmp(p, "code", 4)) {
            bit = F_CODE;
            rc = put_int(&x, "code", v, n, 0, 255, err);
            out->code = (int)x;
        } else {
            return rm_err_field(err, RM_EINVAL, name[0] ? name : "line", "is not a field of %s",
                                VERBS[out->verb]);
        }
        if (rc)
            return rc;
        if (seen & bit)
            return rm_err_field(err, RM_EINVAL, name, "is given twice");
        seen |= bit;
    }
    if (out->verb == RM_PODLINE_START) {
        static const struct {
            unsigned bit;
            const char *name;
        } req[] = {{F_URL, "url"}, {F_JOB, "job"}, {F_TOKEN, "token"}, {F_ID, "id"}};
        for (size_t i = 0; i < RM_ARRAY_LEN(req); i++)
            if (!(seen & req[i].bit))
                return rm_err_field(err, RM_EINVAL, req[i].name, "is required");
    }
    if ((out->verb == RM_PODLINE_KILL || out->verb == RM_PODLINE_EXIT) && !(seen & F_CODE))
        return rm_err_field(err, RM_EINVAL, "code", "is required");
    return RM_OK;
}

int rm_podline_format(const rm_podline *l, char *buf, size_t cap)
{
    if (l->verb < RM_PODLINE_START || l->verb > RM_PODLINE_EXIT)
        return RM_EINVAL;
    if (!word_ok(l->key, strnlen(l->key, sizeof l->key)) || strnlen(l->key, sizeof l->key) >= sizeof l->key)
        return RM_EINVAL;
    int n;
    switch (l->verb) {
    case RM_PODLINE_START: {
        size_t ul = strnlen(l->url, sizeof l->url), jl = strnlen(l->job, sizeof l->job),
               tl = strnlen(l->token, sizeof l->token), il = strnlen(l->ip, sizeof l->ip);
        if (ul >= sizeof l->url || jl >= sizeof l->job || tl >= sizeof l->token || il >= sizeof l->ip ||
            !word_ok(l->url, ul) || !word_ok(l->job, jl) || !word_ok(l->token, tl) ||
            (il && !word_ok(l->ip, il)) || l->id < 0 || l->id > RM_PODLINE_ID_MAX || l->steps < 0 ||
            l->steps > RM_PODLINE_STEPS_MAX)
            return RM_EINVAL;
        char steps[32] = "";
        if (l->steps > 0)
            snprintf(steps, sizeof steps, " steps=%lld", l->steps);
        n = snprintf(buf, cap, "start %s url=%s job=%s token=%s id=%d%s%s%s\n", l->key, l->url, l->job,
                     l->token, l->id, il ? " ip=" : "", l->ip, steps);
        break;
    }
    case RM_PODLINE_KILL:
    case RM_PODLINE_EXIT:
        if (l->code < 0 || l->code > 255)
            return RM_EINVAL;
        n = snprintf(buf, cap, "%s %s code=%d\n", VERBS[l->verb], l->key, l->code);
        break;
    default:
        n = snprintf(buf, cap, "%s %s\n", VERBS[l->verb], l->key);
        break;
    }
    if (n < 0)
        return RM_EINVAL;
    if ((size_t)n >= cap || n >= RM_PODLINE_MAX)
        return RM_ETOOBIG;
    return n;
}

char *rm_podline_space(rm_podline_in *in, size_t *room)
{
    *room = sizeof in->b - in->len;
    return in->b + in->len;
}

void rm_podline_fed(rm_podline_in *in, size_t n)
{
    in->len += n;
}

int rm_podline_take(rm_podline_in *in, char *line, rm_err *err)
{
    for (;;) {
        char *nl = memchr(in->b, '\n', in->len);
        if (in->skipping) { /* the rest of an overlong line */
            size_t drop = nl ? (size_t)(nl - in->b) + 1 : in->len;
            memmove(in->b, in->b + drop, in->len - drop);
            in->len -= drop;
            if (!nl)
                return 0;
            in->skipping = false;
            continue;
        }
        size_t n = nl ? (size_t)(nl - in->b) : in->len;
        if (n + 1 > RM_PODLINE_MAX) {
            in->skipping = true;
            return rm_err_field(err, RM_ETOOBIG, "line", "is over the cap of %d bytes: dropped",
                                RM_PODLINE_MAX);
        }
        if (!nl)
            return 0; /* a line under the cap always fits: wait for its end */
        memcpy(line, in->b, n);
        line[n] = 0;
        memmove(in->b, nl + 1, in->len - n - 1);
        in->len -= n + 1;
        return 1;
    }
}

int rm_podline_queue(rm_podline_out *o, const rm_podline *l)
{
    char line[RM_PODLINE_MAX];
    int n = rm_podline_format(l, line, sizeof line);
    if (n < 0)
        return n;
    if (o->off > 0 && o->len + (size_t)n > o->cap) { /* what was written makes room first */
        memmove(o->b, o->b + o->off, o->len - o->off);
        o->len -= o->off;
        o->off = 0;
    }
    if (o->len + (size_t)n > RM_PODLINE_OUT_MAX)
        return RM_ETOOBIG;
    if (o->len + (size_t)n > o->cap) {
        size_t nc = o->cap ? o->cap : 16384;
        while (nc < o->len + (size_t)n)
            nc *= 2;
        char *nb = realloc(o->b, nc);
        if (!nb)
            return RM_ENOMEM;
        o->b = nb;
        o->cap = nc;
    }
    memcpy(o->b + o->len, line, (size_t)n);
    o->len += (size_t)n;
    return RM_OK;
}

int rm_podline_flush(rm_podline_out *o, int fd, rm_err *err)
{
    while (o->off < o->len) {
        ssize_t n = write(fd, o->b + o->off, o->len - o->off);
        if (n > 0) {
            o->off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return RM_OK;
        int e = n < 0 ? errno : EPIPE;
        size_t lost = o->len - o->off;
        o->len = o->off = 0;
        return rm_errf(err, RM_EIO, "writing %zu bytes of lines: %s", lost, strerror(e));
    }
    o->len = o->off = 0;
    return RM_OK;
}

bool rm_podline_pending(const rm_podline_out *o)
{
    return o->off < o->len;
}

void rm_podline_out_free(rm_podline_out *o)
{
    if (!o)
        return;
    free(o->b);
    memset(o, 0, sizeof *o);
}
