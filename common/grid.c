/* grid.c — rank placement on the T x P x D grid (common/grid.h). */
#include "common/grid.h"

int rm_grid_place_of(int rank, int world, int T, int P, rm_grid_place *out, rm_err *err)
{
    if (T < 1 || P < 1)
        return rm_errf(err, RM_EINVAL, "grid: tensorParallel %d and pipelineStages %d must be >= 1", T, P);
    if (world < 1 || world % (T * P))
        return rm_errf(err, RM_EINVAL,
                       "grid: world %d is not a multiple of tensorParallel x pipelineStages (%d x %d)", world,
                       T, P);
    if (rank < 0 || rank >= world)
        return rm_errf(err, RM_EINVAL, "grid: rank %d outside a world of %d", rank, world);
    *out = (rm_grid_place){
        .rank = rank,
        .world = world,
        .T = T,
        .P = P,
        .D = world / (T * P),
        .t = rank % T,
        .p = (rank / T) % P,
        .d = rank / (T * P),
    };
    return RM_OK;
}

int rm_grid_coord(const rm_grid_place *pl, rm_grid_axis axis)
{
    switch (axis) {
    case RM_GRID_TENSOR:
        return pl->t;
    case RM_GRID_PIPELINE:
        return pl->p;
    case RM_GRID_DATA:
        return pl->d;
    }
    return -1;
}

int rm_grid_group(const rm_grid_place *pl, rm_grid_axis axis, int *ranks, int cap)
{
    int n;
    switch (axis) {
    case RM_GRID_TENSOR:
        n = pl->T;
        break;
    case RM_GRID_PIPELINE:
        n = pl->P;
        break;
    case RM_GRID_DATA:
        n = pl->D;
        break;
    default:
        return RM_EINVAL;
    }
    for (int i = 0; i < n && i < cap; i++) {
        int t = axis == RM_GRID_TENSOR ? i : pl->t;
        int p = axis == RM_GRID_PIPELINE ? i : pl->p;
        int d = axis == RM_GRID_DATA ? i : pl->d;
        ranks[i] = rm_grid_rank(pl->T, pl->P, t, p, d);
    }
    return n;
}
