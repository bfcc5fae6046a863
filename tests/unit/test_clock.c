/* Tests for common/clock.h's timed-wait helpers: rm_mono_ts converts rm_mono() times exactly and
 * clamps what cannot be a deadline; a condition variable from rm_mono_cond_init times out on
 * CLOCK_MONOTONIC at the deadline rm_mono_ts_in gives, neither early nor seconds late; rm_sleep
 * sleeps all of its time although a signal arrives in the middle. */
#include "common/clock.h"
#include "tests/unit/testutil.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>

static void test_mono_ts_converts_and_clamps(void)
{
    struct timespec ts = rm_mono_ts(12.25);
    CU_ASSERT_EQUAL(ts.tv_sec, 12);
    CU_ASSERT_EQUAL(ts.tv_nsec, 250000000L);
    ts = rm_mono_ts(3.0);
    CU_ASSERT_EQUAL(ts.tv_sec, 3);
    CU_ASSERT_EQUAL(ts.tv_nsec, 0);
    /* the fraction never carries into a second's worth of nanoseconds */
    ts = rm_mono_ts(nextafter(8.0, 0.0));
    CU_ASSERT(ts.tv_nsec >= 0 && ts.tv_nsec <= 999999999L);
    /* a past deadline (an rdzv wait computed as now - x) or NaN is the clock's origin: return at once */
    ts = rm_mono_ts(-5.0);
    CU_ASSERT(ts.tv_sec == 0 && ts.tv_nsec == 0);
    ts = rm_mono_ts(NAN);
    CU_ASSERT(ts.tv_sec == 0 && ts.tv_nsec == 0);
    /* "wait forever" as a huge double clamps instead of overflowing time_t (UBSan would stop here) */
    ts = rm_mono_ts(1e300);
    CU_ASSERT(ts.tv_sec == (time_t)1e15);
    ts = rm_mono_ts(INFINITY);
    CU_ASSERT(ts.tv_sec == (time_t)1e15);
}

static void test_mono_ts_in_is_from_now(void)
{
    double before = rm_mono();
    struct timespec ts = rm_mono_ts_in(1.5);
    double after = rm_mono();
    double t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    CU_ASSERT(t >= before + 1.5 - 1e-6 && t <= after + 1.5 + 1e-6);
    /* a negative or zero span is now, not the past */
    ts = rm_mono_ts_in(-3);
    t = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    CU_ASSERT(t >= after - 1e-6 && t <= rm_mono() + 1e-6);
}

static void test_mono_cond_times_out_on_monotonic(void)
{
    pthread_cond_t cv;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    CU_ASSERT_EQUAL_FATAL(rm_mono_cond_init(&cv), 0);
    pthread_mutex_lock(&mu);
    double t0 = rm_mono();
    struct timespec ts = rm_mono_ts_in(0.2);
    int rc = 0;
    while (rc != ETIMEDOUT) /* spurious wake-ups return 0 */
        rc = pthread_cond_timedwait(&cv, &mu, &ts);
    double waited = rm_mono() - t0;
    pthread_mutex_unlock(&mu);
    /* a default (CLOCK_REALTIME) variable would read this monotonic deadline as a time in 1970
     * and return at once */
    CU_ASSERT(waited >= 0.2 - 1e-3);
    CU_ASSERT(waited < 5.0);
    /* a deadline already passed returns at once */
    pthread_mutex_lock(&mu);
    t0 = rm_mono();
    ts = rm_mono_ts(t0 - 1);
    CU_ASSERT_EQUAL(pthread_cond_timedwait(&cv, &mu, &ts), ETIMEDOUT);
    CU_ASSERT(rm_mono() - t0 < 1.0);
    pthread_mutex_unlock(&mu);
    pthread_cond_destroy(&cv);
}

static void on_usr1(int sig)
{
    (void)sig;
}

static void *poke_main(void *arg)
{
    rm_sleep(0.05);
    pthread_kill(*(pthread_t *)arg, SIGUSR1);
    rm_sleep(0.05);
    pthread_kill(*(pthread_t *)arg, SIGUSR1);
    return NULL;
}

static void test_sleep_outlasts_signals(void)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART: a plain nanosleep returns EINTR at the first poke */
    sigemptyset(&sa.sa_mask);
    CU_ASSERT_EQUAL_FATAL(sigaction(SIGUSR1, &sa, &old), 0);
    pthread_t self = pthread_self(), th;
    double t0 = rm_mono();
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, poke_main, &self), 0);
    rm_sleep(0.3);
    double slept = rm_mono() - t0;
    pthread_join(th, NULL);
    sigaction(SIGUSR1, &old, NULL);
    CU_ASSERT(slept >= 0.3 - 1e-3);
    CU_ASSERT(slept < 5.0);
    /* nothing to sleep: back at once */
    t0 = rm_mono();
    rm_sleep(0);
    rm_sleep(-1);
    rm_sleep(NAN);
    CU_ASSERT(rm_mono() - t0 < 0.1);
}

void rm_suite_clock(void)
{
    static const rm_test_case cases[] = {
        {"mono_ts_converts_and_clamps", test_mono_ts_converts_and_clamps},
        {"mono_ts_in_is_from_now", test_mono_ts_in_is_from_now},
        {"mono_cond_times_out_on_monotonic", test_mono_cond_times_out_on_monotonic},
        {"sleep_outlasts_signals", test_sleep_outlasts_signals},
    };
    RM_ADD_SUITE("clock", NULL, NULL, cases);
}
