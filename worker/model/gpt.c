/* gpt.c — the transformer family (model.type: gpt): GPT-2's architecture on the model interface
 * (docs/models-and-data.md, "The transformer"), over the kernels table's GEMM and its transformer
 * kernels (kernels/transformer.h).
 *
 * Units: 0 = the embedding [wte | wpe]; 1..L = the blocks, each [ln_1.w, ln_1.b, c_attn.w
 * [C x 3C], c_attn.b, attn.c_proj.w [C x C], attn.c_proj.b, ln_2.w, ln_2.b, c_fc.w [C x 4C],
 * c_fc.b, mlp.c_proj.w [4C x C], mlp.c_proj.b] (Hugging Face's order and GPT-2's Conv1D layout, so
 * export copies each tensor as it is); L+1 = the head [ln_f.w | ln_f.b]. The head is tied to the
 * token embedding: it owns no copy of wte, reads unit 0's (the unit's `reads` mask says so, for
 * ZeRO-3's gathers) and leaves its part of the wte gradient in a family buffer that unit 0's
 * backward adds its scatter to, so unit 0's gradient is whole when `ready` fires for it.
 *
 * Rows are sequences: x holds `context` int32 tokens per row, labels the same window one token
 * later; the loss of a row is the mean cross-entropy over its positions (so the driver's
 * per-row sums and means read as per-token ones), and `correct` counts positions.
 *
 * Shape record: nlayers = L; dims = {RM_GPT_SHAPE_TAG, vocab, context, embed, heads}.
 *
 * Activations, per block and for max_batch rows, each a [rows*T x width] section so a pass over
 * a window of rows reads contiguous memory: ln1 (C), qkv (3C), attention output (C), the residual
 * after attention (C), ln2 (C), the MLP's pre-activation (4C) and GELU output (4C), the block
 * output (C), the LayerNorms' mean and rstd, and the attention's log-sum-exp per head. Backward
 * runs the residual stream's gradient in place through the blocks, so its scratch is three
 * [rows*T x C] buffers and one [rows*T x 4C]. Nothing is allocated after alloc. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "kernels/transformer.h"
#include "worker/data/data.h"
#include "worker/model/gpt.h"
#include "worker/model/model.h"

typedef struct gpt_priv {
    int B, T, C, NH, V, L;
    rm_gpt_blk bo;
    rm_gpt_act ao;
    float *emb; /* unit 0's output [B*T x C] */
    float *blk[RM_GPT_MAX_LAYERS];
    float *lnf, *mf, *rf;             /* head: ln_f output, mean, rstd */
    float *logits;                    /* [B*T x V]: the head's output, then its gradient */
    float *dres, *dln, *datty, *dbig; /* backward scratch */
    float *gemb;  /* placed backward: unit 0's gradient (the head's wte part + the scatter) */
    float *gunit; /* placed backward: a block's or the head's gradient */
    float *attn_scratch;
    float *loss_tmp; /* count_correct's loss (discarded) */
} gpt_priv;

#define TAKE(f, n) \
    do {           \
        o->f = at; \
        at += (n); \
    } while (0)

void rm_gpt_blk_layout(size_t C, size_t part, rm_gpt_blk *o)
{
    size_t at = 0;
    TAKE(ln1w, C);
    TAKE(ln1b, C);
    TAKE(wqkv, C * 3 * part);
    TAKE(bqkv, 3 * part);
    TAKE(wp, part * C);
    TAKE(bp, C);
    TAKE(ln2w, C);
    TAKE(ln2b, C);
    TAKE(wfc, C * 4 * part);
    TAKE(bfc, 4 * part);
    TAKE(wfc2, 4 * part * C);
    TAKE(bfc2, C);
    o->len = at;
}

/* The whole block of width C (gpt.c's own units). */
static void blk_offsets(int C, rm_gpt_blk *o)
{
    rm_gpt_blk_layout((size_t)C, (size_t)C, o);
}

void rm_gpt_act_layout(size_t N, size_t C, size_t part, size_t heads, size_t B, size_t ctx, rm_gpt_act *o)
{
    size_t at = 0;
    TAKE(ln1, N * C);
    TAKE(qkv, N * 3 * part);
    TAKE(atty, N * part);
    TAKE(res1, N * C);
    TAKE(ln2, N * C);
    TAKE(fch, N * 4 * part);
    TAKE(fcg, N * 4 * part);
    TAKE(res2, N * C);
    TAKE(m1, N);
    TAKE(r1, N);
    TAKE(m2, N);
    TAKE(r2, N);
    TAKE(lse, B * heads * ctx);
#undef TAKE
    o->len = at;
}

static int gpt_shape(const rm_training_spec *t, const rm_model_data *d, rm_model_shape *s, rm_err *err)
{
    memset(s, 0, sizeof *s);
    const char *f = "spec.training.model";
    int V = t->vocab ? t->vocab : d->classes;
    if (t->layers < 1 || t->layers > RM_GPT_MAX_LAYERS)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.layers",
                            "must be 1..%d with type gpt (got %d)", RM_GPT_MAX_LAYERS, t->layers);
    if (t->heads < 1 || t->embed < 1 || t->embed % t->heads)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.heads",
                            "must divide %s.embed (%d heads, embed %d)", f, t->heads, t->embed);
    if (t->context < 1)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.context", "must be >= 1 (got %d)",
                            t->context);
    if (V < 2)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.vocab", "must be >= 2 (got %d)", V);
    if (d->classes > V)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.vocab",
                            "%d is smaller than the data's vocabulary (%d tokens)", V, d->classes);
    if (t->dropout > 0)
        return rm_err_field(err, RM_EUNSUPPORTED, "spec.training.model.dropout",
                            "dropout > 0 is not supported yet (set 0)");
    s->nlayers = t->layers;
    s->dims[RM_GPT_SH_TAG] = RM_GPT_SHAPE_TAG;
    s->dims[RM_GPT_SH_VOCAB] = V;
    s->dims[RM_GPT_SH_CONTEXT] = t->context;
    s->dims[RM_GPT_SH_EMBED] = t->embed;
    s->dims[RM_GPT_SH_HEADS] = t->heads;
    return RM_OK;
}

static int gpt_plan(rm_model *m, rm_err *err)
{
    const rm_model_shape *s = &m->shape;
    int L = s->nlayers, V = s->dims[RM_GPT_SH_VOCAB], T = s->dims[RM_GPT_SH_CONTEXT],
        C = s->dims[RM_GPT_SH_EMBED], NH = s->dims[RM_GPT_SH_HEADS];
    if (s->dims[RM_GPT_SH_TAG] != RM_GPT_SHAPE_TAG || L < 1 || L > RM_GPT_MAX_LAYERS || V < 2 || T < 1 ||
        C < 1 || NH < 1 || C % NH)
        return rm_errf(err, RM_EINVAL, "model: not a gpt shape");
    rm_gpt_blk bo;
    blk_offsets(C, &bo);
    uint64_t t = (uint64_t)T, c = (uint64_t)C, v = (uint64_t)V, nh = (uint64_t)NH;
    size_t off = 0;
    m->unit[0] = (rm_model_unit){
        .kind = "embedding",
        .off = 0,
        .len = (size_t)(v * c + t * c),
        .in_width = T,
        .out_width = T * C,
        .act_floats = t * c,
        .flops_fwd = 0,
        .flops_bwd = t * c,
        .flops_bwd_first = t * c,
    };
    off = m->unit[0].len;
    /* 2 FLOPs a multiply-add: 24 T C^2 in the four projections, 4 T^2 C in QK^T and PV (the
     * causal half is skipped in practice; counted whole, as the MFU convention does) */
    uint64_t ffwd = 24 * t * c * c + 4 * t * t * c;
    for (int l = 1; l <= L; l++) {
        m->unit[l] = (rm_model_unit){
            .kind = "block",
            .off = off,
            .len = bo.len,
            .in_width = T * C,
            .out_width = T * C,
            .act_floats = t * (16 * c + 4) + nh * t,
            .flops_fwd = ffwd,
            .flops_bwd = 2 * ffwd,
            .flops_bwd_first = 2 * ffwd,
        };
        off += bo.len;
    }
    m->unit[L + 1] = (rm_model_unit){
        .kind = "head",
        .off = off,
        .len = 2 * (size_t)C,
        .in_width = T * C,
        .out_width = T * V,
        .act_floats = t * (c + 2 + v),
        .flops_fwd = 2 * t * c * v,
        .flops_bwd = 4 * t * c * v,
        .flops_bwd_first = 2 * t * c * v,
        .reads = 1, /* the tied wte of unit 0 */
    };
    off += 2 * (size_t)C;
    m->nunits = L + 2;
    m->nparams = off;
    m->classes = V;
    m->x_row_bytes = (size_t)T * sizeof(int32_t);
    m->label_row = T;
    m->scratch_row = t * 7 * c;
    return RM_OK;
}

static void gpt_release(rm_model *m)
{
    gpt_priv *p = m->priv;
    if (!p)
        return;
    const rm_kernels *k = m->k;
    float *bufs[] = {p->emb,   p->lnf,  p->mf,   p->rf,    p->logits,       p->dres,    p->dln,
                     p->datty, p->dbig, p->gemb, p->gunit, p->attn_scratch, p->loss_tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        k->free(bufs[i]);
    for (int l = 0; l < RM_GPT_MAX_LAYERS; l++)
        k->free(p->blk[l]);
    free(p);
    m->priv = NULL;
}

static int gpt_alloc(rm_model *m, rm_err *err)
{
    const rm_kernels *k = m->k;
    if (!k->tf)
        return rm_err_field(err, RM_EUNSUPPORTED, "spec.training.model.type",
                            "gpt has no kernels on the %s device yet", k->name);
    const rm_model_shape *s = &m->shape;
    int hs = s->dims[RM_GPT_SH_HEADS] > 0 ? s->dims[RM_GPT_SH_EMBED] / s->dims[RM_GPT_SH_HEADS] : 0;
    if (k->tf->max_head_size > 0 && hs > k->tf->max_head_size)
        return rm_err_field(err, RM_EUNSUPPORTED, "spec.training.model.heads",
                            "embed / heads = %d: the %s attention kernels hold heads of at most %d "
                            "(use more heads)",
                            hs, k->name, k->tf->max_head_size);
    gpt_priv *p = calloc(1, sizeof *p);
    if (!p)
        return rm_errf(err, RM_ENOMEM, "model: out of memory");
    m->priv = p;
    p->L = s->nlayers;
    p->V = s->dims[RM_GPT_SH_VOCAB];
    p->T = s->dims[RM_GPT_SH_CONTEXT];
    p->C = s->dims[RM_GPT_SH_EMBED];
    p->NH = s->dims[RM_GPT_SH_HEADS];
    p->B = m->max_batch;
    size_t B = (size_t)p->B, N = B * (size_t)p->T, C = (size_t)p->C, V = (size_t)p->V;
    blk_offsets(p->C, &p->bo);
    rm_gpt_act_layout(N, C, C, (size_t)p->NH, B, (size_t)p->T, &p->ao);
#define F(n) k->alloc((n) * sizeof(float))
    p->emb = F(N * C);
    p->lnf = F(N * C);
    p->mf = F(N);
    p->rf = F(N);
    p->logits = F(N * V);
    p->dres = F(N * C);
    p->dln = F(N * C);
    p->datty = F(N * C);
    p->dbig = F(N * 4 * C);
    p->gemb = F(m->unit[0].len);
    p->gunit = F(p->bo.len > 2 * C ? p->bo.len : 2 * C);
    p->attn_scratch = F(k->tf->attention_scratch(p->T));
    p->loss_tmp = F(1);
    int ok = p->emb && p->lnf && p->mf && p->rf && p->logits && p->dres && p->dln && p->datty && p->dbig &&
             p->gemb && p->gunit && p->attn_scratch && p->loss_tmp;
    for (int l = 0; l < p->L; l++) {
        p->blk[l] = F(p->ao.len);
        ok = ok && p->blk[l];
    }
#undef F
    return ok ? RM_OK : rm_errf(err, RM_ENOMEM, "model: out of memory for the gpt activations");
}

/* GPT-2's initialisation (nanoGPT's): weights N(0, 0.02), the residual projections (attn.c_proj,
 * mlp.c_proj) N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm gains 1. One generator per unit, seeded
 * from (seed, unit), so a range of units gets what the whole model gives it. */
static void fill_normal(rm_rng *r, float *w, size_t n, double std)
{
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(rm_rng_normal(r) * std);
}
static void fill_const(float *w, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        w[i] = v;
}

static void gpt_init_params(const rm_model *m, uint64_t seed, int u0, int u1, float *host)
{
    int L = m->shape.nlayers, C = m->shape.dims[RM_GPT_SH_EMBED];
    rm_gpt_blk bo;
    blk_offsets(C, &bo);
    size_t base = m->unit[u0].off, c = (size_t)C;
    double std = 0.02, pstd = 0.02 / sqrt(2.0 * L);
    for (int u = u0; u < u1; u++) {
        rm_rng r;
        rm_rng_seed(&r, seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(u + 1)));
        float *w = host + (m->unit[u].off - base);
        if (u == 0) {
            fill_normal(&r, w, m->unit[0].len, std);
        } else if (u <= L) {
            memset(w, 0, bo.len * sizeof(float));
            fill_const(w + bo.ln1w, c, 1.0f);
            fill_normal(&r, w + bo.wqkv, c * 3 * c, std);
            fill_normal(&r, w + bo.wp, c * c, pstd);
            fill_const(w + bo.ln2w, c, 1.0f);
            fill_normal(&r, w + bo.wfc, c * 4 * c, std);
            fill_normal(&r, w + bo.wfc2, 4 * c * c, pstd);
        } else {
            fill_const(w, c, 1.0f);
            memset(w + c, 0, c * sizeof(float));
        }
    }
}

static const float *unit_params(const rm_model *m, int u)
{
    return m->uparams[u] ? m->uparams[u] : m->params + m->unit[u].off;
}

static float *blk_act(const gpt_priv *p, int l, size_t sec)
{
    return p->blk[l - 1] + sec;
}

static float *gpt_output(const rm_model *m, int unit, int off)
{
    const gpt_priv *p = m->priv;
    size_t r = (size_t)off * (size_t)p->T;
    if (unit == 0)
        return p->emb + r * (size_t)p->C;
    if (unit <= p->L)
        return blk_act(p, unit, p->ao.res2) + r * (size_t)p->C;
    return p->logits + r * (size_t)p->V;
}

static const float *unit_input(const rm_model *m, const rm_model_pass *ps, int u)
{
    if (u == ps->u0 && ps->in)
        return ps->in;
    return gpt_output(m, u - 1, ps->off);
}

static void block_fwd(rm_model *m, int l, const float *x, int off, int rows)
{
    const rm_kernels *k = m->k;
    const rm_tf_kernels *tf = k->tf;
    gpt_priv *p = m->priv;
    const rm_gpt_blk *o = &p->bo;
    const rm_gpt_act *a = &p->ao;
    int T = p->T, C = p->C, C3 = 3 * C, C4 = 4 * C, N = rows * T;
    size_t r0 = (size_t)off * (size_t)T, c = (size_t)C;
    const float *w = unit_params(m, l);
    float *ln1 = blk_act(p, l, a->ln1) + r0 * c, *qkv = blk_act(p, l, a->qkv) + r0 * 3 * c;
    float *atty = blk_act(p, l, a->atty) + r0 * c, *res1 = blk_act(p, l, a->res1) + r0 * c;
    float *ln2 = blk_act(p, l, a->ln2) + r0 * c, *fch = blk_act(p, l, a->fch) + r0 * 4 * c;
    float *fcg = blk_act(p, l, a->fcg) + r0 * 4 * c, *res2 = blk_act(p, l, a->res2) + r0 * c;
    float *m1 = blk_act(p, l, a->m1) + r0, *r1 = blk_act(p, l, a->r1) + r0;
    float *m2 = blk_act(p, l, a->m2) + r0, *r2 = blk_act(p, l, a->r2) + r0;
    float *lse = blk_act(p, l, a->lse) + (size_t)off * (size_t)p->NH * (size_t)T;

    tf->layernorm_fwd(ln1, m1, r1, x, w + o->ln1w, w + o->ln1b, N, C);
    k->gemm(false, false, N, C3, C, 1.0f, ln1, C, w + o->wqkv, C3, 0.0f, qkv, C3);
    k->bias_act_fwd(qkv, w + o->bqkv, N, C3, RM_ACT_NONE);
    tf->attention_fwd(atty, lse, qkv, rows, T, C, p->NH, p->attn_scratch);
    k->gemm(false, false, N, C, C, 1.0f, atty, C, w + o->wp, C, 0.0f, res1, C);
    tf->residual_layernorm_fwd(res1, x, w + o->bp, ln2, m2, r2, w + o->ln2w, w + o->ln2b, N, C);
    k->gemm(false, false, N, C4, C, 1.0f, ln2, C, w + o->wfc, C4, 0.0f, fch, C4);
    tf->bias_gelu_fwd(fch, fcg, w + o->bfc, N, C4);
    k->gemm(false, false, N, C, C4, 1.0f, fcg, C4, w + o->wfc2, C, 0.0f, res2, C);
    tf->residual_layernorm_fwd(res2, res1, w + o->bfc2, NULL, NULL, NULL, NULL, NULL, N, C);
}

static void gpt_forward(rm_model *m, const rm_model_pass *ps)
{
    const rm_kernels *k = m->k;
    gpt_priv *p = m->priv;
    int T = p->T, C = p->C, N = ps->rows * T;
    size_t r0 = (size_t)ps->off * (size_t)T;
    for (int u = ps->u0; u < ps->u1; u++) {
        if (ps->pre)
            ps->pre(ps->ud, u);
        if (u == 0) {
            const float *w = unit_params(m, 0);
            k->tf->embed_fwd(p->emb + r0 * (size_t)C, (const int32_t *)rm_model_input(m, ps->off), w,
                             w + (size_t)p->V * (size_t)C, ps->rows, T, C);
        } else if (u <= p->L) {
            block_fwd(m, u, unit_input(m, ps, u), ps->off, ps->rows);
        } else {
            const float *w = unit_params(m, u), *wte = unit_params(m, 0);
            float *lnf = p->lnf + r0 * (size_t)C;
            k->tf->layernorm_fwd(lnf, p->mf + r0, p->rf + r0, unit_input(m, ps, u), w, w + C, N, C);
            k->gemm(false, true, N, p->V, C, 1.0f, lnf, C, wte, C, 0.0f, p->logits + r0 * (size_t)p->V, p->V);
        }
    }
}

static void gpt_loss(rm_model *m, int off, int rows, float inv_batch, float *loss_sum)
{
    gpt_priv *p = m->priv;
    size_t r0 = (size_t)off * (size_t)p->T;
    float inv_t = 1.0f / (float)p->T;
    m->k->tf->xent(p->logits + r0 * (size_t)p->V, m->labels + r0, rows * p->T, p->V, inv_batch * inv_t, inv_t,
                   loss_sum, NULL);
}

static void gpt_count_correct(rm_model *m, int rows, int32_t *correct)
{
    gpt_priv *p = m->priv;
    m->k->tf->xent(p->logits, m->labels, rows * p->T, p->V, 0.0f, 0.0f, p->loss_tmp, correct);
}

/* Where a unit's gradient goes: the gradient buffer (overwritten or accumulated), or, placed, the
 * family's buffer that the caller reads through grad_range. */
static float *grad_dst(rm_model *m, const rm_model_pass *ps, int u, bool *acc)
{
    gpt_priv *p = m->priv;
    *acc = ps->accumulate && !ps->place;
    if (ps->place)
        return u == 0 ? p->gemb : p->gunit;
    return m->grads + m->unit[u].off;
}

/* The gradient of unit u is final: place it (placed backward) and tell the caller. */
static void unit_done(rm_model *m, const rm_model_pass *ps, int u, int rows, const float *g)
{
    if (ps->place) {
        rm_unit_grad ug = {.unit = u, .rows = rows, .fam = g};
        ps->place(ps->ud, &ug);
    }
    if (ps->ready)
        ps->ready(ps->ud, u);
}

/* Block l backward; dres [N x C] holds the gradient of its output and becomes that of its input. */
static void block_bwd(rm_model *m, const rm_model_pass *ps, int l, const float *x, float *dres)
{
    const rm_kernels *k = m->k;
    const rm_tf_kernels *tf = k->tf;
    gpt_priv *p = m->priv;
    const rm_gpt_blk *o = &p->bo;
    const rm_gpt_act *a = &p->ao;
    int T = p->T, C = p->C, C3 = 3 * C, C4 = 4 * C, N = ps->rows * T;
    size_t r0 = (size_t)ps->off * (size_t)T, c = (size_t)C;
    bool acc;
    float *g = grad_dst(m, ps, l, &acc);
    float beta = acc ? 1.0f : 0.0f;
    const float *w = unit_params(m, l);
    const float *ln1 = blk_act(p, l, a->ln1) + r0 * c, *qkv = blk_act(p, l, a->qkv) + r0 * 3 * c;
    const float *atty = blk_act(p, l, a->atty) + r0 * c, *res1 = blk_act(p, l, a->res1) + r0 * c;
    const float *ln2 = blk_act(p, l, a->ln2) + r0 * c, *fch = blk_act(p, l, a->fch) + r0 * 4 * c;
    const float *fcg = blk_act(p, l, a->fcg) + r0 * 4 * c;
    const float *m1 = blk_act(p, l, a->m1) + r0, *r1 = blk_act(p, l, a->r1) + r0;
    const float *m2 = blk_act(p, l, a->m2) + r0, *r2 = blk_act(p, l, a->r2) + r0;
    const float *lse = blk_act(p, l, a->lse) + (size_t)ps->off * (size_t)p->NH * (size_t)T;

    /* the MLP: mlp.c_proj, GELU, c_fc, ln_2 */
    k->gemm(false, true, N, C4, C, 1.0f, dres, C, w + o->wfc2, C, 0.0f, p->dbig, C4);
    k->gemm(true, false, C4, C, N, 1.0f, fcg, C4, dres, C, beta, g + o->wfc2, C);
    tf->colsum(g + o->bfc2, dres, N, C, acc);
    tf->gelu_bwd(p->dbig, p->dbig, fch, N, C4);
    k->gemm(true, false, C, C4, N, 1.0f, ln2, C, p->dbig, C4, beta, g + o->wfc, C4);
    tf->colsum(g + o->bfc, p->dbig, N, C4, acc);
    k->gemm(false, true, N, C, C4, 1.0f, p->dbig, C4, w + o->wfc, C4, 0.0f, p->dln, C);
    tf->layernorm_bwd(dres, g + o->ln2w, g + o->ln2b, p->dln, res1, m2, r2, w + o->ln2w, N, C, acc);
    /* attention: c_proj, the heads, c_attn, ln_1 */
    k->gemm(false, true, N, C, C, 1.0f, dres, C, w + o->wp, C, 0.0f, p->datty, C);
    k->gemm(true, false, C, C, N, 1.0f, atty, C, dres, C, beta, g + o->wp, C);
    tf->colsum(g + o->bp, dres, N, C, acc);
    tf->attention_bwd(p->dbig, p->datty, atty, lse, qkv, ps->rows, T, C, p->NH, p->attn_scratch);
    k->gemm(true, false, C, C3, N, 1.0f, ln1, C, p->dbig, C3, beta, g + o->wqkv, C3);
    tf->colsum(g + o->bqkv, p->dbig, N, C3, acc);
    k->gemm(false, true, N, C, C3, 1.0f, p->dbig, C3, w + o->wqkv, C3, 0.0f, p->dln, C);
    tf->layernorm_bwd(dres, g + o->ln1w, g + o->ln1b, p->dln, x, m1, r1, w + o->ln1w, N, C, acc);
    unit_done(m, ps, l, ps->rows, g);
}

static void gpt_backward(rm_model *m, const rm_model_pass *ps)
{
    const rm_kernels *k = m->k;
    gpt_priv *p = m->priv;
    int T = p->T, C = p->C, V = p->V, N = ps->rows * T;
    size_t r0 = (size_t)ps->off * (size_t)T, nc = (size_t)N * (size_t)C;
    size_t wte_len = (size_t)V * (size_t)C;
    bool head_in_pass = ps->u1 == m->nunits;
    float *dres = p->dres;
    for (int u = ps->u1 - 1; u >= ps->u0; u--) {
        if (ps->pre)
            ps->pre(ps->ud, u);
        if (u == m->nunits - 1) { /* the head: ln_f and the tied projection */
            const float *w = unit_params(m, u), *wte = unit_params(m, 0);
            const float *dlog = ps->dy, *lnf = p->lnf + r0 * (size_t)C;
            bool acc;
            float *g = grad_dst(m, ps, u, &acc), *gwte = grad_dst(m, ps, 0, &acc);
            k->gemm(false, false, N, C, V, 1.0f, dlog, V, wte, C, 0.0f, p->dln, C);
            k->gemm(true, false, V, C, N, 1.0f, dlog, V, lnf, C, acc ? 1.0f : 0.0f, gwte, C);
            k->memset0(dres, nc * sizeof(float));
            k->tf->layernorm_bwd(dres, g, g + C, p->dln, unit_input(m, ps, u), p->mf + r0, p->rf + r0, w, N,
                                 C, acc);
            unit_done(m, ps, u, ps->rows, g);
        } else if (u >= 1) {
            if (u == ps->u1 - 1) /* the stage's last unit is a block: its output gradient is given */
                k->d2d(dres, ps->dy, nc * sizeof(float));
            block_bwd(m, ps, u, unit_input(m, ps, u), dres);
        } else { /* the embedding: the head's wte part (written above when it ran in this pass) + the
                  * scatter of the residual stream's gradient */
            bool acc;
            float *g = grad_dst(m, ps, 0, &acc);
            if (ps->u1 == 1) /* the embedding alone (a pipeline stage): its output gradient is given */
                k->d2d(dres, ps->dy, nc * sizeof(float));
            if (!head_in_pass && !acc)
                k->memset0(g, wte_len * sizeof(float));
            if (!acc)
                k->memset0(g + wte_len, (size_t)T * (size_t)C * sizeof(float));
            k->tf->embed_bwd(g, g + wte_len, dres, (const int32_t *)rm_model_input(m, ps->off), ps->rows, T,
                             C);
            unit_done(m, ps, 0, ps->rows, g);
        }
    }
    if (ps->dx && ps->u0 > 0)
        k->d2d(ps->dx, dres, nc * sizeof(float));
}

static void gpt_grad_range(const rm_model *m, const rm_unit_grad *g, size_t from, size_t to, float *dst)
{
    m->k->d2d(dst, (const float *)g->fam + from, (to - from) * sizeof(float));
}

static void gpt_describe(const rm_model_shape *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "gpt-L%d-H%d-C%d-T%d-V%d", s->nlayers, s->dims[RM_GPT_SH_HEADS],
             s->dims[RM_GPT_SH_EMBED], s->dims[RM_GPT_SH_CONTEXT], s->dims[RM_GPT_SH_VOCAB]);
}

/* Hugging Face GPT2LMHeadModel names; every weight is already in GPT-2's Conv1D [in x out] layout. */
static int gpt_tensors(const rm_model *m, int u, rm_model_tensor *out, int cap)
{
    int L = m->shape.nlayers, V = m->shape.dims[RM_GPT_SH_VOCAB], T = m->shape.dims[RM_GPT_SH_CONTEXT],
        C = m->shape.dims[RM_GPT_SH_EMBED];
    size_t base = m->unit[u].off;
    int n = 0;
#define T_ADD(off_, nd, d0, d1, ...)                                                                        \
    do {                                                                                                    \
        if (n < cap) {                                                                                      \
            out[n] =                                                                                        \
                (rm_model_tensor){.off = base + (off_), .ndim = (nd), .shape = {(d0), (d1)}, .layout = ""}; \
            snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__);                                         \
        }                                                                                                   \
        n++;                                                                                                \
    } while (0)
    if (u == 0) {
        T_ADD(0, 2, V, C, "transformer.wte.weight");
        T_ADD((size_t)V * (size_t)C, 2, T, C, "transformer.wpe.weight");
    } else if (u <= L) {
        rm_gpt_blk o;
        blk_offsets(C, &o);
        int i = u - 1;
        T_ADD(o.ln1w, 1, C, 0, "transformer.h.%d.ln_1.weight", i);
        T_ADD(o.ln1b, 1, C, 0, "transformer.h.%d.ln_1.bias", i);
        T_ADD(o.wqkv, 2, C, 3 * C, "transformer.h.%d.attn.c_attn.weight", i);
        T_ADD(o.bqkv, 1, 3 * C, 0, "transformer.h.%d.attn.c_attn.bias", i);
        T_ADD(o.wp, 2, C, C, "transformer.h.%d.attn.c_proj.weight", i);
        T_ADD(o.bp, 1, C, 0, "transformer.h.%d.attn.c_proj.bias", i);
        T_ADD(o.ln2w, 1, C, 0, "transformer.h.%d.ln_2.weight", i);
        T_ADD(o.ln2b, 1, C, 0, "transformer.h.%d.ln_2.bias", i);
        T_ADD(o.wfc, 2, C, 4 * C, "transformer.h.%d.mlp.c_fc.weight", i);
        T_ADD(o.bfc, 1, 4 * C, 0, "transformer.h.%d.mlp.c_fc.bias", i);
        T_ADD(o.wfc2, 2, 4 * C, C, "transformer.h.%d.mlp.c_proj.weight", i);
        T_ADD(o.bfc2, 1, C, 0, "transformer.h.%d.mlp.c_proj.bias", i);
    } else {
        T_ADD(0, 1, C, 0, "transformer.ln_f.weight");
        T_ADD((size_t)C, 1, C, 0, "transformer.ln_f.bias");
    }
#undef T_ADD
    return n;
}

/* GPT-2's config.json keys (docs/models-and-data.md, "Exported models"). */
static int gpt_config_json(const rm_model *m, char *buf, size_t cap)
{
    const rm_model_shape *s = &m->shape;
    int n = snprintf(buf, cap,
                     "{\n  \"model_type\": \"gpt2\",\n  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                     "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_embd\": %d,\n  \"n_positions\": %d,\n"
                     "  \"n_ctx\": %d,\n  \"vocab_size\": %d,\n  \"activation_function\": \"gelu_new\",\n"
                     "  \"layer_norm_epsilon\": 1e-05,\n  \"tie_word_embeddings\": true,\n"
                     "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                     "  \"torch_dtype\": \"float32\"\n}\n",
                     s->nlayers, s->dims[RM_GPT_SH_HEADS], s->dims[RM_GPT_SH_EMBED],
                     s->dims[RM_GPT_SH_CONTEXT], s->dims[RM_GPT_SH_CONTEXT], s->dims[RM_GPT_SH_VOCAB]);
    return n > 0 && (size_t)n < cap ? RM_OK : RM_EINVAL;
}

static int cfg_int(const cJSON *j, const char *key, int lo, int hi, int *out, rm_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble || v->valuedouble < lo ||
        v->valuedouble > hi)
        return rm_err_field(err, RM_EINVAL, key, "config.json: must be an integer %d..%d", lo, hi);
    *out = (int)v->valuedouble;
    return RM_OK;
}

static int gpt_shape_from_config(const char *json, rm_model_shape *s, rm_err *err)
{
    memset(s, 0, sizeof *s);
    cJSON *j = cJSON_Parse(json);
    if (!j)
        return rm_errf(err, RM_EINVAL, "config.json: not JSON");
    int L = 0, NH = 0, C = 0, T = 0, V = 0, rc;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    if ((rc = cfg_int(j, "n_layer", 1, RM_GPT_MAX_LAYERS, &L, err)) ||
        (rc = cfg_int(j, "n_head", 1, 1024, &NH, err)) || (rc = cfg_int(j, "n_embd", 1, 65536, &C, err)) ||
        (rc = cfg_int(j, "n_positions", 1, 1 << 20, &T, err)) ||
        (rc = cfg_int(j, "vocab_size", 2, 1 << 24, &V, err))) {
        cJSON_Delete(j);
        return rc;
    }
    if (C % NH)
        rc = rm_err_field(err, RM_EINVAL, "n_head", "config.json: %d heads do not divide n_embd %d", NH, C);
    else if (cJSON_IsString(act) && strcmp(act->valuestring, "gelu_new") != 0)
        rc = rm_err_field(err, RM_EINVAL, "activation_function",
                          "config.json: \"%s\" (ringmaster's gpt is GPT-2's gelu_new)", act->valuestring);
    cJSON_Delete(j);
    if (rc)
        return rc;
    s->nlayers = L;
    s->dims[RM_GPT_SH_TAG] = RM_GPT_SHAPE_TAG;
    s->dims[RM_GPT_SH_VOCAB] = V;
    s->dims[RM_GPT_SH_CONTEXT] = T;
    s->dims[RM_GPT_SH_EMBED] = C;
    s->dims[RM_GPT_SH_HEADS] = NH;
    return RM_OK;
}

const rm_model_family rm_model_gpt = {
    .name = "gpt",
    .shape = gpt_shape,
    .plan = gpt_plan,
    .alloc = gpt_alloc,
    .release = gpt_release,
    .init_params = gpt_init_params,
    .forward = gpt_forward,
    .loss = gpt_loss,
    .backward = gpt_backward,
    .grad_range = gpt_grad_range,
    .count_correct = gpt_count_correct,
    .output = gpt_output,
    .describe = gpt_describe,
    .tensors = gpt_tensors,
    .config_json = gpt_config_json,
    .shape_from_config = gpt_shape_from_config,
};
