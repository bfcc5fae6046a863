/* test_manifest.c — the versioned checkpoint manifest (worker/checkpoint/manifest.h): a whole
 * checkpoint, a balanced sharded set and a stage set each get a JSON manifest whose fields,
 * tensors and pieces are the written ones, which round-trips (parse then encode gives the same
 * text) and from which any flat range assembles to exactly the written floats; a torn, garbage,
 * oversized, over-count, newer-version or inconsistent manifest is refused with an error naming
 * the file and the field, and nothing is lost (the checkpoint it describes and the older ones
 * still load); a corrupt or replaced file is caught by the assembler; a checkpoint written
 * without a manifest (the old way) loads exactly as before; pruning takes manifests with their
 * files. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/testutil.h"
#include "worker/allreduce/shard.h"
#include "worker/checkpoint/ckpt_shard.h"
#include "worker/checkpoint/manifest.h"
#include "worker/model/mlp.h"

static char *g_dir;

/* 3 layers: 20x7+7 = 147, 7x5+5 = 40, 5x3+3 = 18 -> 205 floats; Adam (2 state buffers) */
static rm_ckpt_meta g_meta;
static rm_model g_lay;
static rm_ckpt_units g_units;
static rm_model_tensor g_t[8];
static rm_ckpt_model g_model;

static int suite_init(void)
{
    g_dir = rm_test_tmpdir("manifest");
    memset(&g_meta, 0, sizeof g_meta);
    int hidden[2] = {7, 5};
    rm_err e = {0};
    rm_mlp_shape(&g_meta.shape, 20, hidden, 2, 3, &e);
    rm_model_plan(&g_lay, &rm_model_mlp, &g_meta.shape, NULL);
    g_meta.nparams = g_lay.nparams;
    g_meta.opt_type = 1;   /* adam */
    g_meta.nstate = 2;
    g_meta.world_size = 4;
    g_meta.batch_per_worker = 64;
    g_meta.train_epoch = 3;
    g_meta.data_pos = 1280;
    g_meta.seed = 0xfedcba9876543211ULL;   /* above 2^53: a JSON number would round it */
    g_meta.loss_scale = 1;
    g_units = (rm_ckpt_units){g_meta.shape.nlayers, g_lay.unit_off, g_lay.unit_len};
    int n = 0;
    for (int u = 0; u < g_lay.nunits; u++)
        n += rm_model_tensors(&g_lay, u, g_t + n, (int)RM_ARRAY_LEN(g_t) - n);
    g_model = (rm_ckpt_model){"mlp", g_t, n};
    return g_dir && n == 6 && g_lay.nparams == 205 ? 0 : 1;
}
static int suite_clean(void) { return rm_test_tmpdir_free(&g_dir); }

/* Buffer b (0 params, 1-2 optimizer state), element i, at step s. */
static float val(int64_t step, int b, size_t i) { return (float)step * 1000.0f + (float)b * 300.0f + (float)i; }

static rm_ckpt_meta meta_at(int64_t step)
{
    rm_ckpt_meta m = g_meta;
    m.step = step;
    m.opt_t = step + 5;
    return m;
}

/* A whole checkpoint at step; with_manifest: as the trainer writes it, else the old way. */
static void write_whole(int64_t step, bool with_manifest, int keep, char *path, size_t cap)
{
    rm_ckpt_meta m = meta_at(step);
    size_t n = 3 * g_lay.nparams;
    float *p = malloc(n * sizeof(float));
    for (int b = 0; b < 3; b++)
        for (size_t i = 0; i < g_lay.nparams; i++)
            p[(size_t)b * g_lay.nparams + i] = val(step, b, i);
    rm_ckpt_seg seg = {p, n * sizeof(float)};
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_write(g_dir, &m, &seg, 1, keep, path, cap, &e), RM_OK);
    if (with_manifest)
        CU_ASSERT_EQUAL_FATAL(rm_ckpt_manifest_write_whole(path, &m, &g_model, &e), RM_OK);
    free(p);
}

/* Rank r's shard of a set (bounds NULL: balanced over W; else stage r of W) and, for the last
 * rank, the set's completion. */
static int write_shard(int64_t step, int W, int r, const int *bounds, rm_err *e)
{
    rm_unit_shard us;
    if (bounds) {   /* a stage: its whole units */
        memset(&us, 0, sizeof us);
        for (int u = bounds[r]; u < bounds[r + 1]; u++) {
            us.off[u] = g_lay.unit_off[u];
            us.len[u] = g_lay.unit_len[u];
            us.soff[u] = us.total;
            us.total += us.len[u];
        }
        us.nunits = g_units.n;
    } else {
        CU_ASSERT_EQUAL_FATAL(rm_unit_shard_make(g_lay.unit_off, g_lay.unit_len, g_units.n, W, r, &us), 0);
    }
    size_t T = us.total;
    float *buf = calloc(3 * T + 1, sizeof(float));
    for (int b = 0; b < 3; b++)
        for (int u = 0; u < us.nunits; u++)
            for (size_t k = 0; k < us.len[u]; k++)
                buf[(size_t)b * T + us.soff[u] + k] = val(step, b, us.off[u] + k);
    rm_ckpt_meta m = meta_at(step);
    m.rdzv_epoch = 2;
    m.shard_world = W;
    m.shard_rank = r;
    m.shard_floats = T;
    rm_ckpt_seg seg = {buf, 3 * T * sizeof(float)};
    double wait = r == W - 1 ? 5 : 0;
    int rc = bounds ? rm_ckpt_stage_write(g_dir, &m, &g_units, &g_model, bounds, &seg, 1, 1, wait,
                                          NULL, 0, e)
                    : rm_ckpt_shard_write(g_dir, &m, &g_units, &g_model, &seg, 1, 1, wait, NULL, 0, e);
    free(buf);
    return rc;
}

static void write_set(int64_t step, int W, const int *bounds)
{
    for (int r = 0; r < W; r++) {
        rm_err e = {0};
        CU_ASSERT_EQUAL(write_shard(step, W, r, bounds, &e), r == W - 1 ? RM_OK : RM_ETIMEDOUT);
    }
}

static void jpath(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", g_dir, name);
}

/* Floats [from, to) of every buffer, assembled from the manifest: equal to what was written. */
static bool assembles(const rm_ckpt_manifest *m, uint64_t from, uint64_t to)
{
    size_t len = to - from, need = 3 * len * sizeof(float);
    float *dst = calloc(3 * len, sizeof(float));
    rm_err e = {0};
    int rc = rm_ckpt_manifest_assemble(g_dir, m, &g_meta, from, to, dst, need, &e);
    if (rc != RM_OK)
        fprintf(stderr, "assemble: %s\n", e.msg);
    bool ok = rc == RM_OK;
    for (int b = 0; ok && b < 3; b++)
        for (size_t i = 0; ok && i < len; i++)
            ok = dst[(size_t)b * len + i] == val(m->step, b, from + i);
    free(dst);
    return ok;
}

/* Encoding what was parsed gives the file's text back: reader and writer agree on every field. */
static bool round_trips(const char *path, const rm_ckpt_manifest *m)
{
    size_t n = 0, en = 0;
    char *text = rm_test_read_file(path, &n), *again = NULL;
    rm_err e = {0};
    bool ok = text && rm_ckpt_manifest_encode(m, &again, &en, &e) == RM_OK && en == n &&
              memcmp(text, again, n) == 0;
    free(text);
    free(again);
    return ok;
}

static void test_whole(void)
{
    rm_test_clear_dir(g_dir);
    char path[4200], jp[4200];
    write_whole(100, true, 5, path, sizeof path);
    jpath(jp, sizeof jp, "ckpt-000000000100.json");
    rm_ckpt_manifest m;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_manifest_read(jp, &m, &e), RM_OK);
    CU_ASSERT_EQUAL(m.version, RM_CKPT_MF_VERSION);
    CU_ASSERT_STRING_EQUAL(m.kind, "whole");
    CU_ASSERT_STRING_EQUAL(m.family, "mlp");
    CU_ASSERT_EQUAL(m.shape.nlayers, g_meta.shape.nlayers);
    CU_ASSERT_EQUAL(memcmp(m.shape.dims, g_meta.shape.dims, sizeof(int) * 4), 0);
    CU_ASSERT_EQUAL(m.nparams, 205);
    CU_ASSERT_EQUAL(m.step, 100);
    CU_ASSERT_EQUAL(m.opt_type, 1);
    CU_ASSERT_EQUAL(m.nstate, 2);
    CU_ASSERT_EQUAL(m.opt_t, 105);
    CU_ASSERT_EQUAL(m.train_epoch, 3);
    CU_ASSERT_EQUAL(m.data_pos, 1280);
    CU_ASSERT_EQUAL(m.seed, 0xfedcba9876543211ULL);
    CU_ASSERT_EQUAL(m.world_size, 4);
    CU_ASSERT_EQUAL(m.batch_per_worker, 64);
    CU_ASSERT_EQUAL_FATAL(m.nfiles, 1);
    CU_ASSERT_STRING_EQUAL(m.files[0].name, "ckpt-000000000100.rmck");
    uint32_t crc = 0;
    rm_ckpt_meta hm;
    CU_ASSERT_EQUAL(rm_ckpt_read_header(path, &hm, &crc, &e), RM_OK);
    CU_ASSERT_EQUAL(m.files[0].crc, crc);
    /* 6 tensors, then their copies in each state buffer; one piece each, where the file has it */
    CU_ASSERT_EQUAL_FATAL(m.ntensors, 18);
    CU_ASSERT_STRING_EQUAL(m.tensors[0].name, "layers.0.weight");
    CU_ASSERT_EQUAL(m.tensors[0].ndim, 2);
    CU_ASSERT_EQUAL(m.tensors[0].shape[0], 20);
    CU_ASSERT_EQUAL(m.tensors[0].shape[1], 7);
    CU_ASSERT_STRING_EQUAL(m.tensors[0].layout, "in_out");
    CU_ASSERT_STRING_EQUAL(m.tensors[3].name, "layers.1.bias");
    CU_ASSERT_EQUAL(m.tensors[3].offset, 147 + 35);
    CU_ASSERT_STRING_EQUAL(m.tensors[6].name, "layers.0.weight@state0");
    CU_ASSERT_STRING_EQUAL(m.tensors[17].name, "layers.2.bias@state1");
    CU_ASSERT_EQUAL(m.tensors[17].buffer, 2);
    for (int i = 0; i < m.ntensors; i++) {
        const rm_ckpt_mtensor *t = &m.tensors[i];
        CU_ASSERT_EQUAL(t->npieces, 1);
        const rm_ckpt_piece *p = &m.pieces[t->first];
        CU_ASSERT_EQUAL(p->offset, RM_CKPT_HDR_BYTES + ((uint64_t)t->buffer * 205 + t->offset) * 4);
        CU_ASSERT_EQUAL(p->start, 0);
        CU_ASSERT_EQUAL(p->end, t->numel);
    }
    CU_ASSERT(round_trips(jp, &m));
    CU_ASSERT(assembles(&m, 0, 205));
    CU_ASSERT(assembles(&m, 100, 160));   /* across tensors and units */
    CU_ASSERT(assembles(&m, 204, 205));
    rm_ckpt_manifest_free(&m);
}

static void test_sharded_set(void)
{
    rm_test_clear_dir(g_dir);
    write_set(200, 3, NULL);
    char jp[4200];
    jpath(jp, sizeof jp, "manifest-000000000200-2-3.json");
    rm_ckpt_manifest m;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_manifest_read(jp, &m, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(m.kind, "sharded");
    CU_ASSERT_EQUAL(m.step, 200);
    CU_ASSERT_EQUAL_FATAL(m.nfiles, 3);
    CU_ASSERT_STRING_EQUAL(m.files[1].name, "shard-000000000200-2-1-of-3.rmck");
    /* every unit is split over the 3 ranks: layers.0.weight (140 floats) comes in 3 pieces, the
     * first at rank 0's compact shard's start; its state0 copy after rank 0's params section */
    CU_ASSERT_EQUAL_FATAL(m.tensors[0].npieces, 3);
    rm_unit_shard us;
    rm_unit_shard_make(g_lay.unit_off, g_lay.unit_len, g_units.n, 3, 0, &us);
    const rm_ckpt_piece *p = &m.pieces[m.tensors[0].first];
    CU_ASSERT_EQUAL(p[0].file, 0);
    CU_ASSERT_EQUAL(p[0].offset, RM_CKPT_HDR_BYTES);
    CU_ASSERT_EQUAL(p[1].file, 1);
    CU_ASSERT_EQUAL(p[2].end, 140);
    p = &m.pieces[m.tensors[6].first];
    CU_ASSERT_EQUAL(p[0].offset, RM_CKPT_HDR_BYTES + us.total * 4);
    CU_ASSERT(round_trips(jp, &m));
    CU_ASSERT(assembles(&m, 0, 205));
    CU_ASSERT(assembles(&m, 30, 170));
    /* the sets' own loader is untouched by the manifest beside it */
    size_t need = rm_ckpt_shard_dst_bytes(&g_units, 2, 1, 0);
    float *dst = calloc(need / 4, sizeof(float));
    rm_ckpt_meta got;
    CU_ASSERT_EQUAL(rm_ckpt_shard_load_newest(g_dir, &g_meta, &g_units, 1, 0, -1, dst, need, &got,
                                              NULL, 0, NULL, &e), RM_OK);
    CU_ASSERT_EQUAL(dst[204], val(200, 0, 204));
    free(dst);
    rm_ckpt_manifest_free(&m);
}

static void test_stage_set(void)
{
    rm_test_clear_dir(g_dir);
    static const int bounds[] = {0, 1, 3};
    write_set(300, 2, bounds);
    char jp[4200];
    jpath(jp, sizeof jp, "manifest-000000000300-2-2.json");
    rm_ckpt_manifest m;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_manifest_read(jp, &m, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(m.kind, "stages");
    CU_ASSERT_EQUAL_FATAL(m.nfiles, 2);
    /* layer 0 whole in stage 0's file, layers 1-2 whole in stage 1's (layers.1.weight first) */
    for (int i = 0; i < m.ntensors; i++) {
        CU_ASSERT_EQUAL(m.tensors[i].npieces, 1);
        CU_ASSERT_EQUAL(m.pieces[m.tensors[i].first].file, m.tensors[i].offset < 147 ? 0 : 1);
    }
    CU_ASSERT_EQUAL(m.pieces[m.tensors[2].first].offset, RM_CKPT_HDR_BYTES);
    CU_ASSERT_EQUAL(m.pieces[m.tensors[8].first].offset, RM_CKPT_HDR_BYTES + 58 * 4);   /* state0 */
    CU_ASSERT(round_trips(jp, &m));
    CU_ASSERT(assembles(&m, 0, 205));
    CU_ASSERT(assembles(&m, 100, 150));   /* from inside a piece, across the stage boundary */
    rm_ckpt_manifest_free(&m);
}

/* Parse text after mutate(root) changed it: the return code and the error. */
static int parse_mutated(const char *text, void (*mutate)(cJSON *root), rm_err *e)
{
    cJSON *root = cJSON_Parse(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    mutate(root);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    rm_ckpt_manifest m;
    memset(e, 0, sizeof *e);
    int rc = rm_ckpt_manifest_parse("X.json", s, strlen(s), &m, e);
    free(s);
    rm_ckpt_manifest_free(&m);
    return rc;
}

static cJSON *item(cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static cJSON *piece0(cJSON *root, int t)
{
    return cJSON_GetArrayItem(item(cJSON_GetArrayItem(item(root, "tensors"), t), "pieces"), 0);
}
static void m_version(cJSON *r) { cJSON_SetNumberValue(item(r, "version"), 2); }
static void m_format(cJSON *r) { cJSON_ReplaceItemInObject(r, "format", cJSON_CreateString("safetensors")); }
static void m_end(cJSON *r) { cJSON_SetNumberValue(item(piece0(r, 1), "end"), 9999); }
static void m_gap(cJSON *r) { cJSON_SetNumberValue(item(piece0(r, 0), "end"), 100); }
static void m_file(cJSON *r) { cJSON_ReplaceItemInObject(piece0(r, 2), "file", cJSON_CreateString("other.rmck")); }
static void m_seed(cJSON *r) { cJSON_DeleteItemFromObject(item(r, "data"), "seed"); }
static void m_order(cJSON *r) { cJSON_SetNumberValue(item(cJSON_GetArrayItem(item(r, "tensors"), 1), "offset"), 0); }
static void m_name(cJSON *r) { cJSON_ReplaceItemInObject(cJSON_GetArrayItem(item(r, "tensors"), 6), "name", cJSON_CreateString("layers.0.weight")); }
static void m_files(cJSON *r)
{
    cJSON *a = item(r, "files");
    for (int i = 0; i < RM_CKPT_MF_MAX_FILES; i++) {
        cJSON *o = cJSON_CreateObject();
        char n[32];
        snprintf(n, sizeof n, "f%d.rmck", i);
        cJSON_AddStringToObject(o, "name", n);
        cJSON_AddStringToObject(o, "crc32", "00000000");
        cJSON_AddItemToArray(a, o);
    }
}

static void test_refused(void)
{
    rm_test_clear_dir(g_dir);
    char path[4200], jp[4200];
    write_whole(100, true, 5, path, sizeof path);
    write_whole(200, true, 5, path, sizeof path);
    jpath(jp, sizeof jp, "ckpt-000000000200.json");
    size_t n = 0;
    char *text = rm_test_read_file(jp, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    rm_ckpt_manifest m;
    rm_err e = {0};
    static const struct {
        void (*mutate)(cJSON *);
        int rc;
        const char *field, *says;
    } cases[] = {
        {m_version, RM_EUNSUPPORTED, "version", "X.json: version: 2 is newer than this reader's 1"},
        {m_format, RM_EINVAL, "format", "X.json: format: \"safetensors\" is not"},
        {m_end, RM_EINVAL, "tensors[1].pieces[0].end", "outside [1, 7]"},
        {m_gap, RM_EINVAL, "tensors[0].pieces", "cover 100 of 140"},
        {m_file, RM_EINVAL, "tensors[2].pieces[0].file", "\"other.rmck\" is not in files"},
        {m_seed, RM_EINVAL, "data.seed", "X.json: data.seed: required"},
        {m_order, RM_EINVAL, "tensors[1].offset", "buffer 0's tensors so far end at 140"},
        {m_name, RM_EINVAL, "tensors[6].name", "is not buffer 1's name"},
        {m_files, RM_ETOOBIG, "files", "4097 entries (1 to 4096)"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(cases); i++) {
        CU_ASSERT_EQUAL(parse_mutated(text, cases[i].mutate, &e), cases[i].rc);
        CU_ASSERT_STRING_EQUAL(e.field, cases[i].field);
        if (!strstr(e.msg, cases[i].says))
            fprintf(stderr, "case %zu: %s\n", i, e.msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, cases[i].says));
    }
    /* torn (a writer without the atomic rename, or a copy cut short) and garbage */
    CU_ASSERT_EQUAL(rm_ckpt_manifest_parse("X.json", text, n / 2, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "X.json: invalid JSON"));
    CU_ASSERT_PTR_NULL(m.tensors);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_parse("X.json", "\x01garbage{", 9, &m, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_parse("X.json", "[1,2]", 5, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not a JSON object"));
    /* the newest manifest on disk torn: refused naming the file; nothing is lost — the checkpoint
     * it describes still loads the old way, and the older manifest still assembles its step */
    CU_ASSERT_EQUAL(rm_test_write_file(jp, text, n - 10), 0);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_read(jp, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, jp));
    float *dst = calloc(3 * 205, sizeof(float));
    rm_ckpt_meta got;
    CU_ASSERT_EQUAL(rm_ckpt_load_newest(g_dir, &g_meta, &got, dst, 3 * 205 * 4, NULL, 0, NULL, &e), RM_OK);
    CU_ASSERT_EQUAL(got.step, 200);
    CU_ASSERT_EQUAL(dst[2 * 205 + 7], val(200, 2, 7));
    free(dst);
    char old[4200];
    jpath(old, sizeof old, "ckpt-000000000100.json");
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_manifest_read(old, &m, &e), RM_OK);
    CU_ASSERT(assembles(&m, 0, 205));
    rm_ckpt_manifest_free(&m);
    /* oversized: refused at the cap without reading the rest */
    FILE *f = fopen(jp, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ftruncate(fileno(f), (off_t)RM_CKPT_MF_MAX_BYTES + 10), 0);
    fclose(f);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_read(jp, &m, &e), RM_ETOOBIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "larger than"));
    /* missing: its own code, so a caller tells "no manifest" from "a bad one" */
    jpath(jp, sizeof jp, "ckpt-000000000300.json");
    CU_ASSERT_EQUAL(rm_ckpt_manifest_read(jp, &m, &e), RM_ENOTFOUND);
    free(text);
}

static void flip(const char *name, long at)
{
    char p[4200];
    jpath(p, sizeof p, name);
    FILE *f = fopen(p, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void test_assemble_verifies_files(void)
{
    rm_test_clear_dir(g_dir);
    write_set(200, 3, NULL);
    char jp[4200];
    jpath(jp, sizeof jp, "manifest-000000000200-2-3.json");
    rm_ckpt_manifest m;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_manifest_read(jp, &m, &e), RM_OK);
    size_t need = 3 * 205 * sizeof(float);
    float *dst = calloc(3 * 205, sizeof(float));
    /* a range, and a destination, that do not fit */
    CU_ASSERT_EQUAL(rm_ckpt_manifest_assemble(g_dir, &m, NULL, 10, 206, dst, need, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_assemble(g_dir, &m, NULL, 0, 205, dst, need - 4, &e), RM_EINVAL);
    /* a flipped payload byte in shard 2: caught by its checksum, the message names the file */
    flip("shard-000000000200-2-2-of-3.rmck", RM_CKPT_HDR_BYTES + 9);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_assemble(g_dir, &m, NULL, 0, 205, dst, need, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "shard-000000000200-2-2-of-3.rmck"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "checksum"));
    /* a range no piece of shard 2 lies in does not need it (rank 0's piece of layer 0) */
    CU_ASSERT(assembles(&m, 0, 10));
    /* shard 1 replaced by a valid file with other values: its checksum is not the listed one */
    char sp[4200];
    jpath(sp, sizeof sp, "shard-000000000200-2-1-of-3.rmck");
    rm_ckpt_meta hm;
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_read(sp, NULL, &hm, dst, need, &e), RM_OK);
    dst[0] += 1;
    rm_ckpt_seg seg = {dst, 3 * hm.shard_floats * sizeof(float)};
    CU_ASSERT_EQUAL(unlink(sp), 0);
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_write_named(g_dir, "shard-000000000200-2-1-of-3.rmck", &hm, &seg, 1,
                                              NULL, 0, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_assemble(g_dir, &m, NULL, 50, 60, dst, need, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "shard-000000000200-2-1-of-3.rmck: does not match the manifest"));
    free(dst);
    rm_ckpt_manifest_free(&m);
}

/* A checkpoint written the old way (no manifest): loads exactly as before, and a manifest read
 * says there is none. */
static void test_old_checkpoint_loads(void)
{
    rm_test_clear_dir(g_dir);
    char path[4200], jp[4200];
    write_whole(100, false, 5, path, sizeof path);
    jpath(jp, sizeof jp, "ckpt-000000000100.json");
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(jp, &st), 0);
    float *dst = calloc(3 * 205, sizeof(float));
    rm_ckpt_meta got;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_ckpt_load_newest(g_dir, &g_meta, &got, dst, 3 * 205 * 4, NULL, 0, NULL, &e), RM_OK);
    CU_ASSERT_EQUAL(got.step, 100);
    CU_ASSERT_EQUAL(got.data_pos, 1280);
    bool same = true;
    for (int b = 0; b < 3; b++)
        for (size_t i = 0; i < 205; i++)
            same = same && dst[(size_t)b * 205 + i] == val(100, b, i);
    CU_ASSERT(same);
    free(dst);
    rm_ckpt_manifest m;
    CU_ASSERT_EQUAL(rm_ckpt_manifest_read(jp, &m, &e), RM_ENOTFOUND);
}

/* Pruning removes a manifest with the checkpoint it describes, never one of a kept checkpoint;
 * a stale manifest under a new file's name (its file gone) is replaced. */
static void test_pruned_with_files(void)
{
    rm_test_clear_dir(g_dir);
    char path[4200], jp[4200];
    struct stat st;
    jpath(jp, sizeof jp, "ckpt-000000000300.json");
    CU_ASSERT_EQUAL(rm_test_write_file(jp, "{}", 2), 0);
    for (int s = 1; s <= 3; s++)
        write_whole(100 * s, true, 2, path, sizeof path);
    jpath(jp, sizeof jp, "ckpt-000000000100.json");
    CU_ASSERT_NOT_EQUAL(stat(jp, &st), 0);
    jpath(jp, sizeof jp, "ckpt-000000000200.json");
    CU_ASSERT_EQUAL(stat(jp, &st), 0);
    rm_ckpt_manifest m;
    rm_err e = {0};
    jpath(jp, sizeof jp, "ckpt-000000000300.json");
    CU_ASSERT_EQUAL(rm_ckpt_manifest_read(jp, &m, &e), RM_OK);
    CU_ASSERT_EQUAL(m.step, 300);
    rm_ckpt_manifest_free(&m);
    /* sets (keep 1): the older set's JSON manifest goes with its .rmmf and shards */
    write_set(400, 2, NULL);
    write_set(500, 2, NULL);
    jpath(jp, sizeof jp, "manifest-000000000400-2-2.json");
    CU_ASSERT_NOT_EQUAL(stat(jp, &st), 0);
    jpath(jp, sizeof jp, "manifest-000000000500-2-2.json");
    CU_ASSERT_EQUAL(stat(jp, &st), 0);
}

/* The builder refuses files that do not hold every float exactly once, and tensors that do not
 * tile the parameters. */
static void test_build_checks_coverage(void)
{
    rm_ckpt_meta meta = meta_at(1);
    rm_ckpt_span all = {0, 205, 0}, part = {0, 200, 0};
    rm_ckpt_file_map twice[2] = {{"a.rmck", 0, 205, 1, &all}, {"b.rmck", 0, 205, 1, &all}};
    rm_ckpt_file_map hole = {"a.rmck", 0, 205, 1, &part};
    rm_ckpt_manifest m;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_ckpt_manifest_build(&meta, "whole", &g_model, twice, 2, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "exactly once"));
    CU_ASSERT_EQUAL(rm_ckpt_manifest_build(&meta, "whole", &g_model, &hole, 1, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "tensor layers.2.weight"));   /* its last 2 floats */
    rm_ckpt_model fewer = {"mlp", g_t, 5};
    CU_ASSERT_EQUAL(rm_ckpt_manifest_build(&meta, "whole", &fewer, &hole, 1, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "cover 202 of 205"));
    CU_ASSERT_EQUAL(rm_ckpt_manifest_build(&meta, "whole", &g_model, twice, 1, &m, &e), RM_OK);
    rm_ckpt_manifest_free(&m);
}

void rm_suite_manifest(void);
void rm_suite_manifest(void)
{
    static const rm_test_case cases[] = {
        {"whole", test_whole},
        {"sharded_set", test_sharded_set},
        {"stage_set", test_stage_set},
        {"refused", test_refused},
        {"assemble_verifies_files", test_assemble_verifies_files},
        {"old_checkpoint_loads", test_old_checkpoint_loads},
        {"pruned_with_files", test_pruned_with_files},
        {"build_checks_coverage", test_build_checks_coverage},
    };
    RM_ADD_SUITE("manifest", suite_init, suite_clean, cases);
}
