/* nccl_bench.c — one-rank NCCL latency: raw ncclAllReduce vs ringmaster's NCCL backend
 * (worker/comm/cuda/comm_nccl.c, the path `ringmaster-worker bench --backend nccl` takes) vs the fusion
 * path (worker/allreduce/fusion.h: buckets of a gradient buffer allreduced by the comm thread), same bytes.
 *
 * Why one rank: NCCL cannot put two ranks on one GPU, and the lent machines have one. With one
 * rank the "allreduce" is NCCL's one-rank copy/scale kernel, so this measures the fixed costs our
 * layers add (event ordering, polling ncclCommGetAsyncError, the fusion thread hand-off), which
 * is exactly the overhead the target (<= 5 % over raw) is about.
 * Raw timing: N back-to-back ncclAllReduce on one stream, one sync at the end (nccl-tests'
 * method). Backend timing: N blocking ops->allreduce calls (each waits for completion, as the
 * trainer's contract requires), so it also shows the per-call synchronisation cost.
 * Output: "RESULT kind=... bytes=... raw_us=... rm_us=... overhead_pct=..." lines.
 * Usage: nccl_bench [--iters 50] [--maxbytes 268435456] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/rm_cuda.h"
#include "kernels/kernels.h"
#include "worker/comm/comm.h"
#include "worker/allreduce/fusion.h"
#include "worker/gpu.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CK(call)                                                              \
    do {                                                                      \
        if ((call) != 0) {                                                    \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #call); \
            return 1;                                                         \
        }                                                                     \
    } while (0)

int main(int argc, char **argv)
{
    int iters = 50;
    size_t maxbytes = (size_t)256 << 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--maxbytes"))
            maxbytes = (size_t)strtoull(argv[i + 1], NULL, 10);
    }
    char why[256];
    if (!rm_gpu_available(why, sizeof why)) {
        printf("SKIP: no GPU present (%s)\n", why);
        return 0;
    }
    const rm_kernels *k = rm_kernels_cuda();
    if (!k)
        return 1;
    size_t maxcount = maxbytes / 4;
    float *buf = k->alloc(maxcount * 4);
    if (!buf)
        return 1;
    k->sync();

    /* raw NCCL: its own communicator and stream */
    ncclComm_t raw;
    ncclUniqueId id;
    cudaStream_t st;
    CK(ncclGetUniqueId(&id));
    CK(ncclCommInitRank(&raw, 1, id, 0));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    /* ringmaster's backend */
    const rm_comm_ops *ops = rm_comm_nccl_ops();
    rm_comm_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.world_size = 1;
    cfg.listen_fd = -1;
    cfg.timeout_s = 60;
    rm_comm *c = NULL;
    rm_err e = {0};
    if (!ops || ops->init(&cfg, &c, &e) != RM_OK) {
        fprintf(stderr, "nccl backend init: %s\n", e.msg);
        return 1;
    }

    printf("# one-rank allreduce (float, sum, in place), %d iterations per size\n", iters);
    printf("# %12s %12s %12s %12s %10s\n", "bytes", "raw_us", "raw_sync_us", "rm_us", "overhead%");
    for (size_t bytes = 8; bytes <= maxbytes; bytes *= 8) {
        size_t n = bytes / 4;
        for (int w = 0; w < 5; w++)
            CK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, raw, st));
        CK(cudaStreamSynchronize(st));
        double t0 = now_s();
        for (int i = 0; i < iters; i++)
            CK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, raw, st));
        CK(cudaStreamSynchronize(st));
        double raw_us = (now_s() - t0) / iters * 1e6;
        /* raw with a sync per call: the fair comparison for a blocking API */
        t0 = now_s();
        for (int i = 0; i < iters; i++) {
            CK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, raw, st));
            CK(cudaStreamSynchronize(st));
        }
        double raws_us = (now_s() - t0) / iters * 1e6;
        for (int w = 0; w < 5; w++)
            CK(ops->allreduce(c, buf, n, RM_DT_F32, RM_OP_SUM, &e));
        t0 = now_s();
        for (int i = 0; i < iters; i++)
            CK(ops->allreduce(c, buf, n, RM_DT_F32, RM_OP_SUM, &e));
        double rm_us = (now_s() - t0) / iters * 1e6;
        printf("  %12zu %12.2f %12.2f %12.2f %10.1f\n", bytes, raw_us, raws_us, rm_us,
               (rm_us / raws_us - 1) * 100);
        printf("RESULT kind=backend bytes=%zu raw_us=%.2f raw_sync_us=%.2f rm_us=%.2f overhead_pct=%.1f\n",
               bytes, raw_us, raws_us, rm_us, (rm_us / raws_us - 1) * 100);
    }

    /* fusion: 8 layers of 4M floats (16 MiB each), 25 MB buckets, vs one raw allreduce of the
     * same bytes (synchronised) */
    enum { L = 8 };
    size_t per = maxcount / L < ((size_t)4 << 20) ? maxcount / L : ((size_t)4 << 20);
    size_t off[L], len[L];
    for (int l = 0; l < L; l++)
        off[l] = (size_t)l * per, len[l] = per;
    rm_fusion *f = NULL;
    if (rm_fusion_new(ops, c, buf, off, len, L, 25u << 20, &f, &e) != RM_OK) {
        fprintf(stderr, "fusion: %s\n", e.msg);
        return 1;
    }
    size_t total = per * L;
    for (int w = 0; w < 3; w++) {
        rm_fusion_begin(f);
        for (int l = L - 1; l >= 0; l--)
            rm_fusion_ready(f, l);
        CK(rm_fusion_finish(f, &e));
    }
    double t0 = now_s();
    for (int i = 0; i < iters; i++) {
        rm_fusion_begin(f);
        for (int l = L - 1; l >= 0; l--)
            rm_fusion_ready(f, l);
        CK(rm_fusion_finish(f, &e));
    }
    double fus_us = (now_s() - t0) / iters * 1e6;
    t0 = now_s();
    for (int i = 0; i < iters; i++) {
        CK(ncclAllReduce(buf, buf, total, ncclFloat32, ncclAvg, raw, st));
        CK(cudaStreamSynchronize(st));
    }
    double raw_us = (now_s() - t0) / iters * 1e6;
    printf("# fusion: %d layers x %zu floats, %d buckets: fusion step %.2f us, one raw allreduce %.2f us\n",
           L, per, rm_fusion_nbuckets(f), fus_us, raw_us);
    printf("RESULT kind=fusion bytes=%zu buckets=%d raw_us=%.2f rm_us=%.2f overhead_pct=%.1f\n", total * 4,
           rm_fusion_nbuckets(f), raw_us, fus_us, (fus_us / raw_us - 1) * 100);
    rm_fusion_free(f);
    ops->destroy(c);
    ncclCommDestroy(raw);
    cudaStreamDestroy(st);
    k->free(buf);
    return 0;
}
