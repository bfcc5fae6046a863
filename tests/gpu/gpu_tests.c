/* gpu_tests.c — checks of the GPU path that need a GPU (run by tests/gpu/run.sh, `make test-gpu`):
 *   - every entry of the CUDA kernels table against the CPU table (kernels/kernels_cpu.c) or the C
 *     conversions (worker/gpu.c) as oracle, with a tolerance per dtype: bit-exact where the
 *     arithmetic is the same (casts, relu forward, argmax), accumulation-order bounds elsewhere,
 *     TF32 rounding bounds for fp32 gemm, and for bf16/fp16 gemm the CPU product of the rounded
 *     inputs (bf16/fp16 products are exact in fp32, so only the summation order differs);
 *   - the loss-scaler sequence driven by the GPU overflow flag;
 *   - a one-rank NCCL allreduce (device and host buffers, sum/avg, bf16, barrier, abort);
 *   - the checkpoint round trip GPU -> file -> CPU and back (same logits, same bits);
 *   - the transformer's kernels (kernels/transformer.h) against kernels/transformer_cpu.c: odd
 *     shapes and GPT-2's, outputs poisoned with NaN first (accumulated ones start random), the
 *     error as ||gpu - cpu|| / ||cpu|| (fp32: far under 1e-3), never NaN.
 * Prints "SKIP: no GPU present (<reason>)" and exits 0 without a usable GPU. Exit 1 on any failure.
 * Usage: gpu_tests [--quick]   (--quick: smaller shapes, for compute-sanitizer runs) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/transformer.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/comm/comm.h"
#include "worker/gpu.h"
#include "worker/model/mlp.h"

static int g_fail, g_checks;
static int g_quick;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        g_checks++;                                                         \
        if (!(cond)) {                                                      \
            g_fail++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

static const rm_kernels *G, *C; /* GPU table, CPU oracle table */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform [-1, 1) */
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *hrand(size_t n, float scale)
{
    float *p = malloc(n * sizeof *p);
    if (!p)
        abort();
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}

static void *dup_to_gpu(const void *h, size_t bytes)
{
    void *d = G->alloc(bytes);
    if (!d)
        abort();
    G->h2d(d, h, bytes);
    return d;
}

static void *from_gpu(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    if (!h)
        abort();
    G->d2h(h, d, bytes);
    return h;
}

static int gpu_errors(const char *where)
{
    rm_err e = {0};
    int rc = rm_cuda_check(&e);
    CHECK(rc == RM_OK, "%s: CUDA table error: %s", where, e.msg);
    return rc;
}

/* max over i of |a-b| / (atol + rtol * ref_i) — returns the worst ratio (<= 1 passes) */
static double worst_ratio(const float *a, const float *b, const float *ref_mag, size_t n, double atol,
                          double rtol, size_t *at)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = atol + rtol * (ref_mag ? ref_mag[i] : fabs((double)b[i]));
        double d = fabs((double)a[i] - (double)b[i]);
        double r = isnan(a[i]) != isnan(b[i]) ? INFINITY : (isnan(a[i]) ? 0 : d / tol);
        if (r > worst) {
            worst = r;
            if (at)
                *at = i;
        }
    }
    return worst;
}

/* ---------------------------------------------------------------- gemm */

/* |op(A)||op(B)| row-major, the scale of each output's rounding error */
static void gemm_mag(bool ta, bool tb, int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                     float *mag)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                float av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                float bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += fabs((double)av * bv);
            }
            mag[(size_t)i * n + j] = (float)s;
        }
}

static void round_array(float *x, size_t n, rm_precision p)
{
    for (size_t i = 0; i < n; i++)
        x[i] = p == RM_PREC_BF16 ? rm_bf16_to_f32(rm_f32_to_bf16(x[i])) : rm_f16_to_f32(rm_f32_to_f16(x[i]));
}

static void test_gemm_case(rm_precision prec, bool ta, bool tb, int m, int n, int k, float beta)
{
    int pad = 3; /* leading dimensions larger than the logical width */
    int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
    size_t na = (size_t)a_rows * lda, nb = (size_t)b_rows * ldb, nc = (size_t)m * ldc;
    float *a = hrand(na, 1.0f), *b = hrand(nb, 1.0f), *c0 = hrand(nc, 1.0f);
    float *ca = malloc(na * 4), *cb = malloc(nb * 4), *cc = malloc(nc * 4), *mag = malloc((size_t)m * n * 4);
    memcpy(ca, a, na * 4);
    memcpy(cb, b, nb * 4);
    memcpy(cc, c0, nc * 4);
    float *da = dup_to_gpu(a, na * 4), *db = dup_to_gpu(b, nb * 4), *dc = dup_to_gpu(c0, nc * 4);
    rm_err e = {0};
    CHECK(rm_cuda_set_precision(prec, &e) == RM_OK, "%s", e.msg);
    float alpha = 0.75f;
    G->gemm(ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
    float *gc = from_gpu(dc, nc * 4);
    rm_cuda_set_precision(RM_PREC_FP32, &e);
    gpu_errors("gemm");
    double rtol;
    if (prec == RM_PREC_FP32) {
        const char *o = getenv("NVIDIA_TF32_OVERRIDE");
        rtol = (o && !strcmp(o, "0")) ? 1e-5 : 2.5e-3; /* TF32 inputs: 10-bit mantissa */
    } else {
        round_array(ca, na, prec); /* the oracle multiplies rounded inputs */
        round_array(cb, nb, prec);
        rtol = 2e-5; /* exact products; order of sums only */
    }
    C->gemm(ta, tb, m, n, k, alpha, ca, lda, cb, ldb, beta, cc, ldc);
    gemm_mag(ta, tb, m, n, k, ca, lda, cb, ldb, mag);
    double worst = 0;
    size_t at = 0;
    for (int i = 0; i < m; i++) {
        float magrow[4096];
        for (int j = 0; j < n && j < 4096; j++)
            magrow[j] = fabsf(alpha) * mag[(size_t)i * n + j] + fabsf(beta * c0[(size_t)i * ldc + j]);
        size_t a_at = 0;
        double r =
            worst_ratio(gc + (size_t)i * ldc, cc + (size_t)i * ldc, magrow, (size_t)n, 1e-6, rtol, &a_at);
        if (r > worst) {
            worst = r;
            at = (size_t)i * ldc + a_at;
        }
        /* the padding columns must be untouched */
        for (int j = n; j < ldc; j++)
            CHECK(gc[(size_t)i * ldc + j] == c0[(size_t)i * ldc + j], "gemm wrote past n at %d,%d", i, j);
    }
    CHECK(worst <= 1.0,
          "gemm %s ta=%d tb=%d m=%d n=%d k=%d beta=%g: worst error ratio %.3g at %zu "
          "(gpu %g cpu %g)",
          rm_precision_str(prec), ta, tb, m, n, k, beta, worst, at, gc[at], cc[at]);
    G->free(da);
    G->free(db);
    G->free(dc);
    free(a), free(b), free(c0), free(ca), free(cb), free(cc), free(mag), free(gc);
}

/* The 16-bit operand cache (kernels/cast_cache.h): a gemm that reads a buffer rewritten since its
 * last cast — by h2d, an optimizer entry, d2d, or another gemm's output — must see the new values.
 * Small integers keep every bf16 input, product and sum exact, so GPU and CPU agree bit for bit. */
static void cache_gemm_case(const char *what, int m, int n, int k, const float *da, const float *db,
                            float *dc, const float *ha, const float *hb)
{
    float *want = calloc((size_t)m * n, 4);
    G->gemm(false, false, m, n, k, 1.0f, da, k, db, n, 0.0f, dc, n);
    C->gemm(false, false, m, n, k, 1.0f, ha, k, hb, n, 0.0f, want, n);
    float *got = from_gpu(dc, (size_t)m * n * 4);
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)m * n; i++)
        bad += got[i] != want[i];
    CHECK(bad == 0, "bf16 gemm after %s: %zu of %d values stale (e.g. gpu %g cpu %g)", what, bad, m * n,
          got[0], want[0]);
    free(want);
    free(got);
}

static void test_gemm_operand_cache(void)
{
    enum { M = 16, N = 16, K = 16 };
    float ha[M * K], hb[K * N], hc[M * N];
    for (int i = 0; i < M * K; i++)
        ha[i] = (float)(i % 7 - 3);
    for (int i = 0; i < K * N; i++)
        hb[i] = (float)(i % 5 - 2);
    float *da = dup_to_gpu(ha, sizeof ha), *db = dup_to_gpu(hb, sizeof hb), *dc = G->alloc(sizeof hc);
    float *dt = G->alloc(sizeof ha);
    rm_err e = {0};
    CHECK(rm_cuda_set_precision(RM_PREC_BF16, &e) == RM_OK, "%s", e.msg);
    cache_gemm_case("the first cast", M, N, K, da, db, dc, ha, hb);
    cache_gemm_case("nothing changed", M, N, K, da, db, dc, ha, hb);
    for (int i = 0; i < M * K; i++)
        ha[i] = (float)(i % 3 - 1);
    G->h2d(da, ha, sizeof ha);
    cache_gemm_case("h2d into A", M, N, K, da, db, dc, ha, hb);
    G->scale(db, K * N, 2.0f);
    for (int i = 0; i < K * N; i++)
        hb[i] *= 2.0f;
    cache_gemm_case("scale of B", M, N, K, da, db, dc, ha, hb);
    for (int i = 0; i < M * K; i++)
        hc[i] = (float)(i % 4);
    G->h2d(dt, hc, sizeof hc);
    G->d2d(da, dt, sizeof ha);
    memcpy(ha, hc, sizeof ha);
    cache_gemm_case("d2d into A", M, N, K, da, db, dc, ha, hb);
    /* C of one gemm is A of the next: the first product's values, then a rewritten C */
    G->gemm(false, false, M, N, K, 1.0f, da, K, db, N, 0.0f, dt, N);
    C->gemm(false, false, M, N, K, 1.0f, ha, K, hb, N, 0.0f, hc, N);
    round_array(hc, M * N, RM_PREC_BF16);
    cache_gemm_case("a gemm wrote A", M, N, K, dt, db, dc, hc, hb);
    G->scale(dt, M * K, 0.5f);
    for (int i = 0; i < M * K; i++)
        hc[i] *= 0.5f;
    cache_gemm_case("a scaled product as A", M, N, K, dt, db, dc, hc, hb);
    rm_cuda_set_precision(RM_PREC_FP32, &e);
    gpu_errors("gemm operand cache");
    G->free(da);
    G->free(db);
    G->free(dc);
    G->free(dt);
    printf("ok bf16 gemm operands re-cast after every kind of write\n");
}

static void test_gemm(void)
{
    int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 10, 256}, {33, 129, 65}, {128, 512, 784}};
    int ns = g_quick ? 3 : 5;
    for (int p = RM_PREC_FP32; p <= RM_PREC_FP16; p++)
        for (int s = 0; s < ns; s++)
            for (int t = 0; t < 4; t++)
                test_gemm_case((rm_precision)p, t & 1, t & 2, shapes[s][0], shapes[s][1], shapes[s][2],
                               t == 3 ? 0.5f : 0.0f);
    /* k = 0: C = beta C */
    test_gemm_case(RM_PREC_FP32, false, false, 4, 6, 0, 0.5f);
    printf("ok gemm (fp32/TF32, bf16, fp16; all transposes; padded leading dims)\n");
}

/* ---------------------------------------------------------------- elementwise and reductions */

static void test_bias_act(void)
{
    int shapes[][2] = {{1, 1}, {64, 512}, {37, 10}, {257, 33}, {3, 1000}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        for (int act = RM_ACT_NONE; act <= RM_ACT_RELU; act++) {
            float *y = hrand(n, 2.0f), *b = hrand((size_t)cols, 1.0f), *dy = hrand(n, 1.0f);
            float *dy_y = dup_to_gpu(y, n * 4), *d_b = dup_to_gpu(b, (size_t)cols * 4);
            G->bias_act_fwd(dy_y, d_b, rows, cols, (rm_act)act);
            C->bias_act_fwd(y, b, rows, cols, (rm_act)act);
            float *gy = from_gpu(dy_y, n * 4);
            CHECK(memcmp(gy, y, n * 4) == 0, "bias_act_fwd act=%d %dx%d not bit-identical", act, rows, cols);
            /* backward on the forward output */
            float *d_dy = dup_to_gpu(dy, n * 4), *d_db = G->alloc((size_t)cols * 4);
            float *cdb = malloc((size_t)cols * 4), *mag = calloc((size_t)cols, 4);
            for (size_t i = 0; i < n; i++)
                mag[i % cols] += fabsf(dy[i]);
            G->bias_act_bwd(d_dy, dy_y, d_db, rows, cols, (rm_act)act);
            C->bias_act_bwd(dy, y, cdb, rows, cols, (rm_act)act);
            float *gdy = from_gpu(d_dy, n * 4), *gdb = from_gpu(d_db, (size_t)cols * 4);
            CHECK(memcmp(gdy, dy, n * 4) == 0, "bias_act_bwd dY act=%d %dx%d not bit-identical", act, rows,
                  cols);
            double r = worst_ratio(gdb, cdb, mag, (size_t)cols, 1e-7, 1e-6, NULL);
            CHECK(r <= 1.0, "bias_act_bwd db act=%d %dx%d ratio %.3g", act, rows, cols, r);
            G->free(dy_y), G->free(d_b), G->free(d_dy), G->free(d_db);
            free(y), free(b), free(dy), free(gy), free(cdb), free(mag), free(gdy), free(gdb);
        }
    }
    gpu_errors("bias_act");
    printf("ok bias_act_fwd/bwd (relu, none)\n");
}

static void test_softmax_argmax(void)
{
    int shapes[][2] = {{1, 10}, {64, 10}, {100, 10}, {513, 37}, {8192, 10}, {4, 1000}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], classes = shapes[s][1];
        size_t n = (size_t)rows * classes;
        float *x = hrand(n, 8.0f);
        int32_t *lab = malloc((size_t)rows * 4);
        for (int r = 0; r < rows; r++)
            lab[r] = (int32_t)((frand() + 1.0f) * 0.5f * classes) % classes;
        if (rows > 3) { /* ties: argmax must take the first maximum */
            x[(size_t)1 * classes + 2] = x[(size_t)1 * classes + 5] = 100.0f;
            lab[1] = 2;
        }
        float inv_batch = 1.0f / (float)rows;
        float *dx = dup_to_gpu(x, n * 4), *dd = G->alloc(n * 4), *dloss = G->alloc(4);
        int32_t *dlab = dup_to_gpu(lab, (size_t)rows * 4), *dcorr = G->alloc(4);
        G->argmax_correct(dx, dlab, rows, classes, dcorr);
        G->softmax_xent_fwd_bwd(dx, dlab, rows, classes, inv_batch, dd, dloss);
        float *cd = malloc(n * 4), closs = 0, gloss = 0;
        int32_t ccorr = -1, gcorr = -2;
        C->argmax_correct(x, lab, rows, classes, &ccorr);
        C->softmax_xent_fwd_bwd(x, lab, rows, classes, inv_batch, cd, &closs);
        float *gd = from_gpu(dd, n * 4);
        G->d2h(&gloss, dloss, 4);
        G->d2h(&gcorr, dcorr, 4);
        CHECK(gcorr == ccorr, "argmax_correct %dx%d: gpu %d cpu %d", rows, classes, gcorr, ccorr);
        CHECK(fabsf(gloss - closs) <= 1e-5f * fabsf(closs) + 1e-5f, "xent loss %dx%d: gpu %.9g cpu %.9g",
              rows, classes, gloss, closs);
        /* the gradient (p - [label]) / B carries a few ulp of p, ~1e-6 absolute near p = 1: the
         * absolute part is relative to 1/B (1e-7/B failed a correct kernel on most datasets; see
         * tests/unit/test_kernel_emu.c, which runs this kernel's reduction on the CPU) */
        double r = worst_ratio(gd, cd, NULL, n, 4e-6 * inv_batch, 1e-5, NULL);
        CHECK(r <= 1.0, "xent dlogits %dx%d ratio %.3g", rows, classes, r);
        /* in place (dlogits aliases logits) gives the same */
        G->softmax_xent_fwd_bwd(dx, dlab, rows, classes, inv_batch, dx, dloss);
        float *gd2 = from_gpu(dx, n * 4);
        CHECK(memcmp(gd2, gd, n * 4) == 0, "xent in place differs %dx%d", rows, classes);
        if (rows > 5 && classes > 3) { /* NaN logits: argmax follows the C loop exactly */
            x[(size_t)3 * classes + 1] = NAN;
            x[(size_t)3 * classes + classes - 1] = 500.0f;
            lab[3] = classes - 1;
            x[(size_t)4 * classes + 0] = NAN;
            lab[4] = 0;
            x[(size_t)5 * classes + 2] = NAN;
            x[(size_t)5 * classes + 3] = NAN;
            G->h2d(dx, x, n * 4);
            G->h2d(dlab, lab, (size_t)rows * 4);
            G->argmax_correct(dx, dlab, rows, classes, dcorr);
            C->argmax_correct(x, lab, rows, classes, &ccorr);
            G->d2h(&gcorr, dcorr, 4);
            CHECK(gcorr == ccorr, "argmax_correct with NaNs %dx%d: gpu %d cpu %d", rows, classes, gcorr,
                  ccorr);
        }
        G->free(dx), G->free(dd), G->free(dloss), G->free(dlab), G->free(dcorr);
        free(x), free(lab), free(cd), free(gd), free(gd2);
    }
    gpu_errors("softmax/argmax");
    printf("ok softmax_xent_fwd_bwd, argmax_correct\n");
}

static void test_optimizers(void)
{
    size_t n = g_quick ? 1000 : 1000003;
    float *w = hrand(n, 1), *g = hrand(n, 1), *s1 = hrand(n, 0.1f), *s2 = hrand(n, 0.1f);
    for (size_t i = 0; i < n; i++)
        s2[i] = fabsf(s2[i]); /* second moments / sums are non-negative */
    for (int opt = 0; opt < 4; opt++) {
        float *dw = dup_to_gpu(w, n * 4), *dg = dup_to_gpu(g, n * 4);
        float *d1 = dup_to_gpu(s1, n * 4), *d2 = dup_to_gpu(s2, n * 4);
        float *cw = malloc(n * 4), *c1 = malloc(n * 4), *c2 = malloc(n * 4);
        memcpy(cw, w, n * 4), memcpy(c1, s1, n * 4), memcpy(c2, s2, n * 4);
        const char *name = "";
        for (int step = 0; step < 3; step++) {
            switch (opt) {
            case 0:
                name = "sgd_momentum";
                G->sgd_momentum_update(dw, dg, d1, n, 0.05f, 0.9f, 1e-4f);
                C->sgd_momentum_update(cw, g, c1, n, 0.05f, 0.9f, 1e-4f);
                break;
            case 1: {
                name = "adam";
                float bc1 = 1.0f - powf(0.9f, (float)(step + 1)),
                      bc2 = 1.0f - powf(0.999f, (float)(step + 1));
                G->adam_update(dw, dg, d1, d2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, bc1, bc2);
                C->adam_update(cw, g, c1, c2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, bc1, bc2);
                break;
            }
            case 2:
                name = "adagrad";
                G->adagrad_update(dw, dg, d2, n, 0.01f, 1e-10f, 0.0f);
                C->adagrad_update(cw, g, c2, n, 0.01f, 1e-10f, 0.0f);
                break;
            case 3:
                name = "scale";
                G->scale(dw, n, 0.37f);
                C->scale(cw, n, 0.37f);
                break;
            }
        }
        float *gw = from_gpu(dw, n * 4);
        double r = worst_ratio(gw, cw, NULL, n, 1e-6, 1e-5, NULL);
        CHECK(r <= 1.0, "%s weights ratio %.3g", name, r);
        G->free(dw), G->free(dg), G->free(d1), G->free(d2);
        free(cw), free(c1), free(c2), free(gw);
    }
    free(w), free(g), free(s1), free(s2);
    gpu_errors("optimizers");
    printf("ok sgd_momentum, adam, adagrad, scale\n");
}

static float fb(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void test_casts(void)
{
    /* specials, ties, subnormals, overflow edges, then random values over many magnitudes */
    size_t n = 1 << 16;
    float *x = malloc(n * 4);
    uint32_t special[] = {0x00000000u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
                          0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0x477fe000u,
                          0x477ff000u, 0x477fefffu, 0x33000000u, 0x33400000u, 0x33c00000u, 0x38800000u,
                          0x387fc000u, 0x00000001u, 0x00018000u, 0x39235000u, 0x3a251000u};
    size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < n; i++)
        x[i] = i < ns ? fb(special[i]) : frand() * ldexpf(1.0f, (int)(i % 80) - 40);
    uint16_t *hb = malloc(n * 2), *hh = malloc(n * 2);
    rm_f32_to_bf16_n(x, hb, n);
    rm_f32_to_f16_n(x, hh, n);
    float *dx = dup_to_gpu(x, n * 4);
    uint16_t *db = G->alloc(n * 2), *dh = G->alloc(n * 2);
    G->cast_f32_to_bf16(dx, db, n);
    G->cast_f32_to_f16(dx, dh, n);
    uint16_t *gb = from_gpu(db, n * 2), *gh = from_gpu(dh, n * 2);
    size_t bad_b = 0, bad_h = 0;
    for (size_t i = 0; i < n; i++) {
        bool nan_b = isnan(rm_bf16_to_f32(hb[i])), nan_h = isnan(rm_f16_to_f32(hh[i]));
        if (nan_b ? !isnan(rm_bf16_to_f32(gb[i])) : gb[i] != hb[i])
            bad_b++;
        if (nan_h ? !isnan(rm_f16_to_f32(gh[i])) : gh[i] != hh[i])
            bad_h++;
    }
    CHECK(bad_b == 0, "cast_f32_to_bf16: %zu values differ from rm_f32_to_bf16", bad_b);
    CHECK(bad_h == 0, "cast_f32_to_f16: %zu values differ from rm_f32_to_f16", bad_h);
    /* back to fp32: every 16-bit pattern */
    uint16_t *all = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        all[i] = (uint16_t)i;
    G->h2d(db, all, n * 2);
    float *df = G->alloc(n * 4);
    G->cast_bf16_to_f32(db, df, n);
    float *gf = from_gpu(df, n * 4);
    bad_b = 0;
    for (size_t i = 0; i < n; i++) {
        float want = rm_bf16_to_f32(all[i]);
        if (isnan(want) ? !isnan(gf[i]) : memcmp(&want, &gf[i], 4) != 0)
            bad_b++;
    }
    free(gf);
    G->cast_f16_to_f32(db, df, n);
    gf = from_gpu(df, n * 4);
    bad_h = 0;
    for (size_t i = 0; i < n; i++) {
        float want = rm_f16_to_f32(all[i]);
        if (isnan(want) ? !isnan(gf[i]) : memcmp(&want, &gf[i], 4) != 0)
            bad_h++;
    }
    CHECK(bad_b == 0, "cast_bf16_to_f32: %zu patterns differ", bad_b);
    CHECK(bad_h == 0, "cast_f16_to_f32: %zu patterns differ", bad_h);
    G->free(dx), G->free(db), G->free(dh), G->free(df);
    free(x), free(hb), free(hh), free(gb), free(gh), free(all), free(gf);
    gpu_errors("casts");
    printf("ok casts f32<->bf16, f32<->fp16 (bit-exact with worker/gpu.c)\n");
}

static void test_unscale_and_scaler(void)
{
    size_t n = g_quick ? 4096 : (1u << 20);
    float *x = hrand(n, 100.0f);
    float *dx = dup_to_gpu(x, n * 4);
    int32_t *dflag = G->alloc(4), flag = -1;
    G->unscale_check_finite(dx, n, 1.0f / 65536.0f, dflag);
    G->d2h(&flag, dflag, 4);
    CHECK(flag == 0, "unscale on finite data set the flag (%d)", flag);
    float *gx = from_gpu(dx, n * 4);
    C->unscale_check_finite(x, n, 1.0f / 65536.0f, &flag);
    CHECK(memcmp(gx, x, n * 4) == 0, "unscale values differ from the CPU table");
    /* one inf far in, one NaN elsewhere: the flag rises and stays up across calls */
    float inf = INFINITY, nan = NAN;
    G->h2d(dx + n - 3, &inf, 4);
    G->unscale_check_finite(dx, n, 0.5f, dflag);
    G->d2h(&flag, dflag, 4);
    CHECK(flag == 1, "inf not detected");
    G->memset0(dflag, 4);
    G->h2d(dx + n - 3, &x[0], 4);
    G->h2d(dx + 7, &nan, 4);
    G->unscale_check_finite(dx, n, 0.5f, dflag);
    G->d2h(&flag, dflag, 4);
    CHECK(flag == 1, "NaN not detected");

    /* the scaler sequence on GPU-produced flags: finite, overflow, finite... */
    rm_loss_scaler s;
    rm_loss_scaler_init(&s, RM_PREC_FP16);
    float big = 60000.0f; /* fine in fp32, overflows fp16 once scaled: emulate fp16 grads */
    int applied = 0;
    for (int step = 0; step < 6; step++) {
        G->memset0(dflag, 4);
        float v = step == 2 ? big * rm_loss_scaler_scale(&s) * 1e30f : 1.0f; /* step 2: inf */
        G->h2d(dx, &v, 4);
        G->unscale_check_finite(dx, 1, rm_loss_scaler_inv_scale(&s), dflag);
        G->d2h(&flag, dflag, 4);
        applied += rm_loss_scaler_update(&s, rm_loss_scaler_agree_flag(rm_loss_scaler_flag_value(flag != 0)));
    }
    CHECK(applied == 5 && s.skipped == 1 && s.scale == 32768.0f, "scaler: applied %d skipped %lld scale %g",
          applied, (long long)s.skipped, s.scale);
    G->free(dx), G->free(dflag);
    free(x), free(gx);
    gpu_errors("unscale");
    printf("ok unscale_check_finite and the loss-scaler sequence\n");
}

static void test_memory(void)
{
    size_t n = 1000;
    char *h = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        h[i] = (char)(i * 7);
    char *d1 = G->alloc(n), *d2 = G->alloc(n);
    G->d2h(back, d1, n);
    int zero = 1;
    for (size_t i = 0; i < n; i++)
        zero &= back[i] == 0;
    CHECK(zero, "alloc is not zero-filled");
    G->h2d(d1, h, n);
    G->d2d(d2, d1, n);
    G->d2h(back, d2, n);
    CHECK(memcmp(back, h, n) == 0, "h2d/d2d/d2h round trip");
    G->memset0(d2 + 10, 20);
    G->sync();
    G->d2h(back, d2, n);
    CHECK(back[9] == h[9] && back[10] == 0 && back[29] == 0 && back[30] == h[30], "memset0 range");
    G->free(d1), G->free(d2), G->free(NULL);
    free(h), free(back);
    gpu_errors("memory");
    printf("ok alloc/free/memset0/h2d/d2h/d2d/sync\n");
}

/* ---------------------------------------------------------------- NCCL, one rank */

static void test_nccl_one_rank(void)
{
    const rm_comm_ops *ops = rm_comm_nccl_ops();
    CHECK(ops != NULL, "no nccl table in a CUDA build");
    if (!ops)
        return;
    rm_comm_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.rank = 0;
    cfg.world_size = 1;
    cfg.listen_fd = -1;
    cfg.timeout_s = 20;
    cfg.device = 0;
    rm_comm *c = NULL;
    rm_err e = {0};
    int rc = ops->init(&cfg, &c, &e);
    CHECK(rc == RM_OK, "nccl init: %s", e.msg);
    if (rc != RM_OK)
        return;
    size_t n = g_quick ? 1000 : (1u << 22) + 3;
    float *x = hrand(n, 1.0f);
    float *dx = dup_to_gpu(x, n * 4);
    rc = ops->allreduce(c, dx, n, RM_DT_F32, RM_OP_SUM, &e);
    CHECK(rc == RM_OK, "allreduce sum: %s", e.msg);
    float *gx = from_gpu(dx, n * 4);
    CHECK(memcmp(gx, x, n * 4) == 0, "one-rank sum must be the identity");
    rc = ops->allreduce(c, dx, n, RM_DT_F32, RM_OP_AVG, &e);
    CHECK(rc == RM_OK, "allreduce avg: %s", e.msg);
    free(gx);
    gx = from_gpu(dx, n * 4);
    CHECK(memcmp(gx, x, n * 4) == 0, "one-rank avg must be the identity");
    /* out of place, device -> device */
    float *dy = G->alloc(n * 4);
    rc = ops->allreduce_oop(c, dx, dy, n, RM_DT_F32, RM_OP_SUM, &e);
    free(gx);
    gx = from_gpu(dy, n * 4);
    CHECK(rc == RM_OK && memcmp(gx, x, n * 4) == 0, "allreduce_oop: %s", e.msg);
    /* bf16 */
    uint16_t *hb = malloc(n * 2), *gb = malloc(n * 2);
    rm_f32_to_bf16_n(x, hb, n);
    G->h2d(dy, hb, n * 2);
    rc = ops->allreduce(c, dy, n, RM_DT_BF16, RM_OP_SUM, &e);
    G->d2h(gb, dy, n * 2);
    CHECK(rc == RM_OK && memcmp(gb, hb, n * 2) == 0, "bf16 allreduce: %s", e.msg);
    /* reduce_scatter / all_gather (docs/strategies.md#sharding): one rank's shard is the whole vector;
     * an odd count on device memory takes the direct path at world 1, host memory the padded staging
     * path */
    G->h2d(dx, x, n * 4);
    rc = ops->reduce_scatter(c, dx, dy, n, RM_DT_F32, RM_OP_AVG, &e);
    free(gx);
    gx = from_gpu(dy, n * 4);
    CHECK(rc == RM_OK && memcmp(gx, x, n * 4) == 0, "reduce_scatter: %s", e.msg);
    G->memset0(dx, n * 4);
    rc = ops->all_gather(c, dy, dx, n, RM_DT_F32, &e);
    free(gx);
    gx = from_gpu(dx, n * 4);
    CHECK(rc == RM_OK && memcmp(gx, x, n * 4) == 0, "all_gather: %s", e.msg);
    float hs[7] = {1, 2, 3, 4, 5, 6, 7}, hg[7] = {0};
    rc = ops->all_gather(c, hs, hg, 7, RM_DT_F32, &e);
    CHECK(rc == RM_OK && memcmp(hs, hg, sizeof hs) == 0, "host all_gather: %s", e.msg);
    rc = ops->reduce_scatter(c, hg, hs, 0, RM_DT_F32, RM_OP_SUM, &e);
    CHECK(rc == RM_OK, "reduce_scatter count 0: %s", e.msg);
    /* host buffer (staged): e.g. the loss-scaler flag */
    float flag = 1.0f;
    rc = ops->allreduce(c, &flag, 1, RM_DT_F32, RM_OP_SUM, &e);
    CHECK(rc == RM_OK && flag == 1.0f, "host-buffer allreduce: rc=%d flag=%g %s", rc, flag, e.msg);
    rc = ops->allreduce(c, dx, 0, RM_DT_F32, RM_OP_SUM, &e);
    CHECK(rc == RM_OK, "count 0");
    rc = ops->barrier(c, &e);
    CHECK(rc == RM_OK, "barrier: %s", e.msg);
    /* after abort every collective fails fast; destroy still cleans up */
    ops->abort(c);
    rc = ops->allreduce(c, dx, n, RM_DT_F32, RM_OP_SUM, &e);
    CHECK(rc == RM_ECLOSED, "allreduce after abort gave %d", rc);
    ops->destroy(c);
    /* a second communicator (next epoch) works after the first was aborted */
    c = NULL;
    cfg.epoch = 1;
    rc = ops->init(&cfg, &c, &e);
    CHECK(rc == RM_OK, "re-init after abort: %s", e.msg);
    if (rc == RM_OK) {
        rc = ops->allreduce(c, dx, n, RM_DT_F32, RM_OP_SUM, &e);
        CHECK(rc == RM_OK, "allreduce on the new communicator: %s", e.msg);
        ops->destroy(c);
    }
    G->free(dx), G->free(dy);
    free(x), free(gx), free(hb), free(gb);
    gpu_errors("nccl");
    printf("ok nccl one rank (sum, avg, oop, bf16, host buffer, barrier, abort, re-init)\n");
}

/* ---------------------------------------------------------------- checkpoint round trip */

static void test_checkpoint_roundtrip(void)
{
    rm_model_shape shape;
    int hidden[2] = {512, 256};
    rm_err e = {0};
    CHECK(rm_mlp_shape(&shape, 784, hidden, 2, 10, &e) == RM_OK, "%s", e.msg);
    int batch = 64;
    rm_model gm, cm;
    memset(&gm, 0, sizeof gm);
    memset(&cm, 0, sizeof cm);
    if (rm_model_init(&gm, G, &rm_model_mlp, &shape, batch, &e) != RM_OK ||
        rm_model_init(&cm, C, &rm_model_mlp, &shape, batch, &e) != RM_OK) {
        CHECK(0, "model init: %s", e.msg);
        goto out;
    }
    CHECK(rm_model_init_params(&gm, 1234, &e) == RM_OK, "%s", e.msg);
    /* a few SGD steps on the GPU so the weights are not just the initial ones */
    float *x = hrand((size_t)batch * 784, 1.0f);
    int32_t lab[64];
    for (int i = 0; i < batch; i++)
        lab[i] = i % 10;
    G->h2d(gm.x, x, (size_t)batch * 784 * 4);
    G->h2d(gm.labels, lab, sizeof lab);
    float *mom = G->alloc(gm.nparams * 4);
    for (int s = 0; s < 3; s++) {
        rm_model_forward(&gm, batch);
        rm_model_backward(&gm, batch, 1.0f / batch, NULL, NULL);
        G->sgd_momentum_update(gm.params, gm.grads, mom, gm.nparams, 0.05f, 0.9f, 0.0f);
    }
    size_t np = gm.nparams;
    float *hp = malloc(np * 4), *payload = malloc(np * 4), *back = malloc(np * 4);
    G->d2h(hp, gm.params, np * 4);
    char tmpl[] = "/tmp/rm-gpu-ckpt.XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL, "mkdtemp");
    rm_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = 3;
    meta.world_size = 1;
    meta.batch_per_worker = batch;
    meta.loss_scale = 1.0f;
    meta.shape = shape;
    meta.nparams = np;
    rm_ckpt_seg seg = {hp, np * 4};
    char path[512];
    CHECK(rm_ckpt_write(dir, &meta, &seg, 1, 2, path, sizeof path, &e) == RM_OK, "ckpt write: %s", e.msg);
    rm_ckpt_meta got;
    CHECK(rm_ckpt_load_newest(dir, &meta, &got, payload, np * 4, NULL, 0, NULL, &e) == RM_OK, "ckpt load: %s",
          e.msg);
    CHECK(memcmp(payload, hp, np * 4) == 0, "GPU -> checkpoint -> host changed bits");
    /* into the CPU model: same logits as the GPU model (within TF32 tolerance) */
    C->h2d(cm.params, payload, np * 4);
    C->h2d(cm.x, x, (size_t)batch * 784 * 4);
    rm_model_forward(&cm, batch);
    rm_model_forward(&gm, batch);
    int L = shape.nlayers;
    size_t nl = (size_t)batch * 10;
    float *glog = from_gpu(rm_model_output(&gm, L - 1, 0), nl * 4);
    double worst = 0;
    for (size_t i = 0; i < nl; i++) {
        double d = fabs((double)glog[i] - (double)rm_model_output(&cm, L - 1, 0)[i]);
        double tol = 2e-2 * (1.0 + fabs((double)rm_model_output(&cm, L - 1, 0)[i]));
        if (d / tol > worst)
            worst = d / tol;
    }
    CHECK(worst <= 1.0, "logits GPU vs CPU from the same checkpoint: ratio %.3g", worst);
    /* and back: CPU params -> GPU -> host are the same bits */
    G->memset0(gm.params, np * 4);
    G->h2d(gm.params, cm.params, np * 4);
    G->d2h(back, gm.params, np * 4);
    CHECK(memcmp(back, cm.params, np * 4) == 0, "CPU -> GPU -> CPU changed bits");
    free(glog), free(hp), free(payload), free(back), free(x);
    G->free(mom);
    if (dir) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "warning: could not remove %s\n", dir);
    }
out:
    rm_model_free(&gm);
    rm_model_free(&cm);
    gpu_errors("checkpoint");
    printf("ok checkpoint round trip GPU <-> CPU\n");
}

/* A failed call is loud: the error reaches check() naming the call, a d2h after it fails and reads
 * NaN (never a stale 0), and check() clears a non-sticky error. */
static void test_errors_are_loud(void)
{
    rm_err e = {0};
    (void)rm_cuda_check(&e);
    float *a = G->alloc(64), *c = G->alloc(64);
    /* ldb 1 < n: cuBLAS refuses (CUBLAS_STATUS_INVALID_VALUE) without launching anything */
    G->gemm(false, false, 4, 4, 4, 1.0f, a, 4, a, 1, 0.0f, c, 4);
    float v = 0.0f;
    int rc = G->d2h(&v, c, sizeof v);
    CHECK(rc != RM_OK, "d2h after a failed gemm returned RM_OK");
    CHECK(isnan(v), "d2h after a failed gemm read %g, not NaN", (double)v);
    memset(&e, 0, sizeof e);
    rc = G->check(&e);
    CHECK(rc != RM_OK && strstr(e.msg, "cublasGemmEx"), "check() after a failed gemm: rc=%d msg=%s", rc,
          e.msg);
    CHECK(G->check(&e) == RM_OK, "check() did not clear a non-sticky error");
    CHECK(G->d2h(&v, c, sizeof v) == RM_OK && v == 0.0f, "d2h after check() is not clean");
    printf("sync-check mode (RINGMASTER_CUDA_SYNC_CHECK): %s\n", rm_cuda_sync_check_enabled() ? "on" : "off");
    G->free(a), G->free(c);
    gpu_errors("errors");
    printf("ok failed calls are loud (check, d2h NaN)\n");
}

/* ---------------------------------------------------------------- transformer */

static void *gpu_poisoned(size_t bytes)
{
    void *d = G->alloc(bytes ? bytes : 4);
    unsigned char *h = malloc(bytes ? bytes : 4);
    if (!d || !h)
        abort();
    memset(h, 0xff, bytes ? bytes : 4); /* NaN: an element nobody wrote fails the comparison */
    G->h2d(d, h, bytes);
    free(h);
    return d;
}

/* ||gpu - cpu|| / ||cpu|| of n floats at device d vs host c; NaN anywhere fails. */
static void tf_cmp(const char *what, const char *shape, const float *d, const float *c, size_t n, double tol)
{
    float *g = from_gpu(d, n * sizeof(float));
    double num = 0, den = 0;
    size_t nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(g[i]) || isnan(c[i]))
            nan++;
        double e = (double)g[i] - c[i];
        num += e * e;
        den += (double)c[i] * c[i];
    }
    double rel = sqrt(num / (den > 0 ? den : 1e-30));
    CHECK(nan == 0 && rel <= tol, "%s %s: rel err %.3g (tol %.1g), %zu NaN of %zu", what, shape, rel, tol,
          nan, n);
    free(g);
}

static void test_transformer_case(int B, int T, int Cc, int NH, int V)
{
    const rm_tf_kernels *gt = G->tf, *ct = C->tf;
    char shape[96];
    snprintf(shape, sizeof shape, "B%d T%d C%d NH%d V%d", B, T, Cc, NH, V);
    size_t N = (size_t)B * T, NC = N * Cc, F = sizeof(float);
    const double tol = 1e-4; /* fp32 with another summation order (and tanh, exp) */
    /* embeddings: tokens with many repeats (V small) test the sorted scatter */
    int32_t *tok = malloc(N * 4);
    for (size_t i = 0; i < N; i++)
        tok[i] = (int32_t)(((frand() + 1.0f) * 0.5f) * V) % V;
    float *wte = hrand((size_t)V * Cc, 1), *wpe = hrand((size_t)T * Cc, 1), *dout = hrand(NC, 1);
    int32_t *dtok = dup_to_gpu(tok, N * 4);
    float *dwte = dup_to_gpu(wte, (size_t)V * Cc * F), *dwpe = dup_to_gpu(wpe, (size_t)T * Cc * F);
    float *ddout = dup_to_gpu(dout, NC * F), *dout_e = gpu_poisoned(NC * F), *c_e = malloc(NC * F);
    gt->embed_fwd(dout_e, dtok, dwte, dwpe, B, T, Cc);
    ct->embed_fwd(c_e, tok, wte, wpe, B, T, Cc);
    tf_cmp("embed_fwd", shape, dout_e, c_e, NC, 0);
    gt->embed_bwd(dwte, dwpe, ddout, dtok, B, T, Cc); /* accumulates into the random tables */
    ct->embed_bwd(wte, wpe, dout, tok, B, T, Cc);
    tf_cmp("embed_bwd dwte", shape, dwte, wte, (size_t)V * Cc, tol);
    tf_cmp("embed_bwd dwpe", shape, dwpe, wpe, (size_t)T * Cc, tol);
    /* LayerNorm, the residual form, its backward, column sums */
    float *x = hrand(NC, 2), *w = hrand(Cc, 1), *b = hrand(Cc, 1), *res = hrand(NC, 1), *bias = hrand(Cc, 1);
    float *dx_ = dup_to_gpu(x, NC * F), *dw = dup_to_gpu(w, Cc * F), *db = dup_to_gpu(b, Cc * F);
    float *o = gpu_poisoned(NC * F), *mu = gpu_poisoned(N * F), *rs = gpu_poisoned(N * F);
    float *co = malloc(NC * F), *cmu = malloc(N * F), *crs = malloc(N * F);
    gt->layernorm_fwd(o, mu, rs, dx_, dw, db, (int)N, Cc);
    ct->layernorm_fwd(co, cmu, crs, x, w, b, (int)N, Cc);
    tf_cmp("layernorm_fwd out", shape, o, co, NC, tol);
    tf_cmp("layernorm_fwd rstd", shape, rs, crs, N, tol);
    float *dres = dup_to_gpu(res, NC * F), *dbias = dup_to_gpu(bias, Cc * F);
    gt->residual_layernorm_fwd(dres, dx_, dbias, o, mu, rs, dw, db, (int)N, Cc);
    ct->residual_layernorm_fwd(res, x, bias, co, cmu, crs, w, b, (int)N, Cc);
    tf_cmp("residual_layernorm_fwd res", shape, dres, res, NC, tol);
    tf_cmp("residual_layernorm_fwd ln", shape, o, co, NC, tol);
    float *dxacc = hrand(NC, 1), *ddxacc = dup_to_gpu(dxacc, NC * F);
    float *gw = gpu_poisoned(Cc * F), *gb = gpu_poisoned(Cc * F), *cgw = malloc(Cc * F),
          *cgb = malloc(Cc * F);
    gt->layernorm_bwd(ddxacc, gw, gb, ddout, dres, mu, rs, dw, (int)N, Cc, false);
    ct->layernorm_bwd(dxacc, cgw, cgb, dout, res, cmu, crs, w, (int)N, Cc, false);
    tf_cmp("layernorm_bwd dx", shape, ddxacc, dxacc, NC, tol);
    tf_cmp("layernorm_bwd dw", shape, gw, cgw, Cc, tol);
    tf_cmp("layernorm_bwd db", shape, gb, cgb, Cc, tol);
    gt->colsum(gb, ddout, (int)N, Cc, true);
    ct->colsum(cgb, dout, (int)N, Cc, true);
    tf_cmp("colsum accumulate", shape, gb, cgb, Cc, tol);
    /* bias + GELU and back (4C wide, as the MLP block) */
    size_t N4 = NC * 4;
    float *h = hrand(N4, 3), *b4 = hrand((size_t)4 * Cc, 1), *dg = hrand(N4, 1);
    float *dh = dup_to_gpu(h, N4 * F), *db4 = dup_to_gpu(b4, (size_t)4 * Cc * F), *gg = gpu_poisoned(N4 * F);
    float *cg = malloc(N4 * F);
    gt->bias_gelu_fwd(dh, gg, db4, (int)N, 4 * Cc);
    ct->bias_gelu_fwd(h, cg, b4, (int)N, 4 * Cc);
    tf_cmp("bias_gelu_fwd h", shape, dh, h, N4, tol);
    tf_cmp("bias_gelu_fwd g", shape, gg, cg, N4, tol);
    float *ddg = dup_to_gpu(dg, N4 * F), *gdh = gpu_poisoned(N4 * F), *cdh = malloc(N4 * F);
    gt->gelu_bwd(gdh, ddg, dh, (int)N, 4 * Cc);
    ct->gelu_bwd(cdh, dg, h, (int)N, 4 * Cc);
    tf_cmp("gelu_bwd", shape, gdh, cdh, N4, tol);
    /* causal attention: q, k, v of scale 1 give peaked and flat rows alike */
    size_t N3 = NC * 3, nl = (size_t)B * NH * T;
    float *qkv = hrand(N3, 1.5f), *dqkv_d = dup_to_gpu(qkv, N3 * F);
    float *ao = gpu_poisoned(NC * F), *al = gpu_poisoned(nl * F), *cao = malloc(NC * F),
          *cal = malloc(nl * F);
    float *cs = malloc((ct->attention_scratch(T) + 1) * F), *gs = G->alloc(gt->attention_scratch(T) * F);
    gt->attention_fwd(ao, al, dqkv_d, B, T, Cc, NH, gs);
    ct->attention_fwd(cao, cal, qkv, B, T, Cc, NH, cs);
    tf_cmp("attention_fwd out", shape, ao, cao, NC, tol);
    tf_cmp("attention_fwd lse", shape, al, cal, nl, tol);
    float *gdq = gpu_poisoned(N3 * F), *cdq = malloc(N3 * F);
    gt->attention_bwd(gdq, ddout, ao, al, dqkv_d, B, T, Cc, NH, gs);
    ct->attention_bwd(cdq, dout, cao, cal, qkv, B, T, Cc, NH, cs);
    tf_cmp("attention_bwd dqkv", shape, gdq, cdq, N3, tol);
    /* cross-entropy over the vocabulary: loss, first-argmax hits, gradient in place */
    size_t NV = N * (size_t)V;
    float *lg = hrand(NV, 4), *dlg = dup_to_gpu(lg, NV * F), *gl = gpu_poisoned(F);
    int32_t *tg = malloc(N * 4), *gc = gpu_poisoned(4), cc = -1, gcv = -2;
    for (size_t i = 0; i < N; i++)
        tg[i] = (int32_t)(((frand() + 1.0f) * 0.5f) * V) % V;
    if (N > 2 && V > 3) { /* a tie: the first maximum is the argmax */
        lg[V + 1] = lg[V + 2] = 50.0f;
        tg[1] = 1;
    }
    G->h2d(dlg, lg, NV * F);
    int32_t *dtg = dup_to_gpu(tg, N * 4);
    float cl = 0, glv = 0;
    gt->xent(dlg, dtg, (int)N, V, 0.0f, 1.0f, gl, gc); /* evaluation: logits untouched */
    ct->xent(lg, tg, (int)N, V, 0.0f, 1.0f, &cl, &cc);
    G->d2h(&glv, gl, F);
    G->d2h(&gcv, gc, 4);
    CHECK(gcv == cc, "xent correct %s: gpu %d cpu %d", shape, gcv, cc);
    CHECK(fabs(glv - cl) <= 1e-5 * fabs(cl), "xent eval loss %s: gpu %.9g cpu %.9g", shape, glv, cl);
    tf_cmp("xent eval leaves logits", shape, dlg, lg, NV, 0);
    float gsc = 1.0f / (float)N;
    gt->xent(dlg, dtg, (int)N, V, gsc, gsc, gl, NULL);
    ct->xent(lg, tg, (int)N, V, gsc, gsc, &cl, NULL);
    G->d2h(&glv, gl, F);
    CHECK(fabs(glv - cl) <= 1e-5 * fabs(cl), "xent loss %s: gpu %.9g cpu %.9g", shape, glv, cl);
    tf_cmp("xent dlogits", shape, dlg, lg, NV, tol);
    gpu_errors(shape);
    void *dev[] = {dtok, dwte, dwpe, ddout, dout_e, dx_, dw,     db, o,  mu, rs,  dres, dbias, ddxacc, gw,
                   gb,   dh,   db4,  gg,    ddg,    gdh, dqkv_d, ao, al, gs, gdq, dlg,  gl,    gc,     dtg};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        G->free(dev[i]);
    void *host[] = {tok, wte, wpe, dout, c_e, x,  w,   b,   res, bias, co, cmu, crs, dxacc,
                    cgw, cgb, h,   b4,   dg,  cg, cdh, qkv, cao, cal,  cs, cdq, lg,  tg};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* The vocabulary-parallel entries (a tensor group of Tp ranks over V, padded to a multiple of Tp),
 * each rank's GPU result against the CPU table's; the group's loss (the ranks' partial sums added as
 * the group's collective would) against the whole-vocabulary xent's. */
static void test_vocab_parallel_case(int B, int T, int Cc, int V, int Tp)
{
    const rm_tf_kernels *gt = G->tf, *ct = C->tf;
    char shape[96];
    snprintf(shape, sizeof shape, "B%d T%d C%d V%d over %d ranks", B, T, Cc, V, Tp);
    int N = B * T, Vl = (V + Tp - 1) / Tp;
    size_t NC = (size_t)N * Cc, F = sizeof(float);
    const double tol = 1e-4;
    int32_t *tok = malloc((size_t)N * 4), *tg = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)(((frand() + 1.0f) * 0.5f) * V) % V;
        tg[i] = (int32_t)(((frand() + 1.0f) * 0.5f) * V) % V;
    }
    int32_t *dtok = dup_to_gpu(tok, (size_t)N * 4), *dtg = dup_to_gpu(tg, (size_t)N * 4);
    float *full = hrand((size_t)N * V, 4); /* the whole logits, sliced per rank below */
    float *stats = calloc((size_t)N * Tp, F), *s2 = calloc((size_t)N * 2, F);
    float *cl = malloc((size_t)Vl * N * F), *cst = malloc((size_t)N * Tp * F),
          *cs2 = malloc((size_t)N * 2 * F);
    float *cmx = malloc((size_t)N * F), *crl = malloc((size_t)N * F);
    float *gst = gpu_poisoned((size_t)N * Tp * F), *gs2 = gpu_poisoned((size_t)N * 2 * F);
    float *gmx = gpu_poisoned((size_t)N * F), *grl = gpu_poisoned((size_t)N * F);
    float *glg = G->alloc((size_t)N * Vl * F);
    for (int pass = 0; pass < 3; pass++) /* max, sums, grad: each pass needs the last one's group sum */
        for (int t = 0; t < Tp; t++) {
            int v0 = t * Vl, valid = V - v0 < Vl ? (V - v0 > 0 ? V - v0 : 0) : Vl;
            for (int n = 0; n < N; n++) /* this rank's columns, padding 0 */
                for (int j = 0; j < Vl; j++)
                    cl[(size_t)n * Vl + j] = j < valid ? full[(size_t)n * V + v0 + j] : 0.0f;
            G->h2d(glg, cl, (size_t)N * Vl * F);
            char what[64];
            if (pass == 0) {
                gt->xent_vocab_max(gst, glg, N, Vl, valid, Tp, t);
                ct->xent_vocab_max(cst, cl, N, Vl, valid, Tp, t);
                snprintf(what, sizeof what, "xent_vocab_max rank %d", t);
                tf_cmp(what, shape, gst, cst, (size_t)N * Tp, 0);
                for (size_t i = 0; i < (size_t)N * Tp; i++)
                    stats[i] += cst[i];
            } else if (pass == 1) {
                G->h2d(gst, stats, (size_t)N * Tp * F);
                gt->xent_vocab_sums(gs2, gmx, gst, glg, dtg, N, Vl, valid, v0, Tp);
                ct->xent_vocab_sums(cs2, cmx, stats, cl, tg, N, Vl, valid, v0, Tp);
                snprintf(what, sizeof what, "xent_vocab_sums rank %d", t);
                tf_cmp(what, shape, gs2, cs2, (size_t)N * 2, tol);
                tf_cmp("xent_vocab_sums max", shape, gmx, cmx, (size_t)N, 0);
                for (size_t i = 0; i < (size_t)N * 2; i++)
                    s2[i] += cs2[i];
            } else {
                G->h2d(gs2, s2, (size_t)N * 2 * F);
                gt->xent_vocab_grad(glg, grl, gs2, gmx, dtg, N, Vl, valid, v0, 0.5f);
                ct->xent_vocab_grad(cl, crl, s2, cmx, tg, N, Vl, valid, v0, 0.5f);
                snprintf(what, sizeof what, "xent_vocab_grad rank %d", t);
                tf_cmp(what, shape, glg, cl, (size_t)N * Vl, tol);
                tf_cmp("xent_vocab_grad rowloss", shape, grl, crl, (size_t)N, tol);
            }
        }
    /* the group's loss is the whole vocabulary's */
    float whole = 0;
    ct->xent(full, tg, N, V, 0.0f, 1.0f, &whole, NULL);
    float *g = from_gpu(grl, (size_t)N * F);
    double sum = 0;
    for (int n = 0; n < N; n++)
        sum += g[n];
    CHECK(fabs(sum - whole) <= 1e-4 * fabs(whole), "vocab-parallel loss %s: %.7g, whole xent %.7g", shape,
          sum, whole);
    free(g);
    /* the embedding: rank t's rows (or zeros) plus wpe from rank 0; backward into this rank's rows */
    float *wte = hrand((size_t)Vl * Cc, 1), *wpe = hrand((size_t)T * Cc, 1), *dout = hrand(NC, 1);
    float *dwte = dup_to_gpu(wte, (size_t)Vl * Cc * F), *dwpe = dup_to_gpu(wpe, (size_t)T * Cc * F);
    float *ddout = dup_to_gpu(dout, NC * F), *ge = gpu_poisoned(NC * F), *ce = malloc(NC * F);
    for (int t = 0; t < Tp; t++) { /* exact: copies and one add (before backward moves the tables apart) */
        gt->embed_vocab_fwd(ge, dtok, dwte, t * Vl, Vl, t == 0 ? dwpe : NULL, B, T, Cc);
        ct->embed_vocab_fwd(ce, tok, wte, t * Vl, Vl, t == 0 ? wpe : NULL, B, T, Cc);
        tf_cmp("embed_vocab_fwd", shape, ge, ce, NC, 0);
    }
    for (int t = 0; t < Tp; t++) { /* accumulating: another summation order, within tol */
        gt->embed_vocab_bwd(dwte, dwpe, ddout, dtok, t * Vl, Vl, B, T, Cc);
        ct->embed_vocab_bwd(wte, wpe, dout, tok, t * Vl, Vl, B, T, Cc);
        tf_cmp("embed_vocab_bwd dwte", shape, dwte, wte, (size_t)Vl * Cc, tol);
        tf_cmp("embed_vocab_bwd dwpe", shape, dwpe, wpe, (size_t)T * Cc, tol);
    }
    gpu_errors(shape);
    void *dev[] = {dtok, dtg, gst, gs2, gmx, grl, glg, dwte, dwpe, ddout, ge};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        G->free(dev[i]);
    void *host[] = {tok, tg, full, stats, s2, cl, cst, cs2, cmx, crl, wte, wpe, dout, ce};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
}

/* Under precision bf16 with RM_CUDA_ATTN=tc the attention with head size 64 runs on the tensor cores
 * (bf16 tiles, fp32 accumulation): within the bf16 band of the CPU's fp32 attention; without it the
 * fp32 kernels, within the fp32 band. */
static void test_attention_bf16_case(int B, int T, int NH)
{
    const rm_tf_kernels *gt = G->tf, *ct = C->tf;
    int Cc = 64 * NH;
    char shape[96];
    snprintf(shape, sizeof shape, "bf16 B%d T%d C%d NH%d", B, T, Cc, NH);
    size_t NC = (size_t)B * T * Cc, N3 = 3 * NC, nl = (size_t)B * NH * T, F = sizeof(float);
    float *qkv = hrand(N3, 1.5f), *dout = hrand(NC, 1), *cao = malloc(NC * F), *cal = malloc(nl * F);
    float *cdq = malloc(N3 * F), *cs = malloc((ct->attention_scratch(T) + 1) * F);
    ct->attention_fwd(cao, cal, qkv, B, T, Cc, NH, cs);
    ct->attention_bwd(cdq, dout, cao, cal, qkv, B, T, Cc, NH, cs);
    float *dq = dup_to_gpu(qkv, N3 * F), *dd = dup_to_gpu(dout, NC * F),
          *gs = G->alloc(gt->attention_scratch(T) * F);
    for (int simt = 0; simt < 2; simt++) {
        if (!simt)
            setenv("RM_CUDA_ATTN", "tc", 1);
        float *ao = gpu_poisoned(NC * F), *al = gpu_poisoned(nl * F), *gdq = gpu_poisoned(N3 * F);
        gt->attention_fwd(ao, al, dq, B, T, Cc, NH, gs);
        gt->attention_bwd(gdq, dd, ao, al, dq, B, T, Cc, NH, gs);
        double tol = simt ? 1e-4 : 2e-2;
        tf_cmp(simt ? "attention_fwd out (simt)" : "attention_fwd out (tensor cores)", shape, ao, cao, NC,
               tol);
        tf_cmp(simt ? "attention_fwd lse (simt)" : "attention_fwd lse (tensor cores)", shape, al, cal, nl,
               tol);
        tf_cmp(simt ? "attention_bwd dqkv (simt)" : "attention_bwd dqkv (tensor cores)", shape, gdq, cdq, N3,
               tol);
        G->free(ao), G->free(al), G->free(gdq);
        unsetenv("RM_CUDA_ATTN");
    }
    gpu_errors(shape);
    G->free(dq), G->free(dd), G->free(gs);
    free(qkv), free(dout), free(cao), free(cal), free(cdq), free(cs);
}

static void test_transformer(void)
{
    CHECK(G->tf != NULL, "the CUDA table has transformer kernels");
    if (!G->tf)
        return;
    test_transformer_case(2, 37, 48, 3, 11);     /* odd T (a partial tile), hs 16, tokens repeating */
    test_transformer_case(1, 64, 64, 1, 300);    /* hs 64, T two whole tiles */
    test_transformer_case(3, 33, 256, 2, 97);    /* hs 128 (the kernels' largest), T one past a tile */
    test_vocab_parallel_case(2, 37, 48, 11, 2);  /* V odd: one padding column on rank 1 */
    test_vocab_parallel_case(1, 64, 64, 97, 4);  /* 97 over 4: 25 a rank, 3 padding on the last */
    test_vocab_parallel_case(2, 16, 32, 300, 3); /* a rank's slice past a block's width */
    if (!g_quick)
        test_transformer_case(2, 1024, 768, 12, 50257); /* GPT-2 124M's shapes */
    rm_err e = {0};
    CHECK(rm_cuda_set_precision(RM_PREC_BF16, &e) == RM_OK, "precision bf16: %s", e.msg);
    test_attention_bf16_case(1, 64, 1);  /* one whole tile */
    test_attention_bf16_case(2, 100, 2); /* a partial second tile */
    test_attention_bf16_case(1, 33, 3);  /* less than a tile */
    if (!g_quick)
        test_attention_bf16_case(2, 1024, 12); /* GPT-2 124M's */
    CHECK(rm_cuda_set_precision(RM_PREC_FP32, &e) == RM_OK, "precision fp32: %s", e.msg);
    printf("ok transformer kernels (embed, layernorm, gelu, attention fp32 and tensor cores, xent, the "
           "vocabulary-parallel embedding and xent) vs the CPU's\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--quick"))
            g_quick = 1;
    char why[256];
    if (!rm_gpu_available(why, sizeof why)) {
        printf("SKIP: no GPU present (%s)\n", why);
        return 0;
    }
    rm_err e = {0};
    int dev = -1;
    char name[256];
    if (rm_gpu_select(0, &dev, name, sizeof name, &e) != RM_OK) {
        fprintf(stderr, "FAIL: rm_gpu_select: %s\n", e.msg);
        return 1;
    }
    printf("device %d: %s\n", dev, name);
    G = rm_kernels_cuda();
    C = rm_kernels_cpu();
    if (!G) {
        fprintf(stderr, "FAIL: rm_kernels_cuda() is NULL with a GPU present\n");
        return 1;
    }
    test_memory();
    test_errors_are_loud();
    test_casts();
    test_gemm();
    test_gemm_operand_cache();
    test_bias_act();
    test_softmax_argmax();
    test_optimizers();
    test_unscale_and_scaler();
    test_transformer();
    if (getenv("GPU_TESTS_SKIP_NCCL") && !strcmp(getenv("GPU_TESTS_SKIP_NCCL"), "1"))
        printf("skipped nccl (GPU_TESTS_SKIP_NCCL=1)\n");
    else
        test_nccl_one_rank();
    test_checkpoint_roundtrip();
    printf("gpu_tests: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
