/* fetch.c — remote data into a local cache (fetch.h; docs/models-and-data.md, "Where data comes
 * from"). One easy handle per rm_fetch_file call; the body goes straight to the .part file with
 * pwrite at the offset the range answer names, so a retry can never duplicate or shift bytes. */
#include "common/fetch.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/httpc.h"
#include "common/sha256.h"

#define FETCH_BACKOFF_CAP_S 30.0

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void curl_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

void rm_fetch_s3_from_env(rm_s3_creds *c)
{
#define ENV_OR_NULL(n) (getenv(n) && *getenv(n) ? getenv(n) : NULL)
    c->access_key = ENV_OR_NULL("AWS_ACCESS_KEY_ID");
    c->secret_key = ENV_OR_NULL("AWS_SECRET_ACCESS_KEY");
    c->session_token = ENV_OR_NULL("AWS_SESSION_TOKEN");
    c->region = ENV_OR_NULL("AWS_REGION") ? ENV_OR_NULL("AWS_REGION") : ENV_OR_NULL("AWS_DEFAULT_REGION");
    c->endpoint = ENV_OR_NULL("AWS_ENDPOINT_URL_S3") ? ENV_OR_NULL("AWS_ENDPOINT_URL_S3")
                                                     : ENV_OR_NULL("AWS_ENDPOINT_URL");
    c->ca_bundle = ENV_OR_NULL("AWS_CA_BUNDLE");
#undef ENV_OR_NULL
}

/* What one rm_fetch_file call talks to: the URL curl fetches and, for s3://, how it signs. */
typedef struct target {
    char url[4096];
    bool s3;
    char sigv4[128];      /* "aws:amz:REGION:s3" */
    char token_hdr[4200]; /* "x-amz-security-token: ..." or "" */
} target;

/* s3://bucket/key -> ENDPOINT/bucket/key (path-style; the key percent-encoded but for '/'). */
static int resolve(const char *uri, const rm_fetch_opts *o, const char *field, target *t, rm_err *err)
{
    memset(t, 0, sizeof *t);
    if (strncmp(uri, "http://", 7) == 0 || strncmp(uri, "https://", 8) == 0) {
        if (strlen(uri) >= sizeof t->url)
            return rm_err_field(err, RM_EINVAL, field, "URI longer than %zu bytes", sizeof t->url - 1);
        memcpy(t->url, uri, strlen(uri) + 1);
        return RM_OK;
    }
    if (strncmp(uri, "s3://", 5) != 0)
        return rm_err_field(err, RM_EINVAL, field, "%s: only http://, https:// and s3:// are fetched", uri);
    const char *b = uri + 5, *slash = strchr(b, '/');
    if (!slash || slash == b || !slash[1])
        return rm_err_field(err, RM_EINVAL, field, "%s: must be s3://bucket/key", uri);
    const rm_s3_creds *c = o->s3;
    if (!c || !c->access_key || !c->secret_key)
        return rm_err_field(err, RM_EAUTH, field,
                            "%s: no S3 credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, from "
                            "spec.training.data.secretRef or the environment)",
                            uri);
    const char *region = c->region ? c->region : "us-east-1";
    char ep[1024];
    if (c->endpoint)
        rm_sfmt(ep, sizeof ep, "%s", c->endpoint);
    else
        rm_sfmt(ep, sizeof ep, "https://s3.%s.amazonaws.com", region);
    size_t el = strlen(ep);
    while (el && ep[el - 1] == '/')
        ep[--el] = 0;
    size_t n = (size_t)snprintf(t->url, sizeof t->url, "%s/%.*s/", ep, (int)(slash - b), b);
    for (const char *k = slash + 1; *k && n + 4 < sizeof t->url; k++) {
        unsigned char ch = (unsigned char)*k;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            strchr("-._~/", ch))
            t->url[n++] = (char)ch;
        else
            n += (size_t)snprintf(t->url + n, 4, "%%%02X", ch);
    }
    t->url[n] = 0;
    t->s3 = true;
    rm_sfmt(t->sigv4, sizeof t->sigv4, "aws:amz:%s:s3", region);
    if (c->session_token)
        rm_sfmt(t->token_hdr, sizeof t->token_hdr, "x-amz-security-token: %s", c->session_token);
    return RM_OK;
}

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* What every request to tg shares (fetches and uploads): the URL, SigV4 signing with the payload's
 * sha256 (hex) in the signed x-amz-content-sha256 header plus a session token for s3, timeouts,
 * protocols, the CA bundle. *hl receives the header list (the caller frees it after the
 * transfer and may append to it, then set CURLOPT_HTTPHEADER again). */
static int curl_base(CURL *h, const target *tg, const rm_fetch_opts *o, const char *ca, long connect_ms,
                     long stall, const char *payload_sha, struct curl_slist **hl, char *ebuf, rm_err *err)
{
    *hl = NULL;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, tg->url);
    if (tg->s3) { /* libcurl signs each request (SigV4); the token rides in a signed x-amz header */
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, tg->sigv4);
        curl_easy_setopt(h, CURLOPT_USERNAME, o->s3->access_key);
        curl_easy_setopt(h, CURLOPT_PASSWORD, o->s3->secret_key);
        char ph[100];
        rm_sfmt(ph, sizeof ph, "x-amz-content-sha256: %s", payload_sha); /* S3 wants it signed */
        struct curl_slist *l = curl_slist_append(NULL, ph);
        struct curl_slist *l2 = l && tg->token_hdr[0] ? curl_slist_append(l, tg->token_hdr) : l;
        if (!l || !l2) {
            curl_slist_free_all(l);
            return rm_errf(err, RM_ENOMEM, "out of memory");
        }
        *hl = l;
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L); /* a signature is for one URL */
    }
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, stall);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "ringmaster-fetch");
    if (ca && *ca)
        curl_easy_setopt(h, CURLOPT_CAINFO, ca);
    return RM_OK;
}

typedef struct xfer {
    int fd;
    uint64_t off;       /* where the next body byte goes (the .part's length so far) */
    uint64_t start;     /* the offset this attempt asked for */
    uint64_t total;     /* the object's length when known, else 0 */
    uint64_t max_bytes; /* cap */
    uint64_t got;       /* body bytes written by this attempt */
    long status;        /* the final response's status, read at the first body byte */
    bool checked;       /* status looked at */
    bool keep;          /* the body is the object (200/206), not an error page */
    int64_t cr_start;   /* Content-Range start of this response; -1 none */
    uint64_t cr_total;  /* Content-Range total; 0 none */
    uint64_t clen;      /* Content-Length of this response; 0 none */
    double retry_after; /* -1 none */
    int fail;           /* RM_* set by a callback that aborted the transfer */
    char ebody[1024];   /* the start of an error page (S3's <Code>), NUL-terminated */
    char etag[200];     /* this response's strong ETag, else its Last-Modified: the If-Range validator */
    bool etag_strong;
    size_t nebody;
    char why[160];
    CURL *h;
    const rm_fetch_opts *o;
    const char *url;
} xfer;

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) { /* a new response (redirects, 100) */
        x->cr_start = -1;
        x->cr_total = 0;
        x->clen = 0;
        x->etag[0] = 0;
        x->etag_strong = false;
        return len;
    }
    char line[256];
    size_t l = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, p, l);
    line[l] = 0;
    unsigned long long a, b, t;
    if (strncasecmp(line, "content-range:", 14) == 0) {
        if (sscanf(line + 14, " bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
            x->cr_start = (int64_t)a;
            x->cr_total = t;
        } else if (sscanf(line + 14, " bytes %llu-%llu/*", &a, &b) == 2) {
            x->cr_start = (int64_t)a;
        }
    } else if (strncasecmp(line, "etag:", 5) == 0 ||
               (strncasecmp(line, "last-modified:", 14) == 0 && !x->etag_strong)) {
        bool tag = strncasecmp(line, "etag:", 5) == 0;
        const char *v = line + (tag ? 5 : 14);
        while (*v == ' ')
            v++;
        size_t vl = strcspn(v, "\r\n");
        if (!(tag && strncmp(v, "W/", 2) == 0) && vl < sizeof x->etag) { /* If-Range takes no weak tag */
            memcpy(x->etag, v, vl);
            x->etag[vl] = 0;
            x->etag_strong = tag;
        }
    } else if (strncasecmp(line, "content-length:", 15) == 0 && sscanf(line + 15, " %llu", &a) == 1) {
        x->clen = a;
    } else {
        double d = rm_http_retry_after(p, len);
        if (d >= 0)
            x->retry_after = d;
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    if (!x->checked) {
        x->checked = true;
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
        if (x->status == 206) {
            if (x->cr_start < 0 || (uint64_t)x->cr_start != x->start) {
                x->fail = RM_EPROTO;
                rm_sfmt(x->why, sizeof x->why, "asked for bytes from %" PRIu64 ", got a range from %lld",
                        x->start, (long long)x->cr_start);
                return 0;
            }
            x->total = x->cr_total;
            x->keep = true;
        } else if (x->status == 200) {
            if (x->start > 0) { /* the server ignored the range: start over */
                if (ftruncate(x->fd, 0) != 0) {
                    x->fail = RM_EIO;
                    rm_sfmt(x->why, sizeof x->why, "truncate: %s", strerror(errno));
                    return 0;
                }
                x->off = 0;
                x->start = 0;
            }
            x->total = x->clen;
            x->keep = true;
        }
        if (x->keep && x->total > x->max_bytes) {
            x->fail = RM_ETOOBIG;
            rm_sfmt(x->why, sizeof x->why, "%" PRIu64 " bytes is over the %" PRIu64 "-byte limit", x->total,
                    x->max_bytes);
            return 0;
        }
    }
    if (!x->keep) { /* an error page: its start kept for the message, the rest dropped */
        size_t take = len < sizeof x->ebody - 1 - x->nebody ? len : sizeof x->ebody - 1 - x->nebody;
        memcpy(x->ebody + x->nebody, p, take);
        x->nebody += take;
        x->ebody[x->nebody] = 0;
        return len;
    }
    if (x->off + len > x->max_bytes) {
        x->fail = RM_ETOOBIG;
        rm_sfmt(x->why, sizeof x->why, "more than %" PRIu64 " bytes", x->max_bytes);
        return 0;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = pwrite(x->fd, p + done, len - done, (off_t)(x->off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            x->fail = RM_EIO;
            rm_sfmt(x->why, sizeof x->why, "write: %s", w < 0 ? strerror(errno) : "short write");
            return 0;
        }
        done += (size_t)w;
    }
    x->off += len;
    x->got += len;
    return len;
}

static int on_xfer(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln)
{
    xfer *x = ud;
    (void)dln;
    (void)ult;
    (void)uln;
    if (x->o->cancel && *x->o->cancel)
        return 1;
    if (x->o->progress && x->keep)
        x->o->progress(x->o->progress_ud, x->url, x->off,
                       x->total ? x->total : (uint64_t)(dlt > 0 ? dlt : 0));
    return 0;
}

static void sleep_s(double s, const volatile sig_atomic_t *cancel)
{
    while (s > 0 && !(cancel && *cancel)) {
        double d = s < 0.1 ? s : 0.1;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
        s -= d;
    }
}

/* The first line of a small file into buf; false when it cannot be read. */
static bool read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\r\n")] = 0;
    return ok;
}

/* Is cc a TLS failure no retry can mend (an untrusted or unreadable certificate)? */
static bool tls_final(CURLcode cc)
{
    return cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE ||
           cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_SSL_ISSUER_ERROR;
}

/* Is this status final (no retry)? */
static bool status_final(long st)
{
    return st >= 400 && st < 500 && st != 408 && st != 429;
}

static int status_code(long st)
{
    if (st == 404 || st == 410)
        return RM_ENOTFOUND;
    if (st == 401 || st == 403)
        return RM_EAUTH;
    return RM_EINVAL;
}

/* What an S3 error body's <Code> means, as the message's tail ("" when none is known). */
static const char *s3_why(const char *body)
{
    static const struct {
        const char *code, *why;
    } known[] = {
        {"<Code>SignatureDoesNotMatch</Code>", ": signature rejected"},
        {"<Code>InvalidAccessKeyId</Code>", ": unknown access key"},
        {"<Code>AccessDenied</Code>", ": access denied"},
        {"<Code>NoSuchKey</Code>", ": no such key"},
        {"<Code>NoSuchBucket</Code>", ": no such bucket"},
        {"<Code>ExpiredToken</Code>", ": session token expired"},
        {"<Code>InvalidToken</Code>", ": session token rejected"},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(known); i++)
        if (strstr(body, known[i].code))
            return known[i].why;
    return "";
}

int rm_fetch_file(const char *url, const char *dest, const rm_fetch_opts *o, rm_fetch_stats *stats,
                  rm_err *err)
{
    static const rm_fetch_opts none = {0};
    if (!o)
        o = &none;
    const char *field = o->field ? o->field : "uri";
    if (!url || !dest)
        return rm_err_field(err, RM_EINVAL, field, "fetch: url and destination are required");
    target tg;
    RM_CHECK(resolve(url, o, field, &tg, err));
    const char *ca = o->ca_bundle ? o->ca_bundle : o->s3 ? o->s3->ca_bundle : NULL;
    pthread_once(&g_once, curl_once);
    int attempts = o->attempts > 0 ? o->attempts : 5;
    double backoff = o->backoff_s > 0 ? o->backoff_s : 0.5;
    long stall = (long)(o->stall_s > 0 ? o->stall_s + 0.999 : 30);
    long connect_ms = (long)((o->connect_timeout_s > 0 ? o->connect_timeout_s : 10) * 1000);
    uint64_t max_bytes = o->max_bytes ? o->max_bytes : (uint64_t)1 << 40;

    char part[PATH_MAX], vpath[PATH_MAX + 16];
    if ((size_t)snprintf(part, sizeof part, "%s.part", dest) >= sizeof part)
        return rm_err_field(err, RM_EINVAL, field, "%s: path too long", dest);
    rm_sfmt(vpath, sizeof vpath, "%s.validator", part); /* what the .part's bytes were: If-Range */
    int fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return rm_err_field(err, RM_EIO, field, "%s: %s", part, strerror(errno));
    CURL *h = curl_easy_init();
    if (!h) {
        close(fd);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    int rc = RM_OK, failed = 0, range_restarts = 0;
    char last[200] = "";
    for (;;) {
        struct stat sb;
        if (fstat(fd, &sb) != 0) {
            rc = rm_err_field(err, RM_EIO, field, "%s: %s", part, strerror(errno));
            break;
        }
        xfer x = {.fd = fd,
                  .off = (uint64_t)sb.st_size,
                  .start = (uint64_t)sb.st_size,
                  .max_bytes = max_bytes,
                  .cr_start = -1,
                  .retry_after = -1,
                  .h = h,
                  .o = o,
                  .url = url};
        char range[48], ebuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *hl = NULL;
        if ((rc = curl_base(h, &tg, o, ca, connect_ms, stall, EMPTY_SHA256, &hl, ebuf, err)) != RM_OK)
            break;
        if (!tg.s3)
            curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xfer);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
        char ifr[240] = "", saved[200] = "";
        if (x.start > 0 && read_line(vpath, saved, sizeof saved) && saved[0]) {
            /* the object changed since the .part began: the server answers 200 with all of it */
            rm_sfmt(ifr, sizeof ifr, "If-Range: %s", saved);
            struct curl_slist *n = curl_slist_append(hl, ifr);
            if (!n) {
                curl_slist_free_all(hl);
                rc = rm_errf(err, RM_ENOMEM, "out of memory");
                break;
            }
            hl = n;
            curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        }
        if (x.start > 0) {
            snprintf(range, sizeof range, "%" PRIu64 "-", x.start);
            curl_easy_setopt(h, CURLOPT_RANGE, range);
            if (stats && x.start > stats->resumed_from)
                stats->resumed_from = x.start;
            rm_info("fetch resuming url=%s from=%" PRIu64, url, x.start);
        }
        CURLcode cc = curl_easy_perform(h);
        long st = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(hl);
        if (stats) {
            stats->requests++;
            stats->bytes += x.got;
        }
        if (x.keep && x.start == 0 && x.got > 0) { /* the bytes now in .part belong to this version */
            if (x.etag[0] && strcmp(x.etag, saved) != 0) {
                rm_fs_piece pc = {x.etag, strlen(x.etag)};
                rm_err ve = {0};
                rm_fs_write_atomic(vpath, &pc, 1,
                                   &ve); /* best effort: without it a resume is unconditional */
            } else if (!x.etag[0]) {
                unlink(vpath);
            }
        }
        if (x.fail == RM_ETOOBIG || x.fail == RM_EIO) {
            rc = rm_err_field(err, x.fail, field, "%s: %s", url, x.why);
            break;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK && o->cancel && *o->cancel) {
            rc = rm_err_field(err, RM_ECANCELED, field, "%s: canceled", url);
            break;
        }
        if (tls_final(cc)) { /* an untrusted certificate stays untrusted: no retry */
            rc = rm_err_field(err, RM_EAUTH, field, "%s: TLS: %s", url,
                              ebuf[0] ? ebuf : curl_easy_strerror(cc));
            break;
        }
        if (st == 416 && x.start > 0 && range_restarts++ == 0) {
            /* the part is as long as (or longer than) the object: it changed; fetch it anew */
            if (ftruncate(fd, 0) != 0) {
                rc = rm_err_field(err, RM_EIO, field, "%s: truncate: %s", part, strerror(errno));
                break;
            }
            continue;
        }
        if (cc == CURLE_OK && (st == 200 || st == 206)) {
            if (x.total && x.off != x.total) { /* a cut body curl did not notice */
                rm_sfmt(last, sizeof last, "%" PRIu64 " of %" PRIu64 " bytes", x.off, x.total);
            } else {
                if (fsync(fd) != 0 || rename(part, dest) != 0) {
                    rc = rm_err_field(err, RM_EIO, field, "%s: %s", dest, strerror(errno));
                    break;
                }
                unlink(vpath);
                rm_info("fetched url=%s bytes=%" PRIu64 " path=%s", url, x.off, dest);
                break;
            }
        } else if (cc == CURLE_OK || (st >= 300 && !x.keep)) {
            if (status_final(st) || (st >= 300 && st < 400) || (st > 0 && st < 200)) {
                rc = rm_err_field(err, status_code(st), field, "%ld from %s%s", st, url,
                                  tg.s3 ? s3_why(x.ebody) : "");
                break;
            }
            rm_sfmt(last, sizeof last, "%ld from %s", st, url);
        } else if (x.fail == RM_EPROTO) {
            rm_sfmt(last, sizeof last, "%s: %s", url, x.why);
            if (ftruncate(fd, 0) != 0) { /* a range we cannot place: start over */
                rc = rm_err_field(err, RM_EIO, field, "%s: truncate: %s", part, strerror(errno));
                break;
            }
        } else {
            rm_sfmt(last, sizeof last, "%s: %s", url, ebuf[0] ? ebuf : curl_easy_strerror(cc));
        }
        /* retry: an attempt that moved bytes is progress, not a failure */
        if (x.got > 0)
            failed = 0;
        else
            failed++;
        if (failed >= attempts) {
            rc = rm_err_field(err, cc == CURLE_OPERATION_TIMEDOUT ? RM_ETIMEDOUT : RM_EIO, field,
                              "%s (still failing after %d attempts)", last, failed);
            break;
        }
        double d = backoff * (double)(1u << (failed > 0 ? (failed - 1 < 6 ? failed - 1 : 6) : 0));
        if (x.retry_after >= 0)
            d = x.retry_after > d ? x.retry_after : d;
        if (d > FETCH_BACKOFF_CAP_S)
            d = FETCH_BACKOFF_CAP_S;
        rm_warn("fetch retrying url=%s err=\"%s\" attempt=%d delay_s=%.2f have=%" PRIu64, url, last, failed,
                d, x.off);
        sleep_s(d, o->cancel);
    }
    curl_easy_cleanup(h);
    close(fd);
    return rc;
}

/* ---- the cache ---------------------------------------------------------------------------- */

const char *rm_fetch_entry_dir(const char *cache_dir, const char *url, const char *sha256, char *buf,
                               size_t cap)
{
    rm_sha256_ctx c;
    uint8_t d[32];
    char hx[65];
    rm_sha256_init(&c);
    rm_sha256_update(&c, url, strlen(url));
    rm_sha256_final(&c, d);
    rm_sha256_hex(d, hx);
    hx[16] = 0;
    rm_sfmt(buf, cap, "%s/%s-%s", cache_dir, hx, sha256 && *sha256 ? sha256 : "any");
    return buf;
}

/* The last path segment of url (without query), or "data" when it has none. */
static void url_base(const char *url, char *out, size_t cap)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "?#");
    const char *end = p + n, *s = end;
    while (s > p && s[-1] != '/')
        s--;
    if (s == p || s == end) { /* no path, or it ends with '/' */
        rm_sfmt(out, cap, "data");
        return;
    }
    rm_sfmt(out, cap, "%.*s", (int)(end - s), s);
    if (!strcmp(out, ".") || !strcmp(out, ".."))
        rm_sfmt(out, cap, "data");
}

/* Take the entry's lock, waiting for another process's fetch; -1 with err on timeout. */
static int lock_entry(const char *dir, const rm_fetch_opts *o, const char *field, int *fd_out, rm_err *err)
{
    char p[PATH_MAX];
    rm_sfmt(p, sizeof p, "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return rm_err_field(err, RM_EIO, field, "%s: %s", p, strerror(errno));
    double wait = o->lock_wait_s > 0 ? o->lock_wait_s : 3600, t0 = rm_mono();
    bool said = false;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            int e = errno;
            close(fd);
            return rm_err_field(err, RM_EIO, field, "%s: flock: %s", p, strerror(e));
        }
        if (!said) {
            rm_info("fetch waiting for another process fetching into dir=%s", dir);
            said = true;
        }
        if (rm_mono() - t0 > wait || (o->cancel && *o->cancel)) {
            close(fd);
            return rm_err_field(err, o->cancel && *o->cancel ? RM_ECANCELED : RM_ETIMEDOUT, field,
                                "%s: another process held the lock for over %.0f s", p, wait);
        }
        sleep_s(0.05, o->cancel);
    }
    *fd_out = fd;
    return RM_OK;
}

/* ---- folders: the files of a URI ending in '/' ---------------------------------------------- */

static void query_escape(const char *s, char *out, size_t cap);

/* Progress over a whole cache entry: the bytes of the files already fetched plus the current
 * one's; the total is the listing's sum when it gave sizes, else what is known so far. */
typedef struct cum_progress {
    const rm_fetch_opts *o; /* the caller's (its progress callback) */
    uint64_t done;          /* bytes of the files fetched so far */
    uint64_t total;         /* the folder's bytes from its listing; 0 = not known */
} cum_progress;

static void cum_progress_fn(void *ud, const char *url, uint64_t have, uint64_t total)
{
    const cum_progress *c = ud;
    c->o->progress(c->o->progress_ud, url, c->done + have, c->total ? c->total : c->done + total);
}

/* A name a folder's listing or index may give: a plain file name of [A-Za-z0-9._+=,@~-], not
 * starting with '.' (the entry's own .lock and .complete), at most 200 bytes. */
static bool plain_name(const char *n)
{
    size_t l = strlen(n);
    return l > 0 && l <= 200 && n[0] != '.' &&
           strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789._+=,@~-") == l;
}

/* Fetch url+NAME into dir/NAME for each entry of names ("NAME" or "NAME|ALT|...": the first the
 * server has; a 404 tries the next), appending what was fetched to list. */
static int fetch_names(const char *url, const char *const *names, const char *dir, const rm_fetch_opts *o,
                       cum_progress *cum, rm_fetch_stats *stats, char (*list)[256], int *nfiles, rm_err *err)
{
    for (const char *const *n = names; *n; n++) {
        if (*nfiles >= RM_FETCH_MAX_FILES)
            return rm_err_field(err, RM_ETOOBIG, o->field ? o->field : "uri", "%s: more than %d files", url,
                                RM_FETCH_MAX_FILES);
        char alts[512];
        rm_sfmt(alts, sizeof alts, "%s", *n);
        char *save = NULL;
        bool got = false;
        rm_err first = {0};
        for (char *a = strtok_r(alts, "|", &save); a && !got; a = strtok_r(NULL, "|", &save)) {
            char u[4096], dest[PATH_MAX];
            rm_sfmt(u, sizeof u, "%s%s", url, a);
            rm_sfmt(dest, sizeof dest, "%s/%s", dir, a);
            rm_err fe = {0};
            int rc = rm_fetch_file(u, dest, o, stats, &fe);
            if (rc == RM_OK) {
                struct stat sb;
                rm_sfmt(list[(*nfiles)++], sizeof list[0], "%s", a);
                if (cum && stat(dest, &sb) == 0)
                    cum->done += (uint64_t)sb.st_size;
                got = true;
            } else if (rc != RM_ENOTFOUND) {
                *err = fe;
                return rc;
            } else if (!first.code) {
                first = fe;
            }
        }
        if (!got) {
            *err = first;
            return RM_ENOTFOUND;
        }
    }
    return RM_OK;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool over;
    const rm_fetch_opts *o;
} sbuf;

static size_t sbuf_body(char *p, size_t size, size_t n, void *ud)
{
    sbuf *b = ud;
    size_t len = size * n;
    if (b->n + len > b->cap) {
        b->over = true;
        return 0;
    }
    memcpy(b->p + b->n, p, len);
    b->n += len;
    b->p[b->n] = 0;
    return len;
}

static int sbuf_xfer(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln)
{
    const sbuf *b = ud;
    (void)dlt, (void)dln, (void)ult, (void)uln;
    return b->o->cancel && *b->o->cancel ? 1 : 0;
}

/* GET tg (a listing page, an index file) into *out (owned, NUL-terminated, at most cap bytes),
 * retried like a fetch: transport errors and 408/429/5xx up to o->attempts with doubling back-off;
 * 404/410 is RM_ENOTFOUND, another 4xx final. Messages name shown, never the endpoint. */
static int get_small(const target *tg, const char *shown, const rm_fetch_opts *o, size_t cap, char **out,
                     rm_err *err)
{
    const char *field = o->field ? o->field : "uri";
    int attempts = o->attempts > 0 ? o->attempts : 5;
    double backoff = o->backoff_s > 0 ? o->backoff_s : 0.5;
    long stall = (long)(o->stall_s > 0 ? o->stall_s + 0.999 : 30);
    long connect_ms = (long)((o->connect_timeout_s > 0 ? o->connect_timeout_s : 10) * 1000);
    const char *ca = o->ca_bundle ? o->ca_bundle : o->s3 ? o->s3->ca_bundle : NULL;
    *out = NULL;
    pthread_once(&g_once, curl_once);
    CURL *h = curl_easy_init();
    sbuf b = {.p = malloc(cap + 1), .cap = cap, .o = o};
    int rc = RM_OK;
    if (!h || !b.p) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    char last[300] = "";
    for (int failed = 0;;) {
        char ebuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *hl = NULL;
        b.n = 0;
        b.over = false;
        b.p[0] = 0;
        if ((rc = curl_base(h, tg, o, ca, connect_ms, stall, EMPTY_SHA256, &hl, ebuf, err)) != RM_OK)
            break;
        if (!tg->s3) {
            curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
            curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sbuf_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, sbuf_xfer);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &b);
        CURLcode cc = curl_easy_perform(h);
        long st = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(hl);
        if (b.over) {
            rc = rm_err_field(err, RM_ETOOBIG, field, "%s: the answer is over %zu bytes", shown, cap);
            break;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK && o->cancel && *o->cancel) {
            rc = rm_err_field(err, RM_ECANCELED, field, "%s: canceled", shown);
            break;
        }
        if (tls_final(cc)) {
            rc = rm_err_field(err, RM_EAUTH, field, "%s: TLS: %s", shown,
                              ebuf[0] ? ebuf : curl_easy_strerror(cc));
            break;
        }
        if (cc == CURLE_OK && st >= 200 && st < 300) {
            *out = b.p;
            b.p = NULL;
            break;
        }
        if (cc == CURLE_OK && (status_final(st) || (st >= 300 && st < 400) || (st > 0 && st < 200))) {
            rc = rm_err_field(err, status_code(st), field, "%ld from %s%s", st, shown,
                              tg->s3 ? s3_why(b.p) : "");
            break;
        }
        if (cc == CURLE_OK)
            rm_sfmt(last, sizeof last, "%ld from %s", st, shown);
        else
            rm_sfmt(last, sizeof last, "%s: %s", shown, curl_easy_strerror(cc));
        if (++failed >= attempts) {
            rc = rm_err_field(err, cc == CURLE_OPERATION_TIMEDOUT ? RM_ETIMEDOUT : RM_EIO, field,
                              "%s (still failing after %d attempts)", last, failed);
            break;
        }
        double d = backoff * (double)(1u << (failed - 1 < 6 ? failed - 1 : 6));
        if (d > FETCH_BACKOFF_CAP_S)
            d = FETCH_BACKOFF_CAP_S;
        rm_warn("fetch retrying url=%s err=\"%s\" attempt=%d delay_s=%.2f", shown, last, failed, d);
        sleep_s(d, o->cancel);
    }
out:
    free(b.p);
    if (h)
        curl_easy_cleanup(h);
    return rc;
}

/* The text between open and close after *at (XML entities &amp; &lt; &gt; &quot; &apos; decoded)
 * into out; *at moves past it. false when absent or too long. */
static bool xml_next(const char **at, const char *end, const char *open, const char *close, char *out,
                     size_t cap)
{
    const char *a = strstr(*at, open);
    if (!a || (end && a >= end))
        return false;
    a += strlen(open);
    const char *b = strstr(a, close);
    if (!b || (end && b > end))
        return false;
    *at = b + strlen(close);
    static const struct {
        const char *ent;
        char ch;
    } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    size_t n = 0;
    for (const char *p = a; p < b; n++) {
        if (n + 1 >= cap)
            return false;
        size_t k = 0;
        while (k < RM_ARRAY_LEN(ents) && strncmp(p, ents[k].ent, strlen(ents[k].ent)) != 0)
            k++;
        if (*p == '&' && k < RM_ARRAY_LEN(ents)) {
            out[n] = ents[k].ch;
            p += strlen(ents[k].ent);
        } else {
            out[n] = *p++;
        }
    }
    out[n] = 0;
    return true;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Add name to the listing (accept's patterns decide; an accepted name must be plain). */
static int list_add(const char *url, const char *name, const rm_fetch_opts *o, char ***v, int *n, rm_err *err)
{
    const char *field = o->field ? o->field : "uri";
    bool ok = !o->accept;
    for (const char *const *p = o->accept; p && *p && !ok; p++)
        ok = fnmatch(*p, name, 0) == 0;
    if (!ok)
        return RM_OK;
    if (!plain_name(name))
        return rm_err_field(
            err, RM_EINVAL, field,
            "%s: \"%.80s\" is not a plain file name ([A-Za-z0-9._+=,@~-], not starting with '.')", url, name);
    if (*n >= RM_FETCH_MAX_FILES)
        return rm_err_field(err, RM_ETOOBIG, field, "%s: more than %d files", url, RM_FETCH_MAX_FILES);
    char *c = strdup(name);
    if (!c)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    (*v)[(*n)++] = c;
    return RM_OK;
}

/* The files of a folder URI, sorted by name (what the checksum covers, in that order):
 * s3://bucket/prefix/ by ListObjectsV2 (delimiter '/': only the objects directly under the
 * prefix; every page followed, at most RM_FETCH_LIST_PAGES), *total their sizes' sum;
 * http(s)://.../ from its RM_FETCH_INDEX_NAME (one name per line; blank lines and '#' comments
 * skipped), RM_ENOTFOUND when it has none. Names outside o->accept are left out. */
static int list_folder(const char *url, const rm_fetch_opts *o, char ***names, int *n, uint64_t *total,
                       rm_err *err)
{
    const char *field = o->field ? o->field : "uri";
    char **v = calloc(RM_FETCH_MAX_FILES + 1, sizeof *v);
    char *body = NULL;
    int rc = RM_OK;
    *names = v;
    *n = 0;
    *total = 0;
    if (!v)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    if (strncmp(url, "s3://", 5) != 0) {
        target tg;
        char iu[4096], shown[4200];
        rm_sfmt(iu, sizeof iu, "%s%s", url, RM_FETCH_INDEX_NAME);
        rm_sfmt(shown, sizeof shown, "%s", iu);
        if ((rc = resolve(iu, o, field, &tg, err)) ||
            (rc = get_small(&tg, shown, o, RM_FETCH_LIST_MAX_BYTES, &body, err)))
            goto out;
        char *save = NULL;
        for (char *line = strtok_r(body, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            line[strcspn(line, "\r#")] = 0;
            while (*line == ' ' || *line == '\t')
                line++;
            size_t l = strlen(line);
            while (l && (line[l - 1] == ' ' || line[l - 1] == '\t'))
                line[--l] = 0;
            if (l && (rc = list_add(shown, line, o, &v, n, err)))
                goto out;
        }
    } else {
        const char *b = url + 5, *slash = strchr(b, '/');
        char bucket[256], prefix[1024], probe[1400], token[1024] = "";
        if (!slash || slash == b || (size_t)(slash - b) >= sizeof bucket ||
            strlen(slash + 1) >= sizeof prefix)
            return rm_err_field(err, RM_EINVAL, field, "%s: must be s3://bucket/prefix/", url);
        rm_sfmt(bucket, sizeof bucket, "%.*s", (int)(slash - b), b);
        rm_sfmt(prefix, sizeof prefix, "%s", slash + 1);
        rm_sfmt(probe, sizeof probe, "s3://%s/x", bucket); /* the endpoint and signing of the bucket */
        target base;
        if ((rc = resolve(probe, o, field, &base, err)))
            goto out;
        base.url[strlen(base.url) - 2] = 0; /* ENDPOINT/bucket */
        for (int page = 0;; page++) {
            if (page >= RM_FETCH_LIST_PAGES) {
                rc = rm_err_field(err, RM_ETOOBIG, field, "%s: more than %d pages of objects", url,
                                  RM_FETCH_LIST_PAGES);
                goto out;
            }
            /* the query's parameters sorted by name: SigV4's canonical order */
            char qt[3200], qp[3200];
            target tg = base;
            query_escape(token, qt, sizeof qt);
            query_escape(prefix, qp, sizeof qp);
            size_t ul = strlen(tg.url);
            int w =
                snprintf(tg.url + ul, sizeof tg.url - ul, "?%s%s%sdelimiter=%%2F&list-type=2&prefix=%s",
                         token[0] ? "continuation-token=" : "", token[0] ? qt : "", token[0] ? "&" : "", qp);
            if (w < 0 || (size_t)w >= sizeof tg.url - ul) {
                rc = rm_err_field(err, RM_EINVAL, field, "%s: listing URL too long", url);
                goto out;
            }
            free(body);
            body = NULL;
            if ((rc = get_small(&tg, url, o, RM_FETCH_LIST_MAX_BYTES, &body, err)))
                goto out;
            const char *at = body;
            for (;;) {
                const char *c = strstr(at, "<Contents>"), *ce = c ? strstr(c, "</Contents>") : NULL;
                if (!c || !ce)
                    break;
                char key[1100], size[32] = "0";
                const char *k = c;
                if (!xml_next(&k, ce, "<Key>", "</Key>", key, sizeof key)) {
                    rc = rm_err_field(err, RM_EPROTO, field, "%s: a listed object without a usable <Key>",
                                      url);
                    goto out;
                }
                k = c;
                xml_next(&k, ce, "<Size>", "</Size>", size, sizeof size);
                at = ce + 11;
                if (strncmp(key, prefix, strlen(prefix)) != 0)
                    continue;
                const char *name = key + strlen(prefix);
                if (!*name || strchr(name, '/')) /* the folder's own marker, a deeper object */
                    continue;
                int before = *n;
                if ((rc = list_add(url, name, o, &v, n, err)))
                    goto out;
                if (*n > before)
                    *total += strtoull(size, NULL, 10);
            }
            char trunc[16] = "";
            const char *t = body;
            if (!xml_next(&t, NULL, "<IsTruncated>", "</IsTruncated>", trunc, sizeof trunc) ||
                strcmp(trunc, "true") != 0)
                break;
            t = body;
            if (!xml_next(&t, NULL, "<NextContinuationToken>", "</NextContinuationToken>", token,
                          sizeof token)) {
                rc = rm_err_field(err, RM_EPROTO, field,
                                  "%s: a truncated listing without a continuation token", url);
                goto out;
            }
        }
    }
    if (*n == 0) {
        rc = rm_err_field(err, RM_ENOTFOUND, field, "%s: no files%s", url,
                          strncmp(url, "s3://", 5) == 0 ? " under this prefix"
                                                        : " in its " RM_FETCH_INDEX_NAME);
        if (strncmp(url, "s3://", 5) != 0)
            rc = RM_EINVAL; /* an empty index is the user's, not a missing one */
        goto out;
    }
    qsort(v, (size_t)*n, sizeof *v, cmp_name);
    rm_info("fetch: listed url=%s files=%d bytes=%llu", url, *n, (unsigned long long)*total);
out:
    free(body);
    return rc;
}

int rm_fetch_cached(const char *url, const char *const *names, const char *cache_dir, const rm_fetch_opts *o,
                    char *path, size_t cap, rm_fetch_stats *stats, rm_err *err)
{
    static const rm_fetch_opts none = {0};
    if (!o)
        o = &none;
    const char *field = o->field ? o->field : "uri";
    const char *sfield = o->sha256_field ? o->sha256_field : "sha256";
    char dir[PATH_MAX], done[PATH_MAX + 16], fname[256];
    if (!url || !cache_dir || !*cache_dir)
        return rm_err_field(err, RM_EINVAL, field, "fetch: url and cache folder are required");
    if (names && url[strlen(url) - 1] != '/')
        return rm_err_field(err, RM_EINVAL, field, "%s: a folder URI ends with '/'", url);
    rm_fetch_entry_dir(cache_dir, url, o->sha256, dir, sizeof dir);
    rm_sfmt(done, sizeof done, "%s/.complete", dir);
    rm_err e = {0};
    if (rm_fs_mkdir_p(dir, &e) != RM_OK)
        return rm_err_field(err, RM_EIO, field, "data cache: %s", e.msg);
    bool folder = url[strlen(url) - 1] == '/';
    if (!names && !folder)
        url_base(url, fname, sizeof fname);
    int lk = -1, rc = lock_entry(dir, o, field, &lk, err);
    if (rc)
        return rc;
    /* the names fetched, in order (what the checksum covers) */
    char(*list)[256] = calloc(RM_FETCH_MAX_FILES, sizeof *list);
    int nfiles = 0;
    char **listed = NULL;
    int nlisted = 0;
    struct stat sb;
    if (!list) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    if (stat(done, &sb) == 0) {
        if (stats)
            stats->cached = true;
        rm_info("fetch: cached url=%s dir=%s", url, dir);
        goto found;
    }
    /* progress over the whole entry: the files before this one, plus this one's */
    cum_progress cum = {.o = o};
    rm_fetch_opts oo = *o;
    if (o->progress) {
        oo.progress = cum_progress_fn;
        oo.progress_ud = &cum;
    }
    if (!names && !folder) {
        char dest[PATH_MAX];
        rm_sfmt(dest, sizeof dest, "%s/%s", dir, fname);
        if ((rc = rm_fetch_file(url, dest, &oo, stats, err)))
            goto out;
        rm_sfmt(list[nfiles++], sizeof list[0], "%s", fname);
    } else if (names) {
        if ((rc = fetch_names(url, names, dir, &oo, &cum, stats, list, &nfiles, err)))
            goto out;
    } else { /* a folder: its listing (s3) or index file (http) names the files */
        rc = list_folder(url, o, &listed, &nlisted, &cum.total, err);
        if (rc == RM_ENOTFOUND && o->fallback) {
            rm_info("fetch: no %s in the folder, fetching the usual names url=%s", RM_FETCH_INDEX_NAME, url);
            cum.total = 0;
            rc = fetch_names(url, o->fallback, dir, &oo, &cum, stats, list, &nfiles, err);
        } else if (rc == RM_OK) {
            rc = fetch_names(url, (const char *const *)listed, dir, &oo, &cum, stats, list, &nfiles, err);
        }
        if (rc)
            goto out;
    }
    if (o->sha256) {
        rm_sha256_ctx c;
        uint8_t d[32];
        char hx[65];
        rm_sha256_init(&c);
        for (int i = 0; i < nfiles; i++) {
            char p[PATH_MAX];
            rm_sfmt(p, sizeof p, "%s/%s", dir, list[i]);
            if ((rc = rm_sha256_file(&c, p, &e))) {
                rc = rm_err_field(err, rc, field, "%s", e.msg);
                goto out;
            }
        }
        rm_sha256_final(&c, d);
        rm_sha256_hex(d, hx);
        if (strcmp(hx, o->sha256) != 0) {
            for (int i = 0; i < nfiles; i++) { /* a retry fetches them anew */
                char p[PATH_MAX];
                rm_sfmt(p, sizeof p, "%s/%s", dir, list[i]);
                unlink(p);
            }
            rc = rm_err_field(err, RM_EINVAL, sfield, "the data fetched from %s has sha256 %s, not %s", url,
                              hx, o->sha256);
            goto out;
        }
    }
    {
        char body[4200];
        int bl = snprintf(body, sizeof body, "%s\n%s\n", url, o->sha256 ? o->sha256 : "-");
        rm_fs_piece pc = {body, (size_t)bl < sizeof body ? (size_t)bl : sizeof body - 1};
        if ((rc = rm_fs_write_atomic(done, &pc, 1, &e))) {
            rc = rm_err_field(err, rc, field, "data cache: %s", e.msg);
            goto out;
        }
    }
found:
    if (names || folder)
        rm_sfmt(path, cap, "%s", dir);
    else
        rm_sfmt(path, cap, "%s/%s", dir, fname);
    rc = RM_OK;
out:
    if (lk >= 0) {
        flock(lk, LOCK_UN);
        close(lk);
    }
    free(list);
    for (int i = 0; i < nlisted; i++)
        free(listed[i]);
    free(listed);
    return rc;
}

/* ---- uploads (spec.output.uri) ------------------------------------------------------------ */

int rm_upload_plan(uint64_t size, uint64_t threshold, uint64_t part_bytes, rm_upload_plan_t *p, rm_err *err)
{
    memset(p, 0, sizeof *p);
    if (!threshold)
        threshold = RM_UPLOAD_THRESHOLD_DEFAULT;
    if (!part_bytes)
        part_bytes = RM_UPLOAD_PART_DEFAULT;
    if (size <= threshold && size <= RM_UPLOAD_SINGLE_MAX) {
        *p = (rm_upload_plan_t){.multipart = false, .part_bytes = size, .nparts = 1, .last_bytes = size};
        return RM_OK;
    }
    if (part_bytes > RM_UPLOAD_SINGLE_MAX)
        part_bytes = RM_UPLOAD_SINGLE_MAX;
    if ((size + part_bytes - 1) / part_bytes > RM_UPLOAD_MAX_PARTS) { /* grow parts to fit, in MiB */
        uint64_t mib = (uint64_t)1 << 20;
        part_bytes = (size + RM_UPLOAD_MAX_PARTS - 1) / RM_UPLOAD_MAX_PARTS;
        part_bytes = (part_bytes + mib - 1) / mib * mib;
        if (part_bytes > RM_UPLOAD_SINGLE_MAX)
            return rm_errf(err, RM_ETOOBIG, "upload: %" PRIu64 " bytes exceed %d parts of 5 GiB", size,
                           RM_UPLOAD_MAX_PARTS);
    }
    p->multipart = true;
    p->part_bytes = part_bytes;
    p->nparts = (size + part_bytes - 1) / part_bytes;
    p->last_bytes = size - (p->nparts - 1) * part_bytes;
    return RM_OK;
}

/* One request's body source (a range of a file, or memory) and what came back. */
typedef struct upx {
    int fd;
    const char *mem;
    uint64_t off, len, sent;
    char body[8192]; /* the start of the response (UploadId, an S3 <Error>), NUL-terminated */
    size_t nbody;
    char etag[200];
    int fail;
    const rm_fetch_opts *o;
} upx;

static size_t up_read(char *buf, size_t size, size_t n, void *ud)
{
    upx *u = ud;
    size_t want = size * n;
    if (want > u->len - u->sent)
        want = (size_t)(u->len - u->sent);
    if (!want)
        return 0;
    if (u->mem) {
        memcpy(buf, u->mem + u->sent, want);
    } else {
        ssize_t r = pread(u->fd, buf, want, (off_t)(u->off + u->sent));
        if (r <= 0) {
            u->fail = RM_EIO;
            return CURL_READFUNC_ABORT;
        }
        want = (size_t)r;
    }
    u->sent += want;
    return want;
}

static size_t up_body(char *p, size_t size, size_t n, void *ud)
{
    upx *u = ud;
    size_t len = size * n, room = sizeof u->body - 1 - u->nbody;
    size_t k = len < room ? len : room; /* the rest is read and dropped: the body is capped */
    memcpy(u->body + u->nbody, p, k);
    u->nbody += k;
    u->body[u->nbody] = 0;
    return len;
}

static size_t up_header(char *p, size_t size, size_t n, void *ud)
{
    upx *u = ud;
    size_t len = size * n;
    if (len > 5 && strncasecmp(p, "ETag:", 5) == 0) {
        const char *v = p + 5;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t vl = (size_t)(p + len - v);
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        if (vl < sizeof u->etag)
            rm_sfmt(u->etag, sizeof u->etag, "%.*s", (int)vl, v);
    }
    return len;
}

static int up_xfer(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult, curl_off_t uln)
{
    upx *u = ud;
    (void)dlt, (void)dln, (void)ult, (void)uln;
    return u->o->cancel && *u->o->cancel ? 1 : 0;
}

/* The hex sha256 of a file range or memory (SigV4 signs the payload's hash). */
static int payload_sha(int fd, const char *mem, uint64_t off, uint64_t len, char hex[65], rm_err *err)
{
    rm_sha256_ctx c;
    uint8_t d[32];
    rm_sha256_init(&c);
    if (mem) {
        rm_sha256_update(&c, mem, (size_t)len);
    } else {
        char buf[65536];
        for (uint64_t at = 0; at < len;) {
            size_t want = len - at < sizeof buf ? (size_t)(len - at) : sizeof buf;
            ssize_t r = pread(fd, buf, want, (off_t)(off + at));
            if (r <= 0)
                return rm_errf(err, RM_EIO, "read: %s", r < 0 ? strerror(errno) : "short file");
            rm_sha256_update(&c, buf, (size_t)r);
            at += (uint64_t)r;
        }
    }
    rm_sha256_final(&c, d);
    rm_sha256_hex(d, hex);
    return RM_OK;
}

/* One S3 request, retried (transport errors, 408/429/5xx) with doubling back-off up to
 * o->attempts: METHOD tg?query with the body (fd range or mem). 2xx: RM_OK with *u filled (a 200
 * whose body is an S3 <Error>, as CompleteMultipartUpload may answer, is retried). Messages name
 * the s3:// URI (shown), never the endpoint or a credential. */
static int s3_call(CURL *h, const target *base, const char *shown, const char *method, const char *query,
                   int fd, const char *mem, uint64_t off, uint64_t len, const rm_fetch_opts *o, upx *u,
                   rm_err *err)
{
    const char *field = o->field ? o->field : "uri";
    int attempts = o->attempts > 0 ? o->attempts : 5;
    double backoff = o->backoff_s > 0 ? o->backoff_s : 0.5;
    long stall = (long)(o->stall_s > 0 ? o->stall_s + 0.999 : 30);
    long connect_ms = (long)((o->connect_timeout_s > 0 ? o->connect_timeout_s : 10) * 1000);
    const char *ca = o->ca_bundle ? o->ca_bundle : o->s3 ? o->s3->ca_bundle : NULL;
    target tg = *base;
    if (query && *query)
        rm_sfmt(tg.url + strlen(tg.url), sizeof tg.url - strlen(tg.url), "?%s", query);
    char sha[65];
    RM_CHECK(payload_sha(fd, mem, off, len, sha, err));
    char last[200] = "";
    for (int failed = 0;;) {
        *u = (upx){.fd = fd, .mem = mem, .off = off, .len = len, .o = o};
        char ebuf[CURL_ERROR_SIZE] = "";
        struct curl_slist *hl = NULL;
        RM_CHECK(curl_base(h, &tg, o, ca, connect_ms, stall, sha, &hl, ebuf, err));
        struct curl_slist *n = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
        if (!n) {
            curl_slist_free_all(hl);
            return rm_errf(err, RM_ENOMEM, "out of memory");
        }
        hl = n;
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        if (strcmp(method, "DELETE") != 0) {
            curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
            curl_easy_setopt(h, CURLOPT_READFUNCTION, up_read);
            curl_easy_setopt(h, CURLOPT_READDATA, u);
        }
        if (strcmp(method, "PUT") != 0)
            curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, up_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, u);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, up_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, u);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, up_xfer);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, u);
        CURLcode cc = curl_easy_perform(h);
        long st = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(hl);
        if (u->fail == RM_EIO)
            return rm_err_field(err, RM_EIO, field, "%s: reading the file to upload failed", shown);
        if (cc == CURLE_ABORTED_BY_CALLBACK && o->cancel && *o->cancel)
            return rm_err_field(err, RM_ECANCELED, field, "%s: canceled", shown);
        if (cc == CURLE_OK && st >= 200 && st < 300 && !strstr(u->body, "<Error>"))
            return RM_OK;
        if (cc == CURLE_OK && (status_final(st) || (st >= 300 && st < 400) || (st > 0 && st < 200)))
            return rm_err_field(err, status_code(st), field, "%ld from %s%s", st, shown, s3_why(u->body));
        if (cc == CURLE_OK)
            rm_sfmt(last, sizeof last, "%ld from %s%s", st, shown, st < 300 ? ": error in the answer" : "");
        else
            rm_sfmt(last, sizeof last, "%s: %s", shown,
                    curl_easy_strerror(cc)); /* not ebuf: it names the endpoint */
        if (++failed >= attempts)
            return rm_err_field(err, cc == CURLE_OPERATION_TIMEDOUT ? RM_ETIMEDOUT : RM_EIO, field,
                                "%s (still failing after %d attempts)", last, failed);
        double d = backoff * (double)(1u << (failed - 1 < 6 ? failed - 1 : 6));
        if (d > FETCH_BACKOFF_CAP_S)
            d = FETCH_BACKOFF_CAP_S;
        rm_warn("upload retrying url=%s method=%s err=\"%s\" attempt=%d delay_s=%.2f", shown, method, last,
                failed, d);
        sleep_s(d, o->cancel);
    }
}

/* The text of <Tag>...</Tag> in body into out; false when absent or too long. */
static bool xml_text(const char *body, const char *tag, char *out, size_t cap)
{
    char open[64], close[64];
    rm_sfmt(open, sizeof open, "<%s>", tag);
    rm_sfmt(close, sizeof close, "</%s>", tag);
    const char *a = strstr(body, open), *b = a ? strstr(a, close) : NULL;
    if (!a || !b)
        return false;
    a += strlen(open);
    if ((size_t)(b - a) >= cap || b == a)
        return false;
    rm_sfmt(out, cap, "%.*s", (int)(b - a), a);
    return true;
}

/* s quoted for a query value (RFC 3986 unreserved kept; SigV4's canonical form). */
static void query_escape(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            strchr("-._~", ch))
            out[n++] = (char)ch;
        else
            n += (size_t)snprintf(out + n, 4, "%%%02X", ch);
    }
    out[n] = 0;
}

int rm_upload_file(const char *path, const char *url, const rm_fetch_opts *o, rm_upload_stats *stats,
                   rm_err *err)
{
    static const rm_fetch_opts none = {0};
    if (!o)
        o = &none;
    const char *field = o->field ? o->field : "uri";
    if (!path || !url)
        return rm_err_field(err, RM_EINVAL, field, "upload: a file and a URI are required");
    if (strncmp(url, "s3://", 5) != 0)
        return rm_err_field(err, RM_EINVAL, field, "%s: only s3:// URIs are uploaded to", url);
    target tg;
    RM_CHECK(resolve(url, o, field, &tg, err));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rm_err_field(err, RM_EIO, field, "%s: %s", path, strerror(errno));
    struct stat sb;
    rm_upload_plan_t plan;
    int rc = fstat(fd, &sb) != 0
                 ? rm_err_field(err, RM_EIO, field, "%s: %s", path, strerror(errno))
                 : rm_upload_plan((uint64_t)sb.st_size, o->multipart_threshold, o->part_bytes, &plan, err);
    if (rc) {
        close(fd);
        return rc;
    }
    pthread_once(&g_once, curl_once);
    CURL *h = curl_easy_init();
    upx *u = malloc(sizeof *u);
    char *xml = NULL, id[512] = "", qid[1600] = "", q[1700];
    if (!h || !u) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto out;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (!plan.multipart) {
        rc = s3_call(h, &tg, url, "PUT", NULL, fd, NULL, 0, size, o, u, err);
        if (rc == RM_OK && stats) {
            stats->bytes += size;
            stats->parts = 0;
        }
        goto out;
    }
    /* multipart: create, each part (its ETag kept for the completion), complete; abort on failure */
    if ((rc = s3_call(h, &tg, url, "POST", "uploads=", -1, "", 0, 0, o, u, err)) != RM_OK)
        goto out;
    if (!xml_text(u->body, "UploadId", id, sizeof id)) {
        rc = rm_err_field(err, RM_EPROTO, field, "%s: the store answered no UploadId", url);
        goto out;
    }
    query_escape(id, qid, sizeof qid);
    size_t xcap = 128 + (size_t)plan.nparts * (64 + sizeof u->etag), xn = 0;
    xml = malloc(xcap);
    if (!xml) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto abort;
    }
    xn += (size_t)snprintf(xml + xn, xcap - xn, "<CompleteMultipartUpload>");
    for (uint64_t i = 0; i < plan.nparts; i++) {
        uint64_t off = i * plan.part_bytes, len = i + 1 == plan.nparts ? plan.last_bytes : plan.part_bytes;
        rm_sfmt(q, sizeof q, "partNumber=%" PRIu64 "&uploadId=%s", i + 1, qid);
        if ((rc = s3_call(h, &tg, url, "PUT", q, fd, NULL, off, len, o, u, err)) != RM_OK)
            goto abort;
        if (!u->etag[0]) {
            rc = rm_err_field(err, RM_EPROTO, field, "%s: part %" PRIu64 " got no ETag", url, i + 1);
            goto abort;
        }
        xn += (size_t)snprintf(xml + xn, xcap - xn,
                               "<Part><PartNumber>%" PRIu64 "</PartNumber><ETag>%s</ETag></Part>", i + 1,
                               u->etag);
        if (stats)
            stats->bytes += len;
    }
    xn += (size_t)snprintf(xml + xn, xcap - xn, "</CompleteMultipartUpload>");
    rm_sfmt(q, sizeof q, "uploadId=%s", qid);
    if ((rc = s3_call(h, &tg, url, "POST", q, -1, xml, 0, xn, o, u, err)) != RM_OK)
        goto abort;
    if (stats)
        stats->parts = (int)plan.nparts;
    goto out;
abort : { /* best effort: a store keeps an unfinished upload's parts (and bills them) until aborted */
    rm_err ae = {0};
    rm_fetch_opts ao = *o;
    ao.attempts = 2;
    rm_sfmt(q, sizeof q, "uploadId=%s", qid);
    if (s3_call(h, &tg, url, "DELETE", q, -1, "", 0, 0, &ao, u, &ae) != RM_OK)
        rm_warn("upload abort failed url=%s err=\"%s\"", url, ae.msg);
}
out:
    free(xml);
    free(u);
    if (h)
        curl_easy_cleanup(h);
    close(fd);
    return rc;
}
