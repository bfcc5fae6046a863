/* comm_mpi.c — the "mpi" backend: Open MPI's MPI_Allreduce (and MPI_Reduce_scatter(_block) /
 * MPI_Allgather(v) over the shard layout of worker/allreduce/shard.h) when the worker runs under mpirun.
 *
 * MPI is initialised only when this backend's init() is called (never at program start), with
 * MPI_THREAD_SERIALIZED because the fusion comm thread, not main, makes the calls. Rank and world
 * size come from MPI, not from the rendezvous config (cfg may be all zeros). MPI_Finalize runs
 * once at exit (atexit) because MPI cannot be re-initialised after finalising; destroy() only
 * frees our handle. Average = MPI_SUM then a scale by 1/n, the same on every rank.
 * abort() is MPI_Abort: MPI has no way to cancel a blocked collective; it ends the job, which is
 * what a failed collective under mpirun means anyway. */
#include <stdlib.h>
#include <string.h>

#include "worker/comm/comm.h"

/* The Makefile decides (scripts/configure.sh): RM_HAVE_MPI=1 needs Open MPI and a missing <mpi.h>
 * is a compile error, never a silently dropped backend; RM_HAVE_MPI=0 is `make MPI=0`, on purpose. */
#ifndef RM_HAVE_MPI
#error "RM_HAVE_MPI is not set: build with the Makefile (MPI=1 needs libopenmpi-dev, MPI=0 leaves mpi out)"
#endif

#if RM_HAVE_MPI
#include <limits.h>
#include <mpi.h>

#include "worker/allreduce/shard.h"

struct rm_comm {
    int rank, size;
};

static void mpi_finalize_at_exit(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
}

static int mpi_init(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err)
{
    (void)cfg;
    if (!out)
        return rm_errf(err, RM_EINVAL, "mpi: NULL argument");
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin)
        return rm_errf(err, RM_EUNSUPPORTED, "mpi: already finalized");
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return rm_errf(err, RM_EIO, "mpi: MPI_Init_thread failed");
        if (provided < MPI_THREAD_SERIALIZED)
            rm_warn("mpi thread support below SERIALIZED provided=%d", provided);
        atexit(mpi_finalize_at_exit);
    }
    rm_comm *c = calloc(1, sizeof *c);
    if (!c)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    *out = c;
    return RM_OK;
}

static int mpi_allreduce_oop(rm_comm *c, const void *send, void *recv, size_t count, rm_dtype dt, rm_redop op,
                             rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "mpi: NULL comm");
    if (dt != RM_DT_F32)
        return rm_errf(err, RM_EUNSUPPORTED, "mpi: only float32 is supported");
    if (count == 0)
        return RM_OK;
    float *r = recv;
    size_t done = 0;
    while (done < count) { /* MPI counts are int: go in pieces of at most 1G elements */
        size_t n = count - done > (1u << 30) ? (1u << 30) : count - done;
        int mrc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : (const float *)send + done, r + done, (int)n,
                                MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (mrc != MPI_SUCCESS)
            return rm_errf(err, RM_EIO, "mpi: MPI_Allreduce failed (%d)", mrc);
        done += n;
    }
    if (op == RM_OP_AVG && c->size > 1) {
        float s = 1.0f / (float)c->size;
        for (size_t i = 0; i < count; i++)
            r[i] *= s;
    }
    return RM_OK;
}

static int mpi_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    return mpi_allreduce_oop(c, buf, buf, count, dt, op, err);
}

/* The layout's per-rank counts and displacements as MPI ints (counts beyond INT_MAX are refused). */
static int mpi_layout(rm_comm *c, size_t count, int **cnt, int **displ, rm_err *err)
{
    if (count > (size_t)INT_MAX)
        return rm_errf(err, RM_EUNSUPPORTED, "mpi: %zu elements exceed an MPI count", count);
    *cnt = calloc((size_t)c->size, sizeof **cnt);
    *displ = calloc((size_t)c->size, sizeof **displ);
    if (!*cnt || !*displ) {
        free(*cnt);
        free(*displ);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    for (int r = 0; r < c->size; r++) {
        size_t off, len;
        rm_shard_range(count, c->size, r, &off, &len);
        (*cnt)[r] = (int)len;
        (*displ)[r] = (int)off;
    }
    return RM_OK;
}

/* Even counts: MPI_Reduce_scatter_block; uneven: MPI_Reduce_scatter with the layout's counts (no
 * padded copy needed: MPI takes per-rank counts). The result goes to a separate buffer when the
 * shard lies inside buf (MPI forbids aliasing send and receive). */
static int mpi_reduce_scatter(rm_comm *c, void *buf, void *shard, size_t count, rm_dtype dt, rm_redop op,
                              rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "mpi: NULL comm");
    if (dt != RM_DT_F32)
        return rm_errf(err, RM_EUNSUPPORTED, "mpi: only float32 is supported");
    if (count == 0)
        return RM_OK;
    size_t off, len;
    rm_shard_range(count, c->size, c->rank, &off, &len);
    int *cnt = NULL, *displ = NULL;
    RM_CHECK(mpi_layout(c, count, &cnt, &displ, err));
    float *b = buf, *s = shard;
    int alias = s >= b && s < b + count;
    float *out = alias ? malloc((len ? len : 1) * sizeof(float)) : s;
    int mrc = MPI_ERR_OTHER;
    if (out) {
        if (count % (size_t)c->size == 0)
            mrc = MPI_Reduce_scatter_block(b, out, (int)len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
            mrc = MPI_Reduce_scatter(b, out, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    if (mrc == MPI_SUCCESS && alias && len)
        memcpy(s, out, len * sizeof(float));
    if (alias)
        free(out);
    free(cnt);
    free(displ);
    if (mrc != MPI_SUCCESS)
        return rm_errf(err, RM_EIO, "mpi: MPI_Reduce_scatter failed (%d)", mrc);
    if (op == RM_OP_AVG && c->size > 1) {
        float sc = 1.0f / (float)c->size;
        for (size_t i = 0; i < len; i++)
            s[i] *= sc;
    }
    return RM_OK;
}

/* In place (MPI_IN_PLACE): the own shard is put at its offset first. Even counts MPI_Allgather,
 * uneven MPI_Allgatherv with the layout's counts. */
static int mpi_all_gather(rm_comm *c, const void *shard, void *buf, size_t count, rm_dtype dt, rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "mpi: NULL comm");
    if (dt != RM_DT_F32)
        return rm_errf(err, RM_EUNSUPPORTED, "mpi: only float32 is supported");
    if (count == 0)
        return RM_OK;
    size_t off, len;
    rm_shard_range(count, c->size, c->rank, &off, &len);
    float *b = buf;
    if (len && (const float *)shard != b + off)
        memmove(b + off, shard, len * sizeof(float));
    int *cnt = NULL, *displ = NULL;
    RM_CHECK(mpi_layout(c, count, &cnt, &displ, err));
    int mrc;
    if (count % (size_t)c->size == 0)
        mrc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_FLOAT, b, (int)len, MPI_FLOAT, MPI_COMM_WORLD);
    else
        mrc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, b, cnt, displ, MPI_FLOAT, MPI_COMM_WORLD);
    free(cnt);
    free(displ);
    return mrc == MPI_SUCCESS ? RM_OK : rm_errf(err, RM_EIO, "mpi: MPI_Allgather failed (%d)", mrc);
}

static int mpi_barrier(rm_comm *c, rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "mpi: NULL comm");
    return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? RM_OK : rm_errf(err, RM_EIO, "mpi: barrier failed");
}

static void mpi_abort(rm_comm *c)
{
    if (c)
        MPI_Abort(MPI_COMM_WORLD, 1);
}

static void mpi_destroy(rm_comm *c)
{
    free(c);
}

/* Rank/size for callers that got their world from mpirun (bench). */

int rm_comm_mpi_world(rm_comm *c, int *rank, int *size)
{
    if (!c)
        return RM_EINVAL;
    *rank = c->rank;
    *size = c->size;
    return RM_OK;
}

static const rm_comm_ops mpi_ops = {
    .name = "mpi",
    .init = mpi_init,
    .allreduce = mpi_allreduce,
    .allreduce_oop = mpi_allreduce_oop,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

const rm_comm_ops *rm_comm_mpi_ops(void)
{
    return &mpi_ops;
}
#else

int rm_comm_mpi_world(rm_comm *c, int *rank, int *size)
{
    (void)c;
    (void)rank;
    (void)size;
    return RM_EUNSUPPORTED;
}
const rm_comm_ops *rm_comm_mpi_ops(void)
{
    return NULL;
}
#endif
