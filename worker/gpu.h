/* gpu.h — the worker's GPU policy: which job needs a GPU (and the message when there is none),
 * which device a local rank takes, and mixed precision (bf16/fp16 conversions with
 * round-to-nearest-even, PyTorch GradScaler-style dynamic loss scaling, and the per-step finish
 * that unscales, checks and refuses to apply a faulted or non-finite step).
 *
 * Design: the device itself (CUDA built? usable? the table's precision, stream and errors) belongs to
 * kernels/ and is declared in kernels/kernels_cuda.h; this header only decides, so all of it runs
 * and is unit-tested on CPU-only machines (tests/unit/test_gpu_cpu.c). Nothing here calls CUDA
 * unless the caller asks, so the one binary starts on machines without a GPU.
 *
 * Ownership: no function here allocates except rm_amp_init (see there); buffers (`why`, `name`)
 * are the caller's. */
#ifndef RM_WORKER_GPU_H
#define RM_WORKER_GPU_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/backend.h"
#include "common/rm.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "worker/comm/comm.h"

/* ---------------- device choice ---------------- */

/* The trainer's name for rm_cuda_available (kernels/kernels_cuda.h): true when this build has CUDA
 * and a device is usable; otherwise `why` (may be NULL) says why not. */
static inline bool rm_gpu_available(char *why, size_t cap)
{
    return rm_cuda_available(why, cap);
}

/* The device of a local rank (pure): local_rank itself, because every process on a host needs its
 * own GPU (NCCL refuses two ranks on one device, "Duplicate GPU"). local_world (0 = unknown) is the
 * number of workers on this host; visible the number of devices this process sees. RM_EINVAL with a
 * message naming the counts when local_rank or local_world exceeds the visible devices, so every
 * local rank fails the same way, at once, instead of at NCCL init. shared (RINGMASTER_GPU_SHARED=1,
 * docs/gpu.md): the workers time-slice the visible GPUs instead, local_rank % visible - for
 * transports that do not need a GPU per rank (ring, shm; not NCCL). */
int rm_gpu_pick(int local_rank, int local_world, int visible, bool shared, int *device, rm_err *err);
/* Pick (rm_gpu_pick, with LOCAL_WORLD_SIZE from the environment, 0 when unset) and make current the
 * device for this process, before the CUDA table is first used. *device (may be NULL) gets the
 * index, name (may be NULL) the device name and compute capability ("NVIDIA H100 80GB HBM3 sm_90").
 * RM_EUNSUPPORTED when no GPU, RM_EINVAL as rm_gpu_pick (err says why). */
int rm_gpu_select(int local_rank, int *device, char *name, size_t cap, rm_err *err);

/* ---------------- backend and precision resolution (pure) ---------------- */

/* rm_backend_resolve is in common/backend.h, rm_template_gpus in common/trainingjob.h. */
/* Whether a job with this (resolved) backend and precision must run on a GPU: nccl or bf16/fp16. */
bool rm_job_needs_gpu(rm_backend resolved, rm_precision prec);
/* RM_OK when the job needs no GPU or one is available; otherwise RM_EUNSUPPORTED with a message
 * that names what needed it and why there is none, e.g.
 * "precision bf16/backend nccl needs a GPU: cudaGetDeviceCount: no CUDA-capable device is detected".
 * Touches CUDA only when the job needs a GPU. */
int rm_gpu_require(rm_backend resolved, rm_precision prec, rm_err *err);

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

#define RM_SCALER_INIT_SCALE 65536.0f /* 2^16 */
#define RM_SCALER_GROWTH_FACTOR 2.0f
#define RM_SCALER_BACKOFF_FACTOR 0.5f
#define RM_SCALER_GROWTH_INTERVAL 2000
/* The scale never backs off below this (2^-24): it stays a normal float whose inverse is finite, so
 * a long run of overflows (a diverged model) can not drive it to 0 and turn every gradient into
 * 0 * inf = NaN. */
#define RM_SCALER_MIN_SCALE 0x1p-24f

/* Per step: loss is multiplied by scale() before backward; gradients (after allreduce) are checked
 * for inf/NaN and multiplied by inv_scale(); every rank feeds the *agreed* flag (see
 * rm_loss_scaler_agree_flag) to update(), which says whether to apply the optimizer step.
 *   found_inf: scale *= 0.5 (not below RM_SCALER_MIN_SCALE), tracker = 0, step skipped.
 *   finite:    tracker++; when tracker reaches growth_interval: scale *= 2 (only if that stays
 *              finite), tracker = 0.
 * Disabled (fp32, bf16): scale is 1 and update() only refuses non-finite steps without changing it
 * (bf16 shares fp32's exponent range, so scaling buys nothing; a NaN step is still not applied). */
typedef struct rm_loss_scaler {
    bool enabled;
    float scale;
    float growth_factor, backoff_factor;
    int growth_interval;
    int growth_tracker;     /* consecutive finite steps since the last scale change */
    int64_t steps, skipped; /* updates seen / steps skipped for overflow */
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
static inline float rm_loss_scaler_flag_value(bool local_found_inf)
{
    return local_found_inf ? 1.0f : 0.0f;
}
static inline bool rm_loss_scaler_agree_flag(float reduced)
{
    return !(reduced == 0.0f);
}
/* Checkpoint state: the scale and tracker are saved with the weights so a restart resumes them.
 * A scale that is not finite or below RM_SCALER_MIN_SCALE, or a tracker outside the interval, is
 * ignored (the current value stays). */
void rm_loss_scaler_restore(rm_loss_scaler *s, float scale, int growth_tracker);

/* ---------------- one mixed-precision step, for the trainer ---------------- */

/* Ties the above together so the trainer adds a handful of lines:
 *   rm_amp amp;  rm_amp_init(&amp, k, precision, &err);           // once, after the table is chosen
 *   per step:    rm_model_backward(..., inv_batch * rm_amp_loss_scale(&amp), ...);
 *                (allreduce the gradients as usual)
 *                rc = rm_amp_finish(&amp, grads, n, NULL, NULL, &apply, &err);
 *                if (rc) fail the round;                            // a device or comm fault
 *                if (apply) optimizer step;                         // else all ranks skip together
 *   at exit:     rm_amp_free(&amp);
 * finish(), in every precision:
 *  1. checks the gradients for inf/NaN on the device (the table's unscale_check_finite: with the
 *     fp16 scaler it also unscales, checking BEFORE the multiplication; fp32/bf16 check only);
 *  2. reads the flag (d2h) and asks the table's check() for any error since the last step: a failed
 *     CUDA/cuBLAS call or a device fault returns that error with *apply = false, so a faulted step is
 *     never applied and the trainer fails the round;
 *  3. agrees the flag over (ops, comm) with a 1-float SUM allreduce when they are given. The
 *     synchronous allreduce strategy passes NULL: its gradients are the allreduced ones, identical
 *     on every rank, so every rank already reads the same flag. Strategies whose ranks hold
 *     different gradients (sharded, parameter servers) pass their comm;
 *  4. updates the scaler: a non-finite step is skipped in every precision (fp16 also backs off).
 * init() switches the CUDA table's gemm precision (rm_cuda_set_precision) when k is the CUDA table;
 * with another table the gemms stay fp32 and only the scaler logic runs (used by the CPU tests).
 * Ownership: k, ops, comm borrowed; the 4-byte device flag is owned (rm_amp_free, NULL ok).
 * Errors: RM_EUNSUPPORTED for bf16/fp16 asked of a build or machine without a GPU (k the CUDA
 * table) or of a table without unscale_check_finite; finish() returns the table's or the comm's
 * error. */
typedef struct rm_amp {
    const rm_kernels *k;
    rm_precision prec;
    rm_loss_scaler scaler;
    int32_t *flag; /* device int32 */
    int64_t skipped_logged;
} rm_amp;

int rm_amp_init(rm_amp *a, const rm_kernels *k, rm_precision prec, rm_err *err);
float rm_amp_loss_scale(const rm_amp *a);
int rm_amp_finish(rm_amp *a, float *grads, size_t n, const rm_comm_ops *ops, rm_comm *comm, bool *apply,
                  rm_err *err);
void rm_amp_free(rm_amp *a);

#endif
