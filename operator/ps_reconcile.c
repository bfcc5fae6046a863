/* ps_reconcile.c — the parameter servers' reconcile rules (see ps_reconcile.h). */
#include "operator/ps_reconcile.h"

int rm_ps_reconcile(const rm_tj *job, const rm_ps_observed *obs, int nobs, rm_ps_action *out, int cap,
                    int *ready)
{
    const rm_tj_status *st = &job->status;
    bool want = job->spec.strategy == RM_STRATEGY_PS && st->phase != RM_PHASE_SUCCEEDED &&
                st->phase != RM_PHASE_FAILED && !job->spec.run.suspend && st->phase != RM_PHASE_SUSPENDED;
    int S = want ? job->spec.ps.replicas : 0;
    int n = 0, r = 0;
    int top = nobs > S ? nobs : S;
    for (int i = 0; i < top && n < cap; i++) {
        rm_ps_observed o = i < nobs ? obs[i] : (rm_ps_observed){0};
        if (i >= S) {
            if (o.exists)
                out[n++] = (rm_ps_action){RM_PS_ACT_DELETE, i, false};
            continue;
        }
        if (!o.exists || o.finished)
            out[n++] = (rm_ps_action){RM_PS_ACT_CREATE, i, o.exists};
        else if (o.ready)
            r++;
    }
    if (ready)
        *ready = r;
    return n;
}
