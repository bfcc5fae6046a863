/* output.h — the exported model to where spec.output.uri says (docs/models-and-data.md,
 * "Exported models"; README, "The TrainingJob"): a local folder (`/path` or `file:///path`), each
 * file written atomically (a temporary beside it, then rename), or `s3://bucket/prefix/`, the files
 * written to a local staging folder first and then uploaded by common/fetch.h's rm_upload_file
 * (one PUT, or multipart above the threshold). The end of a run (worker/train_state.c) and
 * `ringmaster-worker export` (worker/export_cmd.c) both write through rm_model_write_out.
 *
 * What is reported (status.result.model): the URI of model.safetensors where it landed, its
 * sha256 and its size — of the bytes written locally, which are the bytes uploaded.
 *
 * Ownership: strings and the model are borrowed for the call; *res is the caller's. */
#ifndef RM_WORKER_MODEL_OUTPUT_H
#define RM_WORKER_MODEL_OUTPUT_H
#include <stdint.h>
#include "common/rm.h"
#include "common/trainingjob.h"
#include "worker/model/model.h"

typedef struct rm_model_output_result {
    char
        uri[RM_TJ_URI_MAX]; /* model.safetensors: "/path/model.safetensors" or "s3://b/p/model.safetensors" */
    char sha256[65];
    uint64_t bytes;
    int parts; /* parts of the weights' multipart upload; 0 = one PUT or local */
} rm_model_output_result;

/* Write m's weights (host_params: nparams floats) and config.json in dtype to out_uri. staging is
 * the local folder an s3:// export is written to before its upload (ignored for a local
 * out_uri). field names every error ("spec.output.uri", "--out"). RM_EIO / RM_EAUTH / ... as the
 * write or the upload failed, with err naming the folder or the s3:// URI, never a credential. */
int rm_model_write_out(const rm_model *m, const float *host_params, const char *out_uri, const char *staging,
                       rm_output_dtype dtype, const char *field, rm_model_output_result *res, rm_err *err);

/* Remove a staging folder rm_model_write_out wrote into (its two files, then the folder); "" or NULL
 * = nothing to do. */
void rm_model_output_staging_remove(const char *staging);
#endif
