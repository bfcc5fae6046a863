/* step.c — the strategy table's index: names to rm_step_ops (see step.h). A new strategy is a
 * step_<name>.c module plus one line here. */
#include "worker/step.h"

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
