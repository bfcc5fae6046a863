/* test_faults.c — RINGMASTER_FAULT parsing (good, several, bad kinds/keys/values) and the
 * once-per-job rule: a fault fires once, and a fresh process (new rm_faults) sharing the marker
 * folder never fires it again. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/unit/testutil.h"
#include "common/faults.h"
#include "common/trainingjob.h"

static void test_parse(void)
{
    rm_faults f;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_faults_parse(NULL, &f, &e), RM_OK);
    CU_ASSERT_EQUAL(f.n, 0);
    CU_ASSERT_EQUAL(rm_faults_parse("", &f, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_faults_parse("exit:rank=1:step=300", &f, &e), RM_OK);
    CU_ASSERT_EQUAL(f.n, 1);
    CU_ASSERT_EQUAL(f.f[0].kind, RM_FAULT_EXIT);
    CU_ASSERT_EQUAL(f.f[0].rank, 1);
    CU_ASSERT_EQUAL(f.f[0].step, 300);
    CU_ASSERT_EQUAL(rm_faults_parse("exit:rank=1:step=300; hang:step=100:rank=2;", &f, &e), RM_OK);
    CU_ASSERT_EQUAL(f.n, 2);
    CU_ASSERT_EQUAL(f.f[1].kind, RM_FAULT_HANG);
    CU_ASSERT_EQUAL(f.f[1].rank, 2);
    CU_ASSERT_EQUAL(f.f[1].step, 100);
    CU_ASSERT_FALSE(f.f[0].lost);
    /* node=lost (an exit whose replica cannot be recreated) */
    CU_ASSERT_EQUAL(rm_faults_parse("exit:rank=3:step=120:node=lost", &f, &e), RM_OK);
    CU_ASSERT_TRUE(f.f[0].lost);
    const char *bad_lost[] = {"hang:rank=1:step=3:node=lost", "exit:rank=1:step=3:node=gone",
                              "exit:role=ps:index=0:step=3:node=lost", "slow:rank=1:factor=2:node=lost"};
    for (size_t i = 0; i < sizeof bad_lost / sizeof *bad_lost; i++) {
        memset(&e, 0, sizeof e);
        CU_ASSERT_EQUAL(rm_faults_parse(bad_lost[i], &f, &e), RM_EINVAL);
        CU_ASSERT(strstr(e.msg, "node") != NULL);
    }
    const char *bad[] = {"boom:rank=1:step=3", "exit:rank=1",         "exit:step=3",
                         "exit:rank=x:step=3", "exit:rank=1:step=-4", "exit:rank=1:step=3:color=red",
                         "exit:rank1:step=3",  "exit:rank=1:step=",   "exit"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&e, 0, sizeof e);
        CU_ASSERT_EQUAL(rm_faults_parse(bad[i], &f, &e), RM_EINVAL);
        CU_ASSERT(strstr(e.msg, "RINGMASTER_FAULT") != NULL);
        CU_ASSERT_EQUAL(f.n, 0);
    }
}

/* node=lost: the marker names the replica index; another index is not lost */
static void test_lost_marker(void)
{
    char *dir = rm_test_tmpdir("lost");
    CU_ASSERT_FALSE(rm_faults_index_lost(dir, 2));
    CU_ASSERT_EQUAL(rm_faults_mark_lost(dir, "2"), 0);
    CU_ASSERT_TRUE(rm_faults_index_lost(dir, 2));
    CU_ASSERT_FALSE(rm_faults_index_lost(dir, 1));
    CU_ASSERT_FALSE(rm_faults_index_lost(NULL, 2));
    CU_ASSERT_EQUAL(rm_faults_mark_lost(dir, "../x"), -1);
    CU_ASSERT_EQUAL(rm_faults_mark_lost(NULL, "2"), -1);
    rm_test_tmpdir_free(&dir);
}

static void test_once(void)
{
    char *dir = rm_test_tmpdir("faults");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    rm_faults f;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_faults_parse("exit:rank=1:step=5;hang:rank=0:step=5", &f, &e), RM_OK);
    rm_faults_set_dir(&f, dir);
    CU_ASSERT_PTR_NULL(rm_faults_due(&f, 1, 4));
    CU_ASSERT_PTR_NULL(rm_faults_due(&f, 2, 5));
    const rm_fault *x = rm_faults_due(&f, 1, 5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_EQUAL(x->kind, RM_FAULT_EXIT);
    CU_ASSERT_PTR_NULL(rm_faults_due(&f, 1, 5)); /* once in memory */
    char marker[600];
    snprintf(marker, sizeof marker, "%s/.fault-0-fired", dir);
    struct stat st;
    CU_ASSERT_EQUAL(stat(marker, &st), 0);
    /* a replacement process: fresh state, same folder */
    rm_faults g;
    CU_ASSERT_EQUAL(rm_faults_parse("exit:rank=1:step=5;hang:rank=0:step=5", &g, &e), RM_OK);
    rm_faults_set_dir(&g, dir);
    CU_ASSERT_PTR_NULL(rm_faults_due(&g, 1, 5));
    const rm_fault *h = rm_faults_due(&g, 0, 5); /* the other fault is still armed */
    CU_ASSERT_PTR_NOT_NULL(h);
    if (h)
        CU_ASSERT_EQUAL(h->kind, RM_FAULT_HANG);
    /* without a folder: in-memory only */
    rm_faults m;
    CU_ASSERT_EQUAL(rm_faults_parse("exit:rank=0:step=1", &m, &e), RM_OK);
    CU_ASSERT_PTR_NOT_NULL(rm_faults_due(&m, 0, 1));
    CU_ASSERT_PTR_NULL(rm_faults_due(&m, 0, 1));
    rm_test_rmtree(dir);
    free(dir);
}

/* A fault due before the first checkpoint, when the checkpoint folder and its parents do not
 * exist yet (a fresh job on a fresh volume), still fires, and still only once. */
static void test_fires_before_folder_exists(void)
{
    char *dir = rm_test_tmpdir("faults-nodir");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/default/job", dir);
    rm_faults f;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_faults_parse("exit:rank=0:step=3", &f, &e), RM_OK);
    rm_faults_set_dir(&f, sub);
    CU_ASSERT_PTR_NOT_NULL(rm_faults_due(&f, 0, 3));
    rm_faults g;
    CU_ASSERT_EQUAL(rm_faults_parse("exit:rank=0:step=3", &g, &e), RM_OK);
    rm_faults_set_dir(&g, sub);
    CU_ASSERT_PTR_NULL(rm_faults_due(&g, 0, 3)); /* the replacement does not fire it again */
    rm_test_rmtree(dir);
    free(dir);
}

/* Specs against a job: what parses, and what can never fire there, each with the fragment its
 * message must carry (a missing key is named; a server index or rank the job lacks is refused). */
static void test_against_job(void)
{
    static const struct {
        const char *spec;
        bool ps_job;       /* 2 servers, 4 workers (max 6); else allreduce, 4 workers */
        const char *parse; /* NULL: parses */
        const char *job;   /* NULL: fits the job */
    } T[] = {
        {"hang:role=ps:index=1:step=40", true, NULL, NULL},
        {"exit:role=ps:index=0:step=1", true, NULL, NULL},
        {"exit:rank=5:step=3", true, NULL, NULL}, /* maxReplicas 6 */
        {"exit:rank=3:step=0", false, NULL, NULL},
        {"hang:role=ps:index=5:step=40", true, NULL,
         "has 2 parameter servers (spec.parameterServer.replicas; index 0..1)"},
        {"exit:role=ps:index=2:step=40", true, NULL, "fault 1 (exit:role=ps:index=2) can never fire"},
        {"exit:role=ps:index=0:step=40", false, NULL, "has no parameter servers"},
        {"exit:rank=0:step=1;exit:rank=6:step=3", true, NULL, "fault 2 (exit:rank=6) can never fire"},
        {"hang:rank=4:step=3", false, NULL, "at most 4 workers (spec.replicas/maxReplicas; rank 0..3)"},
        {"slow:rank=9:factor=2", false, NULL, "at most 4 workers"},
        {"exit:role=ps:index=1:step=0", true, "step=0 never fires for a server", NULL},
        {"hang:role=ps:index=1", true, "needs step= (the server's version", NULL},
        {"exit:rank=1", false, "needs step= (the worker's step)", NULL},
        {"exit:step=3", false, "needs rank= (a worker) or role=ps:index= (a server)", NULL},
        {"slow:factor=2", false, "needs rank= (the worker to slow)", NULL},
        {"slow:rank=1", false, "needs factor= (1..1000)", NULL},
        {"hang:role=ps:step=3", true, "role=ps goes with index=", NULL},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(T); i++) {
        rm_tj job;
        memset(&job, 0, sizeof job);
        job.name = "j";
        job.spec.replicas = 4;
        job.spec.max_replicas = T[i].ps_job ? 6 : 4;
        job.spec.strategy = T[i].ps_job ? RM_STRATEGY_PS : RM_STRATEGY_ALLREDUCE;
        job.spec.ps.replicas = T[i].ps_job ? 2 : 0;
        rm_faults f;
        rm_err e = {0};
        int rc = rm_faults_parse(T[i].spec, &f, &e);
        if (rc == RM_OK && !T[i].parse)
            rc = rm_faults_check_job(&f, &job, &e);
        const char *want = T[i].parse ? T[i].parse : T[i].job;
        if (want ? rc != RM_EINVAL || !strstr(e.msg, want) : rc != RM_OK)
            fprintf(stderr, "case %zu \"%s\": rc=%d msg=%s\n", i, T[i].spec, rc, e.msg);
        CU_ASSERT_EQUAL(rc, want ? RM_EINVAL : RM_OK);
        if (want) {
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "RINGMASTER_FAULT"));
        }
    }
}

void rm_suite_faults(void)
{
    static const rm_test_case cases[] = {{"parse", test_parse},
                                         {"once_per_job", test_once},
                                         {"fires_before_folder_exists", test_fires_before_folder_exists},
                                         {"lost_marker", test_lost_marker},
                                         {"against the job", test_against_job}};
    RM_ADD_SUITE("faults", NULL, NULL, cases);
}
