/* test_tj_runtime.c — training runtimes (common/tj_runtime.h; docs/trainingjob-api.md#runtimes):
 * the merge rule as a table (runtime, job, want), the spec.runtimeRef checks, a runtime's checks
 * naming its own fields, the defaults applied after the merge (a runtime's value is not hidden by
 * a default), and `ringmaster run --runtimes` resolving from a file and a folder. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/json.h"
#include "common/tj_runtime.h"
#include "common/trainingjob.h"
#include "tests/unit/testutil.h"

static cJSON *js(const char *s)
{
    if (!s)
        return NULL;
    cJSON *j = cJSON_Parse(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    return j;
}

/* The merge rule, one row per clause of the documented table. */
static void test_merge_table(void)
{
    static const struct {
        const char *what, *runtime, *job, *want; /* want NULL: absent */
    } rows[] = {
        {"job absent: the runtime's value", "{\"a\":1}", NULL, "{\"a\":1}"},
        {"runtime absent: the job's value", NULL, "{\"a\":1}", "{\"a\":1}"},
        {"scalar: the job wins", "{\"replicas\":4}", "{\"replicas\":2}", "{\"replicas\":2}"},
        {"keys only in one side are kept", "{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"b\":2}"},
        {"objects merge key by key, recursively",
         "{\"training\":{\"epochs\":3,\"optimizer\":{\"type\":\"adam\",\"lr\":0.001}}}",
         "{\"training\":{\"optimizer\":{\"lr\":0.01}}}",
         "{\"training\":{\"epochs\":3,\"optimizer\":{\"type\":\"adam\",\"lr\":0.01}}}"},
        {"a job's null removes the runtime's key", "{\"a\":1,\"b\":2}", "{\"a\":null}", "{\"b\":2}"},
        {"a null the runtime lacks is not added", "{\"b\":2}", "{\"a\":null}", "{\"b\":2}"},
        {"a top-level null: absent", "{\"a\":1}", "null", NULL},
        {"plain lists replace whole", "{\"hidden\":[512,256]}", "{\"hidden\":[64]}", "{\"hidden\":[64]}"},
        {"an empty list replaces (clears)", "{\"env\":[{\"name\":\"A\",\"value\":\"1\"}]}", "{\"env\":[]}",
         "{\"env\":[]}"},
        {"named lists merge by name; the job's new items go last",
         "{\"env\":[{\"name\":\"A\",\"value\":\"1\"},{\"name\":\"B\",\"value\":\"2\"}]}",
         "{\"env\":[{\"name\":\"C\",\"value\":\"3\"},{\"name\":\"A\",\"value\":\"9\"}]}",
         "{\"env\":[{\"name\":\"A\",\"value\":\"9\"},{\"name\":\"B\",\"value\":\"2\"},{\"name\":\"C\","
         "\"value\":\"3\"}]}"},
        {"a named item merges recursively (containers)",
         "{\"containers\":[{\"name\":\"worker\",\"image\":\"w:cpu\",\"resources\":{\"limits\":{\"cpu\":\"2\","
         "\"memory\":\"1Gi\"}}}]}",
         "{\"containers\":[{\"name\":\"worker\",\"resources\":{\"limits\":{\"memory\":\"2Gi\"}}}]}",
         "{\"containers\":[{\"name\":\"worker\",\"image\":\"w:cpu\",\"resources\":{\"limits\":{\"cpu\":\"2\","
         "\"memory\":\"2Gi\"}}}]}"},
        {"a list with an unnamed item replaces whole", "{\"t\":[{\"name\":\"a\"}]}",
         "{\"t\":[{\"key\":\"x\"}]}", "{\"t\":[{\"key\":\"x\"}]}"},
        {"a change of type: the job's value", "{\"a\":{\"b\":1}}", "{\"a\":5}", "{\"a\":5}"},
        {"object over scalar: the job's object", "{\"a\":5}", "{\"a\":{\"b\":1}}", "{\"a\":{\"b\":1}}"},
        {"false and 0 are values, not unset", "{\"suspend\":true,\"n\":3}", "{\"suspend\":false,\"n\":0}",
         "{\"suspend\":false,\"n\":0}"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cJSON *r = js(rows[i].runtime), *j = js(rows[i].job), *w = js(rows[i].want);
        bool oom = true;
        cJSON *got = rm_runtime_merge(r, j, &oom);
        CU_ASSERT_FALSE(oom);
        bool same = (!got && !w) || (got && w && cJSON_Compare(got, w, 1));
        if (!same) {
            char *g = got ? cJSON_PrintUnformatted(got) : NULL;
            fprintf(stderr, "\nmerge row \"%s\": got %s\n", rows[i].what, g ? g : "(absent)");
            free(g);
        }
        CU_ASSERT(same);
        /* key order: the runtime's first, then the job's new ones (what kubectl shows) */
        if (same && got && cJSON_IsObject(got)) {
            char *a = cJSON_PrintUnformatted(got), *b = cJSON_PrintUnformatted(w);
            CU_ASSERT_STRING_EQUAL(a, b);
            free(a);
            free(b);
        }
        /* the inputs are untouched */
        cJSON *r2 = js(rows[i].runtime), *j2 = js(rows[i].job);
        CU_ASSERT((!r && !r2) || cJSON_Compare(r, r2, 1));
        CU_ASSERT((!j && !j2) || cJSON_Compare(j, j2, 1));
        cJSON_Delete(r2);
        cJSON_Delete(j2);
        cJSON_Delete(got);
        cJSON_Delete(r);
        cJSON_Delete(j);
        cJSON_Delete(w);
    }
}

/* Beyond RM_RUNTIME_MERGE_DEPTH levels the job's value replaces (bounded recursion). */
static void test_merge_depth(void)
{
    char a[4096] = "", b[4096] = "";
    for (int i = 0; i < 40; i++) {
        strcat(a, "{\"k\":");
        strcat(b, "{\"k\":");
    }
    strcat(a, "{\"x\":1}");
    strcat(b, "{\"y\":2}");
    for (int i = 0; i < 40; i++) {
        strcat(a, "}");
        strcat(b, "}");
    }
    cJSON *r = js(a), *j = js(b);
    bool oom;
    cJSON *got = rm_runtime_merge(r, j, &oom);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    const cJSON *n = got;
    for (int i = 0; i < 40 && n; i++)
        n = cJSON_GetObjectItemCaseSensitive(n, "k");
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItemCaseSensitive(n, "y"));
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItemCaseSensitive(n, "x"));
    cJSON_Delete(got);
    cJSON_Delete(r);
    cJSON_Delete(j);
}

static void test_ref(void)
{
    static const struct {
        const char *ref;
        int ok;
        bool cluster;
        const char *msg; /* substring of the error */
    } rows[] = {
        {"{\"name\":\"cpu\"}", 1, true, NULL},
        {"{\"kind\":\"ClusterTrainingRuntime\",\"name\":\"cpu.small\"}", 1, true, NULL},
        {"{\"kind\":\"TrainingRuntime\",\"name\":\"cpu\",\"apiGroup\":\"ringmaster.dev\"}", 1, false, NULL},
        {"{\"kind\":\"Runtime\",\"name\":\"cpu\"}", 0, true, "spec.runtimeRef.kind: must be one of"},
        {"{\"kind\":\"TrainingRuntime\"}", 0, false, "spec.runtimeRef.name: required"},
        {"{\"name\":\"CPU\"}", 0, true, "spec.runtimeRef.name: must be a DNS-1123 subdomain"},
        {"{\"name\":\"cpu\",\"version\":2}", 0, true, "spec.runtimeRef.version: unknown field"},
        {"{\"name\":\"cpu\",\"apiGroup\":\"kubeflow.org\"}", 0, true, "spec.runtimeRef.apiGroup: must be"},
        {"\"cpu\"", 0, true, "spec.runtimeRef: must be an object"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cJSON *r = js(rows[i].ref);
        rm_runtime_ref ref;
        rm_err e = {0};
        int rc = rm_runtime_ref_from_json(r, "spec.runtimeRef", &ref, &e);
        CU_ASSERT_EQUAL(rc == RM_OK, rows[i].ok);
        if (rows[i].ok) {
            CU_ASSERT(ref.present);
            CU_ASSERT_EQUAL(ref.cluster, rows[i].cluster);
        } else if (!strstr(e.msg, rows[i].msg)) {
            fprintf(stderr, "\nref row %zu: %s\n", i, e.msg);
            CU_FAIL("message");
        }
        cJSON_Delete(r);
    }
    rm_runtime_ref ref = {.present = true, .cluster = true};
    snprintf(ref.name, sizeof ref.name, "x");
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_runtime_ref_error(&ref, "not found", &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.runtimeRef.name: ClusterTrainingRuntime \"x\" not found");
    CU_ASSERT_STRING_EQUAL(e.field, "spec.runtimeRef.name");
}

#define RT_HEAD "{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"ClusterTrainingRuntime\","
static void test_check(void)
{
    static const struct {
        const char *obj, *msg; /* msg NULL: valid */
    } rows[] = {
        {RT_HEAD "\"metadata\":{\"name\":\"cpu\"},\"spec\":{\"template\":{\"replicas\":2,\"training\":{"
                 "\"epochs\":1}}}}",
         NULL},
        {RT_HEAD "\"metadata\":{\"name\":\"cpu\"},\"spec\":{\"template\":{\"training\":{\"epochz\":1}}}}",
         "spec.template.training.epochz: unknown field"},
        {RT_HEAD "\"metadata\":{\"name\":\"cpu\"},\"spec\":{\"template\":{\"runtimeRef\":{\"name\":\"b\"}}}}",
         "spec.template.runtimeRef: a runtime cannot reference another runtime"},
        {RT_HEAD "\"metadata\":{\"name\":\"cpu\"},\"spec\":{}}", "spec.template: required"},
        {RT_HEAD "\"metadata\":{\"name\":\"cpu\"},\"spec\":{\"template\":{},\"extra\":1}}",
         "spec.extra: unknown field"},
        {RT_HEAD "\"spec\":{\"template\":{}}}", "metadata.name: required"},
        {"{\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"a\"},\"spec\":{\"template\":{}}}",
         "kind: must be"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cJSON *o = js(rows[i].obj);
        rm_err e = {0};
        int rc = rm_runtime_check(o, &e);
        if (!rows[i].msg) {
            CU_ASSERT_EQUAL(rc, RM_OK);
        } else if (rc == RM_OK || !strstr(e.msg, rows[i].msg)) {
            fprintf(stderr, "\ncheck row %zu: rc %d \"%s\"\n", i, rc, e.msg);
            CU_FAIL("message");
        }
        cJSON_Delete(o);
    }
}

/* Defaults after the merge: the runtime's values survive where the job is silent, a value the
 * job sets wins, and what neither sets gets the default (the CRD carries no default: of its own). */
static void test_defaults_after_merge(void)
{
    cJSON *job = js("{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{"
                    "\"name\":\"j\"},\"spec\":{\"runtimeRef\":{\"name\":\"cpu\"},\"training\":{\"epochs\":"
                    "2}}}");
    cJSON *tmpl = js("{\"replicas\":3,\"restartPolicy\":{\"maxRestarts\":9},\"training\":{\"epochs\":7,"
                     "\"batchSizePerWorker\":32}}");
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_runtime_apply(job, tmpl, &e), RM_OK);
    rm_tj tj;
    CU_ASSERT_EQUAL_FATAL(rm_tj_from_json(job, &tj, &e), RM_OK);
    rm_tj_defaults(&tj);
    CU_ASSERT_EQUAL(rm_tj_validate(&tj, &e), RM_OK);
    CU_ASSERT_EQUAL(tj.spec.replicas, 3);                                     /* runtime */
    CU_ASSERT_EQUAL(tj.spec.min_replicas, 3);                                 /* default, after the merge */
    CU_ASSERT_EQUAL(tj.spec.restart.max_restarts, 9);                         /* runtime */
    CU_ASSERT_EQUAL(tj.spec.training.epochs, 2);                              /* job */
    CU_ASSERT_EQUAL(tj.spec.training.batch_size_per_worker, 32);              /* runtime */
    CU_ASSERT_DOUBLE_EQUAL(tj.spec.restart.progress_deadline_seconds, 60, 0); /* default */
    CU_ASSERT_PTR_NOT_NULL(tj.spec.runtime_ref);
    /* the reference round-trips through the serializer */
    cJSON *out = rm_tj_spec_to_json(&tj.spec);
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItemCaseSensitive(out, "runtimeRef"));
    cJSON_Delete(out);
    rm_tj_free(&tj);
    cJSON_Delete(job);
    cJSON_Delete(tmpl);
}

static const char *RUNTIMES_YAML = "apiVersion: ringmaster.dev/v1alpha1\n"
                                   "kind: ClusterTrainingRuntime\n"
                                   "metadata: {name: cpu}\n"
                                   "spec:\n"
                                   "  template:\n"
                                   "    replicas: 2\n"
                                   "    training: {epochs: 5, model: {hidden: [32]}}\n"
                                   "---\n"
                                   "apiVersion: ringmaster.dev/v1alpha1\n"
                                   "kind: TrainingRuntime\n"
                                   "metadata: {name: cpu, namespace: team-a}\n"
                                   "spec:\n"
                                   "  template: {replicas: 4}\n"
                                   "---\n"
                                   "apiVersion: v1\n"
                                   "kind: ConfigMap\n"
                                   "metadata: {name: cpu}\n";

static int resolve(const char *ref_json, const char *ns, const char *path, cJSON **job_out, rm_err *e)
{
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":"
             "\"j\"%s%s%s},\"spec\":{\"runtimeRef\":%s,\"training\":{\"epochs\":1}}}",
             ns ? ",\"namespace\":\"" : "", ns ? ns : "", ns ? "\"" : "", ref_json);
    *job_out = js(buf);
    return rm_runtime_resolve_files(*job_out, path, e);
}

static void test_resolve_files(void)
{
    char *dir = rm_test_tmpdir("tjrt");
    char file[1024], sub[1024];
    snprintf(file, sizeof file, "%s/runtimes.yaml", dir);
    CU_ASSERT_EQUAL_FATAL(rm_test_write_file(file, RUNTIMES_YAML, strlen(RUNTIMES_YAML)), 0);
    snprintf(sub, sizeof sub, "%s/notes.txt", dir);
    CU_ASSERT_EQUAL_FATAL(rm_test_write_file(sub, "not yaml: [", 11), 0); /* not *.yaml: not read */
    cJSON *job = NULL;
    rm_err e = {0};
    /* a file and a folder; the cluster-wide one by default */
    const char *paths[] = {file, dir};
    for (int p = 0; p < 2; p++) {
        CU_ASSERT_EQUAL(resolve("{\"name\":\"cpu\"}", NULL, paths[p], &job, &e), RM_OK);
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(job, "spec");
        CU_ASSERT_EQUAL(cJSON_GetObjectItemCaseSensitive(sp, "replicas")->valueint, 2);
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(sp, "training");
        CU_ASSERT_EQUAL(cJSON_GetObjectItemCaseSensitive(tr, "epochs")->valueint, 1); /* the job's */
        CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItemCaseSensitive(tr, "model"));
        cJSON_Delete(job);
    }
    /* a namespaced one matches the job's namespace only */
    CU_ASSERT_EQUAL(resolve("{\"kind\":\"TrainingRuntime\",\"name\":\"cpu\"}", "team-a", dir, &job, &e),
                    RM_OK);
    CU_ASSERT_EQUAL(rm_json_path(job, "spec.replicas")->valueint, 4);
    cJSON_Delete(job);
    CU_ASSERT_EQUAL(resolve("{\"kind\":\"TrainingRuntime\",\"name\":\"cpu\"}", NULL, dir, &job, &e),
                    RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.runtimeRef.name: TrainingRuntime \"cpu\" not found in"));
    cJSON_Delete(job);
    CU_ASSERT_EQUAL(resolve("{\"name\":\"gpu\"}", NULL, dir, &job, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.runtimeRef.name: ClusterTrainingRuntime \"gpu\" not found"));
    cJSON_Delete(job);
    /* without --runtimes the message says what to give */
    CU_ASSERT_EQUAL(resolve("{\"name\":\"cpu\"}", NULL, NULL, &job, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "--runtimes"));
    cJSON_Delete(job);
    /* defined twice: named, never a silent pick */
    snprintf(sub, sizeof sub, "%s/again.yml", dir);
    CU_ASSERT_EQUAL_FATAL(rm_test_write_file(sub, RUNTIMES_YAML, strlen(RUNTIMES_YAML)), 0);
    CU_ASSERT_EQUAL(resolve("{\"name\":\"cpu\"}", NULL, dir, &job, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "is defined 2 times"));
    cJSON_Delete(job);
    /* an invalid runtime names its own field */
    const char *bad =
        "apiVersion: ringmaster.dev/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata: {name: bad}\n"
        "spec: {template: {training: {epochz: 1}}}\n";
    CU_ASSERT_EQUAL_FATAL(rm_test_write_file(sub, bad, strlen(bad)), 0);
    CU_ASSERT_EQUAL(resolve("{\"name\":\"bad\"}", NULL, dir, &job, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.runtimeRef.name: ClusterTrainingRuntime \"bad\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.template.training.epochz: unknown field"));
    cJSON_Delete(job);
    rm_test_tmpdir_free(&dir);
}

void rm_suite_tj_runtime(void)
{
    static const rm_test_case cases[] = {
        {"the merge rule, as a table", test_merge_table},
        {"the merge is bounded in depth", test_merge_depth},
        {"spec.runtimeRef is checked, naming the field", test_ref},
        {"a runtime's errors name its own fields", test_check},
        {"defaults come after the merge", test_defaults_after_merge},
        {"--runtimes: a file, a folder, namespaces, not found, twice, invalid", test_resolve_files},
    };
    RM_ADD_SUITE("tj_runtime", NULL, NULL, cases);
}
