/* pipeline_core.h — the pure parts of pipeline model parallelism (issue 15; strategies.md):
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
 * worker/step_pipeline.c runs them). Ownership: nothing is kept past a call. */
#ifndef RM_WORKER_PIPELINE_CORE_H
#define RM_WORKER_PIPELINE_CORE_H
#include <stdint.h>
#include "common/rm.h"

#define RM_PIPE_MAX_STAGES 17        /* every stage holds >= 1 layer: RM_MODEL_MAX_LAYERS */
#define RM_PIPE_MAX_MICRO 4096       /* micro-batches per step (>= 1 sample each) */

typedef enum { RM_PIPE_EV_F = 0, RM_PIPE_EV_B = 1 } rm_pipe_ev_kind;
typedef struct rm_pipe_event {
    uint8_t kind;                    /* rm_pipe_ev_kind */
    int32_t mb;                      /* micro-batch index 0..M-1 */
} rm_pipe_event;

/* Placement of rank in a grid of P stages: stage = rank % P, replica d = rank / P. The stage's
 * previous/next neighbours are rank-1 / rank+1 (-1 at the ends); its data-parallel group is
 * {d*P + stage : d = 0..D-1}. RM_EINVAL when P < 1, world % P != 0 or rank out of range. */
typedef struct rm_pipe_place {
    int stage, replica, stages, replicas;   /* p, d, P, D */
    int prev, next;                         /* neighbour ranks, -1 = none */
} rm_pipe_place;
int rm_pipe_place_of(int rank, int world, int P, rm_pipe_place *out, rm_err *err);
/* Rank of data-parallel replica d of stage p. */
static inline int rm_pipe_rank(int P, int d, int p) { return d * P + p; }

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
int rm_pipe_simulate(int schedule, int P, int M, double tf, double tb, double *idle,
                     double *makespan, rm_err *err);
/* The textbook bubble fraction (P-1)/(M+P-1). */
double rm_pipe_textbook_bubble(int P, int M);
#endif
