/* schedule.c — the linear-scaling + warmup + decay rule; see schedule.h. */
#include "worker/optim/schedule.h"

#include <math.h>

#include "worker/optim/optim.h"

void rm_lr_sched_from_spec(rm_lr_sched *s, const rm_training_spec *t)
{
    s->base_lr = t->optimizer.lr;
    s->warmup_epochs = t->warmup_epochs > 0 ? t->warmup_epochs : 0;
    s->epochs = t->epochs;
    s->type = t->schedule;
    s->gamma = t->step_gamma > 0 ? t->step_gamma : 0.1;
    s->step_every = t->step_every_epochs > 0 ? t->step_every_epochs : 3;
    s->warmup_steps = t->warmup_steps > 0 ? t->warmup_steps : 0;
    s->max_steps = t->max_steps > 0 ? t->max_steps : 0;
    s->scaled = rm_optim_lr_scaled(t->optimizer.type);
}

double rm_lr_scaled(const rm_lr_sched *s, int global_batch)
{
    return s->scaled ? s->base_lr * (double)global_batch / RM_LR_REFERENCE_BATCH : s->base_lr;
}

/* The decay after warmup at progress p in [0, 1] of the decay span, or at epoch e (step). */
static double decayed(const rm_lr_sched *s, double peak, double p, double e)
{
    switch (s->type) {
    case RM_SCHED_COSINE:
        if (p > 1)
            p = 1;
        if (p < 0)
            p = 0;
        return peak * 0.5 * (1.0 + cos(M_PI * p));
    case RM_SCHED_STEP:
        return peak * pow(s->gamma, floor(e / s->step_every));
    case RM_SCHED_CONSTANT:
        break;
    }
    return peak;
}

double rm_lr_at(const rm_lr_sched *s, double e, int global_batch)
{
    double peak = rm_lr_scaled(s, global_batch);
    if (e < 0)
        e = 0;
    if (s->warmup_epochs > 0 && e < s->warmup_epochs)
        return s->base_lr + (peak - s->base_lr) * (e / s->warmup_epochs);
    double span = (double)s->epochs - s->warmup_epochs;
    return decayed(s, peak, span > 0 ? (e - s->warmup_epochs) / span : 1.0, e);
}

bool rm_lr_step_based(const rm_lr_sched *s, int64_t spe)
{
    if (spe < 1)
        return false;
    return s->warmup_steps > 0 || !s->scaled || (s->max_steps > 0 && s->max_steps < (int64_t)s->epochs * spe);
}

double rm_lr_at_step(const rm_lr_sched *s, double e, int64_t step, int64_t spe, int global_batch)
{
    if (!rm_lr_step_based(s, spe))
        return rm_lr_at(s, e, global_batch);
    double peak = rm_lr_scaled(s, global_batch);
    if (e < 0)
        e = 0;
    if (step < 0)
        step = 0;
    double total = (double)s->epochs * (double)spe;
    if (s->max_steps > 0 && (double)s->max_steps < total)
        total = (double)s->max_steps;
    double warm = s->warmup_steps > 0 ? (double)s->warmup_steps : floor(s->warmup_epochs * (double)spe + 0.5);
    double x = (double)step;
    if (x < warm)
        return s->scaled ? s->base_lr + (peak - s->base_lr) * (x / warm) : peak * (x + 1) / (warm + 1);
    double span = total - warm;
    return decayed(s, peak, span > 0 ? (x - warm) / span : 1.0, e);
}
