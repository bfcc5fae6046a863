/* Tests for common/yaml: typed scalars, multi-document streams, positions, errors with
 * line:column, duplicate keys, anchors/merges and the alias-bomb cap. */
#include "common/json.h"
#include "common/yaml.h"
#include "tests/unit/testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static rm_yaml_docs *load(const char *text, rm_err *e)
{
    rm_yaml_docs *d = NULL;
    int rc = rm_yaml_load(text, strlen(text), "t.yaml", &d, e);
    if (rc)
        CU_ASSERT_PTR_NULL(d);
    return d;
}

static void test_scalars(void)
{
    rm_err e = {0};
    rm_yaml_docs *d = load("i: 42\nneg: -7\nhex: 0x1F\noct: 0o17\nf: 1.5\nexp: 1e3\ndot: .5\n"
                           "inf: .inf\nninf: -.Inf\nnan: .nan\nt: true\nT: True\nf2: FALSE\n"
                           "n1: null\nn2: ~\nn3:\nyes: yes\nq: \"42\"\nsq: 'true'\nver: 1.2.3\n"
                           "lit: |\n  a\n  b\ntagged: !!str 12\nlead0: 010\nplus: +3\n",
                           &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(rm_yaml_count(d), 1);
    cJSON *j = rm_yaml_doc(d, 0);
    CU_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(j, "i")) && cJSON_GetObjectItem(j, "i")->valuedouble == 42);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "neg")->valuedouble, -7);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "hex")->valuedouble, 31);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "oct")->valuedouble, 15);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "f")->valuedouble, 1.5);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "exp")->valuedouble, 1000);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "dot")->valuedouble, 0.5);
    CU_ASSERT(isinf(cJSON_GetObjectItem(j, "inf")->valuedouble) &&
              cJSON_GetObjectItem(j, "inf")->valuedouble > 0);
    CU_ASSERT(isinf(cJSON_GetObjectItem(j, "ninf")->valuedouble) &&
              cJSON_GetObjectItem(j, "ninf")->valuedouble < 0);
    CU_ASSERT(isnan(cJSON_GetObjectItem(j, "nan")->valuedouble));
    CU_ASSERT(cJSON_IsTrue(cJSON_GetObjectItem(j, "t")));
    CU_ASSERT(cJSON_IsTrue(cJSON_GetObjectItem(j, "T")));
    CU_ASSERT(cJSON_IsFalse(cJSON_GetObjectItem(j, "f2")));
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "n1")));
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "n2")));
    CU_ASSERT(cJSON_IsNull(cJSON_GetObjectItem(j, "n3")));
    CU_ASSERT(cJSON_IsString(cJSON_GetObjectItem(j, "yes"))); /* YAML 1.2: not a bool */
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "q")->valuestring, "42");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "sq")->valuestring, "true");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "ver")->valuestring, "1.2.3");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "lit")->valuestring, "a\nb\n");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "tagged")->valuestring, "12");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "lead0")->valuedouble, 10);
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "plus")->valuedouble, 3);
    rm_yaml_free(d);
}

static const char manifest[] = "# two documents and an empty one\n"
                               "apiVersion: ringmaster.dev/v1alpha1\n"
                               "kind: TrainingJob\n"
                               "metadata:\n"
                               "  name: fm\n"
                               "spec:\n"
                               "  replicas: 4\n"
                               "  minReplicas: 8\n"
                               "  template:\n"
                               "    spec:\n"
                               "      containers:\n"
                               "      - name: worker\n"
                               "        image: ringmaster/worker:latest\n"
                               "---\n"
                               "---\n"
                               "kind: ConfigMap\n"
                               "data: {a: \"1\", b: [x, y]}\n";

static void test_multi_doc_and_positions(void)
{
    rm_err e = {0};
    rm_yaml_docs *d = load(manifest, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(rm_yaml_count(d), 2); /* the empty one is skipped */
    cJSON *j0 = rm_yaml_doc(d, 0);
    CU_ASSERT_STRING_EQUAL(rm_json_path(j0, "spec.template.spec.containers[0].image")->valuestring,
                           "ringmaster/worker:latest");
    CU_ASSERT_STRING_EQUAL(rm_json_path(rm_yaml_doc(d, 1), "data.b[1]")->valuestring, "y");
    int line = 0, col = 0;
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 0, "spec.minReplicas", &line, &col), RM_OK);
    CU_ASSERT_EQUAL(line, 8);
    CU_ASSERT_EQUAL(col, 3);
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 0, "spec.template.spec.containers[0].image", &line, &col), RM_OK);
    CU_ASSERT_EQUAL(line, 13);
    CU_ASSERT_EQUAL(col, 9);
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 0, "spec.template.spec.containers[0]", &line, &col), RM_OK);
    CU_ASSERT_EQUAL(line, 12);
    CU_ASSERT_EQUAL(col, 9);
    /* falls back to the deepest existing ancestor */
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 0, "spec.training.epochs", &line, &col), RM_OK);
    CU_ASSERT_EQUAL(line, 6);
    CU_ASSERT_EQUAL(col, 1);
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 0, "spec.template.spec.containers[5].image", &line, &col), RM_OK);
    CU_ASSERT_EQUAL(line, 11);
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 1, "data.b[1]", &line, &col), RM_OK);
    CU_ASSERT_EQUAL(line, 17);
    CU_ASSERT_EQUAL(col, 23);
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 0, "nothere", &line, &col), RM_OK); /* root */
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 2, "x", &line, &col), RM_ENOTFOUND);
    /* take */
    cJSON *t = rm_yaml_take(d, 0);
    CU_ASSERT_PTR_EQUAL(t, j0);
    CU_ASSERT_PTR_NULL(rm_yaml_doc(d, 0));
    CU_ASSERT_EQUAL(rm_yaml_pos(d, 0, "spec.replicas", &line, &col), RM_OK);
    CU_ASSERT_EQUAL(line, 7);
    cJSON_Delete(t);
    rm_yaml_free(d);
    rm_yaml_free(NULL);
}

static void test_errors_have_line_col(void)
{
    rm_err e = {0};
    rm_yaml_docs *d = load("a: 1\nb: [1, 2\nc: 3\n", &e);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_EQUAL(e.code, RM_EINVAL);
    CU_ASSERT_EQUAL(strncmp(e.msg, "t.yaml:", 7), 0);
    int l = 0, c = 0;
    CU_ASSERT_EQUAL(sscanf(e.msg, "t.yaml:%d:%d:", &l, &c), 2);
    CU_ASSERT(l >= 2);
    memset(&e, 0, sizeof e);
    d = load("a: 1\n  b: 2\n", &e);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_EQUAL(sscanf(e.msg, "t.yaml:%d:%d:", &l, &c), 2);
    CU_ASSERT_EQUAL(l, 2);
    /* duplicate key: exact position of the second one */
    d = load("spec:\n  replicas: 1\n  replicas: 2\n", &e);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_STRING_EQUAL(e.msg, "t.yaml:3:3: duplicate key \"replicas\"");
    d = load("a: *nope\n", &e);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_STRING_EQUAL(e.msg, "t.yaml:1:4: unknown anchor \"nope\"");
    d = load("? [a, b]\n: 1\n", &e);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "t.yaml:1:3:"));
    d = load("n: !!int abc\n", &e);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "t.yaml:1:4:"));
    /* tabs for indentation, control bytes: errors, not crashes */
    d = load("a:\n\tb: 1\n", &e);
    CU_ASSERT_PTR_NULL(d);
    const char bin[] = "a: \x01\x02\n";
    d = load(bin, &e);
    CU_ASSERT_PTR_NULL(d);
    /* nesting cap */
    char deep[2000];
    size_t n = 0;
    for (int i = 0; i < 300; i++)
        deep[n++] = '[';
    deep[n] = 0;
    d = load(deep, &e);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "nesting"));
}

static void test_empty_inputs(void)
{
    rm_err e = {0};
    rm_yaml_docs *d = load("", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(rm_yaml_count(d), 0);
    rm_yaml_free(d);
    d = load("# only a comment\n---\n...\n", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(rm_yaml_count(d), 0);
    rm_yaml_free(d);
}

static void test_anchors_and_merge(void)
{
    rm_err e = {0};
    rm_yaml_docs *d = load("base: &b {x: 1, y: 2}\n"
                           "use:\n  <<: *b\n  y: 3\n"
                           "both:\n  <<: [{p: 1}, {p: 2, q: 2}]\n"
                           "ref: *b\n"
                           "inline:\n  <<: &c {z: 9}\n"
                           "again: *c\n",
                           &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    cJSON *j = rm_yaml_doc(d, 0);
    CU_ASSERT_EQUAL(rm_json_path(j, "use.x")->valuedouble, 1);
    CU_ASSERT_EQUAL(rm_json_path(j, "use.y")->valuedouble, 3);  /* explicit wins */
    CU_ASSERT_EQUAL(rm_json_path(j, "both.p")->valuedouble, 1); /* first merge wins */
    CU_ASSERT_EQUAL(rm_json_path(j, "both.q")->valuedouble, 2);
    CU_ASSERT_EQUAL(rm_json_path(j, "ref.y")->valuedouble, 2);
    CU_ASSERT_EQUAL(rm_json_path(j, "inline.z")->valuedouble, 9);
    CU_ASSERT_EQUAL(rm_json_path(j, "again.z")->valuedouble, 9);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(rm_json_path(j, "use"), "<<"));
    rm_yaml_free(d);
}

static void test_alias_bomb(void)
{
    const char bomb[] = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
                        "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
                        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
                        "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                        "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
                        "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
                        "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n";
    rm_err e = {0};
    rm_yaml_docs *d = load(bomb, &e);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_EQUAL(e.code, RM_ETOOBIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "alias"));
}

/* Duplicate keys are found with a hash, not by scanning the mapping for every key: 60k keys
 * used to take ~7 s (release; far more under ASan), now well under a second. Merged keys
 * still lose to explicit ones, and a duplicate at the very end is still reported. */
static void test_wide_mapping_is_linear(void)
{
    enum { N = 60000 };
    size_t cap = (size_t)N * 24 + 256, n = 0;
    char *y = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    n += (size_t)snprintf(y + n, cap - n, "base: &b {k1: merged, extra: merged}\nm:\n  <<: *b\n");
    for (int i = 0; i < N; i++)
        n += (size_t)snprintf(y + n, cap - n, "  k%d: %d\n", i, i);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rm_err e = {0};
    rm_yaml_docs *d = NULL;
    CU_ASSERT_EQUAL(rm_yaml_load(y, n, "w.yaml", &d, &e), RM_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CU_ASSERT(secs < 5.0);
    const cJSON *m = rm_json_path(rm_yaml_doc(d, 0), "m");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(m), N + 1);
    CU_ASSERT_EQUAL(rm_json_path(m, "k1")->valuedouble, 1); /* explicit wins */
    CU_ASSERT_STRING_EQUAL(rm_json_path(m, "extra")->valuestring, "merged");
    CU_ASSERT_EQUAL(rm_json_path(m, "k59999")->valuedouble, 59999);
    rm_yaml_free(d);
    n += (size_t)snprintf(y + n, cap - n, "  k17: again\n");
    CU_ASSERT_EQUAL(rm_yaml_load(y, n, "w.yaml", &d, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "w.yaml:60004:3: duplicate key \"k17\""));
    free(y);
}

static void test_load_file(void)
{
    rm_err e = {0};
    rm_yaml_docs *d = NULL;
    char *dir = rm_test_tmpdir("yaml");
    char path[600];
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    rm_test_write_file(path, manifest, strlen(manifest));
    CU_ASSERT_EQUAL(rm_yaml_load_file(path, &d, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_yaml_count(d), 2);
    rm_yaml_free(d);
    snprintf(path, sizeof path, "%s/bad.yaml", dir);
    rm_test_write_file(path, "a: [\n", 5);
    CU_ASSERT_EQUAL(rm_yaml_load_file(path, &d, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "bad.yaml:2:1:"));
    snprintf(path, sizeof path, "%s/missing.yaml", dir);
    CU_ASSERT_EQUAL(rm_yaml_load_file(path, &d, &e), RM_ENOTFOUND);
    CU_ASSERT_PTR_NULL(d);
    rm_test_rmtree(dir);
    free(dir);
}

void rm_suite_yaml(void)
{
    static const rm_test_case cases[] = {
        {"scalars", test_scalars},
        {"multi_doc_and_positions", test_multi_doc_and_positions},
        {"errors_have_line_col", test_errors_have_line_col},
        {"empty_inputs", test_empty_inputs},
        {"anchors_and_merge", test_anchors_and_merge},
        {"alias_bomb", test_alias_bomb},
        {"load_file", test_load_file},
        {"wide_mapping_is_linear", test_wide_mapping_is_linear},
    };
    RM_ADD_SUITE("yaml", NULL, NULL, cases);
}
