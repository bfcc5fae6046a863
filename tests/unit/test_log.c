/* Tests for common/log: text and JSON renderings, quoting, escaping, fixed fields, truncation,
 * and that concurrent writers never interleave lines. */
#include "common/log.h"
#include "tests/unit/testutil.h"
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int log_setup(void)
{
    unsetenv("RINGMASTER_LOG_LEVEL");
    unsetenv("RINGMASTER_LOG_FORMAT");
    return 0;
}

static int log_teardown(void)
{
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, NULL);
    rm_log_set_fields(NULL);
    return 0;
}

static void test_text_format(void)
{
    char buf[1024];
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, "worker");
    rm_log_set_fields(NULL);
    size_t n = rm_log_format_line(buf, sizeof buf, RM_LOG_INFO, "ring connected peer=%d rank=%d", 1, 0);
    CU_ASSERT_EQUAL(n, strlen(buf));
    CU_ASSERT_EQUAL(strncmp(buf, "ts=", 3), 0);
    /* ts=YYYY-MM-DDTHH:MM:SS.mmmZ */
    CU_ASSERT_EQUAL(buf[3 + 10], 'T');
    CU_ASSERT_EQUAL(buf[3 + 23], 'Z');
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, " level=info comp=worker msg=\"ring connected\" peer=1 rank=0"));
    CU_ASSERT_PTR_NULL(strchr(buf, '\n'));
}

static void test_text_quoting(void)
{
    char buf[1024];
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, NULL);
    rm_log_format_line(buf, sizeof buf, RM_LOG_WARN, "bad thing path=\"%s\" plain=%s", "a b c", "x\"y");
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "level=warn msg=\"bad thing\" path=\"a b c\" plain=\"x\\\"y\""));
    /* comp unset: no comp field */
    CU_ASSERT_PTR_NULL(strstr(buf, "comp="));
    /* a quoted value with escaped quote inside stays one value */
    rm_log_format_line(buf, sizeof buf, RM_LOG_INFO, "m q=\"say \\\"hi\\\" now\" z=1");
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "q=\"say \\\"hi\\\" now\" z=1"));
    /* empty value is quoted */
    rm_log_format_line(buf, sizeof buf, RM_LOG_INFO, "m e=");
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, " e=\"\""));
    /* control characters from the network (a request path) cannot reach the terminal raw:
     * escaped as in JSON, in the message and in quoted and bare values alike */
    rm_log_format_line(buf, sizeof buf, RM_LOG_WARN, "refused\x1b[2J path=\"/v1/\x1b]0;x\x07\" id=a\x7f");
    CU_ASSERT_PTR_NULL(strchr(buf, 0x1b));
    CU_ASSERT_PTR_NULL(strchr(buf, 0x07));
    CU_ASSERT_PTR_NULL(strchr(buf, 0x7f));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "msg=\"refused\\u001b[2J\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, " path=\"/v1/\\u001b]0;x\\u0007\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, " id=\"a\\u007f\""));
}

static void test_json_format(void)
{
    char buf[2048];
    rm_log_init(RM_LOG_DEBUG, RM_LOG_JSON, "op");
    rm_log_set_fields("rank=3 job=default/x");
    rm_log_format_line(buf, sizeof buf, RM_LOG_ERROR, "it failed badly err=\"%s\" n=%d",
                       "line1\nline2 \"q\" \\ \x01", 7);
    cJSON *o = cJSON_Parse(buf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "level")->valuestring, "error");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "comp")->valuestring, "op");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "msg")->valuestring, "it failed badly");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "err")->valuestring, "line1\nline2 \"q\" \\ \x01");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "n")->valuestring, "7");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "rank")->valuestring, "3");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "job")->valuestring, "default/x");
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(o, "ts"));
    cJSON_Delete(o);
    /* no raw control characters or newlines in the line */
    for (const char *p = buf; *p; p++)
        CU_ASSERT((unsigned char)*p >= 0x20);
    rm_log_set_fields(NULL);
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, NULL);
}

static void test_truncation_stays_valid(void)
{
    char big[6000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    char buf[512];
    rm_log_init(RM_LOG_INFO, RM_LOG_JSON, NULL);
    size_t n = rm_log_format_line(buf, sizeof buf, RM_LOG_INFO, "msg k=1 huge=%s after=2", big);
    CU_ASSERT(n < sizeof buf);
    cJSON *o = cJSON_Parse(buf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(o, "k")->valuestring, "1");
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(o, "huge"));
    CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(o, "truncated"));
    cJSON_Delete(o);
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, NULL);
}

/* Text mode: when the message does not fit, nothing after it may appear either (as in JSON),
 * so a truncated line is always a prefix of the full one plus the marker. */
static void test_text_truncated_message_drops_the_rest(void)
{
    char q[101], buf[200];
    memset(q, '"', 100);
    q[100] = 0;
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, NULL);
    size_t n = rm_log_format_line(buf, sizeof buf, RM_LOG_INFO, "%s after=2", q);
    CU_ASSERT(n < sizeof buf);
    CU_ASSERT_PTR_NULL(strstr(buf, "after=2"));
    CU_ASSERT_PTR_NULL(strstr(buf, "msg="));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, " truncated=1"));
    /* more pairs than the tokeniser holds: the line says it was cut */
    char many[1024];
    size_t m = (size_t)snprintf(many, sizeof many, "m");
    for (int i = 0; i < 70; i++)
        m += (size_t)snprintf(many + m, sizeof many - m, " k%d=%d", i, i);
    char line[4096];
    rm_log_format_line(line, sizeof line, RM_LOG_INFO, "%s", many);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, " k63=63"));
    CU_ASSERT_PTR_NULL(strstr(line, " k64=64"));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, " truncated=1"));
    /* a buffer too small for any line still comes back a (empty) string */
    char tiny[16];
    memset(tiny, 'x', sizeof tiny);
    CU_ASSERT_EQUAL(rm_log_format_line(tiny, sizeof tiny, RM_LOG_INFO, "hello"), 0);
    CU_ASSERT_EQUAL(tiny[0], 0);
    /* the same line that fits keeps both */
    n = rm_log_format_line(buf, sizeof buf, RM_LOG_INFO, "%.20s after=2", q);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "after=2"));
    CU_ASSERT_PTR_NULL(strstr(buf, "truncated"));
}

static void test_parse_and_levels(void)
{
    rm_log_level l;
    rm_log_format f;
    CU_ASSERT_EQUAL(rm_log_parse_level("debug", &l), RM_OK);
    CU_ASSERT_EQUAL(l, RM_LOG_DEBUG);
    CU_ASSERT_EQUAL(rm_log_parse_level("ERROR", &l), RM_OK);
    CU_ASSERT_EQUAL(l, RM_LOG_ERROR);
    CU_ASSERT_EQUAL(rm_log_parse_level("loud", &l), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_log_parse_level(NULL, &l), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_log_parse_format("json", &f), RM_OK);
    CU_ASSERT_EQUAL(f, RM_LOG_JSON);
    CU_ASSERT_EQUAL(rm_log_parse_format("xml", &f), RM_EINVAL);
    rm_log_init(RM_LOG_WARN, RM_LOG_TEXT, NULL);
    CU_ASSERT_FALSE(rm_log_enabled(RM_LOG_INFO));
    CU_ASSERT_TRUE(rm_log_enabled(RM_LOG_WARN));
    setenv("RINGMASTER_LOG_LEVEL", "debug", 1);
    rm_log_init(RM_LOG_WARN, RM_LOG_TEXT, NULL);
    CU_ASSERT_TRUE(rm_log_enabled(RM_LOG_DEBUG)); /* env overrides */
    unsetenv("RINGMASTER_LOG_LEVEL");
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, NULL);
}

static void test_rm_err(void)
{
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_errf(&e, RM_EIO, "disk %s", "gone"), RM_EIO);
    CU_ASSERT_STRING_EQUAL(e.msg, "disk gone");
    CU_ASSERT_EQUAL(e.code, RM_EIO);
    CU_ASSERT_STRING_EQUAL(e.field, "");
    CU_ASSERT_EQUAL(rm_err_field(&e, RM_EINVAL, "spec.minReplicas", "must be <= %s", "spec.replicas"),
                    RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.minReplicas");
    CU_ASSERT_STRING_EQUAL(e.msg, "spec.minReplicas: must be <= spec.replicas");
    CU_ASSERT_EQUAL(rm_errf(NULL, RM_ETIMEDOUT, "x"), RM_ETIMEDOUT);
    CU_ASSERT_STRING_EQUAL(rm_strerror(RM_ETOOBIG), "too big");
    CU_ASSERT_STRING_EQUAL(rm_strerror(-999), "unknown error");
    for (int c = 0; c >= RM_EUNSUPPORTED; c--)
        CU_ASSERT_STRING_NOT_EQUAL(rm_strerror(c), "unknown error");
}

#define NTHREADS 4
#define NLINES 200
static void *writer(void *arg)
{
    long id = (long)arg;
    char pad[300];
    memset(pad, 'p', sizeof pad - 1);
    pad[sizeof pad - 1] = 0;
    for (int i = 0; i < NLINES; i++)
        rm_info("concurrent line thread=%ld i=%d pad=%s", id, i, pad);
    return NULL;
}

static void test_concurrent_lines_do_not_interleave(void)
{
    char *dir = rm_test_tmpdir("log");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/log.txt", dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    int saved = dup(2);
    CU_ASSERT_FATAL(fd >= 0 && saved >= 0);
    dup2(fd, 2);
    rm_log_init(RM_LOG_INFO, RM_LOG_JSON, "t");
    pthread_t th[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        pthread_create(&th[i], NULL, writer, (void *)i);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    rm_debug("hidden line");
    dup2(saved, 2);
    close(saved);
    close(fd);
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, NULL);
    char *text = rm_test_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    int lines = 0, good = 0;
    for (char *save = NULL, *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        lines++;
        cJSON *o = cJSON_Parse(ln);
        if (o && cJSON_GetObjectItem(o, "pad") && strlen(cJSON_GetObjectItem(o, "pad")->valuestring) == 299)
            good++;
        cJSON_Delete(o);
    }
    CU_ASSERT_EQUAL(lines, NTHREADS * NLINES);
    CU_ASSERT_EQUAL(good, NTHREADS * NLINES);
    free(text);
    rm_test_rmtree(dir);
    free(dir);
}

/* An RM_CHECK trail (docs/c-style.md#the-habits) logs its first failing hop at warn (with its file:line),
 * the hops that pass the error on at debug; a new error starts a new trail. */
static int trail_inner(rm_err *e)
{
    return rm_errf(e, RM_EIO, "disk on fire");
}
static int trail_middle(rm_err *e)
{
    RM_CHECK(trail_inner(e));
    return RM_OK;
}
static int trail_outer(rm_err *e)
{
    RM_CHECK(trail_middle(e));
    return RM_OK;
}

static void test_check_trail_first_hop_warns(void)
{
    char *dir = rm_test_tmpdir("log");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/trail.txt", dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    int saved = dup(2);
    CU_ASSERT_FATAL(fd >= 0 && saved >= 0);
    dup2(fd, 2);
    rm_log_init(RM_LOG_DEBUG, RM_LOG_TEXT, NULL);
    rm_err e = {0};
    CU_ASSERT_EQUAL(trail_outer(&e), RM_EIO);
    CU_ASSERT_EQUAL(trail_outer(&e), RM_EIO); /* a second error: a second trail */
    dup2(saved, 2);
    close(saved);
    close(fd);
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, NULL);
    char *text = rm_test_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    int warn = 0, debug = 0;
    for (char *save = NULL, *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (!strstr(ln, "check failed"))
            continue;
        if (strstr(ln, "level=warn")) {
            warn++;
            CU_ASSERT_PTR_NOT_NULL(strstr(ln, "call=\"trail_inner(e)\""));
            CU_ASSERT_PTR_NOT_NULL(strstr(ln, "src=test_log.c:"));
        } else if (strstr(ln, "level=debug")) {
            debug++;
            CU_ASSERT_PTR_NOT_NULL(strstr(ln, "call=\"trail_middle(e)\""));
        }
    }
    CU_ASSERT_EQUAL(warn, 2);
    CU_ASSERT_EQUAL(debug, 2);
    free(text);
    rm_test_rmtree(dir);
    free(dir);
}

void rm_suite_log(void)
{
    static const rm_test_case cases[] = {
        {"text_format", test_text_format},
        {"check_trail_first_hop_warns", test_check_trail_first_hop_warns},
        {"text_quoting", test_text_quoting},
        {"json_format_escaping", test_json_format},
        {"truncation_stays_valid", test_truncation_stays_valid},
        {"text_truncated_message_drops_the_rest", test_text_truncated_message_drops_the_rest},
        {"parse_and_levels", test_parse_and_levels},
        {"rm_err", test_rm_err},
        {"concurrent_lines_do_not_interleave", test_concurrent_lines_do_not_interleave},
    };
    RM_ADD_SUITE("log", log_setup, log_teardown, cases);
}
