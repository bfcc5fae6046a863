/* Tests for common/metrics: exact exposition text (escaping, histogram layout), validation,
 * re-registration, concurrent lock-free updates, and a live scrape checked by promtool. */
#include "common/httpc.h"
#include "common/metrics.h"
#include "tests/unit/testutil.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void test_exact_exposition(void)
{
    rm_metrics *m = rm_metrics_new();
    rm_err e = {0};
    rm_metric *c, *gg, *h;
    static const char *const lbl[] = {"job", "path", NULL};
    CU_ASSERT_EQUAL_FATAL(
        rm_metrics_counter(m, "rm_requests_total", "Requests \\ served\nso far.", lbl, &c, &e), RM_OK);
    CU_ASSERT_EQUAL_FATAL(rm_metrics_gauge(m, "rm_temp_celsius", "Temperature.", NULL, &gg, &e), RM_OK);
    static const double b[] = {0.1, 1, 2.5};
    static const char *const hl[] = {"op", NULL};
    CU_ASSERT_EQUAL_FATAL(rm_metrics_histogram(m, "rm_latency_seconds", "Latency.", hl, b, 3, &h, &e), RM_OK);
    rm_series_inc(rm_metric_with2(c, "a\\b", "say \"hi\"\nbye"), 2);
    rm_series_inc(rm_metric_with2(c, "plain", "/x"), 1.5);
    rm_series_set(rm_metric_series(gg), -3.25);
    rm_series *hs = rm_metric_with1(h, "read");
    rm_series_observe(hs, 0.05);
    rm_series_observe(hs, 0.1); /* le is inclusive */
    rm_series_observe(hs, 2);
    rm_series_observe(hs, 100);
    size_t len = 0;
    char *out = rm_metrics_render(m, &len);
    const char *want = "# HELP rm_requests_total Requests \\\\ served\\nso far.\n"
                       "# TYPE rm_requests_total counter\n"
                       "rm_requests_total{job=\"a\\\\b\",path=\"say \\\"hi\\\"\\nbye\"} 2\n"
                       "rm_requests_total{job=\"plain\",path=\"/x\"} 1.5\n"
                       "# HELP rm_temp_celsius Temperature.\n"
                       "# TYPE rm_temp_celsius gauge\n"
                       "rm_temp_celsius -3.25\n"
                       "# HELP rm_latency_seconds Latency.\n"
                       "# TYPE rm_latency_seconds histogram\n"
                       "rm_latency_seconds_bucket{op=\"read\",le=\"0.1\"} 2\n"
                       "rm_latency_seconds_bucket{op=\"read\",le=\"1\"} 2\n"
                       "rm_latency_seconds_bucket{op=\"read\",le=\"2.5\"} 3\n"
                       "rm_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n"
                       "rm_latency_seconds_sum{op=\"read\"} 102.15\n"
                       "rm_latency_seconds_count{op=\"read\"} 4\n";
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_STRING_EQUAL(out, want);
    CU_ASSERT_EQUAL(len, strlen(want));
    if (strcmp(out, want) != 0)
        fprintf(stderr, "\n--- got ---\n%s--- want ---\n%s", out, want);
    free(out);
    CU_ASSERT_EQUAL(rm_series_count(hs), 4);
    CU_ASSERT_DOUBLE_EQUAL(rm_series_value(hs), 102.15, 1e-9);
    rm_metrics_free(m);
}

static void test_specials_and_defaults(void)
{
    rm_metrics *m = rm_metrics_new();
    rm_err e = {0};
    rm_metric *g, *h;
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "g", "", NULL, &g, &e), RM_OK);
    rm_series_set(rm_metric_series(g), INFINITY);
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "h", "h", NULL, NULL, 0, &h, &e), RM_OK);
    rm_series_observe(rm_metric_series(h), 0.003);
    char *out = rm_metrics_render(m, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\ng +Inf\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "h_bucket{le=\"0.005\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "h_bucket{le=\"10\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "h_bucket{le=\"+Inf\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "h_sum 0.003\n"));
    /* 11 default buckets + Inf */
    int nb = 0;
    for (const char *p = out; (p = strstr(p, "h_bucket")); p++)
        nb++;
    CU_ASSERT_EQUAL(nb, 12);
    free(out);
    rm_series_set(rm_metric_series(g), NAN);
    out = rm_metrics_render(m, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\ng NaN\n"));
    free(out);
    rm_metrics_free(m);
}

static void test_validation(void)
{
    rm_metrics *m = rm_metrics_new();
    rm_err e = {0};
    rm_metric *f = (rm_metric *)&e;
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "1abc", "", NULL, &f, &e), RM_EINVAL);
    CU_ASSERT_PTR_NULL(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "1abc"));
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "a-b", "", NULL, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "", "", NULL, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_counter(m, NULL, "", NULL, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "a b", "", NULL, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "ns:sub_ok", "", NULL, &f, &e), RM_OK); /* colons allowed */
    static const char *const l1[] = {"__reserved", NULL};
    static const char *const l2[] = {"a:b", NULL};
    static const char *const l3[] = {"x", "x", NULL};
    static const char *const l4[] = {"le", NULL};
    static const char *const l5[] = {"9x", NULL};
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "g1", "", l1, &f, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "__reserved"));
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "g2", "", l2, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "g3", "", l3, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "g5", "", l5, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "h1", "", l4, NULL, 0, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "g4", "", l4, &f, &e), RM_OK); /* le fine on gauges */
    static const double bad1[] = {1, 1}, bad2[] = {2, 1}, bad3[] = {NAN}, ok[] = {1, INFINITY};
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "h2", "", NULL, bad1, 2, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "h3", "", NULL, bad2, 2, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "h4", "", NULL, bad3, 1, &f, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "h5", "", NULL, ok, 2, &f, &e), RM_OK);
    char *out = rm_metrics_render(m, NULL);
    CU_ASSERT_PTR_NULL(strstr(out, "1abc"));
    CU_ASSERT_PTR_NULL(strstr(out, "g1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "h5_bucket{le=\"1\"} 0\nh5_bucket{le=\"+Inf\"} 0\n"));
    free(out);
    rm_metrics_free(m);
    rm_metrics_free(NULL);
}

static void test_reregister_and_series(void)
{
    rm_metrics *m = rm_metrics_new();
    rm_err e = {0};
    rm_metric *a, *b;
    static const char *const l[] = {"job", NULL};
    static const char *const l2[] = {"job", "x", NULL};
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "c_total", "help", l, &a, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "c_total", "other help", l, &b, &e), RM_OK);
    CU_ASSERT_PTR_EQUAL(a, b);
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "c_total", "help", l, &b, &e), RM_ECONFLICT);
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "c_total", "help", l2, &b, &e), RM_ECONFLICT);
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "c_total", "help", NULL, &b, &e), RM_ECONFLICT);
    rm_metric *h;
    static const double b1[] = {1, 2}, b2[] = {1, 3};
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "lat", "", NULL, b1, 2, &h, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "lat", "", NULL, b2, 2, &b, &e), RM_ECONFLICT);
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "lat_count", "", NULL, &b, &e), RM_ECONFLICT);
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "foo_sum", "", NULL, &b, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_metrics_histogram(m, "foo", "", NULL, NULL, 0, &b, &e), RM_ECONFLICT);

    rm_series *s1 = rm_metric_with1(a, "x");
    CU_ASSERT_PTR_NOT_NULL(s1);
    CU_ASSERT_PTR_EQUAL(rm_metric_with1(a, "x"), s1);
    CU_ASSERT_PTR_NULL(rm_metric_with2(a, "x", "y")); /* wrong count */
    CU_ASSERT_PTR_NULL(rm_metric_series(a));          /* labelled: no single series */
    const char *nullv[] = {NULL};
    CU_ASSERT_PTR_NULL(rm_metric_with(a, nullv));
    rm_series_inc(s1, 5);
    rm_series_inc(s1, -1);  /* counters never go down */
    rm_series_set(s1, 100); /* not a gauge */
    CU_ASSERT_DOUBLE_EQUAL(rm_series_value(s1), 5, 0);
    const char *xv[] = {"x"};
    rm_metric_remove(a, xv);
    char *out = rm_metrics_render(m, NULL);
    CU_ASSERT_PTR_NULL(strstr(out, "c_total"));
    free(out);
    /* the pointer stays valid; updating a removed series is harmless */
    rm_series_inc(s1, 1);
    CU_ASSERT_PTR_EQUAL(rm_metric_with1(a, "x"), s1); /* revived, reset */
    CU_ASSERT_DOUBLE_EQUAL(rm_series_value(s1), 0, 0);
    out = rm_metrics_render(m, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "c_total{job=\"x\"} 0\n"));
    free(out);
    rm_metrics_free(m);
}

#define NT 4
#define NI 50000
typedef struct {
    rm_series *c, *g, *h;
} conc_t;
static void *conc_thread(void *arg)
{
    conc_t *t = arg;
    for (int i = 0; i < NI; i++) {
        rm_series_inc(t->c, 1);
        rm_series_inc(t->g, 0.5);
        rm_series_observe(t->h, (double)(i % 4));
    }
    return NULL;
}

static void test_concurrent_updates(void)
{
    rm_metrics *m = rm_metrics_new();
    rm_err e = {0};
    rm_metric *c, *g, *h;
    static const double b[] = {0.5, 1.5, 2.5};
    rm_metrics_counter(m, "ops_total", "", NULL, &c, &e);
    rm_metrics_gauge(m, "level", "", NULL, &g, &e);
    rm_metrics_histogram(m, "dist", "", NULL, b, 3, &h, &e);
    conc_t t = {rm_metric_series(c), rm_metric_series(g), rm_metric_series(h)};
    pthread_t th[NT];
    for (int i = 0; i < NT; i++)
        pthread_create(&th[i], NULL, conc_thread, &t);
    /* scrape while they run */
    for (int i = 0; i < 20; i++)
        free(rm_metrics_render(m, NULL));
    for (int i = 0; i < NT; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_DOUBLE_EQUAL(rm_series_value(t.c), NT * NI, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_series_value(t.g), NT * NI * 0.5, 0);
    CU_ASSERT_EQUAL(rm_series_count(t.h), (unsigned long long)NT * NI);
    CU_ASSERT_DOUBLE_EQUAL(rm_series_value(t.h), NT * (NI / 4) * 6.0, 0);
    char *out = rm_metrics_render(m, NULL);
    char want[128];
    snprintf(want, sizeof want, "dist_bucket{le=\"0.5\"} %d\n", NT * NI / 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    snprintf(want, sizeof want, "dist_bucket{le=\"2.5\"} %d\n", NT * NI / 4 * 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    free(out);
    rm_metrics_free(m);
}

/* Runs promtool check metrics on `text`; returns its exit status (-1 if it could not run). */
static int promtool_check(const char *text, size_t len)
{
    char *dir = rm_test_tmpdir("prom");
    if (!dir)
        return -1;
    char path[600], cmd[1400];
    snprintf(path, sizeof path, "%s/metrics.txt", dir);
    rm_test_write_file(path, text, len);
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' > '%s.out' 2>&1", path, path);
    int st = system(cmd);
    rm_test_rmtree(dir);
    free(dir);
    return st == -1 ? -1 : (WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static int have_promtool(void)
{
    return system("command -v promtool >/dev/null 2>&1") == 0;
}

static void test_promtool_live_scrape(void)
{
    if (!have_promtool()) {
        CU_FAIL("promtool not installed (apt-get install prometheus; `make deps` does it)");
        return;
    }
    rm_metrics *m = rm_metrics_new();
    rm_err e = {0};
    rm_metric *c, *g, *h;
    static const char *const l[] = {"job", "phase", NULL};
    CU_ASSERT_EQUAL(rm_metrics_counter(m, "ringmaster_test_restarts_total",
                                       "Group restarts \\ with a backslash\nand a newline.", l, &c, &e),
                    RM_OK);
    CU_ASSERT_EQUAL(rm_metrics_gauge(m, "ringmaster_test_workers", "Workers ready.", l, &g, &e), RM_OK);
    CU_ASSERT_EQUAL(
        rm_metrics_histogram(m, "ringmaster_test_step_seconds", "Step time.", NULL, NULL, 0, &h, &e), RM_OK);
    rm_series_inc(rm_metric_with2(c, "default/a\"b", "Run\\ning\nx"), 3);
    rm_series_inc(rm_metric_with2(c, "default/plain", "Running"), 1);
    rm_series_set(rm_metric_with2(g, "default/a\"b", "Running"), 4);
    for (int i = 0; i < 100; i++)
        rm_series_observe(rm_metric_series(h), i * 0.01);
    rm_http_route rt[] = {{"GET", "/metrics", 0, rm_metrics_handler, m}};
    rm_http_opts o = {.bind = "127.0.0.1:0"};
    rm_http_server *s = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_http_start(&o, rt, 1, &s, &e), RM_OK);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", rm_http_port(s));
    rm_httpc_resp r;
    CU_ASSERT_EQUAL(rm_httpc_get(url, 5000, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.body, "job=\"default/a\\\"b\",phase=\"Run\\\\ning\\nx\""));
    CU_ASSERT_EQUAL(promtool_check(r.body, r.len), 0);
    rm_httpc_resp_free(&r);
    rm_http_stop(s);
    rm_metrics_free(m);
}

/* A label value is any string, but one invalid UTF-8 byte makes Prometheus reject the whole
 * scrape ("invalid label value"): invalid sequences render as U+FFFD, valid ones unchanged. */
static void test_invalid_utf8_label_values(void)
{
    rm_metrics *m = rm_metrics_new();
    rm_err e = {0};
    rm_metric *c;
    static const char *const l[] = {"v", NULL};
    CU_ASSERT_EQUAL_FATAL(rm_metrics_counter(m, "u_total", "H\xe9lp \xff.", l, &c, &e), RM_OK);
    rm_series_inc(rm_metric_with1(c, "a\xff"
                                     "b"),
                  1);                              /* stray byte */
    rm_series_inc(rm_metric_with1(c, "t\xc3"), 2); /* truncated at the end */
    rm_series_inc(rm_metric_with1(c, "o\xc0\x80"
                                     "k"),
                  3);                                                                  /* overlong NUL */
    rm_series_inc(rm_metric_with1(c, "s\xed\xa0\x80"), 4);                             /* UTF-16 surrogate */
    rm_series_inc(rm_metric_with1(c, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), 5); /* valid */
    size_t n;
    char *txt = rm_metrics_render(m, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(txt);
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "# HELP u_total H\xef\xbf\xbdlp \xef\xbf\xbd.\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "u_total{v=\"a\xef\xbf\xbd"
                                       "b\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "u_total{v=\"t\xef\xbf\xbd\"} 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "u_total{v=\"o\xef\xbf\xbd\xef\xbf\xbd"
                                       "k\"} 3\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "u_total{v=\"s\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"} 4\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "u_total{v=\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"} 5\n"));
    if (have_promtool())
        CU_ASSERT_EQUAL(promtool_check(txt, n), 0);
    free(txt);
    rm_metrics_free(m);
}

static void test_promtool_rejects_bad_text(void)
{
    /* proves the promtool check above has teeth: the escapes we fix would fail it */
    if (!have_promtool()) {
        CU_FAIL("promtool not installed");
        return;
    }
    const char good[] = "# HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"q\\\"q\"} 1\n";
    const char bad_quote[] = "# HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"q\"q\"} 1\n";
    const char bad_newline[] = "# HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"q\nq\"} 1\n";
    const char bad_name[] = "# HELP x-y X.\n# TYPE x-y counter\nx-y 1\n";
    CU_ASSERT_EQUAL(promtool_check(good, strlen(good)), 0);
    CU_ASSERT_NOT_EQUAL(promtool_check(bad_quote, strlen(bad_quote)), 0);
    CU_ASSERT_NOT_EQUAL(promtool_check(bad_newline, strlen(bad_newline)), 0);
    CU_ASSERT_NOT_EQUAL(promtool_check(bad_name, strlen(bad_name)), 0);
}

void rm_suite_metrics(void)
{
    static const rm_test_case cases[] = {
        {"exact_exposition", test_exact_exposition},
        {"specials_and_defaults", test_specials_and_defaults},
        {"validation", test_validation},
        {"reregister_and_series", test_reregister_and_series},
        {"concurrent_updates", test_concurrent_updates},
        {"promtool_live_scrape", test_promtool_live_scrape},
        {"promtool_rejects_bad_text", test_promtool_rejects_bad_text},
        {"invalid_utf8_label_values", test_invalid_utf8_label_values},
    };
    RM_ADD_SUITE("metrics", NULL, NULL, cases);
}
