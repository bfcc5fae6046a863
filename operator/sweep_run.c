/* sweep_run.c — a TrainingSweep on this machine (see sweep_run.h for the design): the sweep core
 * decides, this file forks one child per trial (each running the local runtime as a library),
 * reads their status lines, stops the ones the median rule condemns, and draws the table. */
#include "operator/sweep_run.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/log.h"
#include "common/yaml.h"
#include "operator/apply.h"
#include "operator/local.h"
#include "operator/run.h"
#include "operator/sigwake.h"

#define LINE_CAP (256 * 1024) /* one status line from a trial (64 evaluations fit many times) */
#define TICK_MS 200

/* ------------------------------------------------------------------ manifest */

bool rm_sweep_manifest_is(const rm_yaml_docs *d)
{
    bool yes = false;
    for (size_t i = 0; d && i < rm_yaml_count(d) && !yes; i++) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(rm_yaml_doc(d, i), "kind");
        yes = cJSON_IsString(k) && strcmp(k->valuestring, RM_SWEEP_KIND) == 0;
    }
    return yes;
}

int rm_sweep_manifest_load(const rm_yaml_docs *d, const char *path, rm_sweep *out, char *msg, size_t cap)
{
    rm_err e = {0};
    int rc;
    memset(out, 0, sizeof *out);
    msg[0] = 0;
    size_t n = rm_yaml_count(d), pick = n;
    for (size_t i = 0; i < n; i++) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(rm_yaml_doc(d, i), "kind");
        if (!cJSON_IsString(k) || strcmp(k->valuestring, RM_SWEEP_KIND) != 0)
            continue;
        if (pick != n) {
            int line = 0, col = 0;
            rm_yaml_pos(d, i, "kind", &line, &col);
            rm_sfmt(msg, cap, "%s:%d: a second TrainingSweep (document %zu): one sweep per file", path, line,
                    i + 1);
            return RM_EINVAL;
        }
        pick = i;
    }
    if (pick == n) {
        rm_sfmt(msg, cap, "%s: no TrainingSweep in the file", path);
        return RM_EINVAL;
    }
    /* a trial naming a training runtime would run without the runtime's fields here: refused,
     * not run differently from the cluster (docs/trainingjob-api.md#runtimes) */
    if (rm_json_path(rm_yaml_doc(d, pick), "spec.trialTemplate.runtimeRef")) {
        rm_err re = {0};
        rm_err_field(&re, RM_EINVAL, "spec.trialTemplate.runtimeRef",
                     "ringmaster run does not resolve training runtimes for a sweep's trials (the "
                     "operator does): write the runtime's fields into spec.trialTemplate");
        rm_manifest_msg(msg, cap, path, d, pick, &re);
        return RM_EINVAL;
    }
    rc = rm_sweep_from_json(rm_yaml_doc(d, pick), out, &e);
    if (rc == RM_OK) {
        /* every trial runs on this machine: its workers must fit in memory */
        for (int i = 0; i < out->spec.trials && rc == RM_OK; i++) {
            rm_tj tj;
            rc = rm_sweep_trial_tj(out, i, &tj, &e);
            if (rc == RM_OK) {
                rc = rm_tj_check_memory_local(&tj, &e);
                rm_tj_free(&tj);
            }
        }
        if (rc)
            rm_sweep_free(out);
    }
    if (rc != RM_OK) {
        /* errors about the template point at the template's lines */
        rm_err shown = e;
        if (strncmp(e.field, "spec.training", 13) == 0 || strncmp(e.field, "spec.replicas", 13) == 0)
            rm_sfmt(shown.field, sizeof shown.field, "spec.trialTemplate%s", e.field + 4);
        rm_manifest_msg(msg, cap, path, d, pick, &shown);
        rm_escape_ctrl(msg, cap);
    }
    return rc;
}

int rm_sweep_validate(const rm_yaml_docs *d, const char *file, bool json)
{
    rm_sweep sw;
    char msg[1024];
    if (rm_sweep_manifest_load(d, file, &sw, msg, sizeof msg) != RM_OK) {
        fprintf(stderr, "%s\n", msg);
        return 2;
    }
    if (json) {
        cJSON *o = rm_sweep_to_json(&sw);
        cJSON_DeleteItemFromObject(o, "status");
        char *s = o ? cJSON_Print(o) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        cJSON_Delete(o);
    } else {
        rm_tj t0;
        rm_err e = {0};
        int workers = rm_sweep_trial_tj(&sw, 0, &t0, &e) == RM_OK ? t0.spec.replicas : 0;
        if (workers)
            rm_tj_free(&t0);
        printf("%s: valid TrainingSweep %s/%s: %d trials (%s), %d at a time, %d worker(s) each, "
               "objective %s (%s), early stopping %s\n",
               file, sw.namespace_, sw.name, sw.spec.trials,
               sw.spec.algorithm == RM_SWEEP_GRID ? "grid" : "random", sw.spec.parallel_trials, workers,
               rm_sweep_metric_name(sw.spec.metric), sw.spec.maximize ? "maximize" : "minimize",
               sw.spec.early_stopping ? "median" : "off");
    }
    rm_sweep_free(&sw);
    return 0;
}

/* ------------------------------------------------------------------ the trial child */

typedef struct child_ctx {
    int fd; /* status pipe to the runner */
    int last_nevals;
    rm_phase last_phase;
    double last_sent;
} child_ctx;

static void send_status(int fd, const rm_tj_status *st)
{
    cJSON *o = rm_tj_status_to_json(st);
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s)
        return;
    size_t n = strlen(s);
    s[n] = '\n'; /* replaces the terminator; written with its length */
    size_t off = 0;
    while (off < n + 1) {
        ssize_t w = write(fd, s + off, n + 1 - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(s);
}

static void child_tick(void *ud, const rm_local_view *v)
{
    child_ctx *c = ud;
    const rm_tj_status *st = &v->job->status;
    if (st->progress.nevals != c->last_nevals || st->phase != c->last_phase || v->now - c->last_sent >= 1.0) {
        c->last_nevals = st->progress.nevals;
        c->last_phase = st->phase;
        c->last_sent = v->now;
        send_status(c->fd, st);
    }
}

/* Runs in the forked child; never returns. Exit 0 Succeeded, 1 Failed, 2 stopped, 3 could not
 * start. */
static void trial_child(const rm_sweep *sw, int index, int fd, const char *run_dir, const char *ckpt_dir,
                        const char *log_format)
{
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* a runner that dies takes its trials with it */
    int wake_r = -1;
    if (rm_sigwake_install(&wake_r, false) != 0)
        _exit(3);
    if (getppid() == 1)
        _exit(3);
    char path[PATH_MAX + 32];
    rm_sfmt(path, sizeof path, "%s/ringmaster.log", run_dir);
    int lfd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int nfd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (lfd >= 0)
        dup2(lfd, 2); /* the trial's structured log: its own file, not the runner's terminal */
    if (nfd >= 0)
        dup2(nfd, 1);
    rm_tj job;
    rm_err e = {0};
    if (rm_sweep_trial_tj(sw, index, &job, &e) != RM_OK) {
        rm_error("trial could not be made err=\"%s\"", e.msg);
        _exit(3);
    }
    job.generation = 1;
    FILE *human = lfd >= 0 ? fdopen(dup(lfd), "w") : NULL;
    child_ctx cc = {.fd = fd, .last_nevals = -1, .last_phase = RM_PHASE_PENDING};
    rm_local_opts lo = {
        .run_dir = run_dir,
        .checkpoint_dir = ckpt_dir,
        .metrics_addr = "127.0.0.1:0",
        .worker_log_format = log_format,
        .human = human ? human : stderr,
        .on_tick = child_tick,
        .ud = &cc,
        .stop_signal = &rm_sig_stop,
        .wake_fd = wake_r,
    };
    static rm_local_result res;
    int rc = rm_local_run(&job, &lo, &res, &e);
    if (rc != RM_OK) {
        rm_error("trial could not start err=\"%s\"", e.msg);
        job.status.phase = RM_PHASE_FAILED;
        rm_tj_set_condition(&job.status, RM_COND_FAILED, true, "StartFailed", e.msg, 1, rm_wall());
    }
    send_status(fd, &job.status);
    if (human)
        fflush(human);
    _exit(rc != RM_OK ? 3 : res.signal ? 2 : job.status.phase == RM_PHASE_SUCCEEDED ? 0 : 1);
}

/* ------------------------------------------------------------------ the runner */

typedef struct trial_slot {
    pid_t pid; /* 0: not started, -1: ended */
    int fd;    /* status pipe (read end), -1 when closed */
    char *buf; /* partial line */
    size_t len;
    bool stop_sent;
    bool exited;
    int exit_code;
    rm_tj tj; /* the trial: name + spec, status from its last line */
    bool have_tj;
    double started, ended;
} trial_slot;

typedef struct runner {
    rm_sweep *sw;
    const rm_sweep_run_opts *o;
    trial_slot *t;
    char run_dir[PATH_MAX], ckpt_dir[PATH_MAX];
    FILE *out; /* the human channel */
    bool tty;
    int drawn; /* table lines drawn last time (tty) */
    char last_plain[8192];
    double started;
} runner;

static void read_lines(runner *r, int i)
{
    trial_slot *s = &r->t[i];
    char tmp[16384];
    for (;;) {
        ssize_t n = read(s->fd, tmp, sizeof tmp);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            close(s->fd);
            s->fd = -1;
            return;
        }
        for (ssize_t k = 0; k < n; k++) {
            if (tmp[k] != '\n') {
                if (s->len + 1 < LINE_CAP)
                    s->buf[s->len++] = tmp[k];
                else
                    s->len = LINE_CAP; /* over the cap: this line is dropped */
                continue;
            }
            if (s->len < LINE_CAP) {
                rm_err e = {0};
                cJSON *j = rm_json_parse(s->buf, s->len, &e);
                rm_tj_status st;
                memset(&st, 0, sizeof st);
                if (j && rm_tj_status_from_json(j, &st, &e) == RM_OK)
                    s->tj.status = st;
                cJSON_Delete(j);
            }
            s->len = 0;
        }
    }
}

static int start_trial(runner *r, int i)
{
    trial_slot *s = &r->t[i];
    char name[160], rdir[PATH_MAX + 200], cdir[PATH_MAX + 200];
    rm_sweep_trial_name(r->sw, i, name, sizeof name);
    rm_sfmt(rdir, sizeof rdir, "%s/%s", r->run_dir, name);
    rm_sfmt(cdir, sizeof cdir, "%s/%s", r->ckpt_dir, name);
    rm_err e = {0};
    if (rm_fs_mkdir_p(rdir, &e) != RM_OK || rm_fs_mkdir_p(cdir, &e) != RM_OK) {
        fprintf(r->out, "ringmaster: trial %s: %s\n", name, e.msg);
        return RM_EIO;
    }
    rm_run_fresh_checkpoints(cdir);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return RM_EIO;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return RM_EIO;
    }
    if (pid == 0) {
        close(p[0]);
        for (int k = 0; k < r->sw->spec.trials; k++) /* the other trials' pipes are not ours */
            if (r->t[k].fd >= 0)
                close(r->t[k].fd);
        trial_child(r->sw, i, p[1], rdir, cdir, r->o->log_format);
    }
    close(p[1]);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    s->pid = pid;
    s->fd = p[0];
    s->started = rm_wall();
    rm_info("trial started trial=%s pid=%d", name, (int)pid);
    return RM_OK;
}

static void reap(runner *r)
{
    for (;;) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            return;
        for (int i = 0; i < r->sw->spec.trials; i++) {
            trial_slot *s = &r->t[i];
            if (s->pid != pid)
                continue;
            if (s->fd >= 0)
                read_lines(r, i); /* its last line */
            s->exited = true;
            s->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            s->ended = rm_wall();
            s->pid = -1;
        }
    }
}

/* What the core sees of trial i. */
static bool observe(runner *r, int i, rm_sweep_obs *o)
{
    trial_slot *s = &r->t[i];
    if (s->pid == 0 || !s->have_tj)
        return false;
    if (rm_sweep_obs_from_tj(r->sw, &s->tj, o) < 0)
        return false;
    if (s->exited) {
        if (s->stop_sent)
            o->phase = RM_TRIAL_STOPPED;
        else if (s->exit_code == 0 || s->tj.status.phase == RM_PHASE_SUCCEEDED)
            o->phase = RM_TRIAL_SUCCEEDED;
        else {
            o->phase = RM_TRIAL_FAILED;
            const char *why = s->tj.status.conditions[RM_COND_FAILED].reason;
            rm_sfmt(o->reason, sizeof o->reason, "%s", why[0] ? why : "RunnerExited");
        }
    } else if (o->phase != RM_TRIAL_RUNNING) {
        o->phase = RM_TRIAL_RUNNING; /* finished only once its process has ended */
    }
    return true;
}

static void param_str(const rm_sweep *sw, int i, char *buf, size_t cap)
{
    cJSON *p = rm_sweep_trial_params(sw, i);
    buf[0] = 0;
    for (const cJSON *x = p ? p->child : NULL; x; x = x->next) {
        const char *k = strrchr(x->string, '.');
        char *v = cJSON_PrintUnformatted(x);
        size_t l = strlen(buf);
        rm_sfmt(buf + l, cap - l, "%s%s=%s", l ? " " : "", k ? k + 1 : x->string, v ? v : "?");
        free(v);
    }
    cJSON_Delete(p);
}

/* The table of trials (header + one row each) into buf. */
static void render(runner *r, char *buf, size_t cap, int *lines)
{
    const rm_sweep_status *st = &r->sw->status;
    const rm_sweep_spec *sp = &r->sw->spec;
    size_t l = 0;
    int n = 0;
    char best[64] = "-";
    if (st->best >= 0)
        rm_sfmt(best, sizeof best, "%d (%.4f)", st->best, st->best_objective);
    l += (size_t)snprintf(buf + l, cap - l,
                          "sweep %s  %s  trials %d: %d running, %d succeeded, "
                          "%d failed, %d stopped, %d pending  best %s  %.0fs\n",
                          r->sw->name, rm_sweep_phase_name(st->phase), st->total, st->running, st->succeeded,
                          st->failed, st->stopped, st->pending, best, rm_wall() - r->started);
    n++;
    if (l < cap)
        l += (size_t)snprintf(buf + l, cap - l, "%-5s %-44s %-7s %-10s %s\n", "TRIAL", "PARAMETERS", "EPOCH",
                              sp->metric == RM_SWEEP_TEST_ACCURACY ? "ACCURACY"
                              : sp->metric == RM_SWEEP_VAL_LOSS    ? "VAL_LOSS"
                                                                   : "LOSS",
                              "STATE");
    n++;
    for (int i = 0; i < st->total && l < cap; i++) {
        const rm_sweep_trial *t = &st->trials[i];
        char ps[200], obj[32] = "-", ep[16];
        param_str(r->sw, i, ps, sizeof ps);
        double v = t->have_final ? t->final_obj : t->nobj > 0 ? t->obj[t->nobj - 1] : NAN;
        if (isfinite(v))
            rm_sfmt(obj, sizeof obj, "%.4f", v);
        rm_sfmt(ep, sizeof ep, "%d/%d", t->epoch, sp->epochs);
        char state[64];
        rm_sfmt(state, sizeof state, "%s%s%s", rm_trial_phase_name(t->phase), t->reason[0] ? " " : "",
                t->reason);
        l += (size_t)snprintf(buf + l, cap - l, "%-5d %-44.44s %-7s %-10s %s\n", i, ps, ep, obj, state);
        n++;
    }
    if (l >= cap)
        buf[cap - 1] = 0;
    *lines = n;
}

static void draw(runner *r, bool final)
{
    static char buf[65536];
    int lines = 0;
    render(r, buf, sizeof buf, &lines);
    if (r->tty) {
        if (r->drawn > 0)
            fprintf(r->out, "\033[%dA\033[J", r->drawn);
        fputs(buf, r->out);
        r->drawn = final ? 0 : lines;
        fflush(r->out);
        return;
    }
    /* off a terminal: the table when something other than the clock changed */
    char *nl = strchr(buf, '\n');
    const char *body = nl ? nl + 1 : buf;
    if (final || strcmp(body, r->last_plain) != 0) {
        rm_sfmt(r->last_plain, sizeof r->last_plain, "%s", body);
        fputs(buf, r->out);
        fflush(r->out);
    }
}

static void stop_all(runner *r, int sig)
{
    for (int i = 0; i < r->sw->spec.trials; i++)
        if (r->t[i].pid > 0)
            kill(r->t[i].pid, sig);
}

static bool any_alive(const runner *r)
{
    for (int i = 0; i < r->sw->spec.trials; i++)
        if (r->t[i].pid > 0)
            return true;
    return false;
}

/* ---- the sweep operations table (operator/apply.h): a trial is a child process ---- */

static int op_create(void *ud, int index, rm_err *err)
{
    runner *r = ud;
    trial_slot *s = &r->t[index];
    (void)err;
    if (s->pid == 0 && start_trial(r, index) != RM_OK) {
        s->pid = -1; /* observed as ended with no success: Failed */
        s->exited = true;
        s->exit_code = 3;
    }
    return RM_OK;
}

static int op_stop(void *ud, int index, const char *reason, const char *message, rm_err *err)
{
    runner *r = ud;
    trial_slot *s = &r->t[index];
    (void)err;
    if (s->pid > 0 && !s->stop_sent) {
        char name[160];
        rm_sweep_trial_name(r->sw, index, name, sizeof name);
        s->stop_sent = true;
        kill(s->pid, SIGTERM);
        rm_info("trial stopped trial=%s reason=%s message=\"%s\"", name, reason, message);
    }
    return RM_OK;
}

static int op_event(void *ud, int index, bool warning, const char *reason, const char *message, rm_err *err)
{
    runner *r = ud;
    (void)err;
    rm_log_write(warning ? RM_LOG_WARN : RM_LOG_INFO, __FILE__, __LINE__, "event reason=%s message=\"%s\"",
                 reason, message);
    if (!r->tty && index >= 0)
        fprintf(r->out, "event %s: %s\n", reason, message);
    return RM_OK;
}

static const rm_sweep_ops local_sweep_ops = {
    .create_trial = op_create,
    .stop_trial = op_stop,
    .event = op_event,
};

/* One pass: observe every trial, let the sweep core decide, execute its actions. RM_OK, or the
 * core's error (then the caller stops every trial). */
static int sweep_pass(runner *r, rm_sweep_obs *obs, rm_sweep_action *acts)
{
    rm_sweep *sw = r->sw;
    size_t n = 0;
    for (int i = 0; i < sw->spec.trials; i++)
        if (observe(r, i, &obs[n]))
            n++;
    rm_sweep_out so = {.actions = acts, .cap = RM_SWEEP_ACTIONS(sw->spec.trials)};
    int rc = rm_sweep_reconcile(sw, obs, n, rm_wall(), &so);
    if (rc != RM_OK) {
        fprintf(r->out, "ringmaster run: sweep reconcile: %s\n", rm_strerror(rc));
        return rc;
    }
    rm_sweep_status_free(&sw->status);
    sw->status = so.status;
    rm_err e = {0};
    return rm_sweep_apply_actions(&local_sweep_ops, r, acts, so.nactions, &e); /* never fail */
}

/* The folders (checkpoints, run logs) and the human channel. 0, or the exit code to end with. */
static int prepare(runner *r, FILE **term)
{
    const rm_sweep_run_opts *o = r->o;
    const rm_sweep *sw = r->sw;
    if (o->checkpoint_dir)
        rm_sfmt(r->ckpt_dir, sizeof r->ckpt_dir, "%s", o->checkpoint_dir);
    else
        rm_sfmt(r->ckpt_dir, sizeof r->ckpt_dir, "checkpoints/%s", sw->name);
    rm_run_abs_path(r->ckpt_dir, sizeof r->ckpt_dir);
    rm_run_dir_name(o->run_dir, sw->name, r->run_dir, sizeof r->run_dir);
    rm_err e = {0};
    if (rm_fs_dir_writable(r->ckpt_dir, "checkpoint folder", &e) != RM_OK) {
        fprintf(stderr, "ringmaster run: %s\n", e.msg);
        return 2;
    }
    if (rm_fs_mkdir_p(r->run_dir, &e) != RM_OK) {
        fprintf(stderr, "ringmaster run: cannot create %s: %s\n", r->run_dir, e.msg);
        return 1;
    }
    r->tty = isatty(2) && !o->log_json;
    if (r->tty) {
        /* the structured log goes to a file; the terminal gets the live table */
        char lp[PATH_MAX + 32];
        rm_sfmt(lp, sizeof lp, "%s/ringmaster.log", r->run_dir);
        if ((*term = rm_run_tty_to_log(lp)) != NULL)
            r->out = *term;
        else
            r->tty = false;
    }
    return 0;
}

/* stdout: the final TrainingSweep (-o json), or the result table unless stopped by a signal. */
static void print_result(const runner *r, bool stopped)
{
    const rm_sweep *sw = r->sw;
    if (r->o->json) {
        rm_run_print_json(rm_sweep_to_json(sw));
    } else if (!stopped) {
        const rm_sweep_status *st = &sw->status;
        printf("%s: %d trials: %d succeeded, %d failed, %d stopped\n", rm_sweep_phase_name(st->phase),
               st->total, st->succeeded, st->failed, st->stopped);
        if (st->best >= 0) {
            char ps[200], name[160];
            param_str(sw, st->best, ps, sizeof ps);
            printf("best: %s %s %s %.4f\n", rm_sweep_trial_name(sw, st->best, name, sizeof name), ps,
                   rm_sweep_metric_name(sw->spec.metric), st->best_objective);
        }
    }
    fflush(stdout);
}

int rm_sweep_run(const rm_sweep_run_opts *o)
{
    rm_sweep sw;
    char msg[1024];
    if (rm_sweep_manifest_load(o->docs, o->file, &sw, msg, sizeof msg) != RM_OK) {
        fprintf(stderr, "%s\n", msg);
        return 2;
    }
    sw.generation = 1;
    runner r = {.sw = &sw, .o = o, .out = stderr, .started = rm_wall()};
    FILE *term = NULL;
    int code = 1, wake_r = -1;
    rm_sweep_action *acts = NULL;
    r.t = calloc((size_t)sw.spec.trials, sizeof *r.t);
    acts = calloc(RM_SWEEP_ACTIONS(sw.spec.trials), sizeof *acts);
    if (!r.t || !acts) {
        fprintf(stderr, "ringmaster run: out of memory\n");
        goto out;
    }
    for (int i = 0; i < sw.spec.trials; i++) {
        r.t[i].fd = -1;
        r.t[i].buf = malloc(LINE_CAP);
        if (!r.t[i].buf || rm_sweep_trial_tj(&sw, i, &r.t[i].tj, &(rm_err){0}) != RM_OK) {
            fprintf(stderr, "ringmaster run: trial %d could not be made\n", i);
            goto out;
        }
        r.t[i].have_tj = true;
    }
    if ((code = prepare(&r, &term)) != 0)
        goto out;
    code = 1;
    if (rm_sigwake_install(&wake_r, false) != 0) {
        fprintf(stderr, "ringmaster run: pipe: %s\n", strerror(errno));
        goto out;
    }
    fprintf(r.out, "ringmaster: sweep %s: %d trials, %d at a time; logs in %s, checkpoints in %s\n", sw.name,
            sw.spec.trials, sw.spec.parallel_trials, r.run_dir, r.ckpt_dir);
    rm_info("sweep started sweep=%s trials=%d parallel=%d run_dir=%s", sw.name, sw.spec.trials,
            sw.spec.parallel_trials, r.run_dir);

    int stopping = 0;
    double stop_at = 0;
    rm_sweep_obs *obs = calloc((size_t)sw.spec.trials, sizeof *obs);
    struct pollfd *pf = calloc((size_t)sw.spec.trials + 1, sizeof *pf);
    int *pf_trial = calloc((size_t)sw.spec.trials + 1, sizeof *pf_trial);
    if (!obs || !pf || !pf_trial) {
        free(obs);
        free(pf);
        free(pf_trial);
        goto out;
    }
    double last_draw = 0;
    for (;;) {
        reap(&r);
        if (rm_sig_stop && !stopping) {
            stopping = rm_sig_stop;
            stop_at = rm_wall();
            stop_all(&r, SIGTERM); /* each trial checkpoints and stops */
            fprintf(r.out, "ringmaster: stopping every trial (signal %d)\n", stopping);
        }
        if (stopping) {
            if (!any_alive(&r))
                break;
            if (rm_wall() - stop_at > 30)
                stop_all(&r, SIGKILL);
        } else {
            if (sweep_pass(&r, obs, acts) != RM_OK) {
                stop_all(&r, SIGTERM);
                stopping = SIGTERM;
                stop_at = rm_wall();
                continue;
            }
            if ((sw.status.phase == RM_SWEEP_SUCCEEDED || sw.status.phase == RM_SWEEP_FAILED) &&
                !any_alive(&r))
                break;
        }
        double now = rm_wall();
        if (now - last_draw >= (r.tty ? 0.5 : 1.0)) {
            draw(&r, false);
            last_draw = now;
        }
        int np = 0;
        pf[np].fd = wake_r;
        pf[np].events = POLLIN;
        pf_trial[np++] = -1;
        for (int i = 0; i < sw.spec.trials; i++)
            if (r.t[i].fd >= 0) {
                pf[np].fd = r.t[i].fd;
                pf[np].events = POLLIN;
                pf_trial[np++] = i;
            }
        int pr = poll(pf, (nfds_t)np, TICK_MS);
        if (pr > 0) {
            for (int k = 0; k < np; k++) {
                if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                if (pf_trial[k] < 0) {
                    char drain[64];
                    while (read(wake_r, drain, sizeof drain) > 0) {
                    }
                } else {
                    read_lines(&r, pf_trial[k]);
                }
            }
        }
    }
    free(obs);
    free(pf);
    free(pf_trial);
    draw(&r, true);
    if (stopping) {
        fprintf(r.out, "ringmaster: sweep %s stopped by signal %d\n", sw.name, stopping);
        code = stopping == SIGTERM ? 143 : stopping == SIGHUP ? 129 : 130;
    } else {
        code = sw.status.phase == RM_SWEEP_SUCCEEDED ? 0 : 1;
    }
    print_result(&r, stopping != 0);
out:
    if (term)
        fclose(term);
    if (r.t) {
        stop_all(&r, SIGKILL); /* nothing is alive here unless start-up failed half-way */
        for (int i = 0; i < sw.spec.trials; i++) {
            if (r.t[i].fd >= 0)
                close(r.t[i].fd);
            free(r.t[i].buf);
            if (r.t[i].have_tj)
                rm_tj_free(&r.t[i].tj);
        }
        free(r.t);
    }
    free(acts);
    rm_sweep_free(&sw);
    return code;
}
