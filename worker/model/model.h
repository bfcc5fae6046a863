/* model.h — the model interface: what every strategy, checkpoint and metric knows of a model.
 *
 * A model is an ordered list of *units* (an embedding, a transformer block, a linear layer, a
 * head; docs/models-and-data.md, "The model interface"). A model family (mlp.c; later gpt.c) is
 * one file that fills an rm_model_family table; nothing outside worker/model/ names a family.
 *
 * Layout (the contract with fusion, ZeRO shards, pipeline stages, parameter-server shards and
 * checkpoints): ONE flat fp32 parameter buffer and ONE flat gradient buffer of the same shape.
 * Unit u owns the contiguous range [unit[u].off, unit[u].off + unit[u].len) of both, units in
 * forward order and tiling the buffer. Backward finishes units from the last down to the first, so
 * a fusion bucket is a contiguous range taken from the end of the gradient buffer: no packing, no
 * copies. Optimizer state buffers (momentum, Adam m/v, Adagrad sums) use the same layout.
 *
 * Passes: forward and backward run over a range of units [u0, u1) and a window of batch rows
 * [off, off + rows) (a pipeline stage's units, a micro-batch's rows), with hooks before each unit
 * reads its parameters (ZeRO-3's gather), after each unit's gradient is final (fusion) or to place
 * a unit's gradient piece by piece (ZeRO-2/3's reduce-scatter buckets). Activations are sized once
 * for max_batch rows: forward and backward allocate nothing.
 *
 * Batch buffers: m->x holds max_batch rows of x_row_bytes each (the family's input: floats for
 * the MLP); m->labels holds max_batch rows of label_row int32 each. Activations passed between
 * units (a pipeline's sends) are fp32 rows of unit[u].out_width floats.
 *
 * Ownership: rm_model owns every buffer it or its family allocates (rm_model_free, NULL ok). The
 * kernels table and the family table are borrowed (static). Pointers returned by accessors are
 * borrowed, valid until rm_model_free. */
#ifndef RM_WORKER_MODEL_H
#define RM_WORKER_MODEL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "kernels/kernels.h"

/* Units of one model; ZeRO keeps a 64-bit "gathered" mask per unit (worker/allreduce/shard.h). */
#define RM_MODEL_MAX_UNITS 64
/* The shape record a checkpoint header stores and compares: a count and that many + 1 words, the
 * family's to define (the MLP: layers, and the widths from inputs to classes). Its size is part
 * of the checkpoint format (worker/checkpoint/checkpoint.h). */
#define RM_MODEL_SHAPE_WORDS 18

/* dims[0] of a transformer's shape record (an MLP's dims are widths, never negative). */
#define RM_GPT_SHAPE_TAG (-1)

typedef struct rm_model_shape {
    int nlayers;                    /* the family's count (MLP: linear layers) */
    int dims[RM_MODEL_SHAPE_WORDS]; /* the family's words (MLP: dims[0] inputs .. classes) */
} rm_model_shape;

/* What the data set tells the model (docs/models-and-data.md, "Shapes and status"). */
typedef struct rm_model_data {
    int inputs;  /* features per sample (IDX: rows x cols) */
    int classes; /* label range (IDX: 1 + max label) */
} rm_model_data;

typedef struct rm_model_unit {
    const char *kind;         /* "linear", "embedding", "block", "head" (static) */
    size_t off, len;          /* its range of the flat buffers, in floats */
    int in_width;             /* fp32 floats per row at its input (what a pipeline stage receives) */
    int out_width;            /* fp32 floats per row at its output (what it sends on) */
    uint64_t act_floats;      /* activation floats per row it keeps for backward */
    uint64_t flops_fwd;       /* forward FLOPs per row (a multiply-add counts 2) */
    uint64_t flops_bwd;       /* backward FLOPs per row, its input gradient included */
    uint64_t flops_bwd_first; /* ... without the input gradient (the first unit skips it) */
    uint64_t reads;           /* other units whose parameters its passes read (bit u: unit u; the
                               * transformer's tied head reads the embedding): ZeRO-3 gathers them
                               * with it, a pipeline keeps a copy (docs/models-and-data.md) */
} rm_model_unit;

typedef struct rm_model rm_model;
typedef struct rm_model_family rm_model_family;

/* Called before unit u reads its parameters in a pass; may be NULL. */
typedef void (*rm_unit_pre_fn)(void *ud, int unit);
/* Called once unit u's gradient is final (units come last .. first); may be NULL. */
typedef void (*rm_unit_ready_fn)(void *ud, int unit);
/* A unit's gradient, available to be placed piece by piece: inside the call (and only there) the
 * caller takes the ranges it wants with rm_model_grad_range. The fields after `unit` are the
 * family's (the MLP: the linear layer's input, output gradient and bias gradient). */
typedef struct rm_unit_grad {
    int unit, rows, di, dout;
    const float *in; /* [rows x di] */
    const float *dy; /* [rows x dout] */
    const float *db; /* [dout] */
    const void *fam; /* anything else the family needs */
} rm_unit_grad;
typedef void (*rm_unit_grad_fn)(void *ud, const rm_unit_grad *g);

/* One pass over units [u0, u1) and batch rows [off, off + rows). */
typedef struct rm_model_pass {
    int u0, u1;
    int off, rows;
    const float *in; /* u0's input rows (in_width floats each); NULL: the model's input m->x */
    float *dy;       /* backward: gradient of unit u1-1's output rows (overwritten) */
    float *dx;       /* backward: u0's input gradient rows; NULL: not computed */
    bool accumulate; /* backward: add to m->grads instead of overwriting them */
    rm_unit_pre_fn pre;
    rm_unit_ready_fn ready;
    rm_unit_grad_fn place; /* backward: set -> m->grads is neither read nor written */
    void *ud;
} rm_model_pass;

/* A named tensor inside a unit's range (checkpoint manifests, export): row-major fp32 of `shape`
 * (ndim dims) at `off` floats from the start of the flat buffer. The names are the family's
 * (docs/models-and-data.md, "Exported models"); `layout` says how the flat copy relates to the
 * exported one ("" = the same; "in_out" = a Linear weight stored [in x out], exported transposed). */
#define RM_MODEL_TENSOR_NAME 96
#define RM_MODEL_MAX_DIMS 4
typedef struct rm_model_tensor {
    char name[RM_MODEL_TENSOR_NAME];
    size_t off;
    int ndim;
    int64_t shape[RM_MODEL_MAX_DIMS];
    const char *layout;
} rm_model_tensor;

/* A model family's operations (one file each; worker/model/mlp.c). */
struct rm_model_family {
    const char *name; /* spec.training.model.type */
    /* The shape record for a training spec and a data set; field-named errors. */
    int (*shape)(const rm_training_spec *t, const rm_model_data *d, rm_model_shape *out, rm_err *err);
    /* m->shape, k, max_batch set: fill nunits, unit[], nparams, x_row_bytes, label_row, classes. */
    int (*plan)(rm_model *m, rm_err *err);
    /* Allocate the family's activations and scratch (m->priv) for max_batch rows. */
    int (*alloc)(rm_model *m, rm_err *err);
    void (*release)(rm_model *m);
    /* Initial values of units [u0, u1) into host (floats of that range, starting at unit[u0].off),
     * the same values whatever the range: a stage's units get what the whole model gives them. */
    void (*init_params)(const rm_model *m, uint64_t seed, int u0, int u1, float *host);
    void (*forward)(rm_model *m, const rm_model_pass *p);
    /* After forward of the last unit over rows [off, off+rows): writes the summed loss to
     * *loss_sum (device scalar) and replaces the output rows by the loss gradient scaled by
     * inv_batch. */
    void (*loss)(rm_model *m, int off, int rows, float inv_batch, float *loss_sum);
    void (*backward)(rm_model *m, const rm_model_pass *p);
    void (*grad_range)(const rm_model *m, const rm_unit_grad *g, size_t from, size_t to, float *dst);
    /* After forward: *correct (device scalar) = rows whose prediction equals the label. */
    void (*count_correct)(rm_model *m, int rows, int32_t *correct);
    /* The output rows of unit u from row off (fp32, out_width floats per row). */
    float *(*output)(const rm_model *m, int unit, int off);
    /* the shape for logs and errors (the MLP: its widths joined by "-") */
    void (*describe)(const rm_model_shape *s, char *buf, size_t cap);
    /* The named tensors of unit u, in order, tiling its range: up to cap into out; returns how
     * many there are (may exceed cap). */
    int (*tensors)(const rm_model *m, int u, rm_model_tensor *out, int cap);
    /* The config.json written beside an exported model (docs/models-and-data.md, "Exported
     * models": GPT-2's keys for gpt, the widths for mlp), NUL-terminated into buf; RM_EINVAL when
     * it does not fit. */
    int (*config_json)(const rm_model *m, char *buf, size_t cap);
    /* The shape record a config.json describes (import, `ringmaster sample`); RM_EINVAL with the
     * config key named when it is missing or out of range. */
    int (*shape_from_config)(const char *json, rm_model_shape *out, rm_err *err);
};

struct rm_model {
    const rm_kernels *k;
    const rm_model_family *family;
    rm_model_shape shape;
    int max_batch;
    int nunits;
    rm_model_unit unit[RM_MODEL_MAX_UNITS];
    size_t nparams;                      /* floats in the flat buffers */
    size_t unit_off[RM_MODEL_MAX_UNITS]; /* unit[u].off and .len as arrays (fusion, shards, */
    size_t unit_len[RM_MODEL_MAX_UNITS]; /* checkpoints take ranges as two arrays) */
    int classes;                         /* what a label can be (the loss's range) */
    size_t x_row_bytes;                  /* bytes of one input row in x */
    int label_row;                       /* int32 labels per row */
    uint64_t scratch_row; /* floats per row of the family's backward scratch (memory estimates) */
    float *params;        /* flat, nparams floats */
    float *grads;         /* flat, same layout (a strategy may free it and place gradients) */
    void *x;              /* input batch [max_batch x x_row_bytes] */
    int32_t *labels;      /* [max_batch x label_row] */
    float *loss_sum;      /* device scalar */
    int32_t *correct;     /* device scalar */
    /* Where passes read unit u's parameters (unit[u].len floats); NULL (the default) =
     * params + unit[u].off. ZeRO-3 points them at the unit buffers it gathers into; borrowed. */
    const float *uparams[RM_MODEL_MAX_UNITS];
    /* Where rm_model_init_params* take the initial values from; NULL (the default) = the family's
     * random init. Set to weights checked against this model (worker/model/export.h,
     * spec.training.model.init.uri), so every strategy's fresh start reads them; borrowed. */
    const struct rm_model_weights *init_weights;
    void *priv; /* the family's activations and scratch */
};

/* The family named `name` ("mlp"; NULL or "" = "mlp"), or NULL. */
const rm_model_family *rm_model_family_find(const char *name);
/* The family of t->model_type and its shape for data d; field-named errors. */
int rm_model_shape_for(const rm_training_spec *t, const rm_model_data *d, const rm_model_family **fam,
                       rm_model_shape *out, rm_err *err);
/* The model t trains on data d, planned (rm_model_shape_for, then rm_model_plan): plan->family and
 * plan->shape say what to build; nothing is allocated. */
int rm_model_plan_spec(const rm_training_spec *t, const rm_model_data *d, rm_model *plan, rm_err *err);
/* Units and sizes of a shape without allocating anything (the memory estimate, a parameter
 * server's shard table): fills m's plan fields only; rm_model_free is not needed. */
int rm_model_plan(rm_model *m, const rm_model_family *f, const rm_model_shape *shape, rm_err *err);

/* Allocate everything for batches up to max_batch. Params are zero until rm_model_init_params. */
int rm_model_init(rm_model *m, const rm_kernels *k, const rm_model_family *f, const rm_model_shape *shape,
                  int max_batch, rm_err *err);
void rm_model_free(rm_model *m);
/* The family's initial values, identical on every rank for the same seed (or m->init_weights'
 * when set). Allocates one host staging buffer on device tables (init time only). */
int rm_model_init_params(rm_model *m, uint64_t seed, rm_err *err);
/* The same values for units [u0, u1) only (a pipeline stage's); the parameters outside the range
 * are not touched. RM_EINVAL for an empty or out-of-range range. */
int rm_model_init_params_units(rm_model *m, uint64_t seed, int u0, int u1, rm_err *err);
void rm_model_shape_str(const rm_model *m, char *buf, size_t cap);
/* A shape record's words 0..nlayers joined by '-' (what a checkpoint names when shapes differ; the
 * MLP's description). */
void rm_model_shape_words(const rm_model_shape *s, char *buf, size_t cap);

/* Whole-batch passes (rows from 0, every unit). */
void rm_model_forward(rm_model *m, int rows);
void rm_model_forward_hooked(rm_model *m, int rows, rm_unit_pre_fn pre, void *ud);
/* After forward: the loss (sum to m->loss_sum), its gradient scaled by inv_batch, then backward
 * unit by unit in reverse, ready(ud, u) as each unit's gradient is final (may be NULL). Gradients
 * are overwritten, not accumulated. The first unit's input gradient is not computed. */
void rm_model_backward(rm_model *m, int rows, float inv_batch, rm_unit_ready_fn ready, void *ud);
void rm_model_backward_hooked(rm_model *m, int rows, float inv_batch, rm_unit_pre_fn pre,
                              rm_unit_ready_fn ready, void *ud);
/* Backward that leaves placing each unit's gradient to the caller (place, see rm_unit_grad):
 * m->grads is neither read nor written (it may be NULL). */
void rm_model_backward_placed(rm_model *m, int rows, float inv_batch, rm_unit_pre_fn pre,
                              rm_unit_grad_fn place, rm_unit_ready_fn ready, void *ud);
/* Floats [from, to) of unit g->unit's gradient, in its flat layout, into dst (the kernels'
 * memory); from <= to <= unit[g->unit].len. */
void rm_model_grad_range(const rm_model *m, const rm_unit_grad *g, size_t from, size_t to, float *dst);

/* Passes over a unit and row range (pipeline stages, micro-batches). */
void rm_model_forward_pass(rm_model *m, const rm_model_pass *p);
void rm_model_backward_pass(rm_model *m, const rm_model_pass *p);
/* The loss of rows [off, off + rows) after the last unit's forward, into loss_sum (device scalar);
 * the output rows become the loss gradient scaled by inv_batch. */
void rm_model_loss(rm_model *m, int off, int rows, float inv_batch, float *loss_sum);
/* The output rows of unit u from row off (valid until the next pass writes them). */
float *rm_model_output(const rm_model *m, int unit, int off);
/* Row off of the input batch. */
static inline void *rm_model_input(const rm_model *m, int off)
{
    return (char *)m->x + (size_t)off * m->x_row_bytes;
}
/* After forward: m->correct = rows whose prediction equals the label. */
void rm_model_count_correct(rm_model *m, int rows);
/* The named tensors of unit u (family op tensors): up to cap into out; returns the count. */
int rm_model_tensors(const rm_model *m, int u, rm_model_tensor *out, int cap);

/* Units [u0, u1)'s range of the flat buffers. */
static inline size_t rm_model_units_off(const rm_model *m, int u0)
{
    return m->unit[u0].off;
}
static inline size_t rm_model_units_len(const rm_model *m, int u0, int u1)
{
    return m->unit[u1 - 1].off + m->unit[u1 - 1].len - m->unit[u0].off;
}
/* Backward FLOPs over forward FLOPs of a whole-model step. */
double rm_model_bwd_flop_ratio(const rm_model *m);
/* The widest in/out width of any unit (buffers a pipeline stage sizes once). */
int rm_model_widest(const rm_model *m);
/* Bytes of activations for the whole batch: the input rows, every unit's kept activations and the
 * family's backward scratch. */
uint64_t rm_model_act_bytes(const rm_model *m);

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

/* The families built in (worker/model/mlp.c, worker/model/gpt.c). */
extern const rm_model_family rm_model_mlp, rm_model_gpt;
#endif
