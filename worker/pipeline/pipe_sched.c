/* pipe_sched.c — one pipeline stage's step over its links (worker/pipeline/pipe_sched.h). */
#include "worker/pipeline/pipe_sched.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "worker/comm/net.h"
#include "worker/step.h"

void rm_pipe_sched_free(rm_pipe_sched *ps)
{
    if (!ps || !ps->k)
        return;
    rm_pipe_sched_round_end(ps);
    const rm_kernels *k = ps->k;
    k->free(ps->in_act);
    k->free(ps->out_grad);
    k->free(ps->dx);
    k->free(ps->loss_mb);
    k->free(ps->loss_rx);
    free(ps->loss_h);
    free(ps->xf);
    memset(ps, 0, sizeof *ps);
}

int rm_pipe_sched_init(rm_pipe_sched *ps, const rm_kernels *k, int B, int M, int schedule, int widest,
                       rm_err *err)
{
    memset(ps, 0, sizeof *ps);
    if (B < 1 || M < 1 || M > RM_PIPE_MAX_MICRO || widest < 1)
        return rm_errf(err, RM_EINVAL, "pipeline: bad schedule buffers (B %d, M %d, width %d)", B, M, widest);
    ps->k = k;
    ps->lk = rm_pipe_link_ops_of(rm_pipe_link_for(k->host_memory));
    ps->B = B;
    ps->M = M;
    ps->schedule = schedule;
    size_t act = (size_t)B * (size_t)widest * sizeof(float); /* zero-filled */
    ps->in_act = k->alloc(act);
    ps->out_grad = k->alloc(act);
    ps->dx = k->alloc(act);
    ps->loss_mb = k->alloc((size_t)M * sizeof(float));
    ps->loss_rx = k->alloc((size_t)M * sizeof(float));
    ps->loss_h = calloc((size_t)M, sizeof(float));
    ps->xf = calloc(4 * (size_t)M, sizeof *ps->xf);
    if (!ps->in_act || !ps->out_grad || !ps->dx || !ps->loss_mb || !ps->loss_rx || !ps->loss_h || !ps->xf) {
        rm_pipe_sched_free(ps);
        return rm_errf(err, RM_ENOMEM, "pipeline: out of memory for the stage buffers");
    }
    return RM_OK;
}

void rm_pipe_sched_round_end(rm_pipe_sched *ps)
{
    if (ps->lk)
        ps->lk->close(ps->links); /* stops the receivers / closes the NCCL communicators */
    ps->links = NULL;
}

int rm_pipe_sched_round(rm_pipe_sched *ps, int P, int p, int din, int dout, rm_err *err)
{
    rm_pipe_sched_round_end(ps);
    ps->P = P;
    ps->p = p;
    ps->din = din;
    ps->dout = dout;
    ps->nfwd = ps->nbwd = 0;
    ps->nev = rm_pipe_schedule_events(ps->schedule, P, p, ps->M, ps->ev);
    if (ps->nev < 0)
        return rm_errf(err, RM_EINVAL, "pipeline: bad schedule");
    ps->inflight = rm_pipe_max_inflight(ps->ev, ps->nev);
    ps->nxf = rm_pipe_xfer_plan(ps->ev, ps->nev, P, p, ps->B, ps->M, true, ps->xf, 4 * ps->M);
    if (ps->nxf < 0)
        return rm_errf(err, RM_EINVAL, "pipeline: no transfer plan for stage %d", p);
    return RM_OK;
}

int rm_pipe_sched_links(rm_pipe_sched *ps, rm_comm *prev, rm_comm *next, double timeout_s, rm_err *err)
{
    rm_pipe_sched_round_end(ps);
    if (!prev && !next)
        return RM_OK;
    /* the transport over the authenticated links (TCP: receiver threads on their sockets; NCCL: a
     * communicator per link, its id sent over the link) */
    rm_pipe_links_cfg lc = {
        .side =
            {
                [RM_PIPE_SIDE_PREV] = {.tcp = prev,
                                       .lower = false,
                                       .rx = ps->in_act,
                                       .width = ps->din,
                                       .rx_extra = NULL,
                                       .tx_extra = true},
                [RM_PIPE_SIDE_NEXT] = {.tcp = next,
                                       .lower = true,
                                       .rx = ps->out_grad,
                                       .width = ps->dout,
                                       .rx_extra = ps->loss_rx,
                                       .tx_extra = false},
            },
        .B = ps->B,
        .M = ps->M,
        .timeout_s = timeout_s,
        .k = ps->k,
    };
    return ps->lk->open(&lc, &ps->links, err);
}

/* Issue the plan's group starting at xfer *xi (one ncclGroupStart/End on NCCL; TCP: the send now,
 * the receive is the receiver thread's): a send carries the output rows of its micro-batch to
 * p+1 (forward) or the input-gradient rows and the micro-batch's loss to p-1 (backward); a
 * receive lands at its micro-batch's rows. *sent += the bytes sent (with the TCP link's frame
 * headers; NCCL sends none). */
static int issue_group(rm_pipe_sched *ps, const rm_pipe_stage_ops *ops, void *ud, int *xi, uint64_t *sent,
                       rm_err *err)
{
    int g = ps->xf[*xi].group;
    size_t hdr = ps->lk == rm_pipe_link_tcp_ops() ? sizeof(rm_net_frame) : 0;
    RM_CHECK(ps->lk->begin(ps->links, err));
    int rc = RM_OK;
    for (; *xi < ps->nxf && ps->xf[*xi].group == g && rc == RM_OK; (*xi)++) {
        const rm_pipe_xfer *x = &ps->xf[*xi];
        if (x->op == RM_PIPE_XF_RECV) {
            rc = ps->lk->recv(ps->links, x->side, x->mb, err);
        } else if (!x->grad) { /* forward: this stage's output rows to p+1 */
            size_t n = (size_t)x->rows * (size_t)ps->dout;
            rc = ps->lk->send(ps->links, RM_PIPE_SIDE_NEXT, ops->output(ud, x->row_off), n, NULL, err);
            *sent += n * sizeof(float) + hdr;
        } else { /* backward: the input gradient rows and the loss to p-1 */
            size_t n = (size_t)x->rows * (size_t)ps->din;
            rc = ps->lk->send(ps->links, RM_PIPE_SIDE_PREV, ps->dx + (size_t)x->row_off * (size_t)ps->din, n,
                              &ps->loss_mb[x->mb], err);
            *sent += (n + 1) * sizeof(float) + hdr;
        }
    }
    int erc = ps->lk->end(ps->links, rc ? NULL : err);
    return rc ? rc : erc;
}

int rm_pipe_sched_step(rm_pipe_sched *ps, int rows, const rm_pipe_stage_ops *ops, void *ud,
                       rm_pipe_sched_stats *st, rm_err *err)
{
    const rm_kernels *k = ps->k;
    memset(st, 0, sizeof *st);
    if (rows != ps->B)
        return rm_errf(err, RM_EINVAL, "pipeline: batch of %d rows, the stages were sized for %d", rows,
                       ps->B);
    bool first_stage = ps->p == 0, last_stage = ps->p == ps->P - 1;
    uint64_t b0 = ps->links ? ps->lk->bytes_in(ps->links) : 0;
    double t0 = st->t0 = rm_mono();
    float inv_batch = 1.0f / (float)rows;
    bool first_b = true;
    int xi = 0; /* transfers [0, xi) of the plan are issued */
    for (int i = 0; i < ps->nev; i++) {
        double e0 = rm_mono(), w0 = st->waited_s;
        int mb = ps->ev[i].mb, off, n;
        rm_pipe_micro_rows(rows, ps->M, mb, &off, &n);
        const float *in0 = first_stage ? NULL : ps->in_act + (size_t)off * (size_t)ps->din;
        /* a receive that opens its group (no send before it to share one): issue it now */
        if (xi < ps->nxf && ps->xf[xi].event == i && ps->xf[xi].op == RM_PIPE_XF_RECV)
            RM_CHECK(issue_group(ps, ops, ud, &xi, &st->sent, err));
        if (ps->ev[i].kind == RM_PIPE_EV_F) {
            if (!first_stage)
                RM_CHECK(ps->lk->wait(ps->links, RM_PIPE_SIDE_PREV, ps->nfwd + (uint64_t)mb + 1,
                                      &st->waited_s, err));
            if (n > 0)
                RM_CHECK(ops->forward(ud, off, n, in0, inv_batch, last_stage ? ps->loss_mb + mb : NULL, err));
        } else {
            float *dy;
            if (last_stage) {
                dy = ops->output(ud, off);
            } else {
                RM_CHECK(ps->lk->wait(ps->links, RM_PIPE_SIDE_NEXT, ps->nbwd + (uint64_t)mb + 1,
                                      &st->waited_s, err));
                dy = ps->out_grad + (size_t)off * (size_t)ps->dout;
                if (k->host_memory)
                    ps->loss_mb[mb] = ps->loss_rx[mb];
                else
                    RM_CHECK(rm_kernels_copy_error(k,
                                                   k->d2d(ps->loss_mb + mb, ps->loss_rx + mb, sizeof(float)),
                                                   "micro-batch loss", err));
            }
            if (n > 0) {
                float *dx = first_stage ? NULL : ps->dx + (size_t)off * (size_t)ps->din;
                RM_CHECK(ops->backward(ud, off, n, dy, in0, dx, first_b, err));
                first_b = false;
            }
        }
        /* the event's send (and the next event's receive in the same group) */
        if (xi < ps->nxf && ps->xf[xi].event == i && ps->xf[xi].op == RM_PIPE_XF_SEND)
            RM_CHECK(issue_group(ps, ops, ud, &xi, &st->sent, err));
        /* an event's busy time: its compute and sends, not its wait */
        st->busy_s[ps->ev[i].kind == RM_PIPE_EV_F ? 0 : 1] += rm_mono() - e0 - (st->waited_s - w0);
    }
    if (xi != ps->nxf)
        return rm_errf(err, RM_EPROTO, "pipeline: stage %d issued %d of its %d transfers", ps->p, xi,
                       ps->nxf);
    /* every send has left its buffer before the next step writes it (NCCL; TCP sends are done) */
    if (ps->links)
        RM_CHECK(ps->lk->flush(ps->links, &st->waited_s, err));
    st->sched_s = rm_mono() - t0;
    ps->nfwd += (uint64_t)ps->M;
    ps->nbwd += (uint64_t)ps->M;
    const float *lmb = ps->loss_mb;
    if (!k->host_memory) {
        RM_CHECK(rm_kernels_copy_error(k, k->d2h(ps->loss_h, ps->loss_mb, (size_t)ps->M * sizeof(float)),
                                       "micro-batch losses", err));
        lmb = ps->loss_h;
    }
    for (int mb = 0; mb < ps->M; mb++)
        st->loss += lmb[mb];
    st->recv = ps->links ? ps->lk->bytes_in(ps->links) - b0 : 0;
    return RM_OK;
}

int rm_pipe_sched_report(const rm_pipe_sched *ps, const rm_pipe_sched_stats *ss, float *loss_sum,
                         struct rm_step_stats *st, rm_err *err)
{
    const rm_kernels *k = ps->k;
    if (k->host_memory)
        *loss_sum = ss->loss;
    else
        RM_CHECK(rm_kernels_copy_error(k, k->h2d(loss_sum, &ss->loss, sizeof ss->loss), "loss", err));
    st->pipe = true;
    st->pipe_stage = ps->p;
    st->pipe_bubble = ss->sched_s > 0 ? ss->waited_s / ss->sched_s : 0;
    st->pipe_sent = ss->sent;
    st->pipe_recv = ss->recv;
    return RM_OK;
}

int rm_pipe_sched_group(rm_pipe_sched *ps, int rx_side, int rx_mb, int tx_side, const float *rows, size_t n,
                        const float *extra, rm_err *err)
{
    RM_CHECK(ps->lk->begin(ps->links, err));
    int rc = RM_OK;
    if (tx_side >= 0)
        rc = ps->lk->send(ps->links, tx_side, rows, n, extra, err);
    if (!rc && rx_side >= 0)
        rc = ps->lk->recv(ps->links, rx_side, rx_mb, err);
    int erc = ps->lk->end(ps->links, rc ? NULL : err);
    return rc ? rc : erc;
}
