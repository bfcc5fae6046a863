/* test_leader.c — Lease leader election against a fake coordination.k8s.io API that enforces
 * resourceVersion (409 on a stale PUT): create when absent, a second candidate waits while the
 * holder renews, takes over only after leaseDuration without change (local clock), the old leader
 * then loses, and a release hands over at once. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/http.h"
#include "common/clock.h"
#include "operator/kube/client.h"
#include "operator/kube/leader.h"
#include "tests/unit/testutil.h"

typedef struct lstore {
    pthread_mutex_t mu;
    cJSON *lease; /* NULL = absent */
    int rv;
    int puts, conflicts;
    int delay_ms; /* every answer waits this long (a hung API server) */
} lstore;

static const char *PATH = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";

static int h_lease(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    lstore *s = ud;
    pthread_mutex_lock(&s->mu);
    int delay_ms = s->delay_ms;
    pthread_mutex_unlock(&s->mu);
    if (delay_ms > 0)
        usleep((useconds_t)delay_ms * 1000);
    pthread_mutex_lock(&s->mu);
    int rc;
    bool item = strlen(req->path) > strlen(PATH);
    if (strcmp(req->method, "GET") == 0 && item) {
        rc = s->lease ? rm_http_reply_json(resp, 200, s->lease)
                      : rm_http_reply_text(resp, 404, "application/json",
                                           "{\"kind\":\"Status\",\"reason\":\"NotFound\",\"code\":404}");
    } else if (strcmp(req->method, "POST") == 0 && !item) {
        if (s->lease) {
            rc = rm_http_reply_text(resp, 409, "application/json",
                                    "{\"reason\":\"AlreadyExists\",\"code\":409}");
        } else {
            s->lease = cJSON_Parse(req->body);
            char rv[16];
            snprintf(rv, sizeof(rv), "%d", ++s->rv);
            cJSON *md = cJSON_GetObjectItemCaseSensitive(s->lease, "metadata");
            cJSON_AddStringToObject(md, "resourceVersion", rv);
            rc = rm_http_reply_json(resp, 201, s->lease);
        }
    } else if (strcmp(req->method, "PUT") == 0 && item && s->lease) {
        cJSON *b = cJSON_Parse(req->body);
        const cJSON *brv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b, "metadata"),
                                                            "resourceVersion");
        char cur[16];
        snprintf(cur, sizeof(cur), "%d", s->rv);
        s->puts++;
        if (!cJSON_IsString(brv) || strcmp(brv->valuestring, cur) != 0) {
            s->conflicts++;
            cJSON_Delete(b);
            rc = rm_http_reply_text(resp, 409, "application/json", "{\"reason\":\"Conflict\",\"code\":409}");
        } else {
            char rv[16];
            snprintf(rv, sizeof(rv), "%d", ++s->rv);
            cJSON *md = cJSON_GetObjectItemCaseSensitive(b, "metadata");
            cJSON_ReplaceItemInObjectCaseSensitive(md, "resourceVersion", cJSON_CreateString(rv));
            cJSON_Delete(s->lease);
            s->lease = b;
            rc = rm_http_reply_json(resp, 200, s->lease);
        }
    } else {
        rc = rm_http_reply_error(resp, 405, "unexpected");
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* A fake Lease API on a free loopback port and a client (opts co) talking to it. */
static int fake_start(lstore *s, const rm_kube_client_opts *co, rm_http_server **srv, rm_kube_client **c)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    rm_http_route routes[] = {{NULL, PATH, 1, h_lease, s}};
    rm_http_opts ho = {.bind = "127.0.0.1:0"};
    rm_err e = {0};
    int rc = rm_http_start(&ho, routes, 1, srv, &e);
    if (rc)
        return rc;
    char server[64];
    snprintf(server, sizeof(server), "http://127.0.0.1:%d", rm_http_port(*srv));
    rm_kube_config cfg = {.server = server};
    return rm_kube_client_new(&cfg, co, c, &e);
}

static void fake_stop(lstore *s, rm_http_server *srv, rm_kube_client *c)
{
    rm_kube_client_free(c);
    rm_http_stop(srv);
    cJSON_Delete(s->lease);
    pthread_mutex_destroy(&s->mu);
}

static const char *holder(lstore *s, char *buf, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->lease, "spec"),
                                                      "holderIdentity");
    snprintf(buf, cap, "%s", cJSON_IsString(h) ? h->valuestring : "(none)");
    pthread_mutex_unlock(&s->mu);
    return buf;
}

static int field_int(lstore *s, const char *f)
{
    pthread_mutex_lock(&s->mu);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s->lease, "spec"), f);
    int n = cJSON_IsNumber(v) ? v->valueint : -1;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void test_acquire_renew_takeover_release(void)
{
    lstore s;
    rm_http_server *srv = NULL;
    rm_kube_client *c = NULL;
    rm_err e = {0};
    rm_kube_client_opts co = {.qps = -1, .max_retries = 1};
    CU_ASSERT_EQUAL_FATAL(fake_start(&s, &co, &srv, &c), RM_OK);
    rm_leader_opts oa = {.namespace_ = "ns", .name = "lock", .identity = "A", .lease_s = 15};
    rm_leader_opts ob = oa;
    ob.identity = "B";
    rm_leader *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_leader_new(c, &oa, &a, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_leader_new(c, &ob, &b, &e), RM_OK);
    char hb[64];
    /* A creates the Lease */
    CU_ASSERT_TRUE(rm_leader_try(a, 100));
    CU_ASSERT_STRING_EQUAL(holder(&s, hb, sizeof(hb)), "A");
    CU_ASSERT_EQUAL(field_int(&s, "leaseDurationSeconds"), 15);
    CU_ASSERT_EQUAL(field_int(&s, "leaseTransitions"), 0);
    /* B sees it held (its local clock starts now) */
    CU_ASSERT_FALSE(rm_leader_try(b, 1000));
    /* A renews: the record changes, so B's observation restarts */
    CU_ASSERT_TRUE(rm_leader_try(a, 110));
    CU_ASSERT_FALSE(rm_leader_try(b, 1010));
    CU_ASSERT_FALSE(rm_leader_try(b, 1024)); /* 14 s since the change B saw */
    /* A stops renewing; 15 s after B last saw a change, B takes over */
    CU_ASSERT_TRUE(rm_leader_try(b, 1026));
    CU_ASSERT_STRING_EQUAL(holder(&s, hb, sizeof(hb)), "B");
    CU_ASSERT_EQUAL(field_int(&s, "leaseTransitions"), 1);
    /* A comes back: the record changed under it, so it waits a full lease */
    CU_ASSERT_FALSE(rm_leader_try(a, 120));
    CU_ASSERT_TRUE(rm_leader_try(b, 1028)); /* renew keeps transitions */
    CU_ASSERT_EQUAL(field_int(&s, "leaseTransitions"), 1);
    /* B releases: holder "" and duration 1; A acquires at once */
    CU_ASSERT_EQUAL(rm_leader_release(b), RM_OK);
    CU_ASSERT_STRING_EQUAL(holder(&s, hb, sizeof(hb)), "");
    CU_ASSERT_EQUAL(field_int(&s, "leaseDurationSeconds"), 1);
    CU_ASSERT_TRUE(rm_leader_try(a, 121));
    CU_ASSERT_STRING_EQUAL(holder(&s, hb, sizeof(hb)), "A");
    CU_ASSERT_EQUAL(field_int(&s, "leaseTransitions"), 2);
    rm_leader_stop(a); /* not started: stop must still be safe; A holds → release */
    CU_ASSERT_STRING_EQUAL(holder(&s, hb, sizeof(hb)), "");
    rm_leader_stop(b);
    rm_leader_stop(NULL);
    fake_stop(&s, srv, c);
}

static void test_race_409(void)
{
    /* Two candidates fetch the same expired record; only one PUT can win. */
    lstore s;
    rm_http_server *srv = NULL;
    rm_kube_client *c = NULL;
    rm_err e = {0};
    rm_kube_client_opts co = {.qps = -1, .max_retries = 1};
    CU_ASSERT_EQUAL_FATAL(fake_start(&s, &co, &srv, &c), RM_OK);
    /* threads: start two electors with short leases; exactly one leads at any time */
    rm_leader_opts o1 = {.namespace_ = "ns",
                         .name = "l2",
                         .identity = "X",
                         .lease_s = 1,
                         .renew_deadline_s = 0.8,
                         .retry_s = 0.1};
    rm_leader_opts o2 = o1;
    o2.identity = "Y";
    rm_leader *x = NULL, *y = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_leader_start(c, &o1, &x, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_leader_start(c, &o2, &y, &e), RM_OK);
    int both = 0, some = 0;
    for (int i = 0; i < 30; i++) {
        bool lx = rm_leader_is_leader(x), ly = rm_leader_is_leader(y);
        both += lx && ly;
        some += lx || ly;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CU_ASSERT_EQUAL(both, 0);
    CU_ASSERT(some > 20);
    bool x_led = rm_leader_is_leader(x);
    rm_leader *leader = x_led ? x : y, *other = x_led ? y : x;
    /* the leader stops (releases): the other takes over within a few retry periods */
    rm_leader_stop(leader);
    int waited = 0;
    while (!rm_leader_is_leader(other) && waited < 40) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        waited++;
    }
    CU_ASSERT_TRUE(rm_leader_is_leader(other));
    rm_leader_stop(other);
    fake_stop(&s, srv, c);
}

/* The elector's API calls are bounded by the renew deadline and do not queue behind the main
 * client's rate limiter: a leader must learn it can no longer renew before another candidate may
 * take the Lease, not after a 30 s request timeout (times retries) or a backlog of reconcile
 * requests. */
static void test_bounded_by_renew_deadline(void)
{
    lstore s;
    rm_http_server *srv = NULL;
    rm_kube_client *c = NULL;
    rm_err e = {0};
    /* the operator's main client, busy: 1 request/s, default 30 s timeout and retries */
    rm_kube_client_opts co = {.qps = 1, .burst = 1};
    CU_ASSERT_EQUAL_FATAL(fake_start(&s, &co, &srv, &c), RM_OK);
    rm_leader_opts oa = {.namespace_ = "ns",
                         .name = "hung",
                         .identity = "A",
                         .lease_s = 2,
                         .renew_deadline_s = 1,
                         .retry_s = 0.2};
    rm_leader *a = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_leader_new(c, &oa, &a, &e), RM_OK);
    /* acquire, then renew three times in a row: none waits for the main client's bucket */
    for (int i = 0; i < 4; i++) {
        double t0 = rm_mono();
        CU_ASSERT_TRUE(rm_leader_try(a, t0));
        CU_ASSERT(rm_mono() - t0 < 0.5);
    }
    /* the API server hangs for longer than the renew deadline: the try gives up within it */
    pthread_mutex_lock(&s.mu);
    s.delay_ms = 2500;
    pthread_mutex_unlock(&s.mu);
    double t0 = rm_mono();
    CU_ASSERT_FALSE(rm_leader_try(a, t0));
    double took = rm_mono() - t0;
    CU_ASSERT(took < 1.5);
    pthread_mutex_lock(&s.mu);
    s.delay_ms = 0;
    pthread_mutex_unlock(&s.mu);
    rm_leader_stop(a);
    fake_stop(&s, srv, c);
}

void rm_suite_leader(void)
{
    static const rm_test_case cases[] = {
        {"acquire_renew_takeover_release", test_acquire_renew_takeover_release},
        {"two_electors_one_leader", test_race_409},
        {"bounded_by_renew_deadline", test_bounded_by_renew_deadline},
    };
    RM_ADD_SUITE("leader", NULL, NULL, cases);
}
