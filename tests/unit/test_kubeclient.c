/* test_kubeclient.c — the operator's Kubernetes client: kubeconfig parsing (token, tokenFile,
 * certificate data, insecure flag only when set, errors that name what is missing), in-cluster
 * config, base64, the token bucket, and requests against a local fake API server: retries on
 * 429/500 honouring Retry-After, the body cap, and re-reading the token file after a 401. */
#include <CUnit/CUnit.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/b64.h"
#include "common/http.h"
#include "common/httpc.h"
#include "operator/kube/client.h"
#include "tests/unit/testutil.h"

static const char *KC =
    "apiVersion: v1\nkind: Config\ncurrent-context: dev\n"
    "clusters:\n"
    "- name: c1\n  cluster:\n    server: https://10.1.2.3:6443/\n    certificate-authority-data: Q0FQRU0=\n"
    "- name: c2\n  cluster:\n    server: http://127.0.0.1:1234\n    insecure-skip-tls-verify: true\n    "
    "certificate-authority: ca.pem\n"
    "contexts:\n"
    "- name: dev\n  context: {cluster: c1, user: u1, namespace: team-a}\n"
    "- name: other\n  context: {cluster: c2, user: u2}\n"
    "- name: broken\n  context: {cluster: nope, user: u1}\n"
    "- name: certonly\n  context: {cluster: c1, user: u3}\n"
    "users:\n"
    "- name: u1\n  user:\n    token: abc123\n    client-certificate-data: Q0VSVA==\n    client-key-data: "
    "S0VZ\n"
    "- name: u2\n  user:\n    tokenFile: tok.txt\n"
    "- name: u3\n  user:\n    client-certificate-data: Q0VSVA==\n";

static void test_kubeconfig_token_certs(void)
{
    rm_kube_config c;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_kube_config_parse(KC, strlen(KC), "/etc/kc", NULL, &c, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(c.server, "https://10.1.2.3:6443"); /* trailing / dropped */
    CU_ASSERT_STRING_EQUAL(c.namespace_, "team-a");
    CU_ASSERT_STRING_EQUAL(c.token, "abc123");
    CU_ASSERT_FALSE(c.insecure); /* verify by default */
    CU_ASSERT_EQUAL(c.ca_len, 5);
    CU_ASSERT_EQUAL(memcmp(c.ca_data, "CAPEM", 5), 0);
    CU_ASSERT_EQUAL(c.cert_len, 4);
    CU_ASSERT_EQUAL(memcmp(c.cert_data, "CERT", 4), 0);
    CU_ASSERT_EQUAL(memcmp(c.key_data, "KEY", 3), 0);
    rm_kube_config cp;
    CU_ASSERT_EQUAL(rm_kube_config_copy(&cp, &c), RM_OK);
    CU_ASSERT_STRING_EQUAL(cp.token, "abc123");
    CU_ASSERT_EQUAL(memcmp(cp.key_data, "KEY", 3), 0);
    rm_kube_config_free(&cp);
    rm_kube_config_free(&c);
    rm_kube_config_free(NULL);
}

static void test_kubeconfig_tokenfile_insecure(void)
{
    char *dir = rm_test_tmpdir("kc");
    char p[512];
    snprintf(p, sizeof(p), "%s/tok.txt", dir);
    rm_test_write_file(p, "filetoken\n", 10);
    snprintf(p, sizeof(p), "%s/config", dir);
    rm_test_write_file(p, KC, strlen(KC));
    rm_kube_config c;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_kube_config_load(p, "other", &c, &e), RM_OK);
    CU_ASSERT_TRUE(c.insecure);
    CU_ASSERT_PTR_NULL(c.namespace_);
    char want[512];
    snprintf(want, sizeof(want), "%s/tok.txt", dir);
    CU_ASSERT_STRING_EQUAL(c.token_file, want);   /* relative to the kubeconfig */
    CU_ASSERT_STRING_EQUAL(c.token, "filetoken"); /* trimmed */
    snprintf(want, sizeof(want), "%s/ca.pem", dir);
    CU_ASSERT_STRING_EQUAL(c.ca_file, want);
    rm_kube_config_free(&c);
    rm_test_rmtree(dir);
    free(dir);
}

static void test_kubeconfig_errors(void)
{
    rm_kube_config c;
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_kube_config_parse(KC, strlen(KC), NULL, "broken", &c, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "nope"));
    memset(&e, 0, sizeof(e));
    CU_ASSERT_EQUAL(rm_kube_config_parse(KC, strlen(KC), NULL, "missing", &c, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "missing"));
    memset(&e, 0, sizeof(e));
    CU_ASSERT_EQUAL(rm_kube_config_parse(KC, strlen(KC), NULL, "certonly", &c, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "key"));
    const char *nos = "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\nclusters:\n- name: "
                      "c\n  cluster: {}\n";
    memset(&e, 0, sizeof(e));
    CU_ASSERT_EQUAL(rm_kube_config_parse(nos, strlen(nos), NULL, NULL, &c, &e), RM_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "server"));
    const char *badb64 = "current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\nclusters:\n- "
                         "name: c\n  cluster: {server: 'https://a', certificate-authority-data: '!!!'}\n";
    memset(&e, 0, sizeof(e));
    CU_ASSERT_EQUAL(rm_kube_config_parse(badb64, strlen(badb64), NULL, NULL, &c, &e), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.field, "certificate-authority-data");
    memset(&e, 0, sizeof(e));
    CU_ASSERT_NOT_EQUAL(rm_kube_config_parse("a: [", 4, NULL, NULL, &c, &e), RM_OK);
    /* a plain-HTTP kubeconfig with `user: {}` (what kubesim writes) */
    const char *plain =
        "current-context: s\ncontexts:\n- name: s\n  context: {cluster: s, user: s}\nclusters:\n- name: s\n  "
        "cluster: {server: 'http://127.0.0.1:5'}\nusers:\n- name: s\n  user: {}\n";
    CU_ASSERT_EQUAL(rm_kube_config_parse(plain, strlen(plain), NULL, NULL, &c, &e), RM_OK);
    CU_ASSERT_PTR_NULL(c.token);
    rm_kube_config_free(&c);
}

static void test_in_cluster(void)
{
    char *dir = rm_test_tmpdir("sa");
    char p[512];
    snprintf(p, sizeof(p), "%s/token", dir);
    rm_test_write_file(p, "satoken", 7);
    snprintf(p, sizeof(p), "%s/namespace", dir);
    rm_test_write_file(p, "ops\n", 4);
    snprintf(p, sizeof(p), "%s/ca.crt", dir);
    rm_test_write_file(p, "PEM", 3);
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    rm_kube_config c;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_kube_config_in_cluster(dir, &c, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(c.server, "https://10.0.0.1:443");
    CU_ASSERT_STRING_EQUAL(c.token, "satoken");
    CU_ASSERT_STRING_EQUAL(c.namespace_, "ops");
    CU_ASSERT_FALSE(c.insecure);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.ca_file, "ca.crt"));
    rm_kube_config_free(&c);
    unsetenv("KUBERNETES_SERVICE_HOST");
    CU_ASSERT_EQUAL(rm_kube_config_in_cluster(dir, &c, &e), RM_ENOTFOUND);
    unsetenv("KUBERNETES_SERVICE_PORT");
    rm_test_rmtree(dir);
    free(dir);
}

static void test_base64(void)
{
    const char *s = "hello, kube";
    char *enc = rm_b64_encode((const unsigned char *)s, strlen(s));
    CU_ASSERT_STRING_EQUAL(enc, "aGVsbG8sIGt1YmU=");
    unsigned char *dec = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(rm_b64_decode(enc, strlen(enc), &dec, &n), RM_OK);
    CU_ASSERT_EQUAL(n, strlen(s));
    CU_ASSERT_EQUAL(memcmp(dec, s, n), 0);
    free(dec);
    free(enc);
    CU_ASSERT_EQUAL(rm_b64_decode("aGV\nsbG8=", 9, &dec, &n), RM_OK);
    CU_ASSERT_EQUAL(n, 5);
    free(dec);
    CU_ASSERT_EQUAL(rm_b64_decode("a$b", 3, &dec, &n), RM_EINVAL);
    CU_ASSERT_PTR_NULL(dec);
    CU_ASSERT_EQUAL(rm_b64_decode("YQ==YQ", 6, &dec, &n), RM_EINVAL); /* data after padding */
}

static void test_token_bucket(void)
{
    rm_kube_bucket b;
    rm_kube_bucket_init(&b, 10, 2, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm_kube_bucket_reserve(&b, 0), 0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_kube_bucket_reserve(&b, 0), 0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_kube_bucket_reserve(&b, 0), 0.1, 1e-9); /* burst spent */
    CU_ASSERT_DOUBLE_EQUAL(rm_kube_bucket_reserve(&b, 0), 0.2, 1e-9); /* queued behind */
    CU_ASSERT_DOUBLE_EQUAL(rm_kube_bucket_reserve(&b, 0.25), 0.05, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(rm_kube_bucket_reserve(&b, 100), 0, 1e-9); /* refilled, capped at burst */
    CU_ASSERT_DOUBLE_EQUAL(rm_kube_bucket_reserve(&b, 100), 0, 1e-9);
    CU_ASSERT(rm_kube_bucket_reserve(&b, 100) > 0);
    rm_kube_bucket_destroy(&b);
    rm_kube_bucket_init(&b, 0, 1, 0); /* off */
    for (int i = 0; i < 100; i++)
        CU_ASSERT_DOUBLE_EQUAL(rm_kube_bucket_reserve(&b, 0), 0, 1e-9);
    rm_kube_bucket_destroy(&b);
}

static long long clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------- fake API server ---------------- */
typedef struct fake {
    atomic_int calls;
    int fail_first; /* answer `fail_code` this many times */
    int fail_code;
    const char *retry_after; /* NULL = "0" */
    char tokfile[512];
} fake;

static int h_flaky(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    fake *f = ud;
    int n = atomic_fetch_add(&f->calls, 1);
    if (n < f->fail_first) {
        rm_http_add_header(resp, "Retry-After", f->retry_after ? f->retry_after : "0");
        return rm_http_reply_text(resp, f->fail_code, "application/json",
                                  "{\"kind\":\"Status\",\"code\":429}");
    }
    return rm_http_reply_text(resp, 200, "application/json", "{\"ok\":true}");
}

static int h_big(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    char *b = malloc(4096);
    memset(b, 'x', 4095);
    b[4095] = 0;
    int rc = rm_http_reply_text(resp, 200, "text/plain", b);
    free(b);
    return rc;
}

static int h_auth(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    fake *f = ud;
    atomic_fetch_add(&f->calls, 1);
    const char *a = rm_http_header(req, "Authorization");
    if (a && strcmp(a, "Bearer new") == 0)
        return rm_http_reply_text(resp, 200, "application/json", "{}");
    /* the kubelet rotates the token: the next read of the file gets the new one */
    rm_test_write_file(f->tokfile, "new\n", 4);
    return rm_http_reply_text(resp, 401, "application/json", "{\"reason\":\"Unauthorized\"}");
}

static int h_stream(const rm_http_req *req, rm_http_resp *resp, void *ud)
{
    (void)ud;
    return rm_http_reply_text(resp, 200, "application/json",
                              "{\"type\":\"ADDED\",\"object\":{}}\nnot json\n\n{\"type\":\"BOOKMARK\"}\n");
}

static int count_lines(void *ud, char *line, size_t len)
{
    int *n = ud;
    if (line)
        (*n)++;
    return 0;
}

static void test_requests(void)
{
    fake f;
    memset(&f, 0, sizeof(f));
    f.fail_first = 2;
    f.fail_code = 429;
    char *dir = rm_test_tmpdir("kcl");
    snprintf(f.tokfile, sizeof(f.tokfile), "%s/token", dir);
    rm_test_write_file(f.tokfile, "old\n", 4);
    rm_http_route routes[] = {
        {"GET", "/flaky", 0, h_flaky, &f},
        {"GET", "/big", 0, h_big, &f},
        {"GET", "/auth", 0, h_auth, &f},
        {"GET", "/stream", 0, h_stream, &f},
    };
    rm_http_opts ho = {.bind = "127.0.0.1:0"};
    rm_http_server *srv = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_http_start(&ho, routes, 4, &srv, &e), RM_OK);
    char server[64];
    snprintf(server, sizeof(server), "http://127.0.0.1:%d", rm_http_port(srv));
    rm_kube_config cfg = {.server = server, .token_file = f.tokfile};
    rm_kube_client_opts co = {.qps = -1, .max_retries = 3, .backoff_base_s = 0.01, .max_body = 1024};
    rm_kube_client *c = NULL;
    CU_ASSERT_EQUAL_FATAL(rm_kube_client_new(&cfg, &co, &c, &e), RM_OK);
    rm_kube_resp r;
    /* 429 twice (Retry-After: 0) then 200 */
    CU_ASSERT_EQUAL(rm_kube_request(c, "GET", "/flaky", NULL, NULL, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(r.attempts, 3);
    rm_kube_resp_free(&r);
    /* a malformed Retry-After (a fraction: delay-seconds is digits only) is ignored like the
     * shared parser (common/httpc.h) ignores it: the client backs off 10 ms, it does not sleep
     * 3.5 s (its own looser parser used to) */
    atomic_store(&f.calls, 0);
    f.retry_after = "3.5";
    CU_ASSERT_EQUAL(rm_http_retry_after("Retry-After: 3.5\r\n", 18), -1);
    CU_ASSERT_EQUAL(rm_http_retry_after("retry-after: 7\r\n", 16), 7);
    double t0 = (double)clock_mono_ms() / 1000;
    CU_ASSERT_EQUAL(rm_kube_request(c, "GET", "/flaky", NULL, NULL, 0, &r, &e), RM_OK);
    double took = (double)clock_mono_ms() / 1000 - t0;
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_TRUE(took < 1.5);
    rm_kube_resp_free(&r);
    f.retry_after = NULL;
    /* 500 forever: gives up after max_retries+1 attempts and returns the last answer */
    atomic_store(&f.calls, 0);
    f.fail_first = 100;
    f.fail_code = 500;
    CU_ASSERT_EQUAL(rm_kube_request(c, "GET", "/flaky", NULL, NULL, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 500);
    CU_ASSERT_EQUAL(r.attempts, 4);
    CU_ASSERT_EQUAL(atomic_load(&f.calls), 4);
    CU_ASSERT_EQUAL(rm_kube_status_rc(r.status), RM_EAGAIN);
    rm_kube_resp_free(&r);
    /* body cap */
    CU_ASSERT_EQUAL(rm_kube_request(c, "GET", "/big", NULL, NULL, 0, &r, &e), RM_ETOOBIG);
    rm_kube_resp_free(&r);
    /* 401 → token file re-read → retried with the new token */
    atomic_store(&f.calls, 0);
    CU_ASSERT_EQUAL(rm_kube_request(c, "GET", "/auth", NULL, NULL, 0, &r, &e), RM_OK);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(atomic_load(&f.calls), 2);
    rm_kube_resp_free(&r);
    /* 404 from the server's router maps to RM_ENOTFOUND through rm_kube_json */
    CU_ASSERT_EQUAL(rm_kube_json(c, "GET", "/nothing", NULL, NULL, NULL, &e), RM_ENOTFOUND);
    /* streaming: garbage and empty lines are passed/skipped, not fatal to the splitter */
    int lines = 0;
    long st = 0;
    CU_ASSERT_EQUAL(rm_kube_stream(c, "/stream", 1024, 5, NULL, count_lines, &lines, &st, NULL, &e), RM_OK);
    CU_ASSERT_EQUAL(st, 200);
    CU_ASSERT_EQUAL(lines, 3);
    rm_kube_client_free(c);
    /* connection refused: a transport error after the retries, no crash */
    rm_http_stop(srv);
    co.max_retries = 1;
    CU_ASSERT_EQUAL_FATAL(rm_kube_client_new(&cfg, &co, &c, &e), RM_OK);
    CU_ASSERT_EQUAL(rm_kube_request(c, "GET", "/flaky", NULL, NULL, 0, &r, &e), RM_EIO);
    CU_ASSERT_EQUAL(r.status, 0);
    rm_kube_resp_free(&r);
    rm_kube_client_free(c);
    rm_kube_config bad = {.server = "ftp://x"};
    CU_ASSERT_EQUAL(rm_kube_client_new(&bad, NULL, &c, &e), RM_EINVAL);
    rm_test_rmtree(dir);
    free(dir);
}

void rm_suite_kubeclient(void)
{
    static const rm_test_case cases[] = {
        {"kubeconfig_token_certs", test_kubeconfig_token_certs},
        {"kubeconfig_tokenfile_insecure", test_kubeconfig_tokenfile_insecure},
        {"kubeconfig_errors", test_kubeconfig_errors},
        {"in_cluster", test_in_cluster},
        {"base64", test_base64},
        {"token_bucket", test_token_bucket},
        {"requests_retry_cap_auth", test_requests},
    };
    RM_ADD_SUITE("kubeclient", NULL, NULL, cases);
}
