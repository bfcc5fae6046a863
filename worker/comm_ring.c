/* comm_ring.c — the "ring" backend: bandwidth-optimal ring allreduce over TCP.
 *
 * Algorithm (Patarasuk & Yuan; Baidu/Horovod ring): the buffer is cut into n segments; in 2(n-1)
 * steps each rank sends one segment to next = (r+1)%n and receives one from prev. Steps
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
 * Connection setup: connect to next, accept from prev on the listener advertised at rendezvous.
 * Handshake (no token on the wire): HELLO{epoch, rank, world, nonce_c} ->
 * CHALLENGE{nonce_a, HMAC(token, acc|...)} -> PROOF{HMAC(token, con|...)} -> OK. The acceptor drops
 * (with a logged reason) any connection whose HELLO or PROOF is wrong and keeps accepting until
 * the real prev arrives or the timeout passes; a stranger never fails the ring by itself (one
 * that stays silent holds the accept loop for at most 2 s; one that forges a valid HELLO — it must
 * know magic, epoch and ranks — but never proves the token can hold it until the init timeout).
 *
 * Timeouts: every wait is bounded by cfg.timeout_s of no progress; a closed peer is RM_ECLOSED at
 * once; abort() sets a flag and shutdown()s both sockets, which wakes poll() in the owning thread. */
#include <errno.h>
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

#include "worker/comm.h"
#include "common/clock.h"
#include "worker/net.h"

#define RING_MAGIC 0x524d5247u    /* "RMRG" handshake */
#define RING_VERSION 1u
#define FRAME_MAGIC 0x524d4652u   /* "RMFR" data frames */
#define FRAME_CHECK 0x5a17c3e1u
#define RING_SOCKBUF (4 << 20)
#define RING_DEFAULT_PIECE_BYTES (512u << 10)
#define RING_HANDSHAKE_STRANGER_S 2.0
#define RING_EXCHANGE_MAX_BYTES (64u << 10)   /* 2 ranks up to here: one exchange, not 2 steps */
#define RING_TX_MIN_BYTES (1u << 20)          /* from here on a sender thread sends */

struct rm_comm {
    int rank, n, epoch;
    int next_fd, prev_fd;
    double timeout_s;
    atomic_int aborted;
    atomic_int broken;        /* a collective failed: peers may be out of step */
    uint32_t send_seq, recv_seq;   /* send_seq: sending thread only; recv_seq: receiving only */
    size_t piece;             /* floats per piece */
    int sockbuf;              /* SO_SNDBUF/SO_RCVBUF bytes */
    float *scratch;           /* one piece */

    /* Sender thread for large collectives: the caller's thread receives and reduces, this one
     * sends, so the two copies of a piece (kernel->user for the next piece, user->kernel for the
     * reduced one) run on both cores. One job at a time, handed over under mu. */
    int tx_started, tx_stop;
    pthread_t tx;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* job posted / job done / receive progress / failure */
    unsigned tx_job, tx_done;
    const float *j_src;
    float *j_dst;
    size_t j_count;
    atomic_size_t rx_count;   /* pieces received (and reduced) in the current job */
    int fail_rc;              /* first failure of the current job (under mu) */
    rm_err fail_err;
};

static void ring_wake(rm_comm *c);
static void *ring_tx_main(void *arg);

typedef struct frame_hdr {
    uint32_t magic, seq, len, check;
} frame_hdr;

/* ------------------------------------------------------------------------------------------ */
/* handshake                                                                                    */

enum { HELLO_LEN = 20 + 16, CHAL_LEN = 16 + 16 + 32, PROOF_LEN = 4 + 32, OK_LEN = 8 };

static void put32(uint8_t *p, uint32_t v) {
    v = htonl(v);
    memcpy(p, &v, 4);
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

static void ring_mac(const char *token, const char *role, uint32_t epoch, uint32_t a, uint32_t b,
                     const uint8_t nc[16], const uint8_t na[16], uint8_t out[32]) {
    uint8_t msg[32 + 12 + 32];
    size_t m = 0;
    int rl = snprintf((char *)msg, 32, "ringmaster-ring-v1 %s", role);
    m = (size_t)(rl > 31 ? 31 : rl);
    put32(msg + m, epoch); m += 4;
    put32(msg + m, a); m += 4;
    put32(msg + m, b); m += 4;
    memcpy(msg + m, nc, 16); m += 16;
    memcpy(msg + m, na, 16); m += 16;
    rm_hmac_sha256(token, strlen(token), msg, m, out);
}

static int ring_connect(rm_comm *c, const rm_comm_cfg *cfg, double deadline, uint8_t nonce_c[16],
                        rm_err *err) {
    int next = (c->rank + 1) % c->n;
    char host[64];
    int port, rc;
    RM_CHECK(rm_comm_split_addr(cfg->peers[next].addr, host, sizeof host, &port, err));
    rm_err e2 = {0};
    rc = rm_net_connect(host, port, deadline, &c->next_fd, &e2);
    if (rc) return rm_errf(err, rc, "ring: next rank %d: %s", next, e2.msg);
    rm_net_tune(c->next_fd, c->sockbuf);
    uint8_t hello[HELLO_LEN];
    put32(hello, RING_MAGIC);
    put32(hello + 4, RING_VERSION);
    put32(hello + 8, (uint32_t)c->epoch);
    put32(hello + 12, (uint32_t)c->rank);
    put32(hello + 16, (uint32_t)c->n);
    rm_net_random(nonce_c, 16);
    memcpy(hello + 20, nonce_c, 16);
    return rm_net_send_all(c->next_fd, hello, sizeof hello, deadline, err);
}

/* Connector side, steps C (challenge -> proof) and E (ok). */
static int ring_connector_prove(rm_comm *c, const char *token, const uint8_t nonce_c[16],
                                double deadline, rm_err *err) {
    int next = (c->rank + 1) % c->n;
    uint8_t ch[CHAL_LEN], mac[32], proof[PROOF_LEN];
    RM_CHECK(rm_net_recv_all(c->next_fd, ch, sizeof ch, deadline, err));
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
    return rm_net_send_all(c->next_fd, proof, sizeof proof, deadline, err);
}

static int ring_connector_ok(rm_comm *c, double deadline, rm_err *err) {
    uint8_t ok[OK_LEN];
    int rc = rm_net_recv_all(c->next_fd, ok, sizeof ok, deadline, err);
    if (rc == RM_ECLOSED)
        return rm_errf(err, RM_EAUTH, "ring: next rank %d closed during the handshake (it refused us: wrong token?)",
                       (c->rank + 1) % c->n);
    if (rc) return rc;
    if (get32(ok) != RING_MAGIC || get32(ok + 4) != 0)
        return rm_errf(err, RM_EPROTO, "ring: bad handshake acknowledgement from next rank");
    return RM_OK;
}

/* Accept until the real prev proves itself; strangers are logged and dropped. Runs the
 * connector's proof step (once) in between so no rank waits on a cycle. */
static int ring_accept(rm_comm *c, int lfd, const char *token, const uint8_t nonce_c[16],
                       double deadline, rm_err *err) {
    int prev = (c->rank + c->n - 1) % c->n;
    int proved = 0, rc;
    for (;;) {
        int fd = -1;
        char who[64] = "?";
        rm_err e2 = {0};
        rc = rm_net_accept(lfd, deadline, &fd, who, sizeof who, &e2);
        if (rc) return rm_errf(err, rc, "ring: waiting for prev rank %d to connect: %s", prev, e2.msg);
        double hs_deadline = rm_mono() + (c->timeout_s < RING_HANDSHAKE_STRANGER_S ? c->timeout_s : RING_HANDSHAKE_STRANGER_S);
        if (hs_deadline > deadline) hs_deadline = deadline;
        uint8_t hello[HELLO_LEN];
        rc = rm_net_recv_all(fd, hello, sizeof hello, hs_deadline, &e2);
        const char *why = NULL;
        char whybuf[160];
        if (rc) why = e2.msg;
        else if (get32(hello) != RING_MAGIC) why = "bad magic (not a ringmaster peer)";
        else if (get32(hello + 4) != RING_VERSION) why = "protocol version mismatch";
        else if (get32(hello + 8) != (uint32_t)c->epoch) {
            snprintf(whybuf, sizeof whybuf, "wrong epoch %u (want %d)", get32(hello + 8), c->epoch);
            why = whybuf;
        } else if (get32(hello + 16) != (uint32_t)c->n) {
            snprintf(whybuf, sizeof whybuf, "wrong world size %u (want %d)", get32(hello + 16), c->n);
            why = whybuf;
        } else if (get32(hello + 12) != (uint32_t)prev) {
            snprintf(whybuf, sizeof whybuf, "claims rank %u, want prev rank %d", get32(hello + 12), prev);
            why = whybuf;
        }
        if (why) {
            rm_warn("ring refused connection from=%s rank=%d reason=\"%s\"", who, c->rank, why);
            close(fd);
            continue;
        }
        uint8_t ch[CHAL_LEN];
        put32(ch, RING_MAGIC);
        put32(ch + 4, RING_VERSION);
        put32(ch + 8, (uint32_t)c->epoch);
        put32(ch + 12, (uint32_t)c->rank);
        rm_net_random(ch + 16, 16);
        ring_mac(token, "acc", (uint32_t)c->epoch, (uint32_t)c->rank, (uint32_t)prev, hello + 20, ch + 16,
                 ch + 32);
        rc = rm_net_send_all(fd, ch, sizeof ch, hs_deadline, &e2);
        if (rc) {
            rm_warn("ring refused connection from=%s rank=%d reason=\"%s\"", who, c->rank, e2.msg);
            close(fd);
            continue;
        }
        if (!proved) {
            rc = ring_connector_prove(c, token, nonce_c, deadline, err);
            if (rc) {
                close(fd);
                return rc;
            }
            proved = 1;
        }
        uint8_t proof[PROOF_LEN], mac[32];
        rc = rm_net_recv_all(fd, proof, sizeof proof, deadline, &e2);
        if (!rc) {
            ring_mac(token, "con", (uint32_t)c->epoch, (uint32_t)prev, (uint32_t)c->rank, hello + 20,
                     ch + 16, mac);
            if (get32(proof) != RING_MAGIC || !rm_net_ct_equal(mac, proof + 4, 32)) {
                rc = RM_EAUTH;
                snprintf(e2.msg, sizeof e2.msg, "authentication failed (wrong job token)");
            }
        }
        if (rc) {
            rm_warn("ring refused connection from=%s rank=%d reason=\"%s\"", who, c->rank, e2.msg);
            close(fd);
            continue;
        }
        uint8_t ok[OK_LEN];
        put32(ok, RING_MAGIC);
        put32(ok + 4, 0);
        rc = rm_net_send_all(fd, ok, sizeof ok, deadline, err);
        if (rc) {
            close(fd);
            return rc;
        }
        rm_net_tune(fd, c->sockbuf);
        c->prev_fd = fd;
        return RM_OK;
    }
}

/* ------------------------------------------------------------------------------------------ */

static void ring_destroy(rm_comm *c) {
    if (!c) return;
    if (c->tx_started) {
        pthread_mutex_lock(&c->mu);
        c->tx_stop = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->tx, NULL);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
    }
    if (c->next_fd >= 0) close(c->next_fd);
    if (c->prev_fd >= 0) close(c->prev_fd);
    free(c->scratch);
    free(c);
}

static int ring_init(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err) {
    if (!cfg || !out) return rm_errf(err, RM_EINVAL, "ring: NULL argument");
    if (cfg->world_size < 1 || cfg->world_size > RM_RDZV_MAX_WORLD || cfg->rank < 0 ||
        cfg->rank >= cfg->world_size)
        return rm_errf(err, RM_EINVAL, "ring: bad rank %d / world size %d", cfg->rank, cfg->world_size);
    if (cfg->world_size > 1 && !cfg->peers) return rm_errf(err, RM_EINVAL, "ring: no peer list");
    int rc = RM_OK, own_lfd = -1;
    rm_comm *c = calloc(1, sizeof *c);
    if (!c) return rm_errf(err, RM_ENOMEM, "out of memory");
    c->rank = cfg->rank;
    c->n = cfg->world_size;
    c->epoch = cfg->epoch;
    c->next_fd = c->prev_fd = -1;
    c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10.0;
    atomic_init(&c->aborted, 0);
    atomic_init(&c->broken, 0);
    atomic_init(&c->rx_count, 0);
    size_t piece_bytes = RING_DEFAULT_PIECE_BYTES;
    const char *pe = getenv("RINGMASTER_RING_PIECE_KB");   /* tuning knob for the benchmark */
    if (pe && atoi(pe) >= 4 && atoi(pe) <= 65536) piece_bytes = (size_t)atoi(pe) << 10;
    c->piece = piece_bytes / sizeof(float);
    c->sockbuf = RING_SOCKBUF;
    const char *sb = getenv("RINGMASTER_RING_SOCKBUF_KB");   /* tuning knob for the benchmark */
    if (sb && atoi(sb) >= 64 && atoi(sb) <= 65536) c->sockbuf = atoi(sb) << 10;
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
    int lfd = cfg->listen_fd;
    if (lfd < 0) {
        char host[64];
        int port;
        RM_CHECK_GOTO(rm_comm_split_addr(cfg->peers[c->rank].addr, host, sizeof host, &port, err), rc, fail);
        RM_CHECK_GOTO(rm_net_listen(host, port, 128, &own_lfd, NULL, err), rc, fail);
        lfd = own_lfd;
    }
    uint8_t nonce_c[16];
    RM_CHECK_GOTO(ring_connect(c, cfg, deadline, nonce_c, err), rc, fail);
    RM_CHECK_GOTO(ring_accept(c, lfd, token, nonce_c, deadline, err), rc, fail);
    RM_CHECK_GOTO(ring_connector_ok(c, deadline, err), rc, fail);
    if (own_lfd >= 0) close(own_lfd);
    own_lfd = -1;
    /* The sender thread pays off when the rank has a core to spare for it: on by default from 4
     * CPUs in our affinity mask (on 2 CPUs shared by 2 ranks the two designs measured the same,
     * within noise). RINGMASTER_RING_TX_THREAD=0|1 overrides. */
    const char *tt = getenv("RINGMASTER_RING_TX_THREAD");
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    if (tt ? atoi(tt) != 0 : ncpu >= 4) {
        if (pthread_mutex_init(&c->mu, NULL) == 0) {
            if (pthread_cond_init(&c->cv, NULL) == 0) {
                if (pthread_create(&c->tx, NULL, ring_tx_main, c) == 0) c->tx_started = 1;
                else pthread_cond_destroy(&c->cv);
            }
            if (!c->tx_started) pthread_mutex_destroy(&c->mu);
        }
    }
    rm_debug("ring connected rank=%d world=%d epoch=%d", c->rank, c->n, c->epoch);
    *out = c;
    return RM_OK;
fail:
    if (own_lfd >= 0) close(own_lfd);
    ring_destroy(c);
    return rc;
}

static void ring_abort(rm_comm *c) {
    if (!c) return;
    atomic_store(&c->aborted, 1);
    if (c->next_fd >= 0) shutdown(c->next_fd, SHUT_RDWR);
    if (c->prev_fd >= 0) shutdown(c->prev_fd, SHUT_RDWR);
    ring_wake(c);
}

/* ------------------------------------------------------------------------------------------ */
/* data path                                                                                    */

typedef float v4f __attribute__((vector_size(16)));

/* dst = a + b (dst may alias a), optionally scaled; unaligned-safe through memcpy loads. */
static void reduce_add(float *dst, const float *a, const float *restrict b, size_t n, int scale,
                       float s) {
    size_t i = 0;
    if (!scale) {
        for (; i + 16 <= n; i += 16) {
            v4f x0, x1, x2, x3, y0, y1, y2, y3;
            memcpy(&x0, a + i, 16); memcpy(&x1, a + i + 4, 16);
            memcpy(&x2, a + i + 8, 16); memcpy(&x3, a + i + 12, 16);
            memcpy(&y0, b + i, 16); memcpy(&y1, b + i + 4, 16);
            memcpy(&y2, b + i + 8, 16); memcpy(&y3, b + i + 12, 16);
            x0 += y0; x1 += y1; x2 += y2; x3 += y3;
            memcpy(dst + i, &x0, 16); memcpy(dst + i + 4, &x1, 16);
            memcpy(dst + i + 8, &x2, 16); memcpy(dst + i + 12, &x3, 16);
        }
        for (; i < n; i++) dst[i] = a[i] + b[i];
    } else {
        v4f sv = {s, s, s, s};
        for (; i + 8 <= n; i += 8) {
            v4f x0, x1, y0, y1;
            memcpy(&x0, a + i, 16); memcpy(&x1, a + i + 4, 16);
            memcpy(&y0, b + i, 16); memcpy(&y1, b + i + 4, 16);
            x0 = (x0 + y0) * sv; x1 = (x1 + y1) * sv;
            memcpy(dst + i, &x0, 16); memcpy(dst + i + 4, &x1, 16);
        }
        for (; i < n; i++) dst[i] = (a[i] + b[i]) * s;
    }
}

static void seg_range(size_t count, int n, int s, size_t *off, size_t *len) {
    size_t base = count / (size_t)n, rem = count % (size_t)n, us = (size_t)s;
    *off = us * base + (us < rem ? us : rem);
    *len = base + (us < rem ? 1 : 0);
}

static size_t npieces(size_t len, size_t piece) { return (len + piece - 1) / piece; }

/* Move one direction of the ring past finished (j == np) or empty steps. Step t works on segment
 * (base - t) mod n: base = rank for sending, rank - 1 for receiving. When dep is set, the pieces of
 * every finished step >= 1 are added to it (the sender waits for that many received pieces). */
static inline void ring_advance(int *t, size_t *j, size_t *np, size_t *off, size_t *len,
                                size_t *dep, int T, size_t count, int n, int base, size_t P) {
    while (*t < T && *j == *np) {
        if (dep && *t >= 1) *dep += *np;
        (*t)++;
        *j = 0;
        if (*t < T) {
            seg_range(count, n, (base - *t + 2 * n) % n, off, len);
            *np = npieces(*len, P);
        }
    }
}

/* A failed collective leaves the ring out of step: shut both sockets so the neighbours fail at
 * once (RM_ECLOSED) instead of waiting out their timeout; the failure travels round the ring. */
static void ring_wake(rm_comm *c) {
    if (!c->tx_started) return;
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void ring_break(rm_comm *c) {
    atomic_store(&c->broken, 1);
    if (c->next_fd >= 0) shutdown(c->next_fd, SHUT_RDWR);
    if (c->prev_fd >= 0) shutdown(c->prev_fd, SHUT_RDWR);
    ring_wake(c);
}

/* Keep the first failure of a job (the other thread's later ECLOSED is only the echo). */
static void record_fail(rm_comm *c, int rc, const rm_err *e) {
    if (!c->tx_started) return;
    pthread_mutex_lock(&c->mu);
    if (!c->fail_rc) {
        c->fail_rc = rc;
        if (e) c->fail_err = *e;
        else rm_errf(&c->fail_err, rc, "ring: failed");
    }
    pthread_mutex_unlock(&c->mu);
}

static int fail_io(rm_comm *c, int rc, rm_err *err, const char *what, int peer) {
    int saved = errno;
    rm_err local = {0};
    if (!err) err = &local;
    if (atomic_load(&c->aborted)) rc = rm_errf(err, RM_ECLOSED, "ring: aborted");
    else if (rc == RM_ECLOSED)
        rc = rm_errf(err, rc, "ring: rank %d closed the connection during %s (peer died?)", peer, what);
    else if (rc == RM_ETIMEDOUT)
        rc = rm_errf(err, rc, "ring: no progress from rank %d for %.1f s during %s (peer hung or dead)",
                     peer, c->timeout_s, what);
    else
        rc = rm_errf(err, rc, "ring: %s with rank %d failed: %s", what, peer, strerror(saved));
    record_fail(c, rc, err);
    ring_break(c);
    return rc;
}

enum { RING_SEND = 1, RING_RECV = 2 };

/* One rank's side of the ring allreduce. mode RING_SEND|RING_RECV drives both sockets from this
 * thread; with the sender thread, the caller runs RING_RECV and the sender thread RING_SEND, the
 * dependency "piece j of step t-1 received" then travels through c->rx_count. */
static int ring_allreduce_f32(rm_comm *c, const float *src, float *dst, size_t count, rm_redop op,
                              int mode, rm_err *err) {
    const int n = c->n, r = c->rank, T = 2 * (n - 1);
    const size_t P = c->piece;
    const int prev = (r + n - 1) % n, next = (r + 1) % n;
    const float inv = 1.0f / (float)n;

    /* sender state */
    int st = 0;
    size_t sj = 0, s_done = 0, s_np, s_segoff, s_seglen, dep_base = 0;
    frame_hdr shdr;
    /* receiver state */
    int rt = 0;
    size_t rj = 0, r_done = 0, r_np, r_segoff, r_seglen, recv_count = 0;
    frame_hdr rhdr;

    const int shared = mode != (RING_SEND | RING_RECV);
    if (!(mode & RING_SEND)) st = T;
    if (!(mode & RING_RECV)) rt = T;
    seg_range(count, n, r, &s_segoff, &s_seglen);           /* step 0: (base - 0) mod n */
    s_np = npieces(s_seglen, P);
    seg_range(count, n, (r - 1 + n) % n, &r_segoff, &r_seglen);
    r_np = npieces(r_seglen, P);
    /* skip empty steps (count < n) */
    ring_advance(&st, &sj, &s_np, &s_segoff, &s_seglen, &dep_base, T, count, n, r, P);
    ring_advance(&rt, &rj, &r_np, &r_segoff, &r_seglen, NULL, T, count, n, r - 1, P);

    double last_progress = rm_mono();
    while (st < T || rt < T) {
        int progress = 0;
        if (atomic_load_explicit(&c->aborted, memory_order_relaxed) ||
            (shared && atomic_load_explicit(&c->broken, memory_order_relaxed)))
            return fail_io(c, RM_ECLOSED, err, "allreduce", rt < T ? prev : next);
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
            if (got == 0) return fail_io(c, RM_ECLOSED, err, "allreduce", prev);
            if (got < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                if (errno == EINTR) continue;
                return fail_io(c, errno == ECONNRESET ? RM_ECLOSED : RM_EIO, err, "allreduce", prev);
            }
            progress = 1;
            size_t before = r_done;
            r_done += (size_t)got;
            if (before < sizeof(frame_hdr) && r_done >= sizeof(frame_hdr)) {
                if (rhdr.magic != FRAME_MAGIC || rhdr.seq != c->recv_seq ||
                    rhdr.len != (uint32_t)(plen * sizeof(float)) ||
                    rhdr.check != (FRAME_MAGIC ^ rhdr.seq ^ rhdr.len ^ FRAME_CHECK)) {
                    rm_err pe = {0};
                    rm_errf(&pe, RM_EPROTO,
                            "ring: garbage or desync from rank %d (frame magic %08x seq %u len %u, "
                            "want seq %u len %zu)", prev, rhdr.magic, rhdr.seq, rhdr.len,
                            c->recv_seq, plen * sizeof(float));
                    record_fail(c, RM_EPROTO, &pe);
                    ring_break(c);
                    if (err) *err = pe;
                    return RM_EPROTO;
                }
            }
            if (r_done < total) continue;
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
            ring_advance(&rt, &rj, &r_np, &r_segoff, &r_seglen, NULL, T, count, n, r - 1, P);
            break;   /* a completed piece may unlock a send: go send */
        }
        /* ---- send what is ready ---- */
        if (shared && st < T) recv_count = atomic_load_explicit(&c->rx_count, memory_order_acquire);
        while (st < T && (st == 0 || recv_count > dep_base + sj)) {
            size_t plen = s_seglen - sj * P < P ? s_seglen - sj * P : P;
            size_t total = sizeof(frame_hdr) + plen * sizeof(float);
            const float *from = (st == 0 ? src : dst) + s_segoff + sj * P;
            if (s_done == 0) {
                shdr.magic = FRAME_MAGIC;
                shdr.seq = c->send_seq;
                shdr.len = (uint32_t)(plen * sizeof(float));
                shdr.check = FRAME_MAGIC ^ shdr.seq ^ shdr.len ^ FRAME_CHECK;
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
                if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                if (errno == EINTR) continue;
                return fail_io(c, (errno == EPIPE || errno == ECONNRESET) ? RM_ECLOSED : RM_EIO, err,
                               "allreduce", next);
            }
            progress = 1;
            s_done += (size_t)put;
            if (s_done < total) continue;
            c->send_seq++;
            s_done = 0;
            sj++;
            ring_advance(&st, &sj, &s_np, &s_segoff, &s_seglen, &dep_base, T, count, n, r, P);
        }
        if (progress) {
            last_progress = -1;   /* refresh lazily: clock only read before sleeping */
            continue;
        }
        double now = rm_mono();
        if (last_progress < 0) last_progress = now;
        double left = last_progress + c->timeout_s - now;
        if (left <= 0) return fail_io(c, RM_ETIMEDOUT, err, "allreduce", rt < T ? prev : next);
        int can_send = st < T && (st == 0 || recv_count > dep_base + sj);
        if (shared && rt >= T && st < T && !can_send) {
            /* sender thread waiting for the receiver's next piece */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double w = left < 0.05 ? left : 0.05;
            ts.tv_sec += (time_t)w;
            ts.tv_nsec += (long)((w - (double)(time_t)w) * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_mutex_lock(&c->mu);
            if (atomic_load(&c->rx_count) <= dep_base + sj && !atomic_load(&c->broken) &&
                !atomic_load(&c->aborted))
                pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            pthread_mutex_unlock(&c->mu);
            if (atomic_load(&c->broken) || atomic_load(&c->aborted))
                return fail_io(c, RM_ECLOSED, err, "allreduce", prev);
            if (atomic_load(&c->rx_count) > dep_base + sj) last_progress = -1;
            continue;
        }
        /* only the sockets this side still needs: a finished neighbour may close legitimately */
        struct pollfd pf[2] = {
            {.fd = rt < T ? c->prev_fd : -1, .events = POLLIN},
            {.fd = st < T ? c->next_fd : -1, .events = (short)(POLLRDHUP | (can_send ? POLLOUT : 0))},
        };
        int pr = poll(pf, 2, (int)(left * 1000.0) + 1);
        if (pr < 0 && errno != EINTR) return fail_io(c, RM_EIO, err, "allreduce poll", prev);
        if (pr > 0 && st < T && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return fail_io(c, RM_ECLOSED, err, "allreduce", next);
    }
    return RM_OK;
}

static void *ring_tx_main(void *arg) {
    rm_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->tx_stop && c->tx_job == c->tx_done) pthread_cond_wait(&c->cv, &c->mu);
        if (c->tx_stop) break;
        const float *src = c->j_src;
        float *dst = c->j_dst;
        size_t count = c->j_count;
        pthread_mutex_unlock(&c->mu);
        rm_err e = {0};
        (void)ring_allreduce_f32(c, src, dst, count, RM_OP_SUM, RING_SEND, &e);   /* failures recorded */
        pthread_mutex_lock(&c->mu);
        c->tx_done = c->tx_job;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Large collectives: this thread receives and reduces while the sender thread sends. */
static int ring_allreduce_threaded(rm_comm *c, const float *src, float *dst, size_t count, rm_redop op,
                                   rm_err *err) {
    pthread_mutex_lock(&c->mu);
    c->j_src = src;
    c->j_dst = dst;
    c->j_count = count;
    atomic_store(&c->rx_count, 0);
    c->fail_rc = 0;
    c->tx_job++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    rm_err e = {0};
    (void)ring_allreduce_f32(c, src, dst, count, op, RING_RECV, &e);
    pthread_mutex_lock(&c->mu);
    while (c->tx_done != c->tx_job) pthread_cond_wait(&c->cv, &c->mu);   /* bounded: see tx timeouts */
    int rc = c->fail_rc;
    if (rc && err) *err = c->fail_err;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Two ranks, small buffer: one exchange instead of two ring steps (half the latency, same bytes
 * on the wire). Each rank sends its whole buffer and adds the peer's; a+b == b+a in IEEE
 * arithmetic, so both ranks still get bit-identical results. count fits one scratch piece. */
static int exchange2_f32(rm_comm *c, const float *src, float *dst, size_t count, rm_redop op, rm_err *err) {
    const int peer = 1 - c->rank;
    const size_t bytes = count * sizeof(float), total = sizeof(frame_hdr) + bytes;
    frame_hdr shdr = {FRAME_MAGIC, c->send_seq, (uint32_t)bytes, 0}, rhdr;
    shdr.check = FRAME_MAGIC ^ shdr.seq ^ shdr.len ^ FRAME_CHECK;
    size_t sent = 0, got = 0;
    double last_progress = rm_mono();
    while (sent < total || got < total) {
        int progress = 0;
        if (atomic_load_explicit(&c->aborted, memory_order_relaxed)) return fail_io(c, RM_ECLOSED, err, "allreduce", peer);
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
                return fail_io(c, (errno == EPIPE || errno == ECONNRESET) ? RM_ECLOSED : RM_EIO, err, "allreduce", peer);
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
            if (k == 0) return fail_io(c, RM_ECLOSED, err, "allreduce", peer);
            if (k > 0) {
                size_t before = got;
                got += (size_t)k;
                progress = 1;
                if (before < sizeof rhdr && got >= sizeof rhdr &&
                    (rhdr.magic != FRAME_MAGIC || rhdr.seq != c->recv_seq || rhdr.len != (uint32_t)bytes ||
                     rhdr.check != (FRAME_MAGIC ^ rhdr.seq ^ rhdr.len ^ FRAME_CHECK))) {
                    ring_break(c);
                    return rm_errf(err, RM_EPROTO,
                                   "ring: garbage or desync from rank %d (frame magic %08x seq %u len %u, "
                                   "want seq %u len %zu)", peer, rhdr.magic, rhdr.seq, rhdr.len, c->recv_seq, bytes);
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
        if (last_progress < 0) last_progress = now;
        double left = last_progress + c->timeout_s - now;
        if (left <= 0) return fail_io(c, RM_ETIMEDOUT, err, "allreduce", peer);
        struct pollfd pf[2] = {
            {.fd = got < total ? c->prev_fd : -1, .events = POLLIN},
            {.fd = sent < total ? c->next_fd : -1, .events = POLLRDHUP | POLLOUT},
        };
        int pr = poll(pf, 2, (int)(left * 1000.0) + 1);
        if (pr < 0 && errno != EINTR) return fail_io(c, RM_EIO, err, "allreduce poll", peer);
        if (pr > 0 && sent < total && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return fail_io(c, RM_ECLOSED, err, "allreduce", peer);
    }
    c->send_seq++;
    c->recv_seq++;
    reduce_add(dst, src, c->scratch, count, op == RM_OP_AVG, 0.5f);
    return RM_OK;
}

static int ring_allreduce_oop(rm_comm *c, const void *send, void *recv, size_t count, rm_dtype dt,
                              rm_redop op, rm_err *err) {
    if (!c || (count && (!send || !recv))) return rm_errf(err, RM_EINVAL, "ring: NULL argument");
    if (dt != RM_DT_F32)
        return rm_errf(err, RM_EUNSUPPORTED, "ring: only float32 is supported (got %s)", rm_dtype_name(dt));
    if (op != RM_OP_SUM && op != RM_OP_AVG) return rm_errf(err, RM_EINVAL, "ring: unknown reduction");
    if (atomic_load(&c->aborted)) return rm_errf(err, RM_ECLOSED, "ring: aborted");
    if (atomic_load(&c->broken)) return rm_errf(err, RM_ECLOSED, "ring: unusable after an earlier failure");
    if (count == 0) return RM_OK;
    if (c->n == 1) {
        if (send != recv) memmove(recv, send, count * sizeof(float));
        return RM_OK;
    }
    if (c->n == 2 && count * sizeof(float) <= RING_EXCHANGE_MAX_BYTES && count <= c->piece)
        return exchange2_f32(c, send, recv, count, op, err);
    if (c->tx_started && count * sizeof(float) >= RING_TX_MIN_BYTES)
        return ring_allreduce_threaded(c, send, recv, count, op, err);
    return ring_allreduce_f32(c, send, recv, count, op, RING_SEND | RING_RECV, err);
}

static int ring_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err) {
    return ring_allreduce_oop(c, buf, buf, count, dt, op, err);
}

static int ring_barrier(rm_comm *c, rm_err *err) {
    float x = 0;
    return ring_allreduce_oop(c, &x, &x, 1, RM_DT_F32, RM_OP_SUM, err);
}

static const rm_comm_ops ring_ops = {
    .name = "ring",
    .init = ring_init,
    .allreduce = ring_allreduce,
    .allreduce_oop = ring_allreduce_oop,
    .barrier = ring_barrier,
    .abort = ring_abort,
    .destroy = ring_destroy,
};

const rm_comm_ops *rm_comm_ring_ops(void) { return &ring_ops; }
