/* clock.h — the two clocks every module reads, as seconds in a double.
 * rm_mono(): CLOCK_MONOTONIC, for timeouts, deadlines and durations (never jumps).
 * rm_wall(): CLOCK_REALTIME (unix seconds), for timestamps people and the API server read.
 * Header-only: both are a single clock_gettime call. */
#ifndef RM_CLOCK_H
#define RM_CLOCK_H
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
#endif
