/* rdzv.c — the rendezvous service's state: per-job rounds, the kv area of an epoch, the
 * controller's API and the topology of a round (protocol in common/rdzv.h; the HTTP handlers and
 * the waiter thread in common/rdzv_http.c, reports and parameter servers in common/rdzv_report.c,
 * what they share in common/rdzv_internal.h; the client is in common/rdzv_client.c).
 *
 * Design: one mutex and one condition variable (monotonic clock) guard every job. The round logic
 * is a small state machine that takes `now` as an argument (rdzv_join_eval, round_maybe_close,
 * epoch_open); the HTTP glue only parses, authenticates, calls it under the lock and, for long
 * polls, waits on the condition variable with a bounded deadline and evaluates again on every
 * wake-up. Waiters never keep a pointer to a job or member across a wait: they look the job up by
 * name again, so jobs may be removed or reset while requests wait. Every state change broadcasts.
 * On an event-loop server (rm_rdzv_serve) a long poll does not wait in its handler: it parks its
 * request (rm_http_park) as a waiter record, and one waiter thread evaluates the parked polls
 * after every state change (and at their settle or deadline) and answers those that are done, so
 * thousands of held joins cost no thread each (docs/scale.md).
 *
 * Epochs start at 1, so a worker that never trained may send lastEpoch 0 or -1.
 *
 * Late joiners (a join for a closed round from a worker that is not, or is no longer, part of it):
 *   - member of the closed round, same addr, lastEpoch != epoch: a retry → the same assignment;
 *   - member of the closed round, lastEpoch == epoch: it saw the group break → open epoch+1;
 *   - member of the closed round with a different addr: a new process for that worker (a
 *     replacement), so the old group is broken → open epoch+1;
 *   - not a member and the closed round has fewer than `desired` workers: elastic grow-back →
 *     open epoch+1 (members learn it from their next report, which answers "rejoin");
 *   - not a member and the round already has `desired` workers: the group is complete, so the
 *     newcomer is held (202, long poll) and joins the next round when the epoch changes (the
 *     controller's restart, or a member noticing a failure). Liveness of the members is not
 *     judged here: a dead member breaks the round through the survivors or the controller.
 * A join for a round that is still open adds the worker (or updates its addr). A join held in a
 * long poll never enters the round of a later epoch: when the epoch moves it answers 202 and the
 * worker calls again, so a client that gave up (or died) while held cannot become a ghost member
 * of the next round.
 *
 * Job lifecycle: rm_rdzv_job_stop is sticky (a finished job stays finished; job_set updates its
 * sizes but does not revive it); rm_rdzv_job_remove forgets members, kv and results but keeps a
 * tombstone (at most 256) so late callers get "stop"; job_set on a removed job starts it afresh
 * at a higher epoch so stale workers cannot confuse the new run. */
#include "common/rdzv_internal.h"
#include "common/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

const char *const rm_rdzv_action_names[] = {"continue", "rejoin", "stop", NULL};

void rdzv_shared_body_release(void *p)
{
    shared_body *b = p;
    if (b && atomic_fetch_sub(&b->refs, 1) == 1)
        free(b);
}

/* ---------------- small helpers ---------------- */

/* Every state change a long poll may wait for: wake the held handlers and the waiter thread. */
void rdzv_wake_all(rm_rdzv *r)
{
    r->wdirty = true;
    pthread_cond_broadcast(&r->cv);
}

bool rm_rdzv_name_ok(const char *s, size_t len)
{
    if (!s || len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* The whole NUL-terminated s is a name of at most max chars. */
bool rdzv_str_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    return n <= max && rm_rdzv_name_ok(s, n);
}

/* "NS/NAME", at most JOB_NAME_MAX chars in all. */
bool rdzv_job_name_ok(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash || strlen(s) > JOB_NAME_MAX || strchr(slash + 1, '/'))
        return false;
    return rm_rdzv_name_ok(s, (size_t)(slash - s)) && rdzv_str_ok(slash + 1, JOB_NAME_MAX);
}

bool rdzv_addr_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof(((rm_rdzv_member *)0)->addr))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == ':' || c == '[' || c == ']' || c == '-' || c == '_'))
            return false;
    }
    return true;
}

bool rdzv_is_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* Order of workerIds: numeric ids by value first, then the rest by strcmp. */
static int wid_cmp(const char *a, const char *b)
{
    bool da = rdzv_is_digits(a), db = rdzv_is_digits(b);
    if (da && db) {
        while (*a == '0' && a[1])
            a++;
        while (*b == '0' && b[1])
            b++;
        size_t la = strlen(a), lb = strlen(b);
        if (la != lb)
            return la < lb ? -1 : 1;
        return strcmp(a, b);
    }
    if (da != db)
        return da ? -1 : 1;
    return strcmp(a, b);
}

/* A json.h getter failed for real (an absent optional field is RM_ENOTFOUND, not a failure). */
bool rdzv_bad(int rc)
{
    return rc < 0 && rc != RM_ENOTFOUND;
}

/* ---------------- the state machine (r->mu held) ---------------- */

job *rdzv_job_find(rm_rdzv *r, const char *name)
{
    return rm_kmap_get(&r->by_name, name); /* the operator asks for every job twice a second */
}

/* The job a controller call acts on: NULL for unknown names and for tombstones. */
static job *live_job(rm_rdzv *r, const char *name)
{
    job *j = rdzv_job_find(r, name);
    return j && !j->removed ? j : NULL;
}

static void kv_clear(job *j)
{
    kv_ent *e = j->kv;
    while (e) {
        kv_ent *n = e->next;
        free(e->val);
        free(e);
        e = n;
    }
    j->kv = NULL;
    j->nkv = 0;
}

kv_ent *rdzv_kv_find(job *j, const char *key)
{
    for (kv_ent *e = j->kv; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

/* ---------------- member records (docs/scale.md, "Memory per worker") ---------------- */

static unsigned name_hash(const char *s)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* A reference to name s in j's node table (a new entry when it is not there); NULL on ENOMEM. */
static node_name *node_ref(job *j, const char *s)
{
    unsigned h = name_hash(s);
    if (j->nnodes_cap) {
        for (node_name *n = j->nodes[h % j->nnodes_cap]; n; n = n->next)
            if (n->hash == h && strcmp(n->s, s) == 0) {
                n->refs++;
                return n;
            }
    }
    if (j->nnodes >= j->nnodes_cap) { /* grow (and rehash) at one name a bucket */
        unsigned nc = j->nnodes_cap ? j->nnodes_cap * 2 : 64;
        node_name **nb = calloc(nc, sizeof *nb);
        if (!nb)
            return NULL;
        for (unsigned b = 0; b < j->nnodes_cap; b++)
            for (node_name *n = j->nodes[b], *nx; n; n = nx) {
                nx = n->next;
                n->next = nb[n->hash % nc];
                nb[n->hash % nc] = n;
            }
        free(j->nodes);
        j->nodes = nb;
        j->nnodes_cap = nc;
    }
    size_t len = strlen(s);
    node_name *n = malloc(sizeof *n + len + 1);
    if (!n)
        return NULL;
    memcpy(n->s, s, len + 1);
    n->hash = h;
    n->refs = 1;
    n->next = j->nodes[h % j->nnodes_cap];
    j->nodes[h % j->nnodes_cap] = n;
    j->nnodes++;
    return n;
}

static void node_unref(job *j, node_name *n)
{
    if (!n || --n->refs > 0)
        return;
    for (node_name **pp = &j->nodes[n->hash % j->nnodes_cap]; *pp; pp = &(*pp)->next)
        if (*pp == n) {
            *pp = n->next;
            break;
        }
    free(n);
    j->nnodes--;
}

int rdzv_member_set_node(job *j, member *m, const char *s)
{
    if (strcmp(rdzv_member_node(m), s) == 0)
        return RM_OK;
    node_name *n = NULL;
    if (s[0] && !(n = node_ref(j, s)))
        return RM_ENOMEM;
    node_unref(j, m->node);
    m->node = n;
    return RM_OK;
}

int rdzv_member_set_ckerr(member *m, const char *s)
{
    if (s && m->checkpoint_error && strcmp(m->checkpoint_error, s) == 0)
        return RM_OK;
    free(m->checkpoint_error);
    m->checkpoint_error = NULL;
    if (!s || !s[0])
        return RM_OK;
    size_t n = strlen(s), max = sizeof(((rm_rdzv_member *)0)->checkpoint_error) - 1;
    if (n > max)
        n = max;
    if (!(m->checkpoint_error = malloc(n + 1)))
        return RM_ENOMEM;
    memcpy(m->checkpoint_error, s, n);
    m->checkpoint_error[n] = 0;
    return RM_OK;
}

void rdzv_member_view(const member *m, rm_rdzv_member *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->worker_id, m->worker_id, sizeof out->worker_id);
    memcpy(out->addr, m->addr, sizeof out->addr);
    out->rank = m->rank;
    out->epoch = m->epoch;
    out->last_report = m->last_report;
    out->last_progress = m->last_progress;
    out->step = m->step;
    out->last_checkpoint_step = m->last_checkpoint_step;
    out->train_epoch = m->train_epoch;
    out->loss = m->loss;
    out->samples_per_second = m->samples_per_second;
    out->allreduce_gbps = m->allreduce_gbps;
    out->tokens_per_second = m->tokens_per_second;
    out->done = m->done;
    out->checkpoint_failures = m->checkpoint_failures;
    snprintf(out->checkpoint_error, sizeof out->checkpoint_error, "%s",
             m->checkpoint_error ? m->checkpoint_error : "");
    snprintf(out->node, sizeof out->node, "%s", rdzv_member_node(m));
}

static void job_clear(job *j)
{
    kv_clear(j);
    for (int i = 0; i < j->nmem; i++) {
        free(j->mem[i]->checkpoint_error);
        free(j->mem[i]);
    }
    for (unsigned b = 0; b < j->nnodes_cap; b++)
        for (node_name *n = j->nodes[b], *nx; n; n = nx) {
            nx = n->next;
            free(n);
        }
    free(j->nodes);
    j->nodes = NULL;
    j->nnodes = j->nnodes_cap = 0;
    free(j->mem);
    j->mem = NULL;
    j->nmem = j->capmem = j->nround = 0;
    rdzv_shared_body_release(j->round_body);
    j->round_body = NULL;
    j->round_body_epoch = 0;
    free(j->ranked);
    j->ranked = NULL;
    j->ranked_epoch = 0;
    j->have_result = false;
    j->model_uri[0] = j->model_sha256[0] = j->export_error[0] = 0;
    j->model_bytes = 0;
    j->nevals = 0;
}

/* A job's end (its servers outlive job_clear: a job registered again keeps them, as before). */
static void job_destroy(job *j)
{
    job_clear(j);
    free(j->srv);
    free(j);
}

int rm_rdzv_eval_add(rm_rdzv_eval *a, int *n, int epoch, int64_t step, double acc, double loss, double vloss)
{
    rm_eval e = {.epoch = epoch, .step = step, .test_accuracy = acc, .train_loss = loss, .val_loss = vloss};
    return rm_eval_add(a, n, RM_RDZV_MAX_EVALS, &e);
}

/* The first member whose workerId is not below wid (binary search: a round's joins cost
 * O(N log N), docs/scale.md). */
static int member_lower(const job *j, const char *wid)
{
    int lo = 0, hi = j->nmem;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (wid_cmp(j->mem[mid]->worker_id, wid) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int rdzv_member_find(const job *j, const char *wid)
{
    /* ids equal under wid_cmp ("03", "3") sit side by side: the exact one among them */
    for (int i = member_lower(j, wid); i < j->nmem && wid_cmp(j->mem[i]->worker_id, wid) == 0; i++)
        if (strcmp(j->mem[i]->worker_id, wid) == 0)
            return i;
    return -1;
}

/* Insert in workerId order. NULL when the job already has RM_RDZV_MAX_WORLD workers or on ENOMEM.
 * Members are allocated one by one (the sorted array holds pointers), so pointers to them stay
 * valid; indexes move. */
member *rdzv_member_add(job *j, const char *wid)
{
    if (j->nmem >= RM_RDZV_MAX_WORLD)
        return NULL;
    if (j->nmem == j->capmem) {
        int nc = j->capmem ? j->capmem * 2 : 16;
        member **nm = realloc(j->mem, (size_t)nc * sizeof *nm);
        if (!nm)
            return NULL;
        j->mem = nm;
        j->capmem = nc;
    }
    member *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    int at = member_lower(j, wid);
    memmove(&j->mem[at + 1], &j->mem[at], (size_t)(j->nmem - at) * sizeof *j->mem);
    j->mem[at] = m;
    j->nmem++;
    snprintf(m->worker_id, sizeof m->worker_id, "%s", wid);
    m->rank = -1;
    return m;
}

static void epoch_open(rm_rdzv *r, job *j, double now, const char *why)
{
    j->epoch++;
    j->closed = false;
    j->world = 0;
    j->nround = 0; /* nobody joined the new epoch's round yet */
    j->last_join = now;
    for (int i = 0; i < j->nmem; i++)
        j->mem[i]->rank = -1;
    kv_clear(j);
    rm_info("rendezvous epoch opened job=%s epoch=%d reason=\"%s\"", j->name, j->epoch, why);
    rdzv_held_flush(r);
    rdzv_wake_all(r);
}

/* Close the open round when `desired` joined, or `min` joined and `settle` passed since the last
 * join. Ranks follow the member order (ascending workerId). */
static void round_maybe_close(rm_rdzv *r, job *j, double now)
{
    if (j->closed || j->stopped)
        return;
    int n = rdzv_round_count(j);
    if (n == 0 || !(n >= j->desired || (n >= j->min && now - j->last_join >= j->settle)))
        return;
    int rank = 0;
    for (int i = 0; i < j->nmem; i++)
        j->mem[i]->rank = j->mem[i]->round == j->epoch ? rank++ : -1;
    j->closed = true;
    j->world = n;
    j->closed_at = rm_wall();
    rm_info("rendezvous round closed job=%s epoch=%d world=%d desired=%d", j->name, j->epoch, n, j->desired);
    rdzv_wake_all(r);
}

/* One evaluation of a join; safe to repeat after every wake-up (see the file comment). */
int rdzv_join_eval(rm_rdzv *r, job *j, const char *wid, const char *addr, const char *node, int last_epoch,
                   double now)
{
    r->join_evals++;
    if (j->stopped)
        return J_STOP;
    int i = rdzv_member_find(j, wid);
    member *m = i >= 0 ? j->mem[i] : NULL;
    if (j->closed) {
        bool in_round = m && m->round == j->epoch;
        if (in_round && last_epoch != j->epoch && strcmp(m->addr, addr) == 0)
            return J_ASSIGNED;
        if (!in_round && j->world >= j->desired)
            return J_WAIT;
        epoch_open(r, j, now,
                   !in_round                ? "late joiner, group below desired size"
                   : last_epoch == j->epoch ? "member saw the group break"
                                            : "member came back with a new address");
    }
    if (!m && !(m = rdzv_member_add(j, wid)))
        return J_FULL;
    /* the round is open here: its members' latest word (out of memory: the last one stays) */
    rdzv_member_set_node(j, m, node);
    if (m->round != j->epoch || strcmp(m->addr, addr) != 0) {
        if (m->round != j->epoch)
            j->nround++;
        m->round = j->epoch;
        snprintf(m->addr, sizeof m->addr, "%s", addr);
        m->epoch = j->epoch;
        m->last_progress = rm_wall();
        j->last_join = now;
        /* The joins held in this round wait for it to close (round_maybe_close broadcasts) or for
         * `settle` after the last join, which the last joiner's own wait covers: waking all N of
         * them on every join made a round O(N^2) wake-ups (docs/scale.md). They are woken once,
         * when the round reaches `min`, so a waiter whose own join was below it starts counting
         * the settle time even when the joins after it do not wait (polling joins). */
        if (j->nround == j->min)
            rdzv_wake_all(r);
    }
    round_maybe_close(r, j, now);
    return j->closed ? J_ASSIGNED : J_WAIT;
}

/* ---------------- controller API ---------------- */

rm_rdzv *rm_rdzv_new(void)
{
    rm_rdzv *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    int rc = rm_mono_cond_init(&r->cv);
    if (rc != 0) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->jobs_tail = &r->jobs;
    return r;
}

/* Shutting down wakes every long poll so it answers at once. */
static void set_shutting(rm_rdzv *r, bool on)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->shutting = on;
    if (on) {
        rdzv_held_flush(r); /* the held reports are answered now */
        rdzv_wake_all(r);
    }
    pthread_mutex_unlock(&r->mu);
}

void rm_rdzv_shutdown(rm_rdzv *r)
{
    set_shutting(r, true);
}

void rm_rdzv_resume(rm_rdzv *r)
{
    set_shutting(r, false);
}

void rm_rdzv_free(rm_rdzv *r)
{
    if (!r)
        return;
    set_shutting(r, true);
    pthread_mutex_lock(&r->mu);
    while (r->inflight > 0)
        pthread_cond_wait(&r->cv, &r->mu);
    bool wt = r->wthread_on;
    r->wquit = true; /* it answers the parked polls (503: shutting) and ends */
    rdzv_wake_all(r);
    pthread_mutex_unlock(&r->mu);
    if (wt)
        pthread_join(r->wthread, NULL);
    rm_kmap_clear(&r->by_name, NULL); /* the keys are the jobs' names: before the jobs go */
    job *j = r->jobs;
    while (j) {
        job *n = j->next;
        job_destroy(j);
        j = n;
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

unsigned long rm_rdzv_join_evals(rm_rdzv *r)
{
    if (!r)
        return 0;
    pthread_mutex_lock(&r->mu);
    unsigned long n = r->join_evals;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* Drop the oldest tombstones beyond MAX_TOMBSTONES. */
static void tombstones_trim(rm_rdzv *r)
{
    for (job **pp = &r->jobs; *pp && r->ntomb > MAX_TOMBSTONES;) {
        job *j = *pp;
        if (j->removed) {
            *pp = j->next;
            if (r->jobs_tail == &j->next)
                r->jobs_tail = pp;
            rm_kmap_del(&r->by_name, j->name);
            job_destroy(j);
            r->ntomb--;
        } else {
            pp = &j->next;
        }
    }
}

int rm_rdzv_job_set(rm_rdzv *r, const char *jobname, const char *token, int desired, int min,
                    double settle_seconds)
{
    if (!r || !jobname || !token || !rdzv_job_name_ok(jobname) || !*token || strlen(token) > TOKEN_MAX ||
        strpbrk(token, "\r\n") || desired < 1 || desired > RM_RDZV_MAX_WORLD || min < 1 || min > desired ||
        !(settle_seconds >= 0) || settle_seconds > 3600)
        return RM_EINVAL;
    pthread_mutex_lock(&r->mu);
    job *j = rdzv_job_find(r, jobname);
    if (!j) {
        if (!(j = calloc(1, sizeof *j))) {
            pthread_mutex_unlock(&r->mu);
            return RM_ENOMEM;
        }
        snprintf(j->name, sizeof j->name, "%s", jobname);
        j->epoch = 1;
        j->incarnation = ++r->incarnations;
        if (rm_kmap_put_ref(&r->by_name, j->name, j, NULL) != RM_OK) {
            free(j);
            pthread_mutex_unlock(&r->mu);
            return RM_ENOMEM;
        }
        *r->jobs_tail = j;
        r->jobs_tail = &j->next;
        rm_info("rendezvous job registered job=%s desired=%d min=%d", jobname, desired, min);
    } else if (j->removed) {
        job_clear(j);
        r->ntomb--;
        j->removed = j->stopped = j->closed = false;
        j->epoch++;
        j->incarnation = ++r->incarnations;
        j->world = 0;
        rdzv_held_flush(r);
        rm_info("rendezvous job registered again job=%s epoch=%d", jobname, j->epoch);
    }
    snprintf(j->token, sizeof j->token, "%s", token);
    j->desired = desired;
    j->min = min;
    j->settle = settle_seconds;
    round_maybe_close(r, j, rm_mono());
    rdzv_wake_all(r);
    pthread_mutex_unlock(&r->mu);
    return RM_OK;
}

int rm_rdzv_job_remove(rm_rdzv *r, const char *jobname)
{
    if (!r || !jobname)
        return RM_EINVAL;
    pthread_mutex_lock(&r->mu);
    job *j = live_job(r, jobname);
    int rc = j ? RM_OK : RM_ENOTFOUND;
    if (j) {
        job_clear(j);
        j->removed = j->stopped = true;
        r->ntomb++;
        rdzv_held_flush(r);
        rm_info("rendezvous job removed job=%s", jobname);
        rdzv_wake_all(r);
        tombstones_trim(r); /* may free j */
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int rm_rdzv_job_stop(rm_rdzv *r, const char *jobname)
{
    if (!r || !jobname)
        return RM_EINVAL;
    pthread_mutex_lock(&r->mu);
    job *j = live_job(r, jobname);
    int rc = j ? RM_OK : RM_ENOTFOUND;
    if (j) {
        if (!j->stopped)
            rm_info("rendezvous job stopped job=%s epoch=%d", jobname, j->epoch);
        j->stopped = true;
        rdzv_held_flush(r);
        rdzv_wake_all(r);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int rm_rdzv_restart(rm_rdzv *r, const char *jobname, int from_epoch, int *new_epoch)
{
    if (!r || !jobname)
        return RM_EINVAL;
    pthread_mutex_lock(&r->mu);
    job *j = live_job(r, jobname);
    int rc = j ? RM_OK : RM_ENOTFOUND;
    if (j) {
        if (from_epoch == j->epoch && !j->stopped)
            epoch_open(r, j, rm_mono(), "controller restart");
        if (new_epoch)
            *new_epoch = j->epoch;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int rm_rdzv_snapshot(rm_rdzv *r, const char *jobname, rm_rdzv_state *out)
{
    if (!r || !jobname || !out)
        return RM_EINVAL;
    pthread_mutex_lock(&r->mu);
    job *j = live_job(r, jobname);
    int rc = j ? RM_OK : RM_ENOTFOUND;
    if (j) {
        /* a round may be due to close with nobody polling right now */
        round_maybe_close(r, j, rm_mono());
        memset(out, 0, sizeof *out);
        out->epoch = j->epoch;
        out->closed = j->closed;
        out->world_size = j->closed ? j->world : 0;
        out->closed_at = j->closed ? j->closed_at : 0;
        out->trained_epoch = j->trained_epoch;
        out->trained_at = j->trained_at;
        out->trained_world = j->trained_world;
        for (int i = 0; i < j->nmem && out->nmembers < (int)RM_ARRAY_LEN(out->members); i++)
            rdzv_member_view(j->mem[i], &out->members[out->nmembers++]);
        out->have_result = j->have_result;
        out->test_accuracy = j->test_accuracy;
        out->train_loss = j->train_loss;
        out->seconds = j->seconds;
        out->samples_per_second = j->samples_per_second;
        out->val_loss = j->val_loss;
        out->tokens_per_second = j->tokens_per_second;
        out->steps = j->steps;
        memcpy(out->model_uri, j->model_uri, sizeof out->model_uri);
        memcpy(out->model_sha256, j->model_sha256, sizeof out->model_sha256);
        out->model_bytes = j->model_bytes;
        memcpy(out->export_error, j->export_error, sizeof out->export_error);
        out->nevals = j->nevals;
        memcpy(out->evals, j->evals, (size_t)j->nevals * sizeof j->evals[0]);
        out->mem_params = j->memmax[0];
        out->mem_grads = j->memmax[1];
        out->mem_optimizer = j->memmax[2];
        out->mem_activations = j->memmax[3];
        out->peak_rss = j->memmax[4];
        for (int i = 0; i < j->nsrv; i++)
            if (j->srv[i].ckfail > out->ps_checkpoint_failures) {
                out->ps_checkpoint_index = i;
                out->ps_checkpoint_failures = j->srv[i].ckfail;
                snprintf(out->ps_checkpoint_error, sizeof out->ps_checkpoint_error, "%s", j->srv[i].ckerr);
            }
        const kv_ent *fe = rdzv_kv_find(j, RM_RDZV_KV_DATA_FETCH);
        unsigned long long fb = 0, ft = 0;
        if (fe && sscanf(fe->val, "%llu %llu", &fb, &ft) == 2) {
            out->data_bytes = fb;
            out->data_total = ft;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static unsigned long long sig_mix(unsigned long long h, unsigned long long v)
{
    return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

int rm_rdzv_signature(rm_rdzv *r, const char *jobname, unsigned long long *sig)
{
    if (!r || !jobname || !sig)
        return RM_EINVAL;
    pthread_mutex_lock(&r->mu);
    job *j = live_job(r, jobname);
    int rc = j ? RM_OK : RM_ENOTFOUND;
    if (j) {
        round_maybe_close(r, j, rm_mono());
        unsigned long long h = 1469598103934665603ULL;
        h = sig_mix(h, (unsigned long long)j->epoch);
        h = sig_mix(h, j->closed);
        h = sig_mix(h, (unsigned long long)(j->closed ? j->world : 0));
        h = sig_mix(h, (unsigned long long)j->nmem);
        h = sig_mix(h, j->have_result);
        for (int k = 0; k < j->nmem && k < RM_RDZV_STATE_MEMBERS; k++) {
            const member *m = j->mem[k];
            h = sig_mix(h, (unsigned long long)m->step);
            h = sig_mix(h, m->done);
            h = sig_mix(h, (unsigned long long)m->epoch);
        }
        *sig = h;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ---------------- topology (docs/strategies.md#topology) ---------------- */

int rm_rdzv_node_index(const rm_rdzv_peer *peers, int world, int *idx)
{
    if (!peers || !idx || world < 1 || world > RM_RDZV_MAX_WORLD)
        return RM_EINVAL;
    /* the lowest rank of each node name, in an open-addressed table: O(N) where comparing every
     * rank with the ranks before it was O(N^2) (134 million comparisons at 16,384 ranks) */
    size_t cap = 16;
    while (cap < 2 * (size_t)world)
        cap *= 2;
    int *first = malloc(cap * sizeof *first);
    if (!first)
        return RM_ENOMEM;
    for (size_t h = 0; h < cap; h++)
        first[h] = -1;
    int nnodes = 0;
    for (int q = 0; q < world; q++) {
        size_t h = name_hash(peers[q].node) & (cap - 1);
        while (first[h] >= 0 && strcmp(peers[first[h]].node, peers[q].node) != 0)
            h = (h + 1) & (cap - 1);
        if (first[h] < 0) {
            first[h] = q;
            idx[q] = nnodes++;
        } else {
            idx[q] = idx[first[h]];
        }
    }
    free(first);
    return nnodes;
}

int rm_rdzv_topology(const rm_rdzv_peer *peers, int world, int rank, rm_rdzv_topo *out)
{
    if (!out || rank < 0 || rank >= world)
        return RM_EINVAL;
    int *idx = malloc((size_t)(world > 0 ? world : 1) * sizeof *idx);
    if (!idx)
        return RM_ENOMEM;
    int nn = rm_rdzv_node_index(peers, world, idx);
    if (nn < 0) {
        free(idx);
        return nn;
    }
    int *cnt = calloc((size_t)nn, sizeof *cnt);
    if (!cnt) {
        free(idx);
        return RM_ENOMEM;
    }
    memset(out, 0, sizeof *out);
    out->nnodes = nn;
    out->node_index = idx[rank];
    for (int q = 0; q < world; q++) {
        if (q == rank)
            out->local_rank = cnt[idx[q]];
        cnt[idx[q]]++;
    }
    out->local_world = cnt[idx[rank]];
    out->min_local = out->max_local = cnt[0];
    for (int k = 1; k < nn; k++) {
        out->min_local = cnt[k] < out->min_local ? cnt[k] : out->min_local;
        out->max_local = cnt[k] > out->max_local ? cnt[k] : out->max_local;
    }
    out->uniform = out->min_local == out->max_local;
    free(cnt);
    free(idx);
    return RM_OK;
}
