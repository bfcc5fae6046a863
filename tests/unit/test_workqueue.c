/* test_workqueue.c — the operator's work queue: de-duplication, one key per worker, rate-limit
 * back-off, delayed adds (earliest wins), shutdown. A fake clock drives time-based cases. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "operator/kube/workqueue.h"
#include "tests/unit/testutil.h"

static double fake_t;
static double fake_now(void *ud)
{
    (void)ud;
    return fake_t;
}

static rm_wq *fake_q(void)
{
    rm_wq_opts o = {.now = fake_now, .qps = -1};
    fake_t = 1000;
    return rm_wq_new(&o);
}

static void get_expect(rm_wq *q, const char *want)
{
    char *k = NULL;
    int rc = rm_wq_get(q, 0.2, &k);
    CU_ASSERT_EQUAL_FATAL(rc, RM_OK);
    CU_ASSERT_STRING_EQUAL(k, want);
    free(k);
}

static void test_dedupe(void)
{
    rm_wq *q = fake_q();
    CU_ASSERT_EQUAL(rm_wq_add(q, "ns/a"), RM_OK);
    CU_ASSERT_EQUAL(rm_wq_add(q, "ns/a"), RM_OK);
    CU_ASSERT_EQUAL(rm_wq_add(q, "ns/b"), RM_OK);
    CU_ASSERT_EQUAL(rm_wq_add(q, "ns/a"), RM_OK);
    CU_ASSERT_EQUAL(rm_wq_len(q), 2);
    get_expect(q, "ns/a"); /* FIFO order of first add */
    get_expect(q, "ns/b");
    char *k = NULL;
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.05, &k), RM_ETIMEDOUT);
    CU_ASSERT_PTR_NULL(k);
    rm_wq_done(q, "ns/a");
    rm_wq_done(q, "ns/b");
    rm_wq_free(q);
}

/* The resync's lane: low keys wait behind every ordinary add; an ordinary add of a waiting low
 * key moves it to the front, once; a low key added while it is processed comes back low. */
static void test_low_lane(void)
{
    rm_wq *q = fake_q();
    char *k = NULL;
    CU_ASSERT_EQUAL(rm_wq_add_low(q, "low/a"), RM_OK);
    CU_ASSERT_EQUAL(rm_wq_add_low(q, "low/b"), RM_OK);
    CU_ASSERT_EQUAL(rm_wq_add_low(q, "low/a"), RM_OK); /* de-duplicated */
    CU_ASSERT_EQUAL(rm_wq_add(q, "hi/c"), RM_OK);
    get_expect(q, "hi/c"); /* added last, handed out first */
    get_expect(q, "low/a");
    get_expect(q, "low/b");
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.05, &k), RM_ETIMEDOUT);
    rm_wq_done(q, "hi/c");
    rm_wq_done(q, "low/a");
    rm_wq_done(q, "low/b");
    /* promoted: b waits low behind a; an ordinary add of b hands it out first, and only once */
    rm_wq_add_low(q, "low/a");
    rm_wq_add_low(q, "low/b");
    rm_wq_add(q, "low/b");
    rm_wq_add_low(q, "low/b"); /* already queued in front: stays there */
    get_expect(q, "low/b");
    get_expect(q, "low/a");
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.05, &k), RM_ETIMEDOUT); /* b's low entry was left behind */
    rm_wq_done(q, "low/a");
    /* b is processing: a low add comes back low at done, behind an ordinary add */
    rm_wq_add_low(q, "low/b");
    rm_wq_add(q, "hi/d");
    rm_wq_done(q, "low/b");
    get_expect(q, "hi/d");
    get_expect(q, "low/b");
    rm_wq_done(q, "hi/d");
    /* promoted while processing: comes back in front at done */
    rm_wq_add_low(q, "low/b");
    rm_wq_add_low(q, "low/e");
    rm_wq_add(q, "low/b");
    rm_wq_done(q, "low/b");
    get_expect(q, "low/b");
    get_expect(q, "low/e");
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.05, &k), RM_ETIMEDOUT);
    rm_wq_done(q, "low/b");
    rm_wq_done(q, "low/e");
    rm_wq_free(q);
}

/* low_workers: a resync holds at most that many workers; the others take changes at once, and
 * the next low key goes out when a low one is done (docs/operator-scale.md) */
static void test_low_workers(void)
{
    rm_wq_opts o = {.now = fake_now, .qps = -1, .low_workers = 1};
    rm_wq *q = rm_wq_new(&o);
    char *k = NULL;
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "low/%d", i);
        rm_wq_add_low(q, key);
    }
    get_expect(q, "low/0");
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.05, &k), RM_ETIMEDOUT); /* low/1 waits for low/0 */
    rm_wq_add(q, "hi/a");
    get_expect(q, "hi/a"); /* a change still gets a worker */
    rm_wq_done(q, "hi/a");
    rm_wq_add(q, "low/2"); /* promoted to the front lane: not the resync's turn to wait for */
    get_expect(q, "low/2");
    rm_wq_done(q, "low/2");
    rm_wq_done(q, "low/0");
    get_expect(q, "low/1");
    rm_wq_done(q, "low/1");
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.05, &k), RM_ETIMEDOUT); /* low/2's low entry was left behind */
    CU_ASSERT_EQUAL(rm_wq_len(q), 0);
    rm_wq_free(q);
}

static void test_one_key_one_worker(void)
{
    rm_wq *q = fake_q();
    rm_wq_add(q, "k");
    char *k = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_wq_get(q, 0.1, &k), RM_OK);
    /* added again while processing: not handed out until done */
    rm_wq_add(q, "k");
    rm_wq_add(q, "k");
    CU_ASSERT_EQUAL(rm_wq_len(q), 0);
    char *k2 = NULL;
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.05, &k2), RM_ETIMEDOUT);
    rm_wq_done(q, k);
    free(k);
    CU_ASSERT_EQUAL(rm_wq_len(q), 1); /* re-queued once, not twice */
    get_expect(q, "k");
    rm_wq_done(q, "k");
    CU_ASSERT_EQUAL(rm_wq_len(q), 0);
    rm_wq_free(q);
}

static void test_rate_limit_backoff(void)
{
    rm_wq_opts o = {.now = fake_now, .qps = -1, .base_delay_s = 0.005, .max_delay_s = 0.04};
    fake_t = 0;
    rm_wq *q = rm_wq_new(&o);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "x"), 0.005, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "x"), 0.010, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "x"), 0.020, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "x"), 0.040, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "x"), 0.040, 1e-9); /* capped */
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "y"), 0.005, 1e-9); /* per key */
    CU_ASSERT_EQUAL(rm_wq_num_requeues(q, "x"), 5);
    rm_wq_forget(q, "x");
    CU_ASSERT_EQUAL(rm_wq_num_requeues(q, "x"), 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "x"), 0.005, 1e-9);
    rm_wq_free(q);
    /* the overall bucket: qps 10, burst 2 → third immediate add waits 0.1 s */
    rm_wq_opts o2 = {.now = fake_now, .qps = 10, .burst = 2, .base_delay_s = 0.001};
    fake_t = 0;
    q = rm_wq_new(&o2);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "a"), 0.001, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "b"), 0.001, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_wq_when(q, "c"), 0.1, 1e-9);
    rm_wq_free(q);
}

static void test_delayed_add(void)
{
    rm_wq *q = fake_q();
    CU_ASSERT_EQUAL(rm_wq_add_after(q, "late", 10), RM_OK);
    CU_ASSERT_EQUAL(rm_wq_add_after(q, "soon", 5), RM_OK);
    CU_ASSERT_EQUAL(rm_wq_add_after(q, "soon", 1), RM_OK); /* earlier wins */
    CU_ASSERT_EQUAL(rm_wq_add_after(q, "soon", 8), RM_OK); /* later ignored */
    CU_ASSERT_EQUAL(rm_wq_delayed(q), 2);
    char *k = NULL;
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.02, &k), RM_ETIMEDOUT);
    fake_t += 1;
    get_expect(q, "soon");
    rm_wq_done(q, "soon");
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.02, &k), RM_ETIMEDOUT); /* stale heap entry at +5/+8 dropped */
    fake_t += 4.5;
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.02, &k), RM_ETIMEDOUT);
    fake_t += 5;
    get_expect(q, "late");
    rm_wq_done(q, "late");
    fake_t += 100;
    CU_ASSERT_EQUAL(rm_wq_get(q, 0.02, &k), RM_ETIMEDOUT); /* "soon" was not re-added */
    CU_ASSERT_EQUAL(rm_wq_delayed(q), 0);
    /* a zero delay is a plain add; a delayed key already queued is de-duplicated */
    rm_wq_add(q, "z");
    rm_wq_add_after(q, "z", 0);
    CU_ASSERT_EQUAL(rm_wq_len(q), 1);
    rm_wq_free(q);
}

/* Real threads hammer the queue; a key must never be processed by two workers at once. */
typedef struct hammer {
    rm_wq *q;
    atomic_int busy[8];
    atomic_int violations, processed;
} hammer;

static void *hammer_worker(void *arg)
{
    hammer *h = arg;
    for (;;) {
        char *k = NULL;
        if (rm_wq_get(h->q, -1, &k) != RM_OK)
            break;
        int i = k[1] - '0';
        if (atomic_fetch_add(&h->busy[i], 1) != 0)
            atomic_fetch_add(&h->violations, 1);
        usleep(200);
        atomic_fetch_sub(&h->busy[i], 1);
        atomic_fetch_add(&h->processed, 1);
        rm_wq_done(h->q, k);
        free(k);
    }
    return NULL;
}

static void test_concurrent_workers(void)
{
    hammer h;
    memset(&h, 0, sizeof(h));
    h.q = rm_wq_new(NULL);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, hammer_worker, &h);
    for (int n = 0; n < 2000; n++) {
        char k[4] = {'k', (char)('0' + n % 8), 0};
        rm_wq_add(h.q, k);
        if (n % 50 == 0)
            usleep(500);
    }
    usleep(100 * 1000);
    rm_wq_shutdown(h.q);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(atomic_load(&h.violations), 0);
    CU_ASSERT(atomic_load(&h.processed) >= 8);
    CU_ASSERT(atomic_load(&h.processed) < 2000); /* de-duplicated under load */
    CU_ASSERT_EQUAL(rm_wq_add(h.q, "late"), RM_ECLOSED);
    char *k = NULL;
    CU_ASSERT_EQUAL(rm_wq_get(h.q, 0.01, &k), RM_ECLOSED);
    rm_wq_free(h.q);
}

static size_t hook_depth;
static int hook_adds, hook_lat;
static void h_depth(void *ud, size_t d)
{
    (void)ud;
    hook_depth = d;
}
static void h_added(void *ud)
{
    (void)ud;
    hook_adds++;
}
static void h_lat(void *ud, double s)
{
    (void)ud;
    (void)s;
    hook_lat++;
}

static void test_hooks(void)
{
    rm_wq_opts o = {.hooks = {h_depth, h_added, h_lat, NULL}};
    rm_wq *q = rm_wq_new(&o);
    hook_adds = hook_lat = 0;
    rm_wq_add(q, "a");
    rm_wq_add(q, "a");
    rm_wq_add(q, "b");
    CU_ASSERT_EQUAL(hook_adds, 3);
    CU_ASSERT_EQUAL(hook_depth, 2);
    char *k = NULL;
    rm_wq_get(q, 0.1, &k);
    CU_ASSERT_EQUAL(hook_depth, 1);
    CU_ASSERT_EQUAL(hook_lat, 1);
    rm_wq_done(q, k);
    free(k);
    rm_wq_free(q);
    rm_wq_free(NULL);
}

void rm_suite_workqueue(void)
{
    static const rm_test_case cases[] = {
        {"dedupe", test_dedupe},
        {"one_key_one_worker", test_one_key_one_worker},
        {"low_lane", test_low_lane},
        {"low_workers", test_low_workers},
        {"rate_limit_backoff", test_rate_limit_backoff},
        {"delayed_add", test_delayed_add},
        {"concurrent_workers", test_concurrent_workers},
        {"hooks", test_hooks},
    };
    RM_ADD_SUITE("workqueue", NULL, NULL, cases);
}
