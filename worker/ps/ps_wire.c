/* ps_wire.c — the parameter-server protocol: handshake and framing (see ps_wire.h). */
#include "worker/ps/ps_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "worker/comm/comm.h"
#include "worker/comm/net.h"

enum { HELLO_LEN = 16 + 16, CHAL_LEN = 16 + 16 + 32, PROOF_LEN = 4 + 32, ACK_LEN = 8 };

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

static void ps_mac(const char *token, const char *role, uint32_t index, uint32_t worker, uint32_t nservers,
                   const uint8_t nc[16], const uint8_t ns[16], uint8_t out[32])
{
    char label[32];
    snprintf(label, sizeof label, "ringmaster-ps-v1 %s", role);
    rm_net_hs_mac(token, label, index, worker, nservers, nc, ns, out);
}

int rm_ps_hs_accept(int fd, const char *token, int index, int nservers, double deadline,
                    bool (*claim)(void *ctx), void *ctx, int *worker, rm_err *err)
{
    uint8_t hello[HELLO_LEN], ch[CHAL_LEN], proof[PROOF_LEN], ack[ACK_LEN], mac[32];
    int rc;
    /* no RM_CHECK trail here: a stranger triggers these at will, and the caller logs one
     * rate-limited line per refusal (ps_server.c) */
    if ((rc = rm_net_recv_all(fd, hello, sizeof hello, deadline, err)))
        return rc;
    if (get32(hello) != RM_PS_MAGIC)
        return rm_errf(err, RM_EPROTO, "bad magic (not a ringmaster worker)");
    if (get32(hello + 4) != RM_PS_VERSION)
        return rm_errf(err, RM_EPROTO, "protocol version mismatch");
    uint32_t w = get32(hello + 8), idx = get32(hello + 12);
    if (w >= 1024)
        return rm_errf(err, RM_EPROTO, "bad worker id %u", w);
    if (idx != (uint32_t)index)
        return rm_errf(err, RM_EPROTO, "hello for server %u, this is server %d", idx, index);
    uint8_t ns[16];
    rm_net_random(ns, sizeof ns);
    put32(ch, RM_PS_MAGIC);
    put32(ch + 4, RM_PS_VERSION);
    put32(ch + 8, (uint32_t)index);
    put32(ch + 12, 0);
    memcpy(ch + 16, ns, 16);
    ps_mac(token, "acc", (uint32_t)index, w, (uint32_t)nservers, hello + 16, ns, ch + 32);
    if ((rc = rm_net_send_all(fd, ch, sizeof ch, deadline, err)) ||
        (rc = rm_net_recv_all(fd, proof, sizeof proof, deadline, err)))
        return rc;
    ps_mac(token, "con", (uint32_t)index, w, (uint32_t)nservers, hello + 16, ns, mac);
    put32(ack, RM_PS_MAGIC);
    if (get32(proof) != RM_PS_MAGIC || !rm_net_ct_equal(mac, proof + 4, 32)) {
        put32(ack + 4, RM_PS_REFUSED);
        rm_err e2 = {0};
        (void)rm_net_send_all(fd, ack, sizeof ack, deadline, &e2);
        return rm_errf(err, RM_EAUTH, "authentication failed (wrong job token)");
    }
    if (claim && !claim(ctx)) {
        put32(ack + 4, RM_PS_FULL); /* say so: the worker's log names the cause, not "peer closed" */
        rm_err e2 = {0};
        (void)rm_net_send_all(fd, ack, sizeof ack, deadline, &e2);
        return rm_errf(err, RM_EAGAIN, "server full (worker %u proved the token)", w);
    }
    put32(ack + 4, 0);
    if ((rc = rm_net_send_all(fd, ack, sizeof ack, deadline, err)))
        return rc;
    *worker = (int)w;
    return RM_OK;
}

void rm_ps_conn_close(rm_ps_conn *c)
{
    if (c && c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

int rm_ps_conn_open(rm_ps_conn *c, const char *addr, int index, int nservers, int worker, const char *token,
                    double deadline, rm_err *err)
{
    c->fd = -1;
    c->index = index;
    RM_CHECK(rm_comm_split_addr(addr, c->host, sizeof c->host, &c->port, err));
    rm_err e2 = {0};
    int rc = rm_net_connect(c->host, c->port, deadline, &c->fd, &e2);
    if (rc)
        return rm_errf(err, rc, "parameter server %d at %s: %s", index, addr, e2.msg);
    rm_net_tune(c->fd, 4 << 20);
    uint8_t hello[HELLO_LEN], ch[CHAL_LEN], proof[PROOF_LEN], ack[ACK_LEN], mac[32], nc[16];
    put32(hello, RM_PS_MAGIC);
    put32(hello + 4, RM_PS_VERSION);
    put32(hello + 8, (uint32_t)worker);
    put32(hello + 12, (uint32_t)index);
    rm_net_random(nc, sizeof nc);
    memcpy(hello + 16, nc, 16);
    if ((rc = rm_net_send_all(c->fd, hello, sizeof hello, deadline, &e2)) ||
        (rc = rm_net_recv_all(c->fd, ch, sizeof ch, deadline, &e2))) {
        rm_ps_conn_close(c);
        return rm_errf(err, rc, "parameter server %d at %s: handshake: %s", index, addr, e2.msg);
    }
    if (get32(ch) != RM_PS_MAGIC || get32(ch + 4) != RM_PS_VERSION || get32(ch + 8) != (uint32_t)index) {
        rm_ps_conn_close(c);
        return rm_errf(err, RM_EPROTO, "parameter server %d at %s: bad challenge", index, addr);
    }
    ps_mac(token, "acc", (uint32_t)index, (uint32_t)worker, (uint32_t)nservers, nc, ch + 16, mac);
    if (!rm_net_ct_equal(mac, ch + 32, 32)) {
        rm_ps_conn_close(c);
        return rm_errf(err, RM_EAUTH,
                       "parameter server %d at %s failed authentication (wrong job "
                       "token?)",
                       index, addr);
    }
    put32(proof, RM_PS_MAGIC);
    ps_mac(token, "con", (uint32_t)index, (uint32_t)worker, (uint32_t)nservers, nc, ch + 16, proof + 4);
    if ((rc = rm_net_send_all(c->fd, proof, sizeof proof, deadline, &e2)) ||
        (rc = rm_net_recv_all(c->fd, ack, sizeof ack, deadline, &e2))) {
        rm_ps_conn_close(c);
        return rm_errf(err, rc, "parameter server %d at %s: handshake: %s", index, addr, e2.msg);
    }
    if (get32(ack) == RM_PS_MAGIC && get32(ack + 4) == RM_PS_FULL) {
        rm_ps_conn_close(c);
        return rm_errf(err, RM_EAGAIN, "parameter server %d at %s is full (no room for another connection)",
                       index, addr);
    }
    if (get32(ack) != RM_PS_MAGIC || get32(ack + 4) != 0) {
        rm_ps_conn_close(c);
        return rm_errf(err, get32(ack + 4) == RM_PS_REFUSED ? RM_EAUTH : RM_EPROTO,
                       "parameter server %d at %s refused our proof (wrong job token?)", index, addr);
    }
    return RM_OK;
}

/* Write iov[0..n) whole: one gather write (one syscall, no small header segment of its own) when
 * the socket buffer has room; partial writes resume where they stopped. iov is consumed. */
static int sendv_all(int fd, struct iovec *iov, int n, double deadline, rm_err *err)
{
    while (n > 0) {
        if (iov[0].iov_len == 0) {
            iov++;
            n--;
            continue;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = rm_net_wait(fd, POLLOUT, deadline);
            if (rc == RM_ETIMEDOUT)
                return rm_errf(err, rc, "send: peer did not read in time");
            if (rc)
                return rm_errf(err, rc, "send: poll: %s", strerror(errno));
            continue;
        }
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN))
            return rm_errf(err, RM_ECLOSED, "send: peer closed (%s)", strerror(errno));
        if (w < 0)
            return rm_errf(err, RM_EIO, "send: %s", strerror(errno));
        size_t left = (size_t)w;
        while (n > 0 && left >= iov[0].iov_len) {
            left -= iov[0].iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov[0].iov_base = (char *)iov[0].iov_base + left;
            iov[0].iov_len -= left;
        }
    }
    return RM_OK;
}

int rm_ps_send(rm_ps_conn *c, rm_ps_req *q, const float *payload, double deadline, rm_err *err)
{
    return rm_ps_send2(c, q, payload, NULL, deadline, err);
}

int rm_ps_send2(rm_ps_conn *c, rm_ps_req *q, const float *payload, rm_ps_req *q2, double deadline,
                rm_err *err)
{
    if (c->fd < 0)
        return rm_errf(err, RM_ECLOSED, "parameter server %d: not connected", c->index);
    q->magic = RM_PS_MAGIC;
    q->check = rm_ps_req_check(q);
    struct iovec iov[3] = {{q, sizeof *q},
                           {(void *)(uintptr_t)payload, q->nfloats ? (size_t)q->nfloats * sizeof(float) : 0},
                           {q2, q2 ? sizeof *q2 : 0}};
    if (q2) {
        q2->magic = RM_PS_MAGIC;
        q2->check = rm_ps_req_check(q2);
    }
    return sendv_all(c->fd, iov, 3, deadline, err);
}

int rm_ps_reply(int fd, rm_ps_rep *r, const float *payload, double deadline, rm_err *err)
{
    r->magic = RM_PS_MAGIC;
    r->check = rm_ps_rep_check(r);
    struct iovec iov[2] = {{r, sizeof *r},
                           {(void *)(uintptr_t)payload, r->nfloats ? (size_t)r->nfloats * sizeof(float) : 0}};
    return sendv_all(fd, iov, 2, deadline, err);
}

int rm_ps_recv(rm_ps_conn *c, rm_ps_rep *r, float *buf, size_t cap, double deadline, rm_err *err)
{
    if (c->fd < 0)
        return rm_errf(err, RM_ECLOSED, "parameter server %d: not connected", c->index);
    RM_CHECK(rm_net_recv_all(c->fd, r, sizeof *r, deadline, err));
    if (r->magic != RM_PS_MAGIC || r->check != rm_ps_rep_check(r) || r->nfloats > cap)
        return rm_errf(err, RM_EPROTO,
                       "parameter server %d: bad reply (magic %08x, %u floats, "
                       "cap %zu)",
                       c->index, r->magic, r->nfloats, cap);
    if (r->nfloats)
        RM_CHECK(rm_net_recv_all(c->fd, buf, (size_t)r->nfloats * sizeof(float), deadline, err));
    return RM_OK;
}

int rm_ps_parse_addrs(const char *list, char addrs[][128], int max, int *n, rm_err *err)
{
    *n = 0;
    if (!list || !*list)
        return rm_errf(err, RM_EINVAL, "no parameter server addresses");
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || len >= 128)
            return rm_errf(err, RM_EINVAL, "bad parameter server address list \"%s\"", list);
        if (*n == max)
            return rm_errf(err, RM_EINVAL, "more than %d parameter servers in \"%s\"", max, list);
        memcpy(addrs[*n], p, len);
        addrs[*n][len] = 0;
        (*n)++;
        p = e ? e + 1 : p + len;
    }
    return RM_OK;
}
