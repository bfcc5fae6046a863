/* optim.h — optimizers on the flat fp32 parameter buffer: SGD with momentum, Adam, Adagrad
 * (the optimizer DistBelief's Downpour SGD used), all with L2 weight decay (PyTorch semantics).
 *
 * Design: state buffers have the parameter buffer's layout (worker/model/model.h), so one kernel call
 * updates the whole model and a checkpoint stores the state as flat arrays. The learning rate is
 * given per step by the caller (worker/optim/schedule.h), so the optimizer holds no schedule.
 *
 * Ownership: rm_optim owns its state buffers (kernels memory; rm_optim_free, NULL-safe). The
 * kernels table is borrowed. params/grads passed to rm_optim_step are borrowed. */
#ifndef RM_WORKER_OPTIM_H
#define RM_WORKER_OPTIM_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "kernels/kernels.h"

typedef struct rm_optim {
    const rm_kernels *k;
    rm_optimizer_spec spec;
    size_t n;        /* floats */
    int nstate;      /* state buffers in use: sgd 1, adam 2, adagrad 1 */
    float *state[2]; /* sgd: momentum; adam: m, v; adagrad: sum of squares */
    int64_t t;       /* updates applied (Adam's bias-correction step) */
} rm_optim;

int rm_optim_init(rm_optim *o, const rm_kernels *k, const rm_optimizer_spec *spec, size_t n, rm_err *err);
void rm_optim_free(rm_optim *o);
/* One update of params with grads at learning rate lr. Allocates nothing. */
void rm_optim_step(rm_optim *o, float *params, const float *grads, float lr);
/* The same update split into pieces (sharded stages: each rank updates only its shard, with its
 * shard of the state): rm_optim_tick once per step, then rm_optim_update_range for each piece of n
 * elements with that piece's state buffers (state[i] for i < nstate). Element-wise, so the pieces
 * together give exactly rm_optim_step's result. */
void rm_optim_tick(rm_optim *o);
void rm_optim_update_range(const rm_optim *o, float *params, const float *grads, float *const *state,
                           size_t n, float lr);
const char *rm_optim_name(rm_opt_type t); /* "sgd" | "adam" | "adagrad" */
/* State buffers an optimizer of this type keeps (what rm_optim_init sets as nstate). */
static inline int rm_optim_nstate(rm_opt_type t)
{
    return t == RM_OPT_ADAM ? 2 : 1;
}
#endif
