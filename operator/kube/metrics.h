/* metrics.h (operator/kube) — the operator's Prometheus metrics, registered once into a common
 * rm_metrics registry, with typed helpers so hot paths update pre-fetched series.
 *
 * Families: ringmaster_jobs_{created,successful,failed,restarted,deleted}_total{namespace},
 * ringmaster_reconcile_seconds (histogram), ringmaster_reconcile_errors_total,
 * ringmaster_workqueue_{depth,adds_total,queue_duration_seconds}, ringmaster_watch_restarts_total
 * {resource,reason}, ringmaster_api_requests_total{verb,code}, ringmaster_api_request_duration_seconds
 * {verb} (histogram), ringmaster_is_leader.
 *
 * Ownership: the registry is borrowed (it owns every family/series); rm_op_metrics only holds
 * pointers into it. All update functions are thread-safe and accept a NULL rm_op_metrics. */
#ifndef RM_KUBE_METRICS_H
#define RM_KUBE_METRICS_H
#include <stdbool.h>
#include <stddef.h>
#include "common/metrics.h"

typedef struct rm_op_metrics {
    rm_metrics *reg;
    rm_metric *created, *successful, *failed, *restarted, *deleted;
    rm_metric *reconcile_seconds, *api_total, *api_seconds, *watch_restarts;
    rm_series *reconcile_errors, *wq_depth, *wq_adds, *wq_latency, *is_leader;
} rm_op_metrics;

int rm_op_metrics_init(rm_op_metrics *m, rm_metrics *reg, rm_err *err);

typedef enum {
    RM_JOB_CREATED = 0,
    RM_JOB_SUCCESSFUL,
    RM_JOB_FAILED,
    RM_JOB_RESTARTED,
    RM_JOB_DELETED
} rm_job_counter;
void rm_op_metrics_job(rm_op_metrics *m, rm_job_counter which, const char *ns);
void rm_op_metrics_reconcile(rm_op_metrics *m, double seconds, bool error);
void rm_op_metrics_leader(rm_op_metrics *m, bool leading);
void rm_op_metrics_watch_restart(rm_op_metrics *m, const char *resource, const char *reason);
/* Matches rm_kube_observe_fn (ud = rm_op_metrics*). */
void rm_op_metrics_api(void *m, const char *verb, long code, double seconds);
/* Workqueue hooks (ud = rm_op_metrics*). */
void rm_op_metrics_wq_depth(void *m, size_t depth);
void rm_op_metrics_wq_added(void *m);
void rm_op_metrics_wq_latency(void *m, double seconds);
#endif
