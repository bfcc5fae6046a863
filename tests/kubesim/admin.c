/* admin.c — faults on demand and the request log (/kubesim/...).
 *
 * POST /kubesim/faults {"failNext":N,"code":500|429|409,"verb":"create","resource":"pods",
 *   "watch410":N,"delayMs":D,"dropWatches":true,"nodeReady":false,"expireContinue":true,
 *   "restart":true,"fresh":false,"schedulerHold":true}; GET /kubesim/faults shows them; shortcuts:
 *   POST /kubesim/drop-watches, /kubesim/watch-410, /kubesim/node-not-ready, /kubesim/node-ready,
 *   /kubesim/restart[?fresh=true]; node-not-ready?node=NAME / node-ready?node=NAME lose (or bring
 *   back) one node alone, with its link under --nodes. GET /kubesim/requests[?verb=&resource=&group=&namespace=]
 *   lists every request (method, path, verb, group, version, resource, subresource, namespace,
 *   name, code); DELETE /kubesim/requests resets it. --runtime swarm: POST
 *   /kubesim/swarm-kill?namespace=NS&pod=NAME[&code=N] (default 137) kills that pod's simulated
 *   worker, /kubesim/swarm-hang?namespace=NS&pod=NAME makes it stop talking.
 * Design: one mutex over a small fault table consulted once per API request; the log is a ring
 * of fixed-size records (no allocation per request). */
#include "tests/kubesim/kubesim.h"
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/json.h"
#include "common/log.h"

extern char **environ;

void ks_snapshots_clear(ks_server *s);

void ks_reqlog_add(ks_server *s, const ks_reqrec *r)
{
    pthread_mutex_lock(&s->reqmu);
    if (s->reqlog_len == s->reqlog_cap) {
        s->reqlog_start = (s->reqlog_start + 1) % s->reqlog_cap;
        s->reqlog_len--;
    }
    s->reqlog[(s->reqlog_start + s->reqlog_len) % s->reqlog_cap] = *r;
    s->reqlog_len++;
    pthread_mutex_unlock(&s->reqmu);
}

int ks_fault_check(ks_server *s, const char *verb, const char *resource)
{
    pthread_mutex_lock(&s->faults.mu);
    int delay = s->faults.delay_ms, code = 0;
    if (s->faults.fail_n > 0 && (!s->faults.fail_verb[0] || !strcmp(s->faults.fail_verb, verb)) &&
        (!s->faults.fail_resource[0] || !strcmp(s->faults.fail_resource, resource))) {
        s->faults.fail_n--;
        code = s->faults.fail_code ? s->faults.fail_code : 500;
    }
    pthread_mutex_unlock(&s->faults.mu);
    if (delay > 0) {
        struct timespec ts = {delay / 1000, (long)(delay % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return code;
}

static int set_node_ready(cJSON *node, void *ud)
{
    bool ready = *(bool *)ud;
    cJSON *st = cJSON_GetObjectItemCaseSensitive(node, "status");
    cJSON *conds = cJSON_GetObjectItemCaseSensitive(st, "conditions");
    for (cJSON *c = conds ? conds->child : NULL; c; c = c->next) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "type");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "Ready")) {
            cJSON_ReplaceItemInObjectCaseSensitive(c, "status", cJSON_CreateString(ready ? "True" : "False"));
            cJSON_ReplaceItemInObjectCaseSensitive(
                c, "reason", cJSON_CreateString(ready ? "KubeletReady" : "NodeStatusUnknown"));
            cJSON_ReplaceItemInObjectCaseSensitive(
                c, "message",
                cJSON_CreateString(ready ? "kubelet is posting ready status"
                                         : "Kubelet stopped posting node status."));
        }
    }
    return 1;
}

static void node_ready(ks_server *s, bool ready)
{
    pthread_mutex_lock(&s->faults.mu);
    s->faults.node_not_ready = !ready;
    pthread_mutex_unlock(&s->faults.mu);
    if (!s->opts.nnodes)
        ks_internal_update(s, ks_core_kind(s, KS_T_NODE), "", KS_NODE_NAME, set_node_ready, &ready);
    for (int i = 0; i < s->opts.nnodes; i++) /* --node / --nodes: every node (the kubelet serves them all) */
        ks_internal_update(s, ks_core_kind(s, KS_T_NODE), "", s->opts.nodes[i].name, set_node_ready, &ready);
}

/* One node lost alone (node-not-ready?node=NAME) or back: its Node's Ready condition, the kubelet
 * stops serving only its pods, nothing new binds there; under --nodes its bridge port in netns.sh's
 * fabric goes down too (a real partition: its pods' connections stall), up again when it is back. */
static int node_ready_one(ks_server *s, const char *name, bool ready)
{
    int idx = -1;
    for (int i = 0; i < s->opts.nnodes; i++)
        if (!strcmp(s->opts.nodes[i].name, name))
            idx = i;
    if (idx < 0)
        return -1;
    pthread_mutex_lock(&s->faults.mu);
    if (ready)
        s->faults.node_lost &= ~(1u << idx);
    else
        s->faults.node_lost |= 1u << idx;
    pthread_mutex_unlock(&s->faults.mu);
    ks_internal_update(s, ks_core_kind(s, KS_T_NODE), "", s->opts.nodes[idx].name, set_node_ready, &ready);
    if (s->opts.nodes[idx].netns[0] && s->opts.fabric_netns[0]) {
        char port[16];
        snprintf(port, sizeof port, "vh%d", idx);
        char *argv[] = {"ip", "-n", s->opts.fabric_netns, "link", "set", port, ready ? "up" : "down", NULL};
        pid_t pid = -1;
        int st = -1;
        if (posix_spawnp(&pid, "ip", NULL, NULL, argv, environ) != 0 || waitpid(pid, &st, 0) < 0 || st != 0)
            rm_warn("kubesim: ip -n %s link set %s %s failed (status %d)", s->opts.fabric_netns, port,
                    ready ? "up" : "down", st);
        else
            rm_info("kubesim node=%s link %s %s", name, port, ready ? "up" : "down");
    }
    return 0;
}

static void request_restart(ks_server *s, bool fresh)
{
    pthread_mutex_lock(&s->ctlmu);
    s->ctl_restart = fresh ? 2 : 1;
    pthread_cond_broadcast(&s->ctlcond);
    pthread_mutex_unlock(&s->ctlmu);
}

static cJSON *fault_state(ks_server *s)
{
    cJSON *o = cJSON_CreateObject();
    pthread_mutex_lock(&s->faults.mu);
    cJSON_AddNumberToObject(o, "failNext", s->faults.fail_n);
    cJSON_AddNumberToObject(o, "code", s->faults.fail_code);
    cJSON_AddStringToObject(o, "verb", s->faults.fail_verb);
    cJSON_AddStringToObject(o, "resource", s->faults.fail_resource);
    cJSON_AddNumberToObject(o, "watch410", s->faults.watch_410_n);
    cJSON_AddNumberToObject(o, "delayMs", s->faults.delay_ms);
    cJSON_AddBoolToObject(o, "nodeReady", !s->faults.node_not_ready);
    cJSON *lost = cJSON_AddArrayToObject(o, "nodesLost");
    for (int i = 0; i < s->opts.nnodes && i < KS_MAX_NODES; i++)
        if ((s->faults.node_lost >> i) & 1u)
            cJSON_AddItemToArray(lost, cJSON_CreateString(s->opts.nodes[i].name));
    cJSON_AddBoolToObject(o, "schedulerHold", s->faults.sched_hold);
    cJSON_AddNumberToObject(o, "watchGeneration", atomic_load(&s->faults.watch_gen));
    pthread_mutex_unlock(&s->faults.mu);
    return o;
}

/* ks_reply_json, then 1: "handled" */
static int reply(rm_http_resp *resp, int code, cJSON *o)
{
    int rc = ks_reply_json(resp, code, o);
    return rc ? rc : 1;
}

static int apply_faults(ks_server *s, const cJSON *f, rm_http_resp *resp)
{
    const cJSON *v;
    pthread_mutex_lock(&s->faults.mu);
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(f, "failNext"))) {
        s->faults.fail_n = (int)v->valuedouble;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(f, "code");
        s->faults.fail_code = cJSON_IsNumber(c) ? (int)c->valuedouble : 500;
        const cJSON *vb = cJSON_GetObjectItemCaseSensitive(f, "verb");
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(f, "resource");
        snprintf(s->faults.fail_verb, sizeof(s->faults.fail_verb), "%s",
                 cJSON_IsString(vb) ? vb->valuestring : "");
        snprintf(s->faults.fail_resource, sizeof(s->faults.fail_resource), "%s",
                 cJSON_IsString(rs) ? rs->valuestring : "");
    }
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(f, "watch410")))
        s->faults.watch_410_n = (int)v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(f, "delayMs")))
        s->faults.delay_ms = v->valuedouble < 0 ? 0 : v->valuedouble > 60000 ? 60000 : (int)v->valuedouble;
    if (cJSON_IsBool(v = cJSON_GetObjectItemCaseSensitive(f, "schedulerHold")))
        s->faults.sched_hold = cJSON_IsTrue(v); /* sched.c binds nothing while set */
    pthread_mutex_unlock(&s->faults.mu);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "dropWatches")))
        atomic_fetch_add(&s->faults.watch_gen, 1);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "expireContinue")))
        ks_snapshots_clear(s);
    if (cJSON_IsBool(v = cJSON_GetObjectItemCaseSensitive(f, "nodeReady")))
        node_ready(s, cJSON_IsTrue(v));
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "restart")))
        request_restart(s, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "fresh")));
    return reply(resp, 200, fault_state(s));
}

static bool qmatch(const rm_http_req *req, const char *key, const char *val)
{
    const char *q = rm_http_query(req, key);
    return !q || !*q || !strcmp(q, val);
}

int ks_admin(ks_server *s, const rm_http_req *req, rm_http_resp *resp)
{
    const char *p = req->path;
    if (strncmp(p, "/kubesim/", 9))
        return 0;
    const char *a = p + 9;
    bool post = !strcmp(req->method, "POST") || !strcmp(req->method, "PUT");
    if (!strcmp(a, "faults")) {
        if (!post)
            return reply(resp, 200, fault_state(s));
        rm_err e = {0};
        cJSON *f = rm_json_parse(req->body, req->body_len, &e);
        if (!cJSON_IsObject(f)) {
            cJSON_Delete(f);
            return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL, "faults: a JSON object is required") <
                           0
                       ? RM_ENOMEM
                       : 1;
        }
        int rc = apply_faults(s, f, resp);
        cJSON_Delete(f);
        return rc;
    }
    if (post && !strcmp(a, "drop-watches")) {
        atomic_fetch_add(&s->faults.watch_gen, 1);
        return reply(resp, 200, fault_state(s));
    }
    if (post && !strcmp(a, "watch-410")) {
        pthread_mutex_lock(&s->faults.mu);
        s->faults.watch_410_n++;
        pthread_mutex_unlock(&s->faults.mu);
        return reply(resp, 200, fault_state(s));
    }
    if (post && (!strcmp(a, "node-not-ready") || !strcmp(a, "node-ready"))) {
        const char *one = rm_http_query(req, "node");
        if (one && *one) {
            if (node_ready_one(s, one, !strcmp(a, "node-ready")) < 0)
                return ks_status(resp, 404, "NotFound", NULL, NULL, NULL,
                                 "nodes \"%s\" not found (node= names a --node or --nodes node)", one) < 0
                           ? RM_ENOMEM
                           : 1;
            return reply(resp, 200, fault_state(s));
        }
        node_ready(s, !strcmp(a, "node-ready"));
        return reply(resp, 200, fault_state(s));
    }
    if (post && (!strcmp(a, "swarm-kill") || !strcmp(a, "swarm-hang"))) {
        const char *ns = rm_http_query(req, "namespace"), *pod = rm_http_query(req, "pod");
        const char *cs = rm_http_query(req, "code");
        char *end = NULL;
        long code = cs && *cs ? strtol(cs, &end, 10) : 137;
        if (!pod || !*pod || (cs && *cs && (*end || code < 0 || code > 255)))
            return ks_status(resp, 400, "BadRequest", NULL, NULL, NULL,
                             "%s: pod= is required and code= must be 0..255", a) < 0
                       ? RM_ENOMEM
                       : 1;
        int rc =
            ks_kubelet_swarm_fault(s, ns && *ns ? ns : "default", pod, !strcmp(a, "swarm-hang"), (int)code);
        if (rc == RM_OK) {
            resp->body = strdup("{\"fault\":true}");
            return resp->body ? 1 : RM_ENOMEM;
        }
        return ks_status(resp,
                         rc == RM_ENOTFOUND ? 404
                         : rc == RM_EINVAL  ? 409
                                            : 503,
                         rc == RM_ENOTFOUND ? "NotFound"
                         : rc == RM_EINVAL  ? "Conflict"
                                            : "ServiceUnavailable",
                         NULL, NULL, NULL, "%s: %s", a,
                         rc == RM_ENOTFOUND ? "no running pod with that name has a worker in the swarm"
                         : rc == RM_EINVAL  ? "kubesim runs without --runtime swarm"
                                            : "the swarm process is gone") < 0
                   ? RM_ENOMEM
                   : 1;
    }
    if (post && !strcmp(a, "restart")) {
        const char *fr = rm_http_query(req, "fresh");
        request_restart(s, fr && (!strcmp(fr, "true") || !strcmp(fr, "1")));
        resp->status = 202;
        resp->body = strdup("{\"restarting\":true}");
        return resp->body ? 1 : RM_ENOMEM;
    }
    if (!strcmp(a, "requests")) {
        if (!strcmp(req->method, "DELETE")) {
            pthread_mutex_lock(&s->reqmu);
            s->reqlog_len = s->reqlog_start = 0;
            pthread_mutex_unlock(&s->reqmu);
            resp->body = strdup("{\"items\":[]}");
            return resp->body ? 1 : RM_ENOMEM;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON *items = cJSON_AddArrayToObject(o, "items");
        pthread_mutex_lock(&s->reqmu);
        for (size_t i = 0; i < s->reqlog_len; i++) {
            const ks_reqrec *r = &s->reqlog[(s->reqlog_start + i) % s->reqlog_cap];
            const char *uaq = rm_http_query(req, "userAgent");
            if (!qmatch(req, "verb", r->verb) || !qmatch(req, "resource", r->resource) ||
                !qmatch(req, "group", r->group) || !qmatch(req, "namespace", r->ns) ||
                (uaq && *uaq && strncmp(r->ua, uaq, strlen(uaq))))
                continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "method", r->method);
            cJSON_AddStringToObject(e, "path", r->path);
            cJSON_AddStringToObject(e, "verb", r->verb);
            cJSON_AddStringToObject(e, "group", r->group);
            cJSON_AddStringToObject(e, "version", r->version);
            cJSON_AddStringToObject(e, "resource", r->resource);
            cJSON_AddStringToObject(e, "subresource", r->sub);
            cJSON_AddStringToObject(e, "namespace", r->ns);
            cJSON_AddStringToObject(e, "name", r->name);
            cJSON_AddStringToObject(e, "contentType", r->ctype);
            cJSON_AddStringToObject(e, "userAgent", r->ua);
            cJSON_AddNumberToObject(e, "code", r->code);
            cJSON_AddItemToArray(items, e);
        }
        pthread_mutex_unlock(&s->reqmu);
        return reply(resp, 200, o);
    }
    return ks_status(resp, 404, "NotFound", NULL, NULL, NULL, "unknown kubesim admin path %.100s", p) < 0
               ? RM_ENOMEM
               : 1;
}
