/* lbfgs_core.h — the pure parts of Sandblaster L-BFGS (docs/strategies.md#sandblaster-l-bfgs; Dean et al. 2012, "Large Scale
 * Distributed Deep Networks", section 4.2): no sockets, no clocks, no threads, so each is tested
 * as a table (tests/unit/test_lbfgs.c).
 *
 *   1. The L-BFGS two-loop recursion and the curvature-pair update, written over ABSTRACT vector
 *      operations (rm_lbfgs_vecops: dot, axpy, scale, copy on vectors named by slot number). The
 *      coordinator implements them by issuing each operation to every parameter-server shard,
 *      where the vectors live, and summing the shards' partial dot products; the parameters and
 *      the (s, y) history never leave the servers. The tests implement them in memory, split into
 *      shards the same way.
 *   2. The Armijo backtracking line search as a state machine: begin with f(x), g.d and the first
 *      trial step; feed it each trial's loss (each trial is another pass over the data); it answers
 *      accept, retry with a smaller step, or give up.
 *   3. Portion assignment: a pass is cut into P portions handed out on demand; a portion out
 *      longer than the deadline is reissued to another worker (backup of the tail) and the first
 *      answer wins; a lost worker's outstanding portions go back to the queue; per-worker counts.
 *
 * Ownership: every struct here is caller-owned and holds no pointers to memory it frees, except
 * rm_portions (rm_portions_init allocates, rm_portions_free releases). Not thread-safe: the
 * caller serialises calls (the coordinator holds its lock). */
#ifndef RM_WORKER_LBFGS_CORE_H
#define RM_WORKER_LBFGS_CORE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"

/* ---- vectors and the two-loop recursion ----------------------------------------------------- */

/* Vector slots every shard keeps (each the shard's slice of a full-length vector). */
enum {
    RM_LV_X = 0, /* the parameters */
    RM_LV_G,     /* the gradient accumulated by the current pass (mean over the pass) */
    RM_LV_D,     /* the search direction */
    RM_LV_X0,    /* the parameters at the start of the line search */
    RM_LV_G0,    /* the gradient at X0 */
    RM_LV_HIST   /* first history slot: s_j at RM_LV_HIST + 2j, y_j at RM_LV_HIST + 2j + 1 */
};
#define RM_LBFGS_SLOTS(m) (RM_LV_HIST + 2 * (m))
#define RM_LV_S(j) (RM_LV_HIST + 2 * (j))
#define RM_LV_Y(j) (RM_LV_HIST + 2 * (j) + 1)

/* The operations the recursion needs; each returns RM_OK or a negative RM_E* (a shard did not
 * answer). dot sums over every shard. */
typedef struct rm_lbfgs_vecops {
    void *ctx;
    int (*dot)(void *ctx, int a, int b, double *out, rm_err *err);
    int (*axpy)(void *ctx, int y, double alpha, int x, rm_err *err); /* y += alpha x */
    int (*scale)(void *ctx, int x, double a, rm_err *err);           /* x *= a */
    int (*copy)(void *ctx, int dst, int src, rm_err *err);           /* dst = src */
} rm_lbfgs_vecops;

/* The curvature history: a ring of at most m pairs in slots 0..m-1 (oldest first from `head`). */
#define RM_LBFGS_HIST_MAX 100
typedef struct rm_lbfgs_hist {
    int m;                         /* capacity (spec.training.optimizer.history) */
    int count;                     /* pairs held, <= m */
    int head;                      /* slot of the oldest pair */
    double rho[RM_LBFGS_HIST_MAX]; /* 1 / (s_j . y_j) per slot */
    double gamma;                  /* s.y / y.y of the newest pair (initial Hessian scaling) */
} rm_lbfgs_hist;

void rm_lbfgs_hist_init(rm_lbfgs_hist *h, int m);
/* Slot the next pair goes to (the oldest when full). */
int rm_lbfgs_hist_next_slot(const rm_lbfgs_hist *h);
/* Records the pair just written into rm_lbfgs_hist_next_slot's S/Y vectors with s.y and y.y.
 * A pair with s.y <= 1e-10 y.y (no positive curvature) is skipped: answers false. */
bool rm_lbfgs_hist_push(rm_lbfgs_hist *h, double sy, double yy);

/* D = -H G by the two-loop recursion over h (D = -G with no history). */
int rm_lbfgs_direction(const rm_lbfgs_vecops *v, const rm_lbfgs_hist *h, rm_err *err);
/* After an accepted step from X0 (gradient G0) to X (gradient G): s = X - X0, y = G - G0 into the
 * next slot, pushed when it has positive curvature. *pushed says whether it was. */
int rm_lbfgs_update_pair(const rm_lbfgs_vecops *v, rm_lbfgs_hist *h, bool *pushed, rm_err *err);

/* ---- the Armijo line search ------------------------------------------------------------------ */

typedef enum {
    RM_LS_ACCEPT = 0, /* the trial satisfies the condition: keep it */
    RM_LS_RETRY,      /* evaluate again at a->t (smaller) */
    RM_LS_GIVE_UP     /* max_trials spent without sufficient decrease */
} rm_ls_verdict;

typedef struct rm_armijo {
    double f0, gd0; /* f(x0) and g(x0).d (< 0 for a descent direction) */
    double t;       /* the current trial step */
    double c1;      /* sufficient-decrease constant; default 1e-4 */
    double shrink;  /* backtracking factor; default 0.5 */
    int trials;     /* trials evaluated so far */
    int max_trials; /* default 10 */
    bool fixed;     /* lineSearch fixed: every first trial is accepted */
} rm_armijo;

void rm_armijo_begin(rm_armijo *a, double f0, double gd0, double t0, bool fixed);
/* Feed the loss at x0 + t d; a non-finite loss always backtracks. */
rm_ls_verdict rm_armijo_feed(rm_armijo *a, double f_trial);

/* ---- portion assignment ---------------------------------------------------------------------- */

#define RM_PORTION_NONE (-1) /* nothing to hand out now: wait and ask again */
#define RM_PORTION_DONE (-2) /* every portion of the pass is in */
#define RM_PORTIONS_MAX_WORKERS 1024

typedef struct rm_portion {
    int8_t state;    /* 0 pending, 1 out, 2 done */
    int holder;      /* the worker it was last issued to (out), or the winner (done) */
    int issues;      /* times issued in this pass */
    double deadline; /* out: reissue after this time */
} rm_portion;

typedef struct rm_portions {
    int P;
    int nworkers;       /* worker indices are 0..nworkers-1 */
    int64_t pass;       /* the pass these portions belong to */
    int done;           /* portions done in this pass */
    int next;           /* lowest index that may still be pending */
    double deadline_s;  /* a portion out longer than this is reissued */
    rm_portion *p;      /* P entries */
    int64_t *completed; /* per worker: portions that won, over all passes */
    int64_t reissued;   /* portions issued again after their deadline, over all passes */
    int64_t duplicates; /* answers that lost to an earlier one, over all passes */
} rm_portions;

int rm_portions_init(rm_portions *ps, int P, int nworkers, double deadline_s, rm_err *err);
void rm_portions_free(rm_portions *ps);
/* A new pass: every portion pending. */
void rm_portions_begin(rm_portions *ps, int64_t pass);
/* Worker w asks for work at time now: a pending portion (lowest first); else one out past its
 * deadline that w does not hold (reissued; the deadline restarts); else RM_PORTION_NONE, or
 * RM_PORTION_DONE when all are in. */
int rm_portions_claim(rm_portions *ps, int w, double now);
/* The static split (the benchmark's baseline, not Sandblaster): worker w only ever gets the
 * portions i with i % nworkers == w, lowest first, and nothing is reissued. */
int rm_portions_claim_static(rm_portions *ps, int w);
/* Worker w's answer for portion i of pass: true when it is the first (counted for w and the
 * portion is done); false for a duplicate, a stale pass or a bad index. */
bool rm_portions_complete(rm_portions *ps, int64_t pass, int i, int w);
/* Worker w is gone: its outstanding portions are pending again. Returns how many. */
int rm_portions_worker_lost(rm_portions *ps, int w);
bool rm_portions_all_done(const rm_portions *ps);
#endif
