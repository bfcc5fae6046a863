/* main.c — the `ringmaster` command: dispatch to run / validate / version (operator/run.c),
 * tokenize (operator/tokenize.c), sample (operator/sample.c), operator (operator/kube/operator.c) and
 * the kubectl plugin (operator/kubectl.c: `kubectl` here, or this binary named kubectl-ringmaster, or
 * kubectl_complete-ringmaster for kubectl's completion). Nothing else lives here, so each command
 * stays testable as a function taking argv. */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "operator/kube/operator.h"
#include "operator/kubectl.h"
#include "operator/run.h"
#include "operator/export.h"
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
               "  kubectl <command>  the kubectl plugin (installed as kubectl-ringmaster): logs, status,\n"
               "                     suspend, resume, restart, runtimes, completion\n"
               "  export [flags]     a checkpoint folder's newest checkpoint as a model (folder or s3://)\n"
               "  version            print the version\n"
               "`ringmaster <command> --help` describes each command's flags.\n");
}

int main(int argc, char **argv)
{
    const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (!strcmp(base, "kubectl-ringmaster"))
        return rm_kubectl_main(argc, argv);
    if (!strcmp(base, "kubectl_complete-ringmaster")) { /* kubectl's plugin completion: __complete */
        char *av[64];
        int n = 0;
        av[n++] = argv[0];
        av[n++] = (char *)"__complete";
        for (int i = 1; i < argc && n < 63; i++)
            av[n++] = argv[i];
        av[n] = NULL;
        return rm_kubectl_main(n, av);
    }
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
    if (!strcmp(cmd, "kubectl"))
        return rm_kubectl_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample"))
        return rm_sample_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "export"))
        return rm_export_main(argc - 1, argv + 1);
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
