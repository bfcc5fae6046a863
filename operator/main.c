/* main.c — the `ringmaster` command: dispatch to run / validate / version (operator/run.c),
 * tokenize (operator/tokenize.c), sample (operator/sample.c) and operator (operator/kube/operator.c). Nothing else lives here, so each command stays testable
 * as a function taking argv. */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "operator/kube/operator.h"
#include "operator/run.h"
#include "operator/sample.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ringmaster <command> [flags]\n"
               "  run -f FILE        run a TrainingJob on this machine (worker processes, live progress),\n"
               "                     or a TrainingSweep's trials, parallelTrials at a time\n"
               "  operator [flags]   the Kubernetes controller for TrainingJobs and TrainingSweeps\n"
               "  validate -f FILE   check a manifest (errors name the field and line)\n"
               "  tokenize IN OUT    write a text file as token shards (data.format: tokens)\n"
               "  sample [flags]     text from a trained language model (an export or a checkpoint folder)\n"
               "  version            print the version\n"
               "`ringmaster <command> --help` describes each command's flags.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run"))
        return rm_run_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "validate"))
        return rm_validate_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize"))
        return rm_tokenize_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample"))
        return rm_sample_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
        return rm_version_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "operator")) {
        rm_log_init(RM_LOG_INFO, RM_LOG_TEXT, "operator");
        return rm_operator_main(argc - 1, argv + 1);
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "ringmaster: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
