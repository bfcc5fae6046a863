/* mlp.h — what the MLP family (mlp.c) offers beyond the model interface: its shape record from
 * explicit widths and where a layer's W and b start. For code that knows it holds an MLP (its
 * tests, benchmarks of its kernels); strategies use worker/model/model.h only.
 *
 * Ownership: plain values; nothing allocated. */
#ifndef RM_WORKER_MLP_H
#define RM_WORKER_MLP_H
#include "worker/model/model.h"

/* inputs -> hidden[0..nhidden) -> classes (nhidden 0..RM_TJ_MAX_HIDDEN, each 1..65536);
 * RM_EINVAL naming model.hidden if bad. */
int rm_mlp_shape(rm_model_shape *s, int inputs, const int *hidden, int nhidden, int classes, rm_err *err);
/* Layer l's weights [in x out] and bias [out] in the flat buffers (floats from the start). */
static inline size_t rm_mlp_w_off(const rm_model *m, int l)
{
    return m->unit[l].off;
}
static inline size_t rm_mlp_b_off(const rm_model *m, int l)
{
    return m->unit[l].off + (size_t)m->unit[l].in_width * (size_t)m->unit[l].out_width;
}
#endif
