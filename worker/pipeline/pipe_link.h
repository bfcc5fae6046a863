/* pipe_link.h — the transport table of the links between neighbouring pipeline stages (docs/strategies.md#pipeline-stages
 * item 3): how a stage's activations go to stage p+1 and its activation-gradients to stage p-1.
 * One function table, one file per backend (the house style of worker/comm/comm.h):
 *   "tcp"  worker/pipeline/pipe_link_tcp.c — host buffers (the CPU kernels). The link's authenticated
 *          2-rank ring comm gives one socket per direction; frames are rm_net_frame headers with
 *          sequence numbers (a desync is RM_EPROTO); a receiver thread per inbound socket drains
 *          frames into the preallocated receive buffer at the micro-batch's rows, so a send never
 *          blocks on a full socket buffer; sends are synchronous; groups and recv() are no-ops.
 *   "nccl" worker/pipeline/cuda/pipe_link_nccl.c — device buffers (a GPU). One 2-rank NCCL communicator
 *          per link, its ncclUniqueId made by the lower stage and sent over the same authenticated
 *          TCP link (which stays the handshake and control channel); each group of the plan
 *          (pipeline_core.h rm_pipe_xfer_plan) is one ncclGroupStart/End of ncclSend/ncclRecv of
 *          the micro-batch's rows on a dedicated CUDA stream that first waits on an event recorded
 *          on the compute stream (the sends read what the compute wrote; the receives overwrite
 *          what it read); waits are bounded and abortable (worker/comm/nccl_wait.h, as comm_nccl).
 *          worker/pipeline/nocuda/pipe_link_nccl_stub.c: open() fails with RM_EUNSUPPORTED.
 * The driver (worker/pipeline/step_pipeline.c) picks the entry with rm_pipe_link_for(k->host_memory) and,
 * per step, runs the plan: for each group begin(), send()/recv() of its transfers, end(); before
 * the compute that reads a receive, wait() for it (the time blocked there is the bubble); at the
 * step's end flush() (every send has left its buffer before the next step overwrites it).
 *
 * Frame counts: wait(side, frames) waits until `frames` frames arrived from that side since open
 * (the round); the caller counts across steps. Each frame is one micro-batch's rows (rows x the
 * side's width floats) plus, on a side with an extra buffer, one trailing float (the loss).
 * Ownership: rm_pipe_links owns its threads, communicators, streams and events; the buffers and
 * the TCP comms in the config are borrowed and must outlive close(). Threads: one caller thread
 * (the step's); the TCP entry's receiver threads are internal. Nothing is allocated per step. */
#ifndef RM_WORKER_PIPE_LINK_H
#define RM_WORKER_PIPE_LINK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/rm.h"
#include "kernels/kernels.h"
#include "worker/comm/comm.h"
#include "worker/pipeline/pipeline_core.h"

typedef struct rm_pipe_links rm_pipe_links; /* a stage's ends of its (up to two) links */

typedef struct rm_pipe_link_cfg {
    rm_comm *tcp;    /* the authenticated 2-rank ring comm to this neighbour; NULL: no neighbour */
    bool lower;      /* this rank is the link's lower stage (it makes the NCCL id) */
    float *rx;       /* receive buffer [B x width] (the kernels' memory), micro-batch m at its rows */
    int width;       /* floats per row on this link */
    float *rx_extra; /* [M] one trailing float per received frame, or NULL */
    bool tx_extra;   /* frames sent on this link carry one trailing float */
} rm_pipe_link_cfg;

typedef struct rm_pipe_links_cfg {
    rm_pipe_link_cfg side[2]; /* indexed by rm_pipe_side */
    int B, M;                 /* rows per batch, micro-batches */
    double timeout_s;         /* bound on every wait, send and the handshake */
    const rm_kernels *k;      /* where the buffers live */
} rm_pipe_links_cfg;

typedef struct rm_pipe_link_ops {
    const char *name; /* "tcp", "nccl" */
    int (*open)(const rm_pipe_links_cfg *cfg, rm_pipe_links **out, rm_err *err);
    /* a group of transfers: begin, then send/recv, then end (issues them together) */
    int (*begin)(rm_pipe_links *l, rm_err *err);
    /* nfloats of rows (the kernels' memory) and, if the side sends extras, *extra */
    int (*send)(rm_pipe_links *l, int side, const float *rows, size_t nfloats, const float *extra,
                rm_err *err);
    /* the next frame from side lands at micro-batch mb's rows of its rx buffer (and rx_extra[mb]) */
    int (*recv)(rm_pipe_links *l, int side, int mb, rm_err *err);
    int (*end)(rm_pipe_links *l, rm_err *err);
    /* until `frames` frames arrived from side this round; *waited += the seconds blocked */
    int (*wait)(rm_pipe_links *l, int side, uint64_t frames, double *waited, rm_err *err);
    /* until every issued transfer completed; *waited += the seconds blocked */
    int (*flush)(rm_pipe_links *l, double *waited, rm_err *err);
    uint64_t (*bytes_in)(rm_pipe_links *l); /* bytes received this round */
    void (*close)(rm_pipe_links *l);        /* NULL ok; stops threads, aborts or frees comms */
} rm_pipe_link_ops;

const rm_pipe_link_ops *rm_pipe_link_tcp_ops(void);
/* Never NULL: without CUDA its open() fails with RM_EUNSUPPORTED naming the reason. */
const rm_pipe_link_ops *rm_pipe_link_nccl_ops(void);
/* The entry for a kind (rm_pipe_link_for). */
const rm_pipe_link_ops *rm_pipe_link_ops_of(rm_pipe_link_kind kind);
#endif
