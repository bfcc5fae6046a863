/* test_safetensors.c — the safetensors codec (common/safetensors.h): a round trip of every kind of
 * tensor the format allows (scalars, empty tensors, bf16 and i64 beside f32) with metadata, byte
 * for byte against a file laid out by hand the way the format's specification shows; every rule a
 * reader must enforce refused with a message naming the tensor and the field; writes that are
 * refused or fail leave the previous file as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/safetensors.h"
#include "tests/unit/testutil.h"

static char *g_dir;
static int setup(void)
{
    return (g_dir = rm_test_tmpdir("safetensors")) ? 0 : 1;
}
static int teardown(void)
{
    return rm_test_tmpdir_free(&g_dir);
}

static void test_round_trip(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[4] = {0x3f80, 0x4000, 0xbf80, 0}; /* bf16 1, 2, -1, 0 */
    int64_t c = -7;
    int64_t sa[2] = {2, 3}, sb[1] = {4}, se[2] = {0, 5};
    rm_st_entry e[] = {
        {"transformer.h.0.attn.c_attn.weight", RM_ST_F32, 2, sa, a},
        {"b16", RM_ST_BF16, 1, sb, b},
        {"scalar", RM_ST_I64, 0, NULL, &c},
        {"empty", RM_ST_U8, 2, se, NULL},
    };
    const char *meta[] = {"format", "pt", "producer", "ringmaster", NULL};
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", g_dir);
    rm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(rm_st_write(path, e, 4, meta, &err), RM_OK);
    size_t len = 0;
    unsigned char *raw = (unsigned char *)rm_test_read_file(path, &len);
    CU_ASSERT_FATAL(raw && len > 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | raw[i];
    CU_ASSERT_EQUAL(n % 8, 0); /* padded to a multiple of 8 */
    CU_ASSERT_EQUAL(len, 8 + n + sizeof a + sizeof b + sizeof c);
    CU_ASSERT_EQUAL(raw[8], '{');
    CU_ASSERT_EQUAL(raw[8 + n - 1] == ' ' || raw[8 + n - 1] == '}', 1);
    CU_ASSERT_EQUAL(memcmp(raw + 8 + n, a, sizeof a), 0); /* the data in entry order */
    free(raw);

    rm_st_file f;
    CU_ASSERT_EQUAL_FATAL(rm_st_open(path, &f, &err), RM_OK);
    CU_ASSERT_EQUAL(f.n, 4);
    const rm_st_tensor *t = rm_st_find(&f, "transformer.h.0.attn.c_attn.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->dtype, RM_ST_F32);
    CU_ASSERT_EQUAL(t->ndim, 2);
    CU_ASSERT_EQUAL(t->shape[1], 3);
    CU_ASSERT_EQUAL(memcmp(rm_st_data(&f, t), a, sizeof a), 0);
    t = rm_st_find(&f, "b16");
    CU_ASSERT_EQUAL(memcmp(rm_st_data(&f, t), b, sizeof b), 0);
    t = rm_st_find(&f, "scalar");
    CU_ASSERT_EQUAL(t->ndim, 0);
    CU_ASSERT_EQUAL(*(const int64_t *)rm_st_data(&f, t), -7);
    t = rm_st_find(&f, "empty");
    CU_ASSERT_EQUAL(t->end - t->begin, 0);
    CU_ASSERT_PTR_NULL(rm_st_find(&f, "missing"));
    CU_ASSERT_STRING_EQUAL(rm_st_meta(&f, "format"), "pt");
    CU_ASSERT_STRING_EQUAL(rm_st_meta(&f, "producer"), "ringmaster");
    rm_st_close(&f);
    rm_st_close(&f); /* idempotent */
}

/* A file as the format's specification lays it out, written by hand: the reader takes it. */
static void test_reads_foreign_layout(void)
{
    const char *js = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                     "\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t jl = strlen(js);
    unsigned char buf[256];
    memset(buf, 0, sizeof buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, js, jl);
    int32_t ai[2] = {5, -6};
    float bf = 2.5f;
    memcpy(buf + 8 + jl, ai, 8);
    memcpy(buf + 8 + jl + 8, &bf, 4);
    rm_st_file f;
    rm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(rm_st_parse(buf, 8 + jl + 12, "hand", &f, &err), RM_OK);
    CU_ASSERT_STRING_EQUAL(f.t[0].name, "a"); /* in file order */
    CU_ASSERT_EQUAL(((const int32_t *)rm_st_data(&f, rm_st_find(&f, "a")))[1], -6);
    CU_ASSERT_EQUAL(*(const float *)rm_st_data(&f, rm_st_find(&f, "b")), 2.5f);
    rm_st_close(&f);
}

/* header JSON + data bytes -> a buffer; rm_st_parse must refuse it with `want` in the message */
static void refuse(const char *js, size_t data, const char *want)
{
    size_t jl = strlen(js);
    unsigned char *buf = calloc(1, 8 + jl + data + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, js, jl);
    rm_st_file f;
    rm_err err = {0};
    int rc = rm_st_parse(buf, 8 + jl + data, "x.safetensors", &f, &err);
    CU_ASSERT_EQUAL(rc, RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));
    if (rc != RM_EINVAL || !strstr(err.msg, want))
        fprintf(stderr, "\n  %s: rc %d msg \"%s\" (wanted \"%s\")", js, rc, err.msg, want);
    CU_ASSERT_PTR_NULL(f.t); /* nothing kept */
    free(buf);
}

static void test_refuses_bad_files(void)
{
    refuse("[1,2]", 0, "not a JSON object");
    refuse("{\"a\":", 0, "not valid JSON");
    refuse("{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "\"a\": dtype");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "\"a\": shape");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "\"a\": shape");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
           "at most 8");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "span 4 bytes");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, "outside the 4-byte");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "data_offsets");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "\"a\": data_offsets");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
           "unknown field \"x\"");
    /* a gap, an overlap, bytes after the last tensor, a name twice */
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "starts at byte 4");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
           8, "without gaps or overlaps");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "cover 4 of the 8 bytes");
    refuse("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
           8, "appears twice");
    refuse("{\"__metadata__\":{\"format\":1}}", 0, "__metadata__.format");
    refuse("{\"__metadata__\":[]}", 0, "__metadata__: not an object");
    refuse("{} x", 0, "after the header");
    /* the length word: beyond the file, beyond the cap, shorter than itself */
    unsigned char small[12] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    rm_st_file f;
    rm_err err = {0};
    CU_ASSERT_EQUAL(rm_st_parse(small, sizeof small, "len", &f, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "header length 65535"));
    CU_ASSERT_EQUAL(rm_st_parse(small, 5, "short", &f, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "shorter than the 8-byte"));
    char path[1024];
    snprintf(path, sizeof path, "%s/missing.safetensors", g_dir);
    CU_ASSERT_EQUAL(rm_st_open(path, &f, &err), RM_EIO);
    CU_ASSERT_EQUAL(rm_st_open(g_dir, &f, &err), RM_EIO); /* a folder */
}

static void test_write_refusals_keep_the_old_file(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/keep.safetensors", g_dir);
    float v = 1;
    int64_t s1[1] = {1}, neg[1] = {-2};
    rm_st_entry ok = {"w", RM_ST_F32, 1, s1, &v};
    rm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(rm_st_write(path, &ok, 1, NULL, &err), RM_OK);
    size_t before = 0;
    char *old = rm_test_read_file(path, &before);
    rm_st_entry dup[2] = {ok, ok};
    CU_ASSERT_EQUAL(rm_st_write(path, dup, 2, NULL, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "used twice"));
    rm_st_entry res = {"__metadata__", RM_ST_F32, 1, s1, &v};
    CU_ASSERT_EQUAL(rm_st_write(path, &res, 1, NULL, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "reserved"));
    rm_st_entry bad = {"n", RM_ST_F32, 1, neg, &v};
    CU_ASSERT_EQUAL(rm_st_write(path, &bad, 1, NULL, &err), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "negative"));
    rm_st_entry noname = {"", RM_ST_F32, 1, s1, &v};
    CU_ASSERT_EQUAL(rm_st_write(path, &noname, 1, NULL, &err), RM_EINVAL);
    size_t after = 0;
    char *now = rm_test_read_file(path, &after);
    CU_ASSERT_EQUAL(before, after);
    CU_ASSERT_EQUAL(memcmp(old, now, before), 0);
    free(old);
    free(now);
    /* a folder that does not exist: RM_EIO naming the path, nothing left behind */
    char nodir[1100];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.safetensors", g_dir);
    CU_ASSERT_EQUAL(rm_st_write(nodir, &ok, 1, NULL, &err), RM_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "x.safetensors"));
}

void rm_suite_safetensors(void)
{
    static const rm_test_case cases[] = {
        {"round_trip", test_round_trip},
        {"reads_foreign_layout", test_reads_foreign_layout},
        {"refuses_bad_files", test_refuses_bad_files},
        {"write_refusals_keep_the_old_file", test_write_refusals_keep_the_old_file},
    };
    RM_ADD_SUITE("safetensors", setup, teardown, cases);
}
