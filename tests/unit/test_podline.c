/* Tests for the swarm runtime's line protocol (common/podline.h): every field of a start line
 * parsed, every bad line refused naming its field, render and parse agreeing, and the stream
 * splitter dropping an overlong line without losing the next one. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/podline.h"
#include "tests/unit/testutil.h"

#define START "start 1234-uid/worker url=http://127.0.0.1:29400 job=default/mnist token=abc123 id=7"

static void test_start_line_fields(void)
{
    rm_podline l;
    rm_err e = {0};
    const char *line = START " ip=127.0.0.9 steps=40\n";
    CU_ASSERT_EQUAL_FATAL(rm_podline_parse(line, strlen(line), &l, &e), RM_OK);
    CU_ASSERT_EQUAL(l.verb, RM_PODLINE_START);
    CU_ASSERT_STRING_EQUAL(l.key, "1234-uid/worker");
    CU_ASSERT_STRING_EQUAL(l.url, "http://127.0.0.1:29400");
    CU_ASSERT_STRING_EQUAL(l.job, "default/mnist");
    CU_ASSERT_STRING_EQUAL(l.token, "abc123");
    CU_ASSERT_STRING_EQUAL(l.ip, "127.0.0.9");
    CU_ASSERT_EQUAL(l.id, 7);
    CU_ASSERT_EQUAL(l.steps, 40);
    /* ip and steps are optional */
    CU_ASSERT_EQUAL_FATAL(rm_podline_parse(START, strlen(START), &l, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(l.ip, "");
    CU_ASSERT_EQUAL(l.steps, 0);
    const char *k = "kill a/b code=137";
    CU_ASSERT_EQUAL_FATAL(rm_podline_parse(k, strlen(k), &l, &e), RM_OK);
    CU_ASSERT_EQUAL(l.verb, RM_PODLINE_KILL);
    CU_ASSERT_EQUAL(l.code, 137);
    const char *h = "hang a/b\n";
    CU_ASSERT_EQUAL_FATAL(rm_podline_parse(h, strlen(h), &l, &e), RM_OK);
    CU_ASSERT_EQUAL(l.verb, RM_PODLINE_HANG);
    CU_ASSERT_STRING_EQUAL(l.key, "a/b");
}

/* Each bad line: the field its error names, and a fragment of the message. */
static void test_bad_lines_are_named(void)
{
    char longtok[400];
    memset(longtok, 'x', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = 0;
    char toolong[600];
    snprintf(toolong, sizeof toolong, "start k url=http://127.0.0.1:1 job=a/b token=%s id=1", longtok);
    static const struct {
        const char *line, *field, *msg;
    } cases[] = {
        {"begin k", "verb", "is not start"},
        {"", "verb", "is not start"},
        {"stop", "key", "is missing"},
        {"stop  k", "key", "is empty"},
        {"stop k\tx", "key", "control byte"},
        {"stop k extra", "line", "not NAME=VALUE"},
        {"stop k ", "line", "trailing space"},
        {"stop k code=1", "code", "is not a field of stop"},
        {"exit k", "code", "is required"},
        {"exit k code=256", "code", "not in 0..255"},
        {"exit k code=1x", "code", "is not a number"},
        {"kill k code=-1", "code", "not in 0..255"},
        {"start k job=a/b token=t id=1", "url", "is required"},
        {"start k url=http://127.0.0.1:1 token=t id=1", "job", "is required"},
        {"start k url=http://127.0.0.1:1 job=a/b id=1", "token", "is required"},
        {"start k url=http://127.0.0.1:1 job=a/b token=t", "id", "is required"},
        {"start k url=https://h:1 job=a/b token=t id=1", "url", "must be http://A.B.C.D:PORT"},
        {"start k url=http://127.0.0.1:70000 job=a/b token=t id=1", "url", "must be http"},
        {"start k url=http://127.0.0.1:1 job=ab token=t id=1", "job", "namespace/name"},
        {"start k url=http://127.0.0.1:1 job=a/b/c token=t id=1", "job", "namespace/name"},
        {"start k url=http://127.0.0.1:1 job=a/b token= id=1", "token", "is empty"},
        {"start k url=http://127.0.0.1:1 job=a/b token=t id=seven", "id", "is not a number"},
        {"start k url=http://127.0.0.1:1 job=a/b token=t id=-1", "id", "not in 0..1000000"},
        {"start k url=http://127.0.0.1:1 job=a/b token=t id=1 steps=0", "steps", "not in 1.."},
        {"start k url=http://127.0.0.1:1 job=a/b token=t id=1 ip=localhost", "ip", "must be A.B.C.D"},
        {"start k url=http://127.0.0.1:1 job=a/b token=t id=1 id=2", "id", "is given twice"},
        {"start k url=http://127.0.0.1:1 job=a/b token=t id=1 color=red", "color", "is not a field of start"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rm_podline l;
        rm_err e = {0};
        int rc = rm_podline_parse(cases[i].line, strlen(cases[i].line), &l, &e);
        if (rc != RM_EINVAL || strcmp(e.field, cases[i].field) || !strstr(e.msg, cases[i].msg))
            fprintf(stderr, "line \"%s\": rc %d field \"%s\" msg \"%s\"\n", cases[i].line, rc, e.field,
                    e.msg);
        CU_ASSERT_EQUAL(rc, RM_EINVAL);
        CU_ASSERT_STRING_EQUAL(e.field, cases[i].field);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, cases[i].msg));
    }
    rm_podline l;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_podline_parse(toolong, strlen(toolong), &l, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "token");
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "over the cap of 255"));
    /* a bad start still yields its key, so the swarm can answer for that pod */
    CU_ASSERT_STRING_EQUAL(l.key, "k");
    CU_ASSERT_EQUAL(l.verb, RM_PODLINE_START);
}

static void test_format_parses_back(void)
{
    rm_podline a = {.verb = RM_PODLINE_START, .id = 12, .steps = 99};
    snprintf(a.key, sizeof a.key, "uid-1/worker");
    snprintf(a.url, sizeof a.url, "http://127.0.0.1:29400");
    snprintf(a.job, sizeof a.job, "team-a/gpt");
    snprintf(a.token, sizeof a.token, "0123abcd");
    snprintf(a.ip, sizeof a.ip, "127.0.3.4");
    char buf[RM_PODLINE_MAX];
    int n = rm_podline_format(&a, buf, sizeof buf);
    CU_ASSERT_FATAL(n > 0);
    CU_ASSERT_EQUAL(buf[n - 1], '\n');
    rm_podline b;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_podline_parse(buf, (size_t)n, &b, &e), RM_OK);
    CU_ASSERT_EQUAL(b.verb, a.verb);
    CU_ASSERT_STRING_EQUAL(b.key, a.key);
    CU_ASSERT_STRING_EQUAL(b.url, a.url);
    CU_ASSERT_STRING_EQUAL(b.job, a.job);
    CU_ASSERT_STRING_EQUAL(b.token, a.token);
    CU_ASSERT_STRING_EQUAL(b.ip, a.ip);
    CU_ASSERT_EQUAL(b.id, a.id);
    CU_ASSERT_EQUAL(b.steps, a.steps);
    rm_podline x = {.verb = RM_PODLINE_EXIT, .code = 3};
    snprintf(x.key, sizeof x.key, "k");
    CU_ASSERT_EQUAL(rm_podline_format(&x, buf, sizeof buf), (int)strlen("exit k code=3\n"));
    CU_ASSERT_STRING_EQUAL(buf, "exit k code=3\n");
    /* what would not parse back is refused */
    snprintf(a.token, sizeof a.token, "two words");
    CU_ASSERT_EQUAL(rm_podline_format(&a, buf, sizeof buf), RM_EINVAL);
    x.code = 300;
    CU_ASSERT_EQUAL(rm_podline_format(&x, buf, sizeof buf), RM_EINVAL);
    x.code = 0;
    CU_ASSERT_EQUAL(rm_podline_format(&x, buf, 5), RM_ETOOBIG);
}

static void feed(rm_podline_in *in, const char *s, size_t n)
{
    size_t room;
    char *p = rm_podline_space(in, &room);
    CU_ASSERT_FATAL(room >= n);
    memcpy(p, s, n);
    rm_podline_fed(in, n);
}

static void test_stream_splits_and_caps_lines(void)
{
    rm_podline_in *in = calloc(1, sizeof *in);
    CU_ASSERT_FATAL(in != NULL);
    char line[RM_PODLINE_MAX];
    rm_err e = {0};
    feed(in, "stop a\nsto", 10);
    CU_ASSERT_EQUAL(rm_podline_take(in, line, &e), 1);
    CU_ASSERT_STRING_EQUAL(line, "stop a");
    CU_ASSERT_EQUAL(rm_podline_take(in, line, &e), 0); /* half a line waits */
    feed(in, "p b\n", 4);
    CU_ASSERT_EQUAL(rm_podline_take(in, line, &e), 1);
    CU_ASSERT_STRING_EQUAL(line, "stop b");
    /* a line over the cap, in two pieces, then a good one: dropped, named, the next one intact */
    char big[RM_PODLINE_MAX + 100];
    memset(big, 'y', sizeof big);
    feed(in, big, sizeof big);
    CU_ASSERT_EQUAL(rm_podline_take(in, line, &e), RM_ETOOBIG);
    CU_ASSERT_STRING_EQUAL(e.field, "line");
    CU_ASSERT_EQUAL(rm_podline_take(in, line, &e), 0);
    feed(in, big, 200);
    feed(in, "\nstop c\n", 8);
    CU_ASSERT_EQUAL(rm_podline_take(in, line, &e), 1);
    CU_ASSERT_STRING_EQUAL(line, "stop c");
    CU_ASSERT_EQUAL(rm_podline_take(in, line, &e), 0);
    free(in);
}

/* The output queue writes what a pipe takes and keeps the rest; a closed reader is an error. */
static void test_out_queue_waits_for_the_reader(void)
{
    int fds[2];
    CU_ASSERT_FATAL(pipe(fds) == 0);
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    fcntl(fds[1], F_SETPIPE_SZ, 4096);
    rm_podline_out q = {0};
    rm_podline l = {.verb = RM_PODLINE_EXIT, .code = 0};
    int lines = 0;
    for (; lines < 5000; lines++) { /* 150 KB: more than a pipe holds, whatever its size */
        snprintf(l.key, sizeof l.key, "pod-%04d/worker", lines);
        CU_ASSERT_EQUAL_FATAL(rm_podline_queue(&q, &l), RM_OK);
    }
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_podline_flush(&q, fds[1], &e), RM_OK);
    CU_ASSERT(rm_podline_pending(&q)); /* more than the pipe holds */
    /* read everything while flushing: every line arrives once, in order */
    rm_podline_in *in = calloc(1, sizeof *in);
    CU_ASSERT_FATAL(in != NULL);
    char line[RM_PODLINE_MAX];
    int got = 0;
    bool ordered = true;
    while (got < lines) {
        size_t room;
        char *p = rm_podline_space(in, &room);
        ssize_t n = read(fds[0], p, room);
        CU_ASSERT_FATAL(n > 0);
        rm_podline_fed(in, (size_t)n);
        while (rm_podline_take(in, line, &e) == 1) {
            char want[64];
            snprintf(want, sizeof want, "exit pod-%04d/worker code=0", got++);
            ordered = ordered && !strcmp(line, want);
        }
        CU_ASSERT_EQUAL(rm_podline_flush(&q, fds[1], &e), RM_OK);
    }
    CU_ASSERT(ordered);
    CU_ASSERT(!rm_podline_pending(&q));
    CU_ASSERT_EQUAL(rm_podline_queue(&q, &l), RM_OK);
    close(fds[0]);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_podline_flush(&q, fds[1], &e), RM_EIO);
    CU_ASSERT(!rm_podline_pending(&q));
    close(fds[1]);
    rm_podline_out_free(&q);
    free(in);
}

void rm_suite_podline(void)
{
    static const rm_test_case cases[] = {
        {"start_line_fields_parsed", test_start_line_fields},
        {"bad_lines_name_their_field", test_bad_lines_are_named},
        {"format_parses_back", test_format_parses_back},
        {"stream_splits_lines_and_drops_overlong_ones", test_stream_splits_and_caps_lines},
        {"out_queue_waits_for_the_reader", test_out_queue_waits_for_the_reader},
    };
    RM_ADD_SUITE("podline", NULL, NULL, cases);
}
