/* Tests for worker/comm/comm_ring.c: a world of n ranks as threads in this process over loopback
 * sockets. Correctness against a naive sum for world sizes 1..8 and awkward counts (0, 1, 3,
 * n-1, odd, multi-piece), bit-identical results across ranks, out-of-place and AVG; strangers and
 * garbage refused while the ring still forms; wrong token; a dead or hung peer noticed within the
 * timeout; abort() from another thread; desynchronised ranks give RM_EPROTO.
 * CUnit asserts run on the main thread only (rank threads record results). */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/unit/testutil.h"
#include "common/clock.h"
#include "worker/comm/comm.h"
#include "worker/comm/net.h"

#define MAXW 8

typedef struct world world;
typedef struct rank_ctx {
    world *w;
    int rank;
    rm_comm *comm;
    int init_rc, rc;
    rm_err err;
    float *buf, *out;
    double elapsed;
} rank_ctx;

struct world {
    int n, epoch;
    double timeout_s;
    const char *tokens[MAXW];
    rm_rdzv_peer peers[MAXW];
    int lfd[MAXW];
    rm_ring_listener *lst[MAXW]; /* long-lived listeners (world_listen_persistent), else NULL */
    rank_ctx r[MAXW];
    pthread_t th[MAXW];
    /* work description */
    size_t count;
    rm_redop op;
    int oop;
    int behave[MAXW];   /* 0 normal, 1 skip the collective (hang), 2 destroy the comm (die) */
    int epoch_of[MAXW]; /* 0 = w->epoch */
};

static const rm_comm_ops *ring(void)
{
    return rm_comm_backend("ring");
}

static void world_listen(world *w, int n)
{
    memset(w, 0, sizeof *w);
    w->n = n;
    w->epoch = 7;
    w->timeout_s = 5;
    for (int i = 0; i < n; i++) {
        int port = 0;
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_comm_listen("127.0.0.1", &w->lfd[i], &port, &e), 0);
        w->peers[i].rank = i;
        snprintf(w->peers[i].addr, sizeof w->peers[i].addr, "127.0.0.1:%d", port);
        snprintf(w->peers[i].worker_id, sizeof w->peers[i].worker_id, "%d", i);
        w->tokens[i] = "s3cret-token";
        w->r[i].w = w;
        w->r[i].rank = i;
    }
}

/* Like a worker: a listener thread per rank that lives across formations. */
static void world_listen_persistent(world *w, int n)
{
    world_listen(w, n);
    for (int i = 0; i < n; i++) {
        rm_err e = {0};
        CU_ASSERT_EQUAL_FATAL(rm_ring_listener_start(w->lfd[i], 1, w->tokens[i], &w->lst[i], &e), 0);
        w->lfd[i] = -1;
    }
}

static void *init_thread(void *arg)
{
    rank_ctx *r = arg;
    world *w = r->w;
    int epoch = w->epoch_of[r->rank] ? w->epoch_of[r->rank] : w->epoch;
    rm_comm_cfg cfg = {.rank = r->rank,
                       .world_size = w->n,
                       .epoch = epoch,
                       .peers = w->peers,
                       .token = w->tokens[r->rank],
                       .listener = w->lst[r->rank],
                       .listen_fd = w->lfd[r->rank],
                       .timeout_s = w->timeout_s};
    double t0 = rm_mono();
    r->init_rc = ring()->init(&cfg, &r->comm, &r->err);
    r->elapsed = rm_mono() - t0;
    return NULL;
}

static void run_all(world *w, void *(*fn)(void *))
{
    for (int i = 0; i < w->n; i++)
        pthread_create(&w->th[i], NULL, fn, &w->r[i]);
    for (int i = 0; i < w->n; i++)
        pthread_join(w->th[i], NULL);
}

static int world_init(world *w)
{
    run_all(w, init_thread);
    int bad = 0;
    for (int i = 0; i < w->n; i++)
        bad |= w->r[i].init_rc != 0;
    return bad ? -1 : 0;
}

static void world_close(world *w)
{
    for (int i = 0; i < w->n; i++) {
        ring()->destroy(w->r[i].comm);
        w->r[i].comm = NULL;
        free(w->r[i].buf);
        free(w->r[i].out);
        w->r[i].buf = w->r[i].out = NULL;
        if (w->lfd[i] >= 0)
            close(w->lfd[i]);
        rm_ring_listener_free(w->lst[i]);
        w->lst[i] = NULL;
    }
}

static void *allreduce_thread(void *arg)
{
    rank_ctx *r = arg;
    world *w = r->w;
    double t0 = rm_mono();
    if (w->behave[r->rank] == 1) {
        usleep(300 * 1000); /* hang: hold the sockets open, never join the collective */
        r->rc = 0;
    } else if (w->behave[r->rank] == 2) {
        ring()->destroy(r->comm); /* die: sockets close */
        r->comm = NULL;
        r->rc = 0;
    } else if (w->oop) {
        r->rc = ring()->allreduce_oop(r->comm, r->buf, r->out, w->count, RM_DT_F32, w->op, &r->err);
    } else {
        r->rc = ring()->allreduce(r->comm, r->buf, w->count, RM_DT_F32, w->op, &r->err);
    }
    r->elapsed = rm_mono() - t0;
    return NULL;
}

static float val(int rank, size_t i)
{
    /* non-integer values so the reduction order matters for the bit-identity check */
    return (float)((double)((i * 2654435761u + (size_t)rank * 40503u) % 1000) / 7.0 - 60.0);
}

/* Run one allreduce on an initialised world and check it; returns number of failures. */
static int check_allreduce(world *w, size_t count, rm_redop op, int oop)
{
    w->count = count;
    w->op = op;
    w->oop = oop;
    for (int i = 0; i < w->n; i++) {
        rank_ctx *r = &w->r[i];
        free(r->buf);
        free(r->out);
        r->buf = malloc((count + 1) * sizeof(float));
        r->out = malloc((count + 1) * sizeof(float));
        for (size_t k = 0; k < count; k++)
            r->buf[k] = val(i, k);
        for (size_t k = 0; k <= count; k++)
            r->out[k] = -12345.0f;
        r->buf[count] = 999.0f; /* sentinel past the end must survive */
    }
    run_all(w, allreduce_thread);
    int fails = 0;
    for (int i = 0; i < w->n; i++) {
        if (w->r[i].rc) {
            fprintf(stderr, "n=%d count=%zu rank %d: rc=%d %s\n", w->n, count, i, w->r[i].rc,
                    w->r[i].err.msg);
            fails++;
        }
    }
    if (fails)
        return fails;
    const float *r0 = oop ? w->r[0].out : w->r[0].buf;
    for (size_t k = 0; k < count; k++) {
        double s = 0;
        for (int i = 0; i < w->n; i++)
            s += val(i, k);
        if (op == RM_OP_AVG)
            s /= w->n;
        if (fabs(r0[k] - s) > 1e-4 * (fabs(s) + 1) * w->n) {
            if (fails < 3)
                fprintf(stderr, "n=%d count=%zu k=%zu got %g want %g\n", w->n, count, k, (double)r0[k], s);
            fails++;
        }
    }
    for (int i = 1; i < w->n; i++) {
        const float *ri = oop ? w->r[i].out : w->r[i].buf;
        if (count && memcmp(ri, r0, count * sizeof(float)) != 0) {
            fprintf(stderr, "n=%d count=%zu rank %d differs from rank 0\n", w->n, count, i);
            fails++;
        }
    }
    for (int i = 0; i < w->n; i++) {
        if (w->r[i].buf[count] != 999.0f)
            fails++;
        if (oop && w->r[i].out[count] != -12345.0f)
            fails++;
        if (oop && count && w->r[i].buf[0] != val(i, 0))
            fails++; /* send buffer untouched */
    }
    return fails;
}

static void test_sizes(void)
{
    setenv("RINGMASTER_RING_PIECE_KB", "8", 1);  /* small pieces: the pipeline crosses steps */
    setenv("RINGMASTER_RING_TX_THREAD", "1", 1); /* >= 1 MiB below goes through the sender thread */
    for (int n = 1; n <= MAXW; n++) {
        world *w = calloc(1, sizeof *w);
        world_listen(w, n);
        CU_ASSERT_EQUAL_FATAL(world_init(w), 0);
        size_t counts[] = {0, 1, 3, (size_t)(n > 1 ? n - 1 : 1), (size_t)n + 1, 1001, 12345, 50003};
        for (size_t c = 0; c < RM_ARRAY_LEN(counts); c++) {
            CU_ASSERT_EQUAL(check_allreduce(w, counts[c], RM_OP_SUM, 0), 0);
        }
        CU_ASSERT_EQUAL(check_allreduce(w, 4099, RM_OP_AVG, 0), 0);
        if (n == 2 || n == 3 || n == 5 || n == 8) /* >= 1 MiB: the sender-thread path, many pieces */
            CU_ASSERT_EQUAL(check_allreduce(w, 300007, n == 5 ? RM_OP_AVG : RM_OP_SUM, n == 3), 0);
        CU_ASSERT_EQUAL(check_allreduce(w, 777, RM_OP_SUM, 1), 0);
        CU_ASSERT_EQUAL(check_allreduce(w, 10007, RM_OP_AVG, 1), 0);
        /* world size 1: the barrier is a no-op that succeeds (n > 1: barrier_synchronises) */
        rm_err e = {0};
        if (n == 1)
            CU_ASSERT_EQUAL(ring()->barrier(w->r[0].comm, &e), 0);
        world_close(w);
        free(w);
    }
    unsetenv("RINGMASTER_RING_PIECE_KB");
    unsetenv("RINGMASTER_RING_TX_THREAD");
}

static void test_large_default_pieces(void)
{
    world w;
    world_listen(&w, 3);
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
    CU_ASSERT_EQUAL(check_allreduce(&w, (1u << 20) + 13, RM_OP_SUM, 0), 0); /* 4 MiB, several pieces */
    world_close(&w);
}

static void test_large_single_thread(void)
{
    /* the same with one thread driving both sockets (RINGMASTER_RING_TX_THREAD=0) */
    setenv("RINGMASTER_RING_TX_THREAD", "0", 1);
    setenv("RINGMASTER_RING_PIECE_KB", "64", 1);
    world w;
    world_listen(&w, 4);
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
    CU_ASSERT_EQUAL(check_allreduce(&w, (1u << 19) + 5, RM_OP_SUM, 0), 0);
    CU_ASSERT_EQUAL(check_allreduce(&w, (1u << 19) + 3, RM_OP_AVG, 1), 0);
    world_close(&w);
    unsetenv("RINGMASTER_RING_TX_THREAD");
    unsetenv("RINGMASTER_RING_PIECE_KB");
}

static void test_spin(void)
{
    /* RINGMASTER_RING_SPIN_US: the busy-poll path gives the same results (2 ranks: the exchange; 3
     * and 4: the ring) and still notices a dead peer at once and a hung one at the timeout. The
     * spin is longer than every wait here, so the tries before poll() do the whole job. */
    setenv("RINGMASTER_RING_SPIN_US", "200000", 1);
    setenv("RINGMASTER_RING_PIECE_KB", "8", 1);
    for (int n = 2; n <= 4; n++) {
        world w;
        world_listen(&w, n);
        CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
        size_t counts[] = {1, 257, 4099, 16384, (1u << 18) + 3}; /* the last one: 1 MiB + 12 B, no spin */
        for (size_t c = 0; c < RM_ARRAY_LEN(counts); c++)
            CU_ASSERT_EQUAL(check_allreduce(&w, counts[c], c % 2 ? RM_OP_AVG : RM_OP_SUM, (int)(c % 2)), 0);
        world_close(&w);
    }
    world w;
    world_listen(&w, 3);
    w.timeout_s = 10;
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
    w.behave[2] = 2; /* dies */
    check_allreduce(&w, 1 << 14, RM_OP_SUM, 0);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(w.r[i].rc, RM_ECLOSED);
        CU_ASSERT(w.r[i].elapsed < 5.0);
    }
    world_close(&w);
    world_listen(&w, 3);
    w.timeout_s = 1.0;
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
    w.behave[1] = 1; /* hangs: the spin must not stretch the timeout */
    check_allreduce(&w, 1 << 14, RM_OP_SUM, 0);
    CU_ASSERT(w.r[0].rc == RM_ETIMEDOUT || w.r[2].rc == RM_ETIMEDOUT);
    CU_ASSERT(w.r[2].elapsed < 3.0);
    world_close(&w);
    unsetenv("RINGMASTER_RING_SPIN_US");
    unsetenv("RINGMASTER_RING_PIECE_KB");
}

static void test_bad_dtype(void)
{
    world w;
    world_listen(&w, 1);
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
    uint16_t h[4] = {0};
    rm_err e = {0};
    CU_ASSERT_EQUAL(ring()->allreduce(w.r[0].comm, h, 4, RM_DT_BF16, RM_OP_SUM, &e), RM_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "float32"));
    world_close(&w);
}

static void test_bad_config(void)
{
    rm_comm *c = NULL;
    rm_err e = {0};
    rm_comm_cfg cfg = {.rank = 2, .world_size = 2, .listen_fd = -1};
    CU_ASSERT_EQUAL(ring()->init(&cfg, &c, &e), RM_EINVAL);
    cfg.rank = 0;
    CU_ASSERT_EQUAL(ring()->init(&cfg, &c, &e), RM_EINVAL); /* no peers */
    CU_ASSERT_PTR_NULL(c);
    ring()->destroy(NULL);
    ring()->abort(NULL);
}

/* --- strangers --- */
typedef struct {
    int port, mode;
    atomic_int sent;
    int refused_rc; /* what the stranger saw after sending: RM_ECLOSED = the ring hung up on it */
} stranger;

static void *stranger_thread(void *arg)
{
    stranger *s = arg;
    int fd = -1;
    rm_err e = {0};
    s->refused_rc = 1;
    if (rm_net_connect("127.0.0.1", s->port, rm_mono() + 2, &fd, &e)) {
        atomic_store(&s->sent, 1);
        return NULL;
    }
    if (s->mode == 0) {
        const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
        rm_net_send_all(fd, junk, sizeof junk, rm_mono() + 2, &e);
    } else {
        /* right magic and version, wrong epoch */
        uint32_t hello[9] = {htonl(0x524d5247u), htonl(1), htonl(6), htonl(1), htonl(2), 1, 2, 3, 4};
        rm_net_send_all(fd, hello, sizeof hello, rm_mono() + 2, &e);
    }
    atomic_store(&s->sent, 1);
    char b[256];
    int rc;
    do { /* drain anything until the ring closes on us */
        rc = rm_net_recv_all(fd, b, 1, rm_mono() + 5, &e);
    } while (rc == 0);
    s->refused_rc = rc;
    close(fd);
    return NULL;
}

static void test_stranger_refused(void)
{
    world w;
    world_listen(&w, 2);
    int port0 = atoi(strchr(w.peers[0].addr, ':') + 1);
    stranger s1 = {.port = port0, .mode = 0}, s2 = {.port = port0, .mode = 1};
    pthread_t t1, t2;
    /* strangers connect and talk first, so they sit in rank 0's accept queue ahead of the real prev */
    pthread_create(&t1, NULL, stranger_thread, &s1);
    pthread_create(&t2, NULL, stranger_thread, &s2);
    while (!atomic_load(&s1.sent) || !atomic_load(&s2.sent))
        usleep(1000);
    CU_ASSERT_EQUAL(world_init(&w), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CU_ASSERT_EQUAL(s1.refused_rc, RM_ECLOSED);
    CU_ASSERT_EQUAL(s2.refused_rc, RM_ECLOSED);
    if (w.r[0].init_rc == 0 && w.r[1].init_rc == 0)
        CU_ASSERT_EQUAL(check_allreduce(&w, 1000, RM_OP_SUM, 0), 0);
    world_close(&w);
}

static void test_wrong_token(void)
{
    world w;
    world_listen(&w, 2);
    w.timeout_s = 1.5;
    w.tokens[1] = "not-the-token";
    double t0 = rm_mono();
    CU_ASSERT_NOT_EQUAL(world_init(&w), 0);
    CU_ASSERT(rm_mono() - t0 < 4.0);
    /* each side sees the other fail authentication, gives up waiting for a valid prev, or sees
     * the other side (already failed, its formation-only listener gone) hang up on it */
    CU_ASSERT(w.r[1].init_rc == RM_EAUTH || w.r[1].init_rc == RM_ETIMEDOUT || w.r[1].init_rc == RM_ECLOSED);
    CU_ASSERT(w.r[0].init_rc == RM_EAUTH || w.r[0].init_rc == RM_ETIMEDOUT || w.r[0].init_rc == RM_ECLOSED);
    CU_ASSERT(w.r[0].init_rc == RM_EAUTH || w.r[1].init_rc == RM_EAUTH);
    for (int i = 0; i < 2; i++)
        if (w.r[i].init_rc == RM_EAUTH)
            CU_ASSERT_PTR_NOT_NULL(strstr(w.r[i].err.msg, "token"));
    world_close(&w);
}

static void test_wrong_epoch_peer(void)
{
    /* rank 1 believes in an older epoch: rank 0 refuses its hello and rank 1 refuses rank 0 */
    world w;
    world_listen(&w, 2);
    w.timeout_s = 1.0;
    w.epoch_of[1] = 6;
    double t0 = rm_mono();
    run_all(&w, init_thread);
    CU_ASSERT(rm_mono() - t0 < 3.0);
    /* rank 0 waits out its deadline for a valid prev, or sees rank 1 (already failed) hang up on
     * its handshake; neither side reads this as a wrong token */
    CU_ASSERT(w.r[0].init_rc == RM_ETIMEDOUT || w.r[0].init_rc == RM_ECLOSED);
    CU_ASSERT_NOT_EQUAL(w.r[1].init_rc, 0);
    for (int i = 0; i < 2; i++)
        CU_ASSERT_PTR_NULL(strstr(w.r[i].err.msg, "token"));
    CU_ASSERT_PTR_NULL(w.r[0].comm);
    CU_ASSERT_PTR_NULL(w.r[1].comm);
    world_close(&w);
}

static void test_connect_timeout(void)
{
    /* next rank never shows up: init fails within the timeout, not forever */
    world w;
    world_listen(&w, 2);
    w.timeout_s = 0.5;
    close(w.lfd[1]);
    w.lfd[1] = -1;
    double t0 = rm_mono();
    init_thread(&w.r[0]);
    CU_ASSERT_EQUAL(w.r[0].init_rc, RM_ETIMEDOUT);
    CU_ASSERT(rm_mono() - t0 < 2.0);
    CU_ASSERT_PTR_NULL(w.r[0].comm);
    w.n = 1;
    world_close(&w);
}

static void test_peer_dies(void)
{
    for (int mode = 0; mode < 2; mode++) { /* one thread, then with the sender thread */
        setenv("RINGMASTER_RING_TX_THREAD", mode ? "1" : "0", 1);
        world w;
        world_listen(&w, 3);
        w.timeout_s = 10; /* a closed socket must be noticed at once, not at the timeout */
        CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
        w.behave[2] = 2;
        check_allreduce(&w, 1 << 18, RM_OP_SUM, 0);
        for (int i = 0; i < 2; i++) {
            CU_ASSERT_EQUAL(w.r[i].rc, RM_ECLOSED);
            CU_ASSERT(w.r[i].elapsed < 5.0);
            CU_ASSERT_PTR_NOT_NULL(strstr(w.r[i].err.msg, "rank"));
        }
        /* the comm stays failed */
        rm_err e = {0};
        float x = 1;
        CU_ASSERT_EQUAL(ring()->allreduce(w.r[0].comm, &x, 1, RM_DT_F32, RM_OP_SUM, &e), RM_ECLOSED);
        world_close(&w);
    }
    unsetenv("RINGMASTER_RING_TX_THREAD");
}

static void test_peer_hangs(void)
{
    world w;
    world_listen(&w, 3);
    w.timeout_s = 1.0;
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
    w.behave[1] = 1;
    /* the hung rank sleeps 300 ms then returns without closing; others must time out ~1 s */
    check_allreduce(&w, 1 << 16, RM_OP_SUM, 0);
    /* ranks 0 and 2 both wait ~1 s without progress; the first to time out breaks the ring, so
     * the other may see the close instead (a loaded machine decides which) */
    CU_ASSERT(w.r[0].rc == RM_ETIMEDOUT || w.r[0].rc == RM_ECLOSED);
    CU_ASSERT(w.r[2].rc == RM_ETIMEDOUT || w.r[2].rc == RM_ECLOSED);
    CU_ASSERT(w.r[0].rc == RM_ETIMEDOUT || w.r[2].rc == RM_ETIMEDOUT);
    CU_ASSERT(w.r[2].elapsed < 3.0);
    CU_ASSERT(w.r[2].elapsed > 0.9);
    world_close(&w);
}

typedef struct {
    rm_comm *c;
    int delay_ms;
} aborter;
static void *abort_thread(void *arg)
{
    aborter *a = arg;
    usleep((useconds_t)a->delay_ms * 1000);
    ring()->abort(a->c);
    return NULL;
}

static void test_abort(void)
{
    for (int mode = 0; mode < 2; mode++) {
        setenv("RINGMASTER_RING_TX_THREAD", mode ? "1" : "0", 1);
        world w;
        world_listen(&w, 2);
        w.timeout_s = 10;
        CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
        w.behave[1] = 1; /* rank 1 does not join: rank 0 blocks until aborted */
        aborter a = {w.r[0].comm, 200};
        pthread_t t;
        pthread_create(&t, NULL, abort_thread, &a);
        check_allreduce(&w, 1 << 18, RM_OP_SUM, 0);
        pthread_join(t, NULL);
        CU_ASSERT_EQUAL(w.r[0].rc, RM_ECLOSED);
        CU_ASSERT(w.r[0].elapsed < 1.5);
        CU_ASSERT_PTR_NOT_NULL(strstr(w.r[0].err.msg, "abort"));
        world_close(&w);
    }
    unsetenv("RINGMASTER_RING_TX_THREAD");
}

static void *desync_thread(void *arg)
{
    rank_ctx *r = arg;
    size_t count = r->rank == 0 ? 1000 : 3000; /* ranks disagree on the size */
    r->rc = ring()->allreduce(r->comm, r->buf, count, RM_DT_F32, RM_OP_SUM, &r->err);
    return NULL;
}

static void test_desync_is_eproto(void)
{
    world w;
    world_listen(&w, 2);
    w.timeout_s = 2;
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
    for (int i = 0; i < 2; i++)
        w.r[i].buf = calloc(3000, sizeof(float));
    double t0 = rm_mono();
    run_all(&w, desync_thread);
    /* whoever reads the first bad frame says EPROTO and shuts the ring; the other sees it close */
    CU_ASSERT(w.r[0].rc == RM_EPROTO || w.r[1].rc == RM_EPROTO);
    CU_ASSERT(w.r[0].rc == RM_EPROTO || w.r[0].rc == RM_ECLOSED);
    CU_ASSERT(w.r[1].rc == RM_EPROTO || w.r[1].rc == RM_ECLOSED);
    CU_ASSERT(rm_mono() - t0 < 1.0);
    CU_ASSERT(strstr(w.r[0].err.msg, "desync") || strstr(w.r[1].err.msg, "desync"));
    world_close(&w);
}

/* --- barrier --- */
typedef struct {
    rank_ctx *r;
    double enter, leave;
    int rc;
} barrier_ctx;
static barrier_ctx g_bar[MAXW];
static void *barrier_thread(void *arg)
{
    rank_ctx *r = arg;
    barrier_ctx *b = &g_bar[r->rank];
    usleep((useconds_t)r->rank * 150 * 1000); /* ranks arrive 150 ms apart */
    rm_err e = {0};
    b->enter = rm_mono();
    b->rc = ring()->barrier(r->comm, &e);
    b->leave = rm_mono();
    return NULL;
}

/* A barrier at world sizes > 1 really synchronises: nobody leaves before the last rank entered
 * (the last one arrives 150 ms x (n-1) after the first), and the comm stays usable. */
static void test_barrier_synchronises(void)
{
    for (int n = 2; n <= 4; n++) {
        world w;
        world_listen(&w, n);
        CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
        memset(g_bar, 0, sizeof g_bar);
        run_all(&w, barrier_thread);
        double last_enter = 0, first_leave = 1e300;
        for (int i = 0; i < n; i++) {
            CU_ASSERT_EQUAL(g_bar[i].rc, 0);
            if (g_bar[i].enter > last_enter)
                last_enter = g_bar[i].enter;
            if (g_bar[i].leave < first_leave)
                first_leave = g_bar[i].leave;
        }
        CU_ASSERT(first_leave >= last_enter);
        CU_ASSERT(g_bar[0].leave - g_bar[0].enter >= 0.1 * (n - 1)); /* rank 0 really waited */
        CU_ASSERT_EQUAL(check_allreduce(&w, 1000, RM_OP_SUM, 0), 0);
        world_close(&w);
    }
}

/* --- strangers while the ring trains (docs/architecture.md#robustness) --- */

/* A raw connection from src (e.g. "127.0.0.2") to port, not waited for. -1 on failure. */
static int raw_connect(const char *src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the other end closed fd (EOF or reset) within the deadline; data before it is skipped. */
static int closed_by_peer(int fd, double deadline)
{
    char b[256];
    for (;;) {
        ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return 1;
        if (k > 0)
            continue;
        double left = deadline - rm_mono();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, (int)(left * 1000) + 1);
    }
}

static int port_of(const world *w, int rank)
{
    return atoi(strchr(w->peers[rank].addr, ':') + 1);
}

/* The probe: while the ring trains, 150 silent connections (more than the listen backlog) and a
 * HELLO forged for the next epoch as rank 0's prev (from another address, never proving the token).
 * Then a worker "dies" and the group re-forms: the formation must not wait for any of them, the
 * strangers are dropped within the handshake bound, and the real peers still connect. */
static void test_strangers_during_training(void)
{
    enum { SILENT = 150 };
    world w;
    world_listen_persistent(&w, 2);
    w.timeout_s = 10;
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0);
    CU_ASSERT_EQUAL(check_allreduce(&w, 1000, RM_OP_SUM, 0), 0);
    int port0 = port_of(&w, 0);
    int silent[SILENT], nsilent = 0;
    for (int i = 0; i < SILENT; i++) {
        int fd = raw_connect("127.0.0.1", port0);
        if (fd >= 0)
            silent[nsilent++] = fd;
    }
    CU_ASSERT_EQUAL(nsilent, SILENT);
    int forged = raw_connect("127.0.0.2", port0);
    CU_ASSERT_FATAL(forged >= 0);
    struct pollfd pw = {.fd = forged, .events = POLLOUT};
    poll(&pw, 1, 2000);
    uint32_t hello[9] = {
        htonl(0x524d5247u), htonl(1), htonl((uint32_t)w.epoch + 1), htonl(1), htonl(2), 11, 22, 33, 44};
    CU_ASSERT_EQUAL(send(forged, hello, sizeof hello, MSG_NOSIGNAL), (ssize_t)sizeof hello);
    /* the listener answers the forged HELLO with a challenge even while nobody forms a ring */
    uint8_t ch[64];
    rm_err e = {0};
    CU_ASSERT_EQUAL(rm_net_recv_all(forged, ch, sizeof ch, rm_mono() + 3, &e), 0);

    /* a worker dies; the group re-forms at the next epoch right away */
    for (int i = 0; i < 2; i++) {
        ring()->destroy(w.r[i].comm);
        w.r[i].comm = NULL;
    }
    w.epoch++;
    double t0 = rm_mono();
    CU_ASSERT_EQUAL(world_init(&w), 0);
    double took = rm_mono() - t0;
    CU_ASSERT(took < 3.0);
    for (int i = 0; i < 2; i++)
        if (w.r[i].init_rc)
            fprintf(stderr, "re-form rank %d: %s\n", i, w.r[i].err.msg);
    if (w.r[0].init_rc == 0 && w.r[1].init_rc == 0)
        CU_ASSERT_EQUAL(check_allreduce(&w, 5000, RM_OP_SUM, 0), 0);

    /* every stranger was dropped within the handshake bound (2 s) plus slack */
    int open_left = 0;
    double dl = rm_mono() + 4.0;
    for (int i = 0; i < nsilent; i++) {
        open_left += !closed_by_peer(silent[i], dl);
        close(silent[i]);
    }
    CU_ASSERT_EQUAL(open_left, 0);
    CU_ASSERT(closed_by_peer(forged, dl));
    close(forged);
    CU_ASSERT(rm_ring_listener_dropped(w.lst[0]) >= (unsigned long)SILENT + 1);
    fprintf(stderr, "    re-formed in %.3f s with %d strangers on rank 0's port (%lu dropped)\n", took,
            nsilent + 1, rm_ring_listener_dropped(w.lst[0]));
    world_close(&w);
}

/* A forged HELLO followed by a made-up proof is refused explicitly (ACK status 1), and an old-epoch
 * peer is closed without that status, so only a real proof failure reads as "wrong token". */
static void test_forged_proof_refused(void)
{
    world w;
    world_listen_persistent(&w, 2);
    w.epoch = 9;
    w.timeout_s = 5;
    CU_ASSERT_EQUAL_FATAL(world_init(&w), 0); /* both listeners now at epoch 9 */
    int fd = raw_connect("127.0.0.1", port_of(&w, 0));
    CU_ASSERT_FATAL(fd >= 0);
    rm_err e = {0};
    uint32_t hello[9] = {htonl(0x524d5247u), htonl(1), htonl(10), htonl(1), htonl(2), 1, 2, 3, 4};
    CU_ASSERT_EQUAL(rm_net_send_all(fd, hello, sizeof hello, rm_mono() + 2, &e), 0);
    uint8_t ch[64], proof[36] = {0x52, 0x4d, 0x52, 0x47}, ack[8];
    CU_ASSERT_EQUAL(rm_net_recv_all(fd, ch, sizeof ch, rm_mono() + 2, &e), 0);
    CU_ASSERT_EQUAL(rm_net_send_all(fd, proof, sizeof proof, rm_mono() + 2, &e), 0);
    CU_ASSERT_EQUAL(rm_net_recv_all(fd, ack, sizeof ack, rm_mono() + 2, &e), 0);
    uint32_t st;
    memcpy(&st, ack + 4, 4);
    CU_ASSERT_EQUAL(ntohl(st), 1u);
    CU_ASSERT(closed_by_peer(fd, rm_mono() + 2));
    close(fd);
    for (int i = 0; i < 2; i++) {
        ring()->destroy(w.r[i].comm);
        w.r[i].comm = NULL;
    }
    /* rank 1 alone, at a stale epoch: rank 0's listener closes on it before any challenge */
    w.epoch_of[1] = 8;
    w.timeout_s = 1;
    init_thread(&w.r[1]);
    CU_ASSERT_EQUAL(w.r[1].init_rc, RM_ECLOSED);
    CU_ASSERT_PTR_NULL(strstr(w.r[1].err.msg, "token"));
    world_close(&w);
}

/* Sub-groups (rm_comm_cfg.group; pipeline stages): the world ring, two data-parallel
 * groups {0,2} and {1,3} and a link {0,1} form at once, in the same epoch, over the same long-lived
 * listeners; each group's connections are claimed by its own formation only, an allreduce in a
 * group sums only its members, and the link's sockets carry a frame from rank 0 to rank 1. */
typedef struct sub_ctx {
    world *w;
    int wrank;                /* world rank */
    int n, me, members[MAXW]; /* the group */
    uint32_t group;
    rm_comm *comm;
    int rc;
    rm_err err;
} sub_ctx;

static void *sub_init_thread(void *arg)
{
    sub_ctx *c = arg;
    rm_rdzv_peer peers[MAXW];
    for (int i = 0; i < c->n; i++)
        peers[i] = c->w->peers[c->members[i]];
    rm_comm_cfg cfg = {.rank = c->me,
                       .world_size = c->n,
                       .epoch = c->w->epoch,
                       .peers = peers,
                       .token = c->w->tokens[c->wrank],
                       .listener = c->w->lst[c->wrank],
                       .listen_fd = -1,
                       .timeout_s = c->w->timeout_s,
                       .group = c->group};
    c->rc = ring()->init(&cfg, &c->comm, &c->err);
    return NULL;
}

typedef struct sub_ar {
    sub_ctx *c;
    float buf[3];
    int rc;
    rm_err err;
} sub_ar;

static void *sub_ar_thread(void *arg)
{
    sub_ar *j = arg;
    j->rc = ring()->allreduce(j->c->comm, j->buf, 3, RM_DT_F32, RM_OP_SUM, &j->err);
    return NULL;
}

static void test_subgroups(void)
{
    world w;
    world_listen_persistent(&w, 4);
    enum { NS = 4 + 4 + 2 };
    sub_ctx sc[NS];
    memset(sc, 0, sizeof sc);
    int k = 0;
    for (int r = 0; r < 4; r++) /* the world */
        sc[k++] = (sub_ctx){.w = &w, .wrank = r, .n = 4, .me = r, .members = {0, 1, 2, 3}, .group = 0};
    for (int r = 0; r < 4; r++) /* stage groups {0,2} and {1,3} */
        sc[k++] = (sub_ctx){.w = &w,
                            .wrank = r,
                            .n = 2,
                            .me = r / 2,
                            .members = {r % 2, r % 2 + 2},
                            .group = 0x2000u + (uint32_t)(r % 2)};
    for (int r = 0; r < 2; r++) /* the link between ranks 0 and 1 */
        sc[k++] = (sub_ctx){.w = &w, .wrank = r, .n = 2, .me = r, .members = {0, 1}, .group = 0x4000u};
    pthread_t th[NS];
    for (int i = 0; i < NS; i++)
        pthread_create(&th[i], NULL, sub_init_thread, &sc[i]);
    for (int i = 0; i < NS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NS; i++) {
        CU_ASSERT_EQUAL(sc[i].rc, 0);
        if (sc[i].rc)
            fprintf(stderr, "\n  formation %d (group %#x): %s", i, sc[i].group, sc[i].err.msg);
    }
    if (sc[4].rc == 0 && sc[6].rc == 0) {
        /* group {0,2}: world ranks 0 and 2 contribute 1 and 10; the ring blocks until both take
         * part, so one runs on a thread */
        sub_ar job = {.c = &sc[6], .buf = {10, 10, 10}};
        pthread_t t;
        pthread_create(&t, NULL, sub_ar_thread, &job);
        float a[3] = {1, 1, 1};
        rm_err e = {0};
        CU_ASSERT_EQUAL(ring()->allreduce(sc[4].comm, a, 3, RM_DT_F32, RM_OP_SUM, &e), 0);
        pthread_join(t, NULL);
        CU_ASSERT_EQUAL(job.rc, 0);
        for (int i = 0; i < 3; i++) {
            CU_ASSERT_DOUBLE_EQUAL(a[i], 11.0, 0);
            CU_ASSERT_DOUBLE_EQUAL(job.buf[i], 11.0, 0);
        }
    }
    if (sc[8].rc == 0 && sc[9].rc == 0) {
        int to0 = -1, from0 = -1, to1 = -1, from1 = -1;
        CU_ASSERT_EQUAL(rm_comm_ring_link_fds(sc[8].comm, &to0, &from0), 0);
        CU_ASSERT_EQUAL(rm_comm_ring_link_fds(sc[9].comm, &to1, &from1), 0);
        rm_net_frame h, g;
        float payload[4] = {1, 2, 3, 4}, got[4] = {0};
        rm_net_frame_make(&h, 0, sizeof payload);
        rm_err e = {0};
        double dl = rm_mono() + 5;
        CU_ASSERT_EQUAL(rm_net_send_all(to0, &h, sizeof h, dl, &e), 0);
        CU_ASSERT_EQUAL(rm_net_send_all(to0, payload, sizeof payload, dl, &e), 0);
        CU_ASSERT_EQUAL(rm_net_recv_all(from1, &g, sizeof g, dl, &e), 0);
        CU_ASSERT(rm_net_frame_ok(&g, 0, sizeof payload));
        CU_ASSERT_FALSE(rm_net_frame_ok(&g, 1, sizeof payload)); /* wrong sequence */
        CU_ASSERT_EQUAL(rm_net_recv_all(from1, got, sizeof got, dl, &e), 0);
        CU_ASSERT_EQUAL(memcmp(got, payload, sizeof got), 0);
        CU_ASSERT_EQUAL(rm_comm_ring_link_fds(sc[0].comm, &to0, &from0), 0);
    }
    for (int i = 0; i < NS; i++)
        ring()->destroy(sc[i].comm);
    world_close(&w);
}

void rm_suite_ring(void);
void rm_suite_ring(void)
{
    static const rm_test_case cases[] = {
        {"sizes_1_to_8_awkward_counts", test_sizes},
        {"spin_same_results_same_failures", test_spin},
        {"large_default_pieces", test_large_default_pieces},
        {"large_single_thread", test_large_single_thread},
        {"bf16_unsupported", test_bad_dtype},
        {"bad_config", test_bad_config},
        {"stranger_and_garbage_refused", test_stranger_refused},
        {"wrong_token", test_wrong_token},
        {"wrong_epoch_refused", test_wrong_epoch_peer},
        {"connect_timeout", test_connect_timeout},
        {"peer_dies_noticed_fast", test_peer_dies},
        {"peer_hangs_times_out", test_peer_hangs},
        {"abort_from_other_thread", test_abort},
        {"desync_is_eproto", test_desync_is_eproto},
        {"barrier_synchronises_world_2_to_4", test_barrier_synchronises},
        {"strangers_during_training_cost_no_restart", test_strangers_during_training},
        {"forged_proof_refused_stale_epoch_closed", test_forged_proof_refused},
        {"subgroups_form_apart_in_one_epoch", test_subgroups},
    };
    RM_ADD_SUITE("ring", NULL, NULL, cases);
}
