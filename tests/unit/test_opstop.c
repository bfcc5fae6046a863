/* test_opstop.c — the operator stops serving its rendezvous promptly while workers long-poll it
 * (issue 11: stop used to wait out every held join, up to 10 s, holding the leadership lock), and
 * serves again after a lost-then-regained leadership. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/http.h"
#include "common/rdzv.h"
#include "operator/kube/operator.h"
#include "operator/kube/runtime.h"
#include "tests/unit/testutil.h"

#define JOB "ns/j"
#define TOKEN "secret-token"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct joiner {
    char url[64], wid[8], addr[32];
    double timeout;
    int rc;
    rm_rdzv_round round;
    pthread_t th;
} joiner;

static void *join_main(void *arg)
{
    joiner *j = arg;
    rm_err e = {0};
    rm_rdzv_client *c = rm_rdzv_client_new(j->url, JOB, TOKEN, j->wid);
    j->rc = c ? rm_rdzv_join(c, j->addr, -1, j->timeout, &j->round, &e) : RM_ENOMEM;
    rm_rdzv_client_free(c);
    return NULL;
}

static void join_start(joiner *j, int port, const char *wid, double timeout)
{
    memset(j, 0, sizeof *j);
    snprintf(j->url, sizeof j->url, "http://127.0.0.1:%d", port);
    snprintf(j->wid, sizeof j->wid, "%s", wid);
    snprintf(j->addr, sizeof j->addr, "127.0.0.1:%d", 21000 + wid[0]);
    j->timeout = timeout;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&j->th, NULL, join_main, j), 0);
}

static int members(rm_rdzv *r)
{
    static rm_rdzv_state st;
    return rm_rdzv_snapshot(r, JOB, &st) == RM_OK ? st.nmembers : -1;
}

static void test_stop_wakes_long_polls(void)
{
    rm_rdzv *r = rm_rdzv_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    rm_http_server *srv = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_serve(r, "127.0.0.1:0", &srv, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_job_set(r, JOB, TOKEN, 2, 2, 5.0), RM_OK);
    /* one of two workers joined: its join is held server-side (a long poll) */
    joiner a;
    join_start(&a, rm_http_port(srv), "0", 4);
    for (int i = 0; i < 200 && members(r) < 1; i++)
        usleep(10000);
    CU_ASSERT_EQUAL_FATAL(members(r), 1);   /* precondition: the poll is in the server */
    usleep(100000);
    double t0 = mono();
    rm_op_rdzv_stop(r, srv, true);
    double took = mono() - t0;
    fprintf(stderr, "(stop took %.3f s) ", took);
    CU_ASSERT_TRUE(took < 1.0);
    pthread_join(a.th, NULL);
    CU_ASSERT_NOT_EQUAL(a.rc, RM_OK);
    /* leadership regained: the same rendezvous serves again and a round closes */
    srv = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_serve(r, "127.0.0.1:0", &srv, &e), RM_OK);
    joiner b, c;
    join_start(&b, rm_http_port(srv), "0", 10);
    join_start(&c, rm_http_port(srv), "1", 10);
    pthread_join(b.th, NULL);
    pthread_join(c.th, NULL);
    CU_ASSERT_EQUAL(b.rc, RM_OK);
    CU_ASSERT_EQUAL(c.rc, RM_OK);
    CU_ASSERT_EQUAL(b.round.world_size, 2);
    rm_rdzv_round_free(&b.round);
    rm_rdzv_round_free(&c.round);
    rm_op_rdzv_stop(r, srv, false);
    rm_op_rdzv_stop(r, NULL, false);   /* nothing served: a no-op */
    rm_rdzv_free(r);
}

/* A bad config is refused with a message, through the same error path an allocation failure
 * takes (which used to destroy a mutex that was never initialised). */
static void test_rt_new_bad_config(void)
{
    rm_kube_rt *rt = (rm_kube_rt *)&rt;
    rm_err e = {0};
    rm_kube_rt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    CU_ASSERT_EQUAL(rm_kube_rt_new(&cfg, &rt, &e), RM_EINVAL);
    CU_ASSERT_PTR_NULL(rt);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "client"));
    CU_ASSERT_EQUAL(rm_kube_rt_new(NULL, &rt, &e), RM_EINVAL);
    rm_kube_rt_free(NULL);
}

void rm_suite_opstop(void)
{
    static const rm_test_case cases[] = {
        {"stopping the rendezvous wakes long polls and can serve again", test_stop_wakes_long_polls},
        {"rm_kube_rt_new refuses a config without a client", test_rt_new_bad_config},
    };
    RM_ADD_SUITE("opstop", NULL, NULL, cases);
}
