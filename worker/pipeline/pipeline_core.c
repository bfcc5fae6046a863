/* pipeline_core.c — placement, stage partitioning, micro-batches and the GPipe/1F1B event tables
 * (see pipeline_core.h). Pure: no I/O, no allocation. */
#include "worker/pipeline/pipeline_core.h"

int rm_pipe_place_of(int rank, int world, int P, rm_pipe_place *out, rm_err *err)
{
    if (P < 1 || world < 1 || world % P != 0 || rank < 0 || rank >= world)
        return rm_errf(err, RM_EINVAL,
                       "pipeline placement: rank %d of world %d does not fit %d "
                       "stages (the world must be a multiple of the stages)",
                       rank, world, P);
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
        int leave = P - 1 - p; /* layers the later stages need at least */
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
        return rm_errf(err, RM_EINVAL,
                       "pipeline: cannot split %d layers into %d stages (each stage "
                       "needs a layer; at most %d stages)",
                       nlayers, P, RM_PIPE_MAX_STAGES);
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
    if (schedule == 1) { /* GPipe */
        for (int m = 0; m < M; m++)
            ev[n++] = (rm_pipe_event){RM_PIPE_EV_F, m};
        for (int m = 0; m < M; m++)
            ev[n++] = (rm_pipe_event){RM_PIPE_EV_B, m};
        return n;
    }
    int warm = P - 1 - p < M ? P - 1 - p : M;
    int f = 0, b = 0;
    while (f < warm)
        ev[n++] = (rm_pipe_event){RM_PIPE_EV_F, f++};
    while (f < M) {
        ev[n++] = (rm_pipe_event){RM_PIPE_EV_F, f++};
        ev[n++] = (rm_pipe_event){RM_PIPE_EV_B, b++};
    }
    while (b < M)
        ev[n++] = (rm_pipe_event){RM_PIPE_EV_B, b++};
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

int rm_pipe_simulate(int schedule, int P, int M, double tf, double tb, double *idle, double *makespan,
                     rm_err *err)
{
    if (P < 1 || P > RM_PIPE_MAX_STAGES || M < 1 || M > SIM_MAX_MICRO || !(tf > 0) || !(tb > 0))
        return rm_errf(err, RM_EINVAL,
                       "pipeline simulation: P %d (1..%d), M %d (1..%d), costs must "
                       "be positive",
                       P, RM_PIPE_MAX_STAGES, M, SIM_MAX_MICRO);
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

/* ---- links ------------------------------------------------------------------------------------- */

rm_pipe_link_kind rm_pipe_link_for(bool host_memory)
{
    return host_memory ? RM_PIPE_LINK_TCP : RM_PIPE_LINK_NCCL;
}

static int xf_add(rm_pipe_xfer *out, int cap, int *n, int op, int side, int grad, int event, int mb, int rows,
                  int M, int group)
{
    if (*n >= cap)
        return RM_EINVAL;
    rm_pipe_xfer *x = &out[(*n)++];
    int off, cnt;
    rm_pipe_micro_rows(rows, M, mb, &off, &cnt);
    *x = (rm_pipe_xfer){.op = (uint8_t)op,
                        .side = (uint8_t)side,
                        .grad = (uint8_t)grad,
                        .event = event,
                        .mb = mb,
                        .row_off = off,
                        .rows = cnt,
                        .group = group};
    return RM_OK;
}

/* The receive before event i, if any: 1 and its fields. */
static int recv_before(const rm_pipe_event *e, int P, int p, int *side, int *grad)
{
    if (e->kind == RM_PIPE_EV_F && p > 0) {
        *side = RM_PIPE_SIDE_PREV;
        *grad = 0;
        return 1;
    }
    if (e->kind == RM_PIPE_EV_B && p < P - 1) {
        *side = RM_PIPE_SIDE_NEXT;
        *grad = 1;
        return 1;
    }
    return 0;
}

static int send_after(const rm_pipe_event *e, int P, int p, int *side, int *grad)
{
    if (e->kind == RM_PIPE_EV_F && p < P - 1) {
        *side = RM_PIPE_SIDE_NEXT;
        *grad = 0;
        return 1;
    }
    if (e->kind == RM_PIPE_EV_B && p > 0) {
        *side = RM_PIPE_SIDE_PREV;
        *grad = 1;
        return 1;
    }
    return 0;
}

int rm_pipe_xfer_plan(const rm_pipe_event *ev, int nev, int P, int p, int rows, int M, bool grouped,
                      rm_pipe_xfer *out, int cap)
{
    if (!ev || !out || nev < 0 || P < 1 || p < 0 || p >= P || M < 1 || M > RM_PIPE_MAX_MICRO || rows < 0 ||
        cap < 0)
        return RM_EINVAL;
    int n = 0, group = -1, side, grad;
    /* the receive before event 0 opens the first group; then, per event, its send and the next
     * event's receive share one when they use the same link (one communicator per group) */
    for (int i = 0; i < nev; i++) {
        if (ev[i].mb < 0 || ev[i].mb >= M)
            return RM_EINVAL;
        if (recv_before(&ev[i], P, p, &side, &grad)) {
            bool joins = grouped && n > 0 && out[n - 1].op == RM_PIPE_XF_SEND && out[n - 1].event == i - 1 &&
                         out[n - 1].side == side;
            if (!joins)
                group++;
            if (xf_add(out, cap, &n, RM_PIPE_XF_RECV, side, grad, i, ev[i].mb, rows, M, group))
                return RM_EINVAL;
        }
        if (send_after(&ev[i], P, p, &side, &grad)) {
            group++;
            if (xf_add(out, cap, &n, RM_PIPE_XF_SEND, side, grad, i, ev[i].mb, rows, M, group))
                return RM_EINVAL;
        }
    }
    return n;
}

/* The stage and direction a transfer's partner lives on: a send to NEXT meets a receive from
 * PREV on p+1 and vice versa. */
static int partner_stage(int p, const rm_pipe_xfer *x)
{
    return x->side == RM_PIPE_SIDE_NEXT ? p + 1 : p - 1;
}

int rm_pipe_plan_check(int schedule, int P, int M, int rows, bool grouped, rm_err *err)
{
    enum { CAP = 4 * RM_PIPE_CHECK_MAX_MICRO };
    if (P < 1 || P > RM_PIPE_MAX_STAGES || M < 1 || M > RM_PIPE_CHECK_MAX_MICRO || rows < 0)
        return rm_errf(err, RM_EINVAL, "pipeline plan check: P %d (1..%d), M %d (1..%d), rows %d", P,
                       RM_PIPE_MAX_STAGES, M, RM_PIPE_CHECK_MAX_MICRO, rows);
    rm_pipe_xfer xf[RM_PIPE_MAX_STAGES][CAP];
    int ord[RM_PIPE_MAX_STAGES][CAP]; /* ordinal within (side, op) */
    uint8_t done[RM_PIPE_MAX_STAGES][CAP];
    int n[RM_PIPE_MAX_STAGES], pos[RM_PIPE_MAX_STAGES];
    for (int p = 0; p < P; p++) {
        rm_pipe_event ev[2 * RM_PIPE_CHECK_MAX_MICRO];
        int nev = rm_pipe_schedule_events(schedule, P, p, M, ev);
        if (nev < 0)
            return rm_errf(err, RM_EINVAL, "pipeline plan check: unknown schedule %d", schedule);
        n[p] = rm_pipe_xfer_plan(ev, nev, P, p, rows, M, grouped, xf[p], CAP);
        if (n[p] < 0)
            return rm_errf(err, RM_EINVAL, "pipeline plan check: no plan for stage %d", p);
        int cnt[2][2] = {{0, 0}, {0, 0}};
        for (int j = 0; j < n[p]; j++) {
            ord[p][j] = cnt[xf[p][j].side][xf[p][j].op]++;
            done[p][j] = 0;
        }
        pos[p] = 0;
    }
    for (;;) {
        bool progress = false, finished = true;
        for (int p = 0; p < P; p++) {
            if (pos[p] >= n[p])
                continue;
            finished = false;
            int g = xf[p][pos[p]].group;
            bool all = true;
            int j = pos[p];
            for (; j < n[p] && xf[p][j].group == g; j++) {
                if (done[p][j])
                    continue;
                const rm_pipe_xfer *x = &xf[p][j];
                int q = partner_stage(p, x), jj = -1;
                if (q < 0 || q >= P)
                    return rm_errf(err, RM_EPROTO,
                                   "pipeline plan: stage %d transfers to a stage %d "
                                   "that does not exist",
                                   p, q);
                /* the partner: the same ordinal on q, opposite side and op */
                for (int k = 0; k < n[q]; k++)
                    if (xf[q][k].side != x->side && xf[q][k].op != x->op && ord[q][k] == ord[p][j]) {
                        jj = k;
                        break;
                    }
                if (jj < 0)
                    return rm_errf(err, RM_EPROTO,
                                   "pipeline plan: stage %d's %s %d towards stage %d "
                                   "has no partner",
                                   p, x->op == RM_PIPE_XF_SEND ? "send" : "receive", ord[p][j], q);
                const rm_pipe_xfer *y = &xf[q][jj];
                if (y->mb != x->mb || y->row_off != x->row_off || y->rows != x->rows || y->grad != x->grad)
                    return rm_errf(err, RM_EPROTO,
                                   "pipeline plan: stage %d's micro-batch %d meets "
                                   "stage %d's micro-batch %d",
                                   p, x->mb, q, y->mb);
                if (pos[q] < n[q] && xf[q][pos[q]].group == y->group) {
                    done[p][j] = done[q][jj] = 1;
                    progress = true;
                } else {
                    all = false;
                }
            }
            if (all) {
                pos[p] = j;
                progress = true;
            }
        }
        if (finished)
            return RM_OK;
        if (!progress) {
            int p = 0;
            while (pos[p] >= n[p])
                p++;
            return rm_errf(err, RM_EPROTO,
                           "pipeline plan: deadlock: stage %d blocks in group %d "
                           "(micro-batch %d) and no neighbour can meet it",
                           p, xf[p][pos[p]].group, xf[p][pos[p]].mb);
        }
    }
}
