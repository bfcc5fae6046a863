/* Tests for common/admit.h, the rule for connections that have not proved the token
 * (docs/architecture.md#robustness): the per-source cap drops that source's oldest, the overall cap
 * the oldest of all, a newcomer from another source is never refused, and the handshake bound. */
#include "common/admit.h"
#include "tests/unit/testutil.h"

typedef struct entry {
    int fd;
    rm_admit_pending adm;
    char pad[13]; /* a caller's struct around the member: the stride must be honoured */
} entry;

static void test_per_source_then_overall(void)
{
    entry t[8];
    const char *why = NULL;
    /* 4 from source 7 (t0 = 10, 11, 12, 13), room below both caps */
    for (int i = 0; i < 4; i++)
        t[i] = (entry){.fd = i, .adm = {.src = 7, .t0 = 10.0 + i}};
    t[1].adm.t0 = 9.0; /* entry 1 is the oldest */
    CU_ASSERT_EQUAL(rm_admit_victim(&t[0].adm, sizeof t[0], 4, 7, 5, 8, &why), -1);
    /* a fifth from source 7 with per_src 4: its oldest goes */
    CU_ASSERT_EQUAL(rm_admit_victim(&t[0].adm, sizeof t[0], 4, 7, 4, 8, &why), 1);
    CU_ASSERT_STRING_EQUAL(why, "too many unfinished handshakes from this address");
    /* another source is not held to source 7's count */
    CU_ASSERT_EQUAL(rm_admit_victim(&t[0].adm, sizeof t[0], 4, 9, 4, 8, NULL), -1);
    /* table full (max 4): a newcomer from another source still gets in, the oldest of all goes */
    t[3].adm = (rm_admit_pending){.src = 9, .t0 = 1.0};
    why = NULL;
    CU_ASSERT_EQUAL(rm_admit_victim(&t[0].adm, sizeof t[0], 4, 5, 4, 4, &why), 3);
    CU_ASSERT_STRING_EQUAL(why, "too many unfinished handshakes");
    /* an empty table has room */
    CU_ASSERT_EQUAL(rm_admit_victim(&t[0].adm, sizeof t[0], 0, 5, 1, 1, NULL), -1);
}

static void test_handshake_bound(void)
{
    entry t[3] = {{.adm = {1, 100.0}}, {.adm = {1, 101.0}}, {.adm = {2, 100.5}}};
    double next = 1e9;
    CU_ASSERT_EQUAL(rm_admit_expired(&t[0].adm, sizeof t[0], 3, 100.0 + RM_ADMIT_HANDSHAKE_S - 0.01, &next),
                    -1);
    CU_ASSERT_DOUBLE_EQUAL(next, 100.0 + RM_ADMIT_HANDSHAKE_S, 1e-9);
    next = 1e9;
    CU_ASSERT_EQUAL(rm_admit_expired(&t[0].adm, sizeof t[0], 3, 100.6 + RM_ADMIT_HANDSHAKE_S, &next), 0);
    CU_ASSERT_DOUBLE_EQUAL(next, 101.0 + RM_ADMIT_HANDSHAKE_S, 1e-9);
    CU_ASSERT_EQUAL(rm_admit_expired(&t[1].adm, sizeof t[0], 2, 100.6 + RM_ADMIT_HANDSHAKE_S, NULL), 1);
    CU_ASSERT(RM_ADMIT_HANDSHAKE_S <= 5.0); /* "a short bound" */
}

void rm_suite_admit(void);
void rm_suite_admit(void)
{
    static const rm_test_case cases[] = {
        {"per_source_then_overall_oldest_goes", test_per_source_then_overall},
        {"handshake_bound", test_handshake_bound},
    };
    RM_ADD_SUITE("admit", NULL, NULL, cases);
}
