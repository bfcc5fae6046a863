/* swarm_rt.c — kubesim's swarm runtime (swarm_rt.h): one `ringmaster-worker swarm --kubelet`
 * process, its two pipes, and the lines on them (common/podline.h).
 *
 * Both pipes are non-blocking on kubesim's side and the swarm's: start lines wait in a queue until
 * the swarm takes them, exit lines are read once per kubelet tick, so a slow reader on either side
 * never blocks the other (a blocking pair deadlocks once both pipes fill). The pipes are made 1 MiB
 * where the kernel allows, so a tick's worth of lines fits. */
#include "tests/kubesim/swarm_rt.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/worker_env.h"
#include "tests/kubesim/kubesim.h"

#define SW_MAX_ARGS 32

struct ks_swarm {
    char program[512], log[600];
    char *args[SW_MAX_ARGS + 4]; /* program swarm --kubelet ARGS... NULL (owned) */
    pid_t pid;                   /* 0 = not running (or reaped) */
    int in_fd, out_fd;           /* the swarm's stdin (we write) and stdout (we read); -1 = closed */
    bool gone;                   /* its stdout closed: report once from ks_swarm_poll */
    rm_podline_out q;
    rm_podline_in rd;
};

ks_swarm *ks_swarm_new(const char *program, const char *args, const char *log)
{
    ks_swarm *sw = calloc(1, sizeof *sw);
    if (!sw)
        return NULL;
    snprintf(sw->program, sizeof sw->program, "%s", program);
    snprintf(sw->log, sizeof sw->log, "%s", log);
    sw->in_fd = sw->out_fd = -1;
    int n = 0;
    sw->args[n++] = strdup(program);
    sw->args[n++] = strdup("swarm");
    sw->args[n++] = strdup("--kubelet");
    char *copy = args ? strdup(args) : NULL, *save = NULL;
    for (char *t = copy ? strtok_r(copy, " ", &save) : NULL; t && n < SW_MAX_ARGS + 3;
         t = strtok_r(NULL, " ", &save))
        sw->args[n++] = strdup(t);
    free(copy);
    for (int i = 0; i < n; i++)
        if (!sw->args[i]) {
            ks_swarm_free(sw);
            return NULL;
        }
    return sw;
}

static void close_fds(ks_swarm *sw)
{
    if (sw->in_fd >= 0)
        close(sw->in_fd);
    if (sw->out_fd >= 0)
        close(sw->out_fd);
    sw->in_fd = sw->out_fd = -1;
    rm_podline_out_free(&sw->q);
    sw->rd.len = 0;
    sw->rd.skipping = false;
}

/* The swarm is gone (its stdout closed, or writing to it failed): its group is ended. */
static void lost(ks_swarm *sw, const char *why)
{
    rm_warn("kubesim swarm runtime: the swarm process is gone, its workers end with it why=\"%s\" log=%s",
            why, sw->log);
    if (sw->pid > 0)
        kill(-sw->pid, SIGKILL);
    close_fds(sw);
    sw->gone = true;
}

static int spawn(ks_swarm *sw, char *msg, size_t mcap)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) {
        snprintf(msg, mcap, "swarm runtime: pipe: %s", strerror(errno));
        return RM_EIO;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        snprintf(msg, mcap, "swarm runtime: pipe: %s", strerror(errno));
        close(in[0]);
        close(in[1]);
        return RM_EIO;
    }
    fcntl(in[1], F_SETPIPE_SZ, 1 << 20); /* best effort: a tick's lines fit */
    fcntl(out[0], F_SETPIPE_SZ, 1 << 20);
    int logfd = open(sw->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_t pid = fork();
    if (pid == 0) { /* only system calls from here: kubesim has threads */
        ks_child_session();
        dup2(in[0], 0);
        dup2(out[1], 1);
        if (logfd >= 0)
            dup2(logfd, 2);
        execvp(sw->program, sw->args);
        dprintf(2, "kubesim: exec %s: %s\n", sw->program, strerror(errno));
        _exit(127);
    }
    int e = errno;
    close(in[0]);
    close(out[1]);
    if (logfd >= 0)
        close(logfd);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        snprintf(msg, mcap, "swarm runtime: fork: %s", strerror(e));
        return RM_EIO;
    }
    fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);
    fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
    sw->pid = pid;
    sw->in_fd = in[1];
    sw->out_fd = out[0];
    sw->gone = false;
    rm_info("kubesim swarm runtime: started pid=%d program=%s log=%s", (int)pid, sw->program, sw->log);
    return RM_OK;
}

void ks_swarm_free(ks_swarm *sw)
{
    if (!sw)
        return;
    if (sw->in_fd >= 0) { /* what waits, then the end of its input: the swarm ends its workers and exits */
        rm_err e = {0};
        rm_podline_flush(&sw->q, sw->in_fd, &e);
        close(sw->in_fd);
        sw->in_fd = -1;
    }
    if (sw->pid > 0) {
        double until = rm_mono() + 2;
        int st;
        while (waitpid(sw->pid, &st, WNOHANG) == 0 && rm_mono() < until) {
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        kill(-sw->pid, SIGKILL);
        waitpid(sw->pid, &st, WNOHANG);
    }
    close_fds(sw);
    for (int i = 0; i < SW_MAX_ARGS + 4; i++)
        free(sw->args[i]);
    free(sw);
}

static const char *env_of(char *const *env, size_t n, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (env[i] && strncmp(env[i], name, nl) == 0 && env[i][nl] == '=')
            return env[i] + nl + 1;
    return NULL;
}

bool ks_swarm_wants(char *const *env, size_t n)
{
    const char *role = env_of(env, n, RM_ENV_ROLE);
    return (!role || !strcmp(role, "worker")) && env_of(env, n, RM_ENV_RENDEZVOUS) &&
           env_of(env, n, RM_ENV_JOB) && env_of(env, n, RM_ENV_TOKEN) && env_of(env, n, RM_ENV_WORKER_ID);
}

/* spec.training.maxSteps from RINGMASTER_TRAINING (compact JSON), or 0. */
static long long max_steps(const char *training)
{
    cJSON *t = training ? cJSON_Parse(training) : NULL;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(t, "maxSteps");
    long long v = cJSON_IsNumber(ms) && ms->valuedouble >= 1 && ms->valuedouble <= RM_PODLINE_STEPS_MAX
                      ? (long long)ms->valuedouble
                      : 0;
    cJSON_Delete(t);
    return v;
}

int ks_swarm_start(ks_swarm *sw, const char *key, char *const *env, size_t n, const char *ip, char *msg,
                   size_t mcap)
{
    rm_podline l = {.verb = RM_PODLINE_START};
    static const struct {
        const char *var;
        size_t off, cap;
    } strs[] = {
        {RM_ENV_RENDEZVOUS, offsetof(rm_podline, url), RM_PODLINE_URL_MAX},
        {RM_ENV_JOB, offsetof(rm_podline, job), RM_PODLINE_JOB_MAX},
        {RM_ENV_TOKEN, offsetof(rm_podline, token), RM_PODLINE_TOKEN_MAX},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        const char *v = env_of(env, n, strs[i].var);
        if (!v || strlen(v) >= strs[i].cap) {
            snprintf(msg, mcap, "swarm runtime: %s is %s", strs[i].var, v ? "too long" : "not set");
            return RM_EINVAL;
        }
        memcpy((char *)&l + strs[i].off, v, strlen(v) + 1);
    }
    const char *id = env_of(env, n, RM_ENV_WORKER_ID);
    char *end = NULL;
    long idv = id ? strtol(id, &end, 10) : -1;
    if (!id || !*id || *end || idv < 0 || idv > RM_PODLINE_ID_MAX) {
        snprintf(msg, mcap, "swarm runtime: %s \"%.40s\" is not a replica index", RM_ENV_WORKER_ID,
                 id ? id : "");
        return RM_EINVAL;
    }
    l.id = (int)idv;
    snprintf(l.key, sizeof l.key, "%s", key);
    if (ip && strlen(ip) < sizeof l.ip)
        snprintf(l.ip, sizeof l.ip, "%s", ip);
    l.steps = max_steps(env_of(env, n, RM_ENV_TRAINING));
    char line[RM_PODLINE_MAX];
    rm_err perr = {0};
    int len = rm_podline_format(&l, line, sizeof line);
    if (len < 0 || rm_podline_parse(line, (size_t)len, &(rm_podline){0}, &perr) != RM_OK) {
        snprintf(msg, mcap, "swarm runtime: the worker's env does not fit the line protocol: %s",
                 perr.msg[0] ? perr.msg : rm_strerror(len));
        return RM_EINVAL;
    }
    if (sw->in_fd < 0) {
        int rc = spawn(sw, msg, mcap);
        if (rc != RM_OK)
            return rc;
    }
    int rc = rm_podline_queue(&sw->q, &l);
    if (rc != RM_OK) {
        snprintf(msg, mcap, "swarm runtime: %s (the swarm takes no lines?)", rm_strerror(rc));
        return RM_EIO;
    }
    rm_err e = {0};
    if (rm_podline_flush(&sw->q, sw->in_fd, &e) != RM_OK) {
        lost(sw, e.msg);
        snprintf(msg, mcap, "swarm runtime: %s", e.msg);
        return RM_EIO;
    }
    return RM_OK;
}

bool ks_swarm_send(ks_swarm *sw, rm_podline_verb verb, const char *key, int code)
{
    if (!sw || sw->in_fd < 0)
        return false;
    rm_podline l = {.verb = verb, .code = code};
    snprintf(l.key, sizeof l.key, "%s", key);
    int rc = rm_podline_queue(&sw->q, &l);
    if (rc != RM_OK)
        rm_warn("kubesim swarm runtime: line not sent verb=%d key=%s err=\"%s\"", (int)verb, key,
                rm_strerror(rc));
    rm_err e = {0};
    if (rm_podline_flush(&sw->q, sw->in_fd, &e) != RM_OK) {
        lost(sw, e.msg);
        return false;
    }
    return true;
}

bool ks_swarm_poll(ks_swarm *sw, ks_swarm_exit_fn fn, void *ud)
{
    if (!sw)
        return false;
    rm_err e = {0};
    if (sw->in_fd >= 0 && rm_podline_pending(&sw->q) && rm_podline_flush(&sw->q, sw->in_fd, &e) != RM_OK)
        lost(sw, e.msg);
    char line[RM_PODLINE_MAX];
    while (sw->out_fd >= 0) {
        size_t room;
        char *p = rm_podline_space(&sw->rd, &room);
        ssize_t n = read(sw->out_fd, p, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n > 0)
            rm_podline_fed(&sw->rd, (size_t)n);
        int rc;
        rm_err le = {0};
        while ((rc = rm_podline_take(&sw->rd, line, &le)) != 0) {
            rm_podline l;
            if (rc == 1 && rm_podline_parse(line, strlen(line), &l, &le) == RM_OK &&
                l.verb == RM_PODLINE_EXIT)
                fn(ud, l.key, l.code);
            else
                rm_warn("kubesim swarm runtime: bad line from the swarm err=\"%s\" line=\"%.120s\"",
                        le.msg[0] ? le.msg : "not an exit line", rc == 1 ? line : "");
            memset(&le, 0, sizeof le);
        }
        if (n <= 0) {
            lost(sw, n < 0 ? strerror(errno) : "its stdout closed");
            break;
        }
    }
    bool gone = sw->gone;
    sw->gone = false;
    return gone;
}

bool ks_swarm_reaped(ks_swarm *sw, pid_t pid)
{
    if (!sw || pid <= 0 || pid != sw->pid)
        return false;
    sw->pid = 0; /* its stdout's end tells ks_swarm_poll */
    return true;
}
