/* attn_tile.h — the tiling and online-softmax steps of the CUDA causal attention
 * (kernels/cuda/transformer_cuda.cu), written once for the device kernels and their host emulation
 * (tests/unit/test_attn_tile.c, which runs the same tile loop on the CPU against the naive
 * attention for odd shapes). docs/gpu.md, "Attention on the GPU".
 *
 * Tiles: RM_ATTN_TILE query rows x RM_ATTN_TILE keys (the fp32 kernels; the bf16 tensor-core kernels
 * walk the same way with tiles of RM_ATTN_TC_TILE). The query tile starting at q0 visits the key
 * tiles k0 = 0, TILE, ... while k0 < rm_attn_key_end(q0, T); the key tile at k0 is visited by the
 * query tiles q0 = k0, k0 + TILE, ... < T. A key is visible to a query when kj <= qi (causal) and
 * both are inside the sequence. Online softmax (Milakov & Gimelshein 2018): per query row a running
 * maximum m and sum l of exp(s - m); a new tile's maximum m' rescales l and the output accumulator
 * by rm_attn_rescale(m, m'). Header-only, nothing owned; C11 and CUDA C++. */
#ifndef RM_KERNELS_ATTN_TILE_H
#define RM_KERNELS_ATTN_TILE_H
#include <math.h>

#include "kernels/elem.h" /* RM_HD */

#define RM_ATTN_TILE 32
#define RM_ATTN_THREADS 256 /* 32 rows x 8 lanes */
#define RM_ATTN_LANES 8     /* lanes per row: each holds TILE / LANES scores */
#define RM_ATTN_MAX_HS 128  /* head size limit: each lane keeps HS / LANES output columns */
#define RM_ATTN_TC_TILE 64  /* the tensor-core kernels' tile (4 warps x 16 rows) */

/* The end of the keys a query tile of `tile` rows at q0 visits (the tensor-core kernels use 64). */
RM_HD int rm_attn_key_end_t(int q0, int T, int tile)
{
    return q0 + tile < T ? q0 + tile : T;
}
RM_HD int rm_attn_key_end(int q0, int T)
{
    return rm_attn_key_end_t(q0, T, RM_ATTN_TILE);
}

RM_HD int rm_attn_visible(int kj, int qi, int T)
{
    return kj <= qi && qi < T && kj < T;
}

/* The factor that moves a running sum from maximum m_old to m_new >= m_old (0 from the empty
 * start, m_old = -inf: nothing to keep). */
RM_HD float rm_attn_rescale(float m_old, float m_new)
{
    return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}

/* Shared-memory floats of the forward (Q, K, V tiles padded to hs + 1, the probabilities) and of
 * the backward kernels (Q, dO, K, V tiles, two TILE x (TILE + 1) score tiles, lse and D of a tile). */
RM_HD int rm_attn_fwd_smem_floats(int hs)
{
    return 3 * RM_ATTN_TILE * (hs + 1) + RM_ATTN_TILE * (RM_ATTN_TILE + 1);
}
RM_HD int rm_attn_bwd_smem_floats(int hs)
{
    return 4 * RM_ATTN_TILE * (hs + 1) + 2 * RM_ATTN_TILE * (RM_ATTN_TILE + 1) + 2 * RM_ATTN_TILE;
}
#endif
