/* tj_models_data.c — the rules of the manifest fields docs/models-and-data.md adds (the transformer,
 * the user's data, exported models, tensor parallelism), and the gate that refuses each value whose
 * feature has not landed yet.
 *
 * Design: every field is parsed and range-checked from the start, so the schema's shape is fixed
 * once and a bad value gets its own field-named error today; what is valid but not implemented
 * then answers "<field>: <what> is not supported yet". The gate is the `unsupported` calls below,
 * one per feature: the issue that implements a feature deletes its call and nothing else here.
 * Values that only respell what exists are accepted: data.uri builtin:fashion-mnist or a folder
 * (the deprecated dataset / dataDir), data.format idx, model.type mlp, tensorParallel 1. */
#include "common/tj_internal.h"
#include "common/datasets.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* "<ctx>.<key>: <what> is not supported yet". */
static int unsupported(rm_err *err, const char *ctx, const char *key, const char *fmt, ...) RM_PRINTF(4, 5);
static int unsupported(rm_err *err, const char *ctx, const char *key, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tj_bad(err, ctx, key, "%s is not supported yet", what);
}

const char *tj_data_folder(const char *uri)
{
    return rm_uri_local(uri);
}

/* The forms data.uri, data.validation.uri and model.init.uri may take (models-and-data.md). */
static bool uri_form_ok(const char *uri)
{
    static const char *const prefixes[] = {"builtin:", "/", "file:///", "http://", "https://", "s3://"};
    for (size_t i = 0; i < RM_ARRAY_LEN(prefixes); i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(uri, prefixes[i], n) == 0 && (uri[n] || n == 1))
            return true;
    }
    return false;
}

/* A URI field given (non-NULL): not empty, printable, of a known form. */
static int check_uri(const char *uri, const char *ctx, const char *key, rm_err *err)
{
    if (!uri)
        return RM_OK;
    if (!*uri || strlen(uri) >= RM_TJ_URI_MAX)
        return tj_bad(err, ctx, key, "must be 1 to %d characters", RM_TJ_URI_MAX - 1);
    if (tj_has_ctrl(uri))
        return tj_bad(err, ctx, key, "must not contain control characters");
    if (!uri_form_ok(uri))
        return tj_bad(err, ctx, key,
                      "must be builtin:<name>, /path, file:///path, http(s)://... or "
                      "s3://bucket/key (got \"%s\")",
                      uri);
    return RM_OK;
}

/* An int field that is set (given, or non-zero from C) must lie in [lo, hi]. */
static int check_int(int v, bool given, int lo, int hi, const char *ctx, const char *key, rm_err *err)
{
    if ((given || v != 0) && (v < lo || v > hi))
        return tj_bad(err, ctx, key, "must be between %d and %d (got %d)", lo, hi, v);
    return RM_OK;
}

static int model_validate(const rm_training_spec *t, const char *mctx, rm_err *err)
{
    uint32_t g = t->set2;
    bool gpt = t->model_type && strcmp(t->model_type, rm_model_type_names[RM_MODEL_GPT]) == 0;
    int rc;
    if ((rc = check_int(t->layers, g & RM_TR_SET2_LAYERS, 1, 1024, mctx, "layers", err)) ||
        (rc = check_int(t->heads, g & RM_TR_SET2_HEADS, 1, 1024, mctx, "heads", err)) ||
        (rc = check_int(t->embed, g & RM_TR_SET2_EMBED, 1, 65536, mctx, "embed", err)) ||
        (rc = check_int(t->context, g & RM_TR_SET2_CONTEXT, 1, 1 << 20, mctx, "context", err)) ||
        (rc = check_int(t->vocab, g & RM_TR_SET2_VOCAB, 1, 1 << 24, mctx, "vocab", err)))
        return rc;
    if (!(t->dropout >= 0 && t->dropout < 1))
        return tj_bad(err, mctx, "dropout", "must be >= 0 and < 1");
    if (t->heads > 0 && t->embed > 0 && t->embed % t->heads)
        return tj_bad(err, mctx, "heads", "must divide %s.embed (%d heads, embed %d)", mctx, t->heads,
                      t->embed);
    if (!gpt) {
        static const struct {
            uint32_t bit;
            const char *key;
        } gpt_only[] = {
            {RM_TR_SET2_LAYERS, "layers"},   {RM_TR_SET2_HEADS, "heads"}, {RM_TR_SET2_EMBED, "embed"},
            {RM_TR_SET2_CONTEXT, "context"}, {RM_TR_SET2_VOCAB, "vocab"}, {RM_TR_SET2_DROPOUT, "dropout"},
        };
        const int v[] = {t->layers, t->heads, t->embed, t->context, t->vocab, t->dropout != 0};
        for (size_t i = 0; i < RM_ARRAY_LEN(gpt_only); i++)
            if ((g & gpt_only[i].bit) || v[i])
                return tj_bad(err, mctx, gpt_only[i].key, "is only used with %s.type: gpt (type is %s)", mctx,
                              t->model_type ? t->model_type : "mlp");
    } else {
        static const struct {
            uint32_t bit;
            const char *key;
        } required[] = {
            {RM_TR_SET2_LAYERS, "layers"},
            {RM_TR_SET2_HEADS, "heads"},
            {RM_TR_SET2_EMBED, "embed"},
            {RM_TR_SET2_CONTEXT, "context"},
        };
        const int v[] = {t->layers, t->heads, t->embed, t->context};
        for (size_t i = 0; i < RM_ARRAY_LEN(required); i++)
            if (!v[i])
                return tj_bad(err, mctx, required[i].key, "required with %s.type: gpt", mctx);
    }
    char ictx[FIELD_CAP];
    tj_join(ictx, mctx, "init");
    return check_uri(t->init_uri, ictx, "uri", err);
}

static int data_validate(const rm_training_spec *t, const char *ctx, const char *dctx, rm_err *err)
{
    char sctx[FIELD_CAP], vctx[FIELD_CAP];
    tj_join(sctx, dctx, "secretRef");
    tj_join(vctx, dctx, "validation");
    int rc;
    if ((rc = check_uri(t->data.uri, dctx, "uri", err)))
        return rc;
    /* a folder or the built-in set is the deprecated dataDir / dataset: both given must agree */
    const char *folder = tj_data_folder(t->data.uri);
    if (t->data.uri && t->data_dir && strcmp(t->data_dir, RM_TJ_FASHION_MNIST_DIR) != 0 &&
        (!folder || strcmp(folder, t->data_dir) != 0))
        return tj_bad(err, dctx, "uri",
                      "\"%s\" differs from %s.dataDir \"%s\" (dataDir is its "
                      "deprecated spelling: set only data.uri)",
                      t->data.uri, ctx, t->data_dir);
    if ((unsigned)t->data.format > RM_DATA_TEXT)
        return tj_bad_enum(err, dctx, "format", rm_data_format_names);
    if (t->data.sha256) {
        size_t n = strspn(t->data.sha256, "0123456789abcdef");
        if (n != 64 || t->data.sha256[n])
            return tj_bad(err, dctx, "sha256", "must be 64 lowercase hex digits");
    }
    if (t->data.ca_bundle && (t->data.ca_bundle[0] != '/' || strlen(t->data.ca_bundle) >= 4096))
        return tj_bad(err, dctx, "caBundle",
                      "must be an absolute path of at most 4095 bytes to a PEM file (on Kubernetes a file "
                      "the pod template mounts, e.g. from a ConfigMap; got \"%s\")",
                      t->data.ca_bundle);
    if (t->data.ca_bundle && !rm_uri_fetched(t->data.uri))
        return tj_bad(err, dctx, "caBundle", "only applies to https:// and s3:// data (%s.uri is \"%s\")",
                      dctx, t->data.uri ? t->data.uri : "builtin:fashion-mnist");
    if (t->data.secret && !tj_dns1123(t->data.secret, 1, 253))
        return tj_bad(err, sctx, "name", "must be a Secret name (a DNS-1123 subdomain; got \"%s\")",
                      t->data.secret);
    bool frac = (t->set2 & RM_TR_SET2_FRACTION) || t->data.val_fraction != 0;
    if (frac && !(t->data.val_fraction > 0 && t->data.val_fraction < 1))
        return tj_bad(err, vctx, "fraction", "must be > 0 and < 1");
    if (frac && t->data.val_uri)
        return tj_bad(err, vctx, "uri", "set only one of %s.fraction and %s.uri", vctx, vctx);
    return check_uri(t->data.val_uri, vctx, "uri", err);
}

/* The data format a spec names or implies without reading anything: data.format when given, the
 * built-in set's, IDX for no data.uri (Fashion-MNIST); -1 = decided from the file (a path). */
static int known_format(const rm_training_spec *t)
{
    if (t->set2 & RM_TR_SET2_FORMAT)
        return (int)t->data.format;
    if (!t->data.uri || strcmp(t->data.uri, RM_TJ_BUILTIN_FASHION_MNIST) == 0)
        return RM_DATA_IDX;
    if (strcmp(t->data.uri, RM_TJ_BUILTIN_TINYSHAKESPEARE) == 0)
        return RM_DATA_TEXT;
    return -1;
}

/* A built-in name is known; the model reads what the data holds (gpt: token windows from text or
 * token shards; mlp: IDX images); a validation fraction splits a stream (text, tokens). */
static int model_data_match(const rm_training_spec *t, const char *mctx, const char *dctx, rm_err *err)
{
    if (t->data.uri && strncmp(t->data.uri, "builtin:", 8) == 0 && !rm_builtin_known(t->data.uri))
        return tj_bad(err, dctx, "uri", "unknown built-in data set \"%s\" (builtin:fashion-mnist, %s)",
                      t->data.uri, RM_TJ_BUILTIN_TINYSHAKESPEARE);
    bool gpt = t->model_type && strcmp(t->model_type, rm_model_type_names[RM_MODEL_GPT]) == 0;
    int f = known_format(t);
    if (gpt && f == RM_DATA_IDX)
        return tj_bad(err, mctx, "type",
                      "gpt trains on text or token shards, and %s.uri is IDX images (set %s.uri, e.g. "
                      "%s, or %s.format)",
                      dctx, dctx, RM_TJ_BUILTIN_TINYSHAKESPEARE, dctx);
    if (!gpt && (f == RM_DATA_TEXT || f == RM_DATA_TOKENS))
        return tj_bad(err, mctx, "type", "%s reads IDX images; %s data needs type gpt",
                      t->model_type ? t->model_type : "mlp", rm_enum_name(rm_data_format_names, f));
    bool frac = (t->set2 & RM_TR_SET2_FRACTION) || t->data.val_fraction != 0;
    if (frac && f == RM_DATA_IDX)
        return tj_bad(err, dctx, "validation.fraction",
                      "splits text or token data; IDX sets have their own t10k test files");
    return RM_OK;
}

int tj_validate_models_data(const rm_training_spec *t, const char *ctx, rm_err *err)
{
    char mctx[FIELD_CAP], dctx[FIELD_CAP];
    tj_join(mctx, ctx, "model");
    tj_join(dctx, ctx, "data");
    uint32_t g = t->set2;
    int rc;
    if ((rc = model_validate(t, mctx, err)) || (rc = data_validate(t, ctx, dctx, err)))
        return rc;
    if ((g & RM_TR_SET2_GRAD_CLIP || t->grad_clip != 0) && !(t->grad_clip > 0 && isfinite(t->grad_clip)))
        return tj_bad(err, ctx, "gradClip", "must be > 0");
    if ((rc = check_int(t->grad_accum, g & RM_TR_SET2_GRAD_ACCUM, 1, 65536, ctx, "gradientAccumulationSteps",
                        err)) ||
        (rc = check_int(t->warmup_steps, false, 0, INT32_MAX, ctx, "warmupSteps", err)) ||
        (rc = check_int(t->eval_every_steps, false, 0, INT32_MAX, ctx, "evalEverySteps", err)))
        return rc;

    if ((rc = model_data_match(t, mctx, dctx, err)))
        return rc;

    /* the gate: one line per feature still to land */
    if (t->dropout > 0)
        return unsupported(err, mctx, "dropout", "dropout > 0");
    /* local weights are read, remote ones fetched first (worker/model/export.h) */
    if (t->init_uri && !tj_data_folder(t->init_uri) && !rm_uri_fetched(t->init_uri))
        return unsupported(err, mctx, "init.uri", "\"%s\"", t->init_uri);
    bool fetched = rm_uri_fetched(t->data.uri);
    if (t->data.uri && !tj_data_folder(t->data.uri) && strncmp(t->data.uri, "builtin:", 8) != 0 && !fetched)
        return unsupported(err, dctx, "uri", "\"%s\"", t->data.uri);
    if (t->data.sha256 && !fetched) /* fetched data is checked (common/fetch.h) */
        return unsupported(err, dctx, "sha256", "checking the checksum of data that is not fetched");
    if (t->data.val_uri)
        return unsupported(err, dctx, "validation.uri", "a validation split");
    return RM_OK;
}

/* T divides what it splits, T x P divides every replica count, a node holds whole tensor groups
 * (docs/models-and-data.md, "Tensor parallelism"); then the gate for what T > 1 does not run yet.
 * The MLP's layers pair up from the first, column-parallel then row-parallel: the widths split are
 * the outputs of the column layers, model.hidden[0], [2], ...; a last unpaired layer (an even
 * count of hidden widths) is replicated on every tensor rank (worker/tensor/tp_mlp.h). The
 * transformer splits its heads and its MLP's 4 x embed neurons (worker/tensor/tp_gpt.h; the
 * vocabulary is padded to a multiple of T, so it needs no rule). With pipeline stages (T x P, the
 * MLP) a stage holds whole pairs, so P is at most the pairs (an odd last layer counts as one); for
 * the transformer whole blocks, one micro-batch a step. */
int tj_validate_tensor_parallel(const rm_tj_spec *s, rm_err *err)
{
    const rm_par_spec *par = &s->par;
    const char *P = "spec.parallelism", *M = "spec.training.model";
    int rc = check_int(par->tensor_parallel, par->set & RM_PAR_SET_TENSOR, 1, RM_TJ_MAX_REPLICAS, P,
                       "tensorParallel", err);
    int T = par->tensor_parallel;
    if (rc || T <= 1)
        return rc;
    int stages = par->pipeline_stages > 1 ? par->pipeline_stages : 1, TP = T * stages;
    const rm_training_spec *t = &s->training;
    bool gpt = t->model_type && strcmp(t->model_type, rm_model_type_names[RM_MODEL_GPT]) == 0;
    if (gpt && t->heads > 0 && t->heads % T)
        return tj_bad(err, M, "heads",
                      "must be a multiple of %s.tensorParallel (%d): each tensor rank holds heads/%d "
                      "whole heads (got %d)",
                      P, T, T, t->heads);
    if (gpt && t->embed > 0 && (4 * t->embed) % T)
        return tj_bad(err, M, "embed",
                      "4 x embed must be a multiple of %s.tensorParallel (%d): the MLP's 4 x embed "
                      "neurons are split across the tensor ranks (got embed %d)",
                      P, T, t->embed);
    if (!gpt && t->nhidden < 1)
        return tj_bad(err, M, "hidden",
                      "needs at least one width with %s.tensorParallel %d: the hidden neurons are what "
                      "the tensor ranks split",
                      P, T);
    for (int i = 0; !gpt && i < t->nhidden; i += 2)
        if (t->hidden[i] % T) {
            char key[32];
            snprintf(key, sizeof key, "hidden[%d]", i);
            return tj_bad(err, M, key,
                          "must be a multiple of %s.tensorParallel (%d): its neurons are split across "
                          "the tensor ranks (got %d)",
                          P, T, t->hidden[i]);
        }
    static const char *const counts[] = {"replicas", "minReplicas", "maxReplicas"};
    const int v[] = {s->replicas, s->min_replicas, s->max_replicas};
    for (int i = 0; i < 3; i++)
        if (v[i] % TP)
            return tj_bad(err, "spec", counts[i],
                          "must be a multiple of %s.tensorParallel x pipelineStages (%d x %d = %d): the "
                          "workers form a grid of tensor x pipeline x data-parallel ranks (got %d)",
                          P, T, stages, TP, v[i]);
    if (s->placement.present && s->placement.workers_per_node > 0 && s->placement.workers_per_node % T)
        return tj_bad(err, "spec.placement", "workersPerNode",
                      "must be a multiple of %s.tensorParallel (%d): a tensor group's ranks share a "
                      "node (got %d)",
                      P, T, s->placement.workers_per_node);
    /* the gate: what T > 1 does not run yet */
    if (stages > 1 && gpt && t->layers > 0 && stages > t->layers)
        return tj_bad(err, P, "pipelineStages",
                      "must be <= the model's %d layers with %s.tensorParallel %d: a stage holds whole "
                      "blocks (got %d)",
                      t->layers, P, T, stages);
    if (stages > 1 && gpt && par->micro_batches > 1)
        return unsupported(
            err, P, "microBatches",
            "%d with tensorParallel and pipelineStages > 1 for the transformer (one micro-batch "
            "a step in this version)",
            par->micro_batches);
    if (stages > 1 && !gpt && stages > (t->nhidden + 2) / 2)
        return tj_bad(err, P, "pipelineStages",
                      "must be <= the model's %d layer pairs with %s.tensorParallel %d: a stage holds "
                      "whole pairs, column- then row-parallel (got %d)",
                      (t->nhidden + 2) / 2, P, T, stages);
    if (s->strategy != RM_STRATEGY_ALLREDUCE)
        return tj_bad(err, P, "tensorParallel", "must be 1 with spec.strategy: parameterServer (got %d)", T);
    if (t->sharding != RM_SHARD_NONE &&
        t->sharding != RM_SHARD_OPTIMIZER) /* ZeRO-1 shards the pieces' state */
        return tj_bad(err, "spec.training", "sharding",
                      "must be none or optimizer with %s.tensorParallel > 1: the split's backward writes "
                      "the pieces' whole gradient (got %s)",
                      P, rm_enum_name(rm_sharding_names, (int)t->sharding));
    if (t->precision != RM_PREC_FP32)
        return unsupported(err, "spec.training", "precision", "%s with %s.tensorParallel > 1",
                           rm_enum_name(rm_precision_names, (int)t->precision), P);
    if (t->mode != RM_MODE_TRAIN)
        return tj_bad(err, "spec.training", "mode", "must be train with %s.tensorParallel > 1", P);
    if (s->backend == RM_BACKEND_MPI || s->backend == RM_BACKEND_NCCL)
        return unsupported(err, "spec", "backend", "%s with %s.tensorParallel > 1 (use auto or ring)",
                           rm_backend_name(s->backend), P);
    return RM_OK; /* the MLP's and the transformer's splits (worker/tensor/step_tensor.c) */
}

int tj_validate_output(const rm_tj_spec *s, rm_err *err)
{
    if (!s->output.present)
        return RM_OK;
    const char *u = s->output.uri;
    int rc = u && *u && !tj_has_ctrl(u) && strlen(u) < RM_TJ_URI_MAX
                 ? RM_OK
                 : check_uri(u, "spec.output", "uri", err);
    if (rc)
        return rc;
    /* where a model can be written: a folder, or an S3 prefix */
    if (u && !(u[0] == '/' || (strncmp(u, "file:///", 8) == 0 && u[8]) || strncmp(u, "s3://", 5) == 0))
        return tj_bad(err, "spec.output", "uri",
                      "must be a folder, file:///path or s3://bucket/prefix "
                      "(got \"%s\")",
                      u);
    if (u && strncmp(u, "s3://", 5) == 0 && (u[5] == '/' || !u[5]))
        return tj_bad(err, "spec.output", "uri", "must name a bucket: s3://bucket/prefix (got \"%s\")", u);
    if ((unsigned)s->output.format > RM_OUT_SAFETENSORS)
        return tj_bad_enum(err, "spec.output", "format", rm_output_format_names);
    if ((unsigned)s->output.dtype > RM_DTYPE_BFLOAT16)
        return tj_bad_enum(err, "spec.output", "dtype", rm_output_dtype_names);
    return RM_OK; /* written at the end of a run (worker/train_state.c, rm_tr_export) */
}
