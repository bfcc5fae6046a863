/* ps_core.h — the parameter server's pure rules (docs/strategies.md#parameter-servers): how the
 * flat parameter vector is split into shards, which pushed gradient a server applies, averages or
 * drops (synchronous mode with backup workers, Chen et al. 2016), and when a fast worker must wait
 * for the slowest live one (bounded staleness, asynchronous Downpour). No I/O, no clocks of their
 * own, no allocation after init: worker/ps/ps_server.c executes what these functions decide, and
 * tests/unit/test_ps.c checks them as tables.
 *
 * Ownership: rm_ps_sync owns its accumulator (rm_ps_sync_free); everything else is plain values. */
#ifndef RM_WORKER_PS_CORE_H
#define RM_WORKER_PS_CORE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"

#define RM_PS_MAX_WORKERS 1024

/* ---- shards ----
 * S contiguous ranges [off[i], off[i]+len[i]) covering [0, total) in order. Each cut starts at its
 * balanced position i*total/S and moves to the nearest layer boundary when one lies within
 * total/(8S) of it, so a shard is never more than one such step (a quarter of 1/S in all) from
 * 1/S of the floats, and whole layers stay on one server when that costs little balance.
 * bounds: the layer boundaries (offsets of layer starts, ascending, may include 0 and total);
 * nb may be 0. RM_EINVAL when S < 1, S > total or S > 64. */
int rm_ps_partition(size_t total, const size_t *bounds, int nb, int S, size_t *off, size_t *len, rm_err *err);

/* ---- synchronous rule ----
 * Step k (= the server's version) is applied as soon as `need` (N - b) distinct workers pushed a
 * gradient tagged k; exactly those are summed and averaged; later pushes tagged k (or older) are
 * dropped and counted; a second push from the same worker for k is a duplicate (dropped). */
typedef enum {
    RM_PS_ACCEPTED = 0, /* counted; the step still waits for more */
    RM_PS_COMPLETE,     /* counted and the step has its N-b: call rm_ps_sync_average, apply */
    RM_PS_DROP_LATE,    /* tagged with an older version: the step was applied without it */
    RM_PS_DROP_DUP,     /* this worker already pushed for this version */
    RM_PS_AHEAD,        /* tagged with a version the server does not have yet: a bug or a stale
                             server (restored from an older checkpoint); refused */
    RM_PS_BAD,          /* worker id out of range */
} rm_ps_outcome;
const char *rm_ps_outcome_name(rm_ps_outcome o);

typedef struct rm_ps_sync {
    size_t n;        /* floats of the shard */
    int64_t version; /* steps applied */
    int need;        /* N - b (>= 1) */
    int count;       /* gradients summed for `version` so far */
    uint64_t seen[RM_PS_MAX_WORKERS / 64];
    float *accum;     /* owned, n floats; meaningful only while count > 0 (the first
                                 gradient of a step is copied in, later ones added: no clearing) */
    uint64_t dropped; /* late + duplicate pushes dropped so far */
} rm_ps_sync;

int rm_ps_sync_init(rm_ps_sync *s, size_t n, int64_t version, int need, rm_err *err);
void rm_ps_sync_free(rm_ps_sync *s);
/* need changes take effect for the step in progress (a world that shrank completes it sooner). */
void rm_ps_sync_set_need(rm_ps_sync *s, int need);
/* Judge (and on ACCEPTED/COMPLETE, add) one worker's gradient of n floats for step tag. */
rm_ps_outcome rm_ps_sync_push(rm_ps_sync *s, int worker, int64_t tag, const float *grad);
/* After COMPLETE (or when count >= need after a shrink): out = accum / count (out may be accum
 * itself: averaged in place, one pass over the shard, read before the next push), the step's
 * gradients are forgotten and version advances. Returns how many were averaged (0: none). */
int rm_ps_sync_average(rm_ps_sync *s, float *out);
/* Forget the step in progress and stand at version (a shard rolled back). */
void rm_ps_sync_reset(rm_ps_sync *s, int64_t version);
/* Is the step in progress complete (count >= need, count > 0)? */
bool rm_ps_sync_ready(const rm_ps_sync *s);

/* ---- the workers alive (who a synchronous step waits for; docs/strategies.md#failure-semantics) ----
 * Every request carries the worker's view of the group: the rendezvous epoch of that view and how
 * many workers are alive in it — the round's world, or, once the controller declared a worker dead
 * (it opens the next epoch) and the survivors' re-joins settled, how many re-joined. Within one
 * epoch the count only grows (joiners accumulate; another death opens another epoch), so the
 * newest view is the greatest (epoch, live); an older one, still carried by a worker that has not
 * heard yet, is ignored. A step then waits for live - b gradients (at least 1), so with b = 0 the
 * servers proceed with the survivors and take the replacement back when its round closes. */
typedef struct rm_ps_view {
    int64_t epoch;
    int live;
} rm_ps_view;
/* Take (epoch, live) when it is newer than *v; true when *v changed. A live outside
 * 1..RM_PS_MAX_WORKERS or a negative epoch is ignored. */
bool rm_ps_view_note(rm_ps_view *v, int64_t epoch, int live);
/* Gradients a synchronous step waits for: live - backups, at least 1. */
int rm_ps_sync_need_for(int live, int backups);
/* The learning-rate factor of a step averaged over the batches of `live` of the job's n workers:
 * the linear scaling rule (Goyal et al. 2017), live / n; 1 when live >= n or n < 1. */
float rm_ps_lr_scale(int live, int n);

/* ---- bounded staleness (stale synchronous parallel) ----
 * The clocks of the workers a server has heard from: their step and when. A worker at step c may
 * go on when bound == 0 (unbounded) or c - min(step of every live worker) <= bound; a worker is
 * live when heard from within dead_after seconds (a dead one never holds the others). */
typedef struct rm_ps_clocks {
    int64_t step[RM_PS_MAX_WORKERS];
    double seen[RM_PS_MAX_WORKERS]; /* 0: never */
} rm_ps_clocks;
void rm_ps_clocks_note(rm_ps_clocks *c, int worker, int64_t step, double now);
/* The slowest live worker's step (INT64_MAX when none is live). */
int64_t rm_ps_clocks_min(const rm_ps_clocks *c, double now, double dead_after);
bool rm_ps_clocks_may_proceed(const rm_ps_clocks *c, int worker, int64_t step, int bound, double now,
                              double dead_after);

/* ---- warm start (asynchronous mode; Dean et al. 2012, Downpour: "warmstarting" with one replica
 * before the others join) ----
 * spec.parameterServer.warmStartSteps W > 0: until W updates are applied (the server's version),
 * only worker 0 draws batches; every other worker is held at its draw and starts once the W-th
 * update is applied. A worker 0 that was heard from (ps_clocks) and then silent for dead_after no
 * longer holds the others (a dead warm-up worker must not stall the job); one never heard from yet
 * is still starting and holds them. W = 0: nobody is held. */
bool rm_ps_warm_holds(int worker, int64_t applied, int64_t warm, const rm_ps_clocks *c, double now,
                      double dead_after);
/* The staleness bound in force: 0 (unbounded) during the warm-up, where worker 0 runs alone and
 * must not wait for the workers held at their draws; `bound` after it. */
int rm_ps_warm_bound(int bound, int64_t applied, int64_t warm);

/* Staleness of an asynchronous push: how many updates the server applied since the version the
 * gradient was computed from (0 when the worker was current; never negative). */
static inline int64_t rm_ps_staleness(int64_t server_version, int64_t from_version)
{
    return server_version > from_version ? server_version - from_version : 0;
}
/* ---- the servers' agreement on one version (docs/strategies.md#failure-semantics) ----
 * A model never mixes shards of different versions. Every server registers with the rendezvous
 * its incarnation (a random id per process), the versions it holds checkpoints of, and where it
 * stands in the agreement; it reads everyone's record back and asks rm_ps_agree_decide what to
 * do. The generation is the vector of the S incarnations: a server that (re)starts opens a new
 * one. In a new generation every server first stops serving (PAUSE) and re-registers its held
 * versions, which then no longer change; once all S are paused at it, each computes the same V,
 * the newest version every shard holds a checkpoint of (servers write them at the same versions,
 * multiples of the interval; none in common: 0, the initial parameters), rolls its own shard back
 * to V (ROLL: a no-op for one already there, as after the local runner's own rollback) and says
 * so; all serve once all S settled on V in this generation. A server that cannot load V drops it
 * from its held versions and stays unsettled, so the group settles on an older one. */
#define RM_PS_HELD_MAX 32 /* checkpointed versions a server reports (newest first) */
typedef struct rm_ps_member {
    bool known;                   /* registered with its agreement record */
    uint64_t inc;                 /* incarnation (never 0) */
    uint64_t gen;                 /* the generation it paused at (0: none yet) */
    bool settled;                 /* it rolled to `at` in gen */
    int64_t at;                   /* the version it settled on */
    int64_t version;              /* its shard's version now */
    int nheld;                    /* 0..RM_PS_HELD_MAX */
    int64_t held[RM_PS_HELD_MAX]; /* versions it holds a checkpoint of (any order) */
} rm_ps_member;
typedef enum {
    RM_PS_AGREE_WAIT = 0, /* nothing to do now (someone has not registered or paused yet) */
    RM_PS_AGREE_PAUSE,    /* stop serving, record gen, re-register the held versions */
    RM_PS_AGREE_ROLL,     /* roll the shard back to version (or confirm it is there), then settle */
    RM_PS_AGREE_SERVE,    /* every server settled on version in gen: serve */
} rm_ps_agree_act;
extern const char *const rm_ps_agree_act_names[]; /* "wait", "pause", "roll", "serve" */
typedef struct rm_ps_agree {
    rm_ps_agree_act act;
    uint64_t gen;    /* the generation of the records */
    int64_t version; /* ROLL, SERVE: V */
} rm_ps_agree;
/* The generation of S incarnations (a hash, never 0). */
uint64_t rm_ps_agree_gen(const uint64_t *inc, int S);
/* The newest version in every member's held list; 0 when there is none. */
int64_t rm_ps_agree_common(const rm_ps_member *m, int S);
/* What server self (0..S-1) does given every server's record m[0..S). */
rm_ps_agree rm_ps_agree_decide(const rm_ps_member *m, int S, int self);
#endif
