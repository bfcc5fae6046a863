/* Tests for worker/pipeline/pipeline_core (docs/strategies.md#pipeline-stages) as tables: grid
 * placement, stage partitioning (the default MLP's parameter counts, every P dividing the layers,
 * remainders, one heavy layer), the micro-batch split, both schedules' per-stage event lists, their
 * in-flight activation counts and the simulated bubble against the textbook (P-1)/(M+P-1). */
#include "common/worker_env.h"
#include "tests/unit/testutil.h"
#include "worker/checkpoint/ckpt_shard.h"
#include "worker/comm/comm.h"
#include "worker/model/mlp.h"
#include "worker/gpu.h"
#include "worker/pipeline/pipe_link.h"
#include "worker/pipeline/pipeline_core.h"
#include "worker/allreduce/shard.h"
#include "worker/step.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_placement(void)
{
    static const struct {
        int rank, world, P, stage, replica, prev, next;
    } t[] = {
        {0, 1, 1, 0, 0, -1, -1}, {0, 2, 2, 0, 0, -1, 1},
        {1, 2, 2, 1, 0, 0, -1},  {2, 4, 2, 0, 1, -1, 3}, /* r = d*P + p: rank 2 is stage 0 of replica 1 */
        {3, 4, 2, 1, 1, 2, -1},  {4, 6, 3, 1, 1, 3, 5},
        {3, 4, 1, 0, 3, -1, -1}, /* P = 1: pure data parallelism */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rm_pipe_place pl;
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_pipe_place_of(t[i].rank, t[i].world, t[i].P, &pl, &e), RM_OK);
        CU_ASSERT_EQUAL(pl.stage, t[i].stage);
        CU_ASSERT_EQUAL(pl.replica, t[i].replica);
        CU_ASSERT_EQUAL(pl.prev, t[i].prev);
        CU_ASSERT_EQUAL(pl.next, t[i].next);
        CU_ASSERT_EQUAL(pl.replicas, t[i].world / t[i].P);
        CU_ASSERT_EQUAL(rm_pipe_rank(t[i].P, pl.replica, pl.stage), t[i].rank);
    }
    rm_pipe_place pl;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_pipe_place_of(0, 3, 2, &pl, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_pipe_place_of(4, 4, 2, &pl, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_pipe_place_of(0, 4, 0, &pl, &e), RM_EINVAL);
}

static void test_partition(void)
{
    /* 784-512-256-10: 401920, 131328, 2570 parameters */
    static const uint64_t mlp[] = {401920, 131328, 2570};
    static const uint64_t six[] = {10, 10, 10, 10, 10, 10};
    static const uint64_t five[] = {7, 7, 7, 7, 7};
    static const uint64_t heavy[] = {1, 1, 100, 1, 1, 1};
    static const uint64_t deep[] = {803840,  1049600, 1049600, 1049600, 1049600,
                                    1049600, 1049600, 1049600, 10250}; /* 784-8x1024-10 */
    static const struct {
        const uint64_t *cost;
        int n, P;
        int bounds[RM_PIPE_MAX_STAGES + 1];
    } t[] = {
        {mlp, 3, 1, {0, 3}},
        {mlp, 3, 2, {0, 1, 3}}, /* W0 alone outweighs the rest */
        {mlp, 3, 3, {0, 1, 2, 3}},
        {six, 6, 1, {0, 6}}, /* every P that divides 6: equal stages */
        {six, 6, 2, {0, 3, 6}},
        {six, 6, 3, {0, 2, 4, 6}},
        {six, 6, 6, {0, 1, 2, 3, 4, 5, 6}},
        {five, 5, 2, {0, 3, 5}}, /* remainders: earlier stages take the extra layer */
        {five, 5, 3, {0, 2, 4, 5}},
        {five, 5, 4, {0, 2, 3, 4, 5}},
        {heavy, 6, 2, {0, 3, 6}},    /* the heavy layer bounds the max; ties go front */
        {heavy, 6, 3, {0, 2, 3, 6}}, /* heavy alone */
        {deep, 9, 2, {0, 4, 9}},
        {deep, 9, 4, {0, 2, 4, 6, 9}},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int b[RM_PIPE_MAX_STAGES + 1];
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_pipe_partition(t[i].cost, t[i].n, t[i].P, b, &e), RM_OK);
        int ok = 1;
        for (int p = 0; p <= t[i].P; p++)
            ok &= b[p] == t[i].bounds[p];
        CU_ASSERT(ok);
        if (!ok) {
            fprintf(stderr, "\n  partition case %zu:", i);
            for (int p = 0; p <= t[i].P; p++)
                fprintf(stderr, " %d", b[p]);
        }
    }
    /* the chosen split is optimal: no split of 'deep' into 4 has a smaller max (brute force) */
    uint64_t best = UINT64_MAX;
    for (int a = 1; a < 9; a++)
        for (int b2 = a + 1; b2 < 9; b2++)
            for (int c = b2 + 1; c < 9; c++) {
                int cut[5] = {0, a, b2, c, 9};
                uint64_t mx = 0;
                for (int p = 0; p < 4; p++) {
                    uint64_t s = 0;
                    for (int l = cut[p]; l < cut[p + 1]; l++)
                        s += deep[l];
                    if (s > mx)
                        mx = s;
                }
                if (mx < best)
                    best = mx;
            }
    CU_ASSERT_EQUAL(best, 1049600ULL * 2 + 10250);
    int b[RM_PIPE_MAX_STAGES + 1];
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_pipe_partition(mlp, 3, 4, b, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_pipe_partition(mlp, 3, 0, b, &e), RM_EINVAL);
}

static void test_micro_rows(void)
{
    static const struct {
        int rows, M, m, off, n;
    } t[] = {
        {64, 1, 0, 0, 64}, {64, 4, 0, 0, 16}, {64, 4, 3, 48, 16}, {10, 4, 0, 0, 3}, {10, 4, 1, 3, 3},
        {10, 4, 2, 6, 2},  {10, 4, 3, 8, 2},  {3, 4, 3, 3, 0},    {64, 4, 4, 0, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int off, n;
        rm_pipe_micro_rows(t[i].rows, t[i].M, t[i].m, &off, &n);
        CU_ASSERT_EQUAL(off, t[i].off);
        CU_ASSERT_EQUAL(n, t[i].n);
    }
}

/* "F0 F1 B0 ..." for a stage's events */
static void events_str(int schedule, int P, int p, int M, char *out, size_t cap)
{
    rm_pipe_event ev[64];
    int n = rm_pipe_schedule_events(schedule, P, p, M, ev);
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%c%d", i ? " " : "",
                                ev[i].kind == RM_PIPE_EV_F ? 'F' : 'B', ev[i].mb);
}

static void test_schedules(void)
{
    static const struct {
        int sched, P, p, M;
        const char *events;
        int inflight;
    } t[] = {
        /* GPipe: all forwards, then all backwards; M activations alive */
        {1, 2, 0, 4, "F0 F1 F2 F3 B0 B1 B2 B3", 4},
        {1, 2, 1, 4, "F0 F1 F2 F3 B0 B1 B2 B3", 4},
        {1, 1, 0, 1, "F0 B0", 1},
        /* 1F1B: P-1-p warm-up forwards, alternate, drain; min(P-p, M) alive */
        {0, 2, 0, 4, "F0 F1 B0 F2 B1 F3 B2 B3", 2},
        {0, 2, 1, 4, "F0 B0 F1 B1 F2 B2 F3 B3", 1},
        {0, 4, 0, 8, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7", 4},
        {0, 4, 1, 8, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7", 3},
        {0, 4, 2, 8, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7", 2},
        {0, 4, 3, 8, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7", 1},
        /* fewer micro-batches than the warm-up: 1F1B degenerates to GPipe */
        {0, 4, 0, 2, "F0 F1 B0 B1", 2},
        {0, 1, 0, 3, "F0 B0 F1 B1 F2 B2", 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char s[512];
        events_str(t[i].sched, t[i].P, t[i].p, t[i].M, s, sizeof s);
        CU_ASSERT_STRING_EQUAL(s, t[i].events);
        if (strcmp(s, t[i].events))
            fprintf(stderr, "\n  schedule case %zu: got \"%s\"", i, s);
        rm_pipe_event ev[64];
        int n = rm_pipe_schedule_events(t[i].sched, t[i].P, t[i].p, t[i].M, ev);
        CU_ASSERT_EQUAL(n, 2 * t[i].M);
        CU_ASSERT_EQUAL(rm_pipe_max_inflight(ev, n), t[i].inflight);
    }
    rm_pipe_event ev[8];
    CU_ASSERT_EQUAL(rm_pipe_schedule_events(2, 2, 0, 4, ev), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_pipe_schedule_events(0, 2, 2, 4, ev), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_pipe_schedule_events(0, 2, 0, 0, ev), RM_EINVAL);
}

static void test_bubble(void)
{
    /* with equal forward and backward costs both schedules meet the textbook bubble exactly */
    static const int Ps[] = {1, 2, 4}, Ms[] = {1, 4, 8, 16};
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < 3; i++)
            for (size_t j = 0; j < 4; j++) {
                double idle[RM_PIPE_MAX_STAGES], span;
                rm_err e = {0};
                CU_ASSERT_EQUAL_FATAL(rm_pipe_simulate(s, Ps[i], Ms[j], 1, 1, idle, &span, &e), RM_OK);
                double want = rm_pipe_textbook_bubble(Ps[i], Ms[j]);
                CU_ASSERT_DOUBLE_EQUAL(span, 2.0 * (Ms[j] + Ps[i] - 1), 1e-9);
                for (int p = 0; p < Ps[i]; p++)
                    CU_ASSERT_DOUBLE_EQUAL(idle[p], want, 1e-9);
            }
    CU_ASSERT_DOUBLE_EQUAL(rm_pipe_textbook_bubble(2, 8), 1.0 / 9.0, 1e-12);
    /* backward twice the forward: makespan (M + P - 1) * 3 for GPipe at P=2, M=4 */
    double idle[RM_PIPE_MAX_STAGES], span;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_pipe_simulate(1, 2, 4, 1, 2, idle, &span, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(span, 15.0, 1e-9);
    CU_ASSERT_EQUAL(rm_pipe_simulate(0, 2, 4, 1, 2, idle, &span, &e), RM_OK);
    CU_ASSERT_DOUBLE_EQUAL(span, 15.0, 1e-9);
    CU_ASSERT_EQUAL(rm_pipe_simulate(0, 2, 0, 1, 1, idle, &span, &e), RM_EINVAL);
}

/* Gradient accumulation in the pipeline strategy (one stage, a world of one, in process): with one
 * micro-batch it steps bit-for-bit like the allreduce strategy; with M = 4 and M = 5 (uneven
 * micro-batches of a 16-row batch) it computes the same batch gradient up to float summation
 * order, and reports the batch's loss. */
typedef struct acc_rig {
    rm_model m;
    rm_optim o;
    rm_amp amp;
    rm_step *st;
    const rm_step_ops *ops;
    rm_comm *comm;
} acc_rig;

static void rig_up(acc_rig *r, const rm_step_ops *ops, int B)
{
    const rm_kernels *k = rm_kernels_get("cpu");
    rm_err e = {0};
    rm_model_shape sh;
    static const int hidden[] = {32, 16};
    memset(r, 0, sizeof *r);
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&sh, 784, hidden, 2, 10, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&r->m, k, &rm_model_mlp, &sh, B, &e), RM_OK);
    rm_optimizer_spec os = {.type = RM_OPT_SGD, .lr = 0.05, .momentum = 0.9};
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&r->o, k, &os, r->m.nparams, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_amp_init(&r->amp, k, RM_PREC_FP32, &e), RM_OK);
    rm_step_env env = {.k = k,
                       .m = &r->m,
                       .opt = &r->o,
                       .amp = &r->amp,
                       .fusion_mb = 25,
                       .sharding = RM_SHARD_NONE,
                       .token = "t",
                       .timeout_s = 5,
                       .train_samples = 1000,
                       .batch = B,
                       .epochs = 1};
    r->ops = ops;
    CU_ASSERT_EQUAL_FATAL(ops->init(&env, &r->st, &e), RM_OK);
    rm_comm_cfg cc = {.rank = 0, .world_size = 1, .epoch = 1};
    CU_ASSERT_EQUAL_FATAL(rm_comm_local_ops()->init(&cc, &r->comm, &e), RM_OK);
    rm_step_round rd = {.ops = rm_comm_local_ops(), .comm = r->comm, .rank = 0, .world = 1, .epoch = 1};
    CU_ASSERT_EQUAL_FATAL(ops->round_begin(r->st, &rd, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(ops->state_fresh(r->st, 5, &e), RM_OK);
    for (int i = 0; i < B * 784; i++)
        ((float *)r->m.x)[i] = (float)((i * 7919) % 255) / 255.0f;
    for (int i = 0; i < B; i++)
        r->m.labels[i] = (int32_t)((i * 3) % 10);
}

static void rig_down(acc_rig *r)
{
    r->ops->round_end(r->st);
    r->ops->destroy(r->st);
    rm_comm_local_ops()->destroy(r->comm);
    rm_amp_free(&r->amp);
    rm_optim_free(&r->o);
    rm_model_free(&r->m);
}

static void test_accumulation(void)
{
    enum { B = 16, STEPS = 3 };
    acc_rig ref;
    rig_up(&ref, &rm_step_allreduce_ops, B);
    rm_err e = {0};
    rm_step_stats st;
    for (int i = 0; i < STEPS; i++)
        CU_ASSERT_EQUAL_FATAL(ref.ops->step(ref.st, B, 0.05f, &st, &e), RM_OK);
    float ref_loss = *ref.m.loss_sum;
    static const int Ms[] = {1, 4, 5};
    for (size_t t = 0; t < 3; t++) {
        char js[96];
        snprintf(js, sizeof js, "{\"microBatches\": %d, \"schedule\": \"%s\"}", Ms[t],
                 t == 1 ? "gpipe" : "1f1b");
        setenv(RM_ENV_PARALLELISM, js, 1);
        acc_rig r;
        rig_up(&r, &rm_step_pipeline_ops, B);
        for (int i = 0; i < STEPS; i++) {
            CU_ASSERT_EQUAL_FATAL(r.ops->step(r.st, B, 0.05f, &st, &e), RM_OK);
            CU_ASSERT(st.pipe);
            CU_ASSERT_EQUAL(st.pipe_stage, 0);
        }
        size_t n = r.m.nparams;
        if (Ms[t] == 1) {
            CU_ASSERT_EQUAL(memcmp(r.m.params, ref.m.params, n * sizeof(float)), 0);
        } else {
            double worst = 0;
            for (size_t i = 0; i < n; i++) {
                double d = fabs((double)r.m.params[i] - (double)ref.m.params[i]);
                double rel = d / (fabs((double)ref.m.params[i]) + 1e-3);
                if (rel > worst)
                    worst = rel;
            }
            CU_ASSERT(worst < 1e-4);
            if (!(worst < 1e-4))
                fprintf(stderr, "\n  M=%d: worst relative parameter difference %g", Ms[t], worst);
        }
        CU_ASSERT_DOUBLE_EQUAL(*r.m.loss_sum, ref_loss, 1e-3 * fabs(ref_loss) + 1e-4);
        /* the optimizer moved: not the fresh parameters */
        CU_ASSERT_EQUAL(r.o.t, STEPS);
        rig_down(&r);
    }
    unsetenv(RM_ENV_PARALLELISM);
    rig_down(&ref);
}

/* ---- stage checkpoints (worker/checkpoint/ckpt_shard.h rm_ckpt_stage_write): each stage writes its layers,
 * the manifest records the layout, any world re-assembles; a corrupt or missing stage file falls
 * back to the older complete set, naming the file. Model 20-7-5-3 (layers of 147, 40, 18 floats),
 * Adam (2 optimizer buffers). */
static rm_ckpt_meta s_meta;
static rm_model s_lay;
static rm_ckpt_units s_units;
static char *s_dir;

static float sval(int64_t step, int b, size_t i)
{
    return (float)step * 1000.0f + (float)b * 300.0f + (float)i;
}

/* Stage r of the layout `bounds` (P stages) at step: its layers' params then each optimizer buffer's
 * range. wait_s 0 except for the last stage written. */
static int stage_write(const int *bounds, int P, int r, int64_t step, double wait_s, rm_err *e)
{
    size_t a = s_lay.unit_off[bounds[r]];
    size_t b = s_lay.unit_off[bounds[r + 1] - 1] + s_lay.unit_len[bounds[r + 1] - 1];
    size_t n = b - a;
    float *buf = calloc(3 * n, sizeof(float));
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n; i++)
            buf[(size_t)k * n + i] = sval(step, k, a + i);
    rm_ckpt_meta m = s_meta;
    m.step = step;
    m.rdzv_epoch = 2;
    m.world_size = 2 * P; /* D = 2: only replica 0 of each stage writes */
    m.shard_world = P;
    m.shard_rank = r;
    m.shard_floats = n;
    rm_ckpt_seg seg = {buf, 3 * n * sizeof(float)};
    char path[4200];
    int rc = rm_ckpt_stage_write(s_dir, &m, &s_units, NULL, bounds, &seg, 1, 5, wait_s, path, sizeof path, e);
    free(buf);
    return rc;
}

static void stage_set(const int *bounds, int P, int64_t step)
{
    for (int r = 0; r < P; r++) {
        rm_err e = {0};
        CU_ASSERT_EQUAL(stage_write(bounds, P, r, step, r == P - 1 ? 5 : 0, &e),
                        r == P - 1 ? RM_OK : RM_ETIMEDOUT);
    }
}

/* Load re-sharded for (nw, nr); checks every parameter and the optimizer pieces; returns the step. */
static int64_t stage_load(int nw, int nr, int *skipped, rm_err *e)
{
    size_t need = rm_ckpt_shard_dst_bytes(&s_units, 2, nw, nr);
    float *dst = calloc(need / sizeof(float) + 1, sizeof(float));
    rm_ckpt_meta meta;
    char path[4200];
    int64_t step = -1;
    if (rm_ckpt_shard_load_newest(s_dir, &s_meta, &s_units, nw, nr, -1, dst, need, &meta, path, sizeof path,
                                  skipped, e) == RM_OK) {
        step = meta.step;
        bool ok = true;
        for (size_t i = 0; i < s_lay.nparams; i++)
            ok = ok && dst[i] == sval(step, 0, i);
        rm_unit_shard us;
        rm_unit_shard_make(s_lay.unit_off, s_lay.unit_len, s_units.n, nw, nr, &us);
        for (int b = 1; b <= 2; b++)
            for (int u = 0; u < us.nunits; u++)
                for (size_t k = 0; k < us.len[u]; k++)
                    ok = ok && dst[s_lay.nparams + (size_t)(b - 1) * us.total + us.soff[u] + k] ==
                                   sval(step, b, us.off[u] + k);
        CU_ASSERT(ok);
    }
    free(dst);
    return step;
}

static bool manifest_has(int64_t step, int P, const char *want)
{
    char name[128], p[4200], buf[4096];
    rm_ckpt_manifest_name(name, sizeof name, step, 2, P);
    snprintf(p, sizeof p, "%s/%s", s_dir, name);
    FILE *f = fopen(p, "rb");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, want) != NULL;
}

static void test_stage_checkpoint(void)
{
    s_dir = rm_test_tmpdir("pipeck");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s_dir);
    memset(&s_meta, 0, sizeof s_meta);
    int hidden[2] = {7, 5};
    rm_err e = {0};
    rm_mlp_shape(&s_meta.shape, 20, hidden, 2, 3, &e);
    rm_model_plan(&s_lay, &rm_model_mlp, &s_meta.shape, NULL);
    s_meta.nparams = s_lay.nparams;
    s_meta.opt_type = 1;
    s_meta.nstate = 2;
    s_meta.loss_scale = 1;
    s_units = (rm_ckpt_units){.n = s_meta.shape.nlayers, .off = s_lay.unit_off, .len = s_lay.unit_len};
    static const int b2[] = {0, 1, 3}, b3[] = {0, 1, 2, 3}, b1[] = {0, 3}, bad[] = {0, 2, 2};
    /* P = 2: the manifest records the layout; every world re-assembles (1 = the whole payload) */
    stage_set(b2, 2, 100);
    CU_ASSERT(manifest_has(100, 2, "\nstages 2 0 1 3\n"));
    for (int nw = 1; nw <= 3; nw++)
        for (int nr = 0; nr < nw; nr++) {
            int sk = -1;
            memset(&e, 0, sizeof e);
            CU_ASSERT_EQUAL(stage_load(nw, nr, &sk, &e), 100);
            CU_ASSERT_EQUAL(sk, 0);
        }
    /* P = 3 and P = 1 sets load the same way (newest wins) */
    stage_set(b3, 3, 200);
    CU_ASSERT(manifest_has(200, 3, "\nstages 3 0 1 2 3\n"));
    CU_ASSERT_EQUAL(stage_load(1, 0, NULL, &e), 200);
    stage_set(b1, 1, 300);
    CU_ASSERT_EQUAL(stage_load(2, 1, NULL, &e), 300);
    /* a corrupt stage file of the newest set: the older complete set, the file named */
    rm_test_clear_dir(s_dir);
    stage_set(b2, 2, 100);
    stage_set(b2, 2, 200);
    char name[128], p[4200];
    rm_ckpt_shard_name(name, sizeof name, 200, 2, 1, 2);
    snprintf(p, sizeof p, "%s/%s", s_dir, name);
    FILE *f = fopen(p, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 300, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 300, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    int sk = -1;
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(stage_load(1, 0, &sk, &e), 100);
    CU_ASSERT_EQUAL(sk, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "shard 1 of 2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, name));
    /* a missing stage file: the same */
    rm_ckpt_shard_name(name, sizeof name, 100, 2, 0, 2);
    stage_set(b2, 2, 300);
    rm_ckpt_shard_name(name, sizeof name, 300, 2, 0, 2);
    snprintf(p, sizeof p, "%s/%s", s_dir, name);
    CU_ASSERT_EQUAL(unlink(p), 0);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(stage_load(2, 0, &sk, &e), 100);
    CU_ASSERT_EQUAL(sk, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, name));
    /* bounds that are not a layout of the set are refused at write */
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(stage_write(bad, 2, 0, 400, 0, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "stage checkpoint"));
    static const int short_[] = {0, 1, 2}; /* does not reach the last layer */
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(stage_write(short_, 2, 0, 400, 0, &e), RM_EINVAL);
    rm_test_tmpdir_free(&s_dir);
}

/* rm_model_release_range (what a stage does to the other stages' ranges): only whole pages inside
 * [from, to) read as zeros afterwards; every float outside keeps its value, and the resident set
 * shrinks by the released pages. */
static void test_release_range(void)
{
    const rm_kernels *k = rm_kernels_get("cpu");
    rm_model m;
    memset(&m, 0, sizeof m);
    m.k = k;
    size_t n = (size_t)4 << 20; /* 16 MiB */
    float *buf = k->alloc(n * sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(i % 1000) + 1.0f;
    long pg = sysconf(_SC_PAGESIZE);
    size_t from = 1000, to = n - 777; /* not page-aligned ends */
    long before = 0, after = 0, pages;
    FILE *f = fopen("/proc/self/statm", "r");
    CU_ASSERT(f && fscanf(f, "%ld %ld", &pages, &before) == 2);
    if (f)
        fclose(f);
    rm_model_release_range(&m, buf, from, to);
    f = fopen("/proc/self/statm", "r");
    CU_ASSERT(f && fscanf(f, "%ld %ld", &pages, &after) == 2);
    if (f)
        fclose(f);
    size_t bad = 0, zeros = 0;
    for (size_t i = 0; i < n; i++) {
        bool inside = i >= from && i < to;
        if (!inside && buf[i] != (float)(i % 1000) + 1.0f)
            bad++;
        if (inside && buf[i] == 0.0f)
            zeros++;
        if (inside && buf[i] != 0.0f && buf[i] != (float)(i % 1000) + 1.0f)
            bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* all but at most a page at either end of the range reads as zero */
    CU_ASSERT(zeros + 2 * (size_t)pg / sizeof(float) >= to - from);
    CU_ASSERT(before - after >= (long)((to - from) * sizeof(float) / (size_t)pg) - 8);
    /* empty and inverted ranges are no-ops */
    rm_model_release_range(&m, buf, 10, 10);
    rm_model_release_range(&m, buf, 20, 10);
    CU_ASSERT_EQUAL(buf[10], 11.0f);
    k->free(buf);
}

/* ---- links: transport selection, per-event transfer plans, deadlock freedom --------------------- */

static void plan_str(int sched, int P, int p, int M, int rows, bool grouped, char *out, size_t cap)
{
    rm_pipe_event ev[64];
    rm_pipe_xfer xf[128];
    int nev = rm_pipe_schedule_events(sched, P, p, M, ev);
    int n = rm_pipe_xfer_plan(ev, nev, P, p, rows, M, grouped, xf, 128);
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%d:%c%c%c%d@%d+%d", i ? " " : "", xf[i].group,
                                xf[i].op == RM_PIPE_XF_SEND ? 'S' : 'R', xf[i].grad ? 'g' : 'a',
                                xf[i].side == RM_PIPE_SIDE_NEXT ? 'N' : 'P', xf[i].mb, xf[i].row_off,
                                xf[i].rows);
}

static void test_link_plan(void)
{
    CU_ASSERT_EQUAL(rm_pipe_link_for(true), RM_PIPE_LINK_TCP);   /* CPU kernels: host buffers */
    CU_ASSERT_EQUAL(rm_pipe_link_for(false), RM_PIPE_LINK_NCCL); /* device buffers */
    /* group:S(end)/R(eceive) a(ctivations)/g(radients) to P(rev)/N(ext) micro-batch @ rows */
    static const struct {
        int sched, P, p, M, rows;
        bool grouped;
        const char *plan;
    } t[] = {
        /* 1F1B P=2: stage 0 sends F1's output in one group with B0's gradient receive, stage 1 sends
         * B0's gradient in one group with F1's activation receive: the pair meets */
        {0, 2, 0, 2, 5, true, "0:SaN0@0+3 1:SaN1@3+2 1:RgN0@0+3 2:RgN1@3+2"},
        {0, 2, 1, 2, 5, true, "0:RaP0@0+3 1:SgP0@0+3 1:RaP1@3+2 2:SgP1@3+2"},
        {0, 2, 0, 2, 5, false, "0:SaN0@0+3 1:SaN1@3+2 2:RgN0@0+3 3:RgN1@3+2"},
        /* a middle stage: a send shares a group with the next event's receive on the same link
         * (F1's output to p+1 with B0's gradient from p+1); across links they stay apart, in order */
        {0, 3, 1, 2, 5, true,
         "0:RaP0@0+3 1:SaN0@0+3 2:RaP1@3+2 3:SaN1@3+2 3:RgN0@0+3 4:SgP0@0+3 5:RgN1@3+2 6:SgP1@3+2"},
        /* GPipe: forwards, then backwards; the last forward's send meets B0's receive */
        {1, 2, 0, 3, 3, true, "0:SaN0@0+1 1:SaN1@1+1 2:SaN2@2+1 2:RgN0@0+1 3:RgN1@1+1 4:RgN2@2+1"},
        {1, 2, 1, 3, 3, true, "0:RaP0@0+1 1:RaP1@1+1 2:RaP2@2+1 3:SgP0@0+1 4:SgP1@1+1 5:SgP2@2+1"},
        /* fewer rows than micro-batches: empty micro-batches still transfer (0 rows, the loss) */
        {1, 2, 1, 2, 1, true, "0:RaP0@0+1 1:RaP1@1+0 2:SgP0@0+1 3:SgP1@1+0"},
        /* one stage: nothing to move */
        {0, 1, 0, 4, 8, true, ""},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char s[512];
        plan_str(t[i].sched, t[i].P, t[i].p, t[i].M, t[i].rows, t[i].grouped, s, sizeof s);
        CU_ASSERT_STRING_EQUAL(s, t[i].plan);
        if (strcmp(s, t[i].plan))
            fprintf(stderr, "\n  plan case %zu: got \"%s\"", i, s);
    }
    /* every schedule's grouped plans meet without deadlock, micro-batch for micro-batch */
    for (int sched = 0; sched <= 1; sched++)
        for (int P = 1; P <= 8; P++)
            for (int M = 1; M <= 16; M++) {
                rm_err e = {0};
                int rc = rm_pipe_plan_check(sched, P, M, 3 * M + 1, true, &e);
                CU_ASSERT_EQUAL(rc, RM_OK);
                if (rc)
                    fprintf(stderr, "\n  plan check sched %d P %d M %d: %s", sched, P, M, e.msg);
            }
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_pipe_plan_check(0, RM_PIPE_MAX_STAGES, RM_PIPE_CHECK_MAX_MICRO, 7, true, &e), RM_OK);
    /* ungrouped, 1F1B's steady state deadlocks (both neighbours block in a send), GPipe does not */
    for (int P = 2; P <= 4; P++) {
        memset(&e, 0, sizeof e);
        CU_ASSERT_EQUAL(rm_pipe_plan_check(0, P, 4, 8, false, &e), RM_EPROTO);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "deadlock"));
        CU_ASSERT_EQUAL(rm_pipe_plan_check(1, P, 4, 8, false, &e), RM_OK);
    }
    CU_ASSERT_EQUAL(rm_pipe_plan_check(0, 2, 1, 8, false, &e), RM_OK); /* M = 1: no steady state */
    /* bad arguments */
    CU_ASSERT_EQUAL(rm_pipe_plan_check(0, 2, RM_PIPE_CHECK_MAX_MICRO + 1, 8, true, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_pipe_plan_check(2, 2, 4, 8, true, &e), RM_EINVAL);
    rm_pipe_event ev[8];
    rm_pipe_xfer xf[4];
    int nev = rm_pipe_schedule_events(1, 2, 0, 4, ev);
    CU_ASSERT_EQUAL(rm_pipe_xfer_plan(ev, nev, 2, 0, 8, 4, true, xf, 4), RM_EINVAL); /* cap: 8 needed */
    CU_ASSERT_EQUAL(rm_pipe_xfer_plan(ev, nev, 2, 2, 8, 4, true, xf, 4), RM_EINVAL); /* stage */
}

/* The transport table: one entry per kind; the NCCL entry refuses host buffers (and, built
 * without CUDA, everything) with a clear error instead of touching them. */
static void test_link_table(void)
{
    const rm_pipe_link_ops *tcp = rm_pipe_link_ops_of(rm_pipe_link_for(true));
    const rm_pipe_link_ops *nccl = rm_pipe_link_ops_of(rm_pipe_link_for(false));
    CU_ASSERT_PTR_EQUAL(tcp, rm_pipe_link_tcp_ops());
    CU_ASSERT_PTR_EQUAL(nccl, rm_pipe_link_nccl_ops());
    CU_ASSERT_STRING_EQUAL(tcp->name, "tcp");
    CU_ASSERT_STRING_EQUAL(nccl->name, "nccl");
    const rm_pipe_link_ops *all[2] = {tcp, nccl};
    for (int i = 0; i < 2; i++) {
        CU_ASSERT(all[i]->open && all[i]->begin && all[i]->send && all[i]->recv && all[i]->end &&
                  all[i]->wait && all[i]->flush && all[i]->bytes_in && all[i]->close);
    }
    float rx[8];
    rm_pipe_links_cfg cfg = {.B = 4, .M = 2, .timeout_s = 1, .k = rm_kernels_cpu()};
    cfg.side[RM_PIPE_SIDE_PREV] = (rm_pipe_link_cfg){.tcp = NULL, .rx = rx, .width = 2};
    rm_pipe_links *l = (rm_pipe_links *)&cfg;
    rm_err e = {0};
    int rc = nccl->open(&cfg, &l, &e);
    CU_ASSERT_PTR_NULL(l);
#if RM_HAVE_CUDA
    CU_ASSERT_EQUAL(rc, RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "device buffers"));
#else
    CU_ASSERT_EQUAL(rc, RM_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "without CUDA"));
#endif
    nccl->close(NULL);
    tcp->close(NULL);
    /* the TCP entry with no neighbour: open, nothing to send to, nothing moved */
    l = NULL;
    CU_ASSERT_EQUAL(tcp->open(&cfg, &l, &e), RM_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_EQUAL(tcp->send(l, RM_PIPE_SIDE_NEXT, rx, 2, NULL, &e), RM_EINVAL);
    double waited = 0;
    CU_ASSERT_EQUAL(tcp->wait(l, RM_PIPE_SIDE_PREV, 1, &waited, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(tcp->flush(l, &waited, &e), RM_OK);
    /* the NCCL entry's contract, held on the CPU too: groups neither nest nor close twice, no
     * flush inside one */
    CU_ASSERT_EQUAL(tcp->begin(l, &e), RM_OK);
    CU_ASSERT_EQUAL(tcp->begin(l, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "already open"));
    CU_ASSERT_EQUAL(tcp->flush(l, &waited, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(tcp->end(l, &e), RM_OK);
    CU_ASSERT_EQUAL(tcp->end(l, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(waited, 0.0);
    CU_ASSERT_EQUAL(tcp->bytes_in(l), 0u);
    tcp->close(l);
}

void rm_suite_pipeline(void)
{
    static const rm_test_case cases[] = {
        {"placement", test_placement},
        {"partition", test_partition},
        {"micro_rows", test_micro_rows},
        {"schedules", test_schedules},
        {"bubble", test_bubble},
        {"accumulation", test_accumulation},
        {"stage_checkpoint", test_stage_checkpoint},
        {"release_range", test_release_range},
        {"link_plan", test_link_plan},
        {"link_table", test_link_table},
    };
    RM_ADD_SUITE("pipeline", NULL, NULL, cases);
}
