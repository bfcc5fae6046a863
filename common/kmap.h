/* kmap.h — a small string-keyed hash map (separate chaining, power-of-two buckets, grows at load
 * 1.0) used by the operator's informer cache, its owner index and the workqueue's sets, and the
 * rendezvous' job index.
 *
 * Design: keys are copied into the map (owned); values are opaque pointers the caller owns unless
 * it passes a free function to rm_kmap_free/rm_kmap_del. Not thread-safe: callers lock. */
#ifndef RM_COMMON_KMAP_H
#define RM_COMMON_KMAP_H
#include <stddef.h>

typedef struct rm_kmap_ent {
    struct rm_kmap_ent *next;
    size_t hash;
    void *val;
    const char *key; /* keybuf (a copy) or, for rm_kmap_put_ref, the caller's string */
    char keybuf[];
} rm_kmap_ent;

typedef struct rm_kmap {
    rm_kmap_ent **b;
    size_t nb, n;
} rm_kmap;

/* Zero-initialised rm_kmap is an empty map. */
void *rm_kmap_get(const rm_kmap *m, const char *key);
rm_kmap_ent *rm_kmap_find(const rm_kmap *m, const char *key);
/* Insert or replace. *old (if non-NULL) gets the replaced value or NULL. RM_OK / RM_ENOMEM. */
int rm_kmap_put(rm_kmap *m, const char *key, void *val, void **old);
/* Insert or replace without copying the key: the map keeps `key` (usually a string inside val)
 * and the caller keeps it alive and unchanged while the entry exists. Replacing an entry also
 * replaces its key pointer. Saves a copy per entry in big caches. RM_OK / RM_ENOMEM. */
int rm_kmap_put_ref(rm_kmap *m, const char *key, void *val, void **old);
/* Remove; returns the value (caller frees) or NULL if absent. */
void *rm_kmap_del(rm_kmap *m, const char *key);
/* Iterate: for (rm_kmap_ent *e = rm_kmap_first(m, &i); e; e = rm_kmap_next(m, &i, e)). Do not modify
 * the map while iterating (collect keys first). */
rm_kmap_ent *rm_kmap_first(const rm_kmap *m, size_t *it);
rm_kmap_ent *rm_kmap_next(const rm_kmap *m, size_t *it, rm_kmap_ent *e);
/* Free all entries; vfree (may be NULL) is called on each value. The map is left empty. */
void rm_kmap_clear(rm_kmap *m, void (*vfree)(void *));
size_t rm_kmap_hash(const char *s);
#endif
