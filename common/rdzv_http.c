/* rdzv_http.c — the rendezvous service's HTTP side (protocol in common/rdzv.h): routing and
 * authentication, joins and kv reads held as long polls, the waiter thread that answers the parked
 * ones on an event-loop server, and the job's debugging state. The state they act on is
 * common/rdzv.c's (common/rdzv_internal.h), always under the service's mutex.
 *
 * A long poll on a thread-per-connection server waits in its handler on the condition variable; on
 * an event-loop server (rm_rdzv_serve) it parks its request (rm_http_park) as a waiter record, and
 * one waiter thread evaluates the parked polls after every state change (and at their settle or
 * deadline) and answers those that are done, so thousands of held joins cost no thread each
 * (docs/scale.md). */
#include "common/rdzv_internal.h"
#include "common/clock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/json.h"
#include "common/log.h"
#include "common/ratelimit.h"

#define RDZV_CONN_HEADROOM 256u /* connections beyond one per worker (rm_rdzv_serve_world) */
#define RDZV_CONN_MIN 2048u     /* ... and at least these (rm_http_opts' default) */
#define RDZV_FD_RESERVE 64u     /* open files kept for the rest of the process */

/* Park req (an event-loop server: *parked true) with a new waiter of kind for the waiter thread
 * to answer, its job (jobname) and the strings s[0..3) copied into it (NULL: none; a join: workerId, addr,
 * node; a kv read: the key); NULL with *parked true when out of memory (req was answered 500).
 * *parked false: a thread-per-connection server, the caller waits itself. */
static waiter *waiter_park(const rm_http_req *req, int kind, double deadline, double wake,
                           const char *jobname, const char *const s[3], bool *parked)
{
    rm_http_parked *t = rm_http_park(req);
    *parked = t != NULL;
    if (!t)
        return NULL;
    size_t len[4] = {strlen(jobname) + 1, 0, 0, 0}, all = len[0];
    for (int k = 0; k < 3; k++)
        all += len[k + 1] = s[k] ? strlen(s[k]) + 1 : 0;
    waiter *w = calloc(1, sizeof *w + all);
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
    const char **dst[4] = {&w->job, kind == WAIT_JOIN ? &w->wid : &w->key, &w->addr, &w->node};
    char *p = w->str;
    for (int k = 0; k < 4; k++) {
        if (!len[k])
            continue;
        memcpy(p, k ? s[k - 1] : jobname, len[k]);
        *dst[k] = p;
        p += len[k];
    }
    return w;
}

/* Wait on r->cv until woken or the monotonic deadline passes. */
static void wait_until(rm_rdzv *r, double deadline)
{
    struct timespec ts = rm_mono_ts(deadline);
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
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

/* ---------------- HTTP glue ---------------- */

int rdzv_reply_stop(rm_http_resp *resp)
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
             j->closed ? j->world : rdzv_round_count(j),
             !j->closed && now - j->last_join >= j->settle ? "true" : "false");
    return rm_http_reply_text(resp, 202, "application/json", buf);
}

int rdzv_reply_cjson(rm_http_resp *resp, int status, cJSON *o)
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
    rdzv_shared_body_release(j->round_body);
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
        if (!cJSON_AddNumberToObject(e, "rank", p->rank) ||
            !cJSON_AddStringToObject(e, "workerId", p->worker_id) ||
            !cJSON_AddStringToObject(e, "addr", p->addr) ||
            !cJSON_AddStringToObject(e, "node", rdzv_member_node(p))) {
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
    int t = snprintf(tail, 16, "%d}", me->rank);
    atomic_fetch_add(&b->refs, 1);
    resp->status = 200;
    resp->content_type = "application/json";
    resp->shared = b->data;
    resp->shared_len = b->len;
    resp->release = rdzv_shared_body_release;
    resp->release_ud = b;
    resp->body = tail;
    resp->body_len = (size_t)t;
    return RM_OK;
}

/* The closed round's members by rank (j->ranked), built once per round; NULL on ENOMEM. */
static member **ranked_get(job *j)
{
    if (j->ranked && j->ranked_epoch == j->epoch)
        return j->ranked;
    member **a = realloc(j->ranked, (size_t)(j->world > 0 ? j->world : 1) * sizeof *a);
    if (!a)
        return NULL;
    for (int i = 0; i < j->nmem; i++) {
        member *p = j->mem[i];
        if (p->round == j->epoch && p->rank >= 0 && p->rank < j->world)
            a[p->rank] = p;
    }
    j->ranked = a;
    j->ranked_epoch = j->epoch;
    return a;
}

/* One peer as the join reply writes it (its strings are of rdzv_str_ok's and rdzv_addr_ok's
 * characters: nothing to escape). */
static int peer_json(char *buf, size_t cap, const member *p)
{
    return snprintf(buf, cap, "{\"rank\":%d,\"workerId\":\"%s\",\"addr\":\"%s\",\"node\":\"%s\"}", p->rank,
                    p->worker_id, p->addr, rdzv_member_node(p));
}

/* 200 with the round for member me without the peer list (a join with "peers": false, rdzv.h):
 * the ring neighbours only, a few hundred bytes where the list is ~80 per member (1.3 MB at
 * 16,384 workers, docs/scale.md). */
static int reply_round_brief(rm_http_resp *resp, job *j, const member *me)
{
    member **rk = ranked_get(j);
    if (!rk)
        return rm_http_reply_error(resp, 500, "out of memory");
    /* written on the stack, then kept at its length: every waiting worker's answer is built at
     * once when a round closes, and the bound (~1.4 KiB) was most of a 16,384-worker round's peak */
    char b[128 + 2 * (sizeof(rm_rdzv_member) + 64)];
    size_t cap = sizeof b;
    int r = me->rank, n = j->world;
    int w = snprintf(b, cap, "{\"epoch\":%d,\"worldSize\":%d,\"prev\":", j->epoch, n);
    w += peer_json(b + w, cap - (size_t)w, rk[(r + n - 1) % n]);
    w += snprintf(b + w, cap - (size_t)w, ",\"next\":");
    w += peer_json(b + w, cap - (size_t)w, rk[(r + 1) % n]);
    w += snprintf(b + w, cap - (size_t)w, ",\"rank\":%d}", r);
    char *body = malloc((size_t)w + 1);
    if (!body)
        return rm_http_reply_error(resp, 500, "out of memory");
    memcpy(body, b, (size_t)w + 1);
    resp->status = 200;
    resp->content_type = "application/json";
    resp->body = body;
    resp->body_len = (size_t)w;
    return RM_OK;
}

/* One evaluation of a held join (r->mu held): true when it is answered (*rc, resp), else false
 * with *wake the monotonic time to evaluate it again at the latest. */
static bool join_step(rm_rdzv *r, const char *name, const char *wid, const char *addr, const char *node,
                      int last_epoch, bool peers, double wait_s, double deadline, int *seen_epoch,
                      rm_http_resp *resp, int *rc, double *wake)
{
    job *j = rdzv_job_find(r, name);
    if (r->shutting) {
        *rc = rm_http_reply_error(resp, 503, "rendezvous shutting down");
        return true;
    }
    if (!j) {
        *rc = rdzv_reply_stop(resp);
        return true;
    }
    if (*seen_epoch && j->epoch != *seen_epoch) {
        /* the epoch moved while this join was held: answer so that only a worker that is
         * still alive (it calls again) enters the new round, never a client that gave up */
        *rc = reply_waiting(resp, j->epoch);
        return true;
    }
    double now = rm_mono();
    int out = rdzv_join_eval(r, j, wid, addr, node, last_epoch, now);
    *seen_epoch = j->epoch;
    if (out == J_STOP) {
        *rc = rdzv_reply_stop(resp);
        return true;
    }
    if (out == J_FULL) {
        *rc = rm_http_reply_error(resp, 400, "join: job has %d workers already", j->nmem);
        return true;
    }
    if (out == J_ASSIGNED) {
        const member *me = j->mem[rdzv_member_find(j, wid)];
        *rc = peers ? reply_round(resp, j, me) : reply_round_brief(resp, j, me);
        return true;
    }
    if (now >= deadline) {
        *rc = wait_s < JOIN_POLL_S ? reply_waiting_count(resp, j, rm_mono()) : reply_waiting(resp, j->epoch);
        return true;
    }
    *wake = deadline;
    if (!j->closed && rdzv_round_count(j) >= j->min && j->last_join + j->settle < *wake)
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
    bool peers = true;
    cJSON *body = rm_json_parse(req->body, req->body_len, &e);
    if (!body)
        return rm_http_reply_error(resp, 400, "join: %s", e.msg);
    if (!cJSON_IsObject(body) || rm_json_str(body, "workerId", true, "", &wid, &e) < 0 ||
        rm_json_str(body, "addr", true, "", &addr, &e) < 0 ||
        rdzv_bad(rm_json_int(body, "lastEpoch", false, "", &last_epoch, &e)) ||
        rdzv_bad(rm_json_num(body, "wait", false, "", &wait_s, &e)) ||
        rdzv_bad(rm_json_str(body, "node", false, "", &node, &e)) ||
        rdzv_bad(rm_json_bool(body, "peers", false, "", &peers, &e))) {
        rc = rm_http_reply_error(resp, 400, "join: %s", e.msg[0] ? e.msg : "body must be an object");
        goto out;
    }
    if (!rdzv_str_ok(wid, sizeof(((rm_rdzv_member *)0)->worker_id) - 1) || !rdzv_addr_ok(addr) ||
        last_epoch < -1 || last_epoch > 1000000000 || !(wait_s >= 0 && wait_s <= JOIN_POLL_S)) {
        rc = rm_http_reply_error(resp, 400, "join: bad workerId, addr, lastEpoch or wait");
        goto out;
    }
    if (!node)
        node = "";
    if (node[0] && !rdzv_str_ok(node, RM_RDZV_NODE_MAX)) {
        rc =
            rm_http_reply_error(resp, 400, "join: bad node (at most %d of [A-Za-z0-9._-])", RM_RDZV_NODE_MAX);
        goto out;
    }
    double deadline = rm_mono() + wait_s;
    int seen_epoch = 0;
    for (;;) {
        double wake = deadline;
        if (join_step(r, name, wid, addr, node, (int)last_epoch, peers, wait_s, deadline, &seen_epoch, resp,
                      &rc, &wake))
            break;
        bool parked;
        const char *const strs[3] = {wid, addr, node};
        waiter *w = waiter_park(req, WAIT_JOIN, deadline, wake, name, strs, &parked);
        if (parked) { /* an event-loop server: the waiter thread goes on from here */
            if (!w)
                break;
            w->last_epoch = (int)last_epoch;
            w->peers = peers;
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

/* "kv/EPOCH/KEY" → epoch and key; false if malformed. */
static bool parse_kv_path(const char *rest, int *epoch, char *key)
{
    const char *p = rest + 3, *slash = strchr(p, '/');
    if (!slash || slash == p || slash - p > 10)
        return false;
    char num[16];
    memcpy(num, p, (size_t)(slash - p));
    num[slash - p] = '\0';
    if (!rdzv_is_digits(num))
        return false;
    long v = strtol(num, NULL, 10);
    if (v < 1 || v > 1000000000L || !rdzv_str_ok(slash + 1, KV_MAX_KEY))
        return false;
    *epoch = (int)v;
    strcpy(key, slash + 1);
    return true;
}

static int handle_kv_put(rm_rdzv *r, job *j, int epoch, const char *key, const rm_http_req *req,
                         rm_http_resp *resp)
{
    if (j->stopped)
        return rdzv_reply_stop(resp);
    if (epoch < j->epoch)
        return rm_http_reply_error(resp, 410, "epoch %d is gone (current %d)", epoch, j->epoch);
    if (epoch > j->epoch)
        return rm_http_reply_error(resp, 400, "epoch %d is not open (current %d)", epoch, j->epoch);
    if (req->body_len > RM_RDZV_MAX_KV)
        return rm_http_reply_error(resp, 413, "value over %d bytes", RM_RDZV_MAX_KV);
    kv_ent *e = rdzv_kv_find(j, key);
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
    rdzv_wake_all(r);
    resp->status = 204;
    return RM_OK;
}

/* One evaluation of a held kv read (r->mu held): true when answered (*rc, resp). */
static bool kv_step(rm_rdzv *r, const char *name, int epoch, const char *key, double deadline,
                    rm_http_resp *resp, int *rc)
{
    job *j = rdzv_job_find(r, name);
    if (r->shutting) {
        *rc = rm_http_reply_error(resp, 503, "rendezvous shutting down");
        return true;
    }
    if (!j || j->stopped) {
        *rc = rdzv_reply_stop(resp);
        return true;
    }
    if (epoch < j->epoch) {
        *rc = rm_http_reply_error(resp, 410, "epoch %d is gone (current %d)", epoch, j->epoch);
        return true;
    }
    kv_ent *e = epoch == j->epoch ? rdzv_kv_find(j, key) : NULL;
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

/* ---- held reports (docs/scale.md, "Held reports") ---- */

void rdzv_held_flush(rm_rdzv *r)
{
    if (!r->held)
        return;
    r->hflush = true;
    pthread_cond_broadcast(&r->cv);
}

/* Answer h with its job's action now (r->mu held) and free it. */
/* The job a held report was about: NULL once it is gone, also when a job of its name was
 * registered since (its epochs start again: the old report's epoch could read as current). */
static const job *held_job(rm_rdzv *r, const held_report *h)
{
    const job *j = rdzv_job_find(r, h->job);
    return j && j->incarnation == h->incarnation ? j : NULL;
}

static void held_answer(rm_rdzv *r, held_report *h)
{
    rm_http_resp resp;
    memset(&resp, 0, sizeof resp);
    if (rdzv_reply_report(&resp, held_job(r, h), h->epoch) != RM_OK)
        rm_http_reply_error(&resp, 500, "out of memory");
    rm_http_unpark(h->t, &resp);
    free(h);
}

/* The waiter thread's turn at the held reports (r->mu held): after a flush every one whose job
 * moved on or stopped (all of them while shutting down), then those whose hold is over, oldest
 * first. Returns the next deadline (now + 1 s when none). */
static double held_service(rm_rdzv *r, double now)
{
    if (r->hflush || r->shutting || r->wquit) {
        bool all = r->shutting || r->wquit;
        r->hflush = false;

        for (held_report **pp = &r->held; *pp;) {
            held_report *h = *pp;
            if (all || rdzv_report_action(held_job(r, h), h->epoch) != RM_RDZV_CONTINUE) {
                *pp = h->next;
                if (!*pp)
                    r->held_tail = pp;
                held_answer(r, h);
            } else
                pp = &h->next;
        }
    }
    while (r->held && r->held->deadline <= now) {
        held_report *h = r->held;
        r->held = h->next;
        held_answer(r, h);
    }
    return r->held ? r->held->deadline : now + 1.0;
}

static bool waiter_thread_start(rm_rdzv *r);

bool rdzv_hold_report(rm_rdzv *r, const job *j, const rm_http_req *req)
{
    if (r->shutting)
        return false;
    size_t n = strlen(j->name) + 1;
    held_report *h = calloc(1, sizeof *h + n);
    if (!h)
        return false;
    if (!(h->t = rm_http_park(req))) { /* a thread-per-connection server: answered at once */
        free(h);
        return false;
    }
    memcpy(h->job, j->name, n);
    h->epoch = j->epoch;
    h->incarnation = j->incarnation;
    if (!waiter_thread_start(r)) { /* nobody would answer it later */
        held_answer(r, h);
        return true;
    }
    h->deadline = rm_mono() + REPORT_HOLD_S;
    bool first = !r->held;
    if (first)
        r->held_tail = &r->held;
    *r->held_tail = h;
    r->held_tail = &h->next;
    if (first && h->deadline < r->wnext) /* the waiter thread sleeps past it: wake it */
        pthread_cond_broadcast(&r->cv);
    return true;
}

/* The waiter thread (event-loop servers): evaluates every parked long poll after each state change
 * (rdzv_wake_all) and at the earliest deadline, and answers those that are done, as their handlers'
 * loops would have (docs/scale.md). */
static void *waiter_main(void *arg)
{
    rm_rdzv *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        double now = rm_mono(), next = held_service(r, now);
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
                            ? join_step(r, w->job, w->wid, w->addr, w->node, w->last_epoch, w->peers,
                                        w->wait_s, w->deadline, &w->seen_epoch, &resp, &rc, &wake)
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
        if (r->wquit && !r->waiters && !r->held)
            break;
        r->wnext = next;
        if (!r->wdirty && !r->hflush)
            wait_until(r, next);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* The waiter thread, started at the first parked poll or held report (r->mu held). */
static bool waiter_thread_start(rm_rdzv *r)
{
    if (!r->wthread_on && pthread_create(&r->wthread, NULL, waiter_main, r) == 0)
        r->wthread_on = true;
    return r->wthread_on;
}

/* Park w (r->mu held): the waiter thread answers it. Starts that thread at the first one. */
static int waiter_add(rm_rdzv *r, waiter *w)
{
    if (!waiter_thread_start(r)) {
        rm_http_resp er = {0};
        rm_http_reply_error(&er, 503, "rendezvous: no waiter thread");
        rm_http_unpark(w->t, &er);
        free(w);
        return RM_OK;
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
        const char *const strs[3] = {key, NULL, NULL};
        waiter *w = waiter_park(req, WAIT_KV, deadline, deadline, name, strs, &parked);
        if (parked) { /* an event-loop server: the waiter thread goes on from here */
            if (!w)
                return RM_OK;
            w->epoch = epoch;
            return waiter_add(r, w);
        }
        wait_until(r, deadline);
    }
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
        const member *m = j->mem[i];
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(arr, e))
            goto fail;
        cJSON_AddStringToObject(e, "workerId", m->worker_id);
        cJSON_AddStringToObject(e, "addr", m->addr);
        cJSON_AddStringToObject(e, "node", rdzv_member_node(m));
        cJSON_AddNumberToObject(e, "rank", m->rank);
        cJSON_AddNumberToObject(e, "epoch", m->epoch);
        cJSON_AddNumberToObject(e, "step", (double)m->step);
        cJSON_AddNumberToObject(e, "loss", m->loss);
        cJSON_AddNumberToObject(e, "lastReport", m->last_report);
        cJSON_AddBoolToObject(e, "done", m->done);
    }
    return rdzv_reply_cjson(resp, 200, o);
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
    return rdzv_job_name_ok(name);
}

static int dispatch(rm_rdzv *r, const char *name, const char *rest, const rm_http_req *req,
                    rm_http_resp *resp)
{
    job *j = rdzv_job_find(r, name);
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
        return rdzv_handle_report(r, j, req, resp);
    }
    if (strcmp(rest, "servers") == 0) {
        if (!get)
            goto bad_method;
        return rdzv_handle_servers_get(j, resp);
    }
    if (strncmp(rest, "servers/", 8) == 0) {
        if (!put)
            goto bad_method;
        return rdzv_handle_server_put(j, rest + 8, req, resp);
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
        rdzv_wake_all(r);
    pthread_mutex_unlock(&r->mu); /* r may be freed from here on */
    return rc;
}

int rm_rdzv_serve_world(rm_rdzv *r, const char *bind, int workers, rm_http_server **out, rm_err *err)
{
    if (workers < 1 || workers > RM_RDZV_MAX_WORLD)
        workers = RM_RDZV_MAX_WORLD;
    /* one connection per worker plus the controller's, probes and re-connections; within the open
     * files this process may have (raised to the hard limit), less a reserve for everything else */
    struct rlimit rl;
    unsigned conns = (unsigned)workers + RDZV_CONN_HEADROOM;
    if (conns < RDZV_CONN_MIN)
        conns = RDZV_CONN_MIN;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max && rl.rlim_cur < (rlim_t)conns + RDZV_FD_RESERVE) {
            rlim_t want = (rlim_t)conns + RDZV_FD_RESERVE;
            rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)conns + RDZV_FD_RESERVE) {
            unsigned fit = rl.rlim_cur > 2 * RDZV_FD_RESERVE ? (unsigned)(rl.rlim_cur - RDZV_FD_RESERVE)
                                                             : RDZV_FD_RESERVE;
            rm_warn("rendezvous: the open-file limit (RLIMIT_NOFILE %llu) holds %u connections, not the %u "
                    "that %d workers need",
                    (unsigned long long)rl.rlim_cur, fit, conns, workers);
            conns = fit;
        }
    }
    rm_http_route route = {NULL, "/v1/jobs/", 1, rm_rdzv_handler, r};
    /* one epoll thread, long polls parked (docs/scale.md) */
    /* every worker may be between connecting and sending its first join at once (a job's start):
     * unserved connections in all may be as many as the workers, or the slow-client defence cuts
     * the oldest of them; the per-address cap (conns / 8) still bounds a flood from one address */
    rm_http_opts opts = {.bind = bind,
                         .max_body = RM_RDZV_MAX_KV,
                         .event_loop = true,
                         .max_conns = conns,
                         .max_pending = conns};
    return rm_http_start(&opts, &route, 1, out, err);
}

int rm_rdzv_serve(rm_rdzv *r, const char *bind, rm_http_server **out, rm_err *err)
{
    return rm_rdzv_serve_world(r, bind, RM_RDZV_MAX_WORLD, out, err);
}
