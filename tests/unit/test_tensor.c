/* Tests for worker/tensor/tp_mlp.h (docs/models-and-data.md, "Tensor parallelism"): the split
 * plan and Megatron's f/g collectives as event tables for several layer counts (odd counts leave
 * the last layer replicated), slice/assemble round trips, and the split forward/backward of T
 * ranks (threads summing through a shared buffer) against the unsplit MLP of worker/model/mlp.c:
 * the loss (of the replicated logits) and every gradient agree within float tolerance, and each rank issues exactly the
 * collectives of the table. The transformer's split (worker/tensor/tp_gpt.h) likewise: its event
 * table, slice/assemble with the vocabulary padding, the split loss and gradients of T = 1, 2, 4
 * against worker/model/gpt.c, and the vocab-parallel cross-entropy against the whole one. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/testutil.h"
#include "kernels/transformer.h"
#include "worker/model/mlp.h"
#include "worker/tensor/tp_gpt.h"
#include "worker/pipeline/pipeline_core.h"
#include "worker/tensor/tp_mlp.h"

static void shape_of(rm_model_shape *s, int inputs, const int *hidden, int nh, int classes)
{
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(s, inputs, hidden, nh, classes, &e), RM_OK);
}

static void test_events(void)
{
    static const struct {
        int nh, hidden[4], T;
        const char *kinds; /* c col, r row, p replicated */
        int nev;
        rm_tp_event ev[4];
    } c[] = {
        /* 784 -> 64 -> 10: one pair; forward g of the logits, no backward collective */
        {1, {64}, 2, "cr", 1, {{'F', 1, 10}}},
        /* two hidden widths: a pair and the replicated last layer */
        {2, {64, 32}, 4, "crp", 1, {{'F', 1, 32}}},
        /* two pairs: g after each row layer, f before the second column layer */
        {3, {64, 32, 16}, 2, "crcr", 3, {{'F', 1, 32}, {'F', 3, 10}, {'B', 2, 32}}},
        {4, {64, 32, 16, 8}, 2, "crcrp", 3, {{'F', 1, 32}, {'F', 3, 8}, {'B', 2, 32}}},
        /* T = 1: the same kinds, no collective */
        {1, {64}, 1, "cr", 0, {{0}}},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(c); i++) {
        rm_model_shape s;
        shape_of(&s, 784, c[i].hidden, c[i].nh, 10);
        for (int t = 0; t < c[i].T; t++) {
            rm_tp_plan p;
            rm_err e = {0};
            CU_ASSERT_EQUAL_FATAL(rm_tp_mlp_plan(&s, c[i].T, t, &p, &e), RM_OK);
            for (int l = 0; l < p.L; l++)
                CU_ASSERT_EQUAL(p.l[l].kind, c[i].kinds[l] == 'c'   ? RM_TP_COL
                                             : c[i].kinds[l] == 'r' ? RM_TP_ROW
                                                                    : RM_TP_REP);
            rm_tp_event ev[8];
            int n = rm_tp_mlp_events(&p, ev, 8);
            CU_ASSERT_EQUAL(n, c[i].nev);
            for (int k = 0; k < n && k < c[i].nev; k++) {
                CU_ASSERT_EQUAL(ev[k].pass, c[i].ev[k].pass);
                CU_ASSERT_EQUAL(ev[k].layer, c[i].ev[k].layer);
                CU_ASSERT_EQUAL(ev[k].width, c[i].ev[k].width);
            }
            /* the pieces of the T ranks add up to the whole model, replicated ones counted once */
            size_t split = 0, rep = 0;
            for (size_t j = 0; j < p.n; j++)
                rm_tp_replicated(&p, j) ? rep++ : split++;
            CU_ASSERT_EQUAL(split * (size_t)c[i].T + rep, p.nwhole);
        }
    }
    /* a split width that does not divide names its field */
    int h[2] = {30, 8};
    rm_model_shape s;
    shape_of(&s, 784, h, 2, 10);
    rm_tp_plan p;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_tp_mlp_plan(&s, 4, 0, &p, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.training.model.hidden[0]");
    shape_of(&s, 784, h, 0, 10);
    CU_ASSERT_EQUAL(rm_tp_mlp_plan(&s, 2, 0, &p, &e), RM_EINVAL);
}

static void test_slice_assemble(void)
{
    int h[3] = {8, 6, 4};
    rm_model_shape s;
    shape_of(&s, 5, h, 3, 3);
    const int T = 2;
    rm_tp_plan p[2];
    rm_err e = {0};
    for (int t = 0; t < T; t++)
        CU_ASSERT_EQUAL_FATAL(rm_tp_mlp_plan(&s, T, t, &p[t], &e), RM_OK);
    size_t W = p[0].nwhole;
    float *whole = malloc(W * sizeof(float)), *back = calloc(W, sizeof(float));
    float *loc = malloc(p[0].n * sizeof(float));
    for (size_t i = 0; i < W; i++)
        whole[i] = (float)i;
    for (int t = 0; t < T; t++) {
        rm_tp_slice(&p[t], whole, loc);
        float *mine = calloc(W, sizeof(float));
        rm_tp_assemble(&p[t], loc, mine, t == 0);
        for (size_t i = 0; i < W; i++)
            back[i] += mine[i];
        free(mine);
    }
    for (size_t i = 0; i < W; i++)
        CU_ASSERT_EQUAL_FATAL(back[i], whole[i]);
    free(whole);
    free(back);
    free(loc);
}

/* A rank's pieces (local) through its checkpoint runs into whole (worker/checkpoint/ckpt_shard.h):
 * the reader's assembly; counts how often each whole float is written into hits. */
static void apply_runs(const rm_ckpt_run *run, int n, const float *local, float *whole, uint8_t *hits)
{
    for (int i = 0; i < n; i++)
        for (uint32_t r = 0; r < run[i].rows; r++)
            for (uint64_t j = 0; j < run[i].len; j++) {
                uint64_t w = run[i].whole + r * run[i].wstride + j;
                whole[w] = local[run[i].local + r * run[i].lstride + j];
                hits[w]++;
            }
}

/* The ranks' assembled pieces (back) and their runs (viaruns, hits) are the whole model exactly
 * once; frees the four buffers. */
static void expect_whole(size_t W, float *whole, float *back, float *viaruns, uint8_t *hits)
{
    for (size_t i = 0; i < W; i++) {
        CU_ASSERT_EQUAL_FATAL(back[i], whole[i]);
        CU_ASSERT_EQUAL_FATAL(viaruns[i], whole[i]);
        CU_ASSERT_EQUAL_FATAL(hits[i], 1);
    }
    free(whole);
    free(back);
    free(viaruns);
    free(hits);
}

/* T x P (docs/models-and-data.md, "Tensor parallelism"): for every T that divides the split widths
 * and every P up to the pairs, the stages hold contiguous whole pairs covering the model (a
 * column layer never ends a stage), each stage's pieces pair from its first layer, the T x P
 * ranks' pieces (replicated ones from t = 0) sum to the whole model, their checkpoint runs cover
 * it exactly once with the same values, and a stage's input gradient is summed (f) exactly when
 * its first layer is column-parallel. */
static void test_stage_tables(void)
{
    int h[4] = {24, 12, 24, 12}; /* 5 layers: pairs (0,1) (2,3) and layer 4 alone */
    rm_model_shape s;
    shape_of(&s, 7, h, 4, 3);
    rm_err e = {0};
    const int Ts[] = {1, 2, 3, 4, 6, 12};
    for (size_t ti = 0; ti < RM_ARRAY_LEN(Ts); ti++) {
        int T = Ts[ti];
        for (int P = 1; P <= 4; P++) {
            int b[RM_PIPE_MAX_STAGES + 1];
            int rc = rm_tp_mlp_stages(&s, P, b, &e);
            if (P > 3) { /* 3 units */
                CU_ASSERT_EQUAL(rc, RM_EINVAL);
                CU_ASSERT_STRING_EQUAL(e.field, "spec.parallelism.pipelineStages");
                continue;
            }
            CU_ASSERT_EQUAL_FATAL(rc, RM_OK);
            CU_ASSERT_EQUAL(b[0], 0);
            CU_ASSERT_EQUAL(b[P], 5);
            size_t W = 0;
            float *whole = NULL, *back = NULL, *viaruns = NULL;
            uint8_t *hits = NULL;
            for (int p = 0; p < P; p++) {
                CU_ASSERT(b[p] < b[p + 1]);
                CU_ASSERT_EQUAL(b[p] % 2, 0); /* whole pairs */
                for (int t = 0; t < T; t++) {
                    rm_tp_plan pl;
                    CU_ASSERT_EQUAL_FATAL(rm_tp_mlp_plan_range(&s, T, t, b[p], b[p + 1], &pl, &e), RM_OK);
                    if (!whole) {
                        W = pl.nwhole;
                        whole = malloc(W * sizeof(float));
                        back = calloc(W, sizeof(float));
                        viaruns = calloc(W, sizeof(float));
                        hits = calloc(W, 1);
                        for (size_t i = 0; i < W; i++)
                            whole[i] = (float)(i + 1);
                    }
                    size_t n = 0;
                    for (int l = b[p]; l < b[p + 1]; l++) {
                        rm_tp_kind want = l + 1 < b[p + 1] && (l - b[p]) % 2 == 0 ? RM_TP_COL
                                          : (l - b[p]) % 2 == 1                   ? RM_TP_ROW
                                                                                  : RM_TP_REP;
                        CU_ASSERT_EQUAL(pl.l[l].kind, want);
                        n += (size_t)pl.l[l].in * (size_t)pl.l[l].out + (size_t)pl.l[l].out;
                    }
                    CU_ASSERT_EQUAL(pl.n, n); /* only the stage's layers */
                    CU_ASSERT(pl.l[b[p + 1] - 1].kind != RM_TP_COL);
                    /* f before the stage's first layer: its input gradient goes to stage p-1 */
                    rm_tp_event ev[16];
                    int ne = rm_tp_mlp_events(&pl, ev, 16), nf = 0;
                    for (int i = 0; i < ne && i < 16; i++)
                        nf += ev[i].pass == 'B' && ev[i].layer == b[p];
                    CU_ASSERT_EQUAL(nf, p > 0 && T > 1 && pl.l[b[p]].kind == RM_TP_COL ? 1 : 0);
                    float *loc = malloc((n ? n : 1) * sizeof(float)), *mine = calloc(W, sizeof(float));
                    rm_tp_slice(&pl, whole, loc);
                    rm_tp_assemble(&pl, loc, mine, t == 0);
                    for (size_t i = 0; i < W; i++)
                        back[i] += mine[i];
                    rm_ckpt_run runs[32];
                    int nr = rm_tp_mlp_runs(&pl, p * T + t, runs, 32);
                    CU_ASSERT_FATAL(nr >= 0 && nr <= 32); /* 0: a stage of replicated layers, t > 0 */
                    apply_runs(runs, nr, loc, viaruns, hits);
                    free(loc);
                    free(mine);
                }
            }
            expect_whole(W, whole, back, viaruns, hits);
        }
    }
}

/* T threads summing through shared slots, rank order: the same bits on every rank */
typedef struct harness {
    int T;
    pthread_barrier_t bar;
    float *slot[8];
} harness;

typedef struct rank_ctx {
    harness *h;
    int t;
    rm_tp_mlp m;
    float *tmp;
    size_t calls[32];
    int ncalls;
    const float *x;
    const int32_t *labels;
    int rows;
    float loss;
    int rc;
} rank_ctx;

static int th_allreduce(void *ud, float *buf, size_t n, rm_err *err)
{
    rank_ctx *r = ud;
    harness *h = r->h;
    if (r->ncalls < 32)
        r->calls[r->ncalls] = n;
    r->ncalls++;
    h->slot[r->t] = buf;
    pthread_barrier_wait(&h->bar);
    for (size_t i = 0; i < n; i++) {
        float a = 0;
        for (int q = 0; q < h->T; q++)
            a += h->slot[q][i];
        r->tmp[i] = a;
    }
    pthread_barrier_wait(&h->bar);
    memcpy(buf, r->tmp, n * sizeof(float));
    pthread_barrier_wait(&h->bar);
    return RM_OK;
}

static void *rank_main(void *arg)
{
    rank_ctx *r = arg;
    rm_err e = {0};
    r->rc = rm_tp_mlp_forward(&r->m, r->x, r->rows, &e);
    if (!r->rc) {
        rm_tp_mlp_loss(&r->m, r->labels, r->rows, 1.0f / (float)r->rows, &r->loss);
        r->rc = rm_tp_mlp_backward(&r->m, r->x, r->rows, &e);
    }
    return NULL;
}

static double rel_err(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

static void split_vs_whole(const int *hidden, int nh, int T)
{
    const rm_kernels *k = rm_kernels_cpu();
    const int inputs = 12, classes = 5, rows = 7;
    rm_model_shape s;
    shape_of(&s, inputs, hidden, nh, classes);
    rm_model ref;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&ref, k, &rm_model_mlp, &s, rows, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(&ref, 5, &e), RM_OK);
    for (size_t i = 0; i < ref.nparams; i++) /* non-zero biases too */
        ref.params[i] += 0.01f * (float)((i * 7) % 11) - 0.05f;
    float *x = (float *)ref.x;
    for (int i = 0; i < rows * inputs; i++)
        x[i] = (float)((i * 29) % 13) / 13.0f - 0.3f;
    for (int i = 0; i < rows; i++)
        ref.labels[i] = (i * 3) % classes;
    rm_model_forward(&ref, rows);
    rm_model_backward(&ref, rows, 1.0f / (float)rows, NULL, NULL);
    float want_loss = *ref.loss_sum;

    harness h = {.T = T};
    pthread_barrier_init(&h.bar, NULL, (unsigned)T);
    rank_ctx r[8];
    memset(r, 0, sizeof r);
    pthread_t th[8];
    for (int t = 0; t < T; t++) {
        rm_tp_plan p;
        CU_ASSERT_EQUAL_FATAL(rm_tp_mlp_plan(&s, T, t, &p, &e), RM_OK);
        r[t] = (rank_ctx){.h = &h, .t = t, .x = x, .labels = ref.labels, .rows = rows};
        CU_ASSERT_EQUAL_FATAL(rm_tp_mlp_init(&r[t].m, k, &p, rows, th_allreduce, &r[t], &e), RM_OK);
        rm_tp_slice(&p, ref.params, r[t].m.params);
        r[t].tmp = malloc(64 * 1024 * sizeof(float));
    }
    for (int t = 0; t < T; t++)
        pthread_create(&th[t], NULL, rank_main, &r[t]);
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    float *sum = calloc(ref.nparams, sizeof(float));
    for (int t = 0; t < T; t++) {
        CU_ASSERT_EQUAL(r[t].rc, RM_OK);
        CU_ASSERT(fabs(r[t].loss - want_loss) <= 1e-5 * fabs(want_loss));
        CU_ASSERT_EQUAL(r[t].loss, r[0].loss); /* replicated: the same bits */
        rm_tp_assemble(&r[t].m.p, r[t].m.grads, sum, false);
        if (t == 0) { /* replicated pieces once, and equal on every rank */
            float *rep = calloc(ref.nparams, sizeof(float));
            rm_tp_assemble(&r[t].m.p, r[t].m.grads, rep, true);
            float *none = calloc(ref.nparams, sizeof(float));
            rm_tp_assemble(&r[t].m.p, r[t].m.grads, none, false);
            for (size_t i = 0; i < ref.nparams; i++)
                sum[i] += rep[i] - none[i];
            free(rep);
            free(none);
        }
        for (size_t j = 0; j < r[t].m.p.n; j++)
            if (rm_tp_replicated(&r[t].m.p, j))
                CU_ASSERT_EQUAL_FATAL(r[t].m.grads[j], r[0].m.grads[j]);
        /* exactly the collectives of the event table */
        rm_tp_event ev[8];
        int n = rm_tp_mlp_events(&r[t].m.p, ev, 8);
        CU_ASSERT_EQUAL(r[t].ncalls, n);
        for (int c = 0; c < n && c < r[t].ncalls; c++)
            CU_ASSERT_EQUAL(r[t].calls[c], (size_t)rows * (size_t)ev[c].width);
    }
    double g = rel_err(sum, ref.grads, ref.nparams);
    CU_ASSERT(g < 1e-5);
    if (!(g < 1e-5))
        fprintf(stderr, "\n  T=%d hidden[0]=%d: gradient relative error %g\n", T, hidden[0], g);
    for (int t = 0; t < T; t++) {
        free(r[t].tmp);
        rm_tp_mlp_free(&r[t].m);
    }
    pthread_barrier_destroy(&h.bar);
    free(sum);
    rm_model_free(&ref);
}

static void test_split_forward_backward(void)
{
    static const int h1[] = {8}, h2[] = {8, 6}, h3[] = {8, 6, 4}, h4[] = {8, 6, 4, 3};
    for (int T = 1; T <= 4; T *= 2) {
        split_vs_whole(h1, 1, T);
        split_vs_whole(h2, 2, T);
        split_vs_whole(h3, 3, T);
        split_vs_whole(h4, 4, T);
    }
}

/* The transformer's split (worker/tensor/tp_gpt.h) */
static void gpt_shape(rm_model_shape *s, int L, int V, int ctx, int C, int NH)
{
    memset(s, 0, sizeof *s);
    s->nlayers = L;
    s->dims[0] = RM_GPT_SHAPE_TAG;
    s->dims[1] = V;
    s->dims[2] = ctx;
    s->dims[3] = C;
    s->dims[4] = NH;
}

static void test_gpt_events(void)
{
    rm_model_shape s;
    gpt_shape(&s, 2, 11, 5, 8, 4);
    rm_tp_gpt_plan p;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_tp_gpt_plan_make(&s, 2, 1, &p, &e), RM_OK);
    CU_ASSERT_EQUAL(p.Vp, 12);
    CU_ASSERT_EQUAL(p.Vl, 6);
    CU_ASSERT_EQUAL(p.Cl, 4);
    CU_ASSERT_EQUAL(p.NHl, 2);
    /* forward: the embedding's g, per block attention g and MLP g, the cross-entropy's max gather
     * and sums; backward: the head's f, then per block (last first) the MLP's f and attention's f */
    static const rm_tp_gpt_event want[] = {
        {'F', 'e', 0, 8}, {'F', 'a', 1, 8}, {'F', 'm', 1, 8}, {'F', 'a', 2, 8},
        {'F', 'm', 2, 8}, {'F', 'x', 3, 2}, {'F', 's', 3, 2}, {'B', 'h', 3, 8},
        {'B', 'm', 2, 8}, {'B', 'a', 2, 8}, {'B', 'm', 1, 8}, {'B', 'a', 1, 8},
    };
    rm_tp_gpt_event ev[16];
    int n = rm_tp_gpt_events(&p, ev, 16);
    CU_ASSERT_EQUAL_FATAL(n, (int)RM_ARRAY_LEN(want));
    for (int i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(ev[i].pass, want[i].pass);
        CU_ASSERT_EQUAL(ev[i].what, want[i].what);
        CU_ASSERT_EQUAL(ev[i].unit, want[i].unit);
        CU_ASSERT_EQUAL(ev[i].width, want[i].width);
    }
    /* the pieces of the ranks add up to the whole model plus the vocabulary padding */
    size_t split = 0, rep = 0;
    for (size_t j = 0; j < p.n; j++)
        rm_tp_gpt_replicated(&p, j) ? rep++ : split++;
    CU_ASSERT_EQUAL(split * 2 + rep, p.nwhole + (size_t)(p.Vp - p.V) * 8);
    CU_ASSERT_EQUAL(rm_tp_gpt_plan_make(&s, 1, 0, &p, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_tp_gpt_events(&p, ev, 16), 0);
    CU_ASSERT_EQUAL(p.n, p.nwhole);
    /* T must divide the heads */
    CU_ASSERT_EQUAL(rm_tp_gpt_plan_make(&s, 8, 0, &p, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.training.model.heads");
}

/* For T = 1, 2, 4 and P = 1..3 stages of a 3-block model: the T x P ranks' pieces (replicated ones
 * from t = 0, the last stage's wte copy never) sum to the whole model, their checkpoint runs cover
 * it exactly once with the same values, wte's padding rows are zero, and a stage holds its blocks
 * (the embedding on stage 0, ln_f and a copy of wte's rows on the last). */
static void test_gpt_slice_assemble(void)
{
    rm_model_shape s;
    gpt_shape(&s, 3, 11, 5, 8, 4);
    for (int T = 1; T <= 4; T *= 2)
        for (int P = 1; P <= 3; P++) {
            rm_err e = {0};
            rm_tp_gpt_plan p0;
            CU_ASSERT_EQUAL_FATAL(rm_tp_gpt_plan_stage(&s, T, 0, P, 0, &p0, &e), RM_OK);
            size_t W = p0.nwhole;
            float *whole = malloc(W * sizeof(float)), *back = calloc(W, sizeof(float));
            float *viaruns = calloc(W, sizeof(float));
            uint8_t *hits = calloc(W, 1);
            for (size_t i = 0; i < W; i++)
                whole[i] = (float)i + 1.0f;
            int blocks = 0;
            for (int q = 0; q < P; q++)
                for (int t = 0; t < T; t++) {
                    rm_tp_gpt_plan p;
                    CU_ASSERT_EQUAL_FATAL(rm_tp_gpt_plan_stage(&s, T, t, P, q, &p, &e), RM_OK);
                    CU_ASSERT(p.has_wpe == (q == 0) && p.has_head == (q == P - 1));
                    CU_ASSERT(p.wte_copy == (P > 1 && q == P - 1));
                    CU_ASSERT(p.b1 - p.b0 >= 1 && (P < 3 || p.b1 - p.b0 == 1));
                    blocks += t == 0 ? p.b1 - p.b0 : 0;
                    float *loc = malloc(p.n * sizeof(float)), *mine = calloc(W, sizeof(float));
                    rm_tp_gpt_slice(&p, whole, loc);
                    rm_tp_gpt_assemble(&p, loc, mine, t == 0);
                    for (size_t i = 0; i < W; i++)
                        back[i] += mine[i];
                    rm_ckpt_run runs[128]; /* the checkpoint's runs: the same pieces */
                    int nr = rm_tp_gpt_runs(&p, q * T + t, runs, 128);
                    CU_ASSERT_FATAL(nr >= 1 && nr <= 128);
                    apply_runs(runs, nr, loc, viaruns, hits);
                    for (int j = 0; p.has_wte && j < p.Vl; j++) /* the padding rows of wte are zero */
                        if (t * p.Vl + j >= p.V)
                            for (int i = 0; i < p.C; i++)
                                CU_ASSERT_EQUAL(loc[p.o_wte + (size_t)j * (size_t)p.C + (size_t)i], 0.0f);
                    free(mine);
                    free(loc);
                }
            CU_ASSERT_EQUAL(blocks, 3);
            expect_whole(W, whole, back, viaruns, hits);
        }
}

typedef struct gpt_rank {
    rank_ctx base; /* first: th_allreduce's ud */
    rm_tp_gpt m;
    const int32_t *tok;
    bool loss_only;
} gpt_rank;

static void *gpt_rank_main(void *arg)
{
    gpt_rank *g = arg;
    rank_ctx *r = &g->base;
    rm_err e = {0};
    r->rc = g->loss_only ? RM_OK : rm_tp_gpt_forward(&g->m, g->tok, r->rows, &e);
    if (!r->rc)
        r->rc = rm_tp_gpt_loss(&g->m, r->labels, r->rows, 1.0f / (float)r->rows, &r->loss, &e);
    if (!r->rc && !g->loss_only)
        r->rc = rm_tp_gpt_backward(&g->m, g->tok, r->rows, &e);
    return NULL;
}

static void gpt_run(gpt_rank *g, int T)
{
    pthread_t th[4];
    for (int t = 0; t < T; t++)
        pthread_create(&th[t], NULL, gpt_rank_main, &g[t]);
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
}

static void gpt_ranks(gpt_rank *g, harness *h, const rm_model_shape *s, int T, int rows, const int32_t *tok,
                      const int32_t *labels)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_err e = {0};
    *h = (harness){.T = T};
    pthread_barrier_init(&h->bar, NULL, (unsigned)T);
    for (int t = 0; t < T; t++) {
        rm_tp_gpt_plan p;
        CU_ASSERT_EQUAL_FATAL(rm_tp_gpt_plan_make(s, T, t, &p, &e), RM_OK);
        g[t] = (gpt_rank){.base = {.h = h, .t = t, .labels = labels, .rows = rows}, .tok = tok};
        CU_ASSERT_EQUAL_FATAL(rm_tp_gpt_init(&g[t].m, k, &p, rows, th_allreduce, &g[t].base, &e), RM_OK);
        g[t].base.tmp = malloc(64 * 1024 * sizeof(float));
    }
}

static void gpt_ranks_free(gpt_rank *g, harness *h, int T)
{
    for (int t = 0; t < T; t++) {
        free(g[t].base.tmp);
        rm_tp_gpt_free(&g[t].m);
    }
    pthread_barrier_destroy(&h->bar);
}

static void gpt_split_vs_whole(int T)
{
    const rm_kernels *k = rm_kernels_cpu();
    const int L = 2, V = 11, ctx = 5, C = 8, NH = 4, rows = 3, N = rows * ctx;
    rm_model_shape s;
    gpt_shape(&s, L, V, ctx, C, NH);
    rm_model ref;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&ref, k, &rm_model_gpt, &s, rows, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(&ref, 7, &e), RM_OK);
    for (size_t i = 0; i < ref.nparams; i++) /* non-zero biases, gains off 1, larger weights */
        ref.params[i] = ref.params[i] * 5.0f + 0.02f * (float)((i * 7) % 11) - 0.1f;
    int32_t *tok = (int32_t *)ref.x;
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 7 + 3) % V;
        ref.labels[i] = (i * 5 + 1) % V;
    }
    rm_model_forward(&ref, rows);
    rm_model_backward(&ref, rows, 1.0f / (float)rows, NULL, NULL);
    float want_loss = *ref.loss_sum;

    harness h;
    gpt_rank g[4];
    gpt_ranks(g, &h, &s, T, rows, tok, ref.labels);
    for (int t = 0; t < T; t++)
        rm_tp_gpt_slice(&g[t].m.p, ref.params, g[t].m.params);
    gpt_run(g, T);
    float *sum = calloc(ref.nparams, sizeof(float));
    for (int t = 0; t < T; t++) {
        const rm_tp_gpt_plan *p = &g[t].m.p;
        CU_ASSERT_EQUAL(g[t].base.rc, RM_OK);
        CU_ASSERT(fabs(g[t].base.loss - want_loss) <= 1e-5 * fabs(want_loss));
        CU_ASSERT_EQUAL(g[t].base.loss, g[0].base.loss); /* the same bits on every rank */
        rm_tp_gpt_assemble(p, g[t].m.grads, sum, false);
        if (t == 0) { /* replicated pieces once */
            float *rep = calloc(ref.nparams, sizeof(float)), *none = calloc(ref.nparams, sizeof(float));
            rm_tp_gpt_assemble(p, g[t].m.grads, rep, true);
            rm_tp_gpt_assemble(p, g[t].m.grads, none, false);
            for (size_t i = 0; i < ref.nparams; i++)
                sum[i] += rep[i] - none[i];
            free(rep);
            free(none);
        }
        for (size_t j = 0; j < p->n; j++)
            if (rm_tp_gpt_replicated(p, j))
                CU_ASSERT_EQUAL_FATAL(g[t].m.grads[j], g[0].m.grads[j]);
        /* exactly the collectives of the event table */
        rm_tp_gpt_event ev[32];
        int n = rm_tp_gpt_events(p, ev, 32);
        CU_ASSERT_EQUAL(g[t].base.ncalls, n);
        for (int c = 0; c < n && c < g[t].base.ncalls; c++)
            CU_ASSERT_EQUAL(g[t].base.calls[c], (size_t)N * (size_t)ev[c].width);
    }
    double d = rel_err(sum, ref.grads, ref.nparams);
    CU_ASSERT(d < 1e-5);
    if (!(d < 1e-5) || !(fabs(g[0].base.loss - want_loss) <= 1e-5 * fabs(want_loss)))
        fprintf(stderr, "\n  gpt T=%d: loss %g vs %g, gradient relative error %g\n", T, g[0].base.loss,
                want_loss, d);
    gpt_ranks_free(g, &h, T);
    free(sum);
    rm_model_free(&ref);
}

static void test_gpt_split_forward_backward(void)
{
    for (int T = 1; T <= 4; T *= 2)
        gpt_split_vs_whole(T);
}

/* The vocab-parallel cross-entropy against the whole one (kernels' xent) on the same logits: V = 11
 * leaves padding on the last rank, V = 2 with T = 4 leaves two ranks with padding only. */
static void gpt_xent_case(int V, int T)
{
    const rm_kernels *k = rm_kernels_cpu();
    const int ctx = 3, rows = 2, N = rows * ctx;
    rm_model_shape s;
    gpt_shape(&s, 1, V, ctx, 4, 4);
    float *full = malloc((size_t)N * (size_t)V * sizeof(float)), loss_want = 0;
    int32_t labels[6];
    for (int n = 0; n < N; n++) {
        labels[n] = (n * 3 + 1) % V;
        for (int v = 0; v < V; v++)
            full[n * V + v] = (float)((n * 13 + v * 7) % 17) / 3.0f - 2.0f;
    }
    harness h;
    gpt_rank g[4];
    gpt_ranks(g, &h, &s, T, rows, NULL, labels);
    for (int t = 0; t < T; t++) {
        const rm_tp_gpt_plan *p = &g[t].m.p;
        g[t].loss_only = true;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < p->Vl; j++) {
                int v = t * p->Vl + j;
                /* padding columns hold junk: the loss must not read them */
                g[t].m.logits[n * p->Vl + j] = v < V ? full[n * V + v] : 50.0f;
            }
    }
    gpt_run(g, T);
    float inv_t = 1.0f / (float)ctx;
    k->tf->xent(full, labels, N, V, inv_t / (float)rows, inv_t, &loss_want, NULL);
    for (int t = 0; t < T; t++) {
        const rm_tp_gpt_plan *p = &g[t].m.p;
        CU_ASSERT_EQUAL(g[t].base.rc, RM_OK);
        CU_ASSERT(fabs(g[t].base.loss - loss_want) <= 1e-5 * fabs(loss_want));
        CU_ASSERT_EQUAL(g[t].base.ncalls, T > 1 ? 2 : 0); /* the max gather and the sums */
        for (int n = 0; n < N; n++)
            for (int j = 0; j < p->Vl; j++) {
                int v = t * p->Vl + j;
                float got = g[t].m.logits[n * p->Vl + j], want = v < V ? full[n * V + v] : 0.0f;
                CU_ASSERT(fabsf(got - want) <= 1e-6f);
            }
    }
    gpt_ranks_free(g, &h, T);
    free(full);
}

static void test_gpt_vocab_xent(void)
{
    for (int T = 1; T <= 4; T *= 2) {
        gpt_xent_case(11, T);
        gpt_xent_case(2, T);
    }
}

void rm_suite_tensor(void)
{
    static const rm_test_case cases[] = {
        {"events", test_events},
        {"slice_assemble", test_slice_assemble},
        {"stage_tables", test_stage_tables},
        {"split_forward_backward", test_split_forward_backward},
        {"gpt_events", test_gpt_events},
        {"gpt_slice_assemble", test_gpt_slice_assemble},
        {"gpt_split_forward_backward", test_gpt_split_forward_backward},
        {"gpt_vocab_xent", test_gpt_vocab_xent},
    };
    RM_ADD_SUITE("tensor", NULL, NULL, cases);
}
