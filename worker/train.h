/* train.h — `ringmaster-worker train`: the training driver, with in-place restart.
 *
 * The driver (train.c) owns the data, the model, the optimizer, the LR schedule, metrics and
 * health, evaluation, checkpoint files and the loop of rounds (one rendezvous epoch each: join ->
 * comm init -> restore -> steps until the group breaks, the job ends or the rendezvous says
 * rejoin/stop). How a step turns a batch into updated parameters across the workers is the
 * training strategy's (worker/step.h; today "allreduce", step_allreduce.c).
 *
 * Buffers (see worker/model/model.h for the exact offsets):
 *   - ONE flat fp32 parameter buffer and ONE flat gradient buffer, layers contiguous in forward
 *     order (W0,b0,W1,b1,...); fusion buckets (worker/allreduce/fusion.h) are contiguous ranges of the
 *     gradient buffer, allreduced while earlier layers' backward still runs.
 *   - Optimizer state (worker/optim/optim.h) is one or two more flat buffers with the same layout; a
 *     checkpoint (worker/checkpoint/checkpoint.h) is those flat arrays plus the scalars of the position in
 *     the schedule (step, data cursor, optimizer count, loss scaler).
 *   - Model and optimizer buffers come from the kernels table (kernels/kernels.h); they and the
 *     host checkpoint staging buffer are allocated once, before the first step; a step allocates
 *     nothing. Checkpoints are written by a background thread from that staging buffer.
 *
 * After any restore every rank's position — step, evaluation done, LR, data cursor — is rank 0's
 * (the checkpoint's), never what a process remembers from before a failure.
 *
 * Ownership: rm_train_cfg owns its strings (rm_train_cfg_free); rm_train_run owns everything it
 * creates and frees it before returning; cfg is borrowed for the call. */
#ifndef RM_WORKER_TRAIN_H
#define RM_WORKER_TRAIN_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "common/rm.h"
#include "common/trainingjob.h"

/* Worker settings after env, config file and flags are merged. */
typedef struct rm_train_cfg {
    rm_training_spec t;      /* spec.training (defaults applied, validated); owned */
    char *checkpoint_dir;    /* NULL = no checkpoints */
    int checkpoint_interval; /* steps; 0 = only on SIGTERM/end */
    int checkpoint_keep;     /* keep the newest K valid files (>= 1) */
    char *metrics_addr;      /* default ":9090"; "127.0.0.1:0" for tests; "" / "off" = none */
    rm_backend backend;      /* ring | nccl | mpi; AUTO (default) = ring: the controller
                                    resolves a GPU job's auto before it reaches the worker */
    bool backend_local;      /* "local": the world-of-one backend, no ring listener */
    char *device;            /* "cpu" | "cuda"; default cpu */
    char *rdzv_url, *job, *token, *worker_id, *bind_addr; /* from env; may be NULL */
    double progress_deadline_s;                           /* /healthz deadline; default 60 */
    double comm_timeout_s;                                /* bound on collective waits; default 10 */
    char *fault_spec;                                     /* RINGMASTER_FAULT; NULL = none */
    int eval_every_epoch;                                 /* 1 (default) */
    int log_every;                                        /* steps between progress log lines; default 100 */
    /* static world without a rendezvous (bench scripts, tests): --peers h:p,... --rank R */
    char *static_peers; /* NULL = rendezvous or alone */
    int static_rank;
    /* --resume[=if-present] / env RINGMASTER_RESUME: continue an earlier run. Without a usable
     * checkpoint in checkpoint_dir, RM_RESUME_REQUIRED refuses to start (exit 2) and
     * RM_RESUME_IF_PRESENT warns and starts at step 0. */
    int resume;      /* rm_resume_mode */
    bool check_only; /* --check: only check the settings a start checks, then exit */
    /* CPUs the kernels spread over (docs/architecture.md, "Threads in the kernels"):
     * RINGMASTER_THREADS, else the pod's CPU quota, else this machine's CPUs (affinity) divided
     * among the LOCAL_WORLD_SIZE workers sharing it. */
    int threads;
    /* spec.output (docs/models-and-data.md, "Exported models"): where rank 0 writes the model at
     * the end of a run — a folder or s3://bucket/prefix/; NULL = <checkpoint_dir>/export. From
     * RINGMASTER_OUTPUT_URI / RINGMASTER_OUTPUT_DTYPE or a TrainingJob --config. */
    char *output_uri;
    rm_output_dtype output_dtype;
} rm_train_cfg;

typedef enum { RM_RESUME_OFF = 0, RM_RESUME_REQUIRED, RM_RESUME_IF_PRESENT } rm_resume_mode;

/* Parse argv (after "train") + env into cfg. Returns RM_OK, or RM_EINVAL with err set (the caller
 * prints usage and exits 2). cfg owned: rm_train_cfg_free. */
int rm_train_cfg_parse(int argc, char **argv, rm_train_cfg *cfg, rm_err *err);
void rm_train_cfg_free(rm_train_cfg *cfg);
void rm_train_usage(FILE *out);

/* Run training to the end (or STOP, or SIGTERM). Returns 0 on success, else a negative RM_E*
 * with err set; err->field is set ("--checkpoint-dir", "--resume",
 * "spec.training.batchSizePerWorker") when the settings are at fault — worker/main.c exits 2 for
 * those, 1 for the others. */
int rm_train_run(const rm_train_cfg *cfg, rm_err *err);
#endif
