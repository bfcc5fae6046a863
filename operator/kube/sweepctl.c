/* sweepctl.c — the TrainingSweep controller (see sweepctl.h for the design). */
#include "operator/kube/sweepctl.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/sweep.h"
#include "common/trainingjob.h"
#include "operator/apply.h"
#include "operator/kube/informer.h"
#include "operator/kube/workqueue.h"

#define MAX_NS 16
#define STOPPED_ANNOTATION "ringmaster.dev/stopped-by"

struct rm_sweepctl {
    rm_sweepctl_cfg cfg;
    rm_informer *sweeps[MAX_NS], *trials[MAX_NS];
    int ninf;
    rm_wq *q;
    pthread_t th;
    bool th_started;
    rm_metric *m_trials, *m_best;
};

static const char *const state_names[] = {"pending", "running", "succeeded", "failed", "stopped"};

/* ---- informer plumbing: the caches keep whole objects (sweeps are few; trials are small) ---- */

static void *dup_transform(void *ud, const cJSON *obj)
{
    (void)ud;
    return cJSON_Duplicate(obj, 1);
}

static void free_json(void *item)
{
    cJSON_Delete(item);
}

static int sweep_index(void *ud, const cJSON *obj, char *buf, size_t cap)
{
    (void)ud;
    const cJSON *ns = rm_json_path(obj, "metadata.namespace");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(rm_json_path(obj, "metadata.labels"), RM_SWEEP_LABEL);
    if (!cJSON_IsString(ns) || !cJSON_IsString(lb))
        return -1;
    rm_sfmt(buf, cap, "%s/%s", ns->valuestring, lb->valuestring);
    return 0;
}

static void on_sweep(void *ud, rm_inf_event ev, const char *key, const char *index, const void *o,
                     const void *n)
{
    (void)ev;
    (void)index;
    (void)o;
    (void)n;
    rm_wq_add(((rm_sweepctl *)ud)->q, key);
}

static void on_trial(void *ud, rm_inf_event ev, const char *key, const char *index, const void *o,
                     const void *n)
{
    (void)ev;
    (void)key;
    (void)o;
    (void)n;
    if (index)
        rm_wq_add(((rm_sweepctl *)ud)->q, index);
}

static int enqueue_one(void *ud, const char *key, const void *item)
{
    (void)item;
    rm_wq_add(((rm_sweepctl *)ud)->q, key);
    return 0;
}

void rm_sweepctl_enqueue_all(rm_sweepctl *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->ninf; i++)
        rm_informer_foreach(s->sweeps[i], enqueue_one, s);
}

bool rm_sweepctl_synced(rm_sweepctl *s)
{
    if (!s)
        return true;
    for (int i = 0; i < s->ninf; i++)
        if (!rm_informer_synced(s->sweeps[i]) || !rm_informer_synced(s->trials[i]))
            return false;
    return true;
}

/* ---- reconcile one sweep ---- */

typedef struct collect {
    cJSON **objs;
    size_t n, cap;
} collect;

static int collect_one(void *ud, const char *key, const void *item)
{
    (void)key;
    collect *c = ud;
    if (c->n >= c->cap)
        return -1;
    cJSON *d = cJSON_Duplicate(item, 1);
    if (d)
        c->objs[c->n++] = d;
    return 0;
}

static int inf_of(rm_sweepctl *s, const char *ns)
{
    if (s->cfg.nns == 0)
        return 0;
    for (int i = 0; i < s->cfg.nns && i < MAX_NS; i++)
        if (strcmp(s->cfg.namespaces[i], ns) == 0)
            return i;
    return -1;
}

static void set_metrics(rm_sweepctl *s, const rm_sweep *sw, bool remove)
{
    const rm_sweep_status *st = &sw->status;
    const int v[] = {st->pending, st->running, st->succeeded, st->failed, st->stopped};
    for (int k = 0; k < 5; k++) {
        const char *lv[] = {sw->namespace_, sw->name, state_names[k]};
        if (remove) {
            rm_metric_remove(s->m_trials, lv);
            continue;
        }
        rm_series *x = rm_metric_with(s->m_trials, lv);
        if (x)
            rm_series_set(x, v[k]);
    }
    const char *lb[] = {sw->namespace_, sw->name};
    if (remove || st->best < 0 || !isfinite(st->best_objective)) {
        rm_metric_remove(s->m_best, lb);
    } else {
        rm_series *x = rm_metric_with(s->m_best, lb);
        if (x)
            rm_series_set(x, st->best_objective);
    }
}

static void sweep_path(char *buf, size_t cap, const char *ns, const char *name, const char *sub)
{
    rm_sfmt(buf, cap, "/apis/%s/%s/namespaces/%s/%s/%s%s", RM_TJ_GROUP, RM_TJ_VERSION, ns, RM_SWEEP_PLURAL,
            name, sub ? sub : "");
}

/* PUT /status: the cached object with `status` replaced. */
static int write_status(rm_sweepctl *s, const cJSON *obj, cJSON *status, const char *ns, const char *name,
                        rm_err *err)
{
    cJSON *body = cJSON_Duplicate(obj, 1);
    if (!body) {
        cJSON_Delete(status);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(body, "status");
    cJSON_AddItemToObject(body, "status", status);
    char path[512];
    sweep_path(path, sizeof path, ns, name, "/status");
    int rc = rm_kube_json(s->cfg.client, "PUT", path, "application/json", body, NULL, err);
    cJSON_Delete(body);
    return rc;
}

/* An invalid sweep: phase Failed, condition Failed/InvalidSpec naming the field (written once). */
static int mark_invalid(rm_sweepctl *s, const cJSON *obj, const char *ns, const char *name, const rm_err *why,
                        rm_err *err)
{
    const cJSON *gen = rm_json_path(obj, "metadata.generation");
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(obj, "status");
    const cJSON *oph = rm_json_path(obj, "status.phase");
    const cJSON *ogen = rm_json_path(obj, "status.observedGeneration");
    int64_t g = cJSON_IsNumber(gen) ? (int64_t)gen->valuedouble : 0;
    if (old && cJSON_IsString(oph) && strcmp(oph->valuestring, "Failed") == 0 && cJSON_IsNumber(ogen) &&
        (int64_t)ogen->valuedouble == g)
        return RM_OK; /* already said */
    cJSON *st = cJSON_CreateObject();
    if (!st)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    char tb[32];
    rm_json_time(tb, rm_wall());
    cJSON_AddStringToObject(st, "phase", "Failed");
    cJSON_AddNumberToObject(st, "observedGeneration", (double)g);
    cJSON *cs = cJSON_AddArrayToObject(st, "conditions");
    cJSON *c = cJSON_CreateObject();
    if (c) {
        cJSON_AddStringToObject(c, "type", "Failed");
        cJSON_AddStringToObject(c, "status", "True");
        cJSON_AddStringToObject(c, "reason", "InvalidSpec");
        cJSON_AddStringToObject(c, "message", why->msg);
        cJSON_AddStringToObject(c, "lastTransitionTime", tb);
        cJSON_AddNumberToObject(c, "observedGeneration", (double)g);
        cJSON_AddItemToArray(cs, c);
    }
    rm_warn("sweep invalid sweep=%s/%s err=\"%s\"", ns, name, why->msg);
    return write_status(s, obj, st, ns, name, err);
}

/* ---- the sweep operations table (operator/apply.h) ---- */
typedef struct sweep_apply {
    rm_sweepctl *s;
    const rm_sweep *sw;
    const char *key;
} sweep_apply;

static int create_trial(void *ud, int index, rm_err *err)
{
    const sweep_apply *sa = ud;
    rm_sweepctl *s = sa->s;
    const rm_sweep *sw = sa->sw;
    cJSON *tj = rm_sweep_trial_json(sw, index, err);
    if (!tj)
        return err->code ? err->code : RM_ENOMEM;
    cJSON *md = cJSON_GetObjectItemCaseSensitive(tj, "metadata");
    if (rm_json_add_controller_ref(md, RM_TJ_API_VERSION, RM_SWEEP_KIND, sw->name, sw->uid)) {
        cJSON_Delete(tj);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    char path[512];
    rm_sfmt(path, sizeof path, "/apis/%s/%s/namespaces/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION, sw->namespace_,
            RM_TJ_PLURAL);
    int rc = rm_kube_json(s->cfg.client, "POST", path, "application/json", tj, NULL, err);
    cJSON_Delete(tj);
    char name[160];
    rm_sweep_trial_name(sw, index, name, sizeof name);
    if (rc == RM_ECONFLICT) { /* AlreadyExists: a restarted operator adopting its trial */
        rm_info("trial exists, adopted trial=%s/%s", sw->namespace_, name);
        return RM_OK;
    }
    if (rc == RM_OK)
        rm_info("trial created trial=%s/%s", sw->namespace_, name);
    return rc;
}

static int stop_trial(void *ud, int index, const char *reason, const char *message, rm_err *err)
{
    const sweep_apply *sa = ud;
    rm_sweepctl *s = sa->s;
    const rm_sweep *sw = sa->sw;
    (void)message;
    char name[160], path[512];
    rm_sweep_trial_name(sw, index, name, sizeof name);
    rm_sfmt(path, sizeof path, "/apis/%s/%s/namespaces/%s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION, sw->namespace_,
            RM_TJ_PLURAL, name);
    cJSON *p = cJSON_CreateObject();
    cJSON *rp = cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "spec"), "runPolicy");
    cJSON *an = cJSON_AddObjectToObject(cJSON_AddObjectToObject(p, "metadata"), "annotations");
    if (!p || !rp || !an) {
        cJSON_Delete(p);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    cJSON_AddBoolToObject(rp, "suspend", true);
    cJSON_AddStringToObject(an, STOPPED_ANNOTATION, reason);
    int rc = rm_kube_json(s->cfg.client, "PATCH", path, "application/merge-patch+json", p, NULL, err);
    cJSON_Delete(p);
    if (rc == RM_ENOTFOUND)
        return RM_OK; /* gone already */
    if (rc == RM_OK)
        rm_info("trial stopped trial=%s/%s reason=%s", sw->namespace_, name, reason);
    return rc;
}

static int sweep_event(void *ud, int index, bool warning, const char *reason, const char *message,
                       rm_err *err)
{
    const sweep_apply *sa = ud;
    (void)index;
    (void)err;
    rm_log_write(warning ? RM_LOG_WARN : RM_LOG_INFO, __FILE__, __LINE__,
                 "sweep event sweep=%s reason=%s message=\"%s\"", sa->key, reason, message);
    return RM_OK;
}

static const rm_sweep_ops kube_sweep_ops = {
    .create_trial = create_trial,
    .stop_trial = stop_trial,
    .event = sweep_event,
};

/* ---- one pass: observe the trials, decide, apply, write the status ---- */

/* Returns RM_OK, or an error to requeue with back-off. *requeue_s > 0 asks for a later look. */
static int reconcile(rm_sweepctl *s, const char *key, double *requeue_s, rm_err *err)
{
    char ns[128], name[256];
    const char *slash = strchr(key, '/');
    *requeue_s = 0;
    if (!slash || (size_t)(slash - key) >= sizeof ns)
        return RM_OK;
    memcpy(ns, key, (size_t)(slash - key));
    ns[slash - key] = 0;
    rm_sfmt(name, sizeof name, "%s", slash + 1);
    int ii = inf_of(s, ns);
    if (ii < 0)
        return RM_OK;
    rm_informer_rlock(s->sweeps[ii]);
    const cJSON *cached = rm_informer_get(s->sweeps[ii], key);
    cJSON *obj = cached ? cJSON_Duplicate(cached, 1) : NULL;
    rm_informer_runlock(s->sweeps[ii]);
    if (!obj) { /* deleted: the garbage collector removes its trials */
        rm_sweep gone = {.namespace_ = ns, .name = name};
        set_metrics(s, &gone, true);
        return RM_OK;
    }
    int rc = RM_OK;
    rm_sweep sw;
    rm_err perr = {0};
    collect c = {0};
    rm_sweep_obs *obs = NULL;
    rm_sweep_action *acts = NULL;
    rm_sweep_out out = {0};
    bool have_out = false;
    if (rm_sweep_from_json(obj, &sw, &perr) != RM_OK) {
        rc = perr.code == RM_ENOMEM ? rm_errf(err, RM_ENOMEM, "out of memory")
                                    : mark_invalid(s, obj, ns, name, &perr, err);
        cJSON_Delete(obj);
        return rc;
    }
    /* the trials of this sweep (label index), only those it controls (a sweep re-created under
     * the same name does not adopt the old one's trials while they are being collected) */
    c.cap = (size_t)sw.spec.trials * 2 + 8;
    c.objs = calloc(c.cap, sizeof *c.objs);
    obs = calloc((size_t)sw.spec.trials + 1, sizeof *obs);
    acts = calloc(RM_SWEEP_ACTIONS(sw.spec.trials), sizeof *acts);
    if (!c.objs || !obs || !acts) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    rm_informer_rlock(s->trials[ii]);
    rm_informer_by_index(s->trials[ii], key, collect_one, &c);
    rm_informer_runlock(s->trials[ii]);
    size_t nobs = 0;
    bool *seen = calloc((size_t)sw.spec.trials + 1, sizeof *seen);
    if (!seen) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < c.n; k++) {
        const cJSON *refs = rm_json_path(c.objs[k], "metadata.ownerReferences");
        bool ours = false;
        for (const cJSON *r = cJSON_IsArray(refs) ? refs->child : NULL; r; r = r->next) {
            const cJSON *uid = cJSON_GetObjectItemCaseSensitive(r, "uid");
            ours |= cJSON_IsString(uid) && sw.uid && strcmp(uid->valuestring, sw.uid) == 0;
        }
        if (!ours)
            continue;
        rm_tj tj;
        rm_err te = {0};
        if (rm_tj_from_json(c.objs[k], &tj, &te) != RM_OK)
            continue;
        rm_sweep_obs o;
        int idx = rm_sweep_obs_from_tj(&sw, &tj, &o);
        rm_tj_free(&tj);
        if (idx < 0 || seen[idx])
            continue;
        seen[idx] = true;
        obs[nobs++] = o;
    }
    free(seen);
    out.actions = acts;
    out.cap = RM_SWEEP_ACTIONS(sw.spec.trials);
    sw.generation = sw.generation > 0 ? sw.generation : 1;
    rc = rm_sweep_reconcile(&sw, obs, nobs, rm_wall(), &out);
    if (rc) {
        rm_errf(err, rc, "sweep reconcile: %s", rm_strerror(rc));
        goto out;
    }
    have_out = true;
    sweep_apply sa = {.s = s, .sw = &sw, .key = key};
    rc = rm_sweep_apply_actions(&kube_sweep_ops, &sa, acts, out.nactions, err);
    if (rc)
        goto out; /* the status is written on the next pass, after the actions succeeded */
    rm_sweep_status_free(&sw.status);
    sw.status = out.status;
    have_out = false;
    if (out.status_changed) {
        cJSON *st = rm_sweep_status_to_json(&sw);
        if (!st) {
            rc = rm_errf(err, RM_ENOMEM, "out of memory");
            goto out;
        }
        rc = write_status(s, obj, st, ns, name, err);
        if (rc)
            goto out;
    }
    set_metrics(s, &sw, false);
    if (sw.status.phase == RM_SWEEP_RUNNING || sw.status.phase == RM_SWEEP_PENDING)
        *requeue_s = s->cfg.resync_s > 0 ? s->cfg.resync_s : 5;
out:
    if (have_out)
        rm_sweep_status_free(&out.status);
    for (size_t k = 0; k < c.n; k++)
        cJSON_Delete(c.objs[k]);
    free(c.objs);
    free(obs);
    free(acts);
    rm_sweep_free(&sw);
    cJSON_Delete(obj);
    return rc;
}

static void *worker(void *arg)
{
    rm_sweepctl *s = arg;
    for (;;) {
        char *key = NULL;
        if (rm_wq_get(s->q, -1, &key) != RM_OK)
            break;
        if (!atomic_load(s->cfg.leading)) {
            rm_wq_done(s->q, key); /* the leader-to-be re-enqueues everything */
            free(key);
            continue;
        }
        double requeue = 0;
        rm_err err = {0};
        int rc = reconcile(s, key, &requeue, &err);
        if (rc) {
            rm_warn("sweep reconcile failed sweep=%s err=\"%s\"", key, err.msg);
            rm_wq_add_rate_limited(s->q, key);
        } else {
            rm_wq_forget(s->q, key);
            if (requeue > 0)
                rm_wq_add_after(s->q, key, requeue);
        }
        rm_wq_done(s->q, key);
        free(key);
    }
    return NULL;
}

int rm_sweepctl_start(const rm_sweepctl_cfg *cfg, rm_sweepctl **out, rm_err *err)
{
    *out = NULL;
    rm_sweepctl *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    s->cfg = *cfg;
    int rc = RM_OK;
    static const char *const l_state[] = {"namespace", "name", "state", NULL};
    static const char *const l_sweep[] = {"namespace", "name", NULL};
    RM_CHECK_GOTO(rm_metrics_gauge(cfg->reg, "ringmaster_sweep_trials",
                                   "Trials of each TrainingSweep by state (pending, running, "
                                   "succeeded, failed, stopped).",
                                   l_state, &s->m_trials, err),
                  rc, fail);
    RM_CHECK_GOTO(rm_metrics_gauge(cfg->reg, "ringmaster_sweep_best_objective",
                                   "The best succeeded trial's objective of each TrainingSweep.", l_sweep,
                                   &s->m_best, err),
                  rc, fail);
    s->q = rm_wq_new(NULL);
    if (!s->q) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto fail;
    }
    int n = cfg->nns > 0 ? (cfg->nns < MAX_NS ? cfg->nns : MAX_NS) : 1;
    char sel[160];
    rm_sfmt(sel, sizeof sel, "%s", RM_SWEEP_LABEL);
    for (int i = 0; i < n; i++) {
        char sp[512], tp[512];
        if (cfg->nns > 0) {
            rm_sfmt(sp, sizeof sp, "/apis/%s/%s/namespaces/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION,
                    cfg->namespaces[i], RM_SWEEP_PLURAL);
            rm_sfmt(tp, sizeof tp, "/apis/%s/%s/namespaces/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION,
                    cfg->namespaces[i], RM_TJ_PLURAL);
        } else {
            rm_sfmt(sp, sizeof sp, "/apis/%s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION, RM_SWEEP_PLURAL);
            rm_sfmt(tp, sizeof tp, "/apis/%s/%s/%s", RM_TJ_GROUP, RM_TJ_VERSION, RM_TJ_PLURAL);
        }
        rm_informer_opts so = {.name = "trainingsweeps",
                               .path = sp,
                               .transform = dup_transform,
                               .free_item = free_json,
                               .handler = on_sweep,
                               .ud = s,
                               .page_limit = 500,
                               .watch_timeout_s = 300};
        rm_informer_opts to = {.name = "trainingjobs/trials",
                               .path = tp,
                               .label_selector = sel,
                               .transform = dup_transform,
                               .free_item = free_json,
                               .index_fn = sweep_index,
                               .handler = on_trial,
                               .ud = s,
                               .page_limit = 500,
                               .watch_timeout_s = 300};
        RM_CHECK_GOTO(rm_informer_start(cfg->client, &so, &s->sweeps[i], err), rc, fail);
        s->ninf = i + 1;
        RM_CHECK_GOTO(rm_informer_start(cfg->client, &to, &s->trials[i], err), rc, fail);
    }
    if (pthread_create(&s->th, NULL, worker, s) != 0) {
        rc = rm_errf(err, RM_ERR, "cannot start the sweep worker thread");
        goto fail;
    }
    s->th_started = true;
    *out = s;
    return RM_OK;
fail:
    rm_sweepctl_stop(s);
    return rc;
}

void rm_sweepctl_stop(rm_sweepctl *s)
{
    if (!s)
        return;
    if (s->q)
        rm_wq_shutdown(s->q);
    if (s->th_started)
        pthread_join(s->th, NULL);
    for (int i = 0; i < MAX_NS; i++) {
        rm_informer_stop(s->sweeps[i]);
        rm_informer_stop(s->trials[i]);
    }
    rm_wq_free(s->q);
    free(s);
}
