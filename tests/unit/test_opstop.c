/* test_opstop.c — the operator stops serving its rendezvous promptly while workers long-poll it
 * (stop used to wait out every held join, up to 10 s, holding the leadership lock), and
 * serves again after a lost-then-regained leadership. */
#include <CUnit/CUnit.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/http.h"
#include "common/rdzv.h"
#include "operator/kube/operator.h"
#include "operator/kube/runtime.h"
#include "common/clock.h"
#include "tests/unit/testutil.h"

#define JOB "ns/j"
#define TOKEN "secret-token"

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
    rm_rdzv_client *c = rm_rdzv_client_new(j->url, JOB, TOKEN, j->wid, NULL);
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
    CU_ASSERT_EQUAL_FATAL(members(r), 1); /* precondition: the poll is in the server */
    usleep(100000);
    double t0 = rm_mono();
    rm_op_rdzv_stop(r, srv, true);
    double took = rm_mono() - t0;
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
    rm_op_rdzv_stop(r, NULL, false); /* nothing served: a no-op */
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

/* ---- rm_kube_rt_new's out-of-memory path, observed ----
 * The old code destroyed rt->mu on that path before initialising it. glibc accepts destroying a
 * zeroed mutex, so nothing failed by itself; this binary therefore interposes strdup,
 * pthread_mutex_init and pthread_mutex_destroy. Outside a test's tracking window (thread-local,
 * so other threads never notice) they only forward to the real functions; inside it strdup fails
 * at its nth call and a destroy of a mutex this thread did not initialise in the window is
 * counted. */
static _Thread_local int tl_track, tl_strdup_calls, tl_strdup_fail_at, tl_ninit, tl_bad_destroys;
static _Thread_local const void *tl_inited[16];

static void *real_fn(const char *name, void **cache)
{
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    }
    return f;
}

char *strdup(const char *s)
{
    static void *real;
    char *(*f)(const char *) = (char *(*)(const char *))real_fn("strdup", &real);
    if (tl_track && tl_strdup_fail_at > 0 && ++tl_strdup_calls >= tl_strdup_fail_at)
        return NULL;
    return f(s);
}

int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    static void *real;
    int (*f)(pthread_mutex_t *, const pthread_mutexattr_t *) =
        (int (*)(pthread_mutex_t *, const pthread_mutexattr_t *))real_fn("pthread_mutex_init", &real);
    if (tl_track && tl_ninit < 16)
        tl_inited[tl_ninit++] = m;
    return f(m, a);
}

int pthread_mutex_destroy(pthread_mutex_t *m)
{
    static void *real;
    int (*f)(pthread_mutex_t *) = (int (*)(pthread_mutex_t *))real_fn("pthread_mutex_destroy", &real);
    if (tl_track) {
        bool known = false;
        for (int i = 0; i < tl_ninit; i++)
            if (tl_inited[i] == m)
                known = true;
        if (!known)
            tl_bad_destroys++;
    }
    return f(m);
}

/* Each of rm_kube_rt_new's allocations after the object itself fails in turn: the call reports
 * out of memory, returns nothing, and its cleanup destroys only a mutex it initialised. */
static void test_rt_new_out_of_memory(void)
{
    int dummy;
    rm_kube_rt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.client = (rm_kube_client *)&dummy; /* never dereferenced by rm_kube_rt_new */
    cfg.pods = (rm_informer *)&dummy;
    char url[] = "http://10.0.0.1:29400", image[] = "img:1", inst[] = "op-0";
    cfg.rdzv_url = url; /* not literals: the compiler may not fold these strdups away */
    cfg.worker_image = image;
    cfg.instance = inst;
    for (int nth = 1; nth <= 3; nth++) {
        rm_kube_rt *rt = (rm_kube_rt *)&rt;
        rm_err e = {0};
        tl_strdup_calls = tl_ninit = tl_bad_destroys = 0;
        tl_strdup_fail_at = nth;
        tl_track = 1;
        int rc = rm_kube_rt_new(&cfg, &rt, &e);
        tl_track = 0;
        CU_ASSERT_EQUAL(rc, RM_ENOMEM);
        CU_ASSERT_PTR_NULL(rt);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "out of memory"));
        CU_ASSERT(tl_strdup_calls >= nth);   /* the injected failure was reached */
        CU_ASSERT_EQUAL(tl_bad_destroys, 0); /* no never-initialised mutex destroyed */
    }
    /* the interposers themselves: a destroy without an init in the window is seen */
    pthread_mutex_t m;
    memset(&m, 0, sizeof m);
    tl_ninit = tl_bad_destroys = 0;
    tl_track = 1;
    pthread_mutex_destroy(&m);
    tl_track = 0;
    CU_ASSERT_EQUAL(tl_bad_destroys, 1);
    /* and with no failure injected the constructor succeeds */
    rm_kube_rt *rt = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_kube_rt_new(&cfg, &rt, &e), RM_OK);
    CU_ASSERT_PTR_NOT_NULL(rt);
    rm_kube_rt_free(rt);
}

void rm_suite_opstop(void)
{
    static const rm_test_case cases[] = {
        {"stopping the rendezvous wakes long polls and can serve again", test_stop_wakes_long_polls},
        {"rm_kube_rt_new refuses a config without a client", test_rt_new_bad_config},
        {"rm_kube_rt_new out of memory: cleanup destroys only what it made", test_rt_new_out_of_memory},
    };
    RM_ADD_SUITE("opstop", NULL, NULL, cases);
}
