/* http.h — a small HTTP/1.1 server for /metrics, probes, the rendezvous service and kubesim.
 *
 * Design: thread-per-connection over libmicrohttpd (common/http.c), so a handler may block (long
 * polls, watch streams) without stalling other clients; or, with opts.event_loop, one epoll thread
 * for every connection with its own parser (common/http_loop.c: an idle connection costs ~250 bytes),
 * where a long poll parks its request (rm_http_park) instead of blocking (the rendezvous at
 * thousands of workers: docs/scale.md). Routes are a
 * table matched in order on (method, path); a route with prefix=1 matches every path that starts
 * with its path. No route for the path → 404, a route for the path but not the method → 405 (with
 * Allow), body over opts.max_body → 413; all error bodies are JSON {"error":"...","code":N}.
 * Request bodies are accumulated up to the cap before the handler runs. Slow or never-finished
 * requests cannot fill the server: header/body deadlines and a per-address cap on unserved
 * connections (rm_http_opts) keep it answering under a slow flood. */
#ifndef RM_HTTP_H
#define RM_HTTP_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "common/rm.h"

typedef struct rm_http_server rm_http_server;

typedef struct rm_http_req {
    const char *method; /* "GET", ... */
    const char *path;   /* decoded path without query ("/v1/jobs/a/b/join") */
    const char *body;   /* NUL-terminated copy of the body ("" when none); borrowed */
    size_t body_len;
    const char *remote_ip; /* "127.0.0.5"; borrowed */
    void *impl;            /* internal */
} rm_http_req;

/* Header and query lookups; borrowed strings valid during the handler; NULL when absent. */
const char *rm_http_header(const rm_http_req *req, const char *name);
const char *rm_http_query(const rm_http_req *req, const char *key);

/* Streaming body: read() is called repeatedly from the connection's own thread and may block.
 * Return >0 bytes written into buf, 0 to be called again (after a short sleep), or -1 to end the
 * stream. free() is called once when the response is done (client gone or ended); may be NULL.
 * After a 0 the server waits 1 ms, doubling to 50 ms while idle, and ends the stream when the
 * client hangs up or rm_http_stop begins (1000 idle streams cost ~15% of one core; a read() that
 * blocks on a condition variable for up to ~1 s instead of returning 0 costs nothing). */
typedef struct rm_http_stream {
    ssize_t (*read)(void *ud, char *buf, size_t cap);
    void (*free)(void *ud);
    void *ud;
} rm_http_stream;

#define RM_HTTP_MAX_HEADERS 8
typedef struct rm_http_resp {
    int status;               /* default 200 */
    const char *content_type; /* static string; default "application/json" */
    char *body;               /* owned by the server after return (free()d); may be NULL */
    size_t body_len;          /* 0 with body set → strlen(body) */
    rm_http_stream stream;    /* when stream.read is set, body is ignored and the reply is chunked */
    /* A body shared by many replies (borrowed), sent before `body` (which is then its tail): the
     * server calls release(release_ud) exactly once when it no longer needs it (sent, dropped, or
     * refused); NULL = none. */
    const char *shared;
    size_t shared_len;
    void (*release)(void *ud);
    void *release_ud;
    struct {
        char name[64];
        char value[256];
    } headers[RM_HTTP_MAX_HEADERS];
    int nheaders;
} rm_http_resp;

/* Handlers fill resp and return RM_OK; a negative return becomes a 500 with a JSON error body. */
typedef int (*rm_http_handler)(const rm_http_req *req, rm_http_resp *resp, void *ud);

typedef struct rm_http_route {
    const char *method; /* NULL = any method */
    const char *path;
    int prefix; /* 1: match path prefix */
    rm_http_handler fn;
    void *ud;
} rm_http_route;

typedef struct rm_http_opts {
    const char *bind;        /* "127.0.0.1:0", ":8080", "0.0.0.0:9090"; port 0 picks one */
    size_t max_body;         /* default 1 MiB */
    unsigned conn_timeout_s; /* idle connection timeout (also the bound on a keep-alive
                                  connection's wait for its next request); default 60 */
    unsigned max_conns;      /* default 2048 */
    /* Slow clients (0 = default). A connection whose request headers are not all in
     * header_timeout_s after its accept (default 5), or whose body is not in body_timeout_s after
     * its headers (default 15), is cut. Unserved connections (headers or body still coming, or
     * idle keep-alive) are capped: when a new connection finds max_pending_per_ip of them from its
     * address (default max_conns/8) or max_pending in all (default max_conns/2), the oldest one
     * is cut to make room. Connections whose handler runs (long polls) or whose response streams
     * are never cut. */
    double header_timeout_s, body_timeout_s;
    unsigned max_pending, max_pending_per_ip;
    /* true: one epoll thread serves every connection instead of a thread each (the rendezvous:
     * docs/scale.md). Handlers must not block: a long poll parks its request (rm_http_park);
     * streams are not served (500); request bodies must come with Content-Length (chunked: 411);
     * request line and headers are capped at 8 KiB (431). The slow-client defence above is the
     * same. */
    bool event_loop;
} rm_http_opts;

/* Parking (event-loop servers only): a handler that must wait (a long poll) calls rm_http_park,
 * returns RM_OK leaving resp alone, and the request then waits without a thread until
 * rm_http_unpark answers it, from any thread, exactly once: resp is moved (its body becomes the
 * server's). rm_http_park returns NULL on a thread-per-connection server: the handler answers (or
 * blocks) as before. Every parked request must be answered before rm_http_stop (it waits for
 * them, bounded). */
typedef struct rm_http_parked rm_http_parked;
rm_http_parked *rm_http_park(const rm_http_req *req);
void rm_http_unpark(rm_http_parked *t, rm_http_resp *resp);
/* Tests only (NULL otherwise): called by rm_http_unpark right after it resumed a suspended request,
 * to widen the window in which the MHD thread may complete and free it. */
extern void (*rm_http_test_after_resume)(void);

/* Start serving in background threads. The route table is copied. On success *out is owned
 * (rm_http_stop). Errors (bad address, port in use) → RM_EINVAL/RM_EIO with err set. */
int rm_http_start(const rm_http_opts *opts, const rm_http_route *routes, size_t nroutes, rm_http_server **out,
                  rm_err *err);
int rm_http_port(const rm_http_server *s); /* the bound port */
/* Graceful: stop accepting, let running handlers finish (streams are ended), join threads, free.
 * NULL ok. */
void rm_http_stop(rm_http_server *s);
/* Connections cut as too slow or to make room so far (tests, logs). NULL → 0. */
unsigned long rm_http_cut_count(rm_http_server *s);
/* Has stop begun? Long-polling handlers and streams check this to return early. */
bool rm_http_stopping(const rm_http_server *s);

/* Response helpers (they set status, content type and an owned body). */
int rm_http_reply_json(rm_http_resp *resp, int status, const void *cjson /* const cJSON* */);
int rm_http_reply_text(rm_http_resp *resp, int status, const char *content_type, const char *text);
int rm_http_reply_error(rm_http_resp *resp, int status, const char *fmt, ...) RM_PRINTF(3, 4);
int rm_http_add_header(rm_http_resp *resp, const char *name, const char *value);

/* A value one thread publishes and HTTP handlers serve: set() swaps in a copy under a mutex,
 * the route handler (rm_http_blob_handler with ud = the blob) serves the latest copy. */
typedef struct rm_http_blob rm_http_blob;
rm_http_blob *rm_http_blob_new(const char *content_type);
void rm_http_blob_set(rm_http_blob *b, const char *data, size_t len);
char *rm_http_blob_get(rm_http_blob *b, size_t *len); /* owned copy */
int rm_http_blob_handler(const rm_http_req *req, rm_http_resp *resp, void *blob);
void rm_http_blob_free(rm_http_blob *b);

/* Parse "host:port", ":port" (→ 0.0.0.0), "[::1]:port". host is written to hostbuf. */
int rm_http_parse_addr(const char *addr, char *hostbuf, size_t hostcap, int *port);
#endif
