/* pipe_sched.h — one pipeline stage's step: its schedule's events run over its links
 * (docs/strategies.md#pipeline-stages), for any stage compute. The pipeline strategy
 * (step_pipeline.c: a range of the model's units) and the tensor strategy with P > 1
 * (worker/tensor/step_tensor.c: a stage's layers split across its tensor group) both run their
 * stages through it, so the event loop, the transfer plan's grouping, the frame counting and the
 * loss riding backward on the gradient frames are written once.
 *
 * A step (rm_pipe_sched_step): for each event of the stage's table (pipeline_core.h) in order, the
 * receive that opens its group is issued, the event waits for its input frame (F: the activations
 * of micro-batch m from p-1; B: the output gradient of m from p+1 and its loss), runs the caller's
 * compute (rm_pipe_stage_ops) on the micro-batch's rows and issues its send (F: the output rows to
 * p+1; B: the input-gradient rows and the micro-batch's loss to p-1); at the end every send is
 * flushed and the micro-batches' losses summed (the batch's loss on every stage).
 *
 * Ownership: rm_pipe_sched owns its buffers (the kernels' memory: init to free), its event table
 * and transfer plan, and the round's links (round to round_end); the two link comms are borrowed
 * (they must outlive round_end). One caller thread. */
#ifndef RM_WORKER_PIPE_SCHED_H
#define RM_WORKER_PIPE_SCHED_H
#include <stdbool.h>
#include <stdint.h>

#include "common/rm.h"
#include "kernels/kernels.h"
#include "worker/comm/comm.h"
#include "worker/pipeline/pipe_link.h"
#include "worker/pipeline/pipeline_core.h"

typedef struct rm_pipe_sched {
    const rm_kernels *k;
    const rm_pipe_link_ops *lk; /* tcp (host memory) or nccl (device memory): rm_pipe_link_for */
    int B, M, schedule;         /* rows per batch, micro-batches, 0 = 1F1B, 1 = GPipe */
    /* this round (rm_pipe_sched_round) */
    int P, p, din, dout; /* stages, this stage, floats per row of its input and output */
    rm_pipe_links *links;
    rm_pipe_event ev[2 * RM_PIPE_MAX_MICRO];
    int nev, inflight;
    rm_pipe_xfer *xf; /* [4*M] the step's transfers in issue order */
    int nxf;
    uint64_t nfwd, nbwd; /* frames expected so far from p-1 / p+1 this round */
    /* buffers (init; the kernels' memory unless said) */
    float *in_act;   /* [B x widest] received activations (the stage's input) */
    float *out_grad; /* [B x widest] received output gradients */
    float *dx;       /* [B x widest] input gradients to send */
    float *loss_mb;  /* [M] each micro-batch's loss sum */
    float *loss_rx;  /* [M] losses riding on the gradient frames */
    float *loss_h;   /* [M] host: loss_mb read back (device memory) */
} rm_pipe_sched;

/* Buffers for batches of B rows in M micro-batches of activations up to widest floats per row.
 * RM_ENOMEM; free with rm_pipe_sched_free (also after a failed init). */
int rm_pipe_sched_init(rm_pipe_sched *ps, const rm_kernels *k, int B, int M, int schedule, int widest,
                       rm_err *err);
void rm_pipe_sched_free(rm_pipe_sched *ps); /* NULL ok, idempotent */

/* Stage p of P this round, its input din and output dout floats per row: the event table and the
 * transfer plan (no links yet; the previous round's are closed). */
int rm_pipe_sched_round(rm_pipe_sched *ps, int P, int p, int din, int dout, rm_err *err);
/* The round's links over prev (the 2-rank ring comm to stage p-1, NULL on the first stage) and
 * next (to p+1, NULL on the last; both NULL: none), each wait bounded by timeout_s. */
int rm_pipe_sched_links(rm_pipe_sched *ps, rm_comm *prev, rm_comm *next, double timeout_s, rm_err *err);
void rm_pipe_sched_round_end(rm_pipe_sched *ps); /* closes the links */

/* A stage's compute, called by the step for each event on the micro-batch's rows [off, off + n)
 * of the batch (n >= 1). */
typedef struct rm_pipe_stage_ops {
    /* F: forward the rows from in0 (the received activations at those rows; NULL on the first
     * stage: the batch's own input). On the last stage also the loss, each row's scaled by
     * inv_batch, with its sum written to *loss (one float of the kernels' memory); loss is NULL on
     * the other stages. */
    int (*forward)(void *ud, int off, int n, const float *in0, float inv_batch, float *loss, rm_err *err);
    /* B: backward from dy (the gradient of the stage's output rows) to the parameters' gradients
     * (written by the step's first backward, first = true, added by the others) and, unless dx is
     * NULL (the first stage), the input gradient rows into dx. */
    int (*backward)(void *ud, int off, int n, float *dy, const float *in0, float *dx, bool first,
                    rm_err *err);
    /* The stage's output rows from off: what F sends to p+1; on the last stage, after the loss,
     * the gradient of the output (B's dy there). */
    float *(*output)(void *ud, int off);
} rm_pipe_stage_ops;

typedef struct rm_pipe_sched_stats {
    double t0;           /* when the schedule began (rm_mono) */
    double sched_s;      /* the schedule, first event to flushed */
    double waited_s;     /* of it, blocked on frames (the bubble) */
    double busy_s[2];    /* the F and the B events' compute and sends, their waits excluded */
    uint64_t sent, recv; /* bytes (with the TCP link's frame headers) */
    float loss;          /* the batch's loss sum (the micro-batches' on the last stage) */
} rm_pipe_sched_stats;

/* One step of `rows` rows (= B) through the stage's schedule. RM_EPROTO for a plan not fully
 * issued; a link's error (a dead or hung neighbour: RM_ETIMEDOUT, RM_EIO) as the link says. */
int rm_pipe_sched_step(rm_pipe_sched *ps, int rows, const rm_pipe_stage_ops *ops, void *ud,
                       rm_pipe_sched_stats *st, rm_err *err);

/* After a step: the batch's loss (ss->loss) into loss_sum (one float of the kernels' memory: the
 * model's, which the driver reads) and the step's pipeline numbers into st (worker/step.h). */
struct rm_step_stats;
int rm_pipe_sched_report(const rm_pipe_sched *ps, const rm_pipe_sched_stats *ss, float *loss_sum,
                         struct rm_step_stats *st, rm_err *err);

/* One group of at most one receive (rx_side >= 0: micro-batch rx_mb from that side) and one send
 * (tx_side >= 0: n floats of rows and, on a side that carries one, the extra float). */
int rm_pipe_sched_group(rm_pipe_sched *ps, int rx_side, int rx_mb, int tx_side, const float *rows, size_t n,
                        const float *extra, rm_err *err);
#endif
