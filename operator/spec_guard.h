/* spec_guard.h — what may change in the spec of a TrainingJob whose group already runs, and the
 * spec its pods are built from (docs/trainingjob-api.md#changing-a-running-job).
 *
 * A running group is one spec: every replacement pod must get the settings its peers run, or the
 * group cannot re-form (another model, another strategy) and the job dies later in a recovery
 * loop. So each top-level spec key has one rule:
 *   - immutable once the job started (backend, strategy, parameterServer, parallelism, training,
 *     checkpoint, placement, output, runtimeRef): the CRD refuses the change (x-kubernetes-validations with
 *     oldSelf), and should one get through (an older CRD, a cluster without CEL) the operator
 *     keeps building pods from the recorded running spec (status.runningSpec) and says which
 *     field it did not apply;
 *   - applied as written (replicas/minReplicas/maxReplicas: a resize, a new rendezvous round that
 *     restores from the checkpoint; restartPolicy, runPolicy, managedBy: read by the operator;
 *     template: pods created afterwards).
 * A key the table does not know is immutable (a new spec field must be classified here).
 *
 * Pure functions over cJSON trees: no I/O, no globals. Ownership: everything is borrowed for the
 * duration of a call; rm_spec_running returns a tree the caller owns (cJSON_Delete). */
#ifndef RM_SPEC_GUARD_H
#define RM_SPEC_GUARD_H
#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>

typedef enum {
    RM_SPEC_IMMUTABLE = 0, /* fixed once the job started */
    RM_SPEC_MUTABLE,       /* applied as written (how: rm_spec_field.how) */
} rm_spec_rule;

typedef struct rm_spec_field {
    const char *key; /* top-level key under spec */
    rm_spec_rule rule;
    const char *how; /* one line: why it is fixed, or how a change is applied */
} rm_spec_field;

/* The table, in the order a message lists fields; rm_spec_nfields entries. Static. */
extern const rm_spec_field rm_spec_fields[];
extern const int rm_spec_nfields;

/* The rule of top-level spec key `key` (unknown keys: RM_SPEC_IMMUTABLE). */
rm_spec_rule rm_spec_rule_of(const char *key);

/* The running-spec record of `spec` (an object, may be NULL = empty): a new object holding a copy
 * of each immutable key spec has. Returned owned; NULL when out of memory. */
cJSON *rm_spec_running(const cJSON *spec);

/* Which immutable fields of `spec` differ from the record `running` (rm_spec_running's shape):
 * writes their paths, comma-separated, into field (cap bytes, truncated with "..."), as deep as
 * the difference goes ("spec.training.model.hidden, spec.strategy"); a key present on one side
 * only counts. Returns the number of differing fields (0: field is ""). */
int rm_spec_changed_fields(const cJSON *running, const cJSON *spec, char *field, size_t cap);

/* Make `spec` carry the record's immutable keys: each immutable key is replaced by running's copy,
 * or removed when running has none; mutable keys are left as written. RM_OK, RM_EINVAL (spec not
 * an object), RM_ENOMEM (spec may then be partly held: discard it). */
int rm_spec_hold(cJSON *spec, const cJSON *running);
#endif
