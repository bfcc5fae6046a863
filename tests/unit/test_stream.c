/* test_stream.c — the token-stream readers (worker/data/stream.c) through the reader interface:
 * text windows and their shifted targets, the validation split as the last fraction of one file,
 * token shards of both header versions alone and as a folder of *_train_* / *_val_* shards (windows
 * never straddle two shards), and every bad file refused naming the file and what is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/token_shard.h"
#include "tests/unit/testutil.h"
#include "worker/data/reader.h"

static char *g_dir;
static int setup(void)
{
    return (g_dir = rm_test_tmpdir("stream")) ? 0 : 1;
}
static int teardown(void)
{
    return rm_test_tmpdir_free(&g_dir);
}

static rm_training_spec spec(const char *src, rm_data_format f, int context, int vocab, double frac)
{
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    t.data_dir = (char *)src;
    t.set2 = RM_TR_SET2_FORMAT;
    t.data.format = f;
    t.context = context;
    t.vocab = vocab;
    t.data.val_fraction = frac;
    return t;
}

static void test_text_windows(void)
{
    char path[1024], body[101];
    for (int i = 0; i < 101; i++)
        body[i] = (char)('!' + i % 90);
    snprintf(path, sizeof path, "%s/corpus.txt", g_dir);
    rm_test_write_file(path, body, sizeof body);
    rm_training_spec t = spec(path, RM_DATA_TEXT, 4, 0, 0.2);
    rm_err e = {0};
    rm_data tr, va;
    CU_ASSERT_EQUAL_FATAL(rm_data_open(&t, RM_SPLIT_TRAIN, &tr, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_data_open(&t, RM_SPLIT_TEST, &va, &e), RM_OK);
    /* 101 bytes, 20 of them validation: train 81 bytes = 20 windows of 4 (+1), validation 4 */
    CU_ASSERT_EQUAL(tr.info.n, 20);
    CU_ASSERT_EQUAL(va.info.n, 4);
    CU_ASSERT_EQUAL(tr.info.classes, 256);
    CU_ASSERT_EQUAL(tr.info.x_row_bytes, 4 * sizeof(int32_t));
    CU_ASSERT_EQUAL(tr.info.label_row, 4);
    int32_t x[8], y[8];
    uint32_t perm[20];
    for (int i = 0; i < 20; i++)
        perm[i] = (uint32_t)(19 - i);
    rm_data_gather_rows(&tr, perm, 0, 1, 2, 2, x, y); /* rank 1 of 2: perm[1], perm[3] = 18, 16 */
    CU_ASSERT_EQUAL(x[0], (unsigned char)body[18 * 4]);
    CU_ASSERT_EQUAL(y[0], (unsigned char)body[18 * 4 + 1]);
    CU_ASSERT_EQUAL(y[3], (unsigned char)body[18 * 4 + 4]);
    CU_ASSERT_EQUAL(x[4], (unsigned char)body[16 * 4]);
    rm_data_slice_rows(&va, 3, 1, x, y); /* the validation split starts at byte 81 */
    CU_ASSERT_EQUAL(x[0], (unsigned char)body[81 + 12]);
    CU_ASSERT_EQUAL(y[3], (unsigned char)body[81 + 16]);
    rm_data_info pi;
    CU_ASSERT_EQUAL(rm_data_probe(&t, &pi, &e), RM_OK);
    CU_ASSERT_EQUAL(pi.n, 20);
    /* an epoch's shift: window w starts at 4w .. 4w + 3, still inside the training bytes, its
     * labels one byte later; a function of (seed, epoch): repeated for the same, other for another */
    int start[3][20], shifted = 0, differ = 0;
    const int epochs[3] = {5, 5, 6};
    for (int r = 0; r < 3; r++) {
        rm_data_set_epoch(&tr, 42, epochs[r]);
        for (uint32_t w = 0; w < 20; w++) {
            uint32_t one = w;
            rm_data_gather_rows(&tr, &one, 0, 0, 1, 1, x, y);
            int at = x[0] - '!';
            start[r][w] = at;
            CU_ASSERT(at >= (int)w * 4 && at <= (int)w * 4 + 3 && at + 4 <= 80);
            for (int i = 0; i < 4; i++) {
                CU_ASSERT_EQUAL(x[i], (unsigned char)body[at + i]);
                CU_ASSERT_EQUAL(y[i], (unsigned char)body[at + i + 1]);
            }
            shifted += at != (int)w * 4;
        }
    }
    for (int w = 0; w < 20; w++) {
        CU_ASSERT_EQUAL(start[0][w], start[1][w]);
        differ += start[0][w] != start[2][w];
    }
    CU_ASSERT(shifted > 0);
    CU_ASSERT(differ > 0);
    rm_data_slice_rows(&va, 3, 1, x, y); /* validation stays aligned */
    CU_ASSERT_EQUAL(x[0], (unsigned char)body[81 + 12]);
    rm_data_close(&tr);
    rm_data_close(&va);
}

static void test_token_shards(void)
{
    char path[1024];
    uint32_t tok[41];
    for (int i = 0; i < 41; i++)
        tok[i] = (uint32_t)(i * 7 % 50);
    rm_err e = {0};
    /* one file, uint16 (version 1): the last 10% validation */
    snprintf(path, sizeof path, "%s/one.bin", g_dir);
    CU_ASSERT_EQUAL_FATAL(rm_tok_write_shard(path, tok, 41, &e), RM_OK);
    size_t len = 0;
    char *raw = rm_test_read_file(path, &len);
    CU_ASSERT_EQUAL(len, 1024 + 41 * 2);
    CU_ASSERT_EQUAL(((int32_t *)raw)[0], RM_TOK_MAGIC_U16);
    free(raw);
    rm_training_spec t = spec(path, RM_DATA_TOKENS, 8, 50, 0.1);
    rm_data d;
    CU_ASSERT_EQUAL_FATAL(rm_data_open(&t, RM_SPLIT_TRAIN, &d, &e), RM_OK);
    CU_ASSERT_EQUAL(d.info.n, (41 - 4 - 1) / 8); /* 37 training tokens: 4 windows */
    int32_t x[8], y[8];
    rm_data_slice_rows(&d, 2, 1, x, y);
    CU_ASSERT_EQUAL(x[0], (int32_t)tok[16]);
    CU_ASSERT_EQUAL(y[7], (int32_t)tok[24]);
    rm_data_close(&d);
    /* a token at the vocabulary's edge is refused, naming the file and the position */
    t.vocab = 49;
    CU_ASSERT_EQUAL(rm_data_open(&t, RM_SPLIT_TRAIN, &d, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "one.bin: token 49 at position"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.training.model.vocab"));
    t.vocab = 0;
    CU_ASSERT_EQUAL(rm_data_open(&t, RM_SPLIT_TRAIN, &d, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "spec.training.model.vocab"));
    /* a folder: two training shards (one of them uint32, version 7) and one validation shard;
     * windows stay inside a shard: 2 + 1 training windows of 8 */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/shards", g_dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    tok[3] = 70000;
    snprintf(path, sizeof path, "%s/set_train_000001.bin", dir);
    CU_ASSERT_EQUAL_FATAL(rm_tok_write_shard(path, tok, 10, &e), RM_OK);
    tok[3] = 21;
    snprintf(path, sizeof path, "%s/set_train_000000.bin", dir);
    CU_ASSERT_EQUAL_FATAL(rm_tok_write_shard(path, tok, 17, &e), RM_OK);
    snprintf(path, sizeof path, "%s/set_val_000000.bin", dir);
    CU_ASSERT_EQUAL_FATAL(rm_tok_write_shard(path, tok + 20, 9, &e), RM_OK);
    t = spec(dir, RM_DATA_TOKENS, 8, 80000, 0);
    CU_ASSERT_EQUAL_FATAL(rm_data_open(&t, RM_SPLIT_TRAIN, &d, &e), RM_OK);
    CU_ASSERT_EQUAL(d.info.n, 3);
    rm_data_slice_rows(&d, 2, 1, x, y); /* window 2 = the first of shard _000001 (name order) */
    CU_ASSERT_EQUAL(x[3], 70000);
    CU_ASSERT_EQUAL(y[7], (int32_t)tok[8]);
    rm_data_close(&d);
    CU_ASSERT_EQUAL_FATAL(rm_data_open(&t, RM_SPLIT_TEST, &d, &e), RM_OK);
    CU_ASSERT_EQUAL(d.info.n, 1);
    rm_data_slice_rows(&d, 0, 1, x, y);
    CU_ASSERT_EQUAL(x[0], (int32_t)tok[20]);
    rm_data_close(&d);
}

/* bytes of a shard with the header words given and `tokens` uint16 after it */
static void write_raw(const char *name, int32_t magic, int32_t version, int32_t count, int tokens)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    size_t n = 1024 + (size_t)tokens * 2;
    unsigned char *b = calloc(1, n);
    memcpy(b, &magic, 4);
    memcpy(b + 4, &version, 4);
    memcpy(b + 8, &count, 4);
    rm_test_write_file(path, b, n);
    free(b);
}

static void expect_refused(const char *name, int context, const char *want)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    rm_training_spec t = spec(path, RM_DATA_TOKENS, context, 100, 0.5);
    rm_data d;
    rm_err e = {0};
    int rc = rm_data_open(&t, RM_SPLIT_TRAIN, &d, &e);
    CU_ASSERT_NOT_EQUAL(rc, RM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
    if (rc == RM_OK || !strstr(e.msg, want))
        fprintf(stderr, "\n  %s: rc %d \"%s\" (wanted \"%s\")", name, rc, e.msg, want);
    if (rc == RM_OK)
        rm_data_close(&d);
}

static void test_bad_files(void)
{
    write_raw("magic.bin", 12345, 1, 10, 10);
    expect_refused("magic.bin", 2, "magic 12345");
    write_raw("version.bin", RM_TOK_MAGIC_U16, 7, 10, 10);
    expect_refused("version.bin", 2, "version 7 does not go with magic");
    write_raw("short.bin", RM_TOK_MAGIC_U16, 1, 10, 9);
    expect_refused("short.bin", 2, "truncated");
    write_raw("long.bin", RM_TOK_MAGIC_U16, 1, 10, 11);
    expect_refused("long.bin", 2, "trailing bytes");
    write_raw("tiny.bin", RM_TOK_MAGIC_U16, 1, 10, 10);
    expect_refused("tiny.bin", 8, "no window of context 8");
    expect_refused("tiny.bin", 0, "spec.training.model.context");
    char path[1024];
    snprintf(path, sizeof path, "%s/headless.bin", g_dir);
    rm_test_write_file(path, "abc", 3);
    expect_refused("headless.bin", 2, "shorter than a token shard's");
    expect_refused("nothing-here.bin", 2, "nothing-here.bin");
    /* a folder without validation shards */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/trainonly", g_dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/x_train_000000.bin", dir);
    uint32_t tok[20] = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_tok_write_shard(path, tok, 20, &e), RM_OK);
    rm_training_spec t = spec(dir, RM_DATA_TOKENS, 4, 10, 0);
    rm_data d;
    CU_ASSERT_EQUAL(rm_data_open(&t, RM_SPLIT_TEST, &d, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "no *_val_*.bin token shards"));
}

void rm_suite_stream(void)
{
    static const rm_test_case cases[] = {
        {"text_windows", test_text_windows},
        {"token_shards", test_token_shards},
        {"bad_files", test_bad_files},
    };
    RM_ADD_SUITE("stream", setup, teardown, cases);
}
