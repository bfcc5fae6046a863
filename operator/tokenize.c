/* tokenize.c — `ringmaster tokenize`: raw text into llm.c token shards (common/token_shard.h), one
 * token per byte (vocabulary 256; docs/models-and-data.md, "Data formats"), so a text corpus can be
 * trained as `data.format: tokens` and shards from any other tokenizer sit beside it in the same
 * form. The last --val-fraction of the text becomes the validation shards; each split is cut into
 * shards of at most --shard-tokens tokens: OUT/<name>_train_NNNNNN.bin and OUT/<name>_val_NNNNNN.bin,
 * listed in OUT/index.txt (what an http(s) folder URI fetches by: common/fetch.h). Exit 0, or 2 with a message naming the flag or file at fault. */
#include "operator/run.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fetch.h"
#include "common/fs.h"
#include "common/token_shard.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ringmaster tokenize [--val-fraction F] [--shard-tokens N] [--name NAME] INPUT OUTDIR\n"
            "  writes INPUT (raw text, one token per byte) as token shards in OUTDIR:\n"
            "  NAME_train_000000.bin ... and NAME_val_000000.bin ... (NAME: INPUT's base name\n"
            "  without its extension), listed in OUTDIR/index.txt (for serving the folder over HTTP)\n"
            "  --val-fraction F   the last F of the text is the validation split (default 0.1, 0 <= F < 1)\n"
            "  --shard-tokens N   tokens per shard at most (default 100000000)\n");
}

/* tokens [from, to) of text as shards name_split_NNNNNN.bin in dir; *written counts files, and
 * each file's name goes to the index (idx, a line each, capped at icap) */
static int write_split(const unsigned char *text, size_t from, size_t to, size_t per, const char *dir,
                       const char *name, const char *split, uint32_t *buf, int *written, char *idx,
                       size_t *ilen, size_t icap, rm_err *err)
{
    int k = 0;
    for (size_t at = from; at < to; at += per, k++) { /* the caller never asks for an empty split */
        size_t n = to - at < per ? to - at : per;
        for (size_t i = 0; i < n; i++)
            buf[i] = text[at + i];
        char path[4200];
        if ((size_t)snprintf(path, sizeof path, "%s/%s_%s_%06d.bin", dir, name, split, k) >= sizeof path)
            return rm_errf(err, RM_EINVAL, "OUTDIR: path too long");
        RM_CHECK(rm_tok_write_shard(path, buf, n, err));
        (*written)++;
        size_t w = (size_t)snprintf(idx + *ilen, icap - *ilen, "%s_%s_%06d.bin\n", name, split, k);
        if (w >= icap - *ilen)
            return rm_errf(err, RM_ETOOBIG, "OUTDIR/%s: over %zu bytes", RM_FETCH_INDEX_NAME, icap);
        *ilen += w;
    }
    return RM_OK;
}

int rm_tokenize_main(int argc, char **argv)
{
    double frac = 0.1;
    long long per = 100000000;
    const char *name = NULL;
    static const struct option opts[] = {
        {"val-fraction", required_argument, NULL, 'v'},
        {"shard-tokens", required_argument, NULL, 's'},
        {"name", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'v':
            frac = strtod(optarg, &end);
            if (!end || *end || !(frac >= 0 && frac < 1)) {
                fprintf(stderr, "ringmaster tokenize: --val-fraction: a number >= 0 and < 1, got \"%s\"\n",
                        optarg);
                return 2;
            }
            break;
        case 's':
            per = strtoll(optarg, &end, 10);
            if (!end || *end || per < 1 || per > UINT32_MAX) {
                fprintf(stderr, "ringmaster tokenize: --shard-tokens: 1..%u, got \"%s\"\n", UINT32_MAX,
                        optarg);
                return 2;
            }
            break;
        case 'n':
            name = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 2) {
        usage(stderr);
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1];
    char base[256];
    if (!name) { /* INPUT's base name without its extension */
        const char *b = strrchr(in, '/');
        snprintf(base, sizeof base, "%s", b ? b + 1 : in);
        char *dot = strrchr(base, '.');
        if (dot && dot != base)
            *dot = 0;
        name = base;
    }
    if (!*name || strchr(name, '/')) {
        fprintf(stderr, "ringmaster tokenize: --name: a file name, got \"%s\"\n", name);
        return 2;
    }
    rm_err err = {0};
    void *map;
    size_t size;
    if (rm_fs_map_file(in, &map, &size, &err) != RM_OK) {
        fprintf(stderr, "ringmaster tokenize: %s\n", err.msg);
        return 2;
    }
    if (size == 0) { /* nothing mapped */
        fprintf(stderr, "ringmaster tokenize: %s: empty file\n", in);
        return 2;
    }
    size_t val = (size_t)((double)size * frac), train = size - val, chunk = (size_t)per;
    uint32_t *buf = malloc((chunk < size ? chunk : size) * sizeof *buf + sizeof *buf);
    /* index.txt: the shards' names, what an http(s) folder URI lists (docs/models-and-data.md,
     * "Folders over HTTP and S3"), so OUTDIR can be served as it is */
    size_t nfiles = (train + chunk - 1) / chunk + (val + chunk - 1) / chunk,
           icap = (nfiles + 1) * (strlen(name) + 24), ilen = 0;
    char *idx = malloc(icap);
    int files = 0, rc = buf && idx ? rm_fs_mkdir_p(out, &err) : rm_errf(&err, RM_ENOMEM, "out of memory");
    if (rc == RM_OK)
        rc = write_split(map, 0, train, chunk, out, name, "train", buf, &files, idx, &ilen, icap, &err);
    if (rc == RM_OK && val > 0)
        rc = write_split(map, train, size, chunk, out, name, "val", buf, &files, idx, &ilen, icap, &err);
    if (rc == RM_OK) {
        char ip[4200];
        rm_fs_piece pc = {idx, ilen};
        rm_sfmt(ip, sizeof ip, "%s/%s", out, RM_FETCH_INDEX_NAME);
        rc = rm_fs_write_atomic(ip, &pc, 1, &err);
    }
    free(idx);
    free(buf);
    munmap(map, size);
    if (rc) {
        fprintf(stderr, "ringmaster tokenize: %s\n", err.msg);
        return 2;
    }
    printf("%s: %zu tokens (vocabulary 256): %zu training, %zu validation, in %d shard%s in %s\n", in, size,
           train, val, files, files == 1 ? "" : "s", out);
    return 0;
}
