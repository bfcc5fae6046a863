/* kmap.c — string hash map (see kmap.h). FNV-1a hashing; chains are short because the table
 * doubles when the element count reaches the bucket count. */
#include "common/kmap.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "common/rm.h"

size_t rm_kmap_hash(const char *s)
{
    size_t h = (size_t)1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= (size_t)1099511628211ULL;
    }
    return h;
}

rm_kmap_ent *rm_kmap_find(const rm_kmap *m, const char *key)
{
    if (!m->nb)
        return NULL;
    size_t h = rm_kmap_hash(key);
    for (rm_kmap_ent *e = m->b[h & (m->nb - 1)]; e; e = e->next)
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

void *rm_kmap_get(const rm_kmap *m, const char *key)
{
    rm_kmap_ent *e = rm_kmap_find(m, key);
    return e ? e->val : NULL;
}

static int grow(rm_kmap *m)
{
    size_t nb = m->nb ? m->nb * 2 : 16;
    rm_kmap_ent **b = calloc(nb, sizeof(*b));
    if (!b)
        return RM_ENOMEM;
    for (size_t i = 0; i < m->nb; i++) {
        rm_kmap_ent *e = m->b[i];
        while (e) {
            rm_kmap_ent *nx = e->next;
            size_t j = e->hash & (nb - 1);
            e->next = b[j];
            b[j] = e;
            e = nx;
        }
    }
    free(m->b);
    m->b = b;
    m->nb = nb;
    return RM_OK;
}

static int put(rm_kmap *m, const char *key, void *val, void **old, bool copy)
{
    if (old)
        *old = NULL;
    rm_kmap_ent *e = rm_kmap_find(m, key);
    if (e) {
        if (old)
            *old = e->val;
        e->val = val;
        if (!copy)
            e->key = key; /* the old value (and maybe the old key string) is going away */
        return RM_OK;
    }
    if (m->n >= m->nb && grow(m) != RM_OK)
        return RM_ENOMEM;
    size_t kl = copy ? strlen(key) + 1 : 0;
    e = malloc(sizeof(*e) + kl);
    if (!e)
        return RM_ENOMEM;
    if (copy) {
        memcpy(e->keybuf, key, kl);
        e->key = e->keybuf;
    } else {
        e->key = key;
    }
    e->hash = rm_kmap_hash(key);
    e->val = val;
    size_t j = e->hash & (m->nb - 1);
    e->next = m->b[j];
    m->b[j] = e;
    m->n++;
    return RM_OK;
}

int rm_kmap_put(rm_kmap *m, const char *key, void *val, void **old)
{
    return put(m, key, val, old, true);
}

int rm_kmap_put_ref(rm_kmap *m, const char *key, void *val, void **old)
{
    return put(m, key, val, old, false);
}

void *rm_kmap_del(rm_kmap *m, const char *key)
{
    if (!m->nb)
        return NULL;
    size_t h = rm_kmap_hash(key);
    rm_kmap_ent **pp = &m->b[h & (m->nb - 1)];
    for (; *pp; pp = &(*pp)->next) {
        rm_kmap_ent *e = *pp;
        if (e->hash == h && strcmp(e->key, key) == 0) {
            void *v = e->val;
            *pp = e->next;
            free(e);
            m->n--;
            return v;
        }
    }
    return NULL;
}

rm_kmap_ent *rm_kmap_first(const rm_kmap *m, size_t *it)
{
    for (*it = 0; *it < m->nb; (*it)++)
        if (m->b[*it])
            return m->b[*it];
    return NULL;
}

rm_kmap_ent *rm_kmap_next(const rm_kmap *m, size_t *it, rm_kmap_ent *e)
{
    if (e->next)
        return e->next;
    for ((*it)++; *it < m->nb; (*it)++)
        if (m->b[*it])
            return m->b[*it];
    return NULL;
}

void rm_kmap_clear(rm_kmap *m, void (*vfree)(void *))
{
    for (size_t i = 0; i < m->nb; i++) {
        rm_kmap_ent *e = m->b[i];
        while (e) {
            rm_kmap_ent *nx = e->next;
            if (vfree)
                vfree(e->val);
            free(e);
            e = nx;
        }
    }
    free(m->b);
    m->b = NULL;
    m->nb = m->n = 0;
}
