/* kubelet.c — kubesim's process kubelet (rules M1–M4, J6): binds pods to "kubesim-node", runs
 * each container as a local process group, and writes pod status.
 *
 * Design: one thread, a 100 ms reconcile loop. Each tick it snapshots the pods from the store,
 * binds unbound ones, starts new ones (fork/exec with setsid, env resolved from values,
 * fieldRefs, Secrets and ConfigMaps, stdout/stderr appended to a per-container log file capped by
 * truncation), reaps exits with waitpid, applies restartPolicy with CrashLoopBackOff back-off
 * (first restart at once, then 10 s doubling to 300 s; KUBESIM_BACKOFF_BASE_S scales it), runs
 * httpGet/tcpSocket probes against podIP:port, handles graceful deletion (SIGTERM to the group,
 * SIGKILL after the grace period, then the final removal) and writes status only when it changed.
 * Every pod gets its own loopback address 127.0.x.y — except on a --nodes node (netns.sh), where
 * its processes join the node's network namespace (setns before exec) and podIP = hostIP = the
 * node's address. Images map to programs with --image-map;
 * a container's command overrides the entrypoint and is looked up on PATH. Init containers run
 * first, one at a time in order, each to exit 0 (a failed one is restarted unless restartPolicy is
 * Never, when the pod fails), and the app containers wait in PodInitializing until all are done;
 * their status is initContainerStatuses. terminationMessagePolicy FallbackToLogsOnError puts the
 * last 2,048 bytes of a failed container's log in its terminated state's message (the message
 * file itself, terminationMessagePath, needs a mount namespace and is not read). Exec probes are
 * not run.
 * With --runtime podman (podman.h) each container is a `podman run` of its image instead: the same
 * lifecycle, with the attached podman client as the process; env is only what the pod spec says (not
 * kubesim's own environment); termination goes through `podman kill`; pods' DNS names (hostname.
 * subdomain.ns.svc, Services with a selector) go to one hosts file mounted as every container's /etc/hosts.
 * With --runtime swarm (swarm_rt.h) a worker container (the operator's worker contract in its env)
 * is a simulated worker inside one `ringmaster-worker swarm --kubelet` process instead of a
 * process: the same lifecycle and status, its start and stop as lines to that process, its exit as
 * a line back (read once per tick); other containers run as processes. */
#include "tests/kubesim/kubesim.h"
#include "common/clock.h"
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/b64.h"
#include "common/json.h"
#include "tests/kubesim/podman.h"
#include "tests/kubesim/swarm_rt.h"

#define KL_MAX_CONTAINERS 16
#define KL_LOG_CAP (8L * 1024 * 1024)
#define KL_UID_BUCKETS 65536
#define KL_IPS 65000 /* 127.0.0.2 .. 127.0.255.254, 253 a block */

typedef struct kl_probe {
    bool on, http, tcp;
    char path[256];
    int port;
    double period, delay, timeout;
    int fail_threshold, success_threshold;
    int failures, successes;
    double next;
} kl_probe;

typedef struct kl_ctr {
    char name[64], image[256];
    pid_t pid;
    int restarts;
    double started_at, finished_at; /* wall clock */
    bool running, done, ready, ever_started;
    int exit_code, sig;
    char reason[32], message[256]; /* terminated reason / waiting reason */
    bool has_last;
    int last_exit, last_sig;
    char last_reason[32];
    double last_started, last_finished;
    double next_start; /* monotonic; 0 = start now */
    double backoff;
    char log[760], prev_log[760];
    kl_probe live, readyp;
    bool killed_by_probe;
    char cname[128];     /* podman runtime: the running container's name */
    bool init;           /* one of spec.initContainers (they come first in kl_pod.c) */
    bool log_msg;        /* terminationMessagePolicy FallbackToLogsOnError */
    char term_msg[2049]; /* the terminated state's message: the log's tail after a failure */
    bool swarm;          /* swarm runtime: it runs as a simulated worker in the swarm, key skey */
    char skey[RM_PODLINE_KEY_MAX];
} kl_ctr;

typedef struct kl_pod {
    char uid[64], ns[128], name[256], ip[48];
    char hostip[48]; /* 127.0.0.1, or the node's address (--nodes) */
    char netns[64];  /* --nodes: the node's namespace its processes join */
    int node_idx;    /* index in opts.nodes, -1 for kubesim-node */
    int nc, ninit;   /* c[0 .. ninit) are the init containers, in order */
    kl_ctr c[KL_MAX_CONTAINERS];
    bool terminating, sigkill_sent, final, removed;
    double kill_deadline;
    double start_time;
    char restart_policy[16];
    char last_status[8192]; /* hash-free change detection: last written JSON */
    char *last_status_dyn;
    double cond_time[5];
    bool cond_val[5];
    char hostname[64], subdomain[64], dir[800];
    cJSON *labels; /* podman runtime: Services' selectors match these */
    int ipn;       /* index of its 127.0.x.y address in the kubelet's bitmap, -1 = a node's */
    struct kl_pod *next;
    struct kl_pod *hnext; /* the uid hash's chain */
} kl_pod;

typedef struct ks_kubelet {
    ks_server *s;
    pthread_t th;
    pthread_mutex_t mu;
    kl_pod *pods;
    atomic_bool stop;
    char logdir[560];
    unsigned ipnext;
    double backoff_base;
    bool podman;     /* --runtime podman */
    char hosts[600]; /* podman: the shared /etc/hosts */
    char *hosts_txt; /* its last written content */
    ks_swarm *swarm; /* --runtime swarm: the swarm process (swarm_rt.h) */
    /* pods by uid and the 127.0.x.y addresses in use: a tick looks every stored pod up, so both
     * stay O(1) per pod at the swarm runtime's tens of thousands of pods */
    kl_pod *byuid[KL_UID_BUCKETS];
    uint8_t ipused[(KL_IPS + 7) / 8];
} ks_kubelet;

static cJSON *oget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static void pod_event(ks_server *s, const char *ns, const char *pod, const char *uid, const char *type,
                      const char *reason, const char *component, const char *fmt, ...) RM_PRINTF(8, 9);

/* ---- env ------------------------------------------------------------------------------------ */
typedef struct envv {
    char **v;
    size_t n, cap;
} envv;

static void env_set(envv *e, const char *k, const char *val)
{
    size_t kl = strlen(k);
    char *kv = malloc(kl + strlen(val) + 2);
    if (!kv)
        return;
    sprintf(kv, "%s=%s", k, val);
    for (size_t i = 0; i < e->n; i++)
        if (!strncmp(e->v[i], k, kl) && e->v[i][kl] == '=') {
            free(e->v[i]);
            e->v[i] = kv;
            return;
        }
    if (e->n + 2 > e->cap) {
        size_t nc = e->cap ? e->cap * 2 : 64;
        char **p = realloc(e->v, nc * sizeof(*p));
        if (!p) {
            free(kv);
            return;
        }
        e->v = p;
        e->cap = nc;
    }
    e->v[e->n++] = kv;
    e->v[e->n] = NULL;
}

static const char *env_get(const envv *e, const char *k, size_t kl)
{
    for (size_t i = 0; i < e->n; i++)
        if (!strncmp(e->v[i], k, kl) && e->v[i][kl] == '=')
            return e->v[i] + kl + 1;
    return NULL;
}

static void env_free(envv *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
    memset(e, 0, sizeof(*e));
}

/* Kubernetes $(VAR) expansion against the container env defined so far; $$ escapes. */
static char *expand(const envv *e, const char *in)
{
    ks_buf b = {0};
    for (const char *p = in; *p; p++) {
        if (p[0] == '$' && p[1] == '$') {
            ks_buf_add(&b, "$", 1);
            p++;
        } else if (p[0] == '$' && p[1] == '(') {
            const char *close = strchr(p + 2, ')');
            const char *val = close ? env_get(e, p + 2, (size_t)(close - p - 2)) : NULL;
            if (val) {
                ks_buf_puts(&b, val);
                p = close;
            } else {
                ks_buf_add(&b, p, 1);
            }
        } else {
            ks_buf_add(&b, p, 1);
        }
    }
    return ks_buf_take(&b, NULL);
}

/* A Secret value, decoded (the stored data is base64); NULL when it is not base64. */
static char *b64dec(const char *in)
{
    unsigned char *out = NULL;
    size_t n = 0;
    return rm_b64_decode(in, strlen(in), &out, &n) == RM_OK ? (char *)out : NULL;
}

/* Value of key in a Secret (decoded) or ConfigMap; owned string or NULL. */
static char *lookup_ref(ks_server *s, int type, const char *ns, const char *name, const char *key)
{
    ks_kind *k = ks_core_kind(s, type);
    char *out = NULL;
    pthread_rwlock_rdlock(&s->lock);
    ks_obj *o = name ? ks_table_get(k->tab, ns, name) : NULL;
    if (o) {
        const char *v = ks_sget(oget(o->j, "data"), key);
        if (v)
            out = type == KS_T_SECRET ? b64dec(v) : strdup(v);
    }
    pthread_rwlock_unlock(&s->lock);
    return out;
}

static const cJSON *field_ref(const cJSON *pod, const char *path, char *buf, size_t cap)
{
    /* metadata.labels['x'] / metadata.annotations['x'] */
    const char *br = strstr(path, "['");
    if (br) {
        char map[64], key[256];
        size_t ml = (size_t)(br - path);
        if (ml >= sizeof(map))
            return NULL;
        memcpy(map, path, ml);
        map[ml] = 0;
        const char *ke = strstr(br + 2, "']");
        if (!ke || (size_t)(ke - br - 2) >= sizeof(key))
            return NULL;
        memcpy(key, br + 2, (size_t)(ke - br - 2));
        key[ke - br - 2] = 0;
        const cJSON *m = ks_jsonpath(pod, strchr(map, '.') ? map - 0 : map);
        char mp[80];
        snprintf(mp, sizeof(mp), ".%s", map);
        m = ks_jsonpath(pod, mp);
        return oget(m, key);
    }
    snprintf(buf, cap, ".%s", path);
    return ks_jsonpath(pod, buf);
}

/* Builds the env of container c; returns 0, or -1 with msg (CreateContainerConfigError). */
static int build_env(ks_server *s, const cJSON *pod, const cJSON *c, const char *ip, const char *hostip,
                     envv *e, char *msg, size_t mcap, bool inherit)
{
    extern char **environ;
    for (char **p = environ; inherit && *p; p++) {
        char *eq = strchr(*p, '=');
        if (!eq)
            continue;
        char k[256];
        size_t kl = (size_t)(eq - *p);
        if (kl >= sizeof(k))
            continue;
        memcpy(k, *p, kl);
        k[kl] = 0;
        if (!strcmp(k, "KUBECONFIG"))
            continue;
        env_set(e, k, eq + 1);
    }
    const cJSON *md = oget(pod, "metadata");
    const char *ns = ks_sget(md, "namespace") ? ks_sget(md, "namespace") : "default";
    env_set(e, "HOSTNAME", ks_sget(md, "name") ? ks_sget(md, "name") : "pod");
    env_set(e, "KUBESIM_POD_IP", ip);
    const cJSON *envfrom = oget(c, "envFrom");
    for (const cJSON *ef = envfrom ? envfrom->child : NULL; ef; ef = ef->next) {
        const char *prefix = ks_sget(ef, "prefix") ? ks_sget(ef, "prefix") : "";
        const cJSON *cm = oget(ef, "configMapRef"), *sec = oget(ef, "secretRef");
        const cJSON *ref = cm ? cm : sec;
        if (!ref)
            continue;
        ks_kind *k = ks_core_kind(s, cm ? KS_T_CONFIGMAP : KS_T_SECRET);
        pthread_rwlock_rdlock(&s->lock);
        ks_obj *o = ks_sget(ref, "name") ? ks_table_get(k->tab, ns, ks_sget(ref, "name")) : NULL;
        cJSON *data = o ? cJSON_Duplicate(oget(o->j, "data"), 1) : NULL;
        pthread_rwlock_unlock(&s->lock);
        if (!o && !cJSON_IsTrue(oget(ref, "optional"))) {
            snprintf(msg, mcap, "%s \"%s\" not found", cm ? "configmap" : "secret",
                     ks_sget(ref, "name") ? ks_sget(ref, "name") : "");
            return -1;
        }
        for (const cJSON *d = data ? data->child : NULL; d; d = d->next) {
            if (!cJSON_IsString(d))
                continue;
            char key[512];
            snprintf(key, sizeof(key), "%s%s", prefix, d->string);
            if (sec) {
                char *v = b64dec(d->valuestring);
                env_set(e, key, v ? v : "");
                free(v);
            } else {
                env_set(e, key, d->valuestring);
            }
        }
        cJSON_Delete(data);
    }
    const cJSON *env = oget(c, "env");
    for (const cJSON *v = env ? env->child : NULL; v; v = v->next) {
        const char *name = ks_sget(v, "name");
        if (!name)
            continue;
        const char *val = ks_sget(v, "value");
        if (val) {
            char *x = expand(e, val);
            env_set(e, name, x ? x : val);
            free(x);
            continue;
        }
        const cJSON *vf = oget(v, "valueFrom");
        if (!vf) {
            env_set(e, name, "");
            continue;
        }
        const cJSON *fr = oget(vf, "fieldRef");
        const cJSON *skr = oget(vf, "secretKeyRef");
        const cJSON *ckr = oget(vf, "configMapKeyRef");
        if (fr && ks_sget(fr, "fieldPath")) {
            const char *fp = ks_sget(fr, "fieldPath");
            char buf[300];
            if (!strcmp(fp, "status.podIP") || !strcmp(fp, "status.podIPs")) {
                env_set(e, name, ip);
            } else if (!strcmp(fp, "status.hostIP") || !strcmp(fp, "status.hostIPs")) {
                env_set(e, name, hostip);
            } else if (!strcmp(fp, "spec.nodeName")) {
                const char *nn = ks_sget(oget(pod, "spec"), "nodeName");
                env_set(e, name, nn ? nn : KS_NODE_NAME);
            } else {
                const cJSON *fv = field_ref(pod, fp, buf, sizeof(buf));
                if (cJSON_IsString(fv))
                    env_set(e, name, fv->valuestring);
                else if (cJSON_IsNumber(fv)) {
                    snprintf(buf, sizeof(buf), "%g", fv->valuedouble);
                    env_set(e, name, buf);
                } else
                    env_set(e, name, "");
            }
        } else if (skr || ckr) {
            const cJSON *r = skr ? skr : ckr;
            char *val2 = lookup_ref(s, skr ? KS_T_SECRET : KS_T_CONFIGMAP, ns, ks_sget(r, "name"),
                                    ks_sget(r, "key") ? ks_sget(r, "key") : "");
            if (!val2) {
                if (cJSON_IsTrue(oget(r, "optional")))
                    continue;
                snprintf(msg, mcap, "couldn't find key %s in %s %s/%s",
                         ks_sget(r, "key") ? ks_sget(r, "key") : "", skr ? "Secret" : "ConfigMap", ns,
                         ks_sget(r, "name") ? ks_sget(r, "name") : "");
                return -1;
            }
            env_set(e, name, val2);
            free(val2);
        } else if (oget(vf, "resourceFieldRef")) {
            env_set(e, name, "0");
        }
    }
    return 0;
}

/* ---- processes ------------------------------------------------------------------------------ */
static const char *image_program(ks_server *s, const char *image)
{
    for (int i = 0; i < s->opts.nimage_map; i++)
        if (!strcmp(s->opts.image_map[i][0], image))
            return s->opts.image_map[i][1];
    char base[256];
    snprintf(base, sizeof(base), "%s", image);
    char *at = strchr(base, '@');
    if (at)
        *at = 0;
    char *slash = strrchr(base, '/');
    char *colon = strrchr(slash ? slash : base, ':');
    if (colon)
        *colon = 0;
    for (int i = 0; i < s->opts.nimage_map; i++) {
        char mb[256];
        snprintf(mb, sizeof(mb), "%s", s->opts.image_map[i][0]);
        char *ms = strrchr(mb, '/');
        char *mc = strrchr(ms ? ms : mb, ':');
        if (mc)
            *mc = 0;
        if (!strcmp(mb, base))
            return s->opts.image_map[i][1];
    }
    return NULL;
}

static void parse_probe(const cJSON *p, kl_probe *pr)
{
    memset(pr, 0, sizeof(*pr));
    if (!cJSON_IsObject(p))
        return;
    const cJSON *hg = oget(p, "httpGet"), *tcp = oget(p, "tcpSocket");
    const cJSON *port = hg ? oget(hg, "port") : tcp ? oget(tcp, "port") : NULL;
    if (!cJSON_IsNumber(port))
        return;
    pr->on = true;
    pr->http = hg != NULL;
    pr->tcp = !hg;
    pr->port = (int)port->valuedouble;
    snprintf(pr->path, sizeof(pr->path), "%s", hg && ks_sget(hg, "path") ? ks_sget(hg, "path") : "/");
    const cJSON *v;
    pr->period = cJSON_IsNumber(v = oget(p, "periodSeconds")) ? v->valuedouble : 10;
    pr->delay = cJSON_IsNumber(v = oget(p, "initialDelaySeconds")) ? v->valuedouble : 0;
    pr->timeout = cJSON_IsNumber(v = oget(p, "timeoutSeconds")) ? v->valuedouble : 1;
    pr->fail_threshold = cJSON_IsNumber(v = oget(p, "failureThreshold")) ? (int)v->valuedouble : 3;
    pr->success_threshold = cJSON_IsNumber(v = oget(p, "successThreshold")) ? (int)v->valuedouble : 1;
    if (pr->period < 0.1)
        pr->period = 0.1;
}

/* 1 success, 0 failure. Bounded by the probe's timeout. */
static int run_probe(const char *ip, const kl_probe *pr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)pr->port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    int ok = 0;
    int tmo = (int)(pr->timeout * 1000);
    if (tmo < 100)
        tmo = 100;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS)
        goto out;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, tmo) <= 0)
        goto out;
    int err = 0;
    socklen_t el = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err)
        goto out;
    if (pr->tcp) {
        ok = 1;
        goto out;
    }
    char req[512];
    int n =
        snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: kube-probe/1.32\r\nConnection: close\r\n\r\n",
                 pr->path, ip, pr->port);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        goto out;
    char buf[64];
    size_t got = 0;
    while (got < 12) {
        p.events = POLLIN;
        if (poll(&p, 1, tmo) <= 0)
            goto out;
        ssize_t r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    buf[got] = 0;
    int code = 0;
    if (sscanf(buf, "HTTP/%*d.%*d %d", &code) == 1 && code >= 200 && code < 400)
        ok = 1;
out:
    close(fd);
    return ok;
}

static void cap_log(const char *path)
{
    struct stat st;
    if (path[0] && stat(path, &st) == 0 && st.st_size > KL_LOG_CAP)
        truncate(path, 0);
}

/* Bookkeeping once a container's process runs (both runtimes). */
static void started(ks_kubelet *kl, kl_pod *p, kl_ctr *c, pid_t pid)
{
    if (c->ever_started)
        c->restarts++;
    c->pid = pid;
    c->running = true;
    c->ever_started = true;
    c->done = false;
    c->ready = false;
    c->reason[0] = c->message[0] = 0;
    c->started_at = rm_wall();
    double now = rm_mono();
    c->live.failures = c->readyp.failures = 0;
    c->live.next = now + c->live.delay;
    c->readyp.next = now + c->readyp.delay;
    c->killed_by_probe = false;
    rm_info("kubesim kubelet started container pod=%s/%s container=%s pid=%d ip=%s%s%s", p->ns, p->name,
            c->name, (int)pid, p->ip, c->cname[0] ? " podman=" : "", c->cname);
    pod_event(kl->s, p->ns, p->name, p->uid, "Normal", "Started", "kubelet", "Started container %s", c->name);
}

void ks_child_session(void)
{
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
}

/* Forks one container's process, in both modes: a new session, default signals, stdin from
 * /dev/null, stdout+stderr appended to the container's log (the previous run's log kept as
 * prev_log, for `kubectl logs --previous`). envp NULL inherits kubesim's environment (podman mode:
 * the container's env travels as -e flags); wd, when set, is the working directory. Returns the
 * child's pid, or -1 with errno from fork. netns, when set, is a namespace under /run/netns the
 * child joins (setns) before exec: a pod on a --nodes node runs inside its node's network. */
static pid_t spawn_logged(kl_ctr *c, char *const argv[], char *const envp[], const char *wd,
                          const char *netns)
{
    if (c->ever_started && c->log[0])
        rename(c->log, c->prev_log);
    int fd = open(c->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    char nspath[128] = ""; /* built before fork: the child only makes system calls */
    if (netns && *netns)
        snprintf(nspath, sizeof nspath, "/run/netns/%s", netns);
    pid_t pid = fork();
    if (pid == 0) {
        ks_child_session();
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (nspath[0]) {
            int nfd = open(nspath, O_RDONLY | O_CLOEXEC);
            if (nfd < 0 || setns(nfd, CLONE_NEWNET) != 0) {
                dprintf(2, "kubesim: join the node's network namespace %s: %s\n", nspath, strerror(errno));
                _exit(127);
            }
            close(nfd);
        }
        if (wd && *wd && chdir(wd) != 0) {
            dprintf(2, "kubesim: chdir %s: %s\n", wd, strerror(errno));
            _exit(128);
        }
        if (argv[0]) {
            if (envp)
                execvpe(argv[0], argv, envp);
            else
                execvp(argv[0], argv);
        }
        dprintf(2, "kubesim: exec %s: %s\n", argv[0] ? argv[0] : "(none)", strerror(errno));
        _exit(127);
    }
    int saved = errno;
    if (fd >= 0)
        close(fd);
    errno = saved;
    return pid;
}

/* After spawn_logged: the container is running, or (pid < 0, fork_errno from fork) it waits to be
 * retried with RunContainerError. 0 or -1. */
static int spawned(ks_kubelet *kl, kl_pod *p, kl_ctr *c, pid_t pid, int fork_errno)
{
    if (pid < 0) {
        snprintf(c->reason, sizeof(c->reason), "RunContainerError");
        snprintf(c->message, sizeof(c->message), "fork: %s", strerror(fork_errno));
        c->next_start = rm_mono() + 5;
        return -1;
    }
    started(kl, p, c, pid);
    return 0;
}

/* podman runtime: fork `podman run` attached, its output to the container's log (podman.h). */
static int start_podman(ks_kubelet *kl, kl_pod *p, kl_ctr *c, const cJSON *pod, const cJSON *cj, envv *env)
{
    char msg[256] = "";
    char cn[64];
    memcpy(cn, c->name, sizeof(cn));
    snprintf(c->cname, sizeof(c->cname), "ks-%.8s-%.40s-%.40s-%d", p->uid, p->name, cn,
             c->restarts + (c->ever_started ? 1 : 0));
    ks_podman_pod pp = {
        .ns = p->ns, .name = p->name, .uid = p->uid, .ip = p->ip, .poddir = p->dir, .hosts = kl->hosts};
    /* $(VAR) in command and args expands from the container's env, as the kubelet does */
    cJSON *cx = cJSON_Duplicate(cj, 1);
    static const char *const which[] = {"command", "args"};
    for (int w = 0; cx && w < 2; w++) {
        cJSON *arr = oget(cx, which[w]);
        for (cJSON *a = cJSON_IsArray(arr) ? arr->child : NULL; a; a = a->next) {
            char *x = cJSON_IsString(a) ? expand(env, a->valuestring) : NULL;
            if (x)
                cJSON_SetValuestring(a, x);
            free(x);
        }
    }
    char **argv = cx ? ks_podman_argv(kl->s, pod, cx, &pp, c->cname, env->v, env->n, msg, sizeof(msg)) : NULL;
    if (!cx)
        snprintf(msg, sizeof(msg), "kubesim: out of memory");
    cJSON_Delete(cx);
    env_free(env);
    if (!argv) {
        snprintf(c->reason, sizeof(c->reason), "CreateContainerConfigError");
        snprintf(c->message, sizeof(c->message), "%s", msg);
        c->cname[0] = 0;
        c->next_start = rm_mono() + 2;
        return -1;
    }
    pid_t pid = spawn_logged(c, argv, NULL, NULL, p->netns);
    int fork_errno = errno;
    ks_podman_argv_free(argv);
    return spawned(kl, p, c, pid, fork_errno);
}

/* swarm runtime: hand the worker to the swarm process (swarm_rt.h); its log says where it runs. */
static int start_swarm(ks_kubelet *kl, kl_pod *p, kl_ctr *c, envv *env)
{
    char msg[256] = "";
    char cn[64];
    memcpy(cn, c->name, sizeof(cn));
    snprintf(c->skey, sizeof(c->skey), "%.60s/%.60s", p->uid, cn);
    int rc = ks_swarm_start(kl->swarm, c->skey, env->v, env->n, p->ip, msg, sizeof(msg));
    env_free(env);
    if (rc != RM_OK) {
        snprintf(c->reason, sizeof(c->reason), "%s",
                 rc == RM_EINVAL ? "CreateContainerConfigError" : "RunContainerError");
        snprintf(c->message, sizeof(c->message), "%s", msg);
        c->next_start = rm_mono() + (rc == RM_EINVAL ? 2 : 5);
        return -1;
    }
    if (c->ever_started && c->log[0])
        rename(c->log, c->prev_log);
    FILE *f = fopen(c->log, "a");
    if (f) {
        fprintf(f,
                "kubesim: container %s runs as a simulated worker in the swarm (ringmaster-worker swarm "
                "--kubelet), key %s\n",
                cn, c->skey);
        fclose(f);
    }
    c->swarm = true;
    started(kl, p, c, 0);
    return 0;
}

static int start_container(ks_kubelet *kl, kl_pod *p, kl_ctr *c, const cJSON *pod)
{
    ks_server *s = kl->s;
    const cJSON *cs = oget(oget(pod, "spec"), c->init ? "initContainers" : "containers");
    const cJSON *cj = NULL;
    for (const cJSON *x = cs ? cs->child : NULL; x; x = x->next)
        if (ks_sget(x, "name") && !strcmp(ks_sget(x, "name"), c->name))
            cj = x;
    if (!cj)
        return -1;
    envv env = {0};
    char msg[256] = "";
    if (kl->podman && !ks_podman_image_exists(c->image)) {
        snprintf(c->reason, sizeof(c->reason), "ErrImageNeverPull");
        snprintf(c->message, sizeof(c->message),
                 "Container image \"%.160s\" is not present with pull policy of Never", c->image);
        c->next_start = rm_mono() + 5;
        return -1;
    }
    if (build_env(s, pod, cj, p->ip, p->hostip, &env, msg, sizeof(msg), !kl->podman) < 0) {
        snprintf(c->reason, sizeof(c->reason), "CreateContainerConfigError");
        snprintf(c->message, sizeof(c->message), "%s", msg);
        c->next_start = rm_mono() + 1;
        env_free(&env);
        return -1;
    }
    if (kl->swarm && ks_swarm_wants(env.v, env.n))
        return start_swarm(kl, p, c, &env);
    if (kl->podman) {
        /* the real kubelet gives every container the API server's address */
        const char *sh = getenv("KUBESIM_SERVICE_HOST"), *sp = getenv("KUBESIM_SERVICE_PORT");
        if (sh && sp) {
            env_set(&env, "KUBERNETES_SERVICE_HOST", sh);
            env_set(&env, "KUBERNETES_SERVICE_PORT", sp);
        }
        return start_podman(kl, p, c, pod, cj, &env);
    }
    /* argv: command (on PATH) overrides the image entrypoint; args appended */
    const cJSON *cmd = oget(cj, "command"), *args = oget(cj, "args");
    char *argv[256];
    int argc = 0;
    const char *prog = NULL;
    if (cJSON_IsArray(cmd) && cJSON_GetArraySize(cmd) > 0) {
        for (const cJSON *a = cmd->child; a && argc < 200; a = a->next)
            if (cJSON_IsString(a))
                argv[argc++] = expand(&env, a->valuestring);
    } else {
        prog = image_program(s, c->image);
        if (!prog) {
            snprintf(c->reason, sizeof(c->reason), "ErrImagePull");
            snprintf(c->message, sizeof(c->message),
                     "kubesim: no --image-map entry for image %.160s and no command", c->image);
            c->next_start = rm_mono() + 5;
            env_free(&env);
            return -1;
        }
        argv[argc++] = strdup(prog);
    }
    for (const cJSON *a = cJSON_IsArray(args) ? args->child : NULL; a && argc < 250; a = a->next)
        if (cJSON_IsString(a))
            argv[argc++] = expand(&env, a->valuestring);
    argv[argc] = NULL;
    const char *wd = ks_sget(cj, "workingDir");
    pid_t pid = spawn_logged(c, argv, env.v, wd, p->netns);
    int fork_errno = errno;
    for (int i = 0; i < argc; i++)
        free(argv[i]);
    env_free(&env);
    return spawned(kl, p, c, pid, fork_errno);
}

/* ---- status --------------------------------------------------------------------------------- */
static const char *COND_TYPES[5] = {"PodScheduled", "PodReadyToStartContainers", "Initialized",
                                    "ContainersReady", "Ready"};

static cJSON *ctr_status(const kl_ctr *c)
{
    char ts[32], ts2[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON *state = cJSON_AddObjectToObject(o, "state");
    if (c->running) {
        rm_json_time(ts, c->started_at);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(state, "running"), "startedAt", ts);
    } else if (c->done) {
        cJSON *t = cJSON_AddObjectToObject(state, "terminated");
        cJSON_AddNumberToObject(t, "exitCode", c->exit_code);
        if (c->sig)
            cJSON_AddNumberToObject(t, "signal", c->sig);
        cJSON_AddStringToObject(t, "reason", c->exit_code == 0 ? "Completed" : "Error");
        if (c->term_msg[0])
            cJSON_AddStringToObject(t, "message", c->term_msg);
        rm_json_time(ts, c->started_at);
        rm_json_time(ts2, c->finished_at);
        cJSON_AddStringToObject(t, "startedAt", ts);
        cJSON_AddStringToObject(t, "finishedAt", ts2);
        char cid[64];
        snprintf(cid, sizeof(cid), "kubesim://%d", (int)c->pid);
        cJSON_AddStringToObject(t, "containerID", cid);
    } else {
        cJSON *w = cJSON_AddObjectToObject(state, "waiting");
        cJSON_AddStringToObject(w, "reason", c->reason[0] ? c->reason : "ContainerCreating");
        if (c->message[0])
            cJSON_AddStringToObject(w, "message", c->message);
    }
    cJSON *last = cJSON_AddObjectToObject(o, "lastState");
    if (c->has_last) {
        cJSON *t = cJSON_AddObjectToObject(last, "terminated");
        cJSON_AddNumberToObject(t, "exitCode", c->last_exit);
        if (c->last_sig)
            cJSON_AddNumberToObject(t, "signal", c->last_sig);
        cJSON_AddStringToObject(t, "reason", c->last_reason);
        rm_json_time(ts, c->last_started);
        rm_json_time(ts2, c->last_finished);
        cJSON_AddStringToObject(t, "startedAt", ts);
        cJSON_AddStringToObject(t, "finishedAt", ts2);
    }
    cJSON_AddBoolToObject(o, "ready", c->running && c->ready);
    cJSON_AddNumberToObject(o, "restartCount", c->restarts);
    cJSON_AddStringToObject(o, "image", c->image);
    char iid[300];
    snprintf(iid, sizeof(iid), "kubesim://%s", c->image);
    cJSON_AddStringToObject(o, "imageID", iid);
    if (c->ever_started) {
        char cid[64];
        snprintf(cid, sizeof(cid), "kubesim://%d", (int)c->pid);
        cJSON_AddStringToObject(o, "containerID", cid);
    }
    cJSON_AddBoolToObject(o, "started", c->running);
    return o;
}

/* All init containers exited 0 (true when there are none). */
static bool initialized(const kl_pod *p)
{
    for (int i = 0; i < p->ninit; i++)
        if (!p->c[i].done || p->c[i].exit_code != 0)
            return false;
    return true;
}

static const char *pod_phase(const kl_pod *p)
{
    for (int i = 0; i < p->ninit; i++)
        if (p->c[i].done && p->c[i].exit_code != 0)
            return "Failed"; /* done only under restartPolicy Never: the pod has failed */
    if (!initialized(p))
        return "Pending";
    bool all_done = p->nc > p->ninit, all_ok = true, any_started = false;
    for (int i = p->ninit; i < p->nc; i++) {
        const kl_ctr *c = &p->c[i];
        if (!c->done)
            all_done = false;
        else if (c->exit_code != 0)
            all_ok = false;
        if (c->ever_started)
            any_started = true;
    }
    if (all_done)
        return all_ok ? "Succeeded" : "Failed";
    return any_started ? "Running" : "Pending";
}

typedef struct status_ud {
    cJSON *status;
} status_ud;

static int write_status_cb(cJSON *pod, void *ud)
{
    status_ud *u = ud;
    cJSON *old = cJSON_GetObjectItemCaseSensitive(pod, "status");
    cJSON *nst = cJSON_Duplicate(u->status, 1);
    if (old && cJSON_GetObjectItemCaseSensitive(old, "qosClass") &&
        !cJSON_GetObjectItemCaseSensitive(nst, "qosClass"))
        cJSON_AddItemToObject(nst, "qosClass",
                              cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(old, "qosClass"), 1));
    if (old)
        cJSON_ReplaceItemInObjectCaseSensitive(pod, "status", nst);
    else
        cJSON_AddItemToObject(pod, "status", nst);
    return 1;
}

static void write_status(ks_kubelet *kl, kl_pod *p)
{
    const char *phase = pod_phase(p);
    bool all_ready = p->nc > p->ninit, terminal = !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed");
    bool any_started = false;
    for (int i = p->ninit; i < p->nc; i++) {
        if (!(p->c[i].running && p->c[i].ready))
            all_ready = false;
        if (p->c[i].ever_started)
            any_started = true;
    }
    bool vals[5] = {true, !terminal || any_started, initialized(p), all_ready && !terminal,
                    all_ready && !terminal};
    double now = rm_wall();
    for (int i = 0; i < 5; i++)
        if (p->cond_time[i] == 0 || p->cond_val[i] != vals[i]) {
            p->cond_val[i] = vals[i];
            p->cond_time[i] = now;
        }
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "phase", phase);
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    for (int i = 0; i < 5; i++) {
        cJSON *c = cJSON_CreateObject();
        char ts[32];
        rm_json_time(ts, p->cond_time[i]);
        cJSON_AddStringToObject(c, "type", COND_TYPES[i]);
        cJSON_AddStringToObject(c, "status", vals[i] ? "True" : "False");
        cJSON_AddNullToObject(c, "lastProbeTime");
        cJSON_AddStringToObject(c, "lastTransitionTime", ts);
        if (!vals[i] && i == 2) {
            cJSON_AddStringToObject(c, "reason", "ContainersNotInitialized");
            cJSON_AddStringToObject(c, "message", "containers with incomplete status");
        } else if (!vals[i] && i >= 3) {
            cJSON_AddStringToObject(c, "reason", terminal ? "PodCompleted" : "ContainersNotReady");
            if (!terminal)
                cJSON_AddStringToObject(c, "message", "containers with unready status");
        }
        cJSON_AddItemToArray(conds, c);
    }
    cJSON_AddStringToObject(st, "hostIP", p->hostip);
    cJSON *hips = cJSON_AddArrayToObject(st, "hostIPs");
    cJSON *hip = cJSON_CreateObject();
    cJSON_AddStringToObject(hip, "ip", p->hostip);
    cJSON_AddItemToArray(hips, hip);
    cJSON_AddStringToObject(st, "podIP", p->ip);
    cJSON *pips = cJSON_AddArrayToObject(st, "podIPs");
    cJSON *pip = cJSON_CreateObject();
    cJSON_AddStringToObject(pip, "ip", p->ip);
    cJSON_AddItemToArray(pips, pip);
    char ts[32];
    rm_json_time(ts, p->start_time);
    cJSON_AddStringToObject(st, "startTime", ts);
    if (p->ninit > 0) {
        cJSON *ics = cJSON_AddArrayToObject(st, "initContainerStatuses");
        for (int i = 0; i < p->ninit; i++)
            cJSON_AddItemToArray(ics, ctr_status(&p->c[i]));
    }
    cJSON *cs = cJSON_AddArrayToObject(st, "containerStatuses");
    for (int i = p->ninit; i < p->nc; i++) {
        cJSON *o = ctr_status(&p->c[i]);
        if (!initialized(p) && !p->c[i].ever_started) { /* waiting on the init containers */
            cJSON *w =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "state"), "waiting");
            if (w && !p->c[i].reason[0])
                cJSON_ReplaceItemInObjectCaseSensitive(w, "reason", cJSON_CreateString("PodInitializing"));
        }
        cJSON_AddItemToArray(cs, o);
    }
    char *txt = cJSON_PrintUnformatted(st);
    if (txt && (!p->last_status_dyn || strcmp(txt, p->last_status_dyn))) {
        status_ud u = {st};
        int rc =
            ks_internal_update(kl->s, ks_core_kind(kl->s, KS_T_POD), p->ns, p->name, write_status_cb, &u);
        if (rc == RM_OK) {
            free(p->last_status_dyn);
            p->last_status_dyn = txt;
            txt = NULL;
        }
    }
    free(txt);
    cJSON_Delete(st);
}

/* ---- pods ----------------------------------------------------------------------------------- */
/* The next free 127.0.x.y (round robin, so an address is not reused at once); its index, or -1
 * when all KL_IPS are taken (then 127.0.0.2, shared). */
static int alloc_ip(ks_kubelet *kl, char *out, size_t cap)
{
    for (int tries = 0; tries < KL_IPS; tries++) {
        unsigned n = kl->ipnext++ % KL_IPS;
        if (kl->ipused[n / 8] & (1u << (n % 8)))
            continue;
        kl->ipused[n / 8] |= (uint8_t)(1u << (n % 8));
        snprintf(out, cap, "127.0.%u.%u", n / 253, n % 253 + 2); /* 127.0.0.2 .. .254, 127.0.1.2 ... */
        return (int)n;
    }
    snprintf(out, cap, "127.0.0.2");
    return -1;
}

static unsigned uid_hash(const char *uid)
{
    unsigned h = 2166136261u;
    for (; *uid; uid++)
        h = (h ^ (unsigned char)*uid) * 16777619u;
    return h % KL_UID_BUCKETS;
}

static kl_pod *find_pod(ks_kubelet *kl, const char *uid)
{
    for (kl_pod *p = kl->byuid[uid_hash(uid)]; p; p = p->hnext)
        if (!strcmp(p->uid, uid))
            return p;
    return NULL;
}

/* Take p out of the uid hash and give its address back (before free_pod). */
static void forget_pod(ks_kubelet *kl, kl_pod *p)
{
    kl_pod **pp = &kl->byuid[uid_hash(p->uid)];
    while (*pp && *pp != p)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = p->hnext;
    if (p->ipn >= 0)
        kl->ipused[p->ipn / 8] &= (uint8_t) ~(1u << (p->ipn % 8));
}

static void mkdirs(const char *path)
{
    char buf[600];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
    mkdir(buf, 0755);
}

/* A core/v1 Event about a pod, as the kubelet and scheduler record them (what describe lists). */
static void pod_event(ks_server *s, const char *ns, const char *pod, const char *uid, const char *type,
                      const char *reason, const char *component, const char *fmt, ...)
{
    char msg[512], name[320], ts[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(name, sizeof(name), "%.200s.%llx", pod,
             (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec);
    rm_json_time(ts, rm_wall());
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "apiVersion", "v1");
    cJSON_AddStringToObject(e, "kind", "Event");
    cJSON *md = cJSON_AddObjectToObject(e, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "namespace", ns);
    cJSON *io = cJSON_AddObjectToObject(e, "involvedObject");
    cJSON_AddStringToObject(io, "apiVersion", "v1");
    cJSON_AddStringToObject(io, "kind", "Pod");
    cJSON_AddStringToObject(io, "namespace", ns);
    cJSON_AddStringToObject(io, "name", pod);
    cJSON_AddStringToObject(io, "uid", uid);
    cJSON_AddStringToObject(e, "reason", reason);
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON *src = cJSON_AddObjectToObject(e, "source");
    cJSON_AddStringToObject(src, "component", component);
    if (strcmp(component, "default-scheduler"))
        cJSON_AddStringToObject(src, "host", KS_NODE_NAME);
    cJSON_AddStringToObject(e, "firstTimestamp", ts);
    cJSON_AddStringToObject(e, "lastTimestamp", ts);
    cJSON_AddNumberToObject(e, "count", 1);
    cJSON_AddStringToObject(e, "reportingComponent", component);
    cJSON_AddStringToObject(e, "reportingInstance",
                            strcmp(component, "default-scheduler") ? KS_NODE_NAME : "");
    ks_internal_create(s, ks_core_kind(s, KS_T_EVENT), ns, e);
}

static kl_pod *new_pod(ks_kubelet *kl, const cJSON *pod)
{
    kl_pod *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    const cJSON *md = oget(pod, "metadata");
    snprintf(p->uid, sizeof(p->uid), "%s", ks_sget(md, "uid") ? ks_sget(md, "uid") : "");
    snprintf(p->ns, sizeof(p->ns), "%s", ks_sget(md, "namespace") ? ks_sget(md, "namespace") : "");
    snprintf(p->name, sizeof(p->name), "%s", ks_sget(md, "name") ? ks_sget(md, "name") : "");
    const cJSON *spec = oget(pod, "spec");
    snprintf(p->restart_policy, sizeof(p->restart_policy), "%s",
             ks_sget(spec, "restartPolicy") ? ks_sget(spec, "restartPolicy") : "Always");
    const ks_node_spec *node = ks_node_find(kl->s, ks_sget(spec, "nodeName"));
    p->node_idx = node ? (int)(node - kl->s->opts.nodes) : -1;
    p->ipn = -1;
    if (node && node->netns[0]) {
        /* a namespaced node: the pod lives in the node's network namespace, at its address (as
         * hostNetwork pods do; podIP = hostIP) */
        snprintf(p->ip, sizeof(p->ip), "%s", node->addr);
        snprintf(p->hostip, sizeof(p->hostip), "%s", node->addr);
        snprintf(p->netns, sizeof(p->netns), "%s", node->netns);
    } else {
        p->ipn = alloc_ip(kl, p->ip, sizeof(p->ip));
        snprintf(p->hostip, sizeof(p->hostip), "127.0.0.1");
    }
    p->start_time = rm_wall();
    char dir[800];
    snprintf(dir, sizeof(dir), "%s/%.60s_%.60s_%.40s", kl->logdir, p->ns, p->name, p->uid);
    mkdirs(dir);
    snprintf(p->dir, sizeof(p->dir), "%s", dir);
    snprintf(p->hostname, sizeof(p->hostname), "%s",
             ks_sget(spec, "hostname") ? ks_sget(spec, "hostname") : "");
    snprintf(p->subdomain, sizeof(p->subdomain), "%s",
             ks_sget(spec, "subdomain") ? ks_sget(spec, "subdomain") : "");
    const cJSON *lb = oget(md, "labels");
    p->labels = cJSON_IsObject(lb) ? cJSON_Duplicate(lb, 1) : NULL;
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *cs = oget(spec, pass == 0 ? "initContainers" : "containers");
        for (const cJSON *c = cs ? cs->child : NULL; c && p->nc < KL_MAX_CONTAINERS; c = c->next) {
            kl_ctr *k = &p->c[p->nc++];
            k->init = pass == 0;
            if (k->init)
                p->ninit = p->nc;
            snprintf(k->name, sizeof(k->name), "%s", ks_sget(c, "name") ? ks_sget(c, "name") : "c");
            snprintf(k->image, sizeof(k->image), "%s", ks_sget(c, "image") ? ks_sget(c, "image") : "");
            char cn[64];
            memcpy(cn, k->name, sizeof(cn));
            snprintf(k->log, sizeof(k->log), "%.700s/%.40s.log", dir, cn);
            snprintf(k->prev_log, sizeof(k->prev_log), "%.700s/%.40s.previous.log", dir, cn);
            parse_probe(oget(c, "livenessProbe"), &k->live);
            parse_probe(oget(c, "readinessProbe"), &k->readyp);
            k->ready = false;
            const char *tmp = ks_sget(c, "terminationMessagePolicy");
            k->log_msg = tmp && !strcmp(tmp, "FallbackToLogsOnError");
        }
    }
    p->next = kl->pods;
    kl->pods = p;
    unsigned h = uid_hash(p->uid);
    p->hnext = kl->byuid[h];
    kl->byuid[h] = p;
    return p;
}

static void free_pod(kl_pod *p)
{
    cJSON_Delete(p->labels);
    free(p->last_status_dyn);
    free(p);
}

/* Process mode: the signal to the container's process group. Podman mode: `podman kill` (the
 * container's processes are not ours); SIGKILL also ends the attached client. */
static void kill_ctr(const ks_kubelet *kl, kl_ctr *c, int sig)
{
    if (c->running && c->swarm) { /* SIGTERM and SIGKILL alike: its worker stops and exits */
        ks_swarm_send(kl->swarm, RM_PODLINE_STOP, c->skey, 0);
        return;
    }
    if (!c->running || c->pid <= 0)
        return;
    if (kl->podman && c->cname[0]) {
        ks_podman_kill(c->cname, sig);
        if (sig == SIGKILL)
            kill(-c->pid, SIGKILL);
        return;
    }
    kill(-c->pid, sig);
}

static void kill_pod(const ks_kubelet *kl, kl_pod *p, int sig)
{
    for (int i = 0; i < p->nc; i++)
        kill_ctr(kl, &p->c[i], sig);
}

/* podman runtime: the names cluster DNS would serve, as one hosts file (rewritten in place, so
 * every container's bind-mounted /etc/hosts sees the change): pods with hostname+subdomain (a
 * headless Service's records), and each Service with a selector → its first matching pod. */
static void update_hosts(ks_kubelet *kl)
{
    size_t cap = 4096, len = 0;
    char *t = malloc(cap);
    if (!t)
        return;
#define HADD(...)                                             \
    do {                                                      \
        char line_[1024];                                     \
        int n_ = snprintf(line_, sizeof(line_), __VA_ARGS__); \
        if (n_ < 0 || (size_t)n_ >= sizeof(line_))            \
            break;                                            \
        if (len + (size_t)n_ + 1 > cap) {                     \
            char *q_ = realloc(t, cap * 2 + (size_t)n_);      \
            if (!q_)                                          \
                break;                                        \
            t = q_;                                           \
            cap = cap * 2 + (size_t)n_;                       \
        }                                                     \
        memcpy(t + len, line_, (size_t)n_ + 1);               \
        len += (size_t)n_;                                    \
    } while (0)
    HADD("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n");
    for (kl_pod *p = kl->pods; p; p = p->next) {
        if (p->terminating)
            continue;
        if (p->hostname[0] && p->subdomain[0])
            HADD("%s %s.%s.%s.svc.cluster.local %s.%s.%s.svc %s.%s.%s %s.%s %s\n", p->ip, p->hostname,
                 p->subdomain, p->ns, p->hostname, p->subdomain, p->ns, p->hostname, p->subdomain, p->ns,
                 p->hostname, p->subdomain, p->hostname);
        else /* a pod's own name, as its /etc/hosts has it (gethostname() must resolve: Gloo needs it) */
            HADD("%s %s\n", p->ip, p->hostname[0] ? p->hostname : p->name);
    }
    ks_server *s = kl->s;
    size_t n = 0;
    pthread_rwlock_rdlock(&s->lock);
    ks_obj **svcs = ks_table_list(ks_core_kind(s, KS_T_SERVICE)->tab, NULL, &n);
    pthread_rwlock_unlock(&s->lock);
    for (size_t i = 0; svcs && i < n; i++) {
        const cJSON *md = oget(svcs[i]->j, "metadata");
        const cJSON *sel = oget(oget(svcs[i]->j, "spec"), "selector");
        const char *ns = ks_sget(md, "namespace"), *name = ks_sget(md, "name");
        if (!ns || !name || !cJSON_IsObject(sel) || !sel->child)
            continue;
        for (kl_pod *p = kl->pods; p; p = p->next) {
            if (p->terminating || strcmp(p->ns, ns))
                continue;
            bool match = true;
            for (const cJSON *kv = sel->child; kv && match; kv = kv->next) {
                const char *v = ks_sget(p->labels, kv->string);
                match = cJSON_IsString(kv) && v && !strcmp(v, kv->valuestring);
            }
            if (match) {
                HADD("%s %s.%s.svc.cluster.local %s.%s.svc %s.%s\n", p->ip, name, ns, name, ns, name, ns);
                break;
            }
        }
    }
#undef HADD
    ks_objs_free(svcs, n);
    if (kl->hosts_txt && !strcmp(kl->hosts_txt, t)) {
        free(t);
        return;
    }
    int fd = open(kl->hosts, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644); /* same inode: mounts see it */
    if (fd >= 0) {
        if (write(fd, t, len) != (ssize_t)len)
            rm_warn("kubesim kubelet: short write to %s", kl->hosts);
        close(fd);
    }
    free(kl->hosts_txt);
    kl->hosts_txt = t;
}

static int bind_cb(cJSON *pod, void *ud)
{
    (void)ud;
    return ks_pod_bind(pod, KS_NODE_NAME, false);
}

/* The container stopped running with exit code (sig: the signal that ended it, or 0). */
static void ctr_exited(kl_ctr *c, int code, int sig)
{
    c->running = false;
    c->swarm = false;
    c->finished_at = rm_wall();
    c->exit_code = code;
    c->sig = sig;
    c->term_msg[0] = 0;
    FILE *f = c->log_msg && c->exit_code != 0 ? fopen(c->log, "r") : NULL;
    if (f) { /* FallbackToLogsOnError: the log's last 2,048 bytes */
        long want = (long)sizeof(c->term_msg) - 1;
        if (fseek(f, 0, SEEK_END) == 0) {
            long end = ftell(f);
            if (fseek(f, end > want ? end - want : 0, SEEK_SET) == 0) {
                size_t n = fread(c->term_msg, 1, (size_t)want, f);
                c->term_msg[n] = 0;
            }
        }
        fclose(f);
    }
}

static void on_exit_status(kl_ctr *c, int status)
{
    ctr_exited(c, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
               WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* swarm runtime: an exit line for key "UID/CONTAINER". */
static void swarm_exit(void *ud, const char *key, int code)
{
    ks_kubelet *kl = ud;
    char uid[64];
    const char *slash = strchr(key, '/');
    if (!slash || (size_t)(slash - key) >= sizeof(uid))
        return;
    memcpy(uid, key, (size_t)(slash - key));
    uid[slash - key] = 0;
    kl_pod *p = find_pod(kl, uid);
    for (int i = 0; p && i < p->nc; i++) {
        kl_ctr *c = &p->c[i];
        if (c->swarm && c->running && !strcmp(c->skey, key)) {
            ctr_exited(c, code, 0);
            rm_info("kubesim kubelet container exited pod=%s/%s container=%s code=%d runtime=swarm", p->ns,
                    p->name, c->name, code);
        }
    }
}

/* swarm runtime: the exits the swarm reported; when the swarm process itself is gone, every worker
 * it held ends as if killed (137). */
static void swarm_poll(ks_kubelet *kl)
{
    if (!kl->swarm || !ks_swarm_poll(kl->swarm, swarm_exit, kl))
        return;
    for (kl_pod *p = kl->pods; p; p = p->next)
        for (int i = 0; i < p->nc; i++)
            if (p->c[i].swarm && p->c[i].running) {
                ctr_exited(&p->c[i], 128 + SIGKILL, SIGKILL);
                rm_warn("kubesim kubelet container ended with the swarm pod=%s/%s container=%s", p->ns,
                        p->name, p->c[i].name);
            }
}

static void reap(ks_kubelet *kl)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return;
        if (ks_swarm_reaped(kl->swarm, pid))
            continue;
        for (kl_pod *p = kl->pods; p; p = p->next)
            for (int i = 0; i < p->nc; i++)
                if (p->c[i].pid == pid && p->c[i].running) {
                    on_exit_status(&p->c[i], status);
                    rm_info("kubesim kubelet container exited pod=%s/%s container=%s code=%d signal=%d",
                            p->ns, p->name, p->c[i].name, p->c[i].exit_code, p->c[i].sig);
                    /* the process group may have stragglers: end them */
                    kill(-pid, SIGKILL);
                }
    }
}

/* Apply restartPolicy to containers that stopped running. */
static void handle_exits(ks_kubelet *kl, kl_pod *p, double now)
{
    for (int i = 0; i < p->nc; i++) {
        kl_ctr *c = &p->c[i];
        if (c->running || c->done || !c->ever_started || c->next_start > 0)
            continue;
        /* the container just exited (an init container that succeeded is done; one that failed is
         * retried unless the pod's restartPolicy is Never) */
        bool restart = c->init ? c->exit_code != 0 && strcmp(p->restart_policy, "Never") != 0
                               : !strcmp(p->restart_policy, "Always") ||
                                     (!strcmp(p->restart_policy, "OnFailure") && c->exit_code != 0);
        if (!restart) {
            c->done = true;
            continue;
        }
        c->has_last = true;
        c->last_exit = c->exit_code;
        c->last_sig = c->sig;
        snprintf(c->last_reason, sizeof(c->last_reason), "%s", c->exit_code == 0 ? "Completed" : "Error");
        c->last_started = c->started_at;
        c->last_finished = c->finished_at;
        /* back-off: immediate first restart, then base doubling to 300 s; reset after 10 min of running */
        if (c->finished_at - c->started_at > 600)
            c->backoff = 0;
        double delay = c->backoff;
        c->backoff = c->backoff == 0 ? kl->backoff_base : c->backoff * 2;
        if (c->backoff > 300)
            c->backoff = 300;
        c->next_start = now + delay;
        snprintf(c->reason, sizeof(c->reason), "%s", delay > 0 ? "CrashLoopBackOff" : "ContainerCreating");
        if (delay > 0) {
            char cn[64];
            memcpy(cn, c->name, sizeof(cn));
            snprintf(c->message, sizeof(c->message),
                     "back-off %gs restarting failed container=%.60s pod=%.60s_%.60s", delay, cn, p->name,
                     p->ns);
            pod_event(kl->s, p->ns, p->name, p->uid, "Warning", "BackOff", "kubelet",
                      "Back-off restarting failed container %s", cn);
        }
    }
}

static void run_probes(ks_kubelet *kl, kl_pod *p, double now)
{
    for (int i = 0; i < p->nc; i++) {
        kl_ctr *c = &p->c[i];
        if (!c->running) {
            c->ready = false;
            continue;
        }
        if (c->swarm) { /* a simulated worker serves no port to probe: Ready while it runs */
            c->ready = true;
            continue;
        }
        if (!c->readyp.on)
            c->ready = true;
        else if (now >= c->readyp.next) {
            c->readyp.next = now + c->readyp.period;
            if (run_probe(p->ip, &c->readyp)) {
                c->readyp.failures = 0;
                if (++c->readyp.successes >= c->readyp.success_threshold)
                    c->ready = true;
            } else {
                c->readyp.successes = 0;
                if (++c->readyp.failures >= c->readyp.fail_threshold)
                    c->ready = false;
            }
        }
        if (c->live.on && now >= c->live.next) {
            c->live.next = now + c->live.period;
            if (run_probe(p->ip, &c->live)) {
                c->live.failures = 0;
            } else if (++c->live.failures >= c->live.fail_threshold) {
                rm_info("kubesim kubelet liveness probe failed, killing pod=%s/%s container=%s", p->ns,
                        p->name, c->name);
                pod_event(kl->s, p->ns, p->name, p->uid, "Warning", "Unhealthy", "kubelet",
                          "Liveness probe failed: %s %s:%d%s", c->live.http ? "GET" : "TCP", p->ip,
                          c->live.port, c->live.http ? c->live.path : "");
                c->killed_by_probe = true;
                c->live.failures = 0;
                kill_ctr(kl, c, SIGKILL);
            }
        }
    }
}

static void tick(ks_kubelet *kl)
{
    ks_server *s = kl->s;
    ks_kind *pk = ks_core_kind(s, KS_T_POD);
    bool not_ready;
    pthread_mutex_lock(&s->faults.mu);
    not_ready = s->faults.node_not_ready;
    pthread_mutex_unlock(&s->faults.mu);
    pthread_mutex_lock(&kl->mu);
    reap(kl);
    swarm_poll(kl);
    pthread_mutex_unlock(&kl->mu);
    if (not_ready)
        return;       /* a NotReady node: processes keep running, nothing is reported, deletions hang */
    ks_sched_tick(s); /* with --node: the schedulers bind pods (sched.c); else nothing */
    size_t n;
    pthread_rwlock_rdlock(&s->lock);
    ks_obj **pods = ks_table_list(pk->tab, NULL, &n);
    pthread_rwlock_unlock(&s->lock);
    double now = rm_mono();
    pthread_mutex_lock(&kl->mu);
    for (kl_pod *p = kl->pods; p; p = p->next)
        p->removed = true;
    for (size_t i = 0; pods && i < n; i++) {
        const cJSON *o = pods[i]->j;
        const cJSON *md = oget(o, "metadata");
        const char *uid = ks_sget(md, "uid"), *ns = ks_sget(md, "namespace"), *name = ks_sget(md, "name");
        const char *node = ks_sget(oget(o, "spec"), "nodeName");
        const char *phase = ks_sget(oget(o, "status"), "phase");
        bool deleting = ks_sget(md, "deletionTimestamp") != NULL;
        if (!uid || !ns || !name)
            continue;
        kl_pod *p = find_pod(kl, uid);
        if (p)
            p->removed = false;
        if (!node) {
            if (!deleting && !s->opts.nnodes) { /* with --node, sched.c binds */
                char nsb[128], nb[256], ub[64];
                snprintf(nsb, sizeof(nsb), "%s", ns);
                snprintf(nb, sizeof(nb), "%s", name);
                snprintf(ub, sizeof(ub), "%s", uid);
                pthread_mutex_unlock(&kl->mu);
                if (ks_internal_update(s, pk, nsb, nb, bind_cb, NULL) == RM_OK)
                    pod_event(s, nsb, nb, ub, "Normal", "Scheduled", "default-scheduler",
                              "Successfully assigned %s/%s to " KS_NODE_NAME, nsb, nb);
                pthread_mutex_lock(&kl->mu);
            }
            continue;
        }
        if (!ks_node_ours(s, node))
            continue;
        const ks_node_spec *nspec = ks_node_find(s, node);
        if (nspec && ks_node_lost(s, (int)(nspec - s->opts.nodes)))
            continue; /* its node is lost alone: its processes run on, nothing is reported or started */
        bool terminal_phase = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
        if (!p) {
            if (deleting) {
                char nsb[128], nb[256], ub[64];
                snprintf(nsb, sizeof(nsb), "%s", ns);
                snprintf(nb, sizeof(nb), "%s", name);
                snprintf(ub, sizeof(ub), "%s", uid);
                pthread_mutex_unlock(&kl->mu);
                ks_internal_remove(s, pk, nsb, nb, ub);
                pthread_mutex_lock(&kl->mu);
                continue;
            }
            if (terminal_phase)
                continue;
            p = new_pod(kl, o);
            if (!p)
                continue;
        }
        if (deleting && !p->terminating) {
            const cJSON *g = oget(md, "deletionGracePeriodSeconds");
            double grace = cJSON_IsNumber(g) ? g->valuedouble : 30;
            p->terminating = true;
            p->kill_deadline = now + grace;
            kill_pod(kl, p, SIGTERM);
            rm_info("kubesim kubelet terminating pod=%s/%s grace=%g", p->ns, p->name, grace);
            for (int c = 0; c < p->nc; c++)
                if (p->c[c].running)
                    pod_event(s, p->ns, p->name, p->uid, "Normal", "Killing", "kubelet",
                              "Stopping container %s", p->c[c].name);
        }
        if (p->terminating) {
            bool any = false;
            for (int c = 0; c < p->nc; c++)
                if (p->c[c].running)
                    any = true;
            if (any && now >= p->kill_deadline && !p->sigkill_sent) {
                kill_pod(kl, p, SIGKILL);
                p->sigkill_sent = true;
            }
            if (!any) {
                for (int c = 0; c < p->nc; c++)
                    if (p->c[c].ever_started)
                        p->c[c].done = true;
                    else {
                        p->c[c].done = true;
                        p->c[c].exit_code = 0;
                    }
                write_status(kl, p);
                char nsb[128], nb[256], ub[64];
                snprintf(nsb, sizeof(nsb), "%s", p->ns);
                snprintf(nb, sizeof(nb), "%s", p->name);
                snprintf(ub, sizeof(ub), "%s", p->uid);
                pthread_mutex_unlock(&kl->mu);
                ks_internal_remove(s, pk, nsb, nb, ub);
                pthread_mutex_lock(&kl->mu);
            }
            continue;
        }
        if (p->final)
            continue;
        run_probes(kl, p, now);
        handle_exits(kl, p, now);
        /* start / restart containers that are due */
        for (int c = 0; c < p->nc; c++) {
            kl_ctr *k = &p->c[c];
            if (c > 0 && c <= p->ninit && !(p->c[c - 1].done && p->c[c - 1].exit_code == 0))
                break; /* init containers one at a time, in order; the app containers after all */
            if (k->running || k->done)
                continue;
            if (k->next_start > 0 && now < k->next_start)
                continue;
            if (k->ever_started && k->next_start == 0)
                continue;
            k->next_start = 0;
            if (start_container(kl, p, k, o) < 0 && !k->next_start)
                k->next_start = now + 1;
        }
        for (int c = 0; c < p->nc; c++)
            cap_log(p->c[c].log);
        if (!strcmp(pod_phase(p), "Succeeded") || !strcmp(pod_phase(p), "Failed"))
            p->final = true;
        write_status(kl, p);
    }
    if (kl->podman)
        update_hosts(kl);
    /* pods gone from the store (force-deleted): kill and forget */
    kl_pod **pp = &kl->pods;
    while (*pp) {
        kl_pod *p = *pp;
        if (p->removed && !ks_node_lost(s, p->node_idx)) { /* a lost node's kubelet kills it once back */
            kill_pod(kl, p, SIGKILL);
            *pp = p->next;
            forget_pod(kl, p);
            free_pod(p);
            continue;
        }
        pp = &p->next;
    }
    pthread_mutex_unlock(&kl->mu);
    ks_objs_free(pods, n);
}

static void *kl_main(void *arg)
{
    ks_kubelet *kl = arg;
    while (!atomic_load(&kl->stop)) {
        tick(kl);
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int ks_kubelet_start(ks_server *s)
{
    ks_kubelet *kl = calloc(1, sizeof(*kl));
    if (!kl)
        return RM_ENOMEM;
    kl->s = s;
    pthread_mutex_init(&kl->mu, NULL);
    const char *bb = getenv("KUBESIM_BACKOFF_BASE_S");
    kl->backoff_base = bb && atof(bb) > 0 ? atof(bb) : 10;
    snprintf(kl->logdir, sizeof(kl->logdir), "%.500s/logs", s->opts.data_dir);
    mkdirs(kl->logdir);
    kl->podman = s->opts.podman;
    if (s->opts.swarm) {
        const char *prog =
            s->opts.swarm_program[0] ? s->opts.swarm_program : image_program(s, "ringmaster/worker");
        char log[600];
        snprintf(log, sizeof(log), "%.500s/swarm.log", s->opts.data_dir);
        kl->swarm = ks_swarm_new(prog ? prog : "ringmaster-worker", getenv("KUBESIM_SWARM_ARGS"), log);
        if (!kl->swarm) {
            free(kl);
            return RM_ENOMEM;
        }
    }
    if (kl->podman) {
        snprintf(kl->hosts, sizeof(kl->hosts), "%.500s/hosts", s->opts.data_dir);
        update_hosts(kl);
    }
    s->kubelet = kl;
    if (pthread_create(&kl->th, NULL, kl_main, kl) != 0) {
        s->kubelet = NULL;
        ks_swarm_free(kl->swarm);
        free(kl);
        return RM_ERR;
    }
    return RM_OK;
}

void ks_kubelet_stop(ks_server *s)
{
    ks_kubelet *kl = s->kubelet;
    if (!kl)
        return;
    atomic_store(&kl->stop, true);
    pthread_join(kl->th, NULL);
    for (kl_pod *p = kl->pods; p; p = p->next)
        kill_pod(kl, p, SIGTERM);
    double until = rm_mono() + 2;
    for (;;) {
        reap(kl);
        swarm_poll(kl);
        bool any = false;
        for (kl_pod *p = kl->pods; p; p = p->next)
            for (int i = 0; i < p->nc; i++)
                if (p->c[i].running)
                    any = true;
        if (!any || rm_mono() > until)
            break;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (kl_pod *p = kl->pods; p; p = p->next)
        kill_pod(kl, p, SIGKILL);
    reap(kl);
    while (kl->pods) {
        kl_pod *p = kl->pods;
        kl->pods = p->next;
        free_pod(p);
    }
    if (kl->podman)
        ks_podman_cleanup(); /* containers whose client died before them */
    ks_swarm_free(kl->swarm);
    free(kl->hosts_txt);
    pthread_mutex_destroy(&kl->mu);
    free(kl);
    s->kubelet = NULL;
}

int ks_kubelet_log_path(ks_server *s, const char *pod_uid, const char *container, bool previous, char *buf,
                        size_t cap)
{
    ks_kubelet *kl = s->kubelet;
    if (!kl)
        return RM_ENOTFOUND;
    int rc = RM_ENOTFOUND;
    pthread_mutex_lock(&kl->mu);
    kl_pod *p = find_pod(kl, pod_uid);
    for (int i = 0; p && i < p->nc; i++)
        if (!strcmp(p->c[i].name, container) && p->c[i].ever_started) {
            const char *path = previous ? p->c[i].prev_log : p->c[i].log;
            if (!previous || p->c[i].restarts > 0) {
                snprintf(buf, cap, "%s", path);
                rc = RM_OK;
            }
        }
    pthread_mutex_unlock(&kl->mu);
    return rc;
}

int ks_kubelet_swarm_fault(ks_server *s, const char *ns, const char *pod, bool hang, int code)
{
    ks_kubelet *kl = s->kubelet;
    if (!kl || !kl->swarm)
        return RM_EINVAL;
    int rc = RM_ENOTFOUND;
    pthread_mutex_lock(&kl->mu);
    for (kl_pod *p = kl->pods; p && rc == RM_ENOTFOUND; p = p->next) {
        if (strcmp(p->ns, ns) || strcmp(p->name, pod) || p->terminating)
            continue;
        for (int i = 0; i < p->nc && rc == RM_ENOTFOUND; i++)
            if (p->c[i].swarm && p->c[i].running) {
                rm_info("kubesim kubelet swarm fault pod=%s/%s container=%s fault=%s code=%d", p->ns, p->name,
                        p->c[i].name, hang ? "hang" : "kill", code);
                rc = ks_swarm_send(kl->swarm, hang ? RM_PODLINE_HANG : RM_PODLINE_KILL, p->c[i].skey, code)
                         ? RM_OK
                         : RM_EIO;
            }
    }
    pthread_mutex_unlock(&kl->mu);
    return rc;
}
