/* test_gpt.c — the transformer family (worker/model/gpt.c) on the CPU kernels: its gradient
 * against central finite differences for every tensor, the same gradient placed unit by unit
 * (ZeRO's path), accumulated over two row windows (micro-batches), split over two unit ranges
 * (pipeline stages) and computed with one or two kernel threads (bit-identical at these shapes, below
 * the size where a GEMM is split), the causal mask
 * (a later token never changes an earlier position's output), and the field-named shape errors.
 * PyTorch's numbers for the same weights are the e2e test's (tests/e2e/60-gpt-torch.sh). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/unit/testutil.h"
#include "worker/data/data.h"
#include "worker/model/model.h"

enum { GL = 2, GNH = 2, GC = 8, GT = 5, GV = 11, GB = 3 };

static rm_training_spec gspec(int layers, int heads, int embed, int context, int vocab)
{
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    t.model_type = "gpt";
    t.layers = layers;
    t.heads = heads;
    t.embed = embed;
    t.context = context;
    t.vocab = vocab;
    return t;
}

/* A model with init values, LayerNorms moved off 1/0 and random tokens. */
static void make_model(rm_model *m, int layers, int heads, int embed, int context, int vocab, int batch,
                       uint64_t seed)
{
    rm_training_spec t = gspec(layers, heads, embed, context, vocab);
    rm_model_data d = {.inputs = context, .classes = vocab};
    const rm_model_family *f;
    rm_model_shape s;
    rm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(rm_model_shape_for(&t, &d, &f, &s, &err), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init(m, rm_kernels_cpu(), f, &s, batch, &err), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(m, seed, &err), RM_OK);
    rm_rng r;
    rm_rng_seed(&r, seed + 1);
    for (size_t i = 0; i < m->nparams; i++) /* every tensor non-trivial, LayerNorms included */
        m->params[i] += (float)(0.05 * rm_rng_normal(&r));
    int32_t *x = m->x;
    for (int i = 0; i < batch * context; i++) {
        x[i] = (int32_t)(rm_rng_next(&r) % (uint64_t)vocab);
        m->labels[i] = (int32_t)(rm_rng_next(&r) % (uint64_t)vocab);
    }
}

static double loss_of(rm_model *m, int rows)
{
    rm_model_forward(m, rows);
    rm_model_loss(m, 0, rows, 1.0f, m->loss_sum);
    return (double)*m->loss_sum / rows;
}

static void test_gradient_fd(void)
{
    rm_model m;
    make_model(&m, GL, GNH, GC, GT, GV, GB, 7);
    rm_model_forward(&m, GB);
    rm_model_backward(&m, GB, 1.0f / GB, NULL, NULL);
    float *g = malloc(m.nparams * sizeof(float));
    memcpy(g, m.grads, m.nparams * sizeof(float));
    int checked = 0, bad = 0;
    for (int u = 0; u < m.nunits; u++) {
        rm_model_tensor ts[16];
        int n = rm_model_tensors(&m, u, ts, 16);
        for (int i = 0; i < n; i++) {
            size_t len = 1;
            for (int d = 0; d < ts[i].ndim; d++)
                len *= (size_t)ts[i].shape[d];
            for (int s = 0; s < 4; s++) {
                size_t at = ts[i].off + (len * (size_t)(2 * s + 1)) / 8;
                float keep = m.params[at], h = 1e-2f;
                m.params[at] = keep + h;
                double lp = loss_of(&m, GB);
                m.params[at] = keep - h;
                double lm = loss_of(&m, GB);
                m.params[at] = keep;
                double fd = (lp - lm) / (2.0 * h);
                checked++;
                if (fabs(fd - g[at]) > 2e-3 + 2e-2 * fabs(fd)) {
                    bad++;
                    fprintf(stderr, "  %s[%zu]: fd %.6f grad %.6f\n", ts[i].name, at - ts[i].off, fd, g[at]);
                }
            }
        }
    }
    CU_ASSERT(checked >= 4 * (2 + 12 * GL + 2));
    CU_ASSERT_EQUAL(bad, 0);
    free(g);
    rm_model_free(&m);
}

typedef struct placed {
    const rm_model *m;
    float *dst;
} placed;

static void place_all(void *ud, const rm_unit_grad *g)
{
    placed *p = ud;
    size_t len = p->m->unit[g->unit].len;
    rm_model_grad_range(p->m, g, 0, len / 3, p->dst + p->m->unit[g->unit].off);
    rm_model_grad_range(p->m, g, len / 3, len, p->dst + p->m->unit[g->unit].off + len / 3);
}

static void test_paths_agree(void)
{
    rm_model m;
    make_model(&m, GL, GNH, GC, GT, GV, GB, 11);
    size_t n = m.nparams, bytes = n * sizeof(float);
    float *whole = malloc(bytes), *other = calloc(n, sizeof(float));
    rm_model_forward(&m, GB);
    rm_model_backward(&m, GB, 1.0f / GB, NULL, NULL);
    memcpy(whole, m.grads, bytes);
    float loss_whole = *m.loss_sum;

    /* placed, unit by unit: the same numbers */
    placed pl = {&m, other};
    rm_model_forward(&m, GB);
    rm_model_backward_placed(&m, GB, 1.0f / GB, NULL, place_all, NULL, &pl);
    CU_ASSERT_EQUAL(memcmp(whole, other, bytes), 0);

    /* two row windows, accumulated */
    memset(m.grads, 0, bytes);
    float ls[2];
    for (int w = 0; w < 2; w++) {
        int off = w ? 2 : 0, rows = w ? GB - 2 : 2;
        rm_model_pass f = {.u0 = 0, .u1 = m.nunits, .off = off, .rows = rows};
        rm_model_forward_pass(&m, &f);
        rm_model_loss(&m, off, rows, 1.0f / GB, &ls[w]);
        rm_model_pass b = {.u0 = 0,
                           .u1 = m.nunits,
                           .off = off,
                           .rows = rows,
                           .dy = rm_model_output(&m, m.nunits - 1, off),
                           .accumulate = true};
        rm_model_backward_pass(&m, &b);
    }
    CU_ASSERT(fabsf(ls[0] + ls[1] - loss_whole) < 1e-5f * fabsf(loss_whole));
    CU_ASSERT(rm_test_rel_diff(m.grads, whole, n) < 1e-5);

    /* two threads: bit-identical */
    rm_kernels_set_threads(rm_kernels_cpu(), 2);
    rm_model_forward(&m, GB);
    rm_model_backward(&m, GB, 1.0f / GB, NULL, NULL);
    CU_ASSERT_EQUAL(memcmp(whole, m.grads, bytes), 0);
    rm_kernels_set_threads(rm_kernels_cpu(), 1);

    /* two stages: units [0, 2) then [2, n), the activation and its gradient handed across */
    int cut = 2, C = GC, T = GT;
    size_t act = (size_t)GB * T * C;
    float *a = malloc(act * sizeof(float)), *da = malloc(act * sizeof(float));
    rm_model_pass f0 = {.u0 = 0, .u1 = cut, .off = 0, .rows = GB};
    rm_model_forward_pass(&m, &f0);
    memcpy(a, rm_model_output(&m, cut - 1, 0), act * sizeof(float));
    rm_model_pass f1 = {.u0 = cut, .u1 = m.nunits, .off = 0, .rows = GB, .in = a};
    rm_model_forward_pass(&m, &f1);
    float l2;
    rm_model_loss(&m, 0, GB, 1.0f / GB, &l2);
    CU_ASSERT(fabsf(l2 - loss_whole) < 1e-6f * fabsf(loss_whole));
    rm_model_pass b1 = {.u0 = cut,
                        .u1 = m.nunits,
                        .off = 0,
                        .rows = GB,
                        .in = a,
                        .dy = rm_model_output(&m, m.nunits - 1, 0),
                        .dx = da};
    rm_model_backward_pass(&m, &b1);
    /* the head's part of the wte gradient sits in the gradient buffer's wte (not a pass of unit 0):
     * keep it, as a pipeline's tied-embedding exchange does, and add the first stage's */
    size_t wte = (size_t)GV * C;
    float *head_wte = malloc(wte * sizeof(float));
    memcpy(head_wte, m.grads, wte * sizeof(float));
    rm_model_pass b0 = {.u0 = 0, .u1 = cut, .off = 0, .rows = GB, .dy = da};
    rm_model_backward_pass(&m, &b0);
    for (size_t i = 0; i < wte; i++)
        m.grads[i] += head_wte[i];
    CU_ASSERT(rm_test_rel_diff(m.grads, whole, n) < 1e-5);
    free(head_wte);
    free(a);
    free(da);
    free(whole);
    free(other);
    rm_model_free(&m);
}

/* Changing the last token of a row changes no other position's logits of that row. */
static void test_causal(void)
{
    rm_model m;
    make_model(&m, GL, GNH, GC, GT, GV, 1, 3);
    size_t V = GV, T = GT;
    float *before = malloc(T * V * sizeof(float));
    rm_model_forward(&m, 1);
    memcpy(before, rm_model_output(&m, m.nunits - 1, 0), T * V * sizeof(float));
    int32_t *x = m.x;
    x[T - 1] = (x[T - 1] + 1) % GV;
    rm_model_forward(&m, 1);
    const float *after = rm_model_output(&m, m.nunits - 1, 0);
    CU_ASSERT_EQUAL(memcmp(before, after, (T - 1) * V * sizeof(float)), 0);
    CU_ASSERT(memcmp(before + (T - 1) * V, after + (T - 1) * V, V * sizeof(float)) != 0);
    free(before);
    rm_model_free(&m);
}

/* Longer context than one attention block (16 rows), odd sizes, one head: still the FD gradient. */
static void test_long_context(void)
{
    rm_model m;
    make_model(&m, 1, 1, 6, 37, 7, 2, 5);
    rm_model_forward(&m, 2);
    rm_model_backward(&m, 2, 0.5f, NULL, NULL);
    float *g = malloc(m.nparams * sizeof(float));
    memcpy(g, m.grads, m.nparams * sizeof(float));
    int bad = 0;
    for (size_t at = 3; at < m.nparams; at += m.nparams / 97 + 1) {
        float keep = m.params[at], h = 1e-2f;
        m.params[at] = keep + h;
        double lp = loss_of(&m, 2);
        m.params[at] = keep - h;
        double lm = loss_of(&m, 2);
        m.params[at] = keep;
        double fd = (lp - lm) / (2.0 * h);
        bad += fabs(fd - g[at]) > 2e-3 + 2e-2 * fabs(fd);
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(g);
    rm_model_free(&m);
}

static void test_shape_errors(void)
{
    rm_model_data d = {.inputs = 8, .classes = 256};
    const rm_model_family *f;
    rm_model_shape s;
    rm_err err = {0};
    rm_training_spec t = gspec(2, 3, 8, 8, 256);
    CU_ASSERT_NOT_EQUAL(rm_model_shape_for(&t, &d, &f, &s, &err), RM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "heads"));
    t = gspec(2, 2, 8, 8, 100);
    CU_ASSERT_NOT_EQUAL(rm_model_shape_for(&t, &d, &f, &s, &err), RM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "vocab"));
    t = gspec(99, 2, 8, 8, 256);
    CU_ASSERT_NOT_EQUAL(rm_model_shape_for(&t, &d, &f, &s, &err), RM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "layers"));
    t = gspec(2, 2, 8, 8, 256);
    CU_ASSERT_EQUAL(rm_model_shape_for(&t, &d, &f, &s, &err), RM_OK);
    rm_model plan;
    CU_ASSERT_EQUAL(rm_model_plan(&plan, f, &s, &err), RM_OK);
    CU_ASSERT_EQUAL(plan.nunits, 4);
    CU_ASSERT_EQUAL(plan.nparams, (size_t)(256 * 8 + 8 * 8 + 2 * (12 * 64 + 13 * 8) + 16));
    CU_ASSERT_EQUAL(plan.unit[3].reads, 1u);
}

void rm_suite_gpt(void)
{
    CU_pSuite s = CU_add_suite("gpt", NULL, NULL);
    CU_add_test(s, "gradient against finite differences", test_gradient_fd);
    CU_add_test(s, "placed, micro-batched, threaded and staged passes agree", test_paths_agree);
    CU_add_test(s, "attention is causal", test_causal);
    CU_add_test(s, "context longer than an attention block", test_long_context);
    CU_add_test(s, "shape errors name the field", test_shape_errors);
}
