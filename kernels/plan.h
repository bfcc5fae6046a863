/* plan.h — launch planning for the CUDA kernels (kernels/cuda/kernels_cuda.cu) as pure functions.
 *
 * Design: every grid/block/chunk choice of the CUDA table is made here, from the problem shape and
 * the device's SM count only, and every index range a kernel walks is computed by an RM_HD helper
 * here too. The CUDA kernels and the CPU coverage tests (tests/unit/test_plan.c, which replay each
 * kernel's loops over many shapes and SM counts and require that every element is visited exactly
 * once) therefore run the same arithmetic. Limits the kernels assume (block sizes, the 65535 cap on
 * grid.y, the partial-sum capacity) are constants here and asserted by the planners' results
 * (rm_plan_ok_* functions, checked by the tests and, cheaply, before each launch).
 * Usable from C11 and CUDA C++; header-only, nothing owned. */
#ifndef RM_KERNELS_PLAN_H
#define RM_KERNELS_PLAN_H
#include <stddef.h>

#include "kernels/elem.h" /* RM_HD */

#define RM_PLAN_THREADS 256      /* threads per block of the 1-D, 2-D and row kernels */
#define RM_PLAN_BLOCKS_PER_SM 16 /* grid-stride kernels: enough blocks to fill the GPU */
#define RM_PLAN_MAX_GX 64        /* 2-D kernels: column blocks per row */
#define RM_PLAN_MAX_GY 65535     /* CUDA's limit on gridDim.y */
#define RM_PLAN_MAX_PARTIALS 256 /* softmax-xent blocks = partial loss sums = k_sum_partials width */
#define RM_PLAN_BWD_COLS 32      /* bias-gradient block: 32 columns x 16 row lanes */
#define RM_PLAN_BWD_LANES 16
#define RM_PLAN_BWD_MAX_CHUNKS 32
#define RM_PLAN_BWD_MIN_ROWS 256 /* rows per bias-gradient chunk, at least */
#define RM_PLAN_DEFAULT_SMS 80   /* when the SM count is unknown (<= 0) */

#ifdef __cplusplus
extern "C" {
#endif

static inline int rm_plan_sms(int sms)
{
    return sms > 0 ? sms : RM_PLAN_DEFAULT_SMS;
}

/* Grid-stride 1-D kernels over n elements: blocks of RM_PLAN_THREADS, at most 16 per SM, >= 1. */
static inline unsigned rm_plan_grid1d(size_t n, int sms)
{
    size_t blocks = (n + RM_PLAN_THREADS - 1) / RM_PLAN_THREADS;
    size_t cap = (size_t)rm_plan_sms(sms) * RM_PLAN_BLOCKS_PER_SM;
    if (blocks > cap)
        blocks = cap;
    return blocks ? (unsigned)blocks : 1u;
}

/* Rows x columns kernels (rows over grid.y, columns over grid.x, both grid-stride): enough column
 * blocks to cover cols_work (capped at 64), then rows so the grid is about 16 blocks per SM. */
typedef struct rm_plan2d {
    unsigned gx, gy;
} rm_plan2d;
static inline rm_plan2d rm_plan_grid2d(int rows, int cols_work, int sms)
{
    rm_plan2d p;
    int gx = (cols_work + RM_PLAN_THREADS - 1) / RM_PLAN_THREADS;
    if (gx > RM_PLAN_MAX_GX)
        gx = RM_PLAN_MAX_GX;
    if (gx < 1)
        gx = 1;
    int want = rm_plan_sms(sms) * RM_PLAN_BLOCKS_PER_SM;
    int gy = want / gx;
    if (gy > rows)
        gy = rows;
    if (gy > RM_PLAN_MAX_GY)
        gy = RM_PLAN_MAX_GY;
    if (gy < 1)
        gy = 1;
    p.gx = (unsigned)gx;
    p.gy = (unsigned)gy;
    return p;
}

/* Bias gradient: column blocks of 32, and the rows split into chunks (each summed by one block row,
 * then the chunks added in order by k_sum_chunks) when the columns alone give too few blocks. */
typedef struct rm_plan_bwd {
    int gx, chunks, rows_per_chunk;
} rm_plan_bwd;
static inline rm_plan_bwd rm_plan_bias_bwd(int rows, int cols, int sms)
{
    rm_plan_bwd p;
    if (rows < 0)
        rows = 0;
    p.gx = (cols + RM_PLAN_BWD_COLS - 1) / RM_PLAN_BWD_COLS;
    if (p.gx < 1)
        p.gx = 1;
    int want = rm_plan_sms(sms) * 4;
    int chunks = (want + p.gx - 1) / p.gx;
    int max_chunks = (rows + RM_PLAN_BWD_MIN_ROWS - 1) / RM_PLAN_BWD_MIN_ROWS;
    if (chunks > max_chunks)
        chunks = max_chunks;
    if (chunks > RM_PLAN_BWD_MAX_CHUNKS)
        chunks = RM_PLAN_BWD_MAX_CHUNKS;
    if (chunks < 1)
        chunks = 1;
    p.chunks = chunks;
    p.rows_per_chunk = chunks > 1 ? (rows + chunks - 1) / chunks : (rows > 0 ? rows : 1);
    return p;
}
/* The same plan with one chunk (when the partial-sum buffer cannot be had). */
static inline rm_plan_bwd rm_plan_bias_bwd_single(int rows, int cols)
{
    rm_plan_bwd p = rm_plan_bias_bwd(rows, cols, 1);
    p.chunks = 1;
    p.rows_per_chunk = rows > 0 ? rows : 1;
    return p;
}

/* Row range [*r0, *r1) of bias-gradient chunk `chunk`. */
RM_HD void rm_plan_chunk_rows(int chunk, int rows_per_chunk, int rows, int *r0, int *r1)
{
    int a = chunk * rows_per_chunk;
    int b = a + rows_per_chunk;
    *r0 = a;
    *r1 = b < rows ? b : rows;
}

/* One warp per row kernels (softmax-xent, argmax): blocks of RM_PLAN_THREADS (8 warps), enough to
 * give each row a warp, capped at `cap` blocks (grid-stride over the rest), >= 1. */
static inline int rm_plan_rows(int rows, int cap)
{
    int wpb = RM_PLAN_THREADS / 32;
    int blocks = (rows + wpb - 1) / wpb;
    if (blocks > cap)
        blocks = cap;
    return blocks > 0 ? blocks : 1;
}
static inline int rm_plan_softmax_blocks(int rows)
{
    return rm_plan_rows(rows, RM_PLAN_MAX_PARTIALS);
}
static inline int rm_plan_argmax_blocks(int rows, int sms)
{
    return rm_plan_rows(rows, rm_plan_sms(sms) * 8);
}

/* What the kernels assume of a plan (the tests check every plan; the CUDA table before launch). */
static inline int rm_plan_ok_2d(rm_plan2d p)
{
    return p.gx >= 1 && p.gy >= 1 && p.gy <= RM_PLAN_MAX_GY;
}
static inline int rm_plan_ok_bwd(rm_plan_bwd p, int rows)
{
    return p.gx >= 1 && p.chunks >= 1 && p.chunks <= RM_PLAN_BWD_MAX_CHUNKS && p.chunks <= RM_PLAN_MAX_GY &&
           p.rows_per_chunk >= 1 && (long long)p.chunks * p.rows_per_chunk >= rows;
}

#ifdef __cplusplus
}
#endif
#endif
