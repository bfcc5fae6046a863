/* tp_split.h — a model family's tensor-parallel split as the tensor strategy
 * (worker/tensor/step_tensor.c) drives it (docs/models-and-data.md, "Tensor parallelism"): one
 * table per family, each beside its split (tp_mlp.c: the MLP, tp_gpt.c: the transformer), so the
 * strategy names no family — a variant is data (docs/c-style.md), as worker/step.h's strategies.
 *
 * A split is this tensor rank's pieces of the whole model: params and grads (n floats, the
 * family's local layout) of a model whose whole layout (worker/model/model.h) has nwhole floats.
 * slice and assemble map between the two layouts by plain copies, so a checkpoint or an export of
 * the assembled model is the file T = 1 writes; the sizes do not depend on the tensor rank, only
 * the slices do (set_rank). Collectives go through the caller's sum callback (ar, ud): in place
 * over the tensor group, the same bits on every rank.
 *
 * Ownership: the tables are static. rm_tp_split owns its family's model (impl, with params, grads
 * and activations: kernels memory, host memory in this version) from init until free (NULL-safe,
 * idempotent); x, labels and loss_sum are borrowed for a call. */
#ifndef RM_WORKER_TP_SPLIT_H
#define RM_WORKER_TP_SPLIT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "common/rm.h"
#include "kernels/kernels.h"
#include "worker/checkpoint/ckpt_shard.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"

/* Between the whole model's layout and a rank's pieces, one block at a time (the families' slice,
 * assemble and checkpoint runs share their walk over the model through it): rows rows of w floats
 * at whole offset woff (rows ws floats apart) and local offset loff (ls apart). Copies whole ->
 * local (to_local) or local -> whole, or, with record set, records the block as a checkpoint run
 * (worker/checkpoint/ckpt_shard.h) of shard `shard`. A replicated block goes local -> whole or into
 * a run only with with_rep; a copy block (a tied copy of another stage's piece) only whole -> local. */
typedef enum { RM_TP_BLK_SPLIT = 0, RM_TP_BLK_REP = 1, RM_TP_BLK_COPY = 2 } rm_tp_blk_kind;
typedef struct rm_tp_map {
    float *whole, *local; /* copying */
    bool to_local, with_rep;
    bool record;      /* recording runs instead of copying */
    rm_ckpt_run *run; /* cap entries (NULL with cap 0: counting), n counted (may exceed cap) */
    int n, cap;
    int32_t shard;
} rm_tp_map;

static inline void rm_tp_map_block(rm_tp_map *m, size_t woff, size_t ws, size_t loff, size_t ls, size_t rows,
                                   size_t w, rm_tp_blk_kind kind)
{
    bool out = m->record || !m->to_local; /* local -> whole, or a run */
    if (rows == 0 || w == 0 || (out && kind == RM_TP_BLK_COPY) ||
        (out && kind == RM_TP_BLK_REP && !m->with_rep))
        return;
    if (m->record) {
        if (m->run && m->n < m->cap)
            m->run[m->n] = (rm_ckpt_run){.shard = m->shard,
                                         .rows = (uint32_t)rows,
                                         .local = loff,
                                         .lstride = rows > 1 ? ls : w,
                                         .whole = woff,
                                         .wstride = rows > 1 ? ws : w,
                                         .len = w};
        m->n++;
        return;
    }
    for (size_t i = 0; i < rows; i++) {
        float *a = m->whole + woff + i * ws, *b = m->local + loff + i * ls;
        if (m->to_local)
            memcpy(b, a, w * sizeof(float));
        else
            memcpy(a, b, w * sizeof(float));
    }
}

/* Sum buf (n floats) in place over the tensor group; the same bits on every rank. */
typedef int (*rm_tp_allreduce_fn)(void *ud, float *buf, size_t n, rm_err *err);

/* Megatron's asynchronous tensor-parallel allreduce (optional; the strategy sets both or neither):
 * start begins the sum of buf as ar would, on another thread, and returns; wait returns when it is
 * done, with its result. A family starts f's input-gradient sum, computes the weight gradient
 * (which reads neither buf nor the group) and waits, so the two overlap; between start and wait
 * there is no other collective and no use of buf. Without them (NULL) the sum runs at start. */
typedef int (*rm_tp_start_fn)(void *ud, float *buf, size_t n, rm_err *err);
typedef int (*rm_tp_wait_fn)(void *ud, rm_err *err);
typedef struct rm_tp_async {
    rm_tp_start_fn start;
    rm_tp_wait_fn wait;
} rm_tp_async;

static inline int rm_tp_f_start(const rm_tp_async *a, rm_tp_allreduce_fn ar, void *ud, float *buf, size_t n,
                                rm_err *err)
{
    return a->start ? a->start(ud, buf, n, err) : ar(ud, buf, n, err);
}

static inline int rm_tp_f_wait(const rm_tp_async *a, void *ud, rm_err *err)
{
    return a->wait ? a->wait(ud, err) : RM_OK;
}

typedef struct rm_tp_split_ops rm_tp_split_ops;
typedef struct rm_tp_stage_ops rm_tp_stage_ops;

typedef struct rm_tp_split {
    const rm_tp_split_ops *ops;
    rm_model_shape shape; /* the whole model's */
    int T, t;
    int P, p; /* pipeline stages and this rank's stage (P = 1: the whole model); set before init */
    rm_tp_allreduce_fn ar;
    void *ud;
    rm_tp_async async;     /* optional, set before init: f overlapped with the weight gradient */
    float *params, *grads; /* this rank's pieces, n floats each (the family's buffers) */
    size_t n, nwhole;
    size_t fwd_floats, bwd_floats; /* floats through ar in the last train's forward and backward */
    void *impl;                    /* the family's split model (rm_tp_mlp, rm_tp_gpt) */
} rm_tp_split;

struct rm_tp_split_ops {
    const char *family; /* the rm_model_family it splits ("mlp", "gpt") */
    /* The stage compute with pipeline stages (T x P); NULL: the family splits only P = 1. */
    const rm_tp_stage_ops *stage;
    /* Plan tensor rank s->t of s->T of stage s->p of s->P for s->shape and allocate for max_batch
     * rows (s->shape, T, t, P, p, ar and ud set by the caller); fills params, grads, n and nwhole
     * (the sizes depend on p, not on t). RM_EINVAL naming the field T does not divide; RM_ENOMEM. */
    int (*init)(rm_tp_split *s, const rm_kernels *k, int max_batch, rm_err *err);
    /* Become tensor rank t (of the same stage: the slices move; the sizes stay). */
    int (*set_rank)(rm_tp_split *s, int t, rm_err *err);
    void (*free)(rm_tp_split *s);
    /* Forward, loss and backward of rows rows of x (the family's input rows, replicated over the
     * group) against labels: *loss_sum as the whole model's loss of rows, scaled by 1 / rows;
     * grads overwritten with this rank's pieces. Fails only when a collective fails. */
    int (*train)(rm_tp_split *s, const void *x, const int32_t *labels, int rows, float *loss_sum,
                 rm_err *err);
    /* Whole (nwhole floats) -> this rank's pieces (n floats). */
    void (*slice)(const rm_tp_split *s, const float *whole, float *local);
    /* This rank's pieces -> their places in whole, the rest untouched; replicated pieces only when
     * with_replicated (a zeroed whole summed over the group, replicated pieces from rank 0 only, is
     * the whole model). */
    void (*assemble)(const rm_tp_split *s, const float *local, float *whole, bool with_replicated);
    /* Whether local float i is replicated (the same on every rank): counted once in norms. */
    bool (*replicated)(const rm_tp_split *s, size_t i);
    /* Tensor rank t of stage p's pieces (this split's T, P and shape) as checkpoint runs of shard
     * `shard` into run (cap entries): the count (may exceed cap), or a negative rm error; *n (may
     * be NULL) gets that rank's local floats (its split's n). */
    int (*runs)(const rm_tp_split *s, int t, int p, int32_t shard, rm_ckpt_run *run, int cap, size_t *n,
                rm_err *err);
    /* The local tensors (local offsets) with the whole model's decay flags (2+ dimensions, as
     * rm_optim_tensors_from_model): the count (may exceed cap; nothing written past it). */
    int (*tensors)(const rm_tp_split *s, rm_optim_seg *seg, int cap);
};

/* A stage of a pipeline whose layers are split across the tensor group (T x P; pipe_sched.h runs
 * it): the rows of a micro-batch in, the rows of the stage's output out, the family's buffers in
 * between (each micro-batch's activations at its rows, kept until its backward). Collectives and
 * the floats they move as in train (fwd_floats, bwd_floats grow; the caller zeroes them). */
struct rm_tp_stage_ops {
    /* The layer bounds of P stages into bounds (P + 1 entries). RM_EINVAL naming
     * spec.parallelism.pipelineStages when the model has too few units for P. */
    int (*bounds)(const rm_model_shape *shape, int P, int *bounds, rm_err *err);
    /* Floats per row of the stage's input and output. */
    void (*widths)(const rm_tp_split *s, int *din, int *dout);
    /* Forward rows [off, off + rows) from in (those rows: the batch's own input rows on the first
     * stage, the received activations after). */
    int (*forward)(rm_tp_split *s, const void *in, int off, int rows, rm_err *err);
    /* The stage's output rows from off (after the loss, on the last stage: its gradient). */
    float *(*output)(rm_tp_split *s, int off);
    /* The last stage: the loss of rows [off, off + rows) against labels (the batch's, from row 0),
     * scaled by inv_batch, its sum into *loss_sum (the kernels' memory), the output replaced by its
     * gradient. Fails only when a collective fails. */
    int (*loss)(rm_tp_split *s, const int32_t *labels, int off, int rows, float inv_batch, float *loss_sum,
                rm_err *err);
    /* Backward rows [off, off + rows) from dy (overwritten); in as forward's; the pieces' gradients
     * written (accumulate: added); the input gradient rows into dx unless NULL. */
    int (*backward)(rm_tp_split *s, const void *in, int off, int rows, float *dy, float *dx, bool accumulate,
                    rm_err *err);
    /* Optional (NULL: none). A piece this rank holds that the same tensor rank of another stage holds
     * too (the transformer's wte rows: the embedding on stage 0, the tied head on the last): its
     * local range [*off, *off + *len), and whether this rank's is the copy (not assembled,
     * checkpointed or counted in norms). The strategy sums its gradient over the two holders.
     * False when this stage holds none. */
    bool (*tied)(const rm_tp_split *s, size_t *off, size_t *len, bool *copy);
    /* The most micro-batches a step may have (0: any). */
    int max_micro;
};

/* A family's table, stamped out once per family (at the end of its .c, which includes <stdlib.h>)
 * so the entries every family shares are written once: `const rm_tp_split_ops TABLE` for family
 * FAMILY over its split model type MODEL (its plan in field p, its pieces in params / grads, its
 * traffic in fwd_floats / bwd_floats) of plan type PLAN, with stage compute STAGE (a
 * const rm_tp_stage_ops *, or NULL), through its functions
 * PLAN_FN(shape, T, t, P, p, &plan, err), INIT_FN(m, k, &plan, max_batch, ar, ud, err), FREE_FN(m),
 * SLICE_FN(&plan, whole, local), ASSEMBLE_FN(&plan, local, whole, with_rep),
 * REPLICATED_FN(&plan, i), RUNS_FN(&plan, shard, run, cap), and two the family defines before it:
 * static int TRAIN_FN(MODEL *m, const void *x, const int32_t *labels, int rows, float *loss_sum,
 * rm_err *err) (forward, loss, backward) and static int TENSORS_FN(const PLAN *p, rm_optim_seg
 * *seg, int cap) (the tensors entry). */
#define RM_TP_SPLIT_TABLE(TABLE, FAMILY, MODEL, PLAN, STAGE, PLAN_FN, INIT_FN, FREE_FN, SLICE_FN,            \
                          ASSEMBLE_FN, REPLICATED_FN, RUNS_FN, TRAIN_FN, TENSORS_FN)                         \
    static int split_init(rm_tp_split *s, const rm_kernels *k, int max_batch, rm_err *err)                   \
    {                                                                                                        \
        PLAN p;                                                                                              \
        RM_CHECK(PLAN_FN(&s->shape, s->T, s->t, s->P, s->p, &p, err));                                       \
        MODEL *m = calloc(1, sizeof *m);                                                                     \
        if (!m)                                                                                              \
            return rm_errf(err, RM_ENOMEM, "tensor: out of memory");                                         \
        int rc = INIT_FN(m, k, &p, max_batch, s->ar, s->ud, err);                                            \
        if (rc) {                                                                                            \
            free(m);                                                                                         \
            return rc;                                                                                       \
        }                                                                                                    \
        m->async = s->async;                                                                                 \
        s->impl = m;                                                                                         \
        s->params = m->params;                                                                               \
        s->grads = m->grads;                                                                                 \
        s->n = p.n;                                                                                          \
        s->nwhole = p.nwhole;                                                                                \
        return RM_OK;                                                                                        \
    }                                                                                                        \
    static int split_set_rank(rm_tp_split *s, int t, rm_err *err)                                            \
    {                                                                                                        \
        MODEL *m = s->impl;                                                                                  \
        PLAN p;                                                                                              \
        RM_CHECK(PLAN_FN(&s->shape, s->T, t, s->P, s->p, &p, err));                                          \
        m->p = p; /* the same sizes: only the slices move */                                                 \
        s->t = t;                                                                                            \
        return RM_OK;                                                                                        \
    }                                                                                                        \
    static void split_free(rm_tp_split *s)                                                                   \
    {                                                                                                        \
        if (!s || !s->impl)                                                                                  \
            return;                                                                                          \
        FREE_FN(s->impl);                                                                                    \
        free(s->impl);                                                                                       \
        s->impl = NULL;                                                                                      \
        s->params = s->grads = NULL;                                                                         \
    }                                                                                                        \
    static int split_train(rm_tp_split *s, const void *x, const int32_t *labels, int rows, float *loss_sum,  \
                           rm_err *err)                                                                      \
    {                                                                                                        \
        MODEL *m = s->impl;                                                                                  \
        RM_CHECK(TRAIN_FN(m, x, labels, rows, loss_sum, err));                                               \
        s->fwd_floats = m->fwd_floats;                                                                       \
        s->bwd_floats = m->bwd_floats;                                                                       \
        return RM_OK;                                                                                        \
    }                                                                                                        \
    static void split_slice(const rm_tp_split *s, const float *whole, float *local)                          \
    {                                                                                                        \
        SLICE_FN(&((const MODEL *)s->impl)->p, whole, local);                                                \
    }                                                                                                        \
    static void split_assemble(const rm_tp_split *s, const float *local, float *whole, bool with_replicated) \
    {                                                                                                        \
        ASSEMBLE_FN(&((const MODEL *)s->impl)->p, local, whole, with_replicated);                            \
    }                                                                                                        \
    static bool split_replicated(const rm_tp_split *s, size_t i)                                             \
    {                                                                                                        \
        return REPLICATED_FN(&((const MODEL *)s->impl)->p, i);                                               \
    }                                                                                                        \
    static int split_runs(const rm_tp_split *s, int t, int p, int32_t shard, rm_ckpt_run *run, int cap,      \
                          size_t *n, rm_err *err)                                                            \
    {                                                                                                        \
        PLAN pl;                                                                                             \
        RM_CHECK(PLAN_FN(&s->shape, s->T, t, s->P, p, &pl, err));                                            \
        if (n)                                                                                               \
            *n = pl.n;                                                                                       \
        return RUNS_FN(&pl, shard, run, cap);                                                                \
    }                                                                                                        \
    static int split_tensors(const rm_tp_split *s, rm_optim_seg *seg, int cap)                               \
    {                                                                                                        \
        return TENSORS_FN(&((const MODEL *)s->impl)->p, seg, cap);                                           \
    }                                                                                                        \
    const rm_tp_split_ops TABLE = {                                                                          \
        .family = FAMILY,                                                                                    \
        .stage = STAGE,                                                                                      \
        .init = split_init,                                                                                  \
        .set_rank = split_set_rank,                                                                          \
        .free = split_free,                                                                                  \
        .train = split_train,                                                                                \
        .slice = split_slice,                                                                                \
        .assemble = split_assemble,                                                                          \
        .replicated = split_replicated,                                                                      \
        .runs = split_runs,                                                                                  \
        .tensors = split_tensors,                                                                            \
    };

extern const rm_tp_split_ops rm_tp_split_mlp; /* tp_mlp.c */
extern const rm_tp_split_ops rm_tp_split_gpt; /* tp_gpt.c */
#endif
