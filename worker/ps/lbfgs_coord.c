/* lbfgs_coord.c — Sandblaster L-BFGS shards and coordinator (see lbfgs_coord.h). The algorithm's
 * rules are worker/ps/lbfgs_core.h's pure functions; this file executes them over sockets. */
#include "worker/ps/lbfgs_coord.h"

#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/ratelimit.h"
#include "worker/ps/lbfgs_core.h"
#include "worker/ps/ps_registry.h"

/* ---- shard ----------------------------------------------------------------------------------- */

struct rm_lbfgs_shard {
    size_t len;
    int nslots, P;
    float *params;           /* borrowed: slot RM_LV_X */
    float *vecs;             /* owned: slots 1..nslots-1, len floats each */
    int64_t pass;            /* pass id whose pushes are accepted */
    int64_t incarnation;     /* this process' shard: a coordinator that sees it change knows the
                               shard was replaced and its vectors (not its X) are gone */
    uint8_t *seen;           /* P bits: portions already added to G in this pass */
    int64_t commit;          /* the accepted point the vectors hold (staged/restored); -1: none */
    float *stage;            /* owned: the vectors (slots 1..) as of the last COMMIT */
    int64_t staged, written; /* commits staged / written to the vectors file */
    char path[4200];         /* <checkpoint dir>/lbfgs-vectors; "" = none */
};

/* The vectors file: a header, then (nslots - 1) x len floats; FNV-1a 64 of the floats. */
typedef struct {
    uint32_t magic, nslots;
    uint64_t len;
    int64_t commit;
    uint64_t sum;
} vec_hdr;
#define VEC_MAGIC 0x524d4c42u /* "RMLB" */

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The shard's vectors from its file when it holds them for `commit`-able state; false otherwise. */
static bool vec_load(rm_lbfgs_shard *sh)
{
    FILE *f = sh->path[0] ? fopen(sh->path, "rb") : NULL;
    if (!f)
        return false;
    vec_hdr h;
    size_t n = (size_t)(sh->nslots - 1) * sh->len;
    bool ok = fread(&h, sizeof h, 1, f) == 1 && h.magic == VEC_MAGIC && h.nslots == (uint32_t)sh->nslots &&
              h.len == sh->len && fread(sh->stage, sizeof(float), n, f) == n &&
              fnv(sh->stage, n * sizeof(float)) == h.sum;
    fclose(f);
    if (!ok) {
        rm_warn("lbfgs vectors file unusable (another layout, truncated or corrupt) path=%s", sh->path);
        return false;
    }
    memcpy(sh->vecs, sh->stage, n * sizeof(float));
    sh->commit = sh->staged = sh->written = h.commit;
    rm_info("lbfgs vectors restored path=%s commit=%lld", sh->path, (long long)h.commit);
    return true;
}

/* Write the staged vectors (atomic: tmp + fsync + rename); under the server's mutex. */
static void vec_write(rm_lbfgs_shard *sh)
{
    if (!sh->path[0] || sh->staged == sh->written)
        return;
    size_t n = (size_t)(sh->nslots - 1) * sh->len;
    vec_hdr h = {VEC_MAGIC, (uint32_t)sh->nslots, sh->len, sh->staged, fnv(sh->stage, n * sizeof(float))};
    char tmp[4210];
    snprintf(tmp, sizeof tmp, "%s.tmp", sh->path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(&h, sizeof h, 1, f) == 1 && fwrite(sh->stage, sizeof(float), n, f) == n &&
              fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f)
        ok = fclose(f) == 0 && ok;
    ok = ok && rename(tmp, sh->path) == 0;
    if (ok)
        sh->written = sh->staged;
    int64_t commit = sh->staged;
    if (!ok)
        rm_warn("lbfgs vectors checkpoint failed path=%s commit=%lld", sh->path, (long long)commit);
}

static float *slot(rm_lbfgs_shard *sh, int i)
{
    return i == RM_LV_X ? sh->params : sh->vecs + (size_t)(i - 1) * sh->len;
}

int rm_lbfgs_shard_new(float *params, size_t len, int history, int portions, const char *dir,
                       rm_lbfgs_shard **out, rm_err *err)
{
    *out = NULL;
    rm_lbfgs_shard *sh = calloc(1, sizeof *sh);
    if (!sh)
        return rm_errf(err, RM_ENOMEM, "lbfgs shard: out of memory");
    sh->len = len;
    sh->nslots = RM_LBFGS_SLOTS(history);
    sh->P = portions;
    sh->params = params;
    sh->pass = -1;
    sh->vecs = calloc((size_t)(sh->nslots - 1) * (len ? len : 1), sizeof(float));
    sh->seen = calloc((size_t)portions / 8 + 1, 1);
    sh->stage = calloc((size_t)(sh->nslots - 1) * (len ? len : 1), sizeof(float));
    sh->commit = sh->staged = sh->written = -1;
    if (dir && dir[0])
        snprintf(sh->path, sizeof sh->path, "%s/lbfgs-vectors", dir);
    if (!sh->vecs || !sh->seen || !sh->stage) {
        int nslots = sh->nslots;
        rm_lbfgs_shard_free(sh);
        return rm_errf(err, RM_ENOMEM, "lbfgs shard: out of memory for %d vectors of %zu floats", nslots,
                       len);
    }
    /* the vectors of the last accepted point, or X0 = X: a line search that copies X0 back into
     * X on a shard that was just replaced keeps its restored X instead of zeroing it */
    if (!vec_load(sh))
        memcpy(slot(sh, RM_LV_X0), params, len * sizeof(float));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    sh->incarnation = ((int64_t)ts.tv_sec << 24 ^ (int64_t)ts.tv_nsec ^ (int64_t)getpid()) & INT64_MAX;
    *out = sh;
    return RM_OK;
}

void rm_lbfgs_shard_free(rm_lbfgs_shard *sh)
{
    if (!sh)
        return;
    free(sh->vecs);
    free(sh->seen);
    free(sh->stage);
    free(sh);
}

void rm_lbfgs_shard_vec(rm_lbfgs_shard *sh, const rm_ps_req *q, rm_ps_rep *r)
{
    int code = (int)(q->step & 0xff), a = (int)((q->step >> 8) & 0xffff), b = (int)((q->step >> 24) & 0xffff);
    double alpha = rm_lb_bitsd(q->from_version);
    size_t n = sh->len;
    r->version = sh->incarnation;
    if (code == RM_LBV_COMMIT) { /* an accepted point (X0 = X, G0 = G): its vectors, durable */
        sh->commit = sh->staged = (int64_t)alpha;
        memcpy(sh->stage, sh->vecs, (size_t)(sh->nslots - 1) * n * sizeof(float));
        vec_write(sh); /* before the answer: the coordinator's commit is on disk here */
        return;
    }
    if (code == RM_LBV_STATUS) { /* the accepted point this shard's vectors hold */
        r->a = sh->commit;
        return;
    }
    if (code == RM_LBV_BEGIN) { /* a new pass: G = 0, no portion seen, pushes of pass alpha */
        memset(slot(sh, RM_LV_G), 0, n * sizeof(float));
        memset(sh->seen, 0, (size_t)sh->P / 8 + 1);
        sh->pass = (int64_t)alpha;
        r->b = 1; /* the server bumps its version: X is checkpointed once per pass */
        return;
    }
    if (a < 0 || a >= sh->nslots || b < 0 || b >= sh->nslots) {
        r->status = RM_PS_ST_BAD;
        return;
    }
    float *x = slot(sh, a), *y = slot(sh, b);
    switch (code) {
    case RM_LBV_COPY:
        memcpy(x, y, n * sizeof(float));
        break;        /* a = b */
    case RM_LBV_AXPY: /* a += alpha b */
        for (size_t i = 0; i < n; i++)
            x[i] += (float)(alpha * y[i]);
        break;
    case RM_LBV_SCALE: /* a *= alpha */
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(alpha * x[i]);
        break;
    case RM_LBV_ZERO:
        memset(x, 0, n * sizeof(float));
        break;
    case RM_LBV_DOT: { /* partial a . b */
        double d = 0;
        for (size_t i = 0; i < n; i++)
            d += (double)x[i] * (double)y[i];
        r->a = rm_lb_dbits(d);
        break;
    }
    default:
        r->status = RM_PS_ST_BAD;
    }
}

void rm_lbfgs_shard_push(rm_lbfgs_shard *sh, const rm_ps_req *q, const float *g, rm_ps_rep *r)
{
    uint32_t p = q->world;
    if (q->step != sh->pass || p >= (uint32_t)sh->P || (sh->seen[p / 8] & (1u << (p % 8)))) {
        r->status = RM_PS_ST_DROPPED; /* first answer wins; another pass' push is stale */
        return;
    }
    sh->seen[p / 8] |= (uint8_t)(1u << (p % 8));
    float *G = slot(sh, RM_LV_G);
    for (size_t i = 0; i < sh->len; i++)
        G[i] += g[i];
}

/* ---- coordinator ----------------------------------------------------------------------------- */

int64_t rm_lbfgs_portion_size(int64_t train_samples, int portions, int batch)
{
    if (portions < 1 || batch < 1)
        return 0;
    return train_samples / ((int64_t)portions * batch) * batch;
}

struct rm_lbfgs_coord {
    rm_lbfgs_coord_cfg cfg;
    rm_training_spec t;
    rm_ps_registry reg; /* where the shards are (ps_registry.h); the thread's own */
    rm_ps_conn conn[RM_PS_MAX_SERVERS];
    pthread_t th;
    bool started;
    atomic_int stop;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* monotonic; a pass opened, a portion came in, done */
    rm_portions ps;
    bool open;             /* a pass is being handed out */
    bool done;             /* the budget is spent */
    int64_t pass_id;       /* the open (or last) pass' id */
    double loss_sum;       /* of the open pass */
    double portion_mean_s; /* EWMA of claim-to-report times */
    double *issued_at;     /* P: when each portion was last issued */
    int64_t portion_size, full;

    int64_t inc[RM_PS_MAX_SERVERS]; /* each shard's incarnation as last seen (0: not yet) */
    bool replaced;                  /* a shard was replaced since the last check */
    bool static_split;              /* RINGMASTER_LBFGS_STATIC_SPLIT=1: the benchmark's baseline */
    int64_t passes_done;            /* restored from / saved to the state file */
    int64_t commit;                 /* accepted points committed (the shards' vectors' commit) */
    double f_commit;                /* the loss at the last commit */
    rm_lbfgs_hist hist;             /* the history at the last commit */

    rm_series *m_passes, *m_trials, *m_gnorm, *m_loss, *m_reissued;
    rm_series **m_portions; /* per worker */
};

static void cwait(rm_lbfgs_coord *c, double dt)
{
    struct timespec ts = rm_mono_ts_in(dt);
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

static void set_size(rm_lbfgs_coord *c, int64_t n)
{
    c->portion_size = rm_lbfgs_portion_size(n, c->t.optimizer.portions, c->t.batch_size_per_worker);
    c->full = c->portion_size * c->t.optimizer.portions;
}

/* One LB_VEC (or any op) to every shard, pipelined; *sum gets the sum of the replies' partials
 * (in shard order). A shard that fails is reconnected and asked again until the retry deadline. */
static int vec_all(rm_lbfgs_coord *c, int code, int a, int b, double alpha, double *sum, rm_err *err)
{
    rm_ps_req q = {.magic = RM_PS_MAGIC,
                   .op = RM_PS_OP_LB_VEC,
                   .worker = RM_LBFGS_COORD_ID,
                   .step = rm_lbv_code(code, a, b),
                   .from_version = rm_lb_dbits(alpha)};
    double deadline = rm_mono() + c->cfg.timeout_s * 6;
    double total = 0;
    int S = c->cfg.nservers;
    bool sent[RM_PS_MAX_SERVERS] = {false};
    for (int i = 0; i < S; i++) {
        rm_err e = {0};
        if (rm_ps_registry_connect(&c->reg, &c->conn[i], i, RM_LBFGS_COORD_ID, c->cfg.token, 0, &e) != RM_OK)
            continue; /* one try here; the loop below retries it */
        rm_ps_req qi = q;
        sent[i] = rm_ps_send(&c->conn[i], &qi, NULL, rm_mono() + c->cfg.timeout_s, &e) == RM_OK;
    }
    for (int i = 0; i < S; i++) {
        rm_ps_rep r;
        rm_err e = {0};
        bool ok = sent[i] && rm_ps_recv(&c->conn[i], &r, NULL, 0, rm_mono() + c->cfg.timeout_s, &e) == RM_OK;
        while (!ok) {
            rm_ps_conn_close(&c->conn[i]);
            if (atomic_load(&c->stop))
                return rm_errf(err, RM_ECANCELED, "lbfgs coordinator: stopped");
            if (rm_mono() >= deadline)
                return rm_errf(err, RM_ETIMEDOUT, "lbfgs coordinator: server %d: no answer (%s)", i, e.msg);
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
            rm_ps_req qi = q;
            ok = rm_ps_registry_connect(&c->reg, &c->conn[i], i, RM_LBFGS_COORD_ID, c->cfg.token, deadline,
                                        &e) == RM_OK &&
                 rm_ps_send(&c->conn[i], &qi, NULL, rm_mono() + c->cfg.timeout_s, &e) == RM_OK &&
                 rm_ps_recv(&c->conn[i], &r, NULL, 0, rm_mono() + c->cfg.timeout_s, &e) == RM_OK;
        }
        if (r.status != RM_PS_ST_OK)
            return rm_errf(err, RM_EPROTO, "lbfgs coordinator: server %d refused op %d", i, code);
        if (c->inc[i] && c->inc[i] != r.version) {
            rm_warn("lbfgs: server %d was replaced (its L-BFGS vectors are gone); the iteration "
                    "restarts from the current parameters with an empty history",
                    i);
            c->replaced = true;
        }
        c->inc[i] = r.version;
        total += rm_lb_bitsd(r.a);
    }
    if (sum)
        *sum = total;
    return RM_OK;
}

static int v_dot(void *ctx, int a, int b, double *out, rm_err *err)
{
    return vec_all(ctx, RM_LBV_DOT, a, b, 0, out, err);
}
static int v_axpy(void *ctx, int y, double alpha, int x, rm_err *err)
{
    return vec_all(ctx, RM_LBV_AXPY, y, x, alpha, NULL, err);
}
static int v_scale(void *ctx, int x, double a, rm_err *err)
{
    return vec_all(ctx, RM_LBV_SCALE, x, x, a, NULL, err);
}
static int v_copy(void *ctx, int dst, int src, rm_err *err)
{
    return vec_all(ctx, RM_LBV_COPY, dst, src, 0, NULL, err);
}

/* The coordinator's state file (in server 0's checkpoint folder): passes done, the last commit,
 * its loss and history, so a replaced server 0 resumes the budget (and, when every shard's vectors
 * are at that commit, the iteration). Written atomically (tmp + rename), checksummed. */
typedef struct {
    uint32_t magic, pad;
    int64_t passes, commit;
    double f;
    rm_lbfgs_hist hist;
    uint64_t sum;
} coord_state;
#define STATE_MAGIC 0x524d4c43u /* "RMLC" */

static void state_save(rm_lbfgs_coord *c)
{
    if (!c->cfg.state_dir || !c->cfg.state_dir[0])
        return;
    char path[4200], tmp[4210];
    snprintf(path, sizeof path, "%s/lbfgs-coordinator", c->cfg.state_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    coord_state st;
    memset(&st, 0, sizeof st);
    st.magic = STATE_MAGIC;
    st.passes = c->passes_done;
    st.commit = c->commit;
    st.f = c->f_commit;
    st.hist = c->hist;
    st.sum = fnv(&st, offsetof(coord_state, sum));
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(&st, sizeof st, 1, f) == 1 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f)
        ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0)
        rm_warn("lbfgs: cannot write the coordinator state path=%s", path);
}

static void state_load(rm_lbfgs_coord *c)
{
    if (!c->cfg.state_dir || !c->cfg.state_dir[0])
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/lbfgs-coordinator", c->cfg.state_dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    coord_state st;
    bool ok = fread(&st, sizeof st, 1, f) == 1 && st.magic == STATE_MAGIC &&
              st.sum == fnv(&st, offsetof(coord_state, sum)) && st.passes >= 0 &&
              st.hist.m == c->t.optimizer.history && st.hist.count >= 0 && st.hist.count <= st.hist.m;
    fclose(f);
    if (!ok) {
        rm_warn("lbfgs coordinator state unusable (another history size or corrupt) path=%s", path);
        return;
    }
    c->passes_done = st.passes;
    c->commit = st.commit;
    c->f_commit = st.f;
    c->hist = st.hist;
    rm_info("lbfgs coordinator state restored path=%s passes=%lld commit=%lld history=%d", path,
            (long long)st.passes, (long long)st.commit, st.hist.count);
}

/* The accepted point: X0 = X and G0 = G on every shard, then COMMIT (each shard stages its vectors,
 * and its server writes them), then the coordinator's state. */
static int commit_point(rm_lbfgs_coord *c, const rm_lbfgs_hist *h, double f, rm_err *err)
{
    RM_CHECK(vec_all(c, RM_LBV_COPY, RM_LV_X0, RM_LV_X, 0, NULL, err));
    RM_CHECK(vec_all(c, RM_LBV_COPY, RM_LV_G0, RM_LV_G, 0, NULL, err));
    RM_CHECK(vec_all(c, RM_LBV_COMMIT, 0, 0, (double)(c->commit + 1), NULL, err));
    c->commit++;
    c->f_commit = f;
    c->hist = *h;
    state_save(c);
    return RM_OK;
}

/* Are every shard's vectors at the coordinator's last commit? 1 yes, 0 no, negative: an error. */
static int shards_at_commit(rm_lbfgs_coord *c, rm_err *err)
{
    if (c->commit < 1)
        return 0;
    for (int i = 0; i < c->cfg.nservers; i++) {
        rm_ps_req q = {
            .op = RM_PS_OP_LB_VEC, .worker = RM_LBFGS_COORD_ID, .step = rm_lbv_code(RM_LBV_STATUS, 0, 0)};
        rm_ps_rep r;
        rm_err e = {0};
        if (rm_ps_registry_connect(&c->reg, &c->conn[i], i, RM_LBFGS_COORD_ID, c->cfg.token, 0, &e) !=
                RM_OK ||
            rm_ps_send(&c->conn[i], &q, NULL, rm_mono() + c->cfg.timeout_s, &e) != RM_OK ||
            rm_ps_recv(&c->conn[i], &r, NULL, 0, rm_mono() + c->cfg.timeout_s, &e) != RM_OK) {
            rm_ps_conn_close(&c->conn[i]);
            return rm_errf(err, RM_ETIMEDOUT, "lbfgs coordinator: server %d status: %s", i, e.msg);
        }
        c->inc[i] = r.version;
        if (r.a != c->commit) {
            rm_info("lbfgs: server %d holds commit %lld, the coordinator's is %lld", i, (long long)r.a,
                    (long long)c->commit);
            return 0;
        }
    }
    return 1;
}

/* One pass at the shards' X: G = mean gradient over the full batch, *f = mean loss. */
static int run_pass(rm_lbfgs_coord *c, int64_t pass_no, double *f, rm_err *err)
{
    int64_t id = c->pass_id + 1;
    RM_CHECK(vec_all(c, RM_LBV_BEGIN, 0, 0, (double)id, NULL, err));
    double t0 = rm_mono();
    pthread_mutex_lock(&c->mu);
    c->pass_id = id;
    c->loss_sum = 0;
    rm_portions_begin(&c->ps, id);
    c->open = true;
    pthread_cond_broadcast(&c->cv);
    while (!rm_portions_all_done(&c->ps) && !atomic_load(&c->stop))
        cwait(c, 0.5);
    c->open = false;
    double loss = c->loss_sum;
    long long reissued = (long long)c->ps.reissued, dups = (long long)c->ps.duplicates;
    pthread_mutex_unlock(&c->mu);
    if (atomic_load(&c->stop))
        return rm_errf(err, RM_ECANCELED, "lbfgs coordinator: stopped");
    *f = loss / (double)c->full;
    rm_series_inc(c->m_passes, 1);
    rm_series_set(c->m_loss, *f);
    c->passes_done = pass_no + 1;
    state_save(c); /* the budget survives a coordinator restart */
    rm_info("lbfgs pass done pass=%lld id=%lld loss=%.6f seconds=%.2f reissued=%lld duplicates=%lld",
            (long long)pass_no, (long long)id, *f, rm_mono() - t0, reissued, dups);
    return RM_OK;
}

/* Back to the last commit on every shard (X = X0, G = G0) with its history and loss, when every
 * shard's vectors are at it (after a server was replaced, or at a coordinator restart): true. */
static bool resume_commit(rm_lbfgs_coord *c, rm_lbfgs_hist *h, double *f, rm_err *err)
{
    int at = shards_at_commit(c, err);
    if (at != 1 || vec_all(c, RM_LBV_COPY, RM_LV_X, RM_LV_X0, 0, NULL, err) != RM_OK ||
        vec_all(c, RM_LBV_COPY, RM_LV_G, RM_LV_G0, 0, NULL, err) != RM_OK)
        return false;
    *h = c->hist;
    *f = c->f_commit;
    c->replaced = false;
    rm_info("lbfgs resumed at the last accepted point commit=%lld loss=%.6f history=%d", (long long)c->commit,
            *f, h->count);
    return true;
}

static void *coord_main(void *arg)
{
    rm_lbfgs_coord *c = arg;
    rm_lbfgs_vecops v = {c, v_dot, v_axpy, v_scale, v_copy};
    rm_lbfgs_hist h;
    rm_lbfgs_hist_init(&h, c->t.optimizer.history);
    rm_err e = {0};
    int64_t budget = c->t.epochs, passes = c->passes_done;
    if (c->t.max_steps > 0 && c->t.max_steps < budget)
        budget = c->t.max_steps;
    bool fixed = c->t.optimizer.line_search == RM_LS_FIXED;
    double f = 0, gd, gg;
    int rc = RM_OK;
    /* a restarted coordinator resumes its last commit when the shards hold it */
    bool resumed = c->commit > 0 && passes < budget && resume_commit(c, &h, &f, &e);
    if (!resumed && passes < budget) {
        rm_lbfgs_hist_init(&h, c->t.optimizer.history);
        rc = run_pass(c, passes++, &f, &e);
        if (rc == RM_OK)
            rc = commit_point(c, &h, f, &e);
    }
    while (rc == RM_OK && passes < budget) {
        if (c->replaced) { /* a shard was replaced: resume its last commit, else start over here */
            c->replaced = false;
            if (resume_commit(c, &h, &f, &e))
                continue;
            rm_warn("lbfgs: the shards do not hold the last accepted point; history reset, "
                    "re-evaluating at the current parameters");
            rm_lbfgs_hist_init(&h, c->t.optimizer.history);
            if ((rc = run_pass(c, passes++, &f, &e)) || (rc = commit_point(c, &h, f, &e)))
                break;
            continue;
        }
        if ((rc = v_dot(c, RM_LV_G, RM_LV_G, &gg, &e)))
            break;
        rm_series_set(c->m_gnorm, sqrt(gg));
        if ((rc = rm_lbfgs_direction(&v, &h, &e)) || (rc = v_dot(c, RM_LV_G, RM_LV_D, &gd, &e)))
            break;
        if (!(gd < 0)) { /* not a descent direction: forget the history, steepest descent */
            rm_warn("lbfgs: not a descent direction (g.d=%g); history reset", gd);
            rm_lbfgs_hist_init(&h, c->t.optimizer.history);
            if ((rc = v_copy(c, RM_LV_D, RM_LV_G, &e)) || (rc = v_scale(c, RM_LV_D, -1.0, &e)))
                break;
            gd = -gg;
        }
        if (c->replaced)
            continue;
        /* X0 = X, G0 = G since the last commit */
        double t0 = c->t.optimizer.lr;
        if (h.count == 0 && !fixed && gg > 1)
            t0 *= 1.0 / sqrt(gg); /* the first step: at most lr in length */
        rm_armijo a;
        rm_armijo_begin(&a, f, gd, t0, fixed);
        rm_ls_verdict vd = RM_LS_RETRY;
        double fn = f;
        while (vd == RM_LS_RETRY && passes < budget) {
            if ((rc = v_copy(c, RM_LV_X, RM_LV_X0, &e)) || (rc = v_axpy(c, RM_LV_X, a.t, RM_LV_D, &e)))
                break;
            if ((rc = run_pass(c, passes++, &fn, &e)))
                break;
            rm_series_inc(c->m_trials, 1);
            if (c->replaced)
                break; /* the trial is not comparable: recover at the top */
            vd = rm_armijo_feed(&a, fn);
        }
        if (rc)
            break;
        if (c->replaced)
            continue;
        if (vd == RM_LS_ACCEPT) {
            bool pushed;
            if ((rc = rm_lbfgs_update_pair(&v, &h, &pushed, &e)))
                break;
            rm_info("lbfgs step accepted t=%g trials=%d loss=%.6f grad_norm=%.6f history=%d", a.t, a.trials,
                    fn, sqrt(gg), h.count);
            f = fn;
            if ((rc = commit_point(c, &h, f, &e)))
                break;
        } else { /* gave up, or the budget ended mid-search: back to the last accepted point */
            if ((rc = v_copy(c, RM_LV_X, RM_LV_X0, &e)) || (rc = v_copy(c, RM_LV_G, RM_LV_G0, &e)))
                break;
            if (vd == RM_LS_GIVE_UP) {
                rm_warn("lbfgs: line search gave up after %d trials; history reset", a.trials);
                rm_lbfgs_hist_init(&h, c->t.optimizer.history);
            }
        }
    }
    if (rc && rc != RM_ECANCELED) {
        rm_error("lbfgs coordinator failed err=\"%s\"; exiting so the server is replaced", e.msg);
        _exit(1);
    }
    pthread_mutex_lock(&c->mu);
    c->done = true;
    c->pass_id++; /* workers fetch the final parameters */
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (rc == RM_OK) {
        char per[512]; /* portions completed per worker, "w0,w1,..." (truncated past 512 bytes) */
        size_t o = 0;
        pthread_mutex_lock(&c->mu);
        for (int w = 0; w < c->cfg.world && o + 24 < sizeof per; w++)
            o += (size_t)snprintf(per + o, sizeof per - o, "%s%lld", w ? "," : "",
                                  (long long)c->ps.completed[w]);
        pthread_mutex_unlock(&c->mu);
        per[o] = 0;
        rm_info("lbfgs done passes=%lld loss=%.6f portions_per_worker=%s", (long long)passes, f, per);
    }
    return NULL;
}

int rm_lbfgs_coord_start(const rm_lbfgs_coord_cfg *cfg, rm_lbfgs_coord **out, rm_err *err)
{
    *out = NULL;
    rm_lbfgs_coord *c = calloc(1, sizeof *c);
    if (!c)
        return rm_errf(err, RM_ENOMEM, "lbfgs coordinator: out of memory");
    c->cfg = *cfg;
    c->t = *cfg->t;
    for (int i = 0; i < RM_PS_MAX_SERVERS; i++)
        c->conn[i].fd = -1;
    /* the shards' addresses: from the rendezvous, where the servers register (no cluster DNS) */
    int rc = rm_ps_registry_init(&c->reg, (const char(*)[128])cfg->addrs, cfg->nservers, cfg->rendezvous,
                                 cfg->job, cfg->token, "lbfgs-coordinator", err);
    if (rc) {
        free(c);
        return rc;
    }
    rm_ps_registry_set_cancel(&c->reg, NULL, &c->stop);
    state_load(c);
    const char *ss = getenv("RINGMASTER_LBFGS_STATIC_SPLIT");
    c->static_split = ss && !strcmp(ss, "1");
    if (c->static_split)
        rm_warn("lbfgs: static split (portion i to worker i %% N, no reissue): a benchmark "
                "baseline, not Sandblaster");
    /* the training-set size: the built-in dataset's, else the first worker's claim says it */
    if (cfg->train_samples > 0)
        set_size(c, cfg->train_samples);
    /* a pass id space no earlier coordinator of this job used: a restarted one starts anew */
    c->pass_id = (int64_t)time(NULL) << 20;
    c->portion_mean_s = 0;
    rc = rm_portions_init(&c->ps, c->t.optimizer.portions, cfg->world, 1.0, err);
    c->issued_at = calloc((size_t)c->t.optimizer.portions, sizeof(double));
    c->m_portions = calloc((size_t)cfg->world, sizeof *c->m_portions);
    if (rc == RM_OK && (!c->issued_at || !c->m_portions))
        rc = rm_errf(err, RM_ENOMEM, "lbfgs coordinator: out of memory");
    static const char *const L[] = {"job", NULL};
    static const char *const LW[] = {"job", "worker", NULL};
    rm_metric *fam;
#define FAM(kind, var, name, help)                                                                  \
    do {                                                                                            \
        if (rc == RM_OK && (rc = rm_metrics_##kind(cfg->reg, name, help, L, &fam, err)) == RM_OK && \
            !(c->var = rm_metric_with1(fam, cfg->job)))                                             \
            rc = rm_errf(err, RM_ENOMEM, "metrics: out of memory");                                 \
    } while (0)
    FAM(counter, m_passes, "ringmaster_lbfgs_passes_total",
        "Sandblaster L-BFGS: full-batch passes completed (line-search trials included).");
    FAM(counter, m_trials, "ringmaster_lbfgs_line_search_trials_total",
        "Sandblaster L-BFGS: line-search trial steps evaluated.");
    FAM(gauge, m_gnorm, "ringmaster_lbfgs_gradient_norm",
        "Sandblaster L-BFGS: norm of the full-batch gradient at the last accepted point.");
    FAM(gauge, m_loss, "ringmaster_lbfgs_loss", "Sandblaster L-BFGS: mean training loss of the last pass.");
    FAM(counter, m_reissued, "ringmaster_lbfgs_portions_reissued_total",
        "Sandblaster L-BFGS: portions reissued after their deadline.");
#undef FAM
    if (rc == RM_OK &&
        (rc = rm_metrics_counter(cfg->reg, "ringmaster_lbfgs_portions_total",
                                 "Sandblaster L-BFGS: portions completed (first answers) per worker.", LW,
                                 &fam, err)) == RM_OK) {
        for (int w = 0; w < cfg->world && rc == RM_OK; w++) {
            char ws[16];
            snprintf(ws, sizeof ws, "%d", w);
            if (!(c->m_portions[w] = rm_metric_with2(fam, cfg->job, ws)))
                rc = rm_errf(err, RM_ENOMEM, "metrics: out of memory");
        }
    }
    if (rc) {
        rm_portions_free(&c->ps);
        free(c->issued_at);
        free(c->m_portions);
        rm_ps_registry_free(&c->reg);
        free(c);
        return rc;
    }
    rm_mono_cond_init(&c->cv);
    pthread_mutex_init(&c->mu, NULL);
    if (pthread_create(&c->th, NULL, coord_main, c) != 0) {
        rm_portions_free(&c->ps);
        free(c->issued_at);
        free(c->m_portions);
        rm_ps_registry_free(&c->reg);
        free(c);
        return rm_errf(err, RM_ERR, "lbfgs coordinator: cannot start its thread");
    }
    c->started = true;
    rm_info("lbfgs coordinator started portions=%d portion_size=%lld full_batch=%lld history=%d "
            "line_search=%s lr=%g passes=%d workers=%d",
            c->t.optimizer.portions, (long long)c->portion_size, (long long)c->full, c->t.optimizer.history,
            rm_line_search_names[c->t.optimizer.line_search], c->t.optimizer.lr, c->t.epochs, cfg->world);
    *out = c;
    return RM_OK;
}

void rm_lbfgs_coord_stop(rm_lbfgs_coord *c)
{
    if (!c)
        return;
    atomic_store(&c->stop, 1);
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->started)
        pthread_join(c->th, NULL);
    for (int i = 0; i < c->cfg.nservers; i++)
        rm_ps_conn_close(&c->conn[i]);
    rm_ps_registry_free(&c->reg); /* the coordinator thread's alone, and it has ended */
    /* connection threads may still call in: the coordinator lives until the process exits */
}

void rm_lbfgs_coord_claim(rm_lbfgs_coord *c, int w, const rm_ps_req *q, rm_ps_rep *r)
{
    pthread_mutex_lock(&c->mu);
    double until = rm_mono() + 0.5;
    if (c->portion_size < 1 && q->step > 0)
        set_size(c, q->step);
    if (c->portion_size < 1) {
        static rm_ratelimit rl = RM_RATELIMIT_INIT(1, 10.0);
        unsigned long sup = 0;
        if (rm_ratelimit_take(&rl, rm_mono(), &sup))
            rm_error("lbfgs: %d portions of at least one batch (%d) do not fit the training set "
                     "(%lld samples)",
                     c->t.optimizer.portions, c->t.batch_size_per_worker, (long long)q->step);
        r->status = RM_PS_ST_BAD;
        pthread_mutex_unlock(&c->mu);
        return;
    }
    for (;;) {
        if (c->done) {
            r->status = RM_PS_ST_DONE;
            break;
        }
        if (c->open && w >= 0 && w < c->cfg.world) {
            double now = rm_mono();
            c->ps.deadline_s = c->portion_mean_s * 4 > 1.0 ? c->portion_mean_s * 4 : 1.0;
            int64_t before = c->ps.reissued;
            int p = c->static_split ? rm_portions_claim_static(&c->ps, w) : rm_portions_claim(&c->ps, w, now);
            if (p >= 0) {
                if (c->ps.reissued > before) {
                    rm_series_inc(c->m_reissued, 1);
                    rm_info("lbfgs portion reissued portion=%d to=%d pass=%lld", p, w, (long long)c->pass_id);
                }
                c->issued_at[p] = now;
                r->status = RM_PS_ST_OK;
                r->a = p;
                r->b = (int64_t)p * c->portion_size;
                break;
            }
        }
        if (rm_mono() >= until) {
            r->status = RM_PS_ST_TIMEOUT;
            break;
        }
        cwait(c, 0.1);
    }
    r->version = c->pass_id;
    pthread_mutex_unlock(&c->mu);
}

void rm_lbfgs_coord_report(rm_lbfgs_coord *c, int w, const rm_ps_req *q, rm_ps_rep *r)
{
    pthread_mutex_lock(&c->mu);
    int p = (int)q->world;
    if (c->open && rm_portions_complete(&c->ps, q->step, p, w)) {
        c->loss_sum += rm_lb_bitsd(q->from_version);
        double dt = rm_mono() - c->issued_at[p];
        c->portion_mean_s = c->portion_mean_s > 0 ? 0.8 * c->portion_mean_s + 0.2 * dt : dt;
        rm_series_inc(c->m_portions[w], 1);
        pthread_cond_broadcast(&c->cv);
    } else {
        r->status = RM_PS_ST_DROPPED;
    }
    r->version = c->pass_id;
    pthread_mutex_unlock(&c->mu);
}

void rm_lbfgs_coord_worker_lost(rm_lbfgs_coord *c, int w)
{
    if (!c || w < 0 || w >= c->cfg.world)
        return;
    pthread_mutex_lock(&c->mu);
    int n = c->open ? rm_portions_worker_lost(&c->ps, w) : 0;
    if (n) {
        rm_info("lbfgs worker lost worker=%d portions_requeued=%d pass=%lld", w, n, (long long)c->pass_id);
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}
