/* httpc.h — a small HTTP client over libcurl for the rendezvous client, probes and tests.
 * (The Kubernetes client in operator/kube adds TLS/auth/QPS on top of the same idea.)
 *
 * One rm_httpc per thread (it wraps a CURL easy handle and reuses its connection).
 * Every response body is capped (max_body; RM_ETOOBIG past it). Timeouts are total per request. */
#ifndef RM_HTTPC_H
#define RM_HTTPC_H
#include <signal.h>
#include <stddef.h>
#include "common/rm.h"

typedef struct rm_httpc rm_httpc;

typedef struct rm_httpc_resp {
    long status; /* HTTP status; 0 if no response */
    char *body;  /* owned, NUL-terminated (may be "") */
    size_t len;
    double retry_after; /* seconds from Retry-After, or -1 */
} rm_httpc_resp;

rm_httpc *rm_httpc_new(void);
void rm_httpc_free(rm_httpc *c); /* NULL ok */
/* Cancel flag (borrowed; typically a signal handler's flag; NULL = none): once *flag is non-zero,
 * a request in progress ends within about a second and rm_httpc_do returns RM_ECANCELED. */
void rm_httpc_set_cancel(rm_httpc *c, const volatile sig_atomic_t *flag);
/* headers: NULL-terminated "Name: value" strings, may be NULL. body may be NULL.
 * Returns RM_OK when an HTTP response arrived (any status), RM_ETIMEDOUT, RM_EIO (connect
 * refused etc.), RM_ETOOBIG, RM_ECANCELED (the cancel flag was raised). out->body must be freed with rm_httpc_resp_free even on error. */
int rm_httpc_do(rm_httpc *c, const char *method, const char *url, const char *const *headers,
                const char *body, size_t body_len, long timeout_ms, size_t max_body, rm_httpc_resp *out,
                rm_err *err);
void rm_httpc_resp_free(rm_httpc_resp *r);
/* One-shot GET with a throwaway handle (tests, probes). */
int rm_httpc_get(const char *url, long timeout_ms, rm_httpc_resp *out, rm_err *err);
/* The one Retry-After parser: `line` is a whole header line ("Retry-After: 120\r\n", name matched
 * case-insensitively). Returns the delay in seconds — delay-seconds must be digits only (no sign,
 * fraction or exponent), an HTTP-date counts from now and is 0 when past — or -1 when line is not
 * a Retry-After header or its value is malformed. */
double rm_http_retry_after(const char *line, size_t n);
#endif
