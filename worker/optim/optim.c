/* optim.c — dispatch from the optimizer spec to the kernels table's update entries; see optim.h.
 * Design: bias corrections for Adam are computed here in double precision once per step and
 * passed down, so kernels stay element-wise and identical on CPU and GPU. A piece of the flat
 * vector is cut at tensor boundaries only for the optimizers that treat tensors differently
 * (adamw, lamb, lars); sgd, adam and adagrad make one kernel call per piece as before. Trust
 * ratios are computed on the host from the norms (one small copy per step). */
#include "worker/optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/model.h"

const char *rm_optim_name(rm_opt_type t)
{
    return rm_enum_name(rm_opt_names, (int)t);
}

int rm_optim_init(rm_optim *o, const rm_kernels *k, const rm_optimizer_spec *spec, size_t n, rm_err *err)
{
    memset(o, 0, sizeof *o);
    if (!k || !spec || n == 0)
        return rm_errf(err, RM_EINVAL, "optimizer: bad arguments");
    if ((unsigned)spec->type > RM_OPT__LAST)
        return rm_errf(err, RM_EINVAL, "optimizer: unknown type %d", (int)spec->type);
    o->k = k;
    o->spec = *spec;
    o->n = n;
    o->nstate = rm_optim_nstate(spec->type);
    for (int i = 0; i < o->nstate; i++) {
        o->state[i] = k->alloc(n * sizeof(float));
        if (!o->state[i]) {
            rm_optim_free(o);
            return rm_errf(err, RM_ENOMEM, "optimizer: out of memory for %zu floats", n);
        }
    }
    return RM_OK;
}

void rm_optim_free(rm_optim *o)
{
    if (!o || !o->k)
        return;
    for (int i = 0; i < 2; i++)
        o->k->free(o->state[i]);
    o->k->free(o->nbuf);
    free(o->nhost);
    free(o->seg);
    free(o->trust);
    memset(o, 0, sizeof *o);
}

/* Floats one slot takes: two per tensor (layerwise norms), at least one (the gradient norm). */
static size_t slot_width(const rm_optim *o)
{
    size_t w = 2 * (size_t)(o->nseg > 0 ? o->nseg : 1);
    return w;
}

int rm_optim_reserve(rm_optim *o, int norm_slots, int gnorm_slots, rm_err *err)
{
    size_t need = (size_t)(norm_slots > 1 ? norm_slots : 1) * slot_width(o);
    if (gnorm_slots > 0 && (size_t)gnorm_slots > need)
        need = (size_t)gnorm_slots;
    if (need <= o->ncap && o->trust)
        return RM_OK;
    o->k->free(o->nbuf);
    free(o->nhost);
    o->nbuf = o->k->alloc(need * sizeof(float));
    o->nhost = malloc(need * sizeof(float));
    if (!o->trust)
        o->trust = malloc((size_t)(o->nseg > 0 ? o->nseg : 1) * sizeof(double));
    if (!o->nbuf || !o->nhost || !o->trust) {
        o->ncap = 0;
        return rm_errf(err, RM_ENOMEM, "optimizer: out of memory for %zu norm floats", need);
    }
    o->ncap = need;
    for (int i = 0; i < (o->nseg > 0 ? o->nseg : 1); i++)
        o->trust[i] = 1.0;
    return RM_OK;
}

static int seg_cmp(const void *a, const void *b)
{
    const rm_optim_seg *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

int rm_optim_set_tensors(rm_optim *o, const rm_optim_seg *seg, int nseg, rm_err *err)
{
    if (nseg < 0 || (nseg > 0 && !seg))
        return rm_errf(err, RM_EINVAL, "optimizer: bad tensor list");
    rm_optim_seg *c = nseg ? malloc((size_t)nseg * sizeof *c) : NULL;
    if (nseg && !c)
        return rm_errf(err, RM_ENOMEM, "optimizer: out of memory for %d tensors", nseg);
    if (nseg)
        memcpy(c, seg, (size_t)nseg * sizeof *c);
    qsort(c, (size_t)nseg, sizeof *c, seg_cmp);
    for (int i = 1; i < nseg; i++)
        if (c[i].off < c[i - 1].off + c[i - 1].len) {
            size_t at = c[i].off;
            free(c);
            return rm_errf(err, RM_EINVAL, "optimizer: tensors overlap at float %zu", at);
        }
    free(o->seg);
    free(o->trust);
    o->trust = NULL;
    o->seg = c;
    o->nseg = nseg;
    o->ncap = 0; /* the slot width changed */
    return rm_optim_reserve(o, 1, 1, err);
}

int rm_optim_tensors_from_model(rm_optim *o, const rm_model *m, rm_err *err)
{
    int total = 0;
    for (int u = 0; u < m->nunits; u++)
        total += rm_model_tensors(m, u, NULL, 0);
    rm_model_tensor *t = calloc((size_t)(total > 0 ? total : 1), sizeof *t);
    rm_optim_seg *s = calloc((size_t)(total > 0 ? total : 1), sizeof *s);
    if (!t || !s) {
        free(t);
        free(s);
        return rm_errf(err, RM_ENOMEM, "optimizer: out of memory for %d tensors", total);
    }
    int n = 0;
    for (int u = 0; u < m->nunits && n < total; u++)
        n += rm_model_tensors(m, u, t + n, total - n);
    for (int i = 0; i < n; i++) {
        size_t len = 1;
        for (int d = 0; d < t[i].ndim; d++)
            len *= (size_t)t[i].shape[d];
        s[i] = (rm_optim_seg){.off = t[i].off, .len = len, .decay = t[i].ndim >= 2};
    }
    int rc = rm_optim_set_tensors(o, s, n, err);
    free(t);
    free(s);
    return rc;
}

void rm_optim_tick(rm_optim *o)
{
    o->t++;
}

bool rm_optim_layerwise(const rm_optim *o)
{
    return o->spec.type == RM_OPT_LAMB || o->spec.type == RM_OPT_LARS;
}

static bool per_tensor(const rm_optim *o)
{
    return o->spec.type == RM_OPT_ADAMW || rm_optim_layerwise(o);
}

/* The tensor pieces of [flat_off, flat_off + n), in order: fn(tensor index, decay, offset within
 * the range, length). With no tensor list the range is one decayed tensor (index 0); floats
 * between listed tensors (none in a family that tiles its units) are index -2: not decayed, not
 * adapted. */
typedef void (*piece_fn)(rm_optim *o, int ti, bool decay, size_t rel, size_t len, void *ud);

static void for_pieces(rm_optim *o, size_t n, size_t flat_off, piece_fn fn, void *ud)
{
    if (n == 0)
        return;
    if (o->nseg == 0) {
        fn(o, 0, true, 0, n, ud);
        return;
    }
    size_t end = flat_off + n;
    /* first tensor ending after flat_off */
    int lo = 0, hi = o->nseg;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (o->seg[mid].off + o->seg[mid].len <= flat_off)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t pos = flat_off;
    for (int i = lo; i < o->nseg && pos < end; i++) {
        const rm_optim_seg *sg = &o->seg[i];
        if (sg->off > pos) { /* a gap: not a named tensor */
            size_t g = (sg->off < end ? sg->off : end) - pos;
            fn(o, -2, false, pos - flat_off, g, ud);
            pos += g;
            if (pos >= end)
                break;
        }
        size_t e = sg->off + sg->len < end ? sg->off + sg->len : end;
        fn(o, i, sg->decay, pos - flat_off, e - pos, ud);
        pos = e;
    }
    if (pos < end)
        fn(o, -2, false, pos - flat_off, end - pos, ud);
}

typedef struct upd_args {
    float *w;
    const float *g;
    float *const *st;
    float lr;
    int slot;
} upd_args;

static void bias_corrections(const rm_optim *o, float *bc1, float *bc2)
{
    *bc1 = (float)(1.0 - pow(o->spec.beta1, (double)o->t));
    *bc2 = (float)(1.0 - pow(o->spec.beta2, (double)o->t));
}

static void upd_piece(rm_optim *o, int ti, bool decay, size_t rel, size_t len, void *ud)
{
    const upd_args *a = ud;
    const rm_optimizer_spec *s = &o->spec;
    float *w = a->w + rel;
    const float *g = a->g + rel;
    float wd = decay ? (float)s->weight_decay : 0.0f;
    double trust = ti >= 0 && o->trust ? o->trust[ti] : 1.0;
    float lr = (float)((double)a->lr * trust);
    float bc1, bc2;
    switch (s->type) {
    case RM_OPT_ADAMW:
        bias_corrections(o, &bc1, &bc2);
        o->k->adamw_update(w, g, a->st[0] + rel, a->st[1] + rel, len, a->lr, (float)s->beta1, (float)s->beta2,
                           (float)s->eps, wd, bc1, bc2);
        break;
    case RM_OPT_LAMB:
        bias_corrections(o, &bc1, &bc2);
        o->k->lamb_apply(w, a->st[0] + rel, a->st[1] + rel, len, lr, (float)s->eps, wd, bc1, bc2);
        break;
    case RM_OPT_LARS:
        o->k->lars_update(w, g, a->st[0] + rel, len, lr, (float)s->momentum, wd);
        break;
    default:
        break;
    }
}

void rm_optim_update_range(const rm_optim *o, float *params, const float *grads, float *const *state,
                           size_t n, size_t flat_off, float lr)
{
    const rm_optimizer_spec *s = &o->spec;
    if (n == 0)
        return;
    if (per_tensor(o)) {
        upd_args a = {params, grads, state, lr, 0};
        /* the pieces only read the optimizer's tensor list and trust ratios */
        for_pieces((rm_optim *)o, n, flat_off, upd_piece, &a);
        return;
    }
    switch (s->type) {
    case RM_OPT_SGD:
        o->k->sgd_momentum_update(params, grads, state[0], n, lr, (float)s->momentum, (float)s->weight_decay);
        break;
    case RM_OPT_ADAM: {
        float bc1, bc2;
        bias_corrections(o, &bc1, &bc2);
        o->k->adam_update(params, grads, state[0], state[1], n, lr, (float)s->beta1, (float)s->beta2,
                          (float)s->eps, (float)s->weight_decay, bc1, bc2);
        break;
    }
    case RM_OPT_ADAGRAD:
        o->k->adagrad_update(params, grads, state[0], n, lr, (float)s->eps, (float)s->weight_decay);
        break;
    case RM_OPT_LBFGS:
        /* The L-BFGS update runs on the parameter servers (worker/ps/lbfgs_coord.c); a worker of an
         * lbfgs job only computes gradients. Here, for completeness, a plain gradient step. */
        o->k->sgd_momentum_update(params, grads, state[0], n, lr, 0.0f, (float)s->weight_decay);
        break;
    default: /* adamw, lamb, lars: per tensor above */
        break;
    }
}

/* ---- norms ---- */

static int zero_slots(rm_optim *o, int nslots, size_t width, rm_err *err)
{
    size_t need = (size_t)(nslots < 1 ? 1 : nslots) * width;
    if (!o->nbuf || need > o->ncap)
        return rm_errf(err, RM_EINVAL, "optimizer: %d norm slots, room for %zu floats (rm_optim_reserve)",
                       nslots, o->ncap);
    o->nslots = nslots < 1 ? 1 : nslots;
    int rc = o->k->memset0(o->nbuf, need * sizeof(float));
    return rc ? rm_errf(err, rc, "optimizer: clearing the norm buffer failed") : RM_OK;
}

int rm_optim_norms_begin(rm_optim *o, int nslots, rm_err *err)
{
    if (!rm_optim_layerwise(o))
        return RM_OK;
    return zero_slots(o, nslots, slot_width(o), err);
}

static void norm_piece(rm_optim *o, int ti, bool decay, size_t rel, size_t len, void *ud)
{
    const upd_args *a = ud;
    const rm_optimizer_spec *s = &o->spec;
    float *acc = o->nbuf + (size_t)a->slot * slot_width(o) + 2 * (size_t)(ti >= 0 ? ti : 0);
    if (o->spec.type == RM_OPT_LAMB) {
        float bc1, bc2;
        bias_corrections(o, &bc1, &bc2);
        /* the moments advance for every tensor; only adapted ones' sums are read */
        o->k->lamb_moments(a->w + rel, a->g + rel, a->st[0] + rel, a->st[1] + rel, len, (float)s->beta1,
                           (float)s->beta2, (float)s->eps, decay ? (float)s->weight_decay : 0.0f, bc1, bc2,
                           acc);
    } else if (decay) { /* lars: only adapted tensors need their norms */
        o->k->sumsq(a->w + rel, len, acc);
        o->k->sumsq(a->g + rel, len, acc + 1);
    }
}

void rm_optim_norms_range(rm_optim *o, int slot, const float *params, const float *grads, float *const *state,
                          size_t n, size_t flat_off)
{
    if (!rm_optim_layerwise(o) || slot < 0 || slot >= o->nslots)
        return;
    upd_args a = {(float *)params, grads, state, 0, slot};
    for_pieces(o, n, flat_off, norm_piece, &a);
}

float *rm_optim_norms_buf(const rm_optim *o, size_t *count)
{
    *count = rm_optim_layerwise(o) ? (size_t)o->nslots * slot_width(o) : 0;
    return o->nbuf;
}

double rm_lamb_trust(double w_norm, double r_norm)
{
    return w_norm > 0 && r_norm > 0 ? w_norm / r_norm : 1.0;
}

double rm_lars_trust(double w_norm, double g_norm, double wd)
{
    return w_norm > 0 && g_norm > 0 ? RM_LARS_ETA * w_norm / (g_norm + wd * w_norm) : 1.0;
}

int rm_optim_norms_finish(rm_optim *o, rm_err *err)
{
    if (!rm_optim_layerwise(o))
        return RM_OK;
    size_t w = slot_width(o), cnt = (size_t)o->nslots * w;
    int rc = o->k->d2h(o->nhost, o->nbuf, cnt * sizeof(float));
    if (rc)
        return rm_errf(err, rc, "optimizer: reading the tensor norms failed");
    int nt = o->nseg > 0 ? o->nseg : 1;
    for (int i = 0; i < nt; i++) {
        bool adapt = o->nseg > 0 ? o->seg[i].decay : true;
        double a = 0, b = 0;
        for (int sl = 0; sl < o->nslots; sl++) {
            a += (double)o->nhost[(size_t)sl * w + 2 * (size_t)i];
            b += (double)o->nhost[(size_t)sl * w + 2 * (size_t)i + 1];
        }
        if (!adapt)
            o->trust[i] = 1.0;
        else if (o->spec.type == RM_OPT_LAMB)
            o->trust[i] = rm_lamb_trust(sqrt(a), sqrt(b));
        else
            o->trust[i] = rm_lars_trust(sqrt(a), sqrt(b), o->spec.weight_decay);
    }
    return RM_OK;
}

double rm_optim_trust(const rm_optim *o, int i)
{
    return o->trust && i >= 0 && i < (o->nseg > 0 ? o->nseg : 1) ? o->trust[i] : 1.0;
}

void rm_optim_step(rm_optim *o, float *params, const float *grads, float lr)
{
    rm_optim_tick(o);
    if (rm_optim_layerwise(o)) {
        rm_err e = {0};
        if (rm_optim_reserve(o, 1, 1, &e) != RM_OK || rm_optim_norms_begin(o, 1, &e) != RM_OK)
            return; /* out of memory at the first step: the update is skipped */
        rm_optim_norms_range(o, 0, params, grads, o->state, o->n, o->base);
        /* a failed read leaves the trust ratios of the last step; the table's check() reports it */
        (void)rm_optim_norms_finish(o, &e);
    }
    rm_optim_update_range(o, params, grads, o->state, o->n, o->base, lr);
}

/* ---- the global gradient norm ---- */

int rm_optim_gnorm_begin(rm_optim *o, int nslots, rm_err *err)
{
    return zero_slots(o, nslots, 1, err);
}

void rm_optim_gnorm_add(rm_optim *o, int slot, const float *grads, size_t n)
{
    if (slot < 0 || slot >= o->nslots || n == 0)
        return;
    o->k->sumsq(grads, n, o->nbuf + slot);
}

float *rm_optim_gnorm_buf(const rm_optim *o, size_t *count)
{
    *count = (size_t)o->nslots;
    return o->nbuf;
}

int rm_optim_gnorm_finish(rm_optim *o, double *norm, rm_err *err)
{
    int rc = o->k->d2h(o->nhost, o->nbuf, (size_t)o->nslots * sizeof(float));
    if (rc)
        return rm_errf(err, rc, "optimizer: reading the gradient norm failed");
    double s = 0;
    for (int i = 0; i < o->nslots; i++)
        s += (double)o->nhost[i];
    *norm = sqrt(s);
    return RM_OK;
}

float rm_clip_scale(double norm, double clip)
{
    if (!(clip > 0))
        return 1.0f;
    double c = clip / (norm + RM_CLIP_EPS);
    return c < 1.0 ? (float)c : 1.0f;
}
