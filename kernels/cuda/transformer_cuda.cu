/* transformer_cuda.cu — the transformer's kernels (kernels/transformer.h) on the CUDA table:
 * rm_tf_cuda. docs/gpu.md, "The transformer on the GPU".
 *
 * Design:
 *  - Activations and gradients are fp32 in device memory, as the model interface holds them; the
 *    matrix products are the table's gemm (bf16 or fp16 operands with fp32 accumulation under
 *    precision bf16/fp16, TF32 otherwise). These kernels do the rest of a step.
 *  - Every entry runs on the table's compute stream, reports the device memory it writes
 *    (rm_cuda_note_written, so no cached 16-bit gemm operand goes stale) and checks its launches
 *    (rm_cuda_launched: the table's first error, which check() returns - never a silent result).
 *  - Causal attention is fused (kernels/attn_tile.h): per (sequence, head, tile of 32 query rows)
 *    one block walks the key tiles up to the diagonal with an online softmax, Q/K/V tiles in shared
 *    memory; no T x T matrix exists in device memory. The backward pass recomputes probabilities
 *    from the forward's log-sum-exp (FlashAttention-2's order) in two kernels - dK/dV per key tile,
 *    dQ per query tile - so every gradient element has one writer: no atomics, same bits each run.
 *  - Other reductions are deterministic too: LayerNorm statistics one warp per row; column sums
 *    (biases, LayerNorm gains) by fixed row chunks, then chunks in order; the token-embedding
 *    gradient sorts the tokens (stable radix sort, positions in order) and sums each token's rows
 *    in position order; the cross-entropy sums per-row losses in one block in a fixed order.
 *  - Element formulas shared with the CPU kernels: GELU is GPT-2's tanh form with the constants of
 *    kernels/transformer_cpu.c (the CPU uses a vectorised tanh polynomial, so the two agree to
 *    rounding, which tests/gpu/ allows).
 * Oracle: kernels/transformer_cpu.c (tests/gpu/gpu_tests.c compares every entry on random inputs). */
#include <cub/cub.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_tile.h"
#include "kernels/cuda/tf_cuda.h"
#include "kernels/kernels_cuda.h"

namespace wmma = nvcuda::wmma;

namespace
{

constexpr int kT = 256; /* threads of the row and element kernels */
constexpr int kWarp = 32;
constexpr int kTile = RM_ATTN_TILE;
constexpr int kLanes = RM_ATTN_LANES;
constexpr int kOut = RM_ATTN_MAX_HS / RM_ATTN_LANES; /* output columns per lane, at most */
constexpr int kColChunk = 256;                       /* rows per partial of a column sum */
constexpr float kGeluK = 0.7978845608028654f, kGeluA = 0.044715f;
static_assert(RM_ATTN_THREADS == kTile * kLanes, "attention blocks: 8 lanes per row");
static_assert(kTile % kLanes == 0, "attention: whole scores per lane");

enum { S_SORT_KEYS, S_SORT_VALS, S_SORT_IN, S_SORT_TMP, S_COLSUM, S_ROWS, S_ATTN_D, S_TOK_LOCAL };
static_assert(S_TOK_LOCAL < RM_CUDA_SCRATCH_SLOTS, "tf_cuda.h: more scratch slots");

cudaStream_t stream(void)
{
    return (cudaStream_t)rm_cuda_compute_stream();
}
#define LAUNCHED(name) rm_cuda_launched(__FILE__, __LINE__, "launch " name)
void wrote(const void *p, size_t bytes)
{
    rm_cuda_note_written(p, bytes);
}
unsigned grid1(size_t n)
{
    size_t g = (n + kT - 1) / kT, cap = (size_t)(rm_cuda_sms() > 0 ? rm_cuda_sms() : 80) * 32;
    return (unsigned)(g < 1 ? 1 : g > cap ? cap : g);
}
unsigned rows_grid(int rows) /* one warp per row */
{
    return grid1((size_t)rows * kWarp);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = kWarp / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* Sum / max over the 8 lanes of one attention row (lanes 8k..8k+7 of a warp). */
__device__ __forceinline__ float row_sum(float v)
{
    for (int o = kLanes / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float row_max(float v)
{
    for (int o = kLanes / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x)));
}
__device__ __forceinline__ float gelu_grad(float x)
{
    float u = kGeluK * (x + kGeluA * x * x * x), th = tanhf(u);
    float du = kGeluK * (1.0f + 3.0f * kGeluA * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

/* ------------------------------------------------------------------ embeddings */

__global__ void k_embed_fwd(float *out, const int32_t *__restrict__ tok, const float *__restrict__ wte,
                            const float *__restrict__ wpe, int N, int T, int C)
{
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        out[i] = wte[(size_t)tok[r] * C + c] + wpe[(r % T) * C + c];
    }
}

__global__ void k_iota(int32_t *v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v[i] = i;
}

/* After a stable sort of (token, position): block i.x starts a run of equal tokens or returns; its
 * threads (one per channel) add the run's rows in position order. Tokens >= limit (another
 * rank's vocabulary, k_tok_local) are skipped. */
__global__ void k_embed_wte_bwd(float *dwte, const float *__restrict__ dout, const int32_t *__restrict__ skey,
                                const int32_t *__restrict__ spos, int N, int C, int limit)
{
    int i = blockIdx.x;
    int tok = skey[i];
    if ((i > 0 && skey[i - 1] == tok) || tok >= limit)
        return;
    for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < C; c += gridDim.y * blockDim.x) {
        float acc = 0.0f;
        for (int k = i; k < N && skey[k] == tok; k++)
            acc += dout[(size_t)spos[k] * C + c];
        dwte[(size_t)tok * C + c] += acc;
    }
}

/* The vocabulary-parallel embedding (transformer.h embed_vocab_fwd): this rank's rows or zeros,
 * plus wpe where given. */
__global__ void k_embed_vocab_fwd(float *out, const int32_t *__restrict__ tok, const float *__restrict__ wte,
                                  int v0, int Vl, const float *__restrict__ wpe, int N, int T, int C)
{
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / C, c = i % C;
        int v = tok[r] - v0;
        float a = v >= 0 && v < Vl ? wte[(size_t)v * C + c] : 0.0f;
        out[i] = wpe ? a + wpe[(r % T) * C + c] : a;
    }
}

/* Tokens as this rank's rows: tok - v0 inside [0, Vl), else Vl (sorted last, then skipped). */
__global__ void k_tok_local(int32_t *out, const int32_t *__restrict__ tok, int v0, int Vl, int N)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
        int v = tok[i] - v0;
        out[i] = v >= 0 && v < Vl ? v : Vl;
    }
}

__global__ void k_embed_wpe_bwd(float *dwpe, const float *__restrict__ dout, int B, int T, int C)
{
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int b = 0; b < B; b++)
            acc += dout[(size_t)b * n + i];
        dwpe[i] += acc;
    }
}

/* ------------------------------------------------------------------ LayerNorm */

/* One warp per row: mean, then the variance around it (two passes over the row, as the CPU). */
__device__ __forceinline__ void ln_row(float *o, float *mean, float *rstd, const float *x, const float *w,
                                       const float *b, int C, int lane)
{
    float s = 0.0f;
    for (int j = lane; j < C; j += kWarp)
        s += x[j];
    float mu = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int j = lane; j < C; j += kWarp) {
        float d = x[j] - mu;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + RM_LN_EPS);
    for (int j = lane; j < C; j += kWarp)
        o[j] = (x[j] - mu) * rs * w[j] + b[j];
    if (lane == 0) {
        *mean = mu;
        *rstd = rs;
    }
}

__global__ void k_layernorm_fwd(float *out, float *mean, float *rstd, const float *__restrict__ x,
                                const float *__restrict__ w, const float *__restrict__ b, int N, int C)
{
    int lane = threadIdx.x % kWarp, wpb = blockDim.x / kWarp;
    for (int r = blockIdx.x * wpb + threadIdx.x / kWarp; r < N; r += gridDim.x * wpb)
        ln_row(out + (size_t)r * C, mean + r, rstd + r, x + (size_t)r * C, w, b, C, lane);
}

__global__ void k_residual_ln_fwd(float *res, const float *__restrict__ x, const float *__restrict__ bias,
                                  float *ln, float *mean, float *rstd, const float *__restrict__ w,
                                  const float *__restrict__ b, int N, int C)
{
    int lane = threadIdx.x % kWarp, wpb = blockDim.x / kWarp;
    for (int r = blockIdx.x * wpb + threadIdx.x / kWarp; r < N; r += gridDim.x * wpb) {
        float *rr = res + (size_t)r * C;
        const float *xr = x + (size_t)r * C;
        for (int j = lane; j < C; j += kWarp)
            rr[j] += xr[j] + (bias ? bias[j] : 0.0f);
        __syncwarp();
        if (ln)
            ln_row(ln + (size_t)r * C, mean + r, rstd + r, rr, w, b, C, lane);
    }
}

/* dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w; one warp per row. */
__global__ void k_layernorm_bwd_dx(float *dx, const float *__restrict__ dout, const float *__restrict__ x,
                                   const float *__restrict__ mean, const float *__restrict__ rstd,
                                   const float *__restrict__ w, int N, int C)
{
    int lane = threadIdx.x % kWarp, wpb = blockDim.x / kWarp;
    for (int r = blockIdx.x * wpb + threadIdx.x / kWarp; r < N; r += gridDim.x * wpb) {
        const float *d = dout + (size_t)r * C, *xr = x + (size_t)r * C;
        float mu = mean[r], rs = rstd[r], sg = 0.0f, sgx = 0.0f;
        for (int j = lane; j < C; j += kWarp) {
            float g = d[j] * w[j], xh = (xr[j] - mu) * rs;
            sg += g;
            sgx += g * xh;
        }
        sg = warp_sum(sg) / (float)C;
        sgx = warp_sum(sgx) / (float)C;
        float *o = dx + (size_t)r * C;
        for (int j = lane; j < C; j += kWarp) {
            float xh = (xr[j] - mu) * rs;
            o[j] += rs * (d[j] * w[j] - sg - xh * sgx);
        }
    }
}

/* Column sums in two deterministic phases: block (x: 32 columns, y: a chunk of kColChunk rows)
 * writes partial[chunk][col]; k_col_finish adds the chunks in order. what: 0 = dy, 1 = dy * xhat. */
__global__ void k_col_partial(float *partial, const float *__restrict__ dy, const float *__restrict__ x,
                              const float *__restrict__ mean, const float *__restrict__ rstd, int N, int C,
                              int what)
{
    __shared__ float s[8][kWarp + 1];
    int c = blockIdx.x * kWarp + threadIdx.x, r0 = blockIdx.y * kColChunk;
    int r1 = r0 + kColChunk < N ? r0 + kColChunk : N;
    float acc = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
            float v = dy[(size_t)r * C + c];
            if (what)
                v *= (x[(size_t)r * C + c] - mean[r]) * rstd[r];
            acc += v;
        }
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int k = 0; k < (int)blockDim.y; k++)
            t += s[k][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}

__global__ void k_col_finish(float *out, const float *__restrict__ partial, int chunks, int C,
                             bool accumulate)
{
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
        float t = 0.0f;
        for (int k = 0; k < chunks; k++)
            t += partial[(size_t)k * C + c];
        out[c] = accumulate ? out[c] + t : t;
    }
}

void colsum_any(float *out, const float *dy, const float *x, const float *mean, const float *rstd, int N,
                int C, bool accumulate, int what, const char *name)
{
    int chunks = (N + kColChunk - 1) / kColChunk;
    float *part = (float *)rm_cuda_scratch(S_COLSUM, (size_t)chunks * C * sizeof(float));
    if (!part)
        return;
    dim3 g((C + kWarp - 1) / kWarp, chunks), b(kWarp, 8);
    k_col_partial<<<g, b, 0, stream()>>>(part, dy, x, mean, rstd, N, C, what);
    LAUNCHED("k_col_partial");
    k_col_finish<<<grid1(C), kT, 0, stream()>>>(out, part, chunks, C, accumulate);
    rm_cuda_launched(__FILE__, __LINE__, name);
}

/* ------------------------------------------------------------------ GELU */

__global__ void k_bias_gelu(float *h, float *g, const float *__restrict__ bias, size_t n, int C)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = h[i] + bias[i % C];
        h[i] = x;
        g[i] = gelu(x);
    }
}

__global__ void k_gelu_bwd(float *dh, const float *dg, const float *__restrict__ h, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dh[i] = dg[i] * gelu_grad(h[i]);
}

/* ------------------------------------------------------------------ attention */

struct attn_geo {
    int T, C, NH, hs, ld;
    float scale;
};

/* Rows rows0.. of one head's q (part 0), k (1) or v (2) into a TILE x ld shared tile, times mul;
 * rows past T are zero. */
__device__ __forceinline__ void load_tile(float *dst, const float *__restrict__ seq, int part, int h,
                                          int row0, const attn_geo &g, float mul)
{
    for (int e = threadIdx.x; e < kTile * g.hs; e += blockDim.x) {
        int r = e / g.hs, d = e % g.hs, i = row0 + r;
        dst[r * g.ld + d] = i < g.T ? seq[(size_t)i * 3 * g.C + part * g.C + h * g.hs + d] * mul : 0.0f;
    }
}
/* The same for a row-major [T x C] tensor (the attention output or its gradient), head h. */
__device__ __forceinline__ void load_tile_c(float *dst, const float *__restrict__ seq, int h, int row0,
                                            const attn_geo &g)
{
    for (int e = threadIdx.x; e < kTile * g.hs; e += blockDim.x) {
        int r = e / g.hs, d = e % g.hs, i = row0 + r;
        dst[r * g.ld + d] = i < g.T ? seq[(size_t)i * g.C + h * g.hs + d] : 0.0f;
    }
}

/* grid (query tiles, NH, B), RM_ATTN_THREADS threads: thread t serves query row r = t / 8 of the
 * tile, scores of keys c = sub + 8 i and output columns d = sub + 8 j (sub = t % 8). */
__global__ void __launch_bounds__(RM_ATTN_THREADS)
    k_attn_fwd(float *out, float *lse, const float *__restrict__ qkv, attn_geo g)
{
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + kTile * g.ld, *Vs = Ks + kTile * g.ld, *Ps = Vs + kTile * g.ld;
    int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
    int r = threadIdx.x / kLanes, sub = threadIdx.x % kLanes, qi = q0 + r;
    const float *seq = qkv + (size_t)b * g.T * 3 * g.C;
    load_tile(Qs, seq, 0, h, q0, g, g.scale);
    float o[kOut];
#pragma unroll
    for (int j = 0; j < kOut; j++)
        o[j] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int kend = rm_attn_key_end(q0, g.T);
    for (int k0 = 0; k0 < kend; k0 += kTile) {
        __syncthreads(); /* the previous tile's readers are done */
        load_tile(Ks, seq, 1, h, k0, g, 1.0f);
        load_tile(Vs, seq, 2, h, k0, g, 1.0f);
        __syncthreads();
        float s[kTile / kLanes], mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < kTile / kLanes; i++)
            s[i] = 0.0f;
        for (int d = 0; d < g.hs; d++) {
            float q = Qs[r * g.ld + d];
#pragma unroll
            for (int i = 0; i < kTile / kLanes; i++)
                s[i] += q * Ks[(sub + kLanes * i) * g.ld + d];
        }
#pragma unroll
        for (int i = 0; i < kTile / kLanes; i++) {
            if (!rm_attn_visible(k0 + sub + kLanes * i, qi, g.T))
                s[i] = -INFINITY;
            mx = fmaxf(mx, s[i]);
        }
        float mnew = fmaxf(m, row_max(mx));
        float alpha = rm_attn_rescale(m, mnew), ps = 0.0f;
#pragma unroll
        for (int i = 0; i < kTile / kLanes; i++) {
            float p = s[i] == -INFINITY ? 0.0f : expf(s[i] - mnew);
            Ps[r * (kTile + 1) + sub + kLanes * i] = p;
            ps += p;
        }
        l = l * alpha + row_sum(ps);
        m = mnew;
        __syncwarp(); /* row r's probabilities come from its own 8 lanes */
#pragma unroll
        for (int j = 0; j < kOut; j++)
            o[j] *= alpha;
        for (int c = 0; c < kTile; c++) {
            float p = Ps[r * (kTile + 1) + c];
#pragma unroll
            for (int j = 0; j < kOut; j++) {
                int d = sub + kLanes * j;
                if (d < g.hs)
                    o[j] += p * Vs[c * g.ld + d];
            }
        }
    }
    if (qi < g.T) {
        float inv = 1.0f / l;
        float *orow = out + ((size_t)b * g.T + qi) * g.C + h * g.hs;
#pragma unroll
        for (int j = 0; j < kOut; j++) {
            int d = sub + kLanes * j;
            if (d < g.hs)
                orow[d] = o[j] * inv;
        }
        if (sub == 0)
            lse[((size_t)b * g.NH + h) * g.T + qi] = m + logf(l);
    }
}

/* D[b, h, i] = dO_i . O_i (the softmax backward's row term); one warp per (b, i, h). */
__global__ void k_attn_d(float *D, const float *__restrict__ dout, const float *__restrict__ out, int B,
                         attn_geo g)
{
    int lane = threadIdx.x % kWarp, wpb = blockDim.x / kWarp;
    size_t rows = (size_t)B * g.T * g.NH;
    for (size_t w = blockIdx.x * (size_t)wpb + threadIdx.x / kWarp; w < rows; w += (size_t)gridDim.x * wpb) {
        size_t bi = w / g.NH; /* b * T + i */
        int h = (int)(w % g.NH);
        const float *a = dout + bi * g.C + h * g.hs, *o = out + bi * g.C + h * g.hs;
        float s = 0.0f;
        for (int d = lane; d < g.hs; d += kWarp)
            s += a[d] * o[d];
        s = warp_sum(s);
        if (lane == 0) {
            size_t b = bi / g.T, i = bi % g.T;
            D[(b * g.NH + h) * g.T + i] = s;
        }
    }
}

/* dS_ij = P_ij (dO_i . V_j - D_i), P_ij = exp(scale q_i . k_j - lse_i) where visible, else 0; the
 * dot products over shared tiles whose rows are qrow (Q, dO) and krow (K, V). */
__device__ __forceinline__ void attn_ds(float *p, float *ds, const float *Qr, const float *dOr,
                                        const float *Kr, const float *Vr, float lse, float D, bool vis,
                                        const attn_geo &g)
{
    float s = 0.0f, dp = 0.0f;
    for (int d = 0; d < g.hs; d++) {
        s += Qr[d] * Kr[d];
        dp += dOr[d] * Vr[d];
    }
    *p = vis ? expf(s * g.scale - lse) : 0.0f;
    *ds = *p * (dp - D);
}

/* dK, dV of one key tile: grid (key tiles, NH, B); thread t serves key row kr = t / 8. */
__global__ void __launch_bounds__(RM_ATTN_THREADS)
    k_attn_bwd_kv(float *dqkv, const float *__restrict__ dout, const float *__restrict__ lse,
                  const float *__restrict__ Dv, const float *__restrict__ qkv, attn_geo g)
{
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + kTile * g.ld, *Qs = Vs + kTile * g.ld, *dOs = Qs + kTile * g.ld;
    float *Pt = dOs + kTile * g.ld, *St = Pt + kTile * (kTile + 1), *Ls = St + kTile * (kTile + 1),
          *Ds = Ls + kTile;
    int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * kTile;
    int kr = threadIdx.x / kLanes, sub = threadIdx.x % kLanes, kj = k0 + kr;
    const float *seq = qkv + (size_t)b * g.T * 3 * g.C, *dseq = dout + (size_t)b * g.T * g.C;
    const float *lrow = lse + ((size_t)b * g.NH + h) * g.T, *drow = Dv + ((size_t)b * g.NH + h) * g.T;
    load_tile(Ks, seq, 1, h, k0, g, 1.0f);
    load_tile(Vs, seq, 2, h, k0, g, 1.0f);
    float dk[kOut], dv[kOut];
#pragma unroll
    for (int j = 0; j < kOut; j++)
        dk[j] = dv[j] = 0.0f;
    for (int q0 = k0; q0 < g.T; q0 += kTile) {
        __syncthreads();
        load_tile(Qs, seq, 0, h, q0, g, 1.0f);
        load_tile_c(dOs, dseq, h, q0, g);
        if (threadIdx.x < kTile) {
            int i = q0 + threadIdx.x;
            Ls[threadIdx.x] = i < g.T ? lrow[i] : 0.0f;
            Ds[threadIdx.x] = i < g.T ? drow[i] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kTile / kLanes; i++) {
            int rq = sub + kLanes * i;
            float p, ds;
            attn_ds(&p, &ds, Qs + rq * g.ld, dOs + rq * g.ld, Ks + kr * g.ld, Vs + kr * g.ld, Ls[rq], Ds[rq],
                    rm_attn_visible(kj, q0 + rq, g.T), g);
            Pt[kr * (kTile + 1) + rq] = p;
            St[kr * (kTile + 1) + rq] = ds;
        }
        __syncwarp(); /* key row kr's scores come from its own 8 lanes */
        for (int rq = 0; rq < kTile; rq++) {
            float p = Pt[kr * (kTile + 1) + rq], ds = St[kr * (kTile + 1) + rq];
#pragma unroll
            for (int j = 0; j < kOut; j++) {
                int d = sub + kLanes * j;
                if (d < g.hs) {
                    dv[j] += p * dOs[rq * g.ld + d];
                    dk[j] += ds * Qs[rq * g.ld + d];
                }
            }
        }
    }
    if (kj < g.T) {
        float *row = dqkv + ((size_t)b * g.T + kj) * 3 * g.C + h * g.hs;
#pragma unroll
        for (int j = 0; j < kOut; j++) {
            int d = sub + kLanes * j;
            if (d < g.hs) {
                row[g.C + d] = dk[j] * g.scale;
                row[2 * g.C + d] = dv[j];
            }
        }
    }
}

/* dQ of one query tile: grid (query tiles, NH, B); thread t serves query row r = t / 8. */
__global__ void __launch_bounds__(RM_ATTN_THREADS)
    k_attn_bwd_q(float *dqkv, const float *__restrict__ dout, const float *__restrict__ lse,
                 const float *__restrict__ Dv, const float *__restrict__ qkv, attn_geo g)
{
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + kTile * g.ld, *Ks = dOs + kTile * g.ld, *Vs = Ks + kTile * g.ld;
    float *St = Vs + kTile * g.ld;
    int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTile;
    int r = threadIdx.x / kLanes, sub = threadIdx.x % kLanes, qi = q0 + r;
    const float *seq = qkv + (size_t)b * g.T * 3 * g.C, *dseq = dout + (size_t)b * g.T * g.C;
    size_t lo = ((size_t)b * g.NH + h) * g.T;
    float L = qi < g.T ? lse[lo + qi] : 0.0f, D = qi < g.T ? Dv[lo + qi] : 0.0f;
    load_tile(Qs, seq, 0, h, q0, g, 1.0f);
    load_tile_c(dOs, dseq, h, q0, g);
    float dq[kOut];
#pragma unroll
    for (int j = 0; j < kOut; j++)
        dq[j] = 0.0f;
    int kend = rm_attn_key_end(q0, g.T);
    for (int k0 = 0; k0 < kend; k0 += kTile) {
        __syncthreads();
        load_tile(Ks, seq, 1, h, k0, g, 1.0f);
        load_tile(Vs, seq, 2, h, k0, g, 1.0f);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kTile / kLanes; i++) {
            int c = sub + kLanes * i;
            float p, ds;
            attn_ds(&p, &ds, Qs + r * g.ld, dOs + r * g.ld, Ks + c * g.ld, Vs + c * g.ld, L, D,
                    rm_attn_visible(k0 + c, qi, g.T), g);
            St[r * (kTile + 1) + c] = ds;
        }
        __syncwarp();
        for (int c = 0; c < kTile; c++) {
            float ds = St[r * (kTile + 1) + c];
#pragma unroll
            for (int j = 0; j < kOut; j++) {
                int d = sub + kLanes * j;
                if (d < g.hs)
                    dq[j] += ds * Ks[c * g.ld + d];
            }
        }
    }
    if (qi < g.T) {
        float *row = dqkv + ((size_t)b * g.T + qi) * 3 * g.C + h * g.hs;
#pragma unroll
        for (int j = 0; j < kOut; j++) {
            int d = sub + kLanes * j;
            if (d < g.hs)
                row[d] = dq[j] * g.scale;
        }
    }
}

/* ------------------------------------------------------------------ attention on the tensor cores
 * Under precision bf16/fp16 with head size 64 (GPT-2's), the same tile walk with bf16 tiles and
 * WMMA 16x16x16 products (fp32 accumulators), as FlashAttention-2 and PyTorch's SDPA do: Q, K, V,
 * dO, the probabilities and dS rounded to bf16, scores, softmax statistics and every sum in fp32.
 * Blocks of 4 warps, 64-row tiles; warp w owns rows 16w..16w+15 of its block's tile, so between
 * the products and the element-wise softmax steps only its own rows change hands (__syncwarp);
 * the block synchronises only around tile loads. Opt-in (RM_CUDA_ATTN=tc) until a GPU run has checked
 * them: compiled for every target and their tile walk emulated on the CPU, never executed yet. */

constexpr int kTcTile = RM_ATTN_TC_TILE, kTcThreads = 128, kTcHs = 64;
constexpr int kLdb = kTcHs + 8;        /* bf16 tile row stride: 144 bytes, fragments 32-byte aligned */
constexpr int kLdf = kTcTile + 4;      /* fp32 tile row stride */
constexpr int kTileB = kTcTile * kLdb; /* elements of one bf16 tile */
constexpr int kTileF = kTcTile * kLdf; /* floats of one fp32 tile */
static_assert((kTileB * 2) % 128 == 0 && (kTileF * 4) % 128 == 0, "tiles keep 128-byte alignment");

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> frag_bt; /* B^T rows */
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* 64 rows x 64 columns of fp32 (row i at src + i * stride, rows past T zero) into a bf16 tile. */
__device__ __forceinline__ void tc_load(__nv_bfloat16 *dst, const float *__restrict__ src, size_t stride,
                                        int row0, int T)
{
    for (int e = threadIdx.x; e < kTcTile * (kTcHs / 4); e += kTcThreads) {
        int r = e / (kTcHs / 4), c = (e % (kTcHs / 4)) * 4, i = row0 + r;
        float4 v = i < T ? *(const float4 *)(src + (size_t)i * stride + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        __nv_bfloat162 *d = (__nv_bfloat162 *)(dst + r * kLdb + c);
        d[0] = __floats2bfloat162_rn(v.x, v.y);
        d[1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

/* C[16 x 64] (fp32, ldc) = A[16 x 64] (bf16 rows, kLdb) times B^T, B given as 64 rows of 64 (kLdb). */
__device__ __forceinline__ void tc_abt(float *c, const __nv_bfloat16 *a, const __nv_bfloat16 *b)
{
    frag_a fa;
    frag_bt fb;
    frag_c acc;
#pragma unroll
    for (int n = 0; n < kTcTile / 16; n++) {
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int k = 0; k < kTcHs / 16; k++) {
            wmma::load_matrix_sync(fa, a + k * 16, kLdb);
            wmma::load_matrix_sync(fb, b + n * 16 * kLdb + k * 16, kLdb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + n * 16, acc, kLdf, wmma::mem_row_major);
    }
}

/* acc[n] += A[16 x 64] (bf16 rows) times B[64 x 64] (bf16 rows), the 4 column blocks of the result. */
__device__ __forceinline__ void tc_ab_acc(frag_c *acc, const __nv_bfloat16 *a, const __nv_bfloat16 *b)
{
    frag_a fa;
    frag_b fb;
#pragma unroll
    for (int k = 0; k < kTcTile / 16; k++) {
        wmma::load_matrix_sync(fa, a + k * 16, kLdb);
#pragma unroll
        for (int n = 0; n < kTcHs / 16; n++) {
            wmma::load_matrix_sync(fb, b + k * 16 * kLdb + n * 16, kLdb);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* A warp's 16 x 64 accumulators, times mul, to dqkv row (b, i) from column col on, through the
 * warp's rows of the fp32 tile stage (lane: row r, columns c0..c0+31). */
__device__ __forceinline__ void tc_store_rows(float *dqkv, float *stage, const frag_c *f, int b, int i,
                                              int col, float mul, const attn_geo &g, int r, int c0, int w)
{
#pragma unroll
    for (int n = 0; n < kTcHs / 16; n++)
        wmma::store_matrix_sync(stage + 16 * w * kLdf + n * 16, f[n], kLdf, wmma::mem_row_major);
    __syncwarp();
    if (i < g.T) {
        float *row = dqkv + ((size_t)b * g.T + i) * 3 * g.C + col;
        for (int c = c0; c < c0 + 32; c++)
            row[c] = stage[r * kLdf + c] * mul;
    }
    __syncwarp();
}

/* grid (query tiles of 64, NH, B), 128 threads. */
__global__ void __launch_bounds__(kTcThreads)
    k_attn_fwd_tc(float *out, float *lse, const float *__restrict__ qkv, attn_geo g)
{
    extern __shared__ __align__(128) unsigned char smraw[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smraw, *Ks = Qs + kTileB, *Vs = Ks + kTileB, *Ps = Vs + kTileB;
    float *Ss = (float *)(Ps + kTileB), *Os = Ss + kTileF, *rm = Os + kTileF, *rl = rm + kTcTile;
    int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTcTile, w = threadIdx.x / kWarp,
        lane = threadIdx.x % kWarp;
    const float *seq = qkv + (size_t)b * g.T * 3 * g.C + h * kTcHs;
    size_t st = (size_t)3 * g.C;
    tc_load(Qs, seq, st, q0, g.T);
    for (int e = threadIdx.x; e < kTileF; e += kTcThreads)
        Os[e] = 0.0f;
    if (threadIdx.x < kTcTile) {
        rm[threadIdx.x] = -INFINITY;
        rl[threadIdx.x] = 0.0f;
    }
    int r = 16 * w + lane / 2, c0 = (lane % 2) * 32, qi = q0 + r; /* this lane's row and 32 columns */
    int kend = rm_attn_key_end_t(q0, g.T, kTcTile);
    for (int k0 = 0; k0 < kend; k0 += kTcTile) {
        __syncthreads();
        tc_load(Ks, seq + g.C, st, k0, g.T);
        tc_load(Vs, seq + 2 * g.C, st, k0, g.T);
        __syncthreads();
        tc_abt(Ss + 16 * w * kLdf, Qs + 16 * w * kLdb, Ks);
        __syncwarp();
        float *srow = Ss + r * kLdf, mx = -INFINITY;
        for (int c = c0; c < c0 + 32; c++)
            if (rm_attn_visible(k0 + c, qi, g.T))
                mx = fmaxf(mx, srow[c] * g.scale);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float mold = rm[r], mnew = fmaxf(mold, mx), alpha = rm_attn_rescale(mold, mnew), sum = 0.0f;
        for (int c = c0; c < c0 + 32; c++) {
            float p = rm_attn_visible(k0 + c, qi, g.T) ? expf(srow[c] * g.scale - mnew) : 0.0f;
            Ps[r * kLdb + c] = __float2bfloat16_rn(p);
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        for (int c = c0; c < c0 + 32; c++)
            Os[r * kLdf + c] *= alpha;
        __syncwarp(); /* both lanes of a row read rm before it moves */
        if (lane % 2 == 0) {
            rl[r] = rl[r] * alpha + sum;
            rm[r] = mnew;
        }
        __syncwarp();
        frag_c acc[kTcHs / 16];
#pragma unroll
        for (int n = 0; n < kTcHs / 16; n++)
            wmma::load_matrix_sync(acc[n], Os + 16 * w * kLdf + n * 16, kLdf, wmma::mem_row_major);
        tc_ab_acc(acc, Ps + 16 * w * kLdb, Vs);
#pragma unroll
        for (int n = 0; n < kTcHs / 16; n++)
            wmma::store_matrix_sync(Os + 16 * w * kLdf + n * 16, acc[n], kLdf, wmma::mem_row_major);
        __syncwarp();
    }
    if (qi < g.T) {
        float inv = 1.0f / rl[r];
        float *orow = out + ((size_t)b * g.T + qi) * g.C + h * kTcHs;
        for (int c = c0; c < c0 + 32; c++)
            orow[c] = Os[r * kLdf + c] * inv;
        if (lane % 2 == 0)
            lse[((size_t)b * g.NH + h) * g.T + qi] = rm[r] + logf(rl[r]);
    }
}

/* dK, dV of one 64-key tile: grid (key tiles, NH, B); warp w owns keys 16w..16w+15. */
__global__ void __launch_bounds__(kTcThreads)
    k_attn_bwd_kv_tc(float *dqkv, const float *__restrict__ dout, const float *__restrict__ lse,
                     const float *__restrict__ Dv, const float *__restrict__ qkv, attn_geo g)
{
    extern __shared__ __align__(128) unsigned char smraw[];
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)smraw, *Vs = Ks + kTileB, *Qs = Vs + kTileB, *dOs = Qs + kTileB;
    __nv_bfloat16 *Pt = dOs + kTileB, *dSt = Pt + kTileB;
    float *St = (float *)(dSt + kTileB), *dPt = St + kTileF, *Ls = dPt + kTileF, *Ds = Ls + kTcTile;
    int b = blockIdx.z, h = blockIdx.y, k0 = blockIdx.x * kTcTile, w = threadIdx.x / kWarp,
        lane = threadIdx.x % kWarp;
    const float *seq = qkv + (size_t)b * g.T * 3 * g.C + h * kTcHs,
                *dseq = dout + (size_t)b * g.T * g.C + h * kTcHs;
    const float *lrow = lse + ((size_t)b * g.NH + h) * g.T, *drow = Dv + ((size_t)b * g.NH + h) * g.T;
    size_t st = (size_t)3 * g.C;
    tc_load(Ks, seq + g.C, st, k0, g.T);
    tc_load(Vs, seq + 2 * g.C, st, k0, g.T);
    frag_c dk[kTcHs / 16], dv[kTcHs / 16];
#pragma unroll
    for (int n = 0; n < kTcHs / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    int r = 16 * w + lane / 2, c0 = (lane % 2) * 32, kj = k0 + r; /* key row, 32 query columns */
    for (int q0 = k0; q0 < g.T; q0 += kTcTile) {
        __syncthreads();
        tc_load(Qs, seq, st, q0, g.T);
        tc_load(dOs, dseq, g.C, q0, g.T);
        if (threadIdx.x < kTcTile) {
            int i = q0 + threadIdx.x;
            Ls[threadIdx.x] = i < g.T ? lrow[i] : 0.0f;
            Ds[threadIdx.x] = i < g.T ? drow[i] : 0.0f;
        }
        __syncthreads();
        tc_abt(St + 16 * w * kLdf, Ks + 16 * w * kLdb, Qs);   /* S^T = K Q^T */
        tc_abt(dPt + 16 * w * kLdf, Vs + 16 * w * kLdb, dOs); /* dP^T = V dO^T */
        __syncwarp();
        for (int c = c0; c < c0 + 32; c++) {
            bool vis = rm_attn_visible(kj, q0 + c, g.T);
            float p = vis ? expf(St[r * kLdf + c] * g.scale - Ls[c]) : 0.0f;
            Pt[r * kLdb + c] = __float2bfloat16_rn(p);
            dSt[r * kLdb + c] = __float2bfloat16_rn(p * (dPt[r * kLdf + c] - Ds[c]));
        }
        __syncwarp();
        tc_ab_acc(dv, Pt + 16 * w * kLdb, dOs); /* dV += P^T dO */
        tc_ab_acc(dk, dSt + 16 * w * kLdb, Qs); /* dK += dS^T Q */
    }
    /* through this warp's rows of St (free now) to global memory */
    __syncwarp();
    tc_store_rows(dqkv, St, dk, b, kj, g.C + h * kTcHs, g.scale, g, r, c0, w);
    tc_store_rows(dqkv, St, dv, b, kj, 2 * g.C + h * kTcHs, 1.0f, g, r, c0, w);
}

/* dQ of one 64-query tile: grid (query tiles, NH, B); warp w owns queries 16w..16w+15. */
__global__ void __launch_bounds__(kTcThreads)
    k_attn_bwd_q_tc(float *dqkv, const float *__restrict__ dout, const float *__restrict__ lse,
                    const float *__restrict__ Dv, const float *__restrict__ qkv, attn_geo g)
{
    extern __shared__ __align__(128) unsigned char smraw[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)smraw, *dOs = Qs + kTileB, *Ks = dOs + kTileB, *Vs = Ks + kTileB;
    __nv_bfloat16 *dS = Vs + kTileB;
    float *S = (float *)(dS + kTileB), *dP = S + kTileF, *Ls = dP + kTileF, *Ds = Ls + kTcTile;
    int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kTcTile, w = threadIdx.x / kWarp,
        lane = threadIdx.x % kWarp;
    const float *seq = qkv + (size_t)b * g.T * 3 * g.C + h * kTcHs,
                *dseq = dout + (size_t)b * g.T * g.C + h * kTcHs;
    size_t lo = ((size_t)b * g.NH + h) * g.T, st = (size_t)3 * g.C;
    tc_load(Qs, seq, st, q0, g.T);
    tc_load(dOs, dseq, g.C, q0, g.T);
    if (threadIdx.x < kTcTile) {
        int i = q0 + threadIdx.x;
        Ls[threadIdx.x] = i < g.T ? lse[lo + i] : 0.0f;
        Ds[threadIdx.x] = i < g.T ? Dv[lo + i] : 0.0f;
    }
    frag_c dq[kTcHs / 16];
#pragma unroll
    for (int n = 0; n < kTcHs / 16; n++)
        wmma::fill_fragment(dq[n], 0.0f);
    int r = 16 * w + lane / 2, c0 = (lane % 2) * 32, qi = q0 + r;
    int kend = rm_attn_key_end_t(q0, g.T, kTcTile);
    for (int k0 = 0; k0 < kend; k0 += kTcTile) {
        __syncthreads();
        tc_load(Ks, seq + g.C, st, k0, g.T);
        tc_load(Vs, seq + 2 * g.C, st, k0, g.T);
        __syncthreads();
        tc_abt(S + 16 * w * kLdf, Qs + 16 * w * kLdb, Ks);   /* S = Q K^T */
        tc_abt(dP + 16 * w * kLdf, dOs + 16 * w * kLdb, Vs); /* dP = dO V^T */
        __syncwarp();
        for (int c = c0; c < c0 + 32; c++) {
            bool vis = rm_attn_visible(k0 + c, qi, g.T);
            float p = vis ? expf(S[r * kLdf + c] * g.scale - Ls[r]) : 0.0f;
            dS[r * kLdb + c] = __float2bfloat16_rn(p * (dP[r * kLdf + c] - Ds[r]));
        }
        __syncwarp();
        tc_ab_acc(dq, dS + 16 * w * kLdb, Ks); /* dQ += dS K */
    }
    __syncwarp();
    tc_store_rows(dqkv, S, dq, b, qi, h * kTcHs, g.scale, g, r, c0, w);
}

constexpr size_t kTcFwdSmem = (size_t)4 * kTileB * 2 + (size_t)2 * kTileF * 4 + 2 * kTcTile * 4;
constexpr size_t kTcBwdSmem = (size_t)6 * kTileB * 2 + (size_t)2 * kTileF * 4 + 2 * kTcTile * 4;

/* ------------------------------------------------------------------ cross-entropy */

/* One block per row: max, sum of exp, the first argmax, the row's loss; then (grad_scale != 0) the
 * gradient in place. rowloss[r] and hit[r] go to k_xent_finish. */
__global__ void k_xent_rows(float *logits, const int32_t *__restrict__ tgt, int N, int V, float grad_scale,
                            float *rowloss, float *hit)
{
    __shared__ float sv[kT / kWarp];
    __shared__ int si[kT / kWarp];
    __shared__ float bcast[2];
    int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
    for (int r = blockIdx.x; r < N; r += gridDim.x) {
        float *z = logits + (size_t)r * V;
        float mx = -INFINITY;
        int ix = 0x7fffffff;
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            if (z[j] > mx) { /* strictly: the first index among equal maxima */
                mx = z[j];
                ix = j;
            }
        for (int o = kWarp / 2; o > 0; o /= 2) {
            float om = __shfl_xor_sync(0xffffffffu, mx, o);
            int oi = __shfl_xor_sync(0xffffffffu, ix, o);
            if (om > mx || (om == mx && oi < ix)) {
                mx = om;
                ix = oi;
            }
        }
        if (lane == 0) {
            sv[w] = mx;
            si[w] = ix;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float m = sv[0];
            int i = si[0];
            for (int k = 1; k < nw; k++)
                if (sv[k] > m || (sv[k] == m && si[k] < i)) {
                    m = sv[k];
                    i = si[k];
                }
            bcast[0] = m;
            si[0] = i;
        }
        __syncthreads();
        float m = bcast[0];
        int amax = si[0];
        __syncthreads();
        float s = 0.0f;
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            s += expf(z[j] - m);
        s = warp_sum(s);
        if (lane == 0)
            sv[w] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            float t = 0.0f;
            for (int k = 0; k < nw; k++)
                t += sv[k];
            bcast[1] = m + logf(t);
        }
        __syncthreads();
        float lse = bcast[1];
        int t = tgt[r];
        if (threadIdx.x == 0) {
            rowloss[r] = lse - z[t];
            hit[r] = amax == t ? 1.0f : 0.0f;
        }
        __syncthreads(); /* z[t] read before the gradient overwrites it */
        if (grad_scale != 0.0f)
            for (int j = threadIdx.x; j < V; j += blockDim.x)
                z[j] = (expf(z[j] - lse) - (j == t ? 1.0f : 0.0f)) * grad_scale;
        __syncthreads();
    }
}

/* One block: *loss_sum = loss_scale * sum of rowloss (fixed order), *correct = sum of hit. */
__global__ void k_xent_finish(const float *__restrict__ rowloss, const float *__restrict__ hit, int N,
                              float loss_scale, float *loss_sum, int32_t *correct)
{
    __shared__ float sl[kT], sh[kT];
    float a = 0.0f, c = 0.0f;
    for (int r = threadIdx.x; r < N; r += blockDim.x) {
        a += rowloss[r];
        c += hit[r];
    }
    sl[threadIdx.x] = a;
    sh[threadIdx.x] = c;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o /= 2) {
        if ((int)threadIdx.x < o) {
            sl[threadIdx.x] += sl[threadIdx.x + o];
            sh[threadIdx.x] += sh[threadIdx.x + o];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *loss_sum = loss_scale * sl[0];
        if (correct)
            *correct = (int32_t)(sh[0] + 0.5f);
    }
}

/* ---- the vocabulary-parallel cross-entropy (transformer.h xent_vocab_*): one block per row */

/* The block's max (op 0) or sum (op 1) of v, on every thread. */
__device__ float block_reduce(float v, int op)
{
    __shared__ float sv[kT / kWarp];
    __shared__ float out;
    int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
    for (int o = kWarp / 2; o > 0; o /= 2) {
        float x = __shfl_xor_sync(0xffffffffu, v, o);
        v = op ? v + x : fmaxf(v, x);
    }
    if (lane == 0)
        sv[w] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = sv[0];
        for (int k = 1; k < nw; k++)
            a = op ? a + sv[k] : fmaxf(a, sv[k]);
        out = a;
    }
    __syncthreads();
    float r = out;
    __syncthreads(); /* out is read by every thread before the next call writes it */
    return r;
}

__global__ void k_xent_vocab_max(float *stats, const float *__restrict__ logits, int N, int Vl, int valid, int T,
                                 int t)
{
    for (int r = blockIdx.x; r < N; r += gridDim.x) {
        const float *z = logits + (size_t)r * Vl;
        float mx = -FLT_MAX;
        for (int j = threadIdx.x; j < valid; j += blockDim.x)
            mx = fmaxf(mx, z[j]);
        mx = block_reduce(mx, 0);
        for (int q = threadIdx.x; q < T; q += blockDim.x)
            stats[(size_t)r * T + q] = q == t ? mx : 0.0f;
    }
}

__global__ void k_xent_vocab_sums(float *s2, float *mxs, const float *__restrict__ stats,
                                  const float *__restrict__ logits, const int32_t *__restrict__ tgt, int N, int Vl,
                                  int valid, int v0, int T)
{
    for (int r = blockIdx.x; r < N; r += gridDim.x) {
        float mx = -FLT_MAX;
        for (int q = 0; q < T; q++)
            mx = fmaxf(mx, stats[(size_t)r * T + q]);
        const float *z = logits + (size_t)r * Vl;
        float s = 0.0f;
        for (int j = threadIdx.x; j < valid; j += blockDim.x)
            s += expf(z[j] - mx);
        s = block_reduce(s, 1);
        if (threadIdx.x == 0) {
            int g = tgt[r] - v0;
            mxs[r] = mx;
            s2[2 * (size_t)r] = s;
            s2[2 * (size_t)r + 1] = g >= 0 && g < valid ? z[g] : 0.0f;
        }
    }
}

__global__ void k_xent_vocab_grad(float *logits, float *rowloss, const float *__restrict__ s2,
                                  const float *__restrict__ mxs, const int32_t *__restrict__ tgt, int N, int Vl,
                                  int valid, int v0, float grad_scale)
{
    for (int r = blockIdx.x; r < N; r += gridDim.x) {
        float S = s2[2 * (size_t)r], mx = mxs[r], inv = 1.0f / S;
        int g = tgt[r] - v0;
        if (threadIdx.x == 0)
            rowloss[r] = logf(S) + mx - s2[2 * (size_t)r + 1];
        float *z = logits + (size_t)r * Vl;
        for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
            float d = j < valid ? expf(z[j] - mx) * inv : 0.0f;
            z[j] = (d - (j == g ? 1.0f : 0.0f)) * grad_scale;
        }
    }
}

/* ------------------------------------------------------------------ the entries */

void cu_embed_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T, int C)
{
    int N = B * T;
    if (N <= 0 || C <= 0)
        return;
    wrote(out, (size_t)N * C * sizeof(float));
    k_embed_fwd<<<grid1((size_t)N * C), kT, 0, stream()>>>(out, tok, wte, wpe, N, T, C);
    LAUNCHED("k_embed_fwd");
}

/* dwpe, then dwte by a stable sort of (token, position): the rows of one token are added in
 * position order. ranged: only tokens in [v0, v0 + Vl) (k_tok_local maps the others to Vl, sorted
 * last and skipped). */
void embed_bwd_sorted(float *dwte, float *dwpe, const float *dout, const int32_t *tok, bool ranged, int v0, int Vl,
                      int B, int T, int C)
{
    int N = B * T;
    if (N <= 0 || C <= 0)
        return;
    wrote(dwpe, (size_t)T * C * sizeof(float));
    k_embed_wpe_bwd<<<grid1((size_t)T * C), kT, 0, stream()>>>(dwpe, dout, B, T, C);
    LAUNCHED("k_embed_wpe_bwd");
    int32_t *loc = ranged ? (int32_t *)rm_cuda_scratch(S_TOK_LOCAL, (size_t)N * sizeof(int32_t)) : nullptr;
    int32_t *keys = (int32_t *)rm_cuda_scratch(S_SORT_KEYS, (size_t)N * sizeof(int32_t));
    int32_t *vals = (int32_t *)rm_cuda_scratch(S_SORT_VALS, (size_t)N * sizeof(int32_t));
    int32_t *pos = (int32_t *)rm_cuda_scratch(S_SORT_IN, (size_t)N * sizeof(int32_t));
    const int32_t *in = ranged ? loc : tok;
    size_t tmp_bytes = 0;
    cudaError_t e = in ? cub::DeviceRadixSort::SortPairs(nullptr, tmp_bytes, in, keys, pos, vals, N, 0, 31, stream())
                       : cudaErrorMemoryAllocation;
    void *tmp = e == cudaSuccess ? rm_cuda_scratch(S_SORT_TMP, tmp_bytes) : nullptr;
    if (e != cudaSuccess)
        rm_cuda_note_error(__FILE__, __LINE__, RM_EIO, "cub::DeviceRadixSort (size)", cudaGetErrorString(e));
    if (!in || !keys || !vals || !pos || !tmp)
        return;
    if (ranged) {
        k_tok_local<<<grid1(N), kT, 0, stream()>>>(loc, tok, v0, Vl, N);
        LAUNCHED("k_tok_local");
    }
    k_iota<<<grid1(N), kT, 0, stream()>>>(pos, N);
    LAUNCHED("k_iota");
    e = cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, in, keys, pos, vals, N, 0, 31, stream());
    if (e != cudaSuccess) {
        rm_cuda_note_error(__FILE__, __LINE__, RM_EIO, "cub::DeviceRadixSort::SortPairs",
                           cudaGetErrorString(e));
        return;
    }
    LAUNCHED("cub::DeviceRadixSort::SortPairs");
    /* dwte: a gradient, never a gemm operand, so no cached 16-bit copy of it exists to drop */
    int cy = (C + kT - 1) / kT;
    k_embed_wte_bwd<<<dim3(N, cy), kT, 0, stream()>>>(dwte, dout, keys, vals, N, C, ranged ? Vl : INT_MAX);
    LAUNCHED("k_embed_wte_bwd");
}

void cu_embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C)
{
    embed_bwd_sorted(dwte, dwpe, dout, tok, false, 0, 0, B, T, C);
}

void cu_embed_vocab_fwd(float *out, const int32_t *tok, const float *wte, int v0, int Vl, const float *wpe, int B,
                        int T, int C)
{
    int N = B * T;
    if (N <= 0 || C <= 0)
        return;
    wrote(out, (size_t)N * C * sizeof(float));
    k_embed_vocab_fwd<<<grid1((size_t)N * C), kT, 0, stream()>>>(out, tok, wte, v0, Vl, wpe, N, T, C);
    LAUNCHED("k_embed_vocab_fwd");
}

void cu_embed_vocab_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int v0, int Vl, int B,
                        int T, int C)
{
    embed_bwd_sorted(dwte, dwpe, dout, tok, true, v0, Vl, B, T, C);
}

void cu_layernorm_fwd(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                      int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    wrote(out, (size_t)N * C * sizeof(float));
    wrote(mean, (size_t)N * sizeof(float));
    wrote(rstd, (size_t)N * sizeof(float));
    k_layernorm_fwd<<<rows_grid(N), kT, 0, stream()>>>(out, mean, rstd, x, w, b, N, C);
    LAUNCHED("k_layernorm_fwd");
}

void cu_residual_layernorm_fwd(float *res, const float *x, const float *bias, float *ln, float *mean,
                               float *rstd, const float *w, const float *b, int N, int C)
{
    if (N <= 0 || C <= 0)
        return;
    wrote(res, (size_t)N * C * sizeof(float));
    if (ln) {
        wrote(ln, (size_t)N * C * sizeof(float));
        wrote(mean, (size_t)N * sizeof(float));
        wrote(rstd, (size_t)N * sizeof(float));
    }
    k_residual_ln_fwd<<<rows_grid(N), kT, 0, stream()>>>(res, x, bias, ln, mean, rstd, w, b, N, C);
    LAUNCHED("k_residual_ln_fwd");
}

void cu_layernorm_bwd(float *dx, float *dw, float *db, const float *dout, const float *x, const float *mean,
                      const float *rstd, const float *w, int N, int C, bool accumulate)
{
    if (N <= 0 || C <= 0)
        return;
    wrote(dx, (size_t)N * C * sizeof(float));
    wrote(dw, (size_t)C * sizeof(float));
    wrote(db, (size_t)C * sizeof(float));
    k_layernorm_bwd_dx<<<rows_grid(N), kT, 0, stream()>>>(dx, dout, x, mean, rstd, w, N, C);
    LAUNCHED("k_layernorm_bwd_dx");
    colsum_any(dw, dout, x, mean, rstd, N, C, accumulate, 1, "launch k_col_finish (layernorm dw)");
    colsum_any(db, dout, nullptr, nullptr, nullptr, N, C, accumulate, 0,
               "launch k_col_finish (layernorm db)");
}

void cu_bias_gelu_fwd(float *h, float *g, const float *bias, int N, int C)
{
    size_t n = (size_t)N * C;
    if (!n || N < 0 || C < 0)
        return;
    wrote(h, n * sizeof(float));
    wrote(g, n * sizeof(float));
    k_bias_gelu<<<grid1(n), kT, 0, stream()>>>(h, g, bias, n, C);
    LAUNCHED("k_bias_gelu");
}

void cu_gelu_bwd(float *dh, const float *dg, const float *h, int N, int C)
{
    size_t n = (size_t)N * C;
    if (!n || N < 0 || C < 0)
        return;
    wrote(dh, n * sizeof(float));
    k_gelu_bwd<<<grid1(n), kT, 0, stream()>>>(dh, dg, h, n);
    LAUNCHED("k_gelu_bwd");
}

void cu_colsum(float *db, const float *dy, int N, int C, bool accumulate)
{
    if (N <= 0 || C <= 0)
        return;
    wrote(db, (size_t)C * sizeof(float));
    colsum_any(db, dy, nullptr, nullptr, nullptr, N, C, accumulate, 0, "launch k_col_finish (colsum)");
}

size_t cu_attention_scratch(int T)
{
    (void)T;
    return 1; /* the table keeps its own (rm_cuda_scratch): D's size depends on B and NH too */
}

/* The geometry, or false (error recorded) for a head size the kernels do not hold. */
bool attn_setup(attn_geo *g, int T, int C, int NH, size_t *fwd_smem, size_t *bwd_smem)
{
    g->T = T;
    g->C = C;
    g->NH = NH;
    g->hs = NH > 0 ? C / NH : 0;
    g->ld = g->hs + 1;
    g->scale = 1.0f / sqrtf((float)g->hs);
    if (g->hs <= 0 || g->hs > RM_ATTN_MAX_HS || g->hs * NH != C) {
        char msg[96];
        snprintf(msg, sizeof msg, "head size %d (embed %d / heads %d) outside 1..%d", g->hs, C, NH,
                 RM_ATTN_MAX_HS);
        rm_cuda_note_error(__FILE__, __LINE__, RM_EINVAL, "attention", msg);
        return false;
    }
    *fwd_smem = (size_t)rm_attn_fwd_smem_floats(g->hs) * sizeof(float);
    *bwd_smem = (size_t)rm_attn_bwd_smem_floats(g->hs) * sizeof(float);
    static bool raised = false; /* above 48 KB a block needs the opt-in (hs > 64) */
    if (!raised) {
        size_t most = (size_t)rm_attn_bwd_smem_floats(RM_ATTN_MAX_HS) * sizeof(float);
        cudaError_t e =
            cudaFuncSetAttribute(k_attn_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_attn_bwd_kv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_attn_bwd_q, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_attn_fwd_tc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)kTcFwdSmem);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_attn_bwd_kv_tc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)kTcBwdSmem);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(k_attn_bwd_q_tc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)kTcBwdSmem);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            rm_cuda_note_error(__FILE__, __LINE__, RM_EIO, "cudaFuncSetAttribute(attention shared memory)",
                               cudaGetErrorString(e));
            return false;
        }
        raised = true;
    }
    return true;
}

/* The tensor-core kernels take head size 64 under 16-bit precision, 16-byte aligned rows, and for
 * now only when asked (RM_CUDA_ATTN=tc): they have not yet run on a GPU (docs/gpu.md). */
bool use_tc(const attn_geo &g, const void *a, const void *b, const void *c)
{
    if (g.hs != kTcHs || rm_cuda_precision() == (int)RM_PREC_FP32)
        return false;
    const char *e = getenv("RM_CUDA_ATTN");
    if (!e || strcmp(e, "tc") != 0)
        return false;
    return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16 == 0;
}

void cu_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, float *scratch)
{
    (void)scratch;
    attn_geo g;
    size_t fs, bs;
    if (B <= 0 || T <= 0 || !attn_setup(&g, T, C, NH, &fs, &bs))
        return;
    wrote(out, (size_t)B * T * C * sizeof(float));
    wrote(lse, (size_t)B * NH * T * sizeof(float));
    if (use_tc(g, out, qkv, qkv)) {
        dim3 tg((T + kTcTile - 1) / kTcTile, NH, B);
        k_attn_fwd_tc<<<tg, kTcThreads, kTcFwdSmem, stream()>>>(out, lse, qkv, g);
        LAUNCHED("k_attn_fwd_tc");
        return;
    }
    dim3 grid((T + kTile - 1) / kTile, NH, B);
    k_attn_fwd<<<grid, RM_ATTN_THREADS, fs, stream()>>>(out, lse, qkv, g);
    LAUNCHED("k_attn_fwd");
}

void cu_attention_bwd(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                      int B, int T, int C, int NH, float *scratch)
{
    (void)scratch;
    attn_geo g;
    size_t fs, bs;
    if (B <= 0 || T <= 0 || !attn_setup(&g, T, C, NH, &fs, &bs))
        return;
    float *D = (float *)rm_cuda_scratch(S_ATTN_D, (size_t)B * NH * T * sizeof(float));
    if (!D)
        return;
    wrote(dqkv, (size_t)B * T * 3 * C * sizeof(float));
    k_attn_d<<<grid1((size_t)B * T * NH * kWarp), kT, 0, stream()>>>(D, dout, out, B, g);
    LAUNCHED("k_attn_d");
    if (use_tc(g, dqkv, dout, qkv)) {
        dim3 tg((T + kTcTile - 1) / kTcTile, NH, B);
        k_attn_bwd_kv_tc<<<tg, kTcThreads, kTcBwdSmem, stream()>>>(dqkv, dout, lse, D, qkv, g);
        LAUNCHED("k_attn_bwd_kv_tc");
        k_attn_bwd_q_tc<<<tg, kTcThreads, kTcBwdSmem, stream()>>>(dqkv, dout, lse, D, qkv, g);
        LAUNCHED("k_attn_bwd_q_tc");
        return;
    }
    dim3 grid((T + kTile - 1) / kTile, NH, B);
    k_attn_bwd_kv<<<grid, RM_ATTN_THREADS, bs, stream()>>>(dqkv, dout, lse, D, qkv, g);
    LAUNCHED("k_attn_bwd_kv");
    k_attn_bwd_q<<<grid, RM_ATTN_THREADS, bs, stream()>>>(dqkv, dout, lse, D, qkv, g);
    LAUNCHED("k_attn_bwd_q");
}

void cu_xent(float *logits, const int32_t *targets, int N, int V, float grad_scale, float loss_scale,
             float *loss_sum, int32_t *correct)
{
    if (N <= 0 || V <= 0)
        return;
    float *rows = (float *)rm_cuda_scratch(S_ROWS, (size_t)N * 2 * sizeof(float));
    if (!rows)
        return;
    if (grad_scale != 0.0f)
        wrote(logits, (size_t)N * V * sizeof(float));
    wrote(loss_sum, sizeof(float));
    if (correct)
        wrote(correct, sizeof(int32_t));
    unsigned g = (unsigned)(N < 65535 * 4 ? N : 65535 * 4);
    k_xent_rows<<<g, kT, 0, stream()>>>(logits, targets, N, V, grad_scale, rows, rows + N);
    LAUNCHED("k_xent_rows");
    k_xent_finish<<<1, kT, 0, stream()>>>(rows, rows + N, N, loss_scale, loss_sum, correct);
    LAUNCHED("k_xent_finish");
}

unsigned rows_blocks(int N)
{
    return (unsigned)(N < 65535 * 4 ? N : 65535 * 4);
}

void cu_xent_vocab_max(float *stats, const float *logits, int N, int Vl, int valid, int T, int t)
{
    if (N <= 0)
        return;
    wrote(stats, (size_t)N * T * sizeof(float));
    k_xent_vocab_max<<<rows_blocks(N), kT, 0, stream()>>>(stats, logits, N, Vl, valid, T, t);
    LAUNCHED("k_xent_vocab_max");
}

void cu_xent_vocab_sums(float *s2, float *mx, const float *stats, const float *logits, const int32_t *tgt, int N,
                        int Vl, int valid, int v0, int T)
{
    if (N <= 0)
        return;
    wrote(s2, (size_t)N * 2 * sizeof(float));
    wrote(mx, (size_t)N * sizeof(float));
    k_xent_vocab_sums<<<rows_blocks(N), kT, 0, stream()>>>(s2, mx, stats, logits, tgt, N, Vl, valid, v0, T);
    LAUNCHED("k_xent_vocab_sums");
}

void cu_xent_vocab_grad(float *logits, float *rowloss, const float *s2, const float *mx, const int32_t *tgt, int N,
                        int Vl, int valid, int v0, float grad_scale)
{
    if (N <= 0)
        return;
    wrote(logits, (size_t)N * Vl * sizeof(float));
    wrote(rowloss, (size_t)N * sizeof(float));
    k_xent_vocab_grad<<<rows_blocks(N), kT, 0, stream()>>>(logits, rowloss, s2, mx, tgt, N, Vl, valid, v0,
                                                           grad_scale);
    LAUNCHED("k_xent_vocab_grad");
}

} // namespace

extern "C" const rm_tf_kernels rm_tf_cuda = {
    cu_embed_fwd,     cu_embed_bwd, cu_layernorm_fwd, cu_residual_layernorm_fwd, cu_layernorm_bwd,
    cu_bias_gelu_fwd, cu_gelu_bwd,  cu_colsum,        cu_attention_scratch,      cu_attention_fwd,
    cu_attention_bwd, cu_xent,      nullptr, /* set_threads: the GPU has no thread count to set */
    RM_ATTN_MAX_HS,   cu_embed_vocab_fwd, cu_embed_vocab_bwd, cu_xent_vocab_max, cu_xent_vocab_sums,
    cu_xent_vocab_grad,
};
