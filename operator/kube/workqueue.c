/* workqueue.c — rate-limited, de-duplicating work queue (see workqueue.h).
 *
 * Design: client-go's three sets — `queue` (FIFO of keys ready to hand out), `dirty` (keys that
 * need processing; a key is in queue only if dirty and not processing) and `processing`. Delayed
 * keys sit in a binary min-heap with lazy deletion: `waiting` maps key → the earliest due time,
 * heap entries whose time no longer matches are dropped when they surface. One mutex and one
 * condition variable (CLOCK_MONOTONIC) guard everything.
 *
 * Two lanes: `queue` and `low` (background adds, the periodic resync). A key's dirty entry says
 * which lane it waits in; an ordinary add of a key waiting in the low lane moves it to the front
 * lane (its low entry is left behind and skipped when it surfaces: a low entry counts only while its
 * key is dirty, marked low and not processing). So a change never waits behind a resync of every
 * job (docs/operator-scale.md). With opts.low_workers, a low key is handed out only while fewer
 * than that many low keys are processed (`low_active`; their processing entry says LOW_TAKEN), so
 * a resync cannot occupy every worker and every core while a change is reconciled. */
#include "operator/kube/workqueue.h"
#include "common/clock.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "operator/kube/client.h"
#include "common/kmap.h"

#define LOW_TAKEN ((void *)2)

typedef struct heap_ent {
    double when;
    char *key;
} heap_ent;
typedef struct dirty_ent {
    double added_at;
    bool low; /* waits in the low lane */
} dirty_ent;

typedef struct fifo {
    char **k; /* ring buffer */
    size_t head, count, cap;
} fifo;

struct rm_wq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rm_wq_opts o;
    rm_kube_bucket bucket;
    fifo hi, lo;        /* the lanes: hi first */
    rm_kmap dirty;      /* key → dirty_ent* */
    rm_kmap processing; /* key → (void*)1, or LOW_TAKEN when handed out from the low lane */
    int low_active;     /* keys handed out from the low lane and not done yet */
    rm_kmap failures;   /* key → (void*)(intptr_t)n */
    rm_kmap waiting;    /* key → double* due */
    heap_ent *heap;
    size_t nheap, capheap;
    bool shutdown;
};

static double mono_now(void *ud)
{
    (void)ud;
    return rm_mono();
}

static double now_of(rm_wq *q)
{
    return q->o.now(q->o.now_ud);
}

rm_wq *rm_wq_new(const rm_wq_opts *opts)
{
    rm_wq *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    if (opts)
        q->o = *opts;
    if (q->o.base_delay_s <= 0)
        q->o.base_delay_s = 0.005;
    if (q->o.max_delay_s <= 0)
        q->o.max_delay_s = 1000;
    if (q->o.qps == 0)
        q->o.qps = 10;
    if (q->o.burst <= 0)
        q->o.burst = 100;
    if (!q->o.now)
        q->o.now = mono_now;
    pthread_mutex_init(&q->mu, NULL);
    rm_mono_cond_init(&q->cv);
    rm_kube_bucket_init(&q->bucket, q->o.qps < 0 ? 0 : q->o.qps, q->o.burst, now_of(q));
    return q;
}

void rm_wq_free(rm_wq *q)
{
    if (!q)
        return;
    for (fifo *f = &q->hi; f; f = f == &q->hi ? &q->lo : NULL) {
        for (size_t i = 0; i < f->count; i++)
            free(f->k[(f->head + i) % f->cap]);
        free(f->k);
    }
    for (size_t i = 0; i < q->nheap; i++)
        free(q->heap[i].key);
    free(q->heap);
    rm_kmap_clear(&q->dirty, free);
    rm_kmap_clear(&q->processing, NULL);
    rm_kmap_clear(&q->failures, NULL);
    rm_kmap_clear(&q->waiting, free);
    rm_kube_bucket_destroy(&q->bucket);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}

static void report_depth(rm_wq *q)
{
    if (q->o.hooks.depth)
        q->o.hooks.depth(q->o.hooks.ud, q->hi.count + q->lo.count);
}

static int fifo_push(fifo *f, const char *key)
{
    if (f->count == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 64;
        char **nf = malloc(nc * sizeof(*nf));
        if (!nf)
            return RM_ENOMEM;
        for (size_t i = 0; i < f->count; i++)
            nf[i] = f->k[(f->head + i) % f->cap];
        free(f->k);
        f->k = nf;
        f->cap = nc;
        f->head = 0;
    }
    char *k = strdup(key);
    if (!k)
        return RM_ENOMEM;
    f->k[(f->head + f->count) % f->cap] = k;
    f->count++;
    return RM_OK;
}

static char *fifo_pop(fifo *f)
{
    if (!f->count)
        return NULL;
    char *k = f->k[f->head];
    f->head = (f->head + 1) % f->cap;
    f->count--;
    return k;
}

/* Under lock. */
static int add_locked(rm_wq *q, const char *key, bool low)
{
    if (q->shutdown)
        return RM_ECLOSED;
    if (q->o.hooks.added)
        q->o.hooks.added(q->o.hooks.ud);
    dirty_ent *d = rm_kmap_get(&q->dirty, key);
    bool processing = rm_kmap_find(&q->processing, key) != NULL;
    if (d) {
        if (low || !d->low)
            return RM_OK;
        /* waiting in the low lane: to the front lane (the low entry is skipped when it surfaces) */
        if (!processing && fifo_push(&q->hi, key) != RM_OK)
            return RM_ENOMEM; /* it stays in the low lane */
        d->low = false;
        report_depth(q);
        pthread_cond_signal(&q->cv);
        return RM_OK;
    }
    if (!(d = malloc(sizeof(*d))))
        return RM_ENOMEM;
    d->added_at = now_of(q);
    d->low = low;
    if (rm_kmap_put(&q->dirty, key, d, NULL)) {
        free(d);
        return RM_ENOMEM;
    }
    if (processing)
        return RM_OK; /* re-queued by rm_wq_done */
    int rc = fifo_push(low ? &q->lo : &q->hi, key);
    if (rc) {
        free(rm_kmap_del(&q->dirty, key));
        return rc;
    }
    report_depth(q);
    pthread_cond_signal(&q->cv);
    return RM_OK;
}

int rm_wq_add(rm_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int rc = add_locked(q, key, false);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int rm_wq_add_low(rm_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int rc = add_locked(q, key, true);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static void heap_swap(heap_ent *a, heap_ent *b)
{
    heap_ent t = *a;
    *a = *b;
    *b = t;
}

static int heap_push(rm_wq *q, double when, const char *key)
{
    if (q->nheap == q->capheap) {
        size_t nc = q->capheap ? q->capheap * 2 : 64;
        heap_ent *nh = realloc(q->heap, nc * sizeof(*nh));
        if (!nh)
            return RM_ENOMEM;
        q->heap = nh;
        q->capheap = nc;
    }
    char *k = strdup(key);
    if (!k)
        return RM_ENOMEM;
    size_t i = q->nheap++;
    q->heap[i] = (heap_ent){when, k};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (q->heap[p].when <= q->heap[i].when)
            break;
        heap_swap(&q->heap[p], &q->heap[i]);
        i = p;
    }
    return RM_OK;
}

static heap_ent heap_pop(rm_wq *q)
{
    heap_ent top = q->heap[0];
    q->heap[0] = q->heap[--q->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->nheap && q->heap[l].when < q->heap[m].when)
            m = l;
        if (r < q->nheap && q->heap[r].when < q->heap[m].when)
            m = r;
        if (m == i)
            break;
        heap_swap(&q->heap[m], &q->heap[i]);
        i = m;
    }
    return top;
}

static int add_after_locked(rm_wq *q, const char *key, double delay)
{
    if (q->shutdown)
        return RM_ECLOSED;
    if (delay <= 0)
        return add_locked(q, key, false);
    double when = now_of(q) + delay;
    double *due = rm_kmap_get(&q->waiting, key);
    if (due && *due <= when)
        return RM_OK; /* an earlier add already covers this one */
    if (!due) {
        due = malloc(sizeof(*due));
        if (!due)
            return RM_ENOMEM;
        if (rm_kmap_put(&q->waiting, key, due, NULL)) {
            free(due);
            return RM_ENOMEM;
        }
    }
    *due = when;
    int rc = heap_push(q, when, key);
    if (rc) {
        free(rm_kmap_del(&q->waiting, key));
        return rc;
    }
    pthread_cond_signal(&q->cv);
    return RM_OK;
}

int rm_wq_add_after(rm_wq *q, const char *key, double delay_s)
{
    pthread_mutex_lock(&q->mu);
    int rc = add_after_locked(q, key, delay_s);
    pthread_mutex_unlock(&q->mu);
    return rc;
}

static double when_locked(rm_wq *q, const char *key)
{
    intptr_t n = (intptr_t)rm_kmap_get(&q->failures, key);
    rm_kmap_put(&q->failures, key, (void *)(n + 1), NULL);
    double d = q->o.base_delay_s * pow(2.0, (double)(n > 60 ? 60 : n));
    if (d > q->o.max_delay_s)
        d = q->o.max_delay_s;
    double b = rm_kube_bucket_reserve(&q->bucket, now_of(q));
    return b > d ? b : d;
}

double rm_wq_when(rm_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    double d = when_locked(q, key);
    pthread_mutex_unlock(&q->mu);
    return d;
}

int rm_wq_add_rate_limited(rm_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int rc = add_after_locked(q, key, when_locked(q, key));
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void rm_wq_forget(rm_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    rm_kmap_del(&q->failures, key);
    pthread_mutex_unlock(&q->mu);
}

int rm_wq_num_requeues(rm_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int n = (int)(intptr_t)rm_kmap_get(&q->failures, key);
    pthread_mutex_unlock(&q->mu);
    return n;
}

/* Move due delayed keys into the queue; returns seconds until the next one (or -1 if none). */
static double promote_locked(rm_wq *q)
{
    double now = now_of(q);
    while (q->nheap) {
        if (q->heap[0].when > now)
            return q->heap[0].when - now;
        heap_ent e = heap_pop(q);
        double *due = rm_kmap_get(&q->waiting, e.key);
        if (due && *due == e.when) {
            free(rm_kmap_del(&q->waiting, e.key));
            add_locked(q, e.key, false);
        }
        free(e.key);
    }
    return -1;
}

int rm_wq_get(rm_wq *q, double timeout_s, char **key)
{
    *key = NULL;
    double deadline = timeout_s >= 0 ? rm_mono() + timeout_s : -1;
    pthread_mutex_lock(&q->mu);
    int rc;
    for (;;) {
        double next = promote_locked(q);
        char *k = fifo_pop(&q->hi);
        bool low = false;
        while (!k && q->lo.count && (q->o.low_workers <= 0 || q->low_active < q->o.low_workers)) {
            k = fifo_pop(&q->lo);
            const dirty_ent *d = rm_kmap_get(&q->dirty, k);
            if (!d || !d->low || rm_kmap_find(&q->processing, k)) { /* left behind */
                free(k);
                k = NULL;
            }
            low = k != NULL;
        }
        if (k) {
            dirty_ent *d = rm_kmap_del(&q->dirty, k);
            if (d && q->o.hooks.latency)
                q->o.hooks.latency(q->o.hooks.ud, now_of(q) - d->added_at);
            free(d);
            rm_kmap_put(&q->processing, k, low ? LOW_TAKEN : (void *)1, NULL);
            q->low_active += low;
            report_depth(q);
            *key = k;
            rc = RM_OK;
            break;
        }
        if (q->shutdown) {
            rc = RM_ECLOSED;
            break;
        }
        double wait = -1;
        if (deadline >= 0) {
            wait = deadline - rm_mono();
            if (wait <= 0) {
                rc = RM_ETIMEDOUT;
                break;
            }
        }
        if (next >= 0 && (wait < 0 || next < wait))
            wait = next;
        if (wait < 0) {
            pthread_cond_wait(&q->cv, &q->mu);
        } else {
            struct timespec ts = rm_mono_ts_in(wait);
            pthread_cond_timedwait(&q->cv, &q->mu, &ts);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void rm_wq_done(rm_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    if (rm_kmap_del(&q->processing, key) == LOW_TAKEN) {
        q->low_active--;
        if (q->lo.count)
            pthread_cond_signal(&q->cv); /* a worker may be waiting for the low lane's turn */
    }
    const dirty_ent *d = rm_kmap_get(&q->dirty, key);
    if (d && !q->shutdown) {
        if (fifo_push(d->low ? &q->lo : &q->hi, key) == RM_OK) {
            report_depth(q);
            pthread_cond_signal(&q->cv);
        } else {
            free(rm_kmap_del(&q->dirty, key));
        }
    }
    pthread_mutex_unlock(&q->mu);
}

size_t rm_wq_len(rm_wq *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->hi.count + q->lo.count;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t rm_wq_delayed(rm_wq *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->waiting.n;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void rm_wq_shutdown(rm_wq *q)
{
    pthread_mutex_lock(&q->mu);
    q->shutdown = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

bool rm_wq_shutting_down(rm_wq *q)
{
    pthread_mutex_lock(&q->mu);
    bool s = q->shutdown;
    pthread_mutex_unlock(&q->mu);
    return s;
}
