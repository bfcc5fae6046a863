/* kmap.h — a small string-keyed hash map (separate chaining, power-of-two buckets, grows at load
 * 1.0) used by the informer cache, its owner index and the workqueue's sets.
 *
 * Design: keys are copied into the map (owned); values are opaque pointers the caller owns unless
 * it passes a free function to kmap_free/kmap_del. Not thread-safe: callers lock. */
#ifndef RM_KUBE_KMAP_H
#define RM_KUBE_KMAP_H
#include <stddef.h>

typedef struct kmap_ent {
    struct kmap_ent *next;
    size_t hash;
    void *val;
    const char *key;          /* keybuf (a copy) or, for kmap_put_ref, the caller's string */
    char keybuf[];
} kmap_ent;

typedef struct kmap {
    kmap_ent **b;
    size_t nb, n;
} kmap;

/* Zero-initialised kmap is an empty map. */
void *kmap_get(const kmap *m, const char *key);
kmap_ent *kmap_find(const kmap *m, const char *key);
/* Insert or replace. *old (if non-NULL) gets the replaced value or NULL. RM_OK / RM_ENOMEM. */
int kmap_put(kmap *m, const char *key, void *val, void **old);
/* Insert or replace without copying the key: the map keeps `key` (usually a string inside val)
 * and the caller keeps it alive and unchanged while the entry exists. Replacing an entry also
 * replaces its key pointer. Saves a copy per entry in big caches. RM_OK / RM_ENOMEM. */
int kmap_put_ref(kmap *m, const char *key, void *val, void **old);
/* Remove; returns the value (caller frees) or NULL if absent. */
void *kmap_del(kmap *m, const char *key);
/* Iterate: for (kmap_ent *e = kmap_first(m, &i); e; e = kmap_next(m, &i, e)). Do not modify
 * the map while iterating (collect keys first). */
kmap_ent *kmap_first(const kmap *m, size_t *it);
kmap_ent *kmap_next(const kmap *m, size_t *it, kmap_ent *e);
/* Free all entries; vfree (may be NULL) is called on each value. The map is left empty. */
void kmap_clear(kmap *m, void (*vfree)(void *));
size_t kmap_hash(const char *s);
#endif
