/* test_torchrun.c — torchrun jobs (docs/torchrun.md): which templates run torchrun, the elastic
 * environment their worker pods get (a table: job -> variable -> value), the c10d store pod, and
 * the store pod's rule (operator/c10d_store.h) as a table. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/json.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"
#include "operator/c10d_store.h"
#include "operator/kube/builders.h"
#include "operator/kube/runtime.h"
#include "operator/launch.h"
#include "tests/unit/testutil.h"

#define HEAD                                                                \
    "{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\"," \
    "\"metadata\":{\"name\":\"el\",\"namespace\":\"ml\",\"uid\":\"u-42\"},"
/* a template whose worker container runs CMD (a JSON fragment: "command":[...] and/or "args") */
#define TMPL(cmd) \
    "\"template\":{\"spec\":{\"containers\":[{\"name\":\"worker\",\"image\":\"pt:1\"," cmd "}]}}"

static void parse(const char *js, rm_tj *tj)
{
    rm_err e = {0};
    cJSON *obj = cJSON_Parse(js);
    CU_ASSERT_PTR_NOT_NULL_FATAL(obj);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(obj, tj, &e), RM_OK);
    rm_tj_defaults(tj);
    if (rm_tj_validate(tj, &e) != RM_OK)
        fprintf(stderr, "\n  invalid test job: %s\n", e.msg);
    cJSON_Delete(obj);
}

/* Which containers run torchrun, and the interpreter the store gets. */
static void test_detect(void)
{
    static const struct {
        const char *tmpl; /* a pod template */
        bool yes;
        const char *python;
    } rows[] = {
        {"{\"spec\":{\"containers\":[{\"command\":[\"torchrun\",\"train.py\"]}]}}", true, "python3"},
        {"{\"spec\":{\"containers\":[{\"command\":[\"/opt/conda/bin/torchrun\"],\"args\":[\"t.py\"]}]}}",
         true, "python3"},
        {"{\"spec\":{\"containers\":[{\"command\":[\"/usr/bin/python3.11\",\"-m\",\"torch.distributed.run\","
         "\"t.py\"]}]}}",
         true, "/usr/bin/python3.11"},
        {"{\"spec\":{\"containers\":[{\"args\":[\"python\",\"-u\",\"-m\",\"torch.distributed.run\"]}]}}",
         true, "python"},
        {"{\"spec\":{\"containers\":[{\"command\":[\"sh\",\"-c\",\"pip list; exec torchrun t.py\"]}]}}", true,
         "python3"},
        {"{\"spec\":{\"containers\":[{\"command\":[\"/bin/bash\",\"-lc\",\"cd /w && torchrun\"]}]}}", true,
         "python3"},
        /* the container named worker decides, not the first */
        {"{\"spec\":{\"containers\":[{\"name\":\"side\",\"command\":[\"torchrun\"]},"
         "{\"name\":\"worker\",\"command\":[\"python3\",\"ddp.py\"]}]}}",
         false, ""},
        {"{\"spec\":{\"containers\":[{\"command\":[\"python3\",\"torchrun_notes.py\"]}]}}", false, ""},
        {"{\"spec\":{\"containers\":[{\"command\":[\"sh\",\"-c\",\"echo torchrunner\"]}]}}", false, ""},
        {"{\"spec\":{\"containers\":[{\"command\":[\"python3\",\"-m\",\"torch.distributed.launch\"]}]}}",
         false, ""},
        {"{\"spec\":{\"containers\":[{\"image\":\"pt:1\"}]}}", false,
         ""}, /* the image's entrypoint: unseen */
        {"{}", false, ""},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(rows); i++) {
        cJSON *t = cJSON_Parse(rows[i].tmpl);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        char py[64] = "";
        bool got = rm_launch_runs_torchrun(t, py, sizeof py);
        if (got != rows[i].yes || strcmp(py, rows[i].python) != 0) {
            fprintf(stderr, "\n  row %zu (%s): want %d \"%s\", got %d \"%s\"\n", i, rows[i].tmpl, rows[i].yes,
                    rows[i].python, got, py);
            CU_FAIL("torchrun detection");
        }
        cJSON_Delete(t);
    }
    CU_ASSERT_FALSE(rm_launch_runs_torchrun(NULL, NULL, 0));
}

static const char *env_val(const cJSON *pod, const char *name)
{
    const cJSON *e, *hit = NULL;
    int n = 0;
    cJSON_ArrayForEach(e, rm_json_path(pod, "spec.containers[0].env"))
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0)
            hit = e, n++;
    }
    CU_ASSERT_TRUE(n <= 1);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(hit, "value");
    return cJSON_IsString(v) ? v->valuestring : NULL; /* NULL: unset */
}

/* The elastic environment, as a table: (job, worker index) -> variable -> value (NULL = unset). */
static void test_env_table(void)
{
    static const char *const elastic =
        HEAD "\"spec\":{\"replicas\":3,\"minReplicas\":2,\"maxReplicas\":3,"
             "\"restartPolicy\":{\"maxRestarts\":4}," TMPL("\"command\":[\"torchrun\",\"t.py\"]") "}}";
    static const char *const gpus =
        HEAD "\"spec\":{\"replicas\":2," TMPL("\"command\":[\"torchrun\",\"t.py\"],"
                                              "\"resources\":{\"limits\":{\"nvidia.com/gpu\":4}}") "}}";
    static const char *const user_conf = HEAD "\"spec\":{\"replicas\":3,\"minReplicas\":1," TMPL(
        "\"command\":[\"torchrun\"],\"env\":[{\"name\":\"PET_RDZV_CONF\",\"value\":\"last_call_timeout=5\"},"
        "{\"name\":\"PET_RDZV_ID\",\"value\":\"mine\"}]") "}}";
    static const char *const plain = HEAD "\"spec\":{\"replicas\":3,\"minReplicas\":2," TMPL(
        "\"command\":[\"python3\",\"ddp.py\"],\"env\":[{\"name\":\"PET_RDZV_BACKEND\",\"value\":\"etcd\"}"
        "]") "}}";
    static const struct {
        const char *job;
        int index;
        const char *var, *want;
    } rows[] = {
        {elastic, 1, RM_ENV_PET_NNODES, "2:3"},
        {elastic, 1, RM_ENV_PET_RDZV_BACKEND, "c10d"},
        {elastic, 1, RM_ENV_PET_RDZV_ENDPOINT, "el-c10d.el:29401"},
        {elastic, 2, RM_ENV_PET_RDZV_ENDPOINT, "el-c10d.el:29401"}, /* the same store for every worker */
        {elastic, 1, RM_ENV_PET_RDZV_ID, "u-42"},
        {elastic, 1, RM_ENV_PET_RDZV_CONF, "is_host=false"},
        {elastic, 1, RM_ENV_PET_MAX_RESTARTS, "4"},
        {elastic, 1, RM_ENV_PET_NPROC_PER_NODE, "1"},
        {elastic, 2, RM_ENV_PET_NODE_RANK, "2"},
        {gpus, 0, RM_ENV_PET_NNODES, "2:2"},       /* not elastic: min = max = replicas */
        {gpus, 0, RM_ENV_PET_NPROC_PER_NODE, "4"}, /* a process per GPU */
        {gpus, 0, RM_ENV_PET_MAX_RESTARTS, "5"},   /* maxRestarts' default */
        {user_conf, 0, RM_ENV_PET_NNODES, "1:3"},
        {user_conf, 0, RM_ENV_PET_RDZV_CONF,
         "last_call_timeout=5,is_host=false"},      /* theirs kept, ours last */
        {user_conf, 0, RM_ENV_PET_RDZV_ID, "u-42"}, /* ours */
        {plain, 0, RM_ENV_PET_NNODES, "3"},         /* not torchrun: as before */
        {plain, 0, RM_ENV_PET_NPROC_PER_NODE, "1"},
        {plain, 0, RM_ENV_PET_RDZV_BACKEND, "etcd"}, /* an unseen torchrun entrypoint keeps its own */
        {plain, 0, RM_ENV_PET_RDZV_ENDPOINT, NULL},
        {plain, 0, RM_ENV_PET_MAX_RESTARTS, NULL},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(rows); i++) {
        rm_tj tj;
        memset(&tj, 0, sizeof tj);
        parse(rows[i].job, &tj);
        rm_err e = {0};
        char over[256] = "";
        rm_kube_worker_pod_args pa = {.tj = &tj,
                                      .index = rows[i].index,
                                      .epoch = 0,
                                      .rdzv_url = "http://r",
                                      .metrics_port = -1,
                                      .overridden = over,
                                      .overridden_cap = sizeof over};
        cJSON *pod = rm_kube_worker_pod(&pa, &e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
        const char *got = env_val(pod, rows[i].var);
        bool ok = rows[i].want ? got && strcmp(got, rows[i].want) == 0 : got == NULL;
        if (!ok) {
            fprintf(stderr, "\n  row %zu: %s want \"%s\" got \"%s\"\n", i, rows[i].var,
                    rows[i].want ? rows[i].want : "(unset)", got ? got : "(unset)");
            CU_FAIL("torchrun env");
        }
        /* merging the user's rendezvous options is not an override worth a warning */
        CU_ASSERT_PTR_NULL(strstr(over, RM_ENV_PET_RDZV_CONF));
        cJSON_Delete(pod);
        rm_tj_free(&tj);
    }
}

/* The store pod: the worker's image and interpreter, the DNS name the endpoint uses, none of the
 * worker's resources, torch's TCPStore as the server. */
static void test_store_pod(void)
{
    rm_tj tj;
    memset(&tj, 0, sizeof tj);
    parse(HEAD "\"spec\":{\"replicas\":3,\"minReplicas\":2," TMPL(
              "\"command\":[\"/usr/bin/python3\",\"-m\",\"torch.distributed.run\",\"t.py\"],"
              "\"resources\":{\"limits\":{\"nvidia.com/gpu\":8}}") "}}",
          &tj);
    rm_err e = {0};
    cJSON *pod = rm_kube_c10d_pod(&tj, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "metadata.name")->valuestring, "el-c10d");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.hostname")->valuestring, "el-c10d");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.subdomain")->valuestring, "el");
    const cJSON *lab = cJSON_GetObjectItemCaseSensitive(rm_json_path(pod, "metadata.labels"), RM_LABEL_JOB);
    CU_ASSERT_TRUE(cJSON_IsString(lab) && strcmp(lab->valuestring, "el") == 0); /* the headless Service's */
    CU_ASSERT_PTR_NULL(
        cJSON_GetObjectItemCaseSensitive(rm_json_path(pod, "metadata.labels"), RM_LABEL_INDEX));
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].image")->valuestring, "pt:1");
    const cJSON *cmd = rm_json_path(pod, "spec.containers[0].command");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(cmd), 4);
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(cmd, 0)->valuestring, "/usr/bin/python3");
    CU_ASSERT_PTR_NOT_NULL(strstr(cJSON_GetArrayItem(cmd, 2)->valuestring, "is_master=True"));
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(cmd, 3)->valuestring, "29401");
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "spec.containers[0].resources.limits"));
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "spec.containers[0].env"));
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    /* not a torchrun job: no store, and the error names the field */
    parse(HEAD "\"spec\":{\"replicas\":2," TMPL("\"command\":[\"python3\",\"ddp.py\"]") "}}", &tj);
    CU_ASSERT_PTR_NULL(rm_kube_c10d_pod(&tj, &e));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.template"));
    rm_tj_free(&tj);
}

/* The store pod's rule as a table: (torchrun, phase, suspend, observed) -> (action, hold). */
static void test_store_rule(void)
{
    enum { NO = 0, READY, STARTING, ENDED, GOING };
    static const struct {
        const char *name;
        bool torchrun;
        rm_phase phase;
        bool suspend;
        int pod;
        rm_c10d_act act;
        bool hold;
    } rows[] = {
        {"new torchrun job: create the store, hold the workers", true, RM_PHASE_PENDING, false, NO,
         RM_C10D_CREATE, true},
        {"store starting: wait", true, RM_PHASE_PENDING, false, STARTING, RM_C10D_KEEP, true},
        {"store ready: workers may be created", true, RM_PHASE_PENDING, false, READY, RM_C10D_KEEP, false},
        {"running job keeps its store", true, RM_PHASE_RUNNING, false, READY, RM_C10D_KEEP, false},
        {"store pod ended: delete it (recreated when gone)", true, RM_PHASE_RUNNING, false, ENDED,
         RM_C10D_DELETE, true},
        {"store pod going away: wait for it", true, RM_PHASE_RUNNING, false, GOING, RM_C10D_KEEP, true},
        {"succeeded: the store goes", true, RM_PHASE_SUCCEEDED, false, READY, RM_C10D_DELETE, false},
        {"failed: the store goes", true, RM_PHASE_FAILED, false, READY, RM_C10D_DELETE, false},
        {"failed, store already gone: nothing", true, RM_PHASE_FAILED, false, NO, RM_C10D_KEEP, true},
        {"suspended: the store goes (resume starts a fresh one)", true, RM_PHASE_RUNNING, true, READY,
         RM_C10D_DELETE, false},
        {"not torchrun: nothing held, nothing created", false, RM_PHASE_RUNNING, false, NO, RM_C10D_KEEP,
         false},
        {"not torchrun (template edited): a leftover store goes", false, RM_PHASE_RUNNING, false, READY,
         RM_C10D_DELETE, false},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(rows); i++) {
        rm_tj tj;
        memset(&tj, 0, sizeof tj);
        tj.status.phase = rows[i].phase;
        tj.spec.run.suspend = rows[i].suspend;
        rm_c10d_observed o = {0};
        o.exists = rows[i].pod != NO;
        o.ready = rows[i].pod == READY;
        o.ended = rows[i].pod == ENDED;
        o.terminating = rows[i].pod == GOING;
        rm_c10d_decision d = rm_c10d_store_decide(&tj, rows[i].torchrun, o);
        if (d.act != rows[i].act || d.hold_workers != rows[i].hold) {
            fprintf(stderr, "\n  [%s] want act %d hold %d, got %d %d\n", rows[i].name, rows[i].act,
                    rows[i].hold, d.act, d.hold_workers);
            CU_FAIL("c10d store rule");
        }
    }
}

void rm_suite_torchrun(void)
{
    static const rm_test_case cases[] = {
        {"which templates run torchrun", test_detect},
        {"a torchrun job's elastic environment (table)", test_env_table},
        {"the c10d store pod", test_store_pod},
        {"the c10d store pod's rule (table)", test_store_rule},
    };
    RM_ADD_SUITE("torchrun", NULL, NULL, cases);
}
