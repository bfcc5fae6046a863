/* kernels_cuda.h — everything kernels/cuda/ implements besides the table itself (rm_kernels_cuda in
 * kernels/kernels.h): whether CUDA is built and usable, device choice, the gemm precision, the
 * compute stream, the table's first error, and the kernel-image probe.
 *
 * Design: the CUDA build compiles kernels/cuda/ (kernels_cuda.cu, cuda_device.c); the CPU-only
 * build compiles kernels/nocuda/cuda_stub.c instead, whose functions answer "built without CUDA".
 * Nothing here knows about workers, ranks or jobs: which device a rank takes and which job needs a
 * GPU are the worker's policy (worker/gpu.h). Callable from C and C++; nothing here runs at program
 * start, so a binary built with CUDA still starts on machines without a GPU.
 * Ownership: no function allocates for the caller; `why`/`name` buffers are the caller's.
 * Threads: any thread; the table's state is process-wide (one device per process). */
#ifndef RM_KERNELS_KERNELS_CUDA_H
#define RM_KERNELS_KERNELS_CUDA_H
#include <stdbool.h>
#include <stddef.h>

#include "common/backend.h"
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when this binary was compiled with the CUDA path (does not touch the runtime). */
bool rm_cuda_built(void);
/* True when CUDA is built and at least one device is usable. On false, `why` (may be NULL) gets the
 * reason, e.g. "built without CUDA ...", "cudaGetDeviceCount: no CUDA-capable device is detected",
 * or "... (no NVIDIA driver: libcuda.so.1 not loadable)". Initialises the CUDA runtime. */
bool rm_cuda_available(char *why, size_t cap);
/* Number of visible devices (CUDA_VISIBLE_DEVICES applied) into *n. RM_EUNSUPPORTED without a GPU. */
int rm_cuda_device_count(int *n, rm_err *err);
/* Make `device` current for this process (cudaSetDevice) before the table is first used; `name`
 * (may be NULL) gets "NVIDIA H100 80GB HBM3 sm_90". RM_EINVAL for an ordinal outside the visible
 * devices, RM_EUNSUPPORTED without a GPU. */
int rm_cuda_use_device(int device, char *name, size_t cap, rm_err *err);

/* Gemm precision of the CUDA table: fp32 runs matrix products in TF32 (NVIDIA_TF32_OVERRIDE=0 or
 * RM_CUDA_TF32=0 turns that off); bf16/fp16 round gemm inputs to that type (RNE) and multiply on
 * tensor cores with fp32 accumulation and an fp32 result; everything else stays fp32. Initialises
 * the table if needed. RM_EUNSUPPORTED without a GPU (err says why). */
int rm_cuda_set_precision(rm_precision p, rm_err *err);
/* The table's compute stream (a cudaStream_t), or NULL before the table is initialised and in the
 * CPU-only build. The NCCL backend orders its communication stream after it with events. */
void *rm_cuda_compute_stream(void);
/* The device the table was initialised on, or -1 before that / without CUDA. */
int rm_cuda_device(void);
/* The table's check() entry (kernels.h): the first error since the last call, RM_OK when none. */
int rm_cuda_check(rm_err *err);
/* Why the last rm_kernels_cuda() returned NULL ("" when it did not, or was never called); the
 * table retries its initialisation on the next call. Copies into why[cap]. */
void rm_cuda_init_error(char *why, size_t cap);

/* Device memory [p, p + bytes) is about to be written by work this table did not queue (an NCCL
 * collective's output): the table drops any cached 16-bit copy of it (kernels/cast_cache.h). Every
 * writer of device memory outside the table must call this before queuing the write. No-op
 * without CUDA or before the table is initialised. */
void rm_cuda_note_written(const void *p, size_t bytes);

/* RINGMASTER_CUDA_SYNC_CHECK=1: every launch is followed by a stream synchronisation and a check,
 * so an execution fault names the kernel that caused it (slow; for make test-gpu and debugging).
 * Read once when the table initialises. */
bool rm_cuda_sync_check_enabled(void);

#ifdef __cplusplus
}
#endif
#endif
