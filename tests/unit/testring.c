/* testring.c — loopback rings for in-process strategy tests (tests/unit/testring.h). */
#include "tests/unit/testring.h"

#include <stdio.h>

#include "tests/unit/testutil.h"

void rm_test_ring_up(int n, rm_rdzv_peer *peers, rm_ring_listener **lst)
{
    rm_err e = {0};
    for (int i = 0; i < n; i++) {
        int fd = -1, port = 0;
        CU_ASSERT_EQUAL_FATAL(rm_comm_listen("127.0.0.1", &fd, &port, &e), RM_OK);
        CU_ASSERT_EQUAL_FATAL(rm_ring_listener_start(fd, 1, "tok", &lst[i], &e), RM_OK);
        peers[i].rank = i;
        snprintf(peers[i].addr, sizeof peers[i].addr, "127.0.0.1:%d", port);
        snprintf(peers[i].worker_id, sizeof peers[i].worker_id, "%d", i);
    }
}

void rm_test_ring_down(int n, rm_ring_listener **lst)
{
    for (int i = 0; i < n; i++)
        if (lst[i]) {
            rm_ring_listener_free(lst[i]);
            lst[i] = NULL;
        }
}

int rm_test_ring_round(int n, int rank, const rm_rdzv_peer *peers, rm_ring_listener **lst, rm_step_round *rd,
                       rm_err *err)
{
    const rm_comm_ops *ops = n == 1 ? rm_comm_local_ops() : rm_comm_ring_ops();
    rm_comm_cfg cc = {.rank = rank,
                      .world_size = n,
                      .epoch = 1,
                      .peers = n == 1 ? NULL : peers,
                      .token = "tok",
                      .listener = n == 1 ? NULL : lst[rank],
                      .listen_fd = -1,
                      .timeout_s = 20};
    *rd = (rm_step_round){
        .ops = ops, .rank = rank, .world = n, .peers = cc.peers, .listener = cc.listener, .epoch = 1};
    return ops->init(&cc, &rd->comm, err);
}
