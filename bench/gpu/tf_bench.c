/* tf_bench.c — where a GPT training step's time goes on the GPU: every call one step of the
 * transformer makes through the CUDA kernels table (worker/model/gpt.c's order and shapes), each
 * timed alone with CUDA events on the table's stream, then summed as a step (per-layer calls x
 * layers + the head, the cross-entropy, the embeddings and AdamW over every parameter).
 *
 * Shapes default to GPT-2 124M at batch 16 x context 1024 (bench/gpu/device.sh's run). Precision
 * bf16: the gemms round their operands to bf16 (the table's cast cache) with fp32 accumulation.
 * Every timed repetition starts with check(), which drops the cached 16-bit operand copies as a
 * step boundary does, so each gemm pays its casts as the first use in a step would (the weights'
 * copies are in fact reused within a step: the sum slightly over-counts them). Inputs are random
 * (never zeros); nothing is compared here (tests/gpu/gpu_tests.c checks the results).
 * Usage: tf_bench [--batch 16] [--context 1024] [--embed 768] [--heads 12] [--layers 12]
 *                 [--vocab 50257] [--reps 10]
 * Output: "RESULT kind=tf-op op=... ms=... [tflops=...]" per call, then "RESULT kind=tf-step ...". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/rm_cuda.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "kernels/transformer.h"
#include "worker/gpu.h"

static const rm_kernels *K;
static const rm_tf_kernels *TF;
static cudaEvent_t e0, e1;
static int reps = 10;
static double step_ms; /* the step's sum */

/* Floats of random values in [-scale, scale) on the device. */
static float *drand(size_t n, float scale)
{
    float *d = K->alloc(n * sizeof(float));
    size_t chunk = (size_t)1 << 24;
    float *h = malloc(chunk * sizeof(float));
    if (!d || !h) {
        fprintf(stderr, "out of memory for %zu floats\n", n);
        exit(1);
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < chunk; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = ((float)(s >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
    }
    for (size_t off = 0; off < n; off += chunk)
        K->h2d(d + off, h, (n - off < chunk ? n - off : chunk) * sizeof(float));
    free(h);
    return d;
}

#define TIME(name, count, flops, call)                                                                    \
    do {                                                                                                  \
        rm_err te = {0};                                                                                  \
        float best = 1e30f;                                                                               \
        cudaStream_t st = (cudaStream_t)rm_cuda_compute_stream();                                         \
        for (int r_ = 0; r_ < reps + 1; r_++) {                                                           \
            if (K->check(&te) != RM_OK) {                                                                 \
                fprintf(stderr, "FAIL %s: %s\n", name, te.msg);                                           \
                exit(1);                                                                                  \
            }                                                                                             \
            cudaEventRecord(e0, st);                                                                      \
            call;                                                                                         \
            cudaEventRecord(e1, st);                                                                      \
            cudaEventSynchronize(e1);                                                                     \
            float ms_ = 0;                                                                                \
            cudaEventElapsedTime(&ms_, e0, e1);                                                           \
            if (r_ > 0 && ms_ < best) /* the first is a warm-up */                                        \
                best = ms_;                                                                               \
        }                                                                                                 \
        if (K->check(&te) != RM_OK) {                                                                     \
            fprintf(stderr, "FAIL %s: %s\n", name, te.msg);                                               \
            exit(1);                                                                                      \
        }                                                                                                 \
        step_ms += best * (count);                                                                        \
        if ((flops) > 0)                                                                                  \
            printf("RESULT kind=tf-op op=%s ms=%.3f per_step=%d tflops=%.1f\n", name, best, (int)(count), \
                   (double)(flops) / (best * 1e-3) / 1e12);                                               \
        else                                                                                              \
            printf("RESULT kind=tf-op op=%s ms=%.3f per_step=%d\n", name, best, (int)(count));            \
        fflush(stdout);                                                                                   \
    } while (0)

int main(int argc, char **argv)
{
    int B = 16, T = 1024, C = 768, NH = 12, L = 12, V = 50257;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--batch"))
            B = v;
        else if (!strcmp(argv[i], "--context"))
            T = v;
        else if (!strcmp(argv[i], "--embed"))
            C = v;
        else if (!strcmp(argv[i], "--heads"))
            NH = v;
        else if (!strcmp(argv[i], "--layers"))
            L = v;
        else if (!strcmp(argv[i], "--vocab"))
            V = v;
        else if (!strcmp(argv[i], "--reps"))
            reps = v;
        else {
            fprintf(stderr, "unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    char why[256];
    if (!rm_gpu_available(why, sizeof why)) {
        printf("SKIP: no GPU present (%s)\n", why);
        return 0;
    }
    rm_err e = {0};
    K = rm_kernels_cuda();
    if (!K || !K->tf || rm_cuda_set_precision(RM_PREC_BF16, &e) != RM_OK) {
        fprintf(stderr, "CUDA table: %s\n", e.msg);
        return 1;
    }
    TF = K->tf;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    size_t N = (size_t)B * T, c = (size_t)C;
    float *x = drand(N * c, 1), *ln = drand(N * c, 1), *qkv = drand(N * 3 * c, 1), *att = drand(N * c, 1);
    float *res = drand(N * c, 1), *h = drand(N * 4 * c, 1), *g = drand(N * 4 * c, 1),
          *dy = drand(N * 4 * c, 1);
    float *dqkv = drand(N * 3 * c, 1), *mean = drand(N, 1), *rstd = drand(N, 1), *lse = drand(N * NH, 1);
    float *w3 = drand(c * 3 * c, 0.02f), *w1 = drand(c * c, 0.02f), *w4 = drand(c * 4 * c, 0.02f);
    float *dw = drand(c * 4 * c, 1), *bias = drand(4 * c, 0.1f), *lnw = drand(c, 1);
    float *wte = drand((size_t)V * c, 0.02f), *wpe = drand((size_t)T * c, 0.02f),
          *dwte = drand((size_t)V * c, 1);
    float *logits = drand(N * (size_t)V, 2), *loss = drand(1, 1),
          *scr = K->alloc(TF->attention_scratch(T) * 4);
    int32_t *tok = K->alloc(N * 4);
    {
        int32_t *ht = malloc(N * 4);
        for (size_t i = 0; i < N; i++)
            ht[i] = (int32_t)((i * 2654435761u) % (unsigned)V);
        K->h2d(tok, ht, N * 4);
        free(ht);
    }
    /* the attention forward once, so the backward reads a real lse */
    TF->attention_fwd(att, lse, qkv, B, T, C, NH, scr);
    double fN = (double)N, fc = (double)C;
    double attn_flops = 4.0 * B * NH * ((double)T * (T + 1) / 2) * (C / NH); /* QK^T + PV, causal half */
    printf("# tf_bench: B=%d T=%d C=%d NH=%d L=%d V=%d bf16, best of %d after one warm-up\n", B, T, C, NH, L,
           V, reps);
    /* per layer, forward */
    TIME("ln1_fwd", L, 0, TF->layernorm_fwd(ln, mean, rstd, x, lnw, lnw, (int)N, C));
    TIME("gemm_qkv_fwd", L, 2 * fN * fc * 3 * fc,
         K->gemm(false, false, (int)N, 3 * C, C, 1, ln, C, w3, 3 * C, 0, qkv, 3 * C));
    TIME("bias_qkv", L, 0, K->bias_act_fwd(qkv, bias, (int)N, 3 * C, RM_ACT_NONE));
    TIME("attention_fwd", L, attn_flops, TF->attention_fwd(att, lse, qkv, B, T, C, NH, scr));
    TIME("gemm_proj_fwd", L, 2 * fN * fc * fc,
         K->gemm(false, false, (int)N, C, C, 1, att, C, w1, C, 0, res, C));
    TIME("residual_ln_fwd", L, 0,
         TF->residual_layernorm_fwd(res, x, bias, ln, mean, rstd, lnw, lnw, (int)N, C));
    TIME("gemm_fc_fwd", L, 2 * fN * fc * 4 * fc,
         K->gemm(false, false, (int)N, 4 * C, C, 1, ln, C, w4, 4 * C, 0, h, 4 * C));
    TIME("bias_gelu_fwd", L, 0, TF->bias_gelu_fwd(h, g, bias, (int)N, 4 * C));
    TIME("gemm_fc2_fwd", L, 2 * fN * fc * 4 * fc,
         K->gemm(false, false, (int)N, C, 4 * C, 1, g, 4 * C, w4, C, 0, res, C));
    TIME("residual_fwd", L, 0,
         TF->residual_layernorm_fwd(res, x, bias, NULL, NULL, NULL, NULL, NULL, (int)N, C));
    /* per layer, backward: each gemm's dX and dW products, the fused pieces */
    TIME("gemm_fc2_bwd_dx", L, 2 * fN * fc * 4 * fc,
         K->gemm(false, true, (int)N, 4 * C, C, 1, res, C, w4, C, 0, dy, 4 * C));
    TIME("gemm_fc2_bwd_dw", L, 2 * fN * fc * 4 * fc,
         K->gemm(true, false, 4 * C, C, (int)N, 1, g, 4 * C, res, C, 1, dw, C));
    TIME("colsum", 4 * L, 0, TF->colsum(bias, res, (int)N, C, true));
    TIME("gelu_bwd", L, 0, TF->gelu_bwd(dy, dy, h, (int)N, 4 * C));
    TIME("gemm_fc_bwd_dx", L, 2 * fN * fc * 4 * fc,
         K->gemm(false, true, (int)N, C, 4 * C, 1, dy, 4 * C, w4, 4 * C, 0, ln, C));
    TIME("gemm_fc_bwd_dw", L, 2 * fN * fc * 4 * fc,
         K->gemm(true, false, C, 4 * C, (int)N, 1, x, C, dy, 4 * C, 1, dw, 4 * C));
    TIME("layernorm_bwd", 2 * L, 0,
         TF->layernorm_bwd(res, lnw, bias, ln, x, mean, rstd, lnw, (int)N, C, true));
    TIME("gemm_proj_bwd_dx", L, 2 * fN * fc * fc,
         K->gemm(false, true, (int)N, C, C, 1, res, C, w1, C, 0, att, C));
    TIME("gemm_proj_bwd_dw", L, 2 * fN * fc * fc,
         K->gemm(true, false, C, C, (int)N, 1, att, C, res, C, 1, dw, C));
    TIME("attention_bwd", L, 2.5 * attn_flops, TF->attention_bwd(dqkv, x, att, lse, qkv, B, T, C, NH, scr));
    /* the same two calls on the tensor-core kernels (opt-in: RM_CUDA_ATTN=tc), not in the step */
    setenv("RM_CUDA_ATTN", "tc", 1);
    double keep = step_ms;
    TF->attention_fwd(att, lse, qkv, B, T, C, NH, scr); /* their own lse for their backward */
    TIME("attention_fwd_tc", 0, attn_flops, TF->attention_fwd(att, lse, qkv, B, T, C, NH, scr));
    TIME("attention_bwd_tc", 0, 2.5 * attn_flops,
         TF->attention_bwd(dqkv, x, att, lse, qkv, B, T, C, NH, scr));
    unsetenv("RM_CUDA_ATTN");
    step_ms = keep;
    TF->attention_fwd(att, lse, qkv, B, T, C, NH, scr); /* the default kernels' lse again */
    TIME("gemm_qkv_bwd_dx", L, 2 * fN * fc * 3 * fc,
         K->gemm(false, true, (int)N, C, 3 * C, 1, dqkv, 3 * C, w3, 3 * C, 0, ln, C));
    TIME("gemm_qkv_bwd_dw", L, 2 * fN * fc * 3 * fc,
         K->gemm(true, false, C, 3 * C, (int)N, 1, ln, C, dqkv, 3 * C, 1, dw, 3 * C));
    /* once per step */
    TIME("embed_fwd", 1, 0, TF->embed_fwd(x, tok, wte, wpe, B, T, C));
    TIME("lnf_fwd", 1, 0, TF->layernorm_fwd(ln, mean, rstd, x, lnw, lnw, (int)N, C));
    TIME("gemm_head_fwd", 1, 2 * fN * fc * V,
         K->gemm(false, true, (int)N, V, C, 1, ln, C, wte, C, 0, logits, V));
    TIME("xent", 1, 0, TF->xent(logits, tok, (int)N, V, 1.0f / (float)N, 1.0f / (float)N, loss, NULL));
    TIME("gemm_head_bwd_dx", 1, 2 * fN * fc * V,
         K->gemm(false, false, (int)N, C, V, 1, logits, V, wte, C, 0, ln, C));
    TIME("gemm_head_bwd_dw", 1, 2 * fN * fc * V,
         K->gemm(true, false, V, C, (int)N, 1, logits, V, ln, C, 1, dwte, C));
    TIME("lnf_bwd", 1, 0, TF->layernorm_bwd(res, lnw, bias, ln, x, mean, rstd, lnw, (int)N, C, false));
    TIME("embed_bwd", 1, 0, TF->embed_bwd(dwte, wpe, x, tok, B, T, C));
    size_t P = (size_t)V * c + (size_t)T * c + (size_t)L * (12 * c * c + 13 * c) + 2 * c;
    float *pw = drand(P, 0.02f), *pg = drand(P, 0.01f), *pm = drand(P, 0.01f), *pv = drand(P, 0.01f);
    K->memset0(pv, P * sizeof(float)); /* the second moment starts at 0, as a first step's */
    TIME("adamw", 1, 0, K->adamw_update(pw, pg, pm, pv, P, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f));
    double tokens = (double)N;
    printf("RESULT kind=tf-step ms=%.1f tokens_per_s=%.0f params=%zu (sum of the calls above)\n", step_ms,
           tokens / (step_ms * 1e-3), P);
    return 0;
}
