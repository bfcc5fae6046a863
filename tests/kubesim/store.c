/* store.c — kubesim's storage: immutable object versions, one hash table per kind, the kind
 * registry with the built-in kinds, the global resourceVersion and the watch event ring.
 *
 * Design: a commit (under the exclusive lock) bumps the one global counter, stamps the version,
 * swaps it into the table and appends {rv,type,new,old} to a fixed ring of KS_RING_CAP events;
 * evicting the oldest event records its rv so a watch from an older rv gets 410 (rule F5).
 * Object versions are shared between table and ring by reference count, never copied. */
#include "tests/kubesim/kubesim.h"
#include "common/clock.h"
#include "common/quantity.h"
#include "tests/kubesim/selectors.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- buffers -------------------------------------------------------------------------------- */
#define KS_BUF_MAX ((size_t)512 * 1024 * 1024)
void ks_buf_add(ks_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1)
            nc *= 2;
        char *p = nc > KS_BUF_MAX ? NULL : realloc(b->p, nc);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
void ks_buf_puts(ks_buf *b, const char *s)
{
    ks_buf_add(b, s, strlen(s));
}
void ks_buf_printf(ks_buf *b, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(tmp)) {
        ks_buf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    ks_buf_add(b, big, (size_t)n);
    free(big);
}
char *ks_buf_take(ks_buf *b, size_t *len)
{
    if (b->oom) {
        ks_buf_free(b);
        return NULL;
    }
    if (!b->p)
        ks_buf_add(b, "", 0);
    char *p = b->p;
    if (len)
        *len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}
void ks_buf_free(ks_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* ---- objects -------------------------------------------------------------------------------- */
ks_obj *ks_obj_new(cJSON *j, uint64_t rv)
{
    ks_obj *o = calloc(1, sizeof(*o));
    if (!o) {
        cJSON_Delete(j);
        return NULL;
    }
    o->j = j;
    o->json = cJSON_PrintUnformatted(j);
    if (!o->json) {
        cJSON_Delete(j);
        free(o);
        return NULL;
    }
    o->len = strlen(o->json);
    o->rv = rv;
    atomic_init(&o->ref, 1);
    return o;
}
ks_obj *ks_obj_ref(ks_obj *o)
{
    if (o)
        atomic_fetch_add(&o->ref, 1);
    return o;
}
void ks_obj_unref(ks_obj *o)
{
    if (!o || atomic_fetch_sub(&o->ref, 1) != 1)
        return;
    cJSON_Delete(o->j);
    free(o->json);
    free(o);
}

/* ---- tables --------------------------------------------------------------------------------- */
static uint64_t hash_key(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static ks_table *table_new(void)
{
    ks_table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->nb = 64;
    t->b = calloc(t->nb, sizeof(*t->b));
    if (!t->b) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    atomic_init(&t->seq, 0);
    return t;
}

static void table_clear(ks_table *t)
{
    for (size_t i = 0; i < t->nb; i++) {
        ks_entry *e = t->b[i];
        while (e) {
            ks_entry *n = e->next;
            ks_obj_unref(e->obj);
            free(e->key);
            free(e);
            e = n;
        }
        t->b[i] = NULL;
    }
    t->count = 0;
}

static void table_free(ks_table *t)
{
    if (!t)
        return;
    table_clear(t);
    free(t->b);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static void make_key(char *buf, size_t cap, const char *ns, const char *name)
{
    snprintf(buf, cap, "%s/%s", ns ? ns : "", name);
}

static ks_entry **table_slot(ks_table *t, const char *key)
{
    ks_entry **pp = &t->b[hash_key(key) & (t->nb - 1)];
    while (*pp && strcmp((*pp)->key, key))
        pp = &(*pp)->next;
    return pp;
}

static void table_grow(ks_table *t)
{
    size_t nb = t->nb * 2;
    ks_entry **b = calloc(nb, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < t->nb; i++) {
        ks_entry *e = t->b[i];
        while (e) {
            ks_entry *n = e->next;
            size_t h = hash_key(e->key) & (nb - 1);
            e->next = b[h];
            b[h] = e;
            e = n;
        }
    }
    free(t->b);
    t->b = b;
    t->nb = nb;
}

ks_obj *ks_table_get(ks_table *t, const char *ns, const char *name)
{
    char key[512];
    make_key(key, sizeof(key), ns, name);
    ks_entry *e = *table_slot(t, key);
    return e ? e->obj : NULL;
}

typedef struct {
    const char *key;
    ks_obj *obj;
} kv_pair;
static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const kv_pair *)a)->key, ((const kv_pair *)b)->key);
}

ks_obj **ks_table_list(ks_table *t, const char *ns, size_t *n)
{
    *n = 0;
    kv_pair *v = malloc((t->count + 1) * sizeof(*v));
    if (!v)
        return NULL;
    size_t k = 0, nslen = ns ? strlen(ns) : 0;
    for (size_t i = 0; i < t->nb; i++)
        for (ks_entry *e = t->b[i]; e; e = e->next) {
            if (ns && *ns && (strncmp(e->key, ns, nslen) || e->key[nslen] != '/'))
                continue;
            v[k].key = e->key;
            v[k].obj = e->obj;
            k++;
        }
    qsort(v, k, sizeof(*v), kv_cmp);
    ks_obj **out = malloc((k + 1) * sizeof(*out));
    if (!out) {
        free(v);
        return NULL;
    }
    for (size_t i = 0; i < k; i++)
        out[i] = ks_obj_ref(v[i].obj);
    free(v);
    *n = k;
    return out;
}

void ks_objs_free(ks_obj **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        ks_obj_unref(v[i]);
    free(v);
}

static bool sel_match(const ks_waiter *w, const cJSON *o)
{
    if (!o)
        return false;
    const cJSON *labels =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "labels");
    return ks_lsel_match(w->ls, labels) && ks_fsel_match(w->fs, o);
}

void ks_wake(ks_table *t, const char *ns, const cJSON *newj, const cJSON *oldj)
{
    atomic_fetch_add(&t->seq, 1);
    pthread_mutex_lock(&t->mu);
    for (ks_waiter *w = t->waiters; w; w = w->next) {
        if (w->signaled)
            continue;
        if (ns && ns[0] && w->ns[0] && strcmp(w->ns, ns))
            continue;
        if (newj && (w->ls || w->fs) && !sel_match(w, newj) && !sel_match(w, oldj))
            continue;
        w->signaled = 1;
        pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&t->mu);
}

void ks_waiter_add(ks_table *t, ks_waiter *w, const char *ns)
{
    rm_mono_cond_init(&w->cond);
    snprintf(w->ns, sizeof(w->ns), "%s", ns ? ns : "");
    w->signaled = 0;
    /* w->ls / w->fs are set by the caller before adding */
    pthread_mutex_lock(&t->mu);
    w->prev = NULL;
    w->next = t->waiters;
    if (t->waiters)
        t->waiters->prev = w;
    t->waiters = w;
    pthread_mutex_unlock(&t->mu);
}

void ks_waiter_del(ks_table *t, ks_waiter *w)
{
    pthread_mutex_lock(&t->mu);
    if (w->prev)
        w->prev->next = w->next;
    else if (t->waiters == w)
        t->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    pthread_mutex_unlock(&t->mu);
    pthread_cond_destroy(&w->cond);
}

void ks_waiter_arm(ks_table *t, ks_waiter *w)
{
    pthread_mutex_lock(&t->mu);
    w->signaled = 0;
    pthread_mutex_unlock(&t->mu);
}

bool ks_waiter_quiet(ks_table *t, ks_waiter *w)
{
    pthread_mutex_lock(&t->mu);
    bool q = !w->signaled;
    pthread_mutex_unlock(&t->mu);
    return q;
}

bool ks_waiter_wait(ks_table *t, ks_waiter *w, int timeout_ms)
{
    pthread_mutex_lock(&t->mu);
    if (!w->signaled) {
        struct timespec ts = rm_mono_ts_in(timeout_ms / 1000.0);
        pthread_cond_timedwait(&w->cond, &t->mu, &ts);
    }
    bool sig = w->signaled;
    pthread_mutex_unlock(&t->mu);
    return sig;
}

/* ---- commit --------------------------------------------------------------------------------- */
static size_t ev_bytes(const ks_event *e)
{
    return (e->obj ? e->obj->len : 0) + (e->old ? e->old->len : 0);
}

static void ring_push(ks_server *s, const ks_event *ev)
{
    /* the window is the last KS_RING_CAP events, fewer when they hold more than the byte cap */
    while (s->ring_len == KS_RING_CAP ||
           (s->ring_len > 0 && s->ring_bytes + ev_bytes(ev) > KS_RING_MAX_BYTES)) {
        ks_event *old = &s->ring[s->ring_start];
        s->ring_dropped_rv = old->rv;
        s->ring_bytes -= ev_bytes(old);
        ks_obj_unref(old->obj);
        ks_obj_unref(old->old);
        s->ring_start = (s->ring_start + 1) % KS_RING_CAP;
        s->ring_len--;
    }
    s->ring_bytes += ev_bytes(ev);
    s->ring[(s->ring_start + s->ring_len) % KS_RING_CAP] = *ev;
    s->ring_len++;
}

static void stamp_rv(cJSON *obj, uint64_t rv)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    if (!cJSON_IsObject(md)) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "metadata");
        md = cJSON_AddObjectToObject(obj, "metadata");
    }
    char buf[32];
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)rv);
    cJSON *v = cJSON_CreateString(buf);
    if (cJSON_GetObjectItemCaseSensitive(md, "resourceVersion"))
        cJSON_ReplaceItemInObjectCaseSensitive(md, "resourceVersion", v);
    else
        cJSON_AddItemToObject(md, "resourceVersion", v);
}

int ks_commit(ks_server *s, ks_kind *k, const char *ns, const char *name, cJSON *obj, int evtype,
              ks_obj **out)
{
    ks_table *t = k->tab;
    char key[512];
    make_key(key, sizeof(key), k->namespaced ? ns : "", name);
    ks_entry **slot = table_slot(t, key);
    ks_entry *e = *slot;
    uint64_t rv = s->rv + 1;
    ks_event ev = {.rv = rv, .type = evtype, .tab = t};
    if (evtype == KS_EV_DELETED) {
        cJSON_Delete(obj);
        if (!e)
            return RM_ENOTFOUND;
        cJSON *last = cJSON_Duplicate(e->obj->j, 1);
        if (!last)
            return RM_ENOMEM;
        stamp_rv(last, rv);
        ks_obj *lo = ks_obj_new(last, rv);
        if (!lo)
            return RM_ENOMEM;
        ev.obj = lo;
        ev.old = e->obj; /* the table's ref moves to the event */
        *slot = e->next;
        free(e->key);
        free(e);
        t->count--;
        if (out)
            *out = lo;
    } else {
        stamp_rv(obj, rv);
        ks_obj *o = ks_obj_new(obj, rv);
        if (!o)
            return RM_ENOMEM;
        if (e) {
            ev.old = e->obj;
            e->obj = o;
        } else {
            e = calloc(1, sizeof(*e));
            if (e)
                e->key = strdup(key);
            if (!e || !e->key) {
                if (e)
                    free(e);
                ks_obj_unref(o);
                return RM_ENOMEM;
            }
            e->obj = o;
            e->next = NULL;
            *slot = e;
            t->count++;
            if (t->count > t->nb * 2)
                table_grow(t);
        }
        ev.obj = ks_obj_ref(o);
        if (out)
            *out = o;
    }
    ks_gc_observe(s, k, ns, name, ev.old ? ev.old->j : NULL, evtype == KS_EV_DELETED ? NULL : ev.obj->j);
    s->rv = rv;
    t->last_rv = rv;
    ring_push(s, &ev);
    ks_wake(t, k->namespaced ? ns : "", ev.obj ? ev.obj->j : NULL, ev.old ? ev.old->j : NULL);
    return RM_OK;
}

/* ---- kinds ---------------------------------------------------------------------------------- */
const char *ks_kind_apiversion(const ks_kind *k, char *buf, size_t cap)
{
    if (!k->group[0])
        snprintf(buf, cap, "%s", k->version);
    else
        snprintf(buf, cap, "%s/%s", k->group, k->version);
    return buf;
}

ks_kind *ks_kind_find(ks_server *s, const char *group, const char *version, const char *resource)
{
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        if (k->served && !strcmp(k->group, group) && !strcmp(k->version, version) &&
            !strcmp(k->resource, resource))
            return k;
    }
    return NULL;
}

ks_kind *ks_kind_by_kind(ks_server *s, const char *group, const char *kind)
{
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        if (k->served && !strcmp(k->group, group) && !strcmp(k->kind, kind))
            return k;
    }
    return NULL;
}

ks_kind *ks_kind_add(ks_server *s, const ks_kind *proto)
{
    /* reuse a slot with the same group/version/resource (CRD re-created) */
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        if (!strcmp(k->group, proto->group) && !strcmp(k->version, proto->version) &&
            !strcmp(k->resource, proto->resource)) {
            ks_table *tab = k->tab;
            /* readers may still hold the old schema/columns without the lock: retire, never free */
            if (!s->graveyard)
                s->graveyard = cJSON_CreateArray();
            if (k->schema)
                cJSON_AddItemToArray(s->graveyard, k->schema);
            if (k->columns)
                cJSON_AddItemToArray(s->graveyard, k->columns);
            *k = *proto;
            k->tab = proto->tab ? proto->tab : tab;
            return k;
        }
    }
    /* the array never moves (lock-free readers such as ks_core_kind walk it) */
    if (s->nkinds == s->capkinds)
        return NULL;
    ks_kind *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    *k = *proto;
    if (!k->tab) {
        k->tab = table_new();
        if (!k->tab) {
            free(k);
            return NULL;
        }
    }
    s->kinds[s->nkinds] = k;
    atomic_thread_fence(memory_order_release);
    s->nkinds++;
    return k;
}

ks_kind *ks_core_kind(ks_server *s, int type)
{
    /* filled once at init and never changed: no lock needed */
    return type >= 0 && type < (int)RM_ARRAY_LEN(s->core) ? s->core[type] : NULL;
}

static void add_builtin(ks_server *s, const char *group, const char *version, const char *res,
                        const char *singular, const char *kind, bool ns, int type, const char *shortn,
                        bool status, bool cat_all, ks_table *shared)
{
    ks_kind k;
    memset(&k, 0, sizeof(k));
    snprintf(k.group, sizeof(k.group), "%s", group);
    snprintf(k.version, sizeof(k.version), "%s", version);
    snprintf(k.resource, sizeof(k.resource), "%s", res);
    snprintf(k.singular, sizeof(k.singular), "%s", singular);
    snprintf(k.kind, sizeof(k.kind), "%s", kind);
    snprintf(k.list_kind, sizeof(k.list_kind), "%sList", kind);
    if (shortn) {
        snprintf(k.short_names[0], sizeof(k.short_names[0]), "%s", shortn);
        k.nshort = 1;
    }
    if (cat_all) {
        snprintf(k.categories[0], sizeof(k.categories[0]), "all");
        k.ncat = 1;
    }
    k.namespaced = ns;
    k.served = true;
    k.has_status = status;
    k.type = type;
    k.tab = shared;
    ks_kind *nk = ks_kind_add(s, &k);
    if (nk && type >= 0 && type < (int)RM_ARRAY_LEN(s->core) && !s->core[type])
        s->core[type] = nk;
}

const char *ks_sget(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

void ks_now_rfc3339(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void ks_new_uid(ks_server *s, char out[40])
{
    unsigned long long n = atomic_fetch_add(&s->uid_seq, 1) + 1;
    unsigned r1 = (unsigned)rand_r(&s->name_seed), r2 = (unsigned)rand_r(&s->name_seed);
    snprintf(out, 40, "%08x-%04x-4%03x-8%03x-%012llx", r1, (r2 >> 8) & 0xffff, r2 & 0xfff,
             (unsigned)(n >> 48) & 0xfff, n & 0xffffffffffffull);
}

void ks_gen_name(ks_server *s, const char *prefix, char *out, size_t cap)
{
    static const char alpha[] = "bcdfghjklmnpqrstvwxz2456789";
    char p[64];
    snprintf(p, sizeof(p), "%.58s", prefix);
    char suf[6];
    for (int i = 0; i < 5; i++)
        suf[i] = alpha[(unsigned)rand_r(&s->name_seed) % (sizeof(alpha) - 1)];
    suf[5] = 0;
    snprintf(out, cap, "%s%s", p, suf);
}

static void seed_object(ks_server *s, int type, const char *json)
{
    ks_kind *k = ks_core_kind(s, type);
    cJSON *o = cJSON_Parse(json);
    if (!k || !o) {
        cJSON_Delete(o);
        return;
    }
    cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    char uid[40], ts[32];
    ks_new_uid(s, uid);
    ks_now_rfc3339(ts);
    cJSON_AddStringToObject(md, "uid", uid);
    cJSON_AddStringToObject(md, "creationTimestamp", ts);
    const char *name = cJSON_GetObjectItemCaseSensitive(md, "name")->valuestring;
    char namebuf[128];
    snprintf(namebuf, sizeof(namebuf), "%s", name);
    ks_commit(s, k, "", namebuf, o, KS_EV_ADDED, NULL);
}

/* A --node: Ready, with capacity = allocatable = the given resources; InternalIP its namespace's
 * address under --nodes, else 127.0.0.1. */
static void seed_node(ks_server *s, const ks_node_spec *n)
{
    char cpu[48], mem[48], gpu[48], pods[48], buf[2048];
    rm_quantity_format(n->cpu, cpu, sizeof cpu);
    rm_quantity_format(n->memory, mem, sizeof mem);
    rm_quantity_format(n->gpu, gpu, sizeof gpu);
    rm_quantity_format(n->pods, pods, sizeof pods);
    char res[300];
    snprintf(res, sizeof res, "{\"cpu\":\"%s\",\"memory\":\"%s\",\"nvidia.com/gpu\":\"%s\",\"pods\":\"%s\"}",
             cpu, mem, gpu, pods);
    snprintf(buf, sizeof buf,
             "{\"kind\":\"Node\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\","
             "\"labels\":{\"kubernetes.io/hostname\":\"%s\",\"kubernetes.io/os\":\"linux\"}},"
             "\"spec\":{},\"status\":{\"capacity\":%s,\"allocatable\":%s,\"conditions\":[{\"type\":\"Ready\","
             "\"status\":\"True\","
             "\"reason\":\"KubeletReady\",\"message\":\"kubesim process kubelet is posting ready status\"}],"
             "\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"%s\"},"
             "{\"type\":\"Hostname\",\"address\":\"%s\"}],"
             "\"nodeInfo\":{\"kubeletVersion\":\"v1.32.0\",\"operatingSystem\":\"linux\","
             "\"architecture\":\"amd64\",\"containerRuntimeVersion\":\"kubesim://1\"}}}",
             n->name, n->name, res, res, n->addr[0] ? n->addr : "127.0.0.1", n->name);
    seed_object(s, KS_T_NODE, buf);
}

static void seed(ks_server *s)
{
    static const char *nss[] = {"default", "kube-system", "kube-public", "kube-node-lease"};
    char buf[512];
    for (size_t i = 0; i < RM_ARRAY_LEN(nss); i++) {
        snprintf(buf, sizeof(buf),
                 "{\"kind\":\"Namespace\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"%s\","
                 "\"labels\":{\"kubernetes.io/metadata.name\":\"%s\"}},\"spec\":{\"finalizers\":"
                 "[\"kubernetes\"]},\"status\":{\"phase\":\"Active\"}}",
                 nss[i], nss[i]);
        seed_object(s, KS_T_NAMESPACE, buf);
    }
    if (s->opts.nnodes) {
        for (int i = 0; i < s->opts.nnodes; i++)
            seed_node(s, &s->opts.nodes[i]);
        return;
    }
    seed_object(
        s, KS_T_NODE,
        "{\"kind\":\"Node\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"" KS_NODE_NAME "\","
        "\"labels\":{\"kubernetes.io/hostname\":\"" KS_NODE_NAME "\",\"kubernetes.io/os\":\"linux\"}},"
        "\"spec\":{},\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","
        "\"reason\":\"KubeletReady\",\"message\":\"kubesim process kubelet is posting ready status\"}],"
        "\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"127.0.0.1\"},"
        "{\"type\":\"Hostname\",\"address\":\"" KS_NODE_NAME "\"}],"
        "\"nodeInfo\":{\"kubeletVersion\":\"v1.32.0\",\"operatingSystem\":\"linux\","
        "\"architecture\":\"amd64\",\"containerRuntimeVersion\":\"kubesim://1\"}}}");
}

static void register_builtins(ks_server *s)
{
    add_builtin(s, "", "v1", "pods", "pod", "Pod", true, KS_T_POD, "po", true, true, NULL);
    add_builtin(s, "", "v1", "services", "service", "Service", true, KS_T_SERVICE, "svc", true, true, NULL);
    add_builtin(s, "", "v1", "secrets", "secret", "Secret", true, KS_T_SECRET, NULL, false, false, NULL);
    add_builtin(s, "", "v1", "configmaps", "configmap", "ConfigMap", true, KS_T_CONFIGMAP, "cm", false, false,
                NULL);
    add_builtin(s, "", "v1", "events", "event", "Event", true, KS_T_EVENT, "ev", false, false, NULL);
    add_builtin(s, "", "v1", "namespaces", "namespace", "Namespace", false, KS_T_NAMESPACE, "ns", true, false,
                NULL);
    add_builtin(s, "", "v1", "nodes", "node", "Node", false, KS_T_NODE, "no", true, false, NULL);
    ks_kind *ev = ks_core_kind(s, KS_T_EVENT);
    add_builtin(s, "events.k8s.io", "v1", "events", "event", "Event", true, KS_T_EVENT_NEW, "ev", false,
                false, ev ? ev->tab : NULL);
    add_builtin(s, "coordination.k8s.io", "v1", "leases", "lease", "Lease", true, KS_T_LEASE, NULL, false,
                false, NULL);
    add_builtin(s, "apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
                "CustomResourceDefinition", false, KS_T_CRD, "crd", true, false, NULL);
    /* stored as given (no controllers run): what `kubectl apply -f deploy/` installs */
    add_builtin(s, "", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, KS_T_GENERIC, "sa",
                false, false, NULL);
    add_builtin(s, "rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true, KS_T_GENERIC, NULL,
                false, false, NULL);
    add_builtin(s, "rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", true,
                KS_T_GENERIC, NULL, false, false, NULL);
    add_builtin(s, "rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", false,
                KS_T_GENERIC, NULL, false, false, NULL);
    add_builtin(s, "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding",
                "ClusterRoleBinding", false, KS_T_GENERIC, NULL, false, false, NULL);
    add_builtin(s, "apps", "v1", "deployments", "deployment", "Deployment", true, KS_T_DEPLOYMENT, "deploy",
                true, true, NULL);
    ks_kind *dep = ks_core_kind(s, KS_T_DEPLOYMENT);
    if (dep) {
        dep->has_scale = true;
        snprintf(dep->scale_spec, sizeof(dep->scale_spec), ".spec.replicas");
        snprintf(dep->scale_status, sizeof(dep->scale_status), ".status.replicas");
    }
    ks_kind *crd = ks_core_kind(s, KS_T_CRD);
    if (crd) {
        snprintf(crd->short_names[1], sizeof(crd->short_names[1]), "crds");
        crd->nshort = 2;
    }
}

int ks_server_init(ks_server *s, const ks_opts *o)
{
    memset(s, 0, sizeof(*s));
    if (o)
        s->opts = *o;
    /* writers first: a thousand watch streams taking read locks must not starve commits */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&s->faults.mu, NULL);
    pthread_mutex_init(&s->reqmu, NULL);
    pthread_mutex_init(&s->ctlmu, NULL);
    pthread_cond_init(&s->ctlcond, NULL);
    s->capkinds = 1024;
    s->kinds = calloc(s->capkinds, sizeof(*s->kinds));
    s->ring = calloc(KS_RING_CAP, sizeof(*s->ring));
    s->reqlog_cap = 10000;
    s->reqlog = calloc(s->reqlog_cap, sizeof(*s->reqlog));
    if (!s->ring || !s->reqlog || !s->kinds || ks_gc_init(s))
        return RM_ENOMEM;
    s->name_seed = (uint32_t)time(NULL) ^ (uint32_t)getpid();
    register_builtins(s);
    seed(s);
    return RM_OK;
}

static void ring_clear(ks_server *s)
{
    for (size_t i = 0; i < s->ring_len; i++) {
        ks_event *e = &s->ring[(s->ring_start + i) % KS_RING_CAP];
        ks_obj_unref(e->obj);
        ks_obj_unref(e->old);
    }
    s->ring_len = s->ring_start = 0;
    s->ring_bytes = 0;
}

void ks_store_reset(ks_server *s)
{
    pthread_rwlock_wrlock(&s->lock);
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_kind *k = s->kinds[i];
        table_clear(k->tab);
        if (k->type == KS_T_CR)
            k->served = false;
        ks_wake(k->tab, NULL, NULL, NULL);
    }
    ring_clear(s);
    ks_gc_reset(s);
    s->ring_dropped_rv = s->rv; /* every older rv is now unknown */
    seed(s);
    pthread_rwlock_unlock(&s->lock);
}

void ks_server_fini(ks_server *s)
{
    ring_clear(s);
    ks_gc_fini(s);
    /* tables first (the two Event kinds share one), then the kinds */
    for (size_t i = 0; i < s->nkinds; i++) {
        ks_table *t = s->kinds[i]->tab;
        if (!t)
            continue;
        for (size_t j = i + 1; j < s->nkinds; j++)
            if (s->kinds[j]->tab == t)
                s->kinds[j]->tab = NULL;
        table_free(t);
        s->kinds[i]->tab = NULL;
    }
    for (size_t i = 0; i < s->nkinds; i++) {
        cJSON_Delete(s->kinds[i]->schema);
        cJSON_Delete(s->kinds[i]->columns);
        free(s->kinds[i]);
    }
    free(s->kinds);
    cJSON_Delete(s->graveyard);
    free(s->ring);
    free(s->reqlog);
    pthread_rwlock_destroy(&s->lock);
}
