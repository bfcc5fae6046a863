/* export.h — a model's weights to and from a folder other tools load (docs/models-and-data.md,
 * "Exported models"): `model.safetensors` holding every named tensor of the model (the family's
 * names, e.g. Hugging Face GPT2LMHeadModel's for gpt and nn.Linear's for mlp) and `config.json`
 * (the family's config_json).
 *
 * Layouts: a tensor whose layout is "in_out" (a Linear weight kept [in x out] in the flat buffer)
 * is written transposed, [out x in], as PyTorch's nn.Linear holds it; "" is written as it is. A
 * tensor two units read (GPT's tied head) is listed once by its family and so written once.
 *
 * Import reads the same files (spec.training.model.init.uri, `ringmaster sample --model`): every
 * tensor the model names must be present with exactly the shape export writes and a float dtype
 * (F32, BF16 or F16, converted to fp32 by worker/gpu.h's conversions); a tensor the model does not name is an error naming it,
 * except the buffers Hugging Face checkpoints carry beside GPT-2's weights (`*.attn.bias`,
 * `*.attn.masked_bias`) and a `lm_head.weight` shaped like `transformer.wte.weight` (the tied
 * head's copy, which the model reads from wte). Error messages name the file, the tensor and
 * what is wrong, without a field: the caller prefixes the setting it came from
 * (spec.training.model.init.uri, --model).
 *
 * Ownership: paths and the model are borrowed for the call; rm_model_weights owns its mapping
 * and tables (rm_model_weights_close, idempotent, zeroed struct ok). Host byte order is assumed
 * little-endian, as the format's is. */
#ifndef RM_WORKER_MODEL_EXPORT_H
#define RM_WORKER_MODEL_EXPORT_H
#include <stddef.h>
#include "common/rm.h"
#include "common/safetensors.h"
#include "common/trainingjob.h"
#include "worker/model/model.h"

#define RM_EXPORT_WEIGHTS "model.safetensors"
#define RM_EXPORT_CONFIG "config.json"
/* config.json is read up to this size */
#define RM_EXPORT_CONFIG_MAX (1u << 20)

/* Write dir/model.safetensors and dir/config.json (dir made with mkdir -p), each atomically:
 * m's named tensors over every unit from host_params (nparams floats, host memory) in dtype
 * (float32 exact; bfloat16 rounded to nearest even), __metadata__ {"format": "pt"}.
 * RM_EUNSUPPORTED for a family without names or config; RM_EIO naming the path; RM_ENOMEM. */
int rm_model_export(const rm_model *m, const float *host_params, const char *dir, rm_output_dtype dtype,
                    rm_err *err);

/* The weights file a path names: path itself, or path/model.safetensors when path is a folder.
 * RM_EINVAL when it does not fit cap. */
int rm_model_weights_path(const char *path_or_dir, char *out, size_t cap, rm_err *err);

/* A weights file validated against a model: for each of the model's tensors (rm_model_tensors
 * order over every unit), the file's tensor that fills it. */
typedef struct rm_model_weights {
    rm_st_file f;
    char path[4096];
    int n;
    rm_model_tensor *t;       /* the model's tensors */
    const rm_st_tensor **src; /* the file's tensor for each */
} rm_model_weights;

/* Map path_or_dir's weights file and check it against m (see the top of this file). RM_EIO for a
 * file that cannot be read, RM_EINVAL for one that does not fit m; *w is zeroed on failure. */
int rm_model_weights_open(const rm_model *m, const char *path_or_dir, rm_model_weights *w, rm_err *err);
/* Units [u0, u1)'s parameters from w into host (floats of that range, starting at unit[u0].off),
 * converted to fp32 and laid out as the flat buffer keeps them. */
void rm_model_weights_fill(const rm_model *m, const rm_model_weights *w, int u0, int u1, float *host);
void rm_model_weights_close(rm_model_weights *w);

/* rm_model_weights_open, fill every unit into host_params (nparams floats), close. */
int rm_model_import(const rm_model *m, const char *path_or_dir, float *host_params, rm_err *err);

/* The model a config.json describes: path_or_dir is the folder holding it, or a weights file
 * beside it. model_type "gpt2" is the gpt family, "ringmaster-mlp" the mlp; the family's
 * shape_from_config reads the rest. RM_ENOTFOUND when there is no config.json, RM_EINVAL naming
 * the file and the key. */
int rm_model_config_read(const char *path_or_dir, rm_model_shape *shape, const rm_model_family **fam,
                         rm_err *err);

/* The local path a model.init.uri names: "/path" or "file:///path" (the path part), else NULL
 * (remote forms, http(s):// and s3://, are fetched by rm_model_init_weights_open). */
const char *rm_model_init_path(const char *uri);
/* spec.training.model.init.uri for model m: the local weights checked against m (and, when a
 * config.json lies beside them, its family and shape against m's, so a transformer with another
 * head count is refused though its tensors have the same shapes). Every error is field-named
 * "spec.training.model.init.uri: ...". A remote URI (http(s)://, s3://) is fetched into the data
 * cache first (common/fetch.h; RINGMASTER_DATA_CACHE): one ending in '/' is an export folder
 * (model.safetensors and config.json), else the weights file. */
int rm_model_init_weights_open(const rm_model *m, const char *uri, rm_model_weights *w, rm_err *err);
#endif
