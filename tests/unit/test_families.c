/* test_families.c — the model interface is the only way strategies touch a model: two families,
 * the MLP and a tiny one defined here through the same table (an element-wise tanh unit, then a
 * linear head, written with plain loops and its own parameter layout), each trained in process by
 * two ranks (threads on loopback rings) with allreduce, ZeRO-3 (sharding full) and a 2-stage
 * pipeline. For each family: every strategy lowers the loss; ZeRO-3 ends with the parameters
 * allreduce ends with; the pipeline's two stages together end with what one rank with the whole
 * batch ends with (up to summation order). The tiny family also checks its backward against
 * finite differences, so the comparisons rest on a correct gradient. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/worker_env.h"
#include "tests/unit/testring.h"
#include "tests/unit/testutil.h"
#include "worker/comm/comm.h"
#include "worker/gpu.h"
#include "worker/model/mlp.h"
#include "worker/optim/optim.h"
#include "worker/step.h"

/* ---- the tiny family: unit 0 "tanh" y = tanh(a*x + c) per feature, unit 1 "linear" D -> C ---- */

enum { TD = 6, TC = 3 };

typedef struct tiny_priv {
    float *h;    /* [B x TD] unit 0's output */
    float *z;    /* [B x TC] logits, then their gradient */
    float *dh;   /* [B x TD] gradient at unit 0's output (when unit 1 computes it) */
    float *g[2]; /* a unit's whole gradient, for placing (ZeRO) */
} tiny_priv;

static int tiny_shape(const rm_training_spec *t, const rm_model_data *d, rm_model_shape *s, rm_err *e)
{
    memset(s, 0, sizeof *s);
    s->nlayers = 2;
    s->dims[0] = TD;
    s->dims[1] = -1; /* a word the MLP never writes: the shapes are told apart */
    s->dims[2] = TC;
    return RM_OK;
}

static int tiny_plan(rm_model *m, rm_err *e)
{
    m->unit[0] = (rm_model_unit){.kind = "tanh",
                                 .off = 0,
                                 .len = 2 * TD,
                                 .in_width = TD,
                                 .out_width = TD,
                                 .act_floats = TD,
                                 .flops_fwd = 3 * TD,
                                 .flops_bwd = 5 * TD,
                                 .flops_bwd_first = 3 * TD};
    m->unit[1] = (rm_model_unit){.kind = "linear",
                                 .off = 2 * TD,
                                 .len = TD * TC + TC,
                                 .in_width = TD,
                                 .out_width = TC,
                                 .act_floats = TC,
                                 .flops_fwd = 2 * TD * TC,
                                 .flops_bwd = 4 * TD * TC,
                                 .flops_bwd_first = 2 * TD * TC};
    m->nunits = 2;
    m->nparams = 2 * TD + TD * TC + TC;
    m->classes = TC;
    m->x_row_bytes = TD * sizeof(float);
    m->label_row = 1;
    return RM_OK;
}

static void tiny_release(rm_model *m)
{
    tiny_priv *p = m->priv;
    free(p->h);
    free(p->z);
    free(p->dh);
    free(p->g[0]);
    free(p->g[1]);
    free(p);
    m->priv = NULL;
}

static int tiny_alloc(rm_model *m, rm_err *e)
{
    tiny_priv *p = calloc(1, sizeof *p);
    if (!p)
        return RM_ENOMEM;
    m->priv = p;
    size_t B = (size_t)m->max_batch;
    p->h = calloc(B * TD, sizeof(float));
    p->z = calloc(B * TC, sizeof(float));
    p->dh = calloc(B * TD, sizeof(float));
    p->g[0] = calloc(m->unit[0].len, sizeof(float));
    p->g[1] = calloc(m->unit[1].len, sizeof(float));
    return p->h && p->z && p->dh && p->g[0] && p->g[1] ? RM_OK : RM_ENOMEM;
}

/* its own init stream: a = 1 + small, c = small, W from a scaled uniform, b = 0 */
static float tiny_init_value(uint64_t seed, size_t i)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;
    z ^= z >> 31;
    z *= 0x94d049bb133111ebull;
    z ^= z >> 29;
    return (float)((double)(z >> 11) / 9007199254740992.0 - 0.5);
}

static void tiny_init_params(const rm_model *m, uint64_t seed, int u0, int u1, float *host)
{
    size_t base = m->unit[u0].off;
    for (int u = u0; u < u1; u++)
        for (size_t i = 0; i < m->unit[u].len; i++) {
            size_t at = m->unit[u].off + i;
            float v = tiny_init_value(seed, at);
            if (u == 0)
                v = i < TD ? 1.0f + 0.2f * v : 0.2f * v;
            else
                v = i < TD * TC ? 0.8f * v : 0.0f;
            host[at - base] = v;
        }
}

static const float *uparams(const rm_model *m, int u)
{
    return m->uparams[u] ? m->uparams[u] : m->params + m->unit[u].off;
}

static const float *tiny_in(const rm_model *m, const rm_model_pass *p)
{
    return p->in ? p->in : (const float *)rm_model_input(m, p->off);
}

static void tiny_forward(rm_model *m, const rm_model_pass *p)
{
    tiny_priv *pv = m->priv;
    const float *in = tiny_in(m, p);
    for (int u = p->u0; u < p->u1; u++) {
        if (p->pre)
            p->pre(p->ud, u);
        const float *w = uparams(m, u);
        for (int r = 0; r < p->rows; r++) {
            size_t row = (size_t)(p->off + r);
            if (u == 0) {
                for (int i = 0; i < TD; i++)
                    pv->h[row * TD + i] = tanhf(w[i] * in[(size_t)r * TD + i] + w[TD + i]);
            } else {
                for (int j = 0; j < TC; j++) {
                    float s = w[TD * TC + j];
                    for (int i = 0; i < TD; i++)
                        s += in[(size_t)r * TD + i] * w[i * TC + j];
                    pv->z[row * TC + j] = s;
                }
            }
        }
        in = pv->h + (size_t)p->off * TD;
    }
}

static float *tiny_output(const rm_model *m, int u, int off)
{
    tiny_priv *pv = m->priv;
    return u == 0 ? pv->h + (size_t)off * TD : pv->z + (size_t)off * TC;
}

static void tiny_loss(rm_model *m, int off, int rows, float inv_batch, float *loss_sum)
{
    float *z = tiny_output(m, 1, off);
    m->k->softmax_xent_fwd_bwd(z, m->labels + off, rows, TC, inv_batch, z, loss_sum);
}

/* unit u's gradient for these rows into g (overwritten); its input gradient into dx if set */
static void tiny_unit_bwd(rm_model *m, int u, const float *in, const float *dy, int off, int rows, float *g,
                          float *dx)
{
    tiny_priv *pv = m->priv;
    const float *w = uparams(m, u);
    memset(g, 0, m->unit[u].len * sizeof(float));
    for (int r = 0; r < rows; r++) {
        const float *x = in + (size_t)r * TD;
        if (u == 0) {
            const float *h = pv->h + (size_t)(off + r) * TD;
            for (int i = 0; i < TD; i++) {
                float d = dy[(size_t)r * TD + i] * (1.0f - h[i] * h[i]);
                g[i] += d * x[i];
                g[TD + i] += d;
                if (dx)
                    dx[(size_t)r * TD + i] = d * w[i];
            }
        } else {
            for (int j = 0; j < TC; j++) {
                float d = dy[(size_t)r * TC + j];
                g[TD * TC + j] += d;
                for (int i = 0; i < TD; i++)
                    g[i * TC + j] += x[i] * d;
            }
            if (dx)
                for (int i = 0; i < TD; i++) {
                    float s = 0;
                    for (int j = 0; j < TC; j++)
                        s += w[i * TC + j] * dy[(size_t)r * TC + j];
                    dx[(size_t)r * TD + i] = s;
                }
        }
    }
}

static void tiny_backward(rm_model *m, const rm_model_pass *p)
{
    tiny_priv *pv = m->priv;
    const float *dy = p->dy;
    for (int u = p->u1 - 1; u >= p->u0; u--) {
        const float *in = u == p->u0 ? tiny_in(m, p) : pv->h + (size_t)p->off * TD;
        float *dx = u > p->u0 ? pv->dh : p->dx;
        if (dx && p->pre)
            p->pre(p->ud, u);
        tiny_unit_bwd(m, u, in, dy, p->off, p->rows, pv->g[u], dx);
        if (p->place) {
            rm_unit_grad g = {.unit = u, .rows = p->rows, .fam = pv->g[u]};
            p->place(p->ud, &g);
        } else {
            float *dst = m->grads + m->unit[u].off;
            for (size_t i = 0; i < m->unit[u].len; i++)
                dst[i] = p->accumulate ? dst[i] + pv->g[u][i] : pv->g[u][i];
        }
        if (p->ready)
            p->ready(p->ud, u);
        dy = dx;
    }
}

static void tiny_grad_range(const rm_model *m, const rm_unit_grad *g, size_t from, size_t to, float *dst)
{
    memcpy(dst, (const float *)g->fam + from, (to - from) * sizeof(float));
}

static void tiny_count_correct(rm_model *m, int rows, int32_t *correct)
{
    m->k->argmax_correct(tiny_output(m, 1, 0), m->labels, rows, TC, correct);
}

static int tiny_tensors(const rm_model *m, int u, rm_model_tensor *out, int cap)
{
    static const char *const names[2][2] = {{"tanh.scale", "tanh.shift"}, {"head.weight", "head.bias"}};
    int64_t n0 = u == 0 ? TD : TD * TC, n1 = u == 0 ? TD : TC;
    for (int i = 0; i < 2 && i < cap; i++) {
        out[i] = (rm_model_tensor){
            .off = m->unit[u].off + (i ? (size_t)n0 : 0), .ndim = 1, .shape = {i ? n1 : n0}, .layout = ""};
        snprintf(out[i].name, sizeof out[i].name, "%s", names[u][i]);
    }
    return 2;
}

static const rm_model_family tiny_family = {
    .name = "tiny",
    .shape = tiny_shape,
    .plan = tiny_plan,
    .alloc = tiny_alloc,
    .release = tiny_release,
    .init_params = tiny_init_params,
    .forward = tiny_forward,
    .loss = tiny_loss,
    .backward = tiny_backward,
    .grad_range = tiny_grad_range,
    .count_correct = tiny_count_correct,
    .output = tiny_output,
    .describe = rm_model_shape_words,
    .tensors = tiny_tensors,
};

/* ---- a two-rank world in process ---- */

enum { B = 8, STEPS = 40, W = 2 };

typedef struct rank_run rank_run;
typedef struct world {
    const rm_model_family *fam;
    rm_model_shape shape;
    const rm_step_ops *ops;
    rm_sharding sharding;
    int n;
    rm_rdzv_peer peers[W];
    rm_ring_listener *lst[W];
    struct rank_run {
        struct world *w;
        int rank, rc;
        rm_err err;
        rm_model m;
        float loss[STEPS];
        float *params; /* a copy at the end */
    } r[W];
} world;

/* The rows rank r trains on at step s: a fixed rule that a linear head can learn (the class is
 * the sign pattern of two features). */
static void fill(rm_model *m, int rank, int rows, int step)
{
    float *x = m->x;
    for (int i = 0; i < rows; i++) {
        int g = (step * 97 + rank * 31 + i * 7) % 64;
        for (int f = 0; f < m->unit[0].in_width; f++)
            x[(size_t)i * m->unit[0].in_width + f] = (float)(((g + 3) * (f + 5)) % 17) / 17.0f - 0.5f;
        float a = x[(size_t)i * m->unit[0].in_width], b = x[(size_t)i * m->unit[0].in_width + 1];
        m->labels[i] = a > 0 ? 0 : b > 0 ? 1 : 2;
    }
}

static void *rank_main(void *arg)
{
    rank_run *r = arg;
    world *w = r->w;
    const rm_kernels *k = rm_kernels_get("cpu");
    rm_optim o;
    rm_amp amp;
    rm_step *st = NULL;
    rm_comm *comm = NULL;
    memset(&o, 0, sizeof o);
    memset(&amp, 0, sizeof amp);
    int rows = B;
    rm_err *e = &r->err;
    rm_optimizer_spec os = {.type = RM_OPT_SGD, .lr = 0.3, .momentum = 0.5};
    if ((r->rc = rm_model_init(&r->m, k, w->fam, &w->shape, rows, e)) ||
        (r->rc = rm_optim_init(&o, k, &os, r->m.nparams, e)) ||
        (r->rc = rm_amp_init(&amp, k, RM_PREC_FP32, e)))
        goto out;
    rm_step_env env = {.k = k,
                       .m = &r->m,
                       .opt = &o,
                       .amp = &amp,
                       .fusion_mb = 1,
                       .sharding = w->sharding,
                       .token = "tok",
                       .timeout_s = 20,
                       .train_samples = 10000,
                       .batch = rows,
                       .epochs = 1};
    if ((r->rc = w->ops->init(&env, &st, e)))
        goto out;
    if (w->n == 1) {
        rm_comm_cfg cc = {.rank = 0, .world_size = 1, .epoch = 1};
        if ((r->rc = rm_comm_local_ops()->init(&cc, &comm, e)))
            goto out;
    } else {
        rm_comm_cfg cc = {.rank = r->rank,
                          .world_size = w->n,
                          .epoch = 1,
                          .peers = w->peers,
                          .token = "tok",
                          .listener = w->lst[r->rank],
                          .listen_fd = -1,
                          .timeout_s = 20};
        if ((r->rc = rm_comm_ring_ops()->init(&cc, &comm, e)))
            goto out;
    }
    rm_step_round rd = {.ops = w->n == 1 ? rm_comm_local_ops() : rm_comm_ring_ops(),
                        .comm = comm,
                        .rank = r->rank,
                        .world = w->n,
                        .peers = w->peers,
                        .listener = w->lst[r->rank],
                        .epoch = 1};
    if ((r->rc = w->ops->round_begin(st, &rd, e)) || (r->rc = w->ops->state_fresh(st, 9, e)))
        goto out;
    bool piped = w->ops == &rm_step_pipeline_ops;
    for (int s = 0; s < STEPS; s++) {
        /* allreduce and ZeRO: each rank its own rows; the pipeline's two stages and a rank alone:
         * rank 0's */
        fill(&r->m, piped || w->n == 1 ? 0 : r->rank, B, s);
        rm_step_stats ss;
        if ((r->rc = w->ops->step(st, rows, 0.3f, &ss, e)))
            goto out;
        r->loss[s] = *r->m.loss_sum; /* host memory: the step's summed loss */
    }
    if (w->ops->materialize && (r->rc = w->ops->materialize(st, e)))
        goto out;
    r->params = malloc(r->m.nparams * sizeof(float));
    if (r->params)
        memcpy(r->params, r->m.params, r->m.nparams * sizeof(float));
out:
    if (st) {
        w->ops->round_end(st);
        w->ops->destroy(st);
    }
    if (comm)
        (w->n == 1 ? rm_comm_local_ops() : rm_comm_ring_ops())->destroy(comm);
    rm_amp_free(&amp);
    rm_optim_free(&o);
    rm_model_free(&r->m);
    return NULL;
}

static int run_world(world *w, const rm_model_family *fam, const rm_step_ops *ops, rm_sharding sh, int n)
{
    memset(w, 0, sizeof *w);
    w->fam = fam;
    w->ops = ops;
    w->sharding = sh;
    w->n = n;
    rm_err e = {0};
    if (fam == &rm_model_mlp) {
        static const int hidden[] = {5};
        CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&w->shape, TD, hidden, 1, TC, &e), RM_OK);
    } else {
        tiny_shape(NULL, NULL, &w->shape, &e);
    }
    pthread_t th[W];
    for (int i = 0; i < n; i++) {
        w->r[i].w = w;
        w->r[i].rank = i;
    }
    if (n > 1)
        rm_test_ring_up(n, w->peers, w->lst);
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, rank_main, &w->r[i]);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        if (w->r[i].rc) {
            fprintf(stderr, "\n  %s rank %d: %s", fam->name, i, w->r[i].err.msg);
            rc = w->r[i].rc;
        }
    }
    rm_test_ring_down(n, w->lst);
    return rc;
}

static void world_free(world *w)
{
    for (int i = 0; i < W; i++)
        free(w->r[i].params);
}

static double rel_diff(const float *a, const float *b, size_t from, size_t to)
{
    double num = 0, den = 0;
    for (size_t i = from; i < to; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* the loss fell: the last three steps' mean below 0.8 x the first three's */
static void check_learns(const world *w, const char *what)
{
    for (int i = 0; i < w->n; i++) {
        const float *l = w->r[i].loss;
        if (w->ops == &rm_step_pipeline_ops && i == 0)
            continue; /* the loss lives on the last stage (stage 0 relays it) */
        double a = (l[0] + l[1] + l[2]) / 3, b = (l[STEPS - 1] + l[STEPS - 2] + l[STEPS - 3]) / 3;
        CU_ASSERT(b < 0.8 * a);
        if (!(b < 0.8 * a))
            fprintf(stderr, "\n  %s %s rank %d: loss %.4f -> %.4f", w->fam->name, what, i, a, b);
    }
}

static void test_family(const rm_model_family *fam)
{
    world ar, z3, pp;
    CU_ASSERT_EQUAL_FATAL(run_world(&ar, fam, &rm_step_allreduce_ops, RM_SHARD_NONE, W), RM_OK);
    check_learns(&ar, "allreduce");
    rm_model plan;
    CU_ASSERT_EQUAL_FATAL(rm_model_plan(&plan, fam, &ar.shape, NULL), RM_OK);
    size_t n = plan.nparams;
    /* allreduce: both ranks hold the same parameters */
    CU_ASSERT_EQUAL(memcmp(ar.r[0].params, ar.r[1].params, n * sizeof(float)), 0);

    CU_ASSERT_EQUAL_FATAL(run_world(&z3, fam, &rm_step_allreduce_ops, RM_SHARD_FULL, W), RM_OK);
    check_learns(&z3, "zero-3");
    for (int i = 0; i < W; i++) {
        double d = rel_diff(z3.r[i].params, ar.r[0].params, 0, n);
        CU_ASSERT(d < 1e-5);
        if (!(d < 1e-5))
            fprintf(stderr, "\n  %s zero-3 rank %d vs allreduce: %g", fam->name, i, d);
    }

    /* the pipeline: 2 stages of one replica, the replica's batch = rank 0's rows; the reference is
     * one rank of the allreduce strategy on the same rows */
    setenv(RM_ENV_PARALLELISM, "{\"pipelineStages\": 2, \"microBatches\": 2}", 1);
    int rc = run_world(&pp, fam, &rm_step_pipeline_ops, RM_SHARD_NONE, W);
    unsetenv(RM_ENV_PARALLELISM);
    CU_ASSERT_EQUAL_FATAL(rc, RM_OK);
    check_learns(&pp, "pipeline");
    /* reference: the whole model on one rank over the same B rows (rank 0's), world 1 */
    world ref;
    CU_ASSERT_EQUAL_FATAL(run_world(&ref, fam, &rm_step_allreduce_ops, RM_SHARD_NONE, 1), RM_OK);
    size_t cut = plan.unit[1].off; /* stage 0 holds unit 0 (the cost partition of 2 units) */
    double d0 = rel_diff(pp.r[0].params, ref.r[0].params, 0, cut);
    double d1 = rel_diff(pp.r[1].params, ref.r[0].params, cut, n);
    CU_ASSERT(d0 < 1e-4 && d1 < 1e-4);
    if (!(d0 < 1e-4 && d1 < 1e-4))
        fprintf(stderr, "\n  %s pipeline stages vs one rank: %g %g", fam->name, d0, d1);
    world_free(&ar);
    world_free(&z3);
    world_free(&pp);
    world_free(&ref);
}

static void test_mlp(void)
{
    test_family(&rm_model_mlp);
}
static void test_tiny(void)
{
    test_family(&tiny_family);
}

/* The tiny family's backward against central differences of its loss (the kernels' loss). */
static void test_tiny_gradient(void)
{
    const rm_kernels *k = rm_kernels_get("cpu");
    rm_model m;
    rm_model_shape s;
    rm_err e = {0};
    tiny_shape(NULL, NULL, &s, &e);
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&m, k, &tiny_family, &s, 4, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(&m, 3, &e), RM_OK);
    fill(&m, 0, 4, 1);
    rm_model_forward(&m, 4);
    rm_model_backward(&m, 4, 1.0f, NULL, NULL);
    float *g = malloc(m.nparams * sizeof(float));
    memcpy(g, m.grads, m.nparams * sizeof(float));
    double worst = 0;
    for (size_t i = 0; i < m.nparams; i++) {
        float keep = m.params[i];
        double l[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            m.params[i] = keep + (sgn ? -1e-2f : 1e-2f);
            rm_model_forward(&m, 4);
            rm_model_loss(&m, 0, 4, 1.0f, m.loss_sum);
            l[sgn] = *m.loss_sum;
        }
        m.params[i] = keep;
        double fd = (l[0] - l[1]) / 2e-2, d = fabs(fd - g[i]) / (fabs(fd) + 1e-2);
        worst = d > worst ? d : worst;
    }
    CU_ASSERT(worst < 2e-2);
    if (!(worst < 2e-2))
        fprintf(stderr, "\n  tiny gradient vs finite differences: %g", worst);
    /* both families' named tensors tile their units */
    for (int fam = 0; fam < 2; fam++) {
        rm_model mm;
        rm_model_shape ms;
        static const int hidden[] = {5};
        if (fam)
            CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&ms, TD, hidden, 1, TC, &e), RM_OK);
        CU_ASSERT_EQUAL_FATAL(rm_model_plan(&mm, fam ? &rm_model_mlp : &tiny_family, fam ? &ms : &s, &e),
                              RM_OK);
        for (int u = 0; u < mm.nunits; u++) {
            rm_model_tensor t[4];
            int nt = rm_model_tensors(&mm, u, t, 4);
            size_t at = mm.unit[u].off;
            for (int i = 0; i < nt; i++) {
                size_t n = 1;
                for (int d = 0; d < t[i].ndim; d++)
                    n *= (size_t)t[i].shape[d];
                CU_ASSERT_EQUAL(t[i].off, at);
                at += n;
            }
            CU_ASSERT_EQUAL(at, mm.unit[u].off + mm.unit[u].len);
        }
    }
    char buf[64];
    rm_model_shape_str(&m, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "6--1-3");
    free(g);
    rm_model_free(&m);
}

void rm_suite_families(void)
{
    static const rm_test_case cases[] = {
        {"tiny_gradient", test_tiny_gradient},
        {"mlp_allreduce_zero3_pipeline", test_mlp},
        {"tiny_allreduce_zero3_pipeline", test_tiny},
    };
    RM_ADD_SUITE("families", NULL, NULL, cases);
}
