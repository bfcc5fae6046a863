/* http.c — the HTTP/1.1 servers' API (see http.h): the thread-per-connection server over
 * libmicrohttpd here, the event-loop server in common/http_loop.c (http_impl.h).
 *
 * Design: MHD runs thread-per-connection with poll() (no FD_SETSIZE limit), so a handler can block
 * (long polls) and a stream callback can wait for data without stalling anybody else; each
 * connection thread gets a small stack so a thousand open watch streams cost little. We create and
 * bind the listening socket ourselves so bind errors carry errno text and port 0 works. Bodies are
 * accumulated up to max_body (413 beyond, decided from Content-Length before reading when possible).
 * Shutdown is graceful: stop accepting (quiesce), raise the `stopping` flag that long polls and
 * streams watch, wait (bounded) for in-flight requests to complete, then stop MHD.
 *
 * Slow clients (docs/architecture.md#robustness: 2,100 never-finished requests used to fill the
 * connection cap and silence the rendezvous and the probes): every connection is tracked from MHD's
 * connection notifications in a list with its phase — waiting for a request's headers, reading its
 * body, or served (a handler runs or a response goes out: never cut, long polls and watch streams live
 * here). A sweeper thread cuts (shutdown(2), so MHD's own thread sees EOF and cleans up) any connection
 * whose headers have not all arrived header_timeout_s after its accept, or whose body has not
 * body_timeout_s after its headers; MHD's idle timeout covers idle keep-alive. And when a connection
 * arrives while its address already has max_pending_per_ip unserved connections (or the server
 * max_pending), the oldest of them is cut to make room: a client that sends its request at once is
 * never the oldest, so a slow flood from one address costs that address its own slots and nobody
 * else's. NOTIFY_CLOSED runs before MHD closes the socket and takes the list lock, so a cut never
 * reaches a reused descriptor. Cuts are logged at most 5 per 10 s. */
#include "common/http.h"
#include "common/http_impl.h"
#include "common/clock.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/ratelimit.h"
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define RM_HTTP_STACK (1024u * 1024u)
#else
#define RM_HTTP_STACK (256u * 1024u)
#endif
#define RM_HTTP_STREAM_BLOCK (16u * 1024u)
#define RM_HTTP_STOP_WAIT_MS 10000
#define RM_HTTP_SWEEP_MS 200
enum { CONN_HEAD = 0, CONN_BODY, CONN_SERVED };

/* One TCP connection, from MHD's STARTED to its CLOSED notification (list under srv->cmu). */
typedef struct conn_ent {
    struct conn_ent *prev, *next;
    int fd;
    int phase;       /* CONN_* */
    int cut;         /* shutdown() issued */
    unsigned served; /* requests answered on it */
    double since;    /* monotonic: accept, headers complete, or last response */
    char ip[INET6_ADDRSTRLEN];
} conn_ent;

struct rm_http_server {
    struct MHD_Daemon *d;
    int listen_fd;
    int port;
    rm_http_route *routes;
    size_t nroutes;
    size_t max_body;
    rm_http_loop *loop; /* opts.event_loop: the event-loop server (http_loop.c); no MHD then */
    atomic_bool stopping;
    atomic_int inflight;

    /* slow-client defence (see the file comment) */
    double header_timeout_s, body_timeout_s, idle_timeout_s;
    unsigned max_pending, max_pending_per_ip;
    pthread_mutex_t cmu;
    pthread_cond_t ccv; /* wakes the sweeper to stop */
    conn_ent *conns;    /* newest first */
    unsigned long ncut; /* connections cut so far */
    int sweep_stop, sweep_started;
    pthread_t sweeper;
};

typedef struct req_ctx {
    rm_http_server *srv; /* first (http_impl.h) */
    struct MHD_Connection *conn;
    const rm_http_route *route;
    rm_capbuf body; /* capped at max_body */
    int toobig;
    char ip[INET6_ADDRSTRLEN];
} req_ctx;

typedef struct stream_ctx {
    rm_http_stream s;
    rm_http_server *srv;
    int fd;
} stream_ctx;

/* ---- small helpers ---------------------------------------------------------------------------- */

char *rm_http__error_body(int status, const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    char *s = NULL;
    if (o && cJSON_AddStringToObject(o, "error", msg) && cJSON_AddNumberToObject(o, "code", status))
        s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* Replace resp's body with `owned` (NULL = the allocation failed: RM_ENOMEM, resp untouched). */
static int set_body(rm_http_resp *resp, int status, const char *content_type, char *owned)
{
    if (!owned)
        return RM_ENOMEM;
    free(resp->body);
    resp->status = status;
    resp->content_type = content_type;
    resp->body = owned;
    resp->body_len = strlen(owned);
    return RM_OK;
}

int rm_http_reply_text(rm_http_resp *resp, int status, const char *content_type, const char *text)
{
    return set_body(resp, status, content_type ? content_type : "text/plain; charset=utf-8",
                    strdup(text ? text : ""));
}

int rm_http_reply_json(rm_http_resp *resp, int status, const void *cjson)
{
    return set_body(resp, status, "application/json",
                    cjson ? cJSON_PrintUnformatted((const cJSON *)cjson) : strdup("null"));
}

int rm_http_reply_error(rm_http_resp *resp, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return set_body(resp, status, "application/json", rm_http__error_body(status, msg));
}

int rm_http_add_header(rm_http_resp *resp, const char *name, const char *value)
{
    if (resp->nheaders >= RM_HTTP_MAX_HEADERS)
        return RM_ETOOBIG;
    if (!name || !value || strlen(name) >= sizeof resp->headers[0].name ||
        strlen(value) >= sizeof resp->headers[0].value)
        return RM_EINVAL;
    /* no header injection */
    if (strpbrk(name, "\r\n:") || strpbrk(value, "\r\n"))
        return RM_EINVAL;
    strcpy(resp->headers[resp->nheaders].name, name);
    strcpy(resp->headers[resp->nheaders].value, value);
    resp->nheaders++;
    return RM_OK;
}

/* The server a request or a parked request belongs to: both servers' records start with it. */
static rm_http_server *owner(const void *impl)
{
    return *(rm_http_server *const *)impl;
}

rm_http_loop *rm_http__loop(const rm_http_server *s)
{
    return s ? s->loop : NULL;
}

const char *rm_http_header(const rm_http_req *req, const char *name)
{
    if (!req || !req->impl || !name)
        return NULL;
    if (owner(req->impl)->loop)
        return rm_http_loop_header(req, name);
    const req_ctx *c = req->impl;
    return MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, name);
}

const char *rm_http_query(const rm_http_req *req, const char *key)
{
    if (!req || !req->impl || !key)
        return NULL;
    if (owner(req->impl)->loop)
        return rm_http_loop_query(req, key);
    const req_ctx *c = req->impl;
    return MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, key);
}

bool rm_http_stopping(const rm_http_server *s)
{
    return s && atomic_load(&((rm_http_server *)s)->stopping);
}

int rm_http_port(const rm_http_server *s)
{
    return s ? s->port : -1;
}

/* ---- responses -------------------------------------------------------------------------------- */

static enum MHD_Result queue_resp(req_ctx *c, rm_http_resp *resp);

/* Our own 404/405/413/500s go through the same path as handler replies. */
static enum MHD_Result queue_error(req_ctx *c, int status, const char *msg, const char *allow)
{
    rm_http_resp r = {.status = status,
                      .content_type = "application/json",
                      .body = rm_http__error_body(status, msg)}; /* NULL (ENOMEM): empty body */
    if (allow)
        rm_http_add_header(&r, MHD_HTTP_HEADER_ALLOW, allow);
    return queue_resp(c, &r);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_ctx *sc = cls;
    int wait_ms = 1;
    (void)pos;
    for (;;) {
        if (atomic_load(&sc->srv->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        ssize_t n = sc->s.read(sc->s.ud, buf, max);
        if (n > 0)
            return n > (ssize_t)max ? (ssize_t)max : n;
        if (n < 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
        /* nothing yet: wait a little, but notice a client that went away (backing off to 50 ms
         * so a thousand idle streams do not spin) */
        if (sc->fd >= 0) {
            struct pollfd p = {.fd = sc->fd, .events = POLLRDHUP};
            int pr = poll(&p, 1, wait_ms);
            if (pr > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
                return MHD_CONTENT_READER_END_WITH_ERROR;
        } else {
            struct timespec ts = {0, (long)wait_ms * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (wait_ms < 50)
            wait_ms *= 2;
    }
}

static void stream_free(void *cls)
{
    stream_ctx *sc = cls;
    if (sc->s.free)
        sc->s.free(sc->s.ud);
    free(sc);
}

/* A shared body's reply: its tail (owned) and who to tell when the shared part is no longer read. */
typedef struct iov_ctx {
    char *tail;
    void (*release)(void *ud);
    void *ud;
} iov_ctx;

static void iov_free(void *cls)
{
    iov_ctx *x = cls;
    if (x->release)
        x->release(x->ud);
    free(x->tail);
    free(x);
}

void rm_http__resp_drop(rm_http_resp *resp)
{
    free(resp->body);
    resp->body = NULL;
    if (resp->release)
        resp->release(resp->release_ud);
    resp->release = NULL;
    resp->shared = NULL;
}

/* The MHD response for resp (its body and shared part move into it; resp is left empty), with
 * *status; NULL when it could not be built (resp's parts are released, *status says what to send
 * instead: 500, or 0 when nothing can be). */
static struct MHD_Response *build_resp(req_ctx *c, rm_http_resp *resp, unsigned *status)
{
    struct MHD_Response *r = NULL;
    *status = resp->status > 0 ? (unsigned)resp->status : 200;
    if (resp->shared && !resp->stream.read) {
        iov_ctx *x = calloc(1, sizeof *x);
        if (!x) {
            rm_http__resp_drop(resp);
            *status = 500;
            return NULL;
        }
        size_t tl = resp->body ? (resp->body_len ? resp->body_len : strlen(resp->body)) : 0;
        struct MHD_IoVec iov[2] = {{resp->shared, resp->shared_len}, {resp->body ? resp->body : "", tl}};
        x->tail = resp->body;
        x->release = resp->release;
        x->ud = resp->release_ud;
        resp->body = NULL;
        resp->shared = NULL;
        resp->release = NULL;
        r = MHD_create_response_from_iovec(iov, 2, iov_free, x);
        if (!r)
            iov_free(x);
    } else if (resp->stream.read) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        if (!sc) {
            if (resp->stream.free)
                resp->stream.free(resp->stream.ud);
            memset(&resp->stream, 0, sizeof resp->stream);
            free(resp->body);
            resp->body = NULL;
            *status = 500;
            return NULL;
        }
        sc->s = resp->stream;
        sc->srv = c->srv;
        memset(&resp->stream, 0, sizeof resp->stream);
        sc->fd = -1;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
            sc->fd = ci->connect_fd;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, RM_HTTP_STREAM_BLOCK, stream_read, sc,
                                              stream_free);
        if (!r)
            stream_free(sc);
        free(resp->body);
        resp->body = NULL;
    } else if (resp->body) {
        size_t len = resp->body_len ? resp->body_len : strlen(resp->body);
        r = MHD_create_response_from_buffer(len, resp->body, MHD_RESPMEM_MUST_FREE);
        if (!r)
            free(resp->body);
        resp->body = NULL;
    } else {
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        *status = 0;
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type ? resp->content_type : "application/json");
    for (int i = 0; i < resp->nheaders && i < RM_HTTP_MAX_HEADERS; i++)
        MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
    return r;
}

/* Queue r (build_resp's; consumed) with status; r NULL: a 500 of our own, or nothing (MHD_NO
 * closes the connection) when status is 0. */
static enum MHD_Result queue_built(req_ctx *c, struct MHD_Response *r, unsigned status)
{
    if (!r)
        return status ? queue_error(c, (int)status, "out of memory", NULL) : MHD_NO;
    enum MHD_Result ret = MHD_queue_response(c->conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result queue_resp(req_ctx *c, rm_http_resp *resp)
{
    unsigned status;
    struct MHD_Response *r = build_resp(c, resp, &status);
    return queue_built(c, r, status);
}

/* ---- slow clients ----------------------------------------------------------------------------- */

static rm_ratelimit g_http_cut_rl = RM_RATELIMIT_INIT(5, 10.0);

/* Under cmu. */
static void conn_cut(rm_http_server *s, conn_ent *e, const char *why)
{
    if (e->cut)
        return;
    e->cut = 1;
    s->ncut++;
    if (e->fd >= 0)
        shutdown(e->fd, SHUT_RDWR);
    rm_http__log_cut(e->ip, s->port, why);
}

void rm_http__log_cut(const char *ip, int port, const char *why)
{
    unsigned long sup = 0;
    if (rm_ratelimit_take(&g_http_cut_rl, rm_mono(), &sup))
        rm_warn("http: cut a slow connection remote=%s port=%d reason=\"%s\" suppressed=%lu", ip, port, why,
                sup);
}

static void conn_set_phase(struct MHD_Connection *conn, rm_http_server *s, int phase)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_ent *e = ci ? ci->socket_context : NULL;
    if (!e)
        return;
    pthread_mutex_lock(&s->cmu);
    if (phase == CONN_HEAD && e->phase != CONN_HEAD)
        e->served++;
    if (e->phase != phase)
        e->since = rm_mono();
    e->phase = phase;
    pthread_mutex_unlock(&s->cmu);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    rm_http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_ent *e = *socket_context;
        if (!e)
            return;
        pthread_mutex_lock(&s->cmu);
        if (e->prev)
            e->prev->next = e->next;
        else
            s->conns = e->next;
        if (e->next)
            e->next->prev = e->prev;
        pthread_mutex_unlock(&s->cmu);
        free(e);
        *socket_context = NULL;
        return;
    }
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    conn_ent *e = calloc(1, sizeof *e);
    if (!e)
        return; /* untracked: MHD's own limits still apply */
    e->fd = -1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        e->fd = ci->connect_fd;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, e->ip,
                      sizeof e->ip);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, e->ip,
                      sizeof e->ip);
    }
    e->since = rm_mono();
    pthread_mutex_lock(&s->cmu);
    /* make room: the oldest unserved connection of this address, else of the server */
    unsigned same = 0, all = 0;
    conn_ent *old_same = NULL, *old_all = NULL;
    for (conn_ent *x = s->conns; x; x = x->next) {
        if (x->cut || x->phase == CONN_SERVED)
            continue;
        all++;
        old_all = x; /* the list is newest first */
        if (strcmp(x->ip, e->ip) == 0) {
            same++;
            old_same = x;
        }
    }
    if (old_same && same >= s->max_pending_per_ip)
        conn_cut(s, old_same, "too many unfinished requests from this address");
    else if (old_all && all >= s->max_pending)
        conn_cut(s, old_all, "too many unfinished requests");
    e->next = s->conns;
    if (s->conns)
        s->conns->prev = e;
    s->conns = e;
    pthread_mutex_unlock(&s->cmu);
    *socket_context = e;
}

static void *sweeper_main(void *arg)
{
    rm_http_server *s = arg;
    pthread_mutex_lock(&s->cmu);
    while (!s->sweep_stop) {
        double now = rm_mono();
        for (conn_ent *e = s->conns; e; e = e->next) {
            if (e->cut)
                continue;
            if (e->phase == CONN_HEAD && e->served == 0 && now - e->since > s->header_timeout_s)
                conn_cut(s, e, "request headers not complete in time");
            else if (e->phase == CONN_BODY && now - e->since > s->body_timeout_s)
                conn_cut(s, e, "request body not complete in time");
            else if (e->phase == CONN_HEAD && e->served > 0 && now - e->since > s->idle_timeout_s)
                conn_cut(s, e, "keep-alive connection idle or trickling too long");
        }
        struct timespec ts = rm_mono_ts_in(RM_HTTP_SWEEP_MS / 1000.0);
        pthread_cond_timedwait(&s->ccv, &s->cmu, &ts);
    }
    pthread_mutex_unlock(&s->cmu);
    return NULL;
}

unsigned long rm_http_cut_count(rm_http_server *s)
{
    if (!s)
        return 0;
    if (s->loop)
        return rm_http_loop_cut_count(s->loop);
    pthread_mutex_lock(&s->cmu);
    unsigned long n = s->ncut;
    pthread_mutex_unlock(&s->cmu);
    return n;
}

/* ---- dispatch --------------------------------------------------------------------------------- */

static int path_match(const rm_http_route *rt, const char *path)
{
    if (rt->prefix)
        return strncmp(path, rt->path, strlen(rt->path)) == 0;
    return strcmp(path, rt->path) == 0;
}

static int method_match(const rm_http_route *rt, const char *method)
{
    if (!rt->method)
        return 1;
    if (strcmp(rt->method, method) == 0)
        return 1;
    return strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0;
}

int rm_http__find_route(const rm_http_route *routes, size_t nroutes, const char *method, const char *path,
                        const rm_http_route **out, char *allow, size_t allowcap)
{
    int path_seen = 0;
    allow[0] = 0;
    for (size_t i = 0; i < nroutes; i++) {
        const rm_http_route *rt = &routes[i];
        if (!path_match(rt, path))
            continue;
        if (method_match(rt, method)) {
            *out = rt;
            return 0;
        }
        path_seen = 1;
        if (rt->method && !strstr(allow, rt->method)) {
            size_t l = strlen(allow);
            snprintf(allow + l, allowcap - l, "%s%s", l ? ", " : "", rt->method);
        }
    }
    return path_seen ? 405 : 404;
}

void (*rm_http_test_after_resume)(void);

rm_http_parked *rm_http_park(const rm_http_req *req)
{
    /* a thread-per-connection server's handler answers (or blocks) itself */
    return req && req->impl && owner(req->impl)->loop ? rm_http_loop_park(req) : NULL;
}

void rm_http_unpark(rm_http_parked *t, rm_http_resp *resp)
{
    if (t)
        rm_http_loop_unpark(t, resp); /* only an event-loop server parks */
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    rm_http_server *s = cls;
    req_ctx *c = *con_cls;
    (void)version;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->srv = s;
        c->conn = conn;
        c->body.max = s->max_body;
        *con_cls = c;
        atomic_fetch_add(&s->inflight, 1);
        conn_set_phase(conn, s, CONN_BODY); /* headers are in; the body has its own deadline */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, c->ip,
                          sizeof c->ip);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, c->ip,
                          sizeof c->ip);
        }
        char allow[128];
        int st = rm_http__find_route(s->routes, s->nroutes, method, url, &c->route, allow, sizeof allow);
        if (st == 404 || st == 405)
            conn_set_phase(conn, s, CONN_SERVED);
        if (st == 404)
            return queue_error(c, 404, "not found", NULL);
        if (st == 405)
            return queue_error(c, 405, "method not allowed", allow[0] ? allow : NULL);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *e;
            errno = 0;
            unsigned long long n = strtoull(cl, &e, 10);
            if (errno || e == cl || n > s->max_body) {
                conn_set_phase(conn, s, CONN_SERVED);
                return queue_error(c, 413, "request body too large", NULL);
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (c->toobig)
            return MHD_YES;
        int arc = rm_capbuf_append(&c->body, upload_data, n);
        if (arc == RM_ETOOBIG) {
            c->toobig = 1; /* keep reading (and dropping) so the 413 can be sent */
            rm_capbuf_free(&c->body);
        }
        return arc == RM_ENOMEM ? MHD_NO : MHD_YES;
    }
    conn_set_phase(conn, s, CONN_SERVED);
    if (c->toobig)
        return queue_error(c, 413, "request body too large", NULL);

    rm_http_req req = {
        .method = method,
        .path = url,
        .body = c->body.b ? c->body.b : "",
        .body_len = c->body.len,
        .remote_ip = c->ip,
        .impl = c,
    };
    rm_http_resp resp;
    memset(&resp, 0, sizeof resp);
    resp.status = 200;
    resp.content_type = "application/json";
    int rc = c->route->fn(&req, &resp, c->route->ud);
    if (rc < 0) {
        rm_http__resp_drop(&resp);
        if (resp.stream.free)
            resp.stream.free(resp.stream.ud);
        return queue_error(c, 500, rm_strerror(rc), NULL);
    }
    return queue_resp(c, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    rm_http_server *s = cls;
    req_ctx *c = *con_cls;
    (void)toe;
    if (!c)
        return;
    conn_set_phase(conn, s, CONN_HEAD); /* keep-alive: waiting for the next request */
    rm_capbuf_free(&c->body);
    *con_cls = NULL;
    free(c);
    atomic_fetch_sub(&s->inflight, 1);
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

int rm_http_parse_addr(const char *addr, char *hostbuf, size_t hostcap, int *port)
{
    if (!addr || !*addr || !hostbuf || hostcap < 2)
        return RM_EINVAL;
    const char *ps;
    size_t hl;
    const char *h;
    if (addr[0] == '[') {
        const char *rb = strchr(addr, ']');
        if (!rb || rb[1] != ':')
            return RM_EINVAL;
        h = addr + 1;
        hl = (size_t)(rb - h);
        ps = rb + 2;
    } else {
        const char *colon = strrchr(addr, ':');
        if (!colon)
            return RM_EINVAL;
        if (memchr(addr, ':', (size_t)(colon - addr)))
            return RM_EINVAL; /* bare IPv6 needs brackets */
        h = addr;
        hl = (size_t)(colon - addr);
        ps = colon + 1;
    }
    if (hl == 0) {
        h = "0.0.0.0";
        hl = 7;
    }
    if (hl >= hostcap)
        return RM_EINVAL;
    char *e;
    errno = 0;
    long p = strtol(ps, &e, 10);
    if (!*ps || *e || errno || p < 0 || p > 65535)
        return RM_EINVAL;
    memcpy(hostbuf, h, hl);
    hostbuf[hl] = 0;
    *port = (int)p;
    return RM_OK;
}

static int open_listener(const char *bind_addr, int *fd_out, int *v6_out, int *port_out, rm_err *err)
{
    char host[128];
    int port;
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof ss);
    if (rm_http_parse_addr(bind_addr, host, sizeof host, &port) != RM_OK)
        return rm_errf(err, RM_EINVAL, "bad listen address \"%s\" (want host:port)", bind_addr);
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    int v6 = 0;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        sl = sizeof *s4;
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        sl = sizeof *s6;
        v6 = 1;
    } else {
        return rm_errf(err, RM_EINVAL, "bad listen address \"%s\": host must be numeric", bind_addr);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return rm_errf(err, RM_EIO, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
        int e = errno;
        close(fd);
        return rm_errf(err, RM_EIO, "bind %s: %s", bind_addr, strerror(e));
    }
    /* the kernel clamps it to net.core.somaxconn: thousands of workers connect at once at the start
     * of a job (docs/scale.md), and a full queue drops their SYNs for a second's retry */
    if (listen(fd, 65535) != 0) {
        int e = errno;
        close(fd);
        return rm_errf(err, RM_EIO, "listen %s: %s", bind_addr, strerror(e));
    }
    sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_out = ntohs(ss.ss_family == AF_INET ? s4->sin_port : s6->sin6_port);
    *fd_out = fd;
    *v6_out = v6;
    return RM_OK;
}

int rm_http_start(const rm_http_opts *opts, const rm_http_route *routes, size_t nroutes, rm_http_server **out,
                  rm_err *err)
{
    rm_http_opts o = {0};
    if (opts)
        o = *opts;
    if (!o.bind)
        o.bind = "127.0.0.1:0";
    if (!o.max_body)
        o.max_body = 1u << 20;
    if (!o.conn_timeout_s)
        o.conn_timeout_s = 60;
    if (!o.max_conns)
        o.max_conns = 2048;
    if (!(o.header_timeout_s > 0))
        o.header_timeout_s = 5;
    if (!(o.body_timeout_s > 0))
        o.body_timeout_s = 15;
    if (!o.max_pending)
        o.max_pending = o.max_conns / 2 ? o.max_conns / 2 : 1;
    if (!o.max_pending_per_ip)
        o.max_pending_per_ip = o.max_conns / 8 ? o.max_conns / 8 : 1;
    *out = NULL;
    for (size_t i = 0; i < nroutes; i++)
        if (!routes[i].path || !routes[i].fn)
            return rm_errf(err, RM_EINVAL, "route %zu: path and fn are required", i);

    rm_http_server *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    s->listen_fd = -1;
    s->max_body = o.max_body;
    s->header_timeout_s = o.header_timeout_s;
    s->body_timeout_s = o.body_timeout_s;
    s->idle_timeout_s = o.conn_timeout_s;
    s->max_pending = o.max_pending;
    s->max_pending_per_ip = o.max_pending_per_ip;
    pthread_mutex_init(&s->cmu, NULL);
    rm_mono_cond_init(&s->ccv);
    if (nroutes) {
        s->routes = calloc(nroutes, sizeof *s->routes);
        if (!s->routes) {
            pthread_cond_destroy(&s->ccv);
            pthread_mutex_destroy(&s->cmu);
            free(s);
            return rm_errf(err, RM_ENOMEM, "out of memory");
        }
        memcpy(s->routes, routes, nroutes * sizeof *routes);
    }
    s->nroutes = nroutes;
    int v6 = 0;
    int rc = open_listener(o.bind, &s->listen_fd, &v6, &s->port, err);
    if (rc < 0) {
        pthread_cond_destroy(&s->ccv);
        pthread_mutex_destroy(&s->cmu);
        free(s->routes);
        free(s);
        return rc;
    }
    if (o.event_loop) { /* one epoll thread for every connection (http_loop.c) */
        rm_http_conf conf = {.max_body = o.max_body,
                             .header_timeout_s = o.header_timeout_s,
                             .body_timeout_s = o.body_timeout_s,
                             .idle_timeout_s = o.conn_timeout_s,
                             .max_conns = o.max_conns,
                             .max_pending = o.max_pending,
                             .max_pending_per_ip = o.max_pending_per_ip};
        rc = rm_http_loop_start(s, &conf, s->routes, s->nroutes, s->listen_fd, s->port, &s->loop, err);
        if (rc < 0) {
            close(s->listen_fd);
            pthread_cond_destroy(&s->ccv);
            pthread_mutex_destroy(&s->cmu);
            free(s->routes);
            free(s);
            return rc;
        }
        *out = s;
        return RM_OK;
    }
    unsigned flags =
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    flags |= v6 ? MHD_USE_IPv6 : 0;
    size_t pool = 64 * 1024;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET,
                            (MHD_socket)s->listen_fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)o.max_conns, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o.conn_timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool, MHD_OPTION_THREAD_STACK_SIZE,
                            (size_t)RM_HTTP_STACK, MHD_OPTION_END);
    if (!s->d) {
        close(s->listen_fd);
        pthread_cond_destroy(&s->ccv);
        pthread_mutex_destroy(&s->cmu);
        free(s->routes);
        free(s);
        return rm_errf(err, RM_EIO, "cannot start HTTP server on %s", o.bind);
    }
    if (pthread_create(&s->sweeper, NULL, sweeper_main, s) == 0)
        s->sweep_started = 1;
    else
        rm_warn("http: no sweeper thread; slow clients are only cut by the idle timeout");
    *out = s;
    return RM_OK;
}

void rm_http_stop(rm_http_server *s)
{
    if (!s)
        return;
    if (s->loop) {
        atomic_store(&s->stopping, true); /* long polls answer "stopping" before the loop stops */
        rm_http_loop_stop(s->loop);
        pthread_cond_destroy(&s->ccv);
        pthread_mutex_destroy(&s->cmu);
        free(s->routes);
        free(s);
        return;
    }
    MHD_socket lfd = MHD_quiesce_daemon(s->d);
    atomic_store(&s->stopping, true);
    double deadline = rm_mono() + RM_HTTP_STOP_WAIT_MS / 1000.0;
    while (atomic_load(&s->inflight) > 0 && rm_mono() < deadline) {
        struct timespec ts = {0, 2 * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (s->sweep_started) {
        pthread_mutex_lock(&s->cmu);
        s->sweep_stop = 1;
        pthread_cond_broadcast(&s->ccv);
        pthread_mutex_unlock(&s->cmu);
        pthread_join(s->sweeper, NULL);
    }
    MHD_stop_daemon(s->d); /* every NOTIFY_CLOSED has run when it returns */
    pthread_cond_destroy(&s->ccv);
    pthread_mutex_destroy(&s->cmu);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    else if (s->listen_fd >= 0)
        close(s->listen_fd);
    free(s->routes);
    free(s);
}

/* ---- blob ------------------------------------------------------------------------------------- */

struct rm_http_blob {
    pthread_mutex_t mu;
    char *data;
    size_t len;
    char ctype[128];
};

rm_http_blob *rm_http_blob_new(const char *content_type)
{
    rm_http_blob *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    pthread_mutex_init(&b->mu, NULL);
    snprintf(b->ctype, sizeof b->ctype, "%s", content_type ? content_type : "application/json");
    return b;
}

void rm_http_blob_set(rm_http_blob *b, const char *data, size_t len)
{
    if (!b)
        return;
    char *copy = malloc(len + 1);
    if (copy) {
        if (len)
            memcpy(copy, data, len);
        copy[len] = 0;
    }
    pthread_mutex_lock(&b->mu);
    char *old = b->data;
    b->data = copy;
    b->len = copy ? len : 0;
    pthread_mutex_unlock(&b->mu);
    free(old);
}

char *rm_http_blob_get(rm_http_blob *b, size_t *len)
{
    if (!b)
        return NULL;
    pthread_mutex_lock(&b->mu);
    size_t n = b->data ? b->len : 0;
    char *copy = malloc(n + 1);
    if (copy) {
        if (n)
            memcpy(copy, b->data, n);
        copy[n] = 0;
    }
    pthread_mutex_unlock(&b->mu);
    if (len)
        *len = copy ? n : 0;
    return copy;
}

int rm_http_blob_handler(const rm_http_req *req, rm_http_resp *resp, void *blob)
{
    rm_http_blob *b = blob;
    size_t n;
    (void)req;
    char *data = rm_http_blob_get(b, &n);
    if (!data)
        return RM_ENOMEM;
    resp->status = 200;
    resp->content_type = b->ctype;
    resp->body = data;
    resp->body_len = n;
    if (n == 0) {
        /* body_len 0 means strlen: an empty body is simply no body */
        free(data);
        resp->body = NULL;
    }
    return RM_OK;
}

void rm_http_blob_free(rm_http_blob *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->mu);
    free(b->data);
    free(b);
}
