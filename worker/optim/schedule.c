/* schedule.c — the linear-scaling + warmup + decay rule; see schedule.h. */
#include "worker/optim/schedule.h"

#include <math.h>

void rm_lr_sched_from_spec(rm_lr_sched *s, const rm_training_spec *t)
{
    s->base_lr = t->optimizer.lr;
    s->warmup_epochs = t->warmup_epochs > 0 ? t->warmup_epochs : 0;
    s->epochs = t->epochs;
    s->type = t->schedule;
    s->gamma = t->step_gamma > 0 ? t->step_gamma : 0.1;
    s->step_every = t->step_every_epochs > 0 ? t->step_every_epochs : 3;
}

double rm_lr_scaled(const rm_lr_sched *s, int global_batch)
{
    return s->base_lr * (double)global_batch / RM_LR_REFERENCE_BATCH;
}

double rm_lr_at(const rm_lr_sched *s, double e, int global_batch)
{
    double peak = rm_lr_scaled(s, global_batch);
    if (e < 0)
        e = 0;
    if (s->warmup_epochs > 0 && e < s->warmup_epochs)
        return s->base_lr + (peak - s->base_lr) * (e / s->warmup_epochs);
    switch (s->type) {
    case RM_SCHED_COSINE: {
        double span = (double)s->epochs - s->warmup_epochs;
        double p = span > 0 ? (e - s->warmup_epochs) / span : 1.0;
        if (p > 1)
            p = 1;
        return peak * 0.5 * (1.0 + cos(M_PI * p));
    }
    case RM_SCHED_STEP:
        return peak * pow(s->gamma, floor(e / s->step_every));
    case RM_SCHED_CONSTANT:
        break;
    }
    return peak;
}
