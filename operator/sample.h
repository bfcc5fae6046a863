/* sample.h — `ringmaster sample`: text from a trained language model. The generation itself is
 * the worker's (worker/sample.c links the model and the kernels, which this binary does not):
 * this command runs `ringmaster-worker sample` with the same flags, found as `ringmaster run`
 * finds it ($RINGMASTER_WORKER_BIN, else beside this binary). Returns the exit status. */
#ifndef RM_OPERATOR_SAMPLE_H
#define RM_OPERATOR_SAMPLE_H

int rm_sample_main(int argc, char **argv);
/* exec `ringmaster-worker SUB argv[1..]` (the worker binary found as above); returns 1 only when
 * it cannot be run. argv is borrowed (it becomes the new process's). */
int rm_worker_exec(const char *sub, int argc, char **argv);
#endif
