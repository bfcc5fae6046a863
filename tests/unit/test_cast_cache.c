/* test_cast_cache.c — the CUDA table's 16-bit operand cache (kernels/cast_cache.h), on the CPU: a
 * model step's gemm sequence (forward X.W, backward X^T.dY and dY.W^T) casts each operand once, and
 * no write to any byte of a source — by a table entry, NCCL, a fresh allocation or the step's
 * check() — ever leaves its old copy in use. The cache only chooses slots; here a "copy" is a
 * snapshot of the source taken at cast time, and every use is compared with the source's bytes at
 * that moment, as the GPU would read them. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cast_cache.h"
#include "tests/unit/testutil.h"

/* A fake device: a cast snapshots the source into the slot's buffer (malloc'd, grown like the
 * table grows its scratch); use() returns the bytes a gemm would read. */
static rm_cast_cache g_c;
static int g_casts, g_grows;

static const float *use(const float *src, int rows, int cols, int ld)
{
    size_t need = (size_t)rows * cols * sizeof(float); /* the fake keeps fp32 copies */
    bool hit = false;
    int i = rm_cast_cache_get(&g_c, src, rows, cols, ld, 1, need, &hit);
    rm_cast_slot *s = &g_c.slot[i];
    if (!hit) {
        if (s->cap < need) {
            free(s->buf);
            s->buf = malloc(need);
            s->cap = need;
            g_grows++;
        }
        for (int r = 0; r < rows; r++)
            memcpy((float *)s->buf + (size_t)r * cols, src + (size_t)r * ld, (size_t)cols * sizeof(float));
        g_casts++;
    }
    return s->buf;
}

/* the copy must equal the source right now */
static int fresh(const float *copy, const float *src, int rows, int cols, int ld)
{
    for (int r = 0; r < rows; r++)
        if (memcmp(copy + (size_t)r * cols, src + (size_t)r * ld, (size_t)cols * sizeof(float)))
            return 0;
    return 1;
}

static void reset(void)
{
    for (int i = 0; i < RM_CAST_SLOTS; i++)
        free(g_c.slot[i].buf);
    memset(&g_c, 0, sizeof g_c);
    g_casts = g_grows = 0;
}

static void test_span_and_overlap(void)
{
    CU_ASSERT_EQUAL(rm_cast_span(3, 4, 10), (2 * 10 + 4) * sizeof(float));
    CU_ASSERT_EQUAL(rm_cast_span(0, 4, 10), 0);
    float a[8];
    CU_ASSERT(rm_cast_overlap(a, 4 * sizeof(float), a + 3, sizeof(float)));
    CU_ASSERT_FALSE(rm_cast_overlap(a, 4 * sizeof(float), a + 4, sizeof(float))); /* adjacent */
    CU_ASSERT_FALSE(rm_cast_overlap(a + 4, sizeof(float), a, 4 * sizeof(float)));
    CU_ASSERT(rm_cast_overlap(a + 3, sizeof(float), a, 4 * sizeof(float)));
    CU_ASSERT_FALSE(rm_cast_overlap(a, 0, a, 4));
}

/* One hidden layer, three steps: the model's gemm order, writes reported as the table does. */
static void test_step_casts_each_operand_once(void)
{
    reset();
    enum { B = 4, IN = 6, H = 5, OUT = 3 };
    float x[B * IN], w1[IN * H], w2[H * OUT], a1[B * H], a2[B * OUT], d1[B * H];
    for (int i = 0; i < B * IN; i++)
        x[i] = (float)i;
    for (int i = 0; i < IN * H; i++)
        w1[i] = 0.5f * i;
    for (int i = 0; i < H * OUT; i++)
        w2[i] = -0.25f * i;
    for (int step = 0; step < 3; step++) {
        int before = g_casts;
        /* h2d of the batch */
        for (int i = 0; i < B * IN; i++)
            x[i] += 1.0f;
        rm_cast_cache_written(&g_c, x, sizeof x);
        /* forward: a1 = x.w1, a2 = a1.w2 (each gemm writes its C after casting) */
        CU_ASSERT(fresh(use(x, B, IN, IN), x, B, IN, IN));
        CU_ASSERT(fresh(use(w1, IN, H, H), w1, IN, H, H));
        for (int i = 0; i < B * H; i++)
            a1[i] = (float)(step * 100 + i);
        rm_cast_cache_written(&g_c, a1, sizeof a1);
        CU_ASSERT(fresh(use(a1, B, H, H), a1, B, H, H));
        CU_ASSERT(fresh(use(w2, H, OUT, OUT), w2, H, OUT, OUT));
        rm_cast_cache_written(&g_c, a2, sizeof a2);
        /* backward, layer 2: dY = a2 (softmax wrote it), dW2 = a1^T.dY, d1 = dY.w2^T */
        for (int i = 0; i < B * OUT; i++)
            a2[i] = (float)(step - i);
        rm_cast_cache_written(&g_c, a2, sizeof a2);
        CU_ASSERT(fresh(use(a1, B, H, H), a1, B, H, H)); /* forward's copy, reused */
        CU_ASSERT(fresh(use(a2, B, OUT, OUT), a2, B, OUT, OUT));
        CU_ASSERT(fresh(use(a2, B, OUT, OUT), a2, B, OUT, OUT)); /* dY again: reused */
        CU_ASSERT(fresh(use(w2, H, OUT, OUT), w2, H, OUT, OUT)); /* forward's copy, reused */
        for (int i = 0; i < B * H; i++)
            d1[i] = (float)(step + 2 * i);
        rm_cast_cache_written(&g_c, d1, sizeof d1);
        /* backward, layer 1: bias_act_bwd rewrites d1 in place, dW1 = x^T.d1 */
        for (int i = 0; i < B * H; i++)
            d1[i] *= 0.5f;
        rm_cast_cache_written(&g_c, d1, sizeof d1);
        CU_ASSERT(fresh(use(x, B, IN, IN), x, B, IN, IN)); /* forward's copy, reused */
        CU_ASSERT(fresh(use(d1, B, H, H), d1, B, H, H));
        /* 10 operand reads by 5 gemms, 6 distinct operands (x, w1, a1, w2, a2, d1): 6 casts, not 10 */
        CU_ASSERT_EQUAL(g_casts - before, 6);
        /* the optimizer writes w1, w2; then check() ends the step */
        for (int i = 0; i < IN * H; i++)
            w1[i] -= 0.1f;
        rm_cast_cache_written(&g_c, w1, sizeof w1);
        for (int i = 0; i < H * OUT; i++)
            w2[i] -= 0.1f;
        rm_cast_cache_written(&g_c, w2, sizeof w2);
        rm_cast_cache_clear(&g_c);
    }
    /* steady state: the same slots (and buffers) every step; only the first step grew any */
    CU_ASSERT_EQUAL(g_grows, 6);
    reset();
}

/* A write to any single byte inside a cached source's span drops exactly that copy; a strided
 * operand's span ends at its last row's last column. */
static void test_partial_write_invalidates(void)
{
    reset();
    float m[4 * 8];
    for (int i = 0; i < 32; i++)
        m[i] = (float)i;
    use(m, 4, 3, 8);      /* rows of 3 columns, stride 8: reads m[0 .. 3*8+3) */
    use(m + 28, 1, 4, 4); /* the last 4 floats: outside the first span */
    int casts = g_casts;
    rm_cast_cache_written(&g_c, (char *)(m + 26) + 3, 1); /* one byte of m[26], in span 1 */
    m[26] = -1.0f;
    CU_ASSERT(fresh(use(m, 4, 3, 8), m, 4, 3, 8));
    CU_ASSERT_EQUAL(g_casts, casts + 1); /* recast */
    CU_ASSERT(fresh(use(m + 28, 1, 4, 4), m + 28, 1, 4, 4));
    CU_ASSERT_EQUAL(g_casts, casts + 1); /* untouched: reused */
    /* the byte just past the span does not invalidate */
    rm_cast_cache_written(&g_c, m + 27, sizeof(float));
    use(m, 4, 3, 8);
    CU_ASSERT_EQUAL(g_casts, casts + 1);
    /* the same pointer with another shape, stride or precision is another copy */
    use(m, 2, 3, 8);
    CU_ASSERT_EQUAL(g_casts, casts + 2);
    bool hit = true;
    rm_cast_cache_get(&g_c, m, 4, 3, 8, 2, 24, &hit);
    CU_ASSERT_FALSE(hit);
    reset();
}

/* More operands than slots: the least recently used copy goes, never one just handed out, and a
 * copy that is gone is recast, not read stale. */
static void test_eviction(void)
{
    reset();
    enum { N = RM_CAST_SLOTS + 5 };
    static float src[N][4];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 4; j++)
            src[i][j] = (float)(i * 10 + j);
    for (int i = 0; i < N; i++)
        CU_ASSERT(fresh(use(src[i], 1, 4, 4), src[i], 1, 4, 4));
    CU_ASSERT_EQUAL(g_casts, N);
    /* the newest RM_CAST_SLOTS are still cached, the 5 oldest were evicted */
    for (int i = N - 1; i >= 5; i--)
        use(src[i], 1, 4, 4);
    CU_ASSERT_EQUAL(g_casts, N);
    use(src[0], 1, 4, 4);
    CU_ASSERT_EQUAL(g_casts, N + 1);
    /* A then B in one gemm never share a slot */
    bool h1, h2;
    int ia = rm_cast_cache_get(&g_c, src[1], 1, 4, 4, 1, 16, &h1);
    int ib = rm_cast_cache_get(&g_c, src[2], 1, 4, 4, 1, 16, &h2);
    CU_ASSERT_NOT_EQUAL(ia, ib);
    /* a failed fill is dropped: the next use misses */
    rm_cast_cache_drop(&g_c, ib);
    rm_cast_cache_get(&g_c, src[2], 1, 4, 4, 1, 16, &h2);
    CU_ASSERT_FALSE(h2);
    reset();
}

void rm_suite_cast_cache(void)
{
    static const rm_test_case cases[] = {
        {"span and overlap", test_span_and_overlap},
        {"a step casts each operand once, never stale", test_step_casts_each_operand_once},
        {"a write to any byte of a source drops its copy", test_partial_write_invalidates},
        {"eviction is least recently used", test_eviction},
    };
    RM_ADD_SUITE("cast_cache", NULL, NULL, cases);
}
