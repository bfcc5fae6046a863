/* backend.c — names and resolution of the comm backend and precision enums (common/backend.h). */
#include "common/backend.h"

#include <string.h>

#include "common/rm.h"

const char *const rm_backend_names[] = {"auto", "ring", "nccl", "mpi", NULL};
const char *const rm_precision_names[] = {"fp32", "bf16", "fp16", NULL};

const char *rm_backend_name(rm_backend b)
{
    return rm_enum_name(rm_backend_names, (int)b);
}

int rm_backend_parse(const char *s, rm_backend *out)
{
    int i = rm_enum_index(rm_backend_names, s);
    if (i >= 0)
        *out = (rm_backend)i;
    return i >= 0 ? RM_OK : RM_EINVAL;
}

rm_backend rm_backend_resolve(rm_backend spec, int gpus_requested)
{
    if (spec != RM_BACKEND_AUTO)
        return spec;
    return gpus_requested > 0 ? RM_BACKEND_NCCL : RM_BACKEND_RING;
}

const char *rm_precision_str(rm_precision p)
{
    return rm_enum_name(rm_precision_names, (int)p);
}

int rm_precision_parse(const char *s, rm_precision *out)
{
    int i = rm_enum_index(rm_precision_names, s);
    if (i >= 0)
        *out = (rm_precision)i;
    return i >= 0 ? RM_OK : RM_EINVAL;
}

size_t rm_precision_size(rm_precision p)
{
    return p == RM_PREC_FP32 ? 4 : 2;
}
