/* test_train.c — the worker's settings (rm_train_cfg_parse): the numeric flags table (values
 * land in the right field with the right type; out-of-range and malformed values are refused
 * naming the flag), backends parsed into rm_backend, --resume modes, and the errors a start
 * reports for bad settings. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/testutil.h"
#include "worker/train.h"

static void clear_env(void)
{
    static const char *const vars[] = {
        "RINGMASTER_TRAINING",   "RINGMASTER_CHECKPOINT_DIR",
        "RINGMASTER_BACKEND",    "RINGMASTER_PROGRESS_DEADLINE",
        "RINGMASTER_RENDEZVOUS", "RINGMASTER_JOB",
        "RINGMASTER_TOKEN",      "RINGMASTER_WORKER_ID",
        "RINGMASTER_FAULT",      "RINGMASTER_RESUME",
        "RINGMASTER_DEVICE",
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(vars); i++)
        unsetenv(vars[i]);
}

/* Parse argv (NULL-terminated, after "train"). */
static int parse(rm_train_cfg *cfg, rm_err *e, const char *const *args)
{
    const char *argv[64] = {"train"};
    int n = 1;
    while (args[n - 1] && n < 63) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    memset(e, 0, sizeof *e);
    return rm_train_cfg_parse(n, (char **)argv, cfg, e);
}

static void test_numeric_flags(void)
{
    clear_env();
    rm_train_cfg cfg;
    rm_err e;
    const char *const a[] = {"--epochs",
                             "7",
                             "--batch",
                             "128",
                             "--lr",
                             "0.5",
                             "--checkpoint-interval",
                             "25",
                             "--checkpoint-keep",
                             "9",
                             "--max-steps",
                             "300",
                             "--momentum",
                             "0.5",
                             "--weight-decay",
                             "0.01",
                             "--warmup-epochs",
                             "2.5",
                             "--seed",
                             "12345678901",
                             "--fusion-mb",
                             "3.5",
                             "--rank",
                             "3",
                             "--comm-timeout",
                             "7.5",
                             "--metrics-addr",
                             "off",
                             NULL};
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, a), RM_OK);
    CU_ASSERT_EQUAL(cfg.t.epochs, 7);
    CU_ASSERT_EQUAL(cfg.t.batch_size_per_worker, 128);
    CU_ASSERT_DOUBLE_EQUAL(cfg.t.optimizer.lr, 0.5, 1e-12);
    CU_ASSERT_EQUAL(cfg.checkpoint_interval, 25);
    CU_ASSERT_EQUAL(cfg.checkpoint_keep, 9);
    CU_ASSERT_EQUAL(cfg.t.max_steps, 300);
    CU_ASSERT_DOUBLE_EQUAL(cfg.t.optimizer.momentum, 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cfg.t.optimizer.weight_decay, 0.01, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cfg.t.warmup_epochs, 2.5, 1e-12);
    CU_ASSERT_EQUAL(cfg.t.seed, 12345678901ull);
    CU_ASSERT_DOUBLE_EQUAL(cfg.t.fusion_buffer_mb, 3.5, 1e-12);
    CU_ASSERT_EQUAL(cfg.static_rank, 3);
    CU_ASSERT_DOUBLE_EQUAL(cfg.comm_timeout_s, 7.5, 1e-12);
    CU_ASSERT_STRING_EQUAL(cfg.metrics_addr, "");
    rm_train_cfg_free(&cfg);

    static const struct {
        const char *flag, *val, *want;
    } bad[] = {
        {"--epochs", "0", "--epochs: want an integer in [1, 100000], got \"0\""},
        {"--batch", "12x", "--batch: want an integer in [1, 65536], got \"12x\""},
        {"--checkpoint-interval", "4294967296",
         "--checkpoint-interval: want an integer in [0, 2147483647], got \"4294967296\""},
        {"--lr", "nan", "--lr: want a number in [1e-12, 1e+06], got \"nan\""},
        {"--momentum", "1.5", "--momentum: want a number in [0, 1], got \"1.5\""},
        {"--seed", "-1", "--seed: want an integer in [0, 9223372036854775807], got \"-1\""},
    };
    for (size_t i = 0; i < RM_ARRAY_LEN(bad); i++) {
        const char *const b[] = {bad[i].flag, bad[i].val, NULL};
        CU_ASSERT_EQUAL(parse(&cfg, &e, b), RM_EINVAL);
        CU_ASSERT_STRING_EQUAL(e.msg, bad[i].want);
    }
}

static void test_backend_and_resume(void)
{
    clear_env();
    rm_train_cfg cfg;
    rm_err e;
    const char *const a[] = {"--backend", "mpi", NULL};
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, a), RM_OK);
    CU_ASSERT_EQUAL(cfg.backend, RM_BACKEND_MPI);
    CU_ASSERT_FALSE(cfg.backend_local);
    CU_ASSERT_EQUAL(cfg.resume, RM_RESUME_OFF);
    rm_train_cfg_free(&cfg);
    const char *const b[] = {"--backend", "local", "--resume", NULL};
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, b), RM_OK);
    CU_ASSERT(cfg.backend_local);
    CU_ASSERT_EQUAL(cfg.resume, RM_RESUME_REQUIRED);
    rm_train_cfg_free(&cfg);
    setenv("RINGMASTER_BACKEND", "nccl", 1);
    setenv("RINGMASTER_RESUME", "if-present", 1);
    const char *const c[] = {NULL};
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, c), RM_OK);
    CU_ASSERT_EQUAL(cfg.backend, RM_BACKEND_NCCL);
    CU_ASSERT_STRING_EQUAL(cfg.device, "cuda"); /* auto device follows nccl */
    CU_ASSERT_EQUAL(cfg.resume, RM_RESUME_IF_PRESENT);
    rm_train_cfg_free(&cfg);
    setenv("RINGMASTER_BACKEND", "gloo", 1);
    CU_ASSERT_EQUAL(parse(&cfg, &e, c), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "RINGMASTER_BACKEND: ring|nccl|mpi|local|auto, got \"gloo\"");
    clear_env();
    const char *const d[] = {"--resume=maybe", NULL};
    CU_ASSERT_EQUAL(parse(&cfg, &e, d), RM_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.msg, "--resume: required or if-present, got \"maybe\"");
}

/* A rendezvous without a token says so (it used to be "out of memory"), and a
 * start refuses it as a setting at fault (err.field: exit 2), before loading any data. */
static void test_missing_token(void)
{
    clear_env();
    setenv("RINGMASTER_RENDEZVOUS", "http://127.0.0.1:1", 1);
    rm_train_cfg cfg;
    rm_err e;
    const char *const a[] = {"--metrics-addr", "off", "--data-dir", "/nonexistent", NULL};
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, a), RM_OK);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_train_run(&cfg, &e), RM_EAUTH);
    CU_ASSERT_STRING_EQUAL(e.field, "RINGMASTER_TOKEN");
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "RINGMASTER_TOKEN: missing or empty"));
    CU_ASSERT_PTR_NULL(strstr(e.msg, "out of memory"));
    rm_train_cfg_free(&cfg);
    setenv("RINGMASTER_TOKEN", "", 1);
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, a), RM_OK);
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(rm_train_run(&cfg, &e), RM_EAUTH);
    CU_ASSERT_STRING_EQUAL(e.field, "RINGMASTER_TOKEN");
    rm_train_cfg_free(&cfg);
    clear_env();
}

/* --checkpoint-dir none (or the env) means no checkpoints, not a folder called "none". */
static void test_checkpoint_dir_none(void)
{
    clear_env();
    rm_train_cfg cfg;
    rm_err e;
    const char *const a[] = {"--checkpoint-dir", "none", NULL};
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, a), RM_OK);
    CU_ASSERT_PTR_NULL(cfg.checkpoint_dir);
    rm_train_cfg_free(&cfg);
    const char *const b[] = {"--checkpoint-dir", "/tmp/ck-x", NULL};
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, b), RM_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg.checkpoint_dir);
    CU_ASSERT_STRING_EQUAL(cfg.checkpoint_dir, "/tmp/ck-x");
    rm_train_cfg_free(&cfg);
    setenv("RINGMASTER_CHECKPOINT_DIR", "none", 1);
    const char *const c[] = {NULL};
    CU_ASSERT_EQUAL_FATAL(parse(&cfg, &e, c), RM_OK);
    CU_ASSERT_PTR_NULL(cfg.checkpoint_dir);
    rm_train_cfg_free(&cfg);
    clear_env();
}

void rm_suite_train(void)
{
    static const rm_test_case cases[] = {
        {"numeric_flags_table", test_numeric_flags},
        {"backend_and_resume", test_backend_and_resume},
        {"missing_token", test_missing_token},
        {"checkpoint_dir_none", test_checkpoint_dir_none},
    };
    RM_ADD_SUITE("train", NULL, NULL, cases);
}
