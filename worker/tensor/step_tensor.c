/* step_tensor.c — the "tensor" strategy: tensor parallelism composed with data parallelism and
 * pipeline stages (spec.parallelism.tensorParallel T > 1; docs/models-and-data.md, "Tensor
 * parallelism"), for the MLP and the transformer.
 *
 * Placement (common/grid.h), P = 1 (with stages: below): rank r = d·T + t is tensor rank t of
 * data-parallel replica d. Each
 * rank forms, from its rank and the world alone, its tensor group (the T adjacent ranks of its
 * replica: shared memory when they advertised one host, worker/comm/comm_shm.c, else a ring
 * sub-group; the round's own comm when the group is the whole world) and, when D > 1, its
 * data-parallel group (the D ranks with its t, a ring or shm sub-group). The T ranks of a replica
 * train on the same slot of the global batch (data_slot: d of D).
 *
 * A step: the family's split (worker/tensor/tp_split.h: the MLP's tp_mlp.h, the transformer's
 * tp_gpt.h, picked by the model's family) runs forward, loss and backward on this rank's pieces,
 * its collectives (Megatron's f and g; the transformer's embedding and vocab-parallel
 * cross-entropy) over the tensor group; the rows are the driver's batch (env->m->x / labels: the
 * MLP's features, the transformer's token windows), the same on the T ranks of a replica; the
 * pieces' gradients averaged over the data-parallel group only; clipping's global norm sums each
 * piece once (split pieces on every tensor rank, the replicated ones from tensor rank 0) over the
 * tensor group; the optimizer (its own instance on the local layout, with the whole model's
 * decay flags per tensor, so its state is 1/T of the split pieces) steps the pieces. Each step
 * reports its tensor-group bytes and wait (rm_step_stats.tensor_*: the driver's /metrics).
 *
 * State: the driver's whole model buffers (env->m->params, env->opt->state) are the "gathered"
 * form: fresh starts and restores write them through the allreduce strategy (the same init as
 * T = 1; a restore takes the whole payload, from a whole checkpoint or re-assembled from a set),
 * state_sync takes rank 0's whole state over the world and then slices this rank's pieces;
 * materialize (evaluation, the final checksum, export) assembles them again (each rank writes its
 * pieces into zeros, the replicated ones from t = 0, and the ranks holding the model once between
 * them sum: x + 0 is exact). Checkpoints are the pieces themselves, no gather (tp_ckpt_pieces): a
 * pieces set any T, P or D restores. Between gathers the whole buffers' pages are given back
 * (rm_model_release_range), so a rank's resident parameters, gradients and optimizer state are its
 * pieces (about 1/T of the split layers plus the replicated ones: the transformer's LayerNorms,
 * wpe and row biases), except transiently at an evaluation or the export, which hold the whole
 * model once more.
 *
 * On a GPU table (the transformer only: tp_mlp.c keeps host memory) the pieces, their gradients and
 * optimizer state are device memory; the tensor and data-parallel groups' collectives run on them
 * over NCCL, or over shm or the ring wrapped to stage through the host (worker/comm/comm_staged.h,
 * as the trainer wraps the round's comm); slicing, assembling and the clipping norm's squares go
 * through host copies.
 *
 * Pipeline stages (P > 1, through the split's stage entries: tp_split.h rm_tp_stage_ops):
 * rank r = (d·P + p)·T + t; the split holds stage p's layers (rebuilt when a round moves the rank
 * to another stage), the stage's schedule runs through worker/pipeline/pipe_sched.h over links to
 * ranks r - T and r + T (the same tensor rank of the neighbouring stages: a stage's output is
 * whole on every tensor rank), the loss riding back on the gradient frames; the data-parallel
 * group is the D ranks with this (t, p); assembling and clipping's norm sum over the replica's T·P
 * ranks (the round's comm when D = 1), which hold the whole model once between them. A piece that
 * two stages hold (the transformer's wte rows: the embedding on stage 0, the tied head on the
 * last) has its gradient summed over those two ranks after the data-parallel average; the copy is
 * left out of the clipping norm (and of assembling and checkpoints: the split's copy blocks).
 *
 * Overlap: the families start each backward input-gradient sum (f) through ov_start, compute the
 * weight gradient, then ov_wait (tp_split.h rm_tp_async): the sum runs on this strategy's thread
 * meanwhile (host memory; RINGMASTER_TENSOR_OVERLAP=0 runs it in line), one in flight at a time.
 *
 * ZeRO-1 (env->sharding optimizer): data-parallel rank d keeps the optimizer state of, and steps,
 * only its range [zoff, zoff + zlen) of the pieces (worker/allreduce/shard.h over D); the group then
 * all-gathers the parameters. Its checkpoint shard is that range (every rank writes one, the runs
 * clipped to it); state_sync and materialize slice and assemble the state through the gradient
 * buffer, free between steps.
 *
 * Limits of this version: the MLP and the transformer (P > 1: the transformer one micro-batch a
 * step); fp32; sharding none or optimizer (lamb/lars: opt_update sums the tensors' norms); gradient
 * accumulation with P = 1 only (micro-batches accumulate with P > 1) (the validator refuses the
 * rest, naming the field).
 *
 * Ownership: rm_step owns the split model, its optimizer, the inner allreduce state, the group
 * comms, the links and the stage's schedule (round_end frees the per-round parts, destroy
 * everything). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/backend.h"
#include "common/clock.h"
#include "common/grid.h"
#include "common/log.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"
#include "worker/allreduce/shard.h"
#include "worker/comm/comm_staged.h"
#include "worker/gpu.h"
#include "worker/pipeline/pipe_sched.h"
#include "worker/step.h"
#include "worker/tensor/tp_split.h"

/* The ring tags (comm.h rm_comm_cfg.group) of this strategy's sub-groups: one range per kind, each
 * as long as the grid has groups of that kind, after the tags the round's own rings may use
 * (comm_hier.c: 1..3), so no two groups share a tag; at the largest world (16,384, T = 2) the
 * ranges end below 50,000 of the 65,535. */
typedef enum { TAG_TENSOR = 0, TAG_DATA, TAG_REPLICA, TAG_LINK, TAG_TIE } tp_tag_kind;
static uint32_t tag_of(const rm_grid_place *pl, tp_tag_kind kind, int index)
{
    uint32_t base = 16, n[5] = {(uint32_t)(pl->D * pl->P), (uint32_t)(pl->P * pl->T), (uint32_t)pl->D,
                                (uint32_t)pl->world, (uint32_t)(pl->D * pl->T)};
    for (int k = 0; k < (int)kind; k++)
        base += n[k];
    return base + (uint32_t)index;
}

struct rm_step {
    rm_step_env env;
    const rm_step_ops *inner_ops; /* the allreduce strategy: fresh/save/restore/sync */
    rm_step *inner;
    int T, P;       /* tensor ranks, pipeline stages */
    rm_tp_split sp; /* this rank's pieces (of stage sp.p: rebuilt when a round moves the rank) */
    size_t *rep;    /* [2 x nrep]: the replicated runs of the local layout (offset, length) */
    int nrep;
    rm_optim opt; /* on the local layout: [zoff, zoff + zlen) of it (all of it unless zero) */
    bool opt_ok;
    /* ZeRO-1 in the data-parallel group (spec.training.sharding optimizer): data-parallel rank d
     * keeps the optimizer state of, and steps, only its shard [zoff, zoff + zlen) of the pieces
     * (worker/allreduce/shard.h's layout over D), then the group all-gathers the parameters */
    bool zero;
    size_t zoff, zlen;
    /* this round's checkpoint runs of every shard of a pieces set (tp_ckpt_pieces) */
    rm_ckpt_run *ck_run;
    int ck_n;
    /* this round */
    rm_step_round r;
    bool round_ok;
    rm_grid_place pl;
    const rm_comm_ops *tops, *dops, *rops;
    rm_comm *tcomm, *dcomm; /* tcomm may be the round's own (owns_t false) */
    bool owns_t;
    /* P > 1: the replica's T·P ranks (assembling, the clipping norm; the round's own when D = 1,
     * owns_r false), the links to the stages before and after (ring comms: pipe_sched.h's links)
     * and the stage's schedule */
    rm_comm *rcomm, *link_prev, *link_next;
    bool owns_r;
    /* a piece tied between stage 0 and the last (tp_split.h rm_tp_stage_ops.tied): its local
     * range, whether this rank's is the copy, and the two holders' comm (this round) */
    const rm_comm_ops *tie_ops;
    rm_comm *tie;
    size_t tie_off, tie_len;
    bool tie_copy;
    rm_pipe_sched sc;
    bool sc_ok;
    bool whole;     /* the whole buffers hold the pieces' current values */
    float *scratch; /* [nwhole] host: assembling, slicing */
    /* a device table (k->host_memory false): the pieces live on the GPU, and every group's comm
     * takes device buffers (NCCL, or a host transport in worker/comm/comm_staged.h) */
    bool dev;
    float *lscratch; /* [n] host: a device table's pieces, copied out */
    float *dsmall;   /* one float of the kernels' memory: the clipping norm's sum */
    float *acc;      /* [n] the kernels' memory, gradient accumulation (K > 1): the micro-batches' sum */
    float *loss_k;   /* one float of the kernels' memory: a later micro-batch's loss */
    /* f's sums on a thread (tp_split.h rm_tp_async; host memory, RINGMASTER_TENSOR_OVERLAP not 0):
     * one sum in flight at a time, handed over under mu */
    bool ov_on, ov_started, ov_quit, ov_job;
    pthread_t ov_th;
    pthread_mutex_t ov_mu;
    pthread_cond_t ov_cv;
    float *ov_buf;
    size_t ov_n;
    int ov_rc;
    rm_err ov_err;
    /* the last step's collectives */
    double wait_s;
    uint64_t bytes;
    /* this round (the stats line): steps, tensor-group bytes forward (g) and backward (f) and the
     * seconds spent in the tensor group's collectives */
    uint64_t tot_steps, tot_fwd, tot_bwd;
    double tot_wait;
};

/* spec.parallelism from the worker's environment, defaults filled; false when it is absent or not
 * JSON. */
static bool par_from_env(rm_par_spec *par)
{
    memset(par, 0, sizeof *par);
    const char *js = getenv(RM_ENV_PARALLELISM);
    if (!js || !*js)
        return false;
    cJSON *o = cJSON_Parse(js);
    rm_err e = {0};
    bool ok = o && cJSON_IsObject(o) && rm_par_from_json(o, "spec.parallelism", par, &e) == RM_OK;
    cJSON_Delete(o);
    if (ok)
        rm_par_defaults(par);
    return ok;
}

/* spec.parallelism's T from the worker's environment (0 when it is absent or not JSON). */
int rm_step_tensor_parallel(void)
{
    rm_par_spec par;
    return par_from_env(&par) ? par.tensor_parallel : 0;
}

static int tp_ar(void *ud, float *buf, size_t n, rm_err *err)
{
    rm_step *s = ud;
    double t0 = rm_mono();
    int rc = s->tops->allreduce(s->tcomm, buf, n, RM_DT_F32, RM_OP_SUM, err);
    s->wait_s += rm_mono() - t0;
    s->bytes += n * sizeof(float);
    return rc;
}

static void tp_round_end(rm_step *s);

/* ---- f overlapped with the weight gradient (Megatron's asynchronous tensor-parallel allreduce):
 * the sum runs on this thread while the family computes; the caller's time blocked in ov_wait is
 * what the step counts as waiting */
static void *ov_main(void *arg)
{
    rm_step *s = arg;
    pthread_mutex_lock(&s->ov_mu);
    for (;;) {
        while (!s->ov_job && !s->ov_quit)
            pthread_cond_wait(&s->ov_cv, &s->ov_mu);
        if (s->ov_quit)
            break;
        pthread_mutex_unlock(&s->ov_mu);
        rm_err e = {0};
        int rc = s->tops->allreduce(s->tcomm, s->ov_buf, s->ov_n, RM_DT_F32, RM_OP_SUM, &e);
        pthread_mutex_lock(&s->ov_mu);
        s->ov_rc = rc;
        s->ov_err = e;
        s->ov_job = false;
        pthread_cond_broadcast(&s->ov_cv);
    }
    pthread_mutex_unlock(&s->ov_mu);
    return NULL;
}

static int ov_start(void *ud, float *buf, size_t n, rm_err *err)
{
    rm_step *s = ud;
    if (!s->ov_started) {
        if (pthread_create(&s->ov_th, NULL, ov_main, s) != 0) /* the sum runs here instead */
            return tp_ar(s, buf, n, err);
        s->ov_started = true;
    }
    pthread_mutex_lock(&s->ov_mu);
    s->ov_buf = buf;
    s->ov_n = n;
    s->ov_rc = RM_OK;
    s->ov_job = true;
    pthread_cond_broadcast(&s->ov_cv);
    pthread_mutex_unlock(&s->ov_mu);
    s->bytes += n * sizeof(float);
    return RM_OK;
}

static int ov_wait(void *ud, rm_err *err)
{
    rm_step *s = ud;
    if (!s->ov_started)
        return RM_OK; /* ov_start summed it in place */
    double t0 = rm_mono();
    pthread_mutex_lock(&s->ov_mu);
    while (s->ov_job)
        pthread_cond_wait(&s->ov_cv, &s->ov_mu);
    int rc = s->ov_rc;
    if (rc && err)
        *err = s->ov_err;
    pthread_mutex_unlock(&s->ov_mu);
    s->wait_s += rm_mono() - t0;
    return rc;
}

static void ov_stop(rm_step *s)
{
    if (!s->ov_on)
        return;
    if (s->ov_started) {
        pthread_mutex_lock(&s->ov_mu);
        s->ov_quit = true;
        pthread_cond_broadcast(&s->ov_cv);
        pthread_mutex_unlock(&s->ov_mu);
        pthread_join(s->ov_th, NULL);
    }
    pthread_mutex_destroy(&s->ov_mu);
    pthread_cond_destroy(&s->ov_cv);
    s->ov_on = s->ov_started = false;
}

/* The split, its optimizer and the replicated runs: what depends on the stage. */
static void unbuild(rm_step *s)
{
    if (s->env.k)
        s->env.k->free(s->acc);
    s->acc = NULL;
    if (s->sp.ops)
        s->sp.ops->free(&s->sp);
    free(s->rep);
    s->rep = NULL;
    s->nrep = 0;
    if (s->opt_ok)
        rm_optim_free(&s->opt);
    s->opt_ok = false;
    s->zoff = s->zlen = 0;
    free(s->lscratch);
    s->lscratch = NULL;
}

static int set_tensors(rm_step *s, rm_err *err);
static int find_replicated(rm_step *s, rm_err *err);

/* The optimizer over [off, off + len) of the local layout (its tensors' decay flags at their local
 * offsets), its state zeroed: the values come at the next state_sync. */
static int opt_build(rm_step *s, size_t off, size_t len, rm_err *err)
{
    if (s->opt_ok)
        rm_optim_free(&s->opt);
    s->opt_ok = false;
    RM_CHECK(rm_optim_init(&s->opt, s->env.k, &s->env.opt->spec, len, err));
    s->opt.base = off;
    s->opt_ok = true;
    s->zoff = off;
    s->zlen = len;
    return set_tensors(s, err);
}

/* (Re)build for stage p: the pieces' sizes depend on the stage, not on the tensor rank, so the
 * split is planned as t = 0 (round_begin moves the slices). The values come from the whole model
 * at the next state_sync, which follows every round_begin. */
static int build(rm_step *s, int p, rm_err *err)
{
    unbuild(s);
    const rm_step_env *env = &s->env;
    s->sp.p = p;
    s->sp.t = 0;
    int rc = s->sp.ops->init(&s->sp, env->k, env->batch, err);
    if (rc) {
        s->sp.p = -1; /* no stage built: the next round builds again */
        return rc;
    }
    if (!s->zero) /* else at round_begin: the shard depends on the data-parallel rank */
        RM_CHECK(opt_build(s, 0, s->sp.n, err));
    RM_CHECK(find_replicated(s, err));
    if (s->dev && !(s->lscratch = malloc(s->sp.n * sizeof(float))))
        return rm_errf(err, RM_ENOMEM, "tensor: out of memory");
    if (env->grad_accum > 1 && !(s->acc = env->k->alloc(s->sp.n * sizeof(float))))
        return rm_errf(err, RM_ENOMEM, "tensor: out of memory for the accumulated gradients");
    return RM_OK;
}

static void tp_destroy(rm_step *s)
{
    if (!s)
        return;
    tp_round_end(s);
    if (s->inner_ops)
        s->inner_ops->destroy(s->inner);
    unbuild(s);
    if (s->sc_ok)
        rm_pipe_sched_free(&s->sc);
    ov_stop(s);
    free(s->scratch);
    free(s->ck_run);
    if (s->env.k) {
        s->env.k->free(s->dsmall);
        s->env.k->free(s->acc);
        s->env.k->free(s->loss_k);
    }
    free(s);
}

static const rm_tp_split_ops *const splits[] = {&rm_tp_split_mlp, &rm_tp_split_gpt};

/* The replicated runs of the local layout (the same for every t): offsets and lengths in s->rep. */
static int find_replicated(rm_step *s, rm_err *err)
{
    const rm_tp_split *sp = &s->sp;
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (size_t i = 0; i < sp->n;) {
            if (!sp->ops->replicated(sp, i)) {
                i++;
                continue;
            }
            size_t j = i + 1;
            while (j < sp->n && sp->ops->replicated(sp, j))
                j++;
            if (pass == 1) {
                s->rep[2 * n] = i;
                s->rep[2 * n + 1] = j - i;
            }
            n++;
            i = j;
        }
        if (pass == 0 && !(s->rep = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof(size_t))))
            return rm_errf(err, RM_ENOMEM, "tensor: out of memory");
    }
    s->nrep = n;
    return RM_OK;
}

/* adamw: weights decayed, biases and LayerNorms not, as the whole model's tensors */
static int set_tensors(rm_step *s, rm_err *err)
{
    int n = s->sp.ops->tensors(&s->sp, NULL, 0);
    rm_optim_seg *seg = malloc((size_t)(n > 0 ? n : 1) * sizeof *seg);
    if (!seg)
        return rm_errf(err, RM_ENOMEM, "tensor: out of memory");
    s->sp.ops->tensors(&s->sp, seg, n);
    int rc = rm_optim_set_tensors(&s->opt, seg, n, err);
    free(seg);
    return rc;
}

static int tp_init(const rm_step_env *env, rm_step **out, rm_err *err)
{
    const char *F = "spec.parallelism.tensorParallel";
    rm_par_spec par;
    int T = par_from_env(&par) ? par.tensor_parallel : 0;
    if (T < 2)
        return rm_err_field(err, RM_EINVAL, F, "the tensor strategy needs T >= 2 in %s (got %d)",
                            RM_ENV_PARALLELISM, T);
    const rm_tp_split_ops *ops = NULL;
    for (size_t i = 0; i < RM_ARRAY_LEN(splits); i++)
        if (strcmp(env->m->family->name, splits[i]->family) == 0)
            ops = splits[i];
    if (!ops)
        return rm_err_field(err, RM_EINVAL, F, "%d with spec.training.model.type %s is not supported yet", T,
                            env->m->family->name);
    if (par.pipeline_stages > 1 && !ops->stage)
        return rm_err_field(err, RM_EINVAL, F,
                            "%d with spec.parallelism.pipelineStages %d is not supported yet for "
                            "spec.training.model.type %s",
                            T, par.pipeline_stages, env->m->family->name);
    if (par.pipeline_stages > RM_PIPE_MAX_STAGES)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.pipelineStages", "must be 1..%d here (got %d)",
                            RM_PIPE_MAX_STAGES, par.pipeline_stages);
    if (par.pipeline_stages > 1 && ops->stage->max_micro > 0 && par.micro_batches > ops->stage->max_micro)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.microBatches",
                            "must be <= %d with tensorParallel and pipelineStages > 1 for "
                            "spec.training.model.type %s in this version (got %d)",
                            ops->stage->max_micro, env->m->family->name, par.micro_batches);
    if (par.pipeline_stages > 1 &&
        (par.micro_batches < 1 || par.micro_batches > RM_PIPE_MAX_MICRO || par.micro_batches > env->batch))
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.microBatches",
                            "must be 1..min(%d, batchSizePerWorker %d) (got %d)", RM_PIPE_MAX_MICRO,
                            env->batch, par.micro_batches);
    if (env->sharding != RM_SHARD_NONE && env->sharding != RM_SHARD_OPTIMIZER)
        return rm_err_field(err, RM_EINVAL, "spec.training.sharding",
                            "%s with %s %d is not supported (optimizer is: the split's backward writes "
                            "the pieces' whole gradient)",
                            rm_sharding_names[env->sharding], F, T);
    if (env->grad_accum > 1 && (par.pipeline_stages > 1 || !env->load_micro))
        return rm_err_field(err, RM_EINVAL, "spec.training.gradientAccumulationSteps",
                            "%d with tensorParallel and pipelineStages > 1 is not supported (raise "
                            "spec.parallelism.microBatches instead: micro-batches already accumulate)",
                            env->grad_accum);
    if (env->amp && env->amp->prec != RM_PREC_FP32)
        return rm_err_field(err, RM_EINVAL, F,
                            "%d with spec.training.precision %s is not supported yet (fp32)", T,
                            rm_precision_str(env->amp->prec));
    rm_step *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    s->env = *env;
    s->T = T;
    s->P = par.pipeline_stages > 1 ? par.pipeline_stages : 1;
    s->dev = !env->k->host_memory;
    s->zero = env->sharding == RM_SHARD_OPTIMIZER;
    rm_step_env ie = *env;
    ie.sharding = RM_SHARD_NONE;
    s->inner_ops = &rm_step_allreduce_ops;
    int rc = s->inner_ops->init(&ie, &s->inner, err);
    if (rc) {
        s->inner_ops = NULL;
        tp_destroy(s);
        return rc;
    }
    /* stage 0 until a round says which stage (the sizes depend on it, not on t) */
    s->sp = (rm_tp_split){
        .ops = ops, .shape = env->m->shape, .T = T, .t = 0, .P = s->P, .p = 0, .ar = tp_ar, .ud = s};
    /* f overlapped with the weight gradient: host memory (a device table's kernels are queued on
     * its stream; the sum there stays in order) */
    const char *ov = getenv("RINGMASTER_TENSOR_OVERLAP");
    if (!s->dev && !(ov && strcmp(ov, "0") == 0) && pthread_mutex_init(&s->ov_mu, NULL) == 0) {
        if (pthread_cond_init(&s->ov_cv, NULL) == 0) {
            s->ov_on = true;
            s->sp.async = (rm_tp_async){.start = ov_start, .wait = ov_wait};
        } else
            pthread_mutex_destroy(&s->ov_mu);
    }
    if ((rc = build(s, 0, err))) {
        tp_destroy(s);
        return rc;
    }
    if (!(s->scratch = malloc(s->sp.nwhole * sizeof(float))) || !(s->dsmall = env->k->alloc(sizeof(float))) ||
        !(s->loss_k = env->k->alloc(sizeof(float)))) {
        tp_destroy(s);
        return rm_errf(err, RM_ENOMEM, "tensor: out of memory");
    }
    if (s->P > 1) {
        int din, dout,
            widest = rm_model_widest(env->m); /* and the stage's stream (a transformer's sequence) */
        ops->stage->widths(&s->sp, &din, &dout);
        widest = din > widest ? din : widest;
        widest = dout > widest ? dout : widest;
        if ((rc = rm_pipe_sched_init(&s->sc, env->k, env->batch, par.micro_batches,
                                     par.schedule == RM_PIPE_GPIPE ? 1 : 0, widest, err))) {
            tp_destroy(s);
            return rc;
        }
        s->sc_ok = true;
    }
    *out = s;
    return RM_OK;
}

/* The round's tensor-group traffic per step (the bench and e2e 59-run-tensor read the last line):
 * at every materialize (evaluations, the end) and at round end. */
static void log_stats(rm_step *s)
{
    if (s->tot_steps == 0)
        return;
    double n = (double)s->tot_steps;
    rm_info("tensor stats t=%d T=%d steps=%llu fwd_bytes_per_step=%.0f bwd_bytes_per_step=%.0f "
            "tensor_wait_ms_per_step=%.3f",
            s->pl.t, s->T, (unsigned long long)s->tot_steps, (double)s->tot_fwd / n, (double)s->tot_bwd / n,
            1e3 * s->tot_wait / n);
}

static void tp_round_end(rm_step *s)
{
    if (!s)
        return;
    log_stats(s);
    s->tot_steps = s->tot_fwd = s->tot_bwd = 0;
    s->tot_wait = 0;
    if (s->sc_ok)
        rm_pipe_sched_round_end(&s->sc); /* the links' threads, before their comms */
    if (s->tops && s->owns_t)
        s->tops->destroy(s->tcomm);
    if (s->dops)
        s->dops->destroy(s->dcomm);
    if (s->rops && s->owns_r)
        s->rops->destroy(s->rcomm);
    rm_comm_ring_ops()->destroy(s->link_prev);
    rm_comm_ring_ops()->destroy(s->link_next);
    if (s->tie_ops)
        s->tie_ops->destroy(s->tie);
    s->tie = NULL;
    s->tie_ops = NULL;
    s->tie_len = 0;
    s->tie_copy = false;
    s->tcomm = s->dcomm = s->rcomm = s->link_prev = s->link_next = NULL;
    s->tops = s->dops = s->rops = NULL;
    s->owns_t = s->owns_r = false;
    if (s->inner_ops && s->round_ok)
        s->inner_ops->round_end(s->inner);
    s->round_ok = false;
}

/* A sub-group of the round (rm_step_sub_group): shared memory when its ranks advertised one host
 * (and RINGMASTER_SHM allows it), else a ring sub-group over the worker's listener; on a device
 * table wrapped to take device buffers (comm_staged.h), as the trainer wraps the round's comm. */
static int form_group(rm_step *s, const rm_step_round *r, const int *members, int n, int me, uint32_t group,
                      const rm_comm_ops **ops, rm_comm **out, rm_err *err)
{
    RM_CHECK(rm_step_sub_group(&s->env, r, members, n, me, group, true, ops, out, err));
    if (!s->dev || *ops == rm_comm_nccl_ops())
        return RM_OK;
    int rc = rm_comm_staged_wrap(ops, out, s->env.k, me, n, err);
    if (rc) {
        (*ops)->destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* P > 1: the replica's group (every stage's pieces: assembling, the clipping norm), the links to
 * the neighbouring stages' same tensor rank (2-rank ring comms, lower stage first, as the pipeline
 * strategy forms them) and the stage's schedule over them. */
static int stage_round(rm_step *s, const rm_step_round *r, int *members, int cap, rm_err *err)
{
    const rm_grid_place *pl = &s->pl;
    if (pl->D == 1) { /* the replica is the round */
        s->rops = r->ops;
        s->rcomm = r->comm;
        s->owns_r = false;
    } else {
        int n = pl->T * pl->P;
        if (n > cap)
            return rm_errf(err, RM_EINVAL, "tensor: a replica of more than %d ranks", cap);
        for (int i = 0; i < n; i++)
            members[i] = pl->d * n + i; /* rank (d·P + p)·T + t: a replica's ranks are adjacent */
        RM_CHECK(form_group(s, r, members, n, pl->p * pl->T + pl->t, tag_of(pl, TAG_REPLICA, pl->d), &s->rops,
                            &s->rcomm, err));
        s->owns_r = true;
    }
    const rm_comm_ops *ring = rm_comm_ring_ops();
    if (pl->p + 1 < pl->P) {
        int ranks[2] = {r->rank, r->rank + pl->T};
        RM_CHECK(rm_step_sub_group(&s->env, r, ranks, 2, 0, tag_of(pl, TAG_LINK, r->rank), false, &ring,
                                   &s->link_next, err));
    }
    if (pl->p > 0) {
        int ranks[2] = {r->rank - pl->T, r->rank};
        RM_CHECK(rm_step_sub_group(&s->env, r, ranks, 2, 1, tag_of(pl, TAG_LINK, r->rank - pl->T), false,
                                   &ring, &s->link_prev, err));
    }
    const rm_tp_stage_ops *so = s->sp.ops->stage;
    if (so->tied && so->tied(&s->sp, &s->tie_off, &s->tie_len, &s->tie_copy)) { /* stage 0 and the last */
        int ranks[2] = {rm_grid_rank(pl->T, pl->P, pl->t, 0, pl->d),
                        rm_grid_rank(pl->T, pl->P, pl->t, pl->P - 1, pl->d)};
        RM_CHECK(form_group(s, r, ranks, 2, pl->p == 0 ? 0 : 1, tag_of(pl, TAG_TIE, pl->d * pl->T + pl->t),
                            &s->tie_ops, &s->tie, err));
    }
    int din, dout;
    so->widths(&s->sp, &din, &dout);
    RM_CHECK(rm_pipe_sched_round(&s->sc, pl->P, pl->p, din, dout, err));
    RM_CHECK(rm_pipe_sched_links(&s->sc, s->link_prev, s->link_next, s->env.timeout_s, err));
    int b[RM_PIPE_MAX_STAGES + 1];
    RM_CHECK(s->sp.ops->stage->bounds(&s->sp.shape, pl->P, b, err));
    rm_info("tensor pipeline stages=%d micro_batches=%d schedule=%s stage=%d layers=[%d,%d) in_flight=%d",
            pl->P, s->sc.M, s->sc.schedule ? "gpipe" : "1f1b", pl->p, b[pl->p], b[pl->p + 1], s->sc.inflight);
    return RM_OK;
}

/* The writers of a pieces set (docs/models-and-data.md, "Tensor parallelism"): replica 0's T·P
 * ranks, each its pieces, as shard p·T + t; with ZeRO-1 every rank, its data-parallel shard of
 * its pieces (the runs clipped to it), as shard = its rank. */
static int writers(const rm_step *s)
{
    return s->zero ? s->pl.world : s->T * s->P;
}

/* Every shard's checkpoint runs for this round's grid (tp_ckpt_pieces hands them out): writer r's
 * pieces' runs clipped to its optimizer range (all of its pieces unless zero: the clip keeps a run
 * inside the range as it is). */
static int ckpt_runs(rm_step *s, rm_err *err)
{
    s->ck_n = 0;
    int W = writers(s), TP = s->T * s->P, D = s->zero ? s->pl.D : 1, n = 0, cap = 0;
    rm_ckpt_run *tmp = NULL;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int r = 0; r < W; r++) {
            int t = r % s->T, p = (r / s->T) % s->P, d = r / TP;
            size_t ln = 0;
            int got = s->sp.ops->runs(&s->sp, t, p, r, NULL, 0, &ln, err);
            if (got < 0)
                goto fail;
            if (got > cap) {
                rm_ckpt_run *g = realloc(tmp, (size_t)got * sizeof *g);
                if (!g)
                    goto oom;
                tmp = g;
                cap = got;
            }
            s->sp.ops->runs(&s->sp, t, p, r, tmp, got, NULL, err);
            size_t off, len;
            rm_shard_range(ln, D, d, &off, &len);
            for (int i = 0; i < got; i++) {
                rm_ckpt_run c[3];
                int k = rm_ckpt_run_clip(&tmp[i], off, off + len, r, c);
                if (k < 0) {
                    rm_errf(err, RM_EINVAL, "tensor: the split's checkpoint run %d of shard %d is malformed",
                            i, r);
                    goto fail;
                }
                if (pass == 1)
                    memcpy(s->ck_run + n, c, (size_t)k * sizeof *c);
                n += k;
            }
        }
        if (pass == 0) {
            free(s->ck_run);
            if (!(s->ck_run = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->ck_run)))
                goto oom;
        }
    }
    free(tmp);
    s->ck_n = n;
    return RM_OK;
oom:
    free(tmp);
    return rm_errf(err, RM_ENOMEM, "tensor: out of memory for the checkpoint runs");
fail:
    free(tmp);
    return RM_EINVAL;
}

static int tp_round_begin(rm_step *s, const rm_step_round *r, rm_err *err)
{
    tp_round_end(s);
    s->r = *r;
    s->r.peers = NULL; /* only valid during round_begin */
    s->r.listener = NULL;
    RM_CHECK(rm_grid_place_of(r->rank, r->world, s->T, s->P, &s->pl, err));
    if (s->pl.p != s->sp.p) /* another stage's layers: other sizes */
        RM_CHECK(build(s, s->pl.p, err));
    RM_CHECK(s->sp.ops->set_rank(&s->sp, s->pl.t, err)); /* only the slices move */
    if (s->zero) {
        size_t off, len;
        rm_shard_range(s->sp.n, s->pl.D, s->pl.d, &off, &len);
        if (len == 0) /* a rank with no range would write no shard, and the set would never complete */
            return rm_errf(err, RM_EINVAL,
                           "spec.training.sharding: optimizer: stage %d's pieces (%zu floats) are fewer than "
                           "the %d data-parallel ranks that would shard them",
                           s->pl.p, s->sp.n, s->pl.D);
        if (!s->opt_ok || off != s->zoff || len != s->zlen)
            RM_CHECK(opt_build(s, off, len, err));
    }
    RM_CHECK(s->inner_ops->round_begin(s->inner, r, err));
    s->round_ok = true;
    int members[1024];
    if (s->T > (int)RM_ARRAY_LEN(members) || s->pl.D > (int)RM_ARRAY_LEN(members))
        return rm_errf(err, RM_EINVAL, "tensor: groups of more than %zu ranks", RM_ARRAY_LEN(members));
    if (s->pl.D == 1 && s->P == 1) { /* the tensor group is the round */
        s->tops = r->ops;
        s->tcomm = r->comm;
        s->owns_t = false;
    } else {
        if ((s->P > 1 || s->pl.D > 1) && (!r->listener || !r->peers))
            return rm_errf(err, RM_EUNSUPPORTED,
                           "tensor: groups need the worker's ring listener and the rendezvous peer list "
                           "(backend ring, shm or nccl under a rendezvous)");
        int n = rm_grid_group(&s->pl, RM_GRID_TENSOR, members, (int)RM_ARRAY_LEN(members));
        RM_CHECK(form_group(s, r, members, n, s->pl.t, tag_of(&s->pl, TAG_TENSOR, s->pl.d * s->P + s->pl.p),
                            &s->tops, &s->tcomm, err));
        s->owns_t = true;
    }
    if (s->pl.D > 1) {
        int n = rm_grid_group(&s->pl, RM_GRID_DATA, members, (int)RM_ARRAY_LEN(members));
        RM_CHECK(form_group(s, r, members, n, s->pl.d, tag_of(&s->pl, TAG_DATA, s->pl.p * s->T + s->pl.t),
                            &s->dops, &s->dcomm, err));
    }
    if (s->P > 1)
        RM_CHECK(stage_round(s, r, members, (int)RM_ARRAY_LEN(members), err));
    RM_CHECK(ckpt_runs(s, err));
    rm_info("tensor round rank=%d world=%d t=%d T=%d p=%d P=%d d=%d D=%d tensor_comm=%s data_comm=%s "
            "pieces=%zu of %zu optimizer=[%zu,+%zu)",
            r->rank, r->world, s->pl.t, s->T, s->pl.p, s->P, s->pl.d, s->pl.D, s->tops->name,
            s->dops ? s->dops->name : "-", s->sp.n, s->sp.nwhole, s->zoff, s->zlen);
    return RM_OK;
}

static void whole_stale(rm_step *s)
{
    s->whole = false;
}

static int tp_state_fresh(rm_step *s, uint64_t seed, rm_err *err)
{
    whole_stale(s); /* sliced at state_sync */
    return s->inner_ops->state_fresh(s->inner, seed, err);
}

static void tp_state_restore(rm_step *s, const void *src, int64_t opt_t, float loss_scale, int scaler_tracker)
{
    whole_stale(s);
    s->inner_ops->state_restore(s->inner, src, opt_t, loss_scale, scaler_tracker);
}

/* whole -> this rank's pieces (both the kernels' memory; a device table's through the host) */
static int slice(rm_step *s, const float *whole, float *local, rm_err *err)
{
    const rm_kernels *k = s->env.k;
    if (!s->dev) {
        s->sp.ops->slice(&s->sp, whole, local);
        return RM_OK;
    }
    RM_CHECK(rm_kernels_copy_error(k, k->d2h(s->scratch, whole, s->sp.nwhole * sizeof(float)), "whole model",
                                   err));
    s->sp.ops->slice(&s->sp, s->scratch, s->lscratch);
    return rm_kernels_copy_error(k, k->h2d(local, s->lscratch, s->sp.n * sizeof(float)), "tensor pieces",
                                 err);
}

/* rank 0's whole state on every rank (the allreduce strategy's agreement), then this rank's pieces */
static int tp_state_sync(rm_step *s, rm_step_pos *pos, rm_err *err)
{
    const rm_step_env *e = &s->env;
    RM_CHECK(s->inner_ops->state_sync(s->inner, pos, err));
    RM_CHECK(slice(s, e->m->params, s->sp.params, err));
    for (int i = 0; i < s->opt.nstate; i++) {
        if (!s->zero) {
            RM_CHECK(slice(s, e->opt->state[i], s->opt.state[i], err));
            continue;
        }
        /* ZeRO-1: this rank's shard of the pieces' state, sliced through the gradient buffer
         * (free between steps) */
        const rm_kernels *k = e->k;
        RM_CHECK(slice(s, e->opt->state[i], s->sp.grads, err));
        RM_CHECK(
            rm_kernels_copy_error(k, k->d2d(s->opt.state[i], s->sp.grads + s->zoff, s->zlen * sizeof(float)),
                                  "optimizer state", err));
    }
    s->opt.t = e->opt->t;
    s->whole = true;
    return RM_OK;
}

/* Sum n floats in place over the ranks that together hold the whole model once: the tensor group
 * (P = 1: counted as its traffic), the replica's T·P ranks (P > 1). */
static int whole_sum(rm_step *s, float *buf, size_t n, rm_err *err)
{
    if (s->P > 1)
        return s->rops->allreduce(s->rcomm, buf, n, RM_DT_F32, RM_OP_SUM, err);
    return tp_ar(s, buf, n, err);
}

/* local -> whole over whole_sum's ranks: zeros, this rank's pieces (replicated ones from t = 0), a
 * sum. Both in the kernels' memory: a device table's pieces are assembled on the host and copied in. */
static int assemble(rm_step *s, const float *local, float *whole, rm_err *err)
{
    const rm_kernels *k = s->env.k;
    size_t n = s->sp.nwhole;
    if (s->dev) {
        RM_CHECK(rm_kernels_copy_error(k, k->d2h(s->lscratch, local, s->sp.n * sizeof(float)),
                                       "tensor pieces", err));
        local = s->lscratch;
    }
    memset(s->scratch, 0, n * sizeof(float));
    s->sp.ops->assemble(&s->sp, local, s->scratch, s->pl.t == 0);
    if (s->dev)
        RM_CHECK(rm_kernels_copy_error(k, k->h2d(whole, s->scratch, n * sizeof(float)), "whole model", err));
    else
        memcpy(whole, s->scratch, n * sizeof(float));
    return whole_sum(s, whole, n, err);
}

static int tp_materialize(rm_step *s, rm_err *err)
{
    log_stats(s);
    if (s->whole || !s->tcomm)
        return RM_OK;
    RM_CHECK(assemble(s, s->sp.params, s->env.m->params, err));
    for (int i = 0; i < s->opt.nstate; i++) {
        if (!s->zero) {
            RM_CHECK(assemble(s, s->opt.state[i], s->env.opt->state[i], err));
            continue;
        }
        /* ZeRO-1: the pieces' state is the data-parallel group's shards: this rank's in zeros (the
         * gradient buffer, free between steps), assembled, then summed over the group too */
        const rm_kernels *k = s->env.k;
        float *g = s->sp.grads;
        RM_CHECK(rm_kernels_copy_error(k, k->memset0(g, s->sp.n * sizeof(float)), "gradients", err));
        RM_CHECK(rm_kernels_copy_error(k, k->d2d(g + s->zoff, s->opt.state[i], s->zlen * sizeof(float)),
                                       "optimizer state", err));
        RM_CHECK(assemble(s, g, s->env.opt->state[i], err));
        if (s->dcomm)
            RM_CHECK(
                s->dops->allreduce(s->dcomm, s->env.opt->state[i], s->sp.nwhole, RM_DT_F32, RM_OP_SUM, err));
    }
    s->env.opt->t = s->opt.t;
    s->whole = true;
    return RM_OK;
}

/* Checkpoints are per-rank pieces (docs/models-and-data.md, "Tensor parallelism"): the writers
 * (writers(): replica 0's T·P ranks, or with ZeRO-1 every rank, its data-parallel shard) each write
 * their pieces (the parameters, then each optimizer buffer, in the split's local layout) as one
 * shard of a pieces set whose manifest records every shard's runs into the whole model (this
 * round's, ckpt_runs), so no rank gathers the model to checkpoint (also at SIGTERM), and any T, P
 * or D (or another strategy) restores the whole payload the set re-assembles. */
static bool is_writer(const rm_step *s)
{
    return s->tcomm && (s->zero || s->pl.d == 0);
}

static bool tp_ckpt_pieces(const rm_step *s, int *shard_rank, int *shard_world, struct rm_ckpt_run *run,
                           int cap, int *nruns)
{
    if (!s->tcomm || s->ck_n < 1) /* no round yet */
        return false;
    if (run && cap > 0)
        memcpy(run, s->ck_run, (size_t)(cap < s->ck_n ? cap : s->ck_n) * sizeof *run);
    *shard_rank = s->pl.rank; /* a writer's rank is its shard: p·T + t in replica 0 */
    *shard_world = writers(s);
    *nruns = s->ck_n;
    return true;
}

static size_t tp_state_bytes(const rm_step *s, int rank)
{
    (void)rank;
    return is_writer(s) ? (size_t)(1 + s->opt.nstate) * s->zlen * sizeof(float) : 0;
}

/* this rank's pieces (its optimizer shard's range of them), host memory: the parameters, then each
 * optimizer buffer */
static int tp_state_save(rm_step *s, void *dst, rm_err *err)
{
    const rm_kernels *k = s->env.k;
    size_t n = s->zlen * sizeof(float);
    for (int i = -1; i < s->opt.nstate; i++) {
        const float *src = i < 0 ? s->sp.params + s->zoff : s->opt.state[i];
        char *to = (char *)dst + (size_t)(i + 1) * n;
        if (s->dev)
            RM_CHECK(rm_kernels_copy_error(k, k->d2h(to, src, n), "tensor pieces", err));
        else
            memcpy(to, src, n);
    }
    return RM_OK;
}

/* The squared norm of this rank's gradient pieces, each piece of the whole model once: the split
 * ones on every rank, the replicated runs from t = 0 only (in index order either way). */
static double grad_sq(const rm_step *s, const float *g)
{
    double sq = 0;
    size_t at = 0;
    size_t c0 = s->tie_copy ? s->tie_off : 0, c1 = s->tie_copy ? s->tie_off + s->tie_len : 0; /* a copy: 0 */
    for (int r = 0; r <= s->nrep; r++) {
        size_t end = r < s->nrep ? s->rep[2 * r] : s->sp.n;
        for (size_t i = at; i < end; i++) /* split */
            if (i < c0 || i >= c1)
                sq += (double)g[i] * g[i];
        if (r == s->nrep)
            break;
        at = end + s->rep[2 * r + 1];
        for (size_t i = end; i < at && s->pl.t == 0; i++) /* replicated */
            sq += (double)g[i] * g[i];
    }
    return sq;
}

/* P = 1: the split's forward, loss and backward over the step's K micro-batches (gradient
 * accumulation: micro-batch 0 is in the model's buffers, k > 0 loaded through env->load_micro): the
 * pieces' gradients their mean (each micro-batch's scaled by 1 / rows, summed, times 1 / K), the
 * model's loss_sum their total, fwd_floats / bwd_floats the step's. */
static int accumulate(rm_step *s, int rows, rm_err *err)
{
    const rm_step_env *e = &s->env;
    const rm_kernels *k = e->k;
    rm_tp_split *sp = &s->sp;
    int K = e->grad_accum > 1 ? e->grad_accum : 1;
    size_t fwd = 0, bwd = 0;
    for (int i = 0; i < K; i++) {
        if (i > 0)
            RM_CHECK(e->load_micro(e->micro_ud, i, err));
        RM_CHECK(sp->ops->train(sp, e->m->x, e->m->labels, rows, i ? s->loss_k : e->m->loss_sum, err));
        fwd += sp->fwd_floats;
        bwd += sp->bwd_floats;
        if (K == 1)
            break;
        if (i == 0)
            RM_CHECK(
                rm_kernels_copy_error(k, k->d2d(s->acc, sp->grads, sp->n * sizeof(float)), "gradients", err));
        else {
            k->axpy(s->acc, sp->grads, sp->n, 1.0f);
            k->axpy(e->m->loss_sum, s->loss_k, 1, 1.0f);
        }
    }
    if (K > 1) {
        k->scale(s->acc, sp->n, 1.0f / (float)K);
        RM_CHECK(
            rm_kernels_copy_error(k, k->d2d(sp->grads, s->acc, sp->n * sizeof(float)), "gradients", err));
    }
    sp->fwd_floats = fwd;
    sp->bwd_floats = bwd;
    return RM_OK;
}

/* The optimizer's update of this rank's range of the pieces. lamb/lars first need each tensor's
 * norms: every rank sums its range's squares per tensor into one slot; a replicated tensor counts
 * from t = 0 only (its other holders zero their entries); the slot is summed over the data-parallel
 * group (ZeRO-1: the D ranks hold parts of the range) and over the tensor group (the split
 * tensors' parts) — a stage's tensors all live in its tensor group, so with P > 1 no more is
 * needed (the tied copy's norms come out as its original's: the same values, split alike). */
static int opt_update(rm_step *s, float lr, rm_err *err)
{
    rm_tp_split *sp = &s->sp;
    rm_optim *o = &s->opt;
    if (!rm_optim_layerwise(o)) {
        rm_optim_step(o, sp->params + s->zoff, sp->grads + s->zoff, lr);
        return RM_OK;
    }
    const rm_kernels *k = s->env.k;
    rm_optim_tick(o);
    RM_CHECK(rm_optim_norms_begin(o, 1, err));
    rm_optim_norms_range(o, 0, sp->params + s->zoff, sp->grads + s->zoff, o->state, s->zlen, s->zoff);
    size_t c = 0;
    float *b = rm_optim_norms_buf(o, &c);
    for (int i = 0; s->pl.t != 0 && i < o->nseg && 2 * (size_t)i + 2 <= c; i++)
        if (o->seg[i].len > 0 && sp->ops->replicated(sp, o->seg[i].off))
            RM_CHECK(
                rm_kernels_copy_error(k, k->memset0(b + 2 * (size_t)i, 2 * sizeof(float)), "norms", err));
    if (s->zero && s->dcomm)
        RM_CHECK(s->dops->allreduce(s->dcomm, b, c, RM_DT_F32, RM_OP_SUM, err));
    RM_CHECK(tp_ar(s, b, c, err));
    RM_CHECK(rm_optim_norms_finish(o, err));
    rm_optim_update_range(o, sp->params + s->zoff, sp->grads + s->zoff, o->state, s->zlen, s->zoff, lr);
    return RM_OK;
}

/* ---- P > 1: the stage's compute as the schedule calls it (pipe_sched.h), through the split's
 * stage entries; the first stage reads the batch's own input rows */

static int sched_forward(void *ud, int off, int n, const float *in0, float inv_batch, float *loss,
                         rm_err *err)
{
    rm_step *s = ud;
    const rm_tp_stage_ops *so = s->sp.ops->stage;
    RM_CHECK(so->forward(&s->sp, in0 ? (const void *)in0 : rm_model_input(s->env.m, off), off, n, err));
    return loss ? so->loss(&s->sp, s->env.m->labels, off, n, inv_batch, loss, err) : RM_OK;
}

static int sched_backward(void *ud, int off, int n, float *dy, const float *in0, float *dx, bool first,
                          rm_err *err)
{
    rm_step *s = ud;
    return s->sp.ops->stage->backward(&s->sp, in0 ? (const void *)in0 : rm_model_input(s->env.m, off), off, n,
                                      dy, dx, !first, err);
}

static float *sched_output(void *ud, int off)
{
    rm_step *s = ud;
    return s->sp.ops->stage->output(&s->sp, off);
}

static const rm_pipe_stage_ops stage_ops = {
    .forward = sched_forward, .backward = sched_backward, .output = sched_output};

/* The stage's schedule: the pieces' gradients over the step's micro-batches and the batch's loss
 * (riding back from the last stage) in the model's loss_sum, on every stage. */
static int stage_step(rm_step *s, int rows, rm_step_stats *st, rm_err *err)
{
    s->sp.fwd_floats = s->sp.bwd_floats = 0;
    rm_pipe_sched_stats ss;
    RM_CHECK(rm_pipe_sched_step(&s->sc, rows, &stage_ops, s, &ss, err));
    return rm_pipe_sched_report(&s->sc, &ss, s->env.m->loss_sum, st, err);
}

static int tp_step(rm_step *s, int rows, float lr, rm_step_stats *st, rm_err *err)
{
    const rm_step_env *e = &s->env;
    rm_tp_split *sp = &s->sp;
    memset(st, 0, sizeof *st);
    s->wait_s = 0;
    s->bytes = 0;
    if (s->whole && !s->dev) { /* the whole buffers' pages go back until the next gather (host memory) */
        const rm_model *wm = e->m;
        rm_model_release_range(wm, wm->params, 0, wm->nparams);
        rm_model_release_range(wm, wm->grads, 0, wm->nparams);
        for (int i = 0; i < e->opt->nstate; i++)
            rm_model_release_range(wm, e->opt->state[i], 0, wm->nparams);
    }
    whole_stale(s);
    double t0 = rm_mono();
    if (s->P > 1) {
        RM_CHECK(stage_step(s, rows, st, err));
    } else
        RM_CHECK(accumulate(s, rows, err));
    double dp_s = 0;
    uint64_t dp_bytes = 0;
    if (s->dcomm) { /* data-parallel group only: the tensor ranks hold different pieces */
        double a0 = rm_mono();
        RM_CHECK(s->dops->allreduce(s->dcomm, sp->grads, sp->n, RM_DT_F32, RM_OP_AVG, err));
        dp_s = rm_mono() - a0;
        dp_bytes = sp->n * sizeof(float);
    }
    /* the tied piece's two gradients (each already averaged over its holder's data-parallel group),
     * summed last: a + b is the same bits on both holders, so both step it alike */
    if (s->tie)
        RM_CHECK(
            s->tie_ops->allreduce(s->tie, sp->grads + s->tie_off, s->tie_len, RM_DT_F32, RM_OP_SUM, err));
    if (e->grad_clip > 0) { /* the global norm: each piece once, summed over whole_sum's ranks */
        const float *g = sp->grads;
        if (s->dev) { /* the pieces' squares on the host (the replicated runs counted from t = 0 only) */
            RM_CHECK(rm_kernels_copy_error(e->k, e->k->d2h(s->lscratch, sp->grads, sp->n * sizeof(float)),
                                           "gradients", err));
            g = s->lscratch;
        }
        float f = (float)grad_sq(s, g);
        RM_CHECK(rm_kernels_copy_error(e->k, e->k->h2d(s->dsmall, &f, sizeof f), "gradient norm", err));
        RM_CHECK(whole_sum(s, s->dsmall, 1, err));
        RM_CHECK(rm_kernels_copy_error(e->k, e->k->d2h(&f, s->dsmall, sizeof f), "gradient norm", err));
        double norm = sqrt((double)f);
        float sc = rm_clip_scale(norm, e->grad_clip);
        if (sc < 1.0f)
            e->k->scale(sp->grads, sp->n, sc);
        st->has_grad_norm = true;
        st->grad_norm = norm;
    }
    RM_CHECK(opt_update(s, lr, err));
    e->opt->t = s->opt.t;
    if (s->zero && s->dcomm) { /* ZeRO-1: every shard's new parameters to the group */
        double a0 = rm_mono();
        RM_CHECK(s->dops->all_gather(s->dcomm, sp->params + s->zoff, sp->params, sp->n, RM_DT_F32, err));
        dp_s += rm_mono() - a0;
        dp_bytes += sp->n * sizeof(float);
    }
    s->tot_steps++;
    s->tot_fwd += sp->fwd_floats * sizeof(float);
    s->tot_bwd += sp->bwd_floats * sizeof(float);
    s->tot_wait += s->wait_s;
    st->comm = true;
    st->allreduce_s = s->wait_s + dp_s;
    st->bytes = s->bytes + dp_bytes;
    st->tensor = true;
    st->tensor_rank = s->pl.t;
    st->tensor_bytes = s->bytes;
    st->tensor_wait_s = s->wait_s;
    st->compute_s = rm_mono() - t0 - st->allreduce_s;
    return RM_OK;
}

static void tp_data_slot(const rm_step *s, int *slot, int *nslots)
{
    *slot = s->pl.d;
    *nslots = s->pl.D > 0 ? s->pl.D : 1;
}

static void tp_memory(const rm_step *s, rm_step_memory *out)
{
    uint64_t n = s->sp.n, f = sizeof(float);
    memset(out, 0, sizeof *out);
    out->params = out->grads = n * f;
    out->optimizer = s->opt_ok ? (uint64_t)s->opt.nstate * s->zlen * f : 0;
    out->activations = rm_model_act_bytes(s->env.m);
}

const rm_step_ops rm_step_tensor_ops = {
    .name = "tensor",
    .init = tp_init,
    .round_begin = tp_round_begin,
    .state_fresh = tp_state_fresh,
    .state_bytes = tp_state_bytes,
    .state_save = tp_state_save,
    .state_restore = tp_state_restore,
    .state_sync = tp_state_sync,
    .step = tp_step,
    .round_end = tp_round_end,
    .destroy = tp_destroy,
    .materialize = tp_materialize,
    .ckpt_pieces = tp_ckpt_pieces,
    .memory = tp_memory,
    .data_slot = tp_data_slot,
};
