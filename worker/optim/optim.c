/* optim.c — dispatch from the optimizer spec to the kernels table's update entries; see optim.h.
 * Design: bias corrections for Adam are computed here in double precision once per step and
 * passed down, so kernels stay element-wise and identical on CPU and GPU. */
#include "worker/optim/optim.h"

#include <math.h>
#include <string.h>

const char *rm_optim_name(rm_opt_type t)
{
    return rm_enum_name(rm_opt_names, (int)t);
}

int rm_optim_init(rm_optim *o, const rm_kernels *k, const rm_optimizer_spec *spec, size_t n, rm_err *err)
{
    memset(o, 0, sizeof *o);
    if (!k || !spec || n == 0)
        return rm_errf(err, RM_EINVAL, "optimizer: bad arguments");
    if (spec->type != RM_OPT_SGD && spec->type != RM_OPT_ADAM && spec->type != RM_OPT_ADAGRAD &&
        spec->type != RM_OPT_LBFGS)
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
    memset(o, 0, sizeof *o);
}

void rm_optim_tick(rm_optim *o)
{
    o->t++;
}

void rm_optim_update_range(const rm_optim *o, float *params, const float *grads, float *const *state,
                           size_t n, float lr)
{
    const rm_optimizer_spec *s = &o->spec;
    if (n == 0)
        return;
    switch (s->type) {
    case RM_OPT_SGD:
        o->k->sgd_momentum_update(params, grads, state[0], n, lr, (float)s->momentum, (float)s->weight_decay);
        break;
    case RM_OPT_ADAM: {
        float bc1 = (float)(1.0 - pow(s->beta1, (double)o->t));
        float bc2 = (float)(1.0 - pow(s->beta2, (double)o->t));
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
    }
}

void rm_optim_step(rm_optim *o, float *params, const float *grads, float lr)
{
    rm_optim_tick(o);
    rm_optim_update_range(o, params, grads, o->state, o->n, lr);
}
