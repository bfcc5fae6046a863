/* fusion.c — gradient buckets in reverse layer order, allreduced on a comm thread while backward
 * continues (see fusion.h).
 *
 * Design: the plan (buckets, layer->bucket map) and the job queue are built once; a step only
 * flips counters under one mutex. Buckets are launched strictly in plan order (a complete bucket
 * waits for earlier ones) so every rank issues the same sequence of collectives even if layers
 * are marked ready in a slightly different order — a different order would desynchronise the ring.
 * After the first failure in a step the remaining buckets are skipped (the comm is unusable) and
 * finish() returns that first error. */
#include "worker/allreduce/fusion.h"
#include "common/clock.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "worker/comm/net.h"

typedef struct fbucket {
    size_t off, len; /* floats */
    int first, last; /* layers [first, last] */
    int nlayers;
} fbucket;

struct rm_fusion {
    const rm_comm_ops *ops;
    rm_comm *comm;
    float *grads;
    int nlayers, nb, world;
    fbucket *b;
    int *layer_bucket;
    int *pending;         /* per bucket: layers not yet ready this step */
    unsigned char *ready; /* per layer */
    int *queue;           /* ring of nb bucket ids */
    int qhead, qtail, qlen;

    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    int stop, in_step;
    int next_launch, completed;
    int step_rc;
    rm_err step_err;
    double t_begin, ar_s;
    rm_fusion_stats stats;
};

static void *fusion_thread(void *arg)
{
    rm_fusion *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->stop && f->qlen == 0)
            pthread_cond_wait(&f->cv_job, &f->mu);
        if (f->qlen == 0 && f->stop)
            break;
        int id = f->queue[f->qhead];
        f->qhead = (f->qhead + 1) % f->nb;
        f->qlen--;
        int failed = f->step_rc != 0;
        pthread_mutex_unlock(&f->mu);
        int rc = RM_OK;
        rm_err e = {0};
        double t0 = rm_mono(), dt = 0;
        if (!failed && f->b[id].len > 0) {
            float *g = f->grads + f->b[id].off;
            rc = f->ops->allreduce(f->comm, g, f->b[id].len, RM_DT_F32, RM_OP_AVG, &e);
            dt = rm_mono() - t0;
        }
        pthread_mutex_lock(&f->mu);
        f->ar_s += dt;
        if (rc && !f->step_rc) {
            f->step_rc = rc;
            f->step_err = e;
        }
        f->completed++;
        pthread_cond_broadcast(&f->cv_done);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

void rm_fusion_free(rm_fusion *f)
{
    if (!f)
        return;
    if (f->th_started) {
        pthread_mutex_lock(&f->mu);
        f->stop = 1;
        pthread_cond_broadcast(&f->cv_job);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->th, NULL);
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv_job);
        pthread_cond_destroy(&f->cv_done);
    }
    free(f->b);
    free(f->layer_bucket);
    free(f->pending);
    free(f->ready);
    free(f->queue);
    free(f);
}

int rm_fusion_new(const rm_comm_ops *ops, rm_comm *comm, float *grads, const size_t *layer_off,
                  const size_t *layer_len, int nlayers, size_t threshold_bytes, rm_fusion **out, rm_err *err)
{
    if (!ops || !ops->allreduce || !out || !layer_off || !layer_len || nlayers < 1)
        return rm_errf(err, RM_EINVAL, "fusion: bad arguments (need ops, layers >= 1)");
    for (int i = 0; i < nlayers; i++) {
        if (layer_off[i] + layer_len[i] < layer_off[i])
            return rm_errf(err, RM_EINVAL, "fusion: layer %d overflows", i);
        if (i > 0 && layer_off[i] < layer_off[i - 1] + layer_len[i - 1])
            return rm_errf(err, RM_EINVAL, "fusion: layer %d overlaps or precedes layer %d", i, i - 1);
    }
    if (!grads && layer_off[nlayers - 1] + layer_len[nlayers - 1] > 0)
        return rm_errf(err, RM_EINVAL, "fusion: NULL gradient buffer");
    rm_fusion *f = calloc(1, sizeof *f);
    if (!f)
        return rm_errf(err, RM_ENOMEM, "out of memory");
    f->ops = ops;
    f->comm = comm;
    f->grads = grads;
    f->nlayers = nlayers;
    f->world = 1;
    f->b = calloc((size_t)nlayers, sizeof *f->b);
    f->layer_bucket = calloc((size_t)nlayers, sizeof *f->layer_bucket);
    f->pending = calloc((size_t)nlayers, sizeof *f->pending);
    f->ready = calloc((size_t)nlayers, 1);
    f->queue = calloc((size_t)nlayers, sizeof *f->queue);
    if (!f->b || !f->layer_bucket || !f->pending || !f->ready || !f->queue) {
        rm_fusion_free(f);
        return rm_errf(err, RM_ENOMEM, "out of memory");
    }
    /* plan: from the last layer backwards, close a bucket once it holds >= threshold bytes */
    int nb = 0;
    size_t bytes = 0;
    int hi = nlayers - 1;
    for (int l = nlayers - 1; l >= 0; l--) {
        bytes += layer_len[l] * sizeof(float);
        f->layer_bucket[l] = nb;
        if (bytes >= threshold_bytes || l == 0) {
            fbucket *b = &f->b[nb++];
            b->first = l;
            b->last = hi;
            b->nlayers = hi - l + 1;
            b->off = layer_off[l];
            b->len = layer_off[hi] + layer_len[hi] - layer_off[l];
            hi = l - 1;
            bytes = 0;
        }
    }
    f->nb = nb;
    f->stats.nbuckets = nb;
    if (pthread_mutex_init(&f->mu, NULL) || pthread_cond_init(&f->cv_job, NULL) ||
        pthread_cond_init(&f->cv_done, NULL)) {
        free(f->b);
        free(f->layer_bucket);
        free(f->pending);
        free(f->ready);
        free(f->queue);
        free(f);
        return rm_errf(err, RM_ENOMEM, "fusion: pthread init failed");
    }
    if (pthread_create(&f->th, NULL, fusion_thread, f)) {
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv_job);
        pthread_cond_destroy(&f->cv_done);
        free(f->b);
        free(f->layer_bucket);
        free(f->pending);
        free(f->ready);
        free(f->queue);
        free(f);
        return rm_errf(err, RM_ENOMEM, "fusion: cannot start the comm thread");
    }
    f->th_started = 1;
    *out = f;
    return RM_OK;
}

void rm_fusion_set_world_size(rm_fusion *f, int world_size)
{
    if (f && world_size >= 1)
        f->world = world_size;
}

int rm_fusion_nbuckets(const rm_fusion *f)
{
    return f ? f->nb : 0;
}

int rm_fusion_bucket(const rm_fusion *f, int b, size_t *off, size_t *len, int *first_layer, int *last_layer)
{
    if (!f || b < 0 || b >= f->nb)
        return RM_EINVAL;
    if (off)
        *off = f->b[b].off;
    if (len)
        *len = f->b[b].len;
    if (first_layer)
        *first_layer = f->b[b].first;
    if (last_layer)
        *last_layer = f->b[b].last;
    return RM_OK;
}

void rm_fusion_begin(rm_fusion *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    memset(f->ready, 0, (size_t)f->nlayers);
    for (int i = 0; i < f->nb; i++)
        f->pending[i] = f->b[i].nlayers;
    f->next_launch = 0;
    f->completed = 0;
    f->step_rc = 0;
    f->step_err.code = 0;
    f->step_err.msg[0] = '\0';
    f->step_err.field[0] = '\0';
    f->ar_s = 0;
    f->in_step = 1;
    f->t_begin = rm_mono();
    pthread_mutex_unlock(&f->mu);
}

/* Queue every complete bucket whose predecessors are queued. Caller holds mu. */
static void launch_ready(rm_fusion *f)
{
    int pushed = 0;
    while (f->next_launch < f->nb && f->pending[f->next_launch] == 0) {
        f->queue[f->qtail] = f->next_launch++;
        f->qtail = (f->qtail + 1) % f->nb;
        f->qlen++;
        pushed = 1;
    }
    if (pushed)
        pthread_cond_signal(&f->cv_job);
}

int rm_fusion_ready(rm_fusion *f, int layer)
{
    if (!f)
        return RM_EINVAL;
    pthread_mutex_lock(&f->mu);
    int rc = RM_OK;
    if (!f->in_step || layer < 0 || layer >= f->nlayers || f->ready[layer]) {
        rc = RM_EINVAL;
        if (!f->step_rc && f->in_step) {
            f->step_rc = rc;
            rm_errf(&f->step_err, rc, "fusion: layer %d marked ready twice or out of range", layer);
        }
    } else {
        f->ready[layer] = 1;
        f->pending[f->layer_bucket[layer]]--;
        launch_ready(f);
    }
    pthread_mutex_unlock(&f->mu);
    return rc;
}

int rm_fusion_finish(rm_fusion *f, rm_err *err)
{
    if (!f)
        return rm_errf(err, RM_EINVAL, "fusion: NULL");
    double tw = rm_mono();
    pthread_mutex_lock(&f->mu);
    if (!f->in_step) {
        pthread_mutex_unlock(&f->mu);
        return rm_errf(err, RM_EINVAL, "fusion: finish without begin");
    }
    for (int l = f->nlayers - 1; l >= 0; l--)
        if (!f->ready[l]) {
            f->ready[l] = 1;
            f->pending[f->layer_bucket[l]]--;
        }
    launch_ready(f);
    while (f->completed < f->nb)
        pthread_cond_wait(&f->cv_done, &f->mu);
    f->in_step = 0;
    double now = rm_mono();
    int rc = f->step_rc;
    if (rc && err)
        *err = f->step_err;
    rm_fusion_stats *s = &f->stats;
    uint64_t bytes = 0;
    for (int i = 0; i < f->nb; i++)
        bytes += (uint64_t)f->b[i].len * sizeof(float);
    s->bytes = bytes;
    s->wait_s = now - tw;
    s->step_s = now - f->t_begin;
    s->allreduce_s = f->ar_s;
    if (!rc) {
        s->total_bytes += bytes;
        s->steps++;
    }
    s->algbw_gbps = f->ar_s > 0 ? (double)bytes / f->ar_s / 1e9 : 0;
    s->busbw_gbps = s->algbw_gbps * (f->world > 1 ? 2.0 * (f->world - 1) / f->world : 0.0);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

void rm_fusion_get_stats(const rm_fusion *f, rm_fusion_stats *out)
{
    if (!f || !out)
        return;
    pthread_mutex_lock((pthread_mutex_t *)&f->mu);
    *out = f->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&f->mu);
}
