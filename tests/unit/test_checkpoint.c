/* test_checkpoint.c — round trip of every field and the payload; newest-valid selection with a
 * truncated newest file (older one used), a flipped payload bit and a flipped header bit
 * (skipped), wrong model shape (skipped); a corrupt file is neither modified nor deleted by a
 * load, and a new write never overwrites it; keep-K pruning; atomicity: no temp files remain and
 * a reader never sees a partial file under the final name; a file that appears under the chosen
 * name during the write is not replaced (no_overwrite_race); pruning never deletes another
 * model's checkpoints (keep_other_models); an unusable folder is refused up front (dir_check). */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "tests/unit/testutil.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/model/mlp.h"

static char *g_dir;
enum { N = 1000 };

static rm_ckpt_meta mkmeta(int64_t step)
{
    rm_ckpt_meta m;
    memset(&m, 0, sizeof m);
    int hidden[1] = {40};
    rm_err e = {0};
    rm_mlp_shape(&m.shape, 20, hidden, 1, 4, &e); /* 20*40+40+40*4+4 = 1004 */
    rm_model L;
    rm_model_plan(&L, &rm_model_mlp, &m.shape, NULL);
    m.nparams = L.nparams;
    m.step = step;
    m.train_epoch = 3;
    m.data_pos = 1280;
    m.world_size = 4;
    m.batch_per_worker = 64;
    m.rdzv_epoch = 7;
    m.seed = 42;
    m.rng[2] = 0xdeadbeef;
    m.opt_type = 1;
    m.nstate = 2;
    m.opt_t = step;
    m.epoch_pos = 3.5;
    m.lr = 0.08;
    m.loss_scale = 1.0f;
    m.scaler_tracker = 5;
    return m;
}

static float *mkpayload(const rm_ckpt_meta *m, float base)
{
    size_t n = (size_t)(1 + m->nstate) * m->nparams;
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = base + (float)i * 0.5f;
    return p;
}

static int write_one(int64_t step, float base, int keep, char *path)
{
    rm_ckpt_meta m = mkmeta(step);
    float *p = mkpayload(&m, base);
    size_t n = m.nparams * sizeof(float);
    rm_ckpt_seg segs[3] = {{p, n}, {(char *)p + n, n}, {(char *)p + 2 * n, n}};
    rm_err e = {0};
    int rc = rm_ckpt_write(g_dir, &m, segs, 3, keep, path, 4200, &e);
    free(p);
    return rc;
}

static int count_files(const char *prefix)
{
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)))
            n++;
    if (d)
        closedir(d);
    return n;
}

static int setup(void)
{
    return (g_dir = rm_test_tmpdir("ckpt")) ? 0 : 1;
}
static int teardown(void)
{
    return rm_test_tmpdir_free(&g_dir);
}

static void test_round_trip(void)
{
    rm_test_clear_dir(g_dir);
    char path[4200];
    CU_ASSERT_EQUAL_FATAL(write_one(200, 1.0f, 3, path), RM_OK);
    CU_ASSERT(strstr(path, "ckpt-000000000200.rmck") != NULL);
    rm_ckpt_meta want = mkmeta(200), got;
    size_t cap = 3 * want.nparams * sizeof(float);
    float *buf = malloc(cap);
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_ckpt_read(path, &want, &got, buf, cap, &e), RM_OK);
    CU_ASSERT_EQUAL(got.step, 200);
    CU_ASSERT_EQUAL(got.train_epoch, 3);
    CU_ASSERT_EQUAL(got.data_pos, 1280);
    CU_ASSERT_EQUAL(got.world_size, 4);
    CU_ASSERT_EQUAL(got.batch_per_worker, 64);
    CU_ASSERT_EQUAL(got.rdzv_epoch, 7);
    CU_ASSERT_EQUAL(got.seed, 42);
    CU_ASSERT_EQUAL(got.rng[2], 0xdeadbeef);
    CU_ASSERT_EQUAL(got.opt_type, 1);
    CU_ASSERT_EQUAL(got.nstate, 2);
    CU_ASSERT_EQUAL(got.opt_t, 200);
    CU_ASSERT_DOUBLE_EQUAL(got.epoch_pos, 3.5, 0);
    CU_ASSERT_DOUBLE_EQUAL(got.lr, 0.08, 0);
    CU_ASSERT_EQUAL(got.scaler_tracker, 5);
    CU_ASSERT_EQUAL(got.shape.nlayers, 2);
    CU_ASSERT_EQUAL(got.shape.dims[1], 40);
    CU_ASSERT_EQUAL(got.nparams, want.nparams);
    float *ref = mkpayload(&want, 1.0f);
    CU_ASSERT_EQUAL(memcmp(buf, ref, cap), 0);
    free(ref);
    free(buf);
    CU_ASSERT_EQUAL(count_files(".tmp"), 0);
}

static void corrupt(const char *path, long off, int truncate_to)
{
    size_t len = 0;
    char *b = rm_test_read_file(path, &len);
    CU_ASSERT_FATAL(b != NULL);
    if (truncate_to >= 0)
        len = (size_t)truncate_to;
    else
        b[off < 0 ? (long)len + off : off] ^= 0x10;
    rm_test_write_file(path, b, len);
    free(b);
}

static int load_newest(rm_ckpt_meta *got, char *path, int *skipped)
{
    rm_ckpt_meta want = mkmeta(0);
    size_t cap = 3 * want.nparams * sizeof(float);
    float *buf = malloc(cap);
    rm_err e = {0};
    int rc = rm_ckpt_load_newest(g_dir, &want, got, buf, cap, path, 4200, skipped, &e);
    free(buf);
    return rc;
}

static void test_skip_invalid(void)
{
    rm_test_clear_dir(g_dir);
    char p100[4200], p200[4200], p300[4200], path[4200];
    CU_ASSERT_EQUAL(write_one(100, 1.0f, 10, p100), RM_OK);
    CU_ASSERT_EQUAL(write_one(200, 2.0f, 10, p200), RM_OK);
    CU_ASSERT_EQUAL(write_one(300, 3.0f, 10, p300), RM_OK);
    rm_ckpt_meta got;
    int skipped = -1;
    CU_ASSERT_EQUAL(load_newest(&got, path, &skipped), RM_OK);
    CU_ASSERT_EQUAL(got.step, 300);
    CU_ASSERT_EQUAL(skipped, 0);

    corrupt(p300, 0, 5000); /* truncated newest */
    CU_ASSERT_EQUAL(load_newest(&got, path, &skipped), RM_OK);
    CU_ASSERT_EQUAL(got.step, 200);
    CU_ASSERT_EQUAL(skipped, 1);
    CU_ASSERT_STRING_EQUAL(path, p200);

    corrupt(p200, -7, -1); /* one payload bit */
    CU_ASSERT_EQUAL(load_newest(&got, path, &skipped), RM_OK);
    CU_ASSERT_EQUAL(got.step, 100);
    CU_ASSERT_EQUAL(skipped, 2);

    corrupt(p100, 40, -1); /* one header bit */
    CU_ASSERT_EQUAL(load_newest(&got, path, &skipped), RM_ENOTFOUND);
    CU_ASSERT_EQUAL(skipped, 3);

    /* the failed loads left the files alone */
    struct stat st;
    CU_ASSERT_EQUAL(stat(p300, &st), 0);
    CU_ASSERT_EQUAL(st.st_size, 5000);
    CU_ASSERT_EQUAL(stat(p200, &st), 0);
    CU_ASSERT_EQUAL(stat(p100, &st), 0);

    /* a new write at a step whose file is corrupt does not overwrite it */
    char p300b[4200];
    CU_ASSERT_EQUAL(write_one(300, 9.0f, 10, p300b), RM_OK);
    CU_ASSERT_STRING_NOT_EQUAL(p300b, p300);
    CU_ASSERT_EQUAL(stat(p300, &st), 0);
    CU_ASSERT_EQUAL(st.st_size, 5000);
    CU_ASSERT_EQUAL(load_newest(&got, path, &skipped), RM_OK);
    CU_ASSERT_EQUAL(got.step, 300);
    CU_ASSERT_STRING_EQUAL(path, p300b);
    CU_ASSERT_EQUAL(skipped, 0); /* the "-1" suffix is newer than the corrupt plain one */
}

static void test_wrong_shape_and_garbage(void)
{
    rm_test_clear_dir(g_dir);
    char p[4200], path[4200];
    CU_ASSERT_EQUAL(write_one(100, 1.0f, 10, p), RM_OK);
    /* a checkpoint of another model at a newer step */
    rm_ckpt_meta m = mkmeta(500);
    int hidden[1] = {41};
    rm_err e = {0};
    rm_mlp_shape(&m.shape, 20, hidden, 1, 4, &e);
    rm_model L;
    rm_model_plan(&L, &rm_model_mlp, &m.shape, NULL);
    m.nparams = L.nparams;
    m.nstate = 0;
    float *w = calloc(L.nparams, sizeof(float));
    rm_ckpt_seg seg = {w, L.nparams * sizeof(float)};
    CU_ASSERT_EQUAL(rm_ckpt_write(g_dir, &m, &seg, 1, 10, NULL, 0, &e), RM_OK);
    free(w);
    /* a stranger file with a checkpoint name */
    char g[4300];
    snprintf(g, sizeof g, "%s/ckpt-000000000900.rmck", g_dir);
    rm_test_write_file(g, "hello", 5);
    rm_ckpt_meta got;
    int skipped = 0;
    CU_ASSERT_EQUAL(load_newest(&got, path, &skipped), RM_OK);
    CU_ASSERT_EQUAL(got.step, 100);
    CU_ASSERT_EQUAL(skipped, 2);
    /* mismatched payload size on write is refused */
    rm_ckpt_meta mm = mkmeta(1);
    rm_ckpt_seg small = {"x", 1};
    CU_ASSERT_EQUAL(rm_ckpt_write(g_dir, &mm, &small, 1, 3, NULL, 0, &e), RM_EINVAL);
}

static void test_keep(void)
{
    rm_test_clear_dir(g_dir);
    char p[4200];
    for (int s = 1; s <= 6; s++)
        CU_ASSERT_EQUAL(write_one(s * 10, 1.0f, 3, p), RM_OK);
    CU_ASSERT_EQUAL(count_files("ckpt-"), 3);
    /* a stale temp file from a writer that died is cleaned up; a fresh one is left alone */
    char stale[4300], fresh[4300];
    snprintf(stale, sizeof stale, "%s/.tmp-ckpt-000000000070.999", g_dir);
    snprintf(fresh, sizeof fresh, "%s/.tmp-ckpt-000000000080.998", g_dir);
    rm_test_write_file(stale, "partial", 7);
    rm_test_write_file(fresh, "partial", 7);
    struct utimbuf old = {.actime = time(NULL) - 3600, .modtime = time(NULL) - 3600};
    utime(stale, &old);
    CU_ASSERT_EQUAL(write_one(70, 1.0f, 3, p), RM_OK);
    struct stat st0;
    CU_ASSERT_NOT_EQUAL(stat(stale, &st0), 0);
    CU_ASSERT_EQUAL(stat(fresh, &st0), 0);
    unlink(fresh);
    struct stat st;
    char q[4300];
    snprintf(q, sizeof q, "%s/ckpt-000000000060.rmck", g_dir);
    CU_ASSERT_EQUAL(stat(q, &st), 0);
    snprintf(q, sizeof q, "%s/ckpt-000000000030.rmck", g_dir);
    CU_ASSERT_NOT_EQUAL(stat(q, &st), 0);
    CU_ASSERT_EQUAL(count_files(".tmp"), 0);
    /* missing dir: not found, not a crash */
    rm_ckpt_meta want = mkmeta(0), got;
    float b[4];
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_ckpt_load_newest("/nonexistent/rm-ckpt", &want, &got, b, sizeof b, NULL, 0, NULL, &e),
                    RM_ENOTFOUND);
    /* an unwritable location is a clean error */
    rm_ckpt_meta m = mkmeta(5);
    CU_ASSERT_EQUAL(rm_ckpt_write("/proc/rm-no-such", &m, NULL, 0, 3, NULL, 0, &e), RM_EINVAL);
}

/* Pruning (docs/architecture.md#robustness) keeps only this model's newest K. An earlier run's checkpoints of
 * another model shape (which --resume could not continue from) and a file whose header does not
 * decode are never deleted, however many newer checkpoints the new run writes. */
static int write_hidden(int64_t step, int hidden, int keep)
{
    rm_ckpt_meta m = mkmeta(step);
    rm_err e = {0};
    int h[1] = {hidden};
    rm_mlp_shape(&m.shape, 20, h, 1, 4, &e);
    rm_model L;
    rm_model_plan(&L, &rm_model_mlp, &m.shape, NULL);
    m.nparams = L.nparams;
    float *p = mkpayload(&m, 2.0f);
    rm_ckpt_seg seg = {p, (size_t)(1 + m.nstate) * m.nparams * sizeof(float)};
    int rc = rm_ckpt_write(g_dir, &m, &seg, 1, keep, NULL, 0, &e);
    free(p);
    return rc;
}

static bool exists_ckpt(const char *name)
{
    char q[4300];
    struct stat st;
    snprintf(q, sizeof q, "%s/%s", g_dir, name);
    return stat(q, &st) == 0;
}

static void test_keep_other_models(void)
{
    rm_test_clear_dir(g_dir);
    for (int s = 1; s <= 3; s++) /* the earlier run: hidden 40, steps 10..30 */
        CU_ASSERT_EQUAL(write_hidden(s * 10, 40, 3), RM_OK);
    char junk[4300];
    snprintf(junk, sizeof junk, "%s/ckpt-000000000005.rmck", g_dir);
    rm_test_write_file(junk, "not a checkpoint", 16);
    for (int s = 1; s <= 5; s++) /* the new run: hidden 30, steps 100..500, keep 2 */
        CU_ASSERT_EQUAL(write_hidden(s * 100, 30, 2), RM_OK);
    CU_ASSERT(exists_ckpt("ckpt-000000000010.rmck"));
    CU_ASSERT(exists_ckpt("ckpt-000000000020.rmck"));
    CU_ASSERT(exists_ckpt("ckpt-000000000030.rmck"));
    CU_ASSERT(exists_ckpt("ckpt-000000000005.rmck"));
    CU_ASSERT(exists_ckpt("ckpt-000000000500.rmck"));
    CU_ASSERT(exists_ckpt("ckpt-000000000400.rmck"));
    CU_ASSERT(!exists_ckpt("ckpt-000000000300.rmck")); /* this model's older ones do go */
    CU_ASSERT(!exists_ckpt("ckpt-000000000100.rmck"));
    CU_ASSERT_EQUAL(count_files("ckpt-"), 6);
    /* and the earlier model's newest still loads for a job of that shape */
    rm_ckpt_meta want = mkmeta(0), got;
    int h[1] = {40};
    rm_err e = {0};
    rm_mlp_shape(&want.shape, 20, h, 1, 4, &e);
    size_t cap = (size_t)(1 + want.nstate) * 1004 * sizeof(float);
    float *b = malloc(cap);
    CU_ASSERT_EQUAL(rm_ckpt_load_newest(g_dir, &want, &got, b, cap, NULL, 0, NULL, &e), RM_OK);
    CU_ASSERT_EQUAL(got.step, 30);
    free(b);
}

/* A checkpoint folder that can never be written is refused up front (docs/architecture.md#robustness). */
static void test_dir_check(void)
{
    rm_test_clear_dir(g_dir);
    rm_err e = {0};
    char sub[4300], file[4300], below[4400];
    snprintf(sub, sizeof sub, "%s/a/b/c", g_dir);
    CU_ASSERT_EQUAL(rm_ckpt_dir_check(sub, &e), RM_OK); /* created, probe removed */
    struct stat st;
    CU_ASSERT(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
    char probe[4400];
    snprintf(probe, sizeof probe, "%s/.tmp-probe.%ld", sub, (long)getpid());
    CU_ASSERT_NOT_EQUAL(stat(probe, &st), 0);
    snprintf(file, sizeof file, "%s/plain", g_dir);
    rm_test_write_file(file, "x", 1);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_ckpt_dir_check(file, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not a directory"));
    snprintf(below, sizeof below, "%s/plain/sub", g_dir);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_ckpt_dir_check(below, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "cannot create it"));
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_ckpt_dir_check("/proc/self", &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "/proc/self: cannot create a file there"));
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_ckpt_dir_check("", &e), RM_EINVAL);
}

/* A file that appears under the chosen name while the checkpoint is being written (another
 * writer, a copy restored by hand) is never replaced: the new checkpoint takes the next suffix.
 * A helper thread plants "corrupt" under the final name as soon as the temp file shows up; the
 * payload is large (~40 MB) so the write is still in flight when it does. */
typedef struct planter {
    atomic_int stop, planted;
} planter;

static void *plant(void *arg)
{
    planter *pl = arg;
    char final[4300];
    snprintf(final, sizeof final, "%s/ckpt-000000000777.rmck", g_dir);
    while (!atomic_load(&pl->stop)) {
        if (count_files(".tmp-ckpt-") > 0) {
            int fd = open(final, O_WRONLY | O_CREAT | O_EXCL, 0644);
            if (fd >= 0) {
                atomic_store(&pl->planted, write(fd, "corrupt", 7) == 7);
                close(fd);
            }
            return NULL;
        }
        usleep(100);
    }
    return NULL;
}

static void test_no_overwrite_race(void)
{
    rm_test_clear_dir(g_dir);
    rm_ckpt_meta m = mkmeta(777);
    int hidden[1] = {4096};
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_mlp_shape(&m.shape, 784, hidden, 1, 10, &e), RM_OK);
    rm_model L;
    rm_model_plan(&L, &rm_model_mlp, &m.shape, NULL);
    m.nparams = L.nparams;
    size_t bytes = (size_t)(1 + m.nstate) * m.nparams * sizeof(float);
    float *p = calloc(1, bytes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    rm_ckpt_seg seg = {p, bytes};
    planter pl;
    atomic_init(&pl.stop, 0);
    atomic_init(&pl.planted, 0);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, plant, &pl), 0);
    char path[4200] = "";
    int rc = rm_ckpt_write(g_dir, &m, &seg, 1, 0, path, sizeof path, &e);
    atomic_store(&pl.stop, 1);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(rc, RM_OK);
    CU_ASSERT_FATAL(atomic_load(&pl.planted)); /* the race was really set up */
    char final[4300];
    snprintf(final, sizeof final, "%s/ckpt-000000000777.rmck", g_dir);
    size_t len = 0;
    char *kept = rm_test_read_file(final, &len);
    CU_ASSERT(kept && len == 7 && !memcmp(kept, "corrupt", 7)); /* not replaced */
    free(kept);
    CU_ASSERT_PTR_NOT_NULL(strstr(path, "ckpt-000000000777-1.rmck"));
    rm_ckpt_meta got;
    CU_ASSERT_EQUAL(rm_ckpt_read(path, &m, &got, p, bytes, &e), RM_OK);
    CU_ASSERT_EQUAL(count_files(".tmp"), 0);
    free(p);
}

void rm_suite_checkpoint(void)
{
    static const rm_test_case cases[] = {
        {"round_trip", test_round_trip},
        {"skip_truncated_and_corrupt", test_skip_invalid},
        {"skip_wrong_shape_and_garbage", test_wrong_shape_and_garbage},
        {"keep_last_k", test_keep},
        {"no_overwrite_race", test_no_overwrite_race},
        {"keep_other_models", test_keep_other_models},
        {"dir_check", test_dir_check},
    };
    RM_ADD_SUITE("checkpoint", setup, teardown, cases);
}
