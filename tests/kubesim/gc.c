/* gc.c — the garbage collector kube-controller-manager would run (rule J4).
 *
 * Design: a thread that, after any deletion (gc_dirty) or while a foreground deletion is pending,
 * takes one read-locked pass over every table: it collects the set of live uids, dependents whose
 * owners are all gone (Background: delete them), dependents of owners being deleted in the
 * foreground (delete them), and foreground owners with no dependents left (drop their
 * foregroundDeletion finalizer). The writes happen after the pass through the normal write path. */
#include "tests/kubesim/kubesim.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct gc_item {
    ks_kind *k;
    char ns[128], name[256], uid[64];
} gc_item;

static const char *mstr(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool fg_deleting(const cJSON *o)
{
    if (!mstr(o, "deletionTimestamp"))
        return false;
    const cJSON *f =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "finalizers");
    for (const cJSON *e = f ? f->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && !strcmp(e->valuestring, "foregroundDeletion"))
            return true;
    return false;
}

/* live objects: uid (sort key) and namespace ("" for cluster-scoped) */
typedef struct live_rec {
    char uid[64];
    char ns[128];
} live_rec;
static int uid_cmp(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
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

static void push(gc_item **v, size_t *n, size_t *cap, ks_kind *k, const cJSON *o)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        gc_item *p = realloc(*v, nc * sizeof(*p));
        if (!p)
            return;
        *v = p;
        *cap = nc;
    }
    gc_item *it = &(*v)[(*n)++];
    it->k = k;
    snprintf(it->ns, sizeof(it->ns), "%s", mstr(o, "namespace") ? mstr(o, "namespace") : "");
    snprintf(it->name, sizeof(it->name), "%s", mstr(o, "name") ? mstr(o, "name") : "");
    snprintf(it->uid, sizeof(it->uid), "%s", mstr(o, "uid") ? mstr(o, "uid") : "");
}

/* One pass; returns true when a foreground deletion is still pending. */
static bool gc_pass(ks_server *s)
{
    gc_item *del = NULL, *fin = NULL;
    size_t ndel = 0, cdel = 0, nfin = 0, cfin = 0;
    live_rec *uids = NULL;
    size_t nu = 0, cu = 0;
    char(*fguids)[64] = NULL;
    size_t nfg = 0, cfg = 0;
    bool pending = false;
    pthread_rwlock_rdlock(&s->lock);
    /* pass 1: live uids and foreground-deleting uids */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < s->nkinds; i++) {
            ks_kind *k = s->kinds[i];
            bool dup = false;
            for (size_t j = 0; j < i; j++)
                if (s->kinds[j]->tab == k->tab)
                    dup = true;
            if (dup || !k->served)
                continue;
            for (size_t b = 0; b < k->tab->nb; b++)
                for (ks_entry *e = k->tab->b[b]; e; e = e->next) {
                    const cJSON *o = e->obj->j;
                    const char *uid = mstr(o, "uid");
                    if (pass == 0) {
                        if (!uid)
                            continue;
                        if (nu == cu) {
                            size_t nc = cu ? cu * 2 : 256;
                            live_rec *p = realloc(uids, nc * sizeof(*uids));
                            if (!p)
                                goto oom;
                            uids = p;
                            cu = nc;
                        }
                        snprintf(uids[nu].uid, sizeof(uids[nu].uid), "%s", uid);
                        snprintf(uids[nu].ns, sizeof(uids[nu].ns), "%s",
                                 mstr(o, "namespace") ? mstr(o, "namespace") : "");
                        nu++;
                        if (fg_deleting(o)) {
                            if (nfg == cfg) {
                                size_t nc = cfg ? cfg * 2 : 16;
                                char(*p)[64] = realloc(fguids, nc * sizeof(*fguids));
                                if (!p)
                                    goto oom;
                                fguids = p;
                                cfg = nc;
                            }
                            snprintf(fguids[nfg++], 64, "%s", uid);
                        }
                        continue;
                    }
                    const cJSON *refs = cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetObjectItemCaseSensitive(o, "metadata"), "ownerReferences");
                    if (!cJSON_IsArray(refs) || !cJSON_GetArraySize(refs))
                        continue;
                    bool any_live = false, owner_fg = false;
                    for (const cJSON *r = refs->child; r; r = r->next) {
                        const cJSON *ru = cJSON_GetObjectItemCaseSensitive(r, "uid");
                        if (!cJSON_IsString(ru))
                            continue;
                        /* an owner counts only in the dependent's namespace or cluster-scoped (J5) */
                        const live_rec *lr = bsearch(ru->valuestring, uids, nu, sizeof(*uids), uid_cmp);
                        const char *dns = mstr(o, "namespace") ? mstr(o, "namespace") : "";
                        if (lr && (!lr->ns[0] || !strcmp(lr->ns, dns)))
                            any_live = true;
                        for (size_t f = 0; f < nfg; f++)
                            if (!strcmp(fguids[f], ru->valuestring))
                                owner_fg = true;
                    }
                    if ((!any_live || owner_fg) && !mstr(o, "deletionTimestamp"))
                        push(&del, &ndel, &cdel, k, o);
                }
        }
        if (pass == 0 && uids)
            qsort(uids, nu, sizeof(*uids), uid_cmp);
    }
    /* foreground owners with no dependents left */
    for (size_t f = 0; f < nfg; f++) {
        bool has_dep = false;
        for (size_t i = 0; i < s->nkinds && !has_dep; i++) {
            ks_kind *k = s->kinds[i];
            if (!k->served)
                continue;
            for (size_t b = 0; b < k->tab->nb && !has_dep; b++)
                for (ks_entry *e = k->tab->b[b]; e && !has_dep; e = e->next) {
                    const cJSON *refs = cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetObjectItemCaseSensitive(e->obj->j, "metadata"), "ownerReferences");
                    for (const cJSON *r = refs ? refs->child : NULL; r; r = r->next) {
                        const cJSON *ru = cJSON_GetObjectItemCaseSensitive(r, "uid");
                        /* only dependents with blockOwnerDeletion hold a foreground owner (J4) */
                        if (cJSON_IsString(ru) && !strcmp(ru->valuestring, fguids[f]) &&
                            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "blockOwnerDeletion")))
                            has_dep = true;
                    }
                }
        }
        if (has_dep) {
            pending = true;
            continue;
        }
        for (size_t i = 0; i < s->nkinds; i++) {
            ks_kind *k = s->kinds[i];
            if (!k->served)
                continue;
            for (size_t b = 0; b < k->tab->nb; b++)
                for (ks_entry *e = k->tab->b[b]; e; e = e->next) {
                    const char *uid = mstr(e->obj->j, "uid");
                    if (uid && !strcmp(uid, fguids[f]))
                        push(&fin, &nfin, &cfin, k, e->obj->j);
                }
        }
    }
    pthread_rwlock_unlock(&s->lock);
    if (0) {
    oom:
        /* out of memory: do nothing this pass, try again later */
        pthread_rwlock_unlock(&s->lock);
        free(del);
        free(fin);
        free(uids);
        free(fguids);
        return true;
    }
    for (size_t i = 0; i < ndel; i++)
        ks_internal_delete(s, del[i].k, del[i].ns, del[i].name, "Background", -1);
    for (size_t i = 0; i < nfin; i++)
        ks_internal_update(s, fin[i].k, fin[i].ns, fin[i].name, drop_fg_finalizer, NULL);
    free(del);
    free(fin);
    free(uids);
    free(fguids);
    return pending || ndel > 0 || nfin > 0;
}

static void *gc_main(void *arg)
{
    ks_server *s = arg;
    while (!atomic_load(&s->stopping)) {
        bool again = false;
        if (atomic_exchange(&s->gc_dirty, false))
            again = gc_pass(s);
        if (again)
            atomic_store(&s->gc_dirty, true);
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
