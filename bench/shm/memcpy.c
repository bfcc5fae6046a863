/* memcpy.c — the machine's single-thread memcpy bandwidth (the physical limit beside the shm
 * backend's busbw in bench/shm/run.sh): copy a SIZE-MiB buffer ITERS times, print GB/s (1e9 B). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    size_t mb = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    int iters = argc > 2 ? atoi(argv[2]) : 10;
    size_t n = mb << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b || iters < 1)
        return 1;
    memset(a, 1, n);
    memset(b, 2, n);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < iters; i++) {
        memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
        __asm__ volatile("" ::: "memory");
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("memcpy %zu MiB x %d: %.2f GB/s\n", mb, iters, (double)n * iters / s / 1e9);
    free(a);
    free(b);
    return 0;
}
