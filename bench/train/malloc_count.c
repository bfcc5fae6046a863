/* malloc_count.c — LD_PRELOAD allocation counter used by bench/train/run.sh to show that the
 * training step allocates nothing in steady state: it counts malloc/calloc/realloc/posix_memalign/
 * aligned_alloc calls in the whole process (all threads) and writes the totals to the file named by
 * $MALLOC_COUNT_OUT at exit. Two runs that differ only in --max-steps then differ only by what the
 * extra steps allocated. Built on the fly: cc -shared -fPIC -O2 -o malloc_count.so malloc_count.c */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_ulong n_alloc, n_bytes;

void *malloc(size_t n)
{
    atomic_fetch_add(&n_alloc, 1);
    atomic_fetch_add(&n_bytes, n);
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
    atomic_fetch_add(&n_alloc, 1);
    atomic_fetch_add(&n_bytes, a * b);
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
    atomic_fetch_add(&n_alloc, 1);
    atomic_fetch_add(&n_bytes, n);
    return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t al, size_t n)
{
    atomic_fetch_add(&n_alloc, 1);
    atomic_fetch_add(&n_bytes, n);
    void *p = __libc_memalign(al, n);
    if (!p)
        return 12;
    *out = p;
    return 0;
}
void *aligned_alloc(size_t al, size_t n)
{
    atomic_fetch_add(&n_alloc, 1);
    atomic_fetch_add(&n_bytes, n);
    return __libc_memalign(al, n);
}

__attribute__((destructor)) static void report(void)
{
    const char *out = getenv("MALLOC_COUNT_OUT");
    if (!out)
        return;
    FILE *f = fopen(out, "w");
    if (!f)
        return;
    fprintf(f, "%lu %lu\n", (unsigned long)atomic_load(&n_alloc), (unsigned long)atomic_load(&n_bytes));
    fclose(f);
}
