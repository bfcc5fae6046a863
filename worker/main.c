/* main.c — ringmaster-worker: the program inside every worker pod.
 *   ringmaster-worker train [flags]   data-parallel training (worker/train.c)
 *   ringmaster-worker bench [flags]   allreduce benchmark in nccl-tests' format (worker/bench.c)
 *   ringmaster-worker sample [flags]  text from a trained language model (worker/sample.c; what
 *                                     `ringmaster sample` runs)
 *   ringmaster-worker ps [flags]      a parameter server (worker/ps/ps_server.c); RINGMASTER_ROLE=ps
 *                                     selects it too, whatever the command
 *   ringmaster-worker export [flags]  a checkpoint folder as a model (worker/export_cmd.c)
 *   ringmaster-worker swarm [flags]   N simulated workers on the rendezvous protocol, one process
 *                                     (worker/swarm/swarm.h; docs/scale.md)
 *   ringmaster-worker fetch [flags]   fetch the job's remote data into the data cache and exit (the
 *                                     operator's init container: docs/models-and-data.md, "Where data
 *                                     comes from"); the same settings as train
 * Exit codes: 0 success (also on SIGTERM after the checkpoint, and on the rendezvous' "stop"),
 * 1 runtime failure (missing/corrupt data, unrecoverable comm error), 2 bad usage (also settings
 * found unusable at start: a checkpoint folder that cannot be written, --resume with nothing to
 * resume, a global batch larger than the training set), 3 (RM_WORKER_EXIT_DATA_ERROR) the data
 * cannot be fetched or read: its one-line reason also goes to $RINGMASTER_TERMINATION_LOG (or
 * Kubernetes' /dev/termination-log), and the controllers fail the job with reason DataError. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/rm.h"
#include "common/trainingjob.h"
#include "common/worker_env.h"
#include "worker/bench.h"
#include "worker/data/reader.h"
#include "worker/ps/ps_server.h"
#include "worker/export_cmd.h"
#include "worker/sample.h"
#include "worker/swarm/swarm.h"
#include "worker/train.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ringmaster-worker train [flags] | bench [flags] | sample [flags] | --help\n"
            "  train   synchronous data-parallel training (see `ringmaster-worker train --help`)\n"
            "  bench   allreduce benchmark, nccl-tests format (see `ringmaster-worker bench --help`)\n"
            "  sample  text from a trained language model (see `ringmaster-worker sample --help`)\n"
            "  export  a checkpoint folder's newest checkpoint as a model (see `ringmaster-worker export "
            "--help`)\n"
            "  ps      a parameter server (env RINGMASTER_ROLE=ps selects it too)\n"
            "  fetch   fetch spec.training.data.uri into the data cache (RINGMASTER_DATA_CACHE) and exit\n"
            "  swarm   simulated workers on the rendezvous (`ringmaster-worker swarm --help`)\n");
}

/* The one-line reason a controller shows (DataError's message): $RINGMASTER_TERMINATION_LOG, else
 * Kubernetes' terminationMessagePath when the container has one; and as the log's last line, which
 * is the message under terminationMessagePolicy FallbackToLogsOnError when no file is written. */
static void write_termination(const char *msg)
{
    fprintf(stderr, "%s\n", msg);
    const char *p = getenv(RM_ENV_TERMINATION_LOG);
    if (!p || !*p)
        p = access("/dev/termination-log", W_OK) == 0 ? "/dev/termination-log" : NULL;
    FILE *f = p ? fopen(p, "w") : NULL;
    if (!f)
        return;
    fprintf(f, "%s\n", msg);
    fclose(f);
}

/* `fetch`: the train command's settings, then only the data source (fetched when remote; a
 * complete cache entry is used as it is, so a replacement pod fetches nothing). */
static int fetch_main(int argc, char **argv)
{
    rm_train_cfg cfg;
    rm_err err = {0};
    int rc = rm_train_cfg_parse(argc, argv, &cfg, &err);
    if (rc) {
        if (strcmp(err.msg, "help") == 0) {
            printf("usage: ringmaster-worker fetch [train's flags]: fetch spec.training.data.uri (from "
                   "RINGMASTER_TRAINING or --config) into the data cache (RINGMASTER_DATA_CACHE) and exit\n");
            return 0;
        }
        fprintf(stderr, "ringmaster-worker fetch: %s\n", err.msg);
        return 2;
    }
    const rm_data_reader *r = NULL;
    char src[4096];
    rc = rm_data_source(&cfg.t, &r, src, sizeof src, &err);
    if (rc == RM_OK)
        rm_info("data ready uri=%s path=%s", cfg.t.data.uri ? cfg.t.data.uri : "-", src);
    else
        rm_error("data fetch failed rc=%s err=\"%s\"", rm_strerror(rc), err.msg);
    rm_train_cfg_free(&cfg);
    if (rc && rm_data_error_is(&err)) {
        write_termination(err.msg);
        return RM_WORKER_EXIT_DATA_ERROR;
    }
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, "worker");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    const char *role = getenv(RM_ENV_ROLE);
    if (!strcmp(argv[1], "ps") || (role && !strcmp(role, "ps")))
        return rm_ps_server_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sample"))
        return rm_worker_sample_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "fetch"))
        return fetch_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "swarm"))
        return rm_swarm_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export"))
        return rm_worker_export_main(argc - 1, argv + 1);
    int mode = rm_enum_index(rm_mode_names, argv[1]); /* the subcommand is spec.training.mode */
    if (mode == RM_MODE_BENCH)
        return rm_worker_bench_main(argc - 1, argv + 1);
    if (mode != RM_MODE_TRAIN) {
        fprintf(stderr, "ringmaster-worker: unknown command \"%s\"\n", argv[1]);
        usage(stderr);
        return 2;
    }
    rm_train_cfg cfg;
    rm_err err = {0};
    int rc = rm_train_cfg_parse(argc - 1, argv + 1, &cfg, &err);
    if (rc) {
        if (strcmp(err.msg, "help") == 0) {
            rm_train_usage(stdout);
            return 0;
        }
        fprintf(stderr, "ringmaster-worker train: %s\n", err.msg);
        rm_train_usage(stderr);
        return 2;
    }
    rc = rm_train_run(&cfg, &err);
    if (rc)
        rm_error("training failed rc=%s err=\"%s\"", rm_strerror(rc), err.msg);
    rm_train_cfg_free(&cfg);
    if (rc && rm_data_error_is(&err)) {
        write_termination(err.msg);
        return RM_WORKER_EXIT_DATA_ERROR;
    }
    return rc ? (err.field[0] ? 2 : 1) : 0; /* settings at fault: 2, like a bad flag */
}
