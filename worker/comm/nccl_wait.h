/* nccl_wait.h — the wait / timeout / abort state machine of the NCCL backend
 * (worker/comm/cuda/comm_nccl.c), behind a small probe table so that it compiles in every build and a
 * unit test drives it with a fake communicator (tests/unit/test_nccl_wait.c): in flight, async
 * error, peer death, abort from another thread.
 *
 * Waiting (rm_nccl_wait): a non-blocking NCCL operation is polled until done, failing fast on an
 * asynchronous error (a dead peer shows as ncclRemoteError -> RM_ECLOSED), on abort (RM_ECLOSED),
 * or on a deadline (RM_ETIMEDOUT). The deadline starts only once the operation's inputs are ready —
 * the compute-stream event the collective waits on — so the time the backward still runs is not
 * counted against the peers; waiting for that start has its own, longer bound.
 * Aborting (rm_nccl_guard): abort() may come from any thread. While a collective is in flight it
 * only raises the flag (the polling thread sees it and fails); otherwise it aborts at once. A
 * collective that finishes successfully while an abort arrived reports RM_ECLOSED and aborts the
 * communicator itself, so an abort is never lost; the communicator is aborted exactly once.
 * Ownership: the probe table and its ctx are borrowed for the call; the guard is the caller's
 * (init / destroy). Threads: one waiter per guard; rm_nccl_guard_abort from any thread. */
#ifndef RM_WORKER_NCCL_WAIT_H
#define RM_WORKER_NCCL_WAIT_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/rm.h"

/* Probe results: RM_NW_DONE, RM_NW_PENDING, or a negative RM_E* code with a reason in why[cap]. */
#define RM_NW_DONE 0
#define RM_NW_PENDING 1

typedef struct rm_nccl_probe {
    /* Have the operation's inputs become ready (the compute event)? NULL: ready at once. */
    int (*started)(void *ctx, char *why, size_t cap);
    /* Is the operation done (stream query, or the communicator left ncclInProgress)? */
    int (*done)(void *ctx, char *why, size_t cap);
    /* An asynchronous communicator error (ncclCommGetAsyncError): RM_NW_DONE when none (or still
     * in progress), a negative code otherwise (RM_ECLOSED for a remote peer's failure). NULL: none. */
    int (*async_error)(void *ctx, char *why, size_t cap);
    double (*now)(void *ctx);                  /* monotonic seconds */
    void (*pause)(void *ctx, double waited_s); /* between polls */
} rm_nccl_probe;

typedef struct rm_nccl_wait_cfg {
    const char *what;          /* "ncclAllReduce" — named in every error */
    double timeout_s;          /* bound once started */
    double start_timeout_s;    /* bound on waiting for started() */
    const atomic_int *aborted; /* may be NULL */
} rm_nccl_wait_cfg;

/* Polls until done: RM_OK; RM_ETIMEDOUT, RM_ECLOSED (abort or peer), or the probe's error, each
 * with err naming cfg->what. */
int rm_nccl_wait(const rm_nccl_probe *p, void *ctx, const rm_nccl_wait_cfg *cfg, rm_err *err);

/* The first collective on a new communicator also makes NCCL's connections (lazily): it gets the
 * init timeout, later ones the collective timeout. */
double rm_nccl_collective_timeout(bool first, double timeout_s, double init_timeout_s);

typedef struct rm_nccl_guard {
    pthread_mutex_t mu;
    bool in_flight;              /* a collective is being polled (under mu) */
    bool alive;                  /* the communicator exists and was not aborted (under mu) */
    atomic_int aborted;          /* abort requested or a collective failed */
    int aborts;                  /* times abort_fn ran (exactly once per communicator) */
    void (*abort_fn)(void *ctx); /* ncclCommAbort; runs under mu */
    void *ctx;
} rm_nccl_guard;

void rm_nccl_guard_init(rm_nccl_guard *g, void (*abort_fn)(void *ctx), void *ctx);
void rm_nccl_guard_destroy(rm_nccl_guard *g);
/* The communicator now exists (init finished). */
void rm_nccl_guard_set_alive(rm_nccl_guard *g);
/* Before a collective: RM_ECLOSED when aborted or not alive, else marks it in flight. */
int rm_nccl_guard_begin(rm_nccl_guard *g, rm_err *err);
/* After it: clears in flight. A failure (rc != RM_OK) or an abort that arrived meanwhile aborts the
 * communicator (once) and returns rc, or RM_ECLOSED for a success overtaken by an abort. */
int rm_nccl_guard_end(rm_nccl_guard *g, int rc, rm_err *err);
/* Any thread: raise the flag; abort now unless a collective is in flight (its thread will). */
void rm_nccl_guard_abort(rm_nccl_guard *g);
/* At destroy: true when the communicator may be finalized cleanly (alive, never aborted); else it
 * is aborted here (once) and false is returned. Clears alive either way. */
bool rm_nccl_guard_release(rm_nccl_guard *g);
#endif
