/* comm_ring.c — the "ring" backend: bandwidth-optimal ring allreduce over TCP.
 *
 * Algorithm (Patarasuk & Yuan; Baidu/Horovod ring): the buffer is cut into n segments (the shard
 * layout of worker/allreduce/shard.h); in 2(n-1) steps each rank sends one segment to next = (r+1)%n and
 * receives one from prev (step t sends segment r-1-t, so the scatter-reduce leaves rank r with
 * segment r: reduce-scatter and all-gather are the two halves, see ring_kind_steps). Steps
 * 0..n-2 are scatter-reduce (received data lands in a small scratch piece and is added into the
 * destination: dst = src + scratch), steps n-1..2n-3 are all-gather (received data lands directly
 * in the destination, zero copy). Each rank sends and receives 2(n-1)/n of the buffer. Every
 * element is reduced along one fixed chain and then copied, so the result is bit-identical on all
 * ranks; AVG scales the owned segment once, before the all-gather.
 *
 * Pipelining: segments are cut into pieces (default 512 KiB). The send of piece j of step t needs
 * only piece j of step t-1 received (and reduced), so sending, receiving and reducing overlap
 * across steps. One thread drives both sockets with non-blocking sendmsg/recvmsg and poll();
 * with >= 4 CPUs (or RINGMASTER_RING_TX_THREAD=1) collectives from 1 MiB use a per-comm sender
 * thread that sends while the caller's thread receives and reduces (the dependency travels
 * through an atomic piece counter), so the user->kernel and kernel->user copies run on two cores. Two ranks with <= 64 KiB do a single exchange (half the latency). The kernel's socket
 * buffers (4 MiB) keep data moving while we reduce. Each piece is framed by a 16-byte header
 * (magic, sequence number, length, check; host byte order: peers run the same build) so desync
 * or garbage is RM_EPROTO.
 *
 * Connection setup: connect to next, and take prev's connection from the worker's ring listener.
 * Handshake (no token on the wire): HELLO{epoch, rank, world, nonce_c} ->
 * CHALLENGE{epoch, rank, nonce_a, HMAC(token, acc|epoch|ranks|nonces)} ->
 * PROOF{HMAC(token, con|epoch|ranks|nonces)} -> ACK{0, or REFUSED when the proof was wrong}. Both
 * MACs bind the epoch and both nonces, so a HELLO replayed or forged for any epoch fails at its proof.
 *
 * Strangers (docs/architecture.md#robustness): the listener (rm_ring_listener) is a thread that lives as long as the
 * worker and accepts and handshakes all the time, training included, so nothing waits in the
 * kernel's backlog for the next formation. It runs every handshake at once in one poll loop, drops
 * a connection that has not proved the token within RM_ADMIT_HANDSHAKE_S of its accept, holds at most
 * RL_PENDING_PER_SRC unfinished handshakes per source address (and RL_PENDING_MAX overall: the
 * oldest is dropped to make room), refuses HELLOs for an epoch older than the worker's, and parks
 * authenticated connections (epoch, rank) until ring_init claims the one from its prev. So a
 * formation's deadline is spent waiting for authenticated peers only, silent or forged connections
 * cost nobody a restart, refusals are logged at most 5 per 10 s with a count of the rest, and the
 * connector reports "wrong token" only when the next rank's listener explicitly refused its proof.
 * A caller without a long-lived listener (bench, static worlds) gets one for the formation only.
 *
 * Timeouts: every wait is bounded by cfg.timeout_s of no progress; a closed peer is RM_ECLOSED at
 * once; abort() sets a flag and shutdown()s both sockets, which wakes poll() in the owning thread. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "worker/comm/comm.h"
#include "common/admit.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/ratelimit.h"
#include "worker/comm/net.h"
#include "worker/allreduce/shard.h"

#define RING_MAGIC 0x524d5247u /* "RMRG" handshake */
#define RING_VERSION 1u
#define FRAME_MAGIC RM_NET_FRAME_MAGIC /* "RMFR" data frames (worker/comm/net.h: shared framing) */
#define RING_SOCKBUF (4 << 20)
#define RING_DEFAULT_PIECE_BYTES (512u << 10)
#define RING_REFUSED 1u /* acknowledgement status: the proof was wrong */
#define RING_TOKEN_MAX 255
#define RL_PENDING_MAX 64                   /* unfinished handshakes held at once ... */
#define RL_PENDING_PER_SRC 16               /* ... and from one source address */
#define RL_READY_MAX 16                     /* authenticated connections parked for ring_init */
#define RING_EXCHANGE_MAX_BYTES (64u << 10) /* 2 ranks up to here: one exchange, not 2 steps */
#define RING_TX_MIN_BYTES (1u << 20)        /* from here on a sender thread sends */
/* RINGMASTER_RING_SPIN_US=N: before sleeping in poll(), retry the non-blocking socket calls for up to
 * N us, yielding the CPU between tries. A sleeping rank is woken by the peer's data only after the
 * scheduler (in a VM, the vCPU's wake-up) gets to it, 10-15 us here, against a few us for the data
 * itself: with 50 us a 2-rank 1 KiB allreduce takes 7 us instead of 20 on an idle machine. Off by
 * default: training on an idle machine gained nothing measurable, and with other processes on the
 * cores (or a pod's CPU quota) the spinning took their CPU and slowed a small-model job by about 20%
 * (BENCHMARKS.md, allreduce notes). Only collectives up to RING_SPIN_MAX_BYTES spin: larger ones are
 * bandwidth-bound and stall many times per call. */
#define RING_SPIN_US_DEFAULT 0
#define RING_SPIN_MAX_BYTES (1u << 20)
/* A HELLO's world word carries the ring's group (rm_comm_cfg.group) above the world size, so one
 * listener keeps the connections of several rings of one epoch apart (comm_hier.c's intra- and
 * inter-node rings, a pipeline's stage links and data-parallel groups). Group 0 is the round's
 * world: its HELLO is unchanged. */
#define RING_TAG_SHIFT 16
/* 16 bits of world (up to 65,535 ranks: RM_RDZV_MAX_WORLD is 16,384) and 16 of group (ring_init
 * refuses a group above 0xffff): together the one 32-bit word of the HELLO frame */
_Static_assert(RM_RDZV_MAX_WORLD < (1 << RING_TAG_SHIFT), "world must fit below the ring tag");

struct rm_comm {
    int rank, n, epoch;
    uint32_t tag; /* cfg.group: which ring of the formation (0 = the round's world) */
    int next_fd, prev_fd;
    double timeout_s;
    double spin_s; /* busy-poll this long before sleeping in poll() (0: never) */
    atomic_int aborted;
    atomic_int broken;           /* a collective failed: peers may be out of step */
    uint32_t send_seq, recv_seq; /* send_seq: sending thread only; recv_seq: receiving only */
    size_t piece;                /* floats per piece */
    int sockbuf;                 /* SO_SNDBUF/SO_RCVBUF bytes */
    float *scratch;              /* one piece */

    /* Sender thread for large collectives: the caller's thread receives and reduces, this one
     * sends, so the two copies of a piece (kernel->user for the next piece, user->kernel for the
     * reduced one) run on both cores. One job at a time, handed over under mu. */
    int tx_started, tx_stop;
    pthread_t tx;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* job posted / job done / receive progress / failure */
    unsigned tx_job, tx_done;
    const float *j_src;
    float *j_dst;
    size_t j_count;
    int j_kind;             /* ring_kind */
    atomic_size_t rx_count; /* pieces received (and reduced) in the current job */
    int fail_rc;            /* first failure of the current job (under mu) */
    rm_err fail_err;
};

static void ring_wake(rm_comm *c);
static void *ring_tx_main(void *arg);

typedef rm_net_frame frame_hdr;

/* ------------------------------------------------------------------------------------------ */
/* handshake                                                                                    */

enum { HELLO_LEN = 20 + 16, CHAL_LEN = 16 + 16 + 32, PROOF_LEN = 4 + 32, OK_LEN = 8 };

static void put32(uint8_t *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

static void ring_mac(const char *token, const char *role, uint32_t epoch, uint32_t a, uint32_t b,
                     const uint8_t nc[16], const uint8_t na[16], uint8_t out[32])
{
    char label[32];
    snprintf(label, sizeof label, "ringmaster-ring-v1 %s", role);
    rm_net_hs_mac(token, label, epoch, a, b, nc, na, out);
}

static int ring_connect(rm_comm *c, const rm_comm_cfg *cfg, double deadline, uint8_t nonce_c[16], rm_err *err)
{
    int next = (c->rank + 1) % c->n;
    char host[64];
    int port, rc;
    RM_CHECK(rm_comm_split_addr(cfg->peers[next].addr, host, sizeof host, &port, err));
    rm_err e2 = {0};
    rc = rm_net_connect(host, port, deadline, &c->next_fd, &e2);
    if (rc)
        return rm_errf(err, rc, "ring: next rank %d: %s", next, e2.msg);
    rm_net_tune(c->next_fd, c->sockbuf);
    uint8_t hello[HELLO_LEN];
    put32(hello, RING_MAGIC);
    put32(hello + 4, RING_VERSION);
    put32(hello + 8, (uint32_t)c->epoch);
    put32(hello + 12, (uint32_t)c->rank);
    put32(hello + 16, (uint32_t)c->n | c->tag << RING_TAG_SHIFT); /* world | ring tag */
    rm_net_random(nonce_c, 16);
    memcpy(hello + 20, nonce_c, 16);
    return rm_net_send_all(c->next_fd, hello, sizeof hello, deadline, err);
}

/* Connector side: challenge -> proof -> acknowledgement. Only an explicit refusal from the next
 * rank's listener (it checked our proof and it was wrong) is reported as a wrong token; a close
 * means the listener dropped us for another reason (stale epoch, its handshake bound). */
static int ring_connector_handshake(rm_comm *c, const char *token, const uint8_t nonce_c[16], double deadline,
                                    rm_err *err)
{
    int next = (c->rank + 1) % c->n;
    uint8_t ch[CHAL_LEN], mac[32], proof[PROOF_LEN], ok[OK_LEN];
    rm_err e2 = {0};
    int rc = rm_net_recv_all(c->next_fd, ch, sizeof ch, deadline, &e2);
    if (rc == RM_ECLOSED)
        return rm_errf(err, RM_ECLOSED,
                       "ring: next rank %d closed the connection before its challenge "
                       "(it is not in epoch %d yet, or has moved past it)",
                       next, c->epoch);
    if (rc)
        return rm_errf(err, rc, "ring: next rank %d: waiting for its challenge: %s", next, e2.msg);
    if (get32(ch) != RING_MAGIC || get32(ch + 4) != RING_VERSION)
        return rm_errf(err, RM_EPROTO, "ring: next rank %d answered with a bad magic/version", next);
    if (get32(ch + 8) != (uint32_t)c->epoch || get32(ch + 12) != (uint32_t)next)
        return rm_errf(err, RM_EPROTO, "ring: next answered as epoch %u rank %u, want epoch %d rank %d",
                       get32(ch + 8), get32(ch + 12), c->epoch, next);
    ring_mac(token, "acc", (uint32_t)c->epoch, (uint32_t)next, (uint32_t)c->rank, nonce_c, ch + 16, mac);
    if (!rm_net_ct_equal(mac, ch + 32, 32))
        return rm_errf(err, RM_EAUTH, "ring: next rank %d failed authentication (wrong job token?)", next);
    put32(proof, RING_MAGIC);
    ring_mac(token, "con", (uint32_t)c->epoch, (uint32_t)c->rank, (uint32_t)next, nonce_c, ch + 16,
             proof + 4);
    RM_CHECK(rm_net_send_all(c->next_fd, proof, sizeof proof, deadline, err));
    rc = rm_net_recv_all(c->next_fd, ok, sizeof ok, deadline, &e2);
    if (rc == RM_ECLOSED)
        return rm_errf(err, RM_ECLOSED,
                       "ring: next rank %d closed the connection during the handshake "
                       "(before it judged our proof)",
                       next);
    if (rc)
        return rm_errf(err, rc, "ring: next rank %d: waiting for its acknowledgement: %s", next, e2.msg);
    if (get32(ok) != RING_MAGIC)
        return rm_errf(err, RM_EPROTO, "ring: bad handshake acknowledgement from next rank %d", next);
    if (get32(ok + 4) == RING_REFUSED)
        return rm_errf(err, RM_EAUTH, "ring: next rank %d refused our proof (wrong job token?)", next);
    if (get32(ok + 4) != 0)
        return rm_errf(err, RM_EPROTO, "ring: bad handshake acknowledgement from next rank %d", next);
    return RM_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* listener: accepts and authenticates continuously                                             */

typedef struct rl_conn {
    rm_admit_pending adm; /* source and accept time: common/admit.h decides who goes */
    int fd;
    char who[64]; /* "a.b.c.d:port" for logs */
    int stage;    /* 0: reading HELLO, 1: reading PROOF */
    size_t got;
    uint8_t in[HELLO_LEN]; /* HELLO, then PROOF (PROOF_LEN <= HELLO_LEN) */
    uint8_t hello[HELLO_LEN];
    uint8_t na[16];
} rl_conn;

typedef struct rl_ready {
    int fd;
    uint32_t epoch, rank, world, tag;
} rl_ready;

struct rm_ring_listener {
    int lfd, own_lfd;
    char token[RING_TOKEN_MAX + 1];
    int wake[2]; /* pipe: rm_ring_listener_free wakes the thread */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* monotonic; broadcast when a connection is parked */
    int stop;                     /* under mu */
    uint32_t min_epoch;           /* under mu: HELLOs for older epochs are refused */
    rl_ready ready[RL_READY_MAX]; /* under mu: authenticated, waiting for ring_init */
    int nready;
    unsigned long dropped;        /* under mu: unauthenticated connections dropped so far */
    rl_conn pend[RL_PENDING_MAX]; /* listener thread only: handshakes in progress */
    int npend;
};

static rm_ratelimit g_ring_refuse_rl = RM_RATELIMIT_INIT(5, 10.0);

static void rl_drop(rm_ring_listener *l, int i, const char *why)
{
    rl_conn *p = &l->pend[i];
    unsigned long sup = 0;
    if (rm_ratelimit_take(&g_ring_refuse_rl, rm_mono(), &sup))
        rm_warn("ring refused connection from=%s reason=\"%s\" suppressed=%lu", p->who, why, sup);
    pthread_mutex_lock(&l->mu);
    l->dropped++; /* counted before the close a test may be watching for */
    pthread_mutex_unlock(&l->mu);
    close(p->fd);
    l->pend[i] = l->pend[--l->npend];
}

/* Park an authenticated connection for ring_init (under mu). A newer one for the same
 * (epoch, rank) replaces the older; when full, the lowest epoch goes. */
static void rl_park(rm_ring_listener *l, int fd, uint32_t epoch, uint32_t rank, uint32_t world)
{
    uint32_t tag = world >> RING_TAG_SHIFT;
    world &= (1u << RING_TAG_SHIFT) - 1;
    pthread_mutex_lock(&l->mu);
    int slot = -1;
    for (int i = 0; i < l->nready; i++)
        if (l->ready[i].epoch == epoch && l->ready[i].rank == rank && l->ready[i].tag == tag)
            slot = i;
    if (slot < 0 && l->nready == RL_READY_MAX) {
        slot = 0;
        for (int i = 1; i < l->nready; i++)
            if (l->ready[i].epoch < l->ready[slot].epoch)
                slot = i;
    }
    if (slot >= 0)
        close(l->ready[slot].fd);
    else
        slot = l->nready++;
    l->ready[slot] = (rl_ready){fd, epoch, rank, world, tag};
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* Bytes arrived (or the peer went away) on pending connection i. */
static void rl_step(rm_ring_listener *l, int i)
{
    rl_conn *p = &l->pend[i];
    size_t need = p->stage == 0 ? HELLO_LEN : PROOF_LEN;
    ssize_t n = recv(p->fd, p->in + p->got, need - p->got, MSG_DONTWAIT);
    if (n == 0) {
        rl_drop(l, i, p->stage == 0 ? "closed before a complete hello" : "closed before its proof");
        return;
    }
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            rl_drop(l, i, strerror(errno));
        return;
    }
    p->got += (size_t)n;
    if (p->got < need)
        return;
    p->got = 0;
    if (p->stage == 0) {
        const uint8_t *h = p->in;
        uint32_t epoch = get32(h + 8), rank = get32(h + 12);
        uint32_t world = get32(h + 16) & ((1u << RING_TAG_SHIFT) - 1);
        pthread_mutex_lock(&l->mu);
        uint32_t min_epoch = l->min_epoch;
        pthread_mutex_unlock(&l->mu);
        char why[160];
        if (get32(h) != RING_MAGIC) {
            rl_drop(l, i, "bad magic (not a ringmaster peer)");
            return;
        }
        if (get32(h + 4) != RING_VERSION) {
            rl_drop(l, i, "protocol version mismatch");
            return;
        }
        if (world < 2 || world > RM_RDZV_MAX_WORLD || rank >= world) {
            snprintf(why, sizeof why, "bad rank %u / world size %u", rank, world);
            rl_drop(l, i, why);
            return;
        }
        if (epoch < min_epoch) {
            snprintf(why, sizeof why, "stale epoch %u (this worker is at %u)", epoch, min_epoch);
            rl_drop(l, i, why);
            return;
        }
        memcpy(p->hello, h, HELLO_LEN);
        uint32_t acc = (rank + 1) % world; /* we answer as the rank this peer believes we are */
        uint8_t ch[CHAL_LEN];
        put32(ch, RING_MAGIC);
        put32(ch + 4, RING_VERSION);
        put32(ch + 8, epoch);
        put32(ch + 12, acc);
        rm_net_random(p->na, 16);
        memcpy(ch + 16, p->na, 16);
        ring_mac(l->token, "acc", epoch, acc, rank, h + 20, p->na, ch + 32);
        /* a fresh socket's send buffer takes 64 bytes at once; anything else is not a peer */
        if (send(p->fd, ch, sizeof ch, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof ch) {
            rl_drop(l, i, "could not send the challenge");
            return;
        }
        p->stage = 1;
        return;
    }
    const uint8_t *h = p->hello;
    uint32_t epoch = get32(h + 8), rank = get32(h + 12), world = get32(h + 16); /* with the tag */
    uint32_t wsize = world & ((1u << RING_TAG_SHIFT) - 1);
    uint8_t mac[32], ok[OK_LEN];
    ring_mac(l->token, "con", epoch, rank, (rank + 1) % wsize, h + 20, p->na, mac);
    put32(ok, RING_MAGIC);
    if (get32(p->in) != RING_MAGIC || !rm_net_ct_equal(mac, p->in + 4, 32)) {
        put32(ok + 4, RING_REFUSED); /* say so: only this is the peer's "wrong token" */
        (void)send(p->fd, ok, sizeof ok, MSG_DONTWAIT | MSG_NOSIGNAL);
        rl_drop(l, i, "authentication failed (wrong job token)");
        return;
    }
    put32(ok + 4, 0);
    if (send(p->fd, ok, sizeof ok, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof ok) {
        rl_drop(l, i, "could not send the acknowledgement");
        return;
    }
    int fd = p->fd;
    l->pend[i] = l->pend[--l->npend];
    rl_park(l, fd, epoch, rank, world); /* world with its group: sub-groups park apart */
}

/* A new connection: make room (common/admit.h: per source, then overall, the oldest goes) and start. */
static void rl_admit(rm_ring_listener *l, int fd, const struct sockaddr_in *a)
{
    uint32_t src = a->sin_addr.s_addr;
    const char *why = NULL;
    int victim = rm_admit_victim(&l->pend[0].adm, sizeof l->pend[0], l->npend, src, RL_PENDING_PER_SRC,
                                 RL_PENDING_MAX, &why);
    if (victim >= 0)
        rl_drop(l, victim, why);
    rl_conn *p = &l->pend[l->npend++];
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->adm.src = src;
    p->adm.t0 = rm_mono();
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(p->who, sizeof p->who, "%s:%d", ip, ntohs(a->sin_port));
}

static void *rl_main(void *arg)
{
    rm_ring_listener *l = arg;
    struct pollfd pf[2 + RL_PENDING_MAX];
    for (;;) {
        pthread_mutex_lock(&l->mu);
        int stop = l->stop;
        pthread_mutex_unlock(&l->mu);
        if (stop)
            break;
        double now = rm_mono(), next_due = now + 1.0;
        for (int i;
             (i = rm_admit_expired(&l->pend[0].adm, sizeof l->pend[0], l->npend, now, &next_due)) >= 0;)
            rl_drop(l, i, "handshake not finished in time");
        int np = l->npend;
        pf[0] = (struct pollfd){.fd = l->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = l->lfd, .events = POLLIN};
        for (int i = 0; i < np; i++)
            pf[2 + i] = (struct pollfd){.fd = l->pend[i].fd, .events = POLLIN};
        int pr = poll(pf, (nfds_t)(2 + np), (int)((next_due - now) * 1000.0) + 1);
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            rm_error("ring listener: poll: %s", strerror(errno));
            break;
        }
        if (pf[0].revents) {
            char b[16];
            while (read(l->wake[0], b, sizeof b) > 0) {
            }
        }
        /* descending, so the swap-remove in rl_drop/rl_step only moves entries already seen */
        for (int i = np - 1; i >= 0; i--)
            if (pf[2 + i].revents)
                rl_step(l, i);
        if (pf[1].revents & (POLLERR | POLLNVAL)) {
            rm_error("ring listener: listening socket failed");
            break;
        }
        for (int k = 0; (pf[1].revents & POLLIN) && k < RL_PENDING_MAX; k++) {
            struct sockaddr_in a;
            socklen_t al = sizeof a;
            int fd = accept4(l->lfd, (struct sockaddr *)&a, &al, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED)
                    continue;
                if (errno == EMFILE || errno == ENFILE) { /* out of fds: back off a little */
                    struct timespec ts = {0, 50 * 1000000L};
                    nanosleep(&ts, NULL);
                }
                break;
            }
            if (a.sin_family != AF_INET) {
                close(fd);
                continue;
            }
            rl_admit(l, fd, &a);
        }
    }
    for (int i = 0; i < l->npend; i++)
        close(l->pend[i].fd);
    l->npend = 0;
    return NULL;
}

int rm_ring_listener_start(int fd, int own_fd, const char *token, rm_ring_listener **out, rm_err *err)
{
    if (!out || fd < 0)
        return rm_errf(err, RM_EINVAL, "ring listener: no listening socket");
    *out = NULL;
    if (!token)
        token = "";
    if (strlen(token) > RING_TOKEN_MAX)
        return rm_errf(err, RM_EINVAL, "ring listener: token too long");
    rm_ring_listener *l = calloc(1, sizeof *l);
    if (!l)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    l->lfd = fd;
    l->own_lfd = own_fd;
    snprintf(l->token, sizeof l->token, "%s", token);
    l->wake[0] = l->wake[1] = -1;
    int rc = RM_OK;
    if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        rc = rm_errf(err, RM_EIO, "ring listener: pipe: %s", strerror(errno));
        goto fail;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        rc = rm_errf(err, RM_EIO, "ring listener: fcntl: %s", strerror(errno));
        goto fail;
    }
    rm_mono_cond_init(&l->cv);
    pthread_mutex_init(&l->mu, NULL);
    if (pthread_create(&l->th, NULL, rl_main, l) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        rc = rm_errf(err, RM_ENOMEM, "ring listener: cannot start its thread");
        goto fail;
    }
    *out = l;
    return RM_OK;
fail:
    if (l->wake[0] >= 0)
        close(l->wake[0]);
    if (l->wake[1] >= 0)
        close(l->wake[1]);
    free(l);
    return rc;
}

void rm_ring_listener_free(rm_ring_listener *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_mutex_unlock(&l->mu);
    ssize_t w = write(l->wake[1], "x", 1);
    (void)w;
    pthread_join(l->th, NULL);
    for (int i = 0; i < l->nready; i++)
        close(l->ready[i].fd);
    close(l->wake[0]);
    close(l->wake[1]);
    if (l->own_lfd)
        close(l->lfd);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

unsigned long rm_ring_listener_dropped(rm_ring_listener *l)
{
    if (!l)
        return 0;
    pthread_mutex_lock(&l->mu);
    unsigned long d = l->dropped;
    pthread_mutex_unlock(&l->mu);
    return d;
}

/* Take prev's authenticated connection for this epoch from the listener: the deadline is spent
 * waiting for authenticated peers only (the listener thread deals with everybody else). Raises
 * the listener's epoch floor, so older parked connections and later stale HELLOs are dropped. */
static int ring_claim(rm_comm *c, rm_ring_listener *l, double deadline, rm_err *err)
{
    int prev = (c->rank + c->n - 1) % c->n, fd = -1;
    uint32_t ep = (uint32_t)c->epoch;
    pthread_mutex_lock(&l->mu);
    if (ep > l->min_epoch)
        l->min_epoch = ep;
    unsigned long dropped0 = l->dropped;
    for (;;) {
        for (int i = l->nready - 1; i >= 0; i--) {
            rl_ready *r = &l->ready[i];
            if (r->epoch > ep)
                continue; /* a peer already in a later epoch: keep it */
            if (r->epoch == ep && r->tag != c->tag)
                continue; /* another ring of this epoch */
            if (r->epoch == ep && r->world == (uint32_t)c->n && r->rank == (uint32_t)prev && fd < 0) {
                fd = r->fd;
            } else {
                if (r->epoch == ep)
                    rm_warn("ring: dropping an authenticated connection that does not fit this round "
                            "epoch=%u rank=%u world=%u (want rank %d of %d)",
                            r->epoch, r->rank, r->world, prev, c->n);
                close(r->fd);
            }
            l->ready[i] = l->ready[--l->nready];
        }
        if (fd >= 0)
            break;
        if (rm_mono() >= deadline) {
            unsigned long d = l->dropped - dropped0;
            pthread_mutex_unlock(&l->mu);
            return rm_errf(err, RM_ETIMEDOUT,
                           "ring: prev rank %d did not connect and authenticate for "
                           "epoch %d within %.1f s (%lu unauthenticated connections dropped meanwhile)",
                           prev, c->epoch, c->timeout_s, d);
        }
        struct timespec ts = rm_mono_ts(deadline);
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    pthread_mutex_unlock(&l->mu);
    rm_net_tune(fd, c->sockbuf);
    c->prev_fd = fd;
    return RM_OK;
}
/* ------------------------------------------------------------------------------------------ */

static void ring_destroy(rm_comm *c)
{
    if (!c)
        return;
    if (c->tx_started) {
        pthread_mutex_lock(&c->mu);
        c->tx_stop = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->tx, NULL);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
    }
    if (c->next_fd >= 0)
        close(c->next_fd);
    if (c->prev_fd >= 0)
        close(c->prev_fd);
    free(c->scratch);
    free(c);
}

static int ring_init(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err)
{
    if (!cfg || !out)
        return rm_errf(err, RM_EINVAL, "ring: NULL argument");
    if (cfg->world_size < 1 || cfg->world_size > RM_RDZV_MAX_WORLD || cfg->rank < 0 ||
        cfg->rank >= cfg->world_size)
        return rm_errf(err, RM_EINVAL, "ring: bad rank %d / world size %d", cfg->rank, cfg->world_size);
    if (cfg->world_size > 1 && !cfg->peers)
        return rm_errf(err, RM_EINVAL, "ring: no peer list");
    int rc = RM_OK, own_lfd = -1;
    rm_ring_listener *own_lst = NULL;
    rm_comm *c = calloc(1, sizeof *c);
    if (!c)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    c->rank = cfg->rank;
    c->n = cfg->world_size;
    c->epoch = cfg->epoch;
    if (cfg->group > 0xffffu) {
        free(c);
        return rm_errf(err, RM_EINVAL, "ring: group %u out of range [0, 65535]", cfg->group);
    }
    c->tag = cfg->group;
    c->next_fd = c->prev_fd = -1;
    c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10.0;
    atomic_init(&c->aborted, 0);
    atomic_init(&c->broken, 0);
    atomic_init(&c->rx_count, 0);
    size_t piece_bytes = RING_DEFAULT_PIECE_BYTES;
    const char *pe = getenv("RINGMASTER_RING_PIECE_KB"); /* tuning knob for the benchmark */
    if (pe && atoi(pe) >= 4 && atoi(pe) <= 65536)
        piece_bytes = (size_t)atoi(pe) << 10;
    c->piece = piece_bytes / sizeof(float);
    c->sockbuf = RING_SOCKBUF;
    const char *sb = getenv("RINGMASTER_RING_SOCKBUF_KB"); /* tuning knob for the benchmark */
    if (sb && atoi(sb) >= 64 && atoi(sb) <= 65536)
        c->sockbuf = atoi(sb) << 10;
    if (c->n == 1) {
        *out = c;
        return RM_OK;
    }
    c->scratch = malloc(c->piece * sizeof(float));
    if (!c->scratch) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto fail;
    }
    const char *token = cfg->token ? cfg->token : "";
    double deadline = rm_mono() + c->timeout_s;
    rm_ring_listener *lst = cfg->listener;
    if (!lst) {
        /* no long-lived listener: one for this formation only, over the caller's socket or our own */
        int lfd = cfg->listen_fd;
        if (lfd < 0) {
            char host[64];
            int port;
            RM_CHECK_GOTO(rm_comm_split_addr(cfg->peers[c->rank].addr, host, sizeof host, &port, err), rc,
                          fail);
            RM_CHECK_GOTO(rm_net_listen(host, port, 128, &own_lfd, NULL, err), rc, fail);
            lfd = own_lfd;
        }
        RM_CHECK_GOTO(rm_ring_listener_start(lfd, lfd == own_lfd, token, &own_lst, err), rc, fail);
        own_lfd = -1; /* the listener owns it now (if it was ours) */
        pthread_mutex_lock(&own_lst->mu);
        own_lst->min_epoch = (uint32_t)c->epoch;
        pthread_mutex_unlock(&own_lst->mu);
        lst = own_lst;
    }
    uint8_t nonce_c[16];
    RM_CHECK_GOTO(ring_connect(c, cfg, deadline, nonce_c, err), rc, fail);
    RM_CHECK_GOTO(ring_connector_handshake(c, token, nonce_c, deadline, err), rc, fail);
    RM_CHECK_GOTO(ring_claim(c, lst, deadline, err), rc, fail);
    rm_ring_listener_free(own_lst);
    own_lst = NULL;
    /* The sender thread pays off when the rank has a core to spare for it: on by default from 4
     * CPUs in our affinity mask (on 2 CPUs shared by 2 ranks the two designs measured the same,
     * within noise). RINGMASTER_RING_TX_THREAD=0|1 overrides. */
    const char *tt = getenv("RINGMASTER_RING_TX_THREAD");
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    const char *sp = getenv("RINGMASTER_RING_SPIN_US");
    long spin_us = sp && *sp ? strtol(sp, NULL, 10) : RING_SPIN_US_DEFAULT;
    c->spin_s = spin_us > 0 && spin_us <= 1000000 ? (double)spin_us * 1e-6 : 0;
    if (tt ? atoi(tt) != 0 : ncpu >= 4) {
        if (pthread_mutex_init(&c->mu, NULL) == 0) {
            if (rm_mono_cond_init(&c->cv) == 0) {
                if (pthread_create(&c->tx, NULL, ring_tx_main, c) == 0)
                    c->tx_started = 1;
                else
                    pthread_cond_destroy(&c->cv);
            }
            if (!c->tx_started)
                pthread_mutex_destroy(&c->mu);
        }
    }
    rm_debug("ring connected rank=%d world=%d epoch=%d", c->rank, c->n, c->epoch);
    *out = c;
    return RM_OK;
fail:
    if (own_lfd >= 0)
        close(own_lfd);
    rm_ring_listener_free(own_lst);
    ring_destroy(c);
    return rc;
}

static void ring_abort(rm_comm *c)
{
    if (!c)
        return;
    atomic_store(&c->aborted, 1);
    if (c->next_fd >= 0)
        shutdown(c->next_fd, SHUT_RDWR);
    if (c->prev_fd >= 0)
        shutdown(c->prev_fd, SHUT_RDWR);
    ring_wake(c);
}

/* ------------------------------------------------------------------------------------------ */
/* data path                                                                                    */

typedef float v4f __attribute__((vector_size(16)));

/* dst = a + b (dst may alias a), optionally scaled; unaligned-safe through memcpy loads. */
static void reduce_add(float *dst, const float *a, const float *restrict b, size_t n, int scale, float s)
{
    size_t i = 0;
    if (!scale) {
        for (; i + 16 <= n; i += 16) {
            v4f x0, x1, x2, x3, y0, y1, y2, y3;
            memcpy(&x0, a + i, 16);
            memcpy(&x1, a + i + 4, 16);
            memcpy(&x2, a + i + 8, 16);
            memcpy(&x3, a + i + 12, 16);
            memcpy(&y0, b + i, 16);
            memcpy(&y1, b + i + 4, 16);
            memcpy(&y2, b + i + 8, 16);
            memcpy(&y3, b + i + 12, 16);
            x0 += y0;
            x1 += y1;
            x2 += y2;
            x3 += y3;
            memcpy(dst + i, &x0, 16);
            memcpy(dst + i + 4, &x1, 16);
            memcpy(dst + i + 8, &x2, 16);
            memcpy(dst + i + 12, &x3, 16);
        }
        for (; i < n; i++)
            dst[i] = a[i] + b[i];
    } else {
        v4f sv = {s, s, s, s};
        for (; i + 8 <= n; i += 8) {
            v4f x0, x1, y0, y1;
            memcpy(&x0, a + i, 16);
            memcpy(&x1, a + i + 4, 16);
            memcpy(&y0, b + i, 16);
            memcpy(&y1, b + i + 4, 16);
            x0 = (x0 + y0) * sv;
            x1 = (x1 + y1) * sv;
            memcpy(dst + i, &x0, 16);
            memcpy(dst + i + 4, &x1, 16);
        }
        for (; i < n; i++)
            dst[i] = (a[i] + b[i]) * s;
    }
}

/* Segment s of the ring is shard s of the layout (worker/allreduce/shard.h): a reduce-scatter is exactly
 * the allreduce's first half. */
static void seg_range(size_t count, int n, int s, size_t *off, size_t *len)
{
    rm_shard_range(count, n, s, off, len);
}

static size_t npieces(size_t len, size_t piece)
{
    return (len + piece - 1) / piece;
}

/* Move one direction of the ring past finished (j == np) or empty steps. Step t works on segment
 * (base - t) mod n: base = rank - shift for sending, rank - 1 - shift for receiving. When dep is
 * set, the pieces of every finished step > t0 (the first step run) are added to it (the sender
 * waits for that many received pieces). */
static inline void ring_advance(int *t, size_t *j, size_t *np, size_t *off, size_t *len, size_t *dep, int t0,
                                int T, size_t count, int n, int base, size_t P)
{
    while (*t < T && *j == *np) {
        if (dep && *t >= t0 + 1)
            *dep += *np;
        (*t)++;
        *j = 0;
        if (*t < T) {
            seg_range(count, n, (base - *t + 4 * n) % n, off, len);
            *np = npieces(*len, P);
        }
    }
}

/* Wake the sender thread (and a caller waiting for it) after receive progress or a failure. */
static void ring_wake(rm_comm *c)
{
    if (!c->tx_started)
        return;
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* A failed collective leaves the ring out of step: shut both sockets so the neighbours fail at
 * once (RM_ECLOSED) instead of waiting out their timeout; the failure travels round the ring. */
static void ring_break(rm_comm *c)
{
    atomic_store(&c->broken, 1);
    if (c->next_fd >= 0)
        shutdown(c->next_fd, SHUT_RDWR);
    if (c->prev_fd >= 0)
        shutdown(c->prev_fd, SHUT_RDWR);
    ring_wake(c);
}

/* Keep the first failure of a job (the other thread's later ECLOSED is only the echo). */
static void record_fail(rm_comm *c, int rc, const rm_err *e)
{
    if (!c->tx_started)
        return;
    pthread_mutex_lock(&c->mu);
    if (!c->fail_rc) {
        c->fail_rc = rc;
        if (e)
            c->fail_err = *e;
        else
            rm_errf(&c->fail_err, rc, "ring: failed");
    }
    pthread_mutex_unlock(&c->mu);
}

static int fail_io(rm_comm *c, int rc, rm_err *err, const char *what, int peer)
{
    int saved = errno;
    rm_err local = {0};
    if (!err)
        err = &local;
    if (atomic_load(&c->aborted))
        rc = rm_errf(err, RM_ECLOSED, "ring: aborted");
    else if (rc == RM_ECLOSED)
        rc = rm_errf(err, rc, "ring: rank %d closed the connection during %s (peer died?)", peer, what);
    else if (rc == RM_ETIMEDOUT)
        rc = rm_errf(err, rc, "ring: no progress from rank %d for %.1f s during %s (peer hung or dead)", peer,
                     c->timeout_s, what);
    else
        rc = rm_errf(err, rc, "ring: %s with rank %d failed: %s", what, peer, strerror(saved));
    record_fail(c, rc, err);
    ring_break(c);
    return rc;
}

enum { RING_SEND = 1, RING_RECV = 2 };

/* Which steps of the 2(n-1)-step ring schedule a collective runs. Segments are rotated by one
 * (step t sends segment r-1-t) so that after the scatter-reduce rank r holds segment r = its shard
 * of the layout: reduce-scatter is steps 0..n-2, all-gather steps n-1..2n-3 (its first step sends
 * the own shard), the allreduce all of them. All three use the same rotation, so every element is
 * summed along the same chain of ranks and reduce-scatter + all-gather is the allreduce bit for
 * bit (ZeRO-2 then matches plain data parallelism exactly). */
typedef enum { RING_ALLREDUCE = 0, RING_REDUCE_SCATTER, RING_ALL_GATHER } ring_kind;

static void ring_kind_steps(ring_kind k, int n, int *t0, int *t1, int *shift)
{
    *t0 = k == RING_ALL_GATHER ? n - 1 : 0;
    *t1 = k == RING_REDUCE_SCATTER ? n - 1 : 2 * (n - 1);
    *shift = 1;
}

static const char *ring_kind_name(ring_kind k)
{
    return k == RING_REDUCE_SCATTER ? "reduce_scatter" : k == RING_ALL_GATHER ? "all_gather" : "allreduce";
}

/* One rank's side of a ring collective (steps t0..T-1 of kind). mode RING_SEND|RING_RECV drives
 * both sockets from this thread; with the sender thread, the caller runs RING_RECV and the sender
 * thread RING_SEND, the dependency "piece j of step t-1 received" then travels through
 * c->rx_count. Steps < n-1 reduce into dst (partial sums; dst may alias src); later steps copy. */
static int ring_collective_f32(rm_comm *c, const float *src, float *dst, size_t count, rm_redop op, int mode,
                               ring_kind kind, rm_err *err)
{
    const int n = c->n, r = c->rank;
    int t0, T, shift;
    ring_kind_steps(kind, n, &t0, &T, &shift);
    const char *what = ring_kind_name(kind);
    const size_t P = c->piece;
    const int prev = (r + n - 1) % n, next = (r + 1) % n;
    const float inv = 1.0f / (float)n;
    const double spin_s = count * sizeof(float) <= RING_SPIN_MAX_BYTES ? c->spin_s : 0;

    /* sender state */
    int st = t0;
    size_t sj = 0, s_done = 0, s_np, s_segoff, s_seglen, dep_base = 0;
    frame_hdr shdr;
    /* receiver state */
    int rt = t0;
    size_t rj = 0, r_done = 0, r_np, r_segoff, r_seglen, recv_count = 0;
    frame_hdr rhdr;

    const int shared = mode != (RING_SEND | RING_RECV);
    if (!(mode & RING_SEND))
        st = T;
    if (!(mode & RING_RECV))
        rt = T;
    const int sbase = r - shift, rbase = r - 1 - shift;
    seg_range(count, n, (sbase - t0 + 4 * n) % n, &s_segoff, &s_seglen); /* (base - t0) mod n */
    s_np = npieces(s_seglen, P);
    seg_range(count, n, (rbase - t0 + 4 * n) % n, &r_segoff, &r_seglen);
    r_np = npieces(r_seglen, P);
    /* skip empty steps (count < n) */
    ring_advance(&st, &sj, &s_np, &s_segoff, &s_seglen, &dep_base, t0, T, count, n, sbase, P);
    ring_advance(&rt, &rj, &r_np, &r_segoff, &r_seglen, NULL, t0, T, count, n, rbase, P);

    double last_progress = rm_mono();
    while (st < T || rt < T) {
        int progress = 0;
        if (atomic_load_explicit(&c->aborted, memory_order_relaxed) ||
            (shared && atomic_load_explicit(&c->broken, memory_order_relaxed)))
            return fail_io(c, RM_ECLOSED, err, what, rt < T ? prev : next);
        /* ---- receive as much as is there ---- */
        while (rt < T) {
            size_t plen = r_seglen - rj * P < P ? r_seglen - rj * P : P;
            size_t total = sizeof(frame_hdr) + plen * sizeof(float);
            float *dest = rt < n - 1 ? c->scratch : dst + r_segoff + rj * P;
            struct iovec iov[2];
            int niov = 0;
            if (r_done < sizeof(frame_hdr)) {
                iov[niov].iov_base = (char *)&rhdr + r_done;
                iov[niov++].iov_len = sizeof(frame_hdr) - r_done;
                iov[niov].iov_base = dest;
                iov[niov++].iov_len = plen * sizeof(float);
            } else {
                iov[niov].iov_base = (char *)dest + (r_done - sizeof(frame_hdr));
                iov[niov++].iov_len = total - r_done;
            }
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            ssize_t got = recvmsg(c->prev_fd, &mh, MSG_DONTWAIT);
            if (got == 0)
                return fail_io(c, RM_ECLOSED, err, what, prev);
            if (got < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                if (errno == EINTR)
                    continue;
                return fail_io(c, errno == ECONNRESET ? RM_ECLOSED : RM_EIO, err, what, prev);
            }
            progress = 1;
            size_t before = r_done;
            r_done += (size_t)got;
            if (before < sizeof(frame_hdr) && r_done >= sizeof(frame_hdr)) {
                if (!rm_net_frame_ok(&rhdr, c->recv_seq, (uint32_t)(plen * sizeof(float)))) {
                    rm_err pe = {0};
                    rm_errf(&pe, RM_EPROTO,
                            "ring: garbage or desync from rank %d (frame magic %08x seq %u len %u, "
                            "want seq %u len %zu)",
                            prev, rhdr.magic, rhdr.seq, rhdr.len, c->recv_seq, plen * sizeof(float));
                    record_fail(c, RM_EPROTO, &pe);
                    ring_break(c);
                    if (err)
                        *err = pe;
                    return RM_EPROTO;
                }
            }
            if (r_done < total)
                continue;
            /* piece complete */
            if (rt < n - 1) {
                size_t o = r_segoff + rj * P;
                reduce_add(dst + o, src + o, c->scratch, plen, op == RM_OP_AVG && rt == n - 2, inv);
            }
            c->recv_seq++;
            recv_count++;
            if (shared) {
                atomic_store_explicit(&c->rx_count, recv_count, memory_order_release);
                ring_wake(c);
            }
            r_done = 0;
            rj++;
            ring_advance(&rt, &rj, &r_np, &r_segoff, &r_seglen, NULL, t0, T, count, n, rbase, P);
            break; /* a completed piece may unlock a send: go send */
        }
        /* ---- send what is ready ---- */
        if (shared && st < T)
            recv_count = atomic_load_explicit(&c->rx_count, memory_order_acquire);
        while (st < T && (st == t0 || recv_count > dep_base + sj)) {
            size_t plen = s_seglen - sj * P < P ? s_seglen - sj * P : P;
            size_t total = sizeof(frame_hdr) + plen * sizeof(float);
            const float *from = (st == 0 ? src : dst) + s_segoff + sj * P; /* all-gather: dst */
            if (s_done == 0) {
                rm_net_frame_make(&shdr, c->send_seq, (uint32_t)(plen * sizeof(float)));
            }
            struct iovec iov[2];
            int niov = 0;
            if (s_done < sizeof(frame_hdr)) {
                iov[niov].iov_base = (char *)&shdr + s_done;
                iov[niov++].iov_len = sizeof(frame_hdr) - s_done;
                iov[niov].iov_base = (void *)(uintptr_t)from;
                iov[niov++].iov_len = plen * sizeof(float);
            } else {
                iov[niov].iov_base = (char *)(uintptr_t)from + (s_done - sizeof(frame_hdr));
                iov[niov++].iov_len = total - s_done;
            }
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            ssize_t put = sendmsg(c->next_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (put < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                if (errno == EINTR)
                    continue;
                return fail_io(c, (errno == EPIPE || errno == ECONNRESET) ? RM_ECLOSED : RM_EIO, err, what,
                               next);
            }
            progress = 1;
            s_done += (size_t)put;
            if (s_done < total)
                continue;
            c->send_seq++;
            s_done = 0;
            sj++;
            ring_advance(&st, &sj, &s_np, &s_segoff, &s_seglen, &dep_base, t0, T, count, n, sbase, P);
        }
        if (progress) {
            last_progress = -1; /* refresh lazily: clock only read before sleeping */
            continue;
        }
        double now = rm_mono();
        if (last_progress < 0)
            last_progress = now;
        double left = last_progress + c->timeout_s - now;
        if (left <= 0)
            return fail_io(c, RM_ETIMEDOUT, err, what, rt < T ? prev : next);
        int can_send = st < T && (st == t0 || recv_count > dep_base + sj);
        if (shared && rt >= T && st < T && !can_send) {
            /* sender thread waiting for the receiver's next piece */
            struct timespec ts = rm_mono_ts_in(left < 0.05 ? left : 0.05);
            pthread_mutex_lock(&c->mu);
            if (atomic_load(&c->rx_count) <= dep_base + sj && !atomic_load(&c->broken) &&
                !atomic_load(&c->aborted))
                pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            pthread_mutex_unlock(&c->mu);
            if (atomic_load(&c->broken) || atomic_load(&c->aborted))
                return fail_io(c, RM_ECLOSED, err, what, prev);
            if (atomic_load(&c->rx_count) > dep_base + sj)
                last_progress = -1;
            continue;
        }
        if (now - last_progress < spin_s) { /* stalled only just now: try again before sleeping */
            sched_yield();
            continue;
        }
        /* only the sockets this side still needs: a finished neighbour may close legitimately */
        struct pollfd pf[2] = {
            {.fd = rt < T ? c->prev_fd : -1, .events = POLLIN},
            {.fd = st < T ? c->next_fd : -1, .events = (short)(POLLRDHUP | (can_send ? POLLOUT : 0))},
        };
        int pr = poll(pf, 2, (int)(left * 1000.0) + 1);
        if (pr < 0 && errno != EINTR)
            return fail_io(c, RM_EIO, err, "poll", prev);
        if (pr > 0 && st < T && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return fail_io(c, RM_ECLOSED, err, what, next);
    }
    return RM_OK;
}

static void *ring_tx_main(void *arg)
{
    rm_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->tx_stop && c->tx_job == c->tx_done)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->tx_stop)
            break;
        const float *src = c->j_src;
        float *dst = c->j_dst;
        size_t count = c->j_count;
        int kind = c->j_kind;
        pthread_mutex_unlock(&c->mu);
        rm_err e = {0};
        (void)ring_collective_f32(c, src, dst, count, RM_OP_SUM, RING_SEND, (ring_kind)kind,
                                  &e); /* failures recorded */
        pthread_mutex_lock(&c->mu);
        c->tx_done = c->tx_job;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Large collectives: this thread receives and reduces while the sender thread sends. */
static int ring_collective_threaded(rm_comm *c, const float *src, float *dst, size_t count, rm_redop op,
                                    ring_kind kind, rm_err *err)
{
    pthread_mutex_lock(&c->mu);
    c->j_src = src;
    c->j_dst = dst;
    c->j_count = count;
    c->j_kind = (int)kind;
    atomic_store(&c->rx_count, 0);
    c->fail_rc = 0;
    c->tx_job++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    rm_err e = {0};
    (void)ring_collective_f32(c, src, dst, count, op, RING_RECV, kind, &e);
    pthread_mutex_lock(&c->mu);
    while (c->tx_done != c->tx_job)
        pthread_cond_wait(&c->cv, &c->mu); /* bounded: see tx timeouts */
    int rc = c->fail_rc;
    if (rc && err)
        *err = c->fail_err;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Two ranks, small buffer: one exchange instead of two ring steps (half the latency, same bytes
 * on the wire). Each rank sends its whole buffer and adds the peer's; a+b == b+a in IEEE
 * arithmetic, so both ranks still get bit-identical results. count fits one scratch piece. */
static int exchange2_f32(rm_comm *c, const float *src, float *dst, size_t count, rm_redop op, rm_err *err)
{
    const int peer = 1 - c->rank;
    const size_t bytes = count * sizeof(float), total = sizeof(frame_hdr) + bytes;
    frame_hdr shdr, rhdr;
    rm_net_frame_make(&shdr, c->send_seq, (uint32_t)bytes);
    size_t sent = 0, got = 0;
    double last_progress = rm_mono();
    while (sent < total || got < total) {
        int progress = 0;
        if (atomic_load_explicit(&c->aborted, memory_order_relaxed))
            return fail_io(c, RM_ECLOSED, err, "allreduce", peer);
        if (sent < total) {
            struct iovec iov[2];
            int niov = 0;
            if (sent < sizeof shdr) {
                iov[niov].iov_base = (char *)&shdr + sent;
                iov[niov++].iov_len = sizeof shdr - sent;
                iov[niov].iov_base = (void *)(uintptr_t)src;
                iov[niov++].iov_len = bytes;
            } else {
                iov[niov].iov_base = (char *)(uintptr_t)src + (sent - sizeof shdr);
                iov[niov++].iov_len = total - sent;
            }
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            ssize_t k = sendmsg(c->next_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (k > 0) {
                sent += (size_t)k;
                progress = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return fail_io(c, (errno == EPIPE || errno == ECONNRESET) ? RM_ECLOSED : RM_EIO, err,
                               "allreduce", peer);
            }
        }
        if (got < total) {
            struct iovec iov[2];
            int niov = 0;
            if (got < sizeof rhdr) {
                iov[niov].iov_base = (char *)&rhdr + got;
                iov[niov++].iov_len = sizeof rhdr - got;
                iov[niov].iov_base = c->scratch;
                iov[niov++].iov_len = bytes;
            } else {
                iov[niov].iov_base = (char *)c->scratch + (got - sizeof rhdr);
                iov[niov++].iov_len = total - got;
            }
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            ssize_t k = recvmsg(c->prev_fd, &mh, MSG_DONTWAIT);
            if (k == 0)
                return fail_io(c, RM_ECLOSED, err, "allreduce", peer);
            if (k > 0) {
                size_t before = got;
                got += (size_t)k;
                progress = 1;
                if (before < sizeof rhdr && got >= sizeof rhdr &&
                    !rm_net_frame_ok(&rhdr, c->recv_seq, (uint32_t)bytes)) {
                    ring_break(c);
                    return rm_errf(err, RM_EPROTO,
                                   "ring: garbage or desync from rank %d (frame magic %08x seq %u len %u, "
                                   "want seq %u len %zu)",
                                   peer, rhdr.magic, rhdr.seq, rhdr.len, c->recv_seq, bytes);
                }
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return fail_io(c, errno == ECONNRESET ? RM_ECLOSED : RM_EIO, err, "allreduce", peer);
            }
        }
        if (progress) {
            last_progress = -1;
            continue;
        }
        double now = rm_mono();
        if (last_progress < 0)
            last_progress = now;
        double left = last_progress + c->timeout_s - now;
        if (left <= 0)
            return fail_io(c, RM_ETIMEDOUT, err, "allreduce", peer);
        if (now - last_progress < c->spin_s) {
            sched_yield();
            continue;
        }
        struct pollfd pf[2] = {
            {.fd = got < total ? c->prev_fd : -1, .events = POLLIN},
            {.fd = sent < total ? c->next_fd : -1, .events = POLLRDHUP | POLLOUT},
        };
        int pr = poll(pf, 2, (int)(left * 1000.0) + 1);
        if (pr < 0 && errno != EINTR)
            return fail_io(c, RM_EIO, err, "allreduce poll", peer);
        if (pr > 0 && sent < total && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return fail_io(c, RM_ECLOSED, err, "allreduce", peer);
    }
    c->send_seq++;
    c->recv_seq++;
    reduce_add(dst, src, c->scratch, count, op == RM_OP_AVG, 0.5f);
    return RM_OK;
}

/* Arguments and state every collective checks first. */
static int ring_precheck(rm_comm *c, int bufs_ok, rm_dtype dt, rm_redop op, rm_err *err)
{
    if (!c || !bufs_ok)
        return rm_errf(err, RM_EINVAL, "ring: NULL argument");
    if (dt != RM_DT_F32)
        return rm_errf(err, RM_EUNSUPPORTED, "ring: only float32 is supported (got %s)", rm_dtype_name(dt));
    if (op != RM_OP_SUM && op != RM_OP_AVG)
        return rm_errf(err, RM_EINVAL, "ring: unknown reduction");
    if (atomic_load(&c->aborted))
        return rm_errf(err, RM_ECLOSED, "ring: aborted");
    if (atomic_load(&c->broken))
        return rm_errf(err, RM_ECLOSED, "ring: unusable after an earlier failure");
    return RM_OK;
}

/* Run kind on the full-length buffers (the sender thread for large ones). */
static int ring_run(rm_comm *c, const float *src, float *dst, size_t count, rm_redop op, ring_kind kind,
                    rm_err *err)
{
    if (c->tx_started && count * sizeof(float) >= RING_TX_MIN_BYTES)
        return ring_collective_threaded(c, src, dst, count, op, kind, err);
    return ring_collective_f32(c, src, dst, count, op, RING_SEND | RING_RECV, kind, err);
}

static int ring_allreduce_oop(rm_comm *c, const void *send, void *recv, size_t count, rm_dtype dt,
                              rm_redop op, rm_err *err)
{
    RM_CHECK(ring_precheck(c, !count || (send && recv), dt, op, err));
    if (count == 0)
        return RM_OK;
    if (c->n == 1) {
        if (send != recv)
            memmove(recv, send, count * sizeof(float));
        return RM_OK;
    }
    if (c->n == 2 && count * sizeof(float) <= RING_EXCHANGE_MAX_BYTES && count <= c->piece)
        return exchange2_f32(c, send, recv, count, op, err);
    return ring_run(c, send, recv, count, op, RING_ALLREDUCE, err);
}

/* The allreduce's first half, rotated so that rank r ends up with shard r (comm.h). buf is the
 * partial-sum scratch; the shard is moved out afterwards when it is not in place. */
static int ring_reduce_scatter(rm_comm *c, void *buf, void *shard, size_t count, rm_dtype dt, rm_redop op,
                               rm_err *err)
{
    RM_CHECK(ring_precheck(c, !count || (buf && shard), dt, op, err));
    if (count == 0)
        return RM_OK;
    size_t off, len;
    rm_shard_range(count, c->n, c->rank, &off, &len);
    float *b = buf;
    if (c->n > 1)
        RM_CHECK(ring_run(c, b, b, count, op, RING_REDUCE_SCATTER, err));
    if (len && (float *)shard != b + off)
        memmove(shard, b + off, len * sizeof(float));
    return RM_OK;
}

/* The allreduce's second half: the own shard goes round the ring, every rank copies (zero-copy
 * receives straight into buf). */
static int ring_all_gather(rm_comm *c, const void *shard, void *buf, size_t count, rm_dtype dt, rm_err *err)
{
    RM_CHECK(ring_precheck(c, !count || (buf && shard), dt, RM_OP_SUM, err));
    if (count == 0)
        return RM_OK;
    size_t off, len;
    rm_shard_range(count, c->n, c->rank, &off, &len);
    float *b = buf;
    if (len && (const float *)shard != b + off)
        memmove(b + off, shard, len * sizeof(float));
    if (c->n == 1)
        return RM_OK;
    return ring_run(c, b, b, count, RM_OP_SUM, RING_ALL_GATHER, err);
}

static int ring_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    return ring_allreduce_oop(c, buf, buf, count, dt, op, err);
}

static int ring_barrier(rm_comm *c, rm_err *err)
{
    float x = 0;
    return ring_allreduce_oop(c, &x, &x, 1, RM_DT_F32, RM_OP_SUM, err);
}

static const rm_comm_ops ring_ops = {
    .name = "ring",
    .init = ring_init,
    .allreduce = ring_allreduce,
    .allreduce_oop = ring_allreduce_oop,
    .reduce_scatter = ring_reduce_scatter,
    .all_gather = ring_all_gather,
    .barrier = ring_barrier,
    .abort = ring_abort,
    .destroy = ring_destroy,
};

const rm_comm_ops *rm_comm_ring_ops(void)
{
    return &ring_ops;
}

int rm_comm_ring_link_fds(rm_comm *c, int *to_next, int *from_prev)
{
    if (!c || c->n < 2 || c->next_fd < 0 || c->prev_fd < 0)
        return RM_EINVAL;
    *to_next = c->next_fd;
    *from_prev = c->prev_fd;
    return RM_OK;
}
