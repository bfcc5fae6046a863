/* reader.c — picking the reader and the source of a spec's data, and the calls every format shares
 * (reader.h). IDX is the default format (the built-in data set's). */
#include "worker/data/reader.h"

#include "common/datasets.h"

#include <string.h>

#include "worker/data/data.h"

const rm_data_reader *rm_data_reader_of(rm_data_format f)
{
    switch (f) {
    case RM_DATA_IDX:
        return &rm_data_idx;
    case RM_DATA_TOKENS:
        return &rm_data_tokens;
    case RM_DATA_TEXT:
        return &rm_data_text;
    }
    return NULL;
}

int rm_data_source(const rm_training_spec *t, const rm_data_reader **r, char *src, size_t cap, rm_err *err)
{
    rm_data_format f = RM_DATA_IDX;
    if (t->data.uri) { /* builtin:<name>, /path, file:///path (common/datasets.h) */
        RM_CHECK(rm_data_local_path(t->data.uri, src, cap, &f, err));
        if (strncmp(t->data.uri, "builtin:", 8) != 0)
            f = rm_data_sniff(src);
    } else { /* the deprecated dataDir, else the built-in Fashion-MNIST folder */
        const char *dir = t->data_dir && *t->data_dir ? t->data_dir : RM_DATA_DEFAULT_DIR;
        if (strlen(dir) >= cap)
            return rm_err_field(err, RM_EINVAL, "spec.training.dataDir", "path longer than %zu bytes",
                                cap - 1);
        memcpy(src, dir, strlen(dir) + 1);
    }
    if (t->set2 & RM_TR_SET2_FORMAT)
        f = t->data.format;
    *r = rm_data_reader_of(f);
    if (!*r)
        return rm_err_field(err, RM_EUNSUPPORTED, "spec.training.data.format", "%s is not supported yet",
                            rm_enum_name(rm_data_format_names, (int)f));
    return RM_OK;
}

int rm_data_probe(const rm_training_spec *t, rm_data_info *out, rm_err *err)
{
    const rm_data_reader *r;
    char src[4096];
    memset(out, 0, sizeof *out);
    RM_CHECK(rm_data_source(t, &r, src, sizeof src, err));
    return r->probe(src, t, out, err);
}

int rm_data_open(const rm_training_spec *t, rm_data_split split, rm_data *out, rm_err *err)
{
    const rm_data_reader *r;
    char src[4096];
    memset(out, 0, sizeof *out);
    RM_CHECK(rm_data_source(t, &r, src, sizeof src, err));
    RM_CHECK(r->open(src, t, split, &out->state, &out->info, err));
    out->r = r;
    return RM_OK;
}

void rm_data_close(rm_data *d)
{
    if (!d || !d->r)
        return;
    d->r->close(d->state);
    memset(d, 0, sizeof *d);
}
