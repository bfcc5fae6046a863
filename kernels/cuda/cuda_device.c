/* cuda_device.c — the device queries of kernels/kernels_cuda.h: is CUDA usable, how many devices,
 * make one current.
 *
 * Nothing here runs at startup; callers ask only for a job that needs a GPU, so the same binary runs
 * on CPU-only machines. A missing driver makes cudart report "CUDA driver version is insufficient",
 * which misleads; we add whether libcuda.so.1 can be loaded at all so the message says plainly that
 * no NVIDIA driver is installed. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/rm_cuda.h"
#include "kernels/kernels_cuda.h"

bool rm_cuda_built(void)
{
    return true;
}

static void set_why(char *why, size_t cap, const char *what, const char *extra)
{
    if (why && cap)
        snprintf(why, cap, "cudaGetDeviceCount: %s%s", what, extra);
}

bool rm_cuda_available(char *why, size_t cap)
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
        set_why(why, cap, "0 devices visible", " (check CUDA_VISIBLE_DEVICES / the nvidia.com/gpu limit)");
        return false;
    }
    if (why && cap)
        why[0] = '\0';
    return true;
}

int rm_cuda_device_count(int *n, rm_err *err)
{
    char why[256];
    int rc = RM_OK;
    *n = 0;
    if (!rm_cuda_available(why, sizeof why))
        return rm_errf(err, RM_EUNSUPPORTED, "no GPU: %s", why);
    RM_CUDA_GOTO_ERR(cudaGetDeviceCount(n), rc, out, err);
out:
    return rc;
}

int rm_cuda_use_device(int device, char *name, size_t cap, rm_err *err)
{
    int rc = RM_OK, n = 0;
    RM_CHECK_GOTO(rm_cuda_device_count(&n, err), rc, out);
    if (device < 0 || device >= n)
        return rm_errf(err, RM_EINVAL, "GPU %d does not exist: %d visible", device, n);
    RM_CUDA_GOTO_ERR(cudaSetDevice(device), rc, out, err);
    if (name && cap) {
        struct cudaDeviceProp prop;
        RM_CUDA_GOTO_ERR(cudaGetDeviceProperties(&prop, device), rc, out, err);
        snprintf(name, cap, "%s sm_%d%d", prop.name, prop.major, prop.minor);
    }
out:
    return rc;
}
