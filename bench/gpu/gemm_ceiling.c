/* gemm_ceiling.c — the practical bf16 ceiling of this GPU: a plain cuBLAS GEMM, 8192^3 by
 * default, bf16 inputs, fp32 accumulation, with a bf16 output (what PyTorch's autocast produces)
 * and with an fp32 output (what ringmaster's autocast gemm produces). Timed with CUDA events over
 * N back-to-back calls after warm-up. The wide-MLP target (>= 60 % of the dense bf16 peak) is
 * read against this number in bench/results/gpu.md.
 * Output: "RESULT kind=gemm out=bf16|fp32 m=.. n=.. k=.. ms=.. tflops=.." lines.
 * Usage: gemm_ceiling [--size 8192] [--iters 50] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/rm_cuda.h"

#define CK(call)                                                                        \
    do {                                                                                \
        int rc_ = (int)(call);                                                          \
        if (rc_ != 0) {                                                                 \
            fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #call, rc_); \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

int main(int argc, char **argv)
{
    int size = 8192, iters = 50;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--size"))
            size = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no GPU present (cudaGetDeviceCount: %s)\n", cudaGetErrorString(cudaGetLastError()));
        return 0;
    }
    size_t n = (size_t)size * size;
    void *a, *b, *c;
    CK(cudaMalloc(&a, n * 2));
    CK(cudaMalloc(&b, n * 2));
    CK(cudaMalloc(&c, n * 4));
    CK(cudaMemset(a, 0x3c, n * 2)); /* bf16 0x3c3c ~ 0.0115: finite, no denormals */
    CK(cudaMemset(b, 0x3c, n * 2));
    cublasHandle_t h;
    CK(cublasCreate(&h));
    void *ws;
    size_t wsb = 32u << 20;
    CK(cudaMalloc(&ws, wsb));
    CK(cublasSetWorkspace(h, ws, wsb));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float alpha = 1.0f, beta = 0.0f;
    for (int out = 0; out < 2; out++) {
        cudaDataType_t ct = out == 0 ? CUDA_R_16BF : CUDA_R_32F;
        for (int w = 0; w < 5; w++)
            CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &alpha, a, CUDA_R_16BF, size, b,
                            CUDA_R_16BF, size, &beta, c, ct, size, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        CK(cudaEventRecord(e0, 0));
        for (int i = 0; i < iters; i++)
            CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &alpha, a, CUDA_R_16BF, size, b,
                            CUDA_R_16BF, size, &beta, c, ct, size, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ms /= (float)iters;
        double tflops = 2.0 * size * (double)size * size / (ms * 1e-3) / 1e12;
        printf("RESULT kind=gemm out=%s m=%d n=%d k=%d ms=%.4f tflops=%.1f\n", out == 0 ? "bf16" : "fp32",
               size, size, size, ms, tflops);
    }
    cublasDestroy(h);
    cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(ws);
    return 0;
}
