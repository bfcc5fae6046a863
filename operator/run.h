/* run.h — the `ringmaster run`, `ringmaster validate` and `ringmaster version` commands.
 *
 * Design: run.c is only the command line and the terminal: it loads and validates the manifest
 * (errors as "FILE:LINE: field: message", exit 2), picks folders, installs the signal handlers and
 * the self-pipe, draws the live progress line, and prints the outcome; the job itself is driven by
 * operator/local.c (the local runtime) through the shared reconcile core.
 *
 * Exit codes: 0 Succeeded, 1 Failed (reason printed) or a start-up failure, 2 bad manifest or flag,
 * 130/143/129 stopped by SIGINT/SIGTERM/SIGHUP (SIGHUP is handled as SIGTERM: workers
 * checkpoint, the final status is printed). A malformed RINGMASTER_FAULT is refused with exit 2. */
#ifndef RM_RUN_H
#define RM_RUN_H
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "common/yaml.h"

#define RM_VERSION "0.1.0"

/* Overrides from flags; 0 = keep the manifest's value. runtimes: --runtimes, the file or folder a
 * spec.runtimeRef is resolved from (common/tj_runtime.h; NULL = none, a reference is an error).
 * cluster: check for a cluster (`validate`), not for a run on this machine. */
typedef struct rm_manifest_overrides {
    int replicas;
    int epochs;
    const char *runtimes;
    bool cluster;
} rm_manifest_overrides;

/* Read the manifest at path ("-" = stdin) once, with the loader's size cap, so that a pipe
 * (`-f <(...)`) is read exactly once and its documents dispatched by kind. On RM_OK *out is owned
 * by the caller (rm_yaml_free). On error msg holds one line (YAML syntax errors keep the loader's
 * "FILE:LINE:COL: message"). */
int rm_manifest_read(const char *path, rm_yaml_docs **out, char *msg, size_t cap);
/* Take the TrainingJob document of d (read from path, named in messages), merge the runtime it
 * names (ov->runtimes), apply overrides and defaults, and validate. d is borrowed. On RM_OK *out is owned by the caller (rm_tj_free). On
 * error *out is zeroed and msg holds one line: "FILE:LINE: spec.minReplicas: must be <=
 * spec.replicas". */
int rm_manifest_load(const rm_yaml_docs *d, const char *path, const rm_manifest_overrides *ov, rm_tj *out,
                     char *msg, size_t cap);

/* One line for a manifest error: "FILE:LINE: field: message" when the field (or, for an error
 * with no field, the document) has a known line in document i of d, else "FILE: message". */
void rm_manifest_msg(char *msg, size_t cap, const char *path, const rm_yaml_docs *d, size_t i,
                     const rm_err *e);
/* Remove what an earlier run left in a checkpoint folder (checkpoints, temporaries, fault
 * markers); returns how many files went. */
int rm_run_fresh_checkpoints(const char *dir);
/* Send this process's stderr (the structured log) to `log_path` (appended) and return a stream on
 * the original terminal for the live display; the caller owns and fcloses it. NULL (stderr left
 * as it was) when the log file or the duplicate cannot be opened. */
FILE *rm_run_tty_to_log(const char *log_path);

/* The checkpoint folder of `ringmaster run` (into buf): --checkpoint-dir when given, else
 * spec.checkpoint.path as written (relative or absolute) unless it is the cluster default
 * RM_DEFAULT_CHECKPOINT_PATH, else "checkpoints/<name>". Returns buf. */
const char *rm_run_checkpoint_dir(const char *flag, const rm_tj *job, char *buf, size_t cap);

/* Print obj as one line of compact JSON on stdout (the -o json result); takes and frees obj
 * (NULL: prints nothing). */
void rm_run_print_json(cJSON *obj);
/* Make a relative path absolute against the working directory (in place; unchanged when the
 * working directory cannot be read). */
void rm_run_abs_path(char *path, size_t cap);
/* The run folder of a local run (into buf): flag when given, else
 * $TMPDIR/ringmaster-<name>-<UTC yyyymmdd-hhmmss>-<pid> (/tmp without TMPDIR). Returns buf. */
const char *rm_run_dir_name(const char *flag, const char *name, char *buf, size_t cap);

/* argv[0] is the command word ("run", "validate", "version"). Return the process exit code. */
int rm_run_main(int argc, char **argv);
int rm_validate_main(int argc, char **argv);
int rm_version_main(int argc, char **argv);
/* `ringmaster tokenize [flags] INPUT OUTDIR` (operator/tokenize.c): text into token shards. */
int rm_tokenize_main(int argc, char **argv);
#endif
