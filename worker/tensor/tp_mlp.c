/* tp_mlp.c — the MLP split across a tensor group (worker/tensor/tp_mlp.h). */
#include "worker/tensor/tp_mlp.h"

#include "worker/pipeline/pipeline_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rm_tp_mlp_plan_range(const rm_model_shape *s, int T, int t, int lo, int hi, rm_tp_plan *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    int L = s->nlayers;
    if (L < 1 || L > RM_TP_MAX_LAYERS || T < 1 || t < 0 || t >= T || lo < 0 || hi > L || lo >= hi)
        return rm_errf(err, RM_EINVAL, "tensor: bad plan (layers [%d, %d) of %d, rank %d of %d)", lo, hi, L,
                       t, T);
    if (T > 1 && L < 2)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.hidden",
                            "needs at least one width with spec.parallelism.tensorParallel %d", T);
    out->L = L;
    out->T = T;
    out->t = t;
    out->lo = lo;
    out->hi = hi;
    size_t off = 0, woff = 0;
    for (int l = 0; l < L; l++) {
        rm_tp_layer *y = &out->l[l];
        y->din = s->dims[l];
        y->dout = s->dims[l + 1];
        y->woff = woff;
        woff += (size_t)y->din * (size_t)y->dout + (size_t)y->dout;
        if (l < lo || l >= hi)
            continue;   /* another stage's: no pieces here */
        int j = l - lo; /* pairs from the range's first layer */
        y->kind = l + 1 < hi && j % 2 == 0 ? RM_TP_COL : j % 2 == 1 ? RM_TP_ROW : RM_TP_REP;
        if (y->kind == RM_TP_COL && y->dout % T) {
            char key[48];
            snprintf(key, sizeof key, "spec.training.model.hidden[%d]", l);
            return rm_err_field(err, RM_EINVAL, key,
                                "must be a multiple of spec.parallelism.tensorParallel (%d) (got %d)", T,
                                y->dout);
        }
        y->in = y->kind == RM_TP_ROW ? y->din / T : y->din;
        y->out = y->kind == RM_TP_COL ? y->dout / T : y->dout;
        y->off = off;
        off += (size_t)y->in * (size_t)y->out + (size_t)y->out;
    }
    out->n = off;
    out->nwhole = woff;
    return RM_OK;
}

int rm_tp_mlp_plan(const rm_model_shape *s, int T, int t, rm_tp_plan *out, rm_err *err)
{
    return rm_tp_mlp_plan_range(s, T, t, 0, s->nlayers, out, err);
}

int rm_tp_mlp_stages(const rm_model_shape *s, int P, int *bounds, rm_err *err)
{
    int L = s->nlayers, nu = (L + 1) / 2;
    if (L < 1 || L > RM_TP_MAX_LAYERS)
        return rm_errf(err, RM_EINVAL, "tensor: bad MLP shape (%d layers)", L);
    if (P < 1 || P > nu || P > RM_PIPE_MAX_STAGES)
        return rm_err_field(
            err, RM_EINVAL, "spec.parallelism.pipelineStages",
            "must be <= the model's %d layer pairs with tensorParallel > 1 (a stage holds whole "
            "pairs; got %d)",
            nu, P);
    uint64_t cost[RM_TP_MAX_LAYERS];
    for (int u = 0; u < nu; u++) {
        cost[u] = 0;
        for (int l = 2 * u; l < 2 * u + 2 && l < L; l++)
            cost[u] += (uint64_t)s->dims[l] * (uint64_t)s->dims[l + 1] + (uint64_t)s->dims[l + 1];
    }
    int ub[RM_PIPE_MAX_STAGES + 1];
    RM_CHECK(rm_pipe_partition(cost, nu, P, ub, err));
    for (int p = 0; p <= P; p++)
        bounds[p] = 2 * ub[p] < L ? 2 * ub[p] : L;
    return RM_OK;
}

int rm_tp_mlp_events(const rm_tp_plan *p, rm_tp_event *ev, int cap)
{
    int n = 0;
    for (int l = p->lo; l < p->hi; l++)
        if (p->l[l].kind == RM_TP_ROW && p->T > 1) {
            if (n < cap)
                ev[n] = (rm_tp_event){'F', l, p->l[l].dout};
            n++;
        }
    for (int l = p->hi - 1; l > (p->lo > 0 ? p->lo - 1 : 0); l--)
        if (p->l[l].kind == RM_TP_COL && p->T > 1) {
            if (n < cap)
                ev[n] = (rm_tp_event){'B', l, p->l[l].din};
            n++;
        }
    return n;
}

/* One layer's pieces through the map (tp_split.h rm_tp_map_block). */
static void map_layer(const rm_tp_plan *p, int l, rm_tp_map *m)
{
    const rm_tp_layer *y = &p->l[l];
    size_t din = (size_t)y->din, dout = (size_t)y->dout, in = (size_t)y->in, out = (size_t)y->out;
    size_t w = y->woff, lo = y->off, wb = w + din * dout, lb = lo + in * out;
    switch (y->kind) {
    case RM_TP_COL: { /* this rank's columns of W and part of b */
        size_t o0 = (size_t)p->t * out;
        rm_tp_map_block(m, w + o0, dout, lo, out, din, out, RM_TP_BLK_SPLIT);
        rm_tp_map_block(m, wb + o0, 0, lb, 0, 1, out, RM_TP_BLK_SPLIT);
        break;
    }
    case RM_TP_ROW: /* this rank's rows of W; b replicated */
        rm_tp_map_block(m, w + (size_t)p->t * in * dout, 0, lo, 0, 1, in * dout, RM_TP_BLK_SPLIT);
        rm_tp_map_block(m, wb, 0, lb, 0, 1, dout, RM_TP_BLK_REP);
        break;
    case RM_TP_REP:
        rm_tp_map_block(m, w, 0, lo, 0, 1, din * dout + dout, RM_TP_BLK_REP);
        break;
    }
}

static void map_all(const rm_tp_plan *p, rm_tp_map *m)
{
    for (int l = p->lo; l < p->hi; l++)
        map_layer(p, l, m);
}

void rm_tp_slice(const rm_tp_plan *p, const float *whole, float *local)
{
    rm_tp_map m = {.whole = (float *)whole, .local = local, .to_local = true, .with_rep = true};
    map_all(p, &m);
}

void rm_tp_assemble(const rm_tp_plan *p, const float *local, float *whole, bool with_replicated)
{
    rm_tp_map m = {.whole = whole, .local = (float *)local, .with_rep = with_replicated};
    map_all(p, &m);
}

int rm_tp_mlp_runs(const rm_tp_plan *p, int32_t shard, rm_ckpt_run *run, int cap)
{
    rm_tp_map m = {.record = true, .with_rep = p->t == 0, .run = run, .cap = cap, .shard = shard};
    map_all(p, &m);
    return m.n;
}

bool rm_tp_replicated(const rm_tp_plan *p, size_t i)
{
    for (int l = p->lo; l < p->hi; l++) {
        const rm_tp_layer *y = &p->l[l];
        size_t wlen = (size_t)y->in * (size_t)y->out, len = wlen + (size_t)y->out;
        if (i >= y->off && i < y->off + len)
            return y->kind == RM_TP_REP || (y->kind == RM_TP_ROW && i >= y->off + wlen);
    }
    return false;
}

void rm_tp_mlp_free(rm_tp_mlp *m)
{
    if (!m || !m->k)
        return;
    const rm_kernels *k = m->k;
    k->free(m->params);
    k->free(m->grads);
    for (int l = 0; l < RM_TP_MAX_LAYERS; l++)
        k->free(m->act[l]);
    k->free(m->delta[0]);
    k->free(m->delta[1]);
    k->free(m->dx);
    k->free(m->dbs);
    memset(m, 0, sizeof *m);
}

int rm_tp_mlp_init(rm_tp_mlp *m, const rm_kernels *k, const rm_tp_plan *p, int max_batch,
                   rm_tp_allreduce_fn ar, void *ud, rm_err *err)
{
    memset(m, 0, sizeof *m);
    if (!k->host_memory)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.tensorParallel",
                            "> 1 runs on the CPU kernels in this version (the %s kernels hold device memory)",
                            k->name);
    m->k = k;
    m->p = *p;
    m->max_batch = max_batch;
    m->ar = ar;
    m->ud = ud;
    size_t B = (size_t)max_batch, widest = 1;
    for (int l = p->lo; l < p->hi; l++) {
        widest = (size_t)p->l[l].din > widest ? (size_t)p->l[l].din : widest;
        widest = (size_t)p->l[l].dout > widest ? (size_t)p->l[l].dout : widest;
    }
    m->params = k->alloc(p->n * sizeof(float));
    m->grads = k->alloc(p->n * sizeof(float));
    m->delta[0] = k->alloc(B * widest * sizeof(float));
    m->delta[1] = k->alloc(B * widest * sizeof(float));
    m->dx = k->alloc(B * widest * sizeof(float));
    m->dbs = k->alloc(widest * sizeof(float));
    bool ok = m->params && m->grads && m->delta[0] && m->delta[1] && m->dx && m->dbs;
    for (int l = p->lo; l < p->hi; l++) {
        m->act[l] = k->alloc(B * (size_t)p->l[l].out * sizeof(float));
        ok = ok && m->act[l];
    }
    if (!ok) {
        rm_tp_mlp_free(m);
        return rm_errf(err, RM_ENOMEM, "tensor: out of memory for the split MLP (%zu floats)", p->n);
    }
    return RM_OK;
}

static rm_act act_of(const rm_tp_plan *p, int l)
{
    return l == p->L - 1 ? RM_ACT_NONE : RM_ACT_RELU;
}

int rm_tp_mlp_forward_rows(rm_tp_mlp *m, const float *in, int off, int rows, rm_err *err)
{
    const rm_kernels *k = m->k;
    const rm_tp_plan *p = &m->p;
    for (int l = p->lo; l < p->hi; l++) {
        const rm_tp_layer *y = &p->l[l];
        const float *W = m->params + y->off, *b = W + (size_t)y->in * (size_t)y->out;
        float *out = m->act[l] + (size_t)off * (size_t)y->out;
        k->gemm(false, false, rows, y->out, y->in, 1.0f, in, y->in, W, y->out, 0.0f, out, y->out);
        if (y->kind == RM_TP_ROW && p->T > 1) { /* g: the partial sums of the row layer */
            size_t n = (size_t)rows * (size_t)y->out;
            RM_CHECK(m->ar(m->ud, out, n, err));
            m->fwd_floats += n;
        }
        k->bias_act_fwd(out, b, rows, y->out, act_of(p, l));
        in = out;
    }
    return RM_OK;
}

int rm_tp_mlp_forward(rm_tp_mlp *m, const float *x, int rows, rm_err *err)
{
    m->fwd_floats = 0;
    return rm_tp_mlp_forward_rows(m, x, 0, rows, err);
}

float *rm_tp_mlp_output(const rm_tp_mlp *m, int off)
{
    const rm_tp_layer *y = &m->p.l[m->p.hi - 1];
    return m->act[m->p.hi - 1] + (size_t)off * (size_t)y->out;
}

float *rm_tp_mlp_logits(const rm_tp_mlp *m)
{
    return rm_tp_mlp_output(m, 0);
}

void rm_tp_mlp_loss_rows(rm_tp_mlp *m, const int32_t *labels, int off, int rows, float inv_batch,
                         float *loss_sum)
{
    float *y = rm_tp_mlp_output(m, off);
    m->k->softmax_xent_fwd_bwd(y, labels + off, rows, m->p.l[m->p.L - 1].dout, inv_batch, y, loss_sum);
}

void rm_tp_mlp_loss(rm_tp_mlp *m, const int32_t *labels, int rows, float inv_batch, float *loss_sum)
{
    rm_tp_mlp_loss_rows(m, labels, 0, rows, inv_batch, loss_sum);
}

int rm_tp_mlp_backward_rows(rm_tp_mlp *m, const float *x, int off, int rows, float *dy, float *dx_out,
                            bool accumulate, rm_err *err)
{
    const rm_kernels *k = m->k;
    const rm_tp_plan *p = &m->p;
    int pp = 0;
    for (int l = p->hi - 1; l >= p->lo; l--) {
        const rm_tp_layer *y = &p->l[l];
        const float *in = l == p->lo ? x : m->act[l - 1] + (size_t)off * (size_t)p->l[l - 1].out;
        const float *W = m->params + y->off;
        float *dW = m->grads + y->off, *db = dW + (size_t)y->in * (size_t)y->out;
        /* dy: the gradient of this layer's output (whole for row/rep, this rank's part for col) */
        k->bias_act_bwd(dy, m->act[l] + (size_t)off * (size_t)y->out, accumulate ? m->dbs : db, rows, y->out,
                        act_of(p, l));
        if (accumulate) /* host memory (tp_mlp_init) */
            for (int c = 0; c < y->out; c++)
                db[c] += m->dbs[c];
        float *dx = l == p->lo ? dx_out : m->delta[pp]; /* NULL: nothing consumes the input gradient */
        pp ^= dx != NULL;
        bool f = dx && y->kind == RM_TP_COL && p->T > 1; /* f: the input gradient's partial sums */
        size_t n = (size_t)rows * (size_t)y->in;
        if (dx)
            k->gemm(false, true, rows, y->in, y->out, 1.0f, dy, y->out, W, y->out, 0.0f, dx, y->in);
        if (f) /* summed while the weight gradient is computed (tp_split.h rm_tp_async) */
            RM_CHECK(rm_tp_f_start(&m->async, m->ar, m->ud, dx, n, err));
        k->gemm(true, false, y->in, y->out, rows, 1.0f, in, y->in, dy, y->out, accumulate ? 1.0f : 0.0f, dW,
                y->out);
        if (f) {
            RM_CHECK(rm_tp_f_wait(&m->async, m->ud, err));
            m->bwd_floats += n;
        }
        if (!dx)
            break;
        dy = dx;
    }
    return RM_OK;
}

int rm_tp_mlp_backward(rm_tp_mlp *m, const float *x, int rows, rm_err *err)
{
    m->bwd_floats = 0;
    return rm_tp_mlp_backward_rows(m, x, 0, rows, rm_tp_mlp_logits(m), NULL, false, err);
}

/* ---- the split as the tensor strategy drives it (tp_split.h) */

/* forward, loss (scaled by 1 / rows, as mlp.c's), backward */
static int train(rm_tp_mlp *m, const void *x, const int32_t *labels, int rows, float *loss_sum, rm_err *err)
{
    RM_CHECK(rm_tp_mlp_forward(m, x, rows, err));
    rm_tp_mlp_loss(m, labels, rows, 1.0f / (float)rows, loss_sum);
    return rm_tp_mlp_backward(m, x, rows, err);
}

/* each layer's W (decayed) and b */
static int tensors(const rm_tp_plan *p, rm_optim_seg *seg, int cap)
{
    int n = 0;
    for (int l = p->lo; l < p->hi; l++) {
        size_t w = (size_t)p->l[l].in * (size_t)p->l[l].out;
        if (n + 1 < cap) {
            seg[n] = (rm_optim_seg){p->l[l].off, w, true};
            seg[n + 1] = (rm_optim_seg){p->l[l].off + w, (size_t)p->l[l].out, false};
        }
        n += 2;
    }
    return n;
}

/* the plan of stage p of P (P = 1: the whole model) */
static int plan_stage(const rm_model_shape *s, int T, int t, int P, int p, rm_tp_plan *out, rm_err *err)
{
    if (P <= 1)
        return rm_tp_mlp_plan(s, T, t, out, err);
    int b[RM_PIPE_MAX_STAGES + 1];
    RM_CHECK(rm_tp_mlp_stages(s, P, b, err));
    return rm_tp_mlp_plan_range(s, T, t, b[p], b[p + 1], out, err);
}

/* ---- the stage compute (tp_split.h rm_tp_stage_ops) */

static void st_widths(const rm_tp_split *s, int *din, int *dout)
{
    const rm_tp_plan *p = &((const rm_tp_mlp *)s->impl)->p;
    *din = p->l[p->lo].din;
    *dout = p->l[p->hi - 1].dout;
}

static int st_forward(rm_tp_split *s, const void *in, int off, int rows, rm_err *err)
{
    rm_tp_mlp *m = s->impl;
    m->fwd_floats = 0;
    int rc = rm_tp_mlp_forward_rows(m, in, off, rows, err);
    s->fwd_floats += m->fwd_floats;
    return rc;
}

static float *st_output(rm_tp_split *s, int off)
{
    return rm_tp_mlp_output(s->impl, off);
}

static int st_loss(rm_tp_split *s, const int32_t *labels, int off, int rows, float inv_batch, float *loss_sum,
                   rm_err *err)
{
    (void)err;
    rm_tp_mlp_loss_rows(s->impl, labels, off, rows, inv_batch, loss_sum);
    return RM_OK;
}

static int st_backward(rm_tp_split *s, const void *in, int off, int rows, float *dy, float *dx,
                       bool accumulate, rm_err *err)
{
    rm_tp_mlp *m = s->impl;
    m->bwd_floats = 0;
    int rc = rm_tp_mlp_backward_rows(m, in, off, rows, dy, dx, accumulate, err);
    s->bwd_floats += m->bwd_floats;
    return rc;
}

static const rm_tp_stage_ops stage_ops = {
    .bounds = rm_tp_mlp_stages,
    .widths = st_widths,
    .forward = st_forward,
    .output = st_output,
    .loss = st_loss,
    .backward = st_backward,
};

RM_TP_SPLIT_TABLE(rm_tp_split_mlp, "mlp", rm_tp_mlp, rm_tp_plan, &stage_ops, plan_stage, rm_tp_mlp_init,
                  rm_tp_mlp_free, rm_tp_slice, rm_tp_assemble, rm_tp_replicated, rm_tp_mlp_runs, train,
                  tensors)
