/* ps_registry.h — where the parameter servers are, and a (re)connection to one of them
 * (docs/strategies.md#roles-names-environment).
 *
 * The one lookup every client of the servers uses: the parameter-server workers (step_ps.c), the
 * Sandblaster L-BFGS workers (step_lbfgs.c) and the L-BFGS coordinator (lbfgs_coord.c, which talks
 * to every shard from server 0's process). The launch contract's RINGMASTER_PS_ADDRS says how many
 * servers there are; with a rendezvous, the servers register where they serve (rdzv.h "Servers":
 * their pod IP and port) and rm_ps_registry_connect reads that list before every connection it
 * opens, so no cluster DNS is needed and a server replaced at a new address is found again by the
 * next reconnect. Without a rendezvous (a static setup, unit tests) the list's own addresses are
 * used as they are.
 *
 * Ownership: the registry owns its rendezvous client (rm_ps_registry_free); the cancel and stop
 * flags are borrowed and must outlive it. Threads: a registry is used by one thread at a time (the
 * coordinator has its own; its rendezvous client is not shared with the server's main thread). */
#ifndef RM_WORKER_PS_REGISTRY_H
#define RM_WORKER_PS_REGISTRY_H
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include "common/rdzv.h"
#include "common/rm.h"
#include "common/trainingjob.h"
#include "worker/ps/ps_wire.h"

typedef struct rm_ps_registry {
    int n;                               /* servers */
    char addrs[RM_PS_MAX_SERVERS][128];  /* last known "host:port"; "": not yet known */
    char got[RM_PS_MAX_SERVERS][128];    /* scratch: the rendezvous' answer */
    rm_rdzv_client *rdzv;                /* owned; NULL: the static list */
    const volatile sig_atomic_t *cancel; /* borrowed (a worker's SIGTERM flag); NULL: none */
    const atomic_int *stop;              /* borrowed (a thread's stop flag); NULL: none */
} rm_ps_registry;

/* addrs[0..n): the launch contract's list (rm_ps_parse_addrs). rendezvous: its URL, or NULL/""
 * for the static list; job ("ns/name", NULL/"": "default/local"), token and id (the caller's name in
 * its requests, a rendezvous name: "3", "ps") as rm_rdzv_client_new takes them. With a rendezvous
 * every address starts unknown. RM_EINVAL (field RINGMASTER_RENDEZVOUS) when the URL, job or token
 * is unusable. On error nothing needs freeing. */
int rm_ps_registry_init(rm_ps_registry *g, const char (*addrs)[128], int n, const char *rendezvous,
                        const char *job, const char *token, const char *id, rm_err *err);
void rm_ps_registry_free(rm_ps_registry *g); /* NULL and a zeroed registry are fine */
/* Either flag, once non-zero, ends rm_ps_registry_connect's retries (RM_ECANCELED). */
void rm_ps_registry_set_cancel(rm_ps_registry *g, const volatile sig_atomic_t *cancel,
                               const atomic_int *stop);
bool rm_ps_registry_canceled(const rm_ps_registry *g);

/* Server i's address from the rendezvous into g->addrs[i] (kept when the rendezvous cannot say).
 * RM_OK; RM_ENOTFOUND: it has not registered; else the rendezvous' error. No-op without one. */
int rm_ps_registry_lookup(rm_ps_registry *g, int i, rm_err *err);

/* Open c to server i unless it is open: look its address up, connect and run the handshake as
 * `worker` with token, each try within RM_PS_TRY_S (a dead server's address is refused until the
 * try's deadline: a short try gets to the next lookup, which names its replacement, soon); a server
 * that is not registered or not reachable is tried again with back-off (0.1 s doubling to 2 s)
 * while the next try can start before deadline (rm_mono() seconds; deadline <= now: one try).
 * RM_EAUTH at once; RM_ECANCELED; otherwise the last try's error (RM_ETIMEDOUT when the address
 * was never known). */
#define RM_PS_TRY_S (RM_PS_HANDSHAKE_S + 1.0) /* the server drops a handshake after 2 s */
int rm_ps_registry_connect(rm_ps_registry *g, rm_ps_conn *c, int i, int worker, const char *token,
                           double deadline, rm_err *err);
#endif
