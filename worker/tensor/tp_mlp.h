/* tp_mlp.h — the MLP split across a tensor group of T ranks (docs/models-and-data.md, "Tensor
 * parallelism"; DistBelief's neuron partitions, Megatron-LM's column/row-parallel linear layers).
 *
 * The split: the linear layers pair up from the first, (0, 1), (2, 3), ...: the first of a pair is
 * column-parallel (rank t holds output neurons [t·h/T, (t+1)·h/T) of its width h: those columns
 * of W and that part of b; its ReLU is local), the second row-parallel (rank t holds the same rows
 * of W, the input neurons rank t computed; its bias is replicated and added once, after the sum).
 * Megatron's operators around a pair: f (identity forward, allreduce of the input gradient
 * backward) before the column layer, g (allreduce of the partial outputs forward, identity
 * backward) after the row layer. So a pair costs one forward allreduce of rows x its output width
 * and one backward allreduce of rows x its input width, except that the first pair's f moves
 * nothing (nothing consumes the input gradient of the first layer). An odd layer count leaves the
 * last layer (the classes) unpaired: it is replicated, every rank computing it whole on the
 * replicated input (the cheapest choice: it is the narrowest layer, and splitting it alone would
 * cost a gather); its gradient is the same bits on every rank. Split widths (hidden[0], [2], ...)
 * must divide by T (the validator checks it: common/tj_models_data.c).
 *
 * Local layout: layer l's [W | b] as the whole MLP stores it (W row-major [in x out]) at the
 * local widths, layers in order: col [din x dout/T | dout/T], row [din/T x dout | dout], rep
 * [din x dout | dout]. rm_tp_slice / rm_tp_assemble map between it and the whole model's layout
 * (worker/model/mlp.c), so init, checkpoints and export stay those of T = 1.
 *
 * Pipeline stages (T x P, docs/models-and-data.md): a stage holds layers [lo, hi) of the MLP and
 * pairs them from lo, so the stages split the model at whole pairs (rm_tp_mlp_stages: the pairs,
 * and a trailing odd layer, partitioned by cost as the pipeline partitions units); its local
 * layout holds only those layers, slicing and assembling touch only them, the forward and
 * backward take the stage's input rows and (stage > 0) return the input gradient, whole (a
 * column layer's is summed by f), for the previous stage.
 *
 * Collectives go through a callback (tp_split.h's rm_tp_allreduce_fn: the tensor group's comm in
 * the strategy, a thread harness in the tests): sum in place over the group, the same bits on every
 * rank. rm_tp_split_mlp (tp_split.h) is this split as the tensor strategy drives it.
 *
 * Ownership: rm_tp_mlp owns its parameters, gradients and activations (kernels memory; host
 * memory only in this version); x, labels and loss buffers are borrowed per call. */
#ifndef RM_WORKER_TP_MLP_H
#define RM_WORKER_TP_MLP_H
#include <stdbool.h>
#include <stddef.h>
#include "common/rm.h"
#include "kernels/kernels.h"
#include "worker/model/model.h"
#include "worker/tensor/tp_split.h"

#define RM_TP_MAX_LAYERS (RM_MODEL_SHAPE_WORDS - 1)

typedef enum { RM_TP_COL = 0, RM_TP_ROW = 1, RM_TP_REP = 2 } rm_tp_kind;

typedef struct rm_tp_layer {
    rm_tp_kind kind;
    int din, dout; /* whole widths */
    int in, out;   /* this rank's widths: col (din, dout/T), row (din/T, dout), rep (din, dout) */
    size_t off;    /* local flat offset of [W | b] */
    size_t woff;   /* whole flat offset of the layer */
} rm_tp_layer;

typedef struct rm_tp_plan {
    int L, T, t;
    int lo, hi; /* the layers this rank holds (a pipeline stage's; [0, L) without stages) */
    rm_tp_layer l[RM_TP_MAX_LAYERS];
    size_t n;      /* local floats */
    size_t nwhole; /* the whole model's floats */
} rm_tp_plan;

/* The plan of tensor rank t of T for an MLP shape (worker/model/mlp.c's record). RM_EINVAL naming
 * spec.training.model.hidden[i] when a split width does not divide by T, or when there is no pair. */
int rm_tp_mlp_plan(const rm_model_shape *s, int T, int t, rm_tp_plan *out, rm_err *err);
/* The same for the layers [lo, hi) of a pipeline stage (pairs from lo). */
int rm_tp_mlp_plan_range(const rm_model_shape *s, int T, int t, int lo, int hi, rm_tp_plan *out, rm_err *err);
/* The layer bounds of P stages (P + 1 entries: stage p holds [bounds[p], bounds[p+1])): whole
 * pairs, partitioned by parameter count (worker/pipeline/pipeline_core.h rm_pipe_partition).
 * RM_EINVAL naming spec.parallelism.pipelineStages when P exceeds the pairs. */
int rm_tp_mlp_stages(const rm_model_shape *s, int P, int *bounds, rm_err *err);

/* One collective of a step, in issue order: 'F' forward (g, after a row layer's GEMM: the partial
 * outputs summed) or 'B' backward (f, after a column layer's input-gradient GEMM); width floats per
 * row. */
typedef struct rm_tp_event {
    char pass;
    int layer, width;
} rm_tp_event;
/* The step's collectives into ev (cap entries); returns the count (may exceed cap). */
int rm_tp_mlp_events(const rm_tp_plan *p, rm_tp_event *ev, int cap);

/* Whole -> this rank's pieces (host floats: whole nwhole, local n). */
void rm_tp_slice(const rm_tp_plan *p, const float *whole, float *local);
/* This rank's pieces -> their places in whole, the rest untouched; replicated pieces (row biases,
 * rep layers) only when with_replicated. A zeroed whole summed over the group (each rank writing
 * its pieces, replicated ones from rank 0 only) is the whole model. */
void rm_tp_assemble(const rm_tp_plan *p, const float *local, float *whole, bool with_replicated);
/* Whether local float i is replicated (the same on every rank): counted once in norms. */
bool rm_tp_replicated(const rm_tp_plan *p, size_t i);
/* This rank's pieces as checkpoint runs of shard `shard` (worker/checkpoint/ckpt_shard.h; the
 * replicated ones from t = 0 only) into run (cap entries); returns the count (may exceed cap). */
int rm_tp_mlp_runs(const rm_tp_plan *p, int32_t shard, rm_ckpt_run *run, int cap);

typedef struct rm_tp_mlp {
    rm_tp_plan p;
    const rm_kernels *k;
    int max_batch;
    float *params, *grads;
    float *act[RM_TP_MAX_LAYERS];
    float *delta[2];
    float *dx;  /* [max_batch x widest whole width]: a column layer's partial input gradient */
    float *dbs; /* [widest]: a bias gradient before it is added (accumulating backward) */
    rm_tp_allreduce_fn ar;
    void *ud;
    rm_tp_async async; /* f overlapped with the weight gradient when set (tp_split.h); zeroed by init */
    /* floats moved through ar (the last step's forward and backward) */
    size_t fwd_floats, bwd_floats;
} rm_tp_mlp;

int rm_tp_mlp_init(rm_tp_mlp *m, const rm_kernels *k, const rm_tp_plan *p, int max_batch,
                   rm_tp_allreduce_fn ar, void *ud, rm_err *err);
void rm_tp_mlp_free(rm_tp_mlp *m); /* NULL ok, idempotent */
/* Forward of rows of x (whole input rows, replicated): the logits (whole, replicated) end in
 * rm_tp_mlp_logits. Fails only when a collective fails. */
int rm_tp_mlp_forward(rm_tp_mlp *m, const float *x, int rows, rm_err *err);
float *rm_tp_mlp_logits(const rm_tp_mlp *m);
/* A stage's forward of rows [off, off + rows) from in (those rows of its input: the batch's on
 * the first stage, the received activations after): the outputs at rm_tp_mlp_output(m, off).
 * fwd_floats grows by what went through ar. */
int rm_tp_mlp_forward_rows(rm_tp_mlp *m, const float *in, int off, int rows, rm_err *err);
/* The rows of the stage's output (its last layer's activations) from row off. */
float *rm_tp_mlp_output(const rm_tp_mlp *m, int off);
/* After forward: softmax cross-entropy of the logits against labels, its sum into *loss_sum, the
 * logits replaced by their gradient scaled by inv_batch (as worker/model/mlp.c's loss). */
void rm_tp_mlp_loss(rm_tp_mlp *m, const int32_t *labels, int rows, float inv_batch, float *loss_sum);
/* The loss of rows [off, off + rows) (labels from row 0 of the batch). */
void rm_tp_mlp_loss_rows(rm_tp_mlp *m, const int32_t *labels, int off, int rows, float inv_batch,
                         float *loss_sum);
/* Backward from the logits' gradient (after loss): grads overwritten with this rank's pieces. */
int rm_tp_mlp_backward(rm_tp_mlp *m, const float *x, int rows, rm_err *err);
/* A stage's backward of rows [off, off + rows): dy the gradient of its output rows (overwritten),
 * x its input rows; the pieces' gradients written (accumulate: added); unless dx is NULL the input
 * gradient rows into dx (whole: summed over the group). bwd_floats grows by what went through ar. */
int rm_tp_mlp_backward_rows(rm_tp_mlp *m, const float *x, int off, int rows, float *dy, float *dx,
                            bool accumulate, rm_err *err);
#endif
