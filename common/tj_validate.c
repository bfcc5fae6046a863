/* tj_validate.c — the TrainingJob's rules (rm_tj_validate, rm_training_validate, rm_par_validate;
 * see trainingjob.h): the first violation wins, and its message names the exact field path
 * ("spec.minReplicas: must be <= spec.replicas") so `ringmaster validate` prints FILE:LINE for it.
 * Rules that relate several parts of the spec (strategy x backend x precision x parallelism) live
 * beside the part that introduced them. */
#include "common/tj_internal.h"
#include "common/json.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int validate_scheduling(const rm_tj_spec *s, rm_err *err);

/* Strings a job prints or uses as paths (checkpoint path, data folder, managedBy) carry no
 * control characters: they reach terminals and logs as they are. */
int tj_has_ctrl(const char *s)
{
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

int tj_bad(rm_err *err, const char *ctx, const char *key, const char *fmt, ...)
{
    char f[FIELD_CAP], msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tj_join(f, ctx, key);
    return rm_err_field(err, RM_EINVAL, f, "%s", msg);
}

int tj_bad_enum(rm_err *err, const char *ctx, const char *key, const char *const *names)
{
    char list[128];
    tj_names_list(list, sizeof list, names);
    return tj_bad(err, ctx, key, "must be one of %s", list);
}

int rm_training_validate(const rm_training_spec *t, const char *ctx, rm_err *err)
{
    char mctx[FIELD_CAP], octx[FIELD_CAP], bctx[FIELD_CAP];
    if (!ctx)
        ctx = "spec.training";
    tj_join(mctx, ctx, "model");
    tj_join(octx, ctx, "optimizer");
    tj_join(bctx, ctx, "bench");
    if ((unsigned)t->mode > RM_MODE_BENCH)
        return tj_bad_enum(err, ctx, "mode", rm_mode_names);
    if (t->dataset && strcmp(t->dataset, "fashion-mnist") != 0)
        return tj_bad(err, ctx, "dataset", "must be fashion-mnist (got \"%s\")", t->dataset);
    if (t->data_dir && !*t->data_dir)
        return tj_bad(err, ctx, "dataDir", "must not be empty");
    if (tj_has_ctrl(t->data_dir))
        return tj_bad(err, ctx, "dataDir", "must not contain control characters");
    if (t->model_type && rm_enum_index(rm_model_type_names, t->model_type) < 0) {
        char list[64];
        tj_names_list(list, sizeof list, rm_model_type_names);
        return tj_bad(err, mctx, "type", "must be one of %s (got \"%s\")", list, t->model_type);
    }
    if (t->nhidden < 0 || t->nhidden > RM_TJ_MAX_HIDDEN)
        return tj_bad(err, mctx, "hidden", "at most %d layers", RM_TJ_MAX_HIDDEN);
    for (int i = 0; i < t->nhidden; i++) {
        if (t->hidden[i] < 1 || t->hidden[i] > 65536) {
            char k[32];
            snprintf(k, sizeof k, "hidden[%d]", i);
            return tj_bad(err, mctx, k, "must be between 1 and 65536");
        }
    }
    rm_mem_estimate me;
    rm_training_memory(t, &me);
    if (me.params > RM_TJ_MAX_PARAMS) {
        char need[32];
        tj_fmt_bytes(need, sizeof need, me.model_bytes);
        return tj_bad(err, mctx, "hidden",
                      "the model has %lld parameters, more than the %lld a worker may "
                      "hold (it would need about %s per worker for weights, gradients, optimizer state "
                      "and checkpoint staging)",
                      (long long)me.params, (long long)RM_TJ_MAX_PARAMS, need);
    }
    if (t->epochs < 1 || t->epochs > 100000)
        return tj_bad(err, ctx, "epochs", "must be between 1 and 100000");
    if (t->batch_size_per_worker < 1 || t->batch_size_per_worker > 65536)
        return tj_bad(err, ctx, "batchSizePerWorker", "must be between 1 and 65536");
    const rm_optimizer_spec *o = &t->optimizer;
    if ((unsigned)o->type > RM_OPT__LAST)
        return tj_bad_enum(err, octx, "type", rm_opt_names);
    if (o->type == RM_OPT_LBFGS) {
        if (o->history < 1 || o->history > RM_LBFGS_MAX_HISTORY)
            return tj_bad(err, octx, "history", "must be between 1 and %d (got %d)", RM_LBFGS_MAX_HISTORY,
                          o->history);
        if (o->portions < 1 || o->portions > RM_LBFGS_MAX_PORTIONS)
            return tj_bad(err, octx, "portions", "must be between 1 and %d (got %d)", RM_LBFGS_MAX_PORTIONS,
                          o->portions);
        if ((unsigned)o->line_search > RM_LS_FIXED)
            return tj_bad_enum(err, octx, "lineSearch", rm_line_search_names);
        if (t->precision != RM_PREC_FP32)
            return tj_bad(err, ctx, "precision", "must be fp32 with %s.type: lbfgs", octx);
        if (o->weight_decay != 0)
            return tj_bad(err, octx, "weightDecay",
                          "must be 0 with %s.type: lbfgs (the full-batch "
                          "objective has no L2 term in this version)",
                          octx);
    } else if (o->history || o->portions || o->line_search_given) {
        return tj_bad(err, octx,
                      o->history    ? "history"
                      : o->portions ? "portions"
                                    : "lineSearch",
                      "is only used with %s.type: lbfgs (type is %s)", octx,
                      rm_enum_name(rm_opt_names, (int)o->type));
    }
    if (!(o->lr > 0) || !isfinite(o->lr) || o->lr > 100)
        return tj_bad(err, octx, "lr", "must be > 0 and <= 100");
    if (!(o->momentum >= 0 && o->momentum < 1))
        return tj_bad(err, octx, "momentum", "must be >= 0 and < 1");
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return tj_bad(err, octx, "weightDecay", "must be >= 0");
    if (!(o->beta1 >= 0 && o->beta1 < 1))
        return tj_bad(err, octx, "beta1", "must be >= 0 and < 1");
    if (!(o->beta2 >= 0 && o->beta2 < 1))
        return tj_bad(err, octx, "beta2", "must be >= 0 and < 1");
    if (!(o->eps > 0) || !isfinite(o->eps))
        return tj_bad(err, octx, "eps", "must be > 0");
    if (!(t->warmup_epochs >= 0) || !isfinite(t->warmup_epochs))
        return tj_bad(err, ctx, "warmupEpochs", "must be >= 0");
    if (t->warmup_epochs > t->epochs)
        return tj_bad(err, ctx, "warmupEpochs", "must be <= %s.epochs", ctx);
    if ((unsigned)t->schedule > RM_SCHED_CONSTANT)
        return tj_bad_enum(err, ctx, "schedule", rm_schedule_names);
    if (!(t->step_gamma > 0 && t->step_gamma <= 1))
        return tj_bad(err, ctx, "stepGamma", "must be > 0 and <= 1");
    if (t->step_every_epochs < 1)
        return tj_bad(err, ctx, "stepEveryEpochs", "must be >= 1");
    if ((unsigned)t->precision > RM_PREC_FP16)
        return tj_bad_enum(err, ctx, "precision", rm_precision_names);
    if (!(t->fusion_buffer_mb >= 0 && t->fusion_buffer_mb <= 4096))
        return tj_bad(err, ctx, "fusionBufferMB", "must be between 0 and 4096");
    if ((unsigned)t->sharding > RM_SHARD_FULL)
        return tj_bad_enum(err, ctx, "sharding", rm_sharding_names);
    if (t->sharding != RM_SHARD_NONE && t->precision != RM_PREC_FP32)
        return tj_bad(err, ctx, "sharding", "%s needs %s.precision fp32 in this version (got %s)",
                      rm_sharding_names[t->sharding], ctx, rm_precision_names[t->precision]);
    if ((unsigned)t->allreduce > RM_AR_HIER)
        return tj_bad_enum(err, ctx, "allreduce", rm_allreduce_names);
    if (t->max_steps < 0)
        return tj_bad(err, ctx, "maxSteps", "must be >= 0");
    if (t->bench_min_bytes < 4 || t->bench_min_bytes > (int64_t)1 << 40)
        return tj_bad(err, bctx, "minBytes", "must be between 4 and 2^40");
    if (t->bench_max_bytes < t->bench_min_bytes || t->bench_max_bytes > (int64_t)1 << 40)
        return tj_bad(err, bctx, "maxBytes", "must be >= %s.minBytes and <= 2^40", bctx);
    if (t->bench_factor < 2)
        return tj_bad(err, bctx, "stepFactor", "must be >= 2");
    if (t->bench_iters < 1 || t->bench_iters > 1000000)
        return tj_bad(err, bctx, "iters", "must be between 1 and 1000000");
    if (t->bench_warmup < 0 || t->bench_warmup > 1000000)
        return tj_bad(err, bctx, "warmupIters", "must be between 0 and 1000000");
    return tj_validate_models_data(t, ctx, err);
}

/* DNS-1123: lowercase alphanumerics and '-' ('.' too for subdomains), alnum at both ends. */
int tj_dns1123(const char *s, int allow_dot, size_t max)
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
    return tj_dns1123(s, 0, 63) && s[0] >= 'a' && s[0] <= 'z';
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

/* spec.parameterServer against spec.strategy and the rest of the spec; combinations that make no
 * sense name both fields. */
static int ps_validate(const rm_tj_spec *s, rm_err *err)
{
    const rm_ps_spec *ps = &s->ps;
    const char *P = "spec.parameterServer";
    if ((unsigned)s->strategy > RM_STRATEGY_PS)
        return tj_bad_enum(err, "spec", "strategy", rm_strategy_names);
    if (s->strategy != RM_STRATEGY_PS) {
        if (ps->present)
            return rm_err_field(err, RM_EINVAL, P,
                                "is only used with spec.strategy: parameterServer "
                                "(spec.strategy is allreduce)");
        return RM_OK;
    }
    if (ps->replicas < 1 || ps->replicas > RM_PS_MAX_SERVERS)
        return tj_bad(err, P, "replicas", "must be between 1 and %d (got %d)", RM_PS_MAX_SERVERS,
                      ps->replicas);
    /* one member's place per worker on every server, one kept (RM_PS_JOB_MAX_WORKERS) */
    int most = rm_tj_most_workers(s);
    if (most > RM_PS_JOB_MAX_WORKERS)
        return rm_err_field(err, RM_EINVAL, most == s->replicas ? "spec.replicas" : "spec.maxReplicas",
                            "must be <= %d with spec.strategy: parameterServer (got %d): every worker "
                            "holds a connection to every server, and a server takes %d (one is kept "
                            "for the L-BFGS coordinator and a replacement's reconnect)",
                            RM_PS_JOB_MAX_WORKERS, most, RM_PS_MAX_MEMBERS);
    if ((unsigned)ps->mode > RM_PS_ASYNC)
        return tj_bad_enum(err, P, "mode", rm_ps_mode_names);
    if (ps->backup_workers < 0)
        return tj_bad(err, P, "backupWorkers", "must be >= 0");
    if (ps->backup_workers >= s->replicas || (s->min_replicas > 0 && ps->backup_workers >= s->min_replicas))
        return tj_bad(err, P, "backupWorkers",
                      "must be < spec.replicas (%d) and spec.minReplicas (%d): "
                      "a step needs at least one gradient",
                      s->replicas, s->min_replicas);
    if (ps->backup_workers > 0 && ps->mode == RM_PS_ASYNC)
        return tj_bad(err, P, "backupWorkers",
                      "is for spec.parameterServer.mode: sync only (mode is "
                      "async, where nobody waits for a straggler)");
    if (ps->staleness_bound < 0 || ps->staleness_bound > 1000000)
        return tj_bad(err, P, "stalenessBound", "must be between 0 (unbounded) and 1000000");
    if (ps->push_every_steps < 1 || ps->push_every_steps > 10000)
        return tj_bad(err, P, "pushEverySteps", "must be between 1 and 10000");
    if (ps->fetch_every_steps < 1 || ps->fetch_every_steps > 10000)
        return tj_bad(err, P, "fetchEverySteps", "must be between 1 and 10000");
    if (ps->warm_start_steps < 0 || ps->warm_start_steps > 100000000)
        return tj_bad(err, P, "warmStartSteps", "must be between 0 (no warm start) and 100000000");
    if (ps->warm_start_steps > 0 && ps->mode != RM_PS_ASYNC)
        return tj_bad(err, P, "warmStartSteps",
                      "is for spec.parameterServer.mode: async only (mode "
                      "is sync, where every step already waits for the workers)");
    if (ps->mode == RM_PS_SYNC && (ps->push_every_steps != 1 || ps->fetch_every_steps != 1))
        return tj_bad(err, P, ps->push_every_steps != 1 ? "pushEverySteps" : "fetchEverySteps",
                      "must be 1 with spec.parameterServer.mode: sync (Downpour's n_push/n_fetch are "
                      "for mode: async)");
    if (s->backend == RM_BACKEND_NCCL || s->backend == RM_BACKEND_MPI)
        return rm_err_field(err, RM_EINVAL, "spec.backend",
                            "%s cannot be used with spec.strategy: "
                            "parameterServer (servers and workers talk TCP; use auto or ring)",
                            rm_backend_name(s->backend));
    if (s->training.mode != RM_MODE_TRAIN)
        return rm_err_field(err, RM_EINVAL, "spec.training.mode",
                            "must be train with spec.strategy: "
                            "parameterServer");
    if (s->training.precision != RM_PREC_FP32)
        return rm_err_field(err, RM_EINVAL, "spec.training.precision",
                            "must be fp32 with "
                            "spec.strategy: parameterServer (servers apply fp32 updates on the CPU)");
    if (s->training.sharding != RM_SHARD_NONE)
        return rm_err_field(err, RM_EINVAL, "spec.training.sharding",
                            "must be none with spec.strategy: "
                            "parameterServer (the servers already hold the parameters in shards; "
                            "sharding is a mode of spec.strategy: allreduce)");
    return RM_OK;
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
        return tj_bad(err, P, "pipelineStages", "must be between 1 and %d (got %d)", RM_TJ_MAX_REPLICAS, p);
    if (mb < 1)
        return tj_bad(err, P, "microBatches", "must be >= 1 (got %d)", mb);
    int rc = tj_validate_tensor_parallel(s, err);
    if (rc)
        return rc;
    if ((unsigned)par->schedule > RM_PIPE_GPIPE)
        return tj_bad_enum(err, P, "schedule", rm_pipe_schedule_names);
    const rm_training_spec *t = &s->training;
    if (t->mode == RM_MODE_TRAIN && mb > t->batch_size_per_worker)
        return tj_bad(err, P, "microBatches",
                      "must be <= spec.training.batchSizePerWorker (%d): every "
                      "micro-batch needs at least one sample (got %d)",
                      t->batch_size_per_worker, mb);
    if (p == 1)
        return RM_OK;
    if (s->replicas % p)
        return rm_err_field(err, RM_EINVAL, "spec.replicas",
                            "must be a multiple of "
                            "spec.parallelism.pipelineStages (%d): the workers form a grid of %d "
                            "stages x replicas/%d data-parallel replicas (got %d)",
                            p, p, p, s->replicas);
    if (s->min_replicas % p)
        return rm_err_field(err, RM_EINVAL, "spec.minReplicas",
                            "must be a multiple of "
                            "spec.parallelism.pipelineStages (%d) (got %d)",
                            p, s->min_replicas);
    if (s->max_replicas % p)
        return rm_err_field(err, RM_EINVAL, "spec.maxReplicas",
                            "must be a multiple of "
                            "spec.parallelism.pipelineStages (%d) (got %d)",
                            p, s->max_replicas);
    /* the transformer: layers + 2 units (the embedding, the blocks, the head), each stage >= 1 */
    if (t->model_type && strcmp(t->model_type, rm_model_type_names[RM_MODEL_GPT]) == 0) {
        if (p > t->layers + 2)
            return tj_bad(err, P, "pipelineStages",
                          "must be <= the transformer's %d units (spec.training.model.layers %d, the "
                          "embedding and the head; each stage holds at least one) (got %d)",
                          t->layers + 2, t->layers, p);
    } else if (p > t->nhidden + 1)
        return tj_bad(err, P, "pipelineStages",
                      "must be <= the model's %d linear layers "
                      "(spec.training.model.hidden has %d widths; each stage holds at least one layer) "
                      "(got %d)",
                      t->nhidden + 1, t->nhidden, p);
    if (s->strategy != RM_STRATEGY_ALLREDUCE)
        return rm_err_field(err, RM_EINVAL, "spec.parallelism.pipelineStages",
                            "must be 1 with "
                            "spec.strategy: parameterServer in this version (got %d)",
                            p);
    /* with tensorParallel the stage's pieces shard their optimizer over the data-parallel group
     * (worker/tensor/step_tensor.c, ZeRO-1) */
    if (t->sharding != RM_SHARD_NONE && !(par->tensor_parallel > 1 && t->sharding == RM_SHARD_OPTIMIZER))
        return rm_err_field(err, RM_EINVAL, "spec.training.sharding",
                            "must be none with "
                            "spec.parallelism.pipelineStages > 1 in this version (a stage already "
                            "holds only its own layers), or optimizer with tensorParallel > 1");
    if (t->mode != RM_MODE_TRAIN)
        return rm_err_field(err, RM_EINVAL, "spec.training.mode",
                            "must be train with "
                            "spec.parallelism.pipelineStages > 1");
    if (t->precision != RM_PREC_FP32)
        return rm_err_field(err, RM_EINVAL, "spec.training.precision",
                            "must be fp32 with "
                            "spec.parallelism.pipelineStages > 1 in this version");
    /* nccl: GPU stages (the world's collectives on the GPU, the stage links NCCL send/recv) */
    if (s->backend == RM_BACKEND_MPI)
        return rm_err_field(err, RM_EINVAL, "spec.backend",
                            "%s cannot be used with "
                            "spec.parallelism.pipelineStages > 1 in this version (stages talk TCP, "
                            "or NCCL on GPUs; use auto, ring or nccl)",
                            rm_backend_name(s->backend));
    return RM_OK;
}

/* spec.training.optimizer.type lbfgs (Sandblaster, docs/strategies.md#sandblaster-l-bfgs) against the rest of the spec: the
 * coordinator and the (s, y) history live on the parameter servers, and a pass is a synchronous
 * full-batch evaluation, so it needs spec.strategy parameterServer in mode sync; stragglers are
 * answered by reissuing portions, so backup workers have no meaning there. */
static int lbfgs_validate(const rm_tj_spec *s, rm_err *err)
{
    const char *O = "spec.training.optimizer.type";
    if (s->training.optimizer.type != RM_OPT_LBFGS)
        return RM_OK;
    if (s->strategy != RM_STRATEGY_PS)
        return rm_err_field(err, RM_EINVAL, O,
                            "lbfgs needs spec.strategy: parameterServer (the "
                            "parameters and the L-BFGS history live on the server shards; "
                            "spec.strategy is allreduce)");
    if (s->ps.mode != RM_PS_SYNC)
        return rm_err_field(err, RM_EINVAL, "spec.parameterServer.mode",
                            "must be sync with %s: "
                            "lbfgs (every pass evaluates the full batch at one set of parameters)",
                            O);
    if (s->ps.backup_workers != 0)
        return rm_err_field(err, RM_EINVAL, "spec.parameterServer.backupWorkers",
                            "must be 0 with "
                            "%s: lbfgs (a straggler's portions are reissued to other workers instead)",
                            O);
    return RM_OK;
}

/* The optimizer features of docs/models-and-data.md against the strategy (docs/strategies.md,
 * "Optimizers for transformers"): LAMB and LARS need every tensor's norms summed over the pieces
 * that update it, which parameter servers (whose shards may split a tensor, and which never talk to
 * each other) cannot do; gradient accumulation runs where a step's gradient is one local buffer. */
static int optim_strategy_validate(const rm_tj_spec *s, rm_err *err)
{
    const rm_training_spec *t = &s->training;
    const char *O = "spec.training.optimizer.type";
    const char *A = "spec.training.gradientAccumulationSteps";
    bool pipe = s->par.pipeline_stages > 1;
    if ((t->optimizer.type == RM_OPT_LAMB || t->optimizer.type == RM_OPT_LARS) &&
        s->strategy == RM_STRATEGY_PS)
        return rm_err_field(err, RM_EINVAL, O,
                            "%s with spec.strategy parameterServer is not supported (the trust "
                            "ratio needs each tensor's whole norm, and a server shard may hold part "
                            "of a tensor; use spec.strategy allreduce)",
                            rm_enum_name(rm_opt_names, (int)t->optimizer.type));
    if (t->optimizer.type == RM_OPT_LBFGS && (t->grad_clip != 0 || t->grad_accum > 1))
        return rm_err_field(err, RM_EINVAL, t->grad_clip != 0 ? "spec.training.gradClip" : A,
                            "is not used with %s: lbfgs (every pass evaluates the full batch)", O);
    if (t->grad_accum > 1) {
        if (s->strategy == RM_STRATEGY_PS)
            return rm_err_field(err, RM_EINVAL, A,
                                "gradientAccumulationSteps with strategy parameterServer is not "
                                "supported (use pushEverySteps)");
        if (pipe)
            return rm_err_field(err, RM_EINVAL, A,
                                "gradientAccumulationSteps with strategy pipeline is not supported "
                                "(raise spec.parallelism.microBatches instead: micro-batches already "
                                "accumulate)");
        if (t->sharding == RM_SHARD_GRADIENTS || t->sharding == RM_SHARD_FULL)
            return rm_err_field(err, RM_EINVAL, A,
                                "gradientAccumulationSteps with strategy allreduce and sharding %s is "
                                "not supported (use sharding none or optimizer)",
                                rm_enum_name(rm_sharding_names, (int)t->sharding));
    }
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
                            "names the job's headless Service (got \"%s\")",
                            tj->name);
    if (tj->namespace_ && !tj_dns1123(tj->namespace_, 0, 63))
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
                            "at most %d",
                            rm_tj_name_max(s->max_replicas), s->max_replicas, tj->name, RM_TJ_WORKER_INFIX,
                            s->max_replicas - 1,
                            (int)strlen(tj->name) + (int)strlen(RM_TJ_WORKER_INFIX) +
                                decimal_digits(s->max_replicas - 1),
                            RM_TJ_LABEL_MAX);
    if ((unsigned)s->backend > RM_BACKEND_MPI)
        return tj_bad_enum(err, "spec", "backend", rm_backend_names);
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
        return tj_bad_enum(err, "spec.runPolicy", "cleanPodPolicy", rm_clean_policy_names);
    if (s->run.managed_by && (!*s->run.managed_by || strlen(s->run.managed_by) > 63))
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.managedBy", "must be 1 to 63 characters");
    if (s->checkpoint.path && !*s->checkpoint.path)
        return rm_err_field(err, RM_EINVAL, "spec.checkpoint.path", "must not be empty");
    if (tj_has_ctrl(s->checkpoint.path))
        return rm_err_field(err, RM_EINVAL, "spec.checkpoint.path", "must not contain control characters");
    if (tj_has_ctrl(s->run.managed_by))
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.managedBy",
                            "must not contain control characters");
    if (s->checkpoint.interval_steps < 1)
        return rm_err_field(err, RM_EINVAL, "spec.checkpoint.intervalSteps", "must be >= 1");
    /* a plain return: a rejected spec is the user's input, not a failing hop to log */
    int rc = validate_scheduling(s, err);
    if (rc)
        return rc;
    if (s->checkpoint.keep < 1)
        return rm_err_field(err, RM_EINVAL, "spec.checkpoint.keep", "must be >= 1");
    if (s->template && !cJSON_IsObject(s->template))
        return rm_err_field(err, RM_EINVAL, "spec.template", "must be an object");
    if ((rc = rm_training_validate(&s->training, "spec.training", err)))
        return rc;
    if ((rc = ps_validate(s, err)))
        return rc;
    if ((rc = rm_par_validate(s, err)))
        return rc;
    if ((rc = optim_strategy_validate(s, err)))
        return rc;
    if ((rc = lbfgs_validate(s, err)))
        return rc;
    if (s->placement.present &&
        (s->placement.workers_per_node < 1 || s->placement.workers_per_node > RM_MAX_WORLD))
        return rm_err_field(err, RM_EINVAL, "spec.placement.workersPerNode",
                            "must be between 1 and %d "
                            "(required with spec.placement)",
                            RM_MAX_WORLD);
    if (s->training.allreduce == RM_AR_HIER &&
        (s->backend == RM_BACKEND_NCCL || s->backend == RM_BACKEND_MPI))
        return rm_err_field(err, RM_EINVAL, "spec.training.allreduce",
                            "hierarchical needs spec.backend "
                            "auto or ring (got %s, which picks its own algorithm: NCCL_ALGO / Open MPI's "
                            "coll_tuned settings)",
                            rm_backend_name(s->backend));
    if (s->training.allreduce == RM_AR_HIER && s->backend == RM_BACKEND_AUTO &&
        rm_template_gpus(s->template) > 0)
        return rm_err_field(
            err, RM_EINVAL, "spec.training.allreduce",
            "hierarchical is the CPU ring's; with "
            "nvidia.com/gpu requested spec.backend auto resolves to nccl, which picks its own "
            "algorithm (set spec.backend: ring to use it)");
    if (s->training.allreduce == RM_AR_HIER && s->strategy == RM_STRATEGY_PS)
        return rm_err_field(err, RM_EINVAL, "spec.training.allreduce",
                            "hierarchical needs spec.strategy: "
                            "allreduce (parameter-server workers never allreduce)");
    /* An epoch is train_samples / global batch steps (the tail is dropped), so a global batch
     * larger than the training set makes epochs of zero steps: the group would re-form forever
     * without training. Checked at the largest world the job may reach (maxReplicas). */
    const rm_training_spec *t = &s->training;
    int64_t n = rm_training_samples(t);
    int world = rm_tj_most_workers(s);
    if (t->mode == RM_MODE_TRAIN && n > 0 && (int64_t)world * t->batch_size_per_worker > n)
        return rm_err_field(err, RM_EINVAL, "spec.training.batchSizePerWorker",
                            "the global batch %s (%d) x spec.training.batchSizePerWorker (%d) = %lld "
                            "samples is larger than the %lld training samples of %s: an epoch would "
                            "have no step (at most %lld per worker)",
                            world == s->replicas ? "spec.replicas" : "spec.maxReplicas", world,
                            t->batch_size_per_worker, (long long)world * t->batch_size_per_worker,
                            (long long)n, t->dataset ? t->dataset : "fashion-mnist", (long long)(n / world));
    /* L-BFGS cuts each full-batch pass into `portions` of whole batches (worker/ps/lbfgs_coord.h,
     * rm_lbfgs_portion_size): with fewer than one batch per portion every worker fails at start
     * and each restart fails the same way, so refuse it here where the set's size is known. */
    int64_t per = t->optimizer.portions > 0 && t->batch_size_per_worker > 0
                      ? (int64_t)t->optimizer.portions * t->batch_size_per_worker
                      : 0;
    if (t->mode == RM_MODE_TRAIN && t->optimizer.type == RM_OPT_LBFGS && n > 0 && per > n)
        return rm_err_field(err, RM_EINVAL, "spec.training.optimizer.portions",
                            "%d portions of at least one batch (spec.training.batchSizePerWorker %d) "
                            "need %lld samples, more than the %lld training samples of %s (at most "
                            "%lld portions)",
                            t->optimizer.portions, t->batch_size_per_worker, (long long)per, (long long)n,
                            t->dataset ? t->dataset : "fashion-mnist",
                            (long long)(n / t->batch_size_per_worker));
    if ((rc = tj_validate_output(s, err)))
        return rc;
    return tj_check_template_memory(tj, err);
}

/* spec.managedBy and spec.runPolicy.schedulingPolicy. Names follow Kubernetes' own rules: a queue
 * (Volcano Queue, Kueue LocalQueue) and a PriorityClass are DNS-1123 subdomains (<= 253). */
static int validate_scheduling(const rm_tj_spec *s, rm_err *err)
{
    if (s->managed_by && (!*s->managed_by || strlen(s->managed_by) > 63 || tj_has_ctrl(s->managed_by)))
        return rm_err_field(err, RM_EINVAL, "spec.managedBy",
                            "must be 1 to 63 printable characters (\"" RM_TJ_MANAGED_BY_US
                            "\" or \"" RM_TJ_MANAGED_BY_MULTIKUEUE "\")");
    if (s->managed_by && s->run.managed_by && strcmp(s->managed_by, s->run.managed_by) != 0)
        return rm_err_field(
            err, RM_EINVAL, "spec.runPolicy.managedBy",
            "\"%s\" differs from spec.managedBy \"%s\" (spec.managedBy replaces it: set only that)",
            s->run.managed_by, s->managed_by);
    if (s->sched.queue && !tj_dns1123(s->sched.queue, 1, 253))
        return rm_err_field(
            err, RM_EINVAL, "spec.runPolicy.schedulingPolicy.queue",
            "\"%s\" must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253)",
            s->sched.queue);
    if (s->sched.priority_class && !tj_dns1123(s->sched.priority_class, 1, 253))
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.schedulingPolicy.priorityClass",
                            "\"%s\" must be a DNS-1123 subdomain (a PriorityClass name)",
                            s->sched.priority_class);
    if (s->sched.schedule_timeout_seconds < 0)
        return rm_err_field(err, RM_EINVAL, "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
                            "must be >= 0");
    return RM_OK;
}
