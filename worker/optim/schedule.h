/* schedule.h — the learning-rate rule. For sgd, adam and adagrad it is the rule for large-batch
 * synchronous SGD (Goyal et al., "Accurate, Large Minibatch SGD"): the configured lr is per
 * 64-sample batch and is scaled linearly by global_batch / 64; a linear warmup goes from the
 * unscaled lr to the scaled one over warmupEpochs; after it, cosine decay to 0 at the last epoch,
 * step decay (x gamma every stepEveryEpochs), or constant. adamw, lamb and lars take the lr as
 * given (the peak for the global batch, no scaling: the common practice for Adam-type optimizers
 * and for LAMB/LARS, whose trust ratios normalise the step) and warm up from zero as nanoGPT does,
 * lr * (step + 1) / (warmup + 1) (docs/strategies.md, "The learning-rate schedule").
 *
 * Design: the position is the fractional data epoch (epoch + samples consumed / samples per
 * epoch), not a step count, so when the world size changes on an elastic restart the schedule
 * continues where the data is and the scaling follows the new global batch. The step-based form
 * (rm_lr_at_step) takes over when the job is measured in steps: warmupSteps is set, maxSteps ends
 * the job before its epochs do (the cosine then spans maxSteps), or the optimizer's lr is not
 * scaled. Pure functions. */
#ifndef RM_WORKER_SCHEDULE_H
#define RM_WORKER_SCHEDULE_H
#include <stdbool.h>
#include <stdint.h>
#include "common/trainingjob.h"

typedef struct rm_lr_sched {
    double base_lr; /* per 64-sample batch when scaled; else the peak lr */
    double warmup_epochs;
    int epochs;
    rm_schedule type;
    double gamma;      /* step */
    int step_every;    /* step: epochs */
    int warmup_steps;  /* warmupSteps: replaces warmupEpochs when > 0 */
    int64_t max_steps; /* maxSteps; 0 = none */
    bool scaled;       /* linear scaling by global batch / 64 */
} rm_lr_sched;

#define RM_LR_REFERENCE_BATCH 64

void rm_lr_sched_from_spec(rm_lr_sched *s, const rm_training_spec *t);
/* Peak lr for a global batch: base * global / 64 when scaled, else base. */
double rm_lr_scaled(const rm_lr_sched *s, int global_batch);
/* lr at fractional epoch `epoch_pos` (>= 0) for a global batch (the epoch form). */
double rm_lr_at(const rm_lr_sched *s, double epoch_pos, int global_batch);
/* lr of the step about to run: `step` optimizer steps done, at fractional epoch epoch_pos, with
 * steps_per_epoch optimizer steps in an epoch at this global batch. The epoch form when no step
 * budget applies (see above), else: warmup over warmupSteps (or warmupEpochs x steps_per_epoch),
 * then the decay over the steps left until min(maxSteps, epochs x steps_per_epoch). */
double rm_lr_at_step(const rm_lr_sched *s, double epoch_pos, int64_t step, int64_t steps_per_epoch,
                     int global_batch);
/* Whether rm_lr_at_step uses the step form for this many steps per epoch. */
bool rm_lr_step_based(const rm_lr_sched *s, int64_t steps_per_epoch);
#endif
