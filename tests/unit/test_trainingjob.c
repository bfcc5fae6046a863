/* Tests for common/trainingjob: every parse and validation rule (each case names the exact
 * message and field, so a wrong or missing rule fails), defaults (idempotent, explicit zeros
 * kept), the to_json -> from_json round trip, status parsing and conditions. */
#include "common/json.h"
#include "common/quantity.h"
#include "common/rdzv.h"
#include "common/trainingjob.h"
#include "common/yaml.h"
#include "tests/unit/testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

static const char base_yaml[] =
    "apiVersion: ringmaster.dev/v1alpha1\n"
    "kind: TrainingJob\n"
    "metadata:\n"
    "  name: fashion-mnist\n"
    "  namespace: ml\n"
    "  uid: 1234-abcd\n"
    "  resourceVersion: \"77\"\n"
    "  generation: 3\n"
    "  labels: {team: vision}\n"
    "  annotations: {note: \"hello\"}\n"
    "  creationTimestamp: \"2026-11-21T08:00:00Z\"\n"
    "spec:\n"
    "  replicas: 4\n"
    "  minReplicas: 2\n"
    "  maxReplicas: 8\n"
    "  backend: ring\n"
    "  restartPolicy: {maxRestarts: 5, backoffSeconds: 1, progressDeadlineSeconds: 60}\n"
    "  runPolicy: {activeDeadlineSeconds: 3600, ttlSecondsAfterFinished: 600, cleanPodPolicy: All,"
    " suspend: false, managedBy: ringmaster.dev/operator}\n"
    "  checkpoint: {path: /checkpoints, intervalSteps: 200, keep: 3}\n"
    "  training:\n"
    "    mode: train\n"
    "    dataset: fashion-mnist\n"
    "    dataDir: /data\n"
    "    model: {type: mlp, hidden: [512, 256]}\n"
    "    epochs: 10\n"
    "    batchSizePerWorker: 64\n"
    "    optimizer: {type: sgd, lr: 0.02, momentum: 0.9, weightDecay: 0.0001, beta1: 0.9, beta2: 0.999, eps: "
    "1e-8}\n"
    "    warmupEpochs: 1\n"
    "    schedule: cosine\n"
    "    stepGamma: 0.1\n"
    "    stepEveryEpochs: 3\n"
    "    precision: fp32\n"
    "    fusionBufferMB: 25\n"
    "    seed: 7\n"
    "    maxSteps: 0\n"
    "    bench: {minBytes: 1024, maxBytes: 1048576, stepFactor: 2, iters: 20, warmupIters: 5, check: true}\n"
    "  template:\n"
    "    spec:\n"
    "      containers:\n"
    "      - name: worker\n"
    "        image: ringmaster/worker:latest\n"
    "        resources: {limits: {nvidia.com/gpu: 1}}\n";

static cJSON *base_doc(void)
{
    rm_yaml_docs *d = NULL;
    rm_err e = {0};
    int rc = rm_yaml_load(base_yaml, strlen(base_yaml), "base", &d, &e);
    CU_ASSERT_EQUAL_FATAL(rc, RM_OK);
    cJSON *j = rm_yaml_take(d, 0);
    rm_yaml_free(d);
    return j;
}

/* Sets (or with value NULL deletes) the member at a dotted path, creating objects on the way. */
static void set_path(cJSON *root, const char *path, const char *json_value)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    cJSON *cur = root;
    char *save = NULL;
    char *tok = strtok_r(buf, ".", &save);
    while (tok) {
        char *next = strtok_r(NULL, ".", &save);
        if (!next) {
            cJSON_DeleteItemFromObjectCaseSensitive(cur, tok);
            if (json_value) {
                cJSON *v = cJSON_Parse(json_value);
                CU_ASSERT_PTR_NOT_NULL_FATAL(v);
                cJSON_AddItemToObject(cur, tok, v);
            }
            return;
        }
        cJSON *child = cJSON_GetObjectItemCaseSensitive(cur, tok);
        if (!cJSON_IsObject(child)) {
            cJSON_DeleteItemFromObjectCaseSensitive(cur, tok);
            child = cJSON_AddObjectToObject(cur, tok);
        }
        cur = child;
        tok = next;
    }
}

/* parse + defaults + validate; returns rc and fills e */
static int check(const cJSON *doc, rm_err *e)
{
    rm_tj tj;
    memset(e, 0, sizeof *e);
    int rc = rm_tj_from_json(doc, &tj, e);
    if (rc)
        return rc;
    rm_tj_defaults(&tj);
    rc = rm_tj_validate(&tj, e);
    rm_tj_free(&tj);
    return rc;
}

typedef struct {
    const char *path;
    const char *value; /* JSON text, or NULL to delete */
    const char *msg;   /* expected full message; NULL = must be valid */
} tj_case;

static void run_cases(const tj_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cJSON *d = base_doc();
        set_path(d, cases[i].path, cases[i].value);
        rm_err e;
        int rc = check(d, &e);
        if (cases[i].msg) {
            CU_ASSERT_EQUAL(rc, RM_EINVAL);
            CU_ASSERT_STRING_EQUAL(e.msg, cases[i].msg);
            /* err->field is the message's prefix */
            size_t fl = strlen(e.field);
            CU_ASSERT(fl > 0 && strncmp(e.msg, e.field, fl) == 0 && strncmp(e.msg + fl, ": ", 2) == 0);
            if (rc != RM_EINVAL || strcmp(e.msg, cases[i].msg) != 0)
                fprintf(stderr, "\n  case %s=%s: got rc=%d \"%s\", want \"%s\"\n", cases[i].path,
                        cases[i].value ? cases[i].value : "(deleted)", rc, e.msg, cases[i].msg);
        } else {
            CU_ASSERT_EQUAL(rc, RM_OK);
            if (rc)
                fprintf(stderr, "\n  case %s=%s: unexpected error \"%s\"\n", cases[i].path,
                        cases[i].value ? cases[i].value : "(deleted)", e.msg);
        }
        cJSON_Delete(d);
    }
}

/* A rejected spec is the user's input, not a failing hop of the program: validate says it once, in
 * the message, and logs nothing (`ringmaster validate` would print a stray "check failed" line). */
static void test_validation_logs_nothing(void)
{
    static const tj_case cases[] = {
        {"spec.runPolicy.schedulingPolicy", "{\"queue\": \"Bad_Queue\"}",
         "spec.runPolicy.schedulingPolicy.queue: \"Bad_Queue\" must be a DNS-1123 subdomain (lower-case "
         "letters, digits, '-' and '.', at most 253)"},
        {"spec.runPolicy.schedulingPolicy", "{\"priorityClass\": \"X\"}",
         "spec.runPolicy.schedulingPolicy.priorityClass: \"X\" must be a DNS-1123 subdomain (a PriorityClass "
         "name)"},
        {"spec.runPolicy.schedulingPolicy", "{\"scheduleTimeoutSeconds\": -1}",
         "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds: must be >= 0"},
    };
    char *dir = rm_test_tmpdir("tjlog");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    int saved = dup(2);
    CU_ASSERT_FATAL(fd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(fd, 2);
    run_cases(cases, sizeof cases / sizeof cases[0]);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    char *text = rm_test_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NULL(strstr(text, "check failed"));
    if (*text)
        fprintf(stderr, "\n  validation logged: %s\n", text);
    free(text);
    rm_test_tmpdir_free(&dir);
}

/* The progress line's total counts optimizer steps as the worker does: a pipeline's global batch
 * spans its data-parallel replicas only, and accumulation makes each step K batches. */
static void test_steps_total(void)
{
    rm_tj_spec s;
    memset(&s, 0, sizeof s);
    s.replicas = 4;
    s.training.batch_size_per_worker = 32;
    s.training.epochs = 2;
    s.training.grad_accum = 1;
    s.par.pipeline_stages = 1;
    CU_ASSERT_DOUBLE_EQUAL(rm_tj_steps_total(&s), 2.0 * (60000 / 128), 1e-9);
    s.par.pipeline_stages = 2; /* 2 data-parallel replicas of 2 stages: global batch 64 */
    CU_ASSERT_DOUBLE_EQUAL(rm_tj_steps_total(&s), 2.0 * (60000 / 64), 1e-9);
    s.training.grad_accum = 3;
    CU_ASSERT_DOUBLE_EQUAL(rm_tj_steps_total(&s), 2.0 * (60000 / 192), 1e-9);
    s.training.max_steps = 100;
    CU_ASSERT_DOUBLE_EQUAL(rm_tj_steps_total(&s), 100, 1e-9);
    s.training.max_steps = 0;
    s.training.dataset = (char *)"my-data"; /* its size is the worker's to read: unknown */
    s.training.data_dir = (char *)"/data/mine";
    CU_ASSERT_DOUBLE_EQUAL(rm_tj_steps_total(&s), 0, 1e-9);
}

static void test_base_is_valid(void)
{
    cJSON *d = base_doc();
    rm_err e;
    CU_ASSERT_EQUAL(check(d, &e), RM_OK);
    rm_tj tj;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &tj, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(tj.name, "fashion-mnist");
    CU_ASSERT_STRING_EQUAL(tj.namespace_, "ml");
    CU_ASSERT_STRING_EQUAL(tj.uid, "1234-abcd");
    CU_ASSERT_STRING_EQUAL(tj.resource_version, "77");
    CU_ASSERT_EQUAL(tj.generation, 3);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(tj.labels, "team")->valuestring, "vision");
    CU_ASSERT_EQUAL(tj.spec.replicas, 4);
    CU_ASSERT_EQUAL(tj.spec.min_replicas, 2);
    CU_ASSERT_EQUAL(tj.spec.max_replicas, 8);
    CU_ASSERT_EQUAL(tj.spec.backend, RM_BACKEND_RING);
    CU_ASSERT_EQUAL(tj.spec.run.active_deadline_seconds, 3600);
    CU_ASSERT_EQUAL(tj.spec.run.ttl_seconds_after_finished, 600);
    CU_ASSERT_EQUAL(tj.spec.run.clean_pod_policy, RM_CLEAN_ALL);
    CU_ASSERT_STRING_EQUAL(tj.spec.run.managed_by, "ringmaster.dev/operator");
    CU_ASSERT_STRING_EQUAL(tj.spec.checkpoint.path, "/checkpoints");
    CU_ASSERT_EQUAL(tj.spec.training.nhidden, 2);
    CU_ASSERT_EQUAL(tj.spec.training.hidden[1], 256);
    CU_ASSERT_DOUBLE_EQUAL(tj.spec.training.optimizer.weight_decay, 1e-4, 1e-15);
    CU_ASSERT_EQUAL(tj.spec.training.seed, 7);
    CU_ASSERT_EQUAL(tj.spec.training.bench_max_bytes, 1048576);
    CU_ASSERT_STRING_EQUAL(rm_json_path(tj.spec.template, "spec.containers[0].image")->valuestring,
                           "ringmaster/worker:latest");
    rm_tj_free(&tj);
    rm_tj_free(NULL);
    cJSON_Delete(d);
}

static void test_parse_rules(void)
{
    static const tj_case cases[] = {
        /* strictness: unknown fields anywhere under spec except template */
        {"spec.foo", "1", "spec.foo: unknown field"},
        {"spec.training.foo", "1", "spec.training.foo: unknown field"},
        {"spec.training.epoch", "3", "spec.training.epoch: unknown field"},
        {"spec.restartPolicy.maxRestart", "1", "spec.restartPolicy.maxRestart: unknown field"},
        {"spec.runPolicy.foo", "1", "spec.runPolicy.foo: unknown field"},
        {"spec.checkpoint.foo", "1", "spec.checkpoint.foo: unknown field"},
        {"spec.training.model.foo", "1", "spec.training.model.foo: unknown field"},
        {"spec.training.optimizer.foo", "1", "spec.training.optimizer.foo: unknown field"},
        {"spec.training.bench.foo", "1", "spec.training.bench.foo: unknown field"},
        {"spec.template.whatever", "{\"x\":1}", NULL}, /* opaque */
        {"extra", "1", "extra: unknown field"},        /* top level is strict too */
        {"sepc", "{}", "sepc: unknown field"},
        /* numbers: 2^63-1 reads as 2^63 (a double) and is out of range, not "not an integer" */
        {"spec.runPolicy.activeDeadlineSeconds", "9223372036854775807",
         "spec.runPolicy.activeDeadlineSeconds: out of range"},
        {"spec.training.seed", "1e300", "spec.training.seed: out of range"},
        {"metadata.finalizers", "[\"x\"]", NULL}, /* other metadata ignored */
        {"status.workers", "\"3/4\"", NULL},      /* status is lenient */
        /* types */
        {"spec.replicas", "\"3\"", "spec.replicas: must be an integer"},
        {"spec.replicas", "2.5", "spec.replicas: must be an integer"},
        {"spec.replicas", "true", "spec.replicas: must be an integer"},
        {"spec.replicas", "1e12", "spec.replicas: out of range"},
        {"spec.minReplicas", "[]", "spec.minReplicas: must be an integer"},
        {"spec.restartPolicy", "5", "spec.restartPolicy: must be an object"},
        {"spec.restartPolicy.backoffSeconds", "\"1s\"",
         "spec.restartPolicy.backoffSeconds: must be a number"},
        {"spec.runPolicy.suspend", "\"yes\"", "spec.runPolicy.suspend: must be a boolean"},
        {"spec.runPolicy.activeDeadlineSeconds", "1.5",
         "spec.runPolicy.activeDeadlineSeconds: must be an integer"},
        {"spec.runPolicy.managedBy", "3", "spec.runPolicy.managedBy: must be a string"},
        {"spec.checkpoint.path", "{}", "spec.checkpoint.path: must be a string"},
        {"spec.training", "[]", "spec.training: must be an object"},
        {"spec.training.model", "3", "spec.training.model: must be an object"},
        {"spec.training.model.hidden", "512", "spec.training.model.hidden: must be an array"},
        {"spec.training.model.hidden", "[1, \"a\"]", "spec.training.model.hidden[1]: must be an integer"},
        {"spec.training.model.hidden", "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]",
         "spec.training.model.hidden: at most 16 layers"},
        {"spec.training.optimizer.lr", "\"fast\"", "spec.training.optimizer.lr: must be a number"},
        {"spec.training.bench.check", "1", "spec.training.bench.check: must be a boolean"},
        {"spec.training.seed", "-1", "spec.training.seed: must be >= 0"},
        {"spec.template", "\"pod\"", "spec.template: must be an object"},
        /* enums */
        {"spec.backend", "\"tcp\"", "spec.backend: must be one of auto, ring, nccl, mpi (got \"tcp\")"},
        {"spec.backend", "\"NCCL\"", "spec.backend: must be one of auto, ring, nccl, mpi (got \"NCCL\")"},
        {"spec.runPolicy.cleanPodPolicy", "\"Some\"",
         "spec.runPolicy.cleanPodPolicy: must be one of Running, All, None (got \"Some\")"},
        {"spec.training.mode", "\"eval\"", "spec.training.mode: must be one of train, bench (got \"eval\")"},
        {"spec.training.schedule", "\"linear\"",
         "spec.training.schedule: must be one of cosine, step, constant (got \"linear\")"},
        {"spec.training.precision", "\"fp8\"",
         "spec.training.precision: must be one of fp32, bf16, fp16 (got \"fp8\")"},
        {"spec.training.sharding", "\"zero3\"",
         "spec.training.sharding: must be one of none, optimizer, gradients, full (got \"zero3\")"},
        {"spec.training.sharding", "3", "spec.training.sharding: must be a string"},
        {"spec.training.optimizer.type", "\"rmsprop\"",
         "spec.training.optimizer.type: must be one of sgd, adam, adagrad, lbfgs, lamb, lars, adamw "
         "(got \"rmsprop\")"},
        /* the object itself */
        {"metadata.name", NULL, "metadata.name: required"},
        {"metadata.name", "5", "metadata.name: must be a string"},
        {"metadata", NULL, "metadata: required"},
        {"spec", NULL, "spec: required"},
        {"spec", "[]", "spec: must be an object"},
        {"kind", "\"Pod\"", "kind: must be TrainingJob (got \"Pod\")"},
        {"apiVersion", "\"ringmaster.dev/v1\"",
         "apiVersion: must be ringmaster.dev/v1alpha1 (got \"ringmaster.dev/v1\")"},
        {"metadata.labels", "{\"a\": 1}", "metadata.labels.a: must be a string"},
        {"metadata.generation", "\"3\"", "metadata.generation: must be an integer"},
        {"status.startTime", "\"yesterday\"",
         "status.startTime: must be an RFC 3339 time (got \"yesterday\")"},
        {"status.phase", "\"Done\"",
         "status.phase: must be one of Pending, Running, Restarting, Succeeded, Failed, Suspended (got "
         "\"Done\")"},
        {"status.replicas", "\"x\"", "status.replicas: must be an integer"},
        {"status.conditions", "[{\"type\":\"Running\",\"status\":\"maybe\"}]",
         "status.conditions[0].status: must be True or False"},
        {"status.conditions", "[{\"type\":\"Running\"}]", "status.conditions[0].status: required"},
        /* optional objects and arrays of a wrong type (every branch of the shared p_obj/p_arr) */
        {"kind", "3", "kind: must be a string"},
        {"apiVersion", "[]", "apiVersion: must be a string"},
        {"metadata.labels", "[]", "metadata.labels: must be an object"},
        {"metadata.annotations", "\"a=b\"", "metadata.annotations: must be an object"},
        {"status", "[]", "status: must be an object"},
        {"status.conditions", "{}", "status.conditions: must be an array"},
        {"status.conditions", "[3]", "status.conditions[0]: must be an object"},
        {"status.progress", "3", "status.progress: must be an object"},
        {"status.progress.step", "\"x\"", "status.progress.step: must be an integer"},
        {"status.result", "[]", "status.result: must be an object"},
        {"status.result.steps", "1.5", "status.result.steps: must be an integer"},
        {"status.message", "1", "status.message: must be a string"},
    };
    run_cases(cases, RM_ARRAY_LEN(cases));
}

static void test_validation_rules(void)
{
    static const tj_case cases[] = {
        {"metadata.name", "\"\"", "metadata.name: required"},
#define DNS1035                                                                              \
    "metadata.name: must be a DNS-1035 label: at most 63 lowercase letters, digits or '-', " \
    "starting with a letter and ending with a letter or digit, because it names the job's "  \
    "headless Service (got "
        {"metadata.name", "\"Fashion\"", DNS1035 "\"Fashion\")"},
        {"metadata.name", "\"-x\"", DNS1035 "\"-x\")"},
        {"metadata.name", "\"x-\"", DNS1035 "\"x-\")"},
        {"metadata.name", "\"a_b\"", DNS1035 "\"a_b\")"},
        /* the probe's names: a dot is fine in a CR name but not in a Service or a hostname, and a
         * Service name must start with a letter */
        {"metadata.name", "\"a.b\"", DNS1035 "\"a.b\")"},
        {"metadata.name", "\"1job\"", DNS1035 "\"1job\")"},
        {"metadata.name", "\"a1-b2\"", NULL},
        {"metadata.name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", /* 64 */
         DNS1035 "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\")"},
        /* pod hostnames "<name>-worker-<maxReplicas-1>": base maxReplicas 8 -> "-worker-7", 9 more */
        {"metadata.name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"", NULL}, /* 54 */
        {"metadata.name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",       /* 55 */
         "metadata.name: must be at most 54 characters with spec.maxReplicas 8: the pod hostname "
         "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-worker-7\" would be 64 characters, "
         "and a hostname is a DNS-1123 label of at most 63"},
        /* the probe's 60-character name */
        {"metadata.name", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
         "metadata.name: must be at most 54 characters with spec.maxReplicas 8: the pod hostname "
         "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-worker-7\" would be 69 characters, "
         "and a hostname is a DNS-1123 label of at most 63"},
#undef DNS1035
        {"metadata.namespace", "\"a.b\"",
         "metadata.namespace: must be a lowercase DNS-1123 label (got \"a.b\")"},
        {"spec.replicas", "0", "spec.replicas: must be >= 1"},
        {"spec.replicas", "-3", "spec.replicas: must be >= 1"},
        {"spec.replicas", "20000", "spec.replicas: must be <= 16384"},
        {"spec.replicas", "9", "spec.replicas: must be <= spec.maxReplicas"}, /* max is 8 */
        {"spec.replicas", "8", NULL},
        {"spec.minReplicas", "0", "spec.minReplicas: must be >= 1"},
        {"spec.minReplicas", "5", "spec.minReplicas: must be <= spec.replicas"},
        {"spec.minReplicas", "4", NULL},
        {"spec.maxReplicas", "3", "spec.replicas: must be <= spec.maxReplicas"},
        {"spec.maxReplicas", "4", NULL},
        {"spec.maxReplicas", "0", "spec.maxReplicas: must be >= 1"},
        {"spec.maxReplicas", "16385", "spec.maxReplicas: must be <= 16384"},
        {"spec.restartPolicy.maxRestarts", "-1", "spec.restartPolicy.maxRestarts: must be >= 0"},
        {"spec.restartPolicy.maxRestarts", "0", NULL},
        {"spec.restartPolicy.backoffSeconds", "-1",
         "spec.restartPolicy.backoffSeconds: must be between 0 and 3600"},
        {"spec.restartPolicy.backoffSeconds", "3601",
         "spec.restartPolicy.backoffSeconds: must be between 0 and 3600"},
        {"spec.restartPolicy.progressDeadlineSeconds", "-0.5",
         "spec.restartPolicy.progressDeadlineSeconds: must be >= 0"},
        {"spec.restartPolicy.progressDeadlineSeconds", "0", NULL},
        {"spec.runPolicy.activeDeadlineSeconds", "-1", "spec.runPolicy.activeDeadlineSeconds: must be >= 0"},
        {"spec.runPolicy.ttlSecondsAfterFinished", "-2",
         "spec.runPolicy.ttlSecondsAfterFinished: must be >= -1"},
        {"spec.runPolicy.ttlSecondsAfterFinished", "-1", NULL},
        {"spec.runPolicy.managedBy", "\"\"", "spec.runPolicy.managedBy: must be 1 to 63 characters"},
        {"spec.checkpoint.path", "\"\"", "spec.checkpoint.path: must not be empty"},
        {"spec.checkpoint.path", "\"/ck\\u001b[2J\"",
         "spec.checkpoint.path: must not contain control characters"},
        {"spec.training.dataDir", "\"/d\\n\"", "spec.training.dataDir: must not contain control characters"},
        {"spec.runPolicy.managedBy", "\"x\\u0007\"",
         "spec.runPolicy.managedBy: must not contain control characters"},
        {"spec.checkpoint.intervalSteps", "0", "spec.checkpoint.intervalSteps: must be >= 1"},
        {"spec.checkpoint.keep", "0", "spec.checkpoint.keep: must be >= 1"},
        {"spec.training.dataset", "\"mnist\"",
         "spec.training.dataset: must be fashion-mnist (got \"mnist\")"},
        {"spec.training.dataDir", "\"\"", "spec.training.dataDir: must not be empty"},
        {"spec.training.model.type", "\"cnn\"",
         "spec.training.model.type: must be one of mlp, gpt (got \"cnn\")"},
        {"spec.training.model.hidden", "[512, 0]",
         "spec.training.model.hidden[1]: must be between 1 and 65536"},
        {"spec.training.model.hidden", "[65537]",
         "spec.training.model.hidden[0]: must be between 1 and 65536"},
        {"spec.training.model.hidden", "[65536]", NULL},
        {"spec.training.model.hidden", "[]", NULL}, /* a linear model */
        {"spec.training.epochs", "0", "spec.training.epochs: must be between 1 and 100000"},
        {"spec.training.batchSizePerWorker", "0",
         "spec.training.batchSizePerWorker: must be between 1 and 65536"},
        {"spec.training.batchSizePerWorker", "65537",
         "spec.training.batchSizePerWorker: must be between 1 and 65536"},
        {"spec.training.optimizer.lr", "0", "spec.training.optimizer.lr: must be > 0 and <= 100"},
        {"spec.training.optimizer.lr", "-0.1", "spec.training.optimizer.lr: must be > 0 and <= 100"},
        {"spec.training.optimizer.momentum", "1", "spec.training.optimizer.momentum: must be >= 0 and < 1"},
        {"spec.training.optimizer.momentum", "0", NULL},
        {"spec.training.optimizer.weightDecay", "-1", "spec.training.optimizer.weightDecay: must be >= 0"},
        {"spec.training.optimizer.beta1", "1.5", "spec.training.optimizer.beta1: must be >= 0 and < 1"},
        {"spec.training.optimizer.beta2", "-0.1", "spec.training.optimizer.beta2: must be >= 0 and < 1"},
        {"spec.training.optimizer.eps", "0", "spec.training.optimizer.eps: must be > 0"},
        {"spec.training.warmupEpochs", "-1", "spec.training.warmupEpochs: must be >= 0"},
        {"spec.training.warmupEpochs", "11", "spec.training.warmupEpochs: must be <= spec.training.epochs"},
        {"spec.training.warmupEpochs", "0", NULL},
        {"spec.training.stepGamma", "1.5", "spec.training.stepGamma: must be > 0 and <= 1"},
        {"spec.training.stepGamma", "0", "spec.training.stepGamma: must be > 0 and <= 1"},
        {"spec.training.stepEveryEpochs", "0", "spec.training.stepEveryEpochs: must be >= 1"},
        {"spec.training.fusionBufferMB", "-1", "spec.training.fusionBufferMB: must be between 0 and 4096"},
        {"spec.training.fusionBufferMB", "0", NULL},
        {"spec.training.sharding", "\"full\"", NULL},
        {"spec.training.sharding", "\"none\"", NULL},
        {"spec.training.maxSteps", "-1", "spec.training.maxSteps: must be >= 0"},
        {"spec.training.bench.minBytes", "2", "spec.training.bench.minBytes: must be between 4 and 2^40"},
        {"spec.training.bench.maxBytes", "512",
         "spec.training.bench.maxBytes: must be >= spec.training.bench.minBytes and <= 2^40"},
        {"spec.training.bench.stepFactor", "1", "spec.training.bench.stepFactor: must be >= 2"},
        {"spec.training.bench.iters", "0", "spec.training.bench.iters: must be between 1 and 1000000"},
        {"spec.training.bench.warmupIters", "-1",
         "spec.training.bench.warmupIters: must be between 0 and 1000000"},
        {"spec.training.bench.warmupIters", "0", NULL},
    };
    run_cases(cases, RM_ARRAY_LEN(cases));
}

/* The name bound follows maxReplicas: every "<name>-worker-<i>" hostname up to the largest index
 * fits 63 characters, and a job that could grow past it is refused up front. */
static void test_name_fits_max_replicas(void)
{
    CU_ASSERT_EQUAL(rm_tj_name_max(1), 54);      /* -worker-0 */
    CU_ASSERT_EQUAL(rm_tj_name_max(10), 54);     /* -worker-9 */
    CU_ASSERT_EQUAL(rm_tj_name_max(11), 53);     /* -worker-10 */
    CU_ASSERT_EQUAL(rm_tj_name_max(1024), 51);   /* -worker-1023 */
    CU_ASSERT_EQUAL(rm_tj_name_max(5000), 51);   /* -worker-4999 */
    CU_ASSERT_EQUAL(rm_tj_name_max(16384), 50);  /* -worker-16383 */
    CU_ASSERT_EQUAL(rm_tj_name_max(100000), 50); /* clamped */
    CU_ASSERT_EQUAL(RM_TJ_MAX_REPLICAS, RM_RDZV_MAX_WORLD);
    char name[64];
    memset(name, 'a', sizeof name);
    for (int len = 50; len <= 52; len++) {
        cJSON *d = base_doc();
        name[len] = 0;
        char js[80];
        snprintf(js, sizeof js, "\"%s\"", name);
        set_path(d, "metadata.name", js);
        set_path(d, "spec.maxReplicas", "1024");
        rm_err e;
        int rc = check(d, &e);
        CU_ASSERT_EQUAL(rc, len <= 51 ? RM_OK : RM_EINVAL);
        if (len > 51) {
            CU_ASSERT_STRING_EQUAL(e.field, "metadata.name");
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "-worker-1023\" would be 64 characters"));
        }
        name[len] = 'a';
        cJSON_Delete(d);
    }
}

/* The CRD's bounds are the validator's: the API refuses at the same number `validate` does, so
 * `kubectl scale --replicas=20000` is a 422 instead of a job the operator must fail. Each schema
 * maximum is read from deploy/crd and checked at and just past the bound. */
static void test_crd_bounds_match(void)
{
    char path[512];
    const char *root = getenv("RM_ROOT");
    snprintf(path, sizeof path, "%s/deploy/crd/trainingjobs.ringmaster.dev.yaml", root && *root ? root : ".");
    rm_yaml_docs *d = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_yaml_load_file(path, &d, &e), RM_OK);
    const cJSON *spec =
        rm_json_path(rm_yaml_doc(d, 0), "spec.versions[0].schema.openAPIV3Schema.properties.spec.properties");
    CU_ASSERT_PTR_NOT_NULL_FATAL(spec);
    static const struct {
        const char *schema, *field;
        double max;
        bool exclusive;
    } b[] = {
        {"replicas", "spec.replicas", RM_TJ_MAX_REPLICAS, false},
        {"minReplicas", "spec.minReplicas", RM_TJ_MAX_REPLICAS, false},
        {"maxReplicas", "spec.maxReplicas", RM_TJ_MAX_REPLICAS, false},
        {"restartPolicy.properties.backoffSeconds", "spec.restartPolicy.backoffSeconds", 3600, false},
        {"training.properties.epochs", "spec.training.epochs", 100000, false},
        {"training.properties.batchSizePerWorker", "spec.training.batchSizePerWorker", 65536, false},
        {"training.properties.optimizer.properties.lr", "spec.training.optimizer.lr", 100, false},
        {"training.properties.optimizer.properties.momentum", "spec.training.optimizer.momentum", 1, true},
        {"training.properties.optimizer.properties.beta1", "spec.training.optimizer.beta1", 1, true},
        {"training.properties.optimizer.properties.beta2", "spec.training.optimizer.beta2", 1, true},
        {"training.properties.stepGamma", "spec.training.stepGamma", 1, false},
        {"training.properties.fusionBufferMB", "spec.training.fusionBufferMB", 4096, false},
        {"training.properties.model.properties.hidden.items", "spec.training.model.hidden[0]", 65536, false},
        {"training.properties.model.properties.layers", "spec.training.model.layers", 1024, false},
        {"training.properties.model.properties.heads", "spec.training.model.heads", 1024, false},
        {"training.properties.model.properties.embed", "spec.training.model.embed", 65536, false},
        {"training.properties.model.properties.context", "spec.training.model.context", 1 << 20, false},
        {"training.properties.model.properties.vocab", "spec.training.model.vocab", 1 << 24, false},
        {"training.properties.model.properties.dropout", "spec.training.model.dropout", 1, true},
        {"training.properties.data.properties.validation.properties.fraction",
         "spec.training.data.validation.fraction", 1, true},
        {"training.properties.gradientAccumulationSteps", "spec.training.gradientAccumulationSteps", 65536,
         false},
        {"parallelism.properties.tensorParallel", "spec.parallelism.tensorParallel", RM_TJ_MAX_REPLICAS,
         false},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(b); i++) {
        char sp[160];
        snprintf(sp, sizeof sp, "%s.maximum", b[i].schema);
        const cJSON *mx = rm_json_path(spec, sp);
        snprintf(sp, sizeof sp, "%s.exclusiveMaximum", b[i].schema);
        bool ex = cJSON_IsTrue(rm_json_path(spec, sp));
        CU_ASSERT(cJSON_IsNumber(mx) && mx->valuedouble == b[i].max && ex == b[i].exclusive);
        if (!cJSON_IsNumber(mx) || mx->valuedouble != b[i].max || ex != b[i].exclusive)
            fprintf(stderr, "\n  CRD %s: maximum %g%s, want %g%s\n", b[i].schema,
                    cJSON_IsNumber(mx) ? mx->valuedouble : -1, ex ? " (exclusive)" : "", b[i].max,
                    b[i].exclusive ? " (exclusive)" : "");
    }
    rm_yaml_free(d);
    /* the validator's side of the same bounds (a small job, so only the bound itself can fail) */
    static const tj_case cases[] = {
        {"spec.maxReplicas", "16384", NULL},
        {"spec.maxReplicas", "16385", "spec.maxReplicas: must be <= 16384"},
        {"spec.restartPolicy.backoffSeconds", "3600", NULL},
        {"spec.training.epochs", "100000", NULL},
        {"spec.training.epochs", "100001", "spec.training.epochs: must be between 1 and 100000"},
        {"spec.training.optimizer.lr", "100", NULL},
        {"spec.training.optimizer.lr", "100.5", "spec.training.optimizer.lr: must be > 0 and <= 100"},
        {"spec.training.optimizer.beta1", "0.999", NULL},
        {"spec.training.optimizer.beta1", "1", "spec.training.optimizer.beta1: must be >= 0 and < 1"},
        {"spec.training.stepGamma", "1", NULL},
        {"spec.training.fusionBufferMB", "4096", NULL},
        {"spec.training.fusionBufferMB", "4097", "spec.training.fusionBufferMB: must be between 0 and 4096"},
    };
    run_cases(cases, RM_ARRAY_LEN(cases));
}

/* A global batch over the training set (docs/architecture.md#robustness) gives epochs of zero steps (a
 * livelock at run time), so it is refused with both fields named; base: 4 replicas, max 8, 60,000
 * images. */
static void test_global_batch_fits_dataset(void)
{
    static const tj_case cases[] = {
        {"spec.training.batchSizePerWorker", "7500", NULL}, /* 8 x 7500 = 60000 exactly */
        {"spec.training.batchSizePerWorker", "7501",
         "spec.training.batchSizePerWorker: the global batch spec.maxReplicas (8) x "
         "spec.training.batchSizePerWorker (7501) = 60008 samples is larger than the 60000 training "
         "samples of fashion-mnist: an epoch would have no step (at most 7500 per worker)"},
        {"spec.training.batchSizePerWorker", "40000",
         "spec.training.batchSizePerWorker: the global batch spec.maxReplicas (8) x "
         "spec.training.batchSizePerWorker (40000) = 320000 samples is larger than the 60000 training "
         "samples of fashion-mnist: an epoch would have no step (at most 7500 per worker)"},
        /* a data folder of unknown size (the base's /data) is not guessed at */
        {"spec.training.dataDir", "\"/data\"", NULL},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        cJSON *d = base_doc();
        set_path(d, "spec.training.dataDir", NULL); /* the built-in folder: 60,000 known */
        set_path(d, "spec.training.batchSizePerWorker", "40000");
        set_path(d, cases[i].path, cases[i].value);
        rm_err e;
        int rc = check(d, &e);
        CU_ASSERT_EQUAL(rc, cases[i].msg ? RM_EINVAL : RM_OK);
        if (cases[i].msg)
            CU_ASSERT_STRING_EQUAL(e.msg, cases[i].msg);
        if (rc && (!cases[i].msg || strcmp(e.msg, cases[i].msg)))
            fprintf(stderr, "\n  case %s: got \"%s\"\n", cases[i].path, e.msg);
        cJSON_Delete(d);
    }
    /* the probe's job: 2 replicas (max defaults to replicas) x 40000; bench mode reads no data */
    cJSON *d = base_doc();
    set_path(d, "spec.training.dataDir", NULL);
    set_path(d, "spec.replicas", "2");
    set_path(d, "spec.minReplicas", "2");
    set_path(d, "spec.maxReplicas", NULL);
    set_path(d, "spec.training.batchSizePerWorker", "40000");
    rm_err e;
    CU_ASSERT_EQUAL(check(d, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.training.batchSizePerWorker");
    CU_ASSERT_PTR_NOT_NULL(
        strstr(e.msg, "the global batch spec.replicas (2) x spec.training.batchSizePerWorker (40000)"));
    set_path(d, "spec.training.mode", "\"bench\"");
    CU_ASSERT_EQUAL(check(d, &e), RM_OK);
    cJSON_Delete(d);
}

/* A memory budget (docs/architecture.md#robustness). The estimate follows the worker's allocations; a model
 * over RM_TJ_MAX_PARAMS is refused everywhere, one over the container's memory limit by
 * rm_tj_validate, and rm_tj_check_memory applies any other cap (the local machine). */
static void test_memory_budget(void)
{
    static const struct {
        const char *q;
        int64_t bytes;
    } qs[] = {
        {"512Mi", 512LL << 20}, {"4Gi", 4LL << 30},         {"1.5Gi", 3LL << 29}, {"2G", 2000000000LL},
        {"1e9", 1000000000LL},  {"128974848", 128974848LL}, {"100m", 1},          {"64k", 64000},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(qs); i++) {
        int64_t b = -1;
        CU_ASSERT_EQUAL(rm_quantity_bytes(qs[i].q, &b), RM_OK);
        CU_ASSERT_EQUAL(b, qs[i].bytes);
    }
    static const char *const badq[] = {"", "Mi", "-1Gi", "1GB", "lots", "1 Gi", "inf", "nan", "1e400"};
    for (size_t i = 0; i < RM_ARRAY_LEN(badq); i++) {
        int64_t b;
        CU_ASSERT_EQUAL(rm_quantity_bytes(badq[i], &b), RM_EINVAL);
    }
    /* the default model: 784-512-256-10, sgd (1 state) -> 5 copies */
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    rm_training_defaults(&t);
    rm_mem_estimate me;
    rm_training_memory(&t, &me);
    CU_ASSERT_EQUAL(me.params, 535818);
    CU_ASSERT_EQUAL(me.copies, 5);
    CU_ASSERT_EQUAL(me.model_bytes, 535818LL * 5 * 4);
    CU_ASSERT_EQUAL(me.batch_bytes, 4LL * 64 * (784 + 1 + 2 * 512 + 512 + 256 + 10));
    CU_ASSERT_EQUAL(me.data_bytes, 70000LL * 785 + 4LL * 60000);
    CU_ASSERT_EQUAL(me.total, me.model_bytes + me.batch_bytes + me.data_bytes + RM_TJ_MEM_OVERHEAD);
    t.optimizer.type = RM_OPT_ADAM;
    rm_training_memory(&t, &me);
    CU_ASSERT_EQUAL(me.copies, 7);
    rm_training_free(&t);
    /* the probe's hidden [65536, 65536]: over the total-size cap, refused by the worker's own
     * check too (rm_training_validate) */
    static const tj_case cases[] = {
        {"spec.training.model.hidden", "[65536, 65536]",
         "spec.training.model.hidden: the model has 4347133962 parameters, more than the 1073741824 a "
         "worker may hold (it would need about 81.0 GiB per worker for weights, gradients, optimizer "
         "state and checkpoint staging)"},
        {"spec.training.model.hidden", "[16384, 16384]", NULL}, /* 281M parameters: allowed */
        {"spec.template.spec.containers",
         "[{\"name\":\"worker\",\"resources\":{\"limits\":{\"memory\":\"64Mi\"}}}]",
         "spec.training.model: needs an estimated 95.5 MiB per worker (535818 parameters x 5 copies = "
         "10.2 MiB, batch 64 = 646.8 KiB, dataset 52.6 MiB, runtime 32 MiB), more than the worker "
         "container's memory limit (64.0 MiB)"},
        {"spec.template.spec.containers",
         "[{\"name\":\"worker\",\"resources\":{\"limits\":{\"memory\":\"128Mi\"}}}]", NULL},
        /* the worker container is the one named worker */
        {"spec.template.spec.containers",
         "[{\"name\":\"side\",\"resources\":{\"limits\":{\"memory\":\"1Mi\"}}},"
         "{\"name\":\"worker\",\"resources\":{\"limits\":{\"memory\":134217728}}}]",
         NULL},
        {"spec.template.spec.containers",
         "[{\"name\":\"worker\",\"resources\":{\"limits\":{\"memory\":\"lots\"}}}]",
         "spec.template.spec.containers[0].resources.limits.memory: must be a Kubernetes quantity such as "
         "512Mi or 4Gi"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        cJSON *d = base_doc();
        set_path(d, "spec.training.dataDir", NULL); /* built-in data: its size counts */
        set_path(d, cases[i].path, cases[i].value);
        rm_err e;
        int rc = check(d, &e);
        CU_ASSERT_EQUAL(rc, cases[i].msg ? RM_EINVAL : RM_OK);
        if (cases[i].msg)
            CU_ASSERT_STRING_EQUAL(e.msg, cases[i].msg);
        if (rc && (!cases[i].msg || strcmp(e.msg, cases[i].msg)))
            fprintf(stderr, "\n  case %s: got \"%s\"\n", cases[i].path, e.msg);
        cJSON_Delete(d);
    }
    /* another cap (the local machine): every worker on one host */
    cJSON *d = base_doc();
    rm_tj tj;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &tj, &e), RM_OK);
    rm_tj_defaults(&tj);
    rm_training_memory(&tj.spec.training, &me);
    CU_ASSERT_EQUAL(rm_tj_check_memory(&tj, me.total * 4, 4, "this machine's memory", &e), RM_OK);
    CU_ASSERT_EQUAL(rm_tj_check_memory(&tj, me.total * 4 - 1, 4, "this machine's memory", &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.training.model");
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, " x 4 workers = "));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "more than this machine's memory ("));
    CU_ASSERT_EQUAL(rm_tj_check_memory(&tj, 0, 4, "none", &e), RM_OK); /* no cap */
    tj.spec.training.mode = RM_MODE_BENCH;
    CU_ASSERT_EQUAL(rm_tj_check_memory(&tj, 1, 4, "tiny", &e), RM_OK); /* bench: no model */
    rm_tj_free(&tj);
    cJSON_Delete(d);
}

/* YAML can say .inf and .nan (JSON cannot): every number field reports them as not finite
 * instead of a misleading range message. */
static void test_non_finite_numbers(void)
{
    static const struct {
        const char *line, *msg;
    } cases[] = {
        {"  restartPolicy: {backoffSeconds: .inf}",
         "spec.restartPolicy.backoffSeconds: must be a finite number"},
        {"  training: {optimizer: {lr: .nan}}", "spec.training.optimizer.lr: must be a finite number"},
        {"  training: {warmupEpochs: -.inf}", "spec.training.warmupEpochs: must be a finite number"},
        {"  training: {epochs: .inf}", "spec.training.epochs: must be a finite number"},
        {"  runPolicy: {activeDeadlineSeconds: .NaN}",
         "spec.runPolicy.activeDeadlineSeconds: must be a finite number"},
        {"  training: {model: {hidden: [.inf]}}", "spec.training.model.hidden[0]: must be a finite number"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        char y[512];
        snprintf(y, sizeof y,
                 "apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\n"
                 "spec:\n%s\n",
                 cases[i].line);
        rm_yaml_docs *d = NULL;
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_yaml_load(y, strlen(y), "t", &d, &e), RM_OK);
        CU_ASSERT_EQUAL(check(rm_yaml_doc(d, 0), &e), RM_EINVAL);
        CU_ASSERT_STRING_EQUAL(e.msg, cases[i].msg);
        rm_yaml_free(d);
    }
}

static void test_defaults(void)
{
    const char min_json[] = "{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\","
                            "\"metadata\":{\"name\":\"j\"},\"spec\":{\"replicas\":3}}";
    rm_err e = {0};
    cJSON *d = cJSON_Parse(min_json);
    rm_tj tj;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &tj, &e), RM_OK);
    CU_ASSERT_PTR_NULL(tj.namespace_); /* parse does not default */
    CU_ASSERT_EQUAL(tj.spec.min_replicas, 0);
    rm_tj_defaults(&tj);
    CU_ASSERT_STRING_EQUAL(tj.namespace_, "default");
    CU_ASSERT_EQUAL(tj.spec.replicas, 3);
    CU_ASSERT_EQUAL(tj.spec.min_replicas, 3);
    CU_ASSERT_EQUAL(tj.spec.max_replicas, 3);
    CU_ASSERT_EQUAL(tj.spec.backend, RM_BACKEND_AUTO);
    CU_ASSERT_EQUAL(tj.spec.restart.max_restarts, 5);
    CU_ASSERT_DOUBLE_EQUAL(tj.spec.restart.backoff_seconds, 1, 0);
    CU_ASSERT_DOUBLE_EQUAL(tj.spec.restart.progress_deadline_seconds, 60, 0);
    CU_ASSERT_EQUAL(tj.spec.run.active_deadline_seconds, 0);
    CU_ASSERT_EQUAL(tj.spec.run.ttl_seconds_after_finished, -1);
    CU_ASSERT_EQUAL(tj.spec.run.clean_pod_policy, RM_CLEAN_RUNNING);
    CU_ASSERT_FALSE(tj.spec.run.suspend);
    CU_ASSERT_PTR_NULL(tj.spec.run.managed_by);
    CU_ASSERT_STRING_EQUAL(tj.spec.checkpoint.path, "/checkpoints");
    CU_ASSERT_EQUAL(tj.spec.checkpoint.interval_steps, 200);
    CU_ASSERT_EQUAL(tj.spec.checkpoint.keep, 3);
    const rm_training_spec *t = &tj.spec.training;
    CU_ASSERT_EQUAL(t->mode, RM_MODE_TRAIN);
    CU_ASSERT_STRING_EQUAL(t->dataset, "fashion-mnist");
    CU_ASSERT_STRING_EQUAL(t->data_dir, "/usr/share/datasets/fashion-mnist");
    CU_ASSERT_STRING_EQUAL(t->model_type, "mlp");
    CU_ASSERT_EQUAL(t->nhidden, 2);
    CU_ASSERT_EQUAL(t->hidden[0], 512);
    CU_ASSERT_EQUAL(t->hidden[1], 256);
    CU_ASSERT_EQUAL(t->epochs, 10);
    CU_ASSERT_EQUAL(t->batch_size_per_worker, 64);
    CU_ASSERT_EQUAL(t->optimizer.type, RM_OPT_SGD);
    CU_ASSERT_DOUBLE_EQUAL(t->optimizer.lr, 0.02, 0);
    CU_ASSERT_DOUBLE_EQUAL(t->optimizer.momentum, 0.9, 0);
    CU_ASSERT_DOUBLE_EQUAL(t->optimizer.weight_decay, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(t->optimizer.beta1, 0.9, 0);
    CU_ASSERT_DOUBLE_EQUAL(t->optimizer.beta2, 0.999, 0);
    CU_ASSERT_DOUBLE_EQUAL(t->optimizer.eps, 1e-8, 0);
    CU_ASSERT_DOUBLE_EQUAL(t->warmup_epochs, 1, 0);
    CU_ASSERT_EQUAL(t->schedule, RM_SCHED_COSINE);
    CU_ASSERT_DOUBLE_EQUAL(t->step_gamma, 0.1, 0);
    CU_ASSERT_EQUAL(t->step_every_epochs, 3);
    CU_ASSERT_EQUAL(t->precision, RM_PREC_FP32);
    CU_ASSERT_DOUBLE_EQUAL(t->fusion_buffer_mb, 25, 0);
    CU_ASSERT_EQUAL(t->seed, 42);
    CU_ASSERT_EQUAL(t->max_steps, 0);
    CU_ASSERT_EQUAL(t->bench_min_bytes, 32 << 20);
    CU_ASSERT_EQUAL(t->bench_max_bytes, 32 << 20);
    CU_ASSERT_EQUAL(t->bench_factor, 2);
    CU_ASSERT_EQUAL(t->bench_iters, 20);
    CU_ASSERT_EQUAL(t->bench_warmup, 5);
    CU_ASSERT_TRUE(t->bench_check);
    CU_ASSERT_PTR_NULL(tj.spec.template);
    CU_ASSERT_EQUAL(rm_tj_validate(&tj, &e), RM_OK);

    /* idempotent: a second pass changes nothing */
    cJSON *j1 = rm_tj_to_json(&tj);
    rm_tj_defaults(&tj);
    cJSON *j2 = rm_tj_to_json(&tj);
    CU_ASSERT_TRUE(cJSON_Compare(j1, j2, 1));
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    rm_tj_free(&tj);
    cJSON_Delete(d);

    /* explicit zeros survive defaults */
    const char zeros[] = "{\"metadata\":{\"name\":\"j\"},\"spec\":{\"restartPolicy\":{\"maxRestarts\":0,"
                         "\"backoffSeconds\":0,\"progressDeadlineSeconds\":0},\"runPolicy\":"
                         "{\"ttlSecondsAfterFinished\":0},\"training\":{\"optimizer\":{\"momentum\":0,"
                         "\"beta1\":0},\"warmupEpochs\":0,\"seed\":0,\"fusionBufferMB\":0,"
                         "\"model\":{\"hidden\":[]},\"bench\":{\"warmupIters\":0,\"check\":false}}}}";
    d = cJSON_Parse(zeros);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &tj, &e), RM_OK);
    rm_tj_defaults(&tj);
    CU_ASSERT_EQUAL(tj.spec.restart.max_restarts, 0);
    CU_ASSERT_EQUAL(tj.spec.restart.backoff_seconds, 0);
    CU_ASSERT_EQUAL(tj.spec.restart.progress_deadline_seconds, 0);
    CU_ASSERT_EQUAL(tj.spec.run.ttl_seconds_after_finished, 0);
    CU_ASSERT_EQUAL(tj.spec.training.optimizer.momentum, 0);
    CU_ASSERT_EQUAL(tj.spec.training.optimizer.beta1, 0);
    CU_ASSERT_EQUAL(tj.spec.training.warmup_epochs, 0);
    CU_ASSERT_EQUAL(tj.spec.training.seed, 0);
    CU_ASSERT_EQUAL(tj.spec.training.fusion_buffer_mb, 0);
    CU_ASSERT_EQUAL(tj.spec.training.nhidden, 0);
    CU_ASSERT_EQUAL(tj.spec.training.bench_warmup, 0);
    CU_ASSERT_FALSE(tj.spec.training.bench_check);
    CU_ASSERT_EQUAL(rm_tj_validate(&tj, &e), RM_OK);
    rm_tj_free(&tj);
    cJSON_Delete(d);

    /* optimizer-dependent defaults */
    rm_training_spec tr;
    memset(&tr, 0, sizeof tr);
    tr.optimizer.type = RM_OPT_ADAM;
    rm_training_defaults(&tr);
    CU_ASSERT_DOUBLE_EQUAL(tr.optimizer.lr, 0.001, 0);
    CU_ASSERT_DOUBLE_EQUAL(tr.optimizer.momentum, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(tr.optimizer.eps, 1e-8, 0);
    rm_training_free(&tr);
    tr.optimizer.type = RM_OPT_ADAGRAD;
    rm_training_defaults(&tr);
    CU_ASSERT_DOUBLE_EQUAL(tr.optimizer.lr, 0.01, 0);
    CU_ASSERT_DOUBLE_EQUAL(tr.optimizer.eps, 1e-10, 0);
    CU_ASSERT_EQUAL(rm_training_validate(&tr, "spec.training", &e), RM_OK);
    rm_training_free(&tr);
    rm_training_free(NULL);
}

static void fill_status(rm_tj_status *st)
{
    st->phase = RM_PHASE_RESTARTING;
    st->observed_generation = 3;
    rm_tj_set_condition(st, RM_COND_CREATED, true, "Created", "workers created", 3, 1795248000);
    rm_tj_set_condition(st, RM_COND_RESTARTING, true, "WorkerFailed", "worker 2 exited \"137\"", 3,
                        1795248060);
    st->replicas = 4;
    st->ready_replicas = 3;
    st->epoch = 2;
    st->restarts = 1;
    st->progress = (rm_tj_progress){.step = 1840,
                                    .train_epoch = 3,
                                    .loss = 0.3125,
                                    .samples_per_second = 21000.5,
                                    .last_checkpoint_step = 1800,
                                    .allreduce_gbps = 1.75};
    st->result = (rm_tj_result){true,  0.891, 0.28,  74.25, 8100,
                                9370,  1e6,   2e6,   5e5,   3e4,
                                9.5e7, 1.47,  12000, 0.3,   "s3://models/run-1/",
                                "",    4096};
    st->start_time = 1795248000;
    st->completion_time = 1795248100;
    st->last_restart_time = 1795248060;
    snprintf(st->message, sizeof st->message, "worker 2 failed");
}

static void test_round_trip(void)
{
    cJSON *d = base_doc();
    rm_err e = {0};
    rm_tj a, b;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    fill_status(&a.status);
    /* not defaulted: still round-trips exactly */
    cJSON *j1 = rm_tj_to_json(&a);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(j1, &b, &e), RM_OK);
    cJSON *j2 = rm_tj_to_json(&b);
    CU_ASSERT_TRUE(cJSON_Compare(j1, j2, 1));
    CU_ASSERT_EQUAL(memcmp(&a.status, &b.status, sizeof a.status), 0);
    CU_ASSERT_EQUAL(b.spec.training.seed, 7);
    CU_ASSERT_EQUAL(rm_json_path(j1, "status.result.memoryBytes.optimizer")->valuedouble, 5e5);
    CU_ASSERT_EQUAL(rm_json_path(j1, "status.result.peakRssBytes")->valuedouble, 9.5e7);
    CU_ASSERT_STRING_EQUAL(rm_json_path(j1, "status.conditions[1].type")->valuestring, "Restarting");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j1, "status.conditions[1].lastTransitionTime")->valuestring,
                           "2026-11-21T08:01:00Z");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j1, "status.conditions[0].status")->valuestring, "True");
    CU_ASSERT_EQUAL(rm_json_path(j1, "status.progress.step")->valuedouble, 1840);
    CU_ASSERT_STRING_EQUAL(rm_json_path(j1, "status.phase")->valuestring, "Restarting");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j1, "spec.template.spec.containers[0].name")->valuestring, "worker");
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    rm_tj_free(&b);
    /* defaulted: same */
    rm_tj_defaults(&a);
    j1 = rm_tj_to_json(&a);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(j1, &b, &e), RM_OK);
    j2 = rm_tj_to_json(&b);
    CU_ASSERT_TRUE(cJSON_Compare(j1, j2, 1));
    CU_ASSERT_EQUAL(rm_tj_validate(&b, &e), RM_OK);
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    /* copy is deep and equal */
    rm_tj c;
    CU_ASSERT_EQUAL(rm_tj_copy(&c, &b), RM_OK);
    rm_tj_free(&b);
    j1 = rm_tj_to_json(&a);
    j2 = rm_tj_to_json(&c);
    CU_ASSERT_TRUE(cJSON_Compare(j1, j2, 1));
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    rm_tj_free(&c);
    /* training alone (what the worker receives) */
    cJSON *tj_json = rm_training_to_json(&a.spec.training);
    rm_training_spec t;
    CU_ASSERT_EQUAL(rm_training_from_json(tj_json, "spec.training", &t, &e), RM_OK);
    cJSON *tj_json2 = rm_training_to_json(&t);
    CU_ASSERT_TRUE(cJSON_Compare(tj_json, tj_json2, 1));
    rm_training_free(&t);
    cJSON_Delete(tj_json);
    cJSON_Delete(tj_json2);
    rm_tj_free(&a);
    cJSON_Delete(d);
}

/* spec.training.sharding (docs/strategies.md#sharding): parsed, defaulted to none (and then left out of
 * the worker's JSON, so jobs without it render as before), carried to the worker, fp32 only. */
static void test_sharding(void)
{
    rm_err e = {0};
    cJSON *d = base_doc();
    rm_tj a;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_EQUAL(a.spec.training.sharding, RM_SHARD_NONE);
    cJSON *tj = rm_training_to_json(&a.spec.training);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItemCaseSensitive(tj, "sharding"));
    cJSON_Delete(tj);
    rm_tj_free(&a);
    const char *names[] = {"optimizer", "gradients", "full"};
    for (int i = 0; i < 3; i++) {
        char v[32];
        snprintf(v, sizeof v, "\"%s\"", names[i]);
        set_path(d, "spec.training.sharding", v);
        CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
        rm_tj_defaults(&a);
        CU_ASSERT_EQUAL(a.spec.training.sharding, (rm_sharding)(i + 1));
        CU_ASSERT_EQUAL(rm_tj_validate(&a, &e), RM_OK);
        tj = rm_training_to_json(&a.spec.training);
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(tj, "sharding");
        CU_ASSERT(cJSON_IsString(sh) && strcmp(sh->valuestring, names[i]) == 0);
        rm_training_spec t;
        CU_ASSERT_EQUAL(rm_training_from_json(tj, "spec.training", &t, &e), RM_OK);
        CU_ASSERT_EQUAL(t.sharding, (rm_sharding)(i + 1));
        rm_training_free(&t);
        cJSON_Delete(tj);
        rm_tj_free(&a);
    }
    /* sharding with fp16/bf16 names both fields */
    set_path(d, "spec.training.precision", "\"fp16\"");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_EQUAL(rm_tj_validate(&a, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.training.sharding: full needs spec.training.precision fp32 in "
                                  "this version (got fp16)");
    rm_tj_free(&a);
    cJSON_Delete(d);
}

/* spec.training.allreduce (docs/strategies.md#topology): parsed, defaulted to auto (left out of the
 * worker's JSON), carried to the worker; hierarchical refused with nccl/mpi and with parameter servers.
 * */
static void test_allreduce_algo(void)
{
    rm_err e = {0};
    cJSON *d = base_doc();
    rm_tj a;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_EQUAL(a.spec.training.allreduce, RM_AR_AUTO);
    cJSON *tj = rm_training_to_json(&a.spec.training);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItemCaseSensitive(tj, "allreduce"));
    cJSON_Delete(tj);
    rm_tj_free(&a);
    for (int i = RM_AR_RING; i <= RM_AR_HIER; i++) {
        char v[32];
        snprintf(v, sizeof v, "\"%s\"", rm_allreduce_names[i]);
        set_path(d, "spec.training.allreduce", v);
        CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
        rm_tj_defaults(&a);
        CU_ASSERT_EQUAL(a.spec.training.allreduce, (rm_allreduce_algo)i);
        CU_ASSERT_EQUAL(rm_tj_validate(&a, &e), RM_OK);
        tj = rm_training_to_json(&a.spec.training);
        rm_training_spec t;
        CU_ASSERT_EQUAL(rm_training_from_json(tj, "spec.training", &t, &e), RM_OK);
        CU_ASSERT_EQUAL(t.allreduce, (rm_allreduce_algo)i);
        rm_training_free(&t);
        cJSON_Delete(tj);
        rm_tj_free(&a);
    }
    set_path(d, "spec.training.allreduce", "\"tree\"");
    CU_ASSERT_EQUAL(rm_tj_from_json(d, &a, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg,
                           "spec.training.allreduce: must be one of auto, ring, hierarchical (got \"tree\")");
    rm_tj_free(&a);
    set_path(d, "spec.training.allreduce", "\"hierarchical\"");
    set_path(d, "spec.backend", "\"nccl\"");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_EQUAL(rm_tj_validate(&a, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.training.allreduce");
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.backend"));
    rm_tj_free(&a);
    set_path(d, "spec.backend", "\"ring\"");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_EQUAL(rm_tj_validate(&a, &e), RM_OK);
    rm_tj_free(&a);
    /* auto with GPUs resolves to nccl: hierarchical would be silently unused */
    set_path(d, "spec.backend", "\"auto\"");
    set_path(d, "spec.template",
             "{\"spec\":{\"containers\":[{\"name\":\"worker\",\"resources\":"
             "{\"limits\":{\"nvidia.com/gpu\":1}}}]}}");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_EQUAL(rm_tj_validate(&a, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.training.allreduce");
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "nvidia.com/gpu"));
    rm_tj_free(&a);
    cJSON_Delete(d);
}

static void test_status_and_conditions(void)
{
    rm_tj_status st;
    memset(&st, 0, sizeof st);
    CU_ASSERT_EQUAL(rm_tj_set_condition(&st, RM_COND_RUNNING, true, "Running", "all up", 1, 100), 1);
    CU_ASSERT_DOUBLE_EQUAL(st.conditions[RM_COND_RUNNING].last_transition, 100, 0);
    /* same again: no change, time kept */
    CU_ASSERT_EQUAL(rm_tj_set_condition(&st, RM_COND_RUNNING, true, "Running", "all up", 1, 200), 0);
    CU_ASSERT_DOUBLE_EQUAL(st.conditions[RM_COND_RUNNING].last_transition, 100, 0);
    /* new message, same status: changed, time kept */
    CU_ASSERT_EQUAL(rm_tj_set_condition(&st, RM_COND_RUNNING, true, "Running", "3 of 4", 1, 300), 1);
    CU_ASSERT_DOUBLE_EQUAL(st.conditions[RM_COND_RUNNING].last_transition, 100, 0);
    /* new generation counts as a change */
    CU_ASSERT_EQUAL(rm_tj_set_condition(&st, RM_COND_RUNNING, true, "Running", "3 of 4", 2, 350), 1);
    CU_ASSERT_DOUBLE_EQUAL(st.conditions[RM_COND_RUNNING].last_transition, 100, 0);
    /* flip: time moves */
    CU_ASSERT_EQUAL(rm_tj_set_condition(&st, RM_COND_RUNNING, false, "Restarting", "", 2, 400), 1);
    CU_ASSERT_DOUBLE_EQUAL(st.conditions[RM_COND_RUNNING].last_transition, 400, 0);
    CU_ASSERT_FALSE(st.conditions[RM_COND_RUNNING].status);
    CU_ASSERT_EQUAL(rm_tj_set_condition(&st, RM_COND__COUNT, true, "x", "y", 1, 1), 0);
    /* conditions come out in type order whatever the set order */
    rm_tj_set_condition(&st, RM_COND_CREATED, true, "Created", "", 2, 50);
    cJSON *j = rm_tj_status_to_json(&st);
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "conditions[0].type")->valuestring, "Created");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "conditions[1].type")->valuestring, "Running");
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "conditions[1].status")->valuestring, "False");
    CU_ASSERT_PTR_NULL(rm_json_path(j, "conditions[2]"));
    CU_ASSERT_PTR_NULL(rm_json_path(j, "result"));    /* absent until present */
    CU_ASSERT_PTR_NULL(rm_json_path(j, "startTime")); /* 0 = unset */
    CU_ASSERT_PTR_NULL(rm_json_path(j, "message"));
    CU_ASSERT_STRING_EQUAL(rm_json_path(j, "phase")->valuestring, "Pending");
    rm_tj_status back;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_tj_status_from_json(j, &back, &e), RM_OK);
    CU_ASSERT_EQUAL(memcmp(&st, &back, sizeof st), 0);
    cJSON_Delete(j);
    /* unknown condition types (someone else's) are ignored */
    cJSON *o =
        cJSON_Parse("{\"phase\":\"Running\",\"conditions\":[{\"type\":\"PodsReady\",\"status\":\"True\"}]}");
    CU_ASSERT_EQUAL(rm_tj_status_from_json(o, &back, &e), RM_OK);
    CU_ASSERT_EQUAL(back.phase, RM_PHASE_RUNNING);
    for (int i = 0; i < RM_COND__COUNT; i++)
        CU_ASSERT_FALSE(back.conditions[i].present);
    cJSON_Delete(o);
}

static void test_names(void)
{
    CU_ASSERT_STRING_EQUAL(rm_phase_name(RM_PHASE_SUCCEEDED), "Succeeded");
    CU_ASSERT_STRING_EQUAL(rm_phase_name((rm_phase)99), "Unknown");
    CU_ASSERT_STRING_EQUAL(rm_cond_name(RM_COND_RESTARTING), "Restarting");
    CU_ASSERT_STRING_EQUAL(rm_backend_name(RM_BACKEND_NCCL), "nccl");
    rm_backend b;
    CU_ASSERT_EQUAL(rm_backend_parse("mpi", &b), RM_OK);
    CU_ASSERT_EQUAL(b, RM_BACKEND_MPI);
    CU_ASSERT_EQUAL(rm_backend_parse("gloo", &b), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_backend_parse(NULL, &b), RM_EINVAL);
}

static void test_yaml_error_points_at_line(void)
{
    /* the flow a CLI uses: a validation error's field maps back to the manifest's line */
    const char y[] = "apiVersion: ringmaster.dev/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: x\n"
                     "spec:\n  replicas: 2\n  minReplicas: 3\n";
    rm_yaml_docs *d = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_yaml_load(y, strlen(y), "job.yaml", &d, &e), RM_OK);
    CU_ASSERT_EQUAL(check(rm_yaml_doc(d, 0), &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.minReplicas");
    int line = 0, col = 0;
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 0, e.field, &line, &col), RM_OK);
    CU_ASSERT_EQUAL(line, 7);
    CU_ASSERT_EQUAL(col, 3);
    rm_yaml_free(d);
    /* the shipped example is valid */
    char path[512];
    const char *root = getenv("RM_ROOT");
    snprintf(path, sizeof path, "%s/deploy/examples/fashion-mnist.yaml", root && *root ? root : ".");
    if (rm_yaml_load_file(path, &d, &e) == RM_OK) {
        CU_ASSERT_EQUAL(check(rm_yaml_doc(d, 0), &e), RM_OK);
        if (e.msg[0])
            fprintf(stderr, "\n  example: %s\n", e.msg);
        rm_yaml_free(d);
    }
}

/* spec.parallelism (docs/strategies.md#pipeline-stages): defaults, round trip and every rule, each with
 * its field-named message. A case applies up to three path=value edits to the base job (replicas 4, min
 * 2, max 8, hidden [512, 256] = 3 layers, batch 64, backend ring). */
static void test_parallelism(void)
{
    typedef struct {
        const char *path[3], *value[3];
        const char *msg; /* NULL = valid */
    } par_case;
    static const par_case cases[] = {
        {{"spec.parallelism", NULL}, {"{}"}, NULL},
        {{"spec.parallelism", NULL}, {"{\"pipelineStages\": 2, \"microBatches\": 4}"}, NULL},
        {{"spec.parallelism", NULL}, {"{\"pipelineStages\": 2, \"schedule\": \"gpipe\"}"}, NULL},
        {{"spec.parallelism", "spec.replicas"},
         {"{\"pipelineStages\": 3}", "3"},
         "spec.minReplicas: must be a multiple of spec.parallelism.pipelineStages (3) (got 2)"},
        {{"spec.parallelism", "spec.replicas", "spec.minReplicas"},
         {"{\"pipelineStages\": 3}", "6", "3"},
         "spec.maxReplicas: must be a multiple of spec.parallelism.pipelineStages (3) (got 8)"},
        {{"spec.parallelism", "spec.replicas", "spec.minReplicas"},
         {"{\"pipelineStages\": 2}", "3", "2"},
         "spec.replicas: must be a multiple of spec.parallelism.pipelineStages (2): the workers form "
         "a grid of 2 stages x replicas/2 data-parallel replicas (got 3)"},
        {{"spec.parallelism", "spec.replicas", "spec.maxReplicas"},
         {"{\"pipelineStages\": 4}", "4", "4"},
         "spec.minReplicas: must be a multiple of spec.parallelism.pipelineStages (4) (got 2)"},
        {{"spec.parallelism", "spec.minReplicas", "spec.maxReplicas"},
         {"{\"pipelineStages\": 4}", "4", "4"},
         "spec.parallelism.pipelineStages: must be <= the model's 3 linear layers "
         "(spec.training.model.hidden has 2 widths; each stage holds at least one layer) (got 4)"},
        {{"spec.parallelism", NULL},
         {"{\"pipelineStages\": 0}"},
         "spec.parallelism.pipelineStages: must be between 1 and 16384 (got 0)"},
        {{"spec.parallelism", NULL},
         {"{\"microBatches\": 0}"},
         "spec.parallelism.microBatches: must be >= 1 (got 0)"},
        {{"spec.parallelism", NULL},
         {"{\"microBatches\": -3}"},
         "spec.parallelism.microBatches: must be >= 1 (got -3)"},
        {{"spec.parallelism", NULL},
         {"{\"microBatches\": 65}"},
         "spec.parallelism.microBatches: must be <= spec.training.batchSizePerWorker (64): every "
         "micro-batch needs at least one sample (got 65)"},
        {{"spec.parallelism", NULL},
         {"{\"schedule\": \"zigzag\"}"},
         "spec.parallelism.schedule: must be one of 1f1b, gpipe (got \"zigzag\")"},
        {{"spec.parallelism", NULL}, {"{\"stages\": 2}"}, "spec.parallelism.stages: unknown field"},
        {{"spec.parallelism", "spec.strategy"},
         {"{\"pipelineStages\": 2}", "\"parameterServer\""},
         "spec.parallelism.pipelineStages: must be 1 with spec.strategy: parameterServer in this "
         "version (got 2)"},
        {{"spec.parallelism", "spec.training.sharding"},
         {"{\"pipelineStages\": 2}", "\"optimizer\""},
         "spec.training.sharding: must be none with spec.parallelism.pipelineStages > 1 in this "
         "version (a stage already holds only its own layers), or optimizer with tensorParallel > 1"},
        {{"spec.parallelism", "spec.training.precision"},
         {"{\"pipelineStages\": 2}", "\"bf16\""},
         "spec.training.precision: must be fp32 with spec.parallelism.pipelineStages > 1 in this version"},
        {{"spec.parallelism", "spec.backend"},
         {"{\"pipelineStages\": 2}", "\"mpi\""},
         "spec.backend: mpi cannot be used with spec.parallelism.pipelineStages > 1 in this version "
         "(stages talk TCP, or NCCL on GPUs; use auto, ring or nccl)"},
        /* nccl: GPU stages, whose links are NCCL send/recv (worker/pipeline/cuda/pipe_link_nccl.c) */
        {{"spec.parallelism", "spec.backend"}, {"{\"pipelineStages\": 2}", "\"nccl\""}, NULL},
        /* P = 1 with parameter servers is fine: nothing is split */
        {{"spec.parallelism", "spec.strategy"},
         {"{\"pipelineStages\": 1, \"microBatches\": 1}", "\"parameterServer\""},
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *d = base_doc();
        for (int k = 0; k < 3 && cases[i].path[k]; k++)
            set_path(d, cases[i].path[k], cases[i].value[k]);
        rm_err e;
        int rc = check(d, &e);
        if (cases[i].msg) {
            CU_ASSERT_EQUAL(rc, RM_EINVAL);
            CU_ASSERT_STRING_EQUAL(e.msg, cases[i].msg);
            if (rc != RM_EINVAL || strcmp(e.msg, cases[i].msg) != 0)
                fprintf(stderr, "\n  parallelism case %zu: got rc=%d \"%s\"\n", i, rc, e.msg);
        } else {
            CU_ASSERT_EQUAL(rc, RM_OK);
            if (rc)
                fprintf(stderr, "\n  parallelism case %zu: unexpected \"%s\"\n", i, e.msg);
        }
        cJSON_Delete(d);
    }
    /* defaults (1, 1, 1f1b) without the field, and none of it written back */
    rm_err e = {0};
    cJSON *d = base_doc();
    rm_tj a;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_FALSE(a.spec.par.present);
    CU_ASSERT_EQUAL(a.spec.par.pipeline_stages, 1);
    CU_ASSERT_EQUAL(a.spec.par.micro_batches, 1);
    CU_ASSERT_EQUAL(a.spec.par.schedule, RM_PIPE_1F1B);
    cJSON *j = rm_tj_spec_to_json(&a.spec);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItemCaseSensitive(j, "parallelism"));
    cJSON_Delete(j);
    rm_tj_free(&a);
    /* round trip keeps every field */
    set_path(d, "spec.parallelism", "{\"pipelineStages\": 2, \"microBatches\": 8, \"schedule\": \"gpipe\"}");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    cJSON *full = rm_tj_to_json(&a);
    rm_tj b;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(full, &b, &e), RM_OK);
    CU_ASSERT(b.spec.par.present);
    CU_ASSERT_EQUAL(b.spec.par.pipeline_stages, 2);
    CU_ASSERT_EQUAL(b.spec.par.micro_batches, 8);
    CU_ASSERT_EQUAL(b.spec.par.schedule, RM_PIPE_GPIPE);
    rm_tj c;
    CU_ASSERT_EQUAL_FATAL(rm_tj_copy(&c, &b), RM_OK);
    CU_ASSERT_EQUAL(c.spec.par.micro_batches, 8);
    rm_tj_free(&c);
    rm_tj_free(&b);
    cJSON_Delete(full);
    rm_tj_free(&a);
    cJSON_Delete(d);
}

/* A transformer's stages are bounded by its units (layers + 2: the embedding and the head hold a
 * stage each at most), not by the MLP's hidden widths. */
static void test_parallelism_gpt(void)
{
    for (int p = 4; p <= 5; p++) {
        cJSON *d = base_doc();
        char par[64];
        snprintf(par, sizeof par, "{\"pipelineStages\": %d}", p);
        set_path(d, "spec.parallelism", par);
        set_path(d, "spec.replicas", p == 4 ? "4" : "5");
        set_path(d, "spec.minReplicas", p == 4 ? "4" : "5");
        set_path(d, "spec.maxReplicas", p == 4 ? "4" : "5");
        set_path(d, "spec.training.model",
                 "{\"type\": \"gpt\", \"layers\": 2, \"heads\": 2, \"embed\": 8, \"context\": 5}");
        set_path(d, "spec.training.dataset", NULL);
        set_path(d, "spec.training.dataDir", NULL);
        set_path(d, "spec.training.data", "{\"uri\": \"builtin:tinyshakespeare\", \"format\": \"text\"}");
        rm_err e = {0};
        int rc = check(d, &e);
        if (p == 4) {
            CU_ASSERT_EQUAL(rc, RM_OK);
            if (rc)
                fprintf(stderr, "\n  gpt 4 stages: unexpected \"%s\"\n", e.msg);
        } else {
            CU_ASSERT_EQUAL(rc, RM_EINVAL);
            CU_ASSERT_STRING_EQUAL(e.msg, "spec.parallelism.pipelineStages: must be <= the transformer's 4 "
                                          "units (spec.training.model.layers 2, the embedding and the "
                                          "head; each stage holds at least one) (got 5)");
        }
        cJSON_Delete(d);
    }
}

/* spec.training.optimizer.type lbfgs (docs/strategies.md#sandblaster-l-bfgs): defaults, round trip, and
 * every rule that ties it to spec.strategy parameterServer / mode sync / backupWorkers 0, each naming
 * its field. */
static void test_lbfgs(void)
{
    rm_err e = {0};
    rm_tj a;
    cJSON *d = base_doc();
    set_path(d, "spec.training.optimizer", "{\"type\": \"lbfgs\"}");
    set_path(d, "spec.training.precision", NULL);
    /* allreduce (the default strategy): refused, naming the optimizer type */
    CU_ASSERT_EQUAL(check(d, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.training.optimizer.type: lbfgs needs spec.strategy: "
                                  "parameterServer (the parameters and the L-BFGS history live on "
                                  "the server shards; spec.strategy is allreduce)");
    set_path(d, "spec.strategy", "\"parameterServer\"");
    set_path(d, "spec.parameterServer", "{\"replicas\": 2}");
    set_path(d, "spec.backend", "\"ring\"");
    CU_ASSERT_EQUAL_FATAL(check(d, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    const rm_optimizer_spec *o = &a.spec.training.optimizer;
    CU_ASSERT_EQUAL(o->type, RM_OPT_LBFGS);
    CU_ASSERT_EQUAL(o->history, 10);
    CU_ASSERT_EQUAL(o->portions, 64);
    CU_ASSERT_EQUAL(o->line_search, RM_LS_ARMIJO);
    CU_ASSERT_DOUBLE_EQUAL(o->lr, 1.0, 0);
    rm_tj_free(&a);
    /* explicit values survive a round trip through the worker's JSON */
    set_path(
        d, "spec.training.optimizer",
        "{\"type\": \"lbfgs\", \"history\": 5, \"portions\": 16, \"lineSearch\": \"fixed\", \"lr\": 0.5}");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_EQUAL(rm_tj_validate(&a, &e), RM_OK);
    cJSON *tj = rm_training_to_json(&a.spec.training);
    rm_training_spec t;
    CU_ASSERT_EQUAL_FATAL(rm_training_from_json(tj, "spec.training", &t, &e), RM_OK);
    rm_training_defaults(&t);
    CU_ASSERT_EQUAL(t.optimizer.type, RM_OPT_LBFGS);
    CU_ASSERT_EQUAL(t.optimizer.history, 5);
    CU_ASSERT_EQUAL(t.optimizer.portions, 16);
    CU_ASSERT_EQUAL(t.optimizer.line_search, RM_LS_FIXED);
    CU_ASSERT_DOUBLE_EQUAL(t.optimizer.lr, 0.5, 0);
    rm_training_free(&t);
    cJSON_Delete(tj);
    rm_tj_free(&a);
    static const struct {
        const char *path, *value, *msg;
    } bad[] = {
        {"spec.parameterServer.mode", "\"async\"",
         "spec.parameterServer.mode: must be sync with spec.training.optimizer.type: lbfgs (every "
         "pass evaluates the full batch at one set of parameters)"},
        {"spec.parameterServer.backupWorkers", "1",
         "spec.parameterServer.backupWorkers: must be 0 with spec.training.optimizer.type: lbfgs (a "
         "straggler's portions are reissued to other workers instead)"},
        {"spec.training.optimizer.history", "0",
         "spec.training.optimizer.history: must be between 1 and 100 (got 0)"},
        {"spec.training.optimizer.history", "101",
         "spec.training.optimizer.history: must be between 1 and 100 (got 101)"},
        {"spec.training.optimizer.portions", "0",
         "spec.training.optimizer.portions: must be between 1 and 100000 (got 0)"},
        {"spec.training.optimizer.lineSearch", "\"wolfe\"",
         "spec.training.optimizer.lineSearch: must be one of armijo, fixed (got \"wolfe\")"},
        {"spec.training.precision", "\"bf16\"",
         "spec.training.precision: must be fp32 with spec.training.optimizer.type: lbfgs"},
        {"spec.training.optimizer.weightDecay", "0.001",
         "spec.training.optimizer.weightDecay: must be 0 with spec.training.optimizer.type: lbfgs "
         "(the full-batch objective has no L2 term in this version)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *c = cJSON_Duplicate(d, 1);
        set_path(c, "spec.training.optimizer", "{\"type\": \"lbfgs\"}");
        set_path(c, bad[i].path, bad[i].value);
        CU_ASSERT_EQUAL(check(c, &e), RM_EINVAL);
        CU_ASSERT_STRING_EQUAL(e.msg, bad[i].msg);
        cJSON_Delete(c);
    }
    /* portions of whole batches must fit the built-in set (60000 samples): 240 x 250 does, 241 x
     * 250 would leave every portion empty and every worker failing at start */
    set_path(d, "spec.training.batchSizePerWorker", "250");
    set_path(d, "spec.training.dataDir", NULL);
    set_path(d, "spec.training.optimizer", "{\"type\": \"lbfgs\", \"portions\": 240}");
    CU_ASSERT_EQUAL(check(d, &e), RM_OK);
    set_path(d, "spec.training.optimizer", "{\"type\": \"lbfgs\", \"portions\": 241}");
    CU_ASSERT_EQUAL(check(d, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.training.optimizer.portions: 241 portions of at least one "
                                  "batch (spec.training.batchSizePerWorker 250) need 60250 samples, "
                                  "more than the 60000 training samples of fashion-mnist (at most "
                                  "240 portions)");
    /* a data set of unknown size: the worker checks it at start */
    set_path(d, "spec.training.dataDir", "\"/data/mine\"");
    CU_ASSERT_EQUAL(check(d, &e), RM_OK);
    set_path(d, "spec.training.dataDir", "\"/data\"");
    set_path(d, "spec.training.batchSizePerWorker", "64");
    /* the lbfgs-only fields with another optimizer name the field */
    set_path(d, "spec.training.optimizer", "{\"type\": \"sgd\", \"portions\": 8}");
    CU_ASSERT_EQUAL(check(d, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.training.optimizer.portions: is only used with "
                                  "spec.training.optimizer.type: lbfgs (type is sgd)");
    set_path(d, "spec.training.optimizer", "{\"type\": \"adam\", \"lineSearch\": \"armijo\"}");
    CU_ASSERT_EQUAL(check(d, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.training.optimizer.lineSearch: is only used with "
                                  "spec.training.optimizer.type: lbfgs (type is adam)");
    cJSON_Delete(d);
}

/* The fields of docs/models-and-data.md: each parses into rm_tj and round-trips, a bad value gets
 * its field-named error, and a valid one whose feature has not landed says "not supported yet";
 * the spellings of what exists (builtin:fashion-mnist, a folder, idx, mlp, tensorParallel 1) pass.
 * Cases start from the base job without its dataDir (data.uri replaces it). */
typedef struct {
    const char *set[4][2]; /* path, JSON value */
    const char *msg;       /* NULL = valid */
} md_case;

#define GPT \
    "{\"type\": \"gpt\", \"layers\": 4, \"heads\": 4, \"embed\": 128, \"context\": 64, \"vocab\": 256}"
#define NS " is not supported yet"
static void test_models_and_data(void)
{
    static const md_case cases[] = {
        /* accepted: respellings of what exists */
        {{{"spec.training.data.uri", "\"builtin:fashion-mnist\""}}, NULL},
        {{{"spec.training.data.uri", "\"/data\""}, {"spec.training.dataDir", "\"/data\""}}, NULL},
        {{{"spec.training.data.uri", "\"file:///srv/fmnist\""}}, NULL},
        {{{"spec.training.data.format", "\"idx\""}}, NULL},
        {{{"spec.parallelism.tensorParallel", "1"}}, NULL},
        {{{"spec.training.model.type", "\"mlp\""}}, NULL},
        {{{"spec.training.gradientAccumulationSteps", "1"},
          {"spec.training.warmupSteps", "0"},
          {"spec.training.evalEverySteps", "0"}},
         NULL},
        /* ranges, named by field */
        {{{"spec.training.model",
           "{\"type\": \"gpt\", \"layers\": 0, \"heads\": 4, \"embed\": 128, \"context\": 64}"}},
         "spec.training.model.layers: must be between 1 and 1024 (got 0)"},
        {{{"spec.training.model",
           "{\"type\": \"gpt\", \"layers\": 2, \"heads\": 3, \"embed\": 128, \"context\": 64}"}},
         "spec.training.model.heads: must divide spec.training.model.embed (3 heads, embed 128)"},
        {{{"spec.training.model",
           "{\"type\": \"gpt\", \"layers\": 2, \"heads\": 4, \"embed\": 128, \"context\": 0}"}},
         "spec.training.model.context: must be between 1 and 1048576 (got 0)"},
        {{{"spec.training.model", "{\"type\": \"gpt\", \"layers\": 2, \"heads\": 4, \"embed\": 128}"}},
         "spec.training.model.context: required with spec.training.model.type: gpt"},
        {{{"spec.training.model", GPT}, {"spec.training.model.vocab", "0"}},
         "spec.training.model.vocab: must be between 1 and 16777216 (got 0)"},
        {{{"spec.training.model", GPT}, {"spec.training.model.dropout", "1"}},
         "spec.training.model.dropout: must be >= 0 and < 1"},
        {{{"spec.training.model.layers", "4"}},
         "spec.training.model.layers: is only used with spec.training.model.type: gpt (type is mlp)"},
        {{{"spec.training.model.init", "{\"uri\": \"\"}"}},
         "spec.training.model.init.uri: must be 1 to 1023 characters"},
        {{{"spec.training.model.init", "{\"path\": \"/m\"}"}},
         "spec.training.model.init.path: unknown field"},
        {{{"spec.training.data.uri", "\"ftp://h/x\""}},
         "spec.training.data.uri: must be builtin:<name>, /path, file:///path, http(s)://... or "
         "s3://bucket/key "
         "(got \"ftp://h/x\")"},
        {{{"spec.training.data.uri", "\"/other\""}, {"spec.training.dataDir", "\"/data\""}},
         "spec.training.data.uri: \"/other\" differs from spec.training.dataDir \"/data\" (dataDir is its "
         "deprecated spelling: set only data.uri)"},
        {{{"spec.training.data.format", "\"csv\""}},
         "spec.training.data.format: must be one of idx, tokens, text (got \"csv\")"},
        {{{"spec.training.data.sha256", "\"86c4e6aa\""}},
         "spec.training.data.sha256: must be 64 lowercase hex digits"},
        {{{"spec.training.data.secretRef", "{}"}}, "spec.training.data.secretRef.name: required"},
        {{{"spec.training.data.uri", "\"https://h/x.bin\""}, {"spec.training.data.caBundle", "\"ca.pem\""}},
         "spec.training.data.caBundle: must be an absolute path of at most 4095 bytes to a PEM file (on "
         "Kubernetes a file the pod template mounts, e.g. from a ConfigMap; got \"ca.pem\")"},
        {{{"spec.training.data.caBundle", "\"/etc/ca.pem\""}},
         "spec.training.data.caBundle: only applies to https:// and s3:// data (spec.training.data.uri is "
         "\"builtin:fashion-mnist\")"},
        {{{"spec.training.data.secretRef", "{\"name\": \"S3_creds\"}"}},
         "spec.training.data.secretRef.name: must be a Secret name (a DNS-1123 subdomain; got \"S3_creds\")"},
        {{{"spec.training.data.validation", "{\"fraction\": 1}"}},
         "spec.training.data.validation.fraction: must be > 0 and < 1"},
        {{{"spec.training.data.validation", "{\"fraction\": 0.1, \"uri\": \"/v\"}"}},
         "spec.training.data.validation.uri: set only one of spec.training.data.validation.fraction and "
         "spec.training.data.validation.uri"},
        {{{"spec.training.data.foo", "1"}}, "spec.training.data.foo: unknown field"},
        {{{"spec.training.gradClip", "0"}}, "spec.training.gradClip: must be > 0"},
        {{{"spec.training.gradientAccumulationSteps", "0"}},
         "spec.training.gradientAccumulationSteps: must be between 1 and 65536 (got 0)"},
        {{{"spec.training.warmupSteps", "-1"}},
         "spec.training.warmupSteps: must be between 0 and 2147483647 (got -1)"},
        {{{"spec.training.evalEverySteps", "-5"}},
         "spec.training.evalEverySteps: must be between 0 and 2147483647 (got -5)"},
        {{{"spec.training.optimizer.type", "\"lion\""}},
         "spec.training.optimizer.type: must be one of sgd, adam, adagrad, lbfgs, lamb, lars, adamw (got "
         "\"lion\")"},
        {{{"spec.parallelism.tensorParallel", "0"}},
         "spec.parallelism.tensorParallel: must be between 1 and 16384 (got 0)"},
        {{{"spec.output", "{\"dtype\": \"fp16\"}"}},
         "spec.output.dtype: must be one of float32, bfloat16 (got \"fp16\")"},
        {{{"spec.output", "{\"format\": \"onnx\"}"}},
         "spec.output.format: must be one of safetensors (got \"onnx\")"},
        {{{"spec.output", "{\"uri\": \"builtin:x\"}"}},
         "spec.output.uri: must be a folder, file:///path or s3://bucket/prefix (got \"builtin:x\")"},
        /* valid, but the feature is still to land */
        {{{"spec.training.model", GPT}}, /* on the default (IDX) data */
         "spec.training.model.type: gpt trains on text or token shards, and spec.training.data.uri is IDX "
         "images (set spec.training.data.uri, e.g. builtin:tinyshakespeare, or spec.training.data.format)"},
        {{{"spec.training.model", GPT}, {"spec.training.data.uri", "\"builtin:tinyshakespeare\""}}, NULL},
        {{{"spec.training.model", GPT},
          {"spec.training.data",
           "{\"uri\": \"/corpus\", \"format\": \"tokens\", \"validation\": {\"fraction\": 0.05}}"},
          {"spec.training.evalEverySteps", "250"}},
         NULL},
        {{{"spec.training.model", GPT},
          {"spec.training.data.uri", "\"builtin:tinyshakespeare\""},
          {"spec.training.model.dropout", "0.2"}},
         "spec.training.model.dropout: dropout > 0" NS},
        {{{"spec.training.data.uri", "\"builtin:nope\""}},
         "spec.training.data.uri: unknown built-in data set \"builtin:nope\" (builtin:fashion-mnist, "
         "builtin:tinyshakespeare)"},
        /* remote weights are fetched first (worker/model/export.h) */
        {{{"spec.training.model.init", "{\"uri\": \"s3://models/gpt-small/model.safetensors\"}"}}, NULL},
        {{{"spec.training.model.init", "{\"uri\": \"https://example.org/run-1/\"}"}}, NULL},
        {{{"spec.training.data.uri", "\"s3://bucket/fmnist/\""}}, NULL},
        /* fetched over HTTP (common/fetch.h), checked by sha256 */
        {{{"spec.training.data.uri", "\"https://example.org/fmnist/\""}}, NULL},
        {{{"spec.training.data.uri", "\"http://example.org/fmnist/\""},
          {"spec.training.data.sha256",
           "\"86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa\""}},
         NULL},
        {{{"spec.training.data.uri", "\"builtin:tinyshakespeare\""}},
         "spec.training.model.type: mlp reads IDX images; text data needs type gpt"},
        {{{"spec.training.data.format", "\"tokens\""}},
         "spec.training.model.type: mlp reads IDX images; tokens data needs type gpt"},
        {{{"spec.training.data.format", "\"text\""}},
         "spec.training.model.type: mlp reads IDX images; text data needs type gpt"},
        {{{"spec.training.data.sha256",
           "\"86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa\""}},
         "spec.training.data.sha256: checking the checksum of data that is not fetched" NS},
        {{{"spec.training.data.validation", "{\"fraction\": 0.1}"}},
         "spec.training.data.validation.fraction: splits text or token data; IDX sets have their own t10k "
         "test files"},
        {{{"spec.training.data.validation", "{\"uri\": \"/val\"}"}},
         "spec.training.data.validation.uri: a validation split" NS},
        /* implemented (docs/strategies.md, "Optimizers for transformers"), and what they refuse */
        {{{"spec.training.optimizer", "{\"type\": \"lamb\"}"}}, NULL},
        {{{"spec.training.optimizer", "{\"type\": \"lars\"}"}}, NULL},
        {{{"spec.training.optimizer", "{\"type\": \"adamw\", \"weightDecay\": 0.1}"}}, NULL},
        {{{"spec.training.gradClip", "1.0"}}, NULL},
        {{{"spec.training.gradientAccumulationSteps", "4"}}, NULL},
        {{{"spec.training.gradientAccumulationSteps", "4"}, {"spec.training.sharding", "\"optimizer\""}},
         NULL},
        {{{"spec.training.warmupSteps", "100"}}, NULL},
        {{{"spec.training.gradientAccumulationSteps", "4"}, {"spec.training.sharding", "\"gradients\""}},
         "spec.training.gradientAccumulationSteps: gradientAccumulationSteps with strategy allreduce and "
         "sharding gradients is not supported (use sharding none or optimizer)"},
        {{{"spec.training.gradientAccumulationSteps", "2"}, {"spec.parallelism", "{\"pipelineStages\": 2}"}},
         "spec.training.gradientAccumulationSteps: gradientAccumulationSteps with strategy pipeline is not "
         "supported (raise spec.parallelism.microBatches instead: micro-batches already accumulate)"},
        {{{"spec.training.optimizer", "{\"type\": \"lars\"}"}, {"spec.strategy", "\"parameterServer\""}},
         "spec.training.optimizer.type: lars with spec.strategy parameterServer is not supported (the trust "
         "ratio needs each tensor's whole norm, and a server shard may hold part of a tensor; use "
         "spec.strategy allreduce)"},
        {{{"spec.training.gradientAccumulationSteps", "2"}, {"spec.strategy", "\"parameterServer\""}},
         "spec.training.gradientAccumulationSteps: gradientAccumulationSteps with strategy parameterServer "
         "is not supported (use pushEverySteps)"},
        {{{"spec.training.evalEverySteps", "250"}}, NULL},
        {{{"spec.parallelism.tensorParallel", "2"},
          {"spec.training.model", GPT},
          {"spec.training.data.uri", "\"builtin:tinyshakespeare\""}},
         NULL}, /* the transformer's split (worker/tensor/tp_gpt.h) */
        /* spec.output: a folder, file:// or s3:// (worker/train_state.c, rm_tr_export) */
        {{{"spec.output",
           "{\"uri\": \"s3://models/run-1/\", \"format\": \"safetensors\", \"dtype\": \"bfloat16\"}"}},
         NULL},
        {{{"spec.output", "{\"uri\": \"/models/run-1\"}"}}, NULL},
        {{{"spec.output", "{\"uri\": \"file:///models/run-1/\", \"dtype\": \"float32\"}"}}, NULL},
        {{{"spec.output", "{\"dtype\": \"bfloat16\"}"}}, NULL},
        {{{"spec.output", "{\"uri\": \"https://example.org/models/\"}"}},
         "spec.output.uri: must be a folder, file:///path or s3://bucket/prefix (got "
         "\"https://example.org/models/\")"},
        {{{"spec.output", "{\"uri\": \"s3:///run-1/\"}"}},
         "spec.output.uri: must name a bucket: s3://bucket/prefix (got \"s3:///run-1/\")"},
        {{{"spec.output", "{\"uri\": \"ftp://h/x\"}"}},
         "spec.output.uri: must be a folder, file:///path or s3://bucket/prefix (got \"ftp://h/x\")"},
        {{{"spec.output", "{\"dtype\": \"float16\"}"}},
         "spec.output.dtype: must be one of float32, bfloat16 (got \"float16\")"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        cJSON *d = base_doc();
        set_path(d, "spec.training.dataDir", NULL);
        for (int k = 0; k < 4 && cases[i].set[k][0]; k++)
            set_path(d, cases[i].set[k][0], cases[i].set[k][1]);
        rm_err e;
        int rc = check(d, &e);
        const char *want = cases[i].msg;
        CU_ASSERT_EQUAL(rc, want ? RM_EINVAL : RM_OK);
        if (want) {
            CU_ASSERT_STRING_EQUAL(e.msg, want);
            size_t fl = strlen(e.field);
            CU_ASSERT(fl > 0 && strncmp(e.msg, e.field, fl) == 0 && strncmp(e.msg + fl, ": ", 2) == 0);
        }
        if ((rc != RM_OK) != (want != NULL) || (want && strcmp(e.msg, want) != 0))
            fprintf(stderr, "\n  case %zu (%s): got rc=%d \"%s\", want \"%s\"\n", i, cases[i].set[0][0], rc,
                    rc ? e.msg : "", want ? want : "valid");
        cJSON_Delete(d);
    }

    /* every field lands in the struct, and the whole manifest round-trips (spec and worker JSON) */
    cJSON *d = base_doc();
    set_path(d, "spec.training.dataDir", NULL);
    static const char *const manifest[][2] = {
        {"spec.training.model",
         "{\"type\": \"gpt\", \"layers\": 4, \"heads\": 4, \"embed\": 128, "
         "\"context\": 64, \"vocab\": 256, \"dropout\": 0.2, \"init\": {\"uri\": \"s3://m/x.safetensors\"}}"},
        {"spec.training.data",
         "{\"uri\": \"https://example.org/corpus.txt\", \"format\": \"text\", "
         "\"sha256\": \"86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa86c4e6aa\", "
         "\"secretRef\": {\"name\": \"s3-creds\"}, \"validation\": {\"fraction\": 0.1}}"},
        {"spec.training.optimizer", "{\"type\": \"lamb\", \"lr\": 0.001, \"beta1\": 0.9, \"beta2\": 0.99, "
                                    "\"weightDecay\": 0.1}"},
        {"spec.training.gradClip", "1.0"},
        {"spec.training.gradientAccumulationSteps", "2"},
        {"spec.training.warmupSteps", "100"},
        {"spec.training.evalEverySteps", "250"},
        {"spec.training.maxSteps", "2000"},
        {"spec.parallelism", "{\"tensorParallel\": 2, \"pipelineStages\": 1, \"microBatches\": 1}"},
        {"spec.output",
         "{\"uri\": \"s3://models/run-1/\", \"format\": \"safetensors\", \"dtype\": \"bfloat16\"}"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(manifest); i++)
        set_path(d, manifest[i][0], manifest[i][1]);
    rm_err e = {0};
    rm_tj a, b;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    const rm_training_spec *t = &a.spec.training;
    CU_ASSERT_STRING_EQUAL(t->model_type, "gpt");
    CU_ASSERT(t->layers == 4 && t->heads == 4 && t->embed == 128 && t->context == 64 && t->vocab == 256);
    CU_ASSERT_DOUBLE_EQUAL(t->dropout, 0.2, 0);
    CU_ASSERT_STRING_EQUAL(t->init_uri, "s3://m/x.safetensors");
    CU_ASSERT_STRING_EQUAL(t->data.uri, "https://example.org/corpus.txt");
    CU_ASSERT_EQUAL(t->data.format, RM_DATA_TEXT);
    CU_ASSERT_STRING_EQUAL(t->data.secret, "s3-creds");
    CU_ASSERT_DOUBLE_EQUAL(t->data.val_fraction, 0.1, 0);
    CU_ASSERT_EQUAL(t->optimizer.type, RM_OPT_LAMB);
    CU_ASSERT_DOUBLE_EQUAL(t->grad_clip, 1.0, 0);
    CU_ASSERT(t->grad_accum == 2 && t->warmup_steps == 100 && t->eval_every_steps == 250 &&
              t->max_steps == 2000);
    CU_ASSERT_EQUAL(a.spec.par.tensor_parallel, 2);
    CU_ASSERT(a.spec.output.present && a.spec.output.dtype == RM_DTYPE_BFLOAT16);
    CU_ASSERT_STRING_EQUAL(a.spec.output.uri, "s3://models/run-1/");
    rm_tj_defaults(&a);
    cJSON *j1 = rm_tj_to_json(&a);
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(j1, &b, &e), RM_OK);
    cJSON *j2 = rm_tj_to_json(&b);
    CU_ASSERT_TRUE(cJSON_Compare(j1, j2, 1));
    CU_ASSERT_STRING_EQUAL(rm_json_path(j1, "spec.training.data.secretRef.name")->valuestring, "s3-creds");
    CU_ASSERT_EQUAL(rm_json_path(j1, "spec.parallelism.tensorParallel")->valuedouble, 2);
    rm_tj c;
    CU_ASSERT_EQUAL(rm_tj_copy(&c, &b), RM_OK);
    cJSON *j3 = rm_tj_to_json(&c);
    CU_ASSERT_TRUE(cJSON_Compare(j1, j3, 1));
    cJSON *w1 = rm_training_to_json(&a.spec.training);
    rm_training_spec wt;
    CU_ASSERT_EQUAL(rm_training_from_json(w1, "spec.training", &wt, &e), RM_OK);
    cJSON *w2 = rm_training_to_json(&wt);
    CU_ASSERT_TRUE(cJSON_Compare(w1, w2, 1));
    rm_training_free(&wt);
    cJSON_Delete(w1);
    cJSON_Delete(w2);
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    cJSON_Delete(j3);
    rm_tj_free(&a);
    rm_tj_free(&b);
    rm_tj_free(&c);
    cJSON_Delete(d);

    /* data.uri as a folder is the deprecated dataDir: the worker reads it there */
    d = base_doc();
    set_path(d, "spec.training.dataDir", NULL);
    set_path(d, "spec.training.data.uri", "\"file:///srv/fmnist\"");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_STRING_EQUAL(a.spec.training.data_dir, "/srv/fmnist");
    CU_ASSERT_EQUAL(rm_training_samples(&a.spec.training), 0); /* not the built-in folder: unknown */
    rm_tj_free(&a);
    set_path(d, "spec.training.data.uri", "\"builtin:fashion-mnist\"");
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(d, &a, &e), RM_OK);
    rm_tj_defaults(&a);
    CU_ASSERT_STRING_EQUAL(a.spec.training.data_dir, RM_TJ_FASHION_MNIST_DIR);
    CU_ASSERT_EQUAL(rm_training_samples(&a.spec.training), RM_TJ_FASHION_MNIST_TRAIN);
    rm_tj_free(&a);
    cJSON_Delete(d);

    /* the status fields round-trip, and are left out while unset */
    rm_tj_status st, back;
    memset(&st, 0, sizeof st);
    cJSON *sj = rm_tj_status_to_json(&st);
    CU_ASSERT_PTR_NULL(rm_json_path(sj, "data"));
    cJSON_Delete(sj);
    st.result.present = true;
    st.result.val_loss = 1.47;
    st.result.tokens_per_second = 12345;
    st.result.mfu = 0.31;
    snprintf(st.result.model_uri, sizeof st.result.model_uri, "s3://models/run-1/model.safetensors");
    snprintf(st.result.model_sha256, sizeof st.result.model_sha256, "%064d", 7);
    st.result.model_bytes = 1 << 20;
    snprintf(st.data.uri, sizeof st.data.uri, "https://example.org/corpus.txt");
    st.data.bytes = 512;
    st.data.total_bytes = 1024;
    rm_tj_progress_add_eval(&st.progress, 1, 250, 0.5, 2.0, 1.9);
    sj = rm_tj_status_to_json(&st);
    CU_ASSERT_EQUAL(rm_json_path(sj, "result.model.bytes")->valuedouble, 1 << 20);
    CU_ASSERT_EQUAL(rm_json_path(sj, "data.totalBytes")->valuedouble, 1024);
    CU_ASSERT_EQUAL(rm_json_path(sj, "progress.evaluations[0].step")->valuedouble, 250);
    CU_ASSERT_EQUAL(rm_tj_status_from_json(sj, &back, &e), RM_OK);
    CU_ASSERT_EQUAL(memcmp(&st, &back, sizeof st), 0);
    cJSON_Delete(sj);
}

/* spec.parallelism.tensorParallel T > 1 (docs/models-and-data.md, "Tensor parallelism"): accepted
 * for the MLP when T divides the split widths (hidden[0], [2], ...) and for the transformer when T
 * divides its heads (pipeline stages with T > 1 still refused), T x P divides every replica
 * count and a node holds whole tensor groups; each refusal names its field. Cases start from the
 * base job (replicas 4, min 2, max 8, hidden [512, 256]). */
static void test_tensor_parallel(void)
{
    static const md_case cases[] = {
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"}}, NULL},
        {{{"spec.parallelism", "{\"tensorParallel\": 4}"}, {"spec.minReplicas", "4"}}, NULL},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"},
          {"spec.training.model", "{\"hidden\": [64, 30, 8]}"}},
         NULL}, /* hidden[1] is a row-parallel output: whole on every rank */
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"}, {"spec.training.model", "{\"hidden\": [33]}"}},
         "spec.training.model.hidden[0]: must be a multiple of spec.parallelism.tensorParallel (2): its "
         "neurons are split across the tensor ranks (got 33)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"},
          {"spec.training.model", "{\"hidden\": [64, 30, 9]}"}},
         "spec.training.model.hidden[2]: must be a multiple of spec.parallelism.tensorParallel (2): its "
         "neurons are split across the tensor ranks (got 9)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"}, {"spec.training.model", "{\"hidden\": []}"}},
         "spec.training.model.hidden: needs at least one width with spec.parallelism.tensorParallel 2: the "
         "hidden neurons are what the tensor ranks split"},
        {{{"spec.parallelism", "{\"tensorParallel\": 4}"}},
         "spec.minReplicas: must be a multiple of spec.parallelism.tensorParallel x pipelineStages (4 x 1 = "
         "4): the workers form a grid of tensor x pipeline x data-parallel ranks (got 2)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 3}"}, {"spec.training.model", "{\"hidden\": [48]}"}},
         "spec.replicas: must be a multiple of spec.parallelism.tensorParallel x pipelineStages (3 x 1 = 3): "
         "the workers form a grid of tensor x pipeline x data-parallel ranks (got 4)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2, \"pipelineStages\": 2}"}},
         "spec.minReplicas: must be a multiple of spec.parallelism.tensorParallel x pipelineStages (2 x 2 = "
         "4): the workers form a grid of tensor x pipeline x data-parallel ranks (got 2)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"},
          {"spec.maxReplicas", "6"},
          {"spec.replicas", "6"},
          {"spec.minReplicas", "3"}},
         "spec.minReplicas: must be a multiple of spec.parallelism.tensorParallel x pipelineStages (2 x 1 = "
         "2): the workers form a grid of tensor x pipeline x data-parallel ranks (got 3)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"}, {"spec.placement", "{\"workersPerNode\": 3}"}},
         "spec.placement.workersPerNode: must be a multiple of spec.parallelism.tensorParallel (2): a tensor "
         "group's ranks share a node (got 3)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"}, {"spec.placement", "{\"workersPerNode\": 4}"}},
         NULL},
        {{{"spec.parallelism", "{\"tensorParallel\": 4}"},
          {"spec.minReplicas", "4"},
          {"spec.training.model", GPT},
          {"spec.training.data", "{\"uri\": \"builtin:tinyshakespeare\"}"}},
         NULL},
        /* T x P for the transformer (one micro-batch a step); what its split does not run yet is
         * refused as the MLP's is, naming the field */
        {{{"spec.parallelism", "{\"tensorParallel\": 2, \"pipelineStages\": 2}"},
          {"spec.minReplicas", "4"},
          {"spec.training.model", GPT},
          {"spec.training.data", "{\"uri\": \"builtin:tinyshakespeare\"}"}},
         NULL},
        {{{"spec.parallelism", "{\"tensorParallel\": 2, \"pipelineStages\": 2, \"microBatches\": 2}"},
          {"spec.minReplicas", "4"},
          {"spec.training.model", GPT},
          {"spec.training.data", "{\"uri\": \"builtin:tinyshakespeare\"}"}},
         "spec.parallelism.microBatches: 2 with tensorParallel and pipelineStages > 1 for the transformer "
         "(one "
         "micro-batch a step in this version)" NS},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"},
          {"spec.training.model", GPT},
          {"spec.training.data", "{\"uri\": \"builtin:tinyshakespeare\"}"},
          {"spec.training.optimizer", "{\"type\": \"lamb\"}"}},
         NULL},
        {{{"spec.parallelism", "{\"tensorParallel\": 4}"},
          {"spec.minReplicas", "4"},
          {"spec.training.model", "{\"type\": \"gpt\", \"layers\": 2, \"heads\": 2, \"embed\": 128, "
                                  "\"context\": 64}"},
          {"spec.training.data", "{\"uri\": \"builtin:tinyshakespeare\"}"}},
         "spec.training.model.heads: must be a multiple of spec.parallelism.tensorParallel (4): each tensor "
         "rank holds heads/4 whole heads (got 2)"},
        /* T x P on the MLP: a stage holds whole pairs of layers */
        {{{"spec.parallelism", "{\"tensorParallel\": 2, \"pipelineStages\": 2}"},
          {"spec.minReplicas", "4"},
          {"spec.training.model", "{\"hidden\": [64]}"}},
         "spec.parallelism.pipelineStages: must be <= the model's 1 layer pairs with "
         "spec.parallelism.tensorParallel 2: a stage holds whole pairs, column- then row-parallel (got 2)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2, \"pipelineStages\": 2}"},
          {"spec.minReplicas", "4"},
          {"spec.training.model", "{\"hidden\": [128, 64, 32]}"}},
         NULL},
        {{{"spec.parallelism", "{\"tensorParallel\": 2, \"pipelineStages\": 4}"},
          {"spec.minReplicas", "8"},
          {"spec.replicas", "8"},
          {"spec.training.model", "{\"hidden\": [128, 64, 32]}"}},
         "spec.parallelism.pipelineStages: must be <= the model's 2 layer pairs with "
         "spec.parallelism.tensorParallel 2: a stage holds whole pairs, column- then row-parallel (got 4)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"}, {"spec.training.sharding", "\"optimizer\""}},
         NULL},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"}, {"spec.training.sharding", "\"gradients\""}},
         "spec.training.sharding: must be none or optimizer with spec.parallelism.tensorParallel > 1: the "
         "split's backward writes the pieces' whole gradient (got gradients)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2, \"pipelineStages\": 2}"},
          {"spec.minReplicas", "4"},
          {"spec.training.model", "{\"hidden\": [128, 64, 32]}"},
          {"spec.training.sharding", "\"full\""}},
         "spec.training.sharding: must be none or optimizer with spec.parallelism.tensorParallel > 1: the "
         "split's backward writes the pieces' whole gradient (got full)"},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"},
          {"spec.training.optimizer", "{\"type\": \"lars\"}"}},
         NULL},
        {{{"spec.parallelism", "{\"tensorParallel\": 2}"}, {"spec.backend", "\"nccl\""}},
         "spec.backend: nccl with spec.parallelism.tensorParallel > 1 (use auto or ring)" NS},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        cJSON *d = base_doc();
        set_path(d, "spec.training.dataDir", NULL);
        for (int k = 0; k < 4 && cases[i].set[k][0]; k++)
            set_path(d, cases[i].set[k][0], cases[i].set[k][1]);
        rm_err e = {0};
        int rc = check(d, &e);
        const char *want = cases[i].msg;
        CU_ASSERT_EQUAL(rc, want ? RM_EINVAL : RM_OK);
        if (want) {
            CU_ASSERT_STRING_EQUAL(e.msg, want);
            size_t fl = strlen(e.field);
            CU_ASSERT(fl > 0 && strncmp(e.msg, e.field, fl) == 0 && strncmp(e.msg + fl, ": ", 2) == 0);
        }
        if ((rc != RM_OK) != (want != NULL) || (want && strcmp(e.msg, want) != 0))
            fprintf(stderr, "\n  case %zu: got rc=%d \"%s\", want \"%s\"\n", i, rc, rc ? e.msg : "",
                    want ? want : "valid");
        cJSON_Delete(d);
    }
    /* the global batch (steps, memory) spans the data-parallel replicas: world / (T x P) */
    rm_tj_spec s;
    memset(&s, 0, sizeof s);
    s.replicas = 4;
    s.training.batch_size_per_worker = 32;
    s.training.epochs = 1;
    s.training.grad_accum = 1;
    s.par.pipeline_stages = 1;
    s.par.tensor_parallel = 2;
    CU_ASSERT_DOUBLE_EQUAL(rm_tj_steps_total(&s), 60000 / 64, 1e-9);
}

#undef GPT
#undef NS

void rm_suite_trainingjob(void)
{
    static const rm_test_case cases[] = {
        {"base_is_valid", test_base_is_valid},
        {"parse_rules", test_parse_rules},
        {"validation_rules", test_validation_rules},
        {"name_fits_max_replicas", test_name_fits_max_replicas},
        {"crd_bounds_match", test_crd_bounds_match},
        {"global_batch_fits_dataset", test_global_batch_fits_dataset},
        {"memory_budget", test_memory_budget},
        {"non_finite_numbers", test_non_finite_numbers},
        {"defaults", test_defaults},
        {"round_trip", test_round_trip},
        {"sharding", test_sharding},
        {"parallelism", test_parallelism},
        {"parallelism_gpt", test_parallelism_gpt},
        {"lbfgs", test_lbfgs},
        {"allreduce_algo", test_allreduce_algo},
        {"status_and_conditions", test_status_and_conditions},
        {"names", test_names},
        {"yaml_error_points_at_line", test_yaml_error_points_at_line},
        {"models_and_data", test_models_and_data},
        {"tensor_parallel", test_tensor_parallel},
        {"validation_logs_nothing", test_validation_logs_nothing},
        {"steps_total", test_steps_total},
    };
    RM_ADD_SUITE("trainingjob", NULL, NULL, cases);
}
