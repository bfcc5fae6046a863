/* test_kubesim_sched.c — kubesim's --node parsing and node ownership (tests/kubesim/sched.c), and
 * Volcano's enqueue order on an in-process store (no HTTP, no kubelet); the rest of the scheduling
 * is proven end to end by tests/e2e/69-operator-gang.sh and 69-operator-kueue.sh. */
#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include "tests/kubesim/kubesim.h"
#include "tests/unit/testutil.h"

static void test_node_parse(void)
{
    static const struct {
        const char *arg;
        bool ok;
        const char *name;
        int64_t cpu, mem, gpu, pods;
        const char *err;
    } t[] = {
        {"n1:cpu=8,memory=16Gi,gpu=4", true, "n1", 8000, 16LL * 1024 * 1024 * 1024 * 1000, 4000, 110000,
         NULL},
        {"n2:cpu=500m,nvidia.com/gpu=1,pods=3", true, "n2", 500, 0, 1000, 3000, NULL},
        {"bare", true, "bare", 0, 0, 0, 110000, NULL},
        {":cpu=1", false, NULL, 0, 0, 0, 0, "wants NAME"},
        {"n:cpu=lots", false, NULL, 0, 0, 0, 0, "is not RESOURCE=QUANTITY"},
        {"n:disk=1", false, NULL, 0, 0, 0, 0, "unknown resource disk"},
        {"n:cpu", false, NULL, 0, 0, 0, 0, "is not RESOURCE=QUANTITY"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        ks_node_spec n;
        char msg[256] = "";
        bool ok = ks_node_parse(t[i].arg, &n, msg, sizeof msg);
        CU_ASSERT_EQUAL(ok, t[i].ok);
        if (ok && t[i].ok) {
            CU_ASSERT_STRING_EQUAL(n.name, t[i].name);
            CU_ASSERT_EQUAL(n.cpu, t[i].cpu);
            CU_ASSERT_EQUAL(n.memory, t[i].mem);
            CU_ASSERT_EQUAL(n.gpu, t[i].gpu);
            CU_ASSERT_EQUAL(n.pods, t[i].pods);
        } else if (!ok && t[i].err) {
            if (!strstr(msg, t[i].err))
                fprintf(stderr, "%s: %s\n", t[i].arg, msg);
            CU_ASSERT_PTR_NOT_NULL(strstr(msg, t[i].err));
        }
    }
}

static void test_node_ours(void)
{
    static ks_server s; /* only opts is read */
    memset(&s, 0, sizeof s);
    CU_ASSERT_TRUE(ks_node_ours(&s, KS_NODE_NAME)); /* no --node: the one built-in node */
    CU_ASSERT_FALSE(ks_node_ours(&s, "other"));
    CU_ASSERT_FALSE(ks_node_ours(&s, NULL));
    char msg[128];
    CU_ASSERT_TRUE(ks_node_parse("a:cpu=1", &s.opts.nodes[0], msg, sizeof msg));
    CU_ASSERT_TRUE(ks_node_parse("b:cpu=1", &s.opts.nodes[1], msg, sizeof msg));
    s.opts.nnodes = 2;
    CU_ASSERT_TRUE(ks_node_ours(&s, "b"));
    CU_ASSERT_FALSE(ks_node_ours(&s, KS_NODE_NAME)); /* with --node it is not seeded */
}

/* --nodes N: KUBESIM_NETNS_NODES as netns.sh writes it, and every way it can disagree */
static void test_nodes_netns(void)
{
    static const struct {
        int n;
        const char *nodes[3];
        const char *env;
        bool ok;
        const char *err;
    } t[] = {
        {2, {NULL}, "rmks-n0-1=10.213.0.10 rmks-n1-1=10.213.0.11", true, NULL},
        {1, {NULL}, "  a.b_c-1=192.168.0.5\n", true, NULL},
        {2, {"big:gpu=4", "small:cpu=1", NULL}, "x=10.0.0.1 y=10.0.0.2", true, NULL},
        {2, {NULL}, NULL, false, "KUBESIM_NETNS_NODES is not set"},
        {2, {NULL}, "", false, "KUBESIM_NETNS_NODES is not set"},
        {2, {NULL}, "a=10.0.0.1", false, "names 1 namespaces"},
        {1, {NULL}, "a=10.0.0.1 b=10.0.0.2", false, "more than 1"},
        {1, {NULL}, "a=10.0.0.256", false, "is not an IPv4 address"},
        {1, {NULL}, "a=::1", false, "is not an IPv4 address"},
        {1, {NULL}, "10.0.0.1", false, "is not NETNS=IPV4"},
        {1, {NULL}, "=10.0.0.1", false, "is not NETNS=IPV4"},
        {1, {NULL}, "../../etc=10.0.0.1", false, "is not NETNS=IPV4"},
        {2, {"only:cpu=1", NULL}, "a=10.0.0.1 b=10.0.0.2", false, "1 --node given"},
        {0, {NULL}, "a=10.0.0.1", false, "wants 1 to 16"},
        {17, {NULL}, "a=10.0.0.1", false, "wants 1 to 16"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        static ks_opts o;
        memset(&o, 0, sizeof o);
        char msg[512] = "";
        for (int k = 0; t[i].nodes[k]; k++)
            CU_ASSERT_TRUE_FATAL(ks_node_parse(t[i].nodes[k], &o.nodes[o.nnodes++], msg, sizeof msg));
        bool ok = ks_nodes_netns(&o, t[i].n, t[i].env, false, msg, sizeof msg);
        CU_ASSERT_EQUAL(ok, t[i].ok);
        if (!ok) {
            if (!t[i].err || !strstr(msg, t[i].err))
                fprintf(stderr, "case %zu: %s\n", i, msg);
            CU_ASSERT_PTR_NOT_NULL(t[i].err ? strstr(msg, t[i].err) : NULL);
            CU_ASSERT_EQUAL(o.nodes_netns, 0);
            continue;
        }
        CU_ASSERT_EQUAL(o.nnodes, t[i].n);
        CU_ASSERT_EQUAL(o.nodes_netns, t[i].n);
    }
    /* what the kubelet and the Node objects read */
    static ks_server s;
    memset(&s, 0, sizeof s);
    char msg[512];
    CU_ASSERT_TRUE_FATAL(
        ks_nodes_netns(&s.opts, 2, "rmks-n0-7=10.213.0.10 rmks-n1-7=10.213.0.11", false, msg, sizeof msg));
    CU_ASSERT_STRING_EQUAL(s.opts.nodes[1].name, "node-1");
    CU_ASSERT_STRING_EQUAL(s.opts.nodes[1].netns, "rmks-n1-7");
    CU_ASSERT_STRING_EQUAL(s.opts.nodes[1].addr, "10.213.0.11");
    CU_ASSERT_EQUAL(s.opts.nodes[0].cpu, 32000);
    CU_ASSERT_EQUAL(s.opts.nodes[0].pods, 110000);
    CU_ASSERT_PTR_EQUAL(ks_node_find(&s, "node-1"), &s.opts.nodes[1]);
    CU_ASSERT_PTR_NULL(ks_node_find(&s, "node-2"));
    CU_ASSERT_PTR_NULL(ks_node_find(&s, NULL));
    CU_ASSERT_TRUE(ks_node_ours(&s, "node-0"));
    /* given --node specs keep their names and resources, in order */
    memset(&s, 0, sizeof s);
    CU_ASSERT_TRUE_FATAL(ks_node_parse("gpu-a:gpu=4", &s.opts.nodes[0], msg, sizeof msg));
    CU_ASSERT_TRUE_FATAL(ks_node_parse("gpu-b:gpu=2", &s.opts.nodes[1], msg, sizeof msg));
    s.opts.nnodes = 2;
    CU_ASSERT_TRUE_FATAL(ks_nodes_netns(&s.opts, 2, "x=10.0.0.1 y=10.0.0.2", false, msg, sizeof msg));
    CU_ASSERT_STRING_EQUAL(s.opts.nodes[1].name, "gpu-b");
    CU_ASSERT_EQUAL(s.opts.nodes[1].gpu, 2000);
    CU_ASSERT_STRING_EQUAL(s.opts.nodes[1].addr, "10.0.0.2");
    CU_ASSERT_STRING_EQUAL(s.opts.nodes[0].netns, "x");
    /* check_paths: a namespace that does not exist is named */
    memset(&s, 0, sizeof s);
    CU_ASSERT_FALSE(ks_nodes_netns(&s.opts, 1, "rm-no-such-netns-0=10.0.0.1", true, msg, sizeof msg));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "rm-no-such-netns-0 does not exist"));
}

/* ---- Volcano enqueue: every Inqueue group's reservation counts, whatever the groups' order ---- */
static int set_phase(cJSON *o, void *ud)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, "status");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "status"), "phase", ud);
    return 1;
}

static const char *pg_phase(ks_server *s, ks_kind *k, const char *name, char *buf, size_t cap)
{
    pthread_rwlock_rdlock(&s->lock);
    ks_obj *o = ks_table_get(k->tab, "default", name);
    const char *ph = o ? ks_sget(cJSON_GetObjectItemCaseSensitive(o->j, "status"), "phase") : NULL;
    snprintf(buf, cap, "%s", ph ? ph : "");
    pthread_rwlock_unlock(&s->lock);
    return buf;
}

static int bound_pods(ks_server *s, const char *job)
{
    ks_kind *pk = ks_core_kind(s, KS_T_POD);
    int n = 0;
    char name[64];
    pthread_rwlock_rdlock(&s->lock);
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s-worker-%d", job, i);
        ks_obj *o = ks_table_get(pk->tab, "default", name);
        n += o && ks_sget(cJSON_GetObjectItemCaseSensitive(o->j, "spec"), "nodeName") != NULL;
    }
    pthread_rwlock_unlock(&s->lock);
    return n;
}

static void add_gang(ks_server *s, ks_kind *pgk, const char *job, bool pods)
{
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"apiVersion\":\"scheduling.volcano.sh/"
             "v1beta1\",\"kind\":\"PodGroup\",\"metadata\":{\"name\":\"%s\"},"
             "\"spec\":{\"minMember\":4,\"minResources\":{\"cpu\":\"4\"}}}",
             job);
    CU_ASSERT_EQUAL_FATAL(ks_internal_create(s, pgk, "default", cJSON_Parse(buf)), RM_OK);
    for (int i = 0; pods && i < 4; i++) {
        snprintf(buf, sizeof buf,
                 "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s-worker-%d\","
                 "\"annotations\":{\"scheduling.k8s.io/"
                 "group-name\":\"%s\"}},\"spec\":{\"schedulerName\":\"volcano\","
                 "\"containers\":[{\"name\":\"worker\",\"image\":\"w\",\"resources\":{\"requests\":{\"cpu\":"
                 "\"1\"}}}]}}",
                 job, i, job);
        CU_ASSERT_EQUAL_FATAL(ks_internal_create(s, ks_core_kind(s, KS_T_POD), "default", cJSON_Parse(buf)),
                              RM_OK);
    }
}

/* Two nodes with room for one gang of 4. gang-b was enqueued first (it holds 4 CPUs; its pods
 * exist, unbound); gang-a, sorted before it (same second, name order), is new. One pass must bind
 * gang-b and leave gang-a Pending: the e2e 69 run where gang-a went "" -> Inqueue beside it. Once
 * gang-b's pods Succeeded, gang-b is Completed and then gang-a enqueued. */
static void test_volcano_enqueue_order(void)
{
    static ks_server s;
    static ks_opts o;
    memset(&o, 0, sizeof o);
    char msg[128], ph[32];
    CU_ASSERT_TRUE_FATAL(ks_node_parse("n1:cpu=2,memory=8Gi", &o.nodes[0], msg, sizeof msg));
    CU_ASSERT_TRUE_FATAL(ks_node_parse("n2:cpu=2,memory=8Gi", &o.nodes[1], msg, sizeof msg));
    o.nnodes = 2;
    CU_ASSERT_EQUAL_FATAL(ks_server_init(&s, &o), RM_OK);
    ks_kind proto;
    memset(&proto, 0, sizeof proto);
    snprintf(proto.group, sizeof proto.group, "scheduling.volcano.sh");
    snprintf(proto.version, sizeof proto.version, "v1beta1");
    snprintf(proto.resource, sizeof proto.resource, "podgroups");
    snprintf(proto.singular, sizeof proto.singular, "podgroup");
    snprintf(proto.kind, sizeof proto.kind, "PodGroup");
    snprintf(proto.list_kind, sizeof proto.list_kind, "PodGroupList");
    proto.namespaced = proto.served = proto.has_status = proto.storage = true;
    proto.type = KS_T_CR;
    pthread_rwlock_wrlock(&s.lock);
    ks_kind *pgk = ks_kind_add(&s, &proto);
    pthread_rwlock_unlock(&s.lock);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pgk);

    add_gang(&s, pgk, "gang-a", false); /* created first: the pass looks at it first */
    add_gang(&s, pgk, "gang-b", true);
    CU_ASSERT_EQUAL(ks_internal_update(&s, pgk, "default", "gang-b", set_phase, "Inqueue"), RM_OK);
    ks_sched_tick(&s);
    CU_ASSERT_STRING_EQUAL(pg_phase(&s, pgk, "gang-a", ph, sizeof ph), "Pending");
    CU_ASSERT_STRING_EQUAL(pg_phase(&s, pgk, "gang-b", ph, sizeof ph), "Inqueue");
    CU_ASSERT_EQUAL(bound_pods(&s, "gang-b"), 4);
    ks_sched_tick(&s); /* gang-b's pods now count on the nodes: still no room */
    CU_ASSERT_STRING_EQUAL(pg_phase(&s, pgk, "gang-a", ph, sizeof ph), "Pending");

    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "gang-b-worker-%d", i);
        CU_ASSERT_EQUAL(
            ks_internal_update(&s, ks_core_kind(&s, KS_T_POD), "default", name, set_phase, "Succeeded"),
            RM_OK);
    }
    ks_sched_tick(&s); /* gang-b was still Inqueue when the pass began: Completed at its end */
    CU_ASSERT_STRING_EQUAL(pg_phase(&s, pgk, "gang-b", ph, sizeof ph), "Completed");
    ks_sched_tick(&s);
    CU_ASSERT_STRING_EQUAL(pg_phase(&s, pgk, "gang-a", ph, sizeof ph), "Inqueue");
    ks_server_fini(&s);
}

void rm_suite_kubesim_sched(void)
{
    static const rm_test_case cases[] = {{"node_parse", test_node_parse},
                                         {"node_ours", test_node_ours},
                                         {"nodes_netns", test_nodes_netns},
                                         {"volcano_enqueue_order", test_volcano_enqueue_order}};
    RM_ADD_SUITE("kubesim_sched", NULL, NULL, cases);
}
