/* tj_runtime.h — training runtimes (docs/trainingjob-api.md#runtimes): the kinds TrainingRuntime
 * (namespaced) and ClusterTrainingRuntime (cluster-wide), each a named TrainingJob spec template
 * (spec.template) that a job references with spec.runtimeRef {kind, name} and overrides field by
 * field. The merge rule (rm_runtime_merge), the reference's checks, a runtime's checks, and the
 * resolution from YAML files for `ringmaster run --runtimes`. The operator fetches runtimes from
 * the API server itself (operator/kube/runtimes.c) and uses the same merge.
 *
 * Defaults come after the merge: the CRD carries no `default:` for a field a runtime may set (the
 * API server would otherwise write it into every job as if the job had set it), and
 * rm_tj_defaults fills what neither the job nor its runtime set.
 *
 * Ownership: every cJSON argument is borrowed for the duration of the call; rm_runtime_merge
 * returns a new tree the caller owns (cJSON_Delete). rm_runtime_apply edits the job in place. */
#ifndef RM_TJ_RUNTIME_H
#define RM_TJ_RUNTIME_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include "common/rm.h"

#define RM_RUNTIME_KIND "TrainingRuntime"
#define RM_CLUSTER_RUNTIME_KIND "ClusterTrainingRuntime"
#define RM_RUNTIME_PLURAL "trainingruntimes"
#define RM_CLUSTER_RUNTIME_PLURAL "clustertrainingruntimes"
/* Objects nest at most this deep in a merge; deeper, the job's value replaces the runtime's. */
#define RM_RUNTIME_MERGE_DEPTH 32
/* `--runtimes DIR` reads at most this many *.yaml / *.yml files (each capped by the YAML loader). */
#define RM_RUNTIME_MAX_FILES 256
/* A runtime's name: a DNS-1123 subdomain. */
#define RM_RUNTIME_NAME_MAX 253

/* spec.runtimeRef: {apiGroup (optional, ringmaster.dev), kind (default ClusterTrainingRuntime, as
 * Trainer v2's), name (required)}. */
typedef struct rm_runtime_ref {
    bool present;
    bool cluster; /* ClusterTrainingRuntime; false = TrainingRuntime (the job's namespace) */
    char name[RM_RUNTIME_NAME_MAX + 1];
} rm_runtime_ref;

/* Parse and check a runtimeRef object (named ctx in errors, e.g. "spec.runtimeRef"): unknown keys,
 * kind one of the two, name a DNS-1123 subdomain. RM_OK or RM_EINVAL naming the field. */
int rm_runtime_ref_from_json(const cJSON *ref, const char *ctx, rm_runtime_ref *out, rm_err *err);
/* The reference of a TrainingJob object (spec.runtimeRef); out->present false when it has none. */
int rm_runtime_ref_of(const cJSON *job, rm_runtime_ref *out, rm_err *err);
const char *rm_runtime_ref_kind(const rm_runtime_ref *r); /* "ClusterTrainingRuntime" */

/* The merge (docs/trainingjob-api.md#runtimes): `job` over `runtime`, both any JSON (NULL =
 * absent). Objects merge key by key, recursively; a job's null removes the key; lists whose items
 * are all objects with a string "name" (containers, env, volumes, volumeMounts, ...) merge item by
 * item by name on both sides non-empty, any other list (and an empty one) replaces whole; any
 * other value of the job replaces the runtime's. Returns an owned tree, NULL when the result is
 * absent (a null job) or out of memory (*oom set). */
cJSON *rm_runtime_merge(const cJSON *runtime, const cJSON *job, bool *oom);

/* A runtime object's checks: apiVersion ringmaster.dev/v1alpha1 and kind one of the two (when
 * given), metadata.name, spec.template an object that parses as a TrainingJob spec (strict) and
 * names no runtimeRef. Errors name the runtime's field ("spec.template.training.epochs: ..."). */
int rm_runtime_check(const cJSON *rt_obj, rm_err *err);

/* Replace the job object's spec with merge(template, spec) (template: the runtime's
 * spec.template). RM_OK, RM_EINVAL (job has no spec object), RM_ENOMEM. */
int rm_runtime_apply(cJSON *job, const cJSON *tmpl, rm_err *err);

/* The job's error for a runtime that could not be used, naming spec.runtimeRef.name:
 * `spec.runtimeRef.name: ClusterTrainingRuntime "x" not found` (why = "not found"), or with a
 * runtime's own error: `... "x" is invalid: spec.template.training: ...`. Returns RM_EINVAL. */
int rm_runtime_ref_error(const rm_runtime_ref *ref, const char *why, rm_err *err);

/* `ringmaster run --runtimes PATH`: resolve the job object's spec.runtimeRef from the runtimes in
 * PATH (a YAML file, or a folder whose *.yaml / *.yml files are read, not recursively; other
 * kinds in them are ignored). A TrainingRuntime matches when its metadata.namespace is unset or
 * the job's (unset = "default"). No reference: RM_OK, nothing changes. A reference with path NULL,
 * no match, two matches or an invalid runtime: RM_EINVAL naming spec.runtimeRef.name. On RM_OK
 * the job's spec is the merged one. */
int rm_runtime_resolve_files(cJSON *job, const char *path, rm_err *err);
#endif
