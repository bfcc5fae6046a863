/* run.c — `ringmaster run -f FILE`, `ringmaster validate -f FILE`, `ringmaster version`
 * (see run.h). The terminal side of the local runtime: flags, manifest errors that point at a
 * line, folders, signals, the live progress line, and the final result.
 *
 * Design: stdout carries only the result (a text summary, or with -o json the final TrainingJob
 * as the last line), so `ringmaster run ... -o json | tail -1 | jq` works; everything for humans
 * (start-up facts, events, progress) goes to stderr. On a terminal the runner's own structured log
 * goes to RUN_DIR/ringmaster.log and stderr shows one live progress line plus event lines; off a
 * terminal stderr gets the structured log lines and a plain progress line every few seconds. */
#include "operator/run.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/tj_runtime.h"
#include "common/worker_env.h"
#include "common/yaml.h"
#include "operator/local.h"
#include "operator/ps_ckpt.h"
#include "operator/sigwake.h"
#include "operator/sweep_run.h"
#include "common/faults.h"

/* ------------------------------------------------------------------ manifest */

void rm_manifest_msg(char *msg, size_t cap, const char *path, const rm_yaml_docs *d, size_t i,
                     const rm_err *e)
{
    int line = 0, col = 0;
    if (d && e->field[0] && rm_yaml_pos(d, i, e->field, &line, &col) == RM_OK && line > 0)
        rm_sfmt(msg, cap, "%s:%d: %s", path, line, e->msg);
    else if (d && rm_yaml_pos(d, i, "", &line, &col) == RM_OK && line > 0 && !e->field[0])
        rm_sfmt(msg, cap, "%s:%d: %s", path, line, e->msg);
    else
        rm_sfmt(msg, cap, "%s: %s", path, e->msg);
}

int rm_manifest_read(const char *path, rm_yaml_docs **out, char *msg, size_t cap)
{
    rm_err e = {0};
    msg[0] = 0;
    int rc = rm_yaml_load_file(path, out, &e);
    if (rc != RM_OK) {
        rm_sfmt(msg, cap, "%s", e.msg[0] ? e.msg : rm_strerror(rc));
        rm_escape_ctrl(msg, cap);
    }
    return rc;
}

int rm_manifest_load(const rm_yaml_docs *d, const char *path, const rm_manifest_overrides *ov, rm_tj *out,
                     char *msg, size_t cap)
{
    rm_err e = {0};
    int rc;
    memset(out, 0, sizeof *out);
    msg[0] = 0;
    size_t n = rm_yaml_count(d), pick = n;
    for (size_t i = 0; i < n; i++) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(rm_yaml_doc(d, i), "kind");
        if (!cJSON_IsString(k) || strcmp(k->valuestring, RM_TJ_KIND) != 0)
            continue; /* other kinds (a PVC beside the job) are for kubectl apply */
        if (pick == n) {
            pick = i;
            continue;
        }
        /* one job per file: a second one must not be silently dropped */
        int line = 0, col = 0;
        rm_yaml_pos(d, i, "kind", &line, &col);
        rm_sfmt(msg, cap,
                "%s:%d: a second TrainingJob (document %zu): run and validate take one job "
                "per file; split it",
                path, line, i + 1);
        rm_escape_ctrl(msg, cap);
        return RM_EINVAL;
    }
    if (pick == n) {
        if (n == 1) {
            pick = 0; /* let the parser say what is wrong with kind/apiVersion */
        } else {
            rm_sfmt(msg, cap, "%s: no TrainingJob (kind: %s, apiVersion: %s) in the file", path, RM_TJ_KIND,
                    RM_TJ_API_VERSION);
            return RM_EINVAL;
        }
    }
    /* spec.runtimeRef: the runtime's template under the job's fields, before the defaults
     * (docs/trainingjob-api.md#runtimes); the operator does the same with the cluster's runtimes */
    cJSON *merged = NULL;
    if (rm_json_path(rm_yaml_doc(d, pick), "spec.runtimeRef")) {
        merged = cJSON_Duplicate(rm_yaml_doc(d, pick), 1);
        rc = merged ? rm_runtime_resolve_files(merged, ov ? ov->runtimes : NULL, &e)
                    : rm_errf(&e, RM_ENOMEM, "out of memory");
    } else {
        rc = RM_OK;
    }
    if (rc == RM_OK)
        rc = rm_tj_from_json(merged ? merged : rm_yaml_doc(d, pick), out, &e);
    cJSON_Delete(merged);
    if (rc == RM_OK) {
        rm_tj_defaults(out);
        if (ov && ov->replicas > 0) {
            out->spec.replicas = ov->replicas;
            if (out->spec.min_replicas > ov->replicas)
                out->spec.min_replicas = ov->replicas;
            if (out->spec.max_replicas < ov->replicas)
                out->spec.max_replicas = ov->replicas;
        }
        if (ov && ov->epochs > 0)
            out->spec.training.epochs = ov->epochs;
        rc = rm_tj_validate(out, &e);
        /* every worker runs on this machine, from its memory - unless they are GPU workers (backend
         * nccl) that `validate` (no overrides) checks for a cluster or that run with
         * RINGMASTER_DEVICE=cuda: the model lives in GPU memory there, not in this machine's RAM */
        bool gpu = out->spec.backend == RM_BACKEND_NCCL && (!ov || ov->cluster || rm_local_on_gpus());
        if (rc == RM_OK && !gpu)
            rc = rm_tj_check_memory_local(out, &e);
    }
    if (rc != RM_OK) {
        rm_manifest_msg(msg, cap, path, d, pick, &e);
        rm_escape_ctrl(msg, cap); /* messages quote manifest values: no raw control characters */
        rm_tj_free(out);
    }
    return rc;
}

/* ------------------------------------------------------------------ progress display */

typedef struct ui {
    FILE *out; /* the human channel (stderr, or the terminal when logs go to a file) */
    bool tty;
    bool line_on; /* a progress line is drawn and not yet ended */
    double last_plain;
    double rate_t0;
    int64_t rate_s0;
    double eta_rate;
    bool fetch_shown; /* a fetch's progress line was printed (off a terminal: at once, once) */
} ui;

static void ui_clear(ui *u)
{
    if (u->tty && u->line_on) {
        fputs("\r\033[K", u->out);
        u->line_on = false;
    }
}

static void fmt_eta(char *buf, size_t cap, double s)
{
    if (!(s >= 0) || s > 360000) {
        rm_sfmt(buf, cap, "--:--");
        return;
    }
    long t = lround(s);
    if (t >= 3600)
        rm_sfmt(buf, cap, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        rm_sfmt(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void on_tick(void *ud, const rm_local_view *v)
{
    ui *u = ud;
    const rm_tj_status *st = &v->job->status;
    const rm_tj_spec *sp = &v->job->spec;
    int64_t step = st->progress.step;
    /* step rate for the ETA over the whole current stretch (reset when step goes back) */
    if (u->rate_t0 == 0 || step < u->rate_s0) {
        u->rate_t0 = v->now;
        u->rate_s0 = step;
    } else if (v->now - u->rate_t0 > 1 && step > u->rate_s0) {
        u->eta_rate = (double)(step - u->rate_s0) / (v->now - u->rate_t0);
    }
    char eta[32], acc[32];
    fmt_eta(eta, sizeof eta,
            u->eta_rate > 0 && v->steps_total > 0 ? (v->steps_total - (double)step) / u->eta_rate : -1);
    if (v->test_accuracy >= 0)
        rm_sfmt(acc, sizeof acc, "%.4f", v->test_accuracy);
    else
        rm_sfmt(acc, sizeof acc, "-");
    /* a language model's numbers (docs/models-and-data.md, "Shapes and status"): the newest
     * evaluation's validation loss and the group's tokens/s, each only once known */
    char lm[64] = "";
    const rm_tj_progress *pg = &st->progress;
    double vloss = pg->nevals > 0 ? pg->evals[pg->nevals - 1].val_loss : 0;
    if (vloss != 0 && isfinite(vloss))
        rm_sfmt(lm, sizeof lm, "  val_loss %.4f", vloss);
    if (pg->tokens_per_second > 0) {
        size_t n = strlen(lm);
        rm_sfmt(lm + n, sizeof lm - n, "  %.0f tokens/s",
                pg->tokens_per_second * (st->replicas > 0 ? st->replicas : 1));
    }
    char line[480];
    /* the data fetch before the first step (status.data; docs/models-and-data.md, "Where data
     * comes from"): bytes so far of the total, when known */
    const bool fetching =
        st->data.uri[0] && step == 0 && (st->data.total_bytes <= 0 || st->data.bytes < st->data.total_bytes);
    if (fetching) {
        char tot[32] = "?";
        if (st->data.total_bytes > 0)
            rm_sfmt(tot, sizeof tot, "%.1f", (double)st->data.total_bytes / 1e6);
        rm_sfmt(line, sizeof line, "%-10s fetching %.200s  %.1f/%s MB  workers %d/%d  restarts %d",
                rm_phase_name(st->phase), st->data.uri, (double)st->data.bytes / 1e6, tot, v->ready,
                v->desired, st->restarts);
    } else if (sp->training.mode == RM_MODE_BENCH) {
        rm_sfmt(line, sizeof line, "%-10s allreduce benchmark  workers %d/%d  restarts %d  %.0fs",
                rm_phase_name(st->phase), v->alive, v->desired, st->restarts, v->now - v->started);
    } else {
        rm_sfmt(line, sizeof line,
                "%-10s epoch %d/%d  step %lld/%.0f  loss %.4f  acc %s%s  %.0f samples/s  "
                "allreduce %.2f GB/s  workers %d/%d  restarts %d  ETA %s",
                rm_phase_name(st->phase),
                st->progress.train_epoch + (step > 0 ? 1 : 0) > sp->training.epochs
                    ? sp->training.epochs
                    : st->progress.train_epoch + (step > 0 ? 1 : 0),
                sp->training.epochs, (long long)step, v->steps_total, st->progress.loss, acc, lm,
                st->progress.samples_per_second * (st->replicas > 0 ? st->replicas : 1),
                st->progress.allreduce_gbps, v->ready, v->desired, st->restarts, eta);
    }
    const rm_condition *ck = &st->conditions[RM_COND_CHECKPOINT_FAILING];
    if (ck->present && ck->status) {
        size_t n = strlen(line);
        rm_sfmt(line + n, sizeof line - n, "  CHECKPOINTS FAILING");
    }
    if (u->tty) {
        fprintf(u->out, "\r\033[K%s", line);
        u->line_on = true;
        fflush(u->out);
    } else if (v->now - u->last_plain >= 5 || (fetching && !u->fetch_shown)) {
        u->last_plain = v->now;
        u->fetch_shown |= fetching;
        fprintf(u->out, "progress: %s\n", line);
        fflush(u->out);
    }
}

static void on_event(void *ud, bool warning, const char *reason, const char *message)
{
    ui *u = ud;
    if (!u->tty)
        return; /* the structured log line already said it */
    ui_clear(u);
    fprintf(u->out, "%s %s: %s\n", warning ? "warning" : "event", reason, message);
    fflush(u->out);
}

/* ------------------------------------------------------------------ helpers */

/* Is there a checkpoint in dir (what --resume would continue from): a whole file, a complete
 * sharded set (its manifest, worker/checkpoint/ckpt_shard.h), or a parameter server's shard
 * (dir/ps-<i>/, operator/ps_ckpt.h)? */
static bool has_checkpoint(const char *dir)
{
    static const char *const pats[] = {"ckpt-*.rmck", "manifest-*.rmmf"};
    bool yes = rm_ps_ckpt_any(dir);
    for (size_t p = 0; p < RM_ARRAY_LEN(pats) && !yes; p++) {
        char pat[PATH_MAX + 32];
        rm_sfmt(pat, sizeof pat, "%s/%s", dir, pats[p]);
        glob_t g;
        yes = glob(pat, GLOB_NOSORT, NULL, &g) == 0 && g.gl_pathc > 0;
        globfree(&g);
    }
    return yes;
}

FILE *rm_run_tty_to_log(const char *log_path)
{
    FILE *term = NULL;
    int tfd = dup(2);
    int lfd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (tfd >= 0 && lfd >= 0 && (term = fdopen(tfd, "w")) != NULL) {
        fcntl(tfd, F_SETFD, FD_CLOEXEC);
        dup2(lfd, 2);
    } else if (tfd >= 0) {
        close(tfd);
    }
    if (lfd >= 0)
        close(lfd);
    return term;
}

/* Remove what a previous run left in the checkpoint folder (the JSON manifests that describe
 * checkpoints first, then checkpoints, sharded sets — their .rmmf first, so a set is never complete
 * with shards missing — and fault markers), the parameter servers' state in ps-<i>/ included. */
int rm_run_fresh_checkpoints(const char *dir)
{
    static const char *const pats[] = {"index-*.json",        "ckpt-*.rmck", "manifest-*.rmmf",
                                       "shard-*.rmck",        ".tmp-ckpt-*", ".fault-*-fired",
                                       ".fault-lost-worker-*"};
    return rm_fs_unlink_globs(dir, pats, RM_ARRAY_LEN(pats)) + rm_ps_ckpt_clear(dir);
}

/* --resume of a parameter-server job: its state is the servers' (workers take their step from
 * them), so every shard must hold one version (operator/ps_ckpt.h); shard checkpoints newer than
 * the newest common one are removed, so every server restores it. Returns as resume_preflight. */
static int ps_resume_preflight(const rm_tj *job, const char *ckpt_dir, bool if_present)
{
    int S = job->spec.ps.replicas;
    int64_t v = 0;
    char msg[2048];
    int r = rm_ps_ckpt_common(ckpt_dir, S, &v, msg, sizeof msg);
    bool lbfgs = job->spec.training.optimizer.type == RM_OPT_LBFGS;
    if (r == 0 && if_present) {
        fprintf(stderr,
                "ringmaster run: --resume=if-present: no parameter-server checkpoint in %s/ps-*; "
                "starting at step 0\n",
                ckpt_dir);
        return 0;
    }
    if (r == 0) {
        fprintf(stderr,
                "ringmaster run: --resume: nothing this job can continue from in %s (no parameter "
                "server wrote a checkpoint: %s); not starting over at step 0 (--resume=if-present "
                "allows it)\n",
                ckpt_dir, msg);
        return 2;
    }
    if (r < 0 && !(lbfgs && strstr(msg, ": newest none") == NULL)) {
        fprintf(stderr,
                "ringmaster run: --resume: the parameter servers' checkpoints share no version, so "
                "no step every role can continue from (%s); run without --resume to start fresh\n",
                msg);
        return 2;
    }
    if (lbfgs) /* the coordinator takes every shard back to its last accepted point */
        return 0;
    int n = rm_ps_ckpt_rollback(ckpt_dir, S, v);
    fprintf(stderr,
            "ringmaster run: --resume: every parameter server continues from version %lld, the "
            "newest all %d shards hold (%d newer shard checkpoint%s removed)\n",
            (long long)v, S, n, n == 1 ? "" : "s");
    return 0;
}

/* --resume: ask the worker binary (`train --check --resume`, the checks a worker makes at start)
 * whether ckpt_dir holds a checkpoint this job's model can continue from. Returns 0 to go on, 2
 * when there is none (the worker has said why, loudly, on stderr; with if-present it only warns),
 * 1 when the check itself could not run. */
static int resume_preflight(const rm_tj *job, const char *ckpt_dir, bool if_present)
{
    char bin[PATH_MAX];
    rm_err e = {0};
    if (rm_local_worker_bin(bin, sizeof bin, &e) != RM_OK) {
        fprintf(stderr, "ringmaster run: --resume: %s\n", e.msg);
        return 1;
    }
    cJSON *tj = rm_training_to_json(&job->spec.training);
    char *training = tj ? cJSON_PrintUnformatted(tj) : NULL;
    cJSON_Delete(tj);
    if (!training) {
        fprintf(stderr, "ringmaster run: --resume: out of memory\n");
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        setenv(RM_ENV_TRAINING, training, 1);
        unsetenv(RM_ENV_CHECKPOINT_DIR);
        unsetenv(RM_ENV_RESUME);
        execl(bin, bin, "train", "--check", if_present ? "--resume=if-present" : "--resume",
              "--checkpoint-dir", ckpt_dir, "--metrics-addr", "off", (char *)NULL);
        _exit(127);
    }
    free(training);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
        (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 2)) {
        fprintf(stderr, "ringmaster run: --resume: could not check %s with %s\n", ckpt_dir, bin);
        return 1;
    }
    if (WEXITSTATUS(st) == 2) {
        fprintf(stderr,
                "ringmaster run: --resume: nothing this job can continue from in %s; not "
                "starting over at step 0 (--resume=if-present allows it)\n",
                ckpt_dir);
        return 2;
    }
    return 0;
}

/* The last `lines` lines of a file, indented, to out. */
static void tail_file(FILE *out, const char *path, int lines)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        long start = end > 4096 ? end - 4096 : 0;
        fseek(f, start, SEEK_SET);
    }
    char buf[4097];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    int seen = 0;
    char *p = buf + n;
    while (p > buf) {
        p--;
        if (*p == '\n' && p != buf + n - 1 && ++seen == lines) {
            p++;
            break;
        }
    }
    for (char *q = strtok(p, "\n"); q; q = strtok(NULL, "\n"))
        fprintf(out, "    %s\n", q);
}

/* Bench mode: rank 0's table (the lines of its log that are not log lines) to out. */
static void print_bench_table(FILE *out, const char *run_dir)
{
    char path[PATH_MAX];
    rm_sfmt(path, sizeof path, "%s/worker-0.log", run_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "ts=", 3) == 0 || line[0] == '{' || strncmp(line, "===", 3) == 0)
            continue;
        fputs(line, out);
    }
    fclose(f);
}

void rm_run_print_json(cJSON *obj)
{
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (s)
        printf("%s\n", s);
    free(s);
}

void rm_run_abs_path(char *path, size_t cap)
{
    char cwd[PATH_MAX], tmp[PATH_MAX];
    if (path[0] != '/' && getcwd(cwd, sizeof cwd)) {
        rm_sfmt(tmp, sizeof tmp, "%s/%s", cwd, path);
        rm_sfmt(path, cap, "%s", tmp);
    }
}

const char *rm_run_dir_name(const char *flag, const char *name, char *buf, size_t cap)
{
    if (flag) {
        rm_sfmt(buf, cap, "%s", flag);
        return buf;
    }
    const char *t = getenv("TMPDIR");
    char ts[32];
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", &tmv);
    rm_sfmt(buf, cap, "%s/ringmaster-%s-%s-%d", t && *t ? t : "/tmp", name, ts, (int)getpid());
    return buf;
}

const char *rm_run_checkpoint_dir(const char *flag, const rm_tj *job, char *buf, size_t cap)
{
    const char *p = job->spec.checkpoint.path;
    if (flag && flag[0])
        rm_sfmt(buf, cap, "%s", flag);
    else if (p && p[0] && strcmp(p, RM_DEFAULT_CHECKPOINT_PATH) != 0)
        rm_sfmt(buf, cap, "%s", p); /* relative or absolute, as the manifest says */
    else                            /* the cluster's default volume path means nothing here */
        rm_sfmt(buf, cap, "checkpoints/%s", job->name);
    return buf;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ringmaster run -f FILE [flags]\n"
               "Run a TrainingJob on this machine: worker processes on 127.0.0.1, the rendezvous\n"
               "in-process, the same controller logic as the Kubernetes operator.\n"
               "  -f, --filename FILE       the TrainingJob manifest (YAML or JSON; - = stdin), or a\n"
               "                            TrainingSweep: its trials, parallelTrials at a time\n"
               "  --replicas N              override spec.replicas (min/max widened to fit)\n"
               "  --epochs N                override spec.training.epochs\n"
               "  --runtimes FILE|DIR       the training runtimes a spec.runtimeRef names (YAML; a\n"
               "                            folder's *.yaml, e.g. deploy/runtimes)\n"
               "  --checkpoint-dir DIR      default: spec.checkpoint.path (as written), else\n"
               "                            ./checkpoints/<name>\n"
               "  --resume[=if-present]     keep the checkpoints of an earlier run and continue from\n"
               "                            them (default: start fresh, old checkpoints removed);\n"
               "                            with none this job can use, exit 2 unless if-present\n"
               "  --run-dir DIR             worker logs and file_sd.json (default $TMPDIR/ringmaster-\n"
               "                            <name>-<time>)\n"
               "  -o, --output text|json    json: the last line of stdout is the final TrainingJob\n"
               "  --metrics-addr HOST:PORT  controller metrics, /sd (default 127.0.0.1:0)\n"
               "  --log-format text|json    --log-level debug|info|warn|error\n"
               "Env: RINGMASTER_DEVICE=cuda runs the workers on GPUs as the manifest says (worker i on\n"
               "GPU i; backend nccl and bf16/fp16 kept); otherwise on the CPU (nccl -> ring, fp32).\n"
               "Exit: 0 Succeeded, 1 Failed, 2 bad manifest or flag, 130/143 interrupted.\n");
}

static int parse_pos_int(const char *flag, const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 100000) {
        fprintf(stderr, "ringmaster run: %s: want a positive integer, got \"%s\"\n", flag, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* -o for run and validate: "text" or "json"; anything else is an error, not silently text. */
static int parse_output(const char *cmd, const char *s, bool *json)
{
    if (strcmp(s, "json") == 0 || strcmp(s, "text") == 0) {
        *json = s[0] == 'j';
        return 0;
    }
    fprintf(stderr, "ringmaster %s: -o: text or json, got \"%s\"\n", cmd, s);
    return -1;
}

/* ------------------------------------------------------------------ run */

enum {
    O_REPLICAS = 256,
    O_EPOCHS,
    O_CKPT,
    O_RESUME,
    O_RUNDIR,
    O_METRICS,
    O_LOGFMT,
    O_LOGLVL,
    O_HELP,
    O_RUNTIMES
};

/* The command line of `ringmaster run`. */
typedef struct run_flags {
    const char *file, *ckpt, *run_dir_flag, *metrics, *logfmt_s;
    bool json, resume, resume_if_present;
    rm_log_level lvl;
    rm_log_format lfmt;
    rm_manifest_overrides ov;
} run_flags;

/* Parse and check the flags (and RINGMASTER_FAULT). Returns -1 to go on, else the exit code. */
static int parse_flags(int argc, char **argv, run_flags *f)
{
    static const struct option opts[] = {
        {"filename", required_argument, 0, 'f'},
        {"output", required_argument, 0, 'o'},
        {"replicas", required_argument, 0, O_REPLICAS},
        {"epochs", required_argument, 0, O_EPOCHS},
        {"checkpoint-dir", required_argument, 0, O_CKPT},
        {"resume", optional_argument, 0, O_RESUME},
        {"run-dir", required_argument, 0, O_RUNDIR},
        {"metrics-addr", required_argument, 0, O_METRICS},
        {"log-format", required_argument, 0, O_LOGFMT},
        {"log-level", required_argument, 0, O_LOGLVL},
        {"runtimes", required_argument, 0, O_RUNTIMES},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    memset(f, 0, sizeof *f);
    f->metrics = "127.0.0.1:0";
    f->logfmt_s = "text";
    f->lvl = RM_LOG_INFO;
    f->lfmt = RM_LOG_TEXT;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "f:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            f->file = optarg;
            break;
        case 'o':
            if (parse_output("run", optarg, &f->json))
                return 2;
            break;
        case O_REPLICAS:
            if (parse_pos_int("--replicas", optarg, &f->ov.replicas))
                return 2;
            break;
        case O_EPOCHS:
            if (parse_pos_int("--epochs", optarg, &f->ov.epochs))
                return 2;
            break;
        case O_CKPT:
            f->ckpt = optarg;
            break;
        case O_RUNTIMES:
            f->ov.runtimes = optarg;
            break;
        case O_RESUME:
            f->resume = true;
            f->resume_if_present = optarg && !strcmp(optarg, "if-present");
            if (optarg && !f->resume_if_present) {
                fprintf(stderr, "ringmaster run: --resume: bare or =if-present, got \"%s\"\n", optarg);
                return 2;
            }
            break;
        case O_RUNDIR:
            f->run_dir_flag = optarg;
            break;
        case O_METRICS:
            f->metrics = optarg;
            break;
        case O_LOGFMT:
            if (rm_log_parse_format(optarg, &f->lfmt) != RM_OK) {
                fprintf(stderr, "ringmaster run: --log-format: text or json, got \"%s\"\n", optarg);
                return 2;
            }
            f->logfmt_s = optarg;
            break;
        case O_LOGLVL:
            if (rm_log_parse_level(optarg, &f->lvl) != RM_OK) {
                fprintf(stderr, "ringmaster run: --log-level: debug|info|warn|error, got \"%s\"\n", optarg);
                return 2;
            }
            break;
        case 'h':
        case O_HELP:
            usage(stdout);
            return 0;
        default:
            fprintf(stderr, "ringmaster run: unknown or incomplete flag \"%s\"\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ringmaster run: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!f->file) {
        fprintf(stderr, "ringmaster run: -f FILE is required\n");
        usage(stderr);
        return 2;
    }
    { /* a malformed fault spec would only surface as worker crash loops: refuse it now */
        const char *fs = getenv(RM_ENV_FAULT);
        rm_faults faults;
        rm_err fe = {0};
        if (fs && *fs && rm_faults_parse(fs, &faults, &fe) != RM_OK) {
            fprintf(stderr, "ringmaster run: %s\n", fe.msg);
            return 2;
        }
    }
    {
        char host[128];
        int port;
        if (rm_http_parse_addr(f->metrics, host, sizeof host, &port) != RM_OK) {
            fprintf(stderr, "ringmaster run: --metrics-addr: want HOST:PORT, got \"%s\"\n", f->metrics);
            return 2;
        }
    }
    return -1;
}

/* Print how the run ended (stderr for people, stdout for the result or -o json); returns the exit
 * code. */
static int report_outcome(const ui *u, rm_tj *job, const rm_local_result *res, const char *ckpt_dir,
                          const char *run_dir, bool json)
{
    int code;
    const rm_tj_status *st = &job->status;
    if (res->signal) {
        if (has_checkpoint(ckpt_dir))
            fprintf(u->out,
                    "ringmaster: stopped by signal %d after %.1fs; workers were asked to "
                    "checkpoint (checkpoints: %s, continue with --resume)\n",
                    res->signal, res->seconds, ckpt_dir);
        else
            fprintf(u->out,
                    "ringmaster: stopped by signal %d after %.1fs; no checkpoint was "
                    "written to %s, so --resume would start from the beginning\n",
                    res->signal, res->seconds, ckpt_dir);
        code = res->signal == SIGTERM ? 143 : res->signal == SIGHUP ? 129 : 130;
    } else if (st->phase == RM_PHASE_SUCCEEDED) {
        code = 0;
    } else {
        code = 1;
    }
    if (st->phase == RM_PHASE_FAILED) {
        const rm_condition *fc = &st->conditions[RM_COND_FAILED];
        fprintf(u->out, "ringmaster: job %s failed: %s: %s\n", job->name, fc->reason, fc->message);
        fprintf(u->out, "  last lines of the worker logs (%s):\n", run_dir);
        for (int i = 0; i < job->spec.replicas && i < 16; i++) {
            char p[PATH_MAX + 32];
            rm_sfmt(p, sizeof p, "%s/worker-%d.log", run_dir, i);
            fprintf(u->out, "  worker-%d.log:\n", i);
            tail_file(u->out, p, 3);
        }
    }
    if (res->recoveries > 0) {
        double worst = 0, sum = 0;
        for (int i = 0; i < res->recoveries; i++) {
            sum += res->recovery_s[i];
            if (res->recovery_s[i] > worst)
                worst = res->recovery_s[i];
        }
        fprintf(u->out,
                "ringmaster: %d recoveries, mean %.2fs, worst %.2fs (histogram "
                "ringmaster_recovery_seconds)\n",
                res->recoveries, sum / res->recoveries, worst);
    }
    if (job->spec.training.mode == RM_MODE_BENCH && st->phase == RM_PHASE_SUCCEEDED)
        print_bench_table(json ? u->out : stdout, run_dir);
    if (json) {
        rm_run_print_json(rm_tj_to_json(job));
    } else if (st->phase == RM_PHASE_SUCCEEDED) {
        const rm_tj_result *r = &st->result;
        if (r->present && job->spec.training.mode == RM_MODE_TRAIN) {
            /* valLoss and tokens/s when reported; a language model's perplexity is exp(valLoss)
             * (mean nats per token; docs/models-and-data.md) */
            const char *mt = job->spec.training.model_type;
            bool lm = mt && strcmp(mt, rm_model_type_names[RM_MODEL_GPT]) == 0;
            char vl[64] = "", tk[32] = "";
            if (r->val_loss != 0 && isfinite(r->val_loss) && lm)
                rm_sfmt(vl, sizeof vl, "  valLoss %.4f (perplexity %.2f)", r->val_loss, exp(r->val_loss));
            else if (r->val_loss != 0 && isfinite(r->val_loss))
                rm_sfmt(vl, sizeof vl, "  valLoss %.4f", r->val_loss);
            if (r->tokens_per_second > 0)
                rm_sfmt(tk, sizeof tk, "  %.0f tokens/s", r->tokens_per_second);
            printf("Succeeded: testAccuracy %.4f  trainLoss %.4f%s  steps %lld  %.1f s  "
                   "%.0f samples/s%s  restarts %d\n",
                   r->test_accuracy, r->train_loss, vl, (long long)r->steps, r->seconds,
                   r->samples_per_second, tk, st->restarts);
        } else
            printf("Succeeded in %.1f s, restarts %d\n", res->seconds, st->restarts);
    } else if (st->phase == RM_PHASE_FAILED) {
        printf("Failed: %s\n", st->conditions[RM_COND_FAILED].reason);
    } else {
        printf("%s (stopped)\n", rm_phase_name(st->phase));
    }
    fflush(stdout);
    return code;
}

/* RINGMASTER_FAULT against the job (common/faults.h): a fault that can never fire (a server or a
 * rank the job does not have) would make a test pass without testing anything; refuse it. 0 or 2. */
static int fault_check_job(const char *cmd, const rm_tj *job)
{
    const char *fs = getenv(RM_ENV_FAULT);
    rm_faults faults;
    rm_err fe = {0};
    if (!fs || !*fs)
        return 0;
    if (rm_faults_parse(fs, &faults, &fe) == RM_OK && rm_faults_check_job(&faults, job, &fe) == RM_OK)
        return 0;
    fprintf(stderr, "ringmaster %s: %s\n", cmd, fe.msg);
    return 2;
}

int rm_run_main(int argc, char **argv)
{
    run_flags fl;
    int early = parse_flags(argc, argv, &fl);
    if (early >= 0)
        return early;
    const char *file = fl.file, *ckpt = fl.ckpt, *run_dir_flag = fl.run_dir_flag;
    const char *metrics = fl.metrics, *logfmt_s = fl.logfmt_s;
    bool json = fl.json, resume = fl.resume, resume_if_present = fl.resume_if_present;
    rm_log_level lvl = fl.lvl;
    rm_log_format lfmt = fl.lfmt;
    rm_manifest_overrides ov = fl.ov;
    rm_log_init(lvl, lfmt, "run");
    /* read once, then dispatch by kind: a pipe or stdin cannot be read a second time */
    rm_yaml_docs *docs = NULL;
    char msg[1024];
    if (rm_manifest_read(file, &docs, msg, sizeof msg) != RM_OK) {
        fprintf(stderr, "%s\n", msg);
        return 2;
    }
    if (rm_sweep_manifest_is(docs)) { /* a TrainingSweep: many trials (operator/sweep_run.h) */
        int code = 2;
        if (resume || ov.replicas || ov.epochs) {
            fprintf(stderr,
                    "ringmaster run: %s is a TrainingSweep: --resume, --replicas and "
                    "--epochs apply to one TrainingJob; set them in spec.trialTemplate\n",
                    file);
        } else {
            rm_sweep_run_opts so = {.file = file,
                                    .docs = docs,
                                    .run_dir = run_dir_flag,
                                    .checkpoint_dir = ckpt,
                                    .log_format = logfmt_s,
                                    .json = json,
                                    .log_json = lfmt == RM_LOG_JSON};
            code = rm_sweep_run(&so);
        }
        rm_yaml_free(docs);
        return code;
    }

    rm_tj job;
    int lrc = rm_manifest_load(docs, file, &ov, &job, msg, sizeof msg);
    rm_yaml_free(docs);
    if (lrc != RM_OK) {
        fprintf(stderr, "%s\n", msg);
        return 2;
    }
    if (fault_check_job("run", &job)) {
        rm_tj_free(&job);
        return 2;
    }
    if (job.generation <= 0)
        job.generation = 1; /* a local object: its first generation */
    /* bench workers do not report steps: the progress deadline does not apply to them */
    if (job.spec.training.mode == RM_MODE_BENCH)
        job.spec.restart.progress_deadline_seconds = 0;

    char ckpt_dir[PATH_MAX], run_dir[PATH_MAX];
    rm_run_checkpoint_dir(ckpt, &job, ckpt_dir, sizeof ckpt_dir);
    rm_run_abs_path(ckpt_dir, sizeof ckpt_dir);
    rm_run_dir_name(run_dir_flag, job.name, run_dir, sizeof run_dir);
    {
        rm_err de = {0}; /* a folder no checkpoint can be written to is refused up front */
        if (rm_fs_dir_writable(ckpt_dir, "checkpoint folder", &de) != RM_OK) {
            fprintf(stderr, "ringmaster run: %s\n", de.msg);
            rm_tj_free(&job);
            return 2; /* a bad --checkpoint-dir (or spec.checkpoint.path) is the user's input */
        }
    }
    if (resume) {
        int pc = job.spec.strategy == RM_STRATEGY_PS ? ps_resume_preflight(&job, ckpt_dir, resume_if_present)
                                                     : resume_preflight(&job, ckpt_dir, resume_if_present);
        if (pc) {
            rm_tj_free(&job);
            return pc;
        }
    }
    rm_err mke = {0};
    if (rm_fs_mkdir_p(run_dir, &mke) != RM_OK) {
        fprintf(stderr, "ringmaster run: cannot create %s: %s\n", run_dir, mke.msg);
        rm_tj_free(&job);
        return 1;
    }
    int removed = resume ? 0 : rm_run_fresh_checkpoints(ckpt_dir);

    ui u = {.out = stderr};
    FILE *term = NULL;
    u.tty = isatty(2) && lfmt == RM_LOG_TEXT;
    char runner_log[PATH_MAX + 32];
    rm_sfmt(runner_log, sizeof runner_log, "%s/ringmaster.log", run_dir);
    if (u.tty) {
        /* the structured log goes to a file; the terminal gets the progress line and events */
        if ((term = rm_run_tty_to_log(runner_log)) != NULL)
            u.out = term;
        else
            u.tty = false;
    }
    if (removed > 0)
        fprintf(u.out,
                "ringmaster: removed %d files of an earlier run from %s (--resume keeps "
                "them)\n",
                removed, ckpt_dir);
    if (u.tty)
        fprintf(u.out, "  runner log:  %s\n", runner_log);

    int wake_r = -1;
    if (rm_sigwake_install(&wake_r, true) != 0) {
        fprintf(stderr, "ringmaster run: pipe: %s\n", strerror(errno));
        rm_tj_free(&job);
        return 1;
    }
    rm_local_opts lo = {
        .run_dir = run_dir,
        .checkpoint_dir = ckpt_dir,
        .metrics_addr = metrics,
        .worker_log_format = logfmt_s,
        .human = u.out,
        .on_tick = on_tick,
        .on_event = on_event,
        .ud = &u,
        .stop_signal = &rm_sig_stop,
        .wake_fd = wake_r,
    };
    static rm_local_result res;
    rm_err e = {0};
    int rc = rm_local_run(&job, &lo, &res, &e);
    ui_clear(&u);
    if (u.tty && u.line_on)
        fputc('\n', u.out);
    int code;
    if (rc != RM_OK) {
        fprintf(u.out, "ringmaster run: %s\n", e.msg);
        code = e.field[0] ? 2 : 1;
        goto out;
    }
    code = report_outcome(&u, &job, &res, ckpt_dir, run_dir, json);
out:
    if (term) {
        fflush(term);
        fclose(term);
    }
    rm_tj_free(&job);
    return code;
}

/* ------------------------------------------------------------------ validate, version */

int rm_validate_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"filename", required_argument, 0, 'f'},
        {"output", required_argument, 0, 'o'},
        {"runtimes", required_argument, 0, O_RUNTIMES},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *file = NULL;
    bool json = false;
    rm_manifest_overrides ov = {.cluster = true};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "f:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            file = optarg;
            break;
        case 'o':
            if (parse_output("validate", optarg, &json))
                return 2;
            break;
        case O_RUNTIMES:
            ov.runtimes = optarg;
            break;
        case 'h':
            printf("usage: ringmaster validate -f FILE [-o json] [--runtimes FILE|DIR]\n"
                   "Check a TrainingJob manifest the way `run` and the operator read it; -o json\n"
                   "prints it with every default filled in. With RINGMASTER_FAULT set, a fault\n"
                   "that can never fire in this job is refused too. --runtimes: the training\n"
                   "runtimes a spec.runtimeRef names. Exit 0 valid, 2 invalid.\n");
            return 0;
        default:
            fprintf(stderr, "ringmaster validate: unknown flag \"%s\"\n", argv[optind - 1]);
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "ringmaster validate: -f FILE is required\n");
        return 2;
    }
    rm_yaml_docs *docs = NULL; /* read once: -f may be a pipe (see rm_run_main) */
    char msg[1024];
    if (rm_manifest_read(file, &docs, msg, sizeof msg) != RM_OK) {
        fprintf(stderr, "%s\n", msg);
        return 2;
    }
    if (rm_sweep_manifest_is(docs)) {
        int code = rm_sweep_validate(docs, file, json);
        rm_yaml_free(docs);
        return code;
    }
    rm_tj job;
    int lrc = rm_manifest_load(docs, file, &ov, &job, msg, sizeof msg);
    rm_yaml_free(docs);
    if (lrc != RM_OK) {
        fprintf(stderr, "%s\n", msg);
        return 2;
    }
    if (fault_check_job("validate", &job)) {
        rm_tj_free(&job);
        return 2;
    }
    if (json) {
        cJSON *o = rm_tj_to_json(&job);
        char *s = o ? cJSON_Print(o) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("%s: valid TrainingJob %s/%s: %d workers (min %d, max %d), backend %s, mode %s\n", file,
               job.namespace_ ? job.namespace_ : "default", job.name, job.spec.replicas,
               job.spec.min_replicas, job.spec.max_replicas, rm_backend_name(job.spec.backend),
               rm_enum_name(rm_mode_names, (int)job.spec.training.mode));
        const rm_par_spec *par = &job.spec.par;
        int T = par->tensor_parallel > 1 ? par->tensor_parallel : 1;
        int P = par->pipeline_stages > 1 ? par->pipeline_stages : 1;
        if (T > 1 && P > 1) /* the grid: docs/models-and-data.md, "Tensor parallelism" */
            printf("  grid: %d-way tensor groups x %d stages x %d data-parallel replicas (rank r = "
                   "(d*%d + p)*%d + t), %d micro-batches, schedule %s\n",
                   T, P, job.spec.replicas / (T * P), P, T, par->micro_batches,
                   rm_pipe_schedule_names[par->schedule == RM_PIPE_GPIPE]);
        else if (P > 1 || par->micro_batches > 1) /* pipeline stages */
            printf("  pipeline: %d stages x %d data-parallel replicas (rank r = d*%d + p), "
                   "%d micro-batches, schedule %s\n",
                   P, job.spec.replicas / P, P, par->micro_batches,
                   rm_pipe_schedule_names[par->schedule == RM_PIPE_GPIPE]);
        else if (T > 1)
            printf("  tensor: %d-way tensor groups x %d data-parallel replicas (rank r = d*%d + t)\n", T,
                   job.spec.replicas / T, T);
    }
    rm_tj_free(&job);
    return 0;
}

int rm_version_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("ringmaster %s (TrainingJob %s, CUDA %s)\n", RM_VERSION, RM_TJ_API_VERSION,
           RM_HAVE_CUDA ? "on" : "off");
    return 0;
}
