/* wmetrics.c — registers the worker's metric families and serves them with the probes.
 * Design: families are registered once at start; series are re-fetched only when the rank label
 * changes, so the training loop only does atomic updates. Histograms use buckets sized for what
 * they time (allreduce: 100 us .. 10 s; checkpoint: 1 ms .. 30 s; recovery: 0.1 .. 120 s). */
#include "worker/wmetrics.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *const LABELS[] = {"job", "rank", NULL};
static const char *const MEM_LABELS[] = {"job", "rank", "kind", NULL};
static const char *const MEM_KINDS[] = {"params", "grads", "optimizer", "activations"};

int rm_wmetrics_start(rm_wmetrics *w, const char *addr, const char *job, double deadline_s, rm_err *err)
{
    memset(w, 0, sizeof *w);
    snprintf(w->job, sizeof w->job, "%s", job && *job ? job : "local");
    w->reg = rm_metrics_new();
    w->health = rm_health_new(deadline_s);
    if (!w->reg || !w->health) {
        rm_wmetrics_stop(w);
        return rm_errf(err, RM_ENOMEM, "metrics: out of memory");
    }
    static const double ar_b[] = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
                                  5e-2, 0.1,    0.25, 0.5,  1,      2.5,  10};
    static const double ck_b[] = {1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
    static const double rc_b[] = {0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120};
    int rc = 0;
#define G(f, name, help) RM_CHECK_GOTO(rm_metrics_gauge(w->reg, name, help, LABELS, &w->f, err), rc, fail)
#define C(f, name, help) RM_CHECK_GOTO(rm_metrics_counter(w->reg, name, help, LABELS, &w->f, err), rc, fail)
#define H(f, name, help, b) \
    RM_CHECK_GOTO(rm_metrics_histogram(w->reg, name, help, LABELS, b, RM_ARRAY_LEN(b), &w->f, err), rc, fail)
    G(f_step, "ringmaster_worker_step", "Optimizer steps completed (global step).");
    G(f_loss, "ringmaster_worker_loss", "Training loss of the last step (mean over the local batch).");
    C(f_samples, "ringmaster_worker_samples_total", "Training samples processed by this worker.");
    G(f_epoch, "ringmaster_worker_epoch", "Rendezvous epoch (bumped on every group restart).");
    G(f_train_epoch, "ringmaster_worker_train_epoch", "Data epoch being trained.");
    C(f_restarts, "ringmaster_worker_restarts_total",
      "In-place restarts (re-joins after a failure or a new epoch).");
    H(f_ar_seconds, "ringmaster_worker_allreduce_seconds", "Time spent in gradient allreduce per step.",
      ar_b);
    C(f_ar_bytes, "ringmaster_worker_allreduce_bytes_total", "Gradient bytes allreduced.");
    H(f_ckpt_seconds, "ringmaster_worker_checkpoint_seconds", "Time to write a checkpoint.", ck_b);
    G(f_last_ckpt, "ringmaster_worker_last_checkpoint_step",
      "Step of the last checkpoint written or loaded.");
    H(f_recovery, "ringmaster_worker_recovery_seconds",
      "From failure detection to the first step of the new epoch.", rc_b);
    G(f_test_acc, "ringmaster_worker_test_accuracy", "Test-set accuracy of the last evaluation.");
    G(f_val_loss, "ringmaster_worker_val_loss",
      "Mean loss over the validation/test split at the last evaluation (nats per token for a language "
      "model); 0 before the first.");
    G(f_world, "ringmaster_worker_world_size", "Workers in the current rendezvous round.");
    G(f_samples_per_s, "ringmaster_worker_samples_per_second",
      "Training samples per second on this worker (last interval).");
    G(f_peak_rss, "ringmaster_worker_peak_rss_bytes", "Peak resident set size of this worker process.");
    G(f_grad_norm, "ringmaster_worker_grad_norm",
      "Global gradient norm of the last step, before clipping (with spec.training.gradClip).");
    RM_CHECK_GOTO(rm_metrics_gauge(w->reg, "ringmaster_worker_memory_bytes",
                                   "Bytes this rank holds at the peak of a step, by kind (params, grads, "
                                   "optimizer, activations); sharding lowers them.",
                                   MEM_LABELS, &w->f_memory, err),
                  rc, fail);
#undef G
#undef C
#undef H
    RM_CHECK_GOTO(rm_wmetrics_set_rank(w, 0, err), rc, fail);
    rm_health_set_ready(w->health, false, "joining");
    if (addr && *addr && strcmp(addr, "off") != 0) {
        rm_http_route routes[] = {
            {"GET", "/metrics", 0, rm_metrics_handler, w->reg},
            {"GET", "/healthz", 0, rm_health_healthz, w->health},
            {"GET", "/readyz", 0, rm_health_readyz, w->health},
        };
        rm_http_opts o = {.bind = addr};
        RM_CHECK_GOTO(rm_http_start(&o, routes, RM_ARRAY_LEN(routes), &w->srv, err), rc, fail);
    }
    return RM_OK;
fail:
    rm_wmetrics_stop(w);
    return rc ? rc : RM_ERR;
}

int rm_wmetrics_set_rank(rm_wmetrics *w, int rank, rm_err *err)
{
    char r[16];
    snprintf(r, sizeof r, "%d", rank);
    if (w->step && strcmp(r, w->rank) == 0)
        return RM_OK;
    char old[16];
    snprintf(old, sizeof old, "%s", w->rank);
    bool had = w->step != NULL;
    snprintf(w->rank, sizeof w->rank, "%s", r);
    struct {
        rm_metric *f;
        rm_series **s;
    } m[] = {
        {w->f_step, &w->step},
        {w->f_loss, &w->loss},
        {w->f_samples, &w->samples},
        {w->f_epoch, &w->epoch},
        {w->f_train_epoch, &w->train_epoch},
        {w->f_restarts, &w->restarts},
        {w->f_ar_seconds, &w->ar_seconds},
        {w->f_ar_bytes, &w->ar_bytes},
        {w->f_ckpt_seconds, &w->ckpt_seconds},
        {w->f_last_ckpt, &w->last_ckpt},
        {w->f_recovery, &w->recovery},
        {w->f_test_acc, &w->test_acc},
        {w->f_val_loss, &w->val_loss},
        {w->f_world, &w->world},
        {w->f_samples_per_s, &w->samples_per_s},
        {w->f_grad_norm, &w->grad_norm},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(m); i++) {
        rm_series *s = rm_metric_with2(m[i].f, w->job, r);
        if (!s)
            return rm_errf(err, RM_ENOMEM, "metrics: out of memory");
        /* carry monotonic counters over to the new label set */
        if (*m[i].s && *m[i].s != s &&
            (m[i].f == w->f_samples || m[i].f == w->f_restarts || m[i].f == w->f_ar_bytes))
            rm_series_inc(s, rm_series_value(*m[i].s));
        *m[i].s = s;
        if (had) {
            const char *const vals[] = {w->job, old};
            rm_metric_remove(m[i].f, vals); /* no stale series for a rank we no longer are */
        }
    }
    w->tokens_per_s = NULL; /* re-fetched under the new rank by the next set */
    if (had) {
        const char *const vals[] = {w->job, old};
        rm_metric_remove(w->f_peak_rss, vals);
        rm_metric *lazy[] = {w->f_tokens_per_s, w->f_tensor_rank, w->f_tensor_bytes, w->f_tensor_wait};
        for (size_t k = 0; k < RM_ARRAY_LEN(lazy); k++)
            if (lazy[k])
                rm_metric_remove(lazy[k], vals);
        for (size_t k = 0; k < RM_ARRAY_LEN(MEM_KINDS); k++) {
            const char *const mv[] = {w->job, old, MEM_KINDS[k]};
            rm_metric_remove(w->f_memory, mv);
        }
    }
    return RM_OK;
}

int rm_wmetrics_set_memory(rm_wmetrics *w, double params, double grads, double optimizer, double activations,
                           double peak_rss, rm_err *err)
{
    const double v[] = {params, grads, optimizer, activations};
    for (size_t k = 0; k < RM_ARRAY_LEN(MEM_KINDS); k++) {
        const char *const mv[] = {w->job, w->rank, MEM_KINDS[k]};
        rm_series *s = rm_metric_with(w->f_memory, mv);
        if (!s)
            return rm_errf(err, RM_ENOMEM, "metrics: out of memory");
        rm_series_set(s, v[k]);
    }
    rm_series *s = rm_metric_with2(w->f_peak_rss, w->job, w->rank);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "metrics: out of memory");
    rm_series_set(s, peak_rss);
    return RM_OK;
}

int rm_wmetrics_port(const rm_wmetrics *w)
{
    return w->srv ? rm_http_port(w->srv) : 0;
}

void rm_wmetrics_stop(rm_wmetrics *w)
{
    if (!w)
        return;
    rm_http_stop(w->srv);
    rm_metrics_free(w->reg);
    rm_health_free(w->health);
    memset(w, 0, sizeof *w);
}

void rm_wmetrics_set_pipeline(rm_wmetrics *w, int stage, double bubble, double sent, double recv)
{
    static const char *const L2[] = {"job", "rank", NULL};
    static const char *const L3[] = {"job", "rank", "direction", NULL};
    rm_err e = {0};
    if (!w->reg)
        return;
    if (!w->f_pipe_stage &&
        (rm_metrics_gauge(w->reg, "ringmaster_worker_pipeline_stage",
                          "Pipeline stage of this rank (rank = replica x stages + stage).", L2,
                          &w->f_pipe_stage, &e) ||
         rm_metrics_gauge(w->reg, "ringmaster_worker_pipeline_bubble_ratio",
                          "Time waiting for a neighbouring stage over the time of the micro-batch "
                          "schedule, last step.",
                          L2, &w->f_pipe_bubble, &e) ||
         rm_metrics_counter(w->reg, "ringmaster_worker_pipeline_bytes_total",
                            "Bytes of activations and activation gradients exchanged with "
                            "neighbouring stages.",
                            L3, &w->f_pipe_bytes, &e))) {
        rm_warn("pipeline metrics: %s", e.msg);
        return;
    }
    rm_series *st = rm_metric_with2(w->f_pipe_stage, w->job, w->rank);
    rm_series *bu = rm_metric_with2(w->f_pipe_bubble, w->job, w->rank);
    const char *const vs[] = {w->job, w->rank, "sent"}, *const vr[] = {w->job, w->rank, "received"};
    rm_series *bs = rm_metric_with(w->f_pipe_bytes, vs), *br = rm_metric_with(w->f_pipe_bytes, vr);
    if (st)
        rm_series_set(st, stage);
    if (bu)
        rm_series_set(bu, bubble);
    if (bs)
        rm_series_inc(bs, sent);
    if (br)
        rm_series_inc(br, recv);
}

void rm_wmetrics_set_tensor(rm_wmetrics *w, int t, double bytes, double wait_s)
{
    rm_err e = {0};
    if (!w->reg)
        return;
    if (!w->f_tensor_rank &&
        (rm_metrics_gauge(w->reg, "ringmaster_worker_tensor_rank",
                          "Tensor rank t of this rank (rank = (replica x stages + stage) x T + t).", LABELS,
                          &w->f_tensor_rank, &e) ||
         rm_metrics_counter(w->reg, "ringmaster_worker_tensor_bytes_total",
                            "Bytes allreduced in the tensor group (Megatron's f and g, the embedding's and "
                            "the vocab-parallel cross-entropy's sums, the clipping norm).",
                            LABELS, &w->f_tensor_bytes, &e) ||
         rm_metrics_counter(w->reg, "ringmaster_worker_tensor_wait_seconds_total",
                            "Seconds spent in the tensor group's collectives.", LABELS, &w->f_tensor_wait,
                            &e))) {
        rm_warn("tensor metrics: %s", e.msg);
        return;
    }
    rm_series *r = rm_metric_with2(w->f_tensor_rank, w->job, w->rank);
    rm_series *b = rm_metric_with2(w->f_tensor_bytes, w->job, w->rank);
    rm_series *s = rm_metric_with2(w->f_tensor_wait, w->job, w->rank);
    if (r)
        rm_series_set(r, t);
    if (b)
        rm_series_inc(b, bytes);
    if (s)
        rm_series_inc(s, wait_s);
}

void rm_wmetrics_set_tokens_per_second(rm_wmetrics *w, double v)
{
    rm_err e = {0};
    if (!w->reg)
        return;
    if (!w->f_tokens_per_s &&
        rm_metrics_gauge(w->reg, "ringmaster_worker_tokens_per_second",
                         "Training tokens per second on this worker (last interval; language models).",
                         LABELS, &w->f_tokens_per_s, &e)) {
        rm_warn("tokens/s metric: %s", e.msg);
        return;
    }
    if (!w->tokens_per_s && !(w->tokens_per_s = rm_metric_with2(w->f_tokens_per_s, w->job, w->rank)))
        return;
    rm_series_set(w->tokens_per_s, v);
}
