/* test_nccl_wait.c — the NCCL backend's wait/timeout/abort state machine (worker/comm/nccl_wait.h),
 * driven by a fake communicator on a virtual clock: a collective in flight that completes, one
 * whose inputs are late (the deadline must not run meanwhile), an async error, a dead peer (remote
 * error) and a hung one (timeout), and abort() from another thread while a collective is polled or
 * just finishing — the communicator is aborted exactly once and an abort is never lost. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tests/unit/testutil.h"
#include "worker/comm/nccl_wait.h"

/* The fake: times are virtual seconds, advanced by pause() (so timeouts run instantly). */
typedef struct fake_comm {
    double t;         /* virtual clock */
    double inputs_at; /* started() becomes DONE at this time (<0: never) */
    double done_at;   /* done() becomes DONE at this time after the inputs (<0: never) */
    double error_at;  /* async_error() fails from this time (<0: never) */
    int error_code;   /* RM_ECLOSED (remote peer) or RM_EIO */
    double t_started; /* when started() first said DONE */
    int polls;
    double step;           /* clock advance per pause */
    pthread_mutex_t *gate; /* when set, pause() waits on real time (for the threaded tests) */
} fake_comm;

static int f_started(void *ctx, char *why, size_t cap)
{
    fake_comm *f = ctx;
    if (f->inputs_at >= 0 && f->t >= f->inputs_at) {
        if (f->t_started < 0)
            f->t_started = f->t;
        return RM_NW_DONE;
    }
    return RM_NW_PENDING;
}
static int f_done(void *ctx, char *why, size_t cap)
{
    fake_comm *f = ctx;
    f->polls++;
    if (f->done_at >= 0 && f->t_started >= 0 && f->t >= f->t_started + f->done_at)
        return RM_NW_DONE;
    return RM_NW_PENDING;
}
static int f_async(void *ctx, char *why, size_t cap)
{
    fake_comm *f = ctx;
    if (f->error_at >= 0 && f->t >= f->error_at) {
        snprintf(why, cap, "%s",
                 f->error_code == RM_ECLOSED ? "remote process exited" : "unhandled cuda error");
        return f->error_code;
    }
    return RM_NW_DONE;
}
static double f_now(void *ctx)
{
    return ((fake_comm *)ctx)->t;
}
static void f_pause(void *ctx, double waited)
{
    fake_comm *f = ctx;
    (void)waited;
    f->t += f->step;
    if (f->gate) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static const rm_nccl_probe fake_probe = {f_started, f_done, f_async, f_now, f_pause};

static fake_comm fake(double inputs_at, double done_at)
{
    fake_comm f;
    memset(&f, 0, sizeof f);
    f.inputs_at = inputs_at;
    f.done_at = done_at;
    f.error_at = -1;
    f.t_started = -1;
    f.step = 0.01;
    return f;
}

static void test_completes(void)
{
    fake_comm f = fake(0, 0.5);
    rm_nccl_wait_cfg cfg = {"ncclAllReduce", 1.0, 100.0, NULL};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_nccl_wait(&fake_probe, &f, &cfg, &e), RM_OK);
    CU_ASSERT(f.t >= 0.5 && f.t < 0.6);
}

/* The backward runs 30 s before the inputs are ready; the collective then needs 0.5 s of a 1 s
 * deadline. The deadline counts from the inputs, so this succeeds (it timed out before the fix). */
static void test_deadline_starts_with_inputs(void)
{
    fake_comm f = fake(30.0, 0.5);
    f.step = 0.05;
    rm_nccl_wait_cfg cfg = {"ncclAllReduce", 1.0, 300.0, NULL};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_nccl_wait(&fake_probe, &f, &cfg, &e), RM_OK);
    CU_ASSERT(f.t >= 30.5);
    /* and the wait for the inputs is bounded too */
    f = fake(-1, 0.5);
    f.step = 1.0;
    cfg.start_timeout_s = 20.0;
    CU_ASSERT_EQUAL(rm_nccl_wait(&fake_probe, &f, &cfg, &e), RM_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "inputs were not ready within 20.0 s"));
    CU_ASSERT(f.t >= 20.0 && f.t <= 22.0);
}

static void test_hung_peer_times_out(void)
{
    fake_comm f = fake(0, -1);
    rm_nccl_wait_cfg cfg = {"ncclAllReduce", 2.0, 100.0, NULL};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_nccl_wait(&fake_probe, &f, &cfg, &e), RM_ETIMEDOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "ncclAllReduce: not finished within 2.0 s"));
    CU_ASSERT(f.t >= 2.0 && f.t < 2.1);
}

static void test_dead_peer_and_async_error(void)
{
    fake_comm f = fake(0, -1);
    f.error_at = 0.3;
    f.error_code = RM_ECLOSED;
    rm_nccl_wait_cfg cfg = {"ncclAllReduce", 10.0, 100.0, NULL};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_nccl_wait(&fake_probe, &f, &cfg, &e), RM_ECLOSED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "peer failure: remote process exited"));
    CU_ASSERT(f.t < 0.4); /* fails fast, not at the deadline */
    f = fake(0, -1);
    f.error_at = 0.0;
    f.error_code = RM_EIO;
    CU_ASSERT_EQUAL(rm_nccl_wait(&fake_probe, &f, &cfg, &e), RM_EIO);
    /* an operation that completes is not failed by an error raised afterwards */
    f = fake(0, 0.2);
    f.error_at = 0.2;
    f.error_code = RM_EIO;
    CU_ASSERT_EQUAL(rm_nccl_wait(&fake_probe, &f, &cfg, &e), RM_OK);
}

static void test_first_collective_timeout(void)
{
    CU_ASSERT_EQUAL(rm_nccl_collective_timeout(true, 10.0, 30.0), 30.0);
    CU_ASSERT_EQUAL(rm_nccl_collective_timeout(false, 10.0, 30.0), 10.0);
    CU_ASSERT_EQUAL(rm_nccl_collective_timeout(true, 60.0, 30.0), 60.0);
}

/* ---- abort ---- */

static int g_aborts;
static void count_abort(void *ctx)
{
    (void)ctx;
    g_aborts++;
}

static void test_abort_idle_and_destroy(void)
{
    rm_nccl_guard g;
    rm_err e = {0};
    g_aborts = 0;
    rm_nccl_guard_init(&g, count_abort, NULL);
    CU_ASSERT_EQUAL(rm_nccl_guard_begin(&g, &e), RM_ECLOSED); /* not alive yet */
    rm_nccl_guard_set_alive(&g);
    CU_ASSERT_EQUAL(rm_nccl_guard_begin(&g, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_nccl_guard_end(&g, RM_OK, &e), RM_OK);
    CU_ASSERT_EQUAL(g_aborts, 0);
    rm_nccl_guard_abort(&g); /* idle: aborts at once */
    CU_ASSERT_EQUAL(g_aborts, 1);
    rm_nccl_guard_abort(&g); /* twice: still once */
    CU_ASSERT_EQUAL(g_aborts, 1);
    CU_ASSERT_EQUAL(rm_nccl_guard_begin(&g, &e), RM_ECLOSED);
    CU_ASSERT_FALSE(rm_nccl_guard_release(&g));
    CU_ASSERT_EQUAL(g_aborts, 1);
    rm_nccl_guard_destroy(&g);
    /* a healthy one is released for a clean finalize, no abort */
    rm_nccl_guard_init(&g, count_abort, NULL);
    rm_nccl_guard_set_alive(&g);
    CU_ASSERT(rm_nccl_guard_release(&g));
    CU_ASSERT_EQUAL(g_aborts, 1);
    rm_nccl_guard_destroy(&g);
}

/* A failed collective aborts the communicator (once) and later calls fail fast. */
static void test_failed_collective_aborts(void)
{
    rm_nccl_guard g;
    rm_err e = {0};
    g_aborts = 0;
    rm_nccl_guard_init(&g, count_abort, NULL);
    rm_nccl_guard_set_alive(&g);
    CU_ASSERT_EQUAL(rm_nccl_guard_begin(&g, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_nccl_guard_end(&g, RM_ETIMEDOUT, &e), RM_ETIMEDOUT);
    CU_ASSERT_EQUAL(g_aborts, 1);
    CU_ASSERT_EQUAL(rm_nccl_guard_begin(&g, &e), RM_ECLOSED);
    CU_ASSERT_FALSE(rm_nccl_guard_release(&g));
    CU_ASSERT_EQUAL(g_aborts, 1);
    rm_nccl_guard_destroy(&g);
}

/* The lost-abort window: abort() lands while the collective is in flight and the wait then
 * succeeds. The abort must win: the call reports RM_ECLOSED and the communicator is aborted. */
static void test_abort_overtakes_success(void)
{
    rm_nccl_guard g;
    rm_err e = {0};
    g_aborts = 0;
    rm_nccl_guard_init(&g, count_abort, NULL);
    rm_nccl_guard_set_alive(&g);
    CU_ASSERT_EQUAL(rm_nccl_guard_begin(&g, &e), RM_OK);
    rm_nccl_guard_abort(&g); /* in flight: only the flag */
    CU_ASSERT_EQUAL(g_aborts, 0);
    CU_ASSERT_EQUAL(rm_nccl_guard_end(&g, RM_OK, &e), RM_ECLOSED);
    CU_ASSERT_EQUAL(g_aborts, 1);
    rm_nccl_guard_destroy(&g);
}

typedef struct {
    rm_nccl_guard *g;
    volatile int *polling;
} abort_arg;

static void *abort_later(void *p)
{
    abort_arg *a = p;
    while (!*a->polling) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
    rm_nccl_guard_abort(a->g);
    return NULL;
}

/* abort() from another thread while a collective that would never finish is polled: the waiter
 * sees it and fails with RM_ECLOSED well before the deadline, then aborts exactly once. */
static void test_abort_from_another_thread(void)
{
    rm_nccl_guard g;
    rm_err e = {0};
    g_aborts = 0;
    rm_nccl_guard_init(&g, count_abort, NULL);
    rm_nccl_guard_set_alive(&g);
    fake_comm f = fake(0, -1);
    pthread_mutex_t dummy = PTHREAD_MUTEX_INITIALIZER;
    f.gate = &dummy; /* real time passes between polls */
    f.step = 0.0001; /* 10000 polls per virtual second: the deadline is far */
    volatile int polling = 0;
    abort_arg a = {&g, &polling};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(rm_nccl_guard_begin(&g, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, abort_later, &a), 0);
    polling = 1;
    rm_nccl_wait_cfg cfg = {"ncclAllReduce", 60.0, 100.0, &g.aborted};
    int rc = rm_nccl_wait(&fake_probe, &f, &cfg, &e);
    rc = rm_nccl_guard_end(&g, rc, &e);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(rc, RM_ECLOSED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "aborted"));
    CU_ASSERT(f.t < 60.0);
    CU_ASSERT_EQUAL(g_aborts, 1);
    CU_ASSERT_FALSE(rm_nccl_guard_release(&g));
    CU_ASSERT_EQUAL(g_aborts, 1);
    rm_nccl_guard_destroy(&g);
}

void rm_suite_nccl_wait(void)
{
    static const rm_test_case cases[] = {
        {"a collective in flight completes", test_completes},
        {"the deadline starts when the inputs are ready", test_deadline_starts_with_inputs},
        {"a hung peer times out at the deadline", test_hung_peer_times_out},
        {"a dead peer / async error fails fast", test_dead_peer_and_async_error},
        {"the first collective gets the init timeout", test_first_collective_timeout},
        {"abort when idle, release at destroy", test_abort_idle_and_destroy},
        {"a failed collective aborts once", test_failed_collective_aborts},
        {"an abort overtaking a success is not lost", test_abort_overtakes_success},
        {"abort from another thread while polling", test_abort_from_another_thread},
    };
    RM_ADD_SUITE("nccl_wait", NULL, NULL, cases);
}
