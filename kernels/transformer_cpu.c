/* transformer_cpu.c — the CPU transformer kernels (transformer.h): OpenBLAS for every product
 * (the per-block attention products included), loops written for the vectoriser, all of it split
 * over the kernels' thread pool (pool.h) by rows, columns or (sequence, head) pairs, so each part
 * writes its own memory and the result does not depend on the thread count.
 *
 * The element-wise loops are built twice, for AVX2 and for the baseline, and picked at load time
 * (GCC target_clones), since the package's baseline is plain x86-64. exp and tanh are a
 * polynomial the vectoriser can inline (a relative error of about 2e-7, well inside the 1e-4 that
 * docs/models-and-data.md's comparisons with PyTorch allow). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include "kernels/transformer.h"

#include <cblas.h>
#include <float.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "kernels/pool.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define TF_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TF_CLONES
#endif

/* e^x for x <= 0 .. moderate x: 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], p of degree 6. */
static inline float fast_expf(float x)
{
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float t = x * 1.44269504088896341f;
    float n = (t + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        float f;
        int32_t i;
    } u = {.i = ((int32_t)n + 127) << 23};
    return p * u.f;
}

/* tanh(y) = 1 - 2 / (e^{2y} + 1), written so large |y| saturates cleanly. */
static inline float fast_tanhf(float y)
{
    float e = fast_expf(2.0f * y);
    return 1.0f - 2.0f / (e + 1.0f);
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* ---------------- embeddings ---------------- */

typedef struct {
    float *out;
    const int32_t *tok;
    const float *wte, *wpe; /* wpe NULL: not added */
    int B, T, C;
    int64_t v0, Vl; /* wte holds token rows [v0, v0 + Vl): the others embed as zeros */
} embed_ctx;

static void embed_fwd_part(void *vc, int part, int nparts)
{
    const embed_ctx *c = vc;
    size_t lo, hi, C = (size_t)c->C;
    rm_pool_range((size_t)c->B * (size_t)c->T, part, nparts, 1, &lo, &hi);
    for (size_t r = lo; r < hi; r++) {
        int64_t v = (int64_t)c->tok[r] - c->v0;
        const float *a = v >= 0 && v < c->Vl ? c->wte + (size_t)v * C : NULL;
        const float *b = c->wpe ? c->wpe + (r % (size_t)c->T) * C : NULL;
        float *o = c->out + r * C;
        if (a && b)
            for (size_t j = 0; j < C; j++)
                o[j] = a[j] + b[j];
        else if (a || b)
            memcpy(o, a ? a : b, C * sizeof(float));
        else
            memset(o, 0, C * sizeof(float));
    }
}

static void cpu_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T,
                          int C)
{
    embed_ctx c = {out, tok, wte, wpe, B, T, C, 0, INT64_MAX};
    rm_pool_run(embed_fwd_part, &c);
}

static void cpu_embed_vocab_fwd(float *out, const int32_t *tok, const float *wte, int v0, int Vl,
                                const float *wpe, int B, int T, int C)
{
    embed_ctx c = {out, tok, wte, wpe, B, T, C, v0, Vl};
    rm_pool_run(embed_fwd_part, &c);
}

typedef struct {
    float *dwte, *dwpe;
    const float *dout;
    const int32_t *tok;
    int B, T, C;
    int64_t v0, Vl; /* as embed_ctx's */
} embed_bwd_ctx;

/* Parts own column ranges, so two positions with the same token never race. */
static void embed_bwd_part(void *vc, int part, int nparts)
{
    const embed_bwd_ctx *c = vc;
    size_t lo, hi, C = (size_t)c->C;
    rm_pool_range(C, part, nparts, 16, &lo, &hi);
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++) {
            size_t r = (size_t)b * (size_t)c->T + (size_t)t;
            const float *d = c->dout + r * C;
            int64_t v = (int64_t)c->tok[r] - c->v0;
            float *w = v >= 0 && v < c->Vl ? c->dwte + (size_t)v * C : NULL, *p = c->dwpe + (size_t)t * C;
            for (size_t j = lo; j < hi; j++)
                p[j] += d[j];
            if (w)
                for (size_t j = lo; j < hi; j++)
                    w[j] += d[j];
        }
}

static void cpu_embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T,
                          int C)
{
    embed_bwd_ctx c = {dwte, dwpe, dout, tok, B, T, C, 0, INT64_MAX};
    rm_pool_run(embed_bwd_part, &c);
}

static void cpu_embed_vocab_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int v0,
                                int Vl, int B, int T, int C)
{
    embed_bwd_ctx c = {dwte, dwpe, dout, tok, B, T, C, v0, Vl};
    rm_pool_run(embed_bwd_part, &c);
}

/* ---------------- LayerNorm, residuals ---------------- */

TF_CLONES static void ln_row(float *o, float *mean, float *rstd, const float *x, const float *w,
                             const float *b, int C)
{
    float s = 0;
    for (int j = 0; j < C; j++)
        s += x[j];
    float m = s / (float)C, v = 0;
    for (int j = 0; j < C; j++) {
        float d = x[j] - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(v / (float)C + RM_LN_EPS);
    for (int j = 0; j < C; j++)
        o[j] = (x[j] - m) * rs * w[j] + b[j];
    *mean = m;
    *rstd = rs;
}

typedef struct {
    float *res, *ln, *mean, *rstd;
    const float *x, *bias, *w, *b;
    int N, C;
} ln_ctx;

static void ln_fwd_part(void *vc, int part, int nparts)
{
    const ln_ctx *c = vc;
    size_t lo, hi, C = (size_t)c->C;
    rm_pool_range((size_t)c->N, part, nparts, 1, &lo, &hi);
    for (size_t r = lo; r < hi; r++)
        ln_row(c->ln + r * C, c->mean + r, c->rstd + r, c->x + r * C, c->w, c->b, c->C);
}

static void cpu_layernorm_fwd(float *out, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int N, int C)
{
    ln_ctx c = {.ln = out, .mean = mean, .rstd = rstd, .x = x, .w = w, .b = b, .N = N, .C = C};
    rm_pool_run(ln_fwd_part, &c);
}

TF_CLONES static void residual_row(float *res, const float *x, const float *bias, int C)
{
    for (int j = 0; j < C; j++)
        res[j] += x[j] + bias[j];
}

static void res_ln_part(void *vc, int part, int nparts)
{
    const ln_ctx *c = vc;
    size_t lo, hi, C = (size_t)c->C;
    rm_pool_range((size_t)c->N, part, nparts, 1, &lo, &hi);
    for (size_t r = lo; r < hi; r++) {
        float *res = c->res + r * C;
        residual_row(res, c->x + r * C, c->bias, c->C);
        if (c->ln)
            ln_row(c->ln + r * C, c->mean + r, c->rstd + r, res, c->w, c->b, c->C);
    }
}

static void cpu_residual_layernorm_fwd(float *res, const float *x, const float *bias, float *ln, float *mean,
                                       float *rstd, const float *w, const float *b, int N, int C)
{
    ln_ctx c = {res, ln, mean, rstd, x, bias, w, b, N, C};
    rm_pool_run(res_ln_part, &c);
}

typedef struct {
    float *dx, *dw, *db;
    const float *dout, *x, *mean, *rstd, *w;
    int N, C;
    bool acc;
} lnb_ctx;

TF_CLONES static void lnb_row(float *dx, const float *dout, const float *x, float mean, float rstd,
                              const float *w, int C)
{
    float s1 = 0, s2 = 0; /* mean of dnorm and of dnorm * xhat */
    for (int j = 0; j < C; j++) {
        float dn = dout[j] * w[j], xh = (x[j] - mean) * rstd;
        s1 += dn;
        s2 += dn * xh;
    }
    s1 /= (float)C;
    s2 /= (float)C;
    for (int j = 0; j < C; j++) {
        float dn = dout[j] * w[j], xh = (x[j] - mean) * rstd;
        dx[j] += rstd * (dn - s1 - xh * s2);
    }
}

/* Rows for the input gradient, then columns for the parameter gradients. */
static void lnb_rows_part(void *vc, int part, int nparts)
{
    const lnb_ctx *c = vc;
    size_t lo, hi, C = (size_t)c->C;
    rm_pool_range((size_t)c->N, part, nparts, 1, &lo, &hi);
    for (size_t r = lo; r < hi; r++)
        lnb_row(c->dx + r * C, c->dout + r * C, c->x + r * C, c->mean[r], c->rstd[r], c->w, c->C);
}

TF_CLONES static void lnb_cols(float *dw, float *db, const float *dout, const float *x, const float *mean,
                               const float *rstd, size_t N, size_t C, size_t lo, size_t hi, bool acc)
{
    if (!acc)
        for (size_t j = lo; j < hi; j++)
            dw[j] = db[j] = 0;
    for (size_t r = 0; r < N; r++) {
        const float *d = dout + r * C, *xr = x + r * C;
        float m = mean[r], rs = rstd[r];
        for (size_t j = lo; j < hi; j++) {
            dw[j] += d[j] * (xr[j] - m) * rs;
            db[j] += d[j];
        }
    }
}

static void lnb_cols_part(void *vc, int part, int nparts)
{
    const lnb_ctx *c = vc;
    size_t lo, hi;
    rm_pool_range((size_t)c->C, part, nparts, 16, &lo, &hi);
    lnb_cols(c->dw, c->db, c->dout, c->x, c->mean, c->rstd, (size_t)c->N, (size_t)c->C, lo, hi, c->acc);
}

static void cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dout, const float *x,
                              const float *mean, const float *rstd, const float *w, int N, int C,
                              bool accumulate)
{
    lnb_ctx c = {dx, dw, db, dout, x, mean, rstd, w, N, C, accumulate};
    rm_pool_run(lnb_rows_part, &c);
    rm_pool_run(lnb_cols_part, &c);
}

/* ---------------- GELU, bias sums ---------------- */

typedef struct {
    float *h, *g;           /* forward: h in/out, g out; backward: h = dh out */
    const float *bias, *dg; /* forward: bias; backward: dg */
    const float *hin;       /* backward: the forward's h */
    int N, C;
} gelu_ctx;

TF_CLONES static void gelu_rows(float *h, float *g, const float *bias, size_t rows, size_t C)
{
    for (size_t r = 0; r < rows; r++) {
        float *hr = h + r * C, *gr = g + r * C;
        for (size_t j = 0; j < C; j++) {
            float x = hr[j] + bias[j];
            hr[j] = x;
            gr[j] = 0.5f * x * (1.0f + fast_tanhf(GELU_K * (x + GELU_A * x * x * x)));
        }
    }
}

static void gelu_fwd_part(void *vc, int part, int nparts)
{
    const gelu_ctx *c = vc;
    size_t lo, hi, C = (size_t)c->C;
    rm_pool_range((size_t)c->N, part, nparts, 1, &lo, &hi);
    gelu_rows(c->h + lo * C, c->g + lo * C, c->bias, hi - lo, C);
}

static void cpu_bias_gelu_fwd(float *h, float *g, const float *bias, int N, int C)
{
    gelu_ctx c = {.h = h, .g = g, .bias = bias, .N = N, .C = C};
    rm_pool_run(gelu_fwd_part, &c);
}

TF_CLONES static void gelu_bwd_n(float *dh, const float *dg, const float *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = h[i], u = GELU_K * (x + GELU_A * x * x * x), th = fast_tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        dh[i] = dg[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
}

static void gelu_bwd_part(void *vc, int part, int nparts)
{
    const gelu_ctx *c = vc;
    size_t lo, hi;
    rm_pool_range((size_t)c->N * (size_t)c->C, part, nparts, 64, &lo, &hi);
    gelu_bwd_n(c->h + lo, c->dg + lo, c->hin + lo, hi - lo);
}

static void cpu_gelu_bwd(float *dh, const float *dg, const float *h, int N, int C)
{
    gelu_ctx c = {.h = dh, .dg = dg, .hin = h, .N = N, .C = C};
    rm_pool_run(gelu_bwd_part, &c);
}

typedef struct {
    float *db;
    const float *dy;
    int N, C;
    bool acc;
} colsum_ctx;

TF_CLONES static void colsum_cols(float *db, const float *dy, size_t N, size_t C, size_t lo, size_t hi,
                                  bool acc)
{
    if (!acc)
        for (size_t j = lo; j < hi; j++)
            db[j] = 0;
    for (size_t r = 0; r < N; r++) {
        const float *d = dy + r * C;
        for (size_t j = lo; j < hi; j++)
            db[j] += d[j];
    }
}

static void colsum_part(void *vc, int part, int nparts)
{
    const colsum_ctx *c = vc;
    size_t lo, hi;
    rm_pool_range((size_t)c->C, part, nparts, 16, &lo, &hi);
    colsum_cols(c->db, c->dy, (size_t)c->N, (size_t)c->C, lo, hi, c->acc);
}

static void cpu_colsum(float *db, const float *dy, int N, int C, bool accumulate)
{
    colsum_ctx c = {db, dy, N, C, accumulate};
    rm_pool_run(colsum_part, &c);
}

/* ---------------- causal attention ---------------- */

/* Query rows per block: the masked half skipped is (1 - 1/nblocks)/2 of the scores. */
static int attn_block(int T)
{
    return T >= 256 ? 32 : 16;
}

/* Per part: a [block x T] probability block and its gradient. */
static size_t attn_part_floats(int T)
{
    return 2 * (size_t)attn_block(T) * (size_t)T;
}

static size_t cpu_attention_scratch(int T)
{
    return attn_part_floats(T) * (size_t)RM_POOL_MAX_THREADS;
}

typedef struct {
    float *out, *dqkv, *scratch;
    float *lse_w;
    const float *lse, *qkv, *dout, *o;
    int B, T, C, NH;
} attn_ctx;

/* Row r of a block, scores s[0..i] valid (i = its position): masked softmax in place with its
 * log-sum-exp; columns beyond i (to ncols) set to 0. */
TF_CLONES static float softmax_causal(float *s, int i, int ncols)
{
    float mx = s[0];
    for (int j = 1; j <= i; j++)
        mx = s[j] > mx ? s[j] : mx;
    float sum = 0;
    for (int j = 0; j <= i; j++) {
        float e = fast_expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= i; j++)
        s[j] *= inv;
    for (int j = i + 1; j < ncols; j++)
        s[j] = 0;
    return mx + logf(sum);
}

static void attn_fwd_part(void *vc, int part, int nparts)
{
    const attn_ctx *c = vc;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH, C3 = 3 * C, bs = attn_block(T);
    float scale = 1.0f / sqrtf((float)hs), *S = c->scratch + (size_t)part * attn_part_floats(T);
    size_t lo, hi;
    rm_pool_range((size_t)c->B * (size_t)NH, part, nparts, 1, &lo, &hi);
    for (size_t bh = lo; bh < hi; bh++) {
        int b = (int)(bh / (size_t)NH), h = (int)(bh % (size_t)NH);
        const float *base = c->qkv + (size_t)b * (size_t)T * (size_t)C3 + (size_t)h * (size_t)hs;
        const float *K = base + C, *V = base + 2 * C;
        float *lse = c->lse_w + bh * (size_t)T;
        for (int i0 = 0; i0 < T; i0 += bs) {
            int rows = T - i0 < bs ? T - i0 : bs, ncols = i0 + rows;
            const float *Q = base + (size_t)i0 * (size_t)C3;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, ncols, hs, scale, Q, C3, K, C3, 0.0f,
                        S, ncols);
            for (int r = 0; r < rows; r++)
                lse[i0 + r] = softmax_causal(S + (size_t)r * (size_t)ncols, i0 + r, ncols);
            float *O = c->out + ((size_t)b * (size_t)T + (size_t)i0) * (size_t)C + (size_t)h * (size_t)hs;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, ncols, 1.0f, S, ncols, V, C3,
                        0.0f, O, C);
        }
    }
}

static int attn_parts(int T, size_t pairs)
{
    (void)T;
    return pairs < RM_POOL_MAX_THREADS ? (int)pairs : RM_POOL_MAX_THREADS;
}

static void cpu_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                              float *scratch)
{
    attn_ctx c = {.out = out, .scratch = scratch, .lse_w = lse, .qkv = qkv, .B = B, .T = T, .C = C, .NH = NH};
    rm_pool_run_n(attn_fwd_part, &c, attn_parts(T, (size_t)B * (size_t)NH));
}

/* dS = P * (dP - D) over the valid columns of one row; P recomputed from the scores and lse. */
TF_CLONES static void attn_grad_row(float *P, float *dP, int i, int ncols, float lse, float D)
{
    for (int j = 0; j <= i; j++) {
        float p = fast_expf(P[j] - lse);
        P[j] = p;
        dP[j] = p * (dP[j] - D);
    }
    for (int j = i + 1; j < ncols; j++)
        P[j] = dP[j] = 0;
}

static void attn_bwd_part(void *vc, int part, int nparts)
{
    const attn_ctx *c = vc;
    int T = c->T, C = c->C, NH = c->NH, hs = C / NH, C3 = 3 * C, bs = attn_block(T);
    float scale = 1.0f / sqrtf((float)hs);
    float *P = c->scratch + (size_t)part * attn_part_floats(T), *dP = P + (size_t)bs * (size_t)T;
    size_t lo, hi;
    rm_pool_range((size_t)c->B * (size_t)NH, part, nparts, 1, &lo, &hi);
    for (size_t bh = lo; bh < hi; bh++) {
        int b = (int)(bh / (size_t)NH), h = (int)(bh % (size_t)NH);
        size_t row0 = (size_t)b * (size_t)T, hoff = (size_t)h * (size_t)hs;
        const float *base = c->qkv + row0 * (size_t)C3 + hoff, *K = base + C, *V = base + 2 * C;
        float *dbase = c->dqkv + row0 * (size_t)C3 + hoff, *dK = dbase + C, *dV = dbase + 2 * C;
        const float *lse = c->lse + bh * (size_t)T;
        for (int t = 0; t < T; t++) { /* dK, dV accumulate over the query blocks */
            memset(dK + (size_t)t * (size_t)C3, 0, (size_t)hs * sizeof(float));
            memset(dV + (size_t)t * (size_t)C3, 0, (size_t)hs * sizeof(float));
        }
        for (int i0 = 0; i0 < T; i0 += bs) {
            int rows = T - i0 < bs ? T - i0 : bs, ncols = i0 + rows;
            const float *Q = base + (size_t)i0 * (size_t)C3;
            const float *dO = c->dout + (row0 + (size_t)i0) * (size_t)C + hoff;
            const float *O = c->o + (row0 + (size_t)i0) * (size_t)C + hoff;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, ncols, hs, scale, Q, C3, K, C3, 0.0f,
                        P, ncols);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, ncols, hs, 1.0f, dO, C, V, C3, 0.0f,
                        dP, ncols);
            for (int r = 0; r < rows; r++) {
                const float *dor = dO + (size_t)r * (size_t)C, *orow = O + (size_t)r * (size_t)C;
                float D = 0;
                for (int d = 0; d < hs; d++)
                    D += dor[d] * orow[d];
                attn_grad_row(P + (size_t)r * (size_t)ncols, dP + (size_t)r * (size_t)ncols, i0 + r, ncols,
                              lse[i0 + r], D);
            }
            float *dQ = dbase + (size_t)i0 * (size_t)C3;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, ncols, scale, dP, ncols, K, C3,
                        0.0f, dQ, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ncols, hs, rows, scale, dP, ncols, Q, C3,
                        1.0f, dK, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ncols, hs, rows, 1.0f, P, ncols, dO, C, 1.0f,
                        dV, C3);
        }
    }
}

static void cpu_attention_bwd(float *dqkv, const float *dout, const float *out, const float *lse,
                              const float *qkv, int B, int T, int C, int NH, float *scratch)
{
    attn_ctx c = {.dqkv = dqkv,
                  .scratch = scratch,
                  .lse = lse,
                  .qkv = qkv,
                  .dout = dout,
                  .o = out,
                  .B = B,
                  .T = T,
                  .C = C,
                  .NH = NH};
    rm_pool_run_n(attn_bwd_part, &c, attn_parts(T, (size_t)B * (size_t)NH));
}

/* ---------------- cross-entropy over the vocabulary ---------------- */

typedef struct {
    float *logits;
    const int32_t *targets;
    int N, V;
    float grad_scale;
    double loss[RM_POOL_MAX_THREADS];
    int32_t correct[RM_POOL_MAX_THREADS];
} xent_ctx;

TF_CLONES static float xent_row(float *z, int V, int target, float grad_scale, int *argmax)
{
    float mx = z[0];
    int best = 0;
    for (int j = 1; j < V; j++)
        if (z[j] > mx) {
            mx = z[j];
            best = j;
        }
    float sum = 0;
    for (int j = 0; j < V; j++)
        sum += fast_expf(z[j] - mx);
    float lse = mx + logf(sum), loss = lse - z[target];
    if (grad_scale != 0) {
        for (int j = 0; j < V; j++)
            z[j] = fast_expf(z[j] - lse) * grad_scale;
        z[target] -= grad_scale;
    }
    *argmax = best;
    return loss;
}

static void xent_part(void *vc, int part, int nparts)
{
    xent_ctx *c = vc;
    size_t lo, hi;
    rm_pool_range((size_t)c->N, part, nparts, 1, &lo, &hi);
    double l = 0;
    int32_t ok = 0;
    for (size_t r = lo; r < hi; r++) {
        int best, tg = c->targets[r];
        l += xent_row(c->logits + r * (size_t)c->V, c->V, tg, c->grad_scale, &best);
        ok += best == tg;
    }
    c->loss[part] = l;
    c->correct[part] = ok;
}

static void cpu_xent(float *logits, const int32_t *targets, int N, int V, float grad_scale, float loss_scale,
                     float *loss_sum, int32_t *correct)
{
    xent_ctx c = {.logits = logits, .targets = targets, .N = N, .V = V, .grad_scale = grad_scale};
    int parts = rm_pool_threads();
    rm_pool_run(xent_part, &c);
    double l = 0;
    int32_t ok = 0;
    for (int p = 0; p < parts; p++) {
        l += c.loss[p];
        ok += c.correct[p];
    }
    *loss_sum = (float)(l * loss_scale);
    if (correct)
        *correct = ok;
}

/* ---------------- the vocabulary-parallel cross-entropy (transformer.h) ---------------- */

static void cpu_xent_vocab_max(float *stats, const float *logits, int N, int Vl, int valid, int T, int t)
{
    memset(stats, 0, (size_t)N * (size_t)T * sizeof(float));
    for (int n = 0; n < N; n++) {
        const float *y = logits + (size_t)n * (size_t)Vl;
        float mx = -FLT_MAX;
        for (int j = 0; j < valid; j++)
            mx = y[j] > mx ? y[j] : mx;
        stats[(size_t)n * (size_t)T + (size_t)t] = mx;
    }
}

static void cpu_xent_vocab_sums(float *s2, float *mx, const float *stats, const float *logits,
                                const int32_t *tgt, int N, int Vl, int valid, int v0, int T)
{
    for (int n = 0; n < N; n++) {
        const float *sl = stats + (size_t)n * (size_t)T;
        float m = -FLT_MAX;
        for (int q = 0; q < T; q++)
            m = sl[q] > m ? sl[q] : m;
        mx[n] = m;
    }
    for (int n = 0; n < N; n++) {
        const float *y = logits + (size_t)n * (size_t)Vl;
        double s = 0;
        for (int j = 0; j < valid; j++)
            s += exp((double)y[j] - mx[n]);
        int64_t g = (int64_t)tgt[n] - v0;
        s2[2 * (size_t)n] = (float)s;
        s2[2 * (size_t)n + 1] = g >= 0 && g < valid ? y[g] : 0.0f;
    }
}

static void cpu_xent_vocab_grad(float *logits, float *rowloss, const float *s2, const float *mx,
                                const int32_t *tgt, int N, int Vl, int valid, int v0, float grad_scale)
{
    for (int n = 0; n < N; n++) {
        float *y = logits + (size_t)n * (size_t)Vl;
        double S = s2[2 * (size_t)n];
        rowloss[n] = (float)(log(S) + mx[n] - s2[2 * (size_t)n + 1]);
        int64_t g = (int64_t)tgt[n] - v0;
        for (int j = 0; j < Vl; j++) {
            double d = j < valid ? exp((double)y[j] - mx[n]) / S : 0.0;
            if (j == g)
                d -= 1.0;
            y[j] = (float)(d * grad_scale);
        }
    }
}

const rm_tf_kernels rm_tf_cpu = {
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .residual_layernorm_fwd = cpu_residual_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .bias_gelu_fwd = cpu_bias_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .colsum = cpu_colsum,
    .attention_scratch = cpu_attention_scratch,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .xent = cpu_xent,
    .set_threads = rm_pool_set_threads,
    .embed_vocab_fwd = cpu_embed_vocab_fwd,
    .embed_vocab_bwd = cpu_embed_vocab_bwd,
    .xent_vocab_max = cpu_xent_vocab_max,
    .xent_vocab_sums = cpu_xent_vocab_sums,
    .xent_vocab_grad = cpu_xent_vocab_grad,
};
