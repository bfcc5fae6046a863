/* kernels_cuda.cu — the CUDA implementation of the rm_kernels table (kernels/kernels.h) and of
 * kernels/kernels_cuda.h: cuBLAS matrix products and hand-written kernels for the rest of a step.
 *
 * Design:
 *  - The table has no context argument, so its state (device, one non-blocking compute stream, the
 *    cuBLAS handle and workspace, gemm scratch, reduction scratch, the first error) lives in ONE
 *    file-static struct, `g_cuda`, created by the first successful rm_kernels_cuda() call on the
 *    device current at that time (the worker picks it first: worker/gpu.h rm_gpu_select). A failed
 *    initialisation releases what it made, records why (rm_cuda_init_error) and is retried by the
 *    next call. Nothing runs at program start.
 *  - Initialisation probes that this binary holds a kernel image for the device
 *    (cudaFuncGetAttributes); without one it fails naming the GPU's sm_XY and the built list, instead
 *    of every launch failing later while cuBLAS and NCCL still run.
 *  - Every entry is issued on that stream, so entries are ordered as the header promises. d2h and
 *    sync wait on the stream; nothing else blocks the host.
 *  - Errors: compute entries return void like launches; a failure is logged with file:line and the
 *    kernel or call, the first one is kept, and check() returns it (and any device fault, through a
 *    non-blocking cudaStreamQuery). Memory entries return the first pending error; a failed d2h
 *    fills the host buffer with 0xff (NaN / -1) so no stale 0 is ever read as a result.
 *    RINGMASTER_CUDA_SYNC_CHECK=1 synchronises after every launch to name a faulting kernel.
 *  - Per-element math is kernels/elem.h, launch shapes kernels/plan.h, reduction phases
 *    kernels/reduce.h: the same functions the CPU table and the CPU tests run.
 *  - Reductions are deterministic (fixed partition and order; no float atomics), so two runs of the
 *    same step give the same bits; integer counts use atomics (exact).
 *  - gemm: fp32 uses TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) unless NVIDIA_TF32_OVERRIDE=0
 *    or RM_CUDA_TF32=0; with rm_cuda_set_precision(bf16|fp16) the inputs are rounded (RNE, the same
 *    bits as worker/gpu.c's rm_f32_to_bf16/f16) into scratch and multiplied with fp32 accumulation
 *    into the fp32 output. Scratch grows to the largest shape seen (first step only) with the
 *    stream-ordered allocator (cudaMallocAsync/cudaFreeAsync): no device-wide synchronisation while
 *    an NCCL kernel may be running on the communication stream. Steady state allocates nothing.
 *    The rounded copies are cached per operand (kernels/cast_cache.h): within a step the forward's
 *    X and W and the backward's dY are each rounded once, not once per gemm; every entry that
 *    writes device memory reports its output range so a copy is never stale, and check() drops
 *    them all once per step.
 *  - Host memory for per-step copies (host_alloc) is pinned (cudaMallocHost), so h2d/d2h are DMA
 *    transfers without a staging copy; a failed pinning falls back to malloc (host_free tells
 *    them apart).
 * Oracles: kernels/kernels_cpu.c (the CPU table) and worker/gpu.c (conversions); see tests/gpu/. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cast_cache.h"
#include "kernels/cuda/gemm_map.h"
#include "kernels/cuda/rm_cuda.h"
#include "kernels/elem.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "kernels/plan.h"
#include "kernels/reduce.h"
#include "kernels/cuda/tf_cuda.h"

#define RM_STR2(...) #__VA_ARGS__
#define RM_STR(...) RM_STR2(__VA_ARGS__)
#ifdef __CUDA_ARCH_LIST__
#define RM_BUILT_ARCHS RM_STR(__CUDA_ARCH_LIST__)
#else
#define RM_BUILT_ARCHS "unknown"
#endif

namespace {

constexpr int kThreads = RM_PLAN_THREADS;
constexpr int kMaxPartials = RM_PLAN_MAX_PARTIALS;
constexpr int kBwdCols = RM_PLAN_BWD_COLS, kBwdLanes = RM_PLAN_BWD_LANES;
constexpr size_t kBlasWorkspace = 32u << 20;
constexpr unsigned kFullMask = 0xffffffffu;
static_assert(kThreads % RM_WARP == 0 && kThreads / RM_WARP <= RM_WARP, "row kernels: whole warps");
static_assert((kMaxPartials & (kMaxPartials - 1)) == 0, "k_sum_partials: a power-of-two tree");
static_assert((kBwdLanes & (kBwdLanes - 1)) == 0 && kBwdCols == RM_WARP, "k_bias_act_bwd block");

struct cuda_ctx {
    pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;   /* serialises (re)initialisation */
    int ok = 0;                        /* 1 once initialised (atomic; read without init_mu) */
    char init_why[512] = "";           /* why the last initialisation failed */
    int device = 0;
    int sms = 0;
    bool sync_check = false;           /* RINGMASTER_CUDA_SYNC_CHECK=1 */
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    void *blas_ws = nullptr;
    bool tf32 = true;
    rm_precision prec = RM_PREC_FP32;
    pthread_mutex_t cast_mu = PTHREAD_MUTEX_INITIALIZER;   /* guards casts (NCCL's thread reports writes) */
    rm_cast_cache casts = {};          /* gemm inputs rounded to bf16/fp16; slot.buf device memory */
    float *partials = nullptr;         /* [kMaxPartials] softmax-xent loss partial sums */
    float *bwd_part = nullptr;         /* [chunks x cols] bias-gradient partial sums */
    size_t cap_part = 0;               /* floats */
    pthread_mutex_t err_mu = PTHREAD_MUTEX_INITIALIZER;
    rm_err first_err = {};             /* code 0 = none */
};

cuda_ctx g_cuda;

void wrote(const void *p, size_t bytes);   /* the 16-bit operand cache: see cu_gemm */
void wrote_all(void);
bool is_pinned(const void *p);

int cuda_code(cudaError_t e) { return e == cudaErrorMemoryAllocation ? RM_ENOMEM : RM_EIO; }
int cublas_code(cublasStatus_t s) { return s == CUBLAS_STATUS_ALLOC_FAILED ? RM_ENOMEM : RM_EIO; }

void note_error(const char *file, int line, int code, const char *what, const char *msg)
{
    rm_log_write(RM_LOG_ERROR, file, line, "CUDA kernels failure call=\"%s\" err=\"%s\"", what, msg);
    pthread_mutex_lock(&g_cuda.err_mu);
    if (g_cuda.first_err.code == 0)
        rm_errf(&g_cuda.first_err, code, "%s:%d: %s: %s", file, line, what, msg);
    pthread_mutex_unlock(&g_cuda.err_mu);
}

int pending_code(void)
{
    pthread_mutex_lock(&g_cuda.err_mu);
    int c = g_cuda.first_err.code;
    pthread_mutex_unlock(&g_cuda.err_mu);
    return c;
}

/* Records a failed call; returns its RM_E* code (RM_OK on success). */
int kcheck(const char *file, int line, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return RM_OK;
    (void)cudaGetLastError();
    note_error(file, line, cuda_code(e), what, cudaGetErrorString(e));
    return cuda_code(e);
}
#define KCHECK(call) kcheck(__FILE__, __LINE__, (call), #call)

/* After a launch: a launch error (bad configuration, no kernel image) shows at once; an execution
 * error shows at the next synchronisation, which sync-check mode does right here to name it. */
void sync_checked(const char *file, int line, const char *name)
{
    if (!g_cuda.sync_check)
        return;
    cudaError_t e = cudaStreamSynchronize(g_cuda.stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        char what[96];
        snprintf(what, sizeof what, "%s (RINGMASTER_CUDA_SYNC_CHECK)", name);
        note_error(file, line, cuda_code(e), what, cudaGetErrorString(e));
    }
}

void launched(const char *file, int line, const char *name)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        note_error(file, line, cuda_code(e), name, cudaGetErrorString(e));
        return;
    }
    sync_checked(file, line, name);
}
#define KLAUNCHED(name) launched(__FILE__, __LINE__, "launch " name)
/* cuBLAS launches its own kernels: in sync-check mode, name the call that ran them */
#define KSYNCED(name) sync_checked(__FILE__, __LINE__, name)

#define BCHECK(call)                                                                          \
    do {                                                                                      \
        cublasStatus_t bs_ = (call);                                                          \
        if (bs_ != CUBLAS_STATUS_SUCCESS)                                                     \
            note_error(__FILE__, __LINE__, cublas_code(bs_), #call,                           \
                       rm_cublas_status_str((int)bs_));                                       \
    } while (0)

unsigned grid_for(size_t n) { return rm_plan_grid1d(n, g_cuda.sms); }

dim3 grid_2d(int rows, int cols_work)
{
    rm_plan2d p = rm_plan_grid2d(rows, cols_work, g_cuda.sms);
    return dim3(p.gx, p.gy);
}

/* ------------------------------------------------------------------ elementwise kernels */

/* Rows over grid.y, columns over grid.x: no per-element division, coalesced rows. */
__global__ void k_bias_act_fwd(float *y, const float *__restrict__ b, int rows, int cols, int act)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        float *yr = y + (size_t)r * cols;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
            yr[c] = rm_e_bias_act(yr[c], b[c], act);
    }
}

/* Block (32 columns x 16 row lanes) over one chunk of rows (blockIdx.y): the lane phase
 * (rm_bwd_lane_sum: activation derivative, lane-strided sums in row order), then a fixed tree over
 * the 16 row lanes in shared memory. With one chunk the sum goes straight to db; otherwise to
 * partials [chunk][cols], which k_sum_chunks adds in chunk order: deterministic either way. */
__global__ void k_bias_act_bwd(float *dy, const float *y, float *out, int rows, int cols, int act,
                               int rows_per_chunk)
{
    __shared__ float part[kBwdLanes][kBwdCols + 1];
    int c = blockIdx.x * kBwdCols + threadIdx.x;
    int r0, r1;
    rm_plan_chunk_rows((int)blockIdx.y, rows_per_chunk, rows, &r0, &r1);
    float sum = 0.0f;
    if (c < cols)
        sum = rm_bwd_lane_sum(dy, y, cols, c, r0, r1, (int)threadIdx.y, kBwdLanes, act);
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    for (int s = 0; rm_tree_offset(kBwdLanes, s) > 0; s++) {
        int o = rm_tree_offset(kBwdLanes, s);
        if ((int)threadIdx.y < o)
            part[threadIdx.y][threadIdx.x] += part[threadIdx.y + o][threadIdx.x];
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
    for (int s = 0; s < RM_WARP_STEPS; s++)
        v = fmaxf(v, __shfl_xor_sync(kFullMask, v, rm_xor_offset(s)));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int s = 0; s < RM_WARP_STEPS; s++)
        v += __shfl_xor_sync(kFullMask, v, rm_xor_offset(s));
    return v;
}

/* One warp per row (phases: lane max, warp max, lane sum of exp, warp sum, row loss, gradients).
 * Loss partial per block (warps in order), summed by k_sum_partials. Launched with kThreads. */
__global__ void k_softmax_xent(const float *logits, const int32_t *__restrict__ labels, int rows,
                               int classes, float inv_batch, float *dlogits, float *partials)
{
    __shared__ float wsum[kThreads / RM_WARP];
    int lane = threadIdx.x & (RM_WARP - 1), warp = threadIdx.x / RM_WARP;
    int warps_per_block = kThreads / RM_WARP;
    float acc = 0.0f;
    for (int r = blockIdx.x * warps_per_block + warp; r < rows; r += gridDim.x * warps_per_block) {
        const float *x = logits + (size_t)r * classes;
        float *d = dlogits + (size_t)r * classes;
        float m = warp_max(rm_xent_lane_max(x, classes, lane));
        float s = warp_sum(rm_xent_lane_sumexp(x, classes, lane, m));
        int label = labels[r];
        float loss = rm_xent_row_loss(x, classes, label, m, s);
        float inv_s = 1.0f / s;
        __syncwarp();
        /* dlogits may alias logits: every lane has read what it needs (m, s, x[label]) first */
        for (int j = lane; j < classes; j += RM_WARP)
            d[j] = rm_xent_grad_at(x, j, label, m, inv_s, inv_batch);
        if (lane == 0)
            acc += loss;
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

/* Launched with kMaxPartials threads: *out = (or += with accumulate) the tree sum of partials[0, n);
 * slots >= n are 0, never read from the buffer. */
__global__ void k_sum_partials(const float *partials, int n, float *out, bool accumulate)
{
    __shared__ float s[kMaxPartials];
    int t = threadIdx.x;
    s[t] = t < n ? partials[t] : 0.0f;
    __syncthreads();
    for (int st = 0; rm_tree_offset(kMaxPartials, st) > 0; st++) {
        int k = rm_tree_offset(kMaxPartials, st);
        if (t < k)
            s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0)
        *out = accumulate ? *out + s[0] : s[0];
}

/* One warp per row; first maximum (lowest index among equal maxima) and the NaN rules of the C
 * reference (kernels/reduce.h rm_argmax_*). Launched with kThreads. */
__global__ void k_argmax_correct(const float *logits, const int32_t *__restrict__ labels, int rows,
                                 int classes, int32_t *correct)
{
    int lane = threadIdx.x & (RM_WARP - 1), warp = threadIdx.x / RM_WARP;
    int warps_per_block = kThreads / RM_WARP;
    int mine = 0;
    for (int r = blockIdx.x * warps_per_block + warp; r < rows; r += gridDim.x * warps_per_block) {
        const float *x = logits + (size_t)r * classes;
        float best = -INFINITY;
        int bi = classes;   /* "none yet" */
        for (int j = lane; j < classes; j += RM_WARP)
            rm_argmax_lane(&best, &bi, x[j], j, classes);
        for (int s = 0; s < RM_WARP_STEPS; s++) {
            float ob = __shfl_xor_sync(kFullMask, best, rm_xor_offset(s));
            int oi = __shfl_xor_sync(kFullMask, bi, rm_xor_offset(s));
            rm_argmax_merge(&best, &bi, ob, oi, classes);
        }
        if (lane == 0 && rm_argmax_final(bi, x[0], classes) == labels[r])
            mine++;
    }
    if (lane == 0 && mine)
        atomicAdd(correct, mine);
}

/* Optimizers: kernels/elem.h, the formulas the CPU table runs. */
__global__ void k_sgd_momentum(float *w, const float *__restrict__ g, float *v, size_t n, float lr,
                               float momentum, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        rm_e_sgd(&w[i], &v[i], g[i], lr, momentum, wd);
}

__global__ void k_adam(float *w, const float *__restrict__ g, float *m, float *v, size_t n, float lr,
                       float b1, float b2, float eps, float wd, float inv_bc1, float inv_sqrt_bc2)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        rm_e_adam(&w[i], &m[i], &v[i], g[i], lr, b1, b2, eps, wd, inv_bc1, inv_sqrt_bc2);
}

__global__ void k_adagrad(float *w, const float *__restrict__ g, float *s, size_t n, float lr,
                          float eps, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        rm_e_adagrad(&w[i], &s[i], g[i], lr, eps, wd);
}

__global__ void k_scale(float *x, size_t n, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= a;
}

__global__ void k_adamw(float *w, const float *__restrict__ g, float *m, float *v, size_t n, float lr,
                        float b1, float b2, float eps, float wd, float inv_bc1, float inv_sqrt_bc2)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        rm_e_adamw(&w[i], &m[i], &v[i], g[i], lr, b1, b2, eps, wd, inv_bc1, inv_sqrt_bc2);
}

/* The block's sum of a per-thread value, warps in order, into *out by thread 0 (deterministic). */
__device__ __forceinline__ void block_sum_to(float a, float *out)
{
    __shared__ float wsum[kThreads / RM_WARP];
    int lane = threadIdx.x & (RM_WARP - 1), warp = threadIdx.x / RM_WARP;
    a = warp_sum(a);
    if (lane == 0)
        wsum[warp] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int k = 0; k < kThreads / RM_WARP; k++)
            t += wsum[k];
        *out = t;
    }
    __syncthreads();
}

/* Sums of squares: a fixed grid (sumsq_blocks) writes one partial per block; k_sum_partials adds
 * them in a fixed tree. No float atomics: the same x gives the same bits on every rank. */
__global__ void k_sumsq(const float *__restrict__ x, size_t n, float *partials)
{
    float a = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        a += x[i] * x[i];
    block_sum_to(a, &partials[blockIdx.x]);
}

/* LAMB's moments; partials[b] gets the block's sum of w^2, partials[kMaxPartials / 2 + b] of r^2. */
__global__ void k_lamb_moments(const float *__restrict__ w, const float *__restrict__ g, float *m, float *v,
                               size_t n, float b1, float b2, float eps, float wd, float inv_bc1,
                               float inv_sqrt_bc2, float *partials)
{
    float ww = 0.0f, rr = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float r = rm_e_lamb_moments(w[i], &m[i], &v[i], g[i], b1, b2, eps, wd, inv_bc1, inv_sqrt_bc2);
        ww += w[i] * w[i];
        rr += r * r;
    }
    block_sum_to(ww, &partials[blockIdx.x]);
    block_sum_to(rr, &partials[kMaxPartials / 2 + blockIdx.x]);
}

__global__ void k_lamb_apply(float *w, const float *__restrict__ m, const float *__restrict__ v, size_t n,
                             float lr, float eps, float wd, float inv_bc1, float inv_sqrt_bc2)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        rm_e_lamb_apply(&w[i], m[i], v[i], lr, eps, wd, inv_bc1, inv_sqrt_bc2);
}

__global__ void k_lars(float *w, const float *__restrict__ g, float *v, size_t n, float lr, float momentum,
                       float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        rm_e_lars(&w[i], &v[i], g[i], lr, momentum, wd);
}

__global__ void k_axpy(float *y, const float *__restrict__ x, size_t n, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += a * x[i];
}

/* Check before unscaling (rm_e_unscale_check); inv_scale 1 only reads. The block agrees through
 * __syncthreads_or (no shared flag written by many threads). */
__global__ void k_unscale_check(float *x, size_t n, float inv_scale, int32_t *found_inf)
{
    int bad = 0;
    size_t i0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    if (inv_scale == 1.0f) {
        for (size_t i = i0; i < n; i += stride)
            bad |= !isfinite(x[i]);
    } else {
        for (size_t i = i0; i < n; i += stride)
            bad |= rm_e_unscale_check(&x[i], inv_scale);
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0)
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
    wrote(p, bytes);   /* the addresses may have held a freed, cached operand */
    return p;
}

void cu_free(void *p)
{
    if (p)
        KCHECK(cudaFree(p));
}

/* RM_OK, this call's error, or the first error pending from an earlier entry. */
int mem_result(int rc)
{
    return rc != RM_OK ? rc : pending_code();
}

int cu_memset0(void *p, size_t bytes)
{
    wrote(p, bytes);
    int rc = bytes ? KCHECK(cudaMemsetAsync(p, 0, bytes, g_cuda.stream)) : RM_OK;
    return mem_result(rc);
}

/* src may be reused on return: a pageable source is staged before cudaMemcpyAsync returns; a
 * pinned one (host_alloc) is read by the DMA itself, so the call waits for that copy (the trainer
 * copies a batch after the previous step's d2h drained the stream: nothing else is waited for). */
int cu_h2d(void *dst, const void *src, size_t bytes)
{
    wrote(dst, bytes);
    int rc = bytes ? KCHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_cuda.stream))
                   : RM_OK;
    if (rc == RM_OK && bytes && is_pinned(src))
        rc = KCHECK(cudaStreamSynchronize(g_cuda.stream));
    return mem_result(rc);
}

/* Waits for the stream. On any error — this copy, the wait (a fault in earlier work), or one
 * pending from an earlier entry — dst gets 0xff bytes: never a stale or zero "result". */
int cu_d2h(void *dst, const void *src, size_t bytes)
{
    int rc = RM_OK;
    if (bytes)
        rc = KCHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_cuda.stream));
    int wrc = KCHECK(cudaStreamSynchronize(g_cuda.stream));
    if (rc == RM_OK)
        rc = wrc;
    rc = mem_result(rc);
    if (rc != RM_OK && bytes)
        memset(dst, 0xff, bytes);
    return rc;
}

/* Pinned host memory (cudaMallocHost); when pinning fails, plain malloc (cu_host_free tells them
 * apart by asking the runtime what the pointer is). */
void *cu_host_alloc(size_t bytes)
{
    void *p = nullptr;
    if (bytes == 0)
        bytes = 1;
    cudaError_t e = cudaMallocHost(&p, bytes);
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();
    rm_log_write(RM_LOG_WARN, __FILE__, __LINE__, "cudaMallocHost failed bytes=%zu err=\"%s\" "
                 "(pageable memory instead)", bytes, cudaGetErrorString(e));
    return malloc(bytes);
}

bool is_pinned(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

void cu_host_free(void *p)
{
    if (!p)
        return;
    if (is_pinned(p))
        KCHECK(cudaFreeHost(p));
    else
        free(p);
}

int cu_d2d(void *dst, const void *src, size_t bytes)
{
    wrote(dst, bytes);
    int rc = RM_OK;
    if (bytes && dst != src)
        rc = KCHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_cuda.stream));
    return mem_result(rc);
}

int cu_sync(void)
{
    return mem_result(KCHECK(cudaStreamSynchronize(g_cuda.stream)));
}

/* Non-blocking: a device fault (sticky: every later call reports it) shows through the stream
 * query; the first recorded error is returned and cleared. */
int cu_check(rm_err *err)
{
    cudaError_t q = cudaStreamQuery(g_cuda.stream);
    if (q != cudaSuccess && q != cudaErrorNotReady) {
        (void)cudaGetLastError();
        note_error(__FILE__, __LINE__, cuda_code(q), "cudaStreamQuery (work queued earlier faulted)",
                   cudaGetErrorString(q));
    }
    wrote_all();   /* once per step: no rounded copy outlives the step that made it */
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

/* Stream-ordered: the old buffer is freed after the work that reads it, the new one is usable by
 * work queued after this call; neither synchronises the device. */
bool grow_scratch(void **p, size_t *cap, size_t need_bytes, const char *what, bool required = true)
{
    if (need_bytes <= *cap)
        return true;
    if (*p)
        KCHECK(cudaFreeAsync(*p, g_cuda.stream));
    *p = nullptr;
    *cap = 0;
    cudaError_t e = cudaMallocAsync(p, need_bytes, g_cuda.stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (required)
            note_error(__FILE__, __LINE__, RM_ENOMEM, what, cudaGetErrorString(e));
        else
            rm_log_write(RM_LOG_WARN, __FILE__, __LINE__, "CUDA scratch not grown call=\"%s\" "
                         "err=\"%s\" (falling back)", what, cudaGetErrorString(e));
        *p = nullptr;
        return false;
    }
    *cap = need_bytes;
    return true;
}

/* Work queued from now on may write [p, p + bytes): no cached 16-bit copy of it stays. */
void wrote(const void *p, size_t bytes)
{
    if (!p || !bytes)
        return;
    pthread_mutex_lock(&g_cuda.cast_mu);
    rm_cast_cache_written(&g_cuda.casts, p, bytes);
    pthread_mutex_unlock(&g_cuda.cast_mu);
}

void wrote_all(void)
{
    pthread_mutex_lock(&g_cuda.cast_mu);
    rm_cast_cache_clear(&g_cuda.casts);
    pthread_mutex_unlock(&g_cuda.cast_mu);
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
    KLAUNCHED("k_cast_2d");
}

/* The packed 16-bit copy of a rows x cols fp32 operand (row stride ld): the cached one while its
 * source is unchanged, else rounded now into a cache slot. NULL when the slot cannot grow (the error
 * is recorded for check()). Caller holds cast_mu. */
const uint16_t *cast_operand(bool bf, const float *src, int ld, int rows, int cols, const char *what)
{
    size_t need = (size_t)rows * (size_t)cols * sizeof(uint16_t);
    bool hit = false;
    int i = rm_cast_cache_get(&g_cuda.casts, src, rows, cols, ld, (int)g_cuda.prec, need, &hit);
    rm_cast_slot *s = &g_cuda.casts.slot[i];
    if (hit)
        return (const uint16_t *)s->buf;
    if (!grow_scratch(&s->buf, &s->cap, need, what)) {
        rm_cast_cache_drop(&g_cuda.casts, i);
        return nullptr;
    }
    cast_2d(bf, src, ld, rows, cols, (uint16_t *)s->buf);
    return (const uint16_t *)s->buf;
}

/* A gemm that cannot run leaves C all NaN (0xff bytes), so nothing downstream mistakes the old C
 * for a result; the error itself is recorded for check(). */
void poison_c(float *c, int m, int n, int ldc)
{
    KCHECK(cudaMemset2DAsync(c, (size_t)ldc * sizeof(float), 0xff, (size_t)n * sizeof(float),
                             (size_t)m, g_cuda.stream));
}

/* Row-major C = alpha op(A) op(B) + beta C through column-major cuBLAS: C^T = op(B)^T op(A)^T, so
 * B goes first and the transposes carry over unchanged (gemm_map.h). */
void gemm_queue(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                const float *b, int ldb, float beta, float *c, int ldc)
{
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
        KSYNCED("cublasGemmEx (fp32)");
        return;
    }
    int a_rows, a_cols, b_rows, b_cols;
    rm_gemm_stored(ta, m, k, &a_rows, &a_cols);
    rm_gemm_stored(tb, k, n, &b_rows, &b_cols);
    bool bf = g_cuda.prec == RM_PREC_BF16;
    pthread_mutex_lock(&g_cuda.cast_mu);
    const uint16_t *a16 = cast_operand(bf, a, lda, a_rows, a_cols, "cudaMallocAsync(gemm operand A)");
    const uint16_t *b16 = a16 ? cast_operand(bf, b, ldb, b_rows, b_cols, "cudaMallocAsync(gemm operand B)")
                              : nullptr;
    if (!a16 || !b16) {
        pthread_mutex_unlock(&g_cuda.cast_mu);
        poison_c(c, m, n, ldc);
        return;
    }
    /* packed operands: leading dimension = stored columns */
    g = rm_gemm_colmajor(ta, tb, m, n, k, a_cols, b_cols);
    cudaDataType_t dt = bf ? CUDA_R_16BF : CUDA_R_16F;
    BCHECK(cublasGemmEx(g_cuda.blas, op1, op2, g.m, g.n, g.k, &alpha, b16, dt, g.ld_first,
                        a16, dt, g.ld_second, &beta, c, CUDA_R_32F, ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    pthread_mutex_unlock(&g_cuda.cast_mu);
    KSYNCED(bf ? "cublasGemmEx (bf16)" : "cublasGemmEx (fp16)");
}

void cu_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
             const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    gemm_queue(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    /* after the operands' casts are queued: a C that overlaps A or B leaves no stale copy */
    wrote(c, rm_cast_span(m, n, ldc));
}

void cu_bias_act_fwd(float *y, const float *b, int rows, int cols, rm_act act)
{
    size_t n = (size_t)rows * cols;
    if (!n || rows < 0 || cols < 0)
        return;
    wrote(y, n * sizeof(float));
    k_bias_act_fwd<<<grid_2d(rows, cols), kThreads, 0, g_cuda.stream>>>(y, b, rows, cols, (int)act);
    KLAUNCHED("k_bias_act_fwd");
}

void cu_bias_act_bwd(float *dy, const float *y, float *db, int rows, int cols, rm_act act)
{
    if (cols <= 0)
        return;
    if (rows < 0)
        rows = 0;
    wrote(dy, (size_t)rows * cols * sizeof(float));
    wrote(db, (size_t)cols * sizeof(float));
    rm_plan_bwd p = rm_plan_bias_bwd(rows, cols, g_cuda.sms);
    float *out = db;
    if (p.chunks > 1) {
        size_t cap_bytes = g_cuda.cap_part * sizeof(float);
        if (grow_scratch((void **)&g_cuda.bwd_part, &cap_bytes, (size_t)p.chunks * cols * sizeof(float),
                         "cudaMallocAsync(bias-gradient partials)", false)) {
            g_cuda.cap_part = cap_bytes / sizeof(float);
            out = g_cuda.bwd_part;
        } else {   /* not an error: one chunk is slower, same result */
            g_cuda.cap_part = 0;
            p = rm_plan_bias_bwd_single(rows, cols);
        }
    }
    if (!rm_plan_ok_bwd(p, rows)) {
        note_error(__FILE__, __LINE__, RM_EINVAL, "k_bias_act_bwd plan", "launch shape out of range");
        return;
    }
    dim3 block(kBwdCols, kBwdLanes);
    dim3 grid((unsigned)p.gx, (unsigned)p.chunks);
    k_bias_act_bwd<<<grid, block, 0, g_cuda.stream>>>(dy, y, out, rows, cols, (int)act, p.rows_per_chunk);
    KLAUNCHED("k_bias_act_bwd");
    if (p.chunks > 1) {
        k_sum_chunks<<<grid_for((size_t)cols), kThreads, 0, g_cuda.stream>>>(out, p.chunks, cols, db);
        KLAUNCHED("k_sum_chunks");
    }
}

void cu_softmax_xent(const float *logits, const int32_t *labels, int rows, int classes,
                     float inv_batch, float *dlogits, float *loss_sum)
{
    wrote(loss_sum, sizeof(float));
    if (rows > 0 && classes > 0)
        wrote(dlogits, (size_t)rows * classes * sizeof(float));
    if (rows <= 0 || classes <= 0) {
        KCHECK(cudaMemsetAsync(loss_sum, 0, sizeof(float), g_cuda.stream));
        return;
    }
    int blocks = rm_plan_softmax_blocks(rows);
    k_softmax_xent<<<blocks, kThreads, 0, g_cuda.stream>>>(logits, labels, rows, classes, inv_batch,
                                                           dlogits, g_cuda.partials);
    KLAUNCHED("k_softmax_xent");
    k_sum_partials<<<1, kMaxPartials, 0, g_cuda.stream>>>(g_cuda.partials, blocks, loss_sum, false);
    KLAUNCHED("k_sum_partials");
}

void cu_argmax_correct(const float *logits, const int32_t *labels, int rows, int classes,
                       int32_t *correct)
{
    wrote(correct, sizeof(int32_t));
    KCHECK(cudaMemsetAsync(correct, 0, sizeof(int32_t), g_cuda.stream));
    if (rows <= 0 || classes <= 0)
        return;
    int blocks = rm_plan_argmax_blocks(rows, g_cuda.sms);
    k_argmax_correct<<<blocks, kThreads, 0, g_cuda.stream>>>(logits, labels, rows, classes, correct);
    KLAUNCHED("k_argmax_correct");
}

void cu_sgd(float *w, const float *g, float *v, size_t n, float lr, float momentum, float wd)
{
    if (!n)
        return;
    wrote(w, n * sizeof(float));
    wrote(v, n * sizeof(float));
    k_sgd_momentum<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, g, v, n, lr, momentum, wd);
    KLAUNCHED("k_sgd_momentum");
}

void cu_adam(float *w, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
             float eps, float wd, float bc1, float bc2)
{
    if (!n)
        return;
    wrote(w, n * sizeof(float));
    wrote(m, n * sizeof(float));
    wrote(v, n * sizeof(float));
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(bc1, bc2, &inv_bc1, &inv_sqrt_bc2);
    k_adam<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, g, m, v, n, lr, b1, b2, eps, wd, inv_bc1,
                                                        inv_sqrt_bc2);
    KLAUNCHED("k_adam");
}

void cu_adagrad(float *w, const float *g, float *s, size_t n, float lr, float eps, float wd)
{
    if (!n)
        return;
    wrote(w, n * sizeof(float));
    wrote(s, n * sizeof(float));
    k_adagrad<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, g, s, n, lr, eps, wd);
    KLAUNCHED("k_adagrad");
}

void cu_scale(float *x, size_t n, float a)
{
    if (!n)
        return;
    wrote(x, n * sizeof(float));
    k_scale<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(x, n, a);
    KLAUNCHED("k_scale");
}

void cu_adamw(float *w, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
              float eps, float wd, float bc1, float bc2)
{
    if (!n)
        return;
    wrote(w, n * sizeof(float));
    wrote(m, n * sizeof(float));
    wrote(v, n * sizeof(float));
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(bc1, bc2, &inv_bc1, &inv_sqrt_bc2);
    k_adamw<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, g, m, v, n, lr, b1, b2, eps, wd, inv_bc1,
                                                         inv_sqrt_bc2);
    KLAUNCHED("k_adamw");
}

/* Blocks of a sum-of-squares pass: a fixed function of n (at most half the partials buffer, so
 * the two sums of k_lamb_moments fit). */
static int sumsq_blocks(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return b < 1 ? 1 : b > (size_t)(kMaxPartials / 2) ? kMaxPartials / 2 : (int)b;
}

void cu_sumsq(const float *x, size_t n, float *acc)
{
    if (!n)
        return;
    wrote(acc, sizeof(float));
    int blocks = sumsq_blocks(n);
    k_sumsq<<<blocks, kThreads, 0, g_cuda.stream>>>(x, n, g_cuda.partials);
    KLAUNCHED("k_sumsq");
    k_sum_partials<<<1, kMaxPartials, 0, g_cuda.stream>>>(g_cuda.partials, blocks, acc, true);
    KLAUNCHED("k_sum_partials");
}

void cu_lamb_moments(const float *w, const float *g, float *m, float *v, size_t n, float b1, float b2,
                     float eps, float wd, float bc1, float bc2, float *sums)
{
    if (!n)
        return;
    wrote(m, n * sizeof(float));
    wrote(v, n * sizeof(float));
    wrote(sums, 2 * sizeof(float));
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(bc1, bc2, &inv_bc1, &inv_sqrt_bc2);
    int blocks = sumsq_blocks(n);
    k_lamb_moments<<<blocks, kThreads, 0, g_cuda.stream>>>(w, g, m, v, n, b1, b2, eps, wd, inv_bc1,
                                                           inv_sqrt_bc2, g_cuda.partials);
    KLAUNCHED("k_lamb_moments");
    k_sum_partials<<<1, kMaxPartials, 0, g_cuda.stream>>>(g_cuda.partials, blocks, sums, true);
    KLAUNCHED("k_sum_partials");
    k_sum_partials<<<1, kMaxPartials, 0, g_cuda.stream>>>(g_cuda.partials + kMaxPartials / 2, blocks,
                                                          sums + 1, true);
    KLAUNCHED("k_sum_partials");
}

void cu_lamb_apply(float *w, const float *m, const float *v, size_t n, float lr, float eps, float wd,
                   float bc1, float bc2)
{
    if (!n)
        return;
    wrote(w, n * sizeof(float));
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(bc1, bc2, &inv_bc1, &inv_sqrt_bc2);
    k_lamb_apply<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, m, v, n, lr, eps, wd, inv_bc1,
                                                              inv_sqrt_bc2);
    KLAUNCHED("k_lamb_apply");
}

void cu_lars(float *w, const float *g, float *v, size_t n, float lr, float momentum, float wd)
{
    if (!n)
        return;
    wrote(w, n * sizeof(float));
    wrote(v, n * sizeof(float));
    k_lars<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(w, g, v, n, lr, momentum, wd);
    KLAUNCHED("k_lars");
}

void cu_axpy(float *y, const float *x, size_t n, float a)
{
    if (!n)
        return;
    wrote(y, n * sizeof(float));
    k_axpy<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(y, x, n, a);
    KLAUNCHED("k_axpy");
}

void cu_f32_to_bf16(const float *s, uint16_t *d, size_t n)
{
    if (!n)
        return;
    wrote(d, n * sizeof(uint16_t));
    k_f32_to_bf16<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(s, d, n);
    KLAUNCHED("k_f32_to_bf16");
}
void cu_bf16_to_f32(const uint16_t *s, float *d, size_t n)
{
    if (!n)
        return;
    wrote(d, n * sizeof(float));
    k_bf16_to_f32<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(s, d, n);
    KLAUNCHED("k_bf16_to_f32");
}
void cu_f32_to_f16(const float *s, uint16_t *d, size_t n)
{
    if (!n)
        return;
    wrote(d, n * sizeof(uint16_t));
    k_f32_to_f16<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(s, d, n);
    KLAUNCHED("k_f32_to_f16");
}
void cu_f16_to_f32(const uint16_t *s, float *d, size_t n)
{
    if (!n)
        return;
    wrote(d, n * sizeof(float));
    k_f16_to_f32<<<grid_for(n), kThreads, 0, g_cuda.stream>>>(s, d, n);
    KLAUNCHED("k_f16_to_f32");
}

void cu_unscale_check(float *x, size_t n, float inv_scale, int32_t *found_inf)
{
    if (!n)
        return;
    wrote(x, n * sizeof(float));
    wrote(found_inf, sizeof(int32_t));
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
    cu_check,
    cu_gemm,
    cu_bias_act_fwd,
    cu_bias_act_bwd,
    cu_softmax_xent,
    cu_argmax_correct,
    cu_sgd,
    cu_adam,
    cu_adagrad,
    cu_scale,
    cu_adamw,
    cu_lamb_moments,
    cu_lamb_apply,
    cu_lars,
    cu_sumsq,
    cu_axpy,
    cu_f32_to_bf16,
    cu_bf16_to_f32,
    cu_f32_to_f16,
    cu_f16_to_f32,
    cu_unscale_check,
    cu_host_alloc,
    cu_host_free,
    &rm_tf_cuda,
};

bool env_off(const char *name)
{
    const char *v = getenv(name);
    return v && (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off"));
}

bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on"));
}

/* Releases whatever a failed initialisation made, so the next call starts clean. */
void ctx_release(cuda_ctx *c)
{
    if (c->blas)
        (void)cublasDestroy(c->blas);
    if (c->blas_ws)
        RM_CUDA_WARN(cudaFree(c->blas_ws));
    if (c->partials)
        RM_CUDA_WARN(cudaFree(c->partials));
    if (c->stream)
        RM_CUDA_WARN(cudaStreamDestroy(c->stream));
    c->blas = nullptr;
    c->blas_ws = nullptr;
    c->partials = nullptr;
    c->stream = nullptr;
}

/* The kernel-image probe: can this binary launch on the current device at all? */
int probe_kernel_image(int device, rm_err *err)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, k_scale);
    if (e == cudaSuccess)
        return RM_OK;
    (void)cudaGetLastError();
    cudaDeviceProp prop;
    int major = 0, minor = 0;
    char name[256] = "?";
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
        major = prop.major;
        minor = prop.minor;
        snprintf(name, sizeof name, "%s", prop.name);
    } else {
        (void)cudaGetLastError();
    }
    return rm_errf(err, RM_EUNSUPPORTED,
                   "no CUDA kernel image for device %d (%s, sm_%d%d) in this binary (built for "
                   "compute capabilities %s): rebuild with NVCC_GENCODE including "
                   "-gencode=arch=compute_%d%d,code=sm_%d%d (%s)",
                   device, name, major, minor, RM_BUILT_ARCHS, major, minor, major, minor,
                   cudaGetErrorString(e));
}

int ctx_init(rm_err *err)
{
    int rc = RM_OK;
    char why[256];
    cuda_ctx *c = &g_cuda;
    if (!rm_cuda_available(why, sizeof why))
        return rm_errf(err, RM_EUNSUPPORTED, "%s", why);
    RM_CUDA_GOTO_ERR(cudaGetDevice(&c->device), rc, fail, err);
    RM_CHECK_GOTO(probe_kernel_image(c->device, err), rc, fail);
    RM_CUDA_GOTO_ERR(cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount, c->device), rc,
                     fail, err);
    RM_CUDA_GOTO_ERR(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), rc, fail, err);
    RM_CUBLAS_GOTO_ERR(cublasCreate(&c->blas), rc, fail, err);
    RM_CUBLAS_GOTO_ERR(cublasSetStream(c->blas, c->stream), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaMalloc(&c->blas_ws, kBlasWorkspace), rc, fail, err);
    /* a fixed workspace: cuBLAS then never allocates while a step runs */
    RM_CUBLAS_GOTO_ERR(cublasSetWorkspace(c->blas, c->blas_ws, kBlasWorkspace), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaMalloc((void **)&c->partials, kMaxPartials * sizeof(float)), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaMemsetAsync(c->partials, 0, kMaxPartials * sizeof(float), c->stream), rc,
                     fail, err);
    c->tf32 = !env_off("NVIDIA_TF32_OVERRIDE") && !env_off("RM_CUDA_TF32");
    c->sync_check = env_on("RINGMASTER_CUDA_SYNC_CHECK");
    rm_log_write(RM_LOG_INFO, __FILE__, __LINE__,
                 "CUDA kernels ready device=%d sms=%d tf32=%d sync_check=%d archs=%s", c->device,
                 c->sms, (int)c->tf32, (int)c->sync_check, RM_BUILT_ARCHS);
    return RM_OK;
fail:
    ctx_release(c);
    return rc;
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
    if (__atomic_load_n(&g_cuda.ok, __ATOMIC_ACQUIRE))
        return &k_table;
    pthread_mutex_lock(&g_cuda.init_mu);
    if (!g_cuda.ok) {
        rm_err e = {};
        if (ctx_init(&e) == RM_OK) {
            g_cuda.init_why[0] = '\0';
            __atomic_store_n(&g_cuda.ok, 1, __ATOMIC_RELEASE);
        } else {
            if (strcmp(g_cuda.init_why, e.msg) != 0)   /* once per distinct reason, not per retry */
                rm_log_write(RM_LOG_WARN, __FILE__, __LINE__, "CUDA kernels unavailable why=\"%s\"",
                             e.msg);
            snprintf(g_cuda.init_why, sizeof g_cuda.init_why, "%s", e.msg);
        }
    }
    pthread_mutex_unlock(&g_cuda.init_mu);
    return g_cuda.ok ? &k_table : nullptr;
}

void rm_cuda_init_error(char *why, size_t cap)
{
    if (!why || !cap)
        return;
    pthread_mutex_lock(&g_cuda.init_mu);
    snprintf(why, cap, "%s", g_cuda.init_why);
    pthread_mutex_unlock(&g_cuda.init_mu);
}

bool rm_cuda_sync_check_enabled(void)
{
    return g_cuda.ok && g_cuda.sync_check;
}

int rm_cuda_set_precision(rm_precision p, rm_err *err)
{
    if (p != RM_PREC_FP32 && p != RM_PREC_BF16 && p != RM_PREC_FP16)
        return rm_errf(err, RM_EINVAL, "unknown precision %d", (int)p);
    if (!rm_kernels_cuda()) {
        char why[256];
        rm_cuda_init_error(why, sizeof why);
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
    wrote_all();
    return RM_OK;
}

int rm_cuda_device(void)
{
    return g_cuda.ok ? g_cuda.device : -1;
}

void *rm_cuda_compute_stream(void)
{
    return g_cuda.ok ? (void *)g_cuda.stream : nullptr;
}

void rm_cuda_note_written(const void *p, size_t bytes)
{
    if (__atomic_load_n(&g_cuda.ok, __ATOMIC_ACQUIRE))
        wrote(p, bytes);
}

int rm_cuda_check(rm_err *err)
{
    if (!g_cuda.ok)
        return RM_OK;
    return cu_check(err);
}

/* kernels/cuda/tf_cuda.h: the hooks the transformer's kernels (another translation unit) use. */
void rm_cuda_launched(const char *file, int line, const char *name)
{
    launched(file, line, name);
}

void rm_cuda_note_error(const char *file, int line, int code, const char *what, const char *msg)
{
    note_error(file, line, code, what, msg);
}

int rm_cuda_sms(void)
{
    return g_cuda.sms;
}

int rm_cuda_precision(void)
{
    return (int)g_cuda.prec;
}

void *rm_cuda_scratch(int slot, size_t bytes)
{
    static void *buf[RM_CUDA_SCRATCH_SLOTS];
    static size_t cap[RM_CUDA_SCRATCH_SLOTS];
    if (slot < 0 || slot >= RM_CUDA_SCRATCH_SLOTS)
        return nullptr;
    char what[64];
    snprintf(what, sizeof what, "cudaMallocAsync(transformer scratch %d)", slot);
    return grow_scratch(&buf[slot], &cap[slot], bytes ? bytes : 1, what) ? buf[slot] : nullptr;
}

}  // extern "C"
