/* comm_staged.c — device buffers over a host transport (worker/comm/comm_staged.h). */
#include "worker/comm/comm_staged.h"

#include <stdlib.h>
#include <string.h>

#include "worker/allreduce/shard.h"

struct rm_comm {
    const rm_comm_ops *ops; /* the wrapped transport */
    rm_comm *c;
    const rm_kernels *k;
    int rank, world;
    unsigned char *h; /* pinned host staging, cap bytes */
    size_t cap;
};

static int grow(rm_comm *s, size_t bytes, rm_err *err)
{
    if (bytes <= s->cap)
        return RM_OK;
    rm_kernels_host_free(s->k, s->h);
    s->cap = 0;
    if (!(s->h = rm_kernels_host_alloc(s->k, bytes)))
        return rm_errf(err, RM_ENOMEM, "comm %s (staged): out of host memory for %zu bytes", s->ops->name,
                       bytes);
    s->cap = bytes;
    return RM_OK;
}

static int st_init(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err)
{
    (void)cfg;
    *out = NULL;
    return rm_errf(err, RM_EUNSUPPORTED, "the staged comm wraps a formed comm (rm_comm_staged_wrap)");
}

static int st_allreduce_oop(rm_comm *s, const void *send, void *recv, size_t count, rm_dtype dt, rm_redop op,
                            rm_err *err)
{
    size_t b = count * rm_dtype_size(dt);
    if (b == 0)
        return s->ops->allreduce(s->c, recv, 0, dt, op, err);
    RM_CHECK(grow(s, b, err));
    RM_CHECK(rm_kernels_copy_error(s->k, s->k->d2h(s->h, send, b), "staged collective's input", err));
    RM_CHECK(s->ops->allreduce(s->c, s->h, count, dt, op, err));
    return rm_kernels_copy_error(s->k, s->k->h2d(recv, s->h, b), "staged collective's result", err);
}

static int st_allreduce(rm_comm *s, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    return st_allreduce_oop(s, buf, buf, count, dt, op, err);
}

static int st_reduce_scatter(rm_comm *s, void *buf, void *shard, size_t count, rm_dtype dt, rm_redop op,
                             rm_err *err)
{
    if (!s->ops->reduce_scatter)
        return rm_errf(err, RM_EUNSUPPORTED, "comm %s has no reduce_scatter", s->ops->name);
    size_t es = rm_dtype_size(dt), b = count * es, sl = rm_shard_len(count, s->world, s->rank) * es;
    RM_CHECK(grow(s, b + sl + 1, err));
    if (b)
        RM_CHECK(rm_kernels_copy_error(s->k, s->k->d2h(s->h, buf, b), "staged collective's input", err));
    RM_CHECK(s->ops->reduce_scatter(s->c, s->h, s->h + b, count, dt, op, err));
    return sl ? rm_kernels_copy_error(s->k, s->k->h2d(shard, s->h + b, sl), "staged collective's shard", err)
              : RM_OK;
}

static int st_all_gather(rm_comm *s, const void *shard, void *buf, size_t count, rm_dtype dt, rm_err *err)
{
    if (!s->ops->all_gather)
        return rm_errf(err, RM_EUNSUPPORTED, "comm %s has no all_gather", s->ops->name);
    size_t es = rm_dtype_size(dt), b = count * es, sl = rm_shard_len(count, s->world, s->rank) * es;
    RM_CHECK(grow(s, b + 1, err));
    unsigned char *mine = s->h + rm_shard_off(count, s->world, s->rank) * es;
    if (sl)
        RM_CHECK(rm_kernels_copy_error(s->k, s->k->d2h(mine, shard, sl), "staged collective's shard", err));
    RM_CHECK(s->ops->all_gather(s->c, mine, s->h, count, dt, err));
    return b ? rm_kernels_copy_error(s->k, s->k->h2d(buf, s->h, b), "staged collective's result", err)
             : RM_OK;
}

static int st_barrier(rm_comm *s, rm_err *err)
{
    return s->ops->barrier(s->c, err);
}

static void st_abort(rm_comm *s)
{
    if (s && s->ops->abort)
        s->ops->abort(s->c);
}

static void st_destroy(rm_comm *s)
{
    if (!s)
        return;
    s->ops->destroy(s->c);
    rm_kernels_host_free(s->k, s->h);
    free(s);
}

static const rm_comm_ops staged_ops = {
    .name = "staged",
    .init = st_init,
    .allreduce = st_allreduce,
    .allreduce_oop = st_allreduce_oop,
    .reduce_scatter = st_reduce_scatter,
    .all_gather = st_all_gather,
    .barrier = st_barrier,
    .abort = st_abort,
    .destroy = st_destroy,
};

const rm_comm_ops *rm_comm_staged_ops(void)
{
    return &staged_ops;
}

int rm_comm_staged_wrap(const rm_comm_ops **ops, rm_comm **comm, const rm_kernels *k, int rank, int world,
                        rm_err *err)
{
    rm_comm *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "comm: out of memory");
    *s = (rm_comm){.ops = *ops, .c = *comm, .k = k, .rank = rank, .world = world};
    *ops = &staged_ops;
    *comm = s;
    return RM_OK;
}

const rm_comm_ops *rm_comm_staged_inner(const rm_comm_ops *ops, const rm_comm *c)
{
    return ops == &staged_ops && c ? c->ops : ops;
}
