/* loopback.c — the physical limit for the allreduce benchmark: a plain single-stream TCP transfer
 * over 127.0.0.1 between two processes (fork), reported in GB/s (1e9 bytes). With -d the two
 * processes also send to each other at the same time (two streams, one per direction), which is
 * what a 2-rank ring does; the number printed is then the per-direction rate.
 * Usage: loopback [-s TOTAL_MB] [-c CHUNK_KB] [-d] [-z]   (defaults 2048 MB, 1024 KB)
 * -z: the sender uses vmsplice+splice (no user->kernel copy), as the ring does for large pieces.
 * Design: blocking send/recv of CHUNK-sized pieces with 4 MiB socket buffers and TCP_NODELAY, the
 * same settings the ring uses, so the ratio ring/loopback compares like with like. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void tune(int fd)
{
    int one = 1, buf = 4 << 20;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

typedef struct {
    int fd;
    size_t total, chunk;
    int recv;
    double secs;
    int zc;
} job;

/* Sender without the user->kernel copy: vmsplice the buffer's pages into a pipe, splice the pipe
 * into the socket (the receiver's recv() is then the only copy on loopback). */
static void run_zc(job *j, char *b)
{
    int p[2];
    if (pipe(p)) {
        perror("pipe");
        exit(1);
    }
    fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    size_t done = 0;
    while (done < j->total) {
        size_t want = j->total - done < j->chunk ? j->total - done : j->chunk;
        size_t off = 0;
        while (off < want) {
            struct iovec iov = {b + off, want - off};
            ssize_t m = vmsplice(p[1], &iov, 1, 0);
            if (m <= 0) {
                perror("vmsplice");
                exit(1);
            }
            ssize_t left = m;
            while (left > 0) {
                ssize_t k = splice(p[0], NULL, j->fd, NULL, (size_t)left, SPLICE_F_MOVE | SPLICE_F_MORE);
                if (k <= 0) {
                    perror("splice");
                    exit(1);
                }
                left -= k;
            }
            off += (size_t)m;
        }
        done += want;
    }
    close(p[0]);
    close(p[1]);
}

static void *run(void *arg)
{
    job *j = arg;
    char *b = malloc(j->chunk);
    memset(b, 1, j->chunk);
    size_t done = 0;
    double t0 = now();
    if (j->zc && !j->recv) {
        run_zc(j, b);
        done = j->total;
    }
    while (done < j->total) {
        size_t want = j->total - done < j->chunk ? j->total - done : j->chunk;
        ssize_t n = j->recv ? recv(j->fd, b, want, MSG_WAITALL) : send(j->fd, b, want, MSG_NOSIGNAL);
        if (n <= 0) {
            perror(j->recv ? "recv" : "send");
            exit(1);
        }
        done += (size_t)n;
    }
    j->secs = now() - t0;
    free(b);
    return NULL;
}

int main(int argc, char **argv)
{
    size_t total = 2048ull << 20, chunk = 1 << 20;
    int duplex = 0, zc = 0, o;
    while ((o = getopt(argc, argv, "s:c:dz")) != -1) {
        if (o == 's')
            total = strtoull(optarg, NULL, 10) << 20;
        else if (o == 'c')
            chunk = strtoull(optarg, NULL, 10) << 10;
        else if (o == 'd')
            duplex = 1;
        else if (o == 'z')
            zc = 1;
        else {
            fprintf(stderr, "usage: loopback [-s MB] [-c KB] [-d]\n");
            return 2;
        }
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4) ||
        getsockname(ls, (struct sockaddr *)&a, &al)) {
        perror("listen");
        return 1;
    }
    int p[2];
    if (pipe(p))
        return 1;
    pid_t pid = fork();
    if (pid == 0) { /* child: receiver (and sender with -d) */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        tune(fd);
        if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
            perror("connect");
            _exit(1);
        }
        job r = {fd, total, chunk, 1, 0, zc}, s = {fd, total, chunk, 0, 0, zc};
        pthread_t t;
        if (duplex)
            pthread_create(&t, NULL, run, &s);
        run(&r);
        if (duplex)
            pthread_join(t, NULL);
        double secs = r.secs;
        if (write(p[1], &secs, sizeof secs) != sizeof secs)
            _exit(1);
        _exit(0);
    }
    int fd = accept(ls, NULL, NULL);
    tune(fd);
    job s = {fd, total, chunk, 0, 0, zc}, r = {fd, total, chunk, 1, 0, zc};
    pthread_t t;
    if (duplex)
        pthread_create(&t, NULL, run, &r);
    run(&s);
    if (duplex)
        pthread_join(t, NULL);
    double secs = 0;
    if (read(p[0], &secs, sizeof secs) != sizeof secs)
        return 1;
    waitpid(pid, NULL, 0);
    printf("%s%s chunk=%zuKiB bytes=%zu seconds=%.3f GBps=%.3f\n", duplex ? "duplex" : "single",
           zc ? "-splice" : "", chunk >> 10, total, secs, (double)total / secs / 1e9);
    return 0;
}
