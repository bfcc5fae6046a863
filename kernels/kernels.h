/* kernels.h — the math of a training step behind one device-agnostic function table.
 *
 * Design: the trainer (worker/train.c) never branches on the device. It asks for a table
 * (rm_kernels_get("cpu") or ("cuda")) and calls through it: the CPU table (kernels/kernels_cpu.c)
 * is plain C plus OpenBLAS cblas_sgemm, single-threaded BLAS split over the kernels' own thread
 * pool (kernels/pool.h: the CPUs the worker was given); the CUDA table
 * (kernels/cuda/, GPU helper) implements the same entries with cuBLAS and CUDA kernels.
 *
 * Memory model: every float/int pointer given to a table entry is "device memory" of that table,
 * obtained from its alloc(). For the CPU table device memory is host memory (host_memory = true),
 * so the trainer may skip staging copies. Host data moves in and out only through h2d/d2h.
 * Ordering: all entries of one table are ordered as if issued on one stream; d2h returns after the
 * bytes are in host memory (it waits for earlier work); sync() waits for everything issued. Results
 * that are scalars (loss sum, correct count, found_inf) are written to device memory so a GPU step
 * needs no host round trip; read them with d2h when needed.
 *
 * Layouts: row-major fp32. A linear layer with `in` inputs and `out` outputs stores W as [in x out]
 * (row i = weights from input i) and b as [out]; a batch of activations is [rows x cols].
 * Forward:  Y = X.W          gemm(0,0, B,out,in, 1, X,in, W,out, 0, Y,out); bias_act_fwd(Y,b,B,out,act)
 * Backward: dW = X^T.dY      gemm(1,0, in,out,B, 1, X,in, dY,out, 0, dW,out)
 *           dX = dY.W^T      gemm(0,1, B,in,out, 1, dY,out, W,out, 0, dX,in)
 *
 * Ownership: tables are static, never freed. alloc() returns owned device memory released with the
 * same table's free() (NULL ok). No entry allocates, so a training step allocates nothing.
 * Entries may be NULL only where marked "optional" (the CPU table has no fp16/bf16 casts: mixed
 * precision runs on the GPU only, see worker/gpu.h). */
#ifndef RM_KERNELS_H
#define RM_KERNELS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "common/rm.h"

typedef enum { RM_ACT_NONE = 0, RM_ACT_RELU = 1 } rm_act;

typedef struct rm_kernels {
    const char *name; /* "cpu" | "cuda" */
    bool host_memory; /* true: device pointers are ordinary host pointers */

    /* ---- memory ---- */
    void *(*alloc)(size_t bytes); /* zero-filled, 64-byte aligned; NULL on ENOMEM */
    void (*free)(void *p);        /* NULL ok */
    /* The entries below return RM_OK or the table's first pending error (see check()): an error
     * raised by an earlier, asynchronous entry surfaces here at the latest, and a failed d2h fills
     * dst with 0xff bytes (a float NaN, an int32 -1) so a value read after a device fault never
     * looks like a valid 0 (a loss of 0, "no overflow"). */
    int (*memset0)(void *p, size_t bytes);
    int (*h2d)(void *dst, const void *src, size_t bytes);
    int (*d2h)(void *dst, const void *src, size_t bytes);
    int (*d2d)(void *dst, const void *src, size_t bytes);
    int (*sync)(void);
    /* The first error any entry of this table hit since the last check (the compute entries below
     * return void, like kernel launches; a device fault is sticky and reported by every later
     * call), then clears what can be cleared; RM_OK when none. Never blocks: a fault in work
     * still queued shows at a later check, d2h or sync. The trainer calls it once per step before
     * the optimizer update (worker/gpu.h rm_amp_finish) and fails the round on an error. */
    int (*check)(rm_err *err);

    /* ---- forward / backward ---- */
    /* C = alpha * op(A) . op(B) + beta * C, row-major; op(A) is M x K, op(B) is K x N. */
    void (*gemm)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
    /* Y[r][c] = act(Y[r][c] + b[c]) for a [rows x cols] Y. */
    void (*bias_act_fwd)(float *y, const float *b, int rows, int cols, rm_act act);
    /* dY *= act'(Y) (relu: 0 where Y <= 0; none: unchanged), then db[c] = sum_r dY[r][c]
     * (overwrites db). Y is the forward output after the activation. */
    void (*bias_act_bwd)(float *dy, const float *y, float *db, int rows, int cols, rm_act act);
    /* Softmax cross-entropy over [rows x classes] logits with int32 labels in [0, classes):
     * *loss_sum = sum over rows of -log softmax(label) (float, device memory, overwritten);
     * dlogits = (softmax - onehot) * inv_batch. dlogits may alias logits. */
    void (*softmax_xent_fwd_bwd)(const float *logits, const int32_t *labels, int rows, int classes,
                                 float inv_batch, float *dlogits, float *loss_sum);
    /* *correct = number of rows whose argmax (first maximum) equals the label (overwritten). */
    void (*argmax_correct)(const float *logits, const int32_t *labels, int rows, int classes,
                           int32_t *correct);

    /* ---- optimizers: fp32 master weights w, gradients g, state buffers, n elements ----
     * Weight decay is L2 added to the gradient (PyTorch semantics: g' = g + wd * w). */
    /* v = momentum * v + g'; w -= lr * v */
    void (*sgd_momentum_update)(float *w, const float *g, float *v, size_t n, float lr, float momentum,
                                float weight_decay);
    /* m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2; w -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
     * with bias corrections bc1 = 1 - b1^t, bc2 = 1 - b2^t computed by the caller (t >= 1). */
    void (*adam_update)(float *w, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, float bc1, float bc2);
    /* s += g'^2; w -= lr * g' / (sqrt(s) + eps) */
    void (*adagrad_update)(float *w, const float *g, float *s, size_t n, float lr, float eps,
                           float weight_decay);
    /* x *= a */
    void (*scale)(float *x, size_t n, float a);
    /* AdamW: w *= 1 - lr * wd (decoupled decay; the caller passes wd 0 for tensors it does not
     * decay), then adam_update's step with g itself (no decay in the gradient). */
    void (*adamw_update)(float *w, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float bc1, float bc2);
    /* LAMB's first half: m and v as adam_update's (with g itself), then sums[0] += sum w^2 and
     * sums[1] += sum r^2 for r = (m / bc1) / (sqrt(v / bc2) + eps) + wd * w (device floats,
     * accumulated: the caller zeroes them). */
    void (*lamb_moments)(const float *w, const float *g, float *m, float *v, size_t n, float beta1,
                         float beta2, float eps, float weight_decay, float bc1, float bc2, float *sums);
    /* LAMB's second half: w -= lr * r (r as above from the updated m, v; lr includes the tensor's
     * trust ratio). */
    void (*lamb_apply)(float *w, const float *m, const float *v, size_t n, float lr, float eps,
                       float weight_decay, float bc1, float bc2);
    /* LARS: v = momentum * v + lr * (g + wd * w); w -= v (lr includes the layer's trust ratio). */
    void (*lars_update)(float *w, const float *g, float *v, size_t n, float lr, float momentum,
                        float weight_decay);
    /* *acc += sum of x^2 (a device float, accumulated). Deterministic: the same x and n give the
     * same bits every time (no float atomics), so ranks holding equal data agree exactly. */
    void (*sumsq)(const float *x, size_t n, float *acc);
    /* y += a * x */
    void (*axpy)(float *y, const float *x, size_t n, float a);

    /* ---- mixed precision (optional: NULL in the CPU table) ---- */
    void (*cast_f32_to_bf16)(const float *src, uint16_t *dst, size_t n);
    void (*cast_bf16_to_f32)(const uint16_t *src, float *dst, size_t n);
    void (*cast_f32_to_f16)(const float *src, uint16_t *dst, size_t n);
    void (*cast_f16_to_f32)(const uint16_t *src, float *dst, size_t n);
    /* x *= inv_scale; *found_inf (device int32) is set to 1 if any x was inf/NaN before the
     * multiplication (GradScaler's order: an overflow is caught even where x * inv_scale would be
     * finite again), else left unchanged (the caller zeroes it once per step, so several buffers
     * can share the flag). inv_scale 1 checks without changing x. Optional: unit tests' tables. */
    void (*unscale_check_finite)(float *x, size_t n, float inv_scale, int32_t *found_inf);

    /* ---- host memory for per-step copies (optional: NULL means malloc/free) ----
     * Host buffers the trainer copies through every step (the batch staging, the checkpoint
     * payload). The CUDA table pins them (DMA without a staging copy); an h2d from such a buffer
     * returns once the copy is done, so "src may be reused on return" holds for every source.
     * Free only with the same table's host_free. Use rm_kernels_host_alloc/free below. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);

    /* ---- the transformer's kernels (optional: NULL where the table has none yet) ----
     * kernels/transformer.h; the model refuses type gpt on a table without them. */
    const struct rm_tf_kernels *tf;
} rm_kernels;

/* host_alloc, or malloc for a table without it; NULL on ENOMEM. */
static inline void *rm_kernels_host_alloc(const rm_kernels *k, size_t bytes)
{
    return k->host_alloc ? k->host_alloc(bytes) : malloc(bytes ? bytes : 1);
}

/* Releases what rm_kernels_host_alloc returned for the same table; NULL ok. */
static inline void rm_kernels_host_free(const rm_kernels *k, void *p)
{
    if (k->host_free)
        k->host_free(p);
    else
        free(p);
}

/* A copy's status rc (h2d, d2h) as the caller's error: RM_OK passes; a failure names `what` and,
 * when the table has a pending error (a CUDA call or device fault since the last check), that
 * error's text, which says more than the copy's own. */
static inline int rm_kernels_copy_error(const rm_kernels *k, int rc, const char *what, rm_err *err)
{
    if (rc == RM_OK)
        return RM_OK;
    rm_err detail = {0};
    if (k->check && k->check(&detail) != RM_OK)
        return rm_errf(err, rc, "copying the %s to or from the device failed: %s", what, detail.msg);
    return rm_errf(err, rc, "copying the %s to or from the device failed", what);
}

/* The CPU table (kernels/kernels_cpu.c). First call sets OpenBLAS to one thread per process; the
 * table's own pool (kernels/pool.h, width 1 until rm_kernels_set_threads) spreads its work over
 * the CPUs a worker is given. Never NULL. */
const rm_kernels *rm_kernels_cpu(void);

/* The CUDA table, with the device, precision and error controls that go with it: see
 * kernels/kernels_cuda.h (implemented in kernels/cuda/, stubbed in kernels/nocuda/). */
const rm_kernels *rm_kernels_cuda(void);

/* Spread a table's kernels over n CPUs (the CPU table's pool; a no-op for tables without one). */
void rm_kernels_set_threads(const rm_kernels *k, int n);

/* "cpu" or "cuda" -> the table; NULL when unknown or not available in this build or machine. */
static inline const rm_kernels *rm_kernels_get(const char *name)
{
    if (!name || !strcmp(name, "cpu"))
        return rm_kernels_cpu();
    if (!strcmp(name, "cuda"))
        return rm_kernels_cuda();
    return NULL;
}

#ifdef __cplusplus
}
#endif
#endif
