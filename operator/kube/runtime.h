/* runtime.h — the kube runtime: turns reconcile-core actions into Kubernetes API calls and
 * feeds the cluster's state (from the informer caches) and the rendezvous snapshot back in.
 *
 * Per TrainingJob it maintains a Secret "<job>-rendezvous" (key "token"), a headless Service
 * "<job>" (publishNotReadyAddresses) and worker pods "<job>-worker-<i>" owned by the job
 * (ownerReferences controller+blockOwnerDeletion), labelled ringmaster.dev/job-name,
 * ringmaster.dev/replica-index and ringmaster.dev/epoch. Names are deterministic and creation treats
 * AlreadyExists as success, so a restarted operator never duplicates anything. Status goes through
 * the /status subresource with the fetched resourceVersion; a 409 re-reads the object and writes
 * the same computed status again. Events use events.k8s.io/v1 (reportingController
 * ringmaster.dev/operator).
 *
 * Files: sync.c implements what is declared here; the informer projections (projections.h) and
 * the object builders (builders.h) have their own headers, included below; runtime_internal.h says
 * how the files share the work.
 *
 * Ownership: rm_kube_rt borrows the client, informers, rendezvous service and metrics given in its
 * config; it owns its per-job memory. */
#ifndef RM_KUBE_RUNTIME_H
#define RM_KUBE_RUNTIME_H
#include <stdbool.h>
#include <cjson/cJSON.h>
#include "common/rdzv.h"
#include "common/rm.h"
#include "operator/kube/client.h"
#include "operator/kube/informer.h"
#include "operator/kube/metrics.h"
#include "operator/kube/builders.h"
#include "operator/kube/projections.h"

#define RM_LABEL_JOB "ringmaster.dev/job-name"
#define RM_LABEL_INDEX "ringmaster.dev/replica-index"
#define RM_LABEL_EPOCH "ringmaster.dev/epoch"
#define RM_LABEL_ROLE "ringmaster.dev/role"         /* worker | ps (docs/strategies.md) */
#define RM_LABEL_PS_INDEX "ringmaster.dev/ps-index" /* a parameter server's shard index */
/* spec.placement.workersPerNode k (docs/strategies.md#topology): a worker's node group, replica index /
 * k; workers of one group share a node (required pod affinity), groups never do (required
 * anti-affinity). */
#define RM_LABEL_NODE_GROUP "ringmaster.dev/node-group"
#define RM_MANAGER "ringmaster.dev/operator"
#define RM_DEFAULT_WORKER_IMAGE "ringmaster/worker:latest"

typedef struct rm_kube_rt rm_kube_rt;

typedef struct rm_kube_rt_config {
    rm_kube_client *client;
    rm_informer *jobs_inf[16]; /* one per watched namespace (or one for all) */
    int njobs_inf;
    rm_informer *pods, *services, *secrets, *nodes; /* nodes may be NULL */
    rm_rdzv *rdzv;                                  /* may be NULL (no rendezvous hosted) */
    rm_op_metrics *metrics;                         /* may be NULL */
    const char *rdzv_url;                           /* advertised to workers, e.g. "http://127.0.0.1:29400" */
    const char *worker_image;                       /* default ringmaster/worker:latest */
    const char *instance;                           /* reportingInstance for events (identity) */
    bool pod_events;             /* emit an Event per pod creation/deletion (default true) */
    int worker_metrics_port;     /* our worker's --metrics-addr port on the pod IP; 0 = any
                                      * free port (hosts shared by many pods, e.g. kubesim);
                                      * <0 = RM_PORT_WORKER_METRICS */
    double force_delete_after_s; /* Terminating on a NotReady node → force; default 30 */
    /* gang scheduling and Kueue (operator/gang.h): per job a PodGroup of this kind (an
     * rm_gang_kind; 0 = none) and decorated pods; cosched_scheduler is the coscheduling pods'
     * schedulerName (NULL = scheduler-plugins-scheduler). kueue: jobs labelled
     * kueue.x-k8s.io/queue-name get a self-managed Workload (docs/gang-kueue.md §4(b)). */
    int gang;
    const char *cosched_scheduler;
    bool kueue;
} rm_kube_rt_config;

int rm_kube_rt_new(const rm_kube_rt_config *cfg, rm_kube_rt **out, rm_err *err);
void rm_kube_rt_free(rm_kube_rt *rt); /* NULL ok */

/* Reconcile one job key "ns/name". *requeue_after gets >0 when the job wants another look by then.
 * Returns RM_OK or an error (caller requeues rate-limited). Never called twice for one key at once
 * (the workqueue guarantees it). */
int rm_kube_rt_sync(rm_kube_rt *rt, const char *key, double *requeue_after, rm_err *err);

/* Rendezvous changes are not API events: call this every second or so; it snapshots every job
 * registered with the rendezvous and calls enqueue(ud, key) for those whose round, epoch,
 * membership, progress or result changed since the last call. */
void rm_kube_rt_poll_rdzv(rm_kube_rt *rt, void (*enqueue)(void *ud, const char *key), void *ud);

#endif
