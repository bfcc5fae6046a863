/* sgemm_peak.c — the physical limit of the GPT step on this CPU (bench/gpt/run.sh, notes in
 * bench/notes/gpt.md): SGEMM GFLOP/s at the transformer's real shapes, for one BLAS library per
 * build, on 1 or 2 threads, and the core's FMA peak.
 *
 * One build per library (their cblas_sgemm symbols clash):
 *   -DLIB_OPENBLAS  cblas_sgemm of OpenBLAS (libopenblas-dev), threads: openblas_set_num_threads
 *   -DLIB_BLIS      cblas_sgemm of BLIS (libblis-dev, the OpenMP flavour), threads: bli_thread_set_num_threads
 *   -DLIB_DNNL      dnnl_sgemm of oneDNN (libdnnl-dev, OpenMP runtime), threads: omp_set_num_threads
 * Usage: sgemm_peak gemm THREADS SECONDS   -> one JSON line per (model, op)
 *        sgemm_peak fma THREADS SECONDS    -> the register-blocked FMA peak (any build; needs -mavx2 -mfma)
 *
 * The ops are every matrix product of one training step of a GPT-2 block stack with B sequences of
 * T tokens (rows R = B*T), weights stored [in, out] row-major (GPT-2's Conv1D layout, the layout of
 * the worker's MLP and of docs/models-and-data.md "Exported models"): for each linear layer
 * in -> out the forward Y = X W (NN, R x out x in), the input gradient dX = dY W^T (NT, R x in x out)
 * and the weight gradient dW = X^T dY (TN, in x out x R). The head is tied to the token embedding
 * stored [vocab, embed]: forward NT, input gradient NN, weight gradient TN. Attention's batched
 * products per (sequence, head): scores Q K^T (NT, T x T x hs), values P V (NN, T x hs x T), and their
 * gradients (two each: the same shapes in other orders), run as B*H separate calls as a plain C
 * worker would. `count` is how many times one step runs the op (layers, or layers*B*H).
 * Best of 3 trials of SECONDS/3 each: a ceiling is what the core can do; a busy machine only
 * pushes trials below it. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(LIB_OPENBLAS)
#include <cblas.h>
void openblas_set_num_threads(int);
#define LIBNAME "openblas"
#elif defined(LIB_BLIS)
#include <blis.h>
#include <omp.h>
#define LIBNAME "blis"
#elif defined(LIB_DNNL)
#include <dnnl.h>
#include <omp.h>
#define LIBNAME "onednn"
#else
#define LIBNAME "none"
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- FMA peak: 12 independent 8-wide accumulator chains per thread (enough to cover the FMA
 * latency on two pipes), 2 flops per lane per FMA. */
typedef struct {
    long iters;
    float seed, out; /* distinct runtime starts, so the compiler cannot merge the chains */
} fma_arg;

static void *fma_loop(void *p)
{
    fma_arg *a = p;
    __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#define X(i) _mm256_set1_ps(a->seed + (float)(i))
    __m256 x0 = X(0), x1 = X(1), x2 = X(2), x3 = X(3), x4 = X(4), x5 = X(5);
    __m256 x6 = X(6), x7 = X(7), x8 = X(8), x9 = X(9), x10 = X(10), x11 = X(11);
#undef X
    for (long i = 0; i < a->iters; i++) {
        x0 = _mm256_fmadd_ps(x0, m, c);
        x1 = _mm256_fmadd_ps(x1, m, c);
        x2 = _mm256_fmadd_ps(x2, m, c);
        x3 = _mm256_fmadd_ps(x3, m, c);
        x4 = _mm256_fmadd_ps(x4, m, c);
        x5 = _mm256_fmadd_ps(x5, m, c);
        x6 = _mm256_fmadd_ps(x6, m, c);
        x7 = _mm256_fmadd_ps(x7, m, c);
        x8 = _mm256_fmadd_ps(x8, m, c);
        x9 = _mm256_fmadd_ps(x9, m, c);
        x10 = _mm256_fmadd_ps(x10, m, c);
        x11 = _mm256_fmadd_ps(x11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                             _mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(x8, x9), _mm256_add_ps(x10, x11)));
    float f[8];
    _mm256_storeu_ps(f, s);
    a->out = f[0];
    return NULL;
}

static int fma_peak(int threads, double secs)
{
    long iters = 1 << 20;
    double best = 0;
    float sink = 0;
    for (int trial = 0; trial < 3 + 1; trial++) { /* the first sizes iters to ~secs/3 */
        pthread_t th[64];
        fma_arg args[64];
        double t0 = now();
        for (int i = 0; i < threads; i++) {
            args[i].iters = iters;
            args[i].seed = 1.0f + 0.01f * (float)(i + trial);
            pthread_create(&th[i], NULL, fma_loop, &args[i]);
        }
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            sink += args[i].out;
        }
        double t = now() - t0;
        double g = (double)iters * 12 * 8 * 2 * threads / t / 1e9;
        if (trial == 0)
            iters = (long)(iters * (secs / 3) / t) + 1;
        else if (g > best)
            best = g;
    }
    printf("{\"kind\": \"fma_peak\", \"threads\": %d, \"gflops\": %.1f, \"sink\": %g}\n", threads, best,
           (double)(sink * 0));
    return 0;
}

/* ---- GEMMs at the model's shapes */
typedef struct {
    const char *model, *op, *form;
    int m, n, k;
    int ta, tb;
    long count; /* times one training step runs it */
} gemm_op;

static void sgemm(int ta, int tb, int m, int n, int k, const float *A, const float *B, float *C)
{
    int lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
#if defined(LIB_OPENBLAS) || defined(LIB_BLIS)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                A, lda, B, ldb, 0.0f, C, ldc);
#elif defined(LIB_DNNL)
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
#else
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)A, (void)B, (void)C, (void)lda, (void)ldb, (void)ldc;
#endif
}

static float *buf(size_t n)
{
    float *p = aligned_alloc(64, ((n * sizeof(float)) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

static int add_model(gemm_op *o, int n, const char *model, int L, int H, int C, int T, int B, int V)
{
    int R = B * T, hs = C / H;
    struct {
        const char *name;
        int in, out;
    } lin[] = {{"qkv", C, 3 * C}, {"attn_proj", C, C}, {"fc", C, 4 * C}, {"fc_proj", 4 * C, C}};
    for (int i = 0; i < 4; i++) {
        o[n++] = (gemm_op){model, lin[i].name, "fwd NN", R, lin[i].out, lin[i].in, 0, 0, L};
        o[n++] = (gemm_op){model, lin[i].name, "dX NT", R, lin[i].in, lin[i].out, 0, 1, L};
        o[n++] = (gemm_op){model, lin[i].name, "dW TN", lin[i].in, lin[i].out, R, 1, 0, L};
    }
    o[n++] = (gemm_op){model, "head", "fwd NT", R, V, C, 0, 1, 1};
    o[n++] = (gemm_op){model, "head", "dX NN", R, C, V, 0, 0, 1};
    o[n++] = (gemm_op){model, "head", "dW TN", V, C, R, 1, 0, 1};
    long bh = (long)L * B * H;
    o[n++] = (gemm_op){model, "attn_qk", "fwd NT", T, T, hs, 0, 1, bh}; /* S = Q K^T */
    o[n++] = (gemm_op){model, "attn_qk", "dQ NN", T, hs, T, 0, 0, bh};  /* dQ = dS K */
    o[n++] = (gemm_op){model, "attn_qk", "dK TN", T, hs, T, 1, 0, bh};  /* dK = dS^T Q */
    o[n++] = (gemm_op){model, "attn_av", "fwd NN", T, hs, T, 0, 0, bh}; /* Y = P V */
    o[n++] = (gemm_op){model, "attn_av", "dP NT", T, T, hs, 0, 1, bh};  /* dP = dY V^T */
    o[n++] = (gemm_op){model, "attn_av", "dV TN", T, hs, T, 1, 0, bh};  /* dV = P^T dY */
    return n;
}

static void set_threads(int t)
{
#if defined(LIB_OPENBLAS)
    openblas_set_num_threads(t);
#elif defined(LIB_BLIS)
    omp_set_num_threads(t);
    bli_thread_set_num_threads(t);
#elif defined(LIB_DNNL)
    omp_set_num_threads(t);
#else
    (void)t;
#endif
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s gemm|fma THREADS SECONDS [MODEL...]\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]);
    double secs = atof(argv[3]);
    if (!strcmp(argv[1], "fma"))
        return fma_peak(threads, secs);
    set_threads(threads);
    gemm_op ops[128];
    int n = 0;
    /* deploy/examples/shakespeare-gpt.yaml: 4 layers, 4 heads, 128 wide, context 64, batch 12 */
    n = add_model(ops, n, "baby", 4, 4, 128, 64, 12, 256);
    /* nanoGPT's shakespeare_char shapes, batch 12 (bench/gpt/torch_gpt.py --model small) */
    n = add_model(ops, n, "small", 6, 6, 384, 256, 12, 256);
    size_t maxa = 0, maxb = 0, maxc = 0;
    for (int i = 0; i < n; i++) {
        size_t a = (size_t)ops[i].m * ops[i].k, b = (size_t)ops[i].k * ops[i].n,
               c = (size_t)ops[i].m * ops[i].n;
        maxa = a > maxa ? a : maxa, maxb = b > maxb ? b : maxb, maxc = c > maxc ? c : maxc;
    }
    float *A = buf(maxa), *B = buf(maxb), *C = buf(maxc);
    for (int i = 0; i < n; i++) {
        gemm_op *o = &ops[i];
        if (argc > 4) { /* a model filter */
            int keep = 0;
            for (int j = 4; j < argc; j++)
                keep |= !strcmp(argv[j], o->model);
            if (!keep)
                continue;
        }
        double flop = 2.0 * o->m * o->n * o->k, best = 0;
        long reps = 1;
        for (int trial = 0; trial < 4; trial++) { /* trial 0 warms up and sizes reps */
            double t0 = now(), t;
            for (long r = 0; r < reps; r++)
                sgemm(o->ta, o->tb, o->m, o->n, o->k, A, B, C);
            t = now() - t0;
            if (trial == 0)
                reps = (long)(secs / 3 / (t > 1e-7 ? t : 1e-7)) + 1;
            else if (flop * reps / t / 1e9 > best)
                best = flop * reps / t / 1e9;
        }
        printf("{\"kind\": \"gemm\", \"lib\": \"%s\", \"threads\": %d, \"model\": \"%s\", \"op\": \"%s\", "
               "\"form\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"count\": %ld, \"gflops\": %.2f, "
               "\"us_per_call\": %.3f}\n",
               LIBNAME, threads, o->model, o->op, o->form, o->m, o->n, o->k, o->count, best,
               flop / best / 1e3);
        fflush(stdout);
    }
    return 0;
}
