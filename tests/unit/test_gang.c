/* test_gang.c — the gang-scheduling and Kueue cores (operator/gang.h) and their API fields, as
 * tables: quantities and a pod's effective requests against Kubernetes' own rules, the PodGroup
 * and Workload objects built for a set of jobs, the decisions of the PodGroup lifecycle and of
 * Kueue's Workload protocol, and schedulingPolicy / managedBy validation. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/json.h"
#include "common/quantity.h"
#include "common/trainingjob.h"
#include "operator/gang.h"
#include "tests/unit/testutil.h"

static void test_quantity(void)
{
    static const struct {
        const char *in;
        int rc;
        int64_t milli;
    } t[] = {
        {"500m", RM_OK, 500},
        {"2", RM_OK, 2000},
        {"1.5", RM_OK, 1500},
        {"0.1m", RM_OK, 1},
        {"1Gi", RM_OK, 1073741824000LL},
        {"1Ki", RM_OK, 1024000},
        {"128Mi", RM_OK, 134217728000LL},
        {"1e3", RM_OK, 1000000},
        {"4k", RM_OK, 4000000},
        {"100M", RM_OK, 100000000000LL},
        {"1.5Gi", RM_OK, 1610612736000LL},
        {"+3", RM_OK, 3000},
        {"0", RM_OK, 0},
        {"-1", RM_EINVAL, 0},
        {"abc", RM_EINVAL, 0},
        {"", RM_EINVAL, 0},
        {"1x", RM_EINVAL, 0},
        {"1E", RM_EINVAL, 0} /* 10^18 units: past int64 milli */,
        {"1e", RM_EINVAL, 0},
        {"1.2.3", RM_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int64_t m = -7;
        int rc = rm_quantity_milli(t[i].in, &m);
        if (rc != t[i].rc || (rc == RM_OK && m != t[i].milli))
            fprintf(stderr, "quantity %s: rc %d milli %lld\n", t[i].in, rc, (long long)m);
        CU_ASSERT_EQUAL(rc, t[i].rc);
        if (t[i].rc == RM_OK)
            CU_ASSERT_EQUAL(m, t[i].milli);
    }
    char b[64];
    CU_ASSERT_STRING_EQUAL(rm_quantity_format(1073741824000LL, b, sizeof b), "1Gi");
    CU_ASSERT_STRING_EQUAL(rm_quantity_format(1500, b, sizeof b), "1500m");
    CU_ASSERT_STRING_EQUAL(rm_quantity_format(4000, b, sizeof b), "4");
    CU_ASSERT_STRING_EQUAL(rm_quantity_format(1000 * 1000, b, sizeof b), "1000");
    CU_ASSERT_STRING_EQUAL(rm_quantity_format(4LL * 1024 * 1024 * 1024 * 1000, b, sizeof b), "4Gi");
}

/* PodRequests (k8s.io/component-helpers/resource): requests default to limits; containers add
 * up; each init container is a lower bound; sidecars (restartPolicy Always) add to both; then
 * overhead. Expected values worked out by hand from those rules. */
static void test_pod_requests(void)
{
    static const struct {
        const char *what, *spec;
        int rc;
        const char *cpu, *mem, *gpu;
    } t[] = {
        {"requests",
         "{\"containers\":[{\"resources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"}}}]}", RM_OK,
         "500m", "1Gi", NULL},
        {"limits only -> requests = limits (incl. extended)",
         "{\"containers\":[{\"resources\":{\"limits\":{\"cpu\":2,\"nvidia.com/gpu\":1}}}]}", RM_OK, "2", NULL,
         "1"},
        {"request below limit wins",
         "{\"containers\":[{\"resources\":{\"requests\":{\"cpu\":\"1\"},\"limits\":{\"cpu\":\"2\",\"memory\":"
         "\"2Gi\"}}}]}",
         RM_OK, "1", "2Gi", NULL},
        {"containers add up",
         "{\"containers\":[{\"resources\":{\"requests\":{\"cpu\":\"1\"}}},{\"resources\":{\"requests\":{"
         "\"cpu\":\"500m\",\"nvidia.com/gpu\":2}}}]}",
         RM_OK, "1500m", NULL, "2"},
        {"init max beats the sum",
         "{\"containers\":[{\"resources\":{\"requests\":{\"cpu\":\"1\",\"memory\":\"512Mi\"}}}],"
         "\"initContainers\":[{\"resources\":{\"requests\":{\"cpu\":\"2\",\"memory\":\"256Mi\"}}},{"
         "\"resources\":{\"requests\":{\"cpu\":\"500m\"}}}]}",
         RM_OK, "2", "512Mi", NULL},
        {"overhead after the max",
         "{\"containers\":[{\"resources\":{\"requests\":{\"cpu\":\"1\"}}}],"
         "\"initContainers\":[{\"resources\":{\"requests\":{\"cpu\":\"3\"}}}],\"overhead\":{\"cpu\":\"250m\","
         "\"memory\":\"120Mi\"}}",
         RM_OK, "3250m", "120Mi", NULL},
        {"sidecar adds to containers and later inits",
         "{\"containers\":[{\"resources\":{\"requests\":{\"cpu\":\"1\"}}}],"
         "\"initContainers\":[{\"restartPolicy\":\"Always\",\"resources\":{\"requests\":{\"cpu\":\"500m\"}}},"
         "{\"resources\":{\"requests\":{\"cpu\":\"2\"}}}]}",
         RM_OK, "2500m", NULL, NULL},
        {"sidecar only: sum wins",
         "{\"containers\":[{\"resources\":{\"requests\":{\"cpu\":\"4\"}}}],"
         "\"initContainers\":[{\"resources\":{\"requests\":{\"cpu\":\"1\"}}},{\"restartPolicy\":\"Always\","
         "\"resources\":{\"requests\":{\"cpu\":\"1\"}}}]}",
         RM_OK, "5", NULL, NULL},
        {"no resources", "{\"containers\":[{\"name\":\"w\"}]}", RM_OK, NULL, NULL, NULL},
        {"bad quantity", "{\"containers\":[{\"resources\":{\"limits\":{\"cpu\":\"lots\"}}}]}", RM_EINVAL,
         NULL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        cJSON *spec = cJSON_Parse(t[i].spec);
        CU_ASSERT_PTR_NOT_NULL_FATAL(spec);
        rm_reslist l;
        rm_err e = {0};
        int rc = rm_pod_requests(spec, &l, &e);
        if (rc != t[i].rc)
            fprintf(stderr, "%s: rc %d %s\n", t[i].what, rc, e.msg);
        CU_ASSERT_EQUAL(rc, t[i].rc);
        if (rc == RM_OK) {
            const char *want[3] = {t[i].cpu, t[i].mem, t[i].gpu};
            const char *names[3] = {"cpu", "memory", "nvidia.com/gpu"};
            for (int k = 0; k < 3; k++) {
                int64_t w = 0;
                if (want[k])
                    CU_ASSERT_EQUAL(rm_quantity_milli(want[k], &w), RM_OK);
                if (rm_reslist_get(&l, names[k]) != w)
                    fprintf(stderr, "%s: %s = %lld, want %s\n", t[i].what, names[k],
                            (long long)rm_reslist_get(&l, names[k]), want[k] ? want[k] : "0");
                CU_ASSERT_EQUAL(rm_reslist_get(&l, names[k]), w);
            }
        } else {
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.template.spec.containers[0].resources.limits"));
        }
        cJSON_Delete(spec);
    }
}

static int load_job(const char *js, rm_tj *tj, rm_err *e)
{
    cJSON *o = cJSON_Parse(js);
    if (!o)
        return RM_EINVAL;
    int rc = rm_tj_from_json(o, tj, e);
    cJSON_Delete(o);
    if (rc == RM_OK) {
        rm_tj_defaults(tj);
        rc = rm_tj_validate(tj, e);
    }
    return rc;
}

#define JOB(name, extra_meta, spec)                                                                       \
    "{\"apiVersion\":\"ringmaster.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"" name \
    "\",\"namespace\":\"ml\",\"uid\":\"uid-" name "\"" extra_meta "},\"spec\":{" spec "}}"
#define TMPL                                                                                             \
    "\"template\":{\"spec\":{\"containers\":[{\"name\":\"worker\",\"resources\":{\"requests\":{\"cpu\":" \
    "\"1\",\"memory\":\"1Gi\"},\"limits\":{\"nvidia.com/gpu\":1}}}]}}"

static const char *res_str(const cJSON *pg, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rm_json_path(pg, "spec.minResources"), name);
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static void test_podgroups(void)
{
    static const struct {
        const char *job;
        rm_gang_kind kind;
        int min_member;
        const char *queue, *prio, *cpu, *mem, *gpu;
        int timeout;
        const char *av;
    } t[] = {
        {JOB("a", "", "\"replicas\":4," TMPL), RM_GANG_VOLCANO, 4, "default", NULL, "4", "4Gi", "4", 0,
         "scheduling.volcano.sh/v1beta1"},
        {JOB("b", "",
             "\"replicas\":4,\"minReplicas\":2,\"maxReplicas\":6,"
             "\"runPolicy\":{\"schedulingPolicy\":{\"queue\":\"team-a\",\"priorityClass\":\"high\"}}," TMPL),
         RM_GANG_VOLCANO, 2, "team-a", "high", "2", "2Gi", "2", 0, "scheduling.volcano.sh/v1beta1"},
        {JOB("c", ",\"annotations\":{\"scheduling.volcano.sh/queue-name\":\"from-annotation\"}",
             "\"replicas\":3,\"runPolicy\":{\"schedulingPolicy\":{\"minResources\":{\"cpu\":10,\"memory\":"
             "\"3Gi\"}}}," TMPL),
         RM_GANG_VOLCANO, 3, "from-annotation", NULL, "10", "3Gi", "(none)", 0,
         "scheduling.volcano.sh/v1beta1"},
        {JOB("d", "",
             "\"replicas\":4,\"runPolicy\":{\"schedulingPolicy\":{\"queue\":\"q\",\"priorityClass\":\"p\","
             "\"scheduleTimeoutSeconds\":30}}," TMPL),
         RM_GANG_COSCHEDULING, 4, NULL, NULL, "4", "4Gi", "4", 30, "scheduling.x-k8s.io/v1alpha1"},
        {JOB("e", "", "\"replicas\":2"), RM_GANG_COSCHEDULING, 2, NULL, NULL, "(none)", "(none)", "(none)", 0,
         "scheduling.x-k8s.io/v1alpha1"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rm_tj tj;
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(load_job(t[i].job, &tj, &e), RM_OK);
        cJSON *pg = rm_gang_podgroup(&tj, t[i].kind, &e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(pg);
        const cJSON *v;
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(pg, "apiVersion")->valuestring, t[i].av);
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(pg, "kind")->valuestring, "PodGroup");
        CU_ASSERT_STRING_EQUAL(rm_json_path(pg, "metadata.name")->valuestring, tj.name);
        CU_ASSERT_STRING_EQUAL(rm_json_path(pg, "metadata.namespace")->valuestring, "ml");
        v = rm_json_path(pg, "metadata.ownerReferences[0]");
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(v, "kind")->valuestring, "TrainingJob");
        CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(v, "uid")->valuestring, tj.uid);
        CU_ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(v, "controller")));
        CU_ASSERT_EQUAL(rm_json_path(pg, "spec.minMember")->valueint, t[i].min_member);
        v = rm_json_path(pg, "spec.queue");
        if (t[i].queue) {
            CU_ASSERT_STRING_EQUAL(v ? v->valuestring : "", t[i].queue);
        } else {
            CU_ASSERT_PTR_NULL(v); /* coscheduling has no queue field */
        }
        v = rm_json_path(pg, "spec.priorityClassName");
        if (t[i].prio) {
            CU_ASSERT_STRING_EQUAL(v ? v->valuestring : "", t[i].prio);
        } else {
            CU_ASSERT_PTR_NULL(v);
        }
        if (t[i].kind == RM_GANG_VOLCANO)
            CU_ASSERT_EQUAL(rm_json_path(pg, "spec.minTaskMember.worker")->valueint, t[i].min_member);
        CU_ASSERT_STRING_EQUAL(res_str(pg, "cpu"), t[i].cpu);
        CU_ASSERT_STRING_EQUAL(res_str(pg, "memory"), t[i].mem);
        CU_ASSERT_STRING_EQUAL(res_str(pg, "nvidia.com/gpu"), t[i].gpu);
        v = rm_json_path(pg, "spec.scheduleTimeoutSeconds");
        CU_ASSERT_EQUAL(v ? v->valueint : 0, t[i].timeout);
        /* the same spec does not differ; another minMember does; "4" == "4000m" */
        cJSON *same = cJSON_Duplicate(pg, 1);
        CU_ASSERT_FALSE(rm_gang_podgroup_differs(same, pg));
        cJSON *mr = rm_json_path(same, "spec.minResources")
                        ? cJSON_GetObjectItem(cJSON_GetObjectItem(same, "spec"), "minResources")
                        : NULL;
        if (mr && cJSON_GetObjectItem(mr, "cpu") && !strcmp(t[i].cpu, "4")) {
            cJSON_ReplaceItemInObject(mr, "cpu", cJSON_CreateString("4000m"));
            CU_ASSERT_FALSE(rm_gang_podgroup_differs(same, pg));
        }
        cJSON_ReplaceItemInObject(cJSON_GetObjectItem(same, "spec"), "minMember", cJSON_CreateNumber(99));
        CU_ASSERT_TRUE(rm_gang_podgroup_differs(same, pg));
        cJSON_Delete(same);
        /* elastic resize: replicas up to maxReplicas leaves minMember and minResources alone */
        if (tj.spec.max_replicas > tj.spec.replicas) {
            tj.spec.replicas = tj.spec.max_replicas;
            cJSON *pg2 = rm_gang_podgroup(&tj, t[i].kind, &e);
            CU_ASSERT_FALSE(rm_gang_podgroup_differs(pg2, pg));
            cJSON_Delete(pg2);
        }
        cJSON_Delete(pg);
        rm_tj_free(&tj);
    }
}

static void test_decorate(void)
{
    rm_tj tj;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(
        load_job(
            JOB("j", "", "\"replicas\":2,\"runPolicy\":{\"schedulingPolicy\":{\"priorityClass\":\"high\"}}"),
            &tj, &e),
        RM_OK);
    cJSON *pod = cJSON_Parse("{\"metadata\":{\"name\":\"j-worker-0\",\"labels\":{\"x\":\"y\"}},\"spec\":{}}");
    CU_ASSERT_FALSE(rm_gang_decorate_pod(pod, &tj, RM_GANG_VOLCANO, NULL));
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.schedulerName")->valuestring, "volcano");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.priorityClassName")->valuestring, "high");
    const cJSON *a = rm_json_path(pod, "metadata.annotations");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(a, "scheduling.k8s.io/group-name")->valuestring, "j");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(a, "volcano.sh/task-spec")->valuestring, "worker");
    cJSON_Delete(pod);
    pod = cJSON_Parse("{\"metadata\":{\"name\":\"j-worker-0\"},\"spec\":{\"priorityClassName\":\"mine\"}}");
    CU_ASSERT_FALSE(rm_gang_decorate_pod(pod, &tj, RM_GANG_COSCHEDULING, "sched-x"));
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.schedulerName")->valuestring, "sched-x");
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.priorityClassName")->valuestring,
                           "mine"); /* template's stays */
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(rm_json_path(pod, "metadata.labels"), "scheduling.x-k8s.io/pod-group")
            ->valuestring,
        "j");
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "metadata.annotations"));
    cJSON_Delete(pod);
    pod = cJSON_Parse("{\"metadata\":{},\"spec\":{\"schedulerName\":\"my-sched\"}}");
    CU_ASSERT_TRUE(rm_gang_decorate_pod(pod, &tj, RM_GANG_COSCHEDULING, NULL)); /* foreign: kept */
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.schedulerName")->valuestring, "my-sched");
    cJSON_Delete(pod);
    pod = cJSON_Parse("{\"metadata\":{},\"spec\":{}}");
    CU_ASSERT_FALSE(rm_gang_decorate_pod(pod, &tj, RM_GANG_NONE, NULL));
    CU_ASSERT_PTR_NULL(rm_json_path(pod, "spec.schedulerName"));
    CU_ASSERT_STRING_EQUAL(rm_json_path(pod, "spec.priorityClassName")->valuestring, "high");
    cJSON_Delete(pod);
    rm_tj_free(&tj);
}

static void test_gang_decide(void)
{
    static const struct {
        rm_gang_kind kind;
        bool term, susp, invalid, exists, deleting;
        const char *phase;
        bool differs;
        bool create, update, del, hold;
    } t[] = {
        /* kind        term   susp   inval  exists del    phase        differs  create update del   hold */
        {RM_GANG_NONE, false, false, false, false, false, NULL, false, false, false, false, false},
        {RM_GANG_VOLCANO, false, false, false, false, false, NULL, false, true, false, false, true},
        {RM_GANG_VOLCANO, false, false, false, true, false, "", false, false, false, false, true},
        {RM_GANG_VOLCANO, false, false, false, true, false, "Pending", false, false, false, false, true},
        {RM_GANG_VOLCANO, false, false, false, true, false, "Inqueue", false, false, false, false, false},
        {RM_GANG_VOLCANO, false, false, false, true, false, "Running", true, false, true, false, false},
        {RM_GANG_VOLCANO, true, false, false, true, false, "Completed", false, false, false, true, false},
        {RM_GANG_VOLCANO, false, true, false, true, false, "Running", false, false, false, true, false},
        {RM_GANG_VOLCANO, false, true, false, false, false, NULL, false, false, false, false, false},
        {RM_GANG_VOLCANO, true, false, false, true, true, "Completed", false, false, false, false, false},
        {RM_GANG_VOLCANO, false, false, false, true, true, "Running", false, false, false, false, true},
        {RM_GANG_COSCHEDULING, false, false, false, true, false, "Pending", false, false, false, false,
         false},
        {RM_GANG_COSCHEDULING, false, false, false, false, false, NULL, false, true, false, false, true},
        {RM_GANG_COSCHEDULING, false, false, true, false, false, NULL, false, false, false, false, false},
        {RM_GANG_COSCHEDULING, true, false, false, true, false, "Finished", false, false, false, true, false},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rm_gang_in in = {t[i].kind,   t[i].term,     t[i].susp,  t[i].invalid,
                         t[i].exists, t[i].deleting, t[i].phase, t[i].differs};
        rm_gang_out o;
        rm_gang_decide(&in, &o);
        if (o.create_pg != t[i].create || o.update_pg != t[i].update || o.delete_pg != t[i].del ||
            o.hold_pods != t[i].hold)
            fprintf(stderr, "gang decide row %zu: %d %d %d %d\n", i, o.create_pg, o.update_pg, o.delete_pg,
                    o.hold_pods);
        CU_ASSERT_EQUAL(o.create_pg, t[i].create);
        CU_ASSERT_EQUAL(o.update_pg, t[i].update);
        CU_ASSERT_EQUAL(o.delete_pg, t[i].del);
        CU_ASSERT_EQUAL(o.hold_pods, t[i].hold);
    }
}

static void test_workload(void)
{
    rm_tj tj;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(
        load_job(JOB("k", ",\"labels\":{\"kueue.x-k8s.io/queue-name\":\"team-q\"}",
                     "\"replicas\":4,\"minReplicas\":2,\"maxReplicas\":4,"
                     "\"runPolicy\":{\"schedulingPolicy\":{\"priorityClass\":\"high\"}}," TMPL),
                 &tj, &e),
        RM_OK);
    CU_ASSERT_STRING_EQUAL(rm_kueue_queue_name(&tj), "team-q");
    cJSON *wl = rm_kueue_workload(&tj, "img", &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wl);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(wl, "apiVersion")->valuestring, "kueue.x-k8s.io/v1beta1");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(wl, "kind")->valuestring, "Workload");
    char name[300];
    CU_ASSERT_STRING_EQUAL(rm_json_path(wl, "metadata.name")->valuestring,
                           rm_kueue_workload_name(&tj, name, sizeof name));
    CU_ASSERT_EQUAL(strncmp(name, "trainingjob-k-", 14), 0);
    CU_ASSERT_EQUAL(strlen(name), 19u);
    CU_ASSERT_STRING_EQUAL(
        cJSON_GetObjectItem(rm_json_path(wl, "metadata.labels"), "kueue.x-k8s.io/job-uid")->valuestring,
        "uid-k");
    CU_ASSERT_TRUE(cJSON_IsTrue(rm_json_path(wl, "metadata.ownerReferences[0].controller")));
    CU_ASSERT_STRING_EQUAL(rm_json_path(wl, "spec.queueName")->valuestring, "team-q");
    CU_ASSERT_STRING_EQUAL(rm_json_path(wl, "spec.priorityClassName")->valuestring, "high");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(rm_json_path(wl, "spec.podSets")), 1);
    CU_ASSERT_STRING_EQUAL(rm_json_path(wl, "spec.podSets[0].name")->valuestring, "worker");
    CU_ASSERT_EQUAL(rm_json_path(wl, "spec.podSets[0].count")->valueint, 4);
    CU_ASSERT_EQUAL(rm_json_path(wl, "spec.podSets[0].minCount")->valueint, 2);
    CU_ASSERT_STRING_EQUAL(
        rm_json_path(wl, "spec.podSets[0].template.spec.containers[0].resources.requests.cpu")->valuestring,
        "1");
    /* another job without template or minReplicas: default container, no minCount */
    rm_tj tj2;
    CU_ASSERT_EQUAL_FATAL(
        load_job(JOB("m", ",\"labels\":{\"kueue.x-k8s.io/queue-name\":\"q\"}", "\"replicas\":3"), &tj2, &e),
        RM_OK);
    cJSON *wl2 = rm_kueue_workload(&tj2, "img:1", &e);
    CU_ASSERT_PTR_NULL(rm_json_path(wl2, "spec.podSets[0].minCount"));
    CU_ASSERT_PTR_NULL(rm_json_path(wl2, "spec.priorityClassName"));
    CU_ASSERT_STRING_EQUAL(
        rm_json_path(wl2, "spec.podSets[0].template.spec.containers[0].image")->valuestring, "img:1");
    cJSON_Delete(wl2);
    rm_tj_free(&tj2);
    /* no queue label: no Workload */
    CU_ASSERT_EQUAL_FATAL(load_job(JOB("n", "", "\"replicas\":1"), &tj2, &e), RM_OK);
    CU_ASSERT_PTR_NULL(rm_kueue_queue_name(&tj2));
    CU_ASSERT_PTR_NULL(rm_kueue_workload(&tj2, NULL, &e));
    rm_tj_free(&tj2);

    /* admission: 3 of 4 (partial), one flavor with node labels and a toleration */
    cJSON *job = cJSON_Parse(
        "{\"spec\":{\"replicas\":4,\"template\":{\"spec\":{\"nodeSelector\":{\"disk\":\"ssd\"}}}}}");
    cJSON *st = cJSON_Parse(
        "{\"admission\":{\"clusterQueue\":\"cq\",\"podSetAssignments\":[{\"name\":\"worker\",\"count\":3,"
        "\"flavors\":{\"cpu\":\"fast\"}}]}}");
    cJSON_AddItemToObject(wl, "status", st);
    cJSON *flv = cJSON_Parse(
        "[{\"metadata\":{\"name\":\"fast\"},\"spec\":{\"nodeLabels\":{\"pool\":\"fast\"},"
        "\"tolerations\":[{\"key\":\"fast\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]}}]");
    cJSON *p = rm_kueue_run_patch(cJSON_GetObjectItem(job, "spec"), wl, flv, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_TRUE(cJSON_IsFalse(rm_json_path(p, "spec.runPolicy.suspend")));
    CU_ASSERT_EQUAL(rm_json_path(p, "spec.replicas")->valueint, 3);
    CU_ASSERT_STRING_EQUAL(rm_json_path(p, "spec.template.spec.nodeSelector.pool")->valuestring, "fast");
    CU_ASSERT_STRING_EQUAL(rm_json_path(p, "spec.template.spec.nodeSelector.disk")->valuestring, "ssd");
    CU_ASSERT_STRING_EQUAL(rm_json_path(p, "spec.template.spec.tolerations[0].key")->valuestring, "fast");
    /* apply it (as the API server's merge patch would, here by hand) and check injection is seen
     * and undone */
    cJSON *jspec = cJSON_GetObjectItem(job, "spec");
    cJSON_ReplaceItemInObject(jspec, "replicas", cJSON_CreateNumber(3));
    cJSON *tsp = cJSON_GetObjectItem(cJSON_GetObjectItem(jspec, "template"), "spec");
    cJSON_AddStringToObject(cJSON_GetObjectItem(tsp, "nodeSelector"), "pool", "fast");
    cJSON_AddItemToObject(tsp, "tolerations",
                          cJSON_Duplicate(rm_json_path(p, "spec.template.spec.tolerations"), 1));
    CU_ASSERT_TRUE(rm_kueue_template_injected(jspec, wl));
    /* a Workload whose template had no nodeSelector: the whole injected one goes */
    cJSON *r0 = rm_kueue_restore_patch(jspec, wl);
    CU_ASSERT_TRUE(cJSON_IsNull(rm_json_path(r0, "spec.template.spec.nodeSelector")));
    cJSON_Delete(r0);
    /* the job's own disk=ssd was in the Workload's template too (it was copied from the job) */
    cJSON *wtsp = (cJSON *)rm_json_path(wl, "spec.podSets[0].template.spec");
    cJSON_AddItemToObject(wtsp, "nodeSelector", cJSON_Parse("{\"disk\":\"ssd\"}"));
    cJSON *r = rm_kueue_restore_patch(jspec, wl);
    CU_ASSERT_TRUE(cJSON_IsTrue(rm_json_path(r, "spec.runPolicy.suspend")));
    CU_ASSERT_EQUAL(rm_json_path(r, "spec.replicas")->valueint, 4);
    /* the Workload's template keeps disk=ssd: only the injected key goes */
    CU_ASSERT_TRUE(cJSON_IsNull(rm_json_path(r, "spec.template.spec.nodeSelector.pool")));
    CU_ASSERT_STRING_EQUAL(rm_json_path(r, "spec.template.spec.nodeSelector.disk")->valuestring, "ssd");
    CU_ASSERT_TRUE(cJSON_IsNull(rm_json_path(r, "spec.template.spec.tolerations")));
    cJSON_Delete(r);
    CU_ASSERT_EQUAL(rm_kueue_admitted_count(wl), 3);
    r = rm_kueue_replace_patch(jspec, wl); /* keeps the user's replicas, restores the rest */
    CU_ASSERT_PTR_NULL(rm_json_path(r, "spec.replicas"));
    CU_ASSERT_TRUE(cJSON_IsTrue(rm_json_path(r, "spec.runPolicy.suspend")));
    CU_ASSERT_TRUE(cJSON_IsNull(rm_json_path(r, "spec.template.spec.nodeSelector.pool")));
    cJSON_Delete(r);
    cJSON_Delete(p);
    cJSON_Delete(flv);
    cJSON_Delete(job);
    /* a job equal to its Workload is not injected */
    cJSON *plain =
        cJSON_Parse("{\"replicas\":4,\"template\":{\"spec\":{\"nodeSelector\":{\"disk\":\"ssd\"}}}}");
    CU_ASSERT_FALSE(rm_kueue_template_injected(plain, wl));
    cJSON_Delete(plain);
    plain = cJSON_Parse("{\"replicas\":4}"); /* lost the Workload's selector: differs */
    CU_ASSERT_TRUE(rm_kueue_template_injected(plain, wl));
    cJSON_Delete(plain);
    /* conditions */
    rm_kueue_set_condition(wl, "Admitted", true, "Admitted", "ok", "2026-01-01T00:00:00Z");
    CU_ASSERT_TRUE(rm_kueue_condition(wl, "Admitted"));
    rm_kueue_set_condition(wl, "Admitted", true, "Admitted", "ok", "2026-01-02T00:00:00Z");
    CU_ASSERT_STRING_EQUAL(rm_json_path(wl, "status.conditions[0].lastTransitionTime")->valuestring,
                           "2026-01-01T00:00:00Z");
    rm_kueue_set_condition(wl, "Admitted", false, "NoReservation", "gone", "2026-01-03T00:00:00Z");
    CU_ASSERT_FALSE(rm_kueue_condition(wl, "Admitted"));
    CU_ASSERT_STRING_EQUAL(rm_json_path(wl, "status.conditions[0].lastTransitionTime")->valuestring,
                           "2026-01-03T00:00:00Z");
    CU_ASSERT_FALSE(rm_kueue_condition(wl, "Finished"));
    cJSON_Delete(wl);
    rm_tj_free(&tj);
}

static void test_kueue_decide(void)
{
    static const struct {
        const char *what;
        bool term, succ, susp;
        int active;
        bool exists, admitted, evicted, finished, reserved, injected;
        rm_kueue_action act;
        bool hold;
        bool mismatch;
    } t[] = {
        {"new job: Workload, suspended", false, false, false, 0, false, false, false, false, false, false,
         RM_KUEUE_CREATE_WORKLOAD, true, false},
        {"new suspended job: Workload", false, false, true, 0, false, false, false, false, false, false,
         RM_KUEUE_CREATE_WORKLOAD, true, false},
        {"waiting for admission", false, false, true, 0, true, false, false, false, false, false,
         RM_KUEUE_NOTHING, false, false},
        {"unsuspended by hand, not admitted", false, false, false, 2, true, false, false, false, false, false,
         RM_KUEUE_SUSPEND, true, false},
        {"admitted: run", false, false, true, 0, true, true, false, false, true, false, RM_KUEUE_RUN, true,
         false},
        {"running admitted", false, false, false, 4, true, true, false, false, true, true, RM_KUEUE_NOTHING,
         false, false},
        {"evicted while running: suspend", false, false, false, 4, true, true, true, false, true, true,
         RM_KUEUE_SUSPEND, true, false},
        {"evicted, restore pending", false, false, true, 4, true, false, true, false, true, true,
         RM_KUEUE_SUSPEND, false, false},
        {"evicted, pods still going", false, false, true, 2, true, false, true, false, true, false,
         RM_KUEUE_NOTHING, false, false},
        {"evicted, no pod left: clear", false, false, true, 0, true, false, true, false, true, false,
         RM_KUEUE_CLEAR_ADMISSION, false, false},
        {"evicted, cleared: wait", false, false, true, 0, true, false, true, false, false, false,
         RM_KUEUE_NOTHING, false, false},
        {"succeeded: finish", true, true, false, 0, true, true, false, false, true, true, RM_KUEUE_FINISH,
         false, false},
        {"failed: finish", true, false, false, 0, true, true, false, false, true, true, RM_KUEUE_FINISH,
         false, false},
        {"finished already", true, true, false, 0, true, true, false, true, true, true, RM_KUEUE_NOTHING,
         false, false},
        {"finished job, no Workload", true, true, false, 0, false, false, false, false, false, false,
         RM_KUEUE_NOTHING, false, false},
        {"resized while admitted: replace", false, false, false, 4, true, true, false, false, true, true,
         RM_KUEUE_REPLACE, true, true},
        {"resized while evicted: eviction first", false, false, false, 4, true, true, true, false, true, true,
         RM_KUEUE_SUSPEND, true, true},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rm_kueue_in in = {t[i].term,
                          t[i].succ,
                          t[i].susp,
                          t[i].active,
                          t[i].exists,
                          t[i].admitted,
                          t[i].evicted,
                          t[i].finished,
                          t[i].reserved,
                          t[i].injected,
                          t[i].mismatch,
                          false,
                          0,
                          0};
        rm_kueue_out o;
        rm_kueue_decide(&in, &o);
        CU_ASSERT_EQUAL(o.pods_ready, -1); /* PodsReady False and nothing ready: unchanged */
        if (o.act != t[i].act || o.hold_pods != t[i].hold)
            fprintf(stderr, "kueue decide %s: act %d hold %d\n", t[i].what, o.act, o.hold_pods);
        CU_ASSERT_EQUAL(o.act, t[i].act);
        CU_ASSERT_EQUAL(o.hold_pods, t[i].hold);
    }
}

/* K7: PodsReady follows the admitted workers' readiness */
static void test_kueue_pods_ready(void)
{
    static const struct {
        bool term, susp, admitted, evicted, finished, wl_ready;
        int ready, count, want;
    } t[] = {
        {false, false, true, false, false, false, 4, 4, 1},  /* all ready: True */
        {false, false, true, false, false, false, 3, 4, -1}, /* not yet: stays False */
        {false, false, true, false, false, true, 4, 4, -1},  /* already True */
        {false, false, true, false, false, true, 3, 4, 0},   /* a worker lost readiness */
        {false, true, false, false, false, true, 0, 4, 0},   /* suspended */
        {false, false, true, true, false, true, 4, 4, 0},    /* evicted */
        {true, false, true, false, false, true, 0, 4, 0},    /* ended, not yet Finished */
        {true, false, true, false, true, true, 0, 4, -1},    /* Finished: left as it was */
        {false, false, true, false, false, false, 2, 2, 1},  /* partial admission: 2 of 4 */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rm_kueue_in in;
        memset(&in, 0, sizeof in);
        in.job_terminal = t[i].term;
        in.job_suspended = t[i].susp;
        in.wl_exists = true;
        in.wl_admitted = t[i].admitted;
        in.wl_evicted = t[i].evicted;
        in.wl_finished = t[i].finished;
        in.wl_quota_reserved = true;
        in.wl_pods_ready = t[i].wl_ready;
        in.ready_pods = t[i].ready;
        in.admitted_count = t[i].count;
        rm_kueue_out o;
        rm_kueue_decide(&in, &o);
        if (o.pods_ready != t[i].want)
            fprintf(stderr, "pods ready row %zu: %d want %d\n", i, o.pods_ready, t[i].want);
        CU_ASSERT_EQUAL(o.pods_ready, t[i].want);
    }
}

static void test_api(void)
{
    static const struct {
        const char *what, *job;
        int rc;
        const char *field;
    } t[] = {
        {"full policy",
         JOB("v", "",
             "\"managedBy\":\"kueue.x-k8s.io/multikueue\",\"runPolicy\":{\"schedulingPolicy\":"
             "{\"queue\":\"team-a\",\"priorityClass\":\"high-prio\",\"minResources\":{\"cpu\":\"8\",\"nvidia."
             "com/gpu\":2},"
             "\"scheduleTimeoutSeconds\":60}}"),
         RM_OK, NULL},
        {"bad quantity",
         JOB("v", "", "\"runPolicy\":{\"schedulingPolicy\":{\"minResources\":{\"cpu\":\"lots\"}}}"),
         RM_EINVAL, "spec.runPolicy.schedulingPolicy.minResources"},
        {"unknown field", JOB("v", "", "\"runPolicy\":{\"schedulingPolicy\":{\"minAvailable\":2}}"),
         RM_EINVAL, "spec.runPolicy.schedulingPolicy.minAvailable"},
        {"queue not a name", JOB("v", "", "\"runPolicy\":{\"schedulingPolicy\":{\"queue\":\"Team A\"}}"),
         RM_EINVAL, "spec.runPolicy.schedulingPolicy.queue"},
        {"priority class not a name",
         JOB("v", "", "\"runPolicy\":{\"schedulingPolicy\":{\"priorityClass\":\"-x\"}}"), RM_EINVAL,
         "spec.runPolicy.schedulingPolicy.priorityClass"},
        {"negative timeout",
         JOB("v", "", "\"runPolicy\":{\"schedulingPolicy\":{\"scheduleTimeoutSeconds\":-1}}"), RM_EINVAL,
         "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"},
        {"managedBy empty", JOB("v", "", "\"managedBy\":\"\""), RM_EINVAL, "spec.managedBy"},
        {"two managedBy disagree",
         JOB("v", "", "\"managedBy\":\"a/b\",\"runPolicy\":{\"managedBy\":\"c/d\"}"), RM_EINVAL,
         "spec.runPolicy.managedBy"},
        {"two managedBy agree", JOB("v", "", "\"managedBy\":\"a/b\",\"runPolicy\":{\"managedBy\":\"a/b\"}"),
         RM_OK, NULL},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rm_tj tj;
        memset(&tj, 0, sizeof tj);
        rm_err e = {0};
        int rc = load_job(t[i].job, &tj, &e);
        if (rc != t[i].rc || (t[i].field && !strstr(e.msg, t[i].field)))
            fprintf(stderr, "api %s: rc %d msg %s\n", t[i].what, rc, e.msg);
        CU_ASSERT_EQUAL(rc, t[i].rc);
        if (t[i].field)
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, t[i].field));
        if (rc == RM_OK && i == 0) {
            CU_ASSERT_STRING_EQUAL(rm_tj_managed_by(&tj), "kueue.x-k8s.io/multikueue");
            /* round trip through JSON keeps every field */
            cJSON *o = rm_tj_to_json(&tj);
            CU_ASSERT_STRING_EQUAL(rm_json_path(o, "spec.managedBy")->valuestring,
                                   "kueue.x-k8s.io/multikueue");
            CU_ASSERT_STRING_EQUAL(rm_json_path(o, "spec.runPolicy.schedulingPolicy.queue")->valuestring,
                                   "team-a");
            CU_ASSERT_EQUAL(
                rm_json_path(o, "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds")->valueint, 60);
            rm_tj back, cp;
            CU_ASSERT_EQUAL(rm_tj_from_json(o, &back, &e), RM_OK);
            CU_ASSERT_STRING_EQUAL(back.spec.sched.priority_class, "high-prio");
            CU_ASSERT_EQUAL(rm_tj_copy(&cp, &back), RM_OK);
            CU_ASSERT_STRING_EQUAL(cp.spec.sched.queue, "team-a");
            CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(cp.spec.sched.min_resources, "nvidia.com/gpu"));
            rm_tj_free(&cp);
            rm_tj_free(&back);
            cJSON_Delete(o);
        }
        rm_tj_free(&tj);
    }
}

void rm_suite_gang(void)
{
    static const rm_test_case cases[] = {
        {"quantity", test_quantity},
        {"pod_requests", test_pod_requests},
        {"podgroups", test_podgroups},
        {"decorate", test_decorate},
        {"gang_decide", test_gang_decide},
        {"workload", test_workload},
        {"kueue_decide", test_kueue_decide},
        {"kueue_pods_ready", test_kueue_pods_ready},
        {"api", test_api},
    };
    RM_ADD_SUITE("gang", NULL, NULL, cases);
}
