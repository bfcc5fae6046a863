/* Tests for common/health: liveness deadline, readiness flag, and the HTTP handlers. */
#include "common/health.h"
#include "common/clock.h"
#include "common/httpc.h"
#include "tests/unit/testutil.h"
#include <stdio.h>
#include <string.h>
#include <time.h>

static void test_live_deadline(void)
{
    rm_health *h = rm_health_new(0.05);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT_TRUE(rm_health_live(h));
    rm_sleep(0.12);
    CU_ASSERT_FALSE(rm_health_live(h));
    CU_ASSERT(rm_health_since_beat(h) >= 0.1);
    rm_health_beat(h);
    CU_ASSERT_TRUE(rm_health_live(h));
    CU_ASSERT(rm_health_since_beat(h) < 0.05);
    rm_sleep(0.12);
    rm_health_set_deadline(h, 0); /* disabled */
    CU_ASSERT_TRUE(rm_health_live(h));
    rm_health_free(h);
    rm_health_free(NULL);
}

static void test_handlers(void)
{
    /* 0.5 s, not 50 ms: the first GET must come back inside the deadline after the beat, and a
     * loopback round trip under ASan on a loaded 2-core CI machine took longer than 50 ms */
    rm_health *h = rm_health_new(0.5);
    rm_http_route rt[] = {
        {"GET", "/healthz", 0, rm_health_healthz, h},
        {"GET", "/readyz", 0, rm_health_readyz, h},
    };
    rm_http_opts o = {.bind = "127.0.0.1:0"};
    rm_http_server *s = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_http_start(&o, rt, 2, &s, &e), RM_OK);
    char hz[128], rz[128];
    snprintf(hz, sizeof hz, "http://127.0.0.1:%d/healthz", rm_http_port(s));
    snprintf(rz, sizeof rz, "http://127.0.0.1:%d/readyz", rm_http_port(s));
    rm_httpc_resp r;
    rm_health_beat(h);
    CU_ASSERT_EQUAL(rm_httpc_get(hz, 5000, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"status\":\"ok\""));
    rm_httpc_resp_free(&r);
    rm_sleep(0.7);
    CU_ASSERT_EQUAL(rm_httpc_get(hz, 5000, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 503);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"status\":\"stalled\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "\"secondsSinceProgress\":"));
    rm_httpc_resp_free(&r);

    CU_ASSERT_EQUAL(rm_httpc_get(rz, 5000, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 503);
    rm_httpc_resp_free(&r);
    rm_health_set_ready(h, false, "waiting for rendezvous");
    CU_ASSERT_EQUAL(rm_httpc_get(rz, 5000, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 503);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "waiting for rendezvous"));
    rm_httpc_resp_free(&r);
    rm_health_set_ready(h, true, NULL);
    CU_ASSERT_EQUAL(rm_httpc_get(rz, 5000, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    rm_httpc_resp_free(&r);
    rm_http_stop(s);
    rm_health_free(h);
}

void rm_suite_health(void)
{
    static const rm_test_case cases[] = {
        {"live_deadline", test_live_deadline},
        {"handlers", test_handlers},
    };
    RM_ADD_SUITE("health", NULL, NULL, cases);
}
