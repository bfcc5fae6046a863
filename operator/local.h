/* local.h — the local runtime of `ringmaster run`: one TrainingJob on this machine, driven by the
 * same reconcile core as the Kubernetes operator (operator/reconcile.h).
 *
 * Design: the runtime plays the parts the cluster plays for the operator. It hosts the rendezvous
 * service in-process (127.0.0.1, random port, random per-run token), runs every worker as a child
 * process (fork/exec of ringmaster-worker with the env the operator gives pods, each in its own
 * process group, PR_SET_PDEATHSIG so none outlives us, stdout/stderr to RUN_DIR/worker-<i>.log),
 * and loops: reap children (SIGCHLD wakes the loop at once), probe each worker's /healthz, take a
 * rendezvous snapshot, call rm_reconcile, execute its actions (create = fork/exec, delete =
 * SIGTERM to the group then SIGKILL after a grace, restart = rm_rdzv_restart, events = log lines).
 * It also serves controller metrics (ringmaster_jobs_*, ringmaster_restarts,
 * ringmaster_recovery_seconds, workers ready/desired) with a Prometheus http_sd endpoint (/sd)
 * listing the workers' metrics endpoints, and writes the same list as file_sd JSON in RUN_DIR
 * (and, when the run ends, the last scrape as RUN_DIR/metrics.prom).
 *
 * Signals: the caller installs the handlers (see run.c) and passes a flag and a wake fd; on a
 * stop request every worker gets SIGTERM (they checkpoint and exit), stragglers get SIGKILL after
 * term_grace_s, and rm_local_run returns with res->signal set.
 *
 * Ownership: rm_local_run borrows opts and updates job->status in place (the caller owns job);
 * everything it starts (threads, servers, children) is gone when it returns. */
#ifndef RM_LOCAL_H
#define RM_LOCAL_H
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "operator/launch.h"

#define RM_LOCAL_MAX_RECOVERIES 64

/* What the progress display needs, once per tick. Borrowed for the duration of the callback. */
typedef struct rm_local_view {
    const rm_tj *job;          /* spec + the current status */
    double now, started;       /* unix seconds */
    int desired, ready, alive; /* workers */
    double test_accuracy;      /* rank 0's last evaluation; < 0 unknown */
    double steps_total;        /* epochs * steps per epoch at the desired world size; 0 unknown */
} rm_local_view;

typedef struct rm_local_opts {
    const char *worker_bin;        /* NULL: $RINGMASTER_WORKER_BIN, else next to /proc/self/exe */
    const char *run_dir;           /* required: logs and file_sd.json (created) */
    const char *checkpoint_dir;    /* required (created) */
    const char *metrics_addr;      /* controller metrics + /sd; NULL = "127.0.0.1:0" */
    const char *worker_log_format; /* "text" | "json"; NULL = text */
    double tick_s;                 /* loop period; 0 = 0.2 */
    double term_grace_s;           /* SIGTERM -> SIGKILL on shutdown; 0 = 15 */
    double delete_grace_s;         /* SIGTERM -> SIGKILL for DELETE_WORKER; 0 = 3 */
    FILE *human;                   /* where start-up facts, events and summaries go; NULL = stderr */
    void (*on_tick)(void *ud, const rm_local_view *v);
    /* The core's events (and "Recovered" with the measured time), besides the log line. */
    void (*on_event)(void *ud, bool warning, const char *reason, const char *message);
    void *ud;
    volatile sig_atomic_t *stop_signal; /* set to SIGINT/SIGTERM by the caller's handler */
    int wake_fd;                        /* read end of the caller's self-pipe (drained here), or -1;
                                 * the caller's SIGCHLD, SIGINT and SIGTERM handlers write it */
} rm_local_opts;

typedef struct rm_local_result {
    rm_phase phase;                             /* final phase (Succeeded/Failed; Running etc. if stopped) */
    int signal;                                 /* the signal that stopped the run, 0 if none */
    int recoveries;                             /* entries in recovery_s */
    double recovery_s[RM_LOCAL_MAX_RECOVERIES]; /* failure detected -> group training again */
    int metrics_port, rdzv_port;
    double seconds; /* wall time of the run */
} rm_local_result;

/* Run the job to the end (Succeeded/Failed) or until *stop_signal. job must be defaulted and
 * valid. Returns RM_OK when the loop ran (the outcome is in res->phase / res->signal), or an
 * error for start-up failures (ports, folders, worker binary missing) with err set. */
int rm_local_run(rm_tj *job, const rm_local_opts *opts, rm_local_result *res, rm_err *err);

/* The local placement of worker `index` (see operator/launch.h): rendezvous and metrics on
 * 127.0.0.1, a literal token, every worker on this machine (LOCAL_RANK = index). */
typedef struct rm_local_where {
    int rdzv_port;
    const char *token; /* literal */
    const char *checkpoint_dir;
    int metrics_port;
    const char *log_format; /* NULL = "text" */
    const char *node_name;  /* NULL = "localhost" */
    const char *ps_addrs;   /* the parameter servers' "127.0.0.1:port,..."; NULL = none */
} rm_local_where;
/* The node `ringmaster run` reports for worker `index` (NODE_NAME; docs/strategies.md#topology): host
 * (the machine's name), or — when nodes (RINGMASTER_RUN_NODES, for tests and benchmarks) is "N" — N
 * fake nodes on this host, "<host>-n<k>" with k = index * N / replicas (contiguous blocks of workers,
 * so ranks 0..replicas/N-1 share node 0). nodes NULL or "" = no faking; parameter servers (index < 0)
 * get host. RM_EINVAL (naming RINGMASTER_RUN_NODES) unless 1 <= N <= replicas. */
#define RM_ENV_RUN_NODES "RINGMASTER_RUN_NODES"
int rm_local_node_name(const char *host, const char *nodes, int index, int replicas, char *buf, size_t cap,
                       rm_err *err);
/* index < 0: parameter server -1 - index (rm_launch_build_ps). */
int rm_local_launch(const rm_tj *job, int index, int epoch, const rm_local_where *w, rm_launch *out,
                    rm_err *err);
/* Render launch settings for execve: *argv = bin + l->args; *envp = base minus every contract
 * variable, then the contract's. Both owned (free with rm_local_strv_free). RM_EINVAL when a value
 * is not a literal (a Secret or field reference means nothing to a local process). */
int rm_local_render(const rm_launch *l, const char *bin, char *const *base, char ***argv, char ***envp,
                    rm_err *err);
void rm_local_strv_free(char **v); /* NULL ok */

/* Path of ringmaster-worker as rm_local_run would pick it (into buf). RM_ENOTFOUND if missing. */
int rm_local_worker_bin(char *buf, size_t cap, rm_err *err);
/* Whether local workers run on GPUs: RINGMASTER_DEVICE=cuda in the runner's environment (which
 * every worker inherits); otherwise they are CPU processes (docs/gpu.md, "Running on GPUs"). */
bool rm_local_on_gpus(void);
#endif
