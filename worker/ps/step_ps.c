/* step_ps.c — the "parameterServer" strategy, the worker's side (step.h;
 * docs/strategies.md#parameter-servers). The servers are worker/ps/ps_server.c; the wire worker/ps/ps_wire.h.
 *
 * Sync (Chen et al. 2016): the worker holds the parameters of global step k (fetched), computes
 * its gradient on its slot of step k's global batch, pushes each shard's slice tagged k to its
 * server, then fetches step k+1 (each server answers once N-b gradients of step k arrived). A
 * straggler whose push came too late was dropped on the server; its fetch returns the newest
 * step, so it skips ahead (claim below takes the servers' step as its own). With b = 0 the
 * arithmetic is the allreduce strategy's: the mean of the N gradients, the same optimizer, the
 * same learning rate, applied once (only the summation order differs).
 * Async (Downpour, Dean et al. 2012): the worker draws its next global batch from server 0 (epochs
 * are a global budget), accumulates gradients and pushes them every pushEverySteps steps (each
 * applied on arrival by the servers' optimizer, Adagrad as in Downpour), and fetches fresh
 * parameters every fetchEverySteps; the servers hold it back when it is more than stalenessBound
 * steps ahead of the slowest live worker. With warmStartSteps W (Dean et al.'s warm start) the
 * servers hold every worker but 0 at its first draw until worker 0 alone made W updates.
 *
 * Requests to the S servers are pipelined (all sent, then all answered); a sync step is one round
 * trip per server (push_fetch: the push and the next step's fetch in one gather write, the
 * gradient sent straight from the model's buffer, the parameters read straight into the model's);
 * a server that fails (died, being replaced) is retried alone with bounded back-off until
 * timeout_s x 6 has passed, then the step fails and the driver re-forms the round. Nothing is allocated per step: the
 * accumulator and connections are made once. Checkpoints are the servers' (no state_* entries).
 * Settings: env RINGMASTER_PS_ADDRS and RINGMASTER_PARAMETER_SERVER (the launch contract). */
#include "worker/step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/log.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"
#include "worker/ps/ps_core.h"
#include "worker/ps/ps_registry.h"
#include "worker/ps/ps_wire.h"

#define PS_RETRY_FACTOR 6.0 /* a server may be away this many comm timeouts */

struct rm_step {
    rm_step_env env;
    rm_step_round r;
    rm_ps_spec ps;
    int S, worker;
    rm_ps_registry reg; /* where the servers are (the rendezvous, else the list) */
    rm_ps_conn conn[RM_PS_MAX_SERVERS];
    size_t off[RM_PS_MAX_SERVERS], len[RM_PS_MAX_SERVERS];
    int64_t ver[RM_PS_MAX_SERVERS]; /* each shard's version at our last fetch */
    int64_t version;                /* sync: the global step our parameters are at */
    float *acc;                     /* async: gradients accumulated since the last push */
    int64_t clock;                  /* async: steps this worker computed */
    int pending;                    /* async: steps in acc */
    bool done;
};

static bool canceled(const rm_step *s)
{
    return s->env.cancel && *s->env.cancel;
}

static int ps_init(const rm_step_env *env, rm_step **out, rm_err *err)
{
    *out = NULL;
    if (!env->k->host_memory)
        return rm_errf(err, RM_EUNSUPPORTED,
                       "parameterServer strategy: the CPU path only "
                       "(--device cpu)");
    rm_step *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "parameterServer strategy: out of memory");
    s->env = *env;
    for (int i = 0; i < RM_PS_MAX_SERVERS; i++)
        s->conn[i].fd = -1;
    char addrs[RM_PS_MAX_SERVERS][128];
    int rc = rm_ps_parse_addrs(getenv(RM_ENV_PS_ADDRS), addrs, RM_PS_MAX_SERVERS, &s->S, err);
    const char *js = getenv(RM_ENV_PS_SPEC);
    if (rc == RM_OK && js && *js) {
        cJSON *o = rm_json_parse(js, strlen(js), err);
        rc = o ? rm_ps_from_json(o, "spec.parameterServer", &s->ps, err)
               : rm_err_field(err, RM_EINVAL, RM_ENV_PS_SPEC, "not JSON");
        cJSON_Delete(o);
    }
    rm_ps_defaults(&s->ps);
    /* with a rendezvous the servers' addresses come from it (they register there, rdzv.h
     * "Servers"); the launch contract's list then only says how many there are */
    const char *url = getenv(RM_ENV_RENDEZVOUS), *wid = getenv(RM_ENV_WORKER_ID);
    if (rc == RM_OK)
        rc = rm_ps_registry_init(&s->reg, (const char(*)[128])addrs, s->S,
                                 env->token && *env->token ? url : NULL, getenv(RM_ENV_JOB), env->token, wid,
                                 err);
    if (rc == RM_OK)
        rm_ps_registry_set_cancel(&s->reg, env->cancel, NULL);
    if (rc == RM_OK && s->ps.replicas != s->S)
        rc = rm_err_field(err, RM_EINVAL, RM_ENV_PS_ADDRS,
                          "lists %d servers, "
                          "spec.parameterServer.replicas is %d",
                          s->S, s->ps.replicas);
    const rm_model *mod = env->m;
    if (rc == RM_OK && env->grad_accum > 1)
        rc = rm_err_field(err, RM_EINVAL, "spec.training.gradientAccumulationSteps",
                          "gradientAccumulationSteps with strategy parameterServer is not supported (use "
                          "pushEverySteps)");
    if (rc == RM_OK && env->grad_clip > 0)
        rc = rm_optim_reserve(env->opt, 1, mod->nunits, err); /* clip_push's slots */
    if (rc == RM_OK)
        rc = rm_ps_partition(mod->nparams, mod->unit_off, mod->nunits, s->S, s->off, s->len, err);
    if (rc == RM_OK && s->ps.mode == RM_PS_ASYNC && !(s->acc = calloc(mod->nparams, sizeof(float))))
        rc = rm_errf(err, RM_ENOMEM, "parameterServer strategy: out of memory");
    if (rc) {
        rm_ps_registry_free(&s->reg);
        free(s->acc);
        free(s);
        return rc;
    }
    *out = s;
    return RM_OK;
}

static void ps_round_end(rm_step *s)
{
    if (s)
        memset(&s->r, 0, sizeof s->r); /* connections to the servers outlive rounds */
}

static int ps_round_begin(rm_step *s, const rm_step_round *r, rm_err *err)
{
    s->r = *r;
    /* the stable replica id names this worker to the servers (ranks may move between rounds) */
    const char *id = getenv(RM_ENV_WORKER_ID);
    s->worker = id && *id ? atoi(id) : r->rank;
    if (s->worker < 0 || s->worker >= RM_PS_MAX_WORKERS)
        return rm_errf(err, RM_EINVAL, "parameterServer strategy: worker id %d out of range", s->worker);
    return RM_OK;
}

static void ps_destroy(rm_step *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->S; i++)
        rm_ps_conn_close(&s->conn[i]);
    rm_ps_registry_free(&s->reg);
    free(s->acc);
    free(s);
}

static int ps_state_fresh(rm_step *s, uint64_t seed, rm_err *err)
{
    const rm_step_env *e = &s->env; /* the servers hold the truth; this is what they drew */
    for (int i = 0; i < e->opt->nstate; i++)
        e->k->memset0(e->opt->state[i], e->opt->n * sizeof(float));
    e->opt->t = 0;
    return rm_model_init_params(e->m, seed, err);
}

/* (Re)connect to server i (ps_registry.h: its address looked up again each try), retrying with
 * bounded back-off until deadline. */
static int ensure_conn(rm_step *s, int i, double deadline, rm_err *err)
{
    return rm_ps_registry_connect(&s->reg, &s->conn[i], i, s->worker, s->env.token, deadline, err);
}

/* One request to every server (pipelined), replies' floats into dst + off[i] (when dst).
 * q is the template (nfloats/payload per server from src + off[i] when src). A server that fails
 * is retried alone with back-off until the retry deadline. rep[i] gets each reply. */
static int exchange(rm_step *s, rm_ps_req q, const float *src, float *dst, rm_ps_rep *rep, rm_err *err)
{
    double deadline = rm_mono() + s->env.timeout_s * PS_RETRY_FACTOR;
    bool bad[RM_PS_MAX_SERVERS] = {false};
    for (int i = 0; i < s->S; i++) {
        rm_err e = {0};
        rm_ps_req qi = q;
        qi.nfloats = src ? (uint32_t)s->len[i] : 0;
        if (ensure_conn(s, i, deadline, &e) ||
            rm_ps_send(&s->conn[i], &qi, src ? src + s->off[i] : NULL, rm_mono() + s->env.timeout_s, &e))
            bad[i] = true;
    }
    for (int i = 0; i < s->S; i++) {
        rm_err e = {0};
        /* a fetch may wait on the server for up to its timeout: allow for it */
        if (!bad[i] && rm_ps_recv(&s->conn[i], &rep[i], dst ? dst + s->off[i] : NULL, dst ? s->len[i] : 0,
                                  rm_mono() + 2 * s->env.timeout_s + 1, &e))
            bad[i] = true;
        if (!bad[i] && dst && rep[i].status == RM_PS_ST_OK && rep[i].nfloats != s->len[i]) {
            rm_ps_conn_close(&s->conn[i]);
            return rm_errf(err, RM_EPROTO,
                           "parameter server %d sent %u floats, its shard is %zu "
                           "(another model or shard layout?)",
                           i, rep[i].nfloats, s->len[i]);
        }
        while (bad[i]) {
            rm_ps_conn_close(&s->conn[i]);
            if (canceled(s))
                return rm_errf(err, RM_ECANCELED, "parameter server %d: canceled", i);
            if (rm_mono() >= deadline)
                return rm_errf(err, RM_ETIMEDOUT,
                               "parameter server %d: no answer within %.0f s "
                               "(%s)",
                               i, s->env.timeout_s * PS_RETRY_FACTOR, e.msg);
            rm_ps_req qi = q;
            qi.nfloats = src ? (uint32_t)s->len[i] : 0;
            if (ensure_conn(s, i, deadline, &e) == RM_OK &&
                rm_ps_send(&s->conn[i], &qi, src ? src + s->off[i] : NULL, rm_mono() + s->env.timeout_s,
                           &e) == RM_OK &&
                rm_ps_recv(&s->conn[i], &rep[i], dst ? dst + s->off[i] : NULL, dst ? s->len[i] : 0,
                           rm_mono() + 2 * s->env.timeout_s + 1, &e) == RM_OK)
                bad[i] = false;
            else
                rm_sleep(0.2);
        }
    }
    return RM_OK;
}

/* A request's view of the group (ps_core.h "the workers alive"): the driver's, else the round's. */
static void set_view(const rm_step *s, rm_ps_req *q)
{
    long long v = s->env.view ? atomic_load(s->env.view) : 0;
    int live = RM_STEP_VIEW_LIVE(v);
    if (v && live >= 1) {
        q->group = (uint32_t)RM_STEP_VIEW_EPOCH(v);
        q->world = (uint32_t)live;
    } else {
        q->world = (uint32_t)(s->r.world > 0 ? s->r.world : 1);
    }
}

/* Fetch every shard at a version >= want (sync; async: want 0), retrying servers that answer
 * "not yet" until the retry deadline. Sets ver[] and, for sync, version = the newest. */
static int fetch_all(rm_step *s, int64_t want, rm_err *err)
{
    double deadline = rm_mono() + s->env.timeout_s * PS_RETRY_FACTOR;
    rm_ps_rep rep[RM_PS_MAX_SERVERS];
    for (;;) {
        rm_ps_req q = {.op = RM_PS_OP_FETCH,
                       .worker = (uint32_t)s->worker,
                       .world = (uint32_t)s->r.world,
                       .step = s->ps.mode == RM_PS_SYNC ? want : s->clock};
        set_view(s, &q); /* asked again every second: the newest view each time */
        RM_CHECK(exchange(s, q, NULL, s->env.m->params, rep, err));
        bool late = false;
        int64_t oldest = INT64_MAX;
        for (int i = 0; i < s->S; i++) {
            if (rep[i].status == RM_PS_ST_TIMEOUT)
                late = true;
            else
                s->ver[i] = rep[i].version;
            if (rep[i].version < oldest)
                oldest = rep[i].version;
        }
        if (!late) {
            /* the job's step is the slowest shard's: a shard already past it drops our gradient
             * as late, one restored from an older checkpoint catches up on it */
            if (s->ps.mode == RM_PS_SYNC)
                s->version = oldest;
            return RM_OK;
        }
        if (canceled(s))
            return rm_errf(err, RM_ECANCELED, "parameter servers: canceled");
        if (rm_mono() >= deadline)
            return rm_errf(err, RM_ETIMEDOUT,
                           "parameter servers: step %lld not applied within "
                           "%.0f s (fewer than N-b workers pushing?)",
                           (long long)want, s->env.timeout_s * PS_RETRY_FACTOR);
    }
}

/* Sync, the steady state: push step k's gradient and ask for step k+1's parameters in one round
 * trip per server. Both requests go out in one gather write per connection (a server answers its
 * requests in order: the fetch waits there until the push and the others' made step k+1), then
 * both replies are read; every server's push is on the wire before any reply is awaited.
 * A fetch answered "not yet" (the step took more than a second to gather) leaves the connections
 * in step: fetch_all asks again. A broken connection falls back to the step-by-step path
 * (exchange, then fetch_all: servers retried with back-off) on fresh connections (replies still
 * queued on the others would desynchronise them); a push a server already took is then dropped
 * there as a duplicate (or as late, once the step is applied), so nothing is counted twice. */
static int push_fetch(rm_step *s, const rm_ps_req *push, const float *grads, rm_err *err)
{
    rm_ps_rep rep[RM_PS_MAX_SERVERS], frep[RM_PS_MAX_SERVERS];
    rm_ps_req f = {
        .op = RM_PS_OP_FETCH, .worker = push->worker, .world = push->world, .step = push->step + 1};
    set_view(s, &f);
    bool broken = false, late = false;
    for (int i = 0; i < s->S && !broken; i++) {
        rm_err e = {0};
        rm_ps_req qi = *push, fi = f;
        qi.nfloats = (uint32_t)s->len[i];
        if (s->conn[i].fd < 0 ||
            rm_ps_send2(&s->conn[i], &qi, grads + s->off[i], &fi, rm_mono() + s->env.timeout_s, &e))
            broken = true;
    }
    for (int i = 0; i < s->S && !broken; i++) {
        rm_err e = {0};
        /* the fetch may wait on the server for up to a second ("not yet"), as in fetch_all */
        double dl = rm_mono() + 2 * s->env.timeout_s + 1;
        if (rm_ps_recv(&s->conn[i], &rep[i], NULL, 0, dl, &e) ||
            rm_ps_recv(&s->conn[i], &frep[i], s->env.m->params + s->off[i], s->len[i], dl, &e)) {
            broken = true;
        } else if (frep[i].status != RM_PS_ST_OK) {
            late = true;
        } else if (frep[i].nfloats != s->len[i]) {
            rm_ps_conn_close(&s->conn[i]);
            return rm_errf(err, RM_EPROTO,
                           "parameter server %d sent %u floats, its shard is %zu "
                           "(another model or shard layout?)",
                           i, frep[i].nfloats, s->len[i]);
        }
    }
    if (broken) {
        for (int i = 0; i < s->S; i++)
            rm_ps_conn_close(&s->conn[i]);
        RM_CHECK(exchange(s, *push, grads, NULL, rep, err));
        return fetch_all(s, push->step + 1, err);
    }
    if (late)
        return fetch_all(s, push->step + 1, err);
    int64_t oldest = INT64_MAX;
    for (int i = 0; i < s->S; i++) {
        s->ver[i] = frep[i].version;
        if (frep[i].version < oldest)
            oldest = frep[i].version;
    }
    s->version = oldest; /* as fetch_all: the job's step is the slowest shard's */
    return RM_OK;
}

static int ps_state_sync(rm_step *s, rm_step_pos *pos, rm_err *err)
{
    RM_CHECK(fetch_all(s, 0, err));
    if (s->ps.mode == RM_PS_SYNC)
        pos->step = s->version;
    pos->eval_done = false;
    return RM_OK;
}

static int64_t budget(const rm_step *s, int64_t per_epoch)
{
    int64_t b = (int64_t)s->env.epochs * per_epoch;
    if (s->env.max_steps > 0 && s->env.max_steps < b)
        b = s->env.max_steps;
    return b;
}

static int ps_claim(rm_step *s, rm_step_claim *c, rm_err *err)
{
    memset(c, 0, sizeof *c);
    int B = s->env.batch, N = s->r.world > 0 ? s->r.world : 1;
    if (s->ps.mode == RM_PS_SYNC) {
        int64_t spe = s->env.train_samples / ((int64_t)B * N);
        if (spe < 1)
            return rm_errf(err, RM_EINVAL, "global batch larger than the training set");
        c->step = s->version;
        c->done = s->version >= budget(s, spe);
        c->train_epoch = (int)(s->version / spe);
        c->data_pos = (s->version % spe) * (int64_t)B * N;
        c->slot = s->r.rank;
        c->nslots = N;
        return RM_OK;
    }
    int64_t spe = s->env.train_samples / B; /* async: batches of B drawn from the permutation */
    if (spe < 1)
        return rm_errf(err, RM_EINVAL, "batch larger than the training set");
    rm_ps_rep rep;
    rm_ps_req q = {
        .op = RM_PS_OP_DRAW, .worker = (uint32_t)s->worker, .world = (uint32_t)N, .step = budget(s, spe)};
    double deadline = rm_mono() + s->env.timeout_s * PS_RETRY_FACTOR;
    bool held = false;
    for (;;) { /* server 0 alone: a small exchange */
        rm_err e = {0};
        if (ensure_conn(s, 0, deadline, &e) == RM_OK &&
            rm_ps_send(&s->conn[0], &q, NULL, rm_mono() + s->env.timeout_s, &e) == RM_OK &&
            rm_ps_recv(&s->conn[0], &rep, NULL, 0, rm_mono() + s->env.timeout_s, &e) == RM_OK) {
            if (rep.status != RM_PS_ST_TIMEOUT)
                break;
            /* held by the warm start (ps_core.h): the server answered, so it is no failure */
            if (canceled(s))
                return rm_errf(err, RM_ECANCELED, "parameter server 0: canceled");
            deadline = rm_mono() + s->env.timeout_s * PS_RETRY_FACTOR;
            held = true;
            continue;
        }
        rm_ps_conn_close(&s->conn[0]);
        if (canceled(s))
            return rm_errf(err, RM_ECANCELED, "parameter server 0: canceled");
        if (rm_mono() >= deadline)
            return rm_errf(err, RM_ETIMEDOUT, "parameter server 0: cannot draw a batch (%s)", e.msg);
        rm_sleep(0.2);
    }
    if (rep.status == RM_PS_ST_DONE) {
        /* the budget is drawn: evaluate the servers' newest parameters (a partial accumulation
         * of fewer than pushEverySteps steps is not pushed: Downpour drops it too) */
        if (!s->done)
            RM_CHECK(fetch_all(s, 0, err));
        s->done = true;
        c->done = true;
        c->step = budget(s, spe);
        c->train_epoch = (int)(c->step / spe);
        return RM_OK;
    }
    if (s->ps.warm_start_steps > 0 && s->clock == 0)
        s->clock = rep.b; /* joining after the warm start: at the job's clock, not 0 behind */
    if (held)             /* our parameters are from before the warm start: W updates old */
        RM_CHECK(fetch_all(s, 0, err));
    c->step = rep.a;
    c->train_epoch = (int)(rep.a / spe);
    c->data_pos = (rep.a % spe) * B;
    c->slot = 0;
    c->nslots = 1;
    return RM_OK;
}

/* gradClip with parameter servers (docs/strategies.md, "Optimizers for transformers"): each worker
 * clips what it pushes by that vector's own global norm (one slot per layer, as a world-1
 * allreduce step sums it), Downpour's per-push equivalent. The servers never see one another's
 * shards, so the norm of the aggregated gradient (sync) is not formed; per-worker clipping bounds
 * it by gradClip all the same (the norm of an average is at most the average of the norms). */
static int clip_push(rm_step *s, float *g, rm_step_stats *st, rm_err *err)
{
    const rm_step_env *e = &s->env;
    const rm_model *m = e->m;
    double norm;
    if (!(e->grad_clip > 0))
        return RM_OK;
    RM_CHECK(rm_optim_gnorm_begin(e->opt, m->nunits, err));
    for (int l = 0; l < m->nunits; l++)
        rm_optim_gnorm_add(e->opt, l, g + m->unit[l].off, m->unit[l].len);
    RM_CHECK(rm_optim_gnorm_finish(e->opt, &norm, err));
    float sc = rm_clip_scale(norm, e->grad_clip);
    if (sc < 1.0f)
        e->k->scale(g, m->nparams, sc);
    st->has_grad_norm = true;
    st->grad_norm = norm;
    return RM_OK;
}

static int ps_step(rm_step *s, int rows, float lr, rm_step_stats *st, rm_err *err)
{
    const rm_step_env *e = &s->env;
    rm_model *m = e->m;
    memset(st, 0, sizeof *st);
    double tc = rm_mono();
    rm_model_forward(m, rows);
    rm_model_backward(m, rows, 1.0f / (float)rows, NULL, NULL);
    double t0 = rm_mono();
    st->compute_s = t0 - tc;
    rm_ps_rep rep[RM_PS_MAX_SERVERS];
    int N = s->r.world > 0 ? s->r.world : 1;
    size_t n = m->nparams;
    if (s->ps.mode == RM_PS_SYNC) {
        rm_ps_req q = {.op = RM_PS_OP_PUSH,
                       .worker = (uint32_t)s->worker,
                       .world = (uint32_t)N,
                       .step = s->version,
                       .from_version = s->version,
                       .lr = lr};
        set_view(s, &q);
        RM_CHECK(clip_push(s, m->grads, st, err));
        RM_CHECK(push_fetch(s, &q, m->grads, err));
    } else {
        s->clock++;
        float *g = m->grads;
        if (s->ps.push_every_steps > 1) {
            for (size_t i = 0; i < n; i++)
                s->acc[i] += m->grads[i];
            g = s->acc;
        }
        if (++s->pending >= s->ps.push_every_steps) {
            /* per-batch learning rate: the driver's is scaled for the global batch B x N (sgd,
             * adam, adagrad); adamw's is the lr of one update as given (docs/strategies.md) */
            rm_ps_req q = {.op = RM_PS_OP_PUSH,
                           .worker = (uint32_t)s->worker,
                           .world = (uint32_t)N,
                           .step = s->clock,
                           .lr = rm_optim_lr_scaled(e->opt->spec.type) ? lr / (float)N : lr};
            RM_CHECK(clip_push(s, g, st, err));
            q.from_version = s->ver[0]; /* every push reaches every shard: they move together */
            RM_CHECK(exchange(s, q, g, NULL, rep, err));
            if (g == s->acc)
                memset(s->acc, 0, n * sizeof(float));
            s->pending = 0;
        }
        if (s->clock % s->ps.fetch_every_steps == 0)
            RM_CHECK(fetch_all(s, 0, err));
    }
    st->comm = true;
    st->allreduce_s = rm_mono() - t0;
    st->bytes = (uint64_t)n * sizeof(float) * 2;
    return RM_OK;
}

const rm_step_ops rm_step_ps_ops = {
    .name = "parameterServer",
    .init = ps_init,
    .round_begin = ps_round_begin,
    .state_fresh = ps_state_fresh,
    .state_sync = ps_state_sync,
    .step = ps_step,
    .round_end = ps_round_end,
    .destroy = ps_destroy,
    .claim = ps_claim,
};
