/* swarm_kubelet.c — the swarm as a kubelet runtime (`ringmaster-worker swarm --kubelet`): kubesim
 * (`--runtime swarm`) hands each started worker pod to this one process as a line on its stdin
 * (common/podline.h), and it plays that pod's worker through the real rendezvous protocol until
 * the job's steps are done, the rendezvous says stop, or kubesim stops or kills it; each end goes
 * back to kubesim as an `exit KEY code=N` line on stdout. So the operator can be driven at the size
 * of a large fleet with real rendezvous traffic and no process per pod (docs/scale.md, "The swarm
 * as a kubelet runtime").
 *
 * Design: the engine of the fixed swarm (swarm.c, through swarm_internal.h) with workers that come
 * and go: a slot array sized once (--max, under the open-file limit) with a free list, a hash from
 * pod key to slot, and one sw_job per (url, job, token) shared by its workers and freed with the
 * last of them. stdin and stdout are non-blocking and sit in the same epoll set as the workers'
 * connections, so neither side of the pipe pair can block the other: lines to kubesim wait in a
 * capped buffer. A slot that ended goes back to the free list only after the current loop turn, so
 * a late event for its old connection never reaches the worker that reuses it. */
#include "worker/swarm/swarm.h"
#include "worker/swarm/swarm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/podline.h"

#define IN_ID UINT32_MAX /* the epoll tag of stdin; workers are tagged with their slot */
#define OUT_ID (UINT32_MAX - 1)
#define JOB_BUCKETS 4096

typedef struct kjob {
    sw_job j;
    char url[RM_PODLINE_URL_MAX], name[RM_PODLINE_JOB_MAX], token[RM_PODLINE_TOKEN_MAX];
    int refs; /* slots that point at it */
    struct kjob *next;
} kjob;

typedef struct kslot {
    char key[RM_PODLINE_KEY_MAX]; /* "" = free */
    kjob *job;
    int next_key;  /* the key hash's chain */
    int next_free; /* the free list (or the list of slots ended this turn) */
} kslot;

typedef struct kmode {
    swarm s;
    rm_swarm_cfg cfg; /* the engine's view: count = slots, step, report, kv */
    rm_swarm_stats st;
    const rm_swarm_kubelet_cfg *kc;
    kslot *slot;
    int *kbucket;
    unsigned kmask;
    int free_head, ended_head;
    kjob *jbucket[JOB_BUCKETS];
    int out_fd;
    rm_podline_out out; /* exit lines waiting for kubesim to read them */
    long started, exited, refused;
} kmode;

static uint32_t fnv(const char *s, uint32_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* ---------------- output to kubesim ---------------- */

static void out_flush(kmode *m)
{
    rm_err err = {0};
    if (rm_podline_flush(&m->out, m->out_fd, &err) != RM_OK)
        rm_warn("swarm --kubelet: writing to kubesim failed err=\"%s\"", err.msg);
}

static void emit_exit(kmode *m, const char *key, int code)
{
    rm_podline l = {.verb = RM_PODLINE_EXIT, .code = code};
    snprintf(l.key, sizeof l.key, "%s", key);
    int rc = rm_podline_queue(&m->out, &l);
    if (rc != RM_OK)
        rm_warn("swarm --kubelet: exit line not sent, kubesim reads no lines key=%s code=%d err=\"%s\"", key,
                code, rm_strerror(rc));
}

/* ---------------- slots and jobs ---------------- */

static int key_find(const kmode *m, const char *key)
{
    for (int i = m->kbucket[fnv(key, 2166136261u) & m->kmask]; i >= 0; i = m->slot[i].next_key)
        if (!strcmp(m->slot[i].key, key))
            return i;
    return -1;
}

static void key_del(kmode *m, int id)
{
    int *pp = &m->kbucket[fnv(m->slot[id].key, 2166136261u) & m->kmask];
    while (*pp >= 0 && *pp != id)
        pp = &m->slot[*pp].next_key;
    if (*pp == id)
        *pp = m->slot[id].next_key;
    m->slot[id].next_key = -1;
}

static uint32_t job_hash(const char *url, const char *job, const char *token)
{
    return fnv(token, fnv(job, fnv(url, 2166136261u))) % JOB_BUCKETS;
}

/* The job record for (url, job, token), made on first use. NULL with err (bad url/job/token, or
 * out of memory). */
static kjob *job_get(kmode *m, const rm_podline *l, rm_err *err)
{
    uint32_t h = job_hash(l->url, l->job, l->token);
    for (kjob *j = m->jbucket[h]; j; j = j->next)
        if (!strcmp(j->url, l->url) && !strcmp(j->name, l->job) && !strcmp(j->token, l->token))
            return j;
    kjob *j = calloc(1, sizeof *j);
    if (!j) {
        rm_errf(err, RM_ENOMEM, "out of memory");
        return NULL;
    }
    if (!sw_job_init(&j->j, l->url, l->job, l->token, err)) {
        free(j);
        return NULL;
    }
    snprintf(j->url, sizeof j->url, "%s", l->url);
    snprintf(j->name, sizeof j->name, "%s", l->job);
    snprintf(j->token, sizeof j->token, "%s", l->token);
    j->next = m->jbucket[h];
    m->jbucket[h] = j;
    return j;
}

static void job_put(kmode *m, kjob *j)
{
    if (!j || --j->refs > 0)
        return;
    kjob **pp = &m->jbucket[job_hash(j->url, j->name, j->token)];
    while (*pp && *pp != j)
        pp = &(*pp)->next;
    if (*pp)
        *pp = j->next;
    free(j);
}

/* Slot id's worker ends with code: its connection and timer go, kubesim is told, and the slot is
 * freed after this loop turn. Safe from inside the engine (the on_end hook). */
static void end_slot(kmode *m, int id, int code)
{
    kslot *k = &m->slot[id];
    sw_worker *w = &m->s.w[id];
    if (!k->key[0] || w->state == W_FREE)
        return;
    sw_timer_cancel(&m->s, id);
    sw_conn_close(&m->s, w);
    w->op = OP_NONE;
    w->state = W_FREE;
    emit_exit(m, k->key, code);
    m->exited++;
    key_del(m, id);
    k->key[0] = 0;
    k->next_free = m->ended_head;
    m->ended_head = id;
}

static void on_end(swarm *s, int id, int code)
{
    end_slot(s->ud, id, code);
}

/* Slots ended this turn go back to the free list. */
static void recycle(kmode *m)
{
    while (m->ended_head >= 0) {
        int id = m->ended_head;
        kslot *k = &m->slot[id];
        m->ended_head = k->next_free;
        job_put(m, k->job);
        k->job = NULL;
        sw_worker *w = &m->s.w[id];
        if (w->in_cap > 65536) { /* a big peer list is not kept */
            free(w->in);
            w->in = NULL;
            w->in_cap = 0;
        }
        k->next_free = m->free_head;
        m->free_head = id;
    }
}

static void start(kmode *m, const rm_podline *l)
{
    if (key_find(m, l->key) >= 0) {
        rm_warn("swarm --kubelet: start ignored, already running key=%s", l->key);
        return;
    }
    rm_err err = {0};
    kjob *j = job_get(m, l, &err);
    if (!j) {
        rm_warn("swarm --kubelet: start refused key=%s err=\"%s\"", l->key, err.msg);
        m->refused++;
        emit_exit(m, l->key, 2); /* bad usage, as the worker would exit */
        return;
    }
    int id = m->free_head;
    if (id < 0) {
        rm_warn("swarm --kubelet: start refused, every worker slot in use key=%s max=%d", l->key,
                m->cfg.count);
        m->refused++;
        if (j->refs == 0) {
            j->refs = 1;
            job_put(m, j);
        }
        emit_exit(m, l->key, 1);
        return;
    }
    kslot *k = &m->slot[id];
    m->free_head = k->next_free;
    snprintf(k->key, sizeof k->key, "%s", l->key);
    k->job = j;
    j->refs++;
    uint32_t h = fnv(k->key, 2166136261u) & m->kmask;
    k->next_key = m->kbucket[h];
    m->kbucket[h] = id;
    sw_worker *w = &m->s.w[id];
    char *out = w->out, *in = w->in;
    size_t in_cap = w->in_cap;
    memset(w, 0, sizeof *w);
    w->out = out;
    w->in = in;
    w->in_cap = in_cap;
    w->fd = -1;
    w->heap = -1;
    w->state = W_LIVE;
    w->job = &j->j;
    w->wid = l->id;
    w->steps = l->steps > 0 ? l->steps : m->kc->steps;
    unsigned a, b, c, d;
    if (l->ip[0] && sscanf(l->ip, "%u.%u.%u.%u", &a, &b, &c, &d) == 4)
        w->addr = (a << 24) | (b << 16) | (c << 8) | d;
    else /* no pod address: one of the swarm's own, per slot */
        w->addr = (127u << 24) | (100u << 16) | ((unsigned)(id / 250 % 256) << 8) | (unsigned)(1 + id % 250);
    m->started++;
    sw_timer_set(&m->s, id, T_JOIN, rm_mono());
}

static void on_line(kmode *m, const char *line)
{
    rm_podline l;
    rm_err err = {0};
    if (rm_podline_parse(line, strlen(line), &l, &err) != RM_OK) {
        rm_warn("swarm --kubelet: bad line err=\"%s\" line=\"%.200s\"", err.msg, line);
        if (l.verb == RM_PODLINE_START && l.key[0] && key_find(m, l.key) < 0) {
            m->refused++;
            emit_exit(m, l.key, 2); /* its pod fails instead of waiting forever */
        }
        return;
    }
    int id = l.verb == RM_PODLINE_START ? -1 : key_find(m, l.key);
    switch (l.verb) {
    case RM_PODLINE_START:
        start(m, &l);
        return;
    case RM_PODLINE_EXIT:
        rm_warn("swarm --kubelet: an exit line is the swarm's answer, not a command key=%s", l.key);
        return;
    default:
        break;
    }
    if (id < 0) /* ended already: kubesim learns it from the exit line on its way */
        return;
    sw_worker *w = &m->s.w[id];
    switch (l.verb) {
    case RM_PODLINE_STOP:
        end_slot(m, id, 0); /* the worker's SIGTERM path exits 0 */
        break;
    case RM_PODLINE_KILL:
        rm_info("swarm --kubelet: killing worker key=%s worker=%d code=%d", l.key, w->wid, l.code);
        end_slot(m, id, l.code);
        break;
    case RM_PODLINE_HANG:
        rm_info("swarm --kubelet: hanging worker key=%s worker=%d", l.key, w->wid);
        sw_timer_cancel(&m->s, id);
        w->op = OP_NONE;
        w->state = W_HUNG; /* silent; its connection stays open until stop or kill */
        break;
    default:
        break;
    }
}

/* Read what stdin has; false at its end (kubesim is gone). */
static bool read_input(kmode *m, int in_fd, rm_podline_in *in)
{
    char line[RM_PODLINE_MAX];
    for (;;) {
        size_t room;
        char *p = rm_podline_space(in, &room);
        ssize_t n = read(in_fd, p, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (n <= 0)
            return false;
        rm_podline_fed(in, (size_t)n);
        rm_err err = {0};
        int rc;
        while ((rc = rm_podline_take(in, line, &err)) != 0) {
            if (rc == 1)
                on_line(m, line);
            else
                rm_warn("swarm --kubelet: line dropped err=\"%s\"", err.msg);
            memset(&err, 0, sizeof err);
        }
    }
}

void rm_swarm_kubelet_cfg_default(rm_swarm_kubelet_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->step_s = 0.05;
    c->report_s = 1.0;
    c->kv = true;
    c->steps = 100;
    c->max = RM_SWARM_MAX_COUNT;
}

int rm_swarm_kubelet_run(const rm_swarm_kubelet_cfg *kc, int in_fd, int out_fd, rm_swarm_kubelet_stats *out,
                         rm_err *err)
{
    if (!(kc->step_s > 0) || !(kc->report_s > 0))
        return rm_err_field(err, RM_EINVAL, "step/report", "times must be > 0");
    if (kc->steps < 1 || kc->steps > RM_PODLINE_STEPS_MAX)
        return rm_err_field(err, RM_EINVAL, "steps", "%lld must be 1..%lld", kc->steps, RM_PODLINE_STEPS_MAX);
    if (kc->max < 1 || kc->max > RM_SWARM_MAX_COUNT)
        return rm_err_field(err, RM_EINVAL, "max", "%d must be 1..%d", kc->max, RM_SWARM_MAX_COUNT);
    kmode *m = calloc(1, sizeof *m);
    if (!m)
        return rm_errf(err, RM_ENOMEM, "swarm --kubelet: out of memory");
    int cap = kc->max;
    struct rlimit rl; /* one socket per worker, plus the epoll set, stdio and logs */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            (rlim_t)cap + 64 > rl.rlim_cur) {
            cap = rl.rlim_cur > 128 ? (int)(rl.rlim_cur - 64) : 64;
            rm_info("swarm --kubelet: workers capped by the open-file limit max=%d nofile=%llu", cap,
                    (unsigned long long)rl.rlim_cur);
        }
    }
    m->kc = kc;
    m->out_fd = out_fd;
    m->cfg.count = cap;
    m->cfg.step_s = kc->step_s;
    m->cfg.report_s = kc->report_s;
    m->cfg.kv = kc->kv;
    m->s = (swarm){.cfg = &m->cfg, .st = &m->st, .ep = -1, .log_errors = true, .on_end = on_end, .ud = m};
    unsigned nb = 1;
    while (nb < (unsigned)cap * 2)
        nb *= 2;
    m->kmask = nb - 1;
    m->slot = calloc((size_t)cap, sizeof *m->slot);
    m->kbucket = malloc(nb * sizeof *m->kbucket);
    m->s.w = calloc((size_t)cap, sizeof *m->s.w);
    m->s.heap = calloc((size_t)cap, sizeof *m->s.heap);
    m->s.ep = epoll_create1(EPOLL_CLOEXEC);
    int rc = RM_OK;
    if (!m->slot || !m->kbucket || !m->s.w || !m->s.heap || m->s.ep < 0) {
        rc = rm_errf(err, RM_ENOMEM, "swarm --kubelet of %d workers: out of memory or epoll", cap);
        goto out;
    }
    for (unsigned i = 0; i < nb; i++)
        m->kbucket[i] = -1;
    m->ended_head = -1;
    m->free_head = -1;
    for (int i = cap - 1; i >= 0; i--) {
        m->s.w[i].fd = -1;
        m->s.w[i].heap = -1;
        m->s.w[i].state = W_FREE;
        m->slot[i].next_key = -1;
        m->slot[i].next_free = m->free_head;
        m->free_head = i;
    }
    fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
    fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ie = {.events = EPOLLIN, .data.u32 = IN_ID};
    bool in_polled = epoll_ctl(m->s.ep, EPOLL_CTL_ADD, in_fd, &ie) == 0; /* a regular file is not */
    struct epoll_event oe = {.events = EPOLLOUT | EPOLLET, .data.u32 = OUT_ID};
    epoll_ctl(m->s.ep, EPOLL_CTL_ADD, out_fd, &oe);
    rm_podline_in *in = calloc(1, sizeof *in);
    if (!in) {
        rc = rm_errf(err, RM_ENOMEM, "swarm --kubelet: out of memory");
        goto out;
    }
    rm_info("swarm --kubelet: ready max=%d step_s=%g report_s=%g steps=%lld kv=%d", cap, kc->step_s,
            kc->report_s, kc->steps, kc->kv);
    bool open_in = in_polled ? true : read_input(m, in_fd, in);
    struct epoll_event evs[256];
    while (open_in && !(kc->cancel && *kc->cancel)) {
        sw_fire_timers(&m->s, rm_mono());
        recycle(m);
        out_flush(m);
        int ms = 100;
        if (m->s.nheap > 0) {
            double dt = m->s.w[m->s.heap[0]].due - rm_mono();
            ms = dt <= 0 ? 0 : dt * 1000.0 + 1 < 100 ? (int)(dt * 1000.0) + 1 : 100;
        }
        int n = epoll_wait(m->s.ep, evs, (int)RM_ARRAY_LEN(evs), ms);
        if (n < 0 && errno != EINTR) {
            rc = rm_errf(err, RM_EIO, "epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            uint32_t id = evs[i].data.u32;
            if (id == IN_ID)
                open_in = read_input(m, in_fd, in) && open_in;
            else if (id < (uint32_t)cap && m->s.w[id].state == W_LIVE)
                sw_drive(&m->s, (int)id);
        }
        if (!in_polled)
            open_in = read_input(m, in_fd, in) && open_in;
        recycle(m);
    }
    out_flush(m);
    free(in);
    rm_info("swarm --kubelet: done started=%ld exited=%ld refused=%ld requests=%ld reconnects=%ld errors=%ld",
            m->started, m->exited, m->refused, m->st.requests, m->st.reconnects, m->st.errors);
out:
    if (out) {
        *out = (rm_swarm_kubelet_stats){.started = m->started,
                                        .exited = m->exited,
                                        .refused = m->refused,
                                        .requests = m->st.requests,
                                        .errors = m->st.errors};
    }
    for (int i = 0; m->s.w && i < cap; i++) {
        if (m->s.w[i].fd >= 0)
            close(m->s.w[i].fd);
        free(m->s.w[i].out);
        free(m->s.w[i].in);
    }
    for (int h = 0; h < JOB_BUCKETS; h++)
        while (m->jbucket[h]) {
            kjob *j = m->jbucket[h];
            m->jbucket[h] = j->next;
            free(j);
        }
    if (m->s.ep >= 0)
        close(m->s.ep);
    free(m->s.w);
    free(m->s.heap);
    free(m->slot);
    free(m->kbucket);
    rm_podline_out_free(&m->out);
    free(m);
    return rc;
}

/* ---------------- the command line ---------------- */

static volatile sig_atomic_t g_kstop;

static void on_kstop(int sig)
{
    (void)sig;
    g_kstop = 1;
}

int rm_swarm_kubelet_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"kubelet", no_argument, 0, 'k'},      {"step", required_argument, 0, 's'},
        {"report", required_argument, 0, 'r'}, {"steps", required_argument, 0, 'n'},
        {"no-kv", no_argument, 0, 'K'},        {"max", required_argument, 0, 'm'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    rm_swarm_kubelet_cfg c;
    rm_swarm_kubelet_cfg_default(&c);
    optind = 1;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        switch (o) {
        case 'k':
            continue;
        case 'K':
            c.kv = false;
            continue;
        case 's':
            c.step_s = strtod(optarg, &end);
            break;
        case 'r':
            c.report_s = strtod(optarg, &end);
            break;
        case 'n':
            c.steps = strtoll(optarg, &end, 10);
            break;
        case 'm':
            c.max = (int)strtol(optarg, &end, 10);
            break;
        case 'h':
            printf(
                "usage: ringmaster-worker swarm --kubelet [--step S] [--report S] [--steps N] [--no-kv] "
                "[--max N]\n"
                "  kubesim's swarm runtime (kubesim --runtime swarm): reads start/stop/kill/hang lines on\n"
                "  stdin, plays each pod's worker through the rendezvous, writes exit lines on stdout\n"
                "  (common/podline.h; docs/scale.md). --steps: a job's steps when its start line has none\n"
                "  (default 100); --step: seconds per step (0.05); --report: report period (1);\n"
                "  --max: workers at once (%d). Ends at stdin's end or SIGTERM.\n",
                RM_SWARM_MAX_COUNT);
            return 0;
        default:
            return 2;
        }
        if (errno || !end || end == optarg || *end) {
            fprintf(stderr, "ringmaster-worker swarm --kubelet: \"%s\" is not a number\n", optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ringmaster-worker swarm --kubelet: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    signal(SIGTERM, on_kstop);
    signal(SIGINT, on_kstop);
    signal(SIGPIPE, SIG_IGN);
    c.cancel = &g_kstop;
    rm_err err = {0};
    int rc = rm_swarm_kubelet_run(&c, 0, 1, NULL, &err);
    if (rc != RM_OK)
        fprintf(stderr, "ringmaster-worker swarm --kubelet: %s\n", err.msg);
    return rc == RM_OK ? 0 : rc == RM_EINVAL ? 2 : 1;
}
