/* Tests for common/grid.h (docs/models-and-data.md, "Tensor parallelism"): the rank placement
 * r = (d·P + p)·T + t as a table, and, for every T, P, D whose product is one of a few worlds,
 * every rank's coordinates and its tensor, pipeline and data-parallel groups: each group has the
 * axis' size, lists ranks that differ from this one on that axis only, in coordinate order, and
 * the groups along one axis partition the world. */
#include "common/grid.h"
#include "tests/unit/testutil.h"
#include <string.h>

static void test_table(void)
{
    static const struct {
        int rank, world, T, P, t, p, d;
        int tg[4], pg[4], dg[4]; /* the groups (first 4 members) */
    } c[] = {
        /* T = 2, P = 1, D = 2: tensor pairs {0,1} {2,3}; data groups {0,2} {1,3} */
        {0, 4, 2, 1, 0, 0, 0, {0, 1}, {0}, {0, 2}},
        {1, 4, 2, 1, 1, 0, 0, {0, 1}, {1}, {1, 3}},
        {3, 4, 2, 1, 1, 0, 1, {2, 3}, {3}, {1, 3}},
        /* T = 2, P = 2, D = 2: rank 5 = (1·2 + 0)·2 + 1 */
        {5, 8, 2, 2, 1, 0, 1, {4, 5}, {5, 7}, {1, 5}},
        {6, 8, 2, 2, 0, 1, 1, {6, 7}, {4, 6}, {2, 6}},
        /* T = 1: the pipeline's r = d·P + p */
        {3, 4, 1, 2, 0, 1, 1, {3}, {2, 3}, {1, 3}},
        /* T = 4, D = 1 */
        {2, 4, 4, 1, 2, 0, 0, {0, 1, 2, 3}, {2}, {2}},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(c); i++) {
        rm_grid_place pl;
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_grid_place_of(c[i].rank, c[i].world, c[i].T, c[i].P, &pl, &e), RM_OK);
        CU_ASSERT_EQUAL(pl.t, c[i].t);
        CU_ASSERT_EQUAL(pl.p, c[i].p);
        CU_ASSERT_EQUAL(pl.d, c[i].d);
        CU_ASSERT_EQUAL(pl.D, c[i].world / (c[i].T * c[i].P));
        const int *want[3] = {c[i].tg, c[i].pg, c[i].dg};
        for (int a = 0; a < 3; a++) {
            int got[64];
            int n = rm_grid_group(&pl, (rm_grid_axis)a, got, 64);
            CU_ASSERT_EQUAL(n, a == 0 ? pl.T : a == 1 ? pl.P : pl.D);
            for (int k = 0; k < n && k < 4; k++)
                CU_ASSERT_EQUAL(got[k], want[a][k]);
        }
    }
}

static void test_every_grid(void)
{
    static const int worlds[] = {1, 2, 4, 6, 8, 12, 16};
    int grids = 0;
    for (size_t wi = 0; wi < RM_ARRAY_LEN(worlds); wi++) {
        int W = worlds[wi];
        for (int T = 1; T <= W; T++)
            for (int P = 1; T * P <= W; P++) {
                if (W % (T * P))
                    continue;
                grids++;
                int seen[3][16]; /* how many groups of each axis list rank r */
                memset(seen, 0, sizeof seen);
                for (int r = 0; r < W; r++) {
                    rm_grid_place pl;
                    rm_err e = {0};
                    CU_ASSERT_EQUAL_FATAL(rm_grid_place_of(r, W, T, P, &pl, &e), RM_OK);
                    CU_ASSERT_EQUAL(pl.T * pl.P * pl.D, W);
                    CU_ASSERT(pl.t >= 0 && pl.t < T && pl.p >= 0 && pl.p < P && pl.d >= 0 && pl.d < pl.D);
                    CU_ASSERT_EQUAL(rm_grid_rank(T, P, pl.t, pl.p, pl.d), r);
                    for (int a = 0; a < 3; a++) {
                        int g[16];
                        int n = rm_grid_group(&pl, (rm_grid_axis)a, g, 16);
                        int me = rm_grid_coord(&pl, (rm_grid_axis)a);
                        CU_ASSERT_EQUAL(g[me], r);
                        for (int k = 0; k < n; k++) {
                            rm_grid_place q;
                            CU_ASSERT_EQUAL_FATAL(rm_grid_place_of(g[k], W, T, P, &q, &e), RM_OK);
                            /* the same on the other axes, coordinate k on this one */
                            CU_ASSERT_EQUAL(rm_grid_coord(&q, (rm_grid_axis)a), k);
                            for (int b = 0; b < 3; b++)
                                if (b != a)
                                    CU_ASSERT_EQUAL(rm_grid_coord(&q, (rm_grid_axis)b),
                                                    rm_grid_coord(&pl, (rm_grid_axis)b));
                            if (g[k] == r)
                                seen[a][r]++;
                        }
                    }
                    /* a tensor group is adjacent ranks: T of them from a multiple of T */
                    int g[16];
                    rm_grid_group(&pl, RM_GRID_TENSOR, g, 16);
                    CU_ASSERT_EQUAL(g[0] % T, 0);
                    CU_ASSERT_EQUAL(g[T - 1], g[0] + T - 1);
                }
                for (int a = 0; a < 3; a++)
                    for (int r = 0; r < W; r++)
                        CU_ASSERT_EQUAL(seen[a][r], 1);
            }
    }
    CU_ASSERT(grids > 20);
}

static void test_bad(void)
{
    rm_grid_place pl;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_grid_place_of(0, 6, 4, 1, &pl, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not a multiple"));
    CU_ASSERT_EQUAL(rm_grid_place_of(4, 4, 2, 1, &pl, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_grid_place_of(0, 4, 0, 1, &pl, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_grid_place_of(0, 4, 2, 1, &pl, &e), RM_OK);
    int g[4];
    CU_ASSERT_EQUAL(rm_grid_group(&pl, (rm_grid_axis)7, g, 4), RM_EINVAL);
}

void rm_suite_grid(void)
{
    static const rm_test_case cases[] = {
        {"table", test_table},
        {"every_grid", test_every_grid},
        {"bad", test_bad},
    };
    RM_ADD_SUITE("grid", NULL, NULL, cases);
}
