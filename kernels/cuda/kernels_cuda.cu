/* kernels_cuda.cu — the CUDA implementation of the rm_kernels table (kernels/kernels.h): cuBLAS
 * matrix products and hand-written kernels for the rest of a training step.
 *
 * Design:
 *  - The table has no context argument, so its state (device, one non-blocking compute stream, the
 *    cuBLAS handle and workspace, gemm scratch, a deterministic-reduction scratch, the first error)
 *    lives in ONE file-static struct, `g_cuda`, created by the first rm_kernels_cuda() call
 *    (pthread_once) on the device current at that time. Nothing runs at program start.
 *  - Every entry is issued on that stream, so entries are ordered as the header promises. d2h and
 *    sync wait on the stream; nothing else blocks the host.
 *  - Entries return void: failures are logged with file:line, the first one is kept, and
 *    rm_gpu_check() (worker/gpu.h) reports it.
 *  - Reductions are deterministic (fixed partition and order; no float atomics), so two runs of the
 *    same step give the same bits; integer counts use atomics (exact).
 *  - gemm: fp32 uses TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) unless NVIDIA_TF32_OVERRIDE=0
 *    or RM_CUDA_TF32=0; with rm_gpu_set_precision(bf16|fp16) the inputs are rounded (RNE, the same
 *    bits as worker/gpu.c's rm_f32_to_bf16/f16) into scratch and multiplied with fp32 accumulation
 *    into the fp32 output. The scratch grows to the largest shape seen (first step only), so steady
 *    state allocates nothing.
 * Oracles: kernels/kernels_cpu.c (the CPU table) and worker/gpu.c (conversions); see tests/gpu/. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gemm_map.h"
#include "kernels/cuda/rm_cuda.h"
#include "kernels/kernels.h"
#include "worker/gpu.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxPartials = 256;          /* softmax-xent blocks (and partial loss sums) */
constexpr size_t kBlasWorkspace = 32u << 20;

struct cuda_ctx {
    pthread_once_t once;
    bool ok;
    int device;
    int sms;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;
    bool tf32;
    rm_precision prec;
    uint16_t *scratch_a, *scratch_b;       /* gemm inputs rounded to bf16/fp16 */
    size_t cap_a, cap_b;                   /* elements */
    float *partials;                       /* [kMaxPartials] softmax-xent loss partial sums */
    float *bwd_part;                       /* [chunks x cols] bias-gradient partial sums */
    size_t cap_part;                       /* floats */
    pthread_mutex_t err_mu;
    rm_err first_err;                      /* code 0 = none */
};

cuda_ctx g_cuda = {PTHREAD_ONCE_INIT, false, 0, 0, nullptr, nullptr, nullptr, true, RM_PREC_FP32,
                   nullptr, nullptr, 0, 0, nullptr, nullptr, 0, PTHREAD_MUTEX_INITIALIZER,
                   {0, {0}, {0}}};

void note_error(const char *file, int line, int code, const char *what, const char *msg)
{
    rm_log_write(RM_LOG_ERROR, file, line, "CUDA kernels failure call=\"%s\" err=\"%s\"", what, msg);
    pthread_mutex_lock(&g_cuda.err_mu);
    if (g_cuda.first_err.code == 0)
        rm_errf(&g_cuda.first_err, code, "%s:%d: %s: %s", file, line, what, msg);
    pthread_mutex_unlock(&g_cuda.err_mu);
}

#define KCHECK(call)                                                                          \
    do {                                                                                      \
        cudaError_t ce_ = (call);                                                             \
        if (ce_ != cudaSuccess) {                                                             \
            (void)cudaGetLastError();                                                         \
            note_error(__FILE__, __LINE__, ce_ == cudaErrorMemoryAllocation ? RM_ENOMEM : RM_EIO, \
                       #call, cudaGetErrorString(ce_));                                       \
        }                                                                                     \
    } while (0)
/* a launch error (bad configuration) shows at once; execution errors show at the next sync */
#define KLAUNCHED(name) KCHECK(cudaGetLastError())
#define BCHECK(call)                                                                          \
    do {                                                                                      \
        cublasStatus_t bs_ = (call);                                                          \
        if (bs_ != CUBLAS_STATUS_SUCCESS)                                                     \
            note_error(__FILE__, __LINE__, RM_EIO, #call, rm_cublas_status_str((int)bs_));    \
    } while (0)

unsigned grid_for(size_t n)
{
    size_t blocks = (n + kThreads - 1) / kThreads;
    size_t cap = (size_t)(g_cuda.sms > 0 ? g_cuda.sms : 80) * 16;
    if (blocks > cap)
        blocks = cap;
    return blocks ? (unsigned)blocks : 1u;
}

/* Rows x columns launch shape: enough column blocks to cover a row (capped), then rows so that the
 * whole grid is about 16 blocks per SM. */
dim3 grid_2d(int rows, int cols_work)
{
    int gx = (cols_work + kThreads - 1) / kThreads;
    if (gx > 64)
        gx = 64;
    if (gx < 1)
        gx = 1;
    int want = (g_cuda.sms > 0 ? g_cuda.sms : 80) * 16;
    int gy = want / gx;
    if (gy > rows)
        gy = rows;
    if (gy > 65535)
        gy = 65535;
    if (gy < 1)
        gy = 1;
    return dim3((unsigned)gx, (unsigned)gy);
}

/* ------------------------------------------------------------------ elementwise kernels */

/* Rows over grid.y, columns over grid.x: no per-element division, coalesced rows. */
__global__ void k_bias_act_fwd(float *y, const float *__restrict__ b, int rows, int cols, int act)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float *yr = y + (size_t)r * cols;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            float v = yr[c] + b[c];
            if (act == RM_ACT_RELU)
                v = v > 0.0f ? v : 0.0f;   /* NaN -> 0, as the C table */
            yr[c] = v;
        }
    }
}

/* Block (32 columns x 16 row lanes) over one chunk of rows (blockIdx.y): applies the activation's
 * derivative to dY and sums each column of the chunk in a fixed order (lane-strided partial sums,
 * then a fixed tree). With one chunk the sum goes straight to db; otherwise to partials
 * [chunk][cols], which k_sum_chunks adds in chunk order: deterministic either way. */
constexpr int kBwdCols = 32, kBwdLanes = 16;
__global__ void k_bias_act_bwd(float *dy, const float *__restrict__ y, float *out, int rows, int cols,
                               int act, int rows_per_chunk)
{
    __shared__ float part[kBwdLanes][kBwdCols + 1];
    int c = blockIdx.x * kBwdCols + threadIdx.x;
    int r0 = blockIdx.y * rows_per_chunk;
    int r1 = min(rows, r0 + rows_per_chunk);
    float sum = 0.0f;
    if (c < cols) {
        for (int r = r0 + threadIdx.y; r < r1; r += kBwdLanes) {
            size_t i = (size_t)r * cols + c;
            float g = dy[i];
            if (act == RM_ACT_RELU && !(y[i] > 0.0f)) {
                g = 0.0f;
                dy[i] = 0.0f;
            }
            sum += g;
        }
    }
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    for (int s = kBwdLanes / 2; s > 0; s >>= 1) {
        if (threadIdx.y < s)
            part[threadIdx.y][threadIdx.x] += part[threadIdx.y + s][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < cols)
        out[(size_t)blockIdx.y * cols + c] = part[0][threadIdx.x];
}

__global__ void k_sum_chunks(const float *__restrict__ partials, int chunks, int cols, float *db)
{
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int j = 0; j < chunks; j++)
            s += partials[(size_t)j * cols + c];
        db[c] = s;
    }
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One warp per row. Loss partial per block (fixed order), summed by k_sum_partials. */
__global__ void k_softmax_xent(const float *logits, const int32_t *__restrict__ labels, int rows,
                               int classes, float inv_batch, float *dlogits, float *partials)
{
    __shared__ float wsum[kThreads / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int warps_per_block = blockDim.x >> 5;
    float acc = 0.0f;
    for (int r = blockIdx.x * warps_per_block + warp; r < rows; r += gridDim.x * warps_per_block) {
        const float *x = logits + (size_t)r * classes;
        float *d = dlogits + (size_t)r * classes;
        float m = -INFINITY;
        for (int j = lane; j < classes; j += 32)
            m = fmaxf(m, x[j]);
        m = warp_max(m);
        float s = 0.0f;
        for (int j = lane; j < classes; j += 32)
            s += expf(x[j] - m);
        s = warp_sum(s);
        int label = labels[r];
        float xl = (label >= 0 && label < classes) ? x[label] : NAN;
        float lse = logf(s);
        float inv_s = 1.0f / s;
        __syncwarp();
        /* dlogits may alias logits: every lane has read what it needs (m, s, xl) first */
        for (int j = lane; j < classes; j += 32) {
            float p = expf(x[j] - m) * inv_s;
            d[j] = (p - (j == label ? 1.0f : 0.0f)) * inv_batch;
        }
        if (lane == 0)
            acc += lse - (xl - m);
    }
    if (lane == 0)
        wsum[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < warps_per_block; w++)
            t += wsum[w];
        partials[blockIdx.x] = t;
    }
}

__global__ void k_sum_partials(const float *partials, int n, float *out)
{
    __shared__ float s[kMaxPartials];
    int t = threadIdx.x;
    s[t] = t < n ? partials[t] : 0.0f;
    __syncthreads();
    for (int k = kMaxPartials / 2; k > 0; k >>= 1) {
        if (t < k)
            s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0)
        *out = s[0];
}

/* One warp per row; first maximum (lowest index among equal maxima), as the C reference. */
__global__ void k_argmax_correct(const float *logits, const int32_t *__restrict__ labels, int rows,
                                 int classes, int32_t *correct)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int warps_per_block = blockDim.x >> 5;
    int mine = 0;
    for (int r = blockIdx.x * warps_per_block + warp; r < rows; r += gridDim.x * warps_per_block) {
        const float *x = logits + (size_t)r * classes;
        float best = -INFINITY;
        int bi = classes;   /* "none yet" */
        /* NaNs are skipped, except that a NaN in column 0 wins: exactly the C loop
         * `best = 0; if (z[c] > z[best]) best = c;` */
        for (int j = lane; j < classes; j += 32) {
            float v = x[j];
            if (!isnan(v) && (bi == classes || v > best)) {
                best = v;
                bi = j;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi < classes && (bi == classes || ob > best || (ob == best && oi < bi))) {
                best = ob;
                bi = oi;
            }
        }
        if (lane == 0) {
            if (bi == classes || isnan(x[0]))
                bi = 0;
            if (bi == labels[r])
                mine++;
        }
    }
    if (lane == 0 && mine)
        atomicAdd(correct, mine);
}

/* Optimizers: the same formulas, in the same order, as kernels/kernels_cpu.c. */
__global__ void k_sgd_momentum(float *w, const float *__restrict__ g, float *v, size_t n, float lr,
                               float momentum, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] + wd * w[i];
        float vi = momentum * v[i] + gi;
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

__global__ void k_adam(float *w, const float *__restrict__ g, float *m, float *v, size_t n, float lr,
                       float b1, float b2, float eps, float wd, float bc1, float bc2)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] + wd * w[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] -= lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    }
}

__global__ void k_adagrad(float *w, const float *__restrict__ g, float *s, size_t n, float lr,
                          float eps, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] + wd * w[i];
        float si = s[i] + gi * gi;
        s[i] = si;
        w[i] -= lr * gi / (sqrtf(si) + eps);
    }
}

__global__ void k_scale(float *x, size_t n, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= a;
}

__global__ void k_unscale_check(float *x, size_t n, float inv_scale, int32_t *found_inf)
{
    __shared__ int any;
    if (threadIdx.x == 0)
        any = 0;
    __syncthreads();
    int bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i] * inv_scale;
        x[i] = v;
        bad |= !isfinite(v);
    }
    if (bad)
        any = 1;   /* benign race: every writer stores 1 */
    __syncthreads();
    if (threadIdx.x == 0 && any)
        *found_inf = 1;
}

/* Casts. bf16 and fp16 are stored as uint16_t bit patterns (the table's type). */
__global__ void k_f32_to_bf16(const float *__restrict__ s, uint16_t *d, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = __bfloat16_as_ushort(__float2bfloat16_rn(s[i]));
}
__global__ void k_bf16_to_f32(const uint16_t *__restrict__ s, float *d, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = __bfloat162float(__ushort_as_bfloat16(s[i]));
}
__global__ void k_f32_to_f16(const float *__restrict__ s, uint16_t *d, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = __half_as_ushort(__float2half_rn(s[i]));
}
__global__ void k_f16_to_f32(const uint16_t *__restrict__ s, float *d, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = __half2float(__ushort_as_half(s[i]));
}

/* Strided [rows x cols] (leading dimension ld) fp32 -> packed [rows x cols] bf16/fp16, RNE.
 * Rows over grid.y, columns over grid.x; VEC4 reads a float4 and writes 4 halves as one 8-byte
 * store (used when cols and ld are multiples of 4 and the source is 16-byte aligned). */
template <bool BF16>
__device__ __forceinline__ uint16_t cvt16(float v)
{
    return BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

template <bool BF16, bool VEC4>
__global__ void k_cast_2d(const float *__restrict__ s, int ld, int rows, int cols, uint16_t *d)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const float *sr = s + (size_t)r * ld;
        uint16_t *dr = d + (size_t)r * cols;
        if (VEC4) {
            int n4 = cols >> 2;
            for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n4; c += gridDim.x * blockDim.x) {
                float4 v = reinterpret_cast<const float4 *>(sr)[c];
                uint2 o;
                o.x = (uint32_t)cvt16<BF16>(v.x) | ((uint32_t)cvt16<BF16>(v.y) << 16);
                o.y = (uint32_t)cvt16<BF16>(v.z) | ((uint32_t)cvt16<BF16>(v.w) << 16);
                reinterpret_cast<uint2 *>(dr)[c] = o;
            }
        } else {
            for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
                dr[c] = cvt16<BF16>(sr[c]);
        }
    }
}

__global__ void k_beta_scale(float *c, int m, int n, int ldc, float beta)
{
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float *p = c + (i / n) * (size_t)ldc + i % n;
        *p = beta == 0.0f ? 0.0f : beta * *p;
    }
}

/* ------------------------------------------------------------------ table entries */

void *cu_alloc(size_t bytes)
{
    void *p = nullptr;
    if (bytes == 0)
        bytes = 1;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        rm_log_write(RM_LOG_ERROR, __FILE__, __LINE__, "cudaMalloc failed bytes=%zu err=\"%s\"",
                     bytes, cudaGetErrorString(e));
        return nullptr;
    }
    e = cudaMemsetAsync(p, 0, bytes, g_cuda.stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(p);
        return nullptr;
    }
    return p;
}

void cu_free(void *p)
{
    if (p)
        KCHECK(cudaFree(p));
}

void cu_memset0(void *p, size_t bytes)
{
    if (bytes)
        KCHECK(cudaMemsetAsync(p, 0, bytes, g_cuda.stream));
}

/* src may be reused on return: a pageable source is staged before cudaMemcpyAsync returns. */
void cu_h2d(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        KCHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_cuda.stream));
}

void cu_d2h(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        KCHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_cuda.stream));
    KCHECK(cudaStreamSynchronize(g_cuda.stream));
}

void cu_d2d(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        KCHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_cuda.stream));
}

void cu_sync(void)
{
    KCHECK(cudaStreamSynchronize(g_cuda.stream));
}

bool grow_scratch(uint16_t **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    if (*p)
        KCHECK(cudaFree(*p));   /* synchronises the device: no gemm still reads the old one */
    *p = nullptr;
    *cap = 0;
    cudaError_t e = cudaMalloc((void **)p, need * sizeof(uint16_t));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        note_error(__FILE__, __LINE__, RM_ENOMEM, "cudaMalloc(gemm scratch)", cudaGetErrorString(e));
        *p = nullptr;
        return false;
    }
    *cap = need;
    return true;
}

void cast_2d(bool bf, const float *src, int ld, int rows, int cols, uint16_t *dst)
{
    bool vec = (cols % 4) == 0 && (ld % 4) == 0 && ((uintptr_t)src % 16) == 0;
    dim3 g = grid_2d(rows, vec ? cols / 4 : cols);
    cudaStream_t st = g_cuda.stream;
    if (bf && vec)
        k_cast_2d<true, true><<<g, kThreads, 0, st>>>(src, ld, rows, cols, dst);
    else if (bf)
        k_cast_2d<true, false><<<g, kThreads, 0, st>>>(src, ld, rows, cols, dst);
    else if (vec)
        k_cast_2d<false, true><<<g, kThreads, 0, st>>>(src, ld, rows, cols, dst);
    else
        k_cast_2d<false, false><<<g, kThreads, 0, st>>>(src, ld, rows, cols, dst);
}

/* Row-major C = alpha op(A) op(B) + beta C through column-major cuBLAS: C^T = op(B)^T op(A)^T, so
 * B goes first and the transposes carry over unchanged. */
void cu_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
             const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {   /* empty sum: C = beta C, as the CPU table (beta 0 clears NaNs too) */
        size_t nn = (size_t)m * n;
        k_beta_scale<<<grid_for(nn), kThreads, 0, g_cuda.stream>>>(c, m, n, ldc, beta);
        KLAUNCHED("k_beta_scale");
        return;
    }
    rm_gemm_cm g = rm_gemm_colmajor(ta, tb, m, n, k, lda, ldb);
    cublasOperation_t op1 = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op2 = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (g_cuda.prec == RM_PREC_FP32) {
        cublasComputeType_t ct = g_cuda.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        BCHECK(cublasGemmEx(g_cuda.blas, op1, op2, g.m, g.n, g.k, &alpha, b, CUDA_R_32F, g.ld_first,
                            a, CUDA_R_32F, g.ld_second, &beta, c, CUDA_R_32F, ldc, ct,
                            CUBLAS_GEMM_DEFAULT));
        return;
    }
    int a_rows, a_cols, b_rows, b_cols;
    rm_gemm_stored(ta, m, k, &a_rows, &a_cols);
    rm_gemm_stored(tb, k, n, &b_rows, &b_cols);
    size_t na = (size_t)a_rows * a_cols, nb = (size_t)b_rows * b_cols;
    if (!grow_scratch(&g_cuda.scratch_a, &g_cuda.cap_a, na) ||
        !grow_scratch(&g_cuda.scratch_b, &g_cuda.cap_b, nb))
        return;
    bool bf = g_cuda.prec == RM_PREC_BF16;
    cast_2d(bf, a, lda, a_rows, a_cols, g_cuda.scratch_a);
    cast_2d(bf, b, ldb, b_rows, b_cols, g_cuda.scratch_b);
    KLAUNCHED("k_cast_2d");
    /* packed operands: leading dimension = stored columns */
    g = rm_gemm_colmajor(ta, tb, m, n, k, a_cols, b_cols);
    cudaDataType_t dt = bf ? CUDA_R_16BF : CUDA_R_16F;
    BCHECK(cublasGemmEx(g_cuda.blas, op1, op2, g.m, g.n, g.k, &alpha, g_cuda.scratch_b, dt, g.ld_first,
                        g_cuda.scratch_a, dt, g.ld_second, &beta, c, CUDA_R_32F, ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void cu_bias_act_fwd(float *y, const float *b, int rows, int cols, rm_act act)
{
    size_t n = (size_t)rows * cols;
    if (!n)
        return;
    k_bias_act_fwd<<<grid_2d(rows, cols), kThreads, 0, g_cuda.stream>>>(y, b, rows, cols, (int)act);
    KLAUNCHED("k_bias_act_fwd");
}

void cu_bias_act_bwd(float *dy, const float *y, float *db, int rows, int cols, rm_act act)
{
    if (cols <= 0)
        return;
    if (rows < 0)
        rows = 0;
    int gx = (cols + kBwdCols - 1) / kBwdCols;
    /* split the rows into chunks when the columns alone give too few blocks to fill the GPU */
    int want = (g_cuda.sms > 0 ? g_cuda.sms : 80) * 4;
    int chunks = (want + gx - 1) / gx;
    int max_chunks = (rows + 255) / 256;   /* at least 256 rows per chunk */
    if (chunks > max_chunks)
        chunks = max_chunks;
    if (chunks > 32)
        chunks = 32;
    if (chunks < 1)
        chunks = 1;
    float *out = db;
    if (chunks > 1) {
        size_t need = (size_t)chunks * cols;
        if (need > g_cuda.cap_part) {
            if (g_cuda.bwd_part)
                KCHECK(cudaFree(g_cuda.bwd_part));
            g_cuda.bwd_part = nullptr;
            g_cuda.cap_part = 0;
            if (cudaMalloc((void **)&g_cuda.bwd_part, need * sizeof(float)) != cudaSuccess) {
                (void)cudaGetLastError();
                g_cuda.bwd_part = nullptr;
                chunks = 1;   /* fall back to one chunk: slower, same result */
            } else {
                g_cuda.cap_part = need;
            }
        }
        if (chunks > 1)
            out = g_cuda.bwd_part;
    }
    int rows_per_chunk = chunks > 1 ? (rows + chunks - 1) / chunks : (rows > 0 ? rows : 1);
    dim3 block(kBwdCols, kBwdLanes);
    dim3 grid((unsigned)gx, (unsigned)chunks);
    k_bias_act_bwd<<<grid, block, 0, g_cuda.stream>>>(dy, y, out, rows, cols, (int)act, rows_per_chunk);
    if (chunks > 1)
        k_sum_chunks<<<grid_for((size_t)cols), kThreads, 0, g_cuda.stream>>>(out, chunks, cols, db);
    KLAUNCHED("k_bias_act_bwd");
}

void cu_softmax_xent(const float *logits, const int32_t *labels, int rows, int classes,
                     float inv_batch, float *dlogits, float *loss_sum)
{
    if (rows <= 0 || classes <= 0) {
        KCHECK(cudaMemsetAsync(loss_sum, 0, sizeof(float), g_cuda.stream));
        return;
    }
    int warps = kThreads / 32;
    int blocks = (rows + warps - 1) / warps;
    if (blocks > kMaxPartials)
        blocks = kMaxPartials;
    k_softmax_xent<<<blocks, kThreads, 0, g_cuda.stream>>>(logits, labels, rows, classes, inv_batch,
                                                           dlogits, g_cuda.partials);
    k_sum_partials<<<1, kMaxPartials, 0, g_cuda.stream>>>(g_cuda.partials, blocks, loss_sum);
    KLAUNCHED("k_softmax_xent");
}

void cu_argmax_correct(const float *logits, const int32_t *labels, int rows, int classes,
                       int32_t *correct)
{
    KCHECK(cudaMemsetAsync(correct, 0, sizeof(int32_t), g_cuda.stream));
    if (rows <= 0 || classes <= 0)
        return;
    int warps = kThreads / 32;
    int blocks = (rows + warps - 1) / warps;
    if (blocks > g_cuda.sms * 8)
        blocks = g_cuda.sms * 8;
    k_argmax_correct<<<blocks, kThreads, 0, g_cuda.stream>>>(logits, labels, rows, classes, correct);
    KLAUNCHED("k_argmax_correct");
}

void cu_sgd(float *w, const float *g, float *v, size_t n, float lr, float momentum, float wd)
{
    if (!n)
        return;
    k_sgd_momentum<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, g, v, n, lr, momentum, wd);
    KLAUNCHED("k_sgd_momentum");
}

void cu_adam(float *w, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
             float eps, float wd, float bc1, float bc2)
{
    if (!n)
        return;
    k_adam<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2);
    KLAUNCHED("k_adam");
}

void cu_adagrad(float *w, const float *g, float *s, size_t n, float lr, float eps, float wd)
{
    if (!n)
        return;
    k_adagrad<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, g, s, n, lr, eps, wd);
    KLAUNCHED("k_adagrad");
}

void cu_scale(float *x, size_t n, float a)
{
    if (!n)
        return;
    k_scale<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(x, n, a);
    KLAUNCHED("k_scale");
}

void cu_f32_to_bf16(const float *s, uint16_t *d, size_t n)
{
    if (!n)
        return;
    k_f32_to_bf16<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(s, d, n);
    KLAUNCHED("k_f32_to_bf16");
}
void cu_bf16_to_f32(const uint16_t *s, float *d, size_t n)
{
    if (!n)
        return;
    k_bf16_to_f32<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(s, d, n);
    KLAUNCHED("k_bf16_to_f32");
}
void cu_f32_to_f16(const float *s, uint16_t *d, size_t n)
{
    if (!n)
        return;
    k_f32_to_f16<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(s, d, n);
    KLAUNCHED("k_f32_to_f16");
}
void cu_f16_to_f32(const uint16_t *s, float *d, size_t n)
{
    if (!n)
        return;
    k_f16_to_f32<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(s, d, n);
    KLAUNCHED("k_f16_to_f32");
}

void cu_unscale_check(float *x, size_t n, float inv_scale, int32_t *found_inf)
{
    if (!n)
        return;
    k_unscale_check<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(x, n, inv_scale, found_inf);
    KLAUNCHED("k_unscale_check");
}

const rm_kernels k_table = {
    "cuda",
    false,
    cu_alloc,
    cu_free,
    cu_memset0,
    cu_h2d,
    cu_d2h,
    cu_d2d,
    cu_sync,
    cu_gemm,
    cu_bias_act_fwd,
    cu_bias_act_bwd,
    cu_softmax_xent,
    cu_argmax_correct,
    cu_sgd,
    cu_adam,
    cu_adagrad,
    cu_scale,
    cu_f32_to_bf16,
    cu_bf16_to_f32,
    cu_f32_to_f16,
    cu_f16_to_f32,
    cu_unscale_check,
};

bool env_off(const char *name)
{
    const char *v = getenv(name);
    return v && (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off"));
}

void ctx_init(void)
{
    int rc = RM_OK;
    char why[256];
    cuda_ctx *c = &g_cuda;
    if (!rm_gpu_available(why, sizeof why)) {
        rm_log_write(RM_LOG_WARN, __FILE__, __LINE__, "CUDA kernels unavailable why=\"%s\"", why);
        return;
    }
    {
        /* the first use picks LOCAL_RANK's device unless the caller already chose one: a context
         * on some device other than 0 means it did */
        const char *lr = getenv("LOCAL_RANK");
        int cur = 0;
        RM_CUDA_GOTO(cudaGetDevice(&cur), rc, fail);
        if (cur == 0 && lr && *lr) {
            rm_err e = {};
            RM_CHECK_GOTO(rm_gpu_select(atoi(lr), NULL, NULL, 0, &e), rc, fail);
        }
    }
    RM_CUDA_GOTO(cudaGetDevice(&c->device), rc, fail);
    RM_CUDA_GOTO(cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, c->device), rc, fail);
    RM_CUDA_GOTO(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), rc, fail);
    RM_CUBLAS_GOTO(cublasCreate(&c->blas), rc, fail);
    RM_CUBLAS_GOTO(cublasSetStream(c->blas, c->stream), rc, fail);
    RM_CUDA_GOTO(cudaMalloc(&c->blas_ws, kBlasWorkspace), rc, fail);
    /* a fixed workspace: cuBLAS then never allocates while a step runs */
    RM_CUBLAS_GOTO(cublasSetWorkspace(c->blas, c->blas_ws, kBlasWorkspace), rc, fail);
    RM_CUDA_GOTO(cudaMalloc((void **)&c->partials, kMaxPartials * sizeof(float)), rc, fail);
    c->tf32 = !env_off("NVIDIA_TF32_OVERRIDE") && !env_off("RM_CUDA_TF32");
    c->ok = true;
    rm_log_write(RM_LOG_INFO, __FILE__, __LINE__, "CUDA kernels ready device=%d sms=%d tf32=%d",
                 c->device, c->sms, (int)c->tf32);
    return;
fail:
    /* the context is process-wide and tried once; leave partial state for the OS to reclaim */
    rm_log_write(RM_LOG_ERROR, __FILE__, __LINE__, "CUDA kernels init failed rc=%s", rm_strerror(rc));
}

}  // namespace

extern "C" {

const char *rm_cublas_status_str(int status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

const rm_kernels *rm_kernels_cuda(void)
{
    pthread_once(&g_cuda.once, ctx_init);
    return g_cuda.ok ? &k_table : nullptr;
}

int rm_gpu_set_precision(rm_precision p, rm_err *err)
{
    if (p != RM_PREC_FP32 && p != RM_PREC_BF16 && p != RM_PREC_FP16)
        return rm_errf(err, RM_EINVAL, "unknown precision %d", (int)p);
    if (!rm_kernels_cuda()) {
        char why[256];
        rm_gpu_available(why, sizeof why);
        return rm_errf(err, RM_EUNSUPPORTED, "precision %s needs a GPU: %s", rm_precision_str(p),
                       why[0] ? why : "CUDA kernels failed to initialise (see log)");
    }
    /* drain work that used the previous mode before switching (only at setup time) */
    cudaError_t e = cudaStreamSynchronize(g_cuda.stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rm_errf(err, RM_EIO, "cudaStreamSynchronize: %s", cudaGetErrorString(e));
    }
    g_cuda.prec = p;
    return RM_OK;
}

int rm_gpu_device(void)
{
    return g_cuda.ok ? g_cuda.device : -1;
}

void *rm_gpu_compute_stream(void)
{
    return g_cuda.ok ? (void *)g_cuda.stream : nullptr;
}

int rm_gpu_check(rm_err *err)
{
    int rc = RM_OK;
    pthread_mutex_lock(&g_cuda.err_mu);
    if (g_cuda.first_err.code != 0) {
        rc = g_cuda.first_err.code;
        if (err)
            *err = g_cuda.first_err;
        memset(&g_cuda.first_err, 0, sizeof g_cuda.first_err);
    }
    pthread_mutex_unlock(&g_cuda.err_mu);
    return rc;
}

}  // extern "C"
