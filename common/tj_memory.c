/* tj_memory.c — what one worker of a TrainingJob needs in memory, and the checks that refuse a
 * job that cannot fit (trainingjob.h: rm_training_memory, rm_tj_check_memory*).
 *
 * Design: the estimate follows the worker's own allocations (worker/model/, worker/optim/,
 * worker/train.c) rather than measuring, so `validate`, `run` and the operator can refuse a job
 * before any pod starts. Quantities (a container's memory limit, RINGMASTER_MEMORY_LIMIT) are
 * read by common/quantity.c, Kubernetes' own grammar, so the two sides agree on "1.5Gi". */
#include "common/tj_internal.h"
#include "common/quantity.h"
#include "common/datasets.h"
#include "common/json.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* builtin:fashion-mnist's shape (28x28 pixels, 10 classes) and test set: the estimate's default; a
 * user's data set sizes the model from its own headers in the worker (docs/models-and-data.md) */
#define TJ_INPUTS 784
#define TJ_CLASSES 10
#define TJ_TEST_SAMPLES 10000

void tj_fmt_bytes(char *buf, size_t cap, int64_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%lld B", (long long)n);
    else
        snprintf(buf, cap, "%.1f %s", v, unit[u]);
}

static bool is_gpt(const rm_training_spec *t)
{
    return t->model_type && strcmp(t->model_type, rm_model_type_names[RM_MODEL_GPT]) == 0;
}

/* The transformer's allocations (worker/model/gpt.c): the embedding, 12C^2 + 13C per block and
 * ln_f; per sequence the embedding output, each block's kept activations (LayerNorms, QKV, the
 * attention output and its log-sum-exp per head, the residuals, the MLP's 4C pre-activation and
 * GELU), the head's LayerNorm and logits, and the backward scratch (7C per position); the
 * attention's blocked scratch (blocks of 16-32 query rows x the context, per thread, 64 at most).
 * Token data is mapped, not loaded: it costs no resident memory of its own. */
static void gpt_memory(const rm_training_spec *t, int nstate, rm_mem_estimate *out)
{
    int64_t L = t->layers, C = t->embed, T = t->context, NH = t->heads > 0 ? t->heads : 1;
    int64_t V = t->vocab > 0 ? t->vocab : 256,
            b = t->batch_size_per_worker > 0 ? t->batch_size_per_worker : 1;
    int64_t params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    int64_t per_row = T * C + L * (T * (16 * C + 4) + NH * T) + T * (C + 2 + V) + T * 7 * C + 2 * T;
    int64_t attn = 2 * (T >= 256 ? 32 : 16) * T * 64;
    out->params = params;
    out->copies = 2 + nstate + (1 + nstate);
    out->model_bytes = params * out->copies * 4;
    out->batch_bytes = 4 * (b * per_row + attn + 12 * C * C + 13 * C + V * C + T * C);
    out->data_bytes = 0;
    out->total = out->model_bytes + out->batch_bytes + RM_TJ_MEM_OVERHEAD;
}

void rm_training_memory(const rm_training_spec *t, rm_mem_estimate *out)
{
    memset(out, 0, sizeof *out);
    rm_opt_type ot = t->optimizer.type;
    int nstate = ot == RM_OPT_ADAM || ot == RM_OPT_ADAMW || ot == RM_OPT_LAMB ? 2 : 1;
    if (is_gpt(t)) {
        gpt_memory(t, nstate, out);
        return;
    }
    int64_t params = 0, acts = 0, widest = 1, in = TJ_INPUTS;
    int nh = t->nhidden < 0 ? 0 : t->nhidden > RM_TJ_MAX_HIDDEN ? RM_TJ_MAX_HIDDEN : t->nhidden;
    for (int i = 0; i <= nh; i++) {
        int64_t o = i < nh ? (t->hidden[i] > 0 ? t->hidden[i] : 1) : TJ_CLASSES;
        params += in * o + o;
        acts += o;
        if (i < nh && o > widest)
            widest = o;
        in = o;
    }
    int64_t b = t->batch_size_per_worker > 0 ? t->batch_size_per_worker : 1;
    int64_t n = rm_training_samples(t);
    out->params = params;
    out->copies = 2 + nstate + (1 + nstate); /* weights, grads, state, staging */
    out->model_bytes = params * out->copies * 4;
    out->batch_bytes = 4 * b * (TJ_INPUTS + 1 + 2 * widest + acts);
    out->data_bytes = n > 0 ? (n + TJ_TEST_SAMPLES) * (TJ_INPUTS + 1) + 4 * n : 0;
    out->total = out->model_bytes + out->batch_bytes + out->data_bytes + RM_TJ_MEM_OVERHEAD;
}

int rm_tj_check_memory(const rm_tj *tj, int64_t cap_bytes, int workers, const char *cap_what, rm_err *err)
{
    const rm_training_spec *t = &tj->spec.training;
    if (t->mode != RM_MODE_TRAIN || cap_bytes <= 0)
        return RM_OK;
    if (workers < 1)
        workers = 1;
    rm_mem_estimate me;
    rm_training_memory(t, &me);
    if (me.total <= cap_bytes / workers)
        return RM_OK;
    char tot[32], model[32], batch[32], data[32], all[32], capb[32];
    tj_fmt_bytes(tot, sizeof tot, me.total);
    tj_fmt_bytes(model, sizeof model, me.model_bytes);
    tj_fmt_bytes(batch, sizeof batch, me.batch_bytes);
    tj_fmt_bytes(data, sizeof data, me.data_bytes);
    tj_fmt_bytes(all, sizeof all, me.total * workers);
    tj_fmt_bytes(capb, sizeof capb, cap_bytes);
    char per[64] = "";
    if (workers > 1)
        snprintf(per, sizeof per, " x %d workers = %s", workers, all);
    return rm_err_field(err, RM_EINVAL, "spec.training.model",
                        "needs an estimated %s per worker (%lld parameters x %d copies = %s, batch %d = "
                        "%s, dataset %s, runtime 32 MiB)%s, more than %s (%s)",
                        tot, (long long)me.params, me.copies, model, t->batch_size_per_worker, batch, data,
                        per, cap_what ? cap_what : "the memory cap", capb);
}

int rm_tj_check_memory_local(const rm_tj *tj, rm_err *err)
{
    const char *env = getenv("RINGMASTER_MEMORY_LIMIT");
    int64_t cap = 0;
    char what[128];
    int workers = rm_tj_most_workers(&tj->spec);
    if (env && *env) {
        if (rm_quantity_bytes(env, &cap) != RM_OK)
            return rm_errf(err, RM_EINVAL,
                           "RINGMASTER_MEMORY_LIMIT: must be a Kubernetes quantity such "
                           "as 512Mi or 4Gi (got \"%.40s\")",
                           env);
        snprintf(what, sizeof what, "RINGMASTER_MEMORY_LIMIT for the %d workers on this machine", workers);
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || psize <= 0)
            return RM_OK;
        cap = (int64_t)pages * psize;
        snprintf(what, sizeof what, "this machine's physical memory for its %d workers", workers);
    }
    return rm_tj_check_memory(tj, cap, workers, what, err);
}

/* The worker container's resources.limits.memory (the container named "worker", else the first),
 * checked against the estimate for one worker. */
int tj_check_template_memory(const rm_tj *tj, rm_err *err)
{
    const cJSON *cs = rm_json_path(tj->spec.template, "spec.containers");
    const cJSON *c, *w = NULL;
    int i = 0, wi = 0;
    cJSON_ArrayForEach(c, cs)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
        if (!w || (cJSON_IsString(n) && strcmp(n->valuestring, "worker") == 0)) {
            w = c;
            wi = i;
        }
        i++;
    }
    const cJSON *m = rm_json_path(w, "resources.limits.memory");
    if (!m)
        return RM_OK;
    char f[FIELD_CAP];
    snprintf(f, sizeof f, "spec.template.spec.containers[%d].resources.limits.memory", wi);
    int64_t milli = 0;
    if (rm_quantity_json_milli(m, &milli) != RM_OK)
        return rm_err_field(err, RM_EINVAL, f, "must be a Kubernetes quantity such as 512Mi or 4Gi");
    int64_t cap = milli / 1000 + (milli % 1000 != 0); /* whole bytes, rounded up */
    return rm_tj_check_memory(tj, cap, 1, "the worker container's memory limit", err);
}

int64_t rm_training_samples(const rm_training_spec *t)
{
    if (t->data.uri && strcmp(t->data.uri, RM_TJ_BUILTIN_TINYSHAKESPEARE) == 0 && t->context > 0) {
        /* context windows of the training part (worker/data/stream.c: the last fraction validates) */
        double f = t->data.val_fraction > 0 ? t->data.val_fraction : 0.1;
        int64_t val = (int64_t)((double)RM_TJ_TINYSHAKESPEARE_BYTES * f);
        return (RM_TJ_TINYSHAKESPEARE_BYTES - val - 1) / t->context;
    }
    if (t->data.uri && strcmp(t->data.uri, RM_TJ_BUILTIN_FASHION_MNIST) != 0)
        return 0; /* the user's data: its size is the worker's to read */
    bool builtin_dir = !t->data_dir || strcmp(t->data_dir, RM_TJ_FASHION_MNIST_DIR) == 0;
    if ((!t->dataset || strcmp(t->dataset, "fashion-mnist") == 0) && builtin_dir)
        return RM_TJ_FASHION_MNIST_TRAIN;
    return 0;
}

double rm_tj_steps_total(const rm_tj_spec *s)
{
    const rm_training_spec *t = &s->training;
    double cap = t->max_steps > 0 ? (double)t->max_steps : 0;
    int64_t n = rm_training_samples(t);
    int stages = s->par.pipeline_stages > 1 ? s->par.pipeline_stages : 1;
    stages *= s->par.tensor_parallel > 1 ? s->par.tensor_parallel : 1; /* a tensor group shares a batch */
    int64_t dp = (s->replicas > 0 ? s->replicas : 1) / stages;
    int64_t G =
        (int64_t)t->batch_size_per_worker * (dp > 0 ? dp : 1) * (t->grad_accum > 1 ? t->grad_accum : 1);
    if (n <= 0 || G <= 0)
        return cap;
    double total = (double)(n / G) * t->epochs;
    return cap > 0 && cap < total ? cap : total;
}

void rm_tj_progress_estimate(const rm_tj_spec *s, rm_tj_progress *p)
{
    p->percent = p->eta_seconds = 0;
    double total = rm_tj_steps_total(s);
    if (total <= 0 || s->strategy == RM_STRATEGY_PS || p->step <= 0)
        return;
    double step = p->step < total ? (double)p->step : total;
    p->percent = floor(1000.0 * step / total) / 10.0;
    const rm_training_spec *t = &s->training;
    double per_step = (double)t->batch_size_per_worker * (t->grad_accum > 1 ? t->grad_accum : 1);
    if (p->samples_per_second > 0 && per_step > 0 && step < total)
        p->eta_seconds = ceil((total - step) * per_step / p->samples_per_second);
}
