/* rdzv_client.c — the worker's side of the rendezvous protocol (common/rdzv.h).
 *
 * Design: one rm_httpc per client (so one reused connection), and one retry loop (call()) shared by
 * every request: a request that gets no answer (connection refused, reset, timed out) or a 502/503
 * is tried again with a doubling back-off (50 ms … 1 s) until the caller's deadline, because the
 * controller may start after the worker or restart under it. Long polls are repeated by the
 * callers (join on 202, kv get on 404) until their own deadline; every single HTTP request has a
 * bounded timeout. Statuses map to codes: 401 → RM_EAUTH, 409 → RM_ECLOSED, 410 → RM_EEPOCH,
 * 413 → RM_ETOOBIG, other 4xx/5xx → RM_EPROTO with the server's message. */
#include "common/rdzv.h"
#include "common/clock.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/httpc.h"
#include "common/json.h"
#include "common/log.h"
#include "common/worker_env.h"
#include <unistd.h>

#define JOIN_TRY_S 15.0  /* server holds a join ≤ 10 s */
#define SHORT_TRY_S 10.0 /* kv put, report */
#define REPORT_TOTAL_S 5.0
#define KV_PUT_TOTAL_S 10.0
#define KV_WAIT_CAP_S 30.0
/* a join reply's peer list: ~80 bytes a peer with short names, at most ~400 with the longest
 * workerId, addr and node the service accepts; 16,384 peers of the longest are ~6.4 MiB */
#define MAX_REPLY (64u * 1024u + (unsigned)RM_RDZV_MAX_WORLD * 400u)

struct rm_rdzv_client {
    rm_httpc *h;
    const volatile sig_atomic_t *cancel; /* borrowed; NULL = none */
    char base[512];                      /* URL + "/v1/jobs/NS/NAME" */
    char auth[300];                      /* "Authorization: Bearer TOKEN" */
    char worker_id[32];
    char node[RM_RDZV_NODE_MAX + 1]; /* reported at every join; "" = none */
};

static bool canceled(const rm_rdzv_client *c)
{
    return c->cancel && *c->cancel;
}

/* A back-off that ends early (within 50 ms) when the cancel flag rises. */
static void nap(const rm_rdzv_client *c, double s)
{
    while (s > 0 && !canceled(c)) {
        double step = s < 0.05 ? s : 0.05;
        rm_sleep(step);
        s -= step;
    }
}

void rm_rdzv_client_set_cancel(rm_rdzv_client *c, const volatile sig_atomic_t *flag)
{
    if (!c)
        return;
    c->cancel = flag;
    rm_httpc_set_cancel(c->h, flag);
}

rm_rdzv_client *rm_rdzv_client_new(const char *url, const char *job, const char *token, const char *worker_id,
                                   rm_err *err)
{
    if (!url || !job || !token || !worker_id) {
        rm_errf(err, RM_EINVAL, "rendezvous client: url, job, token and worker id are required");
        return NULL;
    }
    const char *slash = strchr(job, '/');
    size_t ulen = strlen(url);
    while (ulen > 0 && url[ulen - 1] == '/')
        ulen--;
    if (!slash || strchr(slash + 1, '/') || !rm_rdzv_name_ok(job, (size_t)(slash - job)) ||
        !rm_rdzv_name_ok(slash + 1, strlen(slash + 1))) {
        rm_err_field(err, RM_EINVAL, "job",
                     "\"%.128s\" must be namespace/name, each of "
                     "[A-Za-z0-9._-]",
                     job);
        return NULL;
    }
    if (!*token || strlen(token) > 255 || strpbrk(token, "\r\n")) {
        rm_err_field(err, RM_EINVAL, "token", "%s",
                     !*token ? "missing or empty" : "must be one line of at most 255 bytes");
        return NULL;
    }
    if (!rm_rdzv_name_ok(worker_id, strlen(worker_id)) ||
        strlen(worker_id) >= sizeof(((rm_rdzv_client *)0)->worker_id)) {
        rm_err_field(err, RM_EINVAL, "worker_id", "\"%.64s\" must be 1 to %zu of [A-Za-z0-9._-]", worker_id,
                     sizeof(((rm_rdzv_client *)0)->worker_id) - 1);
        return NULL;
    }
    if (ulen == 0 || ulen + strlen(job) + 16 > sizeof(((rm_rdzv_client *)0)->base)) {
        rm_err_field(err, RM_EINVAL, "url", "\"%.128s\" is %s", url, ulen ? "too long" : "empty");
        return NULL;
    }
    rm_rdzv_client *c = calloc(1, sizeof *c);
    if (!c || !(c->h = rm_httpc_new())) {
        free(c);
        rm_errf(err, RM_ENOMEM, "rendezvous client: out of memory");
        return NULL;
    }
    snprintf(c->base, sizeof c->base, "%.*s/v1/jobs/%s", (int)ulen, url, job);
    snprintf(c->auth, sizeof c->auth, "Authorization: Bearer %s", token);
    snprintf(c->worker_id, sizeof c->worker_id, "%s", worker_id);
    /* the node: NODE_NAME (the pod's spec.nodeName; `ringmaster run` sets it), else the host's
     * name; a value the rendezvous would refuse is not sent (rm_rdzv_client_set_node says why) */
    char host[RM_RDZV_NODE_MAX + 2] = "";
    const char *node = getenv(RM_ENV_NODE_NAME);
    if (!node || !*node) {
        if (gethostname(host, sizeof host - 1) != 0)
            host[0] = 0;
        node = host;
    }
    if (rm_rdzv_client_set_node(c, node, NULL) != RM_OK)
        c->node[0] = 0;
    return c;
}

int rm_rdzv_client_set_node(rm_rdzv_client *c, const char *node, rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "rendezvous: no client");
    if (!node)
        node = "";
    size_t n = strlen(node);
    if (n > RM_RDZV_NODE_MAX || (n && !rm_rdzv_name_ok(node, n)))
        return rm_errf(err, RM_EINVAL,
                       "node name \"%.64s\" is not a node name (at most %d of "
                       "[A-Za-z0-9._-])",
                       node, RM_RDZV_NODE_MAX);
    memcpy(c->node, node, n + 1);
    return RM_OK;
}

void rm_rdzv_client_free(rm_rdzv_client *c)
{
    if (!c)
        return;
    rm_httpc_free(c->h);
    free(c);
}

void rm_rdzv_round_free(rm_rdzv_round *r)
{
    if (!r)
        return;
    free(r->peers);
    r->peers = NULL;
}

/* One request, retried on no-answer / 502 / 503 until `deadline` (monotonic). Each try waits at
 * most try_s. On RM_OK, *out holds an answer the caller must free. */
static int call(rm_rdzv_client *c, const char *method, const char *suffix, const char *ctype,
                const char *body, size_t len, double deadline, double try_s, size_t max_reply,
                rm_httpc_resp *out, rm_err *err)
{
    char url[768], ct[96];
    snprintf(url, sizeof url, "%s%s", c->base, suffix);
    snprintf(ct, sizeof ct, "Content-Type: %s", ctype);
    const char *headers[] = {c->auth, ct, NULL};
    double backoff = 0.05;
    char why[256] = "no attempt made";
    for (;;) {
        double left = deadline - rm_mono();
        if (canceled(c))
            return rm_errf(err, RM_ECANCELED, "rendezvous %s %s: canceled", method, url);
        if (left <= 0)
            return rm_errf(err, RM_ETIMEDOUT, "rendezvous %s %s: timed out (%s)", method, url, why);
        double t = try_s < left ? try_s : left;
        rm_err e = {0};
        memset(out, 0, sizeof *out);
        int rc = rm_httpc_do(c->h, method, url, headers, body, len, (long)(t * 1000) + 1, max_reply, out, &e);
        if (rc == RM_OK && out->status != 502 && out->status != 503)
            return RM_OK;
        if (rc == RM_OK)
            snprintf(why, sizeof why, "HTTP %ld", out->status);
        else
            snprintf(why, sizeof why, "%.200s", e.msg[0] ? e.msg : rm_strerror(rc));
        rm_httpc_resp_free(out);
        if (rc != RM_OK && rc != RM_EIO && rc != RM_ETIMEDOUT)
            return rm_errf(err, rc, "rendezvous %s %s: %s", method, url, why);
        rm_debug("rendezvous retry method=%s url=%s why=\"%s\"", method, url, why);
        left = deadline - rm_mono();
        nap(c, backoff < left ? backoff : left);
        backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
    }
}

/* Map a non-success status to a code with the server's message. */
static int status_err(const rm_httpc_resp *resp, const char *what, rm_err *err)
{
    const char *msg = resp->body ? resp->body : "";
    cJSON *o = resp->body ? cJSON_Parse(resp->body) : NULL;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "error");
    char text[256];
    snprintf(text, sizeof text, "%s", cJSON_IsString(m) ? m->valuestring : msg);
    cJSON_Delete(o);
    int code;
    switch (resp->status) {
    case 401:
        code = RM_EAUTH;
        break;
    case 404:
        code = RM_ENOTFOUND;
        break;
    case 409:
        code = RM_ECLOSED;
        break;
    case 410:
        code = RM_EEPOCH;
        break;
    case 413:
        code = RM_ETOOBIG;
        break;
    default:
        code = RM_EPROTO;
        break;
    }
    return rm_errf(err, code, "rendezvous %s: HTTP %ld: %.200s", what, resp->status, text);
}

static int parse_round(const char *body, rm_rdzv_round *out, rm_err *err)
{
    rm_err e = {0};
    int rc = RM_EPROTO;
    int64_t epoch, rank, world;
    const cJSON *peers;
    rm_rdzv_peer *p = NULL;
    cJSON *o = rm_json_parse(body, strlen(body), &e);
    if (!o || rm_json_int(o, "epoch", true, "", &epoch, &e) < 0 ||
        rm_json_int(o, "rank", true, "", &rank, &e) < 0 ||
        rm_json_int(o, "worldSize", true, "", &world, &e) < 0 ||
        rm_json_arr(o, "peers", true, "", &peers, &e) < 0) {
        rm_errf(err, RM_EPROTO, "rendezvous join: bad reply: %s", e.msg);
        goto out;
    }
    if (world < 1 || world > RM_RDZV_MAX_WORLD || rank < 0 || rank >= world || epoch < 0 ||
        epoch > 1000000000 || cJSON_GetArraySize(peers) != world) {
        rm_errf(err, RM_EPROTO, "rendezvous join: inconsistent reply (rank %lld, world %lld)",
                (long long)rank, (long long)world);
        goto out;
    }
    if (!(p = calloc((size_t)world, sizeof *p))) {
        rc = rm_errf(err, RM_ENOMEM, "rendezvous join: out of memory");
        goto out;
    }
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, peers)
    {
        int64_t pr;
        const char *wid, *addr, *node = NULL;
        int nrc = 0;
        if (rm_json_int(it, "rank", true, "peers", &pr, &e) < 0 ||
            rm_json_str(it, "workerId", true, "peers", &wid, &e) < 0 ||
            rm_json_str(it, "addr", true, "peers", &addr, &e) < 0 || pr != i ||
            ((nrc = rm_json_str(it, "node", false, "peers", &node, &e)) < 0 && nrc != RM_ENOTFOUND) ||
            strlen(wid) >= sizeof p[i].worker_id || strlen(addr) >= sizeof p[i].addr ||
            (node && strlen(node) >= sizeof p[i].node)) {
            rm_errf(err, RM_EPROTO, "rendezvous join: bad peer %d: %s", i,
                    e.msg[0] ? e.msg : "rank out of order or field too long");
            goto out;
        }
        p[i].rank = i;
        snprintf(p[i].worker_id, sizeof p[i].worker_id, "%s", wid);
        snprintf(p[i].addr, sizeof p[i].addr, "%s", addr);
        snprintf(p[i].node, sizeof p[i].node, "%s", node ? node : "");
        i++;
    }
    out->epoch = (int)epoch;
    out->rank = (int)rank;
    out->world_size = (int)world;
    out->peers = p;
    p = NULL;
    rc = RM_OK;
out:
    free(p);
    cJSON_Delete(o);
    return rc;
}

int rm_rdzv_join(rm_rdzv_client *c, const char *my_addr, int last_epoch, double timeout_s, rm_rdzv_round *out,
                 rm_err *err)
{
    /* a NaN timeout would never run out (every "left <= 0" is false) */
    if (!c || !my_addr || !out || isnan(timeout_s))
        return rm_errf(err, RM_EINVAL, "rendezvous join: bad arguments");
    memset(out, 0, sizeof *out);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "workerId", c->worker_id);
    cJSON_AddStringToObject(o, "addr", my_addr);
    cJSON_AddNumberToObject(o, "lastEpoch", last_epoch);
    if (c->node[0])
        cJSON_AddStringToObject(o, "node", c->node);
    char *body = rm_json_print(o);
    cJSON_Delete(o);
    if (!body)
        return rm_errf(err, RM_ENOMEM, "rendezvous join: out of memory");
    double deadline = rm_mono() + timeout_s, backoff = 0.05;
    int rc, waiting_epoch = -1;
    for (;;) {
        rm_httpc_resp resp;
        rc = call(c, "POST", "/join", "application/json", body, strlen(body), deadline, JOIN_TRY_S, MAX_REPLY,
                  &resp, err);
        if (rc == RM_ETIMEDOUT && waiting_epoch >= 0)
            rm_errf(err, rc, "rendezvous join: round of epoch %d did not close within %.1f s", waiting_epoch,
                    timeout_s);
        if (rc < 0)
            break;
        if (resp.status == 200) {
            rc = parse_round(resp.body, out, err);
        } else if (resp.status == 202) {
            rc = RM_EAGAIN; /* round not closed yet: ask again */
            cJSON *w = cJSON_Parse(resp.body);
            const cJSON *ep = cJSON_GetObjectItemCaseSensitive(w, "epoch");
            if (cJSON_IsNumber(ep) && ep->valuedouble >= 0 && ep->valuedouble < 1e9)
                waiting_epoch = (int)ep->valuedouble;
            cJSON_Delete(w);
        } else if (resp.status == 404) {
            /* not registered yet (the controller may be catching up): retry until the deadline */
            rc = status_err(&resp, "join", err);
            double left = deadline - rm_mono();
            if (left > 0) {
                nap(c, backoff < left ? backoff : left);
                backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
                if (deadline - rm_mono() > 0)
                    rc = RM_EAGAIN;
            }
        } else {
            rc = status_err(&resp, "join", err);
        }
        rm_httpc_resp_free(&resp);
        if (rc != RM_EAGAIN)
            break;
    }
    free(body);
    return rc;
}

int rm_rdzv_join_poll(rm_rdzv_client *c, const char *my_addr, int last_epoch, double wait_s,
                      rm_rdzv_round *out, int *joined, bool *settled, rm_err *err)
{
    if (joined)
        *joined = 0;
    if (settled)
        *settled = false;
    if (!c || !my_addr || !out || !(wait_s >= 0 && wait_s <= 10))
        return rm_errf(err, RM_EINVAL, "rendezvous join: bad arguments");
    memset(out, 0, sizeof *out);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "workerId", c->worker_id);
    cJSON_AddStringToObject(o, "addr", my_addr);
    cJSON_AddNumberToObject(o, "lastEpoch", last_epoch);
    cJSON_AddNumberToObject(o, "wait", wait_s);
    char *body = rm_json_print(o);
    cJSON_Delete(o);
    if (!body)
        return rm_errf(err, RM_ENOMEM, "rendezvous join: out of memory");
    rm_httpc_resp resp;
    int rc = call(c, "POST", "/join", "application/json", body, strlen(body),
                  rm_mono() + wait_s + SHORT_TRY_S, wait_s + SHORT_TRY_S, MAX_REPLY, &resp, err);
    free(body);
    if (rc < 0)
        return rc;
    if (resp.status == 200) {
        rc = parse_round(resp.body, out, err);
    } else if (resp.status == 202) {
        rc = RM_EAGAIN;
        cJSON *w = cJSON_Parse(resp.body);
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(w, "epoch");
        const cJSON *jn = cJSON_GetObjectItemCaseSensitive(w, "joined");
        if (cJSON_IsNumber(ep) && ep->valuedouble >= 0 && ep->valuedouble < 1e9)
            out->epoch = (int)ep->valuedouble;
        if (joined && cJSON_IsNumber(jn) && jn->valuedouble >= 0 && jn->valuedouble <= RM_RDZV_MAX_WORLD)
            *joined = (int)jn->valuedouble;
        if (settled)
            *settled = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "settled"));
        cJSON_Delete(w);
    } else {
        rc = status_err(&resp, "join", err);
    }
    rm_httpc_resp_free(&resp);
    return rc;
}

int rm_rdzv_server_register(rm_rdzv_client *c, int index, const char *addr, rm_err *err)
{
    return rm_rdzv_server_report(c, index, addr, 0, NULL, err);
}

int rm_rdzv_server_report(rm_rdzv_client *c, int index, const char *addr, int ckfail, const char *ckerr,
                          rm_err *err)
{
    return rm_rdzv_server_put(c, index, addr, ckfail, ckerr, NULL, err);
}

/* The agreement record as rdzv.h "Servers" writes it; false when out of memory. */
static bool group_json(cJSON *o, const rm_rdzv_ps_group *g)
{
    char h[2][24];
    snprintf(h[0], sizeof h[0], "%" PRIx64, g->inc);
    snprintf(h[1], sizeof h[1], "%" PRIx64, g->gen);
    cJSON *x = cJSON_AddObjectToObject(o, "group");
    cJSON *held = x ? cJSON_AddArrayToObject(x, "held") : NULL;
    if (!held || !cJSON_AddStringToObject(x, "inc", h[0]) || !cJSON_AddStringToObject(x, "gen", h[1]) ||
        !cJSON_AddBoolToObject(x, "settled", g->settled) ||
        !cJSON_AddNumberToObject(x, "at", (double)g->at) ||
        !cJSON_AddNumberToObject(x, "version", (double)g->version))
        return false;
    for (int k = 0; k < g->nheld && k < RM_RDZV_PS_HELD_MAX; k++) {
        cJSON *v = cJSON_CreateNumber((double)g->held[k]);
        if (!v || !cJSON_AddItemToArray(held, v)) {
            cJSON_Delete(v);
            return false;
        }
    }
    return true;
}

int rm_rdzv_server_put(rm_rdzv_client *c, int index, const char *addr, int ckfail, const char *ckerr,
                       const rm_rdzv_ps_group *g, rm_err *err)
{
    if (!c || !addr || index < 0 || index >= RM_RDZV_MAX_SERVERS || strlen(addr) >= 64)
        return rm_errf(err, RM_EINVAL, "rendezvous server register: bad arguments");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "addr", addr);
    if (ckfail > 0) {
        cJSON_AddNumberToObject(o, "checkpointFailures", ckfail);
        cJSON_AddStringToObject(o, "checkpointError", ckerr ? ckerr : "");
    }
    if (g && g->known && !group_json(o, g)) {
        cJSON_Delete(o);
        return rm_errf(err, RM_ENOMEM, "rendezvous server register: out of memory");
    }
    char *body = rm_json_print(o);
    cJSON_Delete(o);
    if (!body)
        return rm_errf(err, RM_ENOMEM, "rendezvous server register: out of memory");
    char suffix[32];
    snprintf(suffix, sizeof suffix, "/servers/%d", index);
    rm_httpc_resp resp;
    int rc = call(c, "PUT", suffix, "application/json", body, strlen(body), rm_mono() + SHORT_TRY_S,
                  SHORT_TRY_S, 4096, &resp, err);
    free(body);
    if (rc < 0)
        return rc;
    rc = resp.status / 100 == 2 ? RM_OK : status_err(&resp, "server register", err);
    rm_httpc_resp_free(&resp);
    return rc;
}

/* GET .../servers (a reply capped at cap bytes), parsed into *out (owned; NULL when the body is not
 * JSON). Returns RM_OK, or the call's or the status's error. */
static int get_servers(rm_rdzv_client *c, size_t cap, cJSON **out, rm_err *err)
{
    rm_httpc_resp resp;
    *out = NULL;
    int rc = call(c, "GET", "/servers", "application/json", NULL, 0, rm_mono() + SHORT_TRY_S, SHORT_TRY_S,
                  cap, &resp, err);
    if (rc < 0)
        return rc;
    if (resp.status != 200)
        rc = status_err(&resp, "servers", err);
    else
        *out = resp.body ? cJSON_Parse(resp.body) : NULL;
    rm_httpc_resp_free(&resp);
    return rc;
}

int rm_rdzv_servers(rm_rdzv_client *c, char (*addrs)[128], int max, int *n, rm_err *err)
{
    *n = 0;
    if (!c || !addrs || max < 1)
        return rm_errf(err, RM_EINVAL, "rendezvous servers: bad arguments");
    cJSON *o = NULL;
    int rc = get_servers(c, 64 * 1024, &o, err);
    if (rc < 0)
        return rc;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "servers"), *x;
    rc = cJSON_IsArray(a) ? RM_OK
                          : rm_errf(err, RM_EPROTO, "rendezvous servers: bad reply (no servers array)");
    cJSON_ArrayForEach(x, a)
    {
        if (rc || *n >= max)
            break;
        if (!cJSON_IsString(x) || strlen(x->valuestring) >= 128) {
            rc = rm_errf(err, RM_EPROTO, "rendezvous servers: bad entry %d", *n);
            break;
        }
        snprintf(addrs[*n], 128, "%s", x->valuestring);
        (*n)++;
    }
    cJSON_Delete(o);
    return rc;
}

/* One "groups" entry (rdzv.h "Servers"); false when malformed. */
static bool group_read(const cJSON *x, rm_rdzv_ps_group *g)
{
    memset(g, 0, sizeof *g);
    if (cJSON_IsNull(x))
        return true;
    const cJSON *inc = cJSON_GetObjectItemCaseSensitive(x, "inc"),
                *gen = cJSON_GetObjectItemCaseSensitive(x, "gen");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(x, "at"),
                *ver = cJSON_GetObjectItemCaseSensitive(x, "version");
    const cJSON *held = cJSON_GetObjectItemCaseSensitive(x, "held"), *v;
    if (!cJSON_IsString(inc) || !cJSON_IsString(gen) || strlen(inc->valuestring) > 16 ||
        strlen(gen->valuestring) > 16 || !cJSON_IsNumber(at) || !cJSON_IsNumber(ver) ||
        !cJSON_IsArray(held) || cJSON_GetArraySize(held) > RM_RDZV_PS_HELD_MAX)
        return false;
    g->inc = strtoull(inc->valuestring, NULL, 16);
    g->gen = strtoull(gen->valuestring, NULL, 16);
    g->settled = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "settled"));
    g->at = (int64_t)at->valuedouble;
    g->version = (int64_t)ver->valuedouble;
    cJSON_ArrayForEach(v, held)
    {
        if (!cJSON_IsNumber(v))
            return false;
        g->held[g->nheld++] = (int64_t)v->valuedouble;
    }
    g->known = true;
    return true;
}

int rm_rdzv_server_groups(rm_rdzv_client *c, rm_rdzv_ps_group *out, int max, int *n, rm_err *err)
{
    *n = 0;
    if (!c || !out || max < 1)
        return rm_errf(err, RM_EINVAL, "rendezvous server groups: bad arguments");
    cJSON *o = NULL;
    int rc = get_servers(c, 256 * 1024, &o, err);
    if (rc < 0)
        return rc;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "groups"), *x;
    rc = cJSON_IsArray(a) || cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "servers"))
             ? RM_OK
             : rm_errf(err, RM_EPROTO, "rendezvous servers: bad reply (no servers array)");
    cJSON_ArrayForEach(x, a)
    {
        if (rc || *n >= max)
            break;
        if (!group_read(x, &out[*n])) {
            rc = rm_errf(err, RM_EPROTO, "rendezvous servers: bad group %d", *n);
            break;
        }
        (*n)++;
    }
    cJSON_Delete(o);
    return rc;
}

int rm_rdzv_kv_put(rm_rdzv_client *c, int epoch, const char *key, const void *val, size_t len, rm_err *err)
{
    if (!c || !key || (!val && len) || !rm_rdzv_name_ok(key, strlen(key)) || strlen(key) > 128)
        return rm_errf(err, RM_EINVAL, "rendezvous kv put: bad arguments");
    if (len > RM_RDZV_MAX_KV)
        return rm_errf(err, RM_ETOOBIG, "rendezvous kv put: value of %zu bytes over %d", len, RM_RDZV_MAX_KV);
    char suffix[192];
    snprintf(suffix, sizeof suffix, "/kv/%d/%s", epoch, key);
    rm_httpc_resp resp;
    int rc = call(c, "PUT", suffix, "application/octet-stream", val ? val : "", len,
                  rm_mono() + KV_PUT_TOTAL_S, SHORT_TRY_S, 4096, &resp, err);
    if (rc < 0)
        return rc;
    rc = resp.status / 100 == 2 ? RM_OK : status_err(&resp, "kv put", err);
    rm_httpc_resp_free(&resp);
    return rc;
}

int rm_rdzv_kv_get(rm_rdzv_client *c, int epoch, const char *key, double timeout_s, void **val, size_t *len,
                   rm_err *err)
{
    if (!c || !key || !val || !len || !rm_rdzv_name_ok(key, strlen(key)) || strlen(key) > 128 ||
        isnan(timeout_s))
        return rm_errf(err, RM_EINVAL, "rendezvous kv get: bad arguments");
    *val = NULL;
    *len = 0;
    double deadline = rm_mono() + timeout_s;
    for (bool first = true;; first = false) {
        double left = deadline - rm_mono();
        if (left <= 0 && !first)
            return rm_errf(err, RM_ETIMEDOUT,
                           "rendezvous kv get: %s not published in epoch %d "
                           "within %.1f s",
                           key, epoch, timeout_s);
        double wait = left < 0 ? 0 : left < KV_WAIT_CAP_S ? left : KV_WAIT_CAP_S;
        double t0 = rm_mono();
        char suffix[224];
        snprintf(suffix, sizeof suffix, "/kv/%d/%s?wait=%.3f", epoch, key, wait);
        rm_httpc_resp resp;
        /* the try may outlive the caller's deadline by a little so the server's answer arrives */
        int rc = call(c, "GET", suffix, "application/json", NULL, 0, deadline + 2.0, wait + 5.0,
                      RM_RDZV_MAX_KV + 1, &resp, err);
        if (rc < 0)
            return rc;
        if (resp.status == 200) {
            *val = resp.body; /* NUL-terminated, owned */
            *len = resp.len;
            resp.body = NULL;
            rm_httpc_resp_free(&resp);
            return RM_OK;
        }
        if (resp.status != 404) {
            rc = status_err(&resp, "kv get", err);
            rm_httpc_resp_free(&resp);
            return rc;
        }
        rm_httpc_resp_free(&resp);
        /* a 404 that came back early (job not registered yet) must not spin */
        if (rm_mono() - t0 < wait * 0.9)
            nap(c, 0.1);
    }
}

int rm_rdzv_send_report(rm_rdzv_client *c, const rm_rdzv_report *rep, rm_rdzv_action *action,
                        int *current_epoch, rm_err *err)
{
    if (!c || !rep)
        return rm_errf(err, RM_EINVAL, "rendezvous report: bad arguments");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "workerId", c->worker_id);
    cJSON_AddNumberToObject(o, "epoch", rep->epoch);
    cJSON_AddNumberToObject(o, "rank", rep->rank);
    cJSON_AddNumberToObject(o, "step", (double)rep->step);
    cJSON_AddNumberToObject(o, "trainEpoch", rep->train_epoch);
    cJSON_AddNumberToObject(o, "loss", rep->loss); /* NaN prints as null = absent */
    cJSON_AddNumberToObject(o, "samplesPerSecond", rep->samples_per_second);
    if (rep->tokens_per_second > 0) /* language models only */
        cJSON_AddNumberToObject(o, "tokensPerSecond", rep->tokens_per_second);
    cJSON_AddNumberToObject(o, "lastCheckpointStep", (double)rep->last_checkpoint_step);
    cJSON_AddNumberToObject(o, "allreduceGBps", rep->allreduce_gbps);
    cJSON_AddStringToObject(o, "state", rep->done ? "done" : "training");
    if (rep->checkpoint_failures > 0) {
        cJSON_AddNumberToObject(o, "checkpointFailures", rep->checkpoint_failures);
        cJSON_AddStringToObject(o, "checkpointError", rep->checkpoint_error ? rep->checkpoint_error : "");
    }
    if (rep->nevals > 0) {
        cJSON *evs = cJSON_AddArrayToObject(o, "evaluations");
        for (int i = 0; evs && i < rep->nevals && i < RM_RDZV_MAX_EVALS; i++) {
            cJSON *ev = cJSON_CreateObject();
            if (!ev)
                break;
            const rm_rdzv_eval *x = &rep->evals[i];
            cJSON_AddNumberToObject(ev, "epoch", x->epoch);
            if (x->step > 0)
                cJSON_AddNumberToObject(ev, "step", (double)x->step);
            cJSON_AddNumberToObject(ev, "testAccuracy", x->test_accuracy);
            cJSON_AddNumberToObject(ev, "trainLoss", x->train_loss);
            if (x->val_loss != 0) /* NaN prints as null = absent, as 0 does here */
                cJSON_AddNumberToObject(ev, "valLoss", x->val_loss);
            cJSON_AddItemToArray(evs, ev);
        }
    }
    if (rep->peak_rss > 0) {
        cJSON *mem = cJSON_AddObjectToObject(o, "memory");
        cJSON_AddNumberToObject(mem, "params", rep->mem_params);
        cJSON_AddNumberToObject(mem, "grads", rep->mem_grads);
        cJSON_AddNumberToObject(mem, "optimizer", rep->mem_optimizer);
        cJSON_AddNumberToObject(mem, "activations", rep->mem_activations);
        cJSON_AddNumberToObject(mem, "peakRss", rep->peak_rss);
    }
    if (rep->have_result) {
        cJSON *res = cJSON_AddObjectToObject(o, "result");
        cJSON_AddNumberToObject(res, "testAccuracy", rep->test_accuracy);
        cJSON_AddNumberToObject(res, "trainLoss", rep->train_loss);
        cJSON_AddNumberToObject(res, "steps", (double)rep->result_steps);
        cJSON_AddNumberToObject(res, "seconds", rep->seconds);
        cJSON_AddNumberToObject(res, "samplesPerSecond", rep->result_samples_per_second);
        if (rep->val_loss != 0)
            cJSON_AddNumberToObject(res, "valLoss", rep->val_loss);
        if (rep->result_tokens_per_second > 0)
            cJSON_AddNumberToObject(res, "tokensPerSecond", rep->result_tokens_per_second);
        if (rep->model_uri && *rep->model_uri) {
            cJSON *mo = cJSON_AddObjectToObject(res, "model");
            cJSON_AddStringToObject(mo, "uri", rep->model_uri);
            cJSON_AddStringToObject(mo, "sha256", rep->model_sha256 ? rep->model_sha256 : "");
            cJSON_AddNumberToObject(mo, "bytes", rep->model_bytes);
        }
        if (rep->export_error && *rep->export_error)
            cJSON_AddStringToObject(res, "exportError", rep->export_error);
    }
    char *body = rm_json_print(o);
    cJSON_Delete(o);
    if (!body)
        return rm_errf(err, RM_ENOMEM, "rendezvous report: out of memory");
    rm_httpc_resp resp;
    int rc = call(c, "POST", "/report", "application/json", body, strlen(body), rm_mono() + REPORT_TOTAL_S,
                  SHORT_TRY_S, 4096, &resp, err);
    free(body);
    if (rc < 0)
        return rc;
    if (resp.status == 409) { /* job gone: the same as being told to stop */
        if (action)
            *action = RM_RDZV_STOP;
        rm_httpc_resp_free(&resp);
        return RM_OK;
    }
    if (resp.status != 200) {
        rc = status_err(&resp, "report", err);
        rm_httpc_resp_free(&resp);
        return rc;
    }
    rm_err e = {0};
    int64_t epoch;
    const char *act;
    cJSON *r = rm_json_parse(resp.body, resp.len, &e);
    rm_httpc_resp_free(&resp);
    if (!r || rm_json_int(r, "epoch", true, "", &epoch, &e) < 0 ||
        rm_json_str(r, "action", true, "", &act, &e) < 0) {
        cJSON_Delete(r);
        return rm_errf(err, RM_EPROTO, "rendezvous report: bad reply: %s", e.msg);
    }
    if (epoch < 0 || epoch > 1000000000) { /* the service's own bound; (int) must not wrap */
        cJSON_Delete(r);
        return rm_errf(err, RM_EPROTO, "rendezvous report: epoch %lld out of range", (long long)epoch);
    }
    int a = rm_enum_index(rm_rdzv_action_names, act);
    cJSON_Delete(r);
    if (a < 0)
        return rm_errf(err, RM_EPROTO, "rendezvous report: unknown action");
    if (action)
        *action = (rm_rdzv_action)a;
    if (current_epoch)
        *current_epoch = (int)epoch;
    return RM_OK;
}
