/* reader.c — picking the reader and the source of a spec's data, and the calls every format shares
 * (reader.h). IDX is the default format (the built-in data set's). A remote data.uri (http(s)://, s3://)
 * is fetched into the data cache first (common/fetch.h; docs/models-and-data.md, "Where data
 * comes from") and read from there like a local one. */
#include "worker/data/reader.h"

#include "common/clock.h"
#include "common/datasets.h"
#include "common/fetch.h"
#include "common/log.h"
#include "common/rdzv.h"
#include "common/worker_env.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/data/data.h"

const rm_data_reader *rm_data_reader_of(rm_data_format f)
{
    switch (f) {
    case RM_DATA_IDX:
        return &rm_data_idx;
    case RM_DATA_TOKENS:
        return &rm_data_tokens;
    case RM_DATA_TEXT:
        return &rm_data_text;
    }
    return NULL;
}

void rm_data_cache_dir(char *buf, size_t cap)
{
    const char *env = getenv(RM_ENV_DATA_CACHE), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && *env)
        rm_sfmt(buf, cap, "%s", env);
    else if (xdg && *xdg == '/')
        rm_sfmt(buf, cap, "%s/ringmaster/data", xdg);
    else if (home && *home == '/' && home[1]) /* not "/": a container's root may not be writable */
        rm_sfmt(buf, cap, "%s/.cache/ringmaster/data", home);
    else
        rm_sfmt(buf, cap, "/tmp/ringmaster-data-cache");
}

bool rm_data_uri_remote(const char *uri)
{
    return rm_uri_fetched(uri);
}

/* The fetch's progress to the rendezvous (docs/models-and-data.md, "Where data comes from"): the
 * kv key RM_RDZV_KV_DATA_FETCH of the epoch this process was created for, at most once a second
 * and once at the end, whence the controllers copy it into status.data. The same path serves
 * `ringmaster run`'s workers and the operator's fetch-data init container (it has the worker's
 * environment). Best effort: without a rendezvous (a lone worker, `ringmaster-worker fetch` by
 * hand) or after one failed put, nothing more is sent. */
typedef struct fetch_report {
    rm_rdzv_client *c; /* NULL = off */
    int epoch;
    double last;
} fetch_report;

static void report_open(fetch_report *r)
{
    memset(r, 0, sizeof *r);
    const char *url = getenv(RM_ENV_RENDEZVOUS), *job = getenv(RM_ENV_JOB), *tok = getenv(RM_ENV_TOKEN),
               *id = getenv(RM_ENV_WORKER_ID), *ep = getenv(RM_ENV_EPOCH);
    if (!url || !*url || !job || !*job || !tok || !*tok)
        return;
    /* the epoch the pod was created for; 0 (before the first round) is the job's first, 1 */
    r->epoch = ep && atoi(ep) > 1 ? atoi(ep) : 1;
    rm_err e = {0};
    r->c = rm_rdzv_client_new(url, job, tok, id && *id ? id : "fetch", &e);
    if (!r->c)
        rm_warn("data fetch progress not reported err=\"%s\"", e.msg);
}

static void report_put(fetch_report *r, uint64_t have, uint64_t total)
{
    if (!r->c)
        return;
    char v[48];
    int n = snprintf(v, sizeof v, "%llu %llu", (unsigned long long)have, (unsigned long long)total);
    rm_err e = {0};
    int rc = rm_rdzv_kv_put(r->c, r->epoch, RM_RDZV_KV_DATA_FETCH, v, (size_t)n, &e);
    const char *cur = rc != RM_OK ? strstr(e.msg, "(current ") : NULL;
    if (cur && atoi(cur + 9) > 0 && atoi(cur + 9) != r->epoch) { /* the job moved on: its epoch now */
        r->epoch = atoi(cur + 9);
        rc = rm_rdzv_kv_put(r->c, r->epoch, RM_RDZV_KV_DATA_FETCH, v, (size_t)n, &e);
    }
    if (rc != RM_OK) {
        rm_warn("data fetch progress not reported (no more tries) err=\"%s\"", e.msg);
        rm_rdzv_client_free(r->c);
        r->c = NULL;
    }
}

static void report_close(fetch_report *r)
{
    rm_rdzv_client_free(r->c);
    r->c = NULL;
}

static void on_fetch_progress(void *ud, const char *url, uint64_t have, uint64_t total)
{
    fetch_report *r = ud;
    double now = rm_mono();
    (void)url;
    if (now - r->last < 1.0)
        return;
    r->last = now;
    report_put(r, have, total);
}

/* Bytes of a file, or of the plain files directly in a folder (a fetched folder's). */
static uint64_t size_on_disk(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;
    if (!S_ISDIR(sb.st_mode))
        return (uint64_t)sb.st_size;
    uint64_t sum = 0;
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        char p[PATH_MAX];
        if (e->d_name[0] == '.')
            continue; /* .lock, .complete */
        rm_sfmt(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            sum += (uint64_t)sb.st_size;
    }
    if (d)
        closedir(d);
    return sum;
}

/* Fetch a remote data.uri into the cache (once: a complete entry is used as it is). A URI ending
 * in '/' is a folder: with data.format idx its four IDX files (each plain or gzipped); else what
 * its listing names (s3: ListObjectsV2; http: its index.txt; common/fetch.h) among token shards
 * and IDX files, and an http folder without an index is taken for an IDX folder. */
static int fetch_remote(const rm_training_spec *t, char *src, size_t cap, rm_err *err)
{
    static const char *const idx_names[] = {"train-images-idx3-ubyte|train-images-idx3-ubyte.gz",
                                            "train-labels-idx1-ubyte|train-labels-idx1-ubyte.gz",
                                            "t10k-images-idx3-ubyte|t10k-images-idx3-ubyte.gz",
                                            "t10k-labels-idx1-ubyte|t10k-labels-idx1-ubyte.gz", NULL};
    static const char *const accept[] = {
        "*.bin", "train-*-idx?-ubyte", "train-*-idx?-ubyte.gz", "t10k-*-idx?-ubyte", "t10k-*-idx?-ubyte.gz",
        NULL};
    const char *uri = t->data.uri;
    bool folder = uri[strlen(uri) - 1] == '/';
    bool idx = (t->set2 & RM_TR_SET2_FORMAT) && t->data.format == RM_DATA_IDX;
    char cache[4096];
    rm_data_cache_dir(cache, sizeof cache);
    rm_s3_creds s3; /* the AWS_* variables spec.training.data.secretRef provides */
    rm_fetch_s3_from_env(&s3);
    rm_fetch_opts o = {.field = "spec.training.data.uri",
                       .sha256_field = "spec.training.data.sha256",
                       .sha256 = t->data.sha256,
                       .s3 = &s3,
                       .ca_bundle = t->data.ca_bundle, /* else AWS_CA_BUNDLE for s3, else the system's */
                       .accept = accept,
                       .fallback = idx_names};
    if (t->data.ca_bundle && access(t->data.ca_bundle, R_OK) != 0)
        return rm_err_field(err, RM_EINVAL, "spec.training.data.caBundle", "%s: %s", t->data.ca_bundle,
                            strerror(errno));
    rm_fetch_stats st = {0};
    fetch_report rep;
    report_open(&rep);
    o.progress = on_fetch_progress;
    o.progress_ud = &rep;
    int rc = rm_fetch_cached(uri, folder && idx ? idx_names : NULL, cache, &o, src, cap, &st, err);
    if (rc == RM_OK) {
        uint64_t size = size_on_disk(src);
        report_put(&rep, size, size);
        if (!st.cached)
            rm_info("data fetched uri=%s path=%s bytes=%llu resumed_from=%llu requests=%d", uri, src,
                    (unsigned long long)st.bytes, (unsigned long long)st.resumed_from, st.requests);
    }
    report_close(&rep);
    return rc;
}

int rm_data_source(const rm_training_spec *t, const rm_data_reader **r, char *src, size_t cap, rm_err *err)
{
    rm_data_format f = RM_DATA_IDX;
    if (rm_data_uri_remote(t->data.uri)) {
        RM_CHECK(fetch_remote(t, src, cap, err));
        f = rm_data_sniff(src);
    } else if (t->data.uri) { /* builtin:<name>, /path, file:///path (common/datasets.h) */
        RM_CHECK(rm_data_local_path(t->data.uri, src, cap, &f, err));
        if (strncmp(t->data.uri, "builtin:", 8) != 0)
            f = rm_data_sniff(src);
    } else { /* the deprecated dataDir, else the built-in Fashion-MNIST folder */
        const char *dir = t->data_dir && *t->data_dir ? t->data_dir : RM_DATA_DEFAULT_DIR;
        if (strlen(dir) >= cap)
            return rm_err_field(err, RM_EINVAL, "spec.training.dataDir", "path longer than %zu bytes",
                                cap - 1);
        memcpy(src, dir, strlen(dir) + 1);
    }
    if (t->set2 & RM_TR_SET2_FORMAT)
        f = t->data.format;
    *r = rm_data_reader_of(f);
    if (!*r)
        return rm_err_field(err, RM_EUNSUPPORTED, "spec.training.data.format", "%s is not supported yet",
                            rm_enum_name(rm_data_format_names, (int)f));
    return RM_OK;
}

/* A reader's error is about the data (its messages name the file): mark it as the data's, so
 * rm_data_error_is tells it from the worker's own failures. */
static int data_err(int rc, rm_err *err)
{
    if (rc && rc != RM_ENOMEM && rc != RM_ECANCELED && err && !err->field[0])
        rm_sfmt(err->field, sizeof err->field, "spec.training.data");
    return rc;
}

bool rm_data_error_is(const rm_err *err)
{
    return err && err->code != RM_ENOMEM && strncmp(err->field, "spec.training.data", 18) == 0 &&
           (err->field[18] == 0 || err->field[18] == '.');
}

int rm_data_probe(const rm_training_spec *t, rm_data_info *out, rm_err *err)
{
    const rm_data_reader *r;
    char src[4096];
    memset(out, 0, sizeof *out);
    int rc = rm_data_source(t, &r, src, sizeof src, err);
    if (rc == RM_OK)
        rc = r->probe(src, t, out, err);
    return data_err(rc, err);
}

int rm_data_open(const rm_training_spec *t, rm_data_split split, rm_data *out, rm_err *err)
{
    const rm_data_reader *r;
    char src[4096];
    memset(out, 0, sizeof *out);
    int rc = rm_data_source(t, &r, src, sizeof src, err);
    if (rc == RM_OK)
        rc = r->open(src, t, split, &out->state, &out->info, err);
    if (rc == RM_OK)
        out->r = r;
    return data_err(rc, err);
}

void rm_data_close(rm_data *d)
{
    if (!d || !d->r)
        return;
    d->r->close(d->state);
    memset(d, 0, sizeof *d);
}
