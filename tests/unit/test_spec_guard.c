/* test_spec_guard.c — what may change in a running TrainingJob's spec (operator/spec_guard.h;
 * docs/trainingjob-api.md#changing-a-running-job): the per-field rule table, the running-spec
 * record, the fields a change touches (named as deep as it goes), holding the record's values
 * while mutable fields are applied, and the CRD carrying a transition rule for every immutable
 * field of the table. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "operator/spec_guard.h"
#include "tests/unit/testutil.h"

static const char *const IMMUTABLE[] = {"backend",     "strategy", "parameterServer",
                                        "parallelism", "training", "checkpoint",
                                        "placement",   "output",   "runtimeRef"};
static const char *const MUTABLE[] = {"replicas",  "minReplicas", "maxReplicas", "restartPolicy",
                                      "runPolicy", "managedBy",   "template"};

#define SPEC                                                                                                 \
    "{\"replicas\":2,\"backend\":\"ring\",\"restartPolicy\":{\"maxRestarts\":3},"                            \
    "\"runPolicy\":{\"suspend\":false},\"checkpoint\":{\"path\":\"/ck\",\"intervalSteps\":50},"              \
    "\"training\":{\"model\":{\"type\":\"mlp\",\"hidden\":[128]},\"epochs\":2,\"optimizer\":{\"lr\":0.05}}," \
    "\"template\":{\"spec\":{\"containers\":[{\"name\":\"worker\"}]}}}"

static cJSON *parse(const char *s)
{
    cJSON *j = cJSON_Parse(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    return j;
}

static void test_table(void)
{
    for (size_t i = 0; i < sizeof IMMUTABLE / sizeof *IMMUTABLE; i++)
        CU_ASSERT_EQUAL(rm_spec_rule_of(IMMUTABLE[i]), RM_SPEC_IMMUTABLE);
    for (size_t i = 0; i < sizeof MUTABLE / sizeof *MUTABLE; i++)
        CU_ASSERT_EQUAL(rm_spec_rule_of(MUTABLE[i]), RM_SPEC_MUTABLE);
    CU_ASSERT_EQUAL(rm_spec_nfields,
                    (int)(sizeof IMMUTABLE / sizeof *IMMUTABLE + sizeof MUTABLE / sizeof *MUTABLE));
    /* a field the table does not know yet is fixed until someone classifies it */
    CU_ASSERT_EQUAL(rm_spec_rule_of("futureField"), RM_SPEC_IMMUTABLE);
    for (int i = 0; i < rm_spec_nfields; i++)
        CU_ASSERT(rm_spec_fields[i].how && rm_spec_fields[i].how[0]);
}

static void test_running_record(void)
{
    cJSON *spec = parse(SPEC);
    cJSON *r = rm_spec_running(spec);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    char *s = cJSON_PrintUnformatted(r);
    CU_ASSERT_STRING_EQUAL(s, "{\"backend\":\"ring\",\"checkpoint\":{\"path\":\"/ck\",\"intervalSteps\":50},"
                              "\"training\":{\"model\":{\"type\":\"mlp\",\"hidden\":[128]},\"epochs\":2,"
                              "\"optimizer\":{\"lr\":0.05}}}");
    free(s);
    char f[256];
    CU_ASSERT_EQUAL(rm_spec_changed_fields(r, spec, f, sizeof f), 0);
    CU_ASSERT_STRING_EQUAL(f, "");
    cJSON_Delete(r);
    r = rm_spec_running(NULL);
    CU_ASSERT(cJSON_IsObject(r) && !r->child);
    cJSON_Delete(r);
    cJSON_Delete(spec);
}

/* patch the spec with merge-patch-like edits, then ask what changed */
static int changed(const char *edit_path, const char *value_json, char *f, size_t cap)
{
    cJSON *spec = parse(SPEC);
    cJSON *r = rm_spec_running(spec);
    cJSON *at = spec;
    char p[128];
    snprintf(p, sizeof p, "%s", edit_path);
    char *key = strtok(p, ".");
    for (char *next; (next = strtok(NULL, ".")); key = next) {
        cJSON *c = cJSON_GetObjectItemCaseSensitive(at, key);
        if (!c)
            c = cJSON_AddObjectToObject(at, key);
        at = c;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(at, key);
    if (value_json)
        cJSON_AddItemToObject(at, key, parse(value_json));
    int n = rm_spec_changed_fields(r, spec, f, cap);
    cJSON_Delete(r);
    cJSON_Delete(spec);
    return n;
}

static void test_changed_fields(void)
{
    char f[256];
    /* immutable: named as deep as the change goes */
    CU_ASSERT_EQUAL(changed("training.model.hidden", "[64]", f, sizeof f), 1);
    CU_ASSERT_STRING_EQUAL(f, "spec.training.model.hidden");
    CU_ASSERT_EQUAL(changed("strategy", "\"parameterServer\"", f, sizeof f), 1); /* absent -> set */
    CU_ASSERT_STRING_EQUAL(f, "spec.strategy");
    CU_ASSERT_EQUAL(changed("training.sharding", "\"full\"", f, sizeof f), 1);
    CU_ASSERT_STRING_EQUAL(f, "spec.training.sharding");
    CU_ASSERT_EQUAL(changed("training.epochs", "5", f, sizeof f), 1);
    CU_ASSERT_STRING_EQUAL(f, "spec.training.epochs");
    CU_ASSERT_EQUAL(changed("checkpoint.path", NULL, f, sizeof f), 1); /* set -> absent */
    CU_ASSERT_STRING_EQUAL(f, "spec.checkpoint.path");
    CU_ASSERT_EQUAL(changed("backend", "\"nccl\"", f, sizeof f), 1);
    CU_ASSERT_STRING_EQUAL(f, "spec.backend");
    CU_ASSERT_EQUAL(changed("parameterServer", "{\"replicas\":2}", f, sizeof f), 1);
    CU_ASSERT_STRING_EQUAL(f, "spec.parameterServer"); /* absent -> set: the key itself */
    CU_ASSERT_EQUAL(changed("futureField", "1", f, sizeof f), 1);
    CU_ASSERT_STRING_EQUAL(f, "spec.futureField");
    /* mutable: nothing to hold */
    CU_ASSERT_EQUAL(changed("replicas", "3", f, sizeof f), 0);
    CU_ASSERT_EQUAL(changed("maxReplicas", "4", f, sizeof f), 0);
    CU_ASSERT_EQUAL(changed("runPolicy.suspend", "true", f, sizeof f), 0);
    CU_ASSERT_EQUAL(changed("restartPolicy.maxRestarts", "9", f, sizeof f), 0);
    CU_ASSERT_EQUAL(changed("template.spec.nodeSelector", "{\"a\":\"b\"}", f, sizeof f), 0);
    CU_ASSERT_STRING_EQUAL(f, "");

    /* several: every one, in the table's order; a small buffer ends in "..." */
    cJSON *spec = parse(SPEC);
    cJSON *r = rm_spec_running(spec);
    cJSON_ReplaceItemInObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(spec, "training"), "model"),
        "hidden", parse("[64,32]"));
    cJSON_AddStringToObject(spec, "strategy", "parameterServer");
    CU_ASSERT_EQUAL(rm_spec_changed_fields(r, spec, f, sizeof f), 2);
    CU_ASSERT_STRING_EQUAL(f, "spec.strategy, spec.training.model.hidden");
    char small[24];
    CU_ASSERT_EQUAL(rm_spec_changed_fields(r, spec, small, sizeof small), 2);
    CU_ASSERT(strlen(small) < sizeof small && strstr(small, "...") != NULL);
    CU_ASSERT(strncmp(small, "spec.strategy", 13) == 0);
    CU_ASSERT_EQUAL(rm_spec_changed_fields(r, spec, NULL, 0), 2);
    cJSON_Delete(r);
    cJSON_Delete(spec);
}

static void test_hold(void)
{
    cJSON *spec = parse(SPEC);
    cJSON *r = rm_spec_running(spec);
    /* the user's edit: two immutable fields, one removed, and two mutable ones */
    cJSON_ReplaceItemInObjectCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(spec, "training"), "model"),
        "hidden", parse("[64]"));
    cJSON_AddStringToObject(spec, "strategy", "parameterServer");
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "checkpoint");
    cJSON_ReplaceItemInObjectCaseSensitive(spec, "replicas", cJSON_CreateNumber(3));
    cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(spec, "runPolicy"), "activeDeadlineSeconds",
                          cJSON_CreateNumber(600));
    char f[256];
    CU_ASSERT_EQUAL(rm_spec_changed_fields(r, spec, f, sizeof f), 3);
    CU_ASSERT_EQUAL(rm_spec_hold(spec, r), 0);
    CU_ASSERT_EQUAL(rm_spec_changed_fields(r, spec, f, sizeof f), 0);
    cJSON *want = rm_spec_running(spec);
    CU_ASSERT(cJSON_Compare(want, r, 1));
    cJSON_Delete(want);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItemCaseSensitive(spec, "strategy"));
    CU_ASSERT_EQUAL(cJSON_GetObjectItemCaseSensitive(spec, "replicas")->valueint, 3); /* applied */
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(spec, "runPolicy"), "activeDeadlineSeconds"));
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItemCaseSensitive(spec, "template"));
    CU_ASSERT_NOT_EQUAL(rm_spec_hold(NULL, r), 0);
    cJSON_Delete(r);
    cJSON_Delete(spec);
}

/* The CRD refuses each immutable field's change by itself: a transition rule (oldSelf) whose
 * message names the field, for every immutable key of the table. */
static void test_crd_rules(void)
{
    const char *root = getenv("RM_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/deploy/crd/trainingjobs.ringmaster.dev.yaml", root && *root ? root : ".");
    FILE *fp = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    for (int i = 0; i < rm_spec_nfields; i++) {
        if (rm_spec_fields[i].rule != RM_SPEC_IMMUTABLE)
            continue;
        char msg[128];
        snprintf(msg, sizeof msg, "message: \"spec.%s: field is immutable\"", rm_spec_fields[i].key);
        const char *at = strstr(text, msg);
        if (!at)
            fprintf(stderr, "no transition rule in the CRD for spec.%s\n", rm_spec_fields[i].key);
        CU_ASSERT_PTR_NOT_NULL(at);
        /* the rule line right above the message compares with oldSelf */
        const char *line = at;
        while (line > text && line[-1] != '\n')
            line--;
        const char *prev = line - 1;
        while (prev > text && prev[-1] != '\n')
            prev--;
        CU_ASSERT(at && strstr(prev, "oldSelf") && strstr(prev, "oldSelf") < line);
    }
}

void rm_suite_spec_guard(void)
{
    static const rm_test_case cases[] = {
        {"per-field rule table", test_table},
        {"running-spec record", test_running_record},
        {"changed fields named as deep as they go", test_changed_fields},
        {"hold keeps immutable, applies mutable", test_hold},
        {"the CRD has a transition rule per immutable field", test_crd_rules},
    };
    RM_ADD_SUITE("spec_guard", NULL, NULL, cases);
}
