/* sync.c — the kube runtime's sync loop (see runtime.h; runtime_internal.h lists its other files).
 *
 * Design: rm_kube_rt_sync is "read, decide, act": it reads the job (compact JSON from the informer
 * cache), its pods (owner index), and the rendezvous snapshot into stack structures, calls the pure
 * reconcile core, then executes the actions in order and writes status last. Everything it creates
 * has a deterministic name and AlreadyExists is success, so any step may be repeated after a crash.
 * Per-job memory (what SET_RDZV last applied, the token, creation failures) lives in a map guarded
 * by a mutex; one job is only ever synced by one worker at a time (workqueue guarantee). */
#include "operator/kube/runtime_internal.h"
#include "common/clock.h"
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "common/json.h"
#include "common/log.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"
#include "common/kmap.h"
#include "operator/apply.h"
#include "operator/gang.h"
#include "operator/c10d_store.h"
#include "operator/launch.h"
#include "operator/ps_reconcile.h"
#include "operator/reconcile.h"
#include "operator/spec_guard.h"

#define MAX_IDX RM_MAX_WORLD

static void job_mem_free(void *p)
{
    job_mem *m = p;
    if (m) {
        free(m->create_failures);
        free(m->last_valid_spec);
    }
    free(m);
}

static unsigned long long rv_of(const cJSON *obj)
{
    const cJSON *rv = rm_json_path(obj, "metadata.resourceVersion");
    return cJSON_IsString(rv) ? strtoull(rv->valuestring, NULL, 10) : 0;
}

void rm_kube_rt_remember_latest(job_mem *m, const cJSON *obj)
{
    unsigned long long rv = obj ? rv_of(obj) : 0;
    if (rv > m->latest_rv)
        m->latest_rv = rv;
}

int rm_kube_rt_new(const rm_kube_rt_config *cfg, rm_kube_rt **out, rm_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->client || !cfg->pods)
        return rm_errf(err, RM_EINVAL, "runtime: a client and a pod informer are required");
    rm_kube_rt *rt = calloc(1, sizeof(*rt));
    if (!rt)
        return rm_errf(err, RM_ENOMEM, "runtime: out of memory");
    /* first, so every error path below may call rm_kube_rt_free (which destroys it) */
    pthread_mutex_init(&rt->mu, NULL);
    rt->c = *cfg;
    rt->rdzv_url = strdup(cfg->rdzv_url ? cfg->rdzv_url : "http://127.0.0.1:" RM_STR(RM_PORT_RENDEZVOUS));
    rt->worker_image = strdup(cfg->worker_image ? cfg->worker_image : RM_DEFAULT_WORKER_IMAGE);
    rt->instance = strdup(cfg->instance ? cfg->instance : "ringmaster-operator");
    if (!rt->rdzv_url || !rt->worker_image || !rt->instance) {
        rm_kube_rt_free(rt);
        return rm_errf(err, RM_ENOMEM, "runtime: out of memory");
    }
    if (rt->c.force_delete_after_s <= 0)
        rt->c.force_delete_after_s = 30;
    *out = rt;
    return RM_OK;
}

void rm_kube_rt_free(rm_kube_rt *rt)
{
    if (!rt)
        return;
    rm_kmap_clear(&rt->jobs, job_mem_free);
    pthread_mutex_destroy(&rt->mu);
    free(rt->rdzv_url);
    free(rt->worker_image);
    free(rt->instance);
    free(rt);
}

static job_mem *mem_get(rm_kube_rt *rt, const char *key, bool create)
{
    pthread_mutex_lock(&rt->mu);
    job_mem *m = rm_kmap_get(&rt->jobs, key);
    if (!m && create) {
        m = calloc(1, sizeof(*m));
        if (m && rm_kmap_put(&rt->jobs, key, m, NULL)) {
            free(m);
            m = NULL;
        }
    }
    pthread_mutex_unlock(&rt->mu);
    return m;
}

static void mem_drop(rm_kube_rt *rt, const char *key)
{
    pthread_mutex_lock(&rt->mu);
    job_mem_free(rm_kmap_del(&rt->jobs, key));
    pthread_mutex_unlock(&rt->mu);
}

/* ---------------- API helpers ---------------- */
int rm_kube_rt_create(rm_kube_rt *rt, const char *path, const cJSON *obj, bool *created, rm_err *err)
{
    if (created)
        *created = false;
    int rc = rm_kube_json(rt->c.client, "POST", path, NULL, obj, NULL, err);
    if (rc == RM_ECONFLICT)
        return RM_OK; /* AlreadyExists: deterministic names make this success */
    if (rc == RM_OK && created)
        *created = true;
    return rc;
}

static void emit_event(rm_kube_rt *rt, const rm_tj *tj, const char *kind, const char *api_version,
                       const char *name, const char *uid, bool warning, const char *reason,
                       const char *action, const char *note)
{
    char evname[512], path[512], ts[40];
    double now = rm_wall();
    unsigned long seq = atomic_fetch_add(&rt->event_seq, 1);
    snprintf(evname, sizeof(evname), "%s.%llx%04lx", name, (unsigned long long)(now * 1e9), seq & 0xffff);
    rm_json_microtime(ts, now);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "apiVersion", "events.k8s.io/v1");
    cJSON_AddStringToObject(e, "kind", "Event");
    cJSON *md = cJSON_AddObjectToObject(e, "metadata");
    cJSON_AddStringToObject(md, "name", evname);
    cJSON_AddStringToObject(md, "namespace", tj->namespace_);
    cJSON_AddStringToObject(e, "eventTime", ts);
    cJSON_AddStringToObject(e, "reportingController", RM_MANAGER);
    cJSON_AddStringToObject(e, "reportingInstance", rt->instance);
    cJSON_AddStringToObject(e, "action", action);
    char r[129], n[1025];
    snprintf(r, sizeof(r), "%s", reason);
    snprintf(n, sizeof(n), "%s", note);
    cJSON_AddStringToObject(e, "reason", r);
    cJSON_AddStringToObject(e, "type", warning ? "Warning" : "Normal");
    cJSON_AddStringToObject(e, "note", n);
    cJSON *reg = cJSON_AddObjectToObject(e, "regarding");
    cJSON_AddStringToObject(reg, "apiVersion", api_version);
    cJSON_AddStringToObject(reg, "kind", kind);
    cJSON_AddStringToObject(reg, "name", name);
    cJSON_AddStringToObject(reg, "namespace", tj->namespace_);
    if (uid)
        cJSON_AddStringToObject(reg, "uid", uid);
    snprintf(path, sizeof(path), "/apis/events.k8s.io/v1/namespaces/%s/events", tj->namespace_);
    rm_err err = {0};
    if (rm_kube_json(rt->c.client, "POST", path, NULL, e, NULL, &err))
        rm_warn("event not recorded job=%s/%s reason=%s err=\"%s\"", tj->namespace_, tj->name, reason,
                err.msg);
    cJSON_Delete(e);
}

void rm_kube_rt_job_event(rm_kube_rt *rt, const rm_tj *tj, bool warning, const char *reason, const char *note)
{
    if (warning)
        rm_warn("event job=%s/%s reason=%s note=\"%s\"", tj->namespace_, tj->name, reason, note);
    emit_event(rt, tj, RM_TJ_KIND, RM_TJ_API_VERSION, tj->name, tj->uid, warning, reason, "Reconcile", note);
}

/* The token from the Secret in the cache, if there is one. */
static void load_token(rm_kube_rt *rt, const rm_tj *tj, job_mem *m)
{
    char key[600];
    snprintf(key, sizeof(key), "%s/%s-rendezvous", tj->namespace_, tj->name);
    if (!rt->c.secrets)
        return;
    rm_informer_rlock(rt->c.secrets);
    const rm_kube_owned *o = rm_informer_get(rt->c.secrets, key);
    if (o && o->token[0])
        snprintf(m->token, sizeof(m->token), "%s", o->token);
    rm_informer_runlock(rt->c.secrets);
    m->have_secret = o != NULL;
}

static int ensure_token(rm_kube_rt *rt, const rm_tj *tj, job_mem *m, rm_err *err)
{
    char path[512];
    load_token(rt, tj, m);
    if (m->token[0] && m->have_secret)
        return RM_OK;
    if (!m->token[0]) {
        unsigned char raw[24];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
            return rm_errf(err, RM_EIO, "token: getrandom failed");
        for (size_t i = 0; i < sizeof(raw); i++)
            snprintf(m->token + 2 * i, 3, "%02x", raw[i]);
    }
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets", tj->namespace_);
    cJSON *s = rm_kube_secret(tj, m->token);
    bool created = false;
    int rc = rm_kube_rt_create(rt, path, s, &created, err);
    cJSON_Delete(s);
    if (rc)
        return rc;
    if (!created) {
        /* it existed (we crashed after creating it): its token is the one the pods carry */
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s-rendezvous", tj->namespace_, tj->name);
        cJSON *got = NULL;
        rc = rm_kube_json(rt->c.client, "GET", path, NULL, NULL, &got, err);
        if (rc)
            return rc;
        rm_kube_owned *o = rm_kube_owned_transform(NULL, got);
        cJSON_Delete(got);
        if (o && o->token[0])
            snprintf(m->token, sizeof(m->token), "%s", o->token);
        free(o);
    }
    m->have_secret = true;
    return RM_OK;
}

static int ensure_service(rm_kube_rt *rt, const rm_tj *tj, job_mem *m, rm_err *err)
{
    char key[600], path[512];
    snprintf(key, sizeof(key), "%s/%s", tj->namespace_, tj->name);
    if (rt->c.services) {
        rm_informer_rlock(rt->c.services);
        m->have_service = rm_informer_get(rt->c.services, key) != NULL;
        rm_informer_runlock(rt->c.services);
    }
    if (m->have_service)
        return RM_OK;
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/services", tj->namespace_);
    cJSON *s = rm_kube_service(tj);
    bool created = false;
    int rc = rm_kube_rt_create(rt, path, s, &created, err);
    cJSON_Delete(s);
    if (rc)
        return rc;
    if (created)
        emit_event(rt, tj, RM_TJ_KIND, RM_TJ_API_VERSION, tj->name, tj->uid, false, "SuccessfulCreateService",
                   "Create", "Created headless service for the workers");
    m->have_service = true;
    return RM_OK;
}

/* ---------------- observations ---------------- */
typedef struct obs_ctx {
    rm_kube_rt *rt;
    rm_observed_worker *w;
    size_t n, cap;
    job_mem *m;
} obs_ctx;

static int collect_pod(void *ud, const char *key, const void *item)
{
    obs_ctx *o = ud;
    const rm_kube_pod *p = item;
    if (p->index < 0 || o->n >= o->cap)
        return 0;
    rm_observed_worker *w = &o->w[o->n++];
    memset(w, 0, sizeof(*w));
    w->index = p->index;
    w->epoch_label = p->epoch;
    w->phase = (rm_worker_phase)p->phase;
    w->ready = p->ready;
    w->exit_code = p->exit_code;
    snprintf(w->reason, sizeof(w->reason), "%s", p->reason);
    snprintf(w->message, sizeof(w->message), "%s", p->message);
    snprintf(w->waiting, sizeof(w->waiting), "%s", p->waiting);
    w->created_at = p->created_at;
    w->finished_at = p->finished_at;
    w->deletion_started_at = p->deletion_started_at;
    w->node_ready = true;
    (void)key;
    return 0;
}

typedef struct node_find {
    unsigned long long hash;
    int ready;
} node_find;

static int match_node(void *ud, const char *key, const void *item)
{
    node_find *f = ud;
    const char *name = key[0] == '/' ? key + 1 : key;
    if ((rm_kmap_hash(name) | 1) != f->hash)
        return 0;
    f->ready = ((const rm_kube_node *)item)->ready;
    return -1;
}

static void node_readiness(rm_kube_rt *rt, obs_ctx *o, const char *jobkey)
{
    if (!rt->c.nodes)
        return;
    /* pods keep only a hash of their node's name: find the node with that hash */
    rm_informer_rlock(rt->c.pods);
    rm_informer_rlock(rt->c.nodes);
    for (size_t i = 0; i < o->n; i++) {
        char pk[600];
        snprintf(pk, sizeof(pk), "%s-worker-%d", jobkey, o->w[i].index);
        const rm_kube_pod *p = rm_informer_get(rt->c.pods, pk);
        if (!p || !p->node_hash)
            continue;
        node_find f = {p->node_hash, -1};
        rm_informer_foreach(rt->c.nodes, match_node, &f);
        if (f.ready >= 0)
            o->w[i].node_ready = f.ready;
    }
    rm_informer_runlock(rt->c.nodes);
    rm_informer_runlock(rt->c.pods);
}

/* ---------------- status ---------------- */
static cJSON *status_json(const cJSON *obj, const rm_tj *tj, const rm_tj_status *st)
{
    cJSON *s = rm_tj_status_to_json(st);
    if (!s)
        return NULL;
    /* status.runningSpec: the immutable part of the spec the pods are built from (held by
     * hold_running_spec once the job started), so a replacement made after an operator restart
     * still gets what its group runs */
    cJSON *rs = rm_spec_running(cJSON_GetObjectItemCaseSensitive(obj, "spec"));
    if (!rs || !cJSON_AddItemToObject(s, "runningSpec", rs)) {
        cJSON_Delete(rs);
        cJSON_Delete(s);
        return NULL;
    }
    /* status.runtime: the runtime the job resolved at its first pass (operator/kube/runtimes.c) */
    const cJSON *rtr = rm_json_path(obj, "status.runtime");
    if (cJSON_IsObject(rtr)) {
        cJSON *c = cJSON_Duplicate(rtr, 1);
        if (!c || !cJSON_AddItemToObject(s, "runtime", c)) {
            cJSON_Delete(c);
            cJSON_Delete(s);
            return NULL;
        }
    }
    char b[64];
    snprintf(b, sizeof(b), "%d/%d", st->ready_replicas, tj->spec.replicas);
    cJSON_DeleteItemFromObjectCaseSensitive(s, "workers");
    cJSON_AddStringToObject(s, "workers", b);
    char sel[400];
    snprintf(sel, sizeof(sel), "%s=%s", RM_LABEL_JOB, tj->name);
    cJSON_DeleteItemFromObjectCaseSensitive(s, "selector");
    cJSON_AddStringToObject(s, "selector", sel);
    return s;
}

/* PUT /status at the object's resourceVersion. A 409 is returned as RM_ECONFLICT: the caller
 * re-reads the object and decides again from that fresh state (re-applying a status computed
 * from stale state could undo a newer write). The answer is remembered as the newest copy. */
static int write_status(rm_kube_rt *rt, const char *ns, const char *name, cJSON *obj, cJSON *status,
                        job_mem *m, rm_err *err)
{
    char path[640];
    snprintf(path, sizeof(path), "/apis/%s/%s/namespaces/%s/%s/%s/status", RM_TJ_GROUP, RM_TJ_VERSION, ns,
             RM_TJ_PLURAL, name);
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
    cJSON_AddItemToObject(obj, "status", cJSON_Duplicate(status, 1));
    cJSON *got = NULL;
    int rc = rm_kube_json(rt->c.client, "PUT", path, NULL, obj, &got, err);
    if (rc == RM_OK)
        rm_kube_rt_remember_latest(m, got);
    cJSON_Delete(got);
    return rc;
}

/* A job whose spec cannot even be parsed: Failed condition naming the field, Warning event. */
static int report_invalid(rm_kube_rt *rt, const char *key, cJSON *obj, const rm_err *perr, job_mem *m,
                          rm_err *err)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(md, "name");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(md, "namespace");
    const cJSON *uid = cJSON_GetObjectItemCaseSensitive(md, "uid");
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(md, "generation");
    const cJSON *cur = rm_json_path(obj, "status.message");
    if (!cJSON_IsString(nm) || !cJSON_IsString(ns))
        return rm_errf(err, RM_EPROTO, "job %s: no name/namespace", key);
    const cJSON *ph = rm_json_path(obj, "status.phase");
    if (cJSON_IsString(cur) && strncmp(cur->valuestring, perr->msg, 255) == 0 && cJSON_IsString(ph) &&
        strcmp(ph->valuestring, "Failed") == 0) {
        m->invalid_hash = rm_kmap_hash(perr->msg) | 1;
        return RM_OK; /* already reported (by us, maybe before a restart) */
    }
    rm_tj_status st;
    memset(&st, 0, sizeof(st));
    double now = rm_wall();
    int64_t g = cJSON_IsNumber(gen) ? (int64_t)gen->valuedouble : 0;
    st.phase = RM_PHASE_FAILED;
    st.observed_generation = g;
    st.completion_time = now;
    snprintf(st.message, sizeof(st.message), "%.255s", perr->msg);
    rm_tj_set_condition(&st, RM_COND_FAILED, true, "InvalidSpec", perr->msg, g, now);
    cJSON *s = rm_tj_status_to_json(&st);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "status: out of memory");
    int rc = write_status(rt, ns->valuestring, nm->valuestring, obj, s, m, err);
    cJSON_Delete(s);
    if (rc)
        return rc;
    rm_tj fake;
    memset(&fake, 0, sizeof(fake));
    fake.name = nm->valuestring;
    fake.namespace_ = ns->valuestring;
    fake.uid = cJSON_IsString(uid) ? uid->valuestring : NULL;
    unsigned long long h = rm_kmap_hash(perr->msg) | 1;
    if (m->invalid_hash != h) {
        rm_kube_rt_job_event(rt, &fake, true, "InvalidSpec", perr->msg);
        rm_op_metrics_job(rt->c.metrics, RM_JOB_FAILED, ns->valuestring);
    }
    m->invalid_hash = h;
    rm_warn("invalid TrainingJob job=%s err=\"%s\"", key, perr->msg);
    return RM_OK;
}

static char *cached_job(rm_kube_rt *rt, const char *key)
{
    for (int i = 0; i < rt->c.njobs_inf; i++) {
        rm_informer_rlock(rt->c.jobs_inf[i]);
        const void *j = rm_informer_get(rt->c.jobs_inf[i], key);
        char *copy = j ? rm_kube_tj_json(j) : NULL;
        rm_informer_runlock(rt->c.jobs_inf[i]);
        if (copy)
            return copy;
    }
    return NULL;
}

/* "0-3,5,7-9" from ascending-or-not indices (sorted here); truncated with "..." at cap. */
static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void format_ranges(int *idx, int n, char *buf, size_t cap)
{
    qsort(idx, (size_t)n, sizeof(*idx), cmp_int);
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && idx[j + 1] == idx[j] + 1)
            j++;
        char part[32];
        if (j > i)
            snprintf(part, sizeof(part), "%s%d-%d", i ? "," : "", idx[i], idx[j]);
        else
            snprintf(part, sizeof(part), "%s%d", i ? "," : "", idx[i]);
        if (len + strlen(part) + 4 >= cap) {
            snprintf(buf + len, cap - len, ",...");
            return;
        }
        memcpy(buf + len, part, strlen(part) + 1);
        len += strlen(part);
        i = j + 1;
    }
}

/* ---------------- rendezvous polling ---------------- */
void rm_kube_rt_poll_rdzv(rm_kube_rt *rt, void (*enqueue)(void *ud, const char *key), void *ud)
{
    if (!rt->c.rdzv)
        return;
    size_t n = 0, cap = 0;
    char **keys = NULL;
    pthread_mutex_lock(&rt->mu);
    size_t it;
    for (rm_kmap_ent *e = rm_kmap_first(&rt->jobs, &it); e; e = rm_kmap_next(&rt->jobs, &it, e)) {
        job_mem *m = e->val;
        if (!m->rdzv_desired)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **nk = realloc(keys, nc * sizeof(*nk));
            if (!nk)
                break;
            keys = nk;
            cap = nc;
        }
        if ((keys[n] = strdup(e->key)))
            n++;
    }
    pthread_mutex_unlock(&rt->mu);
    for (size_t i = 0; i < n; i++) {
        unsigned long long h = 0;
        if (rm_rdzv_signature(rt->c.rdzv, keys[i], &h) == RM_OK) {
            pthread_mutex_lock(&rt->mu);
            job_mem *m = rm_kmap_get(&rt->jobs, keys[i]);
            bool changed = m && m->rdzv_sig != h;
            if (m)
                m->rdzv_sig = h;
            pthread_mutex_unlock(&rt->mu);
            if (changed)
                enqueue(ud, keys[i]);
        }
        free(keys[i]);
    }
    free(keys);
}

/* ---------------- sync ---------------- */
/* R0b: remember the spec of a job that validates; when an update of a job that already started
 * does not validate, put the last valid spec into tj (metadata and status stay the object's) and
 * set *invalid_update to the validation message (borrowed from verr). */
static int last_valid_spec(const cJSON *obj, rm_tj *tj, bool valid, const rm_err *verr, job_mem *m,
                           const char **invalid_update, rm_err *err)
{
    *invalid_update = NULL;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    if (valid) {
        char *js = spec ? cJSON_PrintUnformatted(spec) : NULL;
        if (js && (!m->last_valid_spec || strcmp(js, m->last_valid_spec) != 0)) {
            free(m->last_valid_spec);
            m->last_valid_spec = js;
            js = NULL;
        }
        free(js);
        return RM_OK;
    }
    if (!m->last_valid_spec || tj->status.start_time <= 0)
        return RM_OK; /* never ran, or no valid spec known: the core decides (R0 / R0b) */
    cJSON *o = cJSON_Duplicate(obj, 1);
    cJSON *prev_spec = cJSON_Parse(m->last_valid_spec);
    if (!o || !prev_spec || !cJSON_ReplaceItemInObjectCaseSensitive(o, "spec", prev_spec)) {
        cJSON_Delete(o);
        cJSON_Delete(prev_spec);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    rm_tj prev;
    rm_err perr = {0};
    int rc = rm_tj_from_json(o, &prev, &perr);
    cJSON_Delete(o);
    if (rc)
        return RM_OK; /* cannot happen for a spec that validated; fall back to R0b's freeze */
    rm_tj_defaults(&prev);
    rm_tj_free(tj);
    *tj = prev;
    *invalid_update = verr->msg[0] ? verr->msg : "invalid spec";
    return RM_OK;
}

/* A job that started runs one spec (operator/spec_guard.h): when an immutable field of the object
 * differs from status.runningSpec, put the recorded values back into obj's spec, so every pod is
 * still built from what its group runs, and write into why (cap bytes) the message naming the
 * fields; why is "" when nothing is held. Before the job starts the spec is taken as written
 * (status_json records it). */
static int hold_running_spec(cJSON *obj, char *why, size_t cap, rm_err *err)
{
    why[0] = 0;
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    const cJSON *running = rm_json_path(obj, "status.runningSpec");
    const cJSON *started = rm_json_path(obj, "status.startTime");
    if (!cJSON_IsObject(spec) || !cJSON_IsObject(running) || !cJSON_IsString(started) ||
        !started->valuestring[0])
        return RM_OK;
    char fields[200];
    if (rm_spec_changed_fields(running, spec, fields, sizeof fields) == 0)
        return RM_OK;
    if (rm_spec_hold(spec, running) != RM_OK)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    rm_sfmt(why, cap,
            "%s: cannot change once the job started; its pods keep the spec the group runs "
            "(status.runningSpec)",
            fields);
    return RM_OK;
}

/* A job without status.runningSpec (started by an operator that did not record it): the status is
 * written even if unchanged, once. Otherwise the record travels with the status writes the job
 * makes anyway, the first of its start among them. */
static bool running_spec_missing(const cJSON *obj)
{
    return !cJSON_IsObject(rm_json_path(obj, "status.runningSpec"));
}

/* ---- observe: the job (parsed, validated, its Secret and Service in place) ---- */
/* RM_OK with *skip when the job is not ours to reconcile (another controller's, or unparseable
 * and already reported). */
static int observe_job(rm_kube_rt *rt, const char *key, cJSON *obj, job_mem *m, rm_tj *tj, rm_err *verr,
                       const char **invalid_update, char *held, size_t held_cap, bool *skip, rm_err *err)
{
    *skip = false;
    /* managedBy: another controller's job is not ours to touch */
    const cJSON *mb = rm_json_path(obj, "spec.managedBy"); /* where MultiKueue writes it */
    if (!cJSON_IsString(mb) || !mb->valuestring[0])
        mb = rm_json_path(obj, "spec.runPolicy.managedBy");
    if (cJSON_IsString(mb) && mb->valuestring[0] && strcmp(mb->valuestring, RM_MANAGER) != 0) {
        rm_debug("skipping job managed by another controller job=%s managedBy=%s", key, mb->valuestring);
        *skip = true;
        return RM_OK;
    }
    /* spec.runtimeRef: the runtime's template (recorded in status.runtime at the first pass)
     * under the job's own fields, before anything reads the spec (operator/kube/runtimes.c) */
    rm_err perr = {0};
    RM_CHECK(rm_kube_rt_runtime_step(rt, key, obj, skip, &perr, err));
    if (*skip)
        return RM_OK;
    if (perr.msg[0]) {
        *skip = true;
        return report_invalid(rt, key, obj, &perr, m, err);
    }
    RM_CHECK(hold_running_spec(obj, held, held_cap, err));
    if (rm_tj_from_json(obj, tj, &perr) != RM_OK) {
        *skip = true;
        return report_invalid(rt, key, obj, &perr, m, err);
    }
    rm_tj_defaults(tj);
    bool valid = rm_tj_validate(tj, verr) == RM_OK; /* *invalid_update points into verr */
    RM_CHECK(last_valid_spec(obj, tj, valid, verr, m, invalid_update, err));
    if (*invalid_update)
        valid = true; /* tj now carries the last valid spec */
    else if (held[0])
        *invalid_update = held; /* R0b's condition and event, naming the fields not applied */
    bool terminal = tj->status.phase == RM_PHASE_SUCCEEDED || tj->status.phase == RM_PHASE_FAILED;
    if (valid && !terminal && !tj->spec.run.suspend) {
        RM_CHECK(ensure_token(rt, tj, m, err));
        RM_CHECK(ensure_service(rt, tj, m, err));
    } else if (!m->token[0]) {
        load_token(rt, tj, m); /* never create anything for a finished job, but know its token */
    }
    return RM_OK;
}

/* ---- observe: its pods (and indices whose creation keeps failing) ---- */
static int observe_workers(rm_kube_rt *rt, const char *key, const rm_tj *tj, job_mem *m, obs_ctx *oc,
                           rm_err *err)
{
    int cap = rm_tj_most_workers(&tj->spec);
    if (cap < 1)
        cap = 1;
    cap = cap * 2 + 16;
    rm_observed_worker *workers = calloc((size_t)cap, sizeof(*workers));
    if (!workers)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    *oc = (obs_ctx){rt, workers, 0, (size_t)cap, m};
    rm_informer_rlock(rt->c.pods);
    rm_informer_by_index(rt->c.pods, key, collect_pod, oc);
    rm_informer_runlock(rt->c.pods);
    node_readiness(rt, oc, key);
    /* indices that keep failing to be created are reported as Missing with a count */
    for (int i = 0; i < m->ncreate_failures && oc->n < oc->cap; i++) {
        if (!m->create_failures[i])
            continue;
        bool seen = false;
        for (size_t k = 0; k < oc->n; k++)
            seen |= oc->w[k].index == i;
        if (!seen) {
            rm_observed_worker *w = &oc->w[oc->n++];
            memset(w, 0, sizeof(*w));
            w->index = i;
            w->phase = RM_WORKER_MISSING;
            w->node_ready = true;
            w->create_failures = m->create_failures[i];
        }
    }
    return RM_OK;
}

/* ---- apply: the kube runtime's operations table (operator/apply.h) ---- */
typedef struct kube_apply {
    rm_kube_rt *rt;
    const char *key;
    const rm_tj *tj;
    job_mem *m;
    size_t nobserved;
    char jobpods[512];
    int created_idx[RM_RDZV_MAX_WORLD], ncreated, created_epoch;
} kube_apply;

static void count_create(job_mem *m, int index, int arc)
{
    if (arc && index >= 0 && index < MAX_IDX && index >= m->ncreate_failures) {
        int nn = index + 1;
        unsigned char *nf = realloc(m->create_failures, (size_t)nn);
        if (nf) {
            memset(nf + m->ncreate_failures, 0, (size_t)(nn - m->ncreate_failures));
            m->create_failures = nf;
            m->ncreate_failures = nn;
        }
    }
    if (index >= 0 && index < m->ncreate_failures) {
        if (arc && m->create_failures[index] < 255)
            m->create_failures[index]++;
        else if (!arc)
            m->create_failures[index] = 0;
    }
}

static int kop_create(void *ud, int index, int epoch, rm_err *err)
{
    kube_apply *ka = ud;
    rm_kube_rt *rt = ka->rt;
    char over[512];
    rm_kube_worker_pod_args pa = {
        .tj = ka->tj,
        .index = index,
        .epoch = epoch,
        .rdzv_url = rt->rdzv_url,
        .worker_image = rt->worker_image,
        .metrics_port = rt->c.worker_metrics_port,
        .overridden = over,
        .overridden_cap = sizeof(over),
    };
    cJSON *pod = rm_kube_worker_pod(&pa, err);
    if (pod && over[0] && !ka->m->warned_env) {
        char note[768];
        snprintf(note, sizeof(note),
                 "the pod template sets %s; the operator sets these "
                 "for every worker, so the template's values are not used",
                 over);
        rm_kube_rt_job_event(rt, ka->tj, true, "EnvOverridden", note);
        ka->m->warned_env = true;
    }
    if (pod && rm_gang_decorate_pod(pod, ka->tj, (rm_gang_kind)rt->c.gang, rt->c.cosched_scheduler) &&
        !ka->m->warned_sched) {
        rm_kube_rt_job_event(rt, ka->tj, true, "SchedulerNameKept",
                             "the pod template names its own schedulerName; the gang scheduler's "
                             "is not set, so these pods are not gang-scheduled");
        ka->m->warned_sched = true;
    }
    bool created = false;
    int arc = pod ? rm_kube_rt_create(rt, ka->jobpods, pod, &created, err) : RM_ENOMEM;
    cJSON_Delete(pod);
    count_create(ka->m, index, arc);
    if (created && ka->ncreated < (int)RM_ARRAY_LEN(ka->created_idx)) {
        ka->created_idx[ka->ncreated++] = index; /* one Event for the batch, after the loop */
        ka->created_epoch = epoch;
    }
    return arc;
}

static int kop_delete(void *ud, int index, bool force, const char *why, rm_err *err)
{
    kube_apply *ka = ud;
    const rm_tj *tj = ka->tj;
    char p[640];
    snprintf(p, sizeof(p), "/api/v1/namespaces/%s/pods/%s-worker-%d", tj->namespace_, tj->name, index);
    cJSON *opts = cJSON_CreateObject();
    cJSON_AddStringToObject(opts, "kind", "DeleteOptions");
    cJSON_AddStringToObject(opts, "apiVersion", "v1");
    if (force)
        cJSON_AddNumberToObject(opts, "gracePeriodSeconds", 0);
    cJSON_AddStringToObject(opts, "propagationPolicy", "Background");
    int arc = rm_kube_json(ka->rt->c.client, "DELETE", p, NULL, opts, NULL, err);
    cJSON_Delete(opts);
    if (arc == RM_ENOTFOUND)
        return RM_OK;
    if (arc == RM_OK && ka->rt->c.pod_events) {
        char note[512];
        snprintf(note, sizeof(note), "Deleted pod: %s-worker-%d (%s%s)", tj->name, index,
                 why && why[0] ? why : "reconcile", force ? ", forced" : "");
        rm_kube_rt_job_event(ka->rt, tj, false, "SuccessfulDeletePod", note);
    }
    return arc;
}

static int kop_restart(void *ud, int from_epoch, rm_err *err)
{
    kube_apply *ka = ud;
    (void)err;
    if (ka->rt->c.rdzv) {
        int ne = 0;
        rm_rdzv_restart(ka->rt->c.rdzv, ka->key, from_epoch, &ne);
    }
    return RM_OK;
}

static int kop_set_rdzv(void *ud, int desired, int min, rm_err *err)
{
    kube_apply *ka = ud;
    rm_kube_rt *rt = ka->rt;
    job_mem *m = ka->m;
    const rm_tj *tj = ka->tj;
    if (!rt->c.rdzv)
        return RM_OK;
    bool fresh = m->rdzv_desired == 0;
    int arc = m->token[0] ? rm_rdzv_job_set(rt->c.rdzv, ka->key, m->token, desired, min, 5.0)
                          : rm_errf(err, RM_EAGAIN, "no rendezvous token yet");
    if (!arc && fresh && tj->status.epoch >= 1 && ka->nobserved > 0) {
        /* this process (re)started while workers train at status.epoch: move the new
         * rendezvous past it so their next report says "rejoin" and they regroup in
         * place at once, instead of waiting out a progress deadline */
        rm_rdzv_state *snap = calloc(1, sizeof(*snap));
        for (int guard = 0; snap && guard < 1000; guard++) {
            if (rm_rdzv_snapshot(rt->c.rdzv, ka->key, snap) || snap->epoch > tj->status.epoch)
                break;
            int ne = 0;
            rm_rdzv_restart(rt->c.rdzv, ka->key, snap->epoch, &ne);
        }
        free(snap);
        rm_info("rendezvous re-registered after an operator restart job=%s status_epoch=%d", ka->key,
                tj->status.epoch);
    }
    if (!arc) {
        pthread_mutex_lock(&rt->mu); /* rm_kube_rt_poll_rdzv reads it */
        m->rdzv_desired = desired;
        m->rdzv_min = min;
        pthread_mutex_unlock(&rt->mu);
    }
    return arc;
}

static int kop_stop_rdzv(void *ud, rm_err *err)
{
    kube_apply *ka = ud;
    (void)err;
    if (ka->rt->c.rdzv)
        rm_rdzv_job_stop(ka->rt->c.rdzv, ka->key);
    return RM_OK;
}

static int kop_event(void *ud, bool warning, const char *reason, const char *message, rm_err *err)
{
    kube_apply *ka = ud;
    (void)err;
    rm_kube_rt_job_event(ka->rt, ka->tj, warning, reason, message);
    return RM_OK;
}

static int kop_delete_job(void *ud, rm_err *err)
{
    kube_apply *ka = ud;
    const rm_tj *tj = ka->tj;
    char p[640];
    snprintf(p, sizeof(p), "/apis/%s/%s/namespaces/%s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION, tj->namespace_,
             RM_TJ_PLURAL, tj->name);
    cJSON *opts = cJSON_CreateObject();
    cJSON_AddStringToObject(opts, "propagationPolicy", "Background");
    int arc = rm_kube_json(ka->rt->c.client, "DELETE", p, NULL, opts, NULL, err);
    cJSON_Delete(opts);
    if (arc == RM_ENOTFOUND)
        arc = RM_OK;
    if (!arc)
        rm_info("job deleted after ttlSecondsAfterFinished job=%s", ka->key);
    return arc;
}

static void kop_failed(void *ud, const rm_action *a, int rc, const rm_err *err)
{
    kube_apply *ka = ud;
    char ab[256];
    (void)rc;
    rm_warn("action failed job=%s action=\"%s\" err=\"%s\"", ka->key, rm_action_str(a, ab, sizeof(ab)),
            err->msg);
}

static const rm_runtime_ops kube_ops = {
    .create_worker = kop_create,
    .delete_worker = kop_delete,
    .restart_group = kop_restart,
    .set_rdzv = kop_set_rdzv,
    .stop_rdzv = kop_stop_rdzv,
    .event = kop_event,
    .delete_job = kop_delete_job,
    .failed = kop_failed,
};

/* ---- commit: the status write and the shared transition -> metrics diff ---- */
static int commit_status(rm_kube_rt *rt, const char *key, cJSON *obj, const rm_tj *tj, const rm_tj_status *ns,
                         job_mem *m, rm_err *err)
{
    cJSON *s = status_json(obj, tj, ns);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    int rc = write_status(rt, tj->namespace_, tj->name, obj, s, m, err);
    cJSON_Delete(s);
    if (rc)
        return rc;
    const rm_tj_status *os = &tj->status;
    rm_transition t;
    rm_status_transition(os, ns, &t);
    if (t.created)
        rm_op_metrics_job(rt->c.metrics, RM_JOB_CREATED, tj->namespace_);
    if (t.succeeded)
        rm_op_metrics_job(rt->c.metrics, RM_JOB_SUCCESSFUL, tj->namespace_);
    if (t.failed)
        rm_op_metrics_job(rt->c.metrics, RM_JOB_FAILED, tj->namespace_);
    for (int k = 0; k < t.restarts; k++)
        rm_op_metrics_job(rt->c.metrics, RM_JOB_RESTARTED, tj->namespace_);
    if (t.phase_changed)
        rm_info("job phase job=%s from=%s to=%s restarts=%d epoch=%d", key, rm_phase_name(os->phase),
                rm_phase_name(ns->phase), ns->restarts, ns->epoch);
    return RM_OK;
}

/* Drop CREATE_WORKER actions (pods held back for the gang scheduler). */
static size_t drop_creates(rm_action *a, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i].type != RM_ACT_CREATE_WORKER)
            a[k++] = a[i];
    return k;
}

/* ---- parameter servers: <job>-ps-<i> pods kept to operator/ps_reconcile.h's rules ---- */
typedef struct ps_obs_ctx {
    rm_ps_observed obs[RM_PS_MAX_SERVERS];
    int n;
} ps_obs_ctx;

static int collect_ps_pod(void *ud, const char *key, const void *item)
{
    ps_obs_ctx *o = ud;
    const rm_kube_pod *p = item;
    (void)key;
    if (p->ps_index < 0 || p->ps_index >= RM_PS_MAX_SERVERS)
        return 0;
    rm_ps_observed *x = &o->obs[p->ps_index];
    x->exists = true;
    x->finished = p->phase == RM_WORKER_FAILED || p->phase == RM_WORKER_SUCCEEDED;
    x->ready = p->ready && p->phase == RM_WORKER_RUNNING;
    if (p->ps_index + 1 > o->n)
        o->n = p->ps_index + 1;
    return 0;
}

static void ps_pod_delete(rm_kube_rt *rt, const rm_tj *tj, int i)
{
    char p[640];
    rm_err e = {0};
    snprintf(p, sizeof(p), "/api/v1/namespaces/%s/pods/%s-ps-%d", tj->namespace_, tj->name, i);
    int arc = rm_kube_json(rt->c.client, "DELETE", p, NULL, NULL, NULL, &e);
    if (arc && arc != RM_ENOTFOUND)
        rm_warn("parameter server pod delete failed job=%s/%s index=%d err=\"%s\"", tj->namespace_, tj->name,
                i, e.msg);
}

/* Observe the job's server pods, ask the rules (on the status this pass computed), act. */
static void ps_sync(rm_kube_rt *rt, const char *key, const rm_tj *tj, rm_reconcile_out *ro)
{
    ps_obs_ctx o;
    memset(&o, 0, sizeof(o));
    rm_informer_rlock(rt->c.pods);
    rm_informer_by_index(rt->c.pods, key, collect_ps_pod, &o);
    rm_informer_runlock(rt->c.pods);
    if (o.n == 0 && tj->spec.strategy != RM_STRATEGY_PS)
        return;
    rm_tj view = *tj; /* shallow: the rules read spec and the new phase only */
    view.status = ro->status_changed ? ro->status : tj->status;
    rm_ps_action act[2 * RM_PS_MAX_SERVERS];
    int ready = 0;
    int n = rm_ps_reconcile(&view, o.obs, o.n, act, (int)RM_ARRAY_LEN(act), &ready);
    char jobpods[512];
    snprintf(jobpods, sizeof(jobpods), "/api/v1/namespaces/%s/pods", tj->namespace_);
    for (int k = 0; k < n; k++) {
        rm_err e = {0};
        if (act[k].kind == RM_PS_ACT_DELETE || act[k].replace) {
            if (act[k].replace) /* died, or killed by its livenessProbe (hung: builders.c) */
                rm_warn("parameter server pod failed, replacing it job=%s role=ps index=%d", key,
                        act[k].index);
            ps_pod_delete(rt, tj, act[k].index); /* a replacement is created next pass */
            continue;
        }
        cJSON *pod =
            rm_kube_ps_pod(tj, act[k].index, rt->rdzv_url, rt->worker_image, rt->c.worker_metrics_port, &e);
        bool created = false;
        int arc = pod ? rm_kube_rt_create(rt, jobpods, pod, &created, &e) : RM_ENOMEM;
        cJSON_Delete(pod);
        if (arc)
            rm_warn("parameter server pod create failed job=%s index=%d err=\"%s\"", key, act[k].index,
                    e.msg);
        else if (created)
            rm_info("parameter server pod created job=%s index=%d", key, act[k].index);
    }
    int want = view.status.phase == RM_PHASE_SUCCEEDED || view.status.phase == RM_PHASE_FAILED ||
                       tj->spec.strategy != RM_STRATEGY_PS
                   ? 0
                   : tj->spec.ps.replicas;
    if (!ro->status_changed) {
        if (tj->status.ps_replicas == want && tj->status.ps_ready == ready)
            return;
        ro->status = tj->status;
        ro->status_changed = true;
    }
    ro->status.ps_replicas = want;
    ro->status.ps_ready = ready;
}

/* ---- a torchrun job's c10d store: <job>-c10d kept to operator/c10d_store.h's rule ---- */
/* Create, replace or delete the store pod; true when worker creations must wait for it. */
static bool c10d_sync(rm_kube_rt *rt, const char *key, const rm_tj *tj, const rm_reconcile_out *ro,
                      bool torchrun)
{
    char pkey[600], path[900];
    snprintf(pkey, sizeof(pkey), "%s/%s" RM_C10D_SUFFIX, tj->namespace_, tj->name);
    rm_c10d_observed o = {0};
    rm_informer_rlock(rt->c.pods);
    const rm_kube_pod *p = rm_informer_get(rt->c.pods, pkey);
    if (p) {
        o.exists = true;
        o.ended = p->phase == RM_WORKER_FAILED || p->phase == RM_WORKER_SUCCEEDED;
        o.terminating = p->deletion_started_at > 0 || p->phase == RM_WORKER_TERMINATING;
        o.ready = p->ready && p->phase == RM_WORKER_RUNNING;
    }
    rm_informer_runlock(rt->c.pods);
    if (!torchrun && !o.exists)
        return false;
    rm_tj view = *tj; /* shallow: the rule reads spec and the new phase only */
    view.status = ro->status_changed ? ro->status : tj->status;
    rm_c10d_decision d = rm_c10d_store_decide(&view, torchrun, o);
    rm_err e = {0};
    if (d.act == RM_C10D_DELETE) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s" RM_C10D_SUFFIX, tj->namespace_,
                 tj->name);
        int arc = rm_kube_json(rt->c.client, "DELETE", path, NULL, NULL, NULL, &e);
        if (arc && arc != RM_ENOTFOUND)
            rm_warn("c10d store pod delete failed job=%s err=\"%s\"", key, e.msg);
        else if (o.ended)
            rm_kube_rt_job_event(
                rt, tj, true, "C10dStoreLost",
                "the c10d store pod ended; replacing it (torchrun's agents rendezvous again)");
    } else if (d.act == RM_C10D_CREATE) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", tj->namespace_);
        cJSON *pod = rm_kube_c10d_pod(tj, &e);
        bool created = false;
        int arc = pod ? rm_kube_rt_create(rt, path, pod, &created, &e) : RM_EINVAL;
        cJSON_Delete(pod);
        if (arc)
            rm_warn("c10d store pod create failed job=%s err=\"%s\"", key, e.msg);
        else if (created)
            rm_info("c10d store pod created job=%s pod=%s" RM_C10D_SUFFIX, key, tj->name);
    }
    return d.hold_workers;
}

/* observe -> reconcile -> apply -> commit status. */
static int sync_obj(rm_kube_rt *rt, const char *key, cJSON *obj, job_mem *m, double *requeue_after,
                    rm_err *err)
{
    int rc = RM_OK;
    rm_tj tj;
    memset(&tj, 0, sizeof(tj));
    obs_ctx oc = {0};
    rm_rdzv_state *rs = NULL;
    rm_action *acts = NULL;
    kube_apply *ka = NULL;
    /* observe */
    const char *invalid_update = NULL;
    char held[512] = "";
    rm_err verr = {0};
    bool skip = false;
    RM_CHECK_GOTO(observe_job(rt, key, obj, m, &tj, &verr, &invalid_update, held, sizeof held, &skip, err),
                  rc, out);
    if (skip)
        goto out;
    RM_CHECK_GOTO(observe_workers(rt, key, &tj, m, &oc, err), rc, out);
    /* Kueue first (it may suspend or run the job), then the PodGroup */
    bool kskip = false, hold = false;
    m->queued[0] = 0;
    RM_CHECK_GOTO(rm_kube_rt_kueue_step(rt, obj, &tj, m, (int)oc.n, &kskip, requeue_after, err), rc, out);
    if (kskip)
        goto out;
    bool never_valid = verr.msg[0] && !invalid_update && tj.status.start_time <= 0;
    RM_CHECK_GOTO(rm_kube_rt_gang_step(rt, &tj, m, never_valid, &hold, requeue_after, err), rc, out);
    rs = calloc(1, sizeof(*rs));
    ka = calloc(1, sizeof(*ka));
    if (!rs || !ka) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    bool have_rs = rt->c.rdzv && rm_rdzv_snapshot(rt->c.rdzv, key, rs) == RM_OK;
    /* reconcile */
    rm_reconcile_opts ro;
    rm_reconcile_opts_default(&ro);
    ro.force_delete_after_s = rt->c.force_delete_after_s;
    ro.no_rendezvous = !rm_kube_template_runs_worker(&tj, rt->worker_image);
    ro.torchrun = ro.no_rendezvous && rm_launch_runs_torchrun(tj.spec.template, NULL, 0);
    int maxw = rm_tj_most_workers(&tj.spec);
    if (maxw < 1 || maxw > RM_RDZV_MAX_WORLD)
        maxw = RM_RDZV_MAX_WORLD;
    size_t acap = RM_RECONCILE_ACTIONS_FOR(oc.n, maxw);
    acts = malloc(acap * sizeof(*acts)); /* not zeroed: only the entries written are read */
    if (!acts) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    rm_reconcile_in in = {
        .job = &tj,
        .workers = oc.w,
        .nworkers = oc.n,
        .rdzv = have_rs ? rs : NULL,
        .rdzv_desired = m->rdzv_desired,
        .rdzv_min = m->rdzv_min,
        .now = rm_wall(),
        .opts = &ro,
        .invalid_update = invalid_update,
        .queued = m->queued[0] ? m->queued : NULL,
    };
    rm_reconcile_out ro_out;
    memset(&ro_out, 0, sizeof(ro_out));
    ro_out.actions = acts;
    ro_out.cap = acap;
    rc = rm_reconcile(&in, &ro_out);
    if (rc) {
        rm_errf(err, rc, "reconcile core failed for %s: %s", key, rm_strerror(rc));
        goto out;
    }
    /* apply */
    *ka = (kube_apply){.rt = rt, .key = key, .tj = &tj, .m = m, .nobserved = oc.n};
    snprintf(ka->jobpods, sizeof(ka->jobpods), "/api/v1/namespaces/%s/pods", tj.namespace_);
    if (c10d_sync(rt, key, &tj, &ro_out, ro.torchrun))
        hold = true; /* workers wait for their rendezvous store */
    if (hold)
        ro_out.nactions = drop_creates(ro_out.actions, ro_out.nactions);
    rm_apply_result ar;
    int first_err = rm_apply_actions(&kube_ops, ka, ro_out.actions, ro_out.nactions, &ar);
    if (first_err)
        *err = ar.first_err;
    if (ar.requeue_after > 0 && (*requeue_after <= 0 || ar.requeue_after < *requeue_after))
        *requeue_after = ar.requeue_after;
    if (ka->ncreated && rt->c.pod_events) {
        /* one Event per batch of creations ("pods tj-worker-{0-63}"), not one per pod: a
         * 64-worker job costs 1 Event request instead of 64 */
        char note[1024], ranges[900];
        format_ranges(ka->created_idx, ka->ncreated, ranges, sizeof(ranges));
        snprintf(note, sizeof(note), "Created %d pod%s: %s-worker-{%s} (epoch %d)", ka->ncreated,
                 ka->ncreated == 1 ? "" : "s", tj.name, ranges, ka->created_epoch);
        rm_kube_rt_job_event(rt, &tj, false, "SuccessfulCreatePod", note);
    }
    ps_sync(rt, key, &tj, &ro_out);
    /* commit status */
    if (ro_out.status_changed || running_spec_missing(obj))
        RM_CHECK_GOTO(commit_status(rt, key, obj, &tj, &ro_out.status, m, err), rc, out);
    rc = first_err;
out:
    free(oc.w);
    free(rs);
    free(acts);
    free(ka);
    rm_tj_free(&tj);
    return rc;
}

/* GET the job "ns/name" from the API server, past the cache. */
static int get_job(rm_kube_rt *rt, const char *key, cJSON **out, rm_err *err)
{
    char gp[640];
    const char *slash = strchr(key, '/');
    snprintf(gp, sizeof(gp), "/apis/%s/%s/namespaces/%.*s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION,
             slash ? (int)(slash - key) : 0, key, RM_TJ_PLURAL, slash ? slash + 1 : key);
    return rm_kube_json(rt->c.client, "GET", gp, NULL, NULL, out, err);
}

int rm_kube_rt_sync(rm_kube_rt *rt, const char *key, double *requeue_after, rm_err *err)
{
    *requeue_after = 0;
    char *js = cached_job(rt, key);
    if (!js) {
        /* gone: forget it (pods, service and secret go with it through garbage collection) */
        if (rt->c.rdzv)
            rm_rdzv_job_remove(rt->c.rdzv, key);
        if (mem_get(rt, key, false)) {
            const char *slash = strchr(key, '/');
            char ns[256];
            snprintf(ns, sizeof(ns), "%.*s", slash ? (int)(slash - key) : 0, key);
            rm_op_metrics_job(rt->c.metrics, RM_JOB_DELETED, ns);
            rm_info("job deleted job=%s", key);
        }
        mem_drop(rt, key);
        return RM_OK;
    }
    cJSON *obj = cJSON_Parse(js);
    free(js);
    if (!obj)
        return rm_errf(err, RM_EPROTO, "job %s: cached object is not JSON", key);
    job_mem *m = mem_get(rt, key, true);
    if (!m) {
        cJSON_Delete(obj);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    /* our own newer write may not have reached the cache yet: wait for it briefly, then GET */
    unsigned long long crv = rv_of(obj);
    if (crv > 0 && m->latest_rv > crv) {
        if (m->stale_waits++ < 40) {
            cJSON_Delete(obj);
            *requeue_after = 0.05;
            return RM_OK;
        }
        cJSON *fresh = NULL;
        int grc = get_job(rt, key, &fresh, err);
        if (grc) {
            cJSON_Delete(obj);
            return grc == RM_ENOTFOUND ? RM_OK : grc;
        }
        cJSON_Delete(obj);
        obj = fresh;
        m->latest_rv = 0;
    }
    m->stale_waits = 0;
    int rc = RM_OK;
    for (int attempt = 0; attempt < 4; attempt++) {
        rc = sync_obj(rt, key, obj, m, requeue_after, err);
        if (rc != RM_ECONFLICT)
            break;
        /* 409: somebody wrote in between; decide again from the object as it is now */
        cJSON *fresh = NULL;
        int grc = get_job(rt, key, &fresh, err);
        if (grc == RM_ENOTFOUND) {
            rc = RM_OK; /* deleted meanwhile: its DELETED event brings us back */
            break;
        }
        if (grc) {
            rc = grc;
            break;
        }
        rm_debug("status conflict, reconciling again from fresh state job=%s attempt=%d", key, attempt + 1);
        rm_kube_rt_remember_latest(m, fresh);
        cJSON_Delete(obj);
        obj = fresh;
    }
    cJSON_Delete(obj);
    return rc;
}
