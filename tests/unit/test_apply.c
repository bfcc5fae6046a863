/* test_apply.c — the one executor of reconcile actions (operator/apply.h): every action reaches
 * its operation in order, a failure does not stop the rest, AGAIN and REQUEUE_AFTER are collected;
 * the transition diff both runtimes' metrics use. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>
#include "operator/apply.h"
#include "tests/unit/testutil.h"

typedef struct rec {
    char log[512];
    int failed_calls;
} rec;

static void put(rec *r, const char *s)
{
    size_t n = strlen(r->log);
    snprintf(r->log + n, sizeof r->log - n, "%s%s", n ? " " : "", s);
}

static int t_create(void *ud, int index, int epoch, rm_err *err)
{
    char b[32];
    snprintf(b, sizeof b, "C%d@%d", index, epoch);
    put(ud, b);
    return index == 2 ? rm_errf(err, RM_EIO, "quota") : RM_OK;
}
static int t_delete(void *ud, int index, bool force, const char *why, rm_err *err)
{
    char b[64];
    (void)err;
    snprintf(b, sizeof b, "D%d%s(%s)", index, force ? "!" : "", why);
    put(ud, b);
    return RM_APPLY_AGAIN;
}
static int t_restart(void *ud, int from, rm_err *err)
{
    char b[32];
    (void)err;
    snprintf(b, sizeof b, "R%d", from);
    put(ud, b);
    return RM_OK;
}
static int t_event(void *ud, bool warning, const char *reason, const char *msg, rm_err *err)
{
    char b[96];
    (void)err;
    snprintf(b, sizeof b, "%c:%s:%s", warning ? 'W' : 'E', reason, msg);
    put(ud, b);
    return RM_OK;
}
static void t_failed(void *ud, const rm_action *a, int rc, const rm_err *err)
{
    rec *r = ud;
    r->failed_calls++;
    CU_ASSERT_EQUAL(a->type, RM_ACT_CREATE_WORKER);
    CU_ASSERT_EQUAL(rc, RM_EIO);
    CU_ASSERT_STRING_EQUAL(err->msg, "quota");
}

static void test_apply_order_errors_again(void)
{
    rm_action acts[8];
    memset(acts, 0, sizeof acts);
    acts[0] = (rm_action){.type = RM_ACT_CREATE_WORKER, .index = 1, .epoch = 3};
    acts[1] = (rm_action){.type = RM_ACT_CREATE_WORKER, .index = 2, .epoch = 3};
    acts[2] = (rm_action){.type = RM_ACT_REQUEUE_AFTER, .seconds = 5};
    acts[3] = (rm_action){.type = RM_ACT_RESTART_GROUP, .epoch = 3};
    acts[4] = (rm_action){.type = RM_ACT_EVENT, .warning = true, .reason = "WorkerFailed", .message = "m"};
    acts[5] = (rm_action){.type = RM_ACT_REQUEUE_AFTER, .seconds = 2};
    acts[6] = (rm_action){.type = RM_ACT_STOP_RDZV}; /* no operation: nothing to do */
    acts[7] = (rm_action){.type = RM_ACT_DELETE_WORKER, .index = 0, .force = true, .reason = "failed"};
    rm_runtime_ops ops = {.create_worker = t_create,
                          .delete_worker = t_delete,
                          .restart_group = t_restart,
                          .event = t_event,
                          .failed = t_failed};
    rec r = {0};
    rm_apply_result res;
    CU_ASSERT_EQUAL(rm_apply_actions(&ops, &r, acts, 8, &res), RM_EIO);
    CU_ASSERT_STRING_EQUAL(r.log, "C1@3 C2@3 R3 W:WorkerFailed:m D0!(failed)");
    CU_ASSERT_EQUAL(res.first_rc, RM_EIO);
    CU_ASSERT_EQUAL(res.failures, 1);
    CU_ASSERT_EQUAL(r.failed_calls, 1);
    CU_ASSERT_TRUE(res.again);
    CU_ASSERT_DOUBLE_EQUAL(res.requeue_after, 2, 1e-9);
    /* nothing to do: a clean result */
    CU_ASSERT_EQUAL(rm_apply_actions(&ops, &r, acts, 0, &res), RM_OK);
    CU_ASSERT_FALSE(res.again);
    CU_ASSERT_EQUAL(res.requeue_after, 0);
}

static void test_transition(void)
{
    rm_tj_status a, b;
    memset(&a, 0, sizeof a);
    b = a;
    rm_tj_set_condition(&b, RM_COND_CREATED, true, "TrainingJobCreated", "x", 1, 10);
    b.restarts = 2;
    b.phase = RM_PHASE_FAILED;
    rm_transition t;
    rm_status_transition(&a, &b, &t);
    CU_ASSERT_TRUE(t.created && t.failed && t.phase_changed);
    CU_ASSERT_FALSE(t.succeeded);
    CU_ASSERT_EQUAL(t.restarts, 2);
    rm_status_transition(&b, &b, &t); /* the same status again: nothing to count */
    CU_ASSERT_FALSE(t.created || t.failed || t.succeeded || t.phase_changed);
    CU_ASSERT_EQUAL(t.restarts, 0);
    a = b;
    b.phase = RM_PHASE_SUCCEEDED;
    b.restarts = 1; /* never negative */
    rm_status_transition(&a, &b, &t);
    CU_ASSERT_TRUE(t.succeeded);
    CU_ASSERT_EQUAL(t.restarts, 0);
}

void rm_suite_apply(void)
{
    static const rm_test_case cases[] = {
        {"actions reach their operations in order; errors, again, requeue", test_apply_order_errors_again},
        {"status transitions for metrics", test_transition},
    };
    RM_ADD_SUITE("apply", NULL, NULL, cases);
}
