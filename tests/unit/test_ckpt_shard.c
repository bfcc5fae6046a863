/* test_ckpt_shard.c — sharded, elastic checkpoints (worker/checkpoint/ckpt_shard.h): a set written by 4
 * "ranks" (the last one writes the manifest; the others time out waiting, their shards kept)
 * restores re-sharded at worlds 1, 2, 3, 4 and 5 to exactly the pieces the layout says; a set
 * without its manifest is never loaded; a corrupt or missing shard of the newest set makes the
 * load fall back to the older complete set with a reason naming the shard; shards of concurrent
 * ranks (threads) complete the set once; keep-K retention removes whole sets (manifest and every
 * shard) and incomplete shards older than the newest set, never another model's files; the
 * manifest's own checksum guards it. */
#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/testutil.h"
#include "worker/checkpoint/ckpt_shard.h"
#include "worker/allreduce/shard.h"
#include "worker/model/mlp.h"

static char *g_dir;

/* a model of 3 layers: 20x7+7 = 147, 7x5+5 = 40, 5x3+3 = 18 -> 205 floats; Adam (2 buffers) */
static rm_ckpt_meta g_meta;
static rm_model g_lay;
static rm_ckpt_units g_units;

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
    g_units = (rm_ckpt_units){g_meta.shape.nlayers, g_lay.unit_off, g_lay.unit_len};
    return g_dir ? 0 : 1;
}
static int suite_clean(void) { return rm_test_tmpdir_free(&g_dir); }

/* The full vectors at step s: buffer b (0 params, 1-2 optimizer state), element i. */
static float val(int64_t step, int b, size_t i) { return (float)step * 1000.0f + (float)b * 300.0f + (float)i; }

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
    int rc = rm_ckpt_shard_write(g_dir, &m, &g_units, NULL, &seg, 1, keep, wait_s, path, sizeof path, e);
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
    int rc = rm_ckpt_shard_load_newest(g_dir, &g_meta, &g_units, nw, nr, min_step, dst, need, &meta,
                                       path, sizeof path, skipped, e);
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
                    if (dst[g_lay.nparams + (size_t)(b - 1) * us.total + us.soff[u] + k] != val(step, b, us.off[u] + k)) {
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
    CU_ASSERT_EQUAL(write_shard(150, 1, 4, 0, 0, 2, &e), RM_ETIMEDOUT);   /* incomplete, older */
    write_set(200, 2, 3, 2);   /* another world (the group shrank) */
    write_set(300, 2, 3, 2);
    /* keep 2: sets 200 and 300 (3 shards each) stay; set 100 and the lone 150 shard go */
    CU_ASSERT_EQUAL(count_files("manifest-"), 2);
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
    rm_ckpt_manifest_name(name, sizeof name, 10, 1, 2);
    CU_ASSERT_TRUE(exists(name));
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(load_check(4, 3, -1, NULL, &e), 500);
}

typedef struct { int rank; int rc; } th_arg;
static void *rank_main(void *p)
{
    th_arg *a = p;
    rm_err e = {0};
    a->rc = write_shard(700, 5, 4, a->rank, 10, 3, &e);
    return NULL;
}

/* Ranks write concurrently, each waiting: every one returns complete; one manifest. */
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
    CU_ASSERT_EQUAL(rm_ckpt_stage_write(g_dir, &m, &g_units, NULL, bounds, &seg, 1, 5, r == P - 1 ? 5 : 0,
                                        path, sizeof path, &e), r == P - 1 ? RM_OK : RM_ETIMEDOUT);
    free(buf);
}

static void stage_set(const int *bounds, int P, int64_t step, int epoch)
{
    for (int r = 0; r < P; r++)
        stage_shard(bounds, P, r, step, epoch);
}

/* A whole checkpoint (ckpt-*.rmck) at step. */
static void whole_ckpt(int64_t step)
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
    CU_ASSERT_EQUAL(rm_ckpt_write(g_dir, &m, &seg, 1, 5, NULL, 0, &e), RM_OK);
    free(buf);
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
    int rc = whole ? rm_ckpt_whole_load_layers(g_dir, &g_meta, &g_units, u0, u1, dst, need, &meta,
                                               path, sizeof path, skipped, e)
                   : rm_ckpt_set_load_layers(g_dir, &g_meta, &g_units, u0, u1, -1, dst, need, &meta,
                                             path, sizeof path, skipped, e);
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
    static const struct { const int *b; int P; } lay[] = {{NULL, 4}, {b1, 1}, {b2a, 2}, {b2b, 2}, {b3, 3}};
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
    CU_ASSERT_EQUAL(rm_ckpt_set_load_layers(g_dir, &g_meta, &g_units, 1, 1, -1, small, sizeof small,
                                            &meta, NULL, 0, NULL, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_ckpt_set_load_layers(g_dir, &g_meta, &g_units, 2, 4, -1, small, sizeof small,
                                            &meta, NULL, 0, NULL, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_ckpt_whole_load_layers(g_dir, &g_meta, &g_units, 2, 3, small, sizeof small,
                                              &meta, NULL, 0, NULL, &e), RM_EINVAL);
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
    static const struct { int what, shard; const char *why; } cases[] = {
        {FLIP_OUT, 2, "checksum"}, {FLIP_IN, 0, "checksum"}, {TRUNC_OUT, 1, "truncated"},
        {MISSING_OUT, 2, "shard 2 of 3"}, {MANIFEST, 0, "manifest checksum"},
    };
    for (size_t c = 0; c < RM_ARRAY_LEN(cases); c++) {
        rm_test_clear_dir(g_dir);
        stage_set(b2, 2, 100, 1);   /* the older set: another P */
        stage_set(b3, 3, 200, 2);
        char name[128], p[4200];
        rm_ckpt_shard_name(name, sizeof name, 200, 2, cases[c].shard, 3);
        snprintf(p, sizeof p, "%s/%s", g_dir, name);
        switch (cases[c].what) {
        case FLIP_OUT:
        case FLIP_IN:
            corrupt(name, 600);   /* a payload byte */
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
        CU_ASSERT_EQUAL(layers_check(false, 0, 1, &sk, &e), 100);   /* stage 0 of the new P = 2 */
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
    CU_ASSERT_EQUAL(rm_ckpt_whole_load_layers(g_dir, &m, &u, 1, 2, dst, need, &got, NULL, 0, NULL, &e), RM_OK);
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
    };
    RM_ADD_SUITE("ckpt_shard", suite_init, suite_clean, cases);
}
