/* step_allreduce.c — the "allreduce" strategy: synchronous data parallelism (step.h).
 *
 * One step: forward -> backward layer by layer, each finished layer handed to the fusion layer
 * (worker/fusion.h) so its bucket allreduces while earlier layers are still computed ->
 * rm_fusion_finish (gradients averaged) -> mixed-precision finish (fp16: unscale, agree on
 * overflow) -> optimizer update at the driver's LR. Every rank does the same arithmetic on the same
 * averaged gradients, so replicas stay bit-identical; a checkpoint is therefore rank 0's copy of
 * the parameters and optimizer state, and agreeing on state when a round forms is a broadcast from
 * rank 0, done as an allreduce SUM where the other ranks contribute zeros (exact in floating
 * point: x + 0 + ... + 0 == x).
 * The fusion plan and its comm thread live for one round; nothing is allocated per step. */
#include "worker/step.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "worker/fusion.h"

#define SYNC_FLOATS 16

struct rm_step {
    rm_step_env env;
    rm_step_round r;          /* ops == NULL between rounds */
    rm_fusion *fusion;        /* world > 1 only */
    int fusion_err;
    float *dev_small;         /* SYNC_FLOATS of device memory: the state-sync header */
};

static int ar_init(const rm_step_env *env, rm_step **out, rm_err *err)
{
    *out = NULL;
    rm_step *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "allreduce strategy: out of memory");
    s->env = *env;
    s->dev_small = env->k->alloc(SYNC_FLOATS * sizeof(float));
    if (!s->dev_small) {
        free(s);
        return rm_errf(err, RM_ENOMEM, "allreduce strategy: out of device memory");
    }
    *out = s;
    return RM_OK;
}

static void ar_round_end(rm_step *s)
{
    if (!s)
        return;
    if (s->fusion) {
        rm_fusion_free(s->fusion);
        s->fusion = NULL;
    }
    memset(&s->r, 0, sizeof s->r);
}

static int ar_round_begin(rm_step *s, const rm_step_round *r, rm_err *err)
{
    ar_round_end(s);
    s->r = *r;
    if (r->world > 1) {
        rm_model *m = s->env.m;
        size_t thr = (size_t)(s->env.fusion_mb * 1024.0 * 1024.0);
        RM_CHECK(rm_fusion_new(r->ops, r->comm, m->grads, m->layout.layer_off,
                               m->layout.layer_len, m->shape.nlayers, thr, &s->fusion, err));
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
    free(s);
}

static int ar_state_fresh(rm_step *s, uint64_t seed, rm_err *err)
{
    const rm_step_env *e = &s->env;
    int rc = rm_model_init_params(e->m, seed, err);
    for (int i = 0; i < e->opt->nstate; i++)
        e->k->memset0(e->opt->state[i], e->opt->n * sizeof(float));
    e->opt->t = 0;
    return rc;
}

/* Replicas are identical: rank 0 writes the whole state (params, then each optimizer buffer). */
static size_t ar_state_bytes(const rm_step *s, int rank)
{
    if (rank != 0)
        return 0;
    return (size_t)(1 + s->env.opt->nstate) * s->env.m->layout.total * sizeof(float);
}

static int ar_state_save(rm_step *s, void *dst, rm_err *err)
{
    const rm_step_env *e = &s->env;
    size_t n = e->m->layout.total * sizeof(float);
    int rc = e->k->d2h(dst, e->m->params, n);   /* a memcpy for host-memory tables */
    for (int i = 0; rc == RM_OK && i < e->opt->nstate; i++)
        rc = e->k->d2h((char *)dst + (size_t)(1 + i) * n, e->opt->state[i], n);
    if (rc != RM_OK) {
        int crc = e->k->check(err);
        return crc != RM_OK ? crc : rm_errf(err, rc, "checkpoint: reading the weights failed");
    }
    return RM_OK;
}

static void ar_state_restore(rm_step *s, const void *src, int64_t opt_t, float loss_scale,
                             int scaler_tracker)
{
    const rm_step_env *e = &s->env;
    size_t n = e->m->layout.total * sizeof(float);
    e->k->h2d(e->m->params, src, n);
    for (int i = 0; i < e->opt->nstate; i++)
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
static int ar_state_sync(rm_step *s, rm_step_pos *pos, rm_err *err)
{
    const rm_step_env *e = &s->env;
    const rm_step_round *r = &s->r;
    if (r->world == 1)
        return RM_OK;
    float meta[SYNC_FLOATS] = {0};
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
    int64_t my_step = pos->step;
    e->k->h2d(s->dev_small, meta, sizeof meta);
    RM_CHECK(r->ops->allreduce(r->comm, s->dev_small, SYNC_FLOATS, RM_DT_F32, RM_OP_SUM, err));
    e->k->d2h(meta, s->dev_small, sizeof meta);
    size_t n = e->m->layout.total;
    if (r->rank != 0) {
        e->k->memset0(e->m->params, n * sizeof(float));
        for (int i = 0; i < e->opt->nstate; i++)
            e->k->memset0(e->opt->state[i], n * sizeof(float));
    }
    RM_CHECK(r->ops->allreduce(r->comm, e->m->params, n, RM_DT_F32, RM_OP_SUM, err));
    for (int i = 0; i < e->opt->nstate; i++)
        RM_CHECK(r->ops->allreduce(r->comm, e->opt->state[i], n, RM_DT_F32, RM_OP_SUM, err));
    pos->step = get64(meta);
    pos->data_pos = get64(meta + 3);
    e->opt->t = get64(meta + 6);
    pos->last_ckpt_step = get64(meta + 9) - 1;
    pos->train_epoch = (int)meta[12];
    pos->eval_done = meta[15] > 0.5f;
    if (meta[13] > 0)
        rm_loss_scaler_restore(&e->amp->scaler, meta[13], (int)meta[14]);
    if (r->rank != 0 && my_step != pos->step)
        rm_warn("state differed from rank 0; took rank 0's my_step=%lld step=%lld",
                (long long)my_step, (long long)pos->step);
    return RM_OK;
}

static void on_layer_ready(void *ud, int layer)
{
    rm_step *s = ud;
    int rc = rm_fusion_ready(s->fusion, layer);
    if (rc && !s->fusion_err)
        s->fusion_err = rc;
}

static int ar_step(rm_step *s, int rows, float lr, rm_step_stats *st, rm_err *err)
{
    const rm_step_env *e = &s->env;
    memset(st, 0, sizeof *st);
    rm_model_forward(e->m, rows);
    float inv_batch = rm_amp_loss_scale(e->amp) / (float)rows;
    if (s->fusion) {
        s->fusion_err = 0;
        rm_fusion_begin(s->fusion);
        rm_model_backward(e->m, rows, inv_batch, on_layer_ready, s);
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
        rm_model_backward(e->m, rows, inv_batch, NULL, NULL);
    }
    bool apply = true;
    /* no flag agreement: the allreduced gradients are the same on every rank (worker/gpu.h) */
    RM_CHECK(rm_amp_finish(e->amp, e->m->grads, e->m->layout.total, NULL, NULL, &apply, err));
    if (apply)   /* fp16 overflow: every rank skips this update together */
        rm_optim_step(e->opt, e->m->params, e->m->grads, lr);
    return RM_OK;
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
};
