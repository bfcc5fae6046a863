/* ksload.c — load generator for kubesim: keep-alive writer threads (create or merge-patch
 * ConfigMaps) while W watch streams stay open, one epoll thread counting the watch events.
 * Prints writes/s, write latency percentiles and watch events delivered.
 *   ksload PORT THREADS SECONDS WATCHES WATCH_NS MODE(create|patch|version)
 * Design: plain blocking sockets and a hand-rolled HTTP/1.1 client (Content-Length responses),
 * so the generator costs far less CPU than the server it measures. Loopback only. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port;
static double seconds;
static const char *mode;
static atomic_long writes, errors, events;
static atomic_int stop;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* send request, read one Content-Length response; returns status or -1 */
static int roundtrip(int fd, const char *req, size_t len)
{
    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len)
        return -1;
    char buf[65536];
    size_t got = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (r <= 0)
            return -1;
        got += (size_t)r;
        buf[got] = 0;
        char *hend = strstr(buf, "\r\n\r\n");
        if (!hend)
            continue;
        char *cl = strcasestr(buf, "content-length:");
        long n = cl ? atol(cl + 15) : 0;
        size_t need = (size_t)(hend + 4 - buf) + (size_t)n;
        while (got < need) {
            r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
            if (r <= 0)
                return -1;
            got += (size_t)r;
        }
        int status = 0;
        sscanf(buf, "HTTP/1.%*d %d", &status);
        return status;
    }
}

static double *lat[64];
static long nlat[64];
#define MAXLAT 2000000

static void *writer(void *arg)
{
    long id = (long)arg;
    int fd = dial();
    if (fd < 0) {
        atomic_fetch_add(&errors, 1);
        return NULL;
    }
    lat[id] = malloc(sizeof(double) * MAXLAT);
    char req[2048], body[512];
    long i = 0;
    while (!atomic_load(&stop)) {
        int blen;
        int rlen;
        if (!strcmp(mode, "version")) {
            rlen = snprintf(req, sizeof(req), "GET /version HTTP/1.1\r\nHost: x\r\n\r\n");
            blen = 0;
        } else if (!strcmp(mode, "create")) {
            blen = snprintf(body, sizeof(body),
                            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"w%ld-%"
                            "ld\",\"labels\":{\"app\":\"bench\"}},\"data\":{\"i\":\"%ld\"}}",
                            id, i, i);
            rlen = snprintf(req, sizeof(req),
                            "POST /api/v1/namespaces/bench/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: "
                            "application/json\r\nContent-Length: %d\r\n\r\n%s",
                            blen, body);
        } else {
            blen = snprintf(body, sizeof(body), "{\"data\":{\"i\":\"%ld\"}}", i);
            rlen = snprintf(req, sizeof(req),
                            "PATCH /api/v1/namespaces/bench/configmaps/p%ld HTTP/1.1\r\nHost: "
                            "x\r\nContent-Type: application/merge-patch+json\r\nContent-Length: %d\r\n\r\n%s",
                            id, blen, body);
        }
        double t0 = now();
        int st = roundtrip(fd, req, (size_t)rlen);
        double dt = now() - t0;
        if (st == 200 || st == 201) {
            atomic_fetch_add(&writes, 1);
            if (nlat[id] < MAXLAT)
                lat[id][nlat[id]++] = dt;
        } else {
            atomic_fetch_add(&errors, 1);
            if (st < 0) {
                close(fd);
                fd = dial();
                if (fd < 0)
                    break;
            }
        }
        i++;
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *watch_reader(void *arg)
{
    int ep = (int)(long)arg;
    struct epoll_event evs[256];
    char buf[65536];
    while (!atomic_load(&stop)) {
        int n = epoll_wait(ep, evs, 256, 100);
        for (int i = 0; i < n; i++) {
            ssize_t r = recv(evs[i].data.fd, buf, sizeof(buf), MSG_DONTWAIT);
            /* chunked framing: count event objects by their opening {"type": */
            for (ssize_t j = 0; j + 8 <= r; j++)
                if (buf[j] == '{' && buf[j + 1] == '"' && !memcmp(buf + j + 2, "type\"", 5))
                    atomic_fetch_add(&events, 1);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: ksload PORT THREADS SECONDS WATCHES WATCH_NS create|patch\n");
        return 2;
    }
    port = atoi(argv[1]);
    int threads = atoi(argv[2]);
    seconds = atof(argv[3]);
    int watches = atoi(argv[4]);
    const char *wns = argv[5];
    mode = argv[6];
    if (threads > 64)
        threads = 64;
    /* watch from the current resourceVersion, as an informer does after its list */
    char rv[32] = "0";
    {
        int fd = dial();
        char q[256], buf[8192];
        int n = snprintf(
            q, sizeof(q),
            "GET /api/v1/namespaces/%s/configmaps?limit=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            wns);
        send(fd, q, (size_t)n, MSG_NOSIGNAL);
        ssize_t got = 0, r;
        while ((r = recv(fd, buf + got, sizeof(buf) - 1 - (size_t)got, 0)) > 0)
            got += r;
        buf[got > 0 ? got : 0] = 0;
        char *p = strstr(buf, "\"resourceVersion\":\"");
        if (p)
            sscanf(p + 19, "%31[0-9]", rv);
        close(fd);
    }
    int ep = epoll_create1(0);
    int *wfd = calloc((size_t)watches + 1, sizeof(int));
    int opened = 0;
    for (int i = 0; i < watches; i++) {
        wfd[i] = dial();
        if (wfd[i] < 0)
            break;
        char req[512];
        const char *sel = getenv("KSLOAD_SELECTOR"); /* e.g. "app%3Dother" (URL-encoded) */
        int n =
            snprintf(req, sizeof(req),
                     "GET /api/v1/namespaces/%s/configmaps?watch=true&resourceVersion=%s&labelSelector=%s "
                     "HTTP/1.1\r\nHost: x\r\n\r\n",
                     wns, rv, sel && *sel ? sel : "app%3Dbench");
        send(wfd[i], req, (size_t)n, MSG_NOSIGNAL);
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = wfd[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, wfd[i], &ev);
        opened++;
    }
    pthread_t rt;
    pthread_create(&rt, NULL, watch_reader, (void *)(long)ep);
    if (watches)
        sleep(1); /* let every watch stream start */
    long ev0 = atomic_load(&events);
    pthread_t th[64];
    double t0 = now();
    for (long i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, writer, (void *)i);
    struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double el = now() - t0;
    usleep(300000);
    pthread_join(rt, NULL);
    long total = 0;
    for (int i = 0; i < threads; i++)
        total += nlat[i];
    double *all = malloc(sizeof(double) * (size_t)(total + 1));
    long k = 0;
    for (int i = 0; i < threads; i++) {
        memcpy(all + k, lat[i], sizeof(double) * (size_t)nlat[i]);
        k += nlat[i];
        free(lat[i]);
    }
    qsort(all, (size_t)total, sizeof(double), cmpd);
    double p50 = total ? all[total / 2] * 1e3 : 0, p99 = total ? all[(long)(total * 0.99)] * 1e3 : 0;
    printf("mode=%s threads=%d seconds=%.1f watches_open=%d writes=%ld errors=%ld writes_per_s=%.0f "
           "p50_ms=%.2f p99_ms=%.2f watch_events=%ld watch_events_per_s=%.0f\n",
           mode, threads, el, opened, (long)atomic_load(&writes), (long)atomic_load(&errors),
           atomic_load(&writes) / el, p50, p99, atomic_load(&events) - ev0,
           (atomic_load(&events) - ev0) / el);
    for (int i = 0; i < opened; i++)
        close(wfd[i]);
    free(all);
    free(wfd);
    return 0;
}
