/* client.h — the Kubernetes API client of the operator: configuration (kubeconfig or in-cluster),
 * TLS and authentication, client-side QPS/burst limiting, retries, capped bodies, and streaming
 * (watch) requests parsed line by line.
 *
 * Design: only the surface the operator uses, written by hand over libcurl. One rm_kube_client is
 * shared by every thread; it keeps a small pool of CURL easy handles (each keeps its connection
 * alive), so requests from several threads run in parallel and reuse connections. TLS verification
 * is on unless the kubeconfig says `insecure-skip-tls-verify: true`. Requests wait on a token
 * bucket (qps, burst) before going out; 429 and 5xx answers and transport errors are retried with
 * exponential back-off (Retry-After honoured, capped); a 401 re-reads the token file once and
 * retries. Every body is capped (RM_ETOOBIG past the cap).
 *
 * Ownership: rm_kube_config members are owned by the config (rm_kube_config_free). The client copies
 * the config it is given. rm_kube_resp bodies are owned by the caller (rm_kube_resp_free). */
#ifndef RM_KUBE_CLIENT_H
#define RM_KUBE_CLIENT_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "common/rm.h"

/* ---------------- configuration ---------------- */
typedef struct rm_kube_config {
    char *server;     /* "https://10.0.0.1:443" or "http://127.0.0.1:PORT" (no trailing /) */
    char *namespace_; /* context / service-account namespace; NULL = "default" */
    char *token;      /* static bearer token, or the last one read from token_file */
    char *token_file; /* re-read at least every 60 s and after a 401 */
    char *ca_file, *cert_file, *key_file;
    unsigned char *ca_data, *cert_data, *key_data; /* decoded PEM blobs (from *-data fields) */
    size_t ca_len, cert_len, key_len;
    bool insecure; /* insecure-skip-tls-verify: only when the kubeconfig sets it */
} rm_kube_config;

/* Parse a kubeconfig (YAML) text; `dir` is the folder relative file paths resolve against (may be
 * NULL = cwd). `context` NULL = current-context. Errors name the missing piece. */
int rm_kube_config_parse(const char *text, size_t len, const char *dir, const char *context,
                         rm_kube_config *out, rm_err *err);
/* Read the file (capped at 4 MiB) and parse it. */
int rm_kube_config_load(const char *path, const char *context, rm_kube_config *out, rm_err *err);
/* In-cluster: KUBERNETES_SERVICE_HOST/_PORT → https://host:port; files token, ca.crt, namespace
 * under sa_dir (NULL → env RINGMASTER_SA_DIR, else /var/run/secrets/kubernetes.io/serviceaccount). */
int rm_kube_config_in_cluster(const char *sa_dir, rm_kube_config *out, rm_err *err);
/* --kubeconfig FILE, else $KUBECONFIG (first entry), else in-cluster, else ~/.kube/config. */
int rm_kube_config_auto(const char *kubeconfig, rm_kube_config *out, rm_err *err);
int rm_kube_config_copy(rm_kube_config *dst, const rm_kube_config *src);
void rm_kube_config_free(rm_kube_config *c); /* frees members, zeroes; NULL ok */

/* ---------------- token bucket (client-side rate limit) ---------------- */
typedef struct rm_kube_bucket {
    pthread_mutex_t mu;
    double qps, burst, tokens, last; /* last: the `now` of the previous reservation */
} rm_kube_bucket;
/* qps <= 0 disables limiting. */
void rm_kube_bucket_init(rm_kube_bucket *b, double qps, int burst, double now);
void rm_kube_bucket_destroy(rm_kube_bucket *b);
/* Reserve one token at time `now` (seconds, monotonic); returns how long the caller must wait
 * before acting (0 when a token was available). Reservations queue: tokens may go negative. */
double rm_kube_bucket_reserve(rm_kube_bucket *b, double now);

/* ---------------- watch line splitter ---------------- */
/* Splits a byte stream into '\n'-terminated lines with a capped buffer. A line longer than `cap`
 * is dropped whole (its remaining bytes are skipped up to the next newline) and counted in
 * `oversized`; fn is told once with line == NULL (len 0) so a watcher can re-list instead of
 * missing the change; the stream then continues with the next line. Empty lines are ignored. */
typedef int (*rm_kube_line_fn)(void *ud, char *line, size_t len); /* line NUL-terminated; <0 stops */
typedef struct rm_kube_lines {
    char *buf;
    size_t len, alloc, cap;
    bool skipping;
    unsigned long oversized;
    rm_kube_line_fn fn;
    void *ud;
} rm_kube_lines;
void rm_kube_lines_init(rm_kube_lines *l, size_t cap, rm_kube_line_fn fn, void *ud);
/* Feed bytes; returns RM_OK, RM_ENOMEM, or the callback's negative code (stop). */
int rm_kube_lines_feed(rm_kube_lines *l, const char *data, size_t n);
void rm_kube_lines_free(rm_kube_lines *l);

/* ---------------- the client ---------------- */
typedef struct rm_kube_client rm_kube_client;

/* Called after every HTTP exchange (for metrics): verb ("GET", "LIST", "WATCH", "POST", ...),
 * HTTP code (0 = transport error) and seconds. Must be thread-safe. */
typedef void (*rm_kube_observe_fn)(void *ud, const char *verb, long code, double seconds);

typedef struct rm_kube_client_opts {
    double qps;            /* default 50; <0 = unlimited */
    int burst;             /* default 100 */
    int max_retries;       /* for 429/5xx/transport errors; default 5 */
    long timeout_ms;       /* per attempt; default 30000 */
    size_t max_body;       /* default 32 MiB */
    double backoff_base_s; /* first retry delay; default 0.1, doubling, capped at backoff_cap_s */
    double backoff_cap_s;  /* default 5 */
    double token_reread_s; /* default 60 */
    rm_kube_observe_fn observe;
    void *observe_ud;
    const char *user_agent; /* default "ringmaster-operator" (copied) */
} rm_kube_client_opts;

typedef struct rm_kube_resp {
    long status; /* HTTP status of the last attempt; 0 = no response */
    char *body;  /* owned, NUL-terminated, may be "" */
    size_t len;
    int attempts; /* attempts made (1 = no retry) */
} rm_kube_resp;

/* Copies cfg and opts (NULL = defaults). */
int rm_kube_client_new(const rm_kube_config *cfg, const rm_kube_client_opts *opts, rm_kube_client **out,
                       rm_err *err);
void rm_kube_client_free(rm_kube_client *c); /* NULL ok */
/* A second client to c's server with c's credentials (copied; token file re-read on its own) but
 * its own rate limit, connections, timeout and retries from opts; fields left 0 in opts take c's
 * values (observe included). For traffic that must not queue behind c's, like leader election. */
int rm_kube_client_new_like(rm_kube_client *c, const rm_kube_client_opts *opts, rm_kube_client **out,
                            rm_err *err);
const char *rm_kube_client_namespace(const rm_kube_client *c); /* borrowed */
const char *rm_kube_client_server(const rm_kube_client *c);    /* borrowed */

/* One request with rate limiting and retries. path starts with "/" and may carry a query.
 * content_type NULL → "application/json" when body is given. Returns RM_OK when an HTTP answer
 * arrived (any status; out->status says which), RM_ETIMEDOUT/RM_EIO when every attempt failed at
 * the transport, RM_ETOOBIG past the body cap. out must be freed even on error. */
int rm_kube_request(rm_kube_client *c, const char *method, const char *path, const char *content_type,
                    const char *body, size_t body_len, rm_kube_resp *out, rm_err *err);
void rm_kube_resp_free(rm_kube_resp *r);

/* Map an HTTP status to an rm code: 2xx → RM_OK, 404 → RM_ENOTFOUND, 409 → RM_ECONFLICT,
 * 401/403 → RM_EAUTH, 410 → RM_EEPOCH (expired), 400/422 → RM_EINVAL, 429/5xx → RM_EAGAIN,
 * other → RM_EPROTO. */
int rm_kube_status_rc(long status);
/* The "reason" of a Status body ("AlreadyExists", "Conflict", "Expired"); writes "" if none. */
void rm_kube_status_reason(const char *body, size_t len, char *buf, size_t cap);

/* Convenience: request with a JSON body (may be NULL), parse a 2xx answer into *out (owned; may be
 * NULL to ignore). Non-2xx → the mapped rm code with err holding "<code> <reason>: <message>". */
int rm_kube_json(rm_kube_client *c, const char *method, const char *path, const char *content_type,
                 const cJSON *body, cJSON **out, rm_err *err);

/* Streaming GET (watch). Every complete line is passed to fn (capped at line_cap bytes; see
 * rm_kube_lines). Waits on the rate limiter once, no retries. Ends when the server closes
 * (RM_OK), on transport error (RM_EIO), after timeout_s (RM_ETIMEDOUT), when *cancel becomes
 * true (RM_ECLOSED) or fn returns <0 (that code). *status gets the HTTP status (non-200 bodies are
 * not passed to fn; they are returned in errbody if non-NULL, owned, capped at 64 KiB). */
int rm_kube_stream(rm_kube_client *c, const char *path, size_t line_cap, double timeout_s,
                   const atomic_bool *cancel, rm_kube_line_fn fn, void *ud, long *status, char **errbody,
                   rm_err *err);

/* Percent-encode a query value (labelSelector etc.) into buf; returns buf. */
char *rm_kube_escape(const char *s, char *buf, size_t cap);
/* Clocks and the kube threads' timed waits (informer, leader, workqueue): common/clock.h. */
#endif
