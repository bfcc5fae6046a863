/* test_ps.c — parameter servers (docs/strategies.md#parameter-servers): spec.parameterServer
 * parse/default/validate with field-named errors; the pure cores of worker/ps/ps_core.h as tables:
 * shard partitioning (every size, S 1..8, remainders, layer snapping), the synchronous rule with backup
 * workers (which gradient is applied, averaged or dropped, in what order), the staleness bound (a fast
 * worker blocks, then proceeds when the slow one advances, and a dead one never holds it), and the
 * server's Adagrad on a shard against a hand-written reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/trainingjob.h"
#include "common/yaml.h"
#include "operator/kube/runtime.h"
#include "operator/launch.h"
#include "operator/ps_reconcile.h"
#include "tests/unit/testutil.h"
#include "common/faults.h"
#include "worker/optim/optim.h"
#include "worker/ps/ps_core.h"

static void test_ps_reconcile_table(void);
static void test_ps_pods(void);

/* ---- spec ---- */

static int parse_job(const char *spec_tail, rm_tj *tj, rm_err *e)
{
    char y[2048];
    snprintf(y, sizeof y,
             "apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: ps}\n"
             "spec:\n  replicas: 4\n%s",
             spec_tail);
    rm_yaml_docs *d = NULL;
    memset(tj, 0, sizeof *tj);
    int rc = rm_yaml_load(y, strlen(y), "t", &d, e);
    if (rc)
        return rc;
    cJSON *j = rm_yaml_take(d, 0);
    rm_yaml_free(d);
    rc = rm_tj_from_json(j, tj, e);
    cJSON_Delete(j);
    if (rc == RM_OK) {
        rm_tj_defaults(tj);
        rc = rm_tj_validate(tj, e);
    }
    return rc;
}

static void test_spec_defaults(void)
{
    rm_tj tj;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(parse_job("  strategy: parameterServer\n", &tj, &e), RM_OK);
    CU_ASSERT_EQUAL(tj.spec.strategy, RM_STRATEGY_PS);
    CU_ASSERT_EQUAL(tj.spec.ps.replicas, 1);
    CU_ASSERT_EQUAL(tj.spec.ps.mode, RM_PS_SYNC);
    CU_ASSERT_EQUAL(tj.spec.ps.backup_workers, 0);
    CU_ASSERT_EQUAL(tj.spec.ps.staleness_bound, 4);
    CU_ASSERT_EQUAL(tj.spec.ps.push_every_steps, 1);
    CU_ASSERT_EQUAL(tj.spec.ps.fetch_every_steps, 1);
    CU_ASSERT_EQUAL(tj.spec.ps.warm_start_steps, 0);
    /* round trip keeps the strategy and the explicit zero */
    rm_tj_free(&tj);
    CU_ASSERT_EQUAL_FATAL(parse_job("  strategy: parameterServer\n  parameterServer: {replicas: 2, "
                                    "mode: async, stalenessBound: 0, pushEverySteps: 3, "
                                    "warmStartSteps: 937}\n",
                                    &tj, &e),
                          RM_OK);
    CU_ASSERT_EQUAL(tj.spec.ps.staleness_bound, 0);
    cJSON *j = rm_tj_spec_to_json(&tj.spec);
    const cJSON *ps = cJSON_GetObjectItem(j, "parameterServer");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(j, "strategy")), "parameterServer");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(ps, "stalenessBound")->valueint, 0);
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(ps, "mode")), "async");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(ps, "pushEverySteps")->valueint, 3);
    CU_ASSERT_EQUAL(tj.spec.ps.warm_start_steps, 937);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(ps, "warmStartSteps")->valueint, 937);
    cJSON_Delete(j);
    rm_tj_free(&tj);
    /* allreduce jobs serialize without the new fields (older readers unaffected) */
    CU_ASSERT_EQUAL_FATAL(parse_job("", &tj, &e), RM_OK);
    j = rm_tj_spec_to_json(&tj.spec);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(j, "strategy"));
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(j, "parameterServer"));
    cJSON_Delete(j);
    rm_tj_free(&tj);
}

static void test_spec_errors(void)
{
    static const struct {
        const char *tail, *field, *msg;
    } T[] = {
        {"  strategy: ps\n", "spec.strategy", "allreduce, parameterServer"},
        {"  parameterServer: {replicas: 2}\n", "spec.parameterServer", "spec.strategy: parameterServer"},
        {"  strategy: parameterServer\n  parameterServer: {backupWorkers: 4}\n",
         "spec.parameterServer.backupWorkers", "must be < spec.replicas"},
        {"  strategy: parameterServer\n  parameterServer: {backupWorkers: -1}\n",
         "spec.parameterServer.backupWorkers", ">= 0"},
        {"  strategy: parameterServer\n  parameterServer: {mode: async, backupWorkers: 1}\n",
         "spec.parameterServer.backupWorkers", "mode: sync only"},
        {"  strategy: parameterServer\n  parameterServer: {replicas: 0}\n", "spec.parameterServer.replicas",
         "between 1 and 64"},
        {"  strategy: parameterServer\n  parameterServer: {replicas: 65}\n", "spec.parameterServer.replicas",
         "between 1 and 64"},
        {"  strategy: parameterServer\n  parameterServer: {mode: later}\n", "spec.parameterServer.mode",
         "sync, async"},
        {"  strategy: parameterServer\n  parameterServer: {stalenessBound: -2}\n",
         "spec.parameterServer.stalenessBound", "0 (unbounded)"},
        {"  strategy: parameterServer\n  parameterServer: {mode: async, pushEverySteps: 0}\n",
         "spec.parameterServer.pushEverySteps", "between 1 and 10000"},
        {"  strategy: parameterServer\n  parameterServer: {fetchEverySteps: 2}\n",
         "spec.parameterServer.fetchEverySteps", "mode: sync"},
        {"  strategy: parameterServer\n  parameterServer: {warmStartSteps: 100}\n",
         "spec.parameterServer.warmStartSteps", "mode: async only"},
        {"  strategy: parameterServer\n  parameterServer: {mode: async, warmStartSteps: -1}\n",
         "spec.parameterServer.warmStartSteps", "between 0 (no warm start)"},
        {"  strategy: parameterServer\n  parameterServer: {mode: async, warmStartSteps: 200000000}\n",
         "spec.parameterServer.warmStartSteps", "between 0 (no warm start)"},
        {"  strategy: parameterServer\n  parameterServer: {replica: 2}\n", "spec.parameterServer.replica",
         ""},
        {"  strategy: parameterServer\n  backend: nccl\n", "spec.backend", "spec.strategy: parameterServer"},
        {"  strategy: parameterServer\n  training: {precision: bf16}\n", "spec.training.precision",
         "spec.strategy: parameterServer"},
        {"  strategy: parameterServer\n  training: {sharding: optimizer}\n", "spec.training.sharding",
         "spec.strategy: parameterServer"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++) {
        rm_tj tj;
        rm_err e = {0};
        int rc = parse_job(T[i].tail, &tj, &e);
        CU_ASSERT_NOT_EQUAL(rc, RM_OK);
        if (strcmp(e.field, T[i].field) != 0 || !strstr(e.msg, T[i].msg))
            fprintf(stderr, "case %zu: field=%s msg=%s\n", i, e.field, e.msg);
        CU_ASSERT_STRING_EQUAL(e.field, T[i].field);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, T[i].msg));
        rm_tj_free(&tj);
    }
}

/* Workers per server: every worker holds one member's place on every server (RM_PS_MAX_MEMBERS, one
 * kept), so 63 workers validate and 64 - by spec.replicas or by spec.maxReplicas - do not. */
static void test_spec_worker_limit(void)
{
    static const struct {
        const char *counts, *field; /* field NULL: accepted */
    } T[] = {
        {"replicas: 63", NULL},
        {"replicas: 2\n  minReplicas: 1\n  maxReplicas: 63", NULL},
        {"replicas: 64", "spec.replicas"},
        {"replicas: 100", "spec.replicas"},
        {"replicas: 2\n  minReplicas: 1\n  maxReplicas: 64", "spec.maxReplicas"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++) {
        char y[1024];
        snprintf(y, sizeof y,
                 "apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: ps}\n"
                 "spec:\n  %s\n  strategy: parameterServer\n  parameterServer: {replicas: 2}\n",
                 T[i].counts);
        rm_yaml_docs *d = NULL;
        rm_err e = {0};
        rm_tj tj;
        memset(&tj, 0, sizeof tj);
        CU_ASSERT_EQUAL_FATAL(rm_yaml_load(y, strlen(y), "t", &d, &e), RM_OK);
        cJSON *j = rm_yaml_take(d, 0);
        rm_yaml_free(d);
        int rc = rm_tj_from_json(j, &tj, &e);
        cJSON_Delete(j);
        CU_ASSERT_EQUAL_FATAL(rc, RM_OK);
        rm_tj_defaults(&tj);
        rc = rm_tj_validate(&tj, &e);
        if (!T[i].field) {
            if (rc != RM_OK)
                fprintf(stderr, "case %zu: %s: %s\n", i, e.field, e.msg);
            CU_ASSERT_EQUAL(rc, RM_OK);
        } else {
            CU_ASSERT_NOT_EQUAL(rc, RM_OK);
            CU_ASSERT_STRING_EQUAL(e.field, T[i].field);
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "must be <= 63 with spec.strategy: parameterServer"));
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "connection to every server"));
        }
        rm_tj_free(&tj);
    }
}

/* ---- partition ---- */

static void check_partition(size_t total, const size_t *b, int nb, int S)
{
    size_t off[64], len[64];
    rm_err e = {0};
    int rc = rm_ps_partition(total, b, nb, S, off, len, &e);
    if ((size_t)S > total) {
        CU_ASSERT_EQUAL(rc, RM_EINVAL);
        return;
    }
    CU_ASSERT_EQUAL_FATAL(rc, RM_OK);
    size_t pos = 0, slack = total / (8 * (size_t)S);
    for (int i = 0; i < S; i++) {
        CU_ASSERT_EQUAL(off[i], pos); /* contiguous, in order */
        CU_ASSERT(len[i] >= 1);       /* never empty */
        /* within two snaps (one per end) of 1/S, rounding included */
        double ideal = (double)total / S;
        CU_ASSERT(fabs((double)len[i] - ideal) <= 2.0 * (double)slack + 1.0);
        pos += len[i];
    }
    CU_ASSERT_EQUAL(pos, total); /* covers everything */
}

static void test_partition_every_size(void)
{
    /* every size up to 300 with and without layer boundaries, S = 1..8 */
    for (size_t total = 1; total <= 300; total++) {
        size_t b[4] = {0, total / 3, total / 2 + 1, total};
        for (int S = 1; S <= 8; S++) {
            check_partition(total, NULL, 0, S);
            check_partition(total, b, 4, S);
        }
    }
    /* the default MLP 784-512-256-10: layer starts 0, 401920, 533504 (total 535818) */
    size_t mlp[] = {0, 401920, 533504, 535818};
    for (int S = 1; S <= 8; S++)
        check_partition(535818, mlp, 4, S);
    rm_err e = {0};
    size_t off[64], len[64];
    CU_ASSERT_EQUAL(rm_ps_partition(10, NULL, 0, 0, off, len, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_ps_partition(1000, NULL, 0, 65, off, len, &e), RM_EINVAL);
}

static void test_partition_snaps(void)
{
    static const struct {
        size_t total;
        size_t b[3];
        int S;
        size_t want_cut;
    } T[] = {
        {1000, {0, 510, 1000}, 2, 510}, /* 10 away, slack 62: snapped to the layer boundary */
        {1000, {0, 600, 1000}, 2, 500}, /* 100 away: cut inside the layer */
        {1000, {0, 440, 1000}, 2, 440}, /* 60 away: still within slack */
        {1001, {0, 0, 1001}, 2, 500},   /* remainder: floor(1001/2) */
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++) {
        size_t off[2], len[2];
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_ps_partition(T[i].total, T[i].b, 3, T[i].S, off, len, &e), RM_OK);
        CU_ASSERT_EQUAL(off[1], T[i].want_cut);
        CU_ASSERT_EQUAL(len[0] + len[1], T[i].total);
    }
}

/* ---- the synchronous rule ---- */

static void test_sync_rule_table(void)
{
    /* 3 workers, b = 1: need 2. Each row: worker, tag, gradient value -> outcome, version after */
    static const struct {
        int w;
        int64_t tag;
        float g;
        rm_ps_outcome out;
    } T[] = {
        {0, 0, 1.0f, RM_PS_ACCEPTED},
        {0, 0, 9.0f, RM_PS_DROP_DUP},    /* same worker twice: not counted twice */
        {2, 1, 9.0f, RM_PS_AHEAD},       /* from the future: refused */
        {2, 0, 3.0f, RM_PS_COMPLETE},    /* the N-b-th: step 0 applies with avg(1, 3) = 2 */
        {1, 0, 100.0f, RM_PS_DROP_LATE}, /* the straggler's gradient for step 0: dropped */
        {1, 1, 5.0f, RM_PS_ACCEPTED},    /* it fetched and computes step 1: accepted */
        {0, 1, 7.0f, RM_PS_COMPLETE},    /* avg(5, 7) = 6 */
        {5000, 2, 1.0f, RM_PS_BAD},
    };
    rm_ps_sync s;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ps_sync_init(&s, 2, 0, 2, &e), RM_OK);
    float avg[2];
    float want_avg[] = {2.0f, 6.0f};
    int napplied = 0;
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++) {
        float g[2] = {T[i].g, -T[i].g};
        rm_ps_outcome o = rm_ps_sync_push(&s, T[i].w, T[i].tag, g);
        CU_ASSERT_EQUAL(o, T[i].out);
        if (o == RM_PS_COMPLETE) {
            CU_ASSERT(rm_ps_sync_ready(&s));
            CU_ASSERT_EQUAL(rm_ps_sync_average(&s, avg), 2);
            CU_ASSERT_DOUBLE_EQUAL(avg[0], want_avg[napplied], 1e-6);
            CU_ASSERT_DOUBLE_EQUAL(avg[1], -want_avg[napplied], 1e-6);
            napplied++;
            CU_ASSERT_EQUAL(s.version, napplied);
        }
    }
    CU_ASSERT_EQUAL(napplied, 2);
    CU_ASSERT_EQUAL(s.dropped, 2);                   /* one duplicate, one late */
    CU_ASSERT_EQUAL(rm_ps_sync_average(&s, avg), 0); /* nothing pending */
    rm_ps_sync_free(&s);
}

/* The server averages in place (out == accum): the next step's first gradient must replace the
 * mean left there, not add to it; one gradient alone is its own mean. */
static void test_sync_average_in_place(void)
{
    rm_ps_sync s;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ps_sync_init(&s, 2, 0, 2, &e), RM_OK);
    float a[2] = {1, 10}, b[2] = {3, 30}, c[2] = {5, -4}, d[2] = {7, 8};
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 0, 0, a), RM_PS_ACCEPTED);
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 1, 0, b), RM_PS_COMPLETE);
    CU_ASSERT_EQUAL(rm_ps_sync_average(&s, s.accum), 2);
    CU_ASSERT_DOUBLE_EQUAL(s.accum[0], 2, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(s.accum[1], 20, 1e-6);
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 1, 1, c), RM_PS_ACCEPTED);
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 0, 1, d), RM_PS_COMPLETE);
    CU_ASSERT_EQUAL(rm_ps_sync_average(&s, s.accum), 2);
    CU_ASSERT_DOUBLE_EQUAL(s.accum[0], 6, 1e-6); /* (5 + 7) / 2, nothing of step 0 left */
    CU_ASSERT_DOUBLE_EQUAL(s.accum[1], 2, 1e-6);
    rm_ps_sync_set_need(&s, 1); /* a single survivor */
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 0, 2, a), RM_PS_COMPLETE);
    CU_ASSERT_EQUAL(rm_ps_sync_average(&s, s.accum), 1);
    CU_ASSERT_DOUBLE_EQUAL(s.accum[0], 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(s.accum[1], 10, 1e-6);
    CU_ASSERT_EQUAL(s.version, 3);
    rm_ps_sync_free(&s);
}

static void test_sync_b0_and_shrink(void)
{
    /* b = 0 with 3 workers: nothing applies until all three arrived; averaged in full */
    rm_ps_sync s;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ps_sync_init(&s, 1, 10, 3, &e), RM_OK);
    float g1 = 1, g2 = 2, g3 = 6, out = 0;
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 0, 10, &g1), RM_PS_ACCEPTED);
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 1, 10, &g2), RM_PS_ACCEPTED);
    CU_ASSERT_FALSE(rm_ps_sync_ready(&s));
    /* the controller declared worker 2 dead: the world shrank to 2, the step completes now */
    rm_ps_sync_set_need(&s, 2);
    CU_ASSERT(rm_ps_sync_ready(&s));
    CU_ASSERT_EQUAL(rm_ps_sync_average(&s, &out), 2);
    CU_ASSERT_DOUBLE_EQUAL(out, 1.5, 1e-6);
    CU_ASSERT_EQUAL(s.version, 11);
    /* its replacement is taken back at the next step */
    rm_ps_sync_set_need(&s, 3);
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 2, 11, &g3), RM_PS_ACCEPTED);
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 0, 11, &g1), RM_PS_ACCEPTED);
    CU_ASSERT_EQUAL(rm_ps_sync_push(&s, 1, 11, &g2), RM_PS_COMPLETE);
    CU_ASSERT_EQUAL(rm_ps_sync_average(&s, &out), 3);
    CU_ASSERT_DOUBLE_EQUAL(out, 3.0, 1e-6);
    rm_ps_sync_free(&s);
}

/* The view rule (who a step waits for) as a table driving the sync rule: 4 workers. Each row is
 * one request as the server sees it: the worker's view (epoch, live), then optionally its push
 * for a step; the row says whether the view was taken, what the step then needs, whether the
 * step completes and with how many gradients. */
static void test_sync_view_table(void)
{
    static const struct {
        const char *what;
        int64_t epoch;
        int live, b, w;
        int64_t tag; /* -1: no push (a fetch carrying the view) */
        bool taken;
        int need;
        rm_ps_outcome out; /* of the push */
        int averaged;      /* > 0: the step completes with this many */
    } T[] = {
        {"w0 pushes step 0 in round 1", 1, 4, 0, 0, 0, true, 4, RM_PS_ACCEPTED, 0},
        {"w1", 1, 4, 0, 1, 0, false, 4, RM_PS_ACCEPTED, 0},
        {"w2", 1, 4, 0, 2, 0, false, 4, RM_PS_ACCEPTED, 0},
        /* w3 died; the controller opened epoch 2 and the survivors' re-joins settled at 3 */
        {"survivor fetch: epoch 2, 3 alive", 2, 3, 0, 0, -1, true, 3, RM_PS_ACCEPTED, 3},
        {"a late view of round 1 is ignored", 1, 4, 0, 1, 1, false, 3, RM_PS_ACCEPTED, 0},
        {"w0 step 1", 2, 3, 0, 0, 1, false, 3, RM_PS_ACCEPTED, 0},
        {"w2 step 1: complete with 3", 2, 3, 0, 2, 1, false, 3, RM_PS_COMPLETE, 3},
        /* the replacement joined: round 2 closed with 4 */
        {"replacement's view", 2, 4, 0, 3, 2, true, 4, RM_PS_ACCEPTED, 0},
        {"survivor with the old count: ignored", 2, 3, 0, 0, 2, false, 4, RM_PS_ACCEPTED, 0},
        {"w1", 2, 4, 0, 1, 2, false, 4, RM_PS_ACCEPTED, 0},
        {"w2: the fourth, the replacement's among them", 2, 4, 0, 2, 2, false, 4, RM_PS_COMPLETE, 4},
        {"bad live ignored", 3, 0, 0, 0, -1, false, 4, RM_PS_ACCEPTED, 0},
        /* b = 1 and two deaths at once: need live - b = 1 */
        {"epoch 3, 2 alive, b=1", 3, 2, 1, 0, 3, true, 1, RM_PS_COMPLETE, 1},
        {"the other survivor is late for step 3", 3, 2, 1, 1, 3, false, 1, RM_PS_DROP_LATE, 0},
    };
    rm_ps_sync s;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ps_sync_init(&s, 1, 0, 4, &e), RM_OK);
    rm_ps_view v = {0, 4};
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++) {
        bool taken = rm_ps_view_note(&v, T[i].epoch, T[i].live);
        rm_ps_sync_set_need(&s, rm_ps_sync_need_for(v.live, T[i].b));
        if (taken != T[i].taken || s.need != T[i].need)
            fprintf(stderr, "row %zu (%s): taken %d need %d\n", i, T[i].what, taken, s.need);
        CU_ASSERT_EQUAL(taken, T[i].taken);
        CU_ASSERT_EQUAL(s.need, T[i].need);
        float g = (float)(T[i].w + 1);
        if (T[i].tag >= 0)
            CU_ASSERT_EQUAL(rm_ps_sync_push(&s, T[i].w, T[i].tag, &g), T[i].out);
        if (T[i].averaged) {
            float out;
            CU_ASSERT(rm_ps_sync_ready(&s));
            CU_ASSERT_EQUAL(rm_ps_sync_average(&s, &out), T[i].averaged);
        } else {
            CU_ASSERT_FALSE(rm_ps_sync_ready(&s));
        }
    }
    CU_ASSERT_EQUAL(s.version, 4);
    rm_ps_sync_free(&s);
    /* need and the linear rule */
    CU_ASSERT_EQUAL(rm_ps_sync_need_for(4, 0), 4);
    CU_ASSERT_EQUAL(rm_ps_sync_need_for(4, 1), 3);
    CU_ASSERT_EQUAL(rm_ps_sync_need_for(1, 1), 1);
    CU_ASSERT_EQUAL(rm_ps_sync_need_for(2, -3), 2);
    CU_ASSERT_DOUBLE_EQUAL(rm_ps_lr_scale(4, 4), 1.0, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(rm_ps_lr_scale(3, 4), 0.75, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(rm_ps_lr_scale(5, 4), 1.0, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(rm_ps_lr_scale(0, 4), 0.25, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(rm_ps_lr_scale(3, 0), 1.0, 1e-7);
    rm_ps_view w = {5, 2};
    CU_ASSERT_FALSE(rm_ps_view_note(&w, -1, 3));
    CU_ASSERT_FALSE(rm_ps_view_note(&w, 6, RM_PS_MAX_WORKERS + 1));
    CU_ASSERT_FALSE(rm_ps_view_note(&w, 5, 2));
    CU_ASSERT(rm_ps_view_note(&w, 5, 3));
    CU_ASSERT(rm_ps_view_note(&w, 6, 1));
    CU_ASSERT_EQUAL(w.epoch, 6);
    CU_ASSERT_EQUAL(w.live, 1);
}

/* ---- the staleness bound ---- */

static void test_staleness_bound(void)
{
    static rm_ps_clocks c; /* large: not on the stack */
    memset(&c, 0, sizeof c);
    double dead = 10;
    /* s = 2: worker 0 fast, worker 1 slow */
    rm_ps_clocks_note(&c, 0, 0, 1.0);
    rm_ps_clocks_note(&c, 1, 0, 1.0);
    static const struct {
        int w;
        int64_t step;
        double now;
        bool ok;
    } T[] = {
        {0, 1, 1.1, true},
        {0, 2, 1.2, true},  /* 2 ahead of the slowest: allowed */
        {0, 3, 1.3, false}, /* 3 ahead: blocks */
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++) {
        CU_ASSERT_EQUAL(rm_ps_clocks_may_proceed(&c, T[i].w, T[i].step, 2, T[i].now, dead), T[i].ok);
        if (T[i].ok)
            rm_ps_clocks_note(&c, T[i].w, T[i].step, T[i].now);
    }
    /* the slow one advances: the fast one proceeds */
    rm_ps_clocks_note(&c, 1, 1, 2.0);
    CU_ASSERT(rm_ps_clocks_may_proceed(&c, 0, 3, 2, 2.0, dead));
    CU_ASSERT_EQUAL(rm_ps_clocks_min(&c, 2.0, dead), 1);
    /* unbounded (s = 0) never blocks */
    CU_ASSERT(rm_ps_clocks_may_proceed(&c, 0, 1000, 0, 2.0, dead));
    /* the slow one dies (silent for longer than dead_after): it no longer holds anybody */
    rm_ps_clocks_note(&c, 0, 3, 20.0);
    CU_ASSERT(rm_ps_clocks_may_proceed(&c, 0, 4, 2, 20.0, dead));
    CU_ASSERT_EQUAL(rm_ps_clocks_min(&c, 20.0, dead), 3);
    /* a clock never goes backwards (a late message from before a fetch) */
    rm_ps_clocks_note(&c, 0, 1, 20.5);
    CU_ASSERT_EQUAL(c.step[0], 3);
    CU_ASSERT_EQUAL(rm_ps_staleness(10, 7), 3);
    CU_ASSERT_EQUAL(rm_ps_staleness(7, 10), 0);
}

/* ---- warm start: who is held at the draw, and the bound in force ---- */

static void test_warm_start(void)
{
    static rm_ps_clocks c; /* large: not on the stack */
    double dead = 10;
    /* seen0: when worker 0 was last heard from (0: never) */
    static const struct {
        int w;
        int64_t applied, warm;
        double seen0, now;
        bool held;
    } T[] = {
        {1, 0, 0, 1.0, 2.0, false},   /* no warm start: nobody waits */
        {0, 0, 100, 1.0, 2.0, false}, /* worker 0 is the warm-up replica */
        {0, 99, 100, 1.0, 2.0, false},
        {1, 0, 100, 1.0, 2.0, true},     /* the others wait for the first 100 updates */
        {3, 99, 100, 1.0, 2.0, true},    /* one short */
        {3, 100, 100, 1.0, 2.0, false},  /* the 100th applied: everybody goes */
        {2, 5000, 100, 1.0, 2.0, false}, /* long after (or a server restored past it) */
        {1, 0, 100, 0.0, 50.0, true},    /* worker 0 never heard from: still starting, wait */
        {1, 40, 100, 1.0, 11.0, true},   /* worker 0 silent 10 s: not yet dead */
        {1, 40, 100, 1.0, 11.5, false},  /* silent longer: it no longer holds the others */
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++) {
        memset(&c, 0, sizeof c);
        if (T[i].seen0 > 0)
            rm_ps_clocks_note(&c, 0, T[i].applied, T[i].seen0);
        bool h = rm_ps_warm_holds(T[i].w, T[i].applied, T[i].warm, &c, T[i].now, dead);
        if (h != T[i].held)
            fprintf(stderr, "warm case %zu: held=%d\n", i, h);
        CU_ASSERT_EQUAL(h, T[i].held);
    }
    /* the staleness bound is off while worker 0 runs alone, in force from the W-th update on */
    static const struct {
        int bound;
        int64_t applied, warm;
        int want;
    } B[] = {
        {4, 0, 0, 4}, {4, 0, 100, 0}, {4, 99, 100, 0}, {4, 100, 100, 4}, {0, 10, 100, 0}, {0, 200, 100, 0},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(B); i++)
        CU_ASSERT_EQUAL(rm_ps_warm_bound(B[i].bound, B[i].applied, B[i].warm), B[i].want);
    /* with the bound off, worker 0 runs 99 steps ahead of workers parked at clock 0 */
    memset(&c, 0, sizeof c);
    rm_ps_clocks_note(&c, 1, 0, 1.0);
    rm_ps_clocks_note(&c, 0, 99, 1.5);
    CU_ASSERT(rm_ps_clocks_may_proceed(&c, 0, 99, rm_ps_warm_bound(4, 98, 100), 1.5, dead));
    CU_ASSERT(!rm_ps_clocks_may_proceed(&c, 0, 101, rm_ps_warm_bound(4, 100, 100), 1.5, dead));
}

/* ---- Adagrad on a shard == a reference, and shards == the whole vector ---- */

static void test_adagrad_shards_reference(void)
{
    enum { N = 37, STEPS = 5 };
    rm_optimizer_spec sp = {.type = RM_OPT_ADAGRAD, .eps = 1e-10, .weight_decay = 0.01};
    float whole[N], sharded[N];
    double ref[N], acc[N];
    for (int i = 0; i < N; i++) {
        whole[i] = sharded[i] = (float)(0.1 * i - 1.0);
        ref[i] = whole[i];
        acc[i] = 0;
    }
    rm_err e = {0};
    rm_optim ow;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&ow, rm_kernels_cpu(), &sp, N, &e), RM_OK);
    size_t off[3], len[3];
    CU_ASSERT_EQUAL_FATAL(rm_ps_partition(N, NULL, 0, 3, off, len, &e), RM_OK);
    rm_optim os[3];
    for (int s = 0; s < 3; s++)
        CU_ASSERT_EQUAL_FATAL(rm_optim_init(&os[s], rm_kernels_cpu(), &sp, len[s], &e), RM_OK);
    float lr = 0.05f;
    for (int t = 0; t < STEPS; t++) {
        float g[N];
        for (int i = 0; i < N; i++)
            g[i] = (float)sin(0.7 * i + t);
        rm_optim_step(&ow, whole, g, lr);
        for (int s = 0; s < 3; s++)
            rm_optim_step(&os[s], sharded + off[s], g + off[s], lr);
        for (int i = 0; i < N; i++) { /* g += wd w; G += g^2; w -= lr g / (sqrt(G) + eps) */
            double gi = g[i] + 0.01 * ref[i];
            acc[i] += gi * gi;
            ref[i] -= lr * gi / (sqrt(acc[i]) + 1e-10);
        }
    }
    for (int i = 0; i < N; i++) {
        CU_ASSERT_DOUBLE_EQUAL(whole[i], ref[i], 1e-5);
        CU_ASSERT_EQUAL(whole[i], sharded[i]); /* element-wise: bit-identical */
    }
    rm_optim_free(&ow);
    for (int s = 0; s < 3; s++)
        rm_optim_free(&os[s]);
}

/* ---- RINGMASTER_FAULT: the slow kind and role=ps ---- */

static void test_faults_slow_and_ps(void)
{
    rm_faults fs;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_faults_parse("slow:rank=1:factor=4;slow:rank=2:factor=3:step=10:until=20;"
                                          "exit:role=ps:index=1:step=50",
                                          &fs, &e),
                          RM_OK);
    CU_ASSERT_EQUAL(fs.n, 3);
    static const struct {
        int rank;
        int64_t step;
        double f;
    } T[] = {
        {1, 0, 4}, {1, 100000, 4}, {0, 5, 1}, {2, 9, 1}, {2, 10, 3}, {2, 19, 3}, {2, 20, 1},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++)
        CU_ASSERT_DOUBLE_EQUAL(rm_faults_slow(&fs, T[i].rank, T[i].step), T[i].f, 1e-12);
    /* slow faults never "fire"; the server's exit fires for its pseudo-rank only */
    CU_ASSERT_PTR_NULL(rm_faults_due(&fs, 1, 0));
    CU_ASSERT_PTR_NULL(rm_faults_due(&fs, 1, 50));
    const rm_fault *f = rm_faults_due(&fs, RM_FAULT_PS_RANK(1), 50);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(f->kind, RM_FAULT_EXIT);
    CU_ASSERT_PTR_NULL(rm_faults_due(&fs, RM_FAULT_PS_RANK(1), 50)); /* once */
    static const char *const bad[] = {
        "slow:rank=1",            /* no factor */
        "slow:rank=1:factor=0.5", /* < 1 */
        "slow:rank=1:factor=2:step=5:until=5",
        "slow:role=ps:index=0:factor=2", /* servers are not slowed */
        "exit:role=ps:step=3",           /* role=ps without index */
        "exit:role=ps:index=0:rank=1:step=3",
        "exit:role=boss:index=0:step=3",
        "exit:rank=1:step=3:factor=2",
        "exit:role=ps:index=64:step=1",
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(bad); i++) {
        memset(&e, 0, sizeof e);
        CU_ASSERT_EQUAL(rm_faults_parse(bad[i], &fs, &e), RM_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "RINGMASTER_FAULT"));
    }
}

/* The servers' agreement on one version (ps_core.h rm_ps_agree_decide): each row is S servers'
 * records (gen: 0 none, 1 the records' own generation, 2 an older one) and what server `self`
 * does. */
static void test_agree_table(void)
{
    enum { NONE = 0, CUR = 1, OLD = 2 };
    static const struct {
        const char *name;
        int S, self;
        bool known[3];
        int gen[3];
        bool settled[3];
        int64_t at[3];
        int nheld[3];
        int64_t held[3][4];
        rm_ps_agree_act act;
        int64_t version;
    } T[] = {
        {"fresh start: pause first", 2, 0, {1, 1}, {NONE, NONE}, {0}, {0}, {0}, {{0}}, RM_PS_AGREE_PAUSE, 0},
        {"a server not registered yet: wait",
         2,
         0,
         {1, 0},
         {NONE, NONE},
         {0},
         {0},
         {0},
         {{0}},
         RM_PS_AGREE_WAIT,
         0},
        {"the other still serves an older generation: wait",
         2,
         0,
         {1, 1},
         {CUR, OLD},
         {0, 1},
         {0, 40},
         {2, 2},
         {{20, 40}, {20, 40}},
         RM_PS_AGREE_WAIT,
         0},
        {"all paused: the newest common version (40, the replacement's newest)",
         2,
         0,
         {1, 1},
         {CUR, CUR},
         {0},
         {0},
         {2, 2},
         {{20, 40}, {40, 20}},
         RM_PS_AGREE_ROLL,
         40},
        {"the survivor holds newer checkpoints: still 40",
         2,
         1,
         {1, 1},
         {CUR, CUR},
         {0},
         {0},
         {2, 3},
         {{20, 40}, {60, 40, 20}},
         RM_PS_AGREE_ROLL,
         40},
        {"died before its first checkpoint: version 0 for all",
         2,
         0,
         {1, 1},
         {CUR, CUR},
         {0},
         {0},
         {2, 0},
         {{20, 40}, {0}},
         RM_PS_AGREE_ROLL,
         0},
        {"kept windows without a common version: 0",
         2,
         0,
         {1, 1},
         {CUR, CUR},
         {0},
         {0},
         {2, 2},
         {{60, 80}, {20, 40}},
         RM_PS_AGREE_ROLL,
         0},
        {"three servers: the newest every one holds",
         3,
         2,
         {1, 1, 1},
         {CUR, CUR, CUR},
         {0},
         {0},
         {3, 2, 2},
         {{20, 40, 60}, {20, 40}, {40, 60}},
         RM_PS_AGREE_ROLL,
         40},
        {"settled, the other not yet: wait (not serving)",
         2,
         0,
         {1, 1},
         {CUR, CUR},
         {1, 0},
         {40, 0},
         {2, 2},
         {{20, 40}, {20, 40}},
         RM_PS_AGREE_WAIT,
         0},
        {"all settled on 40: serve",
         2,
         1,
         {1, 1},
         {CUR, CUR},
         {1, 1},
         {40, 40},
         {2, 2},
         {{20, 40}, {20, 40}},
         RM_PS_AGREE_SERVE,
         40},
        {"after the local runner's rollback: every one already at 40, serve",
         2,
         0,
         {1, 1},
         {CUR, CUR},
         {1, 1},
         {40, 40},
         {2, 2},
         {{40, 20}, {40, 20}},
         RM_PS_AGREE_SERVE,
         40},
        {"a server could not load 40 and dropped it: roll again to 20",
         2,
         0,
         {1, 1},
         {CUR, CUR},
         {1, 0},
         {40, 20},
         {2, 1},
         {{20, 40}, {20}},
         RM_PS_AGREE_ROLL,
         20},
        {"serving, then a server restarts (new incarnation): pause",
         2,
         0,
         {1, 1},
         {OLD, OLD},
         {1, 1},
         {40, 40},
         {2, 2},
         {{20, 40}, {20, 40}},
         RM_PS_AGREE_PAUSE,
         0},
        {"self out of range: wait", 2, 2, {1, 1}, {CUR, CUR}, {0}, {0}, {0}, {{0}}, RM_PS_AGREE_WAIT, 0},
    };
    for (size_t t = 0; t < RM_ARRAY_LEN(T); t++) {
        rm_ps_member m[3];
        memset(m, 0, sizeof m);
        uint64_t inc[3] = {0x1111, 0x2222, 0x3333};
        uint64_t g = rm_ps_agree_gen(inc, T[t].S);
        for (int i = 0; i < T[t].S; i++) {
            m[i].known = T[t].known[i];
            m[i].inc = inc[i];
            m[i].gen = T[t].gen[i] == CUR ? g : T[t].gen[i] == OLD ? g ^ 0x5a5a : 0;
            m[i].settled = T[t].settled[i];
            m[i].at = T[t].at[i];
            m[i].nheld = T[t].nheld[i];
            for (int k = 0; k < m[i].nheld; k++)
                m[i].held[k] = T[t].held[i][k];
            m[i].version = m[i].nheld ? m[i].held[0] : 0;
        }
        rm_ps_agree a = rm_ps_agree_decide(m, T[t].S, T[t].self);
        if (a.act != T[t].act || (a.act >= RM_PS_AGREE_ROLL && a.version != T[t].version))
            fprintf(stderr, "  row \"%s\": got %s %lld, want %s %lld\n", T[t].name,
                    rm_ps_agree_act_names[a.act], (long long)a.version, rm_ps_agree_act_names[T[t].act],
                    (long long)T[t].version);
        CU_ASSERT_EQUAL(a.act, T[t].act);
        if (T[t].act >= RM_PS_AGREE_ROLL)
            CU_ASSERT_EQUAL(a.version, T[t].version);
        if (T[t].act != RM_PS_AGREE_WAIT || T[t].known[1])
            CU_ASSERT_EQUAL(a.gen, T[t].self < T[t].S ? g : 0);
    }
    /* the generation: never 0, and another incarnation (or order) is another generation */
    uint64_t a[2] = {1, 2}, b[2] = {2, 1}, c[2] = {1, 3};
    CU_ASSERT_NOT_EQUAL(rm_ps_agree_gen(a, 2), 0);
    CU_ASSERT_NOT_EQUAL(rm_ps_agree_gen(a, 2), rm_ps_agree_gen(b, 2));
    CU_ASSERT_NOT_EQUAL(rm_ps_agree_gen(a, 2), rm_ps_agree_gen(c, 2));
    /* sync: a rolled-back shard forgets the step in progress */
    rm_ps_sync sy;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ps_sync_init(&sy, 4, 50, 2, &e), RM_OK);
    float gr[4] = {1, 1, 1, 1};
    CU_ASSERT_EQUAL(rm_ps_sync_push(&sy, 0, 50, gr), RM_PS_ACCEPTED);
    rm_ps_sync_reset(&sy, 40);
    CU_ASSERT_EQUAL(sy.version, 40);
    CU_ASSERT_EQUAL(sy.count, 0);
    CU_ASSERT_EQUAL(rm_ps_sync_push(&sy, 0, 40, gr), RM_PS_ACCEPTED); /* not a duplicate */
    CU_ASSERT_EQUAL(rm_ps_sync_push(&sy, 1, 50, gr), RM_PS_AHEAD);
    rm_ps_sync_free(&sy);
}

void rm_suite_ps(void)
{
    static const rm_test_case cases[] = {
        {"spec defaults and round trip", test_spec_defaults},
        {"spec errors name the field", test_spec_errors},
        {"spec: at most 63 workers per server", test_spec_worker_limit},
        {"partition every size S=1..8", test_partition_every_size},
        {"partition snaps to layer boundaries", test_partition_snaps},
        {"sync rule with backup workers", test_sync_rule_table},
        {"sync b=0 and a shrinking world", test_sync_b0_and_shrink},
        {"sync: averaged in place, no residue", test_sync_average_in_place},
        {"sync: who a step waits for (views)", test_sync_view_table},
        {"staleness bound", test_staleness_bound},
        {"warm start: held draws, bound off", test_warm_start},
        {"adagrad shards vs reference", test_adagrad_shards_reference},
        {"faults: slow and role=ps", test_faults_slow_and_ps},
        {"servers agree on one version", test_agree_table},
        {"servers: create, replace, delete", test_ps_reconcile_table},
        {"server pods and PS worker pods", test_ps_pods},
    };
    RM_ADD_SUITE("ps", NULL, NULL, cases);
}

/* ---- the servers' reconcile rules ---- */

static void test_ps_reconcile_table(void)
{
    typedef struct {
        rm_ps_act_kind k;
        int i;
        bool replace;
    } A;
    static const struct {
        const char *name;
        rm_strategy strategy;
        rm_phase phase;
        bool suspend;
        int S, nobs;
        rm_ps_observed obs[4];
        int nact;
        A act[4];
        int ready;
    } T[] = {
        {"fresh job: create all",
         RM_STRATEGY_PS,
         RM_PHASE_PENDING,
         false,
         2,
         0,
         {{0}},
         2,
         {{RM_PS_ACT_CREATE, 0, false}, {RM_PS_ACT_CREATE, 1, false}},
         0},
        {"all serving: nothing",
         RM_STRATEGY_PS,
         RM_PHASE_RUNNING,
         false,
         2,
         2,
         {{true, false, true}, {true, false, true}},
         0,
         {{0}},
         2},
        {"server 1 died: replaced alone",
         RM_STRATEGY_PS,
         RM_PHASE_RUNNING,
         false,
         2,
         2,
         {{true, false, true}, {true, true, false}},
         1,
         {{RM_PS_ACT_CREATE, 1, true}},
         1},
        {"starting: wait",
         RM_STRATEGY_PS,
         RM_PHASE_RUNNING,
         false,
         2,
         2,
         {{true, false, false}, {true, false, true}},
         0,
         {{0}},
         1},
        {"succeeded: delete all",
         RM_STRATEGY_PS,
         RM_PHASE_SUCCEEDED,
         false,
         2,
         2,
         {{true, false, true}, {true, true, false}},
         2,
         {{RM_PS_ACT_DELETE, 0, false}, {RM_PS_ACT_DELETE, 1, false}},
         0},
        {"suspended: delete",
         RM_STRATEGY_PS,
         RM_PHASE_RUNNING,
         true,
         1,
         1,
         {{true, false, true}},
         1,
         {{RM_PS_ACT_DELETE, 0, false}},
         0},
        {"scaled down 3 -> 1",
         RM_STRATEGY_PS,
         RM_PHASE_RUNNING,
         false,
         1,
         3,
         {{true, false, true}, {true, false, true}, {false, false, false}},
         1,
         {{RM_PS_ACT_DELETE, 1, false}},
         1},
        {"allreduce job: none, leftovers deleted",
         RM_STRATEGY_ALLREDUCE,
         RM_PHASE_RUNNING,
         false,
         1,
         1,
         {{true, false, true}},
         1,
         {{RM_PS_ACT_DELETE, 0, false}},
         0},
    };
    for (size_t c = 0; c < RM_ARRAY_LEN(T); c++) {
        rm_tj job;
        memset(&job, 0, sizeof job);
        job.spec.strategy = T[c].strategy;
        job.spec.ps.replicas = T[c].S;
        job.spec.run.suspend = T[c].suspend;
        job.status.phase = T[c].phase;
        rm_ps_action out[8];
        int ready = -1;
        int n = rm_ps_reconcile(&job, T[c].obs, T[c].nobs, out, 8, &ready);
        if (n != T[c].nact)
            fprintf(stderr, "case \"%s\": %d actions, want %d\n", T[c].name, n, T[c].nact);
        CU_ASSERT_EQUAL(n, T[c].nact);
        for (int i = 0; i < n && i < T[c].nact; i++) {
            CU_ASSERT_EQUAL(out[i].kind, T[c].act[i].k);
            CU_ASSERT_EQUAL(out[i].index, T[c].act[i].i);
            CU_ASSERT_EQUAL(out[i].replace, T[c].act[i].replace);
        }
        CU_ASSERT_EQUAL(ready, T[c].ready);
    }
}

/* ---- the launch contract for servers, rendered as pods ---- */

static const char *pod_env(const cJSON *pod, const char *name, bool *secret)
{
    const cJSON *c =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"), "containers"), 0);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "env"))
    {
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")), name) != 0)
            continue;
        if (secret)
            *secret = cJSON_GetObjectItem(e, "valueFrom") != NULL;
        const cJSON *v = cJSON_GetObjectItem(e, "value");
        return v ? cJSON_GetStringValue(v) : "";
    }
    return NULL;
}

static void test_ps_pods(void)
{
    rm_tj tj;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(parse_job("  strategy: parameterServer\n  parameterServer: {replicas: 2, "
                                    "mode: async}\n",
                                    &tj, &e),
                          RM_OK);
    cJSON *pod = rm_kube_ps_pod(&tj, 1, "http://rdzv:29400", NULL, -1, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    const cJSON *md = cJSON_GetObjectItem(pod, "metadata"), *lb = cJSON_GetObjectItem(md, "labels");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(md, "name")), "ps-ps-1");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(lb, RM_LABEL_ROLE)), "ps");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(lb, RM_LABEL_PS_INDEX)), "1");
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(lb, RM_LABEL_INDEX)); /* never counted as a worker */
    CU_ASSERT_STRING_EQUAL(pod_env(pod, RM_ENV_ROLE, NULL), "ps");
    CU_ASSERT_STRING_EQUAL(pod_env(pod, RM_ENV_PS_INDEX, NULL), "1");
    CU_ASSERT_STRING_EQUAL(pod_env(pod, RM_ENV_PS_ADDRS, NULL), "ps-ps-0.ps:29600,ps-ps-1.ps:29600");
    CU_ASSERT_STRING_EQUAL(pod_env(pod, RM_ENV_WORLD_SIZE, NULL), "4");
    /* it registers its address there: workers find it without cluster DNS */
    CU_ASSERT_STRING_EQUAL(pod_env(pod, RM_ENV_RENDEZVOUS, NULL), "http://rdzv:29400");
    bool secret = false;
    CU_ASSERT_PTR_NOT_NULL(pod_env(pod, RM_ENV_TOKEN, &secret));
    CU_ASSERT(secret); /* from the job's Secret, never inline */
    const char *ps = pod_env(pod, RM_ENV_PS_SPEC, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ps);
    CU_ASSERT_PTR_NOT_NULL(strstr(ps, "\"mode\":\"async\""));
    const cJSON *args = cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"), "containers"), 0), "args");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetArrayItem(args, 0)), "ps");
    /* a hung server is killed by its livenessProbe (/healthz, stalled after half the progress
     * deadline of 60 s: probes 7 s apart, two failures), so ps_reconcile replaces it */
    CU_ASSERT_STRING_EQUAL(pod_env(pod, RM_ENV_PROGRESS_DEADLINE, NULL), "60");
    const cJSON *lp = cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "spec"), "containers"), 0),
        "livenessProbe");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lp);
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(lp, "httpGet"), "path")), "/healthz");
    CU_ASSERT_EQUAL(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(lp, "httpGet"), "port")),
                    RM_PORT_WORKER_METRICS);
    CU_ASSERT_EQUAL(cJSON_GetNumberValue(cJSON_GetObjectItem(lp, "periodSeconds")), 7);
    CU_ASSERT_EQUAL(cJSON_GetNumberValue(cJSON_GetObjectItem(lp, "failureThreshold")), 2);
    /* the pod informer's projection sees a server, not a worker */
    rm_kube_pod *kp = rm_kube_pod_transform(NULL, pod);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kp);
    CU_ASSERT_EQUAL(kp->ps_index, 1);
    CU_ASSERT_EQUAL(kp->index, -1);
    free(kp);
    cJSON_Delete(pod);
    /* a worker of the same job: role label, strategy and the servers' addresses */
    rm_kube_worker_pod_args pa = {
        .tj = &tj, .index = 2, .epoch = 1, .rdzv_url = "http://rdzv:29400", .metrics_port = -1};
    pod = rm_kube_worker_pod(&pa, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    lb = cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "labels");
    CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(lb, RM_LABEL_ROLE)), "worker");
    CU_ASSERT_STRING_EQUAL(pod_env(pod, RM_ENV_STRATEGY, NULL), "parameterServer");
    CU_ASSERT_STRING_EQUAL(pod_env(pod, RM_ENV_PS_ADDRS, NULL), "ps-ps-0.ps:29600,ps-ps-1.ps:29600");
    cJSON_Delete(pod);
    /* an index past the servers is refused */
    CU_ASSERT_PTR_NULL(rm_kube_ps_pod(&tj, 2, NULL, NULL, -1, &e));
    rm_tj_free(&tj);
}
