/* comm_nccl_stub.c — the CPU build's answer to "is there an NCCL backend": no.
 * The GPU build compiles worker/comm/cuda/comm_nccl.c instead (the Makefile picks one folder). */
#include "worker/comm/comm.h"

const rm_comm_ops *rm_comm_nccl_ops(void)
{
    return NULL;
}
