/* net.c — bounded TCP helpers and handshake MACs for the comm backends (see net.h; SHA-256 and
 * HMAC are common/sha256.c).
 * Every wait is poll() on a non-blocking socket with the time left to an absolute deadline. */
#include "worker/comm/net.h"
#include "common/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int ms_left(double deadline)
{
    double left = deadline - rm_mono();
    if (left <= 0)
        return 0;
    if (left > 1e6)
        return 1000000000;
    return (int)(left * 1000.0) + 1;
}

int rm_net_resolve(const char *host, int port, void *out, rm_err *err)
{
    struct sockaddr_in *a = out;
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    if (port < 0 || port > 65535)
        return rm_errf(err, RM_EINVAL, "bad port %d", port);
    a->sin_port = htons((uint16_t)port);
    if (!host || !*host || strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &a->sin_addr) == 1)
        return RM_OK;
    /* a name (e.g. a headless-service DNS name on Kubernetes): IPv4 only */
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0 || !res)
        return rm_errf(err, RM_EINVAL, "cannot resolve \"%.64s\" to an IPv4 address: %s", host,
                       gai ? gai_strerror(gai) : "no address");
    a->sin_addr = ((struct sockaddr_in *)(void *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return RM_OK;
}

int rm_net_tune(int fd, int bufsize)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (bufsize > 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return RM_EIO;
    return RM_OK;
}

int rm_net_listen(const char *host, int port, int backlog, int *fd, int *bound_port, rm_err *err)
{
    struct sockaddr_in a;
    int rc = rm_net_resolve(host, port, &a, err);
    if (rc)
        return rc;
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return rm_errf(err, RM_EIO, "socket: %s", strerror(errno));
    int one = 1;
    (void)setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t al = sizeof a;
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0) {
        rc = rm_errf(err, RM_EIO, "bind %s:%d: %s", host ? host : "", port, strerror(errno));
        goto fail;
    }
    if (listen(s, backlog) < 0) {
        rc = rm_errf(err, RM_EIO, "listen: %s", strerror(errno));
        goto fail;
    }
    if (getsockname(s, (struct sockaddr *)&a, &al) < 0) {
        rc = rm_errf(err, RM_EIO, "getsockname: %s", strerror(errno));
        goto fail;
    }
    *fd = s;
    if (bound_port)
        *bound_port = ntohs(a.sin_port);
    return RM_OK;
fail:
    close(s);
    return rc;
}

int rm_net_connect(const char *host, int port, double deadline, int *fd, rm_err *err)
{
    struct sockaddr_in a;
    int rc = rm_net_resolve(host, port, &a, err);
    if (rc)
        return rc;
    int last_errno = 0;
    for (;;) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0)
            return rm_errf(err, RM_EIO, "socket: %s", strerror(errno));
        int r = connect(s, (struct sockaddr *)&a, sizeof a);
        if (r < 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = s, .events = POLLOUT};
            int pr = poll(&p, 1, ms_left(deadline));
            if (pr > 0) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                (void)getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                r = soerr ? -1 : 0;
                errno = soerr;
            } else {
                r = -1;
                errno = ETIMEDOUT;
            }
        }
        if (r == 0) {
            *fd = s;
            return RM_OK;
        }
        last_errno = errno;
        close(s);
        if (rm_mono() >= deadline)
            return rm_errf(err, RM_ETIMEDOUT, "connect %s:%d: timed out (last error: %s)", host, port,
                           strerror(last_errno));
        if (last_errno != ECONNREFUSED && last_errno != ETIMEDOUT && last_errno != ECONNRESET &&
            last_errno != EAGAIN && last_errno != EINTR)
            return rm_errf(err, RM_EIO, "connect %s:%d: %s", host, port, strerror(last_errno));
        struct timespec ts = {0, 20 * 1000 * 1000}; /* peer not listening yet: retry */
        nanosleep(&ts, NULL);
    }
}

int rm_net_wait(int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int pr = poll(&p, 1, ms_left(deadline));
        if (pr > 0)
            return RM_OK;
        if (pr == 0)
            return RM_ETIMEDOUT;
        if (errno != EINTR)
            return RM_EIO;
    }
}

int rm_net_accept(int lfd, double deadline, int *fd, char *peer, size_t peercap, rm_err *err)
{
    for (;;) {
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        int s = accept4(lfd, (struct sockaddr *)&a, &al, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s >= 0) {
            if (peer && peercap) {
                char ip[INET_ADDRSTRLEN] = "?";
                inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
                snprintf(peer, peercap, "%s:%d", ip, ntohs(a.sin_port));
            }
            *fd = s;
            return RM_OK;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return rm_errf(err, RM_EIO, "accept: %s", strerror(errno));
        int rc = rm_net_wait(lfd, POLLIN, deadline);
        if (rc == RM_ETIMEDOUT)
            return rm_errf(err, rc, "accept: timed out");
        if (rc)
            return rm_errf(err, rc, "accept: poll: %s", strerror(errno));
    }
}

int rm_net_send_all(int fd, const void *buf, size_t len, double deadline, rm_err *err)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = rm_net_wait(fd, POLLOUT, deadline);
            if (rc == RM_ETIMEDOUT)
                return rm_errf(err, rc, "send: peer did not read in time");
            if (rc)
                return rm_errf(err, rc, "send: poll: %s", strerror(errno));
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN))
            return rm_errf(err, RM_ECLOSED, "send: peer closed (%s)", strerror(errno));
        return rm_errf(err, RM_EIO, "send: %s", strerror(errno));
    }
    return RM_OK;
}

int rm_net_recv_all(int fd, void *buf, size_t len, double deadline, rm_err *err)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return rm_errf(err, RM_ECLOSED, "recv: peer closed the connection");
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = rm_net_wait(fd, POLLIN, deadline);
            if (rc == RM_ETIMEDOUT)
                return rm_errf(err, rc, "recv: peer sent nothing in time");
            if (rc)
                return rm_errf(err, rc, "recv: poll: %s", strerror(errno));
            continue;
        }
        if (errno == ECONNRESET || errno == ENOTCONN)
            return rm_errf(err, RM_ECLOSED, "recv: peer closed (%s)", strerror(errno));
        return rm_errf(err, RM_EIO, "recv: %s", strerror(errno));
    }
    return RM_OK;
}

int rm_net_ct_equal(const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (uint8_t)(x[i] ^ y[i]);
    return d == 0;
}

void rm_net_random(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, GRND_NONBLOCK);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        /* no entropy source: clock noise is enough for a replay-protection nonce */
        for (size_t i = 0; i < len; i++)
            p[i] = (uint8_t)((uint64_t)(rm_mono() * 1e9) >> (i % 8));
        return;
    }
}

void rm_net_hs_mac(const char *token, const char *label, uint32_t epoch, uint32_t a, uint32_t b,
                   const uint8_t nc[16], const uint8_t na[16], uint8_t out[32])
{
    uint8_t msg[32 + 12 + 32];
    size_t m = strlen(label);
    if (m > 31)
        m = 31;
    memcpy(msg, label, m);
    uint32_t v[3] = {htonl(epoch), htonl(a), htonl(b)};
    memcpy(msg + m, v, 12);
    m += 12;
    memcpy(msg + m, nc, 16);
    m += 16;
    memcpy(msg + m, na, 16);
    m += 16;
    rm_hmac_sha256(token, strlen(token), msg, m, out);
}

#define RM_NET_FRAME_CHECK 0x5a17c3e1u

void rm_net_frame_make(rm_net_frame *h, uint32_t seq, uint32_t len)
{
    h->magic = RM_NET_FRAME_MAGIC;
    h->seq = seq;
    h->len = len;
    h->check = RM_NET_FRAME_MAGIC ^ seq ^ len ^ RM_NET_FRAME_CHECK;
}

int rm_net_frame_ok(const rm_net_frame *h, uint32_t seq, uint32_t len)
{
    return h->magic == RM_NET_FRAME_MAGIC && h->seq == seq && h->len == len &&
           h->check == (RM_NET_FRAME_MAGIC ^ h->seq ^ h->len ^ RM_NET_FRAME_CHECK);
}
