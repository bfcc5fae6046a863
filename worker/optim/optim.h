/* optim.h — optimizers on the flat fp32 parameter buffer: SGD with momentum, Adam, Adagrad
 * (the optimizer DistBelief's Downpour SGD used), all with L2 weight decay (PyTorch semantics);
 * AdamW (decoupled weight decay), LAMB and LARS (layer-wise trust ratios) for transformers and
 * large batches; and the global gradient norm that clipping uses (docs/strategies.md, "Optimizers
 * for transformers").
 *
 * Design: state buffers have the parameter buffer's layout (worker/model/model.h), so one kernel call
 * updates the whole model and a checkpoint stores the state as flat arrays. The learning rate is
 * given per step by the caller (worker/optim/schedule.h), so the optimizer holds no schedule.
 *
 * Tensors. AdamW, LAMB and LARS treat the named tensors of the model differently: a tensor of two or
 * more dimensions (a weight matrix, an embedding) is decayed and, for LAMB/LARS, gets its own trust
 * ratio; a 1-D tensor (a bias, a LayerNorm gain) is neither decayed nor adapted, as common
 * implementations do (the BERT LAMB recipe, LARS in torchlars and TensorFlow). The optimizer holds
 * the tensors as flat ranges with that flag (rm_optim_seg, from rm_model_tensors through
 * rm_optim_tensors_from_model); every update is given the flat offset of the piece it updates, so a
 * ZeRO shard, a pipeline stage or a parameter server's range is intersected with the tensors. SGD,
 * Adam and Adagrad ignore the tensors (their L2 decay applies to every parameter, as before).
 *
 * Trust ratios (LAMB, LARS) need each tensor's norms of w and of its update. The caller updates
 * in phases: rm_optim_tick; rm_optim_norms_begin with the number of slots; rm_optim_norms_range for
 * every piece it updates, each into a slot (a rank's index when ranks hold pieces of one tensor);
 * the sum over the ranks of the slot vector (rm_optim_norms_buf: exact, every slot has one writer
 * and the others add zeros); rm_optim_norms_finish (the slots summed in slot order per tensor, so
 * the result does not depend on who computed which slot); then rm_optim_update_range per piece.
 * For the other optimizers the norm calls do nothing. The global gradient norm (clipping) uses the
 * same slot scheme (rm_optim_gnorm_*).
 *
 * Ownership: rm_optim owns its state buffers, its tensor list and its norm buffers (kernels memory;
 * rm_optim_free, NULL-safe). The kernels table is borrowed. params/grads passed in are borrowed. */
#ifndef RM_WORKER_OPTIM_H
#define RM_WORKER_OPTIM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "kernels/kernels.h"

struct rm_model;

/* One tensor's range of the flat vector (absolute offsets); decay: 2+ dimensions (decayed by
 * adamw/lamb/lars, trust-ratio adapted by lamb/lars). */
typedef struct rm_optim_seg {
    size_t off, len;
    bool decay;
} rm_optim_seg;

/* LARS's trust coefficient eta (You, Gitman, Ginsburg 2017; TensorFlow's default). */
#define RM_LARS_ETA 0.001
/* The epsilon of clipping's scale clip / (norm + eps), as torch.nn.utils.clip_grad_norm_. */
#define RM_CLIP_EPS 1e-6

typedef struct rm_optim {
    const rm_kernels *k;
    rm_optimizer_spec spec;
    size_t n;        /* floats */
    size_t base;     /* flat offset of element 0 of what rm_optim_step updates (a server's range) */
    int nstate;      /* state buffers in use: sgd 1, adam/adamw/lamb 2, adagrad 1, lars 1 */
    float *state[2]; /* sgd/lars: momentum; adam/adamw/lamb: m, v; adagrad: sum of squares */
    int64_t t;       /* updates applied (Adam's bias-correction step) */
    /* tensors, sorted and disjoint; nseg 0: one decayed tensor over everything */
    rm_optim_seg *seg;
    int nseg;
    /* norms (trust ratios, the gradient norm): device floats, slots x per-slot width */
    float *nbuf;
    float *nhost;
    size_t ncap;   /* floats of nbuf / nhost */
    int nslots;    /* of the norms phase in progress */
    double *trust; /* per tensor: the lr multiplier of this step (nseg, or 1 when nseg is 0) */
} rm_optim;

int rm_optim_init(rm_optim *o, const rm_kernels *k, const rm_optimizer_spec *spec, size_t n, rm_err *err);
void rm_optim_free(rm_optim *o);
/* The tensors (copied; sorted by offset, disjoint). Allocates the norm buffers for one slot. */
int rm_optim_set_tensors(rm_optim *o, const rm_optim_seg *seg, int nseg, rm_err *err);
/* The tensors of every unit of m (rm_model_tensors; m may be a plan only: its family's tensors
 * op reads the plan fields), decay = ndim >= 2. */
int rm_optim_tensors_from_model(rm_optim *o, const struct rm_model *m, rm_err *err);
/* Room for norm_slots slots of tensor norms (trust ratios) and gnorm_slots of the gradient norm;
 * allocates when it grows (call it when a round forms, not per step). */
int rm_optim_reserve(rm_optim *o, int norm_slots, int gnorm_slots, rm_err *err);

/* One update of params with grads at learning rate lr, over the optimizer's whole range (base, n):
 * every phase, one slot, no communication. Allocates nothing. */
void rm_optim_step(rm_optim *o, float *params, const float *grads, float lr);
/* The same update split into pieces (sharded stages: each rank updates only its shard, with its
 * shard of the state): rm_optim_tick once per step, for lamb/lars the norms phase below, then
 * rm_optim_update_range for each piece of n elements at flat offset flat_off with that piece's
 * state buffers (state[i] for i < nstate). The pieces together give rm_optim_step's result. */
void rm_optim_tick(rm_optim *o);
void rm_optim_update_range(const rm_optim *o, float *params, const float *grads, float *const *state,
                           size_t n, size_t flat_off, float lr);
/* lamb or lars: the update needs the norms phase. */
bool rm_optim_layerwise(const rm_optim *o);
/* Norms phase (no-ops unless layerwise): zero nslots slots (<= the reserve); then per piece
 * (after rm_optim_tick, before rm_optim_update_range) its partial norms into slot `slot` (LAMB
 * also advances the piece's moments here); the caller sums the slot vector over the ranks that
 * hold pieces (rm_optim_norms_buf: count floats of device memory) and calls finish. */
int rm_optim_norms_begin(rm_optim *o, int nslots, rm_err *err);
void rm_optim_norms_range(rm_optim *o, int slot, const float *params, const float *grads, float *const *state,
                          size_t n, size_t flat_off);
float *rm_optim_norms_buf(const rm_optim *o, size_t *count);
int rm_optim_norms_finish(rm_optim *o, rm_err *err);
/* The trust ratio of tensor i at the last finish (1 for tensors that are not adapted). */
double rm_optim_trust(const rm_optim *o, int i);
/* The trust ratios (hand-computed references in the tests; the formula of finish):
 * LAMB ||w|| / ||r|| and LARS eta ||w|| / (||g|| + wd ||w||), 1 when a norm is 0. */
double rm_lamb_trust(double w_norm, double r_norm);
double rm_lars_trust(double w_norm, double g_norm, double wd);

/* Global gradient norm, slot by slot (clipping): begin zeroes nslots slots (<= the reserve); add
 * accumulates the squares of a piece into a slot; the caller sums the slots over the ranks
 * (rm_optim_gnorm_buf, nslots floats); finish returns the norm: the square root of the slots summed
 * in slot order (double). Uses the norm buffers: not between norms_begin and norms_finish. */
int rm_optim_gnorm_begin(rm_optim *o, int nslots, rm_err *err);
void rm_optim_gnorm_add(rm_optim *o, int slot, const float *grads, size_t n);
float *rm_optim_gnorm_buf(const rm_optim *o, size_t *count);
int rm_optim_gnorm_finish(rm_optim *o, double *norm, rm_err *err);
/* torch.nn.utils.clip_grad_norm_'s factor: min(1, clip / (norm + 1e-6)); 1 when clip <= 0. */
float rm_clip_scale(double norm, double clip);

const char *rm_optim_name(rm_opt_type t); /* "sgd" | "adam" | ... | "adamw" */
/* State buffers an optimizer of this type keeps (what rm_optim_init sets as nstate). */
static inline int rm_optim_nstate(rm_opt_type t)
{
    return t == RM_OPT_ADAM || t == RM_OPT_ADAMW || t == RM_OPT_LAMB ? 2 : 1;
}
/* The configured lr is per 64-sample batch and scaled linearly with the global batch (Goyal et
 * al.) for sgd, adam, adagrad; adamw, lamb and lars take it as given (docs/strategies.md). */
static inline bool rm_optim_lr_scaled(rm_opt_type t)
{
    return t == RM_OPT_SGD || t == RM_OPT_ADAM || t == RM_OPT_ADAGRAD || t == RM_OPT_LBFGS;
}
#endif
