/* pipe_link_tcp.c — the "tcp" entry of the pipeline link table (worker/pipeline/pipe_link.h): host buffers
 * over the authenticated 2-rank ring links (the ring's handshake and framing). Moved here from
 * worker/pipeline/step_pipeline.c unchanged in behaviour: one socket per direction per link, rm_net_frame
 * headers with sequence numbers, a receiver thread per inbound socket draining frames into the
 * preallocated receive buffer at the micro-batch's rows (frame k is micro-batch k % M), waits
 * bounded by the round's timeout, synchronous sends with a deadline. Groups and recv() move
 * nothing (the receiver threads always drain, so neighbours never block each other), but the entry
 * holds its caller to the NCCL entry's contract — transfers only inside begin()/end(), a wait only
 * for frames whose recv() was posted, no wait or flush inside a group (RM_EINVAL / RM_EPROTO
 * otherwise) — so the CPU runs prove the driver would post what a GPU's links need.
 * Ownership: the links own the receiver threads; fds are borrowed from the ring comms. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/clock.h"
#include "worker/comm/net.h"
#include "worker/pipeline/pipe_link.h"

#define PIPE_RX_SLICE_MS 200

typedef struct pipe_rx {
    int fd;     /* borrowed from the link comm */
    float *buf; /* [B x width], micro-batch m at its rows */
    int width, B, M;
    float *extra; /* [M] trailing float per frame (the loss), or NULL */
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    uint64_t got;      /* frames received (under mu) */
    int rc;            /* first failure (under mu) */
    char msg[200];
    atomic_int stop;
    atomic_ullong bytes;
} pipe_rx;

struct rm_pipe_links {
    int to[2];       /* send sockets per side (borrowed), -1: none */
    uint32_t seq[2]; /* frames sent per side */
    bool tx_extra[2];
    pipe_rx rx[2];
    double timeout_s;
    bool in_group;      /* between begin() and end() */
    uint64_t posted[2]; /* recv() calls per side this round (the NCCL contract) */
};

static int rx_read(pipe_rx *x, void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        if (atomic_load(&x->stop))
            return RM_ECANCELED;
        struct pollfd p = {.fd = x->fd, .events = POLLIN};
        int pr = poll(&p, 1, PIPE_RX_SLICE_MS);
        if (pr < 0 && errno != EINTR)
            return RM_EIO;
        if (pr <= 0)
            continue;
        ssize_t n = recv(x->fd, (char *)buf + done, len - done, MSG_DONTWAIT);
        if (n == 0)
            return RM_ECLOSED;
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                continue;
            return errno == ECONNRESET ? RM_ECLOSED : RM_EIO;
        }
        done += (size_t)n;
    }
    atomic_fetch_add(&x->bytes, (unsigned long long)len);
    return RM_OK;
}

static void rx_fail(pipe_rx *x, int rc, const char *msg)
{
    pthread_mutex_lock(&x->mu);
    if (!x->rc) {
        x->rc = rc;
        snprintf(x->msg, sizeof x->msg, "%s", msg);
    }
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

static void *rx_main(void *arg)
{
    pipe_rx *x = arg;
    uint32_t seq = 0;
    for (uint64_t k = 0;; k++, seq++) {
        rm_net_frame h;
        int rc = rx_read(x, &h, sizeof h);
        int mb = (int)(k % (uint64_t)x->M), off, n;
        rm_pipe_micro_rows(x->B, x->M, mb, &off, &n);
        uint32_t len = (uint32_t)(((size_t)n * (size_t)x->width + (x->extra ? 1 : 0)) * sizeof(float));
        if (rc == RM_OK && !rm_net_frame_ok(&h, seq, len)) {
            char m[200];
            snprintf(m, sizeof m, "garbage or desync (frame magic %08x seq %u len %u, want seq %u len %u)",
                     h.magic, h.seq, h.len, seq, len);
            rx_fail(x, RM_EPROTO, m);
            return NULL;
        }
        if (rc == RM_OK)
            rc = rx_read(x, x->buf + (size_t)off * (size_t)x->width,
                         (size_t)n * (size_t)x->width * sizeof(float));
        if (rc == RM_OK && x->extra)
            rc = rx_read(x, &x->extra[mb], sizeof(float));
        if (rc) {
            rx_fail(x, rc,
                    rc == RM_ECLOSED     ? "the neighbour closed the connection"
                    : rc == RM_ECANCELED ? "stopped"
                                         : "read failed");
            return NULL;
        }
        pthread_mutex_lock(&x->mu);
        x->got = k + 1;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
    }
}

static int rx_start(pipe_rx *x, int fd, float *buf, int width, int B, int M, float *extra, rm_err *err)
{
    memset(x, 0, sizeof *x);
    x->fd = fd;
    x->buf = buf;
    x->width = width;
    x->B = B;
    x->M = M;
    x->extra = extra;
    atomic_init(&x->stop, 0);
    atomic_init(&x->bytes, 0);
    int ok = pthread_mutex_init(&x->mu, NULL) == 0;
    ok = ok && rm_mono_cond_init(&x->cv) == 0;
    if (!ok || pthread_create(&x->th, NULL, rx_main, x) != 0)
        return rm_errf(err, RM_ENOMEM, "pipeline: cannot start a receiver thread");
    x->started = true;
    return RM_OK;
}

static void rx_stop(pipe_rx *x)
{
    if (!x->started)
        return;
    atomic_store(&x->stop, 1);
    pthread_join(x->th, NULL);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    x->started = false;
}

/* Wait until `want` frames arrived; *waited += seconds spent. */
static int rx_wait(pipe_rx *x, uint64_t want, double timeout_s, double *waited, const char *who, rm_err *err)
{
    double t0 = rm_mono(), deadline = t0 + timeout_s;
    int rc = RM_OK;
    pthread_mutex_lock(&x->mu);
    while (x->got < want && !x->rc) {
        double now = rm_mono();
        if (now >= deadline) {
            rc = RM_ETIMEDOUT;
            break;
        }
        struct timespec ts = rm_mono_ts(deadline);
        pthread_cond_timedwait(&x->cv, &x->mu, &ts);
    }
    if (x->got < want && x->rc)
        rc = rm_errf(err, x->rc, "pipeline: %s: %s", who, x->msg);
    pthread_mutex_unlock(&x->mu);
    *waited += rm_mono() - t0;
    if (rc == RM_ETIMEDOUT)
        return rm_errf(err, rc, "pipeline: %s sent nothing for %.1f s (dead or hung)", who, timeout_s);
    return rc;
}

static const char *side_who(int side)
{
    return side == RM_PIPE_SIDE_PREV ? "the previous stage" : "the next stage";
}

static void tcp_close(rm_pipe_links *l)
{
    if (!l)
        return;
    /* wake the receivers: a blocked poll ends within its slice either way */
    rx_stop(&l->rx[RM_PIPE_SIDE_PREV]);
    rx_stop(&l->rx[RM_PIPE_SIDE_NEXT]);
    free(l);
}

static int tcp_open(const rm_pipe_links_cfg *cfg, rm_pipe_links **out, rm_err *err)
{
    *out = NULL;
    if (!cfg->k || !cfg->k->host_memory)
        return rm_errf(err, RM_EINVAL, "pipeline link tcp: needs host buffers (the CPU kernels)");
    rm_pipe_links *l = calloc(1, sizeof *l);
    if (!l)
        return rm_errf(err, RM_ENOMEM, "pipeline link tcp: out of memory");
    l->timeout_s = cfg->timeout_s;
    /* the next stage's receiver first (the order the links formed in before this table) */
    static const int order[2] = {RM_PIPE_SIDE_NEXT, RM_PIPE_SIDE_PREV};
    l->to[0] = l->to[1] = -1;
    for (int i = 0; i < 2; i++) {
        int sd = order[i];
        const rm_pipe_link_cfg *c = &cfg->side[sd];
        if (!c->tcp)
            continue;
        int from = -1;
        int rc = rm_comm_ring_link_fds(c->tcp, &l->to[sd], &from);
        if (!rc)
            rc = rx_start(&l->rx[sd], from, c->rx, c->width, cfg->B, cfg->M, c->rx_extra, err);
        if (rc) {
            tcp_close(l);
            return rc;
        }
        l->tx_extra[sd] = c->tx_extra;
    }
    *out = l;
    return RM_OK;
}

static int tcp_begin(rm_pipe_links *l, rm_err *err)
{
    if (l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link: a group is already open");
    l->in_group = true;
    return RM_OK;
}

static int tcp_end(rm_pipe_links *l, rm_err *err)
{
    if (!l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link: no group is open");
    l->in_group = false;
    return RM_OK;
}

static int tcp_send(rm_pipe_links *l, int side, const float *rows, size_t nfloats, const float *extra,
                    rm_err *err)
{
    if (side < 0 || side > 1 || l->to[side] < 0)
        return rm_errf(err, RM_EINVAL, "pipeline: no link to %s",
                       side >= 0 && side <= 1 ? side_who(side) : "?");
    if (!l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link: a send outside a group");
    int fd = l->to[side];
    if (!l->tx_extra[side])
        extra = NULL;
    rm_net_frame h;
    rm_net_frame_make(&h, l->seq[side]++, (uint32_t)((nfloats + (extra ? 1 : 0)) * sizeof(float)));
    double deadline = rm_mono() + l->timeout_s;
    rm_err e = {0};
    int rc = rm_net_send_all(fd, &h, sizeof h, deadline, &e);
    if (!rc)
        rc = rm_net_send_all(fd, rows, nfloats * sizeof(float), deadline, &e);
    if (!rc && extra)
        rc = rm_net_send_all(fd, extra, sizeof(float), deadline, &e);
    if (rc)
        return rm_errf(err, rc, "pipeline: sending to %s: %s", side_who(side), e.msg);
    return RM_OK;
}

static int tcp_recv(rm_pipe_links *l, int side, int mb, rm_err *err)
{
    if (side < 0 || side > 1 || !l->rx[side].started)
        return rm_errf(err, RM_EINVAL, "pipeline: no link to %s",
                       side >= 0 && side <= 1 ? side_who(side) : "?");
    if (!l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link: a receive outside a group");
    /* the receiver thread drains every frame as it comes; frame k is micro-batch k % M */
    if ((uint64_t)mb != l->posted[side] % (uint64_t)l->rx[side].M)
        return rm_errf(err, RM_EPROTO,
                       "pipeline link: receive %llu from %s posted for micro-batch %d, "
                       "the link carries micro-batch %llu next",
                       (unsigned long long)l->posted[side], side_who(side), mb,
                       (unsigned long long)(l->posted[side] % (uint64_t)l->rx[side].M));
    l->posted[side]++;
    return RM_OK;
}

static int tcp_wait(rm_pipe_links *l, int side, uint64_t frames, double *waited, rm_err *err)
{
    if (side < 0 || side > 1 || !l->rx[side].started)
        return rm_errf(err, RM_EINVAL, "pipeline: no link to %s",
                       side >= 0 && side <= 1 ? side_who(side) : "?");
    if (l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link: a wait inside an open group");
    if (frames > l->posted[side])
        return rm_errf(err, RM_EPROTO,
                       "pipeline link: waiting for frame %llu from %s, only %llu "
                       "receives were posted",
                       (unsigned long long)frames, side_who(side), (unsigned long long)l->posted[side]);
    return rx_wait(&l->rx[side], frames, l->timeout_s, waited, side_who(side), err);
}

static int tcp_flush(rm_pipe_links *l, double *waited, rm_err *err)
{
    (void)waited;
    if (l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link: a flush inside an open group");
    return RM_OK; /* sends are synchronous */
}

static uint64_t tcp_bytes_in(rm_pipe_links *l)
{
    uint64_t n = 0;
    for (int sd = 0; sd < 2; sd++)
        if (l->rx[sd].started)
            n += atomic_load(&l->rx[sd].bytes);
    return n;
}

static const rm_pipe_link_ops tcp_ops = {
    .name = "tcp",
    .open = tcp_open,
    .begin = tcp_begin,
    .send = tcp_send,
    .recv = tcp_recv,
    .end = tcp_end,
    .wait = tcp_wait,
    .flush = tcp_flush,
    .bytes_in = tcp_bytes_in,
    .close = tcp_close,
};

const rm_pipe_link_ops *rm_pipe_link_tcp_ops(void)
{
    return &tcp_ops;
}

const rm_pipe_link_ops *rm_pipe_link_ops_of(rm_pipe_link_kind kind)
{
    return kind == RM_PIPE_LINK_NCCL ? rm_pipe_link_nccl_ops() : rm_pipe_link_tcp_ops();
}
