/* gpu.c — worker/gpu.h: GPU requirement checks, the local rank -> device rule, bf16/fp16
 * conversions, the dynamic loss scaler and the per-step finish. Compiled into every build (with or
 * without CUDA; the device itself is kernels/kernels_cuda.h's) so that all of it is unit-tested on
 * CPU-only machines (tests/unit/test_gpu_cpu.c).
 *
 * The conversions are written on the IEEE bit patterns (no hardware half type) and are bit-exact with
 * CUDA's __float2bfloat16_rn / __float2half_rn, which is what the GPU kernels use; the GPU tests compare
 * the two. */
#include "worker/gpu.h"

#include "common/log.h"
#include "common/worker_env.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- backend and precision ---------------- */

bool rm_job_needs_gpu(rm_backend resolved, rm_precision prec)
{
    return resolved == RM_BACKEND_NCCL || prec == RM_PREC_BF16 || prec == RM_PREC_FP16;
}

int rm_gpu_require(rm_backend resolved, rm_precision prec, rm_err *err)
{
    if (!rm_job_needs_gpu(resolved, prec))
        return RM_OK;
    char what[64];
    if (prec != RM_PREC_FP32 && resolved == RM_BACKEND_NCCL)
        snprintf(what, sizeof what, "precision %s/backend nccl", rm_precision_str(prec));
    else if (prec != RM_PREC_FP32)
        snprintf(what, sizeof what, "precision %s", rm_precision_str(prec));
    else
        snprintf(what, sizeof what, "backend nccl");
    char why[256];
    if (rm_gpu_available(why, sizeof why))
        return RM_OK;
    return rm_errf(err, RM_EUNSUPPORTED, "%s needs a GPU: %s", what, why);
}

/* ---------------- device choice ---------------- */

int rm_gpu_pick(int local_rank, int local_world, int visible, bool shared, int *device, rm_err *err)
{
    if (local_rank < 0)
        return rm_errf(err, RM_EINVAL, "LOCAL_RANK=%d: must be >= 0", local_rank);
    if (visible <= 0)
        return rm_errf(err, RM_EUNSUPPORTED, "no GPU visible");
    if (shared) {
        if (local_world > 0 && local_rank >= local_world)
            return rm_errf(err, RM_EINVAL, "LOCAL_RANK=%d outside LOCAL_WORLD_SIZE=%d", local_rank,
                           local_world);
        *device = local_rank % visible;
        return RM_OK;
    }
    if (local_world > visible || local_rank >= visible)
        return rm_errf(err, RM_EINVAL,
                       "%d local workers (LOCAL_RANK=%d, LOCAL_WORLD_SIZE=%d) but only %d GPU%s "
                       "visible: each worker on a host needs its own GPU (fewer replicas per host, "
                       "more GPUs, or CUDA_VISIBLE_DEVICES; with backend ring, " RM_ENV_GPU_SHARED
                       "=1 shares them)",
                       local_world > local_rank + 1 ? local_world : local_rank + 1, local_rank, local_world,
                       visible, visible == 1 ? "" : "s");
    if (local_world > 0 && local_rank >= local_world)
        return rm_errf(err, RM_EINVAL, "LOCAL_RANK=%d outside LOCAL_WORLD_SIZE=%d", local_rank, local_world);
    *device = local_rank;
    return RM_OK;
}

int rm_gpu_select(int local_rank, int *device, char *name, size_t cap, rm_err *err)
{
    int visible = 0, dev = -1;
    const char *lw = getenv("LOCAL_WORLD_SIZE");
    int local_world = lw && *lw ? atoi(lw) : 0;
    if (device)
        *device = -1;
    int rc = rm_cuda_device_count(&visible, err);
    if (rc != RM_OK)
        return rc;
    const char *sh = getenv(RM_ENV_GPU_SHARED);
    bool shared = sh && !strcmp(sh, "1");
    rc = rm_gpu_pick(local_rank, local_world, visible, shared, &dev, err);
    if (rc == RM_OK && shared && local_world > visible)
        rm_warn("gpu shared device=%d local_rank=%d local_world=%d visible=%d (" RM_ENV_GPU_SHARED
                "=1: the workers time-slice the GPUs; NCCL refuses two ranks on one device)",
                dev, local_rank, local_world, visible);
    if (rc != RM_OK)
        return rc;
    rc = rm_cuda_use_device(dev, name, cap, err);
    if (rc == RM_OK && device)
        *device = dev;
    return rc;
}

/* ---------------- conversions ---------------- */

static uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

uint16_t rm_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, force quiet */
        return (uint16_t)((x >> 16) | 0x0040u);
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb; /* ties to even; overflow carries into inf */
    return (uint16_t)(x >> 16);
}

float rm_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t rm_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN -> quiet NaN */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 (and inf) -> inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {   /* below 2^-14: subnormal or zero */
        if (ax < 0x33000000u) /* < 2^-25 -> +-0 */
            return sign;
        uint32_t e = ax >> 23; /* 102..112 */
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u)))
            h++; /* may carry into the smallest normal */
        return (uint16_t)(sign | h);
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t h = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* carry may reach the exponent: fine */
    return (uint16_t)(sign | h);
}

float rm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    if (e == 31)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

void rm_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = rm_f32_to_bf16(src[i]);
}

void rm_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = rm_bf16_to_f32(src[i]);
}

void rm_f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = rm_f32_to_f16(src[i]);
}

void rm_f16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = rm_f16_to_f32(src[i]);
}

/* ---------------- loss scaler ---------------- */

void rm_loss_scaler_init(rm_loss_scaler *s, rm_precision prec)
{
    memset(s, 0, sizeof *s);
    s->enabled = prec == RM_PREC_FP16;
    s->scale = s->enabled ? RM_SCALER_INIT_SCALE : 1.0f;
    s->growth_factor = RM_SCALER_GROWTH_FACTOR;
    s->backoff_factor = RM_SCALER_BACKOFF_FACTOR;
    s->growth_interval = RM_SCALER_GROWTH_INTERVAL;
}

float rm_loss_scaler_scale(const rm_loss_scaler *s)
{
    return s->enabled ? s->scale : 1.0f;
}

float rm_loss_scaler_inv_scale(const rm_loss_scaler *s)
{
    return s->enabled ? 1.0f / s->scale : 1.0f;
}

bool rm_loss_scaler_update(rm_loss_scaler *s, bool found_inf)
{
    s->steps++;
    if (found_inf) {
        s->skipped++;
        if (s->enabled) {
            float backed = s->scale * s->backoff_factor;
            s->scale = backed >= RM_SCALER_MIN_SCALE ? backed : RM_SCALER_MIN_SCALE;
            s->growth_tracker = 0;
        }
        return false;
    }
    if (!s->enabled)
        return true;
    if (++s->growth_tracker >= s->growth_interval) {
        float grown = s->scale * s->growth_factor;
        if (isfinite(grown))
            s->scale = grown;
        s->growth_tracker = 0;
    }
    return true;
}

void rm_loss_scaler_restore(rm_loss_scaler *s, float scale, int growth_tracker)
{
    if (!s->enabled)
        return;
    if (isfinite(scale) && scale >= RM_SCALER_MIN_SCALE)
        s->scale = scale;
    if (growth_tracker >= 0 && growth_tracker < s->growth_interval)
        s->growth_tracker = growth_tracker;
}

/* ---------------- one mixed-precision step ---------------- */

int rm_amp_init(rm_amp *a, const rm_kernels *k, rm_precision prec, rm_err *err)
{
    memset(a, 0, sizeof *a);
    if (!k)
        return rm_errf(err, RM_EINVAL, "amp: no kernels table");
    if (prec != RM_PREC_FP32 && prec != RM_PREC_BF16 && prec != RM_PREC_FP16)
        return rm_errf(err, RM_EINVAL, "amp: unknown precision %d", (int)prec);
    a->k = k;
    a->prec = prec;
    rm_loss_scaler_init(&a->scaler, prec);
    if (k->name && !strcmp(k->name, "cuda")) {
        int rc = rm_cuda_set_precision(prec, err);
        if (rc != RM_OK)
            return rc;
    }
    if (!k->unscale_check_finite)
        return rm_errf(err, RM_EUNSUPPORTED, "amp: the %s table cannot check gradients", k->name);
    a->flag = k->alloc(sizeof(int32_t));
    if (!a->flag)
        return rm_errf(err, RM_ENOMEM, "amp: out of device memory for the overflow flag");
    return RM_OK;
}

float rm_amp_loss_scale(const rm_amp *a)
{
    return rm_loss_scaler_scale(&a->scaler);
}

int rm_amp_finish(rm_amp *a, float *grads, size_t n, const rm_comm_ops *ops, rm_comm *comm, bool *apply,
                  rm_err *err)
{
    const rm_kernels *k = a->k;
    int32_t local = -1; /* what a failed d2h leaves too: counts as overflow, never as "fine" */
    int rc;
    *apply = false; /* on any error below the step is not applied */
    if ((rc = k->memset0(a->flag, sizeof(int32_t))) != RM_OK) {
        int crc = k->check(err);
        return crc != RM_OK ? crc : rm_errf(err, rc, "amp: resetting the overflow flag failed");
    }
    k->unscale_check_finite(grads, n, rm_loss_scaler_inv_scale(&a->scaler), a->flag);
    rc = k->d2h(&local, a->flag, sizeof local);
    /* any CUDA/cuBLAS error since the last step, this step's forward and backward included */
    int crc = k->check(err);
    if (crc != RM_OK)
        return crc;
    if (rc != RM_OK)
        return rm_errf(err, rc, "amp: reading the overflow flag failed");
    float v = rm_loss_scaler_flag_value(local != 0);
    if (ops && comm) {
        rc = ops->allreduce(comm, &v, 1, RM_DT_F32, RM_OP_SUM, err);
        if (rc != RM_OK)
            return rc;
    }
    bool overflow = rm_loss_scaler_agree_flag(v);
    *apply = rm_loss_scaler_update(&a->scaler, overflow);
    if (!*apply && a->scaler.skipped > a->skipped_logged) {
        a->skipped_logged = a->scaler.skipped;
        if (a->scaler.enabled)
            rm_info("fp16 overflow: step skipped, loss scale now %g skipped=%lld local=%d",
                    (double)a->scaler.scale, (long long)a->scaler.skipped, (int)(local != 0));
        else
            rm_warn("non-finite gradients: step skipped precision=%s skipped=%lld local=%d",
                    rm_precision_str(a->prec), (long long)a->scaler.skipped, (int)(local != 0));
    }
    return RM_OK;
}

void rm_amp_free(rm_amp *a)
{
    if (!a)
        return;
    if (a->flag && a->k)
        a->k->free(a->flag);
    a->flag = NULL;
}
