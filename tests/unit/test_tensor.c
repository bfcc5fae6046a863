/* Tests for worker/tensor/tp_mlp.h (docs/models-and-data.md, "Tensor parallelism"): the split
 * plan and Megatron's f/g collectives as event tables for several layer counts (odd counts leave
 * the last layer replicated), slice/assemble round trips, and the split forward/backward of T
 * ranks (threads summing through a shared buffer) against the unsplit MLP of worker/model/mlp.c:
 * the loss (of the replicated logits) and every gradient agree within float tolerance, and each rank issues exactly the
 * collectives of the table. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/testutil.h"
#include "worker/model/mlp.h"
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
    size_t calls[8];
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
    if (r->ncalls < 8)
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

void rm_suite_tensor(void)
{
    static const rm_test_case cases[] = {
        {"events", test_events},
        {"slice_assemble", test_slice_assemble},
        {"split_forward_backward", test_split_forward_backward},
    };
    RM_ADD_SUITE("tensor", NULL, NULL, cases);
}
