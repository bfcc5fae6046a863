/* admit.c — see admit.h. */
#include "common/admit.h"

static const rm_admit_pending *at(const rm_admit_pending *first, size_t stride, int i)
{
    return (const rm_admit_pending *)((const char *)first + (size_t)i * stride);
}

int rm_admit_victim(const rm_admit_pending *first, size_t stride, int n, uint32_t src, int per_src, int max,
                    const char **why)
{
    int same = 0, oldest_same = -1, oldest = -1;
    for (int i = 0; i < n; i++) {
        const rm_admit_pending *p = at(first, stride, i);
        if (oldest < 0 || p->t0 < at(first, stride, oldest)->t0)
            oldest = i;
        if (p->src != src)
            continue;
        same++;
        if (oldest_same < 0 || p->t0 < at(first, stride, oldest_same)->t0)
            oldest_same = i;
    }
    if (same >= per_src) {
        if (why)
            *why = "too many unfinished handshakes from this address";
        return oldest_same;
    }
    if (n >= max) {
        if (why)
            *why = "too many unfinished handshakes";
        return oldest;
    }
    return -1;
}

int rm_admit_expired(const rm_admit_pending *first, size_t stride, int n, double now, double *next_due)
{
    int hit = -1;
    for (int i = 0; i < n; i++) {
        double due = at(first, stride, i)->t0 + RM_ADMIT_HANDSHAKE_S;
        if (now >= due) {
            if (hit < 0)
                hit = i;
        } else if (next_due && due < *next_due) {
            *next_due = due;
        }
    }
    return hit;
}
