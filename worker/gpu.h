/* gpu.h — what the trainer asks about GPUs: is one usable (and if not, why), which device this
 * rank takes, which comm backend `backend: auto` resolves to, and mixed precision (bf16/fp16
 * conversions with round-to-nearest-even, PyTorch GradScaler-style dynamic loss scaling).
 *
 * Design: everything that does not need the CUDA runtime (backend resolution, conversions, the loss
 * scaler's state machine) lives in worker/gpu.c and is compiled into every build, so it is unit-tested
 * on CPU-only machines. Only rm_gpu_available/rm_gpu_select touch CUDA; they live in
 * worker/cuda/gpu_cuda.c, with a stub in worker/nocuda/gpu_stub.c that answers "built without CUDA".
 * Nothing here calls CUDA unless the caller asks, so the one binary starts on machines without a GPU.
 *
 * Ownership: no function here allocates; buffers (`why`, `name`) are the caller's. */
#ifndef RM_WORKER_GPU_H
#define RM_WORKER_GPU_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {   /* the common/ headers are C11 without guards: give them C linkage here too */
#endif
#include "common/rm.h"
#include "kernels/kernels.h"
#include "worker/comm.h"
#ifdef __cplusplus
#define template template_  /* trainingjob.h names a field `template`, a C++ keyword; layout unchanged */
#endif
#include "common/trainingjob.h"
#ifdef __cplusplus
#undef template
#endif

/* ---------------- device availability (needs CUDA; stubbed without it) ---------------- */

/* True when this build has CUDA and at least one device is usable. On false, `why` (may be NULL)
 * gets the reason, e.g. "built without CUDA", "cudaGetDeviceCount: no CUDA-capable device is
 * detected", or "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version
 * (no NVIDIA driver: libcuda.so.1 not loadable)". Calls cudaGetDeviceCount (initialises the runtime). */
bool rm_gpu_available(char *why, size_t cap);
/* True when this binary was compiled with the CUDA path (does not touch the runtime). */
bool rm_gpu_built(void);
/* Pick and set the device for this process: local_rank modulo the visible devices (with one GPU per
 * pod that is device 0). The CUDA table does this itself on first use with env LOCAL_RANK (or 0)
 * unless a device was selected before; call it first to choose another. *device gets the index, name (may be NULL) the device name and compute
 * capability ("NVIDIA H100 80GB HBM3 sm_90"). RM_EUNSUPPORTED when no GPU (err says why). */
int rm_gpu_select(int local_rank, int *device, char *name, size_t cap, rm_err *err);

/* Mixed precision of the CUDA kernels table (kernels/cuda): fp32 runs matrix products in TF32
 * (NVIDIA_TF32_OVERRIDE=0 or RM_CUDA_TF32=0 turns that off); bf16/fp16 make gemm round its inputs
 * to that type (RNE) and multiply on tensor cores with fp32 accumulation and an fp32 result,
 * while everything else (activations, gradients, master weights, optimizer) stays fp32 — autocast
 * for the gemm, the only place the low precision pays. Initialises the CUDA table if needed.
 * RM_EUNSUPPORTED without a GPU (or, for bf16/fp16, in the CPU-only build). */
int rm_gpu_set_precision(rm_precision p, rm_err *err);
/* The CUDA table's compute stream (a cudaStream_t), or NULL before the table is initialised and in
 * the CPU-only build. The NCCL backend orders its communication stream after it with events. */
void *rm_gpu_compute_stream(void);
/* The device the CUDA table was initialised on, or -1 before that / without CUDA. */
int rm_gpu_device(void);
/* The first error any CUDA table entry hit since the last call (table entries return void), then
 * clears it. RM_OK when none. Call after sync()/d2h once per step. */
int rm_gpu_check(rm_err *err);

/* ---------------- backend and precision resolution (pure) ---------------- */

/* rm_backend_resolve and rm_template_gpus live in common/trainingjob.h (the operator uses them too). */
/* Whether a job with this (resolved) backend and precision must run on a GPU: nccl or bf16/fp16. */
bool rm_job_needs_gpu(rm_backend resolved, rm_precision prec);
/* RM_OK when the job needs no GPU or one is available; otherwise RM_EUNSUPPORTED with a message
 * that names what needed it and why there is none, e.g.
 * "precision bf16/backend nccl needs a GPU: cudaGetDeviceCount: no CUDA-capable device is detected".
 * Touches CUDA only when the job needs a GPU. */
int rm_gpu_require(rm_backend resolved, rm_precision prec, rm_err *err);
/* "fp32" | "bf16" | "fp16". */
const char *rm_precision_str(rm_precision p);
/* Bytes per element of the working (compute) copy: 4, 2, 2. */
size_t rm_precision_size(rm_precision p);

/* ---------------- conversions (bit-exact with CUDA's __float2bfloat16_rn / __float2half_rn) ---------------- */

/* Round to nearest, ties to even. NaN stays NaN (quieted, sign kept), +-inf stays inf, values past
 * the type's range become inf (fp16: |x| >= 65520), fp16 subnormals are produced exactly. */
uint16_t rm_f32_to_bf16(float f);
float rm_bf16_to_f32(uint16_t h);
uint16_t rm_f32_to_f16(float f);
float rm_f16_to_f32(uint16_t h);
/* Array forms (n elements; no allocation). */
void rm_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);
void rm_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void rm_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void rm_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);

/* ---------------- dynamic loss scaling (Micikevicius et al.; PyTorch GradScaler defaults) ---------------- */

#define RM_SCALER_INIT_SCALE 65536.0f   /* 2^16 */
#define RM_SCALER_GROWTH_FACTOR 2.0f
#define RM_SCALER_BACKOFF_FACTOR 0.5f
#define RM_SCALER_GROWTH_INTERVAL 2000

/* Per step: loss is multiplied by scale() before backward; gradients (after allreduce) are multiplied
 * by inv_scale() and checked for inf/NaN; every rank feeds the *agreed* flag (see
 * rm_loss_scaler_agree_flag) to update(), which says whether to apply the optimizer step.
 *   found_inf: scale *= 0.5, tracker = 0, step skipped.
 *   finite:    tracker++; when tracker reaches growth_interval: scale *= 2 (only if that stays
 *              finite), tracker = 0.
 * Disabled (fp32, bf16): scale is 1 and update() only refuses non-finite steps without changing it
 * (bf16 shares fp32's exponent range, so scaling buys nothing; a NaN step is still not applied). */
typedef struct rm_loss_scaler {
    bool enabled;
    float scale;
    float growth_factor, backoff_factor;
    int growth_interval;
    int growth_tracker;       /* consecutive finite steps since the last scale change */
    int64_t steps, skipped;   /* updates seen / steps skipped for overflow */
} rm_loss_scaler;

/* Enabled only for fp16; defaults above. */
void rm_loss_scaler_init(rm_loss_scaler *s, rm_precision prec);
float rm_loss_scaler_scale(const rm_loss_scaler *s);
float rm_loss_scaler_inv_scale(const rm_loss_scaler *s);
/* Returns true when the optimizer step must be applied, false when it is skipped. */
bool rm_loss_scaler_update(rm_loss_scaler *s, bool found_inf);
/* Agreement: every rank contributes its local flag as a float (0 or 1) to an allreduce (SUM, or
 * MAX); this turns the reduced value back into the decision, so all ranks skip together. NaN (a
 * poisoned reduction) counts as overflow. */
static inline float rm_loss_scaler_flag_value(bool local_found_inf) { return local_found_inf ? 1.0f : 0.0f; }
static inline bool rm_loss_scaler_agree_flag(float reduced) { return !(reduced == 0.0f); }
/* Checkpoint state: the scale and tracker are saved with the weights so a restart resumes them. */
void rm_loss_scaler_restore(rm_loss_scaler *s, float scale, int growth_tracker);

/* ---------------- one mixed-precision step, for the trainer ---------------- */

/* Ties the above together so the trainer adds a handful of lines:
 *   rm_amp amp;  rm_amp_init(&amp, k, precision, &err);           // once, after the table is chosen
 *   per step:    rm_model_backward(..., inv_batch * rm_amp_loss_scale(&amp), ...);
 *                (allreduce the gradients as usual)
 *                rc = rm_amp_finish(&amp, grads, n, ops, comm, &apply, &err);
 *                if (apply) optimizer step;                         // else all ranks skip together
 *   at exit:     rm_amp_free(&amp);
 * finish() is a no-op returning apply = true unless the scaler is enabled (fp16): then it unscales
 * the averaged gradients on the device (kernels table), reads the overflow flag, agrees it over the
 * comm with a 1-float SUM allreduce (host buffer; NULL ops = world of one) and updates the scaler.
 * init() switches the CUDA table's gemm precision (rm_gpu_set_precision) when k is the CUDA table;
 * with another table the gemms stay fp32 and only the scaler logic runs (used by the CPU tests).
 * Ownership: k, ops, comm borrowed; the 4-byte device flag is owned (rm_amp_free, NULL ok).
 * RM_EUNSUPPORTED: bf16/fp16 asked of a build or machine without a GPU (and k is the CUDA table). */
typedef struct rm_amp {
    const rm_kernels *k;
    rm_precision prec;
    rm_loss_scaler scaler;
    int32_t *flag;            /* device int32 */
    int64_t skipped_logged;
} rm_amp;

int rm_amp_init(rm_amp *a, const rm_kernels *k, rm_precision prec, rm_err *err);
float rm_amp_loss_scale(const rm_amp *a);
int rm_amp_finish(rm_amp *a, float *grads, size_t n, const rm_comm_ops *ops, rm_comm *comm,
                  bool *apply, rm_err *err);
void rm_amp_free(rm_amp *a);

#ifdef __cplusplus
}
#endif
#endif
