/* kubectl.c — `kubectl ringmaster` (see kubectl.h). */
#include "operator/kubectl.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/clock.h"
#include "common/json.h"
#include "common/tj_runtime.h"
#include "common/trainingjob.h"
#include "operator/kube/client.h"
#include "operator/kube/runtime.h"

#define TJ_API "/apis/ringmaster.dev/v1alpha1"
#define RT_API "/apis/ringmaster.dev/v1alpha1" /* TrainingRuntime, ClusterTrainingRuntime */
#define LOG_LINE_CAP (64 * 1024)
#define MAX_PODS 1024

static const char *const k_cmds[] = {"logs",    "status",   "suspend",    "resume",
                                     "restart", "runtimes", "completion", NULL};
static const rm_kubectl_cmd k_cmd_ids[] = {RM_KC_LOGS,    RM_KC_STATUS,   RM_KC_SUSPEND,   RM_KC_RESUME,
                                           RM_KC_RESTART, RM_KC_RUNTIMES, RM_KC_COMPLETION};

/* ---------------- parsing ---------------- */

/* "--name VALUE" or "--name=VALUE" (and "-n VALUE" / "-nVALUE" for short): 1 matched (value
 * set, *i advanced past a separate value), 0 not this flag, <0 value missing. */
static int flag_value(int argc, char **argv, int *i, const char *lng, const char *shrt, const char **val)
{
    const char *s = argv[*i];
    size_t ll = strlen(lng);
    if (!strcmp(s, lng) || (shrt && !strcmp(s, shrt))) {
        if (*i + 1 >= argc)
            return -1;
        *val = argv[++*i];
        return 1;
    }
    if (!strncmp(s, lng, ll) && s[ll] == '=') {
        *val = s + ll + 1;
        return 1;
    }
    if (shrt && !strncmp(s, shrt, strlen(shrt)) && s[strlen(shrt)]) {
        *val = s + strlen(shrt);
        return 1;
    }
    return 0;
}

static bool parse_long(const char *s, long lo, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > 1000000000L)
        return false;
    *out = v;
    return true;
}

int rm_kubectl_parse(int argc, char **argv, rm_kubectl_args *a, rm_err *err)
{
    memset(a, 0, sizeof(*a));
    a->cmd = RM_KC_HELP;
    a->rank = -1;
    a->tail = -1;
    bool have_cmd = false;
    const char *pos[4];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v = NULL;
        if (have_cmd && a->cmd == RM_KC_COMPLETE) { /* everything after __complete is a word */
            if (a->nwords < RM_KC_MAX_WORDS)
                a->words[a->nwords++] = s;
            continue;
        }
        int r;
        static const struct {
            const char *lng, *shrt;
        } vf[] = {{"--kubeconfig", NULL}, {"--context", NULL}, {"--namespace", "-n"},
                  {"--rank", NULL},       {"--role", NULL},    {"--tail", NULL}};
        bool matched = false;
        for (size_t f = 0; f < RM_ARRAY_LEN(vf) && !matched; f++) {
            if ((r = flag_value(argc, argv, &i, vf[f].lng, vf[f].shrt, &v)) < 0)
                return rm_errf(err, RM_EINVAL, "%s: a value is required", vf[f].lng);
            if (r == 0)
                continue;
            matched = true;
            long n;
            switch (f) {
            case 0:
                a->kubeconfig = v;
                break;
            case 1:
                a->context = v;
                break;
            case 2:
                if (!*v)
                    return rm_errf(err, RM_EINVAL, "--namespace: must not be empty");
                a->ns = v;
                break;
            case 3:
                if (!parse_long(v, 0, &n))
                    return rm_errf(err, RM_EINVAL, "--rank: must be an integer >= 0 (got \"%s\")", v);
                a->rank = (int)n;
                break;
            case 4:
                if (!strcmp(v, "worker"))
                    a->role = RM_KC_ROLE_WORKER;
                else if (!strcmp(v, "ps"))
                    a->role = RM_KC_ROLE_PS;
                else
                    return rm_errf(err, RM_EINVAL, "--role: worker or ps (got \"%s\")", v);
                break;
            default:
                if (!parse_long(v, 0, &n))
                    return rm_errf(err, RM_EINVAL, "--tail: must be an integer >= 0 (got \"%s\")", v);
                a->tail = n;
                break;
            }
        }
        if (matched)
            continue;
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            a->help = true;
        } else if (!strcmp(s, "-f") || !strcmp(s, "--follow")) {
            a->follow = true;
        } else if (s[0] == '-' && s[1]) {
            return rm_errf(err, RM_EINVAL, "unknown flag %s", s);
        } else if (!have_cmd) {
            have_cmd = true;
            if (!strcmp(s, "__complete")) {
                a->cmd = RM_KC_COMPLETE;
                continue;
            }
            if (!strcmp(s, "help")) {
                a->cmd = RM_KC_HELP;
                continue;
            }
            int k = 0;
            while (k_cmds[k] && strcmp(k_cmds[k], s))
                k++;
            if (!k_cmds[k])
                return rm_errf(err, RM_EINVAL,
                               "unknown command \"%s\" (logs, status, suspend, resume, restart, "
                               "runtimes, completion)",
                               s);
            a->cmd = k_cmd_ids[k];
        } else if (npos < (int)RM_ARRAY_LEN(pos)) {
            pos[npos++] = s;
        } else {
            return rm_errf(err, RM_EINVAL, "too many arguments (\"%s\")", s);
        }
    }
    if (a->help || a->cmd == RM_KC_HELP || a->cmd == RM_KC_COMPLETE)
        return RM_OK;
    const char *name = k_cmds[a->cmd - RM_KC_LOGS];
    bool wants_job = a->cmd != RM_KC_RUNTIMES && a->cmd != RM_KC_COMPLETION;
    if (a->cmd == RM_KC_COMPLETION) {
        if (npos != 1 || strcmp(pos[0], "bash") != 0)
            return rm_errf(err, RM_EINVAL, "completion: the shell is required: bash");
        a->shell = pos[0];
    } else if (wants_job) {
        if (npos == 0)
            return rm_errf(err, RM_EINVAL, "%s: a TrainingJob name is required", name);
        if (npos > 1)
            return rm_errf(err, RM_EINVAL, "%s: one TrainingJob at a time (got \"%s\" and \"%s\")", name,
                           pos[0], pos[1]);
        a->job = pos[0];
    } else if (npos > 0) {
        return rm_errf(err, RM_EINVAL, "%s: takes no arguments (got \"%s\")", name, pos[0]);
    }
    if (a->cmd != RM_KC_LOGS && (a->follow || a->rank >= 0 || a->role || a->tail >= 0))
        return rm_errf(err, RM_EINVAL, "%s: -f, --rank, --role and --tail are logs flags", name);
    if (a->rank >= 0 && a->role == RM_KC_ROLE_PS)
        return rm_errf(err, RM_EINVAL, "--rank: selects a worker; --role ps selects the servers (use one)");
    return RM_OK;
}

void rm_kubectl_usage(FILE *out, rm_kubectl_cmd cmd)
{
    static const char *const flags =
        "kubectl's flags: --kubeconfig FILE, --context NAME, -n/--namespace NS\n";
    switch (cmd) {
    case RM_KC_LOGS:
        fprintf(out,
                "usage: kubectl ringmaster logs JOB [-f] [--rank R] [--role worker|ps] [--tail N]\n"
                "  every pod's log, each line prefixed with [worker-I] or [ps-I]; merged by the lines'\n"
                "  timestamps, or as they arrive with -f (--follow), which follows a replaced pod to its\n"
                "  successor and ends when the job has finished.\n"
                "  --rank R   only worker R (its replica index)   --role   only workers or only servers\n"
                "  --tail N   the last N lines of each pod\n%s",
                flags);
        break;
    case RM_KC_STATUS:
        fprintf(out,
                "usage: kubectl ringmaster status JOB\n  phase, workers, progress and ETA, the last "
                "failure and why, conditions and recent events\n%s",
                flags);
        break;
    case RM_KC_SUSPEND:
    case RM_KC_RESUME:
        fprintf(out, "usage: kubectl ringmaster %s JOB\n  sets spec.runPolicy.suspend to %s%s\n%s",
                cmd == RM_KC_SUSPEND ? "suspend" : "resume", cmd == RM_KC_SUSPEND ? "true" : "false",
                cmd == RM_KC_SUSPEND ? " (the workers checkpoint and stop; resume continues from there)" : "",
                flags);
        break;
    case RM_KC_RESTART:
        fprintf(out,
                "usage: kubectl ringmaster restart JOB\n  deletes the job's worker pods: the operator "
                "re-forms the group from the newest checkpoint\n  (one group restart, as after a "
                "failure)\n%s",
                flags);
        break;
    case RM_KC_RUNTIMES:
        fprintf(out,
                "usage: kubectl ringmaster runtimes\n  the TrainingRuntimes of the namespace and the "
                "ClusterTrainingRuntimes\n%s",
                flags);
        break;
    case RM_KC_COMPLETION:
        fprintf(out,
                "usage: kubectl ringmaster completion bash\n  prints a bash completion script: source it, "
                "or save it under\n  /etc/bash_completion.d/; for `kubectl ringmaster <TAB>` also put "
                "kubectl_complete-ringmaster\n  (a link to this program) on PATH\n");
        break;
    default:
        fprintf(out,
                "usage: kubectl ringmaster <command> [flags]   (the ringmaster binary installed as\n"
                "       kubectl-ringmaster on PATH; `ringmaster kubectl <command>` is the same)\n"
                "  logs JOB [-f] [--rank R] [--role worker|ps] [--tail N]   every worker's log, merged\n"
                "  status JOB       phase, workers, progress, ETA, last failure, conditions, events\n"
                "  suspend JOB      pause (checkpoint and stop the workers)\n"
                "  resume JOB       continue a suspended job\n"
                "  restart JOB      re-form the group from the newest checkpoint\n"
                "  runtimes         TrainingRuntimes and ClusterTrainingRuntimes\n"
                "  completion bash  a bash completion script\n"
                "  <command> --help for each\n%s",
                flags);
    }
}

/* ---------------- the API ---------------- */

typedef struct kc {
    rm_kube_client *cl;
    const char *ns;
    char nsbuf[256];
} kc;

static int kc_open(const rm_kubectl_args *a, kc *k, rm_err *err)
{
    rm_kube_config cfg = {0};
    int rc;
    if (a->context) {
        const char *path = a->kubeconfig;
        char buf[4096];
        if (!path) {
            const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
            if (env && *env) {
                snprintf(buf, sizeof buf, "%s", env);
                buf[strcspn(buf, ":")] = 0;
            } else {
                snprintf(buf, sizeof buf, "%s/.kube/config", home ? home : "");
            }
            path = buf;
        }
        rc = rm_kube_config_load(path, a->context, &cfg, err);
    } else {
        rc = rm_kube_config_auto(a->kubeconfig, &cfg, err);
    }
    if (rc != RM_OK)
        return rc;
    snprintf(k->nsbuf, sizeof k->nsbuf, "%s", a->ns ? a->ns : cfg.namespace_ ? cfg.namespace_ : "default");
    k->ns = k->nsbuf;
    rm_kube_client_opts o = {
        .qps = -1, .max_retries = 3, .timeout_ms = 15000, .user_agent = "kubectl-ringmaster"};
    rc = rm_kube_client_new(&cfg, &o, &k->cl, err);
    rm_kube_config_free(&cfg);
    return rc;
}

static int get_json(kc *k, const char *path, cJSON **out, rm_err *err)
{
    return rm_kube_json(k->cl, "GET", path, NULL, NULL, out, err);
}

static int get_job(kc *k, const char *job, cJSON **out, rm_err *err)
{
    char path[768];
    snprintf(path, sizeof path, TJ_API "/namespaces/%s/trainingjobs/%s", k->ns, job);
    int rc = get_json(k, path, out, err);
    if (rc == RM_ENOTFOUND)
        return rm_errf(err, rc, "TrainingJob %s/%s not found", k->ns, job);
    return rc;
}

static const char *jstr(const cJSON *o, const char *path, const char *dflt)
{
    const cJSON *v = rm_json_path(o, path);
    return cJSON_IsString(v) ? v->valuestring : dflt;
}

static double jnum(const cJSON *o, const char *path, double dflt)
{
    const cJSON *v = rm_json_path(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static void fmt_dur(char *buf, size_t cap, double s)
{
    if (!(s >= 0)) {
        snprintf(buf, cap, "-");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, cap, "%lds", t);
}

static double age_of(const char *ts)
{
    double t = 0;
    return ts && rm_json_parse_time(ts, &t) == RM_OK ? rm_wall() - t : -1;
}

static bool terminal_phase(const char *ph)
{
    return ph && (!strcmp(ph, "Succeeded") || !strcmp(ph, "Failed"));
}

/* ---------------- status ---------------- */

static int cmd_status(kc *k, const char *job, rm_err *err)
{
    cJSON *tj = NULL;
    RM_CHECK(get_job(k, job, &tj, err));
    /* the spec the job runs: its runtime's template (as resolved, status.runtime) under its own
     * fields, then the defaults (the CRD writes none: docs/trainingjob-api.md#runtimes) */
    const cJSON *rtt = rm_json_path(tj, "status.runtime.template");
    rm_err pe = {0};
    if (cJSON_IsObject(rtt) && rm_json_path(tj, "spec.runtimeRef")) {
        cJSON *t = cJSON_Duplicate(rtt, 1);
        if (t)
            rm_runtime_apply(tj, t, &pe);
        cJSON_Delete(t);
    }
    rm_tj parsed;
    bool have = rm_tj_from_json(tj, &parsed, &pe) == RM_OK;
    if (have)
        rm_tj_defaults(&parsed);
    const char *phase = jstr(tj, "status.phase", "Pending");
    char age[32], buf[64];
    fmt_dur(age, sizeof age, age_of(jstr(tj, "metadata.creationTimestamp", NULL)));
    printf("TrainingJob %s/%s   %s   age %s\n", k->ns, job, phase, age);
    int rep = have ? parsed.spec.replicas : (int)jnum(tj, "spec.replicas", 1);
    printf(
        "  workers     %d/%d ready (desired %d, min %d, max %d)   restarts %d of %d   rendezvous epoch %d\n",
        (int)jnum(tj, "status.readyReplicas", 0), (int)jnum(tj, "status.replicas", 0), rep,
        have ? parsed.spec.min_replicas : (int)jnum(tj, "spec.minReplicas", rep),
        have ? parsed.spec.max_replicas : (int)jnum(tj, "spec.maxReplicas", rep),
        (int)jnum(tj, "status.restarts", 0),
        have ? parsed.spec.restart.max_restarts : (int)jnum(tj, "spec.restartPolicy.maxRestarts", 5),
        (int)jnum(tj, "status.epoch", 0));
    if (rm_json_path(tj, "status.runtime"))
        printf("  runtime     %s/%s (generation %.0f, as the job resolved it)\n",
               jstr(tj, "status.runtime.kind", ""), jstr(tj, "status.runtime.name", ""),
               jnum(tj, "status.runtime.generation", 0));
    if (rm_json_path(tj, "status.parameterServers"))
        printf("  servers     %d/%d ready\n", (int)jnum(tj, "status.parameterServers.readyReplicas", 0),
               (int)jnum(tj, "status.parameterServers.replicas", 0));
    /* the step budget from the spec, as the controllers count it (common/trainingjob.h) */
    double total = 0;
    if (have) {
        total = rm_tj_steps_total(&parsed.spec);
        rm_tj_free(&parsed);
    }
    double step = jnum(tj, "status.progress.step", 0);
    char pct[32] = "";
    double p = jnum(tj, "status.progress.percent", -1);
    if (p < 0 && total > 0)
        p = 100.0 * step / total;
    if (p >= 0)
        snprintf(pct, sizeof pct, " (%.0f%%)", p > 100 ? 100 : p);
    fmt_dur(buf, sizeof buf, jnum(tj, "status.progress.etaSeconds", -1));
    if (total > 0)
        printf(
            "  progress    step %.0f / %.0f%s   epoch %d   loss %.4f   %.0f samples/s   checkpoint at step "
            "%.0f   ETA %s\n",
            step, total, pct, (int)jnum(tj, "status.progress.epoch", 0), jnum(tj, "status.progress.loss", 0),
            jnum(tj, "status.progress.samplesPerSecond", 0),
            jnum(tj, "status.progress.lastCheckpointStep", 0), buf);
    else
        printf("  progress    step %.0f   epoch %d   loss %.4f   %.0f samples/s   ETA %s\n", step,
               (int)jnum(tj, "status.progress.epoch", 0), jnum(tj, "status.progress.loss", 0),
               jnum(tj, "status.progress.samplesPerSecond", 0), buf);
    const cJSON *res = rm_json_path(tj, "status.result");
    if (res)
        printf("  result      steps %.0f   testAccuracy %.4f   trainLoss %.4f   valLoss %s   %.0f s\n",
               jnum(res, "steps", 0), jnum(res, "testAccuracy", 0), jnum(res, "trainLoss", 0),
               rm_json_path(res, "valLoss")
                   ? (snprintf(buf, sizeof buf, "%.4f", jnum(res, "valLoss", 0)), buf)
                   : "-",
               jnum(res, "seconds", 0));
    /* the last failure: the newest condition that says something went wrong */
    const cJSON *conds = rm_json_path(tj, "status.conditions"), *c, *worst = NULL;
    double worst_t = -1;
    cJSON_ArrayForEach(c, conds)
    {
        const char *type = jstr(c, "type", ""), *st = jstr(c, "status", "");
        bool bad =
            (!strcmp(type, "Failed") || !strcmp(type, "Restarting") || !strcmp(type, "CheckpointFailing") ||
             !strcmp(type, "InvalidSpec") || !strcmp(type, "ExportFailing") || !strcmp(type, "Blocked")) &&
            !strcmp(st, "True");
        double t = 0;
        rm_json_parse_time(jstr(c, "lastTransitionTime", ""), &t);
        if (bad && t >= worst_t) {
            worst = c;
            worst_t = t;
        }
    }
    if (worst)
        printf("  last failure %s: %s: %s\n", jstr(worst, "type", ""), jstr(worst, "reason", ""),
               jstr(worst, "message", ""));
    else
        printf("  last failure none\n");
    printf("conditions:\n");
    cJSON_ArrayForEach(c, conds)
    {
        fmt_dur(buf, sizeof buf, age_of(jstr(c, "lastTransitionTime", NULL)));
        printf("  %-18s %-6s %-7s %-22s %s\n", jstr(c, "type", ""), jstr(c, "status", ""), buf,
               jstr(c, "reason", ""), jstr(c, "message", ""));
    }
    /* events about the job, newest last (at most 10) */
    char path[1024], sel[512], esc[600];
    snprintf(sel, sizeof sel, "involvedObject.name=%s", job);
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/events?fieldSelector=%s", k->ns,
             rm_kube_escape(sel, esc, sizeof esc));
    cJSON *evs = NULL;
    rm_err ee = {0};
    printf("events:\n");
    if (get_json(k, path, &evs, &ee) == RM_OK) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(evs, "items"), *e;
        int n = cJSON_GetArraySize(items), shown = 0;
        cJSON_ArrayForEach(e, items)
        {
            if (strcmp(jstr(e, "involvedObject.kind", "TrainingJob"), "TrainingJob") != 0 || n - shown++ > 10)
                continue;
            const char *ts =
                jstr(e, "lastTimestamp", jstr(e, "eventTime", jstr(e, "metadata.creationTimestamp", NULL)));
            fmt_dur(buf, sizeof buf, age_of(ts));
            printf("  %-7s %-7s %-22s %s\n", buf, jstr(e, "type", ""), jstr(e, "reason", ""),
                   jstr(e, "message", ""));
        }
    } else {
        printf("  (cannot list events: %s)\n", ee.msg);
    }
    cJSON_Delete(evs);
    cJSON_Delete(tj);
    return RM_OK;
}

/* ---------------- suspend / resume / restart ---------------- */

static int cmd_suspend(kc *k, const char *job, bool suspend, rm_err *err)
{
    char path[768];
    snprintf(path, sizeof path, TJ_API "/namespaces/%s/trainingjobs/%s", k->ns, job);
    cJSON *patch = cJSON_Parse(suspend ? "{\"spec\":{\"runPolicy\":{\"suspend\":true}}}"
                                       : "{\"spec\":{\"runPolicy\":{\"suspend\":false}}}");
    int rc = rm_kube_json(k->cl, "PATCH", path, "application/merge-patch+json", patch, NULL, err);
    cJSON_Delete(patch);
    if (rc == RM_ENOTFOUND)
        return rm_errf(err, rc, "TrainingJob %s/%s not found", k->ns, job);
    RM_CHECK(rc);
    printf("trainingjob.ringmaster.dev/%s %s\n", job, suspend ? "suspended" : "resumed");
    return RM_OK;
}

typedef struct pod_ref {
    char name[256], uid[64];
    bool ps;
    int index;
} pod_ref;

/* The job's pods, filtered by role and rank, sorted servers last then by index. */
static int list_pods(kc *k, const char *job, rm_kubectl_role role, int rank, pod_ref *out, int cap, int *n,
                     rm_err *err)
{
    char path[1024], sel[512], esc[600];
    snprintf(sel, sizeof sel, RM_LABEL_JOB "=%s", job);
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods?labelSelector=%s", k->ns,
             rm_kube_escape(sel, esc, sizeof esc));
    cJSON *list = NULL;
    RM_CHECK(get_json(k, path, &list, err));
    *n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(list, "items"))
    {
        const cJSON *lb = rm_json_path(p, "metadata.labels");
        const cJSON *psi = cJSON_GetObjectItemCaseSensitive(lb, RM_LABEL_PS_INDEX);
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(lb, RM_LABEL_INDEX);
        bool ps = cJSON_IsString(psi);
        int i = ps ? atoi(psi->valuestring) : cJSON_IsString(idx) ? atoi(idx->valuestring) : -1;
        if ((role == RM_KC_ROLE_PS && !ps) || (role == RM_KC_ROLE_WORKER && ps) ||
            (rank >= 0 && (ps || i != rank)) || *n >= cap)
            continue;
        pod_ref *r = &out[(*n)++];
        snprintf(r->name, sizeof r->name, "%s", jstr(p, "metadata.name", ""));
        snprintf(r->uid, sizeof r->uid, "%s", jstr(p, "metadata.uid", ""));
        r->ps = ps;
        r->index = i;
    }
    cJSON_Delete(list);
    for (int i = 1; i < *n; i++) /* insertion sort: workers by index, then servers */
        for (int j = i; j > 0; j--) {
            pod_ref *a = &out[j - 1], *b = &out[j];
            if (a->ps > b->ps || (a->ps == b->ps && a->index > b->index)) {
                pod_ref t = *a;
                *a = *b;
                *b = t;
            }
        }
    return RM_OK;
}

static int cmd_restart(kc *k, const char *job, rm_err *err)
{
    cJSON *tj = NULL;
    RM_CHECK(get_job(k, job, &tj, err));
    const char *phase = jstr(tj, "status.phase", "Pending");
    if (terminal_phase(phase) || !strcmp(phase, "Suspended")) {
        int rc = rm_errf(err, RM_EINVAL, "TrainingJob %s/%s is %s: nothing to restart", k->ns, job, phase);
        cJSON_Delete(tj);
        return rc;
    }
    cJSON_Delete(tj);
    pod_ref *pods = calloc(MAX_PODS, sizeof *pods);
    if (!pods)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    int n = 0, rc = list_pods(k, job, RM_KC_ROLE_WORKER, -1, pods, MAX_PODS, &n, err);
    for (int i = 0; rc == RM_OK && i < n; i++) {
        char path[768];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", k->ns, pods[i].name);
        rc = rm_kube_json(k->cl, "DELETE", path, NULL, NULL, NULL, err);
        if (rc == RM_ENOTFOUND)
            rc = RM_OK;
    }
    if (rc == RM_OK)
        printf(
            "trainingjob.ringmaster.dev/%s restarting (%d worker pods deleted; the group re-forms from the "
            "newest checkpoint)\n",
            job, n);
    free(pods);
    return rc;
}

/* ---------------- runtimes ---------------- */

static int list_runtimes(kc *k, const char *path, const char *kind, bool namespaced, int *shown, rm_err *err)
{
    cJSON *list = NULL;
    int rc = get_json(k, path, &list, err);
    if (rc == RM_ENOTFOUND) {
        printf("%s: not installed (no %s CRD on this cluster)\n", kind, kind);
        err->msg[0] = 0;
        return RM_OK;
    }
    RM_CHECK(rc);
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items"))
    {
        char age[32];
        fmt_dur(age, sizeof age, age_of(jstr(it, "metadata.creationTimestamp", NULL)));
        char reps[16] = "-";
        if (cJSON_IsNumber(rm_json_path(it, "spec.template.replicas")))
            snprintf(reps, sizeof reps, "%.0f", jnum(it, "spec.template.replicas", 0));
        if (!(*shown)++)
            printf("%-24s %-32s %-12s %-8s %-8s %-10s %s\n", "KIND", "NAME", "NAMESPACE", "BACKEND",
                   "REPLICAS", "GENERATION", "AGE");
        printf("%-24s %-32s %-12s %-8s %-8s %-10.0f %s\n", kind, jstr(it, "metadata.name", ""),
               namespaced ? jstr(it, "metadata.namespace", "") : "-", jstr(it, "spec.template.backend", "-"),
               reps, jnum(it, "metadata.generation", 0), age);
    }
    cJSON_Delete(list);
    return RM_OK;
}

static int cmd_runtimes(kc *k, rm_err *err)
{
    char path[512];
    int shown = 0;
    snprintf(path, sizeof path, RT_API "/namespaces/%s/trainingruntimes", k->ns);
    RM_CHECK(list_runtimes(k, path, "TrainingRuntime", true, &shown, err));
    RM_CHECK(
        list_runtimes(k, RT_API "/clustertrainingruntimes", "ClusterTrainingRuntime", false, &shown, err));
    if (!shown)
        printf("no runtimes in namespace %s and none cluster-wide\n", k->ns);
    return RM_OK;
}

/* ---------------- logs ---------------- */

typedef struct log_line {
    char *text; /* "[worker-0] ts=... rest" */
    char ts[40];
    size_t seq;
} log_line;

static void prefix_of(const pod_ref *p, char *buf, size_t cap)
{
    snprintf(buf, cap, "[%s-%d] ", p->ps ? "ps" : "worker", p->index);
}

/* The timestamp a worker's line starts with ("ts=2026-...Z"), "" if none. */
static void line_ts(const char *line, char out[40])
{
    out[0] = 0;
    if (strncmp(line, "ts=", 3) == 0) {
        size_t n = strcspn(line + 3, " ");
        if (n < 40)
            snprintf(out, 40, "%.*s", (int)n, line + 3);
    }
}

static int by_ts(const void *a, const void *b)
{
    const log_line *x = a, *y = b;
    int c = strcmp(x->ts, y->ts);
    return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* Every selected pod's log, merged by the lines' timestamps (a line without one keeps the
 * timestamp of the line before it in its pod). */
static int logs_once(kc *k, const rm_kubectl_args *a, rm_err *err)
{
    pod_ref *pods = calloc(MAX_PODS, sizeof *pods);
    if (!pods)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    int n = 0;
    int rc = list_pods(k, a->job, a->role, a->rank, pods, MAX_PODS, &n, err);
    log_line *lines = NULL;
    size_t nl = 0, cap = 0;
    for (int i = 0; rc == RM_OK && i < n; i++) {
        char path[1024], pre[64];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/log?container=worker", k->ns,
                 pods[i].name);
        if (a->tail >= 0)
            snprintf(path + strlen(path), sizeof path - strlen(path), "&tailLines=%ld", a->tail);
        rm_kube_resp r = {0};
        int qrc = rm_kube_request(k->cl, "GET", path, NULL, NULL, 0, &r, err);
        if (qrc != RM_OK || r.status != 200) { /* a pod not started yet has no log: say so, go on */
            fprintf(stderr, "kubectl ringmaster: no log from %s (%s)\n", pods[i].name,
                    qrc != RM_OK      ? err->msg
                    : r.status == 400 ? "not started"
                                      : "refused");
            rm_kube_resp_free(&r);
            err->msg[0] = 0;
            continue;
        }
        prefix_of(&pods[i], pre, sizeof pre);
        char last_ts[40] = "";
        for (char *s = r.body, *e; s && *s; s = e ? e + 1 : NULL) {
            e = strchr(s, '\n');
            if (e)
                *e = 0;
            if (!*s)
                continue;
            if (nl == cap) {
                size_t nc = cap ? cap * 2 : 1024;
                log_line *g = realloc(lines, nc * sizeof *g);
                if (!g) {
                    rc = rm_errf(err, RM_ENOMEM, "out of memory");
                    break;
                }
                lines = g;
                cap = nc;
            }
            log_line *l = &lines[nl];
            line_ts(s, l->ts);
            if (!l->ts[0])
                memcpy(l->ts, last_ts, sizeof last_ts);
            else
                memcpy(last_ts, l->ts, sizeof last_ts);
            size_t len = strlen(pre) + strlen(s) + 1;
            if (!(l->text = malloc(len))) {
                rc = rm_errf(err, RM_ENOMEM, "out of memory");
                break;
            }
            snprintf(l->text, len, "%s%s", pre, s);
            l->seq = nl++;
        }
        rm_kube_resp_free(&r);
    }
    if (rc == RM_OK) {
        qsort(lines, nl, sizeof *lines, by_ts);
        for (size_t i = 0; i < nl; i++)
            puts(lines[i].text);
    }
    for (size_t i = 0; i < nl; i++)
        free(lines[i].text);
    free(lines);
    free(pods);
    if (rc == RM_OK && n == 0)
        fprintf(stderr, "kubectl ringmaster: TrainingJob %s/%s has no pods%s\n", k->ns, a->job,
                a->rank >= 0 || a->role ? " that match" : "");
    return rc;
}

typedef struct follower {
    kc *k;
    const char *job;
    pod_ref pod;
    pthread_mutex_t *out_mu;
    atomic_bool *stop;
    long tail;
    pthread_t th;
} follower;

static int follow_line(void *ud, char *line, size_t len)
{
    follower *f = ud;
    char pre[64];
    if (!line)
        return 0;
    prefix_of(&f->pod, pre, sizeof pre);
    pthread_mutex_lock(f->out_mu);
    fputs(pre, stdout);
    fwrite(line, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(f->out_mu);
    return 0;
}

/* Whether the job has finished (or is gone). */
static bool job_done(kc *k, const char *job)
{
    cJSON *tj = NULL;
    rm_err e = {0};
    int rc = get_job(k, job, &tj, &e);
    bool done = rc == RM_ENOTFOUND || (rc == RM_OK && terminal_phase(jstr(tj, "status.phase", NULL)));
    cJSON_Delete(tj);
    return done;
}

/* One pod name: stream its log; when the stream ends, wait for a successor (a new uid under the
 * same name) and stream that from its start; end once the job has finished. */
static void *follow_main(void *arg)
{
    follower *f = arg;
    char done_uid[64] = "";
    long tail = f->tail;
    while (!atomic_load(f->stop)) {
        char path[1024];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", f->k->ns, f->pod.name);
        cJSON *pod = NULL;
        rm_err e = {0};
        int rc = get_json(f->k, path, &pod, &e);
        const char *uid = rc == RM_OK ? jstr(pod, "metadata.uid", "") : "";
        const char *phase = rc == RM_OK ? jstr(pod, "status.phase", "Pending") : "";
        bool started = rc == RM_OK && (strcmp(phase, "Pending") != 0);
        char cur[64];
        snprintf(cur, sizeof cur, "%s", uid);
        cJSON_Delete(pod);
        if (!started || !strcmp(cur, done_uid)) { /* not there yet, or its log already shown */
            if (job_done(f->k, f->job) && (rc != RM_OK || !strcmp(cur, done_uid)))
                break;
            usleep(500 * 1000);
            continue;
        }
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/log?container=worker&follow=true",
                 f->k->ns, f->pod.name);
        if (tail >= 0)
            snprintf(path + strlen(path), sizeof path - strlen(path), "&tailLines=%ld", tail);
        tail = -1; /* a successor's log is shown whole */
        long status = 0;
        rc = rm_kube_stream(f->k->cl, path, LOG_LINE_CAP, 0, f->stop, follow_line, f, &status, NULL, &e);
        if (rc == RM_OK && status == 200)
            snprintf(done_uid, sizeof done_uid, "%s", cur);
        else
            usleep(500 * 1000);
    }
    return NULL;
}

static int logs_follow(kc *k, const rm_kubectl_args *a, rm_err *err)
{
    pod_ref *pods = calloc(MAX_PODS, sizeof *pods);
    follower *fs = calloc(MAX_PODS, sizeof *fs);
    if (!pods || !fs) {
        free(pods);
        free(fs);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    int n = 0, rc = list_pods(k, a->job, a->role, a->rank, pods, MAX_PODS, &n, err);
    if (rc == RM_OK && n == 0)
        fprintf(stderr, "kubectl ringmaster: TrainingJob %s/%s has no pods yet\n", k->ns, a->job);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    atomic_bool stop = false;
    int started = 0;
    for (int i = 0; rc == RM_OK && i < n; i++) {
        fs[i] =
            (follower){.k = k, .job = a->job, .pod = pods[i], .out_mu = &mu, .stop = &stop, .tail = a->tail};
        if (pthread_create(&fs[i].th, NULL, follow_main, &fs[i]) != 0) {
            rc = rm_errf(err, RM_ERR, "cannot start a thread");
            atomic_store(&stop, true);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(fs[i].th, NULL);
    free(pods);
    free(fs);
    return rc;
}

/* ---------------- completion ---------------- */

static void complete_words(kc *k, const rm_kubectl_args *a)
{
    const char *cur = a->nwords ? a->words[a->nwords - 1] : "";
    size_t cl = strlen(cur);
    const char *cmd = NULL;
    for (int i = 0; i + 1 < a->nwords; i++)
        if (a->words[i][0] != '-') {
            cmd = a->words[i];
            break;
        }
    if (!cmd) {
        for (int i = 0; k_cmds[i]; i++)
            if (!strncmp(k_cmds[i], cur, cl))
                puts(k_cmds[i]);
        return;
    }
    if (cur[0] == '-') {
        static const char *const lf[] = {"--follow",     "--rank",    "--role", "--tail", "--namespace",
                                         "--kubeconfig", "--context", "--help", NULL};
        for (int i = 0; lf[i]; i++)
            if ((strcmp(cmd, "logs") == 0 || i >= 4) && !strncmp(lf[i], cur, cl))
                puts(lf[i]);
        return;
    }
    if (a->nwords >= 2 && !strcmp(a->words[a->nwords - 2], "--role")) {
        if (!strncmp("worker", cur, cl))
            puts("worker");
        if (!strncmp("ps", cur, cl))
            puts("ps");
        return;
    }
    if (!strcmp(cmd, "completion")) {
        puts("bash");
        return;
    }
    if (!strcmp(cmd, "runtimes") || !k)
        return;
    char path[512];
    snprintf(path, sizeof path, TJ_API "/namespaces/%s/trainingjobs", k->ns);
    cJSON *list = NULL;
    rm_err e = {0};
    if (get_json(k, path, &list, &e) != RM_OK)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(list, "items"))
    {
        const char *name = jstr(it, "metadata.name", "");
        if (!strncmp(name, cur, cl))
            puts(name);
    }
    cJSON_Delete(list);
}

static const char k_bash[] =
    "# bash completion for kubectl-ringmaster (kubectl ringmaster): `kubectl-ringmaster completion bash`\n"
    "_kubectl_ringmaster() {\n"
    "    local IFS=$'\\n'\n"
    "    COMPREPLY=($(kubectl-ringmaster __complete \"${COMP_WORDS[@]:1:COMP_CWORD}\" 2>/dev/null))\n"
    "}\n"
    "complete -o default -F _kubectl_ringmaster kubectl-ringmaster\n"
    "# kubectl >= 1.26 completes `kubectl ringmaster <TAB>` by running kubectl_complete-ringmaster: link it\n"
    "# to this program (it answers like `__complete`): ln -s \"$(command -v kubectl-ringmaster)\" \\\n"
    "#   \"$(dirname \"$(command -v kubectl-ringmaster)\")/kubectl_complete-ringmaster\"\n";

/* ---------------- main ---------------- */

int rm_kubectl_main(int argc, char **argv)
{
    rm_kubectl_args a;
    rm_err err = {0};
    if (rm_kubectl_parse(argc, argv, &a, &err) != RM_OK) {
        fprintf(stderr, "kubectl ringmaster: %s\n", err.msg);
        fprintf(stderr, "see `kubectl ringmaster --help`\n");
        return 2;
    }
    if (a.help || a.cmd == RM_KC_HELP) {
        rm_kubectl_usage(stdout, a.cmd);
        return 0;
    }
    if (a.cmd == RM_KC_COMPLETION) {
        fputs(k_bash, stdout);
        return 0;
    }
    kc k = {0};
    int rc = kc_open(&a, &k, &err);
    if (a.cmd == RM_KC_COMPLETE) { /* candidates without a cluster are still candidates */
        complete_words(rc == RM_OK ? &k : NULL, &a);
        rm_kube_client_free(k.cl);
        return 0;
    }
    if (rc != RM_OK) {
        fprintf(stderr, "kubectl ringmaster: %s\n", err.msg);
        return 1;
    }
    switch (a.cmd) {
    case RM_KC_LOGS:
        rc = a.follow ? logs_follow(&k, &a, &err) : logs_once(&k, &a, &err);
        break;
    case RM_KC_STATUS:
        rc = cmd_status(&k, a.job, &err);
        break;
    case RM_KC_SUSPEND:
        rc = cmd_suspend(&k, a.job, true, &err);
        break;
    case RM_KC_RESUME:
        rc = cmd_suspend(&k, a.job, false, &err);
        break;
    case RM_KC_RESTART:
        rc = cmd_restart(&k, a.job, &err);
        break;
    case RM_KC_RUNTIMES:
        rc = cmd_runtimes(&k, &err);
        break;
    default:
        break;
    }
    rm_kube_client_free(k.cl);
    if (rc != RM_OK) {
        fprintf(stderr, "kubectl ringmaster: %s\n", err.msg);
        return 1;
    }
    return 0;
}
