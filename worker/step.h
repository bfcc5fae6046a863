/* step.h — the worker's table of training strategies (docs/strategies.md).
 *
 * A strategy says how one optimizer step turns a batch into updated parameters across the
 * workers, and how its state is made fresh, saved into a checkpoint, restored from one and agreed
 * on when a round (one rendezvous epoch) forms. worker/train.c is the driver — data, model,
 * metrics, evaluation, checkpoint files, the in-place restart loop — and talks to a strategy only
 * through this table, as it talks to a comm backend only through worker/comm/comm.h. A strategy is one
 * module, step_<name>.c, exporting one rm_step_ops; rm_step_strategy(name) finds it.
 *   allreduce  synchronous data parallelism: gradients averaged through fusion buckets over the
 *              round's comm backend (ring, NCCL, MPI), every rank applies the same update
 *              (step_allreduce.c); env.sharding selects a ZeRO stage (optimizer / gradients /
 *              full) of it.
 *   parameterServer  centralized: gradients pushed to S server shards, parameters fetched back,
 *              sync (with backup workers) or async Downpour (step_ps.c; servers: ps_server.c).
 *   pipeline   pipeline model parallelism (spec.parallelism, docs/strategies.md#pipeline-stages): the model's layers split
 *              into P stages, micro-batches scheduled by GPipe or 1F1B between neighbouring
 *              ranks, gradients allreduced within each stage's data-parallel group
 *              (step_pipeline.c; the pure parts: pipeline_core.h).
 *   tensor     tensor parallelism (spec.parallelism.tensorParallel, docs/models-and-data.md): each
 *              layer's neurons split over T adjacent ranks, gradients averaged within each tensor
 *              rank's data-parallel group (worker/tensor/step_tensor.c; the splits of the MLP
 *              and the transformer: tp_split.h).
 *
 * Lifecycle: init (once per process, before any round) -> for each round: round_begin ->
 * [state_restore from a checkpoint | state_fresh] -> state_sync -> step ... -> round_end ->
 * destroy. state_save works whenever the state is real (also between rounds, for the SIGTERM
 * checkpoint); state_sync and step need a live round.
 *
 * Position: the driver owns the schedule position (rm_step_pos); state_sync makes every rank hold
 * the same one together with the same parameters, so after a round forms no rank acts on what it
 * remembers from before the failure (docs/architecture.md#failures-and-restarts: a remembered evaluation desynchronised the ring).
 *
 * Ownership: everything in rm_step_env is borrowed from the driver and must outlive the strategy;
 * a strategy owns what its init and round_begin create; destroy and round_end accept NULL and are
 * idempotent. Errors: negative RM_E* with err filled; a failing step or state_sync means the
 * round is broken (the driver tears it down and re-joins). */
#ifndef RM_WORKER_STEP_H
#define RM_WORKER_STEP_H
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "kernels/kernels.h"
#include "worker/comm/comm.h"
#include "worker/gpu.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"

typedef struct rm_step rm_step; /* a strategy's state; each module defines its own */
struct rm_ckpt_run;             /* worker/checkpoint/ckpt_shard.h */

/* What the driver lends a strategy for the process' lifetime. */
typedef struct rm_step_env {
    const rm_kernels *k;
    rm_model *m;          /* parameters, gradients, the batch buffers m->x / m->labels */
    rm_optim *opt;        /* optimizer and its state buffers */
    rm_amp *amp;          /* mixed precision (fp16 loss scaling); a no-op for fp32 */
    double fusion_mb;     /* fusion bucket threshold in MiB (0 = one bucket per layer) */
    rm_sharding sharding; /* allreduce: ZeRO stage (spec.training.sharding) */
    /* what strategies that plan their own data position need (claim below) */
    const char *token;             /* the job token (parameter-server connections) */
    double timeout_s;              /* bound on each wait for a peer */
    int64_t train_samples;         /* training-set size */
    int batch;                     /* per-worker batch */
    int epochs;                    /* spec.training.epochs */
    int64_t max_steps;             /* 0 = none */
    volatile sig_atomic_t *cancel; /* non-zero (SIGTERM): end any retry loop at once */
    /* docs/strategies.md, "Optimizers for transformers": the global gradient norm is clipped to
     * grad_clip (0 = off) after the gradients are averaged; grad_accum micro-batches (>= 1) make
     * one step: the driver loads micro-batch 0 before step(), and the strategy asks for micro-batch
     * k (1 <= k < grad_accum) through load_micro(micro_ud, k) into m->x / labels. A strategy that
     * cannot accumulate refuses grad_accum > 1 at init (the validator already does). */
    double grad_clip;
    int grad_accum;
    int (*load_micro)(void *ud, int k, rm_err *err);
    void *micro_ud;
    /* For strategies that claim their batches (workers that never talk to each other): the
     * group as the driver knows it while it re-forms in the background (the round goes on):
     * RM_STEP_VIEW(rendezvous epoch, workers alive in it). The driver's reporter thread writes
     * it; NULL without a rendezvous. */
    const atomic_llong *view;
} rm_step_env;
#define RM_STEP_VIEW(epoch, live) (((long long)(epoch) << 32) | (long long)(unsigned)(live))
#define RM_STEP_VIEW_EPOCH(v) ((int)((v) >> 32))
#define RM_STEP_VIEW_LIVE(v) ((int)((v)&0xffffffffLL))

/* Bytes this rank holds at the peak of a step, per kind (the ringmaster_worker_memory_bytes
 * gauge and status.result.memoryBytes). */
typedef struct rm_step_memory {
    uint64_t params, grads, optimizer, activations;
} rm_step_memory;

/* Where the next step's batch comes from, when the strategy decides it (claim): the global
 * position (step, data epoch, cursor into that epoch's permutation) and this worker's slot of the
 * batch (rows slot*B .. of the global batch at data_pos; nslots = 1: the batch at data_pos). */
typedef struct rm_step_claim {
    int64_t step;
    int train_epoch;
    int64_t data_pos;
    int slot, nslots;
    bool done; /* the job's budget is spent: no step; the driver ends the job */
} rm_step_claim;

/* The round a strategy runs in (borrowed until round_end). */
typedef struct rm_step_round {
    const rm_comm_ops *ops;
    rm_comm *comm;
    int rank, world;
    /* For strategies that form their own sub-groups over the ring listener (pipeline); valid
     * during round_begin only: peers (world entries, index = rank), the worker's long-lived ring
     * listener (NULL without one) and the round's rendezvous epoch. */
    const rm_rdzv_peer *peers;
    rm_ring_listener *listener;
    int epoch;
} rm_step_round;

/* Where the job is in its schedule: what a checkpoint or rank 0 decides, never a survivor's
 * memory. */
typedef struct rm_step_pos {
    int64_t step;           /* optimizer steps completed (global) */
    int64_t data_pos;       /* samples of train_epoch's permutation consumed */
    int64_t last_ckpt_step; /* -1: none */
    int train_epoch;
    bool eval_done; /* the end-of-epoch evaluation at `step` has run */
} rm_step_pos;

/* What one step measured (for the driver's metrics). */
typedef struct rm_step_stats {
    bool comm; /* the step communicated (world > 1); the fields below are valid */
    double allreduce_s;
    /* Seconds this rank computed (forward, backward, update), waits for communication excluded;
     * 0 when the strategy does not measure it: the driver then takes the step's time less
     * allreduce_s, which undercounts when the allreduce overlaps the backward pass (fusion). The
     * `slow` fault scales this. Valid whatever comm says. */
    double compute_s;
    uint64_t bytes;
    double busbw_gbps;
    /* the global gradient norm before clipping (when has_grad_norm: gradClip is set) */
    bool has_grad_norm;
    double grad_norm;
    /* pipeline (step_pipeline.c): valid when pipe is set */
    bool pipe;
    int pipe_stage;
    double pipe_bubble;            /* time waiting for a neighbour / time of the schedule, this step */
    uint64_t pipe_sent, pipe_recv; /* bytes to / from neighbouring stages, this step */
    /* tensor parallelism (worker/tensor/step_tensor.c): valid when tensor is set */
    bool tensor;
    int tensor_rank;
    uint64_t tensor_bytes; /* allreduced in the tensor group this step (also counted in bytes) */
    double tensor_wait_s;  /* seconds in those collectives (also counted in allreduce_s) */
} rm_step_stats;

typedef struct rm_step_ops {
    const char *name;
    int (*init)(const rm_step_env *env, rm_step **out, rm_err *err);
    /* A round formed (comm initialised): set up per-round parts (fusion buckets). */
    int (*round_begin)(rm_step *s, const rm_step_round *r, rm_err *err);
    /* Fresh state: parameters from seed, zero optimizer state (opt->t = 0). */
    int (*state_fresh)(rm_step *s, uint64_t seed, rm_err *err);
    /* The three checkpoint entries are NULL together for a strategy whose state the workers do not
     * checkpoint (parameter servers, L-BFGS: the servers do); the driver then neither writes nor
     * loads a worker checkpoint. */
    /* Bytes of this rank's checkpoint payload (host memory); 0: this rank writes none. */
    size_t (*state_bytes)(const rm_step *s, int rank);
    /* Copy this rank's payload (state_bytes of it) into dst, host memory. Fails (and dst must not
     * be written as a checkpoint) when a device read fails, e.g. after a sticky CUDA fault. */
    int (*state_save)(rm_step *s, void *dst, rm_err *err);
    /* Take a verified checkpoint payload (host memory, state_bytes of it) and its optimizer
     * count and scaler state. */
    void (*state_restore)(rm_step *s, const void *src, int64_t opt_t, float loss_scale, int scaler_tracker);
    /* Every rank of the round ends up with rank 0's state and *pos. */
    int (*state_sync)(rm_step *s, rm_step_pos *pos, rm_err *err);
    /* One optimizer step on `rows` samples already in env->m->x / labels (per micro-batch: with
     * env->grad_accum K > 1 the step runs K micro-batches and m->loss_sum ends as their total), at
     * learning rate lr. */
    int (*step)(rm_step *s, int rows, float lr, rm_step_stats *st, rm_err *err);
    void (*round_end)(rm_step *s);
    void (*destroy)(rm_step *s);
    /* Optional (NULL: not needed). Collective, every rank of the round at the same point: make
     * env->m->params hold every parameter until the next step (sharding "full" keeps only its
     * shard between uses); the driver calls it before evaluating and before the final checksum. */
    int (*materialize)(rm_step *s, rm_err *err);
    /* Optional. Collective: assemble the whole checkpoint payload (state_bytes(s, 0) bytes, host
     * memory) in dst on every rank from the ranks' shards; until the next step, state_bytes(s, 0)
     * is then non-zero and state_save on rank 0 takes the payload from dst. Without it (a sharded
     * state at a point where the ranks cannot meet, e.g. SIGTERM), state_bytes answers 0 and the
     * newest checkpoint stands. */
    int (*state_gather)(rm_step *s, void *dst, rm_err *err);
    /* Optional. Peak bytes per kind this rank holds in a step (after round_begin). */
    void (*memory)(const rm_step *s, rm_step_memory *out);
    /* Optional (NULL: the driver walks the schedule itself, every rank in lock step). A strategy
     * whose workers do not move together (parameter servers: epochs are a global budget,
     * docs/strategies.md#progress-epochs-are-a-global-budget) says before each step where its batch is, and when the job is
     * done; the driver then evaluates on this worker alone (no collective) at data-epoch ends. */
    int (*claim)(rm_step *s, rm_step_claim *c, rm_err *err);
    /* Optional (NULL: slot = rank, nslots = world). Which slice of the global batch this rank
     * trains on in lock-step mode (rows slot*B .. of nslots*B): pipeline stages of one
     * data-parallel replica share a slot. Valid after round_begin. */
    void (*data_slot)(const rm_step *s, int *slot, int *nslots);
    /* Optional (NULL: false). The state is sharded across the round's ranks by the model's layers
     * (worker/allreduce/shard.h rm_unit_shard; checkpoints: worker/checkpoint/ckpt_shard.h): every rank's state_bytes
     * and state_save are then its compact shard — its pieces of the parameters, then its pieces of
     * each optimizer buffer — and the driver writes one shard file per rank plus the manifest, no
     * collective needed (so also at SIGTERM); state_bytes answers 0 while the pieces are torn (a
     * step failed half way). A restore from a sharded set calls state_restore_shard. */
    bool (*state_sharded)(const rm_step *s);
    /* Required with state_sharded: every parameter (whole), then this round's pieces of each
     * optimizer buffer (compact), as rm_ckpt_shard_load_newest re-shards them for this rank. */
    void (*state_restore_shard)(rm_step *s, const void *src, int64_t opt_t, float loss_scale,
                                int scaler_tracker);
    /* Optional (NULL: false). The state is checkpointed per pipeline stage : when this
     * answers true, state_bytes/state_save are this rank's stage's layers (their parameters, then
     * their range of each optimizer buffer; 0 bytes on ranks that do not write), written as shard
     * *shard_rank of *shard_world of a stage-layout set (worker/checkpoint/ckpt_shard.h) whose manifest
     * records the layer bounds (bounds: shard_world + 1 entries, at most RM_MODEL_MAX_UNITS + 1).
     * A restore takes the whole payload re-assembled from such a set (state_restore), or, with
     * restore_layers below, just the rank's layers of it. */
    bool (*ckpt_stages)(const rm_step *s, int *shard_rank, int *shard_world, int *bounds);
    /* Optional (NULL: false). This rank restores layers [*u0, *u1) only (pipeline stages): when
     * this answers true (after round_begin), the driver reads just that range of the newest
     * checkpoint, whole file or set of any layout (worker/checkpoint/ckpt_shard.h rm_ckpt_set_load_layers,
     * rm_ckpt_whole_load_layers), into a staging buffer of the range's size, and calls
     * state_restore_layers (required then) with the range's parameters, then its range of each
     * optimizer buffer (the layout state_save writes for a stage), instead of state_restore. */
    bool (*restore_layers)(const rm_step *s, int *u0, int *u1);
    /* Optional (NULL: false). The state is checkpointed as pieces (tensor parallelism,
     * docs/models-and-data.md): when this answers true, state_bytes/state_save are this rank's
     * pieces (the parameters', then each optimizer buffer's, in the strategy's own layout; 0 bytes
     * on ranks that write none), shard *shard_rank of *shard_world of a pieces set
     * (worker/checkpoint/ckpt_shard.h), and run (cap entries) gets every shard's runs into the
     * model's vector, *nruns their count (may exceed cap: nothing is written past it). A restore
     * takes the whole payload re-assembled from such a set (state_restore). */
    bool (*ckpt_pieces)(const rm_step *s, int *shard_rank, int *shard_world, struct rm_ckpt_run *run, int cap,
                        int *nruns);
    void (*state_restore_layers)(rm_step *s, const void *src, int64_t opt_t, float loss_scale,
                                 int scaler_tracker);
    /* Optional (NULL: rm_model_forward on each rank's own slice of the test set). Collective, every
     * rank of the round at the same point with the same rows (<= the batch): the forward of the
     * evaluation batch in env->m->x / labels (every rank of a data_slot loads the same rows: the
     * driver splits the test set by data_slot when this is set). *logits is set on the ranks that
     * then hold the batch's logits in act[nlayers-1] (a pipeline's last stages): only they count
     * it, and the driver sums the counts over the round. */
    int (*eval_forward)(rm_step *s, int rows, bool *logits, rm_err *err);
    /* Optional (NULL: rm_model_checksum of env->m->params after materialize). Collective: the
     * FNV-1a 64 of every parameter's bytes in layout order, the same on every rank. */
    int (*checksum)(rm_step *s, uint64_t *out, rm_err *err);
} rm_step_ops;

/* A sub-group of the round for strategies that form their own (pipeline stages, tensor groups):
 * ranks[] (n world ranks) with this rank at index me, tagged `group` on the wire. With shm_ok and
 * ranks that advertised one host (rm_comm_shm_wanted) shared memory, else a ring sub-group over
 * the worker's listener; *ops says which (the caller closes *out with it). During round_begin only
 * (r->peers). */
int rm_step_sub_group(const rm_step_env *env, const rm_step_round *r, const int *ranks, int n, int me,
                      uint32_t group, bool shm_ok, const rm_comm_ops **ops, rm_comm **out, rm_err *err);

/* The strategy called name ("allreduce"); NULL if there is none. */
const rm_step_ops *rm_step_strategy(const char *name);
/* Names of every strategy, comma-separated ("allreduce"), for messages. */
const char *rm_step_strategy_names(void);

extern const rm_step_ops rm_step_allreduce_ops;
/* The position half of the allreduce strategy's state_sync on its step s (after its round_begin):
 * every rank takes rank 0's position, optimizer count and loss scale, and no parameters (the
 * pipeline strategy agrees on its stages' layers within each stage's group itself). */
int rm_step_allreduce_sync_pos(rm_step *s, rm_step_pos *pos, rm_err *err);
extern const rm_step_ops rm_step_ps_ops;       /* "parameterServer" (step_ps.c) */
extern const rm_step_ops rm_step_pipeline_ops; /* "pipeline" (step_pipeline.c) */
/* "tensor" (worker/tensor/step_tensor.c): spec.parallelism.tensorParallel T > 1 with P = 1 */
extern const rm_step_ops rm_step_tensor_ops;
/* spec.parallelism.tensorParallel from the worker's environment (0: absent or unreadable). */
int rm_step_tensor_parallel(void);
/* parameterServer with spec.training.optimizer.type lbfgs: Sandblaster L-BFGS (step_lbfgs.c;
 * train.c picks it by the optimizer, not by name) */
extern const rm_step_ops rm_step_lbfgs_ops;
#endif
