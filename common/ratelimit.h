/* ratelimit.h — a token window for log lines that outsiders can trigger (a wrong token on the
 * rendezvous, a stranger on a ring port): at most `burst` lines per `window_s` seconds, and the
 * first line after a quiet spell says how many were suppressed, so a flood costs one line per
 * window instead of one per request and nothing is silently lost from the count.
 *
 * Usage: a static limiter per call site,
 *     static rm_ratelimit rl = RM_RATELIMIT_INIT(5, 10.0);
 *     unsigned long sup;
 *     if (rm_ratelimit_take(&rl, rm_mono(), &sup))
 *         rm_warn("... suppressed=%lu", sup);
 * Thread-safe (a mutex inside); never allocates. */
#ifndef RM_RATELIMIT_H
#define RM_RATELIMIT_H
#include <pthread.h>
#include <stdbool.h>

typedef struct rm_ratelimit {
    pthread_mutex_t mu;
    int burst; /* lines allowed per window */
    double window_s;
    double win_start;         /* monotonic seconds; 0 = no window yet */
    int used;                 /* lines let through in this window */
    unsigned long suppressed; /* lines refused since the last line let through */
} rm_ratelimit;

#define RM_RATELIMIT_INIT(burst_, window_)                          \
    {                                                               \
        PTHREAD_MUTEX_INITIALIZER, (burst_), (window_), 0.0, 0, 0UL \
    }

/* True when a line may be written now (now = rm_mono()); *suppressed (may be NULL) gets the number
 * of lines refused since the last one let through, and is reset. */
bool rm_ratelimit_take(rm_ratelimit *rl, double now, unsigned long *suppressed);
#endif
