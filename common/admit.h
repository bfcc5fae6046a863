/* admit.h — the rule every ringmaster TCP listener applies to connections that have not proved the
 * job token yet (the ring's listener, worker/comm/comm_ring.c; the parameter servers,
 * worker/ps/ps_server.c; docs/architecture.md#robustness): such a connection is "pending"; a listener
 * holds at most per_src pending connections from one source address and at most max in all, makes
 * room for a new one by dropping the oldest pending connection of the same source (else the oldest
 * of all), and drops every pending connection RM_ADMIT_HANDSHAKE_S after its accept. Pending
 * connections never count against the members (authenticated peers), so a stranger that keeps
 * connections open costs a member at most one handshake's delay, never its place.
 *
 * The module is the decision only: the caller owns its table of pending connections (with whatever
 * else it keeps per connection), embeds one rm_admit_pending in each entry, and closes what it is
 * told to drop. Pure functions; no allocation, no locking (the caller's table, the caller's lock). */
#ifndef RM_ADMIT_H
#define RM_ADMIT_H
#include <stddef.h>
#include <stdint.h>

#define RM_ADMIT_HANDSHAKE_S 2.0 /* accept -> token proved, or the connection is dropped */

typedef struct rm_admit_pending {
    uint32_t src; /* IPv4 source address, network order */
    double t0;    /* accepted at (monotonic seconds) */
} rm_admit_pending;

/* Which pending connection to drop before admitting a new one from src: the table is n entries,
 * the first one's rm_admit_pending at `first`, the next ones `stride` bytes apart (an array of the
 * caller's structs with the member embedded: &arr[0].adm, sizeof arr[0]). Returns the index to
 * drop, or -1 when there is room; *why (may be NULL) gets a static reason for the log. */
int rm_admit_victim(const rm_admit_pending *first, size_t stride, int n, uint32_t src, int per_src, int max,
                    const char **why);

/* The index of a pending connection whose handshake bound has passed at `now`, or -1; *next_due
 * (may be NULL) is lowered to the earliest bound still ahead (a poll timeout). */
int rm_admit_expired(const rm_admit_pending *first, size_t stride, int n, double now, double *next_due);
#endif
