/* comm_nccl.c — the "nccl" comm backend (worker/comm/comm.h) for GPU workers.
 *
 * Design (following nccl-tests and PyTorch's ProcessGroupNCCL watchdog):
 *  - Bootstrap per rendezvous epoch through the kv area: rank 0 calls ncclGetUniqueId and publishes
 *    it hex-encoded as kv[epoch]["nccl-id"]; the others long-poll for it. A new epoch means a new id
 *    and a new communicator, so the in-place restart needs nothing else.
 *  - The communicator is non-blocking (ncclConfig_t.blocking = 0): init and every collective return
 *    at once and we poll them through worker/comm/nccl_wait.h (the state machine, unit-tested on the CPU
 *    with a fake communicator). A dead or hung peer turns into RM_ETIMEDOUT / RM_ECLOSED, and the
 *    communicator is aborted (ncclCommAbort, exactly once), never left blocking the process; the
 *    worker re-joins and builds a new one. A collective's deadline (cfg.timeout_s) starts when its
 *    inputs are ready (the compute event has fired), not while our own backward still runs, and the
 *    first collective of a communicator, which also makes NCCL's connections, gets the init timeout.
 *  - Collectives run on a dedicated communication stream. Before each one the comm stream waits on a
 *    CUDA event recorded on the compute stream (the CUDA kernels table's, rm_cuda_compute_stream()),
 *    so a gradient bucket is reduced as soon as the backward kernels that produced it have run,
 *    while later backward kernels keep the compute stream busy: overlap through events, no host
 *    synchronisation of the compute stream. The call returns when the reduction is done (comm.h's
 *    blocking contract), which is what the fusion comm thread expects.
 *  - Buffers may be device memory (the fast path) or ordinary host memory (staged through a device
 *    buffer that grows to the largest size seen; used for tiny host values such as the loss-scaler
 *    overflow flag, and by callers that do not know where their memory lives).
 *  - abort() may come from any thread: it only raises a flag when a collective is in flight (the
 *    polling thread sees it within microseconds and aborts the communicator itself), otherwise it
 *    aborts at once; a collective that completes while an abort arrived still fails (rm_nccl_guard).
 * Nothing is allocated per step: events, stream, the 1-float barrier buffer are made in init; the
 * host staging buffer grows with the stream-ordered allocator (no device-wide synchronisation). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/rm_cuda.h"
#include "common/clock.h"
#include "worker/comm/comm.h"
#include "worker/comm/cuda/nccl_probes.h"
#include "kernels/kernels_cuda.h"
#include "worker/comm/nccl_wait.h"
#include "worker/allreduce/shard.h"

#define NCCL_ID_KEY "nccl-id"
#define NCCL_INIT_MIN_TIMEOUT_S 30.0 /* NCCL init over several nodes can take seconds */

struct rm_comm {
    ncclComm_t comm;     /* NULL once aborted/destroyed */
    cudaStream_t stream; /* communication stream */
    cudaEvent_t ready;   /* recorded on the compute stream before each collective */
    int device, rank, world;
    double timeout_s, init_timeout_s;
    bool first_done;     /* a collective completed: NCCL's connections exist */
    rm_nccl_guard guard; /* in flight / abort, exactly one ncclCommAbort */
    float *scratch1;     /* one device float for barrier() */
    void *stage;         /* device staging for host buffers */
    size_t stage_bytes;
};

static int nccl_dtype(rm_dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case RM_DT_F32:
        *out = ncclFloat32;
        return RM_OK;
    case RM_DT_BF16:
        *out = ncclBfloat16;
        return RM_OK;
    case RM_DT_F16:
        *out = ncclFloat16;
        return RM_OK;
    }
    return RM_EUNSUPPORTED;
}

static int nccl_op(rm_redop op, ncclRedOp_t *out)
{
    switch (op) {
    case RM_OP_SUM:
        *out = ncclSum;
        return RM_OK;
    case RM_OP_AVG:
        *out = ncclAvg;
        return RM_OK;
    }
    return RM_EUNSUPPORTED;
}

/* The guard's abort: runs once, under the guard's mutex. */
static void abort_comm(void *ctx)
{
    rm_comm *c = ctx;
    if (c->comm) {
        ncclResult_t r = ncclCommAbort(c->comm);
        if (r != ncclSuccess)
            rm_warn("ncclCommAbort failed err=\"%s\"", ncclGetErrorString(r));
        c->comm = NULL;
    }
}

/* ---- probes for rm_nccl_wait ---- */

/* init / enqueue: done when the communicator leaves ncclInProgress */
static int probe_comm_ready(void *ctx, char *why, size_t cap)
{
    return rm_nccl_comm_state(*(ncclComm_t *)ctx, why, cap);
}

static int probe_inputs_ready(void *ctx, char *why, size_t cap)
{
    return rm_nccl_cuda_query(cudaEventQuery(((rm_comm *)ctx)->ready), "cudaEventQuery", why, cap);
}

static int probe_stream_done(void *ctx, char *why, size_t cap)
{
    return rm_nccl_cuda_query(cudaStreamQuery(((rm_comm *)ctx)->stream), "cudaStreamQuery", why, cap);
}

/* while the stream runs: an error is a failure, in progress or success is not */
static int probe_async_error(void *ctx, char *why, size_t cap)
{
    int r = rm_nccl_comm_state(((rm_comm *)ctx)->comm, why, cap);
    return r < 0 ? r : RM_NW_DONE;
}

static const rm_nccl_probe comm_ready_probe = {
    .started = NULL,
    .done = probe_comm_ready,
    .async_error = NULL,
    .now = rm_nccl_poll_now,
    .pause = rm_nccl_poll_pause,
};
static const rm_nccl_probe stream_probe = {
    .started = probe_inputs_ready,
    .done = probe_stream_done,
    .async_error = probe_async_error,
    .now = rm_nccl_poll_now,
    .pause = rm_nccl_poll_pause,
};

/* Poll a non-blocking communicator until the pending operation (init, finalize, or the enqueue of a
 * collective) has left ncclInProgress. */
static int wait_nccl_ready(rm_comm *c, ncclComm_t comm, double timeout_s, const char *what, rm_err *err)
{
    rm_nccl_wait_cfg cfg = {what, timeout_s, timeout_s, c ? &c->guard.aborted : NULL};
    return rm_nccl_wait(&comm_ready_probe, &comm, &cfg, err);
}

/* Wait until everything enqueued on the comm stream has run; the deadline starts when the compute
 * event (the collective's inputs) has fired. */
static int wait_stream(rm_comm *c, double timeout_s, const char *what, rm_err *err)
{
    /* our own backward may legitimately take long; a stuck compute stream is bounded too */
    double start_bound = timeout_s * 10 > 300 ? timeout_s * 10 : 300;
    rm_nccl_wait_cfg cfg = {what, timeout_s, start_bound, &c->guard.aborted};
    return rm_nccl_wait(&stream_probe, c, &cfg, err);
}

static void hex_encode(const unsigned char *p, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_val(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int hex_decode(const char *s, size_t len, unsigned char *out, size_t n)
{
    if (len != 2 * n)
        return RM_EPROTO;
    for (size_t i = 0; i < n; i++) {
        int hi = hex_val((unsigned char)s[2 * i]), lo = hex_val((unsigned char)s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return RM_EPROTO;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return RM_OK;
}

/* Rank 0 makes and publishes the id; the others fetch it. World size 1 needs no rendezvous. */
static int bootstrap_id(const rm_comm_cfg *cfg, double timeout_s, ncclUniqueId *id, rm_err *err)
{
    int rc = RM_OK;
    char hex[2 * sizeof(ncclUniqueId) + 1];
    if (cfg->rank == 0) {
        RM_NCCL_GOTO_ERR(ncclGetUniqueId(id), rc, out, err);
        if (cfg->world_size == 1)
            goto out;
        if (!cfg->rdzv)
            return rm_errf(err, RM_EINVAL,
                           "nccl: world size %d needs the rendezvous kv area "
                           "(cfg.rdzv) to share the unique id",
                           cfg->world_size);
        hex_encode((const unsigned char *)id, sizeof *id, hex);
        RM_CHECK_GOTO(rm_rdzv_kv_put(cfg->rdzv, cfg->epoch, NCCL_ID_KEY, hex, strlen(hex), err), rc, out);
        rm_info("nccl unique id published epoch=%d", cfg->epoch);
    } else {
        void *val = NULL;
        size_t len = 0;
        if (!cfg->rdzv)
            return rm_errf(err, RM_EINVAL,
                           "nccl: rank %d needs the rendezvous kv area (cfg.rdzv) to "
                           "fetch the unique id",
                           cfg->rank);
        RM_CHECK_GOTO(rm_rdzv_kv_get(cfg->rdzv, cfg->epoch, NCCL_ID_KEY, timeout_s, &val, &len, err), rc,
                      out);
        rc = hex_decode((const char *)val, len, (unsigned char *)id, sizeof *id);
        free(val);
        if (rc != RM_OK)
            return rm_errf(err, RM_EPROTO, "nccl: kv[%d][%s] is not a %zu-byte hex id (len %zu)", cfg->epoch,
                           NCCL_ID_KEY, sizeof *id, len);
    }
out:
    return rc;
}

static void nccl_destroy(rm_comm *c);

static int nccl_init(const rm_comm_cfg *cfg, rm_comm **out, rm_err *err)
{
    int rc = RM_OK;
    rm_comm *c = NULL;
    ncclUniqueId id;
    char why[256];
    *out = NULL;
    if (!cfg || cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return rm_errf(err, RM_EINVAL, "nccl: bad rank %d / world size %d", cfg ? cfg->rank : -1,
                       cfg ? cfg->world_size : -1);
    if (!rm_cuda_available(why, sizeof why))
        return rm_errf(err, RM_EUNSUPPORTED, "backend nccl needs a GPU: %s", why);
    c = calloc(1, sizeof *c);
    if (!c)
        return rm_errf(err, RM_ENOMEM, "nccl: out of memory");
    rm_nccl_guard_init(&c->guard, abort_comm, c);
    c->rank = cfg->rank;
    c->world = cfg->world_size;
    c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10.0;
    double init_timeout = c->timeout_s > NCCL_INIT_MIN_TIMEOUT_S ? c->timeout_s : NCCL_INIT_MIN_TIMEOUT_S;
    c->init_timeout_s = init_timeout;

    /* the gradients live where the CUDA kernels table runs; else the configured device */
    int dev = rm_cuda_device() >= 0 ? rm_cuda_device() : cfg->device;
    if (dev >= 0)
        RM_CUDA_GOTO_ERR(cudaSetDevice(dev), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaGetDevice(&c->device), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaMalloc((void **)&c->scratch1, sizeof(float)), rc, fail, err);

    RM_CHECK_GOTO(bootstrap_id(cfg, init_timeout, &id, err), rc, fail);

    ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
    conf.blocking = 0;
    RM_NCCL_GOTO_ERR(ncclCommInitRankConfig(&c->comm, c->world, id, c->rank, &conf), rc, fail, err);
    rm_nccl_guard_set_alive(&c->guard); /* from here a failure aborts the communicator */
    rc = wait_nccl_ready(NULL, c->comm, init_timeout, "ncclCommInitRankConfig", err);
    if (rc != RM_OK)
        goto fail;
    rm_info("nccl communicator ready rank=%d world=%d epoch=%d device=%d nccl=%d.%d.%d", c->rank, c->world,
            cfg->epoch, c->device, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    *out = c;
    return RM_OK;
fail:
    rm_nccl_guard_abort(&c->guard); /* a half-made communicator is aborted, not finalized */
    nccl_destroy(c);
    return rc;
}

static int ensure_stage(rm_comm *c, size_t bytes, rm_err *err)
{
    int rc = RM_OK;
    if (bytes <= c->stage_bytes)
        return RM_OK;
    /* stream-ordered: no device-wide synchronisation (the compute stream keeps running) */
    if (c->stage)
        RM_CUDA_WARN(cudaFreeAsync(c->stage, c->stream));
    c->stage = NULL;
    c->stage_bytes = 0;
    RM_CUDA_GOTO_ERR(cudaMallocAsync(&c->stage, bytes, c->stream), rc, out, err);
    c->stage_bytes = bytes;
out:
    return rc;
}

static bool is_device_ptr(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int nccl_allreduce_oop(rm_comm *c, const void *send, void *recv, size_t count, rm_dtype dt,
                              rm_redop op, rm_err *err)
{
    int rc = RM_OK;
    ncclDataType_t ndt;
    ncclRedOp_t nop;
    if (!c)
        return rm_errf(err, RM_EINVAL, "nccl: no communicator");
    if (nccl_dtype(dt, &ndt) != RM_OK || nccl_op(op, &nop) != RM_OK)
        return rm_errf(err, RM_EUNSUPPORTED, "nccl: dtype %d / op %d not supported", (int)dt, (int)op);
    if (count == 0)
        return RM_OK;
    if (!send || !recv)
        return rm_errf(err, RM_EINVAL, "nccl: NULL buffer");

    RM_CHECK(rm_nccl_guard_begin(&c->guard, err));
    /* the current device is per host thread: the fusion comm thread never chose one */
    RM_CUDA_GOTO_ERR(cudaSetDevice(c->device), rc, out, err);

    size_t bytes = count * rm_dtype_size(dt);
    bool dev_send = is_device_ptr(send), dev_recv = is_device_ptr(recv);
    const void *s = send;
    void *r = recv;
    double timeout = rm_nccl_collective_timeout(!c->first_done, c->timeout_s, c->init_timeout_s);
    if (dev_recv) /* the kernels table keeps no 16-bit copy of what NCCL overwrites */
        rm_cuda_note_written(recv, bytes);

    /* order after the compute stream's work so far (the kernels that wrote this bucket) */
    cudaStream_t compute = (cudaStream_t)rm_cuda_compute_stream();
    RM_CUDA_GOTO_ERR(cudaEventRecord(c->ready, compute ? compute : cudaStreamLegacy), rc, out, err);
    RM_CUDA_GOTO_ERR(cudaStreamWaitEvent(c->stream, c->ready, 0), rc, out, err);
    if (!dev_send || !dev_recv) {
        RM_CHECK_GOTO(ensure_stage(c, bytes, err), rc, out);
        if (!dev_send)
            RM_CUDA_GOTO_ERR(cudaMemcpyAsync(c->stage, send, bytes, cudaMemcpyHostToDevice, c->stream), rc,
                             out, err);
        else
            RM_CUDA_GOTO_ERR(cudaMemcpyAsync(c->stage, send, bytes, cudaMemcpyDeviceToDevice, c->stream), rc,
                             out, err);
        s = c->stage;
        r = c->stage;
    }
    RM_NCCL_GOTO_ERR(ncclAllReduce(s, r, count, ndt, nop, c->comm, c->stream), rc, out, err);
    RM_CHECK_GOTO(wait_nccl_ready(c, c->comm, timeout, "ncclAllReduce", err), rc, out);
    /* wait (bounded) for the reduction itself before any copy back: a copy into pageable host
     * memory would block the host unboundedly behind a hung collective */
    RM_CHECK_GOTO(wait_stream(c, timeout, "ncclAllReduce", err), rc, out);
    if (r != recv) {
        RM_CUDA_GOTO_ERR(cudaMemcpyAsync(recv, r, bytes,
                                         dev_recv ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost,
                                         c->stream),
                         rc, out, err);
        RM_CHECK_GOTO(wait_stream(c, timeout, "ncclAllReduce copy-back", err), rc, out);
    }
    c->first_done = true;
out:
    rc = rm_nccl_guard_end(&c->guard, rc, err);
    if (rc != RM_OK)
        rm_warn("nccl allreduce failed, communicator aborted rank=%d rc=%s", c->rank, rm_strerror(rc));
    return rc;
}

static int nccl_allreduce(rm_comm *c, void *buf, size_t count, rm_dtype dt, rm_redop op, rm_err *err)
{
    return nccl_allreduce_oop(c, buf, buf, count, dt, op, err);
}

/* Reduce-scatter / all-gather over the shard layout (worker/allreduce/shard.h). NCCL's collectives take one
 * count per rank, so:
 *  - even counts with device buffers go straight to ncclReduceScatter / ncclAllGather (the
 *    layout's shard r is then exactly NCCL's block r, and in-place calls are NCCL's in-place form);
 *  - uneven counts or host buffers go through the staging buffer padded to world blocks of
 *    max_len = ceil(count/world) (zeros in the padding for a reduction), one copy of each rank's
 *    range in and out. */
typedef enum { NCCL_RS, NCCL_AG } nccl_shard_kind;

static int nccl_shard_collective(rm_comm *c, nccl_shard_kind kind, const void *in, void *out, size_t count,
                                 rm_dtype dt, rm_redop op, rm_err *err)
{
    int rc = RM_OK;
    ncclDataType_t ndt;
    ncclRedOp_t nop;
    const char *what = kind == NCCL_RS ? "ncclReduceScatter" : "ncclAllGather";
    if (!c)
        return rm_errf(err, RM_EINVAL, "nccl: no communicator");
    if (nccl_dtype(dt, &ndt) != RM_OK || nccl_op(op, &nop) != RM_OK)
        return rm_errf(err, RM_EUNSUPPORTED, "nccl: dtype %d / op %d not supported", (int)dt, (int)op);
    if (count == 0)
        return RM_OK;
    if (!in || !out)
        return rm_errf(err, RM_EINVAL, "nccl: NULL buffer");
    size_t es = rm_dtype_size(dt), off, len;
    rm_shard_range(count, c->world, c->rank, &off, &len);
    size_t M = rm_shard_max_len(count, c->world), W = (size_t)c->world;
    /* RS: in = full buf, out = shard; AG: in = shard, out = full buf */
    const void *full = kind == NCCL_RS ? in : out;
    const void *part = kind == NCCL_RS ? out : in;
    bool dev_full = is_device_ptr(full), dev_part = is_device_ptr(part);
    bool direct = dev_full && dev_part && count % W == 0;

    RM_CHECK(rm_nccl_guard_begin(&c->guard, err));
    RM_CUDA_GOTO_ERR(cudaSetDevice(c->device), rc, out_label, err);
    double timeout = rm_nccl_collective_timeout(!c->first_done, c->timeout_s, c->init_timeout_s);
    if (is_device_ptr(out)) /* the kernels table keeps no 16-bit copy of what NCCL overwrites */
        rm_cuda_note_written(out, (kind == NCCL_RS ? len : count) * es);
    cudaStream_t compute = (cudaStream_t)rm_cuda_compute_stream();
    RM_CUDA_GOTO_ERR(cudaEventRecord(c->ready, compute ? compute : cudaStreamLegacy), rc, out_label, err);
    RM_CUDA_GOTO_ERR(cudaStreamWaitEvent(c->stream, c->ready, 0), rc, out_label, err);
    if (direct) {
        if (kind == NCCL_RS)
            RM_NCCL_GOTO_ERR(ncclReduceScatter(in, out, len, ndt, nop, c->comm, c->stream), rc, out_label,
                             err);
        else
            RM_NCCL_GOTO_ERR(ncclAllGather(in, out, len, ndt, c->comm, c->stream), rc, out_label, err);
        RM_CHECK_GOTO(wait_nccl_ready(c, c->comm, timeout, what, err), rc, out_label);
        RM_CHECK_GOTO(wait_stream(c, timeout, what, err), rc, out_label);
    } else {
        /* stage: [W blocks of M][one block of M] */
        RM_CHECK_GOTO(ensure_stage(c, (W + 1) * M * es, err), rc, out_label);
        char *st = c->stage, *blk = st + W * M * es;
        if (kind == NCCL_RS) {
            RM_CUDA_GOTO_ERR(cudaMemsetAsync(st, 0, W * M * es, c->stream), rc, out_label, err);
            for (int r = 0; r < c->world; r++) {
                size_t o, l;
                rm_shard_range(count, c->world, r, &o, &l);
                if (l)
                    RM_CUDA_GOTO_ERR(
                        cudaMemcpyAsync(st + (size_t)r * M * es, (const char *)in + o * es, l * es,
                                        dev_full ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
                                        c->stream),
                        rc, out_label, err);
            }
            RM_NCCL_GOTO_ERR(ncclReduceScatter(st, blk, M, ndt, nop, c->comm, c->stream), rc, out_label, err);
            RM_CHECK_GOTO(wait_nccl_ready(c, c->comm, timeout, what, err), rc, out_label);
            RM_CHECK_GOTO(wait_stream(c, timeout, what, err), rc, out_label);
            if (len)
                RM_CUDA_GOTO_ERR(cudaMemcpyAsync(out, blk, len * es,
                                                 dev_part ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost,
                                                 c->stream),
                                 rc, out_label, err);
        } else {
            if (len)
                RM_CUDA_GOTO_ERR(cudaMemcpyAsync(blk, in, len * es,
                                                 dev_part ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
                                                 c->stream),
                                 rc, out_label, err);
            RM_NCCL_GOTO_ERR(ncclAllGather(blk, st, M, ndt, c->comm, c->stream), rc, out_label, err);
            RM_CHECK_GOTO(wait_nccl_ready(c, c->comm, timeout, what, err), rc, out_label);
            RM_CHECK_GOTO(wait_stream(c, timeout, what, err), rc, out_label);
            for (int r = 0; r < c->world; r++) {
                size_t o, l;
                rm_shard_range(count, c->world, r, &o, &l);
                if (l)
                    RM_CUDA_GOTO_ERR(
                        cudaMemcpyAsync((char *)out + o * es, st + (size_t)r * M * es, l * es,
                                        dev_full ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost,
                                        c->stream),
                        rc, out_label, err);
            }
        }
        RM_CHECK_GOTO(wait_stream(c, timeout, "nccl shard copy-back", err), rc, out_label);
    }
    c->first_done = true;
out_label:
    rc = rm_nccl_guard_end(&c->guard, rc, err);
    if (rc != RM_OK)
        rm_warn("nccl %s failed, communicator aborted rank=%d rc=%s", what, c->rank, rm_strerror(rc));
    return rc;
}

static int nccl_reduce_scatter(rm_comm *c, void *buf, void *shard, size_t count, rm_dtype dt, rm_redop op,
                               rm_err *err)
{
    return nccl_shard_collective(c, NCCL_RS, buf, shard, count, dt, op, err);
}

static int nccl_all_gather(rm_comm *c, const void *shard, void *buf, size_t count, rm_dtype dt, rm_err *err)
{
    return nccl_shard_collective(c, NCCL_AG, shard, buf, count, dt, RM_OP_SUM, err);
}

/* A one-float allreduce: returns once every rank has entered it (NCCL has no barrier). */
static int nccl_barrier(rm_comm *c, rm_err *err)
{
    if (!c)
        return rm_errf(err, RM_EINVAL, "nccl: no communicator");
    return nccl_allreduce_oop(c, c->scratch1, c->scratch1, 1, RM_DT_F32, RM_OP_SUM, err);
}

static void nccl_abort(rm_comm *c)
{
    if (!c)
        return;
    rm_nccl_guard_abort(&c->guard); /* in flight: the polling thread fails and aborts */
}

static void nccl_destroy(rm_comm *c)
{
    if (!c)
        return;
    /* a healthy communicator is finalized (flushes NCCL's own work) within the timeout; anything
     * else was aborted by the guard (exactly once) */
    bool healthy = rm_nccl_guard_release(&c->guard);
    if (c->comm) { /* still here: healthy, or made but never alive (a failed init) */
        (void)cudaSetDevice(c->device);
        rm_err e = {0};
        ncclResult_t fr = healthy ? ncclCommFinalize(c->comm) : ncclInvalidUsage;
        bool clean = (fr == ncclSuccess || fr == ncclInProgress) &&
                     wait_nccl_ready(NULL, c->comm, c->timeout_s, "ncclCommFinalize", &e) == RM_OK;
        if (clean) {
            ncclResult_t r = ncclCommDestroy(c->comm);
            if (r != ncclSuccess && r != ncclInProgress)
                rm_warn("ncclCommDestroy failed err=\"%s\"", ncclGetErrorString(r));
        } else {
            if (healthy)
                rm_warn("nccl finalize did not complete, aborting err=\"%s\"",
                        e.msg[0] ? e.msg : ncclGetErrorString(fr));
            ncclResult_t r = ncclCommAbort(c->comm);
            if (r != ncclSuccess)
                rm_warn("ncclCommAbort failed err=\"%s\"", ncclGetErrorString(r));
        }
        c->comm = NULL;
    }
    if (c->stage)
        RM_CUDA_WARN(cudaFreeAsync(c->stage, c->stream));
    if (c->scratch1)
        RM_CUDA_WARN(cudaFree(c->scratch1));
    if (c->ready)
        RM_CUDA_WARN(cudaEventDestroy(c->ready));
    if (c->stream) {
        RM_CUDA_WARN(cudaStreamSynchronize(c->stream));
        RM_CUDA_WARN(cudaStreamDestroy(c->stream));
    }
    rm_nccl_guard_destroy(&c->guard);
    free(c);
}

static const rm_comm_ops nccl_ops = {
    .name = "nccl",
    .init = nccl_init,
    .allreduce = nccl_allreduce,
    .allreduce_oop = nccl_allreduce_oop,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

const rm_comm_ops *rm_comm_nccl_ops(void)
{
    return &nccl_ops;
}
