/* lbfgs_coord.h — Sandblaster L-BFGS on the parameter servers (docs/strategies.md#sandblaster-l-bfgs; Dean et al. 2012).
 *
 * Two parts, both hosted by `ringmaster-worker ps` processes of a job with
 * spec.training.optimizer.type lbfgs (worker/ps/ps_server.c calls in through its op table):
 *
 *   shard (every server): the L-BFGS vectors of its slice of the parameter vector — X (the
 *     server's own parameter array, so FETCH serves the current trial point), G (the pass'
 *     gradient, accumulated from workers' pushes), D, X0, G0 and the m (s, y) pairs — and the small
 *     operations the coordinator issues on them (LB_VEC: copy, axpy, scale, dot -> the partial
 *     dot, begin-pass). A push (LB_PUSH) carries a portion's gradient tagged (pass, portion): it is
 *     added to G once; a second push of the same portion (a reissued portion's backup) or one of
 *     another pass is dropped, so every portion counts exactly once whoever computed it.
 *
 *   coordinator (server 0's role; a thread of server 0's process): runs the passes. A pass cuts
 *     the full batch (portions x portionSize samples of epoch 0's permutation) into P portions;
 *     workers ask for one (LB_CLAIM, on demand: fast workers take more), compute loss and gradient
 *     on it at the current parameters, push the gradient to every shard and report the loss
 *     (LB_REPORT; the first answer for a portion wins); a portion out longer than its deadline
 *     (4x the mean portion time, at least 1 s) is reissued to another worker. Between passes the
 *     coordinator runs the two-loop recursion (worker/ps/lbfgs_core.h) over the shards by LB_VEC ops,
 *     then the Armijo line search (every trial step is another pass), then the curvature-pair
 *     update, also on the shards. The job's budget is spec.training.epochs passes (trial passes
 *     count). The coordinator connects to every server (itself included) over the same
 *     authenticated TCP as the workers (worker id RM_LBFGS_COORD_ID).
 *
 * Checkpoints and replacement: at every accepted point (a commit) the coordinator sets X0 = X and
 * G0 = G on every shard and sends COMMIT; each server writes its vectors before it answers (X0, G0, the (s, y) pairs:
 * everything but X) to <checkpoint dir>/lbfgs-vectors, and the coordinator its state (passes,
 * commit, loss, history bookkeeping) to <server 0's checkpoint dir>/lbfgs-coordinator; X itself is
 * in the server's ordinary shard checkpoint, written every pass (BEGIN bumps its version). A
 * replaced server restores both; the coordinator sees its new incarnation and asks every shard
 * which commit it holds: all at the coordinator's last commit -> every shard goes back to it
 * (X = X0, G = G0) and the iteration restarts from there with the history intact; otherwise the
 * history is dropped and the coordinator re-evaluates at the current parameters. A replaced
 * server 0 starts a new coordinator that restores its state file and resumes the same way, with a
 * new pass id space (workers see the new id and fetch).
 *
 * RINGMASTER_LBFGS_STATIC_SPLIT=1 (server 0's environment; bench/lbfgs only) replaces on-demand
 * portions by an equal static split without reissue, the baseline the straggler benchmark needs.
 *
 * Threads: the shard functions run under the server's mutex (the caller holds it). The
 * coordinator has its own mutex; rm_lbfgs_coord_claim/report/worker_lost are called from server 0's
 * connection threads. Ownership: rm_lbfgs_shard_new/free, rm_lbfgs_coord_start/stop own their
 * allocations; the server owns params (borrowed by the shard as X). */
#ifndef RM_WORKER_LBFGS_COORD_H
#define RM_WORKER_LBFGS_COORD_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "common/metrics.h"
#include "common/rm.h"
#include "common/trainingjob.h"
#include "worker/ps/ps_wire.h"

#define RM_LBFGS_COORD_ID 1023 /* the coordinator's worker id on the servers' handshake */

/* LB_VEC request encoding: step = code | a << 8 | b << 24 (a, b vector slots), from_version =
 * the IEEE bits of alpha (double); the reply's a = the IEEE bits of a dot's partial, version = the
 * shard's incarnation, b = 1 after BEGIN (the server then bumps its version, which checkpoints X:
 * an lbfgs server's version counts passes); COMMIT n (alpha = n) stages the vectors of accepted
 * point n for the server's vectors file; STATUS answers a = the commit the vectors hold. */
enum {
    RM_LBV_COPY = 1,
    RM_LBV_AXPY,
    RM_LBV_SCALE,
    RM_LBV_DOT,
    RM_LBV_BEGIN,
    RM_LBV_ZERO,
    RM_LBV_COMMIT,
    RM_LBV_STATUS
};
static inline int64_t rm_lbv_code(int code, int a, int b)
{
    return (int64_t)code | ((int64_t)a << 8) | ((int64_t)b << 24);
}
static inline int64_t rm_lb_dbits(double x)
{
    int64_t v;
    memcpy(&v, &x, sizeof v);
    return v;
}
static inline double rm_lb_bitsd(int64_t v)
{
    double x;
    memcpy(&x, &v, sizeof x);
    return x;
}

/* ---- shard ---- */
typedef struct rm_lbfgs_shard rm_lbfgs_shard;
/* dir: the server's checkpoint folder (its vectors file lbfgs-vectors is restored from there when
 * usable); NULL or "": none. */
int rm_lbfgs_shard_new(float *params, size_t len, int history, int portions, const char *dir,
                       rm_lbfgs_shard **out, rm_err *err);

void rm_lbfgs_shard_free(rm_lbfgs_shard *sh);
/* LB_VEC: q->step and q->from_version as above; fills r (status, a). Under the server's mutex. */
void rm_lbfgs_shard_vec(rm_lbfgs_shard *sh, const rm_ps_req *q, rm_ps_rep *r);
/* LB_PUSH: g is the shard's slice of a portion's gradient; q->step = pass id, q->world = portion.
 * r->status OK (added) or DROPPED (duplicate or another pass). Under the server's mutex. */
void rm_lbfgs_shard_push(rm_lbfgs_shard *sh, const rm_ps_req *q, const float *g, rm_ps_rep *r);

/* ---- coordinator ---- */
typedef struct rm_lbfgs_coord rm_lbfgs_coord;
typedef struct rm_lbfgs_coord_cfg {
    const rm_training_spec *t; /* borrowed for the coordinator's life */
    int world;                 /* workers */
    int nservers;
    char (*addrs)[128];     /* nservers "host:port" (the launch contract's list) */
    const char *rendezvous; /* its URL: the shards' addresses come from its server
                                       registry (ps_registry.h), no DNS; NULL/"": the list's */
    const char *token;
    const char *job;
    int64_t train_samples; /* training-set size; 0: unknown (the first claim says) */
    double timeout_s;
    rm_metrics *reg;       /* server 0's registry: ringmaster_lbfgs_* series */
    const char *state_dir; /* server 0's checkpoint folder (the passes done); NULL: none */
} rm_lbfgs_coord_cfg;

int rm_lbfgs_coord_start(const rm_lbfgs_coord_cfg *cfg, rm_lbfgs_coord **out, rm_err *err);
void rm_lbfgs_coord_stop(rm_lbfgs_coord *c);
/* LB_CLAIM from worker w (q->step = its training-set size): r->status OK with a = portion, b = its first sample, version = pass id
 * (fetch the parameters when it changed), from the reply's nfloats = 0; TIMEOUT: nothing to hand
 * out now (ask again); DONE: the budget is spent (fetch the final parameters). Waits up to 0.5 s
 * for work. */
void rm_lbfgs_coord_claim(rm_lbfgs_coord *c, int w, const rm_ps_req *q, rm_ps_rep *r);
/* LB_REPORT: q->step = pass id, q->world = portion, q->from_version = bits of the portion's loss
 * sum. r->status OK (first answer) or DROPPED. */
void rm_lbfgs_coord_report(rm_lbfgs_coord *c, int w, const rm_ps_req *q, rm_ps_rep *r);
/* Worker w's connection to server 0 closed: its outstanding portions go back to the queue. */
void rm_lbfgs_coord_worker_lost(rm_lbfgs_coord *c, int w);
/* Samples per portion (a multiple of the batch) and the pass' total, as the workers compute them. */
int64_t rm_lbfgs_portion_size(int64_t train_samples, int portions, int batch);
#endif
