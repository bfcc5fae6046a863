/* pipe_link_nccl_stub.c — the CPU build's "nccl" pipeline link (worker/pipeline/pipe_link.h): an entry that
 * only says no. The GPU build compiles worker/pipeline/cuda/pipe_link_nccl.c instead (the Makefile picks
 * one folder), so step_pipeline.c needs no #if. */
#include "worker/pipeline/pipe_link.h"

static int stub_open(const rm_pipe_links_cfg *cfg, rm_pipe_links **out, rm_err *err)
{
    (void)cfg;
    *out = NULL;
    return rm_errf(err, RM_EUNSUPPORTED,
                   "pipeline stages on a GPU move activations with NCCL "
                   "send/recv; this worker was built without CUDA (make CUDA=1 with the CUDA toolkit "
                   "and NCCL)");
}

static int stub_group(rm_pipe_links *l, rm_err *err)
{
    (void)l;
    return rm_errf(err, RM_EUNSUPPORTED, "pipeline link nccl: built without CUDA");
}

static int stub_send(rm_pipe_links *l, int side, const float *rows, size_t nfloats, const float *extra,
                     rm_err *err)
{
    (void)side, (void)rows, (void)nfloats, (void)extra;
    return stub_group(l, err);
}

static int stub_recv(rm_pipe_links *l, int side, int mb, rm_err *err)
{
    (void)side, (void)mb;
    return stub_group(l, err);
}

static int stub_wait(rm_pipe_links *l, int side, uint64_t frames, double *waited, rm_err *err)
{
    (void)side, (void)frames, (void)waited;
    return stub_group(l, err);
}

static int stub_flush(rm_pipe_links *l, double *waited, rm_err *err)
{
    (void)waited;
    return stub_group(l, err);
}

static uint64_t stub_bytes_in(rm_pipe_links *l)
{
    (void)l;
    return 0;
}

static void stub_close(rm_pipe_links *l)
{
    (void)l;
}

static const rm_pipe_link_ops stub_ops = {
    .name = "nccl",
    .open = stub_open,
    .begin = stub_group,
    .send = stub_send,
    .recv = stub_recv,
    .end = stub_group,
    .wait = stub_wait,
    .flush = stub_flush,
    .bytes_in = stub_bytes_in,
    .close = stub_close,
};

const rm_pipe_link_ops *rm_pipe_link_nccl_ops(void)
{
    return &stub_ops;
}
