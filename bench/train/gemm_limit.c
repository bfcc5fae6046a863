/* gemm_limit.c — the physical limit for bench/train: how many samples/s one core could train if the
 * step were only its matrix products. Times exactly the eight cblas_sgemm calls of one step of the
 * 784-512-256-10 MLP at batch B (3 forward, 3 weight-gradient, 2 input-gradient products) with
 * OpenBLAS on one thread, and prints GFLOP/s and the resulting samples/s ceiling. The best of five
 * trials is reported: a ceiling is what the core can do, and on a shared machine other processes
 * only ever push a trial below it.
 * Build: cc -O2 -o gemm_limit gemm_limit.c -lopenblas ; run: ./gemm_limit [B] [seconds] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void openblas_set_num_threads(int);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *buf(size_t n)
{
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

int main(int argc, char **argv)
{
    int B = argc > 1 ? atoi(argv[1]) : 64;
    double secs = argc > 2 ? atof(argv[2]) : 3.0;
    openblas_set_num_threads(1);
    const int d[4] = {784, 512, 256, 10};
    float *W[3], *dW[3], *A[4], *dA[4];
    for (int l = 0; l < 3; l++) {
        W[l] = buf((size_t)d[l] * d[l + 1]);
        dW[l] = buf((size_t)d[l] * d[l + 1]);
    }
    for (int l = 0; l < 4; l++) {
        A[l] = buf((size_t)B * d[l]);
        dA[l] = buf((size_t)B * d[l]);
    }
    double flop = 0;
    for (int l = 0; l < 3; l++)
        flop += 2.0 * B * d[l] * d[l + 1] * (l == 0 ? 2 : 3);
    double best = 0;
    for (int trial = 0; trial < 5; trial++) {
        long iters = 0;
        double t0 = now(), t;
        do {
            for (int l = 0; l < 3; l++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, d[l + 1], d[l], 1, A[l], d[l], W[l],
                            d[l + 1], 0, A[l + 1], d[l + 1]);
            for (int l = 2; l >= 0; l--) {
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d[l], d[l + 1], B, 1, A[l], d[l],
                            dA[l + 1], d[l + 1], 0, dW[l], d[l + 1]);
                if (l > 0)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, d[l], d[l + 1], 1, dA[l + 1],
                                d[l + 1], W[l], d[l + 1], 0, dA[l], d[l]);
            }
            iters++;
            t = now() - t0;
        } while (t < secs / 5);
        double g = flop * iters / t / 1e9;
        best = g > best ? g : best;
    }
    double gflops = best;
    printf("{\"batch\": %d, \"gemm_gflops\": %.1f, \"samples_per_s_ceiling\": %.0f, "
           "\"mflop_per_sample\": %.3f}\n",
           B, gflops, gflops * 1e9 / (flop / B), flop / B / 1e6);
    return 0;
}
