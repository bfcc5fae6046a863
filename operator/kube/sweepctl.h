/* sweepctl.h — the TrainingSweep controller of `ringmaster operator`: a second controller in the
 * same binary, with its own informers (trainingsweeps, and the TrainingJobs labelled
 * ringmaster.dev/sweep-name) and its own workqueue and worker thread; leadership is the
 * operator's (it reconciles only while *leading is true).
 *
 * Design: the decisions are the pure sweep core's (common/sweep.h, rm_sweep_reconcile); this file
 * executes them against the API:
 *  - CREATE trial i: POST the TrainingJob "<sweep>-<i>" (the template with trial i's values) with
 *    an ownerReference to the sweep (controller, blockOwnerDeletion) and the labels
 *    ringmaster.dev/sweep-name and /trial-index. Names are deterministic, so a restarted operator
 *    that re-creates an index gets 409 AlreadyExists and adopts the existing trial: an index is
 *    never duplicated. Deleting the sweep deletes its trials through the garbage collector.
 *  - STOP trial j (median early stopping): a merge patch setting spec.runPolicy.suspend: true and
 *    the annotation ringmaster.dev/stopped-by: MedianStop. Suspending is the TrainingJob's own
 *    clean stop (workers deleted gracefully, checkpoints kept, phase Suspended, nothing counted as
 *    a failure), it is visible and reversible (a user who disagrees can resume the trial by setting
 *    suspend: false; the sweep keeps it recorded as Stopped), and the trial object stays for
 *    inspection. The sweep records the trial as Stopped with reason MedianStop.
 *  - status: written through /status when the core says it changed (409: requeued).
 *  - an invalid sweep (a path that is not a TrainingJob field, a value of the wrong type, ...) gets
 *    phase Failed and a Failed condition with reason InvalidSpec naming the field.
 * Metrics: ringmaster_sweep_trials{namespace,name,state}, ringmaster_sweep_best_objective{namespace,name}.
 *
 * Ownership: the controller borrows client, registry and the leading flag (they outlive it). */
#ifndef RM_KUBE_SWEEPCTL_H
#define RM_KUBE_SWEEPCTL_H
#include <stdatomic.h>
#include <stdbool.h>
#include "common/metrics.h"
#include "common/rm.h"
#include "operator/kube/client.h"

typedef struct rm_sweepctl rm_sweepctl;

typedef struct rm_sweepctl_cfg {
    rm_kube_client *client;
    rm_metrics *reg;
    const atomic_bool *leading;
    const char *const *namespaces; /* NULL/0: all namespaces */
    int nns;
    double resync_s; /* a running sweep is reconciled at least this often; 0 = 5 */
} rm_sweepctl_cfg;

int rm_sweepctl_start(const rm_sweepctl_cfg *cfg, rm_sweepctl **out, rm_err *err);
bool rm_sweepctl_synced(rm_sweepctl *s);
/* Queue every cached sweep (on becoming the leader, and the operator's periodic resync). */
void rm_sweepctl_enqueue_all(rm_sweepctl *s);
/* Stops the worker and informers; NULL ok. */
void rm_sweepctl_stop(rm_sweepctl *s);
#endif
