/* step_bench.c — ringmaster's training step time on the GPU, for the side-by-side with PyTorch
 * (bench/gpu/torch_step.py runs the same model, batch, optimizer and precision).
 *
 * One step = upload nothing (the batch stays on the device, as a data loader with prefetch would
 * hide it), forward, softmax cross-entropy, backward, SGD-momentum update, exactly the calls
 * worker/train.c makes through the kernels table (worker/model/model.h), on one GPU without comm.
 * Timing: W warm-up steps, then N steps between two host syncs; ms/step and the achieved
 * TFLOP/s of the matrix products (forward 2*B*in*out per layer, backward 4*B*in*out except layer 0
 * which has no dX product: what the model actually computes).
 * Usage: step_bench --hidden 512,256 --batch 64 --precision bf16 [--steps 200] [--warmup 20]
 * Output: one line "RESULT name=... ms_per_step=... tflops=..." for bench/gpu/run.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "worker/gpu.h"
#include "worker/model/mlp.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int hidden[RM_TJ_MAX_HIDDEN] = {512, 256}, nh = 2, batch = 64, steps = 200, warmup = 20;
    rm_precision prec = RM_PREC_BF16;
    const char *name = "mlp";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--hidden")) {
            nh = 0;
            for (char *s = argv[i + 1]; *s && nh < RM_TJ_MAX_HIDDEN;) {
                hidden[nh++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    s++;
                else if (*s)
                    break;
            }
        } else if (!strcmp(argv[i], "--batch")) {
            batch = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--steps")) {
            steps = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--warmup")) {
            warmup = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--name")) {
            name = argv[i + 1];
        } else if (!strcmp(argv[i], "--precision")) {
            prec = !strcmp(argv[i + 1], "fp32")   ? RM_PREC_FP32
                   : !strcmp(argv[i + 1], "fp16") ? RM_PREC_FP16
                                                  : RM_PREC_BF16;
        } else {
            fprintf(stderr, "unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    char why[256];
    if (!rm_gpu_available(why, sizeof why)) {
        printf("SKIP: no GPU present (%s)\n", why);
        return 0;
    }
    rm_err e = {0};
    const rm_kernels *k = rm_kernels_cuda();
    if (!k || rm_cuda_set_precision(prec, &e) != RM_OK) {
        fprintf(stderr, "CUDA table: %s\n", e.msg);
        return 1;
    }
    rm_model_shape shape;
    rm_model m;
    memset(&m, 0, sizeof m);
    if (rm_mlp_shape(&shape, 784, hidden, nh, 10, &e) != RM_OK ||
        rm_model_init(&m, k, &rm_model_mlp, &shape, batch, &e) != RM_OK ||
        rm_model_init_params(&m, 42, &e) != RM_OK) {
        fprintf(stderr, "model: %s\n", e.msg);
        return 1;
    }
    size_t nx = (size_t)batch * 784;
    float *hx = malloc(nx * sizeof *hx);
    int32_t *hl = malloc((size_t)batch * sizeof *hl);
    float *mom = k->alloc(m.nparams * sizeof(float));
    if (!hx || !hl || !mom) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < nx; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        hx[i] = (float)(r >> 40) / 16777216.0f;
    }
    for (int i = 0; i < batch; i++)
        hl[i] = i % 10;
    k->h2d(m.x, hx, nx * sizeof(float));
    k->h2d(m.labels, hl, (size_t)batch * sizeof(int32_t));
    double flops = 0;
    for (int l = 0; l < shape.nlayers; l++)
        flops += (l == 0 ? 4.0 : 6.0) * batch * (double)shape.dims[l] * shape.dims[l + 1];
    double t0 = 0;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            k->sync();
            t0 = now_s();
        }
        rm_model_forward(&m, batch);
        rm_model_backward(&m, batch, 1.0f / (float)batch, NULL, NULL);
        k->sgd_momentum_update(m.params, m.grads, mom, m.nparams, 0.01f, 0.9f, 0.0f);
    }
    k->sync();
    double dt = (now_s() - t0) / (steps > 0 ? steps : 1);
    float loss = 0;
    k->d2h(&loss, m.loss_sum, sizeof loss);
    if (rm_cuda_check(&e) != RM_OK) {
        fprintf(stderr, "CUDA error: %s\n", e.msg);
        return 1;
    }
    char sh[128];
    rm_model_shape_str(&m, sh, sizeof sh);
    printf("RESULT impl=ringmaster name=%s shape=%s batch=%d precision=%s ms_per_step=%.4f "
           "tflops=%.1f loss=%.4f\n",
           name, sh, batch, rm_precision_str(prec), dt * 1e3, flops / dt / 1e12, loss / (float)batch);
    k->free(mom);
    rm_model_free(&m);
    free(hx);
    free(hl);
    return 0;
}
