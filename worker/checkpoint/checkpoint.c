/* checkpoint.c — write/verify/select checkpoints; format and guarantees in checkpoint.h.
 * Design: the header is serialised field by field into a fixed byte layout (no struct padding in
 * the file) and protected by its own CRC32, the payload by another, so a flipped bit anywhere is
 * caught before any byte reaches the model. zlib's crc32 is used (already linked for the data). */
#include "worker/checkpoint/checkpoint.h"
#include "common/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define HDR_BYTES RM_CKPT_HDR_BYTES

/* ---------------- header serialisation ---------------- */

typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
} wbuf;
static void put(wbuf *w, const void *v, size_t n)
{
    if (w->n <= w->cap && n <= w->cap - w->n)
        memcpy(w->p + w->n, v, n);
    w->n += n;
}
static int get(wbuf *w, void *v, size_t n)
{
    if (w->n + n > w->cap)
        return -1;
    memcpy(v, w->p + w->n, n);
    w->n += n;
    return 0;
}

/* The header's fields after magic, version and header size, in file order; each is written as
 * its in-memory bytes (little-endian host order). The shape's ints are 4 bytes on every target. */
_Static_assert(sizeof(int) == 4, "the header stores the model shape as 4-byte ints");
#define HDR_FIELD(m)                                              \
    {                                                             \
        offsetof(rm_ckpt_meta, m), sizeof(((rm_ckpt_meta *)0)->m) \
    }
static const struct {
    size_t off, len;
} HDR_FIELDS[] = {
    HDR_FIELD(step),
    HDR_FIELD(train_epoch),
    HDR_FIELD(world_size),
    HDR_FIELD(data_pos),
    HDR_FIELD(batch_per_worker),
    HDR_FIELD(rdzv_epoch),
    HDR_FIELD(seed),
    HDR_FIELD(rng),
    HDR_FIELD(opt_type),
    HDR_FIELD(nstate),
    HDR_FIELD(opt_t),
    HDR_FIELD(epoch_pos),
    HDR_FIELD(lr),
    HDR_FIELD(loss_scale),
    HDR_FIELD(scaler_tracker),
    HDR_FIELD(shape.nlayers),
    HDR_FIELD(shape.dims),
    HDR_FIELD(nparams),
};
#undef HDR_FIELD

static void hdr_encode(const rm_ckpt_meta *m, uint64_t payload_bytes, uint32_t payload_crc,
                       unsigned char out[HDR_BYTES])
{
    memset(out, 0, HDR_BYTES);
    wbuf w = {out, 0, HDR_BYTES};
    uint32_t ver = RM_CKPT_VERSION, hb = HDR_BYTES;
    put(&w, RM_CKPT_MAGIC, 8);
    put(&w, &ver, 4);
    put(&w, &hb, 4);
    for (size_t i = 0; i < RM_ARRAY_LEN(HDR_FIELDS); i++)
        put(&w, (const char *)m + HDR_FIELDS[i].off, HDR_FIELDS[i].len);
    put(&w, &payload_bytes, 8);
    put(&w, &payload_crc, 4);
    put(&w, &m->shard_rank, 4);
    put(&w, &m->shard_world, 4);
    put(&w, &m->shard_floats, 8);
    /* header CRC in the last 4 bytes, over everything before it */
    uint32_t hcrc = (uint32_t)crc32(0L, out, HDR_BYTES - 4);
    memcpy(out + HDR_BYTES - 4, &hcrc, 4);
}

static int hdr_decode(const char *path, const unsigned char in[HDR_BYTES], rm_ckpt_meta *m,
                      uint64_t *payload_bytes, uint32_t *payload_crc, rm_err *err)
{
    memset(m, 0, sizeof *m);
    if (memcmp(in, RM_CKPT_MAGIC, 8) != 0)
        return rm_errf(err, RM_EINVAL, "%s: bad magic (not a ringmaster checkpoint)", path);
    uint32_t hcrc;
    memcpy(&hcrc, in + HDR_BYTES - 4, 4);
    if (hcrc != (uint32_t)crc32(0L, in, HDR_BYTES - 4))
        return rm_errf(err, RM_EINVAL, "%s: header checksum mismatch", path);
    wbuf w = {(unsigned char *)in, 8, HDR_BYTES};
    uint32_t ver = 0, hb = 0;
    get(&w, &ver, 4);
    get(&w, &hb, 4);
    if (ver != RM_CKPT_VERSION || hb != HDR_BYTES)
        return rm_errf(err, RM_EINVAL, "%s: unsupported version %u (header %u bytes)", path, ver, hb);
    for (size_t i = 0; i < RM_ARRAY_LEN(HDR_FIELDS); i++)
        get(&w, (char *)m + HDR_FIELDS[i].off, HDR_FIELDS[i].len);
    int32_t nl = m->shape.nlayers;
    get(&w, payload_bytes, 8);
    get(&w, payload_crc, 4);
    get(&w, &m->shard_rank, 4);
    get(&w, &m->shard_world, 4);
    get(&w, &m->shard_floats, 8);
    bool sharded = m->shard_world != 0;
    uint64_t floats = sharded ? m->shard_floats : m->nparams;
    if (nl < 1 || nl >= RM_MODEL_SHAPE_WORDS || m->nstate < 0 || m->nstate > RM_CKPT_MAX_STATE ||
        m->step < 0 || m->data_pos < 0 || m->world_size < 1 ||
        (sharded && (m->shard_world < 1 || m->shard_rank < 0 || m->shard_rank >= m->shard_world ||
                     m->shard_floats > m->nparams)) ||
        *payload_bytes != (uint64_t)(1 + m->nstate) * floats * sizeof(float))
        return rm_errf(err, RM_EINVAL, "%s: inconsistent header fields", path);
    return RM_OK;
}

/* ---------------- helpers ---------------- */

int rm_mkdir_p(const char *path, rm_err *err)
{
    return rm_fs_mkdir_p(path, err);
}

int rm_ckpt_dir_check(const char *dir, rm_err *err)
{
    return rm_fs_dir_writable(dir, "checkpoint dir", err);
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int rm_ckpt_json_name(const char *name, char *out, size_t cap)
{
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name)
        return -1;
    int w = snprintf(out, cap, "index-%.*s.json", (int)(dot - name), name);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

int rm_ckpt_fsync_dir(const char *dir)
{
    return fsync_dir(dir);
}

/* "ckpt-000000000200.rmck" or "ckpt-000000000200-3.rmck" -> step, suffix. */
static int parse_name(const char *name, long long *step, int *suffix)
{
    long long s;
    int n = 0, suf = 0;
    if (sscanf(name, "ckpt-%12lld%n", &s, &n) != 1 || n != 17)
        return -1;
    const char *rest = name + n;
    if (*rest == '-') {
        int m = 0;
        if (sscanf(rest + 1, "%d%n", &suf, &m) != 1 || suf < 1)
            return -1;
        rest += 1 + m;
    }
    if (strcmp(rest, ".rmck") != 0)
        return -1;
    *step = s;
    *suffix = suf;
    return 0;
}

static int entry_desc(const void *a, const void *b)
{
    const rm_ckpt_entry *x = a, *y = b;
    for (int i = 0; i < 2; i++)
        if (x->key[i] != y->key[i])
            return x->key[i] < y->key[i] ? 1 : -1;
    return 0;
}

int rm_ckpt_list(const char *dir, rm_ckpt_parse_fn parse, rm_ckpt_entry **out, int *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? RM_ENOTFOUND : RM_EIO;
    rm_ckpt_entry *v = NULL;
    int cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        rm_ckpt_entry c = {{0, 0}, 0, ""};
        size_t len = strlen(e->d_name);
        if (len >= sizeof c.name || !parse(e->d_name, &c))
            continue;
        if (cnt == cap) {
            int ncap = cap ? cap * 2 : 16;
            rm_ckpt_entry *nv = realloc(v, (size_t)ncap * sizeof *nv);
            if (!nv) {
                free(v);
                closedir(d);
                return RM_ENOMEM;
            }
            v = nv;
            cap = ncap;
        }
        memcpy(c.name, e->d_name, len + 1); /* length checked above */
        v[cnt++] = c;
    }
    closedir(d);
    if (cnt)
        qsort(v, (size_t)cnt, sizeof *v, entry_desc);
    *out = v;
    *n = cnt;
    return RM_OK;
}

/* A whole checkpoint's file: key[0] = step, key[1] = suffix. */
static bool parse_ckpt_entry(const char *name, rm_ckpt_entry *e)
{
    long long step;
    int suf;
    if (parse_name(name, &step, &suf) != 0)
        return false;
    e->key[0] = step;
    e->key[1] = suf;
    return true;
}

/* Checkpoint files in dir, newest first. *out owned (free()). */
static int list_ckpts(const char *dir, rm_ckpt_entry **out, int *n)
{
    return rm_ckpt_list(dir, parse_ckpt_entry, out, n);
}

int rm_ckpt_list_whole(const char *dir, rm_ckpt_entry **out, int *n)
{
    return list_ckpts(dir, out, n);
}

/* DIR/ckpt-<step>.rmck, or DIR/ckpt-<step>-<suf>.rmck for suf >= 1. */
static int ckpt_name(char *out, size_t cap, const char *dir, int64_t step, int suf, rm_err *err)
{
    if (suf > 1000)
        return rm_errf(err, RM_EIO, "checkpoint: too many files for step %lld", (long long)step);
    int w = suf ? snprintf(out, cap, "%s/ckpt-%012lld-%d.rmck", dir, (long long)step, suf)
                : snprintf(out, cap, "%s/ckpt-%012lld.rmck", dir, (long long)step);
    if (w < 0 || (size_t)w >= cap)
        return rm_errf(err, RM_EINVAL, "checkpoint: path too long");
    return RM_OK;
}

/* Move tmp to final unless final exists (then -1 with errno EEXIST, tmp kept): renameat2's
 * RENAME_NOREPLACE, or link + unlink where the file system lacks it. Both are atomic: a file
 * that appeared under the name after it was chosen is never replaced. */
static int place_noreplace(const char *tmp, const char *final)
{
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return -1;
    if (link(tmp, final) != 0)
        return -1;
    unlink(tmp);
    return 0;
}

/* ---------------- write ---------------- */

static int shape_eq(const rm_model_shape *a, const rm_model_shape *b);

/* The header of the checkpoint at path, decoded and checked (not the payload). */
static int read_header(const char *path, rm_ckpt_meta *m)
{
    unsigned char hdr[HDR_BYTES];
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t got = fread(hdr, 1, HDR_BYTES, f);
    fclose(f);
    uint64_t pb;
    uint32_t pc;
    if (got != HDR_BYTES || hdr_decode(path, hdr, m, &pb, &pc, NULL) != RM_OK)
        return -1;
    return 0;
}

/* Keep the newest `keep` checkpoints of this job's model (shape, optimizer): older ones of the
 * same model are removed, never the one just written (`self`). A file of another model shape or
 * optimizer — an earlier run's, found when --resume had nothing to continue from — or one whose
 * header does not decode is left alone: pruning only ever removes what this run could load. */
static void prune(const char *dir, const rm_ckpt_meta *meta, const char *self, int keep)
{
    rm_ckpt_entry *v = NULL;
    int n = 0;
    if (list_ckpts(dir, &v, &n) != RM_OK)
        return;
    int same = 0;
    for (int i = 0; i < n; i++) {
        char p[4096 + 64];
        snprintf(p, sizeof p, "%s/%s", dir, v[i].name);
        bool mine = strcmp(v[i].name, self) == 0;
        rm_ckpt_meta m;
        if (!mine && (read_header(p, &m) != 0 || !shape_eq(&m.shape, &meta->shape) ||
                      m.opt_type != meta->opt_type || m.nstate != meta->nstate)) {
            rm_debug("checkpoint kept (another model or unreadable header) path=%s", p);
            continue;
        }
        if (++same <= keep || mine)
            continue;
        /* its manifest first: a manifest never names a file that is gone */
        char jn[RM_CKPT_NAME_CAP], jp[4096 + 64];
        if (rm_ckpt_json_name(v[i].name, jn, sizeof jn) == 0) {
            snprintf(jp, sizeof jp, "%s/%s", dir, jn);
            unlink(jp);
        }
        if (unlink(p) == 0)
            rm_debug("checkpoint pruned path=%s", p);
    }
    free(v);
}

/* CRC32 and total size of the payload segments. */
static uint32_t segs_crc(const rm_ckpt_seg *segs, int nsegs, uint64_t *bytes)
{
    uint32_t pcrc = (uint32_t)crc32(0L, Z_NULL, 0);
    *bytes = 0;
    for (int i = 0; i < nsegs; i++) {
        *bytes += segs[i].bytes;
        const unsigned char *p = segs[i].p;
        size_t left = segs[i].bytes;
        while (left) {
            uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
            pcrc = (uint32_t)crc32(pcrc, p, chunk);
            p += chunk;
            left -= chunk;
        }
    }
    return pcrc;
}

/* Write segs to a fresh temp file in dir (tmp, its path) and fsync it. The temp name carries tag,
 * the pid and the thread's stack address, so concurrent writers never share one. */
static int write_tmp(const char *dir, const char *tag, const rm_ckpt_seg *segs, int nsegs, char *tmp,
                     size_t tmp_cap, rm_err *err)
{
    int local;
    snprintf(tmp, tmp_cap, "%s/.tmp-ckpt-%s.%ld.%lx", dir, tag, (long)getpid(),
             (unsigned long)(uintptr_t)&local & 0xffffffUL);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return rm_errf(err, RM_EIO, "checkpoint: create %s: %s", tmp, strerror(errno));
    for (int i = 0; i < nsegs; i++)
        if (segs[i].bytes && fwrite(segs[i].p, 1, segs[i].bytes, f) != segs[i].bytes)
            goto ioerr;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        goto ioerr;
    if (fclose(f) != 0) {
        f = NULL;
        goto ioerr;
    }
    return RM_OK;
ioerr:;
    int rc = rm_errf(err, RM_EIO, "checkpoint: write %s: %s", tmp, strerror(errno ? errno : EIO));
    if (f)
        fclose(f);
    unlink(tmp);
    return rc;
}

/* After a file is placed: fsync dir, then remove temp files left by a writer that died mid-write
 * (older than a minute: never one in flight). */
static int finish_dir(const char *dir, rm_err *err)
{
    if (fsync_dir(dir) != 0)
        return rm_errf(err, RM_EIO, "checkpoint: fsync %s: %s", dir, strerror(errno));
    DIR *dd = opendir(dir);
    if (dd) {
        struct dirent *de;
        time_t now = time(NULL);
        while ((de = readdir(dd))) {
            if (strncmp(de->d_name, ".tmp-ckpt-", 10) != 0)
                continue;
            char p[4096 + 300];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            struct stat ts;
            if (stat(p, &ts) == 0 && now - ts.st_mtime > 60 && unlink(p) == 0)
                rm_info("checkpoint: removed a stale temp file path=%s", p);
        }
        closedir(dd);
    }
    return RM_OK;
}

/* The header + payload segments of one checkpoint file, checked against the header. */
static int encode_file(const rm_ckpt_meta *meta, const rm_ckpt_seg *segs, int nsegs,
                       unsigned char hdr[HDR_BYTES], rm_ckpt_seg *all, rm_err *err)
{
    uint64_t payload = 0;
    uint32_t pcrc = segs_crc(segs, nsegs, &payload);
    uint64_t floats = meta->shard_world ? meta->shard_floats : meta->nparams;
    if (payload != (uint64_t)(1 + meta->nstate) * floats * sizeof(float))
        return rm_errf(err, RM_EINVAL, "checkpoint: payload %llu bytes does not match the header",
                       (unsigned long long)payload);
    hdr_encode(meta, payload, pcrc, hdr);
    all[0] = (rm_ckpt_seg){hdr, HDR_BYTES};
    for (int i = 0; i < nsegs; i++)
        all[1 + i] = segs[i];
    return RM_OK;
}

#define MAX_SEGS 8

int rm_ckpt_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_seg *segs, int nsegs, int keep,
                  char *path_out, size_t path_cap, rm_err *err)
{
    char tmp[4200], final[4096];
    unsigned char hdr[HDR_BYTES];
    rm_ckpt_seg all[1 + MAX_SEGS];
    if (nsegs < 0 || nsegs > MAX_SEGS)
        return rm_errf(err, RM_EINVAL, "checkpoint: %d payload segments (at most %d)", nsegs, MAX_SEGS);
    RM_CHECK(encode_file(meta, segs, nsegs, hdr, all, err));
    RM_CHECK(rm_mkdir_p(dir, err));
    /* never overwrite an existing file, valid or not: start at the first free name; placing the
     * file below re-checks atomically (something may appear there while we write) */
    struct stat st;
    int suf = 0;
    for (;; suf++) {
        RM_CHECK(ckpt_name(final, sizeof final, dir, meta->step, suf, err));
        if (stat(final, &st) != 0)
            break;
    }
    char tag[32];
    snprintf(tag, sizeof tag, "%012lld", (long long)meta->step);
    RM_CHECK(write_tmp(dir, tag, all, 1 + nsegs, tmp, sizeof tmp, err));
    for (;;) {
        if (place_noreplace(tmp, final) == 0)
            break;
        if (errno != EEXIST) {
            int rc = rm_errf(err, RM_EIO, "checkpoint: write %s: %s", tmp, strerror(errno));
            unlink(tmp);
            return rc;
        }
        int rc = ckpt_name(final, sizeof final, dir, meta->step, ++suf, err);
        if (rc) {
            unlink(tmp);
            return rc;
        }
    }
    RM_CHECK(finish_dir(dir, err)); /* the file is in place; a failure is reported, it is kept */
    if (path_out)
        snprintf(path_out, path_cap, "%s", final);
    if (keep >= 1)
        prune(dir, meta, strrchr(final, '/') + 1, keep);
    return RM_OK;
}

/* Place tmp at DIR/name without replacing anything (RM_ECONFLICT if it exists; tmp removed). */
static int place_named(const char *dir, const char *name, const char *tmp, char *final, size_t cap,
                       rm_err *err)
{
    int w = snprintf(final, cap, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= cap) {
        unlink(tmp);
        return rm_errf(err, RM_EINVAL, "checkpoint: path too long");
    }
    if (place_noreplace(tmp, final) != 0) {
        int e = errno;
        unlink(tmp);
        if (e == EEXIST)
            return rm_errf(err, RM_ECONFLICT, "checkpoint: %s exists already", final);
        return rm_errf(err, RM_EIO, "checkpoint: place %s: %s", final, strerror(e));
    }
    return finish_dir(dir, err);
}

int rm_ckpt_write_named(const char *dir, const char *name, const rm_ckpt_meta *meta, const rm_ckpt_seg *segs,
                        int nsegs, char *path_out, size_t path_cap, rm_err *err)
{
    char tmp[4200], final[4400];
    unsigned char hdr[HDR_BYTES];
    rm_ckpt_seg all[1 + MAX_SEGS];
    if (nsegs < 0 || nsegs > MAX_SEGS)
        return rm_errf(err, RM_EINVAL, "checkpoint: %d payload segments (at most %d)", nsegs, MAX_SEGS);
    if (!name || !*name || strchr(name, '/'))
        return rm_errf(err, RM_EINVAL, "checkpoint: bad file name");
    RM_CHECK(encode_file(meta, segs, nsegs, hdr, all, err));
    RM_CHECK(rm_mkdir_p(dir, err));
    RM_CHECK(write_tmp(dir, name, all, 1 + nsegs, tmp, sizeof tmp, err));
    RM_CHECK(place_named(dir, name, tmp, final, sizeof final, err));
    if (path_out)
        snprintf(path_out, path_cap, "%s", final);
    return RM_OK;
}

int rm_ckpt_put_file(const char *dir, const char *name, const void *bytes, size_t n, rm_err *err)
{
    char tmp[4200], final[4400];
    if (!name || !*name || strchr(name, '/'))
        return rm_errf(err, RM_EINVAL, "checkpoint: bad file name");
    RM_CHECK(rm_mkdir_p(dir, err));
    rm_ckpt_seg seg = {bytes, n};
    RM_CHECK(write_tmp(dir, name, &seg, 1, tmp, sizeof tmp, err));
    return place_named(dir, name, tmp, final, sizeof final, err);
}

int rm_ckpt_read_header(const char *path, rm_ckpt_meta *meta, uint32_t *payload_crc, rm_err *err)
{
    unsigned char hdr[HDR_BYTES];
    FILE *f = fopen(path, "rb");
    if (!f)
        return rm_errf(err, RM_EIO, "%s: %s", path, strerror(errno));
    size_t got = fread(hdr, 1, HDR_BYTES, f);
    fclose(f);
    if (got != HDR_BYTES)
        return rm_errf(err, RM_EINVAL, "%s: truncated header", path);
    uint64_t pb;
    uint32_t pc;
    RM_CHECK(hdr_decode(path, hdr, meta, &pb, &pc, err));
    if (payload_crc)
        *payload_crc = pc;
    return RM_OK;
}

/* ---------------- read ---------------- */

static int shape_eq(const rm_model_shape *a, const rm_model_shape *b)
{
    if (a->nlayers != b->nlayers)
        return 0;
    for (int i = 0; i <= a->nlayers; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

/* The file's model and optimizer are the expected ones (expect NULL: anything). */
static int expect_ok(const char *path, const rm_ckpt_meta *meta, const rm_ckpt_meta *expect, rm_err *err)
{
    if (!expect)
        return RM_OK;
    if (!shape_eq(&meta->shape, &expect->shape)) {
        char a[256], b[256];
        rm_model_shape_words(&meta->shape, a, sizeof a);
        rm_model_shape_words(&expect->shape, b, sizeof b);
        return rm_errf(err, RM_EINVAL, "%s: model shape %s, this job has %s", path, a, b);
    }
    /* the shape record is the family's; the parameter count it implies is the job's */
    if (expect->nparams && meta->nparams != expect->nparams)
        return rm_errf(err, RM_EINVAL, "%s: %lld parameters, this job's model has %lld", path,
                       (long long)meta->nparams, (long long)expect->nparams);
    if (meta->opt_type != expect->opt_type || meta->nstate != expect->nstate)
        return rm_errf(err, RM_EINVAL, "%s: optimizer state does not match this job's optimizer", path);
    return RM_OK;
}

int rm_ckpt_read(const char *path, const rm_ckpt_meta *expect, rm_ckpt_meta *meta, void *payload, size_t cap,
                 rm_err *err)
{
    int rc = RM_OK;
    unsigned char hdr[HDR_BYTES];
    uint64_t pbytes = 0;
    uint32_t pcrc = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rm_errf(err, RM_EIO, "%s: %s", path, strerror(errno));
    if (fread(hdr, 1, HDR_BYTES, f) != HDR_BYTES) {
        rc = rm_errf(err, RM_EINVAL, "%s: truncated header", path);
        goto out;
    }
    RM_CHECK_GOTO(hdr_decode(path, hdr, meta, &pbytes, &pcrc, err), rc, out);
    RM_CHECK_GOTO(expect_ok(path, meta, expect, err), rc, out);
    if (pbytes > cap) {
        rc = rm_errf(err, RM_EINVAL, "%s: payload %llu bytes larger than expected %zu", path,
                     (unsigned long long)pbytes, cap);
        goto out;
    }
    if (fread(payload, 1, (size_t)pbytes, f) != pbytes) {
        rc = rm_errf(err, RM_EINVAL, "%s: truncated payload", path);
        goto out;
    }
    unsigned char extra;
    if (fread(&extra, 1, 1, f) != 0) {
        rc = rm_errf(err, RM_EINVAL, "%s: trailing bytes after the payload", path);
        goto out;
    }
    uint32_t c = (uint32_t)crc32(0L, Z_NULL, 0);
    const unsigned char *p = payload;
    uint64_t left = pbytes;
    while (left) {
        uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
        c = (uint32_t)crc32(c, p, chunk);
        p += chunk;
        left -= chunk;
    }
    if (c != pcrc) {
        rc = rm_errf(err, RM_EINVAL, "%s: payload checksum mismatch", path);
        goto out;
    }
out:
    fclose(f);
    return rc;
}

/* The newest file of dir that try_one accepts (newest first; each one refused is logged and
 * counted in *skipped): its path in path_out. try_one reads the file into the caller's buffers. */
static int load_newest_with(const char *dir, int (*try_one)(const char *path, void *ctx, rm_err *e),
                            void *ctx, char *path_out, size_t path_cap, int *skipped, rm_err *err)
{
    rm_ckpt_entry *v = NULL;
    int n = 0, bad = 0;
    if (skipped)
        *skipped = 0;
    int rc = list_ckpts(dir, &v, &n);
    if (rc == RM_ENOTFOUND)
        return rm_errf(err, RM_ENOTFOUND, "no checkpoint dir %s", dir);
    if (rc)
        return rm_errf(err, rc, "checkpoint: cannot list %s", dir);
    rc = RM_ENOTFOUND;
    for (int i = 0; i < n; i++) {
        char p[4096 + 64];
        snprintf(p, sizeof p, "%s/%s", dir, v[i].name);
        rm_err e = {0};
        if (try_one(p, ctx, &e) == RM_OK) {
            if (path_out)
                snprintf(path_out, path_cap, "%s", p);
            rc = RM_OK;
            break;
        }
        bad++;
        rm_warn("checkpoint skipped (invalid) path=%s reason=\"%s\"", p, e.msg);
    }
    free(v);
    if (skipped)
        *skipped = bad;
    if (rc)
        return rm_errf(err, RM_ENOTFOUND, "no valid checkpoint in %s (%d invalid skipped)", dir, bad);
    return RM_OK;
}

typedef struct whole_try {
    const rm_ckpt_meta *expect;
    rm_ckpt_meta *meta;
    void *payload;
    size_t cap;
} whole_try;

static int try_whole(const char *path, void *ctx, rm_err *e)
{
    whole_try *w = ctx;
    return rm_ckpt_read(path, w->expect, w->meta, w->payload, w->cap, e);
}

int rm_ckpt_load_newest(const char *dir, const rm_ckpt_meta *expect, rm_ckpt_meta *meta, void *payload,
                        size_t cap, char *path_out, size_t path_cap, int *skipped, rm_err *err)
{
    whole_try w = {expect, meta, payload, cap};
    return load_newest_with(dir, try_whole, &w, path_out, path_cap, skipped, err);
}

/* ---------------- ranged read (pipeline stages: only the own layers stay) ---------------- */

#define RANGE_CHUNK (1u << 20) /* bytes streamed at a time */

int rm_ckpt_read_ranges(const char *path, const rm_ckpt_meta *expect, const rm_ckpt_range *r, int nr,
                        void *dst, size_t cap, rm_ckpt_meta *meta, uint32_t *payload_crc, rm_err *err)
{
    unsigned char hdr[HDR_BYTES];
    uint64_t pbytes = 0;
    uint32_t pcrc = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rm_errf(err, RM_EIO, "%s: %s", path, strerror(errno));
    unsigned char *chunk = NULL;
    int rc = RM_OK;
    if (fread(hdr, 1, HDR_BYTES, f) != HDR_BYTES) {
        rc = rm_errf(err, RM_EINVAL, "%s: truncated header", path);
        goto out;
    }
    RM_CHECK_GOTO(hdr_decode(path, hdr, meta, &pbytes, &pcrc, err), rc, out);
    RM_CHECK_GOTO(expect_ok(path, meta, expect, err), rc, out);
    for (int i = 0; i < nr; i++)
        if (r[i].src > pbytes || r[i].len > pbytes - r[i].src || r[i].dst > cap ||
            r[i].len > cap - r[i].dst) {
            rc = rm_errf(err, RM_EINVAL,
                         "%s: range %d (payload bytes %llu+%llu) outside the payload "
                         "(%llu bytes) or the destination (%zu)",
                         path, i, (unsigned long long)r[i].src, (unsigned long long)r[i].len,
                         (unsigned long long)pbytes, cap);
            goto out;
        }
    chunk = malloc(RANGE_CHUNK);
    if (!chunk) {
        rc = rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    uint32_t c = (uint32_t)crc32(0L, Z_NULL, 0);
    for (uint64_t at = 0; at < pbytes;) {
        size_t n = pbytes - at > RANGE_CHUNK ? RANGE_CHUNK : (size_t)(pbytes - at);
        if (fread(chunk, 1, n, f) != n) {
            rc = rm_errf(err, RM_EINVAL, "%s: truncated payload", path);
            goto out;
        }
        c = (uint32_t)crc32(c, chunk, (uInt)n);
        for (int i = 0; i < nr; i++) { /* the part of each range in [at, at + n) */
            uint64_t lo = r[i].src > at ? r[i].src : at, hi = r[i].src + r[i].len;
            hi = hi < at + n ? hi : at + n;
            if (lo < hi)
                memcpy((char *)dst + r[i].dst + (lo - r[i].src), chunk + (lo - at), (size_t)(hi - lo));
        }
        at += n;
    }
    unsigned char extra;
    if (fread(&extra, 1, 1, f) != 0) {
        rc = rm_errf(err, RM_EINVAL, "%s: trailing bytes after the payload", path);
        goto out;
    }
    if (c != pcrc) {
        rc = rm_errf(err, RM_EINVAL, "%s: payload checksum mismatch", path);
        goto out;
    }
    if (payload_crc)
        *payload_crc = pcrc;
out:
    free(chunk);
    fclose(f);
    return rc;
}

typedef struct ranges_try {
    const rm_ckpt_meta *expect;
    const rm_ckpt_range *r;
    int nr;
    void *dst;
    size_t cap;
    rm_ckpt_meta *meta;
} ranges_try;

static int try_ranges(const char *path, void *ctx, rm_err *e)
{
    ranges_try *t = ctx;
    int rc = rm_ckpt_read_ranges(path, t->expect, t->r, t->nr, t->dst, t->cap, t->meta, NULL, e);
    if (rc == RM_OK && t->meta->shard_world != 0)
        rc = rm_errf(e, RM_EINVAL, "%s: a shard's header under a whole checkpoint's name", path);
    return rc;
}

int rm_ckpt_load_newest_ranges(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_range *r, int nr,
                               void *dst, size_t cap, rm_ckpt_meta *meta, char *path_out, size_t path_cap,
                               int *skipped, rm_err *err)
{
    ranges_try t = {expect, r, nr, dst, cap, meta};
    return load_newest_with(dir, try_ranges, &t, path_out, path_cap, skipped, err);
}
