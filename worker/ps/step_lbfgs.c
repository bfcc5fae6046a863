/* step_lbfgs.c — the worker's side of Sandblaster L-BFGS (step.h; docs/strategies.md#sandblaster-l-bfgs; the coordinator and
 * shards are worker/ps/lbfgs_coord.h). Chosen by worker/train.c for spec.strategy parameterServer with
 * spec.training.optimizer.type lbfgs.
 *
 * claim asks server 0's coordinator for a portion (on demand: a fast worker simply asks more
 * often); when the reply's pass id differs from the one its parameters belong to, it fetches the
 * current parameters (the pass' trial point) from every shard first. A portion is portionSize
 * samples of data-epoch 0's permutation (the full batch is the same samples every pass); the driver
 * feeds it as portionSize / batch consecutive batches (claim answers each batch's position), step
 * accumulates the gradient (scaled by 1 / the full batch, so the shards' sum is the full-batch mean)
 * and the loss sum, and after the portion's last batch pushes each shard its slice (LB_PUSH,
 * tagged pass and portion: a shard adds a portion once, whoever computed it) and reports the loss
 * to the coordinator (LB_REPORT; the first answer for a portion wins). When the coordinator says
 * the budget is spent, claim fetches the final parameters and answers done.
 *
 * A round ending (a peer died and the group re-forms) abandons a half-done portion: the coordinator
 * reissues it after its deadline. The servers are found as step_ps.c finds them (ps_registry.h:
 * through the rendezvous, where they register, so no cluster DNS is needed; looked up again at
 * every reconnect, so a server replaced at a new address is found); requests to a server that
 * fails are retried with bounded back-off (timeout x 6). Nothing is allocated per step;
 * checkpoints are the servers' (no state_* entries). CPU path only. */
#include "worker/step.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"
#include "worker/ps/lbfgs_coord.h"
#include "worker/ps/ps_core.h"
#include "worker/ps/ps_registry.h"
#include "worker/ps/ps_wire.h"

#define LB_RETRY_FACTOR 6.0

struct rm_step {
    rm_step_env env;
    rm_step_round r;
    int S, worker, P;
    rm_ps_registry reg; /* where the servers are (the rendezvous, else the list) */
    rm_ps_conn conn[RM_PS_MAX_SERVERS];
    size_t off[RM_PS_MAX_SERVERS], len[RM_PS_MAX_SERVERS];
    int64_t portion_size, full;
    int64_t pass_id;        /* the pass our parameters belong to (-1: none yet) */
    int portion;            /* held portion, -1: none */
    int64_t portion_pass;   /* its pass id */
    int64_t portion_start;  /* its first sample */
    int64_t chunk, nchunks; /* next batch of it, batches in it */
    float *acc;             /* the portion's gradient, full length */
    double loss_sum;
    int64_t steps; /* batches this worker computed (the driver's step counter) */
    bool done;
};

static bool canceled(const rm_step *s)
{
    return s->env.cancel && *s->env.cancel;
}

static int lb_init(const rm_step_env *env, rm_step **out, rm_err *err)
{
    *out = NULL;
    if (!env->k->host_memory)
        return rm_errf(err, RM_EUNSUPPORTED, "lbfgs: the CPU path only (--device cpu)");
    rm_step *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "lbfgs: out of memory");
    s->env = *env;
    s->pass_id = -1;
    s->portion = -1;
    for (int i = 0; i < RM_PS_MAX_SERVERS; i++)
        s->conn[i].fd = -1;
    s->P = env->opt->spec.portions;
    char addrs[RM_PS_MAX_SERVERS][128];
    int rc = rm_ps_parse_addrs(getenv(RM_ENV_PS_ADDRS), addrs, RM_PS_MAX_SERVERS, &s->S, err);
    const char *url = getenv(RM_ENV_RENDEZVOUS);
    if (rc == RM_OK)
        rc = rm_ps_registry_init(&s->reg, (const char(*)[128])addrs, s->S,
                                 env->token && *env->token ? url : NULL, getenv(RM_ENV_JOB), env->token,
                                 getenv(RM_ENV_WORKER_ID), err);
    if (rc == RM_OK)
        rm_ps_registry_set_cancel(&s->reg, env->cancel, NULL);
    const rm_model *mod = env->m;
    if (rc == RM_OK)
        rc = rm_ps_partition(mod->nparams, mod->unit_off, mod->nunits, s->S, s->off, s->len, err);
    s->portion_size = rm_lbfgs_portion_size(env->train_samples, s->P, env->batch);
    s->full = s->portion_size * s->P;
    if (rc == RM_OK && s->portion_size < 1)
        rc = rm_err_field(err, RM_EINVAL, "spec.training.optimizer.portions",
                          "%d portions of at "
                          "least one batch (%d) do not fit the training set (%lld samples)",
                          s->P, env->batch, (long long)env->train_samples);
    if (rc == RM_OK && !(s->acc = calloc(mod->nparams, sizeof(float))))
        rc = rm_errf(err, RM_ENOMEM, "lbfgs: out of memory");
    if (rc) {
        rm_ps_registry_free(&s->reg);
        free(s->acc);
        free(s);
        return rc;
    }
    s->nchunks = s->portion_size / env->batch;
    *out = s;
    return RM_OK;
}

static int lb_round_begin(rm_step *s, const rm_step_round *r, rm_err *err)
{
    s->r = *r;
    const char *id = getenv(RM_ENV_WORKER_ID);
    s->worker = id && *id ? atoi(id) : r->rank;
    if (s->worker < 0 || s->worker >= RM_LBFGS_COORD_ID)
        return rm_errf(err, RM_EINVAL, "lbfgs: worker id %d out of range", s->worker);
    s->portion = -1; /* a half-done portion is abandoned: the coordinator reissues it */
    return RM_OK;
}

static void lb_round_end(rm_step *s)
{
    if (s)
        memset(&s->r, 0, sizeof s->r);
}

static void lb_destroy(rm_step *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->S; i++)
        rm_ps_conn_close(&s->conn[i]);
    rm_ps_registry_free(&s->reg);
    free(s->acc);
    free(s);
}

static int lb_state_fresh(rm_step *s, uint64_t seed, rm_err *err)
{
    return rm_model_init_params(s->env.m, seed, err); /* what the servers drew; fetched anyway */
}
/* One request to server i and its reply (payload floats from src, reply floats into dst, at most
 * cap), reconnecting (ps_registry.h: the server's address looked up again) with bounded back-off
 * until the retry deadline. */
static int call(rm_step *s, int i, rm_ps_req q, const float *src, float *dst, size_t cap, rm_ps_rep *rep,
                rm_err *err)
{
    double deadline = rm_mono() + s->env.timeout_s * LB_RETRY_FACTOR;
    for (;;) {
        rm_err e = {0};
        int rc = rm_ps_registry_connect(&s->reg, &s->conn[i], i, s->worker, s->env.token, deadline, &e);
        if (rc == RM_EAUTH || rc == RM_ECANCELED)
            return rm_errf(err, rc, "%s", e.msg);
        if (rc != RM_OK) /* the registry retried until the deadline */
            return rm_errf(err, RM_ETIMEDOUT, "parameter server %d: no answer within %.0f s (%s)", i,
                           s->env.timeout_s * LB_RETRY_FACTOR, e.msg);
        rc = rm_ps_send(&s->conn[i], &q, src, rm_mono() + s->env.timeout_s, &e);
        if (rc == RM_OK)
            rc = rm_ps_recv(&s->conn[i], rep, dst, cap, rm_mono() + 2 * s->env.timeout_s + 1, &e);
        if (rc == RM_OK)
            return RM_OK;
        rm_ps_conn_close(&s->conn[i]);
        if (canceled(s))
            return rm_errf(err, RM_ECANCELED, "parameter server %d: canceled", i);
        if (rm_mono() + 0.2 > deadline)
            return rm_errf(err, RM_ETIMEDOUT, "parameter server %d: no answer within %.0f s (%s)", i,
                           s->env.timeout_s * LB_RETRY_FACTOR, e.msg);
        rm_warn("parameter server %d failed, reconnecting err=\"%s\"", i, e.msg);
        rm_sleep(0.2);
    }
}

/* The current parameters (the pass' trial point) from every shard. */
static int fetch_params(rm_step *s, rm_err *err)
{
    for (int i = 0; i < s->S; i++) {
        rm_ps_rep rep;
        rm_ps_req q = {.op = RM_PS_OP_FETCH, .worker = (uint32_t)s->worker, .step = 0};
        RM_CHECK(call(s, i, q, NULL, s->env.m->params + s->off[i], s->len[i], &rep, err));
        if (rep.status != RM_PS_ST_OK || rep.nfloats != s->len[i])
            return rm_errf(err, RM_EPROTO,
                           "parameter server %d: fetch answered status %u with %u "
                           "floats (its shard is %zu)",
                           i, rep.status, rep.nfloats, s->len[i]);
    }
    return RM_OK;
}

static int lb_state_sync(rm_step *s, rm_step_pos *pos, rm_err *err)
{
    (void)err;
    pos->step = s->steps;
    pos->train_epoch = 0;
    pos->eval_done = false;
    return RM_OK;
}

static void answer(rm_step *s, rm_step_claim *c)
{
    c->step = s->steps;
    c->train_epoch = 0; /* the full batch: the same samples of epoch 0's permutation each pass */
    c->data_pos = s->portion_start + s->chunk * s->env.batch;
    c->slot = 0;
    c->nslots = 1;
}

static int lb_claim(rm_step *s, rm_step_claim *c, rm_err *err)
{
    memset(c, 0, sizeof *c);
    if (s->portion >= 0 && s->chunk < s->nchunks) {
        answer(s, c);
        return RM_OK;
    }
    for (;;) {
        rm_ps_rep rep;
        rm_ps_req q = {.op = RM_PS_OP_LB_CLAIM, .worker = (uint32_t)s->worker, .step = s->env.train_samples};
        RM_CHECK(call(s, 0, q, NULL, NULL, 0, &rep, err));
        if (rep.status == RM_PS_ST_BAD)
            return rm_errf(err, RM_EPROTO,
                           "lbfgs: the coordinator refused the claim (see server "
                           "0's log: portions that do not fit the training set?)");
        if ((rep.status == RM_PS_ST_OK || rep.status == RM_PS_ST_DONE) && rep.version != s->pass_id) {
            RM_CHECK(fetch_params(s, err));
            s->pass_id = rep.version;
        }
        if (rep.status == RM_PS_ST_DONE) {
            s->done = true;
            c->done = true;
            c->step = s->steps;
            return RM_OK;
        }
        if (rep.status == RM_PS_ST_OK) {
            s->portion = (int)rep.a;
            s->portion_pass = rep.version;
            s->portion_start = rep.b;
            s->chunk = 0;
            s->loss_sum = 0;
            memset(s->acc, 0, s->env.m->nparams * sizeof(float));
            answer(s, c);
            return RM_OK;
        }
        if (canceled(s)) /* TIMEOUT: nothing to hand out yet; ask again */
            return rm_errf(err, RM_ECANCELED, "lbfgs: canceled");
    }
}

static int lb_step(rm_step *s, int rows, float lr, rm_step_stats *st, rm_err *err)
{
    (void)lr;
    rm_model *m = s->env.m;
    size_t n = m->nparams;
    memset(st, 0, sizeof *st);
    if (s->portion < 0)
        return rm_errf(err, RM_EINVAL, "lbfgs: a step without a portion");
    rm_model_forward(m, rows);
    rm_model_backward(m, rows, 1.0f / (float)s->full, NULL, NULL);
    s->loss_sum += (double)*m->loss_sum; /* host memory (CPU path) */
    for (size_t i = 0; i < n; i++)
        s->acc[i] += m->grads[i];
    s->steps++;
    if (++s->chunk < s->nchunks)
        return RM_OK;
    /* the portion is done: its gradient to every shard, then its loss to the coordinator */
    double t0 = rm_mono();
    for (int i = 0; i < s->S; i++) {
        rm_ps_rep rep;
        rm_ps_req q = {.op = RM_PS_OP_LB_PUSH,
                       .worker = (uint32_t)s->worker,
                       .step = s->portion_pass,
                       .world = (uint32_t)s->portion,
                       .nfloats = (uint32_t)s->len[i]};
        RM_CHECK(call(s, i, q, s->acc + s->off[i], NULL, 0, &rep, err));
    }
    rm_ps_rep rep;
    rm_ps_req q = {.op = RM_PS_OP_LB_REPORT,
                   .worker = (uint32_t)s->worker,
                   .step = s->portion_pass,
                   .world = (uint32_t)s->portion,
                   .from_version = rm_lb_dbits(s->loss_sum)};
    RM_CHECK(call(s, 0, q, NULL, NULL, 0, &rep, err));
    s->portion = -1;
    st->comm = true;
    st->allreduce_s = rm_mono() - t0;
    st->bytes = (uint64_t)n * sizeof(float);
    return RM_OK;
}

const rm_step_ops rm_step_lbfgs_ops = {
    .name = "lbfgs",
    .init = lb_init,
    .round_begin = lb_round_begin,
    .state_fresh = lb_state_fresh,
    .state_sync = lb_state_sync,
    .step = lb_step,
    .round_end = lb_round_end,
    .destroy = lb_destroy,
    .claim = lb_claim,
};
