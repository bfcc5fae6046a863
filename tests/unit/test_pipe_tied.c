/* test_pipe_tied.c — pipeline stages train the tied transformer (docs/strategies.md#pipeline-stages,
 * docs/models-and-data.md "The transformer"): the head reads the embedding's wte, so a last stage
 * without the embedding keeps a copy of it whose gradient is summed with the first stage's every
 * step (worker/pipeline/step_pipeline.c, "Tied units"). Ranks are threads on loopback rings, as in
 * test_families.c. Each case trains a tiny gpt for a few SGD or Adam steps through the pipeline and
 * through the allreduce strategy on the same global batch: the stages' ranges together end within
 * float tolerance of the reference, and every copy of wte ends bit-identical to its owner's. One
 * case scrambles the copies before the state agreement (as a restore of the stage's layers only
 * leaves them), which must hand every holder the owner's values. */
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
#include "worker/pipeline/pipeline_core.h"
#include "worker/step.h"

enum { TL = 2, TNH = 2, TC = 8, TT = 5, TV = 11, TB = 6, TSTEPS = 5, TW = 4 };

typedef struct tworld {
    rm_model_shape shape;
    const rm_step_ops *ops;
    rm_optimizer_spec os;
    int n, P;      /* ranks; pipeline stages (1: the reference, allreduce) */
    bool scramble; /* P > 1: the copies start wrong; state_sync must fix them */
    rm_rdzv_peer peers[TW];
    rm_ring_listener *lst[TW];
    struct trank {
        struct tworld *w;
        int rank, rc;
        rm_err err;
        float loss[TSTEPS];
        float *params; /* a copy at the end */
        size_t nparams;
        uint64_t sum; /* P > 1: the strategy's checksum at the end */
    } r[TW];
} tworld;

/* Replica (or allreduce rank) d's rows at step s: token windows whose next token follows a rule,
 * so the loss falls. */
static void tfill(rm_model *m, int d, int step)
{
    int32_t *x = m->x;
    for (int i = 0; i < TB; i++)
        for (int t = 0; t < TT; t++) {
            int a = (step * 7 + d * 13 + i * 5 + t * 3) % TV;
            x[i * TT + t] = a;
            m->labels[i * TT + t] = (a * 3 + 1) % TV;
        }
}

static void *trank_main(void *arg)
{
    struct trank *r = arg;
    tworld *w = r->w;
    const rm_kernels *k = rm_kernels_get("cpu");
    rm_model m;
    rm_optim o;
    rm_amp amp;
    rm_step *st = NULL;
    rm_step_round rd = {0}; /* rd.comm: this rank's comm, once made */
    memset(&m, 0, sizeof m);
    memset(&o, 0, sizeof o);
    memset(&amp, 0, sizeof amp);
    rm_err *e = &r->err;
    if ((r->rc = rm_model_init(&m, k, &rm_model_gpt, &w->shape, TB, e)) ||
        (r->rc = rm_optim_init(&o, k, &w->os, m.nparams, e)) ||
        (r->rc = rm_amp_init(&amp, k, RM_PREC_FP32, e)))
        goto out;
    rm_step_env env = {.k = k,
                       .m = &m,
                       .opt = &o,
                       .amp = &amp,
                       .fusion_mb = 1,
                       .sharding = RM_SHARD_NONE,
                       .token = "tok",
                       .timeout_s = 20,
                       .train_samples = 10000,
                       .batch = TB,
                       .epochs = 1};
    if ((r->rc = w->ops->init(&env, &st, e)))
        goto out;
    r->rc = rm_test_ring_round(w->n, r->rank, w->peers, w->lst, &rd, e);
    if (r->rc)
        goto out;
    if ((r->rc = w->ops->round_begin(st, &rd, e)) || (r->rc = w->ops->state_fresh(st, 5, e)))
        goto out;
    int P = w->P, stage = r->rank % P, replica = r->rank / P;
    if (w->scramble && stage > 0) { /* every copy (a stage other than 0 never owns wte) */
        size_t len = m.unit[0].len;
        for (size_t i = 0; i < len; i++) {
            m.params[i] = 0.25f;
            for (int s = 0; s < o.nstate; s++)
                o.state[s][i] = 0.5f;
        }
    }
    rm_step_pos pos = {0};
    if ((r->rc = w->ops->state_sync(st, &pos, e)))
        goto out;
    for (int s = 0; s < TSTEPS; s++) {
        tfill(&m, P > 1 ? replica : r->rank, s);
        rm_step_stats ss;
        if ((r->rc = w->ops->step(st, TB, (float)w->os.lr, &ss, e)))
            goto out;
        r->loss[s] = *m.loss_sum;
    }
    if (P > 1 && (r->rc = w->ops->checksum(st, &r->sum, e)))
        goto out;
    r->params = malloc(m.nparams * sizeof(float));
    r->nparams = m.nparams;
    if (r->params)
        memcpy(r->params, m.params, m.nparams * sizeof(float));
out:
    if (st) {
        w->ops->round_end(st);
        w->ops->destroy(st);
    }
    if (rd.comm)
        rd.ops->destroy(rd.comm);
    rm_amp_free(&amp);
    rm_optim_free(&o);
    rm_model_free(&m);
    return NULL;
}

static int trun(tworld *w, const rm_optimizer_spec *os, int n, int P, bool scramble)
{
    memset(w, 0, sizeof *w);
    w->os = *os;
    w->n = n;
    w->P = P;
    w->scramble = scramble;
    w->ops = P > 1 ? &rm_step_pipeline_ops : &rm_step_allreduce_ops;
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    t.model_type = "gpt";
    t.layers = TL;
    t.heads = TNH;
    t.embed = TC;
    t.context = TT;
    t.vocab = TV;
    rm_model_data d = {.inputs = TT, .classes = TV};
    const rm_model_family *f;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_model_shape_for(&t, &d, &f, &w->shape, &e), RM_OK);
    for (int i = 0; i < n; i++) {
        w->r[i].w = w;
        w->r[i].rank = i;
    }
    if (n > 1)
        rm_test_ring_up(n, w->peers, w->lst);
    char par[96];
    snprintf(par, sizeof par, "{\"pipelineStages\": %d, \"microBatches\": 2}", P);
    if (P > 1)
        setenv(RM_ENV_PARALLELISM, par, 1);
    pthread_t th[TW];
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, trank_main, &w->r[i]);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (w->r[i].rc) {
            fprintf(stderr, "\n  gpt P=%d rank %d: %s", P, i, w->r[i].err.msg);
            rc = w->r[i].rc;
        }
    }
    unsetenv(RM_ENV_PARALLELISM);
    rm_test_ring_down(n, w->lst);
    return rc;
}

static void tfree(tworld *w)
{
    for (int i = 0; i < TW; i++)
        free(w->r[i].params);
}

/* A pipeline of P stages x D replicas against the allreduce strategy on D ranks (each the rows of
 * one replica): the same global batch, so the same step up to float summation order. */
static void check_pipe(const rm_optimizer_spec *os, int P, int D, bool scramble, const char *what)
{
    tworld pp, ref;
    CU_ASSERT_EQUAL_FATAL(trun(&pp, os, P * D, P, scramble), RM_OK);
    CU_ASSERT_EQUAL_FATAL(trun(&ref, os, D, 1, false), RM_OK);
    rm_model plan;
    CU_ASSERT_EQUAL_FATAL(rm_model_plan(&plan, &rm_model_gpt, &pp.shape, NULL), RM_OK);
    uint64_t cost[RM_MODEL_MAX_UNITS];
    for (int u = 0; u < plan.nunits; u++)
        cost[u] = plan.unit_len[u];
    int bounds[RM_MODEL_MAX_UNITS + 1];
    CU_ASSERT_EQUAL_FATAL(rm_pipe_partition(cost, plan.nunits, P, bounds, NULL), RM_OK);
    CU_ASSERT(bounds[1] < plan.nunits - 1); /* the last stage does not hold the embedding */
    size_t wte = plan.unit[0].len;          /* the whole unit is copied */
    for (int d = 0; d < D; d++) {
        for (int p = 0; p < P; p++) {
            const float *got = pp.r[d * P + p].params;
            size_t a = plan.unit[bounds[p]].off;
            size_t b = plan.unit[bounds[p + 1] - 1].off + plan.unit[bounds[p + 1] - 1].len;
            double rel = rm_test_rel_diff(got + a, ref.r[0].params + a, b - a);
            CU_ASSERT(rel < 1e-5);
            if (!(rel < 1e-5))
                fprintf(stderr, "\n  %s: replica %d stage %d vs allreduce: %g", what, d, p, rel);
        }
        /* the last stage's copy of the embedding: bit for bit its owner's (replica 0's stage 0) */
        CU_ASSERT_EQUAL(memcmp(pp.r[d * P + P - 1].params, pp.r[0].params, wte * sizeof(float)), 0);
        /* the loss rides back to every stage of the replica; its value is the reference's */
        for (int s = 0; s < TSTEPS; s++) {
            float lp = pp.r[d * P + P - 1].loss[s], lr = ref.r[d].loss[s];
            CU_ASSERT(fabsf(lp - lr) <= 1e-4f * fabsf(lr) + 1e-6f);
        }
    }
    /* the checksum counts the tied unit once, from its owner: the whole vector's FNV-1a (what the
     * allreduce strategy reports), assembled from the stages' own ranges */
    float *whole = malloc(plan.nparams * sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(whole);
    for (int p = 0; p < P; p++) {
        size_t a = plan.unit[bounds[p]].off,
               b = plan.unit[bounds[p + 1] - 1].off + plan.unit[bounds[p + 1] - 1].len;
        memcpy(whole + a, pp.r[p].params + a, (b - a) * sizeof(float));
    }
    uint64_t want = rm_fnv1a64(whole, plan.nparams * sizeof(float), RM_FNV64_INIT);
    for (int i = 0; i < P * D; i++)
        CU_ASSERT_EQUAL(pp.r[i].sum, want);
    free(whole);
    /* and it learns: the last step's loss below the first's */
    CU_ASSERT(pp.r[P - 1].loss[TSTEPS - 1] < pp.r[P - 1].loss[0]);
    tfree(&pp);
    tfree(&ref);
}

static const rm_optimizer_spec SGD = {.type = RM_OPT_SGD, .lr = 0.2, .momentum = 0.5};
static const rm_optimizer_spec ADAM = {
    .type = RM_OPT_ADAM, .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};

static void test_two_stages_sgd(void)
{
    check_pipe(&SGD, 2, 1, false, "P=2 sgd");
}
static void test_two_stages_adam(void)
{
    check_pipe(&ADAM, 2, 1, false, "P=2 adam");
}
/* two data-parallel replicas: each side's copy is averaged over its replicas, then tied */
static void test_two_stages_two_replicas(void)
{
    check_pipe(&ADAM, 2, 2, false, "P=2 D=2 adam");
}
/* one unit per stage: the embedding alone on stage 0, the head alone on stage 3 */
static void test_four_stages(void)
{
    check_pipe(&SGD, 4, 1, false, "P=4 sgd");
}
/* the copies start wrong (what a restore of the stage's layers leaves): the state agreement gives
 * every holder the owner's parameters and optimizer state */
static void test_sync_fixes_copies(void)
{
    check_pipe(&ADAM, 2, 2, true, "P=2 D=2 scrambled copies");
}

void rm_suite_pipe_tied(void)
{
    static const rm_test_case cases[] = {
        {"two_stages_sgd", test_two_stages_sgd},
        {"two_stages_adam", test_two_stages_adam},
        {"two_stages_two_replicas", test_two_stages_two_replicas},
        {"four_stages", test_four_stages},
        {"sync_fixes_copies", test_sync_fixes_copies},
    };
    RM_ADD_SUITE("pipe_tied", NULL, NULL, cases);
}
