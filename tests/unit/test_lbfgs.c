/* Tests for worker/ps/lbfgs_core (docs/strategies.md#sandblaster-l-bfgs): the two-loop recursion run
 * over vectors split into shards (partial dots summed, as the coordinator does) against a dense BFGS
 * reference; L-BFGS on a quadratic with exact line search ends in n steps; on Rosenbrock with the
 * Armijo search it reaches the minimum; the Armijo search as a table; portion assignment, deadline
 * reissue, first-answer-wins and lost workers as a table. */
#include "worker/ps/lbfgs_core.h"
#include "worker/ps/lbfgs_coord.h"
#include "tests/unit/testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

/* ---- vectors split into shards -------------------------------------------------------------- */

#define N_MAX 8
#define SHARDS 3
#define MHIST 10
typedef struct {
    int n;
    int bounds[SHARDS + 1]; /* shard k holds [bounds[k], bounds[k+1]) */
    double v[RM_LBFGS_SLOTS(MHIST)][N_MAX];
    int ops; /* operations issued (each goes to every shard) */
} shards;

static void shards_init(shards *s, int n)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    for (int k = 0; k <= SHARDS; k++)
        s->bounds[k] = (int)((long)n * k / SHARDS); /* n < SHARDS leaves some shards empty */
}

static int sh_dot(void *ctx, int a, int b, double *out, rm_err *err)
{
    shards *s = ctx;
    double total = 0;
    for (int k = 0; k < SHARDS; k++) { /* each shard's partial, summed by the caller */
        double part = 0;
        for (int i = s->bounds[k]; i < s->bounds[k + 1]; i++)
            part += s->v[a][i] * s->v[b][i];
        total += part;
    }
    s->ops++;
    *out = total;
    return RM_OK;
}
static int sh_axpy(void *ctx, int y, double alpha, int x, rm_err *err)
{
    shards *s = ctx;
    for (int i = 0; i < s->n; i++)
        s->v[y][i] += alpha * s->v[x][i];
    s->ops++;
    return RM_OK;
}
static int sh_scale(void *ctx, int x, double a, rm_err *err)
{
    shards *s = ctx;
    for (int i = 0; i < s->n; i++)
        s->v[x][i] *= a;
    s->ops++;
    return RM_OK;
}
static int sh_copy(void *ctx, int dst, int src, rm_err *err)
{
    shards *s = ctx;
    memcpy(s->v[dst], s->v[src], sizeof s->v[dst]);
    s->ops++;
    return RM_OK;
}

/* ---- dense reference: BFGS inverse update from H0 = gamma I over the held pairs ------------- */

static void ref_direction(int n, const double *g, double S[][N_MAX], double Y[][N_MAX], int k, double gamma,
                          double *d)
{
    double H[N_MAX][N_MAX] = {{0}}, T[N_MAX][N_MAX];
    for (int i = 0; i < n; i++)
        H[i][i] = k > 0 ? gamma : 1.0;
    for (int p = 0; p < k; p++) { /* H = (I - rho s y^T) H (I - rho y s^T) + rho s s^T */
        double sy = 0;
        for (int i = 0; i < n; i++)
            sy += S[p][i] * Y[p][i];
        double rho = 1.0 / sy, A[N_MAX][N_MAX];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                A[i][j] = (i == j) - rho * S[p][i] * Y[p][j];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                T[i][j] = 0;
                for (int l = 0; l < n; l++)
                    T[i][j] += A[i][l] * H[l][j];
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                H[i][j] = rho * S[p][i] * S[p][j];
                for (int l = 0; l < n; l++)
                    H[i][j] += T[i][l] * A[j][l];
            }
    }
    for (int i = 0; i < n; i++) {
        d[i] = 0;
        for (int j = 0; j < n; j++)
            d[i] -= H[i][j] * g[j];
    }
}

static const rm_lbfgs_vecops ops = {NULL, sh_dot, sh_axpy, sh_scale, sh_copy};

/* a fixed SPD matrix A = B^T B + I and b, n = 6 */
#define QN 6
static double QA[QN][QN], Qb[QN];
static void quad_setup(void)
{
    double B[QN][QN];
    unsigned r = 12345;
    for (int i = 0; i < QN; i++) {
        for (int j = 0; j < QN; j++) {
            r = r * 1103515245u + 12345u;
            B[i][j] = ((r >> 8) % 2001) / 1000.0 - 1.0;
        }
        Qb[i] = (double)(i + 1) - 3.5;
    }
    for (int i = 0; i < QN; i++)
        for (int j = 0; j < QN; j++) {
            QA[i][j] = i == j ? 1.0 : 0.0;
            for (int l = 0; l < QN; l++)
                QA[i][j] += B[l][i] * B[l][j];
        }
}
static double quad_fg(const double *x, double *g)
{
    double f = 0;
    for (int i = 0; i < QN; i++) {
        double ax = 0;
        for (int j = 0; j < QN; j++)
            ax += QA[i][j] * x[j];
        g[i] = ax - Qb[i];
        f += 0.5 * x[i] * ax - Qb[i] * x[i];
    }
    return f;
}

/* The two-loop direction equals the dense BFGS reference at every iterate; with exact line
 * searches on a quadratic, L-BFGS (m >= n) reaches the minimiser in n steps. */
static void test_quadratic_exact_in_n(void)
{
    quad_setup();
    shards s;
    shards_init(&s, QN);
    rm_lbfgs_vecops v = ops;
    v.ctx = &s;
    rm_lbfgs_hist h;
    rm_lbfgs_hist_init(&h, MHIST);
    rm_err e = {0};
    double S[MHIST][N_MAX], Y[MHIST][N_MAX];
    int npairs = 0;
    for (int i = 0; i < QN; i++)
        s.v[RM_LV_X][i] = 1.0;
    quad_fg(s.v[RM_LV_X], s.v[RM_LV_G]);
    double g0norm = 0;
    for (int i = 0; i < QN; i++)
        g0norm += s.v[RM_LV_G][i] * s.v[RM_LV_G][i];
    g0norm = sqrt(g0norm);
    for (int it = 0; it < QN; it++) {
        CU_ASSERT_EQUAL_FATAL(rm_lbfgs_direction(&v, &h, &e), RM_OK);
        double dref[N_MAX];
        ref_direction(QN, s.v[RM_LV_G], S, Y, npairs, h.gamma, dref);
        for (int i = 0; i < QN; i++)
            CU_ASSERT_DOUBLE_EQUAL(s.v[RM_LV_D][i], dref[i], 1e-9 * (1 + fabs(dref[i])));
        /* exact step along d: t = -g.d / d.A.d */
        double gd = 0, dad = 0;
        for (int i = 0; i < QN; i++) {
            gd += s.v[RM_LV_G][i] * s.v[RM_LV_D][i];
            for (int j = 0; j < QN; j++)
                dad += s.v[RM_LV_D][i] * QA[i][j] * s.v[RM_LV_D][j];
        }
        CU_ASSERT(gd < 0);
        double t = -gd / dad;
        CU_ASSERT_EQUAL(sh_copy(&s, RM_LV_X0, RM_LV_X, &e), RM_OK);
        CU_ASSERT_EQUAL(sh_copy(&s, RM_LV_G0, RM_LV_G, &e), RM_OK);
        CU_ASSERT_EQUAL(sh_axpy(&s, RM_LV_X, t, RM_LV_D, &e), RM_OK);
        quad_fg(s.v[RM_LV_X], s.v[RM_LV_G]);
        bool pushed = false;
        CU_ASSERT_EQUAL_FATAL(rm_lbfgs_update_pair(&v, &h, &pushed, &e), RM_OK);
        CU_ASSERT(pushed);
        for (int i = 0; i < QN; i++) {
            S[npairs][i] = s.v[RM_LV_X][i] - s.v[RM_LV_X0][i];
            Y[npairs][i] = s.v[RM_LV_G][i] - s.v[RM_LV_G0][i];
        }
        npairs++;
        double gn = 0;
        for (int i = 0; i < QN; i++)
            gn += s.v[RM_LV_G][i] * s.v[RM_LV_G][i];
        if (it < QN - 1) {
            CU_ASSERT(sqrt(gn) > 1e-6 * g0norm); /* not before n steps (a generic start) */
        } else {
            CU_ASSERT(sqrt(gn) < 1e-8 * g0norm); /* the minimiser after n */
        }
    }
    CU_ASSERT_EQUAL(h.count, QN);
}

/* Rosenbrock, n = 4 (extended: sum of 100 (x_{2i+1} - x_{2i}^2)^2 + (1 - x_{2i})^2) */
#define RN 4
static double rosen_fg(const double *x, double *g)
{
    double f = 0;
    for (int i = 0; i < RN; i += 2) {
        double a = x[i + 1] - x[i] * x[i], b = 1 - x[i];
        f += 100 * a * a + b * b;
        g[i] = -400 * a * x[i] - 2 * b;
        g[i + 1] = 200 * a;
    }
    return f;
}

/* L-BFGS with m = 3 (< n: the ring wraps) and the Armijo search, the direction checked against the
 * reference at every iterate; reaches (1, 1, 1, 1). */
static void test_rosenbrock(void)
{
    shards s;
    shards_init(&s, RN);
    rm_lbfgs_vecops v = ops;
    v.ctx = &s;
    rm_lbfgs_hist h;
    const int m = 3;
    rm_lbfgs_hist_init(&h, m);
    rm_err e = {0};
    double S[64][N_MAX], Y[64][N_MAX]; /* every accepted pair, the reference takes the last m */
    int npairs = 0, wraps = 0;
    const double x0[RN] = {-1.2, 1.0, -1.2, 1.0};
    memcpy(s.v[RM_LV_X], x0, sizeof x0);
    double f = rosen_fg(s.v[RM_LV_X], s.v[RM_LV_G]);
    int it, trials = 0;
    for (it = 0; it < 200; it++) {
        double gn = 0;
        for (int i = 0; i < RN; i++)
            gn += s.v[RM_LV_G][i] * s.v[RM_LV_G][i];
        if (sqrt(gn) < 1e-6)
            break;
        CU_ASSERT_EQUAL_FATAL(rm_lbfgs_direction(&v, &h, &e), RM_OK);
        double dref[N_MAX];
        int k = h.count;
        ref_direction(RN, s.v[RM_LV_G], &S[npairs - k < 0 ? 0 : npairs - k],
                      &Y[npairs - k < 0 ? 0 : npairs - k], k, h.gamma, dref);
        for (int i = 0; i < RN; i++)
            CU_ASSERT_DOUBLE_EQUAL(s.v[RM_LV_D][i], dref[i], 1e-7 * (1 + fabs(dref[i])));
        double gd;
        sh_dot(&s, RM_LV_G, RM_LV_D, &gd, &e);
        CU_ASSERT_FATAL(gd < 0);
        sh_copy(&s, RM_LV_X0, RM_LV_X, &e);
        sh_copy(&s, RM_LV_G0, RM_LV_G, &e);
        rm_armijo a;
        rm_armijo_begin(&a, f, gd, h.count ? 1.0 : fmin(1.0, 1.0 / sqrt(gn)), false);
        rm_ls_verdict vd;
        double fn;
        do { /* each trial: X = X0 + t D, evaluate (a pass, in the runtime) */
            sh_copy(&s, RM_LV_X, RM_LV_X0, &e);
            sh_axpy(&s, RM_LV_X, a.t, RM_LV_D, &e);
            fn = rosen_fg(s.v[RM_LV_X], s.v[RM_LV_G]);
            trials++;
        } while ((vd = rm_armijo_feed(&a, fn)) == RM_LS_RETRY);
        CU_ASSERT_EQUAL_FATAL(vd, RM_LS_ACCEPT);
        CU_ASSERT(fn < f);
        f = fn;
        bool pushed;
        int before = h.count == m;
        CU_ASSERT_EQUAL_FATAL(rm_lbfgs_update_pair(&v, &h, &pushed, &e), RM_OK);
        if (pushed) {
            CU_ASSERT_FATAL(npairs < 64);
            for (int i = 0; i < RN; i++) {
                S[npairs][i] = s.v[RM_LV_X][i] - s.v[RM_LV_X0][i];
                Y[npairs][i] = s.v[RM_LV_G][i] - s.v[RM_LV_G0][i];
            }
            npairs++;
            wraps += before;
        } /* refused: the reference keeps the last h.count accepted pairs, as the ring does */
        if (npairs >= 60) { /* keep the reference's window: shift */
            memmove(S, S[npairs - m], (size_t)m * sizeof S[0]);
            memmove(Y, Y[npairs - m], (size_t)m * sizeof Y[0]);
            npairs = m;
        }
    }
    CU_ASSERT(it < 200);
    CU_ASSERT(wraps > 0); /* the history ring wrapped */
    for (int i = 0; i < RN; i++)
        CU_ASSERT_DOUBLE_EQUAL(s.v[RM_LV_X][i], 1.0, 1e-5);
    CU_ASSERT(trials >= it);
}

/* ---- Armijo as a table ----------------------------------------------------------------------- */

static void test_armijo_table(void)
{
    /* f0 = 10, g.d = -4, c1 = 1e-4: accept when f <= 10 - 4e-4 t */
    static const struct {
        bool fixed;
        double t0;
        int n;
        double f[12];
        rm_ls_verdict want[12];
        double t_after[12];
    } rows[] = {
        {false, 1.0, 1, {9.0}, {RM_LS_ACCEPT}, {1.0}},
        /* exactly at the bound is accepted */
        {false, 1.0, 1, {10.0 - 4e-4}, {RM_LS_ACCEPT}, {1.0}},
        /* just above it backtracks; t halves each retry; the bound moves with t */
        {false,
         1.0,
         3,
         {10.0, 11.0, 10.0 - 4e-4 * 0.25},
         {RM_LS_RETRY, RM_LS_RETRY, RM_LS_ACCEPT},
         {0.5, 0.25, 0.25}},
        /* NaN and inf backtrack */
        {false, 2.0, 3, {NAN, INFINITY, 9.5}, {RM_LS_RETRY, RM_LS_RETRY, RM_LS_ACCEPT}, {1.0, 0.5, 0.5}},
        /* ten failures: give up */
        {false,
         1.0,
         10,
         {12, 12, 12, 12, 12, 12, 12, 12, 12, 12},
         {RM_LS_RETRY, RM_LS_RETRY, RM_LS_RETRY, RM_LS_RETRY, RM_LS_RETRY, RM_LS_RETRY, RM_LS_RETRY,
          RM_LS_RETRY, RM_LS_RETRY, RM_LS_GIVE_UP},
         {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625, 0.001953125, 0.001953125}},
        /* fixed: the first finite trial is accepted even when the loss rose */
        {true, 0.1, 1, {50.0}, {RM_LS_ACCEPT}, {0.1}},
        {true, 0.1, 2, {NAN, 50.0}, {RM_LS_RETRY, RM_LS_ACCEPT}, {0.05, 0.05}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        rm_armijo a;
        rm_armijo_begin(&a, 10.0, -4.0, rows[r].t0, rows[r].fixed);
        for (int i = 0; i < rows[r].n; i++) {
            rm_ls_verdict v = rm_armijo_feed(&a, rows[r].f[i]);
            CU_ASSERT_EQUAL(v, rows[r].want[i]);
            CU_ASSERT_DOUBLE_EQUAL(a.t, rows[r].t_after[i], 1e-15);
            CU_ASSERT_EQUAL(a.trials, i + 1);
        }
    }
}

/* ---- portions as a table --------------------------------------------------------------------- */

enum { CLAIM, COMPLETE, LOST, BEGIN };
typedef struct {
    int op, w;
    double now;   /* CLAIM */
    int i;        /* COMPLETE: portion; BEGIN: pass */
    int64_t pass; /* COMPLETE */
    int want;     /* CLAIM: portion / NONE / DONE; COMPLETE: 1 first, 0 not; LOST: count */
} prow;

static void test_portions_table(void)
{
    /* P = 4 portions, 3 workers, deadline 10 s */
    static const prow rows[] = {
        {BEGIN, 0, 0, 0, 0, 0},
        {CLAIM, 0, 0.0, 0, 0, 0}, /* on demand, lowest pending first */
        {CLAIM, 1, 0.0, 0, 0, 1},
        {CLAIM, 0, 1.0, 0, 0, 2}, /* w0 asks again before answering: gets more */
        {COMPLETE, 0, 0, 0, 0, 1},
        {COMPLETE, 0, 0, 0, 0, 0}, /* its own duplicate: not counted */
        {COMPLETE, 0, 0, 2, 0, 1},
        {CLAIM, 0, 2.0, 0, 0, 3},                /* the fast worker takes the last one too */
        {CLAIM, 2, 3.0, 0, 0, RM_PORTION_NONE},  /* nothing pending, nothing overdue */
        {CLAIM, 1, 10.5, 0, 0, RM_PORTION_NONE}, /* portion 1 is w1's own: never reissued to it */
        {CLAIM, 2, 10.5, 0, 0, 1},               /* portion 1 (out since 0, deadline 10) backs up on w2 */
        {CLAIM, 0, 10.6, 0, 0, RM_PORTION_NONE}, /* 3's deadline is 12; 1 restarted at 10.5 */
        {COMPLETE, 2, 0, 1, 0, 1},               /* the backup answers first: it wins */
        {COMPLETE, 1, 0, 1, 0, 0},               /* the straggler's late answer loses */
        {COMPLETE, 0, 0, 1, 7, 0},               /* a stale pass is refused */
        {COMPLETE, 0, 0, 9, 0, 0},               /* a bad index is refused */
        {LOST, 0, 0, 0, 0, 1},                   /* w0 dies holding 3: pending again */
        {CLAIM, 1, 11.0, 0, 0, 3},
        {COMPLETE, 1, 0, 3, 0, 1},
        {CLAIM, 2, 11.0, 0, 0, RM_PORTION_DONE},
        /* next pass: everything pending again, stale answers from pass 0 refused */
        {BEGIN, 0, 0, 1, 0, 0},
        {COMPLETE, 1, 0, 3, 0, 0},
        {CLAIM, 2, 20.0, 0, 0, 0},
        {LOST, 2, 0, 0, 0, 1},
        {LOST, 2, 0, 0, 0, 0},     /* idempotent */
        {CLAIM, 1, 20.0, 0, 0, 0}, /* the lost worker's portion goes out first */
    };
    rm_portions ps;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_portions_init(&ps, 4, 3, 10.0, &e), RM_OK);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const prow *x = &rows[r];
        int got = 0;
        switch (x->op) {
        case BEGIN:
            rm_portions_begin(&ps, x->i);
            got = x->want;
            break;
        case CLAIM:
            got = rm_portions_claim(&ps, x->w, x->now);
            break;
        case COMPLETE:
            got = rm_portions_complete(&ps, x->pass, x->i, x->w);
            break;
        case LOST:
            got = rm_portions_worker_lost(&ps, x->w);
            break;
        }
        if (got != x->want)
            fprintf(stderr, "portions row %zu: got %d want %d\n", r, got, x->want);
        CU_ASSERT_EQUAL(got, x->want);
    }
    /* per-worker wins over both passes: w0 {0, 2}, w1 {3}, w2 {1} */
    CU_ASSERT_EQUAL(ps.completed[0], 2);
    CU_ASSERT_EQUAL(ps.completed[1], 1);
    CU_ASSERT_EQUAL(ps.completed[2], 1);
    CU_ASSERT_EQUAL(ps.reissued, 1);
    CU_ASSERT_EQUAL(ps.duplicates, 2);
    rm_portions_free(&ps);
    /* the static split: 5 portions over 2 workers, w0 {0, 2, 4}, w1 {1, 3}; never reissued */
    CU_ASSERT_EQUAL_FATAL(rm_portions_init(&ps, 5, 2, 0.001, &e), RM_OK);
    rm_portions_begin(&ps, 1);
    CU_ASSERT_EQUAL(rm_portions_claim_static(&ps, 0), 0);
    CU_ASSERT_EQUAL(rm_portions_claim_static(&ps, 0), 2);
    CU_ASSERT_EQUAL(rm_portions_claim_static(&ps, 1), 1);
    CU_ASSERT_EQUAL(rm_portions_claim_static(&ps, 0), 4);
    CU_ASSERT_EQUAL(rm_portions_claim_static(&ps, 0), RM_PORTION_NONE); /* 1 and 3 are w1's */
    CU_ASSERT_EQUAL(rm_portions_claim_static(&ps, 1), 3);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_TRUE(rm_portions_complete(&ps, 1, i, i % 2));
    CU_ASSERT_EQUAL(rm_portions_claim_static(&ps, 1), RM_PORTION_DONE);
    CU_ASSERT_EQUAL(ps.reissued, 0);
    rm_portions_free(&ps);
    CU_ASSERT_EQUAL(rm_portions_init(&ps, 0, 3, 1.0, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_portions_init(&ps, 4, 0, 1.0, &e), RM_EINVAL);
    CU_ASSERT_EQUAL(rm_portions_init(&ps, 4, 1, 0.0, &e), RM_EINVAL);
}

/* A pair without positive curvature is refused and leaves the history as it was. */
static void test_hist_curvature(void)
{
    rm_lbfgs_hist h;
    rm_lbfgs_hist_init(&h, 2);
    CU_ASSERT_FALSE(rm_lbfgs_hist_push(&h, -1.0, 1.0));
    CU_ASSERT_FALSE(rm_lbfgs_hist_push(&h, 0.0, 1.0));
    CU_ASSERT_FALSE(rm_lbfgs_hist_push(&h, NAN, 1.0));
    CU_ASSERT_EQUAL(h.count, 0);
    CU_ASSERT_TRUE(rm_lbfgs_hist_push(&h, 2.0, 4.0));
    CU_ASSERT_DOUBLE_EQUAL(h.gamma, 0.5, 0);
    CU_ASSERT_EQUAL(rm_lbfgs_hist_next_slot(&h), 1);
    CU_ASSERT_TRUE(rm_lbfgs_hist_push(&h, 1.0, 1.0));
    CU_ASSERT_EQUAL(rm_lbfgs_hist_next_slot(&h), 0); /* full: the oldest slot is next */
    CU_ASSERT_TRUE(rm_lbfgs_hist_push(&h, 1.0, 2.0));
    CU_ASSERT_EQUAL(h.count, 2);
    CU_ASSERT_EQUAL(h.head, 1);
    CU_ASSERT_DOUBLE_EQUAL(h.rho[0], 1.0, 0);
}

/* The server side (worker/ps/lbfgs_coord.c): a shard executes the coordinator's vector ops on its
 * slice (X is the server's own parameter array), adds a portion's pushed gradient once per pass
 * (first answer wins; another pass' push is stale), flags COMMIT, and names its incarnation. */
static void vec(rm_lbfgs_shard *sh, int code, int a, int b, double alpha, rm_ps_rep *r)
{
    rm_ps_req q = {
        .op = RM_PS_OP_LB_VEC, .step = rm_lbv_code(code, a, b), .from_version = rm_lb_dbits(alpha)};
    memset(r, 0, sizeof *r);
    rm_lbfgs_shard_vec(sh, &q, r);
}
static int push(rm_lbfgs_shard *sh, int64_t pass, uint32_t portion, const float *g)
{
    rm_ps_req q = {.op = RM_PS_OP_LB_PUSH, .step = pass, .world = portion};
    rm_ps_rep r = {0};
    rm_lbfgs_shard_push(sh, &q, g, &r);
    return (int)r.status;
}

static void test_shard_ops(void)
{
    float params[4] = {1, 2, 3, 4};
    rm_lbfgs_shard *sh = NULL;
    rm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(rm_lbfgs_shard_new(params, 4, 2, 3, NULL, &sh, &e), RM_OK);
    rm_ps_rep r;
    /* X0 starts as X: a fresh (or restored) shard's line-search restore keeps its parameters */
    vec(sh, RM_LBV_DOT, RM_LV_X0, RM_LV_X, 0, &r);
    CU_ASSERT_EQUAL(r.status, RM_PS_ST_OK);
    CU_ASSERT_DOUBLE_EQUAL(rm_lb_bitsd(r.a), 30.0, 0);
    int64_t inc = r.version;
    CU_ASSERT(inc > 0);
    vec(sh, RM_LBV_BEGIN, 0, 0, 77.0, &r); /* pass 77: G = 0; the server bumps its version */
    CU_ASSERT_EQUAL(r.version, inc);
    CU_ASSERT_EQUAL(r.b, 1);
    const float g1[4] = {1, 1, 1, 1}, g2[4] = {10, 10, 10, 10};
    CU_ASSERT_EQUAL(push(sh, 77, 0, g1), RM_PS_ST_OK);
    CU_ASSERT_EQUAL(push(sh, 77, 0, g2), RM_PS_ST_DROPPED); /* the same portion again: dropped */
    CU_ASSERT_EQUAL(push(sh, 76, 1, g2), RM_PS_ST_DROPPED); /* another pass: stale */
    CU_ASSERT_EQUAL(push(sh, 77, 3, g2), RM_PS_ST_DROPPED); /* no such portion */
    CU_ASSERT_EQUAL(push(sh, 77, 2, g1), RM_PS_ST_OK);
    vec(sh, RM_LBV_DOT, RM_LV_G, RM_LV_G, 0, &r); /* G = 2 each: 4 * 4 */
    CU_ASSERT_DOUBLE_EQUAL(rm_lb_bitsd(r.a), 16.0, 0);
    /* D = G; D *= -0.5; X += 2 D  ->  X = {-1, 0, 1, 2} */
    vec(sh, RM_LBV_COPY, RM_LV_D, RM_LV_G, 0, &r);
    vec(sh, RM_LBV_SCALE, RM_LV_D, RM_LV_D, -0.5, &r);
    vec(sh, RM_LBV_AXPY, RM_LV_X, RM_LV_D, 2.0, &r);
    CU_ASSERT_EQUAL(r.status, RM_PS_ST_OK);
    CU_ASSERT_DOUBLE_EQUAL(params[0], -1.0f, 0);
    CU_ASSERT_DOUBLE_EQUAL(params[3], 2.0f, 0);
    /* history slots exist up to m = 2 pairs; one past them is refused */
    vec(sh, RM_LBV_COPY, RM_LV_Y(1), RM_LV_X, 0, &r);
    CU_ASSERT_EQUAL(r.status, RM_PS_ST_OK);
    vec(sh, RM_LBV_COPY, RM_LV_Y(1) + 1, RM_LV_X, 0, &r);
    CU_ASSERT_EQUAL(r.status, RM_PS_ST_BAD);
    vec(sh, 99, 0, 0, 0, &r);
    CU_ASSERT_EQUAL(r.status, RM_PS_ST_BAD);
    vec(sh, RM_LBV_STATUS, 0, 0, 0, &r);
    CU_ASSERT_EQUAL(r.a, -1); /* no commit yet */
    vec(sh, RM_LBV_COMMIT, 0, 0, 5.0, &r);
    CU_ASSERT_EQUAL(r.b, 0);
    vec(sh, RM_LBV_STATUS, 0, 0, 0, &r);
    CU_ASSERT_EQUAL(r.a, 5);
    /* a new pass takes that pass' portions afresh */
    vec(sh, RM_LBV_BEGIN, 0, 0, 78.0, &r);
    CU_ASSERT_EQUAL(push(sh, 78, 0, g2), RM_PS_ST_OK);
    vec(sh, RM_LBV_DOT, RM_LV_G, RM_LV_G, 0, &r);
    CU_ASSERT_DOUBLE_EQUAL(rm_lb_bitsd(r.a), 400.0, 0);
    rm_lbfgs_shard_free(sh);
    /* with a checkpoint folder, COMMIT writes the vectors; a new shard (a replaced server) restores
     * them and answers STATUS with that commit; a corrupt file is not used */
    char dir[] = "/tmp/rm-lbfgs-test.XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    float p2[4] = {1, 2, 3, 4};
    CU_ASSERT_EQUAL_FATAL(rm_lbfgs_shard_new(p2, 4, 2, 3, dir, &sh, &e), RM_OK);
    vec(sh, RM_LBV_BEGIN, 0, 0, 1.0, &r);
    CU_ASSERT_EQUAL(push(sh, 1, 0, g2), RM_PS_ST_OK);
    vec(sh, RM_LBV_COPY, RM_LV_G0, RM_LV_G, 0, &r);
    vec(sh, RM_LBV_COMMIT, 0, 0, 3.0, &r);
    vec(sh, RM_LBV_COPY, RM_LV_G0, RM_LV_X, 0, &r); /* changed after the commit: not saved */
    rm_lbfgs_shard_free(sh);
    float p3[4] = {0, 0, 0, 0};
    CU_ASSERT_EQUAL_FATAL(rm_lbfgs_shard_new(p3, 4, 2, 3, dir, &sh, &e), RM_OK);
    vec(sh, RM_LBV_STATUS, 0, 0, 0, &r);
    CU_ASSERT_EQUAL(r.a, 3);
    vec(sh, RM_LBV_DOT, RM_LV_G0, RM_LV_G0, 0, &r); /* G0 = {10, 10, 10, 10} as committed */
    CU_ASSERT_DOUBLE_EQUAL(rm_lb_bitsd(r.a), 400.0, 0);
    rm_lbfgs_shard_free(sh);
    char path[64];
    snprintf(path, sizeof path, "%s/lbfgs-vectors", dir);
    FILE *f = fopen(path, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, -4, SEEK_END);
    fputc(0x7f, f);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(rm_lbfgs_shard_new(p3, 4, 2, 3, dir, &sh, &e), RM_OK);
    vec(sh, RM_LBV_STATUS, 0, 0, 0, &r);
    CU_ASSERT_EQUAL(r.a, -1); /* corrupt: the history is not trusted */
    rm_lbfgs_shard_free(sh);
    remove(path);
    rmdir(dir);
    /* the portion size: whole batches, the tail left out */
    CU_ASSERT_EQUAL(rm_lbfgs_portion_size(60000, 16, 250), 3750);
    CU_ASSERT_EQUAL(rm_lbfgs_portion_size(60000, 64, 64), 896);
    CU_ASSERT_EQUAL(rm_lbfgs_portion_size(100, 4, 64), 0);
}

void rm_suite_lbfgs(void)
{
    static const rm_test_case cases[] = {
        {"quadratic_exact_in_n", test_quadratic_exact_in_n},
        {"rosenbrock", test_rosenbrock},
        {"armijo_table", test_armijo_table},
        {"portions_table", test_portions_table},
        {"hist_curvature", test_hist_curvature},
        {"shard_ops", test_shard_ops},
    };
    RM_ADD_SUITE("lbfgs", NULL, NULL, cases);
}
