/* testring.h — ranks as threads on loopback rings, for the unit tests that run a strategy across
 * ranks in one process (test_families.c, test_pipe_tied.c, test_tensor_train.c): a ring listener
 * per rank on 127.0.0.1 and the peers list a round would hand out (rank i at index i, worker id
 * "i", token "tok").
 *
 * Ownership: rm_test_ring_up fills the caller's arrays; the listeners are the caller's until
 * rm_test_ring_down frees them (NULL entries are skipped); a round's comm is the caller's. */
#ifndef RM_TESTRING_H
#define RM_TESTRING_H
#include "worker/comm/comm.h"
#include "worker/step.h"

/* n listeners and peers; a CUnit fatal assertion fails the test when one cannot be made. */
void rm_test_ring_up(int n, rm_rdzv_peer *peers, rm_ring_listener **lst);
void rm_test_ring_down(int n, rm_ring_listener **lst);
/* Rank `rank` of n joins its round: the local comm when n is 1, else the ring over peers and its
 * listener (lst[rank]); *rd gets the round (epoch 1). The caller closes rd->comm with
 * rd->ops->destroy once rd->comm is non-NULL. RM_OK or the comm's error. */
int rm_test_ring_round(int n, int rank, const rm_rdzv_peer *peers, rm_ring_listener **lst, rm_step_round *rd,
                       rm_err *err);
#endif
