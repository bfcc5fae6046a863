/* Tests for common/json: typed getters (missing vs wrong type), unknown fields, parse errors,
 * dotted paths and RFC 3339 times. */
#include "common/json.h"
#include "tests/unit/testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static cJSON *doc(const char *s)
{
    rm_err e = {0};
    cJSON *j = rm_json_parse(s, strlen(s), &e);
    CU_ASSERT_PTR_NOT_NULL(j);
    return j;
}

static void test_int_getter(void)
{
    cJSON *j = doc("{\"a\":3,\"b\":3.0,\"c\":3.5,\"d\":\"3\",\"e\":null,\"f\":1e300}");
    rm_err e = {0};
    int64_t v = -1;
    CU_ASSERT_EQUAL(rm_json_int(j, "a", true, "spec", &v, &e), RM_OK);
    CU_ASSERT_EQUAL(v, 3);
    CU_ASSERT_EQUAL(rm_json_int(j, "b", true, "spec", &v, &e), RM_OK);
    CU_ASSERT_EQUAL(v, 3);
    CU_ASSERT_EQUAL(rm_json_int(j, "c", true, "spec", &v, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.c: must be an integer");
    CU_ASSERT_STRING_EQUAL(e.field, "spec.c");
    CU_ASSERT_EQUAL(rm_json_int(j, "d", false, "spec", &v, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.d: must be an integer");
    CU_ASSERT_EQUAL(rm_json_int(j, "f", false, "", &v, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "f: out of range");
    /* absent / null and optional: ENOTFOUND, out and err untouched */
    v = 77;
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_json_int(j, "zz", false, "spec", &v, &e), RM_ENOTFOUND);
    CU_ASSERT_EQUAL(rm_json_int(j, "e", false, "spec", &v, &e), RM_ENOTFOUND);
    CU_ASSERT_EQUAL(v, 77);
    CU_ASSERT_EQUAL(e.code, 0);
    CU_ASSERT_STRING_EQUAL(e.msg, "");
    /* absent and required */
    CU_ASSERT_EQUAL(rm_json_int(j, "zz", true, "spec.restartPolicy", &v, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.restartPolicy.zz: required");
    CU_ASSERT_STRING_EQUAL(e.field, "spec.restartPolicy.zz");
    CU_ASSERT_EQUAL(rm_json_int(j, "e", true, "spec", &v, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.e: required");
    cJSON_Delete(j);
}

static void test_other_getters(void)
{
    cJSON *j = doc("{\"n\":1.5,\"b\":true,\"s\":\"x\",\"o\":{},\"a\":[1],\"wrong\":1}");
    rm_err e = {0};
    double d;
    bool b;
    const char *s;
    const cJSON *o;
    CU_ASSERT_EQUAL(rm_json_num(j, "n", true, "", &d, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(d, 1.5, 1e-12);
    CU_ASSERT_EQUAL(rm_json_bool(j, "b", true, "", &b, &e), RM_OK);
    CU_ASSERT_TRUE(b);
    CU_ASSERT_EQUAL(rm_json_str(j, "s", true, "", &s, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(s, "x");
    CU_ASSERT_EQUAL(rm_json_obj(j, "o", true, "", &o, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_json_arr(j, "a", true, "", &o, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_json_num(j, "s", true, "x", &d, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "x.s: must be a number");
    CU_ASSERT_EQUAL(rm_json_bool(j, "wrong", true, "x", &b, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "x.wrong: must be a boolean");
    CU_ASSERT_EQUAL(rm_json_str(j, "wrong", true, "x", &s, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "x.wrong: must be a string");
    CU_ASSERT_EQUAL(rm_json_obj(j, "a", true, "x", &o, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "x.a: must be an object");
    CU_ASSERT_EQUAL(rm_json_arr(j, "o", true, "x", &o, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "x.o: must be an array");
    /* non-object container: treated as absent */
    CU_ASSERT_EQUAL(rm_json_num(cJSON_GetObjectItem(j, "a"), "n", false, "", &d, &e), RM_ENOTFOUND);
    cJSON_Delete(j);
}

static void test_no_unknown(void)
{
    cJSON *j = doc("{\"replicas\":1,\"foo\":2}");
    rm_err e = {0};
    static const char *const ok1[] = {"replicas", "foo", NULL};
    static const char *const ok2[] = {"replicas", NULL};
    CU_ASSERT_EQUAL(rm_json_no_unknown(j, ok1, "spec", &e), RM_OK);
    CU_ASSERT_EQUAL(rm_json_no_unknown(j, ok2, "spec", &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.foo: unknown field");
    CU_ASSERT_STRING_EQUAL(e.field, "spec.foo");
    cJSON_Delete(j);
}

static void test_parse(void)
{
    rm_err e = {0};
    cJSON *j = rm_json_parse("{\"a\":1}garbage", 7, &e); /* length bounds the input */
    CU_ASSERT_PTR_NOT_NULL(j);
    cJSON_Delete(j);
    j = rm_json_parse("{\"a\":1} x", 9, &e);
    CU_ASSERT_PTR_NULL(j);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "invalid JSON at offset 8"));
    j = rm_json_parse("{\"a\":}", 6, &e);
    CU_ASSERT_PTR_NULL(j);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "invalid JSON at offset 5"));
    j = rm_json_parse("{\"a\":1", 6, &e);
    CU_ASSERT_PTR_NULL(j);
    j = rm_json_parse("", 0, &e);
    CU_ASSERT_PTR_NULL(j);
    j = rm_json_parse("  [1,2]  \n", 10, &e);
    CU_ASSERT_PTR_NOT_NULL(j);
    char *s = rm_json_print(j);
    CU_ASSERT_STRING_EQUAL(s, "[1,2]");
    free(s);
    cJSON_Delete(j);
}

static void test_path(void)
{
    cJSON *j = doc("{\"status\":{\"conditions\":[{\"type\":\"Created\"},{\"type\":\"Running\"}]},"
                   "\"a\":{\"b\":{\"c\":5}}}");
    const cJSON *p = rm_json_path(j, "status.conditions[1].type");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_STRING_EQUAL(p->valuestring, "Running");
    p = rm_json_path(j, "a.b.c");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->valueint, 5);
    CU_ASSERT_PTR_NULL(rm_json_path(j, "status.conditions[2].type"));
    CU_ASSERT_PTR_NULL(rm_json_path(j, "status.conditions.type"));
    CU_ASSERT_PTR_NULL(rm_json_path(j, "a.b.c.d"));
    CU_ASSERT_PTR_NULL(rm_json_path(j, "a[0]"));
    CU_ASSERT_PTR_NULL(rm_json_path(j, "status.conditions[x]"));
    /* 2^32 + 1 must not wrap to index 1 */
    CU_ASSERT_PTR_NULL(rm_json_path(j, "status.conditions[4294967297].type"));
    CU_ASSERT_PTR_NULL(rm_json_path(j, "status.conditions[99999999999999999999].type"));
    CU_ASSERT_PTR_EQUAL(rm_json_path(j, ""), j);
    cJSON_Delete(j);
}

static void test_controller_ref(void)
{
    cJSON *md = doc("{\"name\":\"p\",\"ownerReferences\":[{\"kind\":\"Other\"}]}");
    CU_ASSERT_EQUAL(rm_json_add_controller_ref(md, "ringmaster.dev/v1", "TrainingJob", "j", "u-1"), RM_OK);
    CU_ASSERT_EQUAL(rm_json_add_controller_ref(md, "v1", "K", "k", NULL), RM_OK);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(rm_json_path(md, "ownerReferences")), 3);
    CU_ASSERT_STRING_EQUAL(rm_json_path(md, "ownerReferences[0].kind")->valuestring, "Other");
    CU_ASSERT_STRING_EQUAL(rm_json_path(md, "ownerReferences[1].apiVersion")->valuestring,
                           "ringmaster.dev/v1");
    CU_ASSERT_STRING_EQUAL(rm_json_path(md, "ownerReferences[1].kind")->valuestring, "TrainingJob");
    CU_ASSERT_STRING_EQUAL(rm_json_path(md, "ownerReferences[1].name")->valuestring, "j");
    CU_ASSERT_STRING_EQUAL(rm_json_path(md, "ownerReferences[1].uid")->valuestring, "u-1");
    CU_ASSERT(cJSON_IsTrue(rm_json_path(md, "ownerReferences[1].controller")));
    CU_ASSERT(cJSON_IsTrue(rm_json_path(md, "ownerReferences[1].blockOwnerDeletion")));
    CU_ASSERT_STRING_EQUAL(rm_json_path(md, "ownerReferences[2].uid")->valuestring, "");
    cJSON_Delete(md);
    /* a non-array ownerReferences is replaced, not appended to */
    md = doc("{\"ownerReferences\":5}");
    CU_ASSERT_EQUAL(rm_json_add_controller_ref(md, "v1", "K", "k", "u"), RM_OK);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(rm_json_path(md, "ownerReferences")), 1);
    cJSON_Delete(md);
}

static void test_object_head(void)
{
    cJSON *md = NULL;
    cJSON *o = rm_json_object_head("ringmaster.dev/v1", "TrainingJob", "j", NULL, "u", NULL, 0, &md);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_PTR_EQUAL(md, rm_json_path(o, "metadata"));
    char *s = rm_json_print(o);
    CU_ASSERT_STRING_EQUAL(s, "{\"apiVersion\":\"ringmaster.dev/v1\",\"kind\":\"TrainingJob\","
                              "\"metadata\":{\"name\":\"j\",\"uid\":\"u\"}}");
    free(s);
    cJSON_Delete(o);
    o = rm_json_object_head("v1", "K", "n", "ns", "u", "42", 3, &md);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(rm_json_path(o, "metadata.namespace")->valuestring, "ns");
    CU_ASSERT_STRING_EQUAL(rm_json_path(o, "metadata.resourceVersion")->valuestring, "42");
    CU_ASSERT_EQUAL(rm_json_path(o, "metadata.generation")->valueint, 3);
    cJSON_Delete(o);
}

static void test_time(void)
{
    char b[32], m[40];
    rm_json_time(b, 1795248000.0); /* 2026-11-21T08:00:00Z */
    CU_ASSERT_STRING_EQUAL(b, "2026-11-21T08:00:00Z");
    rm_json_microtime(m, 1795248000.25);
    CU_ASSERT_STRING_EQUAL(m, "2026-11-21T08:00:00.250000Z");
    /* out of range: clamped to what RFC 3339 can spell, never garbage */
    rm_json_time(b, 1e300);
    CU_ASSERT_STRING_EQUAL(b, "9999-12-31T23:59:59Z");
    rm_json_microtime(m, 1e19);
    CU_ASSERT_STRING_EQUAL(m, "9999-12-31T23:59:59.000000Z");
    rm_json_time(b, -5);
    CU_ASSERT_STRING_EQUAL(b, "1970-01-01T00:00:00Z");
    double t;
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-11-21T08:00:00Z", &t), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(t, 1795248000.0, 1e-6);
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-11-21T08:00:00.250000Z", &t), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(t, 1795248000.25, 1e-6);
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-11-21T09:30:00+01:30", &t), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(t, 1795248000.0, 1e-6);
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-11-21 08:00:00", &t), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-13-21T08:00:00Z", &t), RM_EINVAL);
    /* days past the month's end are refused, not rolled into the next month */
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-02-29T00:00:00Z", &t), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-04-31T00:00:00Z", &t), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_json_parse_time("2100-02-29T00:00:00Z", &t), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_json_parse_time("2024-02-29T00:00:00Z", &t), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(t, 1709164800.0, 1e-6);
    CU_ASSERT_EQUAL(rm_json_parse_time("2000-02-29T00:00:00Z", &t), RM_OK);
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-12-31T23:59:59Z", &t), RM_OK);
    CU_ASSERT_EQUAL(rm_json_parse_time("2026-11-21T08:00:00Zjunk", &t), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_json_parse_time("", &t), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_json_parse_time(NULL, &t), RM_EINVAL);
}

void rm_suite_json(void)
{
    static const rm_test_case cases[] = {
        {"int_getter_missing_vs_wrong_type", test_int_getter},
        {"other_getters", test_other_getters},
        {"no_unknown", test_no_unknown},
        {"parse_errors", test_parse},
        {"path", test_path},
        {"controller_ref", test_controller_ref},
        {"object_head", test_object_head},
        {"time", test_time},
    };
    RM_ADD_SUITE("json", NULL, NULL, cases);
}
