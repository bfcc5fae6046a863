/* nccl_probes.c — see nccl_probes.h. */
#include "worker/comm/cuda/nccl_probes.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "common/clock.h"
#include "worker/comm/nccl_wait.h"

int rm_nccl_comm_state(ncclComm_t comm, char *why, size_t cap)
{
    ncclResult_t st = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(comm, &st);
    if (r != ncclSuccess) {
        snprintf(why, cap, "ncclCommGetAsyncError: %s", ncclGetErrorString(r));
        return RM_EIO;
    }
    if (st == ncclSuccess)
        return RM_NW_DONE;
    if (st == ncclInProgress)
        return RM_NW_PENDING;
    snprintf(why, cap, "%s (%s)", ncclGetErrorString(st), ncclGetLastError(comm));
    return st == ncclRemoteError ? RM_ECLOSED : RM_EIO;
}

int rm_nccl_cuda_query(cudaError_t q, const char *what, char *why, size_t cap)
{
    if (q == cudaSuccess)
        return RM_NW_DONE;
    if (q == cudaErrorNotReady)
        return RM_NW_PENDING;
    (void)cudaGetLastError();
    snprintf(why, cap, "%s: %s", what, cudaGetErrorString(q));
    return RM_EIO;
}

void rm_nccl_poll_pause(void *ctx, double waited_s)
{
    (void)ctx;
    if (waited_s < 1e-3) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, waited_s < 0.1 ? 20000 : 200000};
    nanosleep(&ts, NULL);
}

double rm_nccl_poll_now(void *ctx)
{
    (void)ctx;
    return rm_mono();
}
