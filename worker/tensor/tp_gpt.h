/* tp_gpt.h — the transformer (worker/model/gpt.c) split across a tensor group of T ranks
 * (docs/models-and-data.md, "Tensor parallelism"; Megatron-LM's split of GPT).
 *
 * The split, per block: attention with the heads split (c_attn column-parallel: rank t holds the
 * Q, K and V columns of heads [t·NH/T, (t+1)·NH/T); attn.c_proj row-parallel: the same rows), the
 * MLP column/row (c_fc columns, mlp.c_proj rows of [t·4C/T, (t+1)·4C/T)); the row layers' biases,
 * the LayerNorms and wpe replicated. Megatron's f (identity forward, sum of the input gradient
 * backward) before each column part and g (sum of the partial outputs forward, identity backward)
 * after each row part. The token embedding / LM head (tied) is split by vocabulary: V padded to
 * Vp, a multiple of T, rank t holding rows [t·Vp/T, (t+1)·Vp/T) of wte (padding rows zero, never
 * read as classes); the embedding sums the rows its rank holds (g), the head's logits stay split
 * and the cross-entropy is vocab-parallel: each rank's row maxima are gathered (a sum of a
 * [rows x T] buffer, one slot a rank), then the sums of exp and the target logits are summed; no
 * rank holds the full logits. The head's input gradient is summed (f).
 *
 * Local layout: unit 0 [wte rows (Vp/T x C) | wpe]; each block gpt.c's at part C/T
 * (worker/model/gpt.h rm_gpt_blk_layout: c_attn.w C x 3C/T holding this rank's Q | K | V columns,
 * attn.c_proj.w C/T x C, c_fc.w C x 4C/T, mlp.c_proj.w 4C/T x C); the head [ln_f.w | ln_f.b].
 * rm_tp_gpt_slice / rm_tp_gpt_assemble map between it and the whole model's layout (gpt.c's,
 * unpadded), so init, checkpoints and export stay T = 1's.
 *
 * Pipeline stages (T x P, docs/models-and-data.md): stage p holds blocks [b0, b1) (partitioned as
 * the pipeline partitions units: rm_pipe_partition); stage 0 also the embedding (wte's rows and wpe),
 * the last stage ln_f and the head, which reads wte: the last stage holds a copy of its tensor
 * rank's wte rows (Megatron's arrangement for the tied embedding), sliced like the owner's, never
 * assembled, checkpointed or counted in norms (rm_tp_map_block's copy blocks); the strategy sums
 * the two stages' wte gradients so the copies stay equal. A stage's input and output are the
 * residual stream (rows x context x C floats, whole on every tensor rank); stage 0 reads tokens,
 * the last ends in the split logits. The local layout keeps the order below, omitting what the
 * stage does not hold. One micro-batch per step in this version (the activations are per batch).
 *
 * Rows are sequences of `context` tokens; the loss is gpt.c's (mean over positions).
 *
 * Collectives go through a sum callback (tp_split.h's rm_tp_allreduce_fn): the same bits on every
 * rank. Any kernels table with the vocabulary-parallel entries (kernels/transformer.h): the CPU's,
 * or a GPU's, whose buffers are then device memory end to end (the caller's sum callback stages
 * them through the host when its transport needs host memory). rm_tp_split_gpt (tp_split.h) is
 * this split as the tensor strategy drives it.
 *
 * Ownership: rm_tp_gpt owns its parameters, gradients and activations (kernels memory); tokens,
 * labels and the loss are borrowed per call. */
#ifndef RM_WORKER_TP_GPT_H
#define RM_WORKER_TP_GPT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "kernels/kernels.h"
#include "worker/model/gpt.h"
#include "worker/model/model.h"
#include "worker/tensor/tp_split.h"

typedef struct rm_tp_gpt_plan {
    int T, t;
    int L, V, Vp, ctx, C, NH; /* the whole shape; Vp: V padded to a multiple of T */
    int Vl, Cl, NHl;          /* this rank's vocabulary rows, attention width (C/T), heads */
    size_t blk_len;           /* a block's local floats */
    size_t n;                 /* local floats: unit 0, L blocks, head */
    size_t nwhole;            /* the whole (unpadded) model's floats, gpt.c's layout */
    /* pipeline stages (P = 1: the whole model, p = 0) */
    int P, p;
    int b0, b1;                         /* blocks [b0, b1), 0-based */
    bool has_wte, has_wpe, has_head;    /* stage 0: wte, wpe; the last: wte (a copy when P > 1), ln_f */
    bool wte_copy;                      /* this stage's wte rows are the first stage's (tied) */
    size_t o_wte, o_wpe, o_blk, o_head; /* local offsets of what it holds */
} rm_tp_gpt_plan;

/* The plan of tensor rank t of T for a gpt shape. RM_EINVAL naming spec.training.model.heads when
 * T does not divide the heads (4·embed then divides too). */
int rm_tp_gpt_plan_make(const rm_model_shape *s, int T, int t, rm_tp_gpt_plan *out, rm_err *err);
/* The same for stage p of P (P <= the blocks: RM_EINVAL naming spec.parallelism.pipelineStages). */
int rm_tp_gpt_plan_stage(const rm_model_shape *s, int T, int t, int P, int p, rm_tp_gpt_plan *out,
                         rm_err *err);
/* The block bounds of P stages (P + 1 entries), as rm_tp_gpt_plan_stage splits them. */
int rm_tp_gpt_stages(const rm_model_shape *s, int P, int *bounds, rm_err *err);

/* A step's collectives in issue order: 'F'/'B' pass, unit (0 embedding, 1..L blocks, L+1 head),
 * what ('e' embedding g, 'a' attention g/f, 'm' MLP g/f, 'x' the cross-entropy's max gather,
 * 's' its sums, 'h' the head's f) and width floats per position. Returns the count (may exceed
 * cap); none with T = 1. */
typedef struct rm_tp_gpt_event {
    char pass, what;
    int unit, width;
} rm_tp_gpt_event;
int rm_tp_gpt_events(const rm_tp_gpt_plan *p, rm_tp_gpt_event *ev, int cap);

/* Whole (gpt.c's layout, nwhole floats) -> this rank's pieces (n floats, padding zero). */
void rm_tp_gpt_slice(const rm_tp_gpt_plan *p, const float *whole, float *local);
/* This rank's pieces -> their places in whole (padding dropped), the rest untouched; replicated
 * pieces only when with_replicated. Summing the T ranks' zeroed wholes (replicated ones from rank
 * 0 only) gives the whole model. */
void rm_tp_gpt_assemble(const rm_tp_gpt_plan *p, const float *local, float *whole, bool with_replicated);
/* Whether local float i is replicated (the same on every rank): counted once in norms. */
bool rm_tp_gpt_replicated(const rm_tp_gpt_plan *p, size_t i);
/* This rank's pieces as checkpoint runs of shard `shard` (worker/checkpoint/ckpt_shard.h; the
 * replicated ones from t = 0 only, the vocabulary padding in none) into run (cap entries); returns
 * the count (may exceed cap). */
int rm_tp_gpt_runs(const rm_tp_gpt_plan *p, int32_t shard, rm_ckpt_run *run, int cap);

typedef struct rm_tp_gpt {
    rm_tp_gpt_plan p;
    const rm_kernels *k;
    int max_batch;
    float *params, *grads;
    float *emb;                               /* [N x C] */
    float *blk[RM_GPT_MAX_LAYERS];            /* per block activations (a: their sections) */
    float *lnf, *mf, *rf, *logits;            /* head; logits [N x Vl] */
    float *dres, *dln, *datty, *dbig, *stats; /* backward scratch; stats [N x max(T, 2)] */
    float *s2, *rowl;                         /* the loss's [N x 2] sums and [N] row losses */
    float *hrowl;                             /* [N] host copy of rowl (rm_kernels_host_alloc) */
    float *attn_scratch;
    const float *xin; /* the last forward's input stream (emb on stage 0, else the caller's) */
    rm_gpt_act a;
    rm_tp_allreduce_fn ar;
    void *ud;
    rm_tp_async async; /* f overlapped with the weight gradient when set (tp_split.h); zeroed by init */
    size_t fwd_floats, bwd_floats; /* floats moved through ar by the last step */
} rm_tp_gpt;

int rm_tp_gpt_init(rm_tp_gpt *m, const rm_kernels *k, const rm_tp_gpt_plan *p, int max_batch,
                   rm_tp_allreduce_fn ar, void *ud, rm_err *err);
void rm_tp_gpt_free(rm_tp_gpt *m); /* NULL ok, idempotent */
/* Forward of rows sequences of tokens (rows x context int32, replicated) to the split logits. */
int rm_tp_gpt_forward(rm_tp_gpt *m, const int32_t *tok, int rows, rm_err *err);
/* A stage's forward: from tokens (stage 0) or the residual stream in (rows x context x C) through
 * its blocks to rm_tp_gpt_output (the residual stream, or on the last stage the split logits). */
int rm_tp_gpt_stage_forward(rm_tp_gpt *m, const void *in, int rows, rm_err *err);
float *rm_tp_gpt_output(const rm_tp_gpt *m);
/* A stage's backward: from dy (the residual stream's gradient; the last stage: the logits', after
 * the loss) to its pieces' gradients (overwritten) and, unless dx is NULL, the gradient of its input
 * stream into dx. in as for the forward. */
int rm_tp_gpt_stage_backward(rm_tp_gpt *m, const void *in, int rows, const float *dy, float *dx, rm_err *err);
/* After forward: the vocab-parallel cross-entropy against labels (rows x context): *loss_sum (the
 * kernels' memory: a device scalar on a GPU table) as gpt.c's loss (the same on every rank), the split logits replaced by their gradient scaled by
 * inv_batch / context. */
int rm_tp_gpt_loss(rm_tp_gpt *m, const int32_t *labels, int rows, float inv_batch, float *loss_sum,
                   rm_err *err);
/* Backward from the logits' gradient: grads overwritten with this rank's pieces. */
int rm_tp_gpt_backward(rm_tp_gpt *m, const int32_t *tok, int rows, rm_err *err);
#endif
