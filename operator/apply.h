/* apply.h — what a runtime does with the reconcile core's output, written once.
 *
 * A runtime (operator/local.c: processes; operator/kube/sync.c: pods) is a table of operations,
 * one per action kind. rm_apply_actions walks the core's actions in order and calls the matching
 * operation; rm_status_transition turns old status -> new status into the counts both runtimes'
 * metrics need. New roles and kinds plug in as new operations and actions, not new switches.
 * The TrainingSweep's actions (common/sweep.h) go the same way: rm_sweep_apply_actions over an
 * rm_sweep_ops table, one for `ringmaster run -f sweep.yaml` (operator/sweep_run.c: child
 * processes) and one for the operator (operator/kube/sweepctl.c: TrainingJobs).
 *
 * Ownership: everything is borrowed for the duration of the call; nothing is kept. */
#ifndef RM_APPLY_H
#define RM_APPLY_H
#include <stdbool.h>
#include <stddef.h>
#include "common/rm.h"
#include "common/sweep.h"
#include "common/trainingjob.h"
#include "operator/reconcile.h"

/* An operation returns RM_OK, RM_APPLY_AGAIN (done, and the world changed so that another
 * reconcile pass should run at once: a slot freed, an epoch moved) or a negative RM_E* code with
 * err filled. A NULL operation means "nothing to do here" (RM_OK). */
#define RM_APPLY_AGAIN 1

typedef struct rm_runtime_ops {
    int (*create_worker)(void *rt, int index, int epoch, rm_err *err);
    int (*delete_worker)(void *rt, int index, bool force, const char *why, rm_err *err);
    int (*restart_group)(void *rt, int from_epoch, rm_err *err);
    int (*set_rdzv)(void *rt, int desired, int min, rm_err *err);
    int (*stop_rdzv)(void *rt, rm_err *err);
    int (*event)(void *rt, bool warning, const char *reason, const char *message, rm_err *err);
    int (*delete_job)(void *rt, rm_err *err);
    /* called for every action that failed (after the others ran on); may be NULL */
    void (*failed)(void *rt, const rm_action *a, int rc, const rm_err *err);
} rm_runtime_ops;

typedef struct rm_apply_result {
    bool again;           /* an operation asked for another pass */
    double requeue_after; /* smallest REQUEUE_AFTER; 0 = none */
    int first_rc;         /* first failing operation's code; RM_OK when none failed */
    rm_err first_err;     /* its details */
    int failures;
} rm_apply_result;

/* Apply n actions in order; a failing action does not stop the later ones (each is independent
 * and idempotent, and the next pass retries what failed). Returns res->first_rc. */
int rm_apply_actions(const rm_runtime_ops *ops, void *rt, const rm_action *acts, size_t n,
                     rm_apply_result *res);

/* A sweep runtime's operations, one per rm_sweep_act_type. Each returns RM_OK or a negative RM_E*
 * code with err filled; a NULL operation means "nothing to do here" (RM_OK). */
typedef struct rm_sweep_ops {
    int (*create_trial)(void *rt, int index, rm_err *err);
    int (*stop_trial)(void *rt, int index, const char *reason, const char *message, rm_err *err);
    /* index -1: about the sweep itself */
    int (*event)(void *rt, int index, bool warning, const char *reason, const char *message, rm_err *err);
} rm_sweep_ops;

/* Apply n sweep actions in order, stopping at the first that fails: its code is returned and err
 * filled. The caller writes the sweep's status only when every action succeeded, and the next
 * pass decides again (creating a trial is idempotent, its name is deterministic). */
int rm_sweep_apply_actions(const rm_sweep_ops *ops, void *rt, const rm_sweep_action *acts, size_t n,
                           rm_err *err);

/* What changed between two statuses of one job, for metrics and logs. */
typedef struct rm_transition {
    bool created;           /* Created became True */
    bool succeeded, failed; /* entered Succeeded / Failed */
    int restarts;           /* restarts added (>= 0) */
    bool phase_changed;
} rm_transition;
void rm_status_transition(const rm_tj_status *old, const rm_tj_status *now, rm_transition *t);
#endif
