/* shm_name.h — the name of a formation's shared-memory segment, derived from the job token, so
 * that the worker's shm backend (worker/comm/comm_shm.c, which creates and unlinks it) and the
 * runner (operator/shm_sweep.c, which removes the segments of formations whose ranks all died
 * during setup) compute the same name from what each of them knows: the token, the rendezvous
 * epoch and the ranks' advertised addresses in rank order. docs/strategies.md#topology. */
#ifndef RM_SHM_NAME_H
#define RM_SHM_NAME_H
#include "common/rm.h"

#define RM_SHM_NAME_MAX 48

/* "/rm-" + hex(HMAC-SHA256(token, "ringmaster-shm-v1|epoch|world|addr0|addr1...")[0..20)) into
 * name. addrs: world borrowed strings ("host:port"), index = rank; token NULL = "". RM_EINVAL for
 * a world out of 1..RM_MAX_WORLD, a NULL address or a list too long. */
int rm_shm_segment_name(const char *token, int epoch, int world, const char *const *addrs,
                        char name[RM_SHM_NAME_MAX], rm_err *err);
#endif
