/* local.c — the local runtime: worker processes + in-process rendezvous + the reconcile core
 * (see local.h for the design).
 *
 * Design choices:
 *  - One slot per replica index. A slot is Running (process alive), Terminating (we sent SIGTERM;
 *    SIGKILL at kill_at), or Exited (reaped, exit status kept so the core can see the failure).
 *    A DELETE of an Exited slot frees it (the index becomes Missing and the core creates the
 *    replacement in the next pass, which runs at once — a failed worker is replaced in the same
 *    tick it is seen).
 *  - The loop sleeps in poll() on the caller's self-pipe, which SIGCHLD/SIGINT/SIGTERM write, so a
 *    worker death is acted on within milliseconds, not a tick later.
 *  - Between fork and exec the child only calls async-signal-safe functions; argv/envp are built
 *    before fork. */
#include "operator/local.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "common/health.h"
#include "common/http.h"
#include "common/httpc.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/metrics.h"
#include "common/rdzv.h"
#include "operator/apply.h"
#include "operator/launch.h"
#include "operator/ps_ckpt.h"
#include "operator/ps_reconcile.h"
#include "operator/reconcile.h"
#include "operator/shm_sweep.h"
#include "common/faults.h"
#include "common/worker_env.h"

extern char **environ;

#define MAXW 256 /* local runs: plenty */
#define PROBE_EVERY_S 1.0
#define PROBE_TIMEOUT_MS 300
#define ACC_EVERY_S 2.0
#define SETTLE_S \
    5.0                   /* elastic: close a short round only after 5 s without joins, so slow
                                  * starters on a loaded machine do not force an extra resize */
#define FINISH_WAIT_S 5.0 /* after the job ended: let workers exit on their own first */
#define MAX_PASSES 4

typedef struct wslot {
    bool used;
    pid_t pid;
    int epoch_label, incarnation;
    double created_at, finished_at, deletion_started_at, kill_at;
    bool exited, deleting, killed;
    int exit_code;
    char reason[32];
    char message[256]; /* its termination message (RM_ENV_TERMINATION_LOG) when it failed */
    bool ready;
    bool up; /* its metrics server answered once: listed for service discovery */
    double last_probe;
    int metrics_port;
} wslot;

typedef struct local {
    rm_tj *job;
    const rm_local_opts *o;
    FILE *human;
    char jobkey[300];
    char token[65];
    char worker_bin[PATH_MAX];
    char hostname[256];
    bool bench;
    rm_rdzv *rdzv;
    rm_http_server *rdzv_srv;
    int rdzv_port;
    int rdzv_desired, rdzv_min;
    rm_metrics *reg;
    rm_http_server *msrv;
    rm_http_blob *sd;
    rm_health *health;
    int mport;
    rm_series *m_created, *m_succeeded, *m_failed, *m_restarted, *m_restarts, *m_recovery, *m_ready,
        *m_desired, *m_epoch, *m_step;
    wslot w[MAXW];
    int create_failures[MAXW];
    int incarnations[MAXW];
    rm_reconcile_opts ropts;
    rm_action *acts;
    size_t cap;
    rm_httpc *probe;
    double test_acc, last_acc;
    bool recov_pending;
    double recov_t0;
    int recov_epoch;
    char sd_last[8192];
    double started;
    rm_local_result *res;
    rm_rdzv_state snap;
    rm_shm_sweep shm; /* segments of formations that died in shm setup (operator/shm_sweep.h) */
    /* parameter servers (spec.strategy parameterServer; the rules: operator/ps_reconcile.h) */
    struct {
        pid_t pid; /* 0: none */
        bool exited;
        bool hung; /* killed for its /healthz (rm_health_server_deadline): replaced as hung */
        int port, mport, incarnation;
        double last_alive, last_probe; /* wall: /healthz answered 200; asked */
    } ps[RM_PS_MAX_SERVERS];
    char ps_addrs[RM_PS_MAX_SERVERS * 24];
} local;

static void say(local *l, const char *fmt, ...) RM_PRINTF(2, 3);
static void say(local *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(l->human, fmt, ap);
    va_end(ap);
    fflush(l->human);
}

/* ------------------------------------------------------------------ helpers */

int rm_local_worker_bin(char *buf, size_t cap, rm_err *err)
{
    const char *env = getenv("RINGMASTER_WORKER_BIN");
    if (env && *env) {
        snprintf(buf, cap, "%s", env);
    } else {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return rm_errf(err, RM_ENOTFOUND, "cannot read /proc/self/exe: %s", strerror(errno));
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = 0;
        snprintf(buf, cap, "%s/ringmaster-worker", self);
    }
    if (access(buf, X_OK) != 0)
        return rm_errf(err, RM_ENOTFOUND,
                       "worker binary %s: %s (build it with `make`, or set "
                       "RINGMASTER_WORKER_BIN)",
                       buf, strerror(errno));
    return RM_OK;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void random_token(char out[65])
{
    unsigned char b[32];
    size_t got = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, b, sizeof b);
        got = n > 0 ? (size_t)n : 0;
        close(fd);
    }
    for (size_t i = got; i < sizeof b; i++) /* fallback: never an empty token */
        b[i] = (unsigned char)(rand() ^ (int)getpid() ^ (int)(rm_wall() * 1e6));
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Write path atomically (tmp + rename). */
static void write_file_atomic(const char *path, const char *data, size_t len)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t n = write(fd, data, len);
    close(fd);
    if (n == (ssize_t)len)
        rename(tmp, path);
    else
        unlink(tmp);
}

/* ------------------------------------------------------------------ metrics + service discovery */

static int metrics_setup(local *l, rm_err *err)
{
    int rc;
    static const char *const ns_l[] = {"namespace", NULL};
    static const char *const job_l[] = {"namespace", "name", NULL};
    static const double rec_b[] = {0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60};
    rm_metric *f;
    const char *ns = l->job->namespace_ ? l->job->namespace_ : "default";
    const char *nm = l->job->name;
    l->reg = rm_metrics_new();
    if (!l->reg)
        return rm_errf(err, RM_ENOMEM, "metrics registry");
#define FAM(kind, name, help, labels, ...) \
    RM_CHECK_GOTO(rm_metrics_##kind(l->reg, name, help, labels, ##__VA_ARGS__, &f, err), rc, out)
    FAM(counter, "ringmaster_jobs_created_total", "TrainingJobs created.", ns_l);
    l->m_created = rm_metric_with1(f, ns);
    FAM(counter, "ringmaster_jobs_successful_total", "TrainingJobs that succeeded.", ns_l);
    l->m_succeeded = rm_metric_with1(f, ns);
    FAM(counter, "ringmaster_jobs_failed_total", "TrainingJobs that failed.", ns_l);
    l->m_failed = rm_metric_with1(f, ns);
    FAM(counter, "ringmaster_jobs_restarted_total", "Group restarts of TrainingJobs.", ns_l);
    l->m_restarted = rm_metric_with1(f, ns);
    FAM(gauge, "ringmaster_restarts", "Group restarts of this TrainingJob (status.restarts).", job_l);
    l->m_restarts = rm_metric_with2(f, ns, nm);
    FAM(histogram, "ringmaster_recovery_seconds",
        "From failure detection to the group training again (next closed rendezvous round and "
        "its first report).",
        job_l, rec_b, RM_ARRAY_LEN(rec_b));
    l->m_recovery = rm_metric_with2(f, ns, nm);
    FAM(gauge, "ringmaster_workers_ready", "Workers running and passing /healthz.", job_l);
    l->m_ready = rm_metric_with2(f, ns, nm);
    FAM(gauge, "ringmaster_workers_desired", "Workers the job wants (spec.replicas).", job_l);
    l->m_desired = rm_metric_with2(f, ns, nm);
    FAM(gauge, "ringmaster_job_epoch", "Rendezvous epoch (status.epoch).", job_l);
    l->m_epoch = rm_metric_with2(f, ns, nm);
    FAM(gauge, "ringmaster_job_step", "Global step reported by rank 0.", job_l);
    l->m_step = rm_metric_with2(f, ns, nm);
#undef FAM
    if (!l->m_created || !l->m_succeeded || !l->m_failed || !l->m_restarted || !l->m_restarts ||
        !l->m_recovery || !l->m_ready || !l->m_desired || !l->m_epoch || !l->m_step)
        return rm_errf(err, RM_ENOMEM, "metrics series");
    l->sd = rm_http_blob_new("application/json");
    l->health = rm_health_new(0);
    if (!l->sd || !l->health)
        return rm_errf(err, RM_ENOMEM, "metrics server");
    rm_http_blob_set(l->sd, "[]", 2);
    rm_http_route routes[] = {
        {"GET", "/metrics", 0, rm_metrics_handler, l->reg},
        {"GET", "/sd", 0, rm_http_blob_handler, l->sd},
        {"GET", "/healthz", 0, rm_health_healthz, l->health},
        {"GET", "/readyz", 0, rm_health_readyz, l->health},
    };
    rm_health_set_ready(l->health, true, NULL);
    rm_http_opts ho = {.bind = l->o->metrics_addr ? l->o->metrics_addr : "127.0.0.1:0"};
    RM_CHECK_GOTO(rm_http_start(&ho, routes, RM_ARRAY_LEN(routes), &l->msrv, err), rc, out);
    l->mport = rm_http_port(l->msrv);
    rc = RM_OK;
out:
    return rc;
}

/* Prometheus http_sd / file_sd: one target group per worker plus the controller itself. */
static void sd_update(local *l)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr)
        return;
    const char *ns = l->job->namespace_ ? l->job->namespace_ : "default";
    char buf[96];
    for (int i = -1; i < MAXW; i++) {
        int port;
        if (i < 0) {
            port = l->mport;
        } else {
            if (!l->w[i].used || l->w[i].exited || !l->w[i].up || l->w[i].metrics_port <= 0)
                continue;
            port = l->w[i].metrics_port;
        }
        cJSON *g = cJSON_CreateObject();
        cJSON *t = cJSON_AddArrayToObject(g, "targets");
        snprintf(buf, sizeof buf, "127.0.0.1:%d", port);
        cJSON_AddItemToArray(t, cJSON_CreateString(buf));
        cJSON *lb = cJSON_AddObjectToObject(g, "labels");
        cJSON_AddStringToObject(lb, "job_name", l->job->name);
        cJSON_AddStringToObject(lb, "namespace", ns);
        cJSON_AddStringToObject(lb, "component", i < 0 ? "controller" : "worker");
        if (i >= 0) {
            snprintf(buf, sizeof buf, "%d", i);
            cJSON_AddStringToObject(lb, "rank", buf);
        }
        cJSON_AddItemToArray(arr, g);
    }
    char *s = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    if (!s)
        return;
    if (strcmp(s, l->sd_last) != 0) {
        snprintf(l->sd_last, sizeof l->sd_last, "%s", s);
        rm_http_blob_set(l->sd, s, strlen(s));
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/file_sd.json", l->o->run_dir);
        write_file_atomic(path, s, strlen(s));
    }
    free(s);
}

/* ------------------------------------------------------------------ processes */

/* A NULL-terminated argv/envp built before fork. It grows with what it is given (the runner's
 * whole environment is passed on, however large); a failed allocation sets oom and the spawn is
 * refused rather than exec'd with an argument or variable missing. */
typedef struct strv {
    char **v;
    int n, cap;
    bool oom;
} strv;

static void strv_add(strv *s, const char *fmt, ...) RM_PRINTF(2, 3);
static void strv_add(strv *s, const char *fmt, ...)
{
    if (s->oom)
        return;
    if (s->n + 2 > s->cap) {
        int nc = s->cap ? s->cap * 2 : 64;
        char **nv = realloc(s->v, (size_t)nc * sizeof *nv);
        if (!nv) {
            s->oom = true;
            return;
        }
        s->v = nv;
        s->cap = nc;
    }
    va_list ap;
    va_start(ap, fmt);
    char *p = NULL;
    if (vasprintf(&p, fmt, ap) < 0)
        p = NULL;
    va_end(ap);
    if (!p) {
        s->oom = true;
        return;
    }
    s->v[s->n++] = p;
    s->v[s->n] = NULL;
}

static void strv_free(strv *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* Does the environment entry "NAME=value" name a variable of the launch contract? */
static bool env_is_ours(const char *kv)
{
    const char *eq = strchr(kv, '=');
    char name[64];
    if (!eq || (size_t)(eq - kv) >= sizeof name)
        return false;
    memcpy(name, kv, (size_t)(eq - kv));
    name[eq - kv] = 0;
    return rm_launch_is_ours(name);
}

int rm_local_node_name(const char *host, const char *nodes, int index, int replicas, char *buf, size_t cap,
                       rm_err *err)
{
    if (!host || !*host)
        host = "localhost";
    if (!nodes || !*nodes || index < 0) {
        rm_sfmt(buf, cap, "%s", host);
        return RM_OK;
    }
    char *end = NULL;
    long n = strtol(nodes, &end, 10);
    if (*end || n < 1 || n > replicas || replicas < 1)
        return rm_err_field(err, RM_EINVAL, RM_ENV_RUN_NODES,
                            "must be a whole number of fake nodes "
                            "from 1 to spec.replicas (%d), got \"%.32s\"",
                            replicas, nodes);
    rm_sfmt(buf, cap, "%s-n%ld", host, (long)index * n / replicas);
    return RM_OK;
}

int rm_local_launch(const rm_tj *job, int index, int epoch, const rm_local_where *w, rm_launch *out,
                    rm_err *err)
{
    char url[64];
    rm_sfmt(url, sizeof url, "http://127.0.0.1:%d", w->rdzv_port);
    rm_launch_placement p = {
        .rdzv_url = url,
        .token = w->token,
        .bind_addr = "127.0.0.1",
        .node_name = w->node_name ? w->node_name : "localhost",
        .master_host = "127.0.0.1",
        .checkpoint_dir = w->checkpoint_dir,
        .metrics_host = "127.0.0.1",
        .metrics_port = w->metrics_port,
        /* every worker shares this machine: torchrun's local view is the whole job */
        .workers_per_node = job->spec.replicas,
        .gpus = 0,
        .log_format = job->spec.training.mode == RM_MODE_BENCH ? NULL
                      : w->log_format                          ? w->log_format
                                                               : "text",
        .ps_addrs = w->ps_addrs,
    };
    if (index < 0) /* a parameter server: -1 - its index */
        return rm_launch_build_ps(job, -1 - index, &p, out, err);
    return rm_launch_build(job, index, epoch, &p, out, err);
}

void rm_local_strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

int rm_local_render(const rm_launch *ln, const char *bin, char *const *base, char ***argv, char ***envp,
                    rm_err *err)
{
    strv av = {0}, ev = {0};
    *argv = *envp = NULL;
    strv_add(&av, "%s", bin);
    for (int i = 0; i < ln->nargs; i++)
        strv_add(&av, "%s", ln->args[i]);
    for (char *const *e = base; e && *e; e++)
        if (!env_is_ours(*e))
            strv_add(&ev, "%s", *e);
    for (int i = 0; i < ln->nenv; i++) {
        bool user_set = false; /* a default the runner's environment already sets */
        for (char *const *e = base; ln->env[i].user_wins && e && *e; e++) {
            size_t nl = strlen(ln->env[i].name);
            user_set |= strncmp(*e, ln->env[i].name, nl) == 0 && (*e)[nl] == '=';
        }
        if (user_set)
            continue;
        if (ln->env[i].src != RM_LAUNCH_LITERAL) {
            strv_free(&av);
            strv_free(&ev);
            return rm_errf(err, RM_EINVAL, "%s: a local process needs a literal value", ln->env[i].name);
        }
        strv_add(&ev, "%s=%s", ln->env[i].name, ln->env[i].value);
    }
    if (av.oom || ev.oom || !av.v || !ev.v) {
        strv_free(&av);
        strv_free(&ev);
        return rm_errf(err, RM_ENOMEM, "out of memory building a worker's command line");
    }
    *argv = av.v;
    *envp = ev.v;
    return RM_OK;
}

/* Where worker idx writes its termination message (RM_ENV_TERMINATION_LOG). */
static void term_path(const local *l, int idx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/worker-%d.termination", l->o->run_dir, idx);
}

/* fork/exec one process of the job (a worker, or a server when idx < 0: -1 - its index) in its
 * own process group, output appended to logpath; *out gets its pid. */
static int spawn_exec(local *l, int idx, int epoch, int port, const char *logpath, const char *banner,
                      pid_t *out, rm_err *err)
{
    char node[300];
    RM_CHECK(rm_local_node_name(l->hostname, getenv(RM_ENV_RUN_NODES), idx, l->job->spec.replicas, node,
                                sizeof node, err));
    rm_local_where where = {
        .rdzv_port = l->rdzv_port,
        .token = l->token,
        .checkpoint_dir = l->o->checkpoint_dir,
        .metrics_port = port,
        .log_format = l->o->worker_log_format,
        .node_name = node,
        .ps_addrs = l->ps_addrs[0] ? l->ps_addrs : NULL,
    };
    rm_launch ln;
    char **argv = NULL, **envp = NULL;
    int rc = rm_local_launch(l->job, idx, epoch, &where, &ln, err);
    if (rc)
        return rc;
    if (idx >= 0 && ln.nenv < RM_LAUNCH_MAX_ENV) { /* its last words on bad data (reap reads them) */
        char tp[PATH_MAX];
        term_path(l, idx, tp, sizeof tp);
        unlink(tp);
        ln.env[ln.nenv] = (rm_launch_var){.name = RM_ENV_TERMINATION_LOG, .value = strdup(tp)};
        if (ln.env[ln.nenv].value)
            ln.nenv++;
    }
    rc = rm_local_render(&ln, l->worker_bin, environ, &argv, &envp, err);
    rm_launch_free(&ln);
    if (rc)
        return rc;
    int logfd = -1, nullfd = -1;
    logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (logfd < 0 || nullfd < 0) {
        rc = rm_errf(err, RM_EIO, "open %s: %s", logpath, strerror(errno));
        goto out;
    }
    dprintf(logfd, "%s", banner);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        rc = rm_errf(err, RM_EIO, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        /* child: async-signal-safe calls only */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        dup2(nullfd, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        if (close_range(3, ~0U, 0) != 0)
            for (int fd = 3; fd < 65536; fd++)
                close(fd);
        execve(argv[0], argv, envp);
        static const char msg[] = "ringmaster: exec of the worker failed\n";
        ssize_t wr = write(2, msg, sizeof msg - 1);
        (void)wr;
        _exit(127);
    }
    setpgid(pid, pid);
    *out = pid;
out:
    if (logfd >= 0)
        close(logfd);
    if (nullfd >= 0)
        close(nullfd);
    rm_local_strv_free(argv);
    rm_local_strv_free(envp);
    return rc;
}

static void wait_wake(local *l, double seconds);

static int spawn(local *l, int idx, int epoch, rm_err *err)
{
    wslot *w = &l->w[idx];
    int port = free_port();
    if (port <= 0)
        return rm_errf(err, RM_EIO, "no free port for worker %d metrics", idx);
    char logpath[PATH_MAX], banner[128];
    snprintf(logpath, sizeof logpath, "%s/worker-%d.log", l->o->run_dir, idx);
    snprintf(banner, sizeof banner, "=== ringmaster: worker %d incarnation %d epoch %d ===\n", idx,
             l->incarnations[idx] + 1, epoch);
    pid_t pid = 0;
    RM_CHECK(spawn_exec(l, idx, epoch, port, logpath, banner, &pid, err));
    l->incarnations[idx]++;
    memset(w, 0, sizeof *w);
    w->used = true;
    w->pid = pid;
    w->epoch_label = epoch;
    w->incarnation = l->incarnations[idx];
    w->created_at = rm_wall();
    w->metrics_port = l->bench ? 0 : port;
    rm_info("worker started index=%d pid=%d epoch=%d incarnation=%d metrics=127.0.0.1:%d", idx, (int)pid,
            epoch, w->incarnation, w->metrics_port);
    return RM_OK;
}

/* ---- parameter servers: processes on fixed ports, kept to operator/ps_reconcile.h's rules ---- */

static int ps_spawn(local *l, int i, rm_err *err)
{
    char logpath[PATH_MAX], banner[128];
    snprintf(logpath, sizeof logpath, "%s/ps-%d.log", l->o->run_dir, i);
    snprintf(banner, sizeof banner, "=== ringmaster: parameter server %d incarnation %d ===\n", i,
             l->ps[i].incarnation + 1);
    int mport = free_port();
    if (mport <= 0)
        return rm_errf(err, RM_EIO, "no free port for parameter server %d metrics", i);
    pid_t pid = 0;
    RM_CHECK(spawn_exec(l, -1 - i, 0, mport, logpath, banner, &pid, err));
    l->ps[i].pid = pid;
    l->ps[i].exited = false;
    l->ps[i].hung = false;
    l->ps[i].last_alive = l->ps[i].last_probe = rm_wall();
    l->ps[i].mport = mport;
    l->ps[i].incarnation++;
    rm_info("parameter server started index=%d pid=%d port=%d incarnation=%d "
            "metrics=127.0.0.1:%d",
            i, (int)pid, l->ps[i].port, l->ps[i].incarnation, mport);
    return RM_OK;
}

static void ps_stop_all(local *l, double grace);
static int op_event(void *rt, bool warning, const char *reason, const char *message, rm_err *err);

/* A server died (docs/strategies.md#failure-semantics): its replacement could only restore its own
 * newest checkpoint, older than the others' shards (or none: the initial parameters), and the
 * model would mix versions. So every server stops (the survivors write their checkpoint), every
 * shard is rolled back to the newest version all of them hold (operator/ps_ckpt.h; none: all
 * start from the initial parameters at version 0), and all restart; the workers' next fetch takes
 * them back to that step (sync) or on from there (async). L-BFGS is not rolled back here: its
 * coordinator takes every shard back to its last accepted point. */
static void ps_group_rollback(local *l, int dead)
{
    int S = l->job->spec.ps.replicas;
    const char *how = l->ps[dead].hung ? "was hung and is stopped" : "exited";
    ps_stop_all(l, 10);
    int64_t v = -1;
    char msg[1024], m[1400];
    int r = rm_ps_ckpt_common(l->o->checkpoint_dir, S, &v, msg, sizeof msg);
    int n = rm_ps_ckpt_rollback(l->o->checkpoint_dir, S, r == 1 ? v : -1);
    if (r == 1)
        snprintf(m, sizeof m,
                 "parameter server %d %s; every server rolls back to version %lld, the newest "
                 "checkpoint all %d shards hold (%d newer shard checkpoint%s removed); the workers "
                 "follow",
                 dead, how, (long long)v, S, n, n == 1 ? "" : "s");
    else
        snprintf(m, sizeof m,
                 "parameter server %d %s and no version is checkpointed by every shard (%s); "
                 "every server restarts from the initial parameters at version 0 (%d shard "
                 "checkpoint%s removed); the workers follow",
                 dead, how, msg, n, n == 1 ? "" : "s");
    op_event(l, true, "ParameterServerRollback", m, NULL);
    say(l, "ringmaster: %s\n", m);
    for (int i = 0; i < S; i++) {
        rm_err e = {0};
        if (ps_spawn(l, i, &e) != RM_OK)
            rm_error("parameter server %d: cannot start err=\"%s\"", i, e.msg);
    }
}

/* Observe, ask the rules, act; status.parameterServers follows. */
static void ps_reconcile(local *l)
{
    int S = l->job->spec.strategy == RM_STRATEGY_PS ? l->job->spec.ps.replicas : 0;
    if (S == 0)
        return;
    rm_ps_observed obs[RM_PS_MAX_SERVERS];
    for (int i = 0; i < S; i++)
        obs[i] = (rm_ps_observed){.exists = l->ps[i].pid > 0,
                                  .finished = l->ps[i].exited,
                                  .ready = l->ps[i].pid > 0 && !l->ps[i].exited};
    rm_ps_action act[2 * RM_PS_MAX_SERVERS];
    int ready = 0;
    int n = rm_ps_reconcile(l->job, obs, S, act, (int)RM_ARRAY_LEN(act), &ready);
    for (int k = 0; k < n; k++) {
        int i = act[k].index;
        rm_err e = {0};
        if (act[k].kind == RM_PS_ACT_CREATE && act[k].replace &&
            l->job->spec.training.optimizer.type != RM_OPT_LBFGS) {
            ps_group_rollback(l, i); /* every server restarted: the other actions are stale */
            break;
        }
        if (act[k].kind == RM_PS_ACT_CREATE) {
            if (act[k].replace)
                say(l,
                    "ringmaster: parameter server %d %s; replacing it (it restores its "
                    "shard from its checkpoint)\n",
                    i, l->ps[i].hung ? "was hung and is stopped" : "exited");
            if (ps_spawn(l, i, &e) != RM_OK)
                rm_error("parameter server %d: cannot start err=\"%s\"", i, e.msg);
        } else if (l->ps[i].pid > 0 && !l->ps[i].exited) {
            kill(-l->ps[i].pid, SIGTERM);
        }
    }
    l->job->status.ps_replicas = S;
    l->job->status.ps_ready = ready;
}

static bool ps_reap(local *l, pid_t pid, int st)
{
    for (int i = 0; i < RM_PS_MAX_SERVERS; i++) {
        if (l->ps[i].pid != pid || l->ps[i].exited)
            continue;
        l->ps[i].exited = true;
        kill(-pid, SIGKILL);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code)
            rm_warn("parameter server exited index=%d pid=%d code=%d", i, (int)pid, code);
        else
            rm_info("parameter server exited index=%d pid=%d code=0", i, (int)pid);
        return true;
    }
    return false;
}

/* At the end: SIGTERM (they write their checkpoint), then SIGKILL after grace. */
static void ps_stop_all(local *l, double grace)
{
    double give_up = rm_wall() + grace;
    for (int i = 0; i < RM_PS_MAX_SERVERS; i++)
        if (l->ps[i].pid > 0 && !l->ps[i].exited)
            kill(-l->ps[i].pid, SIGTERM);
    for (;;) {
        int alive = 0;
        for (int i = 0; i < RM_PS_MAX_SERVERS; i++) {
            if (l->ps[i].pid <= 0 || l->ps[i].exited)
                continue;
            int st;
            pid_t r = waitpid(l->ps[i].pid, &st, WNOHANG);
            if (r == l->ps[i].pid)
                ps_reap(l, r, st);
            else
                alive++;
        }
        if (alive == 0)
            break;
        if (rm_wall() > give_up) {
            for (int i = 0; i < RM_PS_MAX_SERVERS; i++)
                if (l->ps[i].pid > 0 && !l->ps[i].exited) {
                    kill(-l->ps[i].pid, SIGKILL);
                    int st;
                    if (waitpid(l->ps[i].pid, &st, 0) == l->ps[i].pid)
                        ps_reap(l, l->ps[i].pid, st);
                }
            break;
        }
        wait_wake(l, 0.05);
    }
}

static void signal_group(wslot *w, int sig)
{
    if (w->pid > 0 && !w->exited) {
        if (kill(-w->pid, sig) != 0)
            kill(w->pid, sig);
    }
}

static void reap(local *l)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            break;
        if (ps_reap(l, pid, st))
            continue;
        for (int i = 0; i < MAXW; i++) {
            wslot *w = &l->w[i];
            if (!w->used || w->pid != pid || w->exited)
                continue;
            w->exited = true;
            w->finished_at = rm_wall();
            w->ready = false;
            w->message[0] = 0;
            if (WIFEXITED(st)) {
                w->exit_code = WEXITSTATUS(st);
                snprintf(w->reason, sizeof w->reason, "%s", w->exit_code ? "Error" : "Completed");
                if (w->exit_code) { /* the worker's last words, when it left any */
                    char tp[PATH_MAX];
                    term_path(l, i, tp, sizeof tp);
                    FILE *f = fopen(tp, "r");
                    if (f) {
                        size_t n = fread(w->message, 1, sizeof w->message - 1, f);
                        w->message[n] = 0;
                        w->message[strcspn(w->message, "\n")] = 0;
                        fclose(f);
                    }
                }
            } else if (WIFSIGNALED(st)) {
                w->exit_code = 128 + WTERMSIG(st);
                snprintf(w->reason, sizeof w->reason, "Signal %d", WTERMSIG(st));
            }
            /* kill whatever the worker may have left in its group */
            kill(-pid, SIGKILL);
            if (w->deleting) {
                rm_debug("worker gone index=%d pid=%d code=%d", i, (int)pid, w->exit_code);
                w->used = false;
            } else {
                if (w->exit_code)
                    rm_warn("worker exited index=%d pid=%d code=%d reason=\"%s\"", i, (int)pid, w->exit_code,
                            w->reason);
                else
                    rm_info("worker exited index=%d pid=%d code=0", i, (int)pid);
            }
            break;
        }
    }
}

static int alive_count(const local *l)
{
    int n = 0;
    for (int i = 0; i < MAXW; i++)
        if (l->w[i].used && !l->w[i].exited)
            n++;
    return n;
}

static void kill_timers(local *l, double now)
{
    for (int i = 0; i < MAXW; i++) {
        wslot *w = &l->w[i];
        if (w->used && w->deleting && !w->exited && !w->killed && now >= w->kill_at) {
            rm_warn("worker did not stop in time; SIGKILL index=%d pid=%d", i, (int)w->pid);
            signal_group(w, SIGKILL);
            w->killed = true;
        }
    }
}

/* /healthz of every live parameter server (once a second each): a server that answers 503
 * (stalled: it held requests unanswered for rm_health_server_deadline) or does not answer for that
 * long (SIGSTOPped, wedged) is hung: SIGKILL, and ps_reconcile replaces it once reaped. */
static void probe_servers(local *l, double now)
{
    double after = rm_health_server_deadline(l->job->spec.restart.progress_deadline_seconds);
    if (after <= 0 || l->job->spec.strategy != RM_STRATEGY_PS)
        return;
    for (int i = 0; i < l->job->spec.ps.replicas && i < RM_PS_MAX_SERVERS; i++) {
        if (l->ps[i].pid <= 0 || l->ps[i].exited || l->ps[i].hung || l->ps[i].mport <= 0 ||
            now - l->ps[i].last_probe < PROBE_EVERY_S)
            continue;
        l->ps[i].last_probe = now;
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", l->ps[i].mport);
        rm_httpc_resp r = {0};
        rm_err e = {0};
        int rc = rm_httpc_do(l->probe, "GET", url, NULL, NULL, 0, PROBE_TIMEOUT_MS, 4096, &r, &e);
        int status = rc == RM_OK ? r.status : 0;
        rm_httpc_resp_free(&r);
        if (status == 200)
            l->ps[i].last_alive = now;
        if (status == 200 || (status != 503 && now - l->ps[i].last_alive <= after))
            continue;
        char why[96];
        if (status == 503)
            snprintf(why, sizeof why, "its /healthz says stalled");
        else
            snprintf(why, sizeof why, "its /healthz has not answered for %.0fs", now - l->ps[i].last_alive);
        rm_warn("parameter server hung role=ps index=%d pid=%d why=progress-deadline detail=\"%s\" "
                "after=%.0fs",
                i, (int)l->ps[i].pid, why, after);
        say(l,
            "ringmaster: parameter server %d (role ps, index %d) is hung: %s (half of "
            "progressDeadlineSeconds %.0f); stopping it\n",
            i, i, why, l->job->spec.restart.progress_deadline_seconds);
        l->ps[i].hung = true;
        kill(-l->ps[i].pid, SIGKILL);
    }
}

/* /healthz of every live worker (once a second each) and rank 0's test accuracy. */
static void probe(local *l, double now)
{
    if (l->bench)
        return;
    probe_servers(l, now);
    char url[128];
    int first = -1;
    for (int i = 0; i < MAXW; i++) {
        wslot *w = &l->w[i];
        if (!w->used || w->exited || w->deleting || w->metrics_port <= 0)
            continue;
        if (first < 0)
            first = i;
        if (now - w->last_probe < (w->up ? PROBE_EVERY_S : PROBE_EVERY_S / 5))
            continue;
        w->last_probe = now;
        snprintf(url, sizeof url, "http://127.0.0.1:%d/healthz", w->metrics_port);
        rm_httpc_resp r = {0};
        rm_err e = {0};
        int rc = rm_httpc_do(l->probe, "GET", url, NULL, NULL, 0, PROBE_TIMEOUT_MS, 4096, &r, &e);
        w->ready = rc == RM_OK && r.status == 200;
        if (rc == RM_OK && r.status > 0)
            w->up = true;
        rm_httpc_resp_free(&r);
    }
    if (first >= 0 && now - l->last_acc >= ACC_EVERY_S) {
        l->last_acc = now;
        snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", l->w[first].metrics_port);
        rm_httpc_resp r = {0};
        rm_err e = {0};
        if (rm_httpc_do(l->probe, "GET", url, NULL, NULL, 0, PROBE_TIMEOUT_MS, 1 << 20, &r, &e) == RM_OK &&
            r.status == 200 && r.body) {
            const char *key = "\nringmaster_worker_test_accuracy";
            const char *p = strstr(r.body, key);
            if (p) {
                const char *eol = strchr(p + 1, '\n');
                const char *sp = eol ? eol : p + strlen(p);
                while (sp > p && sp[-1] != ' ')
                    sp--;
                double v = strtod(sp, NULL);
                if (v > 0)
                    l->test_acc = v;
            }
        }
        rm_httpc_resp_free(&r);
    }
}

/* ------------------------------------------------------------------ reconcile passes */

static int build_obs(local *l, rm_observed_worker *obs)
{
    int n = 0;
    for (int i = 0; i < MAXW; i++) {
        wslot *w = &l->w[i];
        if (!w->used) {
            if (l->create_failures[i] > 0) {
                rm_observed_worker *o = &obs[n++];
                memset(o, 0, sizeof *o);
                o->index = i;
                o->phase = RM_WORKER_MISSING;
                o->node_ready = true;
                o->create_failures = l->create_failures[i];
            }
            continue;
        }
        rm_observed_worker *o = &obs[n++];
        memset(o, 0, sizeof *o);
        o->index = i;
        o->epoch_label = w->epoch_label;
        o->node_ready = true;
        o->created_at = w->created_at;
        o->ready = w->ready || l->bench;
        if (w->exited) {
            o->phase = w->exit_code == 0 ? RM_WORKER_SUCCEEDED : RM_WORKER_FAILED;
            o->exit_code = w->exit_code;
            o->finished_at = w->finished_at;
            snprintf(o->reason, sizeof o->reason, "%s", w->reason);
            snprintf(o->message, sizeof o->message, "%s", w->message);
        } else if (w->deleting) {
            o->phase = RM_WORKER_TERMINATING;
            o->deletion_started_at = w->deletion_started_at;
        } else {
            o->phase = RM_WORKER_RUNNING;
        }
    }
    return n;
}

static void clean_msg(char *dst, size_t cap, const char *src)
{
    size_t j = 0;
    for (size_t i = 0; src[i] && j + 1 < cap; i++)
        dst[j++] = src[i] == '"' ? '\'' : src[i];
    dst[j] = 0;
}

/* ------------------------------------------------------------------ the operations table */

static int op_create(void *rt, int index, int epoch, rm_err *err)
{
    local *l = rt;
    if (index < 0 || index >= MAXW || l->w[index].used)
        return RM_OK;
    /* RINGMASTER_FAULT ...:node=lost: this replica's "node" is gone (common/faults.h) */
    int rc = rm_faults_index_lost(l->o->checkpoint_dir, index)
                 ? rm_errf(err, RM_EUNSUPPORTED,
                           "worker %d cannot start: its node is lost "
                           "(RINGMASTER_FAULT node=lost)",
                           index)
                 : spawn(l, index, epoch, err);
    if (rc != RM_OK) {
        l->create_failures[index]++;
        rm_warn("worker create failed index=%d err=\"%s\"", index, err->msg);
    } else {
        l->create_failures[index] = 0;
    }
    return rc;
}

static int op_delete(void *rt, int index, bool force, const char *why, rm_err *err)
{
    local *l = rt;
    (void)err;
    if (index < 0 || index >= MAXW || !l->w[index].used)
        return RM_OK;
    wslot *w = &l->w[index];
    if (w->exited) {
        w->used = false; /* already reaped: the index is Missing now */
        return RM_APPLY_AGAIN;
    }
    double now = rm_wall();
    if (!w->deleting) {
        rm_info("stopping worker index=%d pid=%d why=%s", index, (int)w->pid, why);
        w->deleting = true;
        w->deletion_started_at = now;
        w->kill_at = now + (l->o->delete_grace_s > 0 ? l->o->delete_grace_s : 3);
        signal_group(w, force ? SIGKILL : SIGTERM);
        w->killed = force;
    } else if (force && !w->killed) {
        signal_group(w, SIGKILL);
        w->killed = true;
    }
    return RM_OK;
}

static int op_restart(void *rt, int from_epoch, rm_err *err)
{
    local *l = rt;
    (void)err;
    int ne = 0;
    rm_rdzv_restart(l->rdzv, l->jobkey, from_epoch, &ne);
    rm_info("rendezvous restart from_epoch=%d epoch=%d", from_epoch, ne);
    return RM_APPLY_AGAIN;
}

static int op_set_rdzv(void *rt, int desired, int min, rm_err *err)
{
    local *l = rt;
    int rc = rm_rdzv_job_set(l->rdzv, l->jobkey, l->token, desired, min, SETTLE_S);
    if (rc != RM_OK)
        return rm_errf(err, rc, "rendezvous registration: %s", rm_strerror(rc));
    l->rdzv_desired = desired;
    l->rdzv_min = min;
    return RM_APPLY_AGAIN;
}

static int op_stop_rdzv(void *rt, rm_err *err)
{
    local *l = rt;
    (void)err;
    rm_rdzv_job_stop(l->rdzv, l->jobkey);
    return RM_OK;
}

static int op_event(void *rt, bool warning, const char *reason, const char *message, rm_err *err)
{
    local *l = rt;
    (void)err;
    char m[300];
    clean_msg(m, sizeof m, message);
    if (warning)
        rm_warn("event type=Warning reason=%s message=\"%s\"", reason, m);
    else
        rm_info("event type=Normal reason=%s message=\"%s\"", reason, m);
    if (l->o->on_event)
        l->o->on_event(l->o->ud, warning, reason, message);
    return RM_OK;
}

/* No DELETE_JOB: a local job is not an object anyone stores (ttl does not apply). */
static const rm_runtime_ops local_ops = {
    .create_worker = op_create,
    .delete_worker = op_delete,
    .restart_group = op_restart,
    .set_rdzv = op_set_rdzv,
    .stop_rdzv = op_stop_rdzv,
    .event = op_event,
};

static void recovery_check(local *l);

/* The shared transition -> metrics diff, rendered as this runtime's counters. */
static void count_transition(local *l, const rm_tj_status *prev, double now)
{
    const rm_tj_status *st = &l->job->status;
    rm_transition t;
    rm_status_transition(prev, st, &t);
    if (t.created)
        rm_series_inc(l->m_created, 1);
    if (t.restarts > 0) {
        rm_series_inc(l->m_restarted, t.restarts);
        /* a failure right after a recovery (within a tick of the group training again): the
         * recovery still counts, from the snapshot taken before this failure's restart */
        recovery_check(l);
        if (!l->recov_pending) {
            l->recov_pending = true;
            l->recov_t0 = now;
        }
        l->recov_epoch = st->epoch;
    }
    if (t.phase_changed)
        rm_info("phase %s -> %s", rm_phase_name(prev->phase), rm_phase_name(st->phase));
    if (t.succeeded)
        rm_series_inc(l->m_succeeded, 1);
    if (t.failed)
        rm_series_inc(l->m_failed, 1);
}

static void reconcile_passes(local *l, double now)
{
    rm_observed_worker obs[MAXW];
    for (int pass = 0; pass < MAX_PASSES; pass++) {
        bool have = rm_rdzv_snapshot(l->rdzv, l->jobkey, &l->snap) == RM_OK;
        /* every snapshot, before this pass may restart the round: a round whose workers all
         * die right after it closed is still seen closed here */
        if (have)
            rm_shm_sweep_note(&l->shm, l->token, &l->snap, now);
        int n = build_obs(l, obs);
        rm_reconcile_in in = {
            .job = l->job,
            .workers = obs,
            .nworkers = (size_t)n,
            .rdzv = have ? &l->snap : NULL,
            .rdzv_desired = l->rdzv_desired,
            .rdzv_min = l->rdzv_min,
            .now = now,
            .opts = &l->ropts,
        };
        rm_reconcile_out out = {.actions = l->acts, .cap = l->cap};
        int rc = rm_reconcile(&in, &out);
        if (rc != RM_OK) {
            rm_error("reconcile failed rc=%s", rm_strerror(rc));
            return;
        }
        /* commit status (the runner owns it: no write to fail), count, then apply */
        rm_tj_status prev = l->job->status;
        l->job->status = out.status;
        count_transition(l, &prev, now);
        rm_apply_result ar;
        rm_apply_actions(&local_ops, l, out.actions, out.nactions, &ar);
        if (!ar.again)
            break;
    }
}

/* Recovery: the group trains again when a round at or past the restart's epoch closed and a
 * member of it reported (workers report right before their first step of a round). */
static void recovery_check(local *l)
{
    if (!l->recov_pending)
        return;
    const rm_rdzv_state *r = &l->snap;
    if (r->trained_epoch < l->recov_epoch || r->trained_at <= 0)
        return;
    double rec = r->trained_at - l->recov_t0;
    if (rec < 0)
        rec = 0;
    l->recov_pending = false;
    rm_series_observe(l->m_recovery, rec);
    rm_info("group training again recovery_seconds=%.3f epoch=%d world=%d", rec, r->trained_epoch,
            r->trained_world);
    if (l->o->on_event) {
        char m[160];
        snprintf(m, sizeof m,
                 "group training again at epoch %d with %d workers, %.2f s after the "
                 "failure was detected",
                 r->trained_epoch, r->trained_world, rec);
        l->o->on_event(l->o->ud, false, "Recovered", m);
    }
    if (l->res->recoveries < RM_LOCAL_MAX_RECOVERIES)
        l->res->recovery_s[l->res->recoveries++] = rec;
}

static void update_gauges(local *l)
{
    int ready = 0;
    for (int i = 0; i < MAXW; i++)
        if (l->w[i].used && !l->w[i].exited && !l->w[i].deleting && l->w[i].ready)
            ready++;
    rm_series_set(l->m_ready, ready);
    rm_series_set(l->m_desired, l->job->spec.replicas);
    rm_series_set(l->m_restarts, l->job->status.restarts);
    rm_series_set(l->m_epoch, l->job->status.epoch);
    rm_series_set(l->m_step, (double)l->job->status.progress.step);
}

static void tick_view(local *l, double now)
{
    if (!l->o->on_tick)
        return;
    const rm_tj_spec *sp = &l->job->spec;
    rm_local_view v = {.job = l->job,
                       .now = now,
                       .started = l->started,
                       .desired = sp->replicas,
                       .test_accuracy = l->test_acc > 0 ? l->test_acc : -1};
    for (int i = 0; i < MAXW; i++) {
        if (!l->w[i].used || l->w[i].exited)
            continue;
        v.alive++;
        if (l->w[i].ready && !l->w[i].deleting)
            v.ready++;
    }
    if (!l->bench)
        v.steps_total = rm_tj_steps_total(sp);
    l->o->on_tick(l->o->ud, &v);
}

static bool terminal(const local *l)
{
    return l->job->status.phase == RM_PHASE_SUCCEEDED || l->job->status.phase == RM_PHASE_FAILED;
}

static void wait_wake(local *l, double seconds)
{
    int ms = (int)(seconds * 1000);
    if (ms < 1)
        ms = 1;
    if (l->o->wake_fd >= 0) {
        struct pollfd p = {.fd = l->o->wake_fd, .events = POLLIN};
        if (poll(&p, 1, ms) > 0) {
            char buf[256];
            while (read(l->o->wake_fd, buf, sizeof buf) > 0) {
            }
        }
    } else {
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Stop every worker: SIGTERM, wait up to grace, SIGKILL, reap. */
static void stop_all(local *l, double grace)
{
    double now = rm_wall();
    for (int i = 0; i < MAXW; i++) {
        wslot *w = &l->w[i];
        if (w->used && !w->exited && !w->deleting) {
            w->deleting = true;
            w->deletion_started_at = now;
            w->kill_at = now + grace;
            signal_group(w, SIGTERM);
        } else if (w->used && !w->exited && w->kill_at > now + grace) {
            w->kill_at = now + grace;
        }
    }
    double give_up = now + grace + 10; /* a process stuck in D state must not hang us */
    while (alive_count(l) > 0) {
        reap(l);
        now = rm_wall();
        kill_timers(l, now);
        if (alive_count(l) == 0)
            break;
        if (now > give_up) {
            rm_error("workers still alive after SIGKILL; giving up on them alive=%d", alive_count(l));
            break;
        }
        if (l->o->stop_signal && *l->o->stop_signal == SIGKILL) {
            for (int i = 0; i < MAXW; i++)
                if (l->w[i].used && !l->w[i].exited)
                    signal_group(&l->w[i], SIGKILL);
        }
        wait_wake(l, 0.05);
    }
}

/* ------------------------------------------------------------------ the run */

static void local_free(local *l)
{
    if (!l)
        return;
    rm_http_stop(l->msrv);
    if (l->rdzv)
        rm_rdzv_shutdown(l->rdzv);
    rm_http_stop(l->rdzv_srv);
    rm_rdzv_free(l->rdzv);
    rm_metrics_free(l->reg);
    rm_http_blob_free(l->sd);
    rm_health_free(l->health);
    rm_httpc_free(l->probe);
    free(l->acts);
    free(l);
}

bool rm_local_on_gpus(void)
{
    const char *dev = getenv(RM_ENV_DEVICE);
    return dev && strcmp(dev, "cuda") == 0;
}

int rm_local_run(rm_tj *job, const rm_local_opts *o, rm_local_result *res, rm_err *err)
{
    int rc;
    if (!job || !o || !res || !o->run_dir || !o->checkpoint_dir)
        return rm_errf(err, RM_EINVAL, "rm_local_run: missing argument");
    memset(res, 0, sizeof *res);
    local *l = calloc(1, sizeof *l);
    if (!l)
        return rm_errf(err, RM_ENOMEM, "local runtime");
    l->job = job;
    l->o = o;
    l->res = res;
    l->human = o->human ? o->human : stderr;
    l->bench = job->spec.training.mode == RM_MODE_BENCH;
    if (job->spec.replicas > MAXW) {
        rc = rm_err_field(err, RM_EINVAL, "spec.replicas", "at most %d workers on one machine", MAXW);
        goto out;
    }
    snprintf(l->jobkey, sizeof l->jobkey, "%s/%s", job->namespace_ ? job->namespace_ : "default", job->name);
    RM_CHECK_GOTO(rm_local_worker_bin(l->worker_bin, sizeof l->worker_bin, err), rc, out);
    RM_CHECK_GOTO(rm_fs_mkdir_p(o->run_dir, err), rc, out);
    RM_CHECK_GOTO(rm_fs_mkdir_p(o->checkpoint_dir, err), rc, out);
    if (rm_local_on_gpus()) {
        /* RINGMASTER_DEVICE=cuda (inherited by every worker): GPU workers, the manifest as written;
         * each worker's LOCAL_RANK picks its GPU (docs/gpu.md) */
        say(l, "ringmaster: note: local workers run on GPUs (%s=cuda): backend %s, worker i on GPU i\n",
            RM_ENV_DEVICE, rm_backend_name(job->spec.backend));
    } else if (job->spec.backend == RM_BACKEND_NCCL || job->spec.training.precision != RM_PREC_FP32) {
        /* GPU-only settings: local workers are CPU processes */
        say(l,
            "ringmaster: note: local workers run on the CPU: backend %s -> ring, precision "
            "%s -> fp32 (the cluster runs the manifest as written)\n",
            rm_backend_name(job->spec.backend),
            job->spec.training.precision == RM_PREC_BF16   ? "bf16"
            : job->spec.training.precision == RM_PREC_FP16 ? "fp16"
                                                           : "fp32");
        job->spec.training.precision = RM_PREC_FP32;
        if (job->spec.backend == RM_BACKEND_NCCL)
            job->spec.backend = RM_BACKEND_RING; /* said above; resolved below as for pods */
    }
    if (gethostname(l->hostname, sizeof l->hostname - 1) != 0 || !l->hostname[0])
        snprintf(l->hostname, sizeof l->hostname, "localhost");
    { /* fake nodes (RINGMASTER_RUN_NODES): a bad value stops the run here, not every spawn */
        char node[300];
        RM_CHECK_GOTO(rm_local_node_name(l->hostname, getenv(RM_ENV_RUN_NODES), 0, job->spec.replicas, node,
                                         sizeof node, err),
                      rc, out);
    }
    random_token(l->token);
    rm_reconcile_opts_default(&l->ropts);
    l->cap = RM_RECONCILE_ACTIONS(MAXW);
    l->acts = calloc(l->cap, sizeof *l->acts);
    l->probe = rm_httpc_new();
    l->rdzv = rm_rdzv_new();
    if (!l->acts || !l->probe || !l->rdzv) {
        rc = rm_errf(err, RM_ENOMEM, "local runtime");
        goto out;
    }
    RM_CHECK_GOTO(rm_rdzv_serve_world(l->rdzv, "127.0.0.1:0", MAXW, &l->rdzv_srv, err), rc, out);
    l->rdzv_port = rm_http_port(l->rdzv_srv);
    RM_CHECK_GOTO(metrics_setup(l, err), rc, out);
    res->metrics_port = l->mport;
    res->rdzv_port = l->rdzv_port;
    /* register before the first pass so its CREATEs carry the real epoch */
    if (rm_rdzv_job_set(l->rdzv, l->jobkey, l->token, job->spec.replicas,
                        job->spec.min_replicas > 0 ? job->spec.min_replicas : job->spec.replicas,
                        SETTLE_S) == RM_OK) {
        l->rdzv_desired = job->spec.replicas;
        l->rdzv_min = job->spec.min_replicas > 0 ? job->spec.min_replicas : job->spec.replicas;
    }
    sd_update(l);
    if (job->spec.strategy == RM_STRATEGY_PS) {
        size_t n = 0;
        for (int i = 0; i < job->spec.ps.replicas; i++) {
            l->ps[i].port = free_port();
            if (l->ps[i].port <= 0) {
                rc = rm_errf(err, RM_EIO, "no free port for parameter server %d", i);
                goto out;
            }
            n += (size_t)snprintf(l->ps_addrs + n, sizeof l->ps_addrs - n, "%s127.0.0.1:%d", i ? "," : "",
                                  l->ps[i].port);
        }
        ps_reconcile(l); /* the servers first: workers retry until they answer */
        say(l, "ringmaster: %d parameter servers (%s, logs %s/ps-<i>.log): %s\n", job->spec.ps.replicas,
            rm_ps_mode_names[job->spec.ps.mode == RM_PS_ASYNC], o->run_dir, l->ps_addrs);
    }

    say(l, "ringmaster: job %s: %d workers, backend %s%s\n", l->jobkey, job->spec.replicas,
        rm_backend_name(rm_launch_backend(job, 0)), l->bench ? ", allreduce benchmark" : "");
    say(l, "  checkpoints: %s\n", o->checkpoint_dir);
    say(l, "  worker logs: %s/worker-<i>.log\n", o->run_dir);
    say(l, "  rendezvous:  http://127.0.0.1:%d\n", l->rdzv_port);
    say(l,
        "  metrics:     http://127.0.0.1:%d/metrics   Prometheus http_sd: "
        "http://127.0.0.1:%d/sd   file_sd: %s/file_sd.json\n",
        l->mport, l->mport, o->run_dir);

    l->started = rm_wall();
    double tick = o->tick_s > 0 ? o->tick_s : 0.2;
    double finished_at = 0;
    for (;;) {
        if (o->stop_signal && *o->stop_signal) {
            res->signal = *o->stop_signal;
            rm_warn("stopping on signal, workers checkpoint and exit sig=%d", res->signal);
            stop_all(l, o->term_grace_s > 0 ? o->term_grace_s : 15);
            break;
        }
        reap(l);
        double now = rm_wall();
        kill_timers(l, now);
        probe(l, now);
        reconcile_passes(l, now);
        ps_reconcile(l);
        recovery_check(l);
        update_gauges(l);
        sd_update(l);
        tick_view(l, now);
        if (terminal(l)) {
            if (finished_at == 0)
                finished_at = now;
            if (alive_count(l) == 0)
                break;
            if (now - finished_at > FINISH_WAIT_S) {
                stop_all(l, o->term_grace_s > 0 ? o->term_grace_s : 15);
                break;
            }
        }
        wait_wake(l, tick);
    }
    reap(l);
    ps_stop_all(l, o->term_grace_s > 0 ? o->term_grace_s : 15);
    rm_rdzv_job_stop(l->rdzv, l->jobkey);
    update_gauges(l);
    { /* the last scrape, kept with the logs: a finished run's numbers stay readable */
        size_t len = 0;
        char *text = rm_metrics_render(l->reg, &len);
        if (text) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/metrics.prom", o->run_dir);
            write_file_atomic(path, text, len);
            free(text);
        }
    }
    rm_shm_sweep_all(&l->shm); /* every worker is gone: no formation of this run can be live */
    res->phase = job->status.phase;
    res->seconds = rm_wall() - l->started;
    rc = RM_OK;
out:
    local_free(l);
    return rc;
}
