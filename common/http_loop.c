/* http_loop.c — the event-loop HTTP/1.1 server behind rm_http_opts.event_loop (http.h, http_impl.h).
 *
 * Why its own and not libmicrohttpd's epoll mode: the rendezvous holds one keep-alive connection per
 * worker (16,384 for the largest job), and what a server keeps per idle connection is most of the
 * rendezvous' memory per worker (docs/scale.md "Memory per worker": libmicrohttpd's connection record
 * and its memory pool were most of the 8.9 KiB a worker cost, and its 0.9.75 epoll loop stalled for
 * the connection timeout after a burst of exactly 128 events). Here an idle connection is one record
 * (struct lconn, ~200 bytes) and its address's (shared by the address's connections) and nothing else:
 * a request is read into the loop's one scratch buffer and answered from there; only a request split
 * over reads keeps its bytes (exactly those) until it is whole, and only a reply the socket would not
 * take at once keeps its unsent part.
 *
 * Design: one thread, level-triggered epoll over the listener, an eventfd (answers from other threads,
 * stop) and every connection. A connection is unserved (waiting for a request's headers or body, or
 * idle between keep-alive requests) or served (its handler parked it, or its reply is being written).
 * Unserved connections sit in a list, oldest first, and in their address's list, so the slow-client
 * defence of http.h costs O(1) per accept: on accept the oldest unserved connection of the address
 * (or of the server) is cut when the caps are reached; every 200 ms the header and body deadlines and
 * the keep-alive idle timeout are checked over the unserved list. Served connections are never cut
 * (a parked long poll whose client hangs up is closed, and its owner's answer dropped).
 *
 * Parking: a handler's rm_http_park marks the connection; rm_http_unpark (any thread) builds the reply
 * there, hands it to the loop under pmu on a ready list and wakes the loop, which writes it. A
 * connection closed while parked and unanswered is freed by the rm_http_unpark that answers it; one
 * closed with its answer on the ready list is freed by the loop when it takes the answer; any other
 * closed connection is freed at the end of the loop's pass (never while an event may name it).
 *
 * HTTP/1.1 as the project's clients speak it: Content-Length bodies (a chunked request body gets 411),
 * Expect: 100-continue, keep-alive and pipelining (one request served at a time, in order), HEAD,
 * Connection: close and HTTP/1.0 (closed after the reply). Caps: request line and headers
 * RM_HTTP_LOOP_HEAD_MAX (431 beyond), 64 headers, 32 query parameters; the body max_body (413, the
 * rest of the body read and dropped so the reply reaches the client). Bad requests get 400 and a close.
 * Streams are not served (500): they would block the one thread. */
#include "common/clock.h"
#include "common/http_impl.h"
#include "common/log.h"
#include "common/ratelimit.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define RM_HTTP_LOOP_HEAD_MAX (8u * 1024u) /* request line and headers */
#define LOOP_SCRATCH (64u * 1024u)         /* one read */
#define LOOP_MAX_HEADERS 64
#define LOOP_MAX_QUERY 32
#define LOOP_SWEEP_S 0.2
#define LOOP_EVENTS 256
#define LOOP_STOP_WAIT_S 10.0
#define LOOP_DRAIN_MAX \
    (64ull << 20) /* a refused body longer than this is not drained: the connection closes */

enum { PH_HEAD = 0, PH_BODY, PH_SERVED };
enum { PARK_NONE = 0, PARK_ASKED, PARK_SUSPENDED };

typedef struct ipent ipent;
typedef struct lconn lconn;

/* A reply on its way out: the status line and headers, the shared body, the owned tail. */
typedef struct lout {
    struct iovec iov[3];
    int niov;
    char *head;
    char *tail;
    void (*release)(void *ud);
    void *release_ud;
    bool close; /* close the connection once written */
} lout;

/* One client address with connections (v4 as v4-mapped v6): its unserved ones, oldest first. */
struct ipent {
    ipent *next; /* hash chain */
    lconn *old, *young;
    unsigned npend, nconn;
    uint8_t addr[16];
};

struct lconn {
    rm_http_server *srv; /* first (http_impl.h) */
    rm_http_loop *loop;
    lconn *prev, *next;   /* the unserved list, oldest first (pending); the dead list once closed */
    lconn *iprev, *inext; /* its address's unserved list */
    lconn *aprev, *anext; /* every open connection */
    lconn *rnext;         /* the ready list (pmu) */
    ipent *ip;
    char *in; /* the part of a request split over reads (NULL between requests) */
    size_t inlen;
    lout *out;        /* a reply the socket has not taken whole yet */
    lout *answer;     /* parked and answered, not taken by the loop yet (pmu) */
    uint64_t discard; /* body bytes to read and drop (after an early reply) */
    double since;     /* monotonic: accept, headers complete, or the last reply */
    int fd;
    unsigned served;  /* requests answered on it */
    uint8_t phase;    /* PH_* */
    uint8_t park;     /* PARK_* (pmu) */
    bool pending;     /* in the unserved lists */
    bool head_only;   /* the request being served is a HEAD */
    bool close_after; /* Connection: close or HTTP/1.0 */
    bool continued;   /* 100 Continue sent for the request being read */
    bool closed;      /* its socket is closed; the record lives until its owner is done */
    bool gone;        /* closed while parked and unanswered: rm_http_unpark frees it (pmu) */
    bool queued;      /* on the ready list (pmu) */
    bool answered;    /* rm_http_unpark gave its answer (c->answer; NULL if none could be built) (pmu) */
};

struct rm_http_loop {
    rm_http_server *srv;
    rm_http_conf conf;
    const rm_http_route *routes;
    size_t nroutes;
    int port;
    int lfd, ep, efd;
    pthread_t th;
    atomic_bool closing; /* stop accepting */
    atomic_bool quit;    /* leave the loop */
    atomic_int inflight; /* parked requests whose answer has not been taken by the loop */
    atomic_int nout;     /* replies partly written */
    atomic_ulong ncut;
    /* the loop thread's */
    lconn *pold, *pyoung; /* unserved, oldest first */
    unsigned npend, nconn;
    lconn *all;
    lconn *dead;
    ipent **buckets;
    size_t nbuckets, nips;
    double last_sweep, listen_off_until;
    bool listen_off;
    /* parking */
    pthread_mutex_t pmu;
    lconn *ready, *ready_tail;
    char scratch[LOOP_SCRATCH + 1];
};

/* The request view a handler's rm_http_req.impl points at (on the loop's stack). */
typedef struct lview {
    rm_http_server *srv; /* first (http_impl.h) */
    lconn *c;
    int nh, nq;
    const char *hn[LOOP_MAX_HEADERS], *hv[LOOP_MAX_HEADERS];
    const char *qk[LOOP_MAX_QUERY], *qv[LOOP_MAX_QUERY];
} lview;

static rm_ratelimit g_loop_rl = RM_RATELIMIT_INIT(5, 10.0);

static void loop_log(const char *what, int port)
{
    unsigned long sup = 0;
    if (rm_ratelimit_take(&g_loop_rl, rm_mono(), &sup))
        rm_warn("http: %s port=%d suppressed=%lu", what, port, sup);
}

static void wake(rm_http_loop *l)
{
    uint64_t one = 1;
    ssize_t w = write(l->efd, &one, sizeof one);
    (void)w; /* a full counter wakes the loop just as well */
}

/* ---- addresses and the unserved lists --------------------------------------------------------- */

static size_t ip_hash(const uint8_t a[16], size_t nb)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 16; i++)
        h = (h ^ a[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29)) & (nb - 1);
}

static void ip_grow(rm_http_loop *l)
{
    size_t nb = l->nbuckets * 2;
    ipent **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < l->nbuckets; i++)
        for (ipent *e = l->buckets[i], *nx; e; e = nx) {
            nx = e->next;
            size_t h = ip_hash(e->addr, nb);
            e->next = b[h];
            b[h] = e;
        }
    free(l->buckets);
    l->buckets = b;
    l->nbuckets = nb;
}

static ipent *ip_get(rm_http_loop *l, const uint8_t a[16])
{
    size_t h = ip_hash(a, l->nbuckets);
    for (ipent *e = l->buckets[h]; e; e = e->next)
        if (memcmp(e->addr, a, 16) == 0) {
            e->nconn++;
            return e;
        }
    ipent *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    memcpy(e->addr, a, 16);
    e->nconn = 1;
    e->next = l->buckets[h];
    l->buckets[h] = e;
    if (++l->nips > 2 * l->nbuckets)
        ip_grow(l);
    return e;
}

static void ip_put(rm_http_loop *l, ipent *e)
{
    if (--e->nconn)
        return;
    ipent **pp = &l->buckets[ip_hash(e->addr, l->nbuckets)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    l->nips--;
    free(e);
}

static void ip_text(const ipent *e, char *buf, size_t cap)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(e->addr, mapped, 12) == 0)
        inet_ntop(AF_INET, e->addr + 12, buf, (socklen_t)cap);
    else
        inet_ntop(AF_INET6, e->addr, buf, (socklen_t)cap);
}

static void pend_enter(rm_http_loop *l, lconn *c)
{
    if (c->pending)
        return;
    c->pending = true;
    c->next = NULL;
    c->prev = l->pyoung;
    if (l->pyoung)
        l->pyoung->next = c;
    else
        l->pold = c;
    l->pyoung = c;
    l->npend++;
    ipent *e = c->ip;
    c->inext = NULL;
    c->iprev = e->young;
    if (e->young)
        e->young->inext = c;
    else
        e->old = c;
    e->young = c;
    e->npend++;
}

static void pend_leave(rm_http_loop *l, lconn *c)
{
    if (!c->pending)
        return;
    c->pending = false;
    if (c->prev)
        c->prev->next = c->next;
    else
        l->pold = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->pyoung = c->prev;
    l->npend--;
    ipent *e = c->ip;
    if (c->iprev)
        c->iprev->inext = c->inext;
    else
        e->old = c->inext;
    if (c->inext)
        c->inext->iprev = c->iprev;
    else
        e->young = c->iprev;
    e->npend--;
    c->prev = c->next = c->iprev = c->inext = NULL;
}

/* ---- replies ---------------------------------------------------------------------------------- */

static void out_free(lout *o)
{
    if (!o)
        return;
    if (o->release)
        o->release(o->release_ud);
    free(o->tail);
    free(o->head);
    free(o);
}

static const char *reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return status < 300   ? "OK"
               : status < 400 ? "Redirect"
               : status < 500 ? "Client Error"
                              : "Server Error";
    }
}

/* The wire form of resp (its body and shared part move into it; resp is left empty); NULL when out
 * of memory (resp's parts released). */
static lout *out_build(rm_http_resp *resp, bool head_only, bool close)
{
    int status = resp->status >= 100 && resp->status <= 999 ? resp->status : 200;
    size_t tl = resp->body ? (resp->body_len ? resp->body_len : strlen(resp->body)) : 0;
    size_t sl = resp->shared ? resp->shared_len : 0;
    bool bodyless = status < 200 || status == 204 || status == 304;
    const char *ct = resp->content_type ? resp->content_type : "application/json";
    size_t cap = 160 + strlen(ct);
    for (int i = 0; i < resp->nheaders && i < RM_HTTP_MAX_HEADERS; i++)
        cap += strlen(resp->headers[i].name) + strlen(resp->headers[i].value) + 4;
    lout *o = calloc(1, sizeof *o);
    char *h = malloc(cap);
    if (!o || !h) {
        free(o);
        free(h);
        rm_http__resp_drop(resp);
        return NULL;
    }
    int n = snprintf(h, cap, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n", status, reason(status), ct);
    if (!bodyless)
        n += snprintf(h + n, cap - (size_t)n, "Content-Length: %zu\r\n", sl + tl);
    for (int i = 0; i < resp->nheaders && i < RM_HTTP_MAX_HEADERS; i++)
        n += snprintf(h + n, cap - (size_t)n, "%s: %s\r\n", resp->headers[i].name, resp->headers[i].value);
    n += snprintf(h + n, cap - (size_t)n, "%s\r\n", close ? "Connection: close\r\n" : "");
    o->head = h;
    o->iov[o->niov++] = (struct iovec){h, (size_t)n};
    o->tail = resp->body;
    o->release = resp->release;
    o->release_ud = resp->release_ud;
    o->close = close;
    if (!head_only && !bodyless) {
        if (sl)
            o->iov[o->niov++] = (struct iovec){(void *)resp->shared, sl};
        if (tl)
            o->iov[o->niov++] = (struct iovec){resp->body, tl};
    }
    memset(resp, 0, sizeof *resp);
    return o;
}

/* An error reply of our own ({"error":...,"code":N}), with an Allow header for a 405. */
static lout *out_error(int status, const char *msg, const char *allow, bool head_only, bool close)
{
    rm_http_resp r = {
        .status = status, .content_type = "application/json", .body = rm_http__error_body(status, msg)};
    if (allow)
        rm_http_add_header(&r, "Allow", allow);
    return out_build(&r, head_only, close);
}

/* ---- connections ------------------------------------------------------------------------------ */

static void set_events(rm_http_loop *l, lconn *c, uint32_t ev)
{
    struct epoll_event e = {.events = ev, .data.ptr = c};
    (void)epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &e);
}

/* Close c's socket and take it out of every list of the loop's; the record is freed later (see the
 * file comment). Loop thread. */
static void conn_close(rm_http_loop *l, lconn *c)
{
    if (c->closed)
        return;
    c->closed = true;
    (void)epoll_ctl(l->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    pend_leave(l, c);
    if (c->aprev)
        c->aprev->anext = c->anext;
    else
        l->all = c->anext;
    if (c->anext)
        c->anext->aprev = c->aprev;
    c->aprev = c->anext = NULL;
    ip_put(l, c->ip);
    c->ip = NULL;
    l->nconn--;
    if (c->out) {
        out_free(c->out);
        c->out = NULL;
        atomic_fetch_sub(&l->nout, 1);
    }
    free(c->in);
    c->in = NULL;
    c->inlen = 0;
    if (l->listen_off && !atomic_load(&l->closing) && l->lfd >= 0) { /* a place is free again */
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = &l->lfd};
        (void)epoll_ctl(l->ep, EPOLL_CTL_MOD, l->lfd, &e);
        l->listen_off = false;
    }
    pthread_mutex_lock(&l->pmu);
    bool owned_elsewhere = false;
    if (c->park != PARK_NONE) {
        owned_elsewhere = true;
        if (!c->answered)
            c->gone = true; /* its rm_http_unpark frees it */
        /* else answered and queued: the loop frees it when it takes the answer */
    }
    pthread_mutex_unlock(&l->pmu);
    if (!owned_elsewhere) {
        c->next = l->dead;
        l->dead = c;
    }
}

static void conn_cut(rm_http_loop *l, lconn *c, const char *why)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (c->ip)
        ip_text(c->ip, ip, sizeof ip);
    atomic_fetch_add(&l->ncut, 1);
    rm_http__log_cut(ip, l->port, why);
    conn_close(l, c);
}

static void conn_process(rm_http_loop *l, lconn *c);

/* A reply written whole: the connection waits for its next request (or closes), and a request that
 * came in behind the answered one is served when resume is set (otherwise the caller's loop does). */
static void reply_done(rm_http_loop *l, lconn *c, bool close, bool resume)
{
    c->served++;
    if (close || c->close_after) {
        conn_close(l, c);
        return;
    }
    c->phase = PH_HEAD;
    c->head_only = false;
    c->continued = false;
    c->since = rm_mono();
    pend_enter(l, c);
    set_events(l, c, EPOLLIN | EPOLLRDHUP);
    if (resume && c->in && !c->discard)
        conn_process(l, c);
}

/* Write what the socket takes of c->out; true when it is all written (or the connection closed). */
static bool conn_flush(rm_http_loop *l, lconn *c, bool resume)
{
    lout *o = c->out;
    while (o->niov > 0) {
        struct msghdr m = {.msg_iov = o->iov, .msg_iovlen = (size_t)o->niov};
        ssize_t n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                set_events(l, c, EPOLLOUT);
                return false;
            }
            conn_close(l, c); /* the client is gone */
            return true;
        }
        size_t k = (size_t)n;
        int i = 0;
        while (i < o->niov && k >= o->iov[i].iov_len)
            k -= o->iov[i++].iov_len;
        memmove(o->iov, o->iov + i, (size_t)(o->niov - i) * sizeof o->iov[0]);
        o->niov -= i;
        if (o->niov > 0) {
            o->iov[0].iov_base = (char *)o->iov[0].iov_base + k;
            o->iov[0].iov_len -= k;
        }
    }
    bool close = o->close;
    c->out = NULL;
    atomic_fetch_sub(&l->nout, 1);
    out_free(o);
    reply_done(l, c, close, resume);
    return true;
}

/* Send o (consumed) as the answer to c's request; NULL: it could not be built, the connection closes. */
static void conn_send(rm_http_loop *l, lconn *c, lout *o, bool resume)
{
    if (!o) {
        conn_close(l, c);
        return;
    }
    c->phase = PH_SERVED;
    pend_leave(l, c);
    c->out = o;
    atomic_fetch_add(&l->nout, 1);
    (void)conn_flush(l, c, resume);
}

/* ---- requests --------------------------------------------------------------------------------- */

static int hexval(int ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* Percent-decode [s, s+n) into out (NUL-terminated; at most n + 1 bytes), '+' as a space when plus is
 * set; -1 on a %00 or a bad escape. */
static int unescape(const char *s, size_t n, char *out, bool plus)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            int hi = i + 2 < n ? hexval((unsigned char)s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return -1;
            out[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[o++] = plus && s[i] == '+' ? ' ' : s[i];
        }
    }
    out[o] = 0;
    return 0;
}

static bool is_tchar(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Does the comma-separated header value v hold the token t (case-insensitive)? */
static bool has_token(const char *v, const char *t)
{
    size_t tl = strlen(t);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        const char *e = v;
        while (*e && *e != ',')
            e++;
        const char *te = e;
        while (te > v && (te[-1] == ' ' || te[-1] == '\t'))
            te--;
        if ((size_t)(te - v) == tl && strncasecmp(v, t, tl) == 0)
            return true;
        v = e;
    }
    return false;
}

/* An early reply to a request whose body has not been read (404, 405, 413, or a refusal): the body
 * still to come (of clen, have already here) is read and dropped, or the connection closes after the
 * reply when it is too long to drain. Returns the bytes consumed from the buffer. */
static size_t early_reply(rm_http_loop *l, lconn *c, size_t hend, size_t have, uint64_t clen, lout *o)
{
    size_t used = hend;
    uint64_t in_buf = have - hend < clen ? have - hend : clen;
    used += (size_t)in_buf;
    uint64_t rest = clen - in_buf;
    if (rest > LOOP_DRAIN_MAX) {
        c->close_after = true;
        if (o)
            o->close = true;
    } else {
        c->discard = rest;
    }
    conn_send(l, c, o, false);
    return used;
}

/* Serve the request at the start of buf[0, len) (buf has room for a NUL at buf[len]). Returns the
 * bytes it took (0: not all here yet; the caller keeps them). The connection may be closed, served
 * (parked or writing) or ready for the next request when it returns. */
static size_t serve_one(rm_http_loop *l, lconn *c, char *buf, size_t len)
{
    size_t skip = 0;
    while (skip < len && (buf[skip] == '\r' || buf[skip] == '\n'))
        skip++; /* stray line ends between requests (RFC 9112 2.2) */
    if (skip == len)
        return skip;
    /* the end of the headers: an empty line */
    size_t hend = 0, scan = len - skip < RM_HTTP_LOOP_HEAD_MAX ? len : skip + RM_HTTP_LOOP_HEAD_MAX;
    for (size_t i = skip; i < scan && !hend; i++)
        if (buf[i] == '\n') {
            if (i + 1 < len && buf[i + 1] == '\n')
                hend = i + 2;
            else if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
                hend = i + 3;
        }
    if (!hend) {
        if (len - skip >= RM_HTTP_LOOP_HEAD_MAX) {
            conn_send(l, c, out_error(431, "request line and headers too large", NULL, false, true), false);
            return len;
        }
        return 0; /* the header deadline (or the idle timeout) runs on */
    }
    /* parse a copy of the header block (the buffer stays as it came until the body is here) */
    char hb[RM_HTTP_LOOP_HEAD_MAX + 4];
    size_t hl = hend - skip;
    if (memchr(buf + skip, 0, hl)) { /* the parse below walks NUL-terminated lines */
        conn_send(l, c, out_error(400, "a NUL byte in the request line or headers", NULL, false, true),
                  false);
        return len;
    }
    memcpy(hb, buf + skip, hl);
    hb[hl] = 0;
    lview v = {.srv = l->srv, .c = c};
    char *line = hb, *eol = strchr(line, '\n');
    *eol = 0;
    if (eol > line && eol[-1] == '\r')
        eol[-1] = 0;
    char *method = line, *sp1 = strchr(line, ' ');
    char *target = sp1 ? sp1 + 1 : NULL, *sp2 = target ? strchr(target, ' ') : NULL;
    const char *bad = NULL;
    int bad_status = 400;
    if (!sp1 || !sp2 || sp1 == method)
        bad = "malformed request line";
    else {
        *sp1 = 0;
        *sp2 = 0;
        for (char *p = method; *p && !bad; p++)
            if (!is_tchar((unsigned char)*p))
                bad = "malformed method";
        if (!bad && target[0] != '/')
            bad = "the request target must be an absolute path";
        for (char *p = target; *p && !bad; p++)
            if ((unsigned char)*p <= ' ' || *p == 0x7f)
                bad = "malformed request target";
        if (!bad && strcmp(sp2 + 1, "HTTP/1.1") != 0 && strcmp(sp2 + 1, "HTTP/1.0") != 0) {
            bad = "only HTTP/1.1 and HTTP/1.0 are served";
            bad_status = strncmp(sp2 + 1, "HTTP/", 5) == 0 ? 505 : 400;
        }
    }
    bool http10 = !bad && strcmp(sp2 + 1, "HTTP/1.0") == 0;
    uint64_t clen = 0;
    bool have_clen = false, chunked = false, expect = false, close = http10;
    for (line = eol + 1; !bad && *line && *line != '\r' && *line != '\n'; line = eol + 1) {
        eol = strchr(line, '\n');
        *eol = 0;
        if (eol > line && eol[-1] == '\r')
            eol[-1] = 0;
        if (line[0] == ' ' || line[0] == '\t') {
            bad = "folded header lines are not accepted";
            break;
        }
        char *colon = strchr(line, ':');
        if (!colon || colon == line) {
            bad = "malformed header line";
            break;
        }
        *colon = 0;
        for (char *p = line; *p && !bad; p++)
            if (!is_tchar((unsigned char)*p))
                bad = "malformed header name";
        char *val = colon + 1;
        while (*val == ' ' || *val == '\t')
            val++;
        char *ve = val + strlen(val);
        while (ve > val && (ve[-1] == ' ' || ve[-1] == '\t'))
            *--ve = 0;
        if (bad)
            break;
        if (v.nh == LOOP_MAX_HEADERS) {
            bad = "too many header lines";
            bad_status = 431;
            break;
        }
        v.hn[v.nh] = line;
        v.hv[v.nh++] = val;
        if (strcasecmp(line, "Content-Length") == 0) {
            uint64_t n = 0;
            const char *p = val;
            if (!*p)
                bad = "malformed Content-Length";
            for (; *p && !bad; p++) {
                if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10)
                    bad = "malformed Content-Length";
                else
                    n = n * 10 + (uint64_t)(*p - '0');
            }
            if (!bad && have_clen && n != clen)
                bad = "conflicting Content-Length headers";
            clen = n;
            have_clen = true;
        } else if (strcasecmp(line, "Transfer-Encoding") == 0) {
            chunked = true;
        } else if (strcasecmp(line, "Connection") == 0) {
            if (has_token(val, "close")) /* HTTP/1.0 closes anyway: its keep-alive is not offered */
                close = true;
        } else if (strcasecmp(line, "Expect") == 0) {
            expect = strcasecmp(val, "100-continue") == 0;
        }
    }
    c->close_after = close;
    c->head_only = !bad && strcmp(method, "HEAD") == 0;
    if (bad) {
        conn_send(l, c, out_error(bad_status, bad, NULL, false, true), false);
        return len;
    }
    if (chunked) {
        conn_send(l, c,
                  out_error(411, "chunked request bodies are not accepted: send Content-Length", NULL,
                            c->head_only, true),
                  false);
        return len;
    }
    /* the route and the body's size are decided from the headers, before the body is read */
    char *q = strchr(target, '?');
    size_t plen = q ? (size_t)(q - target) : strlen(target);
    char tb[RM_HTTP_LOOP_HEAD_MAX + 4];
    if (unescape(target, plen, tb, false) < 0) {
        conn_send(l, c, out_error(400, "malformed escape in the request path", NULL, c->head_only, true),
                  false);
        return len;
    }
    const char *path = tb;
    char *qb = tb + plen + 1;
    for (char *p = q ? q + 1 : NULL; p && *p && v.nq < LOOP_MAX_QUERY;) {
        char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        char *eq = memchr(p, '=', n);
        size_t kn = eq ? (size_t)(eq - p) : n;
        if (kn) {
            const char *key = qb;
            if (unescape(p, kn, qb, true) < 0)
                break;
            qb += strlen(qb) + 1;
            const char *val = qb;
            if (unescape(eq ? eq + 1 : "", eq ? n - kn - 1 : 0, qb, true) < 0)
                break;
            qb += strlen(qb) + 1;
            v.qk[v.nq] = key;
            v.qv[v.nq++] = val;
        }
        p = amp ? amp + 1 : NULL;
    }
    const rm_http_route *rt = NULL;
    char allow[128];
    int st = rm_http__find_route(l->routes, l->nroutes, method, path, &rt, allow, sizeof allow);
    if (st == 404)
        return early_reply(l, c, hend, len, clen, out_error(404, "not found", NULL, c->head_only, false));
    if (st == 405)
        return early_reply(
            l, c, hend, len, clen,
            out_error(405, "method not allowed", allow[0] ? allow : NULL, c->head_only, false));
    if (clen > l->conf.max_body)
        return early_reply(l, c, hend, len, clen,
                           out_error(413, "request body too large", NULL, c->head_only, false));
    if ((uint64_t)(len - hend) < clen) { /* the body is still coming */
        if (c->phase == PH_HEAD) {
            c->phase = PH_BODY;
            c->since = rm_mono();
        }
        if (expect && !c->continued) {
            static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
            ssize_t w = send(c->fd, cont, sizeof cont - 1, MSG_NOSIGNAL);
            (void)w; /* a client that cannot take 25 bytes sends its body anyway after its wait */
            c->continued = true;
        }
        return 0;
    }
    /* whole: serve it */
    char *body = buf + hend;
    char saved = body[clen];
    body[clen] = 0;
    char ip[INET6_ADDRSTRLEN] = "";
    ip_text(c->ip, ip, sizeof ip);
    c->phase = PH_SERVED;
    pend_leave(l, c);
    rm_http_req req = {
        .method = method, .path = path, .body = body, .body_len = (size_t)clen, .remote_ip = ip, .impl = &v};
    rm_http_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.status = 200;
    resp.content_type = "application/json";
    int rc = rt->fn(&req, &resp, rt->ud);
    body[clen] = saved;
    size_t used = hend + (size_t)clen;
    pthread_mutex_lock(&l->pmu);
    int park = c->park;
    pthread_mutex_unlock(&l->pmu);
    if (rc >= 0 && park != PARK_NONE) {
        rm_http__resp_drop(&resp);
        if (resp.stream.free)
            resp.stream.free(resp.stream.ud);
        pthread_mutex_lock(&l->pmu);
        bool answered = c->answered;
        lout *o = c->answer;
        c->answer = NULL;
        c->answered = false;
        c->park = answered ? PARK_NONE : PARK_SUSPENDED;
        pthread_mutex_unlock(&l->pmu);
        if (answered) { /* answered before its handler returned */
            atomic_fetch_sub(&l->inflight, 1);
            conn_send(l, c, o, false);
        } else {
            set_events(l, c, EPOLLRDHUP); /* waits; a client that hangs up is noticed */
        }
        return used;
    }
    if (rc >= 0 && resp.stream.read) {
        if (resp.stream.free)
            resp.stream.free(resp.stream.ud);
        rm_http__resp_drop(&resp);
        conn_send(l, c,
                  out_error(500, "streams are not served by an event-loop server", NULL, c->head_only, false),
                  false);
        return used;
    }
    if (rc < 0) {
        if (resp.stream.free)
            resp.stream.free(resp.stream.ud);
        rm_http__resp_drop(&resp);
        conn_send(l, c, out_error(500, rm_strerror(rc), NULL, c->head_only, false), false);
        return used;
    }
    conn_send(l, c, out_build(&resp, c->head_only, c->close_after), false);
    return used;
}

/* Serve the requests in buf[0, len) (room for a NUL at buf[len]; owned: a heap block that becomes
 * c->in or is freed; else the loop's scratch), one after another while the connection waits for
 * input. What is left (a request not all here) is kept in c->in, exactly its bytes. */
static void conn_feed(rm_http_loop *l, lconn *c, char *buf, size_t len, bool owned)
{
    size_t off = 0;
    while (!c->closed && c->phase != PH_SERVED && off < len) {
        if (c->discard) {
            uint64_t k = c->discard < len - off ? c->discard : len - off;
            off += (size_t)k;
            c->discard -= k;
            continue;
        }
        size_t used = serve_one(l, c, buf + off, len - off);
        if (!used)
            break;
        off += used;
    }
    size_t rest = c->closed ? 0 : len - off;
    if (!rest) {
        if (owned)
            free(buf);
        return;
    }
    char *keep = owned ? buf : malloc(rest + 1);
    if (!keep) {
        conn_close(l, c);
        return;
    }
    memmove(keep, buf + off, rest);
    char *nb = realloc(keep, rest + 1);
    c->in = nb ? nb : keep;
    c->inlen = rest;
}

/* Serve what c->in holds (a reply was written: the requests that came in behind it). */
static void conn_process(rm_http_loop *l, lconn *c)
{
    char *buf = c->in;
    size_t len = c->inlen;
    c->in = NULL; /* the feed's now: a close (which frees c->in) must not free it under the feed */
    c->inlen = 0;
    conn_feed(l, c, buf, len, true);
}

/* Readable: one read into the scratch buffer, served from there; appended to what c holds already
 * when a request was split over reads. */
static void conn_read(rm_http_loop *l, lconn *c)
{
    ssize_t n;
    do
        n = read(c->fd, l->scratch, LOOP_SCRATCH);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) { /* the client closed (or reset) */
        conn_close(l, c);
        return;
    }
    size_t k = (size_t)n;
    char *data = l->scratch;
    if (c->discard) {
        uint64_t d = c->discard < k ? c->discard : k;
        c->discard -= d;
        data += d;
        k -= (size_t)d;
        if (!k)
            return;
    }
    if (!c->in) {
        conn_feed(l, c, data, k, false);
        return;
    }
    /* a request split over reads is kept, capped at the headers' and the body's limits */
    size_t cap = RM_HTTP_LOOP_HEAD_MAX + (l->conf.max_body > SIZE_MAX / 2 ? SIZE_MAX / 2 : l->conf.max_body);
    if (c->inlen + k > cap + LOOP_SCRATCH) {
        conn_send(l, c, out_error(413, "request too large", NULL, false, true), false);
        return;
    }
    char *nb = realloc(c->in, c->inlen + k + 1);
    if (!nb) {
        conn_close(l, c);
        return;
    }
    memcpy(nb + c->inlen, data, k);
    c->in = nb;
    c->inlen += k;
    conn_process(l, c);
}

static void conn_accept(rm_http_loop *l)
{
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(l->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* out of descriptors: stop accepting for a sweep rather than spin on the listener */
                loop_log("out of file descriptors; not accepting for 200 ms", l->port);
                struct epoll_event e = {.events = 0, .data.ptr = &l->lfd};
                (void)epoll_ctl(l->ep, EPOLL_CTL_MOD, l->lfd, &e);
                l->listen_off = true;
                l->listen_off_until = rm_mono() + LOOP_SWEEP_S;
            }
            return; /* EAGAIN, or the client gave up already */
        }
        if (l->nconn >= l->conf.max_conns) {
            loop_log("connection limit reached; closing an inbound connection", l->port);
            close(fd);
            continue;
        }
        uint8_t a[16] = {0};
        if (ss.ss_family == AF_INET) {
            a[10] = a[11] = 0xff;
            memcpy(a + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
        } else if (ss.ss_family == AF_INET6) {
            memcpy(a, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
        }
        lconn *c = calloc(1, sizeof *c);
        ipent *ip = c ? ip_get(l, a) : NULL;
        if (!ip) {
            free(c);
            close(fd);
            loop_log("out of memory; closing an inbound connection", l->port);
            continue;
        }
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->srv = l->srv;
        c->loop = l;
        c->fd = fd;
        c->ip = ip;
        c->since = rm_mono();
        struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &e) != 0) {
            ip_put(l, ip);
            free(c);
            close(fd);
            continue;
        }
        l->nconn++;
        c->anext = l->all;
        if (l->all)
            l->all->aprev = c;
        l->all = c;
        /* make room: the oldest unserved connection of this address, else of the server */
        if (ip->old && ip->npend >= l->conf.max_pending_per_ip)
            conn_cut(l, ip->old, "too many unfinished requests from this address");
        else if (l->pold && l->npend >= l->conf.max_pending)
            conn_cut(l, l->pold, "too many unfinished requests");
        pend_enter(l, c);
    }
}

/* Answers rm_http_unpark handed over: write them (or drop them: a connection closed since, or send
 * false at stop). */
static void take_ready(rm_http_loop *l, bool send)
{
    pthread_mutex_lock(&l->pmu);
    lconn *list = l->ready;
    l->ready = l->ready_tail = NULL;
    for (lconn *c = list; c; c = c->rnext)
        c->queued = false;
    pthread_mutex_unlock(&l->pmu);
    while (list) {
        lconn *c = list;
        list = c->rnext;
        c->rnext = NULL;
        pthread_mutex_lock(&l->pmu);
        lout *o = c->answer;
        c->answer = NULL;
        c->answered = false;
        c->park = PARK_NONE;
        pthread_mutex_unlock(&l->pmu);
        atomic_fetch_sub(&l->inflight, 1);
        if (c->closed) { /* closed after its answer came: nobody else holds it */
            out_free(o);
            free(c);
        } else if (send) {
            conn_send(l, c, o, true);
        } else {
            out_free(o);
        }
    }
}

static void sweep(rm_http_loop *l, double now)
{
    l->last_sweep = now;
    if (l->listen_off && !atomic_load(&l->closing) && now >= l->listen_off_until &&
        l->nconn < l->conf.max_conns) {
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = &l->lfd};
        (void)epoll_ctl(l->ep, EPOLL_CTL_MOD, l->lfd, &e);
        l->listen_off = false;
    }
    for (lconn *c = l->pold, *nx; c; c = nx) {
        nx = c->next;
        if (c->phase == PH_HEAD && c->served == 0 && now - c->since > l->conf.header_timeout_s)
            conn_cut(l, c, "request headers not complete in time");
        else if (c->phase == PH_BODY && now - c->since > l->conf.body_timeout_s)
            conn_cut(l, c, "request body not complete in time");
        else if (c->phase == PH_HEAD && c->served > 0 && now - c->since > l->conf.idle_timeout_s)
            conn_cut(l, c, "keep-alive connection idle or trickling too long");
    }
}

static void *loop_main(void *arg)
{
    rm_http_loop *l = arg;
    struct epoll_event ev[LOOP_EVENTS];
    while (!atomic_load(&l->quit)) {
        int n = epoll_wait(l->ep, ev, LOOP_EVENTS, (int)(LOOP_SWEEP_S * 1000));
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &l->lfd) {
                if (!atomic_load(&l->closing))
                    conn_accept(l);
                continue;
            }
            if (p == &l->efd) {
                uint64_t k;
                ssize_t r = read(l->efd, &k, sizeof k);
                (void)r;
                if (atomic_load(&l->closing) && l->lfd >= 0) { /* stop accepting */
                    (void)epoll_ctl(l->ep, EPOLL_CTL_DEL, l->lfd, NULL);
                    close(l->lfd);
                    l->lfd = -1;
                }
                take_ready(l, true);
                continue;
            }
            lconn *c = p;
            uint32_t e = ev[i].events;
            if (c->closed)
                continue;
            if (c->out) {
                if (e & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                    (void)conn_flush(l, c, true);
            } else if (c->phase == PH_SERVED) { /* parked: only a hang-up is of interest */
                if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                    conn_close(l, c);
            } else if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                conn_read(l, c);
            }
        }
        double now = rm_mono();
        if (now - l->last_sweep >= LOOP_SWEEP_S)
            sweep(l, now);
        while (l->dead) {
            lconn *c = l->dead;
            l->dead = c->next;
            free(c);
        }
    }
    return NULL;
}

/* ---- the API ---------------------------------------------------------------------------------- */

int rm_http_loop_start(rm_http_server *srv, const rm_http_conf *conf, const rm_http_route *routes,
                       size_t nroutes, int listen_fd, int port, rm_http_loop **out, rm_err *err)
{
    *out = NULL;
    rm_http_loop *l = calloc(1, sizeof *l);
    if (!l)
        return rm_errf(err, RM_ENOMEM, "http: out of memory");
    l->srv = srv;
    l->conf = *conf;
    l->routes = routes;
    l->nroutes = nroutes;
    l->port = port;
    l->lfd = listen_fd;
    l->ep = l->efd = -1;
    l->nbuckets = 1024;
    pthread_mutex_init(&l->pmu, NULL);
    l->buckets = calloc(l->nbuckets, sizeof *l->buckets);
    int fl = fcntl(listen_fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK); /* accept until EAGAIN */
    l->ep = epoll_create1(EPOLL_CLOEXEC);
    l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = &l->lfd},
                       ee = {.events = EPOLLIN, .data.ptr = &l->efd};
    if (!l->buckets || l->ep < 0 || l->efd < 0 || epoll_ctl(l->ep, EPOLL_CTL_ADD, listen_fd, &le) != 0 ||
        epoll_ctl(l->ep, EPOLL_CTL_ADD, l->efd, &ee) != 0 ||
        pthread_create(&l->th, NULL, loop_main, l) != 0) {
        int e = errno;
        if (l->ep >= 0)
            close(l->ep);
        if (l->efd >= 0)
            close(l->efd);
        free(l->buckets);
        pthread_mutex_destroy(&l->pmu);
        free(l);
        return rm_errf(err, RM_EIO, "http: cannot start the event loop: %s", strerror(e));
    }
    *out = l;
    return RM_OK;
}

void rm_http_loop_stop(rm_http_loop *l)
{
    if (!l)
        return;
    atomic_store(&l->closing, true);
    wake(l);
    double deadline = rm_mono() + LOOP_STOP_WAIT_S;
    while ((atomic_load(&l->inflight) > 0 || atomic_load(&l->nout) > 0) && rm_mono() < deadline)
        rm_sleep(0.002);
    atomic_store(&l->quit, true);
    wake(l);
    pthread_join(l->th, NULL);
    if (l->lfd >= 0)
        close(l->lfd);
    take_ready(l, false); /* answers given while the loop left: dropped with their connections */
    while (l->all) {
        lconn *c = l->all;
        conn_close(l, c); /* a parked one unanswered is left to its owner (http.h: answer them first) */
    }
    while (l->dead) {
        lconn *c = l->dead;
        l->dead = c->next;
        free(c);
    }
    for (size_t i = 0; i < l->nbuckets; i++)
        for (ipent *e = l->buckets[i], *nx; e; e = nx) {
            nx = e->next;
            free(e);
        }
    free(l->buckets);
    close(l->ep);
    close(l->efd);
    pthread_mutex_destroy(&l->pmu);
    free(l);
}

unsigned long rm_http_loop_cut_count(rm_http_loop *l)
{
    return l ? atomic_load(&l->ncut) : 0;
}

const char *rm_http_loop_header(const rm_http_req *req, const char *name)
{
    const lview *v = req->impl;
    for (int i = 0; i < v->nh; i++)
        if (strcasecmp(v->hn[i], name) == 0)
            return v->hv[i];
    return NULL;
}

const char *rm_http_loop_query(const rm_http_req *req, const char *key)
{
    const lview *v = req->impl;
    for (int i = 0; i < v->nq; i++)
        if (strcmp(v->qk[i], key) == 0)
            return v->qv[i];
    return NULL;
}

rm_http_parked *rm_http_loop_park(const rm_http_req *req)
{
    const lview *v = req->impl;
    lconn *c = v->c;
    rm_http_loop *l = c->loop;
    pthread_mutex_lock(&l->pmu);
    bool first = c->park == PARK_NONE;
    if (first)
        c->park = PARK_ASKED;
    pthread_mutex_unlock(&l->pmu);
    if (first)
        atomic_fetch_add(&l->inflight, 1);
    return (rm_http_parked *)c;
}

void rm_http_loop_unpark(rm_http_parked *t, rm_http_resp *resp)
{
    lconn *c = (lconn *)t;
    rm_http_loop *l = c->loop;
    /* head_only and close_after were set before the handler parked it (under pmu since) */
    lout *o = out_build(resp, c->head_only, c->close_after);
    if (!o) /* out of memory: the client is told so, if even that can be built */
        o = out_error(500, "out of memory", NULL, c->head_only, true);
    pthread_mutex_lock(&l->pmu);
    if (c->gone) { /* closed while it waited: the answer has nowhere to go */
        pthread_mutex_unlock(&l->pmu);
        out_free(o);
        free(c);
        atomic_fetch_sub(&l->inflight, 1);
        return;
    }
    c->answer = o; /* NULL (nothing could be built): the loop closes the connection */
    c->answered = true;
    bool queue = c->park == PARK_SUSPENDED && !c->queued;
    if (queue) { /* still in its handler (PARK_ASKED): the loop sends it when the handler returns */
        c->queued = true;
        c->rnext = NULL;
        if (l->ready_tail)
            l->ready_tail->rnext = c;
        else
            l->ready = c;
        l->ready_tail = c;
    }
    pthread_mutex_unlock(&l->pmu);
    /* c is not touched past the unlock: the loop may send the answer and free c at once */
    if (queue)
        wake(l);
    if (rm_http_test_after_resume)
        rm_http_test_after_resume();
}
