/* stream.c — the token-stream readers (docs/models-and-data.md, "Data formats"): `tokens`
 * (llm.c's token shards, common/token_shard.h: one file, or a folder of *_train_* and *_val_*
 * shards) and `text` (raw bytes, one token per byte, vocabulary 256). Both are mapped read-only and
 * never copied: a process holds the pages it touches, not the set.
 *
 * Rows: a row is a context window — model.context tokens as the input and the same window one
 * token later as the targets (int32 each). An epoch is one pass over the split in windows starting
 * at multiples of the context, each window inside one shard (a window needs context + 1 tokens);
 * in training each window starts up to context - 1 tokens later, by a shift drawn from (seed,
 * epoch, window) (set_epoch), so tokens meet other positions every epoch.
 * Splits: a folder's *_val_* shards are the validation split; a single file's last
 * data.validation.fraction (default 0.1) of tokens are.
 *
 * Checked at open, naming the file: the shard header (magic, version, count against the size),
 * every token < model.vocab (token shards have no vocabulary of their own), a split with at least
 * one window. Ownership: the state owns its mappings (close). */
#include "worker/data/reader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/token_shard.h"

#define STREAM_MAX_SHARDS 4096
#define STREAM_DEFAULT_VAL 0.1

typedef struct piece {
    void *map; /* the whole file */
    size_t map_size;
    const unsigned char *tok; /* the split's first token */
    int tb;                   /* bytes per token: 1 text, 2 or 4 shards */
    uint64_t n;               /* tokens in the split */
    uint64_t windows;         /* (n - 1) / context */
} piece;

typedef struct stream {
    int context;
    uint64_t jitter; /* training windows of this epoch start up to context - 1 tokens late; 0 = aligned */
    int npieces;
    piece *p;
    uint64_t *first; /* windows before piece i (npieces + 1 entries) */
} stream;

static void stream_close(void *state)
{
    stream *s = state;
    if (!s)
        return;
    for (int i = 0; i < s->npieces; i++)
        if (s->p[i].map)
            munmap(s->p[i].map, s->p[i].map_size);
    free(s->p);
    free(s->first);
    free(s);
}

static uint32_t token_at(const piece *p, uint64_t i)
{
    const unsigned char *t = p->tok + i * (uint64_t)p->tb;
    switch (p->tb) {
    case 1:
        return t[0];
    case 2:
        return (uint32_t)t[0] | (uint32_t)t[1] << 8;
    default:
        return (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
    }
}

/* Map path; for a shard (text = false) check its header. The piece gets all of the file's tokens. */
static int map_file(const char *path, bool text, piece *p, rm_err *err)
{
    void *map;
    size_t size;
    RM_CHECK(rm_fs_map_file(path, &map, &size, err));
    p->map = map;
    p->map_size = size;
    if (text) {
        p->tok = map;
        p->tb = 1;
        p->n = size;
        return RM_OK;
    }
    if (size < RM_TOK_HEADER_BYTES)
        return rm_errf(err, RM_EINVAL, "%s: %zu bytes, shorter than a token shard's %d-byte header", path,
                       size, RM_TOK_HEADER_BYTES);
    rm_tok_header h;
    RM_CHECK(rm_tok_header_parse(map, size, path, &h, err));
    p->tok = (const unsigned char *)map + RM_TOK_HEADER_BYTES;
    p->tb = h.token_bytes;
    p->n = h.count;
    return RM_OK;
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The shard files of a folder for split (sorted by name): *_train_*.bin or *_val_*.bin. */
static int list_shards(const char *dir, rm_data_split split, char ***out, int *n, rm_err *err)
{
    const char *tag = split == RM_SPLIT_TRAIN ? "_train_" : "_val_";
    DIR *d = opendir(dir);
    if (!d)
        return rm_errf(err, RM_EIO, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    int count = 0, rc = RM_OK;
    struct dirent *de;
    while ((de = readdir(d)) && rc == RM_OK) {
        size_t l = strlen(de->d_name);
        if (!strstr(de->d_name, tag) || l < 4 || strcmp(de->d_name + l - 4, ".bin") != 0)
            continue;
        if (count == STREAM_MAX_SHARDS) {
            rc = rm_errf(err, RM_EINVAL, "%s: more than %d %s shards", dir, STREAM_MAX_SHARDS, tag);
            break;
        }
        char **nn = realloc(names, (size_t)(count + 1) * sizeof *names);
        char *path = malloc(strlen(dir) + l + 2);
        if (!nn || !path) {
            free(path);
            if (nn)
                names = nn;
            rc = rm_errf(err, RM_ENOMEM, "%s: out of memory", dir);
            break;
        }
        names = nn;
        sprintf(path, "%s/%s", dir, de->d_name);
        names[count++] = path;
    }
    closedir(d);
    if (rc == RM_OK && count == 0)
        rc = rm_errf(err, RM_EINVAL, "%s: no *%s*.bin token shards", dir, tag);
    if (rc) {
        for (int i = 0; i < count; i++)
            free(names[i]);
        free(names);
        return rc;
    }
    qsort(names, (size_t)count, sizeof *names, by_str);
    *out = names;
    *n = count;
    return RM_OK;
}

/* A single file's split: the last fraction of its tokens is the validation split. */
static void cut_split(piece *p, const rm_training_spec *t, rm_data_split split)
{
    double f = t && t->data.val_fraction > 0 ? t->data.val_fraction : STREAM_DEFAULT_VAL;
    uint64_t val = (uint64_t)((double)p->n * f), train = p->n - val;
    if (split == RM_SPLIT_TRAIN) {
        p->n = train;
    } else {
        p->tok += train * (uint64_t)p->tb;
        p->n = val;
    }
}

/* Every token below vocab: the first one that is not names its file and position. */
static int check_tokens(const piece *p, const char *path, int vocab, rm_err *err)
{
    if (p->tb == 1 && vocab >= 256)
        return RM_OK;
    for (uint64_t i = 0; i < p->n; i++) {
        uint32_t v = token_at(p, i);
        if (v >= (uint32_t)vocab)
            return rm_errf(err, RM_EINVAL,
                           "%s: token %u at position %llu is not below "
                           "spec.training.model.vocab (%d)",
                           path, v, (unsigned long long)i, vocab);
    }
    return RM_OK;
}

static int stream_open(const char *src, const rm_training_spec *t, rm_data_split split, bool text, bool scan,
                       void **state, rm_data_info *info, rm_err *err)
{
    int context = t ? t->context : 0;
    int vocab = text ? 256 : t ? t->vocab : 0;
    if (context < 1)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.context", "must be >= 1 for %s data",
                            text ? "text" : "token");
    if (vocab < 1)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.vocab",
                            "required for token shards (their header has no vocabulary)");
    stream *s = calloc(1, sizeof *s);
    if (!s)
        return rm_errf(err, RM_ENOMEM, "data: out of memory");
    s->context = context;
    struct stat st;
    char **names = NULL;
    int nn = 0, rc = RM_OK;
    if (stat(src, &st) != 0) {
        rc = rm_errf(err, RM_EIO, "%s: %s", src, strerror(errno));
    } else if (S_ISDIR(st.st_mode) && !text) {
        rc = list_shards(src, split, &names, &nn, err);
    } else {
        names = malloc(sizeof *names);
        if (names && (names[0] = strdup(src)))
            nn = 1;
        else
            rc = rm_errf(err, RM_ENOMEM, "data: out of memory");
    }
    if (rc == RM_OK) {
        s->p = calloc((size_t)nn, sizeof *s->p);
        s->first = calloc((size_t)nn + 1, sizeof *s->first);
        if (!s->p || !s->first)
            rc = rm_errf(err, RM_ENOMEM, "data: out of memory");
    }
    for (int i = 0; i < nn && rc == RM_OK; i++) {
        piece *p = &s->p[i];
        rc = map_file(names[i], text, p, err);
        s->npieces = i + 1;
        if (rc == RM_OK && (text || !S_ISDIR(st.st_mode)))
            cut_split(p, t, split);
        if (rc == RM_OK && scan)
            rc = check_tokens(p, names[i], vocab, err);
        if (rc == RM_OK) {
            p->windows = p->n > 0 ? (p->n - 1) / (uint64_t)context : 0;
            s->first[i + 1] = s->first[i] + p->windows;
        }
    }
    uint64_t windows = s->npieces ? s->first[s->npieces] : 0;
    if (rc == RM_OK && windows == 0)
        rc = rm_errf(err, RM_EINVAL, "%s: the %s split has no window of context %d + 1 tokens", src,
                     split == RM_SPLIT_TRAIN ? "training" : "validation", context);
    if (rc == RM_OK && windows > UINT32_MAX)
        rc = rm_errf(err, RM_EINVAL, "%s: %llu windows (at most %u per split)", src,
                     (unsigned long long)windows, UINT32_MAX);
    for (int i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    if (rc) {
        stream_close(s);
        return rc;
    }
    *info = (rm_data_info){.n = (int64_t)windows,
                           .inputs = context,
                           .classes = vocab,
                           .x_row_bytes = (size_t)context * sizeof(int32_t),
                           .label_row = context};
    *state = s;
    return RM_OK;
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Window w into x and labels (context int32 each), jitter tokens late when jitter is set (the
 * training split: each epoch shows every token at other positions of its window, as nanoGPT's
 * random offsets do; the shift is a function of (seed, epoch, window), so the order stays one of
 * (seed, epoch, rank) alone). Validation windows are aligned. */
static void put_window_at(const stream *s, uint64_t w, uint64_t jitter, int32_t *x, int32_t *labels)
{
    int lo = 0, hi = s->npieces - 1;
    while (lo < hi) { /* the piece holding window w */
        int mid = (lo + hi + 1) / 2;
        if (s->first[mid] <= w)
            lo = mid;
        else
            hi = mid - 1;
    }
    const piece *p = &s->p[lo];
    uint64_t at = (w - s->first[lo]) * (uint64_t)s->context;
    if (jitter) {
        uint64_t j = mix64(jitter ^ w) % (uint64_t)s->context;
        uint64_t room = p->n - 1 - (uint64_t)s->context - at; /* >= 0: the window fits aligned */
        at += j < room ? j : room;
    }
    for (int i = 0; i < s->context; i++) {
        x[i] = (int32_t)token_at(p, at + (uint64_t)i);
        labels[i] = (int32_t)token_at(p, at + (uint64_t)i + 1);
    }
}

static void put_window(const stream *s, uint64_t w, int32_t *x, int32_t *labels)
{
    put_window_at(s, w, 0, x, labels);
}

static void stream_set_epoch(void *state, uint64_t seed, int epoch)
{
    stream *s = state;
    s->jitter = mix64(seed ^ mix64((uint64_t)epoch + 1)) | 1;
}

static void stream_gather(const void *state, const uint32_t *perm, int64_t pos, int rank, int world, int rows,
                          void *x, int32_t *labels)
{
    const stream *s = state;
    for (int i = 0; i < rows; i++) {
        uint64_t w = perm[pos + rank + (int64_t)i * world];
        put_window_at(s, w, s->jitter, (int32_t *)x + (size_t)i * (size_t)s->context,
                      labels + (size_t)i * (size_t)s->context);
    }
}

static void stream_slice(const void *state, int64_t start, int rows, void *x, int32_t *labels)
{
    const stream *s = state;
    for (int i = 0; i < rows; i++)
        put_window(s, (uint64_t)(start + i), (int32_t *)x + (size_t)i * (size_t)s->context,
                   labels + (size_t)i * (size_t)s->context);
}

static int tokens_open(const char *src, const rm_training_spec *t, rm_data_split split, void **state,
                       rm_data_info *info, rm_err *err)
{
    return stream_open(src, t, split, false, true, state, info, err);
}

static int text_open(const char *src, const rm_training_spec *t, rm_data_split split, void **state,
                     rm_data_info *info, rm_err *err)
{
    return stream_open(src, t, split, true, true, state, info, err);
}

/* The probe maps the training split without reading its tokens. */
static int probe_with(const char *src, const rm_training_spec *t, bool text, rm_data_info *out, rm_err *err)
{
    void *st = NULL;
    RM_CHECK(stream_open(src, t, RM_SPLIT_TRAIN, text, false, &st, out, err));
    stream_close(st);
    return RM_OK;
}

static int tokens_probe(const char *src, const rm_training_spec *t, rm_data_info *out, rm_err *err)
{
    return probe_with(src, t, false, out, err);
}

static int text_probe(const char *src, const rm_training_spec *t, rm_data_info *out, rm_err *err)
{
    return probe_with(src, t, true, out, err);
}

const rm_data_reader rm_data_tokens = {
    .format = "tokens",
    .probe = tokens_probe,
    .open = tokens_open,
    .close = stream_close,
    .gather = stream_gather,
    .slice = stream_slice,
    .set_epoch = stream_set_epoch,
};

const rm_data_reader rm_data_text = {
    .format = "text",
    .probe = text_probe,
    .open = text_open,
    .close = stream_close,
    .gather = stream_gather,
    .slice = stream_slice,
    .set_epoch = stream_set_epoch,
};
