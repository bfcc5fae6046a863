/* rdzv.c — the rendezvous service: per-job rounds, a kv area per epoch and progress reports
 * (protocol in common/rdzv.h; the client is in common/rdzv_client.c).
 *
 * Design: one mutex and one condition variable (monotonic clock) guard every job. The round logic
 * is a small state machine that takes `now` as an argument (join_eval, round_maybe_close,
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
#include "common/rdzv.h"
#include "common/clock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/json.h"
#include "common/log.h"
#include "common/ratelimit.h"

const char *const rm_rdzv_action_names[] = {"continue", "rejoin", "stop", NULL};

#define JOIN_POLL_S 10.0   /* how long a join is held before "202 waiting" */
#define KV_WAIT_MAX_S 30.0 /* cap on ?wait= */
#define KV_MAX_KEYS 256    /* keys per epoch */
#define KV_MAX_KEY 128
#define MAX_TOMBSTONES 256
#define JOB_NAME_MAX 255
#define TOKEN_MAX 255

/* A reply body many replies share (the closed round's peer list), reference-counted: the job holds
 * one reference, every reply in flight one more, released by the HTTP server once sent. */
typedef struct shared_body {
    atomic_int refs;
    size_t len;
    char data[];
} shared_body;

static void shared_body_release(void *p)
{
    shared_body *b = p;
    if (b && atomic_fetch_sub(&b->refs, 1) == 1)
        free(b);
}

typedef struct kv_ent {
    struct kv_ent *next;
    char *val;
    size_t len;
    char key[KV_MAX_KEY + 1];
} kv_ent;

typedef struct member {
    rm_rdzv_member m; /* public view; m.rank is the rank in the closed round, else -1 */
    int round;        /* epoch whose round this worker joined (0 = none) */
} member;

typedef struct ps_server {
    char addr[64]; /* "" = not registered */
    int ckfail;    /* its last reported consecutive checkpoint failures */
    char ckerr[128];
    rm_rdzv_ps_group group; /* its agreement record */
} ps_server;

typedef struct job {
    struct job *next;
    char name[JOB_NAME_MAX + 1];
    char token[TOKEN_MAX + 1];
    int desired, min;
    double settle;
    int epoch;
    bool closed, stopped, removed;
    int world;
    double closed_at;  /* unix seconds */
    int trained_epoch; /* newest epoch whose closed round had a member report (0 = none) */
    double trained_at; /* unix seconds of that epoch's first such report */
    int trained_world; /* that round's world size */
    double last_join;  /* monotonic seconds of the last change to the open round */
    member **mem;      /* sorted by workerId (numeric first), at most RM_RDZV_MAX_WORLD; owned */
    int nmem, capmem;
    int nround;              /* members whose round is the current epoch (what round_count was) */
    shared_body *round_body; /* the closed round's reply less the rank (round_body_get); one ref */
    int round_body_epoch;    /* the epoch round_body was built for (0 = none) */
    kv_ent *kv;              /* current epoch's kv only */
    int nkv;
    bool have_result;
    double test_accuracy, train_loss, seconds, samples_per_second;
    double val_loss, tokens_per_second; /* 0 = not reported */
    int64_t steps;
    char model_uri[RM_RDZV_MODEL_URI_MAX], model_sha256[65], export_error[RM_RDZV_EXPORT_ERR_MAX];
    double model_bytes;
    rm_rdzv_eval evals[RM_RDZV_MAX_EVALS]; /* rank 0's, ascending step; kept across rounds */
    int nevals;
    double memmax[5]; /* largest reported: params, grads, optimizer, activations, peak RSS */
    /* parameter servers by index, [0, nsrv) — grown by a registration (a job without servers holds
     * none: the operator keeps a job entry per TrainingJob, docs/operator-scale.md) */
    struct ps_server *srv;
    int nsrv;
} job;

/* A parked long poll (an event-loop server: rm_http_park): what its handler's loop would have kept
 * on its stack. The waiter thread evaluates it on every wake-up, as that loop would. */
enum { WAIT_JOIN, WAIT_KV };
typedef struct waiter {
    struct waiter *next;
    rm_http_parked *t;
    int kind; /* WAIT_* */
    double deadline;
    double wake; /* evaluate again at the latest then (monotonic) */
    char job[JOB_NAME_MAX + 1];
    /* a join */
    char wid[32], addr[64], node[RM_RDZV_NODE_MAX + 1];
    int last_epoch, seen_epoch;
    double wait_s;
    /* a kv read */
    int epoch;
    char key[KV_MAX_KEY + 1];
} waiter;

/* Park req (an event-loop server: *parked true) with a new waiter of kind for the waiter thread
 * to answer; NULL with *parked true when out of memory (req was answered 500). *parked false: a
 * thread-per-connection server, the caller waits itself. */
static waiter *waiter_park(const rm_http_req *req, int kind, double deadline, double wake, bool *parked)
{
    rm_http_parked *t = rm_http_park(req);
    *parked = t != NULL;
    if (!t)
        return NULL;
    waiter *w = calloc(1, sizeof *w);
    if (!w) {
        rm_http_resp er = {0};
        rm_http_reply_error(&er, 500, "out of memory");
        rm_http_unpark(t, &er);
        return NULL;
    }
    w->t = t;
    w->kind = kind;
    w->deadline = deadline;
    w->wake = wake;
    return w;
}

struct rm_rdzv {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    waiter *waiters; /* parked long polls */
    bool wthread_on; /* the waiter thread runs */
    bool wquit;      /* it is asked to end */
    bool wdirty;     /* something changed since it last evaluated the waiters */
    double wnext;    /* when the waiter thread wakes next (monotonic) */
    pthread_t wthread;
    unsigned long join_evals; /* join evaluations so far (rm_rdzv_join_evals) */
    job *jobs;                /* in creation order */
    bool shutting;
    int inflight; /* handlers running */
};

/* ---------------- small helpers ---------------- */

/* Every state change a long poll may wait for: wake the held handlers and the waiter thread. */
static void wake_all(rm_rdzv *r)
{
    r->wdirty = true;
    pthread_cond_broadcast(&r->cv);
}

/* Wait on r->cv until woken or the monotonic deadline passes. */
static void wait_until(rm_rdzv *r, double deadline)
{
    struct timespec ts = rm_mono_ts(deadline);
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
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
static bool name_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    return n <= max && rm_rdzv_name_ok(s, n);
}

/* "NS/NAME", at most JOB_NAME_MAX chars in all. */
static bool job_name_ok(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash || strlen(s) > JOB_NAME_MAX || strchr(slash + 1, '/'))
        return false;
    return rm_rdzv_name_ok(s, (size_t)(slash - s)) && name_ok(slash + 1, JOB_NAME_MAX);
}

static bool addr_ok(const char *s)
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

/* Constant-time in the token's content (the length may leak; tokens are long random strings). */
static bool token_eq(const char *want, const char *got)
{
    size_t n = strlen(want), m = strlen(got);
    unsigned d = (n != m);
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)want[i] ^ (unsigned char)(i < m ? got[i] : 0);
    return d == 0 && n > 0;
}

static bool is_digits(const char *s)
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
    bool da = is_digits(a), db = is_digits(b);
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
static bool bad(int rc)
{
    return rc < 0 && rc != RM_ENOTFOUND;
}

/* ---------------- the state machine (r->mu held) ---------------- */

static job *job_find(rm_rdzv *r, const char *name)
{
    for (job *j = r->jobs; j; j = j->next)
        if (strcmp(j->name, name) == 0)
            return j;
    return NULL;
}

/* The job a controller call acts on: NULL for unknown names and for tombstones. */
static job *live_job(rm_rdzv *r, const char *name)
{
    job *j = job_find(r, name);
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

static kv_ent *kv_find(job *j, const char *key)
{
    for (kv_ent *e = j->kv; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void job_clear(job *j)
{
    kv_clear(j);
    for (int i = 0; i < j->nmem; i++)
        free(j->mem[i]);
    free(j->mem);
    j->mem = NULL;
    j->nmem = j->capmem = j->nround = 0;
    shared_body_release(j->round_body);
    j->round_body = NULL;
    j->round_body_epoch = 0;
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
        if (wid_cmp(j->mem[mid]->m.worker_id, wid) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int member_find(const job *j, const char *wid)
{
    /* ids equal under wid_cmp ("03", "3") sit side by side: the exact one among them */
    for (int i = member_lower(j, wid); i < j->nmem && wid_cmp(j->mem[i]->m.worker_id, wid) == 0; i++)
        if (strcmp(j->mem[i]->m.worker_id, wid) == 0)
            return i;
    return -1;
}

/* Insert in workerId order. NULL when the job already has RM_RDZV_MAX_WORLD workers or on ENOMEM.
 * Members are allocated one by one (the sorted array holds pointers), so pointers to them stay
 * valid; indexes move. */
static member *member_add(job *j, const char *wid)
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
    snprintf(m->m.worker_id, sizeof m->m.worker_id, "%s", wid);
    m->m.rank = -1;
    return m;
}

static int round_count(const job *j)
{
    return j->nround;
}

static void epoch_open(rm_rdzv *r, job *j, double now, const char *why)
{
    j->epoch++;
    j->closed = false;
    j->world = 0;
    j->nround = 0; /* nobody joined the new epoch's round yet */
    j->last_join = now;
    for (int i = 0; i < j->nmem; i++)
        j->mem[i]->m.rank = -1;
    kv_clear(j);
    rm_info("rendezvous epoch opened job=%s epoch=%d reason=\"%s\"", j->name, j->epoch, why);
    wake_all(r);
}

/* Close the open round when `desired` joined, or `min` joined and `settle` passed since the last
 * join. Ranks follow the member order (ascending workerId). */
static void round_maybe_close(rm_rdzv *r, job *j, double now)
{
    if (j->closed || j->stopped)
        return;
    int n = round_count(j);
    if (n == 0 || !(n >= j->desired || (n >= j->min && now - j->last_join >= j->settle)))
        return;
    int rank = 0;
    for (int i = 0; i < j->nmem; i++)
        j->mem[i]->m.rank = j->mem[i]->round == j->epoch ? rank++ : -1;
    j->closed = true;
    j->world = n;
    j->closed_at = rm_wall();
    rm_info("rendezvous round closed job=%s epoch=%d world=%d desired=%d", j->name, j->epoch, n, j->desired);
    wake_all(r);
}

enum { J_ASSIGNED, J_WAIT, J_STOP, J_FULL };

/* One evaluation of a join; safe to repeat after every wake-up (see the file comment). */
static int join_eval(rm_rdzv *r, job *j, const char *wid, const char *addr, const char *node, int last_epoch,
                     double now)
{
    r->join_evals++;
    if (j->stopped)
        return J_STOP;
    int i = member_find(j, wid);
    member *m = i >= 0 ? j->mem[i] : NULL;
    if (j->closed) {
        bool in_round = m && m->round == j->epoch;
        if (in_round && last_epoch != j->epoch && strcmp(m->m.addr, addr) == 0)
            return J_ASSIGNED;
        if (!in_round && j->world >= j->desired)
            return J_WAIT;
        epoch_open(r, j, now,
                   !in_round                ? "late joiner, group below desired size"
                   : last_epoch == j->epoch ? "member saw the group break"
                                            : "member came back with a new address");
    }
    if (!m && !(m = member_add(j, wid)))
        return J_FULL;
    if (strcmp(m->m.node, node) != 0) /* the round is open here: its members' latest word */
        snprintf(m->m.node, sizeof m->m.node, "%s", node);
    if (m->round != j->epoch || strcmp(m->m.addr, addr) != 0) {
        if (m->round != j->epoch)
            j->nround++;
        m->round = j->epoch;
        snprintf(m->m.addr, sizeof m->m.addr, "%s", addr);
        m->m.epoch = j->epoch;
        m->m.last_progress = rm_wall();
        j->last_join = now;
        /* The joins held in this round wait for it to close (round_maybe_close broadcasts) or for
         * `settle` after the last join, which the last joiner's own wait covers: waking all N of
         * them on every join made a round O(N^2) wake-ups (docs/scale.md). They are woken once,
         * when the round reaches `min`, so a waiter whose own join was below it starts counting
         * the settle time even when the joins after it do not wait (polling joins). */
        if (j->nround == j->min)
            wake_all(r);
    }
    round_maybe_close(r, j, now);
    return j->closed ? J_ASSIGNED : J_WAIT;
}

/* ---------------- HTTP glue ---------------- */

static int reply_stop(rm_http_resp *resp)
{
    return rm_http_reply_text(resp, 409, "application/json", "{\"status\":\"stop\"}");
}

static int reply_waiting(rm_http_resp *resp, int epoch)
{
    char buf[64];
    snprintf(buf, sizeof buf, "{\"status\":\"waiting\",\"epoch\":%d}", epoch);
    return rm_http_reply_text(resp, 202, "application/json", buf);
}

/* 202 for a join that asked not to be held ("wait": 0): also how many workers joined the open
 * round so far and whether `settle` seconds passed since the last join (the joiners are then the
 * workers still alive: what parameter servers proceed with, rdzv.h "Polling joins"). */
static int reply_waiting_count(rm_http_resp *resp, const job *j, double now)
{
    char buf[128];
    snprintf(buf, sizeof buf, "{\"status\":\"waiting\",\"epoch\":%d,\"joined\":%d,\"settled\":%s}", j->epoch,
             j->closed ? j->world : round_count(j),
             !j->closed && now - j->last_join >= j->settle ? "true" : "false");
    return rm_http_reply_text(resp, 202, "application/json", buf);
}

static int reply_cjson(rm_http_resp *resp, int status, cJSON *o)
{
    if (!o)
        return rm_http_reply_error(resp, 500, "out of memory");
    int rc = rm_http_reply_json(resp, status, o);
    cJSON_Delete(o);
    return rc;
}

/* The closed round's reply, built once per round and shared by every member's answer (not copied):
 * everything but the rank, which closes it ({"epoch":E,"worldSize":n,"peers":[...],"rank": ... R}).
 * Building or copying it for each of N members made a round O(N^2) in time or memory
 * (docs/scale.md). NULL on ENOMEM. */
static shared_body *round_body_get(job *j)
{
    if (j->round_body && j->round_body_epoch == j->epoch)
        return j->round_body;
    shared_body_release(j->round_body);
    j->round_body = NULL;
    cJSON *peers = cJSON_CreateArray();
    for (int i = 0; peers && i < j->nmem; i++) {
        const member *p = j->mem[i];
        if (p->round != j->epoch)
            continue;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(peers, e)) {
            cJSON_Delete(e);
            cJSON_Delete(peers);
            return NULL;
        }
        if (!cJSON_AddNumberToObject(e, "rank", p->m.rank) ||
            !cJSON_AddStringToObject(e, "workerId", p->m.worker_id) ||
            !cJSON_AddStringToObject(e, "addr", p->m.addr) ||
            !cJSON_AddStringToObject(e, "node", p->m.node)) {
            cJSON_Delete(peers); /* e with it */
            return NULL;
        }
    }
    char *list = peers ? cJSON_PrintUnformatted(peers) : NULL;
    cJSON_Delete(peers);
    if (!list)
        return NULL;
    size_t n = strlen(list) + 96;
    shared_body *b = malloc(sizeof *b + n);
    if (b) {
        int w = snprintf(b->data, n, "{\"epoch\":%d,\"worldSize\":%d,\"peers\":%s,\"rank\":", j->epoch,
                         j->world, list);
        atomic_init(&b->refs, 1);
        b->len = (size_t)w;
        j->round_body = b;
        j->round_body_epoch = j->epoch;
    }
    free(list);
    return j->round_body;
}

/* 200 with the round for member me: the shared body and its rank. */
static int reply_round(rm_http_resp *resp, job *j, const member *me)
{
    shared_body *b = round_body_get(j);
    char *tail = b ? malloc(16) : NULL;
    if (!tail)
        return rm_http_reply_error(resp, 500, "out of memory");
    int t = snprintf(tail, 16, "%d}", me->m.rank);
    atomic_fetch_add(&b->refs, 1);
    resp->status = 200;
    resp->content_type = "application/json";
    resp->shared = b->data;
    resp->shared_len = b->len;
    resp->release = shared_body_release;
    resp->release_ud = b;
    resp->body = tail;
    resp->body_len = (size_t)t;
    return RM_OK;
}

/* One evaluation of a held join (r->mu held): true when it is answered (*rc, resp), else false
 * with *wake the monotonic time to evaluate it again at the latest. */
static bool join_step(rm_rdzv *r, const char *name, const char *wid, const char *addr, const char *node,
                      int last_epoch, double wait_s, double deadline, int *seen_epoch, rm_http_resp *resp,
                      int *rc, double *wake)
{
    job *j = job_find(r, name);
    if (r->shutting) {
        *rc = rm_http_reply_error(resp, 503, "rendezvous shutting down");
        return true;
    }
    if (!j) {
        *rc = reply_stop(resp);
        return true;
    }
    if (*seen_epoch && j->epoch != *seen_epoch) {
        /* the epoch moved while this join was held: answer so that only a worker that is
         * still alive (it calls again) enters the new round, never a client that gave up */
        *rc = reply_waiting(resp, j->epoch);
        return true;
    }
    double now = rm_mono();
    int out = join_eval(r, j, wid, addr, node, last_epoch, now);
    *seen_epoch = j->epoch;
    if (out == J_STOP) {
        *rc = reply_stop(resp);
        return true;
    }
    if (out == J_FULL) {
        *rc = rm_http_reply_error(resp, 400, "join: job has %d workers already", j->nmem);
        return true;
    }
    if (out == J_ASSIGNED) {
        *rc = reply_round(resp, j, j->mem[member_find(j, wid)]);
        return true;
    }
    if (now >= deadline) {
        *rc = wait_s < JOIN_POLL_S ? reply_waiting_count(resp, j, rm_mono()) : reply_waiting(resp, j->epoch);
        return true;
    }
    *wake = deadline;
    if (!j->closed && round_count(j) >= j->min && j->last_join + j->settle < *wake)
        *wake = j->last_join + j->settle + 0.001;
    return false;
}

static int waiter_add(rm_rdzv *r, waiter *w);

static int handle_join(rm_rdzv *r, const char *name, const rm_http_req *req, rm_http_resp *resp)
{
    rm_err e = {0};
    int rc;
    const char *wid = NULL, *addr = NULL, *node = "";
    int64_t last_epoch = 0;
    double wait_s = JOIN_POLL_S;
    cJSON *body = rm_json_parse(req->body, req->body_len, &e);
    if (!body)
        return rm_http_reply_error(resp, 400, "join: %s", e.msg);
    if (!cJSON_IsObject(body) || rm_json_str(body, "workerId", true, "", &wid, &e) < 0 ||
        rm_json_str(body, "addr", true, "", &addr, &e) < 0 ||
        bad(rm_json_int(body, "lastEpoch", false, "", &last_epoch, &e)) ||
        bad(rm_json_num(body, "wait", false, "", &wait_s, &e)) ||
        bad(rm_json_str(body, "node", false, "", &node, &e))) {
        rc = rm_http_reply_error(resp, 400, "join: %s", e.msg[0] ? e.msg : "body must be an object");
        goto out;
    }
    if (!name_ok(wid, sizeof(((rm_rdzv_member *)0)->worker_id) - 1) || !addr_ok(addr) || last_epoch < -1 ||
        last_epoch > 1000000000 || !(wait_s >= 0 && wait_s <= JOIN_POLL_S)) {
        rc = rm_http_reply_error(resp, 400, "join: bad workerId, addr, lastEpoch or wait");
        goto out;
    }
    if (!node)
        node = "";
    if (node[0] && !name_ok(node, RM_RDZV_NODE_MAX)) {
        rc =
            rm_http_reply_error(resp, 400, "join: bad node (at most %d of [A-Za-z0-9._-])", RM_RDZV_NODE_MAX);
        goto out;
    }
    double deadline = rm_mono() + wait_s;
    int seen_epoch = 0;
    for (;;) {
        double wake = deadline;
        if (join_step(r, name, wid, addr, node, (int)last_epoch, wait_s, deadline, &seen_epoch, resp, &rc,
                      &wake))
            break;
        bool parked;
        waiter *w = waiter_park(req, WAIT_JOIN, deadline, wake, &parked);
        if (parked) { /* an event-loop server: the waiter thread goes on from here */
            if (!w)
                break;
            snprintf(w->job, sizeof w->job, "%s", name);
            snprintf(w->wid, sizeof w->wid, "%s", wid);
            snprintf(w->addr, sizeof w->addr, "%s", addr);
            snprintf(w->node, sizeof w->node, "%s", node);
            w->last_epoch = (int)last_epoch;
            w->seen_epoch = seen_epoch;
            w->wait_s = wait_s;
            rc = waiter_add(r, w);
            break;
        }
        wait_until(r, wake);
    }
out:
    cJSON_Delete(body);
    return rc;
}

/* A 64-bit id as 1..16 hex digits. */
static bool hex64(const cJSON *x, uint64_t *out)
{
    if (!cJSON_IsString(x))
        return false;
    const char *p = x->valuestring;
    size_t n = strlen(p);
    if (n < 1 || n > 16 || strspn(p, "0123456789abcdef") != n)
        return false;
    *out = strtoull(p, NULL, 16);
    return true;
}

/* A server's agreement record (rdzv.h "Servers"); absent (NULL) leaves g unknown. */
static int group_parse(const cJSON *o, rm_rdzv_ps_group *g)
{
    memset(g, 0, sizeof *g);
    if (!o)
        return RM_OK;
    rm_err e = {0};
    const cJSON *held = cJSON_GetObjectItemCaseSensitive(o, "held"), *x;
    if (!cJSON_IsObject(o) || !hex64(cJSON_GetObjectItemCaseSensitive(o, "inc"), &g->inc) || !g->inc ||
        !hex64(cJSON_GetObjectItemCaseSensitive(o, "gen"), &g->gen) ||
        bad(rm_json_bool(o, "settled", true, "group", &g->settled, &e)) ||
        bad(rm_json_int(o, "at", true, "group", &g->at, &e)) || g->at < 0 ||
        bad(rm_json_int(o, "version", true, "group", &g->version, &e)) || g->version < 0 ||
        !cJSON_IsArray(held) || cJSON_GetArraySize(held) > RM_RDZV_PS_HELD_MAX)
        return RM_EINVAL;
    cJSON_ArrayForEach(x, held)
    {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9e15)
            return RM_EINVAL;
        g->held[g->nheld++] = (int64_t)x->valuedouble;
    }
    g->known = true;
    return RM_OK;
}

/* Parameter servers (rdzv.h "Servers"): PUT servers/I {"addr"} registers server I's address
 * (a replacement overwrites it); GET servers lists them. Under r->mu. */
static int handle_server_put(job *j, const char *idx, const rm_http_req *req, rm_http_resp *resp)
{
    char *end;
    errno = 0;
    long i = strtol(idx, &end, 10);
    if (errno || end == idx || *end || i < 0 || i >= RM_RDZV_MAX_SERVERS)
        return rm_http_reply_error(resp, 400, "servers/INDEX: INDEX must be 0..%d", RM_RDZV_MAX_SERVERS - 1);
    if (j->stopped)
        return reply_stop(resp);
    rm_err e = {0};
    const char *addr = NULL, *ckerr = NULL;
    int64_t ckfail = 0;
    rm_rdzv_ps_group g = {0};
    ps_server *grown = NULL;
    cJSON *body = rm_json_parse(req->body, req->body_len, &e);
    int rc;
    if (!cJSON_IsObject(body) || rm_json_str(body, "addr", true, "", &addr, &e) < 0 || !addr_ok(addr) ||
        strlen(addr) >= sizeof j->srv[0].addr) {
        rc = rm_http_reply_error(resp, 400, "servers: body must be {\"addr\":\"host:port\"}");
    } else if (group_parse(cJSON_GetObjectItemCaseSensitive(body, "group"), &g) != RM_OK) {
        rc = rm_http_reply_error(resp, 400,
                                 "servers: group must be {\"inc\":hex,\"gen\":hex,\"settled\":bool,"
                                 "\"at\":N,\"version\":N,\"held\":[N,...] (at most %d)}",
                                 RM_RDZV_PS_HELD_MAX);
    } else if (bad(rm_json_int(body, "checkpointFailures", false, "servers", &ckfail, &e)) || ckfail < 0 ||
               ckfail > INT32_MAX ||
               bad(rm_json_str(body, "checkpointError", false, "servers", &ckerr, &e))) {
        rc = rm_http_reply_error(resp, 400,
                                 "servers: checkpointFailures must be an integer >= 0 and "
                                 "checkpointError a string");
    } else if (i >= j->nsrv && !(grown = realloc(j->srv, (size_t)(i + 1) * sizeof *j->srv))) {
        rc = RM_ENOMEM;
    } else {
        if (grown) {
            memset(grown + j->nsrv, 0, (size_t)(i + 1 - j->nsrv) * sizeof *grown);
            j->srv = grown;
            j->nsrv = (int)i + 1;
        }
        ps_server *sv = &j->srv[i];
        if (strcmp(sv->addr, addr) != 0)
            rm_info("parameter server registered job=%s index=%ld addr=%s", j->name, i, addr);
        snprintf(sv->addr, sizeof sv->addr, "%s", addr);
        sv->ckfail = (int)ckfail;
        snprintf(sv->ckerr, sizeof sv->ckerr, "%s", ckfail > 0 && ckerr ? ckerr : "");
        if (g.known)
            sv->group = g;
        rc = rm_http_reply_text(resp, 204, "application/json", "");
    }
    cJSON_Delete(body);
    return rc;
}

static int handle_servers_get(const job *j, rm_http_resp *resp)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *a = o ? cJSON_AddArrayToObject(o, "servers") : NULL;
    int n = 0;
    for (int i = 0; i < j->nsrv; i++)
        if (j->srv[i].addr[0])
            n = i + 1;
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateString(j->srv[i].addr);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            a = NULL;
        }
    }
    cJSON *ga = a ? cJSON_AddArrayToObject(o, "groups") : NULL;
    for (int i = 0; ga && i < n; i++) {
        const rm_rdzv_ps_group *g = &j->srv[i].group;
        cJSON *x = g->known ? cJSON_CreateObject() : cJSON_CreateNull();
        char h[2][24];
        snprintf(h[0], sizeof h[0], "%" PRIx64, g->inc);
        snprintf(h[1], sizeof h[1], "%" PRIx64, g->gen);
        cJSON *held = g->known && x ? cJSON_AddArrayToObject(x, "held") : NULL;
        for (int k = 0; held && k < g->nheld; k++) {
            cJSON *v = cJSON_CreateNumber((double)g->held[k]);
            if (!v || !cJSON_AddItemToArray(held, v)) {
                cJSON_Delete(v);
                held = NULL;
            }
        }
        if (g->known && x &&
            (!held || !cJSON_AddStringToObject(x, "inc", h[0]) || !cJSON_AddStringToObject(x, "gen", h[1]) ||
             !cJSON_AddBoolToObject(x, "settled", g->settled) ||
             !cJSON_AddNumberToObject(x, "at", (double)g->at) ||
             !cJSON_AddNumberToObject(x, "version", (double)g->version))) {
            cJSON_Delete(x);
            x = NULL;
        }
        if (!x || !cJSON_AddItemToArray(ga, x)) {
            cJSON_Delete(x);
            a = NULL;
            break;
        }
    }
    if (!a || !ga) {
        cJSON_Delete(o);
        o = NULL;
    }
    return reply_cjson(resp, 200, o);
}

/* "kv/EPOCH/KEY" → epoch and key; false if malformed. */
static bool parse_kv_path(const char *rest, int *epoch, char *key)
{
    const char *p = rest + 3, *slash = strchr(p, '/');
    if (!slash || slash == p || slash - p > 10)
        return false;
    char num[16];
    memcpy(num, p, (size_t)(slash - p));
    num[slash - p] = '\0';
    if (!is_digits(num))
        return false;
    long v = strtol(num, NULL, 10);
    if (v < 1 || v > 1000000000L || !name_ok(slash + 1, KV_MAX_KEY))
        return false;
    *epoch = (int)v;
    strcpy(key, slash + 1);
    return true;
}

static int handle_kv_put(rm_rdzv *r, job *j, int epoch, const char *key, const rm_http_req *req,
                         rm_http_resp *resp)
{
    if (j->stopped)
        return reply_stop(resp);
    if (epoch < j->epoch)
        return rm_http_reply_error(resp, 410, "epoch %d is gone (current %d)", epoch, j->epoch);
    if (epoch > j->epoch)
        return rm_http_reply_error(resp, 400, "epoch %d is not open (current %d)", epoch, j->epoch);
    if (req->body_len > RM_RDZV_MAX_KV)
        return rm_http_reply_error(resp, 413, "value over %d bytes", RM_RDZV_MAX_KV);
    kv_ent *e = kv_find(j, key);
    if (!e && j->nkv >= KV_MAX_KEYS)
        return rm_http_reply_error(resp, 413, "epoch has %d keys already", KV_MAX_KEYS);
    char *val = malloc(req->body_len + 1);
    if (!val)
        return rm_http_reply_error(resp, 500, "out of memory");
    memcpy(val, req->body, req->body_len);
    val[req->body_len] = '\0';
    if (!e) {
        if (!(e = calloc(1, sizeof *e))) {
            free(val);
            return rm_http_reply_error(resp, 500, "out of memory");
        }
        strcpy(e->key, key);
        e->next = j->kv;
        j->kv = e;
        j->nkv++;
    }
    free(e->val);
    e->val = val;
    e->len = req->body_len;
    wake_all(r);
    resp->status = 204;
    return RM_OK;
}

/* One evaluation of a held kv read (r->mu held): true when answered (*rc, resp). */
static bool kv_step(rm_rdzv *r, const char *name, int epoch, const char *key, double deadline,
                    rm_http_resp *resp, int *rc)
{
    job *j = job_find(r, name);
    if (r->shutting) {
        *rc = rm_http_reply_error(resp, 503, "rendezvous shutting down");
        return true;
    }
    if (!j || j->stopped) {
        *rc = reply_stop(resp);
        return true;
    }
    if (epoch < j->epoch) {
        *rc = rm_http_reply_error(resp, 410, "epoch %d is gone (current %d)", epoch, j->epoch);
        return true;
    }
    kv_ent *e = epoch == j->epoch ? kv_find(j, key) : NULL;
    if (e) {
        char *copy = malloc(e->len + 1);
        if (!copy) {
            *rc = rm_http_reply_error(resp, 500, "out of memory");
            return true;
        }
        memcpy(copy, e->val, e->len + 1);
        resp->status = 200;
        resp->content_type = "application/octet-stream";
        resp->body = copy;
        resp->body_len = e->len;
        *rc = RM_OK;
        return true;
    }
    if (rm_mono() >= deadline) {
        *rc = rm_http_reply_error(resp, 404, "key %s not published in epoch %d", key, epoch);
        return true;
    }
    return false;
}

/* The waiter thread (event-loop servers): evaluates every parked long poll after each state change
 * (wake_all) and at the earliest deadline, and answers those that are done, as their handlers'
 * loops would have (docs/scale.md). */
static void *waiter_main(void *arg)
{
    rm_rdzv *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        double now = rm_mono(), next = now + 1.0;
        /* after a state change every waiter is evaluated once; otherwise only those whose own time
         * came (a settle, a deadline): a new waiter alone is not a reason to evaluate the others,
         * or a round of N joins would cost N^2 evaluations */
        bool all = r->wdirty;
        r->wdirty = false;
        for (waiter **pp = &r->waiters; *pp;) {
            waiter *w = *pp;
            if (!all && w->wake > now) {
                next = w->wake < next ? w->wake : next;
                pp = &w->next;
                continue;
            }
            rm_http_resp resp;
            memset(&resp, 0, sizeof resp);
            resp.status = 200;
            resp.content_type = "application/json";
            int rc = RM_OK;
            double wake = w->deadline;
            bool done = w->kind == WAIT_JOIN
                            ? join_step(r, w->job, w->wid, w->addr, w->node, w->last_epoch, w->wait_s,
                                        w->deadline, &w->seen_epoch, &resp, &rc, &wake)
                            : kv_step(r, w->job, w->epoch, w->key, w->deadline, &resp, &rc);
            if (!done) {
                w->wake = wake;
                next = wake < next ? wake : next;
                pp = &w->next;
                continue;
            }
            if (rc < 0) {
                free(resp.body);
                memset(&resp, 0, sizeof resp);
                rm_http_reply_error(&resp, 500, "%s", rm_strerror(rc));
            }
            *pp = w->next;
            rm_http_unpark(w->t, &resp);
            free(w);
        }
        if (r->wquit && !r->waiters)
            break;
        r->wnext = next;
        if (!r->wdirty)
            wait_until(r, next);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Park w (r->mu held): the waiter thread answers it. Starts that thread at the first one. */
static int waiter_add(rm_rdzv *r, waiter *w)
{
    if (!r->wthread_on) {
        if (pthread_create(&r->wthread, NULL, waiter_main, r) != 0) {
            rm_http_resp er = {0};
            rm_http_reply_error(&er, 503, "rendezvous: no waiter thread");
            rm_http_unpark(w->t, &er);
            free(w);
            return RM_OK;
        }
        r->wthread_on = true;
    }
    w->next = r->waiters;
    r->waiters = w;
    if (w->wake < r->wnext) /* due before the waiter thread's next wake-up: wake it to sleep less */
        pthread_cond_broadcast(&r->cv);
    return RM_OK;
}

static int handle_kv_get(rm_rdzv *r, const char *name, int epoch, const char *key, const rm_http_req *req,
                         rm_http_resp *resp)
{
    double wait = 0;
    const char *ws = rm_http_query(req, "wait");
    if (ws) {
        char *end;
        errno = 0;
        wait = strtod(ws, &end);
        if (errno || end == ws || *end || !(wait >= 0))
            return rm_http_reply_error(resp, 400, "wait: must be a number of seconds");
        if (wait > KV_WAIT_MAX_S)
            wait = KV_WAIT_MAX_S;
    }
    double deadline = rm_mono() + wait;
    for (;;) {
        int rc;
        if (kv_step(r, name, epoch, key, deadline, resp, &rc))
            return rc;
        bool parked;
        waiter *w = waiter_park(req, WAIT_KV, deadline, deadline, &parked);
        if (parked) { /* an event-loop server: the waiter thread goes on from here */
            if (!w)
                return RM_OK;
            snprintf(w->job, sizeof w->job, "%s", name);
            w->epoch = epoch;
            snprintf(w->key, sizeof w->key, "%s", key);
            return waiter_add(r, w);
        }
        wait_until(r, deadline);
    }
}

/* s holds a control character (a report's strings end up in status and events). */
static bool ctrl_in(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

static int handle_report(rm_rdzv *r, job *j, const rm_http_req *req, rm_http_resp *resp)
{
    rm_err e = {0};
    int rc;
    if (j->removed)
        return rm_http_reply_text(resp, 200, "application/json", "{\"epoch\":0,\"action\":\"stop\"}");
    const char *wid = NULL, *state = NULL;
    int64_t epoch = 0, rank = -1, step = 0, train_epoch = 0, ckpt = 0, ckfail = 0;
    double loss = 0, sps = 0, gbps = 0, tps = 0;
    const char *ckerr = NULL;
    const cJSON *res = NULL, *ev = NULL, *memo = NULL;
    double mem[5] = {0};
    static const char *const mem_keys[5] = {"params", "grads", "optimizer", "activations", "peakRss"};
    cJSON *body = rm_json_parse(req->body, req->body_len, &e);
    if (!body)
        return rm_http_reply_error(resp, 400, "report: %s", e.msg);
    if (!cJSON_IsObject(body) || rm_json_str(body, "workerId", true, "", &wid, &e) < 0 ||
        rm_json_int(body, "epoch", true, "", &epoch, &e) < 0 ||
        bad(rm_json_int(body, "rank", false, "", &rank, &e)) ||
        bad(rm_json_int(body, "step", false, "", &step, &e)) ||
        bad(rm_json_int(body, "trainEpoch", false, "", &train_epoch, &e)) ||
        bad(rm_json_int(body, "lastCheckpointStep", false, "", &ckpt, &e)) ||
        bad(rm_json_num(body, "loss", false, "", &loss, &e)) ||
        bad(rm_json_num(body, "samplesPerSecond", false, "", &sps, &e)) ||
        bad(rm_json_num(body, "tokensPerSecond", false, "", &tps, &e)) ||
        bad(rm_json_num(body, "allreduceGBps", false, "", &gbps, &e)) ||
        bad(rm_json_str(body, "state", false, "", &state, &e)) ||
        bad(rm_json_int(body, "checkpointFailures", false, "", &ckfail, &e)) ||
        bad(rm_json_str(body, "checkpointError", false, "", &ckerr, &e)) ||
        bad(rm_json_obj(body, "result", false, "", &res, &e)) ||
        bad(rm_json_arr(body, "evaluations", false, "", &ev, &e)) ||
        bad(rm_json_obj(body, "memory", false, "", &memo, &e))) {
        rc = rm_http_reply_error(resp, 400, "report: %s", e.msg[0] ? e.msg : "body must be an object");
        goto out;
    }
    if (!name_ok(wid, sizeof(((rm_rdzv_member *)0)->worker_id) - 1) || epoch < 0 || epoch > 1000000000 ||
        rank < -1 || rank > RM_RDZV_MAX_WORLD || train_epoch < 0 || train_epoch > 1000000000 || ckfail < 0 ||
        ckfail > 1000000000 || (state && strcmp(state, "training") != 0 && strcmp(state, "done") != 0)) {
        rc = rm_http_reply_error(resp, 400, "report: bad workerId, epoch, rank, trainEpoch or state");
        goto out;
    }
    double ta = 0, tl = 0, secs = 0, rsps = 0, rvl = 0, rtps = 0;
    int64_t rsteps = 0;
    if (res && (bad(rm_json_num(res, "testAccuracy", false, "result", &ta, &e)) ||
                bad(rm_json_num(res, "trainLoss", false, "result", &tl, &e)) ||
                bad(rm_json_num(res, "seconds", false, "result", &secs, &e)) ||
                bad(rm_json_num(res, "samplesPerSecond", false, "result", &rsps, &e)) ||
                bad(rm_json_num(res, "valLoss", false, "result", &rvl, &e)) ||
                bad(rm_json_num(res, "tokensPerSecond", false, "result", &rtps, &e)) ||
                bad(rm_json_int(res, "steps", false, "result", &rsteps, &e)))) {
        rc = rm_http_reply_error(resp, 400, "report: %s", e.msg);
        goto out;
    }
    /* the exported model and an export's failure (the rank that exported sends them) */
    const cJSON *rmod = NULL;
    const char *muri = NULL, *msha = NULL, *xerr = NULL;
    double mbytes = 0;
    if (res && (bad(rm_json_obj(res, "model", false, "result", &rmod, &e)) ||
                bad(rm_json_str(res, "exportError", false, "result", &xerr, &e)) ||
                (rmod && (bad(rm_json_str(rmod, "uri", true, "result.model", &muri, &e)) ||
                          bad(rm_json_str(rmod, "sha256", false, "result.model", &msha, &e)) ||
                          bad(rm_json_num(rmod, "bytes", false, "result.model", &mbytes, &e)))))) {
        rc = rm_http_reply_error(resp, 400, "report: %s", e.msg);
        goto out;
    }
    if ((muri && (strlen(muri) >= RM_RDZV_MODEL_URI_MAX || ctrl_in(muri))) ||
        (msha && (strlen(msha) > 64 || ctrl_in(msha))) || !(mbytes >= 0 && mbytes < 1e18) ||
        (xerr && ctrl_in(xerr))) {
        rc = rm_http_reply_error(resp, 400, "report: bad result.model or result.exportError");
        goto out;
    }
    /* rank 0's evaluations (the same on every rank: evaluation is reduced); capped. "step" and
     * "valLoss" are absent from a peer that predates them: its entries are keyed by epoch */
    int nev = 0;
    for (const cJSON *x = ev ? ev->child : NULL; x && nev < RM_RDZV_MAX_EVALS; x = x->next, nev++) {
        int64_t ep = 0, estep = 0;
        double eacc = 0, eloss = 0, evl = 0;
        if (!cJSON_IsObject(x) || rm_json_int(x, "epoch", true, "evaluations[]", &ep, &e) < 0 ||
            bad(rm_json_int(x, "step", false, "evaluations[]", &estep, &e)) ||
            bad(rm_json_num(x, "testAccuracy", false, "evaluations[]", &eacc, &e)) ||
            bad(rm_json_num(x, "trainLoss", false, "evaluations[]", &eloss, &e)) ||
            bad(rm_json_num(x, "valLoss", false, "evaluations[]", &evl, &e)) || ep < 1 || ep > 1000000000 ||
            estep < 0) {
            rc = rm_http_reply_error(resp, 400, "report: %s", e.msg[0] ? e.msg : "bad evaluations[]");
            goto out;
        }
        if (rank == 0)
            rm_rdzv_eval_add(j->evals, &j->nevals, (int)ep, estep, eacc, eloss, evl);
    }
    for (int k = 0; memo && k < 5; k++) {
        if (bad(rm_json_num(memo, mem_keys[k], false, "memory", &mem[k], &e)) || !(mem[k] >= 0) ||
            mem[k] > 1e18) {
            rc = rm_http_reply_error(resp, 400, "report: %s", e.msg[0] ? e.msg : "memory: bad value");
            goto out;
        }
    }
    int i = member_find(j, wid);
    member *m = i >= 0 ? j->mem[i] : member_add(j, wid);
    if (!m) {
        rc = rm_http_reply_error(resp, 400, "report: job has %d workers already", j->nmem);
        goto out;
    }
    double now = rm_wall();
    if (step > m->m.step || m->m.epoch != (int)epoch || m->m.last_report == 0)
        m->m.last_progress = now;
    m->m.last_report = now;
    m->m.epoch = (int)epoch;
    /* the group trains again: the first report of a member of the closed round (rank >= 0
     * only there; kept when the next epoch opens, so a failure right after a recovery cannot
     * hide it) */
    if (j->closed && (int)epoch == j->epoch && m->m.rank >= 0 && j->trained_epoch < j->epoch) {
        j->trained_epoch = j->epoch;
        j->trained_at = now;
        j->trained_world = j->world;
    }
    m->m.step = step;
    m->m.train_epoch = (int)train_epoch;
    m->m.last_checkpoint_step = ckpt;
    m->m.loss = loss;
    m->m.samples_per_second = sps;
    m->m.tokens_per_second = tps;
    m->m.allreduce_gbps = gbps;
    m->m.done = state && strcmp(state, "done") == 0;
    m->m.checkpoint_failures = (int)ckfail;
    snprintf(m->m.checkpoint_error, sizeof m->m.checkpoint_error, "%s", ckfail > 0 && ckerr ? ckerr : "");
    for (int k = 0; k < 5; k++)
        if (mem[k] > j->memmax[k])
            j->memmax[k] = mem[k];
    if (res) {
        j->have_result = true;
        j->test_accuracy = ta;
        j->train_loss = tl;
        j->seconds = secs;
        j->samples_per_second = rsps;
        j->val_loss = rvl;
        j->tokens_per_second = rtps;
        j->steps = rsteps;
        if (muri) {
            snprintf(j->model_uri, sizeof j->model_uri, "%s", muri);
            snprintf(j->model_sha256, sizeof j->model_sha256, "%s", msha ? msha : "");
            j->model_bytes = mbytes;
        }
        if (xerr) /* cut to the cap: the message is for people */
            snprintf(j->export_error, sizeof j->export_error, "%s", xerr);
    }
    const char *action = rm_rdzv_action_names[j->stopped          ? RM_RDZV_STOP
                                              : epoch != j->epoch ? RM_RDZV_REJOIN
                                                                  : RM_RDZV_CONTINUE];
    char buf[96];
    snprintf(buf, sizeof buf, "{\"epoch\":%d,\"action\":\"%s\"}", j->epoch, action);
    rc = rm_http_reply_text(resp, 200, "application/json", buf);
out:
    cJSON_Delete(body);
    return rc;
}

static int handle_state(job *j, rm_http_resp *resp)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "members");
    if (!arr)
        goto fail;
    cJSON_AddStringToObject(o, "job", j->name);
    cJSON_AddNumberToObject(o, "epoch", j->epoch);
    cJSON_AddBoolToObject(o, "closed", j->closed);
    cJSON_AddBoolToObject(o, "stopped", j->stopped);
    cJSON_AddNumberToObject(o, "worldSize", j->closed ? j->world : 0);
    cJSON_AddNumberToObject(o, "desired", j->desired);
    cJSON_AddNumberToObject(o, "minReplicas", j->min);
    cJSON_AddNumberToObject(o, "kvKeys", j->nkv);
    for (int i = 0; i < j->nmem; i++) {
        const rm_rdzv_member *m = &j->mem[i]->m;
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e))
            goto fail;
        cJSON_AddStringToObject(e, "workerId", m->worker_id);
        cJSON_AddStringToObject(e, "addr", m->addr);
        cJSON_AddStringToObject(e, "node", m->node);
        cJSON_AddNumberToObject(e, "rank", m->rank);
        cJSON_AddNumberToObject(e, "epoch", m->epoch);
        cJSON_AddNumberToObject(e, "step", (double)m->step);
        cJSON_AddNumberToObject(e, "loss", m->loss);
        cJSON_AddNumberToObject(e, "lastReport", m->last_report);
        cJSON_AddBoolToObject(e, "done", m->done);
    }
    return reply_cjson(resp, 200, o);
fail:
    cJSON_Delete(o);
    return rm_http_reply_error(resp, 500, "out of memory");
}

/* Split "/v1/jobs/NS/NAME[/REST]" into "NS/NAME" and REST. */
static bool parse_path(const char *path, char name[JOB_NAME_MAX + 1], const char **rest)
{
    static const char pre[] = "/v1/jobs/";
    if (strncmp(path, pre, sizeof pre - 1) != 0)
        return false;
    const char *p = path + sizeof pre - 1;
    const char *s1 = strchr(p, '/');
    if (!s1)
        return false;
    const char *s2 = strchr(s1 + 1, '/');
    size_t n = s2 ? (size_t)(s2 - p) : strlen(p);
    if (n > JOB_NAME_MAX)
        return false;
    memcpy(name, p, n);
    name[n] = '\0';
    *rest = s2 ? s2 + 1 : "";
    return job_name_ok(name);
}

static int dispatch(rm_rdzv *r, const char *name, const char *rest, const rm_http_req *req,
                    rm_http_resp *resp)
{
    job *j = job_find(r, name);
    if (!j)
        return rm_http_reply_error(resp, 404, "unknown job %s", name);
    const char *auth = rm_http_header(req, "Authorization");
    if (!auth || strncmp(auth, "Bearer ", 7) != 0 || !token_eq(j->token, auth + 7)) {
        /* anyone can send these: one line per window, with the count of the rest */
        static rm_ratelimit rl = RM_RATELIMIT_INIT(5, 10.0);
        unsigned long sup = 0;
        if (rm_ratelimit_take(&rl, rm_mono(), &sup))
            rm_warn("rendezvous request refused: bad token job=%s remote=%s path=\"%s\" "
                    "suppressed=%lu",
                    name, req->remote_ip ? req->remote_ip : "?", req->path, sup);
        return rm_http_reply_error(resp, 401, "missing or wrong token");
    }
    bool get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0,
         put = strcmp(req->method, "PUT") == 0;
    if (strcmp(rest, "") == 0) {
        if (!get)
            goto bad_method;
        return handle_state(j, resp);
    }
    if (strcmp(rest, "join") == 0) {
        if (!post)
            goto bad_method;
        return handle_join(r, name, req, resp);
    }
    if (strcmp(rest, "report") == 0) {
        if (!post)
            goto bad_method;
        return handle_report(r, j, req, resp);
    }
    if (strcmp(rest, "servers") == 0) {
        if (!get)
            goto bad_method;
        return handle_servers_get(j, resp);
    }
    if (strncmp(rest, "servers/", 8) == 0) {
        if (!put)
            goto bad_method;
        return handle_server_put(j, rest + 8, req, resp);
    }
    if (strncmp(rest, "kv/", 3) == 0) {
        int epoch;
        char key[KV_MAX_KEY + 1];
        if (!parse_kv_path(rest, &epoch, key))
            return rm_http_reply_error(resp, 400, "kv path must be kv/EPOCH/KEY, KEY of [A-Za-z0-9._-]");
        if (put)
            return handle_kv_put(r, j, epoch, key, req, resp);
        if (get)
            return handle_kv_get(r, name, epoch, key, req, resp);
        goto bad_method;
    }
    return rm_http_reply_error(resp, 404, "no such rendezvous path %s", req->path);
bad_method:
    return rm_http_reply_error(resp, 405, "method %s not allowed on %s", req->method, req->path);
}

int rm_rdzv_handler(const rm_http_req *req, rm_http_resp *resp, void *rdzv)
{
    rm_rdzv *r = rdzv;
    char name[JOB_NAME_MAX + 1];
    const char *rest;
    if (!parse_path(req->path, name, &rest))
        return rm_http_reply_error(resp, 404, "no such rendezvous path");
    if (req->body_len > RM_RDZV_MAX_KV)
        return rm_http_reply_error(resp, 413, "request body over %d bytes", RM_RDZV_MAX_KV);
    pthread_mutex_lock(&r->mu);
    if (r->shutting) {
        pthread_mutex_unlock(&r->mu);
        return rm_http_reply_error(resp, 503, "rendezvous shutting down");
    }
    r->inflight++;
    int rc = dispatch(r, name, rest, req, resp);
    if (--r->inflight == 0 && r->shutting)
        wake_all(r);
    pthread_mutex_unlock(&r->mu); /* r may be freed from here on */
    return rc;
}

int rm_rdzv_serve(rm_rdzv *r, const char *bind, rm_http_server **out, rm_err *err)
{
    rm_http_route route = {NULL, "/v1/jobs/", 1, rm_rdzv_handler, r};
    /* one epoll thread, long polls parked (docs/scale.md) */
    rm_http_opts opts = {.bind = bind, .max_body = RM_RDZV_MAX_KV, .event_loop = true};
    return rm_http_start(&opts, &route, 1, out, err);
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
    return r;
}

/* Shutting down wakes every long poll so it answers at once. */
static void set_shutting(rm_rdzv *r, bool on)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->shutting = on;
    if (on)
        wake_all(r);
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
    wake_all(r);
    pthread_mutex_unlock(&r->mu);
    if (wt)
        pthread_join(r->wthread, NULL);
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
    int n = 0;
    for (job *j = r->jobs; j; j = j->next)
        n += j->removed;
    for (job **pp = &r->jobs; *pp && n > MAX_TOMBSTONES;) {
        job *j = *pp;
        if (j->removed) {
            *pp = j->next;
            job_destroy(j);
            n--;
        } else {
            pp = &j->next;
        }
    }
}

int rm_rdzv_job_set(rm_rdzv *r, const char *jobname, const char *token, int desired, int min,
                    double settle_seconds)
{
    if (!r || !jobname || !token || !job_name_ok(jobname) || !*token || strlen(token) > TOKEN_MAX ||
        strpbrk(token, "\r\n") || desired < 1 || desired > RM_RDZV_MAX_WORLD || min < 1 || min > desired ||
        !(settle_seconds >= 0) || settle_seconds > 3600)
        return RM_EINVAL;
    pthread_mutex_lock(&r->mu);
    job *j = job_find(r, jobname);
    if (!j) {
        if (!(j = calloc(1, sizeof *j))) {
            pthread_mutex_unlock(&r->mu);
            return RM_ENOMEM;
        }
        snprintf(j->name, sizeof j->name, "%s", jobname);
        j->epoch = 1;
        job **pp = &r->jobs;
        while (*pp)
            pp = &(*pp)->next;
        *pp = j;
        rm_info("rendezvous job registered job=%s desired=%d min=%d", jobname, desired, min);
    } else if (j->removed) {
        job_clear(j);
        j->removed = j->stopped = j->closed = false;
        j->epoch++;
        j->world = 0;
        rm_info("rendezvous job registered again job=%s epoch=%d", jobname, j->epoch);
    }
    snprintf(j->token, sizeof j->token, "%s", token);
    j->desired = desired;
    j->min = min;
    j->settle = settle_seconds;
    round_maybe_close(r, j, rm_mono());
    wake_all(r);
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
        rm_info("rendezvous job removed job=%s", jobname);
        wake_all(r);
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
        wake_all(r);
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
            out->members[out->nmembers++] = j->mem[i]->m;
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
        const kv_ent *fe = kv_find(j, RM_RDZV_KV_DATA_FETCH);
        unsigned long long fb = 0, ft = 0;
        if (fe && sscanf(fe->val, "%llu %llu", &fb, &ft) == 2) {
            out->data_bytes = fb;
            out->data_total = ft;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* ---------------- topology (docs/strategies.md#topology) ---------------- */

int rm_rdzv_node_index(const rm_rdzv_peer *peers, int world, int *idx)
{
    if (!peers || !idx || world < 1 || world > RM_RDZV_MAX_WORLD)
        return RM_EINVAL;
    int nnodes = 0;
    for (int q = 0; q < world; q++) {
        idx[q] = -1;
        for (int p = 0; p < q; p++)
            if (strcmp(peers[p].node, peers[q].node) == 0) {
                idx[q] = idx[p];
                break;
            }
        if (idx[q] < 0)
            idx[q] = nnodes++;
    }
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
