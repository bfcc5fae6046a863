/* Tests for the rendezvous at a large world (common/rdzv.h, docs/scale.md): the join reply without
 * the peer list ("peers": false, the ring neighbours instead), and the member records that keep
 * per-worker memory small (node names interned, a checkpoint error allocated only while set) read
 * back the same as before; the reconcile core at RM_RDZV_MAX_WORLD workers and the size of their
 * job's status. An in-process service on 127.0.0.1:0 and raw HTTP; each test starts and stops its
 * own service. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/httpc.h"
#include "common/rdzv.h"
#include "common/trainingjob.h"
#include "operator/reconcile.h"
#include "tests/unit/testutil.h"

#define JOB "default/world"
#define TOKEN "world-token-0123456789"
#define P(s) "/v1/jobs/" JOB s

typedef struct wfx {
    rm_rdzv *r;
    rm_http_server *srv;
    char url[64];
} wfx;

static int wfx_start(wfx *f, int desired, int min)
{
    rm_err e = {0};
    memset(f, 0, sizeof *f);
    f->r = rm_rdzv_new();
    if (!f->r || rm_rdzv_job_set(f->r, JOB, TOKEN, desired, min, 0) != RM_OK ||
        rm_rdzv_serve_world(f->r, "127.0.0.1:0", desired, &f->srv, &e) != RM_OK) {
        fprintf(stderr, "rdzv_world fixture: %s\n", e.msg);
        rm_rdzv_free(f->r);
        return -1;
    }
    snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d", rm_http_port(f->srv));
    return 0;
}

static void wfx_stop(wfx *f)
{
    rm_rdzv_shutdown(f->r);
    rm_http_stop(f->srv);
    rm_rdzv_free(f->r);
}

/* POST/PUT body to path; the status (-1: no answer) and the reply body (owned) in *reply. */
static long req(const wfx *f, const char *method, const char *path, const char *body, char **reply)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", f->url, path);
    const char *headers[] = {"Authorization: Bearer " TOKEN, NULL};
    rm_httpc *h = rm_httpc_new();
    rm_httpc_resp resp = {0};
    rm_err e = {0};
    long status = -1;
    if (rm_httpc_do(h, method, url, headers, body[0] ? body : NULL, strlen(body), 5000, 1 << 20, &resp, &e) ==
        RM_OK)
        status = resp.status;
    else
        fprintf(stderr, "%s %s: %s\n", method, path, e.msg);
    if (reply) {
        *reply = resp.body;
        resp.body = NULL;
    }
    rm_httpc_resp_free(&resp);
    rm_httpc_free(h);
    return status;
}

static long join(const wfx *f, const char *body, char **reply)
{
    return req(f, "POST", P("/join"), body, reply);
}

/* A join with "peers": false gets its ring neighbours (wrapping around) and no list; the others
 * still get the whole list; a "peers" that is not a boolean is refused naming it. */
static void test_join_without_peer_list(void)
{
    wfx f;
    CU_ASSERT_FATAL(wfx_start(&f, 3, 3) == 0);
    char *b = NULL;
    /* polling joins (not held) put workers 0 and 1 in the round */
    CU_ASSERT_EQUAL(
        join(&f, "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:1000\",\"node\":\"n0\",\"wait\":0}", &b), 202);
    free(b);
    CU_ASSERT_EQUAL(join(&f, "{\"workerId\":\"1\",\"addr\":\"127.0.0.1:1001\",\"wait\":0}", &b), 202);
    free(b);
    CU_ASSERT_EQUAL(join(&f, "{\"workerId\":\"2\",\"addr\":\"127.0.0.1:1002\",\"peers\":\"no\"}", &b), 400);
    CU_ASSERT_PTR_NOT_NULL(b && strstr(b, "peers"));
    free(b);
    /* the third closes the round: rank 2, its neighbours ranks 1 and 0 */
    CU_ASSERT_EQUAL(
        join(&f, "{\"workerId\":\"2\",\"addr\":\"127.0.0.1:1002\",\"node\":\"n1\",\"peers\":false}", &b),
        200);
    CU_ASSERT_STRING_EQUAL(
        b ? b : "", "{\"epoch\":1,\"worldSize\":3,"
                    "\"prev\":{\"rank\":1,\"workerId\":\"1\",\"addr\":\"127.0.0.1:1001\",\"node\":\"\"},"
                    "\"next\":{\"rank\":0,\"workerId\":\"0\",\"addr\":\"127.0.0.1:1000\",\"node\":\"n0\"},"
                    "\"rank\":2}");
    free(b);
    /* rank 0 without the list: prev wraps to rank 2 */
    CU_ASSERT_EQUAL(
        join(&f, "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:1000\",\"node\":\"n0\",\"peers\":false}", &b),
        200);
    CU_ASSERT_PTR_NOT_NULL(b &&
                           strstr(b, "\"prev\":{\"rank\":2,\"workerId\":\"2\",\"addr\":\"127.0.0.1:1002\","
                                     "\"node\":\"n1\"}"));
    CU_ASSERT_PTR_NOT_NULL(b && strstr(b, "\"next\":{\"rank\":1,"));
    CU_ASSERT_PTR_NULL(b ? strstr(b, "\"peers\"") : "");
    free(b);
    /* the default (and "peers": true) is the whole list, as before */
    CU_ASSERT_EQUAL(join(&f, "{\"workerId\":\"1\",\"addr\":\"127.0.0.1:1001\",\"peers\":true}", &b), 200);
    CU_ASSERT_PTR_NOT_NULL(b &&
                           strstr(b, "\"peers\":[{\"rank\":0,\"workerId\":\"0\",\"addr\":\"127.0.0.1:1000\","
                                     "\"node\":\"n0\"},{\"rank\":1,"));
    CU_ASSERT_PTR_NOT_NULL(b && strstr(b, "\"rank\":1}"));
    free(b);
    wfx_stop(&f);
}

static const rm_rdzv_member *member_of(const rm_rdzv_state *s, const char *wid)
{
    for (int i = 0; i < s->nmembers; i++)
        if (strcmp(s->members[i].worker_id, wid) == 0)
            return &s->members[i];
    return NULL;
}

/* Node names are kept once per job and shared (docs/scale.md): members that report the same node,
 * one that moves to another and one that reports none read back exactly; a checkpoint error is
 * kept while failures go on and gone once a write succeeds; the job's debugging state agrees. */
static void test_member_records_read_back(void)
{
    wfx f;
    CU_ASSERT_FATAL(wfx_start(&f, 4, 4) == 0);
    static const char *const joins[] = {
        "{\"workerId\":\"0\",\"addr\":\"127.0.0.1:1000\",\"node\":\"node-a\",\"wait\":0}",
        "{\"workerId\":\"1\",\"addr\":\"127.0.0.1:1001\",\"node\":\"node-a\",\"wait\":0}",
        "{\"workerId\":\"2\",\"addr\":\"127.0.0.1:1002\",\"node\":\"node-b\",\"wait\":0}",
        "{\"workerId\":\"1\",\"addr\":\"127.0.0.1:1001\",\"node\":\"node-c\",\"wait\":0}", /* moved */
        "{\"workerId\":\"3\",\"addr\":\"127.0.0.1:1003\",\"wait\":0}",
    };
    char *b = NULL;
    for (size_t i = 0; i < RM_ARRAY_LEN(joins); i++) {
        long st = join(&f, joins[i], &b);
        CU_ASSERT(st == 202 || st == 200);
        free(b);
    }
    CU_ASSERT_EQUAL(req(&f, "POST", P("/report"),
                        "{\"workerId\":\"2\",\"epoch\":1,\"rank\":2,\"step\":5,\"checkpointFailures\":2,"
                        "\"checkpointError\":\"disk full\"}",
                        &b),
                    200);
    free(b);
    rm_rdzv_state *s = calloc(1, sizeof *s);
    CU_ASSERT_FATAL(s != NULL);
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_snapshot(f.r, JOB, s), RM_OK);
    CU_ASSERT_EQUAL(s->nmembers, 4);
    static const char *const want[][2] = {{"0", "node-a"}, {"1", "node-c"}, {"2", "node-b"}, {"3", ""}};
    for (int i = 0; i < 4; i++) {
        const rm_rdzv_member *m = member_of(s, want[i][0]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_STRING_EQUAL(m->node, want[i][1]);
    }
    CU_ASSERT_EQUAL(member_of(s, "2")->checkpoint_failures, 2);
    CU_ASSERT_STRING_EQUAL(member_of(s, "2")->checkpoint_error, "disk full");
    CU_ASSERT_EQUAL(member_of(s, "2")->step, 5);
    CU_ASSERT_STRING_EQUAL(member_of(s, "0")->checkpoint_error, "");
    /* the debugging state names the nodes too */
    CU_ASSERT_EQUAL(req(&f, "GET", P(""), "", &b), 200);
    CU_ASSERT_PTR_NOT_NULL(b &&
                           strstr(b, "\"workerId\":\"1\",\"addr\":\"127.0.0.1:1001\",\"node\":\"node-c\""));
    free(b);
    /* the next write succeeds: the error is gone */
    CU_ASSERT_EQUAL(
        req(&f, "POST", P("/report"), "{\"workerId\":\"2\",\"epoch\":1,\"rank\":2,\"step\":6}", &b), 200);
    free(b);
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_snapshot(f.r, JOB, s), RM_OK);
    CU_ASSERT_EQUAL(member_of(s, "2")->checkpoint_failures, 0);
    CU_ASSERT_STRING_EQUAL(member_of(s, "2")->checkpoint_error, "");
    /* a removed job forgets its members and nodes; registered again, a member reports afresh */
    CU_ASSERT_EQUAL(rm_rdzv_job_remove(f.r, JOB), RM_OK);
    CU_ASSERT_EQUAL(rm_rdzv_job_set(f.r, JOB, TOKEN, 4, 4, 0), RM_OK);
    CU_ASSERT_EQUAL(
        join(&f, "{\"workerId\":\"1\",\"addr\":\"127.0.0.1:1001\",\"node\":\"node-a\",\"wait\":0}", &b), 202);
    free(b);
    CU_ASSERT_EQUAL_FATAL(rm_rdzv_snapshot(f.r, JOB, s), RM_OK);
    CU_ASSERT_EQUAL(s->nmembers, 1);
    CU_ASSERT_STRING_EQUAL(s->members[0].node, "node-a");
    free(s);
    wfx_stop(&f);
}

/* A job of RM_RDZV_MAX_WORLD (16,384) workers, every one running in a closed round: the reconcile
 * core creates and deletes nothing; a failure at an index far above the old cap of 1,024 is seen
 * (that worker, and only it, deleted); the status stays small: it keeps no per-worker list
 * (etcd refuses objects over 1.5 MiB). */
static void test_world_max_reconciles_small_status(void)
{
    const int n = RM_RDZV_MAX_WORLD;
    rm_tj tj;
    memset(&tj, 0, sizeof tj);
    tj.name = strdup("big");
    tj.namespace_ = strdup("default");
    tj.generation = 1;
    rm_tj_defaults(&tj);
    tj.spec.replicas = tj.spec.min_replicas = tj.spec.max_replicas = n;
    tj.spec.training.batch_size_per_worker = 1; /* a global batch under the dataset's 60,000 */
    tj.status.epoch = 1;
    tj.status.observed_generation = 1;
    rm_observed_worker *w = calloc((size_t)n, sizeof *w);
    rm_rdzv_state *rz = calloc(1, sizeof *rz);
    size_t cap = RM_RECONCILE_ACTIONS(n);
    rm_action *acts = malloc(cap * sizeof *acts);
    CU_ASSERT_FATAL(w && rz && acts);
    for (int i = 0; i < n; i++) {
        w[i].index = i;
        w[i].epoch_label = 1;
        w[i].phase = RM_WORKER_RUNNING;
        w[i].ready = true;
        w[i].node_ready = true;
        w[i].created_at = 900;
    }
    rz->epoch = 1;
    rz->closed = true;
    rz->world_size = n;
    rz->closed_at = 950;
    rz->trained_epoch = 1;
    rz->trained_at = 951;
    rz->trained_world = n;
    for (int i = 0; i < 64; i++) {
        rm_rdzv_member *m = &rz->members[rz->nmembers++];
        snprintf(m->worker_id, sizeof m->worker_id, "%d", i);
        m->rank = i;
        m->epoch = 1;
        m->last_report = m->last_progress = 999;
        m->step = 10;
    }
    rm_reconcile_in in = {.job = &tj,
                          .workers = w,
                          .nworkers = (size_t)n,
                          .rdzv = rz,
                          .rdzv_desired = n,
                          .rdzv_min = n,
                          .now = 1000};
    rm_reconcile_out out = {.actions = acts, .cap = cap};
    CU_ASSERT_EQUAL_FATAL(rm_reconcile(&in, &out), RM_OK);
    int changes = 0;
    for (size_t k = 0; k < out.nactions; k++)
        changes += acts[k].type == RM_ACT_CREATE_WORKER || acts[k].type == RM_ACT_DELETE_WORKER;
    CU_ASSERT_EQUAL(changes, 0);
    if (changes)
        fprintf(stderr, "first action: %s index %d (%s) %s\n", rm_action_name(acts[0].type), acts[0].index,
                acts[0].reason, acts[0].message);
    CU_ASSERT(out.status.phase != RM_PHASE_FAILED);
    tj.status = out.status;
    cJSON *o = rm_tj_status_to_json(&tj.status);
    char *js = o ? cJSON_PrintUnformatted(o) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(js);
    CU_ASSERT(strlen(js) < 16 * 1024);
    if (strlen(js) >= 16 * 1024)
        fprintf(stderr, "status of a %d-worker job: %zu bytes\n", n, strlen(js));
    free(js);
    cJSON_Delete(o);
    /* the worker at index 12,000 fails */
    w[12000].phase = RM_WORKER_FAILED;
    w[12000].exit_code = 1;
    w[12000].finished_at = 999;
    w[12000].ready = false;
    CU_ASSERT_EQUAL_FATAL(rm_reconcile(&in, &out), RM_OK);
    int deleted = -1, ndeleted = 0;
    for (size_t k = 0; k < out.nactions; k++)
        if (acts[k].type == RM_ACT_DELETE_WORKER) {
            deleted = acts[k].index;
            ndeleted++;
        }
    CU_ASSERT_EQUAL(ndeleted, 1);
    CU_ASSERT_EQUAL(deleted, 12000);
    free(acts);
    free(rz);
    free(w);
    rm_tj_free(&tj);
}

void rm_suite_rdzv_world(void)
{
    static const rm_test_case cases[] = {
        {"join_without_the_peer_list_gets_its_neighbours", test_join_without_peer_list},
        {"member_records_read_back_nodes_and_errors", test_member_records_read_back},
        {"world_of_16384_reconciles_with_a_small_status", test_world_max_reconciles_small_status},
    };
    RM_ADD_SUITE("rdzv_world", NULL, NULL, cases);
}
