/* gpu_cuda.c — the CUDA half of worker/gpu.h: is a GPU usable, and which one this rank takes.
 *
 * Nothing here runs at startup; the trainer calls it only for a job that needs a GPU, so the same
 * binary runs on CPU-only machines. A missing driver makes cudart report "CUDA driver version is
 * insufficient", which misleads; we add whether libcuda.so.1 can be loaded at all so the message
 * says plainly that no NVIDIA driver is installed. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/rm_cuda.h"
#include "worker/gpu.h"

bool rm_gpu_built(void) { return true; }

static void set_why(char *why, size_t cap, const char *what, const char *extra)
{
    if (why && cap)
        snprintf(why, cap, "cudaGetDeviceCount: %s%s", what, extra);
}

bool rm_gpu_available(char *why, size_t cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        const char *extra = "";
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (!h)
            extra = " (no NVIDIA driver: libcuda.so.1 not loadable)";
        else
            dlclose(h);
        set_why(why, cap, cudaGetErrorString(e), extra);
        return false;
    }
    if (n <= 0) {
        set_why(why, cap, "0 devices visible",
                " (check CUDA_VISIBLE_DEVICES / the nvidia.com/gpu limit)");
        return false;
    }
    if (why && cap)
        why[0] = '\0';
    return true;
}

int rm_gpu_select(int local_rank, int *device, char *name, size_t cap, rm_err *err)
{
    char why[256];
    int rc = RM_OK, n = 0;
    if (!rm_gpu_available(why, sizeof why))
        return rm_errf(err, RM_EUNSUPPORTED, "no GPU: %s", why);
    RM_CUDA_GOTO_ERR(cudaGetDeviceCount(&n), rc, out, err);
    int dev = (local_rank < 0 ? 0 : local_rank) % n;
    RM_CUDA_GOTO_ERR(cudaSetDevice(dev), rc, out, err);
    if (name && cap) {
        struct cudaDeviceProp prop;
        RM_CUDA_GOTO_ERR(cudaGetDeviceProperties(&prop, dev), rc, out, err);
        snprintf(name, cap, "%s sm_%d%d", prop.name, prop.major, prop.minor);
    }
    if (device)
        *device = dev;
out:
    return rc;
}
