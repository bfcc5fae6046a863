/* step.c — the strategy table's index: names to rm_step_ops (see step.h), and the sub-groups
 * strategies form within a round. A new strategy is a step_<name>.c module plus one line here. */
#include "worker/step.h"

#include <stdlib.h>
#include <string.h>

static const rm_step_ops *const STRATEGIES[] = {
    &rm_step_allreduce_ops,
    &rm_step_ps_ops,
    &rm_step_pipeline_ops,
    &rm_step_tensor_ops,
};

const rm_step_ops *rm_step_strategy(const char *name)
{
    for (size_t i = 0; name && i < RM_ARRAY_LEN(STRATEGIES); i++)
        if (strcmp(STRATEGIES[i]->name, name) == 0)
            return STRATEGIES[i];
    return NULL;
}

const char *rm_step_strategy_names(void)
{
    return "allreduce, parameterServer, pipeline, tensor";
}

int rm_step_sub_group(const rm_step_env *env, const rm_step_round *r, const int *ranks, int n, int me,
                      uint32_t group, bool shm_ok, const rm_comm_ops **ops, rm_comm **out, rm_err *err)
{
    if (n < 1 || n > RM_RDZV_MAX_WORLD || me < 0 || me >= n)
        return rm_errf(err, RM_EINVAL, "a sub-group of %d ranks (this one at %d) is out of range 1..%d", n,
                       me, RM_RDZV_MAX_WORLD);
    rm_rdzv_peer *peers = malloc((size_t)n * sizeof *peers); /* ~350 bytes a rank: not on a stack */
    if (!peers)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        peers[i] = r->peers[ranks[i]];
    rm_comm_cfg cc = {
        .rank = me,
        .world_size = n,
        .epoch = r->epoch,
        .peers = peers,
        .token = env->token,
        .listener = r->listener,
        .listen_fd = -1,
        .timeout_s = env->timeout_s,
        .group = group,
    };
    *ops = shm_ok && rm_comm_shm_wanted(peers, n) ? rm_comm_shm_ops() : rm_comm_ring_ops();
    int rc = rm_comm_init_or_ring(ops, &cc, out, err);
    free(peers); /* the comm keeps no pointer to its cfg's peers (comm.h) */
    return rc;
}
