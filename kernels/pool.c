/* pool.c — the CPU kernels' thread pool (pool.h). */
#include "kernels/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Spins before a helper sleeps, or the caller waits on the condition variable: a few tens of
 * microseconds, about the gap between two kernels of one step. */
#define POOL_SPIN 20000

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int width;   /* parts a job is split into (rm_pool_set_threads) */
    int started; /* helper threads running + 1 */
    int sleepers;
    atomic_uint gen; /* bumped per job */
    atomic_int pending;
    atomic_int busy;
    rm_pool_fn fn;
    void *ctx;
    int nparts;
} P = {PTHREAD_MUTEX_INITIALIZER,
       PTHREAD_COND_INITIALIZER,
       PTHREAD_COND_INITIALIZER,
       1,
       1,
       0,
       0,
       0,
       0,
       NULL,
       NULL,
       1};

static _Thread_local bool in_part;

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *helper(void *arg)
{
    int me = (int)(intptr_t)arg;
    unsigned seen = 0;
    in_part = true;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&P.gen, memory_order_acquire)) == seen && spins < POOL_SPIN) {
            relax();
            spins++;
        }
        if (g == seen) {
            pthread_mutex_lock(&P.mu);
            P.sleepers++;
            while ((g = atomic_load_explicit(&P.gen, memory_order_acquire)) == seen)
                pthread_cond_wait(&P.work, &P.mu);
            P.sleepers--;
            pthread_mutex_unlock(&P.mu);
        }
        seen = g;
        if (me < P.nparts)
            P.fn(P.ctx, me, P.nparts);
        if (atomic_fetch_sub_explicit(&P.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&P.mu);
            pthread_cond_signal(&P.done);
            pthread_mutex_unlock(&P.mu);
        }
    }
    return NULL;
}

/* Start helpers up to the width (the caller holds busy). */
static void start_helpers(void)
{
    while (P.started < P.width) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &a, helper, (void *)(intptr_t)P.started);
        pthread_attr_destroy(&a);
        if (rc != 0) { /* run with what started */
            P.width = P.started;
            return;
        }
        P.started++;
    }
}

void rm_pool_set_threads(int n)
{
    if (n < 1)
        n = 1;
    if (n > RM_POOL_MAX_THREADS)
        n = RM_POOL_MAX_THREADS;
    int expect = 0;
    while (!atomic_compare_exchange_weak(&P.busy, &expect, 1)) {
        expect = 0;
        sched_yield();
    }
    P.width = n;
    atomic_store(&P.busy, 0);
}

int rm_pool_threads(void)
{
    return P.width;
}

void rm_pool_run_n(rm_pool_fn fn, void *ctx, int max_parts)
{
    int expect = 0;
    int n = P.width < max_parts ? P.width : max_parts;
    if (n <= 1 || in_part || !atomic_compare_exchange_strong(&P.busy, &expect, 1)) {
        int parts = n < 1 ? 1 : n;
        for (int p = 0; p < parts; p++)
            fn(ctx, p, parts);
        return;
    }
    start_helpers();
    n = n < P.width ? n : P.width;
    if (P.started <= 1) {
        for (int p = 0; p < n; p++)
            fn(ctx, p, n);
        atomic_store(&P.busy, 0);
        return;
    }
    P.fn = fn;
    P.ctx = ctx;
    P.nparts = n;
    atomic_store_explicit(&P.pending, P.started - 1, memory_order_relaxed);
    pthread_mutex_lock(&P.mu);
    atomic_fetch_add_explicit(&P.gen, 1, memory_order_release);
    if (P.sleepers)
        pthread_cond_broadcast(&P.work);
    pthread_mutex_unlock(&P.mu);
    in_part = true;
    fn(ctx, 0, n);
    in_part = false;
    int spins = 0;
    while (atomic_load_explicit(&P.pending, memory_order_acquire) > 0 && spins < POOL_SPIN) {
        relax();
        spins++;
    }
    if (atomic_load_explicit(&P.pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&P.mu);
        while (atomic_load_explicit(&P.pending, memory_order_acquire) > 0)
            pthread_cond_wait(&P.done, &P.mu);
        pthread_mutex_unlock(&P.mu);
    }
    atomic_store(&P.busy, 0);
}

void rm_pool_run(rm_pool_fn fn, void *ctx)
{
    rm_pool_run_n(fn, ctx, RM_POOL_MAX_THREADS);
}

/* cgroup v2 cpu.max ("max 100000" or "200000 100000"), else v1's quota and period; 0 = no quota. */
int rm_pool_cpu_quota(void)
{
    long q = -1, per = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        char qs[32];
        if (fscanf(f, "%31s %ld", qs, &per) == 2 && qs[0] != 'm')
            q = strtol(qs, NULL, 10);
        fclose(f);
    } else if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r"))) {
        if (fscanf(f, "%ld", &q) != 1)
            q = -1;
        fclose(f);
        if ((f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r"))) {
            if (fscanf(f, "%ld", &per) != 1)
                per = 0;
            fclose(f);
        }
    }
    if (q <= 0 || per <= 0)
        return 0;
    return (int)((q + per - 1) / per);
}

int rm_pool_cpus_available(void)
{
    cpu_set_t s;
    int n = sched_getaffinity(0, sizeof s, &s) == 0 ? CPU_COUNT(&s) : 1;
    int q = rm_pool_cpu_quota();
    if (q > 0 && q < n)
        n = q;
    return n < 1 ? 1 : n;
}
