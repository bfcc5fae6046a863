/* httpc.c — a small HTTP client over libcurl (see httpc.h).
 *
 * Design: one easy handle per rm_httpc, reset before each request (options) but keeping its
 * connection cache, so a client that talks to one server reuses the TCP connection. Signals are
 * off (CURLOPT_NOSIGNAL) so timeouts are safe in threads; every request has a total timeout and a
 * connect timeout; the body is capped in the write callback (returning short aborts the transfer)
 * so a hostile or broken peer cannot make us allocate without bound. */
#include "common/httpc.h"
#include "common/buf.h"
#include <curl/curl.h>
#include <ctype.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

struct rm_httpc {
    CURL *h;
    const volatile sig_atomic_t *cancel; /* borrowed; NULL = none */
};

typedef struct {
    rm_capbuf body; /* capped at max_body */
    int toobig, oom;
    double retry_after;
} sink;

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

rm_httpc *rm_httpc_new(void)
{
    pthread_once(&g_curl_once, curl_init_once);
    rm_httpc *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->h = curl_easy_init();
    if (!c->h) {
        free(c);
        return NULL;
    }
    return c;
}

void rm_httpc_free(rm_httpc *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->h);
    free(c);
}

void rm_httpc_set_cancel(rm_httpc *c, const volatile sig_atomic_t *flag)
{
    if (c)
        c->cancel = flag;
}

/* libcurl calls this on every turn of its transfer loop (at least once a second while idle). */
static int on_progress(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln)
{
    const volatile sig_atomic_t *cancel = ud;
    (void)dlt;
    (void)dln;
    (void)ult;
    (void)uln;
    return *cancel ? 1 : 0; /* non-zero aborts with CURLE_ABORTED_BY_CALLBACK */
}

void rm_httpc_resp_free(rm_httpc_resp *r)
{
    if (!r)
        return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    sink *s = ud;
    size_t n = size * nmemb; /* curl guarantees size == 1 */
    int rc = rm_capbuf_append(&s->body, ptr, n);
    if (rc == RM_OK)
        return n;
    s->toobig = rc == RM_ETOOBIG;
    s->oom = rc == RM_ENOMEM;
    return 0; /* aborts with CURLE_WRITE_ERROR */
}

double rm_http_retry_after(const char *line, size_t n)
{
    static const char key[] = "retry-after:";
    if (!line || n <= sizeof key - 1 || strncasecmp(line, key, sizeof key - 1) != 0)
        return -1;
    char v[128];
    size_t vl = n - (sizeof key - 1);
    if (vl >= sizeof v)
        vl = sizeof v - 1;
    memcpy(v, line + sizeof key - 1, vl);
    v[vl] = 0;
    char *p = v;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t pl = strlen(p);
    while (pl && (p[pl - 1] == '\r' || p[pl - 1] == '\n' || p[pl - 1] == ' '))
        p[--pl] = 0;
    if (pl && isdigit((unsigned char)p[0])) {
        /* delay-seconds is 1*DIGIT: no sign, fraction, exponent (1e999 = inf) or hex */
        if (strspn(p, "0123456789") == pl)
            return strtod(p, NULL);
    } else if (pl) {
        time_t t = curl_getdate(p, NULL);
        if (t != -1) {
            double d = difftime(t, time(NULL));
            return d > 0 ? d : 0;
        }
    }
    return -1;
}

static size_t on_header(char *ptr, size_t size, size_t nitems, void *ud)
{
    sink *s = ud;
    size_t n = size * nitems;
    double d = rm_http_retry_after(ptr, n);
    if (d >= 0)
        s->retry_after = d;
    return n;
}

int rm_httpc_do(rm_httpc *c, const char *method, const char *url, const char *const *headers,
                const char *body, size_t body_len, long timeout_ms, size_t max_body, rm_httpc_resp *out,
                rm_err *err)
{
    struct curl_slist *hl = NULL;
    sink s = {.body.max = max_body ? max_body : (16u << 20), .retry_after = -1};
    char ebuf[CURL_ERROR_SIZE] = "";
    int rc = RM_OK;
    memset(out, 0, sizeof *out);
    out->retry_after = -1;
    if (!c || !method || !url)
        return rm_errf(err, RM_EINVAL, "httpc: method and url are required");
    if (timeout_ms <= 0)
        timeout_ms = 30000;

    CURL *h = c->h;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &s);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    if (c->cancel) {
        if (*c->cancel) {
            rc = rm_errf(err, RM_ECANCELED, "%s %s: canceled", method, url);
            goto out;
        }
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)(uintptr_t)c->cancel);
    }

    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }
    if (body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
    }
    /* no "Expect: 100-continue" round trip */
    hl = curl_slist_append(hl, "Expect:");
    for (const char *const *p = headers; p && *p; p++) {
        struct curl_slist *n = curl_slist_append(hl, *p);
        if (!n) {
            rc = rm_errf(err, RM_ENOMEM, "out of memory");
            goto out;
        }
        hl = n;
    }
    if (!hl) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);

    CURLcode cc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    out->status = status;
    out->retry_after = s.retry_after;
    if (cc != CURLE_OK) {
        if (s.toobig)
            rc = rm_errf(err, RM_ETOOBIG, "%s %s: response body over %zu bytes", method, url, s.body.max);
        else if (s.oom)
            rc = rm_errf(err, RM_ENOMEM, "%s %s: out of memory", method, url);
        else if (cc == CURLE_ABORTED_BY_CALLBACK)
            rc = rm_errf(err, RM_ECANCELED, "%s %s: canceled", method, url);
        else if (cc == CURLE_OPERATION_TIMEDOUT)
            rc = rm_errf(err, RM_ETIMEDOUT, "%s %s: timed out after %ld ms", method, url, timeout_ms);
        else
            rc = rm_errf(err, RM_EIO, "%s %s: %s", method, url, ebuf[0] ? ebuf : curl_easy_strerror(cc));
    }
out:
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(hl);
    if (!s.body.b)
        s.body.b = calloc(1, 1);
    out->body = s.body.b;
    out->len = s.body.b ? s.body.len : 0;
    if (!out->body && rc == RM_OK)
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
    return rc;
}

int rm_httpc_get(const char *url, long timeout_ms, rm_httpc_resp *out, rm_err *err)
{
    rm_httpc *c = rm_httpc_new();
    if (!c) {
        memset(out, 0, sizeof *out);
        out->retry_after = -1;
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    int rc = rm_httpc_do(c, "GET", url, NULL, NULL, 0, timeout_ms, 0, out, err);
    rm_httpc_free(c);
    return rc;
}
