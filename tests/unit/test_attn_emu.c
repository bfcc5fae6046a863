/* test_attn_emu.c — what the CUDA transformer kernels (kernels/cuda/transformer_cuda.cu) compute,
 * run on the CPU with their own tiling (kernels/attn_tile.h).
 *
 * 1. The fused causal attention, at both tile sizes (the fp32 kernels' 32, the bf16 tensor-core
 *    kernels' 64): the forward kernel's walk (query tiles; key tiles while
 *    k0 < rm_attn_key_end(q0, T); a running maximum and sum rescaled by rm_attn_rescale; keys
 *    masked by rm_attn_visible) and the backward's two partitions (dK/dV per key tile over the
 *    query tiles q0 = k0, k0 + TILE, ...; dQ per query tile over the forward's key tiles), in that
 *    order, against the naive attention in double precision for odd shapes (T = 1, a tile minus
 *    one, one past a tile, several tiles; head sizes 1 to the kernels' largest), and against the
 *    CPU table's attention (kernels/transformer_cpu.c), which is the GPU tests' oracle.
 * 2. The vocabulary cross-entropy's reduction: per-thread strided maxima with the first index,
 *    combined by a 32-lane XOR butterfly and then across warps with the kernel's rule (larger value,
 *    else lower index), the log-sum-exp and the loss; against the CPU table with ties.
 * 3. The bf16 rounding of the gemm operands under precision bf16 (round to nearest even, NaN kept
 *    NaN), the rounding whose error the GPU tests' bf16 bands allow for. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_tile.h"
#include "kernels/kernels.h"
#include "kernels/transformer.h"
#include "tests/unit/testutil.h"
#include "worker/gpu.h"

static uint64_t g_s = 0x2545f4914f6cdd1dull;
static float urand(void) /* [-1, 1) */
{
    g_s ^= g_s << 13;
    g_s ^= g_s >> 7;
    g_s ^= g_s << 17;
    return (float)((g_s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

typedef struct {
    int B, T, C, NH, hs;
} geo;

static const float *qkv_at(const float *qkv, const geo *g, int b, int i, int part, int h)
{
    return qkv + ((size_t)b * g->T + i) * 3 * g->C + (size_t)part * g->C + (size_t)h * g->hs;
}

/* ---------------- the naive reference, double ---------------- */

static void naive(const geo *g, const float *qkv, const float *dout, double *out, double *dqkv)
{
    double sc = 1.0 / sqrt((double)g->hs);
    size_t NC = (size_t)g->B * g->T * g->C;
    memset(out, 0, NC * sizeof *out);
    memset(dqkv, 0, 3 * NC * sizeof *dqkv);
    double *p = malloc((size_t)g->T * sizeof *p), *dp = malloc((size_t)g->T * sizeof *dp);
    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->NH; h++)
            for (int i = 0; i < g->T; i++) {
                const float *q = qkv_at(qkv, g, b, i, 0, h);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    const float *k = qkv_at(qkv, g, b, j, 1, h);
                    double s = 0;
                    for (int d = 0; d < g->hs; d++)
                        s += (double)q[d] * k[d];
                    p[j] = s * sc;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= i; j++)
                    sum += (p[j] = exp(p[j] - mx));
                double *o = out + ((size_t)b * g->T + i) * g->C + (size_t)h * g->hs;
                const float *dO = dout + ((size_t)b * g->T + i) * g->C + (size_t)h * g->hs;
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    p[j] /= sum;
                    const float *v = qkv_at(qkv, g, b, j, 2, h);
                    for (int d = 0; d < g->hs; d++)
                        o[d] += p[j] * v[d];
                }
                for (int d = 0; d < g->hs; d++)
                    D += o[d] * dO[d];
                for (int j = 0; j <= i; j++) {
                    const float *v = qkv_at(qkv, g, b, j, 2, h), *k = qkv_at(qkv, g, b, j, 1, h);
                    double s = 0;
                    for (int d = 0; d < g->hs; d++)
                        s += (double)dO[d] * v[d];
                    dp[j] = p[j] * (s - D) * sc;
                    double *dq = dqkv + ((size_t)b * g->T + i) * 3 * g->C + (size_t)h * g->hs;
                    double *dk = dqkv + ((size_t)b * g->T + j) * 3 * g->C + g->C + (size_t)h * g->hs;
                    double *dv = dk + g->C;
                    for (int d = 0; d < g->hs; d++) {
                        dq[d] += dp[j] * k[d];
                        dk[d] += dp[j] * q[d];
                        dv[d] += p[j] * dO[d];
                    }
                }
            }
    free(p), free(dp);
}

/* ---------------- the kernels' tiling, emulated ---------------- */

static float dotf(const float *a, const float *b, int n, float mul_a)
{
    float s = 0.0f;
    for (int d = 0; d < n; d++)
        s += a[d] * mul_a * b[d];
    return s;
}

/* k_attn_fwd: one (b, h, query tile) at a time, rows in lock-step over the key tiles. */
static void emu_fwd(const geo *g, const float *qkv, float *out, float *lse, int tile)
{
    float sc = 1.0f / sqrtf((float)g->hs);
    float *o = malloc((size_t)tile * g->hs * sizeof *o);
    float m[RM_ATTN_TC_TILE], l[RM_ATTN_TC_TILE]; /* the larger tile */
    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->NH; h++)
            for (int q0 = 0; q0 < g->T; q0 += tile) {
                memset(o, 0, (size_t)tile * g->hs * sizeof *o);
                for (int r = 0; r < tile; r++)
                    m[r] = -INFINITY, l[r] = 0.0f;
                for (int k0 = 0; k0 < rm_attn_key_end_t(q0, g->T, tile); k0 += tile)
                    for (int r = 0; r < tile; r++) {
                        int qi = q0 + r;
                        float s[RM_ATTN_TC_TILE], mx = -INFINITY;
                        for (int c = 0; c < tile; c++) {
                            int kj = k0 + c;
                            s[c] = rm_attn_visible(kj, qi, g->T)
                                       ? dotf(qkv_at(qkv, g, b, qi, 0, h), qkv_at(qkv, g, b, kj, 1, h), g->hs,
                                              sc)
                                       : -INFINITY;
                            mx = fmaxf(mx, s[c]);
                        }
                        float mnew = fmaxf(m[r], mx), alpha = rm_attn_rescale(m[r], mnew), ps = 0.0f;
                        for (int c = 0; c < tile; c++)
                            ps += (s[c] = s[c] == -INFINITY ? 0.0f : expf(s[c] - mnew));
                        l[r] = l[r] * alpha + ps;
                        m[r] = mnew;
                        for (int d = 0; d < g->hs; d++) {
                            float acc = o[r * g->hs + d] * alpha;
                            for (int c = 0; c < tile; c++)
                                if (s[c] != 0.0f)
                                    acc += s[c] * qkv_at(qkv, g, b, k0 + c, 2, h)[d];
                            o[r * g->hs + d] = acc;
                        }
                    }
                for (int r = 0; r < tile && q0 + r < g->T; r++) {
                    float *orow = out + ((size_t)b * g->T + q0 + r) * g->C + (size_t)h * g->hs;
                    for (int d = 0; d < g->hs; d++)
                        orow[d] = o[r * g->hs + d] / l[r];
                    lse[((size_t)b * g->NH + h) * g->T + q0 + r] = m[r] + logf(l[r]);
                }
            }
    free(o);
}

/* P_ij and dS_ij as attn_ds computes them. */
static void emu_ds(const geo *g, const float *qkv, const float *dout, const float *lse, const float *Dv,
                   int b, int h, int qi, int kj, float *p, float *ds)
{
    float sc = 1.0f / sqrtf((float)g->hs);
    if (!rm_attn_visible(kj, qi, g->T)) {
        *p = *ds = 0.0f;
        return;
    }
    size_t lo = ((size_t)b * g->NH + h) * g->T + qi;
    float s = dotf(qkv_at(qkv, g, b, qi, 0, h), qkv_at(qkv, g, b, kj, 1, h), g->hs, 1.0f);
    float dp = dotf(dout + ((size_t)b * g->T + qi) * g->C + (size_t)h * g->hs, qkv_at(qkv, g, b, kj, 2, h),
                    g->hs, 1.0f);
    *p = expf(s * sc - lse[lo]);
    *ds = *p * (dp - Dv[lo]);
}

/* k_attn_d, k_attn_bwd_kv (key tiles; query tiles from k0) and k_attn_bwd_q (query tiles; key
 * tiles to the forward's end). Every element is written once: dqkv starts NaN. */
static void emu_bwd(const geo *g, const float *qkv, const float *dout, const float *out, const float *lse,
                    float *dqkv, int tile)
{
    float sc = 1.0f / sqrtf((float)g->hs);
    size_t nl = (size_t)g->B * g->NH * g->T;
    float *Dv = malloc(nl * sizeof *Dv);
    for (int b = 0; b < g->B; b++)
        for (int i = 0; i < g->T; i++)
            for (int h = 0; h < g->NH; h++) {
                size_t at = ((size_t)b * g->T + i) * g->C + (size_t)h * g->hs;
                Dv[((size_t)b * g->NH + h) * g->T + i] = dotf(dout + at, out + at, g->hs, 1.0f);
            }
    for (size_t i = 0; i < (size_t)g->B * g->T * 3 * g->C; i++)
        dqkv[i] = NAN;
    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->NH; h++) {
            for (int k0 = 0; k0 < g->T; k0 += tile) /* dK, dV */
                for (int kr = 0; kr < tile && k0 + kr < g->T; kr++) {
                    int kj = k0 + kr;
                    float *row = dqkv + ((size_t)b * g->T + kj) * 3 * g->C + (size_t)h * g->hs;
                    for (int d = 0; d < g->hs; d++)
                        row[g->C + d] = row[2 * g->C + d] = 0.0f;
                    for (int q0 = k0; q0 < g->T; q0 += tile)
                        for (int rq = 0; rq < tile; rq++) {
                            int qi = q0 + rq;
                            float p, ds;
                            emu_ds(g, qkv, dout, lse, Dv, b, h, qi, kj, &p, &ds);
                            if (p == 0.0f && ds == 0.0f)
                                continue;
                            const float *q = qkv_at(qkv, g, b, qi, 0, h);
                            const float *dO = dout + ((size_t)b * g->T + qi) * g->C + (size_t)h * g->hs;
                            for (int d = 0; d < g->hs; d++) {
                                row[2 * g->C + d] += p * dO[d];
                                row[g->C + d] += ds * q[d] * sc;
                            }
                        }
                }
            for (int q0 = 0; q0 < g->T; q0 += tile) /* dQ */
                for (int r = 0; r < tile && q0 + r < g->T; r++) {
                    int qi = q0 + r;
                    float *row = dqkv + ((size_t)b * g->T + qi) * 3 * g->C + (size_t)h * g->hs;
                    for (int d = 0; d < g->hs; d++)
                        row[d] = 0.0f;
                    for (int k0 = 0; k0 < rm_attn_key_end_t(q0, g->T, tile); k0 += tile)
                        for (int c = 0; c < tile; c++) {
                            float p, ds;
                            emu_ds(g, qkv, dout, lse, Dv, b, h, qi, k0 + c, &p, &ds);
                            if (ds == 0.0f)
                                continue;
                            const float *k = qkv_at(qkv, g, b, k0 + c, 1, h);
                            for (int d = 0; d < g->hs; d++)
                                row[d] += ds * k[d] * sc;
                        }
                }
        }
    free(Dv);
}

static double rel_err_d(const float *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]))
            return INFINITY;
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

static void test_attention_tiles(void)
{
    const rm_tf_kernels *cpu = rm_kernels_cpu()->tf;
    static const int shapes[][4] = {
        /* B, T, NH, hs */
        {1, 1, 1, 1},    {2, 5, 2, 3},    {1, 31, 3, 16}, {1, 32, 1, 64},  {2, 33, 2, 8},
        {1, 64, 2, 128}, {1, 100, 3, 20}, {1, 65, 2, 64}, {1, 130, 1, 64},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        geo g = {shapes[s][0], shapes[s][1], shapes[s][2] * shapes[s][3], shapes[s][2], shapes[s][3]};
        size_t NC = (size_t)g.B * g.T * g.C, nl = (size_t)g.B * g.NH * g.T;
        float *qkv = malloc(3 * NC * sizeof *qkv), *dout = malloc(NC * sizeof *dout);
        for (size_t i = 0; i < 3 * NC; i++)
            qkv[i] = 2.0f * urand();
        for (size_t i = 0; i < NC; i++)
            dout[i] = urand();
        double *rout = malloc(NC * sizeof *rout), *rd = malloc(3 * NC * sizeof *rd);
        naive(&g, qkv, dout, rout, rd);
        float *out = malloc(NC * sizeof *out), *lse = malloc(nl * sizeof *lse),
              *dq = malloc(3 * NC * sizeof *dq);
        for (int ti = 0; ti < 2; ti++) { /* the fp32 kernels' tile, the tensor-core kernels' */
            int tile = ti ? RM_ATTN_TC_TILE : RM_ATTN_TILE;
            for (size_t i = 0; i < NC; i++)
                out[i] = NAN;
            emu_fwd(&g, qkv, out, lse, tile);
            double ef = rel_err_d(out, rout, NC);
            emu_bwd(&g, qkv, dout, out, lse, dq, tile);
            double eb = rel_err_d(dq, rd, 3 * NC);
            if (!(ef < 1e-5 && eb < 1e-5))
                fprintf(stderr, "attention emulation tile %d B%d T%d NH%d hs%d: fwd %.3g bwd %.3g\n", tile,
                        g.B, g.T, g.NH, g.hs, ef, eb);
            CU_ASSERT(ef < 1e-5);
            CU_ASSERT(eb < 1e-5);
        }
        /* the CPU table (the GPU tests' oracle) agrees with the emulation's log-sum-exp too */
        float *co = malloc(NC * sizeof *co), *cl = malloc(nl * sizeof *cl);
        float *scr = malloc((cpu->attention_scratch(g.T) + 1) * sizeof *scr);
        cpu->attention_fwd(co, cl, qkv, g.B, g.T, g.C, g.NH, scr);
        double el = 0;
        for (size_t i = 0; i < nl; i++)
            el = fmax(el, fabs((double)cl[i] - lse[i]));
        CU_ASSERT(el < 1e-4);
        CU_ASSERT(rel_err_d(co, rout, NC) < 1e-5);
        free(qkv), free(dout), free(rout), free(rd), free(out), free(lse), free(dq), free(co), free(cl),
            free(scr);
    }
}

/* ---------------- the cross-entropy's reduction ---------------- */

typedef struct {
    float v;
    int i;
} vi;
static vi vi_pick(vi a, vi b) /* k_xent_rows' combine rule */
{
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

/* k_xent_rows over one row with 256 threads: strided per-thread scan (strictly greater), warp
 * butterfly, warps in order; then the log-sum-exp. */
static void emu_xent_row(const float *z, int V, int t, float *loss, int *hit)
{
    enum { NT = 256, W = 32 };
    vi th[NT];
    for (int x = 0; x < NT; x++) {
        th[x] = (vi){-INFINITY, 0x7fffffff};
        for (int j = x; j < V; j += NT)
            if (z[j] > th[x].v)
                th[x] = (vi){z[j], j};
    }
    for (int o = W / 2; o > 0; o /= 2) {
        vi nx[NT];
        for (int x = 0; x < NT; x++)
            nx[x] = vi_pick(th[x], th[(x & ~(W - 1)) | ((x % W) ^ o)]);
        memcpy(th, nx, sizeof th);
    }
    vi best = th[0];
    for (int w = 1; w < NT / W; w++)
        best = vi_pick(best, th[w * W]);
    float s = 0.0f;
    for (int j = 0; j < V; j++)
        s += expf(z[j] - best.v);
    *loss = best.v + logf(s) - z[t];
    *hit = best.i == t;
}

static void test_xent_reduction(void)
{
    const rm_tf_kernels *cpu = rm_kernels_cpu()->tf;
    static const int shapes[][2] = {{1, 1}, {3, 7}, {17, 255}, {9, 257}, {4, 50257}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s][0], V = shapes[s][1];
        float *z = malloc((size_t)N * V * sizeof *z);
        int32_t *t = malloc((size_t)N * sizeof *t);
        for (size_t i = 0; i < (size_t)N * V; i++)
            z[i] = 5.0f * urand();
        for (int r = 0; r < N; r++)
            t[r] = (int32_t)((urand() + 1.0f) * 0.5f * V) % V;
        if (V > 300) { /* a tie across threads and warps: the lower index wins */
            z[7] = z[300] = 99.0f;
            t[0] = 7;
        }
        if (N > 1 && V > 3) { /* a tie inside one thread's stride, target the later one: a miss */
            z[V + 1] = z[V + 2] = 99.0f;
            t[1] = 2;
        }
        float sum = 0.0f;
        int hits = 0;
        for (int r = 0; r < N; r++) {
            float l;
            int h;
            emu_xent_row(z + (size_t)r * V, V, t[r], &l, &h);
            sum += l;
            hits += h;
        }
        float cl = 0;
        int32_t cc = -1;
        cpu->xent(z, t, N, V, 0.0f, 1.0f, &cl, &cc);
        CU_ASSERT_EQUAL(hits, cc);
        CU_ASSERT(fabsf(sum - cl) <= 1e-5f * fabsf(cl) + 1e-6f);
        if (V > 300)
            CU_ASSERT(hits >= 1);
        free(z), free(t);
    }
}

/* ---------------- bf16 rounding ---------------- */

static void test_bf16_rounding(void)
{
    /* round to nearest, ties to even, on the 16 bits kept */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(1.0f), 0x3f80);
    float halfway_even, halfway_odd, above;
    uint32_t u = 0x3f808000u; /* 1 + 2^-8: exactly between 0x3f80 and 0x3f81 -> even 0x3f80 */
    memcpy(&halfway_even, &u, 4);
    u = 0x3f818000u; /* between 0x3f81 and 0x3f82 -> even 0x3f82 */
    memcpy(&halfway_odd, &u, 4);
    u = 0x3f808001u; /* just above halfway -> up */
    memcpy(&above, &u, 4);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(halfway_even), 0x3f80);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(halfway_odd), 0x3f82);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(above), 0x3f81);
    CU_ASSERT(isnan(rm_bf16_to_f32(rm_f32_to_bf16(NAN))));
    CU_ASSERT(isinf(rm_bf16_to_f32(rm_f32_to_bf16(INFINITY))));
    /* relative error at most half an ulp of 8 significant bits, 2^-8, for normal numbers */
    for (int i = 0; i < 100000; i++) {
        float x = urand() * 1000.0f;
        if (x == 0.0f)
            continue;
        float y = rm_bf16_to_f32(rm_f32_to_bf16(x));
        CU_ASSERT_FATAL(fabsf(y - x) <= fabsf(x) * (1.0f / 256.0f));
    }
}

void rm_suite_attn_emu(void)
{
    static const rm_test_case cases[] = {
        {"attention tiles and online softmax vs naive (odd shapes)", test_attention_tiles},
        {"cross-entropy reduction: first argmax, loss", test_xent_reduction},
        {"bf16 rounding: nearest even, NaN, bound", test_bf16_rounding},
    };
    RM_ADD_SUITE("attn_emu", NULL, NULL, cases);
}
