/* pipeline_core.c — placement, stage partitioning, micro-batches and the GPipe/1F1B event tables
 * (see pipeline_core.h). Pure: no I/O, no allocation. */
#include "worker/pipeline_core.h"

int rm_pipe_place_of(int rank, int world, int P, rm_pipe_place *out, rm_err *err)
{
    if (P < 1 || world < 1 || world % P != 0 || rank < 0 || rank >= world)
        return rm_errf(err, RM_EINVAL, "pipeline placement: rank %d of world %d does not fit %d "
                       "stages (the world must be a multiple of the stages)", rank, world, P);
    out->stages = P;
    out->replicas = world / P;
    out->stage = rank % P;
    out->replica = rank / P;
    out->prev = out->stage > 0 ? rank - 1 : -1;
    out->next = out->stage < P - 1 ? rank + 1 : -1;
    return RM_OK;
}

/* Greedy front packing under capacity cap, leaving at least one layer per later stage. Returns 1
 * and fills bounds when every layer fits into P stages. */
static int pack(const uint64_t *cost, int n, int P, uint64_t cap, int *bounds)
{
    int l = 0;
    bounds[0] = 0;
    for (int p = 0; p < P; p++) {
        uint64_t sum = 0;
        int start = l;
        int leave = P - 1 - p;   /* layers the later stages need at least */
        while (l < n - leave && (l == start || sum + cost[l] <= cap)) {
            if (cost[l] > cap)
                return 0;
            sum += cost[l++];
        }
        if (l == start)
            return 0;
        bounds[p + 1] = l;
    }
    return l == n;
}

int rm_pipe_partition(const uint64_t *cost, int nlayers, int P, int *bounds, rm_err *err)
{
    if (P < 1 || P > RM_PIPE_MAX_STAGES || nlayers < P)
        return rm_errf(err, RM_EINVAL, "pipeline: cannot split %d layers into %d stages (each stage "
                       "needs a layer; at most %d stages)", nlayers, P, RM_PIPE_MAX_STAGES);
    uint64_t lo = 0, hi = 0;
    for (int l = 0; l < nlayers; l++) {
        if (cost[l] > lo)
            lo = cost[l];
        hi += cost[l];
    }
    /* smallest cap that packs: binary search over [max layer, total] */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int tmp[RM_PIPE_MAX_STAGES + 1];
        if (pack(cost, nlayers, P, mid, tmp))
            hi = mid;
        else
            lo = mid + 1;
    }
    if (!pack(cost, nlayers, P, lo, bounds))
        return rm_errf(err, RM_EINVAL, "pipeline: no split of %d layers into %d stages", nlayers, P);
    return RM_OK;
}

void rm_pipe_micro_rows(int rows, int M, int m, int *off, int *n)
{
    if (M < 1 || m < 0 || m >= M || rows < 0) {
        *off = 0;
        *n = 0;
        return;
    }
    int base = rows / M, extra = rows % M;
    *n = base + (m < extra);
    *off = m * base + (m < extra ? m : extra);
}

int rm_pipe_schedule_events(int schedule, int P, int p, int M, rm_pipe_event *ev)
{
    if (P < 1 || p < 0 || p >= P || M < 1 || M > RM_PIPE_MAX_MICRO || (schedule != 0 && schedule != 1))
        return RM_EINVAL;
    int n = 0;
    if (schedule == 1) {   /* GPipe */
        for (int m = 0; m < M; m++)
            ev[n++] = (rm_pipe_event){ RM_PIPE_EV_F, m };
        for (int m = 0; m < M; m++)
            ev[n++] = (rm_pipe_event){ RM_PIPE_EV_B, m };
        return n;
    }
    int warm = P - 1 - p < M ? P - 1 - p : M;
    int f = 0, b = 0;
    while (f < warm)
        ev[n++] = (rm_pipe_event){ RM_PIPE_EV_F, f++ };
    while (f < M) {
        ev[n++] = (rm_pipe_event){ RM_PIPE_EV_F, f++ };
        ev[n++] = (rm_pipe_event){ RM_PIPE_EV_B, b++ };
    }
    while (b < M)
        ev[n++] = (rm_pipe_event){ RM_PIPE_EV_B, b++ };
    return n;
}

int rm_pipe_max_inflight(const rm_pipe_event *ev, int n)
{
    int live = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        live += ev[i].kind == RM_PIPE_EV_F ? 1 : -1;
        if (live > peak)
            peak = live;
    }
    return peak;
}

double rm_pipe_textbook_bubble(int P, int M)
{
    return P < 1 || M < 1 ? 0 : (double)(P - 1) / (double)(M + P - 1);
}

#define SIM_MAX_MICRO 128

int rm_pipe_simulate(int schedule, int P, int M, double tf, double tb, double *idle,
                     double *makespan, rm_err *err)
{
    if (P < 1 || P > RM_PIPE_MAX_STAGES || M < 1 || M > SIM_MAX_MICRO || !(tf > 0) || !(tb > 0))
        return rm_errf(err, RM_EINVAL, "pipeline simulation: P %d (1..%d), M %d (1..%d), costs must "
                       "be positive", P, RM_PIPE_MAX_STAGES, M, SIM_MAX_MICRO);
    rm_pipe_event ev[RM_PIPE_MAX_STAGES][2 * SIM_MAX_MICRO];
    double fdone[RM_PIPE_MAX_STAGES][SIM_MAX_MICRO], bdone[RM_PIPE_MAX_STAGES][SIM_MAX_MICRO];
    double t[RM_PIPE_MAX_STAGES];
    int idx[RM_PIPE_MAX_STAGES], nev[RM_PIPE_MAX_STAGES];
    for (int p = 0; p < P; p++) {
        nev[p] = rm_pipe_schedule_events(schedule, P, p, M, ev[p]);
        if (nev[p] < 0)
            return rm_errf(err, RM_EINVAL, "pipeline simulation: unknown schedule %d", schedule);
        idx[p] = 0;
        t[p] = 0;
        for (int m = 0; m < M; m++)
            fdone[p][m] = bdone[p][m] = -1;
    }
    for (int left = 2 * M * P; left > 0;) {
        int progressed = 0;
        for (int p = 0; p < P; p++) {
            while (idx[p] < nev[p]) {
                rm_pipe_event e = ev[p][idx[p]];
                double ready;
                if (e.kind == RM_PIPE_EV_F) {
                    if (p > 0 && fdone[p - 1][e.mb] < 0)
                        break;
                    ready = p > 0 ? fdone[p - 1][e.mb] : 0;
                } else {
                    if (fdone[p][e.mb] < 0 || (p < P - 1 && bdone[p + 1][e.mb] < 0))
                        break;
                    ready = p < P - 1 ? bdone[p + 1][e.mb] : fdone[p][e.mb];
                }
                double start = ready > t[p] ? ready : t[p];
                t[p] = start + (e.kind == RM_PIPE_EV_F ? tf : tb);
                if (e.kind == RM_PIPE_EV_F)
                    fdone[p][e.mb] = t[p];
                else
                    bdone[p][e.mb] = t[p];
                idx[p]++;
                left--;
                progressed = 1;
            }
        }
        if (!progressed)
            return rm_errf(err, RM_EPROTO, "pipeline simulation: the schedule deadlocks");
    }
    double end = 0;
    for (int p = 0; p < P; p++)
        if (t[p] > end)
            end = t[p];
    for (int p = 0; p < P; p++)
        idle[p] = (end - M * (tf + tb)) / end;
    *makespan = end;
    return RM_OK;
}
