/* data_cost.c — the data phase of a training step, timed alone (bench/data/run.sh;
 * docs/models-and-data.md, "The data-reader interface"): the spec's training split opened through
 * the reader the worker uses (worker/data/reader.h), then per step what the trainer does for data —
 * the rank's rows gathered from the epoch's permutation — and per epoch the permutation and the
 * reader's set_epoch, spread over the epoch's steps.
 *
 * usage: data_cost TRAINING_JSON BATCH STEPS
 * Prints one JSON line: {"format", "rows", "per_step_s", "gather_s", "epoch_s", "steps_per_epoch"}.
 * Ownership: everything is freed before exit; the data set is mapped by the reader, not copied. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/trainingjob.h"
#include "worker/data/data.h"
#include "worker/data/reader.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: data_cost TRAINING_JSON BATCH STEPS\n");
        return 2;
    }
    rm_log_init(RM_LOG_WARN, RM_LOG_TEXT, "bench");
    int batch = atoi(argv[2]), steps = atoi(argv[3]);
    cJSON *doc = cJSON_Parse(argv[1]);
    rm_training_spec t;
    memset(&t, 0, sizeof t);
    rm_err err = {0};
    if (!doc || batch < 1 || steps < 1 || rm_training_from_json(doc, "spec.training", &t, &err) != RM_OK) {
        fprintf(stderr, "data_cost: bad arguments: %s\n", err.msg);
        return 2;
    }
    rm_training_defaults(&t);
    rm_data d;
    if (rm_data_open(&t, RM_SPLIT_TRAIN, &d, &err) != RM_OK) {
        fprintf(stderr, "data_cost: %s\n", err.msg);
        return 1;
    }
    int64_t n = d.info.n, spe = rm_data_steps_per_epoch((int)n, batch);
    uint32_t *perm = malloc((size_t)n * sizeof *perm);
    void *x = malloc((size_t)batch * d.info.x_row_bytes);
    int32_t *labels = malloc((size_t)batch * (size_t)d.info.label_row * sizeof *labels);
    if (!perm || !x || !labels || spe < 1) {
        fprintf(stderr, "data_cost: out of memory, or a batch larger than the %lld rows\n", (long long)n);
        return 1;
    }
    double t0 = rm_mono();
    int epochs = 0;
    for (int e = 0; e < 3; e++, epochs++) { /* the per-epoch part, a few times */
        rm_perm_make(perm, (int)n, t.seed, e);
        rm_data_set_epoch(&d, t.seed, e);
    }
    double epoch_s = (rm_mono() - t0) / epochs;
    double sum = 0; /* every gathered byte is read, as the model's first layer would */
    t0 = rm_mono();
    for (int s = 0; s < steps; s++) {
        int64_t pos = (s % spe) * (int64_t)batch;
        rm_data_gather_rows(&d, perm, pos, 0, 1, batch, x, labels);
        sum += ((const unsigned char *)x)[(size_t)s % ((size_t)batch * d.info.x_row_bytes)] + labels[0];
    }
    double gather_s = (rm_mono() - t0) / steps;
    printf(
        "{\"format\": \"%s\", \"rows\": %lld, \"per_step_s\": %.9f, \"gather_s\": %.9f, \"epoch_s\": %.9f, "
        "\"steps_per_epoch\": %lld, \"checksum\": %.0f}\n",
        d.r->format, (long long)n, gather_s + epoch_s / (double)spe, gather_s, epoch_s, (long long)spe, sum);
    free(perm);
    free(x);
    free(labels);
    rm_data_close(&d);
    rm_training_free(&t);
    cJSON_Delete(doc);
    return 0;
}
