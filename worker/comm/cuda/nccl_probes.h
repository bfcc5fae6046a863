/* nccl_probes.h — the pieces of a worker/comm/nccl_wait.h probe table that every NCCL user shares
 * (worker/comm/cuda/comm_nccl.c, the allreduce backend; worker/pipeline/cuda/pipe_link_nccl.c, the pipeline's
 * stage links): what a communicator's or a CUDA query's state means as RM_NW_DONE /
 * RM_NW_PENDING / an error, and how the poll loop waits and reads the clock.
 * Ownership: nothing is kept; `why` is the caller's buffer of `cap` bytes. CUDA builds only. */
#ifndef RM_WORKER_CUDA_NCCL_PROBES_H
#define RM_WORKER_CUDA_NCCL_PROBES_H
#include <stddef.h>

#include "kernels/cuda/rm_cuda.h"

/* The communicator's asynchronous state: RM_NW_DONE (ncclSuccess), RM_NW_PENDING (in progress),
 * RM_ECLOSED for a remote peer's failure, RM_EIO otherwise (reason in why). */
int rm_nccl_comm_state(ncclComm_t comm, char *why, size_t cap);
/* A cudaEventQuery / cudaStreamQuery result: done, pending (cudaErrorNotReady), or RM_EIO naming
 * `what` (the sticky error is cleared). */
int rm_nccl_cuda_query(cudaError_t q, const char *what, char *why, size_t cap);
/* rm_nccl_probe.pause: spins (yields) for the first millisecond, then sleeps 20 us, and 200 us
 * after 0.1 s, so a long wait does not burn a core another thread needs. */
void rm_nccl_poll_pause(void *ctx, double waited_s);
/* rm_nccl_probe.now: monotonic seconds. */
double rm_nccl_poll_now(void *ctx);
#endif
