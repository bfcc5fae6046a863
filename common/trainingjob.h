/* trainingjob.h — the TrainingJob type (group ringmaster.dev, v1alpha1; see
 * docs/trainingjob-api.md and the CRD in deploy/crd/): parse from JSON (strict: unknown
 * fields are errors naming their path), apply defaults, validate with errors that name the field
 * ("spec.minReplicas: must be <= spec.replicas"), serialize back.
 *
 * Ownership: an rm_tj owns every pointer inside it; rm_tj_free releases them. Strings are
 * malloc'd copies, `template`/`labels`/`annotations` are owned cJSON trees.
 * `ringmaster run`, the operator and the worker all read the same fields through this module. */
#ifndef RM_TRAININGJOB_H
#define RM_TRAININGJOB_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "common/backend.h"
#include "common/evals.h"
#include "common/rm.h"

#define RM_TJ_GROUP "ringmaster.dev"
#define RM_TJ_VERSION "v1alpha1"
#define RM_TJ_API_VERSION "ringmaster.dev/v1alpha1"
#define RM_TJ_KIND "TrainingJob"
#define RM_TJ_PLURAL "trainingjobs"
#define RM_TJ_MAX_HIDDEN 16
#define RM_TJ_MAX_CONDITIONS 8
/* The largest world a job may ask for (replicas, maxReplicas): the rendezvous' RM_RDZV_MAX_WORLD
 * (common/rdzv.h) and the CRD's `maximum`; tests/unit/test_trainingjob.c checks all three agree. */
#define RM_TJ_MAX_REPLICAS 16384
/* Objects a job creates are named "<job>" (headless Service, DNS-1035 label), "<job>-worker-<i>"
 * (pods, whose hostname is the same DNS-1123 label) and, with parameter servers, "<job>-ps-<i>"
 * (shorter, so the worker rule covers it); a label is at most RM_TJ_LABEL_MAX characters. */
#define RM_TJ_WORKER_INFIX "-worker-"
/* The largest model a worker may hold: 2^30 parameters (4 GiB per fp32 copy; a worker keeps about
 * five copies: weights, gradients, optimizer state, checkpoint staging). */
#define RM_TJ_MAX_PARAMS (1LL << 30)
/* The built-in dataset: Debian's dataset-fashion-mnist, 60,000 training images. */
#define RM_TJ_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define RM_TJ_FASHION_MNIST_TRAIN 60000
#define RM_TJ_LABEL_MAX 63

/* Every enum of the TrainingJob has one NULL-terminated table of its spellings, indexed by the
 * enum: the parser, the serializer, the operator and the worker all read names through these
 * tables and backend.h's rm_enum_index / rm_enum_name, never through their own strcmp chains. */
typedef enum { RM_CLEAN_RUNNING = 0, RM_CLEAN_ALL, RM_CLEAN_NONE } rm_clean_policy;
extern const char *const rm_clean_policy_names[]; /* "Running", "All", "None", NULL */
typedef enum { RM_MODE_TRAIN = 0, RM_MODE_BENCH } rm_mode;
extern const char *const rm_mode_names[]; /* "train", "bench", NULL */
typedef enum { RM_SCHED_COSINE = 0, RM_SCHED_STEP, RM_SCHED_CONSTANT } rm_schedule;
extern const char *const rm_schedule_names[]; /* "cosine", "step", "constant", NULL */
/* Values are stable (checkpoints and parameter-server state store them): new types go at the end.
 * adamw: Adam with decoupled weight decay (Loshchilov & Hutter) on tensors of 2+ dimensions only;
 * lamb, lars: layer-wise trust ratios (docs/strategies.md#optimizers-for-large-batches). */
typedef enum {
    RM_OPT_SGD = 0,
    RM_OPT_ADAM,
    RM_OPT_ADAGRAD,
    RM_OPT_LBFGS,
    RM_OPT_LAMB,
    RM_OPT_LARS,
    RM_OPT_ADAMW,
    RM_OPT__LAST = RM_OPT_ADAMW
} rm_opt_type;
extern const char
    *const rm_opt_names[]; /* "sgd", "adam", "adagrad", "lbfgs", "lamb", "lars", "adamw", NULL */
/* The fields of docs/models-and-data.md's manifest. Each is parsed, range-checked and serialized
 * now; rm_training_validate / rm_tj_validate then refuse a value whose feature has not landed with
 * "<field>: ... is not supported yet" (rm_tj_unsupported), so an issue that implements one only
 * drops its check. Accepted now because they spell what exists: data.uri builtin:fashion-mnist or
 * a folder (/path, file:///path), data.format idx, model.type mlp, parallelism.tensorParallel 1. */
typedef enum { RM_MODEL_MLP = 0, RM_MODEL_GPT } rm_model_type;
extern const char *const rm_model_type_names[]; /* "mlp", "gpt", NULL */
typedef enum { RM_DATA_IDX = 0, RM_DATA_TOKENS, RM_DATA_TEXT } rm_data_format;
extern const char *const rm_data_format_names[]; /* "idx", "tokens", "text", NULL */
typedef enum { RM_OUT_SAFETENSORS = 0 } rm_output_format;
extern const char *const rm_output_format_names[]; /* "safetensors", NULL */
typedef enum { RM_DTYPE_FLOAT32 = 0, RM_DTYPE_BFLOAT16 } rm_output_dtype;
extern const char *const rm_output_dtype_names[]; /* "float32", "bfloat16", NULL */
#define RM_TJ_URI_MAX 1024
/* data.uri of the built-in data set (the deprecated `dataset: fashion-mnist`). */
#define RM_TJ_BUILTIN_FASHION_MNIST "builtin:fashion-mnist"
/* spec.training.optimizer.lineSearch (lbfgs only; docs/strategies.md#sandblaster-l-bfgs). */
typedef enum { RM_LS_ARMIJO = 0, RM_LS_FIXED } rm_line_search;
extern const char *const rm_line_search_names[]; /* "armijo", "fixed", NULL */
/* spec.training.sharding (docs/strategies.md; ZeRO stages 1-3 / FSDP): what each worker holds of the
 * optimizer state, the gradients and the parameters. */
typedef enum { RM_SHARD_NONE = 0, RM_SHARD_OPTIMIZER, RM_SHARD_GRADIENTS, RM_SHARD_FULL } rm_sharding;
extern const char *const rm_sharding_names[]; /* "none", "optimizer", "gradients", "full", NULL */
/* spec.training.allreduce (docs/strategies.md#topology): how the CPU ring allreduce runs. auto =
 * hierarchical when the round spans > 1 node with > 1 rank on each (and the same number on every
 * node), else flat; ring = always flat; hierarchical = intra-node then inter-node (flat when the
 * topology does not allow it). Only for spec.backend ring/auto without GPUs. */
typedef enum { RM_AR_AUTO = 0, RM_AR_RING, RM_AR_HIER } rm_allreduce_algo;
extern const char *const rm_allreduce_names[]; /* "auto", "ring", "hierarchical", NULL */
typedef enum {
    RM_PHASE_PENDING = 0,
    RM_PHASE_RUNNING,
    RM_PHASE_RESTARTING,
    RM_PHASE_SUCCEEDED,
    RM_PHASE_FAILED,
    RM_PHASE_SUSPENDED
} rm_phase;
extern const char *const rm_phase_names[]; /* "Pending", ... "Suspended", NULL */
/* Condition types, in this order in status.conditions. */
typedef enum {
    RM_COND_CREATED = 0,
    RM_COND_RUNNING,
    RM_COND_RESTARTING,
    RM_COND_SUCCEEDED,
    RM_COND_FAILED,
    RM_COND_SUSPENDED,
    RM_COND_CHECKPOINT_FAILING, /* a worker's checkpoint writes keep failing */
    RM_COND_INVALID_SPEC,       /* an update made the spec invalid; running at the last valid one */
    RM_COND_EXPORT_FAILING,     /* the trained model could not be written to spec.output (checkpoints stay) */
    RM_COND_BLOCKED,            /* a worker pod cannot start: unschedulable, image pull, missing config */
    RM_COND__COUNT
} rm_cond_type;
extern const char *const rm_cond_names[]; /* "Created", ... "InvalidSpec", "ExportFailing", "Blocked", NULL */

typedef struct rm_optimizer_spec {
    rm_opt_type type; /* default sgd */
    double
        lr; /* per 64-sample batch; scaled linearly by global batch / 64. default 0.02 (sgd), 0.001 (adam), 0.01 (adagrad) */
    double momentum;          /* sgd; default 0.9 */
    double weight_decay;      /* default 0 */
    double beta1, beta2, eps; /* adam: 0.9, 0.999, 1e-8; adagrad eps 1e-10 */
    /* lbfgs (Sandblaster, docs/strategies.md#sandblaster-l-bfgs; only with spec.strategy parameterServer, mode sync): lr is the
     * first trial step of each line search (armijo) or the step itself (fixed), not scaled by the
     * batch; default 1. */
    int history;                /* m, (s, y) pairs kept; default 10, 1..100 */
    int portions;               /* P, portions each full-batch pass is cut into; default 64 */
    rm_line_search line_search; /* default armijo */
    bool line_search_given;     /* lineSearch was in the input (an error with another type) */
} rm_optimizer_spec;

typedef struct rm_training_spec {
    rm_mode mode;     /* train | bench */
    char *dataset;    /* "fashion-mnist" (only value) */
    char *data_dir;   /* dataDir; default /usr/share/datasets/fashion-mnist */
    char *model_type; /* "mlp" | "gpt" (rm_model_type_names); default "mlp" */
    /* model.{layers,heads,embed,context,vocab,dropout} (gpt) and model.init.uri: 0 / NULL =
     * unset; the RM_TR_SET2_* bit says an explicit value was given (so 0 is refused, not unset). */
    int layers, heads, embed, context, vocab;
    double dropout;
    char *init_uri;
    /* training.data (docs/models-and-data.md): uri (NULL = the deprecated dataset / dataDir
     * spelling), format (RM_TR_SET2_FORMAT: given; else from the data), sha256, secretRef.name,
     * validation.{fraction, uri}, caBundle (a PEM file of the CAs an https:// or s3:// fetch
     * trusts, instead of the system's). Strings owned, NULL = unset. */
    struct {
        char *uri;
        rm_data_format format;
        char *sha256;
        char *secret;
        double val_fraction;
        char *val_uri;
        char *ca_bundle;
    } data;
    double grad_clip;             /* gradClip; 0 = off */
    int grad_accum;               /* gradientAccumulationSteps; default 1 */
    int warmup_steps;             /* warmupSteps; 0 = none (warmupEpochs applies) */
    int eval_every_steps;         /* evalEverySteps; 0 = at the end only */
    int hidden[RM_TJ_MAX_HIDDEN]; /* model.hidden; default [512, 256] */
    int nhidden;
    int epochs;                /* default 10 */
    int batch_size_per_worker; /* default 64 */
    rm_optimizer_spec optimizer;
    double warmup_epochs;        /* default 1 */
    rm_schedule schedule;        /* default cosine */
    double step_gamma;           /* step schedule: factor, default 0.1 */
    int step_every_epochs;       /* step schedule: default 3 */
    rm_precision precision;      /* default fp32 */
    double fusion_buffer_mb;     /* default 25 */
    rm_sharding sharding;        /* default none; needs precision fp32 */
    rm_allreduce_algo allreduce; /* default auto */
    uint64_t seed;               /* default 42 */
    int max_steps;               /* 0 = no limit (testing knob) */
    /* bench mode (nccl-tests flags): minBytes, maxBytes, stepFactor, iters, warmupIters, check */
    int64_t bench_min_bytes, bench_max_bytes;
    int bench_factor, bench_iters, bench_warmup;
    bool bench_check;
    /* Which defaulted fields were given: *_from_json sets a field's bit when the input had it, so
     * an explicit 0 is kept (momentum: 0, seed: 0) or rejected by validation (epochs: 0) instead of
     * being replaced by the default. rm_training_defaults fills a field only when its bit is clear
     * AND its value is zero, then sets every bit. In C, set fields after calling the defaults
     * function (or set the bit). Strings: NULL means unset. */
    uint32_t set;  /* RM_TR_SET_* */
    uint32_t set2; /* RM_TR_SET2_*: given explicitly (the fields of models-and-data.md) */
} rm_training_spec;
enum {
    RM_TR_SET2_LAYERS = 1u << 0,
    RM_TR_SET2_HEADS = 1u << 1,
    RM_TR_SET2_EMBED = 1u << 2,
    RM_TR_SET2_CONTEXT = 1u << 3,
    RM_TR_SET2_VOCAB = 1u << 4,
    RM_TR_SET2_DROPOUT = 1u << 5,
    RM_TR_SET2_FORMAT = 1u << 6,
    RM_TR_SET2_FRACTION = 1u << 7,
    RM_TR_SET2_GRAD_CLIP = 1u << 8,
    RM_TR_SET2_GRAD_ACCUM = 1u << 9,
    RM_TR_SET2_WARMUP_STEPS = 1u << 10,
    RM_TR_SET2_EVAL_EVERY = 1u << 11,
};
enum {
    RM_TR_SET_MOMENTUM = 1u << 0,
    RM_TR_SET_WARMUP = 1u << 1,
    RM_TR_SET_SEED = 1u << 2,
    RM_TR_SET_FUSION = 1u << 3,
    RM_TR_SET_BETA1 = 1u << 4,
    RM_TR_SET_BENCH_WARMUP = 1u << 5,
    RM_TR_SET_BENCH_CHECK = 1u << 6,
    RM_TR_SET_HIDDEN = 1u << 7,
    RM_TR_SET_BETA2 = 1u << 8,
    RM_TR_SET_EPOCHS = 1u << 9,
    RM_TR_SET_BATCH = 1u << 10,
    RM_TR_SET_LR = 1u << 11,
    RM_TR_SET_EPS = 1u << 12,
    RM_TR_SET_STEP_GAMMA = 1u << 13,
    RM_TR_SET_STEP_EVERY = 1u << 14,
    RM_TR_SET_BENCH_MIN = 1u << 15,
    RM_TR_SET_BENCH_MAX = 1u << 16,
    RM_TR_SET_BENCH_FACTOR = 1u << 17,
    RM_TR_SET_BENCH_ITERS = 1u << 18,
    RM_TR_SET_HISTORY = 1u << 19,
    RM_TR_SET_PORTIONS = 1u << 20,
};
#define RM_LBFGS_MAX_HISTORY 100
#define RM_LBFGS_MAX_PORTIONS 100000

/* spec.strategy and spec.parameterServer (docs/strategies.md#parameter-servers). */
typedef enum { RM_STRATEGY_ALLREDUCE = 0, RM_STRATEGY_PS } rm_strategy;
typedef enum { RM_PS_SYNC = 0, RM_PS_ASYNC } rm_ps_mode;
#define RM_PS_MAX_SERVERS 64
/* A server takes at most RM_PS_MAX_MEMBERS connections that proved the token (worker/ps/ps_server.h,
 * a thread each); every worker holds one to every server and one place is kept for the L-BFGS
 * coordinator (and for a replacement reconnecting while its predecessor's connection drains), so a
 * parameterServer job has at most RM_PS_JOB_MAX_WORKERS workers (docs/strategies.md#parameter-servers). */
#define RM_PS_MAX_MEMBERS 64
#define RM_PS_JOB_MAX_WORKERS (RM_PS_MAX_MEMBERS - 1)
typedef struct rm_ps_spec {
    bool present;          /* spec.parameterServer was given */
    int replicas;          /* server shards S; default 1 */
    rm_ps_mode mode;       /* default sync */
    int backup_workers;    /* sync: apply step k after N-b gradients; default 0 */
    int staleness_bound;   /* async: max steps ahead of the slowest live worker; 0 = unbounded;
                                   default 4 */
    int push_every_steps;  /* async (Downpour n_push); default 1 */
    int fetch_every_steps; /* async (Downpour n_fetch); default 1 */
    int warm_start_steps;  /* async: the first W updates come from worker 0 alone (Dean et
                                   al.'s warm start); default 0 = none */
    uint32_t set;          /* RM_PS_SET_*: given explicitly */
} rm_ps_spec;
enum {
    RM_PS_SET_REPLICAS = 1u << 0,
    RM_PS_SET_BACKUP = 1u << 1,
    RM_PS_SET_STALENESS = 1u << 2,
    RM_PS_SET_PUSH = 1u << 3,
    RM_PS_SET_FETCH = 1u << 4,
    RM_PS_SET_MODE = 1u << 5,
    RM_PS_SET_WARM = 1u << 6,
};
extern const char *const rm_strategy_names[]; /* "allreduce", "parameterServer", NULL */
extern const char *const rm_ps_mode_names[];  /* "sync", "async", NULL */
/* spec.parameterServer as JSON (the worker's RINGMASTER_PARAMETER_SERVER) and back. */
cJSON *rm_ps_to_json(const rm_ps_spec *ps);
int rm_ps_from_json(const cJSON *o, const char *ctx, rm_ps_spec *out, rm_err *err);
void rm_ps_defaults(rm_ps_spec *ps);

/* spec.parallelism (docs/strategies.md#pipeline-stages): pipeline model parallelism. The job's replicas form
 * a grid of P pipeline stages x D = replicas / P data-parallel replicas; rank r = d*P + p is stage
 * p of replica d. Each worker's batch (batchSizePerWorker rows) is split into M micro-batches that
 * flow through the stages under the schedule; the global batch is D x batchSizePerWorker. */
typedef enum { RM_PIPE_1F1B = 0, RM_PIPE_GPIPE } rm_pipe_schedule;
extern const char *const rm_pipe_schedule_names[]; /* "1f1b", "gpipe", NULL */
typedef struct rm_par_spec {
    bool present;              /* spec.parallelism was given */
    int tensor_parallel;       /* T >= 1; default 1; > 1 not supported yet */
    int pipeline_stages;       /* P >= 1; default 1 */
    int micro_batches;         /* M >= 1; default 1 */
    rm_pipe_schedule schedule; /* default 1f1b */
    uint32_t set;              /* RM_PAR_SET_*: given explicitly */
} rm_par_spec;
enum {
    RM_PAR_SET_STAGES = 1u << 0,
    RM_PAR_SET_MICRO = 1u << 1,
    RM_PAR_SET_SCHEDULE = 1u << 2,
    RM_PAR_SET_TENSOR = 1u << 3,
};
/* spec.parallelism as JSON (the worker's RINGMASTER_PARALLELISM) and back; defaults fill unset
 * fields (1, 1, 1f1b). */
cJSON *rm_par_to_json(const rm_par_spec *par);
int rm_par_from_json(const cJSON *o, const char *ctx, rm_par_spec *out, rm_err *err);
void rm_par_defaults(rm_par_spec *par);
/* spec.parallelism against the rest of the spec (what rm_tj_validate applies): P >= 1 dividing
 * spec.replicas (and minReplicas/maxReplicas), P <= the model's linear layers, 1 <= M <=
 * batchSizePerWorker, and with P > 1: strategy allreduce, sharding none, precision fp32, mode
 * train, backend auto or ring. Errors name the field. */
struct rm_tj_spec;
int rm_par_validate(const struct rm_tj_spec *s, rm_err *err);

typedef struct rm_tj_spec {
    int replicas;     /* >= 1; default 1 */
    int min_replicas; /* default replicas */
    int max_replicas; /* default replicas */
    rm_backend backend;
    struct {
        int max_restarts;                 /* default 5 */
        double backoff_seconds;           /* default 1; doubles each restart, capped at 300 s */
        double progress_deadline_seconds; /* default 60; 0 disables */
    } restart;
    struct {
        int64_t active_deadline_seconds;    /* 0 = none */
        int64_t ttl_seconds_after_finished; /* -1 = keep forever (default) */
        rm_clean_policy clean_pod_policy;   /* default Running */
        bool suspend;
        char *managed_by; /* NULL = ringmaster.dev/operator; deprecated place:
                                            * spec.managedBy (below) is the one Kueue reads */
    } run;
    struct {
        char *path;         /* default "/checkpoints" (run: ./checkpoints/<name>) */
        int interval_steps; /* default 200 */
        int keep;           /* default 3 */
    } checkpoint;
    rm_training_spec training;
    cJSON *template;      /* PodTemplateSpec, opaque; NULL = default worker container */
    rm_strategy strategy; /* spec.strategy; default allreduce */
    rm_ps_spec ps;        /* spec.parameterServer (strategy parameterServer) */
    rm_par_spec par;      /* spec.parallelism (pipeline stages) */
    uint32_t set;         /* RM_TJ_SET_*: given explicitly (see rm_training_spec.set) */
    /* spec.runPolicy.schedulingPolicy (Kubeflow's names; docs/gang-kueue.md §3): what a
     * gang scheduler's PodGroup gets. Strings NULL = unset; min_resources an owned object of
     * resource name -> quantity (NULL = computed from the template, operator/gang.h). */
    struct {
        char *queue;          /* Volcano queue; default "default" */
        char *priority_class; /* PriorityClass name, also given to every worker pod */
        cJSON *min_resources;
        int schedule_timeout_seconds; /* coscheduling Permit wait; 0 = unset */
    } sched;
    /* spec.managedBy: the controller that reconciles this job; NULL or RM_TJ_MANAGED_BY_US =
     * this operator; RM_TJ_MANAGED_BY_MULTIKUEUE = Kueue's MultiKueue adapter (it reads this
     * field, at the top level of spec): the operator then leaves the job alone. */
    char *managed_by;
    /* spec.placement (docs/strategies.md#topology): how the operator places worker pods on nodes.
     * workers_per_node k >= 1: workers go to nodes in groups of k (group = replica index / k),
     * rendered as pod affinity / anti-affinity on kubernetes.io/hostname (operator/kube/runtime.c);
     * 0 = not given (the scheduler decides). Ignored by `ringmaster run` (one host). */
    struct {
        bool present;
        int workers_per_node;
    } placement;
    /* spec.output (docs/models-and-data.md): where the trained model is exported. Not supported
     * yet. uri owned, NULL = <checkpoint path>/export. */
    struct {
        bool present;
        char *uri;
        rm_output_format format;
        rm_output_dtype dtype;
    } output;
    /* spec.runtimeRef {kind, name} (common/tj_runtime.h), checked and kept as given (owned, NULL =
     * none). The loaders merge the runtime's template in before parsing; this only records it. */
    cJSON *runtime_ref;
} rm_tj_spec;

/* The most workers a spec asks for: the larger of replicas and maxReplicas. */
static inline int rm_tj_most_workers(const rm_tj_spec *s)
{
    return s->max_replicas > s->replicas ? s->max_replicas : s->replicas;
}
#define RM_TJ_MANAGED_BY_US "ringmaster.dev/operator"
#define RM_TJ_MANAGED_BY_MULTIKUEUE "kueue.x-k8s.io/multikueue"
enum {
    RM_TJ_SET_MAX_RESTARTS = 1u << 0,
    RM_TJ_SET_BACKOFF = 1u << 1,
    RM_TJ_SET_PROGRESS_DEADLINE = 1u << 2,
    RM_TJ_SET_TTL = 1u << 3,
    RM_TJ_SET_REPLICAS = 1u << 4,
    RM_TJ_SET_MIN_REPLICAS = 1u << 5,
    RM_TJ_SET_MAX_REPLICAS = 1u << 6,
    RM_TJ_SET_CKPT_INTERVAL = 1u << 7,
    RM_TJ_SET_CKPT_KEEP = 1u << 8,
};

typedef struct rm_condition {
    rm_cond_type type;
    bool status; /* "True"/"False" */
    char reason[64];
    char message[256];
    double last_transition; /* unix seconds */
    int64_t observed_generation;
    bool present; /* false = not in the list yet */
} rm_condition;

/* One evaluation (status.progress.evaluations[]; common/evals.h): what a sweep's early stopping
 * reads. At most RM_TJ_MAX_EVALS are kept, the newest (ascending step). */
#define RM_TJ_MAX_EVALS 64
typedef rm_eval rm_tj_eval;

typedef struct rm_tj_progress {
    int64_t step;
    int train_epoch; /* progress.epoch (data epoch) */
    double loss;
    double samples_per_second;
    int64_t last_checkpoint_step;
    double allreduce_gbps;    /* busbw reported by rank 0 */
    double tokens_per_second; /* rank 0's, language models only; 0 = left out */
    /* percent of the step budget done (0.1 resolution) and seconds to its end at rank 0's rate
     * (rm_tj_progress_estimate); 0 = left out */
    double percent, eta_seconds;
    rm_tj_eval evals[RM_TJ_MAX_EVALS]; /* evaluations, ascending step */
    int nevals;
} rm_tj_progress;
/* progress.percent and progress.etaSeconds from step and samplesPerSecond against the step budget
 * (rm_tj_steps_total): percent = step / budget, eta = steps left x samples per step of rank 0
 * (batchSizePerWorker x gradientAccumulationSteps) / samplesPerSecond, whole seconds. Both only
 * change when step or the rate does, so a job with no new progress costs no status write. Left 0
 * when the budget is unknown, and for parameter-server jobs (each worker keeps its own count). */
void rm_tj_progress_estimate(const rm_tj_spec *s, rm_tj_progress *p);
/* Record an evaluation: rm_eval_add with RM_TJ_MAX_EVALS (ascending step; the same step replaces;
 * when full the oldest makes room). step 0 / val_loss 0 = not known. Returns 1 if anything
 * changed. */
int rm_tj_progress_add_eval(rm_tj_progress *p, int epoch, int64_t step, double test_accuracy,
                            double train_loss, double val_loss);

typedef struct rm_tj_result {
    bool present;
    double test_accuracy, train_loss, seconds, samples_per_second;
    int64_t steps;
    /* memoryBytes {params, grads, optimizer, activations} and peakRssBytes of the largest rank;
     * all 0 = not reported (left out of the JSON) */
    double memory_params, memory_grads, memory_optimizer, memory_activations, peak_rss_bytes;
    /* valLoss, tokensPerSecond, mfu and model {uri, sha256, bytes} (docs/models-and-data.md);
     * 0 / "" = not reported (left out of the JSON) */
    double val_loss, tokens_per_second, mfu;
    char model_uri[RM_TJ_URI_MAX];
    char model_sha256[65];
    int64_t model_bytes;
} rm_tj_result;

typedef struct rm_tj_status {
    rm_phase phase;
    int64_t observed_generation;
    rm_condition conditions[RM_COND__COUNT]; /* indexed by rm_cond_type */
    int replicas, ready_replicas;
    int ps_replicas, ps_ready; /* status.parameterServers {replicas, readyReplicas}; 0 = none */
    int epoch;                 /* rendezvous epoch */
    int restarts;              /* group restarts */
    rm_tj_progress progress;
    rm_tj_result result;
    double start_time, completion_time; /* unix seconds; 0 = unset */
    double last_restart_time;           /* for the doubling back-off; 0 = never */
    char message[256];                  /* last reason for Failed etc. */
    /* status.stepHighWater: the highest step a worker reported and the rendezvous epoch it was
     * first reached at; a group that re-forms many epochs past it is in a recovery loop */
    int64_t high_step;
    int high_epoch;
    /* status.data {uri, bytes, totalBytes} while the data is fetched; uri "" = left out */
    struct {
        char uri[RM_TJ_URI_MAX];
        int64_t bytes, total_bytes;
    } data;
} rm_tj_status;

typedef struct rm_tj {
    char *name, *namespace_, *uid, *resource_version;
    int64_t generation;
    cJSON *labels, *annotations; /* owned, may be NULL */
    rm_tj_spec spec;
    rm_tj_status status;
} rm_tj;

/* Parse a whole TrainingJob object (apiVersion/kind checked, metadata, spec, optional status).
 * Strict: unknown fields under spec (except inside template) are errors. Does NOT apply defaults
 * or validate. On error *out is left freed/zeroed and err names the field. */
int rm_tj_from_json(const cJSON *obj, rm_tj *out, rm_err *err);
/* Parse only spec.training (what the worker receives); strict. */
int rm_training_from_json(const cJSON *training, const char *ctx, rm_training_spec *out, rm_err *err);
void rm_training_defaults(rm_training_spec *t);
int rm_training_validate(const rm_training_spec *t, const char *ctx, rm_err *err);
void rm_training_free(rm_training_spec *t);
/* Training samples of the dataset when known without reading it (fashion-mnist in its default
 * folder: 60,000), else 0. rm_tj_validate refuses a global batch (the largest of replicas and
 * maxReplicas x batchSizePerWorker) above it. */
int64_t rm_training_samples(const rm_training_spec *t);
/* The optimizer steps a run of s takes at spec.replicas: epochs x (training samples / global
 * batch), the global batch being batchSizePerWorker x data-parallel replicas (replicas /
 * pipeline stages) x gradientAccumulationSteps as the worker counts it, capped by maxSteps; the
 * progress line's total. 0 when unknown (the set's size needs reading it, and no maxSteps). */
double rm_tj_steps_total(const rm_tj_spec *s);
/* Fill every unset field with its default (idempotent). */
void rm_tj_defaults(rm_tj *tj);
/* First violation, naming the field; RM_OK if valid. Rules: metadata.name a DNS-1035 label of at
 * most rm_tj_name_max(maxReplicas) characters, replicas >= 1, 1 <= minReplicas <= replicas <=
 * maxReplicas <= RM_TJ_MAX_REPLICAS, known enums, positive batch/epochs/lr, hidden widths 1..65536,
 * ... */
int rm_tj_validate(const rm_tj *tj, rm_err *err);
/* The longest job name whose pod hostnames "<name>-worker-<maxReplicas-1>" fit a DNS-1123 label
 * (50 at 16384 replicas, 51 at 1024, 54 at 8). max_replicas is clamped to 1..RM_TJ_MAX_REPLICAS. */
int rm_tj_name_max(int max_replicas);
/* Full object (apiVersion, kind, metadata, spec, status). Owned. */
cJSON *rm_tj_to_json(const rm_tj *tj);
cJSON *rm_tj_spec_to_json(const rm_tj_spec *spec);
cJSON *rm_tj_status_to_json(const rm_tj_status *st);
cJSON *rm_training_to_json(const rm_training_spec *t);
/* Parse a status object back (used by the operator reading its own status). */
int rm_tj_status_from_json(const cJSON *status, rm_tj_status *out, rm_err *err);
/* Deep copy; RM_ENOMEM on failure. */
int rm_tj_copy(rm_tj *dst, const rm_tj *src);
void rm_tj_free(rm_tj *tj); /* frees members, zeroes the struct; NULL ok */

/* Set a condition; lastTransitionTime changes only when status flips (or it is new). Returns 1 if
 * anything changed, 0 if not. */
int rm_tj_set_condition(rm_tj_status *st, rm_cond_type type, bool status, const char *reason,
                        const char *message, int64_t generation, double now);

/* rm_backend, rm_precision, their names and rm_backend_resolve: common/backend.h. */
/* What one worker of this training spec needs in memory, estimated from the worker's own
 * allocations (worker/model/model.c, optim.c, train.c): fp32 weights, gradients, optimizer state (sgd and
 * adagrad 1, adam 2) and checkpoint staging (weights + state); activations and deltas for the
 * batch; the dataset (uint8 images, labels, permutation) when its size is known; plus a fixed
 * RM_TJ_MEM_OVERHEAD for the process, its libraries and threads. All in bytes. */
#define RM_TJ_MEM_OVERHEAD (32LL << 20)
typedef struct rm_mem_estimate {
    int64_t params;      /* parameters of the model */
    int copies;          /* parameter-sized fp32 buffers */
    int64_t model_bytes; /* params x copies x 4 */
    int64_t batch_bytes; /* activations, deltas, inputs for batchSizePerWorker */
    int64_t data_bytes;  /* the dataset in memory (0 when its size is unknown) */
    int64_t total;       /* the sum + RM_TJ_MEM_OVERHEAD */
} rm_mem_estimate;
void rm_training_memory(const rm_training_spec *t, rm_mem_estimate *out);
/* Quantities in bytes (a memory limit): rm_quantity_bytes in common/quantity.h. */
/* Refuse a train-mode job whose `workers` workers together need more than cap_bytes (cap_what names
 * the cap in the message, e.g. "this machine's 23.4 GiB of physical memory"). RM_OK when it fits or
 * cap_bytes <= 0. The error names spec.training.model and the estimate. rm_tj_validate already
 * applies the worker container's resources.limits.memory; `ringmaster run` and `validate` add the
 * local machine (all workers on one host). */
int rm_tj_check_memory(const rm_tj *tj, int64_t cap_bytes, int workers, const char *cap_what, rm_err *err);
/* rm_tj_check_memory for `ringmaster run`/`validate`: every worker (the larger of replicas and
 * maxReplicas) on this machine, against $RINGMASTER_MEMORY_LIMIT (a quantity) when set, else the
 * physical memory. */
int rm_tj_check_memory_local(const rm_tj *tj, rm_err *err);
/* Sum of resources.limits["nvidia.com/gpu"] (falling back to requests) over the containers of a
 * PodTemplateSpec (cJSON, borrowed; NULL -> 0). Values may be numbers or strings ("1"). Bad values
 * count as 0. Capped at 1024. */
int rm_template_gpus(const cJSON *pod_template);
/* The controller a job names (spec.managedBy, else the deprecated spec.runPolicy.managedBy),
 * NULL when neither is set (this operator's). Borrowed. */
const char *rm_tj_managed_by(const rm_tj *tj);
const char *rm_phase_name(rm_phase p);    /* "Running" */
const char *rm_cond_name(rm_cond_type c); /* "Restarting" */
#endif
