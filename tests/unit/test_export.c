/* test_export.c — export and import of model weights (worker/model/export.h): an MLP round trip
 * (float32 bit-exact, bfloat16 within its rounding), the nn.Linear transposition checked against
 * a tensor laid out by hand, config.json read back into the same shape (mlp and gpt), the
 * initial values taken from weights through rm_model_init_params, GPT's tied head written once
 * and Hugging Face's extra buffers ignored, and every import refusal (missing tensor, wrong shape,
 * wrong dtype, truncated file, extra tensor, bad config) with a message naming the file and the
 * tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/safetensors.h"
#include "kernels/kernels.h"
#include "tests/unit/testutil.h"
#include "worker/data/data.h"
#include "worker/gpu.h"
#include "worker/model/export.h"
#include "worker/model/mlp.h"

static char *g_dir;
static int setup(void)
{
    return (g_dir = rm_test_tmpdir("export")) ? 0 : 1;
}
static int teardown(void)
{
    return rm_test_tmpdir_free(&g_dir);
}

/* An MLP 5 -> 4 -> 3 with random parameters (host memory: the CPU kernels). */
static void make_mlp(rm_model *m, uint64_t seed)
{
    rm_model_shape s;
    rm_err err = {0};
    int hidden[] = {4};
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&s, 5, hidden, 1, 3, &err), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init(m, rm_kernels_cpu(), &rm_model_mlp, &s, 2, &err), RM_OK);
    rm_rng r;
    rm_rng_seed(&r, seed);
    for (size_t i = 0; i < m->nparams; i++)
        m->params[i] = (float)rm_rng_normal(&r);
}

static void make_gpt(rm_model *m)
{
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    t.model_type = "gpt";
    t.layers = 2;
    t.heads = 2;
    t.embed = 8;
    t.context = 5;
    t.vocab = 11;
    rm_model_data d = {.inputs = 5, .classes = 11};
    const rm_model_family *f;
    rm_model_shape s;
    rm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(rm_model_shape_for(&t, &d, &f, &s, &err), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init(m, rm_kernels_cpu(), f, &s, 1, &err), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_model_init_params(m, 3, &err), RM_OK);
}

static char *sub(const char *name)
{
    static char buf[4][1024];
    static int at;
    char *b = buf[at++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", g_dir, name);
    return b;
}

static void test_mlp_round_trip_f32(void)
{
    rm_model m;
    make_mlp(&m, 1);
    rm_err err = {0};
    const char *dir = sub("f32");
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&m, m.params, dir, RM_DTYPE_FLOAT32, &err), RM_OK);
    float *back = calloc(m.nparams, sizeof(float));
    CU_ASSERT_EQUAL(rm_model_import(&m, dir, back, &err), RM_OK);
    CU_ASSERT_EQUAL(memcmp(back, m.params, m.nparams * sizeof(float)), 0);
    /* the file itself, by name, imports the same */
    memset(back, 0, m.nparams * sizeof(float));
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL(rm_model_import(&m, file, back, &err), RM_OK);
    CU_ASSERT_EQUAL(memcmp(back, m.params, m.nparams * sizeof(float)), 0);
    /* metadata and names */
    rm_st_file f;
    CU_ASSERT_EQUAL_FATAL(rm_st_open(file, &f, &err), RM_OK);
    CU_ASSERT_STRING_EQUAL(rm_st_meta(&f, "format"), "pt");
    CU_ASSERT_EQUAL(f.n, 4);
    CU_ASSERT_PTR_NOT_NULL(rm_st_find(&f, "layers.0.weight"));
    CU_ASSERT_PTR_NOT_NULL(rm_st_find(&f, "layers.1.bias"));
    rm_st_close(&f);
    /* the initial values of a fresh model come from the weights when it is given them */
    rm_model m2;
    make_mlp(&m2, 99);
    rm_model_weights w;
    CU_ASSERT_EQUAL_FATAL(rm_model_weights_open(&m2, dir, &w, &err), RM_OK);
    m2.init_weights = &w;
    CU_ASSERT_EQUAL(rm_model_init_params(&m2, 12345, &err), RM_OK);
    CU_ASSERT_EQUAL(memcmp(m2.params, m.params, m.nparams * sizeof(float)), 0);
    memset(m2.params, 0, m2.nparams * sizeof(float)); /* a stage's units only */
    CU_ASSERT_EQUAL(rm_model_init_params_units(&m2, 1, 1, 2, &err), RM_OK);
    CU_ASSERT_EQUAL(m2.params[0], 0.0f);
    CU_ASSERT_EQUAL(
        memcmp(m2.params + m2.unit[1].off, m.params + m.unit[1].off, m.unit[1].len * sizeof(float)), 0);
    rm_model_weights_close(&w);
    rm_model_weights_close(&w); /* idempotent */
    rm_model_free(&m2);
    free(back);
    rm_model_free(&m);
}

static void test_mlp_round_trip_bf16(void)
{
    rm_model m;
    make_mlp(&m, 2);
    rm_err err = {0};
    const char *dir = sub("bf16");
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&m, m.params, dir, RM_DTYPE_BFLOAT16, &err), RM_OK);
    float *back = calloc(m.nparams, sizeof(float));
    CU_ASSERT_EQUAL(rm_model_import(&m, dir, back, &err), RM_OK);
    for (size_t i = 0; i < m.nparams; i++) {
        /* bf16 keeps 8 bits of mantissa: half an ulp of rounding */
        CU_ASSERT(fabsf(back[i] - m.params[i]) <= fabsf(m.params[i]) * (1.0f / 256));
        CU_ASSERT_EQUAL(back[i], rm_bf16_to_f32(rm_f32_to_bf16(m.params[i])));
    }
    rm_st_file f;
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(rm_st_open(file, &f, &err), RM_OK);
    CU_ASSERT_EQUAL(rm_st_find(&f, "layers.0.weight")->dtype, RM_ST_BF16);
    rm_st_close(&f);
    free(back);
    rm_model_free(&m);
}

/* layers.0.weight is [in x out] = [5 x 4] in the flat buffer: W[i][j] at i*4 + j. nn.Linear's
 * [out x in] holds it at j*5 + i. */
static void test_transposition(void)
{
    rm_model m;
    make_mlp(&m, 3);
    float *w0 = m.params + rm_mlp_w_off(&m, 0);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            w0[i * 4 + j] = (float)(10 * i + j); /* in i, out j */
    rm_err err = {0};
    const char *dir = sub("transpose");
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&m, m.params, dir, RM_DTYPE_FLOAT32, &err), RM_OK);
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    rm_st_file f;
    CU_ASSERT_EQUAL_FATAL(rm_st_open(file, &f, &err), RM_OK);
    const rm_st_tensor *t = rm_st_find(&f, "layers.0.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->ndim, 2);
    CU_ASSERT_EQUAL(t->shape[0], 4);
    CU_ASSERT_EQUAL(t->shape[1], 5);
    const float want[4][5] = {
        {0, 10, 20, 30, 40},
        {1, 11, 21, 31, 41},
        {2, 12, 22, 32, 42},
        {3, 13, 23, 33, 43},
    };
    CU_ASSERT_EQUAL(memcmp(rm_st_data(&f, t), want, sizeof want), 0);
    const rm_st_tensor *b = rm_st_find(&f, "layers.0.bias");
    CU_ASSERT_EQUAL(b->ndim, 1);
    CU_ASSERT_EQUAL(b->shape[0], 4);
    CU_ASSERT_EQUAL(memcmp(rm_st_data(&f, b), m.params + rm_mlp_b_off(&m, 0), 4 * sizeof(float)), 0);
    rm_st_close(&f);
    rm_model_free(&m);
}

static void test_config(void)
{
    rm_model m;
    make_mlp(&m, 4);
    rm_err err = {0};
    const char *dir = sub("config");
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&m, m.params, dir, RM_DTYPE_FLOAT32, &err), RM_OK);
    char file[1100];
    snprintf(file, sizeof file, "%s/config.json", dir);
    char *text = rm_test_read_file(file, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"model_type\": \"ringmaster-mlp\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"widths\": [5, 4, 3]"));
    free(text);
    rm_model_shape s;
    const rm_model_family *fam;
    CU_ASSERT_EQUAL(rm_model_config_read(dir, &s, &fam, &err), RM_OK);
    CU_ASSERT_PTR_EQUAL(fam, &rm_model_mlp);
    CU_ASSERT_EQUAL(memcmp(&s, &m.shape, sizeof s), 0);
    snprintf(file, sizeof file, "%s/model.safetensors", dir); /* beside the weights file */
    CU_ASSERT_EQUAL(rm_model_config_read(file, &s, &fam, &err), RM_OK);
    CU_ASSERT_EQUAL(memcmp(&s, &m.shape, sizeof s), 0);
    rm_model_free(&m);

    rm_model g;
    make_gpt(&g);
    dir = sub("config-gpt");
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&g, g.params, dir, RM_DTYPE_FLOAT32, &err), RM_OK);
    CU_ASSERT_EQUAL(rm_model_config_read(dir, &s, &fam, &err), RM_OK);
    CU_ASSERT_PTR_EQUAL(fam, &rm_model_gpt);
    CU_ASSERT_EQUAL(memcmp(&s, &g.shape, sizeof s), 0);
    rm_model_free(&g);

    /* refusals name the file and the key */
    const char *bad = sub("config-bad");
    rm_test_clear_dir(bad);
    snprintf(file, sizeof file, "%s/config.json", bad);
    CU_ASSERT_EQUAL(rm_model_config_read(bad, &s, &fam, &err), RM_ENOTFOUND);
    rm_test_write_file(file, "{\"model_type\": \"llama\"}", 23);
    CU_ASSERT_EQUAL(rm_model_config_read(bad, &s, &fam, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "config.json: model_type: \"llama\""));
    CU_ASSERT_PTR_NULL(fam);
    const char *w1 = "{\"model_type\": \"ringmaster-mlp\", \"widths\": [5]}";
    rm_test_write_file(file, w1, strlen(w1));
    CU_ASSERT_EQUAL(rm_model_config_read(bad, &s, &fam, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "widths"));
    const char *g1 = "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 3, \"n_embd\": 8, "
                     "\"n_positions\": 5, \"vocab_size\": 11}";
    rm_test_write_file(file, g1, strlen(g1));
    CU_ASSERT_EQUAL(rm_model_config_read(bad, &s, &fam, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "n_head"));
    rm_test_write_file(file, "{not json", 9);
    CU_ASSERT_EQUAL(rm_model_config_read(bad, &s, &fam, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "config.json"));
}

/* GPT: the names Hugging Face gives GPT2LMHeadModel, wte once (the tied head), and the buffers and
 * lm_head copy a Hugging Face checkpoint carries read without complaint. */
static void test_gpt_names(void)
{
    rm_model g;
    make_gpt(&g);
    rm_err err = {0};
    const char *dir = sub("gpt");
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&g, g.params, dir, RM_DTYPE_FLOAT32, &err), RM_OK);
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    rm_st_file f;
    CU_ASSERT_EQUAL_FATAL(rm_st_open(file, &f, &err), RM_OK);
    CU_ASSERT_EQUAL(f.n, 2 + 2 * 12 + 2);
    CU_ASSERT_PTR_NULL(rm_st_find(&f, "lm_head.weight"));
    const rm_st_tensor *qkv = rm_st_find(&f, "transformer.h.1.attn.c_attn.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(qkv);
    CU_ASSERT_EQUAL(qkv->shape[0], 8); /* Conv1D: [in, out] */
    CU_ASSERT_EQUAL(qkv->shape[1], 24);
    /* a Hugging Face-shaped file: every tensor, plus lm_head.weight and the attention buffers */
    rm_st_entry e[40];
    int64_t bshape[4] = {1, 1, 5, 5}, one = 1;
    static float mask[25], mb;
    int n = 0;
    for (int i = 0; i < f.n; i++)
        e[n++] = (rm_st_entry){f.t[i].name, f.t[i].dtype, f.t[i].ndim, f.t[i].shape, rm_st_data(&f, &f.t[i])};
    const rm_st_tensor *wte = rm_st_find(&f, "transformer.wte.weight");
    e[n++] = (rm_st_entry){"lm_head.weight", RM_ST_F32, 2, wte->shape, rm_st_data(&f, wte)};
    e[n++] = (rm_st_entry){"transformer.h.0.attn.bias", RM_ST_F32, 4, bshape, mask};
    e[n++] = (rm_st_entry){"transformer.h.0.attn.masked_bias", RM_ST_F32, 0, &one, &mb};
    const char *hf = sub("gpt-hf.safetensors");
    CU_ASSERT_EQUAL_FATAL(rm_st_write(hf, e, n, NULL, &err), RM_OK);
    float *back = calloc(g.nparams, sizeof(float));
    CU_ASSERT_EQUAL(rm_model_import(&g, hf, back, &err), RM_OK);
    CU_ASSERT_EQUAL(memcmp(back, g.params, g.nparams * sizeof(float)), 0);
    /* an lm_head of another shape is not the tied copy */
    int64_t other[2] = {3, 8};
    e[n - 3] = (rm_st_entry){"lm_head.weight", RM_ST_F32, 2, other, mask};
    CU_ASSERT_EQUAL_FATAL(rm_st_write(hf, e, n, NULL, &err), RM_OK);
    CU_ASSERT_EQUAL(rm_model_import(&g, hf, back, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "\"lm_head.weight\""));
    rm_st_close(&f);
    free(back);
    rm_model_free(&g);
}

/* A file holding the MLP's tensors with one changed by fn. */
typedef void (*mutate_fn)(rm_st_entry *e, int *n, int64_t (*shapes)[2]);
static void mut_missing(rm_st_entry *e, int *n, int64_t (*shapes)[2])
{
    e[2] = e[3]; /* layers.1.weight gone */
    (*n)--;
}
static void mut_shape(rm_st_entry *e, int *n, int64_t (*shapes)[2])
{
    shapes[0][0] = 5; /* [4, 5] written as [5, 4]: the flat layout, not nn.Linear's */
    shapes[0][1] = 4;
}
static void mut_dtype(rm_st_entry *e, int *n, int64_t (*shapes)[2])
{
    e[1].dtype = RM_ST_I32;
}
static void mut_extra(rm_st_entry *e, int *n, int64_t (*shapes)[2])
{
    e[*n] = e[1];
    e[*n].name = "layers.2.bias";
    (*n)++;
}

static void expect_refusal(const char *tag, mutate_fn fn, const char *const *want)
{
    rm_model m;
    make_mlp(&m, 5);
    static float data[64];
    int64_t shapes[6][2] = {{4, 5}, {4, 0}, {3, 4}, {3, 0}};
    const char *names[] = {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"};
    rm_st_entry e[6];
    int n = 4;
    for (int i = 0; i < 4; i++)
        e[i] = (rm_st_entry){names[i], RM_ST_F32, i % 2 ? 1 : 2, shapes[i], data};
    fn(e, &n, shapes);
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.safetensors", g_dir, tag);
    rm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(rm_st_write(path, e, n, NULL, &err), RM_OK);
    float *back = calloc(m.nparams, sizeof(float));
    CU_ASSERT_EQUAL(rm_model_import(&m, path, back, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, path));
    for (int i = 0; want[i]; i++) {
        if (!strstr(err.msg, want[i]))
            fprintf(stderr, "\n%s: \"%s\" not in \"%s\"\n", tag, want[i], err.msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want[i]));
    }
    free(back);
    rm_model_free(&m);
}

static void test_refusals(void)
{
    static const char *const missing[] = {"tensor \"layers.1.weight\" [3, 4] is missing", NULL};
    static const char *const shape[] = {"tensor \"layers.0.weight\" shape [5, 4] != expected [4, 5]", NULL};
    static const char *const dtype[] = {"tensor \"layers.0.bias\" dtype I32", "F32, BF16 or F16", NULL};
    static const char *const extra[] = {"1 tensor the mlp model does not have: \"layers.2.bias\"", NULL};
    expect_refusal("missing", mut_missing, missing);
    expect_refusal("shape", mut_shape, shape);
    expect_refusal("dtype", mut_dtype, dtype);
    expect_refusal("extra", mut_extra, extra);

    /* a truncated file: the codec's refusal, naming the file */
    rm_model m;
    make_mlp(&m, 6);
    rm_err err = {0};
    const char *dir = sub("trunc");
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&m, m.params, dir, RM_DTYPE_FLOAT32, &err), RM_OK);
    char file[1100];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    size_t len = 0;
    char *bytes = rm_test_read_file(file, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
    rm_test_write_file(file, bytes, len - 7);
    float *back = calloc(m.nparams, sizeof(float));
    CU_ASSERT_NOT_EQUAL(rm_model_import(&m, dir, back, &err), RM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, file));
    /* missing file and folder */
    CU_ASSERT_EQUAL(rm_model_import(&m, sub("nothing-here"), back, &err), RM_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "nothing-here"));
    /* another model's export: the first tensor that differs is named */
    rm_model g;
    make_gpt(&g);
    CU_ASSERT_EQUAL_FATAL(rm_model_export(&g, g.params, sub("gpt-for-mlp"), RM_DTYPE_FLOAT32, &err), RM_OK);
    CU_ASSERT_EQUAL(rm_model_import(&m, sub("gpt-for-mlp"), back, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "\"layers.0.weight\""));
    rm_model_free(&g);
    free(back);
    free(bytes);
    rm_model_free(&m);
}

void rm_suite_export(void)
{
    static const rm_test_case cases[] = {
        {"mlp_round_trip_f32", test_mlp_round_trip_f32},
        {"mlp_round_trip_bf16", test_mlp_round_trip_bf16},
        {"transposition", test_transposition},
        {"config", test_config},
        {"gpt_names", test_gpt_names},
        {"refusals", test_refusals},
    };
    RM_ADD_SUITE("export", setup, teardown, cases);
}
