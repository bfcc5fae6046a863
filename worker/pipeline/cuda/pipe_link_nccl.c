/* pipe_link_nccl.c — the "nccl" entry of the pipeline link table (worker/pipeline/pipe_link.h): device
 * buffers between neighbouring stages on a GPU.
 *
 *  - One 2-rank NCCL communicator per link (rank 0 = the link's lower stage). The lower stage makes
 *    the ncclUniqueId and sends it as one rm_net_frame over the link's authenticated TCP ring comm
 *    (the ring's HMAC handshake already vouched for the peer; the TCP link stays the control
 *    channel); the upper stage reads it with the handshake's deadline. Both of a stage's
 *    communicators are made non-blocking (ncclConfig_t.blocking = 0) and initialised together, so
 *    no chain of neighbours waits on another's init.
 *  - Transfers run on a dedicated CUDA stream per link (NCCL kernels of different communicators on
 *    one stream would serialize). begin() records an event on the compute stream
 *    (rm_cuda_compute_stream) and makes each link stream wait on it: a send reads only what the
 *    compute has written, a receive overwrites only what it has finished reading; then
 *    ncclGroupStart. send()/recv() enqueue ncclSend/ncclRecv of the micro-batch's rows (and the
 *    trailing loss float on the gradient direction); end() is ncclGroupEnd: a stage that both
 *    sends and receives on one link in one group (1F1B's steady state) cannot deadlock with its
 *    neighbour (pipeline_core.h rm_pipe_plan_check; the plan never puts two links in one group).
 *  - wait()/flush() poll the link streams (worker/comm/nccl_wait.h, as comm_nccl): the deadline starts
 *    when the compute event has fired; an asynchronous NCCL error or a dead peer fails at once
 *    (RM_ECLOSED) and aborts the communicators, each exactly once (rm_nccl_guard). The time
 *    blocked there is the stage's bubble. Once the host has seen a receive complete, compute
 *    launched after it reads the data.
 * Nothing is allocated per step (the streams, the event and the communicators are made at open).
 * Ownership: the links own their communicators, streams and event; buffers and TCP comms are
 * borrowed. One caller thread. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/rm_cuda.h"
#include "common/clock.h"
#include "common/log.h"
#include "kernels/kernels_cuda.h"
#include "worker/comm/cuda/nccl_probes.h"
#include "worker/comm/nccl_wait.h"
#include "worker/comm/net.h"
#include "worker/pipeline/pipe_link.h"

#define PIPE_NCCL_INIT_MIN_TIMEOUT_S 30.0

typedef struct nccl_side {
    bool used;
    int me;              /* 0: lower stage of the link, 1: upper */
    ncclComm_t comm;     /* NULL once aborted/destroyed */
    cudaStream_t stream; /* this link's transfers */
    rm_nccl_guard guard;
    bool guard_ok;
    float *rx;
    int width;
    float *rx_extra;
    bool tx_extra;
    uint64_t posted, done; /* receives enqueued / known complete this round */
} nccl_side;

struct rm_pipe_links {
    nccl_side sd[2];
    cudaEvent_t ready; /* recorded on the compute stream at each group */
    int device, B, M;
    double timeout_s, init_timeout_s;
    bool first_done; /* a transfer completed: NCCL's connections exist */
    bool in_group;
    bool issued; /* groups issued and not yet seen complete */
    uint64_t bytes_in, bytes_pending;
};

static const char *side_who(int side)
{
    return side == RM_PIPE_SIDE_PREV ? "the previous stage" : "the next stage";
}

static void abort_side(void *ctx)
{
    nccl_side *s = ctx;
    if (s->comm) {
        ncclResult_t r = ncclCommAbort(s->comm);
        if (r != ncclSuccess)
            rm_warn("pipeline link: ncclCommAbort failed err=\"%s\"", ncclGetErrorString(r));
        s->comm = NULL;
    }
}

/* ---- probes (worker/comm/nccl_wait.h) ---- */

/* every used communicator has left ncclInProgress (init, group end) */
static int probe_comms_ready(void *ctx, char *why, size_t cap)
{
    rm_pipe_links *l = ctx;
    int res = RM_NW_DONE;
    for (int i = 0; i < 2; i++) {
        if (!l->sd[i].used || !l->sd[i].comm)
            continue;
        int r = rm_nccl_comm_state(l->sd[i].comm, why, cap);
        if (r < 0)
            return r;
        if (r == RM_NW_PENDING)
            res = RM_NW_PENDING;
    }
    return res;
}

static int probe_inputs_ready(void *ctx, char *why, size_t cap)
{
    return rm_nccl_cuda_query(cudaEventQuery(((rm_pipe_links *)ctx)->ready), "cudaEventQuery", why, cap);
}

static int probe_stream_done(void *ctx, char *why, size_t cap)
{
    rm_pipe_links *l = ctx;
    int res = RM_NW_DONE;
    for (int i = 0; i < 2; i++) {
        if (!l->sd[i].used || !l->sd[i].stream)
            continue;
        int r = rm_nccl_cuda_query(cudaStreamQuery(l->sd[i].stream), "cudaStreamQuery", why, cap);
        if (r < 0)
            return r;
        if (r == RM_NW_PENDING)
            res = RM_NW_PENDING;
    }
    return res;
}

static int probe_async_error(void *ctx, char *why, size_t cap)
{
    int r = probe_comms_ready(ctx, why, cap);
    return r < 0 ? r : RM_NW_DONE;
}

static const rm_nccl_probe comms_ready_probe = {
    .started = NULL,
    .done = probe_comms_ready,
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

/* Run a wait under both guards: a failure (or an abort meanwhile) aborts the communicators. */
static int guarded_wait(rm_pipe_links *l, const rm_nccl_probe *probe, double timeout_s,
                        double start_timeout_s, const char *what, rm_err *err)
{
    int began[2] = {0, 0}, rc = RM_OK;
    for (int i = 0; i < 2 && rc == RM_OK; i++)
        if (l->sd[i].used) {
            rc = rm_nccl_guard_begin(&l->sd[i].guard, err);
            began[i] = rc == RM_OK;
        }
    if (rc == RM_OK) {
        /* the same flag serves both: an abort of either link fails the wait */
        rm_nccl_wait_cfg cfg = {what, timeout_s, start_timeout_s,
                                l->sd[RM_PIPE_SIDE_PREV].used ? &l->sd[RM_PIPE_SIDE_PREV].guard.aborted
                                                              : &l->sd[RM_PIPE_SIDE_NEXT].guard.aborted};
        rc = rm_nccl_wait(probe, l, &cfg, err);
    }
    for (int i = 0; i < 2; i++)
        if (began[i]) {
            int r = rm_nccl_guard_end(&l->sd[i].guard, rc, err);
            if (rc == RM_OK)
                rc = r;
        }
    if (rc != RM_OK) /* a failed link fails the stage: the round re-forms */
        for (int i = 0; i < 2; i++)
            if (l->sd[i].used)
                rm_nccl_guard_abort(&l->sd[i].guard);
    return rc;
}

/* ---- the id over the TCP link ---- */

static int send_id(rm_comm *tcp, const ncclUniqueId *id, double timeout_s, const char *who, rm_err *err)
{
    int to = -1, from = -1;
    RM_CHECK(rm_comm_ring_link_fds(tcp, &to, &from));
    rm_net_frame h;
    rm_net_frame_make(&h, 0, (uint32_t)sizeof *id);
    double deadline = rm_mono() + timeout_s;
    rm_err e = {0};
    int rc = rm_net_send_all(to, &h, sizeof h, deadline, &e);
    if (!rc)
        rc = rm_net_send_all(to, id, sizeof *id, deadline, &e);
    if (rc)
        return rm_errf(err, rc, "pipeline link: sending the NCCL id to %s: %s", who, e.msg);
    return RM_OK;
}

static int recv_id(rm_comm *tcp, ncclUniqueId *id, double timeout_s, const char *who, rm_err *err)
{
    int to = -1, from = -1;
    RM_CHECK(rm_comm_ring_link_fds(tcp, &to, &from));
    rm_net_frame h;
    double deadline = rm_mono() + timeout_s;
    rm_err e = {0};
    int rc = rm_net_recv_all(from, &h, sizeof h, deadline, &e);
    if (rc)
        return rm_errf(err, rc, "pipeline link: reading the NCCL id from %s: %s", who, e.msg);
    if (!rm_net_frame_ok(&h, 0, (uint32_t)sizeof *id))
        return rm_errf(err, RM_EPROTO,
                       "pipeline link: %s sent no NCCL id (frame magic %08x seq %u "
                       "len %u, want len %zu)",
                       who, h.magic, h.seq, h.len, sizeof *id);
    rc = rm_net_recv_all(from, id, sizeof *id, deadline, &e);
    if (rc)
        return rm_errf(err, rc, "pipeline link: reading the NCCL id from %s: %s", who, e.msg);
    return RM_OK;
}

/* ---- the table ---- */

static void nl_close(rm_pipe_links *l)
{
    if (!l)
        return;
    if (l->device >= 0)
        (void)cudaSetDevice(l->device);
    for (int i = 0; i < 2; i++) {
        nccl_side *s = &l->sd[i];
        if (!s->guard_ok)
            continue;
        bool healthy = rm_nccl_guard_release(&s->guard);
        if (s->comm) {
            ncclResult_t fr = healthy ? ncclCommFinalize(s->comm) : ncclInvalidUsage;
            bool clean = fr == ncclSuccess || fr == ncclInProgress;
            if (clean) {
                rm_nccl_wait_cfg cfg = {"ncclCommFinalize", l->timeout_s, l->timeout_s, NULL};
                rm_err e = {0};
                clean = rm_nccl_wait(&comms_ready_probe, l, &cfg, &e) == RM_OK;
            }
            ncclResult_t r = clean ? ncclCommDestroy(s->comm) : ncclCommAbort(s->comm);
            if (r != ncclSuccess && r != ncclInProgress)
                rm_warn("pipeline link: closing the NCCL communicator failed err=\"%s\"",
                        ncclGetErrorString(r));
            s->comm = NULL;
        }
        rm_nccl_guard_destroy(&s->guard);
    }
    for (int i = 0; i < 2; i++)
        if (l->sd[i].stream) {
            RM_CUDA_WARN(cudaStreamSynchronize(l->sd[i].stream));
            RM_CUDA_WARN(cudaStreamDestroy(l->sd[i].stream));
        }
    if (l->ready)
        RM_CUDA_WARN(cudaEventDestroy(l->ready));
    free(l);
}

static int nl_open(const rm_pipe_links_cfg *cfg, rm_pipe_links **out, rm_err *err)
{
    int rc = RM_OK;
    char why[256];
    *out = NULL;
    if (!cfg->k || cfg->k->host_memory)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: needs device buffers (the CUDA kernels)");
    if (!rm_cuda_available(why, sizeof why))
        return rm_errf(err, RM_EUNSUPPORTED, "pipeline link nccl needs a GPU: %s", why);
    if (cfg->B < 1 || cfg->M < 1)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: %d rows in %d micro-batches", cfg->B, cfg->M);
    rm_pipe_links *l = calloc(1, sizeof *l);
    if (!l)
        return rm_errf(err, RM_ENOMEM, "pipeline link nccl: out of memory");
    l->device = -1;
    l->B = cfg->B;
    l->M = cfg->M;
    l->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10.0;
    l->init_timeout_s =
        l->timeout_s > PIPE_NCCL_INIT_MIN_TIMEOUT_S ? l->timeout_s : PIPE_NCCL_INIT_MIN_TIMEOUT_S;
    int dev = rm_cuda_device();
    if (dev >= 0)
        RM_CUDA_GOTO_ERR(cudaSetDevice(dev), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaGetDevice(&l->device), rc, fail, err);
    RM_CUDA_GOTO_ERR(cudaEventCreateWithFlags(&l->ready, cudaEventDisableTiming), rc, fail, err);

    ncclUniqueId id[2];
    memset(id, 0, sizeof id);
    for (int i = 0; i < 2; i++) { /* the lower end of each link makes and sends its id ... */
        const rm_pipe_link_cfg *c = &cfg->side[i];
        nccl_side *s = &l->sd[i];
        if (!c->tcp)
            continue;
        if (!c->rx || c->width < 1) {
            rc = rm_errf(err, RM_EINVAL, "pipeline link nccl: no receive buffer for %s", side_who(i));
            goto fail;
        }
        s->used = true;
        s->me = c->lower ? 0 : 1;
        s->rx = c->rx;
        s->width = c->width;
        s->rx_extra = c->rx_extra;
        s->tx_extra = c->tx_extra;
        rm_nccl_guard_init(&s->guard, abort_side, s);
        s->guard_ok = true;
        RM_CUDA_GOTO_ERR(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), rc, fail, err);
        if (c->lower) {
            RM_NCCL_GOTO_ERR(ncclGetUniqueId(&id[i]), rc, fail, err);
            RM_CHECK_GOTO(send_id(c->tcp, &id[i], l->init_timeout_s, side_who(i), err), rc, fail);
        }
    }
    for (int i = 0; i < 2; i++) /* ... the upper end reads it (ids are small: no send blocks) */
        if (l->sd[i].used && !cfg->side[i].lower)
            RM_CHECK_GOTO(recv_id(cfg->side[i].tcp, &id[i], l->init_timeout_s, side_who(i), err), rc, fail);
    for (int i = 0; i < 2; i++) { /* both communicators at once (non-blocking), then wait */
        nccl_side *s = &l->sd[i];
        if (!s->used)
            continue;
        ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
        conf.blocking = 0;
        RM_NCCL_GOTO_ERR(ncclCommInitRankConfig(&s->comm, 2, id[i], s->me, &conf), rc, fail, err);
        rm_nccl_guard_set_alive(&s->guard);
    }
    RM_CHECK_GOTO(guarded_wait(l, &comms_ready_probe, l->init_timeout_s, l->init_timeout_s,
                               "ncclCommInitRankConfig (pipeline links)", err),
                  rc, fail);
    rm_info("pipeline links nccl ready prev=%d next=%d device=%d nccl=%d.%d.%d",
            (int)l->sd[RM_PIPE_SIDE_PREV].used, (int)l->sd[RM_PIPE_SIDE_NEXT].used, l->device, NCCL_MAJOR,
            NCCL_MINOR, NCCL_PATCH);
    *out = l;
    return RM_OK;
fail:
    for (int i = 0; i < 2; i++)
        if (l->sd[i].guard_ok)
            rm_nccl_guard_abort(&l->sd[i].guard);
    nl_close(l);
    return rc;
}

static int nl_begin(rm_pipe_links *l, rm_err *err)
{
    int rc = RM_OK;
    if (l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: group already open");
    RM_CUDA_GOTO_ERR(cudaSetDevice(l->device), rc, out, err);
    cudaStream_t compute = (cudaStream_t)rm_cuda_compute_stream();
    RM_CUDA_GOTO_ERR(cudaEventRecord(l->ready, compute ? compute : cudaStreamLegacy), rc, out, err);
    for (int i = 0; i < 2; i++)
        if (l->sd[i].used)
            RM_CUDA_GOTO_ERR(cudaStreamWaitEvent(l->sd[i].stream, l->ready, 0), rc, out, err);
    RM_NCCL_GOTO_ERR(ncclGroupStart(), rc, out, err);
    l->in_group = true;
out:
    return rc;
}

static int side_ready(rm_pipe_links *l, int side, rm_err *err)
{
    if (side < 0 || side > 1 || !l->sd[side].used || !l->sd[side].comm)
        return rm_errf(err, RM_ECLOSED, "pipeline link nccl: no open link to %s",
                       side >= 0 && side <= 1 ? side_who(side) : "?");
    if (!l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: transfer outside a group");
    return RM_OK;
}

static int nl_send(rm_pipe_links *l, int side, const float *rows, size_t nfloats, const float *extra,
                   rm_err *err)
{
    int rc = RM_OK;
    RM_CHECK(side_ready(l, side, err));
    nccl_side *s = &l->sd[side];
    int peer = 1 - s->me;
    if (nfloats > 0)
        RM_NCCL_GOTO_ERR(ncclSend(rows, nfloats, ncclFloat32, peer, s->comm, s->stream), rc, out, err);
    if (s->tx_extra && extra)
        RM_NCCL_GOTO_ERR(ncclSend(extra, 1, ncclFloat32, peer, s->comm, s->stream), rc, out, err);
out:
    return rc;
}

static int nl_recv(rm_pipe_links *l, int side, int mb, rm_err *err)
{
    int rc = RM_OK;
    RM_CHECK(side_ready(l, side, err));
    nccl_side *s = &l->sd[side];
    if (mb < 0 || mb >= l->M)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: micro-batch %d of %d", mb, l->M);
    /* NCCL meets the k-th send with the k-th receive: the sender sends micro-batch k % M */
    if ((uint64_t)mb != s->posted % (uint64_t)l->M)
        return rm_errf(err, RM_EPROTO,
                       "pipeline link nccl: receive %llu from %s posted for micro-batch "
                       "%d, the link carries micro-batch %llu next",
                       (unsigned long long)s->posted, side_who(side), mb,
                       (unsigned long long)(s->posted % (uint64_t)l->M));
    int peer = 1 - s->me, off, n;
    rm_pipe_micro_rows(l->B, l->M, mb, &off, &n);
    size_t cnt = (size_t)n * (size_t)s->width;
    if (cnt > 0) {
        rm_cuda_note_written(s->rx + (size_t)off * (size_t)s->width, cnt * sizeof(float));
        RM_NCCL_GOTO_ERR(
            ncclRecv(s->rx + (size_t)off * (size_t)s->width, cnt, ncclFloat32, peer, s->comm, s->stream), rc,
            out, err);
    }
    if (s->rx_extra)
        RM_NCCL_GOTO_ERR(ncclRecv(s->rx_extra + mb, 1, ncclFloat32, peer, s->comm, s->stream), rc, out, err);
    s->posted++;
    l->bytes_pending += (cnt + (s->rx_extra ? 1 : 0)) * sizeof(float);
out:
    return rc;
}

static int nl_end(rm_pipe_links *l, rm_err *err)
{
    int rc = RM_OK;
    if (!l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: no group open");
    l->in_group = false;
    l->issued = true;
    ncclResult_t r = ncclGroupEnd();
    if (r == ncclInProgress) /* non-blocking communicators: the enqueue finishes asynchronously */
        return guarded_wait(l, &comms_ready_probe, l->timeout_s, l->timeout_s, "ncclGroupEnd", err);
    RM_NCCL_GOTO_ERR(r, rc, out, err);
out:
    return rc;
}

/* Everything issued on the link streams has run. */
static int drain(rm_pipe_links *l, double *waited, rm_err *err)
{
    if (!l->issued)
        return RM_OK;
    double t0 = rm_mono();
    double timeout = rm_nccl_collective_timeout(!l->first_done, l->timeout_s, l->init_timeout_s);
    double start_bound = timeout * 10 > 300 ? timeout * 10 : 300; /* our own compute may be long */
    int rc = guarded_wait(l, &stream_probe, timeout, start_bound, "ncclSend/ncclRecv (pipeline)", err);
    *waited += rm_mono() - t0;
    if (rc)
        return rc;
    l->issued = false;
    l->first_done = true;
    for (int i = 0; i < 2; i++)
        l->sd[i].done = l->sd[i].posted;
    l->bytes_in += l->bytes_pending;
    l->bytes_pending = 0;
    return RM_OK;
}

static int nl_wait(rm_pipe_links *l, int side, uint64_t frames, double *waited, rm_err *err)
{
    if (side < 0 || side > 1 || !l->sd[side].used)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: no link to %s",
                       side >= 0 && side <= 1 ? side_who(side) : "?");
    nccl_side *s = &l->sd[side];
    if (s->done >= frames)
        return RM_OK;
    if (s->posted < frames)
        return rm_errf(err, RM_EPROTO,
                       "pipeline link nccl: waiting for frame %llu from %s, only %llu "
                       "receives were posted",
                       (unsigned long long)frames, side_who(side), (unsigned long long)s->posted);
    if (l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: wait inside an open group");
    return drain(l, waited, err);
}

static int nl_flush(rm_pipe_links *l, double *waited, rm_err *err)
{
    if (l->in_group)
        return rm_errf(err, RM_EINVAL, "pipeline link nccl: flush inside an open group");
    return drain(l, waited, err);
}

static uint64_t nl_bytes_in(rm_pipe_links *l)
{
    return l->bytes_in;
}

static const rm_pipe_link_ops nccl_link_ops = {
    .name = "nccl",
    .open = nl_open,
    .begin = nl_begin,
    .send = nl_send,
    .recv = nl_recv,
    .end = nl_end,
    .wait = nl_wait,
    .flush = nl_flush,
    .bytes_in = nl_bytes_in,
    .close = nl_close,
};

const rm_pipe_link_ops *rm_pipe_link_nccl_ops(void)
{
    return &nccl_link_ops;
}
