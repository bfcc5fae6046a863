/* token_shard.c — see token_shard.h. */
#include "common/token_shard.h"

#include <stdlib.h>
#include <string.h>

#include "common/fs.h"

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

int rm_tok_header_parse(const unsigned char hdr[RM_TOK_HEADER_BYTES], uint64_t file_size, const char *what,
                        rm_tok_header *out, rm_err *err)
{
    uint32_t magic = le32(hdr), version = le32(hdr + 4), count = le32(hdr + 8);
    if (magic == RM_TOK_MAGIC_U16 && version == RM_TOK_VERSION_U16)
        out->token_bytes = 2;
    else if (magic == RM_TOK_MAGIC_U32 && version == RM_TOK_VERSION_U32)
        out->token_bytes = 4;
    else if (magic == RM_TOK_MAGIC_U16 || magic == RM_TOK_MAGIC_U32)
        return rm_errf(err, RM_EINVAL, "%s: header version %u does not go with magic %u (%d or %d)", what,
                       version, magic, RM_TOK_VERSION_U16, RM_TOK_VERSION_U32);
    else
        return rm_errf(err, RM_EINVAL, "%s: header magic %u is not a token shard's (%d or %d)", what, magic,
                       RM_TOK_MAGIC_U16, RM_TOK_MAGIC_U32);
    out->count = count;
    uint64_t want = RM_TOK_HEADER_BYTES + (uint64_t)count * (uint64_t)out->token_bytes;
    if (file_size != want)
        return rm_errf(err, RM_EINVAL,
                       "%s: the header says %u tokens (%llu bytes), the file has %llu bytes "
                       "(%s)",
                       what, count, (unsigned long long)want, (unsigned long long)file_size,
                       file_size < want ? "truncated" : "trailing bytes");
    return RM_OK;
}

int rm_tok_write_shard(const char *path, const uint32_t *tokens, size_t count, rm_err *err)
{
    if (count > UINT32_MAX)
        return rm_errf(err, RM_EINVAL, "%s: %zu tokens (a shard's header counts at most %u)", path, count,
                       UINT32_MAX);
    int wide = 0;
    for (size_t i = 0; i < count && !wide; i++)
        wide = tokens[i] > UINT16_MAX;
    size_t tb = wide ? 4 : 2;
    unsigned char *buf = malloc(RM_TOK_HEADER_BYTES + count * tb);
    if (!buf)
        return rm_errf(err, RM_ENOMEM, "%s: out of memory for %zu tokens", path, count);
    memset(buf, 0, RM_TOK_HEADER_BYTES);
    put32(buf, wide ? RM_TOK_MAGIC_U32 : RM_TOK_MAGIC_U16);
    put32(buf + 4, wide ? RM_TOK_VERSION_U32 : RM_TOK_VERSION_U16);
    put32(buf + 8, (uint32_t)count);
    unsigned char *p = buf + RM_TOK_HEADER_BYTES;
    for (size_t i = 0; i < count; i++, p += tb) {
        p[0] = (unsigned char)tokens[i];
        p[1] = (unsigned char)(tokens[i] >> 8);
        if (wide) {
            p[2] = (unsigned char)(tokens[i] >> 16);
            p[3] = (unsigned char)(tokens[i] >> 24);
        }
    }
    rm_fs_piece pc = {buf, RM_TOK_HEADER_BYTES + count * tb};
    int rc = rm_fs_write_atomic(path, &pc, 1, err);
    free(buf);
    return rc;
}
