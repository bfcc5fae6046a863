/* schedule.h — the learning-rate rule for large-batch synchronous SGD (Goyal et al., "Accurate,
 * Large Minibatch SGD"): the configured lr is per 64-sample batch and is scaled linearly by
 * global_batch / 64; a linear warmup goes from the unscaled lr to the scaled one over
 * warmupEpochs; after it, cosine decay to 0 at the last epoch, step decay (x gamma every
 * stepEveryEpochs), or constant.
 *
 * Design: the position is the fractional data epoch (epoch + samples consumed / samples per
 * epoch), not a step count, so when the world size changes on an elastic restart the schedule
 * continues where the data is and the scaling follows the new global batch. Pure functions. */
#ifndef RM_WORKER_SCHEDULE_H
#define RM_WORKER_SCHEDULE_H
#include "common/trainingjob.h"

typedef struct rm_lr_sched {
    double base_lr; /* per 64-sample batch */
    double warmup_epochs;
    int epochs;
    rm_schedule type;
    double gamma;   /* step */
    int step_every; /* step: epochs */
} rm_lr_sched;

#define RM_LR_REFERENCE_BATCH 64

void rm_lr_sched_from_spec(rm_lr_sched *s, const rm_training_spec *t);
/* Peak lr for a global batch: base * global / 64. */
double rm_lr_scaled(const rm_lr_sched *s, int global_batch);
/* lr at fractional epoch `epoch_pos` (>= 0) for a global batch. */
double rm_lr_at(const rm_lr_sched *s, double epoch_pos, int global_batch);
#endif
