/* test_kubesim_sched.c — kubesim's --node parsing and node ownership (tests/kubesim/sched.c); the
 * scheduling itself is proven end to end by tests/e2e/69-operator-gang.sh and 69-operator-kueue.sh. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>
#include "tests/kubesim/kubesim.h"
#include "tests/unit/testutil.h"

static void test_node_parse(void)
{
    static const struct {
        const char *arg; bool ok; const char *name; int64_t cpu, mem, gpu, pods; const char *err;
    } t[] = {
        {"n1:cpu=8,memory=16Gi,gpu=4", true, "n1", 8000, 16LL * 1024 * 1024 * 1024 * 1000, 4000, 110000, NULL},
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
    static ks_server s;   /* only opts is read */
    memset(&s, 0, sizeof s);
    CU_ASSERT_TRUE(ks_node_ours(&s, KS_NODE_NAME));   /* no --node: the one built-in node */
    CU_ASSERT_FALSE(ks_node_ours(&s, "other"));
    CU_ASSERT_FALSE(ks_node_ours(&s, NULL));
    char msg[128];
    CU_ASSERT_TRUE(ks_node_parse("a:cpu=1", &s.opts.nodes[0], msg, sizeof msg));
    CU_ASSERT_TRUE(ks_node_parse("b:cpu=1", &s.opts.nodes[1], msg, sizeof msg));
    s.opts.nnodes = 2;
    CU_ASSERT_TRUE(ks_node_ours(&s, "b"));
    CU_ASSERT_FALSE(ks_node_ours(&s, KS_NODE_NAME));  /* with --node it is not seeded */
}

void rm_suite_kubesim_sched(void)
{
    static const rm_test_case cases[] = {{"node_parse", test_node_parse}, {"node_ours", test_node_ours}};
    RM_ADD_SUITE("kubesim_sched", NULL, NULL, cases);
}
