/* test_kubesim_gc.c — kubesim's garbage collector (tests/kubesim/gc.c, rule J4) on an in-process
 * store (no HTTP, no kubelet): background, foreground and cross-namespace (J5) collection, and a
 * pass that costs what a change concerns rather than the whole store (docs/operator-scale.md,
 * "kubesim's garbage collector, and a resync that takes one worker"). Over HTTP, with kubectl's
 * cascading deletes: tests/e2e/20-kubesim-kubectl.sh and 23-kubesim-api.sh. */
#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include "tests/kubesim/kubesim.h"
#include "tests/unit/testutil.h"

#define NOWNERS 200

static void uid_of(ks_server *s, ks_kind *k, const char *ns, const char *name, char *out, size_t cap)
{
    out[0] = 0;
    pthread_rwlock_rdlock(&s->lock);
    ks_obj *o = ks_table_get(k->tab, ns, name);
    const char *u = o ? ks_sget(cJSON_GetObjectItemCaseSensitive(o->j, "metadata"), "uid") : NULL;
    snprintf(out, cap, "%s", u ? u : "");
    pthread_rwlock_unlock(&s->lock);
}

static bool exists(ks_server *s, ks_kind *k, const char *ns, const char *name)
{
    pthread_rwlock_rdlock(&s->lock);
    bool e = ks_table_get(k->tab, ns, name) != NULL;
    pthread_rwlock_unlock(&s->lock);
    return e;
}

static void add_owner(ks_server *s, const char *ns, const char *name, char *uid, size_t cap)
{
    char buf[256];
    snprintf(buf, sizeof buf, "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"%s\"}}",
             name);
    ks_kind *cm = ks_core_kind(s, KS_T_CONFIGMAP);
    CU_ASSERT_EQUAL_FATAL(ks_internal_create(s, cm, ns, cJSON_Parse(buf)), RM_OK);
    uid_of(s, cm, ns, name, uid, cap);
    CU_ASSERT_FATAL(uid[0] != 0);
}

/* An unscheduled pod (its deletion is immediate) owned by owner_uid. */
static void add_pod(ks_server *s, const char *ns, const char *name, const char *owner, const char *owner_uid,
                    bool block)
{
    char buf[768];
    snprintf(
        buf, sizeof buf,
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\",\"ownerReferences\":"
        "[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"%s\",\"uid\":\"%s\",\"controller\":true,"
        "\"blockOwnerDeletion\":%s}]},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}",
        name, owner, owner_uid, block ? "true" : "false");
    CU_ASSERT_EQUAL_FATAL(ks_internal_create(s, ks_core_kind(s, KS_T_POD), ns, cJSON_Parse(buf)), RM_OK);
}

static int drain(ks_server *s)
{
    int n = 0;
    while (n < 20 && ks_gc_pass(s))
        n++;
    return n;
}

static void test_gc(void)
{
    static ks_server s;
    static ks_opts o;
    memset(&o, 0, sizeof o);
    o.no_kubelet = true;
    CU_ASSERT_EQUAL_FATAL(ks_server_init(&s, &o), RM_OK);
    ks_kind *pod = ks_core_kind(&s, KS_T_POD), *cm = ks_core_kind(&s, KS_T_CONFIGMAP);
    char uid[64], name[64], owner[64];
    /* a fleet: NOWNERS owners with 2 pods each, as the operator's jobs own their pods */
    for (int i = 0; i < NOWNERS; i++) {
        snprintf(owner, sizeof owner, "job-%d", i);
        add_owner(&s, "default", owner, uid, sizeof uid);
        for (int w = 0; w < 2; w++) {
            snprintf(name, sizeof name, "job-%d-worker-%d", i, w);
            add_pod(&s, "default", name, owner, uid, false);
        }
    }
    drain(&s); /* the new dependents, each decided on once */
    CU_ASSERT_TRUE(exists(&s, pod, "default", "job-7-worker-1"));

    /* deleting a pod that owns nothing: a pass looks at its owner only, not at every object
     * (a full scan held the store's lock for ~1 s at 130,000 objects after every such delete) */
    unsigned long long e0 = ks_gc_examined(&s);
    CU_ASSERT_EQUAL(ks_internal_delete(&s, pod, "default", "job-3-worker-0", NULL, -1), RM_OK);
    CU_ASSERT_FALSE(exists(&s, pod, "default", "job-3-worker-0"));
    drain(&s);
    CU_ASSERT(ks_gc_examined(&s) - e0 <= 2);
    CU_ASSERT_TRUE(exists(&s, pod, "default", "job-3-worker-1"));

    /* background: the owner goes, its pods follow, nobody else's */
    e0 = ks_gc_examined(&s);
    CU_ASSERT_EQUAL(ks_internal_delete(&s, cm, "default", "job-5", NULL, -1), RM_OK);
    CU_ASSERT_TRUE(exists(&s, pod, "default", "job-5-worker-0"));
    drain(&s);
    CU_ASSERT_FALSE(exists(&s, pod, "default", "job-5-worker-0"));
    CU_ASSERT_FALSE(exists(&s, pod, "default", "job-5-worker-1"));
    CU_ASSERT_TRUE(exists(&s, pod, "default", "job-4-worker-0"));
    CU_ASSERT_TRUE(exists(&s, pod, "default", "job-6-worker-1"));
    CU_ASSERT(ks_gc_examined(&s) - e0 <= 8);

    /* a dependent whose owner never existed, or lives in another namespace (J5) */
    add_pod(&s, "default", "stray", "nobody", "00000000-0000-0000-0000-000000000000", false);
    uid_of(&s, cm, "default", "job-9", uid, sizeof uid);
    add_pod(&s, "kube-system", "elsewhere", "job-9", uid, false);
    drain(&s);
    CU_ASSERT_FALSE(exists(&s, pod, "default", "stray"));
    CU_ASSERT_FALSE(exists(&s, pod, "kube-system", "elsewhere"));
    CU_ASSERT_TRUE(exists(&s, pod, "default", "job-9-worker-0"));

    /* foreground: the dependents go first, then the owner's foregroundDeletion finalizer */
    add_owner(&s, "default", "fg", uid, sizeof uid);
    add_pod(&s, "default", "fg-a", "fg", uid, true);
    add_pod(&s, "default", "fg-b", "fg", uid, true);
    drain(&s);
    CU_ASSERT_EQUAL(ks_internal_delete(&s, cm, "default", "fg", "Foreground", -1), RM_OK);
    CU_ASSERT_TRUE(exists(&s, cm, "default", "fg")); /* held by foregroundDeletion */
    drain(&s);
    CU_ASSERT_FALSE(exists(&s, pod, "default", "fg-a"));
    CU_ASSERT_FALSE(exists(&s, pod, "default", "fg-b"));
    CU_ASSERT_FALSE(exists(&s, cm, "default", "fg"));

    /* a reset forgets the indexes with the objects */
    ks_store_reset(&s);
    CU_ASSERT_FALSE(ks_gc_pass(&s));
    ks_server_fini(&s);
}

void rm_suite_kubesim_gc(void)
{
    static const rm_test_case cases[] = {{"garbage collection (J4, J5)", test_gc}};
    RM_ADD_SUITE("kubesim_gc", NULL, NULL, cases);
}
