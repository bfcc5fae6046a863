/* runtime_internal.h — what the files of the kube runtime share; included by them only.
 *
 * The kube runtime (runtime.h) is one module in four files:
 *   projections.c  what the informers keep of each object (projections.h);
 *   builders.c     the objects it creates: pods, the headless Service, the Secret (builders.h);
 *   queueing.c     the PodGroup (gang scheduling) and Kueue Workload steps of a sync pass;
 *   sync.c         the runtime itself: its lifecycle and per-job memory, the API helpers below,
 *                  the sync pass (observe -> Kueue/PodGroup -> reconcile -> apply -> commit status)
 *                  and rendezvous polling.
 * sync.c owns struct rm_kube_rt and every job_mem (created and freed there, keyed by "ns/name");
 * the other files borrow both for the length of one call. A job's job_mem is only touched by the
 * one worker syncing that job (the workqueue guarantees it), except rdzv_desired/rdzv_min/rdzv_sig,
 * which rm_kube_rt_poll_rdzv reads under rt->mu. */
#ifndef RM_KUBE_RUNTIME_INTERNAL_H
#define RM_KUBE_RUNTIME_INTERNAL_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <cjson/cJSON.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "common/kmap.h"
#include "operator/kube/runtime.h"

typedef struct job_mem {
    int rdzv_desired, rdzv_min;
    char token[96];
    bool have_service, have_secret;
    unsigned long long invalid_hash; /* hash of the last invalid-spec message reported; 0 none */
    unsigned char *create_failures;  /* consecutive failed creations per index; NULL until one fails */
    int ncreate_failures;
    bool counted_created;
    /* resourceVersion our last successful status write returned: until the informer delivers
     * it, the cached copy is older than our own write and deciding on it could undo that write,
     * so the sync waits a little (client-go's "expectations"), then falls back to a GET. */
    unsigned long long latest_rv;
    int stale_waits;
    unsigned long long rdzv_sig; /* last rendezvous signature seen by rm_kube_rt_poll_rdzv */
    char *last_valid_spec;       /* the job's spec when it last validated, compact JSON (R0b:
                                      * a string, not a cJSON tree: ~4x smaller per job); NULL none */
    bool warned_env;             /* the template's env override Warning was emitted */
    bool warned_sched;           /* the template's own schedulerName Warning was emitted */
    bool pg_held_noted;          /* the "waiting for the PodGroup" event was emitted */
    /* why the job waits on its queue this pass (rule R12's "QueuedByKueue: ..." or
     * "PodGroupPending: ..."); "" = it does not: set by the Kueue and gang steps */
    char queued[200];
} job_mem;

struct rm_kube_rt {
    rm_kube_rt_config c;
    char *rdzv_url, *worker_image, *instance;
    pthread_mutex_t mu;
    rm_kmap jobs; /* key → job_mem* */
    atomic_ulong event_seq;
};

/* sync.c: POST obj to path; AlreadyExists is success (names are deterministic). *created (may be
 * NULL) says whether this call made it. RM_OK or the API error with err filled. */
int rm_kube_rt_create(rm_kube_rt *rt, const char *path, const cJSON *obj, bool *created, rm_err *err);
/* sync.c: an Event about the job (a Warning is logged too); failures are logged, never returned. */
void rm_kube_rt_job_event(rm_kube_rt *rt, const rm_tj *tj, bool warning, const char *reason,
                          const char *note);
/* sync.c: obj (an answer to our own write of the job; may be NULL) is the newest copy the sync
 * may decide on: an older cached copy is waited out (see job_mem.latest_rv). */
void rm_kube_rt_remember_latest(job_mem *m, const cJSON *obj);

/* queueing.c: the job's PodGroup (only when rt->c.gang names a kind): create, update or delete it
 * as rm_gang_decide says. *hold: create no pods yet (the gang scheduler has not enqueued the
 * PodGroup); *requeue_after is lowered to 1 s while holding. invalid: the job's spec does not
 * validate (no PodGroup is made for it). RM_OK or the API error. */
int rm_kube_rt_gang_step(rm_kube_rt *rt, const rm_tj *tj, job_mem *m, bool invalid, bool *hold,
                         double *requeue_after, rm_err *err);
/* queueing.c: the job's Kueue Workload (only with rt->c.kueue, for a job naming a queue): create
 * it, suspend or run the job, keep the Workload's conditions, as rm_kueue_decide says. *skip: the
 * job object was just changed by us; decide again on the new version. *requeue_after is lowered
 * to 1 s while the job waits on Kueue. active_pods: the job's pods observed. RM_OK or the API
 * error. */
int rm_kube_rt_kueue_step(rm_kube_rt *rt, const cJSON *obj, const rm_tj *tj, job_mem *m, int active_pods,
                          bool *skip, double *requeue_after, rm_err *err);
/* runtimes.c: a job naming spec.runtimeRef gets its runtime's template merged under its own
 * fields in obj's spec (common/tj_runtime.h): the runtime is read from the API server at the
 * job's first pass and recorded in obj's status.runtime {kind, name, generation, template}, which
 * every later pass uses instead (a runtime changed or deleted later never alters the job; once
 * the job started, the record is used even if the reference was edited). A reference that cannot
 * be used (malformed, not found, an invalid runtime) fills *invalid with the field-named message
 * and leaves obj as it was; RM_OK then. *done: the job finished without ever resolving its
 * runtime (nothing to do, nothing read). Other failures (the API server, RBAC) are returned. */
int rm_kube_rt_runtime_step(rm_kube_rt *rt, const char *key, cJSON *obj, bool *done, rm_err *invalid,
                            rm_err *err);
#endif
