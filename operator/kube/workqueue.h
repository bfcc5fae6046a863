/* workqueue.h — the controller's work queue, with client-go's semantics.
 *
 *  - De-duplicating: a key added while it waits is stored once ("dirty" set).
 *  - One key, one worker: a key being processed is not handed out again; if it is added meanwhile
 *    it is re-queued when the worker calls rm_wq_done.
 *  - Delayed adds (rm_wq_add_after): kept in a min-heap; only the earliest pending time per key is
 *    kept.
 *  - Rate-limited adds (rm_wq_add_rate_limited): per-key exponential back-off (base·2^failures,
 *    capped) combined with an overall token bucket (qps, burst), the larger delay wins;
 *    rm_wq_forget resets a key's failures.
 *  - Two lanes: background adds (rm_wq_add_low: the periodic resync) wait behind every ordinary
 *    add, so one job's change is not queued behind a resync of every job; with low_workers set,
 *    only that many low-lane keys are processed at once, so a resync does not take every worker
 *    (and every core) while a change is reconciled.
 *  - Shutdown wakes every waiting rm_wq_get, which then returns RM_ECLOSED.
 *
 * Keys are copied in; rm_wq_get hands out an owned copy the worker passes back to rm_wq_done and
 * then frees. Thread-safe. Times come from an injectable clock (tests) or CLOCK_MONOTONIC. */
#ifndef RM_KUBE_WORKQUEUE_H
#define RM_KUBE_WORKQUEUE_H
#include <stdbool.h>
#include <stddef.h>
#include "common/rm.h"

typedef struct rm_wq rm_wq;

/* Observations for metrics (may be NULL): depth after every change, every add, and the time a
 * key waited between being queued and being handed out. Called under the queue lock: they must be
 * quick and must not call back into the queue. */
typedef struct rm_wq_hooks {
    void (*depth)(void *ud, size_t depth);
    void (*added)(void *ud);
    void (*latency)(void *ud, double seconds);
    void *ud;
} rm_wq_hooks;

typedef struct rm_wq_opts {
    double base_delay_s;     /* per-key back-off start; default 0.005 */
    double max_delay_s;      /* per-key back-off cap; default 1000 */
    double qps;              /* overall bucket; default 10 (0 = default, <0 = off) */
    int burst;               /* default 100 */
    double (*now)(void *ud); /* clock (seconds); NULL = monotonic */
    void *now_ud;
    rm_wq_hooks hooks;
    int low_workers; /* at most this many low-lane keys processed at once; 0 = no limit */
} rm_wq_opts;

rm_wq *rm_wq_new(const rm_wq_opts *opts); /* NULL opts = defaults; NULL on ENOMEM */
void rm_wq_free(rm_wq *q);                /* NULL ok; call after every worker returned */

int rm_wq_add(rm_wq *q, const char *key);
/* A background add (the periodic resync): handed out only when no ordinary add waits; an ordinary
 * add of the same key before then moves it to the front. */
int rm_wq_add_low(rm_wq *q, const char *key);
int rm_wq_add_after(rm_wq *q, const char *key, double delay_s);
int rm_wq_add_rate_limited(rm_wq *q, const char *key);
/* The delay rm_wq_add_rate_limited would use now (and counts a failure): for tests and logging. */
double rm_wq_when(rm_wq *q, const char *key);
void rm_wq_forget(rm_wq *q, const char *key);
int rm_wq_num_requeues(rm_wq *q, const char *key);

/* Block up to timeout_s (<0 = forever) for a key. RM_OK with *key owned; RM_ETIMEDOUT;
 * RM_ECLOSED after shutdown. */
int rm_wq_get(rm_wq *q, double timeout_s, char **key);
void rm_wq_done(rm_wq *q, const char *key);

size_t
rm_wq_len(rm_wq *q); /* keys ready to be handed out (either lane; may over-count a key moved to the front) */
size_t rm_wq_delayed(rm_wq *q); /* keys waiting for their time */
void rm_wq_shutdown(rm_wq *q);
bool rm_wq_shutting_down(rm_wq *q);
#endif
