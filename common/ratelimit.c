/* ratelimit.c — see ratelimit.h. */
#include "common/ratelimit.h"

bool rm_ratelimit_take(rm_ratelimit *rl, double now, unsigned long *suppressed)
{
    bool ok;
    pthread_mutex_lock(&rl->mu);
    if (rl->win_start == 0 || now - rl->win_start >= rl->window_s || now < rl->win_start) {
        rl->win_start = now;
        rl->used = 0;
    }
    ok = rl->used < rl->burst;
    if (ok) {
        rl->used++;
        if (suppressed)
            *suppressed = rl->suppressed;
        rl->suppressed = 0;
    } else {
        rl->suppressed++;
    }
    pthread_mutex_unlock(&rl->mu);
    return ok;
}
