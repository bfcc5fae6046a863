/* settings.c — the worker's settings: `ringmaster-worker train` flags, the config file and the
 * RINGMASTER_* environment the launch contract sets (common/worker_env.h), into rm_train_cfg
 * (train.h), with field-named errors. No training state lives here.
 *
 * Ownership: rm_train_cfg owns its strings (rm_train_cfg_free). */
#include "worker/train.h"
#include "kernels/pool.h"

#include "common/clock.h"
#include <errno.h>
#include <getopt.h>
#include <sys/resource.h>
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/json.h"
#include "common/log.h"
#include "common/rdzv.h"
#include "common/worker_env.h"
#include "common/yaml.h"
#include "kernels/kernels.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/ckpt_shard.h"
#include "worker/comm/comm.h"
#include "worker/data/data.h"
#include "common/faults.h"
#include "worker/gpu.h"
#include "worker/model/model.h"
#include "worker/optim/optim.h"
#include "worker/optim/schedule.h"
#include "worker/step.h"
#include "worker/wmetrics.h"

static char *dupstr(const char *s)
{
    return s ? strdup(s) : NULL;
}
static void setstr(char **dst, const char *s)
{
    free(*dst);
    *dst = dupstr(s);
}

void rm_train_cfg_free(rm_train_cfg *cfg)
{
    if (!cfg)
        return;
    rm_training_free(&cfg->t);
    free(cfg->checkpoint_dir);
    free(cfg->output_uri);
    free(cfg->metrics_addr);
    free(cfg->device);
    free(cfg->rdzv_url);
    free(cfg->job);
    free(cfg->token);
    free(cfg->worker_id);
    free(cfg->bind_addr);
    free(cfg->fault_spec);
    free(cfg->static_peers);
    memset(cfg, 0, sizeof *cfg);
}

void rm_train_usage(FILE *out)
{
    fprintf(out,
            "usage: ringmaster-worker train [flags]\n"
            "  settings: spec.training from env RINGMASTER_TRAINING (JSON) or --config FILE\n"
            "  (a TrainingJob YAML/JSON, or only its training object); flags override.\n"
            "  --config FILE              TrainingJob or training object (YAML or JSON)\n"
            "  --epochs N                 data epochs (default 10)\n"
            "  --batch N                  batch size per worker (default 64)\n"
            "  --lr X                     learning rate per 64-sample batch (scaled by global batch/64)\n"
            "  --optimizer sgd|adam|adagrad|adamw|lamb|lars\n"
            "  --grad-clip X              clip the global gradient norm to X (spec.training.gradClip)\n"
            "  --grad-accum K             micro-batches per step (gradientAccumulationSteps)\n"
            "  --warmup-steps N           warmup in steps (replaces --warmup-epochs)\n"
            "  --momentum X  --weight-decay X\n"
            "  --hidden W,W,...           hidden widths (default 512,256)\n"
            "  --warmup-epochs X          linear warmup (default 1)\n"
            "  --schedule cosine|step|constant\n"
            "  --seed N                   data/model seed (default 42)\n"
            "  --fusion-mb X              fusion bucket threshold in MiB (default 25; 0 = per layer)\n"
            "  --sharding none|optimizer|gradients|full  ZeRO stage (spec.training.sharding)\n"
            "  --data-dir DIR             Fashion-MNIST IDX files (default %s)\n"
            "  --checkpoint-dir DIR       env RINGMASTER_CHECKPOINT_DIR; none = no checkpoints\n"
            "  --checkpoint-interval N    steps between checkpoints (default 200)\n"
            "  --checkpoint-keep K        keep the newest K (default 3)\n"
            "  --metrics-addr ADDR        /metrics,/healthz,/readyz (default :9090; port 0 ok; off)\n"
            "  --backend ring|nccl|mpi|local|auto  env RINGMASTER_BACKEND (default auto = ring;\n"
            "                             local: a world of one)\n"
            "  --device auto|cpu|cuda     kernels table (default auto: cuda for backend nccl or\n"
            "                             precision bf16/fp16, else cpu; env RINGMASTER_DEVICE)\n"
            "  --max-steps N              stop after N global steps (testing)\n"
            "  --comm-timeout S           bound on collective waits (default 10)\n"
            "  --log-format text|json     --log-level debug|info|warn|error\n"
            "  --peers H:P,H:P,... --rank R   static world without a rendezvous (no restarts)\n"
            "  --resume[=if-present]      continue from the newest usable checkpoint; without one,\n"
            "                             refuse to start (exit 2) unless if-present (env\n"
            "                             RINGMASTER_RESUME)\n"
            "  --check                    only check what a start checks (the checkpoint folder can\n"
            "                             be written; with --resume, a checkpoint this job can\n"
            "                             continue from): exit 0, or 2 naming the problem\n"
            "  env: RINGMASTER_RENDEZVOUS RINGMASTER_JOB RINGMASTER_TOKEN RINGMASTER_WORKER_ID\n"
            "       RINGMASTER_BIND_ADDR RINGMASTER_PROGRESS_DEADLINE RINGMASTER_FAULT\n",
            RM_DATA_DEFAULT_DIR);
}

static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out, rm_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return rm_errf(err, RM_EINVAL, "%s: want an integer in [%lld, %lld], got \"%s\"", flag, lo, hi, s);
    *out = v;
    return RM_OK;
}

static int parse_dbl(const char *flag, const char *s, double lo, double hi, double *out, rm_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return rm_errf(err, RM_EINVAL, "%s: want a number in [%g, %g], got \"%s\"", flag, lo, hi, s);
    *out = v;
    return RM_OK;
}

/* Take spec.training (+ checkpoint/restart/backend fields) from a whole TrainingJob, or a bare
 * training object, loaded from YAML or JSON. */
static int load_config_file(const char *path, rm_train_cfg *cfg, rm_err *err)
{
    rm_yaml_docs *docs = NULL;
    int rc = rm_yaml_load_file(path, &docs, err);
    if (rc)
        return rc;
    cJSON *doc = rm_yaml_count(docs) ? rm_yaml_doc(docs, 0) : NULL;
    if (!cJSON_IsObject(doc)) {
        rm_yaml_free(docs);
        return rm_errf(err, RM_EINVAL, "%s: expected a TrainingJob or a training object", path);
    }
    if (cJSON_GetObjectItemCaseSensitive(doc, "kind") || cJSON_GetObjectItemCaseSensitive(doc, "spec")) {
        rm_tj tj;
        memset(&tj, 0, sizeof tj);
        rc = rm_tj_from_json(doc, &tj, err);
        if (rc == RM_OK) {
            rm_tj_defaults(&tj);
            rc = rm_tj_validate(&tj, err);
        }
        if (rc == RM_OK) {
            rm_training_free(&cfg->t);
            cfg->t = tj.spec.training;
            memset(&tj.spec.training, 0, sizeof tj.spec.training);
            if (tj.spec.checkpoint.path)
                setstr(&cfg->checkpoint_dir, tj.spec.checkpoint.path);
            if (tj.spec.output.uri)
                setstr(&cfg->output_uri, tj.spec.output.uri);
            cfg->output_dtype = tj.spec.output.dtype;
            cfg->checkpoint_interval = tj.spec.checkpoint.interval_steps;
            cfg->checkpoint_keep = tj.spec.checkpoint.keep;
            cfg->progress_deadline_s = tj.spec.restart.progress_deadline_seconds;
            if (tj.spec.backend == RM_BACKEND_RING || tj.spec.backend == RM_BACKEND_MPI) {
                cfg->backend = tj.spec.backend;
                cfg->backend_local = false;
            }
        }
        rm_tj_free(&tj);
    } else {
        rm_training_spec t;
        memset(&t, 0, sizeof t);
        rc = rm_training_from_json(doc, "spec.training", &t, err);
        if (rc == RM_OK) {
            rm_training_free(&cfg->t);
            cfg->t = t;
        } else {
            rm_training_free(&t);
        }
    }
    rm_yaml_free(docs);
    return rc;
}

static int load_env_training(const char *json, rm_train_cfg *cfg, rm_err *err)
{
    cJSON *o = rm_json_parse(json, strlen(json), err);
    if (!o)
        return rm_errf(err, RM_EINVAL, "RINGMASTER_TRAINING: %s", err ? err->msg : "bad JSON");
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    int rc = rm_training_from_json(o, "spec.training", &t, err);
    cJSON_Delete(o);
    if (rc) {
        rm_training_free(&t);
        return rc;
    }
    rm_training_free(&cfg->t);
    cfg->t = t;
    return RM_OK;
}

/* --backend / RINGMASTER_BACKEND: a spec backend name, or "local" (a world of one). */
/* cfg->threads (train.h). A quota is the pod's own; without one, the machine's CPUs are shared
 * by the workers on it. */
static int settings_threads(rm_train_cfg *cfg, rm_err *err)
{
    const char *env = getenv(RM_ENV_THREADS);
    long long v;
    if (env && *env) {
        RM_CHECK(parse_int(RM_ENV_THREADS, env, 1, RM_POOL_MAX_THREADS, &v, err));
        cfg->threads = (int)v;
        return RM_OK;
    }
    int cpus = rm_pool_cpus_available(), quota = rm_pool_cpu_quota();
    if (quota > 0) {
        cfg->threads = quota < cpus ? quota : cpus;
        return RM_OK;
    }
    long long local = 1;
    if ((env = getenv(RM_ENV_LOCAL_WORLD_SIZE)) && *env &&
        parse_int(RM_ENV_LOCAL_WORLD_SIZE, env, 1, 1 << 20, &v, err) == RM_OK)
        local = v;
    cfg->threads = (int)(cpus / local > 0 ? cpus / local : 1);
    return RM_OK;
}

static int parse_backend(const char *flag, const char *s, rm_train_cfg *cfg, rm_err *err)
{
    rm_backend b = RM_BACKEND_AUTO;
    bool local = strcmp(s, "local") == 0;
    if (!local && rm_backend_parse(s, &b) != RM_OK)
        return rm_errf(err, RM_EINVAL, "%s: ring|nccl|mpi|local|auto, got \"%s\"", flag, s);
    cfg->backend = b;
    cfg->backend_local = local;
    return RM_OK;
}

static int parse_hidden(const char *s, rm_training_spec *t, rm_err *err)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > 65536 || n == RM_TJ_MAX_HIDDEN)
            return rm_errf(err, RM_EINVAL, "--hidden: want up to %d widths 1..65536 like 512,256",
                           RM_TJ_MAX_HIDDEN);
        t->hidden[n++] = (int)v;
        if (*end == ',')
            end++;
        else if (*end)
            return rm_errf(err, RM_EINVAL, "--hidden: bad list \"%s\"", s);
        p = end;
    }
    t->nhidden = n;
    return RM_OK;
}

enum {
    O_CONFIG = 256,
    O_EPOCHS,
    O_BATCH,
    O_LR,
    O_DATA,
    O_CKDIR,
    O_CKINT,
    O_CKKEEP,
    O_METRICS,
    O_BACKEND,
    O_MAXSTEPS,
    O_LOGFMT,
    O_LOGLVL,
    O_OPT,
    O_MOM,
    O_WD,
    O_HIDDEN,
    O_WARM,
    O_SCHED,
    O_SHARD,
    O_SEED,
    O_FUSION,
    O_DEVICE,
    O_CTIMEOUT,
    O_PEERS,
    O_RANK,
    O_RESUME,
    O_CHECK,
    O_CLIP,
    O_ACCUM,
    O_WSTEPS,
    O_HELP
};

/* The numeric flags: where each lands in rm_train_cfg, its type and its range. */
typedef enum { NF_INT, NF_U64, NF_DBL } num_kind;
typedef struct num_flag {
    int opt;
    const char *name;
    num_kind kind;
    double lo, hi;
    size_t off; /* offsetof(rm_train_cfg, ...) */
} num_flag;

/* the member's size must fit the kind: a wrong table row does not compile */
#define NF_SIZE_OK(k, m) \
    sizeof(char[sizeof(((rm_train_cfg *)0)->m) == ((k) == NF_INT ? sizeof(int) : 8) ? 1 : -1])
#define NF(o, n, k, lo, hi, m)                                            \
    {                                                                     \
        o, n, k, lo, hi, offsetof(rm_train_cfg, m) + 0 * NF_SIZE_OK(k, m) \
    }
static const num_flag NUM_FLAGS[] = {
    NF(O_EPOCHS, "--epochs", NF_INT, 1, 100000, t.epochs),
    NF(O_BATCH, "--batch", NF_INT, 1, 65536, t.batch_size_per_worker),
    NF(O_LR, "--lr", NF_DBL, 1e-12, 1e6, t.optimizer.lr),
    NF(O_CKINT, "--checkpoint-interval", NF_INT, 0, INT32_MAX, checkpoint_interval),
    NF(O_CKKEEP, "--checkpoint-keep", NF_INT, 1, 1000, checkpoint_keep),
    NF(O_MAXSTEPS, "--max-steps", NF_INT, 0, INT32_MAX, t.max_steps),
    NF(O_MOM, "--momentum", NF_DBL, 0, 1, t.optimizer.momentum),
    NF(O_WD, "--weight-decay", NF_DBL, 0, 1, t.optimizer.weight_decay),
    NF(O_WARM, "--warmup-epochs", NF_DBL, 0, 1000, t.warmup_epochs),
    NF(O_SEED, "--seed", NF_U64, 0, (double)INT64_MAX, t.seed),
    NF(O_FUSION, "--fusion-mb", NF_DBL, 0, 4096, t.fusion_buffer_mb),
    NF(O_RANK, "--rank", NF_INT, 0, RM_RDZV_MAX_WORLD - 1, static_rank),
    NF(O_CTIMEOUT, "--comm-timeout", NF_DBL, 0.1, 3600, comm_timeout_s),
    NF(O_CLIP, "--grad-clip", NF_DBL, 0, 1e12, t.grad_clip),
    NF(O_ACCUM, "--grad-accum", NF_INT, 1, 65536, t.grad_accum),
    NF(O_WSTEPS, "--warmup-steps", NF_INT, 0, INT32_MAX, t.warmup_steps),
};
#undef NF
#undef NF_SIZE_OK

static const num_flag *num_flag_find(int opt)
{
    for (size_t i = 0; i < RM_ARRAY_LEN(NUM_FLAGS); i++)
        if (NUM_FLAGS[i].opt == opt)
            return &NUM_FLAGS[i];
    return NULL;
}

static int num_flag_set(const num_flag *nf, const char *arg, rm_train_cfg *cfg, rm_err *err)
{
    char *dst = (char *)cfg + nf->off;
    if (nf->kind == NF_DBL)
        return parse_dbl(nf->name, arg, nf->lo, nf->hi, (double *)(void *)dst, err);
    long long v = 0;
    long long hi = nf->kind == NF_U64 ? INT64_MAX : (long long)nf->hi;
    RM_CHECK(parse_int(nf->name, arg, (long long)nf->lo, hi, &v, err));
    if (nf->kind == NF_U64)
        *(uint64_t *)(void *)dst = (uint64_t)v;
    else
        *(int *)(void *)dst = (int)v;
    return RM_OK;
}

static int parse_resume(const char *flag, const char *s, rm_train_cfg *cfg, rm_err *err)
{
    if (!s || !*s || !strcmp(s, "required") || !strcmp(s, "true"))
        cfg->resume = RM_RESUME_REQUIRED;
    else if (!strcmp(s, "if-present"))
        cfg->resume = RM_RESUME_IF_PRESENT;
    else if (!strcmp(s, "off") || !strcmp(s, "false"))
        cfg->resume = RM_RESUME_OFF;
    else
        return rm_errf(err, RM_EINVAL, "%s: required or if-present, got \"%s\"", flag, s);
    return RM_OK;
}

/* One piece on purpose: a getopt_long loop whose switch has a case per flag, all sharing the
 * config being filled and the one failure path that frees it; the per-flag work is already in
 * the helpers above (parse_int, parse_dbl, parse_backend, parse_hidden, ...). */
int rm_train_cfg_parse(int argc, char **argv, rm_train_cfg *cfg, rm_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    int rc = RM_OK;
    rm_training_defaults(&cfg->t);
    cfg->checkpoint_interval = 200;
    cfg->checkpoint_keep = 3;
    cfg->progress_deadline_s = 60;
    cfg->comm_timeout_s = 10;
    cfg->eval_every_epoch = 1;
    cfg->log_every = 100;
    const char *le = getenv(RM_ENV_LOG_EVERY);
    if (le && *le) {
        long long v;
        RM_CHECK(parse_int(RM_ENV_LOG_EVERY, le, 1, 1000000000, &v, err));
        cfg->log_every = v;
    }

    static const struct option opts[] = {
        {"config", required_argument, 0, O_CONFIG},
        {"epochs", required_argument, 0, O_EPOCHS},
        {"batch", required_argument, 0, O_BATCH},
        {"lr", required_argument, 0, O_LR},
        {"data-dir", required_argument, 0, O_DATA},
        {"checkpoint-dir", required_argument, 0, O_CKDIR},
        {"checkpoint-interval", required_argument, 0, O_CKINT},
        {"checkpoint-keep", required_argument, 0, O_CKKEEP},
        {"metrics-addr", required_argument, 0, O_METRICS},
        {"backend", required_argument, 0, O_BACKEND},
        {"max-steps", required_argument, 0, O_MAXSTEPS},
        {"log-format", required_argument, 0, O_LOGFMT},
        {"log-level", required_argument, 0, O_LOGLVL},
        {"optimizer", required_argument, 0, O_OPT},
        {"momentum", required_argument, 0, O_MOM},
        {"weight-decay", required_argument, 0, O_WD},
        {"hidden", required_argument, 0, O_HIDDEN},
        {"warmup-epochs", required_argument, 0, O_WARM},
        {"schedule", required_argument, 0, O_SCHED},
        {"sharding", required_argument, 0, O_SHARD},
        {"seed", required_argument, 0, O_SEED},
        {"fusion-mb", required_argument, 0, O_FUSION},
        {"device", required_argument, 0, O_DEVICE},
        {"comm-timeout", required_argument, 0, O_CTIMEOUT},
        {"peers", required_argument, 0, O_PEERS},
        {"rank", required_argument, 0, O_RANK},
        {"resume", optional_argument, 0, O_RESUME},
        {"check", no_argument, 0, O_CHECK},
        {"grad-clip", required_argument, 0, O_CLIP},
        {"grad-accum", required_argument, 0, O_ACCUM},
        {"warmup-steps", required_argument, 0, O_WSTEPS},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };

    /* pass 1: the config source (file beats env), so flags can override it in pass 2 */
    const char *config = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9))
            config = argv[i] + 9;
    }
    const char *env;
    if (config) {
        RM_CHECK_GOTO(load_config_file(config, cfg, err), rc, fail);
    } else if ((env = getenv(RM_ENV_TRAINING)) && *env) {
        RM_CHECK_GOTO(load_env_training(env, cfg, err), rc, fail);
    }
    uint32_t given = cfg->t.set; /* fields the config named explicitly */
    rm_training_defaults(&cfg->t);
    bool lr_flag = false, opt_flag = false;

    /* env from the controller (the launch contract, common/worker_env.h) */
    if ((env = getenv(RM_ENV_CHECKPOINT_DIR)) && *env)
        setstr(&cfg->checkpoint_dir, env);
    if ((env = getenv(RM_ENV_OUTPUT_URI)) && *env)
        setstr(&cfg->output_uri, env);
    if ((env = getenv(RM_ENV_OUTPUT_DTYPE)) && *env) {
        int dt = rm_enum_index(rm_output_dtype_names, env);
        if (dt < 0) {
            rc = rm_err_field(err, RM_EINVAL, RM_ENV_OUTPUT_DTYPE, "must be float32 or bfloat16 (got \"%s\")",
                              env);
            goto fail;
        }
        cfg->output_dtype = (rm_output_dtype)dt;
    }
    if ((env = getenv(RM_ENV_CHECKPOINT_INTERVAL)) && *env) {
        long long v;
        RM_CHECK_GOTO(parse_int(RM_ENV_CHECKPOINT_INTERVAL, env, 0, 1LL << 40, &v, err), rc, fail);
        cfg->checkpoint_interval = (int)v;
    }
    if ((env = getenv(RM_ENV_CHECKPOINT_KEEP)) && *env) {
        long long v;
        RM_CHECK_GOTO(parse_int(RM_ENV_CHECKPOINT_KEEP, env, 1, 1000, &v, err), rc, fail);
        cfg->checkpoint_keep = (int)v;
    }
    if ((env = getenv(RM_ENV_BACKEND)) && *env)
        RM_CHECK_GOTO(parse_backend(RM_ENV_BACKEND, env, cfg, err), rc, fail);
    if ((env = getenv(RM_ENV_PROGRESS_DEADLINE)) && *env)
        RM_CHECK_GOTO(parse_dbl(RM_ENV_PROGRESS_DEADLINE, env, 0, 1e7, &cfg->progress_deadline_s, err), rc,
                      fail);
    if ((env = getenv(RM_ENV_RENDEZVOUS)) && *env)
        setstr(&cfg->rdzv_url, env);
    setstr(&cfg->job, (env = getenv(RM_ENV_JOB)) && *env ? env : "default/local");
    setstr(&cfg->token, (env = getenv(RM_ENV_TOKEN)) ? env : "");
    setstr(&cfg->worker_id, (env = getenv(RM_ENV_WORKER_ID)) && *env ? env : "0");
    setstr(&cfg->bind_addr, (env = getenv(RM_ENV_BIND_ADDR)) && *env ? env : "127.0.0.1");
    if ((env = getenv(RM_ENV_FAULT)) && *env)
        setstr(&cfg->fault_spec, env);
    if ((env = getenv(RM_ENV_RESUME)) && *env)
        RM_CHECK_GOTO(parse_resume(RM_ENV_RESUME, env, cfg, err), rc, fail);
    setstr(&cfg->metrics_addr, ":" RM_STR(RM_PORT_WORKER_METRICS));
    setstr(&cfg->device, (env = getenv(RM_ENV_DEVICE)) && *env ? env : "auto");
    RM_CHECK_GOTO(settings_threads(cfg, err), rc, fail);

    optind = 1;
    opterr = 0;
    rm_log_level log_lvl = RM_LOG_INFO;
    rm_log_format log_fmt = RM_LOG_TEXT;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        const num_flag *nf = num_flag_find(c);
        if (nf) {
            RM_CHECK_GOTO(num_flag_set(nf, optarg, cfg, err), rc, fail);
            lr_flag |= c == O_LR;
            continue;
        }
        switch (c) {
        case O_CONFIG:
            break;
        case O_DATA:
            free(cfg->t.data_dir);
            cfg->t.data_dir = strdup(optarg);
            break;
        case O_CKDIR:
            setstr(&cfg->checkpoint_dir, optarg);
            break;
        case O_METRICS:
            setstr(&cfg->metrics_addr, optarg);
            break;
        case O_BACKEND:
            RM_CHECK_GOTO(parse_backend("--backend", optarg, cfg, err), rc, fail);
            break;
        case O_LOGFMT:
            if (rm_log_parse_format(optarg, &log_fmt) != RM_OK) {
                rc = rm_errf(err, RM_EINVAL, "--log-format: text or json, got \"%s\"", optarg);
                goto fail;
            }
            break;
        case O_LOGLVL:
            if (rm_log_parse_level(optarg, &log_lvl) != RM_OK) {
                rc = rm_errf(err, RM_EINVAL, "--log-level: debug|info|warn|error, got \"%s\"", optarg);
                goto fail;
            }
            break;
        case O_OPT: {
            opt_flag = true;
            /* every optimizer but lbfgs (Sandblaster runs on the parameter servers) */
            int i = rm_enum_index(rm_opt_names, optarg);
            if (i < 0 || i == RM_OPT_LBFGS) {
                rc = rm_errf(err, RM_EINVAL, "--optimizer: sgd|adam|adagrad|adamw|lamb|lars, got \"%s\"",
                             optarg);
                goto fail;
            }
            cfg->t.optimizer.type = (rm_opt_type)i;
            break;
        }
        case O_HIDDEN:
            RM_CHECK_GOTO(parse_hidden(optarg, &cfg->t, err), rc, fail);
            break;
        case O_SCHED: {
            int i = rm_enum_index(rm_schedule_names, optarg);
            if (i < 0) {
                rc = rm_errf(err, RM_EINVAL, "--schedule: cosine|step|constant, got \"%s\"", optarg);
                goto fail;
            }
            cfg->t.schedule = (rm_schedule)i;
            break;
        }
        case O_SHARD: {
            int i = rm_enum_index(rm_sharding_names, optarg);
            if (i < 0) {
                rc = rm_errf(err, RM_EINVAL, "--sharding: none|optimizer|gradients|full, got \"%s\"", optarg);
                goto fail;
            }
            cfg->t.sharding = (rm_sharding)i;
            break;
        }
        case O_DEVICE:
            setstr(&cfg->device, optarg);
            break;
        case O_PEERS:
            setstr(&cfg->static_peers, optarg);
            break;
        case O_RESUME:
            RM_CHECK_GOTO(parse_resume("--resume", optarg, cfg, err), rc, fail);
            break;
        case O_CHECK:
            cfg->check_only = true;
            break;
        case O_HELP:
        case 'h':
            rc = rm_errf(err, RM_EINVAL, "help");
            goto fail;
        case ':':
            rc = rm_errf(err, RM_EINVAL, "flag %s needs a value", argv[optind - 1]);
            goto fail;
        default:
            rc = rm_errf(err, RM_EINVAL, "unknown flag %s", argv[optind - 1]);
            goto fail;
        }
    }
    if (optind < argc) {
        rc = rm_errf(err, RM_EINVAL, "unexpected argument \"%s\"", argv[optind]);
        goto fail;
    }
    rm_log_init(log_lvl, log_fmt, "worker"); /* env RINGMASTER_LOG_* still override */
    if (opt_flag) {
        /* the defaults that depend on the optimizer type, unless given explicitly */
        rm_optimizer_spec *o = &cfg->t.optimizer;
        if (!lr_flag && !(given & RM_TR_SET_LR))
            o->lr = o->type == RM_OPT_ADAM || o->type == RM_OPT_ADAMW || o->type == RM_OPT_LAMB ? 0.001
                    : o->type == RM_OPT_ADAGRAD                                                 ? 0.01
                                                                                                : 0.02;
        if (!(given & RM_TR_SET_EPS))
            o->eps = o->type == RM_OPT_ADAGRAD ? 1e-10 : o->type == RM_OPT_LAMB ? 1e-6 : 1e-8;
    }
    RM_CHECK_GOTO(rm_training_validate(&cfg->t, "spec.training", err), rc, fail);
    if (!strcmp(cfg->device, "auto"))
        setstr(&cfg->device,
               cfg->backend == RM_BACKEND_NCCL || cfg->t.precision != RM_PREC_FP32 ? "cuda" : "cpu");
    if (strcmp(cfg->device, "cpu") && strcmp(cfg->device, "cuda")) {
        rc = rm_errf(err, RM_EINVAL, "--device: auto|cpu|cuda, got \"%s\"", cfg->device);
        goto fail;
    }
    if (!strcmp(cfg->metrics_addr, "off"))
        setstr(&cfg->metrics_addr, "");
    if (cfg->checkpoint_dir && !strcmp(cfg->checkpoint_dir, "none")) { /* as the help says */
        free(cfg->checkpoint_dir);
        cfg->checkpoint_dir = NULL;
    }
    return RM_OK;
fail:
    rm_train_cfg_free(cfg);
    return rc;
}
