/* podres.h — resource lists (resource name -> milli-units) and a pod's effective requests by
 * Kubernetes' own rule (k8s.io/component-helpers/resource PodRequests): requests default to limits
 * per resource (the API server's defaulting, so `nvidia.com/gpu` given only as a limit is
 * requested); regular containers add up; sidecars (init containers with restartPolicy Always) add
 * to that sum and to every later init container; the pod needs max(sum, each init container)
 * plus spec.overhead. Shared by the operator (PodGroup minResources, operator/gang.h) and
 * kubesim's scheduler (tests/kubesim/sched.c). Pure; no allocation except rm_reslist_to_json. */
#ifndef RM_PODRES_H
#define RM_PODRES_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "common/rm.h"

/* ---- resource lists (name -> milli-units) ---- */
#define RM_RES_MAX 16
typedef struct rm_res {
    char name[128];
    int64_t milli;
} rm_res;
typedef struct rm_reslist {
    rm_res r[RM_RES_MAX];
    int n;
} rm_reslist;
int64_t rm_reslist_get(const rm_reslist *l, const char *name);
bool rm_reslist_has(const rm_reslist *l, const char *name);
/* a[name] += milli (RM_ETOOBIG past RM_RES_MAX names, RM_EINVAL on overflow) */
int rm_reslist_add(rm_reslist *l, const char *name, int64_t milli);
int rm_reslist_sum(rm_reslist *a, const rm_reslist *b); /* a += b */
int rm_reslist_max(rm_reslist *a, const rm_reslist *b); /* a = max(a, b) per name */
int rm_reslist_scale(rm_reslist *a, int64_t k);         /* a *= k */
/* {"cpu": "4", "memory": "8Gi"} in Kubernetes' canonical quantity text. */
cJSON *rm_reslist_to_json(const rm_reslist *l);
/* A ResourceList object; err names `field` and the resource. */
int rm_reslist_from_json(const cJSON *o, const char *field, rm_reslist *l, rm_err *err);

/* One container's requests after the API server's defaulting (a resource with a limit and no
 * request requests its limit). */
int rm_container_requests(const cJSON *container, const char *field, rm_reslist *out, rm_err *err);
/* A PodSpec's effective requests (see the top of this file). pod_spec NULL -> empty list. */
int rm_pod_requests(const cJSON *pod_spec, rm_reslist *out, rm_err *err);

#endif
