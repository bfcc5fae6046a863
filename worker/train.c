/* train.c — `ringmaster-worker train`: settings, the data-parallel loop, in-place restart.
 *
 * Design (see train.h for the buffer layout):
 *   - One context struct (trainer) owns everything; the only file-level state is the SIGTERM flag
 *     a signal handler must reach.
 *   - A "round" is one rendezvous epoch: join -> comm init -> load newest checkpoint -> make every
 *     rank hold rank 0's exact state (a broadcast done as an allreduce SUM where the other ranks
 *     contribute zeros: exact in floating point) -> steps until the group breaks, the job ends,
 *     or the rendezvous says rejoin/stop. A broken round is torn down and the next one joined in
 *     the same process; the world size may differ (the LR and shard follow it).
 *   - A step issues kernels on preallocated buffers; gradients of layer l are handed to the fusion
 *     layer as soon as backward finishes it, so buckets allreduce while earlier layers compute.
 *   - Progress reports (~1 s) go out from a reporter thread with its own rendezvous client, so a
 *     slow or restarting controller never stalls the step; the training loop publishes a small
 *     snapshot under a mutex each step (no allocation) and polls an atomic "rejoin/stop" answer.
 *     Logs, evaluation and checkpoints run between steps on the training thread; a hang fault
 *     pauses the reporter too, so a hung worker is silent, as a real hang would be. */
#include "worker/train.h"
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

/* The one piece of state a signal handler has to reach. */
static volatile sig_atomic_t g_train_term;
static void on_term(int sig)
{
    (void)sig;
    g_train_term = 1;
}

/* ================================ settings ================================ */

static char *dupstr(const char *s) { return s ? strdup(s) : NULL; }
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
            "  --optimizer sgd|adam|adagrad\n"
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

static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out,
                     rm_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return rm_errf(err, RM_EINVAL, "%s: want an integer in [%lld, %lld], got \"%s\"", flag, lo,
                       hi, s);
    *out = v;
    return RM_OK;
}

static int parse_dbl(const char *flag, const char *s, double lo, double hi, double *out,
                     rm_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return rm_errf(err, RM_EINVAL, "%s: want a number in [%g, %g], got \"%s\"", flag, lo, hi,
                       s);
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
    if (cJSON_GetObjectItemCaseSensitive(doc, "kind") ||
        cJSON_GetObjectItemCaseSensitive(doc, "spec")) {
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
    O_CONFIG = 256, O_EPOCHS, O_BATCH, O_LR, O_DATA, O_CKDIR, O_CKINT, O_CKKEEP, O_METRICS,
    O_BACKEND, O_MAXSTEPS, O_LOGFMT, O_LOGLVL, O_OPT, O_MOM, O_WD, O_HIDDEN, O_WARM, O_SCHED, O_SHARD,
    O_SEED, O_FUSION, O_DEVICE, O_CTIMEOUT, O_PEERS, O_RANK, O_RESUME, O_CHECK, O_HELP
};

/* The numeric flags: where each lands in rm_train_cfg, its type and its range. */
typedef enum { NF_INT, NF_U64, NF_DBL } num_kind;
typedef struct num_flag {
    int opt;
    const char *name;
    num_kind kind;
    double lo, hi;
    size_t off;   /* offsetof(rm_train_cfg, ...) */
} num_flag;

/* the member's size must fit the kind: a wrong table row does not compile */
#define NF_SIZE_OK(k, m) \
    sizeof(char[sizeof(((rm_train_cfg *)0)->m) == ((k) == NF_INT ? sizeof(int) : 8) ? 1 : -1])
#define NF(o, n, k, lo, hi, m) {o, n, k, lo, hi, offsetof(rm_train_cfg, m) + 0 * NF_SIZE_OK(k, m)}
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
    uint32_t given = cfg->t.set;   /* fields the config named explicitly */
    rm_training_defaults(&cfg->t);
    bool lr_flag = false, opt_flag = false;

    /* env from the controller (the launch contract, common/worker_env.h) */
    if ((env = getenv(RM_ENV_CHECKPOINT_DIR)) && *env)
        setstr(&cfg->checkpoint_dir, env);
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
        RM_CHECK_GOTO(parse_dbl(RM_ENV_PROGRESS_DEADLINE, env, 0, 1e7,
                                &cfg->progress_deadline_s, err), rc, fail);
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
        case O_CONFIG: break;
        case O_DATA:
            free(cfg->t.data_dir);
            cfg->t.data_dir = strdup(optarg);
            break;
        case O_CKDIR: setstr(&cfg->checkpoint_dir, optarg); break;
        case O_METRICS: setstr(&cfg->metrics_addr, optarg); break;
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
                rc = rm_errf(err, RM_EINVAL, "--log-level: debug|info|warn|error, got \"%s\"",
                             optarg);
                goto fail;
            }
            break;
        case O_OPT:
            opt_flag = true;
            if (!strcmp(optarg, "sgd"))
                cfg->t.optimizer.type = RM_OPT_SGD;
            else if (!strcmp(optarg, "adam"))
                cfg->t.optimizer.type = RM_OPT_ADAM;
            else if (!strcmp(optarg, "adagrad"))
                cfg->t.optimizer.type = RM_OPT_ADAGRAD;
            else {
                rc = rm_errf(err, RM_EINVAL, "--optimizer: sgd|adam|adagrad, got \"%s\"", optarg);
                goto fail;
            }
            break;
        case O_HIDDEN: RM_CHECK_GOTO(parse_hidden(optarg, &cfg->t, err), rc, fail); break;
        case O_SCHED:
            if (!strcmp(optarg, "cosine"))
                cfg->t.schedule = RM_SCHED_COSINE;
            else if (!strcmp(optarg, "step"))
                cfg->t.schedule = RM_SCHED_STEP;
            else if (!strcmp(optarg, "constant"))
                cfg->t.schedule = RM_SCHED_CONSTANT;
            else {
                rc = rm_errf(err, RM_EINVAL, "--schedule: cosine|step|constant, got \"%s\"",
                             optarg);
                goto fail;
            }
            break;
        case O_SHARD: {
            int i = 0;
            while (rm_sharding_names[i] && strcmp(rm_sharding_names[i], optarg) != 0)
                i++;
            if (!rm_sharding_names[i]) {
                rc = rm_errf(err, RM_EINVAL, "--sharding: none|optimizer|gradients|full, got \"%s\"",
                             optarg);
                goto fail;
            }
            cfg->t.sharding = (rm_sharding)i;
            break;
        }
        case O_DEVICE: setstr(&cfg->device, optarg); break;
        case O_PEERS: setstr(&cfg->static_peers, optarg); break;
        case O_RESUME: RM_CHECK_GOTO(parse_resume("--resume", optarg, cfg, err), rc, fail); break;
        case O_CHECK: cfg->check_only = true; break;
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
    rm_log_init(log_lvl, log_fmt, "worker");   /* env RINGMASTER_LOG_* still override */
    if (opt_flag) {
        /* the defaults that depend on the optimizer type, unless given explicitly */
        rm_optimizer_spec *o = &cfg->t.optimizer;
        if (!lr_flag && !(given & RM_TR_SET_LR))
            o->lr = o->type == RM_OPT_ADAM ? 0.001 : o->type == RM_OPT_ADAGRAD ? 0.01 : 0.02;
        if (!(given & RM_TR_SET_EPS))
            o->eps = o->type == RM_OPT_ADAGRAD ? 1e-10 : 1e-8;
    }
    RM_CHECK_GOTO(rm_training_validate(&cfg->t, "spec.training", err), rc, fail);
    if (!strcmp(cfg->device, "auto"))
        setstr(&cfg->device, cfg->backend == RM_BACKEND_NCCL ||
                                     cfg->t.precision != RM_PREC_FP32
                                 ? "cuda"
                                 : "cpu");
    if (strcmp(cfg->device, "cpu") && strcmp(cfg->device, "cuda")) {
        rc = rm_errf(err, RM_EINVAL, "--device: auto|cpu|cuda, got \"%s\"", cfg->device);
        goto fail;
    }
    if (!strcmp(cfg->metrics_addr, "off"))
        setstr(&cfg->metrics_addr, "");
    if (cfg->checkpoint_dir && !strcmp(cfg->checkpoint_dir, "none")) {   /* as the help says */
        free(cfg->checkpoint_dir);
        cfg->checkpoint_dir = NULL;
    }
    return RM_OK;
fail:
    rm_train_cfg_free(cfg);
    return rc;
}

/* ================================ the trainer ================================ */

enum { R_DONE = 1, R_BROKEN, R_REJOIN, R_STOP, R_TERM };

/* The progress reporter: a thread that sends the latest snapshot every ~1 s. */
typedef struct reporter {
    rm_rdzv_client *client;     /* its own: clients are one per thread */
    pthread_t th;
    bool started, inited;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit, active;          /* active: a round is running and the snapshot is current */
    rm_rdzv_report snap;        /* guarded by mu; snap.checkpoint_error points at ckpt_err */
    char ckpt_err[128];         /* guarded by mu */
    int64_t samples;            /* local samples so far, guarded by mu */
    atomic_int action;          /* 0, R_REJOIN or R_STOP for the round in snap.epoch */
    atomic_int action_epoch;
    double last_rate;           /* guarded by mu; the training thread copies it to the gauge
                                   (the gauge's series changes with the rank label) */
    /* Workers that never talk to each other (a strategy that claims its batches: parameter
     * servers) do not stop when the rendezvous moves on (docs/strategies.md#failure-semantics:
     * nobody waits): the reporter re-joins in the background with polling joins while the
     * training thread goes on, and hands over the round once it closed. */
    bool detached;              /* set before the thread starts */
    const char *my_addr;        /* borrowed from the trainer */
    atomic_int regroup_from;    /* the epoch being left; 0: none */
    atomic_int joining_epoch;   /* the epoch of the round joined in the background: what the
                                   reports say meanwhile (the controller then counts this worker
                                   as a member of the round it is in, not a stray to re-form for) */
    atomic_llong view;          /* RM_STEP_VIEW(epoch, workers alive) for the strategy (step.h) */
    atomic_int new_rank, new_world, new_epoch;   /* a round that closed in the background
                                                    (new_epoch written last) */
} reporter;

/* The checkpoint writer thread (see "checkpoints, off the critical path" below). */
typedef struct ckpt_writer {
    pthread_t th;
    bool started, inited;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;
    bool busy;                  /* a write was handed over and its result not yet collected;
                                   touched by the training thread only (under mu) */
    atomic_bool done;           /* the write in flight finished; the result below is ready */
    const char *dir;            /* borrowed from the settings */
    int keep;
    rm_ckpt_units units;        /* the model's layers (sharded sets; borrowed from the model) */
    int nstages;                /* the write in flight is a pipeline stage set (mu) */
    int stage_bounds[RM_MODEL_MAX_UNITS + 1];    /* ... with these unit bounds (mu) */
    double wait_s;              /* sharded: how long to wait for the other ranks' shards */
    rm_ckpt_meta meta;          /* the write in flight (guarded by mu) */
    const void *buf;            /* host_stage */
    size_t bytes;
    int rc;                     /* result, guarded by mu */
    char err[256];
    char path[4200];
    double seconds;
    double blocked;             /* the training thread's time handing this write over (wait for
                                   the previous one + snapshot); training thread only */
} ckpt_writer;

typedef struct trainer {
    const rm_train_cfg *cfg;
    const rm_kernels *k;
    rm_dataset tr, te;
    rm_model m;
    rm_optim opt;
    rm_lr_sched sched;
    int B;                      /* per-worker batch */
    uint32_t *perm;
    int perm_epoch;
    float *host_x;              /* staging for non-host kernels */
    int32_t *host_labels;
    float *host_stage;          /* checkpoint payload staging (params + state), host */
    size_t stage_bytes;
    float *dev_small;           /* 32 floats of device memory: evaluation sums */
    rm_amp amp;                 /* mixed precision (fp16 loss scaling); a no-op for fp32 */
    bool amp_on;
    int gpu;                    /* CUDA device ordinal (cuda table only) */

    /* world */
    rm_rdzv_client *rdzv;
    int listen_fd;
    rm_ring_listener *ring_lst; /* owns listen_fd's socket once started (ring backend) */
    char my_addr[96];
    const rm_comm_ops *ops;
    rm_comm *comm;
    const rm_step_ops *strat;   /* the training strategy (worker/step.h) */
    rm_step *st;
    int rank, world, rdzv_epoch;
    int local_rank, local_world, nnodes;   /* this round's topology (rm_rdzv_topology) */
    char node[RM_RDZV_NODE_MAX + 1];       /* this rank's node as the rendezvous reported it */
    bool join_gave_up;          /* no round within the join deadline: fatal */

    /* training state (what a checkpoint holds) */
    int64_t step;
    int train_epoch;
    int64_t data_pos;
    double lr;
    int64_t last_ckpt_step;
    int ckpt_failures;          /* consecutive failed checkpoint writes (reported; 0 = last ok) */
    char ckpt_err[128];         /* the last failure's message ("" after a success) */
    bool have_state;            /* params/optimizer hold a real state (fresh, loaded or synced):
                                   before the first round forms they are zeros, never saved */

    /* results and rates */
    double test_acc, test_loss, train_loss;
    int64_t eval_step;          /* step of the last evaluation, -1 none */
    rm_rdzv_eval evals[RM_RDZV_MAX_EVALS]; /* every end-of-epoch evaluation, for the reports */
    int nevals;
    double t_start, train_seconds;
    int64_t samples_local;
    double rep_t;               /* last loss read for the reporter */
    double rate;                /* samples/s, last interval */
    double ar_gbps;
    int64_t log_step;
    double fail_t;              /* failure detected at (mono), 0 none */
    int restarts;
    int64_t gather_step;        /* step of the last sharded state_gather (-1 none) */
    rm_step_memory mem;         /* the strategy's bytes per kind, and the peak RSS (report_memory) */
    double peak_rss;

    rm_wmetrics wm;
    rm_faults faults;
    reporter rp;
    ckpt_writer cw;
} trainer;

/* The comm backend this worker runs (before a world of one turns it into "local"). */
static rm_backend cfg_backend(const rm_train_cfg *cfg)
{
    return rm_backend_resolve(cfg->backend, 0);
}
static bool backend_is(const rm_train_cfg *cfg, rm_backend b)
{
    return !cfg->backend_local && cfg_backend(cfg) == b;
}

static void ckpt_writer_stop(trainer *t);

/* This rank's slice of the global batch: rank of world, unless the strategy groups ranks onto
 * one slice (pipeline stages of a data-parallel replica share it). */
static void data_slot(const trainer *t, int *slot, int *nslots)
{
    *slot = t->rank;
    *nslots = t->world;
    if (t->strat->data_slot && t->st)
        t->strat->data_slot(t->st, slot, nslots);
}


/* A rendezvous client for these settings. The client constructor only answers NULL, so the
 * settings it rejects are named here: a missing token is the usual one (not "out of memory"). */
static int rdzv_client_make(const rm_train_cfg *cfg, rm_rdzv_client **out, rm_err *err)
{
    if (!cfg->token || !*cfg->token)
        return rm_err_field(err, RM_EAUTH, RM_ENV_TOKEN,
                            "missing or empty: the rendezvous at %s needs the job's token",
                            cfg->rdzv_url);
    *out = rm_rdzv_client_new(cfg->rdzv_url, cfg->job, cfg->token, cfg->worker_id);
    if (!*out)
        return rm_err_field(err, RM_EINVAL, RM_ENV_RENDEZVOUS,
                            "cannot use rendezvous %s for job \"%s\" as worker \"%s\" (the job "
                            "must be namespace/name, names and the worker id DNS-like, the token "
                            "one line of at most 255 bytes)",
                            cfg->rdzv_url, cfg->job, cfg->worker_id);
    /* the node reported to the rendezvous (docs/strategies.md#topology): NODE_NAME, else the host's name */
    const char *node = getenv(RM_ENV_NODE_NAME);
    if (node && *node) {
        rm_err e2 = {0};
        if (rm_rdzv_client_set_node(*out, node, &e2) != RM_OK) {
            rm_rdzv_client_free(*out);
            *out = NULL;
            return rm_err_field(err, RM_EINVAL, RM_ENV_NODE_NAME, "%s", e2.msg);
        }
    }
    return RM_OK;
}

static void trainer_free(trainer *t)
{
    ckpt_writer_stop(t);   /* first: the writer may still read host_stage */
    if (t->strat)
        t->strat->destroy(t->st);
    if (t->comm && t->ops)
        t->ops->destroy(t->comm);
    rm_ring_listener_free(t->ring_lst);
    if (t->listen_fd >= 0)
        close(t->listen_fd);
    rm_rdzv_client_free(t->rdzv);
    rm_optim_free(&t->opt);
    rm_model_free(&t->m);
    if (t->amp_on)
        rm_amp_free(&t->amp);
    if (t->k) {
        t->k->free(t->dev_small);
        rm_kernels_host_free(t->k, t->host_x);   /* pinned by the CUDA table */
        rm_kernels_host_free(t->k, t->host_labels);
        rm_kernels_host_free(t->k, t->host_stage);
    }
    free(t->perm);
    rm_dataset_free(&t->tr);
    rm_dataset_free(&t->te);
    rm_wmetrics_stop(&t->wm);
}

static int trainer_setup(trainer *t, const rm_train_cfg *cfg, rm_err *err)
{
    memset(t, 0, sizeof *t);
    t->listen_fd = -1;
    t->cfg = cfg;
    t->B = cfg->t.batch_size_per_worker;
    t->perm_epoch = -1;
    t->eval_step = -1;
    t->test_acc = -1;
    t->last_ckpt_step = -1;
    t->gather_step = -1;
    if (cfg->t.precision != RM_PREC_FP32 && strcmp(cfg->device, "cuda") != 0)
        return rm_errf(err, RM_EUNSUPPORTED,
                       "precision %s needs the GPU path (--device cuda); the CPU path is fp32",
                       rm_precision_str(cfg->t.precision));
    if (!strcmp(cfg->device, "cuda")) {
        const char *lr = getenv("LOCAL_RANK");
        char name[128] = "";
        RM_CHECK(rm_gpu_select(lr ? atoi(lr) : 0, &t->gpu, name, sizeof name, err));
        rm_info("gpu selected device=%d name=\"%s\"", t->gpu, name);
    }
    t->k = rm_kernels_get(cfg->device);
    if (!t->k) {
        char why[256] = "";
        if (!strcmp(cfg->device, "cuda"))
            rm_gpu_available(why, sizeof why);
        return rm_errf(err, RM_EUNSUPPORTED, "device %s: not available in this build or machine%s%s",
                       cfg->device, why[0] ? ": " : "", why);
    }
    RM_CHECK(rm_amp_init(&t->amp, t->k, cfg->t.precision, err));
    t->amp_on = true;
    RM_CHECK(rm_faults_parse(cfg->fault_spec, &t->faults, err));
    rm_faults_set_dir(&t->faults, cfg->checkpoint_dir);
    RM_CHECK(rm_wmetrics_start(&t->wm, cfg->metrics_addr, cfg->job, cfg->progress_deadline_s,
                               err));
    if (t->wm.srv)
        rm_info("metrics listening port=%d", rm_wmetrics_port(&t->wm));

    double t0 = rm_mono();
    RM_CHECK(rm_dataset_load(cfg->t.data_dir, true, &t->tr, err));
    RM_CHECK(rm_dataset_load(cfg->t.data_dir, false, &t->te, err));
    if (t->te.rows != t->tr.rows || t->te.cols != t->tr.cols || t->te.classes > t->tr.classes)
        return rm_errf(err, RM_EINVAL, "data: test images %dx%d with %d classes, training images "
                       "%dx%d with %d", t->te.rows, t->te.cols, t->te.classes, t->tr.rows, t->tr.cols,
                       t->tr.classes);
    rm_info("data loaded train=%d test=%d seconds=%.2f dir=%s", t->tr.n, t->te.n,
            rm_mono() - t0, cfg->t.data_dir ? cfg->t.data_dir : RM_DATA_DEFAULT_DIR);

    rm_model_shape shape;
    const rm_model_family *fam;
    rm_model_data md = { .inputs = t->tr.rows * t->tr.cols, .classes = t->tr.classes };
    RM_CHECK(rm_model_shape_for(&cfg->t, &md, &fam, &shape, err));
    RM_CHECK(rm_model_init(&t->m, t->k, fam, &shape, t->B, err));
    RM_CHECK(rm_optim_init(&t->opt, t->k, &cfg->t.optimizer, t->m.nparams, err));
    rm_lr_sched_from_spec(&t->sched, &cfg->t);
    const char *sname = getenv(RM_ENV_STRATEGY);
    const char *par = getenv(RM_ENV_PARALLELISM);   /* pipeline stages  */
    if (par && *par && (!sname || !*sname || !strcmp(sname, "allreduce")))
        sname = "pipeline";
    t->strat = rm_step_strategy(sname && *sname ? sname : "allreduce");
    if (t->strat == &rm_step_ps_ops && cfg->t.optimizer.type == RM_OPT_LBFGS)
        t->strat = &rm_step_lbfgs_ops;   /* Sandblaster L-BFGS (docs/strategies.md#sandblaster-l-bfgs) */
    if (!t->strat)
        return rm_err_field(err, RM_EINVAL, RM_ENV_STRATEGY, "unknown strategy \"%s\" (%s)",
                            sname, rm_step_strategy_names());
    rm_step_env env = {.k = t->k, .m = &t->m, .opt = &t->opt, .amp = &t->amp,
                       .fusion_mb = cfg->t.fusion_buffer_mb, .sharding = cfg->t.sharding,
                       .token = cfg->token,
                       .timeout_s = cfg->comm_timeout_s, .train_samples = t->tr.n, .batch = t->B,
                       .epochs = cfg->t.epochs, .max_steps = cfg->t.max_steps,
                       .cancel = &g_train_term, .view = cfg->rdzv_url ? &t->rp.view : NULL};
    RM_CHECK(t->strat->init(&env, &t->st, err));
    t->perm = malloc((size_t)t->tr.n * sizeof *t->perm);
    t->stage_bytes = (size_t)(1 + t->opt.nstate) * t->m.nparams * sizeof(float);
    t->host_stage = rm_kernels_host_alloc(t->k, t->stage_bytes);
    t->dev_small = t->k->alloc(32 * sizeof(float));
    if (!t->k->host_memory) {
        t->host_x = rm_kernels_host_alloc(t->k, (size_t)t->B * t->m.x_row_bytes);
        t->host_labels = rm_kernels_host_alloc(t->k, (size_t)t->B * sizeof(int32_t));
    }
    if (!t->perm || !t->host_stage || !t->dev_small ||
        (!t->k->host_memory && (!t->host_x || !t->host_labels)))
        return rm_errf(err, RM_ENOMEM, "out of memory");

    if (cfg->rdzv_url) {
        RM_CHECK(rdzv_client_make(cfg, &t->rdzv, err));
        rm_rdzv_client_set_cancel(t->rdzv, &g_train_term);   /* SIGINT/SIGTERM end long polls */
        /* ring; or nccl with pipeline stages: their links' TCP handshake (worker/pipeline/pipe_link.h) */
        if (backend_is(cfg, RM_BACKEND_RING) ||
            (backend_is(cfg, RM_BACKEND_NCCL) && t->strat == &rm_step_pipeline_ops)) {
            int port = 0;
            RM_CHECK(rm_comm_listen(cfg->bind_addr, &t->listen_fd, &port, err));
            /* strangers on the ring port are handled from now on, not at the next formation */
            RM_CHECK(rm_ring_listener_start(t->listen_fd, 1, cfg->token, &t->ring_lst, err));
            t->listen_fd = -1;
            snprintf(t->my_addr, sizeof t->my_addr, "%s:%d", cfg->bind_addr, port);
        } else {
            snprintf(t->my_addr, sizeof t->my_addr, "%s:0", cfg->bind_addr);
        }
    }
    char sh[128];
    rm_model_shape_str(&t->m, sh, sizeof sh);
    rm_info("model ready type=%s shape=%s params=%zu optimizer=%s device=%s precision=%s",
            fam->name, sh, t->m.nparams, rm_optim_name(cfg->t.optimizer.type), t->k->name,
            rm_precision_str(cfg->t.precision));
    return RM_OK;
}

/* ---------------- state: fresh, checkpoint, sync ---------------- */

static void state_fresh(trainer *t, rm_err *err)
{
    t->strat->state_fresh(t->st, t->cfg->t.seed, err);
    t->step = 0;
    t->train_epoch = 0;
    t->data_pos = 0;
    t->eval_step = -1;
}

static void ckpt_expect(const trainer *t, rm_ckpt_meta *e)
{
    memset(e, 0, sizeof *e);
    e->shape = t->m.shape;
    e->opt_type = (int32_t)t->cfg->t.optimizer.type;
    e->nstate = t->opt.nstate;
    e->nparams = t->m.nparams;
}

static bool state_sharded(const trainer *t)
{
    return t->strat->state_sharded && t->strat->state_sharded(t->st);
}

/* Neither a whole checkpoint nor a set could be used: say why when some were skipped as invalid
 * (state_load, state_load_layers). */
static void warn_unusable(int skipped, int sskipped, const rm_err *e, const rm_err *se)
{
    if (skipped || sskipped)
        rm_warn("no usable checkpoint reason=\"%s%s%s\"", e->msg, sskipped ? "; " : "",
                sskipped ? se->msg : "");
}

/* The schedule position of a loaded checkpoint. A checkpoint is written after its step and before
 * that step's end-of-epoch evaluation (which runs at the top of the next iteration), so a restored
 * position has its evaluation still ahead of it — whatever this process remembers having
 * evaluated before the failure. */
static void take_position(trainer *t, const rm_ckpt_meta *meta)
{
    t->step = meta->step;
    t->train_epoch = meta->train_epoch;
    t->data_pos = meta->data_pos;
    t->last_ckpt_step = meta->step;
    t->eval_step = -1;
}

static int state_load_layers(trainer *t, int u0, int u1);

/* Every rank reads the newest valid checkpoint (if any): a whole one (ckpt-*.rmck) or a sharded
 * set (worker/checkpoint/ckpt_shard.h), whichever is newer; a sharded set is re-sharded for this round
 * (sharded strategy: this rank of this world; otherwise world 1, the whole payload). Every rank
 * sees the same files and verifies every shard, so all choose the same checkpoint. Returns 1 if
 * loaded, 0 if none. */
static int state_load(trainer *t)
{
    if (!t->cfg->checkpoint_dir || !t->strat->state_restore)
        return 0;   /* a strategy whose state lives elsewhere (the servers') loads nothing here */
    int u0, u1;
    if (t->strat->restore_layers && t->strat->restore_layers(t->st, &u0, &u1))
        return state_load_layers(t, u0, u1);
    rm_ckpt_meta exp, meta, smeta;
    ckpt_expect(t, &exp);
    char path[4200];
    int skipped = 0, sskipped = 0;
    rm_err e = {0}, se = {0};
    bool whole = rm_ckpt_load_newest(t->cfg->checkpoint_dir, &exp, &meta, t->host_stage,
                                     t->stage_bytes, path, sizeof path, &skipped, &e) == RM_OK;
    /* a newer sharded set replaces it (loaded aside: host_stage keeps the whole one until then) */
    bool sharded = state_sharded(t);
    int nw = sharded ? t->world : 1, nr = sharded ? t->rank : 0;
    rm_ckpt_units units = {t->m.nunits, t->m.unit_off, t->m.unit_len};
    size_t need = rm_ckpt_shard_dst_bytes(&units, t->opt.nstate, nw, nr);
    void *buf = need <= t->stage_bytes ? malloc(need ? need : 1) : NULL;
    char spath[4200];
    bool set = buf && rm_ckpt_shard_load_newest(t->cfg->checkpoint_dir, &exp, &units, nw, nr,
                                                whole ? meta.step : -1, buf, need, &smeta, spath,
                                                sizeof spath, &sskipped, &se) == RM_OK;
    if (set) {
        memcpy(t->host_stage, buf, need);
        meta = smeta;
        snprintf(path, sizeof path, "%s", spath);
    }
    free(buf);
    if (!whole && !set) {
        warn_unusable(skipped, sskipped, &e, &se);
        return 0;
    }
    if (set && sharded)
        t->strat->state_restore_shard(t->st, t->host_stage, meta.opt_t, meta.loss_scale,
                                      meta.scaler_tracker);
    else   /* a whole payload (a file, or a set re-sharded to world 1) */
        t->strat->state_restore(t->st, t->host_stage, meta.opt_t, meta.loss_scale,
                                meta.scaler_tracker);
    take_position(t, &meta);
    rm_info("checkpoint loaded path=%s step=%lld train_epoch=%d data_pos=%lld written_world=%d "
            "sharded=%s resharded_to=%d skipped_invalid=%d",
            path, (long long)meta.step, meta.train_epoch, (long long)meta.data_pos,
            meta.world_size, set ? "yes" : "no", set ? nw : 0, skipped + sskipped);
    return 1;
}

/* state_load for a rank that restores layers [u0, u1) only (worker/step.h restore_layers: a
 * pipeline stage): the same choice of checkpoint (a whole one or a set, whichever is newer; every
 * file verified in full), but only the range is kept, in host_stage's first bytes (the range's
 * size: the rest of host_stage is never touched, so the peak resident set stays the stage's). */
static int state_load_layers(trainer *t, int u0, int u1)
{
    rm_ckpt_meta exp, meta, smeta;
    ckpt_expect(t, &exp);
    rm_ckpt_units units = {t->m.nunits, t->m.unit_off, t->m.unit_len};
    size_t need = rm_ckpt_layers_bytes(&units, t->opt.nstate, u0, u1);
    if (need == 0 || need > t->stage_bytes) {
        rm_warn("checkpoint: cannot restore layers [%d, %d) of %d", u0, u1, units.n);
        return 0;
    }
    const char *dir = t->cfg->checkpoint_dir;
    char path[4200], spath[4200];
    int skipped = 0, sskipped = 0;
    rm_err e = {0}, se = {0};
    bool whole = rm_ckpt_whole_load_layers(dir, &exp, &units, u0, u1, t->host_stage, need, &meta,
                                           path, sizeof path, &skipped, &e) == RM_OK;
    /* a newer set replaces it (loaded aside while host_stage holds the whole file's range) */
    void *buf = whole ? malloc(need) : t->host_stage;
    bool set = buf && rm_ckpt_set_load_layers(dir, &exp, &units, u0, u1, whole ? meta.step : -1, buf,
                                              need, &smeta, spath, sizeof spath, &sskipped,
                                              &se) == RM_OK;
    if (set) {
        if (buf != t->host_stage)
            memcpy(t->host_stage, buf, need);
        meta = smeta;
        snprintf(path, sizeof path, "%s", spath);
    }
    if (buf != t->host_stage)
        free(buf);
    if (!whole && !set) {
        warn_unusable(skipped, sskipped, &e, &se);
        return 0;
    }
    t->strat->state_restore_layers(t->st, t->host_stage, meta.opt_t, meta.loss_scale,
                                   meta.scaler_tracker);
    take_position(t, &meta);
    rm_info("checkpoint loaded path=%s step=%lld train_epoch=%d data_pos=%lld written_world=%d "
            "sharded=%s layers=%d-%d bytes=%zu skipped_invalid=%d",
            path, (long long)meta.step, meta.train_epoch, (long long)meta.data_pos,
            meta.world_size, set ? "yes" : "no", u0, u1, need, skipped + sskipped);
    return 1;
}

/* Every rank takes rank 0's state and schedule position (the strategy's state_sync): step, data
 * cursor, last checkpoint and whether this step's end-of-epoch evaluation is done, so after a
 * round forms no rank acts on what it remembers from before (docs/architecture.md#failures-and-restarts: a survivor that skipped an
 * evaluation its replacement ran desynchronised the ring forever). */
static int state_sync(trainer *t, rm_err *err)
{
    rm_step_pos pos = {
        .step = t->step, .data_pos = t->data_pos, .last_ckpt_step = t->last_ckpt_step,
        .train_epoch = t->train_epoch, .eval_done = t->eval_step == t->step,
    };
    RM_CHECK(t->strat->state_sync(t->st, &pos, err));
    t->step = pos.step;
    t->data_pos = pos.data_pos;
    t->last_ckpt_step = pos.last_ckpt_step;
    t->train_epoch = pos.train_epoch;
    t->eval_step = pos.eval_done ? t->step : -1;
    return RM_OK;
}

/* ---------------- checkpoints, off the critical path ----------------
 * At a checkpoint step the training thread snapshots the strategy's state into host_stage (a
 * memcpy, or a device-to-host copy) with its metadata and hands it to the writer thread, which
 * does rm_ckpt_write's write + fsync + rename + prune while the next steps run. The training
 * thread waits only when the previous write has not finished by the next checkpoint, before a
 * round loads checkpoints (rank 0's newest write must be on disk first) and at exit (SIGTERM,
 * done). host_stage belongs to the writer from the hand-off until the result is collected. A
 * write counts (last_ckpt_step, reports, metrics) only once it is complete and renamed: nothing
 * is acknowledged before it is durable. */

static void *ckpt_writer_main(void *arg)
{
    ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->quit && !(w->busy && !atomic_load(&w->done)))
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit && !(w->busy && !atomic_load(&w->done)))
            break;
        rm_ckpt_meta meta = w->meta;
        rm_ckpt_seg seg = {w->buf, w->bytes};
        double wait_s = w->wait_s;
        bool stages = w->nstages > 0;   /* stage_bounds stay put until this write is collected */
        pthread_mutex_unlock(&w->mu);
        rm_err e = {0};
        char path[4200] = "";
        double t0 = rm_mono();
        /* sharded: this rank's shard, then the set completes (manifest) or the wait runs out */
        int rc = meta.shard_world && stages   /* pipeline stages: per-stage layers */
                     ? rm_ckpt_stage_write(w->dir, &meta, &w->units, w->stage_bounds, &seg, 1, w->keep,
                                           wait_s, path, sizeof path, &e)
                 : meta.shard_world
                     ? rm_ckpt_shard_write(w->dir, &meta, &w->units, &seg, 1, w->keep, wait_s, path,
                                           sizeof path, &e)
                     : rm_ckpt_write(w->dir, &meta, &seg, 1, w->keep, path, sizeof path, &e);
        double dt = rm_mono() - t0;
        pthread_mutex_lock(&w->mu);
        w->rc = rc;
        memcpy(w->err, e.msg, sizeof w->err);
        memcpy(w->path, path, sizeof w->path);
        w->seconds = dt;
        atomic_store(&w->done, true);
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int ckpt_writer_start(trainer *t, rm_err *err)
{
    ckpt_writer *w = &t->cw;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    atomic_init(&w->done, false);
    w->inited = true;
    w->dir = t->cfg->checkpoint_dir;
    w->keep = t->cfg->checkpoint_keep;
    w->units = (rm_ckpt_units){t->m.nunits, t->m.unit_off, t->m.unit_len};
    if (pthread_create(&w->th, NULL, ckpt_writer_main, w) != 0)
        return rm_errf(err, RM_ERR, "checkpoint writer thread: cannot start");
    w->started = true;
    return RM_OK;
}

/* Apply a finished write's result on the training thread. wait: block until the write in
 * flight (if any) is done. Returns the write's result, RM_OK when there was none. */
static int ckpt_collect(trainer *t, bool wait)
{
    ckpt_writer *w = &t->cw;
    if (!w->started || !w->busy || (!wait && !atomic_load(&w->done)))
        return RM_OK;
    double t0 = rm_mono();
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->done))
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->rc;
    int64_t step = w->meta.step;
    double dt = w->seconds, blocked = w->blocked;
    char path[sizeof w->path], emsg[sizeof w->err];
    memcpy(path, w->path, sizeof path);
    memcpy(emsg, w->err, sizeof emsg);
    w->busy = false;
    atomic_store(&w->done, false);
    pthread_mutex_unlock(&w->mu);
    double waited = rm_mono() - t0;
    if (waited > 0.001)
        rm_debug("waited for the checkpoint writer seconds=%.3f", waited);
    if (rc) {
        t->ckpt_failures++;
        rm_sfmt(t->ckpt_err, sizeof t->ckpt_err, "%s", emsg);
        rm_error("checkpoint write failed step=%lld consecutive_failures=%d err=\"%s\"",
                 (long long)step, t->ckpt_failures, emsg);
        return rc;
    }
    t->ckpt_failures = 0;
    t->ckpt_err[0] = 0;
    if (step > t->last_ckpt_step)
        t->last_ckpt_step = step;
    rm_series_observe(t->wm.ckpt_seconds, dt);
    rm_series_set(t->wm.last_ckpt, (double)t->last_ckpt_step);
    rm_info("checkpoint written path=%s step=%lld seconds=%.3f blocked_seconds=%.4f", path,
            (long long)step, dt, blocked);
    return RM_OK;
}

static void ckpt_writer_stop(trainer *t)
{
    ckpt_writer *w = &t->cw;
    if (w->started) {
        ckpt_collect(t, true);
        pthread_mutex_lock(&w->mu);
        w->quit = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
        w->started = false;
    }
    if (w->inited) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        w->inited = false;
    }
}

/* Snapshot the state at this step boundary and hand it to the writer (rank 0 under allreduce:
 * the strategy says who writes). Waits only for a previous write still in flight. */
static int ckpt_write(trainer *t, rm_err *err)
{
    size_t bytes = t->strat->state_bytes ? t->strat->state_bytes(t->st, t->rank) : 0;
    if (!t->cfg->checkpoint_dir || !t->have_state || bytes == 0 || t->step == t->last_ckpt_step)
        return RM_OK;
    ckpt_writer *w = &t->cw;
    if (w->busy && w->meta.step == t->step)
        return RM_OK;   /* this step's state is already on its way */
    double t0 = rm_mono();
    ckpt_collect(t, true);
    if (t->step == t->last_ckpt_step)
        return RM_OK;
    if (bytes > t->stage_bytes)
        return rm_errf(err, RM_EINVAL, "checkpoint: strategy state %zu bytes, staging %zu", bytes,
                       t->stage_bytes);
    rm_ckpt_meta meta;
    ckpt_expect(t, &meta);
    meta.step = t->step;
    meta.train_epoch = t->train_epoch;
    meta.data_pos = t->data_pos;
    meta.world_size = t->world;
    meta.batch_per_worker = t->B;
    meta.rdzv_epoch = t->rdzv_epoch;
    meta.seed = t->cfg->t.seed;
    meta.opt_t = t->opt.t;
    meta.epoch_pos = t->train_epoch + (double)t->data_pos / t->tr.n;
    meta.lr = t->lr;
    meta.loss_scale = t->amp.scaler.scale;
    meta.scaler_tracker = t->amp.scaler.growth_tracker;
    if (state_sharded(t)) {   /* one shard per rank (worker/checkpoint/ckpt_shard.h) */
        meta.shard_world = t->world;
        meta.shard_rank = t->rank;
        meta.shard_floats = bytes / ((size_t)(1 + t->opt.nstate) * sizeof(float));
    }
    /* pipeline stages: this stage's layers as one shard of a stage-layout set (the writer is idle
     * here: collected above, so its units may change) */
    int sr = 0, sw = 0;
    w->nstages = 0;
    if (!meta.shard_world && t->strat->ckpt_stages &&
        t->strat->ckpt_stages(t->st, &sr, &sw, w->stage_bounds)) {
        meta.shard_world = sw;
        meta.shard_rank = sr;
        meta.shard_floats = bytes / ((size_t)(1 + t->opt.nstate) * sizeof(float));
        w->nstages = sw;
    }
    /* after a device fault the reads fail: never write that as a checkpoint */
    RM_CHECK(t->strat->state_save(t->st, t->host_stage, err));
    pthread_mutex_lock(&w->mu);
    /* the other ranks' shards come within moments at an interval or the end; at SIGTERM the
     * grace period is short and a peer may have stopped a step apart */
    w->wait_s = g_train_term ? 10 : 60;
    w->blocked = rm_mono() - t0;
    w->meta = meta;
    w->buf = t->host_stage;
    w->bytes = bytes;
    w->busy = true;
    atomic_store(&w->done, false);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return RM_OK;
}

/* ringmaster_worker_memory_bytes{kind} from the strategy, and the peak RSS; with log set, also a
 * "memory" log line (the end of training: bench/shard reads it). */
static void report_memory(trainer *t, bool log)
{
    rm_step_memory mem = {0};
    if (t->strat->memory)
        t->strat->memory(t->st, &mem);
    struct rusage ru;
    double rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0;
    t->mem = mem;
    t->peak_rss = rss;
    rm_err e = {0};
    if (rm_wmetrics_set_memory(&t->wm, (double)mem.params, (double)mem.grads, (double)mem.optimizer,
                               (double)mem.activations, rss, &e) != RM_OK)
        rm_warn("memory gauges: %s", e.msg);
    if (log) {
        /* the resident set now, besides the high-water mark: start-up touches every buffer whole
         * (the parameters are initialised whole), so sharding shows in the current RSS */
        long pages = 0, res = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f) {
            if (fscanf(f, "%ld %ld", &pages, &res) != 2)
                res = 0;
            fclose(f);
        }
        rm_info("memory sharding=%s params_bytes=%llu grads_bytes=%llu optimizer_bytes=%llu "
                "activations_bytes=%llu peak_rss_bytes=%.0f rss_bytes=%.0f",
                rm_sharding_names[t->cfg->t.sharding], (unsigned long long)mem.params,
                (unsigned long long)mem.grads, (unsigned long long)mem.optimizer,
                (unsigned long long)mem.activations, rss, (double)res * (double)sysconf(_SC_PAGESIZE));
    }
}

/* Sharded stages spread the state over the ranks: before a checkpoint every rank assembles the
 * whole payload in host_stage (a collective, so only where all ranks are at the same step: the
 * interval and the end, never SIGTERM). The previous write is finished first: it owns host_stage. */
static int ckpt_gather(trainer *t, rm_err *err)
{
    /* the same decision on every rank (last_ckpt_step is rank 0's writer's business) */
    if (!t->strat->state_gather || !t->cfg->checkpoint_dir || !t->have_state ||
        t->step == t->gather_step)
        return RM_OK;
    ckpt_collect(t, true);
    RM_CHECK(t->strat->state_gather(t->st, t->host_stage, err));
    t->gather_step = t->step;
    return RM_OK;
}

/* Write this step's checkpoint and wait until it is on disk (exit paths). */
static int ckpt_write_sync(trainer *t, rm_err *err)
{
    RM_CHECK(ckpt_write(t, err));
    int rc = ckpt_collect(t, true);
    if (rc)
        rm_sfmt(err->msg, sizeof err->msg, "%s", t->ckpt_err);
    return rc;
}

/* ---------------- rounds ---------------- */

static void round_teardown(trainer *t)
{
    if (t->strat)
        t->strat->round_end(t->st);
    if (t->comm) {
        t->ops->destroy(t->comm);
        t->comm = NULL;
    }
}

/* The shm backend instead of the ring: every rank advertised the same host, and RINGMASTER_SHM
 * allows it (unset: yes outside Kubernetes, no inside a pod, where ranks sharing a node also need
 * the node's IPC namespace; see common/worker_env.h). */
static bool shm_allowed(void)
{
    const char *e = getenv(RM_ENV_SHM);
    if (e && !strcmp(e, "0"))
        return false;
    if (!(e && !strcmp(e, "1")) && getenv("KUBERNETES_SERVICE_HOST"))
        return false;
    return true;
}

static bool shm_wanted(const rm_rdzv_peer *peers, int world)
{
    if (!shm_allowed())
        return false;
    if (!peers || world < 2)
        return false;
    const char *c0 = strrchr(peers[0].addr, ':');
    if (!c0)
        return false;
    size_t hl = (size_t)(c0 - peers[0].addr);
    for (int q = 1; q < world; q++) {
        const char *cq = strrchr(peers[q].addr, ':');
        if (!cq || (size_t)(cq - peers[q].addr) != hl || memcmp(peers[q].addr, peers[0].addr, hl))
            return false;
    }
    return true;
}

/* Join (or go alone), init the comm, restore state. R_STOP/R_TERM or a negative error. */
static int round_setup(trainer *t, bool first, rm_err *err)
{
    const rm_train_cfg *cfg = t->cfg;
    rm_rdzv_round rr = {0};
    bool mpi = backend_is(cfg, RM_BACKEND_MPI);
    const char *be = cfg->backend_local ? "local" : rm_backend_name(cfg_backend(cfg));
    rm_health_set_ready(t->wm.health, false, "joining");
    rm_rdzv_peer *static_peers = NULL;
    if (cfg->static_peers) {
        int n = 0;
        RM_CHECK(rm_comm_parse_peers(cfg->static_peers, &static_peers, &n, err));
        if (cfg->static_rank >= n) {
            free(static_peers);
            return rm_errf(err, RM_EINVAL, "--rank %d but --peers lists %d workers",
                           cfg->static_rank, n);
        }
        rr.peers = static_peers;
        rr.world_size = n;
        t->rank = cfg->static_rank;
        t->world = n;
        t->rdzv_epoch = 1;
    } else if (t->rdzv && !mpi) {
        int last = first ? 0 : t->rdzv_epoch;
        double started = rm_mono(), deadline = started + 900, next_note = started + 60;
        for (;;) {
            rm_health_beat(t->wm.health);   /* waiting for peers is not a hang */
            if (g_train_term)
                return R_TERM;
            rm_err e = {0};
            /* slices shorter than the progress deadline: waiting for peers is not a hang */
            double slice = cfg->progress_deadline_s > 0 ? cfg->progress_deadline_s / 2 : 15;
            slice = slice > 15 ? 15 : slice < 0.5 ? 0.5 : slice;
            int rc = rm_rdzv_join(t->rdzv, t->my_addr, last, slice, &rr, &e);
            if (rc == RM_OK)
                break;
            if (rc == RM_ECANCELED || g_train_term)
                return R_TERM;
            if (rc == RM_ECLOSED) {
                rm_info("rendezvous says stop");
                return R_STOP;
            }
            if (rc == RM_EAUTH)
                return rm_errf(err, rc, "rendezvous join: %s", e.msg);
            if (rm_mono() > deadline) {
                t->join_gave_up = true;
                return rm_errf(err, RM_ETIMEDOUT, "rendezvous join: no round within 900 s (%s)",
                               e.msg);
            }
            if (rc != RM_ETIMEDOUT) {
                rm_warn("rendezvous join failed, retrying err=\"%s\"", e.msg);
                sleep(1);
            } else if (rm_mono() >= next_note) {   /* a long silent wait looks like a hang */
                next_note = rm_mono() + 60;
                rm_warn("still waiting for a rendezvous round waited_s=%.0f gives_up_after_s=900 "
                        "last=\"%s\"", rm_mono() - started, e.msg);
            }
        }
        t->rank = rr.rank;
        t->world = rr.world_size;
        t->rdzv_epoch = rr.epoch;
    } else if (mpi) {
        const char *r = getenv("OMPI_COMM_WORLD_RANK"), *n = getenv("OMPI_COMM_WORLD_SIZE");
        t->rank = r ? atoi(r) : 0;
        t->world = n ? atoi(n) : 1;
        t->rdzv_epoch = 1;
    } else {
        t->rank = 0;
        t->world = 1;
        t->rdzv_epoch = 1;
        be = "local";
    }
    /* a configuration error no re-formation can heal: fail now rather than re-form forever */
    int64_t G = (int64_t)t->B * t->world;
    if (rm_data_steps_per_epoch(t->tr.n, (int)(G < INT32_MAX ? G : INT32_MAX)) < 1) {
        rm_rdzv_round_free(&rr);
        return rm_err_field(err, RM_EINVAL, "spec.training.batchSizePerWorker",
                            "global batch %lld (batchSizePerWorker %d x %d workers) exceeds the "
                            "training set (%d samples): an epoch would have 0 steps",
                            (long long)G, t->B, t->world, t->tr.n);
    }
    if ((t->world == 1 || t->strat->claim) && !mpi)
        be = "local";   /* a world of one, or workers that never talk to each other (servers) */
    /* where the ranks sit (docs/strategies.md#topology): the rendezvous hands every rank each peer's node */
    rm_rdzv_topo topo = {.nnodes = 1, .local_world = 1, .uniform = true};
    if (rr.peers && t->world > 1 && rm_rdzv_topology(rr.peers, t->world, t->rank, &topo) != RM_OK)
        topo = (rm_rdzv_topo){.nnodes = 1, .local_world = 1, .uniform = true};
    snprintf(t->node, sizeof t->node, "%s", rr.peers && t->rank < t->world ? rr.peers[t->rank].node : "");
    t->local_rank = topo.local_rank;
    t->local_world = topo.local_world;
    t->nnodes = topo.nnodes;
    /* spec.training.allreduce: hierarchical always takes the "hier" backend (which runs flat when
     * the topology does not allow it); auto only when it runs hierarchically */
    if (!strcmp(be, "ring") && rr.peers && t->world > 1 &&
        (cfg->t.allreduce == RM_AR_HIER ||
         (cfg->t.allreduce == RM_AR_AUTO && topo.nnodes > 1 && topo.local_world > 1 && topo.uniform)))
        be = "hier";
    else if (!strcmp(be, "ring") && shm_wanted(rr.peers, t->world))
        be = "shm";     /* every rank on this host: shared memory instead of loopback TCP */
    t->ops = rm_comm_backend(be);
    if (!t->ops) {
        rm_rdzv_round_free(&rr);
        return rm_errf(err, RM_EUNSUPPORTED, "comm backend %s: not available in this build", be);
    }
    char fields[128];
    snprintf(fields, sizeof fields, "rank=%d", t->rank);
    rm_log_set_fields(fields);
    rm_comm_cfg cc = {
        .rank = t->strat->claim ? 0 : t->rank, .world_size = t->strat->claim ? 1 : t->world,
        .epoch = t->rdzv_epoch, .peers = rr.peers,
        .token = cfg->token, .listener = t->ring_lst, .listen_fd = t->listen_fd, .timeout_s = cfg->comm_timeout_s,
        .rdzv = t->rdzv, .device = t->gpu, .shm_ok = shm_allowed(),
    };
    int rc = t->ops->init(&cc, &t->comm, err);
    if (rc) {
        rm_rdzv_round_free(&rr);
        return rc;
    }
    if ((rc = rm_wmetrics_set_rank(&t->wm, t->rank, err))) {
        rm_rdzv_round_free(&rr);
        return rc;
    }
    rm_series_set(t->wm.epoch, t->rdzv_epoch);
    rm_series_set(t->wm.world, t->world);
    rm_info("round ready epoch=%d world=%d backend=%s", t->rdzv_epoch, t->world, t->ops->name);
    rm_info("topology nodes=%d node=%s local_rank=%d local_world_size=%d allreduce=\"%s\"", t->nnodes,
            t->node[0] ? t->node : "\"\"", t->local_rank, t->local_world,
            t->ops == rm_comm_hier_ops() ? rm_comm_hier_desc(t->comm) : t->ops->name);
    t->gather_step = -1;   /* a sharded gather is per round: every rank starts without one */
    /* peers and the listener: for strategies that form sub-groups (pipeline), round_begin only */
    rm_step_round sr = {.ops = t->ops, .comm = t->comm, .rank = t->rank, .world = t->world,
                        .peers = rr.peers, .listener = t->ring_lst, .epoch = t->rdzv_epoch};
    rc = t->strat->round_begin(t->st, &sr, err);
    rm_rdzv_round_free(&rr);
    if (rc)
        return rc;

    /* state: newest checkpoint, else fresh; then everyone takes rank 0's. A write still in
     * flight finishes first: it may be the newest checkpoint, and it owns host_stage. */
    ckpt_collect(t, true);
    if (!state_load(t)) {
        if (first || t->cfg->checkpoint_dir)
            state_fresh(t, err);
        /* else: no checkpoints configured; rank 0's in-memory state is broadcast below */
    }
    RM_CHECK(state_sync(t, err));
    t->have_state = true;
    report_memory(t, false);
    rm_series_set(t->wm.last_ckpt, (double)(t->last_ckpt_step > 0 ? t->last_ckpt_step : 0));
    rm_health_set_ready(t->wm.health, true, NULL);
    rm_health_beat(t->wm.health);
    return RM_OK;
}

/* ---------------- evaluation (sharded over ranks, reduced) ---------------- */

/* A device copy's status: on failure the table's first pending error (a CUDA/cuBLAS call or a
 * device fault since the last check) says more than the copy, so it is the one reported; the round
 * fails either way, as it does when state_save's d2h fails. */
static int dev_copy(trainer *t, int rc, const char *what, rm_err *err);

static int read_loss(trainer *t, rm_err *err);

static int evaluate(trainer *t, rm_err *err)
{
    if (t->strat->materialize)   /* sharding full: every layer whole for the forward passes */
        RM_CHECK(t->strat->materialize(t->st, err));
    if (t->step > 0)
        RM_CHECK(read_loss(t, err));   /* the last step's; evaluation reuses the loss scalar */
    /* workers that do not move together (claim) evaluate alone, on the whole test set */
    int eworld = t->strat->claim ? 1 : t->world, erank = t->strat->claim ? 0 : t->rank;
    bool piped = t->strat->eval_forward != NULL;   /* a pipeline: a replica's stages share a slice */
    if (piped)
        data_slot(t, &erank, &eworld);
    int n = t->te.n, per = (n + eworld - 1) / eworld;
    int start = erank * per, end = start + per < n ? start + per : n;
    double correct = 0, loss = 0;
    for (int s = start; s < end; s += t->B) {
        int rows = end - s < t->B ? end - s : t->B;
        if (t->k->host_memory) {
            rm_data_slice(&t->te, s, rows, t->m.x, t->m.labels);
        } else {
            rm_data_slice(&t->te, s, rows, t->host_x, t->host_labels);
            RM_CHECK(dev_copy(t, t->k->h2d(t->m.x, t->host_x, (size_t)rows * t->m.x_row_bytes),
                              "evaluation batch", err));
            RM_CHECK(dev_copy(t, t->k->h2d(t->m.labels, t->host_labels, (size_t)rows * sizeof(int32_t)),
                              "evaluation labels", err));
        }
        bool have_logits = true;
        if (piped)
            RM_CHECK(t->strat->eval_forward(t->st, rows, &have_logits, err));
        else
            rm_model_forward(&t->m, rows);
        if (!have_logits)
            continue;
        rm_model_count_correct(&t->m, rows);
        /* loss only (its gradient lands in the output buffer, unused) */
        rm_model_loss(&t->m, 0, rows, 1.0f, t->m.loss_sum);
        int32_t c = 0;
        float ls = 0;
        RM_CHECK(dev_copy(t, t->k->d2h(&c, t->m.correct, sizeof c), "evaluation count", err));
        RM_CHECK(dev_copy(t, t->k->d2h(&ls, t->m.loss_sum, sizeof ls), "evaluation loss", err));
        correct += c;
        loss += ls;
    }
    if (eworld > 1 || (piped && t->world > 1)) {
        float v[4] = {(float)correct, (float)(end > start ? end - start : 0), (float)loss, 0};
        RM_CHECK(dev_copy(t, t->k->h2d(t->dev_small, v, sizeof v), "evaluation sums", err));
        RM_CHECK(t->ops->allreduce(t->comm, t->dev_small, 4, RM_DT_F32, RM_OP_SUM, err));
        RM_CHECK(dev_copy(t, t->k->d2h(v, t->dev_small, sizeof v), "evaluation sums", err));
        correct = v[0];
        loss = v[2];
    }
    t->test_acc = correct / n;
    t->eval_step = t->step;
    /* per-epoch numbers for the controller (a sweep's early stopping): the epoch just finished */
    rm_rdzv_eval_add(t->evals, &t->nevals, t->train_epoch + 1, t->test_acc, t->train_loss);
    t->test_loss = loss / n;
    rm_series_set(t->wm.test_acc, t->test_acc);
    rm_info("evaluation train_epoch=%d step=%lld test_accuracy=%.4f test_loss=%.4f",
            t->train_epoch, (long long)t->step, t->test_acc, t->test_loss);
    return RM_OK;
}

/* ---------------- reporting ---------------- */

/* One polling join of the group being re-formed in the background (reporter.detached): the
 * round closed -> hand it to the training thread; still open and settled -> the joiners are the
 * workers alive (what parameter servers proceed with). Reporter thread, outside mu. */
static void regroup_poll(reporter *r)
{
    int from = atomic_load(&r->regroup_from);
    if (from <= 0)
        return;
    rm_rdzv_round rr;
    int joined = 0;
    bool settled = false;
    rm_err e = {0};
    int rc = rm_rdzv_join_poll(r->client, r->my_addr, from, 0, &rr, &joined, &settled, &e);
    if ((rc == RM_OK || rc == RM_EAGAIN) && rr.epoch > from)
        atomic_store(&r->joining_epoch, rr.epoch);
    if (rc == RM_OK) {
        atomic_store(&r->new_rank, rr.rank);
        atomic_store(&r->new_world, rr.world_size);
        atomic_store(&r->new_epoch, rr.epoch);
        atomic_store(&r->view, RM_STEP_VIEW(rr.epoch, rr.world_size));
        atomic_store(&r->regroup_from, 0);
        rm_info("group re-formed in the background epoch=%d world=%d rank=%d", rr.epoch,
                rr.world_size, rr.rank);
        rm_rdzv_round_free(&rr);
    } else if (rc == RM_EAGAIN) {
        long long v = atomic_load(&r->view);
        if (settled && joined > 0 && rr.epoch > 0 &&
            v != RM_STEP_VIEW(rr.epoch, joined)) {
            atomic_store(&r->view, RM_STEP_VIEW(rr.epoch, joined));
            rm_info("the workers alive settled while the group re-forms epoch=%d live=%d",
                    rr.epoch, joined);
        }
    } else if (rc == RM_ECLOSED) {
        atomic_store(&r->action_epoch, from);
        atomic_store(&r->action, R_STOP);
    } else {
        rm_warn("background re-join failed, retrying err=\"%s\"", e.msg);
    }
}

static void *reporter_main(void *arg)
{
    reporter *r = arg;
    double last_t = 0;
    int64_t last_samples = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->quit) {
        /* re-joining: poll four times a second */
        struct timespec ts = rm_mono_ts_in(atomic_load(&r->regroup_from) > 0 ? 0.25 : 1.0);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->quit)
            break;
        if (!r->active)
            continue;
        double now = rm_mono();
        if (last_t > 0 && now > last_t && r->samples >= last_samples)
            r->last_rate = (double)(r->samples - last_samples) / (now - last_t);
        last_t = now;
        last_samples = r->samples;
        rm_rdzv_report rep = r->snap;
        rep.samples_per_second = r->last_rate;
        char ckpt_err[sizeof r->ckpt_err];   /* the report is sent after the unlock */
        memcpy(ckpt_err, r->ckpt_err, sizeof ckpt_err);
        rep.checkpoint_error = ckpt_err;
        pthread_mutex_unlock(&r->mu);

        if (!r->client) {   /* alone: only the samples/s figure */
            pthread_mutex_lock(&r->mu);
            continue;
        }
        if (atomic_load(&r->regroup_from) > 0)
            regroup_poll(r);
        if (r->detached) {   /* report the round joined in the background, not the one left */
            int je = atomic_load(&r->joining_epoch), ne = atomic_load(&r->new_epoch);
            if (ne > rep.epoch) {
                rep.epoch = ne;
                rep.rank = atomic_load(&r->new_rank);
            } else if (atomic_load(&r->regroup_from) > 0 && je > rep.epoch) {
                rep.epoch = je;
            }
        }
        rm_rdzv_action act = RM_RDZV_CONTINUE;
        int cur = 0;
        rm_err e = {0};
        int rc = rm_rdzv_send_report(r->client, &rep, &act, &cur, &e);
        if (rc == RM_ECLOSED)
            act = RM_RDZV_STOP;
        else if (rc)
            rm_warn("report failed err=\"%s\"", e.msg);
        if (rc == RM_OK || rc == RM_ECLOSED) {
            if (act == RM_RDZV_REJOIN && r->detached) {
                if (atomic_load(&r->regroup_from) == 0) {
                    rm_info("rendezvous moved on; re-joining in the background, training goes on "
                            "epoch=%d current=%d", rep.epoch, cur);
                    atomic_store(&r->regroup_from, rep.epoch);
                    regroup_poll(r);
                }
            } else if (act == RM_RDZV_STOP || act == RM_RDZV_REJOIN) {
                if (act == RM_RDZV_REJOIN)
                    rm_info("rendezvous moved on; rejoining epoch=%d current=%d", rep.epoch, cur);
                atomic_store(&r->action_epoch, rep.epoch);
                atomic_store(&r->action, act == RM_RDZV_STOP ? R_STOP : R_REJOIN);
            }
        }
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static int reporter_start(trainer *t, rm_err *err)
{
    reporter *r = &t->rp;
    pthread_mutex_init(&r->mu, NULL);
    rm_mono_cond_init(&r->cv);
    r->inited = true;
    /* workers that never talk to each other re-form in the background (see reporter) */
    r->detached = t->strat->claim && t->cfg->rdzv_url && !t->cfg->static_peers &&
                  !backend_is(t->cfg, RM_BACKEND_MPI);
    r->my_addr = t->my_addr;
    if (t->cfg->rdzv_url)
        RM_CHECK(rdzv_client_make(t->cfg, &r->client, err));
    if (pthread_create(&r->th, NULL, reporter_main, r) != 0)
        return rm_errf(err, RM_ERR, "reporter thread: cannot start");
    r->started = true;
    return RM_OK;
}

static void reporter_stop(trainer *t)
{
    reporter *r = &t->rp;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->quit = true;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        r->started = false;
    }
    rm_rdzv_client_free(r->client);
    r->client = NULL;
    if (r->inited) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        r->inited = false;
    }
}

/* Publish the training state (every step; no allocation). */
static void reporter_publish(trainer *t, bool active)
{
    reporter *r = &t->rp;
    pthread_mutex_lock(&r->mu);
    r->active = active;
    r->snap.epoch = t->rdzv_epoch;
    r->snap.rank = t->rank;
    r->snap.train_epoch = t->train_epoch;
    r->snap.step = t->step;
    r->snap.last_checkpoint_step = t->last_ckpt_step > 0 ? t->last_ckpt_step : 0;
    r->snap.loss = t->train_loss;
    r->snap.allreduce_gbps = t->ar_gbps;
    r->snap.checkpoint_failures = t->ckpt_failures;
    if (r->snap.nevals != t->nevals || (t->nevals > 0 &&
        r->snap.evals[t->nevals - 1].epoch != t->evals[t->nevals - 1].epoch)) {
        memcpy(r->snap.evals, t->evals, (size_t)t->nevals * sizeof t->evals[0]);
        r->snap.nevals = t->nevals;   /* copied only when it changed: publish runs every step */
    }
    if (strcmp(r->ckpt_err, t->ckpt_err) != 0)
        memcpy(r->ckpt_err, t->ckpt_err, sizeof r->ckpt_err);
    r->samples = t->samples_local;
    t->rate = r->last_rate;
    pthread_mutex_unlock(&r->mu);
    rm_series_set(t->wm.samples_per_s, t->rate);   /* this thread re-labels: current rank's series */
}

/* Report now rather than within the next second: a round's first report is how the controller
 * knows the group trains again (recovery time), and a short round must not go unreported. */
static void reporter_kick(trainer *t)
{
    reporter *r = &t->rp;
    if (!r->inited)
        return;
    pthread_mutex_lock(&r->mu);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* What the reporter heard for the current round: 0, R_REJOIN or R_STOP. */
static int reporter_action(trainer *t)
{
    int a = atomic_load(&t->rp.action);
    if (a == R_STOP)
        return R_STOP;
    if (a == R_REJOIN && atomic_load(&t->rp.action_epoch) == t->rdzv_epoch)
        return R_REJOIN;
    return 0;
}

/* Synchronous report from the training thread: used for the final "done" (with the result). */
static int report(trainer *t, bool done)
{
    if (!t->rdzv)
        return 0;   /* continue */
    rm_rdzv_report rep = {
        .epoch = t->rdzv_epoch, .rank = t->rank, .train_epoch = t->train_epoch, .step = t->step,
        .last_checkpoint_step = t->last_ckpt_step > 0 ? t->last_ckpt_step : 0,
        .loss = t->train_loss, .samples_per_second = t->rate, .allreduce_gbps = t->ar_gbps,
        .done = done, .checkpoint_failures = t->ckpt_failures, .checkpoint_error = t->ckpt_err,
        .mem_params = (double)t->mem.params, .mem_grads = (double)t->mem.grads,
        .mem_optimizer = (double)t->mem.optimizer, .mem_activations = (double)t->mem.activations,
        .peak_rss = t->peak_rss,
    };
    memcpy(rep.evals, t->evals, (size_t)t->nevals * sizeof t->evals[0]);
    rep.nevals = t->nevals;
    if (done) {
        int rslot, rslots;   /* the group's samples: each data-parallel slice once */
        data_slot(t, &rslot, &rslots);
        rep.have_result = true;
        rep.test_accuracy = t->test_acc;
        rep.train_loss = t->train_loss;
        rep.seconds = t->train_seconds;
        rep.result_samples_per_second =
            t->train_seconds > 0 ? (double)t->samples_local * rslots / t->train_seconds : 0;
        rep.result_steps = t->step;
    }
    rm_rdzv_action act = RM_RDZV_CONTINUE;
    int cur = 0;
    rm_err e = {0};
    int rc = rm_rdzv_send_report(t->rdzv, &rep, &act, &cur, &e);
    if (rc == RM_ECLOSED)
        return R_STOP;
    if (rc) {
        rm_warn("report failed err=\"%s\"", e.msg);
        return 0;
    }
    if (act == RM_RDZV_STOP)
        return R_STOP;
    if (act == RM_RDZV_REJOIN && !done) {
        rm_info("rendezvous moved on; rejoining epoch=%d current=%d", t->rdzv_epoch, cur);
        return R_REJOIN;
    }
    return 0;
}

/* ---------------- the step loop ---------------- */

static void fire_fault(trainer *t, const rm_fault *f)
{
    rm_warn("fault injected kind=%s rank=%d step=%lld", rm_fault_kind_name(f->kind), t->rank,
            (long long)t->step);
    if (f->kind == RM_FAULT_EXIT && f->lost &&
        rm_faults_mark_lost(t->cfg->checkpoint_dir, t->cfg->worker_id) != 0)
        rm_warn("fault node=lost: cannot mark worker %s lost", t->cfg->worker_id);
    if (f->kind == RM_FAULT_EXIT)
        _exit(137);
    reporter_publish(t, false);   /* a hung worker sends no reports */
    for (;;) {   /* hang: no steps, no reports, no beats; only SIGTERM/SIGKILL end it */
        if (g_train_term)
            _exit(143);
        sleep(1);
    }
}

/* The `slow` fault (a straggler): this step takes factor times its compute time. */
static void straggle(trainer *t, double compute_s)
{
    double f = rm_faults_slow(&t->faults, t->rank, t->step);
    if (f > 1 && compute_s > 0) {
        double d = (f - 1) * compute_s;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* One step on this rank's shard: the driver gathers the batch and sets the LR from the schedule
 * position; the strategy does the rest. Negative on a collective failure. */
static int step_once(trainer *t, rm_err *err)
{
    int slot, nslots;
    data_slot(t, &slot, &nslots);
    int G = t->B * nslots;
    if (t->perm_epoch != t->train_epoch) {
        rm_perm_make(t->perm, t->tr.n, t->cfg->t.seed, t->train_epoch);
        t->perm_epoch = t->train_epoch;
    }
    if (t->k->host_memory) {
        rm_data_gather(&t->tr, t->perm, t->data_pos, slot, nslots, t->B, t->m.x,
                       t->m.labels);
    } else {
        rm_data_gather(&t->tr, t->perm, t->data_pos, slot, nslots, t->B, t->host_x,
                       t->host_labels);
        t->k->h2d(t->m.x, t->host_x, (size_t)t->B * t->m.x_row_bytes);
        t->k->h2d(t->m.labels, t->host_labels, (size_t)t->B * sizeof(int32_t));
    }
    double epos = t->train_epoch + (double)t->data_pos / t->tr.n;
    t->lr = rm_lr_at(&t->sched, epos, G);
    rm_step_stats st;
    double t0 = rm_mono();
    RM_CHECK(t->strat->step(t->st, t->B, (float)t->lr, &st, err));
    straggle(t, st.compute_s > 0 ? st.compute_s : rm_mono() - t0 - st.allreduce_s);
    if (st.comm) {
        rm_series_observe(t->wm.ar_seconds, st.allreduce_s);
        rm_series_inc(t->wm.ar_bytes, (double)st.bytes);
        t->ar_gbps = st.busbw_gbps;
    }
    if (st.pipe)
        rm_wmetrics_set_pipeline(&t->wm, st.pipe_stage, st.pipe_bubble, (double)st.pipe_sent,
                                 (double)st.pipe_recv);
    t->step++;
    t->data_pos += G;
    t->samples_local += t->B;
    return RM_OK;
}

static int dev_copy(trainer *t, int rc, const char *what, rm_err *err)
{
    if (rc == RM_OK)
        return RM_OK;
    rm_err detail = {0};
    if (t->k->check && t->k->check(&detail) != RM_OK)
        return rm_errf(err, rc, "copying the %s to or from the device failed: %s", what, detail.msg);
    return rm_errf(err, rc, "copying the %s to or from the device failed", what);
}

/* The last step's mean loss into t->train_loss; an error (the d2h failed: a device fault) fails the
 * round instead of reporting a NaN loss. */
static int read_loss(trainer *t, rm_err *err)
{
    float ls = 0;
    RM_CHECK(dev_copy(t, t->k->d2h(&ls, t->m.loss_sum, sizeof ls), "training loss", err));
    t->train_loss = ls / t->B;
    return RM_OK;
}

/* The tail every step loop shares (run_round, run_round_claimed): after a step, its metrics and
 * the recovery it ends; then, about once a second, the loss and memory; the report to the
 * controller and its answer; the progress line every log_every steps. */
typedef struct step_log {
    double t;              /* when the last progress line was logged */
    int64_t samples;       /* samples_local then */
} step_log;

static step_log step_log_start(trainer *t)
{
    t->log_step = t->step;
    return (step_log){rm_mono(), t->samples_local};
}

static void step_note(trainer *t)
{
    if (t->fail_t > 0) {   /* the first step after a failure: recovery ends here */
        double rec = rm_mono() - t->fail_t;
        rm_series_observe(t->wm.recovery, rec);
        rm_info("recovered seconds=%.2f step=%lld", rec, (long long)t->step);
        t->fail_t = 0;
    }
    rm_health_beat(t->wm.health);
    rm_series_set(t->wm.step, (double)t->step);
    rm_series_inc(t->wm.samples, t->B);
    rm_series_set(t->wm.train_epoch, t->train_epoch);
}

/* 0 to go on; an R_* action of the controller or an error code to end the round. */
static int step_report(trainer *t, step_log *lg, rm_err *err)
{
    double now = rm_mono();
    if (now - t->rep_t >= 1.0) {   /* the loss needs the device: read it here, ~1/s */
        report_memory(t, false);
        RM_CHECK(read_loss(t, err));
        rm_series_set(t->wm.loss, t->train_loss);
        t->rep_t = now;
    }
    reporter_publish(t, true);
    int a = reporter_action(t);
    if (a)
        return a;
    if (t->cfg->log_every > 0 && t->step - t->log_step >= t->cfg->log_every) {
        RM_CHECK(read_loss(t, err));
        rm_series_set(t->wm.loss, t->train_loss);
        rm_info("progress step=%lld train_epoch=%d loss=%.4f lr=%.5f samples_per_s=%.0f "
                "allreduce_gbps=%.2f",
                (long long)t->step, t->train_epoch, t->train_loss, t->lr,
                (double)(t->samples_local - lg->samples) / (now - lg->t), t->ar_gbps);
        t->log_step = t->step;
        lg->t = now;
        lg->samples = t->samples_local;
    }
    return 0;
}

/* Steps until the job ends or the round breaks. */
static int run_round(trainer *t, rm_err *err)
{
    const rm_train_cfg *cfg = t->cfg;
    int slot, nslots;
    data_slot(t, &slot, &nslots);
    int G = t->B * nslots;
    int64_t max_steps = cfg->t.max_steps;
    if (rm_data_steps_per_epoch(t->tr.n, G) < 1)
        return rm_errf(err, RM_EINVAL, "global batch %d larger than the training set (%d)", G,
                       t->tr.n);
    t->rep_t = rm_mono();
    reporter_publish(t, true);
    reporter_kick(t);
    step_log lg = step_log_start(t);
    for (;;) {
        if (g_train_term)
            return R_TERM;
        const rm_fault *f = rm_faults_due(&t->faults, t->rank, t->step);
        if (f)
            fire_fault(t, f);
        /* epoch boundary: evaluate the finished epoch, move the cursor */
        if (t->data_pos + G > t->tr.n) {
            if (cfg->eval_every_epoch && t->eval_step != t->step) {
                int rc = evaluate(t, err);
                if (rc)
                    return rc;
            }
            t->train_epoch++;
            t->data_pos = 0;
            rm_series_set(t->wm.train_epoch, t->train_epoch);
        }
        if (t->train_epoch >= cfg->t.epochs || (max_steps > 0 && t->step >= max_steps))
            return R_DONE;
        int rc = step_once(t, err);
        if (rc)
            return rc;
        step_note(t);
        if (cfg->checkpoint_interval > 0 && t->step % cfg->checkpoint_interval == 0) {
            int grc = ckpt_gather(t, err);   /* sharded state: every rank, collectively */
            if (grc)
                return grc;
            ckpt_write(t, err);   /* handed to the writer; a failed write is logged, counted
                                     and reported, and training goes on */
        }
        ckpt_collect(t, false);   /* a finished write's result, if any (no waiting) */
        if ((rc = step_report(t, &lg, err)) != 0)
            return rc;
    }
}

/* One step of a strategy that claimed its batch (parameter servers): the batch is the claim's
 * slot of its global position; the schedule's LR is the position's. */
static int step_claimed(trainer *t, const rm_step_claim *c, rm_err *err)
{
    if (t->perm_epoch != c->train_epoch) {
        rm_perm_make(t->perm, t->tr.n, t->cfg->t.seed, c->train_epoch);
        t->perm_epoch = c->train_epoch;
    }
    rm_data_gather(&t->tr, t->perm, c->data_pos, c->slot, c->nslots, t->B, t->m.x, t->m.labels);
    double epos = c->train_epoch + (double)c->data_pos / t->tr.n;
    t->lr = rm_lr_at(&t->sched, epos, t->B * t->world);
    rm_step_stats st;
    double t0 = rm_mono();
    RM_CHECK(t->strat->step(t->st, t->B, (float)t->lr, &st, err));
    straggle(t, st.compute_s > 0 ? st.compute_s : rm_mono() - t0 - st.allreduce_s);
    rm_series_observe(t->wm.ar_seconds, st.allreduce_s);
    rm_series_inc(t->wm.ar_bytes, (double)st.bytes);
    t->step = c->step + 1;
    t->samples_local += t->B;
    return RM_OK;
}

/* Take the round the reporter re-formed in the background (reporter.detached), if any: the new
 * epoch, rank and world, without stopping (the strategy keeps its connections and state). */
static int adopt_background_round(trainer *t, rm_err *err)
{
    int ne = atomic_load(&t->rp.new_epoch);
    if (ne <= t->rdzv_epoch)
        return RM_OK;
    t->rank = atomic_load(&t->rp.new_rank);
    t->world = atomic_load(&t->rp.new_world);
    t->rdzv_epoch = ne;
    char fields[128];
    snprintf(fields, sizeof fields, "rank=%d", t->rank);
    rm_log_set_fields(fields);
    RM_CHECK(rm_wmetrics_set_rank(&t->wm, t->rank, err));
    rm_series_set(t->wm.epoch, t->rdzv_epoch);
    rm_series_set(t->wm.world, t->world);
    rm_step_round sr = {.ops = t->ops, .comm = t->comm, .rank = t->rank, .world = t->world};
    RM_CHECK(t->strat->round_begin(t->st, &sr, err));
    rm_info("round adopted without stopping epoch=%d world=%d step=%lld", t->rdzv_epoch, t->world,
            (long long)t->step);
    reporter_publish(t, true);
    reporter_kick(t);
    return RM_OK;
}

/* The loop of a strategy that claims its batches (parameter servers: epochs are a global budget,
 * docs/strategies.md#progress-epochs-are-a-global-budget): before each step the strategy says where the job is; rank 0
 * evaluates (alone) when a data epoch ended; the job ends when the strategy says the budget is
 * spent. Checkpoints are the servers'. */
static int run_round_claimed(trainer *t, rm_err *err)
{
    const rm_train_cfg *cfg = t->cfg;
    /* a round formed the ordinary way: no background re-join is pending for it */
    atomic_store(&t->rp.regroup_from, 0);
    atomic_store(&t->rp.joining_epoch, 0);
    atomic_store(&t->rp.new_epoch, t->rdzv_epoch);
    atomic_store(&t->rp.view, RM_STEP_VIEW(t->rdzv_epoch, t->world));
    t->rep_t = rm_mono();
    reporter_publish(t, true);
    reporter_kick(t);
    step_log lg = step_log_start(t);
    for (;;) {
        if (g_train_term)
            return R_TERM;
        const rm_fault *f = rm_faults_due(&t->faults, t->rank, t->step);
        if (f)
            fire_fault(t, f);
        rm_step_claim c;
        RM_CHECK(t->strat->claim(t->st, &c, err));
        if (c.train_epoch > t->train_epoch && t->rank == 0 && cfg->eval_every_epoch &&
            !c.done && t->eval_step != t->step)
            RM_CHECK(evaluate(t, err));
        t->step = c.step;
        t->train_epoch = c.train_epoch;
        t->data_pos = c.data_pos;
        rm_series_set(t->wm.train_epoch, t->train_epoch);
        if (c.done)
            return R_DONE;
        RM_CHECK(step_claimed(t, &c, err));
        step_note(t);
        RM_CHECK(adopt_background_round(t, err));
        int a = step_report(t, &lg, err);
        if (a)
            return a;
    }
}

/* What a start can find unusable before any data is loaded, so a worker refuses it at once
 * (exit 2) instead of failing every checkpoint write later or silently starting over:
 *   - a rendezvous without a token (RINGMASTER_TOKEN missing or empty);
 *   - a checkpoint folder that cannot be written (a regular file, read-only, /proc/self);
 *   - --resume with no checkpoint this job can continue from (none, all corrupt, another model
 *     shape or optimizer): an error, or with --resume=if-present a loud warning and step 0. */
static int preflight(const rm_train_cfg *cfg, rm_err *err)
{
    rm_err e = {0};
    if (cfg->rdzv_url && (!cfg->token || !*cfg->token))
        return rm_err_field(err, RM_EAUTH, RM_ENV_TOKEN,
                            "missing or empty: the rendezvous at %s needs the job's token",
                            cfg->rdzv_url);
    if (cfg->checkpoint_dir && rm_ckpt_dir_check(cfg->checkpoint_dir, &e) != RM_OK)
        return rm_err_field(err, RM_EINVAL, "--checkpoint-dir", "%s", e.msg);
    if (cfg->resume == RM_RESUME_OFF)
        return RM_OK;
    if (!cfg->checkpoint_dir)
        return rm_err_field(err, RM_EINVAL, "--resume",
                            "needs a checkpoint folder (--checkpoint-dir or "
                            "RINGMASTER_CHECKPOINT_DIR)");
    rm_model_shape shape;
    const rm_model_family *fam;
    rm_model_data md;
    rm_model lay;   /* the plan only: units and sizes, nothing allocated */
    RM_CHECK(rm_dataset_probe(cfg->t.data_dir, &md.inputs, &md.classes, err));
    RM_CHECK(rm_model_shape_for(&cfg->t, &md, &fam, &shape, err));
    RM_CHECK(rm_model_plan(&lay, fam, &shape, err));
    rm_ckpt_meta exp, meta;
    memset(&exp, 0, sizeof exp);
    exp.shape = shape;
    exp.opt_type = (int32_t)cfg->t.optimizer.type;
    exp.nstate = rm_optim_nstate(cfg->t.optimizer.type);
    exp.nparams = lay.nparams;
    size_t cap = (size_t)(1 + exp.nstate) * lay.nparams * sizeof(float);
    void *buf = malloc(cap ? cap : 1);
    if (!buf)
        return rm_errf(err, RM_ENOMEM, "--resume: out of memory (%zu bytes)", cap);
    char path[4200], sh[128];
    int skipped = 0;
    int rc = rm_ckpt_load_newest(cfg->checkpoint_dir, &exp, &meta, buf, cap, path, sizeof path,
                                 &skipped, &e);
    if (rc != RM_OK) {   /* or a sharded set (any world: it re-shards) */
        rm_ckpt_units units = {lay.nunits, lay.unit_off, lay.unit_len};
        rm_err se = {0};
        int sskipped = 0;
        if (rm_ckpt_shard_load_newest(cfg->checkpoint_dir, &exp, &units, 1, 0, -1, buf, cap, &meta,
                                      path, sizeof path, &sskipped, &se) == RM_OK)
            rc = RM_OK;
        else if (sskipped)
            rm_sfmt(e.msg + strlen(e.msg), sizeof e.msg - strlen(e.msg), "; %s", se.msg);
        skipped += sskipped;
    }
    free(buf);
    rm_model_shape_str(&lay, sh, sizeof sh);
    if (rc == RM_OK) {
        rm_info("resume: continuing from path=%s step=%lld skipped_invalid=%d", path,
                (long long)meta.step, skipped);
        return RM_OK;
    }
    if (cfg->resume == RM_RESUME_IF_PRESENT) {
        rm_warn("resume: NOTHING TO RESUME, starting at step 0 as --resume=if-present allows "
                "dir=%s model=%s optimizer=%s reason=\"%s\"",
                cfg->checkpoint_dir, sh, rm_optim_name(cfg->t.optimizer.type), e.msg);
        return RM_OK;
    }
    return rm_err_field(err, RM_ENOTFOUND, "--resume",
                        "no checkpoint this job can continue from in %s (model %s, optimizer "
                        "%s): %s; not starting over at step 0 (--resume=if-present allows it)",
                        cfg->checkpoint_dir, sh, rm_optim_name(cfg->t.optimizer.type), e.msg);
}

int rm_train_run(const rm_train_cfg *cfg, rm_err *err)
{
    int rc = preflight(cfg, err);
    if (rc || cfg->check_only) {
        if (rc == RM_OK)
            rm_info("check passed checkpoint_dir=%s resume=%s",
                    cfg->checkpoint_dir ? cfg->checkpoint_dir : "(none)",
                    cfg->resume == RM_RESUME_OFF ? "off"
                    : cfg->resume == RM_RESUME_REQUIRED ? "required" : "if-present");
        return rc;
    }
    trainer t;
    rc = trainer_setup(&t, cfg, err);
    if (rc == RM_OK && cfg->checkpoint_dir)
        rc = ckpt_writer_start(&t, err);
    if (rc == RM_OK)
        rc = reporter_start(&t, err);
    if (rc) {
        reporter_stop(&t);
        trainer_free(&t);
        return rc;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    t.t_start = rm_mono();
    bool first = true;
    int outcome = 0, setup_failures = 0;
    for (;;) {
        rc = round_setup(&t, first, err);
        first = false;
        if (rc == R_STOP || rc == R_TERM) {
            outcome = rc;
            break;
        }
        if (rc < 0) {
            /* configuration errors do not heal by retrying; a peer lost during setup does */
            if (rc == RM_EAUTH || t.join_gave_up || !t.rdzv || rc == RM_EUNSUPPORTED ||
                rc == RM_EINVAL || rc == RM_ENOMEM || ++setup_failures > 20)
                goto out;
            rm_warn("round setup failed; rejoining err=\"%s\" attempt=%d", err->msg,
                    setup_failures);
            round_teardown(&t);
            if (t.fail_t == 0)
                t.fail_t = rm_mono();
            sleep(1);
            continue;
        }
        setup_failures = 0;
        rc = t.strat->claim ? run_round_claimed(&t, err) : run_round(&t, err);
        if (rc == R_DONE || rc == R_STOP || rc == R_TERM) {
            outcome = rc;
            /* SIGTERM seen at a step boundary: peers already in the next step's first collective
             * would wait for this rank until the comm timeout, past the 10 s its sharded
             * checkpoint waits for their shards; abort so they fail now and write theirs (their
             * state is still the last whole step's) */
            if (rc == R_TERM && t.ops && t.comm && t.ops->abort)
                t.ops->abort(t.comm);
            break;
        }
        /* the round broke: a collective failed, or the rendezvous moved on */
        reporter_publish(&t, false);
        t.fail_t = rm_mono();
        t.restarts++;
        rm_series_inc(t.wm.restarts, 1);
        if (rc < 0)
            rm_warn("collective failed; restarting in place err=\"%s\" step=%lld", err->msg,
                    (long long)t.step);
        if (t.ops && t.comm && t.ops->abort)
            t.ops->abort(t.comm);
        round_teardown(&t);
        if (!t.rdzv || t.cfg->static_peers || backend_is(t.cfg, RM_BACKEND_MPI)) {
            /* no rendezvous to re-form the group (static world, mpirun): fail */
            rc = rc < 0 ? rc : RM_ERR;
            goto out;
        }
        if (g_train_term) {
            outcome = R_TERM;
            break;
        }
        memset(err, 0, sizeof *err);
    }
    rc = RM_OK;
    reporter_publish(&t, false);
    reporter_stop(&t);
    t.train_seconds = rm_mono() - t.t_start;
    if (outcome == R_TERM) {
        rm_info("SIGTERM: writing a checkpoint and exiting step=%lld", (long long)t.step);
        rm_err e = {0};
        ckpt_write_sync(&t, &e);
    } else if (outcome == R_DONE) {
        report_memory(&t, true);   /* after the last step: before the evaluation makes every layer whole */
        if (t.eval_step != t.step) {
            rc = evaluate(&t, err);
            if (rc)
                goto out;
        }
        rm_err e = {0};
        if (t.strat->materialize && (rc = t.strat->materialize(t.st, err)) != RM_OK)
            goto out;   /* the checksum below reads every parameter */
        if ((rc = ckpt_gather(&t, err)) != RM_OK)
            goto out;
        ckpt_write_sync(&t, &e);
        char scratch[4096];
        uint64_t sum = 0;
        if (!t.strat->checksum)
            sum = rm_model_checksum(&t.m, scratch, sizeof scratch);
        else if ((rc = t.strat->checksum(t.st, &sum, err)) != RM_OK)
            goto out;
        rm_info("training done steps=%lld train_epoch=%d test_accuracy=%.4f train_loss=%.4f "
                "seconds=%.2f samples_per_s=%.0f params_fnv64=%016llx restarts=%d",
                (long long)t.step, t.train_epoch, t.test_acc, t.train_loss, t.train_seconds,
                t.train_seconds > 0 ? t.samples_local / t.train_seconds : 0.0,
                (unsigned long long)sum, t.restarts);
        report(&t, true);
    } else {
        rm_info("stopping (rendezvous said stop) step=%lld", (long long)t.step);
    }
out:
    reporter_stop(&t);
    round_teardown(&t);
    trainer_free(&t);
    return rc;
}
