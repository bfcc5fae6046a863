/* gpu_stub.c — worker/gpu.h's device half for the CPU-only build: there is never a GPU, and the
 * reason says so. (The GPU build compiles worker/cuda/gpu_cuda.c instead.) */
#include <stdio.h>

#include "worker/gpu.h"

bool rm_gpu_built(void) { return false; }

bool rm_gpu_available(char *why, size_t cap)
{
    if (why && cap)
        snprintf(why, cap, "built without CUDA (rebuild with nvcc and NCCL present, or CUDA=1)");
    return false;
}

int rm_gpu_select(int local_rank, int *device, char *name, size_t cap, rm_err *err)
{
    (void)local_rank;
    (void)name;
    (void)cap;
    if (device)
        *device = -1;
    return rm_errf(err, RM_EUNSUPPORTED, "no GPU: built without CUDA");
}

int rm_gpu_set_precision(rm_precision p, rm_err *err)
{
    return rm_errf(err, RM_EUNSUPPORTED, "precision %s needs a GPU: built without CUDA",
                   rm_precision_str(p));
}

void *rm_gpu_compute_stream(void) { return NULL; }

int rm_gpu_device(void) { return -1; }

int rm_gpu_check(rm_err *err)
{
    (void)err;
    return RM_OK;
}
