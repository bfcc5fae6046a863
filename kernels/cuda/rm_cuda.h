/* rm_cuda.h — the CUDA/NCCL/cuBLAS includes and check macros shared by kernels/cuda and the worker's
 * cuda/ folders (worker/comm/cuda, worker/pipeline/cuda).
 *
 * Usable from C11 (the .c files of those folders) and C++ (the .cu files). The vendor headers declare a few `f()`
 * functions that -Wstrict-prototypes rejects in C, so they are included here with that warning off.
 *
 * Check macros follow NCCL's checks.h: every failing call logs file:line, the call text and the
 * library's message, clears CUDA's (non-sticky) last error so later calls are not blamed, stores an
 * RM_E* code in the caller's rc variable and jumps to the caller's cleanup label:
 *     int rc = RM_OK;
 *     RM_CUDA_GOTO(cudaMalloc(&p, n), rc, fail);
 *     ...
 *   fail:
 *     return rc;
 * The message is also copied into an rm_err when the *_ERR variants are used. */
#ifndef RM_KERNELS_CUDA_RM_CUDA_H
#define RM_KERNELS_CUDA_RM_CUDA_H

#if defined(__GNUC__) && !defined(__cplusplus)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#endif
#include <cuda_runtime_api.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <nccl.h>
#if defined(__GNUC__) && !defined(__cplusplus)
#pragma GCC diagnostic pop
#endif

#ifdef __cplusplus
extern "C" {
#endif
#include "common/rm.h"
#ifdef __cplusplus
}
#endif

/* cuBLAS has no string function for every version; this one is ours (kernels/cuda/kernels_cuda.cu). */
#ifdef __cplusplus
extern "C" {
#endif
const char *rm_cublas_status_str(int status);
#ifdef __cplusplus
}
#endif

#define RM_CUDA_GOTO_ERR(call, rcvar, label, errp)                                                       \
    do {                                                                                                 \
        cudaError_t rm_ce_ = (call);                                                                     \
        if (rm_ce_ != cudaSuccess) {                                                                     \
            (void)cudaGetLastError();                                                                    \
            rm_log_write(RM_LOG_ERROR, __FILE__, __LINE__, "CUDA failure call=\"%s\" err=\"%s\"", #call, \
                         cudaGetErrorString(rm_ce_));                                                    \
            (rcvar) = rm_ce_ == cudaErrorMemoryAllocation ? RM_ENOMEM : RM_EIO;                          \
            rm_errf((errp), (rcvar), "%s: %s", #call, cudaGetErrorString(rm_ce_));                       \
            goto label;                                                                                  \
        }                                                                                                \
    } while (0)
#define RM_CUDA_GOTO(call, rcvar, label) RM_CUDA_GOTO_ERR(call, rcvar, label, (rm_err *)0)

#define RM_NCCL_GOTO_ERR(call, rcvar, label, errp)                                                       \
    do {                                                                                                 \
        ncclResult_t rm_nr_ = (call);                                                                    \
        if (rm_nr_ != ncclSuccess && rm_nr_ != ncclInProgress) {                                         \
            (void)cudaGetLastError();                                                                    \
            rm_log_write(RM_LOG_ERROR, __FILE__, __LINE__, "NCCL failure call=\"%s\" err=\"%s\"", #call, \
                         ncclGetErrorString(rm_nr_));                                                    \
            (rcvar) = rm_nr_ == ncclRemoteError ? RM_ECLOSED : RM_EIO;                                   \
            rm_errf((errp), (rcvar), "%s: %s", #call, ncclGetErrorString(rm_nr_));                       \
            goto label;                                                                                  \
        }                                                                                                \
    } while (0)
#define RM_NCCL_GOTO(call, rcvar, label) RM_NCCL_GOTO_ERR(call, rcvar, label, (rm_err *)0)

#define RM_CUBLAS_GOTO_ERR(call, rcvar, label, errp)                                                   \
    do {                                                                                               \
        int rm_bs_ = (int)(call);                                                                      \
        if (rm_bs_ != 0 /* CUBLAS_STATUS_SUCCESS */) {                                                 \
            (void)cudaGetLastError();                                                                  \
            rm_log_write(RM_LOG_ERROR, __FILE__, __LINE__, "cuBLAS failure call=\"%s\" err=%s", #call, \
                         rm_cublas_status_str(rm_bs_));                                                \
            (rcvar) = rm_bs_ == 3 /* ALLOC_FAILED */ ? RM_ENOMEM : RM_EIO;                             \
            rm_errf((errp), (rcvar), "%s: %s", #call, rm_cublas_status_str(rm_bs_));                   \
            goto label;                                                                                \
        }                                                                                              \
    } while (0)
#define RM_CUBLAS_GOTO(call, rcvar, label) RM_CUBLAS_GOTO_ERR(call, rcvar, label, (rm_err *)0)

/* For void paths (destroy): log and carry on. */
#define RM_CUDA_WARN(call)                                                                              \
    do {                                                                                                \
        cudaError_t rm_ce_ = (call);                                                                    \
        if (rm_ce_ != cudaSuccess) {                                                                    \
            (void)cudaGetLastError();                                                                   \
            rm_log_write(RM_LOG_WARN, __FILE__, __LINE__, "CUDA failure call=\"%s\" err=\"%s\"", #call, \
                         cudaGetErrorString(rm_ce_));                                                   \
        }                                                                                               \
    } while (0)
#endif
