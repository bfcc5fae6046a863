/* lbfgs_core.c — two-loop recursion over shard operations, Armijo line search, portion
 * assignment; see lbfgs_core.h. Pure: no I/O, no clocks (callers pass `now`). */
#include "worker/ps/lbfgs_core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- history --------------------------------------------------------------------------------- */

void rm_lbfgs_hist_init(rm_lbfgs_hist *h, int m)
{
    memset(h, 0, sizeof *h);
    h->m = m < 1 ? 1 : m > RM_LBFGS_HIST_MAX ? RM_LBFGS_HIST_MAX : m;
    h->gamma = 1.0;
}

int rm_lbfgs_hist_next_slot(const rm_lbfgs_hist *h)
{
    return (h->head + h->count) % h->m;
}

bool rm_lbfgs_hist_push(rm_lbfgs_hist *h, double sy, double yy)
{
    if (!(sy > 1e-10 * yy) || !(yy > 0) || !isfinite(sy) || !isfinite(yy))
        return false;
    int slot = rm_lbfgs_hist_next_slot(h);
    h->rho[slot] = 1.0 / sy;
    h->gamma = sy / yy;
    if (h->count < h->m)
        h->count++;
    else
        h->head = (h->head + 1) % h->m;
    return true;
}

/* ---- two-loop recursion ---------------------------------------------------------------------- */

int rm_lbfgs_direction(const rm_lbfgs_vecops *v, const rm_lbfgs_hist *h, rm_err *err)
{
    double alpha[RM_LBFGS_HIST_MAX];
    int rc;
    /* q = g (kept in D) */
    if ((rc = v->copy(v->ctx, RM_LV_D, RM_LV_G, err)))
        return rc;
    /* newest to oldest: alpha_j = rho_j s_j.q; q -= alpha_j y_j */
    for (int k = h->count - 1; k >= 0; k--) {
        int j = (h->head + k) % h->m;
        double sq;
        if ((rc = v->dot(v->ctx, RM_LV_S(j), RM_LV_D, &sq, err)))
            return rc;
        alpha[k] = h->rho[j] * sq;
        if ((rc = v->axpy(v->ctx, RM_LV_D, -alpha[k], RM_LV_Y(j), err)))
            return rc;
    }
    /* r = gamma q (H0 = gamma I, Nocedal & Wright eq. 7.20) */
    if (h->count > 0 && (rc = v->scale(v->ctx, RM_LV_D, h->gamma, err)))
        return rc;
    /* oldest to newest: beta = rho_j y_j.r; r += (alpha_j - beta) s_j */
    for (int k = 0; k < h->count; k++) {
        int j = (h->head + k) % h->m;
        double yr;
        if ((rc = v->dot(v->ctx, RM_LV_Y(j), RM_LV_D, &yr, err)))
            return rc;
        double beta = h->rho[j] * yr;
        if ((rc = v->axpy(v->ctx, RM_LV_D, alpha[k] - beta, RM_LV_S(j), err)))
            return rc;
    }
    /* d = -r */
    return v->scale(v->ctx, RM_LV_D, -1.0, err);
}

int rm_lbfgs_update_pair(const rm_lbfgs_vecops *v, rm_lbfgs_hist *h, bool *pushed, rm_err *err)
{
    int slot = rm_lbfgs_hist_next_slot(h), rc;
    double sy, yy;
    *pushed = false;
    /* When the ring is full the next slot is the oldest pair's: overwriting it before the push is
     * safe because a refused pair leaves count and head alone but the oldest pair's vectors would
     * be gone — so drop it from the ring first. */
    if (h->count == h->m) {
        h->head = (h->head + 1) % h->m;
        h->count--;
    }
    if ((rc = v->copy(v->ctx, RM_LV_S(slot), RM_LV_X, err)) ||
        (rc = v->axpy(v->ctx, RM_LV_S(slot), -1.0, RM_LV_X0, err)) ||
        (rc = v->copy(v->ctx, RM_LV_Y(slot), RM_LV_G, err)) ||
        (rc = v->axpy(v->ctx, RM_LV_Y(slot), -1.0, RM_LV_G0, err)) ||
        (rc = v->dot(v->ctx, RM_LV_S(slot), RM_LV_Y(slot), &sy, err)) ||
        (rc = v->dot(v->ctx, RM_LV_Y(slot), RM_LV_Y(slot), &yy, err)))
        return rc;
    *pushed = rm_lbfgs_hist_push(h, sy, yy);
    return RM_OK;
}

/* ---- Armijo ---------------------------------------------------------------------------------- */

void rm_armijo_begin(rm_armijo *a, double f0, double gd0, double t0, bool fixed)
{
    memset(a, 0, sizeof *a);
    a->f0 = f0;
    a->gd0 = gd0;
    a->t = t0;
    a->c1 = 1e-4;
    a->shrink = 0.5;
    a->max_trials = 10;
    a->fixed = fixed;
}

rm_ls_verdict rm_armijo_feed(rm_armijo *a, double f_trial)
{
    a->trials++;
    if (a->fixed && isfinite(f_trial))
        return RM_LS_ACCEPT;
    if (isfinite(f_trial) && f_trial <= a->f0 + a->c1 * a->t * a->gd0)
        return RM_LS_ACCEPT;
    if (a->trials >= a->max_trials)
        return RM_LS_GIVE_UP;
    a->t *= a->shrink;
    return RM_LS_RETRY;
}

/* ---- portions -------------------------------------------------------------------------------- */

int rm_portions_init(rm_portions *ps, int P, int nworkers, double deadline_s, rm_err *err)
{
    memset(ps, 0, sizeof *ps);
    if (P < 1 || nworkers < 1 || nworkers > RM_PORTIONS_MAX_WORKERS || !(deadline_s > 0))
        return rm_errf(err, RM_EINVAL, "portions: P %d, workers %d, deadline %g", P, nworkers, deadline_s);
    ps->p = calloc((size_t)P, sizeof *ps->p);
    ps->completed = calloc((size_t)nworkers, sizeof *ps->completed);
    if (!ps->p || !ps->completed) {
        rm_portions_free(ps);
        return rm_errf(err, RM_ENOMEM, "portions: out of memory");
    }
    ps->P = P;
    ps->nworkers = nworkers;
    ps->deadline_s = deadline_s;
    ps->pass = -1;
    return RM_OK;
}

void rm_portions_free(rm_portions *ps)
{
    if (!ps)
        return;
    free(ps->p);
    free(ps->completed);
    memset(ps, 0, sizeof *ps);
}

void rm_portions_begin(rm_portions *ps, int64_t pass)
{
    memset(ps->p, 0, (size_t)ps->P * sizeof *ps->p);
    ps->pass = pass;
    ps->done = 0;
    ps->next = 0;
}

int rm_portions_claim(rm_portions *ps, int w, double now)
{
    if (ps->done == ps->P)
        return RM_PORTION_DONE;
    while (ps->next < ps->P && ps->p[ps->next].state != 0)
        ps->next++;
    for (int i = ps->next; i < ps->P; i++) {
        if (ps->p[i].state == 0) {
            ps->p[i].state = 1;
            ps->p[i].holder = w;
            ps->p[i].issues++;
            ps->p[i].deadline = now + ps->deadline_s;
            return i;
        }
    }
    /* nothing pending: back up the tail — the most overdue portion w does not hold */
    int best = RM_PORTION_NONE;
    for (int i = 0; i < ps->P; i++) {
        rm_portion *p = &ps->p[i];
        if (p->state == 1 && p->holder != w && now >= p->deadline &&
            (best < 0 || p->deadline < ps->p[best].deadline))
            best = i;
    }
    if (best >= 0) {
        rm_portion *p = &ps->p[best];
        p->holder = w;
        p->issues++;
        p->deadline = now + ps->deadline_s;
        ps->reissued++;
    }
    return best;
}

int rm_portions_claim_static(rm_portions *ps, int w)
{
    if (ps->done == ps->P)
        return RM_PORTION_DONE;
    for (int i = w; w >= 0 && i < ps->P; i += ps->nworkers) {
        if (ps->p[i].state == 0) {
            ps->p[i].state = 1;
            ps->p[i].holder = w;
            ps->p[i].issues++;
            return i;
        }
    }
    return RM_PORTION_NONE;
}

bool rm_portions_complete(rm_portions *ps, int64_t pass, int i, int w)
{
    if (pass != ps->pass || i < 0 || i >= ps->P || w < 0 || w >= ps->nworkers)
        return false;
    rm_portion *p = &ps->p[i];
    if (p->state == 2) {
        ps->duplicates++;
        return false;
    }
    /* a pending portion can be answered too: its holder was declared lost, yet its answer came */
    p->state = 2;
    p->holder = w;
    ps->done++;
    ps->completed[w]++;
    return true;
}

int rm_portions_worker_lost(rm_portions *ps, int w)
{
    int n = 0;
    for (int i = 0; i < ps->P; i++) {
        rm_portion *p = &ps->p[i];
        if (p->state == 1 && p->holder == w) {
            p->state = 0;
            if (i < ps->next)
                ps->next = i;
            n++;
        }
    }
    return n;
}

bool rm_portions_all_done(const rm_portions *ps)
{
    return ps->done == ps->P;
}
