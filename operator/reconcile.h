/* reconcile.h — the reconcile core shared by `ringmaster run` (local runtime, operator/local.c) and
 * `ringmaster operator` (kube runtime, operator/kube/): a PURE function
 *
 *     (TrainingJob spec + status, observed workers, rendezvous snapshot, now) -> (actions, new status)
 *
 * Design: no I/O, no clock reads, no globals, one allocation (its working state, freed before it
 * returns: per-index views too large for a stack at RM_RDZV_MAX_WORLD). Everything it knows comes in through
 * rm_reconcile_in; everything it decides goes out through rm_reconcile_out (the new status by value
 * and a caller-owned action array). The runtimes execute the actions in order and feed what they
 * then observe back in on the next call. Because every decision is derived from the observations
 * and the persisted status, calling it again with the same input yields the same actions and the
 * same status (idempotent): the operator may call it as often as it likes, and an operator that
 * crashed and restarted acts as if it never stopped.
 *
 * Ownership: rm_reconcile borrows everything in `in` for the duration of the call and keeps no
 * pointer. `out->actions` is a caller-owned array of `out->cap` entries (RM_RECONCILE_ACTIONS(n)
 * is always enough for n observed workers and any spec.replicas/maxReplicas up to RM_RDZV_MAX_WORLD);
 * out->status is written by value. Returns RM_OK, RM_EINVAL (NULL job / NULL out), RM_ENOMEM, RM_ETOOBIG
 * (action array too small: out is then incomplete and must not be executed).
 *
 * ======================================= THE RULES =========================================
 * Notation: D = desired workers = clamp(spec.replicas, minReplicas, maxReplicas);
 * E = status.epoch (the rendezvous epoch the core last acted on); R = in->rdzv (may be NULL).
 * Worker "index" i is the replica index (pod <job>-worker-<i>, rendezvous workerId "i").
 *
 * R0 Validation. rm_tj_validate(job) fails -> phase Failed, condition Failed=True
 *    reason "InvalidSpec", message = the validation message (it names the field); Warning event;
 *    then the terminal rules (R9) apply. Nothing is created for an invalid job.
 * R1 Created. First call (no Created condition): Created=True reason "TrainingJobCreated",
 *    message "TrainingJob NS/NAME is created.", phase Pending. Every condition written carries
 *    observedGeneration = metadata.generation; status.observedGeneration = generation on every call.
 *    lastTransitionTime only moves when a condition's status flips (rm_tj_set_condition).
 * R2 Rendezvous registration. When in->rdzv_desired != the desired world (or min differs) the core
 *    emits SET_RDZV(desired, min) — the first call always does (rdzv_desired 0). While the job is
 *    elastic-shrunk (R7) desired is the shrunk size.
 * R3 Creation. While active (not suspended, not finished, not waiting for back-off), every index
 *    0..D-1 that is Missing gets CREATE_WORKER(i, epoch) with epoch = the epoch the round will
 *    have. startTime is set on the first creation (and reset on resume, R8). Indices >= D that exist
 *    get DELETE_WORKER (scale-down) and a resize (R7).
 * R4 Running. When R is closed at epoch >= E with world_size >= minReplicas and no failure is
 *    pending: phase Running, Running=True reason "TrainingJobRunning", Restarting=False; Normal event
 *    "TrainingJobRunning" on the transition. Before the first closed round: phase Pending. A
 *    Running job stays Running while a resize or a worker-initiated epoch re-forms the round (only
 *    a detected failure or the terminal rules change it). opts.no_rendezvous (a foreign image):
 *    Running = every desired worker Running; no progress deadline.
 *    status.replicas = R.world_size, readyReplicas = observed workers Running && ready,
 *    status.progress = rank 0's last report (step, trainEpoch, loss, samples/s, checkpoint step,
 *    allreduce GB/s).
 * R5 Failure detection (a "new failure"; each is acted on exactly once):
 *    a) a worker whose phase is Failed (non-zero exit, signal, OOMKilled, Evicted, ...) and that is
 *       not already being deleted, with finished_at > status.last_restart_time; a Failed worker
 *       with finished_at <= last_restart_time belongs to a disruption already handled: it is only
 *       deleted and replaced, not counted again;
 *    b) a worker that is Missing (gone without us deleting it) while it is a member of R's current
 *       closed round at epoch E (after RESTART_GROUP the round is open, so this fires once);
 *    c) progress deadline (spec.restartPolicy.progressDeadlineSeconds > 0): R closed at epoch E,
 *       not done, and a member's last progress (last_progress, or closed_at if it never progressed)
 *       is older than the deadline. Stale members that are also not ready (healthz failing) are the
 *       culprits; when every stale member is ready, all stale members are;
 *    d) R's round is open, at least one worker joined it, and a Running worker has not: when its
 *       last sign of life (max of created_at, its last report/progress, last_restart_time) is
 *       older than the deadline it is hung outside the group (survivors whose collectives timed
 *       out re-joined; it did not).
 *    e) a Failed worker whose exit code is RM_WORKER_EXIT_DATA_ERROR (common/worker_env.h: it
 *       could not fetch or read its data) with finished_at > last_restart_time: phase Failed
 *       reason "DataError", message = its termination message (R9) — no restart is spent on it.
 *    A worker that exits 0 is Succeeded, not failed (R6).
 * R6 Success. R.have_result, or rank 0's member reports done, or the worker at index 0 (rank 0
 *    of the full group) is Succeeded -> phase Succeeded, Succeeded=True reason "Succeeded" message
 *    "TrainingJob NS/NAME successfully completed.", Running=False, completionTime, status.result
 *    copied from R; STOP_RDZV; Normal event; cleanup per R9. Success wins over failures seen in
 *    the same call (workers exiting after the result was recorded are not failures).
 * R7 Group restart on a new failure: if status.restarts >= maxRestarts -> Failed (R9) reason
 *    "BackoffLimitExceeded", message "TrainingJob NS/NAME has failed because it has reached the
 *    specified restart limit (N)". Otherwise wait for the back-off: the k-th restart (k = restarts+1)
 *    may not happen before last_restart_time + min(300, backoffSeconds * 2^(k-2)) (k >= 2; the first
 *    is immediate) — meanwhile phase Restarting, Restarting=True reason "BackOff", nothing is deleted
 *    (a Failed worker stays observed so the failure is not forgotten) or created, REQUEUE_AFTER the
 *    remaining time. Then, in one call:
 *    restarts++, last_restart_time = now, RESTART_GROUP(from E) when a culprit is a member of R's
 *    current round (the runtime bumps the rendezvous epoch; idempotent per epoch; a culprit outside
 *    the current round needs no new epoch), E = E+1, DELETE_WORKER of ONLY the culprit indices (force when
 *    its node is not ready), CREATE_WORKER of the culprit indices already Missing (the rest are
 *    created by R3 once observed Missing); survivors are left alone and re-join in place. Phase
 *    Restarting, Running=False, Restarting=True reason "WorkerFailed" (R5a/b, message names the
 *    index and exit code / reason) or "ProgressDeadlineExceeded" (R5c/d); Warning event with the same
 *    reason. A rendezvous epoch moved by the workers themselves (R.epoch > E, survivors saw the
 *    group break) is adopted (E = R.epoch) and the restart is counted when its cause (R5) is seen;
 *    RESTART_GROUP(from old E) is then a no-op at the rendezvous.
 *    Elastic (minReplicas < D): an index that cannot start — Pending longer than
 *    opts.pending_timeout_s, or Missing with create_failures >= opts.create_failure_threshold —
 *    is left out: SET_RDZV(desired = startable count, min) when that count is >= minReplicas
 *    (Warning event "ScaledDown"); the job keeps training with fewer workers. When such an index is
 *    Running again (or creation stops failing) and the round is closed below D: SET_RDZV(D, min)
 *    and RESTART_GROUP (a resize: not counted in restarts; Normal event "ScaledUp").
 *    A spec.replicas change (scale subresource) is a resize too.
 * R7t torchrun (opts.torchrun, docs/torchrun.md): torchrun's agents re-form the group themselves
 *    at the c10d store, with any count between minReplicas and maxReplicas. A new failure (R5a)
 *    that leaves at least minReplicas other workers Running is therefore not a group restart: the
 *    culprits are deleted and recreated (within maxRestarts and its back-off, as R7; restarts
 *    counts the replacements), the phase stays as it is (Running stays Running), and a Warning event
 *    "WorkerLost" names the pod and the surviving count torchrun re-forms with; a Running job's
 *    Running condition gets reason "WorkerLost" with the same message until every desired worker
 *    runs again, then "TrainingJobRunning" with a Normal event "WorkerReplaced". Fewer survivors
 *    than minReplicas: R7 as for any job (the agents wait at the store for the replacements).
 * R8 activeDeadlineSeconds: now - startTime > deadline -> Failed reason "DeadlineExceeded", message
 *    "TrainingJob NS/NAME was active longer than specified deadline" (R9). Otherwise REQUEUE_AFTER the
 *    remaining time (the smallest pending timer wins).
 *    suspend: DELETE_WORKER every worker (not force; checkpoints are kept), phase Suspended,
 *    Suspended=True reason "Suspended", Running=False; Normal event. Resume (suspend false while
 *    Suspended=True): Suspended=False reason "Resumed", startTime reset to now, RESTART_GROUP(from E)
 *    (not counted) so the recreated workers form a fresh round, then R3 recreates every index.
 * R9 Terminal (Succeeded or Failed): STOP_RDZV (idempotent); cleanup per cleanPodPolicy: All ->
 *    DELETE_WORKER every worker not already terminating, Running -> only Pending/Running ones,
 *    None -> nothing; workers stuck Terminating on a NotReady node for longer than
 *    opts.force_delete_after_s are force-deleted in every phase. Failed=True (Running=False,
 *    Restarting=False) with completionTime on the transition; Warning event. After
 *    ttlSecondsAfterFinished (>= 0) from completionTime: DELETE_JOB, else REQUEUE_AFTER the rest.
 *    Nothing is ever created for a terminal job.
 * R0b Invalid update. A job that already started (startTime set) whose spec stops validating is
 *    never failed for it: with in->invalid_update the runtime passes the last valid spec and the
 *    job runs on at it; without one nothing is created, deleted, restarted or failed. Either way
 *    condition InvalidSpec=True reason "InvalidUpdate" (message names the field) and a Warning
 *    event "InvalidSpec" on the transition; a valid spec again flips it False reason "Valid".
 *    The kube runtime also passes an edit of a field that is immutable once the job started
 *    (operator/spec_guard.h) this way: the spec with the running values, and a message naming
 *    the fields.
 * R10 Recovery loop. status.stepHighWater keeps the highest step a member of the current round
 *    reported and the rendezvous epoch it was first reached at. When R.epoch is
 *    opts.recovery_loop_epochs (20) or more past that epoch — the group keeps re-forming without
 *    getting past the step (a restore that desyncs ranks, a global batch larger than the data)
 *    — phase Failed reason "RecoveryLoop" (R9).
 * R11 Checkpoint failures. A member of the current round reporting checkpoint_failures > 0, or a
 *    parameter server reporting them with its registration (rdzv ps_checkpoint_*; the message
 *    names "parameter server I"): condition CheckpointFailing=True reason "CheckpointWriteFailed" (message: the worker, the
 *    count, its error) and a Warning event "CheckpointFailing" on the transition; when every
 *    reporting member writes again, False reason "CheckpointWritten". True for longer than
 *    progressDeadlineSeconds (> 0) -> Failed reason "CheckpointFailing" (R9).
 * R13 Data fetch (before every rule). A rendezvous snapshot with data_bytes or data_total set (the
 *    fetch's report, docs/models-and-data.md "Fetch progress") and a fetched spec.training.data.uri:
 *    status.data = {uri, bytes, totalBytes}; kept while no report is there.
 * R12 Blocked (docs/trainingjob-api.md, "Why is my job stuck"). A Pending, not terminating worker
 *    with a waiting cause (rm_observed_worker.waiting: unschedulable, image pull, missing
 *    configuration): condition Blocked=True, reason Unschedulable | ImagePullFailed |
 *    ContainerConfigError, message "worker I cannot start[ (and N more)]: <cause>" for the lowest
 *    such index, and a Warning event of that reason when the cause is new; else in.queued (Kueue has
 *    not admitted the job's Workload, the gang scheduler its PodGroup): reason QueuedByKueue |
 *    PodGroupPending with its message, and a Normal event. None left: False reason "PodsStarting".
 *    Checked before R3 (a job Kueue holds is suspended). Never ends the job.
 * Events are emitted only on transitions, so repeating a call does not repeat them.
 * managedBy is not looked at here: the operator skips jobs another controller manages.
 * ============================================================================================ */
#ifndef RM_RECONCILE_H
#define RM_RECONCILE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rdzv.h"
#include "common/rm.h"
#include "common/trainingjob.h"

typedef enum {
    RM_WORKER_MISSING = 0, /* no such worker (only listed to carry create_failures) */
    RM_WORKER_PENDING,     /* created, not started (pod Pending / process being exec'd) */
    RM_WORKER_RUNNING,
    RM_WORKER_SUCCEEDED,   /* exited 0 */
    RM_WORKER_FAILED,      /* exited non-zero, killed by a signal, evicted, OOMKilled */
    RM_WORKER_TERMINATING, /* deletion requested (deletion_started_at set) */
} rm_worker_phase;

/* One observed worker (pod or local process). Indices absent from the array are Missing. */
typedef struct rm_observed_worker {
    int index;       /* replica index; rendezvous workerId is its decimal string */
    int epoch_label; /* epoch it was created for (pod label) */
    rm_worker_phase phase;
    bool ready;                 /* /healthz (readiness probe) passing */
    int exit_code;              /* Failed/Succeeded: exit code, 128+signal for signals; else 0 */
    char reason[32];            /* "Error", "OOMKilled", "Evicted", "Signal" ...; "" if none */
    char message[256];          /* Failed: the worker's termination message (its last words); "" if none */
    double created_at;          /* unix seconds */
    double finished_at;         /* Failed/Succeeded: when it ended (or was first seen ended) */
    double deletion_started_at; /* 0 unless Terminating */
    bool node_ready;            /* false: its node is NotReady (kube); always true locally */
    int create_failures;        /* consecutive failed creations of this index (capacity hint) */
    /* Pending: why it cannot start — "Unschedulable: <the scheduler's message>", "ErrImagePull: ...",
     * "ImagePullBackOff: ...", "CreateContainerConfigError: <e.g. the missing Secret>" (its own or
     * an init container's); "" when nothing blocks it (kube only) */
    char waiting[200];
} rm_observed_worker;

typedef struct rm_reconcile_opts {
    double pending_timeout_s;     /* elastic: a Pending replacement this old cannot start; 60 */
    int create_failure_threshold; /* elastic: this many failed creations cannot start; 3 */
    double force_delete_after_s;  /* Terminating on a NotReady node this long -> force; 30 */
    double backoff_cap_s;         /* 300 */
    bool no_rendezvous;           /* the template runs a foreign image (torchrun) that never joins
                                     * our rendezvous: Running = all D workers Running; no progress
                                     * deadline. false */
    bool torchrun;                /* R7t: the template runs torchrun (elastic agents at the job's c10d
                                     * store); meaningful with no_rendezvous. false */
    int recovery_loop_epochs;     /* R10: re-formations without a step past the high-water mark
                                     * before RecoveryLoop; RM_RECOVERY_LOOP_EPOCHS; 0 = off */
} rm_reconcile_opts;
#define RM_RECOVERY_LOOP_EPOCHS 20
void rm_reconcile_opts_default(rm_reconcile_opts *o);

typedef enum {
    RM_ACT_CREATE_WORKER = 0, /* index, epoch */
    RM_ACT_DELETE_WORKER,     /* index, force; reason says why ("failed", "cleanup", ...) */
    RM_ACT_RESTART_GROUP,     /* epoch = from_epoch: rm_rdzv_restart(job, from_epoch) */
    RM_ACT_SET_RDZV,          /* desired, min: rm_rdzv_job_set(...) */
    RM_ACT_STOP_RDZV,         /* rm_rdzv_job_stop */
    RM_ACT_EVENT,             /* warning, reason, message */
    RM_ACT_DELETE_JOB,        /* ttlSecondsAfterFinished passed */
    RM_ACT_REQUEUE_AFTER,     /* seconds: call again by then even if nothing changes */
} rm_action_type;

typedef struct rm_action {
    rm_action_type type;
    int index;         /* CREATE/DELETE */
    int epoch;         /* CREATE: epoch label; RESTART_GROUP: from_epoch */
    bool force;        /* DELETE: grace 0 */
    int desired, min;  /* SET_RDZV */
    bool warning;      /* EVENT: Warning (true) or Normal */
    char reason[64];   /* EVENT reason; DELETE why */
    char message[256]; /* EVENT message */
    double seconds;    /* REQUEUE_AFTER */
} rm_action;

/* Enough actions for n observed workers whatever the spec says. */
#define RM_RECONCILE_ACTIONS(n) RM_RECONCILE_ACTIONS_FOR(n, RM_RDZV_MAX_WORLD)
/* Enough actions for n observed workers and a spec asking for at most maxw (replicas,
 * maxReplicas): an action list sized for RM_RDZV_MAX_WORLD is ~12 MB, per reconcile. Too few
 * fails the reconcile with RM_ETOOBIG (push), never writes past the array. */
#define RM_RECONCILE_ACTIONS_FOR(n, maxw) (2 * (size_t)(n) + 2 * (size_t)(maxw) + 16)

typedef struct rm_reconcile_in {
    const rm_tj *job;                  /* metadata + spec + CURRENT status (borrowed) */
    const rm_observed_worker *workers; /* nworkers entries, any order */
    size_t nworkers;
    const rm_rdzv_state *rdzv;     /* snapshot; NULL when the job is not registered yet */
    int rdzv_desired, rdzv_min;    /* what the runtime last applied with SET_RDZV (0 = never) */
    double now;                    /* unix seconds */
    const rm_reconcile_opts *opts; /* NULL = defaults */
    const char *invalid_update;    /* R0b: the spec as written failed validation with this
                                         * message and job carries the last valid spec instead;
                                         * NULL = job's spec is the one written */
    const char *queued;            /* R12: the job waits on its queue, "QueuedByKueue: ..." or
                         * "PodGroupPending: ..."; NULL = it does not */
} rm_reconcile_in;

typedef struct rm_reconcile_out {
    rm_tj_status status; /* the new status (start from a copy of job->status) */
    bool status_changed; /* anything in status differs from job->status (write /status) */
    rm_action *actions;  /* caller-owned, cap entries */
    size_t cap, nactions;
} rm_reconcile_out;

int rm_reconcile(const rm_reconcile_in *in, rm_reconcile_out *out);

/* Field-by-field equality (strings compared as strings, not buffers): what status_changed uses;
 * the operator can use it to skip a /status write. */
bool rm_reconcile_status_equal(const rm_tj_status *a, const rm_tj_status *b);

/* "CreateWorker" etc.; static. */
const char *rm_action_name(rm_action_type t);
/* One line describing an action, for logs and tests ("create 3 epoch=2", "event Warning
 * WorkerFailed ..."); returns buf. */
const char *rm_action_str(const rm_action *a, char *buf, size_t cap);
#endif
