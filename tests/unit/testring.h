/* testring.h — ranks as threads on loopback rings, for the unit tests that run a strategy across
 * ranks in one process (test_families.c, test_pipe_tied.c, test_tensor_train.c): a ring listener
 * per rank on 127.0.0.1 and the peers list a round would hand out (rank i at index i, worker id
 * "i", token "tok").
 *
 * Ownership: rm_test_ring_up fills the caller's arrays; the listeners are the caller's until
 * rm_test_ring_down frees them (NULL entries are skipped). */
#ifndef RM_TESTRING_H
#define RM_TESTRING_H
#include "worker/comm/comm.h"

/* n listeners and peers; a CUnit fatal assertion fails the test when one cannot be made. */
void rm_test_ring_up(int n, rm_rdzv_peer *peers, rm_ring_listener **lst);
void rm_test_ring_down(int n, rm_ring_listener **lst);
#endif
