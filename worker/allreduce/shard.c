/* shard.c — the shard layout and the re-sharding plan (worker/allreduce/shard.h). */
#include "worker/allreduce/shard.h"

#include <string.h>

void rm_shard_range(size_t count, int world, int rank, size_t *off, size_t *len)
{
    if (world < 1 || rank < 0 || rank >= world) {
        *off = 0;
        *len = 0;
        return;
    }
    size_t base = count / (size_t)world, rem = count % (size_t)world, r = (size_t)rank;
    *off = r * base + (r < rem ? r : rem);
    *len = base + (r < rem ? 1 : 0);
}

size_t rm_shard_len(size_t count, int world, int rank)
{
    size_t off, len;
    rm_shard_range(count, world, rank, &off, &len);
    return len;
}

size_t rm_shard_off(size_t count, int world, int rank)
{
    size_t off, len;
    rm_shard_range(count, world, rank, &off, &len);
    return off;
}

size_t rm_shard_max_len(size_t count, int world)
{
    return world < 1 ? 0 : (count + (size_t)world - 1) / (size_t)world;
}

int rm_shard_owner(size_t count, int world, size_t i)
{
    if (world < 1 || i >= count)
        return -1;
    size_t base = count / (size_t)world, rem = count % (size_t)world;
    size_t head = rem * (base + 1); /* the first rem shards are one longer */
    if (i < head)
        return (int)(i / (base + 1));
    return (int)(rem + (i - head) / base);
}

int rm_shard_plan(size_t count, int old_world, int new_world, int new_rank, rm_shard_piece *out, int cap)
{
    if (old_world < 1 || new_world < 1 || new_rank < 0 || new_rank >= new_world || cap < 0)
        return -1;
    size_t off, len;
    rm_shard_range(count, new_world, new_rank, &off, &len);
    int n = 0;
    size_t at = off, end = off + len;
    while (at < end) {
        int src = rm_shard_owner(count, old_world, at);
        size_t soff, slen;
        rm_shard_range(count, old_world, src, &soff, &slen);
        size_t take = soff + slen - at;
        if (take > end - at)
            take = end - at;
        if (n < cap && out)
            out[n] = (rm_shard_piece){src, at - soff, at - off, take};
        n++;
        at += take;
    }
    return n;
}

int rm_unit_shard_make(const size_t *unit_off, const size_t *unit_len, int nunits, int world, int rank,
                       rm_unit_shard *out)
{
    memset(out, 0, sizeof *out);
    if (!unit_off || !unit_len || nunits < 1 || nunits > RM_SHARD_MAX_UNITS || world < 1 || rank < 0 ||
        rank >= world)
        return -1;
    for (int u = 1; u < nunits; u++)
        if (unit_off[u] < unit_off[u - 1] + unit_len[u - 1]) {
            memset(out, 0, sizeof *out);
            return -1;
        }
    out->nunits = nunits;
    out->world = world;
    out->rank = rank;
    for (int u = 0; u < nunits; u++) {
        size_t o, l;
        rm_shard_range(unit_len[u], world, rank, &o, &l);
        out->unit_off[u] = unit_off[u];
        out->unit_len[u] = unit_len[u];
        out->off[u] = unit_off[u] + o;
        out->len[u] = l;
        out->soff[u] = out->total;
        out->total += l;
        if (unit_len[u] > out->max_unit)
            out->max_unit = unit_len[u];
    }
    return 0;
}

int rm_unit_shard_plan(const size_t *unit_len, int nunits, int old_world, int new_world, int new_rank,
                       rm_shard_piece *out, int cap)
{
    if (!unit_len || nunits < 1 || nunits > RM_SHARD_MAX_UNITS || old_world < 1 || new_world < 1 ||
        new_rank < 0 || new_rank >= new_world || cap < 0)
        return -1;
    int n = 0;
    size_t dst_base = 0; /* new_rank's compact offset of unit u */
    for (int u = 0; u < nunits; u++) {
        size_t count = unit_len[u], off, len;
        rm_shard_range(count, new_world, new_rank, &off, &len);
        size_t at = off, end = off + len;
        while (at < end) { /* as rm_shard_plan, within the unit */
            int src = rm_shard_owner(count, old_world, at);
            size_t soff, slen;
            rm_shard_range(count, old_world, src, &soff, &slen);
            size_t take = soff + slen - at;
            if (take > end - at)
                take = end - at;
            size_t src_base = 0; /* the old rank's compact offset of unit u */
            for (int v = 0; v < u; v++)
                src_base += rm_shard_len(unit_len[v], old_world, src);
            if (n < cap && out)
                out[n] = (rm_shard_piece){src, src_base + (at - soff), dst_base + (at - off), take};
            n++;
            at += take;
        }
        dst_base += len;
    }
    return n;
}

rm_shard_bucket rm_shard_buckets(size_t unit_len, int world, size_t cap)
{
    rm_shard_bucket b = {0, 0};
    if (world < 1)
        return b;
    size_t base = unit_len / (size_t)world;
    b.chunk = cap / (size_t)world ? cap / (size_t)world : 1;
    b.nbuckets = base ? (int)((base + b.chunk - 1) / b.chunk) : 1;
    return b;
}

size_t rm_shard_bucket_total(size_t unit_len, int world, size_t cap, int k)
{
    rm_shard_bucket b = rm_shard_buckets(unit_len, world, cap);
    if (k < 0 || k >= b.nbuckets)
        return 0;
    size_t w = (size_t)world, base = unit_len / w, rem = unit_len % w;
    if (k + 1 < b.nbuckets)
        return w * b.chunk;
    return w * (base - (size_t)k * b.chunk) + rem;
}

size_t rm_shard_bucket_cap(size_t cap, int world)
{
    if (world < 1)
        return 0;
    size_t w = (size_t)world, chunk = cap / w ? cap / w : 1;
    return w * chunk + w - 1;
}
