/* nccl_wait.c — the NCCL backend's wait and abort state machine (worker/comm/nccl_wait.h). Plain C, no
 * CUDA: worker/comm/cuda/comm_nccl.c plugs CUDA/NCCL queries into the probe table. */
#include "worker/comm/nccl_wait.h"

#include <stdio.h>

int rm_nccl_wait(const rm_nccl_probe *p, void *ctx, const rm_nccl_wait_cfg *cfg, rm_err *err)
{
    char why[256];
    double t0 = p->now(ctx), t_start = t0;
    bool started = p->started == NULL;
    for (;;) {
        int r;
        why[0] = '\0';
        if (!started) {
            r = p->started(ctx, why, sizeof why);
            if (r < 0)
                return rm_errf(err, r, "%s: waiting for its inputs: %s", cfg->what, why);
            if (r == RM_NW_DONE) {
                started = true;
                t_start = p->now(ctx);
            }
        }
        if (started) {
            r = p->done(ctx, why, sizeof why);
            if (r == RM_NW_DONE)
                return RM_OK;
            if (r < 0)
                return rm_errf(err, r, "%s: %s", cfg->what, why);
        }
        if (p->async_error) {
            r = p->async_error(ctx, why, sizeof why);
            if (r < 0)
                return rm_errf(err, r, "%s: peer failure: %s", cfg->what, why);
        }
        if (cfg->aborted && atomic_load(cfg->aborted))
            return rm_errf(err, RM_ECLOSED, "%s: aborted", cfg->what);
        double t = p->now(ctx);
        if (!started && t - t0 > cfg->start_timeout_s)
            return rm_errf(err, RM_ETIMEDOUT,
                           "%s: its inputs were not ready within %.1f s "
                           "(the compute stream is stuck)",
                           cfg->what, cfg->start_timeout_s);
        if (started && t - t_start > cfg->timeout_s)
            return rm_errf(err, RM_ETIMEDOUT, "%s: not finished within %.1f s (peer dead or hung)", cfg->what,
                           cfg->timeout_s);
        p->pause(ctx, t - t0);
    }
}

double rm_nccl_collective_timeout(bool first, double timeout_s, double init_timeout_s)
{
    return first && init_timeout_s > timeout_s ? init_timeout_s : timeout_s;
}

void rm_nccl_guard_init(rm_nccl_guard *g, void (*abort_fn)(void *ctx), void *ctx)
{
    pthread_mutex_init(&g->mu, NULL);
    g->in_flight = false;
    g->alive = false;
    atomic_init(&g->aborted, 0);
    g->aborts = 0;
    g->abort_fn = abort_fn;
    g->ctx = ctx;
}

void rm_nccl_guard_destroy(rm_nccl_guard *g)
{
    pthread_mutex_destroy(&g->mu);
}

void rm_nccl_guard_set_alive(rm_nccl_guard *g)
{
    pthread_mutex_lock(&g->mu);
    g->alive = true;
    pthread_mutex_unlock(&g->mu);
}

/* Caller holds mu. */
static void abort_once_locked(rm_nccl_guard *g)
{
    atomic_store(&g->aborted, 1);
    if (g->alive) {
        g->alive = false;
        g->aborts++;
        if (g->abort_fn)
            g->abort_fn(g->ctx);
    }
}

int rm_nccl_guard_begin(rm_nccl_guard *g, rm_err *err)
{
    pthread_mutex_lock(&g->mu);
    if (atomic_load(&g->aborted) || !g->alive) {
        pthread_mutex_unlock(&g->mu);
        return rm_errf(err, RM_ECLOSED, "nccl: communicator aborted");
    }
    g->in_flight = true;
    pthread_mutex_unlock(&g->mu);
    return RM_OK;
}

int rm_nccl_guard_end(rm_nccl_guard *g, int rc, rm_err *err)
{
    pthread_mutex_lock(&g->mu);
    g->in_flight = false;
    if (rc != RM_OK || atomic_load(&g->aborted)) {
        abort_once_locked(g);
        if (rc == RM_OK)
            rc = rm_errf(err, RM_ECLOSED, "nccl: aborted while the collective finished");
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void rm_nccl_guard_abort(rm_nccl_guard *g)
{
    pthread_mutex_lock(&g->mu);
    atomic_store(&g->aborted, 1);
    if (!g->in_flight)
        abort_once_locked(g);
    pthread_mutex_unlock(&g->mu);
}

bool rm_nccl_guard_release(rm_nccl_guard *g)
{
    pthread_mutex_lock(&g->mu);
    bool clean = g->alive && !atomic_load(&g->aborted);
    if (!clean)
        abort_once_locked(g);
    g->alive = false;
    pthread_mutex_unlock(&g->mu);
    return clean;
}
