/* wmetrics.h — the worker's HTTP endpoint: /metrics (Prometheus), /healthz, /readyz.
 *
 * Series are labelled job and rank; the trainer fetches them once per (re)join (rank may change
 * after an elastic restart) and updates them lock-free on the hot path. Liveness is the training
 * loop's heartbeat (rm_health_beat after every step) against the progress deadline.
 *
 * Ownership: rm_wmetrics owns the registry, health and HTTP server (rm_wmetrics_stop, NULL-safe);
 * series pointers are borrowed from the registry. */
#ifndef RM_WORKER_WMETRICS_H
#define RM_WORKER_WMETRICS_H
#include "common/health.h"
#include "common/http.h"
#include "common/metrics.h"
#include "common/rm.h"

typedef struct rm_wmetrics {
    rm_metrics *reg;
    rm_health *health;
    rm_http_server *srv; /* NULL when no address was given */
    char job[256];
    char rank[16];
    rm_metric *f_step, *f_loss, *f_samples, *f_epoch, *f_train_epoch, *f_restarts, *f_ar_seconds, *f_ar_bytes,
        *f_ckpt_seconds, *f_last_ckpt, *f_recovery, *f_test_acc, *f_val_loss, *f_world, *f_samples_per_s,
        *f_memory, *f_peak_rss, *f_grad_norm;
    rm_metric *f_tokens_per_s;                                 /* language models only (lazily) */
    rm_metric *f_pipe_stage, *f_pipe_bubble, *f_pipe_bytes;    /* pipelines only (lazily) */
    rm_metric *f_tensor_rank, *f_tensor_bytes, *f_tensor_wait; /* tensor parallelism only (lazily) */
    rm_series *step, *loss, *samples, *epoch, *train_epoch, *restarts, *ar_seconds, *ar_bytes, *ckpt_seconds,
        *last_ckpt, *recovery, *test_acc, *val_loss, *world, *samples_per_s, *grad_norm;
    rm_series *tokens_per_s; /* under the current rank; NULL until the first set */
} rm_wmetrics;

/* ringmaster_worker_memory_bytes{kind=params|grads|optimizer|activations} (what the training
 * strategy holds at the peak of a step) and ringmaster_worker_peak_rss_bytes, under the current
 * rank. */
int rm_wmetrics_set_memory(rm_wmetrics *w, double params, double grads, double optimizer, double activations,
                           double peak_rss, rm_err *err);

/* Pipeline stages (docs/strategies.md#pipeline-stages): ringmaster_worker_pipeline_stage (gauge), _pipeline_bubble_ratio
 * (gauge: time waiting for a neighbouring stage / time of the schedule, last step) and
 * _pipeline_bytes_total{direction=sent|received} (counters) under the current rank; the
 * families are registered on the first call. Errors (out of memory) are logged, not returned. */
void rm_wmetrics_set_pipeline(rm_wmetrics *w, int stage, double bubble, double sent, double recv);

/* Tensor parallelism (docs/models-and-data.md, "Tensor parallelism"): ringmaster_worker_tensor_rank
 * (gauge: t of the rank's tensor group), _tensor_bytes_total (counter: bytes allreduced in the
 * tensor group — Megatron's f and g, a transformer's embedding and cross-entropy sums, clipping's
 * norm; each collective's payload, as allreduce_bytes_total counts) and
 * _tensor_wait_seconds_total (counter: seconds in those collectives) under the current rank, for
 * one step's bytes and wait; the families are registered on the first call, so a job without
 * tensor parallelism exports none. Errors (out of memory) are logged, not returned. */
void rm_wmetrics_set_tensor(rm_wmetrics *w, int t, double bytes, double wait_s);

/* ringmaster_worker_tokens_per_second (gauge: samples/s x tokens per row, last interval) under the
 * current rank, for language models only: the family is registered on the first call, so an MLP
 * job exports none. Errors (out of memory) are logged, not returned. */
void rm_wmetrics_set_tokens_per_second(rm_wmetrics *w, double v);

/* addr "" or NULL or "off" = no HTTP server (metrics still recorded). deadline_s for /healthz. */
int rm_wmetrics_start(rm_wmetrics *w, const char *addr, const char *job, double deadline_s, rm_err *err);
/* (Re)bind the series to this rank; allocates only when the rank changes. */
int rm_wmetrics_set_rank(rm_wmetrics *w, int rank, rm_err *err);
int rm_wmetrics_port(const rm_wmetrics *w); /* bound port, 0 when none */
void rm_wmetrics_stop(rm_wmetrics *w);
#endif
