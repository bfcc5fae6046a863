/* transformer.h — the transformer's kernels beside the kernels table's GEMM (docs/models-and-data.md,
 * "The transformer"): embeddings, LayerNorm, GELU, residual adds, causal attention and the
 * vocabulary cross-entropy. A table exposes them through rm_kernels.tf (NULL where a table has
 * none yet: the model then refuses type gpt on that device).
 *
 * Layouts (row-major fp32; N rows = B sequences x T positions; C channels; NH heads of hs = C/NH):
 *   activations [N x C]; qkv [N x 3C] = q | k | v, head h's columns h*hs .. h*hs+hs-1 of each;
 *   attention output [N x C] (heads side by side); lse [B x NH x T] (each row's log-sum-exp of its
 *   scaled scores, all backward needs besides q, k, v and the output).
 * Causal attention never holds a T x T matrix: per (sequence, head) it walks blocks of query rows,
 * scoring each against the keys up to the block's last row only (the masked half is skipped), and
 * the backward pass recomputes the probabilities from lse.
 *
 * Same contract as kernels.h: pointers are the table's device memory, entries are ordered as one
 * stream and allocate nothing; `scratch` arguments are caller-owned device memory of the size the
 * matching *_scratch entry names. */
#ifndef RM_KERNELS_TRANSFORMER_H
#define RM_KERNELS_TRANSFORMER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RM_LN_EPS 1e-5f

typedef struct rm_tf_kernels {
    /* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]; tokens in [0, V) (checked by the data reader). */
    void (*embed_fwd)(float *out, const int32_t *tok, const float *wte, const float *wpe, int B, int T,
                      int C);
    /* dwte[tok[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum over b of dout[b,t,:] (both accumulate). */
    void (*embed_bwd)(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B, int T, int C);
    /* out = (x - mean) * rstd * w + b per row of C (eps RM_LN_EPS); mean, rstd [N] kept. */
    void (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int N, int C);
    /* res += x + bias (res holds a projection's output), then ln = LayerNorm(res) with w, b
     * (ln NULL: the residual only). One pass over each row. */
    void (*residual_layernorm_fwd)(float *res, const float *x, const float *bias, float *ln, float *mean,
                                   float *rstd, const float *w, const float *b, int N, int C);
    /* LayerNorm backward: dx += the input gradient (dx accumulates: it is a residual stream's);
     * dw, db = (or += with accumulate) the gain and bias gradients. */
    void (*layernorm_bwd)(float *dx, float *dw, float *db, const float *dout, const float *x,
                          const float *mean, const float *rstd, const float *w, int N, int C,
                          bool accumulate);
    /* h += bias (in place), g = gelu_tanh(h) (GPT-2's "gelu_new"). */
    void (*bias_gelu_fwd)(float *h, float *g, const float *bias, int N, int C);
    /* dh = dg * gelu_tanh'(h). dh may alias dg. */
    void (*gelu_bwd)(float *dh, const float *dg, const float *h, int N, int C);
    /* db = (or += with accumulate) the column sums of dy [N x C]. */
    void (*colsum)(float *db, const float *dy, int N, int C, bool accumulate);
    /* Floats of scratch the attention entries need for sequences of T positions. */
    size_t (*attention_scratch)(int T);
    /* Causal self-attention, scale 1/sqrt(hs): out [N x C], lse [B x NH x T]. */
    void (*attention_fwd)(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                          float *scratch);
    /* dqkv [N x 3C] (overwritten) from dout [N x C] and the forward's out, lse and qkv. */
    void (*attention_bwd)(float *dqkv, const float *dout, const float *out, const float *lse,
                          const float *qkv, int B, int T, int C, int NH, float *scratch);
    /* Softmax cross-entropy over logits [N x V], in place: logits become
     * (softmax - onehot(target)) * grad_scale; *loss_sum = loss_scale * sum over rows of
     * -log softmax(target) (overwritten); *correct (NULL: skipped) = rows whose first argmax is
     * the target. With grad_scale 0 the logits are left as they are (evaluation). */
    void (*xent)(float *logits, const int32_t *targets, int N, int V, float grad_scale, float loss_scale,
                 float *loss_sum, int32_t *correct);
    /* The CPUs the kernels spread over (1..): the CPU table's pool width; NULL = not adjustable. */
    void (*set_threads)(int n);
    /* The largest head size (embed / heads) the attention entries hold; 0 = any. */
    int max_head_size;

    /* ---- the vocabulary-parallel embedding and cross-entropy of a tensor group (docs/models-and-data.md,
     * "Tensor parallelism"): this rank holds vocabulary rows [v0, v0 + Vl) of wte (padding rows past
     * the real vocabulary included) and the matching Vl logits columns, of which the first `valid`
     * are real. The caller sums the marked buffers over the group between the entries. */
    /* out[b,t,:] = (tok in [v0, v0 + Vl) ? wte[tok - v0,:] : 0) + (wpe ? wpe[t,:] : 0): one rank
     * passes wpe, so the group's sum adds it once (two non-zero terms: exact in any order). */
    void (*embed_vocab_fwd)(float *out, const int32_t *tok, const float *wte, int v0, int Vl,
                            const float *wpe, int B, int T, int C);
    /* dwte[tok - v0,:] += dout[b,t,:] for this rank's tokens; dwpe += as embed_bwd (both accumulate). */
    void (*embed_vocab_bwd)(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int v0, int Vl,
                            int B, int T, int C);
    /* stats [N x T] (overwritten): slot t of row n = the max of its first `valid` logits
     * (-FLT_MAX when valid is 0), the other slots 0; the group's sum gathers every rank's max. */
    void (*xent_vocab_max)(float *stats, const float *logits, int N, int Vl, int valid, int T, int t);
    /* From the summed stats: mx[n] = the row's max over the T slots; s2 [N x 2] (overwritten) =
     * [sum of exp(logit - mx) over this rank's valid columns | the target's logit when this rank
     * holds it, else 0], in double where the table can; the group's sum completes both. */
    void (*xent_vocab_sums)(float *s2, float *mx, const float *stats, const float *logits, const int32_t *tgt,
                            int N, int Vl, int valid, int v0, int T);
    /* From the summed s2: rowloss[n] = log(S) + mx - target logit (the whole row's loss, the same
     * on every rank); logits become (softmax - onehot) * grad_scale, 0 on padding columns. */
    void (*xent_vocab_grad)(float *logits, float *rowloss, const float *s2, const float *mx,
                            const int32_t *tgt, int N, int Vl, int valid, int v0, float grad_scale);
} rm_tf_kernels;

#ifdef __cplusplus
}
#endif
#endif
