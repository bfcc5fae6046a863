/* backend.c — names and resolution of the comm backend and precision enums (common/backend.h). */
#include "common/backend.h"

#include <string.h>

#include "common/rm.h"

const char *const rm_backend_names[] = { "auto", "ring", "nccl", "mpi", NULL };
const char *const rm_precision_names[] = { "fp32", "bf16", "fp16", NULL };

static int name_index(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

const char *rm_backend_name(rm_backend b)
{
    return (unsigned)b <= RM_BACKEND_MPI ? rm_backend_names[b] : "unknown";
}

int rm_backend_parse(const char *s, rm_backend *out)
{
    int i = name_index(rm_backend_names, s);
    if (i < 0)
        return RM_EINVAL;
    *out = (rm_backend)i;
    return RM_OK;
}

rm_backend rm_backend_resolve(rm_backend spec, int gpus_requested)
{
    if (spec != RM_BACKEND_AUTO)
        return spec;
    return gpus_requested > 0 ? RM_BACKEND_NCCL : RM_BACKEND_RING;
}

const char *rm_precision_str(rm_precision p)
{
    return (unsigned)p <= RM_PREC_FP16 ? rm_precision_names[p] : "unknown";
}

int rm_precision_parse(const char *s, rm_precision *out)
{
    int i = name_index(rm_precision_names, s);
    if (i < 0)
        return RM_EINVAL;
    *out = (rm_precision)i;
    return RM_OK;
}

size_t rm_precision_size(rm_precision p)
{
    return p == RM_PREC_FP32 ? 4 : 2;
}
