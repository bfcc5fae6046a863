/* ps_server.c — `ringmaster-worker ps`: one parameter server (see ps_server.h).
 *
 * Design: the rules (which gradient counts, when a worker may go on) are worker/ps/ps_core.h's pure
 * functions; this file only executes them: sockets, threads, the optimizer, checkpoints, metrics.
 * Requests are dispatched through a small op table (OPS below) so later strategies add entries. */
#include "worker/ps/ps_server.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/admit.h"
#include "common/clock.h"
#include "common/health.h"
#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/ratelimit.h"
#include "common/rdzv.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"
#include "kernels/kernels.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/comm/comm.h"
#include "common/faults.h"
#include "worker/ps/lbfgs_coord.h"
#include "worker/model/export.h"
#include "worker/model/model.h"
#include "worker/comm/net.h"
#include "worker/optim/optim.h"
#include "worker/ps/ps_core.h"
#include "worker/data/reader.h"
#include "worker/ps/ps_wire.h"

#define PS_IDLE_S 600.0       /* a connection silent this long is closed */
#define PS_DEAD_AFTER_S 10.0  /* a worker silent this long no longer holds the others */
#define PS_PENDING_MAX 64     /* unfinished handshakes held at once (common/admit.h) ... */
#define PS_PENDING_PER_SRC 16 /* ... and from one source address */

static volatile sig_atomic_t g_ps_term;
static void ps_on_term(int sig)
{
    (void)sig;
    g_ps_term = 1;
}

typedef struct server server;

/* Why a connection was refused: the label values of ringmaster_ps_refused_connections_total. */
enum {
    PS_REFUSE_PROTOCOL,
    PS_REFUSE_TOKEN,
    PS_REFUSE_HANDSHAKE,
    PS_REFUSE_FULL,
    PS_REFUSE_MALFORMED,
    PS_REFUSE_ROOM,
    PS_REFUSE_N
};
static const char *const PS_REFUSE_NAMES[PS_REFUSE_N] = {"protocol", "token",     "handshake",
                                                         "full",     "malformed", "room"};

typedef struct conn {
    server *s;
    int fd;
    char who[64];
    pthread_t th;
    rm_admit_pending adm; /* source and accept time */
    bool member;          /* holds one of the RM_PS_MAX_CONNS places (s->nconns) */
    float *buf;           /* shard-sized, once a member: a push's gradient in, a fetch's floats out */
} conn;

/* A connection still in its handshake (common/admit.h): the acceptor may drop it to make room, by
 * shutdown() of its socket under adm_mu; its thread takes it out of the table (under adm_mu) before
 * it closes the socket, so the acceptor never touches a closed descriptor. */
typedef struct ps_pending {
    rm_admit_pending adm;
    conn *c;
} ps_pending;

struct server {
    /* settings */
    int index, nservers, world;
    rm_ps_spec ps;
    rm_training_spec t;
    char token[256];
    char job[256];
    char addrs[RM_PS_MAX_SERVERS][128];
    char bind[128];
    int port;
    char ckpt_dir[4096]; /* "" = none */
    int ckpt_interval, ckpt_keep;
    double timeout_s;
    char metrics_addr[128];
    rm_faults faults;
    double progress_deadline_s; /* RINGMASTER_PROGRESS_DEADLINE; 0: /healthz always ok */
    rm_rdzv_client *rdzv;       /* RINGMASTER_RENDEZVOUS: where this server registers (NULL: none) */
    char advertise[128];        /* the host workers reach this server at (port: s->port) */
    double registered_at;       /* monotonic; 0: not yet */

    /* shard */
    rm_model_shape shape;
    const rm_model_family *family; /* borrowed (static) */
    size_t total, off, len;
    float *params;
    rm_optim opt;
    rm_ps_sync sync;     /* sync: accumulator + version */
    int64_t version;     /* async: updates applied (sync: sync.version) */
    int64_t draws;       /* server 0, async: global batches handed out */
    int64_t warm_others; /* async: pushes by workers other than 0 during the warm start */
    bool warm_logged;    /* server 0: "warm start done" was logged */
    rm_ps_clocks clocks;
    rm_ps_view view; /* sync: the newest view of the workers alive (ps_core.h) */
    float lr;        /* sync: the learning rate of the newest push */
    int64_t last_ckpt_version;
    /* checkpoints (docs/strategies.md#failure-semantics): every shard writes one at the same
     * versions (multiples of the interval, under mu as the version is applied), so the servers'
     * folders hold versions every shard has and a group can roll back to one of them */
    int ckpt_failures; /* consecutive failed writes (reported with the registration) */
    char ckpt_error[128];
    bool report_now; /* the failure count changed: register (and so report) again now */

    /* the servers' agreement on one version (ps_core.h rm_ps_agree_decide): with a rendezvous
     * and not L-BFGS, a server serves only once every server settled on the same version */
    bool agree_on;
    bool serving;          /* under mu */
    rm_rdzv_ps_group me;   /* under mu: this server's record, sent with the registration */
    double agree_at;       /* monotonic: the last look at the others' records */
    uint64_t agree_logged; /* the generation whose "settled" line was logged */

    /* concurrency */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* monotonic clock; broadcast on every apply */
    atomic_int nconns; /* members: connections that proved the token (at most RM_PS_MAX_CONNS) */
    pthread_mutex_t adm_mu;
    ps_pending pend[PS_PENDING_MAX]; /* under adm_mu: connections in their handshake */
    int npend;
    int lfd;
    /* liveness (/healthz, common/health.h): a beat per update applied and per reply sent; requests
     * read but not answered yet - a server that stops answering while they wait goes stale, an
     * idle one (no request waiting) is live */
    rm_health *health;
    atomic_int in_service;

    /* metrics */
    rm_metrics *reg;
    rm_http_server *http;
    rm_series *m_pushes, *m_fetches, *m_dropped, *m_staleness, *m_version, *m_apply, *m_draws;
    rm_series *m_refused[PS_REFUSE_N]; /* by reason: the refusal log is rate-limited, these are not */

    /* Sandblaster L-BFGS (optimizer lbfgs; worker/ps/lbfgs_coord.h): this shard's vectors, and on
     * server 0 the coordinator */
    rm_lbfgs_shard *lb;
    rm_lbfgs_coord *coord;
};

static rm_ratelimit g_ps_refuse_rl = RM_RATELIMIT_INIT(5, 10.0);

static int64_t cur_version(const server *s)
{
    return s->ps.mode == RM_PS_SYNC ? s->sync.version : s->version;
}

static void timed_wait(server *s, double until)
{
    double now = rm_mono(), dt = until - now;
    if (dt <= 0)
        return;
    if (dt > 0.5)
        dt = 0.5; /* wake at least twice a second: dead workers stop holding anybody */
    struct timespec ts = rm_mono_ts(now + dt);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* A fault for this server (role=ps, index), due at this version. Under mu. */
static void check_fault(server *s)
{
    const rm_fault *f = rm_faults_due(&s->faults, RM_FAULT_PS_RANK(s->index), cur_version(s));
    if (!f)
        return;
    rm_warn("fault injected kind=%s role=ps index=%d version=%lld", rm_fault_kind_name(f->kind), s->index,
            (long long)cur_version(s));
    if (f->kind == RM_FAULT_EXIT)
        _exit(137);
    /* hang: keep the state's lock, so nothing is applied and no request is answered (workers wait,
     * /healthz goes stale); only SIGTERM/SIGKILL end it, and without a checkpoint */
    for (;;) {
        if (g_ps_term)
            _exit(143);
        sleep(1);
    }
}

static void ckpt_write_locked(server *s);
/* /healthz: an idle server (no request waiting for an answer) is live; one that holds requests
 * without answering or applying anything for the progress deadline is stalled. */
static int ps_healthz(const rm_http_req *req, rm_http_resp *resp, void *arg)
{
    server *s = arg;
    if (atomic_load(&s->in_service) == 0)
        rm_health_beat(s->health);
    return rm_health_healthz(req, resp, s->health);
}

static void applied(server *s, double t0)
{
    rm_health_beat(s->health);
    rm_series_observe(s->m_apply, rm_mono() - t0);
    rm_series_set(s->m_version, (double)cur_version(s));
    int64_t v = cur_version(s);
    if (v > s->last_ckpt_version && v % s->ckpt_interval == 0)
        ckpt_write_locked(s); /* before a fault can fire: what a dying server had not written is lost */
    pthread_cond_broadcast(&s->cv);
    check_fault(s);
}

/* ---- the servers' agreement (ps_core.h rm_ps_agree_decide) ---- */

/* May this server answer with its shard now? While the group settles on a version (a server
 * (re)started) it waits up to a second and says "not yet" even if it settled meanwhile: an answer
 * only ever comes from a shard that served when the request came. Under mu. */
static bool serving_now(server *s)
{
    if (s->serving)
        return true;
    double until = rm_mono() + 1;
    while (!g_ps_term && !s->serving && rm_mono() < until)
        timed_wait(s, until);
    return false;
}

/* ---- ops ---- */

typedef int (*op_fn)(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r);

static int op_info(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r)
{
    (void)c;
    (void)q;
    pthread_mutex_lock(&s->mu);
    r->version = cur_version(s);
    pthread_mutex_unlock(&s->mu);
    r->a = (int64_t)s->off;
    r->b = (int64_t)s->len;
    return RM_OK;
}

/* Wait (bounded) while the staleness bound holds this worker back. Under mu. */
static void staleness_wait(server *s, int worker, int64_t clock)
{
    double until = rm_mono() + s->timeout_s;
    int bound = rm_ps_warm_bound(s->ps.staleness_bound, s->version, s->ps.warm_start_steps);
    while (!g_ps_term &&
           !rm_ps_clocks_may_proceed(&s->clocks, worker, clock, bound, rm_mono(), PS_DEAD_AFTER_S) &&
           rm_mono() < until) {
        timed_wait(s, until);
        rm_ps_clocks_note(&s->clocks, worker, clock, rm_mono()); /* waiting is not dying */
    }
}

/* Sync: take the request's view of the workers alive (ps_core.h); when it shrank the step in
 * progress may now have its live - b gradients: apply it. Under mu. */
static void sync_view(server *s, const rm_ps_req *q)
{
    if (!rm_ps_view_note(&s->view, q->group, (int)q->world))
        return;
    int need = rm_ps_sync_need_for(s->view.live, s->ps.backup_workers);
    if (need != s->sync.need)
        rm_info("workers alive changed; a step now waits for %d gradients epoch=%lld live=%d "
                "version=%lld",
                need, (long long)s->view.epoch, s->view.live, (long long)s->sync.version);
    rm_ps_sync_set_need(&s->sync, need);
}

/* Sync: apply the step in progress if it has its gradients (the linear rule when fewer workers
 * than the job's are alive). Under mu. */
static void sync_maybe_apply(server *s, double t0)
{
    if (!rm_ps_sync_ready(&s->sync))
        return;
    float *g = s->sync.accum; /* averaged in place: read before the next push (under mu) */
    int c = rm_ps_sync_average(&s->sync, g);
    float lr = s->lr * rm_ps_lr_scale(s->view.live, s->world);
    rm_optim_step(&s->opt, s->params, g, lr);
    if (s->view.live < s->world)
        rm_info("step applied with the survivors version=%lld gradients=%d live=%d lr=%.5f",
                (long long)s->sync.version, c, s->view.live, (double)lr);
    applied(s, t0);
}

static int op_fetch(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r)
{
    pthread_mutex_lock(&s->mu);
    if (!serving_now(s)) {
        r->version = cur_version(s);
        r->status = RM_PS_ST_TIMEOUT;
        pthread_mutex_unlock(&s->mu);
        return RM_OK;
    }
    /* sync: answer "not yet" within a second, so the worker asks again with its newest view */
    double until = rm_mono() + (s->ps.mode == RM_PS_SYNC && s->timeout_s > 1 ? 1 : s->timeout_s);
    if (s->ps.mode == RM_PS_SYNC) {
        sync_view(s, q);
        sync_maybe_apply(s, rm_mono());
        /* wait for the step in progress only: a shard further behind (restored from an older
         * checkpoint) answers at once, and the workers go back to its step to catch it up */
        while (!g_ps_term && s->sync.version + 1 == q->step && rm_mono() < until)
            timed_wait(s, until);
    } else {
        rm_ps_clocks_note(&s->clocks, (int)q->worker, q->step, rm_mono()); /* step: its clock */
        staleness_wait(s, (int)q->worker, q->step);
    }
    r->version = cur_version(s);
    if (!s->serving || (s->ps.mode == RM_PS_SYNC && r->version + 1 == q->step)) {
        r->status = RM_PS_ST_TIMEOUT;
    } else {
        memcpy(c->buf, s->params, s->len * sizeof(float));
        r->nfloats = (uint32_t)s->len;
    }
    pthread_mutex_unlock(&s->mu);
    rm_series_inc(s->m_fetches, 1);
    return RM_OK;
}

static int op_push(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r)
{
    rm_series_inc(s->m_pushes, 1);
    pthread_mutex_lock(&s->mu);
    double t0 = rm_mono();
    if (!s->serving) { /* a gradient of parameters the group is rolling back */
        r->status = RM_PS_ST_DROPPED;
        r->version = cur_version(s);
        pthread_mutex_unlock(&s->mu);
        rm_series_inc(s->m_dropped, 1);
        return RM_OK;
    }
    if (s->ps.mode == RM_PS_SYNC) {
        sync_view(s, q);
        s->lr = q->lr;
        rm_ps_outcome o = rm_ps_sync_push(&s->sync, (int)q->worker, q->step, c->buf);
        if (o == RM_PS_AHEAD) {
            /* this shard was rolled back (docs/strategies.md#failure-semantics: every server
             * restored one version): the gradient is for a step it never reached; it is dropped
             * and the worker's fetch takes it back to this shard's step */
            rm_warn("gradient for a step ahead of this shard dropped; the workers come back to "
                    "its step version=%lld step=%lld",
                    (long long)s->sync.version, (long long)q->step);
            o = RM_PS_DROP_LATE;
        }
        if (o == RM_PS_DROP_LATE || o == RM_PS_DROP_DUP) {
            r->status = RM_PS_ST_DROPPED;
            rm_series_inc(s->m_dropped, 1);
        } else if (o == RM_PS_BAD) {
            r->status = RM_PS_ST_BAD;
        }
        sync_maybe_apply(s, t0);
    } else {
        if (s->version < s->ps.warm_start_steps && q->worker != 0)
            s->warm_others++; /* a push that is not worker 0's during the warm start */
        int64_t st = rm_ps_staleness(s->version, q->from_version);
        rm_series_observe(s->m_staleness, (double)st);
        rm_optim_step(&s->opt, s->params, c->buf, q->lr);
        s->version++;
        applied(s, t0);
        rm_ps_clocks_note(&s->clocks, (int)q->worker, q->step, rm_mono());
        staleness_wait(s, (int)q->worker, q->step);
    }
    r->version = cur_version(s);
    pthread_mutex_unlock(&s->mu);
    return RM_OK;
}

static int op_draw(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r)
{
    (void)c;
    pthread_mutex_lock(&s->mu);
    if (!serving_now(s)) {
        r->version = cur_version(s);
        r->status = RM_PS_ST_TIMEOUT;
        pthread_mutex_unlock(&s->mu);
        return RM_OK;
    }
    /* warm start (ps_core.h): a worker other than 0 waits here, up to a second at a time (it asks
     * again: "not yet"), until worker 0 alone made the first warmStartSteps updates */
    int64_t warm = s->ps.mode == RM_PS_ASYNC ? s->ps.warm_start_steps : 0;
    double until = rm_mono() + 1;
    while (!g_ps_term &&
           rm_ps_warm_holds((int)q->worker, s->version, warm, &s->clocks, rm_mono(), PS_DEAD_AFTER_S) &&
           rm_mono() < until)
        timed_wait(s, until);
    r->version = cur_version(s);
    r->b = warm > 0 ? s->version : 0; /* where a worker that starts now sets its clock */
    if (rm_ps_warm_holds((int)q->worker, s->version, warm, &s->clocks, rm_mono(), PS_DEAD_AFTER_S)) {
        r->status = RM_PS_ST_TIMEOUT;
        pthread_mutex_unlock(&s->mu);
        return RM_OK;
    }
    if (warm > 0 && q->worker != 0 && !s->warm_logged) {
        s->warm_logged = true;
        rm_info("warm start done: the other workers join version=%lld warm_start_steps=%lld "
                "others_pushes_during_warm_start=%lld",
                (long long)s->version, (long long)warm, (long long)s->warm_others);
    }
    if (s->draws >= q->step) {
        r->status = RM_PS_ST_DONE;
    } else {
        r->a = s->draws++;
        rm_series_set(s->m_draws, (double)s->draws);
    }
    r->version = cur_version(s);
    pthread_mutex_unlock(&s->mu);
    return RM_OK;
}

/* Sandblaster L-BFGS ops (worker/ps/lbfgs_coord.h): refused unless the job's optimizer is lbfgs. */
static int op_lb_vec(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r)
{
    (void)c;
    if (!s->lb || q->worker != RM_LBFGS_COORD_ID) {
        r->status = RM_PS_ST_BAD;
        return RM_OK;
    }
    pthread_mutex_lock(&s->mu);
    rm_lbfgs_shard_vec(s->lb, q, r);
    if (r->b == 1) { /* BEGIN: a pass; the version bump checkpoints X */
        s->sync.version++;
        applied(s, rm_mono());
    }
    pthread_mutex_unlock(&s->mu);
    return RM_OK;
}

static int op_lb_push(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r)
{
    if (!s->lb) {
        r->status = RM_PS_ST_BAD;
        return RM_OK;
    }
    rm_series_inc(s->m_pushes, 1);
    pthread_mutex_lock(&s->mu);
    rm_lbfgs_shard_push(s->lb, q, c->buf, r);
    pthread_mutex_unlock(&s->mu);
    if (r->status == RM_PS_ST_DROPPED)
        rm_series_inc(s->m_dropped, 1);
    return RM_OK;
}

static int op_lb_claim(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r)
{
    (void)c;
    if (!s->coord)
        r->status = RM_PS_ST_BAD;
    else
        rm_lbfgs_coord_claim(s->coord, (int)q->worker, q, r);
    return RM_OK;
}

static int op_lb_report(server *s, conn *c, const rm_ps_req *q, rm_ps_rep *r)
{
    (void)c;
    if (!s->coord)
        r->status = RM_PS_ST_BAD;
    else
        rm_lbfgs_coord_report(s->coord, (int)q->worker, q, r);
    return RM_OK;
}

/* The op table: what a request may carry and who handles it. */
static const struct {
    uint32_t op;
    const char *name;
    bool shard_payload; /* the request carries exactly the shard's floats */
    op_fn fn;
} OPS[] = {
    {RM_PS_OP_INFO, "info", false, op_info},
    {RM_PS_OP_FETCH, "fetch", false, op_fetch},
    {RM_PS_OP_PUSH, "push", true, op_push},
    {RM_PS_OP_DRAW, "draw", false, op_draw},
    {RM_PS_OP_LB_VEC, "lb_vec", false, op_lb_vec},
    {RM_PS_OP_LB_PUSH, "lb_push", true, op_lb_push},
    {RM_PS_OP_LB_CLAIM, "lb_claim", false, op_lb_claim},
    {RM_PS_OP_LB_REPORT, "lb_report", false, op_lb_report},
};

/* A refused connection: counted by reason (ringmaster_ps_refused_connections_total), logged at most
 * five times in ten seconds (a stranger triggers these at will). */
static void refuse(server *s, int reason, const char *who, const char *why)
{
    if (s->m_refused[reason])
        rm_series_inc(s->m_refused[reason], 1);
    unsigned long sup = 0;
    if (rm_ratelimit_take(&g_ps_refuse_rl, rm_mono(), &sup))
        rm_warn("parameter server refused connection from=%s reason=\"%s\" suppressed=%lu", who, why, sup);
}

/* The reason class of a failed handshake (rm_ps_hs_accept's error code). */
static int refuse_reason(int rc)
{
    return rc == RM_EAUTH    ? PS_REFUSE_TOKEN
           : rc == RM_EAGAIN ? PS_REFUSE_FULL
           : rc == RM_EPROTO ? PS_REFUSE_PROTOCOL
                             : PS_REFUSE_HANDSHAKE;
}

/* Take c out of the pending table; false when the acceptor has dropped it already. */
static bool pending_leave(server *s, conn *c)
{
    bool found = false;
    pthread_mutex_lock(&s->adm_mu);
    for (int i = 0; i < s->npend && !found; i++)
        if (s->pend[i].c == c) {
            s->pend[i] = s->pend[--s->npend];
            found = true;
        }
    pthread_mutex_unlock(&s->adm_mu);
    return found;
}

/* rm_ps_hs_accept's claim, once the proof checked out: c leaves the pending table first (so the
 * acceptor can no longer drop a member), then takes a member's place if there is one. */
static bool member_claim(void *ctx)
{
    conn *c = ctx;
    server *s = c->s;
    if (!pending_leave(s, c))
        return false; /* dropped to make room a moment ago: its socket is shut down already */
    int n = atomic_load(&s->nconns);
    while (n < RM_PS_MAX_CONNS)
        if (atomic_compare_exchange_weak(&s->nconns, &n, n + 1))
            return c->member = true;
    return false;
}

static void *conn_main(void *arg)
{
    conn *c = arg;
    server *s = c->s;
    rm_err e = {0};
    int worker = -1;
    int rc = rm_ps_hs_accept(c->fd, s->token, s->index, s->nservers, c->adm.t0 + RM_PS_HANDSHAKE_S,
                             member_claim, c, &worker, &e);
    (void)pending_leave(s, c); /* failed before its claim: still in the table, unless dropped */
    if (rc) {
        refuse(s, refuse_reason(rc), c->who, e.msg);
        worker = -1;
        if (c->member) /* claimed, then the acknowledgement failed */
            goto member_out;
        goto out;
    }
    if (!(c->buf = malloc(s->len * sizeof(float)))) {
        rm_warn("parameter server: out of memory for a connection from=%s", c->who);
        goto member_out;
    }
    rm_debug("worker connected from=%s worker=%d", c->who, worker);
    for (;;) {
        rm_ps_req q;
        rm_ps_rep r;
        rc = rm_net_recv_all(c->fd, &q, sizeof q, rm_mono() + PS_IDLE_S, &e);
        if (rc)
            break; /* closed, idle or reset: the worker reconnects when it needs us */
        size_t i = 0;
        while (i < RM_ARRAY_LEN(OPS) && OPS[i].op != q.op)
            i++;
        if (q.magic != RM_PS_MAGIC || q.check != rm_ps_req_check(&q) || i == RM_ARRAY_LEN(OPS) ||
            q.worker != (uint32_t)worker || (OPS[i].shard_payload ? q.nfloats != s->len : q.nfloats != 0)) {
            refuse(s, PS_REFUSE_MALFORMED, c->who, "malformed request");
            break;
        }
        if (q.nfloats &&
            (rc = rm_net_recv_all(c->fd, c->buf, s->len * sizeof(float), rm_mono() + s->timeout_s, &e)))
            break;
        memset(&r, 0, sizeof r);
        r.magic = RM_PS_MAGIC;
        atomic_fetch_add(&s->in_service, 1);
        rc = OPS[i].fn(s, c, &q, &r);
        if (rc == RM_OK)
            rc = rm_ps_reply(c->fd, &r, c->buf, rm_mono() + s->timeout_s, &e);
        atomic_fetch_sub(&s->in_service, 1);
        if (rc)
            break;
        rm_health_beat(s->health); /* answered: serving */
    }
    if (s->coord)
        rm_lbfgs_coord_worker_lost(s->coord, worker); /* its portions go back to the queue */
member_out:
    atomic_fetch_sub(&s->nconns, 1);
out:
    close(c->fd);
    free(c->buf);
    free(c);
    return NULL;
}

/* The acceptor: every connection starts pending (common/admit.h: at most PS_PENDING_PER_SRC per
 * source and PS_PENDING_MAX in all, the oldest dropped to make room, each dropped RM_PS_HANDSHAKE_S
 * after its accept) and becomes a member only when it proved the token and a member's place is
 * free (RM_PS_MAX_CONNS; otherwise it is told FULL). So strangers holding connections open never
 * keep a worker out (docs/architecture.md#robustness). */
static void *accept_main(void *arg)
{
    server *s = arg;
    while (!g_ps_term) {
        char who[64] = "?";
        int fd = -1;
        rm_err e = {0};
        if (rm_net_accept(s->lfd, rm_mono() + 0.5, &fd, who, sizeof who, &e) != RM_OK)
            continue;
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        /* as the worker's end (ps_wire.c): no Nagle delay on the small reply headers, and buffers
         * that take a shard slice without a wake-up per 64 KiB */
        rm_net_tune(fd, 4 << 20);
        c->s = s;
        c->fd = fd;
        snprintf(c->who, sizeof c->who, "%s", who);
        char ip[64];
        snprintf(ip, sizeof ip, "%s", who);
        char *colon = strrchr(ip, ':');
        if (colon)
            *colon = 0;
        struct in_addr ia = {0};
        (void)inet_pton(AF_INET, ip, &ia); /* unparsable: 0.0.0.0, one shared source */
        c->adm = (rm_admit_pending){.src = ia.s_addr, .t0 = rm_mono()};
        pthread_mutex_lock(&s->adm_mu);
        const char *why = NULL;
        int victim = rm_admit_victim(&s->pend[0].adm, sizeof s->pend[0], s->npend, c->adm.src,
                                     PS_PENDING_PER_SRC, PS_PENDING_MAX, &why);
        if (victim >= 0) { /* its thread sees the socket fail, leaves the table gone and closes */
            refuse(s, PS_REFUSE_ROOM, s->pend[victim].c->who, why);
            shutdown(s->pend[victim].c->fd, SHUT_RDWR);
            s->pend[victim] = s->pend[--s->npend];
        }
        s->pend[s->npend++] = (ps_pending){c->adm, c};
        pthread_mutex_unlock(&s->adm_mu);
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&c->th, &at, conn_main, c) != 0) {
            pending_leave(s, c);
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

/* ---- checkpoints ---- */

/* A shard's checkpoint is a worker checkpoint (worker/checkpoint/checkpoint.h: atomic, checksummed) of a
 * one-layer pseudo-model with exactly the shard's length (len-1 inputs, 1 output: the format ties
 * the parameter count to the shape); which shard of which model it holds is in the header's
 * reserved words: rng[0] = offset, rng[1] = the model's parameters, rng[2] = the model's shape
 * (a hash), world_size = S, rdzv_epoch = index. A restore checks all of them. */
static uint64_t shape_hash(const rm_model_shape *sh)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i <= sh->nlayers && i < RM_MODEL_SHAPE_WORDS; i++)
        h = (h ^ (uint64_t)(uint32_t)sh->dims[i]) * 1099511628211ull;
    return h;
}

static void ckpt_expect(const server *s, rm_ckpt_meta *m)
{
    memset(m, 0, sizeof *m);
    m->shape.nlayers = 1;
    m->shape.dims[0] = (int)(s->len - 1);
    m->shape.dims[1] = 1;
    m->opt_type = (int32_t)s->t.optimizer.type;
    m->nstate = s->opt.nstate;
    m->nparams = s->len;
    m->rng[0] = s->off;
    m->rng[1] = s->total;
    m->rng[2] = shape_hash(&s->shape);
}

static int ckpt_restore(server *s)
{
    if (!s->ckpt_dir[0])
        return 0;
    rm_ckpt_meta exp, meta;
    ckpt_expect(s, &exp);
    size_t cap = (size_t)(1 + s->opt.nstate) * s->len * sizeof(float);
    char *buf = malloc(cap);
    if (!buf)
        return 0;
    char path[4200];
    int skipped = 0;
    rm_err e = {0};
    int rc = rm_ckpt_load_newest(s->ckpt_dir, &exp, &meta, buf, cap, path, sizeof path, &skipped, &e);
    if (rc == RM_OK &&
        (meta.world_size != s->nservers || meta.rdzv_epoch != s->index || meta.rng[0] != exp.rng[0] ||
         meta.rng[1] != exp.rng[1] || meta.rng[2] != exp.rng[2])) {
        rm_warn("checkpoint of another shard layout ignored path=%s servers=%d index=%d", path,
                meta.world_size, meta.rdzv_epoch);
        rc = RM_EINVAL;
    }
    if (rc == RM_OK) {
        memcpy(s->params, buf, s->len * sizeof(float));
        for (int i = 0; i < s->opt.nstate; i++)
            memcpy(s->opt.state[i], buf + (size_t)(1 + i) * s->len * sizeof(float), s->len * sizeof(float));
        s->opt.t = meta.opt_t;
        s->version = meta.step;
        s->sync.version = meta.step;
        s->draws = meta.data_pos;
        s->last_ckpt_version = meta.step;
        rm_info("shard restored path=%s version=%lld draws=%lld skipped_invalid=%d", path,
                (long long)meta.step, (long long)meta.data_pos, skipped);
    } else if (skipped) {
        rm_warn("no usable shard checkpoint reason=\"%s\"", e.msg);
    }
    free(buf);
    return rc == RM_OK;
}

/* Write the shard, its optimizer state and version (under mu: the shard stands still while it is
 * written, a few milliseconds every interval). Called as a multiple of the interval is applied
 * (applied()) and at SIGTERM. A failed write is counted and reported with the registration (the
 * runtimes raise CheckpointFailing, docs/strategies.md#failure-semantics). */
static void ckpt_write_locked(server *s)
{
    int64_t v = cur_version(s);
    if (!s->ckpt_dir[0] || v <= s->last_ckpt_version)
        return;
    rm_ckpt_meta meta;
    ckpt_expect(s, &meta);
    meta.step = v;
    meta.opt_t = s->opt.t;
    meta.data_pos = s->draws;
    meta.world_size = s->nservers;
    meta.rdzv_epoch = s->index;
    meta.seed = s->t.seed;
    meta.batch_per_worker = s->t.batch_size_per_worker;
    meta.loss_scale = 1;
    rm_ckpt_seg seg[3] = {{s->params, s->len * sizeof(float)}};
    for (int i = 0; i < s->opt.nstate && i < 2; i++)
        seg[1 + i] = (rm_ckpt_seg){s->opt.state[i], s->len * sizeof(float)};
    char path[4200];
    rm_err e = {0};
    double t0 = rm_mono();
    if (rm_ckpt_write(s->ckpt_dir, &meta, seg, 1 + s->opt.nstate, s->ckpt_keep, path, sizeof path, &e) !=
        RM_OK) {
        s->ckpt_failures++;
        snprintf(s->ckpt_error, sizeof s->ckpt_error, "%.127s", e.msg);
        s->report_now = true;
        s->last_ckpt_version = v; /* the next try is at the next multiple */
        int n = s->ckpt_failures; /* logged at 1, 2, 4, 8, ...: a write fails every interval */
        if ((n & (n - 1)) == 0)
            rm_error("shard checkpoint write failed version=%lld failures_in_a_row=%d err=\"%s\"",
                     (long long)v, n, e.msg);
        return;
    }
    if (s->ckpt_failures) {
        s->ckpt_failures = 0;
        s->ckpt_error[0] = 0;
        s->report_now = true;
    }
    s->last_ckpt_version = v;
    rm_info("shard checkpoint written path=%s version=%lld seconds=%.3f", path, (long long)v, rm_mono() - t0);
}

static int rdzv_put(server *s, const char *addr, int ckfail, const char *ckerr, rm_err *err);

/* ---- registration with the rendezvous (rdzv.h "Servers") ----
 * Workers find servers through the rendezvous, as they find each other: a cluster's names need no
 * DNS and a replacement at a new address is found by the workers' next reconnect. Registered at
 * start and again every 10 s (the rendezvous may have restarted: an operator fail-over). */
static void rdzv_register(server *s)
{
    if (!s->rdzv)
        return;
    /* the checkpoint report is written under mu by whichever thread applied the version */
    pthread_mutex_lock(&s->mu);
    bool now = s->report_now;
    int ckfail = s->ckpt_failures;
    char ckerr[sizeof s->ckpt_error];
    memcpy(ckerr, s->ckpt_error, sizeof ckerr);
    s->report_now = false;
    pthread_mutex_unlock(&s->mu);
    if (!now && s->registered_at > 0 && rm_mono() - s->registered_at < 10)
        return;
    rm_err e = {0};
    char addr[160];
    snprintf(addr, sizeof addr, "%.100s:%d", s->advertise, s->port);
    int rc = rdzv_put(s, addr, ckfail, ckerr, &e);
    if (rc == RM_OK) {
        if (s->registered_at == 0)
            rm_info("registered with the rendezvous addr=%s", addr);
        s->registered_at = rm_mono();
    } else if (rc == RM_ECLOSED) {
        s->registered_at = rm_mono(); /* the job finished: nothing to serve for */
    } else {
        rm_warn("rendezvous registration failed, retrying err=\"%s\"", e.msg);
        s->registered_at = rm_mono() - 9; /* again in about a second */
    }
}

/* ---- settings ---- */

static int env_int(const char *name, int lo, int hi, int dflt, int *out, rm_err *err)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        *out = dflt;
        return RM_OK;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return rm_err_field(err, RM_EINVAL, name, "want an integer in [%d, %d], got \"%s\"", lo, hi, v);
    *out = (int)x;
    return RM_OK;
}

static int settings(server *s, int argc, char **argv, rm_err *err)
{
    const char *v;
    snprintf(s->metrics_addr, sizeof s->metrics_addr, ":%d", RM_PORT_WORKER_METRICS);
    rm_log_level lvl = RM_LOG_INFO;
    rm_log_format fmt = RM_LOG_TEXT;
    static const struct option opts[] = {
        {"metrics-addr", required_argument, 0, 'm'},
        {"log-format", required_argument, 0, 'f'},
        {"log-level", required_argument, 0, 'l'},
        {0, 0, 0, 0},
    };
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'm')
            snprintf(s->metrics_addr, sizeof s->metrics_addr, "%s", optarg);
        else if (c == 'f' && rm_log_parse_format(optarg, &fmt) == RM_OK)
            ;
        else if (c == 'l' && rm_log_parse_level(optarg, &lvl) == RM_OK)
            ;
        else
            return rm_errf(err, RM_EINVAL, "ps: unknown or bad flag %s", argv[optind - 1]);
    }
    rm_log_init(lvl, fmt, "ps");
    if (!strcmp(s->metrics_addr, "off"))
        s->metrics_addr[0] = 0;
    RM_CHECK(env_int(RM_ENV_PS_INDEX, 0, RM_PS_MAX_SERVERS - 1, 0, &s->index, err));
    RM_CHECK(env_int(RM_ENV_WORLD_SIZE, 1, RM_PS_MAX_WORKERS, 1, &s->world, err));
    RM_CHECK(env_int(RM_ENV_CHECKPOINT_INTERVAL, 1, INT32_MAX, 200, &s->ckpt_interval, err));
    RM_CHECK(env_int(RM_ENV_CHECKPOINT_KEEP, 1, 1000, 3, &s->ckpt_keep, err));
    v = getenv(RM_ENV_TOKEN);
    if (!v || !*v || strlen(v) >= sizeof s->token)
        return rm_err_field(err, RM_EAUTH, RM_ENV_TOKEN,
                            "missing, empty or too long: a parameter "
                            "server only serves workers that prove the job's token");
    snprintf(s->token, sizeof s->token, "%s", v);
    snprintf(s->job, sizeof s->job, "%s", (v = getenv(RM_ENV_JOB)) && *v ? v : "default/local");
    RM_CHECK(rm_ps_parse_addrs(getenv(RM_ENV_PS_ADDRS), s->addrs, RM_PS_MAX_SERVERS, &s->nservers, err));
    if (s->index >= s->nservers)
        return rm_err_field(err, RM_EINVAL, RM_ENV_PS_INDEX, "%d, but %s lists %d servers", s->index,
                            RM_ENV_PS_ADDRS, s->nservers);
    char host[128];
    RM_CHECK(rm_comm_split_addr(s->addrs[s->index], host, sizeof host, &s->port, err));
    snprintf(s->bind, sizeof s->bind, "%s", (v = getenv(RM_ENV_BIND_ADDR)) && *v ? v : "0.0.0.0");
    /* where workers reach us: the bind address when it names one, else the listed host */
    snprintf(s->advertise, sizeof s->advertise, "%s",
             strcmp(s->bind, "0.0.0.0") && strcmp(s->bind, "::") ? s->bind : host);
    if ((v = getenv(RM_ENV_RENDEZVOUS)) && *v) {
        s->rdzv = rm_rdzv_client_new(v, s->job, s->token, "ps", err);
        if (!s->rdzv) {
            rm_err why = *err; /* which argument the client refused, and why */
            return rm_err_field(err, why.code, RM_ENV_RENDEZVOUS, "cannot use \"%s\" (with job %s): %s", v,
                                s->job, why.msg);
        }
    }
    if ((v = getenv(RM_ENV_CHECKPOINT_DIR)) && *v)
        snprintf(s->ckpt_dir, sizeof s->ckpt_dir, "%s/ps-%d", v, s->index);
    s->timeout_s = 10;
    /* spec.training and spec.parameterServer */
    rm_training_defaults(&s->t);
    if ((v = getenv(RM_ENV_TRAINING)) && *v) {
        cJSON *o = rm_json_parse(v, strlen(v), err);
        if (!o)
            return rm_err_field(err, RM_EINVAL, RM_ENV_TRAINING, "not JSON");
        rm_training_free(&s->t);
        memset(&s->t, 0, sizeof s->t);
        int rc = rm_training_from_json(o, "spec.training", &s->t, err);
        cJSON_Delete(o);
        RM_CHECK(rc);
        rm_training_defaults(&s->t);
    }
    RM_CHECK(rm_training_validate(&s->t, "spec.training", err));
    if ((v = getenv(RM_ENV_PS_SPEC)) && *v) {
        cJSON *o = rm_json_parse(v, strlen(v), err);
        if (!o)
            return rm_err_field(err, RM_EINVAL, RM_ENV_PS_SPEC, "not JSON");
        int rc = rm_ps_from_json(o, "spec.parameterServer", &s->ps, err);
        cJSON_Delete(o);
        RM_CHECK(rc);
    }
    rm_ps_defaults(&s->ps);
    if (s->ps.replicas != s->nservers)
        return rm_err_field(err, RM_EINVAL, RM_ENV_PS_ADDRS,
                            "lists %d servers, "
                            "spec.parameterServer.replicas is %d",
                            s->nservers, s->ps.replicas);
    if (s->ps.backup_workers >= s->world)
        return rm_err_field(err, RM_EINVAL, "spec.parameterServer.backupWorkers",
                            "must be < spec.replicas (%d)", s->world);
    if ((v = getenv(RM_ENV_PROGRESS_DEADLINE)) && *v) {
        char *end;
        errno = 0;
        s->progress_deadline_s = strtod(v, &end);
        if (errno || *end || !(s->progress_deadline_s >= 0 && s->progress_deadline_s <= 1e7))
            return rm_err_field(err, RM_EINVAL, RM_ENV_PROGRESS_DEADLINE,
                                "want seconds in [0, 1e7], got \"%s\"", v);
    }
    RM_CHECK(rm_faults_parse(getenv(RM_ENV_FAULT), &s->faults, err));
    if (s->ckpt_dir[0])
        rm_faults_set_dir(&s->faults, s->ckpt_dir);
    return RM_OK;
}

/* The shard of the initial parameters: the same weights every worker's model would draw from the
 * seed (or the ones spec.training.model.init.uri names). */
static int shard_init_params(server *s, rm_err *err)
{
    rm_model m;
    rm_model_weights w = {0};
    RM_CHECK(rm_model_init(&m, rm_kernels_cpu(), s->family, &s->shape, 1, err));
    int rc = RM_OK;
    if (s->t.init_uri) {
        rc = rm_model_init_weights_open(&m, s->t.init_uri, &w, err);
        m.init_weights = &w;
    }
    if (rc == RM_OK)
        rc = rm_model_init_params(&m, s->t.seed, err);
    rm_model_weights_close(&w);
    if (rc == RM_OK)
        memcpy(s->params, m.params + s->off, s->len * sizeof(float));
    rm_model_free(&m);
    return rc;
}

static int setup(server *s, rm_err *err)
{
    const rm_kernels *k = rm_kernels_cpu();
    /* the model's shape from the data set's headers, as every worker reads them */
    rm_model lay; /* the plan only: units and sizes */
    rm_data_info di;
    RM_CHECK(rm_data_probe(&s->t, &di, err));
    rm_model_data md = {.inputs = di.inputs, .classes = di.classes};
    RM_CHECK(rm_model_plan_spec(&s->t, &md, &lay, err));
    s->shape = lay.shape;
    s->total = lay.nparams;
    size_t off[RM_PS_MAX_SERVERS], len[RM_PS_MAX_SERVERS];
    RM_CHECK(rm_ps_partition(lay.nparams, lay.unit_off, lay.nunits, s->nservers, off, len, err));
    s->off = off[s->index];
    s->len = len[s->index];
    s->params = malloc(s->len * sizeof(float));
    if (!s->params)
        return rm_errf(err, RM_ENOMEM, "parameter server: out of memory");
    RM_CHECK(rm_optim_init(&s->opt, k, &s->t.optimizer, s->len, err));
    /* adamw decays only the model's 2-D tensors: this shard's range of them */
    s->opt.base = s->off;
    RM_CHECK(rm_optim_tensors_from_model(&s->opt, &lay, err));
    RM_CHECK(rm_ps_sync_init(&s->sync, s->len, 0, s->world - s->ps.backup_workers, err));
    s->view = (rm_ps_view){0, s->world};
    s->family = lay.family;
    if (!ckpt_restore(s))
        RM_CHECK(shard_init_params(s, err));
    if (s->t.optimizer.type == RM_OPT_LBFGS) { /* checkpoints every accepted point */
        RM_CHECK(rm_lbfgs_shard_new(s->params, s->len, s->t.optimizer.history, s->t.optimizer.portions,
                                    s->ckpt_dir, &s->lb, err));
        s->ckpt_interval = 1;
    }
    s->reg = rm_metrics_new();
    if (!s->reg)
        return rm_errf(err, RM_ENOMEM, "metrics: out of memory");
    static const char *const L[] = {"job", "shard", NULL};
    static const double st_b[] = {0, 1, 2, 4, 8, 16, 32, 64, 128};
    static const double ap_b[] = {1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5};
    rm_metric *f;
    char shard[16];
    snprintf(shard, sizeof shard, "%d", s->index);
#define FAM(kind, var, name, help)                                    \
    do {                                                              \
        RM_CHECK(rm_metrics_##kind(s->reg, name, help, L, &f, err));  \
        if (!(s->var = rm_metric_with2(f, s->job, shard)))            \
            return rm_errf(err, RM_ENOMEM, "metrics: out of memory"); \
    } while (0)
#define HIST(var, name, help, b)                                                            \
    do {                                                                                    \
        RM_CHECK(rm_metrics_histogram(s->reg, name, help, L, b, RM_ARRAY_LEN(b), &f, err)); \
        if (!(s->var = rm_metric_with2(f, s->job, shard)))                                  \
            return rm_errf(err, RM_ENOMEM, "metrics: out of memory");                       \
    } while (0)
    FAM(counter, m_pushes, "ringmaster_ps_pushes_total", "Gradient pushes received by this server.");
    FAM(counter, m_fetches, "ringmaster_ps_fetches_total", "Parameter fetches served by this server.");
    FAM(counter, m_dropped, "ringmaster_ps_dropped_gradients_total",
        "Gradients dropped (sync: late for a step already applied with N-b, or duplicates).");
    FAM(gauge, m_version, "ringmaster_ps_version", "Updates applied to this shard (sync: the global step).");
    FAM(gauge, m_draws, "ringmaster_ps_draws", "Global batches handed out (server 0, async).");
    HIST(m_staleness, "ringmaster_ps_staleness",
         "Async: updates applied between a gradient's fetch and its push.", st_b);
    HIST(m_apply, "ringmaster_ps_apply_seconds", "Time to apply one update to this shard.", ap_b);
#undef FAM
#undef HIST
    static const char *const LR[] = {"job", "shard", "reason", NULL};
    RM_CHECK(
        rm_metrics_counter(s->reg, "ringmaster_ps_refused_connections_total",
                           "Connections refused, by reason: protocol (not a worker's hello), token (a proof "
                           "without the job's token), handshake (unfinished in time), full, malformed (a bad "
                           "request after the handshake), room (dropped for a newer connection).",
                           LR, &f, err));
    for (int i = 0; i < PS_REFUSE_N; i++)
        if (!(s->m_refused[i] = rm_metric_with(f, (const char *const[]){s->job, shard, PS_REFUSE_NAMES[i]})))
            return rm_errf(err, RM_ENOMEM, "metrics: out of memory");
    rm_series_set(s->m_version, (double)cur_version(s));
    if (!(s->health = rm_health_new(rm_health_server_deadline(s->progress_deadline_s))))
        return rm_errf(err, RM_ENOMEM, "parameter server: health");
    if (s->metrics_addr[0]) {
        rm_http_route routes[] = {{"GET", "/metrics", 0, rm_metrics_handler, s->reg},
                                  {"GET", "/healthz", 0, ps_healthz, s}};
        rm_http_opts o = {.bind = s->metrics_addr};
        RM_CHECK(rm_http_start(&o, routes, RM_ARRAY_LEN(routes), &s->http, err));
    }
    return rm_net_listen(s->bind, s->port, 64, &s->lfd, &s->port, err);
}

/* ---- the servers' agreement on one version (ps_core.h rm_ps_agree_decide,
 * docs/strategies.md#failure-semantics) ----
 * A server that (re)starts restores its own newest checkpoint; the others may be ahead of it, and
 * the model would mix versions. So every server registers its incarnation and the versions it
 * holds, reads the others' records every second (every 0.2 s while the group settles), and the
 * group settles on the newest version every shard holds: each rolls its own shard back to it
 * from its own folder and all serve again. After the local runner's own rollback (every server
 * restarted at that version) the agreement finds them there and changes nothing. */

/* The versions this shard holds checkpoints of, newest first, into s->me. Under mu. */
static void agree_held(server *s)
{
    s->me.nheld = 0;
    rm_ckpt_entry *e = NULL;
    int n = 0;
    if (s->ckpt_dir[0] && rm_ckpt_list_whole(s->ckpt_dir, &e, &n) == RM_OK)
        for (int k = 0; k < n && s->me.nheld < RM_RDZV_PS_HELD_MAX; k++)
            if (s->me.nheld == 0 || s->me.held[s->me.nheld - 1] != e[k].key[0])
                s->me.held[s->me.nheld++] = e[k].key[0];
    free(e);
    s->me.version = cur_version(s);
}

/* Remove this shard's checkpoints newer than v: a later restart must not restore a version the
 * group rolled back from. Under mu. */
static void agree_remove_newer(server *s, int64_t v)
{
    rm_ckpt_entry *e = NULL;
    int n = 0;
    if (!s->ckpt_dir[0] || rm_ckpt_list_whole(s->ckpt_dir, &e, &n) != RM_OK)
        return;
    for (int k = 0; k < n && e[k].key[0] > v; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", s->ckpt_dir, e[k].name);
        if (unlink(path) == 0)
            rm_info("shard checkpoint newer than the group's version removed path=%s", path);
    }
    free(e);
}

/* Roll the shard back to version v from this server's folder (v = 0, or no usable checkpoint:
 * the initial parameters). Returns the version it stands at. Under mu. */
static int64_t agree_roll(server *s, int64_t v)
{
    int64_t from = cur_version(s);
    if (from == v)
        return v;
    agree_remove_newer(s, v);
    rm_ps_sync_reset(&s->sync, 0);
    s->version = 0;
    s->draws = 0;
    s->last_ckpt_version = 0;
    if (v == 0 || !ckpt_restore(s)) {
        rm_err e = {0};
        for (int i = 0; i < s->opt.nstate; i++)
            memset(s->opt.state[i], 0, s->len * sizeof(float));
        s->opt.t = 0;
        if (shard_init_params(s, &e) != RM_OK) {
            rm_error("parameter server: cannot rebuild the initial parameters err=\"%s\"", e.msg);
            _exit(1); /* replaced, and the group agrees again */
        }
        rm_info("shard reset to the initial parameters version=0");
    }
    memset(&s->clocks, 0, sizeof s->clocks);
    agree_remove_newer(s, cur_version(s)); /* unusable newer files: not held */
    rm_info("shard rolled back to the group's version from=%lld version=%lld", (long long)from,
            (long long)cur_version(s));
    return cur_version(s);
}

/* Look at every server's record and do what rm_ps_agree_decide says. Main thread. */
static void agree_poll(server *s)
{
    if (!s->agree_on)
        return;
    pthread_mutex_lock(&s->mu);
    bool serving = s->serving;
    rm_rdzv_ps_group me = s->me;
    pthread_mutex_unlock(&s->mu);
    double now = rm_mono();
    if (s->registered_at == 0 || now - s->agree_at < (serving ? 1.0 : 0.2))
        return;
    s->agree_at = now;
    static rm_rdzv_ps_group g[RM_PS_MAX_SERVERS];
    int n = 0;
    rm_err e = {0};
    if (rm_rdzv_server_groups(s->rdzv, g, RM_PS_MAX_SERVERS, &n, &e) != RM_OK) {
        rm_debug("servers' records unavailable err=\"%s\"", e.msg);
        return;
    }
    if (n <= s->index || g[s->index].inc != me.inc) { /* ours not there (yet, or any more) */
        pthread_mutex_lock(&s->mu);
        s->report_now = true;
        pthread_mutex_unlock(&s->mu);
        return;
    }
    rm_ps_member m[RM_PS_MAX_SERVERS];
    memset(m, 0, sizeof m);
    for (int i = 0; i < s->nservers && i < n; i++) {
        const rm_rdzv_ps_group *x = i == s->index ? &me : &g[i]; /* ours: the newest */
        m[i] = (rm_ps_member){.known = x->known,
                              .inc = x->inc,
                              .gen = x->gen,
                              .settled = x->settled,
                              .at = x->at,
                              .version = x->version,
                              .nheld = x->nheld};
        memcpy(m[i].held, x->held, sizeof m[i].held);
    }
    rm_ps_agree a = rm_ps_agree_decide(m, s->nservers, s->index);
    pthread_mutex_lock(&s->mu);
    if (a.act == RM_PS_AGREE_PAUSE) {
        if (s->serving)
            rm_info("a parameter server (re)started: stop serving until every server settles on one "
                    "version gen=%016llx version=%lld",
                    (unsigned long long)a.gen, (long long)cur_version(s));
        s->serving = false;
        s->me.gen = a.gen;
        s->me.settled = false;
        agree_held(s);
        s->report_now = true;
    } else if (a.act == RM_PS_AGREE_ROLL) {
        s->serving = false;
        int64_t at = agree_roll(s, a.version);
        agree_held(s);
        s->me.settled = at == a.version;
        s->me.at = at;
        if (!s->me.settled)
            rm_warn("cannot restore the group's version; the servers agree on an older one "
                    "version=%lld restored=%lld",
                    (long long)a.version, (long long)at);
        s->report_now = true;
    } else if (a.act == RM_PS_AGREE_SERVE && !s->serving) {
        s->serving = true;
        pthread_cond_broadcast(&s->cv);
        if (s->agree_logged != a.gen)
            rm_info("parameter servers settled on version=%lld servers=%d gen=%016llx", (long long)a.version,
                    s->nservers, (unsigned long long)a.gen);
        s->agree_logged = a.gen;
    }
    bool now_reg = s->report_now;
    pthread_mutex_unlock(&s->mu);
    if (now_reg)
        rdzv_register(s); /* the others see the change at once */
}

/* The registration with this server's agreement record. */
static int rdzv_put(server *s, const char *addr, int ckfail, const char *ckerr, rm_err *err)
{
    rm_rdzv_ps_group me = {0};
    if (s->agree_on) {
        pthread_mutex_lock(&s->mu);
        s->me.version = cur_version(s);
        me = s->me;
        pthread_mutex_unlock(&s->mu);
    }
    return rm_rdzv_server_put(s->rdzv, s->index, addr, ckfail, ckerr, &me, err);
}

/* Start the agreement: a fresh incarnation, serving only once the group settled. */
static void agree_start(server *s)
{
    s->agree_on = s->rdzv && !s->lb;
    s->serving = !s->agree_on;
    if (!s->agree_on)
        return;
    uint64_t inc = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&inc, sizeof inc, 1, f) != 1)
        inc = ((uint64_t)getpid() << 32) ^ (uint64_t)(rm_mono() * 1e9);
    if (f)
        fclose(f);
    s->me = (rm_rdzv_ps_group){.known = true, .inc = inc ? inc : 1};
    s->me.at = cur_version(s);
    agree_held(s);
}

int rm_ps_server_main(int argc, char **argv)
{
    static server S; /* large (the clocks table); one per process */
    server *s = &S;
    memset(s, 0, sizeof *s);
    s->lfd = -1;
    rm_err err = {0};
    int rc = settings(s, argc, argv, &err);
    if (rc) {
        rm_error("parameter server: bad settings err=\"%s\"", err.msg);
        return 2;
    }
    rm_mono_cond_init(&s->cv);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->adm_mu, NULL);
    pthread_t acc;
    bool acc_started = false;
    rc = setup(s, &err);
    if (rc == RM_OK)
        agree_start(s);
    if (rc == RM_OK) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = ps_on_term;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        /* server 0 hosts the L-BFGS coordinator; started before the acceptor, which reads
         * s->coord (its own connections to this server wait in the listen backlog) */
        if (s->lb && s->index == 0) {
            rm_lbfgs_coord_cfg cc = {.t = &s->t,
                                     .world = s->world,
                                     .nservers = s->nservers,
                                     .addrs = s->addrs,
                                     .token = s->token,
                                     .job = s->job,
                                     .train_samples = rm_training_samples(&s->t),
                                     .timeout_s = s->timeout_s,
                                     .reg = s->reg,
                                     .state_dir = s->ckpt_dir,
                                     .rendezvous = getenv(RM_ENV_RENDEZVOUS)};
            rc = rm_lbfgs_coord_start(&cc, &s->coord, &err);
        }
        if (rc != RM_OK)
            ;
        else if (pthread_create(&acc, NULL, accept_main, s) != 0)
            rc = rm_errf(&err, RM_ERR, "parameter server: cannot start the acceptor");
        else
            acc_started = true;
    }
    if (rc == RM_OK) {
        rm_info("parameter server ready index=%d of=%d listen=%s:%d shard_offset=%zu shard_len=%zu "
                "of_total=%zu mode=%s backup_workers=%d staleness_bound=%d version=%lld "
                "optimizer=%s metrics=%s",
                s->index, s->nservers, s->bind, s->port, s->off, s->len, s->total,
                rm_ps_mode_names[s->ps.mode == RM_PS_ASYNC], s->ps.backup_workers, s->ps.staleness_bound,
                (long long)cur_version(s), rm_optim_name(s->t.optimizer.type),
                s->metrics_addr[0] ? s->metrics_addr : "off");
        while (!g_ps_term) {
            rdzv_register(s);
            agree_poll(s);
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
        rm_info("SIGTERM: writing the shard checkpoint and exiting version=%lld", (long long)cur_version(s));
        pthread_mutex_lock(&s->mu);
        ckpt_write_locked(s);
        pthread_mutex_unlock(&s->mu);
    } else {
        rm_error("parameter server failed err=\"%s\"", err.msg);
    }
    rm_lbfgs_coord_stop(s->coord);
    if (acc_started) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(acc, NULL);
    }
    /* connection threads are detached and may still hold the shard: exit without freeing it */
    rm_http_stop(s->http);
    rm_health_free(s->health);
    s->health = NULL;
    rm_rdzv_client_free(s->rdzv);
    return rc ? (err.field[0] ? 2 : 1) : 0;
}
