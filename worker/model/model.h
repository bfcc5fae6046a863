/* model.h — the MLP (784-512-256-10 by default, ReLU, softmax cross-entropy) on top of a kernels
 * table, with the flat buffer layout the data-parallel step is built around.
 *
 * Layout (the contract with worker/allreduce/fusion.h and worker/checkpoint/checkpoint.h):
 *   ONE flat fp32 parameter buffer and ONE flat gradient buffer of the same shape. Layers are
 *   contiguous in forward order, each layer's weights then its bias:
 *       [ W0 (d0 x d1) | b0 (d1) | W1 (d1 x d2) | b1 (d2) | ... | W{L-1} | b{L-1} ]
 *   "Layer l" for fusion is the range [layer_off[l], layer_off[l] + layer_len[l]) in floats
 *   (W_l and b_l together). Backward finishes layers from L-1 down to 0, so a fusion bucket is a
 *   contiguous range taken from the end of the gradient buffer: no packing, no copies.
 *   Optimizer state buffers (momentum, Adam m/v, Adagrad sums) use the same layout, so a checkpoint
 *   is params + state as flat arrays.
 *
 * Activations are kept per layer for a fixed maximum batch (allocated once), so forward/backward
 * allocate nothing. Every buffer lives in the kernels table's memory.
 *
 * Ownership: rm_model owns every buffer it allocates (rm_model_free, NULL ok). The kernels table is
 * borrowed (static). Pointers returned by accessors are borrowed, valid until rm_model_free. */
#ifndef RM_WORKER_MODEL_H
#define RM_WORKER_MODEL_H
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "kernels/kernels.h"

#define RM_MODEL_MAX_LAYERS (RM_TJ_MAX_HIDDEN + 1)
#define RM_MODEL_INPUT 784
#define RM_MODEL_CLASSES 10

typedef struct rm_model_shape {
    int nlayers;                        /* linear layers = hidden + 1 */
    int dims[RM_MODEL_MAX_LAYERS + 1];  /* dims[0] = inputs ... dims[nlayers] = classes */
} rm_model_shape;

typedef struct rm_param_layout {
    int nlayers;
    size_t w_off[RM_MODEL_MAX_LAYERS];     /* floats from the start of the flat buffer */
    size_t b_off[RM_MODEL_MAX_LAYERS];
    size_t layer_off[RM_MODEL_MAX_LAYERS]; /* == w_off: W then b, contiguous */
    size_t layer_len[RM_MODEL_MAX_LAYERS]; /* d_l * d_{l+1} + d_{l+1} */
    size_t total;                          /* floats in the flat buffer */
} rm_param_layout;

/* Build a shape from hidden widths (nhidden 0..RM_TJ_MAX_HIDDEN, each 1..65536). RM_EINVAL if bad. */
int rm_model_shape_make(rm_model_shape *s, int inputs, const int *hidden, int nhidden, int classes,
                        rm_err *err);
void rm_model_layout(const rm_model_shape *s, rm_param_layout *out);
/* "784-512-256-10" into buf. */
void rm_model_shape_str(const rm_model_shape *s, char *buf, size_t cap);

/* Called by backward after layer l's gradient (W_l and b_l) is final; layers come L-1 .. 0. */
typedef void (*rm_layer_ready_fn)(void *ud, int layer);

typedef struct rm_model {
    const rm_kernels *k;
    rm_model_shape shape;
    rm_param_layout layout;
    int max_batch;
    float *params;          /* flat, layout.total floats */
    float *grads;           /* flat, same layout */
    float *x;               /* input batch [max_batch x dims[0]] */
    int32_t *labels;        /* [max_batch] */
    float *act[RM_MODEL_MAX_LAYERS];   /* act[l] = output of layer l [max_batch x dims[l+1]];
                                          the last one holds logits, then dlogits after backward */
    float *delta[2];        /* ping-pong dX buffers [max_batch x max hidden width] */
    float *loss_sum;        /* device scalar */
    int32_t *correct;       /* device scalar */
    /* Where forward/backward read layer l's [W | b] (layout.layer_len[l] floats); NULL (the
     * default) = params + layout.layer_off[l]. Sharded stage "full" points them at the unit
     * buffers it gathers into; borrowed, never freed by the model. */
    const float *lparams[RM_MODEL_MAX_LAYERS];
} rm_model;

/* Allocate everything for batches up to max_batch. Params are zero until rm_model_init_params. */
int rm_model_init(rm_model *m, const rm_kernels *k, const rm_model_shape *shape, int max_batch,
                  rm_err *err);
void rm_model_free(rm_model *m);
/* He (Kaiming normal, fan_in) weights from a generator seeded by `seed`, zero biases; identical on
 * every rank for the same seed. Allocates one host staging buffer (init time only). */
int rm_model_init_params(rm_model *m, uint64_t seed, rm_err *err);
/* The same values for layers [l0, l1) only (a pipeline stage's): the generator draws the earlier
 * layers' values and drops them, so layer l gets exactly what rm_model_init_params gives it; the
 * parameters outside the range are not touched. Host tables write in place (no staging); device
 * tables stage the range only. RM_EINVAL for an empty or out-of-range range. */
int rm_model_init_params_layers(rm_model *m, uint64_t seed, int l0, int l1, rm_err *err);

/* Forward on m->x (rows <= max_batch); logits end in m->act[nlayers-1]. */
void rm_model_forward(rm_model *m, int rows);
/* Called before layer l's forward (or backward) uses its parameters (sharded stage "full"
 * gathers them here); may be NULL. */
typedef void (*rm_layer_pre_fn)(void *ud, int layer);
/* rm_model_forward with pre(ud, l) before each layer (pre may be NULL). */
void rm_model_forward_hooked(rm_model *m, int rows, rm_layer_pre_fn pre, void *ud);
/* After forward: loss (sum written to m->loss_sum), dlogits scaled by inv_batch, then backward
 * layer by layer in reverse, calling ready(ud, l) as each layer's gradient is final (ready may be
 * NULL). Gradients are overwritten, not accumulated. */
void rm_model_backward(rm_model *m, int rows, float inv_batch, rm_layer_ready_fn ready, void *ud);
/* rm_model_backward with pre(ud, l) before layer l's backward reads its weights (only layers
 * l > 0 read them: layer 0 computes no input gradient). */
void rm_model_backward_hooked(rm_model *m, int rows, float inv_batch, rm_layer_pre_fn pre,
                              rm_layer_ready_fn ready, void *ud);
/* Backward that leaves placing each layer's gradient to the caller (sharded stages keep only a
 * piece of it): for each layer l (L-1 .. 0), once its output gradient and bias gradient are final,
 * place(ud, &g) is called; inside the call (and only there: the next layer overwrites dy) the
 * caller computes the ranges of the layer's gradient it wants with rm_model_grad_range. m->grads
 * is neither read nor written (it may be NULL); the bias gradient goes to db_scratch (the caller's,
 * at least the widest dims[l+1] floats). pre and ready as in rm_model_backward_hooked (pre after
 * place; ready once the layer is done). */
typedef struct rm_layer_grad {
    int layer, rows, di, dout;
    const float *in;   /* [rows x di] the layer's input */
    const float *dy;   /* [rows x dout] gradient w.r.t. its pre-activation output */
    const float *db;   /* [dout] the bias gradient */
} rm_layer_grad;
typedef void (*rm_layer_grad_fn)(void *ud, const rm_layer_grad *g);
void rm_model_backward_placed(rm_model *m, int rows, float inv_batch, rm_layer_pre_fn pre,
                              rm_layer_grad_fn place, rm_layer_ready_fn ready, float *db_scratch,
                              void *ud);
/* Floats [from, to) of layer g->layer's gradient in its flat layout ([W | b], as in m->grads at
 * layout.layer_off) into dst (to - from floats, the kernels' memory); from <= to <= di*dout+dout. */
void rm_model_grad_range(const rm_kernels *k, const rm_layer_grad *g, size_t from, size_t to, float *dst);
/* After forward: m->correct = rows whose argmax equals the label. */
void rm_model_count_correct(rm_model *m, int rows);

/* FNV-1a 64 over the parameter bytes (copied to host in chunks through a caller buffer so nothing
 * is allocated); for the cross-rank bit-identity check. */
uint64_t rm_model_checksum(const rm_model *m, void *scratch, size_t scratch_bytes);
uint64_t rm_fnv1a64(const void *p, size_t n, uint64_t h);
/* Give back the whole pages of floats [from, to) of a flat buffer of m's kernels (host memory
 * only; a no-op for device tables): they read as zeros until written again and stop counting in
 * the resident set. Only pages entirely inside the range are released, so floats outside it are
 * never touched. For strategies that keep part of a flat vector (pipeline stages, ZeRO-3 units). */
void rm_model_release_range(const rm_model *m, float *base, size_t from, size_t to);
#define RM_FNV64_INIT 0xcbf29ce484222325ULL
#endif
