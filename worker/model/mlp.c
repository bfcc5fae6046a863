/* mlp.c — the MLP family (model.type: mlp): linear layers with ReLU between them and a softmax
 * cross-entropy on the last, over a kernels table. One unit per linear layer, its range [W | b]
 * (W row-major [in x out], then the bias). Input width and class count come from the data set
 * (docs/models-and-data.md, "Shapes and status"); the hidden widths from model.hidden.
 *
 * Shape record: nlayers = linear layers, dims[0] = inputs, dims[1..] = hidden widths, dims[nlayers]
 * = classes (the checkpoint header's model shape since checkpoints had one).
 *
 * Activations: act[l] = output of layer l for max_batch rows (the last holds the logits, then
 * their gradient after the loss); two ping-pong input-gradient buffers of the widest hidden width;
 * a bias-gradient scratch (placed and accumulating backward) and, on device tables, a scalar one.
 * The first layer's input gradient is never computed unless a pass asks for it (a pipeline stage
 * after the first): nothing else consumes it, and it is the largest of the backward GEMMs. */
#include "worker/model/mlp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "worker/data/data.h"

#define MLP_MAX_LAYERS (RM_TJ_MAX_HIDDEN + 1)

typedef struct mlp_priv {
    float *act[MLP_MAX_LAYERS];
    float *delta[2]; /* [max_batch x widest hidden width] */
    float *dbs;      /* [widest output width]: a bias gradient before it is placed or added */
    float *one;      /* device tables: 1.0f, for db += dbs as a GEMM */
} mlp_priv;

int rm_mlp_shape(rm_model_shape *s, int inputs, const int *hidden, int nhidden, int classes, rm_err *err)
{
    memset(s, 0, sizeof *s);
    if (nhidden < 0 || nhidden > RM_TJ_MAX_HIDDEN)
        return rm_err_field(err, RM_EINVAL, "model.hidden", "at most %d hidden layers", RM_TJ_MAX_HIDDEN);
    if (inputs < 1 || classes < 2)
        return rm_errf(err, RM_EINVAL, "model: bad input/class count %d/%d", inputs, classes);
    s->dims[0] = inputs;
    for (int i = 0; i < nhidden; i++) {
        if (hidden[i] < 1 || hidden[i] > 65536)
            return rm_err_field(err, RM_EINVAL, "model.hidden", "width %d out of range 1..65536", hidden[i]);
        s->dims[i + 1] = hidden[i];
    }
    s->dims[nhidden + 1] = classes;
    s->nlayers = nhidden + 1;
    return RM_OK;
}

static int mlp_shape(const rm_training_spec *t, const rm_model_data *d, rm_model_shape *s, rm_err *err)
{
    return rm_mlp_shape(s, d->inputs, t->hidden, t->nhidden, d->classes, err);
}

static int mlp_plan(rm_model *m, rm_err *err)
{
    const rm_model_shape *s = &m->shape;
    int L = s->nlayers;
    if (L < 1 || L > MLP_MAX_LAYERS)
        return rm_errf(err, RM_EINVAL, "model: mlp with %d layers (1..%d)", L, MLP_MAX_LAYERS);
    for (int l = 0; l <= L; l++)
        if (s->dims[l] < 1)
            return rm_errf(err, RM_EINVAL, "model: mlp width %d of layer %d", s->dims[l], l);
    size_t off = 0;
    int wmax = 0;
    for (int l = 0; l < L; l++) {
        size_t in = (size_t)s->dims[l], o = (size_t)s->dims[l + 1];
        m->unit[l] = (rm_model_unit){
            .kind = "linear",
            .off = off,
            .len = in * o + o,
            .in_width = s->dims[l],
            .out_width = s->dims[l + 1],
            .act_floats = o,
            .flops_fwd = 2 * in * o,
            .flops_bwd = 4 * in * o,
            .flops_bwd_first = 2 * in * o,
        };
        off += in * o + o;
        if (l + 1 < L && s->dims[l + 1] > wmax)
            wmax = s->dims[l + 1];
    }
    m->nunits = L;
    m->nparams = off;
    m->classes = s->dims[L];
    m->x_row_bytes = (size_t)s->dims[0] * sizeof(float);
    m->label_row = 1;
    m->scratch_row = 2 * (uint64_t)wmax; /* the two input-gradient buffers */
    return RM_OK;
}

static void mlp_release(rm_model *m)
{
    mlp_priv *p = m->priv;
    if (!p)
        return;
    for (int l = 0; l < MLP_MAX_LAYERS; l++)
        m->k->free(p->act[l]);
    m->k->free(p->delta[0]);
    m->k->free(p->delta[1]);
    m->k->free(p->dbs);
    m->k->free(p->one);
    free(p);
    m->priv = NULL;
}

static int mlp_alloc(rm_model *m, rm_err *err)
{
    const rm_kernels *k = m->k;
    const rm_model_shape *s = &m->shape;
    mlp_priv *p = calloc(1, sizeof *p);
    if (!p)
        return rm_errf(err, RM_ENOMEM, "model: out of memory");
    m->priv = p;
    /* plan sized the two input-gradient buffers: scratch_row = 2 x the widest hidden width */
    size_t B = (size_t)m->max_batch, widest = m->scratch_row > 2 ? (size_t)(m->scratch_row / 2) : 1, wout = 1;
    for (int l = 1; l <= s->nlayers; l++)
        wout = (size_t)s->dims[l] > wout ? (size_t)s->dims[l] : wout;
    p->delta[0] = k->alloc(B * widest * sizeof(float));
    p->delta[1] = k->alloc(B * widest * sizeof(float));
    p->dbs = k->alloc(wout * sizeof(float));
    int ok = p->delta[0] && p->delta[1] && p->dbs;
    for (int l = 0; l < s->nlayers; l++) {
        p->act[l] = k->alloc(B * (size_t)s->dims[l + 1] * sizeof(float));
        ok = ok && p->act[l];
    }
    if (ok && !k->host_memory) {
        const float one = 1.0f;
        p->one = k->alloc(sizeof(float));
        ok = p->one && k->h2d(p->one, &one, sizeof one) == 0;
    }
    return ok ? RM_OK : rm_errf(err, RM_ENOMEM, "model: out of memory");
}

/* He (Kaiming normal, fan_in) weights from one generator stream, zero biases. Layers before u0
 * draw their values and drop them, so layer l gets exactly what the whole model's init gives it. */
static void mlp_init_params(const rm_model *m, uint64_t seed, int u0, int u1, float *host)
{
    size_t off = m->unit[u0].off;
    rm_rng r;
    rm_rng_seed(&r, seed);
    for (int l = 0; l < u1; l++) {
        size_t in = (size_t)m->shape.dims[l], o = (size_t)m->shape.dims[l + 1];
        if (l < u0) {
            for (size_t i = 0; i < in * o; i++)
                (void)rm_rng_normal(&r);
            continue;
        }
        double std = sqrt(2.0 / (double)in); /* for ReLU */
        float *w = host + (m->unit[l].off - off);
        for (size_t i = 0; i < in * o; i++)
            w[i] = (float)(rm_rng_normal(&r) * std);
        memset(w + in * o, 0, o * sizeof(float)); /* biases 0 */
    }
}

/* Layer l's [W | b]: the override when set (model.h uparams), else its place in params. */
static const float *layer_params(const rm_model *m, int l)
{
    return m->uparams[l] ? m->uparams[l] : m->params + m->unit[l].off;
}

static rm_act layer_act(const rm_model *m, int l)
{
    return l == m->shape.nlayers - 1 ? RM_ACT_NONE : RM_ACT_RELU;
}

static const float *pass_input(const rm_model *m, const rm_model_pass *p)
{
    return p->in ? p->in : (const float *)rm_model_input(m, p->off);
}

static void mlp_forward(rm_model *m, const rm_model_pass *p)
{
    const rm_kernels *k = m->k;
    mlp_priv *pv = m->priv;
    const float *in = pass_input(m, p);
    for (int l = p->u0; l < p->u1; l++) {
        if (p->pre)
            p->pre(p->ud, l);
        int di = m->shape.dims[l], dout = m->shape.dims[l + 1];
        const float *W = layer_params(m, l);
        float *y = pv->act[l] + (size_t)p->off * (size_t)dout;
        k->gemm(false, false, p->rows, dout, di, 1.0f, in, di, W, dout, 0.0f, y, dout);
        k->bias_act_fwd(y, W + (size_t)di * (size_t)dout, p->rows, dout, layer_act(m, l));
        in = y;
    }
}

static float *mlp_output(const rm_model *m, int unit, int off)
{
    const mlp_priv *pv = m->priv;
    return pv->act[unit] + (size_t)off * (size_t)m->shape.dims[unit + 1];
}

static void mlp_loss(rm_model *m, int off, int rows, float inv_batch, float *loss_sum)
{
    float *y = mlp_output(m, m->nunits - 1, off);
    m->k->softmax_xent_fwd_bwd(y, m->labels + (size_t)off, rows, m->classes, inv_batch, y, loss_sum);
}

/* One layer at a time, last to first. The bias gradient: into the gradient buffer (overwrite),
 * through the scratch (accumulate: added after; placed: handed to the caller with dY while dY is
 * still valid — the next layer down overwrites it). */
static void mlp_backward(rm_model *m, const rm_model_pass *p)
{
    const rm_kernels *k = m->k;
    mlp_priv *pv = m->priv;
    float *dy = p->dy;
    int pp = 0, n = p->rows;
    size_t off = (size_t)p->off;
    for (int l = p->u1 - 1; l >= p->u0; l--) {
        int di = m->shape.dims[l], dout = m->shape.dims[l + 1];
        const float *in = l == p->u0 ? pass_input(m, p) : pv->act[l - 1] + off * (size_t)di;
        const float *y = pv->act[l] + off * (size_t)dout;
        if (p->place) {
            k->bias_act_bwd(dy, y, pv->dbs, n, dout, layer_act(m, l));
            rm_unit_grad g = {l, n, di, dout, in, dy, pv->dbs, NULL};
            p->place(p->ud, &g);
        } else {
            float *dW = m->grads + m->unit[l].off, *db = dW + (size_t)di * (size_t)dout;
            k->bias_act_bwd(dy, y, p->accumulate ? pv->dbs : db, n, dout, layer_act(m, l));
            if (p->accumulate && k->host_memory) {
                for (int c = 0; c < dout; c++)
                    db[c] += pv->dbs[c];
            } else if (p->accumulate) { /* device memory: db[1 x dout] += one[1 x 1] * dbs[1 x dout] */
                k->gemm(false, false, 1, dout, 1, 1.0f, pv->one, 1, pv->dbs, dout, 1.0f, db, dout);
            }
            k->gemm(true, false, di, dout, n, 1.0f, in, di, dy, dout, p->accumulate ? 1.0f : 0.0f, dW, dout);
        }
        if (l > p->u0 || p->dx) {
            if (p->pre)
                p->pre(p->ud, l);
            float *dx = l > p->u0 ? pv->delta[pp] : p->dx;
            pp ^= 1;
            k->gemm(false, true, n, di, dout, 1.0f, dy, dout, layer_params(m, l), dout, 0.0f, dx, di);
            dy = dx;
        }
        if (p->ready)
            p->ready(p->ud, l);
    }
}

/* dW[i][j] = sum_r in[r][i] * dy[r][j]: rows of dW are columns of in, so any run of whole rows is
 * one GEMM on an offset pointer, and a partial row a 1-row GEMM on a column range of dy. The bias
 * follows W in the layer ([W | b]). */
static void mlp_grad_range(const rm_model *m, const rm_unit_grad *g, size_t from, size_t to, float *dst)
{
    const rm_kernels *k = m->k;
    size_t dout = (size_t)g->dout, wlen = (size_t)g->di * dout;
    size_t at = from, wend = to < wlen ? to : wlen;
    while (at < wend) {
        size_t i = at / dout, j = at % dout, n;
        if (j == 0 && wend - at >= dout) { /* whole rows */
            size_t nr = (wend - at) / dout;
            n = nr * dout;
            k->gemm(true, false, (int)nr, g->dout, g->rows, 1.0f, g->in + i, g->di, g->dy, g->dout, 0.0f, dst,
                    g->dout);
        } else { /* a part of one row */
            n = dout - j < wend - at ? dout - j : wend - at;
            k->gemm(true, false, 1, (int)n, g->rows, 1.0f, g->in + i, g->di, g->dy + j, g->dout, 0.0f, dst,
                    (int)n);
        }
        dst += n;
        at += n;
    }
    if (to > wlen && to > at) { /* the bias part */
        size_t b0 = at > wlen ? at - wlen : 0;
        k->d2d(dst, g->db + b0, (to - wlen - b0) * sizeof(float));
    }
}

static void mlp_count_correct(rm_model *m, int rows, int32_t *correct)
{
    m->k->argmax_correct(mlp_output(m, m->nunits - 1, 0), m->labels, rows, m->classes, correct);
}

/* layers.{l}.weight (stored [in x out], exported as nn.Linear's [out x in]) then layers.{l}.bias */
static int mlp_tensors(const rm_model *m, int u, rm_model_tensor *out, int cap)
{
    int64_t in = m->unit[u].in_width, o = m->unit[u].out_width;
    if (cap >= 1) {
        out[0] = (rm_model_tensor){.off = m->unit[u].off, .ndim = 2, .shape = {in, o}, .layout = "in_out"};
        snprintf(out[0].name, sizeof out[0].name, "layers.%d.weight", u);
    }
    if (cap >= 2) {
        out[1] = (rm_model_tensor){
            .off = m->unit[u].off + (size_t)(in * o), .ndim = 1, .shape = {o}, .layout = ""};
        snprintf(out[1].name, sizeof out[1].name, "layers.%d.bias", u);
    }
    return 2;
}

/* config.json beside an export (docs/models-and-data.md, "Exported models"): the widths from the
 * inputs through the hidden layers to the classes. */
static int mlp_config_json(const rm_model *m, char *buf, size_t cap)
{
    const rm_model_shape *s = &m->shape;
    size_t at = 0;
    int n = snprintf(
        buf, cap, "{\n  \"model_type\": \"ringmaster-mlp\",\n  \"activation\": \"relu\",\n  \"widths\": [");
    for (int i = 0; n >= 0 && (size_t)n < cap - at && i <= s->nlayers; i++) {
        at += (size_t)n;
        n = snprintf(buf + at, cap - at, "%s%d", i ? ", " : "", s->dims[i]);
    }
    if (n >= 0 && (size_t)n < cap - at) {
        at += (size_t)n;
        n = snprintf(buf + at, cap - at, "]\n}\n");
    }
    return n >= 0 && (size_t)n < cap - at ? RM_OK : RM_EINVAL;
}

static int mlp_shape_from_config(const char *json, rm_model_shape *s, rm_err *err)
{
    memset(s, 0, sizeof *s);
    cJSON *j = cJSON_Parse(json);
    if (!j)
        return rm_errf(err, RM_EINVAL, "not JSON");
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "widths");
    int n = cJSON_IsArray(w) ? cJSON_GetArraySize(w) : 0, dims[MLP_MAX_LAYERS + 1];
    int rc = RM_OK;
    if (n < 2 || n > MLP_MAX_LAYERS + 1)
        rc = rm_err_field(err, RM_EINVAL, "widths",
                          "must be an array of 2 to %d layer widths (inputs .. classes)", MLP_MAX_LAYERS + 1);
    for (int i = 0; rc == RM_OK && i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(w, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble || v->valuedouble < 1 ||
            v->valuedouble > 1 << 24)
            rc = rm_err_field(err, RM_EINVAL, "widths", "[%d] must be a positive integer", i);
        else
            dims[i] = (int)v->valuedouble;
    }
    cJSON_Delete(j);
    if (rc)
        return rc;
    return rm_mlp_shape(s, dims[0], dims + 1, n - 2, dims[n - 1], err);
}

const rm_model_family rm_model_mlp = {
    .name = "mlp",
    .shape = mlp_shape,
    .plan = mlp_plan,
    .alloc = mlp_alloc,
    .release = mlp_release,
    .init_params = mlp_init_params,
    .forward = mlp_forward,
    .loss = mlp_loss,
    .backward = mlp_backward,
    .grad_range = mlp_grad_range,
    .count_correct = mlp_count_correct,
    .output = mlp_output,
    .describe = rm_model_shape_words,
    .tensors = mlp_tensors,
    .config_json = mlp_config_json,
    .shape_from_config = mlp_shape_from_config,
};
