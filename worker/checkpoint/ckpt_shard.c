/* ckpt_shard.c — sharded, elastic checkpoints: shard files, the manifest, re-sharding on load
 * (format and guarantees in ckpt_shard.h). The files themselves are written and verified by
 * worker/checkpoint/checkpoint.c; this module names them, ties a set together and plans the re-sharding. */
#include "worker/checkpoint/ckpt_shard.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/clock.h"
#include "common/log.h"
#include "worker/allreduce/shard.h"

#define MANIFEST_MAGIC "ringmaster-shard-manifest 1"
/* A pieces set's JSON manifest lists every run's rows (as pieces, in every buffer): at most this
 * many (about 20 MB of JSON), else it is left out. */
#define RM_CKPT_JSON_MAX_ROWS (1 << 18)
#define MAX_WORLD 4096
#define NAME_CAP 96

/* ---------------- names ---------------- */

int rm_ckpt_shard_name(char *out, size_t cap, int64_t step, int epoch, int rank, int world)
{
    int w = snprintf(out, cap, "shard-%012lld-%d-%d-of-%d.rmck", (long long)step, epoch, rank, world);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

int rm_ckpt_manifest_name(char *out, size_t cap, int64_t step, int epoch, int world)
{
    int w = snprintf(out, cap, "manifest-%012lld-%d-%d.rmmf", (long long)step, epoch, world);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
}

/* Parse by scanning and re-formatting: only the canonical spelling is a set's file. */
static bool parse_manifest_name(const char *name, int64_t *step, int *epoch, int *world)
{
    long long s;
    int e, w;
    char back[NAME_CAP];
    if (sscanf(name, "manifest-%12lld-%d-%d.rmmf", &s, &e, &w) != 3 || s < 0 || w < 1 || w > MAX_WORLD ||
        rm_ckpt_manifest_name(back, sizeof back, s, e, w) != 0 || strcmp(back, name))
        return false;
    *step = s;
    *epoch = e;
    *world = w;
    return true;
}

static bool parse_shard_name(const char *name, int64_t *step, int *epoch, int *rank, int *world)
{
    long long s;
    int e, r, w;
    char back[NAME_CAP];
    if (sscanf(name, "shard-%12lld-%d-%d-of-%d.rmck", &s, &e, &r, &w) != 4 || s < 0 || w < 1 || r < 0 ||
        r >= w || rm_ckpt_shard_name(back, sizeof back, s, e, r, w) != 0 || strcmp(back, name))
        return false;
    *step = s;
    *epoch = e;
    *rank = r;
    *world = w;
    return true;
}

static void join(char *out, size_t cap, const char *dir, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* ---------------- the manifest ---------------- */

typedef struct mshard {
    uint64_t floats;
    uint32_t crc;
    char name[NAME_CAP];
} mshard;

typedef struct manifest {
    int64_t step;
    int epoch, world;
    uint64_t nparams;
    int nstate, opt_type;
    int nunits;
    size_t uoff[RM_SHARD_MAX_UNITS], ulen[RM_SHARD_MAX_UNITS];
    int nstages; /* stage layout (ckpt_shard.h); 0: balanced */
    int sbound[RM_SHARD_MAX_UNITS + 1];
    mshard *sh;       /* world of them, owned */
    rm_ckpt_run *run; /* pieces layout: nrun runs, owned (NULL: another layout) */
    int nrun;
} manifest;

static void manifest_free(manifest *m)
{
    free(m->sh);
    free(m->run);
    m->sh = NULL;
    m->run = NULL;
}

/* Text of m into a malloc'd buffer (*out, *n). */
static int manifest_encode(const manifest *m, char **out, size_t *n, rm_err *err)
{
    size_t cap = 512 + (size_t)m->nunits * 48 + (size_t)m->world * (NAME_CAP + 64) + (size_t)m->nrun * 160;
    char *b = malloc(cap);
    if (!b)
        return rm_errf(err, RM_ENOMEM, "checkpoint manifest: out of memory");
    size_t at = 0;
#define EMIT(...) at += (size_t)snprintf(b + at, at < cap ? cap - at : 0, __VA_ARGS__)
    EMIT("%s\nstep %lld\nrdzv_epoch %d\nworld %d\nnparams %llu\nnstate %d\nopt_type %d\nunits %d\n",
         MANIFEST_MAGIC, (long long)m->step, m->epoch, m->world, (unsigned long long)m->nparams, m->nstate,
         m->opt_type, m->nunits);
    for (int u = 0; u < m->nunits; u++)
        EMIT("unit %zu %zu\n", m->uoff[u], m->ulen[u]);
    if (m->nstages > 0) {
        EMIT("stages %d", m->nstages);
        for (int i = 0; i <= m->nstages; i++)
            EMIT(" %d", m->sbound[i]);
        EMIT("\n");
    }
    for (int r = 0; r < m->world; r++)
        EMIT("shard %d %llu %08x %s\n", r, (unsigned long long)m->sh[r].floats, m->sh[r].crc, m->sh[r].name);
    if (m->run) {
        EMIT("pieces %d\n", m->nrun);
        for (int i = 0; i < m->nrun; i++) {
            const rm_ckpt_run *x = &m->run[i];
            EMIT("run %d %llu %llu %llu %llu %u %llu\n", x->shard, (unsigned long long)x->local,
                 (unsigned long long)x->lstride, (unsigned long long)x->whole, (unsigned long long)x->wstride,
                 x->rows, (unsigned long long)x->len);
        }
    }
    if (at + 32 >= cap) {
        free(b);
        return rm_errf(err, RM_ETOOBIG, "checkpoint manifest: too long");
    }
    uint32_t crc = (uint32_t)crc32(0L, (const unsigned char *)b, (uInt)at);
    EMIT("end %08x\n", crc);
#undef EMIT
    *out = b;
    *n = at;
    return RM_OK;
}

/* A stage layout: one stage per shard, bounds increasing from unit 0 to the last. */
static bool stages_ok(int nstages, const int *b, int world, int nunits)
{
    if (nstages != world || nstages < 1 || nstages > nunits || b[0] != 0 || b[nstages] != nunits)
        return false;
    for (int i = 0; i < nstages; i++)
        if (b[i + 1] <= b[i])
            return false;
    return true;
}

/* A pieces layout's runs against the shards and the vector: each run inside its shard (the
 * shard's floats) and inside nparams, every parameter covered exactly once. NULL when they hold,
 * else what is wrong (static text; *bad the run). */
static const char *pieces_check(const manifest *m, int *bad)
{
    *bad = -1;
    if (m->nrun < 1 || m->nrun > RM_CKPT_MAX_RUNS)
        return "no runs, or too many";
    uint64_t n = m->nparams;
    uint8_t *seen = calloc(n / 8 + 1, 1);
    if (!seen)
        return "out of memory checking the runs";
    const char *why = NULL;
    for (int i = 0; i < m->nrun && !why; i++) {
        const rm_ckpt_run *x = &m->run[i];
        *bad = i;
        uint64_t rows = x->rows;
        if (x->shard < 0 || x->shard >= m->world || rows < 1 || x->len < 1 ||
            (rows > 1 && (x->lstride < x->len || x->wstride < x->len))) {
            why = "a run with a bad shard, shape or stride";
            break;
        }
        uint64_t fl = m->sh[x->shard].floats, lend, wend, a, b;
        /* every term bounded before it is multiplied or added: a manifest is input */
        bool bad_span = x->len > fl || x->len > n || x->local > fl || x->whole > n ||
                        (rows > 1 && (x->lstride > fl || x->wstride > n)) ||
                        __builtin_mul_overflow(rows - 1, x->lstride, &a) ||
                        __builtin_add_overflow(a, x->local, &a) || __builtin_add_overflow(a, x->len, &lend) ||
                        __builtin_mul_overflow(rows - 1, x->wstride, &b) ||
                        __builtin_add_overflow(b, x->whole, &b) || __builtin_add_overflow(b, x->len, &wend);
        if (bad_span || lend > fl || wend > n) {
            why = "a run outside its shard or the parameters";
            break;
        }
        for (uint64_t r = 0; r < rows && !why; r++)
            for (uint64_t j = 0, w = x->whole + r * x->wstride; j < x->len; j++, w++) {
                if (seen[w / 8] & (1u << (w % 8))) {
                    why = "runs overlap";
                    break;
                }
                seen[w / 8] |= (uint8_t)(1u << (w % 8));
            }
    }
    for (uint64_t w = 0; w < n && !why; w++)
        if (!(seen[w / 8] & (1u << (w % 8)))) {
            *bad = -1;
            why = "a parameter no run covers";
        }
    free(seen);
    return why;
}

/* Read and verify the manifest at path (capped at RM_CKPT_MANIFEST_MAX bytes). */
static int manifest_read(const char *path, manifest *m, rm_err *err)
{
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (!f)
        return rm_errf(err, errno == ENOENT ? RM_ENOTFOUND : RM_EIO, "%s: %s", path, strerror(errno));
    char *b = malloc(RM_CKPT_MANIFEST_MAX + 1);
    if (!b) {
        fclose(f);
        return rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
    }
    size_t n = fread(b, 1, RM_CKPT_MANIFEST_MAX + 1, f);
    fclose(f);
    int rc = RM_OK;
    if (n > RM_CKPT_MANIFEST_MAX) {
        rc = rm_errf(err, RM_ETOOBIG, "%s: manifest larger than %d bytes", path, RM_CKPT_MANIFEST_MAX);
        goto out;
    }
    b[n] = 0;
    /* the checksum line is the last one */
    char *end = n >= 2 ? b + n - 2 : b;
    while (end > b && end[-1] != '\n')
        end--;
    unsigned want = 0;
    int used = 0;
    if (n < 2 || b[n - 1] != '\n' || sscanf(end, "end %8x\n%n", &want, &used) != 1 ||
        (size_t)(end - b) + (size_t)used != n) {
        rc = rm_errf(err, RM_EINVAL, "%s: truncated manifest (no checksum line)", path);
        goto out;
    }
    if ((uint32_t)crc32(0L, (const unsigned char *)b, (uInt)(end - b)) != (uint32_t)want) {
        rc = rm_errf(err, RM_EINVAL, "%s: manifest checksum mismatch", path);
        goto out;
    }
    *end = 0;
    char *save = NULL, *line = strtok_r(b, "\n", &save);
    long long ll;
    unsigned long long ull;
    int nsh = 0, nu = 0, nr = 0;
    if (!line || strcmp(line, MANIFEST_MAGIC) != 0) {
        rc = rm_errf(err, RM_EINVAL, "%s: not a ringmaster shard manifest", path);
        goto out;
    }
    while ((line = strtok_r(NULL, "\n", &save))) {
        int r, k;
        size_t a, l;
        unsigned c;
        char name[NAME_CAP];
        if (sscanf(line, "step %lld", &ll) == 1)
            m->step = ll;
        else if (sscanf(line, "rdzv_epoch %d", &k) == 1)
            m->epoch = k;
        else if (sscanf(line, "world %d", &k) == 1) {
            if (k < 1 || k > MAX_WORLD || m->sh)
                goto bad;
            m->world = k;
            m->sh = calloc((size_t)k, sizeof *m->sh);
            if (!m->sh) {
                rc = rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
                goto out;
            }
        } else if (sscanf(line, "nparams %llu", &ull) == 1)
            m->nparams = ull;
        else if (sscanf(line, "nstate %d", &k) == 1)
            m->nstate = k;
        else if (sscanf(line, "opt_type %d", &k) == 1)
            m->opt_type = k;
        else if (sscanf(line, "units %d", &k) == 1) {
            if (k < 1 || k > RM_SHARD_MAX_UNITS)
                goto bad;
            m->nunits = k;
        } else if (sscanf(line, "unit %zu %zu", &a, &l) == 2) {
            if (nu >= m->nunits || l == 0)
                goto bad;
            m->uoff[nu] = a;
            m->ulen[nu++] = l;
        } else if (sscanf(line, "stages %d%n", &k, &r) == 1) {
            if (k < 1 || k > RM_SHARD_MAX_UNITS || m->nstages)
                goto bad;
            const char *q = line + r;
            for (int i = 0; i <= k; i++) {
                int adv = 0;
                if (sscanf(q, " %d%n", &m->sbound[i], &adv) != 1)
                    goto bad;
                q += adv;
            }
            if (*q)
                goto bad;
            m->nstages = k;
        } else if (sscanf(line, "pieces %d", &k) == 1) {
            if (k < 1 || k > RM_CKPT_MAX_RUNS || m->run)
                goto bad;
            if (!(m->run = calloc((size_t)k, sizeof *m->run))) {
                rc = rm_errf(err, RM_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            m->nrun = k;
        } else if (strncmp(line, "run ", 4) == 0) {
            unsigned long long lo, ls, wo, ws, ln;
            unsigned rows;
            int used2 = 0;
            if (!m->run || nr >= m->nrun ||
                sscanf(line, "run %d %llu %llu %llu %llu %u %llu%n", &r, &lo, &ls, &wo, &ws, &rows, &ln,
                       &used2) != 7 ||
                line[used2])
                goto bad;
            m->run[nr++] = (rm_ckpt_run){
                .shard = r, .rows = rows, .local = lo, .lstride = ls, .whole = wo, .wstride = ws, .len = ln};
        } else if (sscanf(line, "shard %d %llu %8x %95s", &r, &ull, &c, name) == 4) {
            if (!m->sh || r != nsh || r >= m->world)
                goto bad;
            m->sh[r].floats = ull;
            m->sh[r].crc = c;
            memcpy(m->sh[r].name, name, sizeof name);
            nsh++;
        } else {
            goto bad;
        }
    }
    if (!m->sh || nsh != m->world || m->nunits < 1 || nu != m->nunits || m->nstate < 0 ||
        m->nstate > RM_CKPT_MAX_STATE ||
        (m->nstages && !stages_ok(m->nstages, m->sbound, m->world, m->nunits)) || (m->run && nr != m->nrun) ||
        (m->run && m->nstages))
        goto bad;
    if (m->run) {
        int which = -1;
        const char *why = pieces_check(m, &which);
        if (why) {
            rc = rm_errf(err, RM_EINVAL, "%s: pieces layout: %s (run %d)", path, why, which);
            goto out;
        }
    }
    goto out;
bad:
    rc = rm_errf(err, RM_EINVAL, "%s: malformed manifest", path);
out:
    free(b);
    if (rc)
        manifest_free(m);
    return rc;
}

/* ---------------- listing ---------------- */

/* A manifest as a listing entry: key[0] = step, key[1] = epoch, aux = world. */
static bool parse_manifest_entry(const char *name, rm_ckpt_entry *e)
{
    int64_t step;
    int epoch, world;
    if (!parse_manifest_name(name, &step, &epoch, &world))
        return false;
    e->key[0] = step;
    e->key[1] = epoch;
    e->aux = world;
    return true;
}

/* Manifests in dir, newest first (step, then epoch). *out owned (free()). */
static int list_manifests(const char *dir, rm_ckpt_entry **out, int *n)
{
    return rm_ckpt_list(dir, parse_manifest_entry, out, n);
}

static bool units_ok(const rm_ckpt_units *u, uint64_t nparams)
{
    if (!u || u->n < 1 || u->n > RM_SHARD_MAX_UNITS)
        return false;
    size_t at = 0;
    for (int i = 0; i < u->n; i++) {
        if (u->off[i] != at || u->len[i] == 0)
            return false;
        at += u->len[i];
    }
    return at == nparams;
}

static bool same_model(const manifest *m, uint64_t nparams, int nstate, int opt_type, const rm_ckpt_units *u)
{
    if (m->nparams != nparams || m->nstate != nstate || m->opt_type != opt_type || m->nunits != u->n)
        return false;
    for (int i = 0; i < u->n; i++)
        if (m->uoff[i] != u->off[i] || m->ulen[i] != u->len[i])
            return false;
    return true;
}

/* ---------------- retention ---------------- */

/* The manifest writer's pruning (ckpt_shard.h "Write"). */
static void prune_sets(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_units *units, int keep)
{
    rm_ckpt_entry *v = NULL;
    int n = 0;
    if (keep < 1 || list_manifests(dir, &v, &n) != RM_OK)
        return;
    int kept = 0;
    int64_t newest = -1;
    rm_ckpt_entry *keepv = calloc((size_t)(keep > n ? n : keep) + 1, sizeof *keepv);
    for (int i = 0; i < n && keepv; i++) {
        char p[4096 + NAME_CAP];
        join(p, sizeof p, dir, v[i].name);
        manifest m;
        rm_err e = {0};
        if (manifest_read(p, &m, &e) != RM_OK) {
            rm_debug("manifest kept (unreadable) path=%s", p);
            continue;
        }
        if (!same_model(&m, meta->nparams, meta->nstate, meta->opt_type, units)) {
            manifest_free(&m);
            continue; /* another model's: never ours to remove */
        }
        if (kept < keep) {
            keepv[kept++] = v[i];
            if (newest < 0)
                newest = m.step;
            manifest_free(&m);
            continue;
        }
        /* the manifests first (the JSON one, then the .rmmf): the set is never complete with
         * shards missing, and no manifest names a file that is gone */
        char jn[NAME_CAP], jp[4096 + NAME_CAP];
        if (rm_ckpt_json_name(v[i].name, jn, sizeof jn) == 0) {
            join(jp, sizeof jp, dir, jn);
            unlink(jp);
        }
        if (unlink(p) == 0) {
            (void)rm_ckpt_fsync_dir(dir);
            for (int r = 0; r < m.world; r++) {
                char sp[4096 + NAME_CAP];
                join(sp, sizeof sp, dir, m.sh[r].name);
                unlink(sp);
            }
            rm_debug("sharded checkpoint pruned manifest=%s shards=%d", p, m.world);
        }
        manifest_free(&m);
    }
    free(v);
    if (newest < 0 || !keepv) {
        free(keepv);
        return;
    }
    /* shards of no kept set, older than the newest complete one: they can never complete */
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            int64_t step;
            int ep, r, w;
            if (!parse_shard_name(e->d_name, &step, &ep, &r, &w) || step >= newest)
                continue;
            bool in_kept = false;
            for (int i = 0; i < kept; i++)
                if (keepv[i].key[0] == step && keepv[i].key[1] == ep && keepv[i].aux == w)
                    in_kept = true;
            if (in_kept)
                continue;
            char p[4096 + 300];
            join(p, sizeof p, dir, e->d_name);
            rm_ckpt_meta hm;
            rm_err he = {0};
            if (rm_ckpt_read_header(p, &hm, NULL, &he) != RM_OK || hm.nparams != meta->nparams ||
                hm.nstate != meta->nstate || hm.opt_type != meta->opt_type)
                continue;
            if (unlink(p) == 0)
                rm_debug("incomplete shard pruned path=%s", p);
        }
        closedir(d);
    }
    free(keepv);
}

/* ---------------- write ---------------- */

/* The set's JSON manifest beside its .rmmf (mname): each shard's spans are its pieces of the
 * units in the layout the .rmmf records (old_shard, below). */
static int old_shard(const manifest *m, const rm_ckpt_units *units, int r, rm_unit_shard *out);
static int json_write(const char *dir, const char *mname, const rm_ckpt_meta *meta,
                      const rm_ckpt_units *units, const rm_ckpt_model *model, const manifest *m, rm_err *err)
{
    char jname[NAME_CAP];
    if (rm_ckpt_json_name(mname, jname, sizeof jname) != 0)
        return rm_errf(err, RM_EINVAL, "checkpoint manifest: no name for %s", mname);
    rm_ckpt_file_map *fm = calloc((size_t)m->world, sizeof *fm);
    rm_ckpt_span *sp = calloc((size_t)m->world * (size_t)units->n, sizeof *sp);
    if (!fm || !sp) {
        free(fm);
        free(sp);
        return rm_errf(err, RM_ENOMEM, "checkpoint manifest: out of memory");
    }
    int rc = RM_OK;
    if (m->run) { /* a pieces set: each run's rows are spans of its shard */
        size_t total = 0;
        for (int i = 0; i < m->nrun; i++)
            total += m->run[i].rows;
        if (total * (size_t)(1 + m->nstate) > RM_CKPT_JSON_MAX_ROWS) {
            /* version 1 of the JSON format has no strides: a column split of a wide model is a
             * piece per row, tens of MB of JSON per checkpoint; the .rmmf's runs are the set's
             * description, and restores read them */
            rm_info(
                "checkpoint JSON manifest left out manifest=%s rows=%zu cap=%d (the .rmmf lists the pieces)",
                mname, total * (size_t)(1 + m->nstate), RM_CKPT_JSON_MAX_ROWS);
            free(fm);
            free(sp);
            return RM_OK;
        }
        free(sp);
        if (!(sp = calloc(total ? total : 1, sizeof *sp)))
            rc = rm_errf(err, RM_ENOMEM, "checkpoint manifest: out of memory");
        size_t at = 0;
        for (int r = 0; r < m->world && rc == RM_OK; r++) {
            fm[r] = (rm_ckpt_file_map){
                .name = m->sh[r].name, .crc = m->sh[r].crc, .floats = m->sh[r].floats, .spans = sp + at};
            for (int i = 0; i < m->nrun; i++)
                for (uint32_t row = 0; m->run[i].shard == r && row < m->run[i].rows;
                     row++, at++, fm[r].nspans++)
                    sp[at] = (rm_ckpt_span){m->run[i].whole + row * m->run[i].wstride, m->run[i].len,
                                            m->run[i].local + row * m->run[i].lstride};
        }
    }
    for (int r = 0; r < m->world && rc == RM_OK && !m->run; r++) {
        rm_unit_shard o;
        if (old_shard(m, units, r, &o) != 0) {
            rc = rm_errf(err, RM_EINVAL, "checkpoint manifest: bad layout");
            break;
        }
        rm_ckpt_span *mine = sp + (size_t)r * (size_t)units->n;
        fm[r] =
            (rm_ckpt_file_map){.name = m->sh[r].name, .crc = m->sh[r].crc, .floats = o.total, .spans = mine};
        for (int u = 0; u < units->n; u++)
            if (o.len[u] > 0)
                mine[fm[r].nspans++] = (rm_ckpt_span){o.off[u], o.len[u], o.soff[u]};
    }
    rm_ckpt_manifest mf;
    if (rc == RM_OK)
        rc = rm_ckpt_manifest_build(meta,
                                    m->nstages ? "stages"
                                    : m->run   ? "pieces"
                                               : "sharded",
                                    model, fm, m->world, &mf, err);
    if (rc == RM_OK) {
        rc = rm_ckpt_manifest_write(dir, jname, &mf, err);
        rm_ckpt_manifest_free(&mf);
    }
    free(fm);
    free(sp);
    return rc;
}

/* Every layout: stage_bounds and runs NULL is the balanced one. */
static int set_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_units *units,
                     const rm_ckpt_model *model, const int *stage_bounds, const rm_ckpt_run *runs, int nruns,
                     const rm_ckpt_seg *segs, int nsegs, int keep, double wait_s, char *path_out,
                     size_t path_cap, rm_err *err)
{
    const int W = meta->shard_world, me = meta->shard_rank, ep = meta->rdzv_epoch;
    if (W < 1 || W > MAX_WORLD || me < 0 || me >= W)
        return rm_errf(err, RM_EINVAL, "sharded checkpoint: rank %d of world %d", me, W);
    if (!units_ok(units, meta->nparams))
        return rm_errf(err, RM_EINVAL, "sharded checkpoint: units do not tile the %llu parameters",
                       (unsigned long long)meta->nparams);
    if (stage_bounds && (W > RM_SHARD_MAX_UNITS || !stages_ok(W, stage_bounds, W, units->n)))
        return rm_errf(err, RM_EINVAL,
                       "stage checkpoint: %d stages over %d layers (bounds must "
                       "rise from 0 to %d)",
                       W, units->n, units->n);
    char name[NAME_CAP], mname[NAME_CAP], mpath[4096 + NAME_CAP];
    if (rm_ckpt_shard_name(name, sizeof name, meta->step, ep, me, W) != 0 ||
        rm_ckpt_manifest_name(mname, sizeof mname, meta->step, ep, W) != 0)
        return rm_errf(err, RM_EINVAL, "sharded checkpoint: name too long");
    join(mpath, sizeof mpath, dir, mname);
    RM_CHECK(rm_ckpt_write_named(dir, name, meta, segs, nsegs, NULL, 0, err));
    if (path_out)
        snprintf(path_out, path_cap, "%s", mpath);
    double deadline = rm_mono() + (wait_s > 0 ? wait_s : 0);
    for (;;) {
        struct stat st;
        if (stat(mpath, &st) == 0)
            return RM_OK; /* another rank completed the set */
        char missing[256] = "";
        size_t ml = 0;
        int nmissing = 0;
        for (int r = 0; r < W; r++) {
            char sn[NAME_CAP], sp[4096 + NAME_CAP];
            rm_ckpt_shard_name(sn, sizeof sn, meta->step, ep, r, W);
            join(sp, sizeof sp, dir, sn);
            if (stat(sp, &st) != 0) {
                if (ml + 16 < sizeof missing)
                    ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%d", nmissing ? "," : "", r);
                nmissing++;
            }
        }
        if (nmissing == 0)
            break;
        if (rm_mono() >= deadline)
            return rm_errf(err, RM_ETIMEDOUT,
                           "sharded checkpoint step %lld: %d of %d shards missing "
                           "after %.0f s (ranks %s): the set is incomplete and will not be loaded",
                           (long long)meta->step, nmissing, W, wait_s, missing);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* every shard is there: the manifest records their checksums */
    manifest m = {.step = meta->step,
                  .epoch = ep,
                  .world = W,
                  .nparams = meta->nparams,
                  .nstate = meta->nstate,
                  .opt_type = meta->opt_type,
                  .nunits = units->n};
    for (int u = 0; u < units->n; u++) {
        m.uoff[u] = units->off[u];
        m.ulen[u] = units->len[u];
    }
    m.nstages = stage_bounds ? W : 0;
    for (int i = 0; stage_bounds && i <= W; i++)
        m.sbound[i] = stage_bounds[i];
    m.sh = calloc((size_t)W, sizeof *m.sh);
    if (!m.sh)
        return rm_errf(err, RM_ENOMEM, "sharded checkpoint: out of memory");
    int rc = RM_OK;
    for (int r = 0; r < W && rc == RM_OK; r++) {
        char sp[4096 + NAME_CAP];
        rm_ckpt_shard_name(m.sh[r].name, sizeof m.sh[r].name, meta->step, ep, r, W);
        join(sp, sizeof sp, dir, m.sh[r].name);
        rm_ckpt_meta hm;
        rc = rm_ckpt_read_header(sp, &hm, &m.sh[r].crc, err);
        if (rc == RM_OK && (hm.step != meta->step || hm.shard_rank != r || hm.shard_world != W ||
                            hm.rdzv_epoch != ep || hm.nparams != meta->nparams))
            rc = rm_errf(err, RM_EINVAL, "%s: shard header does not match its name", sp);
        m.sh[r].floats = hm.shard_floats;
    }
    if (rc == RM_OK && runs) { /* checked as a reader will check them */
        int which = -1;
        const char *why = NULL;
        m.nrun = nruns;
        if (nruns < 1 || nruns > RM_CKPT_MAX_RUNS || !(m.run = malloc((size_t)nruns * sizeof *m.run)))
            why = nruns < 1 || nruns > RM_CKPT_MAX_RUNS ? "no runs, or too many" : "out of memory";
        else {
            memcpy(m.run, runs, (size_t)nruns * sizeof *m.run);
            why = pieces_check(&m, &which);
        }
        if (why)
            rc = rm_errf(err, RM_EINVAL, "pieces checkpoint step %lld: %s (run %d)", (long long)meta->step,
                         why, which);
    }
    char *text = NULL;
    size_t tn = 0;
    if (rc == RM_OK)
        rc = manifest_encode(&m, &text, &tn, err);
    if (rc == RM_OK && tn > RM_CKPT_MANIFEST_MAX) /* a reader refuses it: never write a set it skips */
        rc = rm_errf(err, RM_ETOOBIG,
                     "checkpoint step %lld: manifest of %zu bytes, over the %d a reader takes",
                     (long long)meta->step, tn, RM_CKPT_MANIFEST_MAX);
    if (rc == RM_OK)
        rc = rm_ckpt_put_file(dir, mname, text, tn, err);
    free(text);
    if (rc == RM_ECONFLICT) { /* another rank wrote it at the same time: the set is complete */
        manifest_free(&m);
        memset(err, 0, sizeof *err);
        return RM_OK;
    }
    if (rc) {
        manifest_free(&m);
        return rc;
    }
    rm_info("sharded checkpoint complete manifest=%s shards=%d layout=%s", mpath, W,
            stage_bounds ? "stages"
            : runs       ? "pieces"
                         : "balanced");
    /* the JSON manifest last (manifest.h): the set is complete and loadable without it, so a
     * failure here is reported but never undoes the set, and pruning still runs */
    rc = model ? json_write(dir, mname, meta, units, model, &m, err) : RM_OK;
    manifest_free(&m);
    prune_sets(dir, meta, units, keep);
    return rc;
}

int rm_ckpt_shard_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_units *units,
                        const rm_ckpt_model *model, const rm_ckpt_seg *segs, int nsegs, int keep,
                        double wait_s, char *path_out, size_t path_cap, rm_err *err)
{
    return set_write(dir, meta, units, model, NULL, NULL, 0, segs, nsegs, keep, wait_s, path_out, path_cap,
                     err);
}

/* Row i of run x, its part [c0, c1) of the shard's vector, as a one-row run of shard `shard`
 * whose vector starts at lo. */
static rm_ckpt_run clip_row(const rm_ckpt_run *x, uint64_t S, uint64_t i, uint64_t c0, uint64_t c1,
                            uint64_t lo, int32_t shard)
{
    uint64_t ws = x->rows > 1 ? x->wstride : x->len;
    return (rm_ckpt_run){.shard = shard,
                         .rows = 1,
                         .local = c0 - lo,
                         .lstride = c1 - c0,
                         .whole = x->whole + i * ws + (c0 - (x->local + i * S)),
                         .wstride = c1 - c0,
                         .len = c1 - c0};
}

int rm_ckpt_run_clip(const rm_ckpt_run *in, uint64_t lo, uint64_t hi, int32_t shard, rm_ckpt_run out[3])
{
    uint64_t L = in->local, W = in->len, R = in->rows, S = R > 1 ? in->lstride : W;
    if (R < 1 || W < 1 || S < W)
        return -1;
    if (hi <= lo || hi <= L)
        return 0;
    /* the first row ending after lo, the last starting before hi */
    uint64_t i0 = lo < L + W ? 0 : (lo - L - W) / S + 1, i1 = (hi - L - 1) / S;
    if (i1 > R - 1)
        i1 = R - 1;
    if (i0 > i1)
        return 0;
    int n = 0;
    uint64_t s0 = L + i0 * S, s1 = L + i1 * S, a = i0, b = i1;
    if (s0 < lo || s0 + W > hi) { /* the first row in part */
        out[n++] = clip_row(in, S, i0, s0 < lo ? lo : s0, s0 + W > hi ? hi : s0 + W, lo, shard);
        if (i0 == i1)
            return n;
        a = i0 + 1;
    }
    bool tail = s1 + W > hi; /* the last row in part (it starts after lo: a row before it ends there) */
    if (tail)
        b = i1 - 1;
    if (a <= b) /* whole rows, strides kept */
        out[n++] = (rm_ckpt_run){.shard = shard,
                                 .rows = (uint32_t)(b - a + 1),
                                 .local = L + a * S - lo,
                                 .lstride = b > a ? S : W,
                                 .whole = in->whole + a * (R > 1 ? in->wstride : W),
                                 .wstride = b > a ? in->wstride : W,
                                 .len = W};
    if (tail)
        out[n++] = clip_row(in, S, i1, s1, hi, lo, shard);
    return n;
}

int rm_ckpt_pieces_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_units *units,
                         const rm_ckpt_model *model, const rm_ckpt_run *runs, int nruns,
                         const rm_ckpt_seg *segs, int nsegs, int keep, double wait_s, char *path_out,
                         size_t path_cap, rm_err *err)
{
    if (!runs)
        return rm_errf(err, RM_EINVAL, "pieces checkpoint: no runs");
    return set_write(dir, meta, units, model, NULL, runs, nruns, segs, nsegs, keep, wait_s, path_out,
                     path_cap, err);
}

int rm_ckpt_stage_write(const char *dir, const rm_ckpt_meta *meta, const rm_ckpt_units *units,
                        const rm_ckpt_model *model, const int *stage_bounds, const rm_ckpt_seg *segs,
                        int nsegs, int keep, double wait_s, char *path_out, size_t path_cap, rm_err *err)
{
    if (!stage_bounds)
        return rm_errf(err, RM_EINVAL, "stage checkpoint: no stage bounds");
    return set_write(dir, meta, units, model, stage_bounds, NULL, 0, segs, nsegs, keep, wait_s, path_out,
                     path_cap, err);
}

/* ---------------- read ---------------- */

size_t rm_ckpt_shard_dst_bytes(const rm_ckpt_units *units, int nstate, int new_world, int new_rank)
{
    size_t total = 0, mine = 0;
    for (int u = 0; u < units->n; u++) {
        total += units->len[u];
        mine += rm_shard_len(units->len[u], new_world, new_rank);
    }
    return (total + (size_t)nstate * mine) * sizeof(float);
}

/* Old rank r's shard in rm_unit_shard terms (its piece of each unit: off/len in the vector, soff in
 * the compact shard): the balanced layout, or the stage layout's whole units of stage r and no
 * piece of the others. Returns 0, or -1 on a bad layout. */
static int old_shard(const manifest *m, const rm_ckpt_units *units, int r, rm_unit_shard *out)
{
    if (!m->nstages)
        return rm_unit_shard_make(units->off, units->len, units->n, m->world, r, out);
    memset(out, 0, sizeof *out);
    if (r < 0 || r >= m->nstages)
        return -1;
    out->nunits = units->n;
    out->world = m->world;
    out->rank = r;
    for (int u = 0; u < units->n; u++) {
        bool mine = u >= m->sbound[r] && u < m->sbound[r + 1];
        out->unit_off[u] = out->off[u] = units->off[u];
        out->unit_len[u] = units->len[u];
        out->len[u] = mine ? units->len[u] : 0;
        out->soff[u] = out->total;
        out->total += out->len[u];
        if (units->len[u] > out->max_unit)
            out->max_unit = units->len[u];
    }
    return 0;
}

/* The re-sharding plan of a stage-layout set (the counterpart of rm_unit_shard_plan): new_rank's
 * piece of each unit comes whole from the one stage that holds the unit. Same contract. */
static int stage_plan(const manifest *m, const rm_ckpt_units *units, int new_world, int new_rank,
                      rm_shard_piece *out, int cap)
{
    int n = 0, st = 0;
    size_t dst = 0, base = 0; /* base: the unit's offset in its stage's compact shard */
    for (int u = 0; u < units->n; u++) {
        if (u == m->sbound[st + 1]) {
            st++;
            base = 0;
        }
        size_t off, len;
        rm_shard_range(units->len[u], new_world, new_rank, &off, &len);
        if (len > 0) {
            if (n < cap)
                out[n] = (rm_shard_piece){.src_rank = st, .src_off = base + off, .dst_off = dst, .len = len};
            n++;
            dst += len;
        }
        base += units->len[u];
    }
    return n;
}

/* Old shard r's header (and the payload checksum it records) against the manifest and the layout;
 * old gets the shard's pieces. */
static int shard_matches(const manifest *m, const rm_ckpt_units *units, int r, const char *sp,
                         const rm_ckpt_meta *hm, uint32_t crc, rm_unit_shard *old, rm_err *e)
{
    if (hm->shard_rank != r || hm->shard_world != m->world || hm->step != m->step ||
        hm->rdzv_epoch != m->epoch || crc != m->sh[r].crc || hm->shard_floats != m->sh[r].floats)
        return rm_errf(e, RM_EINVAL,
                       "%s: does not match the manifest (rank, world, step, epoch "
                       "or checksum)",
                       sp);
    if (m->run) /* a pieces layout: the runs were checked against the manifest's sizes */
        return RM_OK;
    if (old_shard(m, units, r, old) != 0 || old->total != hm->shard_floats)
        return rm_errf(e, RM_EINVAL, "%s: %llu floats, the layout says another count", sp,
                       (unsigned long long)hm->shard_floats);
    return RM_OK;
}

static void layer_span(const rm_ckpt_units *units, int u0, int u1, size_t *off, size_t *len);

/* Old shard r of a set, read whole into buf (cap bytes) and verified (its checksums, its header
 * against the manifest and the layout: old gets its pieces); meta gets shard 0's header. */
static int read_shard(const char *dir, const manifest *m, const rm_ckpt_units *units, int r,
                      const rm_ckpt_meta *expect, float *buf, size_t cap, rm_ckpt_meta *meta,
                      rm_unit_shard *old, rm_err *err)
{
    char sp[4096 + NAME_CAP];
    join(sp, sizeof sp, dir, m->sh[r].name);
    rm_ckpt_meta hm;
    uint32_t crc = 0;
    rm_err e = {0};
    int rc = rm_ckpt_read(sp, expect, &hm, buf, cap, &e);
    if (rc == RM_OK)
        rc = rm_ckpt_read_header(sp, &hm, &crc, &e);
    if (rc == RM_OK)
        rc = shard_matches(m, units, r, sp, &hm, crc, old, &e);
    if (rc)
        return rm_errf(err, rc, "shard %d of %d (%s) unusable: %s", r, m->world, m->sh[r].name, e.msg);
    if (r == 0)
        *meta = hm;
    return RM_OK;
}

/* A pieces set's whole payload: every shard read and verified, its runs copied into whole
 * ((1 + nstate) x nparams floats: the parameters, then each optimizer buffer). */
static int pieces_whole(const char *dir, const manifest *m, const rm_ckpt_meta *expect,
                        const rm_ckpt_units *units, float *whole, rm_ckpt_meta *meta, rm_err *err)
{
    const int W = m->world, K = m->nstate;
    uint64_t longest = 1, n = m->nparams;
    for (int r = 0; r < W; r++)
        longest = m->sh[r].floats > longest ? m->sh[r].floats : longest;
    size_t cap = (size_t)(1 + K) * (size_t)longest * sizeof(float);
    float *buf = malloc(cap);
    if (!buf)
        return rm_errf(err, RM_ENOMEM, "pieces checkpoint: out of memory (%zu bytes)", cap);
    int rc = RM_OK;
    for (int r = 0; r < W && rc == RM_OK; r++) {
        rm_unit_shard old;
        if ((rc = read_shard(dir, m, units, r, expect, buf, cap, meta, &old, err)))
            break;
        uint64_t fl = m->sh[r].floats;
        for (int i = 0; i < m->nrun; i++) {
            const rm_ckpt_run *x = &m->run[i];
            if (x->shard != r)
                continue;
            for (int b = 0; b <= K; b++)
                for (uint64_t row = 0; row < x->rows; row++)
                    memcpy(whole + (uint64_t)b * n + x->whole + row * x->wstride,
                           buf + (uint64_t)b * fl + x->local + row * x->lstride, x->len * sizeof(float));
        }
    }
    free(buf);
    return rc;
}

/* A pieces set, whole, then cut: new_rank's layout of load_set (u1 = 0), or layers [u0, u1) as
 * load_set_layers leaves them. */
static int load_pieces(const char *dir, const manifest *m, const rm_ckpt_meta *expect,
                       const rm_ckpt_units *units, int new_world, int new_rank, int u0, int u1, float *dst,
                       rm_ckpt_meta *meta, rm_err *err)
{
    const int K = m->nstate;
    uint64_t n = m->nparams;
    float *whole = malloc((size_t)(1 + K) * (size_t)n * sizeof(float));
    if (!whole)
        return rm_errf(err, RM_ENOMEM, "pieces checkpoint: out of memory for the whole payload");
    int rc = pieces_whole(dir, m, expect, units, whole, meta, err);
    if (rc == RM_OK && u1 > 0) {
        size_t poff, plen;
        layer_span(units, u0, u1, &poff, &plen);
        for (int b = 0; b <= K; b++)
            memcpy(dst + (size_t)b * plen, whole + (size_t)b * n + poff, plen * sizeof(float));
    } else if (rc == RM_OK) {
        memcpy(dst, whole, n * sizeof(float)); /* every parameter, then new_rank's pieces of each buffer */
        size_t at = n;
        for (int b = 1; b <= K; b++)
            for (int u = 0; u < units->n; u++) {
                size_t off, len;
                rm_shard_range(units->len[u], new_world, new_rank, &off, &len);
                memcpy(dst + at, whole + (size_t)b * n + units->off[u] + off, len * sizeof(float));
                at += len;
            }
    }
    free(whole);
    return rc;
}

/* Load one set: every shard verified, the planned pieces copied into dst. */
static int load_set(const char *dir, const manifest *m, const rm_ckpt_meta *expect,
                    const rm_ckpt_units *units, int new_world, int new_rank, float *dst, rm_ckpt_meta *meta,
                    rm_err *err)
{
    const int W = m->world, K = m->nstate;
    if (m->run)
        return load_pieces(dir, m, expect, units, new_world, new_rank, 0, 0, dst, meta, err);
    int np = m->nstages ? stage_plan(m, units, new_world, new_rank, NULL, 0)
                        : rm_unit_shard_plan(units->len, units->n, W, new_world, new_rank, NULL, 0);
    if (np < 0)
        return rm_errf(err, RM_EINVAL, "re-sharding plan: bad layout");
    rm_shard_piece *plan = calloc((size_t)np + 1, sizeof *plan);
    size_t longest = 0; /* the longest old shard (balanced: rank 0's) */
    for (int r = 0; r < W && plan; r++) {
        rm_unit_shard o;
        if (old_shard(m, units, r, &o) != 0) {
            free(plan);
            return rm_errf(err, RM_EINVAL, "re-sharding plan: bad layout");
        }
        longest = o.total > longest ? o.total : longest;
        if (!m->nstages)
            break;
    }
    if (!plan)
        return rm_errf(err, RM_ENOMEM, "re-sharding plan: out of memory");
    if (m->nstages)
        stage_plan(m, units, new_world, new_rank, plan, np);
    else
        rm_unit_shard_plan(units->len, units->n, W, new_world, new_rank, plan, np);
    size_t new_total = 0;
    for (int u = 0; u < units->n; u++)
        new_total += rm_shard_len(units->len[u], new_world, new_rank);
    size_t cap = (size_t)(1 + K) * (longest ? longest : 1) * sizeof(float);
    float *buf = malloc(cap);
    int rc = buf ? RM_OK : rm_errf(err, RM_ENOMEM, "sharded checkpoint: out of memory");
    for (int r = 0; r < W && rc == RM_OK; r++) {
        rm_unit_shard old;
        if ((rc = read_shard(dir, m, units, r, expect, buf, cap, meta, &old, err)))
            break;
        for (int u = 0; u < units->n; u++) /* this rank's pieces of the parameters */
            memcpy(dst + old.off[u], buf + old.soff[u], old.len[u] * sizeof(float));
        for (int i = 0; i < np; i++) { /* and the planned pieces of the optimizer state */
            if (plan[i].src_rank != r)
                continue;
            for (int k = 0; k < K; k++)
                memcpy(dst + m->nparams + (size_t)k * new_total + plan[i].dst_off,
                       buf + (size_t)(1 + k) * old.total + plan[i].src_off, plan[i].len * sizeof(float));
        }
    }
    free(buf);
    free(plan);
    return rc;
}

/* The stage range [u0, u1) of the units: its first parameter and its length. */
static void layer_span(const rm_ckpt_units *units, int u0, int u1, size_t *off, size_t *len)
{
    *off = units->off[u0];
    *len = units->off[u1 - 1] + units->len[u1 - 1] - *off;
}

size_t rm_ckpt_layers_bytes(const rm_ckpt_units *units, int nstate, int u0, int u1)
{
    if (!units || u0 < 0 || u1 <= u0 || u1 > units->n)
        return 0;
    size_t off, len;
    layer_span(units, u0, u1, &off, &len);
    return (size_t)(1 + nstate) * len * sizeof(float);
}

/* Load layers [u0, u1) of one set: every shard read and verified in full (streamed), only the
 * pieces of the range kept (ckpt_shard.h rm_ckpt_set_load_layers). */
static int load_set_layers(const char *dir, const manifest *m, const rm_ckpt_meta *expect,
                           const rm_ckpt_units *units, int u0, int u1, float *dst, size_t cap,
                           rm_ckpt_meta *meta, rm_err *err)
{
    const int K = m->nstate;
    if (m->run) /* the whole payload once: a pieces set is not cut by layers */
        return load_pieces(dir, m, expect, units, 1, 0, u0, u1, dst, meta, err);
    size_t poff, plen;
    layer_span(units, u0, u1, &poff, &plen);
    rm_ckpt_range rg[(1 + RM_CKPT_MAX_STATE) * RM_SHARD_MAX_UNITS];
    for (int r = 0; r < m->world; r++) {
        char sp[4096 + NAME_CAP];
        join(sp, sizeof sp, dir, m->sh[r].name);
        rm_unit_shard old;
        if (old_shard(m, units, r, &old) != 0)
            return rm_errf(err, RM_EINVAL, "re-sharding plan: bad layout");
        int nr = 0; /* old shard r's pieces of the range: each unit's, of every buffer */
        for (int u = u0; u < u1; u++)
            for (int b = 0; b <= K && old.len[u] > 0; b++)
                rg[nr++] = (rm_ckpt_range){.src = ((uint64_t)b * old.total + old.soff[u]) * sizeof(float),
                                           .len = (uint64_t)old.len[u] * sizeof(float),
                                           .dst = ((size_t)b * plen + old.off[u] - poff) * sizeof(float)};
        rm_ckpt_meta hm;
        uint32_t crc = 0;
        rm_err e = {0};
        /* every shard, also one with no piece of the range (nr 0): all stages choose one set */
        int rc = rm_ckpt_read_ranges(sp, expect, rg, nr, dst, cap, &hm, &crc, &e);
        if (rc == RM_OK)
            rc = shard_matches(m, units, r, sp, &hm, crc, &old, &e);
        if (rc)
            return rm_errf(err, rc, "shard %d of %d (%s) unusable: %s", r, m->world, m->sh[r].name, e.msg);
        if (r == 0)
            *meta = hm;
    }
    return RM_OK;
}

/* What a load keeps: new_rank's re-sharded payload, or (u1 > 0) layers [u0, u1) only. */
typedef struct load_want {
    int new_world, new_rank;
    int u0, u1;
} load_want;

static int load_newest(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_units *units,
                       const load_want *w, int64_t min_step, void *dst, size_t cap, rm_ckpt_meta *meta,
                       char *path_out, size_t path_cap, int *skipped, rm_err *err)
{
    if (skipped)
        *skipped = 0;
    rm_ckpt_entry *v = NULL;
    int n = 0, bad = 0;
    char first[200] = ""; /* the newest set's reason, for the caller's message */
    int rc = list_manifests(dir, &v, &n);
    if (rc == RM_ENOTFOUND)
        return rm_errf(err, RM_ENOTFOUND, "no checkpoint dir %s", dir);
    if (rc)
        return rm_errf(err, rc, "checkpoint: cannot list %s", dir);
    rc = RM_ENOTFOUND;
    for (int i = 0; i < n; i++) {
        if (v[i].key[0] <= min_step)
            break;
        char p[4096 + NAME_CAP];
        join(p, sizeof p, dir, v[i].name);
        manifest m;
        rm_err e = {0};
        int lrc = manifest_read(p, &m, &e);
        if (lrc == RM_OK && (m.step != v[i].key[0] || m.epoch != v[i].key[1] || m.world != v[i].aux)) {
            lrc = rm_errf(&e, RM_EINVAL, "%s: contents do not match its name", p);
            manifest_free(&m);
        } else if (lrc == RM_OK &&
                   !same_model(&m, expect->nparams, expect->nstate, expect->opt_type, units)) {
            lrc = rm_errf(&e, RM_EINVAL, "%s: another model or optimizer", p);
            manifest_free(&m);
        }
        if (lrc == RM_OK) {
            lrc = w->u1 > 0 ? load_set_layers(dir, &m, expect, units, w->u0, w->u1, dst, cap, meta, &e)
                            : load_set(dir, &m, expect, units, w->new_world, w->new_rank, dst, meta, &e);
            manifest_free(&m);
        }
        if (lrc == RM_OK) {
            if (path_out)
                snprintf(path_out, path_cap, "%s", p);
            rc = RM_OK;
            break;
        }
        if (!bad++)
            rm_sfmt(first, sizeof first, "%s", e.msg);
        rm_warn("sharded checkpoint skipped (invalid) step=%lld manifest=%s reason=\"%s\"",
                (long long)v[i].key[0], p, e.msg);
    }
    free(v);
    if (skipped)
        *skipped = bad;
    if (rc)
        return rm_errf(err, RM_ENOTFOUND,
                       "no valid sharded checkpoint newer than step %lld in %s "
                       "(%d invalid skipped%s%s)",
                       (long long)min_step, dir, bad, bad ? "; newest: " : "", first);
    if (bad) /* an older set was used: say why the newer ones were not (err is informational) */
        rm_sfmt(err->msg, sizeof err->msg, "%s", first);
    return RM_OK;
}

int rm_ckpt_shard_load_newest(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_units *units,
                              int new_world, int new_rank, int64_t min_step, void *dst, size_t cap,
                              rm_ckpt_meta *meta, char *path_out, size_t path_cap, int *skipped, rm_err *err)
{
    if (skipped)
        *skipped = 0;
    if (!units_ok(units, expect->nparams) || new_world < 1 || new_rank < 0 || new_rank >= new_world)
        return rm_errf(err, RM_EINVAL, "sharded checkpoint: bad layout or rank");
    if (rm_ckpt_shard_dst_bytes(units, expect->nstate, new_world, new_rank) > cap)
        return rm_errf(err, RM_EINVAL, "sharded checkpoint: destination too small");
    load_want w = {.new_world = new_world, .new_rank = new_rank};
    return load_newest(dir, expect, units, &w, min_step, dst, cap, meta, path_out, path_cap, skipped, err);
}

int rm_ckpt_set_load_layers(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_units *units, int u0,
                            int u1, int64_t min_step, void *dst, size_t cap, rm_ckpt_meta *meta,
                            char *path_out, size_t path_cap, int *skipped, rm_err *err)
{
    if (skipped)
        *skipped = 0;
    if (!units_ok(units, expect->nparams) || u0 < 0 || u1 <= u0 || u1 > units->n)
        return rm_errf(err, RM_EINVAL, "stage checkpoint: layers [%d, %d) of %d", u0, u1,
                       units ? units->n : 0);
    if (rm_ckpt_layers_bytes(units, expect->nstate, u0, u1) > cap)
        return rm_errf(err, RM_EINVAL, "stage checkpoint: destination too small");
    load_want w = {.u0 = u0, .u1 = u1};
    return load_newest(dir, expect, units, &w, min_step, dst, cap, meta, path_out, path_cap, skipped, err);
}

int rm_ckpt_whole_load_layers(const char *dir, const rm_ckpt_meta *expect, const rm_ckpt_units *units, int u0,
                              int u1, void *dst, size_t cap, rm_ckpt_meta *meta, char *path_out,
                              size_t path_cap, int *skipped, rm_err *err)
{
    if (skipped)
        *skipped = 0;
    if (!units_ok(units, expect->nparams) || u0 < 0 || u1 <= u0 || u1 > units->n || expect->nstate < 0 ||
        expect->nstate > RM_CKPT_MAX_STATE)
        return rm_errf(err, RM_EINVAL, "checkpoint: layers [%d, %d) of %d", u0, u1, units ? units->n : 0);
    if (rm_ckpt_layers_bytes(units, expect->nstate, u0, u1) > cap)
        return rm_errf(err, RM_EINVAL, "checkpoint: destination too small");
    size_t poff, plen;
    layer_span(units, u0, u1, &poff, &plen);
    rm_ckpt_range rg[1 + RM_CKPT_MAX_STATE];
    for (int b = 0; b <= expect->nstate; b++) /* the range of the parameters, then of each buffer */
        rg[b] = (rm_ckpt_range){.src = ((uint64_t)b * expect->nparams + poff) * sizeof(float),
                                .len = (uint64_t)plen * sizeof(float),
                                .dst = (size_t)b * plen * sizeof(float)};
    return rm_ckpt_load_newest_ranges(dir, expect, rg, 1 + expect->nstate, dst, cap, meta, path_out, path_cap,
                                      skipped, err);
}
