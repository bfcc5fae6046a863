/* Tests for common/ratelimit.h: the burst per window, the suppressed count carried to the next
 * line let through, and a clock that goes backwards starting a new window. */
#include "common/ratelimit.h"
#include "tests/unit/testutil.h"

static void test_window_and_suppressed(void)
{
    rm_ratelimit rl = RM_RATELIMIT_INIT(3, 10.0);
    unsigned long sup = 99;
    int let = 0;
    for (int i = 0; i < 50; i++)
        let += rm_ratelimit_take(&rl, 100.0 + i * 0.1, &sup); /* 5 s of requests */
    CU_ASSERT_EQUAL(let, 3);
    CU_ASSERT_EQUAL(sup, 0); /* the three let through had nothing suppressed before */
    CU_ASSERT_FALSE(rm_ratelimit_take(&rl, 109.9, &sup));
    /* the next window's first line reports the 48 refused since the last one let through */
    CU_ASSERT_TRUE(rm_ratelimit_take(&rl, 110.0, &sup));
    CU_ASSERT_EQUAL(sup, 48);
    CU_ASSERT_TRUE(rm_ratelimit_take(&rl, 110.1, &sup));
    CU_ASSERT_EQUAL(sup, 0);
    /* a clock that jumps back starts afresh instead of refusing forever */
    CU_ASSERT_TRUE(rm_ratelimit_take(&rl, 110.2, NULL));
    CU_ASSERT_FALSE(rm_ratelimit_take(&rl, 110.3, NULL));
    CU_ASSERT_TRUE(rm_ratelimit_take(&rl, 50.0, &sup));
    CU_ASSERT_EQUAL(sup, 1);
}

void rm_suite_ratelimit(void);
void rm_suite_ratelimit(void)
{
    static const rm_test_case cases[] = {
        {"burst_window_and_suppressed_count", test_window_and_suppressed},
    };
    RM_ADD_SUITE("ratelimit", NULL, NULL, cases);
}
