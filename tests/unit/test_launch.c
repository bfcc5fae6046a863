/* test_launch.c — the worker launch contract (operator/launch.h): both runtimes give the same
 * worker the same settings; what differs is only the placement, asserted value by value. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/json.h"
#include "common/trainingjob.h"
#include "operator/kube/runtime.h"
#include "operator/launch.h"
#include "operator/local.h"
#include "operator/run.h"
#include "tests/unit/testutil.h"

/* A job that sets every field the contract carries. */
static const char *k_job =
    "{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\","
    "\"metadata\":{\"name\":\"every\",\"namespace\":\"ml\",\"uid\":\"u-9\"},"
    "\"spec\":{\"replicas\":3,\"minReplicas\":2,\"maxReplicas\":4,\"backend\":\"ring\","
    "\"checkpoint\":{\"path\":\"/data/ck\",\"intervalSteps\":50,\"keep\":7},"
    "\"restartPolicy\":{\"maxRestarts\":4,\"backoffSeconds\":2,\"progressDeadlineSeconds\":45},"
    "\"training\":{\"epochs\":2,\"batchSizePerWorker\":32,\"seed\":7,\"sharding\":\"gradients\","
    "\"optimizer\":{\"type\":\"adam\",\"lr\":0.002}},"
    "\"template\":{\"spec\":{\"containers\":[{\"name\":\"worker\","
    "\"env\":[{\"name\":\"RINGMASTER_CHECKPOINT_KEEP\",\"value\":\"1\"},"
    "{\"name\":\"RANK\",\"value\":\"99\"},{\"name\":\"MINE\",\"value\":\"x\"}]}]}}}}";

static const char *envp_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; envp[i]; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return envp[i] + n + 1;
    return NULL;
}

static int envp_count(char **envp, const char *name)
{
    size_t n = strlen(name);
    int k = 0;
    for (size_t i = 0; envp[i]; i++)
        k += strncmp(envp[i], name, n) == 0 && envp[i][n] == '=';
    return k;
}

static const cJSON *pod_var(const cJSON *pod, const char *name)
{
    const cJSON *env = rm_json_path(pod, "spec.containers[0].env"), *e, *hit = NULL;
    int k = 0;
    cJSON_ArrayForEach(e, env)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0) {
            hit = e;
            k++;
        }
    }
    CU_ASSERT_TRUE(k <= 1); /* never twice */
    return hit;
}

static const char *pod_val(const cJSON *pod, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pod_var(pod, name), "value");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void load(rm_tj *tj, cJSON **obj)
{
    rm_err e = {0};
    *obj = cJSON_Parse(k_job);
    CU_ASSERT_PTR_NOT_NULL_FATAL(*obj);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(*obj, tj, &e), RM_OK);
    rm_tj_defaults(tj);
    CU_ASSERT_EQUAL_FATAL(rm_tj_validate(tj, &e), RM_OK);
}

static void test_same_settings(void)
{
    rm_tj tj;
    cJSON *obj;
    rm_err e = {0};
    load(&tj, &obj);
    /* local: the runner's environment carries a stale copy of two contract variables */
    char *base[] = {"PATH=/usr/bin", "RANK=42", "RINGMASTER_CHECKPOINT_INTERVAL=9", "MINE=y", NULL};
    rm_local_where where = {.rdzv_port = 4321,
                            .token = "tok",
                            .checkpoint_dir = "/tmp/ck",
                            .metrics_port = 7777,
                            .log_format = "json",
                            .node_name = "box"};
    rm_launch ln;
    CU_ASSERT_EQUAL_FATAL(rm_local_launch(&tj, 1, 6, &where, &ln, &e), RM_OK);
    char **argv = NULL, **envp = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_local_render(&ln, "/bin/w", base, &argv, &envp, &e), RM_OK);
    /* kube: the same worker as a pod */
    char over[256];
    rm_kube_worker_pod_args pa = {.tj = &tj,
                                  .index = 1,
                                  .epoch = 6,
                                  .rdzv_url = "http://rdzv:29400",
                                  .worker_image = "ringmaster/worker:t",
                                  .metrics_port = -1,
                                  .overridden = over,
                                  .overridden_cap = sizeof over};
    cJSON *pod = rm_kube_worker_pod(&pa, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);

    /* every contract variable the local process gets, the pod gets exactly once, and vice versa */
    int nlocal = 0;
    for (int i = 0; i < ln.nenv; i++) {
        const char *name = ln.env[i].name;
        CU_ASSERT_EQUAL(envp_count(envp, name), 1);
        CU_ASSERT_PTR_NOT_NULL(pod_var(pod, name));
        nlocal++;
    }
    int npod = 0;
    const cJSON *env = rm_json_path(pod, "spec.containers[0].env"), *it;
    cJSON_ArrayForEach(it, env) npod +=
        rm_launch_is_ours(cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring);
    CU_ASSERT_EQUAL(nlocal, npod);
    CU_ASSERT_TRUE(nlocal >= 25);

    /* settings from the job: identical */
    static const char *same[] = {RM_ENV_ROLE,
                                 RM_ENV_JOB,
                                 RM_ENV_WORKER_ID,
                                 RM_ENV_EPOCH,
                                 RM_ENV_CHECKPOINT_INTERVAL,
                                 RM_ENV_CHECKPOINT_KEEP,
                                 RM_ENV_PROGRESS_DEADLINE,
                                 RM_ENV_BACKEND,
                                 RM_ENV_TRAINING,
                                 RM_ENV_RANK,
                                 RM_ENV_WORLD_SIZE,
                                 RM_ENV_MASTER_PORT,
                                 RM_ENV_PET_NNODES,
                                 RM_ENV_PET_NODE_RANK,
                                 RM_ENV_PET_NPROC_PER_NODE,
                                 RM_ENV_PET_MASTER_PORT};
    for (size_t i = 0; i < RM_ARRAY_LEN(same); i++) {
        const char *a = envp_get(envp, same[i]), *b = pod_val(pod, same[i]);
        CU_ASSERT_PTR_NOT_NULL(a);
        CU_ASSERT_PTR_NOT_NULL(b);
        if (a && b && strcmp(a, b) != 0)
            fprintf(stderr, "%s: local %s pod %s\n", same[i], a, b);
        CU_ASSERT_TRUE(a && b && strcmp(a, b) == 0);
    }
    /* the values themselves (the manifest's, not defaults or the template's) */
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_CHECKPOINT_INTERVAL), "50");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_CHECKPOINT_KEEP), "7");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_PROGRESS_DEADLINE), "45");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_RANK), "1");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_WORLD_SIZE), "3");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_EPOCH), "6");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_BACKEND), "ring");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_MASTER_PORT), "29500");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_ROLE), "worker");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_JOB), "ml/every");
    cJSON *tr = cJSON_Parse(envp_get(envp, RM_ENV_TRAINING));
    CU_ASSERT_PTR_NOT_NULL(tr);
    CU_ASSERT_EQUAL(cJSON_GetObjectItemCaseSensitive(tr, "batchSizePerWorker")->valueint, 32);
    /* spec.training.sharding reaches the worker in both runtimes (TRAINING is compared above) */
    const cJSON *shd = cJSON_GetObjectItemCaseSensitive(tr, "sharding");
    CU_ASSERT_TRUE(cJSON_IsString(shd) && strcmp(shd->valuestring, "gradients") == 0);
    cJSON_Delete(tr);

    /* the placement: what each runtime decides */
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_RENDEZVOUS), "http://127.0.0.1:4321");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_RENDEZVOUS), "http://rdzv:29400");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_TOKEN), "tok");
    CU_ASSERT_STRING_EQUAL(
        rm_json_path(pod_var(pod, RM_ENV_TOKEN), "valueFrom.secretKeyRef.name")->valuestring,
        "every-rendezvous");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_BIND_ADDR), "127.0.0.1");
    CU_ASSERT_STRING_EQUAL(
        rm_json_path(pod_var(pod, RM_ENV_BIND_ADDR), "valueFrom.fieldRef.fieldPath")->valuestring,
        "status.podIP");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_NODE_NAME), "box");
    CU_ASSERT_STRING_EQUAL(
        rm_json_path(pod_var(pod, RM_ENV_NODE_NAME), "valueFrom.fieldRef.fieldPath")->valuestring,
        "spec.nodeName");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_CHECKPOINT_DIR), "/tmp/ck");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_CHECKPOINT_DIR), "/data/ck/ml/every");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_MASTER_ADDR), "127.0.0.1");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_MASTER_ADDR), "every-worker-0.every");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_PET_MASTER_ADDR), "127.0.0.1");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_PET_MASTER_ADDR), "every-worker-0.every");
    /* one machine holds every local worker; a pod is one slot of its node */
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_LOCAL_RANK), "1");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_LOCAL_WORLD_SIZE), "3");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_LOCAL_RANK), "0");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_LOCAL_WORLD_SIZE), "1");

    /* arguments: the same mode and flags; the metrics address is placement */
    CU_ASSERT_STRING_EQUAL(argv[0], "/bin/w");
    CU_ASSERT_STRING_EQUAL(argv[1], "train");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].args[0]")->valuestring, "train");
    CU_ASSERT_STRING_EQUAL(argv[2], "--metrics-addr");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].args[1]")->valuestring, "--metrics-addr");
    CU_ASSERT_STRING_EQUAL(argv[3], "127.0.0.1:7777");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].args[2]")->valuestring,
                           "$(RINGMASTER_BIND_ADDR):9090");
    CU_ASSERT_STRING_EQUAL(argv[4], "--log-format");
    CU_ASSERT_STRING_EQUAL(argv[5], "json");
    CU_ASSERT_PTR_NULL(argv[6]);

    /* user copies of contract variables: dropped, and the pod builder names them */
    CU_ASSERT_STRING_EQUAL(envp_get(envp, "MINE"), "y");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, "PATH"), "/usr/bin");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, "MINE"), "x");
    CU_ASSERT_PTR_NOT_NULL(strstr(over, "RINGMASTER_CHECKPOINT_KEEP"));
    CU_ASSERT_PTR_NOT_NULL(strstr(over, "RANK"));
    CU_ASSERT_PTR_NULL(strstr(over, "MINE"));

    cJSON_Delete(pod);
    rm_local_strv_free(argv);
    rm_local_strv_free(envp);
    rm_launch_free(&ln);
    rm_tj_free(&tj);
    cJSON_Delete(obj);
}

/* Bench jobs: the same benchmark flags in both runtimes (pods used to get train's --metrics-addr,
 * which `bench` rejects). */
static void test_bench_args(void)
{
    rm_tj tj;
    cJSON *obj;
    rm_err e = {0};
    load(&tj, &obj);
    tj.spec.training.mode = RM_MODE_BENCH;
    rm_local_where where = {.rdzv_port = 1, .token = "t", .checkpoint_dir = "/c", .metrics_port = 5};
    rm_launch ln;
    CU_ASSERT_EQUAL_FATAL(rm_local_launch(&tj, 0, 1, &where, &ln, &e), RM_OK);
    rm_kube_worker_pod_args pa = {
        .tj = &tj, .index = 0, .epoch = 1, .rdzv_url = "http://r", .metrics_port = -1};
    cJSON *pod = rm_kube_worker_pod(&pa, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    const cJSON *args = rm_json_path(pod, "spec.containers[0].args");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(args), ln.nargs);
    for (int i = 0; i < ln.nargs && i < cJSON_GetArraySize(args); i++)
        CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(args, i)->valuestring, ln.args[i]);
    CU_ASSERT_STRING_EQUAL(ln.args[0], "bench");
    for (int i = 0; i < ln.nargs; i++)
        CU_ASSERT_TRUE(strcmp(ln.args[i], "--metrics-addr") != 0);
    cJSON_Delete(pod);
    rm_launch_free(&ln);
    rm_tj_free(&tj);
    cJSON_Delete(obj);
}

static void test_build_errors(void)
{
    rm_tj tj;
    cJSON *obj;
    rm_err e = {0};
    load(&tj, &obj);
    rm_launch ln;
    rm_launch_placement p = {.rdzv_url = "http://x"};
    CU_ASSERT_EQUAL(rm_launch_build(&tj, -1, 1, &p, &ln, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "index -1"));
    CU_ASSERT_EQUAL(rm_launch_build(&tj, RM_MAX_WORLD, 1, &p, &ln, &e), RM_EINVAL);
    p.rdzv_url = NULL;
    CU_ASSERT_EQUAL(rm_launch_build(&tj, 0, 1, &p, &ln, &e), RM_EINVAL);
    /* a Secret reference cannot be rendered for a local process */
    p.rdzv_url = "http://x";
    CU_ASSERT_EQUAL_FATAL(rm_launch_build(&tj, 0, 1, &p, &ln, &e), RM_OK);
    char **argv = NULL, **envp = NULL;
    CU_ASSERT_EQUAL(rm_local_render(&ln, "/w", NULL, &argv, &envp, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, RM_ENV_TOKEN));
    CU_ASSERT_PTR_NULL(argv);
    rm_launch_free(&ln);
    rm_launch_free(NULL);
    rm_tj_free(&tj);
    cJSON_Delete(obj);
}

/* `ringmaster run` honours spec.checkpoint.path, absolute or relative; only the cluster default
 * (a volume path) falls back to ./checkpoints/<name>. */
static void test_run_checkpoint_dir(void)
{
    rm_tj tj;
    cJSON *obj;
    load(&tj, &obj);
    char b[256];
    CU_ASSERT_STRING_EQUAL(rm_run_checkpoint_dir("/flag", &tj, b, sizeof b), "/flag");
    CU_ASSERT_STRING_EQUAL(rm_run_checkpoint_dir(NULL, &tj, b, sizeof b), "/data/ck");
    free(tj.spec.checkpoint.path);
    tj.spec.checkpoint.path = strdup("rel/ck");
    CU_ASSERT_STRING_EQUAL(rm_run_checkpoint_dir(NULL, &tj, b, sizeof b), "rel/ck");
    free(tj.spec.checkpoint.path);
    tj.spec.checkpoint.path = strdup(RM_DEFAULT_CHECKPOINT_PATH);
    CU_ASSERT_STRING_EQUAL(rm_run_checkpoint_dir(NULL, &tj, b, sizeof b), "checkpoints/every");
    rm_tj_free(&tj);
    cJSON_Delete(obj);
}

static cJSON *pod_of(const char *job, int index, rm_tj *tj)
{
    rm_err e = {0};
    cJSON *obj = cJSON_Parse(job);
    CU_ASSERT_PTR_NOT_NULL_FATAL(obj);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(obj, tj, &e), RM_OK);
    rm_tj_defaults(tj);
    CU_ASSERT_EQUAL_FATAL(rm_tj_validate(tj, &e), RM_OK);
    rm_kube_worker_pod_args pa = {
        .tj = tj, .index = index, .epoch = 1, .rdzv_url = "http://r", .metrics_port = -1};
    cJSON *pod = rm_kube_worker_pod(&pa, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    cJSON_Delete(obj);
    return pod;
}

#define JOB_HEAD                                                            \
    "{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\"," \
    "\"metadata\":{\"name\":\"g\",\"namespace\":\"ml\",\"uid\":\"u\"},"

/* GPU workers get the NCCL defaults (docs/strategies.md#topology); the template's own values win; CPU
 * workers get none of them; NODE_NAME is the pod's spec.nodeName either way. */
static void test_gpu_defaults(void)
{
    rm_tj tj;
    cJSON *pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":2,\"template\":{\"spec\":{\"containers\":[{"
                                 "\"name\":\"worker\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":1}},"
                                 "\"env\":[{\"name\":\"NCCL_DEBUG\",\"value\":\"INFO\"}]}]}}}}",
                        1, &tj);
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_NCCL_SOCKET_IFNAME), "eth0");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_NCCL_ASYNC_ERROR_HANDLING), "1");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_TORCH_NCCL_ASYNC_ERROR_HANDLING), "1");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_NCCL_DEBUG), "INFO"); /* the user's, once */
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_BACKEND), "nccl");
    const cJSON *nn = rm_json_path(pod_var(pod, RM_ENV_NODE_NAME), "valueFrom.fieldRef.fieldPath");
    CU_ASSERT_TRUE(cJSON_IsString(nn) && strcmp(nn->valuestring, "spec.nodeName") == 0);
    /* a pod sees only its own GPUs: its local view is itself; the node-level local rank comes from
     * the rendezvous (the worker's "topology" log line) */
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_LOCAL_RANK), "0");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_LOCAL_WORLD_SIZE), "1");
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":2}}", 0, &tj);
    CU_ASSERT_PTR_NULL(pod_var(pod, RM_ENV_NCCL_SOCKET_IFNAME));
    CU_ASSERT_PTR_NULL(pod_var(pod, RM_ENV_NCCL_DEBUG));
    CU_ASSERT_PTR_NULL(pod_var(pod, RM_ENV_NCCL_ASYNC_ERROR_HANDLING));
    CU_ASSERT_PTR_NULL(pod_var(pod, RM_ENV_TORCH_NCCL_ASYNC_ERROR_HANDLING));
    nn = rm_json_path(pod_var(pod, RM_ENV_NODE_NAME), "valueFrom.fieldRef.fieldPath");
    CU_ASSERT_TRUE(cJSON_IsString(nn) && strcmp(nn->valuestring, "spec.nodeName") == 0);
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    /* the same defaults through the contract itself, and a local process keeps the runner's value */
    rm_launch ln;
    rm_err e = {0};
    cJSON *obj = cJSON_Parse(JOB_HEAD "\"spec\":{\"replicas\":2}}");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(obj, &tj, &e), RM_OK);
    rm_tj_defaults(&tj);
    rm_launch_placement p = {.rdzv_url = "http://r",
                             .token = "t",
                             .bind_addr = "127.0.0.1",
                             .node_name = "n",
                             .gpus = 1,
                             .metrics_port = -1,
                             .net_ifname = "ib0"};
    CU_ASSERT_EQUAL_FATAL(rm_launch_build(&tj, 0, 1, &p, &ln, &e), RM_OK);
    const rm_launch_var *v = rm_launch_find(&ln, RM_ENV_NCCL_SOCKET_IFNAME);
    CU_ASSERT_TRUE(v && v->user_wins && strcmp(v->value, "ib0") == 0);
    CU_ASSERT_FALSE(rm_launch_find(&ln, RM_ENV_RANK)->user_wins);
    char *base[] = {"NCCL_DEBUG=TRACE", NULL};
    char **argv = NULL, **envp = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_local_render(&ln, "/bin/w", base, &argv, &envp, &e), RM_OK);
    CU_ASSERT_EQUAL(envp_count(envp, RM_ENV_NCCL_DEBUG), 1);
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_NCCL_DEBUG), "TRACE");
    CU_ASSERT_STRING_EQUAL(envp_get(envp, RM_ENV_NCCL_SOCKET_IFNAME), "ib0");
    rm_local_strv_free(argv);
    rm_local_strv_free(envp);
    rm_launch_free(&ln);
    rm_tj_free(&tj);
    cJSON_Delete(obj);
}

/* spec.output reaches the worker as RINGMASTER_OUTPUT_URI / RINGMASTER_OUTPUT_DTYPE (pod and
 * local process alike); a job without spec.output sets neither (the default export folder). */
static void test_output_env(void)
{
    rm_tj tj;
    cJSON *pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":2,\"output\":{\"uri\":\"s3://models/run-1/\","
                                 "\"dtype\":\"bfloat16\"}}}",
                        0, &tj);
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_OUTPUT_URI), "s3://models/run-1/");
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_OUTPUT_DTYPE), "bfloat16");
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":2}}", 0, &tj);
    CU_ASSERT_PTR_NULL(pod_var(pod, RM_ENV_OUTPUT_URI));
    CU_ASSERT_PTR_NULL(pod_var(pod, RM_ENV_OUTPUT_DTYPE));
    cJSON_Delete(pod);
    rm_tj_free(&tj);
}

/* A template copy of a contract variable is refused (the EnvOverridden Warning lists it) even
 * where the job itself leaves the variable unset: the topology variables of an allreduce job
 * (docs/architecture.md#the-launch-contract). */
static void test_template_topology(void)
{
#define TOPO_ENV(par)                                                                                \
    JOB_HEAD                                                                                         \
    "\"spec\":{\"replicas\":2," par "\"template\":{\"spec\":{\"containers\":[{"                      \
    "\"name\":\"worker\",\"env\":[{\"name\":\"RINGMASTER_STRATEGY\",\"value\":\"parameterServer\"}," \
    "{\"name\":\"RINGMASTER_PARAMETER_SERVER\",\"value\":\"{\\\"replicas\\\":1}\"},"                 \
    "{\"name\":\"RINGMASTER_PS_ADDRS\",\"value\":\"evil:1\"},"                                       \
    "{\"name\":\"RINGMASTER_PS_INDEX\",\"value\":\"0\"},{\"name\":\"MINE\",\"value\":\"x\"},"        \
    "{\"name\":\"RINGMASTER_PARALLELISM\",\"value\":\"{\\\"pipelineStages\\\":2}\"}]}]}}}}"
    static const char *const topo[] = {RM_ENV_STRATEGY, RM_ENV_PS_SPEC, RM_ENV_PS_ADDRS, RM_ENV_PS_INDEX,
                                       RM_ENV_PARALLELISM};
    for (int pipe = 0; pipe < 2; pipe++) {
        const char *job = pipe ? TOPO_ENV("\"parallelism\":{\"pipelineStages\":2},") : TOPO_ENV("");
        rm_tj tj;
        rm_err e = {0};
        cJSON *obj = cJSON_Parse(job);
        CU_ASSERT_PTR_NOT_NULL_FATAL(obj);
        CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(obj, &tj, &e), RM_OK);
        rm_tj_defaults(&tj);
        CU_ASSERT_EQUAL_FATAL(rm_tj_validate(&tj, &e), RM_OK);
        char over[512];
        rm_kube_worker_pod_args pa = {.tj = &tj,
                                      .index = 0,
                                      .epoch = 1,
                                      .rdzv_url = "http://r",
                                      .metrics_port = -1,
                                      .overridden = over,
                                      .overridden_cap = sizeof over};
        cJSON *pod = rm_kube_worker_pod(&pa, &e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
        for (size_t i = 0; i < RM_ARRAY_LEN(topo); i++) {
            CU_ASSERT_PTR_NOT_NULL(strstr(over, topo[i])); /* refused, and named */
            if (pipe && strcmp(topo[i], RM_ENV_PARALLELISM) == 0)
                continue;
            CU_ASSERT_PTR_NULL(pod_var(pod, topo[i])); /* allreduce: none at all */
        }
        CU_ASSERT_STRING_EQUAL(pod_val(pod, "MINE"), "x");
        CU_ASSERT_PTR_NULL(strstr(over, "MINE"));
        if (pipe) { /* the operator's value, from spec.parallelism, not the template's */
            cJSON *par = cJSON_Parse(pod_val(pod, RM_ENV_PARALLELISM));
            CU_ASSERT_EQUAL(rm_json_path(par, "pipelineStages")->valueint, 2);
            cJSON_Delete(par);
        }
        cJSON_Delete(pod);
        rm_tj_free(&tj);
        cJSON_Delete(obj);
    }
#undef TOPO_ENV
}

static const char *str_at(const cJSON *o, const char *path)
{
    const cJSON *v = rm_json_path(o, path);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* spec.placement.workersPerNode (docs/strategies.md#topology): node groups as pod affinity /
 * anti-affinity. */
/* Remote data: an init container of the worker image runs `fetch` with the worker's env and mounts
 * into the data cache — on the volume holding the checkpoint path (shared by the job's pods) when
 * there is one, else on a per-pod emptyDir; data.secretRef is envFrom on every container; local
 * data adds nothing. */
static void test_data_init_container(void)
{
#define GPT "\"model\":{\"type\":\"gpt\",\"layers\":1,\"heads\":1,\"embed\":8,\"context\":8,\"vocab\":256}"
    rm_tj tj;
    cJSON *pod =
        pod_of(JOB_HEAD "\"spec\":{\"replicas\":2,\"checkpoint\":{\"path\":\"/ck/job\"},"
                        "\"training\":{" GPT ",\"data\":{\"uri\":\"s3://b/c.txt\",\"format\":\"text\","
                        "\"secretRef\":{\"name\":\"s3-creds\"}}},"
                        "\"template\":{\"spec\":{\"volumes\":[{\"name\":\"ck\",\"persistentVolumeClaim\":"
                        "{\"claimName\":\"c\"}}],\"containers\":[{\"name\":\"worker\",\"volumeMounts\":"
                        "[{\"name\":\"ck\",\"mountPath\":\"/ck/\"}]}]}}}}",
               1, &tj);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_DATA_CACHE), "/ck/job/.data-cache"); /* the shared volume */
    const cJSON *ic = rm_json_path(pod, "spec.initContainers[0]");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ic);
    CU_ASSERT_STRING_EQUAL(rm_json_path(ic, "name")->valuestring, "fetch-data");
    CU_ASSERT_STRING_EQUAL(rm_json_path(ic, "args[0]")->valuestring, "fetch");
    CU_ASSERT_STRING_EQUAL(rm_json_path(ic, "image")->valuestring,
                           rm_json_path(pod, "spec.containers[0].image")->valuestring);
    CU_ASSERT_STRING_EQUAL(rm_json_path(ic, "volumeMounts[0].mountPath")->valuestring, "/ck/");
    char *a = cJSON_PrintUnformatted(rm_json_path(ic, "env"));
    char *b = cJSON_PrintUnformatted(rm_json_path(pod, "spec.containers[0].env"));
    CU_ASSERT_STRING_EQUAL(a, b); /* the same settings, RINGMASTER_TRAINING included */
    free(a);
    free(b);
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].envFrom[0].secretRef.name")->valuestring,
                           "s3-creds");
    CU_ASSERT_STRING_EQUAL(rm_json_path(ic, "envFrom[0].secretRef.name")->valuestring, "s3-creds");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(rm_json_path(pod, "spec.volumes")), 1); /* no emptyDir */
    cJSON_Delete(pod);
    rm_tj_free(&tj);

    /* no volume at the checkpoint path: a per-pod emptyDir for the cache, mounted in both */
    pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":2,\"training\":{" GPT ",\"data\":{\"uri\":"
                          "\"https://h/c.txt\",\"format\":\"text\"}}}}",
                 0, &tj);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    CU_ASSERT_STRING_EQUAL(pod_val(pod, RM_ENV_DATA_CACHE), "/var/cache/ringmaster/data");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.volumes[0].name")->valuestring, "ringmaster-data");
    CU_ASSERT_PTR_NOT_NULL(rm_json_path(pod, "spec.volumes[0].emptyDir"));
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.initContainers[0].volumeMounts[0].mountPath")->valuestring,
                           "/var/cache/ringmaster/data");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.containers[0].volumeMounts[0].name")->valuestring,
                           "ringmaster-data");
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "spec.containers[0].envFrom"));
    cJSON_Delete(pod);
    rm_tj_free(&tj);

    /* local or built-in data: no init container, no cache variable */
    pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":2,\"training\":{" GPT
                          ",\"data\":{\"uri\":\"builtin:tinyshakespeare\"}}}}",
                 0, &tj);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pod);
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "spec.initContainers"));
    CU_ASSERT_PTR_NULL(pod_var(pod, RM_ENV_DATA_CACHE));
    cJSON_Delete(pod);
    rm_tj_free(&tj);
#undef GPT
}

static void test_placement(void)
{
    rm_tj tj;
    /* k = 2: worker 3 is in group 1, with worker 2; away from every other group */
    cJSON *pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":4,\"placement\":{\"workersPerNode\":2}}}", 3, &tj);
    const cJSON *lab =
        cJSON_GetObjectItemCaseSensitive(rm_json_path(pod, "metadata.labels"), RM_LABEL_NODE_GROUP);
    CU_ASSERT_TRUE(cJSON_IsString(lab) && strcmp(lab->valuestring, "1") == 0);
    const cJSON *pa =
        rm_json_path(pod, "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(pa), 1);
    const cJSON *t0 = cJSON_GetArrayItem(pa, 0);
    CU_ASSERT_STRING_EQUAL(str_at(t0, "topologyKey"), "kubernetes.io/hostname");
    const cJSON *ml = rm_json_path(t0, "labelSelector.matchLabels");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItemCaseSensitive(ml, RM_LABEL_NODE_GROUP)->valuestring, "1");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItemCaseSensitive(ml, RM_LABEL_JOB)->valuestring, "g");
    const cJSON *aa =
        rm_json_path(pod, "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(aa), 1);
    const cJSON *t1 = cJSON_GetArrayItem(aa, 0);
    CU_ASSERT_STRING_EQUAL(str_at(t1, "topologyKey"), "kubernetes.io/hostname");
    const cJSON *me = rm_json_path(t1, "labelSelector.matchExpressions");
    CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(me), 3);
    CU_ASSERT_STRING_EQUAL(str_at(cJSON_GetArrayItem(me, 0), "operator"), "In");
    CU_ASSERT_STRING_EQUAL(str_at(cJSON_GetArrayItem(me, 1), "operator"), "Exists");
    CU_ASSERT_STRING_EQUAL(str_at(cJSON_GetArrayItem(me, 2), "operator"), "NotIn");
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetArrayItem(rm_json_path(cJSON_GetArrayItem(me, 2), "values"), 0)->valuestring, "1");
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    /* k = 1 (spread): no pod affinity, anti-affinity against every other worker of the job */
    pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":4,\"placement\":{\"workersPerNode\":1}}}", 2, &tj);
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "spec.affinity.podAffinity"));
    aa = rm_json_path(pod, "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(aa), 1);
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    /* the template's own anti-affinity wins (kept as written); ours is only the pod affinity */
    pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":4,\"placement\":{\"workersPerNode\":2},"
                          "\"template\":{\"spec\":{\"affinity\":{\"podAntiAffinity\":{\"mine\":true}}}}}}",
                 0, &tj);
    CU_ASSERT_TRUE(cJSON_IsTrue(rm_json_path(pod, "spec.affinity.podAntiAffinity.mine")));
    CU_ASSERT_PTR_NULL(
        rm_json_path(pod, "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"));
    CU_ASSERT_PTR_NOT_NULL(rm_json_path(pod, "spec.affinity.podAffinity"));
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    /* no placement: nothing added */
    pod = pod_of(JOB_HEAD "\"spec\":{\"replicas\":4}}", 0, &tj);
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "spec.affinity"));
    CU_ASSERT_PTR_NULL(
        cJSON_GetObjectItemCaseSensitive(rm_json_path(pod, "metadata.labels"), RM_LABEL_NODE_GROUP));
    cJSON_Delete(pod);
    rm_tj_free(&tj);
    /* validation names the field; the spec round-trips */
    static const char *const bad[] = {
        JOB_HEAD "\"spec\":{\"placement\":{}}}",
        JOB_HEAD "\"spec\":{\"placement\":{\"workersPerNode\":0}}}",
        JOB_HEAD "\"spec\":{\"placement\":{\"workersPerNode\":\"x\"}}}",
        JOB_HEAD "\"spec\":{\"placement\":{\"workersPerNod\":2}}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rm_err e = {0};
        cJSON *obj = cJSON_Parse(bad[i]);
        int rc = rm_tj_from_json(obj, &tj, &e);
        if (rc == RM_OK) {
            rm_tj_defaults(&tj);
            rc = rm_tj_validate(&tj, &e);
        }
        CU_ASSERT_EQUAL(rc, RM_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.placement"));
        rm_tj_free(&tj);
        cJSON_Delete(obj);
    }
    rm_err e = {0};
    cJSON *obj = cJSON_Parse(JOB_HEAD "\"spec\":{\"placement\":{\"workersPerNode\":3}}}");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(obj, &tj, &e), RM_OK);
    cJSON *back = rm_tj_to_json(&tj);
    CU_ASSERT_EQUAL(rm_json_path(back, "spec.placement.workersPerNode")->valueint, 3);
    cJSON_Delete(back);
    rm_tj_free(&tj);
    cJSON_Delete(obj);
}

/* RINGMASTER_RUN_NODES fakes nodes on one host: contiguous blocks of workers. */
static void test_run_fake_nodes(void)
{
    static const struct {
        const char *nodes;
        int index, replicas;
        const char *want;
    } ok[] = {
        {NULL, 3, 4, "box"},   {"", 3, 4, "box"},     {"1", 3, 4, "box-n0"}, {"2", 0, 4, "box-n0"},
        {"2", 1, 4, "box-n0"}, {"2", 2, 4, "box-n1"}, {"2", 3, 4, "box-n1"}, {"3", 5, 6, "box-n2"},
        {"2", -1, 4, "box"},   {"4", 3, 4, "box-n3"}, {"2", 2, 5, "box-n0"}, {"2", 3, 5, "box-n1"},
    };
    rm_err e = {0};
    char buf[64];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CU_ASSERT_EQUAL(
            rm_local_node_name("box", ok[i].nodes, ok[i].index, ok[i].replicas, buf, sizeof buf, &e), RM_OK);
        CU_ASSERT_STRING_EQUAL(buf, ok[i].want);
    }
    CU_ASSERT_EQUAL(rm_local_node_name(NULL, NULL, 0, 2, buf, sizeof buf, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(buf, "localhost");
    static const char *const bad[] = {"0", "5", "x", "2x", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(rm_local_node_name("box", bad[i], 0, 4, buf, sizeof buf, &e), RM_EINVAL);
        CU_ASSERT_STRING_EQUAL(e.field, RM_ENV_RUN_NODES);
    }
}

void rm_suite_launch(void)
{
    static const rm_test_case cases[] = {
        {"both runtimes give a worker the same settings", test_same_settings},
        {"bench arguments are the same in both runtimes", test_bench_args},
        {"bad arguments and non-literal values are refused", test_build_errors},
        {"ringmaster run honours an absolute checkpoint path", test_run_checkpoint_dir},
        {"ringmaster run fakes nodes on one host", test_run_fake_nodes},
        {"GPU workers get the NCCL defaults, the template's values win", test_gpu_defaults},
        {"a template's topology variables are refused, set or not", test_template_topology},
        {"spec.placement.workersPerNode renders node groups", test_placement},
        {"remote data: an init container fetches into the data cache", test_data_init_container},
        {"spec.output reaches the worker's environment", test_output_env},
    };
    RM_ADD_SUITE("launch", NULL, NULL, cases);
}
