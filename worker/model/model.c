/* model.c — the MLP over a kernels table: layout, He init, forward, backward with per-layer
 * "gradient ready" callbacks (for fusion/overlap), accuracy counting and a parameter checksum.
 * Design: every buffer is sized for max_batch at init; forward/backward only issue kernels.
 * The first layer's input gradient is never computed (nothing consumes it), which saves the
 * largest of the backward GEMMs. */
#include "worker/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/data/data.h"

int rm_model_shape_make(rm_model_shape *s, int inputs, const int *hidden, int nhidden, int classes,
                        rm_err *err)
{
    memset(s, 0, sizeof *s);
    if (nhidden < 0 || nhidden > RM_TJ_MAX_HIDDEN)
        return rm_err_field(err, RM_EINVAL, "model.hidden", "at most %d hidden layers",
                            RM_TJ_MAX_HIDDEN);
    if (inputs < 1 || classes < 2)
        return rm_errf(err, RM_EINVAL, "model: bad input/class count %d/%d", inputs, classes);
    s->dims[0] = inputs;
    for (int i = 0; i < nhidden; i++) {
        if (hidden[i] < 1 || hidden[i] > 65536)
            return rm_err_field(err, RM_EINVAL, "model.hidden", "width %d out of range 1..65536",
                                hidden[i]);
        s->dims[i + 1] = hidden[i];
    }
    s->dims[nhidden + 1] = classes;
    s->nlayers = nhidden + 1;
    return RM_OK;
}

void rm_model_layout(const rm_model_shape *s, rm_param_layout *out)
{
    memset(out, 0, sizeof *out);
    size_t off = 0;
    out->nlayers = s->nlayers;
    for (int l = 0; l < s->nlayers; l++) {
        size_t in = (size_t)s->dims[l], o = (size_t)s->dims[l + 1];
        out->w_off[l] = off;
        out->layer_off[l] = off;
        out->b_off[l] = off + in * o;
        out->layer_len[l] = in * o + o;
        off += in * o + o;
    }
    out->total = off;
}

void rm_model_shape_str(const rm_model_shape *s, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0; i <= s->nlayers && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%d", i ? "-" : "", s->dims[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

void rm_model_free(rm_model *m)
{
    if (!m || !m->k)
        return;
    const rm_kernels *k = m->k;
    k->free(m->params);
    k->free(m->grads);
    k->free(m->x);
    k->free(m->labels);
    for (int l = 0; l < RM_MODEL_MAX_LAYERS; l++)
        k->free(m->act[l]);
    k->free(m->delta[0]);
    k->free(m->delta[1]);
    k->free(m->loss_sum);
    k->free(m->correct);
    memset(m, 0, sizeof *m);
}

int rm_model_init(rm_model *m, const rm_kernels *k, const rm_model_shape *shape, int max_batch,
                  rm_err *err)
{
    memset(m, 0, sizeof *m);
    if (!k || !shape || shape->nlayers < 1 || shape->nlayers > RM_MODEL_MAX_LAYERS || max_batch < 1)
        return rm_errf(err, RM_EINVAL, "model: bad shape or batch");
    m->k = k;
    m->shape = *shape;
    m->max_batch = max_batch;
    rm_model_layout(shape, &m->layout);
    size_t B = (size_t)max_batch, widest = 1;
    for (int l = 1; l < shape->nlayers; l++)
        widest = (size_t)shape->dims[l] > widest ? (size_t)shape->dims[l] : widest;
    m->params = k->alloc(m->layout.total * sizeof(float));
    m->grads = k->alloc(m->layout.total * sizeof(float));
    m->x = k->alloc(B * (size_t)shape->dims[0] * sizeof(float));
    m->labels = k->alloc(B * sizeof(int32_t));
    m->delta[0] = k->alloc(B * widest * sizeof(float));
    m->delta[1] = k->alloc(B * widest * sizeof(float));
    m->loss_sum = k->alloc(sizeof(float));
    m->correct = k->alloc(sizeof(int32_t));
    int ok = m->params && m->grads && m->x && m->labels && m->delta[0] && m->delta[1] &&
             m->loss_sum && m->correct;
    for (int l = 0; l < shape->nlayers; l++) {
        m->act[l] = k->alloc(B * (size_t)shape->dims[l + 1] * sizeof(float));
        ok = ok && m->act[l];
    }
    if (!ok) {
        size_t total = m->layout.total;   /* rm_model_free zeroes *m */
        rm_model_free(m);
        return rm_errf(err, RM_ENOMEM, "model: out of memory (%zu params, batch %d)", total, max_batch);
    }
    return RM_OK;
}

int rm_model_init_params(rm_model *m, uint64_t seed, rm_err *err)
{
    return rm_model_init_params_layers(m, seed, 0, m->shape.nlayers, err);
}

int rm_model_init_params_layers(rm_model *m, uint64_t seed, int l0, int l1, rm_err *err)
{
    if (l0 < 0 || l1 > m->shape.nlayers || l0 >= l1)
        return rm_errf(err, RM_EINVAL, "model: bad layer range [%d, %d) of %d", l0, l1, m->shape.nlayers);
    size_t off = m->layout.layer_off[l0];
    size_t len = m->layout.layer_off[l1 - 1] + m->layout.layer_len[l1 - 1] - off;
    /* host tables: straight into the parameters; device tables: a staging copy of the range */
    float *host = m->k->host_memory ? m->params + off : calloc(len, sizeof(float));
    if (!host)
        return rm_errf(err, RM_ENOMEM, "model: out of memory for init");
    rm_rng r;
    rm_rng_seed(&r, seed);
    for (int l = 0; l < l1; l++) {
        size_t in = (size_t)m->shape.dims[l], o = (size_t)m->shape.dims[l + 1];
        if (l < l0) {   /* the same stream as the whole model's: draw the layer's values, drop them */
            for (size_t i = 0; i < in * o; i++)
                (void)rm_rng_normal(&r);
            continue;
        }
        double std = sqrt(2.0 / (double)in);   /* He / Kaiming normal, fan_in, for ReLU */
        float *w = host + (m->layout.w_off[l] - off);
        for (size_t i = 0; i < in * o; i++)
            w[i] = (float)(rm_rng_normal(&r) * std);
        memset(host + (m->layout.b_off[l] - off), 0, o * sizeof(float));   /* biases 0 */
    }
    if (!m->k->host_memory) {
        m->k->h2d(m->params + off, host, len * sizeof(float));
        free(host);
    }
    return RM_OK;
}

/* Layer l's [W | b]: the override when set (model.h lparams), else its place in params. */
static const float *layer_params(const rm_model *m, int l)
{
    return m->lparams[l] ? m->lparams[l] : m->params + m->layout.w_off[l];
}

void rm_model_forward(rm_model *m, int rows)
{
    rm_model_forward_hooked(m, rows, NULL, NULL);
}

void rm_model_forward_hooked(rm_model *m, int rows, rm_layer_pre_fn pre, void *ud)
{
    const rm_kernels *k = m->k;
    const float *in = m->x;
    for (int l = 0; l < m->shape.nlayers; l++) {
        if (pre)
            pre(ud, l);
        int di = m->shape.dims[l], dout = m->shape.dims[l + 1];
        const float *W = layer_params(m, l);
        const float *b = W + (m->layout.b_off[l] - m->layout.w_off[l]);
        k->gemm(false, false, rows, dout, di, 1.0f, in, di, W, dout, 0.0f, m->act[l], dout);
        k->bias_act_fwd(m->act[l], b, rows, dout,
                        l == m->shape.nlayers - 1 ? RM_ACT_NONE : RM_ACT_RELU);
        in = m->act[l];
    }
}

void rm_model_backward(rm_model *m, int rows, float inv_batch, rm_layer_ready_fn ready, void *ud)
{
    rm_model_backward_hooked(m, rows, inv_batch, NULL, ready, ud);
}

/* Backward, one layer at a time. ready/pre as rm_model_backward_hooked. With place == NULL each
 * layer's gradient goes to m->grads; otherwise the bias gradient goes to db_scratch and place(ud,
 * &g) computes whatever ranges of the weight gradient it wants (rm_model_grad_range) while dY is
 * still valid (the next layer down overwrites it). */
static void backward_impl(rm_model *m, int rows, float inv_batch, rm_layer_pre_fn pre,
                          rm_layer_ready_fn ready, rm_layer_grad_fn place, float *db_scratch, void *ud)
{
    const rm_kernels *k = m->k;
    int L = m->shape.nlayers;
    float *logits = m->act[L - 1];
    k->softmax_xent_fwd_bwd(logits, m->labels, rows, m->shape.dims[L], inv_batch, logits,
                            m->loss_sum);
    float *dy = logits;   /* gradient w.r.t. the current layer's output (after activation) */
    int pp = 0;
    for (int l = L - 1; l >= 0; l--) {
        int di = m->shape.dims[l], dout = m->shape.dims[l + 1];
        const float *in = l ? m->act[l - 1] : m->x;
        float *db = place ? db_scratch : m->grads + m->layout.b_off[l];
        /* dY through the activation (identity for the last layer), bias gradient */
        k->bias_act_bwd(dy, m->act[l], db, rows, dout, l == L - 1 ? RM_ACT_NONE : RM_ACT_RELU);
        if (place) {
            rm_layer_grad g = {l, rows, di, dout, in, dy, db};
            place(ud, &g);
        } else {
            float *dW = m->grads + m->layout.w_off[l];
            k->gemm(true, false, di, dout, rows, 1.0f, in, di, dy, dout, 0.0f, dW, dout);
        }
        if (l > 0) {
            if (pre)
                pre(ud, l);
            float *dx = m->delta[pp];
            pp ^= 1;
            const float *W = layer_params(m, l);
            k->gemm(false, true, rows, di, dout, 1.0f, dy, dout, W, dout, 0.0f, dx, di);
            dy = dx;
        }
        if (ready)
            ready(ud, l);
    }
}

void rm_model_backward_hooked(rm_model *m, int rows, float inv_batch, rm_layer_pre_fn pre,
                              rm_layer_ready_fn ready, void *ud)
{
    backward_impl(m, rows, inv_batch, pre, ready, NULL, NULL, ud);
}

void rm_model_backward_placed(rm_model *m, int rows, float inv_batch, rm_layer_pre_fn pre,
                              rm_layer_grad_fn place, rm_layer_ready_fn ready, float *db_scratch,
                              void *ud)
{
    backward_impl(m, rows, inv_batch, pre, ready, place, db_scratch, ud);
}

/* dW[i][j] = sum_r in[r][i] * dy[r][j]: rows of dW are columns of in, so any run of whole rows is
 * one GEMM on an offset pointer, and a partial row a 1-row GEMM on a column range of dy. The bias
 * follows W in the layer ([W | b]). */
void rm_model_grad_range(const rm_kernels *k, const rm_layer_grad *g, size_t from, size_t to, float *dst)
{
    size_t dout = (size_t)g->dout, wlen = (size_t)g->di * dout;
    size_t at = from, wend = to < wlen ? to : wlen;
    while (at < wend) {
        size_t i = at / dout, j = at % dout, n;
        if (j == 0 && wend - at >= dout) {   /* whole rows */
            size_t nr = (wend - at) / dout;
            n = nr * dout;
            k->gemm(true, false, (int)nr, g->dout, g->rows, 1.0f, g->in + i, g->di, g->dy, g->dout, 0.0f,
                    dst, g->dout);
        } else {                             /* a part of one row */
            n = dout - j < wend - at ? dout - j : wend - at;
            k->gemm(true, false, 1, (int)n, g->rows, 1.0f, g->in + i, g->di, g->dy + j, g->dout, 0.0f,
                    dst, (int)n);
        }
        dst += n;
        at += n;
    }
    if (to > wlen && to > at) {              /* the bias part */
        size_t b0 = at > wlen ? at - wlen : 0;
        k->d2d(dst, g->db + b0, (to - wlen - b0) * sizeof(float));
    }
}

void rm_model_count_correct(rm_model *m, int rows)
{
    int L = m->shape.nlayers;
    m->k->argmax_correct(m->act[L - 1], m->labels, rows, m->shape.dims[L], m->correct);
}

uint64_t rm_fnv1a64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t rm_model_checksum(const rm_model *m, void *scratch, size_t scratch_bytes)
{
    uint64_t h = RM_FNV64_INIT;
    size_t total = m->layout.total * sizeof(float), done = 0;
    const unsigned char *src = (const unsigned char *)m->params;
    if (m->k->host_memory)
        return rm_fnv1a64(src, total, h);
    while (done < total) {
        size_t n = total - done < scratch_bytes ? total - done : scratch_bytes;
        m->k->d2h(scratch, src + done, n);
        h = rm_fnv1a64(scratch, n, h);
        done += n;
    }
    return h;
}

void rm_model_release_range(const rm_model *m, float *base, size_t from, size_t to)
{
    if (!m->k->host_memory || !base || to <= from)
        return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)(base + from) + pg - 1) & ~(pg - 1);
    uintptr_t b = (uintptr_t)(base + to) & ~(pg - 1);
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}
