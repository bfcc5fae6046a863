/* leader.h — leader election on a coordination.k8s.io/v1 Lease with client-go's algorithm.
 *
 * A candidate GETs the Lease (creating it when absent). It may take the Lease when the holder is
 * empty, is itself, or when the holder's record has not changed for leaseDuration as measured on
 * the LOCAL monotonic clock from the moment this candidate last saw it change (so clock skew
 * between machines does not matter). Taking over is a PUT at the fetched resourceVersion
 * (acquireTime = now, leaseTransitions+1); a 409 means another candidate won. The leader renews
 * every retry period; if it cannot renew for renewDeadline it steps down. On stop, a leader
 * releases the Lease (holderIdentity "", leaseDurationSeconds 1) so a successor takes over at once.
 * Defaults: lease 15 s, renew deadline 10 s, retry 2 s.
 *
 * The elector talks through its own client (rm_kube_client_new_like): no rate limit, no retries
 * (its loop is the retry) and each request bounded by half the renew deadline, so a renew is
 * neither queued behind the reconcile traffic nor left hanging past the deadline while this
 * process still believes it leads.
 *
 * Ownership: strings in opts are copied; the client is borrowed and must outlive the elector. */
#ifndef RM_KUBE_LEADER_H
#define RM_KUBE_LEADER_H
#include <stdbool.h>
#include "common/rm.h"
#include "operator/kube/client.h"

typedef struct rm_leader rm_leader;

typedef struct rm_leader_opts {
    const char *namespace_;                    /* Lease namespace */
    const char *name;                          /* Lease name */
    const char *identity;                      /* this candidate (e.g. hostname_pid) */
    double lease_s, renew_deadline_s, retry_s; /* 0 = defaults 15 / 10 / 2 */
    /* Called from the elector thread on every change of leadership (true = became leader). */
    void (*on_change)(void *ud, bool leading);
    void *ud;
} rm_leader_opts;

int rm_leader_start(rm_kube_client *c, const rm_leader_opts *opts, rm_leader **out, rm_err *err);
bool rm_leader_is_leader(rm_leader *l);
/* Stop the thread; a leader releases the Lease first. NULL ok. */
void rm_leader_stop(rm_leader *l);

/* One step of the algorithm (exposed for tests): try to acquire or renew once at local monotonic
 * time `now`. Returns true when this candidate holds the Lease afterwards. */
bool rm_leader_try(rm_leader *l, double now);
/* Create an elector without its thread (tests drive rm_leader_try). */
int rm_leader_new(rm_kube_client *c, const rm_leader_opts *opts, rm_leader **out, rm_err *err);
/* Release now if leading (what stop does). */
int rm_leader_release(rm_leader *l);
#endif
