/* test_gpt_torch.c — one training step of the transformer against PyTorch 1.13 (Debian's
 * python3-torch) on identical weights and batch (docs/models-and-data.md: comparisons use
 * ‖ours − ref‖ / ‖ref‖ per tensor): the weights move by the exported safetensors file
 * (worker/model/export.h) to tests/py/gpt_ref.py, a plain PyTorch GPT-2 with Hugging Face's
 * names, which writes its loss and every parameter's gradient back as safetensors. Shapes cover
 * one head and several, context 1 and contexts that are not powers of two (longer than one
 * attention block), a vocabulary that is not a byte's. The loss and every gradient must agree
 * within 1e-4. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/safetensors.h"
#include "kernels/kernels.h"
#include "tests/unit/testutil.h"
#include "worker/data/data.h"
#include "worker/model/export.h"
#include "worker/model/model.h"

static char *g_dir;

static int setup(void)
{
    g_dir = rm_test_tmpdir("gpt-torch");
    return g_dir ? 0 : -1;
}
static int teardown(void)
{
    return rm_test_tmpdir_free(&g_dir);
}

typedef struct shape_case {
    int layers, heads, embed, context, vocab, batch;
} shape_case;

/* The repository's root, for tests/py: $RM_ROOT, the working directory (make runs the tests from
 * the root), or above RM_BIN (bin/ or build/<kind>/bin/). */
static void repo_root(char *buf, size_t cap)
{
    const char *bin = getenv("RM_BIN"), *root = getenv("RM_ROOT");
    char cand[4][1024];
    snprintf(cand[0], sizeof cand[0], "%s", root && *root ? root : ".");
    snprintf(cand[1], sizeof cand[1], ".");
    snprintf(cand[2], sizeof cand[2], "%s/..", bin && *bin ? bin : "bin");
    snprintf(cand[3], sizeof cand[3], "%s/../../..", bin && *bin ? bin : "bin");
    for (int i = 0; i < 4; i++) {
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/tests/py/gpt_ref.py", cand[i]);
        if (access(probe, R_OK) == 0) {
            snprintf(buf, cap, "%s", cand[i]);
            return;
        }
    }
    snprintf(buf, cap, ".");
}

static void one_case(const shape_case *c, int idx)
{
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    t.model_type = "gpt";
    t.layers = c->layers;
    t.heads = c->heads;
    t.embed = c->embed;
    t.context = c->context;
    t.vocab = c->vocab;
    rm_model_data d = {.inputs = c->context, .classes = c->vocab};
    const rm_model_family *f;
    rm_model_shape s;
    rm_err e = {0};
    rm_model m;
    CU_ASSERT_EQUAL_FATAL(rm_model_shape_for(&t, &d, &f, &s, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init(&m, rm_kernels_cpu(), f, &s, c->batch, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(&m, 100 + (uint64_t)idx, &e), RM_OK);
    rm_rng r;
    rm_rng_seed(&r, 7 + (uint64_t)idx);
    for (size_t i = 0; i < m.nparams; i++) /* LayerNorms and biases off their init, weights larger */
        m.params[i] += (float)(0.05 * rm_rng_normal(&r));
    char dir[1200], batch[1300], out[1300], cmd[16384], root[4200];
    snprintf(dir, sizeof dir, "%s/m%d", g_dir, idx);
    snprintf(batch, sizeof batch, "%s/batch%d.bin", g_dir, idx);
    snprintf(out, sizeof out, "%s/grads%d.safetensors", g_dir, idx);
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&m, m.params, dir, RM_DTYPE_FLOAT32, &e), RM_OK);
    /* the batch: B windows of T + 1 tokens; ours takes the first T as input, the last T as targets */
    int B = c->batch, T = c->context;
    int32_t *win = malloc((size_t)B * (size_t)(T + 1) * sizeof(int32_t));
    int32_t *x = m.x;
    for (int b = 0; b < B; b++)
        for (int i = 0; i <= T; i++) {
            int32_t tok = (int32_t)rm_rng_below(&r, (uint64_t)c->vocab);
            win[b * (T + 1) + i] = tok;
            if (i < T)
                x[b * T + i] = tok;
            if (i > 0)
                m.labels[b * T + i - 1] = tok;
        }
    rm_test_write_file(batch, win, (size_t)B * (size_t)(T + 1) * sizeof(int32_t));
    free(win);
    rm_model_forward(&m, B);
    rm_model_backward(&m, B, 1.0f / (float)B, NULL, NULL);
    float ours_loss = *m.loss_sum / (float)B;

    repo_root(root, sizeof root);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/py/gpt_ref.py grads --model %s --batch %s --out %s 2>&1", root, dir,
             batch, out);
    int rc = system(cmd);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    rm_st_file ref;
    CU_ASSERT_EQUAL_FATAL(rm_st_open(out, &ref, &e), RM_OK);
    const rm_st_tensor *lt = rm_st_find(&ref, "loss");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lt);
    float ref_loss = *(const float *)rm_st_data(&ref, lt);
    CU_ASSERT(fabsf(ours_loss - ref_loss) <= 1e-4f * fabsf(ref_loss));
    int checked = 0;
    double worst = 0;
    char worst_name[RM_MODEL_TENSOR_NAME] = "";
    for (int u = 0; u < m.nunits; u++) {
        rm_model_tensor ts[16];
        int n = rm_model_tensors(&m, u, ts, 16);
        for (int i = 0; i < n && i < 16; i++) {
            const rm_st_tensor *g = rm_st_find(&ref, ts[i].name);
            CU_ASSERT_PTR_NOT_NULL(g);
            if (!g || g->dtype != RM_ST_F32)
                continue;
            size_t len = 1;
            for (int k = 0; k < ts[i].ndim; k++)
                len *= (size_t)ts[i].shape[k];
            CU_ASSERT_EQUAL(g->end - g->begin, len * sizeof(float));
            double err = rm_test_rel_diff(m.grads + ts[i].off, (const float *)rm_st_data(&ref, g), len);
            if (err > worst) {
                worst = err;
                snprintf(worst_name, sizeof worst_name, "%.*s", (int)sizeof worst_name - 1, ts[i].name);
            }
            checked++;
        }
    }
    fprintf(stderr,
            "  [L%d H%d C%d T%d V%d B%d] loss %.6f vs torch %.6f, worst gradient %.2e (%s), %d tensors\n",
            c->layers, c->heads, c->embed, c->context, c->vocab, c->batch, ours_loss, ref_loss, worst,
            worst_name, checked);
    CU_ASSERT(checked == 2 + 12 * c->layers + 2);
    CU_ASSERT(worst < 1e-4);
    rm_st_close(&ref);
    rm_model_free(&m);
}

static void test_against_torch(void)
{
    static const shape_case cases[] = {
        {2, 1, 16, 1, 11, 3},   /* one head, context 1 */
        {2, 4, 32, 37, 256, 2}, /* several heads, a context of 3 attention blocks, bytes */
        {3, 2, 24, 20, 50, 4},  /* odd widths, a small vocabulary */
        {1, 3, 48, 64, 97, 2},  /* the baby GPT's context */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        one_case(&cases[i], (int)i);
}

void rm_suite_gpt_torch(void)
{
    CU_pSuite s = CU_add_suite("gpt_torch", setup, teardown);
    CU_add_test(s, "one step: loss and every gradient against PyTorch", test_against_torch);
}
