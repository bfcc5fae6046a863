/* model.c — the model interface over a family table (model.h): the whole-batch passes built from
 * unit-range passes, parameter init through a host staging copy, and what every family shares
 * (the checksum, page release, the memory and FLOP sums over units). Names no family but the
 * default one a spec without model.type gets. */
#include "worker/model/model.h"

#include "worker/model/export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const rm_model_family *const families[] = {&rm_model_mlp, &rm_model_gpt};

const rm_model_family *rm_model_family_find(const char *name)
{
    if (!name || !*name)
        return families[0];
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i]->name, name) == 0)
            return families[i];
    return NULL;
}

int rm_model_shape_for(const rm_training_spec *t, const rm_model_data *d, const rm_model_family **fam,
                       rm_model_shape *out, rm_err *err)
{
    memset(out, 0, sizeof *out);
    const rm_model_family *f = rm_model_family_find(t->model_type);
    if (!f)
        return rm_err_field(err, RM_EINVAL, "spec.training.model.type", "unknown model type '%s'",
                            t->model_type);
    *fam = f;
    return f->shape(t, d, out, err);
}

int rm_model_plan(rm_model *m, const rm_model_family *f, const rm_model_shape *shape, rm_err *err)
{
    memset(m, 0, sizeof *m);
    if (!f || !shape)
        return rm_errf(err, RM_EINVAL, "model: no family or shape");
    m->family = f;
    m->shape = *shape;
    RM_CHECK(f->plan(m, err));
    if (m->nunits < 1 || m->nunits > RM_MODEL_MAX_UNITS)
        return rm_errf(err, RM_EINVAL, "model: %d units (1..%d)", m->nunits, RM_MODEL_MAX_UNITS);
    size_t at = 0;
    for (int u = 0; u < m->nunits; u++) { /* the units tile the flat buffer in order */
        if (m->unit[u].off != at)
            return rm_errf(err, RM_EINVAL, "model: unit %d starts at %zu, not %zu", u, m->unit[u].off, at);
        at += m->unit[u].len;
        m->unit_off[u] = m->unit[u].off;
        m->unit_len[u] = m->unit[u].len;
    }
    if (at != m->nparams)
        return rm_errf(err, RM_EINVAL, "model: units cover %zu of %zu parameters", at, m->nparams);
    return RM_OK;
}

int rm_model_plan_spec(const rm_training_spec *t, const rm_model_data *d, rm_model *plan, rm_err *err)
{
    const rm_model_family *f;
    rm_model_shape s;
    memset(plan, 0, sizeof *plan);
    RM_CHECK(rm_model_shape_for(t, d, &f, &s, err));
    return rm_model_plan(plan, f, &s, err);
}

void rm_model_free(rm_model *m)
{
    if (!m || !m->k)
        return;
    const rm_kernels *k = m->k;
    if (m->family && m->priv)
        m->family->release(m);
    k->free(m->params);
    k->free(m->grads);
    k->free(m->x);
    k->free(m->labels);
    k->free(m->loss_sum);
    k->free(m->correct);
    memset(m, 0, sizeof *m);
}

int rm_model_init(rm_model *m, const rm_kernels *k, const rm_model_family *f, const rm_model_shape *shape,
                  int max_batch, rm_err *err)
{
    if (!k || max_batch < 1) {
        memset(m, 0, sizeof *m);
        return rm_errf(err, RM_EINVAL, "model: bad shape or batch");
    }
    RM_CHECK(rm_model_plan(m, f, shape, err));
    m->k = k;
    m->max_batch = max_batch;
    size_t B = (size_t)max_batch;
    m->params = k->alloc(m->nparams * sizeof(float));
    m->grads = k->alloc(m->nparams * sizeof(float));
    m->x = k->alloc(B * m->x_row_bytes);
    m->labels = k->alloc(B * (size_t)m->label_row * sizeof(int32_t));
    m->loss_sum = k->alloc(sizeof(float));
    m->correct = k->alloc(sizeof(int32_t));
    int ok = m->params && m->grads && m->x && m->labels && m->loss_sum && m->correct;
    if (ok && f->alloc(m, err) != RM_OK)
        ok = 0;
    if (!ok) {
        size_t total = m->nparams; /* rm_model_free zeroes *m */
        rm_model_free(m);
        return rm_errf(err, RM_ENOMEM, "model: out of memory (%zu params, batch %d)", total, max_batch);
    }
    return RM_OK;
}

int rm_model_init_params(rm_model *m, uint64_t seed, rm_err *err)
{
    return rm_model_init_params_units(m, seed, 0, m->nunits, err);
}

int rm_model_init_params_units(rm_model *m, uint64_t seed, int u0, int u1, rm_err *err)
{
    if (u0 < 0 || u1 > m->nunits || u0 >= u1)
        return rm_errf(err, RM_EINVAL, "model: bad unit range [%d, %d) of %d", u0, u1, m->nunits);
    size_t off = rm_model_units_off(m, u0), len = rm_model_units_len(m, u0, u1);
    /* host tables: straight into the parameters; device tables: a staging copy of the range */
    float *host = m->k->host_memory ? m->params + off : calloc(len, sizeof(float));
    if (!host)
        return rm_errf(err, RM_ENOMEM, "model: out of memory for init");
    if (m->init_weights)
        rm_model_weights_fill(m, m->init_weights, u0, u1, host);
    else
        m->family->init_params(m, seed, u0, u1, host);
    if (!m->k->host_memory) {
        m->k->h2d(m->params + off, host, len * sizeof(float));
        free(host);
    }
    return RM_OK;
}

void rm_model_shape_str(const rm_model *m, char *buf, size_t cap)
{
    m->family->describe(&m->shape, buf, cap);
}

void rm_model_shape_words(const rm_model_shape *s, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0; i <= s->nlayers && i < RM_MODEL_SHAPE_WORDS && used < cap; i++) {
        int w = snprintf(buf + used, cap - used, "%s%d", i ? "-" : "", s->dims[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

void rm_model_forward_pass(rm_model *m, const rm_model_pass *p)
{
    m->family->forward(m, p);
}

void rm_model_backward_pass(rm_model *m, const rm_model_pass *p)
{
    m->family->backward(m, p);
}

void rm_model_loss(rm_model *m, int off, int rows, float inv_batch, float *loss_sum)
{
    m->family->loss(m, off, rows, inv_batch, loss_sum);
}

float *rm_model_output(const rm_model *m, int unit, int off)
{
    return m->family->output(m, unit, off);
}

void rm_model_forward(rm_model *m, int rows)
{
    rm_model_forward_hooked(m, rows, NULL, NULL);
}

void rm_model_forward_hooked(rm_model *m, int rows, rm_unit_pre_fn pre, void *ud)
{
    rm_model_pass p = {.u0 = 0, .u1 = m->nunits, .off = 0, .rows = rows, .pre = pre, .ud = ud};
    m->family->forward(m, &p);
}

/* The loss over the whole batch, then backward of every unit from the loss gradient. */
static void backward_whole(rm_model *m, int rows, float inv_batch, rm_unit_pre_fn pre, rm_unit_ready_fn ready,
                           rm_unit_grad_fn place, void *ud)
{
    m->family->loss(m, 0, rows, inv_batch, m->loss_sum);
    rm_model_pass p = {.u0 = 0,
                       .u1 = m->nunits,
                       .off = 0,
                       .rows = rows,
                       .dy = m->family->output(m, m->nunits - 1, 0),
                       .pre = pre,
                       .ready = ready,
                       .place = place,
                       .ud = ud};
    m->family->backward(m, &p);
}

void rm_model_backward(rm_model *m, int rows, float inv_batch, rm_unit_ready_fn ready, void *ud)
{
    backward_whole(m, rows, inv_batch, NULL, ready, NULL, ud);
}

void rm_model_backward_hooked(rm_model *m, int rows, float inv_batch, rm_unit_pre_fn pre,
                              rm_unit_ready_fn ready, void *ud)
{
    backward_whole(m, rows, inv_batch, pre, ready, NULL, ud);
}

void rm_model_backward_placed(rm_model *m, int rows, float inv_batch, rm_unit_pre_fn pre,
                              rm_unit_grad_fn place, rm_unit_ready_fn ready, void *ud)
{
    backward_whole(m, rows, inv_batch, pre, ready, place, ud);
}

void rm_model_grad_range(const rm_model *m, const rm_unit_grad *g, size_t from, size_t to, float *dst)
{
    m->family->grad_range(m, g, from, to, dst);
}

void rm_model_count_correct(rm_model *m, int rows)
{
    m->family->count_correct(m, rows, m->correct);
}

int rm_model_tensors(const rm_model *m, int u, rm_model_tensor *out, int cap)
{
    return m->family->tensors(m, u, out, cap);
}

double rm_model_bwd_flop_ratio(const rm_model *m)
{
    double fwd = 0, bwd = 0;
    for (int u = 0; u < m->nunits; u++) {
        fwd += (double)m->unit[u].flops_fwd;
        bwd += (double)(u > 0 ? m->unit[u].flops_bwd : m->unit[u].flops_bwd_first);
    }
    return fwd > 0 ? bwd / fwd : 2.0;
}

int rm_model_widest(const rm_model *m)
{
    int w = 0;
    for (int u = 0; u < m->nunits; u++) {
        w = m->unit[u].in_width > w ? m->unit[u].in_width : w;
        w = m->unit[u].out_width > w ? m->unit[u].out_width : w;
    }
    return w;
}

uint64_t rm_model_act_bytes(const rm_model *m)
{
    uint64_t per = m->scratch_row;
    for (int u = 0; u < m->nunits; u++)
        per += m->unit[u].act_floats;
    return (uint64_t)m->max_batch * ((uint64_t)m->x_row_bytes + per * sizeof(float));
}

uint64_t rm_fnv1a64(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t rm_model_checksum(const rm_model *m, void *scratch, size_t scratch_bytes)
{
    uint64_t h = RM_FNV64_INIT;
    size_t total = m->nparams * sizeof(float), done = 0;
    const unsigned char *src = (const unsigned char *)m->params;
    if (m->k->host_memory)
        return rm_fnv1a64(src, total, h);
    while (done < total) {
        size_t n = total - done < scratch_bytes ? total - done : scratch_bytes;
        m->k->d2h(scratch, src + done, n);
        h = rm_fnv1a64(scratch, n, h);
        done += n;
    }
    return h;
}

void rm_model_release_range(const rm_model *m, float *base, size_t from, size_t to)
{
    if (!m->k->host_memory || !base || to <= from)
        return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)(base + from) + pg - 1) & ~(pg - 1);
    uintptr_t b = (uintptr_t)(base + to) & ~(pg - 1);
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}
