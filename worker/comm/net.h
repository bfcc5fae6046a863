/* net.h — small TCP helpers for the comm backends: listen/connect/accept and exact reads/writes,
 * every one bounded by an absolute deadline (CLOCK_MONOTONIC seconds), plus HMAC-SHA256 for the
 * ring handshake (so the job token never crosses the wire).
 *
 * Design: sockets stay in O_NONBLOCK mode and every wait is a poll() with the time left until the
 * deadline, so nothing here can block forever and a shutdown() from another thread wakes it.
 * IPv4 only: dotted quads, "localhost", or a name resolved with getaddrinfo (pod IPs and
 * headless-service names on Kubernetes). File descriptors returned are owned by the caller. */
#ifndef RM_WORKER_NET_H
#define RM_WORKER_NET_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "common/clock.h"
#include "common/sha256.h" /* rm_sha256, rm_hmac_sha256: the handshake MACs are built on them */

/* host (dotted quad, "localhost" or a DNS name, IPv4) + port into a sockaddr_in stored in out
 * (>= 16 bytes). RM_EINVAL when it does not resolve. */
int rm_net_resolve(const char *host, int port, void *sockaddr_in_out, rm_err *err);
/* Set TCP_NODELAY, large SO_SNDBUF/SO_RCVBUF (bufsize bytes; 0 = leave autotuning) and O_NONBLOCK. */
int rm_net_tune(int fd, int bufsize);
/* Non-blocking listener on host:port (port 0 = any); *port gets the bound port. */
int rm_net_listen(const char *host, int port, int backlog, int *fd, int *bound_port, rm_err *err);
/* Connect to host:port, retrying refused connections every few ms until deadline (the peer may not
 * listen yet). RM_ETIMEDOUT when the deadline passes; *fd is non-blocking. */
int rm_net_connect(const char *host, int port, double deadline, int *fd, rm_err *err);
/* Accept one connection (non-blocking fd) or RM_ETIMEDOUT. peer (optional, >= 64 bytes) gets
 * "a.b.c.d:port" of the remote end for logs. */
int rm_net_accept(int lfd, double deadline, int *fd, char *peer, size_t peercap, rm_err *err);
/* Exactly len bytes, or RM_ETIMEDOUT / RM_ECLOSED (peer closed or reset) / RM_EIO. */
int rm_net_send_all(int fd, const void *buf, size_t len, double deadline, rm_err *err);
int rm_net_recv_all(int fd, void *buf, size_t len, double deadline, rm_err *err);
/* Wait until fd is readable/writable (events = POLLIN/POLLOUT) or the deadline; 0, RM_ETIMEDOUT. */
int rm_net_wait(int fd, short events, double deadline);

/* The handshake MAC of every ringmaster TCP connection (the ring, parameter servers):
 * HMAC-SHA256(token, label | epoch | a | b | nonce_c | nonce_a), label at most 31 bytes, the
 * numbers big-endian. Each protocol binds its own label ("ringmaster-ring-v1 acc", ...). */
void rm_net_hs_mac(const char *token, const char *label, uint32_t epoch, uint32_t a, uint32_t b,
                   const uint8_t nc[16], const uint8_t na[16], uint8_t out[32]);
/* The data frame of every ringmaster TCP stream after its handshake (the ring's pieces, pipeline
 * activations): a 16-byte header {magic "RMFR", sequence number, payload length, check} in host
 * byte order (peers run the same build), then len payload bytes. A header whose magic, sequence,
 * length or check is off means the peer is out of step or not a peer: RM_EPROTO. */
#define RM_NET_FRAME_MAGIC 0x524d4652u
typedef struct rm_net_frame {
    uint32_t magic, seq, len, check;
} rm_net_frame;
void rm_net_frame_make(rm_net_frame *h, uint32_t seq, uint32_t len);
/* 1 when h is a well-formed header with sequence number seq and payload length len. */
int rm_net_frame_ok(const rm_net_frame *h, uint32_t seq, uint32_t len);
/* Constant-time compare: 1 when equal. */
int rm_net_ct_equal(const void *a, const void *b, size_t n);
/* Fill buf with random bytes (getrandom, falling back to clock noise). */
void rm_net_random(void *buf, size_t len);
#endif
