/* client.c — Kubernetes API client over libcurl (see client.h for the contract).
 *
 * Design notes:
 *  - A pool of CURL easy handles, taken and returned under a mutex: each handle keeps its live
 *    connection (curl_easy_reset keeps the connection cache), so N threads reuse up to N
 *    connections and never share a handle.
 *  - The token bucket reserves ahead (tokens may go negative) so waiting threads are served in
 *    order without a condition variable: each sleeps exactly its reservation's delay.
 *  - Retries are decided from the status code only; the body of the last attempt is returned.
 *  - Watch streams feed a capped line splitter directly from the curl write callback, so an event
 *    is parsed once, as soon as its line is complete, and nothing grows without a bound. */
#include "operator/kube/client.h"
#include "common/clock.h"
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "common/b64.h"
#include "common/buf.h"
#include "common/httpc.h"
#include "common/json.h"
#include "common/log.h"
#include "common/yaml.h"

#define POOL_MAX 32
#define KUBECONFIG_CAP (4u << 20)

/* ---------------- files ---------------- */
static int read_file_capped(const char *path, size_t cap, char **out, size_t *len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? RM_ENOTFOUND : RM_EIO;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return RM_ENOMEM;
    }
    size_t n = fread(buf, 1, cap + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return RM_EIO;
    }
    if (n > cap) {
        free(buf);
        return RM_ETOOBIG;
    }
    buf[n] = 0;
    *out = buf;
    if (len)
        *len = n;
    return RM_OK;
}

/* Trimmed token from a file; RM_OK with an owned string. */
static int read_token(const char *path, char **out)
{
    char *t = NULL;
    size_t n = 0;
    int rc = read_file_capped(path, 64 * 1024, &t, &n);
    if (rc)
        return rc;
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' ' || t[n - 1] == '\t'))
        t[--n] = 0;
    if (!n) {
        free(t);
        return RM_EINVAL;
    }
    *out = t;
    return RM_OK;
}

/* ---------------- config ---------------- */
void rm_kube_config_free(rm_kube_config *c)
{
    if (!c)
        return;
    free(c->server);
    free(c->namespace_);
    free(c->token);
    free(c->token_file);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c->ca_data);
    free(c->cert_data);
    free(c->key_data);
    memset(c, 0, sizeof(*c));
}

static char *xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

static unsigned char *xmemdup(const unsigned char *p, size_t n)
{
    if (!p)
        return NULL;
    unsigned char *o = malloc(n + 1);
    if (o) {
        memcpy(o, p, n);
        o[n] = 0;
    }
    return o;
}

int rm_kube_config_copy(rm_kube_config *dst, const rm_kube_config *src)
{
    memset(dst, 0, sizeof(*dst));
    dst->server = xstrdup(src->server);
    dst->namespace_ = xstrdup(src->namespace_);
    dst->token = xstrdup(src->token);
    dst->token_file = xstrdup(src->token_file);
    dst->ca_file = xstrdup(src->ca_file);
    dst->cert_file = xstrdup(src->cert_file);
    dst->key_file = xstrdup(src->key_file);
    dst->ca_data = xmemdup(src->ca_data, src->ca_len);
    dst->cert_data = xmemdup(src->cert_data, src->cert_len);
    dst->key_data = xmemdup(src->key_data, src->key_len);
    dst->ca_len = src->ca_len;
    dst->cert_len = src->cert_len;
    dst->key_len = src->key_len;
    dst->insecure = src->insecure;
    if ((src->server && !dst->server) || (src->namespace_ && !dst->namespace_) ||
        (src->token && !dst->token) || (src->token_file && !dst->token_file) ||
        (src->ca_file && !dst->ca_file) || (src->cert_file && !dst->cert_file) ||
        (src->key_file && !dst->key_file) || (src->ca_data && !dst->ca_data) ||
        (src->cert_data && !dst->cert_data) || (src->key_data && !dst->key_data)) {
        rm_kube_config_free(dst);
        return RM_ENOMEM;
    }
    return RM_OK;
}

/* Find the entry named `name` in a kubeconfig list (clusters/users/contexts) and return its
 * `inner` object. */
static const cJSON *named(const cJSON *root, const char *list, const char *inner, const char *name)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, list);
    const cJSON *it;
    if (!cJSON_IsArray(arr))
        return NULL;
    cJSON_ArrayForEach(it, arr)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) {
            const cJSON *in = cJSON_GetObjectItemCaseSensitive(it, inner);
            return in ? in : it; /* `user: {}` may be written as `user:` (null) */
        }
    }
    return NULL;
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

static char *resolve_path(const char *dir, const char *p)
{
    if (!p)
        return NULL;
    if (p[0] == '/' || !dir || !dir[0])
        return strdup(p);
    size_t n = strlen(dir) + strlen(p) + 2;
    char *o = malloc(n);
    if (o)
        snprintf(o, n, "%s/%s", dir, p);
    return o;
}

static int take_data(const cJSON *o, const char *key, const char *what, unsigned char **out, size_t *len,
                     rm_err *err)
{
    const char *s = str_of(o, key);
    if (!s)
        return RM_OK;
    int rc = rm_b64_decode(s, strlen(s), out, len);
    if (rc == RM_EINVAL)
        return rm_err_field(err, RM_EINVAL, what, "invalid base64");
    return rc;
}

int rm_kube_config_parse(const char *text, size_t len, const char *dir, const char *context,
                         rm_kube_config *out, rm_err *err)
{
    memset(out, 0, sizeof(*out));
    rm_yaml_docs *docs = NULL;
    int rc = rm_yaml_load(text, len, "kubeconfig", &docs, err);
    if (rc)
        return rc;
    const cJSON *root = rm_yaml_count(docs) ? rm_yaml_doc(docs, 0) : NULL;
    if (!cJSON_IsObject(root)) {
        rc = rm_errf(err, RM_EINVAL, "kubeconfig: not a mapping");
        goto out;
    }
    const char *ctxname = context ? context : str_of(root, "current-context");
    if (!ctxname) {
        rc = rm_err_field(err, RM_EINVAL, "current-context", "not set");
        goto out;
    }
    const cJSON *ctx = named(root, "contexts", "context", ctxname);
    if (!ctx) {
        rc = rm_errf(err, RM_EINVAL, "kubeconfig: context \"%s\" not found", ctxname);
        goto out;
    }
    const char *cname = str_of(ctx, "cluster"), *uname = str_of(ctx, "user");
    const cJSON *cl = cname ? named(root, "clusters", "cluster", cname) : NULL;
    if (!cl) {
        rc = rm_errf(err, RM_EINVAL, "kubeconfig: cluster \"%s\" of context \"%s\" not found",
                     cname ? cname : "", ctxname);
        goto out;
    }
    const char *server = str_of(cl, "server");
    if (!server) {
        rc = rm_err_field(err, RM_EINVAL, "clusters.cluster.server", "not set (cluster \"%s\")", cname);
        goto out;
    }
    rc = RM_ENOMEM;
    if (!(out->server = strdup(server)))
        goto out;
    size_t sl = strlen(out->server);
    while (sl > 0 && out->server[sl - 1] == '/')
        out->server[--sl] = 0;
    const char *ns = str_of(ctx, "namespace");
    if (ns && !(out->namespace_ = strdup(ns)))
        goto out;
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(cl, "insecure-skip-tls-verify");
    out->insecure = cJSON_IsTrue(ins);
    const char *ca = str_of(cl, "certificate-authority");
    if (ca && !(out->ca_file = resolve_path(dir, ca)))
        goto out;
    rc = take_data(cl, "certificate-authority-data", "certificate-authority-data", &out->ca_data,
                   &out->ca_len, err);
    if (rc)
        goto out;
    const cJSON *us = uname ? named(root, "users", "user", uname) : NULL;
    if (uname && !us) {
        rc = rm_errf(err, RM_EINVAL, "kubeconfig: user \"%s\" not found", uname);
        goto out;
    }
    if (us) {
        rc = RM_ENOMEM;
        const char *tok = str_of(us, "token");
        if (tok && !(out->token = strdup(tok)))
            goto out;
        const char *tf = str_of(us, "tokenFile");
        if (tf && !(out->token_file = resolve_path(dir, tf)))
            goto out;
        const char *cc = str_of(us, "client-certificate");
        if (cc && !(out->cert_file = resolve_path(dir, cc)))
            goto out;
        const char *ck = str_of(us, "client-key");
        if (ck && !(out->key_file = resolve_path(dir, ck)))
            goto out;
        rc = take_data(us, "client-certificate-data", "client-certificate-data", &out->cert_data,
                       &out->cert_len, err);
        if (rc)
            goto out;
        rc = take_data(us, "client-key-data", "client-key-data", &out->key_data, &out->key_len, err);
        if (rc)
            goto out;
        if ((out->cert_data || out->cert_file) != (out->key_data || out->key_file)) {
            rc = rm_errf(err, RM_EINVAL,
                         "kubeconfig: user \"%s\" has a client certificate without a key (or a key without a "
                         "certificate)",
                         uname);
            goto out;
        }
        if (out->token_file && !out->token) {
            /* best effort now; the client re-reads it */
            char *t = NULL;
            if (read_token(out->token_file, &t) == RM_OK)
                out->token = t;
        }
    }
    rc = RM_OK;
out:
    if (rc) {
        if (rc == RM_ENOMEM && err && !err->msg[0])
            rm_errf(err, RM_ENOMEM, "kubeconfig: out of memory");
        rm_kube_config_free(out);
    }
    rm_yaml_free(docs);
    return rc;
}

int rm_kube_config_load(const char *path, const char *context, rm_kube_config *out, rm_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = read_file_capped(path, KUBECONFIG_CAP, &text, &len);
    if (rc)
        return rm_errf(err, rc, "kubeconfig %s: %s", path, rm_strerror(rc));
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        dir[0] = 0;
    rc = rm_kube_config_parse(text, len, dir, context, out, err);
    free(text);
    return rc;
}

int rm_kube_config_in_cluster(const char *sa_dir, rm_kube_config *out, rm_err *err)
{
    memset(out, 0, sizeof(*out));
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port)
        return rm_errf(err, RM_ENOTFOUND, "in-cluster: KUBERNETES_SERVICE_HOST/PORT not set");
    if (!sa_dir)
        sa_dir = getenv("RINGMASTER_SA_DIR");
    if (!sa_dir || !*sa_dir)
        sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    char p[PATH_MAX];
    int rc = RM_ENOMEM;
    size_t n = strlen(host) + strlen(port) + 16;
    out->server = malloc(n);
    if (!out->server)
        goto out;
    if (strchr(host, ':'))
        snprintf(out->server, n, "https://[%s]:%s", host, port);
    else
        snprintf(out->server, n, "https://%s:%s", host, port);
    snprintf(p, sizeof(p), "%s/token", sa_dir);
    if (!(out->token_file = strdup(p)))
        goto out;
    rc = read_token(p, &out->token);
    if (rc) {
        rc = rm_errf(err, RM_EAUTH, "in-cluster: cannot read token %s: %s", p, rm_strerror(rc));
        goto out;
    }
    snprintf(p, sizeof(p), "%s/ca.crt", sa_dir);
    if (access(p, R_OK) == 0 && !(out->ca_file = strdup(p))) {
        rc = RM_ENOMEM;
        goto out;
    }
    snprintf(p, sizeof(p), "%s/namespace", sa_dir);
    char *ns = NULL;
    if (read_token(p, &ns) == RM_OK)
        out->namespace_ = ns;
    rc = RM_OK;
out:
    if (rc)
        rm_kube_config_free(out);
    return rc;
}

int rm_kube_config_auto(const char *kubeconfig, rm_kube_config *out, rm_err *err)
{
    if (kubeconfig && *kubeconfig)
        return rm_kube_config_load(kubeconfig, NULL, out, err);
    const char *env = getenv("KUBECONFIG");
    if (env && *env) {
        char first[PATH_MAX];
        snprintf(first, sizeof(first), "%s", env);
        char *colon = strchr(first, ':');
        if (colon)
            *colon = 0;
        return rm_kube_config_load(first, NULL, out, err);
    }
    if (getenv("KUBERNETES_SERVICE_HOST"))
        return rm_kube_config_in_cluster(NULL, out, err);
    const char *home = getenv("HOME");
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/.kube/config", home ? home : "");
    return rm_kube_config_load(p, NULL, out, err);
}

/* ---------------- token bucket ---------------- */
void rm_kube_bucket_init(rm_kube_bucket *b, double qps, int burst, double now)
{
    pthread_mutex_init(&b->mu, NULL);
    b->qps = qps;
    b->burst = burst < 1 ? 1 : burst;
    b->tokens = b->burst;
    b->last = now;
}

void rm_kube_bucket_destroy(rm_kube_bucket *b)
{
    pthread_mutex_destroy(&b->mu);
}

double rm_kube_bucket_reserve(rm_kube_bucket *b, double now)
{
    if (b->qps <= 0)
        return 0;
    pthread_mutex_lock(&b->mu);
    if (now > b->last) {
        b->tokens += (now - b->last) * b->qps;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->last = now;
    }
    b->tokens -= 1;
    double wait = b->tokens >= 0 ? 0 : -b->tokens / b->qps;
    pthread_mutex_unlock(&b->mu);
    return wait;
}

/* ---------------- line splitter ---------------- */
void rm_kube_lines_init(rm_kube_lines *l, size_t cap, rm_kube_line_fn fn, void *ud)
{
    memset(l, 0, sizeof(*l));
    l->cap = cap;
    l->fn = fn;
    l->ud = ud;
}

void rm_kube_lines_free(rm_kube_lines *l)
{
    free(l->buf);
    l->buf = NULL;
    l->len = l->alloc = 0;
}

static int lines_append(rm_kube_lines *l, const char *p, size_t n)
{
    if (l->len + n > l->cap) {
        l->skipping = true;
        l->oversized++;
        l->len = 0;
        int rc = l->fn(l->ud, NULL, 0);
        return rc < 0 ? rc : RM_OK;
    }
    if (l->len + n + 1 > l->alloc) {
        size_t na = l->alloc ? l->alloc : 4096;
        while (na < l->len + n + 1)
            na *= 2;
        if (na > l->cap + 1)
            na = l->cap + 1;
        char *nb = realloc(l->buf, na);
        if (!nb)
            return RM_ENOMEM;
        l->buf = nb;
        l->alloc = na;
    }
    memcpy(l->buf + l->len, p, n);
    l->len += n;
    return RM_OK;
}

int rm_kube_lines_feed(rm_kube_lines *l, const char *data, size_t n)
{
    while (n) {
        const char *nl = memchr(data, '\n', n);
        size_t take = nl ? (size_t)(nl - data) : n;
        if (!l->skipping) {
            int rc = lines_append(l, data, take);
            if (rc)
                return rc;
        }
        if (nl) {
            if (!l->skipping) {
                size_t len = l->len;
                while (len && l->buf[len - 1] == '\r')
                    len--;
                if (len) {
                    l->buf[len] = 0;
                    l->len = 0;
                    int rc = l->fn(l->ud, l->buf, len);
                    if (rc < 0)
                        return rc;
                }
            }
            l->skipping = false;
            l->len = 0;
            take++;
        }
        data += take;
        n -= take;
    }
    /* give memory back after a big event */
    if (l->len == 0 && l->alloc > 65536) {
        free(l->buf);
        l->buf = NULL;
        l->alloc = 0;
    }
    return RM_OK;
}

/* ---------------- client ---------------- */
struct rm_kube_client {
    rm_kube_config cfg;
    rm_kube_client_opts o;
    char *user_agent;
    rm_kube_bucket bucket;
    pthread_mutex_t mu; /* pool and token */
    CURL *pool[POOL_MAX];
    int npool;
    double token_read_at; /* monotonic */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

int rm_kube_client_new(const rm_kube_config *cfg, const rm_kube_client_opts *opts, rm_kube_client **out,
                       rm_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->server)
        return rm_errf(err, RM_EINVAL, "kube client: no server");
    if (strncmp(cfg->server, "http://", 7) && strncmp(cfg->server, "https://", 8))
        return rm_errf(err, RM_EINVAL, "kube client: server \"%s\" is not an http(s) URL", cfg->server);
    pthread_once(&curl_once, curl_init_once);
    rm_kube_client *c = calloc(1, sizeof(*c));
    if (!c)
        return rm_errf(err, RM_ENOMEM, "kube client: out of memory");
    if (rm_kube_config_copy(&c->cfg, cfg)) {
        free(c);
        return rm_errf(err, RM_ENOMEM, "kube client: out of memory");
    }
    if (opts)
        c->o = *opts;
    if (c->o.qps == 0)
        c->o.qps = 50;
    if (c->o.burst <= 0)
        c->o.burst = 100;
    if (c->o.max_retries <= 0)
        c->o.max_retries = opts && opts->max_retries < 0 ? 0 : 5;
    if (c->o.timeout_ms <= 0)
        c->o.timeout_ms = 30000;
    if (!c->o.max_body)
        c->o.max_body = 32u << 20;
    if (c->o.backoff_base_s <= 0)
        c->o.backoff_base_s = 0.1;
    if (c->o.backoff_cap_s <= 0)
        c->o.backoff_cap_s = 5;
    if (c->o.token_reread_s <= 0)
        c->o.token_reread_s = 60;
    c->user_agent = strdup(c->o.user_agent ? c->o.user_agent : "ringmaster-operator");
    c->o.user_agent = NULL;
    if (!c->user_agent) {
        rm_kube_client_free(c);
        return rm_errf(err, RM_ENOMEM, "kube client: out of memory");
    }
    rm_kube_bucket_init(&c->bucket, c->o.qps < 0 ? 0 : c->o.qps, c->o.burst, rm_mono());
    pthread_mutex_init(&c->mu, NULL);
    c->token_read_at = rm_mono();
    *out = c;
    return RM_OK;
}

int rm_kube_client_new_like(rm_kube_client *c, const rm_kube_client_opts *opts, rm_kube_client **out,
                            rm_err *err)
{
    rm_kube_client_opts o = c->o;
    o.user_agent = c->user_agent;
    if (opts) {
        if (opts->qps)
            o.qps = opts->qps;
        if (opts->burst)
            o.burst = opts->burst;
        if (opts->max_retries)
            o.max_retries = opts->max_retries;
        if (opts->timeout_ms)
            o.timeout_ms = opts->timeout_ms;
        if (opts->max_body)
            o.max_body = opts->max_body;
        if (opts->observe) {
            o.observe = opts->observe;
            o.observe_ud = opts->observe_ud;
        }
        if (opts->user_agent)
            o.user_agent = opts->user_agent;
    }
    pthread_mutex_lock(&c->mu); /* the token may be re-read meanwhile */
    int rc = rm_kube_client_new(&c->cfg, &o, out, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void rm_kube_client_free(rm_kube_client *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->npool; i++)
        curl_easy_cleanup(c->pool[i]);
    rm_kube_bucket_destroy(&c->bucket);
    pthread_mutex_destroy(&c->mu);
    rm_kube_config_free(&c->cfg);
    free(c->user_agent);
    free(c);
}

const char *rm_kube_client_namespace(const rm_kube_client *c)
{
    return c->cfg.namespace_ ? c->cfg.namespace_ : "default";
}

const char *rm_kube_client_server(const rm_kube_client *c)
{
    return c->cfg.server;
}

static CURL *pool_get(rm_kube_client *c)
{
    CURL *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->npool)
        h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->mu);
    if (h)
        curl_easy_reset(h);
    else
        h = curl_easy_init();
    return h;
}

static void pool_put(rm_kube_client *c, CURL *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&c->mu);
    if (c->npool < POOL_MAX) {
        c->pool[c->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (h)
        curl_easy_cleanup(h);
}

/* Copy of the current bearer token (re-read from token_file when stale or forced). */
static char *current_token(rm_kube_client *c, bool force)
{
    pthread_mutex_lock(&c->mu);
    if (c->cfg.token_file) {
        double now = rm_mono();
        if (force || !c->cfg.token || now - c->token_read_at >= c->o.token_reread_s) {
            char *t = NULL;
            if (read_token(c->cfg.token_file, &t) == RM_OK) {
                free(c->cfg.token);
                c->cfg.token = t;
            } else {
                rm_warn("kube client: token file unreadable, keeping the old token path=%s",
                        c->cfg.token_file);
            }
            c->token_read_at = now;
        }
    }
    char *t = c->cfg.token ? strdup(c->cfg.token) : NULL;
    pthread_mutex_unlock(&c->mu);
    return t;
}

/* Response bodies go into the shared capped buffer (common/buf.h). */
typedef struct body_buf {
    rm_capbuf cb;
    bool toobig;
} body_buf;

static size_t body_write(char *p, size_t sz, size_t nm, void *ud)
{
    body_buf *b = ud;
    size_t n = sz * nm;
    int rc = rm_capbuf_append(&b->cb, p, n);
    if (rc == RM_OK)
        return n;
    b->toobig = rc == RM_ETOOBIG;
    return 0;
}

typedef struct hdr_state {
    double retry_after;
} hdr_state;

static size_t header_cb(char *p, size_t sz, size_t nm, void *ud)
{
    hdr_state *h = ud;
    size_t n = sz * nm;
    double d = rm_http_retry_after(p, n); /* the one parser (common/httpc.h) */
    if (d >= 0)
        h->retry_after = d;
    return n;
}

static void set_common(rm_kube_client *c, CURL *h, struct curl_slist **hdrs, const char *token)
{
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 16384L); /* bodies are small; default 64 KiB */
    if (c->cfg.insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    } else {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    }
    if (c->cfg.ca_data) {
        struct curl_blob b = {c->cfg.ca_data, c->cfg.ca_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    } else if (c->cfg.ca_file) {
        curl_easy_setopt(h, CURLOPT_CAINFO, c->cfg.ca_file);
    }
    if (c->cfg.cert_data) {
        struct curl_blob b = {c->cfg.cert_data, c->cfg.cert_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    } else if (c->cfg.cert_file) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cfg.cert_file);
    }
    if (c->cfg.key_data) {
        struct curl_blob b = {c->cfg.key_data, c->cfg.key_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (c->cfg.key_file) {
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->cfg.key_file);
    }
    *hdrs = curl_slist_append(*hdrs, "Accept: application/json");
    if (token) {
        size_t n = strlen(token) + 32;
        char *a = malloc(n);
        if (a) {
            snprintf(a, n, "Authorization: Bearer %s", token);
            *hdrs = curl_slist_append(*hdrs, a);
            free(a);
        }
    }
}

void rm_kube_resp_free(rm_kube_resp *r)
{
    if (!r)
        return;
    free(r->body);
    r->body = NULL;
    r->len = 0;
}

static bool retryable(long st)
{
    return st == 429 || st == 500 || st == 502 || st == 503 || st == 504;
}

static char *make_url(rm_kube_client *c, const char *path)
{
    size_t n = strlen(c->cfg.server) + strlen(path) + 1;
    char *u = malloc(n);
    if (u)
        snprintf(u, n, "%s%s", c->cfg.server, path);
    return u;
}

int rm_kube_request(rm_kube_client *c, const char *method, const char *path, const char *content_type,
                    const char *body, size_t body_len, rm_kube_resp *out, rm_err *err)
{
    memset(out, 0, sizeof(*out));
    char *url = make_url(c, path);
    if (!url)
        return rm_errf(err, RM_ENOMEM, "kube: out of memory");
    int rc = RM_EIO;
    bool reauth_done = false;
    double backoff = c->o.backoff_base_s;
    for (int attempt = 0; attempt <= c->o.max_retries; attempt++) {
        rm_sleep(rm_kube_bucket_reserve(&c->bucket, rm_mono()));
        CURL *h = pool_get(c);
        if (!h) {
            rc = rm_errf(err, RM_ENOMEM, "kube: curl_easy_init failed");
            break;
        }
        char *token = current_token(c, false);
        struct curl_slist *hdrs = NULL;
        set_common(c, h, &hdrs, token);
        free(token);
        if (body) {
            char ct[128];
            snprintf(ct, sizeof(ct), "Content-Type: %s", content_type ? content_type : "application/json");
            hdrs = curl_slist_append(hdrs, ct);
        }
        hdrs = curl_slist_append(hdrs, "Expect:");
        body_buf bb = {.cb = {.max = c->o.max_body}};
        hdr_state hs = {.retry_after = -1};
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (strcmp(method, "GET") == 0)
            curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        if (body) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
        }
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &bb);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &hs);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->o.timeout_ms);
        double t0 = rm_mono();
        CURLcode cc = curl_easy_perform(h);
        long st = 0;
        if (cc == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        curl_slist_free_all(hdrs);
        /* a failed transfer may leave a half-read connection: do not reuse it */
        if (cc != CURLE_OK) {
            curl_easy_cleanup(h);
            h = NULL;
        }
        pool_put(c, h);
        if (c->o.observe)
            c->o.observe(c->o.observe_ud, method, st, rm_mono() - t0);
        out->attempts = attempt + 1;
        free(out->body);
        out->body = bb.cb.b;
        out->len = bb.cb.len;
        out->status = st;
        if (cc != CURLE_OK) {
            if (bb.toobig) {
                rc = rm_errf(err, RM_ETOOBIG, "kube %s %s: response body over %zu bytes", method, path,
                             c->o.max_body);
                break;
            }
            rc = rm_errf(err, cc == CURLE_OPERATION_TIMEDOUT ? RM_ETIMEDOUT : RM_EIO, "kube %s %s: %s",
                         method, path, curl_easy_strerror(cc));
        } else if (st == 401 && c->cfg.token_file && !reauth_done) {
            reauth_done = true;
            free(current_token(c, true));
            attempt--; /* a re-read token gets one free try */
            rc = RM_OK;
            continue;
        } else if (retryable(st) && attempt < c->o.max_retries) {
            rc = RM_OK;
            double d = hs.retry_after >= 0 ? hs.retry_after : backoff;
            if (d > c->o.backoff_cap_s)
                d = c->o.backoff_cap_s;
            backoff *= 2;
            if (backoff > c->o.backoff_cap_s)
                backoff = c->o.backoff_cap_s;
            rm_debug("kube retry method=%s path=%s status=%ld delay_s=%.3f", method, path, st, d);
            rm_sleep(d);
            continue;
        } else {
            rc = RM_OK;
            break;
        }
        if (attempt < c->o.max_retries) {
            double d = backoff;
            backoff = backoff * 2 > c->o.backoff_cap_s ? c->o.backoff_cap_s : backoff * 2;
            rm_sleep(d);
        }
    }
    if (!out->body) {
        out->body = calloc(1, 1);
        out->len = 0;
    }
    free(url);
    return rc;
}

int rm_kube_status_rc(long st)
{
    if (st >= 200 && st < 300)
        return RM_OK;
    switch (st) {
    case 404:
        return RM_ENOTFOUND;
    case 409:
        return RM_ECONFLICT;
    case 401:
    case 403:
        return RM_EAUTH;
    case 410:
        return RM_EEPOCH;
    case 400:
    case 422:
        return RM_EINVAL;
    default:
        break;
    }
    if (st == 429 || st >= 500)
        return RM_EAGAIN;
    return RM_EPROTO;
}

void rm_kube_status_reason(const char *body, size_t len, char *buf, size_t cap)
{
    if (cap)
        buf[0] = 0;
    cJSON *j = body && len ? cJSON_ParseWithLength(body, len) : NULL;
    const cJSON *r = j ? cJSON_GetObjectItemCaseSensitive(j, "reason") : NULL;
    if (cJSON_IsString(r) && cap)
        snprintf(buf, cap, "%s", r->valuestring);
    cJSON_Delete(j);
}

int rm_kube_json(rm_kube_client *c, const char *method, const char *path, const char *content_type,
                 const cJSON *body, cJSON **out, rm_err *err)
{
    if (out)
        *out = NULL;
    char *b = NULL;
    if (body && !(b = cJSON_PrintUnformatted(body)))
        return rm_errf(err, RM_ENOMEM, "kube: out of memory");
    rm_kube_resp r;
    int rc = rm_kube_request(c, method, path, content_type, b, b ? strlen(b) : 0, &r, err);
    free(b);
    if (rc)
        goto out;
    rc = rm_kube_status_rc(r.status);
    if (rc) {
        cJSON *j = cJSON_ParseWithLength(r.body, r.len);
        const cJSON *reason = j ? cJSON_GetObjectItemCaseSensitive(j, "reason") : NULL;
        const cJSON *msg = j ? cJSON_GetObjectItemCaseSensitive(j, "message") : NULL;
        rm_errf(err, rc, "%ld %s: %s", r.status, cJSON_IsString(reason) ? reason->valuestring : "",
                cJSON_IsString(msg) ? msg->valuestring : "");
        cJSON_Delete(j);
        goto out;
    }
    if (out) {
        *out = cJSON_ParseWithLength(r.body, r.len);
        if (!*out)
            rc = rm_errf(err, RM_EPROTO, "kube %s %s: answer is not JSON", method, path);
    }
out:
    rm_kube_resp_free(&r);
    return rc;
}

/* ---------------- streaming ---------------- */
typedef struct stream_state {
    CURL *h;
    rm_kube_lines lines;
    long status;
    body_buf errb;
    int cb_rc;
    const atomic_bool *cancel;
} stream_state;

static size_t stream_write(char *p, size_t sz, size_t nm, void *ud)
{
    stream_state *s = ud;
    size_t n = sz * nm;
    if (!s->status)
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->status);
    if (s->status != 200) {
        body_write(p, 1, n, &s->errb); /* past its cap the rest is dropped */
        return n;
    }
    int rc = rm_kube_lines_feed(&s->lines, p, n);
    if (rc < 0) {
        s->cb_rc = rc;
        return 0;
    }
    return n;
}

static int stream_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    stream_state *s = ud;
    return s->cancel && atomic_load(s->cancel) ? 1 : 0;
}

int rm_kube_stream(rm_kube_client *c, const char *path, size_t line_cap, double timeout_s,
                   const atomic_bool *cancel, rm_kube_line_fn fn, void *ud, long *status, char **errbody,
                   rm_err *err)
{
    if (status)
        *status = 0;
    if (errbody)
        *errbody = NULL;
    char *url = make_url(c, path);
    if (!url)
        return rm_errf(err, RM_ENOMEM, "kube: out of memory");
    rm_sleep(rm_kube_bucket_reserve(&c->bucket, rm_mono()));
    CURL *h = curl_easy_init(); /* a stream owns its connection for its whole life */
    if (!h) {
        free(url);
        return rm_errf(err, RM_ENOMEM, "kube: curl_easy_init failed");
    }
    stream_state s = {.h = h, .cancel = cancel};
    s.errb.cb.max = 64 * 1024;
    rm_kube_lines_init(&s.lines, line_cap, fn, ud);
    char *token = current_token(c, false);
    struct curl_slist *hdrs = NULL;
    set_common(c, h, &hdrs, token);
    free(token);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, stream_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, stream_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &s);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    double t0 = rm_mono();
    CURLcode cc = curl_easy_perform(h);
    if (!s.status)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &s.status);
    if (c->o.observe)
        c->o.observe(c->o.observe_ud, "WATCH", s.status, rm_mono() - t0);
    int rc;
    if (s.cb_rc < 0)
        rc = s.cb_rc;
    else if (cc == CURLE_ABORTED_BY_CALLBACK)
        rc = RM_ECLOSED;
    else if (cc == CURLE_OPERATION_TIMEDOUT)
        rc = RM_ETIMEDOUT;
    else if (cc != CURLE_OK)
        rc = rm_errf(err, RM_EIO, "kube watch %s: %s", path, curl_easy_strerror(cc));
    else
        rc = RM_OK;
    if (s.status == 401 && c->cfg.token_file)
        free(current_token(c, true));
    if (status)
        *status = s.status;
    if (errbody && s.status != 200) {
        *errbody = s.errb.cb.b;
        s.errb.cb.b = NULL;
    }
    rm_capbuf_free(&s.errb.cb);
    if (s.lines.oversized)
        rm_warn("kube watch dropped oversized events path=%s count=%lu", path, s.lines.oversized);
    rm_kube_lines_free(&s.lines);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(url);
    return rc;
}

char *rm_kube_escape(const char *s, char *buf, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (; *s && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '_' || ch == '.' || ch == '~') {
            buf[n++] = (char)ch;
        } else {
            buf[n++] = '%';
            buf[n++] = hex[ch >> 4];
            buf[n++] = hex[ch & 15];
        }
    }
    buf[n] = 0;
    return buf;
}
