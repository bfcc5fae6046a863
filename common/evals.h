/* evals.h — a job's list of evaluations (test accuracy, training loss, validation loss), one
 * definition for the rendezvous (what rank 0 reports, common/rdzv.h) and the TrainingJob status
 * (status.progress.evaluations[], common/trainingjob.h).
 *
 * A worker evaluates at every data-epoch end and, with evalEverySteps, every that many steps
 * (docs/models-and-data.md, "Shapes and status"), so one epoch may hold several evaluations: the
 * list is keyed by the optimizer step. Entries without a step (0: written by a peer or an
 * operator that predates steps) are keyed by epoch, as the list was before. */
#ifndef RM_EVALS_H
#define RM_EVALS_H
#include <stdint.h>

typedef struct rm_eval {
    int epoch;    /* the data epoch it belongs to (1 = the first): the one just finished at an
                   * epoch end, the one in progress for an evaluation every evalEverySteps */
    int64_t step; /* the optimizer step it ran at; 0 = not known */
    double test_accuracy, train_loss;
    double val_loss; /* the validation/test split's mean loss (nats per token for a language
                      * model, the test loss for the MLP); 0 = not reported */
} rm_eval;

/* Insert e into a[0..*n) (cap entries at most), ascending step. An evaluation at a step already
 * listed replaces that entry; one with a step replaces a stepless entry of its epoch. When cap
 * entries are held the oldest makes room — the newest evaluations are what a user watches and
 * early stopping judges, and the controller copied the older ones into status already — and an
 * evaluation older than every kept one is dropped. e->epoch < 1 or e->step < 0 is ignored.
 * Returns 1 if anything changed, else 0. */
int rm_eval_add(rm_eval *a, int *n, int cap, const rm_eval *e);
#endif
