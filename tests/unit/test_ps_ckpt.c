/* test_ps_ckpt.c — the parameter servers' checkpoint folders (operator/ps_ckpt.h): the newest
 * version every shard holds, the refusal when they share none, the rollback and the fresh-run
 * clearing (docs/strategies.md#failure-semantics). Files are empty: only their names count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "operator/ps_ckpt.h"
#include "tests/unit/testutil.h"

static void touch(const char *dir, const char *sub, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/%s", dir, sub, name);
    FILE *f = fopen(p, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
}

static bool exists(const char *dir, const char *sub, const char *name)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s/%s", dir, sub, name);
    return access(p, F_OK) == 0;
}

static void test_common_rollback_clear(void)
{
    char *d = rm_test_tmpdir("psckpt");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int64_t v = -7;
    char msg[512];
    CU_ASSERT_EQUAL(rm_ps_ckpt_common(d, 2, &v, msg, sizeof msg), 0); /* nothing anywhere */
    CU_ASSERT_FALSE(rm_ps_ckpt_any(d));
    touch(d, "ps-0", "ckpt-000000000020.rmck");
    touch(d, "ps-0", "ckpt-000000000040.rmck");
    touch(d, "ps-0", "ckpt-000000000047.rmck"); /* the survivor's SIGTERM checkpoint */
    touch(d, "ps-1", "ckpt-000000000020.rmck");
    touch(d, "ps-1", "ckpt-000000000040-1.rmck"); /* a second file of one step counts too */
    touch(d, "ps-1", "ckpt-garbage.rmck");        /* no version: ignored */
    CU_ASSERT_TRUE(rm_ps_ckpt_any(d));
    CU_ASSERT_EQUAL(rm_ps_ckpt_common(d, 2, &v, msg, sizeof msg), 1);
    CU_ASSERT_EQUAL(v, 40);
    /* a third shard without a checkpoint: no common version, and the message names the folders */
    CU_ASSERT_EQUAL(rm_ps_ckpt_common(d, 3, &v, msg, sizeof msg), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "/ps-0: newest 47"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "/ps-2: newest none"));
    /* rollback to 40 removes only what is newer */
    CU_ASSERT_EQUAL(rm_ps_ckpt_rollback(d, 2, 40), 1);
    CU_ASSERT_FALSE(exists(d, "ps-0", "ckpt-000000000047.rmck"));
    CU_ASSERT_TRUE(exists(d, "ps-0", "ckpt-000000000040.rmck"));
    CU_ASSERT_TRUE(exists(d, "ps-1", "ckpt-000000000040-1.rmck"));
    /* a rollback to nothing removes every shard checkpoint */
    CU_ASSERT_EQUAL(rm_ps_ckpt_rollback(d, 2, -1), 4);
    CU_ASSERT_EQUAL(rm_ps_ckpt_common(d, 2, &v, msg, sizeof msg), 0);
    /* a fresh run clears every server's state, L-BFGS files and fault markers included */
    touch(d, "ps-0", "ckpt-000000000020.rmck");
    touch(d, "ps-0", "lbfgs-coordinator");
    touch(d, "ps-0", "lbfgs-vectors");
    touch(d, "ps-1", ".fault-ps1-fired");
    touch(d, "ps-1", ".tmp-ckpt-000000000020.1.x");
    touch(d, "ps-1", "notes.txt");           /* not the servers': kept */
    CU_ASSERT_EQUAL(rm_ps_ckpt_clear(d), 6); /* ckpt-garbage.rmck matches the pattern too */
    CU_ASSERT_TRUE(exists(d, "ps-1", "notes.txt"));
    CU_ASSERT_FALSE(rm_ps_ckpt_any(d));
    rm_test_rmtree(d);
    free(d);
}

void rm_suite_ps_ckpt(void);
void rm_suite_ps_ckpt(void)
{
    static const rm_test_case cases[] = {
        {"common_version_rollback_and_clear", test_common_rollback_clear},
    };
    RM_ADD_SUITE("ps_ckpt", NULL, NULL, cases);
}
