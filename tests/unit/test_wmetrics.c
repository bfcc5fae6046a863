/* test_wmetrics.c — the worker's metric families: every required family is registered with job and
 * rank labels; re-binding to a new rank (elastic restart) carries the counters over and leaves no
 * series for the old rank; the HTTP endpoint serves /metrics, /healthz (503 once the progress
 * deadline passes without a beat) and /readyz. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/httpc.h"
#include "tests/unit/testutil.h"
#include "worker/wmetrics.h"

static void test_families_and_rank(void)
{
    rm_wmetrics w;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_wmetrics_start(&w, "off", "ns/job", 60, &e), RM_OK);
    CU_ASSERT_PTR_NULL(w.srv);
    rm_series_inc(w.samples, 640);
    rm_series_inc(w.restarts, 1);
    rm_series_set(w.step, 10);
    rm_series_observe(w.ar_seconds, 0.002);
    CU_ASSERT_EQUAL(rm_wmetrics_set_rank(&w, 3, &e), RM_OK);
    rm_series_inc(w.samples, 64);
    size_t len = 0;
    char *txt = rm_metrics_render(w.reg, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(txt);
    const char *names[] = {"ringmaster_worker_step",
                           "ringmaster_worker_loss",
                           "ringmaster_worker_samples_total",
                           "ringmaster_worker_epoch",
                           "ringmaster_worker_train_epoch",
                           "ringmaster_worker_restarts_total",
                           "ringmaster_worker_allreduce_seconds_bucket",
                           "ringmaster_worker_allreduce_bytes_total",
                           "ringmaster_worker_checkpoint_seconds_bucket",
                           "ringmaster_worker_last_checkpoint_step",
                           "ringmaster_worker_recovery_seconds_bucket",
                           "ringmaster_worker_test_accuracy",
                           "ringmaster_worker_val_loss"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char want[200];
        snprintf(want, sizeof want, "%s{job=\"ns/job\",rank=\"3\"", names[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(txt, want));
        if (!strstr(txt, want))
            fprintf(stderr, "missing %s\n", want);
    }
    CU_ASSERT_PTR_NULL(strstr(txt, "rank=\"0\"")); /* old rank's series removed */
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "ringmaster_worker_samples_total{job=\"ns/job\",rank=\"3\"} 704"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "ringmaster_worker_restarts_total{job=\"ns/job\",rank=\"3\"} 1"));
    free(txt);
    rm_wmetrics_stop(&w);
    rm_wmetrics_stop(&w);
}

/* tokens/s (docs/models-and-data.md, "Shapes and status"): a language model's worker exports it
 * under its current rank; an MLP worker, which never sets it, has no such family at all. */
static void test_tokens_per_second(void)
{
    rm_wmetrics w;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_wmetrics_start(&w, "off", "ns/job", 60, &e), RM_OK);
    size_t len = 0;
    char *txt = rm_metrics_render(w.reg, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(txt);
    CU_ASSERT_PTR_NULL(strstr(txt, "tokens_per_second"));
    free(txt);
    rm_wmetrics_set_tokens_per_second(&w, 4096);
    rm_wmetrics_set_tokens_per_second(&w, 8192);
    txt = rm_metrics_render(w.reg, &len);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(txt, "ringmaster_worker_tokens_per_second{job=\"ns/job\",rank=\"0\"} 8192"));
    free(txt);
    /* a new rank: the old rank's series goes, the next set lands under the new one */
    CU_ASSERT_EQUAL(rm_wmetrics_set_rank(&w, 2, &e), RM_OK);
    rm_wmetrics_set_tokens_per_second(&w, 100);
    txt = rm_metrics_render(w.reg, &len);
    CU_ASSERT_PTR_NULL(strstr(txt, "ringmaster_worker_tokens_per_second{job=\"ns/job\",rank=\"0\"}"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "ringmaster_worker_tokens_per_second{job=\"ns/job\",rank=\"2\"} 100"));
    free(txt);
    rm_wmetrics_stop(&w);
}

/* Tensor parallelism (docs/models-and-data.md, "Tensor parallelism"): a tensor rank's step adds its
 * tensor-group bytes and wait to the counters under its rank; a job without a tensor group has no
 * such family; a new rank leaves no series of the old one. */
static void test_tensor(void)
{
    rm_wmetrics w;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_wmetrics_start(&w, "off", "ns/job", 60, &e), RM_OK);
    size_t len = 0;
    char *txt = rm_metrics_render(w.reg, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(txt);
    CU_ASSERT_PTR_NULL(strstr(txt, "ringmaster_worker_tensor_"));
    free(txt);
    rm_wmetrics_set_tensor(&w, 1, 1000, 0.5);
    rm_wmetrics_set_tensor(&w, 1, 24, 0.25);
    txt = rm_metrics_render(w.reg, &len);
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "ringmaster_worker_tensor_rank{job=\"ns/job\",rank=\"0\"} 1"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(txt, "ringmaster_worker_tensor_bytes_total{job=\"ns/job\",rank=\"0\"} 1024"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(txt, "ringmaster_worker_tensor_wait_seconds_total{job=\"ns/job\",rank=\"0\"} 0.75"));
    free(txt);
    CU_ASSERT_EQUAL(rm_wmetrics_set_rank(&w, 3, &e), RM_OK);
    rm_wmetrics_set_tensor(&w, 1, 8, 0.125);
    txt = rm_metrics_render(w.reg, &len);
    CU_ASSERT_PTR_NULL(strstr(txt, "ringmaster_worker_tensor_bytes_total{job=\"ns/job\",rank=\"0\"}"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "ringmaster_worker_tensor_bytes_total{job=\"ns/job\",rank=\"3\"} 8"));
    free(txt);
    rm_wmetrics_stop(&w);
}

/* GET http://127.0.0.1:port<path>: the status (-1 if the request failed); *body (may be NULL)
 * gets an owned copy of the body. */
static int get(int port, const char *path, char **body)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    rm_httpc_resp r = {0};
    rm_err e = {0};
    int status = rm_httpc_get(url, 5000, &r, &e) == RM_OK ? r.status : -1;
    if (body)
        *body = r.body ? strdup(r.body) : NULL;
    rm_httpc_resp_free(&r);
    return status;
}

static void test_http(void)
{
    rm_wmetrics w;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_wmetrics_start(&w, "127.0.0.1:0", "ns/job", 0.3, &e), RM_OK);
    int port = rm_wmetrics_port(&w);
    CU_ASSERT_FATAL(port > 0);
    CU_ASSERT_EQUAL(get(port, "/readyz", NULL), 503); /* not ready while joining */
    rm_health_set_ready(w.health, true, NULL);
    rm_health_beat(w.health);
    CU_ASSERT_EQUAL(get(port, "/readyz", NULL), 200);
    CU_ASSERT_EQUAL(get(port, "/healthz", NULL), 200);
    usleep(500000); /* no beat for longer than the deadline */
    CU_ASSERT_EQUAL(get(port, "/healthz", NULL), 503);
    char *body = NULL;
    CU_ASSERT_EQUAL(get(port, "/metrics", &body), 200);
    CU_ASSERT(body && strstr(body, "ringmaster_worker_step{job=\"ns/job\",rank=\"0\"} 0"));
    free(body);
    rm_wmetrics_stop(&w);
}

void rm_suite_wmetrics(void)
{
    static const rm_test_case cases[] = {
        {"families_and_rank", test_families_and_rank},
        {"http_probes", test_http},
        {"tokens_per_second_lazily_per_rank", test_tokens_per_second},
        {"tensor_lazily_per_rank", test_tensor},
    };
    RM_ADD_SUITE("wmetrics", NULL, NULL, cases);
}
