/* elem.h — the per-element math of the kernels table, written once for both tables.
 *
 * Design: every formula a kernel applies to one element (bias + activation, the activation's
 * derivative, the three optimizers, scaling, the unscale-and-check of mixed precision, one
 * softmax-cross-entropy gradient) is an RM_HD static inline function here. kernels/kernels_cpu.c
 * calls them in its loops and kernels/cuda/kernels_cuda.cu in its grid-stride loops, so the CPU
 * table is the oracle of the very formula the GPU runs (the unit tests in tests/unit/test_elem.c
 * pin each one; tests/gpu/ compares the devices). The reduction steps shared by the CUDA kernels and
 * their host emulation are in kernels/reduce.h.
 * Usable from C11 and CUDA C++; header-only, nothing owned. Floating point: the same source can
 * still round differently on the GPU, where nvcc contracts a*b+c into one FMA; the GPU tests'
 * tolerances allow for that, the formula itself may not differ. */
#ifndef RM_KERNELS_ELEM_H
#define RM_KERNELS_ELEM_H
#include <math.h>

#ifdef __CUDACC__
#define RM_HD __host__ __device__ __forceinline__
#else
#define RM_HD static inline
#endif

/* Activations (rm_act's values; kernels.h keeps the enum). */
#define RM_ELEM_ACT_NONE 0
#define RM_ELEM_ACT_RELU 1

/* y + b, then the activation; ReLU maps NaN to 0 (v > 0 is false). */
RM_HD float rm_e_bias_act(float y, float b, int act)
{
    float v = y + b;
    if (act == RM_ELEM_ACT_RELU)
        v = v > 0.0f ? v : 0.0f;
    return v;
}

/* The gradient through the activation, given the forward output y (after the activation):
 * ReLU passes dy only where y > 0 (0 where y <= 0 or NaN); none passes it unchanged. */
RM_HD float rm_e_act_grad(float dy, float y, int act)
{
    if (act == RM_ELEM_ACT_RELU && !(y > 0.0f))
        return 0.0f;
    return dy;
}

/* Weight decay is L2 added to the gradient (PyTorch semantics): g' = g + wd * w. */
RM_HD float rm_e_decayed(float g, float w, float wd)
{
    return g + wd * w;
}

/* SGD with momentum: v = momentum * v + g'; w -= lr * v. */
RM_HD void rm_e_sgd(float *w, float *v, float g, float lr, float momentum, float wd)
{
    float gi = rm_e_decayed(g, *w, wd);
    float vi = momentum * *v + gi;
    *v = vi;
    *w -= lr * vi;
}

/* Adam. The caller computes the bias corrections once per update as inv_bc1 = 1 / (1 - b1^t) and
 * inv_sqrt_bc2 = 1 / sqrt(1 - b2^t) (rm_e_adam_corrections), so the element does
 * w -= lr * (m * inv_bc1) / (sqrt(v) * inv_sqrt_bc2 + eps) — algebraically PyTorch's
 * lr * (m / bc1) / (sqrt(v / bc2) + eps). */
RM_HD void rm_e_adam(float *w, float *m, float *v, float g, float lr, float b1, float b2, float eps, float wd,
                     float inv_bc1, float inv_sqrt_bc2)
{
    float gi = rm_e_decayed(g, *w, wd);
    float mi = b1 * *m + (1.0f - b1) * gi;
    float vi = b2 * *v + (1.0f - b2) * gi * gi;
    *m = mi;
    *v = vi;
    *w -= lr * (mi * inv_bc1) / (sqrtf(vi) * inv_sqrt_bc2 + eps);
}

RM_HD void rm_e_adam_corrections(float bc1, float bc2, float *inv_bc1, float *inv_sqrt_bc2)
{
    *inv_bc1 = 1.0f / bc1;
    *inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
}

/* AdamW (decoupled weight decay; Loshchilov & Hutter, torch.optim.AdamW's order): the weight
 * shrinks by lr * wd first, then takes Adam's step on the undecayed gradient. wd 0 leaves w's
 * bits alone (w * 1). The optimizer passes wd 0 for tensors that are not decayed (biases, LayerNorm
 * gains: worker/optim/optim.h). */
RM_HD void rm_e_adamw(float *w, float *m, float *v, float g, float lr, float b1, float b2, float eps,
                      float wd, float inv_bc1, float inv_sqrt_bc2)
{
    float wi = *w * (1.0f - lr * wd);
    float mi = b1 * *m + (1.0f - b1) * g;
    float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    *w = wi - lr * (mi * inv_bc1) / (sqrtf(vi) * inv_sqrt_bc2 + eps);
}

/* LAMB's update direction (You et al. 2019): r = m^ / (sqrt(v^) + eps) + wd * w, with the bias
 * corrections of rm_e_adam_corrections. */
RM_HD float rm_e_lamb_dir(float w, float m, float v, float eps, float wd, float inv_bc1, float inv_sqrt_bc2)
{
    return (m * inv_bc1) / (sqrtf(v) * inv_sqrt_bc2 + eps) + wd * w;
}

/* LAMB, first half: Adam's moments of the gradient; returns the direction r for the norms. */
RM_HD float rm_e_lamb_moments(float w, float *m, float *v, float g, float b1, float b2, float eps, float wd,
                              float inv_bc1, float inv_sqrt_bc2)
{
    float mi = b1 * *m + (1.0f - b1) * g;
    float vi = b2 * *v + (1.0f - b2) * g * g;
    *m = mi;
    *v = vi;
    return rm_e_lamb_dir(w, mi, vi, eps, wd, inv_bc1, inv_sqrt_bc2);
}

/* LAMB, second half: w -= lr * r, lr already multiplied by the tensor's trust ratio. */
RM_HD void rm_e_lamb_apply(float *w, float m, float v, float lr, float eps, float wd, float inv_bc1,
                           float inv_sqrt_bc2)
{
    *w -= lr * rm_e_lamb_dir(*w, m, v, eps, wd, inv_bc1, inv_sqrt_bc2);
}

/* LARS (You, Gitman, Ginsburg 2017): v = momentum * v + lr * (g + wd * w); w -= v, lr already
 * multiplied by the layer's trust ratio (the learning rate sits inside the momentum, as in the
 * paper and TensorFlow's LARSOptimizer). */
RM_HD void rm_e_lars(float *w, float *v, float g, float lr, float momentum, float wd)
{
    float vi = momentum * *v + lr * (g + wd * *w);
    *v = vi;
    *w -= vi;
}

/* Adagrad: s += g'^2; w -= lr * g' / (sqrt(s) + eps). */
RM_HD void rm_e_adagrad(float *w, float *s, float g, float lr, float eps, float wd)
{
    float gi = rm_e_decayed(g, *w, wd);
    float si = *s + gi * gi;
    *s = si;
    *w -= lr * gi / (sqrtf(si) + eps);
}

/* Mixed precision: the scaled gradient x is checked BEFORE it is multiplied by 1/scale (as
 * PyTorch's GradScaler does: an inf/NaN in the scaled gradient is the overflow), and the product is
 * checked too, so a finite value that the multiplication pushes past FLT_MAX (a scale below 1) is
 * never applied either; returns 1 when either is inf/NaN. x becomes x * inv_scale. */
RM_HD int rm_e_unscale_check(float *x, float inv_scale)
{
    float v = *x;
    float r = v * inv_scale;
    *x = r;
    return !isfinite(v) || !isfinite(r);
}

/* One softmax-cross-entropy gradient element: (p - [j == label]) * inv_batch, where
 * p = exp(x - max) / sum is the row's softmax. */
RM_HD float rm_e_xent_grad(float p, int is_label, float inv_batch)
{
    return (p - (is_label ? 1.0f : 0.0f)) * inv_batch;
}
#endif
