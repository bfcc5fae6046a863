/* gang.h — gang scheduling (Volcano / scheduler-plugins coscheduling PodGroups) and Kueue's
 * Workload protocol as PURE cores: no I/O, no clock; the kube runtime (operator/kube/queueing.c)
 * reads the objects, calls these, and executes what they decide. Reference:
 * docs/gang-kueue.md (§1 Volcano, §2 coscheduling, §4(b) self-managed Workload, §6).
 *
 *  - a pod's effective requests: common/podres.h (shared with kubesim's scheduler).
 *  - rm_gang_podgroup: the PodGroup of a job (name = job, controller ownerReference, minMember =
 *    the gang size = spec.minReplicas (defaulted to replicas), minResources = the policy's or gang
 *    size x one worker's requests, Volcano queue/priority, coscheduling scheduleTimeoutSeconds).
 *    minMember never follows spec.replicas: an elastic resize does not re-gate a running gang.
 *  - rm_gang_decorate_pod: schedulerName (only when the template names none), the group
 *    annotation/label, Volcano's task-spec, the PriorityClass.
 *  - rm_gang_decide: create / update / delete the PodGroup and hold pod creation (Volcano: no pod
 *    until the PodGroup leaves Pending).
 *  - rm_kueue_workload / rm_kueue_decide / rm_kueue_run_patch / rm_kueue_restore_patch: the
 *    Workload (kueue.x-k8s.io/v1beta1, one pod set "worker") and the §4(b) protocol.
 *
 * Ownership: every cJSON returned is owned by the caller; inputs are borrowed. */
#ifndef RM_GANG_H
#define RM_GANG_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "common/podres.h"
#include "common/rm.h"
#include "common/trainingjob.h"

typedef enum { RM_GANG_NONE = 0, RM_GANG_VOLCANO, RM_GANG_COSCHEDULING } rm_gang_kind;
#define RM_COSCHED_DEFAULT_SCHEDULER "scheduler-plugins-scheduler"
#define RM_VOLCANO_GROUP "scheduling.volcano.sh"
#define RM_VOLCANO_VERSION "v1beta1"
#define RM_COSCHED_GROUP "scheduling.x-k8s.io"
#define RM_COSCHED_VERSION "v1alpha1"
#define RM_PODGROUP_PLURAL "podgroups"
#define RM_VOLCANO_GROUP_ANNOTATION "scheduling.k8s.io/group-name"
#define RM_VOLCANO_TASK_SPEC "volcano.sh/task-spec"
#define RM_COSCHED_POD_GROUP_LABEL "scheduling.x-k8s.io/pod-group"
#define RM_KUEUE_GROUP "kueue.x-k8s.io"
#define RM_KUEUE_VERSION "v1beta1"
#define RM_KUEUE_QUEUE_LABEL "kueue.x-k8s.io/queue-name"
#define RM_KUEUE_JOB_UID_LABEL "kueue.x-k8s.io/job-uid"
#define RM_KUEUE_PODSET "worker"

/* "none" | "volcano" | "coscheduling" -> kind; RM_EINVAL otherwise. */
int rm_gang_parse(const char *s, rm_gang_kind *out);
const char *rm_gang_name(rm_gang_kind k);
/* API group/version of the kind's PodGroup; NULL for none. */
const char *rm_gang_group(rm_gang_kind k);
const char *rm_gang_version(rm_gang_kind k);

/* Gang size: spec.minReplicas (rm_tj_defaults sets it to replicas when absent), at least 1. */
int rm_gang_size(const rm_tj *tj);
/* minResources: spec.runPolicy.schedulingPolicy.minResources when given, else gang size x the
 * template's pod requests. */
int rm_gang_min_resources(const rm_tj *tj, rm_reslist *out, rm_err *err);

/* The PodGroup object for tj (owned), or NULL with err. */
cJSON *rm_gang_podgroup(const rm_tj *tj, rm_gang_kind kind, rm_err *err);
/* Does the existing PodGroup's spec differ from the desired one in a field we own (minMember,
 * minTaskMember, minResources, priorityClassName, scheduleTimeoutSeconds; Volcano's queue is never
 * changed: a queue already on the PodGroup wins, as in the training-operator)? */
bool rm_gang_podgroup_differs(const cJSON *have, const cJSON *want);

/* Decorate a worker pod (owned by caller) for the gang scheduler. Returns true when the template
 * already named another schedulerName (left alone: the caller warns once). With kind none only
 * the PriorityClass is applied. */
bool rm_gang_decorate_pod(cJSON *pod, const rm_tj *tj, rm_gang_kind kind, const char *cosched_scheduler);

typedef struct rm_gang_in {
    rm_gang_kind kind;
    bool job_terminal;  /* Succeeded or Failed */
    bool job_suspended; /* spec.runPolicy.suspend */
    bool job_invalid;   /* spec does not validate and never ran: nothing is created */
    bool pg_exists;
    bool pg_deleting;     /* deletionTimestamp set */
    const char *pg_phase; /* status.phase; NULL or "" when none yet */
    bool pg_differs;      /* rm_gang_podgroup_differs */
} rm_gang_in;
typedef struct rm_gang_out {
    bool create_pg, update_pg, delete_pg;
    bool hold_pods; /* drop CREATE_WORKER actions this pass and look again soon */
} rm_gang_out;
/* G1 none: nothing. G2 terminal or suspended: delete the PodGroup if it exists (no queue
 * capacity stays reserved: kubeflow/trainer#4033, kuberay#4939), create nothing. G3 invalid:
 * nothing. G4 otherwise: create it when missing (and hold pods this pass), update it when it
 * differs; Volcano holds pod creation while the phase is "" or Pending (kubeflow/trainer#1264);
 * coscheduling never holds (its Permit stage gates binding). */
void rm_gang_decide(const rm_gang_in *in, rm_gang_out *out);

/* ---- Kueue (self-managed Workload, docs/gang-kueue.md §4(b)) ---- */
/* The queue name from the job's label kueue.x-k8s.io/queue-name; NULL when not queued. */
const char *rm_kueue_queue_name(const rm_tj *tj);
/* "trainingjob-<job>-<5 hex of the uid's hash>", <= 253. Writes buf. */
const char *rm_kueue_workload_name(const rm_tj *tj, char *buf, size_t cap);
/* The Workload for tj: owner reference, label job-uid, spec.queueName, priorityClassName, one pod
 * set "worker" with count = replicas, minCount = minReplicas when smaller, template = the job's
 * template (default worker container when it has none; default_image names it). */
cJSON *rm_kueue_workload(const rm_tj *tj, const char *default_image, rm_err *err);

/* What the runtime observed of the Workload. */
typedef struct rm_kueue_in {
    bool job_terminal, job_succeeded, job_suspended;
    int active_pods; /* pods of the job that still exist (Kueue's IsActive) */
    bool wl_exists;
    bool wl_admitted;               /* Admitted=True and status.admission present */
    bool wl_evicted;                /* Evicted=True */
    bool wl_finished;               /* Finished=True */
    bool wl_quota_reserved;         /* QuotaReserved=True or status.admission present */
    bool template_injected;         /* the job's template/replicas differ from the Workload's */
    bool count_mismatch;            /* running and admitted, but spec.replicas is not the admitted
                                 * count: the user resized it (rm_kueue_admitted_count) */
    bool wl_pods_ready;             /* PodsReady=True on the Workload */
    int ready_pods, admitted_count; /* the job's ready workers; the admitted count */
} rm_kueue_in;
typedef enum {
    RM_KUEUE_NOTHING = 0,
    RM_KUEUE_CREATE_WORKLOAD, /* and suspend the job (created suspended) */
    RM_KUEUE_SUSPEND,         /* suspend=true and restore the Workload's template and count */
    RM_KUEUE_CLEAR_ADMISSION, /* status: no admission, QuotaReserved=False, Admitted=False, Requeued=True */
    RM_KUEUE_RUN,             /* merge admitted nodeSelector/tolerations, admitted count, suspend=false */
    RM_KUEUE_FINISH,          /* status: Finished=True reason Succeeded|Failed */
    RM_KUEUE_REPLACE,         /* suspend (template restored, the user's replicas kept) and delete
                                 * the Workload: the next pass creates one for the new count */
} rm_kueue_action;
typedef struct rm_kueue_out {
    rm_kueue_action act;
    int pods_ready; /* K7: -1 leave PodsReady alone, 0/1 write it False/True */
    bool hold_pods; /* do not reconcile workers this pass (the job is about to change) */
} rm_kueue_out;
/* K1 terminal: FINISH once (Workload exists, not Finished); pods are the core's business.
 * K2 no Workload: CREATE_WORKLOAD (+ suspend), hold pods. K3 Evicted: SUSPEND (restore) while
 * unsuspended; once suspended with no active pod and quota still reserved, CLEAR_ADMISSION.
 * K4 suspended and admitted: RUN. K5 running but not admitted: SUSPEND (a job never starts
 * outside Kueue's quota). K6 running and admitted with spec.replicas edited away from the admitted
 * count: REPLACE (jobframework's ensureOneWorkload: the pod sets no longer match). Otherwise
 * nothing. K7 (beside any action, for Kueue's waitForPodsReady): PodsReady is True while the job
 * runs admitted with at least the admitted count of workers ready, False otherwise once set. */
void rm_kueue_decide(const rm_kueue_in *in, rm_kueue_out *out);

/* A merge patch for the job's spec that runs it as admitted: suspend false, replicas = the
 * admitted count of pod set "worker" (status.admission.podSetAssignments[].count, else the pod
 * set's count), template.spec.nodeSelector merged with every flavor's nodeLabels and
 * template.spec.tolerations extended with theirs. flavors: array of ResourceFlavor objects (may
 * be NULL). job_spec is the job's current spec (borrowed). */
cJSON *rm_kueue_run_patch(const cJSON *job_spec, const cJSON *workload, const cJSON *flavors, rm_err *err);
/* The merge patch that suspends the job and restores what RUN injected: suspend true, replicas
 * and template nodeSelector/tolerations back to the Workload's pod set (RestorePodSetsInfo). */
cJSON *rm_kueue_restore_patch(const cJSON *job_spec, const cJSON *workload);
/* The count admitted for pod set "worker" (podSetAssignments, else the pod set's count); 0 when
 * the Workload has no such pod set. */
int rm_kueue_admitted_count(const cJSON *workload);
/* rm_kueue_restore_patch without restoring spec.replicas (REPLACE keeps the user's count). */
cJSON *rm_kueue_replace_patch(const cJSON *job_spec, const cJSON *workload);
/* Does the job's spec carry an admission (replicas, nodeSelector or tolerations differ from the
 * Workload's pod set)? */
bool rm_kueue_template_injected(const cJSON *job_spec, const cJSON *workload);
/* Condition helpers on a Workload (or any object with status.conditions). */
bool rm_kueue_condition(const cJSON *obj, const char *type);
/* Set a metav1.Condition in status.conditions (status "True"/"False", reason, message, time);
 * lastTransitionTime changes only when the status flips. */
void rm_kueue_set_condition(cJSON *obj, const char *type, bool status, const char *reason,
                            const char *message, const char *now_rfc3339);
#endif
