/* clock.h — the two clocks every module reads, as seconds in a double, and timed waits on the first.
 * rm_mono(): CLOCK_MONOTONIC, for timeouts, deadlines and durations (never jumps).
 * rm_wall(): CLOCK_REALTIME (unix seconds), for timestamps people and the API server read.
 * Every pthread_cond_timedwait in the project runs on CLOCK_MONOTONIC, so a wall-clock step neither
 * cuts a wait short nor stretches it:
 *   rm_mono_cond_init(cv): initialise *cv to time its waits on CLOCK_MONOTONIC (pthread's rc);
 *   rm_mono_ts(t):         the absolute timespec of rm_mono() time t (t <= 0: the clock's origin);
 *   rm_mono_ts_in(s):      s seconds from now (s <= 0: now).
 * rm_sleep(s): sleep s seconds on CLOCK_MONOTONIC, all of them: a signal does not cut it short
 * (s <= 0 or NaN: return at once). Loops that must notice a cancel flag sleep in short slices.
 * Header-only; nothing is allocated, the caller owns *cv (pthread_cond_destroy). */
#ifndef RM_CLOCK_H
#define RM_CLOCK_H
#include <errno.h>
#include <pthread.h>
#include <time.h>

static inline double rm_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline double rm_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline int rm_mono_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}

static inline struct timespec rm_mono_ts(double t)
{
    struct timespec ts = {0, 0};
    if (!(t > 0))
        return ts; /* also NaN */
    if (t > 1e15)
        t = 1e15; /* "forever", and no overflow converting to time_t */
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec > 999999999L)
        ts.tv_nsec = 999999999L;
    return ts;
}

static inline struct timespec rm_mono_ts_in(double s)
{
    return rm_mono_ts(rm_mono() + (s > 0 ? s : 0));
}

static inline void rm_sleep(double s)
{
    if (!(s > 0))
        return;
    struct timespec until = rm_mono_ts_in(s);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
}
#endif
