/* pipeline_core.h — the pure parts of pipeline model parallelism (docs/strategies.md#pipeline-stages):
 * the grid placement (rank r = d*P + p is stage p of data-parallel replica d), the split of the
 * model's layers into P contiguous stages balanced by cost (parameter count), the split of a batch
 * into M micro-batches, and the two schedules as per-stage event tables:
 *   GPipe  every forward F(0..M-1), then every backward B(0..M-1) (in micro-batch order, so the
 *          gradient sums add in the same order as 1F1B's);
 *   1F1B   (PipeDream-Flush) stage p runs w = min(P-1-p, M) warm-up forwards, then alternates one
 *          forward and one backward, then drains the remaining backwards; at most min(P-p, M)
 *          micro-batches' activations are alive on stage p at once (GPipe: M).
 * rm_pipe_simulate plays a schedule with fixed forward/backward costs under the pipeline's
 * dependencies (F(p,m) after F(p-1,m); B(p,m) after B(p+1,m), and after F(p,m) on the last stage)
 * and reports each stage's idle fraction: with tf = tb the textbook bubble (P-1)/(M+P-1).
 *
 * No I/O, no allocation: callers pass arrays (tests/unit/test_pipeline.c checks them as tables;
 * worker/pipeline/step_pipeline.c runs them). Ownership: nothing is kept past a call. */
#ifndef RM_WORKER_PIPELINE_CORE_H
#define RM_WORKER_PIPELINE_CORE_H
#include <stdbool.h>
#include <stdint.h>
#include "common/rm.h"

#define RM_PIPE_MAX_STAGES 17  /* every stage holds >= 1 unit of the model */
#define RM_PIPE_MAX_MICRO 4096 /* micro-batches per step (>= 1 sample each) */

typedef enum { RM_PIPE_EV_F = 0, RM_PIPE_EV_B = 1 } rm_pipe_ev_kind;
typedef struct rm_pipe_event {
    uint8_t kind; /* rm_pipe_ev_kind */
    int32_t mb;   /* micro-batch index 0..M-1 */
} rm_pipe_event;

/* Placement of rank in a grid of P stages: stage = rank % P, replica d = rank / P. The stage's
 * previous/next neighbours are rank-1 / rank+1 (-1 at the ends); its data-parallel group is
 * {d*P + stage : d = 0..D-1}. RM_EINVAL when P < 1, world % P != 0 or rank out of range. */
typedef struct rm_pipe_place {
    int stage, replica, stages, replicas; /* p, d, P, D */
    int prev, next;                       /* neighbour ranks, -1 = none */
} rm_pipe_place;
int rm_pipe_place_of(int rank, int world, int P, rm_pipe_place *out, rm_err *err);
/* Rank of data-parallel replica d of stage p. */
static inline int rm_pipe_rank(int P, int d, int p)
{
    return d * P + p;
}

/* Split nlayers layers (cost[l] each, e.g. parameters) into P contiguous stages, each >= 1 layer,
 * minimising the largest stage cost; among equally good splits earlier stages take more layers.
 * bounds gets P+1 entries: stage p holds layers [bounds[p], bounds[p+1]). RM_EINVAL when P < 1,
 * P > nlayers or P > RM_PIPE_MAX_STAGES. */
int rm_pipe_partition(const uint64_t *cost, int nlayers, int P, int *bounds, rm_err *err);

/* Micro-batch m of a batch of rows split into M: the first rows % M micro-batches get one extra
 * row. *off and *n in rows; n is 0 when rows < M and m >= rows. */
void rm_pipe_micro_rows(int rows, int M, int m, int *off, int *n);

/* Stage p's events (2*M of them) in execution order into ev (>= 2*M entries). Returns the count,
 * or RM_EINVAL for a bad P, p, M or schedule (0 = 1F1B, 1 = GPipe, rm_pipe_schedule's values). */
int rm_pipe_schedule_events(int schedule, int P, int p, int M, rm_pipe_event *ev);
/* The most micro-batches whose forward ran and whose backward has not, over the event list: the
 * activation sets stage p must hold at once. */
int rm_pipe_max_inflight(const rm_pipe_event *ev, int n);

/* Simulate a schedule on P stages with forward cost tf and backward cost tb per micro-batch.
 * idle[p] (P entries) gets stage p's idle fraction of the makespan (time before its first event,
 * between events and after its last); *makespan the total. RM_EINVAL for bad arguments, RM_EPROTO
 * if the tables deadlock (a stage waits for an event that can never happen). */
int rm_pipe_simulate(int schedule, int P, int M, double tf, double tb, double *idle, double *makespan,
                     rm_err *err);
/* The textbook bubble fraction (P-1)/(M+P-1). */
double rm_pipe_textbook_bubble(int P, int M);
/* ---- the links between neighbouring stages (docs/strategies.md#pipeline-stages) ---------------------------------- */
/* Which transport carries a stage's activations and activation-gradients: authenticated TCP frames
 * (worker/pipeline/pipe_link_tcp.c) when the kernels' memory is host memory (the CPU table), NCCL
 * send/recv on device buffers (worker/pipeline/cuda/pipe_link_nccl.c) when it is not (a GPU). */
typedef enum { RM_PIPE_LINK_TCP = 0, RM_PIPE_LINK_NCCL = 1 } rm_pipe_link_kind;
rm_pipe_link_kind rm_pipe_link_for(bool host_memory);

/* One transfer of a stage's step, in issue order. Every event i of the stage's table has at most
 * a receive before its compute (F(m): the activations of m from p-1; B(m): the gradient of m from
 * p+1) and a send after it (F(m): the output of m to p+1; B(m): the input gradient of m to p-1,
 * with one trailing float, the micro-batch's loss). Grouped, the send after event i and the
 * receive before event i+1 form one group (one ncclGroupStart/End) when both use the same link: a
 * stage that sends to a neighbour that is itself sending to it (1F1B's steady state: F(m+1)'s
 * output goes to p+1 while p+1 sends B(m)'s gradient back) never blocks on a send whose receive
 * the peer posts only after its own send (the neighbours' deadlock). A send and a receive on
 * different links stay two groups in that order (a group never spans two communicators, whose
 * kernels could serialize); rm_pipe_plan_check proves the plans deadlock-free per schedule. */
typedef enum { RM_PIPE_SIDE_PREV = 0, RM_PIPE_SIDE_NEXT = 1 } rm_pipe_side;
typedef enum { RM_PIPE_XF_RECV = 0, RM_PIPE_XF_SEND = 1 } rm_pipe_xf_op;
typedef struct rm_pipe_xfer {
    uint8_t op;            /* rm_pipe_xf_op */
    uint8_t side;          /* rm_pipe_side: the neighbour */
    uint8_t grad;          /* 1: activation-gradient (+ the loss float), 0: activations */
    int32_t event;         /* index of its event: a receive runs before that event's compute, a send after */
    int32_t mb;            /* micro-batch */
    int32_t row_off, rows; /* its rows of the batch (rm_pipe_micro_rows) */
    int32_t group;         /* transfers with equal group are issued together, groups in order from 0 */
} rm_pipe_xfer;
/* Stage p's transfers for its event table ev[0..nev) of a batch of `rows` in M micro-batches, in
 * issue order, into out (cap entries; 2*nev always suffice). grouped = false: every transfer is its
 * own group. Returns the count, or RM_EINVAL for bad arguments or a too small cap. */
int rm_pipe_xfer_plan(const rm_pipe_event *ev, int nev, int P, int p, int rows, int M, bool grouped,
                      rm_pipe_xfer *out, int cap);
/* Plays every stage's plan of a schedule against its neighbours under blocking semantics (a
 * transfer completes only while its peer's matching transfer is posted, a stage posts its next
 * group only once the current one completed; the k-th send on a link direction meets the k-th
 * receive). RM_OK when every stage finishes with every send meeting the receive of the same
 * micro-batch and rows; RM_EPROTO naming the stage when the plans deadlock or mismatch; RM_EINVAL
 * for bad arguments (P <= RM_PIPE_MAX_STAGES, M <= RM_PIPE_CHECK_MAX_MICRO). */
#define RM_PIPE_CHECK_MAX_MICRO 32
int rm_pipe_plan_check(int schedule, int P, int M, int rows, bool grouped, rm_err *err);
#endif
