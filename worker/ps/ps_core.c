/* ps_core.c — the parameter server's pure rules (see ps_core.h). */
#include "worker/ps/ps_core.h"

#include <stdlib.h>
#include <string.h>

int rm_ps_partition(size_t total, const size_t *bounds, int nb, int S, size_t *off, size_t *len, rm_err *err)
{
    if (S < 1 || S > 64)
        return rm_errf(err, RM_EINVAL, "parameter servers: %d shards (want 1..64)", S);
    if ((size_t)S > total)
        return rm_errf(err, RM_EINVAL, "parameter servers: %d shards for %zu parameters", S, total);
    size_t slack = total / (8 * (size_t)S);
    size_t cut[65];
    cut[0] = 0;
    cut[S] = total;
    for (int i = 1; i < S; i++) {
        size_t ideal = (size_t)((unsigned __int128)total * (unsigned)i / (unsigned)S);
        size_t best = ideal, bestd = slack + 1;
        for (int j = 0; j < nb; j++) {
            size_t b = bounds[j];
            size_t d = b > ideal ? b - ideal : ideal - b;
            if (b > 0 && b < total && d <= slack && d < bestd) {
                best = b;
                bestd = d;
            }
        }
        /* keep the ranges non-empty and ordered: a snap never crosses a neighbour's ideal */
        if (best <= cut[i - 1])
            best = ideal > cut[i - 1] ? ideal : cut[i - 1] + 1;
        cut[i] = best;
    }
    for (int i = 0; i < S; i++) {
        off[i] = cut[i];
        len[i] = cut[i + 1] - cut[i];
    }
    return RM_OK;
}

const char *rm_ps_outcome_name(rm_ps_outcome o)
{
    switch (o) {
    case RM_PS_ACCEPTED:
        return "accepted";
    case RM_PS_COMPLETE:
        return "complete";
    case RM_PS_DROP_LATE:
        return "dropped_late";
    case RM_PS_DROP_DUP:
        return "dropped_duplicate";
    case RM_PS_AHEAD:
        return "ahead";
    case RM_PS_BAD:
        return "bad";
    }
    return "?";
}

int rm_ps_sync_init(rm_ps_sync *s, size_t n, int64_t version, int need, rm_err *err)
{
    memset(s, 0, sizeof *s);
    s->accum = calloc(n ? n : 1, sizeof(float));
    if (!s->accum)
        return rm_errf(err, RM_ENOMEM, "parameter server: out of memory (%zu floats)", n);
    s->n = n;
    s->version = version;
    s->need = need < 1 ? 1 : need;
    return RM_OK;
}

void rm_ps_sync_free(rm_ps_sync *s)
{
    if (!s)
        return;
    free(s->accum);
    memset(s, 0, sizeof *s);
}

void rm_ps_sync_set_need(rm_ps_sync *s, int need)
{
    s->need = need < 1 ? 1 : need;
}

bool rm_ps_sync_ready(const rm_ps_sync *s)
{
    return s->count > 0 && s->count >= s->need;
}

rm_ps_outcome rm_ps_sync_push(rm_ps_sync *s, int worker, int64_t tag, const float *grad)
{
    if (worker < 0 || worker >= RM_PS_MAX_WORKERS)
        return RM_PS_BAD;
    if (tag < s->version) {
        s->dropped++;
        return RM_PS_DROP_LATE;
    }
    if (tag > s->version)
        return RM_PS_AHEAD;
    uint64_t bit = 1ull << (worker % 64);
    if (s->seen[worker / 64] & bit) {
        s->dropped++;
        return RM_PS_DROP_DUP;
    }
    s->seen[worker / 64] |= bit;
    if (s->count == 0) {
        memcpy(s->accum, grad, s->n * sizeof(float));
    } else {
        for (size_t i = 0; i < s->n; i++)
            s->accum[i] += grad[i];
    }
    s->count++;
    return s->count >= s->need ? RM_PS_COMPLETE : RM_PS_ACCEPTED;
}

int rm_ps_sync_average(rm_ps_sync *s, float *out)
{
    int c = s->count;
    if (c == 0)
        return 0;
    float inv = 1.0f / (float)c;
    if (c == 1 && out == s->accum)
        ; /* the one gradient is its own mean */
    else
        for (size_t i = 0; i < s->n; i++)
            out[i] = s->accum[i] * inv;
    memset(s->seen, 0, sizeof s->seen);
    s->count = 0;
    s->version++;
    return c;
}

void rm_ps_clocks_note(rm_ps_clocks *c, int worker, int64_t step, double now)
{
    if (worker < 0 || worker >= RM_PS_MAX_WORKERS)
        return;
    if (c->seen[worker] == 0 || step > c->step[worker])
        c->step[worker] = step;
    c->seen[worker] = now > 0 ? now : 1e-9;
}

int64_t rm_ps_clocks_min(const rm_ps_clocks *c, double now, double dead_after)
{
    int64_t m = INT64_MAX;
    for (int w = 0; w < RM_PS_MAX_WORKERS; w++)
        if (c->seen[w] > 0 && now - c->seen[w] <= dead_after && c->step[w] < m)
            m = c->step[w];
    return m;
}

bool rm_ps_clocks_may_proceed(const rm_ps_clocks *c, int worker, int64_t step, int bound, double now,
                              double dead_after)
{
    (void)worker;
    if (bound <= 0)
        return true;
    int64_t m = rm_ps_clocks_min(c, now, dead_after);
    return m == INT64_MAX || step - m <= bound;
}

bool rm_ps_warm_holds(int worker, int64_t applied, int64_t warm, const rm_ps_clocks *c, double now,
                      double dead_after)
{
    if (warm <= 0 || applied >= warm || worker == 0)
        return false;
    bool w0_gone = c->seen[0] > 0 && now - c->seen[0] > dead_after;
    return !w0_gone;
}

int rm_ps_warm_bound(int bound, int64_t applied, int64_t warm)
{
    return warm > 0 && applied < warm ? 0 : bound;
}

bool rm_ps_view_note(rm_ps_view *v, int64_t epoch, int live)
{
    if (live < 1 || live > RM_PS_MAX_WORKERS || epoch < 0)
        return false;
    if (epoch < v->epoch || (epoch == v->epoch && live <= v->live))
        return false;
    v->epoch = epoch;
    v->live = live;
    return true;
}

int rm_ps_sync_need_for(int live, int backups)
{
    int n = live - (backups > 0 ? backups : 0);
    return n < 1 ? 1 : n;
}

float rm_ps_lr_scale(int live, int n)
{
    if (n < 1 || live >= n)
        return 1.0f;
    return live < 1 ? 1.0f / (float)n : (float)live / (float)n;
}

const char *const rm_ps_agree_act_names[] = {"wait", "pause", "roll", "serve"};

uint64_t rm_ps_agree_gen(const uint64_t *inc, int S)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < S; i++)
        for (int b = 0; b < 64; b += 8)
            h = (h ^ ((inc[i] >> b) & 0xff)) * 1099511628211ull;
    return h ? h : 1;
}

static bool holds(const rm_ps_member *m, int64_t v)
{
    for (int k = 0; k < m->nheld && k < RM_PS_HELD_MAX; k++)
        if (m->held[k] == v)
            return true;
    return false;
}

int64_t rm_ps_agree_common(const rm_ps_member *m, int S)
{
    int64_t best = 0;
    if (S < 1)
        return 0;
    for (int k = 0; k < m[0].nheld && k < RM_PS_HELD_MAX; k++) {
        int64_t v = m[0].held[k];
        if (v <= best)
            continue;
        bool all = true;
        for (int i = 1; i < S && all; i++)
            all = holds(&m[i], v);
        if (all)
            best = v;
    }
    return best;
}

rm_ps_agree rm_ps_agree_decide(const rm_ps_member *m, int S, int self)
{
    rm_ps_agree a = {RM_PS_AGREE_WAIT, 0, 0};
    uint64_t inc[64];
    if (S < 1 || S > 64 || self < 0 || self >= S)
        return a;
    for (int i = 0; i < S; i++) {
        if (!m[i].known || !m[i].inc)
            return a; /* not everyone registered: nothing changes */
        inc[i] = m[i].inc;
    }
    a.gen = rm_ps_agree_gen(inc, S);
    if (m[self].gen != a.gen) {
        a.act = RM_PS_AGREE_PAUSE;
        return a;
    }
    for (int i = 0; i < S; i++)
        if (m[i].gen != a.gen)
            return a; /* someone still serves the old generation or has not seen this one */
    a.version = rm_ps_agree_common(m, S);
    if (!m[self].settled || m[self].at != a.version) {
        a.act = RM_PS_AGREE_ROLL;
        return a;
    }
    for (int i = 0; i < S; i++)
        if (!m[i].settled || m[i].at != a.version)
            return a;
    a.act = RM_PS_AGREE_SERVE;
    return a;
}

void rm_ps_sync_reset(rm_ps_sync *s, int64_t version)
{
    s->version = version;
    s->count = 0;
    memset(s->seen, 0, sizeof s->seen);
}
