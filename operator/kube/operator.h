/* operator.h — entry point of `ringmaster operator`: the Kubernetes controller for TrainingJobs.
 *
 * operator/main.c (the CLI dispatcher) calls rm_operator_main with the arguments that follow the
 * word "operator". Everything the operator needs (client, informers, workqueue, lease, kube runtime,
 * rendezvous service, metrics and probe servers) lives in one context owned by this call; nothing
 * is global. Returns the process exit code: 0 after a clean shutdown (SIGTERM/SIGINT, lease
 * released), 2 for bad flags, 1 for a fatal start-up error. */
#ifndef RM_OPERATOR_H
#define RM_OPERATOR_H

#include <stdbool.h>
#include "common/http.h"
#include "common/rdzv.h"

int rm_operator_main(int argc, char **argv);

/* Stop serving the rendezvous in the order rdzv.h requires: wake every long poll
 * (rm_rdzv_shutdown), stop the HTTP server (which now returns at once instead of waiting out the
 * polls), then, when resume is true (leadership lost, the process lives on), let r serve again
 * later. srv NULL ok. */
void rm_op_rdzv_stop(rm_rdzv *r, rm_http_server *srv, bool resume);

#endif
