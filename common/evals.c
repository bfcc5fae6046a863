/* evals.c — the step-keyed evaluation list (see evals.h). */
#include "common/evals.h"

#include <string.h>

/* <0, 0, >0 as x sorts before, with, after y: by step when both have one, else by epoch. */
static int key_cmp(const rm_eval *x, const rm_eval *y)
{
    if (x->step > 0 && y->step > 0)
        return x->step < y->step ? -1 : x->step > y->step;
    return x->epoch < y->epoch ? -1 : x->epoch > y->epoch;
}

/* Field by field over zeroed bytes: the padding after epoch stays zero, so two lists with the
 * same entries compare equal byte for byte (status round trips are checked that way). */
static void put(rm_eval *dst, const rm_eval *src)
{
    rm_eval v = *src;
    memset(dst, 0, sizeof *dst);
    dst->epoch = v.epoch;
    dst->step = v.step;
    dst->test_accuracy = v.test_accuracy;
    dst->train_loss = v.train_loss;
    dst->val_loss = v.val_loss;
}

int rm_eval_add(rm_eval *a, int *n, int cap, const rm_eval *e)
{
    if (!a || !n || !e || cap < 1 || e->epoch < 1 || e->step < 0 || *n < 0 || *n > cap)
        return 0;
    int i = 0, c = 1;
    while (i < *n && (c = key_cmp(&a[i], e)) < 0)
        i++;
    if (i < *n && c == 0) {
        rm_eval v = *e;
        if (v.step == 0) /* a stepless report of an epoch keeps the step already known */
            v.step = a[i].step;
        const rm_eval *o = &a[i];
        if (o->epoch == v.epoch && o->step == v.step && o->test_accuracy == v.test_accuracy &&
            o->train_loss == v.train_loss && o->val_loss == v.val_loss)
            return 0;
        put(&a[i], &v);
        return 1;
    }
    if (*n == cap) { /* full: the oldest makes room, unless e is older still */
        if (i == 0)
            return 0;
        memmove(&a[0], &a[1], (size_t)(i - 1) * sizeof a[0]);
        put(&a[i - 1], e);
        return 1;
    }
    memmove(&a[i + 1], &a[i], (size_t)(*n - i) * sizeof a[0]);
    put(&a[i], e);
    (*n)++;
    return 1;
}
