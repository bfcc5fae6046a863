/* tp_gpt.c — the transformer split across a tensor group (worker/tensor/tp_gpt.h). */
#include "worker/tensor/tp_gpt.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/transformer.h"
#include "worker/model/gpt.h"
#include "worker/pipeline/pipeline_core.h"

int rm_tp_gpt_plan_make(const rm_model_shape *s, int T, int t, rm_tp_gpt_plan *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    int L = s->nlayers, V = s->dims[RM_GPT_SH_VOCAB], ctx = s->dims[RM_GPT_SH_CONTEXT],
        C = s->dims[RM_GPT_SH_EMBED], NH = s->dims[RM_GPT_SH_HEADS];
    if (s->dims[RM_GPT_SH_TAG] != RM_GPT_SHAPE_TAG || L < 1 || L > RM_GPT_MAX_LAYERS || V < 2 || ctx < 1 ||
        C < 1 || NH < 1 || C % NH || T < 1 || t < 0 || t >= T)
        return rm_errf(err, RM_EINVAL, "tensor: bad gpt plan (rank %d of %d)", t, T);
    if (NH % T)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.heads",
                            "must be a multiple of spec.parallelism.tensorParallel (%d) (got %d)", T, NH);
    *out = (rm_tp_gpt_plan){.T = T, .t = t, .L = L, .V = V, .ctx = ctx, .C = C, .NH = NH};
    out->Vp = (V + T - 1) / T * T;
    out->Vl = out->Vp / T;
    out->Cl = C / T;
    out->NHl = NH / T;
    rm_gpt_blk o;
    rm_gpt_blk_layout((size_t)C, (size_t)out->Cl, &o);
    size_t c = (size_t)C;
    out->blk_len = o.len;
    rm_gpt_blk w;
    rm_gpt_blk_layout(c, c, &w);
    out->nwhole = (size_t)V * c + (size_t)ctx * c + (size_t)L * w.len + 2 * c;
    out->P = 1;
    out->b1 = L;
    out->has_wte = out->has_wpe = out->has_head = true;
    out->o_wpe = (size_t)out->Vl * c;
    out->o_blk = out->o_wpe + (size_t)ctx * c;
    out->o_head = out->o_blk + (size_t)L * o.len;
    out->n = out->o_head + 2 * c;
    return RM_OK;
}

int rm_tp_gpt_stages(const rm_model_shape *s, int P, int *bounds, rm_err *err)
{
    int L = s->nlayers;
    if (P < 1 || P > L || P > RM_PIPE_MAX_STAGES)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.pipelineStages",
                            "must be <= the model's %d layers with tensorParallel > 1 (got %d)", L, P);
    uint64_t cost[RM_GPT_MAX_LAYERS];
    for (int l = 0; l < L; l++)
        cost[l] = 1; /* the blocks are alike */
    return rm_pipe_partition(cost, L, P, bounds, err);
}

int rm_tp_gpt_plan_stage(const rm_model_shape *s, int T, int t, int P, int p, rm_tp_gpt_plan *out,
                         rm_err *err)
{
    RM_CHECK(rm_tp_gpt_plan_make(s, T, t, out, err));
    if (P <= 1)
        return RM_OK;
    int b[RM_PIPE_MAX_STAGES + 1];
    RM_CHECK(rm_tp_gpt_stages(s, P, b, err));
    if (p < 0 || p >= P)
        return rm_errf(err, RM_EINVAL, "tensor: stage %d of %d", p, P);
    size_t c = (size_t)out->C;
    out->P = P;
    out->p = p;
    out->b0 = b[p];
    out->b1 = b[p + 1];
    out->has_wpe = p == 0;
    out->has_head = p == P - 1;
    out->has_wte = out->has_wpe || out->has_head;
    out->wte_copy = p == P - 1; /* P > 1: stage 0 owns it */
    size_t at = 0;
    out->o_wte = at;
    at += out->has_wte ? (size_t)out->Vl * c : 0;
    out->o_wpe = at;
    at += out->has_wpe ? (size_t)out->ctx * c : 0;
    out->o_blk = at;
    at += (size_t)(out->b1 - out->b0) * out->blk_len;
    out->o_head = at;
    at += out->has_head ? 2 * c : 0;
    out->n = at;
    return RM_OK;
}

int rm_tp_gpt_events(const rm_tp_gpt_plan *p, rm_tp_gpt_event *ev, int cap)
{
    int n = 0;
#define EV(pass_, unit_, what_, width_)                                     \
    do {                                                                    \
        if (n < cap)                                                        \
            ev[n] = (rm_tp_gpt_event){(pass_), (what_), (unit_), (width_)}; \
        n++;                                                                \
    } while (0)
    if (p->T < 2)
        return 0;
    if (p->has_wpe)
        EV('F', 0, 'e', p->C);
    for (int l = p->b0 + 1; l <= p->b1; l++) {
        EV('F', l, 'a', p->C);
        EV('F', l, 'm', p->C);
    }
    if (p->has_head) {
        EV('F', p->L + 1, 'x', p->T);
        EV('F', p->L + 1, 's', 2);
        EV('B', p->L + 1, 'h', p->C);
    }
    for (int l = p->b1; l >= p->b0 + 1; l--) {
        EV('B', l, 'm', p->C);
        EV('B', l, 'a', p->C);
    }
#undef EV
    return n;
}

/* The pieces through the map (tp_split.h rm_tp_map_block), tensor by tensor in gpt.c's order: what
 * this stage holds (all of it with P = 1). */
static void map_all(const rm_tp_gpt_plan *p, rm_tp_map *m)
{
    size_t c = (size_t)p->C, cl = (size_t)p->Cl, ctx = (size_t)p->ctx, t = (size_t)p->t;
    size_t v0 = t * (size_t)p->Vl, V = (size_t)p->V, Vl = (size_t)p->Vl;
    if (p->has_wte) { /* wte: this rank's vocabulary rows (one block); the padding rows past V are zero */
        size_t real = v0 >= V ? 0 : V - v0 < Vl ? V - v0 : Vl;
        rm_tp_map_block(m, v0 * c, 0, p->o_wte, 0, 1, real * c,
                        p->wte_copy ? RM_TP_BLK_COPY : RM_TP_BLK_SPLIT);
        if (m->to_local && !m->record)
            memset(m->local + p->o_wte + real * c, 0, (Vl - real) * c * sizeof(float));
    }
    size_t wbase = V * c;
    if (p->has_wpe)
        rm_tp_map_block(m, wbase, 0, p->o_wpe, 0, 1, ctx * c, RM_TP_BLK_REP);
    wbase += ctx * c;
    rm_gpt_blk o, wo; /* this rank's block and gpt.c's whole one */
    rm_gpt_blk_layout(c, cl, &o);
    rm_gpt_blk_layout(c, c, &wo);
    wbase += (size_t)p->b0 * wo.len;
    size_t lbase = p->o_blk;
    for (int l = p->b0; l < p->b1; l++) {
        size_t w = wbase, lo = lbase;
        rm_tp_map_block(m, w + wo.ln1w, 0, lo + o.ln1w, 0, 1, 2 * c, RM_TP_BLK_REP);
        for (size_t j = 0; j < 3; j++) { /* this rank's heads' Q, K and V columns */
            rm_tp_map_block(m, w + wo.wqkv + j * c + t * cl, 3 * c, lo + o.wqkv + j * cl, 3 * cl, c, cl,
                            RM_TP_BLK_SPLIT);
            rm_tp_map_block(m, w + wo.bqkv + j * c + t * cl, 0, lo + o.bqkv + j * cl, 0, 1, cl,
                            RM_TP_BLK_SPLIT);
        }
        rm_tp_map_block(m, w + wo.wp + t * cl * c, 0, lo + o.wp, 0, 1, cl * c, RM_TP_BLK_SPLIT);
        rm_tp_map_block(m, w + wo.bp, 0, lo + o.bp, 0, 1, 3 * c, RM_TP_BLK_REP); /* attn.c_proj.b, ln_2 */
        rm_tp_map_block(m, w + wo.wfc + t * 4 * cl, 4 * c, lo + o.wfc, 4 * cl, c, 4 * cl, RM_TP_BLK_SPLIT);
        rm_tp_map_block(m, w + wo.bfc + t * 4 * cl, 0, lo + o.bfc, 0, 1, 4 * cl, RM_TP_BLK_SPLIT);
        rm_tp_map_block(m, w + wo.wfc2 + t * 4 * cl * c, 0, lo + o.wfc2, 0, 1, 4 * cl * c, RM_TP_BLK_SPLIT);
        rm_tp_map_block(m, w + wo.bfc2, 0, lo + o.bfc2, 0, 1, c, RM_TP_BLK_REP);
        wbase += wo.len;
        lbase += o.len;
    }
    if (p->has_head)
        rm_tp_map_block(m, V * c + ctx * c + (size_t)p->L * wo.len, 0, p->o_head, 0, 1, 2 * c,
                        RM_TP_BLK_REP); /* ln_f */
}

void rm_tp_gpt_slice(const rm_tp_gpt_plan *p, const float *whole, float *local)
{
    rm_tp_map m = {.whole = (float *)whole, .local = local, .to_local = true, .with_rep = true};
    map_all(p, &m);
}

void rm_tp_gpt_assemble(const rm_tp_gpt_plan *p, const float *local, float *whole, bool with_replicated)
{
    rm_tp_map m = {.whole = whole, .local = (float *)local, .with_rep = with_replicated};
    map_all(p, &m);
}

int rm_tp_gpt_runs(const rm_tp_gpt_plan *p, int32_t shard, rm_ckpt_run *run, int cap)
{
    rm_tp_map m = {.record = true, .with_rep = p->t == 0, .run = run, .cap = cap, .shard = shard};
    map_all(p, &m);
    return m.n;
}

bool rm_tp_gpt_replicated(const rm_tp_gpt_plan *p, size_t i)
{
    size_t c = (size_t)p->C;
    if (p->has_wte && i >= p->o_wte && i < p->o_wte + (size_t)p->Vl * c)
        return false;
    if (i < p->o_blk)
        return true; /* wpe */
    if (i >= p->o_head)
        return true; /* ln_f */
    size_t j = (i - p->o_blk) % p->blk_len;
    rm_gpt_blk o;
    rm_gpt_blk_layout(c, (size_t)p->Cl, &o);
    return j < o.wqkv || (j >= o.bp && j < o.wfc) || j >= o.bfc2;
}

void rm_tp_gpt_free(rm_tp_gpt *m)
{
    if (!m || !m->k)
        return;
    const rm_kernels *k = m->k;
    float *bufs[] = {m->params, m->grads, m->emb,  m->lnf,   m->mf, m->rf,   m->logits,      m->dres,
                     m->dln,    m->datty, m->dbig, m->stats, m->s2, m->rowl, m->attn_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        k->free(bufs[i]);
    rm_kernels_host_free(k, m->hrowl);
    for (int l = 0; l < RM_GPT_MAX_LAYERS; l++)
        k->free(m->blk[l]);
    memset(m, 0, sizeof *m);
}

int rm_tp_gpt_init(rm_tp_gpt *m, const rm_kernels *k, const rm_tp_gpt_plan *p, int max_batch,
                   rm_tp_allreduce_fn ar, void *ud, rm_err *err)
{
    memset(m, 0, sizeof *m);
    if (!k->tf || !k->tf->embed_vocab_fwd || !k->tf->xent_vocab_grad)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.tensorParallel",
                            "> 1 needs the vocabulary-parallel kernels, which the %s table lacks", k->name);
    m->k = k;
    m->p = *p;
    m->max_batch = max_batch;
    m->ar = ar;
    m->ud = ud;
    size_t N = (size_t)max_batch * (size_t)p->ctx, c = (size_t)p->C, cl = (size_t)p->Cl;
    rm_gpt_act_layout(N, c, cl, (size_t)p->NHl, (size_t)max_batch, (size_t)p->ctx, &m->a);
    size_t st = (size_t)(p->T > 2 ? p->T : 2);
#define F(n) k->alloc((n) * sizeof(float))
    m->params = F(p->n);
    m->grads = F(p->n);
    m->emb = F(N * c);
    m->lnf = F(N * c);
    m->mf = F(N);
    m->rf = F(N);
    m->logits = F(N * (size_t)p->Vl);
    m->dres = F(N * c);
    m->dln = F(N * c);
    m->datty = F(N * cl);
    m->dbig = F(N * 4 * cl);
    m->stats = F(N * st);
    m->s2 = F(N * 2);
    m->rowl = F(N);
    m->hrowl = rm_kernels_host_alloc(k, N * sizeof(float));
    m->attn_scratch = F(k->tf->attention_scratch(p->ctx));
    bool ok = m->params && m->grads && m->emb && m->lnf && m->mf && m->rf && m->logits && m->dres && m->dln &&
              m->datty && m->dbig && m->stats && m->s2 && m->rowl && m->hrowl && m->attn_scratch;
    for (int l = p->b0; l < p->b1; l++) { /* this stage's blocks */
        m->blk[l] = F(m->a.len);
        ok = ok && m->blk[l];
    }
#undef F
    if (!ok) {
        rm_tp_gpt_free(m);
        return rm_errf(err, RM_ENOMEM, "tensor: out of memory for the split gpt (%zu floats)", p->n);
    }
    return RM_OK;
}

/* f's sum of an input gradient, started here and finished by f_wait: the weight gradient's GEMM
 * between them overlaps it when the strategy runs it on a thread (tp_split.h rm_tp_async) */
static int f_start(rm_tp_gpt *m, float *buf, size_t n, rm_err *err)
{
    return m->p.T < 2 ? RM_OK : rm_tp_f_start(&m->async, m->ar, m->ud, buf, n, err);
}

static int f_wait(rm_tp_gpt *m, size_t n, rm_err *err)
{
    if (m->p.T < 2)
        return RM_OK;
    RM_CHECK(rm_tp_f_wait(&m->async, m->ud, err));
    m->bwd_floats += n;
    return RM_OK;
}

/* a forward sum (g, the embedding's, the cross-entropy's) */
static int sum(rm_tp_gpt *m, float *buf, size_t n, rm_err *err)
{
    if (m->p.T < 2)
        return RM_OK;
    RM_CHECK(m->ar(m->ud, buf, n, err));
    m->fwd_floats += n;
    return RM_OK;
}

/* block l's parameters (1-based: l in (b0, b1]) */
static float *blk_param(const rm_tp_gpt *m, int l)
{
    const rm_tp_gpt_plan *p = &m->p;
    return m->params + p->o_blk + (size_t)(l - 1 - p->b0) * p->blk_len;
}

static float *head_param(float *base, const rm_tp_gpt_plan *p)
{
    return base + p->o_head;
}

int rm_tp_gpt_stage_forward(rm_tp_gpt *m, const void *in, int rows, rm_err *err)
{
    const rm_kernels *k = m->k;
    const rm_tf_kernels *tf = k->tf;
    const rm_tp_gpt_plan *p = &m->p;
    int ctx = p->ctx, C = p->C, Cl = p->Cl, N = rows * ctx;
    size_t c = (size_t)C, v0 = (size_t)p->t * (size_t)p->Vl;
    const float *wte = m->params + p->o_wte;
    const float *x = in;
    if (p->has_wpe) { /* the embedding: this rank's vocabulary rows (wpe from t = 0 only: added once), g */
        const float *wpe = m->params + p->o_wpe;
        tf->embed_vocab_fwd(m->emb, in, wte, (int)v0, p->Vl, p->t == 0 ? wpe : NULL, rows, ctx, C);
        RM_CHECK(sum(m, m->emb, (size_t)N * c, err));
        x = m->emb;
    }
    m->xin = x;
    rm_gpt_blk o;
    rm_gpt_blk_layout(c, (size_t)Cl, &o);
    for (int l = p->b0 + 1; l <= p->b1; l++) {
        const float *w = blk_param(m, l);
        float *a = m->blk[l - 1];
        float *ln1 = a + m->a.ln1, *qkv = a + m->a.qkv, *atty = a + m->a.atty, *res1 = a + m->a.res1;
        float *ln2 = a + m->a.ln2, *fch = a + m->a.fch, *fcg = a + m->a.fcg, *res2 = a + m->a.res2;
        tf->layernorm_fwd(ln1, a + m->a.m1, a + m->a.r1, x, w + o.ln1w, w + o.ln1b, N, C);
        k->gemm(false, false, N, 3 * Cl, C, 1.0f, ln1, C, w + o.wqkv, 3 * Cl, 0.0f, qkv, 3 * Cl);
        k->bias_act_fwd(qkv, w + o.bqkv, N, 3 * Cl, RM_ACT_NONE);
        tf->attention_fwd(atty, a + m->a.lse, qkv, rows, ctx, Cl, p->NHl, m->attn_scratch);
        k->gemm(false, false, N, C, Cl, 1.0f, atty, Cl, w + o.wp, C, 0.0f, res1, C);
        RM_CHECK(sum(m, res1, (size_t)N * c, err)); /* g after attn.c_proj */
        tf->residual_layernorm_fwd(res1, x, w + o.bp, ln2, a + m->a.m2, a + m->a.r2, w + o.ln2w, w + o.ln2b,
                                   N, C);
        k->gemm(false, false, N, 4 * Cl, C, 1.0f, ln2, C, w + o.wfc, 4 * Cl, 0.0f, fch, 4 * Cl);
        tf->bias_gelu_fwd(fch, fcg, w + o.bfc, N, 4 * Cl);
        k->gemm(false, false, N, C, 4 * Cl, 1.0f, fcg, 4 * Cl, w + o.wfc2, C, 0.0f, res2, C);
        RM_CHECK(sum(m, res2, (size_t)N * c, err)); /* g after mlp.c_proj */
        tf->residual_layernorm_fwd(res2, res1, w + o.bfc2, NULL, NULL, NULL, NULL, NULL, N, C);
        x = res2;
    }
    if (p->has_head) {
        const float *hw = head_param(m->params, p);
        tf->layernorm_fwd(m->lnf, m->mf, m->rf, x, hw, hw + C, N, C);
        k->gemm(false, true, N, p->Vl, C, 1.0f, m->lnf, C, wte, C, 0.0f, m->logits, p->Vl);
    }
    return RM_OK;
}

int rm_tp_gpt_forward(rm_tp_gpt *m, const int32_t *tok, int rows, rm_err *err)
{
    m->fwd_floats = 0;
    return rm_tp_gpt_stage_forward(m, tok, rows, err);
}

/* the stage's output stream: its last block's, or its input's when it holds no block */
static float *out_stream(const rm_tp_gpt *m)
{
    const rm_tp_gpt_plan *p = &m->p;
    return p->b1 > p->b0 ? m->blk[p->b1 - 1] + m->a.res2 : (float *)m->xin;
}

float *rm_tp_gpt_output(const rm_tp_gpt *m)
{
    return m->p.has_head ? m->logits : out_stream(m);
}

int rm_tp_gpt_loss(rm_tp_gpt *m, const int32_t *labels, int rows, float inv_batch, float *loss_sum,
                   rm_err *err)
{
    const rm_kernels *k = m->k;
    const rm_tf_kernels *tf = k->tf;
    const rm_tp_gpt_plan *p = &m->p;
    int N = rows * p->ctx, T = p->T, Vl = p->Vl, v0 = p->t * Vl;
    int valid = p->V - v0 < Vl ? p->V - v0 : Vl; /* this rank's non-padding columns */
    valid = valid < 0 ? 0 : valid;
    float inv_t = 1.0f / (float)p->ctx;
    /* the row maxima: each rank's in its slot, gathered by a sum; then the sums of exp and the
     * target logits (the maxima in dres: free until backward) */
    tf->xent_vocab_max(m->stats, m->logits, N, Vl, valid, T, p->t);
    RM_CHECK(sum(m, m->stats, (size_t)N * (size_t)T, err));
    tf->xent_vocab_sums(m->s2, m->dres, m->stats, m->logits, labels, N, Vl, valid, v0, T);
    RM_CHECK(sum(m, m->s2, 2 * (size_t)N, err));
    tf->xent_vocab_grad(m->logits, m->rowl, m->s2, m->dres, labels, N, Vl, valid, v0, inv_batch * inv_t);
    /* the loss, the same on every rank: its rows summed here (a device table's copied out) */
    const float *rl = m->rowl;
    if (!k->host_memory) {
        RM_CHECK(
            rm_kernels_copy_error(k, k->d2h(m->hrowl, m->rowl, (size_t)N * sizeof(float)), "loss rows", err));
        rl = m->hrowl;
    }
    double loss = 0;
    for (int n = 0; n < N; n++)
        loss += rl[n];
    float l = (float)(loss * inv_t);
    if (k->host_memory) {
        *loss_sum = l;
        return RM_OK;
    }
    return rm_kernels_copy_error(k, k->h2d(loss_sum, &l, sizeof l), "loss", err);
}

int rm_tp_gpt_stage_backward(rm_tp_gpt *m, const void *in, int rows, const float *dy, float *dx, rm_err *err)
{
    const rm_kernels *k = m->k;
    const rm_tf_kernels *tf = k->tf;
    const rm_tp_gpt_plan *p = &m->p;
    int ctx = p->ctx, C = p->C, Cl = p->Cl, Vl = p->Vl, N = rows * ctx;
    size_t c = (size_t)C, nc = (size_t)N * c, v0 = (size_t)p->t * (size_t)Vl;
    rm_gpt_blk o;
    rm_gpt_blk_layout(c, (size_t)Cl, &o);
    const float *wte = m->params + p->o_wte;
    float *gwte = m->grads + p->o_wte;
    if (p->has_head) { /* the head: the tied projection (column-parallel by vocabulary), f, ln_f */
        const float *hw = head_param(m->params, p);
        float *hg = head_param(m->grads, p);
        k->gemm(false, false, N, C, Vl, 1.0f, m->logits, Vl, wte, C, 0.0f, m->dln, C);
        RM_CHECK(f_start(m, m->dln, nc, err));
        k->gemm(true, false, Vl, C, N, 1.0f, m->logits, Vl, m->lnf, C, 0.0f, gwte, C);
        RM_CHECK(f_wait(m, nc, err));
        k->memset0(m->dres, nc * sizeof(float));
        tf->layernorm_bwd(m->dres, hg, hg + C, m->dln, out_stream(m), m->mf, m->rf, hw, N, C, false);
    } else { /* the gradient of the stage's output stream, from the next stage */
        RM_CHECK(rm_kernels_copy_error(k, k->d2d(m->dres, dy, nc * sizeof(float)), "stream gradient", err));
        if (p->has_wte) /* stage 0 of several: only the embedding below adds to wte's gradient */
            k->memset0(gwte, (size_t)Vl * c * sizeof(float));
    }
    for (int l = p->b1; l >= p->b0 + 1; l--) {
        const float *w = blk_param(m, l);
        float *g = m->grads + (blk_param(m, l) - m->params);
        const float *a = m->blk[l - 1];
        const float *x = l == p->b0 + 1 ? m->xin : m->blk[l - 2] + m->a.res2;
        float *dres = m->dres, *dbig = m->dbig;
        /* the MLP: mlp.c_proj (row), GELU, c_fc (column), f, ln_2 */
        k->gemm(false, true, N, 4 * Cl, C, 1.0f, dres, C, w + o.wfc2, C, 0.0f, dbig, 4 * Cl);
        k->gemm(true, false, 4 * Cl, C, N, 1.0f, a + m->a.fcg, 4 * Cl, dres, C, 0.0f, g + o.wfc2, C);
        tf->colsum(g + o.bfc2, dres, N, C, false);
        tf->gelu_bwd(dbig, dbig, a + m->a.fch, N, 4 * Cl);
        k->gemm(false, true, N, C, 4 * Cl, 1.0f, dbig, 4 * Cl, w + o.wfc, 4 * Cl, 0.0f, m->dln, C);
        RM_CHECK(f_start(m, m->dln, nc, err));
        k->gemm(true, false, C, 4 * Cl, N, 1.0f, a + m->a.ln2, C, dbig, 4 * Cl, 0.0f, g + o.wfc, 4 * Cl);
        tf->colsum(g + o.bfc, dbig, N, 4 * Cl, false);
        RM_CHECK(f_wait(m, nc, err));
        tf->layernorm_bwd(dres, g + o.ln2w, g + o.ln2b, m->dln, a + m->a.res1, a + m->a.m2, a + m->a.r2,
                          w + o.ln2w, N, C, false);
        /* attention: c_proj (row), this rank's heads, c_attn (column), f, ln_1 */
        k->gemm(false, true, N, Cl, C, 1.0f, dres, C, w + o.wp, C, 0.0f, m->datty, Cl);
        k->gemm(true, false, Cl, C, N, 1.0f, a + m->a.atty, Cl, dres, C, 0.0f, g + o.wp, C);
        tf->colsum(g + o.bp, dres, N, C, false);
        tf->attention_bwd(dbig, m->datty, a + m->a.atty, a + m->a.lse, a + m->a.qkv, rows, ctx, Cl, p->NHl,
                          m->attn_scratch);
        k->gemm(false, true, N, C, 3 * Cl, 1.0f, dbig, 3 * Cl, w + o.wqkv, 3 * Cl, 0.0f, m->dln, C);
        RM_CHECK(f_start(m, m->dln, nc, err));
        k->gemm(true, false, C, 3 * Cl, N, 1.0f, a + m->a.ln1, C, dbig, 3 * Cl, 0.0f, g + o.wqkv, 3 * Cl);
        tf->colsum(g + o.bqkv, dbig, N, 3 * Cl, false);
        RM_CHECK(f_wait(m, nc, err));
        tf->layernorm_bwd(dres, g + o.ln1w, g + o.ln1b, m->dln, x, a + m->a.m1, a + m->a.r1, w + o.ln1w, N, C,
                          false);
    }
    if (p->has_wpe) { /* the embedding: this rank's vocabulary rows (the stream's gradient is replicated), wpe */
        float *gwpe = m->grads + p->o_wpe;
        k->memset0(gwpe, (size_t)ctx * c * sizeof(float));
        tf->embed_vocab_bwd(gwte, gwpe, m->dres, in, (int)v0, Vl, rows, ctx, C);
    } else if (dx) { /* the input stream's gradient, whole on every rank, for the stage before */
        RM_CHECK(rm_kernels_copy_error(k, k->d2d(dx, m->dres, nc * sizeof(float)), "stream gradient", err));
    }
    return k->check(err);
}

int rm_tp_gpt_backward(rm_tp_gpt *m, const int32_t *tok, int rows, rm_err *err)
{
    m->bwd_floats = 0;
    return rm_tp_gpt_stage_backward(m, tok, rows, NULL, NULL, err);
}

/* ---- the split as the tensor strategy drives it (tp_split.h) */

/* forward, the vocab-parallel loss (scaled by 1 / rows, as gpt.c's), backward */
static int train(rm_tp_gpt *m, const void *x, const int32_t *labels, int rows, float *loss_sum, rm_err *err)
{
    RM_CHECK(rm_tp_gpt_forward(m, x, rows, err));
    RM_CHECK(rm_tp_gpt_loss(m, labels, rows, 1.0f / (float)rows, loss_sum, err));
    return rm_tp_gpt_backward(m, x, rows, err);
}

/* gpt.c's tensors at the local sizes: wte's rows and wpe, each block's twelve, ln_f's two */
static int tensors(const rm_tp_gpt_plan *p, rm_optim_seg *seg, int cap)
{
    size_t c = (size_t)p->C, at = (size_t)(p->Vl + p->ctx) * c;
    int n = 0;
#define SEG(off_, len_, decay_)                                \
    do {                                                       \
        if (n < cap)                                           \
            seg[n] = (rm_optim_seg){(off_), (len_), (decay_)}; \
        n++;                                                   \
    } while (0)
    if (p->has_wte)
        SEG(p->o_wte, (size_t)p->Vl * c, true);
    if (p->has_wpe)
        SEG(p->o_wpe, (size_t)p->ctx * c, true);
    rm_gpt_blk o;
    rm_gpt_blk_layout(c, (size_t)p->Cl, &o);
    const size_t off[] = {o.ln1w, o.ln1b, o.wqkv, o.bqkv, o.wp,   o.bp, o.ln2w,
                          o.ln2b, o.wfc,  o.bfc,  o.wfc2, o.bfc2, o.len};
    at = p->o_blk;
    for (int l = p->b0; l < p->b1; l++, at += o.len)
        for (int i = 0; i < 12; i++) /* the 2-D ones: c_attn.w, attn.c_proj.w, c_fc.w, mlp.c_proj.w */
            SEG(at + off[i], off[i + 1] - off[i], i == 2 || i == 4 || i == 8 || i == 10);
    if (p->has_head) {
        SEG(p->o_head, c, false);
        SEG(p->o_head + c, c, false);
    }
#undef SEG
    return n;
}

/* the plan of stage p of P (P = 1: the whole model) */
static int plan_stage(const rm_model_shape *s, int T, int t, int P, int p, rm_tp_gpt_plan *out, rm_err *err)
{
    return rm_tp_gpt_plan_stage(s, T, t, P, p, out, err);
}

/* ---- the stage compute (tp_split.h rm_tp_stage_ops): one micro-batch a step */

static void st_widths(const rm_tp_split *s, int *din, int *dout)
{
    const rm_tp_gpt_plan *p = &((const rm_tp_gpt *)s->impl)->p;
    *din = *dout = p->ctx * p->C; /* the residual stream of a sequence */
}

static int st_forward(rm_tp_split *s, const void *in, int off, int rows, rm_err *err)
{
    rm_tp_gpt *m = s->impl;
    if (off != 0)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.microBatches",
                            "must be 1 for the transformer with tensorParallel and pipelineStages > 1");
    m->fwd_floats = 0;
    int rc = rm_tp_gpt_stage_forward(m, in, rows, err);
    s->fwd_floats += m->fwd_floats;
    return rc;
}

static float *st_output(rm_tp_split *s, int off)
{
    (void)off;
    return rm_tp_gpt_output(s->impl);
}

static int st_loss(rm_tp_split *s, const int32_t *labels, int off, int rows, float inv_batch, float *loss_sum,
                   rm_err *err)
{
    (void)off;
    rm_tp_gpt *m = s->impl;
    m->fwd_floats = 0;
    int rc = rm_tp_gpt_loss(m, labels, rows, inv_batch, loss_sum, err);
    s->fwd_floats += m->fwd_floats;
    return rc;
}

static int st_backward(rm_tp_split *s, const void *in, int off, int rows, float *dy, float *dx,
                       bool accumulate, rm_err *err)
{
    rm_tp_gpt *m = s->impl;
    if (off != 0 || accumulate)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.microBatches",
                            "must be 1 for the transformer with tensorParallel and pipelineStages > 1");
    m->bwd_floats = 0;
    int rc = rm_tp_gpt_stage_backward(m, in, rows, dy, dx, err);
    s->bwd_floats += m->bwd_floats;
    return rc;
}

static bool st_tied(const rm_tp_split *s, size_t *off, size_t *len, bool *copy)
{
    const rm_tp_gpt_plan *p = &((const rm_tp_gpt *)s->impl)->p;
    if (p->P < 2 || !p->has_wte)
        return false;
    *off = p->o_wte;
    *len = (size_t)p->Vl * (size_t)p->C;
    *copy = p->wte_copy;
    return true;
}

static const rm_tp_stage_ops stage_ops = {
    .bounds = rm_tp_gpt_stages,
    .widths = st_widths,
    .forward = st_forward,
    .output = st_output,
    .loss = st_loss,
    .backward = st_backward,
    .tied = st_tied,
    .max_micro = 1,
};

RM_TP_SPLIT_TABLE(rm_tp_split_gpt, "gpt", rm_tp_gpt, rm_tp_gpt_plan, &stage_ops, plan_stage, rm_tp_gpt_init,
                  rm_tp_gpt_free, rm_tp_gpt_slice, rm_tp_gpt_assemble, rm_tp_gpt_replicated, rm_tp_gpt_runs,
                  train, tensors)
