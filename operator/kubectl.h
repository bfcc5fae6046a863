/* kubectl.h — `kubectl ringmaster`: the `ringmaster` binary installed as `kubectl-ringmaster` (a
 * kubectl plugin by kubectl's naming rule; `ringmaster kubectl ...` runs the same code).
 *
 *   logs JOB [-f] [--rank R] [--role worker|ps] [--tail N]   every pod's log, each line prefixed
 *        with its pod's role and index; merged by the lines' timestamps, or as they come with -f,
 *        following a replaced pod to its successor until the job has finished
 *   status JOB      phase, workers, progress, ETA, last failure and why, conditions, recent events
 *   suspend JOB | resume JOB    spec.runPolicy.suspend (a merge patch)
 *   restart JOB     deletes the job's worker pods: the operator re-forms the group from the newest
 *                   checkpoint (a new rendezvous epoch, as after a worker's loss)
 *   runtimes        TrainingRuntimes in the namespace and ClusterTrainingRuntimes
 *   completion bash a bash completion script (`kubectl ringmaster <TAB>` through kubectl's plugin
 *                   completion, `kubectl_complete-ringmaster`, and `kubectl-ringmaster <TAB>`)
 * kubectl's own flags are the plugin's (kubectl passes them through): --kubeconfig, --context,
 * -n/--namespace (default: the context's namespace, else "default"); -h/--help on every command.
 *
 * Design: one parse (rm_kubectl_parse, pure and unit-tested) into rm_kubectl_args, then one
 * function per command over the operator's API client (operator/kube/client.h). `logs -f` runs one
 * thread per pod name; a line is printed whole under one lock, so lines of different pods never
 * interleave within a line.
 *
 * Ownership: rm_kubectl_args borrows argv's strings. */
#ifndef RM_OPERATOR_KUBECTL_H
#define RM_OPERATOR_KUBECTL_H
#include <stdio.h>
#include <stdbool.h>
#include "common/rm.h"

typedef enum {
    RM_KC_HELP,
    RM_KC_LOGS,
    RM_KC_STATUS,
    RM_KC_SUSPEND,
    RM_KC_RESUME,
    RM_KC_RESTART,
    RM_KC_RUNTIMES,
    RM_KC_COMPLETION,
    RM_KC_COMPLETE, /* __complete WORDS...: candidates for the last word, one per line */
} rm_kubectl_cmd;

typedef enum { RM_KC_ROLE_ANY, RM_KC_ROLE_WORKER, RM_KC_ROLE_PS } rm_kubectl_role;

#define RM_KC_MAX_WORDS 32

typedef struct rm_kubectl_args {
    rm_kubectl_cmd cmd;
    bool help; /* -h/--help given with the command: its usage, exit 0 */
    const char *kubeconfig, *context, *ns;
    const char *job; /* logs, status, suspend, resume, restart */
    bool follow;
    int rank;                           /* --rank: a worker's replica index; -1 = every pod */
    rm_kubectl_role role;               /* --role */
    long tail;                          /* --tail: the last N lines of each pod; -1 = all */
    const char *shell;                  /* completion */
    const char *words[RM_KC_MAX_WORDS]; /* __complete: the words typed so far, the last one partial */
    int nwords;
} rm_kubectl_args;

/* Parse argv (argv[0] is the program). Errors name the flag or the argument: "--rank: must be an
 * integer >= 0 (got \"x\")", "logs: a TrainingJob name is required". */
int rm_kubectl_parse(int argc, char **argv, rm_kubectl_args *a, rm_err *err);

/* Usage of a command (RM_KC_HELP: the plugin's). */
void rm_kubectl_usage(FILE *out, rm_kubectl_cmd cmd);

/* The program: 0 done, 1 the API refused or failed, 2 bad usage. */
int rm_kubectl_main(int argc, char **argv);
#endif
