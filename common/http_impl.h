/* http_impl.h — what the two HTTP servers behind common/http.h share; not for other callers.
 *
 * common/http.c owns the public API, the thread-per-connection server (libmicrohttpd) and the helpers
 * below; common/http_loop.c owns the event-loop server (rm_http_opts.event_loop: one epoll thread, its
 * own HTTP/1.1 parser, docs/scale.md "Memory per worker"). A request's rm_http_req.impl and a parked
 * request's handle both point at a record whose first member is the rm_http_server, so the public
 * functions can tell whose it is. */
#ifndef RM_HTTP_IMPL_H
#define RM_HTTP_IMPL_H
#include "common/http.h"

typedef struct rm_http_loop rm_http_loop;

/* Settings both servers take from rm_http_opts, defaults filled in (rm_http_start). */
typedef struct rm_http_conf {
    size_t max_body;
    double header_timeout_s, body_timeout_s, idle_timeout_s;
    unsigned max_conns, max_pending, max_pending_per_ip;
} rm_http_conf;

/* The server's event loop, when it has one (NULL: thread per connection). */
rm_http_loop *rm_http__loop(const rm_http_server *s);

/* {"error": msg, "code": status} (owned; NULL on ENOMEM). */
char *rm_http__error_body(int status, const char *msg);
/* The route for (method, path): 0 and *out, or 404, or 405 with allow filled ("GET, POST"). */
int rm_http__find_route(const rm_http_route *routes, size_t nroutes, const char *method, const char *path,
                        const rm_http_route **out, char *allow, size_t allowcap);
/* Give up a reply that will not be sent: its owned body and its shared part (released). */
void rm_http__resp_drop(rm_http_resp *resp);
/* One rate-limited line for a connection cut as too slow or to make room (both servers). */
void rm_http__log_cut(const char *ip, int port, const char *why);

/* The event-loop server (common/http_loop.c). Start takes the bound listening socket (closed by stop)
 * and the routes (borrowed: the server's copy outlives the loop). */
int rm_http_loop_start(rm_http_server *srv, const rm_http_conf *conf, const rm_http_route *routes,
                       size_t nroutes, int listen_fd, int port, rm_http_loop **out, rm_err *err);
/* Graceful: stop accepting, wait (bounded) for parked requests to be answered and their replies
 * written, then close every connection and free. */
void rm_http_loop_stop(rm_http_loop *l);
unsigned long rm_http_loop_cut_count(rm_http_loop *l);
const char *rm_http_loop_header(const rm_http_req *req, const char *name);
const char *rm_http_loop_query(const rm_http_req *req, const char *key);
rm_http_parked *rm_http_loop_park(const rm_http_req *req);
void rm_http_loop_unpark(rm_http_parked *t, rm_http_resp *resp);
#endif
