/* trainingjob.c — the TrainingJob type: its names, strict parse, defaults, serialization and copy
 * (see trainingjob.h and docs/trainingjob-api.md). Validation is in tj_validate.c, the
 * memory estimate in tj_memory.c, status and conditions in tj_status.c, the field getters in
 * tj_json.c.
 *
 * Design: one table of names per enum and one small parser per JSON object, each of which first
 * rejects unknown keys (so a typo like "spec.training.epoch" is an error naming its path, not a
 * silently ignored knob) and then reads its fields through the typed getters of json.h, which
 * name the field on a wrong type. Parsing builds into a zeroed struct and never applies defaults;
 * optional fields whose zero is meaningful record their presence in a `set` mask so defaults
 * never overwrite an explicit 0 (maxRestarts: 0, momentum: 0, seed: 0 ...). Validation returns the
 * first violation with err->field set to the exact path. Serialization omits unset fields, so
 * to_json(from_json(x)) == x for any x, defaulted or not. */
#include "common/tj_internal.h"
#include "common/quantity.h"
#include "common/json.h"
#include "common/tj_runtime.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const rm_clean_policy_names[] = {"Running", "All", "None", NULL};
const char *const rm_mode_names[] = {"train", "bench", NULL};
const char *const rm_schedule_names[] = {"cosine", "step", "constant", NULL};
const char *const rm_opt_names[] = {"sgd", "adam", "adagrad", "lbfgs", "lamb", "lars", "adamw", NULL};
const char *const rm_model_type_names[] = {"mlp", "gpt", NULL};
const char *const rm_data_format_names[] = {"idx", "tokens", "text", NULL};
const char *const rm_output_format_names[] = {"safetensors", NULL};
const char *const rm_output_dtype_names[] = {"float32", "bfloat16", NULL};
const char *const rm_line_search_names[] = {"armijo", "fixed", NULL};
const char *const rm_sharding_names[] = {"none", "optimizer", "gradients", "full", NULL};
const char *const rm_allreduce_names[] = {"auto", "ring", "hierarchical", NULL};
const char *const rm_phase_names[] = {"Pending", "Running",   "Restarting", "Succeeded",
                                      "Failed",  "Suspended", NULL};
const char *const rm_cond_names[] = {
    "Created",           "Running",     "Restarting",    "Succeeded", "Failed", "Suspended",
    "CheckpointFailing", "InvalidSpec", "ExportFailing", "Blocked",   NULL};

static void add_str(cJSON *o, const char *k, const char *v)
{
    if (v)
        cJSON_AddStringToObject(o, k, v);
}

/* Optional numbers are written when non-zero or given explicitly (so an explicit 0 survives a
 * round trip and an unset field stays unset). */
static void add_num(cJSON *o, const char *k, double v, bool given)
{
    if (v != 0 || given)
        cJSON_AddNumberToObject(o, k, v);
}

/* {uri: "..."} under o's key k (model.init): *uri replaced with an owned copy when given. */
static int uri_obj(const cJSON *o, const char *k, const char *ctx, char **uri, rm_err *err)
{
    static const char *const k_uri[] = {"uri", NULL};
    char sub[FIELD_CAP];
    const cJSON *u;
    int rc = tj_obj(o, k, ctx, k_uri, &u, sub, err);
    if (rc == RM_OK && u)
        rc = tj_str(u, "uri", sub, uri, err);
    return rc;
}

/* spec.training.data (docs/models-and-data.md). */
static int data_from_json(const cJSON *tr, const char *ctx, rm_training_spec *t, rm_err *err)
{
    static const char *const k_data[] = {"uri",      "format",     "sha256", "secretRef",
                                         "caBundle", "validation", NULL};
    static const char *const k_secret[] = {"name", NULL};
    static const char *const k_val[] = {"fraction", "uri", NULL};
    char dctx[FIELD_CAP], sctx[FIELD_CAP], vctx[FIELD_CAP];
    const cJSON *d, *o;
    int rc = RM_OK, iv = 0;
    TRY(tj_obj(tr, "data", ctx, k_data, &d, dctx, err));
    if (!d)
        return RM_OK;
    TRY(tj_str(d, "uri", dctx, &t->data.uri, err));
    TRY(tj_enum(d, "format", dctx, rm_data_format_names, &iv, err));
    if (cJSON_GetObjectItemCaseSensitive(d, "format")) {
        t->data.format = (rm_data_format)iv;
        t->set2 |= RM_TR_SET2_FORMAT;
    }
    TRY(tj_str(d, "sha256", dctx, &t->data.sha256, err));
    TRY(tj_str(d, "caBundle", dctx, &t->data.ca_bundle, err));
    TRY(tj_obj(d, "secretRef", dctx, k_secret, &o, sctx, err));
    if (o) {
        const char *name;
        TRY(rm_json_str(o, "name", true, sctx, &name, err)); /* required */
        TRY(tj_str(o, "name", sctx, &t->data.secret, err));
    }
    TRY(tj_obj(d, "validation", dctx, k_val, &o, vctx, err));
    if (o) {
        TRY(tj_num(o, "fraction", vctx, &t->data.val_fraction, &t->set2, RM_TR_SET2_FRACTION, err));
        TRY(tj_str(o, "uri", vctx, &t->data.val_uri, err));
    }
out:
    return rc;
}

/* ---- training ---------------------------------------------------------------------------------- */

int rm_training_from_json(const cJSON *tr, const char *ctx, rm_training_spec *t, rm_err *err)
{
    static const char *const k_training[] = {"mode",
                                             "dataset",
                                             "dataDir",
                                             "model",
                                             "epochs",
                                             "batchSizePerWorker",
                                             "optimizer",
                                             "warmupEpochs",
                                             "schedule",
                                             "stepGamma",
                                             "stepEveryEpochs",
                                             "precision",
                                             "fusionBufferMB",
                                             "seed",
                                             "maxSteps",
                                             "bench",
                                             "sharding",
                                             "allreduce",
                                             "data",
                                             "gradClip",
                                             "gradientAccumulationSteps",
                                             "warmupSteps",
                                             "evalEverySteps",
                                             NULL};
    static const char *const k_model[] = {"type",    "hidden", "layers",  "heads", "embed",
                                          "context", "vocab",  "dropout", "init",  NULL};
    static const char *const k_opt[] = {"type", "lr",      "momentum", "weightDecay", "beta1", "beta2",
                                        "eps",  "history", "portions", "lineSearch",  NULL};
    static const char *const k_bench[] = {"minBytes",    "maxBytes", "stepFactor", "iters",
                                          "warmupIters", "check",    NULL};
    char mctx[FIELD_CAP], octx[FIELD_CAP], bctx[FIELD_CAP];
    const cJSON *model, *opt, *bench, *hidden;
    int rc = RM_OK, iv;
    memset(t, 0, sizeof *t);
    if (!ctx)
        ctx = "spec.training";
    if (!tr || cJSON_IsNull(tr))
        return RM_OK;
    if (!cJSON_IsObject(tr))
        return rm_err_field(err, RM_EINVAL, ctx, "must be an object");
    TRY(rm_json_no_unknown(tr, k_training, ctx, err));
    iv = (int)t->mode;
    TRY(tj_enum(tr, "mode", ctx, rm_mode_names, &iv, err));
    t->mode = (rm_mode)iv;
    TRY(tj_str(tr, "dataset", ctx, &t->dataset, err));
    TRY(tj_str(tr, "dataDir", ctx, &t->data_dir, err));
    TRY(tj_obj(tr, "model", ctx, k_model, &model, mctx, err));
    if (model) {
        TRY(tj_str(model, "type", mctx, &t->model_type, err));
        TRY(tj_int(model, "layers", mctx, &t->layers, &t->set2, RM_TR_SET2_LAYERS, err));
        TRY(tj_int(model, "heads", mctx, &t->heads, &t->set2, RM_TR_SET2_HEADS, err));
        TRY(tj_int(model, "embed", mctx, &t->embed, &t->set2, RM_TR_SET2_EMBED, err));
        TRY(tj_int(model, "context", mctx, &t->context, &t->set2, RM_TR_SET2_CONTEXT, err));
        TRY(tj_int(model, "vocab", mctx, &t->vocab, &t->set2, RM_TR_SET2_VOCAB, err));
        TRY(tj_num(model, "dropout", mctx, &t->dropout, &t->set2, RM_TR_SET2_DROPOUT, err));
        TRY(uri_obj(model, "init", mctx, &t->init_uri, err));
        TRY(tj_arr(model, "hidden", mctx, &hidden, err));
        if (hidden) {
            char hctx[FIELD_CAP];
            tj_join(hctx, mctx, "hidden");
            int n = cJSON_GetArraySize(hidden);
            if (n > RM_TJ_MAX_HIDDEN) {
                rc = rm_err_field(err, RM_EINVAL, hctx, "at most %d layers", RM_TJ_MAX_HIDDEN);
                goto out;
            }
            int i = 0;
            for (const cJSON *h = hidden->child; h; h = h->next, i++) {
                double v = h->valuedouble;
                if (!cJSON_IsNumber(h) || v != floor(v) || !isfinite(v)) {
                    char f[FIELD_CAP + 16];
                    snprintf(f, sizeof f, "%s[%d]", hctx, i);
                    rc = rm_err_field(err, RM_EINVAL, f,
                                      cJSON_IsNumber(h) && !isfinite(v) ? "must be a finite number"
                                                                        : "must be an integer");
                    goto out;
                }
                t->hidden[i] = v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v;
            }
            t->nhidden = n;
            t->set |= RM_TR_SET_HIDDEN;
        }
    }
    TRY(data_from_json(tr, ctx, t, err));
    TRY(tj_num(tr, "gradClip", ctx, &t->grad_clip, &t->set2, RM_TR_SET2_GRAD_CLIP, err));
    TRY(tj_int(tr, "gradientAccumulationSteps", ctx, &t->grad_accum, &t->set2, RM_TR_SET2_GRAD_ACCUM, err));
    TRY(tj_int(tr, "warmupSteps", ctx, &t->warmup_steps, &t->set2, RM_TR_SET2_WARMUP_STEPS, err));
    TRY(tj_int(tr, "evalEverySteps", ctx, &t->eval_every_steps, &t->set2, RM_TR_SET2_EVAL_EVERY, err));
    TRY(tj_int(tr, "epochs", ctx, &t->epochs, &t->set, RM_TR_SET_EPOCHS, err));
    TRY(tj_int(tr, "batchSizePerWorker", ctx, &t->batch_size_per_worker, &t->set, RM_TR_SET_BATCH, err));
    TRY(tj_obj(tr, "optimizer", ctx, k_opt, &opt, octx, err));
    if (opt) {
        iv = (int)t->optimizer.type;
        TRY(tj_enum(opt, "type", octx, rm_opt_names, &iv, err));
        t->optimizer.type = (rm_opt_type)iv;
        TRY(tj_num(opt, "lr", octx, &t->optimizer.lr, &t->set, RM_TR_SET_LR, err));
        TRY(tj_num(opt, "momentum", octx, &t->optimizer.momentum, &t->set, RM_TR_SET_MOMENTUM, err));
        TRY(tj_num(opt, "weightDecay", octx, &t->optimizer.weight_decay, NULL, 0, err));
        TRY(tj_num(opt, "beta1", octx, &t->optimizer.beta1, &t->set, RM_TR_SET_BETA1, err));
        TRY(tj_num(opt, "beta2", octx, &t->optimizer.beta2, &t->set, RM_TR_SET_BETA2, err));
        TRY(tj_num(opt, "eps", octx, &t->optimizer.eps, &t->set, RM_TR_SET_EPS, err));
        TRY(tj_int(opt, "history", octx, &t->optimizer.history, &t->set, RM_TR_SET_HISTORY, err));
        TRY(tj_int(opt, "portions", octx, &t->optimizer.portions, &t->set, RM_TR_SET_PORTIONS, err));
        iv = (int)t->optimizer.line_search;
        TRY(tj_enum(opt, "lineSearch", octx, rm_line_search_names, &iv, err));
        t->optimizer.line_search = (rm_line_search)iv;
        if (cJSON_GetObjectItemCaseSensitive(opt, "lineSearch"))
            t->optimizer.line_search_given = true;
    }
    TRY(tj_num(tr, "warmupEpochs", ctx, &t->warmup_epochs, &t->set, RM_TR_SET_WARMUP, err));
    iv = (int)t->schedule;
    TRY(tj_enum(tr, "schedule", ctx, rm_schedule_names, &iv, err));
    t->schedule = (rm_schedule)iv;
    TRY(tj_num(tr, "stepGamma", ctx, &t->step_gamma, &t->set, RM_TR_SET_STEP_GAMMA, err));
    TRY(tj_int(tr, "stepEveryEpochs", ctx, &t->step_every_epochs, &t->set, RM_TR_SET_STEP_EVERY, err));
    iv = (int)t->precision;
    TRY(tj_enum(tr, "precision", ctx, rm_precision_names, &iv, err));
    t->precision = (rm_precision)iv;
    TRY(tj_num(tr, "fusionBufferMB", ctx, &t->fusion_buffer_mb, &t->set, RM_TR_SET_FUSION, err));
    iv = (int)t->sharding;
    TRY(tj_enum(tr, "sharding", ctx, rm_sharding_names, &iv, err));
    t->sharding = (rm_sharding)iv;
    iv = (int)t->allreduce;
    TRY(tj_enum(tr, "allreduce", ctx, rm_allreduce_names, &iv, err));
    t->allreduce = (rm_allreduce_algo)iv;
    {
        int64_t seed = 0;
        uint32_t s = 0;
        TRY(tj_i64(tr, "seed", ctx, &seed, &s, 1, err));
        if (s) {
            if (seed < 0) {
                char f[FIELD_CAP];
                tj_join(f, ctx, "seed");
                rc = rm_err_field(err, RM_EINVAL, f, "must be >= 0");
                goto out;
            }
            t->seed = (uint64_t)seed;
            t->set |= RM_TR_SET_SEED;
        }
    }
    TRY(tj_int(tr, "maxSteps", ctx, &t->max_steps, NULL, 0, err));
    TRY(tj_obj(tr, "bench", ctx, k_bench, &bench, bctx, err));
    if (bench) {
        TRY(tj_i64(bench, "minBytes", bctx, &t->bench_min_bytes, &t->set, RM_TR_SET_BENCH_MIN, err));
        TRY(tj_i64(bench, "maxBytes", bctx, &t->bench_max_bytes, &t->set, RM_TR_SET_BENCH_MAX, err));
        TRY(tj_int(bench, "stepFactor", bctx, &t->bench_factor, &t->set, RM_TR_SET_BENCH_FACTOR, err));
        TRY(tj_int(bench, "iters", bctx, &t->bench_iters, &t->set, RM_TR_SET_BENCH_ITERS, err));
        TRY(tj_int(bench, "warmupIters", bctx, &t->bench_warmup, &t->set, RM_TR_SET_BENCH_WARMUP, err));
        TRY(tj_bool(bench, "check", bctx, &t->bench_check, &t->set, RM_TR_SET_BENCH_CHECK, err));
    }
out:
    if (rc)
        rm_training_free(t);
    return rc;
}

void rm_training_free(rm_training_spec *t)
{
    if (!t)
        return;
    free(t->dataset);
    free(t->data_dir);
    free(t->model_type);
    free(t->init_uri);
    free(t->data.uri);
    free(t->data.sha256);
    free(t->data.secret);
    free(t->data.val_uri);
    free(t->data.ca_bundle);
    memset(t, 0, sizeof *t);
}

static char *dup_default(char *cur, const char *def)
{
    return cur ? cur : strdup(def);
}

/* A field gets its default only when it was not given and is still zero. */
#define UNSET(setmask, bit, v) (!((setmask) & (bit)) && (v) == 0)

void rm_training_defaults(rm_training_spec *t)
{
    if (!t)
        return;
    uint32_t m = t->set;
    t->dataset = dup_default(t->dataset, "fashion-mnist");
    /* data.uri naming a folder is the deprecated dataDir (what the worker reads today) */
    if (!t->data_dir && tj_data_folder(t->data.uri))
        t->data_dir = strdup(tj_data_folder(t->data.uri));
    t->data_dir = dup_default(t->data_dir, RM_TJ_FASHION_MNIST_DIR);
    t->model_type = dup_default(t->model_type, "mlp");
    if (UNSET(m, RM_TR_SET_HIDDEN, t->nhidden)) {
        t->hidden[0] = 512;
        t->hidden[1] = 256;
        t->nhidden = 2;
    }
    if (UNSET(m, RM_TR_SET_EPOCHS, t->epochs))
        t->epochs = 10;
    if (UNSET(m, RM_TR_SET_BATCH, t->batch_size_per_worker))
        t->batch_size_per_worker = 64;
    rm_optimizer_spec *o = &t->optimizer;
    if (UNSET(m, RM_TR_SET_LR, o->lr))
        o->lr = o->type == RM_OPT_ADAM || o->type == RM_OPT_ADAMW || o->type == RM_OPT_LAMB ? 0.001
                : o->type == RM_OPT_ADAGRAD                                                 ? 0.01
                : o->type == RM_OPT_LBFGS                                                   ? 1.0
                                                                                            : 0.02;
    if (o->type == RM_OPT_LBFGS && UNSET(m, RM_TR_SET_HISTORY, o->history))
        o->history = 10;
    if (o->type == RM_OPT_LBFGS && UNSET(m, RM_TR_SET_PORTIONS, o->portions))
        o->portions = 64;
    if (UNSET(m, RM_TR_SET_MOMENTUM, o->momentum) && (o->type == RM_OPT_SGD || o->type == RM_OPT_LARS))
        o->momentum = 0.9;
    if (UNSET(m, RM_TR_SET_BETA1, o->beta1))
        o->beta1 = 0.9;
    if (UNSET(m, RM_TR_SET_BETA2, o->beta2))
        o->beta2 = 0.999;
    if (UNSET(m, RM_TR_SET_EPS, o->eps))
        o->eps = o->type == RM_OPT_ADAGRAD ? 1e-10
                 : o->type == RM_OPT_LAMB  ? 1e-6
                                           : 1e-8; /* LAMB: You et al. */
    if (UNSET(m, RM_TR_SET_WARMUP, t->warmup_epochs))
        t->warmup_epochs = 1;
    if (UNSET(m, RM_TR_SET_STEP_GAMMA, t->step_gamma))
        t->step_gamma = 0.1;
    if (UNSET(m, RM_TR_SET_STEP_EVERY, t->step_every_epochs))
        t->step_every_epochs = 3;
    if (UNSET(m, RM_TR_SET_FUSION, t->fusion_buffer_mb))
        t->fusion_buffer_mb = 25;
    if (UNSET(m, RM_TR_SET_SEED, t->seed))
        t->seed = 42;
    if (UNSET(m, RM_TR_SET_BENCH_MIN, t->bench_min_bytes))
        t->bench_min_bytes = 32 << 20;
    if (UNSET(m, RM_TR_SET_BENCH_MAX, t->bench_max_bytes))
        t->bench_max_bytes = t->bench_min_bytes > (32 << 20) ? t->bench_min_bytes : 32 << 20;
    if (UNSET(m, RM_TR_SET_BENCH_FACTOR, t->bench_factor))
        t->bench_factor = 2;
    if (UNSET(m, RM_TR_SET_BENCH_ITERS, t->bench_iters))
        t->bench_iters = 20;
    if (UNSET(m, RM_TR_SET_BENCH_WARMUP, t->bench_warmup))
        t->bench_warmup = 5;
    if (UNSET(m, RM_TR_SET_BENCH_CHECK, t->bench_check))
        t->bench_check = true;
    if (!(t->set2 & RM_TR_SET2_GRAD_ACCUM) && t->grad_accum == 0) {
        t->grad_accum = 1;
        t->set2 |= RM_TR_SET2_GRAD_ACCUM;
    }
    /* everything is concrete now: a second call changes nothing (set2's other fields have no
     * default: unset stays unset) */
    t->set = 0x7ffffu;
}

/* ---- spec.strategy / spec.parameterServer (docs/strategies.md#parameter-servers) ------------------------------ */

const char *const rm_strategy_names[] = {"allreduce", "parameterServer", NULL};
const char *const rm_ps_mode_names[] = {"sync", "async", NULL};

int rm_ps_from_json(const cJSON *o, const char *ctx, rm_ps_spec *ps, rm_err *err)
{
    static const char *const k_ps[] = {
        "replicas",       "mode", "backupWorkers", "stalenessBound", "pushEverySteps", "fetchEverySteps",
        "warmStartSteps", NULL};
    int rc = rm_json_no_unknown(o, k_ps, ctx, err), iv;
    if (rc)
        return rc;
    ps->present = true;
    TRY(tj_int(o, "replicas", ctx, &ps->replicas, &ps->set, RM_PS_SET_REPLICAS, err));
    iv = (int)ps->mode;
    TRY(tj_enum(o, "mode", ctx, rm_ps_mode_names, &iv, err));
    if (cJSON_GetObjectItemCaseSensitive(o, "mode"))
        ps->set |= RM_PS_SET_MODE;
    ps->mode = (rm_ps_mode)iv;
    TRY(tj_int(o, "backupWorkers", ctx, &ps->backup_workers, &ps->set, RM_PS_SET_BACKUP, err));
    TRY(tj_int(o, "stalenessBound", ctx, &ps->staleness_bound, &ps->set, RM_PS_SET_STALENESS, err));
    TRY(tj_int(o, "pushEverySteps", ctx, &ps->push_every_steps, &ps->set, RM_PS_SET_PUSH, err));
    TRY(tj_int(o, "fetchEverySteps", ctx, &ps->fetch_every_steps, &ps->set, RM_PS_SET_FETCH, err));
    TRY(tj_int(o, "warmStartSteps", ctx, &ps->warm_start_steps, &ps->set, RM_PS_SET_WARM, err));
out:
    return rc;
}

void rm_ps_defaults(rm_ps_spec *ps)
{
    uint32_t m = ps->set;
    if (!(m & RM_PS_SET_REPLICAS) && ps->replicas == 0)
        ps->replicas = 1;
    if (!(m & RM_PS_SET_STALENESS) && ps->staleness_bound == 0)
        ps->staleness_bound = 4;
    if (!(m & RM_PS_SET_PUSH) && ps->push_every_steps == 0)
        ps->push_every_steps = 1;
    if (!(m & RM_PS_SET_FETCH) && ps->fetch_every_steps == 0)
        ps->fetch_every_steps = 1;
}

cJSON *rm_ps_to_json(const rm_ps_spec *ps)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    uint32_t m = ps->set;
    add_num(o, "replicas", ps->replicas, m & RM_PS_SET_REPLICAS);
    if (ps->mode != RM_PS_SYNC || (m & RM_PS_SET_MODE))
        cJSON_AddStringToObject(o, "mode", rm_ps_mode_names[ps->mode == RM_PS_ASYNC]);
    add_num(o, "backupWorkers", ps->backup_workers, m & RM_PS_SET_BACKUP);
    add_num(o, "stalenessBound", ps->staleness_bound, m & RM_PS_SET_STALENESS);
    add_num(o, "pushEverySteps", ps->push_every_steps, m & RM_PS_SET_PUSH);
    add_num(o, "fetchEverySteps", ps->fetch_every_steps, m & RM_PS_SET_FETCH);
    add_num(o, "warmStartSteps", ps->warm_start_steps, m & RM_PS_SET_WARM);
    return o;
}

/* ---- spec.parallelism (docs/strategies.md#pipeline-stages) ------------------------------------------------ */

const char *const rm_pipe_schedule_names[] = {"1f1b", "gpipe", NULL};

int rm_par_from_json(const cJSON *o, const char *ctx, rm_par_spec *par, rm_err *err)
{
    static const char *const k_par[] = {"tensorParallel", "pipelineStages", "microBatches", "schedule", NULL};
    int rc = rm_json_no_unknown(o, k_par, ctx, err), iv;
    if (rc)
        return rc;
    par->present = true;
    TRY(tj_int(o, "tensorParallel", ctx, &par->tensor_parallel, &par->set, RM_PAR_SET_TENSOR, err));
    TRY(tj_int(o, "pipelineStages", ctx, &par->pipeline_stages, &par->set, RM_PAR_SET_STAGES, err));
    TRY(tj_int(o, "microBatches", ctx, &par->micro_batches, &par->set, RM_PAR_SET_MICRO, err));
    iv = (int)par->schedule;
    TRY(tj_enum(o, "schedule", ctx, rm_pipe_schedule_names, &iv, err));
    if (cJSON_GetObjectItemCaseSensitive(o, "schedule"))
        par->set |= RM_PAR_SET_SCHEDULE;
    par->schedule = (rm_pipe_schedule)iv;
out:
    return rc;
}

void rm_par_defaults(rm_par_spec *par)
{
    if (!(par->set & RM_PAR_SET_TENSOR) && par->tensor_parallel == 0)
        par->tensor_parallel = 1;
    if (!(par->set & RM_PAR_SET_STAGES) && par->pipeline_stages == 0)
        par->pipeline_stages = 1;
    if (!(par->set & RM_PAR_SET_MICRO) && par->micro_batches == 0)
        par->micro_batches = 1;
}

cJSON *rm_par_to_json(const rm_par_spec *par)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    /* 1 is no tensor parallelism: left out, so the launch contract's RINGMASTER_PARALLELISM of a
     * job without it stays what workers of earlier versions read */
    if (par->tensor_parallel != 1)
        add_num(o, "tensorParallel", par->tensor_parallel, par->set & RM_PAR_SET_TENSOR);
    add_num(o, "pipelineStages", par->pipeline_stages, par->set & RM_PAR_SET_STAGES);
    add_num(o, "microBatches", par->micro_batches, par->set & RM_PAR_SET_MICRO);
    if (par->schedule != RM_PIPE_1F1B || (par->set & RM_PAR_SET_SCHEDULE))
        cJSON_AddStringToObject(o, "schedule", rm_pipe_schedule_names[par->schedule == RM_PIPE_GPIPE]);
    return o;
}

const char *rm_tj_managed_by(const rm_tj *tj)
{
    if (tj->spec.managed_by)
        return tj->spec.managed_by;
    return tj->spec.run.managed_by;
}

/* ---- spec / object parse ------------------------------------------------------------------------ */

/* spec.runPolicy.schedulingPolicy (see trainingjob.h); minResources values must be quantities. */
static int sched_policy_from_json(const cJSON *run, const char *uctx, rm_tj_spec *s, rm_err *err)
{
    static const char *const k_sched[] = {"queue", "priorityClass", "minResources", "scheduleTimeoutSeconds",
                                          NULL};
    char sctx[FIELD_CAP];
    const cJSON *o, *mr;
    int rc = RM_OK;
    TRY(tj_obj(run, "schedulingPolicy", uctx, k_sched, &o, sctx, err));
    if (!o)
        return RM_OK;
    TRY(tj_str(o, "queue", sctx, &s->sched.queue, err));
    TRY(tj_str(o, "priorityClass", sctx, &s->sched.priority_class, err));
    TRY(tj_int(o, "scheduleTimeoutSeconds", sctx, &s->sched.schedule_timeout_seconds, NULL, 0, err));
    TRY(tj_obj(o, "minResources", sctx, NULL, &mr, NULL, err));
    if (mr) {
        const cJSON *q;
        cJSON_ArrayForEach(q, mr)
        {
            int64_t milli;
            if (rm_quantity_json_milli(q, &milli) != RM_OK)
                return rm_err_field(err, RM_EINVAL, "spec.runPolicy.schedulingPolicy.minResources",
                                    "%s: \"%s\" is not a resource quantity (e.g. \"4\", \"500m\", \"16Gi\")",
                                    q->string, cJSON_IsString(q) ? q->valuestring : "(not a string)");
        }
        cJSON_Delete(s->sched.min_resources);
        if (!(s->sched.min_resources = cJSON_Duplicate(mr, 1)))
            rc = rm_errf(err, RM_ENOMEM, "out of memory");
    }
out:
    return rc;
}

static int spec_from_json(const cJSON *sp, rm_tj_spec *s, rm_err *err)
{
    static const char *const k_spec[] = {
        "replicas", "minReplicas", "maxReplicas", "backend",  "restartPolicy",   "runPolicy",   "checkpoint",
        "training", "template",    "managedBy",   "strategy", "parameterServer", "parallelism", "placement",
        "output",   "runtimeRef",  NULL};
    static const char *const k_restart[] = {"maxRestarts", "backoffSeconds", "progressDeadlineSeconds", NULL};
    static const char *const k_run[] = {"activeDeadlineSeconds",
                                        "ttlSecondsAfterFinished",
                                        "cleanPodPolicy",
                                        "suspend",
                                        "managedBy",
                                        "schedulingPolicy",
                                        NULL};
    static const char *const k_ckpt[] = {"path", "intervalSteps", "keep", NULL};
    char rctx[FIELD_CAP], uctx[FIELD_CAP], cctx[FIELD_CAP];
    const cJSON *o;
    int rc = RM_OK, iv;
    TRY(rm_json_no_unknown(sp, k_spec, "spec", err));
    TRY(tj_int(sp, "replicas", "spec", &s->replicas, &s->set, RM_TJ_SET_REPLICAS, err));
    TRY(tj_int(sp, "minReplicas", "spec", &s->min_replicas, &s->set, RM_TJ_SET_MIN_REPLICAS, err));
    TRY(tj_int(sp, "maxReplicas", "spec", &s->max_replicas, &s->set, RM_TJ_SET_MAX_REPLICAS, err));
    iv = (int)s->backend;
    TRY(tj_enum(sp, "backend", "spec", rm_backend_names, &iv, err));
    s->backend = (rm_backend)iv;
    TRY(tj_obj(sp, "restartPolicy", "spec", k_restart, &o, rctx, err));
    if (o) {
        TRY(tj_int(o, "maxRestarts", rctx, &s->restart.max_restarts, &s->set, RM_TJ_SET_MAX_RESTARTS, err));
        TRY(tj_num(o, "backoffSeconds", rctx, &s->restart.backoff_seconds, &s->set, RM_TJ_SET_BACKOFF, err));
        TRY(tj_num(o, "progressDeadlineSeconds", rctx, &s->restart.progress_deadline_seconds, &s->set,
                   RM_TJ_SET_PROGRESS_DEADLINE, err));
    }
    TRY(tj_obj(sp, "runPolicy", "spec", k_run, &o, uctx, err));
    if (o) {
        TRY(tj_i64(o, "activeDeadlineSeconds", uctx, &s->run.active_deadline_seconds, NULL, 0, err));
        TRY(tj_i64(o, "ttlSecondsAfterFinished", uctx, &s->run.ttl_seconds_after_finished, &s->set,
                   RM_TJ_SET_TTL, err));
        iv = (int)s->run.clean_pod_policy;
        TRY(tj_enum(o, "cleanPodPolicy", uctx, rm_clean_policy_names, &iv, err));
        s->run.clean_pod_policy = (rm_clean_policy)iv;
        TRY(tj_bool(o, "suspend", uctx, &s->run.suspend, NULL, 0, err));
        TRY(tj_str(o, "managedBy", uctx, &s->run.managed_by, err));
        TRY(sched_policy_from_json(o, uctx, s, err));
    }
    TRY(tj_str(sp, "managedBy", "spec", &s->managed_by, err));
    TRY(tj_obj(sp, "checkpoint", "spec", k_ckpt, &o, cctx, err));
    if (o) {
        TRY(tj_str(o, "path", cctx, &s->checkpoint.path, err));
        TRY(tj_int(o, "intervalSteps", cctx, &s->checkpoint.interval_steps, &s->set, RM_TJ_SET_CKPT_INTERVAL,
                   err));
        TRY(tj_int(o, "keep", cctx, &s->checkpoint.keep, &s->set, RM_TJ_SET_CKPT_KEEP, err));
    }
    TRY(tj_obj(sp, "training", "spec", NULL, &o, NULL, err));
    if (o)
        TRY(rm_training_from_json(o, "spec.training", &s->training, err));
    TRY(tj_obj(sp, "template", "spec", NULL, &o, NULL, err));
    if (o && !(s->template = cJSON_Duplicate(o, 1)))
        TRY(rm_errf(err, RM_ENOMEM, "out of memory"));
    iv = (int)s->strategy;
    TRY(tj_enum(sp, "strategy", "spec", rm_strategy_names, &iv, err));
    s->strategy = (rm_strategy)iv;
    TRY(tj_obj(sp, "parameterServer", "spec", NULL, &o, NULL, err));
    if (o)
        TRY(rm_ps_from_json(o, "spec.parameterServer", &s->ps, err));
    TRY(tj_obj(sp, "parallelism", "spec", NULL, &o, NULL, err));
    if (o)
        TRY(rm_par_from_json(o, "spec.parallelism", &s->par, err));
    {
        static const char *const k_place[] = {"workersPerNode", NULL};
        char pctx[FIELD_CAP];
        TRY(tj_obj(sp, "placement", "spec", k_place, &o, pctx, err));
        if (o) {
            s->placement.present = true;
            TRY(tj_int(o, "workersPerNode", pctx, &s->placement.workers_per_node, NULL, 0, err));
        }
    }
    {
        static const char *const k_out[] = {"uri", "format", "dtype", NULL};
        char octx[FIELD_CAP];
        TRY(tj_obj(sp, "output", "spec", k_out, &o, octx, err));
        if (o) {
            s->output.present = true;
            TRY(tj_str(o, "uri", octx, &s->output.uri, err));
            iv = 0;
            TRY(tj_enum(o, "format", octx, rm_output_format_names, &iv, err));
            s->output.format = (rm_output_format)iv;
            iv = 0;
            TRY(tj_enum(o, "dtype", octx, rm_output_dtype_names, &iv, err));
            s->output.dtype = (rm_output_dtype)iv;
        }
    }
    o = cJSON_GetObjectItemCaseSensitive(sp, "runtimeRef");
    if (o && !cJSON_IsNull(o)) {
        rm_runtime_ref ref;
        TRY(rm_runtime_ref_from_json(o, "spec.runtimeRef", &ref, err));
        if (!(s->runtime_ref = cJSON_Duplicate(o, 1)))
            TRY(rm_errf(err, RM_ENOMEM, "out of memory"));
    }
out:
    return rc;
}

static void spec_free(rm_tj_spec *s)
{
    free(s->run.managed_by);
    free(s->managed_by);
    free(s->sched.queue);
    free(s->sched.priority_class);
    cJSON_Delete(s->sched.min_resources);
    free(s->checkpoint.path);
    free(s->output.uri);
    rm_training_free(&s->training);
    cJSON_Delete(s->template);
    cJSON_Delete(s->runtime_ref);
    memset(s, 0, sizeof *s);
}

void rm_tj_free(rm_tj *tj)
{
    if (!tj)
        return;
    free(tj->name);
    free(tj->namespace_);
    free(tj->uid);
    free(tj->resource_version);
    cJSON_Delete(tj->labels);
    cJSON_Delete(tj->annotations);
    spec_free(&tj->spec);
    memset(tj, 0, sizeof *tj);
}

static int string_map(const cJSON *md, const char *key, cJSON **out, rm_err *err)
{
    const cJSON *m = NULL;
    int rc = tj_obj(md, key, "metadata", NULL, &m, NULL, err);
    if (rc || !m)
        return rc;
    for (const cJSON *it = m->child; it; it = it->next) {
        if (!cJSON_IsString(it)) {
            char f[FIELD_CAP];
            snprintf(f, sizeof f, "metadata.%s.%s", key, it->string ? it->string : "?");
            return rm_err_field(err, RM_EINVAL, f, "must be a string");
        }
    }
    if (!(*out = cJSON_Duplicate(m, 1)))
        return rm_errf(err, RM_ENOMEM, "out of memory");
    return RM_OK;
}

/* Optional top-level string that, when given, must be exactly `want` (apiVersion, kind). */
static int p_const(const cJSON *o, const char *k, const char *want, rm_err *err)
{
    const char *s = NULL;
    int rc = tj_optional(rm_json_str(o, k, false, "", &s, err), NULL, 0);
    if (rc || !s || strcmp(s, want) == 0)
        return rc;
    return rm_err_field(err, RM_EINVAL, k, "must be %s (got \"%s\")", want, s);
}

int rm_tj_from_json(const cJSON *obj, rm_tj *out, rm_err *err)
{
    int rc = RM_OK;
    const char *s;
    const cJSON *md = NULL, *sp = NULL, *st = NULL;
    memset(out, 0, sizeof *out);
    /* Unknown top-level fields are errors, as everywhere under spec: kubectl's default
     * (--validate=strict, fieldValidation=Strict) refuses them too, and a typo there ("sepc:")
     * must not pass as a job with no spec changes. */
    static const char *const k_top[] = {"apiVersion", "kind", "metadata", "spec", "status", NULL};
    if (!obj || !cJSON_IsObject(obj))
        return rm_errf(err, RM_EINVAL, "a TrainingJob must be a JSON object");
    TRY(rm_json_no_unknown(obj, k_top, "", err));
    TRY(p_const(obj, "apiVersion", RM_TJ_API_VERSION, err));
    TRY(p_const(obj, "kind", RM_TJ_KIND, err));
    TRY(rm_json_obj(obj, "metadata", true, "", &md, err));
    TRY(rm_json_str(md, "name", true, "metadata", &s, err));
    TRY(tj_str(md, "name", "metadata", &out->name, err));
    TRY(tj_str(md, "namespace", "metadata", &out->namespace_, err));
    TRY(tj_str(md, "uid", "metadata", &out->uid, err));
    TRY(tj_str(md, "resourceVersion", "metadata", &out->resource_version, err));
    TRY(tj_i64(md, "generation", "metadata", &out->generation, NULL, 0, err));
    TRY(string_map(md, "labels", &out->labels, err));
    TRY(string_map(md, "annotations", &out->annotations, err));
    TRY(rm_json_obj(obj, "spec", true, "", &sp, err));
    TRY(spec_from_json(sp, &out->spec, err));
    TRY(tj_obj(obj, "status", "", NULL, &st, NULL, err));
    if (st)
        TRY(rm_tj_status_from_json(st, &out->status, err));
out:
    if (rc)
        rm_tj_free(out);
    return rc;
}

void rm_tj_defaults(rm_tj *tj)
{
    if (!tj)
        return;
    rm_tj_spec *s = &tj->spec;
    uint32_t m = s->set;
    if (!tj->namespace_)
        tj->namespace_ = strdup("default");
    if (UNSET(m, RM_TJ_SET_REPLICAS, s->replicas))
        s->replicas = 1;
    if (UNSET(m, RM_TJ_SET_MIN_REPLICAS, s->min_replicas))
        s->min_replicas = s->replicas;
    if (UNSET(m, RM_TJ_SET_MAX_REPLICAS, s->max_replicas))
        s->max_replicas = s->replicas;
    if (UNSET(m, RM_TJ_SET_MAX_RESTARTS, s->restart.max_restarts))
        s->restart.max_restarts = 5;
    if (UNSET(m, RM_TJ_SET_BACKOFF, s->restart.backoff_seconds))
        s->restart.backoff_seconds = 1;
    if (UNSET(m, RM_TJ_SET_PROGRESS_DEADLINE, s->restart.progress_deadline_seconds))
        s->restart.progress_deadline_seconds = 60;
    if (UNSET(m, RM_TJ_SET_TTL, s->run.ttl_seconds_after_finished))
        s->run.ttl_seconds_after_finished = -1;
    if (!s->checkpoint.path)
        s->checkpoint.path = strdup("/checkpoints");
    if (UNSET(m, RM_TJ_SET_CKPT_INTERVAL, s->checkpoint.interval_steps))
        s->checkpoint.interval_steps = 200;
    if (UNSET(m, RM_TJ_SET_CKPT_KEEP, s->checkpoint.keep))
        s->checkpoint.keep = 3;
    s->set = 0x1ffu;
    rm_training_defaults(&s->training);
    if (s->strategy == RM_STRATEGY_PS)
        rm_ps_defaults(&s->ps);
    rm_par_defaults(&s->par);
}

/* ---- serialization ----------------------------------------------------------------------------- */

/* {uri: "..."} under k when uri is set (model.init). */
static void add_uri_obj(cJSON *o, const char *k, const char *uri)
{
    if (!uri)
        return;
    cJSON *u = cJSON_AddObjectToObject(o, k);
    add_str(u, "uri", uri);
}

cJSON *rm_training_to_json(const rm_training_spec *t)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "mode", rm_mode_names[t->mode <= RM_MODE_BENCH ? t->mode : 0]);
    add_str(o, "dataset", t->dataset);
    add_str(o, "dataDir", t->data_dir);
    uint32_t g = t->set2;
    if (t->model_type || t->nhidden || (t->set & RM_TR_SET_HIDDEN) || t->init_uri || t->layers || t->heads ||
        t->embed || t->context || t->vocab || t->dropout ||
        (g & (RM_TR_SET2_LAYERS | RM_TR_SET2_HEADS | RM_TR_SET2_EMBED | RM_TR_SET2_CONTEXT |
              RM_TR_SET2_VOCAB | RM_TR_SET2_DROPOUT))) {
        cJSON *m = cJSON_AddObjectToObject(o, "model");
        if (m) {
            add_str(m, "type", t->model_type);
            add_num(m, "layers", t->layers, g & RM_TR_SET2_LAYERS);
            add_num(m, "heads", t->heads, g & RM_TR_SET2_HEADS);
            add_num(m, "embed", t->embed, g & RM_TR_SET2_EMBED);
            add_num(m, "context", t->context, g & RM_TR_SET2_CONTEXT);
            add_num(m, "vocab", t->vocab, g & RM_TR_SET2_VOCAB);
            add_num(m, "dropout", t->dropout, g & RM_TR_SET2_DROPOUT);
            add_uri_obj(m, "init", t->init_uri);
            if (t->nhidden || (t->set & RM_TR_SET_HIDDEN)) {
                int n = t->nhidden < 0 ? 0 : t->nhidden > RM_TJ_MAX_HIDDEN ? RM_TJ_MAX_HIDDEN : t->nhidden;
                cJSON *h = cJSON_CreateIntArray(t->hidden, n);
                if (h)
                    cJSON_AddItemToObject(m, "hidden", h);
            }
        }
    }
    add_num(o, "epochs", t->epochs, t->set & RM_TR_SET_EPOCHS);
    add_num(o, "batchSizePerWorker", t->batch_size_per_worker, t->set & RM_TR_SET_BATCH);
    cJSON *op = cJSON_AddObjectToObject(o, "optimizer");
    if (op) {
        const rm_optimizer_spec *x = &t->optimizer;
        cJSON_AddStringToObject(op, "type", rm_opt_names[x->type <= RM_OPT__LAST ? x->type : 0]);
        add_num(op, "lr", x->lr, t->set & RM_TR_SET_LR);
        add_num(op, "momentum", x->momentum, t->set & RM_TR_SET_MOMENTUM);
        add_num(op, "weightDecay", x->weight_decay, false);
        add_num(op, "beta1", x->beta1, t->set & RM_TR_SET_BETA1);
        add_num(op, "beta2", x->beta2, t->set & RM_TR_SET_BETA2);
        add_num(op, "eps", x->eps, t->set & RM_TR_SET_EPS);
        add_num(op, "history", x->history, t->set & RM_TR_SET_HISTORY);
        add_num(op, "portions", x->portions, t->set & RM_TR_SET_PORTIONS);
        if (x->type == RM_OPT_LBFGS)
            cJSON_AddStringToObject(op, "lineSearch",
                                    rm_line_search_names[x->line_search <= RM_LS_FIXED ? x->line_search : 0]);
    }
    add_num(o, "warmupEpochs", t->warmup_epochs, t->set & RM_TR_SET_WARMUP);
    cJSON_AddStringToObject(o, "schedule",
                            rm_schedule_names[t->schedule <= RM_SCHED_CONSTANT ? t->schedule : 0]);
    add_num(o, "stepGamma", t->step_gamma, t->set & RM_TR_SET_STEP_GAMMA);
    add_num(o, "stepEveryEpochs", t->step_every_epochs, t->set & RM_TR_SET_STEP_EVERY);
    cJSON_AddStringToObject(o, "precision",
                            rm_precision_names[t->precision <= RM_PREC_FP16 ? t->precision : 0]);
    add_num(o, "fusionBufferMB", t->fusion_buffer_mb, t->set & RM_TR_SET_FUSION);
    if (t->sharding != RM_SHARD_NONE && (unsigned)t->sharding <= RM_SHARD_FULL) /* none: omitted */
        cJSON_AddStringToObject(o, "sharding", rm_sharding_names[t->sharding]);
    if (t->allreduce != RM_AR_AUTO && (unsigned)t->allreduce <= RM_AR_HIER) /* auto: omitted */
        cJSON_AddStringToObject(o, "allreduce", rm_allreduce_names[t->allreduce]);
    add_num(o, "seed", (double)t->seed, t->set & RM_TR_SET_SEED);
    add_num(o, "maxSteps", t->max_steps, false);
    add_num(o, "gradClip", t->grad_clip, g & RM_TR_SET2_GRAD_CLIP);
    add_num(o, "gradientAccumulationSteps", t->grad_accum, g & RM_TR_SET2_GRAD_ACCUM);
    add_num(o, "warmupSteps", t->warmup_steps, g & RM_TR_SET2_WARMUP_STEPS);
    add_num(o, "evalEverySteps", t->eval_every_steps, g & RM_TR_SET2_EVAL_EVERY);
    if (t->data.uri || t->data.sha256 || t->data.secret || t->data.val_uri || t->data.ca_bundle ||
        (g & (RM_TR_SET2_FORMAT | RM_TR_SET2_FRACTION))) {
        cJSON *d = cJSON_AddObjectToObject(o, "data");
        if (d) {
            add_str(d, "uri", t->data.uri);
            if (g & RM_TR_SET2_FORMAT)
                cJSON_AddStringToObject(d, "format", rm_enum_name(rm_data_format_names, (int)t->data.format));
            add_str(d, "sha256", t->data.sha256);
            if (t->data.secret) {
                cJSON *sr = cJSON_AddObjectToObject(d, "secretRef");
                add_str(sr, "name", t->data.secret);
            }
            add_str(d, "caBundle", t->data.ca_bundle);
            if (t->data.val_uri || (g & RM_TR_SET2_FRACTION)) {
                cJSON *v = cJSON_AddObjectToObject(d, "validation");
                add_num(v, "fraction", t->data.val_fraction, g & RM_TR_SET2_FRACTION);
                add_str(v, "uri", t->data.val_uri);
            }
        }
    }
    cJSON *b = cJSON_AddObjectToObject(o, "bench");
    if (b) {
        add_num(b, "minBytes", (double)t->bench_min_bytes, t->set & RM_TR_SET_BENCH_MIN);
        add_num(b, "maxBytes", (double)t->bench_max_bytes, t->set & RM_TR_SET_BENCH_MAX);
        add_num(b, "stepFactor", t->bench_factor, t->set & RM_TR_SET_BENCH_FACTOR);
        add_num(b, "iters", t->bench_iters, t->set & RM_TR_SET_BENCH_ITERS);
        add_num(b, "warmupIters", t->bench_warmup, t->set & RM_TR_SET_BENCH_WARMUP);
        if (t->bench_check || (t->set & RM_TR_SET_BENCH_CHECK))
            cJSON_AddBoolToObject(b, "check", t->bench_check);
    }
    return o;
}

cJSON *rm_tj_spec_to_json(const rm_tj_spec *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    add_num(o, "replicas", s->replicas, s->set & RM_TJ_SET_REPLICAS);
    add_num(o, "minReplicas", s->min_replicas, s->set & RM_TJ_SET_MIN_REPLICAS);
    add_num(o, "maxReplicas", s->max_replicas, s->set & RM_TJ_SET_MAX_REPLICAS);
    cJSON_AddStringToObject(o, "backend", rm_backend_name(s->backend));
    cJSON *r = cJSON_AddObjectToObject(o, "restartPolicy");
    if (r) {
        add_num(r, "maxRestarts", s->restart.max_restarts, s->set & RM_TJ_SET_MAX_RESTARTS);
        add_num(r, "backoffSeconds", s->restart.backoff_seconds, s->set & RM_TJ_SET_BACKOFF);
        add_num(r, "progressDeadlineSeconds", s->restart.progress_deadline_seconds,
                s->set & RM_TJ_SET_PROGRESS_DEADLINE);
    }
    cJSON *u = cJSON_AddObjectToObject(o, "runPolicy");
    if (u) {
        add_num(u, "activeDeadlineSeconds", (double)s->run.active_deadline_seconds, false);
        add_num(u, "ttlSecondsAfterFinished", (double)s->run.ttl_seconds_after_finished,
                s->set & RM_TJ_SET_TTL);
        cJSON_AddStringToObject(
            u, "cleanPodPolicy",
            rm_clean_policy_names[s->run.clean_pod_policy <= RM_CLEAN_NONE ? s->run.clean_pod_policy : 0]);
        cJSON_AddBoolToObject(u, "suspend", s->run.suspend);
        add_str(u, "managedBy", s->run.managed_by);
        if (s->sched.queue || s->sched.priority_class || s->sched.min_resources ||
            s->sched.schedule_timeout_seconds) {
            cJSON *sc = cJSON_AddObjectToObject(u, "schedulingPolicy");
            add_str(sc, "queue", s->sched.queue);
            add_str(sc, "priorityClass", s->sched.priority_class);
            if (s->sched.min_resources)
                cJSON_AddItemToObject(sc, "minResources", cJSON_Duplicate(s->sched.min_resources, 1));
            if (s->sched.schedule_timeout_seconds)
                cJSON_AddNumberToObject(sc, "scheduleTimeoutSeconds", s->sched.schedule_timeout_seconds);
        }
    }
    add_str(o, "managedBy", s->managed_by);
    cJSON *c = cJSON_AddObjectToObject(o, "checkpoint");
    if (c) {
        add_str(c, "path", s->checkpoint.path);
        add_num(c, "intervalSteps", s->checkpoint.interval_steps, s->set & RM_TJ_SET_CKPT_INTERVAL);
        add_num(c, "keep", s->checkpoint.keep, s->set & RM_TJ_SET_CKPT_KEEP);
    }
    cJSON *t = rm_training_to_json(&s->training);
    if (t)
        cJSON_AddItemToObject(o, "training", t);
    if (s->template) {
        cJSON *tp = cJSON_Duplicate(s->template, 1);
        if (tp)
            cJSON_AddItemToObject(o, "template", tp);
    }
    if (s->runtime_ref) {
        cJSON *rr = cJSON_Duplicate(s->runtime_ref, 1);
        if (rr)
            cJSON_AddItemToObject(o, "runtimeRef", rr);
    }
    if (s->strategy != RM_STRATEGY_ALLREDUCE)
        cJSON_AddStringToObject(o, "strategy", rm_strategy_names[s->strategy == RM_STRATEGY_PS]);
    if (s->ps.present || s->strategy == RM_STRATEGY_PS) {
        cJSON *ps = rm_ps_to_json(&s->ps);
        if (ps)
            cJSON_AddItemToObject(o, "parameterServer", ps);
    }
    if (s->par.present) {
        cJSON *par = rm_par_to_json(&s->par);
        if (par)
            cJSON_AddItemToObject(o, "parallelism", par);
    }
    if (s->placement.present) {
        cJSON *pl = cJSON_AddObjectToObject(o, "placement");
        if (pl && s->placement.workers_per_node)
            cJSON_AddNumberToObject(pl, "workersPerNode", s->placement.workers_per_node);
    }
    if (s->output.present) {
        cJSON *ou = cJSON_AddObjectToObject(o, "output");
        if (ou) {
            add_str(ou, "uri", s->output.uri);
            cJSON_AddStringToObject(ou, "format",
                                    rm_enum_name(rm_output_format_names, (int)s->output.format));
            cJSON_AddStringToObject(ou, "dtype", rm_enum_name(rm_output_dtype_names, (int)s->output.dtype));
        }
    }
    return o;
}

cJSON *rm_tj_to_json(const rm_tj *tj)
{
    cJSON *md;
    cJSON *o = rm_json_object_head(RM_TJ_API_VERSION, RM_TJ_KIND, tj->name, tj->namespace_, tj->uid,
                                   tj->resource_version, tj->generation, &md);
    if (!o)
        return NULL;
    if (tj->labels)
        cJSON_AddItemToObject(md, "labels", cJSON_Duplicate(tj->labels, 1));
    if (tj->annotations)
        cJSON_AddItemToObject(md, "annotations", cJSON_Duplicate(tj->annotations, 1));
    cJSON *sp = rm_tj_spec_to_json(&tj->spec);
    cJSON *st = rm_tj_status_to_json(&tj->status);
    if (!sp || !st) {
        cJSON_Delete(sp);
        cJSON_Delete(st);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToObject(o, "spec", sp);
    cJSON_AddItemToObject(o, "status", st);
    return o;
}

/* ---- copy / conditions ------------------------------------------------------------------------- */

static int dup_str(char **dst, const char *src)
{
    *dst = NULL;
    if (src && !(*dst = strdup(src)))
        return RM_ENOMEM;
    return RM_OK;
}

static int dup_json(cJSON **dst, const cJSON *src)
{
    *dst = NULL;
    if (src && !(*dst = cJSON_Duplicate(src, 1)))
        return RM_ENOMEM;
    return RM_OK;
}

int rm_tj_copy(rm_tj *dst, const rm_tj *src)
{
    int rc = RM_OK;
    *dst = *src; /* scalars and status; every pointer is replaced below */
    rm_tj_spec *d = &dst->spec;
    const rm_tj_spec *s = &src->spec;
    rc |= dup_str(&dst->name, src->name);
    rc |= dup_str(&dst->namespace_, src->namespace_);
    rc |= dup_str(&dst->uid, src->uid);
    rc |= dup_str(&dst->resource_version, src->resource_version);
    rc |= dup_json(&dst->labels, src->labels);
    rc |= dup_json(&dst->annotations, src->annotations);
    rc |= dup_str(&d->run.managed_by, s->run.managed_by);
    rc |= dup_str(&d->managed_by, s->managed_by);
    rc |= dup_str(&d->sched.queue, s->sched.queue);
    rc |= dup_str(&d->sched.priority_class, s->sched.priority_class);
    rc |= dup_json(&d->sched.min_resources, s->sched.min_resources);
    rc |= dup_str(&d->checkpoint.path, s->checkpoint.path);
    rc |= dup_str(&d->training.dataset, s->training.dataset);
    rc |= dup_str(&d->training.data_dir, s->training.data_dir);
    rc |= dup_str(&d->training.model_type, s->training.model_type);
    rc |= dup_str(&d->training.init_uri, s->training.init_uri);
    rc |= dup_str(&d->training.data.uri, s->training.data.uri);
    rc |= dup_str(&d->training.data.sha256, s->training.data.sha256);
    rc |= dup_str(&d->training.data.secret, s->training.data.secret);
    rc |= dup_str(&d->training.data.val_uri, s->training.data.val_uri);
    rc |= dup_str(&d->training.data.ca_bundle, s->training.data.ca_bundle);
    rc |= dup_str(&d->output.uri, s->output.uri);
    rc |= dup_json(&d->template, s->template);
    rc |= dup_json(&d->runtime_ref, s->runtime_ref);
    if (rc) {
        rm_tj_free(dst);
        return RM_ENOMEM;
    }
    return RM_OK;
}

static int gpu_quantity(const cJSON *v)
{
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        return (d >= 0 && d <= 1024) ? (int)d : 0;
    }
    if (cJSON_IsString(v) && v->valuestring) {
        const char *s = v->valuestring;
        if (!*s || strlen(s) > 5)
            return 0;
        int n = 0;
        for (; *s; s++) {
            if (*s < '0' || *s > '9')
                return 0;
            n = n * 10 + (*s - '0');
        }
        return n;
    }
    return 0;
}

int rm_template_gpus(const cJSON *pod_template)
{
    if (!pod_template)
        return 0;
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod_template, "spec");
    const cJSON *containers = cJSON_GetObjectItemCaseSensitive(spec, "containers");
    if (!cJSON_IsArray(containers))
        return 0;
    int total = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, containers)
    {
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(c, "resources");
        const cJSON *lim = cJSON_GetObjectItemCaseSensitive(res, "limits");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(res, "requests");
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(lim, "nvidia.com/gpu");
        if (!q)
            q = cJSON_GetObjectItemCaseSensitive(req, "nvidia.com/gpu");
        total += gpu_quantity(q);
        if (total > 1024)
            return 1024;
    }
    return total;
}
