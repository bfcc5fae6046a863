/* cuda_stub.c — kernels/kernels_cuda.h for the CPU-only build: there is never a GPU, and every
 * answer says so. The CUDA build compiles kernels/cuda/ instead (the Makefile picks one folder). */
#include <stdio.h>

#include "kernels/kernels_cuda.h"

#define NO_CUDA "built without CUDA (rebuild with nvcc and NCCL present, or CUDA=1)"

const rm_kernels *rm_kernels_cuda(void)
{
    return NULL;
}

bool rm_cuda_built(void)
{
    return false;
}

bool rm_cuda_available(char *why, size_t cap)
{
    if (why && cap)
        snprintf(why, cap, "%s", NO_CUDA);
    return false;
}

int rm_cuda_device_count(int *n, rm_err *err)
{
    *n = 0;
    return rm_errf(err, RM_EUNSUPPORTED, "no GPU: %s", NO_CUDA);
}

int rm_cuda_use_device(int device, char *name, size_t cap, rm_err *err)
{
    (void)device;
    if (name && cap)
        name[0] = '\0';
    return rm_errf(err, RM_EUNSUPPORTED, "no GPU: %s", NO_CUDA);
}

int rm_cuda_set_precision(rm_precision p, rm_err *err)
{
    return rm_errf(err, RM_EUNSUPPORTED, "precision %s needs a GPU: %s", rm_precision_str(p), NO_CUDA);
}

void *rm_cuda_compute_stream(void)
{
    return NULL;
}

int rm_cuda_device(void)
{
    return -1;
}

int rm_cuda_check(rm_err *err)
{
    (void)err;
    return RM_OK;
}

void rm_cuda_init_error(char *why, size_t cap)
{
    if (why && cap)
        snprintf(why, cap, "%s", NO_CUDA);
}

bool rm_cuda_sync_check_enabled(void)
{
    return false;
}

void rm_cuda_note_written(const void *p, size_t bytes)
{
    (void)p;
    (void)bytes;
}
