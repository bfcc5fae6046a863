/* kernels_cuda_stub.c — the CPU-only build's answer to "is there a CUDA kernels table": no.
 * The GPU build defines rm_kernels_cuda in kernels/cuda/ instead (the Makefile compiles
 * worker/nocuda/ only when CUDA is off), so rm_kernels_get("cuda") returns NULL here. */
#include "kernels/kernels.h"

const rm_kernels *rm_kernels_cuda(void) { return NULL; }
