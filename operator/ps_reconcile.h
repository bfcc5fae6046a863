/* ps_reconcile.h — the parameter servers' reconcile rules (docs/strategies.md#parameter-servers), a
 * pure function tested as a table (tests/unit/test_ps.c). Both runtimes execute its answer: the local
 * runner as server processes, the operator as <job>-ps-<i> pods (label ringmaster.dev/role: ps).
 *
 * Rules: a parameterServer job that is neither finished nor suspended has exactly
 * spec.parameterServer.replicas servers; one that exited or failed is replaced (it restores its
 * shard from its own checkpoint; workers retry meanwhile); servers beyond the count, and every
 * server of a finished, suspended or non-PS job, are deleted. Servers never wait for workers and
 * workers never restart with a server: a server's failure is not a group restart. The local runner
 * executes a replacement as a rollback of every server to one checkpointed version
 * (operator/ps_ckpt.h, docs/strategies.md#failure-semantics); under the operator the servers agree
 * on that version among themselves (worker/ps/ps_core.h rm_ps_agree_decide).
 *
 * Ownership: plain values. */
#ifndef RM_OPERATOR_PS_RECONCILE_H
#define RM_OPERATOR_PS_RECONCILE_H
#include <stdbool.h>
#include "common/trainingjob.h"

/* What a runtime sees of server i. */
typedef struct rm_ps_observed {
    bool exists;   /* a process / pod is there (running, starting or exited) */
    bool finished; /* it exited or the pod failed/succeeded: needs replacing */
    bool ready;    /* serving */
} rm_ps_observed;

typedef enum { RM_PS_ACT_CREATE = 1, RM_PS_ACT_DELETE } rm_ps_act_kind;
typedef struct rm_ps_action {
    rm_ps_act_kind kind;
    int index;
    bool replace; /* CREATE of a server that existed: delete what is left of it first */
} rm_ps_action;

/* Actions for the observed servers obs[0..nobs) (index = position). Returns the number written
 * (at most cap); *ready gets the ready servers for status.parameterServers.readyReplicas. */
int rm_ps_reconcile(const rm_tj *job, const rm_ps_observed *obs, int nobs, rm_ps_action *out, int cap,
                    int *ready);
#endif
