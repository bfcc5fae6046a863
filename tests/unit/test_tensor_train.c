/* test_tensor_train.c — the tensor strategy (worker/tensor/step_tensor.c, docs/models-and-data.md
 * "Tensor parallelism") trains as T = 1 does. Ranks are threads on loopback rings, as in
 * test_pipe_tied.c, driving rm_step_tensor_ops and, for the reference, the allreduce strategy on D
 * ranks: the same seed, the same global batch (the T ranks of replica d train on the rows the
 * reference's rank d trains on).
 *   - gpt: a tiny transformer (2 blocks, 4 heads, embed 8, context 5, vocabulary 11, so T = 2 and
 *     T = 4 pad it) for a few AdamW steps with weight decay and gradient clipping at T = 2, T = 4
 *     and T = 2 x D = 2 ends within 1e-5 (‖ours − ref‖ / ‖ref‖) of T = 1 (D = 1 or 2), its Adam
 *     state too, every step's loss, and far from where it started; every rank reports the tensor group's bytes of the
 *     step as the split's event table counts them (plus clipping's one float) under its tensor
 *     rank (rm_step_stats.tensor_*: what the driver exports on /metrics);
 *   - the MLP through the same table, T = 2 x D = 2 against D = 2;
 *   - checkpoints: T = 2's (each rank's state_save: its pieces, put together through the runs
 *     ckpt_pieces gives, as the checkpoint reader does: the payload T = 1 writes) restores at
 *     T = 1 and at T = 4 to exactly its parameters, and training on from it reaches the
 *     uninterrupted T = 1 run's parameters and optimizer state. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/worker_env.h"
#include "tests/unit/testring.h"
#include "tests/unit/testutil.h"
#include "worker/gpu.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"
#include "worker/step.h"
#include "worker/tensor/tp_gpt.h"
#include "worker/tensor/tp_mlp.h"

enum { MAXW = 8, MAXSTEPS = 8, TB = 3 /* rows per replica */ };
enum { GL = 2, GNH = 4, GC = 8, GCTX = 5, GV = 11 }; /* the transformer */
enum { MIN = 12, MCL = 5 };                          /* the MLP: inputs, classes */

typedef struct tworld {
    rm_model_shape shape;
    const rm_model_family *fam;
    rm_optimizer_spec os;
    double clip;
    int n, T;         /* ranks; tensor ranks (1: the allreduce strategy) */
    int step0, steps; /* the data of steps step0 .. step0 + steps - 1 */
    const void *restore;
    int64_t restore_t;    /* with restore: start from this payload instead of a fresh state */
    bool save;            /* every rank keeps its checkpoint pieces (state_save) and runs (ckpt_pieces) */
    rm_sharding sharding; /* spec.training.sharding (none, or optimizer: ZeRO-1 in the data-parallel group) */
    rm_rdzv_peer peers[MAXW];
    rm_ring_listener *lst[MAXW];
    struct trank {
        struct tworld *w;
        int rank, rc;
        rm_err err;
        float loss[MAXSTEPS];
        float *params, *state; /* copies at the end (state: the optimizer's first buffer) */
        float *init;           /* the parameters after the state agreement */
        size_t nparams;
        uint64_t tbytes[MAXSTEPS];
        int tensor_rank;
        bool tensor;
        void *ckpt; /* its pieces (then, rank 0's after assemble_ckpt: the whole payload) */
        size_t ckpt_bytes;
        int64_t ckpt_t;
        int shard, shards; /* ckpt_pieces: which shard of how many */
        rm_ckpt_run runs[1024];
        int nruns;
        uint64_t opt_bytes; /* the strategy's optimizer memory (rm_step_ops.memory) */
        int nseg;           /* the whole model's tensors (the optimizer's) */
    } r[MAXW];
} tworld;

/* Replica d's rows at global step s: token windows whose next token follows a rule (the
 * transformer) or features with a class rule (the MLP), so the loss falls. */
static void fill(rm_model *m, bool gpt, int d, int step)
{
    for (int i = 0; i < TB; i++) {
        if (gpt) {
            int32_t *x = m->x;
            for (int t = 0; t < GCTX; t++) {
                int a = (step * 7 + d * 13 + i * 5 + t * 3) % GV;
                x[i * GCTX + t] = a;
                m->labels[i * GCTX + t] = (a * 3 + 1) % GV;
            }
        } else {
            float *x = m->x;
            for (int j = 0; j < MIN; j++)
                x[i * MIN + j] = (float)((step * 5 + d * 11 + i * 3 + j * 7) % 13) / 13.0f - 0.4f;
            m->labels[i] = (step + d * 2 + i) % MCL;
        }
    }
}

static float *copy_of(const float *src, size_t n)
{
    float *c = malloc(n * sizeof(float));
    if (c)
        memcpy(c, src, n * sizeof(float));
    return c;
}

static void *rank_main(void *arg)
{
    struct trank *r = arg;
    tworld *w = r->w;
    const rm_kernels *k = rm_kernels_get("cpu");
    const rm_step_ops *ops = w->T > 1 ? &rm_step_tensor_ops : &rm_step_allreduce_ops;
    rm_model m;
    rm_optim o;
    rm_amp amp;
    rm_step *st = NULL;
    rm_step_round rd = {0}; /* rd.comm: this rank's comm, once made */
    memset(&m, 0, sizeof m);
    memset(&o, 0, sizeof o);
    memset(&amp, 0, sizeof amp);
    rm_err *e = &r->err;
    bool gpt = w->fam == &rm_model_gpt;
    if ((r->rc = rm_model_init(&m, k, w->fam, &w->shape, TB, e)) ||
        (r->rc = rm_optim_init(&o, k, &w->os, m.nparams, e)) ||
        (r->rc = rm_optim_tensors_from_model(&o, &m, e)) || (r->rc = rm_amp_init(&amp, k, RM_PREC_FP32, e)))
        goto out;
    r->nseg = o.nseg;
    rm_step_env env = {.k = k,
                       .m = &m,
                       .opt = &o,
                       .amp = &amp,
                       .fusion_mb = 1,
                       .sharding = w->sharding,
                       .token = "tok",
                       .timeout_s = 20,
                       .train_samples = 10000,
                       .batch = TB,
                       .epochs = 1,
                       .grad_clip = w->clip,
                       .grad_accum = 1};
    if ((r->rc = ops->init(&env, &st, e)))
        goto out;
    r->rc = rm_test_ring_round(w->n, r->rank, w->peers, w->lst, &rd, e);
    if (r->rc)
        goto out;
    if ((r->rc = ops->round_begin(st, &rd, e)))
        goto out;
    if (w->restore)
        ops->state_restore(st, w->restore, w->restore_t, 0, 0);
    else if ((r->rc = ops->state_fresh(st, 5, e)))
        goto out;
    rm_step_pos pos = {0};
    if ((r->rc = ops->state_sync(st, &pos, e)) || (ops->materialize && (r->rc = ops->materialize(st, e))))
        goto out;
    r->nparams = m.nparams;
    r->init = copy_of(m.params, m.nparams);
    int d = r->rank / w->T;
    for (int s = 0; s < w->steps; s++) {
        fill(&m, gpt, d, w->step0 + s);
        rm_step_stats ss;
        if ((r->rc = ops->step(st, TB, (float)w->os.lr, &ss, e)))
            goto out;
        r->loss[s] = *m.loss_sum;
        r->tensor = ss.tensor;
        r->tensor_rank = ss.tensor_rank;
        r->tbytes[s] = ss.tensor_bytes;
    }
    if (ops->memory) {
        rm_step_memory mem;
        ops->memory(st, &mem);
        r->opt_bytes = mem.optimizer;
    }
    if (w->save) { /* a checkpoint: each rank its pieces, no collective */
        size_t nb = ops->state_bytes(st, r->rank);
        void *buf = malloc(nb ? nb : 1);
        if (!buf || !ops->ckpt_pieces ||
            !ops->ckpt_pieces(st, &r->shard, &r->shards, r->runs, (int)RM_ARRAY_LEN(r->runs), &r->nruns) ||
            r->nruns > (int)RM_ARRAY_LEN(r->runs) || (nb && (r->rc = ops->state_save(st, buf, e)))) {
            free(buf);
            r->rc = r->rc ? r->rc : rm_errf(e, RM_EINVAL, "no checkpoint pieces");
            goto out;
        }
        r->ckpt = buf;
        r->ckpt_bytes = nb;
        r->ckpt_t = o.t;
    }
    if (ops->materialize && (r->rc = ops->materialize(st, e)))
        goto out;
    r->params = copy_of(m.params, m.nparams);
    r->state = copy_of(o.state[0], m.nparams);
out:
    if (st) {
        ops->round_end(st);
        ops->destroy(st);
    }
    if (rd.comm)
        rd.ops->destroy(rd.comm);
    rm_amp_free(&amp);
    rm_optim_free(&o);
    rm_model_free(&m);
    return NULL;
}

static void shape_of(tworld *w, bool gpt)
{
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    rm_model_data d;
    if (gpt) {
        t.model_type = "gpt";
        t.layers = GL;
        t.heads = GNH;
        t.embed = GC;
        t.context = GCTX;
        t.vocab = GV;
        d = (rm_model_data){.inputs = GCTX, .classes = GV};
    } else {
        t.model_type = "mlp";
        t.hidden[0] = 8;
        t.hidden[1] = 6;
        t.nhidden = 2;
        d = (rm_model_data){.inputs = MIN, .classes = MCL};
    }
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_model_shape_for(&t, &d, &w->fam, &w->shape, &e), RM_OK);
}

/* eps 1e-6 rather than Adam's 1e-8: a gradient that is rounding noise (the key bias's is zero in
 * exact arithmetic, softmax being shift-invariant; a neuron's gradients from two replicas can
 * cancel) would otherwise be scaled to lr-sized steps whose signs follow the summation order, the
 * one thing T changes, and the comparison would measure that noise. */
static const rm_optimizer_spec ADAMW = {
    .type = RM_OPT_ADAMW, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.1};

/* The optimizer trun uses (ADAMW unless a test sets another for its runs). */
static const rm_optimizer_spec *g_os = &ADAMW;

/* Run a world of n ranks with T tensor ranks (1: allreduce) for steps steps from step0. */
static int trun_sharded(tworld *w, bool gpt, int n, int T, int step0, int steps, const void *restore,
                        int64_t restore_t, bool save, rm_sharding sharding)
{
    memset(w, 0, sizeof *w);
    w->sharding = sharding;
    shape_of(w, gpt);
    w->os = *g_os;
    w->clip = 0.5;
    w->n = n;
    w->T = T;
    w->step0 = step0;
    w->steps = steps;
    w->restore = restore;
    w->restore_t = restore_t;
    w->save = save;
    for (int i = 0; i < n; i++) {
        w->r[i].w = w;
        w->r[i].rank = i;
    }
    if (n > 1)
        rm_test_ring_up(n, w->peers, w->lst);
    char par[64];
    snprintf(par, sizeof par, "{\"tensorParallel\": %d}", T);
    if (T > 1)
        setenv(RM_ENV_PARALLELISM, par, 1);
    pthread_t th[MAXW];
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, rank_main, &w->r[i]);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (w->r[i].rc) {
            fprintf(stderr, "\n  %s T=%d rank %d: %s", gpt ? "gpt" : "mlp", T, i, w->r[i].err.msg);
            rc = w->r[i].rc;
        }
    }
    unsetenv(RM_ENV_PARALLELISM);
    rm_test_ring_down(n, w->lst);
    return rc;
}

static int trun(tworld *w, bool gpt, int n, int T, int step0, int steps, const void *restore,
                int64_t restore_t, bool save)
{
    return trun_sharded(w, gpt, n, T, step0, steps, restore, restore_t, save, RM_SHARD_NONE);
}

static void tfree(tworld *w)
{
    for (int i = 0; i < MAXW; i++) {
        free(w->r[i].params);
        free(w->r[i].state);
        free(w->r[i].init);
        free(w->r[i].ckpt);
    }
}

/* Bytes the tensor group allreduces in one step: the split's event table (floats per row or
 * position, times the rows or positions) and clipping's one float. */
static uint64_t want_tensor_bytes(const tworld *w, int T)
{
    rm_err e = {0};
    uint64_t floats = 1;
    if (w->fam == &rm_model_gpt) {
        rm_tp_gpt_plan p;
        CU_ASSERT_EQUAL_FATAL(rm_tp_gpt_plan_make(&w->shape, T, 0, &p, &e), RM_OK);
        rm_tp_gpt_event ev[64];
        int n = rm_tp_gpt_events(&p, ev, 64);
        CU_ASSERT_FATAL(n <= 64);
        for (int i = 0; i < n; i++)
            floats += (uint64_t)TB * GCTX * (uint64_t)ev[i].width;
    } else {
        rm_tp_plan p;
        CU_ASSERT_EQUAL_FATAL(rm_tp_mlp_plan(&w->shape, T, 0, &p, &e), RM_OK);
        rm_tp_event ev[16];
        int n = rm_tp_mlp_events(&p, ev, 16);
        for (int i = 0; i < n; i++)
            floats += (uint64_t)TB * (uint64_t)ev[i].width;
    }
    return floats * sizeof(float);
}

static bool w_layerwise(const tworld *w)
{
    return w->os.type == RM_OPT_LAMB || w->os.type == RM_OPT_LARS;
}

/* got against want (n floats) within tol, as docs/models-and-data.md compares tensors */
static void expect_close(const float *got, const float *want, size_t n, double tol, const char *what,
                         int rank)
{
    double rel = rm_test_rel_diff(got, want, n);
    CU_ASSERT(rel < tol);
    if (!(rel < tol))
        fprintf(stderr, "\n  %s rank %d: relative difference %g", what, rank, rel);
}

/* T x D tensor ranks against D allreduce ranks, NSTEPS steps */
static void check_parity(bool gpt, int T, int D, const char *what)
{
    enum { NSTEPS = 4 };
    tworld tp, ref;
    CU_ASSERT_EQUAL_FATAL(trun(&tp, gpt, T * D, T, 0, NSTEPS, NULL, 0, false), RM_OK);
    CU_ASSERT_EQUAL_FATAL(trun(&ref, gpt, D, 1, 0, NSTEPS, NULL, 0, false), RM_OK);
    size_t n = ref.r[0].nparams;
    uint64_t want = want_tensor_bytes(&tp, T);
    for (int i = 0; i < T * D; i++) {
        const struct trank *r = &tp.r[i];
        CU_ASSERT_EQUAL_FATAL(r->nparams, n);
        expect_close(r->params, ref.r[0].params, n, 1e-5, what, i);
        expect_close(r->state, ref.r[0].state, n, 1e-5, what, i); /* Adam's m: assembled, as T = 1's */
        for (int s = 0; s < NSTEPS; s++) {
            float lt = r->loss[s], lr = ref.r[i / T].loss[s];
            CU_ASSERT(fabsf(lt - lr) <= 1e-5f * fabsf(lr) + 1e-6f);
            /* lamb/lars: each tensor's two norm sums too */
            bool lw = w_layerwise(&tp);
            CU_ASSERT_EQUAL(r->tbytes[s], want + (lw ? 2 * (uint64_t)r->nseg * sizeof(float) : 0));
        }
        CU_ASSERT(r->tensor);
        CU_ASSERT_EQUAL(r->tensor_rank, i % T);
    }
    CU_ASSERT_FALSE(ref.r[0].tensor); /* T = 1 reports no tensor group */
    /* it trained: the reference moved well beyond the tolerance (the comparison discriminates) */
    CU_ASSERT(rm_test_rel_diff(ref.r[0].params, ref.r[0].init, n) > 1e-3);
    CU_ASSERT(ref.r[0].loss[NSTEPS - 1] < ref.r[0].loss[0]);
    tfree(&tp);
    tfree(&ref);
}

static void test_gpt_t2(void)
{
    check_parity(true, 2, 1, "gpt T=2");
}
static void test_gpt_t4(void)
{
    check_parity(true, 4, 1, "gpt T=4");
}
static void test_gpt_t2_d2(void)
{
    check_parity(true, 2, 2, "gpt T=2 x D=2");
}
static void test_mlp_t2_d2(void)
{
    check_parity(false, 2, 2, "mlp T=2 x D=2");
}

/* The whole payload from the ranks' pieces (1 + nstate buffers of n floats), through rank 0's
 * runs of every shard, as worker/checkpoint/ckpt_shard.c puts a pieces set together; counts how
 * often each parameter is written into *dup (must be once). */
static void *assemble_ckpt(const tworld *w, size_t n, int nstate, int *dup)
{
    float *whole = calloc((size_t)(1 + nstate) * n, sizeof(float));
    uint8_t *hits = calloc(n, 1);
    const struct trank *r0 = &w->r[0];
    for (int i = 0; i < w->n; i++) {
        const struct trank *r = &w->r[i];
        if (!r->ckpt_bytes)
            continue;
        size_t fl = r->ckpt_bytes / ((size_t)(1 + nstate) * sizeof(float));
        for (int k = 0; k < r0->nruns; k++) {
            const rm_ckpt_run *x = &r0->runs[k];
            for (int b = 0; x->shard == r->shard && b <= nstate; b++)
                for (uint32_t row = 0; row < x->rows; row++)
                    for (uint64_t j = 0; j < x->len; j++) {
                        uint64_t at = x->whole + row * x->wstride + j;
                        whole[b * n + at] =
                            ((const float *)r->ckpt)[b * fl + x->local + row * x->lstride + j];
                        hits[at] += b == 0;
                    }
        }
    }
    *dup = 0;
    for (size_t i = 0; i < n; i++)
        *dup += hits[i] != 1;
    free(hits);
    return whole;
}

/* T = 2's checkpoint after 3 steps, restored at T = 1 and at T = 4, then 3 more steps each:
 * exactly the saved state after the restore, T = 1's uninterrupted 6 steps at the end. */
static void test_gpt_checkpoint_across_t(void)
{
    enum { S1 = 3, S2 = 3 };
    tworld t2, full;
    CU_ASSERT_EQUAL_FATAL(trun(&t2, true, 2, 2, 0, S1, NULL, 0, true), RM_OK);
    CU_ASSERT_EQUAL_FATAL(trun(&full, true, 1, 1, 0, S1 + S2, NULL, 0, false), RM_OK);
    struct trank *w0 = &t2.r[0];
    size_t n = w0->nparams;
    CU_ASSERT_PTR_NOT_NULL_FATAL(w0->ckpt);
    CU_ASSERT_EQUAL(w0->ckpt_t, S1);
    CU_ASSERT_EQUAL(w0->shards, 2);
    CU_ASSERT(t2.r[1].shard == 1 && t2.r[1].nruns == w0->nruns);
    /* each rank's pieces are about half of the whole payload (params, Adam's m and v) */
    CU_ASSERT(w0->ckpt_bytes < 3 * n * sizeof(float) * 6 / 10 && t2.r[1].ckpt_bytes == w0->ckpt_bytes);
    int dup = -1;
    void *whole = assemble_ckpt(&t2, n, 2, &dup);
    CU_ASSERT_EQUAL(dup, 0); /* every parameter from exactly one piece */
    free(w0->ckpt);
    w0->ckpt = whole;
    /* the payload is the model T = 2 holds (assembled by materialize) */
    CU_ASSERT_EQUAL(memcmp(w0->ckpt, w0->params, n * sizeof(float)), 0);
    const int Ts[] = {1, 4};
    for (size_t i = 0; i < RM_ARRAY_LEN(Ts); i++) {
        int T = Ts[i];
        tworld r;
        CU_ASSERT_EQUAL_FATAL(trun(&r, true, T, T, S1, S2, w0->ckpt, w0->ckpt_t, false), RM_OK);
        for (int k = 0; k < T; k++) {
            CU_ASSERT_EQUAL(memcmp(r.r[k].init, w0->ckpt, n * sizeof(float)), 0); /* restored exactly */
            /* the parameters and the optimizer state re-sliced for T go on as T = 1's */
            const char *what = T == 1 ? "resumed at T=1" : "resumed at T=4";
            expect_close(r.r[k].params, full.r[0].params, n, 1e-5, what, k);
            expect_close(r.r[k].state, full.r[0].state, n, 1e-5, what, k);
        }
        tfree(&r);
    }
    tfree(&t2);
    tfree(&full);
}

/* ZeRO-1 in the data-parallel group (spec.training.sharding optimizer), T = 2 x D = 2: exactly
 * the unsharded run's losses, parameters and (assembled) optimizer state — the update is
 * element-wise, each shard stepped by one rank, the parameters all-gathered — with half of each
 * rank's optimizer state; the checkpoint is every rank's shard of its pieces (4 shards whose runs
 * cover every parameter once: the payload of the model they hold), which resumes at T = 1 x D = 2
 * and goes on as an uninterrupted T = 1 run. */
static void zero1(bool gpt)
{
    enum { S1 = 3, S2 = 2 };
    tworld z, plain, full, back;
    CU_ASSERT_EQUAL_FATAL(trun_sharded(&z, gpt, 4, 2, 0, S1, NULL, 0, true, RM_SHARD_OPTIMIZER), RM_OK);
    CU_ASSERT_EQUAL_FATAL(trun(&plain, gpt, 4, 2, 0, S1, NULL, 0, true), RM_OK);
    size_t n = z.r[0].nparams;
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(memcmp(z.r[i].params, plain.r[i].params, n * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(z.r[i].state, plain.r[i].state, n * sizeof(float)), 0);
        for (int s = 0; s < S1; s++)
            CU_ASSERT_EQUAL(z.r[i].loss[s], plain.r[i].loss[s]);
        /* half of the pieces' state: the two shards differ by at most a float per buffer */
        uint64_t half = plain.r[i].opt_bytes / 2;
        CU_ASSERT(plain.r[i].opt_bytes > 0 && z.r[i].opt_bytes + 8 >= half && z.r[i].opt_bytes <= half + 8);
        CU_ASSERT_EQUAL(z.r[i].shard, i);
        CU_ASSERT_EQUAL(z.r[i].shards, 4);
        CU_ASSERT(z.r[i].ckpt_bytes > 0 && z.r[i].nruns == z.r[0].nruns);
    }
    CU_ASSERT_EQUAL(plain.r[0].shards, 2); /* unsharded: replica 0's two ranks write */
    CU_ASSERT_EQUAL(plain.r[2].ckpt_bytes, 0);
    int dup = -1;
    float *whole = assemble_ckpt(&z, n, 2, &dup);
    CU_ASSERT_EQUAL(dup, 0);
    CU_ASSERT_EQUAL(memcmp(whole, z.r[0].params, n * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(whole + n, z.r[0].state, n * sizeof(float)), 0); /* Adam's m */
    CU_ASSERT_EQUAL_FATAL(trun(&full, gpt, 2, 1, 0, S1 + S2, NULL, 0, false), RM_OK);
    CU_ASSERT_EQUAL_FATAL(trun(&back, gpt, 2, 1, S1, S2, whole, z.r[0].ckpt_t, false), RM_OK);
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL(memcmp(back.r[k].init, whole, n * sizeof(float)), 0);
        expect_close(back.r[k].params, full.r[0].params, n, 1e-5, "ZeRO-1 set resumed at T=1", k);
        expect_close(back.r[k].state, full.r[0].state, n, 1e-5, "ZeRO-1 set resumed at T=1", k);
    }
    free(whole);
    tfree(&z);
    tfree(&plain);
    tfree(&full);
    tfree(&back);
}

static void test_gpt_t2_d2_zero1(void)
{
    zero1(true);
}
static void test_mlp_t2_d2_zero1(void)
{
    zero1(false);
}

/* f (the input gradients' sums) overlapped with the weight gradients' GEMMs on the strategy's
 * thread, the default, against the sums in line (RINGMASTER_TENSOR_OVERLAP=0): the same
 * operations on the same buffers, so the same bits and the same bytes a step. */
static void overlap_same(bool gpt, int T)
{
    enum { NSTEPS = 3 };
    tworld a, b;
    CU_ASSERT_EQUAL_FATAL(trun(&a, gpt, T, T, 0, NSTEPS, NULL, 0, false), RM_OK);
    setenv("RINGMASTER_TENSOR_OVERLAP", "0", 1);
    int rc = trun(&b, gpt, T, T, 0, NSTEPS, NULL, 0, false);
    unsetenv("RINGMASTER_TENSOR_OVERLAP");
    CU_ASSERT_EQUAL_FATAL(rc, RM_OK);
    size_t n = a.r[0].nparams;
    for (int i = 0; i < T; i++) {
        CU_ASSERT_EQUAL(memcmp(a.r[i].params, b.r[i].params, n * sizeof(float)), 0);
        CU_ASSERT_EQUAL(memcmp(a.r[i].state, b.r[i].state, n * sizeof(float)), 0);
        for (int s = 0; s < NSTEPS; s++)
            CU_ASSERT_EQUAL(a.r[i].tbytes[s], b.r[i].tbytes[s]);
    }
    CU_ASSERT(rm_test_rel_diff(a.r[0].params, a.r[0].init, n) > 1e-3); /* it trained */
    tfree(&a);
    tfree(&b);
}

static void test_overlap_same_bits(void)
{
    overlap_same(true, 2);
    overlap_same(true, 4);
    overlap_same(false, 2);
}

/* lamb and lars: their trust ratios need each tensor's norms, which the split tensors' ranks sum
 * (a replicated tensor counted once): T = 2 (and T = 2 x D = 2 with ZeRO-1) reach T = 1's (D = 2's)
 * parameters and LAMB's / LARS's state within 1e-5. */
static void layerwise(const rm_optimizer_spec *os, const char *what)
{
    g_os = os;
    for (int gpt = 0; gpt < 2; gpt++) {
        check_parity(gpt, 2, 1, what);
        tworld z, ref;
        CU_ASSERT_EQUAL_FATAL(trun_sharded(&z, gpt, 4, 2, 0, 4, NULL, 0, false, RM_SHARD_OPTIMIZER), RM_OK);
        CU_ASSERT_EQUAL_FATAL(trun(&ref, gpt, 2, 1, 0, 4, NULL, 0, false), RM_OK);
        size_t n = ref.r[0].nparams;
        for (int i = 0; i < 4; i++) {
            expect_close(z.r[i].params, ref.r[0].params, n, 1e-5, what, i);
            expect_close(z.r[i].state, ref.r[0].state, n, 1e-5, what, i);
        }
        tfree(&z);
        tfree(&ref);
    }
    g_os = &ADAMW;
}

static void test_lamb(void)
{
    static const rm_optimizer_spec LAMB = {
        .type = RM_OPT_LAMB, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.01};
    layerwise(&LAMB, "lamb");
}

static void test_lars(void)
{
    static const rm_optimizer_spec LARS = {
        .type = RM_OPT_LARS, .lr = 0.5, .momentum = 0.9, .weight_decay = 1e-4};
    layerwise(&LARS, "lars");
}

void rm_suite_tensor_train(void)
{
    static const rm_test_case cases[] = {
        {"gpt_t2", test_gpt_t2},
        {"gpt_t4", test_gpt_t4},
        {"gpt_t2_d2", test_gpt_t2_d2},
        {"mlp_t2_d2", test_mlp_t2_d2},
        {"gpt_checkpoint_across_t", test_gpt_checkpoint_across_t},
        {"gpt_t2_d2_zero1", test_gpt_t2_d2_zero1},
        {"mlp_t2_d2_zero1", test_mlp_t2_d2_zero1},
        {"overlap_same_bits", test_overlap_same_bits},
        {"lamb_t2_and_zero1", test_lamb},
        {"lars_t2_and_zero1", test_lars},
    };
    RM_ADD_SUITE("tensor_train", NULL, NULL, cases);
}
