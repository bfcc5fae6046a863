/* metrics.c (operator/kube) — registration and update helpers for the operator's metrics. Label
 * series are looked up per update (namespace and verb/code sets are small and the registry lookup
 * is cheap); unlabelled series are fetched once at init. */
#include "operator/kube/metrics.h"
#include <stdio.h>
#include <string.h>

int rm_op_metrics_init(rm_op_metrics *m, rm_metrics *reg, rm_err *err)
{
    memset(m, 0, sizeof(*m));
    m->reg = reg;
    static const char *const ns[] = {"namespace", NULL};
    static const char *const vc[] = {"verb", "code", NULL};
    static const char *const verb[] = {"verb", NULL};
    static const char *const res[] = {"resource", "reason", NULL};
    static const double rb[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                0.1,    0.25,  0.5,    1,     2.5,  5,     10};
    rm_metric *f = NULL;
    int rc;
#define REG(call)      \
    do {               \
        rc = (call);   \
        if (rc)        \
            return rc; \
    } while (0)
    REG(rm_metrics_counter(reg, "ringmaster_jobs_created_total", "TrainingJobs seen for the first time.", ns,
                           &m->created, err));
    REG(rm_metrics_counter(reg, "ringmaster_jobs_successful_total", "TrainingJobs that succeeded.", ns,
                           &m->successful, err));
    REG(rm_metrics_counter(reg, "ringmaster_jobs_failed_total", "TrainingJobs that failed.", ns, &m->failed,
                           err));
    REG(rm_metrics_counter(reg, "ringmaster_jobs_restarted_total", "Group restarts of TrainingJobs.", ns,
                           &m->restarted, err));
    REG(rm_metrics_counter(reg, "ringmaster_jobs_deleted_total", "TrainingJobs deleted.", ns, &m->deleted,
                           err));
    REG(rm_metrics_histogram(reg, "ringmaster_reconcile_seconds", "Time of one reconcile of one TrainingJob.",
                             NULL, rb, sizeof(rb) / sizeof(rb[0]), &m->reconcile_seconds, err));
    REG(rm_metrics_counter(reg, "ringmaster_reconcile_errors_total",
                           "Reconciles that failed and were requeued.", NULL, &f, err));
    m->reconcile_errors = rm_metric_series(f);
    REG(rm_metrics_gauge(reg, "ringmaster_workqueue_depth", "Keys waiting in the work queue.", NULL, &f,
                         err));
    m->wq_depth = rm_metric_series(f);
    REG(rm_metrics_counter(reg, "ringmaster_workqueue_adds_total", "Adds to the work queue.", NULL, &f, err));
    m->wq_adds = rm_metric_series(f);
    REG(rm_metrics_histogram(reg, "ringmaster_workqueue_queue_duration_seconds",
                             "Time a key waited in the work queue.", NULL, rb, sizeof(rb) / sizeof(rb[0]), &f,
                             err));
    m->wq_latency = rm_metric_series(f);
    REG(rm_metrics_counter(reg, "ringmaster_watch_restarts_total",
                           "Watches re-opened after an error or expiry.", res, &m->watch_restarts, err));
    REG(rm_metrics_counter(reg, "ringmaster_api_requests_total",
                           "Kubernetes API requests by verb and HTTP code (0 = transport error).", vc,
                           &m->api_total, err));
    REG(rm_metrics_histogram(reg, "ringmaster_api_request_duration_seconds",
                             "Kubernetes API request latency.", verb, rb, sizeof(rb) / sizeof(rb[0]),
                             &m->api_seconds, err));
    REG(rm_metrics_gauge(reg, "ringmaster_is_leader",
                         "1 when this operator holds the leader Lease (or runs without leader election).",
                         NULL, &f, err));
    m->is_leader = rm_metric_series(f);
#undef REG
    if (!m->reconcile_errors || !m->wq_depth || !m->wq_adds || !m->wq_latency || !m->is_leader)
        return rm_errf(err, RM_ENOMEM, "metrics: out of memory");
    return RM_OK;
}

void rm_op_metrics_job(rm_op_metrics *m, rm_job_counter which, const char *ns)
{
    if (!m || !m->reg)
        return;
    rm_metric *f = which == RM_JOB_CREATED      ? m->created
                   : which == RM_JOB_SUCCESSFUL ? m->successful
                   : which == RM_JOB_FAILED     ? m->failed
                   : which == RM_JOB_RESTARTED  ? m->restarted
                                                : m->deleted;
    rm_series *s = rm_metric_with1(f, ns ? ns : "");
    if (s)
        rm_series_inc(s, 1);
}

void rm_op_metrics_reconcile(rm_op_metrics *m, double seconds, bool error)
{
    if (!m || !m->reg)
        return;
    rm_series *s = rm_metric_series(m->reconcile_seconds);
    if (s)
        rm_series_observe(s, seconds);
    if (error)
        rm_series_inc(m->reconcile_errors, 1);
}

void rm_op_metrics_leader(rm_op_metrics *m, bool leading)
{
    if (m && m->is_leader)
        rm_series_set(m->is_leader, leading ? 1 : 0);
}

void rm_op_metrics_watch_restart(rm_op_metrics *m, const char *resource, const char *reason)
{
    if (!m || !m->reg)
        return;
    rm_series *s = rm_metric_with2(m->watch_restarts, resource, reason);
    if (s)
        rm_series_inc(s, 1);
}

void rm_op_metrics_api(void *ud, const char *verb, long code, double seconds)
{
    rm_op_metrics *m = ud;
    if (!m || !m->reg)
        return;
    char cs[16];
    snprintf(cs, sizeof(cs), "%ld", code);
    rm_series *s = rm_metric_with2(m->api_total, verb, cs);
    if (s)
        rm_series_inc(s, 1);
    s = rm_metric_with1(m->api_seconds, verb);
    if (s)
        rm_series_observe(s, seconds);
}

void rm_op_metrics_wq_depth(void *ud, size_t depth)
{
    rm_op_metrics *m = ud;
    if (m && m->wq_depth)
        rm_series_set(m->wq_depth, (double)depth);
}

void rm_op_metrics_wq_added(void *ud)
{
    rm_op_metrics *m = ud;
    if (m && m->wq_adds)
        rm_series_inc(m->wq_adds, 1);
}

void rm_op_metrics_wq_latency(void *ud, double seconds)
{
    rm_op_metrics *m = ud;
    if (m && m->wq_latency)
        rm_series_observe(m->wq_latency, seconds);
}
