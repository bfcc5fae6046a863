/* test_gpu_cpu.c — the CPU-testable half of the GPU path (worker/gpu.h): bf16/fp16 conversions
 * against known bit patterns and independent oracles (GCC's _Float16, a double-precision nearest
 * search for bf16), the GradScaler-style loss scaler sequence, `backend: auto` resolution, the GPU
 * requirement message, and the CUDA table / NCCL table answers on a machine without a GPU.
 * The GPU kernels themselves are checked against these same routines in tests/gpu/. */
#include <CUnit/CUnit.h>
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cblas.h>
#include <stdlib.h>

#include "kernels/cuda/gemm_map.h"
#include "kernels/kernels.h"
#include "tests/unit/testutil.h"
#include "worker/comm/comm.h"
#include "common/trainingjob.h"
#include "worker/gpu.h"

static float fbits(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint32_t bitsf(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

/* ---------------- bf16 ---------------- */

static void test_bf16_known(void)
{
    CU_ASSERT_EQUAL(rm_f32_to_bf16(1.0f), 0x3f80);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(-2.0f), 0xc000);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(0.0f), 0x0000);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(fbits(0x40490fdbu)), 0x4049); /* pi */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(fbits(0x3f808000u)), 0x3f80); /* tie, even below */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(fbits(0x3f818000u)), 0x3f82); /* tie, odd -> up */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(fbits(0x3f808001u)), 0x3f81); /* just above tie */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(fbits(0x3f807fffu)), 0x3f80); /* just below tie */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(FLT_MAX), 0x7f80);            /* rounds past max -> inf */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(fbits(0x7f7f7fffu)), 0x7f7f); /* largest finite stays */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(INFINITY), 0x7f80);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(-INFINITY), 0xff80);
    CU_ASSERT_EQUAL(rm_f32_to_bf16(fbits(0x00000001u)), 0x0000); /* tiny subnormal -> 0 */
    CU_ASSERT_EQUAL(rm_f32_to_bf16(fbits(0x00018000u)), 0x0002); /* subnormal tie, odd -> up */
    uint16_t qn = rm_f32_to_bf16(fbits(0x7f800001u));            /* signalling NaN, payload low */
    CU_ASSERT((qn & 0x7f80) == 0x7f80 && (qn & 0x7f) != 0);      /* still a NaN, not inf */
    CU_ASSERT(isnan(rm_bf16_to_f32(rm_f32_to_bf16(NAN))));
    CU_ASSERT_EQUAL(bitsf(rm_bf16_to_f32(0x3f80)), 0x3f800000u);
    CU_ASSERT_EQUAL(bitsf(rm_bf16_to_f32(0xff80)), 0xff800000u);
}

/* Independent oracle: the nearer of the two bf16 neighbours, computed in double; ties to even. */
static uint16_t bf16_oracle(float f)
{
    uint32_t x = bitsf(f);
    if (isnan(f))
        return 0; /* not used for NaN */
    uint32_t lo = x & 0xffff0000u;
    uint32_t hi = lo + 0x10000u; /* next bf16 away from zero (may be inf) */
    double dl = fabs((double)f - (double)fbits(lo));
    double dh = (hi & 0x7fffffffu) >= 0x7f800000u ? fabs((double)f - ldexp(1.0, 128) * (f < 0 ? -1 : 1))
                                                  : fabs((double)fbits(hi) - (double)f);
    if (dl < dh)
        return (uint16_t)(lo >> 16);
    if (dh < dl)
        return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1u) ? hi >> 16 : lo >> 16);
}

static void test_bf16_sweep(void)
{
    int bad = 0;
    /* every bf16 round-trips exactly */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = rm_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        if (rm_f32_to_bf16(f) != h)
            bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* ~4M float patterns spread over the whole range (odd stride hits every low-bit pattern) */
    bad = 0;
    for (uint64_t i = 0; i < (1ull << 32); i += 1031) {
        float f = fbits((uint32_t)i);
        if (isnan(f))
            continue;
        if (rm_f32_to_bf16(f) != bf16_oracle(f) && bad++ < 3)
            printf("bf16 mismatch x=%08x got=%04x want=%04x\n", (uint32_t)i, rm_f32_to_bf16(f),
                   bf16_oracle(f));
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---------------- fp16 ---------------- */

static void test_f16_known(void)
{
    CU_ASSERT_EQUAL(rm_f32_to_f16(1.0f), 0x3c00);
    CU_ASSERT_EQUAL(rm_f32_to_f16(-2.0f), 0xc000);
    CU_ASSERT_EQUAL(rm_f32_to_f16(0.1f), 0x2e66);
    CU_ASSERT_EQUAL(rm_f32_to_f16(1.0f / 3.0f), 0x3555);
    CU_ASSERT_EQUAL(rm_f32_to_f16(65504.0f), 0x7bff); /* max finite */
    CU_ASSERT_EQUAL(rm_f32_to_f16(65519.0f), 0x7bff); /* below the midpoint */
    CU_ASSERT_EQUAL(rm_f32_to_f16(65520.0f), 0x7c00); /* midpoint, odd -> inf */
    CU_ASSERT_EQUAL(rm_f32_to_f16(1e9f), 0x7c00);
    CU_ASSERT_EQUAL(rm_f32_to_f16(-1e9f), 0xfc00);
    CU_ASSERT_EQUAL(rm_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);    /* smallest normal */
    CU_ASSERT_EQUAL(rm_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);    /* smallest subnormal */
    CU_ASSERT_EQUAL(rm_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);    /* tie with 0 -> even (0) */
    CU_ASSERT_EQUAL(rm_f32_to_f16(ldexpf(1.5f, -25)), 0x0001);    /* above the tie */
    CU_ASSERT_EQUAL(rm_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);    /* 1.5 ulp: tie, odd -> up */
    CU_ASSERT_EQUAL(rm_f32_to_f16(ldexpf(5.0f, -25)), 0x0002);    /* 2.5 ulp: tie, even -> down */
    CU_ASSERT_EQUAL(rm_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400); /* carries into the normal range */
    CU_ASSERT_EQUAL(rm_f32_to_f16(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(rm_f32_to_f16(1e-30f), 0x0000);
    CU_ASSERT_EQUAL(rm_f32_to_f16(INFINITY), 0x7c00);
    uint16_t n = rm_f32_to_f16(NAN);
    CU_ASSERT((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
    CU_ASSERT(isnan(rm_f16_to_f32(rm_f32_to_f16(fbits(0x7f800001u))))); /* sNaN stays NaN */
    CU_ASSERT_EQUAL(rm_f16_to_f32(0x0001), ldexpf(1.0f, -24));
    CU_ASSERT_EQUAL(rm_f16_to_f32(0x7bff), 65504.0f);
    CU_ASSERT_EQUAL(rm_f16_to_f32(0x3555), 0.333251953125f);
    CU_ASSERT(isinf(rm_f16_to_f32(0xfc00)) && rm_f16_to_f32(0xfc00) < 0);
}

static void test_f16_sweep(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = rm_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        if (rm_f32_to_f16(f) != h)
            bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
#if defined(__FLT16_MAX__)
    /* GCC's _Float16 conversion (libgcc soft-float, RNE) as an independent oracle */
    bad = 0;
    for (uint64_t i = 0; i < (1ull << 32); i += 1031) {
        float f = fbits((uint32_t)i);
        if (isnan(f))
            continue;
        _Float16 h = (_Float16)f;
        uint16_t want;
        memcpy(&want, &h, sizeof want);
        if (rm_f32_to_f16(f) != want && bad++ < 3)
            printf("f16 mismatch x=%08x got=%04x want=%04x\n", (uint32_t)i, rm_f32_to_f16(f), want);
        float back = (float)h;
        if (bitsf(rm_f16_to_f32(want)) != bitsf(back) && bad++ < 3)
            printf("f16->f32 mismatch h=%04x\n", want);
    }
    CU_ASSERT_EQUAL(bad, 0);
#endif
}

static void test_convert_arrays(void)
{
    float src[5] = {1.0f, -0.5f, 65520.0f, 3.0e-8f, 0.1f};
    uint16_t h[5], b[5];
    float back[5];
    rm_f32_to_f16_n(src, h, 5);
    rm_f32_to_bf16_n(src, b, 5);
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(h[i], rm_f32_to_f16(src[i]));
        CU_ASSERT_EQUAL(b[i], rm_f32_to_bf16(src[i]));
    }
    rm_f16_to_f32_n(h, back, 5);
    CU_ASSERT_EQUAL(back[0], 1.0f);
    CU_ASSERT(isinf(back[2]));
    rm_bf16_to_f32_n(b, back, 5);
    CU_ASSERT_EQUAL(back[1], -0.5f);
    CU_ASSERT(fabsf(back[4] - 0.1f) < 0.001f);
}

/* ---------------- loss scaler ---------------- */

static void test_scaler_sequence(void)
{
    rm_loss_scaler s;
    rm_loss_scaler_init(&s, RM_PREC_FP16);
    CU_ASSERT(s.enabled);
    CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), 65536.0f);
    CU_ASSERT_EQUAL(rm_loss_scaler_inv_scale(&s), 1.0f / 65536.0f);
    /* 1999 finite steps: unchanged; the 2000th doubles */
    for (int i = 0; i < 1999; i++)
        CU_ASSERT_FATAL(rm_loss_scaler_update(&s, false));
    CU_ASSERT_EQUAL(s.scale, 65536.0f);
    CU_ASSERT_EQUAL(s.growth_tracker, 1999);
    CU_ASSERT(rm_loss_scaler_update(&s, false));
    CU_ASSERT_EQUAL(s.scale, 131072.0f);
    CU_ASSERT_EQUAL(s.growth_tracker, 0);
    /* overflow: skip, halve, reset the tracker */
    for (int i = 0; i < 10; i++)
        rm_loss_scaler_update(&s, false);
    CU_ASSERT_FALSE(rm_loss_scaler_update(&s, true));
    CU_ASSERT_EQUAL(s.scale, 65536.0f);
    CU_ASSERT_EQUAL(s.growth_tracker, 0);
    CU_ASSERT_EQUAL(s.skipped, 1);
    /* consecutive overflows keep halving */
    CU_ASSERT_FALSE(rm_loss_scaler_update(&s, true));
    CU_ASSERT_FALSE(rm_loss_scaler_update(&s, true));
    CU_ASSERT_EQUAL(s.scale, 16384.0f);
    CU_ASSERT_EQUAL(s.skipped, 3);
    /* growth needs 2000 finite steps in a row again */
    for (int i = 0; i < 2000; i++)
        rm_loss_scaler_update(&s, false);
    CU_ASSERT_EQUAL(s.scale, 32768.0f);
    CU_ASSERT_EQUAL(s.steps, 2000 + 10 + 1 + 2 + 2000 + 0 + 0);
}

static void test_scaler_growth_stays_finite(void)
{
    rm_loss_scaler s;
    rm_loss_scaler_init(&s, RM_PREC_FP16);
    s.scale = ldexpf(1.0f, 127);
    for (int i = 0; i < 2000; i++)
        rm_loss_scaler_update(&s, false);
    CU_ASSERT(isfinite(s.scale));
    CU_ASSERT_EQUAL(s.scale, ldexpf(1.0f, 127));
    CU_ASSERT_EQUAL(s.growth_tracker, 0);
}

static void test_scaler_disabled(void)
{
    for (int p = RM_PREC_FP32; p <= RM_PREC_BF16; p++) {
        rm_loss_scaler s;
        rm_loss_scaler_init(&s, (rm_precision)p);
        CU_ASSERT_FALSE(s.enabled);
        CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), 1.0f);
        CU_ASSERT_EQUAL(rm_loss_scaler_inv_scale(&s), 1.0f);
        CU_ASSERT(rm_loss_scaler_update(&s, false));
        CU_ASSERT_FALSE(rm_loss_scaler_update(&s, true)); /* a NaN step is never applied */
        CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), 1.0f);
        for (int i = 0; i < 4000; i++)
            rm_loss_scaler_update(&s, false);
        CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), 1.0f);
    }
}

static void test_scaler_agree_and_restore(void)
{
    /* what an allreduce(SUM) of the per-rank flags gives: any rank's overflow skips everywhere */
    float flags[4] = {0, 0, 1, 0}, sum = 0;
    for (int i = 0; i < 4; i++)
        sum += rm_loss_scaler_flag_value(flags[i] != 0);
    CU_ASSERT(rm_loss_scaler_agree_flag(sum));
    CU_ASSERT_FALSE(rm_loss_scaler_agree_flag(0.0f));
    CU_ASSERT(rm_loss_scaler_agree_flag(NAN));
    CU_ASSERT(rm_loss_scaler_agree_flag(4.0f));
    /* two ranks fed the agreed flag stay in lock step */
    rm_loss_scaler a, b;
    rm_loss_scaler_init(&a, RM_PREC_FP16);
    rm_loss_scaler_init(&b, RM_PREC_FP16);
    for (int step = 0; step < 5000; step++) {
        bool local_a = step % 997 == 0, local_b = step % 1499 == 0;
        float reduced = rm_loss_scaler_flag_value(local_a) + rm_loss_scaler_flag_value(local_b);
        bool agreed = rm_loss_scaler_agree_flag(reduced);
        CU_ASSERT_EQUAL_FATAL(rm_loss_scaler_update(&a, agreed), rm_loss_scaler_update(&b, agreed));
    }
    CU_ASSERT_EQUAL(a.scale, b.scale);
    CU_ASSERT_EQUAL(a.growth_tracker, b.growth_tracker);
    /* restore from a checkpoint; garbage is ignored */
    rm_loss_scaler r;
    rm_loss_scaler_init(&r, RM_PREC_FP16);
    rm_loss_scaler_restore(&r, 1024.0f, 17);
    CU_ASSERT_EQUAL(r.scale, 1024.0f);
    CU_ASSERT_EQUAL(r.growth_tracker, 17);
    rm_loss_scaler_restore(&r, NAN, -3);
    CU_ASSERT_EQUAL(r.scale, 1024.0f);
    CU_ASSERT_EQUAL(r.growth_tracker, 17);
    rm_loss_scaler_restore(&r, 0.0f, 5000);
    CU_ASSERT_EQUAL(r.scale, 1024.0f);
    CU_ASSERT_EQUAL(r.growth_tracker, 17);
}

/* ---------------- backend selection ---------------- */

static void test_backend_resolve(void)
{
    CU_ASSERT_EQUAL(rm_backend_resolve(RM_BACKEND_AUTO, 0), RM_BACKEND_RING);
    CU_ASSERT_EQUAL(rm_backend_resolve(RM_BACKEND_AUTO, 1), RM_BACKEND_NCCL);
    CU_ASSERT_EQUAL(rm_backend_resolve(RM_BACKEND_AUTO, 8), RM_BACKEND_NCCL);
    CU_ASSERT_EQUAL(rm_backend_resolve(RM_BACKEND_AUTO, -1), RM_BACKEND_RING);
    CU_ASSERT_EQUAL(rm_backend_resolve(RM_BACKEND_MPI, 1), RM_BACKEND_MPI);
    CU_ASSERT_EQUAL(rm_backend_resolve(RM_BACKEND_RING, 4), RM_BACKEND_RING);
    CU_ASSERT_EQUAL(rm_backend_resolve(RM_BACKEND_NCCL, 0), RM_BACKEND_NCCL);
}

static void test_template_gpus(void)
{
    CU_ASSERT_EQUAL(rm_template_gpus(NULL), 0);
    const char *cases[][2] = {
        {"{\"spec\":{\"containers\":[{\"name\":\"w\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":1}}}]}}",
         "1"},
        {"{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"2\"}}},"
         "{\"resources\":{\"requests\":{\"nvidia.com/gpu\":1}}}]}}",
         "3"},
        {"{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{\"cpu\":\"2\"}}}]}}", "0"},
        {"{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"x1\"}}}]}}", "0"},
        {"{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{\"nvidia.com/gpu\":-4}}}]}}", "0"},
        {"{\"spec\":{\"containers\":{}}}", "0"},
        {"{\"metadata\":{}}", "0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *j = cJSON_Parse(cases[i][0]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j);
        CU_ASSERT_EQUAL(rm_template_gpus(j), cases[i][1][0] - '0');
        cJSON_Delete(j);
    }
    /* auto on a GPU template picks nccl */
    cJSON *j = cJSON_Parse(cases[0][0]);
    CU_ASSERT_EQUAL(rm_backend_resolve(RM_BACKEND_AUTO, rm_template_gpus(j)), RM_BACKEND_NCCL);
    cJSON_Delete(j);
}

static void test_needs_gpu(void)
{
    CU_ASSERT_FALSE(rm_job_needs_gpu(RM_BACKEND_RING, RM_PREC_FP32));
    CU_ASSERT_FALSE(rm_job_needs_gpu(RM_BACKEND_MPI, RM_PREC_FP32));
    CU_ASSERT(rm_job_needs_gpu(RM_BACKEND_NCCL, RM_PREC_FP32));
    CU_ASSERT(rm_job_needs_gpu(RM_BACKEND_RING, RM_PREC_BF16));
    CU_ASSERT(rm_job_needs_gpu(RM_BACKEND_RING, RM_PREC_FP16));
    CU_ASSERT_STRING_EQUAL(rm_precision_str(RM_PREC_BF16), "bf16");
    CU_ASSERT_EQUAL(rm_precision_size(RM_PREC_FP32), 4);
    CU_ASSERT_EQUAL(rm_precision_size(RM_PREC_FP16), 2);
    /* a CPU job never touches CUDA and always passes */
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_gpu_require(RM_BACKEND_RING, RM_PREC_FP32, &e), RM_OK);
}

/* On this machine class (no GPU) the GPU job gets a clear error; on a GPU machine it passes. */
static void test_require_message(void)
{
    char why[256] = "";
    bool have = rm_gpu_available(why, sizeof why);
    rm_err e = {0};
    int rc = rm_gpu_require(RM_BACKEND_NCCL, RM_PREC_BF16, &e);
    if (have) {
        CU_ASSERT_EQUAL(rc, RM_OK);
        return;
    }
    CU_ASSERT(why[0] != '\0');
    CU_ASSERT_EQUAL(rc, RM_EUNSUPPORTED);
    CU_ASSERT(strncmp(e.msg, "precision bf16/backend nccl needs a GPU: ", 41) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, why));
    const char *expect = rm_cuda_built() ? "cudaGetDeviceCount" : "built without CUDA";
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, expect));
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_gpu_require(RM_BACKEND_RING, RM_PREC_FP16, &e), RM_EUNSUPPORTED);
    CU_ASSERT(strncmp(e.msg, "precision fp16 needs a GPU: ", 28) == 0);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_gpu_require(RM_BACKEND_NCCL, RM_PREC_FP32, &e), RM_EUNSUPPORTED);
    CU_ASSERT(strncmp(e.msg, "backend nccl needs a GPU: ", 26) == 0);
    /* without a GPU the CUDA table is absent and selecting a device fails with the reason */
    CU_ASSERT_PTR_NULL(rm_kernels_cuda());
    /* a failed initialisation says why and is tried again (not a pthread_once that stays failed) */
    char init_why[512] = "x";
    rm_cuda_init_error(init_why, sizeof init_why);
    CU_ASSERT(init_why[0] != '\0' && strcmp(init_why, "x") != 0);
    CU_ASSERT_PTR_NULL(rm_kernels_cuda());
    CU_ASSERT_FALSE(rm_cuda_sync_check_enabled());
    CU_ASSERT_EQUAL(rm_cuda_device(), -1);
    int dev = 7;
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_gpu_select(0, &dev, NULL, 0, &e), RM_EUNSUPPORTED);
    CU_ASSERT(e.msg[0] != '\0');
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_cuda_set_precision(RM_PREC_BF16, &e), RM_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "needs a GPU"));
    CU_ASSERT_PTR_NULL(rm_cuda_compute_stream());
    CU_ASSERT_EQUAL(rm_cuda_check(&e), RM_OK);
}

/* The NCCL table exists exactly when the build has CUDA; without a GPU its init fails cleanly. */
static void test_nccl_table_without_gpu(void)
{
    const rm_comm_ops *ops = rm_comm_nccl_ops();
    if (!rm_cuda_built()) {
        CU_ASSERT_PTR_NULL(ops);
        return;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(ops);
    CU_ASSERT_STRING_EQUAL(ops->name, "nccl");
    if (rm_gpu_available(NULL, 0))
        return;
    rm_comm_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.rank = 0;
    cfg.world_size = 1;
    cfg.timeout_s = 1;
    cfg.listen_fd = -1;
    rm_comm *c = (rm_comm *)0x1;
    rm_err e = {0};
    CU_ASSERT_EQUAL(ops->init(&cfg, &c, &e), RM_EUNSUPPORTED);
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "needs a GPU"));
    ops->destroy(NULL);
    ops->abort(NULL);
}

/* ---------------- rm_amp: the scaler step through a kernels table and a comm ---------------- */

/* A comm whose "other rank" contributes `remote` to the flag allreduce. */
static float g_remote;
static int g_fake_calls;
static int fake_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    (void)c;
    (void)err;
    g_fake_calls++;
    CU_ASSERT_EQUAL(count, 1);
    CU_ASSERT_EQUAL(dt, RM_DT_F32);
    CU_ASSERT_EQUAL(op, RM_OP_SUM);
    *(float *)buf += g_remote;
    return RM_OK;
}
static int fake_allreduce_fail(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    (void)c, (void)buf, (void)count, (void)dt, (void)op;
    return rm_errf(err, RM_ETIMEDOUT, "peer gone");
}

static void test_amp_step(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_comm_ops fake = {0};
    fake.name = "fake";
    fake.allreduce = fake_allreduce;
    rm_comm *dummy = (rm_comm *)&fake; /* never dereferenced by the fake */
    rm_err e = {0};
    rm_amp a;
    bool apply = false;
    float g[4] = {65536.0f, -131072.0f, 0.0f, 32768.0f};

    /* fp32: nothing changes the gradients; without a comm no collective; finite -> apply */
    CU_ASSERT_EQUAL_FATAL(rm_amp_init(&a, k, RM_PREC_FP32, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_amp_loss_scale(&a), 1.0f);
    g_fake_calls = 0;
    g_remote = 0;
    CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 4, NULL, NULL, &apply, &e), RM_OK);
    CU_ASSERT(apply);
    CU_ASSERT_EQUAL(g_fake_calls, 0);
    CU_ASSERT_EQUAL(g[0], 65536.0f);
    rm_amp_free(&a);

    /* fp16: unscale, agree, update */
    CU_ASSERT_EQUAL_FATAL(rm_amp_init(&a, k, RM_PREC_FP16, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_amp_loss_scale(&a), 65536.0f);
    g_remote = 0;
    CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 4, &fake, dummy, &apply, &e), RM_OK);
    CU_ASSERT(apply);
    CU_ASSERT_EQUAL(g_fake_calls, 1);
    CU_ASSERT_EQUAL(g[0], 1.0f);
    CU_ASSERT_EQUAL(g[1], -2.0f);
    CU_ASSERT_EQUAL(g[3], 0.5f);
    /* local overflow: skip and halve */
    g[2] = INFINITY;
    CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 4, &fake, dummy, &apply, &e), RM_OK);
    CU_ASSERT_FALSE(apply);
    CU_ASSERT_EQUAL(rm_amp_loss_scale(&a), 32768.0f);
    /* finite here but another rank overflowed: this rank skips too */
    g[2] = 1.0f;
    g_remote = 1.0f;
    CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 4, &fake, dummy, &apply, &e), RM_OK);
    CU_ASSERT_FALSE(apply);
    CU_ASSERT_EQUAL(rm_amp_loss_scale(&a), 16384.0f);
    CU_ASSERT_EQUAL(a.scaler.skipped, 2);
    /* world of one (no comm) */
    g_remote = 0;
    CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 4, NULL, NULL, &apply, &e), RM_OK);
    CU_ASSERT(apply);
    /* a failing flag allreduce is an error, never a silent apply */
    fake.allreduce = fake_allreduce_fail;
    apply = true;
    CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 4, &fake, dummy, &apply, &e), RM_ETIMEDOUT);
    CU_ASSERT_FALSE(apply);
    rm_amp_free(&a);
    rm_amp_free(NULL);

    CU_ASSERT_EQUAL(rm_amp_init(&a, NULL, RM_PREC_FP16, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_amp_init(&a, k, (rm_precision)7, &e), RM_EINVAL);
}

/* gpu.h promises that a NaN/inf step is never applied, whatever the precision: fp32 and bf16
 * (scaler disabled) skip it without touching the scale or the gradients. */
static void test_amp_nonfinite_skipped_every_precision(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_precision precs[] = {RM_PREC_FP32, RM_PREC_FP16};
    for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
        rm_err e = {0};
        rm_amp a;
        bool apply = true;
        CU_ASSERT_EQUAL_FATAL(rm_amp_init(&a, k, precs[p], &e), RM_OK);
        float scale = rm_amp_loss_scale(&a);
        float g[3] = {1.0f, NAN, 2.0f};
        CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 3, NULL, NULL, &apply, &e), RM_OK);
        CU_ASSERT_FALSE(apply);
        CU_ASSERT_EQUAL(a.scaler.skipped, 1);
        if (precs[p] == RM_PREC_FP32) {
            CU_ASSERT_EQUAL(rm_amp_loss_scale(&a), 1.0f);
            CU_ASSERT_EQUAL(g[0], 1.0f); /* check only: nothing multiplied */
        } else {
            CU_ASSERT_EQUAL(rm_amp_loss_scale(&a), scale * 0.5f);
        }
        g[1] = -INFINITY;
        CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 3, NULL, NULL, &apply, &e), RM_OK);
        CU_ASSERT_FALSE(apply);
        g[1] = 0.0f;
        CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 3, NULL, NULL, &apply, &e), RM_OK);
        CU_ASSERT(apply);
        rm_amp_free(&a);
    }
    /* bf16 has no CPU gemm precision, but its scaler logic is fp32's: disabled and still refusing */
    rm_loss_scaler s;
    rm_loss_scaler_init(&s, RM_PREC_BF16);
    CU_ASSERT_FALSE(rm_loss_scaler_update(&s, true));
    CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), 1.0f);
}

/* The scaled gradient is checked before the multiplication (GradScaler) and the product after it:
 * an inf input is caught even with a zero inverse, a finite input pushed past FLT_MAX by a scale
 * below 1 is caught too, and inv_scale 1 checks without writing. */
static void test_unscale_check_order(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    int32_t flag = 0;
    float x[2] = {FLT_MAX, 1.0f};
    k->unscale_check_finite(x, 2, 2.0f, &flag);
    CU_ASSERT_EQUAL(flag, 1);
    CU_ASSERT(isinf(x[0]));
    float y[2] = {INFINITY, 1.0f};
    flag = 0;
    k->unscale_check_finite(y, 2, 0.5f, &flag);
    CU_ASSERT_EQUAL(flag, 1);
    float z[2] = {3.0f, -1.0f};
    flag = 0;
    k->unscale_check_finite(z, 2, 1.0f, &flag);
    CU_ASSERT_EQUAL(flag, 0);
    CU_ASSERT_EQUAL(z[0], 3.0f);
    k->unscale_check_finite(z, 2, 0.5f, &flag);
    CU_ASSERT_EQUAL(flag, 0); /* left unchanged, not cleared, when all finite */
    CU_ASSERT_EQUAL(z[0], 1.5f);
    flag = 1;
    k->unscale_check_finite(z, 2, 0.5f, &flag);
    CU_ASSERT_EQUAL(flag, 1);
}

/* The scale backs off to a floor, never to 0 (whose inverse is inf: every gradient NaN). */
static void test_scaler_never_underflows(void)
{
    rm_loss_scaler s;
    rm_loss_scaler_init(&s, RM_PREC_FP16);
    for (int i = 0; i < 400; i++)
        CU_ASSERT_FALSE(rm_loss_scaler_update(&s, true));
    CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), RM_SCALER_MIN_SCALE);
    CU_ASSERT(isfinite(rm_loss_scaler_inv_scale(&s)));
    CU_ASSERT(rm_loss_scaler_scale(&s) > 0.0f);
    /* a checkpoint with a 0 or subnormal scale is not restored */
    rm_loss_scaler_restore(&s, 0.0f, 0);
    CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), RM_SCALER_MIN_SCALE);
    rm_loss_scaler_restore(&s, 1e-40f, 0);
    CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), RM_SCALER_MIN_SCALE);
    rm_loss_scaler_restore(&s, 1024.0f, 5);
    CU_ASSERT_EQUAL(rm_loss_scaler_scale(&s), 1024.0f);
}

/* ---------------- a faulting device: the step fails, never applies, never reads 0 ---------------- */

/* A kernels table around the CPU one whose device "faults" at a chosen moment: like CUDA, the
 * compute entries return nothing, the fault is sticky, and d2h/check report it. */
static int g_fault; /* 0 healthy; else the RM_E* code every later call reports */
static int g_fault_at_unscale;
static int fk_memset0(void *p, size_t b)
{
    return g_fault ? g_fault : rm_kernels_cpu()->memset0(p, b);
}
static int fk_d2h(void *d, const void *s, size_t b)
{
    if (g_fault) {
        memset(d, 0xff, b); /* the contract: a failed read is never a valid-looking value */
        return g_fault;
    }
    return rm_kernels_cpu()->d2h(d, s, b);
}
static int fk_check(rm_err *err)
{
    return g_fault ? rm_errf(err, g_fault, "fake device fault") : RM_OK;
}
static void fk_unscale(float *x, size_t n, float inv, int32_t *flag)
{
    if (g_fault_at_unscale) {
        g_fault = RM_EIO; /* the kernel "faults": nothing written, flag left as it was */
        return;
    }
    rm_kernels_cpu()->unscale_check_finite(x, n, inv, flag);
}

static void test_amp_fails_step_on_device_fault(void)
{
    rm_kernels fk = *rm_kernels_cpu();
    fk.name = "faulty";
    fk.memset0 = fk_memset0;
    fk.d2h = fk_d2h;
    fk.check = fk_check;
    fk.unscale_check_finite = fk_unscale;
    rm_precision precs[] = {RM_PREC_FP32, RM_PREC_FP16};
    for (size_t p = 0; p < 2; p++) {
        rm_err e = {0};
        rm_amp a;
        bool apply = true;
        g_fault = 0;
        g_fault_at_unscale = 0;
        CU_ASSERT_EQUAL_FATAL(rm_amp_init(&a, &fk, precs[p], &e), RM_OK);
        float g[2] = {1.0f, 2.0f};
        CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 2, NULL, NULL, &apply, &e), RM_OK);
        CU_ASSERT(apply);
        /* the backward faulted earlier in the step: finish reports it and does not apply */
        g_fault = RM_EIO;
        apply = true;
        memset(&e, 0, sizeof e);
        CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 2, NULL, NULL, &apply, &e), RM_EIO);
        CU_ASSERT_FALSE(apply);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "fault"));
        /* the check kernel itself faults: the flag read fails; still an error, not "no overflow" */
        g_fault = 0;
        g_fault_at_unscale = 1;
        apply = true;
        CU_ASSERT_EQUAL(rm_amp_finish(&a, g, 2, NULL, NULL, &apply, &e), RM_EIO);
        CU_ASSERT_FALSE(apply);
        CU_ASSERT_EQUAL(a.scaler.skipped, 0); /* a fault is not an overflow: the scale stays */
        g_fault = 0;
        g_fault_at_unscale = 0;
        rm_amp_free(&a);
    }
    /* and the d2h contract itself: a failed read of a loss is NaN, of a count -1 */
    g_fault = RM_EIO;
    float loss = 0.0f;
    int32_t count = 0;
    CU_ASSERT_EQUAL(fk.d2h(&loss, &loss, sizeof loss), RM_EIO);
    CU_ASSERT(isnan(loss));
    CU_ASSERT_EQUAL(fk.d2h(&count, &count, sizeof count), RM_EIO);
    CU_ASSERT_EQUAL(count, -1);
    g_fault = 0;
}

/* ---------------- local rank -> device ---------------- */

static void test_gpu_pick(void)
{
    rm_err e = {0};
    int dev = -7;
    CU_ASSERT_EQUAL(rm_gpu_pick(0, 1, 1, false, &dev, &e), RM_OK);
    CU_ASSERT_EQUAL(dev, 0);
    CU_ASSERT_EQUAL(rm_gpu_pick(3, 4, 8, false, &dev, &e), RM_OK);
    CU_ASSERT_EQUAL(dev, 3);
    CU_ASSERT_EQUAL(rm_gpu_pick(0, 0, 2, false, &dev, &e), RM_OK); /* LOCAL_WORLD_SIZE unknown */
    CU_ASSERT_EQUAL(dev, 0);
    /* more local ranks than GPUs: a clear error, for every rank (rank 0 too), not a shared device */
    dev = -7;
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_gpu_pick(2, 4, 2, false, &dev, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(dev, -7);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "4 local workers"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "only 2 GPUs visible"));
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_gpu_pick(0, 4, 2, false, &dev, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "LOCAL_WORLD_SIZE=4"));
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_gpu_pick(1, 0, 1, false, &dev, &e), RM_EINVAL); /* unknown world, rank past */
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "only 1 GPU visible"));
    CU_ASSERT_EQUAL(rm_gpu_pick(-1, 1, 1, false, &dev, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_gpu_pick(2, 2, 4, false, &dev, &e), RM_EINVAL); /* rank outside its world */
    CU_ASSERT_EQUAL(rm_gpu_pick(0, 1, 0, false, &dev, &e), RM_EUNSUPPORTED);
    /* shared (RINGMASTER_GPU_SHARED=1): ranks time-slice the GPUs round robin; the rank must still
     * be inside its world, and no GPU is still an error */
    CU_ASSERT_EQUAL(rm_gpu_pick(2, 4, 2, true, &dev, &e), RM_OK);
    CU_ASSERT_EQUAL(dev, 0);
    CU_ASSERT_EQUAL(rm_gpu_pick(3, 4, 1, true, &dev, &e), RM_OK);
    CU_ASSERT_EQUAL(dev, 0);
    CU_ASSERT_EQUAL(rm_gpu_pick(3, 4, 2, true, &dev, &e), RM_OK);
    CU_ASSERT_EQUAL(dev, 1);
    CU_ASSERT_EQUAL(rm_gpu_pick(4, 4, 2, true, &dev, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_gpu_pick(0, 2, 0, true, &dev, &e), RM_EUNSUPPORTED);
}

/* ---------------- the row-major -> column-major cuBLAS mapping, checked with OpenBLAS ---------------- */

static uint64_t g_seed = 12345;
static float urand(void)
{
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_seed >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

/* CUDA's cu_gemm hands cuBLAS (column-major) what rm_gemm_colmajor says; OpenBLAS's column-major
 * sgemm stands in for cuBLAS here. Both the direct fp32 call and the packed (bf16/fp16 scratch)
 * call must equal the row-major product. */
static void test_gemm_mapping(void)
{
    int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 4, 9}, {8, 33, 2}, {64, 10, 128}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = (t & 2) != 0;
            int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
            int a_rows, a_cols, b_rows, b_cols;
            rm_gemm_stored(ta, m, k, &a_rows, &a_cols);
            rm_gemm_stored(tb, k, n, &b_rows, &b_cols);
            CU_ASSERT_EQUAL(ta ? a_rows : a_cols, k);
            CU_ASSERT_EQUAL(tb ? b_cols : b_rows, k);
            int lda = a_cols + 2, ldb = b_cols + 3, ldc = n + 1;
            float *a = malloc(sizeof(float) * (size_t)a_rows * lda);
            float *b = malloc(sizeof(float) * (size_t)b_rows * ldb);
            float *pa = malloc(sizeof(float) * (size_t)a_rows * a_cols);
            float *pb = malloc(sizeof(float) * (size_t)b_rows * b_cols);
            float *c[3];
            for (int i = 0; i < 3; i++)
                c[i] = malloc(sizeof(float) * (size_t)m * ldc);
            CU_ASSERT_FATAL(a && b && pa && pb && c[0] && c[1] && c[2]);
            for (int i = 0; i < a_rows * lda; i++)
                a[i] = urand();
            for (int i = 0; i < b_rows * ldb; i++)
                b[i] = urand();
            for (int i = 0; i < m * ldc; i++)
                c[0][i] = c[1][i] = c[2][i] = urand();
            for (int r = 0; r < a_rows; r++)
                memcpy(pa + (size_t)r * a_cols, a + (size_t)r * lda, sizeof(float) * (size_t)a_cols);
            for (int r = 0; r < b_rows; r++)
                memcpy(pb + (size_t)r * b_cols, b + (size_t)r * ldb, sizeof(float) * (size_t)b_cols);
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                        k, 0.5f, a, lda, b, ldb, 0.25f, c[0], ldc);
            rm_gemm_cm g = rm_gemm_colmajor(ta, tb, m, n, k, lda, ldb);
            CU_ASSERT_EQUAL(g.first_is_b, 1);
            cblas_sgemm(CblasColMajor, g.trans_first ? CblasTrans : CblasNoTrans,
                        g.trans_second ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 0.5f, b, g.ld_first, a,
                        g.ld_second, 0.25f, c[1], ldc);
            g = rm_gemm_colmajor(ta, tb, m, n, k, a_cols, b_cols);
            cblas_sgemm(CblasColMajor, g.trans_first ? CblasTrans : CblasNoTrans,
                        g.trans_second ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 0.5f, pb, g.ld_first, pa,
                        g.ld_second, 0.25f, c[2], ldc);
            int bad = 0;
            for (int i = 0; i < m * ldc; i++)
                for (int v = 1; v < 3; v++)
                    if (fabsf(c[v][i] - c[0][i]) > 1e-5f * (1.0f + fabsf(c[0][i])))
                        bad++;
            CU_ASSERT_EQUAL(bad, 0);
            if (bad)
                printf("gemm mapping wrong: ta=%d tb=%d m=%d n=%d k=%d\n", ta, tb, m, n, k);
            free(a), free(b), free(pa), free(pb);
            for (int i = 0; i < 3; i++)
                free(c[i]);
        }
    }
}

void rm_suite_gpu_cpu(void)
{
    static const rm_test_case cases[] = {
        {"bf16 known values", test_bf16_known},
        {"bf16 sweep vs nearest oracle", test_bf16_sweep},
        {"fp16 known values", test_f16_known},
        {"fp16 sweep vs _Float16", test_f16_sweep},
        {"array conversions", test_convert_arrays},
        {"loss scaler sequence", test_scaler_sequence},
        {"loss scaler growth stays finite", test_scaler_growth_stays_finite},
        {"loss scaler disabled for fp32/bf16", test_scaler_disabled},
        {"loss scaler agreement and restore", test_scaler_agree_and_restore},
        {"backend auto resolution", test_backend_resolve},
        {"gpus requested by a pod template", test_template_gpus},
        {"which jobs need a GPU", test_needs_gpu},
        {"GPU job without a GPU: clear error", test_require_message},
        {"nccl table without a GPU", test_nccl_table_without_gpu},
        {"amp step: unscale, agree, skip together", test_amp_step},
        {"amp: a non-finite step is skipped in every precision", test_amp_nonfinite_skipped_every_precision},
        {"amp: a device fault fails the step, never applies", test_amp_fails_step_on_device_fault},
        {"unscale checks the input and the product", test_unscale_check_order},
        {"loss scale never underflows to 0", test_scaler_never_underflows},
        {"local rank -> device: more ranks than GPUs is an error", test_gpu_pick},
        {"cuBLAS column-major mapping (checked with OpenBLAS)", test_gemm_mapping},
    };
    RM_ADD_SUITE("gpu_cpu", NULL, NULL, cases);
}
