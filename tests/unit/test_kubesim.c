/* test_kubesim.c — unit tests of kubesim's pure parts: label/field selectors (K4, K5),
 * merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge for pods, structural schema
 * pruning/defaulting/validation (L2) and the JSONPath subset of printer columns. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/kubesim/kubesim.h"
#include "tests/kubesim/names.h"
#include "tests/kubesim/patch.h"
#include "tests/kubesim/selectors.h"
#include "tests/unit/testutil.h"

static bool lmatch(const char *sel, const char *labels_json)
{
    ks_lsel *s = NULL;
    rm_err e = {0};
    CU_ASSERT_FATAL(ks_lsel_parse(sel, &s, &e) == RM_OK);
    cJSON *l = labels_json ? cJSON_Parse(labels_json) : NULL;
    bool r = ks_lsel_match(s, l);
    cJSON_Delete(l);
    ks_lsel_free(s);
    return r;
}

static void test_label_selectors(void)
{
    const char *L = "{\"env\":\"prod\",\"tier\":\"web\"}";
    CU_ASSERT(lmatch("", L));
    CU_ASSERT(lmatch(NULL, NULL));
    CU_ASSERT(lmatch("env=prod", L));
    CU_ASSERT(lmatch("env==prod", L));
    CU_ASSERT(!lmatch("env=dev", L));
    CU_ASSERT(!lmatch("env!=prod", L));
    CU_ASSERT(lmatch("app!=x", L)); /* != matches a missing key */
    CU_ASSERT(lmatch("env in (dev, prod)", L));
    CU_ASSERT(!lmatch("env notin (prod)", L));
    CU_ASSERT(lmatch("app notin (x)", L)); /* notin matches a missing key */
    CU_ASSERT(lmatch("env", L));
    CU_ASSERT(!lmatch("!env", L));
    CU_ASSERT(lmatch("!app", L));
    CU_ASSERT(lmatch("env=prod,tier=web", L));
    CU_ASSERT(!lmatch("env=prod,tier=db", L));
    CU_ASSERT(lmatch("example.com/key", "{\"example.com/key\":\"\"}"));
    CU_ASSERT(lmatch("n>3", "{\"n\":\"5\"}"));
    CU_ASSERT(!lmatch("n<3", "{\"n\":\"5\"}"));
    CU_ASSERT(lmatch("env=", "{\"env\":\"\"}"));
    const char *bad[] = {"env in prod", "=x",     "a b", "env in (a", "env,,x",
                         "env=a=b",     "-bad=1", ",",   "env in ()x"};
    for (size_t i = 0; i < RM_ARRAY_LEN(bad); i++) {
        ks_lsel *s = NULL;
        rm_err e = {0};
        CU_ASSERT(ks_lsel_parse(bad[i], &s, &e) == RM_EINVAL);
        CU_ASSERT(s == NULL);
        CU_ASSERT(strstr(e.msg, "unable to parse requirement") != NULL);
    }
}

static void test_field_selectors(void)
{
    static const char *const allowed[] = {"metadata.name", "metadata.namespace", "status.phase", NULL};
    cJSON *o = cJSON_Parse(
        "{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\"},\"status\":{\"phase\":\"Running\"}}");
    ks_fsel *f = NULL;
    rm_err e = {0};
    CU_ASSERT(ks_fsel_parse("metadata.name=a,status.phase!=Failed", allowed, &f, &e) == RM_OK);
    CU_ASSERT(ks_fsel_match(f, o));
    ks_fsel_free(f);
    CU_ASSERT(ks_fsel_parse("metadata.name==b", allowed, &f, &e) == RM_OK);
    CU_ASSERT(!ks_fsel_match(f, o));
    ks_fsel_free(f);
    CU_ASSERT(ks_fsel_parse("status.phase=", allowed, &f, &e) == RM_OK);
    CU_ASSERT(!ks_fsel_match(f, o));
    ks_fsel_free(f);
    f = NULL;
    CU_ASSERT(ks_fsel_parse("spec.replicas=1", allowed, &f, &e) == RM_EINVAL);
    CU_ASSERT(strcmp(e.msg, "field label not supported: spec.replicas") == 0);
    CU_ASSERT(ks_fsel_parse("justgarbage", allowed, &f, &e) == RM_EINVAL);
    cJSON_Delete(o);
}

static cJSON *P(const char *s)
{
    cJSON *j = cJSON_Parse(s);
    CU_ASSERT_FATAL(j != NULL);
    return j;
}

static bool same(const cJSON *a, const char *b)
{
    cJSON *bj = P(b);
    bool r = cJSON_Compare(a, bj, 1);
    if (!r) {
        char *s = cJSON_PrintUnformatted(a);
        fprintf(stderr, "\n got %s\nwant %s\n", s, b);
        free(s);
    }
    cJSON_Delete(bj);
    return r;
}

static void test_merge_patch(void)
{
    /* RFC 7386 appendix A examples */
    struct {
        const char *doc, *patch, *want;
    } c[] = {
        {"{\"a\":\"b\"}", "{\"a\":\"c\"}", "{\"a\":\"c\"}"},
        {"{\"a\":\"b\"}", "{\"b\":\"c\"}", "{\"a\":\"b\",\"b\":\"c\"}"},
        {"{\"a\":\"b\"}", "{\"a\":null}", "{}"},
        {"{\"a\":[\"b\"]}", "{\"a\":\"c\"}", "{\"a\":\"c\"}"},
        {"{\"a\":\"c\"}", "{\"a\":[\"b\"]}", "{\"a\":[\"b\"]}"},
        {"{\"a\":{\"b\":\"c\"}}", "{\"a\":{\"b\":\"d\",\"c\":null}}", "{\"a\":{\"b\":\"d\"}}"},
        {"{\"a\":[{\"b\":\"c\"}]}", "{\"a\":[1]}", "{\"a\":[1]}"},
        {"{\"e\":null}", "{\"a\":1}", "{\"e\":null,\"a\":1}"},
        {"{}", "{\"a\":{\"bb\":{\"ccc\":null}}}", "{\"a\":{\"bb\":{}}}"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(c); i++) {
        cJSON *d = P(c[i].doc), *p = P(c[i].patch);
        rm_err e = {0};
        CU_ASSERT(ks_merge_patch(&d, p, &e) == RM_OK);
        CU_ASSERT(same(d, c[i].want));
        cJSON_Delete(d);
        cJSON_Delete(p);
    }
}

static int jp(const char *doc, const char *patch, const char *want)
{
    cJSON *d = P(doc), *p = P(patch);
    rm_err e = {0};
    int rc = ks_json_patch(&d, p, &e);
    if (rc == RM_OK && want)
        CU_ASSERT(same(d, want));
    cJSON_Delete(d);
    cJSON_Delete(p);
    return rc;
}

static void test_json_patch(void)
{
    CU_ASSERT(jp("{\"foo\":\"bar\"}", "[{\"op\":\"add\",\"path\":\"/baz\",\"value\":\"qux\"}]",
                 "{\"foo\":\"bar\",\"baz\":\"qux\"}") == RM_OK);
    CU_ASSERT(jp("{\"foo\":[\"bar\",\"baz\"]}", "[{\"op\":\"add\",\"path\":\"/foo/1\",\"value\":\"qux\"}]",
                 "{\"foo\":[\"bar\",\"qux\",\"baz\"]}") == RM_OK);
    CU_ASSERT(jp("{\"foo\":[1]}", "[{\"op\":\"add\",\"path\":\"/foo/-\",\"value\":2}]", "{\"foo\":[1,2]}") ==
              RM_OK);
    CU_ASSERT(jp("{\"baz\":\"qux\",\"foo\":\"bar\"}", "[{\"op\":\"remove\",\"path\":\"/baz\"}]",
                 "{\"foo\":\"bar\"}") == RM_OK);
    CU_ASSERT(jp("{\"foo\":{\"bar\":\"baz\",\"waldo\":\"fred\"},\"qux\":{\"corge\":\"grault\"}}",
                 "[{\"op\":\"move\",\"from\":\"/foo/waldo\",\"path\":\"/qux/thud\"}]",
                 "{\"foo\":{\"bar\":\"baz\"},\"qux\":{\"corge\":\"grault\",\"thud\":\"fred\"}}") == RM_OK);
    CU_ASSERT(jp("{\"a\":{\"b\":1}}", "[{\"op\":\"copy\",\"from\":\"/a\",\"path\":\"/c\"}]",
                 "{\"a\":{\"b\":1},\"c\":{\"b\":1}}") == RM_OK);
    CU_ASSERT(jp("{\"a/b\":1,\"m~n\":2}",
                 "[{\"op\":\"replace\",\"path\":\"/a~1b\",\"value\":3},"
                 "{\"op\":\"test\",\"path\":\"/m~0n\",\"value\":2}]",
                 "{\"a/b\":3,\"m~n\":2}") == RM_OK);
    CU_ASSERT(jp("{\"a\":1}", "[{\"op\":\"test\",\"path\":\"/a\",\"value\":2}]", NULL) == RM_EINVAL);
    CU_ASSERT(jp("{\"a\":1}", "[{\"op\":\"replace\",\"path\":\"/b\",\"value\":2}]", NULL) == RM_EINVAL);
    CU_ASSERT(jp("{\"a\":1}", "[{\"op\":\"remove\",\"path\":\"/b\"}]", NULL) == RM_EINVAL);
    CU_ASSERT(jp("{\"a\":[1]}", "[{\"op\":\"add\",\"path\":\"/a/5\",\"value\":2}]", NULL) == RM_EINVAL);
    CU_ASSERT(jp("{\"a\":{}}", "[{\"op\":\"move\",\"from\":\"/a\",\"path\":\"/a/b\"}]", NULL) == RM_EINVAL);
    CU_ASSERT(jp("{}", "[{\"op\":\"bogus\",\"path\":\"/a\"}]", NULL) == RM_EPROTO);
    CU_ASSERT(jp("{}", "{\"op\":\"add\"}", NULL) == RM_EPROTO);
    CU_ASSERT(jp("{}", "[{\"op\":\"add\",\"path\":\"/a\"}]", NULL) == RM_EPROTO);
    /* a failed op leaves an error, never a crash, with earlier ops applied to the private copy */
    CU_ASSERT(
        jp("{\"a\":1}",
           "[{\"op\":\"add\",\"path\":\"/b\",\"value\":1},{\"op\":\"test\",\"path\":\"/a\",\"value\":0}]",
           NULL) == RM_EINVAL);
}

static void test_strategic_merge(void)
{
    cJSON *d = P("{\"metadata\":{\"finalizers\":[\"a\"]},\"spec\":{\"containers\":["
                 "{\"name\":\"a\",\"image\":\"x\",\"env\":[{\"name\":\"X\",\"value\":\"1\"}],\"ports\":[{"
                 "\"containerPort\":80}]},"
                 "{\"name\":\"b\",\"image\":\"y\"}],\"tolerations\":[{\"key\":\"t\"}]}}");
    cJSON *p =
        P("{\"metadata\":{\"finalizers\":[\"b\"]},\"$setElementOrder/spec\":[],\"spec\":{\"containers\":["
          "{\"name\":\"a\",\"image\":\"x2\",\"env\":[{\"name\":\"Y\",\"value\":\"2\"},{\"name\":\"X\",\"$"
          "patch\":\"delete\"}]},"
          "{\"name\":\"c\",\"image\":\"z\"}],\"tolerations\":[{\"key\":\"u\"}]}}");
    rm_err e = {0};
    CU_ASSERT(ks_strategic_merge_patch(&d, p, &e) == RM_OK);
    CU_ASSERT(same(d, "{\"metadata\":{\"finalizers\":[\"a\",\"b\"]},\"spec\":{\"containers\":["
                      "{\"name\":\"a\",\"image\":\"x2\",\"env\":[{\"name\":\"Y\",\"value\":\"2\"}],\"ports\":"
                      "[{\"containerPort\":80}]},"
                      "{\"name\":\"b\",\"image\":\"y\"},{\"name\":\"c\",\"image\":\"z\"}],\"tolerations\":[{"
                      "\"key\":\"u\"}]}}"));
    cJSON_Delete(p);
    /* merging an element that is not first keeps its position (cJSON insert bug regression) */
    p = P("{\"spec\":{\"containers\":[{\"name\":\"b\",\"image\":\"y2\"}]}}");
    CU_ASSERT(ks_strategic_merge_patch(&d, p, &e) == RM_OK);
    CU_ASSERT(!strcmp(ks_jsonpath(d, ".spec.containers[1].name")->valuestring, "b"));
    CU_ASSERT(!strcmp(ks_jsonpath(d, ".spec.containers[1].image")->valuestring, "y2"));
    CU_ASSERT(cJSON_GetArraySize(ks_json_dot(d, "spec.containers")) == 3);
    cJSON_Delete(p);
    p = P("{\"spec\":{\"containers\":[{\"name\":\"q\",\"image\":\"r\"},{\"$patch\":\"replace\"}]}}");
    CU_ASSERT(ks_strategic_merge_patch(&d, p, &e) == RM_OK);
    CU_ASSERT(cJSON_GetArraySize(ks_json_dot(d, "spec.containers")) == 1);
    cJSON_Delete(p);
    p = P("{\"spec\":{\"containers\":[{\"image\":\"nokey\"}]}}");
    CU_ASSERT(ks_strategic_merge_patch(&d, p, &e) == RM_EINVAL);
    cJSON_Delete(p);
    cJSON_Delete(d);
}

static void test_schema(void)
{
    cJSON *sch = P("{\"type\":\"object\",\"properties\":{\"apiVersion\":{\"type\":\"string\"},\"metadata\":{"
                   "\"type\":\"object\"},"
                   "\"spec\":{\"type\":\"object\",\"required\":[\"replicas\"],\"properties\":{"
                   "\"replicas\":{\"type\":\"integer\",\"minimum\":1,\"default\":1},"
                   "\"backend\":{\"type\":\"string\",\"enum\":[\"auto\",\"ring\"],\"default\":\"auto\"},"
                   "\"policy\":{\"type\":\"object\",\"default\":{},\"properties\":{\"max\":{\"type\":"
                   "\"integer\",\"default\":5}}},"
                   "\"free\":{\"type\":\"object\",\"x-kubernetes-preserve-unknown-fields\":true},"
                   "\"m\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}}}}}");
    cJSON *o = P("{\"apiVersion\":\"g/v\",\"kind\":\"K\",\"metadata\":{\"name\":\"a\",\"x\":1},"
                 "\"spec\":{\"junk\":1,\"free\":{\"any\":{\"thing\":1}},\"m\":{\"k\":\"v\"}},\"top\":1}");
    cJSON *unk = cJSON_CreateArray();
    rm_err e = {0};
    CU_ASSERT(ks_schema_apply(sch, o, unk, &e) == RM_OK);
    CU_ASSERT(same(o, "{\"apiVersion\":\"g/v\",\"kind\":\"K\",\"metadata\":{\"name\":\"a\",\"x\":1},"
                      "\"spec\":{\"replicas\":1,\"backend\":\"auto\",\"policy\":{\"max\":5},"
                      "\"free\":{\"any\":{\"thing\":1}},\"m\":{\"k\":\"v\"}}}"));
    CU_ASSERT(cJSON_GetArraySize(unk) == 2);
    CU_ASSERT(!strcmp(cJSON_GetArrayItem(unk, 0)->valuestring, "spec.junk"));
    CU_ASSERT(!strcmp(cJSON_GetArrayItem(unk, 1)->valuestring, "top"));
    cJSON_Delete(o);
    const char *bad[][2] = {{"{\"spec\":{\"replicas\":0}}", "spec.replicas"},
                            {"{\"spec\":{\"replicas\":\"x\"}}", "spec.replicas"},
                            {"{\"spec\":{\"backend\":\"mpi\"}}", "spec.backend"},
                            {"{\"spec\":{\"m\":{\"k\":1}}}", "spec.m.k"}};
    for (size_t i = 0; i < RM_ARRAY_LEN(bad); i++) {
        o = P(bad[i][0]);
        memset(&e, 0, sizeof(e));
        CU_ASSERT(ks_schema_apply(sch, o, NULL, &e) == RM_EINVAL);
        CU_ASSERT(!strcmp(e.field, bad[i][1]));
        cJSON_Delete(o);
    }
    cJSON_Delete(unk);
    cJSON_Delete(sch);
    /* pattern and a CR's metadata.name restrictions (the CRD's DNS-1035 rule for job names) */
    sch = P(
        "{\"type\":\"object\",\"properties\":{\"metadata\":{\"type\":\"object\",\"properties\":{\"name\":"
        "{\"type\":\"string\",\"maxLength\":5,\"pattern\":\"^[a-z]([-a-z0-9]*[a-z0-9])?$\"}}},"
        "\"spec\":{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"^x+$\"}}}}}");
    const char *cases[][2] = {
        {"{\"metadata\":{\"name\":\"ab-1\"},\"spec\":{\"s\":\"xx\"}}", NULL},
        {"{\"metadata\":{\"name\":\"1ab\"}}",
         "metadata.name: Invalid value: \"1ab\": "
         "metadata.name in body should match '^[a-z]([-a-z0-9]*[a-z0-9])?$'"},
        {"{\"metadata\":{\"name\":\"abcdef\"}}", "metadata.name: Too long: may not be more than 5 bytes"},
        {"{\"spec\":{\"s\":\"xy\"}}", "spec.s: Invalid value: \"xy\": spec.s in body should match '^x+$'"}};
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        o = P(cases[i][0]);
        memset(&e, 0, sizeof(e));
        CU_ASSERT(ks_schema_apply(sch, o, NULL, &e) == (cases[i][1] ? RM_EINVAL : RM_OK));
        if (cases[i][1])
            CU_ASSERT_STRING_EQUAL(e.msg, cases[i][1]);
        cJSON_Delete(o);
    }
    cJSON_Delete(sch);
}

static void test_jsonpath(void)
{
    cJSON *o = P("{\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"A\",\"status\":\"False\"},"
                 "{\"type\":\"Ready\",\"status\":\"True\"}],\"list\":[1,2,3]}}");
    CU_ASSERT(!strcmp(ks_jsonpath(o, ".status.phase")->valuestring, "Running"));
    CU_ASSERT(
        !strcmp(ks_jsonpath(o, ".status.conditions[?(@.type==\"Ready\")].status")->valuestring, "True"));
    CU_ASSERT(!strcmp(ks_jsonpath(o, "{.status.conditions[?(@.type=='A')].status}")->valuestring, "False"));
    CU_ASSERT(ks_jsonpath(o, ".status.list[2]")->valuedouble == 3);
    CU_ASSERT(ks_jsonpath(o, ".status.list[-1]")->valuedouble == 3);
    CU_ASSERT(ks_jsonpath(o, ".status.list[9]") == NULL);
    CU_ASSERT(ks_jsonpath(o, ".status.nope.deeper") == NULL);
    CU_ASSERT(ks_jsonpath(o, ".status.conditions[?(@.type==\"Z\")].status") == NULL);
    CU_ASSERT(ks_jsonpath(o, "garbage[") == NULL);
    cJSON_Delete(o);
}

/* Object-name and metadata rules (names.c): which names each format accepts, the per-kind
 * choice, the annotation total, pod hostname/subdomain, and the Status message shape. */
static void test_names(void)
{
    static const struct {
        ks_name_fmt fmt;
        const char *v;
        int bad;
    } cases[] = {
        {KS_NAME_SUBDOMAIN, "a.b-1", 0},  {KS_NAME_SUBDOMAIN, "1job", 0},
        {KS_NAME_SUBDOMAIN, "a..b", 1},   {KS_NAME_SUBDOMAIN, "a.-b", 1},
        {KS_NAME_SUBDOMAIN, "A", 1},      {KS_NAME_SUBDOMAIN, "", 1},
        {KS_NAME_SUBDOMAIN, "a.", 1},     {KS_NAME_LABEL, "1job", 0},
        {KS_NAME_LABEL, "a.b", 1},        {KS_NAME_LABEL, "-a", 1},
        {KS_NAME_LABEL, "a-", 1},         {KS_NAME_DNS1035, "job-1", 0},
        {KS_NAME_DNS1035, "1job", 1},     {KS_NAME_DNS1035, "a.b", 1},
        {KS_NAME_DNS1035, "a_b", 1},      {KS_NAME_PATH_SEGMENT, "system:Thing", 0},
        {KS_NAME_PATH_SEGMENT, "..", 1},  {KS_NAME_PATH_SEGMENT, "a/b", 1},
        {KS_NAME_PATH_SEGMENT, "a%b", 1},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        ks_causes cs = {0};
        int n = ks_check_name(cases[i].fmt, "metadata.name", cases[i].v, &cs);
        CU_ASSERT_EQUAL(n, cases[i].bad);
        CU_ASSERT_EQUAL(cs.n, cases[i].bad);
        if (n != cases[i].bad)
            fprintf(stderr, "\n  name \"%s\" fmt %d: %d causes\n", cases[i].v, (int)cases[i].fmt, n);
    }
    /* lengths: 63 ok for labels, 64 not; 253 ok for subdomains, 254 not */
    char longname[300];
    memset(longname, 'a', sizeof longname);
    longname[63] = 0;
    ks_causes cs = {0};
    CU_ASSERT_EQUAL(ks_check_name(KS_NAME_DNS1035, "f", longname, &cs), 0);
    longname[63] = 'a';
    longname[64] = 0;
    CU_ASSERT_EQUAL(ks_check_name(KS_NAME_DNS1035, "f", longname, &cs), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(cs.c[0].msg, ": must be no more than 63 characters"));
    longname[64] = 'a';
    longname[253] = 0;
    CU_ASSERT_EQUAL(ks_check_name(KS_NAME_SUBDOMAIN, "f", longname, &cs), 0);
    longname[253] = 'a';
    longname[254] = 0;
    CU_ASSERT_EQUAL(ks_check_name(KS_NAME_SUBDOMAIN, "f", longname, &cs), 1);
    /* the kind decides */
    CU_ASSERT_EQUAL(ks_name_format("", "Service"), KS_NAME_DNS1035);
    CU_ASSERT_EQUAL(ks_name_format("", "Namespace"), KS_NAME_LABEL);
    CU_ASSERT_EQUAL(ks_name_format("", "Pod"), KS_NAME_SUBDOMAIN);
    CU_ASSERT_EQUAL(ks_name_format("ringmaster.dev", "TrainingJob"), KS_NAME_SUBDOMAIN);
    CU_ASSERT_EQUAL(ks_name_format("rbac.authorization.k8s.io", "Role"), KS_NAME_PATH_SEGMENT);
    /* the message: one cause plain, several in brackets, values quoted like Go's %q */
    memset(&cs, 0, sizeof cs);
    ks_check_name(KS_NAME_DNS1035, "metadata.name", "1job", &cs);
    char msg[2048];
    ks_causes_message(&cs, "Service", "1job", msg, sizeof msg);
    CU_ASSERT_STRING_EQUAL(msg,
                           "Service \"1job\" is invalid: metadata.name: Invalid value: \"1job\": a DNS-1035 "
                           "label must consist of lower case alphanumeric characters or '-', start with an "
                           "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  "
                           "or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')");
    CU_ASSERT_STRING_EQUAL(cs.c[0].type, "FieldValueInvalid");
    /* pods: hostname and subdomain are labels; annotations at most 256 KiB in total */
    cJSON *pod = cJSON_Parse("{\"metadata\":{\"annotations\":{}},\"spec\":{\"hostname\":\"a\\nb\","
                             "\"subdomain\":\"s\"}}");
    memset(&cs, 0, sizeof cs);
    CU_ASSERT_EQUAL(ks_check_pod_names(pod, &cs), 1);
    CU_ASSERT_STRING_EQUAL(cs.c[0].field, "spec.hostname");
    CU_ASSERT_PTR_NOT_NULL(strstr(cs.c[0].msg, "Invalid value: \"a\\x0ab\": ")); /* escaped, not raw */
    CU_ASSERT_EQUAL(ks_check_annotations(pod, &cs), 0);
    char *v = malloc(KS_ANNOTATIONS_MAX + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    memset(v, 'x', KS_ANNOTATIONS_MAX);
    v[KS_ANNOTATIONS_MAX - 1] = 0; /* key "k" (1) + value (max - 1) = the limit */
    cJSON *an = cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "annotations");
    cJSON_AddStringToObject(an, "k", v);
    CU_ASSERT_EQUAL(ks_check_annotations(pod, &cs), 0);
    cJSON_AddStringToObject(an, "l", "");
    CU_ASSERT_EQUAL(ks_check_annotations(pod, &cs), 1);
    CU_ASSERT_STRING_EQUAL(cs.c[cs.n - 1].type, "FieldValueTooLong");
    CU_ASSERT_STRING_EQUAL(cs.c[cs.n - 1].msg, "Too long: may not be more than 262144 bytes");
    ks_causes_message(&cs, "Pod", "p", msg, sizeof msg);
    CU_ASSERT(msg[strlen("Pod \"p\" is invalid: ")] == '[' && msg[strlen(msg) - 1] == ']');
    free(v);
    cJSON_Delete(pod);
}

void rm_suite_kubesim(void)
{
    static const rm_test_case cases[] = {
        {"label selectors (K4)", test_label_selectors},
        {"field selectors (K5)", test_field_selectors},
        {"merge patch RFC 7386", test_merge_patch},
        {"json patch RFC 6902", test_json_patch},
        {"strategic merge (pods)", test_strategic_merge},
        {"structural schema (L2)", test_schema},
        {"jsonpath subset", test_jsonpath},
        {"object names and metadata (G5)", test_names},
    };
    RM_ADD_SUITE("kubesim", NULL, NULL, cases);
}
