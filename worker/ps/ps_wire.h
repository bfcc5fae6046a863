/* ps_wire.h — the parameter-server protocol (docs/strategies.md#parameter-servers): the authenticated TCP connection a worker
 * holds to each server, its framing, and the small op table a server dispatches on.
 *
 * Handshake (the ring's, worker/comm/comm_ring.c, with its own labels; the token never crosses the
 * wire; rm_net_hs_mac): HELLO{magic, version, worker, server index, nonce_c} ->
 * CHALLENGE{magic, version, index, 0, nonce_s, HMAC(token, "ringmaster-ps-v1 acc"|index|worker|S|
 * nonces)} -> PROOF{magic, HMAC(token, "ringmaster-ps-v1 con"|...)} -> ACK{magic, 0 | REFUSED | FULL}.
 * A server that cannot prove the token is refused by the worker; a worker that cannot is refused
 * (and logged) by the server.
 *
 * Frames (host byte order: peers run the same build, as the ring's frames): a fixed request
 * header, then nfloats floats; a fixed reply header, then nfloats floats. Both carry a check word,
 * so garbage is refused before any payload is read, and nfloats is capped by the receiver (a
 * server takes exactly its shard; a worker at most what it asked for).
 *
 * Ops (a table in the server, so later strategies — Sandblaster L-BFGS (docs/strategies.md#sandblaster-l-bfgs) — add entries):
 *   INFO   -> a = shard offset, b = shard length, version
 *   FETCH  step = the version wanted: the reply waits (bounded) until the shard has it -> floats
 *   PUSH   step = tag (sync: the version the gradient is for; async: the worker's clock),
 *          from_version, lr, world, floats = the gradient of the shard -> status, version
 *   DRAW   (server 0, async) step = the budget in batches -> a = the next global batch, or
 *          status DONE when the budget is drawn, or status TIMEOUT ("not yet": ask again) while
 *          the warm start holds the worker (ps_core.h); b = the version a worker starting now
 *          takes as its clock (0 without a warm start)
 *
 * Ownership: rm_ps_conn owns its socket (rm_ps_conn_close). */
#ifndef RM_WORKER_PS_WIRE_H
#define RM_WORKER_PS_WIRE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/admit.h"
#include "common/rm.h"

#define RM_PS_MAGIC 0x524d5053u /* "RMPS" */
#define RM_PS_VERSION 1u
#define RM_PS_CHECK 0x7c31a9e5u
#define RM_PS_HANDSHAKE_S RM_ADMIT_HANDSHAKE_S /* accept -> proof checked, or dropped (common/admit.h) */
#define RM_PS_REFUSED 1u                       /* ACK status: the proof was wrong */
#define RM_PS_FULL 2u /* ACK status: the proof was right, but the server has no room for a member */
#define RM_PS_MAX_FLOATS (1u << 30) /* the largest model (RM_TJ_MAX_PARAMS) */

/* LB_* (Sandblaster L-BFGS, worker/ps/lbfgs_coord.h): LB_VEC a vector op on the shard's L-BFGS
 * vectors (from the coordinator), LB_PUSH a portion's gradient (shard payload), LB_CLAIM and
 * LB_REPORT (server 0: the coordinator's portions). */
enum {
    RM_PS_OP_INFO = 1,
    RM_PS_OP_FETCH,
    RM_PS_OP_PUSH,
    RM_PS_OP_DRAW,
    RM_PS_OP_LB_VEC,
    RM_PS_OP_LB_PUSH,
    RM_PS_OP_LB_CLAIM,
    RM_PS_OP_LB_REPORT,
    RM_PS_OP__COUNT
};
enum { RM_PS_ST_OK = 0, RM_PS_ST_DROPPED, RM_PS_ST_TIMEOUT, RM_PS_ST_BAD, RM_PS_ST_DONE };

typedef struct rm_ps_req {
    uint32_t magic, op, worker, world;
    int64_t step, from_version;
    float lr;
    uint32_t nfloats, check;
    uint32_t group; /* the rendezvous epoch of the worker's view; world = the workers alive in it
                         (ps_core.h "the workers alive") */
} rm_ps_req;

typedef struct rm_ps_rep {
    uint32_t magic, status;
    int64_t version, a, b;
    uint32_t nfloats, check;
} rm_ps_rep;

static inline uint32_t rm_ps_req_check(const rm_ps_req *q)
{
    return RM_PS_CHECK ^ q->magic ^ (q->op * 2654435761u) ^ q->nfloats ^ q->worker;
}
static inline uint32_t rm_ps_rep_check(const rm_ps_rep *r)
{
    return RM_PS_CHECK ^ r->magic ^ (r->status * 2246822519u) ^ r->nfloats;
}

/* Server side of the handshake on an accepted socket: *worker gets the worker id the peer
 * proved. claim (may be NULL: always room) is asked once the proof checked out whether the peer
 * may become a member; when it says no, the peer is told FULL and the call fails RM_EAGAIN.
 * RM_EAUTH (refusal sent) on a wrong proof, RM_EPROTO on garbage, RM_ETIMEDOUT. */
int rm_ps_hs_accept(int fd, const char *token, int index, int nservers, double deadline,
                    bool (*claim)(void *ctx), void *ctx, int *worker, rm_err *err);

/* A worker's connection to one server. */
typedef struct rm_ps_conn {
    int fd;    /* -1: not connected */
    int index; /* server index */
    char host[128];
    int port;
} rm_ps_conn;

/* Connect to "host:port" and prove the token (deadline: absolute, monotonic seconds). RM_EAUTH
 * when either side's proof fails; RM_EAGAIN when the server is full (it says so: try later). */
int rm_ps_conn_open(rm_ps_conn *c, const char *addr, int index, int nservers, int worker, const char *token,
                    double deadline, rm_err *err);
void rm_ps_conn_close(rm_ps_conn *c);
/* Send a request (header + payload of q->nfloats floats; payload may be NULL when 0). */
int rm_ps_send(rm_ps_conn *c, rm_ps_req *q, const float *payload, double deadline, rm_err *err);
/* rm_ps_send, then (q2 not NULL) a second request without payload, in one gather write: the sync
 * step's push and the fetch behind it (step_ps.c). q2 must have nfloats 0. */
int rm_ps_send2(rm_ps_conn *c, rm_ps_req *q, const float *payload, rm_ps_req *q2, double deadline,
                rm_err *err);
/* Server side: a reply header (magic and check set here) and its r->nfloats floats from payload,
 * in one gather write. */
int rm_ps_reply(int fd, rm_ps_rep *r, const float *payload, double deadline, rm_err *err);
/* Receive a reply header and its payload into buf (cap floats); a reply larger than cap, with a
 * bad magic or check is RM_EPROTO. */
int rm_ps_recv(rm_ps_conn *c, rm_ps_rep *r, float *buf, size_t cap, double deadline, rm_err *err);

/* "h:p,h:p,..." into addrs (n at most max; strings copied into addrs[i], 128 bytes each). */
int rm_ps_parse_addrs(const char *list, char addrs[][128], int max, int *n, rm_err *err);
#endif
