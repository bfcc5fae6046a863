/* trainingjob.c — the TrainingJob type: strict parse, defaults, validation, serialization
 * (see trainingjob.h and docs/trainingjob-api.md).
 *
 * Design: one table of names per enum and one small parser per JSON object, each of which first
 * rejects unknown keys (so a typo like "spec.training.epoch" is an error naming its path, not a
 * silently ignored knob) and then reads its fields through the typed getters of json.h, which
 * name the field on a wrong type. Parsing builds into a zeroed struct and never applies defaults;
 * optional fields whose zero is meaningful record their presence in a `set` mask so defaults
 * never overwrite an explicit 0 (maxRestarts: 0, momentum: 0, seed: 0 ...). Validation returns the
 * first violation with err->field set to the exact path. Serialization omits unset fields, so
 * to_json(from_json(x)) == x for any x, defaulted or not. */
#include "common/trainingjob.h"
#include "common/quantity.h"
#include "common/json.h"
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIELD_CAP 128

static const char *const clean_names[] = { "Running", "All", "None", NULL };
static const char *const mode_names[] = { "train", "bench", NULL };
static const char *const sched_names[] = { "cosine", "step", "constant", NULL };
static const char *const opt_names[] = { "sgd", "adam", "adagrad", "lbfgs", NULL };
const char *const rm_line_search_names[] = { "armijo", "fixed", NULL };
const char *const rm_sharding_names[] = { "none", "optimizer", "gradients", "full", NULL };
const char *const rm_allreduce_names[] = { "auto", "ring", "hierarchical", NULL };
static const char *const phase_names[] = { "Pending", "Running", "Restarting", "Succeeded",
                                            "Failed", "Suspended", NULL };
static const char *const cond_names[] = { "Created", "Running", "Restarting", "Succeeded",
                                           "Failed", "Suspended", "CheckpointFailing",
                                           "InvalidSpec", NULL };

const char *rm_phase_name(rm_phase p)
{
    return (unsigned)p < RM_ARRAY_LEN(phase_names) - 1 ? phase_names[p] : "Unknown";
}
const char *rm_cond_name(rm_cond_type c)
{
    return (unsigned)c < RM_COND__COUNT ? cond_names[c] : "Unknown";
}

static int enum_index(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* ---- parse helpers ---------------------------------------------------------------------------- */

/* "<ctx>.<key>" into buf[FIELD_CAP]. A longer path is cut on purpose (it only names a field in
 * messages, and rm_err.field is that size too), so GCC's truncation warning is off here. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
static void join(char *buf, const char *ctx, const char *key)
{
    if (ctx && *ctx)
        snprintf(buf, FIELD_CAP, "%s.%s", ctx, key);
    else
        snprintf(buf, FIELD_CAP, "%s", key);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Every p_* reads an optional field: absent (or null) is RM_OK with *out untouched; present and
 * valid records `bit` in *set (when set is non-NULL); a wrong type is the json.h error. */
static int optional(int rc, uint32_t *set, uint32_t bit)
{
    if (rc == RM_ENOTFOUND)
        return RM_OK;
    if (rc == RM_OK && set)
        *set |= bit;
    return rc;
}

static int p_int(const cJSON *o, const char *k, const char *ctx, int *out, uint32_t *set,
                 uint32_t bit, rm_err *err)
{
    int64_t v;
    int rc = rm_json_int(o, k, false, ctx, &v, err);
    if (rc)
        return optional(rc, NULL, 0);   /* absent: RM_OK; wrong type: the error */
    if (v < INT_MIN || v > INT_MAX) {
        char f[FIELD_CAP];
        join(f, ctx, k);
        return rm_err_field(err, RM_EINVAL, f, "out of range");
    }
    *out = (int)v;
    return optional(RM_OK, set, bit);
}

static int p_i64(const cJSON *o, const char *k, const char *ctx, int64_t *out, uint32_t *set,
                 uint32_t bit, rm_err *err)
{
    return optional(rm_json_int(o, k, false, ctx, out, err), set, bit);
}

static int p_num(const cJSON *o, const char *k, const char *ctx, double *out, uint32_t *set,
                 uint32_t bit, rm_err *err)
{
    return optional(rm_json_num(o, k, false, ctx, out, err), set, bit);
}

static int p_bool(const cJSON *o, const char *k, const char *ctx, bool *out, uint32_t *set,
                  uint32_t bit, rm_err *err)
{
    return optional(rm_json_bool(o, k, false, ctx, out, err), set, bit);
}

static int p_str(const cJSON *o, const char *k, const char *ctx, char **out, rm_err *err)
{
    const char *s = NULL;
    int rc = optional(rm_json_str(o, k, false, ctx, &s, err), NULL, 0);
    if (rc || !s)
        return rc;
    char *d = strdup(s);
    if (!d)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    free(*out);
    *out = d;
    return RM_OK;
}

static int p_enum(const cJSON *o, const char *k, const char *ctx, const char *const *names, int *out,
                  rm_err *err)
{
    const char *s = NULL;
    int rc = optional(rm_json_str(o, k, false, ctx, &s, err), NULL, 0);
    if (rc || !s)
        return rc;
    int i = enum_index(names, s);
    if (i < 0) {
        char f[FIELD_CAP], list[128] = "";
        join(f, ctx, k);
        for (int j = 0; names[j]; j++) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", j ? ", " : "", names[j]);
        }
        return rm_err_field(err, RM_EINVAL, f, "must be one of %s (got \"%s\")", list, s);
    }
    *out = i;
    return RM_OK;
}

/* Optional object child, *out NULL when absent; with `allowed`, its unknown keys are errors
 * (named under subctx, which is filled with "<ctx>.<k>" when non-NULL). */
static int p_obj(const cJSON *o, const char *k, const char *ctx, const char *const *allowed,
                 const cJSON **out, char *subctx, rm_err *err)
{
    *out = NULL;
    if (subctx)
        join(subctx, ctx, k);
    int rc = optional(rm_json_obj(o, k, false, ctx, out, err), NULL, 0);
    if (rc == RM_OK && *out && allowed)
        return rm_json_no_unknown(*out, allowed, subctx, err);
    return rc;
}

/* Optional array child, *out NULL when absent. */
static int p_arr(const cJSON *o, const char *k, const char *ctx, const cJSON **out, rm_err *err)
{
    *out = NULL;
    return optional(rm_json_arr(o, k, false, ctx, out, err), NULL, 0);
}

#define TRY(x)             \
    do {                   \
        rc = (x);          \
        if (rc)            \
            goto out;      \
    } while (0)

/* ---- training ---------------------------------------------------------------------------------- */

int rm_training_from_json(const cJSON *tr, const char *ctx, rm_training_spec *t, rm_err *err)
{
    static const char *const k_training[] = {
        "mode", "dataset", "dataDir", "model", "epochs", "batchSizePerWorker", "optimizer",
        "warmupEpochs", "schedule", "stepGamma", "stepEveryEpochs", "precision", "fusionBufferMB",
        "seed", "maxSteps", "bench", "sharding", "allreduce", NULL };
    static const char *const k_model[] = { "type", "hidden", NULL };
    static const char *const k_opt[] = { "type", "lr", "momentum", "weightDecay", "beta1", "beta2",
                                         "eps", "history", "portions", "lineSearch", NULL };
    static const char *const k_bench[] = { "minBytes", "maxBytes", "stepFactor", "iters",
                                           "warmupIters", "check", NULL };
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
    TRY(p_enum(tr, "mode", ctx, mode_names, &iv, err));
    t->mode = (rm_mode)iv;
    TRY(p_str(tr, "dataset", ctx, &t->dataset, err));
    TRY(p_str(tr, "dataDir", ctx, &t->data_dir, err));
    TRY(p_obj(tr, "model", ctx, k_model, &model, mctx, err));
    if (model) {
        TRY(p_str(model, "type", mctx, &t->model_type, err));
        TRY(p_arr(model, "hidden", mctx, &hidden, err));
        if (hidden) {
            char hctx[FIELD_CAP];
            join(hctx, mctx, "hidden");
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
                    rc = rm_err_field(err, RM_EINVAL, f, cJSON_IsNumber(h) && !isfinite(v) ?
                                      "must be a finite number" : "must be an integer");
                    goto out;
                }
                t->hidden[i] = v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v;
            }
            t->nhidden = n;
            t->set |= RM_TR_SET_HIDDEN;
        }
    }
    TRY(p_int(tr, "epochs", ctx, &t->epochs, &t->set, RM_TR_SET_EPOCHS, err));
    TRY(p_int(tr, "batchSizePerWorker", ctx, &t->batch_size_per_worker, &t->set, RM_TR_SET_BATCH, err));
    TRY(p_obj(tr, "optimizer", ctx, k_opt, &opt, octx, err));
    if (opt) {
        iv = (int)t->optimizer.type;
        TRY(p_enum(opt, "type", octx, opt_names, &iv, err));
        t->optimizer.type = (rm_opt_type)iv;
        TRY(p_num(opt, "lr", octx, &t->optimizer.lr, &t->set, RM_TR_SET_LR, err));
        TRY(p_num(opt, "momentum", octx, &t->optimizer.momentum, &t->set, RM_TR_SET_MOMENTUM, err));
        TRY(p_num(opt, "weightDecay", octx, &t->optimizer.weight_decay, NULL, 0, err));
        TRY(p_num(opt, "beta1", octx, &t->optimizer.beta1, &t->set, RM_TR_SET_BETA1, err));
        TRY(p_num(opt, "beta2", octx, &t->optimizer.beta2, &t->set, RM_TR_SET_BETA2, err));
        TRY(p_num(opt, "eps", octx, &t->optimizer.eps, &t->set, RM_TR_SET_EPS, err));
        TRY(p_int(opt, "history", octx, &t->optimizer.history, &t->set, RM_TR_SET_HISTORY, err));
        TRY(p_int(opt, "portions", octx, &t->optimizer.portions, &t->set, RM_TR_SET_PORTIONS, err));
        iv = (int)t->optimizer.line_search;
        TRY(p_enum(opt, "lineSearch", octx, rm_line_search_names, &iv, err));
        t->optimizer.line_search = (rm_line_search)iv;
        if (cJSON_GetObjectItemCaseSensitive(opt, "lineSearch"))
            t->optimizer.line_search_given = true;
    }
    TRY(p_num(tr, "warmupEpochs", ctx, &t->warmup_epochs, &t->set, RM_TR_SET_WARMUP, err));
    iv = (int)t->schedule;
    TRY(p_enum(tr, "schedule", ctx, sched_names, &iv, err));
    t->schedule = (rm_schedule)iv;
    TRY(p_num(tr, "stepGamma", ctx, &t->step_gamma, &t->set, RM_TR_SET_STEP_GAMMA, err));
    TRY(p_int(tr, "stepEveryEpochs", ctx, &t->step_every_epochs, &t->set, RM_TR_SET_STEP_EVERY, err));
    iv = (int)t->precision;
    TRY(p_enum(tr, "precision", ctx, rm_precision_names, &iv, err));
    t->precision = (rm_precision)iv;
    TRY(p_num(tr, "fusionBufferMB", ctx, &t->fusion_buffer_mb, &t->set, RM_TR_SET_FUSION, err));
    iv = (int)t->sharding;
    TRY(p_enum(tr, "sharding", ctx, rm_sharding_names, &iv, err));
    t->sharding = (rm_sharding)iv;
    iv = (int)t->allreduce;
    TRY(p_enum(tr, "allreduce", ctx, rm_allreduce_names, &iv, err));
    t->allreduce = (rm_allreduce_algo)iv;
    {
        int64_t seed = 0;
        uint32_t s = 0;
        TRY(p_i64(tr, "seed", ctx, &seed, &s, 1, err));
        if (s) {
            if (seed < 0) {
                char f[FIELD_CAP];
                join(f, ctx, "seed");
                rc = rm_err_field(err, RM_EINVAL, f, "must be >= 0");
                goto out;
            }
            t->seed = (uint64_t)seed;
            t->set |= RM_TR_SET_SEED;
        }
    }
    TRY(p_int(tr, "maxSteps", ctx, &t->max_steps, NULL, 0, err));
    TRY(p_obj(tr, "bench", ctx, k_bench, &bench, bctx, err));
    if (bench) {
        TRY(p_i64(bench, "minBytes", bctx, &t->bench_min_bytes, &t->set, RM_TR_SET_BENCH_MIN, err));
        TRY(p_i64(bench, "maxBytes", bctx, &t->bench_max_bytes, &t->set, RM_TR_SET_BENCH_MAX, err));
        TRY(p_int(bench, "stepFactor", bctx, &t->bench_factor, &t->set, RM_TR_SET_BENCH_FACTOR, err));
        TRY(p_int(bench, "iters", bctx, &t->bench_iters, &t->set, RM_TR_SET_BENCH_ITERS, err));
        TRY(p_int(bench, "warmupIters", bctx, &t->bench_warmup, &t->set, RM_TR_SET_BENCH_WARMUP, err));
        TRY(p_bool(bench, "check", bctx, &t->bench_check, &t->set, RM_TR_SET_BENCH_CHECK, err));
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
        o->lr = o->type == RM_OPT_ADAM ? 0.001 : o->type == RM_OPT_ADAGRAD ? 0.01 :
                o->type == RM_OPT_LBFGS ? 1.0 : 0.02;
    if (o->type == RM_OPT_LBFGS && UNSET(m, RM_TR_SET_HISTORY, o->history))
        o->history = 10;
    if (o->type == RM_OPT_LBFGS && UNSET(m, RM_TR_SET_PORTIONS, o->portions))
        o->portions = 64;
    if (UNSET(m, RM_TR_SET_MOMENTUM, o->momentum) && o->type == RM_OPT_SGD)
        o->momentum = 0.9;
    if (UNSET(m, RM_TR_SET_BETA1, o->beta1))
        o->beta1 = 0.9;
    if (UNSET(m, RM_TR_SET_BETA2, o->beta2))
        o->beta2 = 0.999;
    if (UNSET(m, RM_TR_SET_EPS, o->eps))
        o->eps = o->type == RM_OPT_ADAGRAD ? 1e-10 : 1e-8;
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
    /* everything is concrete now: a second call changes nothing */
    t->set = 0x7ffffu;
}

/* ---- validation -------------------------------------------------------------------------------- */

/* Strings a job prints or uses as paths (checkpoint path, data folder, managedBy) carry no
 * control characters: they reach terminals and logs as they are. */
static int validate_scheduling(const rm_tj_spec *s, rm_err *err);
static int has_ctrl(const char *s)
{
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

static int bad(rm_err *err, const char *ctx, const char *key, const char *fmt, ...) RM_PRINTF(4, 5);
static int bad(rm_err *err, const char *ctx, const char *key, const char *fmt, ...)
{
    char f[FIELD_CAP], msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    join(f, ctx, key);
    return rm_err_field(err, RM_EINVAL, f, "%s", msg);
}

/* ---- memory estimate ------------------------------------------------------------------------- */

/* fashion-mnist's shape (worker/model/model.h RM_MODEL_INPUT, RM_MODEL_CLASSES) and its test set */
#define TJ_INPUTS 784
#define TJ_CLASSES 10
#define TJ_TEST_SAMPLES 10000

/* "66.3 MiB", "1.5 GiB", "512 B" */
static void fmt_bytes(char *buf, size_t cap, int64_t n)
{
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%lld B", (long long)n);
    else
        snprintf(buf, cap, "%.1f %s", v, unit[u]);
}

void rm_training_memory(const rm_training_spec *t, rm_mem_estimate *out)
{
    memset(out, 0, sizeof *out);
    int64_t params = 0, acts = 0, widest = 1, in = TJ_INPUTS;
    int nh = t->nhidden < 0 ? 0 : t->nhidden > RM_TJ_MAX_HIDDEN ? RM_TJ_MAX_HIDDEN : t->nhidden;
    for (int i = 0; i <= nh; i++) {
        int64_t o = i < nh ? (t->hidden[i] > 0 ? t->hidden[i] : 1) : TJ_CLASSES;
        params += in * o + o;
        acts += o;
        if (i < nh && o > widest)
            widest = o;
        in = o;
    }
    int nstate = t->optimizer.type == RM_OPT_ADAM ? 2 : 1;
    int64_t b = t->batch_size_per_worker > 0 ? t->batch_size_per_worker : 1;
    int64_t n = rm_training_samples(t);
    out->params = params;
    out->copies = 2 + nstate + (1 + nstate);      /* weights, grads, state, staging */
    out->model_bytes = params * out->copies * 4;
    out->batch_bytes = 4 * b * (TJ_INPUTS + 1 + 2 * widest + acts);
    out->data_bytes = n > 0 ? (n + TJ_TEST_SAMPLES) * (TJ_INPUTS + 1) + 4 * n : 0;
    out->total = out->model_bytes + out->batch_bytes + out->data_bytes + RM_TJ_MEM_OVERHEAD;
}

int rm_quantity_bytes(const char *s, int64_t *out)
{
    static const struct { const char *sfx; double mul; } sfx[] = {
        { "Ki", 1024.0 }, { "Mi", 1048576.0 }, { "Gi", 1073741824.0 }, { "Ti", 1099511627776.0 },
        { "Pi", 1125899906842624.0 }, { "Ei", 1152921504606846976.0 }, { "k", 1e3 }, { "M", 1e6 },
        { "G", 1e9 }, { "T", 1e12 }, { "P", 1e15 }, { "E", 1e18 }, { "m", 1e-3 }, { "", 1.0 },
    };
    if (!s || !*s || !(isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]))))
        return RM_EINVAL;
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return RM_EINVAL;
    for (size_t i = 0; i < RM_ARRAY_LEN(sfx); i++) {
        if (strcmp(end, sfx[i].sfx) == 0) {
            double bytes = ceil(v * sfx[i].mul);
            if (!(bytes < 9.2e18))
                return RM_EINVAL;
            *out = (int64_t)bytes;
            return RM_OK;
        }
    }
    return RM_EINVAL;
}

int rm_tj_check_memory(const rm_tj *tj, int64_t cap_bytes, int workers, const char *cap_what,
                       rm_err *err)
{
    const rm_training_spec *t = &tj->spec.training;
    if (t->mode != RM_MODE_TRAIN || cap_bytes <= 0)
        return RM_OK;
    if (workers < 1)
        workers = 1;
    rm_mem_estimate me;
    rm_training_memory(t, &me);
    if (me.total <= cap_bytes / workers)
        return RM_OK;
    char tot[32], model[32], batch[32], data[32], all[32], capb[32];
    fmt_bytes(tot, sizeof tot, me.total);
    fmt_bytes(model, sizeof model, me.model_bytes);
    fmt_bytes(batch, sizeof batch, me.batch_bytes);
    fmt_bytes(data, sizeof data, me.data_bytes);
    fmt_bytes(all, sizeof all, me.total * workers);
    fmt_bytes(capb, sizeof capb, cap_bytes);
    char per[64] = "";
    if (workers > 1)
        snprintf(per, sizeof per, " x %d workers = %s", workers, all);
    return rm_err_field(err, RM_EINVAL, "spec.training.model",
                        "needs an estimated %s per worker (%lld parameters x %d copies = %s, batch %d = "
                        "%s, dataset %s, runtime 32 MiB)%s, more than %s (%s)", tot,
                        (long long)me.params, me.copies, model, t->batch_size_per_worker, batch, data,
                        per, cap_what ? cap_what : "the memory cap", capb);
}

int rm_tj_check_memory_local(const rm_tj *tj, rm_err *err)
{
    const char *env = getenv("RINGMASTER_MEMORY_LIMIT");
    int64_t cap = 0;
    char what[128];
    int workers = tj->spec.max_replicas > tj->spec.replicas ? tj->spec.max_replicas : tj->spec.replicas;
    if (env && *env) {
        if (rm_quantity_bytes(env, &cap) != RM_OK)
            return rm_errf(err, RM_EINVAL, "RINGMASTER_MEMORY_LIMIT: must be a Kubernetes quantity such "
                           "as 512Mi or 4Gi (got \"%.40s\")", env);
        snprintf(what, sizeof what, "RINGMASTER_MEMORY_LIMIT for the %d workers on this machine", workers);
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || psize <= 0)
            return RM_OK;
        cap = (int64_t)pages * psize;
        snprintf(what, sizeof what, "this machine's physical memory for its %d workers", workers);
    }
    return rm_tj_check_memory(tj, cap, workers, what, err);
}

/* The worker container's resources.limits.memory (the container named "worker", else the first),
 * checked against the estimate for one worker. */
static int check_template_memory(const rm_tj *tj, rm_err *err)
{
    const cJSON *cs = rm_json_path(tj->spec.template, "spec.containers");
    const cJSON *c, *w = NULL;
    int i = 0, wi = 0;
    cJSON_ArrayForEach(c, cs) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (!w || (cJSON_IsString(n) && strcmp(n->valuestring, "worker") == 0)) {
            w = c;
            wi = i;
        }
        i++;
    }
    const cJSON *m = rm_json_path(w, "resources.limits.memory");
    if (!m)
        return RM_OK;
    char f[FIELD_CAP];
    snprintf(f, sizeof f, "spec.template.spec.containers[%d].resources.limits.memory", wi);
    int64_t cap = 0;
    char num[64];
    if (cJSON_IsNumber(m))
        snprintf(num, sizeof num, "%.0f", m->valuedouble);
    if ((!cJSON_IsString(m) && !cJSON_IsNumber(m)) ||
        rm_quantity_bytes(cJSON_IsString(m) ? m->valuestring : num, &cap) != RM_OK)
        return rm_err_field(err, RM_EINVAL, f, "must be a Kubernetes quantity such as 512Mi or 4Gi");
    return rm_tj_check_memory(tj, cap, 1, "the worker container's memory limit", err);
}

int rm_training_validate(const rm_training_spec *t, const char *ctx, rm_err *err)
{
    char mctx[FIELD_CAP], octx[FIELD_CAP], bctx[FIELD_CAP];
    if (!ctx)
        ctx = "spec.training";
    join(mctx, ctx, "model");
    join(octx, ctx, "optimizer");
    join(bctx, ctx, "bench");
    if ((unsigned)t->mode > RM_MODE_BENCH)
        return bad(err, ctx, "mode", "must be one of train, bench");
    if (t->dataset && strcmp(t->dataset, "fashion-mnist") != 0)
        return bad(err, ctx, "dataset", "must be fashion-mnist (got \"%s\")", t->dataset);
    if (t->data_dir && !*t->data_dir)
        return bad(err, ctx, "dataDir", "must not be empty");
    if (has_ctrl(t->data_dir))
        return bad(err, ctx, "dataDir", "must not contain control characters");
    if (t->model_type && strcmp(t->model_type, "mlp") != 0)
        return bad(err, mctx, "type", "must be mlp (got \"%s\")", t->model_type);
    if (t->nhidden < 0 || t->nhidden > RM_TJ_MAX_HIDDEN)
        return bad(err, mctx, "hidden", "at most %d layers", RM_TJ_MAX_HIDDEN);
    for (int i = 0; i < t->nhidden; i++) {
        if (t->hidden[i] < 1 || t->hidden[i] > 65536) {
            char k[32];
            snprintf(k, sizeof k, "hidden[%d]", i);
            return bad(err, mctx, k, "must be between 1 and 65536");
        }
    }
    rm_mem_estimate me;
    rm_training_memory(t, &me);
    if (me.params > RM_TJ_MAX_PARAMS) {
        char need[32];
        fmt_bytes(need, sizeof need, me.model_bytes);
        return bad(err, mctx, "hidden", "the model has %lld parameters, more than the %lld a worker may "
                   "hold (it would need about %s per worker for weights, gradients, optimizer state "
                   "and checkpoint staging)", (long long)me.params, (long long)RM_TJ_MAX_PARAMS, need);
    }
    if (t->epochs < 1 || t->epochs > 100000)
        return bad(err, ctx, "epochs", "must be between 1 and 100000");
    if (t->batch_size_per_worker < 1 || t->batch_size_per_worker > 65536)
        return bad(err, ctx, "batchSizePerWorker", "must be between 1 and 65536");
    const rm_optimizer_spec *o = &t->optimizer;
    if ((unsigned)o->type > RM_OPT_LBFGS)
        return bad(err, octx, "type", "must be one of sgd, adam, adagrad, lbfgs");
    if (o->type == RM_OPT_LBFGS) {
        if (o->history < 1 || o->history > RM_LBFGS_MAX_HISTORY)
            return bad(err, octx, "history", "must be between 1 and %d (got %d)", RM_LBFGS_MAX_HISTORY,
                       o->history);
        if (o->portions < 1 || o->portions > RM_LBFGS_MAX_PORTIONS)
            return bad(err, octx, "portions", "must be between 1 and %d (got %d)",
                       RM_LBFGS_MAX_PORTIONS, o->portions);
        if ((unsigned)o->line_search > RM_LS_FIXED)
            return bad(err, octx, "lineSearch", "must be one of armijo, fixed");
        if (t->precision != RM_PREC_FP32)
            return bad(err, ctx, "precision", "must be fp32 with %s.type: lbfgs", octx);
        if (o->weight_decay != 0)
            return bad(err, octx, "weightDecay", "must be 0 with %s.type: lbfgs (the full-batch "
                       "objective has no L2 term in this version)", octx);
    } else if (o->history || o->portions || o->line_search_given) {
        return bad(err, octx, o->history ? "history" : o->portions ? "portions" : "lineSearch",
                   "is only used with %s.type: lbfgs (type is %s)", octx,
                   opt_names[o->type <= RM_OPT_LBFGS ? o->type : 0]);
    }
    if (!(o->lr > 0) || !isfinite(o->lr) || o->lr > 100)
        return bad(err, octx, "lr", "must be > 0 and <= 100");
    if (!(o->momentum >= 0 && o->momentum < 1))
        return bad(err, octx, "momentum", "must be >= 0 and < 1");
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return bad(err, octx, "weightDecay", "must be >= 0");
    if (!(o->beta1 >= 0 && o->beta1 < 1))
        return bad(err, octx, "beta1", "must be >= 0 and < 1");
    if (!(o->beta2 >= 0 && o->beta2 < 1))
        return bad(err, octx, "beta2", "must be >= 0 and < 1");
    if (!(o->eps > 0) || !isfinite(o->eps))
        return bad(err, octx, "eps", "must be > 0");
    if (!(t->warmup_epochs >= 0) || !isfinite(t->warmup_epochs))
        return bad(err, ctx, "warmupEpochs", "must be >= 0");
    if (t->warmup_epochs > t->epochs)
        return bad(err, ctx, "warmupEpochs", "must be <= %s.epochs", ctx);
    if ((unsigned)t->schedule > RM_SCHED_CONSTANT)
        return bad(err, ctx, "schedule", "must be one of cosine, step, constant");
    if (!(t->step_gamma > 0 && t->step_gamma <= 1))
        return bad(err, ctx, "stepGamma", "must be > 0 and <= 1");
    if (t->step_every_epochs < 1)
        return bad(err, ctx, "stepEveryEpochs", "must be >= 1");
    if ((unsigned)t->precision > RM_PREC_FP16)
        return bad(err, ctx, "precision", "must be one of fp32, bf16, fp16");
    if (!(t->fusion_buffer_mb >= 0 && t->fusion_buffer_mb <= 4096))
        return bad(err, ctx, "fusionBufferMB", "must be between 0 and 4096");
    if ((unsigned)t->sharding > RM_SHARD_FULL)
        return bad(err, ctx, "sharding", "must be one of none, optimizer, gradients, full");
    if (t->sharding != RM_SHARD_NONE && t->precision != RM_PREC_FP32)
        return bad(err, ctx, "sharding", "%s needs %s.precision fp32 in this version (got %s)",
                   rm_sharding_names[t->sharding], ctx, rm_precision_names[t->precision]);
    if ((unsigned)t->allreduce > RM_AR_HIER)
        return bad(err, ctx, "allreduce", "must be one of auto, ring, hierarchical");
    if (t->max_steps < 0)
        return bad(err, ctx, "maxSteps", "must be >= 0");
    if (t->bench_min_bytes < 4 || t->bench_min_bytes > (int64_t)1 << 40)
        return bad(err, bctx, "minBytes", "must be between 4 and 2^40");
    if (t->bench_max_bytes < t->bench_min_bytes || t->bench_max_bytes > (int64_t)1 << 40)
        return bad(err, bctx, "maxBytes", "must be >= %s.minBytes and <= 2^40", bctx);
    if (t->bench_factor < 2)
        return bad(err, bctx, "stepFactor", "must be >= 2");
    if (t->bench_iters < 1 || t->bench_iters > 1000000)
        return bad(err, bctx, "iters", "must be between 1 and 1000000");
    if (t->bench_warmup < 0 || t->bench_warmup > 1000000)
        return bad(err, bctx, "warmupIters", "must be between 0 and 1000000");
    return RM_OK;
}

/* DNS-1123: lowercase alphanumerics and '-' ('.' too for subdomains), alnum at both ends. */
static int dns1123(const char *s, int allow_dot, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int an = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!an && !(c == '-' || (allow_dot && c == '.')))
            return 0;
        if ((i == 0 || i == n - 1) && !an)
            return 0;
    }
    return 1;
}

/* DNS-1035 label (a Service name): a DNS-1123 label that starts with a letter. */
static int dns1035(const char *s)
{
    return dns1123(s, 0, 63) && s[0] >= 'a' && s[0] <= 'z';
}

static int decimal_digits(int v)
{
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

int rm_tj_name_max(int max_replicas)
{
    if (max_replicas < 1)
        max_replicas = 1;
    if (max_replicas > RM_TJ_MAX_REPLICAS)
        max_replicas = RM_TJ_MAX_REPLICAS;
    return RM_TJ_LABEL_MAX - (int)strlen(RM_TJ_WORKER_INFIX) - decimal_digits(max_replicas - 1);
}

/* ---- spec.strategy / spec.parameterServer (docs/strategies.md#parameter-servers) ---------------- */

static void add_num(cJSON *o, const char *k, double v, bool given);

const char *const rm_strategy_names[] = { "allreduce", "parameterServer", NULL };
const char *const rm_ps_mode_names[] = { "sync", "async", NULL };

int rm_ps_from_json(const cJSON *o, const char *ctx, rm_ps_spec *ps, rm_err *err)
{
    static const char *const k_ps[] = { "replicas", "mode", "backupWorkers", "stalenessBound",
                                        "pushEverySteps", "fetchEverySteps", "warmStartSteps",
                                        NULL };
    int rc = rm_json_no_unknown(o, k_ps, ctx, err), iv;
    if (rc)
        return rc;
    ps->present = true;
    TRY(p_int(o, "replicas", ctx, &ps->replicas, &ps->set, RM_PS_SET_REPLICAS, err));
    iv = (int)ps->mode;
    TRY(p_enum(o, "mode", ctx, rm_ps_mode_names, &iv, err));
    if (cJSON_GetObjectItemCaseSensitive(o, "mode"))
        ps->set |= RM_PS_SET_MODE;
    ps->mode = (rm_ps_mode)iv;
    TRY(p_int(o, "backupWorkers", ctx, &ps->backup_workers, &ps->set, RM_PS_SET_BACKUP, err));
    TRY(p_int(o, "stalenessBound", ctx, &ps->staleness_bound, &ps->set, RM_PS_SET_STALENESS, err));
    TRY(p_int(o, "pushEverySteps", ctx, &ps->push_every_steps, &ps->set, RM_PS_SET_PUSH, err));
    TRY(p_int(o, "fetchEverySteps", ctx, &ps->fetch_every_steps, &ps->set, RM_PS_SET_FETCH, err));
    TRY(p_int(o, "warmStartSteps", ctx, &ps->warm_start_steps, &ps->set, RM_PS_SET_WARM, err));
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

/* spec.parameterServer against spec.strategy and the rest of the spec; combinations that make no
 * sense name both fields. */
static int ps_validate(const rm_tj_spec *s, rm_err *err)
{
    const rm_ps_spec *ps = &s->ps;
    const char *P = "spec.parameterServer";
    if ((unsigned)s->strategy > RM_STRATEGY_PS)
        return rm_err_field(err, RM_EINVAL, "spec.strategy", "must be one of allreduce, parameterServer");
    if (s->strategy != RM_STRATEGY_PS) {
        if (ps->present)
            return rm_err_field(err, RM_EINVAL, P, "is only used with spec.strategy: parameterServer "
                                "(spec.strategy is allreduce)");
        return RM_OK;
    }
    if (ps->replicas < 1 || ps->replicas > RM_PS_MAX_SERVERS)
        return bad(err, P, "replicas", "must be between 1 and %d (got %d)", RM_PS_MAX_SERVERS,
                   ps->replicas);
    if ((unsigned)ps->mode > RM_PS_ASYNC)
        return bad(err, P, "mode", "must be one of sync, async");
    if (ps->backup_workers < 0)
        return bad(err, P, "backupWorkers", "must be >= 0");
    if (ps->backup_workers >= s->replicas || (s->min_replicas > 0 && ps->backup_workers >= s->min_replicas))
        return bad(err, P, "backupWorkers", "must be < spec.replicas (%d) and spec.minReplicas (%d): "
                   "a step needs at least one gradient", s->replicas, s->min_replicas);
    if (ps->backup_workers > 0 && ps->mode == RM_PS_ASYNC)
        return bad(err, P, "backupWorkers", "is for spec.parameterServer.mode: sync only (mode is "
                   "async, where nobody waits for a straggler)");
    if (ps->staleness_bound < 0 || ps->staleness_bound > 1000000)
        return bad(err, P, "stalenessBound", "must be between 0 (unbounded) and 1000000");
    if (ps->push_every_steps < 1 || ps->push_every_steps > 10000)
        return bad(err, P, "pushEverySteps", "must be between 1 and 10000");
    if (ps->fetch_every_steps < 1 || ps->fetch_every_steps > 10000)
        return bad(err, P, "fetchEverySteps", "must be between 1 and 10000");
    if (ps->warm_start_steps < 0 || ps->warm_start_steps > 100000000)
        return bad(err, P, "warmStartSteps", "must be between 0 (no warm start) and 100000000");
    if (ps->warm_start_steps > 0 && ps->mode != RM_PS_ASYNC)
        return bad(err, P, "warmStartSteps", "is for spec.parameterServer.mode: async only (mode "
                   "is sync, where every step already waits for the workers)");
    if (ps->mode == RM_PS_SYNC && (ps->push_every_steps != 1 || ps->fetch_every_steps != 1))
        return bad(err, P, ps->push_every_steps != 1 ? "pushEverySteps" : "fetchEverySteps",
                   "must be 1 with spec.parameterServer.mode: sync (Downpour's n_push/n_fetch are "
                   "for mode: async)");
    if (s->backend == RM_BACKEND_NCCL || s->backend == RM_BACKEND_MPI)
        return rm_err_field(err, RM_EINVAL, "spec.backend", "%s cannot be used with spec.strategy: "
                            "parameterServer (servers and workers talk TCP; use auto or ring)",
                            rm_backend_name(s->backend));
    if (s->training.mode != RM_MODE_TRAIN)
        return rm_err_field(err, RM_EINVAL, "spec.training.mode", "must be train with spec.strategy: "
                            "parameterServer");
    if (s->training.precision != RM_PREC_FP32)
        return rm_err_field(err, RM_EINVAL, "spec.training.precision", "must be fp32 with "
                            "spec.strategy: parameterServer (servers apply fp32 updates on the CPU)");
    if (s->training.sharding != RM_SHARD_NONE)
        return rm_err_field(err, RM_EINVAL, "spec.training.sharding", "must be none with spec.strategy: "
                            "parameterServer (the servers already hold the parameters in shards; "
                            "sharding is a mode of spec.strategy: allreduce)");
    return RM_OK;
}

/* ---- spec.parallelism (docs/strategies.md#pipeline-stages) -------------------------------------- */

const char *const rm_pipe_schedule_names[] = { "1f1b", "gpipe", NULL };

int rm_par_from_json(const cJSON *o, const char *ctx, rm_par_spec *par, rm_err *err)
{
    static const char *const k_par[] = { "pipelineStages", "microBatches", "schedule", NULL };
    int rc = rm_json_no_unknown(o, k_par, ctx, err), iv;
    if (rc)
        return rc;
    par->present = true;
    TRY(p_int(o, "pipelineStages", ctx, &par->pipeline_stages, &par->set, RM_PAR_SET_STAGES, err));
    TRY(p_int(o, "microBatches", ctx, &par->micro_batches, &par->set, RM_PAR_SET_MICRO, err));
    iv = (int)par->schedule;
    TRY(p_enum(o, "schedule", ctx, rm_pipe_schedule_names, &iv, err));
    if (cJSON_GetObjectItemCaseSensitive(o, "schedule"))
        par->set |= RM_PAR_SET_SCHEDULE;
    par->schedule = (rm_pipe_schedule)iv;
out:
    return rc;
}

void rm_par_defaults(rm_par_spec *par)
{
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
    add_num(o, "pipelineStages", par->pipeline_stages, par->set & RM_PAR_SET_STAGES);
    add_num(o, "microBatches", par->micro_batches, par->set & RM_PAR_SET_MICRO);
    if (par->schedule != RM_PIPE_1F1B || (par->set & RM_PAR_SET_SCHEDULE))
        cJSON_AddStringToObject(o, "schedule",
                                rm_pipe_schedule_names[par->schedule == RM_PIPE_GPIPE]);
    return o;
}

int rm_par_validate(const rm_tj_spec *s, rm_err *err)
{
    const rm_par_spec *par = &s->par;
    const char *P = "spec.parallelism";
    /* an unset field validates as its default (a spec parsed without rm_tj_defaults) */
    int p = par->pipeline_stages, mb = par->micro_batches;
    if (p == 0 && !(par->set & RM_PAR_SET_STAGES))
        p = 1;
    if (mb == 0 && !(par->set & RM_PAR_SET_MICRO))
        mb = 1;
    if (p < 1 || p > RM_TJ_MAX_REPLICAS)
        return bad(err, P, "pipelineStages", "must be between 1 and %d (got %d)", RM_TJ_MAX_REPLICAS, p);
    if (mb < 1)
        return bad(err, P, "microBatches", "must be >= 1 (got %d)", mb);
    if ((unsigned)par->schedule > RM_PIPE_GPIPE)
        return bad(err, P, "schedule", "must be one of 1f1b, gpipe");
    const rm_training_spec *t = &s->training;
    if (t->mode == RM_MODE_TRAIN && mb > t->batch_size_per_worker)
        return bad(err, P, "microBatches", "must be <= spec.training.batchSizePerWorker (%d): every "
                   "micro-batch needs at least one sample (got %d)", t->batch_size_per_worker,
                   mb);
    if (p == 1)
        return RM_OK;
    if (s->replicas % p)
        return rm_err_field(err, RM_EINVAL, "spec.replicas", "must be a multiple of "
                            "spec.parallelism.pipelineStages (%d): the workers form a grid of %d "
                            "stages x replicas/%d data-parallel replicas (got %d)", p, p, p, s->replicas);
    if (s->min_replicas % p)
        return rm_err_field(err, RM_EINVAL, "spec.minReplicas", "must be a multiple of "
                            "spec.parallelism.pipelineStages (%d) (got %d)", p, s->min_replicas);
    if (s->max_replicas % p)
        return rm_err_field(err, RM_EINVAL, "spec.maxReplicas", "must be a multiple of "
                            "spec.parallelism.pipelineStages (%d) (got %d)", p, s->max_replicas);
    int layers = t->nhidden + 1;
    if (p > layers)
        return bad(err, P, "pipelineStages", "must be <= the model's %d linear layers "
                   "(spec.training.model.hidden has %d widths; each stage holds at least one layer) "
                   "(got %d)", layers, t->nhidden, p);
    if (s->strategy != RM_STRATEGY_ALLREDUCE)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.pipelineStages", "must be 1 with "
                            "spec.strategy: parameterServer in this version (got %d)", p);
    if (t->sharding != RM_SHARD_NONE)
        return rm_err_field(err, RM_EINVAL, "spec.training.sharding", "must be none with "
                            "spec.parallelism.pipelineStages > 1 in this version (a stage already "
                            "holds only its own layers)");
    if (t->mode != RM_MODE_TRAIN)
        return rm_err_field(err, RM_EINVAL, "spec.training.mode", "must be train with "
                            "spec.parallelism.pipelineStages > 1");
    if (t->precision != RM_PREC_FP32)
        return rm_err_field(err, RM_EINVAL, "spec.training.precision", "must be fp32 with "
                            "spec.parallelism.pipelineStages > 1 in this version");
    /* nccl: GPU stages (the world's collectives on the GPU, the stage links NCCL send/recv) */
    if (s->backend == RM_BACKEND_MPI)
        return rm_err_field(err, RM_EINVAL, "spec.backend", "%s cannot be used with "
                            "spec.parallelism.pipelineStages > 1 in this version (stages talk TCP, "
                            "or NCCL on GPUs; use auto, ring or nccl)", rm_backend_name(s->backend));
    return RM_OK;
}

/* spec.training.optimizer.type lbfgs (docs/strategies.md#sandblaster-l-bfgs) against the rest of the
 * spec: the coordinator and the (s, y) history live on the parameter servers, and a pass is a
 * synchronous full-batch evaluation, so it needs spec.strategy parameterServer in mode sync; stragglers
 * are answered by reissuing portions, so backup workers have no meaning there. */
static int lbfgs_validate(const rm_tj_spec *s, rm_err *err)
{
    const char *O = "spec.training.optimizer.type";
    if (s->training.optimizer.type != RM_OPT_LBFGS)
        return RM_OK;
    if (s->strategy != RM_STRATEGY_PS)
        return rm_err_field(err, RM_EINVAL, O, "lbfgs needs spec.strategy: parameterServer (the "
                            "parameters and the L-BFGS history live on the server shards; "
                            "spec.strategy is allreduce)");
    if (s->ps.mode != RM_PS_SYNC)
        return rm_err_field(err, RM_EINVAL, "spec.parameterServer.mode", "must be sync with %s: "
                            "lbfgs (every pass evaluates the full batch at one set of parameters)", O);
    if (s->ps.backup_workers != 0)
        return rm_err_field(err, RM_EINVAL, "spec.parameterServer.backupWorkers", "must be 0 with "
                            "%s: lbfgs (a straggler's portions are reissued to other workers instead)", O);
    return RM_OK;
}

int rm_tj_validate(const rm_tj *tj, rm_err *err)
{
    const rm_tj_spec *s = &tj->spec;
    if (!tj->name || !*tj->name)
        return rm_err_field(err, RM_EINVAL, "metadata.name", "required");
    /* The job's name becomes its headless Service's name (a DNS-1035 label) and the prefix of
     * every pod hostname (checked against maxReplicas below). */
    if (!dns1035(tj->name))
        return rm_err_field(err, RM_EINVAL, "metadata.name",
                            "must be a DNS-1035 label: at most 63 lowercase letters, digits or '-', "
                            "starting with a letter and ending with a letter or digit, because it "
                            "names the job's headless Service (got \"%s\")", tj->name);
    if (tj->namespace_ && !dns1123(tj->namespace_, 0, 63))
        return rm_err_field(err, RM_EINVAL, "metadata.namespace",
                            "must be a lowercase DNS-1123 label (got \"%s\")", tj->namespace_);
    if (s->replicas < 1)
        return rm_err_field(err, RM_EINVAL, "spec.replicas", "must be >= 1");
    if (s->replicas > RM_TJ_MAX_REPLICAS)
        return rm_err_field(err, RM_EINVAL, "spec.replicas", "must be <= %d", RM_TJ_MAX_REPLICAS);
    if (s->min_replicas < 1)
        return rm_err_field(err, RM_EINVAL, "spec.minReplicas", "must be >= 1");
    if (s->min_replicas > s->replicas)
        return rm_err_field(err, RM_EINVAL, "spec.minReplicas", "must be <= spec.replicas");
    if (s->max_replicas < 1)
        return rm_err_field(err, RM_EINVAL, "spec.maxReplicas", "must be >= 1");
    if (s->replicas > s->max_replicas)
        return rm_err_field(err, RM_EINVAL, "spec.replicas", "must be <= spec.maxReplicas");
    if (s->max_replicas > RM_TJ_MAX_REPLICAS)
        return rm_err_field(err, RM_EINVAL, "spec.maxReplicas", "must be <= %d", RM_TJ_MAX_REPLICAS);
    if ((int)strlen(tj->name) > rm_tj_name_max(s->max_replicas))
        return rm_err_field(err, RM_EINVAL, "metadata.name",
                            "must be at most %d characters with spec.maxReplicas %d: the pod hostname "
                            "\"%s%s%d\" would be %d characters, and a hostname is a DNS-1123 label of "
                            "at most %d", rm_tj_name_max(s->max_replicas), s->max_replicas, tj->name,
                            RM_TJ_WORKER_INFIX, s->max_replicas - 1,
                            (int)strlen(tj->name) + (int)strlen(RM_TJ_WORKER_INFIX) +
                                decimal_digits(s->max_replicas - 1),
                            RM_TJ_LABEL_MAX);
    if ((unsigned)s->backend > RM_BACKEND_MPI)
        return rm_err_field(err, RM_EINVAL, "spec.backend", "must be one of auto, ring, nccl, mpi");
    if (s->restart.max_restarts < 0)
        return rm_err_field(err, RM_EINVAL, "spec.restartPolicy.maxRestarts", "must be >= 0");
    if (!(s->restart.backoff_seconds >= 0 && s->restart.backoff_seconds <= 3600))
        return rm_err_field(err, RM_EINVAL, "spec.restartPolicy.backoffSeconds",
                            "must be between 0 and 3600");
    if (!(s->restart.progress_deadline_seconds >= 0) || !isfinite(s->restart.progress_deadline_seconds))
        return rm_err_field(err, RM_EINVAL, "spec.restartPolicy.progressDeadlineSeconds", "must be >= 0");
    if (s->run.active_deadline_seconds < 0)
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.activeDeadlineSeconds", "must be >= 0");
    if (s->run.ttl_seconds_after_finished < -1)
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.ttlSecondsAfterFinished", "must be >= -1");
    if ((unsigned)s->run.clean_pod_policy > RM_CLEAN_NONE)
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.cleanPodPolicy",
                            "must be one of All, Running, None");
    if (s->run.managed_by && (!*s->run.managed_by || strlen(s->run.managed_by) > 63))
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.managedBy",
                            "must be 1 to 63 characters");
    if (s->checkpoint.path && !*s->checkpoint.path)
        return rm_err_field(err, RM_EINVAL, "spec.checkpoint.path", "must not be empty");
    if (has_ctrl(s->checkpoint.path))
        return rm_err_field(err, RM_EINVAL, "spec.checkpoint.path", "must not contain control characters");
    if (has_ctrl(s->run.managed_by))
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.managedBy", "must not contain control characters");
    if (s->checkpoint.interval_steps < 1)
        return rm_err_field(err, RM_EINVAL, "spec.checkpoint.intervalSteps", "must be >= 1");
    RM_CHECK(validate_scheduling(s, err));
    if (s->checkpoint.keep < 1)
        return rm_err_field(err, RM_EINVAL, "spec.checkpoint.keep", "must be >= 1");
    if (s->template && !cJSON_IsObject(s->template))
        return rm_err_field(err, RM_EINVAL, "spec.template", "must be an object");
    int rc = rm_training_validate(&s->training, "spec.training", err);
    if (rc)
        return rc;
    if ((rc = ps_validate(s, err)))
        return rc;
    if ((rc = rm_par_validate(s, err)))
        return rc;
    if ((rc = lbfgs_validate(s, err)))
        return rc;
    if (s->placement.present && (s->placement.workers_per_node < 1 || s->placement.workers_per_node > RM_MAX_WORLD))
        return rm_err_field(err, RM_EINVAL, "spec.placement.workersPerNode", "must be between 1 and %d "
                            "(required with spec.placement)", RM_MAX_WORLD);
    if (s->training.allreduce == RM_AR_HIER && (s->backend == RM_BACKEND_NCCL || s->backend == RM_BACKEND_MPI))
        return rm_err_field(err, RM_EINVAL, "spec.training.allreduce", "hierarchical needs spec.backend "
                            "auto or ring (got %s, which picks its own algorithm: NCCL_ALGO / Open MPI's "
                            "coll_tuned settings)", rm_backend_name(s->backend));
    if (s->training.allreduce == RM_AR_HIER && s->backend == RM_BACKEND_AUTO && rm_template_gpus(s->template) > 0)
        return rm_err_field(err, RM_EINVAL, "spec.training.allreduce", "hierarchical is the CPU ring's; with "
                            "nvidia.com/gpu requested spec.backend auto resolves to nccl, which picks its own "
                            "algorithm (set spec.backend: ring to use it)");
    if (s->training.allreduce == RM_AR_HIER && s->strategy == RM_STRATEGY_PS)
        return rm_err_field(err, RM_EINVAL, "spec.training.allreduce", "hierarchical needs spec.strategy: "
                            "allreduce (parameter-server workers never allreduce)");
    /* An epoch is train_samples / global batch steps (the tail is dropped), so a global batch
     * larger than the training set makes epochs of zero steps: the group would re-form forever
     * without training. Checked at the largest world the job may reach (maxReplicas). */
    const rm_training_spec *t = &s->training;
    int64_t n = rm_training_samples(t);
    int world = s->max_replicas > s->replicas ? s->max_replicas : s->replicas;
    if (t->mode == RM_MODE_TRAIN && n > 0 && (int64_t)world * t->batch_size_per_worker > n)
        return rm_err_field(err, RM_EINVAL, "spec.training.batchSizePerWorker",
                            "the global batch %s (%d) x spec.training.batchSizePerWorker (%d) = %lld "
                            "samples is larger than the %lld training samples of %s: an epoch would "
                            "have no step (at most %lld per worker)",
                            world == s->replicas ? "spec.replicas" : "spec.maxReplicas", world,
                            t->batch_size_per_worker, (long long)world * t->batch_size_per_worker,
                            (long long)n, t->dataset ? t->dataset : "fashion-mnist",
                            (long long)(n / world));
    return check_template_memory(tj, err);
}

/* spec.managedBy and spec.runPolicy.schedulingPolicy. Names follow Kubernetes' own rules: a queue
 * (Volcano Queue, Kueue LocalQueue) and a PriorityClass are DNS-1123 subdomains (<= 253). */
static bool dns1123_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && c != '-' && c != '.')
            return false;
        if ((i == 0 || i == n - 1) && !alnum)
            return false;
    }
    return true;
}

static int validate_scheduling(const rm_tj_spec *s, rm_err *err)
{
    if (s->managed_by && (!*s->managed_by || strlen(s->managed_by) > 63 || has_ctrl(s->managed_by)))
        return rm_err_field(err, RM_EINVAL, "spec.managedBy",
                            "must be 1 to 63 printable characters (\"" RM_TJ_MANAGED_BY_US "\" or \""
                            RM_TJ_MANAGED_BY_MULTIKUEUE "\")");
    if (s->managed_by && s->run.managed_by && strcmp(s->managed_by, s->run.managed_by) != 0)
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.managedBy",
                            "\"%s\" differs from spec.managedBy \"%s\" (spec.managedBy replaces it: set only that)",
                            s->run.managed_by, s->managed_by);
    if (s->sched.queue && !dns1123_subdomain(s->sched.queue))
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.schedulingPolicy.queue",
                            "\"%s\" must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253)",
                            s->sched.queue);
    if (s->sched.priority_class && !dns1123_subdomain(s->sched.priority_class))
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.schedulingPolicy.priorityClass",
                            "\"%s\" must be a DNS-1123 subdomain (a PriorityClass name)",
                            s->sched.priority_class);
    if (s->sched.schedule_timeout_seconds < 0)
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
                            "must be >= 0");
    return RM_OK;
}

const char *rm_tj_managed_by(const rm_tj *tj)
{
    if (tj->spec.managed_by)
        return tj->spec.managed_by;
    return tj->spec.run.managed_by;
}

int64_t rm_training_samples(const rm_training_spec *t)
{
    bool builtin_dir = !t->data_dir || strcmp(t->data_dir, RM_TJ_FASHION_MNIST_DIR) == 0;
    if ((!t->dataset || strcmp(t->dataset, "fashion-mnist") == 0) && builtin_dir)
        return RM_TJ_FASHION_MNIST_TRAIN;
    return 0;
}

/* ---- spec / object parse ------------------------------------------------------------------------ */

/* spec.runPolicy.schedulingPolicy (see trainingjob.h); minResources values must be quantities. */
static int sched_policy_from_json(const cJSON *run, const char *uctx, rm_tj_spec *s, rm_err *err)
{
    static const char *const k_sched[] = { "queue", "priorityClass", "minResources",
                                           "scheduleTimeoutSeconds", NULL };
    char sctx[FIELD_CAP];
    const cJSON *o, *mr;
    int rc = RM_OK;
    TRY(p_obj(run, "schedulingPolicy", uctx, k_sched, &o, sctx, err));
    if (!o)
        return RM_OK;
    TRY(p_str(o, "queue", sctx, &s->sched.queue, err));
    TRY(p_str(o, "priorityClass", sctx, &s->sched.priority_class, err));
    TRY(p_int(o, "scheduleTimeoutSeconds", sctx, &s->sched.schedule_timeout_seconds, NULL, 0, err));
    TRY(p_obj(o, "minResources", sctx, NULL, &mr, NULL, err));
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
    static const char *const k_spec[] = { "replicas", "minReplicas", "maxReplicas", "backend",
                                          "restartPolicy", "runPolicy", "checkpoint", "training",
                                          "template", "managedBy", "strategy", "parameterServer",
                                          "parallelism", "placement", NULL };
    static const char *const k_restart[] = { "maxRestarts", "backoffSeconds",
                                             "progressDeadlineSeconds", NULL };
    static const char *const k_run[] = { "activeDeadlineSeconds", "ttlSecondsAfterFinished",
                                         "cleanPodPolicy", "suspend", "managedBy",
                                         "schedulingPolicy", NULL };
    static const char *const k_ckpt[] = { "path", "intervalSteps", "keep", NULL };
    char rctx[FIELD_CAP], uctx[FIELD_CAP], cctx[FIELD_CAP];
    const cJSON *o;
    int rc = RM_OK, iv;
    TRY(rm_json_no_unknown(sp, k_spec, "spec", err));
    TRY(p_int(sp, "replicas", "spec", &s->replicas, &s->set, RM_TJ_SET_REPLICAS, err));
    TRY(p_int(sp, "minReplicas", "spec", &s->min_replicas, &s->set, RM_TJ_SET_MIN_REPLICAS, err));
    TRY(p_int(sp, "maxReplicas", "spec", &s->max_replicas, &s->set, RM_TJ_SET_MAX_REPLICAS, err));
    iv = (int)s->backend;
    TRY(p_enum(sp, "backend", "spec", rm_backend_names, &iv, err));
    s->backend = (rm_backend)iv;
    TRY(p_obj(sp, "restartPolicy", "spec", k_restart, &o, rctx, err));
    if (o) {
        TRY(p_int(o, "maxRestarts", rctx, &s->restart.max_restarts, &s->set, RM_TJ_SET_MAX_RESTARTS, err));
        TRY(p_num(o, "backoffSeconds", rctx, &s->restart.backoff_seconds, &s->set, RM_TJ_SET_BACKOFF, err));
        TRY(p_num(o, "progressDeadlineSeconds", rctx, &s->restart.progress_deadline_seconds, &s->set,
                  RM_TJ_SET_PROGRESS_DEADLINE, err));
    }
    TRY(p_obj(sp, "runPolicy", "spec", k_run, &o, uctx, err));
    if (o) {
        TRY(p_i64(o, "activeDeadlineSeconds", uctx, &s->run.active_deadline_seconds, NULL, 0, err));
        TRY(p_i64(o, "ttlSecondsAfterFinished", uctx, &s->run.ttl_seconds_after_finished, &s->set,
                  RM_TJ_SET_TTL, err));
        iv = (int)s->run.clean_pod_policy;
        TRY(p_enum(o, "cleanPodPolicy", uctx, clean_names, &iv, err));
        s->run.clean_pod_policy = (rm_clean_policy)iv;
        TRY(p_bool(o, "suspend", uctx, &s->run.suspend, NULL, 0, err));
        TRY(p_str(o, "managedBy", uctx, &s->run.managed_by, err));
        TRY(sched_policy_from_json(o, uctx, s, err));
    }
    TRY(p_str(sp, "managedBy", "spec", &s->managed_by, err));
    TRY(p_obj(sp, "checkpoint", "spec", k_ckpt, &o, cctx, err));
    if (o) {
        TRY(p_str(o, "path", cctx, &s->checkpoint.path, err));
        TRY(p_int(o, "intervalSteps", cctx, &s->checkpoint.interval_steps, &s->set, RM_TJ_SET_CKPT_INTERVAL, err));
        TRY(p_int(o, "keep", cctx, &s->checkpoint.keep, &s->set, RM_TJ_SET_CKPT_KEEP, err));
    }
    TRY(p_obj(sp, "training", "spec", NULL, &o, NULL, err));
    if (o)
        TRY(rm_training_from_json(o, "spec.training", &s->training, err));
    TRY(p_obj(sp, "template", "spec", NULL, &o, NULL, err));
    if (o && !(s->template = cJSON_Duplicate(o, 1)))
        TRY(rm_errf(err, RM_ENOMEM, "out of memory"));
    iv = (int)s->strategy;
    TRY(p_enum(sp, "strategy", "spec", rm_strategy_names, &iv, err));
    s->strategy = (rm_strategy)iv;
    TRY(p_obj(sp, "parameterServer", "spec", NULL, &o, NULL, err));
    if (o)
        TRY(rm_ps_from_json(o, "spec.parameterServer", &s->ps, err));
    TRY(p_obj(sp, "parallelism", "spec", NULL, &o, NULL, err));
    if (o)
        TRY(rm_par_from_json(o, "spec.parallelism", &s->par, err));
    {
        static const char *const k_place[] = { "workersPerNode", NULL };
        char pctx[FIELD_CAP];
        TRY(p_obj(sp, "placement", "spec", k_place, &o, pctx, err));
        if (o) {
            s->placement.present = true;
            TRY(p_int(o, "workersPerNode", pctx, &s->placement.workers_per_node, NULL, 0, err));
        }
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
    rm_training_free(&s->training);
    cJSON_Delete(s->template);
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
    int rc = p_obj(md, key, "metadata", NULL, &m, NULL, err);
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
    int rc = optional(rm_json_str(o, k, false, "", &s, err), NULL, 0);
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
    static const char *const k_top[] = { "apiVersion", "kind", "metadata", "spec", "status", NULL };
    if (!obj || !cJSON_IsObject(obj))
        return rm_errf(err, RM_EINVAL, "a TrainingJob must be a JSON object");
    TRY(rm_json_no_unknown(obj, k_top, "", err));
    TRY(p_const(obj, "apiVersion", RM_TJ_API_VERSION, err));
    TRY(p_const(obj, "kind", RM_TJ_KIND, err));
    TRY(rm_json_obj(obj, "metadata", true, "", &md, err));
    TRY(rm_json_str(md, "name", true, "metadata", &s, err));
    TRY(p_str(md, "name", "metadata", &out->name, err));
    TRY(p_str(md, "namespace", "metadata", &out->namespace_, err));
    TRY(p_str(md, "uid", "metadata", &out->uid, err));
    TRY(p_str(md, "resourceVersion", "metadata", &out->resource_version, err));
    TRY(p_i64(md, "generation", "metadata", &out->generation, NULL, 0, err));
    TRY(string_map(md, "labels", &out->labels, err));
    TRY(string_map(md, "annotations", &out->annotations, err));
    TRY(rm_json_obj(obj, "spec", true, "", &sp, err));
    TRY(spec_from_json(sp, &out->spec, err));
    TRY(p_obj(obj, "status", "", NULL, &st, NULL, err));
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

cJSON *rm_training_to_json(const rm_training_spec *t)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "mode", mode_names[t->mode <= RM_MODE_BENCH ? t->mode : 0]);
    add_str(o, "dataset", t->dataset);
    add_str(o, "dataDir", t->data_dir);
    if (t->model_type || t->nhidden || (t->set & RM_TR_SET_HIDDEN)) {
        cJSON *m = cJSON_AddObjectToObject(o, "model");
        if (m) {
            add_str(m, "type", t->model_type);
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
        cJSON_AddStringToObject(op, "type", opt_names[x->type <= RM_OPT_LBFGS ? x->type : 0]);
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
    cJSON_AddStringToObject(o, "schedule", sched_names[t->schedule <= RM_SCHED_CONSTANT ? t->schedule : 0]);
    add_num(o, "stepGamma", t->step_gamma, t->set & RM_TR_SET_STEP_GAMMA);
    add_num(o, "stepEveryEpochs", t->step_every_epochs, t->set & RM_TR_SET_STEP_EVERY);
    cJSON_AddStringToObject(o, "precision", rm_precision_names[t->precision <= RM_PREC_FP16 ? t->precision : 0]);
    add_num(o, "fusionBufferMB", t->fusion_buffer_mb, t->set & RM_TR_SET_FUSION);
    if (t->sharding != RM_SHARD_NONE && (unsigned)t->sharding <= RM_SHARD_FULL)   /* none: omitted */
        cJSON_AddStringToObject(o, "sharding", rm_sharding_names[t->sharding]);
    if (t->allreduce != RM_AR_AUTO && (unsigned)t->allreduce <= RM_AR_HIER)   /* auto: omitted */
        cJSON_AddStringToObject(o, "allreduce", rm_allreduce_names[t->allreduce]);
    add_num(o, "seed", (double)t->seed, t->set & RM_TR_SET_SEED);
    add_num(o, "maxSteps", t->max_steps, false);
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
        cJSON_AddStringToObject(u, "cleanPodPolicy",
                                clean_names[s->run.clean_pod_policy <= RM_CLEAN_NONE ? s->run.clean_pod_policy : 0]);
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
    return o;
}

static void add_time(cJSON *o, const char *k, double t)
{
    if (t > 0) {
        char b[32];
        rm_json_time(b, t);
        cJSON_AddStringToObject(o, k, b);
    }
}

cJSON *rm_tj_status_to_json(const rm_tj_status *st)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "phase", rm_phase_name(st->phase));
    cJSON_AddNumberToObject(o, "observedGeneration", (double)st->observed_generation);
    cJSON *cs = cJSON_AddArrayToObject(o, "conditions");
    for (int i = 0; cs && i < RM_COND__COUNT; i++) {
        const rm_condition *c = &st->conditions[i];
        if (!c->present)
            continue;
        cJSON *x = cJSON_CreateObject();
        if (!x)
            continue;
        cJSON_AddStringToObject(x, "type", rm_cond_name((rm_cond_type)i));
        cJSON_AddStringToObject(x, "status", c->status ? "True" : "False");
        cJSON_AddStringToObject(x, "reason", c->reason);
        cJSON_AddStringToObject(x, "message", c->message);
        char b[32];
        rm_json_time(b, c->last_transition);
        cJSON_AddStringToObject(x, "lastTransitionTime", b);
        cJSON_AddNumberToObject(x, "observedGeneration", (double)c->observed_generation);
        cJSON_AddItemToArray(cs, x);
    }
    cJSON_AddNumberToObject(o, "replicas", st->replicas);
    cJSON_AddNumberToObject(o, "readyReplicas", st->ready_replicas);
    if (st->ps_replicas > 0) {
        cJSON *ps = cJSON_AddObjectToObject(o, "parameterServers");
        if (ps) {
            cJSON_AddNumberToObject(ps, "replicas", st->ps_replicas);
            cJSON_AddNumberToObject(ps, "readyReplicas", st->ps_ready);
        }
    }
    cJSON_AddNumberToObject(o, "epoch", st->epoch);
    cJSON_AddNumberToObject(o, "restarts", st->restarts);
    cJSON *p = cJSON_AddObjectToObject(o, "progress");
    if (p) {
        cJSON_AddNumberToObject(p, "step", (double)st->progress.step);
        cJSON_AddNumberToObject(p, "epoch", st->progress.train_epoch);
        cJSON_AddNumberToObject(p, "loss", isfinite(st->progress.loss) ? st->progress.loss : 0);
        cJSON_AddNumberToObject(p, "samplesPerSecond", st->progress.samples_per_second);
        cJSON_AddNumberToObject(p, "lastCheckpointStep", (double)st->progress.last_checkpoint_step);
        cJSON_AddNumberToObject(p, "allreduceGBps", st->progress.allreduce_gbps);
        if (st->progress.nevals > 0) {
            cJSON *ev = cJSON_AddArrayToObject(p, "evaluations");
            for (int i = 0; ev && i < st->progress.nevals && i < RM_TJ_MAX_EVALS; i++) {
                const rm_tj_eval *e = &st->progress.evals[i];
                cJSON *x = cJSON_CreateObject();
                if (!x)
                    break;
                cJSON_AddNumberToObject(x, "epoch", e->epoch);
                cJSON_AddNumberToObject(x, "testAccuracy", isfinite(e->test_accuracy) ? e->test_accuracy : 0);
                cJSON_AddNumberToObject(x, "trainLoss", isfinite(e->train_loss) ? e->train_loss : 0);
                cJSON_AddItemToArray(ev, x);
            }
        }
    }
    if (st->high_step > 0 || st->high_epoch > 0) {
        cJSON *h = cJSON_AddObjectToObject(o, "stepHighWater");
        if (h) {
            cJSON_AddNumberToObject(h, "step", (double)st->high_step);
            cJSON_AddNumberToObject(h, "epoch", st->high_epoch);
        }
    }
    if (st->result.present) {
        cJSON *r = cJSON_AddObjectToObject(o, "result");
        if (r) {
            cJSON_AddNumberToObject(r, "testAccuracy", st->result.test_accuracy);
            cJSON_AddNumberToObject(r, "trainLoss", st->result.train_loss);
            cJSON_AddNumberToObject(r, "steps", (double)st->result.steps);
            cJSON_AddNumberToObject(r, "seconds", st->result.seconds);
            cJSON_AddNumberToObject(r, "samplesPerSecond", st->result.samples_per_second);
            if (st->result.peak_rss_bytes > 0) {
                cJSON *m = cJSON_AddObjectToObject(r, "memoryBytes");
                cJSON_AddNumberToObject(m, "params", st->result.memory_params);
                cJSON_AddNumberToObject(m, "grads", st->result.memory_grads);
                cJSON_AddNumberToObject(m, "optimizer", st->result.memory_optimizer);
                cJSON_AddNumberToObject(m, "activations", st->result.memory_activations);
                cJSON_AddNumberToObject(r, "peakRssBytes", st->result.peak_rss_bytes);
            }
        }
    }
    add_time(o, "startTime", st->start_time);
    add_time(o, "completionTime", st->completion_time);
    add_time(o, "lastRestartTime", st->last_restart_time);
    if (st->message[0])
        cJSON_AddStringToObject(o, "message", st->message);
    return o;
}

cJSON *rm_tj_to_json(const rm_tj *tj)
{
    cJSON *md;
    cJSON *o = rm_json_object_head(RM_TJ_API_VERSION, RM_TJ_KIND, tj->name, tj->namespace_,
                                   tj->uid, tj->resource_version, tj->generation, &md);
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

/* ---- status parse ------------------------------------------------------------------------------ */

static int p_time(const cJSON *o, const char *k, const char *ctx, double *out, rm_err *err)
{
    const char *s = NULL;
    int rc = optional(rm_json_str(o, k, false, ctx, &s, err), NULL, 0);
    if (rc || !s)
        return rc;
    if (rm_json_parse_time(s, out) != RM_OK) {
        char f[FIELD_CAP];
        join(f, ctx, k);
        return rm_err_field(err, RM_EINVAL, f, "must be an RFC 3339 time (got \"%s\")", s);
    }
    return RM_OK;
}

static int p_buf(const cJSON *o, const char *k, const char *ctx, char *buf, size_t cap, rm_err *err)
{
    const char *s = NULL;
    int rc = optional(rm_json_str(o, k, false, ctx, &s, err), NULL, 0);
    if (rc || !s)
        return rc;
    snprintf(buf, cap, "%s", s);
    return RM_OK;
}

/* Status is written by us, so unknown keys (e.g. the operator's "workers", "selector") are kept
 * out of the struct but are not errors. */
int rm_tj_status_from_json(const cJSON *so, rm_tj_status *st, rm_err *err)
{
    int rc = RM_OK, iv;
    const cJSON *o;
    memset(st, 0, sizeof *st);
    if (!so || cJSON_IsNull(so))
        return RM_OK;
    if (!cJSON_IsObject(so))
        return rm_err_field(err, RM_EINVAL, "status", "must be an object");
    iv = 0;
    TRY(p_enum(so, "phase", "status", phase_names, &iv, err));
    st->phase = (rm_phase)iv;
    TRY(p_i64(so, "observedGeneration", "status", &st->observed_generation, NULL, 0, err));
    TRY(p_arr(so, "conditions", "status", &o, err));
    if (o) {
        int i = 0;
        for (const cJSON *c = o->child; c; c = c->next, i++) {
            char cctx[FIELD_CAP];
            snprintf(cctx, sizeof cctx, "status.conditions[%d]", i);
            if (!cJSON_IsObject(c)) {
                rc = rm_err_field(err, RM_EINVAL, cctx, "must be an object");
                goto out;
            }
            int ti = 0;
            const cJSON *tt = cJSON_GetObjectItemCaseSensitive(c, "type");
            if (!cJSON_IsString(tt) || (ti = enum_index(cond_names, tt->valuestring)) < 0)
                continue; /* a condition type we do not own: ignore */
            rm_condition *x = &st->conditions[ti];
            const char *sv = NULL;
            TRY(rm_json_str(c, "status", true, cctx, &sv, err));
            if (strcmp(sv, "True") != 0 && strcmp(sv, "False") != 0 && strcmp(sv, "Unknown") != 0) {
                char f[FIELD_CAP + 8];
                snprintf(f, sizeof f, "%s.status", cctx);
                rc = rm_err_field(err, RM_EINVAL, f, "must be True or False");
                goto out;
            }
            x->status = strcmp(sv, "True") == 0;
            TRY(p_buf(c, "reason", cctx, x->reason, sizeof x->reason, err));
            TRY(p_buf(c, "message", cctx, x->message, sizeof x->message, err));
            TRY(p_time(c, "lastTransitionTime", cctx, &x->last_transition, err));
            TRY(p_i64(c, "observedGeneration", cctx, &x->observed_generation, NULL, 0, err));
            x->present = true;
        }
    }
    TRY(p_int(so, "replicas", "status", &st->replicas, NULL, 0, err));
    TRY(p_int(so, "readyReplicas", "status", &st->ready_replicas, NULL, 0, err));
    {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(so, "parameterServers");
        if (cJSON_IsObject(ps)) {
            TRY(p_int(ps, "replicas", "status.parameterServers", &st->ps_replicas, NULL, 0, err));
            TRY(p_int(ps, "readyReplicas", "status.parameterServers", &st->ps_ready, NULL, 0, err));
        }
    }
    TRY(p_int(so, "epoch", "status", &st->epoch, NULL, 0, err));
    TRY(p_int(so, "restarts", "status", &st->restarts, NULL, 0, err));
    TRY(p_obj(so, "progress", "status", NULL, &o, NULL, err));
    if (o) {
        TRY(p_i64(o, "step", "status.progress", &st->progress.step, NULL, 0, err));
        TRY(p_int(o, "epoch", "status.progress", &st->progress.train_epoch, NULL, 0, err));
        TRY(p_num(o, "loss", "status.progress", &st->progress.loss, NULL, 0, err));
        TRY(p_num(o, "samplesPerSecond", "status.progress", &st->progress.samples_per_second, NULL, 0, err));
        TRY(p_i64(o, "lastCheckpointStep", "status.progress", &st->progress.last_checkpoint_step, NULL, 0, err));
        TRY(p_num(o, "allreduceGBps", "status.progress", &st->progress.allreduce_gbps, NULL, 0, err));
        const cJSON *ev = NULL;
        TRY(p_arr(o, "evaluations", "status.progress", &ev, err));
        int k = 0;
        for (const cJSON *x = ev ? ev->child : NULL; x; x = x->next, k++) {
            char ectx[64];
            rm_sfmt(ectx, sizeof ectx, "status.progress.evaluations[%d]", k);
            int e = 0;
            double acc = 0, loss = 0;
            if (!cJSON_IsObject(x)) {
                rc = rm_err_field(err, RM_EINVAL, ectx, "must be an object");
                goto out;
            }
            TRY(p_int(x, "epoch", ectx, &e, NULL, 0, err));
            TRY(p_num(x, "testAccuracy", ectx, &acc, NULL, 0, err));
            TRY(p_num(x, "trainLoss", ectx, &loss, NULL, 0, err));
            rm_tj_progress_add_eval(&st->progress, e, acc, loss);
        }
    }
    TRY(p_obj(so, "stepHighWater", "status", NULL, &o, NULL, err));
    if (o) {
        TRY(p_i64(o, "step", "status.stepHighWater", &st->high_step, NULL, 0, err));
        TRY(p_int(o, "epoch", "status.stepHighWater", &st->high_epoch, NULL, 0, err));
    }
    TRY(p_obj(so, "result", "status", NULL, &o, NULL, err));
    if (o) {
        st->result.present = true;
        TRY(p_num(o, "testAccuracy", "status.result", &st->result.test_accuracy, NULL, 0, err));
        TRY(p_num(o, "trainLoss", "status.result", &st->result.train_loss, NULL, 0, err));
        TRY(p_i64(o, "steps", "status.result", &st->result.steps, NULL, 0, err));
        TRY(p_num(o, "seconds", "status.result", &st->result.seconds, NULL, 0, err));
        TRY(p_num(o, "samplesPerSecond", "status.result", &st->result.samples_per_second, NULL, 0, err));
        TRY(p_num(o, "peakRssBytes", "status.result", &st->result.peak_rss_bytes, NULL, 0, err));
        const cJSON *mb = NULL;
        TRY(p_obj(o, "memoryBytes", "status.result", NULL, &mb, NULL, err));
        if (mb) {
            TRY(p_num(mb, "params", "status.result.memoryBytes", &st->result.memory_params, NULL, 0, err));
            TRY(p_num(mb, "grads", "status.result.memoryBytes", &st->result.memory_grads, NULL, 0, err));
            TRY(p_num(mb, "optimizer", "status.result.memoryBytes", &st->result.memory_optimizer, NULL, 0, err));
            TRY(p_num(mb, "activations", "status.result.memoryBytes", &st->result.memory_activations,
                      NULL, 0, err));
        }
    }
    TRY(p_time(so, "startTime", "status", &st->start_time, err));
    TRY(p_time(so, "completionTime", "status", &st->completion_time, err));
    TRY(p_time(so, "lastRestartTime", "status", &st->last_restart_time, err));
    TRY(p_buf(so, "message", "status", st->message, sizeof st->message, err));
out:
    if (rc)
        memset(st, 0, sizeof *st);
    return rc;
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
    rc |= dup_json(&d->template, s->template);
    if (rc) {
        rm_tj_free(dst);
        return RM_ENOMEM;
    }
    return RM_OK;
}

int rm_tj_set_condition(rm_tj_status *st, rm_cond_type type, bool status, const char *reason,
                        const char *message, int64_t generation, double now)
{
    if (!st || (unsigned)type >= RM_COND__COUNT)
        return 0;
    rm_condition *c = &st->conditions[type];
    char r[sizeof c->reason] = "", m[sizeof c->message] = "";
    snprintf(r, sizeof r, "%s", reason ? reason : "");
    snprintf(m, sizeof m, "%s", message ? message : "");
    int changed = 0;
    if (!c->present || c->status != status) {
        c->last_transition = now;
        changed = 1;
    }
    if (!c->present || strcmp(c->reason, r) != 0 || strcmp(c->message, m) != 0 ||
        c->observed_generation != generation)
        changed = 1;
    c->present = true;
    c->status = status;
    memcpy(c->reason, r, sizeof r);
    memcpy(c->message, m, sizeof m);
    c->observed_generation = generation;
    return changed;
}

/* A quantity from resources.limits/requests: a JSON number, or a string of digits ("2"). */
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
    cJSON_ArrayForEach(c, containers) {
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

int rm_tj_progress_add_eval(rm_tj_progress *p, int epoch, double test_accuracy, double train_loss)
{
    int i = 0;
    if (epoch < 1)
        return 0;
    while (i < p->nevals && p->evals[i].epoch < epoch)
        i++;
    if (i < p->nevals && p->evals[i].epoch == epoch) {
        rm_tj_eval *e = &p->evals[i];
        if (e->test_accuracy == test_accuracy && e->train_loss == train_loss)
            return 0;
        e->test_accuracy = test_accuracy;
        e->train_loss = train_loss;
        return 1;
    }
    if (i >= RM_TJ_MAX_EVALS)
        return 0;
    int last = p->nevals < RM_TJ_MAX_EVALS ? p->nevals : RM_TJ_MAX_EVALS - 1;
    memmove(&p->evals[i + 1], &p->evals[i], (size_t)(last - i) * sizeof p->evals[0]);
    p->evals[i] = (rm_tj_eval){.epoch = epoch, .test_accuracy = test_accuracy, .train_loss = train_loss};
    if (p->nevals < RM_TJ_MAX_EVALS)
        p->nevals++;
    return 1;
}
