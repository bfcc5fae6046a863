/* grid.h — the placement of a job's ranks on the grid of tensor (T), pipeline (P) and
 * data-parallel (D) axes (docs/models-and-data.md, "Tensor parallelism"): rank r = (d·P + p)·T + t
 * is tensor rank t of pipeline stage p of data-parallel replica d. The T ranks of one tensor group
 * are adjacent (one node, shared memory, when placement.workersPerNode is a multiple of T); with
 * T = 1 it is the pipeline's placement r = d·P + p (worker/pipeline/pipeline_core.h).
 *
 * Every worker derives its groups from its rank and the world (the rendezvous hands out none):
 *   tensor group    the T ranks with its (p, d), t = 0..T-1  (Megatron's f/g collectives)
 *   pipeline group  the P ranks with its (t, d), p = 0..P-1  (neighbouring stages link)
 *   data group      the D ranks with its (t, p), d = 0..D-1  (gradients are averaged here only)
 * Members are listed in order of the axis' coordinate, so a rank's index in its group is that
 * coordinate and every member forms the group with the same list.
 *
 * Pure: no I/O, no allocation, nothing kept past a call (tests/unit/test_grid.c checks it as a
 * table). */
#ifndef RM_COMMON_GRID_H
#define RM_COMMON_GRID_H
#include "common/rm.h"

typedef enum { RM_GRID_TENSOR = 0, RM_GRID_PIPELINE = 1, RM_GRID_DATA = 2 } rm_grid_axis;

typedef struct rm_grid_place {
    int rank, world;
    int T, P, D; /* the grid's sizes: world = T·P·D */
    int t, p, d; /* this rank's coordinates */
} rm_grid_place;

/* rank -> (t, p, d) on a grid of T x P x (world / (T·P)). RM_EINVAL (message naming what is
 * wrong) when T or P < 1, T·P does not divide world, or rank is outside [0, world). */
int rm_grid_place_of(int rank, int world, int T, int P, rm_grid_place *out, rm_err *err);

/* (t, p, d) -> rank. */
static inline int rm_grid_rank(int T, int P, int t, int p, int d)
{
    return (d * P + p) * T + t;
}

/* The members of pl's group along axis, in coordinate order, into ranks (cap entries); returns
 * the group's size (T, P or D; nothing written past cap), or RM_EINVAL for an unknown axis. The
 * rank's own index in the list is its coordinate on that axis (rm_grid_coord). */
int rm_grid_group(const rm_grid_place *pl, rm_grid_axis axis, int *ranks, int cap);
/* The rank's coordinate on axis (t, p or d); -1 for an unknown axis. */
int rm_grid_coord(const rm_grid_place *pl, rm_grid_axis axis);
#endif
