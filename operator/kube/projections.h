/* projections.h — what the kube runtime's informers keep of each object (implemented in
 * operator/kube/projections.c).
 *
 * An informer stores a projection of each object, not the object: a few bytes per pod or node,
 * a compressed copy per TrainingJob. These are the transforms (and the owner index function) the
 * operator gives its informers (operator/kube/informer.h); the sync loop reads the projections.
 *
 * Ownership: every transform returns a malloc'd item the informer owns (free), or NULL on ENOMEM;
 * obj is borrowed. */
#ifndef RM_KUBE_PROJECTIONS_H
#define RM_KUBE_PROJECTIONS_H
#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>

/* Informer projections and index functions (ud = rm_kube_rt* or NULL). */
void *rm_kube_tj_transform(void *ud, const cJSON *obj);                   /* zlib-compressed compact JSON */
void *rm_kube_pod_transform(void *ud, const cJSON *obj);                  /* rm_kube_pod */
void *rm_kube_owned_transform(void *ud, const cJSON *obj);                /* rm_kube_owned (secrets) */
void *rm_kube_exists_transform(void *ud, const cJSON *obj);               /* a 1-byte marker (services) */
void *rm_kube_node_transform(void *ud, const cJSON *obj);                 /* rm_kube_node */
int rm_kube_job_index(void *ud, const cJSON *obj, char *buf, size_t cap); /* "ns/<job-name label>" */

/* Kept small on purpose: one per worker pod in the cache (8,000 pods ≈ 0.6 MB). */
typedef struct rm_kube_pod {
    int index, epoch;    /* index -1: not a worker (e.g. a parameter server) */
    int ps_index;        /* a parameter server's shard, -1 for workers */
    unsigned char phase; /* rm_worker_phase */
    bool ready;
    int exit_code;
    char reason[24];
    /* a worker that ended on bad data (exit RM_WORKER_EXIT_DATA_ERROR, its own or its fetch-data
     * init container's): its termination message, the DataError's message; "" otherwise */
    char message[200];
    /* Pending: why it cannot start (rm_observed_worker.waiting); "" when nothing blocks it */
    char waiting[200];
    unsigned long long node_hash; /* rm_kmap_hash of spec.nodeName; 0 = unscheduled */
    double created_at, finished_at, deletion_started_at;
} rm_kube_pod;

typedef struct rm_kube_owned {
    char token[96]; /* secrets: data.token decoded; "" otherwise */
} rm_kube_owned;

typedef struct rm_kube_node {
    bool ready;
} rm_kube_node;

/* The JSON of a cached job (an item of rm_kube_tj_transform), NUL-terminated and owned by the
 * caller (free); NULL on ENOMEM or a damaged item. */
char *rm_kube_tj_json(const void *item);
#endif
