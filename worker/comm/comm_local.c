/* comm_local.c — the "local" backend: a world of one. Allreduce of one rank is the identity (sum
 * and average alike), so the in-place call does nothing and the out-of-place call copies. It lets
 * the trainer run single-process without sockets while keeping one code path. */
#include <stdlib.h>
#include <string.h>

#include "worker/comm/comm.h"

struct rm_comm {
    int aborted;
};

static int local_init(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err)
{
    if (!cfg || !out)
        return rm_errf(err, RM_EINVAL, "local: NULL argument");
    if (cfg->world_size != 1 || cfg->rank != 0)
        return rm_errf(err, RM_EINVAL, "local backend needs world size 1 (got rank %d of %d)", cfg->rank,
                       cfg->world_size);
    rm_comm *c = calloc(1, sizeof *c);
    if (!c)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    *out = c;
    return RM_OK;
}

static int local_check(rm_comm *c, rm_dtype dt, rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "local: NULL comm");
    if (c->aborted)
        return rm_errf(err, RM_ECLOSED, "local: aborted");
    if (rm_dtype_size(dt) == 0)
        return rm_errf(err, RM_EINVAL, "local: unknown dtype %d", (int)dt);
    return RM_OK;
}

static int local_allreduce_oop(rm_comm *c, const void *send, void *recv, size_t count, rm_dtype dt,
                               rm_redop op, rm_err *err)
{
    (void)op;
    int rc = local_check(c, dt, err);
    if (rc)
        return rc;
    if (count && send != recv)
        memmove(recv, send, count * rm_dtype_size(dt));
    return RM_OK;
}

static int local_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    return local_allreduce_oop(c, buf, buf, count, dt, op, err);
}

/* World of one: the shard is the whole vector. */
static int local_reduce_scatter(rm_comm *c, void *buf, void *shard, size_t count, rm_dtype dt, rm_redop op,
                                rm_err *err)
{
    (void)op;
    int rc = local_check(c, dt, err);
    if (rc)
        return rc;
    if (count && buf != shard)
        memmove(shard, buf, count * rm_dtype_size(dt));
    return RM_OK;
}

static int local_all_gather(rm_comm *c, const void *shard, void *buf, size_t count, rm_dtype dt, rm_err *err)
{
    int rc = local_check(c, dt, err);
    if (rc)
        return rc;
    if (count && buf != shard)
        memmove(buf, shard, count * rm_dtype_size(dt));
    return RM_OK;
}

static int local_barrier(rm_comm *c, rm_err *err)
{
    return local_check(c, RM_DT_F32, err);
}
static void local_abort(rm_comm *c)
{
    if (c)
        c->aborted = 1;
}
static void local_destroy(rm_comm *c)
{
    free(c);
}

static const rm_comm_ops local_ops = {
    .name = "local",
    .init = local_init,
    .allreduce = local_allreduce,
    .allreduce_oop = local_allreduce_oop,
    .reduce_scatter = local_reduce_scatter,
    .all_gather = local_all_gather,
    .barrier = local_barrier,
    .abort = local_abort,
    .destroy = local_destroy,
};

const rm_comm_ops *rm_comm_local_ops(void)
{
    return &local_ops;
}
