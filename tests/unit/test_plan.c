/* test_plan.c — the CUDA kernels' launch planning (kernels/plan.h), checked on the CPU: for many
 * shapes and SM counts, replay each kernel's index loops over the planned grid exactly as
 * kernels/cuda/kernels_cuda.cu writes them and require that every element is visited exactly once,
 * and that each plan stays inside what the kernels and CUDA allow. */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/plan.h"
#include "kernels/reduce.h"
#include "tests/unit/testutil.h"

static const int g_sms[] = {0, 1, 2, 7, 46, 80, 108, 132, 148};
#define NSMS (int)(sizeof g_sms / sizeof g_sms[0])

/* Every count must be exactly 1; reports the first offender. */
static int all_once(const uint8_t *seen, size_t n, size_t *bad)
{
    for (size_t i = 0; i < n; i++)
        if (seen[i] != 1) {
            *bad = i;
            return 0;
        }
    return 1;
}

/* grid-stride 1-D kernels (k_scale, the optimizers, casts, unscale-check, k_beta_scale) */
static void test_grid1d_coverage(void)
{
    const size_t sizes[] = {1, 2, 31, 255, 256, 257, 1000, 4096, 65537, 262143, 1u << 20, 3000017};
    for (int si = 0; si < NSMS; si++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            unsigned grid = rm_plan_grid1d(n, g_sms[si]);
            CU_ASSERT(grid >= 1 && grid <= (unsigned)rm_plan_sms(g_sms[si]) * RM_PLAN_BLOCKS_PER_SM);
            uint8_t *seen = calloc(n, 1);
            for (unsigned b = 0; b < grid; b++)
                for (unsigned t = 0; t < RM_PLAN_THREADS; t++)
                    for (size_t i = b * (size_t)RM_PLAN_THREADS + t; i < n;
                         i += (size_t)grid * RM_PLAN_THREADS)
                        seen[i]++;
            size_t bad = 0;
            CU_ASSERT(all_once(seen, n, &bad));
            free(seen);
        }
    }
    CU_ASSERT_EQUAL(rm_plan_grid1d(0, 80), 1u);
}

/* rows x columns kernels (k_bias_act_fwd, k_cast_2d) */
static void test_grid2d_coverage(void)
{
    const int shapes[][2] = {{1, 1},     {1, 257},   {3, 1000},  {64, 512},  {257, 33},
                             {1000, 10}, {70000, 3}, {5, 70000}, {2, 16385}, {8192, 784}};
    for (int si = 0; si < NSMS; si++) {
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            int rows = shapes[k][0], cols = shapes[k][1];
            rm_plan2d p = rm_plan_grid2d(rows, cols, g_sms[si]);
            CU_ASSERT(rm_plan_ok_2d(p));
            size_t n = (size_t)rows * cols;
            uint8_t *seen = calloc(n, 1);
            for (unsigned by = 0; by < p.gy; by++)
                for (int r = (int)by; r < rows; r += (int)p.gy)
                    for (unsigned bx = 0; bx < p.gx; bx++)
                        for (int t = 0; t < RM_PLAN_THREADS; t++)
                            for (int c = (int)bx * RM_PLAN_THREADS + t; c < cols;
                                 c += (int)p.gx * RM_PLAN_THREADS)
                                seen[(size_t)r * cols + c]++;
            size_t bad = 0;
            CU_ASSERT(all_once(seen, n, &bad));
            free(seen);
        }
    }
}

/* k_bias_act_bwd: column blocks x row chunks, 16 row lanes per chunk, then k_sum_chunks */
static void test_bias_bwd_coverage(void)
{
    const int shapes[][2] = {{0, 5},     {1, 1},     {64, 10},    {255, 33},   {256, 512}, {257, 1},
                             {1000, 10}, {8192, 10}, {8193, 256}, {100000, 3}, {33, 2000}};
    for (int si = 0; si < NSMS; si++) {
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            int rows = shapes[k][0], cols = shapes[k][1];
            for (int single = 0; single <= 1; single++) {
                rm_plan_bwd p =
                    single ? rm_plan_bias_bwd_single(rows, cols) : rm_plan_bias_bwd(rows, cols, g_sms[si]);
                CU_ASSERT(rm_plan_ok_bwd(p, rows));
                CU_ASSERT(p.chunks == 1 || (rows + p.chunks - 1) / p.chunks >= 1);
                size_t n = (size_t)rows * cols;
                uint8_t *seen = calloc(n ? n : 1, 1);
                uint8_t *out = calloc((size_t)p.chunks * cols, 1);
                for (int by = 0; by < p.chunks; by++) {
                    int r0, r1;
                    rm_plan_chunk_rows(by, p.rows_per_chunk, rows, &r0, &r1);
                    for (int bx = 0; bx < p.gx; bx++)
                        for (int tx = 0; tx < RM_PLAN_BWD_COLS; tx++) {
                            int c = bx * RM_PLAN_BWD_COLS + tx;
                            if (c >= cols)
                                continue;
                            for (int ty = 0; ty < RM_PLAN_BWD_LANES; ty++)
                                for (int r = r0 + ty; r < r1; r += RM_PLAN_BWD_LANES)
                                    seen[(size_t)r * cols + c]++;
                            out[(size_t)by * cols + c]++; /* thread y == 0 writes the chunk sum */
                        }
                }
                size_t bad = 0;
                CU_ASSERT(all_once(seen, n, &bad));
                CU_ASSERT(all_once(out, (size_t)p.chunks * cols, &bad)); /* k_sum_chunks reads each once */
                free(seen);
                free(out);
            }
        }
    }
}

/* one warp per row (k_softmax_xent, k_argmax_correct) */
static void test_rows_coverage(void)
{
    const int rows_list[] = {1, 7, 8, 9, 64, 100, 513, 2048, 2049, 8192, 100000};
    int wpb = RM_PLAN_THREADS / RM_WARP;
    for (int si = 0; si < NSMS; si++) {
        for (size_t k = 0; k < sizeof rows_list / sizeof rows_list[0]; k++) {
            int rows = rows_list[k];
            int plans[2] = {rm_plan_softmax_blocks(rows), rm_plan_argmax_blocks(rows, g_sms[si])};
            CU_ASSERT(plans[0] >= 1 && plans[0] <= RM_PLAN_MAX_PARTIALS);
            CU_ASSERT(plans[1] >= 1);
            for (int pi = 0; pi < 2; pi++) {
                int blocks = plans[pi];
                uint8_t *seen = calloc((size_t)rows, 1);
                for (int b = 0; b < blocks; b++)
                    for (int w = 0; w < wpb; w++)
                        for (int r = b * wpb + w; r < rows; r += blocks * wpb)
                            seen[r]++;
                size_t bad = 0;
                CU_ASSERT(all_once(seen, (size_t)rows, &bad));
                free(seen);
            }
        }
    }
}

/* lanes of a warp walk a row's columns: each column exactly once */
static void test_lane_walk_and_offsets(void)
{
    for (int classes = 1; classes < 200; classes += 7) {
        uint8_t seen[256] = {0};
        for (int lane = 0; lane < RM_WARP; lane++)
            for (int j = lane; j < classes; j += RM_WARP)
                seen[j]++;
        size_t bad = 0;
        CU_ASSERT(all_once(seen, (size_t)classes, &bad));
    }
    /* the butterfly pairs every lane with a distinct partner at every step, and after all steps
     * every lane has (transitively) combined all 32 */
    for (int s = 0; s < RM_WARP_STEPS; s++) {
        int o = rm_xor_offset(s);
        CU_ASSERT(o >= 1 && o < RM_WARP);
    }
    uint32_t reach[RM_WARP];
    for (int l = 0; l < RM_WARP; l++)
        reach[l] = 1u << l;
    for (int s = 0; s < RM_WARP_STEPS; s++) {
        uint32_t next[RM_WARP];
        for (int l = 0; l < RM_WARP; l++)
            next[l] = reach[l] | reach[l ^ rm_xor_offset(s)];
        memcpy(reach, next, sizeof reach);
    }
    for (int l = 0; l < RM_WARP; l++)
        CU_ASSERT_EQUAL(reach[l], 0xffffffffu);
    /* the shared-memory trees sum every slot into slot 0 exactly once */
    const int widths[] = {RM_PLAN_BWD_LANES, RM_PLAN_MAX_PARTIALS};
    for (int w = 0; w < 2; w++) {
        int n = widths[w];
        int count[RM_PLAN_MAX_PARTIALS];
        for (int i = 0; i < n; i++)
            count[i] = 1;
        for (int s = 0; rm_tree_offset(n, s) > 0; s++) {
            int k = rm_tree_offset(n, s);
            for (int t = 0; t < k; t++)
                count[t] += count[t + k];
        }
        CU_ASSERT_EQUAL(count[0], n);
    }
}

void rm_suite_plan(void)
{
    static const rm_test_case cases[] = {
        {"1-D grid-stride: every element once", test_grid1d_coverage},
        {"2-D rows x columns: every element once", test_grid2d_coverage},
        {"bias gradient chunks and lanes: every element once", test_bias_bwd_coverage},
        {"warp per row: every row once", test_rows_coverage},
        {"lane walk, butterfly offsets, trees", test_lane_walk_and_offsets},
    };
    RM_ADD_SUITE("plan", NULL, NULL, cases);
}
