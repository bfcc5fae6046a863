/* c10d_store.h — where a torchrun job's rendezvous lives (docs/torchrun.md): the rule that keeps
 * its c10d store pod "<job>-c10d" (operator/kube/builders.h, rm_kube_c10d_pod), a pure function
 * tested as a table (tests/unit/test_torchrun.c).
 *
 * The store is torch's own TCPStore in a pod of its own, never in a worker: torch's c10d backend
 * lets the agent whose address matches the endpoint host the store, and a store on worker 0 dies
 * with worker 0, taking the rendezvous of every survivor with it. Rules: a torchrun job that is
 * neither finished nor suspended has the store pod; one that ended is deleted and created again
 * (an empty store at the same address: the agents' next rendezvous starts over); a finished,
 * suspended or non-torchrun job has none (resume starts a fresh store). Worker pods are created
 * only while the store pod is Ready (its name resolves and it accepts connections: torch's store
 * client does not retry an unresolvable name).
 *
 * Ownership: plain values; the job is borrowed. */
#ifndef RM_OPERATOR_C10D_STORE_H
#define RM_OPERATOR_C10D_STORE_H
#include <stdbool.h>
#include "common/trainingjob.h"

typedef struct rm_c10d_observed {
    bool exists;      /* the pod is there (any phase) */
    bool ended;       /* Failed or Succeeded: needs replacing */
    bool terminating; /* deletion requested */
    bool ready;       /* Running and its readiness probe passes */
} rm_c10d_observed;

typedef enum {
    RM_C10D_KEEP = 0, /* nothing to do */
    RM_C10D_CREATE,
    RM_C10D_DELETE, /* not wanted, or ended (replaced on a later pass once gone) */
} rm_c10d_act;

typedef struct rm_c10d_decision {
    rm_c10d_act act;
    bool hold_workers; /* the store is not Ready: create no worker pod this pass */
} rm_c10d_decision;

/* torchrun: the job's template runs torchrun (rm_launch_runs_torchrun). job->status is the status
 * this pass computed (its phase decides "finished"). */
rm_c10d_decision rm_c10d_store_decide(const rm_tj *job, bool torchrun, rm_c10d_observed o);
#endif
