/* gpt.h — what the transformer family (gpt.c) offers beyond the model interface: the words of its
 * shape record, the layout of a block's tensors inside its unit and of its activations. For code that knows it holds a
 * transformer (its tensor-parallel split, worker/tensor/tp_gpt.c; tests); strategies use
 * worker/model/model.h only.
 *
 * Ownership: plain values; nothing allocated. */
#ifndef RM_WORKER_GPT_H
#define RM_WORKER_GPT_H
#include <stddef.h>
#include "worker/model/model.h"

/* Blocks: the units between the embedding and the head. */
#define RM_GPT_MAX_LAYERS (RM_MODEL_MAX_UNITS - 2)

/* The shape record: nlayers = L; dims[RM_GPT_SH_*]. */
enum { RM_GPT_SH_TAG = 0, RM_GPT_SH_VOCAB, RM_GPT_SH_CONTEXT, RM_GPT_SH_EMBED, RM_GPT_SH_HEADS };

/* Offsets (floats) of a block's tensors inside its unit, and the block's length. */
typedef struct rm_gpt_blk {
    size_t ln1w, ln1b, wqkv, bqkv, wp, bp, ln2w, ln2b, wfc, bfc, wfc2, bfc2, len;
} rm_gpt_blk;

/* The block of width C whose attention and MLP keep `part` of every C of their split dimension:
 * part = C is gpt.c's whole block; part = C/T a tensor rank's pieces (worker/tensor/tp_gpt.h).
 * In order: ln_1.w, ln_1.b [C]; c_attn.w [C x 3·part], c_attn.b [3·part]; attn.c_proj.w [part x C],
 * attn.c_proj.b [C]; ln_2.w, ln_2.b [C]; c_fc.w [C x 4·part], c_fc.b [4·part]; mlp.c_proj.w
 * [4·part x C], mlp.c_proj.b [C] (Hugging Face's order, GPT-2's Conv1D [in x out] layout). */
void rm_gpt_blk_layout(size_t C, size_t part, rm_gpt_blk *o);

/* Section offsets (floats) inside one block's activation buffer. */
typedef struct rm_gpt_act {
    size_t ln1, qkv, atty, res1, ln2, fch, fcg, res2, m1, r1, m2, r2, lse, len;
} rm_gpt_act;

/* For N = B·ctx positions (B sequences of ctx tokens), width C, `part` as above and the heads that
 * part holds, each section a [N x width] block so a pass over a window of rows reads contiguous
 * memory: ln1 (C), qkv (3·part), the attention output (part), the residual after attention (C),
 * ln2 (C), the MLP's pre-activation and GELU output (4·part each), the block output (C), the
 * LayerNorms' mean and rstd (1 each), the attention's log-sum-exp per head ([B x heads x ctx]). */
void rm_gpt_act_layout(size_t N, size_t C, size_t part, size_t heads, size_t B, size_t ctx, rm_gpt_act *o);
#endif
