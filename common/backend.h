/* backend.h — the two job-level choices every layer names: the comm backend (ring | nccl | mpi,
 * or auto) and the numeric precision (fp32 | bf16 | fp16), with their names and the one
 * resolution rule for `backend: auto`.
 *
 * Design: a leaf header (no other project includes, C and C++ alike) so that trainingjob.h, the
 * worker's GPU policy (worker/gpu.h) and the CUDA kernels (kernels/kernels_cuda.h, compiled as C++)
 * share one definition without pulling in the TrainingJob type. Implemented in common/backend.c.
 * Ownership: the names are static strings, never freed. */
#ifndef RM_COMMON_BACKEND_H
#define RM_COMMON_BACKEND_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { RM_BACKEND_AUTO = 0, RM_BACKEND_RING, RM_BACKEND_NCCL, RM_BACKEND_MPI } rm_backend;
typedef enum { RM_PREC_FP32 = 0, RM_PREC_BF16, RM_PREC_FP16 } rm_precision;

/* NULL-terminated name tables, indexed by the enum: {"auto","ring","nccl","mpi",NULL} and
 * {"fp32","bf16","fp16",NULL} (read through rm.h's rm_enum_index / rm_enum_name). */
extern const char *const rm_backend_names[];
extern const char *const rm_precision_names[];

/* "ring"; "unknown" for a value outside the enum. */
const char *rm_backend_name(rm_backend b);
/* Name -> enum. RM_EINVAL (and *out untouched) for NULL or an unknown name. */
int rm_backend_parse(const char *s, rm_backend *out);
/* `backend: auto` -> nccl when the job requests GPUs (gpus_requested > 0), else ring. Any explicit
 * backend is returned unchanged. */
rm_backend rm_backend_resolve(rm_backend spec, int gpus_requested);

/* "fp32" | "bf16" | "fp16"; "unknown" outside the enum. */
const char *rm_precision_str(rm_precision p);
/* Name -> enum. RM_EINVAL (and *out untouched) for NULL or an unknown name. */
int rm_precision_parse(const char *s, rm_precision *out);
/* Bytes per element of the working (compute) copy: 4, 2, 2. */
size_t rm_precision_size(rm_precision p);

#ifdef __cplusplus
}
#endif
#endif
