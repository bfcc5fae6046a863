/* data.c — IDX loading (through zlib, gzipped or raw), the seeded generator, per-epoch
 * permutations and batch gathering. See data.h for the file checks and the sharding rule.
 * Design: every check happens while loading, so the training loop never sees bad data; errors
 * name the file and the failed check so an operator can tell "missing" from "corrupt". */
#include "worker/data/data.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u

static uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Read exactly len bytes; RM_EINVAL if the file ends early (truncated), RM_EIO on a read or
 * decompression error. */
static int gz_read_exact(gzFile f, void *buf, size_t len, const char *path, const char *what, rm_err *err)
{
    unsigned char *p = buf;
    while (len > 0) {
        unsigned chunk = len > (1u << 30) ? (1u << 30) : (unsigned)len;
        int got = gzread(f, p, chunk);
        if (got < 0) {
            int zerr = 0;
            const char *msg = gzerror(f, &zerr);
            return rm_errf(err, RM_EINVAL, "%s: corrupt compressed data while reading %s: %s", path, what,
                           msg ? msg : "?");
        }
        if (got == 0)
            return rm_errf(err, RM_EINVAL, "%s: truncated: file ends inside the %s", path, what);
        p += got;
        len -= (size_t)got;
    }
    return RM_OK;
}

/* After the payload: anything more is an error (a file that does not match its header). */
static int gz_expect_eof(gzFile f, const char *path, rm_err *err)
{
    unsigned char extra;
    int got = gzread(f, &extra, 1);
    if (got < 0)
        return rm_errf(err, RM_EINVAL, "%s: corrupt compressed data after the payload", path);
    if (got > 0)
        return rm_errf(err, RM_EINVAL, "%s: trailing bytes after the payload the header declares", path);
    return RM_OK;
}

static int gz_open(const char *path, gzFile *out, rm_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return rm_errf(err, RM_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return rm_errf(err, RM_EIO, "%s: not a regular file", path);
    gzFile f = gzopen(path, "rb");
    if (!f)
        return rm_errf(err, RM_EIO, "%s: cannot open: %s", path, strerror(errno ? errno : ENOMEM));
    gzbuffer(f, 1 << 17);
    *out = f;
    return RM_OK;
}

/* Open an IDX file and read its header (hdr_len bytes: magic, then the big-endian dimensions);
 * the magic must be want (kind names it in the error). On success *f is open (caller closes). */
static int idx_open(const char *path, uint32_t want, const char *kind, unsigned char *hdr, size_t hdr_len,
                    gzFile *f, rm_err *err)
{
    int rc = gz_open(path, f, err);
    if (rc)
        return rc;
    RM_CHECK(gz_read_exact(*f, hdr, hdr_len, path, "header", err));
    uint32_t magic = be32(hdr);
    if (magic != want)
        return rm_errf(err, RM_EINVAL, "%s: bad magic 0x%08x (want 0x%08x for IDX uint8 %s)", path, magic,
                       want, kind);
    return RM_OK;
}

/* The payload the header declares: exactly bytes, then end of file. *out owned (free()). */
static int idx_read_payload(gzFile f, const char *path, size_t bytes, const char *what, uint8_t **out,
                            rm_err *err)
{
    int rc;
    uint8_t *buf = malloc(bytes);
    if (!buf)
        return rm_errf(err, RM_ENOMEM, "%s: cannot allocate %zu bytes", path, bytes);
    RM_CHECK_GOTO(gz_read_exact(f, buf, bytes, path, what, err), rc, fail);
    RM_CHECK_GOTO(gz_expect_eof(f, path, err), rc, fail);
    *out = buf;
    return RM_OK;
fail:
    free(buf);
    return rc;
}

int rm_idx_load_images(const char *path, uint8_t **out, int *n, int *rows, int *cols, rm_err *err)
{
    *out = NULL;
    *n = *rows = *cols = 0;
    gzFile f = NULL;
    unsigned char hdr[16];
    int rc;
    RM_CHECK_GOTO(idx_open(path, IDX_MAGIC_IMAGES, "images", hdr, sizeof hdr, &f, err), rc, out);
    uint32_t cnt = be32(hdr + 4), r = be32(hdr + 8), c = be32(hdr + 12);
    if (cnt < 1 || cnt > RM_DATA_MAX_N || r < 1 || c < 1 || (uint64_t)r * c > RM_DATA_MAX_PIXELS) {
        rc = rm_errf(err, RM_EINVAL, "%s: implausible dimensions %u x %u x %u", path, cnt, r, c);
        goto out;
    }
    RM_CHECK_GOTO(idx_read_payload(f, path, (size_t)cnt * r * c, "image data", out, err), rc, out);
    *n = (int)cnt;
    *rows = (int)r;
    *cols = (int)c;
out:
    if (f)
        gzclose(f);
    return rc;
}

int rm_idx_load_labels(const char *path, int classes, uint8_t **out, int *n, rm_err *err)
{
    *out = NULL;
    *n = 0;
    gzFile f = NULL;
    uint8_t *buf = NULL;
    unsigned char hdr[8];
    int rc;
    RM_CHECK_GOTO(idx_open(path, IDX_MAGIC_LABELS, "labels", hdr, sizeof hdr, &f, err), rc, out);
    uint32_t cnt = be32(hdr + 4);
    if (cnt < 1 || cnt > RM_DATA_MAX_N) {
        rc = rm_errf(err, RM_EINVAL, "%s: implausible label count %u", path, cnt);
        goto out;
    }
    RM_CHECK_GOTO(idx_read_payload(f, path, cnt, "label data", &buf, err), rc, out);
    for (uint32_t i = 0; i < cnt; i++) {
        if (buf[i] >= classes) {
            rc = rm_errf(err, RM_EINVAL, "%s: label %u at index %u out of range [0, %d)", path, buf[i], i,
                         classes);
            goto out;
        }
    }
    *out = buf;
    buf = NULL;
    *n = (int)cnt;
out:
    free(buf);
    if (f)
        gzclose(f);
    return rc;
}

/* dir/name, or dir/name.gz when only that exists. */
static int find_file(const char *dir, const char *name, char *path, size_t cap, rm_err *err)
{
    struct stat st;
    int w = snprintf(path, cap, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= cap)
        return rm_errf(err, RM_EINVAL, "data dir path too long");
    if (stat(path, &st) == 0)
        return RM_OK;
    w = snprintf(path, cap, "%s/%s.gz", dir, name);
    if (w < 0 || (size_t)w >= cap)
        return rm_errf(err, RM_EINVAL, "data dir path too long");
    if (stat(path, &st) == 0)
        return RM_OK;
    return rm_errf(err, RM_EIO, "%s/%s(.gz): missing (install Debian's dataset-fashion-mnist or set dataDir)",
                   dir, name);
}

static int max_label(const uint8_t *labels, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        m = labels[i] > m ? labels[i] : m;
    return m;
}

int rm_dataset_probe(const char *dir, int *inputs, int *classes, rm_err *err)
{
    char ipath[4096], lpath[4096];
    if (!dir || !*dir)
        dir = RM_DATA_DEFAULT_DIR;
    RM_CHECK(find_file(dir, "train-images-idx3-ubyte", ipath, sizeof ipath, err));
    RM_CHECK(find_file(dir, "train-labels-idx1-ubyte", lpath, sizeof lpath, err));
    unsigned char hdr[16];
    gzFile f = NULL;
    int rc = idx_open(ipath, IDX_MAGIC_IMAGES, "images", hdr, sizeof hdr, &f, err);
    if (f)
        gzclose(f);
    RM_CHECK(rc);
    uint32_t rows = be32(hdr + 8), cols = be32(hdr + 12);
    if (rows < 1 || cols < 1 || (uint64_t)rows * cols > RM_DATA_MAX_PIXELS)
        return rm_errf(err, RM_EINVAL, "%s: implausible image size %ux%u", ipath, rows, cols);
    uint8_t *labels = NULL;
    int n = 0;
    RM_CHECK(rm_idx_load_labels(lpath, RM_DATA_MAX_CLASSES, &labels, &n, err));
    *inputs = (int)(rows * cols);
    *classes = 1 + max_label(labels, n);
    free(labels);
    return RM_OK;
}

int rm_dataset_load(const char *dir, bool train, rm_dataset *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    char ipath[4096], lpath[4096];
    const char *pre = train ? "train" : "t10k";
    char iname[64], lname[64];
    snprintf(iname, sizeof iname, "%s-images-idx3-ubyte", pre);
    snprintf(lname, sizeof lname, "%s-labels-idx1-ubyte", pre);
    if (!dir || !*dir)
        dir = RM_DATA_DEFAULT_DIR;
    int rc;
    RM_CHECK(find_file(dir, iname, ipath, sizeof ipath, err));
    RM_CHECK(find_file(dir, lname, lpath, sizeof lpath, err));
    int ni = 0, nl = 0;
    RM_CHECK_GOTO(rm_idx_load_images(ipath, &out->images, &ni, &out->rows, &out->cols, err), rc, fail);
    RM_CHECK_GOTO(rm_idx_load_labels(lpath, RM_DATA_MAX_CLASSES, &out->labels, &nl, err), rc, fail);
    out->classes = 1 + max_label(out->labels, nl);
    if (ni != nl) {
        rc = rm_errf(err, RM_EINVAL, "%s has %d images but %s has %d labels", ipath, ni, lpath, nl);
        goto fail;
    }
    out->n = ni;
    return RM_OK;
fail:
    rm_dataset_free(out);
    return rc;
}

void rm_dataset_free(rm_dataset *d)
{
    if (!d)
        return;
    free(d->images);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

/* ---------------- generator ---------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rm_rng_seed(rm_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rm_rng_next(rm_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rm_rng_uniform(rm_rng *r)
{
    return (double)(rm_rng_next(r) >> 11) * 0x1.0p-53;
}

double rm_rng_normal(rm_rng *r)
{
    double u1;
    do
        u1 = rm_rng_uniform(r);
    while (u1 <= 0.0);
    double u2 = rm_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t rm_rng_below(rm_rng *r, uint64_t n)
{
    if (n <= 1)
        return 0;
    uint64_t lim = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
    uint64_t x;
    do
        x = rm_rng_next(r);
    while (x >= lim);
    return x % n;
}

void rm_perm_make(uint32_t *perm, int n, uint64_t seed, int epoch)
{
    rm_rng r;
    uint64_t x = seed ^ 0x5eed0000ULL;
    rm_rng_seed(&r, splitmix64(&x) ^ ((uint64_t)(uint32_t)epoch * 0x9e3779b97f4a7c15ULL));
    for (int i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (int i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rm_rng_below(&r, (uint64_t)i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* ---------------- gathering ---------------- */

static void scale_row(const uint8_t *restrict src, float *restrict dst, int pixels)
{
    const float s = 1.0f / 255.0f;
    for (int p = 0; p < pixels; p++)
        dst[p] = (float)src[p] * s;
}

void rm_data_gather(const rm_dataset *d, const uint32_t *perm, int64_t pos, int rank, int world, int rows,
                    float *x, int32_t *labels)
{
    int pixels = d->rows * d->cols;
    for (int i = 0; i < rows; i++) {
        uint32_t idx = perm[pos + rank + (int64_t)i * world];
        scale_row(d->images + (size_t)idx * pixels, x + (size_t)i * pixels, pixels);
        labels[i] = d->labels[idx];
    }
}

void rm_data_slice(const rm_dataset *d, int start, int rows, float *x, int32_t *labels)
{
    int pixels = d->rows * d->cols;
    for (int i = 0; i < rows; i++) {
        scale_row(d->images + (size_t)(start + i) * pixels, x + (size_t)i * pixels, pixels);
        labels[i] = d->labels[start + i];
    }
}
