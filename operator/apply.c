/* apply.c — the one executor of reconcile actions (and of sweep actions) over a runtime's
 * operations table (apply.h). */
#include "operator/apply.h"
#include <string.h>

static int call(const rm_runtime_ops *ops, void *rt, const rm_action *a, rm_err *err)
{
    switch (a->type) {
    case RM_ACT_CREATE_WORKER:
        return ops->create_worker ? ops->create_worker(rt, a->index, a->epoch, err) : RM_OK;
    case RM_ACT_DELETE_WORKER:
        return ops->delete_worker ? ops->delete_worker(rt, a->index, a->force, a->reason, err) : RM_OK;
    case RM_ACT_RESTART_GROUP:
        return ops->restart_group ? ops->restart_group(rt, a->epoch, err) : RM_OK;
    case RM_ACT_SET_RDZV:
        return ops->set_rdzv ? ops->set_rdzv(rt, a->desired, a->min, err) : RM_OK;
    case RM_ACT_STOP_RDZV:
        return ops->stop_rdzv ? ops->stop_rdzv(rt, err) : RM_OK;
    case RM_ACT_EVENT:
        return ops->event ? ops->event(rt, a->warning, a->reason, a->message, err) : RM_OK;
    case RM_ACT_DELETE_JOB:
        return ops->delete_job ? ops->delete_job(rt, err) : RM_OK;
    case RM_ACT_REQUEUE_AFTER:
        return RM_OK; /* data for the caller, collected below */
    }
    return rm_errf(err, RM_EINVAL, "unknown action %d", (int)a->type);
}

int rm_apply_actions(const rm_runtime_ops *ops, void *rt, const rm_action *acts, size_t n,
                     rm_apply_result *res)
{
    memset(res, 0, sizeof *res);
    for (size_t i = 0; i < n; i++) {
        const rm_action *a = &acts[i];
        if (a->type == RM_ACT_REQUEUE_AFTER && a->seconds > 0 &&
            (res->requeue_after <= 0 || a->seconds < res->requeue_after))
            res->requeue_after = a->seconds;
        rm_err e = {0};
        int rc = call(ops, rt, a, &e);
        if (rc == RM_APPLY_AGAIN) {
            res->again = true;
            rc = RM_OK;
        }
        if (rc < 0) {
            res->failures++;
            if (res->first_rc == RM_OK) {
                res->first_rc = rc;
                res->first_err = e;
            }
            if (ops->failed)
                ops->failed(rt, a, rc, &e);
        }
    }
    return res->first_rc;
}

static int sweep_call(const rm_sweep_ops *ops, void *rt, const rm_sweep_action *a, rm_err *err)
{
    switch (a->type) {
    case RM_SWEEP_ACT_CREATE:
        return ops->create_trial ? ops->create_trial(rt, a->index, err) : RM_OK;
    case RM_SWEEP_ACT_STOP:
        return ops->stop_trial ? ops->stop_trial(rt, a->index, a->reason, a->message, err) : RM_OK;
    case RM_SWEEP_ACT_EVENT:
        return ops->event ? ops->event(rt, a->index, a->warning, a->reason, a->message, err) : RM_OK;
    }
    return rm_errf(err, RM_EINVAL, "unknown sweep action %d", (int)a->type);
}

int rm_sweep_apply_actions(const rm_sweep_ops *ops, void *rt, const rm_sweep_action *acts, size_t n,
                           rm_err *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = sweep_call(ops, rt, &acts[i], err);
        if (rc)
            return rc;
    }
    return RM_OK;
}

static bool cond_true(const rm_tj_status *s, rm_cond_type t)
{
    return s->conditions[t].present && s->conditions[t].status;
}

void rm_status_transition(const rm_tj_status *old, const rm_tj_status *now, rm_transition *t)
{
    memset(t, 0, sizeof *t);
    t->created = cond_true(now, RM_COND_CREATED) && !cond_true(old, RM_COND_CREATED);
    t->succeeded = now->phase == RM_PHASE_SUCCEEDED && old->phase != RM_PHASE_SUCCEEDED;
    t->failed = now->phase == RM_PHASE_FAILED && old->phase != RM_PHASE_FAILED;
    t->restarts = now->restarts > old->restarts ? now->restarts - old->restarts : 0;
    t->phase_changed = now->phase != old->phase;
}
