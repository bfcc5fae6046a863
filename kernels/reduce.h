/* reduce.h — the reduction steps of the CUDA kernels that use warp shuffles and block barriers
 * (softmax-cross-entropy, argmax, bias gradients, unscale-check), written once for the device and
 * for a host emulation.
 *
 * Design: a kernel with a reduction is written in phases — a lane phase (each lane walks its
 * strided elements), a warp phase (a 32-lane XOR butterfly: at step s every lane combines its value
 * with lane ^ rm_xor_offset(s)), and block phases (a shared-memory tree halving at each step, or a
 * fixed-order loop). Every phase's arithmetic (the offsets, the combine rules, the lane walks) is an
 * RM_HD function here. The CUDA kernels call them between __shfl_xor_sync / __syncthreads; the host
 * emulation (tests/unit/test_kernel_emu.c) calls the same functions with a loop over 32 lanes per
 * warp step and a loop over threads per barrier, so it computes the same values in the same order
 * as the GPU and is compared with the CPU table at the GPU tests' tolerances. A wrong offset or
 * combine rule here breaks both, and the comparison catches it.
 * Usable from C11 and CUDA C++; header-only, nothing owned. */
#ifndef RM_KERNELS_REDUCE_H
#define RM_KERNELS_REDUCE_H
#include <math.h>

#include "kernels/elem.h" /* RM_HD */

#define RM_WARP 32
#define RM_WARP_STEPS 5 /* log2(RM_WARP) butterfly steps */

/* Butterfly partner distance at step s (0..RM_WARP_STEPS-1): 16, 8, 4, 2, 1. */
RM_HD int rm_xor_offset(int s)
{
    return (RM_WARP / 2) >> s;
}

/* Shared-memory tree over n (a power of two) slots: at step s slots [0, rm_tree_offset(n, s))
 * add the slot that far above them; steps run while the offset is > 0. */
RM_HD int rm_tree_offset(int n, int s)
{
    return (n / 2) >> s;
}

/* ---- softmax cross-entropy: one warp per row ---- */

/* Lane phase: the maximum of this lane's elements j = lane, lane + 32, ... (-inf when none). */
RM_HD float rm_xent_lane_max(const float *x, int classes, int lane)
{
    float m = -INFINITY;
    for (int j = lane; j < classes; j += RM_WARP)
        m = fmaxf(m, x[j]);
    return m;
}
/* Lane phase: the sum of exp(x[j] - m) over this lane's elements, in j order. */
RM_HD float rm_xent_lane_sumexp(const float *x, int classes, int lane, float m)
{
    float s = 0.0f;
    for (int j = lane; j < classes; j += RM_WARP)
        s += expf(x[j] - m);
    return s;
}
/* After the warp phases (m = row max, s = sum of exp): the row's loss -log softmax(label) =
 * log(s) - (x[label] - m); NaN for a label outside [0, classes). */
RM_HD float rm_xent_row_loss(const float *x, int classes, int label, float m, float s)
{
    float xl = (label >= 0 && label < classes) ? x[label] : NAN;
    return logf(s) - (xl - m);
}
/* One gradient element of the row (lane phase after the warp phases). */
RM_HD float rm_xent_grad_at(const float *x, int j, int label, float m, float inv_s, float inv_batch)
{
    return rm_e_xent_grad(expf(x[j] - m) * inv_s, j == label, inv_batch);
}

/* ---- argmax: the first maximum, NaN rules of the C loop `best = 0; if (z[c] > z[best]) best = c` ---- */

/* Lane phase step: take (v, j) when v is not NaN and beats the lane's best so far; bi == classes
 * means "none yet". */
RM_HD void rm_argmax_lane(float *best, int *bi, float v, int j, int classes)
{
    if (!isnan(v) && (*bi == classes || v > *best)) {
        *best = v;
        *bi = j;
    }
}
/* Warp phase combine with the partner's (ob, oi): the larger value wins, the lower index on ties. */
RM_HD void rm_argmax_merge(float *best, int *bi, float ob, int oi, int classes)
{
    if (oi < classes && (*bi == classes || ob > *best || (ob == *best && oi < *bi))) {
        *best = ob;
        *bi = oi;
    }
}
/* Final rule: no non-NaN element, or a NaN in column 0, gives index 0 (as the C loop). */
RM_HD int rm_argmax_final(int bi, float x0, int classes)
{
    return (bi == classes || isnan(x0)) ? 0 : bi;
}

/* ---- bias gradient: a column's rows [r0, r1) split over RM_PLAN_BWD_LANES row lanes ---- */

/* Lane phase: apply the activation's derivative to dy (written back) and sum this row lane's rows
 * r0 + lane, r0 + lane + lanes, ... of column c, in row order. */
RM_HD float rm_bwd_lane_sum(float *dy, const float *y, int cols, int c, int r0, int r1, int lane, int lanes,
                            int act)
{
    float sum = 0.0f;
    for (int r = r0 + lane; r < r1; r += lanes) {
        size_t i = (size_t)r * cols + c;
        float g = rm_e_act_grad(dy[i], y[i], act);
        if (act == RM_ELEM_ACT_RELU && !(y[i] > 0.0f))
            dy[i] = g; /* only masked elements are written back */
        sum += g;
    }
    return sum;
}
#endif
