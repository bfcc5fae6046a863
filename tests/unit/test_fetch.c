/* Tests for common/fetch (and common/sha256): a scripted HTTP server on loopback, written here
 * on raw sockets so each case decides exactly what the wire carries — a body cut in the middle,
 * 503/429 before the answer, a server that ignores Range, 404 on one name of a folder — and
 * records what was asked (the Range start of every request, the bytes sent). Each case checks
 * the bytes on disk, the requests made and the exact error. */
#include "common/fetch.h"
#include "common/sha256.h"
#include "tests/unit/testutil.h"
#include "worker/comm/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum { A_OK = 0, A_CUT, A_503, A_429, A_NORANGE, A_SLOW } action;

typedef struct srv {
    int lfd, port;
    pthread_t th;
    atomic_int stop;
    const char *paths[4];
    const uint8_t *data[4];
    size_t len[4];
    action script[16]; /* per request, in order; past the end: A_OK */
    int nscript;
    atomic_int requests;
    long range_start[64];  /* -1 = no Range */
    atomic_long sent;      /* body bytes sent */
    const char *s3_secret; /* set: every request must carry a valid SigV4 signature with it */
    const char *etag;      /* set: sent as ETag, and a Range whose If-Range differs is ignored */
    char if_range[8][64];  /* each request's If-Range ("" none) */
    char last_auth[512];   /* the last request's Authorization header */
    bool had_token, had_sha;
} srv;

/* The value of header `name` in a raw request (trimmed), or NULL. */
static bool header_of(const char *req, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(req, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
        const char *h = p + 2;
        if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
            const char *v = h + nl + 1, *e = strstr(v, "\r\n");
            while (*v == ' ')
                v++;
            snprintf(out, cap, "%.*s", (int)(e - v), v);
            return true;
        }
    }
    return false;
}

static void hexs(const uint8_t *d, char *out)
{
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

/* AWS Signature Version 4 checked from its definition (canonical request, string to sign, the
 * derived key), independently of libcurl's signer: true when req is signed with secret. */
static bool sigv4_ok(const char *req, const char *secret)
{
    char auth[512], cred[256], signed_h[256], sig[80], method[16], path[1024], date[32];
    if (!header_of(req, "Authorization", auth, sizeof auth) ||
        !header_of(req, "x-amz-date", date, sizeof date))
        return false;
    const char *c = strstr(auth, "Credential="), *sh = strstr(auth, "SignedHeaders="),
               *sg = strstr(auth, "Signature=");
    if (strncmp(auth, "AWS4-HMAC-SHA256 ", 17) != 0 || !c || !sh || !sg)
        return false;
    sscanf(c + 11, "%255[^,]", cred);
    sscanf(sh + 14, "%255[^,]", signed_h);
    sscanf(sg + 10, "%79s", sig);
    sscanf(req, "%15s %1023s", method, path);
    /* the canonical query: the parameters sorted by name, each "name=value" (an upload's
     * "?uploads=" and "?partNumber=1&uploadId=X"; a GET has none) */
    char query[1024] = "", *qm = strchr(path, '?');
    if (qm) {
        *qm++ = 0;
        char *parts[8];
        int np = 0;
        for (char *save = NULL, *q = strtok_r(qm, "&", &save); q && np < 8; q = strtok_r(NULL, "&", &save))
            parts[np++] = q;
        for (int i = 1; i < np; i++) /* insertion sort: a handful */
            for (int j = i; j > 0 && strcmp(parts[j - 1], parts[j]) > 0; j--) {
                char *t = parts[j];
                parts[j] = parts[j - 1];
                parts[j - 1] = t;
            }
        size_t ql = 0;
        for (int i = 0; i < np; i++)
            ql += (size_t)snprintf(query + ql, sizeof query - ql, "%s%s%s", i ? "&" : "", parts[i],
                                   strchr(parts[i], '=') ? "" : "=");
    }
    char scope[256], day[16], region[64];
    const char *slash = strchr(cred, '/');
    if (!slash)
        return false;
    snprintf(scope, sizeof scope, "%s", slash + 1);
    sscanf(scope, "%15[^/]/%63[^/]", day, region);
    char canon[8192], payload[80] = "";
    header_of(req, "x-amz-content-sha256", payload, sizeof payload);
    int n = snprintf(canon, sizeof canon, "%s\n%s\n%s\n", method, path, query);
    char names[256];
    snprintf(names, sizeof names, "%s", signed_h);
    for (char *save = NULL, *h = strtok_r(names, ";", &save); h; h = strtok_r(NULL, ";", &save)) {
        char v[4200] = "";
        header_of(req, h, v, sizeof v);
        n += snprintf(canon + n, sizeof canon - (size_t)n, "%s:%s\n", h, v);
    }
    snprintf(canon + n, sizeof canon - (size_t)n, "\n%s\n%s", signed_h, payload);
    uint8_t d[32], k[32];
    char hx[65], sts[1024], key0[256];
    rm_sha256(canon, strlen(canon), d);
    hexs(d, hx);
    snprintf(sts, sizeof sts, "AWS4-HMAC-SHA256\n%s\n%s\n%s", date, scope, hx);
    snprintf(key0, sizeof key0, "AWS4%s", secret);
    rm_hmac_sha256(key0, strlen(key0), day, strlen(day), k);
    rm_hmac_sha256(k, 32, region, strlen(region), k);
    rm_hmac_sha256(k, 32, "s3", 2, k);
    rm_hmac_sha256(k, 32, "aws4_request", 12, k);
    rm_hmac_sha256(k, 32, sts, strlen(sts), d);
    hexs(d, hx);
    return strcmp(hx, sig) == 0;
}

static void send_all(int fd, const void *p, size_t n, srv *s, bool body)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        if (body)
            s->sent += w;
        c += w;
        n -= (size_t)w;
    }
}

static void serve_one(srv *s, int fd)
{
    char req[4096] = "";
    size_t n = 0;
    while (n < sizeof req - 1 && !strstr(req, "\r\n\r\n")) {
        ssize_t r = recv(fd, req + n, sizeof req - 1 - n, 0);
        if (r <= 0)
            return;
        n += (size_t)r;
        req[n] = 0;
    }
    int k = s->requests++;
    action a = k < s->nscript ? s->script[k] : A_OK;
    char path[1024] = "";
    sscanf(req, "GET %1023s", path);
    long start = -1;
    const char *rg = strcasestr(req, "\r\nRange: bytes=");
    if (rg)
        start = strtol(rg + 15, NULL, 10);
    if (k < 64)
        s->range_start[k] = start;
    char hdr[512];
    if (s->s3_secret) {
        header_of(req, "Authorization", s->last_auth, sizeof s->last_auth);
        char v[256];
        s->had_token = header_of(req, "x-amz-security-token", v, sizeof v) && strcmp(v, "TOKEN-1") == 0 &&
                       strstr(s->last_auth, "x-amz-security-token");
        s->had_sha = header_of(req, "x-amz-content-sha256", v, sizeof v);
        if (!sigv4_ok(req, s->s3_secret)) {
            const char *b = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code></Error>";
            int hl = snprintf(hdr, sizeof hdr,
                              "HTTP/1.1 403 Forbidden\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                              strlen(b));
            send_all(fd, hdr, (size_t)hl, s, false);
            send_all(fd, b, strlen(b), s, false);
            return;
        }
    }
    if (a == A_503 || a == A_429) {
        const char *b = "try later";
        int hl =
            snprintf(hdr, sizeof hdr, "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     a == A_503 ? 503 : 429, strlen(b));
        send_all(fd, hdr, (size_t)hl, s, false);
        send_all(fd, b, strlen(b), s, false);
        return;
    }
    int i = 0;
    while (i < 4 && (!s->paths[i] || strcmp(s->paths[i], path) != 0))
        i++;
    if (i == 4) {
        const char *b = "<html>not here</html>";
        int hl =
            snprintf(hdr, sizeof hdr,
                     "HTTP/1.1 404 Not Found\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", strlen(b));
        send_all(fd, hdr, (size_t)hl, s, false);
        send_all(fd, b, strlen(b), s, false);
        return;
    }
    size_t len = s->len[i], from = 0;
    int hl;
    char ifr[64] = "", tagh[96] = "";
    header_of(req, "If-Range", ifr, sizeof ifr);
    if (k < 8)
        snprintf(s->if_range[k], sizeof s->if_range[k], "%s", ifr);
    if (s->etag) {
        snprintf(tagh, sizeof tagh, "ETag: %s\r\n", s->etag);
        if (ifr[0] && strcmp(ifr, s->etag) != 0)
            start = -1; /* RFC 9110: a changed representation is sent whole */
    }
    if (start >= 0 && a != A_NORANGE) {
        from = (size_t)start < len ? (size_t)start : len;
        if ((size_t)start >= len) {
            hl = snprintf(hdr, sizeof hdr,
                          "HTTP/1.1 416 X\r\nContent-Range: bytes */%zu\r\nContent-Length: 0\r\nConnection: "
                          "close\r\n\r\n",
                          len);
            send_all(fd, hdr, (size_t)hl, s, false);
            return;
        }
        hl = snprintf(
            hdr, sizeof hdr,
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %zu-%zu/%zu\r\nContent-Length: %zu\r\n"
            "%sConnection: close\r\n\r\n",
            from, len - 1, len, len - from, tagh);
    } else {
        hl = snprintf(hdr, sizeof hdr,
                      "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n", len, tagh);
    }
    send_all(fd, hdr, (size_t)hl, s, false);
    size_t upto = a == A_CUT ? from + (len - from) / 2 : len;
    if (a == A_SLOW) { /* in pieces, for the concurrent case: the other fetcher must wait */
        for (size_t p = from; p < len; p += 4096) {
            send_all(fd, s->data[i] + p, len - p < 4096 ? len - p : 4096, s, true);
            usleep(2000);
        }
        return;
    }
    send_all(fd, s->data[i] + from, upto - from, s, true);
}

static void *srv_main(void *ud)
{
    srv *s = ud;
    while (!s->stop) {
        struct pollfd p = {s->lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        serve_one(s, fd);
        shutdown(fd, SHUT_RDWR);
        close(fd);
    }
    return NULL;
}

static void srv_start(srv *s)
{
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CU_ASSERT_FATAL(bind(s->lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
    CU_ASSERT_FATAL(listen(s->lfd, 16) == 0);
    socklen_t sl = sizeof sa;
    getsockname(s->lfd, (struct sockaddr *)&sa, &sl);
    s->port = ntohs(sa.sin_port);
    CU_ASSERT_FATAL(pthread_create(&s->th, NULL, srv_main, s) == 0);
}

static void srv_stop(srv *s)
{
    s->stop = 1;
    pthread_join(s->th, NULL);
    close(s->lfd);
}

/* An object of n pseudo-random bytes (owned). */
static uint8_t *object(size_t n, uint32_t seed)
{
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
    return p;
}

static void hex_of(const void *p, size_t n, char out[65])
{
    rm_sha256_ctx c;
    uint8_t d[32];
    rm_sha256_init(&c);
    rm_sha256_update(&c, p, n);
    rm_sha256_final(&c, d);
    rm_sha256_hex(d, out);
}

static bool file_is(const char *path, const uint8_t *p, size_t n)
{
    size_t got = 0;
    char *b = rm_test_read_file(path, &got);
    bool ok = b && got == n && memcmp(b, p, n) == 0;
    free(b);
    return ok;
}

static const rm_fetch_opts quick = {.field = "spec.training.data.uri",
                                    .sha256_field = "spec.training.data.sha256",
                                    .attempts = 3,
                                    .backoff_s = 0.01,
                                    .stall_s = 5};

static void test_sha256_vectors(void)
{
    char hx[65];
    hex_of("", 0, hx);
    CU_ASSERT_STRING_EQUAL(hx, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, hx);
    CU_ASSERT_STRING_EQUAL(hx, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(m, strlen(m), hx);
    CU_ASSERT_STRING_EQUAL(hx, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* streaming in odd pieces equals the worker's one-shot hash, for every length around blocks */
    uint8_t *o = object(300, 7);
    for (size_t n = 0; n <= 300; n += 7) {
        rm_sha256_ctx c;
        uint8_t a[32], b[32];
        rm_sha256_init(&c);
        for (size_t p = 0; p < n;) {
            size_t step = (p % 5) + 1 < n - p ? (p % 5) + 1 : n - p;
            rm_sha256_update(&c, o + p, step);
            p += step;
        }
        rm_sha256_final(&c, a);
        rm_sha256(o, n, b);
        CU_ASSERT(memcmp(a, b, 32) == 0);
    }
    free(o);
}

/* Fetched once, verified, and then found in the cache without a request. */
static void test_cached_once(void)
{
    char *dir = rm_test_tmpdir("fetch");
    size_t n = 200000;
    uint8_t *o = object(n, 1);
    srv s = {.paths = {"/d/data.bin"}, .data = {o}, .len = {n}};
    srv_start(&s);
    char url[128], sum[65], path[4096];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/d/data.bin", s.port);
    hex_of(o, n, sum);
    rm_fetch_opts op = quick;
    op.sha256 = sum;
    rm_fetch_stats st = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fetch_cached(url, NULL, dir, &op, path, sizeof path, &st, &e), RM_OK);
    CU_ASSERT(file_is(path, o, n));
    CU_ASSERT(strstr(path, "/data.bin") != NULL);
    CU_ASSERT_EQUAL(st.requests, 1);
    CU_ASSERT_EQUAL(st.bytes, n);
    CU_ASSERT(!st.cached);
    rm_fetch_stats st2 = {0};
    char path2[4096];
    CU_ASSERT_EQUAL(rm_fetch_cached(url, NULL, dir, &op, path2, sizeof path2, &st2, &e), RM_OK);
    CU_ASSERT(st2.cached);
    CU_ASSERT_EQUAL(st2.requests, 0);
    CU_ASSERT_STRING_EQUAL(path, path2);
    CU_ASSERT_EQUAL(s.requests, 1);
    /* another checksum is another entry: fetched again */
    op.sha256 = NULL;
    CU_ASSERT_EQUAL(rm_fetch_cached(url, NULL, dir, &op, path2, sizeof path2, &st2, &e), RM_OK);
    CU_ASSERT_STRING_NOT_EQUAL(path, path2);
    CU_ASSERT_EQUAL(s.requests, 2);
    srv_stop(&s);
    free(o);
    rm_test_rmtree(dir);
    free(dir);
}

/* A body cut halfway is continued from where it stopped, and a .part a killed process left is
 * continued too: the server sees the Range starts and sends each byte about once. */
static void test_resume(void)
{
    char *dir = rm_test_tmpdir("fetch");
    size_t n = 300000;
    uint8_t *o = object(n, 2);
    srv s = {.paths = {"/x.bin"}, .data = {o}, .len = {n}, .script = {A_CUT, A_OK}, .nscript = 2};
    srv_start(&s);
    char url[128], dest[4096], part[4200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/x.bin", s.port);
    snprintf(dest, sizeof dest, "%s/x.bin", dir);
    rm_fetch_stats st = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fetch_file(url, dest, &quick, &st, &e), RM_OK);
    CU_ASSERT(file_is(dest, o, n));
    CU_ASSERT_EQUAL(s.requests, 2);
    CU_ASSERT_EQUAL(s.range_start[0], -1);
    CU_ASSERT_EQUAL(s.range_start[1], (long)(n / 2));
    CU_ASSERT_EQUAL(st.resumed_from, n / 2);
    CU_ASSERT_EQUAL((size_t)s.sent, n);
    /* a .part of 12345 bytes from an earlier process */
    unlink(dest);
    snprintf(part, sizeof part, "%s.part", dest);
    CU_ASSERT_EQUAL_FATAL(rm_test_write_file(part, o, 12345), 0);
    s.sent = 0;
    memset(&st, 0, sizeof st);
    CU_ASSERT_EQUAL_FATAL(rm_fetch_file(url, dest, &quick, &st, &e), RM_OK);
    CU_ASSERT(file_is(dest, o, n));
    CU_ASSERT_EQUAL(s.range_start[2], 12345);
    CU_ASSERT_EQUAL((size_t)s.sent, n - 12345);
    CU_ASSERT(access(part, F_OK) != 0);
    srv_stop(&s);
    free(o);
    rm_test_rmtree(dir);
    free(dir);
}

/* A server that ignores Range (200 with the whole object) over a .part of wrong bytes: the
 * file is started over, not appended to. */
static void test_range_ignored(void)
{
    char *dir = rm_test_tmpdir("fetch");
    size_t n = 50000;
    uint8_t *o = object(n, 3);
    srv s = {.paths = {"/y"}, .data = {o}, .len = {n}, .script = {A_NORANGE}, .nscript = 1};
    srv_start(&s);
    char url[128], dest[4096], part[4200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/y", s.port);
    snprintf(dest, sizeof dest, "%s/y", dir);
    snprintf(part, sizeof part, "%s.part", dest);
    CU_ASSERT_EQUAL_FATAL(rm_test_write_file(part, "garbage-garbage", 15), 0);
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fetch_file(url, dest, &quick, NULL, &e), RM_OK);
    CU_ASSERT(file_is(dest, o, n));
    CU_ASSERT_EQUAL(s.range_start[0], 15);
    /* a .part longer than the object (it changed): 416, then fetched anew */
    unlink(dest);
    uint8_t *big = object(n + 10, 9);
    CU_ASSERT_EQUAL_FATAL(rm_test_write_file(part, big, n + 10), 0);
    CU_ASSERT_EQUAL_FATAL(rm_fetch_file(url, dest, &quick, NULL, &e), RM_OK);
    CU_ASSERT(file_is(dest, o, n));
    srv_stop(&s);
    free(big);
    free(o);
    rm_test_rmtree(dir);
    free(dir);
}

/* 503 and 429 are retried with back-off; 404 is final at once, named by field, status and URL. */
static void test_statuses(void)
{
    char *dir = rm_test_tmpdir("fetch");
    size_t n = 1000;
    uint8_t *o = object(n, 4);
    srv s = {.paths = {"/z"}, .data = {o}, .len = {n}, .script = {A_503, A_429, A_OK}, .nscript = 3};
    srv_start(&s);
    char url[128], dest[4096], want[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/z", s.port);
    snprintf(dest, sizeof dest, "%s/z", dir);
    rm_fetch_stats st = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_fetch_file(url, dest, &quick, &st, &e), RM_OK);
    CU_ASSERT(file_is(dest, o, n));
    CU_ASSERT_EQUAL(st.requests, 3);
    /* three 503s in a row use up 3 attempts */
    s.requests = 0;
    s.script[0] = s.script[1] = s.script[2] = A_503;
    unlink(dest);
    CU_ASSERT_EQUAL(rm_fetch_file(url, dest, &quick, NULL, &e), RM_EIO);
    snprintf(want, sizeof want, "spec.training.data.uri: 503 from %s (still failing after 3 attempts)", url);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    CU_ASSERT_EQUAL(s.requests, 3);
    /* 404: one request, no retry, no file */
    s.nscript = 0;
    s.requests = 0;
    char miss[128];
    snprintf(miss, sizeof miss, "http://127.0.0.1:%d/missing", s.port);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_fetch_cached(miss, NULL, dir, &quick, dest, sizeof dest, NULL, &e), RM_ENOTFOUND);
    snprintf(want, sizeof want, "spec.training.data.uri: 404 from %s", miss);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    CU_ASSERT_STRING_EQUAL(e.field, "spec.training.data.uri");
    CU_ASSERT_EQUAL(s.requests, 1);
    srv_stop(&s);
    /* nothing listens: refused, bounded by the attempts */
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_fetch_file(url, dest, &quick, NULL, &e), RM_EIO);
    CU_ASSERT(strstr(e.msg, "still failing after 3 attempts") != NULL);
    CU_ASSERT(strncmp(e.msg, "spec.training.data.uri: http://127.0.0.1:", 41) == 0);
    free(o);
    rm_test_rmtree(dir);
    free(dir);
}

/* A wrong sha256 fails naming the checksum field, removes the file and marks nothing complete;
 * an object over max_bytes is refused before it is written whole. */
static void test_sha_and_cap(void)
{
    char *dir = rm_test_tmpdir("fetch");
    size_t n = 70000;
    uint8_t *o = object(n, 5);
    srv s = {.paths = {"/w.txt"}, .data = {o}, .len = {n}};
    srv_start(&s);
    char url[128], path[4096], want[512], entry[4096];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/w.txt", s.port);
    rm_fetch_opts op = quick;
    op.sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_fetch_cached(url, NULL, dir, &op, path, sizeof path, NULL, &e), RM_EINVAL);
    char sum[65];
    hex_of(o, n, sum);
    snprintf(want, sizeof want, "spec.training.data.sha256: the data fetched from %s has sha256 %s, not %s",
             url, sum, op.sha256);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    rm_fetch_entry_dir(dir, url, op.sha256, entry, sizeof entry);
    char p[4200];
    snprintf(p, sizeof p, "%s/.complete", entry);
    CU_ASSERT(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "%s/w.txt", entry);
    CU_ASSERT(access(p, F_OK) != 0);
    op.sha256 = NULL;
    op.max_bytes = 1000;
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_fetch_cached(url, NULL, dir, &op, path, sizeof path, NULL, &e), RM_ETOOBIG);
    CU_ASSERT(strstr(e.msg, "over the 1000-byte limit") != NULL);
    srv_stop(&s);
    free(o);
    rm_test_rmtree(dir);
    free(dir);
}

/* A folder: each name's first alternative the server has; the checksum covers the files in order. */
static void test_folder(void)
{
    char *dir = rm_test_tmpdir("fetch");
    uint8_t *a = object(3000, 6), *b = object(5000, 7);
    srv s = {.paths = {"/set/a.gz", "/set/b"}, .data = {a, b}, .len = {3000, 5000}};
    srv_start(&s);
    char url[128], path[4096], p[4200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/set/", s.port);
    uint8_t *ab = malloc(8000);
    memcpy(ab, a, 3000);
    memcpy(ab + 3000, b, 5000);
    char sum[65];
    hex_of(ab, 8000, sum);
    const char *names[] = {"a|a.gz", "b|b.gz", NULL};
    rm_fetch_opts op = quick;
    op.sha256 = sum;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fetch_cached(url, names, dir, &op, path, sizeof path, NULL, &e), RM_OK);
    snprintf(p, sizeof p, "%s/a.gz", path);
    CU_ASSERT(file_is(p, a, 3000));
    snprintf(p, sizeof p, "%s/b", path);
    CU_ASSERT(file_is(p, b, 5000));
    /* a name the server has in neither spelling */
    const char *names2[] = {"a|a.gz", "c|c.gz", NULL};
    char want[256];
    snprintf(want, sizeof want, "spec.training.data.uri: 404 from %sc", url);
    CU_ASSERT_EQUAL(rm_fetch_cached(url, names2, dir, &quick, path, sizeof path, NULL, &e), RM_ENOTFOUND);
    CU_ASSERT_STRING_EQUAL(e.msg, want);
    srv_stop(&s);
    free(ab);
    free(a);
    free(b);
    rm_test_rmtree(dir);
    free(dir);
}

/* Progress seen by the listing tests: the largest figures, and whether they ever went back. */
typedef struct prog {
    uint64_t have, total;
    bool back;
} prog;

static void on_prog(void *ud, const char *url, uint64_t have, uint64_t total)
{
    prog *p = ud;
    (void)url;
    p->back |= have < p->have;
    p->have = have;
    p->total = total > p->total ? total : p->total;
}

/* A folder URI without names (docs/models-and-data.md, "Folders over HTTP and S3"): an http
 * folder's index.txt names the files (comments, blanks and names outside accept left out; sorted),
 * progress counts the whole folder, a complete entry asks nothing again, and a name that is not a
 * plain file name is refused, naming it. */
static void test_folder_index(void)
{
    char *dir = rm_test_tmpdir("fetch");
    uint8_t *a = object(3000, 21), *b = object(5000, 22);
    const char *idx = "# two shards\nz_train_1.bin\n\n  a_train_0.bin  \nnotes.txt\n";
    srv s = {.paths = {"/f/index.txt", "/f/z_train_1.bin", "/f/a_train_0.bin", "/f/notes.txt"},
             .data = {(const uint8_t *)idx, b, a, a},
             .len = {strlen(idx), 5000, 3000, 10}};
    srv_start(&s);
    char url[128], path[4096], p[4200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/f/", s.port);
    uint8_t *ab = malloc(8000);
    memcpy(ab, a, 3000);
    memcpy(ab + 3000, b, 5000);
    char sum[65];
    hex_of(ab, 8000, sum);
    static const char *const accept[] = {"*.bin", NULL};
    prog pr = {0};
    rm_fetch_opts op = quick;
    op.sha256 = sum; /* a_train_0.bin then z_train_1.bin: sorted, not the index's order */
    op.accept = accept;
    op.progress = on_prog;
    op.progress_ud = &pr;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fetch_cached(url, NULL, dir, &op, path, sizeof path, NULL, &e), RM_OK);
    snprintf(p, sizeof p, "%s/a_train_0.bin", path);
    CU_ASSERT(file_is(p, a, 3000));
    snprintf(p, sizeof p, "%s/z_train_1.bin", path);
    CU_ASSERT(file_is(p, b, 5000));
    snprintf(p, sizeof p, "%s/notes.txt", path);
    CU_ASSERT(access(p, F_OK) != 0);
    CU_ASSERT_EQUAL(s.requests, 3);
    CU_ASSERT_FALSE(pr.back);
    CU_ASSERT(pr.have > 3000 && pr.have <= 8000 && pr.total <= 8000);
    CU_ASSERT_EQUAL(rm_fetch_cached(url, NULL, dir, &op, path, sizeof path, NULL, &e), RM_OK);
    CU_ASSERT_EQUAL(s.requests, 3); /* complete: not even the index */
    srv_stop(&s);

    /* a name that would leave the entry */
    const char *evil = "a_train_0.bin\n../x.bin\n";
    srv s2 = {.paths = {"/f/index.txt"}, .data = {(const uint8_t *)evil}, .len = {strlen(evil)}};
    srv_start(&s2);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/f/", s2.port);
    op.sha256 = NULL;
    CU_ASSERT_EQUAL(rm_fetch_cached(url, NULL, dir, &op, path, sizeof path, NULL, &e), RM_EINVAL);
    CU_ASSERT(strstr(e.msg, "spec.training.data.uri: ") == e.msg &&
              strstr(e.msg, "index.txt: \"../x.bin\" is not a plain file name"));
    /* no index: the fallback names, else its 404 */
    static const char *const fb[] = {"a_train_0.bin", NULL};
    op.fallback = fb;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/g/", s2.port);
    CU_ASSERT_EQUAL(rm_fetch_cached(url, NULL, dir, &op, path, sizeof path, NULL, &e), RM_ENOTFOUND);
    CU_ASSERT(strstr(e.msg, "404 from ") && strstr(e.msg, "/g/a_train_0.bin"));
    op.fallback = NULL;
    CU_ASSERT_EQUAL(rm_fetch_cached(url, NULL, dir, &op, path, sizeof path, NULL, &e), RM_ENOTFOUND);
    CU_ASSERT(strstr(e.msg, "/g/index.txt") != NULL);
    srv_stop(&s2);
    free(ab);
    free(a);
    free(b);
    rm_test_rmtree(dir);
    free(dir);
}

/* s3://bucket/prefix/ by ListObjectsV2 (signed, its query in canonical order), two pages joined
 * by the continuation token; deeper keys and the folder's marker left out; the listed sizes are
 * the progress' total. */
static void test_folder_s3_list(void)
{
    char *dir = rm_test_tmpdir("fetch");
    uint8_t *a = object(4000, 31), *b = object(6000, 32);
    const char *p1 = "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
                     "<Contents><Key>p/</Key><Size>0</Size></Contents>"
                     "<Contents><Key>p/s_train_0.bin</Key><Size>4000</Size></Contents>"
                     "<NextContinuationToken>T/1+</NextContinuationToken></ListBucketResult>";
    const char *p2 = "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>false</IsTruncated>"
                     "<Contents><Key>p/s_val_0.bin</Key><Size>6000</Size></Contents>"
                     "<Contents><Key>p/deep/s_train_9.bin</Key><Size>1</Size></Contents></ListBucketResult>";
    srv s = {.paths = {"/bkt?delimiter=%2F&list-type=2&prefix=p%2F",
                       "/bkt?continuation-token=T%2F1%2B&delimiter=%2F&list-type=2&prefix=p%2F",
                       "/bkt/p/s_train_0.bin", "/bkt/p/s_val_0.bin"},
             .data = {(const uint8_t *)p1, (const uint8_t *)p2, a, b},
             .len = {strlen(p1), strlen(p2), 4000, 6000},
             .s3_secret = "SECRET"};
    srv_start(&s);
    char ep[64], path[4096], p[4200];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", s.port);
    rm_s3_creds c = {.access_key = "AKID", .secret_key = "SECRET", .endpoint = ep};
    static const char *const accept[] = {"*.bin", NULL};
    prog pr = {0};
    rm_fetch_opts op = quick;
    op.s3 = &c;
    op.accept = accept;
    op.progress = on_prog;
    op.progress_ud = &pr;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_fetch_cached("s3://bkt/p/", NULL, dir, &op, path, sizeof path, NULL, &e), RM_OK);
    snprintf(p, sizeof p, "%s/s_train_0.bin", path);
    CU_ASSERT(file_is(p, a, 4000));
    snprintf(p, sizeof p, "%s/s_val_0.bin", path);
    CU_ASSERT(file_is(p, b, 6000));
    CU_ASSERT_EQUAL(s.requests, 4);
    CU_ASSERT_EQUAL(pr.total, 10000);
    srv_stop(&s);
    free(a);
    free(b);
    rm_test_rmtree(dir);
    free(dir);
}

typedef struct {
    const char *url, *dir;
    int rc;
    rm_fetch_stats st;
    char path[4096];
} racer;

static void *race(void *ud)
{
    racer *r = ud;
    rm_err e = {0};
    r->rc = rm_fetch_cached(r->url, NULL, r->dir, &quick, r->path, sizeof r->path, &r->st, &e);
    return NULL;
}

/* Workers that start together fetch once: the lock holds the others until the entry is done. */
static void test_concurrent(void)
{
    char *dir = rm_test_tmpdir("fetch");
    size_t n = 400000;
    uint8_t *o = object(n, 8);
    srv s = {.paths = {"/c.bin"}, .data = {o}, .len = {n}, .script = {A_SLOW}, .nscript = 1};
    srv_start(&s);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/c.bin", s.port);
    racer r[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (racer){.url = url, .dir = dir};
        pthread_create(&th[i], NULL, race, &r[i]);
    }
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    int cached = 0;
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(r[i].rc, RM_OK);
        CU_ASSERT(file_is(r[i].path, o, n));
        cached += r[i].st.cached;
    }
    CU_ASSERT_EQUAL(s.requests, 1);
    CU_ASSERT_EQUAL(cached, 2);
    srv_stop(&s);
    free(o);
    rm_test_rmtree(dir);
    free(dir);
}

/* s3://bucket/key: a path-style GET signed with SigV4 (checked here from the definition), the
 * session token sent and signed, a cut body resumed with a signed Range request; a wrong secret
 * is "403 from s3://bucket/key: signature rejected" at once (no retry, no hang); no
 * credentials is an error before any request. */
static void test_s3(void)
{
    char *dir = rm_test_tmpdir("fetch");
    size_t n = 120000;
    uint8_t *o = object(n, 11);
    srv s = {.paths = {"/bkt/data/tok%20s.bin"},
             .data = {o},
             .len = {n},
             .script = {A_CUT},
             .nscript = 1,
             .s3_secret = "SECRET/key+1"};
    srv_start(&s);
    char ep[64], dest[4096];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d/", s.port);
    rm_s3_creds c = {.access_key = "AKID",
                     .secret_key = "SECRET/key+1",
                     .session_token = "TOKEN-1",
                     .region = "eu-west-3",
                     .endpoint = ep};
    rm_fetch_opts op = quick;
    op.s3 = &c;
    snprintf(dest, sizeof dest, "%s/o", dir);
    rm_fetch_stats st = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_fetch_file("s3://bkt/data/tok s.bin", dest, &op, &st, &e), RM_OK);
    CU_ASSERT(file_is(dest, o, n));
    CU_ASSERT_EQUAL(s.requests, 2);
    CU_ASSERT_EQUAL(s.range_start[1], (long)(n / 2));
    CU_ASSERT(strstr(s.last_auth, "Credential=AKID/") && strstr(s.last_auth, "/eu-west-3/s3/aws4_request"));
    CU_ASSERT(s.had_token);
    CU_ASSERT(s.had_sha);
    /* the wrong secret: one request, the message names the s3:// URI, never the secret */
    c.secret_key = "WRONG";
    unlink(dest);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_fetch_file("s3://bkt/data/tok s.bin", dest, &op, NULL, &e), RM_EAUTH);
    CU_ASSERT_STRING_EQUAL(e.msg,
                           "spec.training.data.uri: 403 from s3://bkt/data/tok s.bin: signature rejected");
    CU_ASSERT_EQUAL(s.requests, 3);
    c.access_key = NULL;
    CU_ASSERT_EQUAL(rm_fetch_file("s3://bkt/k", dest, &op, NULL, &e), RM_EAUTH);
    CU_ASSERT(strstr(e.msg, "no S3 credentials") != NULL);
    CU_ASSERT_EQUAL(rm_fetch_file("s3://bkt", dest, &op, NULL, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(s.requests, 3);
    srv_stop(&s);
    free(o);
    rm_test_rmtree(dir);
    free(dir);
}

/* The object changes between a cut and the resume: the .part's validator goes as If-Range, the
 * server sends the new version whole, and the file is the new version, not old bytes spliced
 * with new ones. An unchanged object is resumed (the same If-Range, a 206). */
static void test_changed_object(void)
{
    char *dir = rm_test_tmpdir("fetch");
    size_t n = 100000;
    uint8_t *v1 = object(n, 21), *v2 = object(n, 22);
    srv s = {.paths = {"/v"},
             .data = {v1},
             .len = {n},
             .script = {A_CUT, A_503, A_OK, A_CUT, A_503},
             .nscript = 5,
             .etag = "\"v1\""};
    srv_start(&s);
    char url[128], dest[4096], vp[4200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v", s.port);
    snprintf(dest, sizeof dest, "%s/v", dir);
    rm_fetch_opts op = quick;
    op.attempts = 1; /* a cut, then a 503 end the call: the .part stays, as after a killed process */
    rm_err e = {0};
    CU_ASSERT_NOT_EQUAL(rm_fetch_file(url, dest, &op, NULL, &e), RM_OK);
    CU_ASSERT_EQUAL(s.requests, 2);
    snprintf(vp, sizeof vp, "%s.part.validator", dest);
    char *saved = rm_test_read_file(vp, NULL);
    CU_ASSERT_STRING_EQUAL(saved ? saved : "", "\"v1\"");
    free(saved);
    /* unchanged: resumed with If-Range "v1" -> 206 */
    CU_ASSERT_EQUAL_FATAL(rm_fetch_file(url, dest, &quick, NULL, &e), RM_OK);
    CU_ASSERT(file_is(dest, v1, n));
    CU_ASSERT_STRING_EQUAL(s.if_range[0], "");
    CU_ASSERT_STRING_EQUAL(s.if_range[2], "\"v1\"");
    CU_ASSERT_EQUAL(s.range_start[2], (long)(n / 2));
    CU_ASSERT(access(vp, F_OK) != 0); /* gone with the .part */
    /* cut again, then the object changes to v2 */
    unlink(dest);
    CU_ASSERT_NOT_EQUAL(rm_fetch_file(url, dest, &op, NULL, &e), RM_OK);
    s.data[0] = v2;
    s.etag = "\"v2\"";
    CU_ASSERT_EQUAL_FATAL(rm_fetch_file(url, dest, &quick, NULL, &e), RM_OK);
    CU_ASSERT_STRING_EQUAL(s.if_range[5], "\"v1\"");
    CU_ASSERT_EQUAL(s.requests, 6);
    CU_ASSERT(file_is(dest, v2, n));
    srv_stop(&s);
    free(v1);
    free(v2);
    rm_test_rmtree(dir);
    free(dir);
}

/* An S3 double for uploads: every request SigV4-checked (sigv4_ok, the canonical query
 * included) with the payload's sha256 matching the body; PUT /b/k stores k; POST ?uploads= starts
 * an upload; PUT ?partNumber=N&uploadId=U stores part N (answering its ETag); POST ?uploadId=U
 * with the parts' list assembles them in the listed order (checking each ETag); DELETE ?uploadId=U
 * aborts. fail_part: that part's first attempt answers 503; deny: every request answers 403. */
typedef struct s3d {
    int lfd, port;
    pthread_t th;
    atomic_int stop;
    uint8_t *obj; /* the stored object (malloc) */
    size_t obj_len;
    uint8_t *parts[16]; /* by part number - 1 */
    size_t part_len[16];
    int creates, completes, aborts, part_puts, single_puts, bad_sigs;
    int fail_part, failed_once;
    int deny_part; /* that part answers 403 every time */
    bool deny;
} s3d;

static void s3d_reply(int fd, int status, const char *extra, const char *body)
{
    char hdr[512];
    int hl = snprintf(hdr, sizeof hdr, "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
                      status, strlen(body), extra ? extra : "");
    (void)!send(fd, hdr, (size_t)hl, MSG_NOSIGNAL);
    (void)!send(fd, body, strlen(body), MSG_NOSIGNAL);
}

static void s3d_one(s3d *d, int fd)
{
    char req[8192] = "";
    size_t n = 0;
    char *end = NULL;
    /* look after every read: head and body can come in one read that fills req */
    while (!end && n < sizeof req - 1) {
        ssize_t r = recv(fd, req + n, sizeof req - 1 - n, 0);
        if (r <= 0)
            return;
        n += (size_t)r;
        req[n] = 0;
        end = strstr(req, "\r\n\r\n");
    }
    if (!end)
        return;
    char cl[32] = "0";
    header_of(req, "Content-Length", cl, sizeof cl);
    size_t blen = (size_t)strtoul(cl, NULL, 10), have = n - (size_t)(end + 4 - req);
    uint8_t *body = malloc(blen + 1);
    memcpy(body, end + 4, have < blen ? have : blen);
    while (have < blen) {
        ssize_t r = recv(fd, body + have, blen - have, 0);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    body[blen] = 0;
    *end = 0; /* the head alone from here */
    strcat(req, "\r\n\r\n");
    char method[16] = "", path[1024] = "", sha[80] = "", hx[65];
    sscanf(req, "%15s %1023s", method, path);
    uint8_t dg[32];
    rm_sha256(body, blen, dg);
    hexs(dg, hx);
    header_of(req, "x-amz-content-sha256", sha, sizeof sha);
    if (d->deny) {
        s3d_reply(fd, 403, NULL, "<Error><Code>AccessDenied</Code></Error>");
    } else if (!sigv4_ok(req, "SECRET-1") || strcmp(sha, hx) != 0) {
        d->bad_sigs++;
        s3d_reply(fd, 403, NULL, "<Error><Code>SignatureDoesNotMatch</Code></Error>");
    } else if (!strcmp(method, "POST") && strstr(path, "?uploads=")) {
        d->creates++;
        s3d_reply(fd, 200, NULL,
                  "<InitiateMultipartUploadResult><UploadId>up.1-x~</UploadId>"
                  "</InitiateMultipartUploadResult>");
    } else if (!strcmp(method, "PUT") && strstr(path, "?partNumber=")) {
        int pn = atoi(strstr(path, "?partNumber=") + 12);
        if (pn == d->deny_part) {
            s3d_reply(fd, 403, NULL, "<Error><Code>AccessDenied</Code></Error>");
        } else if (pn == d->fail_part && !d->failed_once++) {
            s3d_reply(fd, 503, NULL, "<Error><Code>SlowDown</Code></Error>");
        } else if (pn >= 1 && pn <= 16 && strstr(path, "&uploadId=up.1-x~")) {
            d->part_puts++;
            free(d->parts[pn - 1]);
            d->parts[pn - 1] = body;
            d->part_len[pn - 1] = blen;
            body = NULL;
            char et[96];
            snprintf(et, sizeof et, "ETag: \"etag-%d\"\r\n", pn);
            s3d_reply(fd, 200, et, "");
        } else {
            s3d_reply(fd, 400, NULL, "<Error><Code>InvalidArgument</Code></Error>");
        }
    } else if (!strcmp(method, "POST") && strstr(path, "?uploadId=up.1-x~")) {
        size_t tot = 0;
        char want[64];
        int np = 0;
        for (int i = 0; i < 16 && d->parts[i]; i++, np++) {
            snprintf(want, sizeof want, "<PartNumber>%d</PartNumber><ETag>\"etag-%d\"</ETag>", i + 1, i + 1);
            if (!strstr((char *)body, want))
                np = -100;
            tot += d->part_len[i];
        }
        if (np <= 0) {
            s3d_reply(fd, 400, NULL, "<Error><Code>InvalidPart</Code></Error>");
        } else {
            d->completes++;
            free(d->obj);
            d->obj = malloc(tot ? tot : 1);
            d->obj_len = 0;
            for (int i = 0; i < np; i++) {
                memcpy(d->obj + d->obj_len, d->parts[i], d->part_len[i]);
                d->obj_len += d->part_len[i];
            }
            s3d_reply(fd, 200, NULL,
                      "<CompleteMultipartUploadResult><ETag>\"x-3\"</ETag>"
                      "</CompleteMultipartUploadResult>");
        }
    } else if (!strcmp(method, "DELETE") && strstr(path, "?uploadId=")) {
        d->aborts++;
        s3d_reply(fd, 204, NULL, "");
    } else if (!strcmp(method, "PUT") && !strchr(path, '?')) {
        d->single_puts++;
        free(d->obj);
        d->obj = body;
        d->obj_len = blen;
        body = NULL;
        s3d_reply(fd, 200, "ETag: \"one\"\r\n", "");
    } else {
        s3d_reply(fd, 405, NULL, "");
    }
    free(body);
}

static void *s3d_main(void *ud)
{
    s3d *d = ud;
    while (!d->stop) {
        struct pollfd p = {d->lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(d->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        s3d_one(d, fd);
        shutdown(fd, SHUT_RDWR);
        close(fd);
    }
    return NULL;
}

static void s3d_run(s3d *d, bool start)
{
    if (start) {
        d->lfd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        CU_ASSERT_FATAL(bind(d->lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
        CU_ASSERT_FATAL(listen(d->lfd, 16) == 0);
        socklen_t sl = sizeof sa;
        getsockname(d->lfd, (struct sockaddr *)&sa, &sl);
        d->port = ntohs(sa.sin_port);
        pthread_create(&d->th, NULL, s3d_main, d);
        return;
    }
    d->stop = 1;
    pthread_join(d->th, NULL);
    close(d->lfd);
    free(d->obj);
    for (int i = 0; i < 16; i++)
        free(d->parts[i]);
}

/* rm_upload_file against the double: one signed PUT under the threshold; above it a multipart
 * upload whose parts (the 2nd refused once with 503 and retried) reassemble the file byte for
 * byte, every request's signature (query included) and payload hash verified; a refused key
 * is final, names the field and the s3:// URI, and aborts nothing it did not create. */
static void test_upload_s3(void)
{
    s3d d = {.fail_part = 2};
    s3d_run(&d, true);
    char *dir = rm_test_tmpdir("upload");
    char path[512], ep[64];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t n = 10000;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 7 + i / 251);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f && fwrite(data, 1, n, f) == n);
    fclose(f);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", d.port);
    rm_s3_creds c = {.access_key = "AKID", .secret_key = "SECRET-1", .region = "eu-west-1", .endpoint = ep};
    rm_fetch_opts o = {.field = "spec.output.uri", .s3 = &c, .backoff_s = 0.01};
    rm_upload_stats st = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_upload_file(path, "s3://models/run-1/model.safetensors", &o, &st, &e), RM_OK);
    CU_ASSERT(d.single_puts == 1 && d.creates == 0 && st.parts == 0 && st.bytes == n && d.bad_sigs == 0);
    CU_ASSERT(d.obj_len == n && memcmp(d.obj, data, n) == 0);
    /* 10,000 bytes in parts of 4,096: 4096, 4096, 1808 */
    o.multipart_threshold = 4096;
    o.part_bytes = 4096;
    memset(&st, 0, sizeof st);
    free(d.obj);
    d.obj = NULL;
    d.obj_len = 0;
    CU_ASSERT_EQUAL(rm_upload_file(path, "s3://models/run-1/model.safetensors", &o, &st, &e), RM_OK);
    CU_ASSERT_EQUAL(d.bad_sigs, 0);
    CU_ASSERT(d.creates == 1 && d.part_puts == 3 && d.completes == 1 && d.aborts == 0 &&
              d.failed_once == 2); /* part 2: a 503, then accepted */
    CU_ASSERT(st.parts == 3 && st.bytes == n);
    CU_ASSERT(d.part_len[2] == 1808);
    CU_ASSERT(d.obj_len == n && d.obj && memcmp(d.obj, data, n) == 0);
    /* a part refused: the upload is aborted, nothing completed */
    d.deny_part = 3;
    CU_ASSERT_EQUAL(rm_upload_file(path, "s3://models/run-3/model.safetensors", &o, NULL, &e), RM_EAUTH);
    CU_ASSERT(d.creates == 2 && d.aborts == 1 && d.completes == 1);
    CU_ASSERT_STRING_EQUAL(e.msg,
                           "spec.output.uri: 403 from s3://models/run-3/model.safetensors: access denied");
    /* refused: final at once, named */
    d.deny = true;
    CU_ASSERT_EQUAL(rm_upload_file(path, "s3://models/run-2/model.safetensors", &o, NULL, &e), RM_EAUTH);
    CU_ASSERT_STRING_EQUAL(e.msg,
                           "spec.output.uri: 403 from s3://models/run-2/model.safetensors: access denied");
    CU_ASSERT(strstr(e.msg, "SECRET") == NULL && strstr(e.msg, "127.0.0.1") == NULL);
    s3d_run(&d, false);
    free(data);
    rm_test_rmtree(dir);
    free(dir);
}

/* The multipart plan (common/fetch.h, rm_upload_plan): one PUT up to the threshold, parts of
 * part_bytes above it with the remainder last, grown to whole MiB past 10,000 parts, refused past
 * 10,000 parts of 5 GiB; a single PUT never exceeds 5 GiB whatever the threshold. */
static void test_upload_plan(void)
{
    rm_upload_plan_t p;
    rm_err e = {0};
    const uint64_t MiB = (uint64_t)1 << 20, GiB = (uint64_t)1 << 30;
    CU_ASSERT_EQUAL(rm_upload_plan(0, 0, 0, &p, &e), RM_OK);
    CU_ASSERT(!p.multipart && p.nparts == 1 && p.last_bytes == 0);
    CU_ASSERT_EQUAL(rm_upload_plan(RM_UPLOAD_THRESHOLD_DEFAULT, 0, 0, &p, &e), RM_OK);
    CU_ASSERT(!p.multipart && p.nparts == 1 && p.last_bytes == RM_UPLOAD_THRESHOLD_DEFAULT);
    CU_ASSERT_EQUAL(rm_upload_plan(RM_UPLOAD_THRESHOLD_DEFAULT + 1, 0, 0, &p, &e), RM_OK);
    CU_ASSERT(p.multipart && p.nparts == 2 && p.part_bytes == RM_UPLOAD_PART_DEFAULT && p.last_bytes == 1);
    /* 12 MiB + 3 bytes in 5 MiB parts: 5, 5, 2 MiB + 3 */
    CU_ASSERT_EQUAL(rm_upload_plan(12 * MiB + 3, 5 * MiB, 5 * MiB, &p, &e), RM_OK);
    CU_ASSERT(p.multipart && p.nparts == 3 && p.part_bytes == 5 * MiB && p.last_bytes == 2 * MiB + 3);
    /* an exact multiple: the last part is whole */
    CU_ASSERT_EQUAL(rm_upload_plan(10 * MiB, 1, 5 * MiB, &p, &e), RM_OK);
    CU_ASSERT(p.multipart && p.nparts == 2 && p.last_bytes == 5 * MiB);
    /* a threshold above 5 GiB still splits what one PUT cannot carry */
    CU_ASSERT_EQUAL(rm_upload_plan(6 * GiB, 100 * GiB, 0, &p, &e), RM_OK);
    CU_ASSERT(p.multipart && p.nparts == 96 && p.last_bytes == 64 * MiB);
    /* 100 GiB in 5 MiB parts would be 20,480 parts: parts grow to 11 MiB (10,000 x 11 MiB >= 100 GiB) */
    CU_ASSERT_EQUAL(rm_upload_plan(100 * GiB, 5 * MiB, 5 * MiB, &p, &e), RM_OK);
    CU_ASSERT(p.multipart && p.part_bytes == 11 * MiB && p.nparts <= RM_UPLOAD_MAX_PARTS);
    CU_ASSERT_EQUAL((p.nparts - 1) * p.part_bytes + p.last_bytes, 100 * GiB);
    CU_ASSERT(p.last_bytes >= 1 && p.last_bytes <= p.part_bytes);
    /* past 10,000 parts of 5 GiB */
    CU_ASSERT_EQUAL(rm_upload_plan((uint64_t)RM_UPLOAD_MAX_PARTS * 5 * GiB + 1, 0, 0, &p, &e), RM_ETOOBIG);
}

void rm_suite_fetch(void);
void rm_suite_fetch(void)
{
    static const rm_test_case cases[] = {
        {"sha256_vectors", test_sha256_vectors},
        {"cached_once", test_cached_once},
        {"resume", test_resume},
        {"range_ignored", test_range_ignored},
        {"statuses", test_statuses},
        {"sha_and_cap", test_sha_and_cap},
        {"folder", test_folder},
        {"folder_index", test_folder_index},
        {"folder_s3_list", test_folder_s3_list},
        {"concurrent", test_concurrent},
        {"s3_sigv4", test_s3},
        {"changed_object", test_changed_object},
        {"upload_plan", test_upload_plan},
        {"upload_s3", test_upload_s3},
    };
    RM_ADD_SUITE("fetch", NULL, NULL, cases);
}
