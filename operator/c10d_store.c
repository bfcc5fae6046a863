/* c10d_store.c — a torchrun job's c10d store pod rule (see c10d_store.h, docs/torchrun.md). */
#include "operator/c10d_store.h"

rm_c10d_decision rm_c10d_store_decide(const rm_tj *job, bool torchrun, rm_c10d_observed o)
{
    const rm_tj_status *st = &job->status;
    bool want = torchrun && st->phase != RM_PHASE_SUCCEEDED && st->phase != RM_PHASE_FAILED &&
                !job->spec.run.suspend && st->phase != RM_PHASE_SUSPENDED;
    rm_c10d_decision d = {.act = RM_C10D_KEEP,
                          .hold_workers = torchrun && !(o.exists && o.ready && !o.ended)};
    if (o.exists && !o.terminating && (!want || o.ended))
        d.act = RM_C10D_DELETE;
    else if (want && !o.exists)
        d.act = RM_C10D_CREATE;
    return d;
}
