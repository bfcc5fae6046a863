/* backend.c — names and resolution of the comm backend and precision enums (common/backend.h). */
#include "common/backend.h"

#include <string.h>

#include "common/rm.h"

const char *const rm_backend_names[] = { "auto", "ring", "nccl", "mpi", NULL };
const char *const rm_precision_names[] = { "fp32", "bf16", "fp16", NULL };

/* names[value] for a value of an enum with `count` names; "unknown" outside it. */
static const char *name_of(const char *const *names, unsigned count, unsigned value)
{
    return value < count ? names[value] : "unknown";
}

/* Index of s in a NULL-terminated name table, or -1 (also for s NULL). */
static int name_index(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

const char *rm_backend_name(rm_backend b)
{
    return name_of(rm_backend_names, RM_BACKEND_MPI + 1, (unsigned)b);
}

int rm_backend_parse(const char *s, rm_backend *out)
{
    int i = name_index(rm_backend_names, s);
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
    return name_of(rm_precision_names, RM_PREC_FP16 + 1, (unsigned)p);
}

int rm_precision_parse(const char *s, rm_precision *out)
{
    int i = name_index(rm_precision_names, s);
    if (i >= 0)
        *out = (rm_precision)i;
    return i >= 0 ? RM_OK : RM_EINVAL;
}

size_t rm_precision_size(rm_precision p)
{
    return p == RM_PREC_FP32 ? 4 : 2;
}
