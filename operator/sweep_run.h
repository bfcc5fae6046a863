/* sweep_run.h — `ringmaster run -f sweep.yaml` and `ringmaster validate -f sweep.yaml`: a
 * TrainingSweep on this machine.
 *
 * Design: the sweep core (common/sweep.h) decides; this file only executes. Each trial is one
 * child process of the runner (fork, no exec) that runs the trial's TrainingJob through the local
 * runtime as a library (rm_local_run, operator/local.h: its own in-process rendezvous on a random
 * port, its own workers, exactly as `ringmaster run` for one job) and streams the trial's status
 * to the runner as JSON lines over a pipe. A fork per trial, not a thread, because the local
 * runtime reaps its workers with waitpid(-1) and owns its signal handling: in separate processes
 * the trials cannot steal each other's children. At most parallelTrials trials run at once.
 *
 * Stopping a trial (median early stopping): the runner sends its child SIGTERM, which is the local
 * runtime's ordinary stop request (workers checkpoint and exit); the trial is recorded as Stopped
 * with reason MedianStop, never Failed. Ctrl-C stops every trial the same way.
 *
 * Folders: RUN_DIR/<sweep>-<i>/ holds each trial's worker logs and runner log; checkpoints go to
 * CHECKPOINT_DIR/<sweep>-<i>/ (CHECKPOINT_DIR: --checkpoint-dir, else checkpoints/<sweep>), emptied
 * at the start (a sweep always starts fresh).
 *
 * Output: stdout carries only the result (a table of trials, or with -o json the final
 * TrainingSweep as the last line); on a terminal stderr shows a live table of trials (index,
 * parameters, epoch, objective, state), off a terminal one line per change.
 * Exit: 0 when the sweep Succeeded (at least one trial succeeded), 1 when it Failed, 2 bad
 * manifest or flag, 130/143 interrupted. */
#ifndef RM_SWEEP_RUN_H
#define RM_SWEEP_RUN_H
#include <stdbool.h>
#include <stddef.h>
#include "common/rm.h"
#include "common/sweep.h"
#include "common/yaml.h"

/* Does the manifest d (read once by rm_manifest_read, operator/run.h) hold a TrainingSweep
 * document? d is borrowed; NULL: false. */
bool rm_sweep_manifest_is(const rm_yaml_docs *d);

/* Take the TrainingSweep of d (read from path, named in messages; borrowed): parse, defaults,
 * validation (every trial through the TrainingJob validator, each trial's workers against this
 * machine's memory). On error msg holds one line "FILE:LINE: field: message". *out owned by the
 * caller (rm_sweep_free). */
int rm_sweep_manifest_load(const rm_yaml_docs *d, const char *path, rm_sweep *out, char *msg, size_t cap);

typedef struct rm_sweep_run_opts {
    const char *file;           /* named in messages */
    const rm_yaml_docs *docs;   /* the manifest, read once; borrowed */
    const char *run_dir;        /* NULL: $TMPDIR/ringmaster-<sweep>-<time>-<pid> */
    const char *checkpoint_dir; /* NULL: checkpoints/<sweep> */
    const char *log_format;     /* workers' log format, "text" | "json" */
    bool json;                  /* -o json */
    bool log_json;              /* --log-format json: no live table */
} rm_sweep_run_opts;

/* The sweep to the end; returns the exit code. */
int rm_sweep_run(const rm_sweep_run_opts *o);
/* `validate` for a sweep file; returns the exit code (0 valid, 2 invalid). */
int rm_sweep_validate(const rm_yaml_docs *d, const char *file, bool json);
#endif
