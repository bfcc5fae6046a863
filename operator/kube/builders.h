/* builders.h — the objects the kube runtime creates for a TrainingJob (implemented in
 * operator/kube/builders.c): its worker pods "<job>-worker-<i>", its parameter servers' pods
 * "<job>-ps-<i>", a torchrun job's c10d store pod "<job>-c10d", its headless Service "<job>" and its
 * rendezvous Secret "<job>-rendezvous". Each carries the job's labels (runtime.h, RM_LABEL_*) and a
 * controller ownerReference to the job.
 *
 * Ownership: every builder returns an owned cJSON tree (cJSON_Delete); the job is borrowed. */
#ifndef RM_KUBE_BUILDERS_H
#define RM_KUBE_BUILDERS_H
#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>
#include "common/rm.h"

struct rm_tj;

/* Build parameter server `ps_index`'s pod "<job>-ps-<i>" (label ringmaster.dev/role: ps); it
 * registers its address with the rendezvous at rdzv_url (NULL: none). */
cJSON *rm_kube_ps_pod(const struct rm_tj *tj, int ps_index, const char *rdzv_url, const char *worker_image,
                      int metrics_port, rm_err *err);

/* What a worker pod is built from. Zero-initialised is not a usable default for metrics_port:
 * write -1 for RM_PORT_WORKER_METRICS. */
typedef struct rm_kube_worker_pod_args {
    const struct rm_tj *tj;   /* the parsed, defaulted job (required); borrowed */
    int index, epoch;         /* replica index and the epoch label */
    const char *rdzv_url;     /* advertised rendezvous; NULL: none */
    const char *worker_image; /* NULL: RM_DEFAULT_WORKER_IMAGE */
    int metrics_port;         /* as rm_kube_rt_config.worker_metrics_port */
    char *overridden;         /* may be NULL: gets the comma-separated names of the template's env
                                * entries the launch contract replaced ("" when none) */
    size_t overridden_cap;
} rm_kube_worker_pod_args;

/* Build worker a->index's pod "<job>-worker-<i>": the launch contract rendered into the job's
 * template. Owned cJSON, or NULL with err. */
cJSON *rm_kube_worker_pod(const rm_kube_worker_pod_args *a, rm_err *err);

/* A torchrun job's c10d store pod "<job>-c10d" (docs/torchrun.md): torch's own TCPStore from the
 * worker container's image, at "<job>-c10d.<job>:RM_PORT_C10D" (hostname + the headless Service),
 * label ringmaster.dev/role: c10d-store. Owned cJSON, or NULL with err (the template does not run
 * torchrun). */
cJSON *rm_kube_c10d_pod(const struct rm_tj *tj, rm_err *err);

/* The job's headless Service (publishNotReadyAddresses, the master port). */
cJSON *rm_kube_service(const struct rm_tj *tj);
/* The job's rendezvous Secret holding `token` under data.token. */
cJSON *rm_kube_secret(const struct rm_tj *tj, const char *token);
/* Does the job's template run the ringmaster worker image (the configured worker_image, or one
 * named ringmaster-worker or ringmaster/worker), so that it speaks our rendezvous and wants the
 * contract's args? A template without an image gets worker_image, so it does. */
bool rm_kube_template_runs_worker(const struct rm_tj *tj, const char *worker_image);
#endif
