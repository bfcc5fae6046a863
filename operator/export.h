/* export.h — `ringmaster export --checkpoint DIR --out DIR|s3://... [--dtype bfloat16]`: a
 * checkpoint folder's newest checkpoint written out as a model, like the end of a job. The model
 * code is the worker's: this command runs `ringmaster-worker export` (worker/export_cmd.h) with the
 * same flags, as `ringmaster sample` does (operator/sample.h). Returns the exit status. */
#ifndef RM_OPERATOR_EXPORT_H
#define RM_OPERATOR_EXPORT_H

int rm_export_main(int argc, char **argv);
#endif
