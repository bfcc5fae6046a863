/* step_allreduce.c — the "allreduce" strategy: synchronous data parallelism (step.h).
 *
 * One step: forward -> backward layer by layer, each finished layer handed to the fusion layer
 * (worker/allreduce/fusion.h) so its bucket allreduces while earlier layers are still computed ->
 * rm_fusion_finish (gradients averaged) -> mixed-precision finish (fp16: unscale, agree on
 * overflow) -> optimizer update at the driver's LR. Every rank does the same arithmetic on the same
 * averaged gradients, so replicas stay bit-identical; a checkpoint is therefore rank 0's copy of
 * the parameters and optimizer state, and agreeing on state when a round forms is a broadcast from
 * rank 0, done as an allreduce SUM where the other ranks contribute zeros (exact in floating
 * point: x + 0 + ... + 0 == x).
 * The fusion plan and its comm thread live for one round; nothing is allocated per step.
 *
 * Sharding (env.sharding, ZeRO stages; docs/strategies.md). The unit of sharding is a layer (W and b):
 * rank r owns its piece of every layer (worker/allreduce/shard.h, rm_unit_shard) and keeps the optimizer
 * state of its pieces only, back to back in a compact buffer (the driver's full-size state buffers
 * are released at init).
 *   optimizer (ZeRO-1): gradients allreduced as above; each rank updates its pieces with its state;
 *             each layer's parameters are all-gathered.
 *   gradients (ZeRO-2): a rank keeps only its pieces of the gradient (gshard, compact) plus two
 *             staging buckets; the model's whole gradient buffer is freed at init. Backward hands
 *             each layer's dY to on_layer_grad_staged (rm_model_backward_placed), which computes
 *             the layer's gradient bucket by bucket (worker/allreduce/shard.h rm_shard_buckets: bucket k is
 *             the k-th part of every rank's piece, in rank order) into a staging buffer, and
 *             reduce-scatters each full bucket on the comm thread straight into gshard while the
 *             next bucket is computed into the other buffer. Then as ZeRO-1. (An earlier version
 *             wrote the whole gradient and gave back pages with madvise: 2-3x slower for a 1.3x
 *             smaller peak, because page faults refilled the buffer every step.)
 *   full (ZeRO-3/FSDP): m->params keeps only the rank's pieces resident (host memory: the other
 *             pages are given back with madvise once, when the parameters were last made whole by
 *             a restore, sync or evaluation; device memory keeps its allocation). In a step each
 *             layer is all-gathered into unit buffer ubuf[l & 1] just before its forward, and the
 *             model reads it there (rm_model.uparams); backward gathers again only the layers no
 *             longer in a unit buffer (the last two stay from forward). Gradients as in stage
 *             gradients. Prefetch: while layer l computes, the comm thread all-gathers the next
 *             layer (l+1 in forward, l-1 in backward) into the other unit buffer; the training
 *             thread waits for it before any collective of its own, so the comm runs one at a
 *             time, and at most two layers' parameters are whole at once.
 * The update is element-wise, so every stage computes the same parameters as none; ZeRO-1 is
 * bit-identical (same allreduce), the others differ only by the summation order of per-bucket
 * reduce-scatters instead of the fusion's allreduce segments.
 * Checkpoints (sharded stages) are per rank (worker/checkpoint/ckpt_shard.h): state_save gives this rank's
 * compact shard — its pieces of the parameters, then of each optimizer buffer — with no
 * collective, so interval, end and SIGTERM checkpoints all work; a restore gets every parameter
 * whole plus this round's pieces of the optimizer state, re-sharded by the driver's loader from
 * whatever world wrote the set (state_restore_shard). A whole checkpoint (sharding none, or an
 * older run) restores too: state_restore takes this round's pieces from the full payload. */
#include "worker/step.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "worker/allreduce/fusion.h"
#include "worker/allreduce/shard.h"

#define SYNC_FLOATS 16

struct rm_step {
    rm_step_env env;
    rm_step_round r;   /* ops == NULL between rounds */
    rm_fusion *fusion; /* world > 1 only */
    int fusion_err;
    float *dev_small; /* SYNC_FLOATS of device memory: the state-sync header */
    float *loss_acc;  /* gradient accumulation: the step's loss sum over its micro-batches */
    /* sharding (mode != none) */
    rm_sharding mode;
    rm_unit_shard us;  /* this round's pieces (valid between round_begin and round_end) */
    float *sstate[2];  /* compact optimizer state of the pieces (kernels memory) */
    size_t sstate_cap; /* floats allocated per buffer */
    bool state_set;    /* the pieces' state was restored or made fresh in this round */
    int64_t state_t;   /* ... at this optimizer count */
    int hook_err;      /* first failure inside a forward/backward hook */
    double stat_s;     /* this step: seconds in collectives, bytes moved */
    uint64_t stat_bytes;
    rm_err hook_e;
    uint64_t gathered; /* stage full: bit l = layer l's parameters are whole in m->params */
    /* stage full, world > 1: during a step layer l is gathered into unit buffer ubuf[l & 1] (max_unit
     * floats each, allocated once) and the model reads it there (m->uparams); m->params keeps
     * only the own pieces resident, so no page is faulted in or given back per step. slot[i] is
     * the layer ubuf[i] holds for this step's parameters (-1: none). */
    float *ubuf[2];
    size_t ubuf_cap;
    /* stage full: units another unit reads (rm_model_unit.reads: the tied embedding the head
     * projects with) are gathered into a buffer of their own and stay whole for the whole step,
     * as FSDP keeps tied parameters in one unit; bit u of pinned = unit u */
    uint64_t pinned;
    float *pbuf[RM_MODEL_MAX_UNITS];
    int slot[2];
    bool pieces_valid; /* the pieces hold a real state (fresh, restored, synced or stepped) */
    /* stage full: the prefetch thread gathers the next layer while this one computes (one
     * collective at a time: the training thread waits for it before any collective of its own) */
    pthread_t pf_th;
    pthread_mutex_t pf_mu;
    pthread_cond_t pf_cv;
    bool pf_started, pf_stop;
    int pf_job;             /* layer to gather (-1 none; PF_RS: the reduce-scatter below), pf_mu */
    float *rs_buf, *rs_dst; /* PF_RS job: reduce-scatter (AVG) rs_count floats of rs_buf into rs_dst */
    size_t rs_count;
    double pf_secs;      /* seconds the thread spent in collectives since the last pf_wait */
    bool pf_busy;        /* a gather was launched and not yet waited for (training thread) */
    int pf_layer, pf_rc; /* the launched layer and its result (pf_mu) */
    float *pf_dst;       /* where the launched gather writes (a unit buffer) */
    bool pf_done;
    rm_err pf_err;
    bool torn; /* a step began updating the pieces and did not finish */
    /* stages gradients and full: backward writes each layer's gradient bucket by bucket into one
     * of two staging buffers (stage_cap floats each) and each full bucket is reduce-scattered on
     * the comm thread into gshard (this rank's compact pieces, us layout) while the next bucket is
     * computed; the model's whole gradient buffer is given back at init. */
    float *gshard; /* us.total floats (gshard_cap allocated) */
    size_t gshard_cap;
    float *stage[2];
    size_t stage_cap; /* floats per staging buffer (world-dependent) */
    size_t bucket;    /* staging bucket target in floats (rm_shard_buckets' cap) */
    int stage_next;   /* the staging buffer the next bucket fills */
    /* where a round's step time goes (logged at round end): seconds summed over ph_steps steps */
    double ph_fwd, ph_bwd, ph_upd, ph_gather, ph_wait;
    int64_t ph_steps;
};

/* The phase split of this round's steps, averaged, then reset (training thread). */
static void phases_log(rm_step *s)
{
    if (s->ph_steps > 0) {
        double k = 1e3 / (double)s->ph_steps;
        rm_info("step phases stage=%s world=%d steps=%lld forward_ms=%.2f backward_ms=%.2f "
                "update_ms=%.2f gather_ms=%.2f comm_wait_ms=%.2f",
                rm_sharding_names[s->mode], s->r.world, (long long)s->ph_steps, s->ph_fwd * k, s->ph_bwd * k,
                s->ph_upd * k, s->ph_gather * k, s->ph_wait * k);
    }
    s->ph_fwd = s->ph_bwd = s->ph_upd = s->ph_gather = s->ph_wait = 0;
    s->ph_steps = 0;
}

#define PF_RS (-2)
/* ZeRO-2/3 staging bucket: small enough that two of them are little next to a 1/N gradient shard
 * of a large model, large enough that each rank's part is tens of GEMM rows. */
#define STAGE_BUCKET_BYTES (2u << 20)

static bool staged_grads(const rm_step *s)
{
    return s->mode == RM_SHARD_GRADIENTS || s->mode == RM_SHARD_FULL;
}

static int ar_init(const rm_step_env *env, rm_step **out, rm_err *err)
{
    *out = NULL;
    if ((unsigned)env->sharding > RM_SHARD_FULL)
        return rm_errf(err, RM_EINVAL, "allreduce strategy: unknown sharding %d", (int)env->sharding);
    if (env->sharding != RM_SHARD_NONE && env->m->nunits > RM_SHARD_MAX_UNITS)
        return rm_errf(err, RM_EINVAL, "allreduce strategy: sharding supports at most %d layers",
                       RM_SHARD_MAX_UNITS);
    rm_step *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "allreduce strategy: out of memory");
    s->env = *env;
    s->mode = env->sharding;
    s->slot[0] = s->slot[1] = -1;
    if (s->mode != RM_SHARD_NONE) {
        /* the pieces' state replaces the driver's full-size buffers: give those back */
        for (int i = 0; i < env->opt->nstate; i++) {
            env->k->free(env->opt->state[i]);
            env->opt->state[i] = NULL;
        }
    }
    if (staged_grads(s)) {
        /* the gradient lives as this rank's pieces (gshard) plus two staging buckets: the whole
         * buffer is never written (rm_model_backward_placed), give it back */
        env->k->free(env->m->grads);
        env->m->grads = NULL;
        double mb = env->fusion_mb > 0 && env->fusion_mb * 1048576.0 < STAGE_BUCKET_BYTES
                        ? env->fusion_mb * 1048576.0
                        : (double)STAGE_BUCKET_BYTES;
        s->bucket = (size_t)(mb / sizeof(float));
        if (s->bucket < 1)
            s->bucket = 1;
    }
    if (env->grad_accum > 1 && (staged_grads(s) || !env->load_micro)) {
        free(s);
        return rm_err_field(err, RM_EINVAL, "spec.training.gradientAccumulationSteps",
                            "gradientAccumulationSteps with strategy allreduce and sharding %s is not "
                            "supported (use sharding none or optimizer)",
                            rm_sharding_names[env->sharding]);
    }
    s->dev_small = env->k->alloc(SYNC_FLOATS * sizeof(float));
    s->loss_acc = env->k->alloc(sizeof(float));
    if (!s->dev_small || !s->loss_acc) {
        env->k->free(s->dev_small);
        env->k->free(s->loss_acc);
        free(s);
        return rm_errf(err, RM_ENOMEM, "allreduce strategy: out of device memory");
    }
    *out = s;
    return RM_OK;
}

static void pf_stop(rm_step *s);

static void ar_round_end(rm_step *s)
{
    if (!s)
        return;
    pf_stop(s); /* after an abort its collective has returned */
    phases_log(s);
    if (s->fusion) {
        rm_fusion_free(s->fusion);
        s->fusion = NULL;
    }
    memset(&s->r, 0, sizeof s->r);
    s->state_set = false; /* the pieces (us) and pieces_valid stay: the SIGTERM checkpoint */
}

/* ---- sharding helpers ---- */

/* Layer l of buf (params or grads) outside this rank's piece. */
static void release_unit(const rm_step *s, float *buf, int l)
{
    const rm_unit_shard *u = &s->us;
    /* (the own piece is never inside: the two ranges are outside it) */
    rm_model_release_range(s->env.m, buf, u->unit_off[l], u->off[l]);
    rm_model_release_range(s->env.m, buf, u->off[l] + u->len[l], u->unit_off[l] + u->unit_len[l]);
}

static int gather_unit(rm_step *s, int l, rm_err *err)
{
    const rm_unit_shard *u = &s->us;
    float *p = s->env.m->params;
    if (s->gathered & (1ull << l))
        return RM_OK;
    RM_CHECK(
        s->r.ops->all_gather(s->r.comm, p + u->off[l], p + u->unit_off[l], u->unit_len[l], RM_DT_F32, err));
    s->gathered |= 1ull << l;
    return RM_OK;
}

static void drop_unit(rm_step *s, int l)
{
    if (!(s->gathered & (1ull << l)))
        return;
    release_unit(s, s->env.m->params, l);
    s->gathered &= ~(1ull << l);
}

/* Stage full, between uses: keep only the own pieces. */
static void drop_all_units(rm_step *s)
{
    for (int l = 0; l < s->us.nunits; l++) {
        s->gathered |= 1ull << l;
        drop_unit(s, l);
    }
}

/* ---- stage full: unit buffers ---- */

static void slot_clear(rm_step *s, int i)
{
    if (s->slot[i] >= 0)
        s->env.m->uparams[s->slot[i]] = NULL;
    s->slot[i] = -1;
}

static void slot_set(rm_step *s, int l)
{
    slot_clear(s, l & 1);
    s->slot[l & 1] = l;
    s->env.m->uparams[l] = s->ubuf[l & 1];
}

/* The parameters changed (an update, a restore, a sync): no unit buffer holds them any more. */
static void slots_reset(rm_step *s)
{
    slot_clear(s, 0);
    slot_clear(s, 1);
    for (int l = 0; l < RM_MODEL_MAX_UNITS; l++)
        if (s->pinned & (1ull << l))
            s->env.m->uparams[l] = NULL;
}

/* Layer l into its unit buffer on this thread (after pf_wait: one collective at a time). */
static int slot_gather(rm_step *s, int l, rm_err *err)
{
    if (s->pinned & (1ull << l)) { /* its own buffer, whole until the parameters change */
        if (s->env.m->uparams[l] == s->pbuf[l])
            return RM_OK;
        const rm_unit_shard *u = &s->us;
        RM_CHECK(s->r.ops->all_gather(s->r.comm, s->env.m->params + u->off[l], s->pbuf[l], u->unit_len[l],
                                      RM_DT_F32, err));
        s->env.m->uparams[l] = s->pbuf[l];
        return RM_OK;
    }
    if (s->slot[l & 1] == l)
        return RM_OK;
    slot_clear(s, l & 1);
    const rm_unit_shard *u = &s->us;
    RM_CHECK(s->r.ops->all_gather(s->r.comm, s->env.m->params + u->off[l], s->ubuf[l & 1], u->unit_len[l],
                                  RM_DT_F32, err));
    slot_set(s, l);
    return RM_OK;
}

/* ---- stage full: prefetch of the next layer's parameters ---- */

static void *pf_main(void *arg)
{
    rm_step *s = arg;
    pthread_mutex_lock(&s->pf_mu);
    for (;;) {
        while (!s->pf_stop && s->pf_job == -1)
            pthread_cond_wait(&s->pf_cv, &s->pf_mu);
        if (s->pf_stop)
            break;
        int l = s->pf_job;
        s->pf_job = -1;
        pthread_mutex_unlock(&s->pf_mu);
        const rm_unit_shard *u = &s->us;
        float *p = s->env.m->params;
        rm_err e = {0};
        double t0 = rm_mono();
        int rc = l == PF_RS ? s->r.ops->reduce_scatter(s->r.comm, s->rs_buf, s->rs_dst, s->rs_count,
                                                       RM_DT_F32, RM_OP_AVG, &e)
                            : s->r.ops->all_gather(s->r.comm, p + u->off[l], s->pf_dst, u->unit_len[l],
                                                   RM_DT_F32, &e);
        double dt = rm_mono() - t0;
        pthread_mutex_lock(&s->pf_mu);
        s->pf_secs += dt;
        s->pf_rc = rc;
        s->pf_err = e;
        s->pf_done = true;
        pthread_cond_broadcast(&s->pf_cv);
    }
    pthread_mutex_unlock(&s->pf_mu);
    return NULL;
}

static void pf_stop(rm_step *s)
{
    if (!s->pf_started)
        return;
    pthread_mutex_lock(&s->pf_mu);
    s->pf_stop = true;
    pthread_cond_broadcast(&s->pf_cv);
    pthread_mutex_unlock(&s->pf_mu);
    pthread_join(s->pf_th, NULL);
    pthread_mutex_destroy(&s->pf_mu);
    pthread_cond_destroy(&s->pf_cv);
    s->pf_started = false;
    s->pf_busy = false;
}

static int pf_start(rm_step *s, rm_err *err)
{
    s->pf_stop = false;
    s->pf_job = -1;
    s->pf_secs = 0;
    s->pf_busy = false;
    pthread_mutex_init(&s->pf_mu, NULL);
    pthread_cond_init(&s->pf_cv, NULL);
    if (pthread_create(&s->pf_th, NULL, pf_main, s) != 0) {
        pthread_mutex_destroy(&s->pf_mu);
        pthread_cond_destroy(&s->pf_cv);
        return rm_errf(err, RM_ERR, "sharding: cannot start the prefetch thread");
    }
    s->pf_started = true;
    return RM_OK;
}

/* Wait for the gather in flight (if any); on success its layer is whole. Every collective of the
 * training thread comes after this, so the comm never runs two at once. */
static int pf_wait(rm_step *s, rm_err *err)
{
    if (!s->pf_busy)
        return RM_OK;
    double t0 = rm_mono();
    pthread_mutex_lock(&s->pf_mu);
    while (!s->pf_done)
        pthread_cond_wait(&s->pf_cv, &s->pf_mu);
    s->ph_wait += rm_mono() - t0;
    int rc = s->pf_rc;
    if (rc)
        *err = s->pf_err;
    if (s->pf_layer == PF_RS) /* a gather's time is the prefetch's: hidden, not counted */
        s->stat_s += s->pf_secs;
    s->pf_secs = 0;
    pthread_mutex_unlock(&s->pf_mu);
    s->pf_busy = false;
    if (rc == RM_OK && s->pf_layer >= 0)
        slot_set(s, s->pf_layer);
    return rc;
}

/* Start reduce-scattering count floats of buf (a staging bucket) into dst on the comm thread. The
 * caller waited for the previous job (pf_wait) and leaves buf alone until the next pf_wait. */
static void rs_launch(rm_step *s, float *buf, float *dst, size_t count)
{
    pthread_mutex_lock(&s->pf_mu);
    s->rs_buf = buf;
    s->rs_dst = dst;
    s->rs_count = count;
    s->pf_done = false;
    s->pf_layer = PF_RS;
    s->pf_job = PF_RS;
    pthread_cond_broadcast(&s->pf_cv);
    pthread_mutex_unlock(&s->pf_mu);
    s->pf_busy = true;
}

/* Start gathering layer l into its unit buffer on the prefetch thread (nothing if it is there or
 * out of range). The buffer's previous layer is done with: forward gathers l+1 while l computes
 * (l-1 is finished), backward l-1 while l computes (l+1 is finished). */
static void pf_launch(rm_step *s, int l)
{
    if (!s->pf_started || s->pf_busy || l < 0 || l >= s->us.nunits || s->slot[l & 1] == l ||
        (s->pinned & (1ull << l)))
        return;
    slot_clear(s, l & 1);
    s->pf_dst = s->ubuf[l & 1];
    pthread_mutex_lock(&s->pf_mu);
    s->pf_done = false;
    s->pf_layer = l;
    s->pf_job = l;
    pthread_cond_broadcast(&s->pf_cv);
    pthread_mutex_unlock(&s->pf_mu);
    s->pf_busy = true;
}

static int ar_round_begin(rm_step *s, const rm_step_round *r, rm_err *err)
{
    ar_round_end(s);
    s->r = *r;
    rm_model *m = s->env.m;
    if (s->mode != RM_SHARD_NONE) {
        if (!r->ops->reduce_scatter || !r->ops->all_gather)
            return rm_errf(err, RM_EUNSUPPORTED, "sharding: comm backend %s has no reduce_scatter/all_gather",
                           r->ops->name);
        if (rm_unit_shard_make(m->unit_off, m->unit_len, m->nunits, r->world, r->rank, &s->us) != 0)
            return rm_errf(err, RM_EINVAL, "sharding: bad layer layout");
        size_t need = s->us.total ? s->us.total : 1;
        if (need > s->sstate_cap) { /* the pieces grow when the world shrinks */
            for (int i = 0; i < 2; i++) {
                s->env.k->free(s->sstate[i]);
                s->sstate[i] = NULL;
            }
            s->sstate_cap = 0;
            for (int i = 0; i < s->env.opt->nstate; i++) {
                s->sstate[i] = s->env.k->alloc(need * sizeof(float));
                if (!s->sstate[i])
                    return rm_errf(err, RM_ENOMEM,
                                   "sharding: out of memory for %zu floats of "
                                   "optimizer state",
                                   need);
            }
            s->sstate_cap = need;
        }
        if (staged_grads(s)) {
            if (need > s->gshard_cap) {
                s->env.k->free(s->gshard);
                s->gshard_cap = 0;
                s->gshard = s->env.k->alloc(need * sizeof(float));
                if (!s->gshard)
                    return rm_errf(err, RM_ENOMEM,
                                   "sharding: out of memory for %zu floats of "
                                   "gradient shard",
                                   need);
                s->gshard_cap = need;
            }
            /* no bucket is larger than its unit: a small model stages at most its widest layer */
            size_t sc = r->world > 1 ? rm_shard_bucket_cap(s->bucket, r->world) : 0;
            if (sc > s->us.max_unit)
                sc = s->us.max_unit;
            if (sc != s->stage_cap) {
                for (int i = 0; i < 2; i++) {
                    s->env.k->free(s->stage[i]);
                    s->stage[i] = NULL;
                }
                s->stage_cap = 0;
                for (int i = 0; i < 2 && sc; i++)
                    if (!(s->stage[i] = s->env.k->alloc(sc * sizeof(float))))
                        return rm_errf(err, RM_ENOMEM,
                                       "sharding: out of memory for the gradient "
                                       "staging buffers (%zu floats)",
                                       sc);
                s->stage_cap = sc;
            }
        }
        if (s->mode == RM_SHARD_FULL && r->world > 1 && s->us.max_unit > s->ubuf_cap) {
            for (int i = 0; i < 2; i++) {
                s->env.k->free(s->ubuf[i]);
                s->ubuf[i] = NULL;
            }
            s->ubuf_cap = 0;
            for (int i = 0; i < 2; i++)
                if (!(s->ubuf[i] = s->env.k->alloc(s->us.max_unit * sizeof(float))))
                    return rm_errf(err, RM_ENOMEM,
                                   "sharding: out of memory for the unit buffers "
                                   "(%zu floats)",
                                   s->us.max_unit);
            s->ubuf_cap = s->us.max_unit;
        }
        if (s->mode == RM_SHARD_FULL && r->world > 1) {
            s->pinned = 0;
            for (int l = 0; l < m->nunits; l++)
                s->pinned |= m->unit[l].reads;
            for (int l = 0; l < m->nunits; l++)
                if ((s->pinned & (1ull << l)) && !s->pbuf[l] &&
                    !(s->pbuf[l] = s->env.k->alloc(m->unit_len[l] * sizeof(float))))
                    return rm_errf(err, RM_ENOMEM,
                                   "sharding: out of memory for unit %d's buffer (%zu floats)", l,
                                   m->unit_len[l]);
        }
        slots_reset(s);
        s->gathered = (1ull << m->nunits) - 1; /* params whole until state_sync */
        if (staged_grads(s) && r->world > 1)
            RM_CHECK(pf_start(s, err));
        rm_info("sharding ready stage=%s rank=%d world=%d layers=%d shard_floats=%zu of %zu",
                rm_sharding_names[s->mode], r->rank, r->world, s->us.nunits, s->us.total, m->nparams);
    }
    /* one norm slot per rank (clipping, trust ratios): the same slots whatever the stage */
    RM_CHECK(rm_optim_reserve(s->env.opt, r->world, r->world * m->nunits, err));
    if (r->world > 1 && !staged_grads(s)) {
        size_t thr = (size_t)(s->env.fusion_mb * 1024.0 * 1024.0);
        RM_CHECK(rm_fusion_new(r->ops, r->comm, m->grads, m->unit_off, m->unit_len, m->nunits, thr,
                               &s->fusion, err));
        rm_fusion_set_world_size(s->fusion, r->world);
    }
    return RM_OK;
}

static void ar_destroy(rm_step *s)
{
    if (!s)
        return;
    ar_round_end(s);
    s->env.k->free(s->dev_small);
    s->env.k->free(s->loss_acc);
    for (int i = 0; i < 2; i++) {
        s->env.k->free(s->sstate[i]);
        s->env.k->free(s->stage[i]);
        s->env.k->free(s->ubuf[i]);
    }
    for (int l = 0; l < RM_MODEL_MAX_UNITS; l++)
        s->env.k->free(s->pbuf[l]);
    s->env.k->free(s->gshard);
    free(s);
}

static int ar_state_fresh(rm_step *s, uint64_t seed, rm_err *err)
{
    const rm_step_env *e = &s->env;
    int rc = rm_model_init_params(e->m, seed, err);
    if (s->mode != RM_SHARD_NONE) {
        for (int i = 0; i < e->opt->nstate; i++)
            e->k->memset0(s->sstate[i], s->sstate_cap * sizeof(float));
        s->state_set = true;
        s->state_t = 0;
        s->gathered = (1ull << e->m->nunits) - 1;
        s->pieces_valid = true;
        s->torn = false;
    }
    for (int i = 0; s->mode == RM_SHARD_NONE && i < e->opt->nstate; i++)
        e->k->memset0(e->opt->state[i], e->opt->n * sizeof(float));
    e->opt->t = 0;
    return rc;
}

/* Replicas are identical: rank 0 writes the whole state (params, then each optimizer buffer).
 * Sharded: every rank its compact shard, while its pieces hold a whole step's state. */
static size_t ar_state_bytes(const rm_step *s, int rank)
{
    if (s->mode != RM_SHARD_NONE)
        return s->pieces_valid && !s->torn && s->us.nunits > 0
                   ? (size_t)(1 + s->env.opt->nstate) * s->us.total * sizeof(float)
                   : 0;
    if (rank != 0)
        return 0;
    return (size_t)(1 + s->env.opt->nstate) * s->env.m->nparams * sizeof(float);
}

static int ar_state_save(rm_step *s, void *dst, rm_err *err)
{
    const rm_step_env *e = &s->env;
    size_t n = e->m->nparams * sizeof(float);
    int rc = RM_OK;
    if (s->mode != RM_SHARD_NONE) {
        const rm_unit_shard *u = &s->us;
        if (!ar_state_bytes(s, 0))
            return rm_errf(err, RM_EINVAL, "checkpoint: the shard holds no whole step's state");
        float *d = dst;
        for (int l = 0; rc == RM_OK && l < u->nunits; l++) /* the own pieces are always resident */
            if (u->len[l])
                rc = e->k->d2h(d + u->soff[l], e->m->params + u->off[l], u->len[l] * sizeof(float));
        for (int i = 0; rc == RM_OK && i < e->opt->nstate; i++)
            if (u->total)
                rc = e->k->d2h(d + (size_t)(1 + i) * u->total, s->sstate[i], u->total * sizeof(float));
    } else {
        rc = e->k->d2h(dst, e->m->params, n); /* a memcpy for host-memory tables */
        for (int i = 0; rc == RM_OK && i < e->opt->nstate; i++)
            rc = e->k->d2h((char *)dst + (size_t)(1 + i) * n, e->opt->state[i], n);
    }
    if (rc != RM_OK) {
        int crc = e->k->check(err);
        return crc != RM_OK ? crc : rm_errf(err, rc, "checkpoint: reading the weights failed");
    }
    return RM_OK;
}

static bool ar_state_sharded(const rm_step *s)
{
    return s->mode != RM_SHARD_NONE;
}

/* Every parameter, then this round's pieces of each optimizer buffer (compact). */
static void ar_state_restore_shard(rm_step *s, const void *src, int64_t opt_t, float loss_scale,
                                   int scaler_tracker)
{
    const rm_step_env *e = &s->env;
    size_t n = e->m->nparams;
    const float *f = src;
    e->k->h2d(e->m->params, f, n * sizeof(float));
    for (int i = 0; i < e->opt->nstate && s->us.total; i++)
        e->k->h2d(s->sstate[i], f + n + (size_t)i * s->us.total, s->us.total * sizeof(float));
    s->state_set = true;
    s->state_t = opt_t;
    s->gathered = (1ull << e->m->nunits) - 1;
    s->pieces_valid = true;
    s->torn = false;
    e->opt->t = opt_t;
    if (loss_scale > 0)
        rm_loss_scaler_restore(&e->amp->scaler, loss_scale, scaler_tracker);
}

static void ar_state_restore(rm_step *s, const void *src, int64_t opt_t, float loss_scale, int scaler_tracker)
{
    const rm_step_env *e = &s->env;
    size_t n = e->m->nparams * sizeof(float);
    e->k->h2d(e->m->params, src, n);
    if (s->mode != RM_SHARD_NONE) {
        /* re-shard: whatever world wrote the payload, take this round's pieces of each buffer */
        const rm_unit_shard *u = &s->us;
        for (int i = 0; i < e->opt->nstate; i++) {
            const float *full = (const float *)((const char *)src + (size_t)(1 + i) * n);
            for (int l = 0; l < u->nunits; l++)
                if (u->len[l])
                    e->k->h2d(s->sstate[i] + u->soff[l], full + u->off[l], u->len[l] * sizeof(float));
        }
        s->state_set = true;
        s->state_t = opt_t;
        s->gathered = (1ull << e->m->nunits) - 1;
        s->pieces_valid = true;
        s->torn = false;
    }
    for (int i = 0; s->mode == RM_SHARD_NONE && i < e->opt->nstate; i++)
        e->k->h2d(e->opt->state[i], (const char *)src + (size_t)(1 + i) * n, n);
    e->opt->t = opt_t;
    if (loss_scale > 0)
        rm_loss_scaler_restore(&e->amp->scaler, loss_scale, scaler_tracker);
}

/* 64-bit counters travel as three 21-bit pieces: each is exact in a float. */
static void put64(float *f, int64_t v)
{
    uint64_t u = (uint64_t)v;
    f[0] = (float)(u & 0x1fffff);
    f[1] = (float)((u >> 21) & 0x1fffff);
    f[2] = (float)((u >> 42) & 0x1fffff);
}
static int64_t get64(const float *f)
{
    return (int64_t)((uint64_t)f[0] | ((uint64_t)f[1] << 21) | ((uint64_t)f[2] << 42));
}

/* Make every rank hold rank 0's exact state and position: allreduce SUM where the others
 * contribute zeros. The position includes whether this step's end-of-epoch evaluation is done. */
/* The position half: rank 0's position, optimizer count and loss scale into meta on every rank. */
static int sync_meta(rm_step *s, const rm_step_pos *pos, float *meta, rm_err *err)
{
    const rm_step_env *e = &s->env;
    const rm_step_round *r = &s->r;
    memset(meta, 0, SYNC_FLOATS * sizeof(float));
    if (r->rank == 0) {
        put64(meta, pos->step);
        put64(meta + 3, pos->data_pos);
        put64(meta + 6, e->opt->t);
        put64(meta + 9, pos->last_ckpt_step + 1);
        meta[12] = (float)pos->train_epoch;
        meta[13] = e->amp->scaler.scale;
        meta[14] = (float)e->amp->scaler.growth_tracker;
        meta[15] = pos->eval_done ? 1.0f : 0.0f;
    }
    e->k->h2d(s->dev_small, meta, SYNC_FLOATS * sizeof(float));
    RM_CHECK(r->ops->allreduce(r->comm, s->dev_small, SYNC_FLOATS, RM_DT_F32, RM_OP_SUM, err));
    e->k->d2h(meta, s->dev_small, SYNC_FLOATS * sizeof(float));
    return RM_OK;
}

/* ...and taking it (my_step: this rank's step before, for the warning). */
static void apply_meta(rm_step *s, const float *meta, int64_t my_step, rm_step_pos *pos)
{
    const rm_step_env *e = &s->env;
    pos->step = get64(meta);
    pos->data_pos = get64(meta + 3);
    e->opt->t = get64(meta + 6);
    pos->last_ckpt_step = get64(meta + 9) - 1;
    pos->train_epoch = (int)meta[12];
    pos->eval_done = meta[15] > 0.5f;
    if (meta[13] > 0)
        rm_loss_scaler_restore(&e->amp->scaler, meta[13], (int)meta[14]);
    if (s->r.rank != 0 && my_step != pos->step)
        rm_warn("state differed from rank 0; took rank 0's my_step=%lld step=%lld", (long long)my_step,
                (long long)pos->step);
}

int rm_step_allreduce_sync_pos(rm_step *s, rm_step_pos *pos, rm_err *err)
{
    if (s->r.world == 1)
        return RM_OK;
    float meta[SYNC_FLOATS];
    int64_t my_step = pos->step;
    RM_CHECK(sync_meta(s, pos, meta, err));
    apply_meta(s, meta, my_step, pos);
    return RM_OK;
}

static int ar_state_sync(rm_step *s, rm_step_pos *pos, rm_err *err)
{
    const rm_step_env *e = &s->env;
    const rm_step_round *r = &s->r;
    if (r->world == 1)
        return RM_OK;
    float meta[SYNC_FLOATS];
    int64_t my_step = pos->step;
    RM_CHECK(sync_meta(s, pos, meta, err));
    size_t n = e->m->nparams;
    const int nfull = s->mode == RM_SHARD_NONE ? e->opt->nstate : 0; /* full state buffers */
    if (r->rank != 0) {
        e->k->memset0(e->m->params, n * sizeof(float));
        for (int i = 0; i < nfull; i++)
            e->k->memset0(e->opt->state[i], n * sizeof(float));
    }
    RM_CHECK(r->ops->allreduce(r->comm, e->m->params, n, RM_DT_F32, RM_OP_SUM, err));
    for (int i = 0; i < nfull; i++)
        RM_CHECK(r->ops->allreduce(r->comm, e->opt->state[i], n, RM_DT_F32, RM_OP_SUM, err));
    if (s->mode != RM_SHARD_NONE) {
        /* Each rank's pieces of the state came from its own restore (or fresh start): they fit
         * together only if every rank set them in this round at rank 0's optimizer count. If not
         * (no checkpoints configured and the group re-formed), the pieces are lost: restart the
         * optimizer state everywhere rather than mix steps. */
        float bad = (!s->state_set || s->state_t != get64(meta + 6)) ? 1.0f : 0.0f;
        e->k->h2d(s->dev_small, &bad, sizeof bad);
        RM_CHECK(r->ops->allreduce(r->comm, s->dev_small, 1, RM_DT_F32, RM_OP_SUM, err));
        e->k->d2h(&bad, s->dev_small, sizeof bad);
        if (bad > 0) {
            rm_warn("sharded optimizer state could not be reassembled (ranks without it=%d): it "
                    "restarts from zero; configure checkpoints to keep it across failures",
                    (int)bad);
            for (int i = 0; i < e->opt->nstate; i++)
                e->k->memset0(s->sstate[i], s->sstate_cap * sizeof(float));
        }
        s->state_set = true;
        s->state_t = get64(meta + 6);
        s->gathered = (1ull << e->m->nunits) - 1;
        s->pieces_valid = true;
        s->torn = false;
        if (s->mode == RM_SHARD_FULL)
            drop_all_units(s);
    }
    apply_meta(s, meta, my_step, pos);
    return RM_OK;
}

static void on_layer_ready(void *ud, int layer)
{
    rm_step *s = ud;
    int rc = rm_fusion_ready(s->fusion, layer);
    if (rc && !s->fusion_err)
        s->fusion_err = rc;
}

/* Stage full: before layer l's forward or backward reads its weights: they are in its unit
 * buffer (usually prefetched meanwhile; backward finds the last two layers still there from
 * forward). World 1: every layer is always whole in m->params. */
static void layer_pre(rm_step *s, int layer, int next)
{
    if (s->hook_err || s->r.world < 2)
        return;
    int rc = pf_wait(s, &s->hook_e); /* usually this very layer, gathered meanwhile */
    if (rc == RM_OK)
        rc = slot_gather(s, layer, &s->hook_e);
    for (uint64_t rd = s->env.m->unit[layer].reads; rc == RM_OK && rd; rd &= rd - 1)
        rc = slot_gather(s, __builtin_ctzll(rd), &s->hook_e); /* pinned: usually still whole */
    if (rc) {
        s->hook_err = rc;
        return;
    }
    pf_launch(s, next); /* overlapped with this layer's compute */
}

/* Forward: the next layer up is gathered while this one computes; backward: the next one down. */
static void on_layer_pre(void *ud, int layer)
{
    layer_pre(ud, layer, layer + 1);
}

static void on_layer_pre_bwd(void *ud, int layer)
{
    layer_pre(ud, layer, layer - 1);
}

/* Stages gradients and full: layer l's dY and bias gradient are final. Its gradient is made
 * bucket by bucket (worker/allreduce/shard.h, rm_shard_buckets): every rank's part of bucket k is computed
 * into the staging buffer in rank order, and the bucket is reduce-scattered (average) on the comm
 * thread straight into this rank's pieces (gshard) while the next bucket is computed into the other
 * staging buffer. The whole layer gradient never exists. World 1: the piece is the layer. */
static void on_layer_grad_staged(void *ud, const rm_unit_grad *g)
{
    rm_step *s = ud;
    if (s->hook_err)
        return;
    const rm_unit_shard *u = &s->us;
    int l = g->unit, n = u->world;
    size_t len = u->unit_len[l];
    if (n == 1) {
        rm_model_grad_range(s->env.m, g, 0, len, s->gshard + u->soff[l]);
        return;
    }
    rm_shard_bucket b = rm_shard_buckets(len, n, s->bucket);
    for (int kb = 0; kb < b.nbuckets; kb++) {
        size_t tot = rm_shard_bucket_total(len, n, s->bucket, kb);
        float *buf = s->stage[s->stage_next];
        for (int r = 0; r < n; r++) {
            size_t from = rm_shard_off(len, n, r) + (size_t)kb * b.chunk;
            rm_model_grad_range(s->env.m, g, from, from + rm_shard_len(tot, n, r),
                                buf + rm_shard_off(tot, n, r));
        }
        int rc = pf_wait(s, &s->hook_e); /* the other buffer's bucket (or a prefetch) */
        if (rc) {
            s->hook_err = rc;
            return;
        }
        rs_launch(s, buf, s->gshard + u->soff[l] + (size_t)kb * b.chunk, tot);
        s->stat_bytes += tot * sizeof(float);
        s->stage_next ^= 1;
    }
}

/* ---- the optimizer's phases (docs/strategies.md, "Optimizers for transformers") ----
 * After the gradients are averaged: the global gradient norm and clipping, then for LAMB/LARS the
 * per-tensor norms, then the update. Both norms are summed in slots: the gradient norm one slot per
 * (rank, layer) piece, the tensor norms one slot per rank, the pieces being the ZeRO ones
 * (worker/allreduce/shard.h rm_unit_shard). A sharded rank fills its own slots and the slot vector is
 * summed over the round (exact: one writer per slot); the unsharded strategy holds every piece and
 * fills every slot itself, no communication. The slots are then added in order, so every stage
 * computes the same norms from the same gradients: sharding optimizer stays bit-identical to none,
 * with clipping and any optimizer, and a world-1 run's per-layer slots are a pipeline's
 * (step_pipeline.c), which keeps a pipeline bit-identical to one worker. */

typedef void (*piece_fn)(rm_step *s, int rank, int unit, float *w, float *g, float *const *st, size_t n,
                         size_t off, void *ud);

static void walk_pieces(rm_step *s, piece_fn fn, void *ud)
{
    const rm_step_env *e = &s->env;
    const rm_model *m = e->m;
    float *st[2] = {NULL, NULL};
    if (s->mode != RM_SHARD_NONE) {
        const rm_unit_shard *u = &s->us;
        for (int l = 0; l < u->nunits; l++) {
            for (int i = 0; i < e->opt->nstate; i++)
                st[i] = s->sstate[i] + u->soff[l];
            float *gp = staged_grads(s) ? s->gshard + u->soff[l] : e->m->grads + u->off[l];
            fn(s, u->rank, l, e->m->params + u->off[l], gp, st, u->len[l], u->off[l], ud);
        }
        return;
    }
    int W = s->r.world > 0 ? s->r.world : 1;
    for (int r = 0; r < W; r++) {
        rm_unit_shard u;
        if (rm_unit_shard_make(m->unit_off, m->unit_len, m->nunits, W, r, &u) != 0)
            return;
        for (int l = 0; l < u.nunits; l++) {
            for (int i = 0; i < e->opt->nstate; i++)
                st[i] = e->opt->state[i] + u.off[l];
            fn(s, r, l, m->params + u.off[l], m->grads + u.off[l], st, u.len[l], u.off[l], ud);
        }
    }
}

static void piece_gnorm(rm_step *s, int rank, int unit, float *w, float *g, float *const *st, size_t n,
                        size_t off, void *ud)
{
    rm_optim_gnorm_add(s->env.opt, rank * s->env.m->nunits + unit, g, n);
}

static void piece_scale(rm_step *s, int rank, int unit, float *w, float *g, float *const *st, size_t n,
                        size_t off, void *ud)
{
    s->env.k->scale(g, n, *(const float *)ud);
}

static void piece_norms(rm_step *s, int rank, int unit, float *w, float *g, float *const *st, size_t n,
                        size_t off, void *ud)
{
    rm_optim_norms_range(s->env.opt, rank, w, g, st, n, off);
}

static void piece_update(rm_step *s, int rank, int unit, float *w, float *g, float *const *st, size_t n,
                         size_t off, void *ud)
{
    rm_optim_update_range(s->env.opt, w, g, st, n, off, *(const float *)ud);
}

/* The sum of a slot vector over the round (sharded, world > 1; the unsharded ranks filled every
 * slot themselves). After pf_wait: the only collective in flight. */
static int sum_slots(rm_step *s, float *buf, size_t count, rm_err *err)
{
    if (s->mode == RM_SHARD_NONE || s->r.world < 2 || count == 0)
        return RM_OK;
    double t0 = rm_mono();
    RM_CHECK(s->r.ops->allreduce(s->r.comm, buf, count, RM_DT_F32, RM_OP_SUM, err));
    s->stat_s += rm_mono() - t0;
    s->stat_bytes += count * sizeof(float);
    return RM_OK;
}

/* Clipping (gradClip), then the update of every piece this rank updates at lr; st->grad_norm. */
static int optimizer_phases(rm_step *s, float lr, rm_step_stats *st, rm_err *err)
{
    const rm_step_env *e = &s->env;
    rm_optim *o = e->opt;
    int W = s->r.world > 0 ? s->r.world : 1;
    size_t c;
    if (e->grad_clip > 0) {
        double norm;
        RM_CHECK(rm_optim_gnorm_begin(o, W * e->m->nunits, err));
        walk_pieces(s, piece_gnorm, NULL);
        float *b = rm_optim_gnorm_buf(o, &c);
        RM_CHECK(sum_slots(s, b, c, err));
        RM_CHECK(rm_optim_gnorm_finish(o, &norm, err));
        float sc = rm_clip_scale(norm, e->grad_clip);
        if (sc < 1.0f)
            walk_pieces(s, piece_scale, &sc);
        st->has_grad_norm = true;
        st->grad_norm = norm;
    }
    s->torn = s->mode != RM_SHARD_NONE; /* until the step returns: a checkpoint would mix steps */
    rm_optim_tick(o);
    if (rm_optim_layerwise(o)) {
        RM_CHECK(rm_optim_norms_begin(o, W, err));
        walk_pieces(s, piece_norms, NULL);
        float *b = rm_optim_norms_buf(o, &c);
        RM_CHECK(sum_slots(s, b, c, err));
        RM_CHECK(rm_optim_norms_finish(o, err));
    }
    if (s->mode == RM_SHARD_NONE)
        rm_optim_update_range(o, e->m->params, e->m->grads, o->state, e->m->nparams, 0, lr);
    else
        walk_pieces(s, piece_update, &lr);
    s->state_t = o->t;
    return RM_OK;
}

/* ---- gradient accumulation (spec.training.gradientAccumulationSteps K) ---- */

/* Micro-batch backward over the whole model: its loss (into m->loss_sum) scaled by inv_batch, then
 * every unit; accumulate adds to m->grads (every micro-batch after the first). */
static void backward_micro(rm_model *m, int rows, float inv_batch, bool accumulate, rm_unit_ready_fn ready,
                           void *ud)
{
    rm_model_loss(m, 0, rows, inv_batch, m->loss_sum);
    rm_model_pass p = {.u0 = 0,
                       .u1 = m->nunits,
                       .off = 0,
                       .rows = rows,
                       .dy = rm_model_output(m, m->nunits - 1, 0),
                       .accumulate = accumulate,
                       .ready = ready,
                       .ud = ud};
    rm_model_backward_pass(m, &p);
}

static int accum_k(const rm_step *s)
{
    return s->env.grad_accum > 1 ? s->env.grad_accum : 1;
}

/* Micro-batches 0 .. K-2 (forward and backward, the gradients summed in m->grads, the loss sums in
 * loss_acc), then micro-batch K-1 loaded: the caller runs its forward and a backward that adds
 * (backward_micro, accumulate) and hands layers to the allreduce, then accum_finish. K = 1:
 * nothing. inv_batch is 1 / (K x rows): the sum of the micro-batches' gradients is the mean over
 * all K x rows samples. */
static int accum_begin(rm_step *s, int rows, float inv_batch, rm_err *err)
{
    const rm_step_env *e = &s->env;
    int K = accum_k(s);
    if (K < 2)
        return RM_OK;
    RM_CHECK(e->k->memset0(s->loss_acc, sizeof(float)));
    for (int k = 0; k < K - 1; k++) {
        if (k > 0)
            RM_CHECK(e->load_micro(e->micro_ud, k, err));
        rm_model_forward(e->m, rows);
        backward_micro(e->m, rows, inv_batch, k > 0, NULL, NULL);
        e->k->axpy(s->loss_acc, e->m->loss_sum, 1, 1.0f);
    }
    return e->load_micro(e->micro_ud, K - 1, err);
}

/* The step's loss sum over every micro-batch into m->loss_sum (what the driver reads). */
static int accum_finish(rm_step *s)
{
    const rm_step_env *e = &s->env;
    if (accum_k(s) < 2)
        return RM_OK;
    e->k->axpy(s->loss_acc, e->m->loss_sum, 1, 1.0f);
    return e->k->d2d(e->m->loss_sum, s->loss_acc, sizeof(float));
}

/* The last micro-batch's backward (the only one with K = 1), each finished layer handed to ready. */
static void backward_last(rm_step *s, int rows, float inv_batch, rm_unit_ready_fn ready, void *ud)
{
    if (accum_k(s) < 2)
        rm_model_backward(s->env.m, rows, inv_batch, ready, ud);
    else
        backward_micro(s->env.m, rows, inv_batch, true, ready, ud);
}

static int gather_params(rm_step *s, rm_err *err)
{
    double t0 = rm_mono();
    for (int l = 0; l < s->us.nunits; l++) {
        s->gathered &= ~(1ull << l);
        RM_CHECK(gather_unit(s, l, err));
        s->stat_bytes += s->us.unit_len[l] * sizeof(float);
    }
    s->stat_s += rm_mono() - t0;
    return RM_OK;
}

static int ar_step_sharded(rm_step *s, int rows, float lr, rm_step_stats *st, rm_err *err)
{
    const rm_step_env *e = &s->env;
    s->stat_s = 0;
    s->stat_bytes = 0;
    s->hook_err = 0;
    float inv_batch = 1.0f / (float)rows; /* fp32 only: no loss scale */
    double t0 = rm_mono(), t1, t2, t3;
    if (staged_grads(s)) {
        bool full = s->mode == RM_SHARD_FULL;
        s->stage_next = 0;
        if (full && s->r.world > 1 && s->gathered) {
            /* whole in m->params since a restore, sync or evaluation: from here on the unit
             * buffers hold them; give the pages outside the own pieces back once */
            slots_reset(s);
            drop_all_units(s);
        }
        if (full)
            rm_model_forward_hooked(e->m, rows, on_layer_pre, s);
        else
            rm_model_forward(e->m, rows);
        t1 = rm_mono();
        if (!s->hook_err)
            rm_model_backward_placed(e->m, rows, inv_batch, full ? on_layer_pre_bwd : NULL,
                                     on_layer_grad_staged, NULL, s);
        int prc = pf_wait(s, &s->hook_e); /* the last bucket; never leave a job in flight */
        if (prc && !s->hook_err)
            s->hook_err = prc;
        if (s->hook_err)
            return rm_errf(err, s->hook_err, "%s", s->hook_e.msg);
        t2 = rm_mono();
        s->torn = true;
        RM_CHECK(
            optimizer_phases(s, lr, st, err)); /* full: the parameters stay sharded until their next use */
        slots_reset(s);
        t3 = rm_mono();
        if (!full && s->r.world > 1)
            RM_CHECK(gather_params(s, err));
    } else {
        inv_batch = 1.0f / ((float)rows * (float)accum_k(s));
        RM_CHECK(accum_begin(s, rows, inv_batch, err));
        rm_model_forward(e->m, rows);
        t1 = rm_mono();
        if (s->fusion) {
            s->fusion_err = 0;
            rm_fusion_begin(s->fusion);
            backward_last(s, rows, inv_batch, on_layer_ready, s);
            int rc = rm_fusion_finish(s->fusion, err);
            if (rc == RM_OK && s->fusion_err)
                rc = rm_errf(err, s->fusion_err, "fusion: bad layer hand-off");
            if (rc)
                return rc;
            rm_fusion_stats fs;
            rm_fusion_get_stats(s->fusion, &fs);
            s->stat_s += fs.allreduce_s;
            s->stat_bytes += fs.bytes;
        } else {
            backward_last(s, rows, inv_batch, NULL, NULL);
        }
        RM_CHECK(accum_finish(s));
        t2 = rm_mono();
        RM_CHECK(optimizer_phases(s, lr, st, err));
        t3 = rm_mono();
        if (s->r.world > 1)
            RM_CHECK(gather_params(s, err));
    }
    s->torn = false;
    s->ph_fwd += t1 - t0;
    s->ph_bwd += t2 - t1;
    s->ph_upd += t3 - t2;
    s->ph_gather += rm_mono() - t3;
    s->ph_steps++;
    if (s->r.world > 1) {
        st->comm = true;
        st->allreduce_s = s->stat_s;
        st->bytes = s->stat_bytes;
        st->busbw_gbps = s->stat_s > 0
                             ? (double)s->stat_bytes / s->stat_s / 1e9 * (double)(s->r.world - 1) / s->r.world
                             : 0;
    }
    return RM_OK;
}

static int ar_step(rm_step *s, int rows, float lr, rm_step_stats *st, rm_err *err)
{
    const rm_step_env *e = &s->env;
    memset(st, 0, sizeof *st);
    if (s->mode != RM_SHARD_NONE)
        return ar_step_sharded(s, rows, lr, st, err);
    double t0 = rm_mono();
    /* K = 1: (float)rows * 1 is rows, the division the step always made */
    float inv_batch = rm_amp_loss_scale(e->amp) / ((float)rows * (float)accum_k(s));
    RM_CHECK(accum_begin(s, rows, inv_batch, err));
    rm_model_forward(e->m, rows);
    double t1 = rm_mono();
    if (s->fusion) {
        s->fusion_err = 0;
        rm_fusion_begin(s->fusion);
        backward_last(s, rows, inv_batch, on_layer_ready, s);
        int rc = rm_fusion_finish(s->fusion, err);
        if (rc == RM_OK && s->fusion_err)
            rc = rm_errf(err, s->fusion_err, "fusion: bad layer hand-off");
        if (rc)
            return rc;
        rm_fusion_stats fs;
        rm_fusion_get_stats(s->fusion, &fs);
        st->comm = true;
        st->allreduce_s = fs.allreduce_s;
        st->bytes = fs.bytes;
        st->busbw_gbps = fs.busbw_gbps;
    } else {
        backward_last(s, rows, inv_batch, NULL, NULL);
    }
    RM_CHECK(accum_finish(s));
    double t2 = rm_mono();
    bool apply = true;
    /* no flag agreement: the allreduced gradients are the same on every rank (worker/gpu.h) */
    RM_CHECK(rm_amp_finish(e->amp, e->m->grads, e->m->nparams, NULL, NULL, &apply, err));
    if (apply) /* fp16 overflow: every rank skips this update together */
        RM_CHECK(optimizer_phases(s, lr, st, err));
    double t3 = rm_mono();
    s->ph_fwd += t1 - t0;
    s->ph_bwd += t2 - t1;
    s->ph_upd += t3 - t2;
    s->ph_steps++;
    /* the backward pass overlaps the allreduce (its hand-offs may wait on the comm thread), so
     * it cannot be timed alone: its compute is the forward's time scaled by the FLOP ratio */
    st->compute_s = (t1 - t0) * (1.0 + rm_model_bwd_flop_ratio(e->m)) + (t3 - t2);
    return RM_OK;
}

/* Stage full: every layer whole (evaluation, the final checksum). */
static int ar_materialize(rm_step *s, rm_err *err)
{
    if (s->mode != RM_SHARD_FULL || s->r.world < 1 || !s->r.ops)
        return RM_OK;
    RM_CHECK(pf_wait(s, err));
    for (int l = 0; l < s->us.nunits; l++)
        RM_CHECK(gather_unit(s, l, err));
    slots_reset(s); /* the model reads m->params again */
    return RM_OK;
}

static void ar_memory(const rm_step *s, rm_step_memory *out)
{
    const rm_step_env *e = &s->env;
    const rm_model *m = e->m;
    uint64_t T = m->nparams, S = s->us.total, U = s->us.max_unit, f = sizeof(float);
    if (staged_grads(s) && !s->us.nunits) /* before the first round: the pieces of world 1 */
        S = T;
    memset(out, 0, sizeof *out);
    out->activations = rm_model_act_bytes(m);
    uint64_t nst = (uint64_t)e->opt->nstate;
    switch (s->mode) {
    case RM_SHARD_NONE:
        out->params = out->grads = T * f;
        out->optimizer = nst * T * f;
        break;
    case RM_SHARD_OPTIMIZER:
        out->params = out->grads = T * f;
        out->optimizer = nst * S * f;
        break;
    case RM_SHARD_GRADIENTS: /* the gradient pieces plus the two staging buckets */
        out->params = T * f;
        out->grads = (S + 2 * (uint64_t)s->stage_cap) * f;
        out->optimizer = nst * S * f;
        break;
    case RM_SHARD_FULL: {
        /* world > 1: the own pieces resident in m->params (host memory: the rest of its pages
         * are given back; device memory keeps the allocation) plus the two unit buffers (the
         * layer computing and the next, prefetched); gradients as stage gradients */
        uint64_t ub = s->us.world > 1 ? 2 * U : 0;
        out->params = ((e->k->host_memory || s->us.world < 2 ? S : T) + ub) * f;
        out->grads = (S + 2 * (uint64_t)s->stage_cap) * f;
        out->optimizer = nst * S * f;
        break;
    }
    }
}

const rm_step_ops rm_step_allreduce_ops = {
    .name = "allreduce",
    .init = ar_init,
    .round_begin = ar_round_begin,
    .state_fresh = ar_state_fresh,
    .state_bytes = ar_state_bytes,
    .state_save = ar_state_save,
    .state_restore = ar_state_restore,
    .state_sync = ar_state_sync,
    .step = ar_step,
    .round_end = ar_round_end,
    .destroy = ar_destroy,
    .materialize = ar_materialize,
    .memory = ar_memory,
    .state_sharded = ar_state_sharded,
    .state_restore_shard = ar_state_restore_shard,
};
