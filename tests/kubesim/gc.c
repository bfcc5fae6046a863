/* gc.c — the garbage collector kube-controller-manager would run (rule J4).
 *
 * Design: incremental, as Kubernetes' own collector is (its graph of owners and dependents, fed by
 * watches). Every commit tells the collector what changed (ks_gc_observe, under the store's
 * exclusive lock), which keeps two indexes — uid → where the object is stored, owner uid → the uids
 * of its dependents — and queues only the objects the change concerns: a new or re-owned
 * dependent, the dependents of an owner that went away or began a foreground deletion, and the
 * owners of a dependent that went away or was re-owned (a foreground owner may be free now). A pass
 * (the collector's thread, 100 ms after a change) decides on the queued objects under the read
 * lock — dependents whose owners are all gone (Background: delete them), dependents of owners being
 * deleted in the foreground (delete them), foreground owners with no blocking dependents left (drop
 * their foregroundDeletion finalizer) — and writes through the normal write path after.
 *
 * A pass used to scan every table under the read lock after any deletion: at 130,000 objects that
 * held every write (the writers-first lock then holds the readers too) for ~1 s after each batch of
 * pod deletions, the whole of one job's change latency at 10,000 jobs (docs/operator-scale.md,
 * "kubesim's garbage collector, and a resync that takes one worker"). A pass now costs what it
 * decides on. */
#include "tests/kubesim/kubesim.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/kmap.h"

/* Where an object with a uid is stored (its kind as last committed; the Event kinds share a table). */
typedef struct gc_where {
    ks_kind *k;
    const char *name; /* inside ns[] */
    char ns[];        /* "" for cluster-scoped */
} gc_where;

typedef struct gc_deps {
    size_t n, cap;
    char **uid;
} gc_deps;

struct ks_gc {
    rm_kmap live; /* uid → gc_where* (under srv->lock: written by commits, read by passes) */
    rm_kmap deps; /* owner uid → gc_deps* (the same) */
    pthread_mutex_t mu;
    rm_kmap todo_dep;   /* dependents to decide on: uid → (void *)1 (under mu) */
    rm_kmap todo_owner; /* owners whose foreground deletion may be done: uid → (void *)1 (under mu) */
    unsigned long long examined;
};

typedef struct gc_item {
    ks_kind *k;
    char ns[128], name[256], uid[64];
} gc_item;

static const cJSON *meta(const cJSON *o)
{
    return cJSON_GetObjectItemCaseSensitive(o, "metadata");
}

static const char *mstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta(o), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ownerReferences when a non-empty array, else NULL */
static const cJSON *refs_of(const cJSON *o)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(meta(o), "ownerReferences");
    return cJSON_IsArray(r) && r->child ? r : NULL;
}

static const char *ref_uid(const cJSON *r)
{
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "uid");
    return cJSON_IsString(u) ? u->valuestring : NULL;
}

static bool fg_deleting(const cJSON *o)
{
    if (!o || !mstr(o, "deletionTimestamp"))
        return false;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(meta(o), "finalizers");
    for (const cJSON *e = f ? f->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && !strcmp(e->valuestring, "foregroundDeletion"))
            return true;
    return false;
}

static void deps_free(void *p)
{
    gc_deps *d = p;
    for (size_t i = 0; d && i < d->n; i++)
        free(d->uid[i]);
    if (d)
        free(d->uid);
    free(d);
}

static void gc_clear(ks_gc *g)
{
    rm_kmap_clear(&g->live, free);
    rm_kmap_clear(&g->deps, deps_free);
    pthread_mutex_lock(&g->mu);
    rm_kmap_clear(&g->todo_dep, NULL);
    rm_kmap_clear(&g->todo_owner, NULL);
    pthread_mutex_unlock(&g->mu);
}

int ks_gc_init(ks_server *s)
{
    s->gc = calloc(1, sizeof(*s->gc));
    if (!s->gc)
        return RM_ENOMEM;
    pthread_mutex_init(&s->gc->mu, NULL);
    return RM_OK;
}

void ks_gc_fini(ks_server *s)
{
    if (!s->gc)
        return;
    gc_clear(s->gc);
    pthread_mutex_destroy(&s->gc->mu);
    free(s->gc);
    s->gc = NULL;
}

void ks_gc_reset(ks_server *s)
{
    if (s->gc)
        gc_clear(s->gc);
}

unsigned long long ks_gc_examined(ks_server *s)
{
    return s->gc ? s->gc->examined : 0;
}

/* Out of memory here loses an index entry: that object is then not collected (kubesim is a test
 * double; the write itself has succeeded). */
static void enqueue(ks_server *s, rm_kmap *q, const char *uid)
{
    pthread_mutex_lock(&s->gc->mu);
    rm_kmap_put(q, uid, (void *)1, NULL);
    pthread_mutex_unlock(&s->gc->mu);
    atomic_store(&s->gc_dirty, true);
}

static void enqueue_dependents(ks_server *s, const char *owner)
{
    const gc_deps *d = rm_kmap_get(&s->gc->deps, owner);
    for (size_t i = 0; d && i < d->n; i++)
        enqueue(s, &s->gc->todo_dep, d->uid[i]);
}

static void deps_add(ks_gc *g, const char *owner, const char *dep)
{
    gc_deps *d = rm_kmap_get(&g->deps, owner);
    if (!d) {
        if (!(d = calloc(1, sizeof(*d))) || rm_kmap_put(&g->deps, owner, d, NULL)) {
            free(d);
            return;
        }
    }
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->uid[i], dep))
            return; /* the same owner named twice */
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        char **p = realloc(d->uid, nc * sizeof(*p));
        if (!p)
            return;
        d->uid = p;
        d->cap = nc;
    }
    if ((d->uid[d->n] = strdup(dep)))
        d->n++;
}

static void deps_del(ks_gc *g, const char *owner, const char *dep)
{
    gc_deps *d = rm_kmap_get(&g->deps, owner);
    for (size_t i = 0; d && i < d->n; i++)
        if (!strcmp(d->uid[i], dep)) {
            free(d->uid[i]);
            d->uid[i] = d->uid[--d->n];
            break;
        }
    if (d && !d->n)
        deps_free(rm_kmap_del(&g->deps, owner));
}

static void live_put(ks_gc *g, const char *uid, ks_kind *k, const char *ns, const char *name)
{
    size_t nl = strlen(ns) + 1;
    gc_where *w = malloc(sizeof(*w) + nl + strlen(name) + 1);
    if (!w)
        return;
    w->k = k;
    memcpy(w->ns, ns, nl);
    w->name = strcpy(w->ns + nl, name);
    void *old = NULL;
    if (rm_kmap_put(&g->live, uid, w, &old))
        free(w);
    free(old);
}

static bool refs_equal(const cJSON *a, const cJSON *b)
{
    return a == b || (a && b && cJSON_Compare(a, b, true));
}

void ks_gc_observe(ks_server *s, ks_kind *k, const char *ns, const char *name, const cJSON *oldj,
                   const cJSON *newj)
{
    ks_gc *g = s->gc;
    if (!g)
        return;
    const char *ou = oldj ? mstr(oldj, "uid") : NULL, *nu = newj ? mstr(newj, "uid") : NULL;
    bool same = ou && nu && !strcmp(ou, nu);
    const cJSON *orefs = ou ? refs_of(oldj) : NULL, *nrefs = nu ? refs_of(newj) : NULL;
    bool refs_same = same && refs_equal(orefs, nrefs);
    if (ou && !refs_same)
        for (const cJSON *r = orefs ? orefs->child : NULL; r; r = r->next)
            if (ref_uid(r)) {
                deps_del(g, ref_uid(r), ou);
                enqueue(s, &g->todo_owner, ref_uid(r)); /* one blocking dependent fewer */
            }
    if (ou && !same) { /* gone: its dependents may be orphans now */
        free(rm_kmap_del(&g->live, ou));
        enqueue_dependents(s, ou);
    }
    if (nu && !same)
        live_put(g, nu, k, k->namespaced ? ns : "", name);
    if (nu && !refs_same && nrefs) {
        for (const cJSON *r = nrefs->child; r; r = r->next)
            if (ref_uid(r))
                deps_add(g, ref_uid(r), nu);
        enqueue(s, &g->todo_dep, nu); /* its owners may be gone already, or elsewhere (J5) */
    }
    if (nu && fg_deleting(newj) && !(same && fg_deleting(oldj))) {
        enqueue_dependents(s, nu);
        enqueue(s, &g->todo_owner, nu);
    }
}

/* Is the table of k served under some kind (a CRD's versions share one)? */
static bool served(ks_server *s, const ks_kind *k)
{
    if (k->served)
        return true;
    for (size_t i = 0; i < s->nkinds; i++)
        if (s->kinds[i]->tab == k->tab && s->kinds[i]->served)
            return true;
    return false;
}

/* The stored object with this uid (borrowed, under the lock), or NULL. */
static const cJSON *lookup(ks_server *s, const char *uid, const gc_where **where)
{
    const gc_where *w = rm_kmap_get(&s->gc->live, uid);
    if (!w || !served(s, w->k))
        return NULL;
    ks_obj *o = ks_table_get(w->k->tab, w->ns, w->name);
    if (!o)
        return NULL;
    if (where)
        *where = w;
    return o->j;
}

static void push(gc_item **v, size_t *n, size_t *cap, const gc_where *w, const char *uid)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        gc_item *p = realloc(*v, nc * sizeof(*p));
        if (!p)
            return;
        *v = p;
        *cap = nc;
    }
    gc_item *it = &(*v)[(*n)++];
    it->k = w->k;
    snprintf(it->ns, sizeof(it->ns), "%s", w->ns);
    snprintf(it->name, sizeof(it->name), "%s", w->name);
    snprintf(it->uid, sizeof(it->uid), "%s", uid);
}

/* A dependent is deleted when none of its owners lives (in its namespace or cluster-scoped, J5),
 * or when one of them is being deleted in the foreground. */
static bool orphaned(ks_server *s, const cJSON *o, const gc_where *w)
{
    bool any_live = false, owner_fg = false;
    for (const cJSON *r = refs_of(o)->child; r; r = r->next) {
        const char *ru = ref_uid(r);
        const gc_where *ow = NULL;
        const cJSON *owner = ru ? lookup(s, ru, &ow) : NULL;
        if (!owner)
            continue;
        if (!ow->ns[0] || !strcmp(ow->ns, w->ns))
            any_live = true;
        if (fg_deleting(owner))
            owner_fg = true;
    }
    return !any_live || owner_fg;
}

/* Does a dependent with blockOwnerDeletion still hold this foreground owner? */
static bool blocked(ks_server *s, const char *owner)
{
    const gc_deps *d = rm_kmap_get(&s->gc->deps, owner);
    for (size_t i = 0; d && i < d->n; i++) {
        const cJSON *o = lookup(s, d->uid[i], NULL), *refs = o ? refs_of(o) : NULL;
        for (const cJSON *r = refs ? refs->child : NULL; r; r = r->next)
            if (ref_uid(r) && !strcmp(ref_uid(r), owner) &&
                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "blockOwnerDeletion")))
                return true;
    }
    return false;
}

static int drop_fg_finalizer(cJSON *o, void *ud)
{
    (void)ud;
    cJSON *f =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "finalizers");
    cJSON *e = f ? f->child : NULL;
    bool changed = false;
    while (e) {
        cJSON *next = e->next;
        if (cJSON_IsString(e) && !strcmp(e->valuestring, "foregroundDeletion")) {
            cJSON_Delete(cJSON_DetachItemViaPointer(f, e));
            changed = true;
        }
        e = next;
    }
    return changed ? 1 : 0;
}

bool ks_gc_pass(ks_server *s)
{
    ks_gc *g = s->gc;
    if (!g)
        return false;
    pthread_mutex_lock(&g->mu);
    rm_kmap deps = g->todo_dep, owners = g->todo_owner;
    memset(&g->todo_dep, 0, sizeof(g->todo_dep));
    memset(&g->todo_owner, 0, sizeof(g->todo_owner));
    pthread_mutex_unlock(&g->mu);
    if (!deps.n && !owners.n)
        return false;
    gc_item *del = NULL, *fin = NULL;
    size_t ndel = 0, cdel = 0, nfin = 0, cfin = 0, it;
    pthread_rwlock_rdlock(&s->lock);
    for (rm_kmap_ent *e = rm_kmap_first(&deps, &it); e; e = rm_kmap_next(&deps, &it, e)) {
        const gc_where *w = NULL;
        const cJSON *o = lookup(s, e->key, &w);
        if (!o)
            continue;
        g->examined++;
        if (refs_of(o) && !mstr(o, "deletionTimestamp") && orphaned(s, o, w))
            push(&del, &ndel, &cdel, w, e->key);
    }
    for (rm_kmap_ent *e = rm_kmap_first(&owners, &it); e; e = rm_kmap_next(&owners, &it, e)) {
        const gc_where *w = NULL;
        const cJSON *o = lookup(s, e->key, &w);
        if (!o)
            continue;
        g->examined++;
        /* still blocked: the dependent's removal (or re-owning) queues this owner again */
        if (fg_deleting(o) && !blocked(s, e->key))
            push(&fin, &nfin, &cfin, w, e->key);
    }
    pthread_rwlock_unlock(&s->lock);
    rm_kmap_clear(&deps, NULL);
    rm_kmap_clear(&owners, NULL);
    for (size_t i = 0; i < ndel; i++) {
        int rc = ks_internal_delete(s, del[i].k, del[i].ns, del[i].name, "Background", -1);
        if (rc != RM_OK && rc != RM_ENOTFOUND)
            enqueue(s, &g->todo_dep, del[i].uid); /* try again next pass */
    }
    for (size_t i = 0; i < nfin; i++)
        ks_internal_update(s, fin[i].k, fin[i].ns, fin[i].name, drop_fg_finalizer, NULL);
    free(del);
    free(fin);
    return true;
}

static void *gc_main(void *arg)
{
    ks_server *s = arg;
    while (!atomic_load(&s->stopping)) {
        if (atomic_exchange(&s->gc_dirty, false))
            ks_gc_pass(s);
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int ks_gc_start(ks_server *s)
{
    if (pthread_create(&s->gc_thread, NULL, gc_main, s) != 0)
        return RM_ERR;
    s->gc_started = true;
    return RM_OK;
}

void ks_gc_stop(ks_server *s)
{
    if (s->gc_started)
        pthread_join(s->gc_thread, NULL);
    s->gc_started = false;
}
