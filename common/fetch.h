/* fetch.h — remote data in: an http(s):// object fetched once into a local cache folder, resumed
 * after an interruption, bounded in time, verified by sha256 (docs/models-and-data.md, "Where
 * data comes from"). The worker fetches spec.training.data.uri with it (worker/data/reader.c);
 * it lives in common/ so the operator's init container runs the same code.
 *
 * Design:
 *  - One object at a time into DEST.part with libcurl; a .part left by a killed process is
 *    continued with "Range: bytes=N-" (a server that answers 200 instead starts it over; a 206
 *    whose Content-Range does not start at N is refused), then fsync'd and renamed to DEST. The
 *    response's strong ETag (else Last-Modified) is kept in DEST.part.validator and sent as
 *    If-Range, so a part of an object that has changed since is fetched anew, never spliced.
 *  - Retries: transport errors (refused, reset, a cut body, a stall) and 408/429/5xx are retried
 *    with doubling back-off (Retry-After honoured, capped); an attempt that moved bytes does not
 *    count against opts.attempts, one that moved none does, so the whole fetch is bounded: a stalled
 *    transfer is cut after opts.stall_s, a dead server costs attempts x back-off. Other 4xx are
 *    final at once: "<field>: 404 from <url>".
 *  - The cache: CACHE/<h(url)>-<sha256 or "any">/ holds the object (or, for a folder URI, the
 *    files named), a lock file taken with flock(2) (workers of one job that start together fetch
 *    once: the others wait on the lock, then find the work done), and ".complete", written last
 *    (atomically) after the sha256 matched: a later process (a replacement worker) that finds
 *    it fetches nothing. A sha256 mismatch removes the files, so a retry fetches them anew.
 *  - Every buffer is capped: bodies go to the file (opts.max_bytes), an error body is read
 *    and thrown away; nothing grows with the object's size in memory.
 *
 *  - s3://bucket/key: a GET of ENDPOINT/bucket/key (path-style, so any S3-compatible store works)
 *    signed by libcurl's SigV4 (CURLOPT_AWS_SIGV4, "aws:amz:REGION:s3") with the credentials of
 *    opts.s3 — the AWS_* variables a Secret provides (rm_fetch_s3_from_env) — plus
 *    x-amz-security-token for session credentials. Ranges, retries and the cache are the same;
 *    messages name the s3:// URI, never the endpoint's URL or a credential, and a 403 whose
 *    body says SignatureDoesNotMatch reads "403 from s3://bucket/key: signature rejected".
 *
 * Ownership: URLs, paths and opts are borrowed for the call; nothing is kept between calls. */
#ifndef RM_COMMON_FETCH_H
#define RM_COMMON_FETCH_H
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"

/* Progress of the object being fetched: bytes on disk (including a resumed part) and the total
 * (0 = not known yet). Called from the transfer loop, at most a few times a second. */
typedef void (*rm_fetch_progress_fn)(void *ud, const char *url, uint64_t have, uint64_t total);

/* S3 credentials and where the store is (docs/models-and-data.md, "The manifest": secretRef's keys). */
typedef struct rm_s3_creds {
    const char *access_key;    /* AWS_ACCESS_KEY_ID */
    const char *secret_key;    /* AWS_SECRET_ACCESS_KEY */
    const char *session_token; /* AWS_SESSION_TOKEN; NULL = none */
    const char *region;        /* AWS_REGION (else AWS_DEFAULT_REGION); NULL = us-east-1 */
    const char *endpoint;      /* AWS_ENDPOINT_URL_S3 (else AWS_ENDPOINT_URL), e.g. http://127.0.0.1:4568;
                                * NULL = https://s3.REGION.amazonaws.com */
    const char *ca_bundle;     /* AWS_CA_BUNDLE; NULL = the system's */
} rm_s3_creds;
/* Fill c from the environment (borrowed getenv strings; unset or empty = NULL). */
void rm_fetch_s3_from_env(rm_s3_creds *c);

typedef struct rm_fetch_opts {
    const char *field;        /* names every error about the URI ("spec.training.data.uri") */
    const char *sha256_field; /* names a checksum mismatch ("spec.training.data.sha256") */
    const char *sha256;       /* 64 lowercase hex digits over the object (a folder: its files in
                               * the order named, concatenated); NULL = not checked */
    int attempts;             /* attempts that move no byte before giving up; 0 = 5 */
    double backoff_s;         /* the first retry's delay, doubling, capped at 30 s; 0 = 0.5 */
    double stall_s;           /* an attempt that receives nothing for this long is cut; 0 = 30 */
    double connect_timeout_s; /* 0 = 10 */
    double lock_wait_s;       /* waiting for another process's fetch of the same entry; 0 = 3600 */
    uint64_t max_bytes;       /* the largest object accepted; 0 = 1 TiB */
    const char *ca_bundle;    /* CA certificates file for https; NULL = the system's (s3: s3->ca_bundle) */
    const rm_s3_creds *s3;    /* for s3:// URIs; NULL = none (an s3:// URI is then refused) */
    const volatile sig_atomic_t *cancel; /* borrowed; raised: the fetch ends RM_ECANCELED */
    rm_fetch_progress_fn progress;       /* NULL = none */
    void *progress_ud;
    /* folder URIs without names (rm_fetch_cached): fnmatch(3) patterns a listed name must match
     * to be fetched (NULL = every name), and the names fetched instead when an http(s) folder has
     * no RM_FETCH_INDEX_NAME (NULL = that 404 is the error) */
    const char *const *accept;
    const char *const *fallback;
    /* uploads only (rm_upload_file): objects above multipart_threshold bytes go up in parts of
     * part_bytes; 0 = RM_UPLOAD_THRESHOLD_DEFAULT / RM_UPLOAD_PART_DEFAULT */
    uint64_t multipart_threshold;
    uint64_t part_bytes;
} rm_fetch_opts;

/* What a fetch did (tests, logs, benchmarks). */
typedef struct rm_fetch_stats {
    uint64_t bytes;        /* bytes received over the network by this call */
    uint64_t resumed_from; /* the largest .part length a transfer continued from; 0 = none */
    int requests;          /* HTTP requests made */
    bool cached;           /* the cache entry was complete: nothing fetched */
} rm_fetch_stats;

/* Fetch url (http://, https:// or s3://) into dest (dest.part while in progress; a .part already there is continued).
 * Returns RM_OK, RM_ENOTFOUND (404/410), RM_EAUTH (401/403), RM_EINVAL (another 4xx, or a bad
 * argument), RM_ETIMEDOUT / RM_EIO (still failing after opts.attempts), RM_ETOOBIG (over
 * max_bytes), RM_EPROTO (a range answer that does not fit), RM_ECANCELED. err->field is
 * opts.field. stats may be NULL; it is added to, not reset. No checksum is checked here. */
int rm_fetch_file(const char *url, const char *dest, const rm_fetch_opts *o, rm_fetch_stats *stats,
                  rm_err *err);

/* A folder URI (ending in '/') fetched without names lists its files (docs/models-and-data.md,
 * "Folders over HTTP and S3"): s3://bucket/prefix/ with ListObjectsV2 (the objects directly under
 * the prefix, every page followed up to RM_FETCH_LIST_PAGES), http(s)://.../ from its index file
 * RM_FETCH_INDEX_NAME (one file name per line; '#' starts a comment). Names are sorted, filtered by
 * opts.accept, and must be plain file names; at most RM_FETCH_MAX_FILES; a listing page or an
 * index is read into at most RM_FETCH_LIST_MAX_BYTES. */
#define RM_FETCH_MAX_FILES 1024
#define RM_FETCH_LIST_PAGES 64
#define RM_FETCH_LIST_MAX_BYTES ((size_t)8 << 20)
#define RM_FETCH_INDEX_NAME "index.txt"

/* url in the cache folder cache_dir (created when missing): fetched unless already complete,
 * verified, and its local path written into path. names == NULL and url not ending in '/': url is
 * one object, path is the file (named after the URL's last segment). names != NULL: url is a
 * folder (ends with '/'); each entry is "NAME" or "NAME|ALT|..." — the first of them the server
 * has (a 404 tries the next) is fetched as that name; path is the folder. names == NULL and a
 * folder url: its listing names the files (above; opts.fallback when an http folder has no
 * index). Listing happens only when the entry is not complete, so a replacement asks nothing.
 * Progress (opts.progress) counts the whole entry. Errors as rm_fetch_file, plus RM_EINVAL naming
 * opts.sha256_field for a checksum mismatch and RM_ETIMEDOUT when the lock stays held. */
int rm_fetch_cached(const char *url, const char *const *names, const char *cache_dir, const rm_fetch_opts *o,
                    char *path, size_t cap, rm_fetch_stats *stats, rm_err *err);

/* The cache entry folder of (url, sha256) under cache_dir, into buf. Returns buf. */
const char *rm_fetch_entry_dir(const char *cache_dir, const char *url, const char *sha256, char *buf,
                               size_t cap);

/* ---- uploads: the exported model out (spec.output.uri: s3://bucket/prefix/) ----
 * One PUT of the whole file up to the threshold (S3 caps one PUT at 5 GiB), else a multipart
 * upload: CreateMultipartUpload (POST ?uploads), UploadPart (PUT ?partNumber=N&uploadId=ID, each
 * part's ETag kept), CompleteMultipartUpload (POST ?uploadId=ID with the parts' list); a failure
 * after the create aborts it (DELETE ?uploadId=ID, best effort). Every request is signed like a
 * fetch (the same SigV4 setup, the payload's sha256 in x-amz-content-sha256) and retried the same
 * way: transport errors, 408/429/5xx (and a 200 whose body is an S3 <Error>) up to opts.attempts
 * with doubling back-off; other 4xx are final. Real S3 wants parts of at least 5 MiB but the last:
 * a smaller part_bytes is for tests against s3rver. The file is read with pread (twice: once for
 * the hash, once to send); nothing grows with its size in memory but the parts' list. */
#define RM_UPLOAD_SINGLE_MAX ((uint64_t)5 << 30)         /* one PUT's cap */
#define RM_UPLOAD_MAX_PARTS 10000                        /* parts per multipart upload */
#define RM_UPLOAD_THRESHOLD_DEFAULT ((uint64_t)64 << 20) /* above it: multipart */
#define RM_UPLOAD_PART_DEFAULT ((uint64_t)64 << 20)
typedef struct rm_upload_plan_t {
    bool multipart;      /* false: one PUT of the whole file */
    uint64_t part_bytes; /* every part's size but the last */
    uint64_t nparts;     /* 1 for a single PUT */
    uint64_t last_bytes; /* the last part's size (1..part_bytes; the whole file for a single PUT) */
} rm_upload_plan_t;
/* How size bytes go up (0 threshold / part_bytes = the defaults): a single PUT when size <=
 * threshold and <= 5 GiB, else parts of part_bytes (capped at 5 GiB; grown to whole MiB so that
 * at most RM_UPLOAD_MAX_PARTS are needed). RM_ETOOBIG past 10,000 parts of 5 GiB. */
int rm_upload_plan(uint64_t size, uint64_t threshold, uint64_t part_bytes, rm_upload_plan_t *p, rm_err *err);

typedef struct rm_upload_stats {
    uint64_t bytes; /* file bytes sent in accepted requests */
    int parts;      /* parts of a multipart upload; 0 = one PUT */
} rm_upload_stats;
/* Upload the file at path to url (s3://bucket/key, with opts.s3's credentials). Errors as
 * rm_fetch_file's, field-named with opts.field and naming the s3:// URI. stats may be NULL (added
 * to, not reset). */
int rm_upload_file(const char *path, const char *url, const rm_fetch_opts *o, rm_upload_stats *stats,
                   rm_err *err);
#endif
