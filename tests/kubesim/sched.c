/* sched.c — kubesim's schedulers, on only when nodes are given (--node NAME:cpu=8,gpu=4,...).
 *
 *  - default scheduler (pods with no schedulerName or "default-scheduler"): binds a pod to the
 *    first node whose labels match its spec.nodeSelector and where its effective requests (common/podres.h, Kubernetes' PodRequests rule) fit
 *    what the node's allocatable leaves after the requests of the non-terminal pods bound there,
 *    and the node's pod count; otherwise PodScheduled=False reason Unschedulable ("0/N nodes are
 *    available: ...") and it is tried again every pass, so it binds as capacity frees. Among the
 *    pending pods it takes the highest spec.priority first, then a fixed hash order of
 *    namespace/name: kubesim has no queue arrival times, and the hash interleaves pods that
 *    controllers created together, as concurrent creation does on a real cluster.
 *  - volcano (schedulerName "volcano"): a PodGroup (scheduling.volcano.sh/v1beta1) named by the
 *    pod's annotation scheduling.k8s.io/group-name moves Pending -> Inqueue when its minResources
 *    fit the cluster's free resources minus what other Inqueue groups reserve (Volcano's enqueue
 *    action); its pods are bound all at once when at least minMember of them exist and all of
 *    them fit; Running when minMember are running, Completed when minMember succeeded and none
 *    runs; status.running/succeeded/failed counted. Pods without a group (or whose group does not
 *    exist) wait.
 *  - coscheduling (the --coscheduling-scheduler-name profile, default scheduler-plugins-scheduler):
 *    a PodGroup (scheduling.x-k8s.io/v1alpha1) named by the label scheduling.x-k8s.io/pod-group;
 *    PreFilter's rules: at least minMember labelled pods and minResources fitting the free
 *    resources, then all its pending pods bound at once (Permit); phases Pending -> Scheduling ->
 *    Running -> Finished.
 *  - any other schedulerName: the pod waits for that scheduler (nothing is written).
 *  - with --nodes N (namespaced nodes, netns.sh) the default scheduler spreads: of the nodes that
 *    fit, the one with the fewest bound pods (ties: the first), as kube-scheduler's scoring would.
 * A pass sees one snapshot; binds and status writes go through ks_internal_update. With the
 * fault sched_hold nothing binds (tests line pods up first). */
#include "tests/kubesim/kubesim.h"
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/json.h"
#include "common/log.h"
#include "common/podres.h"
#include "common/quantity.h"

#define COSCHED_DEFAULT "scheduler-plugins-scheduler"

static const cJSON *oget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

bool ks_node_parse(const char *arg, ks_node_spec *out, char *msg, size_t cap)
{
    memset(out, 0, sizeof(*out));
    out->pods = 110 * 1000LL;
    const char *colon = strchr(arg, ':');
    size_t nl = colon ? (size_t)(colon - arg) : strlen(arg);
    if (nl == 0 || nl >= sizeof(out->name)) {
        snprintf(msg, cap, "--node %s: wants NAME:cpu=N,memory=Q,gpu=N,pods=N", arg);
        return false;
    }
    memcpy(out->name, arg, nl);
    out->name[nl] = 0;
    if (!colon)
        return true;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", colon + 1);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        int64_t v = 0;
        if (!eq || rm_quantity_milli(eq + 1, &v) != RM_OK) {
            snprintf(msg, cap, "--node %s: \"%s\" is not RESOURCE=QUANTITY", arg, kv);
            return false;
        }
        *eq = 0;
        if (!strcmp(kv, "cpu"))
            out->cpu = v;
        else if (!strcmp(kv, "memory"))
            out->memory = v;
        else if (!strcmp(kv, "gpu") || !strcmp(kv, "nvidia.com/gpu"))
            out->gpu = v;
        else if (!strcmp(kv, "pods"))
            out->pods = v;
        else {
            snprintf(msg, cap, "--node %s: unknown resource %s (cpu, memory, gpu, pods)", arg, kv);
            return false;
        }
    }
    return true;
}

bool ks_nodes_netns(ks_opts *o, int n, const char *env, bool check_paths, char *msg, size_t cap)
{
    if (n < 1 || n > KS_MAX_NODES) {
        snprintf(msg, cap, "--nodes %d: wants 1 to %d", n, KS_MAX_NODES);
        return false;
    }
    if (!env || !*env) {
        snprintf(msg, cap,
                 "--nodes %d: KUBESIM_NETNS_NODES is not set (run kubesim under tests/kubesim/netns.sh run "
                 "--nodes %d -- ..., which makes the namespaces)",
                 n, n);
        return false;
    }
    if (o->nnodes && o->nnodes != n) {
        snprintf(msg, cap, "--nodes %d: %d --node given; give none (defaults) or exactly %d", n, o->nnodes,
                 n);
        return false;
    }
    char buf[2048];
    if (strlen(env) >= sizeof buf) {
        snprintf(msg, cap, "--nodes %d: KUBESIM_NETNS_NODES is longer than %zu bytes", n, sizeof buf - 1);
        return false;
    }
    snprintf(buf, sizeof buf, "%s", env);
    ks_node_spec got[KS_MAX_NODES];
    int k = 0;
    char *save = NULL;
    for (char *e = strtok_r(buf, " \t\n", &save); e; e = strtok_r(NULL, " \t\n", &save)) {
        if (k >= n) {
            snprintf(msg, cap, "--nodes %d: KUBESIM_NETNS_NODES names more than %d namespaces", n, n);
            return false;
        }
        char *eq = strchr(e, '=');
        size_t nl = eq ? (size_t)(eq - e) : 0;
        struct in_addr a;
        if (!eq || nl == 0 || nl >= sizeof got[0].netns ||
            strspn(e, "abcdefghijklmnopqrstuvwxyz"
                      "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != nl) {
            snprintf(msg, cap,
                     "--nodes %d: KUBESIM_NETNS_NODES entry \"%.80s\" is not NETNS=IPV4 (a namespace name "
                     "of letters, digits, . _ -)",
                     n, e);
            return false;
        }
        if (strlen(eq + 1) >= sizeof got[0].addr || inet_pton(AF_INET, eq + 1, &a) != 1) {
            snprintf(msg, cap,
                     "--nodes %d: KUBESIM_NETNS_NODES entry %.80s: \"%.60s\" is not an IPv4 address", n, e,
                     eq + 1);
            return false;
        }
        memset(&got[k], 0, sizeof got[k]);
        memcpy(got[k].netns, e, nl);
        snprintf(got[k].addr, sizeof got[k].addr, "%s", eq + 1);
        if (check_paths) {
            char path[128];
            snprintf(path, sizeof path, "/run/netns/%s", got[k].netns);
            if (access(path, F_OK) != 0) {
                snprintf(msg, cap, "--nodes %d: network namespace %s does not exist (%s)", n, got[k].netns,
                         strerror(errno));
                return false;
            }
        }
        k++;
    }
    if (k != n) {
        snprintf(msg, cap, "--nodes %d: KUBESIM_NETNS_NODES names %d namespaces", n, k);
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (!o->nnodes) {
            char arg[64];
            snprintf(arg, sizeof arg, "node-%d:cpu=32,memory=128Gi,pods=110", i);
            if (!ks_node_parse(arg, &o->nodes[i], msg, cap))
                return false;
        }
        snprintf(o->nodes[i].netns, sizeof o->nodes[i].netns, "%s", got[i].netns);
        snprintf(o->nodes[i].addr, sizeof o->nodes[i].addr, "%s", got[i].addr);
    }
    o->nnodes = n;
    o->nodes_netns = n;
    return true;
}

bool ks_node_lost(ks_server *s, int i)
{
    pthread_mutex_lock(&s->faults.mu);
    bool lost = i >= 0 && i < KS_MAX_NODES && (s->faults.node_lost >> i) & 1u;
    pthread_mutex_unlock(&s->faults.mu);
    return lost;
}

const ks_node_spec *ks_node_find(const ks_server *s, const char *node)
{
    for (int i = 0; node && i < s->opts.nnodes; i++)
        if (!strcmp(s->opts.nodes[i].name, node))
            return &s->opts.nodes[i];
    return NULL;
}

bool ks_node_ours(const ks_server *s, const char *node)
{
    if (!node)
        return false;
    if (!s->opts.nnodes)
        return !strcmp(node, KS_NODE_NAME);
    for (int i = 0; i < s->opts.nnodes; i++)
        if (!strcmp(s->opts.nodes[i].name, node))
            return true;
    return false;
}

/* ---- one pass ---- */
typedef struct sc_node {
    const ks_node_spec *spec;
    bool lost;           /* NotReady alone (node-not-ready?node=): nothing new binds there */
    const cJSON *labels; /* the Node object's metadata.labels (borrowed from the pass' snapshot) */
    rm_reslist used;
    int64_t pods; /* milli */
} sc_node;

typedef struct sc_pod {
    const cJSON *j;
    const cJSON *selector; /* spec.nodeSelector */
    const char *ns, *name, *sched, *group;
    rm_reslist req;
    int prio;
    uint64_t hash;
    int node; /* index, -1 unbound */
    bool terminal, succeeded, failed, running, deleting, unsched_marked;
} sc_pod;

static int64_t alloc_of(const ks_node_spec *n, const char *res)
{
    if (!strcmp(res, "cpu"))
        return n->cpu;
    if (!strcmp(res, "memory"))
        return n->memory;
    if (!strcmp(res, "nvidia.com/gpu"))
        return n->gpu;
    if (!strcmp(res, "pods"))
        return n->pods;
    return 0; /* an extended resource no node has */
}

/* spec.nodeSelector: every key must be a label of the node with that value */
static bool selects(const sc_node *n, const cJSON *selector)
{
    const cJSON *kv;
    cJSON_ArrayForEach(kv, selector)
    {
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(n->labels, kv->string);
        if (!cJSON_IsString(kv) || !cJSON_IsString(l) || strcmp(l->valuestring, kv->valuestring))
            return false;
    }
    return true;
}

static bool fits_pod(const sc_node *n, const sc_pod *p);
static bool fits(const sc_node *n, const rm_reslist *req)
{
    if (n->lost || n->pods + 1000 > n->spec->pods)
        return false;
    for (int i = 0; i < req->n; i++)
        if (req->r[i].milli > 0 &&
            rm_reslist_get(&n->used, req->r[i].name) + req->r[i].milli > alloc_of(n->spec, req->r[i].name))
            return false;
    return true;
}

static bool fits_pod(const sc_node *n, const sc_pod *p)
{
    return selects(n, p->selector) && fits(n, &p->req);
}

static void take(sc_node *n, const rm_reslist *req)
{
    rm_reslist_sum(&n->used, req);
    n->pods += 1000;
}

/* Free resources of the whole cluster minus `reserved`, compared against `need`. */
static bool cluster_fits(const sc_node *nodes, int nn, const rm_reslist *need, const rm_reslist *reserved)
{
    for (int i = 0; i < need->n; i++) {
        int64_t free_ = 0;
        for (int k = 0; k < nn; k++) {
            int64_t f =
                alloc_of(nodes[k].spec, need->r[i].name) - rm_reslist_get(&nodes[k].used, need->r[i].name);
            if (f > 0)
                free_ += f;
        }
        if (rm_reslist_get(reserved, need->r[i].name) + need->r[i].milli > free_)
            return false;
    }
    return true;
}

/* status.conditions becomes one PodScheduled condition: True, or with unsched_msg False with
 * reason Unschedulable. */
static void set_scheduled(cJSON *pod, const char *unsched_msg)
{
    cJSON *st = cJSON_GetObjectItemCaseSensitive(pod, "status");
    if (!cJSON_IsObject(st)) {
        cJSON_DeleteItemFromObjectCaseSensitive(pod, "status");
        st = cJSON_AddObjectToObject(pod, "status");
    }
    if (unsched_msg && !ks_sget(st, "phase"))
        cJSON_AddStringToObject(st, "phase", "Pending");
    cJSON_DeleteItemFromObjectCaseSensitive(st, "conditions");
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    cJSON *c = cJSON_CreateObject();
    char ts[32];
    rm_json_time(ts, rm_wall());
    cJSON_AddStringToObject(c, "type", "PodScheduled");
    cJSON_AddStringToObject(c, "status", unsched_msg ? "False" : "True");
    cJSON_AddNullToObject(c, "lastProbeTime");
    cJSON_AddStringToObject(c, "lastTransitionTime", ts);
    if (unsched_msg) {
        cJSON_AddStringToObject(c, "reason", "Unschedulable");
        cJSON_AddStringToObject(c, "message", unsched_msg);
    }
    cJSON_AddItemToArray(conds, c);
}

int ks_pod_bind(cJSON *pod, const char *node, bool skip_deleting)
{
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
    if (!cJSON_IsObject(spec) || ks_sget(spec, "nodeName") ||
        (skip_deleting && oget(oget(pod, "metadata"), "deletionTimestamp")))
        return 0;
    cJSON_AddStringToObject(spec, "nodeName", node);
    set_scheduled(pod, NULL);
    return 1;
}

static int bind_to(cJSON *pod, void *ud)
{
    return ks_pod_bind(pod, ud, true);
}

static int mark_unsched(cJSON *pod, void *ud)
{
    if (ks_sget(oget(pod, "spec"), "nodeName"))
        return 0;
    set_scheduled(pod, ud);
    return 1;
}

static void do_bind(ks_server *s, sc_pod *p, const char *node, const char *by)
{
    ks_kind *pk = ks_core_kind(s, KS_T_POD);
    char ns[256], name[256];
    snprintf(ns, sizeof ns, "%s", p->ns);
    snprintf(name, sizeof name, "%s", p->name);
    if (ks_internal_update(s, pk, ns, name, bind_to, (void *)node) == RM_OK)
        rm_info("kubesim scheduler bound pod=%s/%s node=%s scheduler=%s", ns, name, node, by);
}

static void do_unsched(ks_server *s, sc_pod *p, int nn, const char *why)
{
    if (p->unsched_marked)
        return; /* already says so: no write per pass */
    char msg[512];
    snprintf(msg, sizeof msg, "0/%d nodes are available: %s.", nn, why);
    char ns[256], name[256];
    snprintf(ns, sizeof ns, "%s", p->ns);
    snprintf(name, sizeof name, "%s", p->name);
    ks_internal_update(s, ks_core_kind(s, KS_T_POD), ns, name, mark_unsched, msg);
}

static int cmp_pod(const void *a, const void *b)
{
    const sc_pod *x = *(sc_pod *const *)a, *y = *(sc_pod *const *)b;
    if (x->prio != y->prio)
        return x->prio > y->prio ? -1 : 1;
    return x->hash < y->hash ? -1 : x->hash > y->hash;
}

static uint64_t fnv(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *a; a++)
        h = (h ^ (unsigned char)*a) * 1099511628211ULL;
    h = (h ^ '/') * 1099511628211ULL;
    for (; *b; b++)
        h = (h ^ (unsigned char)*b) * 1099511628211ULL;
    /* murmur3's finalizer: FNV alone orders names that differ in one letter together */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* Try to place every pod of `v` (n of them) on a copy of the nodes; on success bind them all. */
static bool place_all(ks_server *s, sc_node *nodes, int nn, sc_pod **v, int n, const char *by)
{
    sc_node *tmp = malloc(sizeof(*tmp) * (size_t)nn);
    int *where = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!tmp || !where) {
        free(tmp);
        free(where);
        return false;
    }
    memcpy(tmp, nodes, sizeof(*tmp) * (size_t)nn);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        where[i] = -1;
        for (int k = 0; k < nn; k++)
            if (fits_pod(&tmp[k], v[i])) {
                take(&tmp[k], &v[i]->req);
                where[i] = k;
                break;
            }
        ok = where[i] >= 0;
    }
    if (ok) {
        memcpy(nodes, tmp, sizeof(*tmp) * (size_t)nn);
        for (int i = 0; i < n; i++) {
            v[i]->node = where[i];
            do_bind(s, v[i], nodes[where[i]].spec->name, by);
        }
    }
    free(tmp);
    free(where);
    return ok;
}

typedef struct pg_status {
    const char *phase;
    int running, succeeded, failed;
} pg_status;

static int write_pg_status(cJSON *pg, void *ud)
{
    const pg_status *w = ud;
    cJSON *st = cJSON_GetObjectItemCaseSensitive(pg, "status");
    const char *ph = ks_sget(st, "phase");
    const cJSON *r = oget(st, "running"), *sc = oget(st, "succeeded"), *f = oget(st, "failed");
    if (ph && !strcmp(ph, w->phase) && cJSON_IsNumber(r) && r->valueint == w->running && cJSON_IsNumber(sc) &&
        sc->valueint == w->succeeded && cJSON_IsNumber(f) && f->valueint == w->failed)
        return 0;
    if (!cJSON_IsObject(st)) {
        cJSON_DeleteItemFromObjectCaseSensitive(pg, "status");
        st = cJSON_AddObjectToObject(pg, "status");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(st, "phase");
    cJSON_AddStringToObject(st, "phase", w->phase);
    cJSON_DeleteItemFromObjectCaseSensitive(st, "running");
    cJSON_AddNumberToObject(st, "running", w->running);
    cJSON_DeleteItemFromObjectCaseSensitive(st, "succeeded");
    cJSON_AddNumberToObject(st, "succeeded", w->succeeded);
    cJSON_DeleteItemFromObjectCaseSensitive(st, "failed");
    cJSON_AddNumberToObject(st, "failed", w->failed);
    return 1;
}

/* Volcano's enqueue admits a job only when its minResources fit what is idle minus the
 * minResources of EVERY job already Inqueue (the overcommit plugin sums them before the enqueue
 * loop), whatever their order. So before any Pending group is looked at, each Inqueue group with
 * none of its pods bound yet (it holds its place; once bound, its pods count on the nodes) adds
 * its minResources to *reserved. Reserving while walking the groups instead let an older Pending
 * group (gang-a) be enqueued beside a newer Inqueue one (gang-b) that it was sorted before. */
static void hold_inqueue(const sc_pod *pods, size_t np, ks_obj **pgs, size_t npg, rm_reslist *reserved)
{
    for (size_t g = 0; g < npg; g++) {
        const cJSON *pg = pgs[g]->j, *md = oget(pg, "metadata");
        const char *ns = ks_sget(md, "namespace"), *name = ks_sget(md, "name");
        const char *phase = ks_sget(oget(pg, "status"), "phase");
        if (!ns || !name || oget(md, "deletionTimestamp") || !phase || strcmp(phase, "Inqueue"))
            continue;
        bool bound = false;
        for (size_t i = 0; i < np && !bound; i++) {
            const sc_pod *p = &pods[i];
            bound = !strcmp(p->ns, ns) && p->group && !strcmp(p->group, name) &&
                    !strcmp(p->sched, "volcano") && p->node >= 0 && !p->terminal;
        }
        rm_reslist need;
        rm_err e = {0};
        if (!bound &&
            !rm_reslist_from_json(rm_json_path(pg, "spec.minResources"), "spec.minResources", &need, &e))
            rm_reslist_sum(reserved, &need);
    }
}

/* One PodGroup kind's pass. volcano: true for Volcano's phases and enqueue step. */
static void gang_pass(ks_server *s, ks_kind *k, bool volcano, const char *sched_name, sc_pod *pods, size_t np,
                      sc_node *nodes, int nn, ks_obj **pgs, size_t npg, rm_reslist *reserved)
{
    sc_pod **mem = malloc(sizeof(*mem) * (np ? np : 1));
    if (!mem)
        return;
    if (volcano)
        hold_inqueue(pods, np, pgs, npg, reserved);
    for (size_t g = 0; g < npg; g++) {
        const cJSON *pg = pgs[g]->j, *md = oget(pg, "metadata");
        const char *ns = ks_sget(md, "namespace"), *name = ks_sget(md, "name");
        if (!ns || !name || oget(md, "deletionTimestamp"))
            continue;
        const cJSON *mm = rm_json_path(pg, "spec.minMember");
        int min_member = cJSON_IsNumber(mm) ? mm->valueint : 1;
        if (min_member < 1)
            min_member = 1;
        rm_reslist need;
        rm_err e = {0};
        if (rm_reslist_from_json(rm_json_path(pg, "spec.minResources"), "spec.minResources", &need, &e))
            memset(&need, 0, sizeof need);
        const char *phase = ks_sget(oget(pg, "status"), "phase");
        if (!phase)
            phase = "";
        int n = 0, npending = 0, running = 0, succeeded = 0, failed = 0, active_bound = 0;
        for (size_t i = 0; i < np; i++) {
            sc_pod *p = &pods[i];
            if (strcmp(p->ns, ns) || !p->group || strcmp(p->group, name) || strcmp(p->sched, sched_name))
                continue;
            running += p->running;
            succeeded += p->succeeded;
            failed += p->failed;
            if (p->node >= 0 && !p->terminal)
                active_bound++;
            if (p->node < 0 && !p->deleting)
                mem[npending++] = p;
            n++;
        }
        const char *next = phase;
        bool may_bind;
        if (volcano) {
            if (!*phase || !strcmp(phase, "Pending")) {
                /* enqueue: the gang's minResources must fit what is free and not reserved */
                if (cluster_fits(nodes, nn, &need, reserved)) {
                    next = "Inqueue";
                    rm_reslist_sum(reserved, &need);
                } else {
                    next = "Pending";
                }
            } /* an Inqueue group with nothing bound already holds its place (hold_inqueue) */
            may_bind = strcmp(next, "Pending") != 0 && strcmp(next, "Completed") != 0;
        } else {
            /* PreFilter: enough labelled pods, minResources fit the free resources */
            may_bind = n >= min_member && (active_bound > 0 || cluster_fits(nodes, nn, &need, reserved));
            if (!*phase)
                next = "Pending";
            if (!strcmp(next, "Pending") && n >= min_member)
                next = "Scheduling";
        }
        qsort(mem, (size_t)npending, sizeof(*mem), cmp_pod);
        if (!atomic_load(&s->stopping) && npending > 0) {
            bool bound = false;
            if (may_bind && active_bound + npending >= min_member)
                bound = place_all(s, nodes, nn, mem, npending, volcano ? "volcano" : sched_name);
            if (!bound)
                for (int i = 0; i < npending; i++) {
                    char why[300];
                    snprintf(why, sizeof why,
                             "pod group %s/%s: %d of minMember %d pods can be placed together (%s)", ns, name,
                             active_bound, min_member,
                             may_bind ? "not enough free resources for the whole gang"
                                      : "the gang does not fit yet");
                    do_unsched(s, mem[i], nn, why);
                }
        }
        if (running >= min_member)
            next = "Running";
        if (succeeded >= min_member && running == 0 && active_bound == 0)
            next = volcano ? "Completed" : "Finished";
        else if (!volcano && failed > 0 && running + succeeded < min_member && active_bound == 0 &&
                 npending == 0)
            next = "Failed";
        pg_status w = {next, running, succeeded, failed};
        char nsb[256], nb[256];
        snprintf(nsb, sizeof nsb, "%s", ns);
        snprintf(nb, sizeof nb, "%s", name);
        if (strcmp(next, phase))
            rm_info("kubesim %s podgroup=%s/%s phase %s -> %s", volcano ? "volcano" : "coscheduling", nsb, nb,
                    *phase ? phase : "\"\"", next);
        ks_internal_update(s, k, nsb, nb, write_pg_status, &w);
    }
    free(mem);
}

static int cmp_obj_created(const void *a, const void *b)
{
    const ks_obj *x = *(ks_obj *const *)a, *y = *(ks_obj *const *)b;
    const char *tx = ks_sget(oget(x->j, "metadata"), "creationTimestamp");
    const char *ty = ks_sget(oget(y->j, "metadata"), "creationTimestamp");
    int c = strcmp(tx ? tx : "", ty ? ty : "");
    if (c)
        return c;
    /* same second: by name (a resourceVersion changes with every status write) */
    const char *nx = ks_sget(oget(x->j, "metadata"), "name"), *ny = ks_sget(oget(y->j, "metadata"), "name");
    c = strcmp(nx ? nx : "", ny ? ny : "");
    if (c)
        return c;
    return x->rv < y->rv ? -1 : x->rv > y->rv;
}

void ks_sched_tick(ks_server *s)
{
    int nn = s->opts.nnodes;
    if (nn <= 0)
        return;
    pthread_mutex_lock(&s->faults.mu);
    bool hold = s->faults.sched_hold;
    pthread_mutex_unlock(&s->faults.mu);
    if (hold)
        return;
    ks_kind *pk = ks_core_kind(s, KS_T_POD);
    size_t np = 0, nv = 0, nc = 0;
    pthread_rwlock_rdlock(&s->lock);
    ks_obj **objs = ks_table_list(pk->tab, NULL, &np);
    size_t nno = 0;
    ks_obj **nobjs = ks_table_list(ks_core_kind(s, KS_T_NODE)->tab, NULL, &nno);
    ks_kind *vk = ks_kind_find(s, "scheduling.volcano.sh", "v1beta1", "podgroups");
    ks_kind *ck = ks_kind_find(s, "scheduling.x-k8s.io", "v1alpha1", "podgroups");
    ks_obj **vpg = vk && vk->served ? ks_table_list(vk->tab, NULL, &nv) : NULL;
    ks_obj **cpg = ck && ck->served ? ks_table_list(ck->tab, NULL, &nc) : NULL;
    pthread_rwlock_unlock(&s->lock);
    const char *cos = s->opts.cosched_scheduler[0] ? s->opts.cosched_scheduler : COSCHED_DEFAULT;
    sc_node nodes[KS_MAX_NODES];
    memset(nodes, 0, sizeof nodes);
    for (int i = 0; i < nn; i++) {
        nodes[i].spec = &s->opts.nodes[i];
        nodes[i].lost = ks_node_lost(s, i);
        for (size_t k = 0; k < nno; k++) {
            const cJSON *md = oget(nobjs[k]->j, "metadata");
            const char *nm = ks_sget(md, "name");
            if (nm && !strcmp(nm, nodes[i].spec->name))
                nodes[i].labels = oget(md, "labels");
        }
    }
    sc_pod *pods = calloc(np ? np : 1, sizeof(*pods));
    sc_pod **pend = calloc(np ? np : 1, sizeof(*pend));
    size_t npend = 0;
    for (size_t i = 0; pods && pend && i < np; i++) {
        const cJSON *j = objs[i]->j, *md = oget(j, "metadata"), *spec = oget(j, "spec"),
                    *st = oget(j, "status");
        sc_pod *p = &pods[i];
        p->j = j;
        p->ns = ks_sget(md, "namespace");
        p->name = ks_sget(md, "name");
        if (!p->ns || !p->name) {
            p->ns = p->name = "";
            p->node = -1;
            p->terminal = true;
            continue;
        }
        p->selector = oget(spec, "nodeSelector");
        p->sched = ks_sget(spec, "schedulerName");
        if (!p->sched || !*p->sched)
            p->sched = "default-scheduler";
        p->group = !strcmp(p->sched, "volcano")
                       ? ks_sget(oget(md, "annotations"), "scheduling.k8s.io/group-name")
                       : ks_sget(oget(md, "labels"), "scheduling.x-k8s.io/pod-group");
        const cJSON *pr = oget(spec, "priority");
        p->prio = cJSON_IsNumber(pr) ? pr->valueint : 0;
        p->hash = fnv(p->ns, p->name);
        rm_err e = {0};
        if (rm_pod_requests(spec, &p->req, &e))
            memset(&p->req, 0, sizeof p->req);
        const char *phase = ks_sget(st, "phase");
        p->succeeded = phase && !strcmp(phase, "Succeeded");
        p->failed = phase && !strcmp(phase, "Failed");
        p->running = phase && !strcmp(phase, "Running");
        p->terminal = p->succeeded || p->failed;
        p->deleting = oget(md, "deletionTimestamp") != NULL;
        const cJSON *c;
        cJSON_ArrayForEach(
            c, oget(st, "conditions")) if (!strcmp(ks_sget(c, "type") ? ks_sget(c, "type") : "",
                                                   "PodScheduled") &&
                                           !strcmp(ks_sget(c, "reason") ? ks_sget(c, "reason") : "",
                                                   "Unschedulable")) p->unsched_marked = true;
        p->node = -1;
        const char *node = ks_sget(spec, "nodeName");
        if (node) {
            for (int k = 0; k < nn; k++)
                if (!strcmp(nodes[k].spec->name, node))
                    p->node = k;
            if (p->node >= 0 && !p->terminal)
                take(&nodes[p->node], &p->req);
        } else if (!p->deleting && !strcmp(p->sched, "default-scheduler")) {
            pend[npend++] = p;
        }
    }
    if (pods && pend) {
        /* gang groups first, oldest first, so a gang that fits is not starved by single pods */
        rm_reslist reserved;
        memset(&reserved, 0, sizeof reserved);
        if (vpg) {
            qsort(vpg, nv, sizeof(*vpg), cmp_obj_created);
            gang_pass(s, vk, true, "volcano", pods, np, nodes, nn, vpg, nv, &reserved);
        }
        if (cpg) {
            qsort(cpg, nc, sizeof(*cpg), cmp_obj_created);
            gang_pass(s, ck, false, cos, pods, np, nodes, nn, cpg, nc, &reserved);
        }
        qsort(pend, npend, sizeof(*pend), cmp_pod);
        for (size_t i = 0; i < npend; i++) {
            sc_pod *p = pend[i];
            int at = -1;
            for (int k = 0; k < nn && (at < 0 || s->opts.nodes_netns); k++)
                /* --nodes: among the nodes that fit, the one with the fewest pods (kube-scheduler's
                 * default scoring spreads; first fit would put a whole job on node-0) */
                if (fits_pod(&nodes[k], p) && (at < 0 || nodes[k].pods < nodes[at].pods))
                    at = k;
            if (at >= 0) {
                take(&nodes[at], &p->req);
                p->node = at;
                do_bind(s, p, nodes[at].spec->name, "default-scheduler");
            } else {
                do_unsched(s, p, nn, "no node matches the pod's node selector and has room for its requests");
            }
        }
    }
    free(pods);
    free(pend);
    ks_objs_free(objs, np);
    ks_objs_free(nobjs, nno);
    if (vpg)
        ks_objs_free(vpg, nv);
    if (cpg)
        ks_objs_free(cpg, nc);
}
