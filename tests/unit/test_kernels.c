/* test_kernels.c — the CPU kernels table against naive loops (double-precision references):
 * gemm in all four transpose combinations with alpha/beta and leading dimensions, fused bias+ReLU
 * forward/backward, softmax cross-entropy (value and gradient, aliasing), argmax counting, the
 * three optimizer updates, scale, unscale_check_finite, and the table lookup. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/unit/testutil.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 32768.0f) - 1.0f;
}

static void naive_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += av * bv;
            }
            c[(size_t)i * ldc + j] = (float)(alpha * s + beta * c[(size_t)i * ldc + j]);
        }
}

static void test_lookup(void)
{
    const rm_kernels *k = rm_kernels_get("cpu");
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_STRING_EQUAL(k->name, "cpu");
    CU_ASSERT(k->host_memory);
    CU_ASSERT_PTR_EQUAL(rm_kernels_get(NULL), k);
    CU_ASSERT_PTR_NULL(rm_kernels_get("tpu"));
    const rm_kernels *cu = rm_kernels_get("cuda");
    if (cu)
        CU_ASSERT_STRING_EQUAL(cu->name, "cuda");
    float *p = k->alloc(100);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(((uintptr_t)p) % 64, 0);
    for (int i = 0; i < 25; i++)
        CU_ASSERT_EQUAL(p[i], 0.0f);
    k->free(p);
    k->free(NULL);
    /* large blocks are zeroed by giving their whole pages back: reused dirty memory, odd sizes and
     * both partial end pages still read as zeros */
    for (size_t sz = (1u << 20) + 12; sz < (3u << 20); sz += (1u << 20) + 4100) {
        unsigned char *d = malloc(sz);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        memset(d, 0xab, sz);
        free(d);
        unsigned char *z = k->alloc(sz);
        CU_ASSERT_PTR_NOT_NULL_FATAL(z);
        size_t nz = 0;
        for (size_t i = 0; i < sz; i++)
            nz += z[i] != 0;
        CU_ASSERT_EQUAL(nz, 0);
        k->free(z);
    }
}

static void test_gemm(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    unsigned s = 7;
    const int M = 13, N = 11, K = 17;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
            float *a = calloc((size_t)(ta ? K : M) * lda, sizeof(float));
            float *b = calloc((size_t)(tb ? N : K) * ldb, sizeof(float));
            float *c = calloc((size_t)M * ldc, sizeof(float));
            float *r = calloc((size_t)M * ldc, sizeof(float));
            for (int i = 0; i < (ta ? K : M) * lda; i++)
                a[i] = frand(&s);
            for (int i = 0; i < (tb ? N : K) * ldb; i++)
                b[i] = frand(&s);
            for (int i = 0; i < M * ldc; i++)
                c[i] = r[i] = frand(&s);
            k->gemm(ta, tb, M, N, K, 0.5f, a, lda, b, ldb, 0.25f, c, ldc);
            naive_gemm(ta, tb, M, N, K, 0.5f, a, lda, b, ldb, 0.25f, r, ldc);
            double maxd = 0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < ldc; j++) {
                    double d = fabs((double)c[i * ldc + j] - r[i * ldc + j]);
                    maxd = d > maxd ? d : maxd;
                }
            CU_ASSERT(maxd < 1e-5);
            free(a);
            free(b);
            free(c);
            free(r);
        }
    /* beta = 0 ignores garbage (NaN) in C */
    float a1[2] = {1, 2}, b1[2] = {3, 4}, c1[1] = {NAN};
    k->gemm(false, false, 1, 1, 2, 1.0f, a1, 2, b1, 1, 0.0f, c1, 1);
    CU_ASSERT_DOUBLE_EQUAL(c1[0], 11.0, 1e-6);
}

static void test_bias_act(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    const int R = 5, C = 7;
    float y[35], y0[35], b[7], dy[35], dy0[35], db[7];
    unsigned s = 3;
    for (int i = 0; i < R * C; i++)
        y[i] = y0[i] = frand(&s);
    for (int c = 0; c < C; c++)
        b[c] = frand(&s) * 0.5f;
    k->bias_act_fwd(y, b, R, C, RM_ACT_RELU);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float want = y0[r * C + c] + b[c];
            CU_ASSERT_EQUAL(y[r * C + c], want > 0 ? want : 0.0f);
        }
    for (int i = 0; i < R * C; i++)
        dy[i] = dy0[i] = frand(&s);
    db[0] = 99; /* must be overwritten */
    k->bias_act_bwd(dy, y, db, R, C, RM_ACT_RELU);
    for (int c = 0; c < C; c++) {
        double sum = 0;
        for (int r = 0; r < R; r++) {
            float g = y[r * C + c] > 0 ? dy0[r * C + c] : 0.0f;
            CU_ASSERT_EQUAL(dy[r * C + c], g);
            sum += g;
        }
        CU_ASSERT_DOUBLE_EQUAL(db[c], sum, 1e-5);
    }
    /* identity activation */
    memcpy(y, y0, sizeof y);
    k->bias_act_fwd(y, b, R, C, RM_ACT_NONE);
    CU_ASSERT_EQUAL(y[C + 2], y0[C + 2] + b[2]);
    memcpy(dy, dy0, sizeof dy);
    k->bias_act_bwd(dy, y, db, R, C, RM_ACT_NONE);
    CU_ASSERT_EQUAL(dy[3], dy0[3]);
    double s0 = 0;
    for (int r = 0; r < R; r++)
        s0 += dy0[r * C];
    CU_ASSERT_DOUBLE_EQUAL(db[0], s0, 1e-5);
}

static void test_softmax_xent(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    const int R = 4, C = 10;
    float z[40], d[40], loss = -1;
    int32_t lab[4] = {0, 9, 3, 3};
    unsigned s = 11;
    for (int i = 0; i < R * C; i++)
        z[i] = frand(&s) * 5;
    z[2 * C + 3] = 80.0f; /* large logit: must not overflow */
    k->softmax_xent_fwd_bwd(z, lab, R, C, 0.25f, d, &loss);
    double want = 0;
    for (int r = 0; r < R; r++) {
        double mx = -1e30, sum = 0;
        for (int c = 0; c < C; c++)
            mx = z[r * C + c] > mx ? z[r * C + c] : mx;
        for (int c = 0; c < C; c++)
            sum += exp(z[r * C + c] - mx);
        want += -(z[r * C + lab[r]] - mx - log(sum));
        double gsum = 0;
        for (int c = 0; c < C; c++) {
            double p = exp(z[r * C + c] - mx) / sum;
            double g = (p - (c == lab[r])) * 0.25;
            CU_ASSERT_DOUBLE_EQUAL(d[r * C + c], g, 1e-6);
            gsum += d[r * C + c];
        }
        CU_ASSERT_DOUBLE_EQUAL(gsum, 0.0, 1e-6); /* softmax - onehot sums to 0 */
    }
    CU_ASSERT_DOUBLE_EQUAL(loss, want, 1e-4);
    CU_ASSERT(isfinite(loss));
    /* in place (dlogits aliases logits) gives the same gradient */
    float z2[40];
    memcpy(z2, z, sizeof z);
    float loss2 = 0;
    k->softmax_xent_fwd_bwd(z2, lab, R, C, 0.25f, z2, &loss2);
    CU_ASSERT_EQUAL(memcmp(z2, d, sizeof d), 0);
    CU_ASSERT_EQUAL(loss2, loss);
}

static void test_argmax(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    float z[3 * 4] = {0, 1, 2, 3, /* -> 3 */ 5, 5, 1, 0, /* tie -> first (0) */ 9, 0, 0, 0};
    int32_t lab[3] = {3, 1, 0}, n = -1;
    k->argmax_correct(z, lab, 3, 4, &n);
    CU_ASSERT_EQUAL(n, 2); /* row 1's tie resolves to 0, not 1 */
}

static void test_optimizers(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    /* SGD momentum with weight decay, two steps by hand:
     * w=1, g=0.5, wd=0.1, mom=0.9, lr=0.1:
     * step1: g'=0.6, v=0.6, w=1-0.06=0.94
     * step2: g'=0.5+0.094=0.594, v=0.54+0.594=1.134, w=0.94-0.1134=0.8266 */
    float w = 1.0f, g = 0.5f, v = 0.0f;
    k->sgd_momentum_update(&w, &g, &v, 1, 0.1f, 0.9f, 0.1f);
    CU_ASSERT_DOUBLE_EQUAL(w, 0.94, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(v, 0.6, 1e-6);
    k->sgd_momentum_update(&w, &g, &v, 1, 0.1f, 0.9f, 0.1f);
    CU_ASSERT_DOUBLE_EQUAL(v, 1.134, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w, 0.8266, 1e-6);

    /* Adam, first step: m = 0.1 g, v = 0.001 g^2, bc1 = 0.1, bc2 = 0.001 ->
     * update = lr * g / (|g| + eps) = lr * sign(g) (for eps small) */
    float wa[2] = {1.0f, -2.0f}, ga[2] = {0.3f, -4.0f}, m[2] = {0}, va[2] = {0};
    k->adam_update(wa, ga, m, va, 2, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f);
    CU_ASSERT_DOUBLE_EQUAL(wa[0], 1.0 - 0.01, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(wa[1], -2.0 + 0.01, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(m[0], 0.03, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(va[1], 0.016, 1e-6);
    /* second step by the formula in double */
    double mm = 0.9 * 0.03 + 0.1 * 0.3, vv = 0.999 * 0.00009 + 0.001 * 0.09;
    double bc1 = 1 - 0.81, bc2 = 1 - 0.999 * 0.999;
    double want = (1.0 - 0.01) - 0.01 * (mm / bc1) / (sqrt(vv / bc2) + 1e-8);
    k->adam_update(wa, ga, m, va, 2, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, (float)bc1, (float)bc2);
    CU_ASSERT_DOUBLE_EQUAL(wa[0], want, 1e-6);

    /* Adagrad: s = g^2 = 4, w -= lr * g / (2 + eps) = 1 - 0.1 * 2 / 2 = 0.9; then s = 8 */
    float wg = 1.0f, gg = 2.0f, sg = 0.0f;
    k->adagrad_update(&wg, &gg, &sg, 1, 0.1f, 1e-10f, 0.0f);
    CU_ASSERT_DOUBLE_EQUAL(wg, 0.9, 1e-6);
    k->adagrad_update(&wg, &gg, &sg, 1, 0.1f, 1e-10f, 0.0f);
    CU_ASSERT_DOUBLE_EQUAL(sg, 8.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(wg, 0.9 - 0.2 / sqrt(8.0), 1e-6);
}

static void test_scale_unscale(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    float x[5] = {1, 2, 3, 4, 5};
    k->scale(x, 5, 2.0f);
    CU_ASSERT_EQUAL(x[4], 10.0f);
    int32_t inf = 0;
    k->unscale_check_finite(x, 5, 0.5f, &inf);
    CU_ASSERT_EQUAL(x[2], 3.0f);
    CU_ASSERT_EQUAL(inf, 0);
    x[1] = INFINITY;
    k->unscale_check_finite(x, 5, 0.5f, &inf);
    CU_ASSERT_EQUAL(inf, 1);
    inf = 0;
    x[1] = NAN;
    k->unscale_check_finite(x, 5, 1.0f, &inf);
    CU_ASSERT_EQUAL(inf, 1);
}

void rm_suite_kernels(void)
{
    static const rm_test_case cases[] = {
        {"lookup_alloc", test_lookup},
        {"gemm_vs_naive", test_gemm},
        {"bias_act", test_bias_act},
        {"softmax_xent", test_softmax_xent},
        {"argmax", test_argmax},
        {"optimizers_by_hand", test_optimizers},
        {"scale_unscale", test_scale_unscale},
    };
    RM_ADD_SUITE("kernels", NULL, NULL, cases);
}
