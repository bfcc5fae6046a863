/* step_pipeline.c — the "pipeline" strategy (docs/strategies.md#pipeline-stages): pipeline model parallelism
 * combined with data parallelism, on the grid of worker/pipeline/pipeline_core.h (rank r = d*P + p is
 * stage p of data-parallel replica d).
 *
 * A step: the batch (this replica's slot of the global batch) is split into M micro-batches; the
 * stage runs its event table (GPipe or 1F1B): F(m) takes micro-batch m's input (stage 0: the
 * batch rows; later stages: the activations received from stage p-1), runs the stage's layers and
 * sends its output to stage p+1 (the last stage computes the loss and dlogits instead); B(m)
 * takes the gradient of its output (received from p+1, or dlogits), runs the layers backward
 * accumulating W/b gradients, and sends the input gradient to p-1. After the schedule the stage's
 * gradient range is averaged over its data-parallel group (a ring sub-group of D ranks) and the
 * optimizer steps the stage's range. The math is the full-batch step's: the loss is scaled by
 * 1/B for every micro-batch, so the accumulated gradient is the batch gradient (bit-identical
 * to P = 1 for M = 1; float summation order otherwise).
 *
 * Transport: each link between neighbouring stages is a ring comm of two ranks formed over the
 * worker's ring listener as its own sub-group (rm_comm_cfg.group: the ring's HMAC handshake). What
 * moves over it is the link table's (worker/pipeline/pipe_link.h), picked by rm_pipe_link_for: host memory
 * (the CPU kernels) uses "tcp" (pipe_link_tcp.c: rm_net_frame frames with sequence numbers on one
 * socket per direction, a receiver thread per inbound socket draining into the preallocated
 * buffers at the micro-batch's rows); device memory (a GPU) uses "nccl" (cuda/pipe_link_nccl.c: a
 * 2-rank NCCL communicator per link whose id crosses the TCP link, ncclSend/ncclRecv on a link
 * stream). The step runs the stage's transfer plan (rm_pipe_xfer_plan: per event a receive before
 * its compute and a send after it, the send grouped with the next event's receive on the same
 * link so neighbours never deadlock); the compute thread waits for frame k with the round's
 * timeout (a dead or hung neighbour fails the round; the driver re-forms it from the newest
 * checkpoint); the time blocked there is the bubble. The loss of each micro-batch rides backward
 * on the gradient frames (one trailing float), so every stage reports the job's loss. Nothing is
 * allocated per step.
 *
 * State (per stage): the flat parameter/gradient/optimizer buffers keep the allreduce strategy's
 * whole-model layout (so offsets, checkpoints and the P = 1 path are unchanged), but a stage holds
 * only its own layers' range [poff, poff + plen) of each (and its copies of tied units, below),
 * and (P > 1) never writes the others'
 * pages: the CPU table's allocations read as zeros without being resident, the seeded init
 * writes the stage's layers only (rm_model_init_params_units: the values P = 1 gives them), the
 * state agreement takes the position over the world and the stage's range from its replica 0 over
 * its data-parallel group (rm_step_allreduce_sync_pos + a range allreduce), evaluation runs the
 * forward through the stages (pl_eval_forward: the last stages count) and the final checksum is
 * the FNV-1a of the stages' ranges chained in order (pl_checksum: the whole model's value). So
 * parameters, gradients and optimizer state resident per worker, its peak RSS, and
 * ringmaster_worker_memory_bytes{kind=params|grads|optimizer} are the stage's, as the activations
 * are. A restore reads the stage's layers only (restore_layers: the driver streams the newest
 * checkpoint, whole or a set of any P, verifying every file but keeping just the stage's range, in
 * a staging buffer of the stage's size); after a round re-forms, the next step gives any other
 * ranges back (rm_model_release_range).
 * Checkpoints (P > 1) are per stage, no collective: replica 0 of stage p writes its layers'
 * parameters then its layers' range of each optimizer buffer as shard p of P of a stage-layout
 * set (worker/checkpoint/ckpt_shard.h: the manifest records P and the layer bounds; ckpt_stages below);
 * any restore (this P, another P, P = 1, the allreduce strategy) re-assembles the whole payload
 * from the set and takes it like a whole checkpoint. P = 1 writes the allreduce strategy's whole
 * checkpoint as before; P = 1 delegates fresh state, restore and state_sync to the allreduce
 * strategy (sharding none). Limits of this version: fp32, backend ring/shm for the world with
 * ring sub-groups (on a GPU backend nccl for the world, the ring listener for the links'
 * handshake); on a GPU one data-parallel replica per stage (the stage group's allreduce is the
 * CPU ring's), buffers through the kernels table (device memory: copies where the CPU path touches
 * host memory), and the model's device buffers are still allocated whole (only the CPU table's
 * untouched pages stay unresident); the GPU path is compiled and linked but was not run here.
 *
 * Tied units (docs/models-and-data.md, "The transformer"; Megatron's arrangement for the tied
 * embedding): a unit u that a unit of another stage reads (rm_model_unit.reads: the transformer's
 * head reads the embedding's wte) is held whole by every reading stage too, at u's own offsets of
 * the flat buffers (the whole unit, wte and wpe, rather than just what is read: the model interface
 * names units, not parts of them, and the pages are the stage's either way). The copy is
 * initialised like its owner's (rm_model_init_params_units gives a unit the same values whatever
 * the range), its gradient range is zeroed before each schedule (a reading unit's backward writes
 * only its part), averaged over the reading stage's data-parallel group like the stage's own range,
 * then summed with the owner's over u's tie group (a ring sub-group of the replica's stages that
 * hold u, formed like the links), and the same optimizer steps it on every holder, so the copies
 * stay bit-identical to the owner's. A copy is never checkpointed (the owner's range has it): after
 * any restore or fresh start the state agreement hands every holder the owner's parameters and
 * optimizer state over the tie group. Evaluation forwards with the copy; the checksum counts u
 * once, from its owner's range, and checks that the copies agree; memory counts the copy. A model
 * without reads (the MLP) holds no copies, forms no tie groups and runs exactly as before.
 *
 * Ownership: rm_step owns its buffers, the inner allreduce state, the sub-group comms and the
 * receiver threads (round_end stops and frees the per-round parts; destroy everything). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"
#include "worker/comm/net.h"
#include "worker/pipeline/pipe_link.h"
#include "worker/pipeline/pipe_sched.h"
#include "worker/pipeline/pipeline_core.h"
#include "worker/step.h"

#define PIPE_GROUP_DP 0x2000u   /* + stage: a stage's data-parallel group */
#define PIPE_GROUP_LINK 0x4000u /* + lower rank: the link between stage p and p+1 */
#define PIPE_GROUP_TIE 0x8000u  /* + u * 512 + replica: the stages of a replica holding tied unit u */

struct rm_step {
    rm_step_env env;
    const rm_step_ops *inner_ops; /* the allreduce strategy: fresh/save/restore/sync */
    rm_step *inner;
    int P, M, schedule;
    /* this round */
    rm_step_round r;
    rm_pipe_place pl;
    bool round_ok;
    int bounds[RM_PIPE_MAX_STAGES + 1];
    int l0, l1;        /* this stage's layers [l0, l1) */
    size_t poff, plen; /* its parameter range (floats) */
    const rm_comm_ops *ring;
    rm_comm *dp;                    /* data-parallel group of this stage (D > 1) */
    rm_comm *link_prev, *link_next; /* to stage p-1 / p+1 */
    /* tied units ("Tied units" above): units of other stages that this stage's units read */
    uint64_t copies;                  /* bit u: this stage keeps a copy of unit u (outside [l0, l1)) */
    rm_comm *tie[RM_MODEL_MAX_UNITS]; /* unit u's tie group: the replica's stages holding u */
    bool tied;                        /* this stage is in a tie group (owner or reader) */
    float *tie_host;                  /* device memory: host staging for the ties' allreduces */
    uint64_t nstep;                   /* steps in this round */
    bool dirty;                       /* stale ranges: steps since the state was whole */
    bool gathered;                    /* state_gather assembled the state at this step */
    bool release;                     /* buffers may be whole: give back the other stages' pages */
    double tot_wait, tot_sched;       /* this round, after its first step: the bench's numbers */
    double tot_fwd, tot_bwd;          /* busy time of the F / B events (their waits excluded) */
    double tot_cycle;                 /* step start to next step start (tot_cycles of them) */
    uint64_t tot_steps, tot_cycles;
    double last_t0; /* when the last step's schedule began (0: none this round) */
    /* the schedule over the links, its buffers (init) and this round's links (pipe_sched.h) */
    rm_pipe_sched sc;
};

/* ---------------------------------------------------------------------------------------------- */
/* lifecycle                                                                                       */

/* A kernels-table memory operation's result, named (device memory: the table's own error). */
static int dev_rc(const rm_step *s, int rc, rm_err *err)
{
    if (rc == RM_OK)
        return RM_OK;
    rm_err e = {0};
    if (s->env.k->check && s->env.k->check(&e) != RM_OK)
        return rm_errf(err, rc, "pipeline: %s: %s", s->env.k->name, e.msg);
    return rm_errf(err, rc, "pipeline: a %s memory operation failed", s->env.k->name);
}

static int parse_env(rm_step *s, rm_err *err)
{
    const char *js = getenv(RM_ENV_PARALLELISM);
    rm_par_spec par;
    memset(&par, 0, sizeof par);
    if (js && *js) {
        cJSON *o = cJSON_Parse(js);
        if (!o || !cJSON_IsObject(o)) {
            cJSON_Delete(o);
            return rm_err_field(err, RM_EINVAL, RM_ENV_PARALLELISM, "not a JSON object");
        }
        int rc = rm_par_from_json(o, "spec.parallelism", &par, err);
        cJSON_Delete(o);
        if (rc)
            return rc;
    }
    rm_par_defaults(&par);
    if (par.pipeline_stages < 1 || par.pipeline_stages > RM_PIPE_MAX_STAGES)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.pipelineStages", "must be 1..%d here (got %d)",
                            RM_PIPE_MAX_STAGES, par.pipeline_stages);
    if (par.micro_batches < 1 || par.micro_batches > RM_PIPE_MAX_MICRO || par.micro_batches > s->env.batch)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.microBatches",
                            "must be 1..min(%d, batchSizePerWorker %d) (got %d)", RM_PIPE_MAX_MICRO,
                            s->env.batch, par.micro_batches);
    if (par.pipeline_stages > s->env.m->nunits)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.pipelineStages",
                            "must be <= the model's %d units (got %d)", s->env.m->nunits,
                            par.pipeline_stages);
    s->P = par.pipeline_stages;
    s->M = par.micro_batches;
    s->schedule = par.schedule == RM_PIPE_GPIPE ? 1 : 0;
    return RM_OK;
}

static void pl_round_end(rm_step *s);

static void pl_destroy(rm_step *s)
{
    if (!s)
        return;
    pl_round_end(s);
    if (s->inner_ops)
        s->inner_ops->destroy(s->inner);
    rm_pipe_sched_free(&s->sc);
    free(s);
}

static int pl_init(const rm_step_env *env, rm_step **out, rm_err *err)
{
    if (env->sharding != RM_SHARD_NONE)
        return rm_err_field(err, RM_EINVAL, "spec.training.sharding",
                            "must be none with pipeline "
                            "stages in this version");
    if (env->grad_accum > 1)
        return rm_err_field(err, RM_EINVAL, "spec.training.gradientAccumulationSteps",
                            "gradientAccumulationSteps with strategy pipeline is not supported (raise "
                            "spec.parallelism.microBatches instead: micro-batches already accumulate)");
    rm_step *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    s->env = *env;
    int rc = parse_env(s, err);
    if (rc) {
        free(s);
        return rc;
    }
    s->inner_ops = &rm_step_allreduce_ops;
    rm_step_env ie = *env;
    ie.sharding = RM_SHARD_NONE;
    if ((rc = s->inner_ops->init(&ie, &s->inner, err))) {
        s->inner_ops = NULL;
        pl_destroy(s);
        return rc;
    }
    /* the schedule's buffers (the kernels' memory: host on the CPU, device on a GPU) and the
     * links between stages: TCP frames for host memory, NCCL send/recv for device buffers */
    if ((rc = rm_pipe_sched_init(&s->sc, env->k, env->batch, s->M, s->schedule, rm_model_widest(env->m),
                                 err))) {
        pl_destroy(s);
        return rc;
    }
    *out = s;
    return RM_OK;
}

static void pl_memory(const rm_step *s, rm_step_memory *out);

/* The round's measured numbers so far (bench/pipeline reads the last such line): at every
 * materialize (evaluations, the end of training) and at round end. */
static void log_stats(rm_step *s)
{
    if (s->tot_steps == 0)
        return;
    rm_step_memory mem;
    pl_memory(s, &mem);
    double n = (double)s->tot_steps;
    rm_info("pipeline stats stage=%d stages=%d micro_batches=%d schedule=%s steps=%llu "
            "bubble=%.4f textbook_bubble=%.4f schedule_ms=%.3f wait_ms=%.3f fwd_ms=%.3f bwd_ms=%.3f "
            "cycle_ms=%.3f activations_bytes=%llu",
            s->pl.stage, s->P, s->M, s->schedule ? "gpipe" : "1f1b", (unsigned long long)s->tot_steps,
            s->tot_sched > 0 ? s->tot_wait / s->tot_sched : 0, rm_pipe_textbook_bubble(s->P, s->M),
            1e3 * s->tot_sched / n, 1e3 * s->tot_wait / n, 1e3 * s->tot_fwd / n, 1e3 * s->tot_bwd / n,
            s->tot_cycles ? 1e3 * s->tot_cycle / (double)s->tot_cycles : 0,
            (unsigned long long)mem.activations);
}

static void pl_round_end(rm_step *s)
{
    if (!s)
        return;
    log_stats(s);
    s->tot_steps = s->tot_cycles = 0;
    s->tot_wait = s->tot_sched = s->tot_fwd = s->tot_bwd = s->tot_cycle = 0;
    s->last_t0 = 0;
    rm_pipe_sched_round_end(&s->sc);
    if (s->ring) {
        s->ring->destroy(s->link_prev);
        s->ring->destroy(s->link_next);
        s->ring->destroy(s->dp);
        for (int u = 0; u < RM_MODEL_MAX_UNITS; u++)
            s->ring->destroy(s->tie[u]);
    }
    s->link_prev = s->link_next = s->dp = NULL;
    memset(s->tie, 0, sizeof s->tie);
    s->tied = false;
    free(s->tie_host);
    s->tie_host = NULL;
    if (s->inner_ops && s->round_ok)
        s->inner_ops->round_end(s->inner);
    s->round_ok = false;
}

/* A ring sub-group (rm_step_sub_group): ranks[] (n of them, world ranks) with this rank at index me;
 * closed with s->ring. */
static int form_group(rm_step *s, const rm_step_round *r, const int *ranks, int n, int me, uint32_t group,
                      rm_comm **out, rm_err *err)
{
    const rm_comm_ops *ops = s->ring;
    return rm_step_sub_group(&s->env, r, ranks, n, me, group, false, &ops, out, err);
}

/* ---------------------------------------------------------------------------------------------- */
/* tied units ("Tied units" above)                                                                 */

/* The stage whose layers include unit u (this round's bounds). */
static int unit_stage(const rm_step *s, int u)
{
    int q = 0;
    while (q + 1 < s->P && u >= s->bounds[q + 1])
        q++;
    return q;
}

/* The stages (bit q) that hold unit u: its owner and every stage with a unit that reads it. */
static uint32_t unit_holders(const rm_step *s, int u)
{
    const rm_model *m = s->env.m;
    uint32_t h = 1u << unit_stage(s, u);
    for (int v = 0; v < m->nunits; v++)
        if ((m->unit[v].reads >> u) & 1u)
            h |= 1u << unit_stage(s, v);
    return h;
}

static bool owns(const rm_step *s, int u)
{
    return u >= s->l0 && u < s->l1;
}

/* The units whose parameters this stage holds: its layers and its copies. */
static bool holds(const rm_step *s, int u)
{
    return owns(s, u) || ((s->copies >> u) & 1u);
}

/* Floats of the copies (0 without any). */
static size_t copies_len(const rm_step *s)
{
    size_t n = 0;
    for (int u = 0; u < s->env.m->nunits; u++)
        if ((s->copies >> u) & 1u)
            n += s->env.m->unit[u].len;
    return n;
}

/* Unit u's range of buf summed over its tie group. from_owner: the owner's values reach every
 * holder (the others contribute zeros: x + 0 = x); otherwise the holders' values are added. Device
 * memory goes through the host staging buffer (the ring is the CPU's). */
static int tie_reduce(rm_step *s, int u, float *buf, bool from_owner, rm_err *err)
{
    const rm_kernels *k = s->env.k;
    size_t off = s->env.m->unit[u].off, n = s->env.m->unit[u].len, bytes = n * sizeof(float);
    float *h = k->host_memory ? buf + off : s->tie_host;
    if (from_owner && !owns(s, u))
        memset(h, 0, bytes);
    else if (!k->host_memory)
        RM_CHECK(dev_rc(s, k->d2h(h, buf + off, bytes), err));
    RM_CHECK(s->ring->allreduce(s->tie[u], h, n, RM_DT_F32, RM_OP_SUM, err));
    if (!k->host_memory)
        RM_CHECK(dev_rc(s, k->h2d(buf + off, h, bytes), err));
    return RM_OK;
}

/* After the schedule and the data-parallel average of the stage's range: the copies' gradients
 * averaged over the data-parallel group too, then each tied unit's gradient summed over its tie
 * group (the owner's part and the readers': the whole gradient, the same bits on every holder). */
static int tie_grads(rm_step *s, rm_step_stats *st, rm_err *err)
{
    rm_model *m = s->env.m;
    double a0 = rm_mono();
    uint64_t bytes = 0;
    for (int u = 0; u < m->nunits && s->dp; u++) {
        if (!((s->copies >> u) & 1u))
            continue;
        RM_CHECK(
            s->ring->allreduce(s->dp, m->grads + m->unit[u].off, m->unit[u].len, RM_DT_F32, RM_OP_AVG, err));
        bytes += m->unit[u].len * sizeof(float);
    }
    for (int u = 0; u < m->nunits; u++) {
        if (!s->tie[u])
            continue;
        RM_CHECK(tie_reduce(s, u, m->grads, false, err));
        bytes += m->unit[u].len * sizeof(float);
    }
    st->comm = true;
    st->allreduce_s += rm_mono() - a0;
    st->bytes += bytes;
    return RM_OK;
}

/* The tie groups of this stage (after the links and the data-parallel group, in unit order, so
 * every holder forms them in the same order): for each unit u held by more than one stage and by
 * this one, the ranks of this replica's holders in stage order. */
static int form_ties(rm_step *s, const rm_step_round *r, rm_err *err)
{
    const rm_model *m = s->env.m;
    size_t widest = 0;
    for (int u = 0; u < m->nunits; u++) {
        uint32_t h = unit_holders(s, u);
        if ((h & (h - 1)) == 0 || !((h >> s->pl.stage) & 1u))
            continue;
        if (s->pl.replica >= 512)
            return rm_errf(err, RM_EINVAL, "pipeline: replica %d has no tie group id", s->pl.replica);
        int ranks[RM_PIPE_MAX_STAGES], n = 0, me = 0;
        for (int q = 0; q < s->P; q++) {
            if (!((h >> q) & 1u))
                continue;
            if (q == s->pl.stage)
                me = n;
            ranks[n++] = rm_pipe_rank(s->P, s->pl.replica, q);
        }
        uint32_t id = PIPE_GROUP_TIE + (uint32_t)u * 512u + (uint32_t)s->pl.replica;
        RM_CHECK(form_group(s, r, ranks, n, me, id, &s->tie[u], err));
        s->tied = true;
        if (m->unit[u].len > widest)
            widest = m->unit[u].len;
    }
    if (widest > 0 && !s->env.k->host_memory && !(s->tie_host = malloc(widest * sizeof(float))))
        return rm_errf(err, RM_ENOMEM, "pipeline: out of memory for the tied units' staging");
    return RM_OK;
}

static int pl_round_begin(rm_step *s, const rm_step_round *r, rm_err *err)
{
    pl_round_end(s);
    s->r = *r;
    s->r.peers = NULL; /* only valid during round_begin */
    s->r.listener = NULL;
    RM_CHECK(rm_pipe_place_of(r->rank, r->world, s->P, &s->pl, err));
    const rm_model *m = s->env.m;
    uint64_t cost[RM_MODEL_MAX_UNITS];
    for (int l = 0; l < m->nunits; l++)
        cost[l] = m->unit_len[l];
    RM_CHECK(rm_pipe_partition(cost, m->nunits, s->P, s->bounds, err));
    int p = s->pl.stage;
    s->l0 = s->bounds[p];
    s->l1 = s->bounds[p + 1];
    s->poff = rm_model_units_off(m, s->l0);
    s->plen = rm_model_units_len(m, s->l0, s->l1);
    s->copies = 0; /* the units of other stages that this stage's units read */
    for (int u = 0; u < m->nunits; u++)
        if (!owns(s, u) && ((unit_holders(s, u) >> p) & 1u))
            s->copies |= 1ull << u;
    RM_CHECK(
        rm_pipe_sched_round(&s->sc, s->P, p, m->unit[s->l0].in_width, m->unit[s->l1 - 1].out_width, err));
    s->nstep = 0;
    s->gathered = false;
    s->release = true; /* the stage's range may be another one than last round's */
    /* the world round for state sync, materialize and evaluation */
    RM_CHECK(s->inner_ops->round_begin(s->inner, r, err));
    s->round_ok = true;
    if (r->rank == 0 || r->world <= 8) {
        char lay[256];
        size_t n = 0;
        for (int q = 0; q < s->P && n < sizeof lay; q++) {
            uint64_t sum = 0;
            for (int l = s->bounds[q]; l < s->bounds[q + 1]; l++)
                sum += cost[l];
            n += (size_t)snprintf(lay + n, sizeof lay - n, "%s%d:layers[%d,%d)=%llu", q ? " " : "", q,
                                  s->bounds[q], s->bounds[q + 1], (unsigned long long)sum);
        }
        rm_info("pipeline stages=%d micro_batches=%d schedule=%s stage=%d replica=%d of %d "
                "in_flight=%d layout=\"%s\"",
                s->P, s->M, s->schedule ? "gpipe" : "1f1b", p, s->pl.replica, s->pl.replicas, s->sc.inflight,
                lay);
    }
    for (int u = 0; u < m->nunits; u++)
        if ((s->copies >> u) & 1u)
            rm_info("pipeline tied copy stage=%d replica=%d unit=%d kind=%s owner_stage=%d floats=%zu", p,
                    s->pl.replica, u, m->unit[u].kind, unit_stage(s, u), m->unit[u].len);
    if (s->P == 1 && s->pl.replicas == 1)
        return RM_OK;
    if (!r->listener || !r->peers)
        return rm_errf(err, RM_EUNSUPPORTED,
                       "pipeline: stages need the worker's ring listener and "
                       "the rendezvous peer list (backend ring, shm or nccl under a rendezvous)");
    if (!s->env.k->host_memory && s->pl.replicas > 1)
        return rm_err_field(err, RM_EUNSUPPORTED, "spec.replicas",
                            "pipeline stages on a GPU run one "
                            "data-parallel replica in this version (replicas = pipelineStages = %d); "
                            "the stage's data-parallel allreduce is the CPU ring's",
                            s->P);
    s->ring = rm_comm_ring_ops();
    /* links first, lower stage connecting: every pair forms independently of the others */
    if (s->pl.next >= 0) {
        int ranks[2] = {r->rank, s->pl.next};
        RM_CHECK(form_group(s, r, ranks, 2, 0, PIPE_GROUP_LINK + (uint32_t)r->rank, &s->link_next, err));
    }
    if (s->pl.prev >= 0) {
        int ranks[2] = {s->pl.prev, r->rank};
        RM_CHECK(form_group(s, r, ranks, 2, 1, PIPE_GROUP_LINK + (uint32_t)s->pl.prev, &s->link_prev, err));
    }
    /* the transport over the authenticated links (pipe_sched.h) */
    RM_CHECK(rm_pipe_sched_links(&s->sc, s->link_prev, s->link_next, s->env.timeout_s, err));
    if (s->pl.replicas > 1) {
        int *ranks = malloc((size_t)s->pl.replicas * sizeof *ranks); /* up to RM_RDZV_MAX_WORLD */
        if (!ranks)
            return rm_errf(err, RM_ENOMEM, "out of memory");
        for (int d = 0; d < s->pl.replicas; d++)
            ranks[d] = rm_pipe_rank(s->P, d, p);
        int rc =
            form_group(s, r, ranks, s->pl.replicas, s->pl.replica, PIPE_GROUP_DP + (uint32_t)p, &s->dp, err);
        free(ranks);
        RM_CHECK(rc);
    }
    return form_ties(s, r, err);
}

static int pl_state_fresh(rm_step *s, uint64_t seed, rm_err *err)
{
    s->dirty = false;
    s->gathered = false;
    s->release = true;
    if (s->P == 1 || s->plen == 0)
        return s->inner_ops->state_fresh(s->inner, seed, err);
    /* P > 1: this stage's layers only (the values P = 1 gives them), its range of the optimizer
     * state zero; the other stages' pages are never touched */
    RM_CHECK(rm_model_init_params_units(s->env.m, seed, s->l0, s->l1, err));
    for (int i = 0; i < s->env.opt->nstate; i++) {
        if (s->env.k->host_memory)
            memset(s->env.opt->state[i] + s->poff, 0, s->plen * sizeof(float));
        else
            RM_CHECK(
                dev_rc(s, s->env.k->memset0(s->env.opt->state[i] + s->poff, s->plen * sizeof(float)), err));
    }
    /* the copies: the values their owner gives them, zero optimizer state */
    for (int u = 0; u < s->env.m->nunits; u++) {
        if (!((s->copies >> u) & 1u))
            continue;
        RM_CHECK(rm_model_init_params_units(s->env.m, seed, u, u + 1, err));
        size_t off = s->env.m->unit[u].off, bytes = s->env.m->unit[u].len * sizeof(float);
        for (int i = 0; i < s->env.opt->nstate; i++) {
            if (s->env.k->host_memory)
                memset(s->env.opt->state[i] + off, 0, bytes);
            else
                RM_CHECK(dev_rc(s, s->env.k->memset0(s->env.opt->state[i] + off, bytes), err));
        }
    }
    s->env.opt->t = 0;
    return RM_OK;
}

/* P > 1: replica 0 of each stage writes its layers (shard p of P of a stage-layout set); the
 * stage's range is always current on its own ranks, so no collective and no gathering is needed
 * (SIGTERM included). P = 1: the allreduce strategy's whole checkpoint, rank 0 (as before). */
static bool stage_ckpt(const rm_step *s)
{
    return s->P > 1 && s->plen > 0;
}

static size_t pl_state_bytes(const rm_step *s, int rank)
{
    if (stage_ckpt(s))
        return s->pl.replica == 0 ? (size_t)(1 + s->env.opt->nstate) * s->plen * sizeof(float) : 0;
    if (s->dirty && !s->gathered)
        return 0; /* stale ranges: only a gathered state is a checkpoint */
    return s->inner_ops->state_bytes(s->inner, rank);
}

static int pl_state_save(rm_step *s, void *dst, rm_err *err)
{
    if (stage_ckpt(s) && !s->env.k->host_memory) { /* device memory: the same, copied down */
        float *d = dst;
        const rm_kernels *k = s->env.k;
        RM_CHECK(dev_rc(s, k->d2h(d, s->env.m->params + s->poff, s->plen * sizeof(float)), err));
        for (int i = 0; i < s->env.opt->nstate; i++)
            RM_CHECK(dev_rc(s,
                            k->d2h(d + (size_t)(1 + i) * s->plen, s->env.opt->state[i] + s->poff,
                                   s->plen * sizeof(float)),
                            err));
        return RM_OK;
    }
    if (stage_ckpt(s)) { /* host memory: the stage's parameters, then its state */
        float *d = dst;
        memcpy(d, s->env.m->params + s->poff, s->plen * sizeof(float));
        for (int i = 0; i < s->env.opt->nstate; i++)
            memcpy(d + (size_t)(1 + i) * s->plen, s->env.opt->state[i] + s->poff, s->plen * sizeof(float));
        return RM_OK;
    }
    if (s->dirty && !s->gathered)
        return rm_errf(err, RM_EINVAL, "checkpoint: pipeline state was not gathered at this step");
    return s->inner_ops->state_save(s->inner, dst, err);
}

static bool pl_ckpt_stages(const rm_step *s, int *shard_rank, int *shard_world, int *bounds)
{
    if (!stage_ckpt(s))
        return false;
    *shard_rank = s->pl.stage;
    *shard_world = s->P;
    for (int p = 0; p <= s->P; p++)
        bounds[p] = s->bounds[p];
    return true;
}

/* After a restore (whole or the stage's layers): the optimizer's step count and the loss scale
 * the checkpoint recorded. */
static void restored_meta(rm_step *s, int64_t opt_t, float loss_scale, int scaler_tracker)
{
    s->env.opt->t = opt_t;
    if (loss_scale > 0)
        rm_loss_scaler_restore(&s->env.amp->scaler, loss_scale, scaler_tracker);
}

/* After a restore: nothing to write back, nothing gathered, the other stages' pages may go. */
static void restored_flags(rm_step *s)
{
    s->dirty = false;
    s->gathered = false;
    s->release = true;
}

/* Floats [off, off + len) of the parameters and each optimizer buffer from a whole payload. */
static void take_range(rm_step *s, const float *f, size_t off, size_t len)
{
    size_t n = s->env.m->nparams;
    const rm_kernels *k = s->env.k;
    if (k->host_memory) {
        memcpy(s->env.m->params + off, f + off, len * sizeof(float));
        for (int i = 0; i < s->env.opt->nstate; i++)
            memcpy(s->env.opt->state[i] + off, f + (size_t)(1 + i) * n + off, len * sizeof(float));
    } else { /* device memory; a failed copy surfaces at the next step's kernel check */
        int rc = k->h2d(s->env.m->params + off, f + off, len * sizeof(float));
        for (int i = 0; i < s->env.opt->nstate && rc == RM_OK; i++)
            rc = k->h2d(s->env.opt->state[i] + off, f + (size_t)(1 + i) * n + off, len * sizeof(float));
        if (rc != RM_OK)
            rm_warn("pipeline: restoring stage %d's range on %s failed rc=%s", s->pl.stage, k->name,
                    rm_strerror(rc));
    }
}

static void pl_state_restore(rm_step *s, const void *src, int64_t opt_t, float loss_scale, int scaler_tracker)
{
    if (s->P == 1 || s->plen == 0) {
        s->inner_ops->state_restore(s->inner, src, opt_t, loss_scale, scaler_tracker);
    } else { /* P > 1: take this stage's range (and its copies) of the whole payload, nothing else */
        take_range(s, src, s->poff, s->plen);
        for (int u = 0; u < s->env.m->nunits; u++)
            if ((s->copies >> u) & 1u)
                take_range(s, src, s->env.m->unit[u].off, s->env.m->unit[u].len);
        restored_meta(s, opt_t, loss_scale, scaler_tracker);
    }
    restored_flags(s);
}

static int pl_state_sync(rm_step *s, rm_step_pos *pos, rm_err *err)
{
    if (s->dirty)
        return rm_errf(err, RM_EUNSUPPORTED,
                       "pipeline: the group re-formed without a checkpoint to "
                       "start from; pipeline stages need spec.checkpoint (each stage's layers live "
                       "only on its workers between checkpoints)");
    s->release = true;
    if (s->P == 1 || s->plen == 0)
        return s->inner_ops->state_sync(s->inner, pos, err);
    /* P > 1: the position from rank 0 over the world; the stage's layers (and its range of the
     * optimizer state) from its replica 0 over its data-parallel group, nothing else touched */
    RM_CHECK(rm_step_allreduce_sync_pos(s->inner, pos, err));
    float *bufs[3] = {s->env.m->params, NULL, NULL};
    int nb = 1;
    for (int i = 0; i < s->env.opt->nstate && i < 2; i++)
        bufs[nb++] = s->env.opt->state[i];
    for (int i = 0; i < nb && s->dp; i++) {
        if (s->pl.replica != 0)
            memset(bufs[i] + s->poff, 0, s->plen * sizeof(float));
        RM_CHECK(s->ring->allreduce(s->dp, bufs[i] + s->poff, s->plen, RM_DT_F32, RM_OP_SUM, err));
    }
    /* tied units: every holder takes the owner's parameters and optimizer state (a copy is never
     * checkpointed or restored by itself: the owner's range has it) */
    for (int u = 0; u < s->env.m->nunits; u++)
        for (int i = 0; i < nb && s->tie[u]; i++)
            RM_CHECK(tie_reduce(s, u, bufs[i], true, err));
    return RM_OK;
}

/* Every rank gets the whole buffer: this stage's range from replica 0, zeros elsewhere, summed
 * over the world (x + 0 + ... + 0 = x exactly). */
static int whole(rm_step *s, float *buf, rm_err *err)
{
    size_t n = s->env.m->nparams;
    if (s->r.world == 1)
        return RM_OK;
    if (s->pl.replica != 0) {
        memset(buf, 0, n * sizeof(float));
    } else {
        memset(buf, 0, s->poff * sizeof(float));
        memset(buf + s->poff + s->plen, 0, (n - s->poff - s->plen) * sizeof(float));
    }
    return s->r.ops->allreduce(s->r.comm, buf, n, RM_DT_F32, RM_OP_SUM, err);
}

static int pl_materialize(rm_step *s, rm_err *err)
{
    log_stats(s);
    /* P > 1: nothing to assemble: evaluation runs through the stages (pl_eval_forward) and the
     * checksum is chained over them (pl_checksum) */
    if (!s->dirty || !s->r.ops || s->P > 1)
        return RM_OK;
    s->release = true;
    RM_CHECK(whole(s, s->env.m->params, err));
    return RM_OK;
}

static int pl_state_gather(rm_step *s, void *dst, rm_err *err)
{
    if (!s->r.ops || stage_ckpt(s))
        return RM_OK; /* P > 1: every stage writes its own layers, nothing to assemble */
    if (s->dirty) {
        RM_CHECK(whole(s, s->env.m->params, err));
        for (int i = 0; i < s->env.opt->nstate; i++)
            RM_CHECK(whole(s, s->env.opt->state[i], err));
        s->dirty = false;
    }
    s->gathered = true;
    (void)dst; /* the whole state is in the model's buffers; state_save copies it */
    return RM_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* the step                                                                                        */

/* in0: the stage's input rows (NULL on the first stage: the model's input batch) */
static void stage_forward(rm_step *s, int off, int n, const float *in0)
{
    rm_model_pass p = {.u0 = s->l0, .u1 = s->l1, .off = off, .rows = n, .in = in0};
    rm_model_forward_pass(s->env.m, &p);
}

/* The stage's compute as the schedule (pipe_sched.h) calls it: the stage's units through the
 * model's passes; the last stage's loss through the model's loss_sum. */
static int sched_forward(void *ud, int off, int n, const float *in0, float inv_batch, float *loss,
                         rm_err *err)
{
    rm_step *s = ud;
    rm_model *m = s->env.m;
    const rm_kernels *k = s->env.k;
    stage_forward(s, off, n, in0);
    if (!loss)
        return RM_OK;
    rm_model_loss(m, off, n, inv_batch, m->loss_sum);
    if (k->host_memory)
        *loss = *m->loss_sum;
    else
        RM_CHECK(dev_rc(s, k->d2d(loss, m->loss_sum, sizeof(float)), err));
    return RM_OK;
}

/* dy: gradient of the stage output for these rows; first: the first backward of the step
 * (gradients are written, later ones accumulate); the input gradient into dx (NULL on the first
 * stage: nothing consumes it). */
static int sched_backward(void *ud, int off, int n, float *dy, const float *in0, float *dx, bool first,
                          rm_err *err)
{
    (void)err;
    rm_step *s = ud;
    rm_model_pass p = {
        .u0 = s->l0, .u1 = s->l1, .off = off, .rows = n, .in = in0, .dy = dy, .dx = dx, .accumulate = !first};
    rm_model_backward_pass(s->env.m, &p);
    return RM_OK;
}

static float *sched_output(void *ud, int off)
{
    rm_step *s = ud;
    return rm_model_output(s->env.m, s->l1 - 1, off);
}

static const rm_pipe_stage_ops stage_ops = {
    .forward = sched_forward, .backward = sched_backward, .output = sched_output};

/* Give back every page of the parameter, gradient and optimizer buffers outside this stage's
 * range and its copies (P > 1): what start-up, a restore, the state agreement or materialize made
 * whole. */
static void release_others(rm_step *s)
{
    s->release = false;
    if (s->P == 1)
        return;
    rm_model *m = s->env.m;
    float *bufs[2 + 2] = {m->params, m->grads, NULL, NULL};
    for (int i = 0; i < s->env.opt->nstate && i < 2; i++)
        bufs[2 + i] = s->env.opt->state[i];
    for (int i = 0; i < 4; i++) {
        size_t from = 0; /* the gaps between the held units */
        for (int u = 0; u < m->nunits; u++) {
            if (!holds(s, u))
                continue;
            rm_model_release_range(m, bufs[i], from, m->unit[u].off);
            from = m->unit[u].off + m->unit[u].len;
        }
        rm_model_release_range(m, bufs[i], from, m->nparams);
    }
}

/* The stage's update after its gradients are averaged (docs/strategies.md, "Optimizers for
 * transformers"). Clipping: the global norm sums every stage's layers, one slot per layer (the
 * slots of a world-1 allreduce step, so P stages stay bit-identical to one worker); replica 0's
 * stages fill them, the other replicas hold the same averaged gradients and add zeros, and the
 * slot vector is summed over the world. Tensor parallelism will add its pieces here: the ranks of
 * a tensor group each hold part of a layer, and their slots are summed the same way. Trust ratios
 * (LAMB, LARS) need no communication: a stage holds its tensors whole. */
static int pl_optimizer(rm_step *s, float lr, rm_step_stats *st, rm_err *err)
{
    rm_optim *o = s->env.opt;
    rm_model *m = s->env.m;
    float *state[2] = {NULL, NULL};
    /* tied units first: the norm, the trust ratios and the update see the summed gradient; the
     * owner counts a tied unit in the global norm, its copies take the same scale and update */
    if (s->tied)
        RM_CHECK(tie_grads(s, st, err));
    if (s->env.grad_clip > 0) {
        double norm;
        size_t c;
        RM_CHECK(rm_optim_gnorm_begin(o, m->nunits, err));
        for (int l = s->l0; l < s->l1 && s->pl.replica == 0; l++)
            rm_optim_gnorm_add(o, l, m->grads + m->unit[l].off, m->unit[l].len);
        float *b = rm_optim_gnorm_buf(o, &c);
        if (s->r.world > 1)
            RM_CHECK(s->r.ops->allreduce(s->r.comm, b, c, RM_DT_F32, RM_OP_SUM, err));
        RM_CHECK(rm_optim_gnorm_finish(o, &norm, err));
        float sc = rm_clip_scale(norm, s->env.grad_clip);
        if (sc < 1.0f) {
            s->env.k->scale(m->grads + s->poff, s->plen, sc);
            for (int u = 0; u < m->nunits && s->copies; u++)
                if ((s->copies >> u) & 1u)
                    s->env.k->scale(m->grads + m->unit[u].off, m->unit[u].len, sc);
        }
        st->has_grad_norm = true;
        st->grad_norm = norm;
    }
    rm_optim_tick(o);
    if (rm_optim_layerwise(o)) {
        RM_CHECK(rm_optim_norms_begin(o, 1, err));
        for (int l = 0; l < m->nunits; l++) { /* the stage's units and its copies (whole tensors) */
            if ((l < s->l0 || l >= s->l1) && !((s->copies >> l) & 1u))
                continue;
            size_t off = m->unit[l].off;
            for (int i = 0; i < o->nstate; i++)
                state[i] = o->state[i] + off;
            rm_optim_norms_range(o, 0, m->params + off, m->grads + off, state, m->unit[l].len, off);
        }
        RM_CHECK(rm_optim_norms_finish(o, err));
    }
    for (int i = 0; i < o->nstate; i++)
        state[i] = o->state[i] + s->poff;
    rm_optim_update_range(o, m->params + s->poff, m->grads + s->poff, state, s->plen, s->poff, lr);
    for (int u = 0; u < m->nunits && s->copies; u++) { /* the copies: the same update as their owner's */
        if (!((s->copies >> u) & 1u))
            continue;
        size_t off = m->unit[u].off;
        for (int i = 0; i < o->nstate; i++)
            state[i] = o->state[i] + off;
        rm_optim_update_range(o, m->params + off, m->grads + off, state, m->unit[u].len, off, lr);
    }
    return RM_OK;
}

static int pl_step(rm_step *s, int rows, float lr, rm_step_stats *st, rm_err *err)
{
    memset(st, 0, sizeof *st);
    if (s->release)
        release_others(s);
    const rm_kernels *k = s->env.k;
    rm_model *m = s->env.m;
    int L = m->nunits;
    /* the copies' gradient: only what the reading units write lands there (overwritten by the
     * first backward, added by the others), the rest of each copy's range stays zero */
    for (int u = 0; u < L && s->copies; u++) {
        if (!((s->copies >> u) & 1u))
            continue;
        size_t bytes = m->unit[u].len * sizeof(float);
        if (k->host_memory)
            memset(m->grads + m->unit[u].off, 0, bytes);
        else
            RM_CHECK(dev_rc(s, k->memset0(m->grads + m->unit[u].off, bytes), err));
    }
    rm_pipe_sched_stats ss;
    RM_CHECK(rm_pipe_sched_step(&s->sc, rows, &stage_ops, s, &ss, err));
    if (s->nstep > 0) { /* the round's first step includes the neighbours' start-up */
        s->tot_wait += ss.waited_s;
        s->tot_sched += ss.sched_s;
        s->tot_fwd += ss.busy_s[0];
        s->tot_bwd += ss.busy_s[1];
        s->tot_steps++;
        if (s->last_t0 > 0) { /* schedule + what the stage does between schedules */
            s->tot_cycle += ss.t0 - s->last_t0;
            s->tot_cycles++;
        }
    }
    s->last_t0 = ss.t0;
    /* the batch's loss sum, on every stage (the driver reads it), and the step's pipeline numbers */
    RM_CHECK(rm_pipe_sched_report(&s->sc, &ss, m->loss_sum, st, err));
    s->nstep++;
    s->dirty = s->r.world > 1;
    s->gathered = false;
    if (s->dp) {
        double a0 = rm_mono();
        RM_CHECK(s->ring->allreduce(s->dp, m->grads + s->poff, s->plen, RM_DT_F32, RM_OP_AVG, err));
        st->comm = true;
        st->allreduce_s = rm_mono() - a0;
        st->bytes = s->plen * sizeof(float);
        int D = s->pl.replicas;
        st->busbw_gbps =
            st->allreduce_s > 0 ? (double)st->bytes / st->allreduce_s / 1e9 * 2.0 * (double)(D - 1) / D : 0;
    }
    return pl_optimizer(s, lr, st, err);
}

/* Evaluation through the stages (P > 1): every stage of a replica has the same `rows` of the test
 * set; the batch is padded to the stages' B rows (the frames' fixed shape) and split into the M
 * micro-batches; stage 0 forwards from m->x, the others from what p-1 sent, the last stage ends
 * with the logits of all B rows in act[L-1] (the driver counts the first `rows`). No backward
 * runs, so flow control is explicit: once a stage has used its input of this batch it sends M
 * (content-free) frames back to p-1, and a stage sends nothing more forward until p+1's M frames
 * of this batch arrived, so the next batch (or step) never overwrites an input still in use. */
static int pl_eval_forward(rm_step *s, int rows, bool *logits, rm_err *err)
{
    rm_model *m = s->env.m;
    *logits = true;
    if (s->P == 1) {
        rm_model_forward(m, rows);
        return RM_OK;
    }
    int B = s->env.batch, din = m->unit[s->l0].in_width, dout = m->unit[s->l1 - 1].out_width;
    bool first_stage = s->pl.stage == 0, last_stage = s->pl.stage == s->P - 1;
    if (rows < 1 || rows > B)
        return rm_errf(err, RM_EINVAL, "pipeline: evaluation batch of %d rows (1..%d)", rows, B);
    if (first_stage && rows < B)
        RM_CHECK(
            dev_rc(s, s->env.k->memset0(rm_model_input(m, rows), (size_t)(B - rows) * m->x_row_bytes), err));
    double waited = 0;
    const rm_pipe_link_ops *lk = s->sc.lk;
    for (int mb = 0; mb < s->M; mb++) {
        int off, n;
        rm_pipe_micro_rows(B, s->M, mb, &off, &n);
        if (!first_stage) {
            RM_CHECK(
                rm_pipe_sched_group(&s->sc, RM_PIPE_SIDE_PREV, mb, -1, NULL, 0, NULL, err)); /* its receive */
            RM_CHECK(lk->wait(s->sc.links, RM_PIPE_SIDE_PREV, s->sc.nfwd + (uint64_t)mb + 1, &waited, err));
        }
        const float *in0 = first_stage ? NULL : s->sc.in_act + (size_t)off * (size_t)din;
        stage_forward(s, off, n, in0);
        if (!last_stage)
            RM_CHECK(rm_pipe_sched_group(&s->sc, -1, 0, RM_PIPE_SIDE_NEXT, rm_model_output(m, s->l1 - 1, off),
                                         (size_t)n * (size_t)dout, NULL, err));
    }
    if (!first_stage)
        for (int mb = 0; mb < s->M; mb++) { /* this batch's inputs are used: p-1 may go on */
            int off, n;
            rm_pipe_micro_rows(B, s->M, mb, &off, &n);
            RM_CHECK(rm_pipe_sched_group(&s->sc, -1, 0, RM_PIPE_SIDE_PREV,
                                         s->sc.dx + (size_t)off * (size_t)din, (size_t)n * (size_t)din,
                                         &s->sc.loss_mb[mb], err));
        }
    if (!last_stage) {
        for (int mb = 0; mb < s->M; mb++)
            RM_CHECK(rm_pipe_sched_group(&s->sc, RM_PIPE_SIDE_NEXT, mb, -1, NULL, 0, NULL, err));
        RM_CHECK(lk->wait(s->sc.links, RM_PIPE_SIDE_NEXT, s->sc.nbwd + (uint64_t)s->M, &waited, err));
    }
    if (s->sc.links)
        RM_CHECK(lk->flush(s->sc.links, &waited, err));
    s->sc.nfwd += (uint64_t)s->M;
    s->sc.nbwd += (uint64_t)s->M;
    *logits = last_stage;
    return RM_OK;
}

/* The copies of tied unit u against their owner's (over u's tie group): the owner's FNV-1a 64 of
 * its parameters in exact 16-bit pieces in v[0..3], every reader's added into v[4..7], so the
 * copies agree when v[4 + i] = readers x v[i]. A difference is a bug (the copies take the same
 * updates from the same state), reported, not fatal: the checksum is the owner's. */
static int tie_check(rm_step *s, int u, rm_err *err)
{
    const rm_kernels *k = s->env.k;
    size_t off = s->env.m->unit[u].off, n = s->env.m->unit[u].len;
    const float *p = s->env.m->params + off;
    if (!k->host_memory) {
        RM_CHECK(dev_rc(s, k->d2h(s->tie_host, p, n * sizeof(float)), err));
        p = s->tie_host;
    }
    uint64_t h = rm_fnv1a64(p, n * sizeof(float), RM_FNV64_INIT);
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int at = owns(s, u) ? 0 : 4;
    for (int i = 0; i < 4; i++)
        v[at + i] = (float)((h >> (16 * i)) & 0xffffu);
    RM_CHECK(s->ring->allreduce(s->tie[u], v, 8, RM_DT_F32, RM_OP_SUM, err));
    uint32_t holders = unit_holders(s, u);
    int readers = -1;
    for (; holders; holders &= holders - 1)
        readers++;
    bool agree = true;
    for (int i = 0; i < 4; i++)
        agree = agree && v[4 + i] == (float)readers * v[i];
    if (agree)
        rm_info("pipeline tied unit=%d copies=%d agree=yes", u, readers);
    else
        rm_warn("pipeline tied unit=%d: a copy on stage %d's replica %d differs from its owner's", u,
                s->pl.stage, s->pl.replica);
    return RM_OK;
}

/* FNV-1a 64 of the whole parameter vector without assembling it (P > 1): the stages' ranges are
 * contiguous and in stage order, so the hash runs stage by stage, each replica 0 continuing from
 * the previous stage's value; each value reaches every rank in four exact 16-bit pieces over the
 * world (the other ranks add zeros). The same value as rm_model_checksum of the whole vector. */
static int pl_checksum(rm_step *s, uint64_t *out, rm_err *err)
{
    uint64_t h = RM_FNV64_INIT;
    if (s->P == 1 || !s->r.ops) {
        char scratch[4096];
        *out = rm_model_checksum(s->env.m, scratch, sizeof scratch);
        return RM_OK;
    }
    for (int q = 0; q < s->P; q++) {
        float v[4] = {0, 0, 0, 0};
        if (s->pl.stage == q && s->pl.replica == 0 && !s->env.k->host_memory) {
            /* device memory: hash a host copy of the stage's range (once, at the end) */
            float *hp = malloc(s->plen * sizeof(float));
            if (!hp)
                return rm_errf(err, RM_ENOMEM, "pipeline: out of memory for the checksum");
            int rc = dev_rc(s, s->env.k->d2h(hp, s->env.m->params + s->poff, s->plen * sizeof(float)), err);
            if (rc == RM_OK)
                h = rm_fnv1a64(hp, s->plen * sizeof(float), h);
            free(hp);
            RM_CHECK(rc);
            for (int i = 0; i < 4; i++)
                v[i] = (float)((h >> (16 * i)) & 0xffffu);
        } else if (s->pl.stage == q && s->pl.replica == 0) {
            h = rm_fnv1a64(s->env.m->params + s->poff, s->plen * sizeof(float), h);
            for (int i = 0; i < 4; i++)
                v[i] = (float)((h >> (16 * i)) & 0xffffu);
        }
        RM_CHECK(s->r.ops->allreduce(s->r.comm, v, 4, RM_DT_F32, RM_OP_SUM, err));
        h = 0;
        for (int i = 0; i < 4; i++)
            h |= (uint64_t)v[i] << (16 * i);
    }
    *out = h;
    for (int u = 0; u < s->env.m->nunits; u++) /* a tied unit counts once, from its owner, above */
        if (s->tie[u])
            RM_CHECK(tie_check(s, u, err));
    return RM_OK;
}

static void pl_data_slot(const rm_step *s, int *slot, int *nslots)
{
    *slot = s->pl.replica;
    *nslots = s->pl.replicas > 0 ? s->pl.replicas : 1;
}

/* Parameters, gradients and optimizer state: the stage's layers and its copies of tied units only
 * (the other ranges are given back before each step, see "State" above); the activations are what the stage keeps alive at its
 * peak: in-flight micro-batches times the stage's layer outputs per micro-batch, plus the received
 * input. */
static void pl_memory(const rm_step *s, rm_step_memory *out)
{
    const rm_model *m = s->env.m;
    uint64_t T = s->plen ? s->plen + copies_len(s) : m->nparams, f = sizeof(float);
    memset(out, 0, sizeof *out);
    out->params = out->grads = T * f;
    out->optimizer = (uint64_t)s->env.opt->nstate * T * f;
    uint64_t mbrows = (uint64_t)((s->env.batch + s->M - 1) / s->M), per = 0;
    for (int l = s->l0; l < s->l1; l++)
        per += m->unit[l].act_floats;
    if (s->pl.stage > 0)
        per += (uint64_t)m->unit[s->l0].in_width; /* received input */
    out->activations = (uint64_t)s->sc.inflight * mbrows * per * f;
}

/* P > 1: a restore reads this stage's layers only (worker/step.h restore_layers), in the layout
 * pl_state_save writes: the range's parameters, then its range of each optimizer buffer. Copies of
 * tied units are not in that range: the state agreement that follows every restore gives them the
 * owner's restored values (pl_state_sync). */
static bool pl_restore_layers(const rm_step *s, int *u0, int *u1)
{
    if (!stage_ckpt(s))
        return false;
    *u0 = s->l0;
    *u1 = s->l1;
    return true;
}

static void pl_state_restore_layers(rm_step *s, const void *src, int64_t opt_t, float loss_scale,
                                    int scaler_tracker)
{
    const float *f = src;
    const rm_kernels *k = s->env.k;
    int rc = RM_OK;
    for (int i = -1; i < s->env.opt->nstate && rc == RM_OK; i++) {
        float *d = (i < 0 ? s->env.m->params : s->env.opt->state[i]) + s->poff;
        const float *from = f + (size_t)(1 + i) * s->plen;
        if (k->host_memory)
            memcpy(d, from, s->plen * sizeof(float));
        else /* a failed copy surfaces at the next step's kernel check */
            rc = k->h2d(d, from, s->plen * sizeof(float));
    }
    if (rc != RM_OK)
        rm_warn("pipeline: restoring stage %d's layers on %s failed rc=%s", s->pl.stage, k->name,
                rm_strerror(rc));
    restored_meta(s, opt_t, loss_scale, scaler_tracker);
    restored_flags(s);
}

const rm_step_ops rm_step_pipeline_ops = {
    .name = "pipeline",
    .init = pl_init,
    .round_begin = pl_round_begin,
    .state_fresh = pl_state_fresh,
    .state_bytes = pl_state_bytes,
    .state_save = pl_state_save,
    .state_restore = pl_state_restore,
    .state_sync = pl_state_sync,
    .step = pl_step,
    .round_end = pl_round_end,
    .destroy = pl_destroy,
    .materialize = pl_materialize,
    .state_gather = pl_state_gather,
    .memory = pl_memory,
    .data_slot = pl_data_slot,
    .ckpt_stages = pl_ckpt_stages,
    .restore_layers = pl_restore_layers,
    .state_restore_layers = pl_state_restore_layers,
    .eval_forward = pl_eval_forward,
    .checksum = pl_checksum,
};
