/* sweep.h — the TrainingSweep kind (group ringmaster.dev, v1alpha1; fields fixed by
 * docs/strategies.md#trainingsweep): hyperparameter parallelism, many TrainingJobs
 * ("trials") from one manifest, with median early stopping.
 *
 * This module is the pure core shared by `ringmaster validate`, `ringmaster run -f sweep.yaml` and
 * the operator's sweep controller:
 *  - parse + defaults + validation (strict, field-named errors). The trial template is a
 *    TrainingJob spec and is checked by the TrainingJob validator itself (common/trainingjob.c):
 *    every parameter value is set into the template and the result parsed and validated, so a path
 *    that is not a TrainingJob spec field ("spec.parameters[1].path: training.optimizer.lrr is not
 *    a TrainingJob spec field") or a value of the wrong type ("spec.parameters[0].values[2]:
 *    spec.training.optimizer.lr: must be a number") is refused before anything starts;
 *  - expansion: grid (mixed radix over the parameters, the last one varying fastest, the first
 *    maxTrials points) or seeded random (trial i's values depend only on seed, i and the parameter
 *    index — reproducible and independent of the order trials are made in); ranges give `count`
 *    points (grid) or uniform draws (random) on a linear or log scale; a range whose min and max
 *    are both integers gives integers;
 *  - the dotted-path setter (rm_sweep_set_path) that makes a trial spec from the template;
 *  - the median early-stopping rule (rm_sweep_median_stop);
 *  - the sweep reconcile (rm_sweep_reconcile): sweep + observed trials -> actions (create trial i,
 *    stop trial j) + the new status. Rules S1-S6 are written out above rm_sweep_reconcile.
 *
 * Ownership: an rm_sweep owns every pointer inside it (rm_sweep_free). Functions returning cJSON*
 * return owned trees (cJSON_Delete); NULL on ENOMEM. Nothing here does I/O or keeps state. */
#ifndef RM_SWEEP_H
#define RM_SWEEP_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "common/trainingjob.h"

#define RM_SWEEP_KIND "TrainingSweep"
#define RM_SWEEP_PLURAL "trainingsweeps"
#define RM_SWEEP_LABEL "ringmaster.dev/sweep-name" /* on every trial */
#define RM_SWEEP_INDEX_LABEL "ringmaster.dev/trial-index"
#define RM_SWEEP_MAX_PARAMS 8
#define RM_SWEEP_MAX_VALUES 64  /* values (or count) of one parameter */
#define RM_SWEEP_MAX_TRIALS 256 /* maxTrials; also the CRD's maximum */
#define RM_SWEEP_MAX_PARALLEL 64
#define RM_SWEEP_MAX_EPOCHS RM_TJ_MAX_EVALS /* per-trial objective curve kept in status */

typedef enum { RM_SWEEP_GRID = 0, RM_SWEEP_RANDOM } rm_sweep_algo;
/* What a trial is judged by: status.result's value and, per epoch, status.progress.evaluations[]
 * (valLoss: the validation/test split's mean loss, docs/models-and-data.md). */
typedef enum { RM_SWEEP_TEST_ACCURACY = 0, RM_SWEEP_TRAIN_LOSS, RM_SWEEP_VAL_LOSS } rm_sweep_metric;
typedef enum { RM_SWEEP_PENDING = 0, RM_SWEEP_RUNNING, RM_SWEEP_SUCCEEDED, RM_SWEEP_FAILED } rm_sweep_phase;
/* A trial's state in the sweep's table. Pending = not created yet. */
typedef enum {
    RM_TRIAL_PENDING = 0,
    RM_TRIAL_RUNNING,
    RM_TRIAL_SUCCEEDED,
    RM_TRIAL_FAILED,
    RM_TRIAL_STOPPED
} rm_trial_phase;
typedef enum {
    RM_SWEEP_COND_RUNNING = 0,
    RM_SWEEP_COND_SUCCEEDED,
    RM_SWEEP_COND_FAILED,
    RM_SWEEP_COND__COUNT
} rm_sweep_cond_type;

typedef struct rm_sweep_param {
    char *path;    /* "training.optimizer.lr": a dotted path into the trial's spec */
    cJSON *values; /* owned array: the given values, or the grid points of a range */
    bool range;    /* min/max (and scale, count) given instead of values */
    double min, max;
    bool log;     /* scale: log (min > 0) */
    int count;    /* grid points of a range (>= 1; default 3) */
    bool integer; /* min and max both integral: generated values are rounded */
} rm_sweep_param;

typedef struct rm_sweep_spec {
    rm_sweep_algo algorithm; /* default grid */
    uint64_t seed;           /* random: default 1 */
    int max_trials;          /* grid: default (and at most) the grid size; random: required */
    int parallel_trials;     /* default 1, <= RM_SWEEP_MAX_PARALLEL */
    rm_sweep_metric metric;  /* default testAccuracy */
    bool maximize;           /* goal; default maximize for testAccuracy, minimize for the losses */
    bool early_stopping;     /* earlyStopping given */
    int start_epoch;         /* earlyStopping.startEpoch, >= 1, default 2 */
    int min_trials;          /* earlyStopping.minTrials: finished trials the median needs; default 2 */
    rm_sweep_param params[RM_SWEEP_MAX_PARAMS];
    int nparams;
    cJSON *trial_template; /* owned: the TrainingJob spec as written */
    int trials;            /* derived: how many trials the sweep has (set by validation) */
    int epochs;            /* derived: the template's training.epochs (after defaults) */
} rm_sweep_spec;

typedef struct rm_sweep_trial {
    rm_trial_phase phase;
    int epoch;                       /* evaluated epochs seen so far */
    double obj[RM_SWEEP_MAX_EPOCHS]; /* objective after epoch e+1 (NaN = not seen) */
    int nobj;
    bool have_final;
    double final_obj; /* the trial's result (Succeeded), or its last evaluation */
    char reason[32];  /* Stopped: "MedianStop"; Failed: the trial's failure reason */
    char message[160];
} rm_sweep_trial;

typedef struct rm_sweep_cond {
    bool present, status;
    char reason[64];
    char message[200];
    double last_transition;
    int64_t observed_generation;
} rm_sweep_cond;

typedef struct rm_sweep_status {
    rm_sweep_phase phase;
    int64_t observed_generation;
    int total, pending, running, succeeded, failed, stopped;
    int best; /* trial index, -1 none */
    double best_objective;
    rm_sweep_trial *trials; /* owned, `total` entries (NULL when total is 0) */
    rm_sweep_cond conditions[RM_SWEEP_COND__COUNT];
    double start_time, completion_time;
} rm_sweep_status;

typedef struct rm_sweep {
    char *name, *namespace_, *uid, *resource_version;
    int64_t generation;
    rm_sweep_spec spec;
    rm_sweep_status status;
} rm_sweep;

/* Parse a whole TrainingSweep object, apply defaults, and validate (trial template through the
 * TrainingJob validator, every parameter value, every expanded trial). status is read when present
 * (the operator reading its own status back); its trial table is resized to the spec's trials.
 * On error *out is freed/zeroed and err names the field. */
int rm_sweep_from_json(const cJSON *obj, rm_sweep *out, rm_err *err);
void rm_sweep_free(rm_sweep *sw); /* frees members, zeroes; NULL ok */
/* Full object (apiVersion, kind, metadata, spec as parsed, status). */
cJSON *rm_sweep_to_json(const rm_sweep *sw);
cJSON *rm_sweep_status_to_json(const rm_sweep *sw);
/* Allocate (or reset) status.trials for spec.trials entries, all Pending. */
int rm_sweep_status_init(rm_sweep *sw);

/* The values of trial `index` as an object {path: value, ...} (owned). NULL on ENOMEM or a bad
 * index. */
cJSON *rm_sweep_trial_params(const rm_sweep *sw, int index);
/* "<sweep>-<index>" into buf; returns buf. */
const char *rm_sweep_trial_name(const rm_sweep *sw, int index, char *buf, size_t cap);
/* The trial as a TrainingJob object (apiVersion, kind, metadata {name, namespace, labels
 * ringmaster.dev/sweep-name and /trial-index}, spec = template with the trial's values). Owned. */
cJSON *rm_sweep_trial_json(const rm_sweep *sw, int index, rm_err *err);
/* The same, parsed, defaulted and validated into *out (owned by the caller, rm_tj_free). */
int rm_sweep_trial_tj(const rm_sweep *sw, int index, rm_tj *out, rm_err *err);

/* Set `value` (copied) at dotted `path` ("training.optimizer.lr") inside the object `spec`,
 * creating objects on the way. RM_EINVAL when a segment is empty or walks into a non-object. */
int rm_sweep_set_path(cJSON *spec, const char *path, const cJSON *value, rm_err *err);

/* The median rule: `value` is a running trial's objective at some epoch, finished[0..n) the
 * objectives of finished trials at that same epoch. Returns true (stop) when n >= min_trials and
 * value is strictly worse than their median (below it when maximizing, above it when minimizing).
 * *median gets the median (NaN when n == 0). */
bool rm_sweep_median_stop(double value, const double *finished, int n, bool maximize, int min_trials,
                          double *median);

/* What a runtime observed of one trial (its TrainingJob, or its local run). */
typedef struct rm_sweep_obs {
    int index;
    rm_trial_phase phase; /* Running (exists, not finished), Succeeded, Failed, Stopped */
    int nevals;
    rm_tj_eval evals[RM_SWEEP_MAX_EPOCHS]; /* evaluations, ascending step (several per epoch
                                              * with evalEverySteps) */
    bool have_result;
    double test_accuracy, train_loss, val_loss; /* val_loss 0 = not reported */
    char reason[32];                            /* Failed: why */
} rm_sweep_obs;
/* Fill an observation from a trial's TrainingJob (status.phase, status.progress.evaluations,
 * status.result). A Suspended trial counts as Stopped (that is how the operator stops one).
 * Returns the index from the trial's name "<sweep>-<index>", or -1 if it is not one of this
 * sweep's (then *out is untouched). */
int rm_sweep_obs_from_tj(const rm_sweep *sw, const rm_tj *trial, rm_sweep_obs *out);

typedef enum { RM_SWEEP_ACT_CREATE = 0, RM_SWEEP_ACT_STOP, RM_SWEEP_ACT_EVENT } rm_sweep_act_type;
typedef struct rm_sweep_action {
    rm_sweep_act_type type;
    int index;    /* CREATE/STOP */
    bool warning; /* EVENT */
    char reason[32];
    char message[200];
} rm_sweep_action;
#define RM_SWEEP_ACTIONS(total) (2 * (size_t)(total) + 8)

typedef struct rm_sweep_out {
    rm_sweep_status status; /* owned by the caller after the call (rm_sweep_status_free) */
    bool status_changed;
    rm_sweep_action *actions; /* caller-owned, cap entries */
    size_t cap, nactions;
} rm_sweep_out;

/* The sweep reconcile (pure). Starts from a copy of sw->status (a trial table recorded there is
 * kept: a finished trial stays finished even when its TrainingJob is gone).
 *  S1 Observe: a recorded-finished trial never changes; otherwise the observation sets the
 *     phase, the objective curve (testAccuracy, trainLoss or valLoss per evaluated epoch: the
 *     epoch's newest evaluation, so its end-of-epoch one once it finished; a valLoss that was not
 *     reported leaves the epoch unknown) and, when it succeeded, the final objective. A created trial that is not observed (its object vanished
 *     before finishing, or the cache has not seen it yet) is created again: same name, so a
 *     runtime answering AlreadyExists is idempotent and no index is ever duplicated.
 *  S2 Early stopping (earlyStopping set): a Running trial whose latest evaluated epoch e is >=
 *     startEpoch and < the trial's epochs is Stopped (action STOP, reason MedianStop) when
 *     rm_sweep_median_stop says so against the Succeeded trials' objectives at epoch e. A trial
 *     recorded Stopped but still observed Running gets STOP again (until the runtime is seen
 *     to have stopped it).
 *  S3 Create: while fewer than parallelTrials trials are unfinished and the sweep is not over, the
 *     lowest-index Pending trials are created (action CREATE, status Running).
 *  S4 Best: the Succeeded trial with the best final objective (ties: the lowest index).
 *  S5 Phase: Pending before any trial is created; Running; when every trial is finished,
 *     Succeeded if at least one succeeded, else Failed. startTime/completionTime set once.
 *  S6 Conditions Running/Succeeded/Failed carry observedGeneration = metadata.generation;
 *     status.observedGeneration too. Events for each stop and for the end.
 * Idempotent: re-running it on its own output with the same observations emits no CREATE and
 * changes nothing. RM_ETOOBIG if actions do not fit cap; RM_ENOMEM. */
int rm_sweep_reconcile(const rm_sweep *sw, const rm_sweep_obs *obs, size_t nobs, double now,
                       rm_sweep_out *out);
void rm_sweep_status_free(rm_sweep_status *st); /* NULL ok */
int rm_sweep_status_copy(rm_sweep_status *dst, const rm_sweep_status *src);

const char *rm_sweep_phase_name(rm_sweep_phase p);   /* "Running" */
const char *rm_trial_phase_name(rm_trial_phase p);   /* "Stopped" */
const char *rm_sweep_metric_name(rm_sweep_metric m); /* "testAccuracy" */
#endif
