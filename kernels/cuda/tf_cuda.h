/* tf_cuda.h — between the CUDA table (kernels/cuda/kernels_cuda.cu, which owns the device state:
 * stream, first error, scratch) and its transformer kernels (kernels/cuda/transformer_cuda.cu,
 * rm_tf_cuda). Internal to kernels/cuda; C++ only. */
#ifndef RM_KERNELS_CUDA_TF_CUDA_H
#define RM_KERNELS_CUDA_TF_CUDA_H
#include <stddef.h>

#include "kernels/transformer.h"

#define RM_CUDA_SCRATCH_SLOTS 8

extern "C" {
/* The transformer's entries (kernels/cuda/transformer_cuda.cu). */
extern const rm_tf_kernels rm_tf_cuda;
/* After a launch: records a launch error as the table's first error (and, in sync-check mode,
 * synchronises to name an execution fault). */
void rm_cuda_launched(const char *file, int line, const char *name);
/* Records a failure as the table's first error (check() returns it). */
void rm_cuda_note_error(const char *file, int line, int code, const char *what, const char *msg);
/* Multiprocessors of the table's device. */
int rm_cuda_sms(void);
/* The table's gemm precision (rm_precision: fp32, bf16, fp16), set by rm_cuda_set_precision. */
int rm_cuda_precision(void);
/* Stream-ordered scratch slot `slot` (0..RM_CUDA_SCRATCH_SLOTS-1) of at least `bytes`, grown on
 * the compute stream, owned by the table; NULL (error recorded) when it cannot grow. Valid until
 * the next call for the same slot. */
void *rm_cuda_scratch(int slot, size_t bytes);
}
#endif
