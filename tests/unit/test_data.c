/* test_data.c — the IDX loader on small crafted files in a temp dir (raw and gzipped): a good
 * pair loads; bad magic, truncation (raw and gz), trailing bytes, label out of range, count
 * mismatch, corrupt gzip and a missing file give clear errors; the per-epoch permutation is a
 * permutation, the same for the same (seed, epoch) and different across epochs; rank shards of a
 * step are disjoint and together cover exactly the step's positions; pixels scale to [0,1]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tests/unit/testutil.h"
#include "worker/data/data.h"
#include "worker/data/reader.h"

static char *g_dir;

static void be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* n images of r x c with pixel = (i + k) & 255, labels i % 10. */
static void write_pair(const char *prefix, int n, int r, int c, uint32_t imagic, uint32_t lmagic,
                       int drop_bytes, int extra_bytes, int bad_label, int nlabels, bool gz)
{
    size_t isz = 16 + (size_t)n * r * c, lsz = 8 + (size_t)nlabels;
    unsigned char *img = malloc(isz + extra_bytes), *lab = malloc(lsz);
    be32(img, imagic);
    be32(img + 4, (uint32_t)n);
    be32(img + 8, (uint32_t)r);
    be32(img + 12, (uint32_t)c);
    for (size_t k = 0; k < (size_t)n * r * c; k++)
        img[16 + k] = (unsigned char)((k / ((size_t)r * c) + k) & 255);
    memset(img + isz, 7, (size_t)extra_bytes);
    be32(lab, lmagic);
    be32(lab + 4, (uint32_t)nlabels);
    for (int i = 0; i < nlabels; i++)
        lab[8 + i] = (unsigned char)(i % 10);
    if (bad_label >= 0)
        lab[8 + bad_label] = 10;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte%s", g_dir, prefix, gz ? ".gz" : "");
    size_t iw = isz + (size_t)extra_bytes - (size_t)drop_bytes;
    if (gz) {
        gzFile f = gzopen(p, "wb");
        gzwrite(f, img, (unsigned)iw);
        gzclose(f);
    } else {
        rm_test_write_file(p, img, iw);
    }
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte", g_dir, prefix);
    rm_test_write_file(p, lab, lsz);
    free(img);
    free(lab);
}

static int setup(void)
{
    return (g_dir = rm_test_tmpdir("data")) ? 0 : 1;
}
static int teardown(void)
{
    return rm_test_tmpdir_free(&g_dir);
}

static int load(rm_err *e, rm_dataset *d)
{
    memset(e, 0, sizeof *e);
    return rm_dataset_load(g_dir, true, d, e);
}

static void test_good_raw_and_gz(void)
{
    for (int gz = 0; gz < 2; gz++) {
        rm_test_clear_dir(g_dir);
        write_pair("train", 20, 4, 3, 0x803, 0x801, 0, 0, -1, 20, gz);
        rm_dataset d;
        rm_err e;
        CU_ASSERT_EQUAL_FATAL(load(&e, &d), RM_OK);
        CU_ASSERT_EQUAL(d.n, 20);
        CU_ASSERT_EQUAL(d.rows, 4);
        CU_ASSERT_EQUAL(d.cols, 3);
        CU_ASSERT_EQUAL(d.labels[13], 3);
        CU_ASSERT_EQUAL(d.images[12 * 5 + 1], (unsigned char)(5 + 61));
        float x[24];
        int32_t l[2];
        rm_data_slice(&d, 5, 2, x, l);
        CU_ASSERT_DOUBLE_EQUAL(x[1], (5 + 61) / 255.0, 1e-6);
        CU_ASSERT_EQUAL(l[1], 6);
        for (int i = 0; i < 24; i++)
            CU_ASSERT(x[i] >= 0.0f && x[i] <= 1.0f);
        rm_dataset_free(&d);
        rm_dataset_free(&d);
    }
}

static void expect_fail(const char *what, int want_rc)
{
    rm_dataset d;
    rm_err e;
    int rc = load(&e, &d);
    CU_ASSERT_EQUAL(rc, want_rc);
    if (rc != want_rc)
        fprintf(stderr, "case %s: rc=%d msg=%s\n", what, rc, e.msg);
    CU_ASSERT(strstr(e.msg, what) != NULL);
    CU_ASSERT_PTR_NULL(d.images);
    CU_ASSERT_EQUAL(d.n, 0);
}

static void test_bad_files(void)
{
    rm_test_clear_dir(g_dir);
    write_pair("train", 10, 2, 2, 0x804, 0x801, 0, 0, -1, 10, false);
    expect_fail("bad magic", RM_EINVAL);
    rm_test_clear_dir(g_dir);
    write_pair("train", 10, 2, 2, 0x803, 0x803, 0, 0, -1, 10, false);
    expect_fail("bad magic", RM_EINVAL);
    rm_test_clear_dir(g_dir);
    write_pair("train", 10, 2, 2, 0x803, 0x801, 3, 0, -1, 10, false);
    expect_fail("truncated", RM_EINVAL);
    rm_test_clear_dir(g_dir);
    write_pair("train", 10, 2, 2, 0x803, 0x801, 3, 0, -1, 10, true);
    expect_fail("truncated", RM_EINVAL);
    rm_test_clear_dir(g_dir);
    write_pair("train", 10, 2, 2, 0x803, 0x801, 0, 5, -1, 10, false);
    expect_fail("trailing", RM_EINVAL);
    rm_test_clear_dir(g_dir);
    /* classes come from the data: a label 10 among 0..9 makes 11 classes (the model sizes its
     * head from them); the probe without the images says the same */
    write_pair("train", 10, 2, 2, 0x803, 0x801, 0, 0, 4, 10, false);
    {
        rm_dataset d;
        rm_err e;
        CU_ASSERT_EQUAL_FATAL(load(&e, &d), RM_OK);
        CU_ASSERT_EQUAL(d.classes, 11);
        rm_dataset_free(&d);
        int inputs = 0, classes = 0;
        CU_ASSERT_EQUAL(rm_dataset_probe(g_dir, &inputs, &classes, &e), RM_OK);
        CU_ASSERT_EQUAL(inputs, 4);
        CU_ASSERT_EQUAL(classes, 11);
        /* a reader given a class count refuses a label outside it, naming it */
        char lp[1024];
        uint8_t *lab = NULL;
        int n = 0;
        snprintf(lp, sizeof lp, "%s/train-labels-idx1-ubyte", g_dir);
        CU_ASSERT_EQUAL(rm_idx_load_labels(lp, 10, &lab, &n, &e), RM_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "out of range"));
        CU_ASSERT_PTR_NULL(lab);
    }
    rm_test_clear_dir(g_dir);
    write_pair("train", 10, 2, 2, 0x803, 0x801, 0, 0, -1, 9, false);
    expect_fail("labels", RM_EINVAL); /* 10 images but 9 labels */
    rm_test_clear_dir(g_dir);
    write_pair("train", 10, 100, 100, 0x803, 0x801, 0, 0, -1, 10, false);
    expect_fail("implausible", RM_EINVAL);
    rm_test_clear_dir(g_dir);
    write_pair("train", 10, 2, 2, 0x803, 0x801, 0, 0, -1, 0, false);
    expect_fail("implausible label count 0", RM_EINVAL);
    rm_test_clear_dir(g_dir); /* the file ends inside the 16-byte header */
    write_pair("train", 10, 2, 2, 0x803, 0x801, 16 + 40 - 10, 0, -1, 10, false);
    expect_fail("ends inside the header", RM_EINVAL);
    rm_test_clear_dir(g_dir);
    expect_fail("missing", RM_EIO);
    /* a gzip file whose compressed bytes are damaged */
    rm_test_clear_dir(g_dir);
    write_pair("train", 50, 4, 4, 0x803, 0x801, 0, 0, -1, 50, true);
    char p[1024];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", g_dir);
    size_t len = 0;
    char *buf = rm_test_read_file(p, &len);
    CU_ASSERT_FATAL(buf && len > 30);
    for (size_t i = 12; i < len - 10; i += 3)
        buf[i] ^= 0x5a;
    rm_test_write_file(p, buf, len);
    free(buf);
    rm_dataset d;
    rm_err e;
    CU_ASSERT_EQUAL(load(&e, &d), RM_EINVAL);
    CU_ASSERT(strstr(e.msg, "train-images") != NULL);
}

static void test_perm(void)
{
    enum { N = 1000 };
    uint32_t *a = malloc(N * 4), *b = malloc(N * 4), *c = malloc(N * 4);
    rm_perm_make(a, N, 42, 3);
    rm_perm_make(b, N, 42, 3);
    rm_perm_make(c, N, 42, 4);
    CU_ASSERT_EQUAL(memcmp(a, b, N * 4), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, c, N * 4), 0);
    char seen[N] = {0};
    int moved = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(a[i] < N);
        seen[a[i]]++;
        moved += a[i] != (uint32_t)i;
    }
    for (int i = 0; i < N; i++)
        CU_ASSERT_EQUAL(seen[i], 1);
    CU_ASSERT(moved > N * 9 / 10);
    rm_perm_make(c, N, 43, 3);
    CU_ASSERT_NOT_EQUAL(memcmp(a, c, N * 4), 0);
    free(a);
    free(b);
    free(c);
}

static void test_shards(void)
{
    /* dataset of 40 1x1 images whose pixel is the index, labels index % 10 */
    rm_dataset d = {.n = 40, .rows = 1, .cols = 1, .classes = 10};
    d.images = malloc(40);
    d.labels = malloc(40);
    for (int i = 0; i < 40; i++) {
        d.images[i] = (uint8_t)i;
        d.labels[i] = (uint8_t)(i % 10);
    }
    uint32_t perm[40];
    rm_perm_make(perm, 40, 7, 0);
    const int world = 3, B = 4, pos = 12; /* step covering positions 12..23 */
    int count[40] = {0};
    for (int r = 0; r < world; r++) {
        float x[4];
        int32_t l[4];
        rm_data_gather(&d, perm, pos, r, world, B, x, l);
        for (int i = 0; i < B; i++) {
            int idx = (int)(x[i] * 255.0f + 0.5f);
            CU_ASSERT_EQUAL(idx, (int)perm[pos + r + i * world]);
            CU_ASSERT_EQUAL(l[i], idx % 10);
            count[idx]++;
        }
    }
    for (int p = 0; p < 40; p++) {
        int want = (p >= pos && p < pos + world * B) ? 1 : 0;
        CU_ASSERT_EQUAL(count[perm[p]], want);
    }
    CU_ASSERT_EQUAL(rm_data_steps_per_epoch(60000, 256), 234);
    free(d.images);
    free(d.labels);
}

/* The installed Fashion-MNIST (Debian's dataset-fashion-mnist, a `make deps` package every
 * training test needs). Missing data fails the test, naming the folder and the package; it
 * does not pass silently. RM_TEST_ALLOW_NO_DATA=1 turns that into a loud skip for machines that
 * really have no data. */
static void test_real_dataset(void)
{
    rm_dataset d;
    rm_err e = {0};
    if (rm_dataset_load(RM_DATA_DEFAULT_DIR, false, &d, &e) != RM_OK) {
        const char *allow = getenv("RM_TEST_ALLOW_NO_DATA");
        fprintf(stderr,
                "\n%s: real_test_set: Fashion-MNIST is not installed in %s (%s); install "
                "Debian's dataset-fashion-mnist (make deps)\n",
                allow && !strcmp(allow, "1") ? "SKIPPED (RM_TEST_ALLOW_NO_DATA=1)" : "FAILED",
                RM_DATA_DEFAULT_DIR, e.msg);
        if (!(allow && !strcmp(allow, "1")))
            CU_FAIL("Fashion-MNIST test set missing (set RM_TEST_ALLOW_NO_DATA=1 to skip)");
        return;
    }
    CU_ASSERT_EQUAL(d.n, 10000);
    CU_ASSERT_EQUAL(d.rows * d.cols, 784);
    rm_dataset_free(&d);
}

/* The reader interface over IDX: the probe and the open split agree with the files, rows come out
 * as the IDX functions give them, and data.format picks the reader. */
static void test_reader(void)
{
    rm_test_clear_dir(g_dir);
    write_pair("train", 20, 4, 3, 0x803, 0x801, 0, 0, -1, 20, false);
    write_pair("t10k", 10, 4, 3, 0x803, 0x801, 0, 0, -1, 10, true);
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    t.data_dir = g_dir;
    rm_err e = {0};
    rm_data_info pi;
    CU_ASSERT_EQUAL_FATAL(rm_data_probe(&t, &pi, &e), RM_OK);
    CU_ASSERT_EQUAL(pi.inputs, 12);
    CU_ASSERT_EQUAL(pi.classes, 10);
    CU_ASSERT_EQUAL(pi.x_row_bytes, 12 * sizeof(float));
    rm_data tr, te;
    CU_ASSERT_EQUAL_FATAL(rm_data_open(&t, RM_SPLIT_TRAIN, &tr, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_data_open(&t, RM_SPLIT_TEST, &te, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(tr.r->format, "idx");
    CU_ASSERT_EQUAL(tr.info.n, 20);
    CU_ASSERT_EQUAL(te.info.n, 10);
    rm_dataset d;
    CU_ASSERT_EQUAL_FATAL(load(&e, &d), RM_OK);
    uint32_t perm[20];
    rm_perm_make(perm, 20, 7, 1);
    float xa[4 * 12], xb[4 * 12];
    int32_t la[4], lb[4];
    rm_data_gather_rows(&tr, perm, 4, 1, 2, 4, xa, la);
    rm_data_gather(&d, perm, 4, 1, 2, 4, xb, lb);
    CU_ASSERT_EQUAL(memcmp(xa, xb, sizeof xa), 0);
    CU_ASSERT_EQUAL(memcmp(la, lb, sizeof la), 0);
    rm_data_slice_rows(&te, 6, 4, xa, la);
    CU_ASSERT_EQUAL(la[0], 6);
    rm_dataset_free(&d);
    rm_data_close(&tr);
    rm_data_close(&tr); /* idempotent */
    rm_data_close(&te);
    /* the format picks the reader: IDX files are no token shards */
    t.set2 |= RM_TR_SET2_FORMAT;
    t.data.format = RM_DATA_TOKENS;
    t.context = 4;
    t.vocab = 10;
    CU_ASSERT_EQUAL(rm_data_open(&t, RM_SPLIT_TRAIN, &tr, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "token shards"));
    t.data.format = RM_DATA_IDX;
    t.data_dir = "/nonexistent-ringmaster-data";
    CU_ASSERT_EQUAL(rm_data_probe(&t, &pi, &e), RM_EIO);
}

void rm_suite_data(void)
{
    static const rm_test_case cases[] = {
        {"good_raw_and_gz", test_good_raw_and_gz},
        {"bad_files", test_bad_files},
        {"perm", test_perm},
        {"shards_disjoint", test_shards},
        {"real_test_set", test_real_dataset},
        {"reader", test_reader},
    };
    RM_ADD_SUITE("data", setup, teardown, cases);
}
