/* swarm.c — the worker swarm (swarm.h): simulated workers on one epoll loop; the engine is shared
 * with the kubelet mode (swarm_kubelet.c) through swarm_internal.h.
 *
 * Each worker is a small state machine driven by two things: its connection (a request written,
 * its reply read) and its timer (the next report, a late first join, a back-off, noticing a dead
 * neighbour). A worker has at most one request in flight and at most one timer; the timers sit in
 * one binary heap keyed by due time. A connection the server closes while idle is reopened for the
 * next request; a request whose reply never came whole is sent again on a new connection (every
 * request of the protocol may be repeated). */
#include "worker/swarm/swarm.h"
#include "worker/swarm/swarm_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define OUT_CAP 1536
#define BACKOFF_MIN_S 0.05
#define BACKOFF_MAX_S 1.0
#define MAX_TRIES 40 /* one request's failed sends before the worker counts an error */

static void sw_error(swarm *s, const char *fmt, ...) RM_PRINTF(2, 3);
static void sw_error(swarm *s, const char *fmt, ...)
{
    s->st->errors++;
    if (s->st->first_error[0] && !s->log_errors)
        return;
    char msg[sizeof s->st->first_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!s->st->first_error[0])
        memcpy(s->st->first_error, msg, sizeof msg);
    if (s->log_errors)
        rm_warn("swarm: protocol error err=\"%s\"", msg);
}

/* ---------------- the timer heap ---------------- */

static void heap_swap(swarm *s, int a, int b)
{
    int t = s->heap[a];
    s->heap[a] = s->heap[b];
    s->heap[b] = t;
    s->w[s->heap[a]].heap = a;
    s->w[s->heap[b]].heap = b;
}

static void heap_fix(swarm *s, int i)
{
    while (i > 0 && s->w[s->heap[(i - 1) / 2]].due > s->w[s->heap[i]].due) {
        heap_swap(s, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->nheap && s->w[s->heap[l]].due < s->w[s->heap[m]].due)
            m = l;
        if (r < s->nheap && s->w[s->heap[r]].due < s->w[s->heap[m]].due)
            m = r;
        if (m == i)
            return;
        heap_swap(s, i, m);
        i = m;
    }
}

void sw_timer_cancel(swarm *s, int id)
{
    int i = s->w[id].heap;
    if (i < 0)
        return;
    s->w[id].heap = -1;
    s->w[id].timer = T_NONE;
    if (--s->nheap == i)
        return;
    s->heap[i] = s->heap[s->nheap];
    s->w[s->heap[i]].heap = i;
    heap_fix(s, i);
}

void sw_timer_set(swarm *s, int id, int what, double due)
{
    sw_worker *w = &s->w[id];
    w->due = due;
    w->timer = (uint8_t)what;
    if (w->heap < 0) {
        w->heap = s->nheap;
        s->heap[s->nheap++] = id;
    }
    heap_fix(s, w->heap);
}

/* ---------------- connections ---------------- */

void sw_conn_close(swarm *s, sw_worker *w)
{
    if (w->fd >= 0) {
        epoll_ctl(s->ep, EPOLL_CTL_DEL, w->fd, NULL);
        close(w->fd);
    }
    w->fd = -1;
    w->connected = false;
}

static int conn_open(swarm *s, int id)
{
    sw_worker *w = &s->w[id];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (w->job->spread) {
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl(w->addr);
        if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
            int e = errno;
            close(fd);
            return -e;
        }
    }
    if (connect(fd, (struct sockaddr *)&w->job->dst, sizeof w->job->dst) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u32 = (uint32_t)id};
    if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    w->fd = fd;
    w->connected = false;
    return 0;
}

static void on_reply(swarm *s, int id, int op, int status, const char *body, size_t len);

/* Build the request for op into w->out. */
static void build(swarm *s, int id, int op)
{
    sw_worker *w = &s->w[id];
    const sw_job *j = w->job;
    int wid = w->wid;
    char body[480], line[330];
    const char *method = "POST";
    body[0] = 0;
    switch (op) {
    case OP_JOIN:
        snprintf(body, sizeof body,
                 "{\"workerId\":\"%d\",\"addr\":\"%u.%u.%u.%u:29500\",\"lastEpoch\":%d,"
                 "\"node\":\"swarm-%d\"%s}",
                 wid, w->addr >> 24, (w->addr >> 16) & 255u, (w->addr >> 8) & 255u, w->addr & 255u,
                 w->last_epoch, wid / 8, s->cfg->peers ? "" : ",\"peers\":false");
        snprintf(line, sizeof line, "%s/join", j->path);
        break;
    case OP_KV_PUT:
        method = "PUT";
        snprintf(body, sizeof body, "swarm-bootstrap-%d", w->epoch);
        snprintf(line, sizeof line, "%s/kv/%d/bootstrap", j->path, w->epoch);
        break;
    case OP_KV_GET:
        method = "GET";
        snprintf(line, sizeof line, "%s/kv/%d/bootstrap?wait=10", j->path, w->epoch);
        break;
    default: {
        double now = rm_mono();
        long long step = w->step0 + (long long)((now - w->train_start) / s->cfg->step_s);
        if (w->steps > 0 && step >= w->steps) { /* the last report: "done", with the result */
            step = w->steps;
            w->final = true;
        }
        if (step > w->job->high_step)
            w->job->high_step = step;
        double loss = 2.0 / (1.0 + (double)step), rate = 1.0 / s->cfg->step_s;
        int bn = snprintf(body, sizeof body,
                          "{\"workerId\":\"%d\",\"epoch\":%d,\"rank\":%d,\"step\":%lld,\"trainEpoch\":1,"
                          "\"loss\":%.4f,\"samplesPerSecond\":%.1f,\"state\":\"%s\"",
                          wid, w->epoch, w->rank, step, loss, rate, w->final ? "done" : "training");
        if (w->final && bn > 0 && (size_t)bn < sizeof body)
            snprintf(body + bn, sizeof body - (size_t)bn,
                     ",\"result\":{\"testAccuracy\":%.4f,\"trainLoss\":%.4f,\"steps\":%lld,"
                     "\"seconds\":%.3f,\"samplesPerSecond\":%.1f}",
                     1.0 - loss / 2, loss, step, now - w->train_start, rate);
        bn = (int)strlen(body);
        snprintf(body + bn, sizeof body - (size_t)bn, "%s}",
                 s->cfg->hold && w->reported && !w->final ? ",\"hold\":true" : "");
        w->sent_at = now;
        snprintf(line, sizeof line, "%s/report", j->path);
        break;
    }
    }
    size_t bl = strlen(body);
    int n = snprintf(w->out, OUT_CAP,
                     "%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, line, j->host, j->auth, bl, body);
    w->out_len = n > 0 && n < OUT_CAP ? (size_t)n : 0;
    w->out_off = 0;
    w->op = (uint8_t)op;
    w->in_len = 0;
}

/* Send w's request (built): on its connection, or a new one. */
static void send_req(swarm *s, int id)
{
    sw_worker *w = &s->w[id];
    s->st->requests++;
    w->out_off = 0;
    w->in_len = 0;
    if (w->fd < 0) {
        int rc = conn_open(s, id);
        if (rc != 0) {
            if (++w->tries >= MAX_TRIES)
                sw_error(s, "worker %d: cannot connect: %s", id, strerror(-rc));
            sw_timer_set(s, id, T_RETRY, rm_mono() + w->backoff);
            w->backoff = w->backoff * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : w->backoff * 2;
            return;
        }
    }
    sw_drive(s, id);
}

static void request(swarm *s, int id, int op)
{
    sw_worker *w = &s->w[id];
    if (!w->out && !(w->out = malloc(OUT_CAP))) {
        sw_error(s, "out of memory");
        return;
    }
    w->tries = 0;
    w->backoff = BACKOFF_MIN_S;
    build(s, id, op);
    send_req(s, id);
}

/* The reply came apart (connection closed, reset): send it again on a new connection. */
static void resend(swarm *s, int id)
{
    sw_worker *w = &s->w[id];
    sw_conn_close(s, w);
    s->st->reconnects++;
    if (++w->tries >= MAX_TRIES) {
        sw_error(s, "worker %d: no reply after %d tries", id, w->tries);
        w->tries = 0;
    }
    if (w->tries > 2) { /* the first retries at once: an idle connection cut by the server */
        sw_timer_set(s, id, T_RETRY, rm_mono() + w->backoff);
        w->backoff = w->backoff * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : w->backoff * 2;
        return;
    }
    send_req(s, id);
}

/* Parse a whole reply in w->in: 1 = complete (status, body, close set), 0 = need more, -1 = bad. */
static int parse_reply(sw_worker *w, int *status, size_t *body_off, size_t *body_len, bool *close_after)
{
    char *end = w->in_len >= 4 ? memmem(w->in, w->in_len, "\r\n\r\n", 4) : NULL;
    if (!end)
        return w->in_len > 16384 ? -1 : 0;
    size_t hlen = (size_t)(end - w->in) + 4;
    if (w->in_len < 12 || strncmp(w->in, "HTTP/1.", 7) != 0)
        return -1;
    *status = atoi(w->in + 9);
    long long clen = -1;
    *close_after = strncmp(w->in, "HTTP/1.0", 8) == 0;
    for (char *p = memchr(w->in, '\n', hlen); p && p < end; p = memchr(p + 1, '\n', (size_t)(end - p))) {
        const char *h = p + 1;
        if (strncasecmp(h, "Content-Length:", 15) == 0)
            clen = strtoll(h + 15, NULL, 10);
        else if (strncasecmp(h, "Connection:", 11) == 0) {
            const char *v = h + 11;
            while (*v == ' ')
                v++;
            if (strncasecmp(v, "close", 5) == 0)
                *close_after = true;
        } else if (strncasecmp(h, "Transfer-Encoding:", 18) == 0)
            return -1; /* the rendezvous answers with a length */
    }
    if (clen < 0 && (*status == 204 || *status == 304 || *status / 100 == 1))
        clen = 0; /* no body by definition */
    if (clen < 0 || (unsigned long long)clen > RM_SWARM_MAX_REPLY)
        return -1;
    if (w->in_len < hlen + (size_t)clen)
        return 0;
    *body_off = hlen;
    *body_len = (size_t)clen;
    return 1;
}

/* Progress on w's connection: connect, write, read, as far as the socket allows. */
void sw_drive(swarm *s, int id)
{
    sw_worker *w = &s->w[id];
    if (w->fd < 0)
        return;
    if (!w->connected) {
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(w->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err) {
            if (w->op != OP_NONE)
                resend(s, id);
            else
                sw_conn_close(s, w);
            return;
        }
        /* connected once writable; until then a write fails with EAGAIN */
    }
    while (w->op != OP_NONE && w->out_off < w->out_len) {
        ssize_t n = send(w->fd, w->out + w->out_off, w->out_len - w->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            w->connected = true;
            w->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTCONN))
            return;
        resend(s, id);
        return;
    }
    for (;;) {
        if (w->in_cap - w->in_len < 4096) {
            size_t nc = w->in_cap ? w->in_cap * 2 : 8192;
            if (nc > RM_SWARM_MAX_REPLY + 16384) {
                sw_error(s, "worker %d: reply over %u bytes", id, RM_SWARM_MAX_REPLY);
                sw_conn_close(s, w);
                return;
            }
            char *ni = realloc(w->in, nc);
            if (!ni) {
                sw_error(s, "out of memory");
                return;
            }
            w->in = ni;
            w->in_cap = nc;
        }
        ssize_t n = recv(w->fd, w->in + w->in_len, w->in_cap - w->in_len - 1, 0);
        if (n > 0) {
            w->connected = true;
            if (w->op == OP_NONE) { /* bytes nobody asked for */
                sw_error(s, "worker %d: unexpected bytes from the server", id);
                sw_conn_close(s, w);
                return;
            }
            w->in_len += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        /* closed or reset: an idle connection is simply gone; a request is sent again */
        if (w->op == OP_NONE)
            sw_conn_close(s, w);
        else
            resend(s, id);
        return;
    }
    if (w->op == OP_NONE || w->in_len == 0)
        return;
    int status = 0;
    size_t boff = 0, blen = 0;
    bool close_after = false;
    int pr = parse_reply(w, &status, &boff, &blen, &close_after);
    if (pr == 0)
        return;
    if (pr < 0) {
        sw_error(s, "worker %d: malformed reply: %.80s", id, w->in);
        resend(s, id);
        return;
    }
    if (close_after)
        sw_conn_close(s, w);
    w->in[boff + blen] = 0;
    int op = w->op;
    w->op = OP_NONE;
    on_reply(s, id, op, status, w->in + boff, blen);
    if (w->op == OP_NONE && w->in_cap > 65536) { /* a big peer list is not kept */
        free(w->in);
        w->in = NULL;
        w->in_cap = w->in_len = 0;
    }
}

/* ---------------- reply scanning ---------------- */

/* The number after "key": at the top level of a JSON object (depth 1, outside strings). */
static bool top_int(const char *b, size_t len, const char *key, long long *out)
{
    size_t kl = strlen(key);
    int depth = 0;
    for (size_t i = 0; i < len; i++) {
        char c = b[i];
        if (c == '"') {
            size_t j = i + 1;
            while (j < len && b[j] != '"')
                j += b[j] == '\\' ? 2 : 1;
            if (depth == 1 && j - i - 1 == kl && memcmp(b + i + 1, key, kl) == 0 && j + 1 < len &&
                b[j + 1] == ':') {
                char *end;
                const char *v = b + j + 2;
                if (*v == '"')
                    v++;
                *out = strtoll(v, &end, 10);
                return end != v;
            }
            i = j;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return false;
}

static double since(const swarm *s)
{
    return rm_mono() - s->t0;
}

static ep_round *round_of(swarm *s, int epoch)
{
    return s->rounds_on && epoch >= 1 && epoch <= RM_SWARM_MAX_EPOCHS ? &s->rounds[epoch] : NULL;
}

/* A round is complete once every member trained: it is counted in the stats, in epoch order. */
static void round_check(swarm *s, int epoch)
{
    ep_round *r = round_of(s, epoch);
    if (!r || r->counted || r->world == 0 || r->assigned < r->world || r->trained < r->world)
        return;
    r->counted = true;
    rm_swarm_stats *st = s->st;
    if (st->nrounds < RM_SWARM_MAX_EPOCHS)
        st->rounds[st->nrounds++] = (rm_swarm_round){epoch, r->world, r->formed, r->trained_at};
    s->first_trained = true; /* the faults count from here */
}

static void start_training(swarm *s, int id)
{
    sw_worker *w = &s->w[id];
    w->train_start = rm_mono();
    w->step0 = w->job->high_step;
    w->reported = false;
    w->final = false;
    request(s, id, OP_REPORT);
}

/* w ended on its own: the rendezvous said stop, or its last report went out (exit 0). */
static void finish(swarm *s, int id)
{
    sw_worker *w = &s->w[id];
    w->state = W_DONE;
    sw_conn_close(s, w);
    if (s->on_end)
        s->on_end(s, id, 0);
}

static void rejoin(swarm *s, int id, int last_epoch)
{
    sw_worker *w = &s->w[id];
    w->last_epoch = last_epoch;
    w->notice = false;
    sw_timer_cancel(s, id);
    request(s, id, OP_JOIN);
}

static void on_join(swarm *s, int id, int status, const char *body, size_t len)
{
    sw_worker *w = &s->w[id];
    long long epoch = 0, rank = -1, world = 0;
    if (status == 202) {
        request(s, id, OP_JOIN); /* held the whole poll, or the epoch moved: ask again */
        return;
    }
    if (status != 200 || !top_int(body, len, "epoch", &epoch) || !top_int(body, len, "rank", &rank) ||
        !top_int(body, len, "worldSize", &world) || rank < 0 || rank >= world || world < 1 ||
        world > s->cfg->count ||
        (!s->cfg->peers && (!strstr(body, "\"next\":{") || strstr(body, "\"peers\":")))) {
        sw_error(s, "worker %d: join answered %d: %.120s", id, status, body);
        sw_timer_set(s, id, T_JOIN, rm_mono() + 1.0);
        return;
    }
    w->epoch = (int)epoch;
    w->rank = (int)rank;
    w->world = (int)world;
    ep_round *r = round_of(s, w->epoch);
    if (r) {
        if (!r->world) {
            r->world = w->world;
            r->ranks = calloc((size_t)w->world, 1);
        }
        if (r->world != w->world)
            sw_error(s, "epoch %d: worldSize %d and %d in one round", w->epoch, r->world, w->world);
        else if (r->ranks && r->ranks[rank]++)
            sw_error(s, "epoch %d: rank %lld assigned twice", w->epoch, rank);
        else {
            r->assigned++;
            r->formed = since(s);
        }
    }
    if (w->notice) { /* the neighbour died while this join was out */
        rejoin(s, id, w->epoch);
        return;
    }
    if (s->cfg->kv)
        request(s, id, w->rank == 0 ? OP_KV_PUT : OP_KV_GET);
    else
        start_training(s, id);
}

/* The reply to w's request op (done: w->op is OP_NONE again). */
static void on_reply(swarm *s, int id, int op, int status, const char *body, size_t len)
{
    sw_worker *w = &s->w[id];
    if (w->state != W_LIVE)
        return;
    if (status == 409) { /* stop */
        finish(s, id);
        return;
    }
    if (status == 503 || status == 502) { /* the server is going away or busy: again */
        sw_timer_set(s, id, T_RETRY, rm_mono() + BACKOFF_MAX_S);
        return;
    }
    bool is_put = op == OP_KV_PUT, is_get = op == OP_KV_GET;
    if (op == OP_JOIN) {
        on_join(s, id, status, body, len);
        return;
    }
    if (w->notice) {
        rejoin(s, id, w->epoch);
        return;
    }
    if (is_put || is_get) {
        if (status == 200 || status == 204) {
            start_training(s, id);
        } else if (status == 404 && is_get) {
            request(s, id, OP_KV_GET);
        } else if (status == 410) {
            rejoin(s, id, w->epoch);
        } else {
            sw_error(s, "worker %d: kv answered %d: %.120s", id, status, body);
            rejoin(s, id, w->epoch);
        }
        return;
    }
    /* a report */
    const char *act = status == 200 ? strstr(body, "\"action\":\"") : NULL;
    if (!act) {
        sw_error(s, "worker %d: report answered %d: %.120s", id, status, body);
        sw_timer_set(s, id, T_REPORT, rm_mono() + s->cfg->report_s);
        return;
    }
    act += 10;
    if (w->final) { /* the "done" report went out: whatever the answer, the worker exits 0 */
        finish(s, id);
        return;
    }
    if (strncmp(act, "continue", 8) == 0) {
        if (!w->reported) {
            w->reported = true;
            ep_round *r = round_of(s, w->epoch);
            if (r && r->world) {
                r->trained++;
                r->trained_at = since(s);
                round_check(s, w->epoch);
            }
        }
        /* the next report a period after this one's answer; a held report's answer comes after its
         * hold, so the next goes out a period after the held one did */
        double now = rm_mono(), due = now + s->cfg->report_s;
        if (s->cfg->hold)
            due = w->sent_at + s->cfg->report_s > now ? w->sent_at + s->cfg->report_s : now;
        if (w->steps > 0) { /* the last step ends before the next report: report "done" then */
            double end = w->train_start + (double)(w->steps - w->step0) * s->cfg->step_s + 1e-3;
            due = end < due ? end : due;
        }
        if (w->timer != T_NOTICE) /* a noticed death goes first: it re-joins when the notice is due */
            sw_timer_set(s, id, T_REPORT, due);
    } else if (strncmp(act, "rejoin", 6) == 0) {
        rejoin(s, id, w->epoch);
    } else {
        finish(s, id);
    }
}

static void on_timer(swarm *s, int id)
{
    sw_worker *w = &s->w[id];
    int what = w->timer;
    w->timer = T_NONE;
    if (w->state != W_LIVE)
        return;
    switch (what) {
    case T_JOIN:
        request(s, id, OP_JOIN);
        break;
    case T_REPORT:
        if (w->notice)
            rejoin(s, id, w->epoch);
        else
            request(s, id, OP_REPORT);
        break;
    case T_RETRY:
        send_req(s, id);
        break;
    case T_NOTICE:
        if (w->op != OP_NONE) { /* a held report in flight: the training thread's client joins now */
            sw_conn_close(s, w);
            w->op = OP_NONE;
            s->st->reconnects++;
        }
        rejoin(s, id, w->epoch);
        break;
    default:
        break;
    }
}

void sw_fire_timers(swarm *s, double now)
{
    while (s->nheap > 0 && s->w[s->heap[0]].due <= now) {
        int id = s->heap[0];
        int what = s->w[id].timer;
        sw_timer_cancel(s, id);
        s->w[id].timer = (uint8_t)what;
        on_timer(s, id);
    }
}

/* The k-th of n victims, spread over the ids (never worker 0: rank 0 publishes the bootstrap). */
static int victim(int k, int n, int count)
{
    long long v = (long long)(k + 1) * count / (n + 1);
    return v < 1 ? 1 : (int)(v >= count ? count - 1 : v);
}

static void faults(swarm *s)
{
    const rm_swarm_cfg *c = s->cfg;
    int nf = c->kill + c->hang;
    for (int k = 0; k < nf; k++) {
        int id = victim(k, nf, c->count);
        sw_worker *w = &s->w[id];
        if (w->state != W_LIVE)
            continue;
        sw_timer_cancel(s, id);
        w->op = OP_NONE;
        if (k < c->kill) {
            w->state = W_DEAD;
            sw_conn_close(s, w);
        } else {
            w->state = W_HUNG; /* its connection stays open, silent */
        }
    }
    for (int k = 0; k < nf; k++) { /* each victim's next live worker notices */
        int id = victim(k, nf, c->count);
        for (int step = 1; step < c->count; step++) {
            int nb = (id + step) % c->count;
            sw_worker *n = &s->w[nb];
            if (n->state != W_LIVE)
                continue;
            if (n->op != OP_NONE && !(n->op == OP_REPORT && c->hold)) {
                n->notice = true; /* after its request in flight */
            } else {              /* a held report is not waited for: on_timer drops it */
                sw_timer_set(s, nb, T_NOTICE, rm_mono() + c->detect_s);
            }
            break;
        }
    }
    s->faulted = true;
    s->st->fault_s = since(s);
}

bool sw_job_init(sw_job *j, const char *url, const char *job, const char *token, rm_err *err)
{
    unsigned a, b, c, d, port;
    char tail;
    if (!url) {
        rm_err_field(err, RM_EINVAL, "url", "is required");
        return false;
    }
    if (strncmp(url, "http://", 7) != 0 ||
        sscanf(url + 7, "%u.%u.%u.%u:%u%c", &a, &b, &c, &d, &port, &tail) != 5 || a > 255 || b > 255 ||
        c > 255 || d > 255 || port < 1 || port > 65535) {
        rm_err_field(err, RM_EINVAL, "url", "\"%.100s\" must be http://A.B.C.D:PORT", url);
        return false;
    }
    if (!job || !strchr(job, '/') || strlen(job) > 255) {
        rm_err_field(err, RM_EINVAL, "job", "must be namespace/name");
        return false;
    }
    if (!token || !*token || strlen(token) > 255 || strpbrk(token, "\r\n")) {
        rm_err_field(err, RM_EINVAL, "token", "must be one line of 1..255 bytes");
        return false;
    }
    memset(j, 0, sizeof *j);
    j->dst.sin_family = AF_INET;
    j->dst.sin_port = htons((uint16_t)port);
    j->dst.sin_addr.s_addr = htonl((a << 24) | (b << 16) | (c << 8) | d);
    j->spread = a == 127;
    snprintf(j->host, sizeof j->host, "%u.%u.%u.%u:%u", a, b, c, d, port);
    const char *slash = strchr(job, '/');
    snprintf(j->path, sizeof j->path, "/v1/jobs/%.*s/%s", (int)(slash - job), job, slash + 1);
    snprintf(j->auth, sizeof j->auth, "Authorization: Bearer %s", token);
    return true;
}

void rm_swarm_cfg_default(rm_swarm_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->step_s = 0.1;
    cfg->report_s = 1.0;
    cfg->kv = true;
    cfg->detect_s = 0.1;
    cfg->timeout_s = 60;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int rm_swarm_run(const rm_swarm_cfg *cfg, rm_swarm_stats *st_out, rm_err *err)
{
    rm_swarm_stats st_local;
    rm_swarm_stats *st = st_out ? st_out : &st_local;
    memset(st, 0, sizeof *st);
    swarm s = {.cfg = cfg, .st = st, .ep = -1, .rounds_on = true};
    rm_err jerr = {0};
    if (!sw_job_init(&s.job, cfg->url, cfg->job, cfg->token, &jerr)) {
        if (err)
            *err = jerr;
        return jerr.code;
    }
    if (cfg->count < 1 || cfg->count > RM_SWARM_MAX_COUNT)
        return rm_err_field(err, RM_EINVAL, "count", "%d must be 1..%d", cfg->count, RM_SWARM_MAX_COUNT);
    if (cfg->id_base < 0 || cfg->id_base > 1000000)
        return rm_err_field(err, RM_EINVAL, "id-base", "%d must be 0..1000000", cfg->id_base);
    if (!(cfg->step_s > 0) || !(cfg->report_s > 0) || !(cfg->timeout_s > 0) || !(cfg->detect_s >= 0) ||
        !(cfg->fault_at_s >= 0) || !(cfg->slow_join_s >= 0))
        return rm_err_field(err, RM_EINVAL, "step/report/timeout",
                            "times must be > 0 (detect, fault-at, slow-join >= 0)");
    if (cfg->kill < 0 || cfg->hang < 0 || cfg->slow < 0 || cfg->kill + cfg->hang >= cfg->count ||
        cfg->slow > cfg->count)
        return rm_err_field(err, RM_EINVAL, "kill/hang/slow",
                            "must be >= 0, kill+hang below count (%d), slow at most count", cfg->count);
    if (cfg->rounds < 0 || cfg->rounds > RM_SWARM_MAX_EPOCHS)
        return rm_err_field(err, RM_EINVAL, "rounds", "%d must be 0..%d", cfg->rounds, RM_SWARM_MAX_EPOCHS);
    /* one socket per worker, plus the epoll set and a few for stdio and logs */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return rm_errf(err, RM_EIO, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
    rlim_t need = (rlim_t)cfg->count + 32;
    if (rl.rlim_max != RLIM_INFINITY && need > rl.rlim_max)
        return rm_err_field(err, RM_EINVAL, "count",
                            "%d workers need %llu open files, more than this process's hard limit "
                            "(RLIMIT_NOFILE) of %llu: run several swarms with --id-base",
                            cfg->count, (unsigned long long)need, (unsigned long long)rl.rlim_max);
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            return rm_errf(err, RM_EIO, "setrlimit(RLIMIT_NOFILE, %llu): %s", (unsigned long long)rl.rlim_max,
                           strerror(errno));
    }
    int rc = RM_OK;
    s.w = calloc((size_t)cfg->count, sizeof *s.w);
    s.heap = calloc((size_t)cfg->count, sizeof *s.heap);
    s.ep = epoll_create1(EPOLL_CLOEXEC);
    if (!s.w || !s.heap || s.ep < 0) {
        rc = rm_errf(err, RM_ENOMEM, "swarm of %d: out of memory or epoll", cfg->count);
        goto out;
    }
    double cpu0 = cpu_now();
    s.t0 = rm_mono();
    for (int i = 0; i < cfg->count; i++) {
        int n = cfg->id_base + i;
        s.w[i].fd = -1;
        s.w[i].heap = -1;
        s.w[i].job = &s.job;
        s.w[i].wid = n;
        s.w[i].addr =
            (127u << 24) | (100u << 16) | ((unsigned)(n / 250 % 256) << 8) | (unsigned)(1 + n % 250);
    }
    /* first joins: the slow ones late, the rest at once (spread over the first 10 ms) */
    for (int i = 0; i < cfg->count; i++) {
        bool slow = cfg->slow > 0 &&
                    (long long)i * cfg->slow / cfg->count != (long long)(i + 1) * cfg->slow / cfg->count;
        sw_timer_set(&s, i, T_JOIN, s.t0 + (slow ? cfg->slow_join_s : 0.01 * i / cfg->count));
    }
    struct epoll_event evs[256];
    double deadline = s.t0 + cfg->timeout_s, fault_at = 0;
    for (;;) {
        double now = rm_mono();
        if ((cfg->cancel && *cfg->cancel) || now >= deadline ||
            (cfg->rounds > 0 && st->nrounds >= cfg->rounds))
            break;
        if (s.first_trained && !s.faulted && cfg->kill + cfg->hang > 0) {
            if (fault_at == 0)
                fault_at = now + cfg->fault_at_s;
            if (now >= fault_at)
                faults(&s);
        }
        sw_fire_timers(&s, now);
        double next = deadline;
        if (s.nheap > 0 && s.w[s.heap[0]].due < next)
            next = s.w[s.heap[0]].due;
        if (fault_at > 0 && !s.faulted && fault_at < next)
            next = fault_at;
        int ms = (int)((next - rm_mono()) * 1000.0) + 1;
        if (ms < 0)
            ms = 0;
        if (ms > 100)
            ms = 100;
        int n = epoll_wait(s.ep, evs, (int)RM_ARRAY_LEN(evs), ms);
        if (n < 0 && errno != EINTR) {
            rc = rm_errf(err, RM_EIO, "epoll_wait: %s", strerror(errno));
            goto out;
        }
        for (int i = 0; i < n; i++) {
            int id = (int)evs[i].data.u32;
            if (id >= 0 && id < cfg->count && s.w[id].state == W_LIVE)
                sw_drive(&s, id);
        }
    }
    st->wall_s = rm_mono() - s.t0;
    st->cpu_s = cpu_now() - cpu0;
    if (st->errors > 0)
        rc = rm_errf(err, RM_EPROTO, "swarm: %ld errors, the first: %s", st->errors, st->first_error);
    else if (cfg->rounds > 0 && st->nrounds < cfg->rounds)
        rc = rm_errf(err, RM_ETIMEDOUT, "swarm: %d of %d rounds formed and trained in %.1f s", st->nrounds,
                     cfg->rounds, cfg->timeout_s);
out:
    for (int i = 0; s.w && i < cfg->count; i++) {
        if (s.w[i].fd >= 0)
            close(s.w[i].fd);
        free(s.w[i].out);
        free(s.w[i].in);
    }
    for (int e = 0; e <= RM_SWARM_MAX_EPOCHS; e++)
        free(s.rounds[e].ranks);
    if (s.ep >= 0)
        close(s.ep);
    free(s.w);
    free(s.heap);
    return rc;
}
