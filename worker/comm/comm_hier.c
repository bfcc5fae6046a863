/* comm_hier.c — the "hier" backend: hierarchical allreduce for ranks spread over several nodes
 * (docs/strategies.md#topology; spec.training.allreduce: hierarchical, or auto with > 1 node and > 1 rank per
 * node).
 *
 * Composition: two comms built from the other tables, nothing new on the wire.
 *   intra: the ranks of this node (same rm_rdzv_peer.node), in rank order; "shm" when cfg.shm_ok
 *          and they all advertised one host, else a TCP "ring" (ring tag 1);
 *   inter: the ranks with this rank's local index, one per node, in node order (nodes numbered by
 *          their lowest rank): a TCP "ring" (ring tag 2).
 * The tags keep both rings' connections apart on the worker's one ring listener (comm_ring.c).
 * allreduce = intra reduce-scatter (local rank l ends with the node's sum of shard l of the
 * buffer, shard layout of worker/allreduce/shard.h over the local world m) -> inter allreduce of that shard
 * among the l-th ranks of every node -> (AVG: scale the shard by 1/world) -> intra all-gather.
 * Across the slow links each rank moves 2(k-1)/k of 1/m of the buffer (k nodes) instead of the
 * flat ring's 2(n-1)/n of all of it.
 *
 * Results: every element is reduced by one fixed chain (inside the node by the intra comm's fixed
 * order, across nodes by the inter ring's) and then copied, so all ranks hold bit-identical
 * values; they equal the flat ring's within float rounding (a different summation order).
 *
 * Topology rule: hierarchical needs > 1 node, > 1 rank per node and the same number of ranks on
 * every node (the inter rings pair the l-th rank of every node). Otherwise the comm is the flat
 * ring (shm when every rank is on one host and shm_ok), logged once at init; rm_comm_hier_is_hier
 * tells which.
 *
 * reduce_scatter / all_gather (ZeRO sharding) use the global shard layout over world ranks, which
 * does not follow node boundaries: reduce_scatter is the hierarchical allreduce followed by a copy
 * of this rank's range (bit-identical to the allreduce's values there); all_gather zero-fills
 * the other ranks' ranges and runs the hierarchical allreduce (x + 0 is exact, so every value
 * arrives unchanged except that a -0.0 arrives as +0.0). Both move more bytes than a flat
 * reduce-scatter/all-gather would; they are correct, not tuned.
 *
 * Listener: both rings must claim their connections from one listener that lives across both
 * formations (a per-formation listener would close the other ring's parked connection). Without
 * cfg.listener, init starts one over cfg.listen_fd (or binds peers[rank].addr) and frees it once
 * both rings are formed.
 *
 * Ownership: as comm.h. The sub-comms belong to the hier comm; destroy() destroys them.
 * Threads: as comm.h; abort() aborts both sub-comms. f32 only (RM_EUNSUPPORTED otherwise). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "worker/comm/comm.h"
#include "worker/comm/net.h"
#include "worker/allreduce/shard.h"

#define HIER_TAG_INTRA 1
#define HIER_TAG_INTER 2

struct rm_comm {
    int rank, n;
    int hier; /* 1: intra + inter; 0: flat */
    int local_rank, local_world, nnodes, node_index;
    const rm_comm_ops *intra_ops, *inter_ops, *flat_ops;
    rm_comm *intra, *inter, *flat;
    atomic_int aborted;
    char desc[160];
};

/* Do peers[idx[0..k)] all advertise one host? */
static int one_host(const rm_rdzv_peer *peers, const int *idx, int k)
{
    const char *c0 = strrchr(peers[idx[0]].addr, ':');
    if (!c0)
        return 0;
    size_t hl = (size_t)(c0 - peers[idx[0]].addr);
    for (int q = 1; q < k; q++) {
        const char *cq = strrchr(peers[idx[q]].addr, ':');
        if (!cq || (size_t)(cq - peers[idx[q]].addr) != hl ||
            memcmp(peers[idx[q]].addr, peers[idx[0]].addr, hl))
            return 0;
    }
    return 1;
}

static void hier_destroy(rm_comm *c)
{
    if (!c)
        return;
    if (c->intra)
        c->intra_ops->destroy(c->intra);
    if (c->inter)
        c->inter_ops->destroy(c->inter);
    if (c->flat)
        c->flat_ops->destroy(c->flat);
    free(c);
}

/* Form a sub-comm over peers[idx[0..k)] (this rank is idx[me]). */
static int sub_init(const rm_comm_cfg *cfg, const rm_comm_ops **ops, const int *idx, int k, int me, int tag,
                    rm_ring_listener *lst, rm_comm **out, rm_err *err)
{
    rm_rdzv_peer *sp = calloc((size_t)k, sizeof *sp);
    if (!sp)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    for (int q = 0; q < k; q++) {
        sp[q] = cfg->peers[idx[q]];
        sp[q].rank = q;
    }
    rm_comm_cfg sc = *cfg;
    sc.rank = me;
    sc.world_size = k;
    sc.peers = sp;
    sc.listener = lst;
    sc.listen_fd = -1;
    sc.group = (uint32_t)tag;
    int rc = rm_comm_init_or_ring(ops, &sc, out, err);
    free(sp);
    return rc;
}

static int hier_init(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err)
{
    if (!cfg || !out)
        return rm_errf(err, RM_EINVAL, "hier: NULL argument");
    *out = NULL;
    int n = cfg->world_size;
    if (n < 1 || n > RM_RDZV_MAX_WORLD || cfg->rank < 0 || cfg->rank >= n)
        return rm_errf(err, RM_EINVAL, "hier: bad rank %d / world size %d", cfg->rank, n);
    if (n > 1 && !cfg->peers)
        return rm_errf(err, RM_EINVAL, "hier: no peer list");
    rm_comm *c = calloc(1, sizeof *c);
    int *node = calloc((size_t)n, sizeof *node), *grp = calloc((size_t)n, sizeof *grp);
    int rc = RM_OK, own_lfd = -1;
    rm_ring_listener *own_lst = NULL;
    if (!c || !node || !grp) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto fail;
    }
    c->rank = cfg->rank;
    c->n = n;
    atomic_init(&c->aborted, 0);
    rm_rdzv_topo tp = {.nnodes = 1, .local_world = 1, .uniform = true};
    if (n > 1) {
        if (rm_rdzv_node_index(cfg->peers, n, node) < 0 ||
            rm_rdzv_topology(cfg->peers, n, cfg->rank, &tp) != RM_OK) {
            rc = rm_errf(err, RM_ENOMEM, "out of memory");
            goto fail;
        }
    }
    c->nnodes = tp.nnodes;
    c->node_index = tp.node_index;
    c->local_rank = tp.local_rank;
    c->local_world = tp.local_world;
    c->hier = n > 1 && tp.nnodes > 1 && tp.local_world > 1 && tp.uniform;
    if (!c->hier) {
        for (int q = 0; q < n; q++)
            grp[q] = q;
        c->flat_ops =
            n > 1 && cfg->shm_ok && one_host(cfg->peers, grp, n) ? rm_comm_shm_ops() : rm_comm_ring_ops();
        rm_comm_cfg fc = *cfg;
        fc.group = 0;
        RM_CHECK_GOTO(rm_comm_init_or_ring(&c->flat_ops, &fc, &c->flat, err), rc, fail);
        /* after init: a /dev/shm too small turns shm into the ring */
        snprintf(c->desc, sizeof c->desc, "flat %s (%d node%s, %d..%d ranks per node%s)", c->flat_ops->name,
                 tp.nnodes, tp.nnodes == 1 ? "" : "s", tp.min_local, tp.max_local,
                 tp.nnodes > 1 && !tp.uniform ? ": uneven, hierarchical needs equal counts" : "");
        goto done;
    }
    /* one listener across both formations (see the file comment) */
    rm_ring_listener *lst = cfg->listener;
    if (!lst) {
        int lfd = cfg->listen_fd;
        if (lfd < 0) {
            char host[64];
            int port;
            RM_CHECK_GOTO(rm_comm_split_addr(cfg->peers[c->rank].addr, host, sizeof host, &port, err), rc,
                          fail);
            RM_CHECK_GOTO(rm_net_listen(host, port, 128, &own_lfd, NULL, err), rc, fail);
            lfd = own_lfd;
        }
        RM_CHECK_GOTO(rm_ring_listener_start(lfd, lfd == own_lfd, cfg->token, &own_lst, err), rc, fail);
        own_lfd = -1;
        lst = own_lst;
    }
    /* intra: this node's ranks in rank order */
    int k = 0, me = 0;
    for (int q = 0; q < n; q++)
        if (node[q] == c->node_index) {
            if (q == c->rank)
                me = k;
            grp[k++] = q;
        }
    c->intra_ops = cfg->shm_ok && one_host(cfg->peers, grp, k) ? rm_comm_shm_ops() : rm_comm_ring_ops();
    {
        rm_err e2 = {0};
        rc = sub_init(cfg, &c->intra_ops, grp, k, me, HIER_TAG_INTRA, lst, &c->intra, &e2);
        if (rc) {
            rc = rm_errf(err, rc, "hier: intra-node %s of node %d: %s", c->intra_ops->name, c->node_index,
                         e2.msg);
            goto fail;
        }
    }
    /* inter: the local_rank-th rank of every node, in node order */
    int *cnt = calloc((size_t)c->nnodes, sizeof *cnt);
    if (!cnt) {
        rc = rm_errf(err, RM_ENOMEM, "out of memory");
        goto fail;
    }
    for (int q = 0; q < n; q++) {
        if (cnt[node[q]] == c->local_rank)
            grp[node[q]] = q;
        cnt[node[q]]++;
    }
    free(cnt);
    c->inter_ops = rm_comm_ring_ops();
    {
        rm_err e2 = {0};
        rc = sub_init(cfg, &c->inter_ops, grp, c->nnodes, c->node_index, HIER_TAG_INTER, lst, &c->inter, &e2);
        if (rc) {
            rc = rm_errf(err, rc, "hier: inter-node ring of local rank %d: %s", c->local_rank, e2.msg);
            goto fail;
        }
    }
    snprintf(c->desc, sizeof c->desc, "hierarchical %d nodes x %d ranks (intra %s, inter ring)", c->nnodes,
             c->local_world, c->intra_ops->name);
done:
    rm_ring_listener_free(own_lst);
    free(node);
    free(grp);
    rm_debug("hier comm ready rank=%d world=%d mode=\"%s\"", c->rank, c->n, c->desc);
    *out = c;
    return RM_OK;
fail:
    if (own_lfd >= 0)
        close(own_lfd);
    rm_ring_listener_free(own_lst);
    free(node);
    free(grp);
    hier_destroy(c);
    return rc;
}

static int hier_check(rm_comm *c, rm_dtype dt, rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "hier: NULL comm");
    if (atomic_load(&c->aborted))
        return rm_errf(err, RM_ECLOSED, "hier: aborted");
    if (dt != RM_DT_F32)
        return rm_errf(err, RM_EUNSUPPORTED, "hier: %s not supported (f32 only)", rm_dtype_name(dt));
    return RM_OK;
}

/* The hierarchical allreduce in place (c->hier). */
static int hier_run(rm_comm *c, float *buf, size_t count, rm_redop op, rm_err *err)
{
    size_t off, len;
    rm_shard_range(count, c->local_world, c->local_rank, &off, &len);
    rm_err e2 = {0};
    int rc = c->intra_ops->reduce_scatter(c->intra, buf, buf + off, count, RM_DT_F32, RM_OP_SUM, &e2);
    if (rc)
        return rm_errf(err, rc, "hier: intra-node reduce-scatter: %s", e2.msg);
    rc = c->inter_ops->allreduce(c->inter, buf + off, len, RM_DT_F32, RM_OP_SUM, &e2);
    if (rc)
        return rm_errf(err, rc, "hier: inter-node allreduce: %s", e2.msg);
    if (op == RM_OP_AVG) {
        float s = 1.0f / (float)c->n;
        for (size_t i = 0; i < len; i++)
            buf[off + i] *= s;
    }
    rc = c->intra_ops->all_gather(c->intra, buf + off, buf, count, RM_DT_F32, &e2);
    if (rc)
        return rm_errf(err, rc, "hier: intra-node all-gather: %s", e2.msg);
    return RM_OK;
}

static int hier_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    RM_CHECK(hier_check(c, dt, err));
    if (!c->hier)
        return c->flat_ops->allreduce(c->flat, buf, count, dt, op, err);
    if (count == 0)
        return RM_OK;
    if (!buf)
        return rm_errf(err, RM_EINVAL, "hier: NULL buffer");
    return hier_run(c, buf, count, op, err);
}

static int hier_allreduce_oop(rm_comm *c, const void *send, void *recv, size_t count, rm_dtype dt,
                              rm_redop op, rm_err *err)
{
    RM_CHECK(hier_check(c, dt, err));
    if (!c->hier)
        return c->flat_ops->allreduce_oop(c->flat, send, recv, count, dt, op, err);
    if (count == 0)
        return RM_OK;
    if (!send || !recv)
        return rm_errf(err, RM_EINVAL, "hier: NULL buffer");
    if (send != recv)
        memcpy(recv, send, count * sizeof(float));
    return hier_run(c, recv, count, op, err);
}

static int hier_reduce_scatter(rm_comm *c, void *buf, void *shard, size_t count, rm_dtype dt, rm_redop op,
                               rm_err *err)
{
    RM_CHECK(hier_check(c, dt, err));
    if (!c->hier)
        return c->flat_ops->reduce_scatter(c->flat, buf, shard, count, dt, op, err);
    if (count == 0)
        return RM_OK;
    if (!buf || !shard)
        return rm_errf(err, RM_EINVAL, "hier: NULL buffer");
    RM_CHECK(hier_run(c, buf, count, op, err));
    size_t off, len;
    rm_shard_range(count, c->n, c->rank, &off, &len);
    if ((float *)shard != (float *)buf + off)
        memmove(shard, (float *)buf + off, len * sizeof(float));
    return RM_OK;
}

static int hier_all_gather(rm_comm *c, const void *shard, void *buf, size_t count, rm_dtype dt, rm_err *err)
{
    RM_CHECK(hier_check(c, dt, err));
    if (!c->hier)
        return c->flat_ops->all_gather(c->flat, shard, buf, count, dt, err);
    if (count == 0)
        return RM_OK;
    if (!buf || !shard)
        return rm_errf(err, RM_EINVAL, "hier: NULL buffer");
    size_t off, len;
    rm_shard_range(count, c->n, c->rank, &off, &len);
    float *b = buf;
    if ((const float *)shard != b + off)
        memmove(b + off, shard, len * sizeof(float));
    memset(b, 0, off * sizeof(float));
    memset(b + off + len, 0, (count - off - len) * sizeof(float));
    return hier_run(c, b, count, RM_OP_SUM, err);
}

static int hier_barrier(rm_comm *c, rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "hier: NULL comm");
    if (atomic_load(&c->aborted))
        return rm_errf(err, RM_ECLOSED, "hier: aborted");
    if (!c->hier)
        return c->flat_ops->barrier(c->flat, err);
    RM_CHECK(c->intra_ops->barrier(c->intra, err));
    RM_CHECK(c->inter_ops->barrier(c->inter, err));
    return c->intra_ops->barrier(c->intra, err);
}

static void hier_abort(rm_comm *c)
{
    if (!c)
        return;
    atomic_store(&c->aborted, 1);
    if (c->flat && c->flat_ops->abort)
        c->flat_ops->abort(c->flat);
    if (c->intra && c->intra_ops->abort)
        c->intra_ops->abort(c->intra);
    if (c->inter && c->inter_ops->abort)
        c->inter_ops->abort(c->inter);
}

static const rm_comm_ops hier_ops = {
    .name = "hier",
    .init = hier_init,
    .allreduce = hier_allreduce,
    .allreduce_oop = hier_allreduce_oop,
    .reduce_scatter = hier_reduce_scatter,
    .all_gather = hier_all_gather,
    .barrier = hier_barrier,
    .abort = hier_abort,
    .destroy = hier_destroy,
};

const rm_comm_ops *rm_comm_hier_ops(void)
{
    return &hier_ops;
}

int rm_comm_hier_is_hier(const rm_comm *c)
{
    return c && c->hier;
}

const char *rm_comm_hier_desc(const rm_comm *c)
{
    return c ? c->desc : "";
}
