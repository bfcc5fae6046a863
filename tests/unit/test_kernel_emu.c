/* test_kernel_emu.c — what the CUDA kernels compute, run on the CPU.
 *
 * 1. The per-element math of kernels/elem.h, pinned by hand-computed values (the CPU table and the
 *    CUDA kernels both call these, so this pins the GPU's formulas too).
 * 2. A host emulation of the kernels with warp shuffles and block barriers — softmax-cross-entropy,
 *    argmax, the bias gradient and unscale-check — over the planned grid (kernels/plan.h), with the
 *    same phase functions as the device (kernels/reduce.h): a 32-lane XOR butterfly per warp step,
 *    a loop over threads per barrier. It is compared with the CPU table at the tolerances
 *    tests/gpu/gpu_tests.c uses on a real GPU, over many shapes and random datasets. A wrong
 *    shuffle offset, tree step, combine rule or chunk range in the shared code fails here. */
#include <CUnit/CUnit.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/elem.h"
#include "kernels/kernels.h"
#include "kernels/plan.h"
#include "kernels/reduce.h"
#include "tests/unit/testutil.h"

/* ---------------- element math ---------------- */

static void test_elem_math(void)
{
    CU_ASSERT_EQUAL(rm_e_bias_act(1.5f, -2.0f, RM_ELEM_ACT_NONE), -0.5f);
    CU_ASSERT_EQUAL(rm_e_bias_act(1.5f, -2.0f, RM_ELEM_ACT_RELU), 0.0f);
    CU_ASSERT_EQUAL(rm_e_bias_act(1.5f, 2.0f, RM_ELEM_ACT_RELU), 3.5f);
    CU_ASSERT_EQUAL(rm_e_bias_act(NAN, 0.0f, RM_ELEM_ACT_RELU), 0.0f); /* NaN -> 0 under ReLU */
    CU_ASSERT_EQUAL(rm_e_act_grad(2.0f, 0.0f, RM_ELEM_ACT_RELU), 0.0f);
    CU_ASSERT_EQUAL(rm_e_act_grad(2.0f, 0.5f, RM_ELEM_ACT_RELU), 2.0f);
    CU_ASSERT_EQUAL(rm_e_act_grad(2.0f, -1.0f, RM_ELEM_ACT_NONE), 2.0f);
    CU_ASSERT_EQUAL(rm_e_act_grad(2.0f, NAN, RM_ELEM_ACT_RELU), 0.0f);
    /* SGD: g' = 1 + 0.1*2 = 1.2; v = 0.9*0.5 + 1.2 = 1.65; w = 2 - 0.1*1.65 = 1.835 */
    float w = 2.0f, v = 0.5f;
    rm_e_sgd(&w, &v, 1.0f, 0.1f, 0.9f, 0.1f);
    CU_ASSERT_DOUBLE_EQUAL(v, 1.65, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w, 1.835, 1e-6);
    /* Adam, t = 1: m = 0.1 g, v = 0.001 g^2; m/bc1 = g, sqrt(v/bc2) = |g|: w -= lr * sign(g) */
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(1.0f - 0.9f, 1.0f - 0.999f, &inv_bc1, &inv_sqrt_bc2);
    float aw = 1.0f, am = 0.0f, av = 0.0f;
    rm_e_adam(&aw, &am, &av, 0.5f, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, inv_bc1, inv_sqrt_bc2);
    CU_ASSERT_DOUBLE_EQUAL(am, 0.05, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(av, 0.00025, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(aw, 0.99, 1e-6);
    /* the same step through PyTorch's literal form lr * (m / bc1) / (sqrt(v / bc2) + eps) */
    double ref = 1.0 - 0.01 * (0.05 / 0.1) / (sqrt(0.00025 / 0.001) + 1e-8);
    CU_ASSERT_DOUBLE_EQUAL(aw, ref, 1e-6);
    /* Adagrad: g' = 2; s = 1 + 4 = 5; w = 1 - 0.1 * 2 / (sqrt 5 + eps) */
    float gw = 1.0f, gs = 1.0f;
    rm_e_adagrad(&gw, &gs, 2.0f, 0.1f, 1e-10f, 0.0f);
    CU_ASSERT_DOUBLE_EQUAL(gs, 5.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(gw, 1.0 - 0.2 / sqrt(5.0), 1e-6);
    /* unscale-check and the xent gradient */
    float x = 8.0f;
    CU_ASSERT_EQUAL(rm_e_unscale_check(&x, 0.25f), 0);
    CU_ASSERT_EQUAL(x, 2.0f);
    x = INFINITY;
    CU_ASSERT_EQUAL(rm_e_unscale_check(&x, 0.25f), 1);
    CU_ASSERT_EQUAL(rm_e_xent_grad(0.25f, 1, 0.5f), -0.375f);
    CU_ASSERT_EQUAL(rm_e_xent_grad(0.25f, 0, 0.5f), 0.125f);
}

/* The CPU table runs these very functions: an optimizer step through the table equals the element
 * functions applied one by one, bit for bit. */
static void test_cpu_table_uses_elem(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    enum { N = 37 };
    float w[N], g[N], m[N], v[N], w2[N], m2[N], v2[N];
    for (int i = 0; i < N; i++) {
        w[i] = w2[i] = 0.1f * (float)(i - 18);
        g[i] = 0.37f * (float)((i * 7) % 11 - 5);
        m[i] = m2[i] = 0.01f * (float)i;
        v[i] = v2[i] = 0.001f * (float)(i % 5);
    }
    float bc1 = 1.0f - powf(0.9f, 3), bc2 = 1.0f - powf(0.999f, 3);
    k->adam_update(w, g, m, v, N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, bc1, bc2);
    float ib1, isb2;
    rm_e_adam_corrections(bc1, bc2, &ib1, &isb2);
    for (int i = 0; i < N; i++)
        rm_e_adam(&w2[i], &m2[i], &v2[i], g[i], 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, ib1, isb2);
    CU_ASSERT_EQUAL(memcmp(w, w2, sizeof w), 0);
    CU_ASSERT_EQUAL(memcmp(m, m2, sizeof m), 0);
    CU_ASSERT_EQUAL(memcmp(v, v2, sizeof v), 0);
}

/* ---------------- the warp and block phases, emulated ---------------- */

enum { OP_SUM, OP_MAX };

/* One warp's XOR butterfly: at step s every lane combines with lane ^ rm_xor_offset(s), all lanes
 * reading the values of the previous step (as __shfl_xor_sync does). */
static void emu_butterfly(float v[RM_WARP], int op)
{
    for (int s = 0; s < RM_WARP_STEPS; s++) {
        float nv[RM_WARP];
        for (int l = 0; l < RM_WARP; l++) {
            float o = v[l ^ rm_xor_offset(s)];
            nv[l] = op == OP_MAX ? fmaxf(v[l], o) : v[l] + o;
        }
        memcpy(v, nv, sizeof nv);
    }
}

/* A shared-memory tree over n slots (power of two), as k_sum_partials / k_bias_act_bwd. */
static void emu_tree(float *s, int n, int stride)
{
    for (int st = 0; rm_tree_offset(n, st) > 0; st++) {
        int k = rm_tree_offset(n, st);
        for (int t = 0; t < k; t++)
            s[(size_t)t * stride] += s[(size_t)(t + k) * stride];
    }
}

/* k_softmax_xent + k_sum_partials */
static void emu_softmax_xent(const float *logits, const int32_t *labels, int rows, int classes,
                             float inv_batch, float *dlogits, float *loss_sum)
{
    int blocks = rm_plan_softmax_blocks(rows);
    int wpb = RM_PLAN_THREADS / RM_WARP;
    float partials[RM_PLAN_MAX_PARTIALS];
    for (int b = 0; b < blocks; b++) {
        float wsum[RM_PLAN_THREADS / RM_WARP];
        for (int w = 0; w < wpb; w++) {
            float acc = 0.0f;
            for (int r = b * wpb + w; r < rows; r += blocks * wpb) {
                const float *x = logits + (size_t)r * classes;
                float *d = dlogits + (size_t)r * classes;
                float m[RM_WARP], s[RM_WARP];
                for (int l = 0; l < RM_WARP; l++)
                    m[l] = rm_xent_lane_max(x, classes, l);
                emu_butterfly(m, OP_MAX);
                for (int l = 0; l < RM_WARP; l++)
                    s[l] = rm_xent_lane_sumexp(x, classes, l, m[l]);
                emu_butterfly(s, OP_SUM);
                int label = labels[r];
                float loss = rm_xent_row_loss(x, classes, label, m[0], s[0]);
                for (int l = 0; l < RM_WARP; l++) {
                    float inv_s = 1.0f / s[l];
                    for (int j = l; j < classes; j += RM_WARP)
                        d[j] = rm_xent_grad_at(x, j, label, m[l], inv_s, inv_batch);
                }
                acc += loss;
            }
            wsum[w] = acc;
        }
        float t = 0.0f;
        for (int w = 0; w < wpb; w++)
            t += wsum[w];
        partials[b] = t;
    }
    float sh[RM_PLAN_MAX_PARTIALS];
    for (int t = 0; t < RM_PLAN_MAX_PARTIALS; t++)
        sh[t] = t < blocks ? partials[t] : 0.0f;
    emu_tree(sh, RM_PLAN_MAX_PARTIALS, 1);
    *loss_sum = sh[0];
}

/* k_argmax_correct */
static int32_t emu_argmax_correct(const float *logits, const int32_t *labels, int rows, int classes, int sms)
{
    int blocks = rm_plan_argmax_blocks(rows, sms);
    int wpb = RM_PLAN_THREADS / RM_WARP;
    int32_t correct = 0;
    for (int b = 0; b < blocks; b++)
        for (int w = 0; w < wpb; w++)
            for (int r = b * wpb + w; r < rows; r += blocks * wpb) {
                const float *x = logits + (size_t)r * classes;
                float best[RM_WARP];
                int bi[RM_WARP];
                for (int l = 0; l < RM_WARP; l++) {
                    best[l] = -INFINITY;
                    bi[l] = classes;
                    for (int j = l; j < classes; j += RM_WARP)
                        rm_argmax_lane(&best[l], &bi[l], x[j], j, classes);
                }
                for (int s = 0; s < RM_WARP_STEPS; s++) {
                    float nb[RM_WARP];
                    int ni[RM_WARP];
                    for (int l = 0; l < RM_WARP; l++) {
                        nb[l] = best[l];
                        ni[l] = bi[l];
                        rm_argmax_merge(&nb[l], &ni[l], best[l ^ rm_xor_offset(s)], bi[l ^ rm_xor_offset(s)],
                                        classes);
                    }
                    memcpy(best, nb, sizeof nb);
                    memcpy(bi, ni, sizeof ni);
                }
                if (rm_argmax_final(bi[0], x[0], classes) == labels[r])
                    correct++;
            }
    return correct;
}

/* k_bias_act_bwd (+ k_sum_chunks) */
static void emu_bias_bwd(float *dy, const float *y, float *db, int rows, int cols, int act, int sms)
{
    rm_plan_bwd p = rm_plan_bias_bwd(rows, cols, sms);
    float *out = calloc((size_t)p.chunks * cols, sizeof(float));
    float part[RM_PLAN_BWD_LANES][RM_PLAN_BWD_COLS + 1];
    for (int by = 0; by < p.chunks; by++) {
        int r0, r1;
        rm_plan_chunk_rows(by, p.rows_per_chunk, rows, &r0, &r1);
        for (int bx = 0; bx < p.gx; bx++) {
            for (int ty = 0; ty < RM_PLAN_BWD_LANES; ty++)
                for (int tx = 0; tx < RM_PLAN_BWD_COLS; tx++) {
                    int c = bx * RM_PLAN_BWD_COLS + tx;
                    part[ty][tx] =
                        c < cols ? rm_bwd_lane_sum(dy, y, cols, c, r0, r1, ty, RM_PLAN_BWD_LANES, act) : 0.0f;
                }
            for (int tx = 0; tx < RM_PLAN_BWD_COLS; tx++) {
                emu_tree(&part[0][tx], RM_PLAN_BWD_LANES, RM_PLAN_BWD_COLS + 1);
                int c = bx * RM_PLAN_BWD_COLS + tx;
                if (c < cols)
                    out[(size_t)by * cols + c] = part[0][tx];
            }
        }
    }
    for (int c = 0; c < cols; c++) {
        float s = 0.0f;
        for (int j = 0; j < p.chunks; j++)
            s += out[(size_t)j * cols + c];
        db[c] = s;
    }
    free(out);
}

/* k_unscale_check: per-thread flags over the 1-D grid, OR-ed per block (__syncthreads_or) */
static int32_t emu_unscale_check(float *x, size_t n, float inv_scale, int32_t flag, int sms)
{
    unsigned grid = rm_plan_grid1d(n, sms);
    for (unsigned b = 0; b < grid; b++) {
        int any = 0;
        for (unsigned t = 0; t < RM_PLAN_THREADS; t++) {
            int bad = 0;
            for (size_t i = b * (size_t)RM_PLAN_THREADS + t; i < n; i += (size_t)grid * RM_PLAN_THREADS)
                bad |= inv_scale == 1.0f ? !isfinite(x[i]) : rm_e_unscale_check(&x[i], inv_scale);
            any |= bad;
        }
        if (any)
            flag = 1;
    }
    return flag;
}

/* ---------------- data and tolerances (as tests/gpu/gpu_tests.c) ---------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* [-1, 1) */
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* max over i of |a-b| / (atol + rtol * ref_i) */
static double worst_ratio(const float *a, const float *b, const float *mag, size_t n, double atol,
                          double rtol)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double tol = atol + rtol * (mag ? mag[i] : fabs((double)b[i]));
        double r = isnan(a[i]) != isnan(b[i]) ? INFINITY : (isnan(a[i]) ? 0 : d / tol);
        if (r > worst)
            worst = r;
    }
    return worst;
}

/* The dlogits tolerance of tests/gpu/gpu_tests.c. The gradient (p - [label]) / B is formed from a
 * float softmax p whose error is a few ulp of p (expf, the sum of exps, the division), i.e. up to
 * ~1e-6 absolute near p = 1. At the label column p - 1 is small, so a tolerance relative to the
 * result (1e-5 * |p - 1|) plus 1e-7 / B is far below that error: 6-11 of 20 datasets failed on a
 * correct kernel. The absolute part must be relative to 1 / B: 4e-6 / B. */
#define XENT_ATOL_OLD(inv_batch) (1e-7 * (inv_batch))
#define XENT_ATOL(inv_batch) (4e-6 * (inv_batch))
#define XENT_RTOL 1e-5

static void test_emulated_softmax_xent(void)
{
    const rm_kernels *C = rm_kernels_cpu();
    const int shapes[][2] = {{1, 10},    {64, 10},  {100, 10}, {513, 37},
                             {8192, 10}, {4, 1000}, {3000, 3}, {9, 33}};
    int old_fail = 0, datasets = 0;
    for (int seed = 0; seed < 20; seed++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int rows = shapes[s][0], classes = shapes[s][1];
            size_t n = (size_t)rows * classes;
            float *x = malloc(n * 4), *ed = malloc(n * 4), *cd = malloc(n * 4);
            int32_t *lab = malloc((size_t)rows * 4);
            for (size_t i = 0; i < n; i++)
                x[i] = 8.0f * frand();
            for (int r = 0; r < rows; r++) {
                lab[r] = (int32_t)(((frand() + 1.0f) * 0.5f) * classes) % classes;
                if (r % 3 == 0) /* confident rows: p(label) near 1, the hard case */
                    x[(size_t)r * classes + lab[r]] += 12.0f;
            }
            float inv_batch = 1.0f / (float)rows, eloss = 0, closs = 0;
            emu_softmax_xent(x, lab, rows, classes, inv_batch, ed, &eloss);
            C->softmax_xent_fwd_bwd(x, lab, rows, classes, inv_batch, cd, &closs);
            CU_ASSERT(fabsf(eloss - closs) <= 1e-5f * fabsf(closs) + 1e-5f);
            double r_new = worst_ratio(ed, cd, NULL, n, XENT_ATOL(inv_batch), XENT_RTOL);
            double r_old = worst_ratio(ed, cd, NULL, n, XENT_ATOL_OLD(inv_batch), XENT_RTOL);
            if (r_new > 1.0)
                printf("\n  xent dlogits %dx%d seed %d: ratio %.3g\n", rows, classes, seed, r_new);
            CU_ASSERT(r_new <= 1.0);
            old_fail += r_old > 1.0;
            datasets++;
            /* in place (dlogits aliases logits) gives the same bits */
            emu_softmax_xent(x, lab, rows, classes, inv_batch, x, &eloss);
            CU_ASSERT_EQUAL(memcmp(x, ed, n * 4), 0);
            free(x), free(ed), free(cd), free(lab);
        }
    }
    /* the old tolerance rejects a correct kernel: the defect this test guards against */
    printf(" [old dlogits tolerance failed %d of %d datasets] ", old_fail, datasets);
    CU_ASSERT(old_fail > 0);
}

static void test_emulated_argmax(void)
{
    const rm_kernels *C = rm_kernels_cpu();
    const int shapes[][2] = {{1, 10}, {64, 10}, {513, 37}, {4, 1000}, {2049, 3}, {7, 1}, {9, 64}};
    const int sms[] = {0, 1, 132};
    for (int seed = 0; seed < 5; seed++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int si = 0; si < 3; si++) {
                int rows = shapes[s][0], classes = shapes[s][1];
                size_t n = (size_t)rows * classes;
                float *x = malloc(n * 4);
                int32_t *lab = malloc((size_t)rows * 4);
                for (size_t i = 0; i < n; i++)
                    x[i] = (float)(int)(4.0f * frand()); /* few values: many ties */
                for (int r = 0; r < rows; r++) {
                    lab[r] = (int32_t)(((frand() + 1.0f) * 0.5f) * classes) % classes;
                    float *z = x + (size_t)r * classes;
                    switch (r % 7) { /* NaN rules of the C loop */
                    case 1:
                        z[0] = NAN;
                        break;
                    case 2:
                        if (classes > 2)
                            z[classes / 2] = NAN;
                        break;
                    case 3:
                        for (int c = 0; c < classes; c++)
                            z[c] = NAN;
                        break;
                    case 4:
                        if (classes > 1)
                            z[classes - 1] = 100.0f, lab[r] = classes - 1;
                        break;
                    default:
                        break;
                    }
                }
                int32_t cc = -1;
                C->argmax_correct(x, lab, rows, classes, &cc);
                int32_t ec = emu_argmax_correct(x, lab, rows, classes, sms[si]);
                if (ec != cc)
                    printf("\n  argmax %dx%d sms %d: emulated %d cpu %d\n", rows, classes, sms[si], ec, cc);
                CU_ASSERT_EQUAL(ec, cc);
                free(x), free(lab);
            }
}

static void test_emulated_bias_bwd(void)
{
    const rm_kernels *C = rm_kernels_cpu();
    const int shapes[][2] = {{1, 1},    {64, 512},  {37, 10},   {257, 33},
                             {3, 1000}, {8192, 10}, {20000, 3}, {513, 40}};
    const int sms[] = {0, 1, 7, 132};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int act = RM_ACT_NONE; act <= RM_ACT_RELU; act++)
            for (int si = 0; si < 4; si++) {
                int rows = shapes[s][0], cols = shapes[s][1];
                size_t n = (size_t)rows * cols;
                float *y = malloc(n * 4), *dy = malloc(n * 4), *dy2 = malloc(n * 4);
                float *edb = malloc((size_t)cols * 4), *cdb = malloc((size_t)cols * 4);
                float *mag = calloc((size_t)cols, 4);
                for (size_t i = 0; i < n; i++) {
                    y[i] = 2.0f * frand();
                    dy[i] = dy2[i] = frand();
                    mag[i % cols] += fabsf(dy[i]);
                }
                emu_bias_bwd(dy, y, edb, rows, cols, act, sms[si]);
                C->bias_act_bwd(dy2, y, cdb, rows, cols, (rm_act)act);
                CU_ASSERT_EQUAL(memcmp(dy, dy2, n * 4), 0); /* dY: bit-identical, as on the GPU */
                double r = worst_ratio(edb, cdb, mag, (size_t)cols, 1e-7, 1e-6);
                if (r > 1.0)
                    printf("\n  bias bwd %dx%d act %d sms %d: ratio %.3g\n", rows, cols, act, sms[si], r);
                CU_ASSERT(r <= 1.0);
                free(y), free(dy), free(dy2), free(edb), free(cdb), free(mag);
            }
}

static void test_emulated_unscale_check(void)
{
    const rm_kernels *C = rm_kernels_cpu();
    const size_t sizes[] = {1, 255, 257, 4096, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int bad_at = -1; bad_at < 3; bad_at++) {
            size_t n = sizes[k];
            float *a = malloc(n * 4), *b = malloc(n * 4);
            for (size_t i = 0; i < n; i++)
                a[i] = b[i] = 65536.0f * frand();
            size_t pos = bad_at < 0 ? n : (bad_at == 0 ? 0 : bad_at == 1 ? n / 2 : n - 1);
            if (pos < n)
                a[pos] = b[pos] = bad_at == 1 ? NAN : INFINITY;
            int32_t cf = 0;
            C->unscale_check_finite(b, n, 1.0f / 65536.0f, &cf);
            int32_t ef = emu_unscale_check(a, n, 1.0f / 65536.0f, 0, 80);
            CU_ASSERT_EQUAL(ef, cf);
            CU_ASSERT_EQUAL(ef, pos < n);
            CU_ASSERT_EQUAL(memcmp(a, b, n * 4), 0);
            free(a), free(b);
        }
}

void rm_suite_kernel_emu(void)
{
    static const rm_test_case cases[] = {
        {"element math by hand", test_elem_math},
        {"the CPU table runs the element functions", test_cpu_table_uses_elem},
        {"emulated softmax-xent vs CPU (GPU tolerances)", test_emulated_softmax_xent},
        {"emulated argmax vs CPU (ties, NaNs)", test_emulated_argmax},
        {"emulated bias gradient vs CPU", test_emulated_bias_bwd},
        {"emulated unscale-check vs CPU", test_emulated_unscale_check},
    };
    RM_ADD_SUITE("kernel_emu", NULL, NULL, cases);
}
