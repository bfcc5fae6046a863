/* trainer.h — what the driver's files share (internal to the worker's `train` command): the
 * trainer context, its progress reporter and its checkpoint writer, and the functions one file
 * calls in another. train.c is the driver (setup, rounds, evaluation, the step loop);
 * train_state.c the state (fresh, restored, synchronised) and the checkpoint writer;
 * reporter.c the progress reporter thread.
 *
 * Ownership: the trainer owns everything it points to (trainer_free in train.c); the reporter and
 * the writer are parts of it, started and stopped by the driver. */
#ifndef RM_WORKER_TRAINER_H
#define RM_WORKER_TRAINER_H
#include "worker/train.h"

#include <signal.h>
#include "common/clock.h"
#include <errno.h>
#include <getopt.h>
#include <sys/resource.h>
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/json.h"
#include "common/log.h"
#include "common/rdzv.h"
#include "common/worker_env.h"
#include "common/yaml.h"
#include "kernels/kernels.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/ckpt_shard.h"
#include "worker/checkpoint/manifest.h"
#include "worker/comm/comm.h"
#include "worker/data/data.h"
#include "worker/data/reader.h"
#include "common/faults.h"
#include "worker/gpu.h"
#include "worker/model/export.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"
#include "worker/optim/schedule.h"
#include "worker/step.h"
#include "worker/wmetrics.h"

/* SIGINT/SIGTERM seen (the one piece of state a signal handler reaches; train.c). */
extern volatile sig_atomic_t rm_train_term;

enum { R_DONE = 1, R_BROKEN, R_REJOIN, R_STOP, R_TERM };

/* The progress reporter: a thread that sends the latest snapshot every ~1 s. */
typedef struct reporter {
    rm_rdzv_client *client; /* its own: clients are one per thread */
    pthread_t th;
    bool started, inited;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit, active;   /* active: a round is running and the snapshot is current */
    rm_rdzv_report snap; /* guarded by mu; snap.checkpoint_error points at ckpt_err */
    char ckpt_err[128];  /* guarded by mu */
    int64_t samples;     /* local samples so far, guarded by mu */
    atomic_int action;   /* 0, R_REJOIN or R_STOP for the round in snap.epoch */
    atomic_int action_epoch;
    double last_rate;      /* guarded by mu; the training thread copies it to the gauge
                                   (the gauge's series changes with the rank label) */
    double tokens_per_row; /* guarded by mu; a language model's tokens per sample, else 0 */
    /* Workers that never talk to each other (a strategy that claims its batches: parameter
     * servers) do not stop when the rendezvous moves on (docs/strategies.md#failure-semantics:
     * nobody waits): the reporter re-joins in the background with polling joins while the
     * training thread goes on, and hands over the round once it closed. */
    bool detached;            /* set before the thread starts */
    const char *my_addr;      /* borrowed from the trainer */
    atomic_int regroup_from;  /* the epoch being left; 0: none */
    atomic_int joining_epoch; /* the epoch of the round joined in the background: what the
                                   reports say meanwhile (the controller then counts this worker
                                   as a member of the round it is in, not a stray to re-form for) */
    atomic_llong view;        /* RM_STEP_VIEW(epoch, workers alive) for the strategy (step.h) */
    atomic_int new_rank, new_world, new_epoch; /* a round that closed in the background
                                                    (new_epoch written last) */
} reporter;

/* The checkpoint writer thread (see "checkpoints, off the critical path" below). */
typedef struct ckpt_writer {
    pthread_t th;
    bool started, inited;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    bool busy;        /* a write was handed over and its result not yet collected;
                                   touched by the training thread only (under mu) */
    atomic_bool done; /* the write in flight finished; the result below is ready */
    const char *dir;  /* borrowed from the settings */
    int keep;
    rm_ckpt_units units;                      /* the model's layers (sharded sets; borrowed from the model) */
    rm_model_tensor *tensors;                 /* the model's named tensors, every unit's (owned) ... */
    rm_ckpt_model model;                      /* ... as every checkpoint's manifest names them (n 0: none) */
    int nstages;                              /* the write in flight is a pipeline stage set (mu) */
    int stage_bounds[RM_MODEL_MAX_UNITS + 1]; /* ... with these unit bounds (mu) */
    rm_ckpt_run *runs;                        /* the write in flight is a pieces set with these runs (mu; */
    int nruns, runs_cap;                      /* owned, grown as the strategy asks); nruns 0: not one */
    double wait_s;                            /* sharded: how long to wait for the other ranks' shards */
    rm_ckpt_meta meta;                        /* the write in flight (guarded by mu) */
    const void *buf;                          /* host_stage */
    size_t bytes;
    int rc; /* result, guarded by mu */
    char err[256];
    char path[4200];
    double seconds;
    double blocked; /* the training thread's time handing this write over (wait for
                                   the previous one + snapshot); training thread only */
} ckpt_writer;

typedef struct trainer {
    const rm_train_cfg *cfg;
    const rm_kernels *k;
    rm_data tr, te; /* the training and test splits */
    rm_model m;
    rm_optim opt;
    rm_lr_sched sched;
    int B; /* per-worker batch */
    uint32_t *perm;
    int perm_epoch;
    float *host_x; /* staging for non-host kernels */
    int32_t *host_labels;
    float *host_stage; /* checkpoint payload staging (params + state), host */
    size_t stage_bytes;
    float *dev_small; /* 32 floats of device memory: evaluation sums */
    rm_amp amp;       /* mixed precision (fp16 loss scaling); a no-op for fp32 */
    bool amp_on;
    int gpu; /* CUDA device ordinal (cuda table only) */

    /* world */
    rm_rdzv_client *rdzv;
    int listen_fd;
    rm_ring_listener *ring_lst; /* owns listen_fd's socket once started (ring backend) */
    char my_addr[96];
    const rm_comm_ops *ops;
    rm_comm *comm;
    const rm_step_ops *strat; /* the training strategy (worker/step.h) */
    rm_step *st;
    int rank, world, rdzv_epoch;
    int local_rank, local_world, nnodes; /* this round's topology (rm_rdzv_topology) */
    char node[RM_RDZV_NODE_MAX + 1];     /* this rank's node as the rendezvous reported it */
    bool join_gave_up;                   /* no round within the join deadline: fatal */

    /* training state (what a checkpoint holds) */
    int64_t step;
    int train_epoch;
    int64_t data_pos;
    double lr;
    int K;            /* gradientAccumulationSteps: micro-batches per optimizer step */
    double grad_norm; /* the last step's global gradient norm (gradClip; < 0: not computed) */
    int64_t last_ckpt_step;
    int ckpt_failures;  /* consecutive failed checkpoint writes (reported; 0 = last ok) */
    char ckpt_err[128]; /* the last failure's message ("" after a success) */
    /* the end-of-run export (rank 0; status.result.model): where model.safetensors landed, its
     * sha256 and size; or why the export failed (the ExportFailing condition) */
    char export_uri[1024];
    char export_sha256[65];
    uint64_t export_bytes;
    char export_err[256];
    bool have_state; /* params/optimizer hold a real state (fresh, loaded or synced):
                                   before the first round forms they are zeros, never saved */

    /* results and rates */
    double test_acc, test_loss, train_loss;
    int64_t eval_step;                     /* step of the last evaluation, -1 none */
    rm_rdzv_eval evals[RM_RDZV_MAX_EVALS]; /* the newest evaluations, for the reports */
    int nevals;
    double t_start, train_seconds;
    int64_t samples_local;
    double rep_t; /* last loss read for the reporter */
    double rate;  /* samples/s, last interval */
    double ar_gbps;
    int64_t log_step;
    double fail_t; /* failure detected at (mono), 0 none */
    int restarts;
    int64_t gather_step; /* step of the last sharded state_gather (-1 none) */
    rm_step_memory mem;  /* the strategy's bytes per kind, and the peak RSS (report_memory) */
    double peak_rss;

    rm_wmetrics wm;
    rm_faults faults;
    reporter rp;
    ckpt_writer cw;
    /* spec.training.model.init.uri's weights, checked against the model; m.init_weights points
     * here, so a fresh start (never a resume) takes them (worker/model/export.h) */
    rm_model_weights init_w;
} trainer;

/* Across the driver's files (see the top of this header for which file holds which). */
int rm_tr_state_sync(trainer *t, rm_err *err);
int rm_tr_state_load(trainer *t);
void rm_tr_state_fresh(trainer *t, rm_err *err);
int rm_tr_report(trainer *t, bool done);
void rm_tr_reporter_stop(trainer *t);
int rm_tr_reporter_start(trainer *t, rm_err *err);
void rm_tr_reporter_publish(trainer *t, bool active);
void rm_tr_reporter_kick(trainer *t);
int rm_tr_reporter_action(trainer *t);
void rm_tr_report_memory(trainer *t, bool log);
int rm_tr_rdzv_client_make(const rm_train_cfg *cfg, rm_rdzv_client **out, rm_err *err);
void rm_tr_data_slot(const trainer *t, int *slot, int *nslots);
int rm_tr_ckpt_write(trainer *t, rm_err *err);
int rm_tr_ckpt_writer_start(trainer *t, rm_err *err);
int rm_tr_ckpt_write_sync(trainer *t, rm_err *err);
/* The end of a successful run: rank 0 writes the whole model to <checkpoint dir>/export
 * (docs/models-and-data.md, "Exported models"; spec.output's default). Collective where the
 * parameters are spread over the ranks (pipeline stages): every rank calls it at the same point,
 * after materialize. A failed write is logged and the job still succeeds (its checkpoints stay). */
int rm_tr_export(trainer *t, rm_err *err);
int rm_tr_ckpt_gather(trainer *t, rm_err *err);
int rm_tr_ckpt_collect(trainer *t, bool wait);
bool rm_tr_backend_is(const rm_train_cfg *cfg, rm_backend b);
void rm_tr_ckpt_writer_stop(trainer *t);
#endif
