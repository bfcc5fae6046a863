/* Tests for common/http and common/httpc: routing, 404/405/413 JSON errors, concurrency of
 * blocking handlers, streaming, graceful stop with a long poll in flight, the blob under
 * concurrent updates, and the client's caps and timeouts. The tests that need no blocking handler
 * and no stream run again on the event-loop server (common/http_loop.c, "_loop"), which also has its
 * own: its HTTP parser against malformed, split, pipelined and oversized requests, and a slow flood
 * while a long poll is parked. */
#include "common/http.h"
#include "common/buf.h"
#include "common/httpc.h"
#include "common/json.h"
#include "common/clock.h"
#include "tests/unit/testutil.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Raw request: writes `req` to 127.0.0.1:port and reads until close (5 s cap). Owned result. */
static char *raw_http(int port, const char *req, size_t reqlen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return NULL;
    }
    size_t off = 0;
    while (off < reqlen) {
        ssize_t w = send(fd, req + off, reqlen - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    size_t cap = 65536, n = 0;
    char *b = malloc(cap + 1);
    ssize_t r;
    while (n < cap && (r = recv(fd, b + n, cap - n, 0)) > 0)
        n += (size_t)r;
    b[n] = 0;
    close(fd);
    return b;
}

typedef struct {
    rm_http_server *srv;
    atomic_int entered;
    atomic_int release;
    atomic_int freed;
    atomic_int chunks;
} ctx_t;
static ctx_t g;

static int h_hello(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "method", req->method);
    cJSON_AddStringToObject(o, "path", req->path);
    cJSON_AddStringToObject(o, "body", req->body);
    cJSON_AddStringToObject(o, "ip", req->remote_ip);
    const char *q = rm_http_query(req, "q");
    const char *h = rm_http_header(req, "X-Test");
    cJSON_AddStringToObject(o, "q", q ? q : "");
    cJSON_AddStringToObject(o, "h", h ? h : "");
    cJSON_AddStringToObject(o, "ud", ud ? (const char *)ud : "");
    int rc = rm_http_reply_json(resp, 200, o);
    cJSON_Delete(o);
    rm_http_add_header(resp, "X-Reply", "yes");
    return rc;
}

static int h_fail(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    return RM_EIO;
}

static int h_block(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    atomic_fetch_add(&g.entered, 1);
    double end = rm_mono() + 5;
    while (!atomic_load(&g.release) && rm_mono() < end)
        rm_sleep(0.002);
    return rm_http_reply_text(resp, 200, NULL, "released");
}

static int h_poll(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    atomic_fetch_add(&g.entered, 1);
    double end = rm_mono() + 8;
    while (!rm_http_stopping(g.srv) && rm_mono() < end)
        rm_sleep(0.002);
    return rm_http_reply_text(resp, 200, NULL, rm_http_stopping(g.srv) ? "stopped" : "timeout");
}

typedef struct {
    int i, n;
} counter_stream;
static ssize_t cs_read(void *ud, char *buf, size_t cap)
{
    counter_stream *c = ud;
    if (c->i >= c->n * 2)
        return -1;
    if (c->i++ % 2 == 0)
        return 0; /* "nothing yet" every other call */
    atomic_fetch_add(&g.chunks, 1);
    return snprintf(buf, cap, "line %d\n", c->i / 2);
}
static void cs_free(void *ud)
{
    free(ud);
    atomic_fetch_add(&g.freed, 1);
}
static int h_stream(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    counter_stream *c = calloc(1, sizeof *c);
    c->n = 5;
    resp->content_type = "text/plain";
    resp->stream = (rm_http_stream){cs_read, cs_free, c};
    return RM_OK;
}

static ssize_t idle_read(void *ud, char *buf, size_t cap)
{
    atomic_int *first = ud;
    if (atomic_exchange(first, 0))
        return snprintf(buf, cap, "hello\n");
    return 0;
}
static void idle_free(void *ud)
{
    free(ud);
    atomic_fetch_add(&g.freed, 1);
}
static int h_idle_stream(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    atomic_int *first = malloc(sizeof *first);
    atomic_init(first, 1);
    atomic_fetch_add(&g.entered, 1);
    resp->content_type = "text/plain";
    resp->stream = (rm_http_stream){idle_read, idle_free, first};
    return RM_OK;
}

static bool g_loop; /* start() starts the event-loop server */

static rm_http_server *start(const rm_http_route *rt, size_t n, size_t max_body)
{
    rm_http_opts o = {.bind = "127.0.0.1:0", .max_body = max_body, .event_loop = g_loop};
    rm_http_server *s = NULL;
    rm_err e = {0};
    int rc = rm_http_start(&o, rt, n, &s, &e);
    CU_ASSERT_EQUAL(rc, RM_OK);
    if (rc)
        fprintf(stderr, "start: %s\n", e.msg);
    memset(&g, 0, sizeof g);
    g.srv = s;
    return s;
}

static void url(char *buf, size_t cap, rm_http_server *s, const char *path)
{
    snprintf(buf, cap, "http://127.0.0.1:%d%s", rm_http_port(s), path);
}

static void test_routes_and_errors(void)
{
    static const rm_http_route rt[] = {
        {"GET", "/hello", 0, h_hello, "one"},
        {"POST", "/hello", 0, h_hello, "two"},
        {NULL, "/any/", 1, h_hello, "pre"},
        {"GET", "/fail", 0, h_fail, NULL},
    };
    rm_http_server *s = start(rt, RM_ARRAY_LEN(rt), 1024);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT(rm_http_port(s) > 0);
    rm_httpc *c = rm_httpc_new();
    rm_httpc_resp r;
    rm_err e = {0};
    char u[256];
    const char *hdrs[] = {"X-Test: tv", NULL};

    url(u, sizeof u, s, "/hello?q=a%20b");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, hdrs, NULL, 0, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    cJSON *j = rm_json_parse(r.body, r.len, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "method")->valuestring, "GET");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "path")->valuestring, "/hello");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "q")->valuestring, "a b");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "h")->valuestring, "tv");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "ip")->valuestring, "127.0.0.1");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "ud")->valuestring, "one");
    cJSON_Delete(j);
    rm_httpc_resp_free(&r);

    url(u, sizeof u, s, "/hello");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "POST", u, NULL, "payload", 7, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"body\":\"payload\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"ud\":\"two\""));
    rm_httpc_resp_free(&r);

    url(u, sizeof u, s, "/any/thing/deep");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "DELETE", u, NULL, NULL, 0, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"path\":\"/any/thing/deep\""));
    rm_httpc_resp_free(&r);

    /* 404 with a JSON body */
    url(u, sizeof u, s, "/nope");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 404);
    j = rm_json_parse(r.body, r.len, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_EQUAL(rm_json_path(j, "code")->valueint, 404);
    CU_ASSERT(cJSON_IsString(rm_json_path(j, "error")));
    cJSON_Delete(j);
    rm_httpc_resp_free(&r);

    /* 405 with a JSON body and Allow */
    url(u, sizeof u, s, "/hello");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "PUT", u, NULL, "x", 1, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 405);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"code\":405"));
    rm_httpc_resp_free(&r);
    const char raw405[] = "DELETE /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *raw = raw_http(rm_http_port(s), raw405, strlen(raw405));
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    CU_ASSERT_EQUAL(strncmp(raw, "HTTP/1.1 405", 12), 0);
    CU_ASSERT_PTR_NOT_NULL(strcasestr(raw, "\r\nAllow: GET, POST\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strcasestr(raw, "application/json"));
    free(raw);

    /* handler error → 500 JSON */
    url(u, sizeof u, s, "/fail");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 500);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"code\":500"));
    rm_httpc_resp_free(&r);

    /* response headers reach the client */
    const char rawget[] = "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    raw = raw_http(rm_http_port(s), rawget, strlen(rawget));
    CU_ASSERT_PTR_NOT_NULL(raw && strcasestr(raw, "\r\nX-Reply: yes\r\n"));
    free(raw);

    rm_httpc_free(c);
    rm_http_stop(s);
}

static void test_413(void)
{
    static const rm_http_route rt[] = {{"POST", "/in", 0, h_hello, NULL}};
    rm_http_server *s = start(rt, 1, 1000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char u[256];
    url(u, sizeof u, s, "/in");
    rm_httpc *c = rm_httpc_new();
    rm_httpc_resp r;
    rm_err e = {0};
    char *big = malloc(5000);
    memset(big, 'z', 5000);
    CU_ASSERT_EQUAL(rm_httpc_do(c, "POST", u, NULL, big, 1001, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 413);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"code\":413"));
    rm_httpc_resp_free(&r);
    /* exactly the cap is fine */
    CU_ASSERT_EQUAL(rm_httpc_do(c, "POST", u, NULL, big, 1000, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    rm_httpc_resp_free(&r);
    /* chunked upload without Content-Length: discovered while reading */
    char req[8192];
    int n = snprintf(req, sizeof req,
                     "POST /in HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; i++) {
        n += snprintf(req + n, sizeof req - (size_t)n, "258\r\n"); /* 600 bytes */
        memset(req + n, 'q', 600);
        n += 600;
        n += snprintf(req + n, sizeof req - (size_t)n, "\r\n");
    }
    n += snprintf(req + n, sizeof req - (size_t)n, "0\r\n\r\n");
    char *raw = raw_http(rm_http_port(s), req, (size_t)n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    if (g_loop) { /* the event loop takes Content-Length bodies only, and says so */
        CU_ASSERT_EQUAL(strncmp(raw, "HTTP/1.1 411", 12), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(raw, "\"code\":411"));
    } else {
        CU_ASSERT_EQUAL(strncmp(raw, "HTTP/1.1 413", 12), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(raw, "\"code\":413"));
    }
    free(raw);
    /* the server still works after that */
    CU_ASSERT_EQUAL(rm_httpc_do(c, "POST", u, NULL, "ok", 2, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    rm_httpc_resp_free(&r);
    free(big);
    rm_httpc_free(c);
    rm_http_stop(s);
}

typedef struct {
    char url[256];
    long status;
    char body[256];
    int rc;
} fetch_t;
static void *fetch_thread(void *arg)
{
    fetch_t *f = arg;
    rm_httpc_resp r;
    rm_err e = {0};
    f->rc = rm_httpc_get(f->url, 15000, &r, &e);
    f->status = r.status;
    snprintf(f->body, sizeof f->body, "%s", r.body ? r.body : "");
    rm_httpc_resp_free(&r);
    return NULL;
}

static void test_blocking_handler_does_not_block_others(void)
{
    static const rm_http_route rt[] = {
        {"GET", "/block", 0, h_block, NULL},
        {"GET", "/hello", 0, h_hello, NULL},
    };
    rm_http_server *s = start(rt, 2, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    fetch_t f = {0};
    url(f.url, sizeof f.url, s, "/block");
    pthread_t th;
    pthread_create(&th, NULL, fetch_thread, &f);
    double end = rm_mono() + 5;
    while (!atomic_load(&g.entered) && rm_mono() < end)
        rm_sleep(0.002);
    CU_ASSERT_EQUAL(atomic_load(&g.entered), 1);
    char u[256];
    url(u, sizeof u, s, "/hello");
    rm_httpc_resp r;
    rm_err e = {0};
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_httpc_get(u, 3000, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT(rm_mono() - t0 < 2.0);
    rm_httpc_resp_free(&r);
    CU_ASSERT_EQUAL(atomic_load(&g.release), 0); /* the blocked one is still blocked */
    atomic_store(&g.release, 1);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(f.status, 200);
    CU_ASSERT_STRING_EQUAL(f.body, "released");
    rm_http_stop(s);
}

static void test_streaming(void)
{
    static const rm_http_route rt[] = {{"GET", "/s", 0, h_stream, NULL}};
    rm_http_server *s = start(rt, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char u[256];
    url(u, sizeof u, s, "/s");
    rm_httpc_resp r;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_httpc_get(u, 5000, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_STRING_EQUAL(r.body, "line 1\nline 2\nline 3\nline 4\nline 5\n");
    rm_httpc_resp_free(&r);
    double end = rm_mono() + 2;
    while (!atomic_load(&g.freed) && rm_mono() < end)
        rm_sleep(0.002);
    CU_ASSERT_EQUAL(atomic_load(&g.freed), 1);
    CU_ASSERT_EQUAL(atomic_load(&g.chunks), 5);
    /* the reply is chunked */
    const char raw_req[] = "GET /s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *raw = raw_http(rm_http_port(s), raw_req, strlen(raw_req));
    CU_ASSERT_PTR_NOT_NULL(raw && strcasestr(raw, "Transfer-Encoding: chunked"));
    free(raw);
    rm_http_stop(s);
}

static void test_client_gone_frees_stream(void)
{
    static const rm_http_route rt[] = {{"GET", "/idle", 0, h_idle_stream, NULL}};
    rm_http_server *s = start(rt, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)rm_http_port(s))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CU_ASSERT_EQUAL_FATAL(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char req[] = "GET /idle HTTP/1.1\r\nHost: x\r\n\r\n";
    CU_ASSERT_EQUAL(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    char buf[512];
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
    CU_ASSERT(n > 0);
    close(fd); /* the stream never ends by itself; the server must notice we left */
    double end = rm_mono() + 3;
    while (!atomic_load(&g.freed) && rm_mono() < end)
        rm_sleep(0.005);
    CU_ASSERT_EQUAL(atomic_load(&g.freed), 1);
    rm_http_stop(s);
}

static void test_graceful_stop_with_long_poll(void)
{
    static const rm_http_route rt[] = {
        {"GET", "/poll", 0, h_poll, NULL},
        {"GET", "/idle", 0, h_idle_stream, NULL},
    };
    rm_http_server *s = start(rt, 2, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    fetch_t f = {0}, f2 = {0};
    url(f.url, sizeof f.url, s, "/poll");
    url(f2.url, sizeof f2.url, s, "/idle");
    pthread_t th, th2;
    pthread_create(&th, NULL, fetch_thread, &f);
    pthread_create(&th2, NULL, fetch_thread, &f2);
    double end = rm_mono() + 5;
    while (atomic_load(&g.entered) < 2 && rm_mono() < end)
        rm_sleep(0.002);
    CU_ASSERT_EQUAL(atomic_load(&g.entered), 2);
    rm_sleep(0.05);
    double t0 = rm_mono();
    rm_http_stop(s);
    CU_ASSERT(rm_mono() - t0 < 3.0);
    pthread_join(th, NULL);
    pthread_join(th2, NULL);
    /* the long poll saw stopping and its answer was delivered */
    CU_ASSERT_EQUAL(f.rc, RM_OK);
    CU_ASSERT_EQUAL(f.status, 200);
    CU_ASSERT_STRING_EQUAL(f.body, "stopped");
    /* the stream was ended cleanly and freed */
    CU_ASSERT_EQUAL(f2.status, 200);
    CU_ASSERT_STRING_EQUAL(f2.body, "hello\n");
    CU_ASSERT_EQUAL(atomic_load(&g.freed), 1);
    rm_http_stop(NULL);
}

/* A parked long poll (event-loop server) whose client has gone when the answer comes: the MHD
 * thread completes the resumed connection and frees its request at once, perhaps before
 * rm_http_unpark's thread has released the server's parking lock. unpark must not read the freed
 * request after resuming it (a use-after-free ASan reports; in a release build the unlock went to a
 * stale address, the lock stayed held and the next answer deadlocked the rendezvous, or the
 * process crashed). 200 rounds of park, client gone, unpark from another thread; then the server
 * still answers, and every request was freed. */
static _Atomic(rm_http_parked *) g_parked;
static int h_park(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    (void)resp;
    (void)ud;
    atomic_store(&g_parked, rm_http_park(req));
    return RM_OK;
}
static int h_ok(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    (void)req;
    (void)ud;
    return rm_http_reply_text(resp, 200, "text/plain", "ok");
}

static void slow_after_resume(void)
{
    rm_sleep(0.005); /* the MHD thread completes the gone client's request meanwhile */
}

static void test_unpark_after_client_gone(void)
{
    rm_http_test_after_resume = slow_after_resume;
    static const rm_http_route rt[] = {{"POST", "/park", 0, h_park, NULL}, {"GET", "/ok", 0, h_ok, NULL}};
    rm_http_opts o = {.bind = "127.0.0.1:0", .event_loop = true};
    rm_http_server *s = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_http_start(&o, rt, 2, &s, &e), RM_OK);
    int port = rm_http_port(s);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    const char req[] = "POST /park HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: 13\r\n\r\n{\"worker\": 1}";
    int parked = 0;
    for (int i = 0; i < 200; i++) {
        atomic_store(&g_parked, NULL);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        CU_ASSERT_FATAL(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
        CU_ASSERT(send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1));
        double end = rm_mono() + 5;
        while (!atomic_load(&g_parked) && rm_mono() < end)
            rm_sleep(0.0005);
        rm_http_parked *t = atomic_load(&g_parked);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        parked++;
        if (i % 4 < 2) { /* half the rounds the client resets the connection, half it closes it */
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        }
        close(fd); /* the client gives up */
        if (i % 2)
            rm_sleep(0.001); /* half the rounds: MHD may see the close before the answer */
        rm_http_resp r;
        memset(&r, 0, sizeof r);
        rm_http_reply_text(&r, 200, "text/plain", "late");
        rm_http_unpark(t, &r);
    }
    CU_ASSERT_EQUAL(parked, 200);
    char u[64];
    url(u, sizeof u, s, "/ok");
    rm_httpc_resp hr;
    memset(&hr, 0, sizeof hr);
    CU_ASSERT_EQUAL(rm_httpc_get(u, 2000, &hr, &e), RM_OK); /* not deadlocked */
    CU_ASSERT_EQUAL(hr.status, 200);
    rm_httpc_resp_free(&hr);
    double t0 = rm_mono();
    rm_http_stop(s); /* waits for every request to be freed (bounded) */
    CU_ASSERT(rm_mono() - t0 < 3.0);
    rm_http_test_after_resume = NULL;
}

typedef struct {
    rm_http_blob *b;
    atomic_int stop;
    int sets;
} blob_writer;
static void *blob_thread(void *arg)
{
    blob_writer *w = arg;
    char buf[4096];
    for (int i = 0; !atomic_load(&w->stop); i++) {
        /* self-checking content: n copies of one digit */
        int n = 1 + (i * 37) % 4000;
        memset(buf, '0' + i % 10, (size_t)n);
        rm_http_blob_set(w->b, buf, (size_t)n);
        w->sets++;
    }
    return NULL;
}

static void test_blob_concurrent(void)
{
    rm_http_blob *b = rm_http_blob_new("text/plain; version=0.0.4");
    rm_http_route rt[] = {{"GET", "/blob", 0, rm_http_blob_handler, b}};
    rm_http_server *s = start(rt, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char u[256];
    url(u, sizeof u, s, "/blob");
    rm_httpc *c = rm_httpc_new();
    rm_httpc_resp r;
    rm_err e = {0};
    /* empty blob: 200 with empty body */
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(r.len, 0);
    rm_httpc_resp_free(&r);
    blob_writer w = {.b = b};
    pthread_t th;
    pthread_create(&th, NULL, blob_thread, &w);
    int consistent = 0, nonempty = 0;
    for (int i = 0; i < 150; i++) {
        CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 5000, 0, &r, &e), RM_OK);
        int ok = r.status == 200;
        if (r.len > 0)
            nonempty++;
        for (size_t k = 1; k < r.len; k++)
            if (r.body[k] != r.body[0])
                ok = 0;
        consistent += ok;
        rm_httpc_resp_free(&r);
    }
    atomic_store(&w.stop, 1);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(consistent, 150);
    CU_ASSERT(nonempty > 0);
    CU_ASSERT(w.sets > 1);
    size_t len;
    char *copy = rm_http_blob_get(b, &len);
    CU_ASSERT_EQUAL(strlen(copy), len);
    free(copy);
    rm_httpc_free(c);
    rm_http_stop(s);
    rm_http_blob_free(b);
    rm_http_blob_free(NULL);
}

static void test_parse_addr_and_bind_errors(void)
{
    char h[64];
    int p;
    CU_ASSERT_EQUAL(rm_http_parse_addr("127.0.0.1:8080", h, sizeof h, &p), RM_OK);
    CU_ASSERT_STRING_EQUAL(h, "127.0.0.1");
    CU_ASSERT_EQUAL(p, 8080);
    CU_ASSERT_EQUAL(rm_http_parse_addr(":9090", h, sizeof h, &p), RM_OK);
    CU_ASSERT_STRING_EQUAL(h, "0.0.0.0");
    CU_ASSERT_EQUAL(p, 9090);
    CU_ASSERT_EQUAL(rm_http_parse_addr("[::1]:0", h, sizeof h, &p), RM_OK);
    CU_ASSERT_STRING_EQUAL(h, "::1");
    CU_ASSERT_EQUAL(p, 0);
    CU_ASSERT_EQUAL(rm_http_parse_addr("127.0.0.1", h, sizeof h, &p), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_http_parse_addr("127.0.0.1:99999", h, sizeof h, &p), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_http_parse_addr("127.0.0.1:x", h, sizeof h, &p), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_http_parse_addr("::1:80", h, sizeof h, &p), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_http_parse_addr("", h, sizeof h, &p), RM_EINVAL);

    static const rm_http_route rt[] = {{"GET", "/hello", 0, h_hello, NULL}};
    rm_http_server *s = start(rt, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", rm_http_port(s));
    rm_http_opts o = {.bind = addr};
    rm_http_server *s2 = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_http_start(&o, rt, 1, &s2, &e), RM_EIO);
    CU_ASSERT_PTR_NULL(s2);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "in use"));
    o.bind = "not-an-ip:80";
    CU_ASSERT_EQUAL(rm_http_start(&o, rt, 1, &s2, &e), RM_EINVAL);
    o.bind = "garbage";
    CU_ASSERT_EQUAL(rm_http_start(&o, rt, 1, &s2, &e), RM_EINVAL);
    rm_http_stop(s);
}

static int h_big(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    char *b = malloc(100001);
    memset(b, 'b', 100000);
    b[100000] = 0;
    resp->body = b;
    resp->content_type = "text/plain";
    rm_http_add_header(resp, "Retry-After", "7");
    return RM_OK;
}

static void test_client_caps_and_timeouts(void)
{
    static const rm_http_route rt[] = {
        {"GET", "/big", 0, h_big, NULL},
        {"GET", "/block", 0, h_block, NULL},
    };
    rm_http_server *s = start(rt, 2, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char u[256];
    rm_httpc *c = rm_httpc_new();
    rm_httpc_resp r;
    rm_err e = {0};
    url(u, sizeof u, s, "/big");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 5000, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.len, 100000);
    CU_ASSERT_DOUBLE_EQUAL(r.retry_after, 7.0, 1e-9);
    rm_httpc_resp_free(&r);
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 5000, 1000, &r, &e), RM_ETOOBIG);
    CU_ASSERT(r.len <= 1000);
    CU_ASSERT_PTR_NOT_NULL(r.body);
    rm_httpc_resp_free(&r);
    /* bounded wait */
    url(u, sizeof u, s, "/block");
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 200, 0, &r, &e), RM_ETIMEDOUT);
    CU_ASSERT(rm_mono() - t0 < 2.0);
    rm_httpc_resp_free(&r);
    atomic_store(&g.release, 1);
    rm_http_stop(s);
    /* nothing listening */
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 2000, 0, &r, &e), RM_EIO);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_EQUAL(r.retry_after, -1);
    rm_httpc_resp_free(&r);
    rm_httpc_free(c);
    rm_httpc_free(NULL);
}

/* max_body = SIZE_MAX ("no cap") used to wrap the cap + 1 clamp to 0 bytes and overflow the heap
 * on the first append, in the server's request body and in the client's response body. */
static void test_uncapped_bodies(void)
{
    static const rm_http_route rt[] = {
        {"POST", "/in", 0, h_hello, NULL},
        {"GET", "/big", 0, h_big, NULL},
    };
    rm_http_server *s = start(rt, RM_ARRAY_LEN(rt), SIZE_MAX);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    char u[256];
    rm_httpc *c = rm_httpc_new();
    rm_httpc_resp r;
    rm_err e = {0};
    char *body = malloc(20000);
    memset(body, 'b', 20000);
    url(u, sizeof u, s, "/in");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "POST", u, NULL, body, 20000, 5000, SIZE_MAX, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    cJSON *j = rm_json_parse(r.body, r.len, &e);
    CU_ASSERT(j && cJSON_IsString(rm_json_path(j, "body")) &&
              strlen(rm_json_path(j, "body")->valuestring) == 20000);
    cJSON_Delete(j);
    rm_httpc_resp_free(&r);
    url(u, sizeof u, s, "/big");
    CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 5000, SIZE_MAX, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.len, 100000);
    CU_ASSERT(r.body && r.body[r.len] == 0);
    rm_httpc_resp_free(&r);
    free(body);
    rm_httpc_free(c);
    rm_http_stop(s);
}

static int h_retry_after(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    const char *v = rm_http_query(req, "v");
    rm_http_add_header(resp, "Retry-After", v ? v : "");
    return rm_http_reply_text(resp, 503, NULL, "busy");
}

/* Retry-After is delay-seconds (1*DIGIT) or an HTTP-date; anything else (an exponent that
 * overflows to infinity, a fraction, hex) is no hint at all rather than an unbounded wait. */
static void test_retry_after_strict(void)
{
    static const rm_http_route rt[] = {{"GET", "/ra", 0, h_retry_after, NULL}};
    rm_http_server *s = start(rt, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    static const struct {
        const char *q;
        double want;
    } cases[] = {
        {"120", 120}, {"0", 0},      {"1e999", -1}, {"1.5", -1},
        {"0x10", -1}, {"12abc", -1}, {"-3", -1},    {"Wed%2C%2021%20Oct%202015%2007%3A28%3A00%20GMT", 0},
    };
    rm_httpc *c = rm_httpc_new();
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        char u[256], path[128];
        snprintf(path, sizeof path, "/ra?v=%s", cases[i].q);
        url(u, sizeof u, s, path);
        rm_httpc_resp r;
        rm_err e = {0};
        CU_ASSERT_EQUAL(rm_httpc_do(c, "GET", u, NULL, NULL, 0, 5000, 0, &r, &e), RM_OK);
        CU_ASSERT_EQUAL(r.status, 503);
        if (r.retry_after != cases[i].want)
            fprintf(stderr, "Retry-After %s -> %g (want %g)\n", cases[i].q, r.retry_after, cases[i].want);
        CU_ASSERT_EQUAL(r.retry_after, cases[i].want);
        rm_httpc_resp_free(&r);
    }
    rm_httpc_free(c);
    rm_http_stop(s);
}

/* The buffer both bodies use: exact cap ok, one byte over refused without change, the
 * allocation never past max + 1, and sizes near SIZE_MAX refused instead of wrapping. */
static void test_capbuf(void)
{
    rm_capbuf b = {.max = 10};
    CU_ASSERT_EQUAL(rm_capbuf_append(&b, "", 0), RM_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.b);
    CU_ASSERT_STRING_EQUAL(b.b, "");
    CU_ASSERT_EQUAL(rm_capbuf_append(&b, "0123456", 7), RM_OK);
    CU_ASSERT_EQUAL(rm_capbuf_append(&b, "789x", 4), RM_ETOOBIG);
    CU_ASSERT_EQUAL(b.len, 7);
    CU_ASSERT_STRING_EQUAL(b.b, "0123456");
    CU_ASSERT_EQUAL(rm_capbuf_append(&b, "789", 3), RM_OK);
    CU_ASSERT_STRING_EQUAL(b.b, "0123456789");
    CU_ASSERT_EQUAL(b.cap, 11);
    CU_ASSERT_EQUAL(rm_capbuf_append(&b, "x", 1), RM_ETOOBIG);
    rm_capbuf_free(&b);
    CU_ASSERT_PTR_NULL(b.b);
    CU_ASSERT_EQUAL(b.len, 0);
    CU_ASSERT_EQUAL(b.max, 10);
    rm_capbuf u = {.max = SIZE_MAX};
    CU_ASSERT_EQUAL(rm_capbuf_append(&u, "abc", 3), RM_OK);
    CU_ASSERT_EQUAL(u.cap, 4096);
    CU_ASSERT_EQUAL(rm_capbuf_append(&u, "abc", SIZE_MAX - 3), RM_ETOOBIG);
    CU_ASSERT_EQUAL(rm_capbuf_append(&u, "abc", SIZE_MAX), RM_ETOOBIG);
    CU_ASSERT_STRING_EQUAL(u.b, "abc");
    rm_capbuf_free(&u);
    rm_capbuf_free(NULL);
}

/* ---- slow flood (docs/architecture.md#robustness) ---- */

typedef struct {
    char url[128];
    long status;
    char body[64];
} poll_call;
static void *long_call(void *arg)
{
    poll_call *pc = arg;
    rm_httpc_resp r;
    rm_err e = {0};
    if (rm_httpc_get(pc->url, 9000, &r, &e) == RM_OK) {
        pc->status = r.status;
        snprintf(pc->body, sizeof pc->body, "%s", r.body);
    }
    rm_httpc_resp_free(&r);
    return NULL;
}

static int flood_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    poll(&p, 1, 1000);
    static const char part[] = "GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    (void)send(fd, part, sizeof part - 1, MSG_NOSIGNAL);
    return fd;
}

/* 1 if the server closed fd (EOF/reset); drains what it sent. */
static int flood_closed(int fd)
{
    char b[512];
    for (;;) {
        ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (k == 0)
            return 1;
        if (k < 0)
            return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    }
}

/* Opens n flood connections (each with its request started, never finished) into fds; returns how
 * many opened. */
static int flood_fill(int port, int *fds, int n)
{
    int nf = 0;
    for (int i = 0; i < n; i++) {
        int fd = flood_open(port);
        if (fd >= 0)
            fds[nf++] = fd;
    }
    return nf;
}

/* Trickles a byte every 0.25 s on each of the nf flood connections until the server has closed
 * them all or `seconds` pass; returns how many it closed. */
static int flood_trickle(const int *fds, int nf, double seconds)
{
    int closed = 0;
    char *gone = calloc((size_t)nf, 1);
    for (double end = rm_mono() + seconds; rm_mono() < end && closed < nf;) {
        for (int i = 0; i < nf; i++) {
            if (gone[i])
                continue;
            if (flood_closed(fds[i])) {
                gone[i] = 1;
                closed++;
            } else {
                (void)send(fds[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            }
        }
        rm_sleep(0.25);
    }
    free(gone);
    return closed;
}

/* A bounded version of the probe: 300 never-finished requests (one byte every 0.5 s) against a
 * server capped at 200 connections. Before the fix they filled it and every new request was
 * refused; now the legit request answers at once, the flood is cut by the header deadline and the
 * per-address cap, and a long poll in its handler is never cut. */
static void test_slow_flood(void)
{
    enum { FLOOD = 300 };
    static const rm_http_route rt[] = {
        {"GET", "/hello", 0, h_hello, NULL},
        {"GET", "/block", 0, h_block, NULL},
    };
    rm_http_opts o = {.bind = "127.0.0.1:0", .max_conns = 200, .header_timeout_s = 2};
    rm_http_server *s = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_http_start(&o, rt, 2, &s, &e), RM_OK);
    memset(&g, 0, sizeof g);
    g.srv = s;
    int port = rm_http_port(s);
    poll_call lp = {.status = 0};
    url(lp.url, sizeof lp.url, s, "/block");
    pthread_t th;
    pthread_create(&th, NULL, long_call, &lp);
    for (int i = 0; i < 200 && !atomic_load(&g.entered); i++)
        rm_sleep(0.01);
    CU_ASSERT_EQUAL(atomic_load(&g.entered), 1);

    int fds[FLOOD], nf = flood_fill(port, fds, FLOOD);
    CU_ASSERT(nf >= FLOOD - 5);
    rm_sleep(0.5); /* the flood is in (and holding slots): a legit request comes along */
    /* a legit request during the flood answers promptly */
    char u[128];
    url(u, sizeof u, s, "/hello");
    rm_httpc_resp r;
    double t0 = rm_mono();
    int rc = rm_httpc_get(u, 3000, &r, &e);
    double took = rm_mono() - t0;
    CU_ASSERT_EQUAL(rc, RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT(took < 2.0);
    rm_httpc_resp_free(&r);
    /* keep trickling; every flood connection is cut within the header deadline + slack */
    int closed = flood_trickle(fds, nf, 3.0);
    CU_ASSERT_EQUAL(closed, nf);
    CU_ASSERT(rm_http_cut_count(s) >= (unsigned long)nf);
    fprintf(stderr, "    legit request %.3f s during a %d-connection slow flood; %d cut (%lu counted)\n",
            took, nf, closed, rm_http_cut_count(s));
    for (int i = 0; i < nf; i++)
        close(fds[i]);
    /* the long poll survived the flood */
    atomic_store(&g.release, 1);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(lp.status, 200);
    CU_ASSERT_STRING_EQUAL(lp.body, "released");
    rm_http_stop(s);
}

/* ---- the event-loop server ---- */

#define LOOP_VARIANT(name)        \
    static void name##_loop(void) \
    {                             \
        g_loop = true;            \
        name();                   \
        g_loop = false;           \
    }
LOOP_VARIANT(test_routes_and_errors)
LOOP_VARIANT(test_413)
LOOP_VARIANT(test_blob_concurrent)
LOOP_VARIANT(test_uncapped_bodies)
LOOP_VARIANT(test_retry_after_strict)

/* A connected socket to 127.0.0.1:port with a 3 s receive timeout; -1 on failure. */
static int raw_conn(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads from fd until `want` replies ("HTTP/1.1 " status lines, 100 Continue not counted) have
 * arrived whole (by Content-Length), or the peer closes, or 3 s pass. Owned text. */
static char *raw_replies(int fd, int want)
{
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap + 1);
    b[0] = 0;
    for (;;) {
        int got = 0;
        const char *p = b;
        for (;;) { /* count whole replies */
            const char *h = strstr(p, "HTTP/1.1 ");
            if (!h)
                break;
            const char *he = strstr(h, "\r\n\r\n");
            if (!he)
                break;
            if (strncmp(h, "HTTP/1.1 100", 12) == 0) {
                p = he + 4;
                continue;
            }
            const char *cl = strcasestr(h, "Content-Length: ");
            size_t len = cl && cl < he ? strtoul(cl + 16, NULL, 10) : 0;
            if ((size_t)(b + n - (he + 4)) < len)
                break;
            got++;
            p = he + 4 + len;
        }
        if (got >= want || n == cap)
            break;
        ssize_t r = recv(fd, b + n, cap - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
        b[n] = 0;
    }
    return b;
}

static int count_of(const char *hay, const char *needle)
{
    int k = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        k++;
    return k;
}

/* 1 when the server has closed fd within 3 s (EOF or reset), after whatever it sent. */
static int raw_closed(int fd)
{
    char b[4096];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof b, 0);
        if (r == 0)
            return 1;
        if (r < 0)
            return errno == ECONNRESET;
    }
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* The event loop's own parser: every malformed request is refused with its status and the
 * connection closed; well-formed ones are served whether they come whole, a byte at a time or
 * several in one packet, and a refused body is drained so the connection serves on. */
static void test_loop_parser(void)
{
    static const rm_http_route rt[] = {{"GET", "/hello", 0, h_hello, NULL},
                                       {"POST", "/hello", 0, h_hello, NULL}};
    g_loop = true;
    rm_http_server *s = start(rt, 2, 1000);
    g_loop = false;
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int port = rm_http_port(s);
    static const struct {
        const char *req;
        const char *status;
    } bad[] = {
        {"\x16\x03\x01\x02\x7f\x01\xfc\x03\x03 garbage\r\n\r\n", "HTTP/1.1 400"},
        {"GET /hello\r\n\r\n", "HTTP/1.1 400"},
        {"GET hello HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
        {"GET /hello HTTP/2.0\r\n\r\n", "HTTP/1.1 505"},
        {"G(T /hello HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
        {"GET /hello HTTP/1.1\r\nNoColon\r\n\r\n", "HTTP/1.1 400"},
        {"GET /hello HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", "HTTP/1.1 400"},
        {"GET /he%00llo HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
        {"GET /he%zzllo HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
        {"POST /hello HTTP/1.1\r\nContent-Length: 12x\r\n\r\n", "HTTP/1.1 400"},
        {"POST /hello HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", "HTTP/1.1 400"},
        {"POST /hello HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", "HTTP/1.1 400"},
        {"POST /hello HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "HTTP/1.1 411"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(bad); i++) {
        int fd = raw_conn(port);
        CU_ASSERT_FATAL(fd >= 0);
        send_all(fd, bad[i].req, strlen(bad[i].req));
        char *r = raw_replies(fd, 1);
        if (strncmp(r, bad[i].status, strlen(bad[i].status)) != 0 || !strstr(r, "\"code\":"))
            fprintf(stderr, "    case %zu: got \"%.60s\"\n", i, r);
        CU_ASSERT_EQUAL(strncmp(r, bad[i].status, strlen(bad[i].status)), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"code\":"));
        CU_ASSERT_EQUAL(raw_closed(fd), 1);
        free(r);
        close(fd);
    }
    /* a NUL inside a header */
    {
        static const char nul[] = "GET /hello HTTP/1.1\r\nX-Test: a\0b\r\n\r\n";
        int fd = raw_conn(port);
        send_all(fd, nul, sizeof nul - 1);
        char *r = raw_replies(fd, 1);
        CU_ASSERT_EQUAL(strncmp(r, "HTTP/1.1 400", 12), 0);
        CU_ASSERT_EQUAL(raw_closed(fd), 1);
        free(r);
        close(fd);
    }
    /* headers past the cap: 431 and closed */
    {
        size_t n = 10000;
        char *big = malloc(n + 64);
        int k = snprintf(big, 64, "GET /hello HTTP/1.1\r\nX-Big: ");
        memset(big + k, 'a', n);
        int fd = raw_conn(port);
        send_all(fd, big, (size_t)k + n);
        char *r = raw_replies(fd, 1);
        CU_ASSERT_EQUAL(strncmp(r, "HTTP/1.1 431", 12), 0);
        CU_ASSERT_EQUAL(raw_closed(fd), 1);
        free(r);
        free(big);
        close(fd);
    }
    /* one connection: a request a byte at a time, then three pipelined in one send (answered in
     * order), a HEAD (headers, no body), a 413 whose body is drained, then one more on the same
     * connection; Expect: 100-continue gets its interim reply */
    int fd = raw_conn(port);
    CU_ASSERT_FATAL(fd >= 0);
    const char one[] = "GET /hello?q=%41+b HTTP/1.1\r\nHost: x\r\nX-Test: slow\r\n\r\n";
    for (size_t i = 0; i < sizeof one - 1; i++) {
        send_all(fd, one + i, 1);
        rm_sleep(0.001);
    }
    char *r = raw_replies(fd, 1);
    CU_ASSERT_EQUAL(strncmp(r, "HTTP/1.1 200", 12), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"q\":\"A b\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"h\":\"slow\""));
    free(r);
    const char three[] = "GET /hello?q=1 HTTP/1.1\r\nHost: x\r\n\r\n"
                         "POST /hello?q=2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                         "GET /hello?q=3 HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(fd, three, sizeof three - 1);
    r = raw_replies(fd, 3);
    CU_ASSERT_EQUAL(count_of(r, "HTTP/1.1 200"), 3);
    const char *a = strstr(r, "\"q\":\"1\""), *b2 = strstr(r, "\"q\":\"2\""), *c3 = strstr(r, "\"q\":\"3\"");
    CU_ASSERT(a && b2 && c3 && a < b2 && b2 < c3);
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"body\":\"hello\""));
    free(r);
    const char head[] = "HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    send_all(fd, head, sizeof head - 1);
    rm_sleep(0.1);
    char hb[2048];
    ssize_t hn = recv(fd, hb, sizeof hb - 1, 0);
    CU_ASSERT(hn > 0);
    hb[hn > 0 ? hn : 0] = 0;
    CU_ASSERT_EQUAL(strncmp(hb, "HTTP/1.1 200", 12), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(hb, "\r\n\r\n"));
    CU_ASSERT_PTR_NULL(strstr(hb, "\"method\"")); /* no body */
    char over[1600];
    int on = snprintf(over, sizeof over, "POST /hello HTTP/1.1\r\nHost: x\r\nContent-Length: 1500\r\n\r\n");
    send_all(fd, over, (size_t)on);
    r = raw_replies(fd, 1);
    CU_ASSERT_EQUAL(strncmp(r, "HTTP/1.1 413", 12), 0);
    free(r);
    memset(over, 'z', 1500);
    send_all(fd, over, 1500); /* drained */
    const char exp[] =
        "POST /hello?q=4 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    send_all(fd, exp, sizeof exp - 1);
    rm_sleep(0.05);
    send_all(fd, "ok", 2);
    r = raw_replies(fd, 1);
    CU_ASSERT_EQUAL(strncmp(r, "HTTP/1.1 100 Continue\r\n\r\n", 25), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "HTTP/1.1 200"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"q\":\"4\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\"body\":\"ok\""));
    free(r);
    /* Connection: close is honoured */
    const char bye[] = "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    send_all(fd, bye, sizeof bye - 1);
    r = raw_replies(fd, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "Connection: close"));
    CU_ASSERT_EQUAL(raw_closed(fd), 1);
    free(r);
    close(fd);
    /* HTTP/1.0: answered, then closed */
    fd = raw_conn(port);
    const char old[] = "GET /hello HTTP/1.0\r\n\r\n";
    send_all(fd, old, sizeof old - 1);
    r = raw_replies(fd, 1);
    CU_ASSERT_EQUAL(strncmp(r, "HTTP/1.1 200", 12), 0);
    CU_ASSERT_EQUAL(raw_closed(fd), 1);
    free(r);
    close(fd);
    rm_http_stop(s);
}

/* A parked long poll survives a slow flood on the event loop, the flood is cut (the per-address
 * cap, then the header deadline), a legit request answers at once, and the long poll's answer,
 * given from another thread, arrives. */
static void test_loop_slow_flood(void)
{
    enum { FLOOD = 300 };
    static const rm_http_route rt[] = {{"GET", "/hello", 0, h_hello, NULL},
                                       {"GET", "/park", 0, h_park, NULL}};
    rm_http_opts o = {.bind = "127.0.0.1:0", .max_conns = 200, .header_timeout_s = 2, .event_loop = true};
    rm_http_server *s = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_http_start(&o, rt, 2, &s, &e), RM_OK);
    int port = rm_http_port(s);
    atomic_store(&g_parked, NULL);
    poll_call lp = {.status = 0};
    url(lp.url, sizeof lp.url, s, "/park");
    pthread_t th;
    pthread_create(&th, NULL, long_call, &lp);
    for (int i = 0; i < 300 && !atomic_load(&g_parked); i++)
        rm_sleep(0.01);
    CU_ASSERT_PTR_NOT_NULL_FATAL(atomic_load(&g_parked));
    int fds[FLOOD], nf = flood_fill(port, fds, FLOOD);
    CU_ASSERT(nf >= FLOOD - 5);
    rm_sleep(0.3);
    char u[128];
    url(u, sizeof u, s, "/hello");
    rm_httpc_resp r;
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(rm_httpc_get(u, 3000, &r, &e), RM_OK);
    double took = rm_mono() - t0;
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT(took < 2.0);
    rm_httpc_resp_free(&r);
    int closed = flood_trickle(fds, nf, 3.5);
    CU_ASSERT_EQUAL(closed, nf);
    CU_ASSERT(rm_http_cut_count(s) >= (unsigned long)nf);
    for (int i = 0; i < nf; i++)
        close(fds[i]);
    rm_http_resp ans;
    memset(&ans, 0, sizeof ans);
    rm_http_reply_text(&ans, 200, "text/plain", "released");
    rm_http_unpark(atomic_load(&g_parked), &ans);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(lp.status, 200);
    CU_ASSERT_STRING_EQUAL(lp.body, "released");
    rm_http_stop(s);
}

void rm_suite_http(void)
{
    static const rm_test_case cases[] = {
        {"routes_and_errors", test_routes_and_errors},
        {"413_oversize_body", test_413},
        {"blocking_handler_does_not_block_others", test_blocking_handler_does_not_block_others},
        {"streaming", test_streaming},
        {"client_gone_frees_stream", test_client_gone_frees_stream},
        {"unpark_after_client_gone", test_unpark_after_client_gone},
        {"graceful_stop_with_long_poll", test_graceful_stop_with_long_poll},
        {"blob_concurrent", test_blob_concurrent},
        {"parse_addr_and_bind_errors", test_parse_addr_and_bind_errors},
        {"client_caps_and_timeouts", test_client_caps_and_timeouts},
        {"uncapped_bodies_do_not_overflow", test_uncapped_bodies},
        {"capbuf_caps_and_overflow", test_capbuf},
        {"retry_after_strict", test_retry_after_strict},
        {"slow_flood_cannot_silence", test_slow_flood},
        {"routes_and_errors_loop", test_routes_and_errors_loop},
        {"413_oversize_body_loop", test_413_loop},
        {"blob_concurrent_loop", test_blob_concurrent_loop},
        {"uncapped_bodies_do_not_overflow_loop", test_uncapped_bodies_loop},
        {"retry_after_strict_loop", test_retry_after_strict_loop},
        {"loop_parser", test_loop_parser},
        {"loop_slow_flood_cannot_silence", test_loop_slow_flood},
    };
    RM_ADD_SUITE("http", NULL, NULL, cases);
}
