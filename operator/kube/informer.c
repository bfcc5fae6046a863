/* informer.c — list+watch into an indexed cache (see informer.h).
 *
 * Design: one thread per informer; the cache is a rm_kmap key → cent under a rwlock, and an index
 * rm_kmap index-key → doubly linked list of cents, so lookups by owner are O(items of that owner).
 * Changes are applied to the cache first and handlers called afterwards without the lock, so a
 * handler may read the cache. A re-list builds the complete new state off to the side, then
 * swaps it in and reports the differences. */
#include "operator/kube/informer.h"
#include "common/clock.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/json.h"
#include "common/log.h"
#include "common/kmap.h"

/* One cached object. With opts.inline_size the item lives inside the same allocation (one
 * malloc per object instead of two: at 8,000 pods the allocator's per-chunk cost matters). */
typedef struct cent {
    void *item;
    const char *index;          /* interned (inf->interned); NULL = not indexed */
    unsigned long long rvh;     /* hash of metadata.resourceVersion (only compared for equality) */
    struct cent *iprev, *inext; /* list of the same index key */
    char *key;                  /* "ns/name", inside this allocation */
    union {
        max_align_t align_;
        char c;
    } data[]; /* [inline item][key] */
} cent;

struct rm_informer {
    rm_kube_client *c;
    rm_informer_opts o;
    char *name, *path, *selector;
    pthread_t th;
    bool started;
    atomic_bool stop;
    pthread_mutex_t wmu; /* stop wake-up */
    pthread_cond_t wcv;
    pthread_rwlock_t lk;
    rm_kmap items;    /* key → cent* */
    rm_kmap index;    /* index key → cent* (head) */
    rm_kmap interned; /* index key → refcount (intptr): one copy of each owner key;
                                  * only the informer thread touches it */
    char rv[32];
    atomic_bool synced;
    atomic_ulong lists, watches;
    bool relist; /* set by the watch callback */
};

/* ---------------- cache primitives (write lock held) ---------------- */
static void index_unlink(rm_informer *inf, cent *e)
{
    if (!e->index)
        return;
    if (e->iprev)
        e->iprev->inext = e->inext;
    else {
        if (e->inext)
            rm_kmap_put(&inf->index, e->index, e->inext, NULL);
        else
            rm_kmap_del(&inf->index, e->index);
    }
    if (e->inext)
        e->inext->iprev = e->iprev;
    e->iprev = e->inext = NULL;
}

static void index_link(rm_informer *inf, cent *e)
{
    if (!e->index)
        return;
    cent *head = rm_kmap_get(&inf->index, e->index);
    e->iprev = NULL;
    e->inext = head;
    if (head)
        head->iprev = e;
    if (rm_kmap_put(&inf->index, e->index, e, NULL)) {
        /* ENOMEM: leave it unindexed rather than corrupt the list */
        if (head)
            head->iprev = NULL;
        e->index = NULL; /* stays interned until cent_free releases it */
    }
}

static const char *intern(rm_informer *inf, const char *s)
{
    rm_kmap_ent *e = rm_kmap_find(&inf->interned, s);
    if (!e) {
        if (rm_kmap_put(&inf->interned, s, (void *)0, NULL))
            return NULL;
        e = rm_kmap_find(&inf->interned, s);
    }
    e->val = (void *)((intptr_t)e->val + 1);
    return e->key;
}

static void unintern(rm_informer *inf, const char *s)
{
    rm_kmap_ent *e = s ? rm_kmap_find(&inf->interned, s) : NULL;
    if (!e)
        return;
    e->val = (void *)((intptr_t)e->val - 1);
    if ((intptr_t)e->val <= 0) {
        char tmp[512]; /* rm_kmap_del needs the key after the entry (and its key) may be gone */
        snprintf(tmp, sizeof(tmp), "%s", s);
        rm_kmap_del(&inf->interned, tmp);
    }
}

static void cent_free(rm_informer *inf, cent *e)
{
    if (!e)
        return;
    if (e->item && inf->o.free_item && e->item != (void *)e->data)
        inf->o.free_item(e->item);
    unintern(inf, e->index);
    free(e);
}

static int obj_key(const cJSON *obj, char *buf, size_t cap, char *rv, size_t rvcap)
{
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(md, "name");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(md, "namespace");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
    if (!cJSON_IsString(n))
        return RM_EPROTO;
    snprintf(buf, cap, "%s/%s", cJSON_IsString(ns) ? ns->valuestring : "", n->valuestring);
    if (rv)
        snprintf(rv, rvcap, "%s", cJSON_IsString(r) ? r->valuestring : "");
    return RM_OK;
}

static cent *cent_make(rm_informer *inf, const cJSON *obj)
{
    char key[512], rv[32];
    if (obj_key(obj, key, sizeof(key), rv, sizeof(rv)))
        return NULL;
    size_t kl = strlen(key), il = inf->o.inline_size;
    il = (il + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    cent *e = calloc(1, sizeof(*e) + il + kl + 1);
    if (!e)
        return NULL;
    e->key = (char *)e->data + il;
    memcpy(e->key, key, kl + 1);
    e->rvh = rm_kmap_hash(rv);
    void *item = inf->o.transform ? inf->o.transform(inf->o.ud, obj) : NULL;
    if (inf->o.transform && !item) {
        free(e);
        return NULL;
    }
    if (item && inf->o.inline_size) {
        memcpy(e->data, item, inf->o.inline_size); /* a flat item: move it in */
        if (inf->o.free_item)
            inf->o.free_item(item);
        item = e->data;
    }
    e->item = item;
    char ib[512];
    if (inf->o.index_fn && inf->o.index_fn(inf->o.ud, obj, ib, sizeof(ib)) == 0)
        e->index = intern(inf, ib);
    return e;
}

/* ---------------- event decoding ---------------- */
int rm_informer_decode_event(const char *line, size_t len, char *type, size_t tcap, cJSON **obj, rm_err *err)
{
    *obj = NULL;
    if (tcap)
        type[0] = 0;
    cJSON *j = cJSON_ParseWithLength(line, len);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return rm_errf(err, RM_EPROTO, "watch: undecodable event (%zu bytes)", len);
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    cJSON *o = cJSON_DetachItemFromObjectCaseSensitive(j, "object");
    int rc = RM_OK;
    if (!cJSON_IsString(t) || !cJSON_IsObject(o)) {
        rc = rm_errf(err, RM_EPROTO, "watch: event without type or object");
        goto out;
    }
    snprintf(type, tcap, "%s", t->valuestring);
    if (strcmp(t->valuestring, "ERROR") == 0) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(o, "code");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(o, "message");
        int c = cJSON_IsNumber(code) ? code->valueint : 0;
        rc = rm_errf(err, c == 410 ? RM_EEPOCH : RM_EPROTO, "watch: error event %d: %s", c,
                     cJSON_IsString(msg) ? msg->valuestring : "");
        goto out;
    }
    if (strcmp(t->valuestring, "ADDED") && strcmp(t->valuestring, "MODIFIED") &&
        strcmp(t->valuestring, "DELETED") && strcmp(t->valuestring, "BOOKMARK")) {
        rc = rm_errf(err, RM_EPROTO, "watch: unknown event type \"%s\"", t->valuestring);
        goto out;
    }
    *obj = o;
    o = NULL;
out:
    cJSON_Delete(o);
    cJSON_Delete(j);
    return rc;
}

/* ---------------- thread helpers ---------------- */
static bool wait_stop(rm_informer *inf, double s)
{
    struct timespec ts = rm_mono_ts_in(s);
    pthread_mutex_lock(&inf->wmu);
    while (!atomic_load(&inf->stop)) {
        if (pthread_cond_timedwait(&inf->wcv, &inf->wmu, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&inf->wmu);
    return atomic_load(&inf->stop);
}

static void notify(rm_informer *inf, rm_inf_event ev, const char *key, const char *index,
                   const void *old_item, const void *new_item)
{
    if (inf->o.handler)
        inf->o.handler(inf->o.ud, ev, key, index, old_item, new_item);
}

/* Report that key now maps to nw (old: what it was, NULL if new). An object whose index changed
 * also leaves its old index: that owner is told with a DELETED. The watch and the re-list both
 * report through here, so an owner change missed during a watch outage reaches the old owner. */
static void notify_put(rm_informer *inf, const char *key, const cent *old, const cent *nw)
{
    notify(inf, old ? RM_INF_UPDATED : RM_INF_ADDED, key, nw->index, old ? old->item : NULL, nw->item);
    if (old && old->index && (!nw->index || strcmp(old->index, nw->index)))
        notify(inf, RM_INF_DELETED, key, old->index, old->item, NULL);
}

/* Apply one object change from the watch. */
static void apply(rm_informer *inf, bool deleted, const cJSON *obj)
{
    char key[512], rv[32];
    if (obj_key(obj, key, sizeof(key), rv, sizeof(rv)))
        return;
    cent *old = NULL, *nw = NULL;
    if (!deleted) {
        nw = cent_make(inf, obj);
        if (!nw) {
            rm_warn(
                "informer: cannot cache object (skipped by transform or out of memory) informer=%s key=%s",
                inf->name, key);
            /* a transform may reject an object that no longer qualifies: treat as deleted */
            deleted = true;
        }
    }
    pthread_rwlock_wrlock(&inf->lk);
    if (deleted) {
        old = rm_kmap_del(&inf->items, key);
        if (old)
            index_unlink(inf, old);
    } else {
        void *prev = NULL;
        if (rm_kmap_put_ref(&inf->items, nw->key, nw, &prev)) {
            pthread_rwlock_unlock(&inf->lk);
            cent_free(inf, nw);
            inf->relist = true; /* ENOMEM: recover by re-listing later */
            return;
        }
        old = prev;
        if (old)
            index_unlink(inf, old);
        index_link(inf, nw);
    }
    pthread_rwlock_unlock(&inf->lk);
    if (deleted) {
        if (old)
            notify(inf, RM_INF_DELETED, key, old->index, old->item, NULL);
    } else {
        notify_put(inf, key, old, nw);
    }
    cent_free(inf, old);
}

static void build_path(rm_informer *inf, char *buf, size_t cap, const char *extra)
{
    char sel[1024] = "";
    if (inf->selector) {
        char esc[900];
        snprintf(sel, sizeof(sel), "&labelSelector=%s", rm_kube_escape(inf->selector, esc, sizeof(esc)));
    }
    snprintf(buf, cap, "%s?%s%s", inf->path, extra, sel);
}

/* LIST every page into a fresh map, then swap and diff. */
static int do_list(rm_informer *inf, rm_err *err)
{
    rm_kmap fresh = {0};
    char cont[2048] = "", rv[32] = "";
    int rc = RM_OK;
    for (;;) {
        char extra[2300], path[4096];
        if (cont[0]) {
            char esc[2200];
            snprintf(extra, sizeof(extra), "limit=%d&continue=%s", inf->o.page_limit,
                     rm_kube_escape(cont, esc, sizeof(esc)));
        } else {
            snprintf(extra, sizeof(extra), "limit=%d", inf->o.page_limit);
        }
        build_path(inf, path, sizeof(path), extra);
        cJSON *list = NULL;
        rc = rm_kube_json(inf->c, "GET", path, NULL, NULL, &list, err);
        if (rc) {
            if (rc == RM_EEPOCH && cont[0]) { /* continue token expired: start over */
                rm_kmap_clear(&fresh, NULL);
                cont[0] = 0;
                continue;
            }
            goto fail;
        }
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(list, "metadata");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(md, "continue");
        if (cJSON_IsString(r))
            snprintf(rv, sizeof(rv), "%s", r->valuestring);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items");
        const cJSON *it;
        cJSON_ArrayForEach(it, items)
        {
            cent *e = cent_make(inf, it);
            if (!e)
                continue;
            void *prev = NULL;
            if (rm_kmap_put_ref(&fresh, e->key, e, &prev)) {
                cent_free(inf, e);
                cJSON_Delete(list);
                rc = rm_errf(err, RM_ENOMEM, "informer %s: out of memory", inf->name);
                goto fail;
            }
            cent_free(inf, prev);
        }
        bool more = cJSON_IsString(ct) && ct->valuestring[0];
        if (more)
            snprintf(cont, sizeof(cont), "%s", ct->valuestring);
        cJSON_Delete(list);
        if (!more)
            break;
    }
    /* swap: compare fresh against the cache */
    typedef struct change {
        rm_inf_event ev;
        cent *old, *nw, *drop;
    } change;
    size_t nch = 0, capch = fresh.n + inf->items.n + 1;
    change *ch = malloc(capch * sizeof(*ch));
    if (!ch) {
        rc = rm_errf(err, RM_ENOMEM, "informer %s: out of memory", inf->name);
        goto fail;
    }
    pthread_rwlock_wrlock(&inf->lk);
    size_t it;
    for (rm_kmap_ent *e = rm_kmap_first(&inf->items, &it); e; e = rm_kmap_next(&inf->items, &it, e)) {
        cent *old = e->val;
        if (!rm_kmap_find(&fresh, old->key))
            ch[nch++] = (change){RM_INF_DELETED, old, NULL, NULL};
    }
    for (rm_kmap_ent *e = rm_kmap_first(&fresh, &it); e; e = rm_kmap_next(&fresh, &it, e)) {
        cent *nw = e->val;
        cent *old = rm_kmap_get(&inf->items, nw->key);
        if (!old)
            ch[nch++] = (change){RM_INF_ADDED, NULL, nw, NULL};
        else if (old->rvh != nw->rvh)
            ch[nch++] = (change){RM_INF_UPDATED, old, nw, NULL};
        else
            ch[nch++] = (change){RM_INF_UPDATED, old, NULL, nw}; /* unchanged: keep old, drop nw */
    }
    /* rebuild the maps from scratch over the winning entries (unchanged ones keep their item) */
    rm_kmap_clear(&inf->index, NULL);
    rm_kmap_clear(&inf->items, NULL);
    for (size_t i = 0; i < nch; i++) {
        cent *keep = NULL;
        if (ch[i].ev == RM_INF_DELETED)
            continue;
        keep = ch[i].ev == RM_INF_UPDATED && !ch[i].nw ? ch[i].old : ch[i].nw;
        keep->iprev = keep->inext = NULL;
        rm_kmap_put_ref(&inf->items, keep->key, keep, NULL);
        index_link(inf, keep);
    }
    /* fresh's entries point at the dropped duplicates' keys: clear it before freeing them */
    rm_kmap_clear(&fresh, NULL);
    for (size_t i = 0; i < nch; i++)
        cent_free(inf, ch[i].drop);
    snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
    pthread_rwlock_unlock(&inf->lk);
    atomic_store(&inf->synced, true);
    atomic_fetch_add(&inf->lists, 1);
    for (size_t i = 0; i < nch; i++) {
        switch (ch[i].ev) {
        case RM_INF_DELETED:
            notify(inf, RM_INF_DELETED, ch[i].old->key, ch[i].old->index, ch[i].old->item, NULL);
            cent_free(inf, ch[i].old);
            break;
        case RM_INF_ADDED:
        case RM_INF_UPDATED:
            if (ch[i].nw) { /* NULL: unchanged, no event */
                notify_put(inf, ch[i].nw->key, ch[i].old, ch[i].nw);
                cent_free(inf, ch[i].old);
            }
            break;
        }
    }
    free(ch);
    return RM_OK;
fail : {
    size_t i2;
    for (rm_kmap_ent *e = rm_kmap_first(&fresh, &i2); e; e = rm_kmap_next(&fresh, &i2, e))
        cent_free(inf, e->val);
    rm_kmap_clear(&fresh, NULL);
}
    return rc;
}

static int on_line(void *ud, char *line, size_t len)
{
    rm_informer *inf = ud;
    if (!line) {
        rm_warn("informer: event line over the cap, re-listing informer=%s", inf->name);
        inf->relist = true;
        return RM_ETOOBIG;
    }
    char type[16];
    cJSON *obj = NULL;
    rm_err e = {0};
    int rc = rm_informer_decode_event(line, len, type, sizeof(type), &obj, &e);
    if (rc) {
        rm_warn("informer: %s informer=%s", e.msg, inf->name);
        inf->relist = true;
        return rc;
    }
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
    if (strcmp(type, "BOOKMARK") != 0)
        apply(inf, strcmp(type, "DELETED") == 0, obj);
    if (cJSON_IsString(r) && r->valuestring[0]) {
        pthread_rwlock_wrlock(&inf->lk);
        snprintf(inf->rv, sizeof(inf->rv), "%s", r->valuestring);
        pthread_rwlock_unlock(&inf->lk);
    }
    cJSON_Delete(obj);
    return RM_OK;
}

static void *run(void *arg)
{
    rm_informer *inf = arg;
    double backoff = 0.2;
    bool need_list = true;
    while (!atomic_load(&inf->stop)) {
        rm_err err = {0};
        if (need_list) {
            int rc = do_list(inf, &err);
            if (rc) {
                rm_warn("informer: list failed informer=%s err=\"%s\" retry_s=%.1f", inf->name, err.msg,
                        backoff);
                if (wait_stop(inf, backoff))
                    break;
                backoff = backoff * 2 > 10 ? 10 : backoff * 2;
                continue;
            }
            need_list = false;
            rm_debug("informer: listed informer=%s items=%zu rv=%s", inf->name, rm_informer_count(inf),
                     inf->rv);
        }
        char extra[128], path[4096], rv[32];
        rm_informer_rv(inf, rv, sizeof(rv));
        snprintf(extra, sizeof(extra),
                 "watch=1&allowWatchBookmarks=true&timeoutSeconds=%d&resourceVersion=%s",
                 inf->o.watch_timeout_s, rv);
        build_path(inf, path, sizeof(path), extra);
        long status = 0;
        char *ebody = NULL;
        inf->relist = false;
        atomic_fetch_add(&inf->watches, 1);
        double t0 = rm_mono();
        int rc = rm_kube_stream(inf->c, path, inf->o.line_cap, inf->o.watch_timeout_s + 30.0, &inf->stop,
                                on_line, inf, &status, &ebody, &err);
        free(ebody);
        if (atomic_load(&inf->stop))
            break;
        const char *why = NULL;
        if (status == 410 || rc == RM_EEPOCH || inf->relist) {
            need_list = true;
            why = status == 410 || rc == RM_EEPOCH ? "expired" : "bad-event";
        } else if (rc == RM_OK && status == 200) {
            /* clean end (timeoutSeconds or server closed): re-watch now, unless it was instant */
            if (rm_mono() - t0 > 1.0) {
                backoff = 0.2;
                continue;
            }
            why = "closed";
        } else {
            why = status ? "http-error" : "transport";
        }
        if (inf->o.on_restart)
            inf->o.on_restart(inf->o.ud, inf->name, why);
        rm_info("informer: watch restart informer=%s reason=%s status=%ld relist=%d", inf->name, why, status,
                need_list ? 1 : 0);
        if (need_list && strcmp(why, "expired") == 0)
            continue; /* 410: re-list at once */
        if (wait_stop(inf, backoff))
            break;
        backoff = backoff * 2 > 10 ? 10 : backoff * 2;
    }
    return NULL;
}

int rm_informer_start(rm_kube_client *c, const rm_informer_opts *opts, rm_informer **out, rm_err *err)
{
    *out = NULL;
    if (!opts || !opts->path)
        return rm_errf(err, RM_EINVAL, "informer: no path");
    rm_informer *inf = calloc(1, sizeof(*inf));
    if (!inf)
        return rm_errf(err, RM_ENOMEM, "informer: out of memory");
    inf->c = c;
    inf->o = *opts;
    inf->name = strdup(opts->name ? opts->name : opts->path);
    inf->path = strdup(opts->path);
    inf->selector = opts->label_selector ? strdup(opts->label_selector) : NULL;
    if (!inf->name || !inf->path || (opts->label_selector && !inf->selector)) {
        free(inf->name);
        free(inf->path);
        free(inf->selector);
        free(inf);
        return rm_errf(err, RM_ENOMEM, "informer: out of memory");
    }
    if (inf->o.page_limit <= 0)
        inf->o.page_limit = 500;
    if (inf->o.watch_timeout_s <= 0)
        inf->o.watch_timeout_s = 300;
    if (!inf->o.line_cap)
        inf->o.line_cap = 4u << 20;
    pthread_mutex_init(&inf->wmu, NULL);
    rm_mono_cond_init(&inf->wcv);
    pthread_rwlock_init(&inf->lk, NULL);
    if (pthread_create(&inf->th, NULL, run, inf)) {
        rm_informer_stop(inf);
        return rm_errf(err, RM_ERR, "informer: cannot start thread");
    }
    inf->started = true;
    *out = inf;
    return RM_OK;
}

static void free_cent_cb(void *ud, void *v)
{
    cent_free(ud, v);
}

void rm_informer_stop(rm_informer *inf)
{
    if (!inf)
        return;
    pthread_mutex_lock(&inf->wmu);
    atomic_store(&inf->stop, true);
    pthread_cond_broadcast(&inf->wcv);
    pthread_mutex_unlock(&inf->wmu);
    if (inf->started)
        pthread_join(inf->th, NULL);
    size_t it;
    for (rm_kmap_ent *e = rm_kmap_first(&inf->items, &it); e; e = rm_kmap_next(&inf->items, &it, e))
        free_cent_cb(inf, e->val);
    rm_kmap_clear(&inf->items, NULL);
    rm_kmap_clear(&inf->index, NULL);
    rm_kmap_clear(&inf->interned, NULL);
    pthread_rwlock_destroy(&inf->lk);
    pthread_mutex_destroy(&inf->wmu);
    pthread_cond_destroy(&inf->wcv);
    free(inf->name);
    free(inf->path);
    free(inf->selector);
    free(inf);
}

bool rm_informer_synced(rm_informer *inf)
{
    return atomic_load(&inf->synced);
}

bool rm_informer_wait_synced(rm_informer *inf, double timeout_s)
{
    double end = rm_mono() + timeout_s;
    while (!atomic_load(&inf->synced)) {
        if (rm_mono() >= end)
            return false;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return true;
}

void rm_informer_rv(rm_informer *inf, char *buf, size_t cap)
{
    pthread_rwlock_rdlock(&inf->lk);
    snprintf(buf, cap, "%s", inf->rv);
    pthread_rwlock_unlock(&inf->lk);
}

unsigned long rm_informer_lists(rm_informer *inf)
{
    return atomic_load(&inf->lists);
}

unsigned long rm_informer_watches(rm_informer *inf)
{
    return atomic_load(&inf->watches);
}

void rm_informer_rlock(rm_informer *inf)
{
    pthread_rwlock_rdlock(&inf->lk);
}

void rm_informer_runlock(rm_informer *inf)
{
    pthread_rwlock_unlock(&inf->lk);
}

const void *rm_informer_get(rm_informer *inf, const char *key)
{
    cent *e = rm_kmap_get(&inf->items, key);
    return e ? e->item : NULL;
}

size_t rm_informer_count(rm_informer *inf)
{
    pthread_rwlock_rdlock(&inf->lk);
    size_t n = inf->items.n;
    pthread_rwlock_unlock(&inf->lk);
    return n;
}

void rm_informer_by_index(rm_informer *inf, const char *index_key,
                          int (*fn)(void *ud, const char *key, const void *item), void *ud)
{
    for (cent *e = rm_kmap_get(&inf->index, index_key); e; e = e->inext)
        if (fn(ud, e->key, e->item) < 0)
            break;
}

void rm_informer_foreach(rm_informer *inf, int (*fn)(void *ud, const char *key, const void *item), void *ud)
{
    size_t it;
    for (rm_kmap_ent *e = rm_kmap_first(&inf->items, &it); e; e = rm_kmap_next(&inf->items, &it, e)) {
        cent *c = e->val;
        if (fn(ud, c->key, c->item) < 0)
            break;
    }
}
