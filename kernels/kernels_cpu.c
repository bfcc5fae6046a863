/* kernels_cpu.c — the CPU kernels table: OpenBLAS cblas_sgemm for the matrix products and plain C
 * loops (written so GCC vectorises them at -O2 -ftree-vectorize / -O3) for everything else.
 *
 * Design: one BLAS thread per process; a GEMM large enough to pay for it is split by rows (or
 * columns) over the kernels' pool (kernels/pool.h), whose width is the CPUs the worker was given
 * (1 unless rm_kernels_set_threads says otherwise: data parallelism runs one worker per core, and
 * a threaded BLAS inside every worker would oversubscribe them). Splitting never changes a
 * result: each element of C is the same dot product whichever part computes it.
 * openblas_set_num_threads(1) is applied once, the first time the table is requested. Bias and ReLU are fused in one pass over Y
 * (forward) and dY (backward, together with the bias-gradient column sums) to touch activations
 * once. Nothing here allocates except alloc() itself. */
/* Element-wise loops are memory-bound; let GCC vectorise them fully even at -O2. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "kernels/kernels.h"
#include "kernels/elem.h"
#include "kernels/pool.h"
#include "kernels/transformer.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* OpenBLAS' thread control; declared here because cblas.h from the reference (netlib) CBLAS
 * alternative does not declare it. */
void openblas_set_num_threads(int num_threads);

_Static_assert(RM_ACT_NONE == RM_ELEM_ACT_NONE && RM_ACT_RELU == RM_ELEM_ACT_RELU,
               "kernels/elem.h activation codes follow rm_act");

static void *cpu_alloc(size_t bytes)
{
    void *p = NULL;
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0)
        sz = 64;
    if (posix_memalign(&p, 64, sz) != 0)
        return NULL;
    /* Zero it without touching it: the whole pages inside are given back (private anonymous
     * memory reads as zeros after MADV_DONTNEED and is resident only once written), only the
     * partial pages at the ends are cleared. A strategy that uses part of a large buffer (a
     * pipeline stage's layers of the flat parameter vector) then holds only the pages it writes. */
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, e = a + sz;
    uintptr_t a1 = (a + pg - 1) & ~(pg - 1), e0 = e & ~(pg - 1);
    if (e0 > a1 && madvise((void *)a1, e0 - a1, MADV_DONTNEED) == 0) {
        memset(p, 0, a1 - a);
        memset((void *)e0, 0, e - e0);
    } else {
        memset(p, 0, sz);
    }
    return p;
}

static void cpu_free(void *p)
{
    free(p);
}
static int cpu_memset0(void *p, size_t bytes)
{
    if (bytes)
        memset(p, 0, bytes);
    return RM_OK;
}
static int cpu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return RM_OK;
}
static int cpu_sync(void)
{
    return RM_OK;
}
/* Plain C cannot fail after alloc() succeeded. */
static int cpu_check(rm_err *err)
{
    (void)err;
    return RM_OK;
}

/* Multiply-adds below which a GEMM runs on the calling thread alone (waking the pool costs a few
 * microseconds). */
#define GEMM_SPLIT_MIN (1 << 17)

typedef struct {
    bool ta, tb;
    int m, n, k;
    float alpha;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    float beta;
    float *c;
    int ldc;
} gemm_ctx;

/* Part p of a split GEMM: rows of C (op(A)'s rows: A's rows, or its columns when transposed), or
 * columns of C (op(B)'s columns) when C is wider than tall. Blocks of 16 keep the BLAS kernels'
 * register tiles whole. */
static void gemm_part(void *vc, int part, int nparts)
{
    const gemm_ctx *g = vc;
    size_t lo, hi;
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
    if (g->m >= g->n) {
        rm_pool_range((size_t)g->m, part, nparts, 16, &lo, &hi);
        if (hi <= lo)
            return;
        const float *a = g->ta ? g->a + lo : g->a + lo * (size_t)g->lda;
        cblas_sgemm(CblasRowMajor, ta, tb, (int)(hi - lo), g->n, g->k, g->alpha, a, g->lda, g->b, g->ldb,
                    g->beta, g->c + lo * (size_t)g->ldc, g->ldc);
    } else {
        rm_pool_range((size_t)g->n, part, nparts, 16, &lo, &hi);
        if (hi <= lo)
            return;
        const float *b = g->tb ? g->b + lo * (size_t)g->ldb : g->b + lo;
        cblas_sgemm(CblasRowMajor, ta, tb, g->m, (int)(hi - lo), g->k, g->alpha, g->a, g->lda, b, g->ldb,
                    g->beta, g->c + lo, g->ldc);
    }
}

static void cpu_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    if (rm_pool_threads() > 1 && (double)m * n * k >= GEMM_SPLIT_MIN) {
        gemm_ctx g = {ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
        rm_pool_run(gemm_part, &g);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                a, lda, b, ldb, beta, c, ldc);
}

void rm_kernels_set_threads(const rm_kernels *k, int n)
{
    if (k && k->tf && k->tf->set_threads)
        k->tf->set_threads(n);
}

static void cpu_bias_act_fwd(float *restrict y, const float *restrict b, int rows, int cols, rm_act act)
{
    for (int r = 0; r < rows; r++) {
        float *restrict yr = y + (size_t)r * cols;
        if (act == RM_ACT_RELU) {
            for (int c = 0; c < cols; c++)
                yr[c] = rm_e_bias_act(yr[c], b[c], RM_ELEM_ACT_RELU);
        } else {
            for (int c = 0; c < cols; c++)
                yr[c] = rm_e_bias_act(yr[c], b[c], RM_ELEM_ACT_NONE);
        }
    }
}

static void cpu_bias_act_bwd(float *restrict dy, const float *restrict y, float *restrict db, int rows,
                             int cols, rm_act act)
{
    memset(db, 0, (size_t)cols * sizeof(float));
    for (int r = 0; r < rows; r++) {
        float *restrict dr = dy + (size_t)r * cols;
        const float *restrict yr = y + (size_t)r * cols;
        if (act == RM_ACT_RELU) {
            for (int c = 0; c < cols; c++) {
                float g = rm_e_act_grad(dr[c], yr[c], RM_ELEM_ACT_RELU);
                dr[c] = g;
                db[c] += g;
            }
        } else {
            for (int c = 0; c < cols; c++)
                db[c] += dr[c];
        }
    }
}

static void cpu_softmax_xent(const float *logits, const int32_t *labels, int rows, int classes,
                             float inv_batch, float *dlogits, float *loss_sum)
{
    double loss = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * classes;
        float *d = dlogits + (size_t)r * classes;
        float mx = z[0];
        for (int c = 1; c < classes; c++)
            mx = z[c] > mx ? z[c] : mx;
        double sum = 0.0;
        for (int c = 0; c < classes; c++)
            sum += exp((double)(z[c] - mx));
        int lab = labels[r];
        double logsum = log(sum);
        loss += logsum - (double)(z[lab] - mx);
        for (int c = 0; c < classes; c++) {
            double p = exp((double)(z[c] - mx) - logsum);
            d[c] = (float)((p - (c == lab ? 1.0 : 0.0)) * inv_batch);
        }
    }
    *loss_sum = (float)loss;
}

static void cpu_argmax_correct(const float *logits, const int32_t *labels, int rows, int classes,
                               int32_t *correct)
{
    int32_t n = 0;
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * classes;
        int best = 0;
        for (int c = 1; c < classes; c++)
            if (z[c] > z[best])
                best = c;
        n += best == labels[r];
    }
    *correct = n;
}

static void cpu_sgd(float *restrict w, const float *restrict g, float *restrict v, size_t n, float lr,
                    float momentum, float wd)
{
    for (size_t i = 0; i < n; i++)
        rm_e_sgd(&w[i], &v[i], g[i], lr, momentum, wd);
}

static void cpu_adam(float *restrict w, const float *restrict g, float *restrict m, float *restrict v,
                     size_t n, float lr, float b1, float b2, float eps, float wd, float bc1, float bc2)
{
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(bc1, bc2, &inv_bc1, &inv_sqrt_bc2);
    for (size_t i = 0; i < n; i++)
        rm_e_adam(&w[i], &m[i], &v[i], g[i], lr, b1, b2, eps, wd, inv_bc1, inv_sqrt_bc2);
}

static void cpu_adagrad(float *restrict w, const float *restrict g, float *restrict s, size_t n, float lr,
                        float eps, float wd)
{
    for (size_t i = 0; i < n; i++)
        rm_e_adagrad(&w[i], &s[i], g[i], lr, eps, wd);
}

static void cpu_scale(float *restrict x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= a;
}

static void cpu_adamw(float *restrict w, const float *restrict g, float *restrict m, float *restrict v,
                      size_t n, float lr, float b1, float b2, float eps, float wd, float bc1, float bc2)
{
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(bc1, bc2, &inv_bc1, &inv_sqrt_bc2);
    for (size_t i = 0; i < n; i++)
        rm_e_adamw(&w[i], &m[i], &v[i], g[i], lr, b1, b2, eps, wd, inv_bc1, inv_sqrt_bc2);
}

/* Sums of squares in double, added to the float accumulators once per call. */
static void cpu_lamb_moments(const float *restrict w, const float *restrict g, float *restrict m,
                             float *restrict v, size_t n, float b1, float b2, float eps, float wd, float bc1,
                             float bc2, float *sums)
{
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(bc1, bc2, &inv_bc1, &inv_sqrt_bc2);
    double ww = 0, rr = 0;
    for (size_t i = 0; i < n; i++) {
        float r = rm_e_lamb_moments(w[i], &m[i], &v[i], g[i], b1, b2, eps, wd, inv_bc1, inv_sqrt_bc2);
        ww += (double)w[i] * w[i];
        rr += (double)r * r;
    }
    sums[0] += (float)ww;
    sums[1] += (float)rr;
}

static void cpu_lamb_apply(float *restrict w, const float *restrict m, const float *restrict v, size_t n,
                           float lr, float eps, float wd, float bc1, float bc2)
{
    float inv_bc1, inv_sqrt_bc2;
    rm_e_adam_corrections(bc1, bc2, &inv_bc1, &inv_sqrt_bc2);
    for (size_t i = 0; i < n; i++)
        rm_e_lamb_apply(&w[i], m[i], v[i], lr, eps, wd, inv_bc1, inv_sqrt_bc2);
}

static void cpu_lars(float *restrict w, const float *restrict g, float *restrict v, size_t n, float lr,
                     float momentum, float wd)
{
    for (size_t i = 0; i < n; i++)
        rm_e_lars(&w[i], &v[i], g[i], lr, momentum, wd);
}

static void cpu_sumsq(const float *restrict x, size_t n, float *acc)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    *acc += (float)s;
}

static void cpu_axpy(float *restrict y, const float *restrict x, size_t n, float a)
{
    for (size_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void cpu_unscale_check_finite(float *restrict x, size_t n, float inv_scale, int32_t *found_inf)
{
    int bad = 0;
    if (inv_scale == 1.0f) { /* check only (fp32/bf16): a read pass, no writes */
        for (size_t i = 0; i < n; i++)
            bad |= !isfinite(x[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            bad |= rm_e_unscale_check(&x[i], inv_scale);
    }
    if (bad)
        *found_inf = 1;
}

extern const rm_tf_kernels rm_tf_cpu; /* kernels/transformer_cpu.c */

static const rm_kernels cpu_table = {
    .name = "cpu",
    .host_memory = true,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .h2d = cpu_copy,
    .d2h = cpu_copy,
    .d2d = cpu_copy,
    .sync = cpu_sync,
    .check = cpu_check,
    .gemm = cpu_gemm,
    .bias_act_fwd = cpu_bias_act_fwd,
    .bias_act_bwd = cpu_bias_act_bwd,
    .softmax_xent_fwd_bwd = cpu_softmax_xent,
    .argmax_correct = cpu_argmax_correct,
    .sgd_momentum_update = cpu_sgd,
    .adam_update = cpu_adam,
    .adagrad_update = cpu_adagrad,
    .scale = cpu_scale,
    .adamw_update = cpu_adamw,
    .lamb_moments = cpu_lamb_moments,
    .lamb_apply = cpu_lamb_apply,
    .lars_update = cpu_lars,
    .sumsq = cpu_sumsq,
    .axpy = cpu_axpy,
    .cast_f32_to_bf16 = NULL,
    .cast_bf16_to_f32 = NULL,
    .cast_f32_to_f16 = NULL,
    .cast_f16_to_f32 = NULL,
    .unscale_check_finite = cpu_unscale_check_finite,
    .tf = &rm_tf_cpu,
};

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_one_thread(void)
{
    openblas_set_num_threads(1);
}

const rm_kernels *rm_kernels_cpu(void)
{
    pthread_once(&blas_once, blas_one_thread);
    return &cpu_table;
}
