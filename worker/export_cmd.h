/* export_cmd.h — `ringmaster-worker export` (run by `ringmaster export`, operator/export.c): the
 * newest checkpoint of a checkpoint folder written out as a model, as the end of a job writes it
 * (docs/models-and-data.md, "Exported models"; README, "The model out").
 *
 *   export --checkpoint DIR --out DIR|file:///DIR|s3://bucket/prefix/ [--dtype float32|bfloat16]
 *
 * The checkpoint is read through worker/sample.h's rm_ckpt_model_load (any layout its manifest
 * describes: plain, sharded, pipeline stages), written by worker/model/output.h's
 * rm_model_write_out (an s3:// output is staged in a temporary folder, uploaded with the AWS_*
 * variables, then the folder removed). stdout gets one JSON line {"uri","sha256","bytes","step"}
 * (status.result.model's keys and the checkpoint's step); logs go to stderr.
 *
 * Returns the process exit status: 0, 1 (a checkpoint that cannot be read, an output that cannot
 * be written), 2 (usage: every error names its flag). */
#ifndef RM_WORKER_EXPORT_CMD_H
#define RM_WORKER_EXPORT_CMD_H
int rm_worker_export_main(int argc, char **argv);
#endif
