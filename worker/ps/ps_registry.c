/* ps_registry.c — the parameter servers' addresses from the rendezvous, and bounded-retry
 * connections to them (ps_registry.h). */
#include "worker/ps/ps_registry.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

int rm_ps_registry_init(rm_ps_registry *g, const char (*addrs)[128], int n, const char *rendezvous,
                        const char *job, const char *token, const char *id, rm_err *err)
{
    memset(g, 0, sizeof *g);
    if (n < 1 || n > RM_PS_MAX_SERVERS)
        return rm_errf(err, RM_EINVAL, "parameter servers: %d servers (want 1..%d)", n, RM_PS_MAX_SERVERS);
    g->n = n;
    for (int i = 0; i < n; i++)
        snprintf(g->addrs[i], sizeof g->addrs[i], "%s", addrs[i]);
    if (!rendezvous || !*rendezvous)
        return RM_OK;
    g->rdzv = rm_rdzv_client_new(rendezvous, job && *job ? job : "default/local", token ? token : "",
                                 id && *id ? id : "0", err);
    if (!g->rdzv) {
        rm_err why = *err; /* which argument the client refused, and why */
        return rm_err_field(err, why.code, "RINGMASTER_RENDEZVOUS", "cannot use \"%s\" (job %s): %s",
                            rendezvous, job && *job ? job : "default/local", why.msg);
    }
    for (int i = 0; i < n; i++)
        g->addrs[i][0] = 0; /* unknown until the rendezvous says */
    return RM_OK;
}

void rm_ps_registry_free(rm_ps_registry *g)
{
    if (!g)
        return;
    rm_rdzv_client_free(g->rdzv);
    g->rdzv = NULL;
}

void rm_ps_registry_set_cancel(rm_ps_registry *g, const volatile sig_atomic_t *cancel, const atomic_int *stop)
{
    g->cancel = cancel;
    g->stop = stop;
    if (g->rdzv)
        rm_rdzv_client_set_cancel(g->rdzv, cancel);
}

bool rm_ps_registry_canceled(const rm_ps_registry *g)
{
    return (g->cancel && *g->cancel) || (g->stop && atomic_load(g->stop));
}

int rm_ps_registry_lookup(rm_ps_registry *g, int i, rm_err *err)
{
    if (!g->rdzv)
        return RM_OK;
    int n = 0;
    RM_CHECK(rm_rdzv_servers(g->rdzv, g->got, RM_PS_MAX_SERVERS, &n, err));
    if (i >= n || !g->got[i][0])
        return rm_errf(err, RM_ENOTFOUND,
                       "parameter server %d has not registered with the "
                       "rendezvous",
                       i);
    if (strcmp(g->addrs[i], g->got[i]) != 0)
        rm_info("parameter server %d is at %s (rendezvous)", i, g->got[i]);
    memcpy(g->addrs[i], g->got[i], sizeof g->addrs[i]); /* NUL-terminated (rdzv.h) */
    return RM_OK;
}

int rm_ps_registry_connect(rm_ps_registry *g, rm_ps_conn *c, int i, int worker, const char *token,
                           double deadline, rm_err *err)
{
    if (c->fd >= 0)
        return RM_OK;
    if (i < 0 || i >= g->n)
        return rm_errf(err, RM_EINVAL, "parameter server %d: there are %d", i, g->n);
    double backoff = 0.1;
    for (;;) {
        rm_err e = {0};
        int rc = rm_ps_registry_lookup(g, i, &e); /* a replacement may serve elsewhere */
        if (g->addrs[i][0]) {
            double dl = rm_mono() + RM_PS_TRY_S;
            rc = rm_ps_conn_open(c, g->addrs[i], i, g->n, worker, token,
                                 deadline > rm_mono() && deadline < dl ? deadline : dl, &e);
            if (rc == RM_OK)
                return RM_OK;
            if (rc == RM_EAUTH)
                return rm_errf(err, rc, "%s", e.msg);
        } else if (rc == RM_OK) {
            rc = rm_errf(&e, RM_ENOTFOUND, "parameter server %d: no address", i);
        }
        if (rm_ps_registry_canceled(g))
            return rm_errf(err, RM_ECANCELED, "parameter server %d: canceled", i);
        if (rm_mono() + backoff > deadline)
            return rm_errf(err, g->addrs[i][0] ? rc : RM_ETIMEDOUT, "%s", e.msg);
        if (g->addrs[i][0])
            rm_warn("parameter server %d unreachable, retrying in %.1f s err=\"%s\"", i, backoff, e.msg);
        rm_sleep(backoff);
        backoff = backoff * 2 > 2 ? 2 : backoff * 2;
    }
}
