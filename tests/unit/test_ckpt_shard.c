/* test_ckpt_shard.c — sharded, elastic checkpoints (worker/ckpt_shard.h): a set written by 4
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
#include "worker/ckpt_shard.h"
#include "worker/shard.h"

static char *g_dir;

/* a model of 3 layers: 20x7+7 = 147, 7x5+5 = 40, 5x3+3 = 18 -> 205 floats; Adam (2 buffers) */
static rm_ckpt_meta g_meta;
static rm_param_layout g_lay;
static rm_ckpt_units g_units;

static int suite_init(void)
{
    g_dir = rm_test_tmpdir("ckshard");
    memset(&g_meta, 0, sizeof g_meta);
    int hidden[2] = {7, 5};
    rm_err e = {0};
    rm_model_shape_make(&g_meta.shape, 20, hidden, 2, 3, &e);
    rm_model_layout(&g_meta.shape, &g_lay);
    g_meta.nparams = g_lay.total;
    g_meta.opt_type = 1;
    g_meta.nstate = 2;
    g_meta.world_size = 4;
    g_meta.loss_scale = 1;
    g_units = (rm_ckpt_units){g_meta.shape.nlayers, g_lay.layer_off, g_lay.layer_len};
    return g_dir ? 0 : 1;
}
static int suite_clean(void) { return rm_test_tmpdir_free(&g_dir); }

/* The full vectors at step s: buffer b (0 params, 1-2 optimizer state), element i. */
static float val(int64_t step, int b, size_t i) { return (float)step * 1000.0f + (float)b * 300.0f + (float)i; }

/* Rank r of world W's compact shard at step s, written (wait 0 unless last). */
static int write_shard(int64_t step, int epoch, int W, int r, double wait_s, int keep, rm_err *e)
{
    rm_unit_shard us;
    CU_ASSERT_EQUAL_FATAL(rm_unit_shard_make(g_lay.layer_off, g_lay.layer_len, g_units.n, W, r, &us), 0);
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
    int rc = rm_ckpt_shard_write(g_dir, &m, &g_units, &seg, 1, keep, wait_s, path, sizeof path, e);
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
        for (size_t i = 0; i < g_lay.total; i++)
            if (dst[i] != val(step, 0, i)) {
                CU_FAIL("a parameter differs");
                break;
            }
        rm_unit_shard us;
        rm_unit_shard_make(g_lay.layer_off, g_lay.layer_len, g_units.n, nw, nr, &us);
        for (int b = 1; b <= 2; b++)
            for (int u = 0; u < us.nunits; u++)
                for (size_t k = 0; k < us.len[u]; k++)
                    if (dst[g_lay.total + (size_t)(b - 1) * us.total + us.soff[u] + k] != val(step, b, us.off[u] + k)) {
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

void rm_suite_ckpt_shard(void);
void rm_suite_ckpt_shard(void)
{
    static const rm_test_case cases[] = {
        {"reshard_any_world", test_reshard_any_world},
        {"incomplete_set_ignored", test_incomplete_set_ignored},
        {"corrupt_or_missing_shard_falls_back", test_corrupt_or_missing_shard_falls_back},
        {"retention_keeps_sets_together", test_retention_keeps_sets_together},
        {"concurrent_ranks", test_concurrent_ranks},
    };
    RM_ADD_SUITE("ckpt_shard", suite_init, suite_clean, cases);
}
