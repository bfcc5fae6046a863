/* ps_ckpt.c — the parameter servers' checkpoint folders (see ps_ckpt.h). */
#include "operator/ps_ckpt.h"

#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/rm.h"

#define PS_CKPT_MAX_LIST 1024 /* shard checkpoints looked at per folder (keep is at most 1000) */

int rm_ps_ckpt_clear(const char *dir)
{
    static const char *const pats[] = {
        "ps-*/ckpt-*.rmck",    "ps-*/.tmp-ckpt-*",        "ps-*/index-*.json", "ps-*/.fault-*-fired",
        "ps-*/lbfgs-vectors*", "ps-*/lbfgs-coordinator*", "ps-*/.fault-lost-*"};
    return rm_fs_unlink_globs(dir, pats, RM_ARRAY_LEN(pats));
}

bool rm_ps_ckpt_any(const char *dir)
{
    char pat[PATH_MAX];
    rm_sfmt(pat, sizeof pat, "%s/ps-*/ckpt-*.rmck", dir);
    glob_t g;
    bool yes = glob(pat, GLOB_NOSORT, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return yes;
}

/* The version in a checkpoint's path (…/ckpt-<version>[-<n>].rmck); -1 if it has none. */
static int64_t path_version(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    int64_t v = -1;
    return sscanf(b, "ckpt-%" SCNd64, &v) == 1 && v >= 0 ? v : -1;
}

/* Calls fn for each shard checkpoint of dir/ps-<i>. */
static void each_ckpt(const char *dir, int i, void (*fn)(const char *path, int64_t v, void *ud), void *ud)
{
    char pat[PATH_MAX];
    rm_sfmt(pat, sizeof pat, "%s/ps-%d/ckpt-*.rmck", dir, i);
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0)
        for (size_t k = 0; k < g.gl_pathc && k < PS_CKPT_MAX_LIST; k++) {
            int64_t v = path_version(g.gl_pathv[k]);
            if (v >= 0)
                fn(g.gl_pathv[k], v, ud);
        }
    globfree(&g);
}

typedef struct {
    int64_t v[PS_CKPT_MAX_LIST];
    int n;
    int64_t newest;
} vlist;

static void collect(const char *path, int64_t v, void *ud)
{
    (void)path;
    vlist *l = ud;
    if (l->n < PS_CKPT_MAX_LIST)
        l->v[l->n++] = v;
    if (v > l->newest)
        l->newest = v;
}

static bool has(const vlist *l, int64_t v)
{
    for (int k = 0; k < l->n; k++)
        if (l->v[k] == v)
            return true;
    return false;
}

int rm_ps_ckpt_common(const char *dir, int S, int64_t *version, char *msg, size_t cap)
{
    vlist L[2]; /* the candidates (shard 0's) and the shard being compared (16 KiB) */
    msg[0] = 0;
    L[0] = (vlist){.newest = -1};
    each_ckpt(dir, 0, collect, &L[0]);
    int64_t best = -1;
    bool any = L[0].n > 0;
    for (int k = 0; k < L[0].n; k++) {
        int64_t v = L[0].v[k];
        if (v <= best)
            continue;
        bool all = true;
        for (int i = 1; i < S && all; i++) {
            L[1] = (vlist){.newest = -1};
            each_ckpt(dir, i, collect, &L[1]);
            all = has(&L[1], v);
        }
        if (all)
            best = v;
    }
    size_t used = 0;
    for (int i = 0; i < S; i++) {
        L[1] = (vlist){.newest = -1};
        each_ckpt(dir, i, collect, &L[1]);
        any = any || L[1].n > 0;
        if (used < cap) {
            char nv[32];
            rm_sfmt(nv, sizeof nv, "%" PRId64, L[1].newest);
            int w = snprintf(msg + used, cap - used, "%s%s/ps-%d: newest %s", i ? ", " : "", dir, i,
                             L[1].n ? nv : "none");
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (best >= 0) {
        *version = best;
        return 1;
    }
    return any ? -1 : 0;
}

typedef struct {
    int64_t above;
    int n;
} rb_ctx;

static void remove_newer(const char *path, int64_t v, void *ud)
{
    rb_ctx *c = ud;
    if (v > c->above && unlink(path) == 0)
        c->n++;
}

int rm_ps_ckpt_rollback(const char *dir, int S, int64_t version)
{
    rb_ctx c = {.above = version, .n = 0};
    for (int i = 0; i < S; i++)
        each_ckpt(dir, i, remove_newer, &c);
    return c.n;
}
