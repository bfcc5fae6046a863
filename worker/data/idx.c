/* idx.c — the IDX reader (data.format: idx): MNIST-style image and label files in a folder,
 * gzipped or plain (data.h holds the file parsing, the permutation and the row gathering). Rows
 * are the images scaled to [0, 1] as fp32; one int32 label per row; classes = 1 + the largest
 * training label, and a test label outside them is an error naming the file. */
#include "worker/data/data.h"
#include "worker/data/reader.h"

#include <stdlib.h>

static void info_of(const rm_dataset *d, rm_data_info *out)
{
    *out = (rm_data_info){.n = d->n,
                          .inputs = d->rows * d->cols,
                          .classes = d->classes,
                          .x_row_bytes = (size_t)d->rows * (size_t)d->cols * sizeof(float),
                          .label_row = 1};
}

static int idx_probe(const char *src, const rm_training_spec *t, rm_data_info *out, rm_err *err)
{
    int inputs = 0, classes = 0;
    RM_CHECK(rm_dataset_probe(src, &inputs, &classes, err));
    *out = (rm_data_info){
        .inputs = inputs, .classes = classes, .x_row_bytes = (size_t)inputs * sizeof(float), .label_row = 1};
    return RM_OK;
}

static int idx_open(const char *src, const rm_training_spec *t, rm_data_split split, void **state,
                    rm_data_info *info, rm_err *err)
{
    rm_dataset *d = calloc(1, sizeof *d);
    if (!d)
        return rm_errf(err, RM_ENOMEM, "data: out of memory");
    int rc = rm_dataset_load(src, split == RM_SPLIT_TRAIN, d, err);
    if (rc) {
        free(d);
        return rc;
    }
    info_of(d, info);
    *state = d;
    return RM_OK;
}

static void idx_close(void *state)
{
    rm_dataset_free(state);
    free(state);
}

static void idx_gather(const void *state, const uint32_t *perm, int64_t pos, int rank, int world, int rows,
                       void *x, int32_t *labels)
{
    rm_data_gather(state, perm, pos, rank, world, rows, x, labels);
}

static void idx_slice(const void *state, int64_t start, int rows, void *x, int32_t *labels)
{
    rm_data_slice(state, (int)start, rows, x, labels);
}

const rm_data_reader rm_data_idx = {
    .format = "idx",
    .probe = idx_probe,
    .open = idx_open,
    .close = idx_close,
    .gather = idx_gather,
    .slice = idx_slice,
};
