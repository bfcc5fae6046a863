/* test_model.c — the MLP: layout offsets, deterministic He init, backward against finite
 * differences (every layer, W and b), the per-layer ready callbacks come in reverse order with the
 * layer's gradient final, a few SGD steps reduce the loss, and the checksum sees one flipped bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/testutil.h"
#include "worker/model/mlp.h"
#include "worker/optim/optim.h"

static void test_layout(void)
{
    rm_model_shape s;
    rm_err e = {0};
    int hidden[2] = {512, 256};
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&s, 784, hidden, 2, 10, &e), RM_OK);
    rm_model L;
    rm_model_plan(&L, &rm_model_mlp, &s, NULL);
    CU_ASSERT_EQUAL(L.nunits, 3);
    CU_ASSERT_EQUAL(rm_mlp_w_off(&L, 0), 0);
    CU_ASSERT_EQUAL(rm_mlp_b_off(&L, 0), 784 * 512);
    CU_ASSERT_EQUAL(rm_mlp_w_off(&L, 1), 784 * 512 + 512);
    CU_ASSERT_EQUAL(L.unit_len[1], 512 * 256 + 256);
    CU_ASSERT_EQUAL(L.nparams, 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
    CU_ASSERT_EQUAL(L.unit_off[2] + L.unit_len[2], L.nparams); /* contiguous to the end */
    char buf[64];
    rm_model_shape_words(&s, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "784-512-256-10");
    int bad[1] = {0};
    CU_ASSERT_EQUAL(rm_mlp_shape(&s, 784, bad, 1, 10, &e), RM_EINVAL);
}

typedef struct {
    int order[8];
    int n;
    rm_model *m;
    float gsum_at_ready[8];
} ready_log;
static void on_ready(void *ud, int l)
{
    ready_log *r = ud;
    double s = 0;
    for (size_t i = 0; i < r->m->unit_len[l]; i++)
        s += fabs(r->m->grads[r->m->unit_off[l] + i]);
    r->gsum_at_ready[r->n] = (float)s;
    r->order[r->n++] = l;
}

static double loss_of(rm_model *m, int rows)
{
    rm_model_forward(m, rows);
    int L = m->shape.nlayers;
    float *scratch = malloc((size_t)rows * m->shape.dims[L] * sizeof(float));
    m->k->softmax_xent_fwd_bwd(rm_model_output(m, L - 1, 0), m->labels, rows, m->shape.dims[L], 1.0f, scratch,
                               m->loss_sum);
    free(scratch);
    return *m->loss_sum / rows;
}

static void test_gradcheck(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_model_shape s;
    rm_err e = {0};
    int hidden[2] = {6, 5};
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&s, 8, hidden, 2, 4, &e), RM_OK);
    rm_model m;
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&m, k, &rm_model_mlp, &s, 3, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(&m, 5, &e), RM_OK);
    /* nonzero biases so ReLU kinks are away from 0 for most units */
    for (int l = 0; l < m.shape.nlayers; l++)
        for (int j = 0; j < m.shape.dims[l + 1]; j++)
            m.params[rm_mlp_b_off(&m, l) + j] = 0.05f * (float)(j % 3) + 0.01f;
    const int rows = 3;
    for (int i = 0; i < rows * 8; i++)
        ((float *)m.x)[i] = (float)((i * 37) % 11) / 11.0f;
    int32_t lab[3] = {1, 3, 0};
    memcpy(m.labels, lab, sizeof lab);

    rm_model_forward(&m, rows);
    ready_log rl = {.m = &m};
    rm_model_backward(&m, rows, 1.0f / rows, on_ready, &rl);
    CU_ASSERT_EQUAL(rl.n, 3);
    CU_ASSERT_EQUAL(rl.order[0], 2);
    CU_ASSERT_EQUAL(rl.order[1], 1);
    CU_ASSERT_EQUAL(rl.order[2], 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT(rl.gsum_at_ready[i] > 0); /* gradient already written when announced */

    float *g = malloc(m.nparams * sizeof(float));
    memcpy(g, m.grads, m.nparams * sizeof(float));
    int checked = 0, bad = 0;
    for (size_t i = 0; i < m.nparams; i++) {
        float w0 = m.params[i];
        const float h = 1e-3f;
        m.params[i] = w0 + h;
        double lp = loss_of(&m, rows);
        m.params[i] = w0 - h;
        double lm = loss_of(&m, rows);
        m.params[i] = w0;
        double num = (lp - lm) / (2 * h);
        double tol = 2e-3 + 2e-2 * fabs(num);
        if (fabs(num - g[i]) > tol) {
            bad++;
            fprintf(stderr, "gradcheck i=%zu num=%g analytic=%g\n", i, num, g[i]);
        }
        checked++;
    }
    CU_ASSERT(checked == (int)m.nparams);
    CU_ASSERT(bad <= 2); /* a parameter next to a ReLU kink may disagree */
    free(g);
    rm_model_free(&m);
    rm_model_free(&m); /* idempotent */
}

/* rm_model_backward_placed + rm_model_grad_range (ZeRO-2 staging) give the same gradient as the
 * ordinary backward, for ranges that start and end mid-row, cover whole rows, straddle W and b or
 * lie in b only; m->grads is not touched. Compared within float rounding (a 1-row GEMM may take
 * another BLAS path). */
typedef struct {
    rm_model *m;
    const float *want;
    int bad, calls;
    size_t cut;
} placed_log;
static void on_place(void *ud, const rm_unit_grad *g)
{
    placed_log *p = ud;
    size_t len = p->m->unit_len[g->unit], off = p->m->unit_off[g->unit];
    float *dst = calloc(len, sizeof(float));
    /* ranges of varying size: cut, 1, cut + 2, 1, ... to the end (and one empty range) */
    size_t at = 0, step[] = {p->cut, 1, p->cut + 2, 0};
    for (int i = 0; at < len; i++) {
        size_t n = step[i % 4];
        if (n > len - at)
            n = len - at;
        rm_model_grad_range(p->m, g, at, at + n, dst + at);
        at += n;
    }
    for (size_t i = 0; i < len; i++)
        if (fabsf(dst[i] - p->want[off + i]) > 1e-6f * (1 + fabsf(p->want[off + i])))
            p->bad++;
    p->calls++;
    free(dst);
}

static void test_backward_placed(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_model_shape s;
    rm_err e = {0};
    int hidden[2] = {7, 5};
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&s, 9, hidden, 2, 4, &e), RM_OK);
    rm_model m;
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&m, k, &rm_model_mlp, &s, 6, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(&m, 11, &e), RM_OK);
    for (int i = 0; i < 6 * 9; i++)
        ((float *)m.x)[i] = (float)((i * 29) % 13) / 13.0f - 0.3f;
    int32_t lab[6] = {1, 3, 0, 2, 2, 1};
    memcpy(m.labels, lab, sizeof lab);
    rm_model_forward(&m, 6);
    rm_model_backward(&m, 6, 1.0f / 6, NULL, NULL);
    float *want = malloc(m.nparams * sizeof(float));
    memcpy(want, m.grads, m.nparams * sizeof(float));
    for (size_t cut = 1; cut < 12; cut += 4) {
        memset(m.grads, 0, m.nparams * sizeof(float));
        placed_log p = {.m = &m, .want = want, .cut = cut};
        rm_model_forward(&m, 6);
        rm_model_backward_placed(&m, 6, 1.0f / 6, NULL, on_place, NULL, &p);
        CU_ASSERT_EQUAL(p.calls, 3);
        CU_ASSERT_EQUAL(p.bad, 0);
        for (size_t i = 0; i < m.nparams; i++)
            CU_ASSERT_EQUAL_FATAL(m.grads[i], 0.0f); /* untouched */
    }
    free(want);
    rm_model_free(&m);
}

static void test_init_deterministic(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_model_shape s;
    rm_err e = {0};
    int hidden[1] = {64};
    rm_mlp_shape(&s, 100, hidden, 1, 10, &e);
    rm_model a, b;
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&a, k, &rm_model_mlp, &s, 4, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&b, k, &rm_model_mlp, &s, 4, &e), RM_OK);
    rm_model_init_params(&a, 42, &e);
    rm_model_init_params(&b, 42, &e);
    char scratch[256];
    uint64_t ha = rm_model_checksum(&a, scratch, sizeof scratch);
    CU_ASSERT_EQUAL(ha, rm_model_checksum(&b, scratch, sizeof scratch));
    CU_ASSERT_EQUAL(memcmp(a.params, b.params, a.nparams * sizeof(float)), 0);
    /* He std for fan_in 100 is sqrt(0.02) ~ 0.141 */
    double ss = 0;
    size_t nw = 100 * 64;
    for (size_t i = 0; i < nw; i++)
        ss += (double)a.params[i] * a.params[i];
    CU_ASSERT_DOUBLE_EQUAL(sqrt(ss / nw), sqrt(0.02), 0.01);
    CU_ASSERT_EQUAL(a.params[rm_mlp_b_off(&a, 0)], 0.0f);
    /* one flipped bit changes the checksum */
    uint32_t bits;
    memcpy(&bits, &b.params[17], 4);
    bits ^= 1;
    memcpy(&b.params[17], &bits, 4);
    CU_ASSERT_NOT_EQUAL(ha, rm_model_checksum(&b, scratch, sizeof scratch));
    rm_model_init_params(&b, 43, &e);
    CU_ASSERT_NOT_EQUAL(ha, rm_model_checksum(&b, scratch, sizeof scratch));
    rm_model_free(&a);
    rm_model_free(&b);
}

/* A pipeline stage's init (rm_model_init_params_units): every layer range gets exactly the
 * whole init's values, nothing outside the range is written, the biases are zeroed, the hashes of
 * the stages' ranges chained in order give the whole checksum, and bad ranges are refused. */
static void test_init_layers(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_model_shape s;
    rm_err e = {0};
    int hidden[3] = {48, 40, 24};
    rm_mlp_shape(&s, 30, hidden, 3, 10, &e);
    rm_model whole, part;
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&whole, k, &rm_model_mlp, &s, 4, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&part, k, &rm_model_mlp, &s, 4, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(&whole, 77, &e), RM_OK);
    size_t n = whole.nparams;
    for (int l0 = 0; l0 < s.nlayers; l0++)
        for (int l1 = l0 + 1; l1 <= s.nlayers; l1++) {
            for (size_t i = 0; i < n; i++)
                part.params[i] = 7.0f; /* sentinel: must survive outside the range */
            CU_ASSERT_EQUAL_FATAL(rm_model_init_params_units(&part, 77, l0, l1, &e), RM_OK);
            size_t a = part.unit_off[l0];
            size_t b = part.unit_off[l1 - 1] + part.unit_len[l1 - 1];
            CU_ASSERT_EQUAL(memcmp(part.params + a, whole.params + a, (b - a) * sizeof(float)), 0);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += (i < a || i >= b) && part.params[i] != 7.0f;
            CU_ASSERT_EQUAL(bad, 0);
        }
    /* chained stage hashes = the whole checksum (what the pipeline's checksum relies on) */
    char scratch[256];
    uint64_t h = RM_FNV64_INIT;
    size_t cut = whole.unit_off[2];
    h = rm_fnv1a64(whole.params, cut * sizeof(float), h);
    h = rm_fnv1a64(whole.params + cut, (n - cut) * sizeof(float), h);
    CU_ASSERT_EQUAL(h, rm_model_checksum(&whole, scratch, sizeof scratch));
    CU_ASSERT_EQUAL(rm_model_init_params_units(&part, 77, 2, 2, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_model_init_params_units(&part, 77, 0, s.nlayers + 1, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_model_init_params_units(&part, 77, -1, 1, &e), RM_EINVAL);
    rm_model_free(&whole);
    rm_model_free(&part);
}

static void test_training_reduces_loss(void)
{
    const rm_kernels *k = rm_kernels_cpu();
    rm_model_shape s;
    rm_err e = {0};
    int hidden[1] = {16};
    rm_mlp_shape(&s, 8, hidden, 1, 3, &e);
    rm_model m;
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&m, k, &rm_model_mlp, &s, 12, &e), RM_OK);
    rm_model_init_params(&m, 1, &e);
    rm_optimizer_spec os = {.type = RM_OPT_SGD, .lr = 0.1, .momentum = 0.9};
    rm_optim o;
    CU_ASSERT_EQUAL_FATAL(rm_optim_init(&o, k, &os, m.nparams, &e), RM_OK);
    for (int i = 0; i < 12; i++) {
        int c = i % 3;
        for (int j = 0; j < 8; j++)
            ((float *)m.x)[i * 8 + j] = (j % 3 == c) ? 1.0f : 0.0f;
        m.labels[i] = c;
    }
    double first = 0, last = 0;
    for (int it = 0; it < 60; it++) {
        rm_model_forward(&m, 12);
        rm_model_backward(&m, 12, 1.0f / 12, NULL, NULL);
        double l = *m.loss_sum / 12;
        if (it == 0)
            first = l;
        last = l;
        rm_optim_step(&o, m.params, m.grads, 0.1f);
    }
    CU_ASSERT(last < first * 0.2);
    rm_model_forward(&m, 12);
    rm_model_count_correct(&m, 12);
    CU_ASSERT_EQUAL(*m.correct, 12);
    rm_optim_free(&o);
    rm_model_free(&m);
}

/* A kernels table whose alloc fails for the big buffers: the error must report the model's real
 * parameter count (it said "0 params" because rm_model_free zeroed the struct first). */
static const rm_kernels *g_real;
static void *small_alloc_only(size_t bytes)
{
    return bytes > 4096 ? NULL : g_real->alloc(bytes);
}

static void test_oom_message(void)
{
    g_real = rm_kernels_cpu();
    rm_kernels k = *g_real;
    k.alloc = small_alloc_only;
    rm_model_shape s;
    rm_err e = {0};
    int hidden[2] = {512, 256};
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&s, 784, hidden, 2, 10, &e), RM_OK);
    rm_model m;
    CU_ASSERT_EQUAL(rm_model_init(&m, &k, &rm_model_mlp, &s, 64, &e), RM_ENOMEM);
    CU_ASSERT_STRING_EQUAL(e.msg, "model: out of memory (535818 params, batch 64)");
}

void rm_suite_model(void)
{
    static const rm_test_case cases[] = {
        {"layout", test_layout},
        {"gradcheck_and_ready_order", test_gradcheck},
        {"backward_placed_ranges", test_backward_placed},
        {"init_deterministic_checksum", test_init_deterministic},
        {"init_layers_match_whole", test_init_layers},
        {"training_reduces_loss", test_training_reduces_loss},
        {"oom_message_counts_params", test_oom_message},
    };
    RM_ADD_SUITE("model", NULL, NULL, cases);
}
