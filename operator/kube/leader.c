/* leader.c — Lease-based leader election (see leader.h).
 *
 * Design: a direct port of client-go's tryAcquireOrRenew. The observed record (holder, renewTime,
 * acquireTime, transitions, duration) is compared as a whole; any change resets observedTime on the
 * local clock. The elector thread sleeps in a timed wait so stop() interrupts it at once. */
#include "operator/kube/leader.h"
#include "common/clock.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/json.h"
#include "common/log.h"

typedef struct lease_rec {
    char holder[256];
    int duration;
    char acquire[48], renew[48];
    int transitions;
} lease_rec;

struct rm_leader {
    rm_kube_client *c;
    char *ns, *name, *id;
    double lease_s, renew_s, retry_s;
    void (*on_change)(void *ud, bool leading);
    void *ud;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    atomic_bool leading;
    lease_rec observed;
    bool have_observed;
    double observed_at; /* local monotonic */
    double last_renew;  /* local monotonic of the last successful acquire/renew */
};

static void rec_from(const cJSON *lease, lease_rec *r)
{
    memset(r, 0, sizeof(*r));
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(lease, "spec");
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(sp, "holderIdentity")) && cJSON_IsString(v))
        snprintf(r->holder, sizeof(r->holder), "%s", v->valuestring);
    if ((v = cJSON_GetObjectItemCaseSensitive(sp, "leaseDurationSeconds")) && cJSON_IsNumber(v))
        r->duration = v->valueint;
    if ((v = cJSON_GetObjectItemCaseSensitive(sp, "acquireTime")) && cJSON_IsString(v))
        snprintf(r->acquire, sizeof(r->acquire), "%s", v->valuestring);
    if ((v = cJSON_GetObjectItemCaseSensitive(sp, "renewTime")) && cJSON_IsString(v))
        snprintf(r->renew, sizeof(r->renew), "%s", v->valuestring);
    if ((v = cJSON_GetObjectItemCaseSensitive(sp, "leaseTransitions")) && cJSON_IsNumber(v))
        r->transitions = v->valueint;
}

static cJSON *spec_json(const lease_rec *r)
{
    cJSON *sp = cJSON_CreateObject();
    if (!sp)
        return NULL;
    cJSON_AddStringToObject(sp, "holderIdentity", r->holder);
    cJSON_AddNumberToObject(sp, "leaseDurationSeconds", r->duration);
    if (r->acquire[0])
        cJSON_AddStringToObject(sp, "acquireTime", r->acquire);
    if (r->renew[0])
        cJSON_AddStringToObject(sp, "renewTime", r->renew);
    cJSON_AddNumberToObject(sp, "leaseTransitions", r->transitions);
    return sp;
}

int rm_leader_new(rm_kube_client *c, const rm_leader_opts *opts, rm_leader **out, rm_err *err)
{
    *out = NULL;
    if (!opts || !opts->namespace_ || !opts->name || !opts->identity)
        return rm_errf(err, RM_EINVAL, "leader: namespace, name and identity are required");
    rm_leader *l = calloc(1, sizeof(*l));
    if (!l)
        return rm_errf(err, RM_ENOMEM, "leader: out of memory");
    l->ns = strdup(opts->namespace_);
    l->name = strdup(opts->name);
    l->id = strdup(opts->identity);
    l->lease_s = opts->lease_s > 0 ? opts->lease_s : 15;
    l->renew_s = opts->renew_deadline_s > 0 ? opts->renew_deadline_s : 10;
    l->retry_s = opts->retry_s > 0 ? opts->retry_s : 2;
    l->on_change = opts->on_change;
    l->ud = opts->ud;
    pthread_mutex_init(&l->mu, NULL);
    rm_mono_cond_init(&l->cv);
    if (!l->ns || !l->name || !l->id) {
        rm_leader_stop(l);
        return rm_errf(err, RM_ENOMEM, "leader: out of memory");
    }
    /* GET + PUT (or GET + POST) fit in the renew deadline */
    long tmo = (long)(l->renew_s * 1000 / 2);
    rm_kube_client_opts co = {.qps = -1, .max_retries = -1, .timeout_ms = tmo > 0 ? tmo : 1};
    int rc = rm_kube_client_new_like(c, &co, &l->c, err);
    if (rc) {
        rm_leader_stop(l);
        return rc;
    }
    *out = l;
    return RM_OK;
}

static void lease_path(rm_leader *l, char *buf, size_t cap, bool item)
{
    if (item)
        snprintf(buf, cap, "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", l->ns, l->name);
    else
        snprintf(buf, cap, "/apis/coordination.k8s.io/v1/namespaces/%s/leases", l->ns);
}

bool rm_leader_try(rm_leader *l, double now)
{
    char path[512];
    lease_path(l, path, sizeof(path), true);
    char ts[40];
    rm_json_microtime(ts, rm_wall());
    cJSON *lease = NULL;
    rm_err err = {0};
    int rc = rm_kube_json(l->c, "GET", path, NULL, NULL, &lease, &err);
    if (rc == RM_ENOTFOUND) {
        lease_rec r = {0};
        snprintf(r.holder, sizeof(r.holder), "%s", l->id);
        r.duration = (int)ceil(l->lease_s);
        snprintf(r.acquire, sizeof(r.acquire), "%s", ts);
        snprintf(r.renew, sizeof(r.renew), "%s", ts);
        cJSON *obj = cJSON_CreateObject();
        cJSON_AddStringToObject(obj, "apiVersion", "coordination.k8s.io/v1");
        cJSON_AddStringToObject(obj, "kind", "Lease");
        cJSON *md = cJSON_AddObjectToObject(obj, "metadata");
        cJSON_AddStringToObject(md, "name", l->name);
        cJSON_AddStringToObject(md, "namespace", l->ns);
        cJSON_AddItemToObject(obj, "spec", spec_json(&r));
        char cpath[512];
        lease_path(l, cpath, sizeof(cpath), false);
        rc = rm_kube_json(l->c, "POST", cpath, NULL, obj, NULL, &err);
        cJSON_Delete(obj);
        if (rc) {
            rm_debug("leader: create failed err=\"%s\"", err.msg);
            return false;
        }
        l->observed = r;
        l->have_observed = true;
        l->observed_at = now;
        l->last_renew = now;
        return true;
    }
    if (rc) {
        rm_debug("leader: get failed err=\"%s\"", err.msg);
        return false;
    }
    lease_rec cur;
    rec_from(lease, &cur);
    if (!l->have_observed || memcmp(&cur, &l->observed, sizeof(cur)) != 0) {
        l->observed = cur;
        l->have_observed = true;
        l->observed_at = now;
    }
    bool mine = strcmp(cur.holder, l->id) == 0;
    double dur = cur.duration > 0 ? cur.duration : l->lease_s;
    if (cur.holder[0] && !mine && l->observed_at + dur > now) {
        cJSON_Delete(lease);
        return false; /* held by another, not expired */
    }
    lease_rec nr = cur;
    snprintf(nr.holder, sizeof(nr.holder), "%s", l->id);
    nr.duration = (int)ceil(l->lease_s);
    snprintf(nr.renew, sizeof(nr.renew), "%s", ts);
    if (!mine) {
        snprintf(nr.acquire, sizeof(nr.acquire), "%s", ts);
        nr.transitions = cur.transitions + 1;
    }
    cJSON_ReplaceItemInObjectCaseSensitive(lease, "spec", spec_json(&nr));
    rc = rm_kube_json(l->c, "PUT", path, NULL, lease, NULL, &err);
    cJSON_Delete(lease);
    if (rc) {
        rm_debug("leader: update failed err=\"%s\"", err.msg);
        return false;
    }
    l->observed = nr;
    l->observed_at = now;
    l->last_renew = now;
    return true;
}

int rm_leader_release(rm_leader *l)
{
    if (!atomic_load(&l->leading) && l->started)
        return RM_OK; /* the thread never led: nothing to release */
    char path[512];
    lease_path(l, path, sizeof(path), true);
    cJSON *lease = NULL;
    rm_err err = {0};
    int rc = rm_kube_json(l->c, "GET", path, NULL, NULL, &lease, &err);
    if (rc)
        return rc;
    lease_rec cur;
    rec_from(lease, &cur);
    if (strcmp(cur.holder, l->id) == 0) {
        char ts[40];
        rm_json_microtime(ts, rm_wall());
        cur.holder[0] = 0;
        cur.duration = 1;
        snprintf(cur.renew, sizeof(cur.renew), "%s", ts);
        snprintf(cur.acquire, sizeof(cur.acquire), "%s", ts);
        cJSON_ReplaceItemInObjectCaseSensitive(lease, "spec", spec_json(&cur));
        rc = rm_kube_json(l->c, "PUT", path, NULL, lease, NULL, &err);
        if (rc == RM_OK)
            rm_info("leader: released lease=%s/%s", l->ns, l->name);
    }
    cJSON_Delete(lease);
    atomic_store(&l->leading, false);
    return rc;
}

/* Sleep up to s; true if stop was requested. */
static bool nap(rm_leader *l, double s)
{
    struct timespec ts = rm_mono_ts_in(s);
    pthread_mutex_lock(&l->mu);
    while (!l->stop)
        if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT)
            break;
    bool st = l->stop;
    pthread_mutex_unlock(&l->mu);
    return st;
}

static void set_leading(rm_leader *l, bool v)
{
    if (atomic_exchange(&l->leading, v) == v)
        return;
    rm_info("leader: %s lease=%s/%s identity=%s", v ? "became leader" : "lost leadership", l->ns, l->name,
            l->id);
    if (l->on_change)
        l->on_change(l->ud, v);
}

static void *run(void *arg)
{
    rm_leader *l = arg;
    unsigned seed = (unsigned)(uintptr_t)l ^ (unsigned)time(NULL);
    for (;;) {
        double now = rm_mono();
        bool ok = rm_leader_try(l, now);
        if (ok) {
            set_leading(l, true);
        } else if (atomic_load(&l->leading) && rm_mono() - l->last_renew > l->renew_s) {
            set_leading(l, false); /* could not renew within the deadline: step down */
        }
        /* candidates jitter (client-go: JitterFactor 1.2); leaders renew every retry period */
        double d = l->retry_s;
        if (!atomic_load(&l->leading))
            d *= 1.0 + 0.2 * ((double)rand_r(&seed) / RAND_MAX);
        if (nap(l, d))
            break;
    }
    return NULL;
}

int rm_leader_start(rm_kube_client *c, const rm_leader_opts *opts, rm_leader **out, rm_err *err)
{
    int rc = rm_leader_new(c, opts, out, err);
    if (rc)
        return rc;
    if (pthread_create(&(*out)->th, NULL, run, *out)) {
        rm_leader_stop(*out);
        *out = NULL;
        return rm_errf(err, RM_ERR, "leader: cannot start thread");
    }
    (*out)->started = true;
    return RM_OK;
}

bool rm_leader_is_leader(rm_leader *l)
{
    return l && atomic_load(&l->leading);
}

void rm_leader_stop(rm_leader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (l->started)
        pthread_join(l->th, NULL);
    if (l->c)
        rm_leader_release(l);
    rm_kube_client_free(l->c);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l->ns);
    free(l->name);
    free(l->id);
    free(l);
}
