/* test_ckpt_shard.c — sharded, elastic checkpoints (worker/checkpoint/ckpt_shard.h): a set written by 4
 * "ranks" (the last one writes the manifest; the others time out waiting, their shards kept)
 * restores re-sharded at worlds 1, 2, 3, 4 and 5 to exactly the pieces the layout says; a set
 * without its manifest is never loaded; a corrupt or missing shard of the newest set makes the
 * load fall back to the older complete set with a reason naming the shard; shards of concurrent
 * ranks (threads) complete the set once; keep-K retention removes whole sets (manifest and every
 * shard) and incomplete shards older than the newest set, never another model's files; the
 * manifest's own checksum guards it. Every set and whole file here is written with the model's
 * tensors, so each also gets its JSON manifest (worker/checkpoint/manifest.h) and the loaders above
 * are shown to ignore it.
 * Suite "manifest": a whole checkpoint, a balanced set and a stage set each get a JSON manifest
 * whose fields, tensors and pieces are the written ones, which round-trips (parse then encode
 * gives the same text) and from which any flat range assembles to exactly the written floats; a
 * torn, garbage, oversized, over-count, newer-version or inconsistent manifest is refused with an
 * error naming the file and the field, and nothing is lost (the checkpoint it describes and the
 * older ones still load); a corrupt or replaced file is caught by the assembler; a checkpoint
 * written without a manifest (the old way) loads exactly as before; pruning takes manifests with
 * their files. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/unit/testutil.h"
#include "worker/checkpoint/ckpt_shard.h"
#include "worker/checkpoint/manifest.h"
#include "worker/allreduce/shard.h"
#include "worker/model/mlp.h"

static char *g_dir;

/* a model of 3 layers: 20x7+7 = 147, 7x5+5 = 40, 5x3+3 = 18 -> 205 floats; Adam (2 buffers) */
static rm_ckpt_meta g_meta;
static rm_model g_lay;
static rm_ckpt_units g_units;
static rm_model_tensor g_t[8]; /* its 6 named tensors */
static rm_ckpt_model g_model;

static int suite_init(void)
{
    g_dir = rm_test_tmpdir("ckshard");
    memset(&g_meta, 0, sizeof g_meta);
    int hidden[2] = {7, 5};
    rm_err e = {0};
    rm_mlp_shape(&g_meta.shape, 20, hidden, 2, 3, &e);
    rm_model_plan(&g_lay, &rm_model_mlp, &g_meta.shape, NULL);
    g_meta.nparams = g_lay.nparams;
    g_meta.opt_type = 1;
    g_meta.nstate = 2;
    g_meta.world_size = 4;
    g_meta.loss_scale = 1;
    g_meta.train_epoch = 3;
    g_meta.data_pos = 1280;
    g_meta.batch_per_worker = 64;
    g_meta.seed = 0xfedcba9876543211ULL; /* above 2^53: a JSON number would round it */
    g_units = (rm_ckpt_units){g_meta.shape.nlayers, g_lay.unit_off, g_lay.unit_len};
    int n = 0;
    for (int u = 0; u < g_lay.nunits; u++)
        n += rm_model_tensors(&g_lay, u, g_t + n, (int)RM_ARRAY_LEN(g_t) - n);
    g_model = (rm_ckpt_model){"mlp", g_t, n};
    return g_dir && n == 6 ? 0 : 1;
}
static int suite_clean(void)
{
    return rm_test_tmpdir_free(&g_dir);
}

/* The full vectors at step s: buffer b (0 params, 1-2 optimizer state), element i. */
static float val(int64_t step, int b, size_t i)
{
    return (float)step * 1000.0f + (float)b * 300.0f + (float)i;
}

/* Rank r of world W's compact shard at step s, written (wait 0 unless last). */
static int write_shard(int64_t step, int epoch, int W, int r, double wait_s, int keep, rm_err *e)
{
    rm_unit_shard us;
    CU_ASSERT_EQUAL_FATAL(rm_unit_shard_make(g_lay.unit_off, g_lay.unit_len, g_units.n, W, r, &us), 0);
    size_t T = us.total ? us.total : 0;
    float *buf = calloc(3 * T + 1, sizeof(float));
    for (int b = 0; b < 3; b++)
        for (int u = 0; u < us.nunits; u++)
            for (size_t k = 0; k < us.len[u]; k++)
                buf[(size_t)b * T + us.soff[u] + k] = val(step, b, us.off[u] + k);
    rm_ckpt_meta m = g_meta;
    m.step = step;
    m.opt_t = step;
    m.rdzv_epoch = epoch;
    m.world_size = W;
    m.shard_world = W;
    m.shard_rank = r;
    m.shard_floats = T;
    rm_ckpt_seg seg = {buf, 3 * T * sizeof(float)};
    char path[4200];
    int rc = rm_ckpt_shard_write(g_dir, &m, &g_units, g_model.n ? &g_model : NULL, &seg, 1, keep, wait_s,
                                 path, sizeof path, e);
    free(buf);
    return rc;
}

/* A whole set: ranks 0..W-2 do not wait (their sets are incomplete then), the last completes. */
static void write_set(int64_t step, int epoch, int W, int keep)
{
    for (int r = 0; r < W; r++) {
        rm_err e = {0};
        int rc = write_shard(step, epoch, W, r, r == W - 1 ? 5 : 0, keep, &e);
        CU_ASSERT_EQUAL(rc, r == W - 1 ? RM_OK : RM_ETIMEDOUT);
        if (r < W - 1)
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "missing"));
    }
}

/* Load for (nw, nr) and check every parameter and the planned optimizer pieces. */
static int64_t load_check(int nw, int nr, int64_t min_step, int *skipped, rm_err *e)
{
    size_t need = rm_ckpt_shard_dst_bytes(&g_units, 2, nw, nr);
    float *dst = calloc(need / sizeof(float) + 1, sizeof(float));
    rm_ckpt_meta meta;
    char path[4200];
    int rc = rm_ckpt_shard_load_newest(g_dir, &g_meta, &g_units, nw, nr, min_step, dst, need, &meta, path,
                                       sizeof path, skipped, e);
    int64_t step = -1;
    if (rc == RM_OK) {
        step = meta.step;
        CU_ASSERT_EQUAL(meta.shard_rank, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(path, "manifest-"));
        for (size_t i = 0; i < g_lay.nparams; i++)
            if (dst[i] != val(step, 0, i)) {
                CU_FAIL("a parameter differs");
                break;
            }
        rm_unit_shard us;
        rm_unit_shard_make(g_lay.unit_off, g_lay.unit_len, g_units.n, nw, nr, &us);
        for (int b = 1; b <= 2; b++)
            for (int u = 0; u < us.nunits; u++)
                for (size_t k = 0; k < us.len[u]; k++)
                    if (dst[g_lay.nparams + (size_t)(b - 1) * us.total + us.soff[u] + k] !=
                        val(step, b, us.off[u] + k)) {
                        CU_FAIL("an optimizer piece differs");
                        u = us.nunits;
                        b = 3;
                        break;
                    }
    }
    free(dst);
    return step;
}

static void test_reshard_any_world(void)
{
    rm_test_clear_dir(g_dir);
    write_set(100, 3, 4, 3);
    for (int nw = 1; nw <= 5; nw++)
        for (int nr = 0; nr < nw; nr++) {
            rm_err e = {0};
            int sk = -1;
            CU_ASSERT_EQUAL(load_check(nw, nr, -1, &sk, &e), 100);
            CU_ASSERT_EQUAL(sk, 0);
        }
    /* min_step: a whole checkpoint at or after the set wins (the driver loads it instead) */
    rm_err e = {0};
    CU_ASSERT_EQUAL(load_check(2, 0, 100, NULL, &e), -1);
    CU_ASSERT_EQUAL(load_check(2, 0, 99, NULL, &e), 100);
}

static void test_incomplete_set_ignored(void)
{
    rm_test_clear_dir(g_dir);
    write_set(100, 3, 4, 3);
    /* step 150: 3 of 4 shards (a rank died): no manifest, never loaded */
    for (int r = 0; r < 3; r++) {
        rm_err e = {0};
        CU_ASSERT_EQUAL(write_shard(150, 3, 4, r, 0.05, 3, &e), RM_ETIMEDOUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, r == 2 ? "(ranks 3)" : "3)"));
    }
    rm_err e = {0};
    int sk = -1;
    CU_ASSERT_EQUAL(load_check(2, 1, -1, &sk, &e), 100);
    CU_ASSERT_EQUAL(sk, 0);
}

static void corrupt(const char *name, long at)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void test_corrupt_or_missing_shard_falls_back(void)
{
    char name[128], p[4200];
    /* a flipped payload byte in shard 2 of the newest set */
    rm_test_clear_dir(g_dir);
    write_set(100, 3, 4, 3);
    write_set(200, 3, 4, 3);
    rm_ckpt_shard_name(name, sizeof name, 200, 3, 2, 4);
    corrupt(name, 600);
    rm_err e = {0};
    int sk = -1;
    CU_ASSERT_EQUAL(load_check(3, 2, -1, &sk, &e), 100);
    CU_ASSERT_EQUAL(sk, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "shard 2 of 4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, name));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "checksum"));
    /* a missing shard: the same, naming it */
    rm_test_clear_dir(g_dir);
    write_set(100, 3, 4, 3);
    write_set(200, 3, 4, 3);
    rm_ckpt_shard_name(name, sizeof name, 200, 3, 1, 4);
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    CU_ASSERT_EQUAL(unlink(p), 0);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(load_check(2, 0, -1, &sk, &e), 100);
    CU_ASSERT_EQUAL(sk, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "shard 1 of 4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, name));
    /* a corrupt manifest, and no older set: not found, the reason given */
    rm_test_clear_dir(g_dir);
    write_set(200, 3, 4, 3);
    /* a corrupt manifest: nothing newer is usable, and no older set: not found, reason given */
    rm_ckpt_manifest_name(name, sizeof name, 200, 3, 4);
    corrupt(name, 40);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(load_check(2, 0, -1, &sk, &e), -1);
    CU_ASSERT_EQUAL(sk, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "manifest checksum"));
}

static int count_files(const char *prefix)
{
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (!strncmp(de->d_name, prefix, strlen(prefix)))
            n++;
    if (d)
        closedir(d);
    return n;
}

static bool exists(const char *name)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return stat(p, &st) == 0;
}

static void test_retention_keeps_sets_together(void)
{
    rm_test_clear_dir(g_dir);
    write_set(100, 1, 4, 2);
    rm_err e = {0};
    CU_ASSERT_EQUAL(write_shard(150, 1, 4, 0, 0, 2, &e), RM_ETIMEDOUT); /* incomplete, older */
    write_set(200, 2, 3, 2);                                            /* another world (the group shrank) */
    write_set(300, 2, 3, 2);
    /* keep 2: sets 200 and 300 (3 shards each) stay; set 100 and the lone 150 shard go, the
     * set's JSON manifest with it */
    CU_ASSERT_EQUAL(count_files("manifest-"), 2);
    CU_ASSERT_EQUAL(count_files("index-manifest-"), 2);
    CU_ASSERT_EQUAL(count_files("shard-"), 6);
    char name[128];
    rm_ckpt_manifest_name(name, sizeof name, 100, 1, 4);
    CU_ASSERT_FALSE(exists(name));
    rm_ckpt_shard_name(name, sizeof name, 150, 1, 0, 4);
    CU_ASSERT_FALSE(exists(name));
    for (int r = 0; r < 3; r++) {
        rm_ckpt_shard_name(name, sizeof name, 200, 2, r, 3);
        CU_ASSERT_TRUE(exists(name));
    }
    /* a shard newer than the newest complete set is in progress: kept */
    CU_ASSERT_EQUAL(write_shard(400, 2, 3, 1, 0, 2, &e), RM_ETIMEDOUT);
    write_set(350, 2, 3, 2);
    rm_ckpt_shard_name(name, sizeof name, 400, 2, 1, 3);
    CU_ASSERT_TRUE(exists(name));
    CU_ASSERT_EQUAL(count_files("manifest-"), 2);
    CU_ASSERT_EQUAL(count_files("shard-"), 7);
    /* another model's set is never removed */
    rm_ckpt_meta save = g_meta;
    g_meta.opt_type = 2;
    write_set(10, 1, 2, 2);
    g_meta = save;
    write_set(500, 2, 3, 2);
    CU_ASSERT_EQUAL(count_files("manifest-"), 3);
    CU_ASSERT_EQUAL(count_files("index-manifest-"), 3);
    rm_ckpt_manifest_name(name, sizeof name, 10, 1, 2);
    CU_ASSERT_TRUE(exists(name));
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(load_check(4, 3, -1, NULL, &e), 500);
}

typedef struct {
    int rank;
    int rc;
} th_arg;
static void *rank_main(void *p)
{
    th_arg *a = p;
    rm_err e = {0};
    a->rc = write_shard(700, 5, 4, a->rank, 10, 3, &e);
    return NULL;
}

/* Ranks write concurrently, each waiting: every one returns complete; one manifest (and one JSON
 * manifest: only the rank that placed the .rmmf writes it). */
static void test_concurrent_ranks(void)
{
    rm_test_clear_dir(g_dir);
    pthread_t th[4];
    th_arg a[4];
    for (int r = 0; r < 4; r++) {
        a[r] = (th_arg){r, 99};
        pthread_create(&th[r], NULL, rank_main, &a[r]);
    }
    for (int r = 0; r < 4; r++) {
        pthread_join(th[r], NULL);
        CU_ASSERT_EQUAL(a[r].rc, RM_OK);
    }
    CU_ASSERT_EQUAL(count_files("manifest-"), 1);
    CU_ASSERT_EQUAL(count_files("index-manifest-"), 1);
    CU_ASSERT_EQUAL(count_files(".tmp-"), 0);
    rm_err e = {0};
    CU_ASSERT_EQUAL(load_check(3, 1, -1, NULL, &e), 700);
    /* the same shard name again is refused, never replaced */
    CU_ASSERT_EQUAL(write_shard(700, 5, 4, 1, 0, 3, &e), RM_ECONFLICT);
}

/* ---- ranged loads (pipeline stages keep only their layers: rm_ckpt_set_load_layers,
 * rm_ckpt_whole_load_layers) ---- */

/* Stage r of a stage-layout set (bounds, P stages) at step: its layers' params, then each
 * optimizer buffer's range. The last stage completes the set. */
static void stage_shard(const int *bounds, int P, int r, int64_t step, int epoch)
{
    size_t a = g_lay.unit_off[bounds[r]];
    size_t b = g_lay.unit_off[bounds[r + 1] - 1] + g_lay.unit_len[bounds[r + 1] - 1];
    size_t n = b - a;
    float *buf = calloc(3 * n, sizeof(float));
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n; i++)
            buf[(size_t)k * n + i] = val(step, k, a + i);
    rm_ckpt_meta m = g_meta;
    m.step = step;
    m.opt_t = step;
    m.rdzv_epoch = epoch;
    m.world_size = P;
    m.shard_world = P;
    m.shard_rank = r;
    m.shard_floats = n;
    rm_ckpt_seg seg = {buf, 3 * n * sizeof(float)};
    char path[4200];
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_ckpt_stage_write(g_dir, &m, &g_units, &g_model, bounds, &seg, 1, 5, r == P - 1 ? 5 : 0,
                                        path, sizeof path, &e),
                    r == P - 1 ? RM_OK : RM_ETIMEDOUT);
    free(buf);
}

static void stage_set(const int *bounds, int P, int64_t step, int epoch)
{
    for (int r = 0; r < P; r++)
        stage_shard(bounds, P, r, step, epoch);
}

/* A whole checkpoint (ckpt-*.rmck) at step: with model, as the trainer writes it (its manifest
 * last), else the old way; keep as rm_ckpt_write's. */
static void whole_ckpt_with(int64_t step, const rm_ckpt_model *model, int keep)
{
    size_t T = g_lay.nparams;
    float *buf = malloc(3 * T * sizeof(float));
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < T; i++)
            buf[(size_t)k * T + i] = val(step, k, i);
    rm_ckpt_meta m = g_meta;
    m.step = step;
    m.opt_t = step;
    m.world_size = 1;
    rm_ckpt_seg seg = {buf, 3 * T * sizeof(float)};
    rm_err e = {0};
    char path[4200];
    CU_ASSERT_EQUAL(rm_ckpt_write(g_dir, &m, &seg, 1, keep, path, sizeof path, &e), RM_OK);
    if (model)
        CU_ASSERT_EQUAL(rm_ckpt_manifest_write_whole(path, &m, model, &e), RM_OK);
    free(buf);
}

static void whole_ckpt(int64_t step)
{
    whole_ckpt_with(step, &g_model, 5);
}

/* Load layers [u0, u1) (from a set, or whole: a ckpt-*.rmck) into a buffer of exactly the range's
 * size (ASan: nothing past it is written) and check every float; returns the step, -1 none. */
static int64_t layers_check(bool whole, int u0, int u1, int *skipped, rm_err *e)
{
    size_t need = rm_ckpt_layers_bytes(&g_units, 2, u0, u1);
    size_t a = g_lay.unit_off[u0], n = g_lay.unit_off[u1 - 1] + g_lay.unit_len[u1 - 1] - a;
    CU_ASSERT_EQUAL_FATAL(need, 3 * n * sizeof(float));
    float *dst = malloc(need);
    rm_ckpt_meta meta;
    char path[4200];
    int rc = whole ? rm_ckpt_whole_load_layers(g_dir, &g_meta, &g_units, u0, u1, dst, need, &meta, path,
                                               sizeof path, skipped, e)
                   : rm_ckpt_set_load_layers(g_dir, &g_meta, &g_units, u0, u1, -1, dst, need, &meta, path,
                                             sizeof path, skipped, e);
    int64_t step = -1;
    if (rc == RM_OK) {
        step = meta.step;
        CU_ASSERT_EQUAL(meta.opt_t, step);
        bool ok = true;
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < n; i++)
                ok = ok && dst[(size_t)k * n + i] == val(step, k, a + i);
        CU_ASSERT(ok);
    }
    free(dst);
    return step;
}

/* Every layout a stage may resume from (a balanced set, stage sets of P = 1, 2, 3 with either
 * split, a whole file) x every layer range: exactly the range's parameters and optimizer ranges;
 * a range spanning pieces of several old stages reads just those. */
static void test_layers_any_layout(void)
{
    static const int b1[] = {0, 3}, b2a[] = {0, 1, 3}, b2b[] = {0, 2, 3}, b3[] = {0, 1, 2, 3};
    static const struct {
        const int *b;
        int P;
    } lay[] = {{NULL, 4}, {b1, 1}, {b2a, 2}, {b2b, 2}, {b3, 3}};
    static const int rng[][2] = {{0, 1}, {1, 2}, {2, 3}, {0, 2}, {1, 3}, {0, 3}};
    for (size_t l = 0; l < RM_ARRAY_LEN(lay); l++) {
        rm_test_clear_dir(g_dir);
        if (lay[l].b)
            stage_set(lay[l].b, lay[l].P, 100 + (int64_t)l, 1);
        else
            write_set(100 + (int64_t)l, 1, lay[l].P, 3);
        for (size_t r = 0; r < RM_ARRAY_LEN(rng); r++) {
            rm_err e = {0};
            int sk = -1;
            CU_ASSERT_EQUAL(layers_check(false, rng[r][0], rng[r][1], &sk, &e), 100 + (int64_t)l);
            CU_ASSERT_EQUAL(sk, 0);
        }
    }
    rm_test_clear_dir(g_dir);
    whole_ckpt(40);
    for (size_t r = 0; r < RM_ARRAY_LEN(rng); r++) {
        rm_err e = {0};
        CU_ASSERT_EQUAL(layers_check(true, rng[r][0], rng[r][1], NULL, &e), 40);
    }
    /* no set: not found; a bad range or a short buffer: refused */
    rm_err e = {0};
    CU_ASSERT_EQUAL(layers_check(false, 0, 1, NULL, &e), -1);
    float small[8];
    rm_ckpt_meta meta;
    CU_ASSERT_EQUAL(rm_ckpt_set_load_layers(g_dir, &g_meta, &g_units, 1, 1, -1, small, sizeof small, &meta,
                                            NULL, 0, NULL, &e),
                    RM_EINVAL);
    CU_ASSERT_EQUAL(rm_ckpt_set_load_layers(g_dir, &g_meta, &g_units, 2, 4, -1, small, sizeof small, &meta,
                                            NULL, 0, NULL, &e),
                    RM_EINVAL);
    CU_ASSERT_EQUAL(rm_ckpt_whole_load_layers(g_dir, &g_meta, &g_units, 2, 3, small, sizeof small, &meta,
                                              NULL, 0, NULL, &e),
                    RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "too small"));
    CU_ASSERT_EQUAL(rm_ckpt_layers_bytes(&g_units, 2, 0, 0), 0);
}

/* What a ranged load still verifies: everything a whole load does. A corrupt, truncated or missing
 * shard OUTSIDE the stage's layers still skips the set (chosen so that every stage of the pipeline
 * falls back to the same step: a stage that loaded the newest set while its neighbours, whose
 * shards are the bad ones, fell back would restore a mixed model), as does a bad manifest or a bad
 * shard inside the range; the older complete set is loaded instead, the reason naming the file.
 * What it need not do: keep (or allocate room for) any byte outside the range. */
static void test_layers_corrupt_outside_range_falls_back(void)
{
    static const int b3[] = {0, 1, 2, 3}, b2[] = {0, 1, 3};
    enum { FLIP_OUT, FLIP_IN, TRUNC_OUT, MISSING_OUT, MANIFEST };
    static const struct {
        int what, shard;
        const char *why;
    } cases[] = {
        {FLIP_OUT, 2, "checksum"},        {FLIP_IN, 0, "checksum"},           {TRUNC_OUT, 1, "truncated"},
        {MISSING_OUT, 2, "shard 2 of 3"}, {MANIFEST, 0, "manifest checksum"},
    };
    for (size_t c = 0; c < RM_ARRAY_LEN(cases); c++) {
        rm_test_clear_dir(g_dir);
        stage_set(b2, 2, 100, 1); /* the older set: another P */
        stage_set(b3, 3, 200, 2);
        char name[128], p[4200];
        rm_ckpt_shard_name(name, sizeof name, 200, 2, cases[c].shard, 3);
        snprintf(p, sizeof p, "%s/%s", g_dir, name);
        switch (cases[c].what) {
        case FLIP_OUT:
        case FLIP_IN:
            corrupt(name, 600); /* a payload byte */
            break;
        case TRUNC_OUT:
            CU_ASSERT_EQUAL(truncate(p, 700), 0);
            break;
        case MISSING_OUT:
            CU_ASSERT_EQUAL(unlink(p), 0);
            break;
        default:
            rm_ckpt_manifest_name(name, sizeof name, 200, 2, 3);
            corrupt(name, 40);
        }
        rm_err e = {0};
        int sk = -1;
        CU_ASSERT_EQUAL(layers_check(false, 0, 1, &sk, &e), 100); /* stage 0 of the new P = 2 */
        CU_ASSERT_EQUAL(sk, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, cases[c].why));
        if (cases[c].what != MANIFEST)
            CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, name));
        /* the uncorrupted set loads for every range when it is the newest one */
    }
    /* whole files: a corrupt newest one falls back to the older file */
    rm_test_clear_dir(g_dir);
    whole_ckpt(10);
    whole_ckpt(20);
    char name[128];
    snprintf(name, sizeof name, "ckpt-%012d.rmck", 20);
    corrupt(name, 600);
    rm_err e = {0};
    int sk = -1;
    CU_ASSERT_EQUAL(layers_check(true, 2, 3, &sk, &e), 10);
    CU_ASSERT_EQUAL(sk, 1);
}

/* The streamed read across its 1 MiB chunks: a model of 4.5 MB (Adam), layer 1 (1.4 MB, starting
 * mid-chunk) of each buffer lands whole; a range outside the payload is refused before any copy. */
static void test_read_ranges_across_chunks(void)
{
    rm_test_clear_dir(g_dir);
    rm_ckpt_meta m;
    memset(&m, 0, sizeof m);
    int hidden[2] = {600, 600};
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&m.shape, 20, hidden, 2, 3, &e), RM_OK);
    rm_model lay;
    rm_model_plan(&lay, &rm_model_mlp, &m.shape, NULL);
    m.nparams = lay.nparams;
    m.opt_type = 1;
    m.nstate = 2;
    m.world_size = 1;
    m.loss_scale = 1;
    m.step = 7;
    size_t T = lay.nparams;
    float *buf = malloc(3 * T * sizeof(float));
    for (size_t i = 0; i < 3 * T; i++)
        buf[i] = (float)(i % 1000003);
    rm_ckpt_seg seg = {buf, 3 * T * sizeof(float)};
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_write(g_dir, &m, &seg, 1, 5, NULL, 0, &e), RM_OK);
    rm_ckpt_units u = {m.shape.nlayers, lay.unit_off, lay.unit_len};
    size_t need = rm_ckpt_layers_bytes(&u, 2, 1, 2), n = lay.unit_len[1], a = lay.unit_off[1];
    CU_ASSERT_TRUE(n * sizeof(float) > (1u << 20));
    float *dst = malloc(need);
    rm_ckpt_meta got;
    CU_ASSERT_EQUAL(rm_ckpt_whole_load_layers(g_dir, &m, &u, 1, 2, dst, need, &got, NULL, 0, NULL, &e),
                    RM_OK);
    bool ok = true;
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n; i++)
            ok = ok && dst[(size_t)k * n + i] == buf[(size_t)k * T + a + i];
    CU_ASSERT(ok);
    char p[4200];
    snprintf(p, sizeof p, "%s/ckpt-%012d.rmck", g_dir, 7);
    rm_ckpt_range out = {.src = 3 * T * sizeof(float) - 4, .len = 8, .dst = 0};
    memset(dst, 0, need);
    CU_ASSERT_EQUAL(rm_ckpt_read_ranges(p, &m, &out, 1, dst, need, &got, NULL, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "outside"));
    CU_ASSERT_EQUAL(dst[0], 0.0f);
    free(dst);
    free(buf);
}

/* ---- the JSON manifest (suite "manifest") ---- */

static void jpath(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", g_dir, name);
}

/* Read DIR/name (its path into path, 4200 bytes) into m. */
static int read_json(const char *name, char *path, rm_ckpt_manifest *m)
{
    rm_err e = {0};
    jpath(path, 4200, name);
    int rc = rm_ckpt_manifest_read(path, m, &e);
    if (rc)
        fprintf(stderr, "%s\n", e.msg);
    return rc;
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

static void test_mf_whole(void)
{
    rm_test_clear_dir(g_dir);
    char path[4200], jp[4200];
    whole_ckpt(100);
    jpath(path, sizeof path, "ckpt-000000000100.rmck");
    rm_ckpt_manifest m;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(read_json("index-ckpt-000000000100.json", jp, &m), RM_OK);
    CU_ASSERT_EQUAL(m.version, RM_CKPT_MF_VERSION);
    CU_ASSERT_STRING_EQUAL(m.kind, "whole");
    CU_ASSERT_STRING_EQUAL(m.family, "mlp");
    CU_ASSERT_EQUAL(m.shape.nlayers, g_meta.shape.nlayers);
    CU_ASSERT_EQUAL(memcmp(m.shape.dims, g_meta.shape.dims, sizeof(int) * 4), 0);
    CU_ASSERT_EQUAL(m.nparams, 205);
    CU_ASSERT_EQUAL(m.step, 100);
    CU_ASSERT_EQUAL(m.opt_type, 1);
    CU_ASSERT_EQUAL(m.nstate, 2);
    CU_ASSERT_EQUAL(m.opt_t, 100);
    CU_ASSERT_EQUAL(m.train_epoch, 3);
    CU_ASSERT_EQUAL(m.data_pos, 1280);
    CU_ASSERT_EQUAL(m.seed, 0xfedcba9876543211ULL);
    CU_ASSERT_EQUAL(m.world_size, 1);
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
    CU_ASSERT(assembles(&m, 100, 160)); /* across tensors and units */
    CU_ASSERT(assembles(&m, 204, 205));
    { /* a transformer's shape: five words whatever its layer count, all kept */
        rm_ckpt_manifest g = m, back;
        memset(g.shape.dims, 0, sizeof g.shape.dims);
        g.shape.nlayers = 4;
        int w[5] = {RM_GPT_SHAPE_TAG, 256, 64, 128, 4};
        memcpy(g.shape.dims, w, sizeof w);
        char *gt = NULL;
        size_t gn = 0;
        CU_ASSERT_EQUAL_FATAL(rm_ckpt_manifest_encode(&g, &gt, &gn, &e), RM_OK);
        CU_ASSERT_EQUAL_FATAL(rm_ckpt_manifest_parse("G.json", gt, gn, &back, &e), RM_OK);
        CU_ASSERT_EQUAL(back.shape.nlayers, 4);
        CU_ASSERT_EQUAL(memcmp(back.shape.dims, g.shape.dims, sizeof back.shape.dims), 0);
        rm_ckpt_manifest_free(&back);
        free(gt);
    }
    rm_ckpt_manifest_free(&m);
}

/* The assembler reads only the files a range needs and verifies each: m is the manifest of the
 * balanced set at step 200 (epoch 2, world 3). */
static void mf_files_verified(const rm_ckpt_manifest *m)
{
    rm_err e = {0};
    size_t need = 3 * 205 * sizeof(float);
    float *dst = calloc(3 * 205, sizeof(float));
    /* a range, and a destination, that do not fit */
    CU_ASSERT_EQUAL(rm_ckpt_manifest_assemble(g_dir, m, NULL, 10, 206, dst, need, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_assemble(g_dir, m, NULL, 0, 205, dst, need - 4, &e), RM_EINVAL);
    /* a flipped payload byte in shard 2: caught by its checksum, the message names the file */
    corrupt("shard-000000000200-2-2-of-3.rmck", RM_CKPT_HDR_BYTES + 9);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_assemble(g_dir, m, NULL, 0, 205, dst, need, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "shard-000000000200-2-2-of-3.rmck"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "checksum"));
    /* a range no piece of shard 2 lies in does not need it (rank 0's piece of layer 0) */
    CU_ASSERT(assembles(m, 0, 10));
    /* shard 1 replaced by a valid file with other values: its checksum is not the listed one */
    char sp[4200];
    jpath(sp, sizeof sp, "shard-000000000200-2-1-of-3.rmck");
    rm_ckpt_meta hm;
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_read(sp, NULL, &hm, dst, need, &e), RM_OK);
    dst[0] += 1;
    rm_ckpt_seg seg = {dst, 3 * hm.shard_floats * sizeof(float)};
    CU_ASSERT_EQUAL(unlink(sp), 0);
    CU_ASSERT_EQUAL_FATAL(
        rm_ckpt_write_named(g_dir, "shard-000000000200-2-1-of-3.rmck", &hm, &seg, 1, NULL, 0, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_ckpt_manifest_assemble(g_dir, m, NULL, 50, 60, dst, need, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "shard-000000000200-2-1-of-3.rmck: does not match the manifest"));
    free(dst);
}

static void test_mf_sharded_set(void)
{
    rm_test_clear_dir(g_dir);
    write_set(200, 2, 3, 5);
    char jp[4200];
    rm_ckpt_manifest m;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(read_json("index-manifest-000000000200-2-3.json", jp, &m), RM_OK);
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
    CU_ASSERT_EQUAL(
        rm_ckpt_shard_load_newest(g_dir, &g_meta, &g_units, 1, 0, -1, dst, need, &got, NULL, 0, NULL, &e),
        RM_OK);
    CU_ASSERT_EQUAL(dst[204], val(200, 0, 204));
    free(dst);
    mf_files_verified(&m);
    rm_ckpt_manifest_free(&m);
}

static void test_mf_stage_set(void)
{
    rm_test_clear_dir(g_dir);
    static const int bounds[] = {0, 1, 3};
    stage_set(bounds, 2, 300, 2);
    char jp[4200];
    rm_ckpt_manifest m;
    CU_ASSERT_EQUAL_FATAL(read_json("index-manifest-000000000300-2-2.json", jp, &m), RM_OK);
    CU_ASSERT_STRING_EQUAL(m.kind, "stages");
    CU_ASSERT_EQUAL_FATAL(m.nfiles, 2);
    /* layer 0 whole in stage 0's file, layers 1-2 whole in stage 1's (layers.1.weight first) */
    for (int i = 0; i < m.ntensors; i++) {
        CU_ASSERT_EQUAL(m.tensors[i].npieces, 1);
        CU_ASSERT_EQUAL(m.pieces[m.tensors[i].first].file, m.tensors[i].offset < 147 ? 0 : 1);
    }
    CU_ASSERT_EQUAL(m.pieces[m.tensors[2].first].offset, RM_CKPT_HDR_BYTES);
    CU_ASSERT_EQUAL(m.pieces[m.tensors[8].first].offset, RM_CKPT_HDR_BYTES + 58 * 4); /* state0 */
    CU_ASSERT(round_trips(jp, &m));
    CU_ASSERT(assembles(&m, 0, 205));
    CU_ASSERT(assembles(&m, 100, 150)); /* from inside a piece, across the stage boundary */
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

static cJSON *item(cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}
static cJSON *piece0(cJSON *root, int t)
{
    return cJSON_GetArrayItem(item(cJSON_GetArrayItem(item(root, "tensors"), t), "pieces"), 0);
}
static void m_version(cJSON *r)
{
    cJSON_SetNumberValue(item(r, "version"), 2);
}
static void m_format(cJSON *r)
{
    cJSON_ReplaceItemInObject(r, "format", cJSON_CreateString("safetensors"));
}
static void m_end(cJSON *r)
{
    cJSON_SetNumberValue(item(piece0(r, 1), "end"), 9999);
}
static void m_gap(cJSON *r)
{
    cJSON_SetNumberValue(item(piece0(r, 0), "end"), 100);
}
static void m_file(cJSON *r)
{
    cJSON_ReplaceItemInObject(piece0(r, 2), "file", cJSON_CreateString("other.rmck"));
}
static void m_seed(cJSON *r)
{
    cJSON_DeleteItemFromObject(item(r, "data"), "seed");
}
static void m_order(cJSON *r)
{
    cJSON_SetNumberValue(item(cJSON_GetArrayItem(item(r, "tensors"), 1), "offset"), 0);
}
static void m_name(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(item(r, "tensors"), 6), "name",
                              cJSON_CreateString("layers.0.weight"));
}
static void m_shape(cJSON *r)
{
    cJSON_SetNumberValue(cJSON_GetArrayItem(item(item(r, "model"), "shape"), 1), 1e12);
}
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

static void test_mf_refused(void)
{
    rm_test_clear_dir(g_dir);
    char jp[4200];
    whole_ckpt(100);
    whole_ckpt(200);
    jpath(jp, sizeof jp, "index-ckpt-000000000200.json");
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
        {m_shape, RM_EINVAL, "model.shape", "word 1 is not an integer"},
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
    CU_ASSERT_EQUAL_FATAL(read_json("index-ckpt-000000000100.json", old, &m), RM_OK);
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
    jpath(jp, sizeof jp, "index-ckpt-000000000300.json");
    CU_ASSERT_EQUAL(rm_ckpt_manifest_read(jp, &m, &e), RM_ENOTFOUND);
    free(text);
}

/* A checkpoint written the old way (no manifest): loads exactly as before, and a manifest read
 * says there is none. */
static void test_mf_old_checkpoint_loads(void)
{
    rm_test_clear_dir(g_dir);
    char jp[4200];
    whole_ckpt_with(100, NULL, 5);
    jpath(jp, sizeof jp, "index-ckpt-000000000100.json");
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(jp, &st), 0);
    float *dst = calloc(3 * 205, sizeof(float));
    rm_ckpt_meta got;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_ckpt_load_newest(g_dir, &g_meta, &got, dst, 3 * 205 * 4, NULL, 0, NULL, &e), RM_OK);
    CU_ASSERT_EQUAL(got.step, 100);
    CU_ASSERT_EQUAL(got.data_pos, 1280);
    CU_ASSERT_EQUAL(got.opt_t, 100);
    bool same = true;
    for (int b = 0; b < 3; b++)
        for (size_t i = 0; i < 205; i++)
            same = same && dst[(size_t)b * 205 + i] == val(100, b, i);
    CU_ASSERT(same);
    free(dst);
    rm_ckpt_manifest m;
    CU_ASSERT_EQUAL(rm_ckpt_manifest_read(jp, &m, &e), RM_ENOTFOUND);
    /* a set written the old way (no tensors handed to the writer): no JSON, and it loads */
    rm_ckpt_model save = g_model;
    g_model.n = 0;
    write_set(150, 2, 2, 5);
    g_model = save;
    CU_ASSERT_EQUAL(count_files("index-"), 0);
    CU_ASSERT_EQUAL(load_check(1, 0, -1, NULL, &e), 150);
}

/* Pruning removes a manifest with the checkpoint it describes, never one of a kept checkpoint;
 * a stale manifest under a new file's name (its file gone) is replaced. */
static void test_mf_pruned_with_files(void)
{
    rm_test_clear_dir(g_dir);
    char jp[4200];
    struct stat st;
    jpath(jp, sizeof jp, "index-ckpt-000000000300.json");
    CU_ASSERT_EQUAL(rm_test_write_file(jp, "{}", 2), 0);
    for (int s = 1; s <= 3; s++)
        whole_ckpt_with(100 * s, &g_model, 2);
    jpath(jp, sizeof jp, "index-ckpt-000000000100.json");
    CU_ASSERT_NOT_EQUAL(stat(jp, &st), 0);
    jpath(jp, sizeof jp, "index-ckpt-000000000200.json");
    CU_ASSERT_EQUAL(stat(jp, &st), 0);
    rm_ckpt_manifest m;
    CU_ASSERT_EQUAL(read_json("index-ckpt-000000000300.json", jp, &m), RM_OK);
    CU_ASSERT_EQUAL(m.step, 300);
    rm_ckpt_manifest_free(&m);
    /* sets (keep 1): the older set's JSON manifest goes with its .rmmf and shards */
    write_set(400, 2, 2, 1);
    write_set(500, 2, 2, 1);
    jpath(jp, sizeof jp, "index-manifest-000000000400-2-2.json");
    CU_ASSERT_NOT_EQUAL(stat(jp, &st), 0);
    jpath(jp, sizeof jp, "index-manifest-000000000500-2-2.json");
    CU_ASSERT_EQUAL(stat(jp, &st), 0);
}

/* The builder refuses files that do not hold every float exactly once, and tensors that do not
 * tile the parameters. */
static void test_mf_build_checks_coverage(void)
{
    rm_ckpt_meta meta = g_meta;
    rm_ckpt_span all = {0, 205, 0}, part = {0, 200, 0};
    rm_ckpt_file_map twice[2] = {{"a.rmck", 0, 205, 1, &all}, {"b.rmck", 0, 205, 1, &all}};
    rm_ckpt_file_map hole = {"a.rmck", 0, 205, 1, &part};
    rm_ckpt_manifest m;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_ckpt_manifest_build(&meta, "whole", &g_model, twice, 2, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "exactly once"));
    CU_ASSERT_EQUAL(rm_ckpt_manifest_build(&meta, "whole", &g_model, &hole, 1, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "tensor layers.2.weight")); /* its last 2 floats */
    rm_ckpt_model fewer = {"mlp", g_t, 5};
    CU_ASSERT_EQUAL(rm_ckpt_manifest_build(&meta, "whole", &fewer, &hole, 1, &m, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "cover 202 of 205"));
    CU_ASSERT_EQUAL(rm_ckpt_manifest_build(&meta, "whole", &g_model, twice, 1, &m, &e), RM_OK);
    rm_ckpt_manifest_free(&m);
}

/* ---- pieces sets (tensor parallelism: rm_ckpt_pieces_write) ---- */

/* Two tensor ranks' pieces of the 3-layer model: layer 0 split by columns (rank 0 columns [0, 4)
 * of 7, rank 1 [4, 7): 20 rows each, and their bias parts), layers 1 and 2 replicated (rank 0's
 * recorded, rank 1 holds a copy no run lists). */
static const rm_ckpt_run k_runs[] = {
    {.shard = 0, .rows = 20, .local = 0, .lstride = 4, .whole = 0, .wstride = 7, .len = 4},
    {.shard = 0, .rows = 1, .local = 80, .lstride = 4, .whole = 140, .wstride = 4, .len = 4},
    {.shard = 0, .rows = 1, .local = 84, .lstride = 58, .whole = 147, .wstride = 58, .len = 58},
    {.shard = 1, .rows = 20, .local = 0, .lstride = 3, .whole = 4, .wstride = 7, .len = 3},
    {.shard = 1, .rows = 1, .local = 60, .lstride = 3, .whole = 144, .wstride = 3, .len = 3},
};
static const uint64_t k_floats[2] = {142, 121};

/* Shard r of a pieces set at step: every float its runs list holds the whole vectors' value, the
 * rest (a replicated copy) -1; runs/n what goes in the manifest. */
static int pieces_shard(int r, int64_t step, const rm_ckpt_run *runs, int n, double wait_s, rm_err *e)
{
    uint64_t T = k_floats[r];
    float *buf = malloc(3 * T * sizeof(float));
    for (uint64_t i = 0; i < 3 * T; i++)
        buf[i] = -1;
    for (int i = 0; i < (int)RM_ARRAY_LEN(k_runs); i++) {
        const rm_ckpt_run *x = &k_runs[i];
        for (int b = 0; b < 3 && x->shard == r; b++)
            for (uint32_t row = 0; row < x->rows; row++)
                for (uint64_t j = 0; j < x->len; j++)
                    buf[b * T + x->local + row * x->lstride + j] =
                        val(step, b, x->whole + row * x->wstride + j);
    }
    rm_ckpt_meta m = g_meta;
    m.step = step;
    m.opt_t = step;
    m.rdzv_epoch = 1;
    m.world_size = 2;
    m.shard_world = 2;
    m.shard_rank = r;
    m.shard_floats = T;
    rm_ckpt_seg seg = {buf, 3 * T * sizeof(float)};
    char path[4200];
    int rc = rm_ckpt_pieces_write(g_dir, &m, &g_units, &g_model, runs, n, &seg, 1, 5, wait_s, path,
                                  sizeof path, e);
    free(buf);
    return rc;
}

/* The .rmmf text of the pieces set at step (epoch 1, 2 shards), its path in mpath; NULL if none. */
static char *set_manifest(int64_t step, char *mpath, size_t cap)
{
    char mname[128];
    rm_ckpt_manifest_name(mname, sizeof mname, step, 1, 2);
    snprintf(mpath, cap, "%s/%s", g_dir, mname);
    size_t len = 0;
    return rm_test_read_file(mpath, &len);
}

/* A pieces set assembles the whole payload from its runs: re-sharded to any world (every parameter,
 * the planned optimizer pieces) and cut to any layer range, exactly the values written; the rest
 * of a shard (a replicated copy) is never read. */
static void test_pieces_round_trip(void)
{
    rm_test_clear_dir(g_dir);
    rm_err e = {0};
    int n = (int)RM_ARRAY_LEN(k_runs);
    CU_ASSERT_EQUAL(pieces_shard(0, 70, k_runs, n, 0, &e), RM_ETIMEDOUT);
    CU_ASSERT_EQUAL(pieces_shard(1, 70, k_runs, n, 5, &e), RM_OK);
    for (int nw = 1; nw <= 3; nw++)
        for (int nr = 0; nr < nw; nr++) {
            int skipped = -1;
            CU_ASSERT_EQUAL(load_check(nw, nr, -1, &skipped, &e), 70);
            CU_ASSERT_EQUAL(skipped, 0);
        }
    for (int u0 = 0; u0 < 3; u0++)
        for (int u1 = u0 + 1; u1 <= 3; u1++) {
            int skipped = -1;
            CU_ASSERT_EQUAL(layers_check(false, u0, u1, &skipped, &e), 70);
        }
    char mpath[4400];
    char *text = set_manifest(70, mpath, sizeof mpath);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\npieces 5\nrun 0 0 4 0 7 20 4\n"));
    free(text);
    /* the JSON manifest names the same pieces: layer 0's weight in 20 rows of each rank's columns */
    char jp[4200];
    rm_ckpt_manifest m;
    CU_ASSERT_EQUAL_FATAL(read_json("index-manifest-000000000070-1-2.json", jp, &m), RM_OK);
    CU_ASSERT_STRING_EQUAL(m.kind, "pieces");
    CU_ASSERT_EQUAL(m.nfiles, 2);
    CU_ASSERT_EQUAL(m.tensors[0].npieces, 40);
    CU_ASSERT(round_trips(jp, &m));
    CU_ASSERT(assembles(&m, 0, 205));
    rm_ckpt_manifest_free(&m);
}

/* Runs that overlap or leave a parameter uncovered are refused at write (no manifest: the set
 * never completes), and a manifest whose runs were changed under a valid checksum is skipped,
 * naming the fault. */
static void test_pieces_bad_runs(void)
{
    rm_test_clear_dir(g_dir);
    rm_err e = {0};
    rm_ckpt_run bad[RM_ARRAY_LEN(k_runs)];
    memcpy(bad, k_runs, sizeof bad);
    bad[3].whole = 3; /* rank 1's columns start one early: overlaps rank 0's, and column 6 is bare */
    CU_ASSERT_EQUAL(pieces_shard(0, 80, bad, 5, 0, &e), RM_ETIMEDOUT);
    CU_ASSERT_EQUAL(pieces_shard(1, 80, bad, 5, 5, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "runs overlap"));
    memcpy(bad, k_runs, sizeof bad);
    CU_ASSERT_EQUAL(pieces_shard(1, 81, bad, 4, 0, &e), RM_ETIMEDOUT); /* rank 1's bias missing */
    CU_ASSERT_EQUAL(pieces_shard(0, 81, bad, 4, 5, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "a parameter no run covers"));
    int skipped = -1;
    CU_ASSERT_EQUAL(load_check(1, 0, -1, &skipped, &e), -1);
    /* a good set, then its manifest's first run moved past the parameters, its checksum redone */
    CU_ASSERT_EQUAL(pieces_shard(0, 90, k_runs, 5, 0, &e), RM_ETIMEDOUT);
    CU_ASSERT_EQUAL(pieces_shard(1, 90, k_runs, 5, 5, &e), RM_OK);
    char mpath[4400];
    char *text = set_manifest(90, mpath, sizeof mpath);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    char *run = strstr(text, "\nrun 0 84 58 147 58 1 58\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(run);
    memcpy(run + 1, "run 0 84 58 148 58 1 58", 23); /* one float past the end, same length */
    char *end = strstr(text, "\nend ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(end);
    size_t body = (size_t)(end - text) + 1;
    char tail[32];
    snprintf(tail, sizeof tail, "end %08lx\n", crc32(0L, (const unsigned char *)text, (uInt)body));
    memcpy(text + body, tail, strlen(tail));
    CU_ASSERT_EQUAL(rm_test_write_file(mpath, text, body + strlen(tail)), 0);
    free(text);
    e = (rm_err){0};
    CU_ASSERT_EQUAL(load_check(1, 0, -1, &skipped, &e), -1);
    CU_ASSERT_EQUAL(skipped, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "pieces layout: a run outside its shard or the parameters (run 2)"));
}

/* rm_ckpt_run_clip against a brute-force map: for runs of every small shape and every range
 * [lo, hi) of the shard's vector, the clipped runs (at most 3, each well-formed) map exactly the
 * floats of the run inside the range, shifted by lo, to the same places in the model. */
static void test_pieces_run_clip(void)
{
    enum { VEC = 64 };
    int64_t want[VEC], got[VEC];
    int cases = 0, bad = 0;
    for (uint32_t rows = 1; rows <= 4; rows++)
        for (uint64_t len = 1; len <= 3; len++)
            for (uint64_t ls = len; ls <= len + 2; ls++)
                for (uint64_t local = 0; local <= 3; local++) {
                    rm_ckpt_run x = {.shard = 5,
                                     .rows = rows,
                                     .local = local,
                                     .lstride = rows > 1 ? ls : len,
                                     .whole = 7,
                                     .wstride = rows > 1 ? len + 3 : len,
                                     .len = len};
                    uint64_t end = local + (rows - 1) * x.lstride + len;
                    for (uint64_t lo = 0; lo <= end; lo++)
                        for (uint64_t hi = lo + 1; hi <= end + 1; hi++) {
                            for (int i = 0; i < VEC; i++)
                                want[i] = got[i] = -1;
                            for (uint32_t r = 0; r < rows; r++)
                                for (uint64_t j = 0; j < len; j++) {
                                    uint64_t l = local + r * x.lstride + j;
                                    if (l >= lo && l < hi)
                                        want[l - lo] = (int64_t)(x.whole + r * x.wstride + j);
                                }
                            rm_ckpt_run out[3];
                            int n = rm_ckpt_run_clip(&x, lo, hi, 9, out);
                            bool ok = n >= 0 && n <= 3;
                            for (int k = 0; ok && k < n; k++) {
                                const rm_ckpt_run *y = &out[k];
                                ok = y->shard == 9 && y->rows >= 1 && y->len >= 1 &&
                                     (y->rows == 1 || (y->lstride >= y->len && y->wstride >= y->len));
                                for (uint32_t r = 0; ok && r < y->rows; r++)
                                    for (uint64_t j = 0; ok && j < y->len; j++) {
                                        uint64_t l = y->local + r * y->lstride + j;
                                        ok = l < hi - lo && got[l] == -1;
                                        if (ok)
                                            got[l] = (int64_t)(y->whole + r * y->wstride + j);
                                    }
                            }
                            ok = ok && memcmp(want, got, sizeof want) == 0;
                            bad += !ok;
                            cases++;
                        }
                }
    CU_ASSERT(cases > 1000);
    CU_ASSERT_EQUAL(bad, 0);
    /* no overlap: nothing; a range past the run: nothing */
    rm_ckpt_run x = {.shard = 0, .rows = 3, .local = 10, .lstride = 5, .whole = 0, .wstride = 4, .len = 4};
    rm_ckpt_run out[3];
    CU_ASSERT_EQUAL(rm_ckpt_run_clip(&x, 0, 10, 0, out), 0);
    CU_ASSERT_EQUAL(rm_ckpt_run_clip(&x, 24, 40, 0, out), 0);
    CU_ASSERT_EQUAL(rm_ckpt_run_clip(&x, 14, 15, 0, out), 0); /* the gap between rows 0 and 1 */
    rm_ckpt_run bx = x;
    bx.lstride = 3; /* rows overlap */
    CU_ASSERT_EQUAL(rm_ckpt_run_clip(&bx, 0, 40, 0, out), -1);
    bx = x;
    bx.len = 0;
    CU_ASSERT_EQUAL(rm_ckpt_run_clip(&bx, 0, 40, 0, out), -1);
}

void rm_suite_ckpt_shard(void);
void rm_suite_ckpt_shard(void)
{
    static const rm_test_case cases[] = {
        {"reshard_any_world", test_reshard_any_world},
        {"incomplete_set_ignored", test_incomplete_set_ignored},
        {"corrupt_or_missing_shard_falls_back", test_corrupt_or_missing_shard_falls_back},
        {"retention_keeps_sets_together", test_retention_keeps_sets_together},
        {"concurrent_ranks", test_concurrent_ranks},
        {"layers_any_layout", test_layers_any_layout},
        {"layers_corrupt_outside_range_falls_back", test_layers_corrupt_outside_range_falls_back},
        {"read_ranges_across_chunks", test_read_ranges_across_chunks},
        {"pieces_round_trip", test_pieces_round_trip},
        {"pieces_bad_runs", test_pieces_bad_runs},
        {"pieces_run_clip", test_pieces_run_clip},
    };
    RM_ADD_SUITE("ckpt_shard", suite_init, suite_clean, cases);
    static const rm_test_case mf_cases[] = {
        {"whole", test_mf_whole},
        {"sharded_set", test_mf_sharded_set},
        {"stage_set", test_mf_stage_set},
        {"refused", test_mf_refused},
        {"old_checkpoint_loads", test_mf_old_checkpoint_loads},
        {"pruned_with_files", test_mf_pruned_with_files},
        {"build_checks_coverage", test_mf_build_checks_coverage},
    };
    RM_ADD_SUITE("manifest", suite_init, suite_clean, mf_cases);
}
