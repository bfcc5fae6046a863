/* Tests for status.progress.percent and etaSeconds (rm_tj_progress_estimate, common/trainingjob.h):
 * against the step budget for maxSteps and for epochs, with gradient accumulation, clamped at the
 * end, left out without a rate, for parameter servers and before the first step, and kept through
 * the status JSON. */
#include <math.h>
#include <string.h>
#include "common/trainingjob.h"
#include "tests/unit/testutil.h"

static rm_tj job(const char *spec)
{
    char doc[1024];
    snprintf(doc, sizeof doc,
             "{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\","
             "\"metadata\":{\"name\":\"p\"},\"spec\":%s}",
             spec);
    rm_tj tj;
    rm_err e = {0};
    cJSON *o = cJSON_Parse(doc);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(o, &tj, &e), RM_OK);
    cJSON_Delete(o);
    rm_tj_defaults(&tj);
    return tj;
}

static void test_estimate(void)
{
    /* maxSteps 1000, 64 a worker: at step 250 with 6400 samples/s (100 steps/s) 750 steps are left */
    rm_tj tj = job("{\"replicas\":2,\"training\":{\"maxSteps\":1000,\"batchSizePerWorker\":64}}");
    rm_tj_progress p = {.step = 250, .samples_per_second = 6400};
    rm_tj_progress_estimate(&tj.spec, &p);
    CU_ASSERT_DOUBLE_EQUAL(p.percent, 25.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(p.eta_seconds, 8.0, 1e-9); /* 7.5 s rounded up */
    p.step = 333;
    rm_tj_progress_estimate(&tj.spec, &p);
    CU_ASSERT_DOUBLE_EQUAL(p.percent, 33.3, 1e-9); /* 0.1 resolution, rounded down */
    p.step = 1200;                                 /* past the budget (a late report): 100, no ETA */
    rm_tj_progress_estimate(&tj.spec, &p);
    CU_ASSERT_DOUBLE_EQUAL(p.percent, 100.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(p.eta_seconds, 0.0, 1e-9);
    p = (rm_tj_progress){.step = 10, .samples_per_second = 0}; /* no rate yet: no ETA */
    rm_tj_progress_estimate(&tj.spec, &p);
    CU_ASSERT_DOUBLE_EQUAL(p.percent, 1.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(p.eta_seconds, 0.0, 1e-9);
    p = (rm_tj_progress){.step = 0, .samples_per_second = 100, .percent = 5, .eta_seconds = 9};
    rm_tj_progress_estimate(&tj.spec, &p); /* before the first step: left out (and reset) */
    CU_ASSERT_DOUBLE_EQUAL(p.percent, 0.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(p.eta_seconds, 0.0, 1e-9);
    rm_tj_free(&tj);

    /* epochs: Fashion-MNIST's 60,000 / (2 x 100 x accumulation 3) = 100 steps an epoch, 2 epochs */
    tj = job("{\"replicas\":2,\"training\":{\"epochs\":2,\"batchSizePerWorker\":100,"
             "\"gradientAccumulationSteps\":3}}");
    CU_ASSERT_DOUBLE_EQUAL(rm_tj_steps_total(&tj.spec), 200.0, 1e-9);
    p = (rm_tj_progress){.step = 50, .samples_per_second = 3000}; /* 300 samples a step: 10 steps/s */
    rm_tj_progress_estimate(&tj.spec, &p);
    CU_ASSERT_DOUBLE_EQUAL(p.percent, 25.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(p.eta_seconds, 15.0, 1e-9);
    rm_tj_free(&tj);

    /* parameter servers: every worker counts its own steps, so no job-wide percent */
    tj = job("{\"replicas\":2,\"strategy\":\"parameterServer\",\"parameterServer\":{\"replicas\":1},"
             "\"training\":{\"maxSteps\":100}}");
    p = (rm_tj_progress){.step = 50, .samples_per_second = 3000};
    rm_tj_progress_estimate(&tj.spec, &p);
    CU_ASSERT_DOUBLE_EQUAL(p.percent, 0.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(p.eta_seconds, 0.0, 1e-9);
    rm_tj_free(&tj);
}

static void test_json(void)
{
    rm_tj_status st;
    memset(&st, 0, sizeof st);
    st.progress.step = 250;
    st.progress.percent = 25.0;
    st.progress.eta_seconds = 8;
    cJSON *o = rm_tj_status_to_json(&st);
    CU_ASSERT_DOUBLE_EQUAL(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "progress"), "percent")->valuedouble,
                           25.0, 1e-9);
    rm_tj_status back;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_tj_status_from_json(o, &back, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(back.progress.percent, 25.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(back.progress.eta_seconds, 8.0, 1e-9);
    cJSON_Delete(o);
    memset(&st, 0, sizeof st); /* not known: left out */
    o = rm_tj_status_to_json(&st);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "progress"), "etaSeconds"));
    cJSON_Delete(o);
}

void rm_suite_progress(void);
void rm_suite_progress(void)
{
    static const rm_test_case cases[] = {
        {"percent_and_eta_against_the_budget", test_estimate},
        {"kept_through_the_status_json", test_json},
    };
    RM_ADD_SUITE("progress", NULL, NULL, cases);
}
